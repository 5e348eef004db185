/* ncclCommGetUniqueId + ncclCommGrow (NCCL 2.29) on the host executor: two ranks make a
 * communicator, rank 0 asks it for an id and hands it to a third process (through a file, the
 * user's means), the two grow it to three with the newcomer: ranks kept, every collective's
 * results right on the grown communicator, the old one still working beside it. Then the grown
 * three grow again to four with a config of their own (nonblocking). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "itest.h"

/* The id's hand-over: a file named after the test's parent process, written whole then renamed. */
static void id_path(char* out, size_t cap, int round) {
  snprintf(out, cap, "/tmp/baton_grow_%d_%d.id", (int)getppid(), round);
}

static int id_put(const ncclUniqueId* id, int round) {
  char path[128], tmp[160];
  id_path(path, sizeof(path), round);
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE* f = fopen(tmp, "wb");
  IT_EXPECT(f != NULL, "cannot write %s", tmp);
  IT_EXPECT(fwrite(id, sizeof(*id), 1, f) == 1, "short write");
  fclose(f);
  IT_EXPECT(rename(tmp, path) == 0, "rename %s", path);
  return 0;
}

static int id_get(ncclUniqueId* id, int round) {
  char path[128];
  id_path(path, sizeof(path), round);
  for (int i = 0; i < 6000; i++) { /* up to 60 s */
    FILE* f = fopen(path, "rb");
    if (f != NULL) {
      size_t n = fread(id, sizeof(*id), 1, f);
      fclose(f);
      IT_EXPECT(n == 1, "short read of %s", path);
      return 0;
    }
    usleep(10000);
  }
  IT_EXPECT(0, "no id in %s", path);
  return 1;
}

static int check_all_funcs(ncclComm_t comm, int nranks, uint32_t seed) {
  int n = 0, me = -1;
  IT_NCCL(ncclCommCount(comm, &n));
  IT_EXPECT(n == nranks, "the grown communicator has %d ranks, expected %d", n, nranks);
  IT_NCCL(ncclCommUserRank(comm, &me));
  for (int f = 0; f < IT_FUNC_COUNT; f++) {
    itest_case_t c = {.func = f,
                      .dtype = f % 2 ? ncclFloat32 : ncclInt64,
                      .op = IT_SUM,
                      .count = 1000 + 13 * (size_t)f,
                      .root = f % nranks,
                      .seed = seed + (uint32_t)f};
    if (itest_op_run(comm, &c)) return 1;
  }
  return 0;
}

static int wait_ready(ncclComm_t comm) {
  ncclResult_t st = ncclInProgress;
  for (int i = 0; i < 60000 && st == ncclInProgress; i++) {
    IT_NCCL(ncclCommGetAsyncError(comm, &st));
    if (st == ncclInProgress) usleep(1000);
  }
  IT_EXPECT(st == ncclSuccess, "nonblocking init ended with %s", ncclGetErrorString(st));
  return 0;
}

static int body_grow(itest_rank_t* r, void* arg) {
  ncclComm_t small = NULL, grown = NULL, four = NULL;
  ncclUniqueId id;
  if (r->rank < 2) {
    IT_NCCL(ncclCommInitRank(&small, 2, r->ids[0], r->rank));
    if (check_all_funcs(small, 2, 10)) return 1;
    if (r->rank == 0) {
      IT_NCCL(ncclCommGetUniqueId(small, &id));
      if (id_put(&id, 1)) return 1;
    }
    IT_NCCL(ncclCommGrow(small, 3, r->rank == 0 ? &id : NULL, -1, &grown, NULL));
    int me = -1;
    IT_NCCL(ncclCommUserRank(grown, &me));
    IT_EXPECT(me == r->rank, "rank %d became %d", r->rank, me);
    if (check_all_funcs(small, 2, 20)) return 1; /* the parent is untouched */
  } else if (r->rank == 2) {
    if (id_get(&id, 1)) return 1;
    IT_NCCL(ncclCommGrow(NULL, 3, &id, 2, &grown, NULL));
  }
  if (r->rank < 3 && check_all_funcs(grown, 3, 30)) return 1;

  /* Three grow to four, nonblocking. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  if (r->rank < 3) {
    if (r->rank == 1) {
      IT_NCCL(ncclCommGetUniqueId(grown, &id));
      if (id_put(&id, 2)) return 1;
    }
    ncclResult_t res = ncclCommGrow(grown, 4, r->rank == 1 ? &id : NULL, -1, &four, &cfg);
    IT_EXPECT(res == ncclSuccess || res == ncclInProgress, "grow to 4: %s",
              ncclGetErrorString(res));
  } else {
    if (id_get(&id, 2)) return 1;
    ncclResult_t res = ncclCommGrow(NULL, 4, &id, 3, &four, &cfg);
    IT_EXPECT(res == ncclSuccess || res == ncclInProgress, "new rank 3: %s",
              ncclGetErrorString(res));
  }
  if (wait_ready(four)) return 1;
  int n = 0, me = -1;
  IT_NCCL(ncclCommCount(four, &n));
  IT_EXPECT(n == 4, "four has %d ranks", n);
  IT_NCCL(ncclCommUserRank(four, &me));
  IT_EXPECT(me == r->rank, "rank %d is %d in four", r->rank, me);
  IT_NCCL(ncclCommDestroy(four));
  if (grown != NULL) IT_NCCL(ncclCommDestroy(grown));
  if (small != NULL) IT_NCCL(ncclCommDestroy(small));
  if (r->rank == 0) {
    char path[128];
    for (int k = 1; k <= 2; k++) {
      id_path(path, sizeof(path), k);
      (void)unlink(path);
    }
  }
  return 0;
}

START_TEST(test_grow_2_3_4) {
  itest_opts_t o = {.nranks = 4, .no_init = true, .timeout_s = 240};
  ck_assert_int_eq(itest_run(&o, body_grow, NULL), 0);
}
END_TEST

static Suite* grow_suite(void) {
  Suite* s = suite_create("comm_grow");
  TCase* tc = tcase_create("grow");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_grow_2_3_4);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(grow_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
