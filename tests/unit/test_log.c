/* Logging: line shapes, NCCL_DEBUG levels, NCCL_DEBUG_SUBSYS (with ^), NCCL_DEBUG_FILE (%h, %p,
 * fallback to stdout), the version banner, last error per thread and the error sink, whole lines
 * from concurrent threads, ncclResetDebugInit. Output is captured through NCCL_DEBUG_FILE (or a
 * redirected stdout); each test runs in its own forked process. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "unit.h"

static char tmp_dir[256];
static char log_path[512];

/* The log so far (lines are flushed as written, so the file can be read while open). */
static char* read_log(void) {
  char* text = unit_read_file(log_path);
  return text ? text : strdup("");
}

static bool contains(const char* text, const char* needle) {
  return strstr(text, needle) != NULL;
}

/* "<host>:<pid>:<tid> " of the calling thread. */
static void line_prefix(char* out, size_t len) {
  snprintf(out, len, "%s:%d:%d ", host_name(), (int)getpid(), (int)gettid());
}

static void set_debug(const char* level, const char* subsys) {
  if (level)
    setenv("NCCL_DEBUG", level, 1);
  else
    unsetenv("NCCL_DEBUG");
  if (subsys)
    setenv("NCCL_DEBUG_SUBSYS", subsys, 1);
  else
    unsetenv("NCCL_DEBUG_SUBSYS");
  log_reset();
}

/* Sends stdout to path for the rest of this (forked) test. */
static void redirect_stdout(const char* path) {
  fflush(stdout);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_ge(dup2(fd, STDOUT_FILENO), 0);
  close(fd);
}

static void setup(void) {
  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/baton_log_XXXXXX");
  unit_sandbox_enter(tmp_dir);
  snprintf(log_path, sizeof(log_path), "%s/nccl.log", tmp_dir);
  setenv("NCCL_DEBUG_FILE", log_path, 1);
  log_set_device(-1);
  log_reset();
}

static void teardown(void) {
  unit_sandbox_leave(tmp_dir);
}

START_TEST(test_info_line_format) {
  set_debug("INFO", "INIT");
  INFO(NCCL_INIT, "hello %d", 42);
  log_set_device(3);
  INFO(NCCL_INIT, "with a device");
  char prefix[512], expect[2048];
  line_prefix(prefix, sizeof(prefix));
  char* text = read_log();
  snprintf(expect, sizeof(expect), "%sNCCL INFO hello 42\n%s[3] NCCL INFO with a device\n", prefix,
           prefix);
  ck_assert_str_eq(text, expect);
  free(text);
}
END_TEST

START_TEST(test_warn_line_format) {
  set_debug("WARN", NULL);
  log_set_device(1);
  int line = __LINE__ + 1; /* the line of the WARN below */
  WARN("bad thing: %s", "disk on fire");
  char prefix[512], expect[2048];
  line_prefix(prefix, sizeof(prefix));
  snprintf(expect, sizeof(expect), "%s[1] %s:%d NCCL WARN bad thing: disk on fire\n", prefix,
           __func__, line);
  char* text = read_log();
  /* Stock's default: WARN lines carry "[%F %T] " (NCCL_DEBUG_TIMESTAMP_*), after the blank line. */
  struct tm tm = {0};
  ck_assert_msg(strncmp(text, "\n[", 2) == 0, "no timestamp: %s", text);
  const char* after = strptime(text + 2, "%Y-%m-%d %H:%M:%S] ", &tm);
  ck_assert_msg(after != NULL, "bad timestamp: %s", text);
  tm.tm_isdst = -1;
  ck_assert_msg(labs((long)(mktime(&tm) - time(NULL))) <= 5, "timestamp is not now: %s", text);
  ck_assert_str_eq(after, expect);
  free(text);
  ck_assert_str_eq(log_last_error(), "bad thing: disk on fire");
}
END_TEST

/* NCCL_DEBUG_TIMESTAMP_LEVELS picks the levels, NCCL_DEBUG_TIMESTAMP_FORMAT the format (%Nf: N
 * digits of the second's fraction, _ a space, %% a percent sign). */
