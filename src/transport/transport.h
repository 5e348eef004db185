/* Baton transport layer: connections between two ranks, one direction each, in the FIFO format of
 * src/vocab/vocab.h (conn_fifo_t). Transports are tables probed in priority order (P2P, SHM, NET);
 * the first whose can_connect accepts the pair wins, and both sides decide the same way from the
 * same peer information. Talks to topo (who is where), bootstrap (exchanging connect info) and
 * proxy (NET progress). */
#ifndef BATON_TRANSPORT_H
#define BATON_TRANSPORT_H

#include "base/base.h"
#include "bootstrap/bootstrap.h"
#include "net/net.h"
#include "topo/topo.h"
#include "vocab/vocab.h"

struct proxy_state;

/* One endpoint of a connection, owned by the transport context. */
typedef struct conn {
  conn_fifo_t fifo; /* what the executor drives */
  const struct transport_ops* transport;
  int channel;
  int peer;
  int is_send;
  void* priv;    /* transport's resources (mappings, net comms) */
  size_t bytes;  /* memory this side allocated for the connection (a receiver's FIFO block, a
                    NET side's buffers; 0 for a mapping of the peer's): what a suspend releases */
  char desc[48]; /* how it is connected, for logs: "SHM/direct/direct", "NET/Socket/0" */
} conn_t;

/* Per communicator. */
typedef struct transport_ctx {
  int rank;
  int nranks;
  int nchannels;
  const peer_info_t* peers; /* nranks entries */
  bootstrap_t* bootstrap;
  volatile uint32_t* abort_flag;
  char* err_buf; /* the communicator's last-error text, handed to the proxy */
  size_t err_len;
  uint64_t comm_hash;          /* names shared-memory segments */
  struct proxy_state* proxy;   /* started on first NET connection */
  struct net_state* net;       /* the NET transport's network and its context (net.c) */
  int traffic_class;           /* ncclConfig_t.trafficClass, NCCL_CONFIG_UNDEF_INT: unset */
  int buff_bytes[PROTO_COUNT]; /* FIFO sizes from NCCL_BUFFSIZE / NCCL_LL_BUFFSIZE / ... */
  conn_t** send;               /* [peer * nchannels + channel], NULL until connected */
  conn_t** recv;
  /* What the executor that drives the FIFOs needs of them, set by core from the executor it
   * chose (every rank of a communicator alike); the transports ask these, never which executor:
   *   gpu_fifos:     kernels on device peers[rank].cuda_dev read and write them: FIFO memory must
   *                  be device-accessible; P2P and GPUDirect may serve (false: host threads do,
   *                  in host memory; P2P is never chosen);
   *   virtual_conns: nothing reads them (a virtual cluster's executor times plans): each
   *                  connection's transport is chosen as on the hardware, nothing is allocated
   *                  and no peer takes part. */
  bool gpu_fifos;
  bool virtual_conns;
  bool no_ll128;             /* with gpu_fifos: the planner never uses LL128 (no NVLink path),
                                so FIFOs get no LL128 buffer */
  const topo_system_t* topo; /* this host's GPUs (topo_system_detect), NULL: paths unknown */
  /* The rings' NICs (topo_ring_rails): ring_nics[(channel % nrings) * nranks + r] is the NIC
   * (index in r's host's topo->nics) rank r's hop between hosts uses on that channel, -1 none.
   * NULL: no rail layout (each connection takes a NIC by the closest-NIC rule). */
  int nrings;
  const int8_t* ring_nics;
  /* Connections released by transport_release_all: their shells stay allocated until
   * transport_ctx_free, so that no later connection gets the address of one (the CUDA executor
   * knows a connection by its FIFO's address and would take a new one for the old). */
  conn_t** retired;
  size_t nretired, retired_cap;
} transport_ctx_t;

/* Connect info travels from the receiver to the sender through the bootstrap. */
#define CONN_INFO_BYTES 256

typedef struct transport_ops {
  const char* name;
  /* Whether this transport can join me and peer (symmetric: both sides get the same answer). */
  bool (*can_connect)(const transport_ctx_t* ctx, const peer_info_t* me, const peer_info_t* peer);
  /* Receiver: allocate the FIFO memory and counters, describe them in info (CONN_INFO_BYTES). */
  ncclResult_t (*recv_setup)(transport_ctx_t* ctx, conn_t* conn, void* info);
  /* Sender: attach to what the receiver described; fill conn->fifo. */
  ncclResult_t (*send_connect)(transport_ctx_t* ctx, conn_t* conn, const void* info);
  /* Receiver: finish once the sender has attached (e.g. accept a network connection). */
  ncclResult_t (*recv_connect)(transport_ctx_t* ctx, conn_t* conn);
  ncclResult_t (*free)(transport_ctx_t* ctx, conn_t* conn);
} transport_ops_t;

