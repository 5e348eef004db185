/* Parameters: every NCCL_* variable of src/base/param_table.h, read once from the environment and
 * the configuration files, then served from an immutable snapshot.
 *
 * Sources, first one wins (as stock NCCL):
 *   1. the environment (an empty value counts as unset);
 *   2. the file named by NCCL_CONF_FILE, or ~/.nccl.conf ($HOME, else the passwd entry) when
 *      NCCL_CONF_FILE is unset -- NCCL_CONF_FILE replaces ~/.nccl.conf, it does not add to it;
 *   3. /etc/nccl.conf (tests move it with param_set_system_conf_path);
 *   4. the row's default.
 * A conf file holds NAME=VALUE lines; blank lines and lines starting with '#' are skipped and
 * whitespace around the name and the value is trimmed. Values are not exported to the environment.
 *
 * Stock variables Baton does not support (src/base/param_unsupported.h) are read from the same
 * sources; one given a value other than the one Baton already behaves as WARNs once per snapshot.
 * "The environment" is what env_get returns: getenv, or an NCCL_ENV_PLUGIN's getEnv.
 *
 * Concurrency: the current snapshot is published with an atomic pointer; loading it takes a mutex.
 * param_reload retires the snapshot instead of freeing it, so a string returned by param_str stays
 * valid for the life of the process. Rows that differ from their default are logged at INFO ENV
 * (malformed integers WARN) once per snapshot, after it is published: logging reads parameters
 * itself, so nothing is logged while the mutex is held. */
#include <ctype.h>
#include <limits.h>
#include <pthread.h>
#include <pwd.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/base.h"

#define PARAM_ROW(id_, name_, type_, def_, doc_) \
  [PARAM_##id_] = {.name = name_, .type = type_, .def = def_, .doc = doc_},
static const param_desc_t param_descs[PARAM_COUNT] = {
#include "base/param_table.h"
};
#undef PARAM_ROW

typedef struct param_unsupported {
  const char* name;
  const char* same_as; /* the value Baton already behaves as (accepted silently), or NULL */
} param_unsupported_t;
#define PARAM_UNSUPPORTED(name_, same_as_) {.name = name_, .same_as = same_as_},
static const param_unsupported_t param_unsupported[] = {
#include "base/param_unsupported.h"
};
#undef PARAM_UNSUPPORTED
#define PARAM_UNSUPPORTED_COUNT ((int)(sizeof(param_unsupported) / sizeof(param_unsupported[0])))

#define PARAM_SYSTEM_CONF_DEFAULT "/etc/nccl.conf"
#define PARAM_NUM_CONF_FILES 2 /* NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf */

typedef enum { PARAM_SRC_DEFAULT = 0, PARAM_SRC_ENV, PARAM_SRC_FILE } param_src_t;

typedef struct param_value {
  char* text;  /* owned copy of the value as given; NULL: not given */
  int64_t num; /* PARAM_INT: the value, or the default when not given or malformed */
  param_src_t src;
  const char* file; /* PARAM_SRC_FILE: the conf file that gave it (owned by the snapshot) */
  bool malformed;   /* PARAM_INT given but not an integer */
} param_value_t;

typedef struct param_snapshot {
  param_value_t values[PARAM_COUNT];
  param_value_t unsupported[PARAM_UNSUPPORTED_COUNT]; /* text, src and file only */
  int64_t nums[PARAM_COUNT];                          /* values[i].num: param_int's fast path */
  char* files[PARAM_NUM_CONF_FILES];
  atomic_int reported;                 /* ENV lines and WARNs already logged */
  struct param_snapshot* retired_next; /* kept reachable after param_reload */
} param_snapshot_t;

static pthread_mutex_t param_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t param_atfork_once = PTHREAD_ONCE_INIT;
static _Atomic(param_snapshot_t*) param_current;
static param_snapshot_t* param_retired; /* under param_lock */
static char* param_system_conf;         /* under param_lock; NULL: /etc/nccl.conf */
static param_snapshot_t param_fallback; /* all defaults, used if a snapshot cannot be allocated */
const int64_t* param_int_values;        /* base.h: the reported snapshot's nums, else NULL */

/* ---- Parsing ----------------------------------------------------------------------------------
 */

/* A signed decimal or 0x-hex integer, surrounding whitespace allowed; false if anything else. */
static bool param_parse_int(const char* text, int64_t* out) {
  const char* p = text;
  while (isspace((unsigned char)*p)) p++;
  bool negative = false;
  if (*p == '+' || *p == '-') negative = (*p++ == '-');
  int base = 10;
  if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
    base = 16;
    p += 2;
  }
  if (base == 10 ? !isdigit((unsigned char)*p) : !isxdigit((unsigned char)*p)) return false;
  errno = 0;
  char* end = NULL;
  unsigned long long magnitude = strtoull(p, &end, base);
  if (errno == ERANGE) return false;
  while (isspace((unsigned char)*end)) end++;
  if (*end != '\0') return false;
  int64_t value;
  if (negative) {
    if (magnitude > (unsigned long long)INT64_MAX + 1ULL) return false;
    value = magnitude == (unsigned long long)INT64_MAX + 1ULL ? INT64_MIN : -(int64_t)magnitude;
  } else {
    if (magnitude > (unsigned long long)INT64_MAX) return false;
    value = (int64_t)magnitude;
  }
  *out = value;
  return true;
}

