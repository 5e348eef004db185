/* The parameter API of NCCL 2.29 (src/base/param_api.c) over the one parameter table: typed reads
 * of integer rows as the environment and defaults give them (values written here), range checks
 * per width, string rows, raw bytes, the key list (every row, compared with the table's own names
 * by a walk of param_describe), and unknown keys, stock-only names included, refused with
 * ncclInvalidArgument and a WARN. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "unit.h"

static char dir[] = "/tmp/test_param_api_XXXXXX";

static void setup(void) {
  strcpy(dir, "/tmp/test_param_api_XXXXXX");
  unit_sandbox_enter(dir);
}

static void teardown(void) {
  unit_sandbox_leave(dir);
}

START_TEST(test_typed_reads) {
  ncclParamHandle_t h = NULL;
  ck_assert_int_eq(ncclParamBind(&h, "NCCL_BUFFSIZE"), ncclSuccess);
  ck_assert_ptr_nonnull(h);
  int64_t i64 = 0;
  ck_assert_int_eq(ncclParamGetI64(h, &i64), ncclSuccess);
  ck_assert_int_eq(i64, 4194304); /* the row's default */
  int32_t i32 = 0;
  ck_assert_int_eq(ncclParamGetI32(h, &i32), ncclSuccess);
  ck_assert_int_eq(i32, 4194304);
  uint64_t u64 = 0;
  ck_assert_int_eq(ncclParamGetU64(h, &u64), ncclSuccess);
  ck_assert_uint_eq(u64, 4194304);
  int16_t i16 = 7;
  ck_assert_int_eq(ncclParamGetI16(h, &i16), ncclInvalidArgument); /* 4 Mi does not fit */
  ck_assert_int_eq(i16, 7);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_BUFFSIZE"));

  unit_set_param("NCCL_BUFFSIZE", "-3");
  ck_assert_int_eq(ncclParamGetI8(h, &(int8_t){0}), ncclSuccess);
  int8_t i8 = 0;
  ck_assert_int_eq(ncclParamGetI8(h, &i8), ncclSuccess);
  ck_assert_int_eq(i8, -3);
  uint32_t u32 = 5;
  ck_assert_int_eq(ncclParamGetU32(h, &u32), ncclInvalidArgument); /* negative */
  ck_assert_uint_eq(u32, 5);
  unit_set_param("NCCL_BUFFSIZE", "255");
  uint8_t u8 = 0;
  ck_assert_int_eq(ncclParamGetU8(h, &u8), ncclSuccess);
  ck_assert_uint_eq(u8, 255);
  unit_set_param("NCCL_BUFFSIZE", "256");
  ck_assert_int_eq(ncclParamGetU8(h, &u8), ncclInvalidArgument);
  uint16_t u16 = 0;
  ck_assert_int_eq(ncclParamGetU16(h, &u16), ncclSuccess);
  ck_assert_uint_eq(u16, 256);
  unit_set_param("NCCL_BUFFSIZE", NULL);
}
END_TEST

START_TEST(test_strings_and_raw) {
  ncclParamHandle_t h = NULL;
  ck_assert_int_eq(ncclParamBind(&h, "NCCL_SOCKET_IFNAME"), ncclSuccess);
  const char* s = "unset";
  ck_assert_int_eq(ncclParamGetStr(h, &s), ncclSuccess);
  ck_assert_str_eq(s, ""); /* no value, no default */
  int32_t i32 = 1;
  ck_assert_int_eq(ncclParamGetI32(h, &i32), ncclInvalidArgument);
  unit_set_param("NCCL_SOCKET_IFNAME", "^lo,docker");
  ck_assert_int_eq(ncclParamGetStr(h, &s), ncclSuccess);
  ck_assert_str_eq(s, "^lo,docker");
  char buf[32];
  int len = 0;
  ck_assert_int_eq(ncclParamGet(h, buf, sizeof(buf), &len), ncclSuccess);
  ck_assert_int_eq(len, 11);
  ck_assert_str_eq(buf, "^lo,docker");
  ck_assert_int_eq(ncclParamGet(h, buf, 4, &len), ncclInvalidArgument);
  ck_assert_int_eq(len, 11); /* the size needed */
  const char* v = NULL;
  int vlen = 0;
  ck_assert_int_eq(ncclParamGetParameter("NCCL_SOCKET_IFNAME", &v, &vlen), ncclSuccess);
  ck_assert_str_eq(v, "^lo,docker");
  ck_assert_int_eq(vlen, 10);
  /* A string row holding a number reads as one. */
  unit_set_param("NCCL_SOCKET_IFNAME", "0x10");
  ck_assert_int_eq(ncclParamGetI32(h, &i32), ncclSuccess);
  ck_assert_int_eq(i32, 16);
  unit_set_param("NCCL_SOCKET_IFNAME", NULL);

  ncclParamHandle_t n = NULL;
  ck_assert_int_eq(ncclParamBind(&n, "NCCL_SOCKET_NTHREADS"), ncclSuccess);
  unit_set_param("NCCL_SOCKET_NTHREADS", "6");
  int64_t raw = 0;
  ck_assert_int_eq(ncclParamGet(n, &raw, sizeof(raw), &len), ncclSuccess);
  ck_assert_int_eq(len, 8);
  ck_assert_int_eq(raw, 6);
  ck_assert_int_eq(ncclParamGetStr(n, &s), ncclSuccess);
  ck_assert_str_eq(s, "6");
  ck_assert_int_eq(ncclParamGetParameter("NCCL_SOCKET_NTHREADS", &v, &vlen), ncclSuccess);
  ck_assert_str_eq(v, "6");
  ck_assert_int_eq(vlen, 1);
  unit_set_param("NCCL_SOCKET_NTHREADS", NULL);
}
END_TEST

