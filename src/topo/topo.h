/* Baton topology layer: who is where (hosts, processes, GPUs, NICs), paths and bandwidths between
 * them, ring and tree construction, and the tuning model. Talks to CUDA/NVML (dlopen), hwloc,
 * libnuma and sysfs; includes only src/base and the vocabulary (src/vocab). */
#ifndef BATON_TOPO_H
#define BATON_TOPO_H

#include <sched.h>

#include "base/base.h"
#include "vocab/vocab.h"

/* What every rank publishes about itself at init (allgathered through the bootstrap). */
typedef struct peer_info {
  int rank;
  int cuda_dev;       /* CUDA device ordinal in its process, -1 for the host executor */
  int64_t bus_id;     /* PCI bus id of the GPU, -1 without one */
  uint64_t host_hash; /* host_hash(): equal means same host */
  uint64_t pid_hash;  /* pid_hash(): equal means same process */
  uint64_t shm_dev;   /* st_dev of /dev/shm: equal means SHM can be shared */
  int pid;            /* for liveness checks of peers on the same host (same pid namespace) */
  int simulated; /* 1: its device and host are a virtual platform's (baton-sim, base.h): nothing
                    is probed or allocated for it, connections to it are only decided */
} peer_info_t;

/* ---- Rings and trees (pure functions) ------------------------------------------------------ */
/* The ring order channel `channel` uses, as nranks entries. Ranks of one host stay adjacent
 * (hosts[] gives each rank's host index, or NULL for one host). both_ways: odd channels go the
 * other way round, so both directions of every direct link carry traffic; otherwise every channel
 * is the same ring (a chain collective then has each rank at one position on every channel). */
void topo_ring_order(int nranks, const int* hosts, int channel, bool both_ways, int* order_out);
/* Double binary tree over ranks 0..nranks-1: tree 0 and tree 1 are complementary (a rank that is
 * an interior node in one is a leaf in the other, as far as possible). Writes the parent (-1 at
 * the root) and up to TOPO_TREE_MAX_CHILDREN children (-1 where unused). */
#define TOPO_TREE_MAX_CHILDREN 3
void topo_dbtree(int nranks, int rank, int tree, int* up, int* down);

/* ---- Tuning model ------------------------------------------------------------------------------
 */
/* Estimated time in microseconds of one operation: latency + bytes / bandwidth per algorithm and
 * protocol, from the number of ranks, hosts and channels and the link kind. Returns a negative
 * value for a combination that is not supported (vocab_supports, with LL128 where gpu and the
 * staged direct algorithms where stage_half > 0) and for missing inputs. func/algo/proto are the
 * vocabulary's func_t / ALGO_* / PROTO_*. */
typedef struct topo_tuning {
  int nranks;
  int nhosts;
  int nchannels;
  double intra_bw_gbs; /* per channel, bytes/ns == GB/s */
  double inter_bw_gbs;
  double intra_lat_us; /* per hop */
  double inter_lat_us;
  bool gpu; /* LL128 is only offered on GPUs */
  /* Staged direct algorithms (device.h): bytes of a staging half (0: none), and the GB/s a GPU
   * reads from its peers' memory (the NVLink bandwidth of a GPU, every peer together). */
  size_t stage_half;
  double stage_read_gbs;
} topo_tuning_t;
double topo_model_time_us(const topo_tuning_t* t, int func, int algo, int proto, size_t bytes);

/* ---- Algorithm and protocol filters (NCCL_ALGO, NCCL_PROTO) -------------------------------------
 * Stock 2.28's syntax: "[func:][^]name,name;func:[^]name..." (src/topo/algo_filter.c has the
 * grammar). The name tables are in stock's order, so an index is the PROTO_* / func_t value;
 * algorithms: stock's seven names, then Baton's own (OneShot, TwoShot: device.h's direct
 * algorithms, TOPO_ALGO_* below; the planner maps them to ALGO_*). Names Baton does not implement
 * (CollNet*, NVLS*, PAT) parse but are never offered. */
#define TOPO_ALGO_NAMES_COUNT                                        \
  9 /* Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT, \
       OneShot, TwoShot */
