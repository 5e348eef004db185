/* The planner's pure arithmetic (src/collectives/plan.c): channel slices, channel counts, chunk
 * sizes, operation sizes, the NCCL_ALGO / NCCL_PROTO rows it builds, and PreMulSum scalar bits. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <stdlib.h>

#include "collectives/collectives.h"
#include "unit.h"

START_TEST(test_split_covers_exactly) {
  const size_t totals[] = {0, 1, 2, 15, 16, 17, 1000, 1001, 123457};
  const size_t aligns[] = {1, 4, 16, 64};
  for (size_t ti = 0; ti < sizeof(totals) / sizeof(totals[0]); ti++) {
    for (size_t ai = 0; ai < sizeof(aligns) / sizeof(aligns[0]); ai++) {
      for (int n = 1; n <= 9; n++) {
        size_t next = 0, total = totals[ti], align = aligns[ai];
        for (int c = 0; c < n; c++) {
          size_t off, len;
          coll_split(total, n, c, align, &off, &len);
          if (len == 0) continue;
          ck_assert_msg(off == next, "total %zu n %d align %zu: slice %d starts at %zu, not %zu",
                        total, n, align, c, off, next);
          ck_assert_msg(off % align == 0, "slice %d starts unaligned at %zu", c, off);
          next = off + len;
          ck_assert_uint_le(next, total);
        }
        ck_assert_msg(next == total, "total %zu n %d align %zu: slices end at %zu", total, n, align,
                      next);
      }
    }
  }
}
END_TEST

START_TEST(test_split_balanced) {
  /* Equal slices when total divides evenly; never more than one aligned unit of difference. */
  size_t off, len;
  coll_split(4096, 4, 3, 16, &off, &len);
  ck_assert_uint_eq(off, 3072);
  ck_assert_uint_eq(len, 1024);
  coll_split(100, 2, 1, 1, &off, &len);
  ck_assert_uint_eq(off, 50);
  ck_assert_uint_eq(len, 50);
  coll_split(10, 4, 3, 4, &off, &len); /* 3 units of 4 over 4 slices: the last one is empty */
  ck_assert_uint_eq(len, 0);
}
END_TEST

START_TEST(test_op_nchannels) {
  ck_assert_int_eq(coll_op_nchannels(0, 4, 0), 1);
  ck_assert_int_eq(coll_op_nchannels(1, 4, 0), 1);
  ck_assert_int_eq(coll_op_nchannels(COLL_MIN_CHANNEL_BYTES, 4, 0), 1);
  ck_assert_int_eq(coll_op_nchannels(COLL_MIN_CHANNEL_BYTES + 1, 4, 0), 2);
  ck_assert_int_eq(coll_op_nchannels(1 << 30, 4, 0), 4);
  ck_assert_int_eq(coll_op_nchannels(1, 4, 3), 3); /* NCCL_MIN_NCHANNELS */
  ck_assert_int_eq(coll_op_nchannels(1, 2, 3), 2); /* never above the communicator's */
  ck_assert_int_eq(coll_op_nchannels(1 << 30, 0, 0), 1);
  /* below COLL_WIDE_MIN_BYTES at most COLL_NARROW_CHANNELS, unless NCCL_MIN_NCHANNELS asks */
  ck_assert_int_eq(coll_op_nchannels(COLL_WIDE_MIN_BYTES - 1, 62, 0), COLL_NARROW_CHANNELS);
  ck_assert_int_eq(coll_op_nchannels(COLL_WIDE_MIN_BYTES, 62, 0), 62);
  ck_assert_int_eq(coll_op_nchannels(1 << 20, 62, 56), 56);
}
END_TEST

START_TEST(test_chunk_elems) {
  for (size_t slot = 1; slot < 5000; slot += 37) {
    for (size_t es = 1; es <= 8; es *= 2) {
      size_t c = coll_chunk_elems(slot, es);
      ck_assert_uint_ge(c, 1);
      if (slot >= es) ck_assert_uint_le(c * es, slot);
      if (slot >= 16) ck_assert_uint_eq((c * es) % 16, 0);
    }
  }
  ck_assert_uint_eq(coll_chunk_elems(524288, 4), 131072);
}
END_TEST

