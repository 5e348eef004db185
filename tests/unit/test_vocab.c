/* The vocabulary (src/vocab/vocab.h): the capability table vocab_supports and the connection
 * FIFO helpers. The expected values are written out here from the rules as docs/ARCHITECTURE.md
 * states them, never computed by the code under test:
 *   Ring: every collective, any protocol; Tree: AllReduce; OneShot: AllReduce, AllGather,
 *   ReduceScatter, Broadcast; TwoShot: AllReduce; the direct two with LL, on 2..8 ranks of one
 *   host, where direct algorithms are allowed; with Simple (staged) under the same limits and
 *   only where the communicator has staging: OneShot AllReduce, AllGather, ReduceScatter,
 *   Broadcast and Reduce, TwoShot AllReduce; never LL128; LL128 only where the communicator
 *   offers it; Send/Recv have no algorithm. */
#include <check.h>
#include <stdlib.h>

#include "unit.h"
#include "vocab/vocab.h"

#define L (1 << PROTO_LL)
#define L128 (1 << PROTO_LL128)
#define S (1 << PROTO_SIMPLE)
#define ALL (L | L128 | S)

/* The protocols each function x algorithm admits on 4 ranks of one host with LL128 and the
 * direct algorithms allowed (columns: Tree, Ring, OneShot, TwoShot). */
static const int full[FUNC_COUNT][ALGO_COUNT] = {
    [FUNC_BROADCAST] = {[ALGO_TREE] = 0, [ALGO_RING] = ALL, [ALGO_ONESHOT] = L, [ALGO_TWOSHOT] = 0},
    [FUNC_REDUCE] = {[ALGO_TREE] = 0, [ALGO_RING] = ALL, [ALGO_ONESHOT] = 0, [ALGO_TWOSHOT] = 0},
    [FUNC_ALLGATHER] = {[ALGO_TREE] = 0, [ALGO_RING] = ALL, [ALGO_ONESHOT] = L, [ALGO_TWOSHOT] = 0},
    [FUNC_REDUCESCATTER] =
        {[ALGO_TREE] = 0, [ALGO_RING] = ALL, [ALGO_ONESHOT] = L, [ALGO_TWOSHOT] = 0},
    [FUNC_ALLREDUCE] =
        {[ALGO_TREE] = ALL, [ALGO_RING] = ALL, [ALGO_ONESHOT] = L, [ALGO_TWOSHOT] = L},
    [FUNC_SEND] = {0},
    [FUNC_RECV] = {0},
};

/* What a communicator with staging adds to `full`: the staged direct algorithms (Simple). */
static const int staged[FUNC_COUNT][ALGO_COUNT] = {
    [FUNC_BROADCAST] = {[ALGO_TREE] = 0, [ALGO_RING] = 0, [ALGO_ONESHOT] = S, [ALGO_TWOSHOT] = 0},
    [FUNC_REDUCE] = {[ALGO_TREE] = 0, [ALGO_RING] = 0, [ALGO_ONESHOT] = S, [ALGO_TWOSHOT] = 0},
    [FUNC_ALLGATHER] = {[ALGO_TREE] = 0, [ALGO_RING] = 0, [ALGO_ONESHOT] = S, [ALGO_TWOSHOT] = 0},
    [FUNC_REDUCESCATTER] =
        {[ALGO_TREE] = 0, [ALGO_RING] = 0, [ALGO_ONESHOT] = S, [ALGO_TWOSHOT] = 0},
    [FUNC_ALLREDUCE] = {[ALGO_TREE] = 0, [ALGO_RING] = 0, [ALGO_ONESHOT] = S, [ALGO_TWOSHOT] = S},
    [FUNC_SEND] = {0},
    [FUNC_RECV] = {0},
};

/* Checks every function x algorithm x protocol of caps against the expected masks: `full`, plus
 * `staged` where caps->staged, where drop_direct / drop_ll128 take the direct algorithms / LL128
 * out. */
