/* Baton core layer: communicator lifecycle (init, split, shrink, finalize, destroy, abort, revoke),
 * configuration, error strings and last error, argument checks. It is the hub: it talks to every
 * layer below (bootstrap, topo, transport, proxy, collectives, device). */
#ifndef BATON_CORE_H
#define BATON_CORE_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/base.h"
#include "bootstrap/bootstrap.h"
#include "device/device.h"
#include "observe/observe.h"
#include "topo/topo.h"
#include "transport/transport.h"

#define COMM_MAGIC 0x4261746f6e436f6dULL      /* "BatonCom" */
#define COMM_MAGIC_DEAD 0x44656164436f6d6dULL /* "DeadComm": poisoned by destroy/abort */
#define COMM_LAST_ERROR_LEN 1024

typedef enum {
  COMM_STATE_INITIALIZING = 0, /* init (or the split/shrink that creates it) still running */
  COMM_STATE_READY,
  COMM_STATE_FINALIZED, /* ncclCommFinalize done: only destroy is allowed */
  COMM_STATE_REVOKED,   /* ncclCommRevoke: operations fail, split/shrink/destroy allowed */
  COMM_STATE_ERROR,     /* init failed or a fatal async error */
} comm_state_t;

struct coll_comm;     /* collectives layer state: tasks, the group, plans (src/collectives) */
struct comm_res;      /* channels, connections, executor (resources.c) */
struct comm_job;      /* a lifecycle operation running on its own thread (nonblocking mode) */
struct comm_progress; /* what this rank knows of its operations (observe/progress.c) */

struct ncclComm {
  uint64_t magic; /* COMM_MAGIC while usable; COMM_MAGIC_DEAD once destroyed/aborted */
  int rank;
  int nranks;
  int cuda_dev;        /* -1 when the host executor runs this communicator */
  int64_t bus_id;      /* PCI bus id of cuda_dev, -1 without a GPU */
  uint64_t comm_hash;  /* hash of the unique id; printed as "commId 0x..." */
  ncclConfig_t config; /* validated, undefined fields replaced by defaults */
  char* comm_name;     /* owned copy of config.commName (config.commName points here), or NULL */
  char* net_name;      /* owned copy of config.netName (config.netName points here), or NULL */

  /* Where its device and host facts come from (base.h): NULL for this machine, or a virtual
   * cluster's (baton-sim), whose ranks all live in this process. */
  const platform_t* platform;
  bootstrap_t* bootstrap;
  peer_info_t* peers; /* nranks entries, allgathered at init */
  int nnodes;         /* distinct host_hash values among peers */
  int local_ranks;    /* ranks on this host */
  int local_rank;     /* my index among them (in rank order) */

  volatile uint32_t* abort_flag; /* heap; every blocking wait of every layer watches it */
  _Atomic int async_error;       /* ncclResult_t: ncclInProgress while a nonblocking lifecycle
                                    job runs; other layers store a fatal error here (it is what
                                    ncclCommGetAsyncError reports and what comm_check_ready fails
                                    with) */
  _Atomic int state;             /* comm_state_t */
  struct comm_job* job;          /* last nonblocking lifecycle job touching this comm, or NULL */
  uint32_t child_seq;            /* split/shrink calls so far (same order on every rank) */
  bool grow_id_out;              /* ncclCommGetUniqueId gave an id ncclCommGrow has not used */
  _Atomic bool suspended;        /* ncclCommSuspend(NCCL_SUSPEND_MEM) until ncclCommResume */
  char last_error[COMM_LAST_ERROR_LEN];

  /* Calls that use the collective state now (comm_hold): abort and destroy from another thread
   * wait for them, or leave the release to the last one (comm_retire). */
  _Atomic int users;
  _Atomic bool closing; /* abort/destroy has begun: comm_hold refuses */
  _Atomic bool freeing; /* comm_free has been claimed (once) */

