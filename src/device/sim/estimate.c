/* One communicator's estimate for ncclGroupSimulateEnd: the engine times a world in which every
 * rank runs this rank's plan from its own place, or, for point-to-point patterns that do not turn
 * (a gather), in which this rank's peers run the other ends of its messages (sim.h). */
#include <stdlib.h>

#include "device/sim/sim_int.h"

typedef struct est_world {
  const sim_net_t* net;
  const int* node_of;
} est_world_t;

/* Nothing is connected in this world: a connection's transport is the two ranks' places. */
static void est_conn(void* arg, int channel, int src, int dst, int* tr, int* src_nic, int* dst_nic,
                     int* relay) {
  const est_world_t* w = arg;
  int nnics = w->net->node->nnics;
  *src_nic = *dst_nic = *relay = -1;
  if (w->node_of[src] != w->node_of[dst]) {
    *tr = SIM_TR_NET;
    *src_nic = nnics > 0 ? channel % nnics : 0;
    *dst_nic = *src_nic;
  } else {
    *tr = w->net->host_only ? SIM_TR_SHM : SIM_TR_P2P;
  }
}

static bool est_p2p(const work_t* w) {
  return w->func == FUNC_SEND || w->func == FUNC_RECV;
}

/* Whether every rank can run this rank's point-to-point items turned by its own place: on each
 * channel, each send to rank me + d is matched by a receive from me - d of the same count (a
 * ring exchange, an alltoall). A gather, a scatter or a lone send is not. */
static bool est_symmetric(const plan_t* p, int me, int n) {
  for (int c = 0; c < p->nchannels; c++) {
    int m = p->nwork[c];
    const work_t* w = p->works[c];
    for (int i = 0; i < m; i++) {
      if (!est_p2p(&w[i]) || w[i].root == me) continue;
      int d = (w[i].root - me + n) % n;
      int want_func = w[i].func == FUNC_SEND ? FUNC_RECV : FUNC_SEND;
      int want_peer = (me - d + n) % n;
      int found = 0;
      for (int j = 0; j < m; j++)
        found +=
            w[j].func == want_func && w[j].root == want_peer && w[j].chan_count == w[i].chan_count;
      int same = 0; /* as many as this one's twins */
      for (int j = 0; j < m; j++)
        same +=
            w[j].func == w[i].func && w[j].root == w[i].root && w[j].chan_count == w[i].chan_count;
      if (found != same) return false;
    }
  }
  return true;
}

/* The index of rank r's GPU in the node topology: its bus id there, else its place among its
 * host's ranks. */
static int est_gpu(const sim_estimate_in_t* in, const sim_net_t* net, int r, int local) {
  if (net->host_only) return -1;
  int g = in->peers != NULL ? topo_system_gpu(net->node, in->peers[r].bus_id) : -1;
  return g >= 0 ? g : local % net->ngpus;
}

/* Every rank's trees as the communicator made them over its NICs (core's comm_trees_init with
 * topo_tree_rails), in place of the double binary trees over ranks. */
static ncclResult_t est_rail_trees(const sim_estimate_in_t* in, int nch, exec_comm_t* execs) {
  int n = in->exec->nranks;
  int *scratch = NULL, *up = NULL, *down = NULL;
  ncclResult_t res = MEM_CALLOC(&scratch, 2 * (size_t)n);
  if (res == ncclSuccess) res = MEM_CALLOC(&up, (size_t)n);
  if (res == ncclSuccess) res = MEM_CALLOC(&down, (size_t)n * TOPO_TREE_MAX_CHILDREN);
  for (int c = 0; c < nch && res == ncclSuccess; c++) {
    if (!topo_tree_rails(n, in->host_of, in->rank_nics, c, scratch, up, down)) break;
    for (int r = 0; r < n; r++) {
      dev_channel_t* ch = &execs[r].channels[c];
      ch->tree_up = up[r];
      for (int k = 0; k < TREE_MAX_CHILDREN; k++)
        ch->tree_down[k] = k < TOPO_TREE_MAX_CHILDREN ? down[r * TOPO_TREE_MAX_CHILDREN + k] : -1;
    }
  }
  free(down);
  free(up);
  free(scratch);
  return res;
}

