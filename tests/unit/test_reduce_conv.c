/* Host conversions between float and the low-precision types (half, bfloat16, fp8 e4m3 and e5m2,
 * exported by src/device/host/reduce.c through device.h): known bit patterns both ways, every
 * encoding exhaustively against the reference decoder of tests/common/ref_numbers.h (and back to
 * itself), and random floats and exact midpoints against the reference's nearest-even rounding.
 * Random inputs use a fresh seed per test, printed on failure (BATON_TEST_SEED=<n> replays one). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "device/device.h"
#include "ref_numbers.h"
#include "unit.h"

static unsigned long long test_seed;

static bool same_float(float got, double want) {
  return (isnan(got) && isnan(want)) || (got == want && !signbit(got) == !signbit(want));
}

/* One conversion pair per format, with the encoding widened to uint32_t. */
typedef struct conv {
  const char* name;
  float (*decode)(uint32_t bits);
  uint32_t (*encode)(float f);
} conv_t;
static float dec_half(uint32_t v) {
  return half_to_float((uint16_t)v);
}
static uint32_t enc_half(float f) {
  return float_to_half(f);
}
static float dec_bf16(uint32_t v) {
  return bf16_to_float((uint16_t)v);
}
static uint32_t enc_bf16(float f) {
  return float_to_bf16(f);
}
static float dec_e4m3(uint32_t v) {
  return fp8e4m3_to_float((uint8_t)v);
}
static uint32_t enc_e4m3(float f) {
  return float_to_fp8e4m3(f);
}
static float dec_e5m2(uint32_t v) {
  return fp8e5m2_to_float((uint8_t)v);
}
static uint32_t enc_e5m2(float f) {
  return float_to_fp8e5m2(f);
}
static const conv_t conv_half = {"half", dec_half, enc_half};
static const conv_t conv_bf16 = {"bf16", dec_bf16, enc_bf16};
static const conv_t conv_e4m3 = {"e4m3", dec_e4m3, enc_e4m3};
static const conv_t conv_e5m2 = {"e5m2", dec_e5m2, enc_e5m2};

typedef struct dec_case {
  const conv_t* c;
  uint32_t bits;
  double value;
} dec_case_t;

typedef struct enc_case {
  const conv_t* c;
  float value;
  uint32_t bits;
} enc_case_t;

/* clang-format off */
static const dec_case_t dec_cases[] = {
    {&conv_half, 0x0000, 0.0}, {&conv_half, 0x8000, -0.0}, {&conv_half, 0x7c00, INFINITY},
    {&conv_half, 0xfc00, -INFINITY}, {&conv_half, 0x7bff, 65504.0}, {&conv_half, 0xfbff, -65504.0},
    {&conv_half, 0x0001, 0x1p-24}, {&conv_half, 0x03ff, 1023 * 0x1p-24},
    {&conv_half, 0x0400, 0x1p-14}, {&conv_half, 0x3c00, 1.0}, {&conv_half, 0x3555, 0x1.554p-2},
    {&conv_half, 0x7e00, NAN}, {&conv_half, 0x7c01, NAN},
    {&conv_bf16, 0x0000, 0.0}, {&conv_bf16, 0x8000, -0.0}, {&conv_bf16, 0x7f80, INFINITY},
    {&conv_bf16, 0xff80, -INFINITY}, {&conv_bf16, 0x7f7f, 0x1.fep127},
    {&conv_bf16, 0x0001, 0x1p-133}, {&conv_bf16, 0x0080, 0x1p-126}, {&conv_bf16, 0x3f80, 1.0},
    {&conv_bf16, 0x7fc0, NAN}, {&conv_bf16, 0x7f81, NAN},
    {&conv_e4m3, 0x00, 0.0}, {&conv_e4m3, 0x80, -0.0}, {&conv_e4m3, 0x01, 0x1p-9},
    {&conv_e4m3, 0x07, 7 * 0x1p-9}, {&conv_e4m3, 0x08, 0x1p-6}, {&conv_e4m3, 0x38, 1.0},
    {&conv_e4m3, 0x3c, 1.5}, {&conv_e4m3, 0x7b, 352.0}, {&conv_e4m3, 0xfc, -384.0},
    {&conv_e4m3, 0x7e, 448.0}, {&conv_e4m3, 0xfe, -448.0}, {&conv_e4m3, 0x7f, NAN},
    {&conv_e4m3, 0xff, NAN},
    {&conv_e5m2, 0x00, 0.0}, {&conv_e5m2, 0x80, -0.0}, {&conv_e5m2, 0x01, 0x1p-16},
    {&conv_e5m2, 0x07, 0x1.cp-14}, {&conv_e5m2, 0x08, 0x1p-13}, {&conv_e5m2, 0x38, 0.5},
    {&conv_e5m2, 0x3c, 1.0}, {&conv_e5m2, 0x7b, 57344.0}, {&conv_e5m2, 0x7c, INFINITY},
    {&conv_e5m2, 0xfc, -INFINITY}, {&conv_e5m2, 0x7e, NAN}, {&conv_e5m2, 0xff, NAN},
};

