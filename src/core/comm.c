/* The communicator object: allocation, the checks every entry point makes before using it (alive,
 * settled, ready), holding it across a call and releasing it, the executor's per-call operations
 * (enter, launch, progress, leave), and which CUDA device (if any) it runs on. */
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"

static ncclResult_t comm_strdup(const char* s, char** out) {
  if (s == NULL) {
    *out = NULL;
    return ncclSuccess;
  }
  size_t len = strlen(s) + 1;
  char* copy;
  CHECK(mem_calloc((void**)&copy, len, 1));
  memcpy(copy, s, len);
  *out = copy;
  return ncclSuccess;
}

ncclResult_t comm_alloc(const ncclConfig_t* config, ncclComm_t* out) {
  ncclResult_t res = ncclSuccess;
  ncclComm_t comm = NULL;
  uint32_t* abort_flag = NULL;
  CHECK(MEM_CALLOC(&comm, 1));
  /* A page of its own: the CUDA executor may register the flag's page with the driver (to map
   * it for its kernels), which must not pin or cover a user's neighbouring heap data (a copy
   * from a host range only partly registered fails with cudaErrorInvalidValue). */
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 4096;
  if (posix_memalign((void**)&abort_flag, (size_t)page, (size_t)page) != 0) {
    WARN("ncclCommInit: out of memory for the communicator's abort flag");
    res = ncclSystemError;
    goto fail_comm;
  }
  memset(abort_flag, 0, (size_t)page);
  comm->config = *config;
  CHECK_GOTO(comm_strdup(config->commName, &comm->comm_name), res, fail_flag);
  CHECK_GOTO(comm_strdup(config->netName, &comm->net_name), res, fail_name);
  comm->config.commName = comm->comm_name;
  comm->config.netName = comm->net_name;
  comm->abort_flag = abort_flag;
  comm->rank = -1;
  comm->cuda_dev = -1;
  comm->bus_id = -1;
  atomic_init(&comm->state, COMM_STATE_INITIALIZING);
  atomic_init(&comm->async_error, ncclInProgress);
  comm->magic = COMM_MAGIC;
  *out = comm;
  return ncclSuccess;
fail_name:
  free(comm->comm_name);
fail_flag:
  free(abort_flag);
fail_comm:
  free(comm);
  return res;
}

/* Destroyed comms keep their (poisoned) shell for a while, so that destroying or using one again
 * reads COMM_MAGIC_DEAD instead of freed memory. */
#define COMM_QUARANTINE 64
static pthread_mutex_t quarantine_lock = PTHREAD_MUTEX_INITIALIZER;
static ncclComm_t quarantine[COMM_QUARANTINE];
static unsigned quarantine_next;

static void comm_quarantine(ncclComm_t comm) {
  pthread_mutex_lock(&quarantine_lock);
  ncclComm_t evicted = quarantine[quarantine_next];
  quarantine[quarantine_next] = comm;
  quarantine_next = (quarantine_next + 1) % COMM_QUARANTINE;
  pthread_mutex_unlock(&quarantine_lock);
  free(evicted);
}

void comm_free(ncclComm_t comm) {
  /* A rank leaving because of a failure says why before its connections close: the ranks that
   * see it go then name the first failure, not this rank (ras_cause.c). */
  int err = atomic_load(&comm->async_error);
  if (err == ncclRemoteError || err == ncclSystemError || err == ncclInternalError)
    comm_cause_tell(comm);
  ras_comm_unregister(comm); /* before anything goes: the service never looks at it again */
  if (comm->job != NULL) {
    /* Callers only free comms whose job is finished (or waited for): this returns at once. */
    (void)comm_job_wait(comm->job, COMM_ABORT_WAIT_MS);
    comm_job_release(comm->job);
    comm->job = NULL;
  }
  /* The collectives layer's work stops (this thread's open group lets go of comm, a nonblocking
   * group is joined) before the executor and the transports go; its plugins close after them
   * (the executor's threads may still report channel events). */
  const core_upper_ops_t* upper = core_upper();
  upper->comm_leave_group(comm);
  (void)upper->comm_finalize(comm);
  ncclResult_t res = comm_res_free(comm);
  if (res != ncclSuccess) {
    INFO(NCCL_INIT, "comm %p: comm_res_free -> %d", (void*)comm, (int)res);
    /* A host launch did not leave: what it may still use (the collectives state) stays too. */
    comm->coll = NULL;
  } else {
    res = upper->comm_free(comm);
    if (res != ncclSuccess)
      INFO(NCCL_INIT, "comm %p: collectives comm_free -> %d", (void*)comm, (int)res);
  }
  if (comm->bootstrap != NULL) {
    res = bootstrap_close(comm->bootstrap);
    if (res != ncclSuccess)
      INFO(NCCL_INIT, "comm %p: bootstrap_close -> %d", (void*)comm, (int)res);
    comm->bootstrap = NULL;
  }
  progress_free(comm);
  free(comm->peers);
  free(comm->ras_addrs);
  free(comm->peer_hosts);
  comm->ras_addrs = NULL;
  comm->peer_hosts = NULL;
  free(comm->comm_name);
  free(comm->net_name);
  free((void*)comm->abort_flag);
  comm->peers = NULL;
  comm->comm_name = comm->net_name = NULL;
  comm->config.commName = comm->config.netName = NULL;
  comm->abort_flag = NULL;
  comm->coll = NULL;
  comm->rank = comm->nranks = -1;
  atomic_store(&comm->state, COMM_STATE_ERROR);
  atomic_store(&comm->async_error, ncclInvalidUsage);
  comm->magic = COMM_MAGIC_DEAD;
  comm_quarantine(comm);
}