  struct comm_progress* progress; /* operation numbers and completion (progress.c) */
  socket_addr_t* ras_addrs;       /* nranks: each rank's RAS service address (family 0: none) */
  char (*peer_hosts)[48];         /* nranks: each rank's host name (RAS_HOST_LEN) */
  int trace_id;               /* its tracks in the timeline (trace.c), 0 until the first event */
  bool ras_ref;               /* ras_comm_prepare took a reference */
  bool ras_listed;            /* ras_comm_register listed it */
  bool cause_told;            /* comm_cause_tell has told the other processes why it failed */
  struct comm_res* resources; /* resources.c: channels, connections, executor */
  struct coll_comm* coll;     /* owned by src/collectives */
};

/* ---- Argument checks for entry points ----------------------------------------------------------
 * Each WARNs naming the API and the argument and returns stock's code. An entry point that takes
 * a communicator opens COMM_API_SCOPE() first: from there to its return no sink is bound until
 * comm_check finds comm alive and binds comm's last-error slot, so the call's later WARNs show in
 * ncclGetLastError(comm); the return puts back whatever was bound before (nothing, or an outer
 * call's communicator). Outside such a scope comm_check binds nothing. A call that frees comm
 * (destroy, abort) closes the scope first (a nested block or function). */
#define COMM_API_SCOPE() LOG_SINK_SCOPE(NULL, 0)
/* Non-NULL and alive (magic): else ncclInvalidArgument ("already destroyed" when poisoned). */
ncclResult_t comm_check(ncclComm_t comm, const char* api);
/* comm_check plus: no nonblocking operation in flight (else ncclInvalidArgument, as stock), no
 * async error (else that error), and not finalized/revoked/suspended (else ncclInvalidUsage). What
 * a collective or point-to-point call needs. */
ncclResult_t comm_check_ready(ncclComm_t comm, const char* api);
/* The in-flight/async-error part of comm_check_ready only (queries such as ncclCommCount). */
ncclResult_t comm_check_settled(ncclComm_t comm, const char* api);
ncclResult_t arg_check_ptr(const void* p, const char* api, const char* name);
/* Whether bytes at p can be a C object: at most PTRDIFF_MAX bytes, not wrapping around the address
 * space (p may be NULL: then only the size). Below that bound offsets and sizes add without
 * overflow; a larger one is a caller's bug (a negative value cast to size_t, a wrong unit). */
bool arg_span_ok(const void* p, size_t bytes);

/* ---- Holding a communicator across a call -------------------------------------------------------
 * Every call that works on comm's collective state (an operation, a group that runs it) holds the
 * communicator from its checks until it is done with it. comm_hold fails (ncclInvalidArgument,
 * WARN naming api) once an abort or destroy has begun. comm_retire (abort, destroy) refuses new
 * holds, waits up to COMM_RETIRE_WAIT_MS for the holders to leave (the abort flag is set by then,
 * so they leave within a sleep slice) and frees the communicator, or, if one is still inside,
 * leaves the release to it. */
ncclResult_t comm_hold(ncclComm_t comm, const char* api);
void comm_release(ncclComm_t comm);
void comm_retire(ncclComm_t comm);
#define COMM_RETIRE_WAIT_MS 2000

/* ---- The layer above: collectives' part of a communicator --------------------------------------
 * Core never calls src/collectives by name: collectives fills this table and registers it when the
 * library loads (core_upper_register, from a constructor). Until then (a static link that leaves
 * collectives out) every op is a stub that does nothing and succeeds, and core_upper() never
 * returns a table with a NULL slot.
 *   comm_init: at init, after the bootstrap and peer_info exchange (comm->peers filled); fills
 *     comm->coll. Called on the init thread (nonblocking) or the caller's.
 *   comm_finalize: ncclCommFinalize: returns once every issued operation has completed. Also
 *     called with *abort_flag set (revoke, NCCL_SHRINK_ABORT) to wait until in-flight work has
 *     stopped.
 *   comm_free: destroy/abort/failed init: release comm->coll. Called exactly once per
 *     communicator, even when comm_init never ran or failed (comm->coll may be NULL or partial)
 *     and possibly with *abort_flag set.
 *   comm_leave_group: drops comm's tasks from this thread's open group (abort/destroy of a comm
 *     used in it).
 *   group_open / group_add_init: init inside a group (ncclGroupStart ... ncclCommInitRank* ...
 *     ncclGroupEnd, how one thread creates several ranks): group_open() says whether this thread
 *     has a group open; if so, init starts the communicator's init job on its own thread and hands
 *     the communicator to group_add_init, and the outermost ncclGroupEnd waits for it (blocking
 *     config) or returns ncclInProgress (nonblocking).
 *   group_set_error: a create call inside the open group failed: the group fails, and ncclGroupEnd
 *     aborts the communicators created in it (they would wait for the missing rank). */
