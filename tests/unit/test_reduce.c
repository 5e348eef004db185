/* Host reductions (src/device/host/reduce.c): every datatype x operation against a reference
 * computed here, independently: integers in 64-bit arithmetic reduced modulo the width, float in
 * double, double in long double, and the low-precision types decoded and rounded by the reference
 * formats of tests/common/ref_numbers.h. Also SUMPOSTDIV's division, integer and float edge cases,
 * aliasing of the output with an input, and a large buffer. The conversions themselves are tested
 * in test_reduce_conv.c. Random inputs use a fresh seed per test, printed on failure
 * (BATON_TEST_SEED=<n> replays one). */
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

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "load_raw/store_raw below assume a little-endian host"
#endif

static unsigned long long test_seed;

/* ---- Datatypes as the test sees them -------------------------------------------------------- */
typedef enum { TK_INT, TK_UINT, TK_FLOAT, TK_DOUBLE, TK_LOWP } tkind_t;
typedef struct tinfo {
  ncclDataType_t dt;
  const char* name;
  size_t size;
  tkind_t kind;
  ref_fmt_t* fmt;
} tinfo_t;

static const tinfo_t types[] = {
    {ncclInt8, "int8", 1, TK_INT, NULL},
    {ncclUint8, "uint8", 1, TK_UINT, NULL},
    {ncclInt32, "int32", 4, TK_INT, NULL},
    {ncclUint32, "uint32", 4, TK_UINT, NULL},
    {ncclInt64, "int64", 8, TK_INT, NULL},
    {ncclUint64, "uint64", 8, TK_UINT, NULL},
    {ncclFloat16, "half", 2, TK_LOWP, &ref_fmt_half},
    {ncclFloat32, "float", 4, TK_FLOAT, NULL},
    {ncclFloat64, "double", 8, TK_DOUBLE, NULL},
    {ncclBfloat16, "bf16", 2, TK_LOWP, &ref_fmt_bf16},
    {ncclFloat8e4m3, "e4m3", 1, TK_LOWP, &ref_fmt_e4m3},
    {ncclFloat8e5m2, "e5m2", 1, TK_LOWP, &ref_fmt_e5m2},
};
#define NTYPES ((int)(sizeof(types) / sizeof(types[0])))

static uint64_t width_mask(const tinfo_t* t) {
  return t->size == 8 ? ~0ull : (1ull << (8 * t->size)) - 1;
}

static int64_t as_signed(const tinfo_t* t, uint64_t raw) {
  const int shift = 64 - 8 * (int)t->size;
  return (int64_t)(raw << shift) >> shift;
}

/* Element i of a buffer as raw bits (the test runs on little-endian hosts). */
static uint64_t load_raw(const tinfo_t* t, const void* buf, size_t i) {
  const unsigned char* p = (const unsigned char*)buf + i * t->size;
  uint64_t v = 0;
  for (size_t k = 0; k < t->size; k++) v |= (uint64_t)p[k] << (8 * k);
  return v;
}

static void store_raw(const tinfo_t* t, void* buf, size_t i, uint64_t v) {
  unsigned char* p = (unsigned char*)buf + i * t->size;
  for (size_t k = 0; k < t->size; k++) p[k] = (unsigned char)(v >> (8 * k));
}

typedef union {
  uint32_t u;
  float f;
} f32_bits_t;
typedef union {
  uint64_t u;
  double f;
} f64_bits_t;
static double raw_f32(uint64_t raw) {
  return ((f32_bits_t){.u = (uint32_t)raw}).f;
}
static uint64_t f32_raw(float f) {
  return ((f32_bits_t){.f = f}).u;
}
static long double raw_f64(uint64_t raw) {
  return ((f64_bits_t){.u = raw}).f;
}
static uint64_t f64_raw(double d) {
  return ((f64_bits_t){.f = d}).u;
}

/* A floating value of the type as a double (long double for double). */
static long double value_of(const tinfo_t* t, uint64_t raw) {
  switch (t->kind) {
    case TK_FLOAT:
      return raw_f32(raw);
    case TK_DOUBLE:
      return raw_f64(raw);
    case TK_LOWP:
      return ref_fmt_decode(t->fmt, (uint32_t)raw);
    case TK_INT:
      return (long double)as_signed(t, raw);
    default:
      return (long double)raw;
  }
}

