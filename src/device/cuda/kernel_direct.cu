/* The CUDA executor's kernel for the direct algorithms (OneShot, TwoShot: direct_device.cuh), for
 * the small parameter block: a file of its own, so the direct code is compiled once and the other
 * kernels carry none of it. Always the narrow block: 512 threads cost 2.5 us a launch more. */
#include "device/cuda/direct_device.cuh"

__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1)
    baton_direct(const __grid_constant__ cuda_args_small_t args) {
  baton::progress_begin(&args.hdr); /* the progress watch counts direct launches too */
  baton::direct_block(&args.hdr, args.works);
  baton::progress_end(&args.hdr);
}

extern "C" const void* cuda_direct_kernel(void) {
  return (const void*)baton_direct;
}
