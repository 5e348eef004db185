/* Entry points whose feature this build does not have yet: each returns ncclInvalidUsage with a
 * WARN saying so, never ncclSuccess. */
#include "base/base.h"

static ncclResult_t unsupported(const char* name) {
  WARN("%s is not supported by this build", name);
  return ncclInvalidUsage;
}

NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) { return unsupported("ncclAllReduce"); }

NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) { return unsupported("ncclBroadcast"); }

NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) { return unsupported("ncclBcast"); }

NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) { return unsupported("ncclReduce"); }

NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) { return unsupported("ncclAllGather"); }

NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) { return unsupported("ncclReduceScatter"); }

NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) { return unsupported("ncclAlltoAll"); }

NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) { return unsupported("ncclGather"); }

NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) { return unsupported("ncclScatter"); }

NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) { return unsupported("ncclSend"); }

NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) { return unsupported("ncclRecv"); }

NCCL_API(ncclResult_t, ncclGroupStart, void) { return unsupported("ncclGroupStart"); }

NCCL_API(ncclResult_t, ncclGroupEnd, void) { return unsupported("ncclGroupEnd"); }

NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) { return unsupported("ncclGroupSimulateEnd"); }

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar, ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm) { return unsupported("ncclRedOpCreatePreMulSum"); }

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) { return unsupported("ncclRedOpDestroy"); }

NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) { return unsupported("ncclMemAlloc"); }

NCCL_API(ncclResult_t, ncclMemFree, void* ptr) { return unsupported("ncclMemFree"); }

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size, void** handle) { return unsupported("ncclCommRegister"); }

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) { return unsupported("ncclCommDeregister"); }

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win, int winFlags) { return unsupported("ncclCommWindowRegister"); }

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) { return unsupported("ncclCommWindowDeregister"); }
