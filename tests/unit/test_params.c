/* The parameter table: documentation of every row, sources and their precedence, conf file
 * syntax, integer parsing, reload, and the INFO ENV lines. Each test runs in its own forked
 * process (Check's default), so setenv stays local to it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/base.h"
#include "unit.h"

static char tmp_dir[256];

static char* tmp_path(const char* name) {
  static char paths[8][512];
  static int next;
  char* p = paths[next++ % 8];
  snprintf(p, sizeof(paths[0]), "%s/%s", tmp_dir, name);
  return p;
}

/* Every test starts from: no NCCL_* in the environment, $HOME and the system conf file pointing
 * into an empty temp dir, nothing cached. */
static void setup(void) {
  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/baton_params_XXXXXX");
  unit_sandbox_enter(tmp_dir);
}

static void teardown(void) {
  unit_sandbox_leave(tmp_dir);
}

static int64_t default_int(param_id_t id) {
  return strtoll(param_describe(id)->def, NULL, 0);
}

START_TEST(test_every_row_documented) {
  for (int i = 0; i < PARAM_COUNT; i++) {
    const param_desc_t* d = param_describe((param_id_t)i);
    ck_assert_ptr_nonnull(d);
    ck_assert_ptr_nonnull(d->name);
    ck_assert_msg(strncmp(d->name, "NCCL_", 5) == 0 && strlen(d->name) > 5, "row %d: bad name %s",
                  i, d->name);
    ck_assert_msg(d->doc != NULL && strlen(d->doc) > 0, "%s has no doc", d->name);
    ck_assert_msg(d->type == PARAM_INT || d->type == PARAM_STR, "%s: bad type", d->name);
    if (d->type == PARAM_INT && d->def != NULL) {
      char* end = NULL;
      strtoll(d->def, &end, 0);
      ck_assert_msg(end != d->def && *end == '\0', "%s: default \"%s\" is not an integer", d->name,
                    d->def);
    }
    for (int j = 0; j < i; j++)
      ck_assert_msg(strcmp(d->name, param_describe((param_id_t)j)->name) != 0, "%s twice", d->name);
  }
  ck_assert_ptr_null(param_describe(PARAM_COUNT));
}
END_TEST

START_TEST(test_defaults_when_unset) {
  ck_assert_int_eq(param_int(PARAM_BUFFSIZE), default_int(PARAM_BUFFSIZE));
  ck_assert_int_eq(param_int(PARAM_SOCKET_RETRY_CNT), default_int(PARAM_SOCKET_RETRY_CNT));
  ck_assert(!param_is_set(PARAM_BUFFSIZE));
  ck_assert_ptr_null(param_str(PARAM_SOCKET_IFNAME));
  ck_assert_str_eq(param_str(PARAM_DEBUG_SUBSYS), param_describe(PARAM_DEBUG_SUBSYS)->def);
  /* An empty value counts as unset, as in stock. */
  setenv("NCCL_BUFFSIZE", "", 1);
  param_reload();
  ck_assert(!param_is_set(PARAM_BUFFSIZE));
  ck_assert_int_eq(param_int(PARAM_BUFFSIZE), default_int(PARAM_BUFFSIZE));
}
END_TEST

