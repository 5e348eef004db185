/* Host FIFO memory made visible to the GPU, for SHM and NET connections driven by the CUDA
 * executor: page-locked, mapped into the device's address space, reached through the device view
 * (the same address as the host one on 64-bit Linux with unified addressing). */
#include "transport/transport.h"

ncclResult_t transport_host_mem_to_device(void* host, size_t bytes, void** dev_out) {
  bool registered = false;
  void* dev = NULL;
  cudaError_t err =
      cudaHostRegister(host, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (err == cudaErrorHostMemoryAlreadyRegistered) {
    (void)cudaGetLastError(); /* someone else registered it: use their registration */
  } else if (err != cudaSuccess) {
    (void)cudaGetLastError();
    WARN(
        "cudaHostRegister of %zu bytes at %p for a FIFO failed: %s (the CUDA executor needs "
        "host FIFOs mapped into the GPU; check the memlock limit, ulimit -l)",
        bytes, host, cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  } else {
    registered = true;
  }
  err = cudaHostGetDevicePointer(&dev, host, 0);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("cudaHostGetDevicePointer for the FIFO at %p failed: %s", host, cudaGetErrorString(err));
    if (registered) (void)cudaHostUnregister(host);
    return ncclUnhandledCudaError;
  }
  *dev_out = dev;
  return ncclSuccess;
}

ncclResult_t transport_host_mem_unregister(void* host) {
  cudaError_t err = cudaHostUnregister(host);
  if (err != cudaSuccess && err != cudaErrorHostMemoryNotRegistered) {
    (void)cudaGetLastError();
    WARN("cudaHostUnregister of the FIFO at %p failed: %s", host, cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  (void)cudaGetLastError();
  return ncclSuccess;
}