/* The value x rounded to the type, as raw bits. */
static uint64_t round_to(const tinfo_t* t, long double x) {
  switch (t->kind) {
    case TK_FLOAT:
      return f32_raw((float)x);
    case TK_DOUBLE:
      return f64_raw((double)x);
    default:
      return ref_fmt_round(t->fmt, (double)x);
  }
}

/* A random finite value of the type. Floats span 2^-20 .. 2^20 so that sums and products stay
 * finite; low-precision types use every finite encoding (overflow is part of the test). */
static uint64_t random_value(const tinfo_t* t) {
  switch (t->kind) {
    case TK_INT:
    case TK_UINT:
      return ref_rng_next() & width_mask(t);
    case TK_FLOAT: {
      const double m = (double)(ref_rng_next() >> 11) / 9007199254740992.0; /* [0, 1) */
      const float v = (float)ldexp(1.0 + m, ref_rng_int(-20, 20));
      return f32_raw(ref_rng_next() & 1 ? -v : v);
    }
    case TK_DOUBLE: {
      const double m = (double)(ref_rng_next() >> 11) / 9007199254740992.0;
      const double v = ldexp(1.0 + m, ref_rng_int(-20, 20));
      return f64_raw(ref_rng_next() & 1 ? -v : v);
    }
    default:
      for (;;) {
        const uint64_t raw = ref_rng_next() & width_mask(t);
        if (isfinite(ref_fmt_decode(t->fmt, (uint32_t)raw))) return raw;
      }
  }
}

/* ---- Reference operations ------------------------------------------------------------------ */
typedef enum { REF_COPY, REF_SCALE, REF_PREMUL, REF_SUM, REF_PROD, REF_MIN, REF_MAX } ref_op_t;
static const char* const ref_op_names[] = {"copy", "scale", "premulsum", "sum",
                                           "prod", "min",   "max"};

static uint64_t ref_int(const tinfo_t* t, ref_op_t k, uint64_t a, uint64_t b, uint64_t s) {
  const uint64_t mask = width_mask(t);
  const bool less = t->kind == TK_INT ? as_signed(t, a) < as_signed(t, b) : a < b;
  switch (k) {
    case REF_COPY:
      return a;
    case REF_SCALE:
      return (a * s) & mask;
    case REF_PREMUL:
      return (((a * s) & mask) + b) & mask;
    case REF_SUM:
      return (a + b) & mask;
    case REF_PROD:
      return (a * b) & mask;
    case REF_MIN:
      return less ? a : b;
    default:
      return less ? b : a;
  }
}

/* Floating reference: the exact result rounded to the type once per stock operation (the
 * PREMULSUM product is rounded to the type before the sum). */
static long double ref_float(const tinfo_t* t, ref_op_t k, uint64_t a, uint64_t b, uint64_t s) {
  const long double x = value_of(t, a), y = value_of(t, b), sc = value_of(t, s);
  switch (k) {
    case REF_COPY:
      return x;
    case REF_SCALE:
      return x * sc;
    case REF_PREMUL: /* the product rounded to the type once, as the type's own multiply does (a
                        double product taken through long double could be rounded twice) */
      if (t->kind == TK_DOUBLE) return (long double)((double)x * (double)sc) + y;
      return value_of(t, round_to(t, x * sc)) + y;
    case REF_SUM:
      return x + y;
    case REF_PROD:
      return x * y;
    case REF_MIN:
      return x < y ? x : y;
    default:
      return x > y ? x : y;
  }
}

