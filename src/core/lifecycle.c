/* The end of a communicator's life (finalize, destroy, abort, revoke) and its queries
 * (async error, count, rank, device). */
#include "core/core.h"

/* ---- Queries ----------------------------------------------------------------------------------
 */
NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t* asyncError) {
  NVTX_API_RANGE("ncclCommGetAsyncError");
  const char* api = "ncclCommGetAsyncError";
  COMM_API_SCOPE();
  CHECK(comm_check(comm, api));
  CHECK(arg_check_ptr(asyncError, api, "asyncError"));
  *asyncError = (ncclResult_t)atomic_load(&comm->async_error);
  return ncclSuccess;
}

/* As stock: a comm whose nonblocking init/split is still running answers ncclInvalidArgument,
 * one with an async error answers that error. */
static ncclResult_t query_check(ncclComm_t comm, const void* out, const char* api,
                                const char* out_name) {
  CHECK(comm_check(comm, api));
  CHECK(arg_check_ptr(out, api, out_name));
  CHECK(comm_check_settled(comm, api));
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int* count) {
  NVTX_API_RANGE("ncclCommCount");
  COMM_API_SCOPE();
  CHECK(query_check(comm, count, "ncclCommCount", "count"));
  *count = comm->nranks;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int* rank) {
  NVTX_API_RANGE("ncclCommUserRank");
  COMM_API_SCOPE();
  CHECK(query_check(comm, rank, "ncclCommUserRank", "rank"));
  *rank = comm->rank;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int* device) {
  NVTX_API_RANGE("ncclCommCuDevice");
  COMM_API_SCOPE();
  CHECK(query_check(comm, device, "ncclCommCuDevice", "device"));
  *device = comm->cuda_dev;
  return ncclSuccess;
}

/* ---- Finalize ---------------------------------------------------------------------------------
 */
static ncclResult_t finalize_job_run(comm_job_t* job) {
  ncclComm_t comm = job->owner;
  LOG_SINK_SCOPE(comm->last_error, sizeof(comm->last_error));
  ncclResult_t res = comm_drain(comm);
  if (!RESULT_IS_ERROR(res)) atomic_store(&comm->state, COMM_STATE_FINALIZED);
  if (!job->blocking) atomic_store(&comm->async_error, res);
  return res;
}

static ncclResult_t finalize_impl(ncclComm_t comm) {
  const char* api = "ncclCommFinalize";
  CHECK(comm_check(comm, api));
  CHECK(comm_check_settled(comm, api));
  int state = atomic_load(&comm->state);
  if (state == COMM_STATE_FINALIZED || state == COMM_STATE_REVOKED) {
    /* Stock: ncclInvalidArgument for a second finalize, and after a revoke. */
    WARN("%s: comm %p has already been %s; call ncclCommDestroy", api, (void*)comm,
         state == COMM_STATE_FINALIZED ? "finalized" : "revoked");
    return ncclInvalidArgument;
  }
  if (state != COMM_STATE_READY) {
    WARN("%s: comm %p is not initialized", api, (void*)comm);
    return ncclInvalidUsage;
  }
  comm_job_t* job;
  CHECK(comm_job_create(api, finalize_job_run, &job));
  job->owner = comm;
  ncclResult_t res;
  if (comm->config.blocking) {
    res = comm_job_start(job, true);
    comm_job_release(job);
    return res;
  }
  atomic_store(&comm->async_error, ncclInProgress);
  comm_job_attach(comm, job);
  res = comm_job_start(job, false);
  comm_job_release(job);
  if (RESULT_IS_ERROR(res)) atomic_store(&comm->async_error, ncclSuccess);
  return res;
}

NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  NVTX_API_RANGE("ncclCommFinalize");
  if (comm == NULL) return ncclSuccess; /* as stock */
  COMM_API_SCOPE();
  return finalize_impl(comm);
}

/* ---- Destroy and abort --------------------------------------------------------------------------
 * Both retire the communicator (core.h: comm_retire): a call still inside it on another thread
 * (a watchdog aborting a hung collective) leaves first, or frees it when it leaves. The timeline
 * records the end and is written out. */
static void lifecycle_trace(ncclComm_t comm, int what) {
  if (!trace_on()) return;
  uint64_t t = trace_now_ns();
  progress_trace_gpu(comm);
  trace_span(comm, what, t, t, NULL, 0);
}

/* As stock: refused while a nonblocking operation runs (ncclInvalidArgument) and, after an async
 * error, that error (ncclCommAbort frees such a comm). Its own scope: the caller frees comm. */
