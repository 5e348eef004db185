/* ncclPutSignal / ncclSignal / ncclWaitSignal (NCCL 2.29) on the host executor, 2 and 3 ranks:
 * every rank puts its own pattern into every rank's window (itself included) at an offset of its
 * own, several puts to one peer in a row, and waits for each peer's signals; at the wait's return
 * the whole window must hold what every rank put there, computed here from the ranks' numbers.
 * A late sender (it sleeps first) shows that the wait returns only after its data: every rank's
 * wait returns after the late rank's puts began (the ranks share the host's monotonic clock).
 * Windows on ncclMemAlloc memory are shared (the data goes straight into the peer's buffer),
 * windows on plain heap memory and windows between two hosts over the socket network are not (the
 * data travels in the signal's message; over the IB network between hosts, RDMA writes:
 * tests/rdma/test_ib_rma.c). ncclSignal alone makes a barrier. Bad arguments are refused with a
 * WARN. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

#define RMA_CHUNK 1000 /* ints each rank puts into each window, in NPUTS pieces */
#define RMA_NPUTS 3
#define RMA_LATE_MS 300

typedef struct rma_opts {
  bool memalloc; /* windows on ncclMemAlloc memory (shared when the ranks share a host) */
} rma_opts_t;

static int32_t pattern(int from, int to, int i, int round) {
  return (int32_t)(from * 1000003 + to * 7919 + i * 31 + round * 17 + 1);
}

static int expect_arg(ncclResult_t res, ncclComm_t comm, const char* what, const char* word) {
  IT_EXPECT(res == ncclInvalidArgument, "%s returned %s, expected ncclInvalidArgument", what,
            ncclGetErrorString(res));
  const char* last = ncclGetLastError(comm);
  IT_EXPECT(last != NULL && strstr(last, word) != NULL, "%s: last error \"%s\" lacks \"%s\"", what,
            last ? last : "(null)", word);
  return 0;
}

static int bad_arguments(ncclComm_t comm, int nranks, ncclWindow_t win, const int32_t* src) {
  size_t wbytes = (size_t)nranks * RMA_CHUNK * sizeof(int32_t);
  if (expect_arg(ncclPutSignal(src, 4, ncclInt32, 0, NULL, 0, 0, 0, 0, comm, NULL), comm,
                 "NULL window", "peerWin"))
    return 1;
  if (expect_arg(ncclPutSignal(src, 4, ncclInt32, 0, (ncclWindow_t)src, 0, 0, 0, 0, comm, NULL),
                 comm, "a pointer that is no window", "not a window"))
    return 1;
  if (expect_arg(ncclPutSignal(src, 8, ncclInt32, 0, win, wbytes - 16, 0, 0, 0, comm, NULL), comm,
                 "offset + size beyond the window", "do not fit"))
    return 1;
  if (expect_arg(ncclPutSignal(src, 1, ncclInt32, 0, win, wbytes, 0, 0, 0, comm, NULL), comm,
                 "offset at the window's end", "do not fit"))
    return 1;
  if (expect_arg(ncclPutSignal(src, 4, ncclInt32, nranks, win, 0, 0, 0, 0, comm, NULL), comm,
                 "peer out of range", "peer"))
    return 1;
  if (expect_arg(ncclPutSignal(src, 4, ncclInt32, -1, win, 0, 0, 0, 0, comm, NULL), comm,
                 "negative peer", "peer"))
    return 1;
  if (expect_arg(ncclPutSignal(NULL, 4, ncclInt32, 0, win, 0, 0, 0, 0, comm, NULL), comm,
                 "NULL localbuff", "localbuff"))
    return 1;
  if (expect_arg(ncclPutSignal(src, 4, (ncclDataType_t)99, 0, win, 0, 0, 0, 0, comm, NULL), comm,
                 "bad datatype", "datatype"))
    return 1;
  if (expect_arg(ncclSignal(0, 1, 0, 0, comm, NULL), comm, "sigIdx 1", "sigIdx")) return 1;
  if (expect_arg(ncclSignal(0, 0, 1, 0, comm, NULL), comm, "ctx 1", "ctx")) return 1;
  if (expect_arg(ncclSignal(0, 0, 0, 4, comm, NULL), comm, "flags 4", "flags")) return 1;
  ncclWaitSignalDesc_t d = {.opCnt = -1, .peer = 0, .sigIdx = 0, .ctx = 0};
  if (expect_arg(ncclWaitSignal(1, &d, comm, NULL), comm, "opCnt -1", "opCnt")) return 1;
  d = (ncclWaitSignalDesc_t){.opCnt = 1, .peer = nranks, .sigIdx = 0, .ctx = 0};
  if (expect_arg(ncclWaitSignal(1, &d, comm, NULL), comm, "wait on peer out of range", "peer"))
    return 1;
  if (expect_arg(ncclWaitSignal(1, NULL, comm, NULL), comm, "NULL descriptors", "signalDescs"))
    return 1;
  if (expect_arg(ncclWaitSignal(-1, &d, comm, NULL), comm, "nDesc -1", "nDesc")) return 1;
  /* Waiting on oneself for a signal never raised would wait forever: refused. */
  int me = -1;
  IT_NCCL(ncclCommUserRank(comm, &me));
  d = (ncclWaitSignalDesc_t){.opCnt = 1, .peer = me, .sigIdx = 0, .ctx = 0};
  ncclResult_t res = ncclWaitSignal(1, &d, comm, NULL);
  IT_EXPECT(res == ncclInvalidUsage, "self wait without a signal: %s", ncclGetErrorString(res));
  return 0;
}

