/* Version, error strings (stock's texts) and the last error: per thread for NULL, per
 * communicator otherwise, including errors of a nonblocking init that fail in the background. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"
#include "fork_ranks.h"
#include "unit.h"

START_TEST(test_version) {
  int v = 0;
  ck_assert_int_eq(ncclGetVersion(&v), ncclSuccess);
  ck_assert_int_eq(v, 23203); /* stock 2.32.3's */
  ck_assert_int_eq(v, NCCL_VERSION_CODE);
  ck_assert_int_eq(v, NCCL_VERSION(2, 32, 3));
}
END_TEST

START_TEST(test_error_strings) {
  static const struct {
    ncclResult_t code;
    const char* text;
  } expected[] = {
      {ncclSuccess, "no error"},
      {ncclUnhandledCudaError, "unhandled cuda error (run with NCCL_DEBUG=INFO for details)"},
      {ncclSystemError, "unhandled system error (run with NCCL_DEBUG=INFO for details)"},
      {ncclInternalError, "internal error - please report this issue to the NCCL developers"},
      {ncclInvalidArgument, "invalid argument (run with NCCL_DEBUG=WARN for details)"},
      {ncclInvalidUsage, "invalid usage (run with NCCL_DEBUG=WARN for details)"},
      {ncclRemoteError, "remote process exited or there was a network error"},
      {ncclInProgress, "NCCL operation in progress"},
      {ncclTimeout, "timeout"}, /* 2.29 */
  };
  size_t n = sizeof(expected) / sizeof(expected[0]);
  ck_assert_int_eq(n, ncclNumResults);
  for (size_t i = 0; i < n; i++)
    ck_assert_str_eq(ncclGetErrorString(expected[i].code), expected[i].text);
  ck_assert_str_eq(ncclGetErrorString(ncclNumResults), "unknown result code");
  ck_assert_str_eq(ncclGetErrorString((ncclResult_t)99), "unknown result code");
  ck_assert_str_eq(ncclGetErrorString((ncclResult_t)-1), "unknown result code");
}
END_TEST

/* ---- Last error per thread ------------------------------------------------------------------ */
typedef struct thread_err {
  char seen_before[256];
  char seen_after[256];
} thread_err_t;

static void* bad_call_thread(void* arg) {
  thread_err_t* t = arg;
  snprintf(t->seen_before, sizeof(t->seen_before), "%s", ncclGetLastError(NULL));
  int n;
  (void)ncclCommUserRank(NULL, &n);
  snprintf(t->seen_after, sizeof(t->seen_after), "%s", ncclGetLastError(NULL));
  return NULL;
}

START_TEST(test_last_error_per_thread) {
  ck_assert_int_eq(ncclGetUniqueId(NULL), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ncclGetUniqueId"));
  thread_err_t t;
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, bad_call_thread, &t), 0);
  pthread_join(th, NULL);
  ck_assert_str_eq(t.seen_before, ""); /* a new thread has no error of its own */
  ck_assert_ptr_nonnull(strstr(t.seen_after, "ncclCommUserRank"));
  /* The other thread's error did not replace this thread's. */
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ncclGetUniqueId"));
}
END_TEST

/* ---- Last error per communicator ----------------------------------------------------------------
 */
START_TEST(test_last_error_per_comm) {
  ncclComm_t a = unit_one_rank_comm(), b = unit_one_rank_comm();
  ck_assert_str_eq(a->last_error, "");
  ck_assert_int_eq(ncclCommCount(a, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommUserRank(b, NULL), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(a), "argument count"));
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(b), "argument rank"));
  /* A later error without a comm goes to the thread only: a's slot is no longer bound. */
  ck_assert_int_eq(ncclGetUniqueId(NULL), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(a), "argument count"));
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ncclGetUniqueId"));
  /* Reading the error does not clear it. */
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(a), "argument count"));
  ck_assert_int_eq(ncclCommDestroy(a), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(b), ncclSuccess);
}
END_TEST

/* A nonblocking init whose root is unreachable fails on its own thread: the error is the comm's
 * async error and its last error, the comm refuses use and destroy (as stock), abort frees it. */
START_TEST(test_nonblocking_init_failure) {
  setenv("NCCL_SOCKET_RETRY_CNT", "1", 1);
  setenv("NCCL_SOCKET_RETRY_SLEEP_MSEC", "10", 1);
  param_reload();
  int port = fork_ranks_free_port(); /* nobody listens there */
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  bootstrap_handle_t h;
  memset(&h, 0, sizeof(h));
  h.magic = 0x1234;
  ck_assert_int_eq(socket_addr_parse(addr, &h.addr), ncclSuccess);
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  memcpy(&id, &h, sizeof(h));

  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 2, id, 1, &cfg), ncclInProgress);
  ncclResult_t st = ncclInProgress;
  uint64_t t0 = clock_ns();
  while (st == ncclInProgress && clock_ns() - t0 < 10000000000ull) {
    ck_assert_int_eq(ncclCommGetAsyncError(comm, &st), ncclSuccess);
    usleep(2000);
  }
  ck_assert(st != ncclInProgress && st != ncclSuccess);
  char port_text[16];
  snprintf(port_text, sizeof(port_text), "%d", port);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), port_text));
  int n;
  ck_assert_int_eq(ncclCommCount(comm, &n), st);
  ck_assert_int_eq(ncclCommDestroy(comm), st);
  ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);

  /* The same failure in blocking mode: the error is returned and nothing is written. */
  ncclComm_t blocking = (ncclComm_t)&blocking;
  ck_assert_int_eq(ncclCommInitRank(&blocking, 2, id, 1), st);
  ck_assert_ptr_eq(blocking, (ncclComm_t)&blocking);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), port_text));
}
END_TEST

int main(void) {
  setenv("CUDA_VISIBLE_DEVICES", "", 1); /* host executor */
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  Suite* s = suite_create("errors");
  TCase* tc = tcase_create("errors");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_version);
  tcase_add_test(tc, test_error_strings);
  tcase_add_test(tc, test_last_error_per_thread);
  tcase_add_test(tc, test_last_error_per_comm);
  tcase_add_test(tc, test_nonblocking_init_failure);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
