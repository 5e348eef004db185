/* CUDA executor internals (private to src/device/cuda). Plain C: included by the host code
 * (exec.c, conns.c, pack.c) and by the kernels' translation units (kernel*.cu).
 *
 * Shape:
 *   exec.c       executor_cuda_ops: init (device tables, abort flag mapping), launch, fini
 *   conns.c      device mirrors of the transport's conn_fifo_t (one per channel, peer and
 *                direction; conn->step lives on in device memory across launches) and the
 *                per-channel table the kernel reads
 *   pack.c       work_t -> cuda_work_t (the planner decided everything: this looks up the
 *                connections' device mirrors), and the split of a large plan into several
 *                launches that cannot deadlock
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
  uint8_t zc;     /* work_t.zc: a OneShot item that starts with the zero-copy probe */
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
#define CUDA_ZC_WIN_SHIFT 48 /* zc_off < 2^48 bytes; the slot + 1 <= ZC_MAX_WINDOWS in 16 bits */

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
 * Block 0's thread 0 marks a launch's start (progress_device.cuh); the last block to finish,
 * counted by progress_blocks in device memory (atomicInc wraps it back to 0), marks its end.
 * Plain stores of the launch's number: a CUDA graph replays the number it was captured with, and
 * the host keeps the largest one it has read, so replays never move the counters back. */
#define CUDA_PROGRESS_SLOTS 64 /* per-launch global-timer times, slot = launch % slots */
typedef struct __attribute__((aligned(16))) cuda_launch_time {
  volatile unsigned long long start_launch; /* the launch start_ns belongs to (one 16-byte */
  volatile unsigned long long start_ns;     /* store with it: progress_device.cuh) */
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

/* Four parameter block sizes, because a launch copies the whole block: a launch's host cost grows
 * with it, and past 4 KiB (the classic limit) it costs several microseconds more (run 7: about
 * 5 us a launch on H200). tiny: one operation on a few channels; small: the most that fits in
 * 4 KiB; medium: 8 KiB; large: the most Hopper allows. The kernels share one body. */
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

/* ==== Host side only (exec.c, conns.c, pack.c) =================================================
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
  /* exec.c: a launch's other streams join its stream through these (made on first use; the
   * last one marks the launch's end) */
  cudaEvent_t* join;
  int njoin;
  cuda_args_large_t args; /* the parameter block being filled (copied by each launch) */
} cuda_exec_t;
#define CUDA_POOL_BLOCK 128

/* ---- conns.c ------------------------------------------------------------------------------- */
ncclResult_t cuda_conns_init(cuda_exec_t* ex);
void cuda_conns_fini(cuda_exec_t* ex);
/* Data bytes one slot of f holds for proto (0: the FIFO has no buffer for it). */
size_t cuda_fifo_capacity(const conn_fifo_t* f, int proto);
/* The kinds of connection a launch's items read from a channel's entry: a ring's two neighbours,
 * a tree's parent and children, the direct algorithms' other ranks. */
enum { CUDA_CHAN_USES_RING = 1, CUDA_CHAN_USES_TREE = 2, CUDA_CHAN_USES_PEERS = 4 };
/* Makes channel c's device entry mirror the transport's current connections, all of them, when
 * those of the kinds in `uses` changed (cheap when none did: the launch path). */
ncclResult_t cuda_chan_sync(cuda_exec_t* ex, int c, unsigned uses);
/* The device mirror of the connection to (is_send) or from peer on channel c. */
ncclResult_t cuda_conn_mirror(cuda_exec_t* ex, int c, int peer, int is_send, cuda_conn_t** out);
/* Waits for the writes issued by the two calls above (before a launch reads them). */
ncclResult_t cuda_conns_flush(cuda_exec_t* ex);

/* ---- local.c ------------------------------------------------------------------------------- */
/* Runs plan.local on stream: alone (no kernel) straight on it (eager: not being captured), else
 * on the local stream between cuda_local_fork (before the kernel's launch) and cuda_local_join. */
ncclResult_t cuda_local_fork(cuda_exec_t* ex, cudaStream_t stream);
ncclResult_t cuda_local_run(cuda_exec_t* ex, const plan_t* plan, cudaStream_t stream, bool eager);
ncclResult_t cuda_local_join(cuda_exec_t* ex, cudaStream_t stream);
void cuda_local_fini(cuda_exec_t* ex);

/* ---- pack.c -------------------------------------------------------------------------------- */
/* Packs plan into one or more launches on stream (see pack.c for the split rule). */
ncclResult_t cuda_plan_launch(cuda_exec_t* ex, const plan_t* plan, cudaStream_t stream);
void cuda_split_free(cuda_split_t* s);
#endif /* !__CUDACC__ */

#endif /* BATON_DEVICE_CUDA_EXEC_H */
