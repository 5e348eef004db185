/* The tuner and profiler plugins (src/plugin) as the collectives layer uses them.
 *
 * Tuner: after Baton's own choice for a collective, a loaded tuner gets stock's cost table: the
 * model's time of every algorithm/protocol Baton can run for it (NCCL_ALGO / NCCL_PROTO already
 * applied), -1 elsewhere. If it edits the table, the cheapest entry it leaves wins; if it sets a
 * channel count, that count is used (within the communicator's channels); if it changes nothing,
 * Baton's choice stands (one-shot AllReduce included, which has no column in stock's table).
 * Every rank must get the same answer: as with stock, that is the tuner's duty.
 *
 * Profiler events, by who emits them:
 *   ncclAllReduce & co: CollApi / P2pApi around the call, inside a GroupApi that spans the
 *     outermost group (or the call's own) until its ncclGroupEnd returns (v5);
 *   the launch of a communicator's part of a group: Group, then Coll / P2p per task (parent: the
 *     API event; v4 and older see the Group event), KernelLaunch around the executor's launch;
 *     they stop when the host executor has finished, or once the CUDA executor has launched;
 *   the host executor: KernelCh per task and channel, around the channel's list, with the host
 *     clock in ns where a GPU kernel would give its globaltimer.
 * v7's user tag (a *Config call's userProfilerTag, 0 otherwise) rides on the API, Coll and P2p
 * events of the call and of every task it made.
 * Not emitted: ProxyOp / ProxyStep / ProxyCtrl and net plugin events (the proxy moves FIFO slots
 * and knows no operations), KernelCh for GPU kernels (they record no timestamps), v6's copy-engine
 * events (Baton runs no collective on copy engines) and v7's KernelPhase (the barrier phases of
 * stock's symmetric kernels; Baton has none, so a Coll's kernel_variant stays NULL and
 * is_sym_coll false). */
#include <stdlib.h>
#include <time.h>

#include "collectives/collectives.h"

/* ---- Opening and closing --------------------------------------------------------------------- */
ncclResult_t coll_plugins_open(struct coll_comm* cc) {
  struct ncclComm* comm = cc->comm;
  int* per_host = calloc((size_t)cc->nhosts, sizeof(int));
  if (per_host == NULL) return ncclSystemError;
  for (int r = 0; r < cc->nranks; r++) per_host[cc->host_of[r]]++;
  int lo = cc->nranks, hi = 0;
  for (int h = 0; h < cc->nhosts; h++) {
    if (per_host[h] < lo) lo = per_host[h];
    if (per_host[h] > hi) hi = per_host[h];
  }
  free(per_host);
  tuner_comm_info_t ti = {.comm_hash = comm->comm_hash,
                          .nranks = cc->nranks,
                          .nnodes = cc->nhosts,
                          .min_ranks_per_node = lo,
                          .max_ranks_per_node = hi};
  CHECK(tuner_open(&ti, &cc->tuner));
  profiler_comm_info_t pi = {.comm_hash = comm->comm_hash,
                             .comm_name = comm->config.commName,
                             .nnodes = cc->nhosts,
                             .nranks = cc->nranks,
                             .rank = cc->rank};
  CHECK(profiler_open(&pi, &cc->prof));
  return ncclSuccess;
}

void coll_plugins_close(struct coll_comm* cc) {
  tuner_close(cc->tuner);
  cc->tuner = NULL;
  profiler_close(cc->prof);
  cc->prof = NULL;
  free(cc->prof_ch);
  cc->prof_ch = NULL;
}

/* ---- Tuner ----------------------------------------------------------------------------------- */
static int coll_group_collectives(const struct coll_comm* cc) {
  int n = 0;
  for (int i = 0; i < cc->running.n; i++)
    n += cc->running.items[i].func != FUNC_SEND && cc->running.items[i].func != FUNC_RECV;
  return n > 0 ? n : 1;
}