/* Checks out[i] against the reference; returns false (after printing) on a mismatch. */
static bool check_elem(const tinfo_t* t, ref_op_t k, uint64_t a, uint64_t b, uint64_t s,
                       uint64_t got, const char* what, size_t i) {
  if (t->kind == TK_INT || t->kind == TK_UINT) {
    const uint64_t want = ref_int(t, k, a, b, s);
    if (got == want) return true;
    fprintf(stderr, "%s %s %s[%zu]: a=%#llx b=%#llx s=%#llx got %#llx want %#llx\n", what, t->name,
            ref_op_names[k], i, (unsigned long long)a, (unsigned long long)b, (unsigned long long)s,
            (unsigned long long)got, (unsigned long long)want);
    return false;
  }
  const long double exact = ref_float(t, k, a, b, s);
  const long double v = value_of(t, got);
  bool ok;
  if (t->kind == TK_DOUBLE && k != REF_COPY && k != REF_MIN && k != REF_MAX) {
    /* double: within one double rounding of the long double result (two for PREMULSUM) */
    ok = fabsl(v - exact) <= fabsl(exact) * 0x1p-52L * (k == REF_PREMUL ? 2 : 1);
  } else {
    const long double want = value_of(t, round_to(t, exact));
    ok = (isnan(want) && isnan(v)) || v == want;
  }
  if (!ok) {
    fprintf(stderr, "%s %s %s[%zu]: a=%#llx (%Lg) b=%#llx (%Lg) s=%#llx got %#llx (%Lg) want %Lg\n",
            what, t->name, ref_op_names[k], i, (unsigned long long)a, value_of(t, a),
            (unsigned long long)b, value_of(t, b), (unsigned long long)s, (unsigned long long)got,
            v, exact);
  }
  return ok;
}

/* ---- Every type x operation ----------------------------------------------------------------- */
enum { MODE_REDUCE, MODE_REDUCE_COPY, MODE_PARTIALS, MODE_COUNT };
static const char* const mode_names[] = {"host_reduce", "host_reduce(no remote)",
                                         "host_reduce_partials"};

static ref_op_t ref_op_for(int op, int mode) {
  if (mode == MODE_REDUCE_COPY) return op == DEV_OP_PREMULSUM ? REF_SCALE : REF_COPY;
  switch (op) {
    case DEV_OP_PROD:
      return REF_PROD;
    case DEV_OP_MIN:
      return REF_MIN;
    case DEV_OP_MAX:
      return REF_MAX;
    case DEV_OP_PREMULSUM:
      return mode == MODE_REDUCE ? REF_PREMUL : REF_SUM;
    default:
      return REF_SUM;
  }
}

START_TEST(test_every_type_and_op) {
  test_seed = ref_rng_seed();
  ref_fmts_init();
  const int ti = _i / DEV_OP_COUNT, op = _i % DEV_OP_COUNT;
  const tinfo_t* t = &types[ti];
  for (int mode = 0; mode < MODE_COUNT; mode++) {
    for (int on_device = 0; on_device < 2; on_device++) {
      const size_t n = (size_t)ref_rng_int(1, 1500);
      char* a = malloc(n * t->size);
      char* b = malloc(n * t->size);
      char* out = malloc(n * t->size);
      ck_assert(a && b && out);
      for (size_t i = 0; i < n; i++) {
        store_raw(t, a, i, random_value(t));
        store_raw(t, b, i, random_value(t));
        store_raw(t, out, i, ref_rng_next());
      }
      const uint64_t s = random_value(t);
      char scalar_mem[8];
      store_raw(t, scalar_mem, 0, s);
      dev_redop_t dop = {.kind = (uint8_t)op, .scalar = op == DEV_OP_SUMPOSTDIV ? 4 : s};
      if (on_device && op == DEV_OP_PREMULSUM) {
        dop.scalar_on_device = 1;
        dop.scalar = 0; /* must not be used */
        dop.scalar_ptr = scalar_mem;
      }
      if (mode == MODE_REDUCE)
        host_reduce(out, a, b, n, t->dt, &dop);
      else if (mode == MODE_REDUCE_COPY)
        host_reduce(out, a, NULL, n, t->dt, &dop);
      else
        host_reduce_partials(out, a, b, n, t->dt, &dop);
      const ref_op_t k = ref_op_for(op, mode);
      int bad = 0;
      for (size_t i = 0; i < n && bad < 5; i++) {
        if (!check_elem(t, k, load_raw(t, a, i), load_raw(t, b, i), s, load_raw(t, out, i),
                        mode_names[mode], i))
          bad++;
      }
      ck_assert_msg(bad == 0, "%s %s op %d (scalar %s): %d mismatches, seed %llu", mode_names[mode],
                    t->name, op, on_device ? "on device" : "immediate", bad, test_seed);
      free(a);
      free(b);
      free(out);
    }
  }
}
END_TEST

