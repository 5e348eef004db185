/* A communicator's resources (core.h, comm_res_t): its channels (a ring and a tree each), the
 * transport context and its connections, the executor and the exec_comm_t it sees, and the
 * progress watch's view of that executor. Core sets them up at init (after the peer exchange,
 * before the collectives layer's part) and frees them at destroy/abort; the collectives layer
 * asks for the connections a plan needs through comm_res_connect (and launches the plan through
 * comm.c's per-call operations, comm_res_launch). */
#include <stdlib.h>

#include "core/core.h"
#include "device/sim/sim.h"
#include "proxy/proxy.h"

static ncclResult_t res_connect(comm_res_t* cc, const conn_request_t* reqs, int nreqs);

/* Host tuning inputs: SHM copies on one host, sockets between hosts (per channel). */
#define RES_HOST_INTRA_BW_GBS 6.0
#define RES_HOST_INTER_BW_GBS 1.0
#define RES_HOST_INTRA_LAT_US 4.0
#define RES_HOST_INTER_LAT_US 30.0
#define RES_DEFAULT_NCHANNELS 2 /* host executor */

/* An executor waiting on peer asks whether it is alive. Only that peer is checked: another rank
 * may have finished its part and exited normally, which is no error for this rank. */
static ncclResult_t comm_peer_check(void* arg, int peer) {
  comm_res_t* cc = arg;
  return transport_peer_check(&cc->tctx, peer);
}