void coll_tuner_apply(struct coll_comm* cc, coll_task_t* t, size_t bytes, int* algo, int* proto,
                      const char** why) {
  float table[TUNER_ALGOS][TUNER_PROTOS], before[TUNER_ALGOS][TUNER_PROTOS];
  for (int a = 0; a < TUNER_ALGOS; a++)
    for (int p = 0; p < TUNER_PROTOS; p++) {
      /* Stock's table has columns for Tree and Ring only of Baton's algorithms (its 2 and 3
       * are CollNet's): the direct ones stay out of a tuner's reach. */
      bool stock = (a == ALGO_TREE || a == ALGO_RING) && p < PROTO_COUNT;
      double us = stock ? coll_model_us(cc, t, a, p, bytes) : -1;
      table[a][p] = us < 0 ? TUNER_IGNORE : (float)us;
    }
  memcpy(before, table, sizeof(table));
  int nch = 0;
  if (tuner_choose(cc->tuner, t->func, bytes, coll_group_collectives(cc), table, &nch) !=
      ncclSuccess)
    return;
  if (nch > 0) {
    t->nchannels = nch < cc->nchannels ? nch : cc->nchannels;
    *why = "the tuner plugin (channels)";
  }
  if (memcmp(table, before, sizeof(table)) == 0) return;
  int best_a = -1, best_p = -1;
  for (int a = 0; a < ALGO_COUNT; a++)
    for (int p = 0; p < PROTO_COUNT; p++) {
      if (before[a][p] == TUNER_IGNORE || table[a][p] < 0) continue; /* not runnable, or vetoed */
      if (best_a < 0 || table[a][p] < table[best_a][best_p]) {
        best_a = a;
        best_p = p;
      }
    }
  if (best_a < 0) {
    INFO(NCCL_TUNING, "TUNER/Plugin: %s left no runnable choice for %s of %zu bytes; keeping %s/%s",
         tuner_name(cc->tuner), coll_func_name(t->func), bytes, coll_algo_name(*algo),
         coll_proto_name(*proto));
    return;
  }
  if (vocab_algo_is_direct(*algo) && best_a != *algo)
    t->nchannels = coll_op_nchannels(bytes, cc->nchannels, cc->min_channels);
  if (nch > 0) t->nchannels = nch < cc->nchannels ? nch : cc->nchannels;
  *algo = best_a;
  *proto = best_p;
  *why = "the tuner plugin";
}

/* ---- Profiler: names as stock gives them --------------------------------------------------- */
static const char* coll_prof_algo(int algo) {
  return algo == ALGO_TREE      ? "TREE"
         : algo == ALGO_RING    ? "RING"
         : algo == ALGO_ONESHOT ? "ONESHOT"
                                : "TWOSHOT";
}

static const char* coll_prof_proto(int proto) {
  return proto == PROTO_LL ? "LL" : proto == PROTO_LL128 ? "LL128" : "SIMPLE";
}

/* ---- Profiler: API events -------------------------------------------------------------------- */
/* This thread's GroupApi event: started by the first call of an outermost group, stopped when
 * that group's ncclGroupEnd returns. */
static __thread profiler_t* prof_group_owner;
__thread void* coll_prof_group_api_tls; /* collectives.h */
static __thread bool prof_group_end_recorded;

