/* Loading a tuner or profiler plugin library once per process (see loader.h). */
#include "plugin/loader.h"

#include <dlfcn.h>

/* The library NCCL_<KIND>_PLUGIN names (or the default name), else, as stock, the net plugin's
 * library when NCCL_NET_PLUGIN names one: a net plugin may carry a tuner or a profiler too. */
static void* slot_open_lib(plugin_slot_t* s) {
  const char* name = param_str(s->param);
  char why[1024];
  void* lib = plugin_lib_open(s->kind, name, s->path, sizeof(s->path), why, sizeof(why));
  if (lib != NULL) return lib;
  bool asked = name != NULL && name[0] != '\0';
  if (asked)
    WARN("%s=%s: no such plugin library (%s); running without a %s plugin",
         param_describe(s->param)->name, name, why, s->what);
  else
    INFO(NCCL_INIT, "%s/Plugin: none (%s)", s->tag, why);
  const char* net = param_str(PARAM_NET_PLUGIN);
  if (asked || net == NULL || net[0] == '\0' || plugin_name_is_none(net)) return NULL;
  return plugin_lib_open(PLUGIN_NET, net, s->path, sizeof(s->path), why, sizeof(why));
}

static void slot_load(plugin_slot_t* s) {
  const char* name = param_str(s->param);
  if (plugin_name_is_none(name)) {
    INFO(NCCL_INIT | NCCL_ENV, "%s/Plugin: disabled by %s=%s", s->tag,
         param_describe(s->param)->name, name);
    return;
  }
  void* lib = slot_open_lib(s);
  if (lib == NULL) return;
  for (int i = 0; i < s->nsymbols; i++) {
    const void* table = dlsym(lib, s->symbols[i]);
    if (table == NULL) continue;
    s->lib = lib;
    s->table = table;
    s->index = i;
    INFO(NCCL_INIT, "%s/Plugin: loaded %s (%s, %s)", s->tag, s->path,
         *(const char* const*)table ? *(const char* const*)table : "?", s->symbols[i]);
    return;
  }
  if (name != NULL && name[0] != '\0')
    WARN("%s=%s: %s has no %s .. %s symbol; running without a %s plugin",
         param_describe(s->param)->name, name, s->path, s->symbols[0], s->symbols[s->nsymbols - 1],
         s->what);
  dlclose(lib);
}

const void* plugin_slot_acquire(plugin_slot_t* s, int* index) {
  pthread_mutex_lock(&s->lock);
  if (s->refs == 0 && s->lib == NULL && !s->failed) {
    slot_load(s);
    s->failed = s->lib == NULL; /* said once: later communicators do not retry */
  }
  const void* table = s->table;
  if (table != NULL) {
    s->refs++;
    *index = s->index;
  }
  pthread_mutex_unlock(&s->lock);
  return table;
}

void plugin_slot_release(plugin_slot_t* s) {
  pthread_mutex_lock(&s->lock);
  if (s->refs > 0 && --s->refs == 0 && s->lib != NULL) {
    INFO(NCCL_INIT, "%s/Plugin: closing %s", s->tag, s->path);
    dlclose(s->lib);
    s->lib = NULL;
    s->table = NULL;
  }
  pthread_mutex_unlock(&s->lock);
}
