/* Every collective x datatype x reduction operator, in place and out of place, counts 0, 1 and
 * odd, roots other than 0, for 2 to 8 ranks (forked processes on loopback, host executor). The
 * expected values are computed by tests/common/itest_ops.c. */
#include <check.h>
#include <stdlib.h>

#include "itest.h"

typedef struct matrix_cfg {
  size_t counts[4];
  int ncounts;
  bool both_places; /* in place as well as out of place */
  unsigned op_mask; /* IT_* ops to run (bits) */
} matrix_cfg_t;

static int matrix_case(itest_rank_t* r, const itest_case_t* c) {
  int rc = itest_op_run(r->comms[0], c);
  if (rc != 0) fprintf(stderr, "rank %d: case failed (see above)\n", r->rank);
  return rc;
}

static int matrix_body(itest_rank_t* r, void* arg) {
  const matrix_cfg_t* cfg = arg;
  int n = r->nranks;
  uint32_t seed = 1;
  double t0 = itest_now();
  int nops = 0;
  for (int ti = 0; ti < 12; ti++) {
    ncclDataType_t t = itest_all_types[ti];
    for (int k = 0; k < cfg->ncounts; k++) {
      size_t count = cfg->counts[k];
      for (int place = 0; place < (cfg->both_places ? 2 : 1); place++) {
        bool inplace = place == 1;
        /* Reducing collectives with every operator. */
        for (int op = 0; op < IT_OP_COUNT; op++) {
          if (!(cfg->op_mask & (1u << op))) continue;
          for (int f = IT_ALLREDUCE; f <= IT_REDUCESCATTER; f++) {
            itest_case_t c = {.func = f,
                              .dtype = t,
                              .op = op,
                              .count = count,
                              .root = (int)((seed + (unsigned)f) % (unsigned)n),
                              .inplace = inplace,
                              .seed = seed++};
            if (matrix_case(r, &c)) return 1;
            nops++;
          }
        }
        /* Data movement. */
        for (int f = IT_BROADCAST; f < IT_FUNC_COUNT; f++) {
          bool p2p_based = f == IT_ALLTOALL || f == IT_GATHER || f == IT_SCATTER;
          if (inplace && (p2p_based || f == IT_BCAST)) continue;
          itest_case_t c = {.func = f,
                            .dtype = t,
                            .count = count,
                            .root = n - 1 - (int)(seed % 2),
                            .inplace = inplace,
                            .seed = seed++};
          if (c.root < 0) c.root = 0;
          if (matrix_case(r, &c)) return 1;
          nops++;
        }
      }
    }
  }
  if (r->rank == 0)
    fprintf(stderr, "matrix: %d ranks, %d operations in %.1f s\n", n, nops, itest_now() - t0);
  return 0;
}

#define ALL_OPS ((1u << IT_OP_COUNT) - 1)

static void matrix_run(int nranks, const matrix_cfg_t* cfg) {
  itest_opts_t o = {.nranks = nranks, .timeout_s = 400};
  ck_assert_int_eq(itest_run(&o, matrix_body, (void*)cfg), 0);
}

START_TEST(test_matrix_2ranks) {
  matrix_cfg_t cfg = {
      .counts = {0, 1, 1001, 20011}, .ncounts = 4, .both_places = true, .op_mask = ALL_OPS};
  matrix_run(2, &cfg);
}
END_TEST

START_TEST(test_matrix_3ranks) {
  matrix_cfg_t cfg = {
      .counts = {0, 1, 777, 5003}, .ncounts = 4, .both_places = true, .op_mask = ALL_OPS};
  matrix_run(3, &cfg);
}
END_TEST

START_TEST(test_matrix_4ranks) {
  matrix_cfg_t cfg = {
      .counts = {0, 3, 1025, 9999}, .ncounts = 4, .both_places = true, .op_mask = ALL_OPS};
  matrix_run(4, &cfg);
}
END_TEST

START_TEST(test_matrix_5ranks) {
  matrix_cfg_t cfg = {.counts = {2, 333}, .ncounts = 2, .both_places = true, .op_mask = ALL_OPS};
  matrix_run(5, &cfg);
}
END_TEST

START_TEST(test_matrix_6ranks) {
  matrix_cfg_t cfg = {.counts = {7, 1111}, .ncounts = 2, .both_places = true, .op_mask = ALL_OPS};
  matrix_run(6, &cfg);
}
END_TEST

START_TEST(test_matrix_7ranks) {
  matrix_cfg_t cfg = {.counts = {1, 129}, .ncounts = 2, .both_places = true, .op_mask = ALL_OPS};
  matrix_run(7, &cfg);
}
END_TEST

START_TEST(test_matrix_8ranks) {
  matrix_cfg_t cfg = {
      .counts = {0, 1, 203, 4099}, .ncounts = 4, .both_places = true, .op_mask = ALL_OPS};
  matrix_run(8, &cfg);
}
END_TEST

static Suite* matrix_suite(void) {
  Suite* s = suite_create("coll_matrix");
  TCase* tc = tcase_create("matrix");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, test_matrix_2ranks);
  tcase_add_test(tc, test_matrix_3ranks);
  tcase_add_test(tc, test_matrix_4ranks);
  tcase_add_test(tc, test_matrix_5ranks);
  tcase_add_test(tc, test_matrix_6ranks);
  tcase_add_test(tc, test_matrix_7ranks);
  tcase_add_test(tc, test_matrix_8ranks);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(matrix_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