static int64_t param_default_int(const param_desc_t* d) {
  int64_t value = 0;
  if (d->type != PARAM_INT || d->def == NULL || !param_parse_int(d->def, &value)) return 0;
  return value;
}

static int param_find(const char* name) {
  for (int i = 0; i < PARAM_COUNT; i++)
    if (strcmp(param_descs[i].name, name) == 0) return i;
  return -1;
}

/* Index of name in the unsupported list, -1 if it is not there. */
static int param_find_unsupported(const char* name) {
  for (int i = 0; i < PARAM_UNSUPPORTED_COUNT; i++)
    if (strcmp(param_unsupported[i].name, name) == 0) return i;
  return -1;
}

/* Records a given text in v from src; the first source to give a value wins. False when v keeps
 * what it had. */
static bool param_text_set(param_value_t* v, const char* text, param_src_t src, const char* file) {
  if (v->src != PARAM_SRC_DEFAULT || text == NULL || text[0] == '\0') return false;
  char* copy = strdup(text);
  if (copy == NULL) return false; /* out of memory: keep the default */
  v->text = copy;
  v->src = src;
  v->file = file;
  return true;
}

/* Records a given value for row id from src; the first source to give a row wins. */
static void param_value_set(param_snapshot_t* s, int id, const char* text, param_src_t src,
                            const char* file) {
  param_value_t* v = &s->values[id];
  if (!param_text_set(v, text, src, file)) return;
  const char* copy = v->text;
  if (param_descs[id].type == PARAM_INT) {
    int64_t num;
    if (param_parse_int(copy, &num))
      v->num = num;
    else
      v->malformed = true;
  }
}

static char* param_trim(char* s) {
  while (isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

/* Reads NAME=VALUE lines of one conf file into rows not given yet. A missing file is normal. */
static void param_read_conf_file(param_snapshot_t* s, const char* path) {
  FILE* f = fopen(path, "re");
  if (f == NULL) return;
  char* line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) != -1) {
    char* text = param_trim(line);
    if (text[0] == '\0' || text[0] == '#') continue;
    char* eq = strchr(text, '=');
    if (eq == NULL) continue;
    *eq = '\0';
    char* name = param_trim(text);
    char* value = param_trim(eq + 1);
    int id = param_find(name);
    if (id == PARAM_CONF_FILE) continue; /* NCCL_CONF_FILE itself comes from the env */
    if (id >= 0) {
      param_value_set(s, id, value, PARAM_SRC_FILE, path);
    } else if ((id = param_find_unsupported(name)) >= 0) {
      (void)param_text_set(&s->unsupported[id], value, PARAM_SRC_FILE, path);
    }
  }
  free(line);
  fclose(f);
}

