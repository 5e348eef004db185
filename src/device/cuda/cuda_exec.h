/* CUDA executor internals (private to src/device/cuda). Plain C: included by the host code
 * (exec.c, launch.c, local.c) and by the kernels' translation units (kernel*.cu).
 *
 * Shape:
 *   exec.c       executor_cuda_ops: init (device tables, abort flag mapping), fini, the views;
 *                the device mirrors of the transport's conn_fifo_t (one per channel, peer and
 *                direction; conn->step lives on in device memory across launches) and the
 *                per-channel table the kernel reads
 *   launch.c     one launch: enter/leave, streams, capture, ordering; work_t -> cuda_work_t (the
 *                planner decided everything: this looks up the connections' device mirrors),
 *                and the split of a large plan into several launches that cannot deadlock
 *   local.c      plan.local: copies to self and one-rank collectives, as cudaMemcpyAsync or the
 *                many-block scaling kernel (kernel_local.cu), beside the channels' kernel
 *   kernel_*.cu  the kernel's entry points, one per parameter block size, each its own
 *                translation unit (they compile in parallel); kernel.cu hands them to exec.c;
 *                kernel_direct.cu the direct algorithms' kernel (direct_device.cuh)
 *   exec_block_device.cuh  the kernel: one block per channel walking its list of items
 *   *_device.cuh device code included by the kernel_*.cu only (steps, FIFO primitives,
 *                reductions)
 *
 * A launch passes everything per launch by value, as the kernel's parameter (cuda_args_*_t):
 * no copy and no host synchronisation per launch, so launches can be captured in CUDA graphs.
 * What persists (connection mirrors, channel table, ring orders) lives in device memory and is
 * written only when a connection appears. */
#ifndef BATON_DEVICE_CUDA_EXEC_H
#define BATON_DEVICE_CUDA_EXEC_H

#include <stdbool.h>
#include <stdint.h>

#include "device/device.h"
#include "vocab/vocab.h"

/* Threads per block (one block per channel). Every kernel entry point is built twice: narrow
 * (256 threads) and wide (512). A launch whose items all run Simple takes the wide kernel: with
 * the same vectors in flight a thread, a block keeps twice the bytes in flight, and a Simple step
 * is bound by that (2-GPU reduce_scatter 19-24 % faster at 64 MiB-1 GiB, 4-GPU Reduce 12 % at
 * 1 GiB: docs/gpu-results.md, run 40). LL and LL128 launches (small messages) stay narrow: 512
 * threads made a 2-GPU 64 KiB all-reduce 50 % slower. kernel_*_wide.cu define BATON_EXEC_WIDE
 * before including this header; host code and the narrow kernels see the narrow count. */
#ifndef CUDA_EXEC_NARROW_THREADS
#define CUDA_EXEC_NARROW_THREADS 256
#endif
#ifndef CUDA_EXEC_WIDE_THREADS
#define CUDA_EXEC_WIDE_THREADS 512
#endif
/* The launch's block size for the narrow or the wide kernels. */
#define CUDA_EXEC_BLOCK_THREADS(wide) ((wide) ? CUDA_EXEC_WIDE_THREADS : CUDA_EXEC_NARROW_THREADS)
#ifdef BATON_EXEC_WIDE
#define CUDA_EXEC_THREADS CUDA_EXEC_WIDE_THREADS
#else
#define CUDA_EXEC_THREADS CUDA_EXEC_NARROW_THREADS
#endif
/* 16-byte vectors a thread keeps in flight per source in copies and 4/8-byte reductions (half of
 * it for 2-byte types, a quarter for 1-byte ones, whose conversions make the unrolled code long):
 * with the thread count, a block's memory-level parallelism, so its bandwidth. */
#ifndef CUDA_EXEC_UNROLL
#define CUDA_EXEC_UNROLL 8
#endif
#define CUDA_EXEC_GROUP_THREADS (CUDA_EXEC_THREADS / 2) /* split items: send|recv, up|down */
/* A group of at least this many threads runs Simple steps with its last warp set apart to publish
 * them: the step's fence (which waits for its stores to cross the link) then overlaps the next
 * step's data, moved by the other warps. */