extern const transport_ops_t transport_p2p_ops; /* p2p.c: GPU memory, cuMem or CUDA IPC */
extern const transport_ops_t transport_shm_ops;
extern const transport_ops_t transport_net_ops;

/* A connection this rank needs: to peer (is_send) or from peer, on a channel. */
typedef struct conn_request {
  int channel;
  int peer;
  int is_send;
} conn_request_t;

ncclResult_t transport_ctx_init(transport_ctx_t* ctx); /* caller filled the identity fields */
/* Establish every listed connection that does not exist yet. Each rank lists its side; a send
 * request (c, b) on rank a pairs with a recv request (c, a) on rank b, and both ranks must call
 * (in any order relative to other pairs). Does not deadlock whatever order ranks list pairs in. */
ncclResult_t transport_connect(transport_ctx_t* ctx, const conn_request_t* reqs, int nreqs);
conn_t* transport_conn(const transport_ctx_t* ctx, int channel, int peer, int is_send);
/* Liveness of a peer, for executors waiting on it (see exec_comm_t.peer_check). */
ncclResult_t transport_peer_check(transport_ctx_t* ctx, int peer);
ncclResult_t transport_ctx_free(transport_ctx_t* ctx);
/* Releases every connection's memory and its proxy (ncclCommSuspend), leaving the context ready
 * to connect again; *out (caller frees) lists the connections there were, *nout of them, for
 * transport_connect to make again. Every rank of the communicator must have stopped using its
 * connections first. The shells are kept (transport_ctx_t.retired). */
ncclResult_t transport_release_all(transport_ctx_t* ctx, conn_request_t** out, int* nout);
/* The bytes the context's live connections allocated (conn_t.bytes summed). */
size_t transport_mem_bytes(const transport_ctx_t* ctx);

/* The communicator's network, its context and the NIC closest to this rank (the NET transport's
 * choice, made on first use), for other users of the network (one-sided operations: core). The
 * context lives until transport_net_release: close what was made with it first. */
ncclResult_t transport_net_context(transport_ctx_t* ctx, const ncclNet_t** net, void** net_ctx,
                                   int* dev);
/* Releases what the NET transport holds for the context (its network context), after every
 * connection and the proxy are gone. */
void transport_net_release(transport_ctx_t* ctx);

/* Checks /dev/shm has room for bytes (statvfs); WARN with the size needed and the fix. */
ncclResult_t shm_check_space(size_t bytes);

/* ---- For transport implementations: the memory of one FIFO ----------------------------------
 * A block of transport_fifo_bytes(buff_bytes) bytes holds the counters (head, tail and sizes, each
 * on its own cache line) and then one page-aligned buffer per protocol with buff_bytes[p] > 0.
 * transport_fifo_attach points fifo at the parts of such a block (zeroed by the allocator). */
size_t transport_fifo_bytes(const int buff_bytes[PROTO_COUNT]);
void transport_fifo_attach(conn_fifo_t* fifo, char* base, const int buff_bytes[PROTO_COUNT],
                           int flags);
/* With ctx->gpu_fifos, makes a host FIFO block usable by the GPU (transport_host_mem_to_device;
 * the device view must equal the host address) and sets *mapped; the owner unregisters it with
 * transport_host_mem_unregister before freeing. Without: nothing, *mapped = false. */
ncclResult_t transport_fifo_map(const transport_ctx_t* ctx, void* base, size_t bytes, bool* mapped);

/* ---- P2P policy (p2p.c) -----------------------------------------------------------------------
 * Whether P2P may join me and peer before CUDA is asked (pure: parameters, context, topology).
 * transport_p2p_ops.can_connect also needs CUDA to report the two GPUs as peers. */
typedef enum {
  P2P_OK = 0,
  P2P_NO_DISABLED,   /* NCCL_P2P_DISABLE=1 */
  P2P_NO_HOST_EXEC,  /* ctx->gpu_fifos is false: host threads drive the FIFOs */
  P2P_NO_OTHER_HOST, /* different host_hash */
  P2P_NO_GPU,        /* a side has no GPU */
  P2P_NO_PATH        /* the path between the GPUs is beyond NCCL_P2P_LEVEL */
} p2p_verdict_t;
p2p_verdict_t transport_p2p_policy(const transport_ctx_t* ctx, const peer_info_t* me,
                                   const peer_info_t* peer);
/* Whether a P2P connection between a and b takes direct writes (CONN_FLAG_DIRECT): the two ranks
 * in one process (a direct pointer) and NCCL_P2P_DIRECT_DISABLE unset. */
bool transport_p2p_direct_writes(const peer_info_t* a, const peer_info_t* b);

