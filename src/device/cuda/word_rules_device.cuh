/* A direct item's arithmetic on 8-byte words (direct_device.cuh, staged_device.cuh): an op chosen
 * at run time, a datatype per instantiation. Device code of kernel_direct.cu only. */
#ifndef BATON_DEVICE_CUDA_WORD_RULES_DEVICE_CUH
#define BATON_DEVICE_CUDA_WORD_RULES_DEVICE_CUH

#include "device/cuda/prims_device.cuh"

namespace baton {

/* 8 bytes seen as elements. */
template <typename T>
union pack8 {
  uint64_t u;
  T e[8 / sizeof(T)];
};

/* One 8-byte word's elements combined, the op chosen at run time (a uniform branch per word: the
 * direct kernel is instantiated once per datatype, not per datatype and op). */
template <typename O>
struct wrules {
  typedef typename O::elem_t T;
  enum { N = 8 / sizeof(T) };
  /* a contribution as it counts: PreMulSum multiplies it by the scalar */
  static __device__ __forceinline__ T pre(T x, int op, T s) {
    return op == DEV_OP_PREMULSUM ? O::mul(x, s) : x;
  }
  /* a rank's own word as it counts; the scalar is that rank's, so a rank pre-ops only its own
   * input (before sending it, or where it combines it) */
  static __device__ __forceinline__ uint64_t first(uint64_t x, int op, T s) {
    if (op != DEV_OP_PREMULSUM) return x;
    pack8<T> a;
    a.u = x;
#pragma unroll
    for (int i = 0; i < N; i++) a.e[i] = pre(a.e[i], op, s);
    return a.u;
  }
  /* x (op) acc, x already counted (first): the host executor's order */
  static __device__ __forceinline__ uint64_t next(uint64_t acc, uint64_t x, int op) {
    pack8<T> a, b;
    a.u = x;
    b.u = acc;
#pragma unroll
    for (int i = 0; i < N; i++) {
      const T v = a.e[i];
      a.e[i] = op == DEV_OP_PROD  ? O::mul(v, b.e[i])
               : op == DEV_OP_MIN ? O::min(v, b.e[i])
               : op == DEV_OP_MAX ? O::max(v, b.e[i])
                                  : O::add(v, b.e[i]);
    }
    return a.u;
  }
  static __device__ __forceinline__ uint64_t post(uint64_t acc, int op, uint64_t div) {
    if (op != DEV_OP_SUMPOSTDIV || div <= 1) return acc;
    pack8<T> a;
    a.u = acc;
#pragma unroll
    for (int i = 0; i < N; i++) a.e[i] = O::div(a.e[i], div);
    return a.u;
  }
};

/* fn(O()) with O the datatype's arithmetic (reduce_device.cuh's ops_*): one instantiation of the
 * caller's item per datatype, the op chosen at run time. */
template <typename F>
static __device__ __forceinline__ bool with_dtype_ops(int dtype, F fn) {
  switch (dtype) {
    case ncclInt8:
      return fn(ops_i8());
    case ncclUint8:
      return fn(ops_u8());
    case ncclInt32:
      return fn(ops_i32());
    case ncclUint32:
      return fn(ops_u32());
    case ncclInt64:
      return fn(ops_i64());
    case ncclUint64:
      return fn(ops_u64());
    case ncclFloat16:
      return fn(ops_f16());
    case ncclFloat32:
      return fn(ops_f32());
    case ncclFloat64:
      return fn(ops_f64());
    case ncclBfloat16:
      return fn(ops_bf16());
    case ncclFloat8e4m3:
      return fn(ops_e4m3());
    default:
      return fn(ops_e5m2());
  }
}

/* A direct item's scalar bits: PreMulSum's, read now where the user left it in device memory
 * (ncclScalarDevice), else as packed (SUMPOSTDIV: the divisor). */
static __device__ __forceinline__ uint64_t work_scalar_bits(const cuda_work_t* w) {
  if (w->op != DEV_OP_PREMULSUM || !w->scalar_on_device) return w->u.scalar;
  const void* p = w->u.scalar_ptr;
  return w->esize == 1   ? *static_cast<const uint8_t*>(p)
         : w->esize == 2 ? *static_cast<const uint16_t*>(p)
         : w->esize == 4 ? *static_cast<const uint32_t*>(p)
                         : *static_cast<const uint64_t*>(p);
}

}  // namespace baton

#endif /* BATON_DEVICE_CUDA_WORD_RULES_DEVICE_CUH */