#ifndef CUDA_EXEC_PUBLISHER_MIN_THREADS
#define CUDA_EXEC_PUBLISHER_MIN_THREADS 256
#endif
/* Dynamic shared memory per block: the LL / LL128 reduction stages (4 per group of threads). A
 * round of LL lines is then 4 lines per thread (LL_BATCH), and the rest of the SM stays L1. */
#define CUDA_EXEC_STAGE_BYTES (32 << 10)

/* ---- Connection mirror (device memory): conn_fifo_t as the kernel drives it ----------------- */
typedef struct cuda_conn {
  char* buffs[PROTO_COUNT];
  int buff_bytes[PROTO_COUNT];
  int flags; /* CONN_FLAG_* */
  uint64_t* head;
  uint64_t* tail;
  int* sizes;
  uint64_t step; /* the executor's position, advanced by the kernel, kept across launches */
  /* Send side: the last value read from head (which lives in the receiver's memory, across the
   * link). head only grows, so a sender that still has room by this value need not read it. */
  uint64_t head_seen;
  uint64_t* dmbox; /* conn_fifo_t.dmbox (CONN_FLAG_DIRECT) */
  /* Kept only in the shared-memory copy, per item (the kernel sets them when the item starts):
   * the FIFO step the item started at, and the receiver's output base from the mailbox once the
   * sender has read it (0: not yet). */
  uint64_t dstart;
  char* dpeer;
} cuda_conn_t;

/* ---- Per-channel table (device memory, one entry per channel of the communicator) ----------- */
typedef struct cuda_chan {
  const int* ring_ranks; /* device copy of the ring order (nranks entries) */
  int ring_index;
  int tree_up;                               /* -1 at the root */
  int tree_down[TREE_MAX_CHILDREN];          /* -1 where unused */
  int ndown;                                 /* children present (compacted in cuda_conn order) */
  cuda_conn_t* ring_send;                    /* to ring_next */
  cuda_conn_t* ring_recv;                    /* from ring_prev */
  cuda_conn_t* up_send;                      /* to tree_up */
  cuda_conn_t* up_recv;                      /* from tree_up */
  cuda_conn_t* down_send[TREE_MAX_CHILDREN]; /* to the present children, in tree_down order */
  cuda_conn_t* down_recv[TREE_MAX_CHILDREN];
  /* Direct algorithms (nranks <= DIRECT_MAX_RANKS): to and from every other rank, in rank order */
  cuda_conn_t* peer_send[DIRECT_MAX_PEERS];
  cuda_conn_t* peer_recv[DIRECT_MAX_PEERS];
} cuda_chan_t;

/* ---- One work item as the kernel sees it ------------------------------------------------------
 * work_t as the planner decided it: units are elements for collectives and bytes for
 * point-to-point, the chunk fits every slot the item uses, root is the ring position. */
typedef struct cuda_work {
  uint8_t func;  /* func_t */
  uint8_t algo;  /* ALGO_* */
  uint8_t proto; /* PROTO_* */
  uint8_t dtype; /* ncclDataType_t */
  uint8_t op;    /* dev_op_kind_t */
  uint8_t scalar_on_device;
  uint8_t flags;  /* CUDA_WORK_ZC: work_t.zc (a OneShot item that starts with the zero-copy
                   * probe); CUDA_WORK_DIRECT: work_t.direct (a ring item) */
  uint8_t esize;  /* datatype size */
  int32_t root;   /* Broadcast/Reduce: the root's index in the channel's ring; Send/Recv: peer */
  uint32_t chunk; /* units per step (a slot holds at most INT_MAX bytes) */
  uint64_t count; /* work_t.count (elements) */
  uint64_t off;   /* the channel's slice, in units */
  uint64_t cnt;
  const char* sendbuff;
  char* recvbuff;
  union {
    uint64_t scalar;        /* collectives: PREMULSUM's scalar bits; SUMPOSTDIV: the divisor */
    const void* scalar_ptr; /* collectives: PREMULSUM with scalar_on_device */
    cuda_conn_t* conn;      /* point-to-point: the connection to or from the peer */
  } u;
  /* zc items: work_t.zc_win + 1 (0: none) in the top CUDA_ZC_WIN_SHIFT bits, work_t.zc_off
   * below: one word, so the item grows by 8 bytes only (the parameter blocks hold items). */
  uint64_t zc_loc;
} cuda_work_t;
enum { CUDA_WORK_ZC = 1, CUDA_WORK_DIRECT = 2 };
#define CUDA_ZC_WIN_SHIFT 48 /* zc_off < 2^48 bytes; the slot + 1 <= ZC_MAX_WINDOWS in 16 bits */

