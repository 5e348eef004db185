/* Baton collectives layer: the entry points (ncclAllReduce ...), tasks, the group scheduler
 * (ncclGroupStart/End), the planner that turns tasks into per-channel work (algorithm, protocol,
 * chunking), user reduction operators (PreMulSum), and the per-communicator state behind them.
 *
 * Core reaches this layer only through the table it registers with core (core_upper_ops_t, filled
 * in comm.c when the library loads): init, finalize, free and the group's part of init.
 * Everything below the "Within src/collectives" line is shared by this folder's files only (and by
 * the integration tests, which look at the planner's last choice). */
#ifndef BATON_COLLECTIVES_H
#define BATON_COLLECTIVES_H

#include <pthread.h>

#include "core/core.h"
#include "device/device.h"
#include "plugin/plugin.h"
#include "transport/transport.h"

/* Core's core_upper_ops_t (see core.h for when core calls each). */
ncclResult_t coll_comm_init(struct ncclComm* comm);
ncclResult_t coll_comm_finalize(struct ncclComm* comm);
ncclResult_t coll_comm_free(struct ncclComm* comm);
void coll_comm_leave_group(ncclComm_t comm);
bool coll_group_open(void);
ncclResult_t coll_group_add_init(ncclComm_t comm);
/* comm's collectives state (NULL before init has made it): how this layer's files other than
 * comm.c reach it, so that linking any of them links the registration of the table above. */
struct coll_comm* coll_of(ncclComm_t comm);

/* What the planner chose for the last collective it ran on comm (tests and debugging). */
typedef struct coll_choice {
  int func;      /* func_t */
  int algo;      /* ALGO_* */
  int proto;     /* PROTO_* */
  int nchannels; /* channels the operation was spread over */
  bool forced;   /* NCCL_ALGO / NCCL_PROTO decided (else the tuning model) */
} coll_choice_t;
ncclResult_t coll_last_choice(ncclComm_t comm, coll_choice_t* out);

/* ==== Within src/collectives =====================================================================
 */

/* An operation gets one more channel per this many bytes (up to the communicator's count):
 * channels run in parallel, so a small message is cut fine. */
#define COLL_MIN_CHANNEL_BYTES (4 << 10)
/* Below this size an operation uses at most COLL_NARROW_CHANNELS channels: more work items than
 * that need the CUDA executor's large parameter block, whose launch costs about 5 us more
 * (docs/gpu-results.md, run 7), which only large messages amortise. */
#define COLL_WIDE_MIN_BYTES (16 << 20)
#define COLL_NARROW_CHANNELS 48
/* A Simple ring AllReduce with direct writes (coll_comm.ring_writes) below COLL_RING_AR_WIDE_BYTES
 * runs on at most COLL_RING_AR_CHANNELS channels: fewer, fuller steps pay a step's fixed cost (the
 * publisher's fence, the next plan) fewer times per byte while 32 blocks still fill NVLink. 4
 * H100s, 16 MiB: 108.7 us against 114.5 on 62 channels; from 32 MiB no gain (2 GPUs: 128.8
 * against 127.2); without direct writes a loss (2 GPUs, 16 MiB: 84.7 against 81.5). */
#define COLL_RING_AR_CHANNELS 32
#define COLL_RING_AR_WIDE_BYTES (32 << 20)
/* Point-to-point messages get one more channel per this many bytes (see coll_p2p_nchannels). */
#define COLL_P2P_MIN_CHANNEL_BYTES (32 << 10)
/* With more than two ranks, a point-to-point message up to this size takes at most
 * nchannels / nranks channels, so the messages to different peers (which start at channel
 * d * nchannels / nranks) never share a channel: in a 4-GPU AlltoAll of 4-64 MiB the three peers'
 * items were queued one after the other on most channels (a block runs its items in order), and
 * the operation took three times a single message's time. Larger messages keep every channel
 * (bandwidth, not latency, then decides). Run 47's A/B against no limit kept it; it is no longer
 * a build knob. Tried on 4 H100s and dropped: the spread at every size (AllToAll 512 MiB 1563 ->
 * 1266 us, but a lone SendRecv of 256 MiB 822 -> 911 on a third of the channels); shares of
 * nchannels / (nranks - 1), leaving none idle for the copy to self (graph within 5 % either way,
 * eager AllToAll 256 KiB-16 MiB 50 -> 68 us: more items to pack and launch); the share of a
 * 4-rank communicator (nchannels / 4) on 2 and 3 ranks too (2 H100s, eager AllToAll, Scatter,
 * Gather 4 MiB 20-30 % faster, but SendRecv and AllToAll 1-16 MiB 10-25 % slower in graph replay
 * and 16 MiB 12-25 % slower eager). */