/* ---- NIC choice for NET connections (net.c) ----------------------------------------------------
 * The NIC of a connection, from the rank's NICs closest to its GPU (near[0..nnear), of ndev): the
 * receiver (rail < 0) takes near[channel % nnear]; the sender follows the receiver's NIC index
 * `rail` (its rail) under NCCL_CROSS_NIC 0 always, 2 when that NIC is among its closest, 1 never.
 */
int transport_net_pick_nic(const int* near, int nnear, int ndev, int channel, int rail,
                           int cross_nic);
/* The same with the ring layout's say: own >= 0 is the NIC the rings give this rank on the
 * channel (taken instead of near[channel % nnear]; the sender follows the receiver's rail under
 * NCCL_CROSS_NIC 2 when it is that NIC or among its closest). */
int transport_net_pick_ring_nic(const int* near, int nnear, int ndev, int channel, int own,
                                int rail, int cross_nic);
/* PXN for a send that is not a hop of the layout (transport_layout_hop; point-to-point):
 * picked is the NIC the rules above gave it, rail the receiver's; relayed[d]: the rank's GPU
 * reaches device d only through a peer GPU (topo_nic_relay, NCCL_PXN_DISABLE=0); own_far: its
 * closest devices are beyond its PCIe switches. NCCL_P2P_PXN_LEVEL 2: the receiver's rail
 * whenever a peer GPU reaches it; 1: only when own_far; 0: picked. */
int transport_net_pxn_nic(int picked, int rail, int ndev, const bool* relayed, bool own_far,
                          int level);
/* Whether a network device is the topology's NIC t (the layout names topology NICs): the same PCI
 * function when both have one (placed: the device's place from its pciPath, NULL: none), else the
 * same name, a merged device ("mlx5_0+mlx5_1") counting as its first port's. */
bool transport_net_same_nic(const topo_nic_t* t, const char* dev_name, const topo_nic_t* placed);
/* The NIC (index in ctx->topo->nics) the ring layout gives rank r on channel, -1 none. */
int transport_ring_nic(const transport_ctx_t* ctx, int channel, int r);
/* Whether a connection to peer on channel joins two of the layout's ends on one rail (a ring's or
 * tree's hop between hosts: the layout's NICs decide). Any other (point-to-point, or the hop that
 * closes a ring over an odd number of hosts, whose ends' rails differ) may take the receiver's
 * rail through a peer GPU (transport_net_pxn_nic). */
bool transport_layout_hop(const transport_ctx_t* ctx, int channel, int peer);

/* The NIC a simulated rank's NET connection to or from peer on channel uses (a virtual cluster,
 * ctx->virtual_conns): the same rule over the NICs of ctx->topo, whose hosts are all alike. */
int transport_net_virtual_dev(const transport_ctx_t* ctx, int channel, int peer, int is_send);
/* The GPU (index in ctx->topo->gpus) a simulated rank's send through NIC nic goes through (PXN),
 * -1 none: topo_nic_relay when NCCL_PXN_DISABLE is 0. */
int transport_net_virtual_relay(const transport_ctx_t* ctx, int nic);

/* ---- GPUDirect RDMA for NET connections (net_gdr.c) -------------------------------------------
 * A connection's Simple buffer may live in GPU memory that the NIC reads (send) or writes
 * (receive) directly. transport_net_gdr decides, from facts gathered by the NET transport, and
 * says why in why[len]; off, the buffer is host memory (staging). */
typedef enum { NET_GDR_OFF = 0, NET_GDR_DMABUF, NET_GDR_PEERMEM } net_gdr_mode_t;
typedef struct net_gdr_query {
  bool gpu_fifos;       /* GPU kernels drive the connection (transport_ctx_t.gpu_fifos) */
  bool is_send;         /* a send: the NIC reads GPU memory (NCCL_NET_GDR_READ) */
  int nic_ptr_support;  /* ncclNetProperties_t.ptrSupport of the NIC */
  bool gpu_gdr;         /* CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED */
  bool gpu_dmabuf;      /* CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED */
  int gpu_sm;           /* compute capability x 10 */
  bool gpu_nvlink_peer; /* an NVLink to another GPU of the host, or the host's only GPU */
  topo_path_t path;     /* GPU-NIC */
  topo_path_t max_path; /* NCCL_NET_GDR_LEVEL (transport_net_gdr_level) */
  int gdr_read;         /* NCCL_NET_GDR_READ: 1, 0, or -1 (from Ampere on) */
  bool dmabuf_enable;   /* NCCL_DMABUF_ENABLE */
} net_gdr_query_t;
net_gdr_mode_t transport_net_gdr(const net_gdr_query_t* q, char* why, size_t len);
const char* transport_net_gdr_name(net_gdr_mode_t m);
topo_path_t transport_net_gdr_level(void); /* NCCL_NET_GDR_LEVEL, default PXB */
/* Whether CUDA device cuda_dev supports GPUDirect RDMA and dma-buf export (false without one). */
void transport_net_gdr_caps(int cuda_dev, bool* gdr, bool* dmabuf);
/* Zeroed GPU memory of at least bytes (page multiple in *alloc) on the current device; with
 * NET_GDR_DMABUF also its dma-buf descriptor (*fd, else -1). An error (INFO only) means: stage
 * through host memory instead. */
