/* The virtual world: a cluster's ranks as a platform (base.h) that Baton's real init creates
 * communicators on, and the executor they get, which keeps each rank's launched plan until
 * sim_world_time times them all together.
 *
 * Rank r runs on node r / g and that node's GPU r % g (g GPUs a node, in bus-id order), as a
 * process of its own; a node's ranks share a host name, a host hash and /dev/shm. */
#include <stdlib.h>

#include "device/sim/sim_int.h"

typedef struct sim_rank {
  const exec_comm_t* exec; /* while its communicator lives */
  plan_t plan;             /* its launch not yet timed */
  work_t* works;
  size_t works_cap;
  local_op_t* local; /* its plan.local */
  int local_cap;
  bool launched;
  uint64_t launches;
} sim_rank_t;

struct sim_world {
  char* node_xml;
  char* node_name;
  sim_net_t* net;
  int nranks;
  uint64_t id;
  platform_t platform;
  sim_memo_t memo;
  pthread_mutex_t lock;
  sim_rank_t* ranks;
  sim_result_t last; /* its flows and spans are owned here */
};

const char* const sim_transport_names[SIM_TR_COUNT] = {"P2P", "SHM", "NET"};

/* ---- The platform ---------------------------------------------------------------------------- */
static int world_node(const sim_world_t* w, int rank) {
  return rank / w->net->ranks_per_node;
}

static void pf_device(void* ctx, int rank, int* dev, int64_t* bus_id) {
  const sim_world_t* w = ctx;
  if (w->net->host_only || rank < 0 || rank >= w->nranks) {
    *dev = -1;
    *bus_id = -1;
    return;
  }
  int g = rank % w->net->ngpus;
  *dev = g;
  *bus_id = w->net->node->gpus[g].bus_id;
}

static void pf_identity(void* ctx, int rank, platform_identity_t* out) {
  const sim_world_t* w = ctx;
  int node = world_node(w, rank);
  uint64_t key[2] = {w->id, (uint64_t)node};
  memset(out, 0, sizeof(*out));
  out->host_hash = hash_bytes(key, sizeof(key));
  /* A node's ranks are one process, as in nccl-tests -g N (the runs baton-sim is checked
   * against): their P2P connections take direct writes. */
  key[1] = ((uint64_t)1 << 40) | (uint64_t)node;
  out->pid_hash = hash_bytes(key, sizeof(key));
  out->shm_dev = w->id;
  out->pid = 0;
  snprintf(out->host, sizeof(out->host), "sim-node%04d", node);
}

static const char* pf_host_xml(void* ctx, int rank) {
  const sim_world_t* w = ctx;
  (void)rank;
  return w->node_xml;
}

/* ---- The executor ---------------------------------------------------------------------------- */
typedef struct sim_exec_state {
  sim_world_t* w;
  int rank;
  uint64_t launches;
} sim_exec_state_t;

static ncclResult_t sim_exec_init(const exec_comm_t* comm, void** state_out) {
  sim_world_t* w = comm->platform;
  if (w == NULL || comm->nranks != w->nranks || comm->rank < 0 || comm->rank >= w->nranks) {
    WARN("sim: rank %d of %d is not a rank of the simulated world (%d ranks)", comm->rank,
         comm->nranks, w ? w->nranks : 0);
    return ncclInvalidUsage;
  }
  sim_exec_state_t* s = NULL;
  CHECK(MEM_CALLOC(&s, 1));
  pthread_mutex_lock(&w->lock);
  bool taken = w->ranks[comm->rank].exec != NULL;
  if (!taken) w->ranks[comm->rank].exec = comm;
  pthread_mutex_unlock(&w->lock);
  if (taken) {
    WARN("sim: rank %d of the simulated world has a communicator already", comm->rank);
    free(s);
    return ncclInvalidUsage;
  }
  s->w = w;
  s->rank = comm->rank;
  *state_out = s;
  return ncclSuccess;
}

