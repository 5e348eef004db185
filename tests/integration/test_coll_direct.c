/* The direct algorithms (device.h's OneShot and TwoShot, vocab.h's LANE_DIRECT) on the host
 * executor, where CI can run them: forced by NCCL_ALGO on 2, 3, 5 and 8 ranks, every datatype,
 * every op (PreMulSum with host and device scalars, Avg on integers and floats), odd counts that
 * fill several chunks of small FIFOs, in place and out of place, Broadcast from several roots;
 * results against the test's own references (itest_ops.c), and the planner's choice checked. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/collectives.h"
#include "itest.h"

typedef struct direct_case {
  int algo; /* ALGO_ONESHOT or ALGO_TWOSHOT: what AllReduce must have run */
} direct_case_t;

static int expect_algo(itest_rank_t* r, int func, int algo, const itest_case_t* c) {
  coll_choice_t ch;
  IT_NCCL(coll_last_choice(r->comms[0], &ch));
  IT_EXPECT(ch.func == func && ch.algo == algo && ch.proto == PROTO_LL,
            "%s %s count %zu: ran %s/%s, expected %s/LL", itest_func_name(c->func),
            itest_type_name(c->dtype), c->count, coll_algo_name(ch.algo), coll_proto_name(ch.proto),
            coll_algo_name(algo));
  return 0;
}

static int direct_body(itest_rank_t* r, void* arg) {
  const direct_case_t* dc = arg;
  ncclComm_t comm = r->comms[0];
  const int n = r->nranks;
  uint32_t seed = 1000;
  static const size_t counts[] = {1, 7, 1001, 20003};
  /* AllReduce: every type with Sum, every op on three types */
  for (int t = 0; t < 12; t++) {
    for (int op = IT_SUM; op < IT_OP_COUNT; op++) {
      const ncclDataType_t dt = itest_all_types[t];
      const bool all_ops = dt == ncclFloat32 || dt == ncclInt32 || dt == ncclBfloat16;
      if (op != IT_SUM && !all_ops) continue;
      if ((op == IT_PREMUL_HOST || op == IT_PREMUL_DEVICE) && dt == ncclUint8) continue;
      for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        if (!all_ops && ci == 3) continue; /* the large count on the main types only */
        for (int place = 0; place < 2; place++) {
          itest_case_t c = {.func = IT_ALLREDUCE,
                            .dtype = dt,
                            .op = op,
                            .count = counts[ci],
                            .inplace = place,
                            .seed = seed++};
          if (itest_op_run(comm, &c)) return 1;
          if (expect_algo(r, FUNC_ALLREDUCE, dc->algo, &c)) return 1;
        }
      }
    }
  }
  if (dc->algo != ALGO_ONESHOT) return 0;
  /* the other direct collectives: OneShot only */
  static const ncclDataType_t types[3] = {ncclFloat32, ncclInt8, ncclFloat16};
  for (int ti = 0; ti < 3; ti++) {
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
      for (int place = 0; place < 2; place++) {
        itest_case_t ag = {.func = IT_ALLGATHER,
                           .dtype = types[ti],
                           .count = counts[ci],
                           .inplace = place,
                           .seed = seed++};
        if (itest_op_run(comm, &ag) || expect_algo(r, FUNC_ALLGATHER, ALGO_ONESHOT, &ag)) return 1;
        itest_case_t rs = {.func = IT_REDUCESCATTER,
                           .dtype = types[ti],
                           .op = (int)((ci + (size_t)ti) % IT_OP_COUNT),
                           .count = counts[ci],
                           .inplace = place,
                           .seed = seed++};
        if (types[ti] == ncclInt8 && (rs.op == IT_PREMUL_HOST || rs.op == IT_PREMUL_DEVICE))
          rs.op = IT_MAX;
        if (itest_op_run(comm, &rs) || expect_algo(r, FUNC_REDUCESCATTER, ALGO_ONESHOT, &rs))
          return 1;
        itest_case_t bc = {.func = place ? IT_BCAST : IT_BROADCAST,
                           .dtype = types[ti],
                           .count = counts[ci],
                           .root = (int)((ci * 3 + (size_t)ti) % (size_t)n),
                           .inplace = place,
                           .seed = seed++};
        if (itest_op_run(comm, &bc) || expect_algo(r, FUNC_BROADCAST, ALGO_ONESHOT, &bc)) return 1;
      }
    }
  }
  /* Reduce has no direct form: the model runs it, and gets it right */
  itest_case_t red = {.func = IT_REDUCE,
                      .dtype = ncclFloat32,
                      .op = IT_SUM,
                      .count = 1001,
                      .root = n - 1,
                      .seed = seed++};
  if (itest_op_run(comm, &red)) return 1;
  coll_choice_t ch;
  IT_NCCL(coll_last_choice(comm, &ch));
  IT_EXPECT(ch.algo == ALGO_RING, "Reduce ran %s", coll_algo_name(ch.algo));
  return 0;
}

/* Small FIFOs (4 KiB of LL data a slot): the larger counts take many chunks. */
static void direct_run(int nranks, const char* algo_env, int algo) {
  direct_case_t dc = {.algo = algo};
  itest_opts_t o = {
      .nranks = nranks,
      .timeout_s = 280,
      .env = {algo_env, "NCCL_PROTO=LL", "NCCL_BUFFSIZE=65536", "NCCL_LL_BUFFSIZE=65536"}};
  ck_assert_msg(itest_run(&o, direct_body, &dc) == 0, "%d ranks, %s", nranks, algo_env);
}

