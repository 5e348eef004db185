/* Device reductions of the CUDA executor: the typed part of every step. Device code of the
 * kernel_*.cu only. The arithmetic is the host executor's (src/device/host/reduce.c), element for
 * element:
 *  - integers wrap (computed on the unsigned type of the same width); MIN/MAX compare with the
 *    type's own signedness;
 *  - float and double operate in their own precision with no contraction (__fadd_rn / __fmul_rn:
 *    a * s + b is never fused); MIN/MAX return the first operand when the second is NaN or
 *    smaller/larger, else the second (the host's (y != y || x < y) ? x : y);
 *  - half, bfloat16 and fp8 are converted to float, operated on and rounded back after every
 *    operation (nearest even; fp8 saturates like stock's satfinite);
 *  - PREMULSUM multiplies a rank's own contribution by the scalar (rounded to the type), then
 *    sums; SUMPOSTDIV sums, and the final result is divided once (integers truncate).
 * A step combines its inputs in the host's order: first = local (op) in[0] (or the pre-op of
 * local alone, or in[0] when there is no local), then acc = acc (op) in[j] for j = 1, 2, ...
 *
 * One typed function does all of it: rc_impl<type, op>, a whole step's reduction over memory
 * (16-byte vectors with several loads in flight, an element loop for the tail and for unaligned
 * pointers), reached through one switch per step. Every protocol uses it (LL and LL128 stage
 * their received lines in shared memory first). Instances: 12 types x {SUM, PROD, MIN, MAX,
 * PREMULSUM}, signed and unsigned integers sharing SUM/PROD/PREMULSUM (same bits), SUMPOSTDIV
 * summing and dividing the final result in a separate small pass (postdiv). */
#ifndef BATON_DEVICE_CUDA_REDUCE_DEVICE_CUH
#define BATON_DEVICE_CUDA_REDUCE_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include "device/cuda/cuda_exec.h"

namespace baton {

/* What a step's reduction needs besides its buffers. */
struct red_t {
  int dtype;
  int op;          /* dev_op_kind_t */
  uint64_t scalar; /* PREMULSUM: the scalar's bits in the datatype */
  uint64_t div;    /* SUMPOSTDIV: the divisor */
};

/* ---- Element arithmetic per datatype -----------------------------------------------------------
 */
template <typename T, typename U, bool SIGNED>
struct int_ops {
  typedef T elem_t;
  static __device__ __forceinline__ T from_bits(uint64_t b) { return (T)b; }
  static __device__ __forceinline__ T add(T a, T b) { return (T)(U)((U)a + (U)b); }
  static __device__ __forceinline__ T mul(T a, T b) { return (T)(U)((U)a * (U)b); }
  static __device__ __forceinline__ T min(T a, T b) { return a < b ? a : b; }
  static __device__ __forceinline__ T max(T a, T b) { return a > b ? a : b; }
  static __device__ __forceinline__ T div(T a, uint64_t d) {
    if (SIGNED) {
      int64_t sd = d > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)d;
      return (T)((int64_t)a / sd);
    }
    return (T)((uint64_t)a / d);
  }
};
typedef int_ops<int8_t, uint8_t, true> ops_i8;
typedef int_ops<uint8_t, uint8_t, false> ops_u8;
typedef int_ops<int32_t, uint32_t, true> ops_i32;
typedef int_ops<uint32_t, uint32_t, false> ops_u32;
typedef int_ops<int64_t, uint64_t, true> ops_i64;
typedef int_ops<uint64_t, uint64_t, false> ops_u64;

struct ops_f32 {
  typedef float elem_t;
  static __device__ __forceinline__ float from_bits(uint64_t b) {
    return __uint_as_float((uint32_t)b);
  }
  static __device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
  static __device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
  static __device__ __forceinline__ float min(float a, float b) {
    return (b != b || a < b) ? a : b;
  }
  static __device__ __forceinline__ float max(float a, float b) {
    return (b != b || a > b) ? a : b;
  }
  static __device__ __forceinline__ float div(float a, uint64_t d) {
    return __fdiv_rn(a, __ull2float_rn(d));
  }
};

