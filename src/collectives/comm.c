/* Per-communicator collective state: channels (a ring and a tree each), the transport context,
 * the executor and the exec_comm_t it sees, and running one group's tasks (plan, connect,
 * launch). Core calls coll_comm_init at the end of init and coll_comm_free at destroy/abort,
 * through the table registered below. */
#include <stdlib.h>

#include "collectives/collectives.h"
#include "proxy/proxy.h"

/* Host tuning inputs: SHM copies on one host, sockets between hosts (per channel). */
#define COLL_HOST_INTRA_BW_GBS 6.0
#define COLL_HOST_INTER_BW_GBS 1.0
#define COLL_HOST_INTRA_LAT_US 4.0
#define COLL_HOST_INTER_LAT_US 30.0

/* An executor waiting on peer asks whether it is alive. Only that peer is checked: another rank
 * may have finished its part and exited normally, which is no error for this rank. */
static ncclResult_t comm_peer_check(void* arg, int peer) {
  struct coll_comm* cc = arg;
  return transport_peer_check(&cc->tctx, peer);
}

static void comm_proxy_wake(void* arg) {
  struct coll_comm* cc = arg;
  if (cc->tctx.proxy != NULL) proxy_wake(cc->tctx.proxy);
}

static int comm_param_channels(void) {
  int64_t lo = param_int(PARAM_MIN_NCHANNELS);
  int64_t hi = param_int(PARAM_MAX_NCHANNELS);
  int64_t n = COLL_DEFAULT_NCHANNELS;
  if (hi < 1) hi = 1;
  if (hi > PLAN_MAX_CHANNELS) hi = PLAN_MAX_CHANNELS;
  if (n < lo) n = lo;
  if (n > hi) n = hi;
  return (int)n;
}

/* host_of[r]: index of rank r's host, in order of first appearance. */
static int comm_hosts(const peer_info_t* peers, int nranks, int* host_of) {
  int nhosts = 0;
  for (int r = 0; r < nranks; r++) {
    host_of[r] = -1;
    for (int q = 0; q < r; q++) {
      if (peers[q].host_hash == peers[r].host_hash) {
        host_of[r] = host_of[q];
        break;
      }
    }
    if (host_of[r] < 0) host_of[r] = nhosts++;
  }
  return nhosts;
}

/* Channels share their ring: every channel runs the same one, or with rings both ways round the
 * even ones one and the odd ones its reverse (topo_ring_order). */
static int comm_nrings(const struct coll_comm* cc) {
  return cc->rings_both_ways && cc->nchannels > 1 ? 2 : 1;
}

static ncclResult_t comm_channels_init(struct coll_comm* cc) {
  int n = cc->nranks;
  CHECK(MEM_CALLOC(&cc->ring_ranks, (size_t)comm_nrings(cc) * (size_t)n));
  CHECK(MEM_CALLOC(&cc->fifo_tables, (size_t)cc->nchannels * 2 * (size_t)n));
  CHECK(MEM_CALLOC(&cc->channels, (size_t)cc->nchannels));
  CHECK(MEM_CALLOC(&cc->conn_mark, (size_t)cc->nchannels * 2 * (size_t)n));
  for (int c = 0; c < cc->nchannels; c++) {
    dev_channel_t* ch = &cc->channels[c];
    int* ring = cc->ring_ranks + (size_t)(c % comm_nrings(cc)) * (size_t)n;
    if (c < comm_nrings(cc)) topo_ring_order(n, cc->host_of, c, cc->rings_both_ways, ring);
    ch->id = c;
    ch->ring_ranks = ring;
    ch->ring_index = -1;
    for (int i = 0; i < n; i++)
      if (ring[i] == cc->rank) ch->ring_index = i;
    if (ch->ring_index < 0) {
      WARN("Channel %d: the ring order does not contain rank %d (topo_ring_order bug)", c,
           cc->rank);
      return ncclInternalError;
    }
    ch->ring_prev = ring[(ch->ring_index + n - 1) % n];
    ch->ring_next = ring[(ch->ring_index + 1) % n];
    int down[TOPO_TREE_MAX_CHILDREN];
    topo_dbtree(n, cc->rank, c % 2, &ch->tree_up, down);
    for (int k = 0; k < TREE_MAX_CHILDREN; k++)
      ch->tree_down[k] = k < TOPO_TREE_MAX_CHILDREN ? down[k] : -1;
    ch->send = cc->fifo_tables + (size_t)c * 2 * (size_t)n;
    ch->recv = ch->send + n;
  }
  return ncclSuccess;
}

