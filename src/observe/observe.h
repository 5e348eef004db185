/* Baton's observability: what a person sees of a running job (src/observe/). Its one interface:
 *   progress.c   every call numbered at enqueue, the runs that carry them, each rank's state
 *   ras.c        the per-process service thread and side channel (ras_ask.c asks other processes,
 *                ras_client.c serves RAS clients, ras_cause.c names a cascade's first failure)
 *   hang.c       the hang watch and its reports
 *   trace.c      the timeline (NCCL_BATON_TRACE_FILE)
 * Core calls it at a communicator's init, enqueue, runs and free; the collectives layer numbers
 * its calls and runs through it. It reads the communicator through core.h's public part (the
 * executor's progress views, comm_res_*). observe/ras.h is the folder's private header. */
#ifndef BATON_OBSERVE_H
#define BATON_OBSERVE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "bootstrap/bootstrap.h"

/* ---- Progress: what every rank knows of its operations (progress.c) ---------------------------
 * Operations are numbered at enqueue, per communicator: every call (seq), the collectives alone
 * (coll: the same on every rank, which must call them in the same order), per kind, and sends and
 * receives per peer. Plans (a group's run) record which operations they carry and the executor's
 * launch numbers, so the executor's progress (exec_progress_t) tells which operations have
 * started and finished, on the host executor directly and on a GPU from the kernels' marks. */
enum {
  OP_BROADCAST = 0,
  OP_REDUCE,
  OP_ALLGATHER,
  OP_REDUCESCATTER,
  OP_ALLREDUCE,
  OP_ALLTOALL,
  OP_GATHER,
  OP_SCATTER,
  OP_SEND,
  OP_RECV,
  OP_KIND_COUNT
};
const char* op_kind_name(int kind); /* "AllReduce", ...; "?" for a bad value (trace.c) */
static inline bool op_kind_is_p2p(int kind) {
  return kind == OP_SEND || kind == OP_RECV;
}

typedef struct prog_op {
  uint64_t seq;      /* this communicator's call number (from 1) */
  uint64_t coll;     /* collective number (from 1); 0 for Send/Recv */
  uint64_t peer_nth; /* Send/Recv: the n-th send to / receive from that peer (from 1) */
  uint64_t count;
  uint64_t enq_ns; /* clock_ns() when it was enqueued */
  int32_t root;    /* root, or the Send/Recv peer; -1 when the call has none */
  uint8_t kind;    /* OP_* */
  uint8_t dtype;
  uint8_t redop; /* ncclRedOp_t as given (user ops fold to 255) */
  uint8_t pad;
} prog_op_t;

/* A connection this rank's executor waits on, and one's position (host executor only: a GPU's
 * positions live in device memory). */
#define PROG_MAX_WAITS 8
#define PROG_MAX_CONNS 16
typedef struct prog_wait {
  int32_t channel, peer;
  int32_t is_send;   /* 1: no free slot towards peer; 0: no data from peer */
  uint32_t secs;     /* how long it has not moved */
  uint64_t step;     /* this rank's position on it */
  char transport[8]; /* "SHM", "NET", ... */
} prog_wait_t;
typedef struct prog_conn {
  int32_t channel, peer, is_send, pad;
  uint64_t step; /* steps sent (published) or received (consumed) so far */
} prog_conn_t;

/* What one rank reports about itself on one communicator (to its watch, and over the side channel
 * to others: plain data). */
typedef struct prog_state {
  uint64_t comm_hash;
  int32_t rank, nranks;
  int32_t pid, cuda_dev;
  uint64_t host_hash;
  char host[64];
  int32_t comm_state;     /* comm_state_t */
  int32_t async_error;    /* ncclResult_t */
  uint64_t seq, coll;     /* calls and collectives enqueued */
  uint64_t planned;       /* the last call handed to a run (later ones wait for ncclGroupEnd) */
  uint64_t started, done; /* highest call number started / finished */
  uint64_t coll_started, coll_done; /* the same in collective numbers */
  uint64_t kinds[OP_KIND_COUNT];    /* calls per kind */
  prog_op_t inflight;               /* the oldest call not finished (seq 0: none) */
  uint64_t inflight_age_ns;         /* how long since it was enqueued */
  prog_op_t last_coll;              /* the last collective enqueued (seq 0: none) */
  uint64_t sends_to, recvs_from;    /* Send/Recv calls with the rank that asked (0 otherwise) */
  int32_t asker;                    /* that rank, -1 when none */
  int32_t nwaits, nconns;
  prog_wait_t waits[PROG_MAX_WAITS]; /* the connections its executor waits on */
  prog_conn_t conns[PROG_MAX_CONNS]; /* its ring connections' positions (first channels) */
} prog_state_t;