void* coll_profile_api_begin(struct coll_comm* cc, bool p2p, const char* func, size_t count,
                             ncclDataType_t dtype, int root, cudaStream_t stream, uint64_t tag) {
  profiler_t* p = cc->prof;
  if (p == NULL) return NULL;
  if (coll_prof_group_api_tls == NULL && (profiler_mask(p) & PROF_GROUP_API)) {
    prof_descr_v7_t g = {.type = PROF_GROUP_API, .rank = cc->rank};
    g.group_api.group_depth = coll_group_depth();
    coll_prof_group_api_tls = profiler_start(p, &g);
    prof_group_owner = p;
    prof_group_end_recorded = false;
    profiler_record(p, coll_prof_group_api_tls, PROF_STATE_GROUP_START_API_STOP, NULL);
  }
  prof_descr_v7_t d = {.type = p2p ? PROF_P2P_API : PROF_COLL_API,
                       .parent = coll_prof_group_api_tls,
                       .rank = cc->rank};
  if (p2p) {
    d.p2p_api.func = func;
    d.p2p_api.count = count;
    d.p2p_api.datatype = datatype_name(dtype);
    d.p2p_api.stream = stream;
    d.p2p_api.user_tag = tag;
  } else {
    d.coll_api.func = func;
    d.coll_api.count = count;
    d.coll_api.datatype = datatype_name(dtype);
    d.coll_api.root = root;
    d.coll_api.stream = stream;
    d.coll_api.user_tag = tag;
  }
  return profiler_start(p, &d);
}

void coll_profile_group_end_begin(void) {
  if (coll_prof_group_api_tls == NULL || prof_group_end_recorded) return;
  prof_group_end_recorded = true;
  profiler_record(prof_group_owner, coll_prof_group_api_tls, PROF_STATE_GROUP_END_API_START, NULL);
}

void coll_profile_group_end_done(void) {
  if (coll_prof_group_api_tls == NULL) return;
  profiler_stop(prof_group_owner, coll_prof_group_api_tls);
  coll_prof_group_api_tls = NULL;
  prof_group_owner = NULL;
}

void* coll_prof_group_api(void) {
  return coll_prof_group_api_tls;
}

/* ---- Profiler: a launch ---------------------------------------------------------------------- */
static int coll_prof_warps(const struct coll_comm* cc, const coll_task_t* t) {
  if (!cc->kernels) return 0;
  int64_t forced = param_int(PARAM_NTHREADS);
  if (forced > 0) return (int)(forced / 32);
  return t->proto == PROTO_SIMPLE ? 16 : 8;
}

void coll_profile_run_begin(struct coll_comm* cc) {
  profiler_t* p = cc->prof;
  cc->prof_group = NULL;
  if (p == NULL) return;
  int mask = profiler_mask(p);
  if (mask & (PROF_GROUP | PROF_COLL | PROF_P2P | PROF_KERNEL_CH)) {
    prof_descr_v7_t g = {.type = PROF_GROUP, .rank = cc->rank};
    cc->prof_group = profiler_start(p, &g);
  }
  for (int i = 0; i < cc->running.n; i++) {
    coll_task_t* t = &cc->running.items[i];
    t->prof_event = NULL;
    bool p2p = t->func == FUNC_SEND || t->func == FUNC_RECV;
    prof_descr_v7_t d = {
        .type = p2p ? PROF_P2P : PROF_COLL, .parent = t->prof_api, .rank = cc->rank};
    if (p2p) {
      d.p2p.func = coll_func_name(t->func);
      d.p2p.buff = t->func == FUNC_SEND ? (void*)t->sendbuff : t->recvbuff;
      d.p2p.datatype = datatype_name(t->dtype);
      d.p2p.count = t->count;
      d.p2p.peer = t->root;
      d.p2p.nchannels = (uint8_t)coll_p2p_nchannels(t->count * datatype_size(t->dtype), cc->nranks,
                                                    cc->nchannels, cc->min_channels);
      d.p2p.parent_group = cc->prof_group;
      d.p2p.user_tag = t->prof_tag;
    } else {
      d.coll.seq = cc->prof_seq[t->func]++;
      d.coll.func = coll_func_name(t->func);
      d.coll.sendbuff = t->sendbuff;
      d.coll.recvbuff = t->recvbuff;
      d.coll.count = t->count;
      d.coll.root = t->root;
      d.coll.datatype = datatype_name(t->dtype);
      d.coll.nchannels = (uint8_t)t->nchannels;
      d.coll.nwarps = (uint8_t)coll_prof_warps(cc, t);
      d.coll.algo = coll_prof_algo(t->algo);
      d.coll.proto = coll_prof_proto(t->proto);
      d.coll.parent_group = cc->prof_group;
      d.coll.user_tag = t->prof_tag; /* kernel_variant NULL, is_sym_coll false: no symmetric
                                      * kernels */
    }
    t->prof_event = profiler_start(p, &d);
  }
}

