/* Work without peers on the GPU (plan.local): copies to self (a send to self paired with its
 * receive from self, AlltoAll's, Gather's and Scatter's own block) and the collectives of a
 * one-rank communicator.
 *
 * A copy is one cudaMemcpyAsync on the device (the copy engine's speed, capturable as a memcpy
 * node of a graph); a scaling (PreMulSum, floating types' Avg) is the many-block kernel of
 * kernel_local.cu. Nothing is launched for work the planner found empty or in place.
 *
 * Beside a kernel (AlltoAll: the transfers to the peers), the copies go to a stream of their own,
 * forked from the launch stream before the kernel and joined back after it with two events, so
 * they overlap the kernel instead of waiting for it; the fork and join are capturable too. */
#include <stdlib.h>

#include "device/cuda/cuda_exec.h"

static ncclResult_t local_ensure(cuda_exec_t* ex) {
  if (ex->local_stream != NULL) return ncclSuccess;
  CUDA_EXEC_CHECK(cudaStreamCreateWithFlags(&ex->local_stream, cudaStreamNonBlocking));
  CUDA_EXEC_CHECK(cudaEventCreateWithFlags(&ex->local_fork, cudaEventDisableTiming));
  CUDA_EXEC_CHECK(cudaEventCreateWithFlags(&ex->local_join, cudaEventDisableTiming));
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ex->device) != cudaSuccess ||
      sms <= 0) {
    (void)cudaGetLastError();
    sms = 1;
  }
  ex->local_max_blocks = 4 * sms;
  return ncclSuccess;
}

ncclResult_t cuda_local_fork(cuda_exec_t* ex, cudaStream_t stream) {
  CHECK(local_ensure(ex));
  CUDA_EXEC_CHECK(cudaEventRecord(ex->local_fork, stream));
  CUDA_EXEC_CHECK(cudaStreamWaitEvent(ex->local_stream, ex->local_fork, 0));
  return ncclSuccess;
}

ncclResult_t cuda_local_join(cuda_exec_t* ex, cudaStream_t stream) {
  CUDA_EXEC_CHECK(cudaEventRecord(ex->local_join, ex->local_stream));
  CUDA_EXEC_CHECK(cudaStreamWaitEvent(stream, ex->local_join, 0));
  return ncclSuccess;
}

static ncclResult_t local_scale(cuda_exec_t* ex, const local_op_t* l, size_t esize,
                                cudaStream_t stream) {
  CHECK(local_ensure(ex));
  cuda_local_args_t a = {.src = l->src,
                         .dst = l->dst,
                         .count = l->count,
                         .scalar = l->op.scalar,
                         .scalar_ptr = l->op.scalar_on_device ? l->op.scalar_ptr : NULL,
                         .dtype = l->dtype};
  /* a block per 64 KiB, a few blocks per SM at most (every thread moves 16-byte vectors) */
  size_t blocks = (l->count * esize + (64 << 10) - 1) / (64 << 10);
  if (blocks < 1) blocks = 1;
  if (blocks > (size_t)ex->local_max_blocks) blocks = (size_t)ex->local_max_blocks;
  void* params[] = {&a};
  dim3 grid = {(unsigned)blocks, 1, 1}, block = {CUDA_LOCAL_THREADS, 1, 1};
  cudaError_t err = cudaLaunchKernel(cuda_local_kernel(), grid, block, params, 0, stream);
  if (err != cudaSuccess) {
    WARN("CUDA executor: rank %d: launching the scaling kernel (%zu blocks) failed: %s",
         ex->comm->rank, blocks, cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* EXPERIMENT (A/B of 2026-11-23, to be removed with its verdict): copies up to this many bytes
 * run as the local kernel instead of cudaMemcpyAsync (BATON_LOCAL_COPY_KERNEL_MAX, default 0). */
static size_t copy_kernel_max(void) {
  static long v = -1;
  if (v < 0) {
    const char* e = getenv("BATON_LOCAL_COPY_KERNEL_MAX");
    v = e != NULL ? atol(e) : 0;
    if (v < 0) v = 0;
  }
  return (size_t)v;
}

static ncclResult_t local_copy_kernel(cuda_exec_t* ex, const local_op_t* l, size_t bytes,
                                      cudaStream_t stream) {
  CHECK(local_ensure(ex));
  cuda_local_args_t a = {.src = l->src, .dst = l->dst, .count = bytes, .dtype = -1};
  size_t blocks = (bytes + (64 << 10) - 1) / (64 << 10);
  if (blocks < 1) blocks = 1;
  if (blocks > (size_t)ex->local_max_blocks) blocks = (size_t)ex->local_max_blocks;
  void* params[] = {&a};
  dim3 grid = {(unsigned)blocks, 1, 1}, block = {CUDA_LOCAL_THREADS, 1, 1};
  cudaError_t err = cudaLaunchKernel(cuda_local_kernel(), grid, block, params, 0, stream);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("CUDA executor: rank %d: the copy kernel (%zu bytes) failed to launch: %s", ex->comm->rank,
         bytes, cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

ncclResult_t cuda_local_run(cuda_exec_t* ex, const plan_t* plan, cudaStream_t stream) {
  for (int i = 0; i < plan->nlocal; i++) {
    const local_op_t* l = &plan->local[i];
    size_t esize = datatype_size((ncclDataType_t)l->dtype);
    if (esize == 0) {
      WARN("CUDA executor: a local operation of datatype %d is invalid", l->dtype);
      return ncclInternalError;
    }
    if (l->op.kind == DEV_OP_PREMULSUM) {
      CHECK(local_scale(ex, l, esize, stream));
      continue;
    }
    if (l->count * esize <= copy_kernel_max()) {
      CHECK(local_copy_kernel(ex, l, l->count * esize, stream));
      continue;
    }
    cudaError_t err = cudaMemcpyAsync(l->dst, l->src, l->count * esize, cudaMemcpyDefault, stream);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      WARN("CUDA executor: rank %d: cudaMemcpyAsync of %zu bytes from %p to %p failed: %s",
           ex->comm->rank, l->count * esize, l->src, l->dst, cudaGetErrorString(err));
      return ncclUnhandledCudaError;
    }
  }
  return ncclSuccess;
}

void cuda_local_fini(cuda_exec_t* ex) {
  if (ex->local_stream != NULL) {
    (void)cudaStreamSynchronize(ex->local_stream);
    (void)cudaStreamDestroy(ex->local_stream);
  }
  if (ex->local_fork != NULL) (void)cudaEventDestroy(ex->local_fork);
  if (ex->local_join != NULL) (void)cudaEventDestroy(ex->local_join);
  ex->local_stream = NULL;
  ex->local_fork = ex->local_join = NULL;
}