/* ---- Argument and state checks of every entry point (core and collectives) ------------------ */
ncclResult_t arg_check_ptr(const void* p, const char* api, const char* name) {
  if (p == NULL) {
    WARN("%s: argument %s is NULL", api, name);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

bool arg_span_ok(const void* p, size_t bytes) {
  return bytes <= (size_t)PTRDIFF_MAX && (uintptr_t)p + bytes >= (uintptr_t)p;
}

ncclResult_t comm_check(ncclComm_t comm, const char* api) {
  if (comm == NULL) {
    WARN("%s: argument comm is NULL", api);
    return ncclInvalidArgument;
  }
  if (comm->magic == COMM_MAGIC_DEAD) {
    WARN("%s: comm %p has already been destroyed or aborted", api, (void*)comm);
    return ncclInvalidArgument;
  }
  if (comm->magic != COMM_MAGIC) {
    WARN("%s: comm %p is not a valid communicator (corrupted, or not created by ncclCommInit*)",
         api, (void*)comm);
    return ncclInvalidArgument;
  }
  (void)log_sink_rebind(comm->last_error, sizeof(comm->last_error)); /* in COMM_API_SCOPE */
  return ncclSuccess;
}

ncclResult_t comm_check_settled(ncclComm_t comm, const char* api) {
  int async = atomic_load(&comm->async_error);
  if (async == ncclInProgress) {
    /* Stock returns ncclInvalidArgument here too. */
    WARN(
        "%s: comm %p is still running a nonblocking operation; poll ncclCommGetAsyncError until "
        "it returns ncclSuccess before using it",
        api, (void*)comm);
    return ncclInvalidArgument;
  }
  /* An async error was reported (WARN) where it happened; the call just fails with it. */
  return (ncclResult_t)async;
}

ncclResult_t comm_check_ready(ncclComm_t comm, const char* api) {
  CHECK(comm_check(comm, api));
  CHECK(comm_check_settled(comm, api));
  switch (atomic_load(&comm->state)) {
    case COMM_STATE_READY:
      if (atomic_load(&comm->suspended)) {
        WARN(
            "%s: comm %p is suspended (ncclCommSuspend released its memory); call "
            "ncclCommResume on every rank first",
            api, (void*)comm);
        return ncclInvalidUsage;
      }
      return ncclSuccess;
    case COMM_STATE_FINALIZED:
      WARN("%s: comm %p has been finalized; only ncclCommDestroy is allowed now", api, (void*)comm);
      return ncclInvalidUsage;
    case COMM_STATE_REVOKED:
      WARN(
          "%s: comm %p has been revoked (ncclCommRevoke); only ncclCommDestroy, ncclCommSplit and "
          "ncclCommShrink are allowed now",
          api, (void*)comm);
      return ncclInvalidUsage;
    default:
      WARN("%s: comm %p is not initialized", api, (void*)comm);
      return ncclInvalidUsage;
  }
}

/* ---- Holding across a call (core.h) --------------------------------------------------------- */
ncclResult_t comm_hold(ncclComm_t comm, const char* api) {
  atomic_fetch_add(&comm->users, 1);
  if (!atomic_load(&comm->closing)) return ncclSuccess;
  comm_release(comm);
  WARN("%s: comm %p is being aborted or destroyed by another thread", api, (void*)comm);
  return ncclInvalidArgument;
}

/* The last holder of a retired communicator frees it (its shell stays in quarantine, so the
 * counters read here after another thread's free are still memory of ours). */
void comm_release(ncclComm_t comm) {
  if (atomic_fetch_sub(&comm->users, 1) != 1 || !atomic_load(&comm->closing)) return;
  if (!atomic_exchange(&comm->freeing, true)) comm_free(comm);
}

void comm_retire(ncclComm_t comm) {
  atomic_store(&comm->closing, true);
  core_upper()->comm_leave_group(comm); /* this thread's own open group holds it too */
  uint64_t deadline = clock_ns() + (uint64_t)COMM_RETIRE_WAIT_MS * 1000000ull;
  while (atomic_load(&comm->users) > 0 && clock_ns() < deadline) {
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 200 * 1000};
    nanosleep(&ts, NULL);
  }
  if (atomic_load(&comm->users) > 0) {
    INFO(NCCL_INIT,
         "comm %p rank %d: a call still uses it after %d ms; the last one to leave frees it",
         (void*)comm, comm->rank, COMM_RETIRE_WAIT_MS);
    /* A holder that left between the check and here saw closing and freeing unclaimed. */
    if (atomic_load(&comm->users) > 0) return;
  }
  if (!atomic_exchange(&comm->freeing, true)) comm_free(comm);
}

/* ---- The executor, per call (core.h) -------------------------------------------------------
 * What a call does through comm->resources' executor (chosen at init, resources.c): enter its
 * scope on this thread, launch a plan, read its launch progress, leave. */
ncclResult_t comm_res_enter(ncclComm_t comm, bool relax, exec_scope_t* scope) {
  const comm_res_t* cc = comm->resources;
  if (cc == NULL || cc->executor == NULL) { /* nothing chosen: nothing to enter */
    *scope = (exec_scope_t){.dev = -1, .saved = -1};
    return ncclSuccess;
  }
  return cc->executor->enter(cc->dev, relax, scope);
}

void comm_res_leave(ncclComm_t comm, const exec_scope_t* scope) {
  const comm_res_t* cc = comm->resources;
  if (cc != NULL && cc->executor != NULL) cc->executor->leave(scope);
}

ncclResult_t comm_res_launch(ncclComm_t comm, const plan_t* plan, exec_streams_t* streams) {
  comm_res_t* cc = comm->resources;
  return cc->executor->launch(cc->exec_state, plan, streams);
}

void comm_res_progress(ncclComm_t comm, exec_progress_t* out) {
  *out = (exec_progress_t){0};
  comm_res_t* cc = comm->resources;
  if (cc == NULL || cc->exec_state == NULL || cc->executor->progress == NULL) return;
  cc->executor->progress(cc->exec_state, out);
}

/* ---- CUDA device ---------------------------------------------------------------------------- */
static pthread_once_t device_once = PTHREAD_ONCE_INIT;
static int device_count;

static void device_count_init(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError(); /* clear it: no GPU is a normal case (host executor) */
    INFO(NCCL_INIT, "No usable CUDA device (%s): communicators run on the host executor",
         cudaGetErrorString(err));
    n = 0;
  }
  device_count = n;
}

