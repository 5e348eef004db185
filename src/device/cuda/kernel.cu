/* The CUDA executor's kernels as the launcher sees them: one entry point per parameter block size
 * (CUDA_KERN_*) and block size (narrow, wide: cuda_exec.h), each compiled in its own file
 * (kernel_tiny.cu, kernel_tiny_wide.cu, ...; the body is exec_block_device.cuh). */
#include <cuda_runtime.h>

#include "device/cuda/cuda_exec.h"

__global__ void baton_exec_tiny(const __grid_constant__ cuda_args_tiny_t args);
__global__ void baton_exec_small(const __grid_constant__ cuda_args_small_t args);
__global__ void baton_exec_medium(const __grid_constant__ cuda_args_medium_t args);
__global__ void baton_exec_large(const __grid_constant__ cuda_args_large_t args);
__global__ void baton_exec_tiny_wide(const __grid_constant__ cuda_args_tiny_t args);
__global__ void baton_exec_small_wide(const __grid_constant__ cuda_args_small_t args);
__global__ void baton_exec_medium_wide(const __grid_constant__ cuda_args_medium_t args);
__global__ void baton_exec_large_wide(const __grid_constant__ cuda_args_large_t args);

/* [wide][CUDA_KERN_*] */
static const void* const kernels[2][CUDA_KERN_COUNT] = {
    {(const void*)baton_exec_tiny, (const void*)baton_exec_small, (const void*)baton_exec_medium,
     (const void*)baton_exec_large},
    {(const void*)baton_exec_tiny_wide, (const void*)baton_exec_small_wide,
     (const void*)baton_exec_medium_wide, (const void*)baton_exec_large_wide}};

extern "C" const void* cuda_exec_kernel(int which, bool wide) {
  return kernels[wide ? 1 : 0][which];
}
