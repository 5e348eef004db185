/* The killed-peer case shared by tests/integration/test_coll_fault.c (SHM, socket NET) and
 * tests/rdma/test_ib_faults.c (IB): see itest_fault.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "itest_fault.h"

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
  bool must_name; /* every survivor's last error names the victim */
  bool hold;      /* survivors wait for each other before aborting (no cascade) */
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
  if (cfg->hold) {
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

static void fault_run(int nranks, int nhosts, bool nonblocking, int victim, bool p2p,
                      bool must_name, bool hold, int named_min, const char* const* env) {
  fault_shared_t* sh =
      mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
  atomic_init(&sh->failed, 0);
  atomic_init(&sh->named, 0);
  fault_cfg_t cfg = {.victim = victim, .p2p = p2p, .must_name = must_name, .hold = hold, .sh = sh};
  itest_opts_t o = {.nranks = nranks,
                    .nhosts = nhosts,
                    .nonblocking = nonblocking,
                    .timeout_s = 40,
                    .env = {"NCCL_MIN_NCHANNELS=2"}, /* channel 1 runs on a worker thread */
                    .may_die = 1u << victim};
  for (int i = 0; env != NULL && env[i] != NULL && i + 1 < ITEST_MAX_ENV; i++)
    o.env[i + 1] = env[i];
  ck_assert_int_eq(itest_run(&o, fault_body, &cfg), 0);
  ck_assert_int_eq(atomic_load(&sh->failed), nranks - 1);
  ck_assert_int_ge(atomic_load(&sh->named), named_min);
  munmap(sh, sizeof(*sh));
}

void itest_fault_run(int nranks, int nhosts, bool nonblocking, int victim, bool p2p, bool must_name,
                     int named_min, const char* const* env) {
  fault_run(nranks, nhosts, nonblocking, victim, p2p, must_name, must_name, named_min, env);
}

void itest_fault_cascade(int nranks, int nhosts, int victim) {
  fault_run(nranks, nhosts, false, victim, false, true, false, nranks - 1, NULL);
}
