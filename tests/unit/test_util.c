/* Utilities: datatype sizes and names, operator names, FNV-1a, the monotonic clock, zeroed
 * allocation, host identity (NCCL_HOSTID) and process identity (a forked child differs). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "unit.h"

static void setup(void) {
  for (int i = 0; i < PARAM_COUNT; i++) unsetenv(param_describe((param_id_t)i)->name);
  param_set_system_conf_path("/nonexistent/baton-test/nccl.conf");
  setenv("HOME", "/nonexistent/baton-test", 1);
  log_reset();
  log_clear_last_error();
}

START_TEST(test_datatype_sizes) {
  static const struct {
    ncclDataType_t type;
    size_t size;
  } cases[] = {
      {ncclInt8, sizeof(int8_t)},
      {ncclUint8, sizeof(uint8_t)},
      {ncclInt32, sizeof(int32_t)},
      {ncclUint32, sizeof(uint32_t)},
      {ncclInt64, sizeof(int64_t)},
      {ncclUint64, sizeof(uint64_t)},
      {ncclFloat16, 2},
      {ncclFloat32, sizeof(float)},
      {ncclFloat64, sizeof(double)},
      {ncclBfloat16, 2},
      {ncclFloat8e4m3, 1},
      {ncclFloat8e5m2, 1},
  };
  ck_assert_int_eq(sizeof(cases) / sizeof(cases[0]), ncclNumTypes);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ck_assert_msg(datatype_size(cases[i].type) == cases[i].size, "%s: %zu",
                  datatype_name(cases[i].type), datatype_size(cases[i].type));
    const char* name = datatype_name(cases[i].type);
    ck_assert_msg(strncmp(name, "nccl", 4) == 0, "type %d named %s", (int)cases[i].type, name);
    for (size_t j = 0; j < i; j++) ck_assert_str_ne(name, datatype_name(cases[j].type));
  }
  /* The aliases are the same types. */
  ck_assert_int_eq(datatype_size(ncclChar), 1);
  ck_assert_int_eq(datatype_size(ncclInt), 4);
  ck_assert_int_eq(datatype_size(ncclHalf), 2);
  ck_assert_int_eq(datatype_size(ncclFloat), 4);
  ck_assert_int_eq(datatype_size(ncclDouble), 8);
  ck_assert_str_eq(datatype_name(ncclFloat32), "ncclFloat32");
  ck_assert_str_eq(datatype_name(ncclBfloat16), "ncclBfloat16");
  /* Invalid values. */
  ck_assert_int_eq(datatype_size(ncclNumTypes), 0);
  ck_assert_int_eq(datatype_size((ncclDataType_t)-1), 0);
  ck_assert_str_eq(datatype_name((ncclDataType_t)ncclNumTypes), "Unknown");
}
END_TEST

START_TEST(test_redop_names) {
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  ck_assert_int_eq(sizeof(ops) / sizeof(ops[0]), ncclNumOps);
  for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
    ck_assert_str_ne(redop_name(ops[i]), "Unknown");
    for (size_t j = 0; j < i; j++) ck_assert_str_ne(redop_name(ops[i]), redop_name(ops[j]));
  }
  ck_assert_str_eq(redop_name(ncclSum), "Sum");
  ck_assert_str_eq(redop_name(ncclAvg), "Avg");
  /* Values from ncclNumOps on are operators created at run time (ncclRedOpCreatePreMulSum). */
  ck_assert_str_eq(redop_name((ncclRedOp_t)ncclNumOps), "PreMulSum");
  ck_assert_str_eq(redop_name((ncclRedOp_t)-1), "Unknown");
}
END_TEST

START_TEST(test_hash_bytes_fnv1a) {
  /* Published FNV-1a 64-bit test vectors. */
  ck_assert_uint_eq(hash_bytes("", 0), 0xcbf29ce484222325ULL);
  ck_assert_uint_eq(hash_bytes("a", 1), 0xaf63dc4c8601ec8cULL);
  ck_assert_uint_eq(hash_bytes("foobar", 6), 0x85944171f73967e8ULL);
  ck_assert_uint_ne(hash_bytes("ab", 2), hash_bytes("ba", 2));
}
END_TEST

