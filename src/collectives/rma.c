/* One-sided operations on windows (NCCL 2.29): ncclPutSignal, ncclSignal, ncclWaitSignal.
 *
 * Not built yet: each checks its communicator, then refuses with ncclInvalidUsage and a WARN, and
 * queues nothing. README lists them under "refused". */
#include "collectives/collectives.h"

static ncclResult_t rma_refuse(ncclComm_t comm, const char* api) {
  COMM_API_SCOPE();
  return comm_refuse_unbuilt(comm, api,
                             "one-sided operations on windows are not built; use ncclSend/ncclRecv");
}

NCCL_API(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype,
         int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
         unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  NVTX_API_RANGE("ncclPutSignal");
  return rma_refuse(comm, "ncclPutSignal");
}

NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags,
         ncclComm_t comm, cudaStream_t stream) {
  NVTX_API_RANGE("ncclSignal");
  return rma_refuse(comm, "ncclSignal");
}

NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t* signalDescs,
         ncclComm_t comm, cudaStream_t stream) {
  NVTX_API_RANGE("ncclWaitSignal");
  return rma_refuse(comm, "ncclWaitSignal");
}
