/* kernel_medium.cu's entry point built for CUDA_EXEC_WIDE_THREADS threads a block (the launches
 * whose items all run Simple; cuda_exec.h), in a file of its own so it compiles in parallel. */
#define BATON_EXEC_WIDE 1
#include "device/cuda/exec_block_device.cuh"

BATON_EXEC_KERNEL(baton_exec_medium_wide, cuda_args_medium_t)
