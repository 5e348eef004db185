/* Launch progress marks (cuda_exec.h, cuda_progress_t): where the host's progress watch learns
 * that a launch began and ended, and the timeline gets its device times. One thread writes each
 * mark; nothing waits on them. Included by the kernel entry points only. */
#ifndef BATON_DEVICE_CUDA_PROGRESS_DEVICE_CUH
#define BATON_DEVICE_CUDA_PROGRESS_DEVICE_CUH

#include <cuda_runtime.h>

#include "device/cuda/cuda_exec.h"

namespace baton {

static __device__ __forceinline__ unsigned long long progress_clock_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* Block 0's thread 0, before any work: the launch has started. */
static __device__ __forceinline__ void progress_begin(const cuda_args_hdr_t* h) {
  cuda_progress_t* p = h->progress;
  if (p == nullptr || blockIdx.x != 0 || threadIdx.x != 0) return;
  cuda_launch_time_t* s = &p->slots[h->launch % CUDA_PROGRESS_SLOTS];
  s->start_ns = progress_clock_ns();
  __threadfence_system();
  s->start_launch = h->launch;
  p->started = h->launch;
}

/* Every block once its work is over (finished or stopped): the last one marks the end. */
static __device__ __forceinline__ void progress_end(const cuda_args_hdr_t* h) {
  cuda_progress_t* p = h->progress;
  if (p == nullptr) return;
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence(); /* this block's writes before its count */
  if (atomicInc(h->progress_blocks, gridDim.x - 1) != gridDim.x - 1) return;
  __threadfence(); /* every block's writes before the mark */
  cuda_launch_time_t* s = &p->slots[h->launch % CUDA_PROGRESS_SLOTS];
  s->end_ns = progress_clock_ns();
  __threadfence_system();
  s->end_launch = h->launch;
  __threadfence_system();
  p->done = h->launch;
}

}  // namespace baton

#endif /* BATON_DEVICE_CUDA_PROGRESS_DEVICE_CUH */
