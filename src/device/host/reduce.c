/* Host reductions: the element-wise arithmetic of the host executor, for every ncclDataType_t and
 * every dev_op_kind_t. Pure functions over memory; no I/O, no allocation.
 *
 * Semantics (those of stock NCCL's kernels):
 *  - integers wrap (arithmetic is done on the unsigned type of the same width); MIN/MAX compare
 *    with the type's own signedness;
 *  - float and double operate in their own precision; MIN/MAX return the other operand when one is
 *    NaN (like fminf/fmaxf);
 *  - half, bfloat16 and the two fp8 types are converted to float, operated on, and rounded back to
 *    the type (nearest even; fp8 saturates to its largest finite value like stock's satfinite);
 *  - PREMULSUM multiplies a rank's own contribution by the scalar when it is first loaded, and
 *    rounds that product to the type, then sums;
 *  - SUMPOSTDIV sums; host_postop divides the final result by the count (C division: truncation
 *    toward zero, signed types divide as signed).
 * The dispatch on type and operation happens once per call; each (type, operation) pair is one
 * plain loop that the compiler can vectorize. */
/* At -O2, gcc (12+) uses its "very cheap" vectorizer cost model, which never versions a loop for
 * possible aliasing (dst may alias an input here), and it will not if-convert a float operation
 * that "could trap" (the conversions compute both paths and select). Nothing here reads floating
 * point exception flags, so ask for the usual cost model and no trapping math. fp-contract=off:
 * PREMULSUM rounds the product before the sum, as stock does; a fused multiply-add (which gnu11
 * would allow where the target has one) would not. These must come before any inline function is
 * seen (gcc does not inline across different settings). */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-vectorize", "vect-cost-model=dynamic", "no-trapping-math", \
                     "fp-contract=off")
#else
#pragma STDC FP_CONTRACT OFF
#endif
#include "base/base.h"
#include "device/device.h"
#include "device/host/reduce_types.h"

/* What one loop does; chosen from the operation and from whether there is a second input. */
typedef enum {
  RK_COPY,      /* dst = a */
  RK_SCALE,     /* dst = a * s            (PREMULSUM, own contribution only) */
  RK_PREMULSUM, /* dst = (a * s) + b */
  RK_SUM,       /* dst = a + b            (SUM, SUMPOSTDIV, and partials of PREMULSUM) */
  RK_PROD,
  RK_MIN,
  RK_MAX,
} reduce_kind_t;

static void copy_bytes(void* dst, const void* src, size_t bytes) {
  if (dst != src) memmove(dst, src, bytes);
}

/* ---- Integers: T is the element type, U the unsigned type of the same width ------------------ */
#define DEFINE_INT_REDUCE(fn, T, U)                                                    \
  static void fn(T* dst, const T* a, const T* b, size_t n, reduce_kind_t k, T s) {     \
    switch (k) {                                                                       \
      case RK_COPY:                                                                    \
        copy_bytes(dst, a, n * sizeof(T));                                             \
        break;                                                                         \
      case RK_SCALE:                                                                   \
        for (size_t i = 0; i < n; i++) dst[i] = (T)(U)((U)a[i] * (U)s);                \
        break;                                                                         \
      case RK_PREMULSUM:                                                               \
        for (size_t i = 0; i < n; i++) dst[i] = (T)(U)((U)((U)a[i] * (U)s) + (U)b[i]); \
        break;                                                                         \
      case RK_SUM:                                                                     \
        for (size_t i = 0; i < n; i++) dst[i] = (T)(U)((U)a[i] + (U)b[i]);             \
        break;                                                                         \
      case RK_PROD:                                                                    \
        for (size_t i = 0; i < n; i++) dst[i] = (T)(U)((U)a[i] * (U)b[i]);             \
        break;                                                                         \
      case RK_MIN:                                                                     \
        for (size_t i = 0; i < n; i++) {                                               \
          T x = a[i], y = b[i];                                                        \
          dst[i] = x < y ? x : y;                                                      \
        }                                                                              \
        break;                                                                         \
      case RK_MAX:                                                                     \
        for (size_t i = 0; i < n; i++) {                                               \
          T x = a[i], y = b[i];                                                        \
          dst[i] = x > y ? x : y;                                                      \
        }                                                                              \
        break;                                                                         \
    }                                                                                  \
  }