static char* param_home_conf_path(void) {
  const char* home = getenv("HOME");
  char pwbuf[1024];
  struct passwd pw, *pwres = NULL;
  if (home == NULL || home[0] == '\0') {
    if (getpwuid_r(getuid(), &pw, pwbuf, sizeof(pwbuf), &pwres) != 0 || pwres == NULL) return NULL;
    home = pwres->pw_dir;
  }
  char* path = NULL;
  if (asprintf(&path, "%s/.nccl.conf", home) < 0) return NULL;
  return path;
}

/* Builds a new snapshot. Called with param_lock held; logs nothing. */
static param_snapshot_t* param_load(void) {
  param_snapshot_t* s = calloc(1, sizeof(*s));
  if (s == NULL) s = &param_fallback; /* all rows keep their defaults */
  for (int i = 0; i < PARAM_COUNT; i++)
    s->nums[i] = s->values[i].num = param_default_int(&param_descs[i]);
  if (s == &param_fallback) return s;

  for (int i = 0; i < PARAM_COUNT; i++)
    param_value_set(s, i, env_get(param_descs[i].name), PARAM_SRC_ENV, NULL);
  for (int i = 0; i < PARAM_UNSUPPORTED_COUNT; i++)
    (void)param_text_set(&s->unsupported[i], env_get(param_unsupported[i].name), PARAM_SRC_ENV,
                         NULL);

  const char* user_conf = s->values[PARAM_CONF_FILE].text;
  s->files[0] = user_conf ? strdup(user_conf) : param_home_conf_path();
  s->files[1] = strdup(param_system_conf ? param_system_conf : PARAM_SYSTEM_CONF_DEFAULT);
  for (int f = 0; f < PARAM_NUM_CONF_FILES; f++)
    if (s->files[f] != NULL) param_read_conf_file(s, s->files[f]);
  for (int i = 0; i < PARAM_COUNT; i++) s->nums[i] = s->values[i].num;
  return s;
}

/* ---- Reporting --------------------------------------------------------------------------------
 */

static bool param_differs_from_default(const param_desc_t* d, const param_value_t* v) {
  if (d->type == PARAM_INT) return v->num != param_default_int(d);
  return d->def == NULL || strcmp(v->text, d->def) != 0;
}

static const char* param_src_name(const param_value_t* v) {
  return v->src == PARAM_SRC_ENV ? "environment" : "config file";
}

/* The unsupported variables given a value Baton does not already behave as: one WARN each. */
static void param_report_unsupported(const param_snapshot_t* s) {
  for (int i = 0; i < PARAM_UNSUPPORTED_COUNT; i++) {
    const param_unsupported_t* u = &param_unsupported[i];
    const param_value_t* v = &s->unsupported[i];
    if (v->src == PARAM_SRC_DEFAULT) continue;
    const char* file = v->src == PARAM_SRC_FILE ? v->file : "";
    if (u->same_as != NULL && strcmp(v->text, u->same_as) == 0) {
      INFO(NCCL_ENV, "%s set by %s%s%s to %s, which is what Baton does anyway", u->name,
           param_src_name(v), file[0] ? " " : "", file, v->text);
      continue;
    }
    WARN("%s=%s (set by %s%s%s) is not supported by Baton and is ignored%s%s", u->name, v->text,
         param_src_name(v), file[0] ? " " : "", file, u->same_as ? "; Baton behaves as " : "",
         u->same_as ? u->same_as : "");
  }
}

/* Logs, once per snapshot, what the environment plugin did, the rows given a non-default value,
 * the malformed integers and the unsupported variables that are set. The log calls may read
 * parameters again (logging's own settings); reported is set first, so that nested call returns
 * at once. */