/* ---- Windows read in place (device.h, "Registered windows read in place") ----------------------
 * Every buffer in a shared window: OneShot reads the peers' inputs where they lie (the host
 * executor says so in an INFO line per channel, counted in this rank's log), except an in-place
 * AllReduce; with one rank's buffers outside its windows every rank takes the FIFO path, but for
 * a Broadcast from another root. Results are checked either way. */
#define ZC_LOG_FMT "/tmp/baton-zc-%d-%d.log" /* test process, rank process */
static int zc_test_pid;
static char zc_env[96];

static int zc_lines(void) {
  char path[96];
  snprintf(path, sizeof(path), ZC_LOG_FMT, zc_test_pid, (int)getpid());
  FILE* f = fopen(path, "r");
  if (f == NULL) return 0;
  char line[1024];
  int n = 0;
  while (fgets(line, sizeof(line), f) != NULL) n += strstr(line, "read in place") != NULL;
  fclose(f);
  return n;
}

static int func_of(int it_func) {
  switch (it_func) {
    case IT_ALLGATHER:
      return FUNC_ALLGATHER;
    case IT_REDUCESCATTER:
      return FUNC_REDUCESCATTER;
    case IT_BROADCAST:
      return FUNC_BROADCAST;
    default:
      return FUNC_ALLREDUCE;
  }
}

static int windows_body(itest_rank_t* r, void* arg) {
  const int outside = *(const int*)arg;
  ncclComm_t comm = r->comms[0];
  const int n = r->nranks;
  static const ncclDataType_t types[4] = {ncclFloat32, ncclInt8, ncclBfloat16, ncclFloat64};
  static const size_t counts[] = {1, 7, 1001, 20003};
  static const int funcs[4] = {IT_ALLREDUCE, IT_ALLGATHER, IT_REDUCESCATTER, IT_BROADCAST};
  uint32_t seed = 7000;
  int k = 0;
  itest_windows(true, outside);
  for (int ti = 0; ti < 4; ti++) {
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
      for (int fi = 0; fi < 4; fi++) {
        for (int place = 0; place < 2; place++, k++) {
          itest_case_t c = {.func = funcs[fi],
                            .dtype = types[ti],
                            .op = k % IT_OP_COUNT,
                            .count = counts[ci],
                            .root = k % n,
                            .inplace = place,
                            .seed = seed++};
          if (types[ti] == ncclInt8 && (c.op == IT_PREMUL_HOST || c.op == IT_PREMUL_DEVICE))
            c.op = IT_MIN;
          const int before = zc_lines();
          if (itest_op_run(comm, &c) || expect_algo(r, func_of(c.func), ALGO_ONESHOT, &c)) return 1;
          const bool all_in = outside < 0 || (c.func == IT_BROADCAST && c.root != outside);
          const bool want = all_in && !(c.func == IT_ALLREDUCE && place);
          const int got = zc_lines() - before;
          IT_EXPECT(want ? got > 0 : got == 0,
                    "%s %s count %zu %s root %d: %d channel(s) read in place, expected %s",
                    itest_func_name(c.func), itest_type_name(c.dtype), c.count,
                    place ? "in place" : "out of place", c.root, got, want ? "some" : "none");
        }
      }
    }
  }
  itest_windows(false, -1);
  char path[96];
  snprintf(path, sizeof(path), ZC_LOG_FMT, zc_test_pid, (int)getpid());
  unlink(path);
  return 0;
}

static void windows_run(int nranks, int outside) {
  zc_test_pid = (int)getpid();
  snprintf(zc_env, sizeof(zc_env), "NCCL_DEBUG_FILE=/tmp/baton-zc-%d-%%p.log", zc_test_pid);
  itest_opts_t o = {
      .nranks = nranks,
      .timeout_s = 280,
      .env = {"NCCL_ALGO=OneShot", "NCCL_PROTO=LL", "NCCL_BUFFSIZE=65536", "NCCL_LL_BUFFSIZE=65536",
              "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=COLL", zc_env}};
  ck_assert_msg(itest_run(&o, windows_body, &outside) == 0, "%d ranks, outside %d", nranks,
                outside);
}

START_TEST(test_oneshot_windows_3) {
  windows_run(3, -1);
}
END_TEST

START_TEST(test_oneshot_windows_outside_4) {
  windows_run(4, 1);
}
END_TEST

START_TEST(test_oneshot_2) {
  direct_run(2, "NCCL_ALGO=OneShot", ALGO_ONESHOT);
}
END_TEST

START_TEST(test_oneshot_5) {
  direct_run(5, "NCCL_ALGO=oneshot", ALGO_ONESHOT);
}
END_TEST

START_TEST(test_oneshot_8) {
  direct_run(8, "NCCL_ALGO=OneShot", ALGO_ONESHOT);
}
END_TEST

START_TEST(test_twoshot_3) {
  direct_run(3, "NCCL_ALGO=allreduce:TwoShot", ALGO_TWOSHOT);
}
END_TEST

START_TEST(test_twoshot_8) {
  direct_run(8, "NCCL_ALGO=TwoShot", ALGO_TWOSHOT);
}
END_TEST

static Suite* direct_suite(void) {
  Suite* s = suite_create("coll_direct");
  TCase* tc = tcase_create("direct");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_oneshot_2);
  tcase_add_test(tc, test_oneshot_5);
  tcase_add_test(tc, test_oneshot_8);
  tcase_add_test(tc, test_twoshot_3);
  tcase_add_test(tc, test_twoshot_8);
  tcase_add_test(tc, test_oneshot_windows_3);
  tcase_add_test(tc, test_oneshot_windows_outside_4);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(direct_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
