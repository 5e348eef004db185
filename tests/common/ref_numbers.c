/* Reference numerics for tests (see ref_numbers.h). */
#include "ref_numbers.h"

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* ---- Random numbers ------------------------------------------------------------------------ */
static uint64_t rng_state = 1;

unsigned long long ref_rng_seed(void) {
  const char* env = getenv("BATON_TEST_SEED");
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const unsigned long long seed =
      env ? strtoull(env, NULL, 0)
          : ((unsigned long long)ts.tv_nsec ^ ((unsigned long long)ts.tv_sec << 30) ^
             ((unsigned long long)getpid() << 16));
  rng_state = seed | 1;
  return seed;
}

uint64_t ref_rng_next(void) { /* xorshift64* */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  return rng_state * 0x2545F4914F6CDD1Dull;
}

int ref_rng_int(int lo, int hi) {
  return lo + (int)(ref_rng_next() % (uint64_t)(hi - lo + 1));
}

/* ---- Low-precision formats ----------------------------------------------------------------- */
ref_fmt_t ref_fmt_half = {"half", 5, 10, 15, true, false, 0, NULL};
ref_fmt_t ref_fmt_bf16 = {"bf16", 8, 7, 127, true, false, 0, NULL};
ref_fmt_t ref_fmt_e4m3 = {"e4m3", 4, 3, 7, false, true, 0, NULL};
ref_fmt_t ref_fmt_e5m2 = {"e5m2", 5, 2, 15, true, true, 0, NULL};

double ref_fmt_decode(const ref_fmt_t* f, uint32_t bits) {
  const int sign = (bits >> (f->ebits + f->mbits)) & 1;
  const int e = (int)((bits >> f->mbits) & ((1u << f->ebits) - 1));
  const int m = (int)(bits & ((1u << f->mbits) - 1));
  const int emax = (1 << f->ebits) - 1;
  double v;
  if (f->ieee && e == emax)
    v = m == 0 ? INFINITY : NAN;
  else if (!f->ieee && e == emax && m == (1 << f->mbits) - 1)
    v = NAN;
  else if (e == 0)
    v = ldexp(m, 1 - f->bias - f->mbits);
  else
    v = ldexp(m + (1 << f->mbits), e - f->bias - f->mbits);
  return sign ? -v : v;
}

static void fmt_init(ref_fmt_t* f) {
  if (f->vals != NULL) return;
  const uint32_t npos = 1u << (f->ebits + f->mbits);
  f->vals = malloc(sizeof(double) * npos);
  ck_assert_ptr_nonnull(f->vals);
  f->nvals = 0;
  for (uint32_t b = 0; b < npos && isfinite(ref_fmt_decode(f, b)); b++)
    f->vals[f->nvals++] = ref_fmt_decode(f, b);
}

void ref_fmts_init(void) {
  fmt_init(&ref_fmt_half);
  fmt_init(&ref_fmt_bf16);
  fmt_init(&ref_fmt_e4m3);
  fmt_init(&ref_fmt_e5m2);
}

uint32_t ref_fmt_round(const ref_fmt_t* f, double x) {
  const uint32_t sign_bit = 1u << (f->ebits + f->mbits);
  const uint32_t sign = signbit(x) ? sign_bit : 0;
  const int top = f->nvals - 1;
  ck_assert_msg(f->vals != NULL, "%s: call ref_fmts_init first", f->name);
  if (isnan(x)) return sign | (sign_bit - 1); /* all ones: a NaN in every format here */
  const double a = fabs(x);
  if (a >= f->vals[top]) {
    if (f->satfinite || a == f->vals[top]) return sign | (uint32_t)top;
    const double half_ulp = (f->vals[top] - f->vals[top - 1]) / 2;
    return sign | (a >= f->vals[top] + half_ulp ? (uint32_t)top + 1 : (uint32_t)top);
  }
  int lo = 0, hi = top; /* vals[lo] <= a < vals[hi] */
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (f->vals[mid] <= a)
      lo = mid;
    else
      hi = mid;
  }
  const double dlo = a - f->vals[lo], dhi = f->vals[hi] - a;
  if (dlo < dhi || (dlo == dhi && lo % 2 == 0)) return sign | (uint32_t)lo;
  return sign | (uint32_t)hi;
}
