/* ncclCommAbort from a watchdog thread while the ranks' threads run blocking collectives (the
 * documented way out of a hang), at random points of random operations, many times: every abort
 * returns within ABORT_WITHIN_S, every worker's call returns (an error, or success if it finished
 * first), and nothing is used after it is freed (run it under scripts/test.sh --asan). Two ranks
 * of one process on the host executor (SHM), ranks created by ncclCommInitAll. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "itest.h"

#define ITERATIONS 40
#define ABORT_WITHIN_S 1.0
#define JOIN_WITHIN_S 5.0
#define MAX_COUNT (256 << 10)

typedef struct worker {
  ncclComm_t comm;
  int rank;
  uint64_t seed;
  atomic_bool aborted; /* set by the watchdog before it aborts the comm: no more calls */
  atomic_bool done;
  int calls;
  ncclResult_t last;
  float* a;
  float* b;
} worker_t;

static uint64_t rng(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

/* One random operation; both ranks draw the same sequence (same seed), so they match. */
static ncclResult_t one_op(worker_t* w) {
  size_t count = 1 + rng(&w->seed) % MAX_COUNT;
  int peer = 1 - w->rank;
  switch (rng(&w->seed) % 6) {
    case 0:
      return ncclAllReduce(w->a, w->b, count, ncclFloat32, ncclSum, w->comm, NULL);
    case 1:
      return ncclBroadcast(w->a, w->b, count, ncclFloat32, 0, w->comm, NULL);
    case 2:
      return ncclReduceScatter(w->a, w->b, count / 2 + 1, ncclFloat32, ncclMax, w->comm, NULL);
    case 3:
      return ncclAllGather(w->a, w->b, count / 2 + 1, ncclFloat32, w->comm, NULL);
    case 4: {
      ncclResult_t r = ncclGroupStart();
      if (r == ncclSuccess) r = ncclSend(w->a, count, ncclFloat32, peer, w->comm, NULL);
      if (r == ncclSuccess) r = ncclRecv(w->b, count, ncclFloat32, peer, w->comm, NULL);
      ncclResult_t e = ncclGroupEnd();
      return r != ncclSuccess ? r : e;
    }
    default:
      return ncclAlltoAll(w->a, w->b, count / 2 + 1, ncclFloat32, w->comm, NULL);
  }
}

static void* worker_main(void* p) {
  worker_t* w = p;
  while (!atomic_load(&w->aborted)) {
    w->last = one_op(w);
    if (w->last != ncclSuccess) break;
    w->calls++;
  }
  atomic_store(&w->done, true);
  return NULL;
}

static void sleep_us(long us) {
  struct timespec ts = {.tv_sec = us / 1000000, .tv_nsec = (us % 1000000) * 1000};
  nanosleep(&ts, NULL);
}

START_TEST(test_abort_at_random_points) {
  uint64_t seed = 0x51ab0a7du;
  float* bufs = calloc((size_t)8 * MAX_COUNT, sizeof(float));
  ck_assert_ptr_nonnull(bufs);
  double worst_abort = 0, worst_join = 0;
  int total_calls = 0, interrupted = 0;
  for (int it = 0; it < ITERATIONS; it++) {
    ncclComm_t comms[2];
    ck_assert_int_eq(ncclCommInitAll(comms, 2, NULL), ncclSuccess);
    worker_t w[2];
    uint64_t op_seed = rng(&seed) | 1;
    pthread_t t[2];
    for (int r = 0; r < 2; r++) {
      memset(&w[r], 0, sizeof(w[r]));
      w[r].comm = comms[r];
      w[r].rank = r;
      w[r].seed = op_seed;
      w[r].a = bufs + (size_t)(4 * r) * MAX_COUNT;
      w[r].b = bufs + (size_t)(4 * r + 2) * MAX_COUNT;
      ck_assert_int_eq(pthread_create(&t[r], NULL, worker_main, &w[r]), 0);
    }
    /* Abort at a random point: right away, or after some operations; one rank, a pause (the
     * other keeps waiting on it), then the other. */
    sleep_us((long)(rng(&seed) % 20000));
    int first = (int)(rng(&seed) % 2);
    for (int k = 0; k < 2; k++) {
      int r = k == 0 ? first : 1 - first;
      atomic_store(&w[r].aborted, true);
      double a0 = itest_now();
      ck_assert_int_eq(ncclCommAbort(comms[r]), ncclSuccess);
      double took = itest_now() - a0;
      if (took > worst_abort) worst_abort = took;
      ck_assert_msg(took < ABORT_WITHIN_S, "iteration %d: abort of rank %d took %.3f s", it, r,
                    took);
      if (k == 0) sleep_us((long)(rng(&seed) % 5000));
    }
    double j0 = itest_now();
    for (int r = 0; r < 2; r++) {
      while (!atomic_load(&w[r].done) && itest_now() - j0 < JOIN_WITHIN_S) sleep_us(1000);
      ck_assert_msg(atomic_load(&w[r].done), "iteration %d: rank %d's call never returned", it, r);
      pthread_join(t[r], NULL);
      total_calls += w[r].calls;
      interrupted += w[r].last != ncclSuccess;
    }
    if (itest_now() - j0 > worst_join) worst_join = itest_now() - j0;
  }
  fprintf(stderr, "%d iterations, %d calls completed, %d interrupted; worst abort %.3f s\n",
          ITERATIONS, total_calls, interrupted, worst_abort);
  ck_assert_int_gt(interrupted, ITERATIONS / 2); /* most aborts hit a call in flight */
  free(bufs);
}
END_TEST

int main(void) {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  Suite* s = suite_create("coll_abort");
  TCase* tc = tcase_create("abort");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_abort_at_random_points);
  suite_add_tcase(s, tc);
  SRunner* sr = srunner_create(s);
  srunner_set_fork_status(sr, CK_NOFORK);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