typedef struct core_upper_ops {
  ncclResult_t (*comm_init)(ncclComm_t comm);
  ncclResult_t (*comm_finalize)(ncclComm_t comm);
  ncclResult_t (*comm_free)(ncclComm_t comm);
  void (*comm_leave_group)(ncclComm_t comm);
  bool (*group_open)(void);
  ncclResult_t (*group_add_init)(ncclComm_t comm);
  void (*group_set_error)(ncclResult_t res);
} core_upper_ops_t;
void core_upper_register(const core_upper_ops_t* ops);
const core_upper_ops_t* core_upper(void);

/* ---- Communicator resources (resources.c, res_gpu.c) ---------------------------------------
 * What every operation of a communicator runs on, set up at init after the peer exchange and
 * before the collectives layer's part: the topology every rank of a host agrees on, the channel
 * count and tuning inputs every rank agrees on, the channels (a ring and a tree each), the
 * transport context and its connections (made on demand, or all at init with
 * NCCL_RUNTIME_CONNECT=0), and the executor (host, CUDA, or a virtual platform's). The
 * collectives layer reads the facts it plans with and asks for connections and launches through
 * the calls below; nothing here knows tasks or plans' making. */
typedef struct comm_res {
  int rank, nranks;
  int dev;        /* the communicator's CUDA device (comm->cuda_dev; -1: none) */
  /* Which executor runs, and on what: asked only where the executor is chosen and the rest set up
   * for it (resources.c, res_gpu.c). */
  bool gpu; /* every rank has a CUDA device (the CUDA executor, or a virtual cluster's GPUs) */
  bool simulated; /* a virtual cluster's rank (comm->platform): its devices are described, not
                     real, so nothing calls CUDA; the platform's executor times its plans */
  /* What follows from that for the code around the executor, which reads these and never the two
   * above (set once, res_executor_choose and res_init_body): */
  bool dev_tables; /* device dev's memory is real (the CUDA executor): the kernels read the windows'
                      table and the staging there, and one-sided operations move buffers with CUDA */
  bool kernels;    /* plans run as GPU kernels (real or simulated): a launch has blocks of warps,
                      and a fixed cost that zero copy must win back (COLL_ZC_MIN_BYTES_*) */
  bool fini_keeps; /* a failed executor fini leaves what a launch still uses allocated (the host
                      executor: a launch that did not leave in time) */
  bool windows_ok; /* buffers may be shared as windows: real memory (no virtual cluster), one
                      host, 2 to DIRECT_MAX_RANKS ranks, and direct_ok */
  /* stage_virtual: a virtual cluster's GPUs that would share staging if they were real (as
   * windows_ok, but for the memory): comm_stage_init gives the planner a staging slot and half and
   * allocates nothing; baton-sim times the staged algorithms. */
  bool stage_virtual;
  bool ll128_ok;   /* LL128 may be used: GPUs of one host, every pair P2P over NVLink */
  bool direct_ok;  /* OneShot/TwoShot may run: host threads, or GPUs of one host, every pair P2P */
  bool ring_writes; /* GPUs of one host whose every pair takes direct writes (res_gpu_params_t) */
  bool direct_model;    /* the model may choose them with LL unforced (GPUs; the host executor runs
                           them only when NCCL_ALGO names them: every pair's FIFO costs memory) */
  bool rings_both_ways; /* odd channels run the ring the other way (topo_ring_order) */
  int nchannels;
  int nhosts;
  int* host_of;    /* nranks: host index of each rank (first-seen order of host_hash) */
  int nrings;      /* distinct rings: channel c runs ring c % nrings */
  int* ring_ranks; /* the rings, nranks each: one, two (both ways round), or one per rail layout */
  int8_t* ring_nics; /* nrings * nranks: the NIC (host index) each rank's hop between hosts uses
                      * on that ring (topo_ring_rails), -1 none; NULL: no rail layout */
  topo_rank_nics_t* rank_nics; /* nranks: every rank's GPU-NIC paths (allgathered), NULL: none */
  conn_fifo_t**
      fifo_tables; /* nchannels * 2 * nranks: per channel send[nranks] then recv[nranks] */
  dev_channel_t* channels;
  exec_comm_t exec;
  transport_ctx_t tctx;
  bool tctx_ready;
  const executor_ops_t* executor;
  void* exec_state;
  topo_tuning_t tuning;
  topo_system_t* topo; /* GPU: this host's GPUs, identical on every rank of the host */
  size_t slot_data_bytes[PROTO_COUNT]; /* payload bytes of one FIFO slot per protocol */
  /* Shared windows (windows.c): the tables exec points at, this rank's slots in use, the live
   * windows, and whether one was ever shared (the planner's zero-copy switch; the same on every
   * rank, sharing being collective). */
  void** zc_base;
  void** zc_base_dev;
  uint8_t* zc_used;
  struct comm_window** windows;
  int nwindows, windows_cap;
  bool zc_shared;
  /* Staging of the staged direct algorithms (windows.c, comm_stage_init): the buffer; its window
   * is among `windows`, exec.stage_slot and exec.stage_half say where (stage_slot >= 0: every rank
   * shares one). */
  void* stage_buf;
  size_t stage_bytes;
  /* ncclCommSuspend (suspend.c): while suspended, the connections there were (made again by
   * ncclCommResume) and the bytes released. */
  conn_request_t* suspended_reqs;
  int nsuspended_reqs;
  size_t suspended_bytes;
  bool suspended_stage; /* it had staging: Resume must make it again (the planner counts on it) */
  struct comm_rma* rma; /* one-sided operations (rma.c), made on first use */
  struct rma_net* rma_net; /* their connections between hosts (rma_net.c), made by the first
                              window registration of a communicator across hosts */
} comm_res_t;

