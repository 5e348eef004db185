/* Entry points NCCL 2.29-2.32 added, on one rank: refusals that say what is missing
 * (ncclSetEncryption with a key, the device-API functions), ncclCommQueryProperties (this
 * communicator, and no device API), ncclWinGetUserPtr, one-sided operations on oneself, suspending
 * a communicator without connections, and ncclCommGetUniqueId / ncclCommGrow's argument checks.
 * Outputs of refused calls stay untouched; bad communicators are reported as everywhere else. */
#include <check.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "unit.h"

/* Declared by stock's nccl_device headers (2.30.7's core.h; 2.32's cft.h), not by nccl.h. */
typedef struct {
  int nRanks, rank, stride;
} team_t;
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank, nRanks, cudaDev, nvmlDev;
  bool deviceApiSupport, multimemSupport;
  int ginType, nLsaTeams;
  bool hostRmaSupport;
  int railedGinType;
} props_t;
ncclResult_t ncclCommQueryProperties(ncclComm_t comm, props_t* props);
ncclResult_t ncclGetLsaDevicePointer(ncclWindow_t window, size_t offset, int lsaRank, void** out);
ncclResult_t ncclGetPeerDevicePointer(ncclWindow_t window, size_t offset, int peer, void** out);
ncclResult_t ncclGetLsaMultimemDevicePointer(ncclWindow_t window, size_t offset, void** out);
ncclResult_t ncclGinOutboxCreateRequirement(int nBlocks, int size_log2, void* h, void* req);
team_t ncclTeamCft(ncclComm_t comm, int mode);
team_t ncclTeamCftMultimem(ncclComm_t comm);

#define EXPECT_REFUSED(call, text)                                                       \
  do {                                                                                   \
    ck_assert_int_eq((call), ncclInvalidUsage);                                          \
    ck_assert_msg(strstr(log_last_error(), text) != NULL, "\"%s\" does not name \"%s\"", \
                  log_last_error(), text);                                               \
  } while (0)

/* One rank puts into its own window and waits for its own signals (tests/integration/test_rma.c
 * runs 2 and 3 ranks). */
START_TEST(test_rma_self) {
  ncclComm_t comm = unit_one_rank_comm();
  int win_buf[8] = {0}, data[4] = {11, 22, 33, 44};
  ncclWindow_t win = NULL;
  ck_assert_int_eq(ncclCommWindowRegister(comm, win_buf, sizeof(win_buf), &win, 0), ncclSuccess);
  ck_assert_int_eq(ncclPutSignal(data, 4, ncclInt32, 0, win, 3 * sizeof(int), 0, 0, 0, comm, NULL),
                   ncclSuccess);
  ck_assert_int_eq(ncclSignal(0, 0, 0, 0, comm, NULL), ncclSuccess);
  ncclWaitSignalDesc_t d = {.opCnt = 3, .peer = 0, .sigIdx = 0, .ctx = 0};
  /* Two raised, three awaited: it could never return. */
  EXPECT_REFUSED(ncclWaitSignal(1, &d, comm, NULL), "wait forever");
  d.opCnt = 2;
  ck_assert_int_eq(ncclWaitSignal(1, &d, comm, NULL), ncclSuccess);
  for (int i = 0; i < 8; i++) ck_assert_int_eq(win_buf[i], i >= 3 && i < 7 ? data[i - 3] : 0);
  d.opCnt = 1;
  EXPECT_REFUSED(ncclWaitSignal(1, &d, comm, NULL), "wait forever"); /* both were taken */
  ck_assert_int_eq(ncclCommWindowDeregister(comm, win), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  /* A NULL communicator is reported as one. */
  ck_assert_int_eq(ncclSignal(0, 0, 0, 0, NULL, NULL), ncclInvalidArgument);
}
END_TEST

/* A single rank has no connections: suspending releases nothing, but the state still changes
 * (tests/integration/test_comm_suspend.c measures real ones). */
START_TEST(test_suspend_one_rank) {
  ncclComm_t comm = unit_one_rank_comm();
  uint64_t v = 77;
  ck_assert_int_eq(ncclCommMemStats(comm, ncclStatGpuMemSuspend, &v), ncclSuccess);
  ck_assert_uint_eq(v, 0);
  ck_assert_int_eq(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), ncclSuccess);
  ck_assert_int_eq(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v), ncclSuccess);
  ck_assert_uint_eq(v, 1);
  int x = 3;
  EXPECT_REFUSED(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, NULL), "suspended");
  ck_assert_int_eq(ncclCommResume(comm), ncclSuccess);
  ck_assert_int_eq(ncclCommMemStats(comm, ncclStatGpuMemSuspended, &v), ncclSuccess);
  ck_assert_uint_eq(v, 0);
  ck_assert_int_eq(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, NULL), ncclSuccess);
  ck_assert_int_eq(x, 3);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* What ncclCommGrow refuses before it waits for anyone (tests/integration/test_comm_grow.c grows
 * communicators). */
