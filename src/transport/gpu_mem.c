/* Host FIFO memory made visible to the GPU, for SHM and NET connections driven by the CUDA
 * executor: page-locked, mapped into the device's address space, reached through the device view
 * (the same address as the host one on 64-bit Linux with unified addressing). */
#include "transport/transport.h"

/* cudaHostRegister's result, where memory someone else registered already is used as it is
 * (*mine: whether this call registered it). */
static cudaError_t registered_by(cudaError_t err, bool* mine) {
  *mine = err == cudaSuccess;
  return cuda_accept(err, cudaErrorHostMemoryAlreadyRegistered);
}

ncclResult_t transport_host_mem_to_device(void* host, size_t bytes, void** dev_out) {
  bool registered = false;
  void* dev = NULL;
  ncclResult_t res = ncclSuccess;
  CUDA_CHECK_GOTO(registered_by(cudaHostRegister(host, bytes,
                                                 cudaHostRegisterMapped | cudaHostRegisterPortable),
                                &registered),
                  res, no_register);
  CUDA_CHECK_GOTO(cudaHostGetDevicePointer(&dev, host, 0), res, unregister);
  *dev_out = dev;
  return ncclSuccess;
no_register:
  INFO(NCCL_INIT | NCCL_SHM,
       "The CUDA executor needs host FIFOs (here %zu bytes at %p) mapped into the GPU; check the "
       "memlock limit (ulimit -l)",
       bytes, host);
  return res;
unregister:
  if (registered) (void)cudaHostUnregister(host);
  return res;
}

ncclResult_t transport_host_mem_unregister(void* host) {
  CUDA_CHECK(cuda_accept(cudaHostUnregister(host), cudaErrorHostMemoryNotRegistered));
  return ncclSuccess;
}