/* ---- Shared windows (windows.c) --------------------------------------------------------------
 * Collective: shares [buff, buff + bytes) with every rank when every rank can map every other's
 * (comm_windows_possible: the communicator can run OneShot). *slot: the window's slot (-1: not
 * shared, collectives copy through the FIFOs); *out: what comm_window_unshare takes back (NULL
 * when not shared). host: the memfd behind a host buffer (NULL: none). */
typedef struct comm_window comm_window_t;
bool comm_windows_possible(const comm_res_t* r);
ncclResult_t comm_window_share(ncclComm_t comm, void* buff, size_t bytes,
                               const share_host_mem_t* host, int* slot, comm_window_t** out);
/* Collective, at init: the staging buffer of the staged direct algorithms (device.h), shared like
 * a window but without turning zero copy on; exec.stage_slot >= 0 on every rank or on none. */
ncclResult_t comm_stage_init(ncclComm_t comm);
void comm_window_unshare(ncclComm_t comm, comm_window_t* w);
/* Collective: the staging buffer unshared and freed (ncclCommSuspend; comm_stage_init makes it
 * again). */
ncclResult_t comm_stage_fini(ncclComm_t comm);
/* Where rank peer's buffer of the shared window w lies in this process, and its length; NULL (and
 * 0) when w is not shared (peer is a valid rank). */