static void param_report(param_snapshot_t* s) {
  if (atomic_exchange(&s->reported, 1) != 0) return;
  env_plugin_report();
  for (int i = 0; i < PARAM_COUNT; i++) {
    const param_desc_t* d = &param_descs[i];
    const param_value_t* v = &s->values[i];
    if (v->src == PARAM_SRC_DEFAULT) continue;
    const char* where = param_src_name(v);
    const char* file = v->src == PARAM_SRC_FILE ? v->file : "";
    if (v->malformed) {
      WARN(
          "Invalid value \"%s\" for %s (set by %s%s%s): expected a decimal or 0x-hex integer; "
          "using the default %s",
          v->text, d->name, where, file[0] ? " " : "", file, d->def ? d->def : "0");
      continue;
    }
    if (!param_differs_from_default(d, v)) continue;
    INFO(NCCL_ENV, "%s set by %s%s%s to %s", d->name, where, file[0] ? " " : "", file, v->text);
  }
  param_report_unsupported(s);
}

/* ---- Snapshot lifecycle -----------------------------------------------------------------------
 */

static void param_atfork_prepare(void) {
  pthread_mutex_lock(&param_lock);
}
static void param_atfork_release(void) {
  pthread_mutex_unlock(&param_lock);
}
static void param_atfork_register(void) {
  pthread_atfork(param_atfork_prepare, param_atfork_release, param_atfork_release);
}

static param_snapshot_t* param_snapshot(void) {
  param_snapshot_t* s = atomic_load_explicit(&param_current, memory_order_acquire);
  if (s == NULL) {
    pthread_once(&param_atfork_once, param_atfork_register);
    pthread_mutex_lock(&param_lock);
    s = atomic_load_explicit(&param_current, memory_order_relaxed);
    if (s == NULL) {
      s = param_load();
      atomic_store_explicit(&param_current, s, memory_order_release);
    }
    pthread_mutex_unlock(&param_lock);
  }
  if (atomic_load_explicit(&s->reported, memory_order_relaxed) == 0) {
    param_report(s);
    /* reported: param_int reads this snapshot's integers inline from now on (base.h), until a
     * reload (which never frees a snapshot) takes them back */
    pthread_mutex_lock(&param_lock);
    if (atomic_load_explicit(&param_current, memory_order_relaxed) == s)
      __atomic_store_n(&param_int_values, s->nums, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&param_lock);
  }
  return s;
}

void param_reload(void) {
  pthread_once(&param_atfork_once, param_atfork_register);
  pthread_mutex_lock(&param_lock);
  __atomic_store_n(&param_int_values, NULL, __ATOMIC_RELEASE);
  param_snapshot_t* old = atomic_exchange(&param_current, NULL);
  if (old == &param_fallback) {
    atomic_store(&param_fallback.reported, 0);
  } else if (old != NULL) {
    old->retired_next = param_retired;
    param_retired = old;
  }
  pthread_mutex_unlock(&param_lock);
}

void param_set_system_conf_path(const char* path) {
  pthread_once(&param_atfork_once, param_atfork_register);
  char* copy = path ? strdup(path) : NULL;
  pthread_mutex_lock(&param_lock);
  free(param_system_conf);
  param_system_conf = copy;
  pthread_mutex_unlock(&param_lock);
}

/* ---- Queries ----------------------------------------------------------------------------------
 */

static bool param_id_valid(param_id_t id) {
  return (int)id >= 0 && (int)id < PARAM_COUNT;
}

const param_desc_t* param_describe(param_id_t id) {
  return param_id_valid(id) ? &param_descs[id] : NULL;
}

int64_t param_int_load(param_id_t id) {
  if (!param_id_valid(id)) return 0;
  return param_snapshot()->values[id].num;
}

const char* param_str(param_id_t id) {
  if (!param_id_valid(id)) return NULL;
  const param_value_t* v = &param_snapshot()->values[id];
  return v->text ? v->text : param_descs[id].def;
}

int param_unsupported_count(void) {
  return PARAM_UNSUPPORTED_COUNT;
}

const char* param_unsupported_name(int i) {
  return i >= 0 && i < PARAM_UNSUPPORTED_COUNT ? param_unsupported[i].name : NULL;
}

bool param_is_set(param_id_t id) {
  if (!param_id_valid(id)) return false;
  return param_snapshot()->values[id].src != PARAM_SRC_DEFAULT;
}