/* Stock's "Channel 00/24 : 0 1" and "Trees [0] ..." lines. */
static ncclResult_t comm_channels_log(const struct coll_comm* cc) {
  if (!LOG_ENABLED(NCCL_LOG_INFO)) return ncclSuccess;
  int* up = NULL;
  int* down = NULL;
  CHECK(MEM_CALLOC(&up, (size_t)cc->nchannels));
  if (mem_calloc((void**)&down, (size_t)cc->nchannels * TOPO_TREE_MAX_CHILDREN, sizeof(int)) !=
      ncclSuccess) {
    free(up);
    return ncclSystemError;
  }
  for (int c = 0; c < cc->nchannels; c++) {
    const dev_channel_t* ch = &cc->channels[c];
    up[c] = ch->tree_up;
    for (int k = 0; k < TOPO_TREE_MAX_CHILDREN; k++)
      down[(size_t)c * TOPO_TREE_MAX_CHILDREN + k] = k < TREE_MAX_CHILDREN ? ch->tree_down[k] : -1;
  }
  int* rings = NULL; /* every channel's ring, as topo_log_graph takes them */
  if (mem_calloc((void**)&rings, (size_t)cc->nchannels * (size_t)cc->nranks, sizeof(int)) ==
      ncclSuccess) {
    for (int c = 0; c < cc->nchannels; c++)
      memcpy(rings + (size_t)c * (size_t)cc->nranks, cc->channels[c].ring_ranks,
             (size_t)cc->nranks * sizeof(int));
    topo_log_graph(cc->rank, cc->nranks, cc->nchannels, rings, up, down);
  }
  free(rings);
  free(down);
  free(up);
  return ncclSuccess;
}