#define COLL_P2P_SPREAD_MAX_BYTES (16 << 20)
/* Direct algorithms (device.h's ALGO_ONESHOT, ALGO_TWOSHOT): the tuning model may choose them up
 * to this size (NCCL_ALGO forces them at any size), on at most this many channels (each channel
 * they use connects every pair of ranks). */
#define COLL_DIRECT_MAX_BYTES (512 << 10)
#define COLL_DIRECT_MAX_CHANNELS 8
/* Smallest operation (coll_task_bytes) a GPU reads in place from shared windows (plan.c says
 * why): AllReduce and Broadcast, AllGather and ReduceScatter. */
#define COLL_ZC_MIN_BYTES_WHOLE (64 << 10)
#define COLL_ZC_MIN_BYTES_PARTS (512 << 10)
/* Smallest share of an operation (coll_task_bytes over its channels) whose ring steps write into
 * the next rank's output (plan.c, plan_direct, says why). */
#define COLL_DIRECT_WRITE_MIN_CHANNEL_BYTES (128 << 10)
/* Pipelines (Broadcast and Reduce chains, tree AllReduce) on more than 2 ranks: a channel's Simple
 * slice of D bytes is cut into chunks so the hops overlap (not a chain of GPUs on one host: a slot
 * a step there, plan_chunk says why). h hops over D/C chunks of C bytes take
 * (D/C + h - 1) step times; a step costs its C bytes plus a fixed cost (waits, barriers, the
 * publishing fence), counted as the bytes a block could have moved meanwhile:
 * NCCL_BATON_PIPE_STEP_COST_BYTES (param_table.h, 48 KiB). The total D*cost/C + D + (h-1)*C is
 * least at C = sqrt(D * cost / (h - 1)) (coll_pipe_chunk_bytes), kept within [COLL_PIPE_MIN_BYTES,
 * a slot]. 48 KiB: on 4 H200s a step's publishing fence took 2-10 us (it waits for the step's
 * NVLink stores), at about 5.5 GB/s a block (docs/gpu-results.md, run 18). Since a warp of its own
 * publishes, 16 KiB measured the same (run 24). */
#define COLL_PIPE_MIN_BYTES (32 << 10)
/* A tree AllReduce across hosts moves each channel's steps through its share of a NIC
 * (tuning.inter_bw_gbs), slower than a block pushes them (COLL_PIPE_PUSH_GBS: a Simple block's
 * push rate, as baton-sim's fit to the GPU runs has it). A step's fixed cost, f = the cost bytes at
 * COLL_PIPE_COST_GBS (the rate at which NCCL_BATON_PIPE_STEP_COST_BYTES was measured, above),
 * then overlaps the network sending the step before it as long as f + C / push <= C / net, that
 * is from C = f / (1 / net - 1 / push) on (coll_pipe_hidden_bytes: 40 KiB at the defaults). A
 * bigger chunk only deepens the pipeline's fill, since every hop of the tree waits for a whole
 * chunk, so the planner takes the smaller of that and the formula above (GPU communicators; the
 * host executor keeps the formula): on 128 nodes of 8 H100s
 * the formula's 200 KiB steps made the fill a fifth of a 1 GiB all-reduce (docs/sim.md). */