START_TEST(test_env_beats_conf_file) {
  const char* conf = tmp_path("user.conf");
  unit_write_file(conf, "NCCL_BUFFSIZE=1111\nNCCL_NTHREADS=64\nNCCL_SOCKET_IFNAME=eth\n");
  setenv("NCCL_CONF_FILE", conf, 1);
  setenv("NCCL_BUFFSIZE", "2222", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  param_reload();
  ck_assert_int_eq(param_int(PARAM_BUFFSIZE), 2222);
  ck_assert_int_eq(param_int(PARAM_NTHREADS), 64);
  ck_assert_str_eq(param_str(PARAM_SOCKET_IFNAME), "lo");
  ck_assert(param_is_set(PARAM_NTHREADS));
  ck_assert_str_eq(param_str(PARAM_CONF_FILE), conf);
}
END_TEST

START_TEST(test_conf_file_precedence) {
  unit_write_file(tmp_path("user.conf"), "NCCL_NTHREADS=1\n");
  unit_write_file(tmp_path(".nccl.conf"), "NCCL_NTHREADS=2\nNCCL_MIN_NCHANNELS=2\n");
  unit_write_file(tmp_path("etc_nccl.conf"),
                  "NCCL_NTHREADS=3\nNCCL_MIN_NCHANNELS=3\nNCCL_MAX_NCHANNELS=3\n");

  /* No NCCL_CONF_FILE: ~/.nccl.conf, then /etc/nccl.conf. */
  param_reload();
  ck_assert_int_eq(param_int(PARAM_NTHREADS), 2);
  ck_assert_int_eq(param_int(PARAM_MIN_NCHANNELS), 2);
  ck_assert_int_eq(param_int(PARAM_MAX_NCHANNELS), 3);

  /* NCCL_CONF_FILE is read instead of ~/.nccl.conf (stock), still before /etc/nccl.conf. */
  setenv("NCCL_CONF_FILE", tmp_path("user.conf"), 1);
  param_reload();
  ck_assert_int_eq(param_int(PARAM_NTHREADS), 1);
  ck_assert_int_eq(param_int(PARAM_MIN_NCHANNELS), 3);
  ck_assert_int_eq(param_int(PARAM_MAX_NCHANNELS), 3);

  /* Only /etc/nccl.conf left. */
  unsetenv("NCCL_CONF_FILE");
  remove(tmp_path(".nccl.conf"));
  param_reload();
  ck_assert_int_eq(param_int(PARAM_NTHREADS), 3);
  ck_assert(param_is_set(PARAM_NTHREADS));

  /* Nothing at all: defaults. */
  remove(tmp_path("etc_nccl.conf"));
  param_reload();
  ck_assert_int_eq(param_int(PARAM_NTHREADS), default_int(PARAM_NTHREADS));
  ck_assert(!param_is_set(PARAM_NTHREADS));
}
END_TEST

START_TEST(test_conf_file_syntax) {
  unit_write_file(tmp_path(".nccl.conf"),
                  "# a comment line\n"
                  "\n"
                  "   \t \n"
                  "# NCCL_MIN_NCHANNELS=99\n"
                  "   NCCL_NTHREADS   =   128   \n"
                  "\tNCCL_SOCKET_IFNAME = eth0,ib0 \r\n"
                  "this line has no equals sign\n"
                  "NCCL_NOT_A_ROW=5\n"
                  "NCCL_IB_HCA=\n"
                  "NCCL_MAX_NCHANNELS=0x10\n"
                  "NCCL_NTHREADS=256\n" /* the first occurrence wins */
                  "NCCL_TOPO_FILE=/path/with=equals");
  param_reload();
  ck_assert_int_eq(param_int(PARAM_NTHREADS), 128);
  ck_assert_str_eq(param_str(PARAM_SOCKET_IFNAME), "eth0,ib0");
  ck_assert_int_eq(param_int(PARAM_MIN_NCHANNELS), default_int(PARAM_MIN_NCHANNELS));
  ck_assert(!param_is_set(PARAM_MIN_NCHANNELS));
  ck_assert(!param_is_set(PARAM_IB_HCA));
  ck_assert_int_eq(param_int(PARAM_MAX_NCHANNELS), 16);
  ck_assert_str_eq(param_str(PARAM_TOPO_FILE), "/path/with=equals");
  ck_assert_str_eq(log_last_error(), "");
}
END_TEST

START_TEST(test_int_parsing) {
  static const struct {
    const char* text;
    bool valid;
    int64_t value;
  } cases[] = {
      {"123", true, 123},
      {"0x100", true, 256},
      {"0XfF", true, 255},
      {"-5", true, -5},
      {"-0x10", true, -16},
      {"+7", true, 7},
      {"  42  ", true, 42},
      {"9223372036854775807", true, INT64_MAX},
      {"-9223372036854775808", true, INT64_MIN},
      {"12abc", false, 0},
      {"abc", false, 0},
      {"0x", false, 0},
      {"1.5", false, 0},
      {"- 3", false, 0},
      {"9223372036854775808", false, 0},
      {"99999999999999999999999", false, 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    setenv("NCCL_BUFFSIZE", cases[i].text, 1);
    log_clear_last_error();
    param_reload();
    int64_t got = param_int(PARAM_BUFFSIZE);
    if (cases[i].valid) {
      ck_assert_msg(got == cases[i].value, "\"%s\" parsed as %lld", cases[i].text, (long long)got);
      ck_assert_str_eq(log_last_error(), "");
    } else {
      ck_assert_msg(got == default_int(PARAM_BUFFSIZE), "\"%s\" gave %lld, not the default",
                    cases[i].text, (long long)got);
      const char* err = log_last_error();
      ck_assert_msg(strstr(err, "NCCL_BUFFSIZE") != NULL && strstr(err, cases[i].text) != NULL,
                    "no WARN naming NCCL_BUFFSIZE and \"%s\": \"%s\"", cases[i].text, err);
      /* The raw text is still visible, and the row counts as given. */
      ck_assert_str_eq(param_str(PARAM_BUFFSIZE), cases[i].text);
      ck_assert(param_is_set(PARAM_BUFFSIZE));
    }
  }
}
END_TEST

START_TEST(test_bad_int_in_conf_file_names_file) {
  const char* conf = tmp_path("bad.conf");
  unit_write_file(conf, "NCCL_BUFFSIZE=lots\n");
  setenv("NCCL_CONF_FILE", conf, 1);
  param_reload();
  ck_assert_int_eq(param_int(PARAM_BUFFSIZE), default_int(PARAM_BUFFSIZE));
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_BUFFSIZE"));
  ck_assert_ptr_nonnull(strstr(log_last_error(), "lots"));
  ck_assert_ptr_nonnull(strstr(log_last_error(), conf));
}
END_TEST

START_TEST(test_reload) {
  setenv("NCCL_NTHREADS", "32", 1);
  setenv("NCCL_SOCKET_IFNAME", "eth0", 1);
  param_reload();
  ck_assert_int_eq(param_int(PARAM_NTHREADS), 32);
  const char* before = param_str(PARAM_SOCKET_IFNAME);
  ck_assert_str_eq(before, "eth0");

  /* Read once: later changes are not seen until a reload. */
  setenv("NCCL_NTHREADS", "64", 1);
  setenv("NCCL_SOCKET_IFNAME", "ib0", 1);
  ck_assert_int_eq(param_int(PARAM_NTHREADS), 32);
  ck_assert_str_eq(param_str(PARAM_SOCKET_IFNAME), "eth0");

  param_reload();
  ck_assert_int_eq(param_int(PARAM_NTHREADS), 64);
  ck_assert_str_eq(param_str(PARAM_SOCKET_IFNAME), "ib0");
  /* A string handed out before the reload stays valid. */
  ck_assert_str_eq(before, "eth0");

  unsetenv("NCCL_NTHREADS");
  param_reload();
  ck_assert_int_eq(param_int(PARAM_NTHREADS), default_int(PARAM_NTHREADS));
}
END_TEST

START_TEST(test_env_lines_logged_once) {
  const char* log_path = tmp_path("env.log");
  const char* conf = tmp_path("user.conf");
  unit_write_file(conf, "NCCL_MAX_NCHANNELS=4\nNCCL_MIN_NCHANNELS=1\n");
  setenv("NCCL_CONF_FILE", conf, 1);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "ENV", 1);
  setenv("NCCL_DEBUG_FILE", log_path, 1);
  setenv("NCCL_BUFFSIZE", "1234", 1);
  setenv("NCCL_NTHREADS", param_describe(PARAM_NTHREADS)->def, 1); /* equal to the default */
  log_reset();
  for (int i = 0; i < 3; i++) {
    ck_assert_int_eq(param_int(PARAM_BUFFSIZE), 1234);
    ck_assert_int_eq(param_int(PARAM_MAX_NCHANNELS), 4);
  }
  char* text = unit_read_file(log_path);
  ck_assert_ptr_nonnull(text);
  ck_assert_int_eq(unit_count(text, "NCCL INFO NCCL_BUFFSIZE set by environment to 1234\n"), 1);
  char expect[1024];
  snprintf(expect, sizeof(expect), "NCCL INFO NCCL_MAX_NCHANNELS set by config file %s to 4\n",
           conf);
  ck_assert_int_eq(unit_count(text, expect), 1);
  ck_assert_int_eq(unit_count(text, "NCCL_NTHREADS"), 0);
  ck_assert_int_eq(unit_count(text, "NCCL_MIN_NCHANNELS"), 0);
  free(text);

  /* A reload logs the rows again, once. */
  param_reload();
  ck_assert_int_eq(param_int(PARAM_BUFFSIZE), 1234);
  ck_assert_int_eq(param_int(PARAM_BUFFSIZE), 1234);
  text = unit_read_file(log_path);
  ck_assert_int_eq(unit_count(text, "NCCL_BUFFSIZE set by environment to 1234"), 2);
  free(text);
}
END_TEST

#define READERS 8
static pthread_barrier_t readers_start;
static void* reader_main(void* arg) {
  pthread_barrier_wait(&readers_start);
  int64_t* out = arg;
  out[0] = param_int(PARAM_NTHREADS);
  out[1] = (int64_t)(uintptr_t)param_str(PARAM_SOCKET_IFNAME);
  return NULL;
}

START_TEST(test_concurrent_first_read) {
  setenv("NCCL_NTHREADS", "77", 1);
  setenv("NCCL_SOCKET_IFNAME", "eth7", 1);
  param_reload();
  pthread_t threads[READERS];
  int64_t results[READERS][2];
  pthread_barrier_init(&readers_start, NULL, READERS);
  for (int i = 0; i < READERS; i++)
    ck_assert_int_eq(pthread_create(&threads[i], NULL, reader_main, results[i]), 0);
  for (int i = 0; i < READERS; i++) pthread_join(threads[i], NULL);
  pthread_barrier_destroy(&readers_start);
  for (int i = 0; i < READERS; i++) {
    ck_assert_int_eq(results[i][0], 77);
    /* One snapshot: every thread got the very same string. */
    ck_assert_ptr_eq((void*)(uintptr_t)results[i][1], (void*)(uintptr_t)results[0][1]);
  }
  ck_assert_str_eq((const char*)(uintptr_t)results[0][1], "eth7");
}
END_TEST

int main(void) {
  Suite* s = suite_create("params");
  TCase* tc = tcase_create("params");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_every_row_documented);
  tcase_add_test(tc, test_defaults_when_unset);
  tcase_add_test(tc, test_env_beats_conf_file);
  tcase_add_test(tc, test_conf_file_precedence);
  tcase_add_test(tc, test_conf_file_syntax);
  tcase_add_test(tc, test_int_parsing);
  tcase_add_test(tc, test_bad_int_in_conf_file_names_file);
  tcase_add_test(tc, test_reload);
  tcase_add_test(tc, test_env_lines_logged_once);
  tcase_add_test(tc, test_concurrent_first_read);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
