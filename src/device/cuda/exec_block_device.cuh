/* The CUDA executor's kernel body: one block per channel walks its list of work items in order.
 * Included by the kernel entry points (kernel_*.cu), one per parameter block size.
 *
 *  - A collective item runs its lane's steps (below: vocab.h's, roles mapped to the group's
 *    connection slots) with the whole block; a tree
 *    AllReduce splits the block in two halves that run the up lane (reduce towards the root) and
 *    the down lane (broadcast from the root) concurrently, the root's down step k waiting for its
 *    up step k through a shared-memory counter.
 *  - A run of consecutive point-to-point items splits the block into a send half and a receive
 *    half, each walking its own items in order, so a rank's send to A and its receive from B
 *    progress together. Copies to self never come here (plan.local: local.c).
 *  - After each item (or run) the block meets at a barrier that also tells every thread whether
 *    some group stopped (abort flag, or an error reported to the host); then the block returns.
 * Each connection's position (step) is loaded into shared memory when an item starts and written
 * back to its device mirror when the item ends, so the next item and the next launch go on from
 * there.
 * Around the body, cuda_exec.h's progress marks note each launch's start and end for the host. */
#ifndef BATON_DEVICE_CUDA_EXEC_BLOCK_DEVICE_CUH
#define BATON_DEVICE_CUDA_EXEC_BLOCK_DEVICE_CUH

#include <cuda_runtime.h>
#include <stdio.h>

#include "device/cuda/prims_device.cuh"