enum { TOPO_ALGO_TREE = 0, TOPO_ALGO_RING = 1, TOPO_ALGO_ONESHOT = 7, TOPO_ALGO_TWOSHOT = 8 };
#define TOPO_PROTO_NAMES_COUNT 3 /* LL, LL128, Simple */
#define TOPO_FUNC_NAMES_COUNT 5  /* Broadcast, Reduce, AllGather, ReduceScatter, AllReduce */
#define TOPO_FILTER_MAX_NAMES 16
extern const char* const topo_algo_names[TOPO_ALGO_NAMES_COUNT];
extern const char* const topo_proto_names[TOPO_PROTO_NAMES_COUNT];
extern const char* const topo_func_names[TOPO_FUNC_NAMES_COUNT];
/* Which of names[0..nnames) `spec` allows for the function named func_name (one of
 * topo_func_names; NULL: only the entry without a function applies). spec NULL or empty allows
 * all. The whole spec is checked whichever function is asked for: a bad token WARNs naming
 * var_name ("NCCL_ALGO") and the token, and returns ncclInvalidUsage (as stock does).
 * allowed[nnames] is written only on success. */
ncclResult_t topo_parse_filter(const char* spec, const char* var_name, const char* const* names,
                               int nnames, const char* func_name, bool* allowed);

/* ---- System topology (system.c, gpu.c, nvml.c, xml.c) -------------------------------------------
 * The GPUs of the ranks on this host and how they connect: the path type between two GPUs, a
 * bandwidth estimate, and what those allow (P2P, the channel count). Detected from sysfs (PCI
 * bridges, NUMA node, local CPUs) and NVML (NVLinks, through dlopen; absent NVML is an INFO line
 * and PCIe-only paths), or loaded from NCCL_TOPO_FILE (so a topology can be forced or studied
 * without the hardware); NCCL_TOPO_DUMP_FILE writes it. xml.c documents the file's schema. */
typedef enum {
  TOPO_PATH_LOC = 0, /* the same GPU */
  TOPO_PATH_NVL,     /* NVLink: direct, or both GPUs on NVSwitches */
  TOPO_PATH_NVB,     /* NVLink through another GPU (a level name only; never detected) */
  TOPO_PATH_PIX,     /* PCIe through at most one switch */
  TOPO_PATH_PXB,     /* PCIe through several switches, not through the host bridge */
  TOPO_PATH_PXN,     /* (a level name only; never detected) */
  TOPO_PATH_PHB,     /* PCIe through a host bridge (the CPU) */
  TOPO_PATH_SYS,     /* across the CPUs' interconnect (another NUMA node), or unknown */
  TOPO_PATH_COUNT
} topo_path_t;
extern const char* const topo_path_names[TOPO_PATH_COUNT]; /* "LOC", "NVL", ... */

#define TOPO_BUSID_LEN 20 /* "0000:3b:00.0" (domains up to 8 digits) and its NUL */
#define TOPO_CPUS_MAX 256
#define TOPO_PCI_PATH_MAX 256

typedef struct topo_gpu {
  int64_t bus_id;                   /* numeric form, as peer_info_t.bus_id */
  int rank;                         /* lowest rank using this GPU, -1 none */
  int dev;                          /* that rank's CUDA ordinal (in its own process), -1 unknown */
  int sm;                           /* compute capability x 10 (90: Hopper), 0 unknown */
  int numa;                         /* NUMA node, -1 unknown */
  int nvswitch_links;               /* NVLinks ending at an NVSwitch */
  char cpus[TOPO_CPUS_MAX];         /* local CPUs as a Linux list ("0-31,64-95"), "" unknown */
  char pci_path[TOPO_PCI_PATH_MAX]; /* PCI bridges below the host bridge, '/'-separated bus ids */
  bool placed_only; /* from a file that gave only where it sits (numa, cpus, pci_path) */
} topo_gpu_t;

/* What a topology file said beyond the GPUs (src/topo/xml_info.h), kept for dumps. */
typedef struct topo_xml_info topo_xml_info_t;
/* A network device of this host: an RDMA port (InfiniBand or RoCE) or an Ethernet interface with a
 * PCI function. */