struct ops_f64 {
  typedef double elem_t;
  static __device__ __forceinline__ double from_bits(uint64_t b) {
    return __longlong_as_double((long long)b);
  }
  static __device__ __forceinline__ double add(double a, double b) { return __dadd_rn(a, b); }
  static __device__ __forceinline__ double mul(double a, double b) { return __dmul_rn(a, b); }
  static __device__ __forceinline__ double min(double a, double b) {
    return (b != b || a < b) ? a : b;
  }
  static __device__ __forceinline__ double max(double a, double b) {
    return (b != b || a > b) ? a : b;
  }
  static __device__ __forceinline__ double div(double a, uint64_t d) {
    return __ddiv_rn(a, __ull2double_rn(d));
  }
};

/* Low precision: storage S, computed in float through C::to / C::from. MIN/MAX pass the chosen
 * input's bits through unchanged. */
template <typename S, typename C>
struct lowp_ops {
  typedef S elem_t;
  static __device__ __forceinline__ S from_bits(uint64_t b) { return (S)b; }
  static __device__ __forceinline__ S add(S a, S b) {
    return C::from(__fadd_rn(C::to(a), C::to(b)));
  }
  static __device__ __forceinline__ S mul(S a, S b) {
    return C::from(__fmul_rn(C::to(a), C::to(b)));
  }
  static __device__ __forceinline__ S min(S a, S b) {
    float x = C::to(a), y = C::to(b);
    return (y != y || x < y) ? a : b;
  }
  static __device__ __forceinline__ S max(S a, S b) {
    float x = C::to(a), y = C::to(b);
    return (y != y || x > y) ? a : b;
  }
  static __device__ __forceinline__ S div(S a, uint64_t d) {
    return C::from(__fdiv_rn(C::to(a), __ull2float_rn(d)));
  }
};

struct conv_f16 {
  static __device__ __forceinline__ float to(uint16_t v) {
    return __half2float(__ushort_as_half(v));
  }
  static __device__ __forceinline__ uint16_t from(float f) {
    return __half_as_ushort(__float2half_rn(f));
  }
};
struct conv_bf16 {
  static __device__ __forceinline__ float to(uint16_t v) {
    return __uint_as_float((uint32_t)v << 16);
  }
  static __device__ __forceinline__ uint16_t from(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
};
template <__nv_fp8_interpretation_t K>
struct conv_fp8 {
  static __device__ __forceinline__ float to(uint8_t v) {
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)v, K);
    return __half2float(__ushort_as_half(h.x));
  }
  static __device__ __forceinline__ uint8_t from(float f) {
    return (uint8_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, K);
  }
};
typedef lowp_ops<uint16_t, conv_f16> ops_f16;
typedef lowp_ops<uint16_t, conv_bf16> ops_bf16;
typedef lowp_ops<uint8_t, conv_fp8<__NV_E4M3>> ops_e4m3;
typedef lowp_ops<uint8_t, conv_fp8<__NV_E5M2>> ops_e5m2;

/* ---- The step's combining rules on one element ---------------------------------------------- */
template <typename O, int OP>
struct rules {
  typedef typename O::elem_t T;
  /* a rank's own contribution alone */
  static __device__ __forceinline__ T first(T a, T s) {
    return OP == DEV_OP_PREMULSUM ? O::mul(a, s) : a;
  }
  /* a rank's own contribution (op) the first received partial result */
  static __device__ __forceinline__ T first2(T a, T b, T s) {
    switch (OP) {
      case DEV_OP_PROD:
        return O::mul(a, b);
      case DEV_OP_MIN:
        return O::min(a, b);
      case DEV_OP_MAX:
        return O::max(a, b);
      case DEV_OP_PREMULSUM:
        return O::add(O::mul(a, s), b);
      default:
        return O::add(a, b);
    }
  }
  /* two partial results */
  static __device__ __forceinline__ T partial(T a, T b) {
    switch (OP) {
      case DEV_OP_PROD:
        return O::mul(a, b);
      case DEV_OP_MIN:
        return O::min(a, b);
      case DEV_OP_MAX:
        return O::max(a, b);
      default:
        return O::add(a, b);
    }
  }
};

/* 16 bytes seen as elements. */
template <typename T>
union pack16 {
  uint4 u;
  T e[16 / sizeof(T)];
};