START_TEST(test_keys) {
  const char** keys = NULL;
  int n = 0;
  ck_assert_int_eq(ncclParamGetAllParameterKeys(&keys, &n), ncclSuccess);
  ck_assert_int_eq(n, PARAM_COUNT);
  for (int id = 0; id < PARAM_COUNT; id++) {
    const char* name = param_describe((param_id_t)id)->name;
    bool found = false;
    for (int k = 0; k < n && !found; k++) found = strcmp(keys[k], name) == 0;
    ck_assert_msg(found, "%s missing from the key list", name);
    ncclParamHandle_t h = NULL;
    ck_assert_int_eq(ncclParamBind(&h, name), ncclSuccess); /* every key binds */
  }
  ck_assert_int_eq(ncclParamGetAllParameterKeys(NULL, &n), ncclInvalidArgument);
  ncclParamDumpAll(); /* logs; must not crash */
}
END_TEST

START_TEST(test_unknown) {
  ncclParamHandle_t h = (ncclParamHandle_t)0x1;
  ck_assert_int_eq(ncclParamBind(&h, "NCCL_NO_SUCH_THING"), ncclInvalidArgument);
  ck_assert_ptr_eq(h, (ncclParamHandle_t)0x1);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_NO_SUCH_THING"));
  ck_assert_int_eq(ncclParamBind(&h, NULL), ncclInvalidArgument);
  ck_assert_int_eq(ncclParamBind(&h, "nccl_buffsize"), ncclInvalidArgument); /* case counts */
  /* A stock variable Baton does not honour is not one of its parameters. */
  const char* unsupported = param_unsupported_name(0);
  ck_assert_ptr_nonnull(unsupported);
  ck_assert_int_eq(ncclParamBind(&h, unsupported), ncclInvalidArgument);
  const char* v = NULL;
  int len = -1;
  ck_assert_int_eq(ncclParamGetParameter("NCCL_NO_SUCH_THING", &v, &len), ncclInvalidArgument);
  ck_assert_ptr_null(v);
  ck_assert_int_eq(len, -1);
  /* A handle that did not come from ncclParamBind. */
  int32_t x = 0;
  int fake = 0;
  ck_assert_int_eq(ncclParamGetI32((ncclParamHandle_t)&fake, &x), ncclInvalidArgument);
  ck_assert_int_eq(ncclParamGetI32(NULL, &x), ncclInvalidArgument);
  ncclParamHandle_t ok = NULL;
  ck_assert_int_eq(ncclParamBind(&ok, "NCCL_BUFFSIZE"), ncclSuccess);
  ck_assert_int_eq(ncclParamGetI32(ok, NULL), ncclInvalidArgument);
}
END_TEST

static Suite* param_api_suite(void) {
  Suite* s = suite_create("param_api");
  TCase* tc = tcase_create("api");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_typed_reads);
  tcase_add_test(tc, test_strings_and_raw);
  tcase_add_test(tc, test_keys);
  tcase_add_test(tc, test_unknown);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(param_api_suite());
}