static void comm_proxy_wake(void* arg) {
  comm_res_t* cc = arg;
  if (cc->tctx.proxy != NULL) proxy_wake(cc->tctx.proxy);
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

/* The channels' rings. Between hosts whose GPUs have NICs, each channel's ring leaves and enters
 * every host through its own pair of rails (topo_ring_rails), one layout per channel up to the
 * layouts' period. Otherwise channels share their ring: every channel runs the same one, or with
 * rings both ways round the even ones one and the odd ones its reverse (topo_ring_order). */
static ncclResult_t comm_rings_init(comm_res_t* cc) {
  int n = cc->nranks;
  int* scratch = NULL;
  cc->nrings = cc->rings_both_ways && cc->nchannels > 1 ? 2 : 1;
  if (cc->rank_nics != NULL && !cc->rings_both_ways) {
    CHECK(MEM_CALLOC(&scratch, 2 * (size_t)n));
    int period = topo_ring_rails_period(n, cc->host_of, cc->rank_nics, cc->nchannels, scratch);
    ncclResult_t res = MEM_CALLOC(&cc->ring_ranks, (size_t)period * (size_t)n);
    if (res == ncclSuccess) res = MEM_CALLOC(&cc->ring_nics, (size_t)period * (size_t)n);
    bool applied = res == ncclSuccess;
    for (int i = 0; i < period && applied; i++)
      applied = topo_ring_rails(n, cc->host_of, cc->rank_nics, i, scratch,
                                cc->ring_ranks + (size_t)i * (size_t)n,
                                cc->ring_nics + (size_t)i * (size_t)n);
    free(scratch);
    if (applied) {
      cc->nrings = period;
      return ncclSuccess;
    }
    free(cc->ring_ranks);
    free(cc->ring_nics);
    cc->ring_ranks = NULL;
    cc->ring_nics = NULL;
    CHECK(res);
  }
  CHECK(MEM_CALLOC(&cc->ring_ranks, (size_t)cc->nrings * (size_t)n));
  for (int i = 0; i < cc->nrings; i++)
    topo_ring_order(n, cc->host_of, i, cc->rings_both_ways, cc->ring_ranks + (size_t)i * (size_t)n);
  return ncclSuccess;
}

/* This rank's tree on every channel: over every NIC when the rings are (topo_tree_rails, one
 * layout per channel: their roots move from channel to channel), else the double binary tree over
 * ranks (topo_dbtree, the same every other channel). */
static ncclResult_t comm_trees_init(comm_res_t* cc) {
  int n = cc->nranks;
  int *scratch = NULL, *up = NULL, *down = NULL;
  bool rails = cc->ring_nics != NULL;
  if (rails) {
    CHECK(MEM_CALLOC(&scratch, 2 * (size_t)n));
    if (MEM_CALLOC(&up, (size_t)n) != ncclSuccess ||
        MEM_CALLOC(&down, (size_t)n * TOPO_TREE_MAX_CHILDREN) != ncclSuccess) {
      free(scratch);
      free(up);
      return ncclSystemError;
    }
  }
  int period = rails ? cc->nchannels : 2; /* the double trees alternate */
  for (int l = 0; l < period && l < cc->nchannels; l++) {
    int my_up = -1, my_down[TOPO_TREE_MAX_CHILDREN];
    if (rails && topo_tree_rails(n, cc->host_of, cc->rank_nics, l, scratch, up, down)) {
      my_up = up[cc->rank];
      memcpy(my_down, down + (size_t)cc->rank * TOPO_TREE_MAX_CHILDREN, sizeof(my_down));
    } else {
      topo_dbtree(n, cc->rank, l % 2, &my_up, my_down);
    }
    for (int c = l; c < cc->nchannels; c += period) {
      dev_channel_t* ch = &cc->channels[c];
      ch->tree_up = my_up;
      for (int k = 0; k < TREE_MAX_CHILDREN; k++)
        ch->tree_down[k] = k < TOPO_TREE_MAX_CHILDREN ? my_down[k] : -1;
    }
  }
  free(down);
  free(up);
  free(scratch);
  return ncclSuccess;
}

static ncclResult_t comm_channels_init(comm_res_t* cc) {
  int n = cc->nranks;
  CHECK(comm_rings_init(cc));
  CHECK(MEM_CALLOC(&cc->fifo_tables, (size_t)cc->nchannels * 2 * (size_t)n));
  CHECK(MEM_CALLOC(&cc->channels, (size_t)cc->nchannels));
  for (int c = 0; c < cc->nchannels; c++) {
    dev_channel_t* ch = &cc->channels[c];
    int* ring = cc->ring_ranks + (size_t)(c % cc->nrings) * (size_t)n;
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
    ch->send = cc->fifo_tables + (size_t)c * 2 * (size_t)n;
    ch->recv = ch->send + n;
  }
  return comm_trees_init(cc);
}

/* Stock's "Channel 00/24 : 0 1" and "Trees [0] ..." lines. */
static ncclResult_t comm_channels_log(const comm_res_t* cc) {
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
  /* Where this rank's ring hops between hosts go through (topo_ring_rails). */
  for (int c = 0; c < cc->nchannels && cc->ring_nics != NULL; c++) {
    const dev_channel_t* ch = &cc->channels[c];
    int k = cc->ring_nics[(size_t)(c % cc->nrings) * (size_t)cc->nranks + (size_t)cc->rank];
    if (k < 0) continue;
    const char* name = cc->topo != NULL && k < cc->topo->nnics ? cc->topo->nics[k].name : "?";
    char from[48] = "", to[48] = "";
    if (cc->host_of[ch->ring_prev] != cc->host_of[cc->rank])
      snprintf(from, sizeof(from), " receives from rank %d", ch->ring_prev);
    if (cc->host_of[ch->ring_next] != cc->host_of[cc->rank])
      snprintf(to, sizeof(to), "%s sends to rank %d", from[0] ? " and" : "", ch->ring_next);
    INFO(NCCL_GRAPH | NCCL_NET, "Channel %02d/%02d: rank %d%s%s on NIC %d (%s)", c, cc->nchannels,
         cc->rank, from, to, k, name);
  }
  return ncclSuccess;
}

/* NCCL_GRAPH_DUMP_FILE, by rank NCCL_GRAPH_DUMP_FILE_RANK: its host's part of every channel's
 * ring and (over the NICs) tree, with their NICs (topo_graphs_format). */
static ncclResult_t comm_graph_dump(const comm_res_t* cc, const peer_info_t* peers) {
  const char* path = param_str(PARAM_GRAPH_DUMP_FILE);
  if (path == NULL || path[0] == '\0' || cc->rank != param_int(PARAM_GRAPH_DUMP_FILE_RANK))
    return ncclSuccess;
  int n = cc->nranks, nch = cc->nchannels;
  ncclResult_t res = ncclSuccess;
  int *dev = NULL, *rings = NULL, *up = NULL, *down = NULL, *scratch = NULL;
  int8_t* nics = NULL;
  char* text = NULL;
  bool trees = cc->ring_nics != NULL;
  CHECK_GOTO(MEM_CALLOC(&dev, (size_t)n), res, out);
  CHECK_GOTO(MEM_CALLOC(&rings, (size_t)nch * n), res, out);
  if (trees) {
    CHECK_GOTO(MEM_CALLOC(&nics, (size_t)nch * n), res, out);
    CHECK_GOTO(MEM_CALLOC(&up, (size_t)nch * n), res, out);
    CHECK_GOTO(MEM_CALLOC(&down, (size_t)nch * n * TOPO_TREE_MAX_CHILDREN), res, out);
    CHECK_GOTO(MEM_CALLOC(&scratch, 2 * (size_t)n), res, out);
  }
  topo_path_t intra = TOPO_PATH_LOC, inter = TOPO_PATH_LOC;
  for (int r = 0; r < n; r++) {
    const topo_gpu_t* g = cc->host_of[r] == cc->host_of[cc->rank]
                              ? topo_system_gpu_info(cc->topo, peers[r].bus_id)
                              : NULL;
    dev[r] = g != NULL ? (g->dev >= 0 ? g->dev : topo_system_gpu(cc->topo, g->bus_id)) : -1;
    for (int q = 0; q < n && g != NULL; q++) {
      topo_path_t p = cc->host_of[q] == cc->host_of[r] && q != r
                          ? topo_system_path(cc->topo, peers[r].bus_id, peers[q].bus_id)
                          : TOPO_PATH_LOC;
      if (p > intra) intra = p;
    }
  }
  for (int c = 0; c < nch; c++) {
    size_t at = (size_t)(c % cc->nrings) * (size_t)n;
    memcpy(rings + (size_t)c * n, cc->ring_ranks + at, (size_t)n * sizeof(int));
    if (!trees) continue;
    memcpy(nics + (size_t)c * n, cc->ring_nics + at, (size_t)n);
    for (int r = 0; r < n; r++) {
      int k = cc->ring_nics[at + (size_t)r];
      if (k >= 0 && k < cc->rank_nics[r].nnics && cc->rank_nics[r].path[k] > inter)
        inter = cc->rank_nics[r].path[k];
    }
    /* channel c's tree, as comm_trees_init lays it (its head is the ring's end on that NIC) */
    if (!topo_tree_rails(n, cc->host_of, cc->rank_nics, c, scratch, up + (size_t)c * n,
                         down + (size_t)c * n * TOPO_TREE_MAX_CHILDREN))
      trees = false;
  }
  topo_graph_dump_t d = {.nranks = n,
                         .nchannels = nch,
                         .nhosts = cc->nhosts,
                         .host = cc->host_of[cc->rank],
                         .host_of = cc->host_of,
                         .gpu_dev = dev,
                         .rings = rings,
                         .ring_nics = nics,
                         .tree_up = trees ? up : NULL,
                         .tree_down = trees ? down : NULL,
                         .tree_nics = trees ? nics : NULL,
                         .cross_nic = (int)param_int(PARAM_CROSS_NIC),
                         .speed_intra = cc->tuning.intra_bw_gbs,
                         .speed_inter = cc->tuning.inter_bw_gbs,
                         .type_intra = intra,
                         .type_inter = cc->nhosts > 1 ? inter : TOPO_PATH_LOC};
  CHECK_GOTO(topo_graphs_format(&d, &text), res, out);
  CHECK_GOTO(topo_text_write(text, "NCCL_GRAPH_DUMP_FILE", path), res, out);
  INFO(NCCL_GRAPH, "Graphs: wrote %d channels of host %d to %s", nch, d.host, path);
out:
  free(text);
  free(scratch);
  free(down);
  free(up);
  free(nics);
  free(rings);
  free(dev);
  return res;
}

static ncclResult_t comm_transport_init(comm_res_t* cc, ncclComm_t comm) {
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
  /* what the executor needs of its FIFOs, before transport_ctx_init (it sizes LL128 buffers) */
  t->gpu_fifos = cc->gpu;
  t->virtual_conns = cc->simulated;
  t->no_ll128 = !cc->ll128_ok;
  t->topo = cc->topo;
  t->nrings = cc->nrings;
  t->ring_nics = cc->ring_nics;
  t->traffic_class = comm->config.trafficClass; /* NCCL_CONFIG_UNDEF_INT when unset */
  t->buff_bytes[PROTO_SIMPLE] = (int)param_int(PARAM_BUFFSIZE);
  t->buff_bytes[PROTO_LL] = (int)param_int(PARAM_LL_BUFFSIZE);
  t->buff_bytes[PROTO_LL128] = (int)param_int(PARAM_LL128_BUFFSIZE);
  CHECK(transport_ctx_init(t));
  cc->tctx_ready = true;
  for (int p = 0; p < PROTO_COUNT; p++)
    cc->slot_data_bytes[p] = fifo_slot_data_bytes(t->buff_bytes[p], p);
  for (int p = 0; p < PROTO_COUNT; p++) {
    if (p != PROTO_LL128 && cc->slot_data_bytes[p] < 16) {
      WARN("FIFO of protocol %s is too small (%d bytes for %d slots): raise %s",
           topo_proto_names[p] /* PROTO_* order */, t->buff_bytes[p], NCCL_STEPS,
           p == PROTO_LL ? "NCCL_LL_BUFFSIZE" : "NCCL_BUFFSIZE");
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

/* Connections every collective may use, made at init when NCCL_RUNTIME_CONNECT=0: per channel,
 * the ring (send next, receive prev) and the tree (both ways with the parent and every child). */
static ncclResult_t comm_connect_all(comm_res_t* cc) {
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
  ncclResult_t res = res_connect(cc, reqs, nreqs);
  free(reqs);
  return res;
}

/* The executor, chosen once: a virtual cluster's rank gets its platform's, a communicator whose
 * ranks all have a CUDA device the CUDA one, else the host one. It is chosen before anything else
 * is set up: setup runs inside its scope, and the transports allocate for it. */
static ncclResult_t res_executor_choose(comm_res_t* cc, ncclComm_t comm) {
  CHECK(res_gpu_check_peers(comm->peers, cc->nranks, &cc->gpu));
  if (cc->gpu && comm->cuda_dev < 0) {
    WARN("Rank %d: every rank has a CUDA device but this communicator has none", cc->rank);
    return ncclInternalError;
  }
  cc->executor = cc->simulated ? comm->platform->executor
                 : cc->gpu     ? &executor_cuda_ops
                               : &executor_host_ops;
  /* What the choice means for the code around the executor (core.h): nothing else asks it. */
  cc->dev_tables = cc->gpu && !cc->simulated;
  cc->kernels = cc->gpu;
  cc->fini_keeps = !cc->gpu;
  return ncclSuccess;
}

/* Whether every rank could map every other's memory: one host, 2 to DIRECT_MAX_RANKS ranks, and
 * direct_ok. Every rank decides alike. */
static bool res_peers_mappable(const comm_res_t* cc) {
  return cc->nranks >= 2 && cc->nranks <= DIRECT_MAX_RANKS && cc->nhosts == 1 && cc->direct_ok;
}

static ncclResult_t res_init_body(comm_res_t* cc, ncclComm_t comm) {
  CHECK(MEM_CALLOC(&cc->host_of, (size_t)cc->nranks));
  cc->nhosts = comm_hosts(comm->peers, cc->nranks, cc->host_of);
  if (cc->gpu) {
    CHECK(res_gpu_setup(cc, comm)); /* nchannels, LL128, direct_ok, tuning */
    cc->direct_model = true;
  } else {
    cc->direct_ok = true; /* host threads reach every rank's FIFOs; run only when forced */
    cc->nchannels = res_ctas_clamp(res_nchannels_clamp(RES_DEFAULT_NCHANNELS), &comm->config);
    cc->tuning = (topo_tuning_t){.nranks = cc->nranks,
                                 .nhosts = cc->nhosts,
                                 .nchannels = cc->nchannels,
                                 .intra_bw_gbs = RES_HOST_INTRA_BW_GBS,
                                 .inter_bw_gbs = RES_HOST_INTER_BW_GBS,
                                 .intra_lat_us = RES_HOST_INTRA_LAT_US,
                                 .inter_lat_us = RES_HOST_INTER_LAT_US,
                                 .gpu = false};
  }
  CHECK(comm_channels_init(cc));
  CHECK(comm_transport_init(cc, comm));
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
                           .platform = cc->simulated ? comm->platform->ctx : NULL,
                           .stage_slot = -1};
  CHECK(cc->executor->init(&cc->exec, &cc->exec_state));
  INFO(NCCL_INIT, "comm %p rank %d nranks %d: %d channels over %d host(s), executor %s",
       (void*)comm, cc->rank, cc->nranks, cc->nchannels, cc->nhosts, cc->executor->name);
  CHECK(comm_channels_log(cc));
  cc->windows_ok = !cc->simulated && res_peers_mappable(cc); /* comm_windows_possible */
  cc->stage_virtual = cc->simulated && cc->gpu && res_peers_mappable(cc);
  CHECK(comm_graph_dump(cc, comm->peers));
  CHECK(comm_stage_init(comm));
  cc->tuning.stage_half = cc->exec.stage_slot >= 0 ? cc->exec.stage_half : 0; /* the planner's */
  if (cc->nranks > 1 && param_int(PARAM_RUNTIME_CONNECT) == 0) CHECK(comm_connect_all(cc));
  return ncclSuccess;
}

ncclResult_t comm_res_init(ncclComm_t comm) {
  comm_res_t* cc;
  CHECK(MEM_CALLOC(&cc, 1));
  comm->resources = cc; /* from here on comm_res_free releases whatever was set up */
  cc->rank = comm->rank;
  cc->nranks = comm->nranks;
  cc->simulated = comm->platform != NULL;
  cc->dev = comm->cuda_dev;
  CHECK(res_executor_choose(cc, comm));
  /* A GPU communicator's CUDA work (executor, transports) happens on its device, whichever
   * thread runs this (the caller's, or an init job's). */
  exec_scope_t scope;
  CHECK(comm_res_enter(comm, true, &scope));
  ncclResult_t res = res_init_body(cc, comm);
  comm_res_leave(comm, &scope);
  return res;
}

ncclResult_t comm_res_wait(ncclComm_t comm) {
  comm_res_t* cc = comm->resources;
  /* The CUDA executor's launches complete on the GPU: wait for them (kernels stop early once the
   * abort flag is set). */
  if (cc == NULL || cc->exec_state == NULL || cc->executor->wait == NULL) return ncclSuccess;
  exec_scope_t scope;
  CHECK(comm_res_enter(comm, false, &scope));
  ncclResult_t res = cc->executor->wait(cc->exec_state);
  comm_res_leave(comm, &scope);
  return res;
}

ncclResult_t comm_drain(ncclComm_t comm) {
  ncclResult_t res = core_upper()->comm_finalize(comm);
  if (RESULT_IS_ERROR(res)) return res;
  return comm_res_wait(comm);
}

ncclResult_t comm_res_free(ncclComm_t comm) {
  comm_res_t* cc = comm->resources;
  if (cc == NULL) return ncclSuccess;
  ncclResult_t res = ncclSuccess;
  exec_scope_t scope;
  bool entered = comm_res_enter(comm, false, &scope) == ncclSuccess;
  if (cc->exec_state != NULL) {
    ncclResult_t r = cc->executor->fini(cc->exec_state);
    if (r != ncclSuccess && cc->fini_keeps) {
      /* A host launch did not leave (it WARNed): what it uses stays allocated. */
      if (entered) comm_res_leave(comm, &scope);
      comm->resources = NULL;
      return r;
    }
    if (res == ncclSuccess) res = r;
  }
  comm_windows_free(comm, cc); /* the executor is done reading them */
  rma_net_free(cc->rma_net);   /* after the windows' registrations, before the network context */
  cc->rma_net = NULL;
  if (cc->tctx_ready) {
    ncclResult_t r = transport_ctx_free(&cc->tctx);
    if (res == ncclSuccess) res = r;
  }
  topo_system_free(cc->topo); /* after the transports, which looked paths up in it */
  cc->topo = NULL;
  if (entered) comm_res_leave(comm, &scope);
  free(cc->channels);
  free(cc->fifo_tables);
  free(cc->ring_ranks);
  free(cc->ring_nics);
  free(cc->rank_nics);
  free(cc->host_of);
  free(cc->suspended_reqs);
  comm_rma_free(cc->rma);
  free(cc);
  comm->resources = NULL;
  return res;
}

ncclResult_t comm_res_connect(ncclComm_t comm, const conn_request_t* reqs, int nreqs) {
  return res_connect(comm->resources, reqs, nreqs);
}

double comm_res_estimate_us(ncclComm_t comm, const plan_t* plan) {
  const comm_res_t* cc = comm->resources;
  const sim_estimate_in_t in = {.exec = &cc->exec,
                                .plan = plan,
                                .topo = cc->topo,
                                .peers = comm->peers,
                                .host_of = cc->host_of,
                                .nhosts = cc->nhosts,
                                .rank_nics = cc->ring_nics != NULL ? cc->rank_nics : NULL,
                                .gpu = cc->gpu};
  return cc->executor->estimate_us(&in);
}

static ncclResult_t res_connect(comm_res_t* cc, const conn_request_t* reqs, int nreqs) {
  if (nreqs == 0) return ncclSuccess;
  /* Connections appear on first use, which may be inside the user's graph capture: allocating
   * and registering memory is legal then only in relaxed mode. */
  exec_scope_t scope;
  CHECK(cc->executor->enter(cc->dev, true, &scope));
  ncclResult_t res = transport_connect(&cc->tctx, reqs, nreqs);
  cc->executor->leave(&scope);
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

/* ---- The progress watch's view ------------------------------------------------------------- */
int comm_res_waits(ncclComm_t comm, prog_wait_t* out, int max) {
  comm_res_t* cc = comm->resources;
  exec_wait_t w[PROG_MAX_WAITS];
  if (cc == NULL || cc->exec_state == NULL || cc->executor->waits == NULL) return 0;
  if (max > PROG_MAX_WAITS) max = PROG_MAX_WAITS;
  int n = cc->executor->waits(cc->exec_state, w, max);
  uint64_t now = clock_ns();
  for (int i = 0; i < n; i++) {
    const char* tr = NULL;
    if (w[i].channel < cc->nchannels && w[i].peer >= 0 && w[i].peer < cc->nranks)
      tr = comm_conn_transport(comm, w[i].channel, w[i].peer, w[i].is_send);
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

/* The ring connections' positions (executor_ops_t.positions: the host executor's). */
int comm_res_conns(ncclComm_t comm, prog_conn_t* out, int max) {
  comm_res_t* cc = comm->resources;
  exec_conn_t p[PROG_MAX_CONNS];
  if (cc == NULL || cc->exec_state == NULL) return 0;
  if (max > PROG_MAX_CONNS) max = PROG_MAX_CONNS;
  int n = cc->executor->positions(cc->exec_state, p, max);
  for (int i = 0; i < n; i++)
    out[i] = (prog_conn_t){
        .channel = p[i].channel, .peer = p[i].peer, .is_send = p[i].is_send, .step = p[i].step};
  return n;
}

bool comm_res_launch_time(ncclComm_t comm, uint64_t launch, uint64_t* start_ns, uint64_t* end_ns) {
  comm_res_t* cc = comm->resources;
  if (cc == NULL || cc->exec_state == NULL || cc->executor->launch_time == NULL) return false;
  return cc->executor->launch_time(cc->exec_state, launch, start_ns, end_ns);
}

/* ---- Queries for tests ------------------------------------------------------------------- */
const char* comm_conn_transport(ncclComm_t comm, int channel, int peer, int is_send) {
  if (comm == NULL || comm->resources == NULL || channel < 0 ||
      channel >= comm->resources->nchannels)
    return NULL;
  conn_t* conn = transport_conn(&comm->resources->tctx, channel, peer, is_send);
  return conn && conn->transport ? conn->transport->name : NULL;
}