template <typename O, int OP>
struct vrules {
  typedef typename O::elem_t T;
  typedef rules<O, OP> R;
  enum { N = 16 / sizeof(T) };
  static __device__ __forceinline__ uint4 first(uint4 a, T s) {
    if (OP != DEV_OP_PREMULSUM) return a;
    pack16<T> x;
    x.u = a;
#pragma unroll
    for (int i = 0; i < N; i++) x.e[i] = R::first(x.e[i], s);
    return x.u;
  }
  static __device__ __forceinline__ uint4 first2(uint4 a, uint4 b, T s) {
    pack16<T> x, y;
    x.u = a;
    y.u = b;
#pragma unroll
    for (int i = 0; i < N; i++) x.e[i] = R::first2(x.e[i], y.e[i], s);
    return x.u;
  }
  static __device__ __forceinline__ uint4 partial(uint4 a, uint4 b) {
    pack16<T> x, y;
    x.u = a;
    y.u = b;
#pragma unroll
    for (int i = 0; i < N; i++) x.e[i] = R::partial(x.e[i], y.e[i]);
    return x.u;
  }
};

/* The vector a thread moves in round rd, slot u (of U), in a group of nth threads (a multiple of
 * 32): strided, thread t of n takes t, t + n, ... t + (U - 1) n, so one instruction of a warp
 * covers 512 contiguous bytes; a round covers nth * U vectors. (Warp hunks, stock's order, lost
 * the A/B of docs/gpu-results.md run 27 on Broadcast and AllReduce; that build knob is gone.) */
template <int U>
static __device__ __forceinline__ size_t vec_at(size_t rd, int u, int tid, int nth) {
  return rd * (size_t)nth * U + (size_t)u * nth + (size_t)tid;
}

/* x[u] stored at vector idx[u] (where in[u]) of every destination: d0 and d1 (the first two, in
 * registers; d1 only when ndst > 1), then dst[2 ..] read from the descriptor once each. */
template <typename V, int U>
static __device__ __forceinline__ void vec_store(const V (&x)[U], const size_t (&idx)[U],
                                                 const bool (&in)[U], V* d0, V* d1,
                                                 char* const* dst, int ndst) {
#pragma unroll
  for (int u = 0; u < U; u++)
    if (in[u]) d0[idx[u]] = x[u];
  if (ndst > 1) {
#pragma unroll
    for (int u = 0; u < U; u++)
      if (in[u]) d1[idx[u]] = x[u];
  }
  for (int d = 2; d < ndst; d++) {
    V* dd = reinterpret_cast<V*>(dst[d]);
#pragma unroll
    for (int u = 0; u < U; u++)
      if (in[u]) dd[idx[u]] = x[u];
  }
}

/* ---- One step's reduction over memory -------------------------------------------------------
 * dst[d] = combine(src) for every d. The sources: the local data first when has_local, then the
 * received slots (or staged lines). SUMPOSTDIV's division is not here: reduce_step (prims) sums,
 * then divides the step's output once (postdiv). */
#define RC_MAX (1 + TREE_MAX_CHILDREN)
struct rc_args {
  const char* src[RC_MAX];
  char* dst[RC_MAX];
  int nsrc, ndst;
  bool has_local;
  size_t nelem;
};

template <typename T>
static __device__ __forceinline__ T load_elem(const char* p, size_t i) {
  return reinterpret_cast<const T*>(p)[i];
}
template <typename T>
static __device__ __forceinline__ void store_elem(char* p, size_t i, T v) {
  reinterpret_cast<T*>(p)[i] = v;
}

/* U vectors of every source combined and stored to every destination, at the vector indexes
 * vec_at<U>(rd, u, ...) (CHECKED: only those below nvec). The first two sources and destinations
 * come in registers; further ones are read from the descriptor once per call (a tree's or a
 * one-shot's extra peers), so no pointer is reloaded from shared memory per vector. */