START_TEST(test_timestamps) {
  setenv("NCCL_DEBUG_TIMESTAMP_LEVELS", "INFO", 1);
  setenv("NCCL_DEBUG_TIMESTAMP_FORMAT", "<%Y_%3f%%>_", 1);
  set_debug("INFO", "INIT");
  INFO(NCCL_INIT, "probe-info");
  WARN("probe-warn");
  char* text = read_log();
  char year[8];
  time_t now = time(NULL);
  struct tm tm;
  localtime_r(&now, &tm);
  strftime(year, sizeof(year), "%Y", &tm);
  /* The INFO line: "<YYYY NNN%> host:pid:tid NCCL INFO probe-info". */
  char* info = strstr(text, "NCCL INFO probe-info");
  ck_assert_ptr_nonnull(info);
  char* start = info;
  while (start > text && start[-1] != '\n') start--;
  int frac = -1, n = 0;
  char y[8] = "";
  ck_assert_msg(sscanf(start, "<%4s %3d%%> %n", y, &frac, &n) == 2 && n > 0, "line: %s", start);
  ck_assert_str_eq(y, year);
  ck_assert(frac >= 0 && frac <= 999);
  ck_assert(start[n - 1] == ' ' && start[n] != ' ');
  /* The WARN line has none now. */
  char prefix[512];
  line_prefix(prefix, sizeof(prefix));
  char* warn = strstr(text, "probe-warn");
  ck_assert_ptr_nonnull(warn);
  while (warn > text && warn[-1] != '\n') warn--;
  ck_assert_msg(strncmp(warn, prefix, strlen(prefix)) == 0, "WARN line: %s", warn);
  free(text);

  /* ^WARN: every level but WARN; ALL with an empty-looking format ("_"): a lone space. */
  setenv("NCCL_DEBUG_TIMESTAMP_LEVELS", "^WARN", 1);
  setenv("NCCL_DEBUG_TIMESTAMP_FORMAT", "_", 1);
  unlink(log_path);
  set_debug("INFO", "INIT");
  INFO(NCCL_INIT, "probe-2");
  text = read_log();
  char expect[1024];
  snprintf(expect, sizeof(expect), " %sNCCL INFO probe-2\n", prefix);
  ck_assert_str_eq(text, expect);
  free(text);
}
END_TEST

/* NCCL_WARN_ENABLE_DEBUG_INFO=1: INFO lines are logged after the first WARN. */
START_TEST(test_warn_enables_info) {
  setenv("NCCL_WARN_ENABLE_DEBUG_INFO", "1", 1);
  set_debug("WARN", "INIT");
  INFO(NCCL_INIT, "before");
  WARN("trouble");
  INFO(NCCL_INIT, "after");
  char* text = read_log();
  ck_assert_int_eq(unit_count(text, "before"), 0);
  ck_assert_int_eq(unit_count(text, "NCCL INFO after\n"), 1);
  free(text);
  /* Without it the level stays. */
  unsetenv("NCCL_WARN_ENABLE_DEBUG_INFO");
  unlink(log_path);
  set_debug("WARN", "INIT");
  WARN("trouble");
  INFO(NCCL_INIT, "after");
  text = read_log();
  ck_assert_int_eq(unit_count(text, "after"), 0);
  free(text);
}
END_TEST

START_TEST(test_trace_line_format) {
  set_debug("TRACE", "COLL");
  int line = __LINE__ + 1; /* the line of the TRACE below */
  TRACE(NCCL_COLL, "step %d", 5);
  char* text = read_log();
  char prefix[512];
  line_prefix(prefix, sizeof(prefix));
  ck_assert_msg(strncmp(text, prefix, strlen(prefix)) == 0, "bad prefix: %s", text);
  double ms = -1;
  char func[128] = "", rest[128] = "";
  int got_line = 0;
  int n = sscanf(text + strlen(prefix), "%lf %127[^:]:%d NCCL TRACE %127[^\n]", &ms, func,
                 &got_line, rest);
  ck_assert_msg(n == 4, "cannot parse trace line: %s", text);
  ck_assert(ms >= 0.0 && ms < 60000.0);
  ck_assert_str_eq(func, __func__);
  ck_assert_int_eq(got_line, line);
  ck_assert_str_eq(rest, "step 5");
  free(text);
}
END_TEST

/* Emits one line of each kind; returns the captured text: what went to stdout, then the log
 * file's contents. */
static char* emit_all_levels(const char* level) {
  char out_path[512];
  snprintf(out_path, sizeof(out_path), "%s/stdout.txt", tmp_dir);
  redirect_stdout(out_path);
  set_debug(level, "ALL");
  log_version_banner();
  WARN("probe-warn");
  INFO(NCCL_INIT, "probe-info");
  TRACE(NCCL_INIT, "probe-trace");
  fflush(stdout);
  char* out = unit_read_file(out_path);
  char* file = read_log();
  if (out == NULL) return file;
  const size_t out_len = strlen(out), file_len = strlen(file);
  char* both = realloc(out, out_len + file_len + 1);
  ck_assert_ptr_nonnull(both);
  memcpy(both + out_len, file, file_len + 1);
  free(file);
  return both;
}

