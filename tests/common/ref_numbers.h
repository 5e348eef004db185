/* Reference numerics for tests, written from the definitions and independent of the library: a
 * seeded random generator, and the low-precision floating formats (half, bfloat16, fp8 e4m3 and
 * e5m2) decoded with ldexp and rounded by a nearest-value search over all of a format's values. */
#ifndef BATON_TEST_REF_NUMBERS_H
#define BATON_TEST_REF_NUMBERS_H

#include <stdbool.h>
#include <stdint.h>

/* ---- Random numbers (xorshift64*; one generator per process) ------------------------------- */
/* Seeds the generator from BATON_TEST_SEED=<n> when set, else from the clock and the pid, and
 * returns the seed: print it with a failure so that the run can be replayed. */
unsigned long long ref_rng_seed(void);
uint64_t ref_rng_next(void);
int ref_rng_int(int lo, int hi); /* uniform in [lo, hi] */

/* ---- Low-precision formats: 1 sign bit, ebits exponent bits, mbits mantissa bits ------------- */
typedef struct ref_fmt {
  const char* name;
  int ebits, mbits, bias;
  bool ieee;      /* all-ones exponent: infinity (mantissa 0) or NaN; else only all-ones is NaN */
  bool satfinite; /* conversions saturate to the largest finite value */
  int nvals;      /* after ref_fmts_init: non-negative finite values, encodings 0 .. nvals-1 */
  double* vals;   /* their values, increasing */
} ref_fmt_t;

extern ref_fmt_t ref_fmt_half, ref_fmt_bf16, ref_fmt_e4m3, ref_fmt_e5m2;

/* Fills the value tables of the four formats (once; needed by ref_fmt_round). */
void ref_fmts_init(void);
/* The value of an encoding (NaN and infinities included). */
double ref_fmt_decode(const ref_fmt_t* f, uint32_t bits);
/* Nearest encoding of x, ties to the even encoding; overflow goes to infinity or, for a satfinite
 * format, to the largest finite value; NaN gives the all-ones encoding with x's sign. */
uint32_t ref_fmt_round(const ref_fmt_t* f, double x);

#endif /* BATON_TEST_REF_NUMBERS_H */
