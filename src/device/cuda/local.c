/* Work without peers on the GPU (plan.local): copies to self (a send to self paired with its
 * receive from self, AlltoAll's, Gather's and Scatter's own block) and the collectives of a
 * one-rank communicator.
 *
 * A copy is one cudaMemcpyAsync on the device (the copy engine's speed, capturable as a memcpy
 * node of a graph), or for a small one issued eagerly the copy mode of kernel_local.cu's kernel
 * (LOCAL_COPY_KERNEL_MAX); a scaling (PreMulSum, floating types' Avg) is that many-block kernel.
 * Nothing is launched for work the planner found empty or in place.
 *
 * Beside a kernel (AlltoAll: the transfers to the peers), the copies go to a stream of their own,
 * forked from the launch stream before the kernel and joined back after it with two events, so
 * they overlap the kernel instead of waiting for it; the fork and join are capturable too. */
#include "device/cuda/cuda_exec.h"

static ncclResult_t local_ensure(cuda_exec_t* ex) {
  if (ex->local_stream != NULL) return ncclSuccess;
  CUDA_CHECK(cudaStreamCreateWithFlags(&ex->local_stream, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&ex->local_fork, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventCreateWithFlags(&ex->local_join, cudaEventDisableTiming));
  int sms = 0;
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, ex->device) != cudaSuccess ||
      sms <= 0) {
    (void)cudaGetLastError(); /* unknown: one SM, the fewest blocks */
    sms = 1;
  }
  ex->local_max_blocks = 4 * sms;
  return ncclSuccess;
}

ncclResult_t cuda_local_fork(cuda_exec_t* ex, cudaStream_t stream) {
  CHECK(local_ensure(ex));
  CUDA_CHECK(cudaEventRecord(ex->local_fork, stream));
  CUDA_CHECK(cudaStreamWaitEvent(ex->local_stream, ex->local_fork, 0));
  return ncclSuccess;
}

ncclResult_t cuda_local_join(cuda_exec_t* ex, cudaStream_t stream) {
  CUDA_CHECK(cudaEventRecord(ex->local_join, ex->local_stream));
  CUDA_CHECK(cudaStreamWaitEvent(stream, ex->local_join, 0));
  return ncclSuccess;
}

/* The local kernel over bytes: a block per per_block bytes (each thread moves 16-byte vectors),
 * a few blocks per SM at most. */
static ncclResult_t local_launch(cuda_exec_t* ex, cuda_local_args_t* a, size_t bytes,
                                 size_t per_block, cudaStream_t stream) {
  CHECK(local_ensure(ex));
  size_t blocks = (bytes + per_block - 1) / per_block;
  if (blocks < 1) blocks = 1;
  if (blocks > (size_t)ex->local_max_blocks) blocks = (size_t)ex->local_max_blocks;
  void* params[] = {a};
  dim3 grid = {(unsigned)blocks, 1, 1}, block = {CUDA_LOCAL_THREADS, 1, 1};
  CUDA_CHECK(cudaLaunchKernel(cuda_local_kernel(), grid, block, params, 0, stream));
  return ncclSuccess;
}

static ncclResult_t local_scale(cuda_exec_t* ex, const local_op_t* l, size_t esize,
                                cudaStream_t stream) {
  cuda_local_args_t a = {.src = l->src,
                         .dst = l->dst,
                         .count = l->count,
                         .scalar = l->op.scalar,
                         .scalar_ptr = l->op.scalar_on_device ? l->op.scalar_ptr : NULL,
                         .dtype = l->dtype};
  return local_launch(ex, &a, l->count * esize, 64 << 10, stream);
}

/* A plain copy up to this size, outside stream capture and with no kernel beside it, runs as the
 * local kernel: a small copy costs the host's time per call, and a launch takes less of it than
 * cudaMemcpyAsync (run 55, bench_call: one-rank calls of 8 B..64 KiB 3.64-3.93 us against
 * 4.33-4.49 with the memcpy, stock 4.15-4.42); from 2 MiB the kernel's own time is longer than
 * the copy engine's (run 56: 4.8 us at 2 MiB, 7.2 at 4 MiB, stock's memcpy 4.2 and 5.6). Graphs
 * keep the memcpy node (0.96 us per replay against the kernel's 1.09); beside a kernel the copy
 * engine overlaps it. */
#define LOCAL_COPY_KERNEL_MAX ((size_t)1 << 20)

ncclResult_t cuda_local_run(cuda_exec_t* ex, const plan_t* plan, cudaStream_t stream, bool eager) {
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
    if (eager && l->count * esize <= LOCAL_COPY_KERNEL_MAX) {
      cuda_local_args_t a = {.src = l->src, .dst = l->dst, .count = l->count * esize, .dtype = -1};
      CHECK(local_launch(ex, &a, l->count * esize, CUDA_LOCAL_THREADS * 16, stream));
      continue;
    }
    CUDA_CHECK(cudaMemcpyAsync(l->dst, l->src, l->count * esize, cudaMemcpyDefault, stream));
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