template <typename O, int OP, int U, bool CHECKED>
static __device__ __forceinline__ void rc_vectors(const rc_args& a, const uint4* s0,
                                                  const uint4* s1, uint4* d0, uint4* d1, int nsrc,
                                                  int ndst, int first_rest, typename O::elem_t s,
                                                  size_t rd, size_t nvec, int tid, int nth) {
  typedef vrules<O, OP> V;
  size_t idx[U];
  bool in[U];
#pragma unroll
  for (int u = 0; u < U; u++) {
    idx[u] = vec_at<U>(rd, u, tid, nth);
    in[u] = !CHECKED || idx[u] < nvec;
  }
  uint4 x[U];
#pragma unroll
  for (int u = 0; u < U; u++) x[u] = in[u] ? s0[idx[u]] : make_uint4(0, 0, 0, 0);
  if (a.has_local) {
    if (nsrc > 1) {
      uint4 y[U];
#pragma unroll
      for (int u = 0; u < U; u++) y[u] = in[u] ? s1[idx[u]] : make_uint4(0, 0, 0, 0);
#pragma unroll
      for (int u = 0; u < U; u++) x[u] = V::first2(x[u], y[u], s);
    } else {
#pragma unroll
      for (int u = 0; u < U; u++) x[u] = V::first(x[u], s);
    }
  }
  for (int k = first_rest; k < nsrc; k++) {
    const uint4* sk = k == 1 ? s1 : reinterpret_cast<const uint4*>(a.src[k]);
    uint4 y[U];
#pragma unroll
    for (int u = 0; u < U; u++) y[u] = in[u] ? sk[idx[u]] : make_uint4(0, 0, 0, 0);
#pragma unroll
    for (int u = 0; u < U; u++) x[u] = V::partial(x[u], y[u]);
  }
  vec_store<uint4, U>(x, idx, in, d0, d1, a.dst, ndst);
}

template <typename O, int OP>
static __device__ __noinline__ void rc_impl(const rc_args& a, const int ndst, const red_t r,
                                            int tid, int nth) {
  typedef typename O::elem_t T;
  typedef rules<O, OP> R;
  if (ndst <= 0) return;
  const T s = O::from_bits(r.scalar);
  const int nsrc = a.nsrc;
  const size_t nelem = a.nelem;
  const size_t nbytes = nelem * sizeof(T);
  uintptr_t align = 0;
  for (int i = 0; i < nsrc; i++) align |= (uintptr_t)a.src[i];
  for (int i = 0; i < ndst; i++) align |= (uintptr_t)a.dst[i];
  const size_t nvec = (align & 15) == 0 ? nbytes / 16 : 0;
  const int first_rest = a.has_local && nsrc > 1 ? 2 : 1;
  const uint4* s0 = reinterpret_cast<const uint4*>(a.src[0]);
  const uint4* s1 = reinterpret_cast<const uint4*>(nsrc > 1 ? a.src[1] : a.src[0]);
  uint4* d0 = reinterpret_cast<uint4*>(a.dst[0]);
  uint4* d1 = reinterpret_cast<uint4*>(ndst > 1 ? a.dst[1] : a.dst[0]);

  /* 16-byte vectors, U per thread in flight (fewer for the narrow types, whose conversions and
   * element counts make the unrolled code large): whole rounds unchecked, then what is left */
  enum {
    U = sizeof(T) >= 4   ? CUDA_EXEC_UNROLL
        : sizeof(T) == 2 ? (CUDA_EXEC_UNROLL + 1) / 2
                         : (CUDA_EXEC_UNROLL + 3) / 4
  };
  const size_t full = dev_udiv(nvec, (size_t)nth * U);
  for (size_t rd = 0; rd < full; rd++)
    rc_vectors<O, OP, U, false>(a, s0, s1, d0, d1, nsrc, ndst, first_rest, s, rd, nvec, tid, nth);
  /* the last partial round a vector a thread (round j of one vector is vectors j * nth ..) */
  for (size_t j = full * U; j * (size_t)nth < nvec; j++)
    rc_vectors<O, OP, 1, true>(a, s0, s1, d0, d1, nsrc, ndst, first_rest, s, j, nvec, tid, nth);

  /* the rest element by element (all of it when a pointer is not 16-byte aligned) */
  for (size_t i = nvec * (16 / sizeof(T)) + (size_t)tid; i < nelem; i += (size_t)nth) {
    T x = load_elem<T>(a.src[0], i);
    if (a.has_local) x = nsrc > 1 ? R::first2(x, load_elem<T>(a.src[1], i), s) : R::first(x, s);
    for (int k = first_rest; k < nsrc; k++) x = R::partial(x, load_elem<T>(a.src[k], i));
    for (int d = 0; d < ndst; d++) store_elem<T>(a.dst[d], i, x);
  }
}

/* SUM, PROD and PREMULSUM give the same bits on signed and unsigned integers of one width (they
 * wrap): S is the signed type's ops, U the unsigned one's (the same ops for the other types).
 * SUMPOSTDIV sums here. */