void* coll_profile_launch_begin(struct coll_comm* cc, cudaStream_t stream) {
  if (cc->prof == NULL) return NULL;
  prof_descr_v7_t d = {
      .type = PROF_KERNEL_LAUNCH, .parent = coll_prof_group_api_tls, .rank = cc->rank};
  d.kernel_launch.stream = stream;
  return profiler_start(cc->prof, &d);
}

void coll_profile_run_end(struct coll_comm* cc) {
  if (cc->prof == NULL) return;
  for (int i = 0; i < cc->running.n; i++) {
    profiler_stop(cc->prof, cc->running.items[i].prof_event);
    cc->running.items[i].prof_event = NULL;
  }
  profiler_stop(cc->prof, cc->prof_group);
  cc->prof_group = NULL;
}

/* ---- Profiler: host-executor channels -------------------------------------------------------- */
static uint64_t coll_prof_wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The running task a work item came from (the same operation fields), or NULL. */
static coll_task_t* coll_prof_task_of(struct coll_comm* cc, const work_t* w) {
  for (int i = 0; i < cc->running.n; i++) {
    coll_task_t* t = &cc->running.items[i];
    if (t->func == w->func && t->sendbuff == w->sendbuff && t->recvbuff == w->recvbuff &&
        t->count == w->count && t->root == w->root && t->dtype == w->dtype)
      return t;
  }
  return NULL;
}

/* exec_comm_t.channel_event: called by the host executor's channel threads around a channel's
 * list. One KernelCh event per work item of the channel, parented by its task's event. */
static void coll_prof_channel(void* arg, int channel, int start) {
  struct coll_comm* cc = arg;
  const plan_t* plan = &cc->plan;
  uint64_t now = coll_prof_wall_ns();
  size_t base = (size_t)(plan->works[channel] - cc->works);
  for (int i = 0; i < plan->nwork[channel]; i++) {
    void** slot = &cc->prof_ch[base + (size_t)i];
    if (start) {
      coll_task_t* t = coll_prof_task_of(cc, &plan->works[channel][i]);
      prof_descr_v7_t d = {
          .type = PROF_KERNEL_CH, .parent = t ? t->prof_event : NULL, .rank = cc->rank};
      d.kernel_ch.channel = (uint8_t)channel;
      d.kernel_ch.ptimer = now;
      *slot = profiler_start(cc->prof, &d);
    } else if (*slot != NULL) {
      prof_state_args_v5_t a = {.kernel_ch = {.ptimer = now}};
      profiler_record(cc->prof, *slot, PROF_STATE_KERNEL_CH_STOP, &a);
      profiler_stop(cc->prof, *slot);
      *slot = NULL;
    }
  }
}

ncclResult_t coll_profile_exec_hook(struct coll_comm* cc) {
  cc->comm->resources->exec.channel_event = NULL;
  if (cc->kernels || !(profiler_mask(cc->prof) & PROF_KERNEL_CH)) return ncclSuccess;
  if (cc->prof_ch_cap < cc->works_cap) {
    void** h = realloc(cc->prof_ch, cc->works_cap * sizeof(*h));
    if (h == NULL) {
      WARN("Out of memory for %zu profiler handles", cc->works_cap);
      return ncclSystemError;
    }
    memset(h, 0, cc->works_cap * sizeof(*h));
    cc->prof_ch = h;
    cc->prof_ch_cap = cc->works_cap;
  }
  cc->comm->resources->exec.channel_arg = cc;
  cc->comm->resources->exec.channel_event = coll_prof_channel;
  return ncclSuccess;
}
