/* Baton device layer: executors of planned work. Three executors carry out one format:
 *   cuda/  kernels, one block per channel (src/device/cuda)
 *   host/  CPU threads, one per channel (src/device/host): the reference executor
 *   sim/   baton-sim's timed executor (src/device/sim)
 * This header is plain C, included by host C code and by nvcc. It defines the executor interface
 * (executor_ops_t) and what an executor sees of its communicator (exec_comm_t), with the formats
 * of zero copy and staging. The work format the planner produces (work_t, plan_t), how an item
 * is cut into lanes and steps, and the words the layers below share (functions, algorithms,
 * protocols, the connection FIFO conn_fifo_t that transports fill and executors drive) are
 * src/vocab/vocab.h's. */
#ifndef BATON_DEVICE_H
#define BATON_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "vocab/vocab.h"

/* ---- Registered windows read in place (zero copy) -----------------------------------------------
 * ncclCommWindowRegister is collective: every rank exports its buffer (cuMem or CUDA IPC on GPUs,
 * the memfd behind ncclMemAlloc's host memory without one) and maps every peer's. When every rank
 * mapped every other's, the window is shared: it takes a slot (the same on every rank, windows
 * being registered in the same order) and exec_comm_t.zc_base[slot * nranks + p] is where rank
 * p's window lies in this process (zc_base_dev: the same table in device memory).
 *
 * On a communicator that has shared a window, OneShot items of AllReduce, AllGather,
 * ReduceScatter and Broadcast have work.zc set (on GPUs from a size on; the same on every rank:
 * sharing is collective and the count decides) and run this way on their channel:
 *   1. the probe: every rank's zc_desc_t goes to every other rank over the item's connections as
 *      a OneShot AllGather of ZC_DESC_BYTES bytes (unit 1, LL, one step each way);
 *   2. every rank now holds all n descriptors and decides alike (zc_usable). Usable: it reads the
 *      other ranks' inputs where they lie (zc_base + off) and writes only its own output,
 *      combining in rank order with each rank's own scalar (the same bits as the FIFO path), then
 *      3. the release: a OneShot AllGather of ZC_DONE_BYTES bytes, so no rank ends the item (and
 *      lets its user overwrite its input) while another still reads it.
 *      Not usable: the item's ordinary OneShot steps follow the probe.
 * In-place AllReduce is never read in place (a rank would overwrite its input while peers read
 * it); in-place AllGather, ReduceScatter and Broadcast write nothing another rank reads. */
#define ZC_DESC_BYTES 24
#define ZC_DONE_BYTES 8
#define ZC_MAX_WINDOWS 256 /* shared window slots per communicator */
#define ZC_DESC_INPLACE (1ull << 32)
typedef struct zc_desc {
  uint64_t win;    /* slot + 1 of the send buffer's shared window (0: none); | ZC_DESC_INPLACE */
  uint64_t off;    /* sendbuff's offset in that window, bytes */
  uint64_t scalar; /* PreMulSum: this rank's scalar bits (as it applies them); else 0 */
} zc_desc_t;

/* Whether every source func reads lies in a shared window (d: every rank's descriptor). */
DEVICE_HOST_FN bool zc_usable(int func, int root, int nranks, const zc_desc_t* d) {
  if (func == FUNC_BROADCAST) return (uint32_t)d[root].win != 0;
  for (int r = 0; r < nranks; r++) {
    if ((uint32_t)d[r].win == 0) return false;
    if (func == FUNC_ALLREDUCE && (d[r].win & ZC_DESC_INPLACE)) return false;
  }
  return true;
}