DEFINE_INT_REDUCE(reduce_i8, int8_t, uint8_t)
DEFINE_INT_REDUCE(reduce_u8, uint8_t, uint8_t)
DEFINE_INT_REDUCE(reduce_i32, int32_t, uint32_t)
DEFINE_INT_REDUCE(reduce_u32, uint32_t, uint32_t)
DEFINE_INT_REDUCE(reduce_i64, int64_t, uint64_t)
DEFINE_INT_REDUCE(reduce_u64, uint64_t, uint64_t)

/* ---- float and double ------------------------------------------------------------------------
 * MIN/MAX: (y is NaN || x < y) ? x : y is fminf's choice, written so that it vectorizes. */
#define DEFINE_FLOAT_REDUCE(fn, T)                                                 \
  static void fn(T* dst, const T* a, const T* b, size_t n, reduce_kind_t k, T s) { \
    switch (k) {                                                                   \
      case RK_COPY:                                                                \
        copy_bytes(dst, a, n * sizeof(T));                                         \
        break;                                                                     \
      case RK_SCALE:                                                               \
        for (size_t i = 0; i < n; i++) dst[i] = a[i] * s;                          \
        break;                                                                     \
      case RK_PREMULSUM:                                                           \
        for (size_t i = 0; i < n; i++) {                                           \
          T scaled = a[i] * s;                                                     \
          dst[i] = scaled + b[i];                                                  \
        }                                                                          \
        break;                                                                     \
      case RK_SUM:                                                                 \
        for (size_t i = 0; i < n; i++) dst[i] = a[i] + b[i];                       \
        break;                                                                     \
      case RK_PROD:                                                                \
        for (size_t i = 0; i < n; i++) dst[i] = a[i] * b[i];                       \
        break;                                                                     \
      case RK_MIN:                                                                 \
        for (size_t i = 0; i < n; i++) {                                           \
          T x = a[i], y = b[i];                                                    \
          dst[i] = (y != y || x < y) ? x : y;                                      \
        }                                                                          \
        break;                                                                     \
      case RK_MAX:                                                                 \
        for (size_t i = 0; i < n; i++) {                                           \
          T x = a[i], y = b[i];                                                    \
          dst[i] = (y != y || x > y) ? x : y;                                      \
        }                                                                          \
        break;                                                                     \
    }                                                                              \
  }

DEFINE_FLOAT_REDUCE(reduce_f32, float)
DEFINE_FLOAT_REDUCE(reduce_f64, double)

/* ---- Low precision: storage type S, computed in float through TO_F / FROM_F --------------------
 * MIN/MAX pick one of the two inputs, so their bits pass through unchanged. */
#define DEFINE_LOWP_REDUCE(fn, S, TO_F, FROM_F)                                    \
  static void fn(S* dst, const S* a, const S* b, size_t n, reduce_kind_t k, S s) { \
    const float fs = TO_F(s);                                                      \
    switch (k) {                                                                   \
      case RK_COPY:                                                                \
        copy_bytes(dst, a, n * sizeof(S));                                         \
        break;                                                                     \
      case RK_SCALE:                                                               \
        for (size_t i = 0; i < n; i++) dst[i] = FROM_F(TO_F(a[i]) * fs);           \
        break;                                                                     \
      case RK_PREMULSUM:                                                           \
        for (size_t i = 0; i < n; i++) {                                           \
          float scaled = TO_F(FROM_F(TO_F(a[i]) * fs));                            \
          dst[i] = FROM_F(scaled + TO_F(b[i]));                                    \
        }                                                                          \
        break;                                                                     \
      case RK_SUM:                                                                 \
        for (size_t i = 0; i < n; i++) dst[i] = FROM_F(TO_F(a[i]) + TO_F(b[i]));   \
        break;                                                                     \
      case RK_PROD:                                                                \
        for (size_t i = 0; i < n; i++) dst[i] = FROM_F(TO_F(a[i]) * TO_F(b[i]));   \
        break;                                                                     \
      case RK_MIN:                                                                 \
        for (size_t i = 0; i < n; i++) {                                           \
          S p = a[i], q = b[i];                                                    \
          float x = TO_F(p), y = TO_F(q);                                          \
          dst[i] = (y != y || x < y) ? p : q;                                      \
        }                                                                          \
        break;                                                                     \
      case RK_MAX:                                                                 \
        for (size_t i = 0; i < n; i++) {                                           \
          S p = a[i], q = b[i];                                                    \
          float x = TO_F(p), y = TO_F(q);                                          \
          dst[i] = (y != y || x > y) ? p : q;                                      \
        }                                                                          \
        break;                                                                     \
    }                                                                              \
  }

