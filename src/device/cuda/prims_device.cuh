/* One step over the connection FIFOs, on the GPU: the device twin of src/device/host/prims.c.
 * Device code of the kernel_*.cu only.
 *
 * A step is run by a group of threads (the whole block, or half of it when an item splits into
 * two concurrent directions). It receives at most one slot from each of up to TREE_MAX_CHILDREN
 * peers, combines them with this rank's data (reduce_device.cuh), writes the user's output and
 * fills one slot to each of up to TREE_MAX_CHILDREN peers.
 *
 * Wire format and ordering (conn_fifo_t in vocab.h; identical to the host executor's):
 *   Simple  thread 0 of the group waits for tail >= step+1 on every receive FIFO (ld.acquire.sys)
 *           and checks sizes[] (unless NET), and for a free slot (fifo_may_send) on every send
 *           FIFO, and claims the step (each FIFO's step advances; dstep_t.seq_* keep the claimed
 *           ones); a barrier releases the group's workers; the data moves with 16-byte accesses;
 *           a barrier; the publisher writes sizes[], fences once (fence.acq_rel.sys) when the
 *           step filled a slot, then writes tail per send FIFO and head per receive FIFO (relaxed
 *           system-scope stores: a release pattern). In a group of at least
 *           CUDA_EXEC_PUBLISHER_MIN_THREADS the publisher is the first thread of the group's last
 *           warp, which moves no data: the workers go on to the next step while it waits on the
 *           fence (the next step's closing barrier waits for it, so it is never two steps
 *           behind). In a smaller group the workers are the whole group and thread 0 publishes.
 *   LL      16-byte lines {data0, flag0, data1, flag1}, flag = (uint32_t)(step+1), 8 data bytes
 *           a line, written with one 16-byte volatile store and polled with one 16-byte volatile
 *           load until both flags match. A step writes at least one line (an empty step is one
 *           line of zeros). sizes[] = 16 * lines; tail is published (after a system fence when
 *           a proxy reads the FIFO), head after the group has read every line.
 *   LL128   128-byte lines: 120 data bytes, then a 64-bit flag = step+1. A warp moves four lines
 *           per instruction: 8 consecutive lanes per line, 16 bytes each, the eighth lane's
 *           second word being the flag. NVLink delivers a warp's 128-byte aligned line store
 *           whole, so a reader that sees the flag (in the same load instruction) sees the line.
 * A step that "reduces" only this rank's own data (a chain's or a 2-rank exchange's first send)
 * is a copy unless the op has a pre-op (step_computes).
 * Reductions: Simple reduces straight from the slots; LL and LL128 first copy a round of received
 * lines into shared-memory stages (as many as a stage holds), reduce with the same function into
 * the output and a result stage, then pack the result into the send FIFOs' lines.
 * Every wait is a bounded spin: every SPIN_CHECK iterations it looks at the block's stop flag (set
 * when another group failed), and every SPIN_ABORT_CHECKS looks at the abort flag too; it gives
 * up if either is set, and the group learns of it at its next barrier (bar.red.or), so every
 * thread leaves the same way. */
#ifndef BATON_DEVICE_CUDA_PRIMS_DEVICE_CUH
#define BATON_DEVICE_CUDA_PRIMS_DEVICE_CUH

#include "device/cuda/reduce_device.cuh"
#include "vocab/vocab.h"