static ncclResult_t sim_exec_launch(void* state, const plan_t* plan, exec_streams_t* streams) {
  sim_exec_state_t* s = state;
  sim_rank_t* r = &s->w->ranks[s->rank];
  if (streams != NULL) streams->captured = false; /* virtual GPUs: no stream, no capture */
  if (r->launched) {
    WARN("sim: rank %d launched twice before the world was timed (sim_world_time after each group)",
         s->rank);
    return ncclInvalidUsage;
  }
  size_t n = 0;
  for (int c = 0; c < plan->nchannels; c++) n += (size_t)plan->nwork[c];
  if (n > r->works_cap) {
    work_t* p = realloc(r->works, n * sizeof(*p));
    if (p == NULL) {
      WARN("sim: out of memory keeping rank %d's %zu work items", s->rank, n);
      return ncclSystemError;
    }
    r->works = p;
    r->works_cap = n;
  }
  if (plan->nlocal > r->local_cap) {
    local_op_t* p = realloc(r->local, (size_t)plan->nlocal * sizeof(*p));
    if (p == NULL) {
      WARN("sim: out of memory keeping rank %d's %d local operations", s->rank, plan->nlocal);
      return ncclSystemError;
    }
    r->local = p;
    r->local_cap = plan->nlocal;
  }
  memset(&r->plan, 0, sizeof(r->plan));
  if (plan->nlocal > 0) memcpy(r->local, plan->local, (size_t)plan->nlocal * sizeof(*r->local));
  r->plan.nlocal = plan->nlocal;
  r->plan.local = r->local;
  r->plan.nchannels = plan->nchannels;
  size_t k = 0;
  for (int c = 0; c < plan->nchannels; c++) {
    r->plan.works[c] = r->works + k;
    r->plan.nwork[c] = plan->nwork[c];
    memcpy(r->works + k, plan->works[c], (size_t)plan->nwork[c] * sizeof(work_t));
    k += (size_t)plan->nwork[c];
  }
  r->launched = true;
  s->launches++;
  return ncclSuccess;
}

static ncclResult_t sim_exec_fini(void* state) {
  sim_exec_state_t* s = state;
  if (s == NULL) return ncclSuccess;
  pthread_mutex_lock(&s->w->lock);
  s->w->ranks[s->rank].exec = NULL;
  s->w->ranks[s->rank].launched = false;
  pthread_mutex_unlock(&s->w->lock);
  free(s);
  return ncclSuccess;
}

static ncclResult_t sim_exec_wait(void* state) {
  (void)state; /* nothing runs: a launch is done once it is recorded */
  return ncclSuccess;
}

static void sim_exec_progress(void* state, exec_progress_t* out) {
  const sim_exec_state_t* s = state;
  uint64_t n = __atomic_load_n(&s->launches, __ATOMIC_RELAXED);
  *out = (exec_progress_t){.launched = n, .started = n, .done = n};
}

static int sim_exec_waits(void* state, exec_wait_t* out, int max) {
  (void)state;
  (void)out;
  (void)max;
  return 0;
}

static int sim_exec_positions(void* state, exec_conn_t* out, int max) {
  (void)state, (void)out, (void)max;
  return 0; /* nothing moves through a virtual rank's FIFOs */
}

static bool sim_exec_launch_time(void* state, uint64_t launch, uint64_t* start_ns,
                                 uint64_t* end_ns) {
  (void)state;
  (void)launch;
  (void)start_ns;
  (void)end_ns;
  return false;
}

/* Virtual GPUs: nothing to make current. */
static ncclResult_t sim_exec_enter(int dev, bool relax, exec_scope_t* scope) {
  (void)relax;
  *scope = (exec_scope_t){.dev = dev, .saved = -1};
  return ncclSuccess;
}

static void sim_exec_leave(const exec_scope_t* scope) {
  (void)scope;
}

const executor_ops_t executor_sim_ops = {
    .name = "sim",
    .queues = true,
    .enter = sim_exec_enter,
    .leave = sim_exec_leave,
    .init = sim_exec_init,
    .launch = sim_exec_launch,
    .fini = sim_exec_fini,
    .wait = sim_exec_wait,
    .progress = sim_exec_progress,
    .waits = sim_exec_waits,
    .positions = sim_exec_positions,
    .launch_time = sim_exec_launch_time,
    .estimate_us = sim_estimate_us,
};

/* ---- The world ------------------------------------------------------------------------------- */
ncclResult_t sim_world_create(const sim_cluster_desc_t* desc, sim_world_t** out) {
  ncclResult_t res = ncclSuccess;
  sim_world_t* w = NULL;
  CHECK(MEM_CALLOC(&w, 1));
  pthread_mutex_init(&w->lock, NULL);
  sim_memo_init(&w->memo);
  w->node_xml = strdup(desc->node_xml);
  w->node_name = strdup(desc->node_name ? desc->node_name : "node");
  if (w->node_xml == NULL || w->node_name == NULL) {
    res = ncclSystemError;
    goto fail;
  }
  CHECK_GOTO(sim_net_build(desc, &w->net), res, fail);
  if (!w->net->host_only && w->net->ngpus < 1) {
    WARN("sim: %s describes no GPU", w->node_name);
    res = ncclInvalidArgument;
    goto fail;
  }
  w->nranks = w->net->nnodes * w->net->ranks_per_node;
  CHECK_GOTO(MEM_CALLOC(&w->ranks, (size_t)w->nranks), res, fail);
  uint64_t seed[2] = {(uint64_t)(uintptr_t)w, clock_ns()};
  w->id = hash_bytes(seed, sizeof(seed)) | 1;
  w->platform = (platform_t){.name = w->node_name,
                             .ctx = w,
                             .device = pf_device,
                             .identity = pf_identity,
                             .host_xml = pf_host_xml,
                             .executor = &executor_sim_ops};
  *out = w;
  return ncclSuccess;
fail:
  sim_world_free(w);
  return res;
}

