/* Argument and state checks shared by every entry point (core and collectives). */
#include "core/core.h"

ncclResult_t arg_check_ptr(const void* p, const char* api, const char* name) {
  if (p == NULL) {
    WARN("%s: argument %s is NULL", api, name);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
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
