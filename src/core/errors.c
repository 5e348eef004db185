/* Library version, error strings and the last-error text (per communicator, per thread). */
#include "core/core.h"

NCCL_API(ncclResult_t, ncclGetVersion, int* version) {
  NVTX_API_RANGE("ncclGetVersion");
  if (version == NULL) {
    WARN("ncclGetVersion: argument version is NULL");
    return ncclInvalidArgument;
  }
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

/* Same texts as stock NCCL: programs and tests compare them. */
NCCL_API(const char*, ncclGetErrorString, ncclResult_t result) {
  NVTX_API_RANGE("ncclGetErrorString");
  switch (result) {
    case ncclSuccess:
      return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
      return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument:
      return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
      return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
      return "remote process exited or there was a network error";
    case ncclInProgress:
      return "NCCL operation in progress";
    case ncclTimeout:
      return "timeout";
    default:
      return "unknown result code";
  }
}

/* A live communicator's own last WARN when it has one; otherwise (NULL, destroyed, or no error
 * on that comm yet) the calling thread's last WARN. Never NULL. */
NCCL_API(const char*, ncclGetLastError, ncclComm_t comm) {
  NVTX_API_RANGE("ncclGetLastError");
  if (comm != NULL && comm->magic == COMM_MAGIC && comm->last_error[0] != '\0')
    return comm->last_error;
  return log_last_error();
}
