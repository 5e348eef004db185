/* Baton's simulator (src/device/sim): a virtual cluster whose ranks run Baton's real init,
 * topology, channel setup, transport choice and planner (core and collectives, through a
 * platform_t of base.h), and an executor that times each plan's steps against a flow-level model
 * of the machines instead of moving data. baton-sim (tools/sim) drives it; ncclGroupSimulateEnd
 * uses the same model for one communicator's plan.
 *
 *   fairshare.c  max-min fair sharing of links among flows (pure), and a memo of solved flow sets
 *   topos.c      built-in node topologies, written as stock-format XML for the real reader
 *   cluster.c    the machines as links: NVLink ports or pairs, PCIe, NICs, an optional fat-tree;
 *                each connection's path; the calibrated costs (calib.h)
 *   engine.c     every rank's plan as steps (vocab/vocab.h, the executors' own step math),
 *                timed with the fair shares of the plan's flows
 *   world.c      the virtual ranks: the platform they are created on, executor_sim_ops, results
 *
 * Units: bytes, microseconds, and bandwidths in bytes per microsecond (1 GB/s = 1000 B/us). */
#ifndef BATON_DEVICE_SIM_H
#define BATON_DEVICE_SIM_H

#include "base/base.h"
#include "device/device.h"
#include "topo/topo.h"

/* ---- Fair sharing (fairshare.c) ---------------------------------------------------------------
 * Flows over links: flow f crosses links[off[f] .. off[f+1]); each link has a capacity and each
 * flow an optional cap of its own (flow_cap NULL, or <= 0 for none). sim_fair_share writes the
 * max-min fair rate of every flow (rate[nflows]). */
typedef struct sim_flows {
  int nlinks;
  const double* cap;
  int nflows;
  const int* off; /* nflows + 1 */
  const int* links;
  const double* flow_cap;
} sim_flows_t;
ncclResult_t sim_fair_share(const sim_flows_t* p, double* rate);
/* A plan's steps repeat the same flow set many times, and a sweep repeats it per size: solved
 * sets are kept by their hash (SIM_MEMO_ENTRIES, least recently used goes). */
#define SIM_MEMO_ENTRIES 16
typedef struct sim_memo_entry {
  uint64_t hash;
  int nflows;
  double* rate;
  uint64_t used;
} sim_memo_entry_t;
typedef struct sim_memo {
  sim_memo_entry_t e[SIM_MEMO_ENTRIES];
  uint64_t clock, hits, misses;
} sim_memo_t;
uint64_t sim_flows_hash(const sim_flows_t* p);
void sim_memo_init(sim_memo_t* m);
void sim_memo_free(sim_memo_t* m);
ncclResult_t sim_fair_share_memo(sim_memo_t* m, const sim_flows_t* p, double* rate, bool* hit);

/* ---- Built-in node topologies (topos.c) ------------------------------------------------------
 * Stock-format XML text of one node (malloc'd, the caller frees), or ncclInvalidArgument with a
 * WARN listing the names. nics: NICs per node (0: the topology's own count). */
ncclResult_t sim_topo_builtin(const char* name, int nics, char** xml_out);
/* The names, NULL-terminated, and a line about each. */
extern const char* const sim_topo_names[];
const char* sim_topo_about(const char* name);

/* ---- The cluster and its costs (cluster.c) --------------------------------------------------- */
typedef struct sim_fabric {
  double nic_gbs;    /* > 0: every NIC's bandwidth (GB/s, one direction); 0: its speed attribute */
  double net_lat_us; /* one network hop (NIC to NIC), < 0: the default */
  int leaf_nodes;    /* fat-tree: nodes per leaf switch; 0: a non-blocking network */
  double oversub;    /* leaf uplinks carry the leaf's NIC bandwidth / oversub (>= 1) */
} sim_fabric_t;

typedef struct sim_cluster_desc {
  const char* node_xml;  /* one node, stock's topology XML (every node is alike) */
  const char* node_name; /* for messages */
  int nnodes;
  bool host_only;     /* ranks without GPUs: the host executor's planning (one rank per GPU slot) */
  int ranks_per_node; /* host_only: ranks per node (> 0) */
  sim_fabric_t fabric;
} sim_cluster_desc_t;

/* ---- The virtual world (world.c) ------------------------------------------------------------- */
typedef struct sim_world sim_world_t;
/* Parses the node topology (topo_xml_parse, the reader real runs use), lays out the ranks (node
 * n's GPU g is rank n * gpus + g) and builds the network model. */
ncclResult_t sim_world_create(const sim_cluster_desc_t* desc, sim_world_t** out);
void sim_world_free(sim_world_t* w);
int sim_world_nranks(const sim_world_t* w);
/* The platform to create the world's communicators on (platform_set_thread). */
const platform_t* sim_world_platform(sim_world_t* w);
extern const executor_ops_t executor_sim_ops;