/* WARN_ALWAYS: with NCCL_DEBUG unset (or below WARN) the line goes to stderr, never stdout or a
 * NCCL_DEBUG_FILE; at WARN and above it goes where WARN lines go (here the file). Either way it is
 * the last error, as a WARN is. */
START_TEST(test_warn_always) {
  static const struct {
    const char* level;
    bool to_file;
  } cases[] = {{NULL, false}, {"VERSION", false}, {"WARN", true}, {"INFO", true}};
  const int i = _i;
  char out_path[512], err_path[512];
  snprintf(out_path, sizeof(out_path), "%s/stdout.txt", tmp_dir);
  snprintf(err_path, sizeof(err_path), "%s/stderr.txt", tmp_dir);
  redirect_stdout(out_path);
  fflush(stderr);
  int saved_err = dup(STDERR_FILENO);
  int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_ge(dup2(fd, STDERR_FILENO), 0);
  close(fd);
  set_debug(cases[i].level, NULL);
  WARN_ALWAYS("probe-always %d", 7);
  WARN("probe-plain");
  fflush(stdout);
  fflush(stderr);
  dup2(saved_err, STDERR_FILENO);
  close(saved_err);
  char* out = unit_read_file(out_path);
  char* err = unit_read_file(err_path);
  char* file = read_log();
  ck_assert_ptr_nonnull(out);
  ck_assert_ptr_nonnull(err);
  ck_assert_msg(!contains(out, "probe-always"), "on stdout at NCCL_DEBUG=%s", cases[i].level);
  ck_assert_msg(contains(cases[i].to_file ? file : err, "NCCL WARN probe-always 7\n"),
                "NCCL_DEBUG=%s: not where it belongs (stderr: \"%s\", file: \"%s\")",
                cases[i].level, err, file);
  ck_assert_msg(!contains(cases[i].to_file ? err : file, "probe-always"),
                "NCCL_DEBUG=%s: printed twice", cases[i].level);
  /* A plain WARN is not printed below WARN, and never on stderr. */
  ck_assert(!contains(err, "probe-plain"));
  ck_assert(contains(file, "probe-plain") == cases[i].to_file);
  ck_assert_str_eq(log_last_error(), "probe-plain");
  free(out);
  free(err);
  free(file);
}
END_TEST

START_TEST(test_level_filtering) {
  /* The library's version string is its own compile definition; the test checks the shape. */
  char banner[256];
  snprintf(banner, sizeof(banner), "NCCL version %d.%d.%d+baton-", NCCL_MAJOR, NCCL_MINOR,
           NCCL_PATCH);
  static const struct {
    const char* level;
    bool banner, warn, info, trace;
  } cases[] = {
      {NULL, false, false, false, false},    {"VERSION", true, false, false, false},
      {"WARN", true, true, false, false},    {"warn", true, true, false, false},
      {"INFO", true, true, true, false},     {"Info", true, true, true, false},
      {"ABORT", true, true, true, false},    {"TRACE", true, true, true, true},
      {"bogus", false, false, false, false},
  };
  int i = _i;
  char* text = emit_all_levels(cases[i].level);
  const char* name = cases[i].level ? cases[i].level : "(unset)";
  ck_assert_msg(contains(text, banner) == cases[i].banner, "%s: banner", name);
  ck_assert_msg(contains(text, "NCCL WARN probe-warn") == cases[i].warn, "%s: warn", name);
  ck_assert_msg(contains(text, "NCCL INFO probe-info") == cases[i].info, "%s: info", name);
  ck_assert_msg(contains(text, "NCCL TRACE probe-trace") == cases[i].trace, "%s: trace", name);
  /* The banner is a bare line at VERSION and WARN, an INFO line from INFO on. */
  if (cases[i].banner) {
    char line[300];
    snprintf(line, sizeof(line), "%s%s", cases[i].info ? "NCCL INFO " : "", banner);
    const char* at = strstr(text, line);
    ck_assert_msg(at != NULL, "%s: banner shape in %s", name, text);
    int major = -1, minor = -1, patch = -1;
    ck_assert_msg(sscanf(at + strlen(line), "%d.%d.%d\n", &major, &minor, &patch) == 3,
                  "%s: no Baton version in %s", name, at);
    if (!cases[i].info)
      ck_assert_msg(strncmp(text, banner, strlen(banner)) == 0, "%s: not a bare line: %s", name,
                    text);
  }
  /* WARNs are recorded even when nothing is printed. */
  ck_assert_str_eq(log_last_error(), "probe-warn");
  free(text);
}
END_TEST

