/* Logging: NCCL_DEBUG, NCCL_DEBUG_SUBSYS, NCCL_DEBUG_FILE, NCCL_DEBUG_TIMESTAMP_LEVELS and
 * _FORMAT, NCCL_WARN_ENABLE_DEBUG_INFO, and the per-thread last error.
 *
 * Line shapes (as stock NCCL prints them):
 *   INFO:    "[<ts>]<host>:<pid>:<tid> [<dev>] NCCL INFO <msg>"
 *   WARN:    "\n[<ts>]<host>:<pid>:<tid> [<dev>] <func>:<line> NCCL WARN <msg>"   (stock's blank
 * line) TRACE:   "[<ts>]<host>:<pid>:<tid> [<dev>] <ms since start> <func>:<line> NCCL TRACE <msg>"
 *   VERSION: "[<ts>]<msg>"
 * "[<dev>] " is left out while the thread's device is -1 (log_set_device). "[<ts>]" is the
 * wall-clock time in NCCL_DEBUG_TIMESTAMP_FORMAT (default "[%F %T] ") on the levels
 * NCCL_DEBUG_TIMESTAMP_LEVELS lists (default WARN), as stock. Each line is formatted
 * into one buffer and written with one fwrite + fflush under a mutex, so lines of concurrent
 * threads never interleave.
 *
 * Settings are read lazily by the first log call of any thread (log_level stays -1 until then)
 * and again after log_reset. Reading them reads the parameter table, which may itself log (ENV
 * lines, malformed values); that nested call completes the initialization, and the outer one then
 * finds it done. So no lock is held while parameters are read. */
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

#define LOG_LINE_MAX 4096
#define LOG_ERROR_MAX 1024
#define LOG_PATH_MAX 4096
#define LOG_TS_FORMAT_MAX 256

int log_level = -1;

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
/* Serializes copies into error sinks: several threads of one communicator (executor channels,
 * the proxy, the caller) share its last-error buffer and may WARN at once. */
static pthread_mutex_t log_sink_lock = PTHREAD_MUTEX_INITIALIZER;
/* Held around localtime_r/strftime: libc's time-zone lock must not be held by one of our threads
 * when the process forks (a child inheriting it locked would hang on its first timestamp), so
 * fork waits for this lock (log_atfork_prepare). */
static pthread_mutex_t log_time_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static FILE* log_file; /* under log_lock; NULL: stdout */
static uint64_t log_mask;
static uint64_t log_epoch_ns;
static atomic_int log_banner_shown;
/* Timestamps: a bit per level (1 << level) and the strftime format (%1f..%9f: fraction digits). */
static uint32_t log_ts_levels;
static char log_ts_format[LOG_TS_FORMAT_MAX];
static bool log_warn_raises_to_info; /* NCCL_WARN_ENABLE_DEBUG_INFO */

static __thread char log_tls_error[LOG_ERROR_MAX];
__thread char* log_tls_sink; /* base.h: the error sink bound on this thread */
__thread size_t log_tls_sink_len;
__thread int log_tls_sink_scopes; /* LOG_SINK_SCOPEs open on this thread */
static __thread int log_tls_dev = -1;

/* ---- Settings ---------------------------------------------------------------------------------
 */

static int log_parse_level(const char* text) {
  static const struct {
    const char* name;
    int level;
  } levels[] = {
      {.name = "VERSION", .level = NCCL_LOG_VERSION}, {.name = "WARN", .level = NCCL_LOG_WARN},
      {.name = "INFO", .level = NCCL_LOG_INFO},       {.name = "ABORT", .level = NCCL_LOG_ABORT},
      {.name = "TRACE", .level = NCCL_LOG_TRACE},
  };
  if (text == NULL) return NCCL_LOG_NONE;
  for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
    if (strcasecmp(text, levels[i].name) == 0) return levels[i].level;
  return NCCL_LOG_NONE;
}

static uint64_t log_subsys_bit(const char* name) {
  static const struct {
    const char* name;
    uint64_t bit;
  } subsystems[] = {
      {.name = "INIT", .bit = NCCL_INIT},
      {.name = "COLL", .bit = NCCL_COLL},
      {.name = "P2P", .bit = NCCL_P2P},
      {.name = "SHM", .bit = NCCL_SHM},
      {.name = "NET", .bit = NCCL_NET},
      {.name = "GRAPH", .bit = NCCL_GRAPH},
      {.name = "TUNING", .bit = NCCL_TUNING},
      {.name = "ENV", .bit = NCCL_ENV},
      {.name = "ALLOC", .bit = NCCL_ALLOC},
      {.name = "CALL", .bit = NCCL_CALL},
      {.name = "PROXY", .bit = NCCL_PROXY},
      {.name = "NVLS", .bit = NCCL_NVLS},
      {.name = "BOOTSTRAP", .bit = NCCL_BOOTSTRAP},
      {.name = "REG", .bit = NCCL_REG},
      {.name = "PROFILE", .bit = NCCL_PROFILE},
      {.name = "RAS", .bit = NCCL_RAS},
      {.name = "ALL", .bit = ~(uint64_t)0},
  };
  for (size_t i = 0; i < sizeof(subsystems) / sizeof(subsystems[0]); i++)
    if (strcasecmp(name, subsystems[i].name) == 0) return subsystems[i].bit;
  return 0; /* unknown names select nothing */
}