/* One point-to-point flow of a timed launch: every step from src to dst (between nodes: through
 * one pair of NICs), summed over channels. */
typedef struct sim_flow_out {
  int src, dst;
  uint64_t bytes;       /* on the wire (LL and LL128 lines included) */
  int transport;        /* SIM_TR_* */
  int src_nic, dst_nic; /* NET: the NICs (index in the node topology), else -1 */
  int relay;            /* NET through a peer GPU's NIC (PXN): the rank of that GPU, else -1 */
  double gbs;           /* its fair-share rate on one channel (the least over channels) */
} sim_flow_out_t;
enum { SIM_TR_P2P = 0, SIM_TR_SHM, SIM_TR_NET, SIM_TR_COUNT };
extern const char* const sim_transport_names[SIM_TR_COUNT];

/* One span of the simulated timeline (a work item of one rank's channel). */
typedef struct sim_span {
  int rank, channel, half; /* half: 0 whole block or first half, 1 second half */
  uint8_t func, algo, proto;
  double t0, t1;  /* us from the launch */
  uint64_t bytes; /* the item's slice */
} sim_span_t;

typedef struct sim_result {
  double time_us;   /* from the first host call to the last step's end */
  double loop_us;   /* per launch when launched back to back (iters > 1), else time_us */
  double launch_us; /* a launch's latency in it */
  /* What rank 0's plan holds (its first work item). */
  int func, algo, proto;
  int nchannels;      /* channels with work */
  size_t chunk_bytes; /* bytes per step of channel 0's first item */
  uint64_t steps;     /* steps timed (representative channels only) */
  int nclasses;       /* channel classes timed (channels alike on every rank share one) */
  bool memo_hit;      /* the flow set's fair shares came from the memo */
  /* The time was raised to the NICs' line-rate bound: some NIC's bytes of an iteration at its
   * rate take longer than the steps' schedule (engine.c, nic_bound) */
  bool nic_bound;
  int nflows;
  sim_flow_out_t* flows; /* nflows, owned by the world until the next sim_world_time */
  int nspans;
  sim_span_t* spans; /* ranks < trace_ranks only; owned likewise */
} sim_result_t;
/* How a launch is timed. */
typedef struct sim_time_opts {
  int trace_ranks; /* keep spans for the first trace_ranks ranks (0: none) */
  int iters;       /* also time it iters times back to back, as a benchmark loop (1: once) */
  int per_process; /* ranks of a node one process launches for, one after another (1: a process
                      per rank; nccl-tests -g N: N) */
  bool graph;      /* the iters launches are a CUDA graph's replay (nccl-tests -G): each starts
                      when its GPU is done with the last, the host's issue out of the loop */
} sim_time_opts_t;
/* Times what every rank has launched since the last call (each rank launches at most one plan:
 * call it after each ncclGroupEnd) and forgets those launches. ncclInvalidUsage when no rank
 * launched. */
ncclResult_t sim_world_time(sim_world_t* w, const sim_time_opts_t* opts, sim_result_t* out);
/* Fair-share solutions computed and reused so far. */
void sim_world_memo_stats(const sim_world_t* w, uint64_t* hits, uint64_t* misses);

/* ---- One communicator's estimate (ncclGroupSimulateEnd, estimate.c) ---------------------------
 * The engine's time of one rank's plan, with every other rank running the same plan from its own
 * place: its channels' rings and trees by the same pure functions (the rings are in
 * exec->channels' ring_ranks; topo_dbtree, or topo_tree_rails between hosts), a point-to-point item
 * to or from rank me + d turned into one with rank r + d when every send has its turned receive
 * (else each peer runs only the other ends of this rank's messages), and every node built like this
 * rank's (its topology, or host memory and sockets for the host executor). Connections not made yet
 * take their transport from the two ranks' places and their slots from NCCL_BUFFSIZE and its kin.
 * Returns the time in microseconds, or a negative value (with an INFO line) when the plan cannot be
 * timed so. */
typedef struct sim_estimate_in {
  const exec_comm_t* exec; /* the rank's channels (rings, trees) and rank/nranks */
  const plan_t* plan;
  const topo_system_t* topo; /* the rank's host; NULL or without GPUs for the host executor */
  const peer_info_t* peers;  /* nranks: each rank's bus id (its GPU in topo) */
  const int* host_of;        /* nranks: each rank's host index, 0 .. nhosts-1 */
  int nhosts;
  /* nranks: every rank's GPU-NIC paths when the communicator's rings and trees are laid out over
   * its NICs (topo_ring_rails, topo_tree_rails), NULL otherwise */
  const topo_rank_nics_t* rank_nics;
  bool gpu; /* the CUDA executor's costs, else the host executor's */
} sim_estimate_in_t;
double sim_estimate_us(const sim_estimate_in_t* in);

#endif /* BATON_DEVICE_SIM_H */