namespace baton {

/* ---- Steps: the step math both executors share (vocab/vocab.h), with the group's connection
 * slots in place of the roles. A ring lane receives on CONN_RING_RECV and sends on
 * CONN_RING_SEND; a tree lane talks to its j-th child on slot j and to its parent on
 * CONN_TREE_UP; a point-to-point lane to its peer on CONN_P2P. */
/* Connection slots of a group (indexes into grp_t.conns). */
enum { CONN_RING_RECV = 0, CONN_RING_SEND = 1, CONN_TREE_UP = TREE_MAX_CHILDREN, CONN_P2P = 0 };
#define GRP_CONNS (TREE_MAX_CHILDREN + 1)

typedef step_lane_t lane_t;

static __device__ __forceinline__ int conn_of_role(int role) {
  switch (role) {
    case STEP_ROLE_RING_PREV:
      return CONN_RING_RECV;
    case STEP_ROLE_RING_NEXT:
      return CONN_RING_SEND;
    case STEP_ROLE_TREE_UP:
      return CONN_TREE_UP;
    case STEP_ROLE_P2P_PEER:
      return CONN_P2P;
    default: /* the role-th child, or the role-th other rank */
      return role;
  }
}

static __device__ __forceinline__ size_t lane_nops(const lane_t& ln) {
  return steps_count(&ln);
}

/* The wide kernels (512 threads) are held to 128 registers: the plan inlined into lane_run reloaded
 * 448 bytes of spilled state each step, and on its own it spills nothing. 4 H100s, graph replay:
 * Reduce 1-16 MiB 2.7-3.5 % faster, ring AllReduce 16 MiB 1.5 %, ReduceScatter 0.8-1.2 %. The
 * narrow kernels (255 registers) spill nothing with it inlined, and the call cost LL rings 1 %. */
#ifdef BATON_EXEC_WIDE
#define LANE_STEP_ATTR __noinline__
#else
#define LANE_STEP_ATTR
#endif
static __device__ LANE_STEP_ATTR void lane_step(const lane_t& ln, size_t k, dstep_t& st) {
  steps_plan(&ln, k, &st);
  for (int j = 0; j < st.nrecv; j++) st.recv[j] = conn_of_role(st.recv[j]);
  for (int j = 0; j < st.nsend; j++) st.send[j] = conn_of_role(st.send[j]);
  st.drecv = steps_recv_direct(&ln, &st);
  st.dsend = steps_send_direct(&ln, &st);
  st.dx = st.out != nullptr ? (size_t)(st.out - ln.recvbuff) : 0;
}

/* The group, when a ring item starts: thread 0 sets the direct writes' state of its connections
 * (vocab.h's "Direct writes"), and the mailbox of its receive connection gets its output when a
 * step of the item will find its data there: the base first, then the tag with release order.
 * The publishing thread posts (thread 0 in a group without one): the release store took 2.5 us
 * of thread 0's way to its first step (2 H100s); the publisher only waits for that step's data.
 * (Step 0 of a direct lane never receives, so the receive connection's step is still the item's
 * first when it is read.) */
static __device__ void direct_begin(const grp_t& g, const lane_t& ln) {
  if (!steps_lane_direct(&ln)) return;
  if (g.tid == 0)
    for (int j = CONN_RING_RECV; j <= CONN_RING_SEND; j++) {
      g.conns[j].dstart = g.conns[j].step;
      g.conns[j].dpeer = nullptr;
    }
  const cuda_conn_t& r = g.conns[CONN_RING_RECV];
  if (g.tid == (g.nw < g.nth ? g.nw : 0) && (r.flags & CONN_FLAG_DIRECT) &&
      steps_lane_recvs_direct(&ln)) {
    st_volatile_u64(r.dmbox, (uint64_t)(uintptr_t)ln.recvbuff);
    st_release_sys_u64(r.dmbox + 1, steps_direct_tag(r.step));
  }
}

#define GROUP_WARPS (CUDA_EXEC_GROUP_THREADS / 32)
/* Named barriers: the block, each group, and each group's workers (grp_t). */
enum {
  BAR_BLOCK = 0,
  BAR_ALL = 1,
  BAR_HALF0 = 2,
  BAR_HALF1 = 3,
  BAR_ALL_WORKERS = 4,
  BAR_HALF0_WORKERS = 5,
  BAR_HALF1_WORKERS = 6
};

/* What a group's leader (its thread 0) works out for the whole group: the item's lane and
 * reduction, each step's plan (lane_step) and its reduce/copy descriptor. Kept in shared memory,
 * so the other threads neither repeat the arithmetic nor hold it in (slow) local memory. Step s
 * has st[s % 2]: a publishing warp may still read step s's plan while the leader writes s + 1's. */
struct grp_shared_t {
  lane_t ln;
  red_t r;
  dstep_t st[2];
  rc_args rc;
};

struct block_smem_t {
  cuda_conn_t conns[2][GRP_CONNS]; /* per group */
  cuda_conn_t* home[2][GRP_CONNS]; /* their device mirrors (NULL: slot unused) */
  grp_shared_t gs[2];              /* per group */
  kctx_t k;
  volatile int stop;
  volatile unsigned long long up_done; /* tree: up steps the root has finished */
#ifdef BATON_DEVICE_TRACE
  dtrace_t trace;
#endif
};

#ifdef BATON_DEVICE_TRACE
/* Per device (module globals): launches seen and when the last one ended. */
static __device__ unsigned long long trace_launches;
static __device__ unsigned long long trace_last_end;

static __device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Block 0's thread 0 at the end of a launch: one launch in TRACE_EVERY prints its timeline as
 * "baton-trace r<rank> n<launch> gap <ns since the previous launch ended> dur <ns> cyc <cycles>"
 * and then "id@cycles" pairs, 8 a line. */
static __device__ void trace_report(const cuda_args_hdr_t* hdr, const dtrace_t& t,
                                    unsigned long long start_ns) {
  const unsigned long long end_ns = globaltimer_ns();
  const long long cyc = clock64() - t.t0;
  const unsigned long long n = atomicAdd(&trace_launches, 1ull);
  const unsigned long long last = trace_last_end;
  trace_last_end = end_ns;
  if (n % TRACE_EVERY != TRACE_EVERY / 2) return;
  const int cnt = t.n < TRACE_MAX ? t.n : TRACE_MAX;
  printf("baton-trace r%d n%llu gap %llu dur %llu cyc %lld items %d marks %d\n", hdr->rank, n,
         last != 0 && start_ns > last ? start_ns - last : 0ull, end_ns - start_ns, cyc,
         (int)(hdr->first[1] - hdr->first[0]), t.n);
  for (int i = 0; i < cnt; i += 8) {
    int id[8], dt[8];
    for (int j = 0; j < 8; j++) {
      id[j] = i + j < cnt ? t.id[i + j] : 0;
      dt[j] = i + j < cnt ? t.dt[i + j] : 0;
    }
    printf("baton-trace r%d n%llu %d@%d %d@%d %d@%d %d@%d %d@%d %d@%d %d@%d %d@%d\n", hdr->rank, n,
           id[0], dt[0], id[1], dt[1], id[2], dt[2], id[3], dt[3], id[4], dt[4], id[5], dt[5],
           id[6], dt[6], id[7], dt[7]);
  }
}
#endif

static __device__ __forceinline__ bool block_sync_or(bool pred) {
  grp_t g;
  g.bar = BAR_BLOCK;
  g.nth = CUDA_EXEC_THREADS;
  return grp_sync_or(g, pred);
}

extern __shared__ __align__(16) char stage_smem[]; /* CUDA_EXEC_STAGE_BYTES, dynamic */

/* A group of CUDA_EXEC_PUBLISHER_MIN_THREADS or more sets its last warp apart to publish Simple
 * steps; its workers meet at bar_workers. */
static __device__ __forceinline__ void grp_set_workers(grp_t& g, int bar_workers) {
  const bool split = g.nth >= CUDA_EXEC_PUBLISHER_MIN_THREADS;
  g.nw = split ? g.nth - 32 : g.nth;
  g.bar_w = split ? bar_workers : g.bar;
}

static __device__ __forceinline__ grp_t group_all(block_smem_t& sm) {
  grp_t g;
  g.tid = threadIdx.x;
  g.nth = CUDA_EXEC_THREADS;
  g.bar = BAR_ALL;
  grp_set_workers(g, BAR_ALL_WORKERS);
  g.conns = sm.conns[0];
  g.rc = &sm.gs[0].rc;
  g.stage = stage_smem;
  g.stage_bytes = CUDA_EXEC_STAGE_BYTES / GRP_STAGES;
  return g;
}

/* The half of the block this thread is in (0: first GROUP_WARPS warps). */
static __device__ __forceinline__ grp_t group_half(block_smem_t& sm, int& half) {
  half = threadIdx.x >= CUDA_EXEC_GROUP_THREADS;
  grp_t g;
  g.tid = threadIdx.x - half * CUDA_EXEC_GROUP_THREADS;
  g.nth = CUDA_EXEC_GROUP_THREADS;
  g.bar = half ? BAR_HALF1 : BAR_HALF0;
  grp_set_workers(g, half ? BAR_HALF1_WORKERS : BAR_HALF0_WORKERS);
  g.conns = sm.conns[half];
  g.rc = &sm.gs[half].rc;
  g.stage = stage_smem + half * (CUDA_EXEC_STAGE_BYTES / 2);
  g.stage_bytes = CUDA_EXEC_STAGE_BYTES / 2 / GRP_STAGES;
  return g;
}

/* The group copies the mirrors it will drive into shared memory, a 64-bit word per thread (one
 * round trip to device memory instead of one per connection). */
static_assert(sizeof(cuda_conn_t) % 8 == 0, "cuda_conn_t is copied in 64-bit words");
static __device__ void conns_load(const kctx_t& k, const grp_t& g, cuda_conn_t** home,
                                  cuda_conn_t* const* src) {
  enum { WORDS = sizeof(cuda_conn_t) / 8 };
  if (g.tid < GRP_CONNS * WORDS) {
    const int j = g.tid / WORDS, w = g.tid % WORDS;
    if (src[j] != nullptr)
      reinterpret_cast<uint64_t*>(&g.conns[j])[w] = reinterpret_cast<const uint64_t*>(src[j])[w];
  }
  if (g.tid == 0) {
    for (int j = 0; j < GRP_CONNS; j++) home[j] = src[j];
    DTRACE(k, g, TR_LOADED);
  }
  grp_sync(g);
  DTRACE(k, g, TR_SYNCED);
}

/* Thread 0 writes the mirrors back, after it (or the publishing warp, lane_run) published the
 * item's last step; the barrier keeps the next item's conns_load (the group's other threads, in a
 * half running several point-to-point items) from overwriting them first. */
static __device__ void conns_store(const grp_t& g, cuda_conn_t* const* home) {
  if (g.tid == 0) {
    for (int j = 0; j < GRP_CONNS; j++)
      if (home[j] != nullptr) {
        home[j]->step = g.conns[j].step;
        home[j]->head_seen = g.conns[j].head_seen;
      }
  }
  grp_sync(g);
}

/* Runs a lane's steps. gate: wait for the root's up lane before each step; signal: count this
 * lane's finished steps in up_done. */
static __device__ __noinline__ bool lane_run(const kctx_t& k, const grp_t& g, block_smem_t& sm,
                                             grp_shared_t& gs, int proto, bool gate, bool signal) {
  const lane_t& ln = gs.ln;
  const red_t& r = gs.r;
  const size_t nops = lane_nops(ln);
  for (size_t s = 0; s < nops; s++) {
    if (gate) {
      bool bad = false;
      if (g.tid == 0) {
        const unsigned long long need = s + 1;
        bad = !spin_until(k, [&] { return sm.up_done >= need; });
        __threadfence_block();
      }
      if (grp_sync_or(g, bad)) return false;
    }
    /* The leader plans step s; the others read the plan after the step's first barrier (every
     * step starts with the leader's waits and that barrier). A plan takes the leader 1.7-2.3 us
     * after every step of a ring, beside its publisher's fence; the publishing warp planning the
     * next step during the workers' copy instead made 4-GPU rings 3-6 % slower. */
    dstep_t& st = gs.st[s & 1];
    DTRACE(k, g, TR_PLAN_IN);
    if (g.tid == 0) lane_step(ln, s, st);
    DTRACE(k, g, TR_PLANNED);
    if (!step_run(k, g, st, proto, r, ln.unit)) return false;
    if (signal && g.tid == 0) {
      __threadfence_block(); /* the group's output writes (ordered by the step's last barrier) */
      sm.up_done = s + 1;
    }
  }
  /* A publishing warp has published the last step before thread 0 stores the conns back
   * (conns_store's barrier then keeps the next item from overwriting them). Where thread 0
   * publishes, program order does it. */
  if (g.nw < g.nth && proto == PROTO_SIMPLE) grp_sync(g);
  return true;
}

static __device__ red_t item_red(const cuda_work_t* w) {
  red_t r;
  r.dtype = w->dtype;
  r.op = w->op;
  r.scalar = w->u.scalar;
  r.div = w->u.scalar;
  if (w->op == DEV_OP_PREMULSUM && w->scalar_on_device) {
    const void* p = w->u.scalar_ptr;
    switch (w->esize) {
      case 1:
        r.scalar = *(const uint8_t*)p;
        break;
      case 2:
        r.scalar = *(const uint16_t*)p;
        break;
      case 4:
        r.scalar = *(const uint32_t*)p;
        break;
      default:
        r.scalar = *(const uint64_t*)p;
        break;
    }
  }
  return r;
}

/* The item's lane (vocab.h's steps_lane, as every executor makes it) with this channel's links. */
static __device__ lane_t item_lane(const cuda_args_hdr_t* hdr, const cuda_chan_t* ch,
                                   const cuda_work_t* w, int kind) {
  const step_item_t it = cuda_work_item(w);
  lane_t ln = steps_lane(kind, &it, hdr->nranks, hdr->rank);
  ln.idx = ch->ring_index;
  ln.ring = ch->ring_ranks;
  ln.has_up = ch->tree_up >= 0;
  ln.ndown = ch->ndown;
  return ln;
}

static __device__ bool coll_run(const kctx_t& k, block_smem_t& sm, const cuda_args_hdr_t* hdr,
                                const cuda_chan_t* ch, const cuda_work_t* w) {
  cuda_conn_t* src[GRP_CONNS] = {nullptr, nullptr, nullptr, nullptr};
  if (w->algo == ALGO_RING) {
    const grp_t g = group_all(sm);
    grp_shared_t& gs = sm.gs[0];
    if (g.tid == 0) {
      gs.ln = item_lane(hdr, ch, w, LANE_RING);
      gs.r = item_red(w);
    }
    src[CONN_RING_RECV] = ch->ring_recv;
    src[CONN_RING_SEND] = ch->ring_send;
    conns_load(k, g, sm.home[0], src); /* also publishes gs to the group */
    direct_begin(g, gs.ln);            /* the group reads conns after a step's barrier */
    bool ok = lane_run(k, g, sm, gs, w->proto, false, false);
    conns_store(g, sm.home[0]);
    return ok;
  }
  /* tree: up lane on the first half, down lane on the second (the root's down lane waits for
   * its up lane) */
  if (threadIdx.x == 0) sm.up_done = 0;
  __syncthreads();
  int half;
  const grp_t g = group_half(sm, half);
  grp_shared_t& gs = sm.gs[half];
  const bool ordered = ch->tree_up < 0; /* the root's down half waits for its up half */
  if (g.tid == 0) {
    gs.ln = item_lane(hdr, ch, w, half == 0 ? LANE_TREE_UP : LANE_TREE_DOWN);
    gs.r = item_red(w);
  }
  for (int j = 0; j < ch->ndown; j++) src[j] = half == 0 ? ch->down_recv[j] : ch->down_send[j];
  if (ch->tree_up >= 0) src[CONN_TREE_UP] = half == 0 ? ch->up_send : ch->up_recv;
  conns_load(k, g, sm.home[half], src);
  bool ok = lane_run(k, g, sm, gs, w->proto, half == 1 && ordered, half == 0 && ordered);
  conns_store(g, sm.home[half]);
  return ok;
}

/* A run of point-to-point items: sends on the first half, receives on the second. */
static __device__ bool p2p_run(const kctx_t& k, block_smem_t& sm, const cuda_args_hdr_t* hdr,
                               const cuda_chan_t* ch, const cuda_work_t* works, int nwork) {
  int half;
  const grp_t g = group_half(sm, half);
  grp_shared_t& gs = sm.gs[half];
  const int mine = half == 0 ? FUNC_SEND : FUNC_RECV;
  for (int i = 0; i < nwork; i++) {
    const cuda_work_t* w = &works[i];
    if (w->func != mine) continue;
    if (g.tid == 0) {
      gs.ln = item_lane(hdr, ch, w, half == 0 ? LANE_SEND : LANE_RECV);
      gs.r.dtype = w->dtype;
      gs.r.op = DEV_OP_SUM;
      gs.r.scalar = gs.r.div = 0;
    }
    cuda_conn_t* src[GRP_CONNS] = {w->u.conn, nullptr, nullptr, nullptr};
    conns_load(k, g, sm.home[half], src);
    bool ok = lane_run(k, g, sm, gs, w->proto, false, false);
    conns_store(g, sm.home[half]);
    if (!ok) return false;
  }
  return true;
}

static __device__ __noinline__ void exec_block(const cuda_args_hdr_t* hdr,
                                               const cuda_work_t* works) {
  __shared__ block_smem_t sm;
  const int b = blockIdx.x;
  const int c = hdr->chan_id[b];
  kctx_t& k = sm.k;
#ifdef BATON_DEVICE_TRACE
  unsigned long long start_ns = 0;
  if (b == 0 && threadIdx.x == 0) {
    start_ns = globaltimer_ns();
    sm.trace.t0 = clock64();
    sm.trace.n = 0;
  }
#endif
  if (threadIdx.x == 0) {
    sm.stop = 0;
    sm.up_done = 0;
    k.abort_flag = hdr->abort_flag;
    k.status = hdr->status;
    k.stop = &sm.stop;
    k.channel = c;
    k.trace = nullptr;
#ifdef BATON_DEVICE_TRACE
    if (b == 0) k.trace = &sm.trace;
#endif
  }
  __syncthreads();
  const cuda_chan_t* ch = hdr->chans + c;
  const int end = hdr->first[b + 1];
  for (int i = hdr->first[b]; i < end;) {
    bool ok;
    const int func = works[i].func;
    if (func == FUNC_SEND || func == FUNC_RECV) {
      int j = i + 1;
      while (j < end && (works[j].func == FUNC_SEND || works[j].func == FUNC_RECV)) j++;
      ok = p2p_run(k, sm, hdr, ch, works + i, j - i);
      i = j;
    } else {
      ok = coll_run(k, sm, hdr, ch, &works[i]);
      i++;
    }
    if (block_sync_or(!ok)) return; /* also orders this item's writes before the next item */
    DTRACE(k, group_all(sm), TR_ITEM_END);
  }
#ifdef BATON_DEVICE_TRACE
  if (b == 0 && threadIdx.x == 0) trace_report(hdr, sm.trace, start_ns);
#endif
}

}  // namespace baton

/* An entry point: the kernel for one parameter block type. Each is defined in a file of its own
 * (kernel_tiny.cu, kernel_tiny_wide.cu, ...), so they compile in parallel; kernel.cu hands them
 * to the launcher. */
#define BATON_EXEC_KERNEL(name, args_t)                   \
  __global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1) \
      name(const __grid_constant__ args_t args) {         \
    baton::progress_begin(&args.hdr);                     \
    baton::exec_block(&args.hdr, args.works);             \
    baton::progress_end(&args.hdr);                       \
  }

#endif /* BATON_DEVICE_CUDA_EXEC_BLOCK_DEVICE_CUH */