START_TEST(test_nothing_written_when_unset) {
  set_debug(NULL, NULL);
  INFO(NCCL_ALL, "quiet");
  WARN("quiet warn");
  ck_assert_int_eq(access(log_path, F_OK), -1); /* the file is not even created */
  ck_assert_str_eq(log_last_error(), "quiet warn");
}
END_TEST

START_TEST(test_banner_once) {
  set_debug("INFO", "INIT");
  log_version_banner();
  log_version_banner();
  char* text = read_log();
  ck_assert_int_eq(unit_count(text, "NCCL version "), 1);
  ck_assert(contains(text, "+baton-"));
  free(text);
}
END_TEST

START_TEST(test_subsys_filter) {
  static const struct {
    const char* subsys; /* NULL: the default */
    bool init, coll, net, env;
  } cases[] = {
      {NULL, true, false, false, true},        {"COLL", false, true, false, false},
      {"coll, Net", false, true, true, false}, {"^INIT,COLL", false, false, true, true},
      {"^ENV", true, true, true, false},       {"ALL", true, true, true, true},
      {"^ALL", false, false, false, false},    {"NOSUCH", false, false, false, false},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    set_debug("INFO", cases[i].subsys); /* reopens and truncates the log file */
    INFO(NCCL_INIT, "probe-INIT");
    INFO(NCCL_COLL, "probe-COLL");
    INFO(NCCL_NET, "probe-NET");
    INFO(NCCL_ENV, "probe-ENV");
    INFO(NCCL_NET | NCCL_ENV, "probe-NET|ENV");
    char* text = read_log();
    const char* name = cases[i].subsys ? cases[i].subsys : "(default)";
    ck_assert_msg(contains(text, "probe-INIT\n") == cases[i].init, "%s: INIT", name);
    ck_assert_msg(contains(text, "probe-COLL\n") == cases[i].coll, "%s: COLL", name);
    ck_assert_msg(contains(text, "probe-NET\n") == cases[i].net, "%s: NET", name);
    ck_assert_msg(contains(text, "probe-ENV\n") == cases[i].env, "%s: ENV", name);
    ck_assert_msg(contains(text, "probe-NET|ENV\n") == (cases[i].net || cases[i].env),
                  "%s: NET|ENV", name);
    free(text);
  }
}
END_TEST

START_TEST(test_debug_file_expansion) {
  char pattern[512], expect_path[1024];
  snprintf(pattern, sizeof(pattern), "%s/nccl.%%h.%%p.100%%%%.log", tmp_dir);
  snprintf(expect_path, sizeof(expect_path), "%s/nccl.%s.%d.100%%.log", tmp_dir, host_name(),
           (int)getpid());
  setenv("NCCL_DEBUG_FILE", pattern, 1);
  set_debug("INFO", "INIT");
  INFO(NCCL_INIT, "expanded");
  char* text = unit_read_file(expect_path);
  ck_assert_msg(text != NULL, "%s was not created", expect_path);
  ck_assert(contains(text, "NCCL INFO expanded\n"));
  free(text);
  ck_assert_int_eq(access(log_path, F_OK), -1);
}
END_TEST

START_TEST(test_debug_file_bad_path_falls_back_to_stdout) {
  char out_path[512], bad[512];
  snprintf(out_path, sizeof(out_path), "%s/stdout.txt", tmp_dir);
  snprintf(bad, sizeof(bad), "%s/no/such/dir/nccl.log", tmp_dir);
  redirect_stdout(out_path);
  setenv("NCCL_DEBUG_FILE", bad, 1);
  set_debug("INFO", "INIT");
  INFO(NCCL_INIT, "to stdout");
  char* text = unit_read_file(out_path);
  ck_assert_ptr_nonnull(text);
  ck_assert(contains(text, "NCCL INFO to stdout\n"));
  ck_assert_msg(contains(text, "NCCL WARN NCCL_DEBUG_FILE: cannot open") && contains(text, bad),
                "no warning about the bad path: %s", text);
  free(text);
}
END_TEST