static int body_rma(itest_rank_t* r, void* arg) {
  const rma_opts_t* o = arg;
  ncclComm_t comm = r->comms[0];
  const int n = r->nranks, me = r->rank;
  const size_t wcount = (size_t)n * RMA_CHUNK;
  int32_t* buf = NULL;
  if (o->memalloc)
    IT_NCCL(ncclMemAlloc((void**)&buf, wcount * sizeof(int32_t)));
  else
    buf = calloc(wcount, sizeof(int32_t));
  IT_EXPECT(buf != NULL, "no window memory");
  int32_t* src = malloc(RMA_CHUNK * sizeof(int32_t));
  IT_EXPECT(src != NULL, "no source memory");
  ncclWindow_t win = NULL;
  IT_NCCL(ncclCommWindowRegister(comm, buf, wcount * sizeof(int32_t), &win, NCCL_WIN_DEFAULT));
  if (bad_arguments(comm, n, win, src)) return 1;

  ncclWaitSignalDesc_t* d = calloc((size_t)n, sizeof(*d));
  IT_EXPECT(d != NULL, "no descriptors");
  for (int round = 0; round < 2; round++) {
    memset(buf, 0, wcount * sizeof(int32_t));
    /* Everyone's window is clear before anyone puts: a barrier of signals. */
    IT_NCCL(ncclGroupStart());
    for (int p = 0; p < n; p++) IT_NCCL(ncclSignal(p, 0, 0, 0, comm, NULL));
    IT_NCCL(ncclGroupEnd());
    for (int p = 0; p < n; p++) d[p] = (ncclWaitSignalDesc_t){.opCnt = 1, .peer = p};
    IT_NCCL(ncclWaitSignal(n, d, comm, NULL));

    double put_start = 0; /* the late sender's, on the host's monotonic clock */
    if (me == n - 1) {
      usleep(RMA_LATE_MS * 1000);
      put_start = itest_now();
    }
    for (int p = 0; p < n; p++) {
      int to = (p + me) % n; /* every rank starts with a different peer */
      for (int i = 0; i < RMA_CHUNK; i++) src[i] = pattern(me, to, i, round);
      size_t piece = RMA_CHUNK / RMA_NPUTS;
      for (int k = 0; k < RMA_NPUTS; k++) {
        size_t first = (size_t)k * piece;
        size_t cnt = k == RMA_NPUTS - 1 ? RMA_CHUNK - first : piece;
        size_t off = ((size_t)me * RMA_CHUNK + first) * sizeof(int32_t);
        IT_NCCL(ncclPutSignal(src + first, cnt, ncclInt32, to, win, off, 0, 0, 0, comm, NULL));
      }
    }
    for (int p = 0; p < n; p++) d[p] = (ncclWaitSignalDesc_t){.opCnt = RMA_NPUTS, .peer = p};
    IT_NCCL(ncclWaitSignal(n, d, comm, NULL));
    double returned = itest_now();
    for (int from = 0; from < n; from++)
      for (int i = 0; i < RMA_CHUNK; i++) {
        int32_t got = buf[(size_t)from * RMA_CHUNK + i], want = pattern(from, me, i, round);
        IT_EXPECT(got == want, "round %d: window[%d] from rank %d holds %d, expected %d", round,
                  from * RMA_CHUNK + i, from, got, want);
      }
    /* Every wait returned after the late rank began to put (ranks share the host's clock). */
    IT_NCCL(ncclAllReduce(&put_start, &put_start, 1, ncclFloat64, ncclMax, comm, NULL));
    IT_EXPECT(returned > put_start, "the wait returned at %.6f, before the late rank put at %.6f",
              returned, put_start);
  }
  /* The window is in use until every rank is done with it. */
  IT_NCCL(ncclAllReduce(src, src, 1, ncclInt32, ncclSum, comm, NULL));
  IT_NCCL(ncclCommWindowDeregister(comm, win));
  if (o->memalloc)
    IT_NCCL(ncclMemFree(buf));
  else
    free(buf);
  free(src);
  free(d);
  return 0;
}

static void run(int nranks, int nhosts, bool memalloc) {
  rma_opts_t ro = {.memalloc = memalloc};
  itest_opts_t o = {.nranks = nranks, .nhosts = nhosts, .timeout_s = 240};
  ck_assert_int_eq(itest_run(&o, body_rma, &ro), 0);
}

START_TEST(test_rma_shared_2) {
  run(2, 1, true);
}
END_TEST

START_TEST(test_rma_shared_3) {
  run(3, 1, true);
}
END_TEST

START_TEST(test_rma_heap_3) {
  run(3, 1, false);
}
END_TEST

START_TEST(test_rma_hosts_3) {
  run(3, 2, true);
}
END_TEST

static Suite* rma_suite(void) {
  Suite* s = suite_create("rma");
  TCase* tc = tcase_create("rma");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_rma_shared_2);
  tcase_add_test(tc, test_rma_shared_3);
  tcase_add_test(tc, test_rma_heap_3);
  tcase_add_test(tc, test_rma_hosts_3);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(rma_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
