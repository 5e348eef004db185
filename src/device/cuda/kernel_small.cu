/* The CUDA executor's kernel for the small parameter block (cuda_args_small_t, cuda_exec.h): a file
 * of its own so the entry points compile in parallel (the body: exec_block_device.cuh). */
#include "device/cuda/exec_block_device.cuh"

BATON_EXEC_KERNEL(baton_exec_small, cuda_args_small_t)