START_TEST(test_task_bytes) {
  coll_task_t t = {.func = FUNC_ALLGATHER, .dtype = ncclFloat64, .count = 10};
  ck_assert_uint_eq(coll_task_bytes(&t, 4), 320);
  t.func = FUNC_REDUCESCATTER;
  t.dtype = ncclBfloat16;
  ck_assert_uint_eq(coll_task_bytes(&t, 3), 60);
  t.func = FUNC_ALLREDUCE;
  ck_assert_uint_eq(coll_task_bytes(&t, 3), 20);
}
END_TEST

START_TEST(test_filter_rows) {
  setenv("NCCL_ALGO", "ring;allreduce:tree", 1);
  setenv("NCCL_PROTO", "^LL", 1);
  param_reload();
  coll_filter_t f;
  ck_assert_int_eq(coll_filter_init(&f), ncclSuccess);
  ck_assert(f.algo_ok[FUNC_ALLREDUCE][ALGO_TREE] && !f.algo_ok[FUNC_ALLREDUCE][ALGO_RING]);
  ck_assert(f.algo_ok[FUNC_BROADCAST][ALGO_RING] && !f.algo_ok[FUNC_BROADCAST][ALGO_TREE]);
  ck_assert(f.algo_set[FUNC_ALLREDUCE] && f.algo_set[FUNC_REDUCE]);
  for (int fn = 0; fn < FUNC_COUNT; fn++) {
    ck_assert(!f.proto_ok[fn][PROTO_LL]);
    ck_assert(f.proto_ok[fn][PROTO_SIMPLE]);
    ck_assert(f.proto_set[fn]);
  }
  setenv("NCCL_ALGO", "Bogus", 1);
  param_reload();
  ck_assert_int_eq(coll_filter_init(&f), ncclInvalidUsage);
  unsetenv("NCCL_ALGO");
  unsetenv("NCCL_PROTO");
  param_reload();
  ck_assert_int_eq(coll_filter_init(&f), ncclSuccess);
  for (int fn = 0; fn < FUNC_COUNT; fn++) ck_assert(!f.algo_set[fn] && !f.proto_set[fn]);
}
END_TEST

START_TEST(test_scalar_bits) {
  uint64_t b = coll_scalar_bits(0.5, ncclFloat32);
  float f;
  memcpy(&f, &b, sizeof(f));
  ck_assert(f == 0.5f);
  ck_assert_uint_eq(b >> 32, 0);
  b = coll_scalar_bits(0.25, ncclFloat64);
  double d;
  memcpy(&d, &b, sizeof(d));
  ck_assert(d == 0.25);
  ck_assert_uint_eq(coll_scalar_bits(0.5, ncclFloat16), 0x3800);  /* binary16 0.5 */
  ck_assert_uint_eq(coll_scalar_bits(0.5, ncclBfloat16), 0x3f00); /* bfloat16 0.5 */
  ck_assert_uint_eq(coll_scalar_bits(0.5, ncclFloat8e4m3), 0x30); /* e4m3: exp 6, mant 0 */
  ck_assert_uint_eq(coll_scalar_bits(0.5, ncclFloat8e5m2), 0x38); /* e5m2: exp 14, mant 0 */
  ck_assert_uint_eq(coll_scalar_bits(3, ncclInt8), 3);
  ck_assert_uint_eq(coll_scalar_bits(-1, ncclInt32), 0xffffffffu);
}
END_TEST

static Suite* plan_suite(void) {
  Suite* s = suite_create("coll_plan");
  TCase* tc = tcase_create("plan");
  tcase_add_test(tc, test_split_covers_exactly);
  tcase_add_test(tc, test_split_balanced);
  tcase_add_test(tc, test_op_nchannels);
  tcase_add_test(tc, test_chunk_elems);
  tcase_add_test(tc, test_task_bytes);
  tcase_add_test(tc, test_filter_rows);
  tcase_add_test(tc, test_scalar_bits);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(plan_suite());
}
