/* A group of the same tasks as the last one runs the plan kept from it (coll_plan_reuse): the
 * results stay right, the plan is kept only for equal tasks (other buffers, a registration in
 * between: planned again; test_coll_plan checks every field of the key), and a group of several
 * operations is kept whole. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/collectives.h"
#include "itest.h"

static uint64_t reuses(ncclComm_t comm) {
  return comm->coll->plan_reuses;
}

/* Runs o again on the same buffers, its output poisoned first so that a run that writes
 * elsewhere fails the check. */
static int rerun(itest_op_t* o) {
  memset(o->recv, 0x5a, o->recv_elems * itest_type_size(o->c.dtype));
  IT_NCCL(itest_op_post(o));
  return itest_op_check(o);
}

static int reuse_body(itest_rank_t* r, void* arg) {
  (void)arg;
  ncclComm_t comm = r->comms[0];
  itest_case_t ca = {.func = IT_ALLREDUCE, .dtype = ncclFloat32, .op = IT_SUM, .count = 10001};
  itest_op_t a, b, c;
  ca.seed = 1;
  if (itest_op_prepare(&a, comm, &ca)) return 1;
  ca.seed = 2;
  if (itest_op_prepare(&b, comm, &ca)) return 1; /* the same task on other buffers */
  itest_case_t cc = {.func = IT_BROADCAST, .dtype = ncclInt32, .count = 3001, .root = 0, .seed = 3};
  if (itest_op_prepare(&c, comm, &cc)) return 1;

  /* the same task twice: planned once */
  IT_NCCL(itest_op_post(&a));
  if (itest_op_check(&a)) return 1;
  uint64_t before = reuses(comm);
  if (rerun(&a)) return 1;
  IT_EXPECT(reuses(comm) == before + 1, "the repeated AllReduce was planned again");
  /* other buffers: planned again, and the result lands in b's buffers */
  before = reuses(comm);
  if (rerun(&b)) return 1;
  IT_EXPECT(reuses(comm) == before, "an AllReduce on other buffers ran the kept plan");
  /* a Broadcast, then the same again: kept */
  IT_NCCL(itest_op_post(&c));
  if (itest_op_check(&c)) return 1;
  before = reuses(comm);
  if (rerun(&c)) return 1;
  IT_EXPECT(reuses(comm) == before + 1, "the repeated Broadcast was planned again");
  /* a registration in between: planned again */
  size_t rbytes = 4096;
  void* rbuf = malloc(rbytes);
  void* handle = NULL;
  IT_EXPECT(rbuf != NULL, "malloc");
  IT_NCCL(ncclCommRegister(comm, rbuf, rbytes, &handle));
  before = reuses(comm);
  if (rerun(&c)) return 1;
  IT_EXPECT(reuses(comm) == before, "a registration did not invalidate the kept plan");
  IT_NCCL(ncclCommDeregister(comm, handle));
  free(rbuf);
  /* a group of two operations, twice: the second group runs the kept plan */
  for (int k = 0; k < 2; k++) {
    memset(a.recv, 0x5a, a.recv_elems * itest_type_size(a.c.dtype));
    memset(c.recv, 0x5a, c.recv_elems * itest_type_size(c.c.dtype));
    before = reuses(comm);
    IT_NCCL(ncclGroupStart());
    IT_NCCL(itest_op_post(&a));
    IT_NCCL(itest_op_post(&c));
    IT_NCCL(ncclGroupEnd());
    if (itest_op_check(&a) || itest_op_check(&c)) return 1;
    IT_EXPECT(reuses(comm) == before + (uint64_t)k, "group %d: %llu kept plans run", k,
              (unsigned long long)(reuses(comm) - before));
  }
  itest_op_release(&a);
  itest_op_release(&b);
  itest_op_release(&c);
  return 0;
}

START_TEST(test_plan_reuse) {
  itest_opts_t o = {.nranks = 3};
  ck_assert_int_eq(itest_run(&o, reuse_body, NULL), 0);
}
END_TEST

static Suite* suite(void) {
  Suite* s = suite_create("coll_reuse");
  TCase* tc = tcase_create("reuse");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_plan_reuse);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