START_TEST(test_grow_arguments) {
  ncclComm_t comm = unit_one_rank_comm();
  ncclUniqueId id, id2;
  memset(&id2, 0x5a, sizeof(id2));
  ck_assert_int_eq(ncclCommGetUniqueId(comm, &id), ncclSuccess);
  EXPECT_REFUSED(ncclCommGetUniqueId(comm, &id2), "has not used yet");
  ck_assert_int_eq((unsigned char)id2.internal[0], 0x5a);
  ncclComm_t grown = (ncclComm_t)0x1;
  ck_assert_int_eq(ncclCommGrow(comm, 2, &id, 0, &grown, NULL), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "passes rank -1"));
  ck_assert_int_eq(ncclCommGrow(comm, 1, &id, -1, &grown, NULL), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "larger than"));
  EXPECT_REFUSED(ncclCommGrow(comm, 2, NULL, -1, &grown, NULL), "exactly one rank");
  ck_assert_int_eq(ncclCommGrow(NULL, 2, NULL, 1, &grown, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommGrow(NULL, 2, &id, 5, &grown, NULL), ncclInvalidArgument);
  ck_assert_ptr_eq(grown, (ncclComm_t)0x1);
  ck_assert_int_eq(ncclCommGetUniqueId(NULL, &id), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_encryption) {
  ck_assert_int_eq(ncclSetEncryption(NULL), ncclSuccess); /* asks for nothing */
  ncclEncryptionConfig_t cfg = {.size = sizeof(cfg), .magic = NCCL_API_MAGIC, .version = 23203};
  ck_assert_int_eq(ncclSetEncryption(&cfg), ncclSuccess); /* no key: nothing to encrypt */
  cfg.mode = 1;
  cfg.psk = "0123456789abcdef0123456789abcdef-job-key";
  EXPECT_REFUSED(ncclSetEncryption(&cfg), "without TLS");
  cfg.magic = 0;
  ck_assert_int_eq(ncclSetEncryption(&cfg), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_ENCRYPTION_CONFIG_INITIALIZER"));
}
END_TEST

START_TEST(test_device_api) {
  ncclComm_t comm = unit_one_rank_comm();
  void* p = (void*)0x1;
  EXPECT_REFUSED(ncclGetLsaDevicePointer(NULL, 0, 0, &p), "no device API");
  EXPECT_REFUSED(ncclGetPeerDevicePointer(NULL, 0, 0, &p), "ncclGetPeerDevicePointer");
  EXPECT_REFUSED(ncclGetLsaMultimemDevicePointer(NULL, 0, &p), "multimem");
  EXPECT_REFUSED(ncclGinOutboxCreateRequirement(1, 10, NULL, NULL), "GIN");
  ck_assert_ptr_eq(p, (void*)0x1);
  team_t t = ncclTeamCft(comm, 0);
  ck_assert_int_eq(t.nRanks, 0);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "ncclTeamCft"));
  ck_assert_int_eq(ncclTeamCftMultimem(comm).nRanks, 0);

  props_t props;
  memset(&props, 0xee, sizeof(props));
  props.size = sizeof(props);
  props.magic = NCCL_API_MAGIC;
  props.version = 23000;
  ck_assert_int_eq(ncclCommQueryProperties(comm, &props), ncclSuccess);
  ck_assert_int_eq(props.rank, 0);
  ck_assert_int_eq(props.nRanks, 1);
  ck_assert_int_eq(props.cudaDev, -1); /* the host executor */
  ck_assert(!props.deviceApiSupport && !props.multimemSupport);
  ck_assert(props.hostRmaSupport); /* one-sided operations work (tests/integration/test_rma.c) */
  ck_assert_int_eq(props.ginType, 0);
  ck_assert_int_eq(props.railedGinType, 0);
  ck_assert_uint_eq(props.size, sizeof(props));
  props.version = NCCL_VERSION(2, 29, 3); /* stock leaves it false for callers up to 2.29.3 */
  ck_assert_int_eq(ncclCommQueryProperties(comm, &props), ncclSuccess);
  ck_assert(!props.hostRmaSupport);
  /* An older, shorter struct: nothing past its size is written. */
  props_t old;
  memset(&old, 0xee, sizeof(old));
  old.size = offsetof(props_t, cudaDev);
  old.magic = NCCL_API_MAGIC;
  ck_assert_int_eq(ncclCommQueryProperties(comm, &old), ncclSuccess);
  ck_assert_int_eq(old.nRanks, 1);
  ck_assert_uint_eq((unsigned)old.cudaDev, 0xeeeeeeeeu);
  old.magic = 0;
  ck_assert_int_eq(ncclCommQueryProperties(comm, &old), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommQueryProperties(comm, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_win_get_user_ptr) {
  ncclComm_t comm = unit_one_rank_comm();
  size_t bytes = 1 << 16;
  void* buff = NULL;
  ck_assert_int_eq(ncclMemAlloc(&buff, bytes), ncclSuccess);
  ncclWindow_t win = NULL;
  ck_assert_int_eq(ncclCommWindowRegister(comm, buff, bytes, &win, NCCL_WIN_DEFAULT), ncclSuccess);
  void* got = NULL;
  ck_assert_int_eq(ncclWinGetUserPtr(comm, win, &got), ncclSuccess);
  ck_assert_ptr_eq(got, buff);
  ck_assert_int_eq(ncclWinGetUserPtr(comm, win, NULL), ncclInvalidArgument);
  /* A handle that is not a window of comm: a buffer registration, a made-up pointer. */
  void* handle = NULL;
  ck_assert_int_eq(ncclCommRegister(comm, buff, bytes, &handle), ncclSuccess);
  got = (void*)0x1;
  ck_assert_int_eq(ncclWinGetUserPtr(comm, (ncclWindow_t)handle, &got), ncclInvalidArgument);
  ck_assert_ptr_eq(got, (void*)0x1);
  ck_assert_int_eq(ncclWinGetUserPtr(comm, (ncclWindow_t)&bytes, &got), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "ncclWinGetUserPtr"));
  ck_assert_int_eq(ncclCommDeregister(comm, handle), ncclSuccess);
  ck_assert_int_eq(ncclCommWindowDeregister(comm, win), ncclSuccess);
  ck_assert_int_eq(ncclWinGetUserPtr(comm, win, &got), ncclInvalidArgument); /* deregistered */
  ck_assert_int_eq(ncclMemFree(buff), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_timeout_result) {
  ck_assert_str_eq(ncclGetErrorString(ncclTimeout), "timeout");
}
END_TEST

static Suite* api232_suite(void) {
  Suite* s = suite_create("api_232");
  TCase* tc = tcase_create("api");
  tcase_add_test(tc, test_rma_self);
  tcase_add_test(tc, test_suspend_one_rank);
  tcase_add_test(tc, test_grow_arguments);
  tcase_add_test(tc, test_encryption);
  tcase_add_test(tc, test_device_api);
  tcase_add_test(tc, test_win_get_user_ptr);
  tcase_add_test(tc, test_timeout_result);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(api232_suite());
}
