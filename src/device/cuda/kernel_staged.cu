/* The staged direct algorithms' kernels, one a datatype (staged_device.cuh): a launch whose items
 * are all staged and of one datatype takes the kernel of that type (launch.c). The direct kernel
 * (kernel_direct.cu) runs them too, behind its datatype switch, for launches that mix types or
 * carry LL direct items; that switch costs the staged loops 5-13 % (bench_stage on 4 H100s, the
 * same float items: TwoShot AllReduce 4 MiB 40.8 us through it against 36.7 in a kernel of one
 * type, OneShot 256 KiB 11.4 against 10.4; the switch without the LL code is as slow, 39.2). */
#include "device/cuda/staged_device.cuh"
#include "device/cuda/staged_kernels.h"

/* A block's items when every item of the launch is staged and of one datatype, O's (the host
 * chose the kernel by it). */
template <typename O>
static __device__ void stage_block(const cuda_args_hdr_t* hdr, const cuda_work_t* works) {
  __shared__ baton::stage_smem_t s;
  __shared__ volatile int stop;
  baton::kctx_t k;
  k.abort_flag = hdr->abort_flag;
  k.status = hdr->status;
  k.stop = &stop;
  k.channel = hdr->chan_id[blockIdx.x];
  k.trace = nullptr;
  if (threadIdx.x == 0) stop = 0;
  for (int i = hdr->first[blockIdx.x]; i < hdr->first[blockIdx.x + 1]; i++) {
    baton::stage_item_t it;
    baton::stage_begin(s, hdr, &works[i], it);
    if (!baton::stage_end(s, it, baton::stage_item<O>(k, s, it, it.half)))
      return; /* every thread learnt it at a barrier */
  }
}

template <typename O>
__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1)
    baton_staged(const __grid_constant__ cuda_args_small_t args) {
  baton::progress_begin(&args.hdr); /* the progress watch counts these launches too */
  stage_block<O>(&args.hdr, args.works);
  baton::progress_end(&args.hdr);
}

const void* cuda_staged_kernel(int dtype) {
  switch (dtype) {
    case ncclInt8:
      return (const void*)baton_staged<baton::ops_i8>;
    case ncclUint8:
      return (const void*)baton_staged<baton::ops_u8>;
    case ncclInt32:
      return (const void*)baton_staged<baton::ops_i32>;
    case ncclUint32:
      return (const void*)baton_staged<baton::ops_u32>;
    case ncclInt64:
      return (const void*)baton_staged<baton::ops_i64>;
    case ncclUint64:
      return (const void*)baton_staged<baton::ops_u64>;
    case ncclFloat16:
      return (const void*)baton_staged<baton::ops_f16>;
    case ncclFloat32:
      return (const void*)baton_staged<baton::ops_f32>;
    case ncclFloat64:
      return (const void*)baton_staged<baton::ops_f64>;
    case ncclBfloat16:
      return (const void*)baton_staged<baton::ops_bf16>;
    case ncclFloat8e4m3:
      return (const void*)baton_staged<baton::ops_e4m3>;
    case ncclFloat8e5m2:
      return (const void*)baton_staged<baton::ops_e5m2>;
    default:
      return nullptr;
  }
}