static void* warn_in_thread(void* arg) {
  char* result = arg;
  /* A new thread starts with no last error. */
  snprintf(result, 256, "%s|", log_last_error());
  WARN("thread error %d", 7);
  size_t n = strlen(result);
  snprintf(result + n, 256 - n, "%s", log_last_error());
  return NULL;
}

START_TEST(test_last_error_per_thread) {
  set_debug(NULL, NULL);
  ck_assert_str_eq(log_last_error(), "");
  WARN("main error");
  ck_assert_str_eq(log_last_error(), "main error");
  char result[256] = "";
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, warn_in_thread, result), 0);
  pthread_join(t, NULL);
  ck_assert_str_eq(result, "|thread error 7");
  ck_assert_str_eq(log_last_error(), "main error");
  INFO(NCCL_ALL, "not an error");
  ck_assert_str_eq(log_last_error(), "main error");
  log_clear_last_error();
  ck_assert_str_eq(log_last_error(), "");
}
END_TEST

static void* warn_unbound(void* arg) {
  WARN("from another thread");
  return NULL;
}

START_TEST(test_error_sink) {
  set_debug(NULL, NULL);
  char sink[32];
  memset(sink, 'x', sizeof(sink));
  sink[sizeof(sink) - 1] = '\0';
  {
    LOG_SINK_SCOPE(sink, sizeof(sink));
    WARN("sink %d", 7);
    ck_assert_str_eq(sink, "sink 7");
    /* Truncated to the sink and terminated; the thread's own record keeps more. */
    WARN("a message that is much longer than thirty-one characters");
    ck_assert_int_eq(strlen(sink), sizeof(sink) - 1);
    ck_assert(strncmp(sink, "a message that is much longer than", sizeof(sink) - 1) == 0);
    ck_assert_str_eq(log_last_error(), "a message that is much longer than thirty-one characters");
    /* Binding is per thread. */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, warn_unbound, NULL), 0);
    pthread_join(t, NULL);
    ck_assert(strncmp(sink, "a message", 9) == 0);
  }
  WARN("after unbinding");
  ck_assert(strncmp(sink, "a message", 9) == 0);
  ck_assert_str_eq(log_last_error(), "after unbinding");
}
END_TEST

/* Leaves its scope by an early return, as an entry point's failed check does. */
static int scoped_early_return(char* buf, size_t len, int fail) {
  LOG_SINK_SCOPE(buf, len);
  if (fail) {
    WARN("inner failure %d", fail);
    return -1;
  }
  return 0;
}

START_TEST(test_error_sink_scopes_nest) {
  set_debug(NULL, NULL);
  char outer[64] = "", inner[64] = "", other[64] = "";
  ck_assert(!log_sink_rebind(other, sizeof(other))); /* outside any scope: nothing bound */
  WARN("unbound");
  ck_assert_str_eq(other, "");
  {
    LOG_SINK_SCOPE(outer, sizeof(outer));
    ck_assert_int_eq(scoped_early_return(inner, sizeof(inner), 3), -1);
    ck_assert_str_eq(inner, "inner failure 3");
    ck_assert_str_eq(outer, ""); /* the inner scope had its own sink */
    WARN("outer after the inner scope");
    ck_assert_str_eq(outer, "outer after the inner scope"); /* restored on the early return */
    ck_assert_str_eq(inner, "inner failure 3");
    { /* a rebind inside a scope lasts until that scope ends */
      LOG_SINK_SCOPE(NULL, 0);
      WARN("nowhere");
      ck_assert(log_sink_rebind(other, sizeof(other)));
      WARN("to other");
    }
    ck_assert_str_eq(other, "to other");
    ck_assert_str_eq(outer, "outer after the inner scope");
    WARN("outer again");
    ck_assert_str_eq(outer, "outer again");
  }
  WARN("after every scope");
  ck_assert_str_eq(outer, "outer again");
  ck_assert_str_eq(other, "to other");
  ck_assert(!log_sink_rebind(other, sizeof(other)));
}
END_TEST

#define WRITERS 8
#define LINES_PER_WRITER 300
#define PAYLOAD_LEN 300

static void* writer_main(void* arg) {
  int id = (int)(intptr_t)arg;
  char payload[PAYLOAD_LEN + 1];
  memset(payload, 'a' + id, PAYLOAD_LEN);
  payload[PAYLOAD_LEN] = '\0';
  for (int i = 0; i < LINES_PER_WRITER; i++) INFO(NCCL_COLL, "w=%d i=%d %s", id, i, payload);
  return NULL;
}