ncclResult_t progress_create(ncclComm_t comm);
void progress_free(ncclComm_t comm);
/* Called by the entry point once the call's checks pass; fills *op (its numbers). peer: the
 * Send/Recv peer, else -1. */
void progress_enqueue(ncclComm_t comm, int kind, size_t count, int dtype, int redop, int root,
                      prog_op_t* op);
/* A group's run of comm's tasks: every call enqueued so far is in it. begin before the run
 * (launch_first: the executor's next launch number), end after it (launch_last: the last one it
 * issued; abandoned: the run failed, was dropped, or was captured into a CUDA graph, so its calls
 * count as finished). Returns the plan's first and last call numbers. */
void progress_plan_begin(ncclComm_t comm, uint64_t launch_first, uint64_t* seq_first,
                         uint64_t* seq_last);
void progress_plan_end(ncclComm_t comm, uint64_t launch_last, bool abandoned);
/* The calls enqueued since the last plan will never run (their group was dropped: an argument
 * error, ncclGroupSimulateEnd, the communicator left the group): they are uncounted, as if never
 * made (so ranks still agree on collective numbers). */
void progress_rewind(ncclComm_t comm);
/* The timeline: the GPU times of finished launches not yet recorded (GPU communicators). */
void progress_trace_gpu(ncclComm_t comm);
/* This rank's state (reads the executor's progress): any thread, while comm is registered. */
void progress_state(ncclComm_t comm, int asker, prog_state_t* out);

/* ras.c: the process's service thread, one per process while it has communicators. It serves the
 * side channel (other processes' queries, "process died" notices, a keep-alive ring over TCP that
 * sleeps in the kernel), RAS clients on NCCL_RAS_ADDR, the hang watch (hang.c) and timeline dumps
 * (trace.c). Nothing in it can fail an init: problems are INFO lines and the feature is off.
 *   ras_comm_prepare: at init, after the bootstrap: starts the service if needed (a reference)
 *     and writes this process's side-channel address (family 0 when off) into *out.
 *   ras_comm_register: once comm->peers and comm->ras_addrs are known.
 *   ras_comm_unregister: first thing comm_free does (after it the service never touches comm);
 *     drops the reference prepare took (the last one stops the service). */
void ras_comm_prepare(ncclComm_t comm, socket_addr_t* out);
/* ras_cause.c: a call of comm failed with res. For a peer's or the network's failure, names the
 * first failure of the cascade this process knows of (waiting up to a second for the side channel
 * to hear of one) in a WARN that is also comm's last error, with what this rank saw; then tells
 * every other process of comm why it failed (comm_cause_tell). Other results: nothing. */
void comm_blame(ncclComm_t comm, ncclResult_t res);
/* Tells every other process of comm, once, that this rank failed and because of which first
 * failure (bounded, a couple of seconds at most). comm_free calls it for a comm in error. */
void comm_cause_tell(ncclComm_t comm);
void ras_comm_register(ncclComm_t comm);
void ras_comm_unregister(ncclComm_t comm);
/* Host name of each rank, allgathered with the addresses (comm->peer_hosts, nranks entries): the
 * NCCL_HOSTID value where one is set (one machine playing several hosts), else the host name. */
#define RAS_HOST_LEN 48
const char* ras_host_label(void); /* progress.c: its states name the host too */

/* trace.c: the timeline (NCCL_BATON_TRACE_FILE). Events go to a bounded ring; the file is
 * rewritten at destroy, at abort and on SIGUSR1. trace_on() is a load of a global. */
enum { TRACE_INIT = 0, TRACE_DESTROY, TRACE_ABORT, TRACE_CALL, TRACE_RUN, TRACE_GPU, TRACE_KINDS };
extern bool trace_enabled;
static inline bool trace_on(void) {
  return __atomic_load_n(&trace_enabled, __ATOMIC_RELAXED);
}
/* Starts the timeline if NCCL_BATON_TRACE_FILE is set (idempotent; at the first init). */
void trace_setup(void);
/* A span [t0, t1] (trace_now_ns clock) of what on comm. For TRACE_CALL, op is the call; for
 * TRACE_RUN and TRACE_GPU, seq_first..op->seq are the calls the run carries. */
void trace_span(ncclComm_t comm, int what, uint64_t t0, uint64_t t1, const prog_op_t* op,
                uint64_t seq_first);
uint64_t trace_now_ns(void); /* real time in ns, never going back within a process */
/* Writes the file now (destroy, abort: the calling thread; SIGUSR1: the service thread). */
void trace_write(void);

#endif /* BATON_OBSERVE_H */