template <typename S, typename U = S>
static __device__ void rc_op(const rc_args& a, int ndst, const red_t& r, int tid, int nth) {
  switch (r.op) {
    case DEV_OP_PROD:
      rc_impl<U, DEV_OP_PROD>(a, ndst, r, tid, nth);
      break;
    case DEV_OP_MIN:
      rc_impl<S, DEV_OP_MIN>(a, ndst, r, tid, nth);
      break;
    case DEV_OP_MAX:
      rc_impl<S, DEV_OP_MAX>(a, ndst, r, tid, nth);
      break;
    case DEV_OP_PREMULSUM:
      rc_impl<U, DEV_OP_PREMULSUM>(a, ndst, r, tid, nth);
      break;
    default:
      rc_impl<U, DEV_OP_SUM>(a, ndst, r, tid, nth);
      break;
  }
}

/* The reduction of one step by the calling group (tid < nth). */
/* dst[0 .. ndst) = combine(src): ndst may be below a.ndst (SUMPOSTDIV writes dst[0] first). */
static __device__ __noinline__ void reduce_copy(const rc_args& a, int ndst, const red_t& r, int tid,
                                                int nth) {
  switch (r.dtype) {
    case ncclInt8:
      rc_op<ops_i8, ops_u8>(a, ndst, r, tid, nth);
      break;
    case ncclUint8:
      rc_op<ops_u8, ops_u8>(a, ndst, r, tid, nth);
      break;
    case ncclInt32:
      rc_op<ops_i32, ops_u32>(a, ndst, r, tid, nth);
      break;
    case ncclUint32:
      rc_op<ops_u32, ops_u32>(a, ndst, r, tid, nth);
      break;
    case ncclInt64:
      rc_op<ops_i64, ops_u64>(a, ndst, r, tid, nth);
      break;
    case ncclUint64:
      rc_op<ops_u64, ops_u64>(a, ndst, r, tid, nth);
      break;
    case ncclFloat16:
      rc_op<ops_f16>(a, ndst, r, tid, nth);
      break;
    case ncclFloat32:
      rc_op<ops_f32>(a, ndst, r, tid, nth);
      break;
    case ncclFloat64:
      rc_op<ops_f64>(a, ndst, r, tid, nth);
      break;
    case ncclBfloat16:
      rc_op<ops_bf16>(a, ndst, r, tid, nth);
      break;
    case ncclFloat8e4m3:
      rc_op<ops_e4m3>(a, ndst, r, tid, nth);
      break;
    default:
      rc_op<ops_e5m2>(a, ndst, r, tid, nth);
      break;
  }
}

/* ---- SUMPOSTDIV: the final result divided in place, once ------------------------------------ */
template <typename O>
static __device__ __noinline__ void postdiv_impl(char* p, size_t n, uint64_t d, int tid, int nth) {
  typedef typename O::elem_t T;
  for (size_t i = (size_t)tid; i < n; i += (size_t)nth)
    store_elem<T>(p, i, O::div(load_elem<T>(p, i), d));
}

static __device__ __noinline__ void postdiv(char* p, size_t n, const red_t& r, int tid, int nth) {
  switch (r.dtype) {
    case ncclInt8:
      postdiv_impl<ops_i8>(p, n, r.div, tid, nth);
      break;
    case ncclUint8:
      postdiv_impl<ops_u8>(p, n, r.div, tid, nth);
      break;
    case ncclInt32:
      postdiv_impl<ops_i32>(p, n, r.div, tid, nth);
      break;
    case ncclUint32:
      postdiv_impl<ops_u32>(p, n, r.div, tid, nth);
      break;
    case ncclInt64:
      postdiv_impl<ops_i64>(p, n, r.div, tid, nth);
      break;
    case ncclUint64:
      postdiv_impl<ops_u64>(p, n, r.div, tid, nth);
      break;
    case ncclFloat16:
      postdiv_impl<ops_f16>(p, n, r.div, tid, nth);
      break;
    case ncclFloat32:
      postdiv_impl<ops_f32>(p, n, r.div, tid, nth);
      break;
    case ncclFloat64:
      postdiv_impl<ops_f64>(p, n, r.div, tid, nth);
      break;
    case ncclBfloat16:
      postdiv_impl<ops_bf16>(p, n, r.div, tid, nth);
      break;
    case ncclFloat8e4m3:
      postdiv_impl<ops_e4m3>(p, n, r.div, tid, nth);
      break;
    default:
      postdiv_impl<ops_e5m2>(p, n, r.div, tid, nth);
      break;
  }
}

}  // namespace baton

#endif /* BATON_DEVICE_CUDA_REDUCE_DEVICE_CUH */