static ncclResult_t comm_transport_init(struct coll_comm* cc, struct ncclComm* comm) {
  transport_ctx_t* t = &cc->tctx;
  t->rank = comm->rank;
  t->nranks = comm->nranks;
  t->nchannels = cc->nchannels;
  t->peers = comm->peers;
  t->bootstrap = comm->bootstrap;
  t->abort_flag = comm->abort_flag;
  t->err_buf = comm->last_error;
  t->err_len = sizeof(comm->last_error);
  t->comm_hash = comm->comm_hash;
  t->cuda_exec = cc->gpu; /* before transport_ctx_init: it sizes LL128 buffers by it */
  t->no_ll128 = !cc->ll128_ok;
  t->topo = cc->topo;
  t->traffic_class = comm->config.trafficClass; /* NCCL_CONFIG_UNDEF_INT when unset */
  t->buff_bytes[PROTO_SIMPLE] = (int)param_int(PARAM_BUFFSIZE);
  t->buff_bytes[PROTO_LL] = (int)param_int(PARAM_LL_BUFFSIZE);
  t->buff_bytes[PROTO_LL128] = (int)param_int(PARAM_LL128_BUFFSIZE);
  CHECK(transport_ctx_init(t));
  cc->tctx_ready = true;
  size_t slot_simple = (size_t)t->buff_bytes[PROTO_SIMPLE] / NCCL_STEPS;
  size_t slot_ll = (size_t)t->buff_bytes[PROTO_LL] / NCCL_STEPS;
  size_t slot_ll128 = (size_t)t->buff_bytes[PROTO_LL128] / NCCL_STEPS;
  cc->slot_data_bytes[PROTO_SIMPLE] = slot_simple;
  cc->slot_data_bytes[PROTO_LL] = slot_ll / sizeof(ll_line_t) * 8; /* 8 data bytes per line */
  cc->slot_data_bytes[PROTO_LL128] = slot_ll128 / LL128_LINE_BYTES * LL128_DATA_BYTES;
  for (int p = 0; p < PROTO_COUNT; p++) {
    if (p != PROTO_LL128 && cc->slot_data_bytes[p] < 16) {
      WARN("FIFO of protocol %s is too small (%d bytes for %d slots): raise %s", coll_proto_name(p),
           t->buff_bytes[p], NCCL_STEPS, p == PROTO_LL ? "NCCL_LL_BUFFSIZE" : "NCCL_BUFFSIZE");
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

/* Connections every collective may use, made at init when NCCL_RUNTIME_CONNECT=0: per channel,
 * the ring (send next, receive prev) and the tree (both ways with the parent and every child). */
static ncclResult_t comm_connect_all(struct coll_comm* cc) {
  int nreqs = 0;
  conn_request_t* reqs;
  CHECK(MEM_CALLOC(&reqs, (size_t)cc->nchannels * (2 + 2 * (1 + TREE_MAX_CHILDREN))));
  for (int c = 0; c < cc->nchannels; c++) {
    const dev_channel_t* ch = &cc->channels[c];
    reqs[nreqs++] = (conn_request_t){.channel = c, .peer = ch->ring_next, .is_send = 1};
    reqs[nreqs++] = (conn_request_t){.channel = c, .peer = ch->ring_prev, .is_send = 0};
    int tree[1 + TREE_MAX_CHILDREN] = {ch->tree_up};
    for (int k = 0; k < TREE_MAX_CHILDREN; k++) tree[1 + k] = ch->tree_down[k];
    for (int k = 0; k < 1 + TREE_MAX_CHILDREN; k++) {
      if (tree[k] < 0) continue;
      reqs[nreqs++] = (conn_request_t){.channel = c, .peer = tree[k], .is_send = 1};
      reqs[nreqs++] = (conn_request_t){.channel = c, .peer = tree[k], .is_send = 0};
    }
  }
  ncclResult_t res = coll_comm_connect(cc, reqs, nreqs);
  free(reqs);
  return res;
}

static ncclResult_t comm_init_body(struct coll_comm* cc, struct ncclComm* comm) {
  CHECK(coll_gpu_check_peers(comm->peers, cc->nranks, &cc->gpu));
  if (cc->gpu && comm->cuda_dev < 0) {
    WARN("Rank %d: every rank has a CUDA device but this communicator has none", cc->rank);
    return ncclInternalError;
  }
  CHECK(MEM_CALLOC(&cc->host_of, (size_t)cc->nranks));
  cc->nhosts = comm_hosts(comm->peers, cc->nranks, cc->host_of);
  if (cc->gpu) {
    CHECK(coll_gpu_setup(cc, comm)); /* nchannels, LL128, tuning */
  } else {
    cc->nchannels = coll_ctas_clamp(comm_param_channels(), &comm->config);
    cc->tuning = (topo_tuning_t){.nranks = cc->nranks,
                                 .nhosts = cc->nhosts,
                                 .nchannels = cc->nchannels,
                                 .intra_bw_gbs = COLL_HOST_INTRA_BW_GBS,
                                 .inter_bw_gbs = COLL_HOST_INTER_BW_GBS,
                                 .intra_lat_us = COLL_HOST_INTRA_LAT_US,
                                 .inter_lat_us = COLL_HOST_INTER_LAT_US,
                                 .gpu = false};
  }
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
  CHECK(coll_plugins_open(cc));
  CHECK(comm_channels_init(cc));
  /* The executor is chosen before the transports exist: they allocate for it. */
  cc->executor = cc->simulated ? comm->platform->executor
                 : cc->gpu     ? &executor_cuda_ops
                               : &executor_host_ops;
  CHECK(comm_transport_init(cc, comm));
  CHECK(coll_filter_init(&cc->filter));
  cc->exec = (exec_comm_t){.rank = cc->rank,
                           .nranks = cc->nranks,
                           .nchannels = cc->nchannels,
                           .channels = cc->channels,
                           .abort_flag = comm->abort_flag,
                           .peer_check = comm_peer_check,
                           .proxy_wake = comm_proxy_wake,
                           .arg = cc,
                           .err_buf = comm->last_error,
                           .err_len = sizeof(comm->last_error),
                           .platform = cc->simulated ? comm->platform->ctx : NULL};
  CHECK(cc->executor->init(&cc->exec, &cc->exec_state));
  INFO(NCCL_INIT, "comm %p rank %d nranks %d: %d channels over %d host(s), executor %s",
       (void*)comm, cc->rank, cc->nranks, cc->nchannels, cc->nhosts, cc->executor->name);
  CHECK(comm_channels_log(cc));
  if (cc->nranks > 1 && param_int(PARAM_RUNTIME_CONNECT) == 0) CHECK(comm_connect_all(cc));
  return ncclSuccess;
}

ncclResult_t coll_comm_init(struct ncclComm* comm) {
  struct coll_comm* cc;
  CHECK(MEM_CALLOC(&cc, 1));
  pthread_mutex_init(&cc->lock, NULL);
  comm->coll = cc; /* from here on coll_comm_free releases whatever was set up */
  cc->comm = comm;
  cc->rank = comm->rank;
  cc->nranks = comm->nranks;
  cc->simulated = comm->platform != NULL;
  /* A GPU communicator's CUDA work (executor, transports) happens on its device, whichever
   * thread runs this (the caller's, or an init job's). */
  int saved = -1;
  bool real_gpu = comm->cuda_dev >= 0 && !cc->simulated;
  if (real_gpu) CHECK(coll_device_enter(comm->cuda_dev, &saved));
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (real_gpu) mode = coll_capture_relax();
  ncclResult_t res = comm_init_body(cc, comm);
  if (real_gpu) {
    coll_capture_restore(mode);
    coll_device_leave(comm->cuda_dev, saved);
  }
  return res;
}

ncclResult_t coll_comm_finalize(struct ncclComm* comm) {
  struct coll_comm* cc = comm->coll;
  if (cc == NULL) return ncclSuccess;
  ncclResult_t res = coll_job_join(cc);
  if (RESULT_IS_ERROR(res)) return res;
  /* The CUDA executor's launches complete on the GPU: wait for them (kernels stop early once the
   * abort flag is set). */
  if (cc->exec_state != NULL && cc->executor->wait != NULL) {
    int saved = -1;
    bool real_gpu = cc->gpu && !cc->simulated;
    if (real_gpu) CHECK(coll_device_enter(comm->cuda_dev, &saved));
    res = cc->executor->wait(cc->exec_state);
    if (real_gpu) coll_device_leave(comm->cuda_dev, saved);
    if (RESULT_IS_ERROR(res)) return res;
  }
  return ncclSuccess;
}

ncclResult_t coll_comm_free(struct ncclComm* comm) {
  struct coll_comm* cc = comm->coll;
  if (cc == NULL) return ncclSuccess;
  ncclResult_t res = ncclSuccess;
  coll_group_forget(cc);
  (void)coll_job_join(cc);
  int saved = -1;
  bool entered =
      cc->gpu && !cc->simulated && coll_device_enter(comm->cuda_dev, &saved) == ncclSuccess;
  if (cc->exec_state != NULL) {
    ncclResult_t r = cc->executor->fini(cc->exec_state);
    if (r != ncclSuccess && !cc->gpu) {
      /* A host launch did not leave (it WARNed): what it uses stays allocated. */
      if (entered) coll_device_leave(comm->cuda_dev, saved);
      comm->coll = NULL;
      return r;
    }
    if (res == ncclSuccess) res = r;
  }
  if (cc->tctx_ready) {
    ncclResult_t r = transport_ctx_free(&cc->tctx);
    if (res == ncclSuccess) res = r;
  }
  coll_plugins_close(cc);     /* after the executor: its threads may still report channel events */
  topo_system_free(cc->topo); /* after the transports, which looked paths up in it */
  cc->topo = NULL;
  coll_gpu_free(cc);
  if (entered) coll_device_leave(comm->cuda_dev, saved);
  coll_user_ops_free(cc);
  coll_regs_free(cc);
  free(cc->pending.items);
  free(cc->running.items);
  free(cc->works);
  free(cc->reqs);
  free(cc->order);
  free(cc->locals);
  free(cc->conn_mark);
  free(cc->channels);
  free(cc->fifo_tables);
  free(cc->ring_ranks);
  free(cc->host_of);
  pthread_mutex_destroy(&cc->lock);
  free(cc);
  comm->coll = NULL;
  return res;
}

/* Core reaches this layer only through this table (core.h), registered when the library loads. */
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

ncclResult_t coll_comm_connect(struct coll_comm* cc, const conn_request_t* reqs, int nreqs) {
  if (nreqs == 0) return ncclSuccess;
  /* Connections appear on first use, which may be inside the user's graph capture: allocating
   * and registering memory is legal then only in relaxed mode. */
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  bool real_gpu = cc->gpu && !cc->simulated;
  if (real_gpu) mode = coll_capture_relax();
  ncclResult_t res = transport_connect(&cc->tctx, reqs, nreqs);
  if (real_gpu) coll_capture_restore(mode);
  CHECK(res);
  for (int k = 0; k < nreqs; k++) {
    const conn_request_t* r = &reqs[k];
    conn_t* conn = transport_conn(&cc->tctx, r->channel, r->peer, r->is_send);
    if (conn == NULL) {
      WARN("Channel %d: no %s connection with rank %d after transport_connect", r->channel,
           r->is_send ? "send" : "receive", r->peer);
      return ncclInternalError;
    }
    dev_channel_t* ch = &cc->channels[r->channel];
    (r->is_send ? ch->send : ch->recv)[r->peer] = &conn->fifo;
  }
  return ncclSuccess;
}

ncclResult_t coll_comm_plan(struct coll_comm* cc) {
  cc->planned = false;
  ncclResult_t res = coll_plan_build(cc, &cc->running, &cc->plan_nreqs);
  if (res != ncclSuccess) {
    cc->running.n = 0;
    return res;
  }
  cc->planned = true;
  return ncclSuccess;
}

static ncclResult_t comm_run(struct coll_comm* cc, bool* captured);

/* *captured: the launch went into a CUDA graph being captured (it runs when the graph does). */
static ncclResult_t comm_launch_plan(struct coll_comm* cc, bool* captured) {
  if (!cc->gpu || cc->simulated) { /* no stream to order: the host's, or a virtual GPU's */
    CHECK(coll_prof_exec_hook(cc));
    void* ev = coll_prof_launch_begin(cc, NULL);
    ncclResult_t res = cc->executor->launch(cc->exec_state, &cc->plan, NULL);
    coll_prof_launch_end(cc, ev);
    return res;
  }
  cudaStream_t stream = NULL;
  CHECK(coll_gpu_join_before(cc, &stream));
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &cs) != cudaSuccess)
    (void)cudaGetLastError(); /* unknown: as not captured (the launch reports a bad stream) */
  *captured = cs != cudaStreamCaptureStatusNone;
  void* ev = coll_prof_launch_begin(cc, stream);
  ncclResult_t res = cc->executor->launch(cc->exec_state, &cc->plan, stream);
  coll_prof_launch_end(cc, ev);
  CHECK(res);
  return coll_gpu_join_after(cc, stream);
}

/* Profiler events (plugins.c) bracket the launch: on the host executor they end when the plan has
 * run, on the CUDA executor once it has been launched (as stock's end when the launch is made). */
static ncclResult_t comm_launch(struct coll_comm* cc, bool* captured) {
  bool any = cc->plan.nlocal > 0;
  for (int c = 0; c < cc->plan.nchannels; c++) any |= cc->plan.nwork[c] > 0;
  if (!any) return ncclSuccess; /* nothing to do: nothing is launched */
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
  coll_comm_progress(cc->comm, &ep);
  progress_plan_begin(cc->comm, ep.launched + 1, &first, &last);
  ncclResult_t res = comm_run(cc, &captured);
  coll_comm_progress(cc->comm, &ep);
  progress_plan_end(cc->comm, ep.launched, RESULT_IS_ERROR(res) || captured);
  return res;
}

static ncclResult_t comm_run(struct coll_comm* cc, bool* captured) {
  ncclResult_t res = ncclSuccess;
  int saved = -1;
  bool entered = false;
  if (!cc->planned) CHECK_GOTO(coll_comm_plan(cc), res, out);
  cc->planned = false;
  if (cc->gpu && !cc->simulated) {
    CHECK_GOTO(coll_device_enter(cc->comm->cuda_dev, &saved), res, out);
    entered = true;
  }
  CHECK_GOTO(coll_comm_connect(cc, cc->reqs, cc->plan_nreqs), res, out);
  CHECK_GOTO(comm_launch(cc, captured), res, out);
out:
  if (entered) coll_device_leave(cc->comm->cuda_dev, saved);
  cc->planned = false;
  cc->running.n = 0;
  return res;
}

/* ---- The progress watch's view (core.h hooks) --------------------------------------------------
 */
void coll_comm_progress(ncclComm_t comm, exec_progress_t* out) {
  *out = (exec_progress_t){0};
  struct coll_comm* cc = comm->coll;
  if (cc == NULL || cc->exec_state == NULL || cc->executor->progress == NULL) return;
  cc->executor->progress(cc->exec_state, out);
}

int coll_comm_waits(ncclComm_t comm, prog_wait_t* out, int max) {
  struct coll_comm* cc = comm->coll;
  exec_wait_t w[PROG_MAX_WAITS];
  if (cc == NULL || cc->exec_state == NULL || cc->executor->waits == NULL) return 0;
  if (max > PROG_MAX_WAITS) max = PROG_MAX_WAITS;
  int n = cc->executor->waits(cc->exec_state, w, max);
  uint64_t now = clock_ns();
  for (int i = 0; i < n; i++) {
    const char* tr = NULL;
    if (w[i].channel < cc->nchannels && w[i].peer >= 0 && w[i].peer < cc->nranks)
      tr = coll_conn_transport(comm, w[i].channel, w[i].peer, w[i].is_send);
    out[i] = (prog_wait_t){
        .channel = w[i].channel,
        .peer = w[i].peer,
        .is_send = w[i].is_send,
        .secs = now > w[i].since_ns ? (uint32_t)((now - w[i].since_ns) / 1000000000ull) : 0,
        .step = w[i].step};
    snprintf(out[i].transport, sizeof(out[i].transport), "%s", tr ? tr : "?");
  }
  return n;
}

/* The ring connections' positions on the first channels: enough for a report to tell a
 * connection that lost data in transit (the sender is ahead of its receiver) from a sender that
 * has not sent. Host executor only: a GPU's positions are in device memory. */
int coll_comm_conns(ncclComm_t comm, prog_conn_t* out, int max) {
  struct coll_comm* cc = comm->coll;
  int n = 0;
  if (cc == NULL || cc->gpu || cc->channels == NULL) return 0;
  for (int c = 0; c < cc->nchannels && n + 2 <= max; c++) {
    const dev_channel_t* ch = &cc->channels[c];
    const conn_fifo_t* s = ch->ring_next >= 0 ? ch->send[ch->ring_next] : NULL;
    const conn_fifo_t* r = ch->ring_prev >= 0 ? ch->recv[ch->ring_prev] : NULL;
    if (s != NULL)
      out[n++] = (prog_conn_t){.channel = c,
                               .peer = ch->ring_next,
                               .is_send = 1,
                               .step = __atomic_load_n(&s->step, __ATOMIC_RELAXED)};
    if (r != NULL)
      out[n++] = (prog_conn_t){.channel = c,
                               .peer = ch->ring_prev,
                               .is_send = 0,
                               .step = __atomic_load_n(&r->step, __ATOMIC_RELAXED)};
  }
  return n;
}

bool coll_comm_launch_time(ncclComm_t comm, uint64_t launch, uint64_t* start_ns, uint64_t* end_ns) {
  struct coll_comm* cc = comm->coll;
  if (cc == NULL || cc->exec_state == NULL || cc->executor->launch_time == NULL) return false;
  return cc->executor->launch_time(cc->exec_state, launch, start_ns, end_ns);
}

/* ---- Queries for tests ------------------------------------------------------------------------
 */
ncclResult_t coll_last_choice(ncclComm_t comm, coll_choice_t* out) {
  if (comm == NULL || comm->coll == NULL) return ncclInvalidArgument;
  *out = comm->coll->last;
  return ncclSuccess;
}

const char* coll_conn_transport(ncclComm_t comm, int channel, int peer, int is_send) {
  if (comm == NULL || comm->coll == NULL || channel < 0 || channel >= comm->coll->nchannels)
    return NULL;
  conn_t* conn = transport_conn(&comm->coll->tctx, channel, peer, is_send);
  return conn && conn->transport ? conn->transport->name : NULL;
}
