/* Per-communicator collective state (the planner's view of core's resources, plugins, scratch)
 * and running one group's tasks: plan, connect what the plan needs and launch it, both through
 * core (comm_res_connect, comm_res_launch). Core calls coll_comm_init at the end of init and
 * coll_comm_free at destroy/abort, through the table registered below. */
#include <stdlib.h>

#include "collectives/collectives.h"

ncclResult_t coll_comm_init(struct ncclComm* comm) {
  const comm_res_t* r = comm->resources;
  struct coll_comm* cc;
  CHECK(MEM_CALLOC(&cc, 1));
  pthread_mutex_init(&cc->lock, NULL);
  comm->coll = cc; /* from here on coll_comm_free releases whatever was set up */
  cc->comm = comm;
  cc->rank = comm->rank;
  cc->nranks = comm->nranks;
  /* The planner's view of the resources core set up (core.h, comm_res_t). */
  cc->queues = r->executor->queues;
  cc->kernels = r->kernels;
  cc->ll128_ok = r->ll128_ok;
  cc->direct_ok = r->direct_ok;
  cc->direct_model = r->direct_model;
  /* a staged item's parts are its blocks; all of them fit one launch of the direct kernel */
  cc->stage_parts = r->nchannels < COLL_STAGE_PARTS ? r->nchannels : COLL_STAGE_PARTS;
  cc->nchannels = r->nchannels;
  cc->nhosts = r->nhosts;
  cc->host_of = r->host_of;
  cc->channels = r->channels;
  cc->tuning = r->tuning;
  memcpy(cc->slot_data_bytes, r->slot_data_bytes, sizeof(cc->slot_data_bytes));
  int64_t cost = param_int(PARAM_PIPE_STEP_COST_BYTES);
  cc->pipe_cost_bytes = cost < 0 ? 0 : (size_t)cost;
  if (param_is_set(PARAM_MIN_NCHANNELS)) {
    int64_t m = param_int(PARAM_MIN_NCHANNELS);
    cc->min_channels = m < 1 ? 1 : m > cc->nchannels ? cc->nchannels : (int)m;
  }
  /* ncclConfig_t.minCTAs (NCCL_MIN_CTAS): every launch gets at least that many blocks, so every
   * operation uses at least that many channels. Its default, 1, forces nothing: a forced minimum
   * would also stop point-to-point messages from keeping to their peer's share of the channels
   * (coll_p2p_nchannels). */
  if (comm->config.minCTAs > 1 && comm->config.minCTAs > cc->min_channels)
    cc->min_channels = comm->config.minCTAs < cc->nchannels ? comm->config.minCTAs : cc->nchannels;
  CHECK(MEM_CALLOC(&cc->conn_mark, (size_t)cc->nchannels * 2 * (size_t)cc->nranks));
  CHECK(coll_plugins_open(cc));
  CHECK(coll_filter_init(&cc->filter));
  return ncclSuccess;
}

/* The executor's own work is core's to wait for (comm_drain): this layer's is a nonblocking group
 * still running. */
ncclResult_t coll_comm_finalize(struct ncclComm* comm) {
  struct coll_comm* cc = comm->coll;
  if (cc == NULL) return ncclSuccess;
  return coll_job_join(cc);
}

/* After core has freed the resources (comm_free): the executor no longer reports channel events
 * to the profiler. */
ncclResult_t coll_comm_free(struct ncclComm* comm) {
  struct coll_comm* cc = comm->coll;
  if (cc == NULL) return ncclSuccess;
  coll_group_forget(cc);
  (void)coll_job_join(cc);
  coll_plugins_close(cc);
  coll_user_ops_free(cc);
  coll_regs_free(cc);
  free(cc->pending.items);
  free(cc->running.items);
  free(cc->kept.items);
  free(cc->works);
  free(cc->reqs);
  free(cc->order);
  free(cc->locals);
  free(cc->conn_mark);
  free(cc->streams);
  pthread_mutex_destroy(&cc->lock);
  free(cc);
  comm->coll = NULL;
  return ncclSuccess;
}

/* Core reaches this layer only through this table (core.h), registered when the library loads.
 * Every other file of this layer finds a communicator's state through coll_of, defined beside the
 * constructor: a static link that pulls any of them in pulls the registration in too. */
static const core_upper_ops_t coll_upper_ops = {.comm_init = coll_comm_init,
                                                .comm_finalize = coll_comm_finalize,
                                                .comm_free = coll_comm_free,
                                                .comm_leave_group = coll_comm_leave_group,
                                                .group_open = coll_group_open,
                                                .group_add_init = coll_group_add_init,
                                                .group_set_error = coll_group_set_error};

__attribute__((constructor)) static void coll_upper_register(void) {
  core_upper_register(&coll_upper_ops);
}

