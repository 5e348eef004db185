/* Every variable stock NCCL reads (2.28.9's source) or documents (the 2.30 user guide) is
 * accounted for: a row of src/base/param_table.h (honoured) or a line of
 * src/base/param_unsupported.h (setting it WARNs once), never both, never neither. Stock's lists
 * are copies in tests/abi/ (from ../shared/abi). Also: every row is read somewhere in src/ (a
 * row nobody reads is a lie in the table), and setting an unsupported variable WARNs once, naming
 * it, unless it is set to what Baton does anyway. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <ctype.h>
#include <dirent.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "unit.h"

/* Rows of Baton's own that stock does not have (besides the NCCL_BATON_* prefix). */
static const char* const baton_only[] = {
    "NCCL_BOOTSTRAP_TIMEOUT_MS", /* how long bootstrap waits for a peer */
};

static char tmp_dir[256];

static void setup(void) {
  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/baton_pnames_XXXXXX");
  unit_sandbox_enter(tmp_dir);
}

static void teardown(void) {
  unit_sandbox_leave(tmp_dir);
}

static bool in_patterns(const char* name, const char* const* list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (fnmatch(list[i], name, 0) == 0) return true;
  return false;
}

static bool is_row(const char* name) {
  for (int i = 0; i < PARAM_COUNT; i++)
    if (strcmp(param_describe((param_id_t)i)->name, name) == 0) return true;
  return false;
}

static bool is_unsupported(const char* name) {
  for (int i = 0; i < param_unsupported_count(); i++)
    if (strcmp(param_unsupported_name(i), name) == 0) return true;
  return false;
}

/* The names of a stock list (one per line), as one text; each name ends with '\n'. */
static char* stock_list(const char* file) {
  const char* src = getenv("BATON_SOURCE_DIR");
  ck_assert_msg(src != NULL, "BATON_SOURCE_DIR is not set (run through ctest)");
  char path[4096];
  snprintf(path, sizeof(path), "%s/tests/abi/%s", src, file);
  char* text = unit_read_file(path);
  ck_assert_msg(text != NULL, "cannot read %s", path);
  ck_assert_msg(unit_count(text, "NCCL_") > 100, "%s looks truncated", path);
  return text;
}

static bool in_stock(const char* name) {
  static const char* const files[] = {"nccl-2.28.9-env-read.txt", "nccl-2.30-env-documented.txt"};
  char line[256];
  snprintf(line, sizeof(line), "\n%s\n", name);
  bool found = false;
  for (size_t f = 0; f < 2 && !found; f++) {
    char* text = stock_list(files[f]);
    size_t n = strlen(text);
    char* framed = malloc(n + 2);
    framed[0] = '\n';
    memcpy(framed + 1, text, n + 1);
    found = strstr(framed, line) != NULL;
    free(framed);
    free(text);
  }
  return found;
}

static void check_stock_file(const char* file, int* accounted) {
  char* text = stock_list(file);
  char* save = NULL;
  for (char* name = strtok_r(text, "\n", &save); name; name = strtok_r(NULL, "\n", &save)) {
    bool row = is_row(name), unsupported = is_unsupported(name);
    ck_assert_msg(!(row && unsupported), "%s is both a row and unsupported", name);
    ck_assert_msg(row || unsupported,
                  "%s (stock, %s) is neither a row of param_table.h nor in param_unsupported.h",
                  name, file);
    (*accounted)++;
  }
  free(text);
}

START_TEST(test_every_stock_variable_accounted_for) {
  int accounted = 0;
  check_stock_file("nccl-2.28.9-env-read.txt", &accounted);
  check_stock_file("nccl-2.30-env-documented.txt", &accounted);
  ck_assert_int_gt(accounted, 200);
}
END_TEST

START_TEST(test_unsupported_list_is_stock_sorted_and_apart) {
  int n = param_unsupported_count();
  ck_assert_int_gt(n, 50);
  ck_assert_ptr_null(param_unsupported_name(n));
  for (int i = 0; i < n; i++) {
    const char* name = param_unsupported_name(i);
    ck_assert_msg(in_stock(name), "%s is not a stock variable", name);
    ck_assert_msg(!is_row(name), "%s is also a row", name);
    if (i > 0)
      ck_assert_msg(strcmp(param_unsupported_name(i - 1), name) < 0, "%s is out of order", name);
  }
}
END_TEST

START_TEST(test_rows_are_stock_or_baton_own) {
  for (int i = 0; i < PARAM_COUNT; i++) {
    const char* name = param_describe((param_id_t)i)->name;
    bool own = strncmp(name, "NCCL_BATON_", 11) == 0 ||
               in_patterns(name, baton_only, sizeof(baton_only) / sizeof(*baton_only));
    ck_assert_msg(own || in_stock(name), "row %s is neither stock's nor marked Baton's own", name);
  }
}
END_TEST

/* ---- Every row is read ------------------------------------------------------------------------
 * The tokens PARAM_<ID> used in src/ outside the table itself, gathered from every .c/.h/.cu. */
static char* used_tokens;
static size_t used_len, used_cap;