static void check_caps(const vocab_caps_t* caps, bool drop_direct, bool drop_ll128,
                       const char* what) {
  for (int f = 0; f < FUNC_COUNT; f++)
    for (int a = 0; a < ALGO_COUNT; a++) {
      int want = full[f][a] | (caps->staged ? staged[f][a] : 0);
      if (drop_direct && (a == ALGO_ONESHOT || a == ALGO_TWOSHOT)) want = 0;
      if (drop_ll128) want &= ~L128;
      for (int p = 0; p < PROTO_COUNT; p++) {
        const bool exp = (want >> p) & 1;
        ck_assert_msg(vocab_supports(f, a, p, caps) == exp,
                      "%s: func %d algo %d proto %d: expected %s", what, f, a, p,
                      exp ? "supported" : "unsupported");
      }
    }
}

START_TEST(test_table_full) {
  const vocab_caps_t c = {.ll128 = true, .direct = true, .nranks = 4, .nhosts = 1};
  check_caps(&c, false, false, "4 ranks, LL128, direct");
}
END_TEST

START_TEST(test_table_without_ll128) {
  const vocab_caps_t c = {.ll128 = false, .direct = true, .nranks = 4, .nhosts = 1};
  check_caps(&c, false, true, "no LL128");
}
END_TEST

START_TEST(test_table_direct_limits) {
  vocab_caps_t c = {.ll128 = true, .direct = false, .nranks = 4, .nhosts = 1};
  check_caps(&c, true, false, "direct not allowed");
  c.direct = true;
  c.nranks = 1;
  check_caps(&c, true, false, "1 rank");
  c.nranks = 2;
  check_caps(&c, false, false, "2 ranks");
  c.nranks = 8;
  check_caps(&c, false, false, "8 ranks");
  c.nranks = 9;
  check_caps(&c, true, false, "9 ranks");
  c.nranks = 4;
  c.nhosts = 2;
  check_caps(&c, true, false, "2 hosts");
  c.nhosts = 0; /* unknown to the caller (an executor): the planner checked */
  check_caps(&c, false, false, "hosts unknown");
}
END_TEST

/* The staged direct algorithms: only where the communicator has staging, under the direct
 * algorithms' limits. */
START_TEST(test_table_staged) {
  vocab_caps_t c = {.ll128 = true, .direct = true, .staged = true, .nranks = 4, .nhosts = 1};
  check_caps(&c, false, false, "4 ranks, LL128, direct, staged");
  ck_assert(vocab_supports(FUNC_REDUCE, ALGO_ONESHOT, PROTO_SIMPLE, &c));
  ck_assert(!vocab_supports(FUNC_REDUCE, ALGO_ONESHOT, PROTO_LL, &c));
  ck_assert(!vocab_supports(FUNC_REDUCE, ALGO_TWOSHOT, PROTO_SIMPLE, &c));
  ck_assert(!vocab_supports(FUNC_ALLREDUCE, ALGO_ONESHOT, PROTO_LL128, &c));
  c.staged = false;
  ck_assert(!vocab_supports(FUNC_ALLREDUCE, ALGO_ONESHOT, PROTO_SIMPLE, &c));
  ck_assert(!vocab_supports(FUNC_REDUCE, ALGO_ONESHOT, PROTO_SIMPLE, &c));
  c.staged = true;
  c.ll128 = false;
  check_caps(&c, false, true, "staged, no LL128");
  c.ll128 = true;
  c.direct = false;
  check_caps(&c, true, false, "staged, direct not allowed");
  c.direct = true;
  c.nranks = 1;
  check_caps(&c, true, false, "staged, 1 rank");
  c.nranks = 2;
  check_caps(&c, false, false, "staged, 2 ranks");
  c.nranks = 8;
  check_caps(&c, false, false, "staged, 8 ranks");
  c.nranks = 9;
  check_caps(&c, true, false, "staged, 9 ranks");
  c.nranks = 4;
  c.nhosts = 2;
  check_caps(&c, true, false, "staged, 2 hosts");
  c.nhosts = 0;
  check_caps(&c, false, false, "staged, hosts unknown");
}
END_TEST