static ncclResult_t destroy_check(ncclComm_t comm, const char* api) {
  COMM_API_SCOPE();
  CHECK(comm_check(comm, api));
  return comm_check_settled(comm, api);
}

NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  NVTX_API_RANGE("ncclCommDestroy");
  const char* api = "ncclCommDestroy";
  char bus[24];
  if (comm == NULL) return ncclSuccess; /* as stock */
  ncclResult_t res = destroy_check(comm, api);
  if (res != ncclSuccess) return res;
  INFO(NCCL_INIT, "comm %p rank %d nranks %d cudaDev %d busId %s - Destroy COMPLETE", (void*)comm,
       comm->rank, comm->nranks, comm->cuda_dev, comm_bus_text(comm->bus_id, bus));
  lifecycle_trace(comm, TRACE_DESTROY);
  comm_retire(comm);
  trace_write();
  return ncclSuccess;
}

/* Its own scope: the caller frees comm. */
static ncclResult_t abort_stop(ncclComm_t comm, const char* api) {
  char bus[24];
  COMM_API_SCOPE();
  CHECK(comm_check(comm, api));
  INFO(NCCL_INIT, "comm %p rank %d nRanks %d cudaDev %d busId %s - Abort START", (void*)comm,
       comm->rank, comm->nranks, comm->cuda_dev, comm_bus_text(comm->bus_id, bus));
  /* If the background operation does not stop, leak the comm rather than free it under it. */
  return comm_abort_and_wait(comm);
}

NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  NVTX_API_RANGE("ncclCommAbort");
  const char* api = "ncclCommAbort";
  char bus[24];
  if (comm == NULL) return ncclSuccess; /* as stock */
  ncclResult_t res = abort_stop(comm, api);
  if (res != ncclSuccess) return res;
  INFO(NCCL_INIT, "comm %p rank %d nranks %d cudaDev %d busId %s - Abort COMPLETE", (void*)comm,
       comm->rank, comm->nranks, comm->cuda_dev, comm_bus_text(comm->bus_id, bus));
  lifecycle_trace(comm, TRACE_ABORT);
  comm_retire(comm); /* a call another thread is still in frees it when it leaves */
  trace_write();
  return ncclSuccess;
}

/* ---- Revoke -------------------------------------------------------------------------------------
 */
static ncclResult_t revoke_impl(ncclComm_t comm, int revokeFlags) {
  const char* api = "ncclCommRevoke";
  char bus[24];
  CHECK(comm_check(comm, api));
  if (revokeFlags != NCCL_REVOKE_DEFAULT) {
    WARN("%s: invalid revokeFlags %d: must be NCCL_REVOKE_DEFAULT (0)", api, revokeFlags);
    return ncclInvalidArgument;
  }
  int state = atomic_load(&comm->state);
  if (state == COMM_STATE_FINALIZED || state == COMM_STATE_REVOKED) {
    /* Stock: ncclInvalidArgument after finalize, and for a second revoke. */
    WARN("%s: comm %p has already been %s", api, (void*)comm,
         state == COMM_STATE_FINALIZED ? "finalized" : "revoked");
    return ncclInvalidArgument;
  }
  if (state != COMM_STATE_READY) {
    WARN("%s: comm %p is not initialized", api, (void*)comm);
    return ncclInvalidUsage;
  }
  INFO(NCCL_INIT, "comm %p rank %d nRanks %d cudaDev %d busId %s - Revoke START", (void*)comm,
       comm->rank, comm->nranks, comm->cuda_dev, comm_bus_text(comm->bus_id, bus));
  /* Stop in-flight work (including a nonblocking split), wait until it has stopped, then clear
   * the flag: the bootstrap stays usable for split/shrink, collectives are refused by state. */
  CHECK(comm_abort_and_wait(comm));
  ncclResult_t res = comm_drain(comm);
  if (RESULT_IS_ERROR(res))
    INFO(NCCL_INIT, "comm %p: collectives comm_finalize after revoke -> %d", (void*)comm, (int)res);
  __atomic_store_n(comm->abort_flag, 0, __ATOMIC_RELEASE);
  atomic_store(&comm->state, COMM_STATE_REVOKED);
  atomic_store(&comm->async_error, ncclSuccess);
  INFO(NCCL_INIT, "comm %p rank %d nRanks %d - Revoke COMPLETE", (void*)comm, comm->rank,
       comm->nranks);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  NVTX_API_RANGE("ncclCommRevoke");
  if (comm == NULL) return ncclSuccess; /* as stock */
  COMM_API_SCOPE();
  return revoke_impl(comm, revokeFlags);
}