/* ---- Staged direct algorithms (OneShot/TwoShot with PROTO_SIMPLE, GPUs only) ----------------
 * Every rank of a communicator that can run the direct algorithms owns a staging buffer that
 * every other rank has mapped (a window the library shares at init: exec_comm_t.stage_slot). A
 * staged item copies this rank's input into its own staging, then every rank reads what it needs
 * straight from the others' staging with bulk 16-byte loads over NVLink, and writes only its own
 * output: no FIFO, no per-step flags, no fence per step. Ranks meet at per-block barriers: block
 * b of every rank writes a value into every peer's flags[b][rank] and waits until its own
 * flags[b][p] reach it. An item runs on STAGE parts (the planner's channels 0..parts-1, the same
 * count for every staged item of the communicator) in rounds of at most stage_half bytes of
 * staging; round e (a per-block counter in the rank's own staging header, so CUDA graph replays
 * go on counting) uses half e % 2 and barrier values 2e and 2e + 1, so the next round's copy
 * never overwrites a half a peer may still read (a peer starts round e + 1 only after every rank
 * left round e's barriers, and round e + 2 only after every rank reached round e + 1's first).
 *   AllReduce OneShot: copy part b of the round; barrier; reduce part b from every rank.
 *   AllReduce TwoShot: copy part b of every rank's slice; barrier; reduce part b of this rank's
 *     slice from every rank into the output and this rank's staging; barrier; copy part b of
 *     every other slice from its owner's staging.
 *   AllGather: copy part b of the input; barrier; copy part b of every rank's block.
 *   ReduceScatter: copy part b of every rank's block; barrier; reduce this rank's.
 *   Broadcast: the root copies; barrier; the others copy from the root's staging.
 *   Reduce: copy; barrier; the root reduces.
 * A rank pre-ops its own input while copying it in (PreMulSum's scalar is the rank's own); the
 * readers combine in rank order, so the bits equal the FIFO path's. */
#define STAGE_MAX_PARTS 64
#define STAGE_FLAGS_OFF 0 /* uint64_t flags[STAGE_MAX_PARTS][DIRECT_MAX_RANKS], written by peers */
#define STAGE_ROUNDS_OFF (STAGE_MAX_PARTS * DIRECT_MAX_RANKS * 8) /* uint64_t rounds[parts] */
#define STAGE_DATA_OFF 8192                                         /* then two halves */
#define STAGE_ALIGN 16 /* parts start on multiples of this many bytes of staging */
/* Each half is cut into one region per part (its blocks alone touch it) and, for the functions
 * that cut a round into n slices (TwoShot AllReduce, ReduceScatter), each region into n
 * sub-regions: bytes of each, on STAGE_ALIGN multiples. */
DEVICE_HOST_FN size_t stage_region(size_t half, int parts) {
  return half / (size_t)parts / STAGE_ALIGN * STAGE_ALIGN;
}
DEVICE_HOST_FN bool stage_sliced(int func, int algo) {
  return func == FUNC_REDUCESCATTER || (func == FUNC_ALLREDUCE && algo == ALGO_TWOSHOT);
}
DEVICE_HOST_FN size_t stage_sub(size_t half, int parts, int nranks, int func, int algo) {
  const size_t r = stage_region(half, parts);
  return stage_sliced(func, algo) ? r / (size_t)nranks / STAGE_ALIGN * STAGE_ALIGN : r;
}
/* Elements of a round (of the per-rank count for AllGather and ReduceScatter) such that every
 * part's piece of every slice fits its sub-region: parts * sub, times n for the slices of TwoShot
 * AllReduce, in whole STAGE_ALIGN-byte units. */
DEVICE_HOST_FN size_t stage_window(size_t half, int parts, int nranks, int func, int algo,
                                   size_t unit) {
  const size_t sub = stage_sub(half, parts, nranks, func, algo) / unit;
  const size_t slices = func == FUNC_ALLREDUCE && algo == ALGO_TWOSHOT ? (size_t)nranks : 1;
  return sub * (size_t)parts * slices;
}

/* ---- What an executor sees of its communicator ---------------------------------------------- */
#define TREE_MAX_CHILDREN 3
typedef struct dev_channel {
  int id;
  const int* ring_ranks; /* nranks entries: the ring order used by this channel */
  int ring_index;        /* my position in ring_ranks */
  int ring_prev, ring_next;
  int tree_up;                      /* -1 at the root */
  int tree_down[TREE_MAX_CHILDREN]; /* -1 where unused */
  conn_fifo_t** send;               /* nranks entries: FIFO towards peer, NULL until connected */
  conn_fifo_t** recv;               /* nranks entries: FIFO from peer, NULL until connected */
} dev_channel_t;

