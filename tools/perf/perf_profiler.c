/* baton-perf's profiler plugin (ncclProfiler_v5, stock's ABI): it asks for collective events only
 * and keeps the algorithm, protocol and channel count of the last one, which baton-perf reads
 * (it dlopens this same file, so both see one copy). Works with Baton and with stock NCCL. */
#include "perf_profiler.h"

#include <stdio.h>
#include <string.h>

#include "plugin/plugin_abi.h"

__attribute__((visibility("default"))) perf_last_coll_t baton_perf_last_coll;

static int ctx_token;

static ncclResult_t pp_init(void** ctx, uint64_t comm_id, int* mask, const char* name, int nnodes,
                            int nranks, int rank, plugin_logger_t log) {
  *mask = PROF_COLL;
  *ctx = &ctx_token;
  return ncclSuccess;
}

static ncclResult_t pp_start(void* ctx, void** handle, prof_descr_v5_t* d) {
  *handle = NULL;
  if (d->type != PROF_COLL) return ncclSuccess;
  perf_last_coll_t* l = &baton_perf_last_coll;
  snprintf(l->algo, sizeof(l->algo), "%s", d->coll.algo ? d->coll.algo : "?");
  snprintf(l->proto, sizeof(l->proto), "%s", d->coll.proto ? d->coll.proto : "?");
  l->nchannels = d->coll.nchannels;
  __atomic_fetch_add(&l->count, 1, __ATOMIC_RELAXED);
  return ncclSuccess;
}

static ncclResult_t pp_stop(void* handle) {
  return ncclSuccess;
}

static ncclResult_t pp_state(void* handle, int state, prof_state_args_v5_t* args) {
  return ncclSuccess;
}

static ncclResult_t pp_fini(void* ctx) {
  return ncclSuccess;
}

__attribute__((visibility("default")))
const profiler_v5_t ncclProfiler_v5 = {.name = "baton-perf",
                                       .init = pp_init,
                                       .start_event = pp_start,
                                       .stop_event = pp_stop,
                                       .record_state = pp_state,
                                       .finalize = pp_fini};