static void add_tokens(const char* text) {
  for (const char* p = strstr(text, "PARAM_"); p != NULL; p = strstr(p + 1, "PARAM_")) {
    if (p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) continue;
    size_t n = 0;
    while (isalnum((unsigned char)p[n]) || p[n] == '_') n++;
    if (used_len + n + 2 > used_cap) {
      used_cap = (used_len + n + 2) * 2;
      used_tokens = realloc(used_tokens, used_cap);
    }
    used_tokens[used_len++] = ' ';
    memcpy(used_tokens + used_len, p, n);
    used_len += n;
    used_tokens[used_len] = '\0';
  }
}

static void scan_dir(const char* dir) {
  DIR* d = opendir(dir);
  ck_assert_msg(d != NULL, "cannot open %s", dir);
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      scan_dir(path);
      continue;
    }
    size_t n = strlen(e->d_name);
    bool source =
        (n > 2 && (strcmp(e->d_name + n - 2, ".c") == 0 || strcmp(e->d_name + n - 2, ".h") == 0)) ||
        (n > 3 && strcmp(e->d_name + n - 3, ".cu") == 0);
    if (!source || strcmp(e->d_name, "param_table.h") == 0) continue;
    char* text = unit_read_file(path);
    if (text != NULL) add_tokens(text);
    free(text);
  }
  closedir(d);
}

START_TEST(test_every_row_is_read) {
  char dir[4096];
  snprintf(dir, sizeof(dir), "%s/src", getenv("BATON_SOURCE_DIR"));
  scan_dir(dir);
  ck_assert_ptr_nonnull(used_tokens);
  for (int i = 0; i < PARAM_COUNT; i++) {
    const char* name = param_describe((param_id_t)i)->name;
    /* PARAM_<ID>: the row's id is its name less "NCCL_" (NCCL_BATON_X: id X). */
    const char* id = name + 5;
    if (strncmp(id, "BATON_", 6) == 0) id += 6;
    char token[256];
    snprintf(token, sizeof(token), " PARAM_%s", id);
    bool found = false;
    for (const char* p = strstr(used_tokens, token); p && !found; p = strstr(p + 1, token)) {
      char next = p[strlen(token)];
      found = next == ' ' || next == '\0';
    }
    ck_assert_msg(found, "%s is a row of the table but nothing in src/ reads it (%s)", name,
                  token + 1);
  }
  free(used_tokens);
}
END_TEST

/* ---- The WARN ------------------------------------------------------------------------------- */
static char* log_after(const char* log_path) {
  for (int i = 0; i < 3; i++) (void)param_int(PARAM_BUFFSIZE); /* reads, several times */
  char* text = unit_read_file(log_path);
  return text ? text : strdup("");
}

START_TEST(test_unsupported_set_warns_once) {
  char log_path[512];
  snprintf(log_path, sizeof(log_path), "%s/nccl.log", tmp_dir);
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", log_path, 1);
  setenv("NCCL_CHUNK_SIZE", "131072", 1);
  setenv("NCCL_COLLNET_ENABLE", "0", 1); /* what Baton does anyway: silent */
  char conf[512];
  snprintf(conf, sizeof(conf), "%s/user.conf", tmp_dir);
  unit_write_file(conf, "NCCL_NVB_PRECONNECT=1\n");
  setenv("NCCL_CONF_FILE", conf, 1);
  log_reset();
  char* text = log_after(log_path);
  ck_assert_int_eq(unit_count(text,
                              "NCCL WARN NCCL_CHUNK_SIZE=131072 (set by environment) is "
                              "not supported by Baton and is ignored\n"),
                   1);
  char expect[1024];
  snprintf(expect, sizeof(expect), "NCCL_NVB_PRECONNECT=1 (set by config file %s) is not supported",
           conf);
  ck_assert_int_eq(unit_count(text, expect), 1);
  ck_assert_int_eq(unit_count(text, "NCCL_COLLNET_ENABLE"), 0);
  ck_assert_int_eq(unit_count(text, "NCCL WARN"), 2);
  free(text);

  /* Any other value of a same-as variable WARNs and says what Baton does. */
  setenv("NCCL_COLLNET_ENABLE", "1", 1);
  log_reset();
  text = log_after(log_path);
  ck_assert_int_eq(unit_count(text,
                              "NCCL_COLLNET_ENABLE=1 (set by environment) is not supported by "
                              "Baton and is ignored; Baton behaves as 0\n"),
                   1);
  free(text);
}
END_TEST

START_TEST(test_unsupported_unset_is_silent) {
  char log_path[512];
  snprintf(log_path, sizeof(log_path), "%s/nccl.log", tmp_dir);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "ALL", 1);
  setenv("NCCL_DEBUG_FILE", log_path, 1);
  log_reset();
  char* text = log_after(log_path);
  ck_assert_int_eq(unit_count(text, "not supported by Baton"), 0);
  free(text);
}
END_TEST

static Suite* param_names_suite(void) {
  Suite* s = suite_create("param_names");
  TCase* tc = tcase_create("core");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_every_stock_variable_accounted_for);
  tcase_add_test(tc, test_unsupported_list_is_stock_sorted_and_apart);
  tcase_add_test(tc, test_rows_are_stock_or_baton_own);
  tcase_add_test(tc, test_every_row_is_read);
  tcase_add_test(tc, test_unsupported_set_warns_once);
  tcase_add_test(tc, test_unsupported_unset_is_silent);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(param_names_suite());
}