typedef struct exec_comm {
  int rank;
  int nranks;
  int nchannels;
  dev_channel_t* channels;
  volatile uint32_t* abort_flag;
  /* Called by a waiting executor about every 100 ms: ncclSuccess while the peer looks alive,
   * else an error (after a WARN naming the peer). */
  ncclResult_t (*peer_check)(void* arg, int peer);
  /* Tells the proxy that work using NET connections is starting (it may be asleep). */
  void (*proxy_wake)(void* arg);
  void* arg;
  /* The communicator's last-error text (ncclGetLastError): executor threads other than the
   * launching one bind it (LOG_SINK_SCOPE) so their WARNs reach the user. NULL: none. */
  char* err_buf;
  size_t err_len;
  /* Profiling (NULL: off): the host executor calls it on each channel's thread before (start 1)
   * and after (start 0) the channel runs its list of a launch. */
  void (*channel_event)(void* channel_arg, int channel, int start);
  void* channel_arg; /* the collectives layer's, set with channel_event */
  /* The communicator's platform state (base.h's platform_t.ctx) for a platform's own executor
   * (baton-sim's world); NULL on this machine. */
  void* platform;
  /* Shared windows (see "Registered windows" above): ZC_MAX_WINDOWS * nranks entries, NULL until
   * the first window is shared; zc_base_dev is the device copy (CUDA executor). */
  void* const* zc_base;
  void* const* zc_base_dev;
  /* Staged direct algorithms (see "Staged direct algorithms"): the staging window's slot (the
   * same on every rank; -1: none) and the bytes of each of its two halves. */
  int stage_slot;
  size_t stage_half;
} exec_comm_t;

/* ---- Progress an executor reports (core's progress watch and timeline read it) ----------------
 * Launches are numbered from 1 in the order launch() issued them (a CUDA plan may take several
 * kernel launches). started / done: the highest launch number that began / finished running; the
 * CUDA executor learns them from its kernels through mapped host memory (graph replays write the
 * numbers they were captured with, which never move the counters back). */
typedef struct exec_progress {
  uint64_t launched, started, done;
} exec_progress_t;
/* A channel whose work waits on a peer's connection (host executor only). */
typedef struct exec_wait {
  int channel;
  int peer;
  int is_send;       /* 1: no free slot towards peer; 0: no data from peer */
  uint64_t step;     /* the executor's position on that connection */
  uint64_t since_ns; /* clock_ns() when the channel stopped moving */
} exec_wait_t;

/* One connection's position (host executor only: a GPU's positions live in device memory). */
typedef struct exec_conn {
  int channel, peer, is_send;
  uint64_t step; /* steps sent (published) or received (consumed) so far */
} exec_conn_t;

/* ---- Executor interface: chosen once per communicator (every rank has a GPU: cuda; none: host;
 * a virtual cluster's rank: its platform's) -----------------------------------------------------
 * Whatever differs between running on a GPU, on the host and in a simulation is behind this
 * table: the layers above never ask which executor they have. */
/* The streams of one launch (the CUDA executor's; the others ignore them; NULL: none). The launch
 * runs on s[0]; each other stream's earlier work comes before it and its own later work after it
 * (the calls of one group made on several streams). captured: set by launch, true when the launch
 * went into a stream capture (its work runs when the graph does). */
