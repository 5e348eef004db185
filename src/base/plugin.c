/* Plugin libraries: opening one by stock's naming rules (NCCL_NET_PLUGIN, NCCL_TUNER_PLUGIN,
 * NCCL_PROFILER_PLUGIN, NCCL_ENV_PLUGIN), and the environment plugin that every NCCL_* variable
 * is read through.
 *
 * The environment plugin's ABI: ncclEnvPlugin_v2 (stock 2.30) {name, init(major, minor, patch,
 * suffix, logFunction), finalize(), getEnv(name)}, taken first as stock's loader takes it, else
 * ncclEnvPlugin_v1 (stock 2.28: init without the logger). getEnv's answer stays valid until the
 * next getEnv of that name or finalize; param.c copies it at once. */
#include <dlfcn.h>
#include <link.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <strings.h>

#include "base/base.h"

#define PLUGIN_NAME_MAX 512
#define PLUGIN_WHY_MAX 1024

static const char* const plugin_prefixes[PLUGIN_KIND_COUNT] = {
    [PLUGIN_NET] = "libnccl-net",
    [PLUGIN_TUNER] = "libnccl-tuner",
    [PLUGIN_PROFILER] = "libnccl-profiler",
    [PLUGIN_ENV] = "libnccl-env",
};

bool plugin_name_is_none(const char* name) {
  return name != NULL && strcasecmp(name, "none") == 0;
}

static bool plugin_ends_with(const char* s, const char* suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

/* Appends "; <candidate>: <reason>" (the first without "; ") to why. */
static void plugin_why_add(char* why, size_t why_len, const char* candidate, const char* reason) {
  size_t used = strnlen(why, why_len);
  if (used + 1 >= why_len) return;
  snprintf(why + used, why_len - used, "%s%s: %s", used ? "; " : "", candidate, reason);
}

static void* plugin_try(const char* candidate, char* why, size_t why_len) {
  bool is_static = strcasecmp(candidate, "STATIC_PLUGIN") == 0;
  void* lib = dlopen(is_static ? NULL : candidate, RTLD_NOW | RTLD_LOCAL);
  if (lib != NULL) return lib;
  const char* err = dlerror();
  bool missing = err != NULL && strstr(err, "No such file") != NULL;
  plugin_why_add(why, why_len, candidate, missing ? "not found" : err ? err : "dlopen failed");
  return NULL;
}

void* plugin_lib_open(plugin_kind_t kind, const char* name, char* path, size_t path_len, char* why,
                      size_t why_len) {
  char candidates[2][PLUGIN_NAME_MAX];
  int n = 0;
  const char* prefix = plugin_prefixes[kind];
  if (why_len > 0) why[0] = '\0';
  if (name == NULL || name[0] == '\0') {
    snprintf(candidates[n++], PLUGIN_NAME_MAX, "%s.so", prefix);
  } else {
    snprintf(candidates[n++], PLUGIN_NAME_MAX, "%s", name);
    bool lib_file = strncmp(name, "lib", 3) == 0 && plugin_ends_with(name, ".so");
    if (strchr(name, '/') == NULL && !lib_file)
      snprintf(candidates[n++], PLUGIN_NAME_MAX, "%s-%s.so", prefix, name);
  }
  for (int i = 0; i < n; i++) {
    void* lib = plugin_try(candidates[i], why, why_len);
    if (lib == NULL) continue;
    struct link_map* map = NULL;
    const char* where = candidates[i];
    if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != NULL && map->l_name != NULL &&
        map->l_name[0] != '\0')
      where = map->l_name;
    if (path_len > 0) snprintf(path, path_len, "%s", where);
    return lib;
  }
  return NULL;
}

/* ---- The environment plugin ------------------------------------------------------------------ */

typedef struct env_plugin_v1 {
  const char* name;
  ncclResult_t (*init)(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix);
  ncclResult_t (*finalize)(void);
  const char* (*getEnv)(const char* name);
} env_plugin_v1_t;
typedef struct env_plugin_v2 {
  const char* name;
  ncclResult_t (*init)(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix,
                       ncclDebugLogger_t logFunction);
  ncclResult_t (*finalize)(void);
  const char* (*getEnv)(const char* name);
} env_plugin_v2_t;
/* What env_get calls, whichever version: v1's and v2's tables differ only in init. */
typedef struct env_plugin {
  const char* name;
  ncclResult_t (*finalize)(void);
  const char* (*getEnv)(const char* name);
} env_plugin_t;

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static env_plugin_t env_table;
static const env_plugin_t* _Atomic env_plugin;
/* Inside the plugin (its init, a getEnv) on this thread: the log reads NCCL_DEBUG through the
 * plugin, so a message the plugin logs from there is kept for env_plugin_report instead. */
