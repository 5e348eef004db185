/* Suspending a communicator's memory (NCCL 2.29): ncclCommSuspend, ncclCommResume,
 * ncclCommMemStats.
 *
 * A communicator's dynamic memory is what it can make again: its connections' FIFOs (a receiver's
 * block, a NET side's buffers; GPU memory on the CUDA executor's P2P connections, host memory on
 * SHM and NET) and the staging buffer of the staged direct algorithms. Suspend is collective, as
 * stock's: every rank waits for its own work, a barrier makes sure no rank still uses a peer's
 * FIFO, then each releases its connections (remembering which there were) and its staging.
 * Nothing may run on the communicator until Resume (also collective) makes the same connections
 * and the staging again; a new connection starts empty, as at init, so nothing needs saving.
 *
 * MemStats follows stock's meaning: ncclStatGpuMemSuspend is the bytes a suspend releases (while
 * suspended: the bytes it released, which Resume restores), ncclStatGpuMemPersist what stays (the
 * shared windows' address tables), ncclStatGpuMemTotal their sum, ncclStatGpuMemSuspended 0 or 1.
 * Memory an executor keeps for itself (the CUDA executor's connection mirrors, the host
 * executor's per-channel scratch) is neither released nor counted. */
#include <stdlib.h>

#include "core/core.h"

#define SUSPEND_BARRIER_TAG 0x53555350 /* "SUSP" */

/* What both calls check: a ready communicator, outside any open group (the call is collective
 * and runs at once; stock's would wait for the group's end). */
static ncclResult_t suspend_check(ncclComm_t comm, const char* api) {
  CHECK(comm_check(comm, api));
  if (core_upper()->group_open()) {
    WARN("%s: called inside ncclGroupStart/ncclGroupEnd; call it outside any group", api);
    return ncclInvalidUsage;
  }
  return ncclSuccess;
}

/* The bytes released now by a suspend: the connections' and the staging's. */
static size_t suspend_live_bytes(const comm_res_t* r) {
  return (r->tctx_ready ? transport_mem_bytes(&r->tctx) : 0) + r->stage_bytes;
}

static ncclResult_t suspend_release(ncclComm_t comm) {
  comm_res_t* r = comm->resources;
  size_t bytes = suspend_live_bytes(r);
  conn_request_t* reqs = NULL;
  int nreqs = 0;
  exec_scope_t scope;
  CHECK(comm_res_enter(comm, false, &scope));
  ncclResult_t res = r->tctx_ready ? transport_release_all(&r->tctx, &reqs, &nreqs) : ncclSuccess;
  if (res == ncclSuccess) {
    /* The channels' tables point at the released FIFOs: the planner must see them unconnected. */
    memset(r->fifo_tables, 0, (size_t)r->nchannels * 2 * (size_t)r->nranks * sizeof(conn_fifo_t*));
    r->suspended_reqs = reqs;
    r->nsuspended_reqs = nreqs;
    r->suspended_bytes = bytes;
    r->suspended_stage = r->stage_buf != NULL;
    atomic_store(&comm->suspended, true);
    res = comm_stage_fini(comm);
    r->tuning.stage_half = 0; /* no staged algorithm until Resume shares it again */
  }
  comm_res_leave(comm, &scope);
  if (res == ncclSuccess)
    INFO(NCCL_INIT, "comm %p rank %d: suspended, %d connections and %zu bytes released",
         (void*)comm, comm->rank, nreqs, bytes);
  return res;
}

NCCL_API(ncclResult_t, ncclCommSuspend, ncclComm_t comm, int flags) {
  NVTX_API_RANGE("ncclCommSuspend");
  const char* api = "ncclCommSuspend";
  COMM_API_SCOPE();
  CHECK(suspend_check(comm, api));
  if (atomic_load(&comm->suspended)) {
    WARN("%s: comm %p is suspended already; ncclCommResume comes first", api, (void*)comm);
    return ncclInvalidUsage;
  }
  CHECK(comm_check_ready(comm, api));
  if ((flags & NCCL_SUSPEND_MEM) == 0) {
    /* As stock: a call that names nothing to suspend does nothing. */
    INFO(NCCL_INIT, "%s: flags 0x%x name nothing to suspend (NCCL_SUSPEND_MEM is 0x%x)", api,
         (unsigned)flags, NCCL_SUSPEND_MEM);
    return ncclSuccess;
  }
  CHECK(comm_hold(comm, api));
  ncclResult_t res = comm_drain(comm);
  if (res == ncclSuccess) res = bootstrap_barrier(comm->bootstrap, SUSPEND_BARRIER_TAG);
  if (res == ncclSuccess) res = suspend_release(comm);
  comm_release(comm);
  return res;
}