static const enc_case_t enc_cases[] = {
    /* half: zeros, infinities, overflow (65520 is the tie between max and inf: to even, inf) */
    {&conv_half, 0.0f, 0x0000}, {&conv_half, -0.0f, 0x8000}, {&conv_half, INFINITY, 0x7c00},
    {&conv_half, -INFINITY, 0xfc00}, {&conv_half, 65504.0f, 0x7bff},
    {&conv_half, 65519.0f, 0x7bff}, {&conv_half, 65520.0f, 0x7c00}, {&conv_half, 1e6f, 0x7c00},
    {&conv_half, -1e6f, 0xfc00}, {&conv_half, -2.0f, 0xc000},
    /* half subnormals: 2^-25 is the tie between 0 and the smallest (to 0), 1.5 units to 2 */
    {&conv_half, 0x1p-24f, 0x0001}, {&conv_half, 0x1p-25f, 0x0000},
    {&conv_half, 0x1.000002p-25f, 0x0001}, {&conv_half, 0x1.8p-24f, 0x0002},
    {&conv_half, 0x1p-14f, 0x0400}, {&conv_half, 1e-10f, 0x0000}, {&conv_half, -1e-10f, 0x8000},
    /* half ties at 1: 1 + 1/2 ulp goes down to even, 1 + 3/2 ulp up to even */
    {&conv_half, 1.0f + 0x1p-11f, 0x3c00}, {&conv_half, 1.0f + 3 * 0x1p-11f, 0x3c02},
    {&conv_half, 1.0f + 0x1p-10f, 0x3c01},
    /* bf16: overflow (the tie above max goes to inf), ties, subnormals */
    {&conv_bf16, 0.0f, 0x0000}, {&conv_bf16, -0.0f, 0x8000}, {&conv_bf16, INFINITY, 0x7f80},
    {&conv_bf16, -INFINITY, 0xff80}, {&conv_bf16, 0x1.fep127f, 0x7f7f},
    {&conv_bf16, 0x1.ffp127f, 0x7f80}, {&conv_bf16, 3.4028235e38f, 0x7f80},
    {&conv_bf16, 1.0f + 0x1p-8f, 0x3f80}, {&conv_bf16, 1.0f + 3 * 0x1p-8f, 0x3f82},
    {&conv_bf16, 0x1.0102p0f, 0x3f81}, {&conv_bf16, 0x1p-133f, 0x0001},
    {&conv_bf16, 0x1p-134f, 0x0000}, {&conv_bf16, 0x1.8p-133f, 0x0002},
    {&conv_bf16, -1.0f, 0xbf80},
    /* e4m3: saturates (satfinite) to +-448 for overflow and infinity */
    {&conv_e4m3, 0.0f, 0x00}, {&conv_e4m3, -0.0f, 0x80}, {&conv_e4m3, 448.0f, 0x7e},
    {&conv_e4m3, 464.0f, 0x7e}, {&conv_e4m3, 1000.0f, 0x7e}, {&conv_e4m3, 1e9f, 0x7e},
    {&conv_e4m3, INFINITY, 0x7e}, {&conv_e4m3, -INFINITY, 0xfe}, {&conv_e4m3, -1e9f, 0xfe},
    /* e4m3 ties: 1.0625 down to even 1.0, 1.1875 up to even 1.25; subnormal unit 2^-9 */
    {&conv_e4m3, 1.0f, 0x38}, {&conv_e4m3, 1.0625f, 0x38}, {&conv_e4m3, 1.125f, 0x39},
    {&conv_e4m3, 1.1875f, 0x3a}, {&conv_e4m3, 1.375f, 0x3b}, {&conv_e4m3, 0x1p-9f, 0x01},
    {&conv_e4m3, 0x1p-10f, 0x00}, {&conv_e4m3, 0x1.8p-9f, 0x02}, {&conv_e4m3, 0x1p-16f, 0x00},
    /* e5m2: saturates to +-57344; 61440 is the tie above max */
    {&conv_e5m2, 0.0f, 0x00}, {&conv_e5m2, -0.0f, 0x80}, {&conv_e5m2, 448.0f, 0x5f},
    {&conv_e5m2, 464.0f, 0x5f}, {&conv_e5m2, 1000.0f, 0x64}, {&conv_e5m2, 57344.0f, 0x7b},
    {&conv_e5m2, 61440.0f, 0x7b}, {&conv_e5m2, 1e9f, 0x7b}, {&conv_e5m2, INFINITY, 0x7b},
    {&conv_e5m2, -INFINITY, 0xfb}, {&conv_e5m2, -1e9f, 0xfb},
    /* e5m2 ties: 1.125 down to even 1.0, 1.375 up to even 1.5; subnormal unit 2^-16 */
    {&conv_e5m2, 1.0f, 0x3c}, {&conv_e5m2, 1.0625f, 0x3c}, {&conv_e5m2, 1.125f, 0x3c},
    {&conv_e5m2, 1.1875f, 0x3d}, {&conv_e5m2, 1.375f, 0x3e}, {&conv_e5m2, 0x1p-9f, 0x18},
    {&conv_e5m2, 0x1p-10f, 0x14}, {&conv_e5m2, 0x1.8p-9f, 0x1a}, {&conv_e5m2, 0x1p-16f, 0x01},
    {&conv_e5m2, 0x1p-17f, 0x00}, {&conv_e5m2, 0x1.8p-16f, 0x02},
    {&conv_e5m2, 0x1.000002p-17f, 0x01},
};
/* clang-format on */