void* comm_window_peer(const comm_window_t* w, int peer, size_t* bytes);
/* w's registrations with the network (rma_net.c); NULL when it has none. */
const struct rma_net_win* comm_window_net(const comm_window_t* w);
/* The bytes of the shared windows' address tables (host and device copies; 0 before the first
 * window). */
size_t comm_windows_table_bytes(const comm_res_t* r);
/* At comm_res_free: every window left, and the tables. */
void comm_windows_free(ncclComm_t comm, comm_res_t* r);
/* Whether comm has shared a window (the planner's zero-copy switch). */
bool comm_windows_shared(ncclComm_t comm);

/* ---- One-sided operations (rma.c) -----------------------------------------------------------
 * The collectives layer checks the arguments and resolves the windows; these move data and
 * signals (the file's comment says how). All run on the calling thread. */
typedef struct comm_rma_put {
  int peer, ctx, sig;
  uint32_t seq;    /* the window's registration number, the same on every rank (0: no data) */
  void* own_base;  /* this rank's buffer of the window (a put to itself) */
  void* peer_base; /* peer's buffer mapped here (comm_window_peer), NULL: send the data */
  const comm_window_t* win; /* the window's sharing or network registration (NULL: neither) */
  size_t offset, bytes;
  const void* src;
} comm_rma_put_t;
/* This rank's buffer of the window with registration number seq: false when there is none. */
typedef struct comm_rma_lookup {
  bool (*find)(void* arg, uint32_t seq, void** buff, size_t* bytes);
  void* arg;
} comm_rma_lookup_t;
struct comm_rma;
/* ctx and sig within the config's numRmaCtx / numRmaSig (1 when unset); else a WARN and
 * ncclInvalidArgument. */
ncclResult_t comm_rma_check_index(ncclComm_t comm, const char* api, int ctx, int sig);
/* Before a call's work: on a GPU, the stream's earlier work waited for (refused while capturing).
 */
ncclResult_t comm_rma_begin(ncclComm_t comm, const char* api, cudaStream_t stream);
ncclResult_t comm_rma_put(ncclComm_t comm, const comm_rma_put_t* p);
/* Returns once every descriptor's signals have arrived and their data is in this rank's windows.
 * Descriptors are checked by the caller. */
ncclResult_t comm_rma_wait(ncclComm_t comm, const ncclWaitSignalDesc_t* descs, int n,
                           const comm_rma_lookup_t* lookup);
void comm_rma_free(struct comm_rma* m);
/* The config's numRmaCtx and numRmaSig (1 when unset). */
void comm_rma_shape(ncclComm_t comm, int* nctx, int* nsig);
/* The most signals (numRmaCtx x numRmaSig) a communicator may have: each takes two bootstrap tags,
 * and rma.c's tags stay inside one block of 64 Ki that no other layer uses. */
#define COMM_RMA_MAX_SIGNALS 32768

/* ---- One-sided operations between hosts (rma_net.c) -------------------------------------------
 * Puts as RDMA writes into the peer's registered window, signals as writes of counters, for the
 * pairs of ranks on different hosts whose network has one-sided writes (net_rma_ops). */
struct rma_net;
struct rma_net_win;
/* Collective (every window registration of a communicator across hosts; the first one connects):
 * buff registered and every rank's key exchanged. *out NULL when no pair writes one-sidedly. */
ncclResult_t rma_net_window_open(ncclComm_t comm, void* buff, size_t bytes,
                                 struct rma_net_win** out);
void rma_net_window_close(struct rma_net_win* w);
/* The length of rank peer's buffer of w, when it registered one. */
bool rma_net_window_peer(const struct rma_net_win* w, int peer, size_t* bytes);
/* Whether one-sided operations with peer go over the network. */
bool rma_net_pair(const struct rma_net* rn, int peer);
/* Whether this rank would write to peer over the network once connected: on another host, the
 * host executor, a network with one-sided writes. */