/* What launch.c packs of an item's geometry (the rest, the operation's scalar, the connection,
 * zero copy and staging, depends on the item's kind), and what the kernel reads back as the item
 * of vocab.h's steps_lane: the same values, so the kernel's lanes are the host executor's
 * (tests/unit/test_lanes.c). */
DEVICE_HOST_FN void cuda_work_geo(const work_t* w, size_t esize, cuda_work_t* o) {
  o->func = w->func;
  o->algo = w->algo;
  o->proto = w->proto;
  o->dtype = w->dtype;
  o->esize = (uint8_t)esize;
  o->root = steps_item_root(w->func, w->algo, w->root, w->root_idx);
  o->count = w->count;
  o->off = w->chan_off;
  o->cnt = w->chan_count;
  o->chunk = (uint32_t)w->chunk;
  o->sendbuff = (const char*)w->sendbuff;
  o->recvbuff = (char*)w->recvbuff;
  o->flags = (uint8_t)((o->flags & ~CUDA_WORK_DIRECT) | (w->direct ? CUDA_WORK_DIRECT : 0));
}
DEVICE_HOST_FN step_item_t cuda_work_item(const cuda_work_t* w) {
  step_item_t it;
  it.func = w->func;
  it.algo = w->algo;
  it.proto = w->proto;
  it.esize = w->esize;
  it.sendbuff = w->sendbuff;
  it.recvbuff = w->recvbuff;
  it.count = w->count;
  it.off = w->off;
  it.cnt = w->cnt;
  it.chunk = w->chunk;
  it.root = w->root;
  it.direct = (w->flags & CUDA_WORK_DIRECT) != 0;
  return it;
}

/* ---- Kernel-visible error report (mapped host memory) --------------------------------------- */
enum { CUDA_ERR_NONE = 0, CUDA_ERR_SIZE = 1, CUDA_ERR_ABORT = 2 };
typedef struct cuda_status {
  volatile int error; /* CUDA_ERR_*: the first one seen (best effort) */
  volatile int channel;
  volatile int expected; /* CUDA_ERR_SIZE: bytes this rank expected and bytes the slot held */
  volatile int got;
  volatile unsigned long long step;
} cuda_status_t;

/* ---- Launch progress (mapped host memory): the progress watch and the timeline read it -------
 * Block 0's thread 0 marks a launch's start (progress_begin, below); the last block to finish,
 * counted by progress_blocks in device memory (atomicInc wraps it back to 0), marks its end.
 * Plain stores of the launch's number: a CUDA graph replays the number it was captured with, and
 * the host keeps the largest one it has read, so replays never move the counters back. */
#define CUDA_PROGRESS_SLOTS 64 /* per-launch global-timer times, slot = launch % slots */
typedef struct __attribute__((aligned(16))) cuda_launch_time {
  volatile unsigned long long start_launch; /* the launch start_ns belongs to (one 16-byte */
  volatile unsigned long long start_ns;     /* store with it: progress_stamp) */
  volatile unsigned long long end_launch;   /* the same for end_ns */
  volatile unsigned long long end_ns;
} cuda_launch_time_t;
typedef struct cuda_progress {
  volatile unsigned long long started; /* number of the last launch that began */
  volatile unsigned long long done;    /* number of the last launch whose every block ended */
  cuda_launch_time_t slots[CUDA_PROGRESS_SLOTS];
} cuda_progress_t;