NCCL_API(ncclResult_t, ncclCommResume, ncclComm_t comm) {
  NVTX_API_RANGE("ncclCommResume");
  const char* api = "ncclCommResume";
  COMM_API_SCOPE();
  CHECK(suspend_check(comm, api));
  if (!atomic_load(&comm->suspended)) {
    WARN("%s: comm %p is not suspended (ncclCommSuspend with NCCL_SUSPEND_MEM comes first)", api,
         (void*)comm);
    return ncclInvalidUsage;
  }
  CHECK(comm_check_settled(comm, api));
  if (atomic_load(&comm->state) != COMM_STATE_READY) {
    WARN("%s: comm %p has been finalized or revoked; only ncclCommDestroy is useful now", api,
         (void*)comm);
    return ncclInvalidUsage;
  }
  CHECK(comm_hold(comm, api));
  comm_res_t* r = comm->resources;
  exec_scope_t scope;
  ncclResult_t res = comm_res_enter(comm, false, &scope);
  if (res == ncclSuccess) {
    /* Collective, as at init: every rank shares its staging again (once, should a failed Resume
     * be called again). */
    if (r->stage_buf == NULL) res = comm_stage_init(comm);
    /* The collectives layer plans the staged algorithms from what init found (every rank shared
     * staging): without it again they must not run. The sharing is agreed, so all ranks see it. */
    if (res == ncclSuccess && r->suspended_stage && r->stage_buf == NULL) {
      WARN("%s: comm %p rank %d: the staging buffer could not be shared again (see above)", api,
           (void*)comm, comm->rank);
      res = ncclSystemError;
    }
    r->tuning.stage_half = r->exec.stage_slot >= 0 ? r->exec.stage_half : 0;
    comm_res_leave(comm, &scope);
  }
  /* Each rank lists its side of the same pairs as before, so they pair up again. */
  if (res == ncclSuccess) res = comm_res_connect(comm, r->suspended_reqs, r->nsuspended_reqs);
  if (res == ncclSuccess) {
    INFO(NCCL_INIT, "comm %p rank %d: resumed, %d connections made again", (void*)comm, comm->rank,
         r->nsuspended_reqs);
    free(r->suspended_reqs);
    r->suspended_reqs = NULL;
    r->nsuspended_reqs = 0;
    r->suspended_bytes = 0;
    atomic_store(&comm->suspended, false);
  } else {
    WARN("%s: comm %p rank %d could not restore its memory; it stays suspended", api, (void*)comm,
         comm->rank);
  }
  comm_release(comm);
  return res;
}

NCCL_API(ncclResult_t, ncclCommMemStats, ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value) {
  NVTX_API_RANGE("ncclCommMemStats");
  const char* api = "ncclCommMemStats";
  COMM_API_SCOPE();
  CHECK(comm_check(comm, api));
  CHECK(arg_check_ptr(value, api, "value"));
  CHECK(comm_check_settled(comm, api));
  const comm_res_t* r = comm->resources;
  bool suspended = atomic_load(&comm->suspended);
  size_t dynamic = r == NULL ? 0 : suspended ? r->suspended_bytes : suspend_live_bytes(r);
  size_t persist = r == NULL ? 0 : comm_windows_table_bytes(r);
  switch (stat) {
    case ncclStatGpuMemSuspend:
      *value = dynamic;
      return ncclSuccess;
    case ncclStatGpuMemSuspended:
      *value = suspended ? 1 : 0;
      return ncclSuccess;
    case ncclStatGpuMemPersist:
      *value = persist;
      return ncclSuccess;
    case ncclStatGpuMemTotal:
      *value = dynamic + persist;
      return ncclSuccess;
    default:
      WARN("%s: stat %d is not an ncclCommMemStat_t (ncclStatGpuMemSuspend .. ncclStatGpuMemTotal)",
           api, (int)stat);
      return ncclInvalidArgument;
  }
}