double sim_estimate_us(const sim_estimate_in_t* in) {
  const exec_comm_t* x = in->exec;
  const plan_t* p = in->plan;
  int n = x->nranks, me = x->rank;
  double us = -1;
  char* xml = NULL;
  sim_net_t* net = NULL;
  exec_comm_t* execs = NULL;
  dev_channel_t* chans = NULL;
  conn_fifo_t** none = NULL;
  plan_t* plans = NULL;
  work_t* works = NULL;
  sim_rank_view_t* view = NULL;
  int* count = NULL;
  sim_memo_t memo;
  sim_memo_init(&memo);
  sim_result_t out = {0};
  size_t nwork = 0;
  for (int c = 0; c < p->nchannels; c++) nwork += (size_t)p->nwork[c];
  if (nwork == 0 && p->nlocal == 0) return 0;
  if (in->host_of == NULL || in->nhosts < 1) return -1;

  /* The nodes: this rank's host, nhosts times. */
  bool host_only = !in->gpu || in->topo == NULL || in->topo->ngpus == 0;
  int per_node = 0;
  if (MEM_CALLOC(&count, (size_t)(in->nhosts > 0 ? in->nhosts : 1)) != ncclSuccess) goto out;
  for (int r = 0; r < n; r++) {
    int h = in->host_of[r];
    if (h < 0 || h >= in->nhosts) goto out;
    if (++count[h] > per_node) per_node = count[h];
  }
  if (in->topo != NULL) {
    if (topo_xml_format(in->topo, &xml) != ncclSuccess) goto out;
  } else if (sim_topo_builtin("pcie4x4", 0, &xml) != ncclSuccess) { /* only its NIC count used */
    goto out;
  }
  sim_cluster_desc_t desc = {.node_xml = xml,
                             .node_name = "this communicator's host",
                             .nnodes = in->nhosts,
                             .host_only = host_only,
                             .ranks_per_node = per_node,
                             .fabric = {.net_lat_us = -1}};
  if (sim_net_build(&desc, &net) != ncclSuccess) goto out;

  /* Every rank's channels and plan, from this rank's. */
  if (MEM_CALLOC(&execs, (size_t)n) != ncclSuccess ||
      MEM_CALLOC(&chans, (size_t)n * (size_t)x->nchannels) != ncclSuccess ||
      MEM_CALLOC(&none, (size_t)n) != ncclSuccess || MEM_CALLOC(&plans, (size_t)n) != ncclSuccess ||
      MEM_CALLOC(&works, (size_t)n * (nwork > 0 ? nwork : 1)) != ncclSuccess ||
      MEM_CALLOC(&view, (size_t)n) != ncclSuccess)
    goto out;
  memset(count, 0, (size_t)in->nhosts * sizeof(*count));
  bool symmetric = est_symmetric(p, me, n);
  for (int r = 0; r < n; r++) {
    execs[r] = (exec_comm_t){.rank = r,
                             .nranks = n,
                             .nchannels = x->nchannels,
                             .channels = chans + (size_t)r * (size_t)x->nchannels};
    for (int c = 0; c < x->nchannels; c++) {
      const dev_channel_t* mine = &x->channels[c];
      dev_channel_t* ch = &execs[r].channels[c];
      *ch = (dev_channel_t){.id = c, .ring_ranks = mine->ring_ranks, .send = none, .recv = none};
      for (int i = 0; i < n; i++)
        if (mine->ring_ranks[i] == r) ch->ring_index = i;
      ch->ring_prev = mine->ring_ranks[(ch->ring_index + n - 1) % n];
      ch->ring_next = mine->ring_ranks[(ch->ring_index + 1) % n];
      int down[TOPO_TREE_MAX_CHILDREN];
      topo_dbtree(n, r, c % 2, &ch->tree_up, down);
      for (int k = 0; k < TREE_MAX_CHILDREN; k++)
        ch->tree_down[k] = k < TOPO_TREE_MAX_CHILDREN ? down[k] : -1;
    }
    /* Collectives: the same items everywhere. Point-to-point: turned by r's place when the
     * pattern allows it, else only this rank's peers take part, each with the other end of its
     * messages (a gather's root and its senders). */
    work_t* wr = works + (size_t)r * nwork;
    plans[r].nchannels = p->nchannels;
    /* Copies to self: each rank has its like when the pattern turns (an alltoall), else only
     * this rank copies (a gather's root). */
    plans[r].nlocal = symmetric || r == me ? p->nlocal : 0;
    plans[r].local = p->local;
    for (int c = 0; c < p->nchannels; c++) {
      plans[r].works[c] = wr;
      for (int i = 0; i < p->nwork[c]; i++) {
        const work_t* w = &p->works[c][i];
        if (!est_p2p(w) || r == me) {
          *wr = *w;
        } else if (symmetric) {
          *wr = *w;
          wr->root = (w->root - me + r + n) % n;
        } else if (w->root == r) {
          *wr = *w;
          wr->func = w->func == FUNC_SEND ? FUNC_RECV : FUNC_SEND;
          wr->root = me;
        } else {
          continue;
        }
        wr++;
      }
      plans[r].nwork[c] = (int)(wr - plans[r].works[c]);
    }
    int h = in->host_of[r];
    view[r] = (sim_rank_view_t){
        .exec = &execs[r], .plan = &plans[r], .node = h, .gpu = est_gpu(in, net, r, count[h]++)};
  }
  if (in->rank_nics != NULL && est_rail_trees(in, x->nchannels, execs) != ncclSuccess) goto out;
  est_world_t w = {.net = net, .node_of = in->host_of};
  sim_view_t v = {.nranks = n,
                  .ranks = view,
                  .net = net,
                  .exec = host_only ? SIM_EXEC_HOST : SIM_EXEC_CUDA,
                  .conn = est_conn,
                  .conn_arg = &w,
                  .memo = &memo,
                  .iters = 1,
                  .per_process = 1};
  if (sim_engine_run(&v, &out) == ncclSuccess) us = out.time_us;
out:
  if (us < 0) INFO(NCCL_TUNING, "sim: rank %d's plan could not be timed by the model", me);
  free(out.flows);
  free(out.spans);
  sim_memo_free(&memo);
  free(view);
  free(works);
  free(plans);
  free(none);
  free(chans);
  free(execs);
  sim_net_free(net);
  free(xml);
  free(count);
  return us;
}