START_TEST(test_conversion_patterns) {
  for (size_t i = 0; i < sizeof(dec_cases) / sizeof(dec_cases[0]); i++) {
    const dec_case_t* d = &dec_cases[i];
    const float got = d->c->decode(d->bits);
    ck_assert_msg(same_float(got, d->value), "%s %#x -> %a, want %a", d->c->name, d->bits, got,
                  d->value);
  }
  for (size_t i = 0; i < sizeof(enc_cases) / sizeof(enc_cases[0]); i++) {
    const enc_case_t* e = &enc_cases[i];
    const uint32_t got = e->c->encode(e->value);
    ck_assert_msg(got == e->bits, "%a -> %s %#x, want %#x", e->value, e->c->name, got, e->bits);
  }
  /* NaN (either sign) stays NaN */
  const conv_t* convs[] = {&conv_half, &conv_bf16, &conv_e4m3, &conv_e5m2};
  for (int i = 0; i < 4; i++) {
    ck_assert_msg(isnan(convs[i]->decode(convs[i]->encode(NAN))), "%s: NaN lost", convs[i]->name);
    ck_assert_msg(isnan(convs[i]->decode(convs[i]->encode(-NAN))), "%s: -NaN lost", convs[i]->name);
  }
}
END_TEST

/* Every encoding decodes like the reference decoder and converts back to itself. */
START_TEST(test_conversions_exhaustive) {
  ref_fmts_init();
  for (uint32_t v = 0; v < 65536; v++) {
    const double h = ref_fmt_decode(&ref_fmt_half, v), b = ref_fmt_decode(&ref_fmt_bf16, v);
    ck_assert_msg(same_float(half_to_float((uint16_t)v), h), "half %#x", v);
    ck_assert_msg(same_float(bf16_to_float((uint16_t)v), b), "bf16 %#x", v);
    if (!isnan(h)) ck_assert_msg(float_to_half(half_to_float((uint16_t)v)) == v, "half rt %#x", v);
    if (!isnan(b)) ck_assert_msg(float_to_bf16(bf16_to_float((uint16_t)v)) == v, "bf16 rt %#x", v);
  }
  for (uint32_t v = 0; v < 256; v++) {
    const double e4 = ref_fmt_decode(&ref_fmt_e4m3, v), e5 = ref_fmt_decode(&ref_fmt_e5m2, v);
    ck_assert_msg(same_float(fp8e4m3_to_float((uint8_t)v), e4), "e4m3 %#x", v);
    ck_assert_msg(same_float(fp8e5m2_to_float((uint8_t)v), e5), "e5m2 %#x", v);
    if (!isnan(e4))
      ck_assert_msg(float_to_fp8e4m3(fp8e4m3_to_float((uint8_t)v)) == v, "e4m3 %#x", v);
    if (isfinite(e5))
      ck_assert_msg(float_to_fp8e5m2(fp8e5m2_to_float((uint8_t)v)) == v, "e5m2 %#x", v);
  }
}
END_TEST