ncclResult_t transport_net_gdr_alloc(size_t bytes, net_gdr_mode_t mode, void** ptr, size_t* alloc,
                                     int* fd);
void transport_net_gdr_free(void* ptr, int fd);

/* ---- Host FIFO memory for the CUDA executor (gpu_mem.c) --------------------------------------
 * SHM and NET FIFOs live in host memory; when ctx->gpu_fifos they must be registered and mapped
 * (cudaHostRegister(..., cudaHostRegisterMapped | cudaHostRegisterPortable)) and the FIFO must
 * point at the device view (*dev_out; equal to host on 64-bit Linux with unified addressing).
 * host and bytes should be page-aligned (an mmap'd segment). Unregister before unmapping. */
ncclResult_t transport_host_mem_to_device(void* host, size_t bytes, void** dev_out);
ncclResult_t transport_host_mem_unregister(void* host);

/* ---- Passing file descriptors between processes of one host (fd_pass.c) ----------------------
 * A process-wide server thread, started by the first export and stopped when the last export is
 * revoked, listens on an abstract Unix socket; a process of the same user that names an export's
 * key receives a duplicate of its descriptor (SCM_RIGHTS). The exporter takes no part in the
 * import, so a receiver can publish its FIFO in recv_setup and the sender fetch it in
 * send_connect, whatever order the ranks run in. */
#define FD_PASS_NAME_MAX 48
typedef struct fd_export {
  char name[FD_PASS_NAME_MAX]; /* the server's abstract socket name (without the leading NUL) */
  uint64_t key;                /* random: names one export */
} fd_export_t;
ncclResult_t fd_pass_export(int fd, fd_export_t* out); /* keeps a duplicate of fd */
void fd_pass_revoke(const fd_export_t* e);             /* closes the duplicate */
/* Fetches the descriptor (the caller closes it). Gives up after timeout_ms or once *abort_flag
 * (may be NULL) is set; a refused or unknown export is ncclSystemError after a WARN. */
ncclResult_t fd_pass_import(const fd_export_t* e, volatile uint32_t* abort_flag, int timeout_ms,
                            int* fd_out);

/* ---- Sharing a user's buffer with the processes of one host (share.c) -------------------------
 * For windows that peers read in place. share_export describes buff for the other ranks (its
 * share_desc_t travels through the bootstrap; e keeps what must be revoked later); share_import
 * maps a peer's description and sets m->base to where the peer's buffer lies in this process, or
 * leaves it NULL when it cannot be reached (another host; nothing offered; host memory for a GPU
 * rank). Errors are returned only for a share that should have worked and failed. */
typedef enum {
  SHARE_NONE = 0,
  SHARE_CUMEM,    /* fd: the cuMem allocation's descriptor */
  SHARE_CUDA_IPC, /* ipc: cudaIpcMemHandle_t of the allocation */
  SHARE_MEMFD     /* fd: host memory's memfd */
} share_kind_t;
typedef struct share_desc {
  int kind; /* share_kind_t */
  int cuda_dev;
  uint64_t pid_hash, host_hash;
  uint64_t addr;    /* the buffer in the exporter's process */
  size_t bytes;     /* the buffer's length */
  size_t map_bytes; /* the allocation an importer maps */
  size_t offset;    /* the buffer's offset in that allocation */
  fd_export_t fd;
  char ipc[64];
} share_desc_t;
typedef struct share_export {
  bool exported;
  fd_export_t fd;
} share_export_t;
/* Host memory behind a buffer (ncclMemAlloc's memfd): fd, the whole mapping's bytes, the
 * buffer's offset in it. */
typedef struct share_host_mem {
  int fd;
  size_t bytes, offset;
} share_host_mem_t;
typedef struct share_map {
  void* base; /* the peer's buffer here, NULL: unreachable */
  int dev;
  void* map;
  size_t map_bytes;
  CUmemGenericAllocationHandle handle;
  bool have_handle, reserved, mapped, ipc_opened, host_mapped;
} share_map_t;
ncclResult_t share_export(const peer_info_t* me, const void* buff, size_t bytes,
                          const share_host_mem_t* host, share_desc_t* d, share_export_t* e);
void share_revoke(share_export_t* e);
ncclResult_t share_import(const peer_info_t* me, const share_desc_t* d,
                          volatile uint32_t* abort_flag, share_map_t* m);
void share_unmap(share_map_t* m);

#endif /* BATON_TRANSPORT_H */