START_TEST(test_clock_monotonic) {
  uint64_t t0 = clock_ns();
  struct timespec nap = {.tv_sec = 0, .tv_nsec = 5 * 1000 * 1000};
  nanosleep(&nap, NULL);
  uint64_t t1 = clock_ns();
  ck_assert_uint_ge(t1 - t0, 5 * 1000 * 1000);
  ck_assert_uint_lt(t1 - t0, 5ULL * 1000 * 1000 * 1000);
}
END_TEST

START_TEST(test_mem_calloc) {
  uint64_t* p = NULL;
  ck_assert_int_eq(MEM_CALLOC(&p, 1000), ncclSuccess);
  ck_assert_ptr_nonnull(p);
  for (int i = 0; i < 1000; i++) ck_assert_uint_eq(p[i], 0);
  free(p);

  void* z = NULL;
  ck_assert_int_eq(mem_calloc(&z, 0, 8), ncclSuccess);
  ck_assert_ptr_nonnull(z);
  free(z);

  /* Impossible size: error, WARN recorded, output untouched. */
  void* sentinel = (void*)0x1234;
  void* out = sentinel;
  ck_assert_int_eq(mem_calloc(&out, SIZE_MAX / 2, 4), ncclSystemError);
  ck_assert_ptr_eq(out, sentinel);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "allocate"));
}
END_TEST

START_TEST(test_host_name) {
  char full[256];
  ck_assert_int_eq(gethostname(full, sizeof(full)), 0);
  char* dot = strchr(full, '.');
  if (dot) *dot = '\0';
  ck_assert_str_eq(host_name(), full);
}
END_TEST

START_TEST(test_host_hash_follows_hostid) {
  uint64_t base = host_hash();
  ck_assert_uint_eq(host_hash(), base);

  setenv("NCCL_HOSTID", "node-a", 1);
  param_reload();
  uint64_t a = host_hash();
  ck_assert_uint_ne(a, base);
  ck_assert_uint_eq(a, hash_bytes("node-a", 6));

  setenv("NCCL_HOSTID", "node-b", 1);
  param_reload();
  uint64_t b = host_hash();
  ck_assert_uint_ne(b, a);
  ck_assert_uint_ne(b, base);

  unsetenv("NCCL_HOSTID");
  param_reload();
  ck_assert_uint_eq(host_hash(), base);
}
END_TEST

START_TEST(test_pid_hash_differs_in_child) {
  uint64_t parent = pid_hash();
  ck_assert_uint_eq(pid_hash(), parent);
  int fds[2];
  ck_assert_int_eq(pipe(fds), 0);
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    uint64_t h = pid_hash();
    ssize_t n = write(fds[1], &h, sizeof(h));
    _exit(n == (ssize_t)sizeof(h) ? 0 : 1);
  }
  close(fds[1]);
  alarm(10); /* a stuck child fails the test instead of hanging it */
  uint64_t from_child = 0;
  ssize_t n = read(fds[0], &from_child, sizeof(from_child));
  int status = 0;
  ck_assert_int_eq(waitpid(child, &status, 0), child);
  alarm(0);
  close(fds[0]);
  ck_assert_int_eq(n, sizeof(from_child));
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ck_assert_uint_ne(from_child, parent);
  ck_assert_uint_eq(pid_hash(), parent);
}
END_TEST

int main(void) {
  Suite* s = suite_create("util");
  TCase* tc = tcase_create("util");
  tcase_add_checked_fixture(tc, setup, NULL);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_datatype_sizes);
  tcase_add_test(tc, test_redop_names);
  tcase_add_test(tc, test_hash_bytes_fnv1a);
  tcase_add_test(tc, test_clock_monotonic);
  tcase_add_test(tc, test_mem_calloc);
  tcase_add_test(tc, test_host_name);
  tcase_add_test(tc, test_host_hash_follows_hostid);
  tcase_add_test(tc, test_pid_hash_differs_in_child);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
