/* Helpers for the Check suites of tests/unit (see unit.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "unit.h"

#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"

int unit_run_suite(Suite* s) {
  SRunner* sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  const int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

char* unit_read_file(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return NULL;
  char* text = NULL;
  size_t len = 0;
  FILE* mem = open_memstream(&text, &len);
  ck_assert_ptr_nonnull(mem);
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) fwrite(buf, 1, n, mem);
  fclose(mem);
  fclose(f);
  return text;
}

void unit_write_file(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  ck_assert_msg(f != NULL, "cannot create %s", path);
  fputs(text, f);
  fclose(f);
}

int unit_count(const char* text, const char* needle) {
  int count = 0;
  for (const char* p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) count++;
  return count;
}

void unit_set_param(const char* name, const char* value) {
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
  param_reload();
}

void unit_sandbox_enter(char* dir_template) {
  ck_assert_ptr_nonnull(mkdtemp(dir_template));
  /* Every NCCL_* variable, whether the table has a row for it or not (unsupported ones WARN). */
  for (bool again = true; again;) {
    again = false;
    for (char** e = environ; *e != NULL; e++) {
      if (strncmp(*e, "NCCL_", 5) != 0) continue;
      char name[256];
      size_t n = strcspn(*e, "=");
      if (n >= sizeof(name)) continue;
      memcpy(name, *e, n);
      name[n] = '\0';
      unsetenv(name); /* environ changed: start over */
      again = true;
      break;
    }
  }
  setenv("HOME", dir_template, 1);
  char etc[PATH_MAX];
  snprintf(etc, sizeof(etc), "%s/etc_nccl.conf", dir_template);
  param_set_system_conf_path(etc);
  log_reset();
  log_clear_last_error();
}

static int sandbox_remove_entry(const char* path, const struct stat* st, int flag,
                                struct FTW* ftw) {
  return remove(path);
}

void unit_sandbox_leave(const char* dir) {
  log_reset();
  nftw(dir, sandbox_remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

ncclComm_t unit_one_rank_comm(void) {
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  return comm;
}
