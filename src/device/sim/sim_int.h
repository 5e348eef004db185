/* Private to src/device/sim: the calibrated costs, the machines as links, and the engine's view of
 * a launch. Other folders use device/sim/sim.h. */
#ifndef BATON_DEVICE_SIM_INT_H
#define BATON_DEVICE_SIM_INT_H

#include "device/sim/sim.h"
#include "vocab/vocab.h"

/* ---- Calibrated costs (cluster.c; docs/sim.md says where each number comes from) --------------
 * [exec]: SIM_EXEC_HOST (the host executor: CPU threads over SHM and sockets) or SIM_EXEC_CUDA. */
enum { SIM_EXEC_HOST = 0, SIM_EXEC_CUDA = 1, SIM_EXEC_COUNT };
typedef struct sim_calib {
  double host_issue_us[SIM_EXEC_COUNT]; /* the host's part of one rank's launch */
  double launch_us[SIM_EXEC_COUNT];     /* from the issue to the device */
  double start_us[SIM_EXEC_COUNT];      /* a launch's start on the device, before its first step */
  /* ... and per channel (block) it runs that loads connections: a ring's two; a chain's ends,
   * which load one, half that (engine.c, chan_loads) */
  double start_ch_us[SIM_EXEC_COUNT];
  double step_us[SIM_EXEC_COUNT][PROTO_COUNT];  /* each step: waits, barriers, publishing */
  double push_gbs[SIM_EXEC_COUNT][PROTO_COUNT]; /* one block (or half) writing to a peer */
  double p2p_push_gbs[SIM_EXEC_COUNT];          /* a half block's Simple point-to-point sends */
  double p2p_peer_us[SIM_EXEC_COUNT]; /* a launch's start per peer and direction it talks to */
  double copy_gbs[SIM_EXEC_COUNT];    /* a step without a send: copy out of a slot */
  double reduce_gbs[SIM_EXEC_COUNT];  /* ... or a reduction (two sources) */
  double memcpy_gbs[SIM_EXEC_COUNT];  /* a rank's copy to itself (one rank, a send to self) */
  /* A CUDA graph's replay: its next kernel's start after the last one ended, and per channel
   * (as start_ch_us: a chain's ends half) */
  double graph_launch_us[SIM_EXEC_COUNT], graph_start_ch_us[SIM_EXEC_COUNT];
  /* The staged direct algorithms (CUDA only; engine.c, ENG_LANE_STAGED): a copy step's fixed
   * cost and its block's copy rate into staging; a read step's fixed cost (the barrier: the
   * signals' round trip and the blocks' skew), what one reading block pulls over the links from
   * the peers' staging (GB/s, shared among its sources), and what it loads from every source,
   * its own staging included, when it copies out and when it reduces. */
  double stage_copy_us, stage_copy_gbs, stage_barrier_us, stage_pull_gbs;
  double stage_load_gbs, stage_reduce_gbs, stage_source_us; /* ... and per source it loads */
  double nvl_lat_us, pci_lat_us, shm_lat_us, net_lat_us;    /* one hop, per transport */
  double nvl_eff;      /* share of topo's NVLink bandwidth estimate a GPU's port carries */
  double net_step_us;  /* the proxy's turn per NET step */
  double nic_eff;      /* share of a NIC's line rate the network carries */
  double pcie_gbs;     /* a GPU's or NIC's PCIe link (Gen5 x16), one direction */
  double pcie4_gbs;    /* the same, Gen4 (GPUs below sm 90) */
  double sys_gbs;      /* between sockets */
  double host_mem_gbs; /* a host's memory, what SHM copies share (host executor) */
} sim_calib_t;
extern const sim_calib_t sim_calib;
/* Bytes a step puts on the wire for payload bytes of proto: LL lines carry 8 data bytes in 16,
 * LL128 120 in 128. */
double sim_wire_bytes(int proto, double bytes);

/* ---- The machines as links (cluster.c) ------------------------------------------------------- */
typedef struct sim_net {
  topo_system_t* node; /* one node's topology (parsed from the description's XML) */
  int nnodes, ngpus, nnics;
  bool host_only;
  int ranks_per_node;
  int nlinks;
  double* cap;     /* B/us */
  int per_node;    /* links of one node */
  int fabric_base; /* first fabric link, -1 without a fat-tree */
  int nleaves;
  int leaf_nodes;
  double net_lat_us;
  bool* nvswitch; /* ngpus: the GPU reaches the others through NVSwitches */
  int* gpu_numa;  /* ngpus */
  int* nic_numa;  /* nnics */
} sim_net_t;
ncclResult_t sim_net_build(const sim_cluster_desc_t* d, sim_net_t** out);
void sim_net_free(sim_net_t* n);
/* The links a connection from (node a, GPU ga) to (node b, GPU gb) crosses (ga/gb -1: host
 * memory), by transport; NET also names the NICs. Returns how many (at most SIM_PATH_MAX). */
#define SIM_PATH_MAX 12
/* relay >= 0 (NET, PXN): the GPU of node a whose memory the source NIC reads, reached from ga over
 * NVLink. */
int sim_net_path(const sim_net_t* n, int tr, int na, int ga, int nb, int gb, int src_nic,
                 int dst_nic, int relay, int* links);
/* The link of NIC nic of node (rx 0: what it sends, 1: what it receives); a NIC index out of
 * range is NIC 0, as in sim_net_path. */
int sim_net_nic_link(const sim_net_t* n, int node, int nic, int rx);
/* Latency of one hop of transport tr between the two (relay: as sim_net_path). */
double sim_net_latency(const sim_net_t* n, int tr, int na, int ga, int nb, int gb, int relay);
/* A short name of link l for reports ("n3.gpu2.nvl-out", "n0.nic1.tx", "leaf2.up"). */
void sim_net_link_name(const sim_net_t* n, int l, char* buf, size_t len);

/* ---- The engine (engine.c) ------------------------------------------------------------------- */
/* What the engine sees of one rank. */
typedef struct sim_rank_view {
  const exec_comm_t* exec; /* channels: ring, tree, FIFOs */
  const plan_t* plan;      /* what it launched, NULL: nothing */
  int node, gpu;           /* gpu: index in the node topology, -1: none */
  int local;               /* its place among the ranks its process launches for */
} sim_rank_view_t;
/* How a connection was made: its transport (SIM_TR_*) and, for NET, the NICs at both ends and
 * the GPU of the source's node that relays to the source NIC (PXN), -1 none. */
typedef void (*sim_conn_fn)(void* arg, int channel, int src, int dst, int* tr, int* src_nic,
                            int* dst_nic, int* relay);
typedef struct sim_view {
  int nranks;
  const sim_rank_view_t* ranks;
  const sim_net_t* net;
  int exec; /* SIM_EXEC_* */
  sim_conn_fn conn;
  void* conn_arg;
  sim_memo_t* memo;
  int trace_ranks;
  int iters;       /* the launch back to back this many times (1: once) */
  bool graph;      /* ... replayed from a CUDA graph: no host issue between them */
  int per_process; /* ranks one process launches for, one after another */
} sim_view_t;
/* Times the launch; out's flows and spans are malloc'd (the caller frees them). */
ncclResult_t sim_engine_run(const sim_view_t* v, sim_result_t* out);

#endif /* BATON_DEVICE_SIM_INT_H */