static __thread int env_inside;
static char env_plugin_said[256];

static void env_plugin_log(ncclDebugLogLevel level, unsigned long flags, const char* file, int line,
                           const char* fmt, ...) {
  char msg[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (env_inside > 0) {
    snprintf(env_plugin_said, sizeof(env_plugin_said), "%s", msg);
    return;
  }
  log_emit(level, flags, file, line, "%s", msg);
}
static void* env_lib;
/* What loading did, for env_plugin_report: level 0 nothing to say, else INFO or WARN. */
static int env_report_level;
static char env_report_text[PLUGIN_NAME_MAX + PLUGIN_WHY_MAX];
static atomic_int env_reported;

static void env_plugin_finalize(void) {
  const env_plugin_t* p = atomic_exchange(&env_plugin, NULL);
  if (p != NULL && p->finalize != NULL) (void)p->finalize();
}

static void env_plugin_load(void) {
  /* The plugin's own name comes from the real environment (the plugin cannot supply it). */
  const char* name = getenv(param_describe(PARAM_ENV_PLUGIN)->name);
  if (plugin_name_is_none(name)) return;
  char path[PLUGIN_NAME_MAX], why[PLUGIN_WHY_MAX];
  void* lib = plugin_lib_open(PLUGIN_ENV, name, path, sizeof(path), why, sizeof(why));
  if (lib == NULL) {
    if (name != NULL && name[0] != '\0') { /* asked for: say why it is not there */
      env_report_level = NCCL_LOG_WARN;
      snprintf(env_report_text, sizeof(env_report_text),
               "NCCL_ENV_PLUGIN=%s: cannot load an environment plugin (%s); reading the process "
               "environment",
               name, why);
    }
    return;
  }
  /* The newest version first, as stock's loader. */
  const env_plugin_v2_t* v2 = dlsym(lib, "ncclEnvPlugin_v2");
  const env_plugin_v1_t* v1 = v2 == NULL ? dlsym(lib, "ncclEnvPlugin_v1") : NULL;
  const char* symbol = v2 != NULL ? "ncclEnvPlugin_v2" : "ncclEnvPlugin_v1";
  ncclResult_t res = ncclSystemError;
  const char* suffix = "+baton-" BATON_VERSION_STRING;
  env_inside++;
  if (v2 != NULL && v2->getEnv != NULL) {
    env_table = (env_plugin_t){.name = v2->name, .finalize = v2->finalize, .getEnv = v2->getEnv};
    res = v2->init != NULL ? v2->init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, suffix, env_plugin_log)
                           : ncclSuccess;
  } else if (v1 != NULL && v1->getEnv != NULL) {
    env_table = (env_plugin_t){.name = v1->name, .finalize = v1->finalize, .getEnv = v1->getEnv};
    res = v1->init != NULL ? v1->init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, suffix) : ncclSuccess;
  }
  env_inside--;
  if (res != ncclSuccess) {
    env_report_level = NCCL_LOG_WARN;
    snprintf(env_report_text, sizeof(env_report_text),
             "ENV/Plugin: %s %s; reading the process environment", path,
             v2 == NULL && v1 == NULL ? "has no ncclEnvPlugin_v2 or ncclEnvPlugin_v1 symbol"
                                      : "failed to initialize");
    dlclose(lib);
    return;
  }
  env_lib = lib;
  atomic_store(&env_plugin, &env_table);
  atexit(env_plugin_finalize);
  env_report_level = NCCL_LOG_INFO;
  snprintf(env_report_text, sizeof(env_report_text),
           "ENV/Plugin: using %s (%s, %s) for NCCL_* variables%s%s", path,
           env_table.name ? env_table.name : "?", symbol, env_plugin_said[0] ? "; it said: " : "",
           env_plugin_said);
}

const char* env_get(const char* name) {
  pthread_once(&env_once, env_plugin_load);
  const env_plugin_t* p = atomic_load(&env_plugin);
  if (p == NULL) return getenv(name);
  env_inside++;
  const char* v = p->getEnv(name);
  env_inside--;
  return v;
}

void env_plugin_report(void) {
  pthread_once(&env_once, env_plugin_load);
  if (env_report_level == 0 || atomic_exchange(&env_reported, 1) != 0) return;
  if (env_report_level == NCCL_LOG_WARN)
    WARN("%s", env_report_text);
  else
    INFO(NCCL_INIT | NCCL_ENV, "%s", env_report_text);
}