int comm_device_count(void) {
  pthread_once(&device_once, device_count_init);
  return device_count;
}

/* "0000:3b:00.0" -> 0x3b000 (stock's numeric form: the hex digits, separators dropped). */
int64_t comm_device_bus_id(int dev) {
  char text[32];
  if (dev < 0 || cudaDeviceGetPCIBusId(text, sizeof(text), dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  int64_t id = 0;
  for (const char* p = text; *p; p++) {
    char ch = *p;
    int digit;
    if (ch >= '0' && ch <= '9')
      digit = ch - '0';
    else if (ch >= 'a' && ch <= 'f')
      digit = ch - 'a' + 10;
    else if (ch >= 'A' && ch <= 'F')
      digit = ch - 'A' + 10;
    else if (ch == ':' || ch == '.')
      continue;
    else
      break;
    id = (id << 4) | digit;
  }
  return id;
}

const char* comm_bus_text(int64_t bus_id, char* buf) {
  if (bus_id < 0) return "-1";
  snprintf(buf, 24, "%llx", (unsigned long long)bus_id);
  return buf;
}

void comm_device_current(int* dev, int64_t* bus_id) {
  int d = -1;
  if (comm_device_count() > 0 && cudaGetDevice(&d) != cudaSuccess) {
    (void)cudaGetLastError();
    d = -1;
  }
  *dev = d;
  *bus_id = comm_device_bus_id(d);
}