bool rma_net_wanted(ncclComm_t comm, int peer);
/* bytes of src into peer's buffer of w at off (none: a signal only), then signal index sig
 * (ctx x nsig + sigIdx) raised; returns when the writes completed. */
ncclResult_t rma_net_put(ncclComm_t comm, const struct rma_net_win* w, int peer, int sig,
                         const void* src, size_t off, size_t bytes);
/* Returns once count more signals of index sig from peer have arrived. */
ncclResult_t rma_net_wait(ncclComm_t comm, int peer, int sig, uint64_t count);
void rma_net_free(struct rma_net* rn);

/* At init: fills comm->resources (partial on failure; comm_res_free releases it). */
ncclResult_t comm_res_init(ncclComm_t comm);
/* Waits until the executor's launches have completed (they stop early once *abort_flag is set). */
ncclResult_t comm_res_wait(ncclComm_t comm);
/* Finalize, and revoke/abort waiting for in-flight work: the collectives layer's queued work
 * (core_upper_ops_t.comm_finalize), then the executor's (comm_res_wait). */
ncclResult_t comm_drain(ncclComm_t comm);
/* Releases comm->resources (NULL or partial is fine). A host launch that does not leave keeps
 * what it uses allocated: then the error is returned and comm->resources is NULL all the same. */
ncclResult_t comm_res_free(ncclComm_t comm);
/* Connects what reqs lists (skipping what exists) and points the channels' FIFO tables at it. */
ncclResult_t comm_res_connect(ncclComm_t comm, const conn_request_t* reqs, int nreqs);
/* Hands plan to the executor with the streams of its calls (executor_ops_t.launch: the CUDA
 * executor joins them and says whether the launch was captured; NULL: none). */
ncclResult_t comm_res_launch(ncclComm_t comm, const plan_t* plan, exec_streams_t* streams);
/* comm's work on this thread, inside the executor's scope (executor_ops_t.enter/leave: the CUDA
 * executor's device current and, with relax, stream capture relaxed; nothing for the others). */
ncclResult_t comm_res_enter(ncclComm_t comm, bool relax, exec_scope_t* scope);
void comm_res_leave(ncclComm_t comm, const exec_scope_t* scope);
/* ncclGroupSimulateEnd: the executor's time of plan on comm (executor_ops_t.estimate_us), in
 * microseconds; negative when it cannot be told. */
double comm_res_estimate_us(ncclComm_t comm, const plan_t* plan);
/* The executor's launch progress, the connections it waits on, and the positions of its ring
 * connections on the first channels (the last two: host executor only; counts returned). Safe
 * before init completes: then nothing is reported. */
void comm_res_progress(ncclComm_t comm, exec_progress_t* out);
int comm_res_waits(ncclComm_t comm, prog_wait_t* out, int max);
int comm_res_conns(ncclComm_t comm, prog_conn_t* out, int max);
/* Device times of launch number `launch` (GPU only; false when not known). */
bool comm_res_launch_time(ncclComm_t comm, uint64_t launch, uint64_t* start_ns, uint64_t* end_ns);
/* The transport name ("SHM", "NET", ...) carrying comm's connection to/from peer on channel, or
 * NULL while not connected. */
const char* comm_conn_transport(ncclComm_t comm, int channel, int peer, int is_send);
/* The CUDA devices this process sees: 0 without a usable GPU (cached). */
int comm_device_count(void);
/* Whether comm's lifecycle job (its init on its own thread, inside a group) has finished: true at
 * once when there is none, else after waiting up to timeout_ms for it (quiet: false on timeout). */
bool comm_job_idle(ncclComm_t comm, int timeout_ms);

#define RES_GPU_DEFAULT_NCHANNELS 4 /* CUDA executor when the topology has no opinion */
/* res_gpu.c (pure functions first). Whether the ranks run on GPUs: all of them (*gpu = true) or
 * none (false). A mix is ncclInvalidUsage after a WARN naming a rank of each kind (every rank sees
 * the same peers, so all fail alike). */