START_TEST(test_concurrent_lines_are_whole) {
  set_debug("INFO", "COLL");
  pthread_t threads[WRITERS];
  for (int i = 0; i < WRITERS; i++)
    ck_assert_int_eq(pthread_create(&threads[i], NULL, writer_main, (void*)(intptr_t)i), 0);
  for (int i = 0; i < WRITERS; i++) pthread_join(threads[i], NULL);

  char* text = read_log();
  int next[WRITERS] = {0};
  int lines = 0;
  char host_pid[300];
  snprintf(host_pid, sizeof(host_pid), "%s:%d:", host_name(), (int)getpid());
  char* save = NULL;
  for (char* line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    lines++;
    ck_assert_msg(strncmp(line, host_pid, strlen(host_pid)) == 0, "bad line start: %.80s", line);
    const char* msg = strstr(line, " NCCL INFO w=");
    ck_assert_msg(msg != NULL, "bad line: %.80s", line);
    int id = -1, i = -1, used = 0;
    ck_assert_int_eq(sscanf(msg, " NCCL INFO w=%d i=%d %n", &id, &i, &used), 2);
    ck_assert(id >= 0 && id < WRITERS);
    ck_assert_int_eq(i, next[id]); /* each thread's lines in order, none lost */
    next[id]++;
    const char* payload = msg + used;
    ck_assert_int_eq(strlen(payload), PAYLOAD_LEN);
    for (int k = 0; k < PAYLOAD_LEN; k++) ck_assert_int_eq(payload[k], 'a' + id);
  }
  ck_assert_int_eq(lines, WRITERS * LINES_PER_WRITER);
  free(text);
}
END_TEST

START_TEST(test_reset_debug_init) {
  set_debug("WARN", "INIT");
  INFO(NCCL_INIT, "before");
  setenv("NCCL_DEBUG", "INFO", 1);
  INFO(NCCL_INIT, "still cached");
  char* text = read_log();
  ck_assert(!contains(text, "before") && !contains(text, "still cached"));
  free(text);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();
#pragma GCC diagnostic pop
  INFO(NCCL_INIT, "after reset");
  text = read_log();
  ck_assert(contains(text, "NCCL INFO after reset\n"));
  free(text);

  /* The plain export does the same. */
  setenv("NCCL_DEBUG_SUBSYS", "COLL", 1);
  extern void ncclResetDebugInitInternal(void);
  ncclResetDebugInitInternal();
  INFO(NCCL_INIT, "init-now-hidden");
  INFO(NCCL_COLL, "coll-now-shown");
  text = read_log();
  ck_assert(!contains(text, "init-now-hidden") && contains(text, "coll-now-shown"));
  free(text);
}
END_TEST

/* A plugin's logger is log_emit itself: it must work before any setting was read. */
START_TEST(test_emit_before_init_as_plugin_logger) {
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "NET", 1);
  log_reset();
  ck_assert_int_eq(log_level, -1);
  ncclDebugLogger_t logger = log_emit;
  logger(NCCL_LOG_INFO, NCCL_NET, "plugin.c", 12, "plugin says %s", "hi");
  ck_assert_int_eq(log_level, NCCL_LOG_INFO);
  char* text = read_log();
  ck_assert(contains(text, "NCCL INFO plugin says hi\n"));
  free(text);
}
END_TEST

int main(void) {
  Suite* s = suite_create("log");
  TCase* tc = tcase_create("log");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_info_line_format);
  tcase_add_test(tc, test_warn_line_format);
  tcase_add_test(tc, test_trace_line_format);
  tcase_add_test(tc, test_timestamps);
  tcase_add_test(tc, test_warn_enables_info);
  tcase_add_loop_test(tc, test_level_filtering, 0, 9);
  tcase_add_test(tc, test_nothing_written_when_unset);
  tcase_add_loop_test(tc, test_warn_always, 0, 4);
  tcase_add_test(tc, test_banner_once);
  tcase_add_test(tc, test_subsys_filter);
  tcase_add_test(tc, test_debug_file_expansion);
  tcase_add_test(tc, test_debug_file_bad_path_falls_back_to_stdout);
  tcase_add_test(tc, test_last_error_per_thread);
  tcase_add_test(tc, test_error_sink);
  tcase_add_test(tc, test_error_sink_scopes_nest);
  tcase_add_test(tc, test_concurrent_lines_are_whole);
  tcase_add_test(tc, test_reset_debug_init);
  tcase_add_test(tc, test_emit_before_init_as_plugin_logger);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
