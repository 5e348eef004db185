/* Within src/plugin: one plugin kind's library, loaded on the first acquire and closed after the
 * last release (a later acquire loads it again, as stock). A load that finds nothing is not
 * retried. */
#ifndef BATON_PLUGIN_LOADER_H
#define BATON_PLUGIN_LOADER_H

#include <pthread.h>

#include "plugin/plugin.h"

typedef struct plugin_slot {
  /* Set by the owner. */
  plugin_kind_t kind;
  param_id_t param;           /* NCCL_TUNER_PLUGIN / NCCL_PROFILER_PLUGIN */
  const char* tag;            /* "TUNER", for log lines */
  const char* what;           /* "tuner", for log lines */
  const char* const* symbols; /* the table symbols, newest version first */
  int nsymbols;
  pthread_mutex_t lock;
  /* State. */
  void* lib;
  const void* table;
  int index; /* of the symbol that resolved */
  int refs;
  bool failed; /* nothing loaded: not retried */
  char path[1024];
} plugin_slot_t;

/* The plugin's table (the first symbol of s->symbols the library has), with a reference, and its
 * index in *index; NULL when there is none (said once per load attempt). */
const void* plugin_slot_acquire(plugin_slot_t* s, int* index);
void plugin_slot_release(plugin_slot_t* s);

#endif /* BATON_PLUGIN_LOADER_H */