/* ---- Kernel parameters -------------------------------------------------------------------------
 * Blocks walk works[first[b], first[b+1]) on channel chan_id[b]. The kernels share one body and
 * differ in the size of their parameter block (CUDA_KERN_*, below). */
/* A launch has a block per channel with work (copies to self run beside it: local.c). */
#define CUDA_MAX_BLOCKS PLAN_MAX_CHANNELS
typedef struct cuda_args_hdr {
  const cuda_chan_t* chans;
  const volatile uint32_t* abort_flag; /* device view of the communicator's abort flag */
  cuda_status_t* status;
  cuda_progress_t* progress;     /* device view of the mapped progress record (NULL: none) */
  unsigned int* progress_blocks; /* device memory: blocks of this launch that have ended */
  /* exec_comm_t.zc_base_dev at launch: where rank p's shared window s lies, at s * nranks + p
   * (NULL while no window is shared; zc items read it) */
  void* const* zc_base;
  unsigned long long launch; /* this launch's number (exec_progress_t) */
  int32_t rank;
  int32_t nranks;
  int32_t nblocks;
  uint16_t first[CUDA_MAX_BLOCKS + 1];
  uint8_t chan_id[CUDA_MAX_BLOCKS];
  uint8_t pad[2];
} cuda_args_hdr_t;

/* Four parameter block sizes, from when a launch copied the whole declared block (the runtime's
 * launch: past 4 KiB, the classic limit, several microseconds more, run 7). launch.c now passes
 * the driver only the bytes in use (cuLaunchKernel with CU_LAUNCH_PARAM_BUFFER_SIZE); the sizes
 * remain, and a mid-size operation is kept to the small block. tiny: one operation on a few
 * channels; small: the most that fits in 4 KiB; medium: 8 KiB; large: the most Hopper allows.
 * The kernels share one body. */
#define CUDA_TINY_WORKS 8
#define CUDA_SMALL_WORKS ((4096 - (int)sizeof(cuda_args_hdr_t)) / (int)sizeof(cuda_work_t))
#define CUDA_MEDIUM_WORKS ((8192 - (int)sizeof(cuda_args_hdr_t)) / (int)sizeof(cuda_work_t))
#define CUDA_LARGE_WORKS ((32764 - (int)sizeof(cuda_args_hdr_t)) / (int)sizeof(cuda_work_t))
enum { CUDA_KERN_TINY = 0, CUDA_KERN_SMALL, CUDA_KERN_MEDIUM, CUDA_KERN_LARGE, CUDA_KERN_COUNT };

typedef struct cuda_args_tiny {
  cuda_args_hdr_t hdr;
  cuda_work_t works[CUDA_TINY_WORKS];
} cuda_args_tiny_t;

typedef struct cuda_args_small {
  cuda_args_hdr_t hdr;
  cuda_work_t works[CUDA_SMALL_WORKS];
} cuda_args_small_t;

typedef struct cuda_args_medium {
  cuda_args_hdr_t hdr;
  cuda_work_t works[CUDA_MEDIUM_WORKS];
} cuda_args_medium_t;

typedef struct cuda_args_large {
  cuda_args_hdr_t hdr;
  cuda_work_t works[CUDA_LARGE_WORKS];
} cuda_args_large_t;

#ifdef __cplusplus
static_assert(sizeof(cuda_work_t) == 72, "cuda_work_t layout");
static_assert(sizeof(cuda_args_large_t) <= 32764, "kernel parameters exceed Hopper's limit");
static_assert(sizeof(cuda_args_small_t) <= 4096, "the small parameter block exceeds 4 KiB");
#else
_Static_assert(sizeof(cuda_work_t) == 72, "cuda_work_t layout");
_Static_assert(sizeof(cuda_args_large_t) <= 32764, "kernel parameters exceed Hopper's limit");
#endif

