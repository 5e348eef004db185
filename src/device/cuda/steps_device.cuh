/* Step math of the CUDA executor: for a lane (one work item's share on one channel, or one
 * direction of a tree) and a step index k, which connections step k receives from and sends to,
 * which part of the user's buffers it reads and writes, and whether it reduces. Pure functions,
 * included by kernel.cu only.
 *
 * This is the host executor's step math (src/device/host/steps.c) line for line: both ends of a
 * connection must cut it into the same steps carrying the same data, whichever executor drives
 * each end. Keep the two in step when either changes.
 *
 * Ring (n ranks, my ring index idx, data flows idx -> idx+1):
 *   AllReduce     (2 ranks, LL/LL128: the exchange of device.h's RING_ALLREDUCE_EXCHANGE)
 *                 loops of n parts of at most `chunk` elements; per loop 2n-1 steps:
 *                 s=0 send part idx-1; s=1..n-2 recv part idx-1-s, reduce, send;
 *                 s=n-1 recv part idx, reduce, finish (postop), output, send;
 *                 s=n-1+t (t=1..n-1) recv part idx-t, output, send unless t=n-1.
 *   ReduceScatter per chunk n steps over the blocks (block m = rank ring[m]'s):
 *                 s=0 send block idx-1; s=1..n-2 recv block idx-1-s, reduce, send;
 *                 s=n-1 recv block idx, reduce, finish, output.
 *   AllGather     per chunk n steps: s=0 send my block (and copy it to my output block);
 *                 s=1..n-1 recv block idx-s, output, send unless s=n-1.
 *   Broadcast     per chunk one step along the chain root -> root+1 -> ... -> root-1.
 *   Reduce        per chunk one step along the chain root+1 -> ... -> root-1 -> root.
 * Tree (AllReduce): per chunk an up step (recv every child, reduce with mine, send to the parent;
 * the root finishes and outputs) and a down step (recv from the parent, output, send to every
 * child; the root sends its output).
 * One-shot (AllReduce, device.h's ALGO_ONESHOT; CUDA executor only): per chunk a send step (my
 * chunk to every other rank) and a receive step (every other rank's chunk combined with mine in
 * rank order, finish, output). */
#ifndef BATON_DEVICE_CUDA_STEPS_DEVICE_CUH
#define BATON_DEVICE_CUDA_STEPS_DEVICE_CUH

#include "device/cuda/prims_device.cuh"