#define TOPO_NIC_NAME_MAX 32
typedef struct topo_nic {
  char name[TOPO_NIC_NAME_MAX]; /* "mlx5_0" (RDMA device) or "eth0" */
  int port;                     /* RDMA port number; 0 for an interface */
  bool rdma;
  bool active;                      /* port ACTIVE, or interface operationally up */
  int speed_mbps;                   /* 0: unknown */
  int64_t bus_id;                   /* its PCI function; -1: not a PCI device (virtual) */
  int numa;                         /* -1: unknown */
  char pci_path[TOPO_PCI_PATH_MAX]; /* PCI bridges above it, as topo_gpu_t's */
} topo_nic_t;

typedef struct topo_system {
  int ngpus;
  topo_gpu_t* gpus; /* sorted by bus id */
  int nnics;
  topo_nic_t* nics;     /* this host's NICs: detected, or a parsed file's <net> elements */
  int* nvlinks;         /* [i * ngpus + j]: direct NVLinks from gpus[i] to gpus[j] */
  topo_path_t* paths;   /* [i * ngpus + j] */
  double* bw;           /* [i * ngpus + j]: GB/s, one direction */
  topo_xml_info_t* xml; /* CPU and PCI attributes and NICs from a file, NULL: none */
} topo_system_t;

/* The GPUs of every rank on my_rank's host (peers[r].cuda_dev >= 0, same host_hash). With
 * NCCL_TOPO_FILE, GPUs listed there are taken from the file (those it only places are detected,
 * then placed) and the others detected; rank NCCL_TOPO_DUMP_FILE_RANK writes NCCL_TOPO_DUMP_FILE,
 * with what the file said beyond the GPUs. Logs the GPUs and paths at INFO GRAPH. */
ncclResult_t topo_system_detect(const peer_info_t* peers, int nranks, int my_rank,
                                topo_system_t** out);
/* The same for a described host (a virtual platform's, baton-sim): the GPUs and NICs of xml
 * (stock's format, parsed by topo_xml_parse) are the host's, each local rank's GPU must be one of
 * them, and nothing is detected. name: for messages. */
ncclResult_t topo_system_from_xml(const peer_info_t* peers, int nranks, int my_rank,
                                  const char* xml, const char* name, topo_system_t** out);
void topo_system_free(topo_system_t* sys);
int topo_system_gpu(const topo_system_t* sys, int64_t bus_id); /* index, -1 if absent */
/* LOC for equal bus ids; SYS when either GPU is unknown (or sys is NULL). */
topo_path_t topo_system_path(const topo_system_t* sys, int64_t bus_a, int64_t bus_b);
/* Channels for this host's slowest GPU pair (about 16 GB/s each, an even count, at least 2),
 * within NCCL_MIN_NCHANNELS..NCCL_MAX_NCHANNELS; 0 with fewer than two GPUs (no opinion). Every
 * rank of one host computes the same value; across hosts the caller must agree (minimum). */
int topo_system_nchannels(const topo_system_t* sys);
/* The furthest path P2P may use: NCCL_P2P_LEVEL (a name, or stock's legacy 0..4), default PXB. */
topo_path_t topo_p2p_level(void);
ncclResult_t topo_path_parse(const char* text, topo_path_t* out); /* names and legacy numbers */
/* "0000:3b:00.0" <-> 0x3b000 (the hex digits of the text, as core's numeric bus ids). */
void topo_busid_format(int64_t bus_id, char out[TOPO_BUSID_LEN]);
int64_t topo_busid_parse(const char* text); /* -1 when malformed */
/* The CUDA ordinal of the GPU at bus_id in this process, -1 when this process does not see it
 * (CUDA_VISIBLE_DEVICES may hide it). */
int topo_gpu_local_ordinal(int64_t bus_id);

/* ---- NICs and affinity (nic.c, hwloc.c, numa.c) ------------------------------------------------
 * NICs come from sysfs (/sys/class/infiniband ports, /sys/class/net interfaces backed by a PCI
 * device); their PCI bridges and NUMA node from hwloc when libhwloc.so.15 loads (run time), else
 * from sysfs. topo_system_detect fills sys->nics and logs them; NCCL_TOPO_DUMP_FILE lists them. */
ncclResult_t topo_nics_detect(topo_nic_t** out, int* n);
/* The NIC whose device is at sysfs_path (a real path under /sys/devices, as an ncclNet device's
 * pciPath); false when the path is NULL or not a PCI device (a virtual NIC: Soft-RoCE, lo). */
bool topo_nic_describe(const char* sysfs_path, topo_nic_t* out);
/* The path between a GPU and a NIC, by the rules GPU pairs use (PIX, PXB, PHB, SYS); SYS when
 * either is unknown (gpu NULL, a virtual NIC). */