DEFINE_LOWP_REDUCE(reduce_f16, uint16_t, rt_half_to_float, rt_float_to_half)
DEFINE_LOWP_REDUCE(reduce_bf16, uint16_t, rt_bf16_to_float, rt_float_to_bf16)
DEFINE_LOWP_REDUCE(reduce_e4m3, uint8_t, rt_e4m3_to_float, rt_float_to_e4m3)
DEFINE_LOWP_REDUCE(reduce_e5m2, uint8_t, rt_e5m2_to_float, rt_float_to_e5m2)

/* ---- Dispatch ------------------------------------------------------------------------------- */
uint64_t host_scalar_bits(const dev_redop_t* op, size_t size) {
  if (op->kind != DEV_OP_PREMULSUM) return 0;
  if (!op->scalar_on_device || op->scalar_ptr == NULL)
    return size >= 8 ? op->scalar : op->scalar & ((1ull << (8 * size)) - 1);
  switch (size) { /* read at run time from the user's memory, in the type's width */
    case 1: {
      uint8_t x;
      memcpy(&x, op->scalar_ptr, 1);
      return x;
    }
    case 2: {
      uint16_t x;
      memcpy(&x, op->scalar_ptr, 2);
      return x;
    }
    case 4: {
      uint32_t x;
      memcpy(&x, op->scalar_ptr, 4);
      return x;
    }
    default: {
      uint64_t x;
      memcpy(&x, op->scalar_ptr, 8);
      return x;
    }
  }
}

static float bits_to_f32(uint64_t bits) {
  return rt_bits_float((uint32_t)bits);
}

static double bits_to_f64(uint64_t bits) {
  double d;
  memcpy(&d, &bits, sizeof(d));
  return d;
}

static void reduce_dispatch(void* dst, const void* a, const void* b, size_t n, int dtype,
                            reduce_kind_t k, const dev_redop_t* op) {
  const bool scaled = k == RK_SCALE || k == RK_PREMULSUM;
  const uint64_t s = scaled ? host_scalar_bits(op, datatype_size((ncclDataType_t)dtype)) : 0;
  switch (dtype) {
    case ncclInt8:
      reduce_i8(dst, a, b, n, k, (int8_t)s);
      break;
    case ncclUint8:
      reduce_u8(dst, a, b, n, k, (uint8_t)s);
      break;
    case ncclInt32:
      reduce_i32(dst, a, b, n, k, (int32_t)s);
      break;
    case ncclUint32:
      reduce_u32(dst, a, b, n, k, (uint32_t)s);
      break;
    case ncclInt64:
      reduce_i64(dst, a, b, n, k, (int64_t)s);
      break;
    case ncclUint64:
      reduce_u64(dst, a, b, n, k, s);
      break;
    case ncclFloat16:
      reduce_f16(dst, a, b, n, k, (uint16_t)s);
      break;
    case ncclFloat32:
      reduce_f32(dst, a, b, n, k, bits_to_f32(s));
      break;
    case ncclFloat64:
      reduce_f64(dst, a, b, n, k, bits_to_f64(s));
      break;
    case ncclBfloat16:
      reduce_bf16(dst, a, b, n, k, (uint16_t)s);
      break;
    case ncclFloat8e4m3:
      reduce_e4m3(dst, a, b, n, k, (uint8_t)s);
      break;
    case ncclFloat8e5m2:
      reduce_e5m2(dst, a, b, n, k, (uint8_t)s);
      break;
    default:
      break; /* the planner only plans valid types */
  }
}

/* The loop that combines two values under op: PROD, MIN and MAX as such, every other operation
 * as a sum (SUM; SUMPOSTDIV, whose division comes later; PREMULSUM once the scalar is applied). */
static reduce_kind_t kind_of_pair(const dev_redop_t* op) {
  switch (op->kind) {
    case DEV_OP_PROD:
      return RK_PROD;
    case DEV_OP_MIN:
      return RK_MIN;
    case DEV_OP_MAX:
      return RK_MAX;
    default:
      return RK_SUM;
  }
}

void host_reduce(void* dst, const void* in_local, const void* in_remote, size_t n, int dtype,
                 const dev_redop_t* op) {
  /* PREMULSUM applies the scalar here, to the rank's own contribution, as it is first loaded. */
  const bool premul = op->kind == DEV_OP_PREMULSUM;
  reduce_kind_t k;
  if (in_remote == NULL)
    k = premul ? RK_SCALE : RK_COPY;
  else
    k = premul ? RK_PREMULSUM : kind_of_pair(op);
  reduce_dispatch(dst, in_local, in_remote, n, dtype, k, op);
}