#ifdef __cplusplus
extern "C" {
#endif
/* kernel.cu: the kernels' entry points for cudaLaunchKernel (CUDA_KERN_*, kernel_*.cu; wide: the
 * CUDA_EXEC_WIDE_THREADS build, kernel_*_wide.cu). */
const void* cuda_exec_kernel(int which, bool wide);
/* kernel_local.cu: the scaling kernel of plan.local (PreMulSum on one rank): dst = src * scalar
 * over count elements of dtype, with every thread of the grid. */
typedef struct cuda_local_args {
  const void* src;
  void* dst;
  uint64_t count;
  uint64_t scalar;        /* the scalar's bits in the datatype */
  const void* scalar_ptr; /* non-NULL: read the scalar here (ncclScalarDevice) */
  int32_t dtype;          /* -1: a plain copy of count bytes (local.c: small eager copies) */
} cuda_local_args_t;
const void* cuda_local_kernel(void);
/* kernel_direct.cu: the direct algorithms' kernel (a cuda_args_small_t parameter block, the narrow
 * block: CUDA_EXEC_NARROW_THREADS). */
const void* cuda_direct_kernel(void);
#define CUDA_LOCAL_THREADS 512
#ifdef __cplusplus
}
#endif

/* ==== Device side only: the launch progress marks (cuda_progress_t above) ========================
 * Where the host's progress watch learns that a launch began and ended, and the timeline gets its
 * device times: the kernels' entry points write them (exec_block_device.cuh's BATON_EXEC_KERNEL,
 * kernel_direct.cu, kernel_staged.cu). One thread writes each mark; nothing waits on them. */
#ifdef __CUDACC__
#include <cuda_runtime.h>

namespace baton {

static __device__ __forceinline__ unsigned long long progress_clock_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* No fences here: the marks guard no data, and a system-scope fence costs the launch about
 * 3 us (bench_launch pair_oneshot_marks: 7.1-7.3 us against 4.0 without marks). A slot's launch
 * number and time go out as one 16-byte store, so the host never pairs a number with another
 * launch's time; the host takes a slot only when both halves name the launch it asks for. */
static __device__ __forceinline__ void progress_stamp(volatile unsigned long long* pair,
                                                      unsigned long long launch) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(pair), "l"(launch),
               "l"(progress_clock_ns())
               : "memory");
}

/* Block 0's thread 0, before any work: the launch has started. */
static __device__ __forceinline__ void progress_begin(const cuda_args_hdr_t* h) {
  cuda_progress_t* p = h->progress;
  if (p == nullptr || blockIdx.x != 0 || threadIdx.x != 0) return;
  progress_stamp(&p->slots[h->launch % CUDA_PROGRESS_SLOTS].start_launch, h->launch);
  p->started = h->launch;
}

/* Every block once its work is over (finished or stopped): the last one to count itself marks
 * the end (the count is a device-scope atomic; the blocks' data needs no ordering with it). */
static __device__ __forceinline__ void progress_end(const cuda_args_hdr_t* h) {
  cuda_progress_t* p = h->progress;
  if (p == nullptr) return;
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (gridDim.x > 1 && atomicInc(h->progress_blocks, gridDim.x - 1) != gridDim.x - 1) return;
  progress_stamp(&p->slots[h->launch % CUDA_PROGRESS_SLOTS].end_launch, h->launch);
  p->done = h->launch;
}

}  // namespace baton
#endif /* __CUDACC__ */

/* ==== Host side only (exec.c, launch.c, local.c) ================================================
 */
#ifndef __CUDACC__
#include <stdbool.h>

#include "base/base.h"

/* Which launches take the wide kernels: those whose items all run Simple (NCCL_NTHREADS unset or
 * 0), none (NCCL_NTHREADS=256) or all (512). */
enum { CUDA_WIDE_AUTO = 0, CUDA_WIDE_NEVER, CUDA_WIDE_ALWAYS };