/* Random floats, and exact midpoints between neighbours, round like the reference search. */
START_TEST(test_conversions_rounding) {
  test_seed = ref_rng_seed();
  ref_fmts_init();
  ref_fmt_t* fmts[4] = {&ref_fmt_half, &ref_fmt_bf16, &ref_fmt_e4m3, &ref_fmt_e5m2};
  for (int fi = 0; fi < 4; fi++) {
    ref_fmt_t* f = fmts[fi];
    const int maxexp = (int)ceil(log2(f->vals[f->nvals - 1])) + 1;
    const int minexp = 1 - f->bias - f->mbits - 2;
    for (int it = 0; it < 20000; it++) {
      float x;
      if (it % 2 == 0) { /* a random float within (and a bit beyond) the type's range */
        x = (float)ldexp(1.0 + (double)(ref_rng_next() >> 40) / 16777216.0,
                         ref_rng_int(minexp, maxexp));
      } else { /* a midpoint between two neighbours, possibly nudged by one float ulp */
        const int i = ref_rng_int(0, f->nvals - 2);
        x = (float)((f->vals[i] + f->vals[i + 1]) / 2);
        const int nudge = ref_rng_int(-1, 1);
        if (nudge) x = nextafterf(x, nudge > 0 ? INFINITY : 0.0f);
      }
      if (ref_rng_next() & 1) x = -x;
      const uint32_t want = ref_fmt_round(f, x);
      uint32_t got;
      if (f == &ref_fmt_half)
        got = float_to_half(x);
      else if (f == &ref_fmt_bf16)
        got = float_to_bf16(x);
      else if (f == &ref_fmt_e4m3)
        got = float_to_fp8e4m3(x);
      else
        got = float_to_fp8e5m2(x);
      ck_assert_msg(got == want, "%s: %a -> %#x, want %#x (seed %llu)", f->name, x, got, want,
                    test_seed);
    }
  }
}
END_TEST

/* A large buffer goes through quickly enough for a host executor (a loose bound, no timing
 * assertion beyond "finishes"), and the middle of the vector loops matches the reference. */

static Suite* reduce_conv_suite(void) {
  Suite* s = suite_create("reduce_conv");
  TCase* conv = tcase_create("conversions");
  tcase_add_test(conv, test_conversion_patterns);
  tcase_add_test(conv, test_conversions_exhaustive);
  tcase_add_test(conv, test_conversions_rounding);
  suite_add_tcase(s, conv);
  return s;
}

int main(void) {
  return unit_run_suite(reduce_conv_suite());
}