topo_path_t topo_gpu_nic_path(const topo_gpu_t* gpu, const topo_nic_t* nic);
/* The NICs of sys closest to the GPU at gpu_bus (the best GPU-NIC path wins, as the NET transport
 * picks among a host's network devices), in index order: writes at most max indices, returns how
 * many. */
int topo_nics_near(const topo_system_t* sys, int64_t gpu_bus, int* near, int max);
/* The GPU of bus_id in sys, NULL when unknown. */
const topo_gpu_t* topo_system_gpu_info(const topo_system_t* sys, int64_t bus_id);

/* CPU affinity for host threads serving a GPU: its local CPUs ("0-31,64-95"), restricted to the
 * process's allowed CPUs unless NCCL_IGNORE_CPU_AFFINITY=1 (then the GPU's CPUs as they are).
 * false (out untouched) when there is nothing to bind to: no GPU CPUs, or an empty intersection. */
bool topo_cpu_affinity(const char* gpu_cpus, const cpu_set_t* allowed, bool ignore_mask,
                       cpu_set_t* out);
/* Parses a Linux CPU list ("0-3,8,10-11"); false when malformed. */
bool topo_cpulist_parse(const char* text, cpu_set_t* out);
/* Places [ptr, ptr + bytes) on NUMA node (libnuma, loaded at run time; before the pages are first
 * touched). false, with one INFO line per process, when libnuma is absent or node < 0. */
bool topo_numa_bind_memory(void* ptr, size_t bytes, int node);

/* XML in stock NCCL's format (xml_info.h; Baton's earlier form is read too): text in memory
 * (format allocates *text_out; free() it) and files. Parse errors WARN with name:line and return
 * ncclInvalidUsage. */
ncclResult_t topo_xml_format(const topo_system_t* sys, char** text_out);
ncclResult_t topo_xml_parse(const char* text, const char* name, topo_system_t** out);
ncclResult_t topo_xml_dump(const topo_system_t* sys, const char* path);
ncclResult_t topo_xml_load(const char* path, topo_system_t** out);

/* ---- Rings over every NIC, rail by rail (rails.c, pure) -----------------------------------------
 * What a rank tells every other rank about its NICs (allgathered at init): the GPU-NIC path from
 * its GPU to each NIC of its host (index into that host's topo_system_t.nics), TOPO_RAIL_NONE for
 * a NIC a network would not use (down, or Ethernet beside RDMA ports). nnics 0: no GPU or NIC. */
#define TOPO_RAIL_MAX_NICS 32
#define TOPO_RAIL_NONE 0xff
#define TOPO_RAIL_MAX_WEIGHT 4 /* a NIC's channels: at most 4 times the slowest rail's */
typedef struct topo_rank_nics {
  uint8_t nnics;
  uint8_t path[TOPO_RAIL_MAX_NICS];
  /* each NIC's speed over the slowest usable one's, rounded, 1 to TOPO_RAIL_MAX_WEIGHT (1 where
   * a speed is unknown): a NIC twice as fast is a rail on twice as many channels */
  uint8_t weight[TOPO_RAIL_MAX_NICS];
} topo_rank_nics_t;
void topo_rank_nics(const topo_system_t* sys, int64_t gpu_bus, topo_rank_nics_t* out);
/* The ring of channel `channel` between hosts (hosts[] as topo_ring_order's; ranks of a host
 * adjacent, hosts in index order), with each host's part turned so that its ends sit on the
 * channel's rails: its hops between hosts leave and enter through NICs of the same index, spread
 * over every NIC of the hosts (rails.c explains the layout). nic_out[r]: the NIC rank r's hop
 * between hosts uses on this channel (its index in its host's NICs), -1 for ranks without one.
 * false when no layout applies (one host, or no host has a NIC): order_out is then
 * topo_ring_order's one-way ring. scratch: nranks ints. */
bool topo_ring_rails(int nranks, const int* hosts, const topo_rank_nics_t* nics, int channel,
                     int* scratch, int* order_out, int8_t* nic_out);