void sim_world_free(sim_world_t* w) {
  if (w == NULL) return;
  for (int r = 0; r < w->nranks && w->ranks != NULL; r++) {
    free(w->ranks[r].works);
    free(w->ranks[r].local);
  }
  free(w->ranks);
  free(w->last.flows);
  free(w->last.spans);
  sim_memo_free(&w->memo);
  sim_net_free(w->net);
  free(w->node_xml);
  free(w->node_name);
  pthread_mutex_destroy(&w->lock);
  free(w);
}

int sim_world_nranks(const sim_world_t* w) {
  return w->nranks;
}

const platform_t* sim_world_platform(sim_world_t* w) {
  return &w->platform;
}

void sim_world_memo_stats(const sim_world_t* w, uint64_t* hits, uint64_t* misses) {
  *hits = w->memo.hits;
  *misses = w->memo.misses;
}

/* How a connection was made, from the FIFOs of its two ends. */
static void world_conn(void* arg, int channel, int src, int dst, int* tr, int* src_nic,
                       int* dst_nic, int* relay) {
  const sim_world_t* w = arg;
  const exec_comm_t* a = w->ranks[src].exec;
  const exec_comm_t* b = w->ranks[dst].exec;
  const conn_fifo_t* fs = a != NULL ? a->channels[channel].send[dst] : NULL;
  const conn_fifo_t* fr = b != NULL ? b->channels[channel].recv[src] : NULL;
  const conn_fifo_t* f = fs != NULL ? fs : fr;
  if (f == NULL) /* not connected (cannot happen for a launched plan): by place */
    *tr = world_node(w, src) != world_node(w, dst) ? SIM_TR_NET
          : w->net->host_only                      ? SIM_TR_SHM
                                                   : SIM_TR_P2P;
  else
    *tr = (f->flags & CONN_FLAG_NET)       ? SIM_TR_NET
          : (f->flags & CONN_FLAG_HOSTMEM) ? SIM_TR_SHM
                                           : SIM_TR_P2P;
  *src_nic = fs != NULL ? fs->net_dev : -1;
  *dst_nic = fr != NULL ? fr->net_dev : -1;
  /* PXN: the sender's relay to its NIC, by the rule the NET transport follows (topo_nic_relay) */
  const topo_system_t* t = w->net->node;
  int g = w->net->host_only ? -1 : src % w->net->ngpus;
  *relay = *tr == SIM_TR_NET && g >= 0 && *src_nic >= 0 && topo_pxn_enabled()
               ? topo_nic_relay(t, t->gpus[g].bus_id, *src_nic)
               : -1;
}

ncclResult_t sim_world_time(sim_world_t* w, const sim_time_opts_t* opts, sim_result_t* out) {
  ncclResult_t res = ncclSuccess;
  sim_rank_view_t* view = NULL;
  int nlaunched = 0;
  int per = opts->per_process > 1 ? opts->per_process : 1;
  CHECK(MEM_CALLOC(&view, (size_t)w->nranks));
  pthread_mutex_lock(&w->lock);
  for (int r = 0; r < w->nranks; r++) {
    sim_rank_t* x = &w->ranks[r];
    view[r] = (sim_rank_view_t){.exec = x->exec,
                                .plan = x->launched ? &x->plan : NULL,
                                .node = world_node(w, r),
                                .gpu = w->net->host_only ? -1 : r % w->net->ngpus,
                                .local = per > 1 ? (r % w->net->ranks_per_node) % per : 0};
    if (x->launched && x->exec == NULL) view[r].plan = NULL;
    nlaunched += view[r].plan != NULL;
    if (x->exec == NULL && !w->net->host_only) view[r].gpu = r % w->net->ngpus;
  }
  if (nlaunched == 0) {
    pthread_mutex_unlock(&w->lock);
    free(view);
    WARN("sim: nothing was launched since the world was last timed");
    return ncclInvalidUsage;
  }
  sim_view_t v = {.nranks = w->nranks,
                  .ranks = view,
                  .net = w->net,
                  .exec = w->net->host_only ? SIM_EXEC_HOST : SIM_EXEC_CUDA,
                  .conn = world_conn,
                  .conn_arg = w,
                  .memo = &w->memo,
                  .trace_ranks = opts->trace_ranks,
                  .iters = opts->iters,
                  .graph = opts->graph,
                  .per_process = per};
  free(w->last.flows);
  free(w->last.spans);
  memset(&w->last, 0, sizeof(w->last));
  res = sim_engine_run(&v, &w->last);
  for (int r = 0; r < w->nranks; r++) w->ranks[r].launched = false;
  pthread_mutex_unlock(&w->lock);
  free(view);
  if (res != ncclSuccess) return res;
  *out = w->last;
  return ncclSuccess;
}