struct coll_comm* coll_of(ncclComm_t comm) {
  return comm->coll;
}

ncclResult_t coll_comm_plan(struct coll_comm* cc) {
  cc->planned = false;
  if (coll_plan_reuse(cc, &cc->running)) {
    cc->planned = true;
    return ncclSuccess;
  }
  const uint64_t gen = coll_regs_gen(cc);
  coll_plan_forget(cc); /* the build overwrites the kept plan */
  ncclResult_t res = coll_plan_build(cc, &cc->running, &cc->plan_nreqs);
  if (res != ncclSuccess) {
    cc->running.n = 0;
    return res;
  }
  coll_plan_keep(cc, &cc->running, gen);
  cc->planned = true;
  return ncclSuccess;
}

static ncclResult_t comm_run(struct coll_comm* cc, bool* captured);

/* The running group's distinct streams into cc->streams, its first task's first. */
static ncclResult_t comm_streams(struct coll_comm* cc) {
  cc->nstreams = 0;
  for (int i = 0; i < cc->running.n; i++) {
    cudaStream_t s = cc->running.items[i].stream;
    bool seen = false;
    for (int k = 0; k < cc->nstreams && !seen; k++) seen = cc->streams[k] == s;
    if (seen) continue;
    if (cc->nstreams == cc->streams_cap) {
      int cap = cc->streams_cap ? 2 * cc->streams_cap : 4;
      cudaStream_t* p = realloc(cc->streams, (size_t)cap * sizeof(*p));
      if (p == NULL) {
        WARN("Out of memory joining %d streams of one group", cap);
        return ncclSystemError;
      }
      cc->streams = p;
      cc->streams_cap = cap;
    }
    cc->streams[cc->nstreams++] = s;
  }
  return ncclSuccess;
}

/* *captured: the launch went into a CUDA graph being captured (it runs when the graph does). */
static ncclResult_t comm_launch_plan(struct coll_comm* cc, bool* captured) {
  CHECK(comm_streams(cc));
  CHECK(coll_prof_exec_hook(cc));
  exec_streams_t streams = {.s = cc->streams, .n = cc->nstreams};
  void* ev = coll_prof_launch_begin(cc, cc->nstreams > 0 ? cc->streams[0] : NULL);
  ncclResult_t res = comm_res_launch(cc->comm, &cc->plan, &streams);
  coll_prof_launch_end(cc, ev);
  *captured = streams.captured;
  return res;
}

/* Profiler events (plugins.c) bracket the launch: on the host executor they end when the plan has
 * run, on the CUDA executor once it has been launched (as stock's end when the launch is made). */
static ncclResult_t comm_launch(struct coll_comm* cc, bool* captured) {
  if (cc->plan.nlocal == 0 && !plan_has_channel_work(&cc->plan))
    return ncclSuccess; /* nothing to do: nothing is launched */
  coll_prof_run_begin(cc);
  ncclResult_t res = comm_launch_plan(cc, captured);
  coll_prof_run_end(cc);
  return res;
}

/* The progress watch learns which launches carry the calls of this run (core.h, progress). A run
 * that failed, or went into a graph capture, counts as finished: its failure was reported, and a
 * captured run's launches are the graph's. */
ncclResult_t coll_comm_run(struct coll_comm* cc) {
  exec_progress_t ep = {0};
  uint64_t first, last;
  bool captured = false;
  comm_res_progress(cc->comm, &ep);
  progress_plan_begin(cc->comm, ep.launched + 1, &first, &last);
  ncclResult_t res = comm_run(cc, &captured);
  comm_res_progress(cc->comm, &ep);
  progress_plan_end(cc->comm, ep.launched, RESULT_IS_ERROR(res) || captured);
  return res;
}

static ncclResult_t comm_run(struct coll_comm* cc, bool* captured) {
  ncclResult_t res = ncclSuccess;
  exec_scope_t scope;
  bool entered = false;
  if (!cc->planned) CHECK_GOTO(coll_comm_plan(cc), res, out);
  cc->planned = false;
  CHECK_GOTO(comm_res_enter(cc->comm, false, &scope), res, out);
  entered = true;
  CHECK_GOTO(comm_res_connect(cc->comm, cc->reqs, cc->plan_nreqs), res, out);
  CHECK_GOTO(comm_launch(cc, captured), res, out);
out:
  if (entered) comm_res_leave(cc->comm, &scope);
  cc->planned = false;
  cc->running.n = 0;
  return res;
}

/* ---- Queries for tests ------------------------------------------------------------------------
 */
ncclResult_t coll_last_choice(ncclComm_t comm, coll_choice_t* out) {
  if (comm == NULL || comm->coll == NULL) return ncclInvalidArgument;
  *out = comm->coll->last;
  return ncclSuccess;
}
