/* A test profiler plugin, built twice: as ncclProfiler_v5 (PROFILER_VERSION 5) and as
 * ncclProfiler_v1 (PROFILER_VERSION 1). It asks for every event and logs each start (with its
 * parent's id and the fields the tests check), state and stop; event ids count from 1. */
#include <pthread.h>
#include <string.h>

#include "plugin/plugin_abi.h"
#include "plugin_log.h"

typedef struct event {
  int id;
  int type;
} event_t;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int next_id = 1;
static int ctx_token = 7;

static event_t* event_new(int type) {
  event_t* e = malloc(sizeof(*e));
  pthread_mutex_lock(&lock);
  e->id = next_id++;
  pthread_mutex_unlock(&lock);
  e->type = type;
  return e;
}

static int id_of(void* handle) {
  return handle ? ((event_t*)handle)->id : 0;
}

/* Events stay allocated after their stop: as in stock, a child may name a parent that has
 * stopped already (a Coll event's CollApi parent stops when the call returns). */
static ncclResult_t p_stop(void* handle) {
  event_t* e = handle;
  plugin_log("prof stop %d", e->id);
  return ncclSuccess;
}

static ncclResult_t p_fini(void* ctx) {
  plugin_log("prof finalize ctx %d", *(int*)ctx);
  return ncclSuccess;
}

#if PROFILER_VERSION == 5
static ncclResult_t p_init(void** ctx, uint64_t comm_id, int* mask, const char* name, int nnodes,
                           int nranks, int rank, plugin_logger_t log) {
  plugin_log("prof init v5 nranks %d rank %d nnodes %d name %s", nranks, rank, nnodes,
             name ? name : "(null)");
  *mask = ~0;
  *ctx = &ctx_token;
  return ncclSuccess;
}

static ncclResult_t p_start(void* ctx, void** handle, prof_descr_v5_t* d) {
  event_t* e = event_new((int)d->type);
  char more[256] = "";
  switch (d->type) {
    case PROF_GROUP_API:
      snprintf(more, sizeof(more), "depth %d", d->group_api.group_depth);
      break;
    case PROF_COLL_API:
      snprintf(more, sizeof(more), "func %s count %zu type %s root %d", d->coll_api.func,
               d->coll_api.count, d->coll_api.datatype, d->coll_api.root);
      break;
    case PROF_P2P_API:
      snprintf(more, sizeof(more), "func %s count %zu type %s", d->p2p_api.func, d->p2p_api.count,
               d->p2p_api.datatype);
      break;
    case PROF_COLL:
      snprintf(more, sizeof(more),
               "func %s count %zu type %s seq %llu algo %s proto %s nch %d "
               "group %d",
               d->coll.func, d->coll.count, d->coll.datatype, (unsigned long long)d->coll.seq,
               d->coll.algo, d->coll.proto, d->coll.nchannels, id_of(d->coll.parent_group));
      break;
    case PROF_P2P:
      snprintf(more, sizeof(more), "func %s count %zu peer %d nch %d group %d", d->p2p.func,
               d->p2p.count, d->p2p.peer, d->p2p.nchannels, id_of(d->p2p.parent_group));
      break;
    case PROF_KERNEL_CH:
      snprintf(more, sizeof(more), "channel %d ptimer %llu", d->kernel_ch.channel,
               (unsigned long long)d->kernel_ch.ptimer);
      break;
    default:
      break;
  }
  plugin_log("prof start %d type %d parent %d rank %d %s", e->id, (int)d->type, id_of(d->parent),
             d->rank, more);
  *handle = e;
  return ncclSuccess;
}

static ncclResult_t p_state(void* handle, int state, prof_state_args_v5_t* args) {
  event_t* e = handle;
  if (state == PROF_STATE_KERNEL_CH_STOP)
    plugin_log("prof state %d %d ptimer %llu", e->id, state,
               (unsigned long long)args->kernel_ch.ptimer);
  else
    plugin_log("prof state %d %d", e->id, state);
  return ncclSuccess;
}

__attribute__((visibility("default")))
const profiler_v5_t ncclProfiler_v5 = {.name = "test-profiler-v5",
                                       .init = p_init,
                                       .start_event = p_start,
                                       .stop_event = p_stop,
                                       .record_state = p_state,
                                       .finalize = p_fini};
#else
static ncclResult_t p_init(void** ctx, int* mask) {
  plugin_log("prof init v1");
  *mask = ~0;
  *ctx = &ctx_token;
  return ncclSuccess;
}

static ncclResult_t p_start(void* ctx, void** handle, void* descr) {
  prof_descr_v1_t* d = descr;
  event_t* e = event_new(d->type);
  char more[256] = "";
  if (d->type == PROF_COLL)
    snprintf(more, sizeof(more), "func %d count %zu type %d algo %d proto %d nch %d", d->coll.func,
             d->coll.count, d->coll.datatype, d->coll.algo, d->coll.proto, d->coll.max_channels);
  else if (d->type == PROF_P2P)
    snprintf(more, sizeof(more), "func %d count %zu peer %d", d->p2p.func, d->p2p.count,
             d->p2p.peer);
  plugin_log("prof start %d type %d parent %d rank %d %s", e->id, d->type, id_of(d->parent),
             d->rank, more);
  *handle = e;
  return ncclSuccess;
}

static ncclResult_t p_state(void* handle, int state, prof_state_args_v3_t* args) {
  plugin_log("prof state %d %d", ((event_t*)handle)->id, state);
  return ncclSuccess;
}

__attribute__((visibility("default")))
const profiler_v3_t ncclProfiler_v1 = {.name = "test-profiler-v1",
                                       .init = p_init,
                                       .start_event = p_start,
                                       .stop_event = p_stop,
                                       .record_state = p_state,
                                       .finalize = p_fini};
#endif