ncclResult_t res_gpu_check_peers(const peer_info_t* peers, int nranks, bool* gpu);
/* What one rank proposes for its communicator; every rank's proposal is allgathered and merged. */
typedef struct res_gpu_params {
  int32_t nchannels;    /* channels wanted (topology, or the GPU default), already clamped */
  int32_t ll128;        /* 1: LL128 is safe on every connection this rank can see */
  int32_t direct_links; /* 1: two GPUs of this host are joined by NVLinks of their own (no
                         * switch): rings go both ways round (topo_ring_order) */
  int32_t direct;       /* 1: one host, every pair this rank can see P2P (OneShot, TwoShot) */
  int32_t ring_writes;  /* 1: one host, every pair this rank can see P2P with direct writes
                         * (transport_p2p_direct_writes): ring steps may write into outputs */
  double pair_bw_gbs;   /* slowest GPU pair of this host (GB/s, one direction); 0: unknown */
  double intra_lat_us;  /* per-hop latency inside the host */
} res_gpu_params_t;
/* Ranks of the communicator on rank's GPU (itself included): more than one only with
 * NCCL_MULTI_RANK_GPU_ENABLE=1. */
int res_ranks_on_gpu(const peer_info_t* peers, int nranks, int rank);
/* Channels a rank may use when ranks_on_gpu ranks share a GPU of nsm multiprocessors: the kernels
 * of all of them spin on each other, so all their blocks (one a channel, one a multiprocessor at
 * most: the kernels take a multiprocessor's registers) must be resident together. */
int res_shared_gpu_channels(int nchannels, int ranks_on_gpu, int nsm);
/* Clamps a channel count to NCCL_MIN_NCHANNELS..NCCL_MAX_NCHANNELS and 1..PLAN_MAX_CHANNELS. */
int res_nchannels_clamp(int want);
/* Clamps a channel count to the config's minCTAs..maxCTAs (NCCL_MIN_CTAS / NCCL_MAX_CTAS already
 * applied) and 1..PLAN_MAX_CHANNELS. Every rank passes the same config (as stock requires). */
int res_ctas_clamp(int n, const ncclConfig_t* cfg);
/* This rank's proposal from its host's topology (NULL: unknown) and the peers (pure, apart from
 * reading NCCL_* parameters). */
void res_gpu_params_local(const topo_system_t* topo, const peer_info_t* peers, int nranks, int rank,
                          int nhosts, res_gpu_params_t* out);
/* The communicator's values: fewest channels, LL128 and the direct algorithms only if every rank
 * allows them, rings both ways if any host has direct links, slowest pair bandwidth, largest
 * latency (pure). */
void res_gpu_params_merge(const res_gpu_params_t* all, int n, res_gpu_params_t* out);
/* One topology per host: the lowest rank of each host detects it (or, on a virtual platform,
 * takes the platform's description of it), sends it as XML to the other ranks of its host, and
 * every rank of the host (that one too) uses the parsed copy. */
ncclResult_t res_topo_agree(const platform_t* platform, bootstrap_t* b, const peer_info_t* peers,
                            int nranks, int rank, topo_system_t** out);
/* Allgathers every rank's proposal and merges them (every rank must call). */
ncclResult_t res_gpu_params_agree(bootstrap_t* b, int nranks, int rank,
                                  const res_gpu_params_t* mine, res_gpu_params_t* out);
/* With rings over every NIC, a channel count that is a whole number of the layouts' period (so
 * every NIC carries the same share): nchannels rounded to the nearer multiple of period (up on a
 * tie), up only to at most cap (NCCL_MAX_NCHANNELS, maxCTAs), down only to at least floor
 * (NCCL_MIN_NCHANNELS, minCTAs) and one period; nchannels when neither fits (pure). */
int res_rail_nchannels(int nchannels, int period, int floor, int cap);
/* Every rank's GPU-NIC paths (topo_rank_nics), allgathered into r->rank_nics when the
 * communicator spans hosts (every rank must call). */
