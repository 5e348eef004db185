/* A test profiler plugin, built once per version it can be: ncclProfiler_v7, _v6, _v5 or _v1
 * (PROFILER_VERSION), each library exporting that symbol only. It asks for every event (v5 on:
 * those of BATON_TEST_PROFILER_MASK when set) and logs each start (with its parent's id and the
 * fields the tests check, read through its own version's descriptor), state and stop; event ids
 * count from 1. */
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

#if PROFILER_VERSION >= 5
static ncclResult_t p_init(void** ctx, uint64_t comm_id, int* mask, const char* name, int nnodes,
                           int nranks, int rank, plugin_logger_t log) {
  plugin_log("prof init v%d nranks %d rank %d nnodes %d name %s", PROFILER_VERSION, nranks, rank,
             nnodes, name ? name : "(null)");
  const char* ask = getenv("BATON_TEST_PROFILER_MASK"); /* the events to ask for; all by default */
  *mask = ask ? (int)strtol(ask, NULL, 0) : ~0;
  *ctx = &ctx_token;
  return ncclSuccess;
}

static void p_log_start(event_t* e, uint64_t type, void* parent, int rank, const char* more) {
  plugin_log("prof start %d type %d parent %d rank %d %s", e->id, (int)type, id_of(parent), rank,
             more);
}
#endif

#if PROFILER_VERSION == 5 || PROFILER_VERSION == 6
/* v5's fields, as v5 and v6 plugins read them. */
static void p_describe_v5(const prof_descr_v5_t* d, char* more, size_t size) {
  switch (d->type) {
    case PROF_GROUP_API:
      snprintf(more, size, "depth %d", d->group_api.group_depth);
      break;
    case PROF_COLL_API:
      snprintf(more, size, "func %s count %zu type %s root %d", d->coll_api.func, d->coll_api.count,
               d->coll_api.datatype, d->coll_api.root);
      break;
    case PROF_P2P_API:
      snprintf(more, size, "func %s count %zu type %s", d->p2p_api.func, d->p2p_api.count,
               d->p2p_api.datatype);
      break;
    case PROF_COLL:
      snprintf(more, size,
               "func %s count %zu type %s seq %llu algo %s proto %s nch %d "
               "group %d",
               d->coll.func, d->coll.count, d->coll.datatype, (unsigned long long)d->coll.seq,
               d->coll.algo, d->coll.proto, d->coll.nchannels, id_of(d->coll.parent_group));
      break;
    case PROF_P2P:
      snprintf(more, size, "func %s count %zu peer %d nch %d group %d", d->p2p.func, d->p2p.count,
               d->p2p.peer, d->p2p.nchannels, id_of(d->p2p.parent_group));
      break;
    case PROF_KERNEL_CH:
      snprintf(more, size, "channel %d ptimer %llu", d->kernel_ch.channel,
               (unsigned long long)d->kernel_ch.ptimer);
      break;
    default:
      break;
  }
}
#endif

#if PROFILER_VERSION == 5
static ncclResult_t p_start(void* ctx, void** handle, prof_descr_v5_t* d) {
  event_t* e = event_new((int)d->type);
  char more[256] = "";
  p_describe_v5(d, more, sizeof(more));
  p_log_start(e, d->type, d->parent, d->rank, more);
  *handle = e;
  return ncclSuccess;
}
#elif PROFILER_VERSION == 6
static ncclResult_t p_start(void* ctx, void** handle, prof_descr_v6_t* d) {
  event_t* e = event_new((int)d->v5.type);
  char more[256] = "";
  p_describe_v5(&d->v5, more, sizeof(more));
  p_log_start(e, d->v5.type, d->v5.parent, d->v5.rank, more);
  *handle = e;
  return ncclSuccess;
}
#elif PROFILER_VERSION == 7
/* v7's fields, the user tags and the kernel variant included. */
static ncclResult_t p_start(void* ctx, void** handle, prof_descr_v7_t* d) {
  event_t* e = event_new((int)d->type);
  char more[256] = "";
  switch (d->type) {
    case PROF_GROUP_API:
      snprintf(more, sizeof(more), "depth %d", d->group_api.group_depth);
      break;
    case PROF_COLL_API:
      snprintf(more, sizeof(more), "func %s count %zu type %s root %d tag %llu", d->coll_api.func,
               d->coll_api.count, d->coll_api.datatype, d->coll_api.root,
               (unsigned long long)d->coll_api.user_tag);
      break;
    case PROF_P2P_API:
      snprintf(more, sizeof(more), "func %s count %zu type %s tag %llu", d->p2p_api.func,
               d->p2p_api.count, d->p2p_api.datatype, (unsigned long long)d->p2p_api.user_tag);
      break;
    case PROF_COLL:
      snprintf(more, sizeof(more),
               "func %s count %zu type %s seq %llu algo %s proto %s nch %d group %d tag %llu "
               "variant %s sym %d",
               d->coll.func, d->coll.count, d->coll.datatype, (unsigned long long)d->coll.seq,
               d->coll.algo, d->coll.proto, d->coll.nchannels, id_of(d->coll.parent_group),
               (unsigned long long)d->coll.user_tag,
               d->coll.kernel_variant ? d->coll.kernel_variant : "none", (int)d->coll.is_sym_coll);
      break;
    case PROF_P2P:
      snprintf(more, sizeof(more), "func %s count %zu peer %d nch %d group %d tag %llu",
               d->p2p.func, d->p2p.count, d->p2p.peer, d->p2p.nchannels, id_of(d->p2p.parent_group),
               (unsigned long long)d->p2p.user_tag);
      break;
    case PROF_KERNEL_CH:
      snprintf(more, sizeof(more), "channel %d ptimer %llu", d->kernel_ch.channel,
               (unsigned long long)d->kernel_ch.ptimer);
      break;
    default:
      break;
  }
  p_log_start(e, d->type, d->parent, d->rank, more);
  *handle = e;
  return ncclSuccess;
}
#endif

#if PROFILER_VERSION >= 5

static ncclResult_t p_state(void* handle, int state, prof_state_args_v5_t* args) {
  event_t* e = handle;
  if (state == PROF_STATE_KERNEL_CH_STOP)
    plugin_log("prof state %d %d ptimer %llu", e->id, state,
               (unsigned long long)args->kernel_ch.ptimer);
  else
    plugin_log("prof state %d %d", e->id, state);
  return ncclSuccess;
}

#if PROFILER_VERSION == 7
__attribute__((visibility("default")))
const profiler_v7_t ncclProfiler_v7 = {.name = "test-profiler-v7",
#elif PROFILER_VERSION == 6
__attribute__((visibility("default")))
const profiler_v6_t ncclProfiler_v6 = {.name = "test-profiler-v6",
#else
__attribute__((visibility("default")))
const profiler_v5_t ncclProfiler_v5 = {.name = "test-profiler-v5",
#endif
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