#define COLL_PIPE_COST_GBS 5.5
#define COLL_PIPE_PUSH_GBS 8.6

/* Blocks (channels) of every staged item: they read from the peers at once, each its part. 48
 * parts were slower on 4 H100s from 2 MiB (AllReduce 8 MiB 63.6 -> 79.0 us in graph replay). */
#define COLL_STAGE_PARTS 32

/* One operation as the user posted it (AlltoAll/Gather/Scatter are already split into p2p). */
typedef struct coll_task {
  uint8_t func;  /* func_t */
  uint8_t dtype; /* ncclDataType_t */
  int root;      /* Broadcast/Reduce root, Send/Recv peer, -1 otherwise */
  dev_redop_t op;
  const void* sendbuff;
  void* recvbuff;
  size_t count;        /* as work_t.count: per-rank for AllGather/ReduceScatter, else total */
  cudaStream_t stream; /* the user's stream (CUDA executor; the host executor ignores it) */
  /* A *Config call's choices (ncclCollConfig_t; 0: none): the (algo, proto) pairs it allows, as
   * bits algo * PROTO_COUNT + proto (select_forced: forceAlgSelection 1, so a selection that
   * cannot run fails the group), and its channel bounds. */
  uint16_t select;
  bool select_forced;
  int16_t min_ch, max_ch;
  /* Filled by the planner. */
  uint8_t algo, proto;
  int nchannels;
  bool forced;
  double model_us;
  /* Profiler plugin handles (NULL without one): the call's API event, the task's event; the
   * call's userProfilerTag (0: none). */
  void* prof_api;
  void* prof_event;
  uint64_t prof_tag;
} coll_task_t;

typedef struct coll_task_list {
  coll_task_t* items;
  int n;
  int cap;
} coll_task_list_t;

/* A user reduction operator (ncclRedOpCreatePreMulSum): op value ncclNumOps + index. */
typedef struct coll_user_op {
  bool in_use;
  uint8_t dtype;
  dev_redop_t op;
} coll_user_op_t;

/* Which algorithms and protocols NCCL_ALGO / NCCL_PROTO leave to each function. */
typedef struct coll_filter {
  bool algo_ok[FUNC_COUNT][ALGO_COUNT];
  bool proto_ok[FUNC_COUNT][PROTO_COUNT];
  bool algo_set[FUNC_COUNT];  /* NCCL_ALGO excludes something for this function */
  bool proto_set[FUNC_COUNT]; /* NCCL_PROTO excludes something for this function */
} coll_filter_t;

struct coll_comm {
  struct ncclComm* comm;
  int rank, nranks;
  /* The planner's view of core's resources (comm->resources, core.h: comm_res_t), copied at init;
   * host_of and channels point into them. */
  bool queues;    /* its executor's launch returns before the peers run (executor_ops_t.queues) */
  bool kernels;   /* plans run as GPU kernels (comm_res_t.kernels) */
  bool ll128_ok;  /* LL128 may be used: GPUs of one host, every pair P2P over NVLink */
  bool direct_ok; /* OneShot/TwoShot may run (comm_res_t.direct_ok) */
  bool ring_writes; /* ring steps may write into outputs on every pair (comm_res_t.ring_writes) */
  bool direct_model; /* the model may choose them with LL unforced (comm_res_t.direct_model) */
  /* The staged OneShot/TwoShot (PROTO_SIMPLE, device.h "Staged direct algorithms") may be used
   * when every rank shares a staging buffer: tuning.stage_half, its halves' bytes, is not 0. */
  int stage_parts; /* channels (blocks) of every staged item: the same for all of them */
  int nchannels;
  int nhosts;
  int* host_of; /* nranks: host index of each rank (first-seen order of host_hash) */
  dev_channel_t* channels;
  topo_tuning_t tuning;
  size_t slot_data_bytes[PROTO_COUNT]; /* payload bytes of one FIFO slot per protocol */