ncclResult_t res_gpu_nics_agree(comm_res_t* r, bootstrap_t* b, const peer_info_t* peers);
/* comm_res_init's GPU part, before channels exist: topology, channel count, LL128 and tuning. */
ncclResult_t res_gpu_setup(comm_res_t* r, ncclComm_t comm);

/* ==== Private to src/core =======================================================================
 */

/* config.c: validate a user config (NULL = all defaults) into *out: magic, version and size are
 * checked, fields newer than config->version or beyond config->size read as undefined, undefined
 * fields get defaults, then env overrides (NCCL_COMM_BLOCKING). */
ncclResult_t config_parse(const ncclConfig_t* config, const char* api, ncclConfig_t* out);
/* Env overrides applied to an inherited config (split/shrink with config == NULL). */
void config_env_override(ncclConfig_t* cfg);

/* comm.c: allocation (state INITIALIZING, async ncclInProgress, own abort flag, owned copies of
 * the config's strings) and release (coll hook, bootstrap, memory; the shell is poisoned and kept
 * in a small quarantine so a second destroy is detected without touching freed memory). */
ncclResult_t comm_alloc(const ncclConfig_t* config, ncclComm_t* out);
void comm_free(ncclComm_t comm);
/* The CUDA device this thread uses (-1 and bus id -1 without a usable GPU). */
void comm_device_current(int* dev, int64_t* bus_id);
int64_t comm_device_bus_id(int dev);
/* For log lines: stock's hex form ("1b000"), or "-1" without a GPU. buf has 24 bytes. */
const char* comm_bus_text(int64_t bus_id, char* buf);

/* init.c: bootstrap, peer info exchange, resources, the collectives part and the INIT log lines for
 * a comm whose rank, nranks, cuda_dev and comm_hash are set. */
ncclResult_t comm_init_run(ncclComm_t comm, const bootstrap_handle_t* handles, int nhandles,
                           const char* api);

/* job.c: a lifecycle operation. run() does the work and publishes the states and async errors
 * of owner and child itself. Blocking: run() is called on this thread. Nonblocking: the caller
 * has set async_error = ncclInProgress on owner (and child); run() goes to a detached thread and
 * comm_job_start returns ncclInProgress. References: one per comm whose ->job points at it, one
 * for the running thread. */
typedef struct comm_job comm_job_t;
struct comm_job {
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int refs;
  bool done;
  bool blocking;
  ncclResult_t (*run)(comm_job_t* job);
  const char* api;
  ncclComm_t owner; /* the comm the call was made on (parent for split/shrink) */
  ncclComm_t child; /* split/shrink: the new communicator, NULL for NCCL_SPLIT_NOCOLOR */
  /* init */
  bootstrap_handle_t* handles;
  int nhandles;
  /* split / shrink */
  int color, key;
  int* exclude; /* sorted, nexclude entries; NULL for split */
  int nexclude;
  uint32_t seq; /* parent's child_seq for this call: makes the bootstrap tag */
};
ncclResult_t comm_job_create(const char* api, ncclResult_t (*run)(comm_job_t*), comm_job_t** out);
ncclResult_t comm_job_start(comm_job_t* job, bool blocking);
/* Waits until run() has returned; ncclInternalError (after a WARN) if timeout_ms passes first. */
ncclResult_t comm_job_wait(comm_job_t* job, int timeout_ms);
bool comm_job_wait_done(comm_job_t* job, int timeout_ms); /* the same, quiet: false on timeout */
void comm_job_retain(comm_job_t* job);
void comm_job_release(comm_job_t* job);
/* Attach job to comm->job (dropping the previous one, which must be finished). */
void comm_job_attach(ncclComm_t comm, comm_job_t* job);
/* Sets *abort_flag of the comm and, while a job creating a child runs, of that child too; then
 * waits for the job (bounded). */
ncclResult_t comm_abort_and_wait(ncclComm_t comm);

#define COMM_ABORT_WAIT_MS 10000

#endif /* BATON_CORE_H */