namespace baton {

#define SPIN_CHECK 1024      /* spins between looks at the block's stop flag */
#define SPIN_ABORT_CHECKS 64 /* looks at the stop flag between reads of the abort flag */

/* ---- Memory operations --------------------------------------------------------------------------
 */
static __device__ __forceinline__ uint64_t ld_acquire_sys(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.sys.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ uint64_t ld_volatile_u64(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.volatile.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ void st_release_sys_u64(volatile uint64_t* p, uint64_t v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ void st_volatile_u64(uint64_t* p, uint64_t v) {
  asm volatile("st.volatile.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ int ld_volatile_s32(const int* p) {
  int v;
  asm volatile("ld.volatile.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ void st_volatile_s32(int* p, int v) {
  asm volatile("st.volatile.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
static __device__ __forceinline__ uint4 ld_volatile_v4(const void* p) {
  uint4 v;
  asm volatile("ld.volatile.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}
static __device__ __forceinline__ void st_volatile_v4(void* p, uint4 v) {
  asm volatile("st.volatile.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}
/* LL128's line accesses name the global state space (FIFO memory is always global: device
 * memory, or mapped host memory through its global address), as stock's do: a warp's 16-byte
 * accesses of a 128-byte line are then global accesses for certain, not generic ones. */
static __device__ __forceinline__ void ld_volatile_v2u64(const void* p, uint64_t& a, uint64_t& b) {
  asm volatile("ld.volatile.global.v2.u64 {%0,%1}, [%2];" : "=l"(a), "=l"(b) : "l"(p) : "memory");
}
static __device__ __forceinline__ void st_volatile_v2u64(void* p, uint64_t a, uint64_t b) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1,%2};" ::"l"(p), "l"(a), "l"(b) : "memory");
}

/* Up to 8 bytes (16 for the wide forms) of user memory at any alignment; bytes past n read as 0. */
static __device__ __forceinline__ uint64_t load8(const char* p, int n) {
  if (n >= 8 && ((uintptr_t)p & 7) == 0) return *reinterpret_cast<const uint64_t*>(p);
  if (n >= 8 && ((uintptr_t)p & 3) == 0) {
    const uint32_t* q = reinterpret_cast<const uint32_t*>(p);
    return (uint64_t)q[0] | (uint64_t)q[1] << 32;
  }
  uint64_t v = 0;
  for (int i = 0; i < n && i < 8; i++) v |= (uint64_t)(uint8_t)p[i] << (8 * i);
  return v;
}
static __device__ __forceinline__ void store8(char* p, uint64_t v, int n) {
  if (n >= 8 && ((uintptr_t)p & 7) == 0) {
    *reinterpret_cast<uint64_t*>(p) = v;
  } else if (n >= 8 && ((uintptr_t)p & 3) == 0) {
    uint32_t* q = reinterpret_cast<uint32_t*>(p);
    q[0] = (uint32_t)v;
    q[1] = (uint32_t)(v >> 32);
  } else {
    for (int i = 0; i < n && i < 8; i++) p[i] = (char)(v >> (8 * i));
  }
}
static __device__ __forceinline__ uint4 load16(const char* p, int n) {
  if (n >= 16 && ((uintptr_t)p & 15) == 0) return *reinterpret_cast<const uint4*>(p);
  uint64_t lo = load8(p, n), hi = n > 8 ? load8(p + 8, n - 8) : 0;
  return make_uint4((uint32_t)lo, (uint32_t)(lo >> 32), (uint32_t)hi, (uint32_t)(hi >> 32));
}
static __device__ __forceinline__ void store16(char* p, uint4 v, int n) {
  if (n >= 16 && ((uintptr_t)p & 15) == 0) {
    *reinterpret_cast<uint4*>(p) = v;
    return;
  }
  store8(p, (uint64_t)v.x | (uint64_t)v.y << 32, n);
  if (n > 8) store8(p + 8, (uint64_t)v.z | (uint64_t)v.w << 32, n - 8);
}

/* ---- Groups, barriers, stopping ------------------------------------------------------------- */
struct dtrace_t;
struct kctx_t {
  const volatile uint32_t* abort_flag;
  cuda_status_t* status;
  volatile int* stop; /* shared: some thread of the block gave up */
  int channel;
  dtrace_t* trace; /* BATON_DEVICE_TRACE builds: block 0's timeline (NULL elsewhere) */
};

/* A group of threads running steps together; conns are its connections' mirrors, in shared
 * memory (their step advances there; the item writes it back to device memory at its end).
 * Simple steps move data with the group's workers, threads [0, nw), meeting at barrier bar_w;
 * when nw < nth the last warp publishes (see the header comment). */
struct grp_t {
  int tid, nth, bar;
  int nw, bar_w;
  cuda_conn_t* conns;
  rc_args* rc;     /* shared memory: the step's reduce/copy descriptor, written by the leader */
  char* stage;     /* shared memory: GRP_STAGES stages of stage_bytes (LL/LL128 reductions) */
  int stage_bytes; /* a multiple of 256 */
};
#define GRP_STAGES (TREE_MAX_CHILDREN + 1) /* one per received slot, one for the result */

/* ---- Timeline of block 0, in BATON_DEVICE_TRACE builds only (a diagnostic: tests/gpu/run.sh's
 * diag stage builds it separately). Group leaders stamp (id, cycles since the block started);
 * the kernel prints the timeline of one launch in TRACE_EVERY. Ids: see dtrace_ids. */
enum dtrace_ids {
  TR_LOADED = 1,    /* the item's connections are in shared memory */
  TR_HEAD = 2,      /* every send FIFO has room */
  TR_TAIL = 3,      /* every receive FIFO has its slot (Simple) */
  TR_MOVED = 4,     /* the step's data is moved */
  TR_PUBLISHED = 5, /* head/tail written */
  TR_SYNCED = 6,    /* the group met after loading its connections */
  TR_PLANNED = 7,   /* the leader planned the step (lane_step) */
  TR_STEP_IN = 8,   /* the step's protocol function began */
  TR_ITEM_END = 9,
  TR_STAGED = 10,  /* LL/LL128 reduction: a round's lines are staged and described */
  TR_REDUCED = 11, /* LL/LL128 reduction: the round is reduced */
  TR_PLAN_IN = 12  /* the leader starts planning the step */
};
#define TRACE_MAX 40
#define TRACE_EVERY 512
struct dtrace_t {
  long long t0;
  int n;
  unsigned char id[TRACE_MAX];
  int dt[TRACE_MAX];
};
#ifdef BATON_DEVICE_TRACE
static __device__ __forceinline__ void dtrace_mark(const kctx_t& k, int id) {
  if (k.trace == nullptr) return;
  int i = atomicAdd(&k.trace->n, 1);
  if (i < TRACE_MAX) {
    k.trace->id[i] = (unsigned char)id;
    k.trace->dt[i] = (int)(clock64() - k.trace->t0);
  }
}
/* The group's thread t stamps id, plus 100 from a thread in the second half of the block (the
 * second group of a split block, and also a whole-block group's publishing warp). */
#define DTRACE_BY(k, g, t, id)                                                     \
  do {                                                                             \
    if ((g).tid == (t))                                                            \
      dtrace_mark((k), (id) + (threadIdx.x >= CUDA_EXEC_GROUP_THREADS ? 100 : 0)); \
  } while (0)
#else
#define DTRACE_BY(k, g, t, id) \
  do {                         \
  } while (0)
#endif
#define DTRACE(k, g, id) DTRACE_BY(k, g, 0, id) /* the group's leader */

/* The group's workers as a group of their own (g itself when it has no publishing warp). */
static __device__ __forceinline__ grp_t grp_workers(const grp_t& g) {
  grp_t w = g;
  w.nth = g.nw;
  w.bar = g.bar_w;
  return w;
}

static __device__ __forceinline__ void grp_sync(const grp_t& g) {
  asm volatile("bar.sync %0, %1;" ::"r"(g.bar), "r"(g.nth) : "memory");
}
/* Barrier returning whether any thread of the group passed true. */
static __device__ __forceinline__ bool grp_sync_or(const grp_t& g, bool pred) {
  unsigned r;
  asm volatile(
      "{\n\t.reg .pred pin, pout;\n\t"
      "setp.ne.u32 pin, %1, 0;\n\t"
      "bar.red.or.pred pout, %2, %3, pin;\n\t"
      "selp.u32 %0, 1, 0, pout;\n\t}"
      : "=r"(r)
      : "r"((unsigned)pred), "r"(g.bar), "r"(g.nth)
      : "memory");
  return r != 0;
}

static __device__ void report(const kctx_t& k, int err, int expected, int got, uint64_t step) {
  *k.stop = 1;
  cuda_status_t* s = k.status;
  if (s->error != CUDA_ERR_NONE) return;
  s->channel = k.channel;
  s->expected = expected;
  s->got = got;
  s->step = step;
  __threadfence_system();
  s->error = err;
}

/* The block's stop flag every time; the abort flag (host memory, read over PCIe by every waiting
 * thread) only every SPIN_ABORT_CHECKS calls of the same thread: once seen it stops the block. */
static __device__ __forceinline__ bool should_stop(const kctx_t& k, int& checks) {
  if (*k.stop != 0) return true;
  if (++checks < SPIN_ABORT_CHECKS) return false;
  checks = 0;
  if (*k.abort_flag == 0) return false;
  report(k, CUDA_ERR_ABORT, 0, 0, 0); /* also sets the block's stop flag */
  return true;
}

/* Spins until ready() or a stop; false on a stop. */
template <typename F>
static __device__ __forceinline__ bool spin_until(const kctx_t& k, F ready) {
  int n = 0, checks = 0;
  while (!ready()) {
    if (++n == SPIN_CHECK) {
      n = 0;
      if (should_stop(k, checks)) return false;
    }
  }
  return true;
}

/* Spins until the counter *p (tail or head, written by another GPU) reaches want; false on a
 * stop. Every poll is an acquire (ld.acquire.sys); its value is returned in *seen. (Relaxed polls
 * with one acquire at the end were a build knob from runs 33-36 that no run measured as better;
 * the knob is gone.) */
static __device__ __forceinline__ bool wait_counter(const kctx_t& k, const uint64_t* p,
                                                    uint64_t want, uint64_t* seen) {
  uint64_t v = 0;
  if (!spin_until(k, [&] {
        v = ld_acquire_sys(p);
        return v >= want;
      }))
    return false;
  *seen = v;
  return true;
}

/* ---- Steps ---------------------------------------------------------------------------------- */
/* One step (vocab.h's step_t) with recv[] / send[] indexing the group's conns
 * (exec_block_device.cuh maps the roles). */
struct dstep_t : step_t {
  /* Simple: the FIFO steps the leader claimed for recv[j] / send[j] (their publisher's input) */
  uint64_t seq_recv[TREE_MAX_CHILDREN];
  uint64_t seq_send[TREE_MAX_CHILDREN];
  /* Direct writes (vocab.h): the step's receive finds its data in out, its send goes to the next
   * rank's output at dx bytes (out's offset in this rank's output), where the connection has
   * CONN_FLAG_DIRECT. */
  bool drecv, dsend;
  size_t dx;
};

static __device__ __forceinline__ char* slot_of(const cuda_conn_t& c, int proto) {
  return fifo_slot_ptr(c.buffs[proto], c.buff_bytes[proto], c.step);
}

/* Thread 0, a direct send on c: where the receiver's output starts, from the mailbox it filled
 * for this item (tagged by the step the item started at); read once per item. NULL on a stop. */
static __device__ char* direct_peer_out(const kctx_t& k, cuda_conn_t& c) {
  if (c.dpeer != nullptr) return c.dpeer;
  uint64_t tag;
  if (!wait_counter(k, c.dmbox + 1, steps_direct_tag(c.dstart), &tag)) return nullptr;
  c.dpeer = (char*)(uintptr_t)ld_volatile_u64(c.dmbox);
  return c.dpeer;
}

/* Thread 0: every send FIFO has a free slot. head is read across the link only when the value
 * seen last does not already leave room (the sender is NCCL_STEPS slots ahead of the receiver). */
static __device__ bool wait_send(const kctx_t& k, const grp_t& g, const dstep_t& st) {
  for (int j = 0; j < st.nsend; j++) {
    cuda_conn_t& c = g.conns[st.send[j]];
    if (fifo_may_send(c.head_seen, c.step)) continue;
    if (!wait_counter(k, c.head, fifo_head_needed(c.step), &c.head_seen)) return false;
  }
  return true;
}

static __device__ __forceinline__ void fence_acq_rel_sys() {
  asm volatile("fence.acq_rel.sys;" ::: "memory");
}

/* LL / LL128, thread 0: head for every received slot; tail (and sizes) for every filled one.
 * The flags carry the data, so only a FIFO a proxy reads (NET) needs the group's stores, and
 * sizes[], ordered before tail: the barrier that ends the step orders the group's accesses
 * before thread 0, which writes sizes[], fences once (fence.acq_rel.sys) and then writes the
 * counters with plain system-scope stores (a release pattern: one fence per step). */
static __device__ void publish_lines(const grp_t& g, const dstep_t& st, int sizes_bytes) {
  bool fence = false;
  for (int j = 0; j < st.nsend; j++) {
    cuda_conn_t& c = g.conns[st.send[j]];
    fence |= (c.flags & CONN_FLAG_NET) != 0;
    st_volatile_s32(c.sizes + fifo_slot(c.step), sizes_bytes);
  }
  if (fence) fence_acq_rel_sys();
  for (int j = 0; j < st.nsend; j++) {
    cuda_conn_t& c = g.conns[st.send[j]];
    st_volatile_u64(c.tail, c.step + 1);
    c.step++;
  }
  for (int j = 0; j < st.nrecv; j++) {
    cuda_conn_t& c = g.conns[st.recv[j]];
    st_volatile_u64(c.head, c.step + 1);
    c.step++;
  }
}

/* Simple, the publisher: the same for the steps the leader claimed. The fence orders the workers'
 * stores to the filled slots (seen through the barrier) before tail. A step that only received
 * needs none: its loads have returned (their values were stored) before the barrier, so head
 * cannot free a slot still being read. */
static __device__ void publish_simple(const grp_t& g, const dstep_t& st, int sizes_bytes) {
  for (int j = 0; j < st.nsend; j++)
    st_volatile_s32(g.conns[st.send[j]].sizes + fifo_slot(st.seq_send[j]), sizes_bytes);
  if (st.nsend > 0) fence_acq_rel_sys();
  for (int j = 0; j < st.nsend; j++) st_volatile_u64(g.conns[st.send[j]].tail, st.seq_send[j] + 1);
  for (int j = 0; j < st.nrecv; j++) st_volatile_u64(g.conns[st.recv[j]].head, st.seq_recv[j] + 1);
}

/* U vectors of a copy at vec_at<U>(rd, u, ...) (CHECKED: those below nv), to every destination;
 * the first two destinations in registers. */
template <typename V, int U, bool CHECKED>
static __device__ __forceinline__ void copy_vectors(const V* s, V* d0, V* d1, char* const* dst,
                                                    int ndst, size_t rd, size_t nv, int tid,
                                                    int nth) {
  size_t idx[U];
  bool in[U];
  V x[U];
#pragma unroll
  for (int u = 0; u < U; u++) {
    idx[u] = vec_at<U>(rd, u, tid, nth);
    in[u] = !CHECKED || idx[u] < nv;
    if (in[u]) x[u] = s[idx[u]];
  }
  vec_store<V, U>(x, idx, in, d0, d1, dst, ndst);
}

/* Untyped copy of nv vectors V from src to every dst (ndst >= 1): whole rounds of U vectors a
 * thread unchecked, then what is left a vector a thread (as rc_impl). */
template <typename V>
static __device__ __forceinline__ void copy_wide(const char* src, char* const* dst, int ndst,
                                                 size_t nv, int tid, int nth) {
  enum { U = CUDA_EXEC_UNROLL };
  const V* s = reinterpret_cast<const V*>(src);
  V* d0 = reinterpret_cast<V*>(dst[0]);
  V* d1 = reinterpret_cast<V*>(ndst > 1 ? dst[1] : dst[0]);
  const size_t full = dev_udiv(nv, (size_t)nth * U);
  for (size_t rd = 0; rd < full; rd++)
    copy_vectors<V, U, false>(s, d0, d1, dst, ndst, rd, nv, tid, nth);
  for (size_t j = full * U; j * (size_t)nth < nv; j++)
    copy_vectors<V, 1, true>(s, d0, d1, dst, ndst, j, nv, tid, nth);
}

static __device__ __noinline__ void copy_multi(const char* src, char* const* dst, int ndst,
                                               size_t nbytes, int tid, int nth) {
  if (ndst == 0 || nbytes == 0) return;
  uintptr_t a = (uintptr_t)src;
  for (int d = 0; d < ndst; d++) a |= (uintptr_t)dst[d];
  size_t done;
  if ((a & 15) == 0) {
    copy_wide<uint4>(src, dst, ndst, nbytes / 16, tid, nth);
    done = nbytes / 16 * 16;
  } else if ((a & 7) == 0) {
    copy_wide<uint64_t>(src, dst, ndst, nbytes / 8, tid, nth);
    done = nbytes / 8 * 8;
  } else if ((a & 3) == 0) {
    copy_wide<uint32_t>(src, dst, ndst, nbytes / 4, tid, nth);
    done = nbytes / 4 * 4;
  } else {
    done = 0;
  }
  for (size_t i = done + (size_t)tid; i < nbytes; i += (size_t)nth)
    for (int d = 0; d < ndst; d++) dst[d][i] = src[i];
}

/* Whether a step computes: a step that reduces only its local data (a chain's or an exchange's
 * first send) is a copy unless the op has a pre-op (PREMULSUM) or the step finishes (postop). */
static __device__ __forceinline__ bool step_computes(const dstep_t& st, const red_t& r) {
  return st.reduce && (st.nrecv > 0 || st.postop || r.op == DEV_OP_PREMULSUM);
}

/* The reduction of a step: a.dst[0] is the output whenever the step finishes (postop), so
 * SUMPOSTDIV sums into it, divides it once, and copies it to the other destinations. */
static __device__ void reduce_step(const grp_t& g, const rc_args& a, const red_t& r, size_t unit,
                                   bool postop) {
  if (!(postop && r.op == DEV_OP_SUMPOSTDIV && r.div > 1 && a.ndst > 0)) {
    reduce_copy(a, a.ndst, r, g.tid, g.nth);
    return;
  }
  reduce_copy(a, 1, r, g.tid, g.nth);
  grp_sync(g);
  postdiv(a.dst[0], a.nelem, r, g.tid, g.nth);
  grp_sync(g);
  copy_multi(a.dst[0], a.dst + 1, a.ndst - 1, a.nelem * unit, g.tid, g.nth);
}

/* The leader's description of a step's reduction over memory: the sources (the local data at
 * offset off, placed by st.local_pos, and the received ones, recv[j] for st.recv[j]); the output
 * (at off), then the destinations the caller adds. */
static __device__ __forceinline__ void rc_plan(rc_args& a, const dstep_t& st, size_t off,
                                               size_t nelem, const char* const* recv) {
  a.nsrc = a.ndst = 0;
  a.nelem = nelem;
  const char* local = st.local != nullptr ? st.local + off : nullptr;
  a.has_local = local != nullptr && st.local_pos < 0;
  if (a.has_local) a.src[a.nsrc++] = local;
  for (int j = 0; j < st.nrecv; j++) {
    if (local != nullptr && j == st.local_pos) a.src[a.nsrc++] = local;
    a.src[a.nsrc++] = recv[j];
  }
  if (local != nullptr && st.local_pos >= st.nrecv) a.src[a.nsrc++] = local;
  if (st.out != nullptr) a.dst[a.ndst++] = st.out + off;
}

/* ---- Simple ------------------------------------------------------------------------------------
 */
static __device__ __noinline__ bool step_simple(const kctx_t& k, const grp_t& g, dstep_t& st,
                                                const red_t& r, size_t unit) {
  const bool split = g.nw < g.nth;
  if (g.tid >= g.nw) { /* the publishing warp: waits for the workers' data, then publishes */
    if (grp_sync_or(g, false)) return false;
    if (g.tid == g.nw) publish_simple(g, st, (int)(st.nelem * unit));
    DTRACE_BY(k, g, g.nw, TR_PUBLISHED);
    return true;
  }
  const grp_t w = grp_workers(g);
  bool bad = false;
  DTRACE(k, g, TR_STEP_IN);
  if (g.tid == 0) { /* the leader waits, describes the step's data movement and claims it */
    const size_t nbytes = st.nelem * unit;
    for (int j = 0; j < st.nrecv && !bad; j++) {
      const cuda_conn_t& c = g.conns[st.recv[j]];
      const uint64_t need = c.step + 1;
      uint64_t seen;
      bad = !wait_counter(k, c.tail, need, &seen);
      if (!bad && !(c.flags & CONN_FLAG_NET)) {
        int got = ld_volatile_s32(c.sizes + fifo_slot(c.step));
        if (got != (int)nbytes) {
          report(k, CUDA_ERR_SIZE, (int)nbytes, got, c.step);
          bad = true;
        }
      }
    }
    DTRACE(k, g, TR_TAIL);
    if (!bad) bad = !wait_send(k, g, st);
    DTRACE(k, g, TR_HEAD);
    rc_args& a = *g.rc;
    if (step_computes(st, r)) {
      const char* recv[TREE_MAX_CHILDREN];
      for (int j = 0; j < st.nrecv; j++) recv[j] = slot_of(g.conns[st.recv[j]], PROTO_SIMPLE);
      rc_plan(a, st, 0, st.nelem, recv);
    } else { /* a copy: src[0] to every destination */
      a.nsrc = 1;
      a.ndst = 0;
      a.nelem = st.nelem;
      if (st.local != nullptr)
        a.src[0] = st.local;
      else if (st.drecv && (g.conns[st.recv[0]].flags & CONN_FLAG_DIRECT))
        a.src[0] = st.out; /* the sender stored it there */
      else
        a.src[0] = slot_of(g.conns[st.recv[0]], PROTO_SIMPLE);
      if (st.out != nullptr && st.out != a.src[0]) a.dst[a.ndst++] = st.out;
    }
    for (int j = 0; j < st.nsend && !bad; j++) {
      cuda_conn_t& c = g.conns[st.send[j]];
      if (st.dsend && (c.flags & CONN_FLAG_DIRECT)) {
        char* peer = direct_peer_out(k, c);
        bad = peer == nullptr;
        a.dst[a.ndst++] = peer + st.dx;
      } else {
        a.dst[a.ndst++] = slot_of(c, PROTO_SIMPLE);
      }
    }
    for (int j = 0; j < st.nrecv; j++) st.seq_recv[j] = g.conns[st.recv[j]].step++;
    for (int j = 0; j < st.nsend; j++) st.seq_send[j] = g.conns[st.send[j]].step++;
  }
  if (grp_sync_or(w, bad)) {
    if (split) grp_sync_or(g, true); /* the publisher learns of it at its barrier */
    return false;
  }

  const size_t nbytes = st.nelem * unit;
  if (nbytes > 0) {
    const rc_args& a = *g.rc;
    if (step_computes(st, r))
      reduce_step(w, a, r, unit, st.postop);
    else
      copy_multi(a.src[0], a.dst, a.ndst, nbytes, w.tid, w.nth);
  }
  if (split) { /* the publisher takes it from here */
    const bool stopped = grp_sync_or(g, false);
    DTRACE(k, g, TR_MOVED);
    return !stopped;
  }
  grp_sync(g);
  DTRACE(k, g, TR_MOVED);
  if (g.tid == 0) publish_simple(g, st, (int)nbytes);
  DTRACE(k, g, TR_PUBLISHED);
  return true;
}

/* ---- LL ----------------------------------------------------------------------------------------
 */
/* The thread's wait for lines i0, i0 + stride, ... (LL_BATCH of them, those below nl) of c's
 * current slot: every pending line is loaded before any flag is checked, so the loads overlap
 * instead of paying the memory latency once per line. words[u] gets line i0 + u * stride's 8 data
 * bytes. false on a stop. */
#define LL_BATCH 4
static __device__ __forceinline__ bool ll_read_batch(const kctx_t& k, const cuda_conn_t& c,
                                                     size_t i0, size_t stride, size_t nl,
                                                     uint64_t* words) {
  const char* slot = slot_of(c, PROTO_LL);
  const uint32_t flag = (uint32_t)(c.step + 1);
  unsigned pending = 0;
#pragma unroll
  for (int u = 0; u < LL_BATCH; u++)
    if (i0 + (size_t)u * stride < nl) pending |= 1u << u;
  int n = 0, checks = 0;
  while (pending != 0) {
    uint4 v[LL_BATCH];
#pragma unroll
    for (int u = 0; u < LL_BATCH; u++)
      if (pending & (1u << u))
        v[u] = ld_volatile_v4(slot + (i0 + (size_t)u * stride) * sizeof(ll_line_t));
#pragma unroll
    for (int u = 0; u < LL_BATCH; u++) {
      if ((pending & (1u << u)) && v[u].y == flag && v[u].w == flag) {
        words[u] = (uint64_t)v[u].x | (uint64_t)v[u].z << 32;
        pending &= ~(1u << u);
      }
    }
    if (pending != 0 && ++n == SPIN_CHECK) {
      n = 0;
      if (should_stop(k, checks)) return false;
    }
  }
  return true;
}

static __device__ __forceinline__ void ll_write(const cuda_conn_t& c, size_t i, uint64_t word) {
  const uint32_t flag = (uint32_t)(c.step + 1);
  st_volatile_v4(slot_of(c, PROTO_LL) + i * sizeof(ll_line_t),
                 make_uint4((uint32_t)word, flag, (uint32_t)(word >> 32), flag));
}

static __device__ __forceinline__ uint64_t low_bytes(uint64_t w, int n) {
  return n >= 8 ? w : n <= 0 ? 0 : w & (~0ull >> (64 - 8 * n));
}

/* A step without arithmetic: each thread forwards its lines (received or local) to the output
 * and the send FIFOs. Also the empty step (one line of zeros). */
static __device__ bool ll_copy_lines(const kctx_t& k, const grp_t& g, const dstep_t& st,
                                     size_t nbytes) {
  const size_t nlines = nbytes == 0 ? 1 : (nbytes + 7) / 8;
  const bool to_out = st.out != nullptr && st.out != st.local;
  const size_t stride = (size_t)g.nth;
  for (size_t i0 = (size_t)g.tid; i0 < nlines; i0 += stride * LL_BATCH) {
    uint64_t w[LL_BATCH] = {}; /* zeros: the lines of a step without receive */
    if (st.nrecv > 0 && !ll_read_batch(k, g.conns[st.recv[0]], i0, stride, nlines, w)) return false;
#pragma unroll
    for (int u = 0; u < LL_BATCH; u++) {
      const size_t i = i0 + (size_t)u * stride;
      if (i >= nlines) break;
      const int valid = nbytes > i * 8 ? (int)dev_min(nbytes - i * 8, 8) : 0;
      uint64_t x = w[u];
      if (st.local != nullptr) x = load8(st.local + i * 8, valid); /* the host's choice too */
      x = low_bytes(x, valid);
      if (to_out && valid > 0) store8(st.out + i * 8, x, valid);
      for (int j = 0; j < st.nsend; j++) ll_write(g.conns[st.send[j]], i, x);
    }
  }
  return true;
}

/* A reduction step, in rounds of one stage: received lines -> stages, reduce_step (the Simple
 * arithmetic) -> output and the result stage, result stage -> send lines. */
static __device__ bool ll_reduce_lines(const kctx_t& k, const grp_t& g, const dstep_t& st,
                                       const red_t& r, size_t unit, size_t nbytes) {
  const size_t rb_max = (size_t)g.stage_bytes;
  char* res = g.stage + (size_t)TREE_MAX_CHILDREN * rb_max;
  for (size_t r0 = 0; r0 < nbytes; r0 += rb_max) {
    const size_t rb = dev_min(rb_max, nbytes - r0), l0 = r0 / 8, nl = (rb + 7) / 8;
    bool bad = false;
    const size_t stride = (size_t)g.nth;
    for (size_t i0 = (size_t)g.tid; i0 < nl && !bad; i0 += stride * LL_BATCH) {
      for (int j = 0; j < st.nrecv && !bad; j++) {
        uint64_t w[LL_BATCH];
        bad = !ll_read_batch(k, g.conns[st.recv[j]], l0 + i0, stride, l0 + nl, w);
        uint64_t* stage = reinterpret_cast<uint64_t*>(g.stage + (size_t)j * rb_max);
#pragma unroll
        for (int u = 0; u < LL_BATCH; u++)
          if (!bad && i0 + (size_t)u * stride < nl) stage[i0 + (size_t)u * stride] = w[u];
      }
    }
    if (g.tid == 0) {
      rc_args& a = *g.rc;
      const char* recv[TREE_MAX_CHILDREN];
      for (int j = 0; j < st.nrecv; j++) recv[j] = g.stage + (size_t)j * rb_max;
      rc_plan(a, st, r0, rb / unit, recv);
      if (st.nsend > 0) a.dst[a.ndst++] = res;
    }
    if (grp_sync_or(g, bad)) return false;
    DTRACE(k, g, TR_STAGED);
    reduce_step(g, *g.rc, r, unit, st.postop);
    grp_sync(g);
    DTRACE(k, g, TR_REDUCED);
    for (size_t i = (size_t)g.tid; i < nl && st.nsend > 0; i += (size_t)g.nth) {
      const int valid = (int)dev_min(rb - i * 8, 8);
      const uint64_t w = low_bytes(reinterpret_cast<const uint64_t*>(res)[i], valid);
      for (int j = 0; j < st.nsend; j++) ll_write(g.conns[st.send[j]], l0 + i, w);
    }
  }
  return true;
}

static __device__ __noinline__ bool step_ll(const kctx_t& k, const grp_t& g, const dstep_t& st,
                                            const red_t& r, size_t unit) {
  DTRACE(k, g, TR_STEP_IN);
  bool bad = false;
  if (g.tid == 0) bad = !wait_send(k, g, st);
  DTRACE(k, g, TR_HEAD);
  if (grp_sync_or(g, bad)) return false;
  const size_t nbytes = st.nelem * unit; /* st is the leader's: read after the barrier */
  const size_t nlines = nbytes == 0 ? 1 : (nbytes + 7) / 8;
  if (step_computes(st, r) && nbytes > 0)
    bad = !ll_reduce_lines(k, g, st, r, unit, nbytes);
  else
    bad = !ll_copy_lines(k, g, st, nbytes);
  if (grp_sync_or(g, bad)) return false;
  DTRACE(k, g, TR_MOVED);
  if (g.tid == 0) publish_lines(g, st, (int)(nlines * sizeof(ll_line_t)));
  return true;
}

/* ---- LL128 -------------------------------------------------------------------------------------
 */
/* Warp-wide wait for the lines base + (lane >> 3) of c's current slot, lines below nlines; every
 * lane gets its 16 bytes of its line (the eighth lane: data word, flag). false (warp-uniform) on
 * a stop.
 * The writer's line arrives whole, but nothing promises that the warp's load of it is one
 * snapshot: its 32-byte sectors may be read on either side of the remote store's arrival, so the
 * poll that first sees the flag could hold stale data in the other lanes. Once every flag is seen
 * the lanes load their 16 bytes again, certainly after the line landed, as stock does. (In run
 * 44, 300 LL128 all-to-alls without the second load saw no torn line: a guard, not a fix; run
 * 44's A/B kept it, and the build knob that left it out is gone.) */
static __device__ __forceinline__ bool ll128_read(const kctx_t& k, const cuda_conn_t& c,
                                                  size_t line, bool active, int pos, uint64_t& a,
                                                  uint64_t& b) {
  const char* p = slot_of(c, PROTO_LL128) + line * LL128_LINE_BYTES + (size_t)pos * 16;
  const uint64_t flag = c.step + 1;
  a = b = 0;
  int n = 0, checks = 0;
  for (;;) {
    if (active) ld_volatile_v2u64(p, a, b);
    const bool ok = !active || pos != 7 || b == flag;
    if (__all_sync(0xffffffffu, ok)) {
      if (active) ld_volatile_v2u64(p, a, b);
      return true;
    }
    if (++n == SPIN_CHECK) {
      n = 0;
      if (__any_sync(0xffffffffu, should_stop(k, checks))) return false;
    }
  }
}

static __device__ __forceinline__ void ll128_write(const cuda_conn_t& c, size_t line, int pos,
                                                   uint64_t a, uint64_t b) {
  char* p = slot_of(c, PROTO_LL128) + line * LL128_LINE_BYTES + (size_t)pos * 16;
  st_volatile_v2u64(p, a, pos == 7 ? c.step + 1 : b);
}

/* Lines handled by a warp per pass: 4 (8 lanes a line). */
static __device__ bool ll128_copy_lines(const kctx_t& k, const grp_t& g, const dstep_t& st,
                                        size_t nbytes) {
  const size_t nlines = nbytes == 0 ? 1 : (nbytes + LL128_DATA_BYTES - 1) / LL128_DATA_BYTES;
  const int lane = g.tid & 31, warp = g.tid >> 5, nwarps = g.nth >> 5;
  const int pos = lane & 7, width = pos == 7 ? 8 : 16;
  const bool to_out = st.out != nullptr && st.out != st.local;
  for (size_t base = (size_t)warp * 4; base < nlines; base += (size_t)nwarps * 4) {
    const size_t line = base + (size_t)(lane >> 3);
    const bool active = line < nlines;
    const size_t off = line * LL128_DATA_BYTES + (size_t)pos * 16;
    const int valid = active && nbytes > off ? (int)dev_min(nbytes - off, (size_t)width) : 0;
    uint64_t a = 0, b = 0;
    if (st.nrecv > 0 && !ll128_read(k, g.conns[st.recv[0]], line, active, pos, a, b)) return false;
    if (st.local != nullptr && valid > 0) {
      uint4 v = load16(st.local + off, valid);
      a = (uint64_t)v.x | (uint64_t)v.y << 32;
      b = (uint64_t)v.z | (uint64_t)v.w << 32;
    }
    if (to_out && valid > 0)
      store16(st.out + off,
              make_uint4((uint32_t)a, (uint32_t)(a >> 32), (uint32_t)b, (uint32_t)(b >> 32)),
              valid);
    __syncwarp(); /* a line's 8 lanes store in one instruction (NVLink delivers it whole) */
    if (active)
      for (int j = 0; j < st.nsend; j++) ll128_write(g.conns[st.send[j]], line, pos, a, b);
  }
  return true;
}

static __device__ bool ll128_reduce_lines(const kctx_t& k, const grp_t& g, const dstep_t& st,
                                          const red_t& r, size_t unit, size_t nbytes) {
  /* a round: a whole number of lines, an even number so rounds start 16-byte aligned */
  const size_t round_lines = (size_t)g.stage_bytes / LL128_DATA_BYTES / 2 * 2;
  const size_t rb_max = round_lines * LL128_DATA_BYTES;
  const size_t stride = (size_t)g.stage_bytes;
  char* res = g.stage + (size_t)TREE_MAX_CHILDREN * stride;
  const int lane = g.tid & 31, warp = g.tid >> 5, nwarps = g.nth >> 5;
  const int pos = lane & 7;
  for (size_t r0 = 0; r0 < nbytes; r0 += rb_max) {
    const size_t rb = dev_min(rb_max, nbytes - r0), l0 = r0 / LL128_DATA_BYTES;
    const size_t nl = (rb + LL128_DATA_BYTES - 1) / LL128_DATA_BYTES;
    bool bad = false;
    for (size_t base = (size_t)warp * 4; base < nl && !bad; base += (size_t)nwarps * 4) {
      const size_t li = base + (size_t)(lane >> 3);
      const bool active = li < nl;
      for (int j = 0; j < st.nrecv && !bad; j++) {
        uint64_t a, b;
        bad = !ll128_read(k, g.conns[st.recv[j]], l0 + li, active, pos, a, b);
        if (bad || !active) continue;
        uint64_t* s = reinterpret_cast<uint64_t*>(g.stage + (size_t)j * stride +
                                                  li * LL128_DATA_BYTES + (size_t)pos * 16);
        s[0] = a;
        if (pos != 7) s[1] = b;
      }
    }
    if (g.tid == 0) {
      rc_args& a = *g.rc;
      const char* recv[TREE_MAX_CHILDREN];
      for (int j = 0; j < st.nrecv; j++) recv[j] = g.stage + (size_t)j * stride;
      rc_plan(a, st, r0, rb / unit, recv);
      if (st.nsend > 0) a.dst[a.ndst++] = res;
    }
    if (grp_sync_or(g, bad)) return false;
    DTRACE(k, g, TR_STAGED);
    reduce_step(g, *g.rc, r, unit, st.postop);
    grp_sync(g);
    DTRACE(k, g, TR_REDUCED);
    if (st.nsend == 0) continue;
    for (size_t base = (size_t)warp * 4; base < nl; base += (size_t)nwarps * 4) {
      const size_t li = base + (size_t)(lane >> 3);
      __syncwarp();
      if (li >= nl) continue;
      const uint64_t* s =
          reinterpret_cast<const uint64_t*>(res + li * LL128_DATA_BYTES + (size_t)pos * 16);
      const uint64_t w0 = s[0], w1 = pos != 7 ? s[1] : 0;
      for (int j = 0; j < st.nsend; j++) ll128_write(g.conns[st.send[j]], l0 + li, pos, w0, w1);
    }
  }
  return true;
}

static __device__ __noinline__ bool step_ll128(const kctx_t& k, const grp_t& g, const dstep_t& st,
                                               const red_t& r, size_t unit) {
  DTRACE(k, g, TR_STEP_IN);
  bool bad = false;
  if (g.tid == 0) bad = !wait_send(k, g, st);
  DTRACE(k, g, TR_HEAD);
  if (grp_sync_or(g, bad)) return false;
  const size_t nbytes = st.nelem * unit; /* st is the leader's: read after the barrier */
  const size_t nlines = nbytes == 0 ? 1 : (nbytes + LL128_DATA_BYTES - 1) / LL128_DATA_BYTES;
  if (step_computes(st, r) && nbytes > 0)
    bad = !ll128_reduce_lines(k, g, st, r, unit, nbytes);
  else
    bad = !ll128_copy_lines(k, g, st, nbytes);
  if (grp_sync_or(g, bad)) return false;
  DTRACE(k, g, TR_MOVED);
  if (g.tid == 0) publish_lines(g, st, (int)(nlines * LL128_LINE_BYTES));
  return true;
}

/* Runs one step; false when the group must stop (abort, or an error reported). */
static __device__ __forceinline__ bool step_run(const kctx_t& k, const grp_t& g, dstep_t& st,
                                                int proto, const red_t& r, size_t unit) {
  switch (proto) {
    case PROTO_LL:
      return step_ll(k, g, st, r, unit);
    case PROTO_LL128:
      return step_ll128(k, g, st, r, unit);
    default:
      return step_simple(k, g, st, r, unit);
  }
}

}  // namespace baton

#endif /* BATON_DEVICE_CUDA_PRIMS_DEVICE_CUH */
