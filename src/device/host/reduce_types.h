/* Private to src/device/host: inline conversions between float and the low-precision storage
 * types (half, bfloat16, fp8 e4m3, fp8 e5m2). reduce.c exports them through device.h; the inline
 * forms let the reduction loops convert without a call per element.
 *
 * Rounding is to nearest, ties to even, done on the bits of the float. Subnormal results use the
 * "add a power of two whose ulp is the target's subnormal unit" trick, which lets the FPU do the
 * rounding (the host runs with the default rounding mode and no flush-to-zero). Every path is
 * computed and one is selected, so loops over these vectorize; no path does arithmetic on float
 * subnormals (which costs a microcode assist per element on x86) unless the value itself is one. */
#ifndef BATON_DEVICE_HOST_REDUCE_TYPES_H
#define BATON_DEVICE_HOST_REDUCE_TYPES_H

#include <stdint.h>
#include <string.h>

static inline uint32_t rt_float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static inline float rt_bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* Magnitude bits (no sign) of a small float format with `mbits` mantissa bits and exponent bias
 * `bias`, for a finite non-negative float given by its bits `x`, rounded to nearest even. The
 * caller has handled NaN, infinity and values above the format's largest finite value. */
static inline uint32_t rt_round_minifloat(uint32_t x, int mbits, int bias) {
  const int shift = 23 - mbits;
  const uint32_t min_normal = (uint32_t)(127 + 1 - bias) << 23;
  /* subnormal result: magic = 2^k with ulp(magic) == the target's unit 2^(1 - bias - mbits) */
  const float magic = rt_bits_float((uint32_t)(127 + 1 - bias - mbits + 23) << 23);
  const uint32_t sub = rt_float_bits(rt_bits_float(x) + magic) - rt_float_bits(magic);
  /* normal result: rebias the exponent, add just under half an ulp plus the odd bit (ties even) */
  const uint32_t odd = (x >> shift) & 1u;
  const uint32_t norm =
      (x - ((uint32_t)(127 - bias) << 23) + ((1u << (shift - 1)) - 1u) + odd) >> shift;
  return x < min_normal ? sub : norm; /* both computed: a select, so loops vectorize */
}

/* ---- half (IEEE binary16: 1 sign, 5 exponent bits with bias 15, 10 mantissa bits) ---------- */
static inline float rt_half_to_float(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const uint32_t normal = (em << 13) + ((uint32_t)(127 - 15) << 23); /* rebias the exponent */
  const uint32_t sub = rt_float_bits((float)em * 0x1p-24f); /* exact, and never a float subnormal */
  const uint32_t special = 0x7f800000u | (em << 13);        /* inf or NaN, payload kept */
  return rt_bits_float(sign | (em >= 0x7c00u ? special : em >= 0x0400u ? normal : sub));
}

static inline uint16_t rt_float_to_half(float f) {
  const uint32_t u = rt_float_bits(f);
  const uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
  const uint32_t x = u & 0x7fffffffu;
  uint32_t r = rt_round_minifloat(x, 10, 15);
  r = x >= 0x477ff000u ? 0x7c00u : r;                         /* >= 65520 rounds to infinity */
  r = x > 0x7f800000u ? (0x7e00u | ((x >> 13) & 0x3ffu)) : r; /* NaN stays a (quiet) NaN */
  return (uint16_t)(sign | r);
}

/* ---- bfloat16 (the top half of a float) ---------------------------------------------------- */
static inline float rt_bf16_to_float(uint16_t b) {
  return rt_bits_float((uint32_t)b << 16);
}

static inline uint16_t rt_float_to_bf16(float f) {
  const uint32_t u = rt_float_bits(f);
  /* overflow carries into the exponent and ends at infinity, as it should */
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const uint32_t nan = (u >> 16) | 0x0040u; /* quiet NaN */
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

/* ---- fp8 e4m3 (OCP "fn": bias 7, 3 mantissa bits, no infinity, NaN = S.1111.111, max 448) --- */
#define RT_E4M3_MAX_BITS 0x43e00000u /* 448.0f */
static inline float rt_e4m3_to_float(uint8_t v) {
  const uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  const uint32_t em = v & 0x7fu;
  const uint32_t normal = (em << 20) + ((uint32_t)(127 - 7) << 23);
  const uint32_t sub = rt_float_bits((float)em * 0x1p-9f);
  return rt_bits_float(sign | (em == 0x7fu ? 0x7fc00000u : em >= 0x08u ? normal : sub));
}

static inline uint8_t rt_float_to_e4m3(float f) {
  const uint32_t u = rt_float_bits(f);
  const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  const uint32_t x = u & 0x7fffffffu;
  uint32_t r = rt_round_minifloat(x, 3, 7);
  r = x >= RT_E4M3_MAX_BITS ? 0x7eu : r; /* satfinite: infinity and overflow give +-448 */
  r = x > 0x7f800000u ? 0x7fu : r;       /* NaN */
  return (uint8_t)(sign | r);
}

/* ---- fp8 e5m2 (bias 15, 2 mantissa bits: the top byte of a half; max finite 57344) ---------- */
#define RT_E5M2_MAX_BITS 0x47600000u /* 57344.0f */
static inline float rt_e5m2_to_float(uint8_t v) {
  return rt_half_to_float((uint16_t)(v << 8));
}

static inline uint8_t rt_float_to_e5m2(float f) {
  const uint32_t u = rt_float_bits(f);
  const uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
  const uint32_t x = u & 0x7fffffffu;
  uint32_t r = rt_round_minifloat(x, 2, 15);
  r = x >= RT_E5M2_MAX_BITS ? 0x7bu : r; /* satfinite: infinity and overflow give +-57344 */
  r = x > 0x7f800000u ? 0x7fu : r;       /* NaN */
  return (uint8_t)(sign | r);
}

#endif /* BATON_DEVICE_HOST_REDUCE_TYPES_H */