typedef struct exec_streams {
  const cudaStream_t* s;
  int n;
  bool captured;
} exec_streams_t;
/* What enter changed on the calling thread, for leave. */
typedef struct exec_scope {
  int dev, saved; /* the device made current and the one current before (-1: none) */
  bool relaxed;   /* the capture mode was relaxed; capture holds the mode before */
  int capture;
} exec_scope_t;
struct sim_estimate_in; /* device/sim/sim.h */
typedef struct executor_ops {
  const char* name;
  /* launch returns once the plan is queued, without waiting for the peers (CUDA: on the stream;
   * simulated: kept until the world is timed); false: once the plan has run (host), so the
   * communicators of one group must launch on threads of their own. */
  bool queues;
  /* Work of a communicator on the calling thread (setup, connections, launches, waits, frees),
   * callable before init: the CUDA executor makes device dev current and, with relax, the thread's
   * stream capture relaxed (allocation is legal inside a user's capture then); leave puts back
   * what enter changed. The host and simulated executors change nothing. */
  ncclResult_t (*enter)(int dev, bool relax, exec_scope_t* scope);
  void (*leave)(const exec_scope_t* scope);
  ncclResult_t (*init)(const exec_comm_t* comm, void** state_out);
  /* Runs a plan. host: returns when the plan has completed (or failed). cuda: joins the streams,
   * asks once whether s[0] is being captured, enqueues the plan's launches on s[0] and returns. */
  ncclResult_t (*launch)(void* state, const plan_t* plan, exec_streams_t* streams);
  ncclResult_t (*fini)(void* state);
  /* Returns once every plan launched so far has completed (host: at once; cuda: the last launch
   * made outside a stream capture has finished on the GPU). */
  ncclResult_t (*wait)(void* state);
  /* Launch progress (may be called from any thread while launches run). */
  void (*progress)(void* state, exec_progress_t* out);
  /* Up to max channels that wait on a peer now; returns how many (any thread). */
  int (*waits)(void* state, exec_wait_t* out, int max);
  /* The positions of the ring connections on the first channels, up to max; returns how many
   * (any thread): enough for a hang report to tell data lost in transit (the sender ahead of its
   * receiver) from a sender that has not sent. The host executor reads them from the FIFOs; the
   * others have none in host memory. */
  int (*positions)(void* state, exec_conn_t* out, int max);
  /* The device's global-timer times (ns) of launch number `launch` if still recorded: true when
   * both are known (CUDA executor; the host executor has none). */
  bool (*launch_time)(void* state, uint64_t launch, uint64_t* start_ns, uint64_t* end_ns);
  /* ncclGroupSimulateEnd: the time (us) of a plan on this executor, negative when it cannot be
   * told; every executor answers with the simulator's flow model (sim_estimate_us). */
  double (*estimate_us)(const struct sim_estimate_in* in);
} executor_ops_t;

/* The simulator's time of one rank's plan (src/device/sim/estimate.c; sim.h has its input). */
double sim_estimate_us(const struct sim_estimate_in* in);

extern const executor_ops_t executor_host_ops;
extern const executor_ops_t executor_cuda_ops; /* src/device/cuda: needs a GPU */

/* ---- Host reductions (src/device/host/reduce.c): pure functions, tested by themselves -------- */
/* dst[i] = in_local[i] (op) in_remote[i] for i < n, where in_local gets the PREMULSUM scalar
 * applied (it is a rank's own, not yet counted contribution) and in_remote has had it applied
 * already. Either input may alias dst. in_remote == NULL: dst = preop(in_local) (a copy). */
void host_reduce(void* dst, const void* in_local, const void* in_remote, size_t n, int dtype,
                 const dev_redop_t* op);
/* dst = a (op) b where both are already-counted partial results (tree/ring middle steps). */
void host_reduce_partials(void* dst, const void* a, const void* b, size_t n, int dtype,
                          const dev_redop_t* op);
/* The PREMULSUM scalar's bits, `size` bytes wide, as an integer (a device-residence scalar read
 * now from its memory); 0 for other ops. */
uint64_t host_scalar_bits(const dev_redop_t* op, size_t size);
/* The final step for SUMPOSTDIV: divide in place by op->scalar; a no-op for other ops. */
void host_postop(void* buf, size_t n, int dtype, const dev_redop_t* op);
/* Conversions used by the low-precision types (round to nearest even, like the GPU's). */
float half_to_float(uint16_t h);
uint16_t float_to_half(float f);
float bf16_to_float(uint16_t b);
uint16_t float_to_bf16(float f);
float fp8e4m3_to_float(uint8_t v);
uint8_t float_to_fp8e4m3(float f); /* saturating to +-448, NaN stays NaN */
float fp8e5m2_to_float(uint8_t v);
uint8_t float_to_fp8e5m2(float f); /* saturating to +-57344 (stock's satfinite) */

#endif /* BATON_DEVICE_H */
