/* Baton collectives layer: the entry points (ncclAllReduce ...), tasks, the group scheduler
 * (ncclGroupStart/End), the planner that turns tasks into per-channel work (algorithm, protocol,
 * chunking), user reduction operators (PreMulSum), and the per-communicator state behind them.
 *
 * Core calls coll_comm_init / coll_comm_finalize / coll_comm_free (declared in core/core.h).
 * Everything below the "Within src/collectives" line is shared by this folder's files only (and by
 * the integration tests, which look at the planner's last choice). */
#ifndef BATON_COLLECTIVES_H
#define BATON_COLLECTIVES_H

#include <pthread.h>

#include "core/core.h"
#include "device/device.h"
#include "transport/transport.h"

/* Called by core at the end of communicator init / at destroy and abort (see core.h). */
ncclResult_t coll_comm_init(struct ncclComm* comm);
ncclResult_t coll_comm_finalize(struct ncclComm* comm);
ncclResult_t coll_comm_free(struct ncclComm* comm);

/* What the planner chose for the last collective it ran on comm (tests and debugging). */
typedef struct coll_choice {
  int func;      /* func_t */
  int algo;      /* ALGO_* */
  int proto;     /* PROTO_* */
  int nchannels; /* channels the operation was spread over */
  bool forced;   /* NCCL_ALGO / NCCL_PROTO decided (else the tuning model) */
} coll_choice_t;
ncclResult_t coll_last_choice(ncclComm_t comm, coll_choice_t* out);
/* The transport name ("SHM", "NET", ...) carrying comm's connection to/from peer on channel, or
 * NULL while not connected. */
const char* coll_conn_transport(ncclComm_t comm, int channel, int peer, int is_send);

/* ==== Within src/collectives =====================================================================
 */

#define COLL_DEFAULT_NCHANNELS 2 /* host executor */
#define COLL_MIN_CHANNEL_BYTES \
  (16 << 10) /* an operation gets one more channel per this many bytes */

/* One operation as the user posted it (AlltoAll/Gather/Scatter are already split into p2p). */
typedef struct coll_task {
  uint8_t func;  /* func_t */
  uint8_t dtype; /* ncclDataType_t */
  int root;      /* Broadcast/Reduce root, Send/Recv peer, -1 otherwise */
  dev_redop_t op;
  const void* sendbuff;
  void* recvbuff;
  size_t count; /* as work_t.count: per-rank for AllGather/ReduceScatter, else total */
  /* Filled by the planner. */
  uint8_t algo, proto;
  int nchannels;
  bool forced;
  double model_us;
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
  int nchannels;
  int min_channels; /* NCCL_MIN_NCHANNELS when set: every operation uses at least this many */
  int nhosts;
  int* host_of;    /* nranks: host index of each rank (first-seen order of host_hash) */
  int* ring_ranks; /* nchannels * nranks */
  conn_fifo_t**
      fifo_tables; /* nchannels * 2 * nranks: per channel send[nranks] then recv[nranks] */
  dev_channel_t* channels;
  exec_comm_t exec;
  transport_ctx_t tctx;
  bool tctx_ready;
  const executor_ops_t* executor;
  void* exec_state;
  topo_tuning_t tuning;
  coll_filter_t filter;
  size_t slot_data_bytes[PROTO_COUNT]; /* payload bytes of one FIFO slot per protocol */

  pthread_mutex_t lock; /* user ops and the nonblocking job */
  coll_user_op_t* user_ops;
  int nuser_ops;

  /* Group scheduler. */
  coll_task_list_t pending; /* posted in the open group (the posting thread only) */
  coll_task_list_t running; /* the group being run (its runner only) */
  struct coll_comm* group_next;
  bool in_group;
  uint64_t op_count;

  /* Planner scratch, reused between runs (grows, never shrinks). */
  work_t* works;
  size_t works_cap;
  conn_request_t* reqs;
  int reqs_cap;
  int* order;
  int order_cap;
  uint8_t* conn_mark; /* nchannels * nranks * 2 */
  plan_t plan;

  /* Nonblocking mode: the group running on its own thread. */
  pthread_t job_thread;
  bool job_running;
  ncclResult_t job_result;

  coll_choice_t last;
  uint32_t logged[FUNC_COUNT]; /* (algo, proto) pairs already announced at INFO INIT, as bits */
};

/* ---- enqueue.c / group.c -------------------------------------------------------------------- */
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
const char* coll_algo_name(int algo);
const char* coll_proto_name(int proto);
/* Slice c of nslices of [0, total), boundaries aligned to align units (the last slice ends at
 * total). Empty slices get n = 0. */
void coll_split(size_t total, int nslices, int c, size_t align, size_t* off, size_t* n);
/* Channels an operation of bytes uses, between 1 and max. */
int coll_op_nchannels(size_t bytes, int max, int min_forced);
/* Elements per pipeline chunk: one FIFO slot of payload, at least 1, a multiple of 16 bytes where
 * the slot allows it. */
size_t coll_chunk_elems(size_t slot_data_bytes, size_t esize);
/* Bytes the tuning model is given for a task (the largest buffer of the operation). */
size_t coll_task_bytes(const coll_task_t* t, int nranks);
/* Parses NCCL_ALGO / NCCL_PROTO into cc->filter. */
ncclResult_t coll_filter_init(coll_filter_t* f);
/* Picks algorithm, protocol and channel count for a collective task; logs the INFO TUNING line. */
ncclResult_t coll_plan_choose(struct coll_comm* cc, coll_task_t* t);
/* Turns the running tasks into cc->plan and the connection requests they need. Tasks that stay
 * local (nranks == 1, send/recv to self) are done here, before the executor runs. */
ncclResult_t coll_plan_build(struct coll_comm* cc, coll_task_list_t* tasks, int* nreqs);

/* ---- comm.c --------------------------------------------------------------------------------- */
/* Connects what reqs lists (skipping what exists) and points the executor's FIFO tables at it. */
ncclResult_t coll_comm_connect(struct coll_comm* cc, const conn_request_t* reqs, int nreqs);
/* Plans, connects and runs the tasks in cc->running; empties the list. */
ncclResult_t coll_comm_run(struct coll_comm* cc);

#endif /* BATON_COLLECTIVES_H */
