/* Pure step math of the host executor: for a lane (one work item's share on one channel, or one
 * direction of a tree) and a step index k, which peers step k receives from and sends to, which
 * part of the user's buffers it reads and writes, and whether it reduces. No I/O, no state.
 *
 * Both ends of a connection derive their step counts from the same work item (count, slice,
 * chunk, ranks), so they walk the connection in lockstep.
 *
 * Ring (n ranks, my ring index idx, data flows idx -> idx+1):
 *   AllReduce     (2 ranks, LL: the exchange of device.h's RING_ALLREDUCE_EXCHANGE)
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
 * child; the root sends its output). */
#include "device/host/host_exec.h"

static size_t div_up(size_t a, size_t b) {
  return (a + b - 1) / b;
}
static size_t min_size(size_t a, size_t b) {
  return a < b ? a : b;
}
static int ring_mod(int a, int n) {
  return ((a % n) + n) % n;
}

size_t host_lane_nops(const host_lane_t* ln) {
  if (ln->cnt == 0) return 0;
  switch (ln->kind) {
    case LANE_LOCAL:
    case LANE_SELF:
      return 1;
    case LANE_RING:
      switch (ln->func) {
        case FUNC_ALLREDUCE:
          if (RING_ALLREDUCE_EXCHANGE(ln->n, ln->proto)) return div_up(ln->cnt, ln->chunk) * 2;
          return div_up(ln->cnt, (size_t)ln->n * ln->chunk) * (size_t)(2 * ln->n - 1);
        case FUNC_ALLGATHER:
        case FUNC_REDUCESCATTER:
          return div_up(ln->cnt, ln->chunk) * (size_t)ln->n;
        default:
          return div_up(ln->cnt, ln->chunk);
      }
    case LANE_TREE_UP:
    case LANE_SEND:
    case LANE_RECV:
      return div_up(ln->cnt, ln->chunk);
    case LANE_TREE_DOWN:
      return ln->up != HOST_NO_PEER || ln->ndown > 0 ? div_up(ln->cnt, ln->chunk) : 0;
    default:
      return 0;
  }
}

static const char* at_in(const host_lane_t* ln, const char* base, size_t units) {
  return base + units * ln->unit;
}
static char* at_out(const host_lane_t* ln, char* base, size_t units) {
  return base + units * ln->unit;
}

static void step_recv(host_step_t* st, int peer) {
  st->recv_peer[st->nrecv++] = peer;
}
static void step_send(host_step_t* st, int peer) {
  st->send_peer[st->nsend++] = peer;
}

/* The k-th chunk of the slice: element offset (from 0 of the count) and length. */
static void chunk_of(const host_lane_t* ln, size_t k, size_t* x, size_t* c) {
  size_t start = k * ln->chunk;
  *x = ln->off + start;
  *c = min_size(ln->chunk, ln->cnt - start);
}

/* RING_ALLREDUCE_EXCHANGE: step 2c sends chunk c, step 2c+1 receives the peer's and finishes. */
static void step_ring_exchange(const host_lane_t* ln, size_t k, host_step_t* st) {
  size_t x, c;
  chunk_of(ln, k / 2, &x, &c);
  st->nelem = c;
  st->local = at_in(ln, ln->sendbuff, x);
  st->reduce = true;
  if (k % 2 == 0) {
    step_send(st, ln->next);
  } else {
    step_recv(st, ln->prev);
    st->postop = true;
    st->out = at_out(ln, ln->recvbuff, x);
  }
}

static void step_ring_allreduce(const host_lane_t* ln, size_t k, host_step_t* st) {
  if (RING_ALLREDUCE_EXCHANGE(ln->n, ln->proto)) {
    step_ring_exchange(ln, k, st);
    return;
  }
  int n = ln->n, idx = ln->idx;
  size_t per_loop = (size_t)(2 * n - 1);
  size_t loop = k / per_loop;
  int s = (int)(k % per_loop);
  size_t loop_elems = (size_t)n * ln->chunk;
  size_t lbase = loop * loop_elems;
  size_t lc = min_size(loop_elems, ln->cnt - lbase);
  size_t part = ring_part(lc, (size_t)n, ln->unit, ln->chunk);
  int m = ring_mod(s <= n - 1 ? idx - 1 - s : idx - (s - (n - 1)), n); /* s = n-1: part idx */
  size_t pstart = min_size((size_t)m * part, lc), pend = min_size((size_t)(m + 1) * part, lc);
  size_t x = ln->off + lbase + pstart;
  st->nelem = pend - pstart;
  if (s <= n - 1) { /* reduce-scatter phase */
    if (s > 0) step_recv(st, ln->prev);
    st->local = at_in(ln, ln->sendbuff, x);
    st->reduce = true;
    if (s == n - 1) {
      st->postop = true;
      st->out = at_out(ln, ln->recvbuff, x);
    }
    step_send(st, ln->next);
  } else { /* all-gather phase */
    step_recv(st, ln->prev);
    st->out = at_out(ln, ln->recvbuff, x);
    if (s - (n - 1) <= n - 2) step_send(st, ln->next);
  }
}