  bool no_direct;   /* plan.c, while it plans a group: OneShot/TwoShot ruled out (mixed group) */
  int min_channels; /* NCCL_MIN_NCHANNELS when set: every operation uses at least this many */
  size_t pipe_cost_bytes; /* NCCL_BATON_PIPE_STEP_COST_BYTES (coll_pipe_chunk_bytes) */
  coll_filter_t filter;

  pthread_mutex_t lock; /* user ops, registrations and the nonblocking job */
  coll_user_op_t* user_ops;
  int nuser_ops;
  struct ncclWindow_vidmem** regs; /* mem.c: registrations (buffers and windows) of this comm */
  int nregs, regs_cap;
  uint64_t regs_gen; /* bumped (under lock) whenever regs or a window's sharing changes */
  uint32_t win_seq;  /* windows registered so far: numbers them alike on every rank (from 1) */

  /* Group scheduler. */
  coll_task_list_t pending; /* posted in the open group (the posting thread only) */
  coll_task_list_t running; /* the group being run (its runner only) */
  struct coll_comm* group_next;
  bool in_group; /* on this thread's group list, holding the communicator (comm_hold) */

  /* Planner scratch, reused between runs (grows, never shrinks). */
  work_t* works;
  size_t works_cap;
  conn_request_t* reqs;
  int reqs_cap;
  uint64_t* order; /* point-to-point tasks by distance: distance << 32 | task index */
  int order_cap;
  local_op_t* locals; /* the plan's work without peers (plan.local) */
  int nlocal, locals_cap;
  uint8_t* conn_mark; /* nchannels * nranks * 2 */
  plan_t plan;
  bool planned;   /* cc->plan holds the running group's plan (group.c planned it already) */
  int plan_nreqs; /* and its connection requests in cc->reqs */
  /* The last plan built, kept for a next group of the same tasks (coll_plan_reuse): its tasks as
   * the planner filled them in and the registrations it saw. */
  coll_task_list_t kept;
  uint64_t kept_regs_gen;
  bool kept_valid;
  uint64_t plan_reuses;   /* groups that ran a kept plan (tests) */
  ncclResult_t group_res; /* group.c: the result of planning this comm's part of the group */

  /* The running group's streams, its first task's first (the executor joins the others to it). */
  cudaStream_t* streams;
  int nstreams, streams_cap;

  /* Nonblocking mode: the group running on its own thread. */
  pthread_t job_thread;
  bool job_running;
  ncclResult_t job_result;

  coll_choice_t last;
  uint32_t logged[FUNC_COUNT]; /* (algo, proto) pairs already announced at INFO INIT, as bits */

  /* Plugins (plugins.c); NULL when none is loaded. */
  tuner_t* tuner;
  profiler_t* prof;
  void* prof_group; /* the running launch's Group event */
  void** prof_ch;   /* KernelCh handles, indexed like works (host executor) */
  size_t prof_ch_cap;
  uint64_t prof_seq[FUNC_COUNT]; /* collectives launched per function (event seqNumber) */
};

/* ---- enqueue.c / group.c -------------------------------------------------------------------- */
/* The first task of a communicator in the open group also holds it for the group (released when
 * ncclGroupEnd is done with it, or when the group drops it). */
ncclResult_t coll_task_append(struct coll_comm* cc, const coll_task_t* task);
ncclResult_t coll_group_start(void);
ncclResult_t coll_group_end(void);
/* The implicit group of a call outside ncclGroupStart/End: depth before the call. */
int coll_group_depth(void);
/* An argument error inside an explicit group: ncclGroupEnd will drop the group and return it. */
void coll_group_set_error(ncclResult_t res);
/* A communicator being freed leaves this thread's open group (its pending tasks are dropped). */
void coll_group_forget(struct coll_comm* cc);
/* Waits for comm's nonblocking group, if one runs; returns its result. */
ncclResult_t coll_job_join(struct coll_comm* cc);

