/* Per-communicator collective state (the planner's view of core's resources, plugins, scratch):
 * core calls coll_comm_init at the end of init and coll_comm_free at destroy/abort, through the
 * table that group.c registers (core_upper_ops_t). Running a group's tasks is group.c's. */
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
  cc->ring_writes = r->ring_writes;
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

/* ---- Queries for tests ------------------------------------------------------------------------
 */
ncclResult_t coll_last_choice(ncclComm_t comm, coll_choice_t* out) {
  if (comm == NULL || comm->coll == NULL) return ncclInvalidArgument;
  *out = comm->coll->last;
  return ncclSuccess;
}