void host_reduce_partials(void* dst, const void* a, const void* b, size_t n, int dtype,
                          const dev_redop_t* op) {
  reduce_dispatch(dst, a, b, n, dtype, b == NULL ? RK_COPY : kind_of_pair(op), op);
}

/* ---- SUMPOSTDIV's final division ------------------------------------------------------------ */
#define DEFINE_NATIVE_DIV(fn, T, D)                          \
  static void fn(T* buf, size_t n, D d) {                    \
    for (size_t i = 0; i < n; i++) buf[i] = (T)(buf[i] / d); \
  }
DEFINE_NATIVE_DIV(div_i8, int8_t, int64_t)
DEFINE_NATIVE_DIV(div_u8, uint8_t, uint64_t)
DEFINE_NATIVE_DIV(div_i32, int32_t, int64_t)
DEFINE_NATIVE_DIV(div_u32, uint32_t, uint64_t)
DEFINE_NATIVE_DIV(div_i64, int64_t, int64_t)
DEFINE_NATIVE_DIV(div_u64, uint64_t, uint64_t)
DEFINE_NATIVE_DIV(div_f32, float, float)
DEFINE_NATIVE_DIV(div_f64, double, double)

#define DEFINE_LOWP_DIV(fn, S, TO_F, FROM_F)                          \
  static void fn(S* buf, size_t n, float d) {                         \
    for (size_t i = 0; i < n; i++) buf[i] = FROM_F(TO_F(buf[i]) / d); \
  }
DEFINE_LOWP_DIV(div_f16, uint16_t, rt_half_to_float, rt_float_to_half)
DEFINE_LOWP_DIV(div_bf16, uint16_t, rt_bf16_to_float, rt_float_to_bf16)
DEFINE_LOWP_DIV(div_e4m3, uint8_t, rt_e4m3_to_float, rt_float_to_e4m3)
DEFINE_LOWP_DIV(div_e5m2, uint8_t, rt_e5m2_to_float, rt_float_to_e5m2)

void host_postop(void* buf, size_t n, int dtype, const dev_redop_t* op) {
  const uint64_t d = op->scalar;
  if (op->kind != DEV_OP_SUMPOSTDIV || d == 0 || d == 1) return; /* 0: nothing sane to do */
  /* no communicator has more than INT64_MAX ranks; clamping keeps signed division defined */
  const int64_t sd = d > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)d;
  switch (dtype) {
    case ncclInt8:
      div_i8(buf, n, sd);
      break;
    case ncclUint8:
      div_u8(buf, n, d);
      break;
    case ncclInt32:
      div_i32(buf, n, sd);
      break;
    case ncclUint32:
      div_u32(buf, n, d);
      break;
    case ncclInt64:
      div_i64(buf, n, sd);
      break;
    case ncclUint64:
      div_u64(buf, n, d);
      break;
    case ncclFloat16:
      div_f16(buf, n, (float)d);
      break;
    case ncclFloat32:
      div_f32(buf, n, (float)d);
      break;
    case ncclFloat64:
      div_f64(buf, n, (double)d);
      break;
    case ncclBfloat16:
      div_bf16(buf, n, (float)d);
      break;
    case ncclFloat8e4m3:
      div_e4m3(buf, n, (float)d);
      break;
    case ncclFloat8e5m2:
      div_e5m2(buf, n, (float)d);
      break;
    default:
      break;
  }
}

/* ---- Conversions (device.h) ----------------------------------------------------------------- */
float half_to_float(uint16_t h) {
  return rt_half_to_float(h);
}
uint16_t float_to_half(float f) {
  return rt_float_to_half(f);
}
float bf16_to_float(uint16_t b) {
  return rt_bf16_to_float(b);
}
uint16_t float_to_bf16(float f) {
  return rt_float_to_bf16(f);
}
float fp8e4m3_to_float(uint8_t v) {
  return rt_e4m3_to_float(v);
}
uint8_t float_to_fp8e4m3(float f) {
  return rt_float_to_e4m3(f);
}
float fp8e5m2_to_float(uint8_t v) {
  return rt_e5m2_to_float(v);
}
uint8_t float_to_fp8e5m2(float f) {
  return rt_float_to_e5m2(f);
}