/* Channel `channel`'s tree between hosts, over every NIC (rails.c explains the layout): the hosts
 * form the double binary tree over host indices (topo_dbtree, tree (channel / m) % 2 for hosts of
 * at most m rails); a host's first child host hangs from its end of the channel's ring beside
 * rail u (topo_ring_rails), its second from its end beside rail v, so every hop between hosts
 * joins two ranks beside NICs of one index that the ring uses; inside a host the rank entered
 * from the parent host has the other end as its child, and the host's other ranks hang below
 * breadth first (2 + log2(k - 2) deep for k ranks). No rank has more than two children. The
 * root host moves from channel to channel (an inner host of the tree trades places with it), so
 * that no host's NICs carry a root's lighter load on every channel. up_out[r]: rank r's
 * parent (-1 at the root), down_out[r * TOPO_TREE_MAX_CHILDREN ...]: its children (-1 unused).
 * false when no layout applies (as topo_ring_rails): the outputs are then all -1. scratch:
 * 2 * nranks ints. */
bool topo_tree_rails(int nranks, const int* hosts, const topo_rank_nics_t* nics, int channel,
                     int* scratch, int* up_out, int* down_out);
/* Channels c and c + period get the same layout; at most max. scratch: 2 * nranks ints. */
int topo_ring_rails_period(int nranks, const int* hosts, const topo_rank_nics_t* nics, int max,
                           int* scratch);

/* ---- PXN: a far NIC through a peer GPU (pxn.c) --------------------------------------------------
 * The GPU (index in sys->gpus) through which the GPU at gpu_bus sends through NIC `nic` (index in
 * sys->nics): when its own path to the NIC crosses the CPU (PHB, SYS), an NVLink peer whose path
 * to the NIC is at most PXB (the best such path; GPUs that share a relay's NIC take turns by their
 * index); -1 when the GPU reaches the NIC through its own PCIe switches, or no peer can. Whether
 * PXN is on at all (NCCL_PXN_DISABLE) is the caller's: topo_pxn_enabled. */
int topo_nic_relay(const topo_system_t* sys, int64_t gpu_bus, int nic);
bool topo_pxn_enabled(void);  /* NCCL_PXN_DISABLE is 0 */
int topo_p2p_pxn_level(void); /* NCCL_P2P_PXN_LEVEL, 0..2 */

/* ---- NCCL_GRAPH_DUMP_FILE (graph_xml.c) ---------------------------------------------------------
 * One host's part of every channel's ring and tree, as stock's graph XML (graph_xml.c). rings,
 * ring_nics: nchannels x nranks, every channel's ring order and each rank's NIC between hosts on
 * it (topo_ring_rails; NULL: none); tree_up, tree_down (x TOPO_TREE_MAX_CHILDREN), tree_nics: the
 * same per channel for the trees (NULL: no tree graph). gpu_dev: nranks, each rank's GPU dev. */
typedef struct topo_graph_dump {
  int nranks, nchannels, nhosts, host;
  const int* host_of;
  const int* gpu_dev;
  const int* rings;
  const int8_t* ring_nics;
  const int* tree_up;
  const int* tree_down;
  const int8_t* tree_nics;
  int cross_nic;
  double speed_intra, speed_inter; /* GB/s a channel */
  topo_path_t type_intra, type_inter;
} topo_graph_dump_t;
ncclResult_t topo_graphs_format(const topo_graph_dump_t* d, char** text_out); /* free() it */
/* Writes text to path; var names the variable in messages ("NCCL_GRAPH_DUMP_FILE"). */
ncclResult_t topo_text_write(const char* text, const char* var, const char* path);

/* ---- Graph log lines (graph.c) -----------------------------------------------------------------
 * What stock prints at init, for the collectives layer: one "Channel 00/24 : 0 1 2 3" line per
 * channel (rings: nchannels x nranks ranks) and one "Trees [0] 1/-1/-1->0->-1 [1] ..." line for
 * this rank (per channel: children down[c * TOPO_TREE_MAX_CHILDREN + k], then rank, then up[c]).
 * The format functions return the length written (truncated to len). */
int topo_format_ring(char* buf, size_t len, int channel, int nchannels, const int* ring,
                     int nranks);
int topo_format_trees(char* buf, size_t len, int rank, int nchannels, const int* up,
                      const int* down);
void topo_log_graph(int rank, int nranks, int nchannels, const int* rings, const int* up,
                    const int* down);

#endif /* BATON_TOPO_H */
