/* A killed peer: after one good operation, one rank dies (SIGKILL). The survivors' next
 * operation must fail within seconds (the call's result or ncclCommGetAsyncError), and
 * ncclCommAbort must return promptly. On one host (SHM) and across "hosts" (NET), blocking and
 * nonblocking.
 *
 * The survivors' ncclGetLastError(comm) must explain the failure: whichever thread saw it (the
 * caller's channel 0, a worker channel with NCCL_MIN_NCHANNELS=2, the proxy). Where every
 * survivor waits on the victim directly (3 ranks on 3 hosts: the proxy watches every NET
 * connection), each must name the victim; survivors then wait for each other before aborting, so
 * none fails because another one left instead. On one host the ring runs one way (0 -> 1 -> 2):
 * rank 1 only sends to the victim, and may fail on rank 0 instead. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "itest.h"

#define FAIL_WITHIN_S 20.0 /* generous for a loaded 2-core machine; typical is well under 2 s */
#define ABORT_WITHIN_S 10.0
#define HOLD_WITHIN_S 10.0 /* survivors waiting for each other before aborting */

/* Shared by the forked ranks (MAP_SHARED before the fork). */
typedef struct fault_shared {
  atomic_int failed; /* survivors that have seen their failure */
  atomic_int named;  /* survivors whose last error names the victim */
} fault_shared_t;

typedef struct fault_cfg {
  int victim;
  bool p2p;       /* the failing operation is a send/recv exchange instead of an AllReduce */
  bool must_name; /* every survivor's last error names the victim (and survivors hold) */
  fault_shared_t* sh;
} fault_cfg_t;

/* Whether text contains "rank <r>" (any case) not followed by another digit. */
static bool names_rank(const char* text, int r) {
  char want[32];
  snprintf(want, sizeof(want), "rank %d", r);
  size_t n = strlen(want);
  for (const char* p = text; (p = strcasestr(p, want)) != NULL; p += n)
    if (p[n] < '0' || p[n] > '9') return true;
  return false;
}

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
  IT_EXPECT(msg != NULL && msg[0] != '\0', "rank %d: ncclGetLastError is empty after the failure",
            r->rank);
  bool named = names_rank(msg, cfg->victim);
  if (named) atomic_fetch_add(&cfg->sh->named, 1);
  atomic_fetch_add(&cfg->sh->failed, 1);
  IT_EXPECT(!cfg->must_name || named, "rank %d: last error does not name dead rank %d: %s", r->rank,
            cfg->victim, msg);
  if (cfg->must_name) {
    double h0 = itest_now();
    while (atomic_load(&cfg->sh->failed) < r->nranks - 1 && itest_now() - h0 < HOLD_WITHIN_S)
      usleep(1000);
  }

  double a0 = itest_now();
  IT_NCCL(ncclCommAbort(comm));
  r->comms[0] = NULL;
  double abort_s = itest_now() - a0;
  IT_EXPECT(abort_s < ABORT_WITHIN_S, "rank %d: ncclCommAbort took %.1f s", r->rank, abort_s);
  free(buf);
  return 0;
}

/* named_min: how many survivors' last errors must name the victim (checked across processes;
 * with must_name, every survivor checks itself too). */
static void fault_run(int nranks, int nhosts, bool nonblocking, int victim, bool p2p,
                      bool must_name, int named_min) {
  fault_shared_t* sh =
      mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
  atomic_init(&sh->failed, 0);
  atomic_init(&sh->named, 0);
  fault_cfg_t cfg = {.victim = victim, .p2p = p2p, .must_name = must_name, .sh = sh};
  itest_opts_t o = {.nranks = nranks,
                    .nhosts = nhosts,
                    .nonblocking = nonblocking,
                    .timeout_s = 40,
                    .env = {"NCCL_MIN_NCHANNELS=2"}, /* channel 1 runs on a worker thread */
                    .may_die = 1u << victim};
  ck_assert_int_eq(itest_run(&o, fault_body, &cfg), 0);
  ck_assert_int_eq(atomic_load(&sh->failed), nranks - 1);
  ck_assert_int_ge(atomic_load(&sh->named), named_min);
  munmap(sh, sizeof(*sh));
}

/* Rank 0 receives from the victim and must name it; rank 1 waits on rank 0. */
START_TEST(test_killed_peer_shm) {
  fault_run(3, 1, false, 2, false, false, 1);
}
END_TEST

/* Rank 3 may only wait on survivors, and fail when one of them leaves: at least one names it. */
START_TEST(test_killed_peer_net) {
  fault_run(4, 2, false, 1, false, false, 1);
}
END_TEST

/* Every survivor reaches the victim over NET only. */
START_TEST(test_killed_peer_net_named) {
  fault_run(3, 3, false, 2, false, true, 2);
}
END_TEST

/* The first p2p exchange with a peer connects at run time, through the bootstrap, which must
 * notice that the peer is dead instead of waiting for its connect info. */
START_TEST(test_killed_peer_p2p) {
  fault_run(3, 1, false, 0, true, true, 2);
}
END_TEST

START_TEST(test_killed_peer_nonblocking) {
  fault_run(3, 3, true, 1, false, true, 2);
}
END_TEST

static Suite* fault_suite(void) {
  Suite* s = suite_create("coll_fault");
  TCase* tc = tcase_create("fault");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_killed_peer_shm);
  tcase_add_test(tc, test_killed_peer_net);
  tcase_add_test(tc, test_killed_peer_net_named);
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