/* Host record of one mirrored connection. */
typedef struct cuda_mirror {
  const conn_fifo_t* host; /* the transport's FIFO the mirror was made from (NULL: none yet) */
  cuda_conn_t* dev;
} cuda_mirror_t;

/* The connections a channel's table entry points at, in a fixed order. */
enum {
  CUDA_CC_RING_SEND = 0,
  CUDA_CC_RING_RECV,
  CUDA_CC_UP_SEND,
  CUDA_CC_UP_RECV,
  CUDA_CC_DOWN_SEND,                                         /* + child index */
  CUDA_CC_DOWN_RECV = CUDA_CC_DOWN_SEND + TREE_MAX_CHILDREN, /* + child index */
  CUDA_CC_PEER_SEND = CUDA_CC_DOWN_RECV + TREE_MAX_CHILDREN, /* + index among the other ranks */
  CUDA_CC_PEER_RECV = CUDA_CC_PEER_SEND + DIRECT_MAX_PEERS,  /* + index among the other ranks */
  CUDA_CC_COUNT = CUDA_CC_PEER_RECV + DIRECT_MAX_PEERS
};

typedef struct cuda_chan_host {
  bool written;                          /* the device entry was written at least once */
  const conn_fifo_t* src[CUDA_CC_COUNT]; /* what the device entry mirrors now */
  const int* ring_src;                   /* dev_channel_t.ring_ranks the copy was made from */
  int* d_ring;                           /* device copy of the ring order */
  cuda_mirror_t* mirrors;                /* 2 * nranks: send to peer p at p, recv at nranks + p */
  cuda_chan_t entry;                     /* host image of the device entry */
} cuda_chan_host_t;

/* Scratch for splitting a plan over several launches (grows, never shrinks). */
typedef struct cuda_split {
  uint64_t* keys; /* one per item of the plan */
  size_t cap;
  uint64_t* sorted;
  size_t sorted_cap;
} cuda_split_t;

typedef struct cuda_exec {
  const exec_comm_t* comm; /* borrowed: stays valid and current until fini */
  int device;
  cudaStream_t side;    /* non-blocking stream for the rare writes of mirrors and tables */
  cuda_chan_t* d_chans; /* comm->nchannels entries */
  cuda_chan_host_t* chans;
  cuda_conn_t** pool;             /* device blocks of CUDA_POOL_BLOCK mirrors */
  int npool, pool_cap, pool_used; /* blocks, block slots, mirrors used in the last block */
  int pending;                    /* asynchronous writes issued on `side` since the last flush */
  const volatile uint32_t* d_abort;
  void* abort_page;        /* page this executor registered (cudaHostRegister), NULL if none */
  uint32_t* own_abort;     /* pinned, never set: used when the communicator has no abort flag */
  cuda_status_t* h_status; /* pinned and mapped */
  cuda_status_t* d_status;
  bool status_reported;
  cuda_progress_t* h_progress; /* pinned and mapped (NULL: launches are not tracked) */
  cuda_progress_t* d_progress;
  unsigned int* d_progress_blocks;
  uint64_t launched;                    /* launches issued (b_launch numbers them) */
  uint64_t max_started, max_done;       /* the largest numbers read from h_progress */
  const void* kern[2][CUDA_KERN_COUNT]; /* [wide][CUDA_KERN_*] */
  const void* kern_direct;              /* cuda_direct_kernel() */
  int wide_mode;                        /* CUDA_WIDE_*: from NCCL_NTHREADS */
  cudaEvent_t done;                     /* recorded after each launch outside stream capture */
  cudaStream_t last;                    /* the stream of that launch */
  bool have_last;
  cuda_split_t split;
  /* local.c: plan.local beside a kernel runs on local_stream, forked from and joined to the
   * launch stream with these events (made on first use) */
  cudaStream_t local_stream;
  cudaEvent_t local_fork, local_join;
  int local_max_blocks; /* the scaling kernel's grid limit (a few blocks per SM) */
  /* launch.c: a launch's other streams join its stream through these (made on first use; the
   * last one marks the launch's end) */
  cudaEvent_t* join;
  int njoin;
  cuda_args_large_t args; /* the parameter block being filled (copied by each launch) */
} cuda_exec_t;
#define CUDA_POOL_BLOCK 128