/* SUMPOSTDIV: the sum, then host_postop divides by the count (C division, truncating). */
START_TEST(test_sumpostdiv) {
  test_seed = ref_rng_seed();
  ref_fmts_init();
  const tinfo_t* t = &types[_i];
  const size_t n = (size_t)ref_rng_int(1, 1000);
  char* a = malloc(n * t->size);
  char* b = malloc(n * t->size);
  char* out = malloc(n * t->size);
  ck_assert(a && b && out);
  for (size_t i = 0; i < n; i++) {
    store_raw(t, a, i, random_value(t));
    store_raw(t, b, i, random_value(t));
  }
  const uint64_t d = (uint64_t)ref_rng_int(2, 64);
  const dev_redop_t dop = {.kind = DEV_OP_SUMPOSTDIV, .scalar = d};
  host_reduce(out, a, b, n, t->dt, &dop);
  host_postop(out, n, t->dt, &dop);
  int bad = 0;
  for (size_t i = 0; i < n; i++) {
    const uint64_t x = load_raw(t, a, i), y = load_raw(t, b, i), got = load_raw(t, out, i);
    bool ok;
    long double want;
    if (t->kind == TK_INT) {
      want = (long double)(as_signed(t, ref_int(t, REF_SUM, x, y, 0)) / (int64_t)d);
      ok = (long double)as_signed(t, got) == want;
    } else if (t->kind == TK_UINT) {
      want = (long double)(ref_int(t, REF_SUM, x, y, 0) / d);
      ok = (long double)got == want;
    } else if (t->kind == TK_DOUBLE) {
      /* within the two roundings (the sum's, then the quotient's) of the long double result: a
       * long double sum rounded to double is rounded twice, which can miss the double sum by an
       * ulp (seed 1087997679798331257) */
      want = (value_of(t, x) + value_of(t, y)) / (long double)d;
      ok = fabsl(value_of(t, got) - want) <= fabsl(want) * 0x1p-51L;
    } else {
      const long double sum = value_of(t, round_to(t, value_of(t, x) + value_of(t, y)));
      want = sum / (long double)d;
      ok = value_of(t, got) == value_of(t, round_to(t, want)) ||
           (isnan(want) && isnan(value_of(t, got)));
    }
    if (!ok && bad++ < 5)
      fprintf(stderr, "sumpostdiv %s[%zu]: %#llx + %#llx / %llu: got %#llx, want %Lg\n", t->name, i,
              (unsigned long long)x, (unsigned long long)y, (unsigned long long)d,
              (unsigned long long)got, want);
  }
  ck_assert_msg(bad == 0, "sumpostdiv %s: %d mismatches, seed %llu", t->name, bad, test_seed);
  free(a);
  free(b);
  free(out);
}
END_TEST

START_TEST(test_sumpostdiv_truncates) {
  int32_t v[4] = {-7, 7, -1, INT32_MIN};
  dev_redop_t dop = {.kind = DEV_OP_SUMPOSTDIV, .scalar = 2};
  host_postop(v, 4, ncclInt32, &dop);
  ck_assert_int_eq(v[0], -3);
  ck_assert_int_eq(v[1], 3);
  ck_assert_int_eq(v[2], 0);
  ck_assert_int_eq(v[3], INT32_MIN / 2);
  uint8_t u[2] = {255, 5};
  dop.scalar = 3;
  host_postop(u, 2, ncclUint8, &dop);
  ck_assert_uint_eq(u[0], 85);
  ck_assert_uint_eq(u[1], 1);
  int8_t s8[2] = {-128, 127};
  dop.scalar = 64;
  host_postop(s8, 2, ncclInt8, &dop);
  ck_assert_int_eq(s8[0], -2);
  ck_assert_int_eq(s8[1], 1);
  /* other operations leave the buffer alone */
  int64_t w[1] = {-9};
  const dev_redop_t sum = {.kind = DEV_OP_SUM, .scalar = 2};
  host_postop(w, 1, ncclInt64, &sum);
  ck_assert_int_eq(w[0], -9);
}
END_TEST