/* ---- select.c / plan.c: a *Config call's algorithm selection -------------------------------- */
/* NCCL_ALGO / NCCL_PROTO parsed into cc->filter (select.c), and the names both use (topo's
 * tables, so logs and filters agree); the index in topo_algo_names of an ALGO_* (stock's names,
 * then Baton's OneShot and TwoShot). */
ncclResult_t coll_filter_init(coll_filter_t* f);
const char* coll_algo_name(int algo);
const char* coll_proto_name(int proto);
int coll_algo_name_index(int algo);
/* Parses an algSelection expression into (algo, proto) pair bits (0: it names only pairs Baton
 * has not built). false when a name is no known name: bad gets it. */
bool coll_select_parse(const char* expr, uint16_t* pairs, char* bad, size_t bad_cap);
/* Whether some pair of select can run func on bytes here (what exists, NCCL_ALGO/NCCL_PROTO). */
bool coll_select_possible(const struct coll_comm* cc, int func, size_t bytes, uint16_t select);

/* ---- mem.c ---------------------------------------------------------------------------------- */
/* Releases the registrations left in cc's table (destroy). */
void coll_regs_free(struct coll_comm* cc);
/* The outermost ncclGroupEnd: shares the windows registered inside the group (mem.c; the test
 * that there are none is inline, so a group without any does not enter mem.c). */
extern __thread int coll_win_npend;
ncclResult_t coll_windows_share_pending(void);
static inline ncclResult_t coll_windows_share_deferred(void) {
  return coll_win_npend == 0 ? ncclSuccess : coll_windows_share_pending();
}
/* The shared window holding all of [buff, buff + bytes): its slot and buff's offset in it. */
bool coll_window_find(struct coll_comm* cc, const void* buff, size_t bytes, int* slot, size_t* off);
/* A window of cc (win looked up, never dereferenced blindly): this rank's buffer and length, its
 * registration number, and core's sharing record (NULL: not shared). False if win is not one. */
bool coll_window_of(struct coll_comm* cc, ncclWindow_t win, void** buff, size_t* size,
                    uint32_t* seq, comm_window_t** shared);
/* comm_rma_lookup_t.find over cc's windows (arg: cc). */
bool coll_window_by_seq(void* cc, uint32_t seq, void** buff, size_t* size);

/* ---- redop.c -------------------------------------------------------------------------------- */
/* The executor's view of op for datatype on cc (Avg -> PreMulSum or SumPostDiv; user ops from the
 * comm's table). WARNs naming api and returns ncclInvalidArgument for a bad or destroyed op. */
ncclResult_t coll_redop_resolve(struct coll_comm* cc, ncclRedOp_t op, ncclDataType_t dtype,
                                const char* api, dev_redop_t* out);
/* The scalar's bits in dtype (PreMulSum scalar format), from a double. */
uint64_t coll_scalar_bits(double v, ncclDataType_t dtype);
void coll_user_ops_free(struct coll_comm* cc);

/* ---- plan.c (pure functions first) ------------------------------------------------------------
 */
const char* coll_func_name(int func);
/* Slice c of nslices of [0, total), boundaries aligned to align units (the last slice ends at
 * total). Empty slices get n = 0. */
void coll_split(size_t total, int nslices, int c, size_t align, size_t* off, size_t* n);
/* Channels an operation of bytes uses, between 1 and max. */
int coll_op_nchannels(size_t bytes, int max, int min_forced);
/* Channels of a point-to-point message of bytes: one per COLL_P2P_MIN_CHANNEL_BYTES (fewer work
 * items for an AlltoAll's many messages), within coll_op_nchannels' limits and, up to
 * COLL_P2P_SPREAD_MAX_BYTES, within a peer's share (nchannels / nranks); NCCL_MIN_NCHANNELS
 * (min_channels) wins. Only the byte count and the communicator decide: a pair must agree. */
int coll_p2p_nchannels(size_t bytes, int nranks, int nchannels, int min_channels);
/* Elements per pipeline chunk: one FIFO slot of payload, at least 1, a multiple of 16 bytes where
 * the slot allows it. */