/* ---- launch.c: the executor's launch-time operations (exec.c's table names them) ----------- */
ncclResult_t cuda_exec_enter(int dev, bool relax, exec_scope_t* scope);
void cuda_exec_leave(const exec_scope_t* scope);
ncclResult_t cuda_exec_launch(void* state, const plan_t* plan, exec_streams_t* streams);
ncclResult_t cuda_exec_wait(void* state);
void cuda_exec_progress(void* state, exec_progress_t* out);
/* For fini: a failure some kernel recorded (reported once), and the join events freed. */
ncclResult_t cuda_status_check(cuda_exec_t* ex);
void cuda_join_fini(cuda_exec_t* ex);

/* ---- exec.c: the connections' device mirrors ------------------------------------------------ */
ncclResult_t cuda_conns_init(cuda_exec_t* ex);
void cuda_conns_fini(cuda_exec_t* ex);
/* The device mirror of the connection to (is_send) or from peer on channel c. */
ncclResult_t cuda_conn_mirror(cuda_exec_t* ex, int c, int peer, int is_send, cuda_conn_t** out);
/* Writes channel c's device entry (and the mirrors it points at) from the transport's current
 * connections; cuda_chan_sync calls it only when something changed. */
ncclResult_t cuda_chan_write(cuda_exec_t* ex, int c);
/* Waits for the asynchronous writes issued since the last wait (cuda_conns_flush). */
ncclResult_t cuda_conns_wait(cuda_exec_t* ex);

/* What a channel's table entry mirrors (the CUDA_CC_* order): the launch path compares it with
 * the transport's connections every launch, so these tests are inline; a write is exec.c's. */
static inline const conn_fifo_t* cuda_chan_conn(const dev_channel_t* dc, int peer, int is_send) {
  conn_fifo_t** tab = is_send ? dc->send : dc->recv;
  return peer >= 0 && tab != NULL ? tab[peer] : NULL;
}

static inline bool cuda_cc_is_send(int i) {
  return i == CUDA_CC_RING_SEND || i == CUDA_CC_UP_SEND ||
         (i >= CUDA_CC_DOWN_SEND && i < CUDA_CC_DOWN_RECV) ||
         (i >= CUDA_CC_PEER_SEND && i < CUDA_CC_PEER_RECV);
}

/* The peer behind entry i of a channel's table (the CUDA_CC_* order), -1 for none: the ring's
 * neighbours, the tree's parent, its children packed in order and, for the direct algorithms,
 * the other ranks in rank order. */
static inline int cuda_entry_peer(const exec_comm_t* comm, const dev_channel_t* dc, int i) {
  if (comm->nranks < 2) return -1;
  switch (i) {
    case CUDA_CC_RING_SEND:
      return dc->ring_next;
    case CUDA_CC_RING_RECV:
      return dc->ring_prev;
    case CUDA_CC_UP_SEND:
    case CUDA_CC_UP_RECV:
      return dc->tree_up;
    default:
      break;
  }
  if (i < CUDA_CC_PEER_SEND) { /* DOWN_RECV = DOWN_SEND + TREE_MAX_CHILDREN */
    int k = (i - CUDA_CC_DOWN_SEND) % TREE_MAX_CHILDREN;
    for (int j = 0; j < TREE_MAX_CHILDREN; j++)
      if (dc->tree_down[j] >= 0 && k-- == 0) return dc->tree_down[j];
    return -1;
  }
  const int k = (i - CUDA_CC_PEER_SEND) % DIRECT_MAX_PEERS; /* PEER_RECV = PEER_SEND + that */
  if (comm->nranks > DIRECT_MAX_RANKS || k >= comm->nranks - 1) return -1;
  return k < comm->rank ? k : k + 1;
}