/* Integer edge cases by hand: wrapping and signed comparison. */
START_TEST(test_int_wrap_and_sign) {
  int8_t a[3] = {127, -128, -1}, b[3] = {1, -1, 1}, out[3];
  dev_redop_t dop = {.kind = DEV_OP_SUM};
  host_reduce(out, a, b, 3, ncclInt8, &dop);
  ck_assert_int_eq(out[0], -128);
  ck_assert_int_eq(out[1], 127);
  ck_assert_int_eq(out[2], 0);
  dop.kind = DEV_OP_MIN;
  host_reduce(out, a, b, 3, ncclInt8, &dop);
  ck_assert_int_eq(out[0], 1);
  ck_assert_int_eq(out[1], -128);
  ck_assert_int_eq(out[2], -1);
  uint32_t ua[2] = {0xffffffffu, 0x80000000u}, ub[2] = {1, 2}, uo[2];
  dop.kind = DEV_OP_MAX;
  host_reduce(uo, ua, ub, 2, ncclUint32, &dop);
  ck_assert_uint_eq(uo[0], 0xffffffffu);
  ck_assert_uint_eq(uo[1], 0x80000000u);
  dop.kind = DEV_OP_PROD;
  host_reduce(uo, ua, ub, 2, ncclUint32, &dop);
  ck_assert_uint_eq(uo[0], 0xffffffffu);
  ck_assert_uint_eq(uo[1], 0);
  int64_t la[1] = {INT64_MIN}, lb[1] = {-1}, lo[1];
  dop.kind = DEV_OP_SUM;
  host_reduce(lo, la, lb, 1, ncclInt64, &dop);
  ck_assert_int_eq(lo[0], INT64_MAX);
  dop.kind = DEV_OP_PREMULSUM;
  dop.scalar = 3;
  int32_t pa[1] = {5}, pb[1] = {-20}, po[1];
  host_reduce(po, pa, pb, 1, ncclInt32, &dop);
  ck_assert_int_eq(po[0], -5);
}
END_TEST

/* Float MIN/MAX treat NaN like fminf/fmaxf; half PREMULSUM by 1/n gives the average. */
START_TEST(test_float_specials) {
  const float a[3] = {NAN, 1.0f, -INFINITY}, b[3] = {2.0f, NAN, 3.0f};
  float out[3];
  dev_redop_t dop = {.kind = DEV_OP_MIN};
  host_reduce(out, a, b, 3, ncclFloat32, &dop);
  ck_assert(out[0] == 2.0f && out[1] == 1.0f && out[2] == -INFINITY);
  dop.kind = DEV_OP_MAX;
  host_reduce(out, a, b, 3, ncclFloat32, &dop);
  ck_assert(out[0] == 2.0f && out[1] == 1.0f && out[2] == 3.0f);
  dop.kind = DEV_OP_SUM;
  host_reduce(out, a, b, 3, ncclFloat32, &dop);
  ck_assert(isnan(out[0]) && isnan(out[1]) && out[2] == -INFINITY);

  /* the same NaN rule in the converted types: half and e5m2 (NaN, 2) and (1, NaN) */
  const uint16_t ha[2] = {0x7e00, 0x3c00}, hb[2] = {0x4000, 0xfe00};
  uint16_t ho[2];
  const uint8_t ea[2] = {0x7f, 0x3c}, eb[2] = {0x40, 0xff};
  uint8_t eo[2];
  for (int k = DEV_OP_MIN; k <= DEV_OP_MAX; k++) {
    dop.kind = (uint8_t)k;
    host_reduce(ho, ha, hb, 2, ncclFloat16, &dop);
    ck_assert_msg(ho[0] == 0x4000 && ho[1] == 0x3c00, "half op %d: %#x %#x", k, ho[0], ho[1]);
    host_reduce(eo, ea, eb, 2, ncclFloat8e5m2, &dop);
    ck_assert_msg(eo[0] == 0x40 && eo[1] == 0x3c, "e5m2 op %d: %#x %#x", k, eo[0], eo[1]);
  }

  /* average of 4 ranks in half: every rank scales its own value by 0.25 (0x3400) */
  const uint16_t vals[4] = {0x3c00 /* 1 */, 0x4000 /* 2 */, 0x4200 /* 3 */, 0x4400 /* 4 */};
  dev_redop_t avg = {.kind = DEV_OP_PREMULSUM, .scalar = 0x3400};
  uint16_t acc[1];
  host_reduce(acc, &vals[0], NULL, 1, ncclFloat16, &avg);
  for (int r = 1; r < 4; r++) host_reduce(acc, &vals[r], acc, 1, ncclFloat16, &avg);
  ck_assert_uint_eq(acc[0], 0x4100); /* 2.5 */
}
END_TEST