START_TEST(test_table_out_of_range) {
  const vocab_caps_t c = {.ll128 = true, .direct = true, .nranks = 4, .nhosts = 1};
  ck_assert(!vocab_supports(-1, ALGO_RING, PROTO_SIMPLE, &c));
  ck_assert(!vocab_supports(FUNC_COUNT, ALGO_RING, PROTO_SIMPLE, &c));
  ck_assert(!vocab_supports(FUNC_ALLREDUCE, -1, PROTO_SIMPLE, &c));
  ck_assert(!vocab_supports(FUNC_ALLREDUCE, ALGO_COUNT, PROTO_SIMPLE, &c));
  ck_assert(!vocab_supports(FUNC_ALLREDUCE, ALGO_RING, -1, &c));
  ck_assert(!vocab_supports(FUNC_ALLREDUCE, ALGO_RING, PROTO_COUNT, &c));
  ck_assert(vocab_proto_supported(PROTO_LL, &c) && vocab_proto_supported(PROTO_SIMPLE, &c));
  const vocab_caps_t host = {.nranks = 4};
  ck_assert(!vocab_proto_supported(PROTO_LL128, &host));
  ck_assert(vocab_proto_supported(PROTO_LL128, &c));
}
END_TEST

/* Which algorithms are direct (every peer at once) and which pairs are staged (direct with
 * Simple): the planner, the CUDA executor's launch and baton-sim all ask these two. */
START_TEST(test_algo_kinds) {
  const bool direct[ALGO_COUNT] = {
      [ALGO_TREE] = false, [ALGO_RING] = false, [ALGO_ONESHOT] = true, [ALGO_TWOSHOT] = true};
  for (int a = 0; a < ALGO_COUNT; a++) {
    ck_assert_msg(vocab_algo_is_direct(a) == direct[a], "algo %d", a);
    for (int p = 0; p < PROTO_COUNT; p++)
      ck_assert_msg(vocab_algo_is_staged(a, p) == (direct[a] && p == PROTO_SIMPLE),
                    "algo %d proto %d", a, p);
  }
}
END_TEST

/* The FIFO helpers, with NCCL_STEPS = 8 slots. */
START_TEST(test_fifo_helpers) {
  ck_assert_int_eq(NCCL_STEPS, 8);
  const uint64_t steps[] = {0, 1, 7, 8, 9, 15, 16, 1000003, (1ull << 40) + 5};
  const uint32_t slots[] = {0, 1, 7, 0, 1, 7, 0, 3, 5};
  for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
    ck_assert_uint_eq(fifo_slot(steps[i]), slots[i]);
  ck_assert_uint_eq(fifo_slot_bytes(4 << 20), 512 << 10);
  ck_assert_uint_eq(fifo_slot_bytes(80), 10);
  char buf[80];
  ck_assert_ptr_eq(fifo_slot_ptr(buf, 80, 0), buf);
  ck_assert_ptr_eq(fifo_slot_ptr(buf, 80, 3), buf + 30);
  ck_assert_ptr_eq(fifo_slot_ptr(buf, 80, 11), buf + 30);
  /* The first 8 steps need nothing freed; step s then needs head >= s - 7. */
  for (uint64_t s = 0; s < 8; s++) {
    ck_assert(fifo_may_send(0, s));
    ck_assert_uint_eq(fifo_head_needed(s), 0);
  }
  ck_assert(!fifo_may_send(0, 8));
  ck_assert(fifo_may_send(1, 8));
  ck_assert_uint_eq(fifo_head_needed(8), 1);
  ck_assert(!fifo_may_send(92, 100));
  ck_assert(fifo_may_send(93, 100));
  ck_assert(fifo_may_send(100, 100));
  ck_assert_uint_eq(fifo_head_needed(100), 93);
  /* publish: the size in the step's slot, then the tail one past the step */
  volatile int sizes[NCCL_STEPS] = {0};
  volatile uint64_t tail = 0;
  fifo_publish(sizes, &tail, 10, 1234);
  ck_assert_int_eq(sizes[2], 1234);
  ck_assert_uint_eq(tail, 11);
  for (int i = 0; i < NCCL_STEPS; i++)
    if (i != 2) ck_assert_int_eq(sizes[i], 0);
}
END_TEST

