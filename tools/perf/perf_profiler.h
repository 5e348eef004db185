/* What baton-perf's profiler plugin (perf_profiler.c) keeps: the last collective's choice. */
#ifndef BATON_PERF_PROFILER_H
#define BATON_PERF_PROFILER_H

typedef struct perf_last_coll {
  char algo[16];
  char proto[16];
  int nchannels;
  unsigned long count; /* collective events seen */
} perf_last_coll_t;

#define PERF_PROFILER_SYMBOL "baton_perf_last_coll"
#define PERF_PROFILER_FILE "libbaton-perf-profiler.so"

#endif
