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

/* No fences here: the marks guard no data, and a system-scope fence costs the launch about
 * 3 us (bench_launch pair_oneshot_marks: 7.1-7.3 us against 4.0 without marks). A slot's launch
 * number and time go out as one 16-byte store, so the host never pairs a number with another
 * launch's time; the host takes a slot only when both halves name the launch it asks for. */
static __device__ __forceinline__ void progress_stamp(volatile unsigned long long* pair,
                                                      unsigned long long launch) {
  asm volatile("st.volatile.global.v2.u64 [%0], {%1, %2};" ::"l"(pair), "l"(launch),
               "l"(progress_clock_ns())
               : "memory");
}

/* Block 0's thread 0, before any work: the launch has started. */
static __device__ __forceinline__ void progress_begin(const cuda_args_hdr_t* h) {
  cuda_progress_t* p = h->progress;
  if (p == nullptr || blockIdx.x != 0 || threadIdx.x != 0) return;
  progress_stamp(&p->slots[h->launch % CUDA_PROGRESS_SLOTS].start_launch, h->launch);
  p->started = h->launch;
}

/* Every block once its work is over (finished or stopped): the last one to count itself marks
 * the end (the count is a device-scope atomic; the blocks' data needs no ordering with it). */
static __device__ __forceinline__ void progress_end(const cuda_args_hdr_t* h) {
  cuda_progress_t* p = h->progress;
  if (p == nullptr) return;
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (gridDim.x > 1 && atomicInc(h->progress_blocks, gridDim.x - 1) != gridDim.x - 1) return;
  progress_stamp(&p->slots[h->launch % CUDA_PROGRESS_SLOTS].end_launch, h->launch);
  p->done = h->launch;
}

}  // namespace baton

#endif /* BATON_DEVICE_CUDA_PROGRESS_DEVICE_CUH */