size_t coll_chunk_elems(size_t slot_data_bytes, size_t esize);
/* Bytes a step carries when a channel's slice_bytes flow through a pipeline of hops hops with a
 * step cost of cost_bytes (see the pipelines above; slot_bytes when hops < 2): at most slot_bytes,
 * a multiple of 16 unless the slot is smaller. */
size_t coll_pipe_chunk_bytes(size_t slice_bytes, int hops, size_t slot_bytes, size_t cost_bytes);
/* The smallest chunk whose step's fixed cost (cost_bytes at cost_gbs) hides behind a network
 * moving net_gbs while the block pushes push_gbs (COLL_PIPE_PUSH_GBS above), at least
 * COLL_PIPE_MIN_BYTES; 0 when the network is not the slower. */
size_t coll_pipe_hidden_bytes(size_t cost_bytes, double cost_gbs, double push_gbs, double net_gbs);
/* Bytes the tuning model is given for a task (the largest buffer of the operation). */
size_t coll_task_bytes(const coll_task_t* t, int nranks);
/* The last plan (cc->plan, cc->reqs) again for tasks equal to those it was built from, in the same
 * order (function, type, count, operation and its scalar, buffers, root or peer, a *Config call's
 * choices), while no registration changed and no tuner plugin chooses: the planner's choices
 * copied into tasks, true. Else false (coll_plan_build, then coll_plan_keep). */
bool coll_plan_reuse(struct coll_comm* cc, coll_task_list_t* tasks);
/* Keeps the plan just built from tasks for coll_plan_reuse (or forgets it when it cannot); gen:
 * coll_regs_gen before the build began. */
void coll_plan_keep(struct coll_comm* cc, const coll_task_list_t* tasks, uint64_t gen);
void coll_plan_forget(struct coll_comm* cc);
uint64_t coll_regs_gen(struct coll_comm* cc);
/* The model's time (us) of t as algo/proto on bytes, -1 when this build cannot run that pair for
 * t's function or NCCL_ALGO / NCCL_PROTO rule it out (the tuner plugin's cost table). */
double coll_model_us(const struct coll_comm* cc, const coll_task_t* t, int algo, int proto,
                     size_t bytes);
/* Whether algo may run func with proto on cc for an operation of bytes (the direct algorithms'
 * conditions; anything else: true). forced: NCCL_ALGO chose among what it allows. */
bool coll_direct_allowed(const struct coll_comm* cc, int func, int algo, int proto, size_t bytes,
                         bool forced);
/* Picks algorithm, protocol and channel count for a collective task; logs the INFO TUNING line. */
ncclResult_t coll_plan_choose(struct coll_comm* cc, coll_task_t* t);
/* Ring position of rank in ring (n entries), -1 when it is not there. */
int coll_ring_index(const int* ring, int n, int rank);
/* Units a step carries: want (0: as many as fit) clamped to a slot of slot_bytes payload; 0 when
 * the slot cannot hold one unit of unit bytes. */
size_t coll_step_units(size_t slot_bytes, size_t unit, size_t want);
/* Whether a collective without peers (one rank) changes its data: reductions with PreMulSum
 * (floating types' Avg included). Anything else is a copy or nothing. */
bool coll_local_changes_data(int func, const dev_redop_t* op);
/* The local operation of a collective task on a communicator of one rank; false when there is
 * nothing to do (count 0, or a copy onto itself). */
bool coll_local_of_task(const coll_task_t* t, local_op_t* out);
/* Turns the running tasks into cc->plan and the connection requests they need. The planner
 * decides every work item completely (channel slices, steps clamped to the slots, the root's ring
 * position, point-to-point counts in bytes); work without peers (one-rank collectives, sends to
 * self paired with receives from self in posting order) becomes plan.local, nothing at all when
 * it would copy a buffer onto itself. The executors carry the plan out as it is. */
ncclResult_t coll_plan_build(struct coll_comm* cc, coll_task_list_t* tasks, int* nreqs);