/* "A,B,C" selects those subsystems; "^A,B" selects all but those. */
static uint64_t log_parse_subsys(const char* text) {
  if (text == NULL) return 0;
  bool invert = text[0] == '^';
  uint64_t mask = invert ? ~(uint64_t)0 : 0;
  char* copy = strdup(invert ? text + 1 : text);
  if (copy == NULL) return mask;
  char* save = NULL;
  for (char* tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    while (*tok == ' ' || *tok == '\t') tok++;
    size_t n = strlen(tok);
    while (n > 0 && (tok[n - 1] == ' ' || tok[n - 1] == '\t')) tok[--n] = '\0';
    uint64_t bit = log_subsys_bit(tok);
    mask = invert ? (mask & ~bit) : (mask | bit);
  }
  free(copy);
  return mask;
}

/* NCCL_DEBUG_TIMESTAMP_LEVELS: "WARN,INFO", "ALL", "^TRACE" (every level but TRACE). Unknown
 * names select nothing. */
static uint32_t log_parse_ts_levels(const char* text) {
  if (text == NULL) return 0;
  bool invert = text[0] == '^';
  uint32_t mask = invert ? ~0u : 0u;
  char* copy = strdup(invert ? text + 1 : text);
  if (copy == NULL) return mask;
  char* save = NULL;
  for (char* tok = strtok_r(copy, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
    uint32_t bit = strcasecmp(tok, "ALL") == 0 ? ~0u : 0u;
    int level = log_parse_level(tok);
    if (level > NCCL_LOG_NONE) bit = 1u << level;
    mask = invert ? (mask & ~bit) : (mask | bit);
  }
  free(copy);
  return mask;
}

/* NCCL_DEBUG_TIMESTAMP_FORMAT as stored: '_' read as a space (hard to pass on a command line). */
static void log_parse_ts_format(const char* text, char* out, size_t len) {
  snprintf(out, len, "%s", text ? text : "");
  for (char* p = out; *p != '\0'; p++)
    if (*p == '_') *p = ' ';
}

/* NCCL_DEBUG_FILE pattern: %h -> host name, %p -> pid, %% -> %; other text is copied. */
static void log_expand_path(const char* pattern, char* out, size_t len) {
  size_t n = 0;
  for (const char* p = pattern; *p != '\0' && n + 1 < len; p++) {
    if (p[0] == '%' && p[1] == 'h') {
      n += (size_t)snprintf(out + n, len - n, "%s", host_name());
      p++;
    } else if (p[0] == '%' && p[1] == 'p') {
      n += (size_t)snprintf(out + n, len - n, "%d", (int)getpid());
      p++;
    } else if (p[0] == '%' && p[1] == '%') {
      out[n++] = '%';
      p++;
    } else {
      out[n++] = *p;
    }
    if (n >= len) n = len - 1;
  }
  out[n] = '\0';
}

static void log_atfork_prepare(void) {
  pthread_mutex_lock(&log_sink_lock);
  pthread_mutex_lock(&log_lock);
  pthread_mutex_lock(&log_time_lock);
}
static void log_atfork_release(void) {
  pthread_mutex_unlock(&log_time_lock);
  pthread_mutex_unlock(&log_lock);
  pthread_mutex_unlock(&log_sink_lock);
}
static void log_once_init(void) {
  log_epoch_ns = clock_ns();
  pthread_atfork(log_atfork_prepare, log_atfork_release, log_atfork_release);
}

static void log_write_line(int level, const char* func, int line, const char* msg, FILE* to);

/* Returns the current level, reading the settings first if needed. */
static int log_init(void) {
  int level = __atomic_load_n(&log_level, __ATOMIC_ACQUIRE);
  if (level >= 0) return level;
  pthread_once(&log_once, log_once_init);

  /* May log (and so re-enter log_init) the first time parameters are read. */
  int new_level = log_parse_level(param_str(PARAM_DEBUG));
  uint64_t new_mask = log_parse_subsys(param_str(PARAM_DEBUG_SUBSYS));
  const char* file_pattern = param_str(PARAM_DEBUG_FILE);
  uint32_t ts_levels = log_parse_ts_levels(param_str(PARAM_DEBUG_TIMESTAMP_LEVELS));
  char ts_format[LOG_TS_FORMAT_MAX];
  log_parse_ts_format(param_str(PARAM_DEBUG_TIMESTAMP_FORMAT), ts_format, sizeof(ts_format));
  bool warn_raises = param_int(PARAM_WARN_ENABLE_DEBUG_INFO) != 0;

  char path[LOG_PATH_MAX] = "";
  int open_errno = 0;
  pthread_mutex_lock(&log_lock);
  level = log_level;
  if (level < 0) {
    FILE* f = NULL;
    if (file_pattern != NULL && new_level > NCCL_LOG_VERSION) {
      log_expand_path(file_pattern, path, sizeof(path));
      f = fopen(path, "we");
      if (f == NULL) open_errno = errno;
    }
    log_file = f;
    log_ts_levels = ts_levels;
    memcpy(log_ts_format, ts_format, sizeof(log_ts_format));
    log_warn_raises_to_info = warn_raises;
    __atomic_store_n(&log_mask, new_mask, __ATOMIC_RELAXED);
    __atomic_store_n(&log_level, new_level, __ATOMIC_RELEASE);
    level = new_level;
  }
  pthread_mutex_unlock(&log_lock);

  if (open_errno != 0) {
    char msg[LOG_PATH_MAX + 128];
    snprintf(msg, sizeof(msg), "NCCL_DEBUG_FILE: cannot open %s: %s; logging to stdout", path,
             strerror(open_errno));
    log_write_line(NCCL_LOG_WARN, __func__, __LINE__, msg, NULL);
  }
  return level;
}

void log_reset(void) {
  param_reload();
  pthread_mutex_lock(&log_lock);
  if (log_file != NULL) fclose(log_file);
  log_file = NULL;
  __atomic_store_n(&log_level, -1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&log_lock);
}

/* ---- Output -----------------------------------------------------------------------------------
 */

static void log_append(char* buf, size_t cap, size_t* len, const char* fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void log_append(char* buf, size_t cap, size_t* len, const char* fmt, ...) {
  if (*len >= cap - 1) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len += (size_t)n;
  if (*len > cap - 1) *len = cap - 1;
}

/* Appends the wall-clock time in log_ts_format, its %1f..%9f replaced by that many digits of the
 * second's fraction ("%%" stays a literal percent). */
static void log_append_timestamp(char* buf, size_t cap, size_t* len) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  char fmt[LOG_TS_FORMAT_MAX + 16];
  size_t n = 0;
  for (const char* p = log_ts_format; *p != '\0' && n + 12 < sizeof(fmt); p++) {
    if (p[0] == '%' && p[1] == '%') {
      fmt[n++] = *p++;
      fmt[n++] = *p;
    } else if (p[0] == '%' && p[1] >= '1' && p[1] <= '9' && p[2] == 'f') {
      int digits = p[1] - '0';
      long frac = ts.tv_nsec;
      for (int d = digits; d < 9; d++) frac /= 10;
      n += (size_t)snprintf(fmt + n, sizeof(fmt) - n, "%0*ld", digits, frac);
      p += 2;
    } else {
      fmt[n++] = *p;
    }
  }
  fmt[n] = '\0';
  pthread_mutex_lock(&log_time_lock);
  struct tm tm;
  localtime_r(&ts.tv_sec, &tm);
  if (*len < cap) *len += strftime(buf + *len, cap - *len, fmt, &tm);
  pthread_mutex_unlock(&log_time_lock);
}

/* Writes one line to `to`, or (NULL) to the log: NCCL_DEBUG_FILE, else stdout. */
static void log_write_line(int level, const char* func, int line, const char* msg, FILE* to) {
  char buf[LOG_LINE_MAX];
  size_t len = 0;
  const size_t cap = sizeof(buf) - 1; /* room for the final newline */
  if (level == NCCL_LOG_WARN) buf[len++] = '\n';
  if ((log_ts_levels & (1u << level)) != 0 && log_ts_format[0] != '\0')
    log_append_timestamp(buf, cap, &len);
  if (level == NCCL_LOG_VERSION) {
    log_append(buf, cap, &len, "%s", msg);
  } else {
    log_append(buf, cap, &len, "%s:%d:%d ", host_name(), (int)getpid(), (int)gettid());
    if (log_tls_dev >= 0) log_append(buf, cap, &len, "[%d] ", log_tls_dev);
    if (level == NCCL_LOG_WARN) {
      log_append(buf, cap, &len, "%s:%d NCCL WARN %s", func, line, msg);
    } else if (level == NCCL_LOG_TRACE) {
      double ms = (double)(clock_ns() - log_epoch_ns) / 1e6;
      log_append(buf, cap, &len, "%f %s:%d NCCL TRACE %s", ms, func, line, msg);
    } else if (level == NCCL_LOG_ABORT) {
      log_append(buf, cap, &len, "%s:%d NCCL ABORT %s", func, line, msg);
    } else {
      log_append(buf, cap, &len, "NCCL INFO %s", msg);
    }
  }
  buf[len++] = '\n';

  pthread_mutex_lock(&log_lock);
  FILE* out = to != NULL ? to : log_file != NULL ? log_file : stdout;
  fwrite(buf, 1, len, out);
  fflush(out);
  pthread_mutex_unlock(&log_lock);
}

static bool log_selected(int current, int level, unsigned long flags) {
  if (level <= NCCL_LOG_NONE || current < level) return false;
  if (level == NCCL_LOG_VERSION) return true;
  return (flags & __atomic_load_n(&log_mask, __ATOMIC_RELAXED)) != 0;
}

/* Copies src into dst[cap], truncated, always terminated (cap > 0). */
static void log_copy_text(char* dst, size_t cap, const char* src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* Copies a WARN into a shared sink. Writers take turns; a reader that does not lock (the user's
 * ncclGetLastError) may catch a line half replaced, but never an unterminated one: the last byte
 * is a terminator before and during every copy. */
static void log_copy_sink(char* dst, size_t cap, const char* src) {
  pthread_mutex_lock(&log_sink_lock);
  __atomic_store_n(&dst[cap - 1], '\0', __ATOMIC_RELAXED);
  log_copy_text(dst, cap, src);
  pthread_mutex_unlock(&log_sink_lock);
}

void log_emit(ncclDebugLogLevel level, unsigned long flags, const char* func, int line,
              const char* fmt, ...) {
  char msg[LOG_LINE_MAX];
  va_list ap;
  bool formatted = false;
  if (level == NCCL_LOG_WARN) {
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    formatted = true;
  }
  /* Reading the settings may log (and overwrite the last error) the first time, so record this
   * message after it. */
  int current = log_init();
  if (level == NCCL_LOG_WARN) {
    /* Recorded whatever the level: ncclGetLastError reports it even with logging off. */
    log_copy_text(log_tls_error, sizeof(log_tls_error), msg);
    if (log_tls_sink != NULL) log_copy_sink(log_tls_sink, log_tls_sink_len, msg);
  }
  bool selected = log_selected(current, level, flags);
  /* NCCL_WARN_ENABLE_DEBUG_INFO: after a logged WARN, INFO lines are logged too (as stock). */
  if (selected && level == NCCL_LOG_WARN && log_warn_raises_to_info && current < NCCL_LOG_INFO)
    __atomic_store_n(&log_level, NCCL_LOG_INFO, __ATOMIC_RELEASE);
  if (!selected) return;
  if (!formatted) {
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
  }
  log_write_line(level, func ? func : "?", line, msg, NULL);
}

void log_alert(const char* func, int line, const char* fmt, ...) {
  char msg[LOG_LINE_MAX];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  int current = log_init();
  log_copy_text(log_tls_error, sizeof(log_tls_error), msg);
  if (log_tls_sink != NULL) log_copy_sink(log_tls_sink, log_tls_sink_len, msg);
  /* Where WARN lines go when they are logged; stderr (never stdout, which is the program's own
   * output) when NCCL_DEBUG leaves them out. */
  FILE* to = log_selected(current, NCCL_LOG_WARN, NCCL_ALL) ? NULL : stderr;
  log_write_line(NCCL_LOG_WARN, func ? func : "?", line, msg, to);
}

void log_version_banner(void) {
  int current = log_init();
  if (current < NCCL_LOG_VERSION) return;
  if (atomic_exchange(&log_banner_shown, 1) != 0) return;
  /* Like stock: a bare line at VERSION and WARN, an INFO line when INFO lines are printed. */
  ncclDebugLogLevel level = current >= NCCL_LOG_INFO ? NCCL_LOG_INFO : NCCL_LOG_VERSION;
  log_emit(level, NCCL_ALL, __func__, __LINE__, "NCCL version %d.%d.%d+baton-%s", NCCL_MAJOR,
           NCCL_MINOR, NCCL_PATCH, BATON_VERSION_STRING);
  INFO(NCCL_INIT, "%s", build_info());
}

/* ---- Last error and per-thread context ------------------------------------------------------ */

const char* log_last_error(void) {
  return log_tls_error;
}

void log_clear_last_error(void) {
  log_tls_error[0] = '\0';
}

void log_set_device(int dev) {
  log_tls_dev = dev;
}