static void step_ring_reducescatter(const host_lane_t* ln, size_t k, host_step_t* st) {
  int n = ln->n, idx = ln->idx;
  int s = (int)(k % (size_t)n);
  size_t x, c;
  chunk_of(ln, k / (size_t)n, &x, &c);
  int m = ring_mod(s == n - 1 ? idx : idx - 1 - s, n);
  st->nelem = c;
  st->local = at_in(ln, ln->sendbuff, (size_t)ln->ring[m] * ln->count + x);
  st->reduce = true;
  if (s > 0) step_recv(st, ln->prev);
  if (s < n - 1) {
    step_send(st, ln->next);
  } else {
    st->postop = true;
    st->out = at_out(ln, ln->recvbuff, x);
  }
}

static void step_ring_allgather(const host_lane_t* ln, size_t k, host_step_t* st) {
  int n = ln->n, idx = ln->idx;
  int s = (int)(k % (size_t)n);
  size_t x, c;
  chunk_of(ln, k / (size_t)n, &x, &c);
  st->nelem = c;
  if (s == 0) {
    st->local = at_in(ln, ln->sendbuff, x);
    st->out = at_out(ln, ln->recvbuff, (size_t)ln->rank * ln->count + x);
  } else {
    int m = ring_mod(idx - s, n);
    step_recv(st, ln->prev);
    st->out = at_out(ln, ln->recvbuff, (size_t)ln->ring[m] * ln->count + x);
  }
  if (s < n - 1) step_send(st, ln->next);
}

/* Broadcast: chain root -> ... -> root-1; Reduce: chain root+1 -> ... -> root. */
static void step_ring_chain(const host_lane_t* ln, size_t k, host_step_t* st) {
  int n = ln->n;
  bool reduce = ln->func == FUNC_REDUCE;
  int d = ring_mod(ln->idx - ln->root_idx - (reduce ? 1 : 0), n); /* position in the chain */
  size_t x, c;
  chunk_of(ln, k, &x, &c);
  st->nelem = c;
  if (d > 0) step_recv(st, ln->prev);
  if (d < n - 1) step_send(st, ln->next);
  if (reduce) {
    st->local = at_in(ln, ln->sendbuff, x);
    st->reduce = true;
    if (d == n - 1) {
      st->postop = true;
      st->out = at_out(ln, ln->recvbuff, x);
    }
  } else {
    if (d == 0) st->local = at_in(ln, ln->sendbuff, x);
    st->out = at_out(ln, ln->recvbuff, x);
  }
}

static void step_tree(const host_lane_t* ln, size_t k, host_step_t* st) {
  size_t x, c;
  chunk_of(ln, k, &x, &c);
  st->nelem = c;
  if (ln->kind == LANE_TREE_UP) {
    for (int j = 0; j < ln->ndown; j++) step_recv(st, ln->down[j]);
    st->local = at_in(ln, ln->sendbuff, x);
    st->reduce = true;
    if (ln->up != HOST_NO_PEER) {
      step_send(st, ln->up);
    } else {
      st->postop = true;
      st->out = at_out(ln, ln->recvbuff, x);
    }
  } else {
    if (ln->up != HOST_NO_PEER) {
      step_recv(st, ln->up);
      st->out = at_out(ln, ln->recvbuff, x);
    } else {
      st->local = at_out(ln, ln->recvbuff, x); /* the root's finished result */
    }
    for (int j = 0; j < ln->ndown; j++) step_send(st, ln->down[j]);
  }
}

void host_lane_step(const host_lane_t* ln, size_t k, host_step_t* st) {
  *st = (host_step_t){.nrecv = 0, .nsend = 0};
  for (int j = 0; j < TREE_MAX_CHILDREN; j++) st->recv_peer[j] = st->send_peer[j] = HOST_NO_PEER;
  size_t x, c;
  switch (ln->kind) {
    case LANE_LOCAL: {
      bool reduce =
          ln->func == FUNC_REDUCE || ln->func == FUNC_REDUCESCATTER || ln->func == FUNC_ALLREDUCE;
      size_t in_off = ln->func == FUNC_REDUCESCATTER ? (size_t)ln->rank * ln->count : 0;
      size_t out_off = ln->func == FUNC_ALLGATHER ? (size_t)ln->rank * ln->count : 0;
      st->nelem = ln->cnt;
      st->local = at_in(ln, ln->sendbuff, in_off + ln->off);
      st->out = at_out(ln, ln->recvbuff, out_off + ln->off);
      st->reduce = st->postop = reduce;
      break;
    }
    case LANE_RING:
      switch (ln->func) {
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
      chunk_of(ln, k, &x, &c);
      st->nelem = c;
      st->local = at_in(ln, ln->sendbuff, x);
      step_send(st, ln->peer);
      break;
    case LANE_RECV:
      chunk_of(ln, k, &x, &c);
      st->nelem = c;
      st->out = at_out(ln, ln->recvbuff, x);
      step_recv(st, ln->peer);
      break;
    case LANE_SELF:
      st->nelem = ln->cnt;
      st->local = at_in(ln, ln->sendbuff, ln->off);
      st->out = ln->self_out;
      break;
    default:
      break;
  }
}