namespace baton {

enum {
  LANE_LOCAL,
  LANE_RING,
  LANE_TREE_UP,
  LANE_TREE_DOWN,
  LANE_SEND,
  LANE_RECV,
  LANE_ONESHOT_SEND, /* conns 0 .. n-2: to the other ranks in rank order */
  LANE_ONESHOT_RECV  /* conns 0 .. n-2: from the other ranks in rank order */
};

/* Connection slots of a group (indexes into grp_t.conns). */
enum { CONN_RING_RECV = 0, CONN_RING_SEND = 1, CONN_TREE_UP = TREE_MAX_CHILDREN, CONN_P2P = 0 };
#define GRP_CONNS (TREE_MAX_CHILDREN + 1)

struct lane_t {
  int kind, func, proto;
  size_t unit; /* bytes per unit (datatype size; 1 for point-to-point) */
  const char* sendbuff;
  char* recvbuff;
  size_t count;    /* work count (per-rank count for AllGather/ReduceScatter) */
  size_t off, cnt; /* the channel's slice, in units */
  size_t chunk;    /* units per step */
  int n, idx, root_idx, rank;
  const int* ring;
  bool has_up; /* tree: a parent (conn CONN_TREE_UP) */
  int ndown;   /* tree: children (conns 0 .. ndown-1) */
};

/* a / b and a % b, in 32 bits when both fit (a 64-bit division is a long software routine). */
static __device__ __forceinline__ size_t udiv(size_t a, size_t b) {
  return ((a | b) >> 32) == 0 ? (size_t)((uint32_t)a / (uint32_t)b) : a / b;
}
static __device__ __forceinline__ size_t umod(size_t a, size_t b) {
  return ((a | b) >> 32) == 0 ? (size_t)((uint32_t)a % (uint32_t)b) : a % b;
}
static __device__ __forceinline__ size_t div_up(size_t a, size_t b) {
  return udiv(a + b - 1, b);
}
static __device__ __forceinline__ size_t min_sz(size_t a, size_t b) {
  return a < b ? a : b;
}
static __device__ __forceinline__ int ring_mod(int a, int n) {
  return ((a % n) + n) % n;
}

static __device__ size_t lane_nops(const lane_t& ln) {
  if (ln.cnt == 0) return 0;
  switch (ln.kind) {
    case LANE_LOCAL:
      return 1;
    case LANE_RING:
      switch (ln.func) {
        case FUNC_ALLREDUCE:
          if (RING_ALLREDUCE_EXCHANGE(ln.n, ln.proto)) return div_up(ln.cnt, ln.chunk) * 2;
          return div_up(ln.cnt, (size_t)ln.n * ln.chunk) * (size_t)(2 * ln.n - 1);
        case FUNC_ALLGATHER:
        case FUNC_REDUCESCATTER:
          return div_up(ln.cnt, ln.chunk) * (size_t)ln.n;
        default:
          return div_up(ln.cnt, ln.chunk);
      }
    case LANE_TREE_DOWN:
      return ln.has_up || ln.ndown > 0 ? div_up(ln.cnt, ln.chunk) : 0;
    default:
      return div_up(ln.cnt, ln.chunk); /* tree up, send, recv, one-shot */
  }
}

static __device__ __forceinline__ const char* at_in(const lane_t& ln, const char* base, size_t u) {
  return base + u * ln.unit;
}
static __device__ __forceinline__ char* at_out(const lane_t& ln, char* base, size_t u) {
  return base + u * ln.unit;
}
static __device__ __forceinline__ void step_recv(dstep_t& st, int conn) {
  st.recv[st.nrecv++] = conn;
}
static __device__ __forceinline__ void step_send(dstep_t& st, int conn) {
  st.send[st.nsend++] = conn;
}

static __device__ __forceinline__ void chunk_of(const lane_t& ln, size_t k, size_t& x, size_t& c) {
  size_t start = k * ln.chunk;
  x = ln.off + start;
  c = min_sz(ln.chunk, ln.cnt - start);
}

/* RING_ALLREDUCE_EXCHANGE: step 2c sends chunk c, step 2c+1 receives the peer's and finishes. */
static __device__ void step_ring_exchange(const lane_t& ln, size_t k, dstep_t& st) {
  size_t x, c;
  chunk_of(ln, k >> 1, x, c);
  st.nelem = c;
  st.local = at_in(ln, ln.sendbuff, x);
  st.reduce = true;
  if ((k & 1) == 0) {
    step_send(st, CONN_RING_SEND);
  } else {
    step_recv(st, CONN_RING_RECV);
    st.postop = true;
    st.out = at_out(ln, ln.recvbuff, x);
  }
}

static __device__ void step_ring_allreduce(const lane_t& ln, size_t k, dstep_t& st) {
  if (RING_ALLREDUCE_EXCHANGE(ln.n, ln.proto)) {
    step_ring_exchange(ln, k, st);
    return;
  }
  const int n = ln.n, idx = ln.idx;
  const size_t per_loop = (size_t)(2 * n - 1);
  const size_t loop = udiv(k, per_loop);
  const int s = (int)umod(k, per_loop);
  const size_t loop_elems = (size_t)n * ln.chunk;
  const size_t lbase = loop * loop_elems;
  const size_t lc = min_sz(loop_elems, ln.cnt - lbase);
  const size_t part = ring_part(lc, (size_t)n, ln.unit, ln.chunk);
  const int m = ring_mod(s <= n - 1 ? idx - 1 - s : idx - (s - (n - 1)), n);
  const size_t pstart = min_sz((size_t)m * part, lc), pend = min_sz((size_t)(m + 1) * part, lc);
  const size_t x = ln.off + lbase + pstart;
  st.nelem = pend - pstart;
  if (s <= n - 1) { /* reduce-scatter phase */
    if (s > 0) step_recv(st, CONN_RING_RECV);
    st.local = at_in(ln, ln.sendbuff, x);
    st.reduce = true;
    if (s == n - 1) {
      st.postop = true;
      st.out = at_out(ln, ln.recvbuff, x);
    }
    step_send(st, CONN_RING_SEND);
  } else { /* all-gather phase */
    step_recv(st, CONN_RING_RECV);
    st.out = at_out(ln, ln.recvbuff, x);
    if (s - (n - 1) <= n - 2) step_send(st, CONN_RING_SEND);
  }
}

static __device__ void step_ring_reducescatter(const lane_t& ln, size_t k, dstep_t& st) {
  const int n = ln.n, idx = ln.idx;
  const int s = (int)umod(k, (size_t)n);
  size_t x, c;
  chunk_of(ln, udiv(k, (size_t)n), x, c);
  const int m = ring_mod(s == n - 1 ? idx : idx - 1 - s, n);
  st.nelem = c;
  st.local = at_in(ln, ln.sendbuff, (size_t)ln.ring[m] * ln.count + x);
  st.reduce = true;
  if (s > 0) step_recv(st, CONN_RING_RECV);
  if (s < n - 1) {
    step_send(st, CONN_RING_SEND);
  } else {
    st.postop = true;
    st.out = at_out(ln, ln.recvbuff, x);
  }
}

static __device__ void step_ring_allgather(const lane_t& ln, size_t k, dstep_t& st) {
  const int n = ln.n, idx = ln.idx;
  const int s = (int)umod(k, (size_t)n);
  size_t x, c;
  chunk_of(ln, udiv(k, (size_t)n), x, c);
  st.nelem = c;
  if (s == 0) {
    st.local = at_in(ln, ln.sendbuff, x);
    st.out = at_out(ln, ln.recvbuff, (size_t)ln.rank * ln.count + x);
  } else {
    const int m = ring_mod(idx - s, n);
    step_recv(st, CONN_RING_RECV);
    st.out = at_out(ln, ln.recvbuff, (size_t)ln.ring[m] * ln.count + x);
  }
  if (s < n - 1) step_send(st, CONN_RING_SEND);
}

/* Broadcast: chain root -> ... -> root-1; Reduce: chain root+1 -> ... -> root. */
static __device__ void step_ring_chain(const lane_t& ln, size_t k, dstep_t& st) {
  const int n = ln.n;
  const bool reduce = ln.func == FUNC_REDUCE;
  const int d = ring_mod(ln.idx - ln.root_idx - (reduce ? 1 : 0), n); /* position in the chain */
  size_t x, c;
  chunk_of(ln, k, x, c);
  st.nelem = c;
  if (d > 0) step_recv(st, CONN_RING_RECV);
  if (d < n - 1) step_send(st, CONN_RING_SEND);
  if (reduce) {
    st.local = at_in(ln, ln.sendbuff, x);
    st.reduce = true;
    if (d == n - 1) {
      st.postop = true;
      st.out = at_out(ln, ln.recvbuff, x);
    }
  } else {
    if (d == 0) st.local = at_in(ln, ln.sendbuff, x);
    st.out = at_out(ln, ln.recvbuff, x);
  }
}

static __device__ void step_tree(const lane_t& ln, size_t k, dstep_t& st) {
  size_t x, c;
  chunk_of(ln, k, x, c);
  st.nelem = c;
  if (ln.kind == LANE_TREE_UP) {
    for (int j = 0; j < ln.ndown; j++) step_recv(st, j);
    st.local = at_in(ln, ln.sendbuff, x);
    st.reduce = true;
    if (ln.has_up) {
      step_send(st, CONN_TREE_UP);
    } else {
      st.postop = true;
      st.out = at_out(ln, ln.recvbuff, x);
    }
  } else {
    if (ln.has_up) {
      step_recv(st, CONN_TREE_UP);
      st.out = at_out(ln, ln.recvbuff, x);
    } else {
      st.local = at_out(ln, ln.recvbuff, x); /* the root's finished result */
    }
    for (int j = 0; j < ln.ndown; j++) step_send(st, j);
  }
}

static __device__ void step_oneshot(const lane_t& ln, size_t k, dstep_t& st) {
  size_t x, c;
  chunk_of(ln, k, x, c);
  st.nelem = c;
  st.local = at_in(ln, ln.sendbuff, x);
  for (int j = 0; j < ln.n - 1; j++) {
    if (ln.kind == LANE_ONESHOT_SEND)
      step_send(st, j);
    else
      step_recv(st, j);
  }
  if (ln.kind == LANE_ONESHOT_RECV) {
    st.reduce = st.postop = true;
    st.out = at_out(ln, ln.recvbuff, x);
    st.local_pos = ln.rank; /* the other ranks in rank order: ranks below mine come first */
  }
}

static __device__ void lane_step(const lane_t& ln, size_t k, dstep_t& st) {
  st.local = nullptr;
  st.out = nullptr;
  st.nelem = 0;
  st.nrecv = st.nsend = 0;
  st.reduce = st.postop = false;
  st.local_pos = -1;
  size_t x, c;
  switch (ln.kind) {
    case LANE_LOCAL: {
      const bool reduce =
          ln.func == FUNC_REDUCE || ln.func == FUNC_REDUCESCATTER || ln.func == FUNC_ALLREDUCE;
      const size_t in_off = ln.func == FUNC_REDUCESCATTER ? (size_t)ln.rank * ln.count : 0;
      const size_t out_off = ln.func == FUNC_ALLGATHER ? (size_t)ln.rank * ln.count : 0;
      st.nelem = ln.cnt;
      st.local = at_in(ln, ln.sendbuff, in_off + ln.off);
      st.out = at_out(ln, ln.recvbuff, out_off + ln.off);
      st.reduce = st.postop = reduce;
      break;
    }
    case LANE_RING:
      switch (ln.func) {
        case FUNC_ALLREDUCE:
          step_ring_allreduce(ln, k, st);
          break;
        case FUNC_REDUCESCATTER:
          step_ring_reducescatter(ln, k, st);
          break;
        case FUNC_ALLGATHER:
          step_ring_allgather(ln, k, st);
          break;
        default:
          step_ring_chain(ln, k, st);
          break;
      }
      break;
    case LANE_TREE_UP:
    case LANE_TREE_DOWN:
      step_tree(ln, k, st);
      break;
    case LANE_SEND:
      chunk_of(ln, k, x, c);
      st.nelem = c;
      st.local = at_in(ln, ln.sendbuff, x);
      step_send(st, CONN_P2P);
      break;
    case LANE_RECV:
      chunk_of(ln, k, x, c);
      st.nelem = c;
      st.out = at_out(ln, ln.recvbuff, x);
      step_recv(st, CONN_P2P);
      break;
    case LANE_ONESHOT_SEND:
    case LANE_ONESHOT_RECV:
      step_oneshot(ln, k, st);
      break;
    default:
      break;
  }
}

}  // namespace baton

#endif /* BATON_DEVICE_CUDA_STEPS_DEVICE_CUH */