/* The data bytes of a slot (fifo_slot_data_bytes): all of a Simple slot, 8 of each 16-byte LL
 * line, LL128_DATA_BYTES (120) of each 128-byte LL128 line; whole lines only. */
START_TEST(test_fifo_slot_data_bytes) {
  ck_assert_uint_eq(fifo_slot_data_bytes(4 << 20, PROTO_SIMPLE), 512 << 10);
  ck_assert_uint_eq(fifo_slot_data_bytes(80, PROTO_SIMPLE), 10);
  /* LL: 256 KiB, slots of 32 KiB = 2048 lines */
  ck_assert_uint_eq(fifo_slot_data_bytes(256 << 10, PROTO_LL), 2048 * 8);
  ck_assert_uint_eq(fifo_slot_data_bytes(8 * (16 * 5 + 15), PROTO_LL), 5 * 8);
  /* LL128: slots of 100 lines; then 3 lines and part of one */
  ck_assert_uint_eq(fifo_slot_data_bytes(8 * 128 * 100, PROTO_LL128), 100 * 120);
  ck_assert_uint_eq(fifo_slot_data_bytes(8 * (128 * 3 + 100), PROTO_LL128), 3 * 120);
}
END_TEST

/* dev_udiv / dev_umod take a 32-bit path only where both operands fit in 32 bits: against C's
 * 64-bit division around and beyond 2^32. */
START_TEST(test_dev_div_64) {
  const uint64_t as[] = {0,
                         1,
                         1000003,
                         0xffffffffull,
                         1ull << 32,
                         (1ull << 32) + 10,
                         (1ull << 33) - 1,
                         1ull << 33,
                         (1ull << 40) + 7,
                         ~0ull};
  const uint64_t bs[] = {1, 3, 16, 1000, 0xffffffffull, (1ull << 32) + 1, 1ull << 35};
  for (size_t i = 0; i < sizeof(as) / sizeof(as[0]); i++)
    for (size_t j = 0; j < sizeof(bs) / sizeof(bs[0]); j++) {
      const uint64_t a = as[i], b = bs[j];
      ck_assert_msg(dev_udiv(a, b) == a / b, "%llu / %llu", (unsigned long long)a,
                    (unsigned long long)b);
      ck_assert_msg(dev_umod(a, b) == a % b, "%llu %% %llu", (unsigned long long)a,
                    (unsigned long long)b);
    }
  /* 2^32 + 10 elements in chunks of 3: ceil((2^32 + 10) / 3) steps */
  ck_assert_uint_eq(steps_div_up((1ull << 32) + 10, 3), ((1ull << 32) + 12) / 3);
}
END_TEST

/* The direct-write mailbox tag (steps_direct_tag): nonzero from the first FIFO step on, and larger
 * for every later start. */
START_TEST(test_direct_tag) {
  ck_assert_uint_ne(steps_direct_tag(0), 0);
  const uint64_t starts[] = {0, 1, 2, 7, 8, 1000, 1ull << 40};
  for (size_t i = 0; i + 1 < sizeof(starts) / sizeof(starts[0]); i++)
    ck_assert_uint_lt(steps_direct_tag(starts[i]), steps_direct_tag(starts[i + 1]));
}
END_TEST

static Suite* vocab_suite(void) {
  Suite* s = suite_create("vocab");
  TCase* tc = tcase_create("vocab");
  tcase_add_test(tc, test_table_full);
  tcase_add_test(tc, test_table_without_ll128);
  tcase_add_test(tc, test_table_direct_limits);
  tcase_add_test(tc, test_table_staged);
  tcase_add_test(tc, test_table_out_of_range);
  tcase_add_test(tc, test_algo_kinds);
  tcase_add_test(tc, test_fifo_helpers);
  tcase_add_test(tc, test_fifo_slot_data_bytes);
  tcase_add_test(tc, test_dev_div_64);
  tcase_add_test(tc, test_direct_tag);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(vocab_suite());
}
