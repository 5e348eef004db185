/* The scaling kernel of plan.local (local.c): a one-rank reduction whose op changes the data
 * (PreMulSum, floating types' Avg) is dst = src * scalar, element by element, with the executor's
 * own arithmetic (reduce_device.cuh's PreMulSum pre-op, so the bits are those of a rank's own
 * contribution on more ranks). Every thread of the grid takes its share of 16-byte vectors, so
 * the kernel runs at memory speed; only PreMulSum is instantiated (12 types). */
#include "device/cuda/reduce_device.cuh"

namespace baton {

template <typename O>
static __device__ void local_scale(const cuda_local_args_t& a, const red_t& r, int tid, int nth) {
  rc_args rc;
  rc.src[0] = static_cast<const char*>(a.src);
  rc.dst[0] = static_cast<char*>(a.dst);
  rc.nsrc = 1;
  rc.ndst = 1;
  rc.has_local = true;
  rc.nelem = a.count;
  rc_impl<O, DEV_OP_PREMULSUM>(rc, 1, r, tid, nth);
}

static __device__ uint64_t local_scalar(const cuda_local_args_t& a, size_t esize) {
  if (a.scalar_ptr == nullptr) return a.scalar;
  switch (esize) {
    case 1:
      return *static_cast<const uint8_t*>(a.scalar_ptr);
    case 2:
      return *static_cast<const uint16_t*>(a.scalar_ptr);
    case 4:
      return *static_cast<const uint32_t*>(a.scalar_ptr);
    default:
      return *static_cast<const uint64_t*>(a.scalar_ptr);
  }
}

/* A plain copy of count bytes: 16-byte vectors when both ends allow, bytes otherwise. */
static __device__ void local_copy(const cuda_local_args_t& a, int tid, int nth) {
  const char* s = static_cast<const char*>(a.src);
  char* d = static_cast<char*>(a.dst);
  size_t i = 0;
  if (((reinterpret_cast<uintptr_t>(s) | reinterpret_cast<uintptr_t>(d)) & 15) == 0) {
    const size_t nv = a.count / 16;
    for (size_t v = (size_t)tid; v < nv; v += (size_t)nth)
      reinterpret_cast<uint4*>(d)[v] = reinterpret_cast<const uint4*>(s)[v];
    i = nv * 16;
  }
  for (i += (size_t)tid; i < a.count; i += (size_t)nth) d[i] = s[i];
}

}  // namespace baton

__global__ void __launch_bounds__(CUDA_LOCAL_THREADS)
    baton_local_scale(const __grid_constant__ cuda_local_args_t a) {
  using namespace baton;
  const int tid = (int)(blockIdx.x * blockDim.x + threadIdx.x);
  const int nth = (int)(gridDim.x * blockDim.x);
  if (a.dtype < 0) {
    local_copy(a, tid, nth);
    return;
  }
  red_t r;
  r.dtype = a.dtype;
  r.op = DEV_OP_PREMULSUM;
  r.div = 0;
  switch (a.dtype) {
    case ncclInt8:
    case ncclUint8:
      r.scalar = local_scalar(a, 1);
      local_scale<ops_u8>(a, r, tid, nth);
      break;
    case ncclInt32:
    case ncclUint32:
      r.scalar = local_scalar(a, 4);
      local_scale<ops_u32>(a, r, tid, nth);
      break;
    case ncclInt64:
    case ncclUint64:
      r.scalar = local_scalar(a, 8);
      local_scale<ops_u64>(a, r, tid, nth);
      break;
    case ncclFloat16:
      r.scalar = local_scalar(a, 2);
      local_scale<ops_f16>(a, r, tid, nth);
      break;
    case ncclFloat32:
      r.scalar = local_scalar(a, 4);
      local_scale<ops_f32>(a, r, tid, nth);
      break;
    case ncclFloat64:
      r.scalar = local_scalar(a, 8);
      local_scale<ops_f64>(a, r, tid, nth);
      break;
    case ncclBfloat16:
      r.scalar = local_scalar(a, 2);
      local_scale<ops_bf16>(a, r, tid, nth);
      break;
    case ncclFloat8e4m3:
      r.scalar = local_scalar(a, 1);
      local_scale<ops_e4m3>(a, r, tid, nth);
      break;
    default:
      r.scalar = local_scalar(a, 1);
      local_scale<ops_e5m2>(a, r, tid, nth);
      break;
  }
}

extern "C" const void* cuda_local_kernel(void) {
  return (const void*)baton_local_scale;
}