/* ---- plugins.c: the tuner and profiler plugins (see the file's comment) ------------------- */
ncclResult_t coll_plugins_open(struct coll_comm* cc); /* at init, once hosts are known */
void coll_plugins_close(struct coll_comm* cc);
/* The tuner's say on a collective Baton has chosen algo/proto for (coll_plan_choose). */
void coll_tuner_apply(struct coll_comm* cc, coll_task_t* t, size_t bytes, int* algo, int* proto,
                      const char** why);
/* The profiler's events (plugins.c: coll_profile_*) happen only with a profiler; the tests that
 * say so are inline here (coll_prof_*), so a call without one does not enter plugins.c. */
void* coll_profile_api_begin(struct coll_comm* cc, bool p2p, const char* func, size_t count,
                             ncclDataType_t dtype, int root, cudaStream_t stream, uint64_t tag);
void coll_profile_group_end_begin(void);
void coll_profile_group_end_done(void);
void coll_profile_run_begin(struct coll_comm* cc);
void* coll_profile_launch_begin(struct coll_comm* cc, cudaStream_t stream);
ncclResult_t coll_profile_exec_hook(struct coll_comm* cc);
void coll_profile_run_end(struct coll_comm* cc);
extern __thread void* coll_prof_group_api_tls; /* this thread's GroupApi event (plugins.c) */

/* A call's CollApi / P2pApi event (starting this thread's GroupApi event if none runs). */
static inline void* coll_prof_api_begin(struct coll_comm* cc, bool p2p, const char* func,
                                        size_t count, ncclDataType_t dtype, int root,
                                        cudaStream_t stream, uint64_t tag) {
  if (cc->prof == NULL) return NULL;
  return coll_profile_api_begin(cc, p2p, func, count, dtype, root, stream, tag);
}
static inline void coll_prof_api_end(struct coll_comm* cc, void* handle) {
  if (handle != NULL) profiler_stop(cc->prof, handle);
}
/* The outermost ncclGroupEnd starts, and returns. */
static inline void coll_prof_group_end_begin(void) {
  if (coll_prof_group_api_tls != NULL) coll_profile_group_end_begin();
}
static inline void coll_prof_group_end_done(void) {
  if (coll_prof_group_api_tls != NULL) coll_profile_group_end_done();
}
/* One launch: Group and task events (begin), KernelLaunch around the executor's launch, and the
 * host executor's KernelCh hook (coll_prof_exec_hook, before its launch). */
static inline void coll_prof_run_begin(struct coll_comm* cc) {
  cc->prof_group = NULL;
  if (cc->prof != NULL) coll_profile_run_begin(cc);
}
static inline void* coll_prof_launch_begin(struct coll_comm* cc, cudaStream_t stream) {
  return cc->prof == NULL ? NULL : coll_profile_launch_begin(cc, stream);
}
static inline void coll_prof_launch_end(struct coll_comm* cc, void* handle) {
  if (handle != NULL) profiler_stop(cc->prof, handle);
}
static inline ncclResult_t coll_prof_exec_hook(struct coll_comm* cc) {
  if (cc->prof != NULL) return coll_profile_exec_hook(cc);
  cc->comm->resources->exec.channel_event = NULL;
  return ncclSuccess;
}
static inline void coll_prof_run_end(struct coll_comm* cc) {
  if (cc->prof != NULL) coll_profile_run_end(cc);
}

/* ---- group.c: one communicator's part of a group ------------------------------------------- */
/* Plans the tasks in cc->running into cc->plan (cc->planned, cc->plan_nreqs); no CUDA call, no
 * peer involved. On failure the list is emptied. */
ncclResult_t coll_comm_plan(struct coll_comm* cc);
/* Plans (unless coll_comm_plan did), connects and runs the tasks in cc->running; empties the
 * list. The CUDA executor's launch is asynchronous: this returns without waiting for the GPU. */
ncclResult_t coll_comm_run(struct coll_comm* cc);

#endif /* BATON_COLLECTIVES_H */