/* Aliasing: dst == in_local and dst == in_remote give the out-of-place result. */
START_TEST(test_aliasing) {
  test_seed = ref_rng_seed();
  ref_fmts_init();
  for (int ti = 0; ti < NTYPES; ti++) {
    const tinfo_t* t = &types[ti];
    for (int op = 0; op < DEV_OP_COUNT; op++) {
      const size_t n = (size_t)ref_rng_int(1, 300);
      char* a = malloc(n * t->size);
      char* b = malloc(n * t->size);
      char* ref = malloc(n * t->size);
      char* alias = malloc(n * t->size);
      ck_assert(a && b && ref && alias);
      for (size_t i = 0; i < n; i++) {
        store_raw(t, a, i, random_value(t));
        store_raw(t, b, i, random_value(t));
      }
      const dev_redop_t dop = {.kind = (uint8_t)op,
                               .scalar = op == DEV_OP_SUMPOSTDIV ? 3 : random_value(t)};
      host_reduce(ref, a, b, n, t->dt, &dop);
      memcpy(alias, a, n * t->size);
      host_reduce(alias, alias, b, n, t->dt, &dop);
      ck_assert_msg(memcmp(alias, ref, n * t->size) == 0, "%s op %d dst==in_local, seed %llu",
                    t->name, op, test_seed);
      memcpy(alias, b, n * t->size);
      host_reduce(alias, a, alias, n, t->dt, &dop);
      ck_assert_msg(memcmp(alias, ref, n * t->size) == 0, "%s op %d dst==in_remote, seed %llu",
                    t->name, op, test_seed);
      host_reduce_partials(ref, a, b, n, t->dt, &dop);
      memcpy(alias, b, n * t->size);
      host_reduce_partials(alias, a, alias, n, t->dt, &dop);
      ck_assert_msg(memcmp(alias, ref, n * t->size) == 0, "%s op %d partials alias, seed %llu",
                    t->name, op, test_seed);
      memcpy(alias, a, n * t->size);
      host_reduce(alias, alias, NULL, n, t->dt, &dop); /* in-place copy or scale */
      host_reduce(ref, a, NULL, n, t->dt, &dop);
      ck_assert_msg(memcmp(alias, ref, n * t->size) == 0, "%s op %d in-place copy, seed %llu",
                    t->name, op, test_seed);
      free(a);
      free(b);
      free(ref);
      free(alias);
    }
  }
}
END_TEST

START_TEST(test_large_float_sum) {
  test_seed = ref_rng_seed();
  const size_t n = (size_t)(1 << 20) + 3;
  float* a = malloc(n * sizeof(float));
  float* b = malloc(n * sizeof(float));
  ck_assert(a && b);
  for (size_t i = 0; i < n; i++) {
    a[i] = (float)(ref_rng_next() % 1000) - 500.0f;
    b[i] = (float)(ref_rng_next() % 1000) * 0.5f;
  }
  const dev_redop_t dop = {.kind = DEV_OP_SUM};
  float* ref = malloc(n * sizeof(float));
  ck_assert_ptr_nonnull(ref);
  for (size_t i = 0; i < n; i++) ref[i] = (float)((double)a[i] + (double)b[i]);
  host_reduce(b, a, b, n, ncclFloat32, &dop);
  ck_assert_msg(memcmp(b, ref, n * sizeof(float)) == 0, "seed %llu", test_seed);
  free(a);
  free(b);
  free(ref);
}
END_TEST

static Suite* reduce_suite(void) {
  Suite* s = suite_create("reduce");
  TCase* tc = tcase_create("ops");
  tcase_add_loop_test(tc, test_every_type_and_op, 0, NTYPES * DEV_OP_COUNT);
  tcase_add_loop_test(tc, test_sumpostdiv, 0, NTYPES);
  tcase_add_test(tc, test_sumpostdiv_truncates);
  tcase_add_test(tc, test_int_wrap_and_sign);
  tcase_add_test(tc, test_float_specials);
  tcase_add_test(tc, test_aliasing);
  tcase_add_test(tc, test_large_float_sum);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(reduce_suite());
}
