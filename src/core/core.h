/* Baton core layer: communicator lifecycle (init, split, shrink, finalize, destroy, abort, revoke),
 * configuration, error strings and last error, argument checks. It is the hub: it talks to every
 * layer below (bootstrap, topo, transport, proxy, collectives, device). */
#ifndef BATON_CORE_H
#define BATON_CORE_H

#include <pthread.h>
#include <stdatomic.h>

#include "base/base.h"
#include "bootstrap/bootstrap.h"
#include "topo/topo.h"

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

struct coll_comm; /* collectives layer state: channels, tasks, plans (src/collectives) */
struct comm_job;  /* a lifecycle operation running on its own thread (nonblocking mode) */

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
  char last_error[COMM_LAST_ERROR_LEN];

  struct coll_comm* coll; /* owned by src/collectives */
};

/* ---- Argument checks for entry points ----------------------------------------------------------
 * Each WARNs naming the API and the argument and returns stock's code. comm_check also binds the
 * comm's last-error slot to this thread so later WARNs of this call show in ncclGetLastError(comm);
 * every entry point that called it must call comm_scope_end() before returning (a binding left
 * behind would outlive the communicator). */
/* Non-NULL and alive (magic): else ncclInvalidArgument ("already destroyed" when poisoned). */
ncclResult_t comm_check(ncclComm_t comm, const char* api);
/* comm_check plus: no nonblocking operation in flight (else ncclInvalidArgument, as stock), no
 * async error (else that error), and not finalized/revoked (else ncclInvalidUsage). What a
 * collective or point-to-point call needs. */
ncclResult_t comm_check_ready(ncclComm_t comm, const char* api);
/* The in-flight/async-error part of comm_check_ready only (queries such as ncclCommCount). */
ncclResult_t comm_check_settled(ncclComm_t comm, const char* api);
ncclResult_t arg_check_ptr(const void* p, const char* api, const char* name);
void comm_scope_end(void);

/* ---- Hooks into the collectives layer (defined in src/collectives) ----------------------------
 * coll_comm_init: at init, after
 * the bootstrap and peer_info exchange (comm->peers filled); fills comm->coll. Called on the init
 * thread (nonblocking) or the caller's. coll_comm_finalize: ncclCommFinalize: returns once every
 * issued operation has completed. Also called with *abort_flag set (revoke, NCCL_SHRINK_ABORT) to
 * wait until in-flight work has stopped. coll_comm_free:     destroy/abort/failed init: release
 * comm->coll. Called exactly once per communicator, even when coll_comm_init never ran or failed
 * (comm->coll may be NULL or partial) and possibly with *abort_flag set. */
ncclResult_t coll_comm_init(ncclComm_t comm);
ncclResult_t coll_comm_finalize(ncclComm_t comm);
ncclResult_t coll_comm_free(ncclComm_t comm);
/* Init inside a group (ncclGroupStart ... ncclCommInitRank* ... ncclGroupEnd, how one thread
 * creates several ranks): coll_group_open() says whether this thread has a group open; if so,
 * init starts the communicator's init job on its own thread and hands the communicator to
 * coll_group_add_init, and the outermost ncclGroupEnd waits for it (blocking config) or returns
 * ncclInProgress (nonblocking). */
bool coll_group_open(void);
ncclResult_t coll_group_add_init(ncclComm_t comm);
/* A create call inside the open group failed: the group fails, and ncclGroupEnd aborts the
 * communicators created in it (they would wait for the missing rank). */
void coll_group_set_error(ncclResult_t res);

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
int comm_device_count(void); /* 0 without a usable GPU (cached) */
int64_t comm_device_bus_id(int dev);
/* For log lines: stock's hex form ("1b000"), or "-1" without a GPU. buf has 24 bytes. */
const char* comm_bus_text(int64_t bus_id, char* buf);

/* init.c: bootstrap, peer info exchange, coll_comm_init and the INIT log lines for a comm whose
 * rank, nranks, cuda_dev and comm_hash are set. */
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