static inline const conn_fifo_t* cuda_entry_conn(const exec_comm_t* comm, const dev_channel_t* dc,
                                                 int i, int peer) {
  return peer >= 0 && peer != comm->rank ? cuda_chan_conn(dc, peer, cuda_cc_is_send(i)) : NULL;
}

/* The kinds of connection a launch's items read from a channel's entry: a ring's two neighbours,
 * a tree's parent and children, the direct algorithms' other ranks; and their entries, as ranges
 * of the CUDA_CC_* order (bit k: cuda_uses_range[k]). */
enum { CUDA_CHAN_USES_RING = 1, CUDA_CHAN_USES_TREE = 2, CUDA_CHAN_USES_PEERS = 4 };
static const struct {
  int first, end;
} cuda_uses_range[] = {{CUDA_CC_RING_SEND, CUDA_CC_UP_SEND},
                       {CUDA_CC_UP_SEND, CUDA_CC_PEER_SEND},
                       {CUDA_CC_PEER_SEND, CUDA_CC_COUNT}};

/* Whether channel c's entries of the kinds in `uses` still mirror the transport's connections,
 * compared entry by entry with no table built. Only the kinds a launch's items read are compared:
 * all 24 entries of 48 channels on 4 communicators were 35 % of an eager 4-GPU Reduce's launching
 * thread (a sampled profile), and a ring item reads 2 of them. */
static inline bool cuda_chan_unchanged(const exec_comm_t* comm, int c, const cuda_chan_host_t* h,
                                       unsigned uses) {
  const dev_channel_t* dc = &comm->channels[c];
  if (!h->written || dc->ring_ranks != h->ring_src) return false;
  for (unsigned k = 0; k < sizeof(cuda_uses_range) / sizeof(cuda_uses_range[0]); k++) {
    if (!(uses & (1u << k))) continue;
    for (int i = cuda_uses_range[k].first; i < cuda_uses_range[k].end; i++)
      if (cuda_entry_conn(comm, dc, i, cuda_entry_peer(comm, dc, i)) != h->src[i]) return false;
  }
  return true;
}

/* Makes channel c's device entry mirror the transport's current connections, all of them, when
 * those of the kinds in `uses` changed (cheap when none did: the launch path). */
static inline ncclResult_t cuda_chan_sync(cuda_exec_t* ex, int c, unsigned uses) {
  if (cuda_chan_unchanged(ex->comm, c, &ex->chans[c], uses)) return ncclSuccess;
  return cuda_chan_write(ex, c);
}
/* Waits for the writes issued by the two calls above (before a launch reads them): nothing
 * pending, nothing to wait for. */
static inline ncclResult_t cuda_conns_flush(cuda_exec_t* ex) {
  return ex->pending == 0 ? ncclSuccess : cuda_conns_wait(ex);
}

/* ---- local.c ------------------------------------------------------------------------------- */
/* Runs plan.local on stream: alone (no kernel) straight on it (eager: not being captured), else
 * on the local stream between cuda_local_fork (before the kernel's launch) and cuda_local_join. */
ncclResult_t cuda_local_fork(cuda_exec_t* ex, cudaStream_t stream);
ncclResult_t cuda_local_run(cuda_exec_t* ex, const plan_t* plan, cudaStream_t stream, bool eager);
ncclResult_t cuda_local_join(cuda_exec_t* ex, cudaStream_t stream);
void cuda_local_fini(cuda_exec_t* ex);

/* ---- launch.c: packing ----------------------------------------------------------------------- */
/* Packs plan into one or more launches on stream (see launch.c for the split rule). */
ncclResult_t cuda_plan_launch(cuda_exec_t* ex, const plan_t* plan, cudaStream_t stream);
void cuda_split_free(cuda_split_t* s);
#endif /* !__CUDACC__ */

#endif /* BATON_DEVICE_CUDA_EXEC_H */
