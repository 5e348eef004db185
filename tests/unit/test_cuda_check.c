/* The CUDA checking macros (base.h): a failing runtime or driver call WARNs naming the call as
 * written and its file:line, clears the runtime's last error and yields ncclUnhandledCudaError;
 * cuda_accept reads an expected error as success. Failing calls come from the runtime itself
 * (cudaSetDevice of an ordinal no machine has: cudaErrorNoDevice or cudaErrorInsufficientDriver
 * without a GPU, cudaErrorInvalidDevice with one) and, for the driver twin, from a stand-in that
 * returns a given CUresult. */
#include <check.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "unit.h"

#define NO_SUCH_DEVICE 12345

static void setup(void) {
  log_reset();
  log_clear_last_error();
  (void)cudaGetLastError();
}

/* Whether the runtime's last error can be cleared here: without a driver it cannot
 * (cudaErrorInsufficientDriver stays), and the check that the macros clear it says SKIP. */
static bool errors_clear(void) {
  (void)cudaSetDevice(NO_SUCH_DEVICE);
  (void)cudaGetLastError();
  if (cudaGetLastError() == cudaSuccess) return true;
  fprintf(stderr, "SKIP: the runtime's last error stays set here (%s): clearing is not checked\n",
          cudaGetErrorString(cudaGetLastError()));
  return false;
}

static ncclResult_t set_bad_device(void) {
  CUDA_CHECK(cudaSetDevice(NO_SUCH_DEVICE));
  return ncclSuccess;
}

static int cleanup_ran;
static ncclResult_t set_bad_device_goto(void) {
  ncclResult_t res = ncclSuccess;
  cleanup_ran = 0;
  CUDA_CHECK_GOTO(cudaSetDevice(NO_SUCH_DEVICE), res, cleanup);
  return ncclInternalError; /* not reached when the call fails */
cleanup:
  cleanup_ran = 1;
  return res;
}

static CUresult cu_stand_in(CUresult res) {
  return res;
}

static ncclResult_t driver_fails(void) {
  CU_CHECK(cu_stand_in(CUDA_ERROR_OUT_OF_MEMORY));
  return ncclSuccess;
}

static ncclResult_t driver_fails_goto(void) {
  ncclResult_t res = ncclSuccess;
  cleanup_ran = 0;
  CU_CHECK_GOTO(cu_stand_in(CUDA_ERROR_INVALID_VALUE), res, cleanup);
  return ncclInternalError;
cleanup:
  cleanup_ran = 1;
  return res;
}

static ncclResult_t driver_succeeds(void) {
  CU_CHECK(cu_stand_in(CUDA_SUCCESS));
  return ncclSuccess;
}

START_TEST(test_runtime_failure_warns_and_returns) {
  bool clearable = errors_clear();
  cudaError_t expect = cudaSetDevice(NO_SUCH_DEVICE);
  ck_assert_int_ne(expect, cudaSuccess);
  (void)cudaGetLastError();
  ck_assert_int_eq(set_bad_device(), ncclUnhandledCudaError);
  const char* w = log_last_error();
  ck_assert_msg(strstr(w, "cudaSetDevice(NO_SUCH_DEVICE)") != NULL, "WARN lacks the call: %s", w);
  ck_assert_msg(strstr(w, "test_cuda_check.c:") != NULL, "WARN lacks file:line: %s", w);
  ck_assert_msg(strstr(w, cudaGetErrorString(expect)) != NULL, "WARN lacks the CUDA text: %s", w);
  /* The error was reported: the runtime's last-error state no longer holds it. */
  if (clearable) ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
}
END_TEST

START_TEST(test_runtime_failure_goto) {
  bool clearable = errors_clear();
  ck_assert_int_eq(set_bad_device_goto(), ncclUnhandledCudaError);
  ck_assert_int_eq(cleanup_ran, 1);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "cudaSetDevice(NO_SUCH_DEVICE)"));
  if (clearable) ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
}
END_TEST

START_TEST(test_accept_reads_expected_error_as_success) {
  bool clearable = errors_clear();
  cudaError_t expect = cudaSetDevice(NO_SUCH_DEVICE);
  (void)cudaGetLastError();
  ck_assert_int_eq(cuda_accept(cudaSetDevice(NO_SUCH_DEVICE), expect), cudaSuccess);
  if (clearable) ck_assert_int_eq(cudaGetLastError(), cudaSuccess);
  /* Any other error passes through. */
  ck_assert_int_eq(cuda_accept(cudaSetDevice(NO_SUCH_DEVICE), cudaErrorPeerAccessAlreadyEnabled),
                   expect);
  (void)cudaGetLastError();
}
END_TEST

START_TEST(test_driver_failure_warns_and_returns) {
  ck_assert_int_eq(driver_succeeds(), ncclSuccess);
  ck_assert_str_eq(log_last_error(), "");
  ck_assert_int_eq(driver_fails(), ncclUnhandledCudaError);
  const char* w = log_last_error();
  ck_assert_msg(strstr(w, "cu_stand_in(CUDA_ERROR_OUT_OF_MEMORY)") != NULL, "WARN: %s", w);
  ck_assert_msg(strstr(w, cu_error_text(CUDA_ERROR_OUT_OF_MEMORY)) != NULL, "WARN: %s", w);
  ck_assert_int_eq(driver_fails_goto(), ncclUnhandledCudaError);
  ck_assert_int_eq(cleanup_ran, 1);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "cu_stand_in(CUDA_ERROR_INVALID_VALUE)"));
}
END_TEST

/* A failing check inside an error-sink scope lands in the bound buffer (a communicator's slot). */
START_TEST(test_failure_reaches_bound_sink) {
  char sink[256] = "";
  {
    LOG_SINK_SCOPE(sink, sizeof(sink));
    ck_assert_int_eq(set_bad_device(), ncclUnhandledCudaError);
  }
  ck_assert_ptr_nonnull(strstr(sink, "cudaSetDevice(NO_SUCH_DEVICE)"));
}
END_TEST

int main(void) {
  Suite* s = suite_create("cuda_check");
  TCase* tc = tcase_create("checks");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_add_test(tc, test_runtime_failure_warns_and_returns);
  tcase_add_test(tc, test_runtime_failure_goto);
  tcase_add_test(tc, test_accept_reads_expected_error_as_success);
  tcase_add_test(tc, test_driver_failure_warns_and_returns);
  tcase_add_test(tc, test_failure_reaches_bound_sink);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
