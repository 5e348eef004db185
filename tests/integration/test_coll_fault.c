/* A killed peer: after one good operation, one rank dies (SIGKILL). The survivors' next
 * operation must fail within seconds (the call's result or ncclCommGetAsyncError), and
 * ncclCommAbort must return promptly. On one host (SHM) and across "hosts" (NET), blocking and
 * nonblocking. */
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

#define FAIL_WITHIN_S 20.0 /* generous for a loaded 2-core machine; typical is well under 2 s */
#define ABORT_WITHIN_S 10.0

typedef struct fault_cfg {
  int victim;
  bool p2p; /* the failing operation is a send/recv exchange instead of an AllReduce */
} fault_cfg_t;

static int fault_body(itest_rank_t* r, void* arg) {
  const fault_cfg_t* cfg = arg;
  ncclComm_t comm = r->comms[0];
  bool nonblocking = r->opts->nonblocking;
  size_t count = 1 << 20;
  float* buf = malloc(count * sizeof(float));
  IT_EXPECT(buf != NULL, "out of memory");
  for (size_t i = 0; i < count; i++) buf[i] = 1.0f;

  /* One good operation: connections exist, every rank is known alive. */
  ncclResult_t res = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL);
  ncclResult_t st = res;
  double deadline = itest_now() + 30;
  while (st == ncclInProgress && itest_now() < deadline) {
    IT_NCCL(ncclCommGetAsyncError(comm, &st));
    usleep(500);
  }
  IT_EXPECT(st == ncclSuccess, "first AllReduce: %d", (int)st);
  IT_EXPECT(buf[0] == (float)r->nranks, "first AllReduce result %g", buf[0]);

  if (r->rank == cfg->victim) {
    kill(getpid(), SIGKILL);
    pause();
  }
  usleep(100 * 1000); /* let the victim go first */

  double t0 = itest_now();
  if (cfg->p2p) {
    int n = r->nranks;
    IT_NCCL(ncclGroupStart());
    for (int p = 0; p < n; p++) {
      if (p == r->rank) continue;
      IT_NCCL(ncclSend(buf, count / n, ncclFloat32, p, comm, NULL));
      IT_NCCL(ncclRecv(buf + (count / n), count / n, ncclFloat32, p, comm, NULL));
    }
    res = ncclGroupEnd();
  } else {
    res = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL);
  }
  ncclResult_t async = ncclSuccess;
  while (itest_now() - t0 < FAIL_WITHIN_S + 5) {
    IT_NCCL(ncclCommGetAsyncError(comm, &async));
    if (async != ncclInProgress) break;
    usleep(1000);
  }
  double failed_after = itest_now() - t0;
  bool failed = (res != ncclSuccess && res != ncclInProgress) ||
                (async != ncclSuccess && async != ncclInProgress);
  IT_EXPECT(failed, "rank %d: operation with a dead peer returned %d, async %d", r->rank, (int)res,
            (int)async);
  IT_EXPECT(failed_after < FAIL_WITHIN_S, "rank %d: the failure took %.1f s", r->rank,
            failed_after);
  IT_EXPECT(!nonblocking || res == ncclInProgress || res != ncclSuccess,
            "nonblocking: call returned %d", (int)res);
  const char* msg = ncclGetLastError(comm);
  fprintf(stderr, "rank %d: failed after %.2f s (result %d, async %d): %s\n", r->rank, failed_after,
          (int)res, (int)async, msg ? msg : "");

  double a0 = itest_now();
  IT_NCCL(ncclCommAbort(comm));
  r->comms[0] = NULL;
  double abort_s = itest_now() - a0;
  IT_EXPECT(abort_s < ABORT_WITHIN_S, "rank %d: ncclCommAbort took %.1f s", r->rank, abort_s);
  free(buf);
  return 0;
}

static void fault_run(int nranks, int nhosts, bool nonblocking, int victim, bool p2p) {
  fault_cfg_t cfg = {.victim = victim, .p2p = p2p};
  itest_opts_t o = {.nranks = nranks,
                    .nhosts = nhosts,
                    .nonblocking = nonblocking,
                    .timeout_s = 40,
                    .may_die = 1u << victim};
  ck_assert_int_eq(itest_run(&o, fault_body, &cfg), 0);
}

START_TEST(test_killed_peer_shm) {
  fault_run(3, 1, false, 2, false);
}
END_TEST

START_TEST(test_killed_peer_net) {
  fault_run(4, 2, false, 1, false);
}
END_TEST

START_TEST(test_killed_peer_p2p) {
  fault_run(3, 1, false, 0, true);
}
END_TEST

START_TEST(test_killed_peer_nonblocking) {
  fault_run(3, 3, true, 1, false);
}
END_TEST

static Suite* fault_suite(void) {
  Suite* s = suite_create("coll_fault");
  TCase* tc = tcase_create("fault");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_killed_peer_shm);
  tcase_add_test(tc, test_killed_peer_net);
  tcase_add_test(tc, test_killed_peer_p2p);
  tcase_add_test(tc, test_killed_peer_nonblocking);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(fault_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
