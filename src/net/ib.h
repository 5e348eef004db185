/* Private to src/net (and its unit tests): the built-in IB verbs network. Other layers use
 * src/net/net.h only.
 *
 * (It also declares the one helper the built-in networks share, net_listen_any_port.)
 *
 * Files: ib_parse.c (pure rules: NCCL_IB_HCA, GID choice, striping, port speed, merging ports into
 * NICs; no verbs calls, unit tested without a device), ib_verbs.c (libibverbs.so.1 loaded with
 * dlopen), ib_dev.c (devices, ports, GIDs, async events, memory registration), ib_conn.c
 * (listen/connect/accept: RC queue pairs set up over a TCP side channel), ib_data.c (isend, irecv,
 * iflush, test).
 *
 * The data path, receiver-driven as stock's: the sender owns a FIFO of NCCL_NET_MAX_REQUESTS
 * "clear to send" entries (ib_cts_t) registered for remote writes. irecv posts one receive work
 * request per QP the message will use and RDMA-writes a CTS entry (buffer address, rkeys, size,
 * sequence number) into the sender's FIFO. isend waits for the entry of its sequence number, then
 * RDMA-writes the data straight into the receive buffer with WRITE_WITH_IMM (the immediate is the
 * size), which completes the receive work request on the other side. Several QPs per connection
 * (NCCL_IB_QPS_PER_CONNECTION): a message goes whole on the next QP in turn, or cut into 128-byte
 * aligned stripes, one per QP (NCCL_IB_SPLIT_DATA_ON_QPS=1); both ends derive the same choice from
 * the sequence number. The TCP socket of the setup stays open: a peer that exits closes it, which
 * every pending call sees within IB_LIVENESS_NS (RDMA alone would only notice after the QP's
 * retries, NCCL_IB_TIMEOUT x NCCL_IB_RETRY_CNT). */
#ifndef BATON_NET_IB_H
#define BATON_NET_IB_H

#include <pthread.h>
#include <stdatomic.h>

#include "bootstrap/bootstrap.h"
#include "net/net.h"

/* ---- Shared with the socket network (socket.c) --------------------------------------------- */
/* A listening TCP socket on interface address iface, any port, and a random magic for the
 * connection handle: the socket network's data path, the IB network's side channel. */
ncclResult_t net_listen_any_port(const socket_addr_t* iface, socket_conn_t* out, uint64_t* magic);

/* ---- Pure rules (ib_parse.c) ----------------------------------------------------------------- */
/* NCCL_IB_HCA, stock's syntax: an optional leading '^' (exclude the listed devices), then an
 * optional '=' (names match exactly; otherwise as prefixes), then comma-separated names, each with
 * an optional ":<port>". An empty or unset list matches every device and port. */
#define IB_HCA_MAX 32
#define IB_NAME_MAX 64
typedef struct ib_hca_item {
  char name[IB_NAME_MAX];
  int port; /* -1: any */
} ib_hca_item_t;
typedef struct ib_hca_filter {
  bool exclude;
  bool exact;
  int n;
  ib_hca_item_t items[IB_HCA_MAX];
} ib_hca_filter_t;
void ib_hca_parse(const char* spec, ib_hca_filter_t* out);
bool ib_hca_match(const ib_hca_filter_t* f, const char* dev, int port);

/* GID choice for RoCE ports (NCCL_IB_GID_INDEX unset). A table entry: the 16 raw bytes and the
 * RoCE version of the entry (1, 2, or 0 when the kernel does not say). */
typedef struct ib_gid_entry {
  uint8_t raw[16];
  int roce_version;
} ib_gid_entry_t;
typedef struct ib_gid_prefs {
  int family;       /* AF_INET (NCCL_IB_ADDR_FAMILY default) or AF_INET6 */
  int roce_version; /* NCCL_IB_ROCE_VERSION_NUM, default 2 */
  int range_bits;   /* NCCL_IB_ADDR_RANGE prefix length, 0: any address */
  uint8_t range[16];
} ib_gid_prefs_t;
/* Reads the preferences from their text (family "AF_INET"/"AF_INET6" or NULL; range
 * "<address>/<bits>" or NULL); a malformed value WARNs naming the variable and is ignored. */
void ib_gid_prefs_parse(const char* family, const char* range, int roce_version,
                        ib_gid_prefs_t* out);
/* The best entry: configured (not zero, not a bare fe80::), then of the preferred address family
 * and within the range, then not link-local, then of the preferred RoCE version, then the lowest
 * index: on a port with an IPv4 address that is the RoCE v2 GID of that address. -1 when no entry
 * is configured. */
int ib_gid_select(const ib_gid_entry_t* tab, int n, const ib_gid_prefs_t* p);
int ib_gid_family(const uint8_t raw[16]); /* AF_INET for IPv4-mapped GIDs, else AF_INET6 */
bool ib_gid_is_link_local(const uint8_t raw[16]);
/* "::ffff:10.1.2.3" style text of a GID. */
const char* ib_gid_format(const uint8_t raw[16], char* buf, size_t len);

/* Part k of nparts of a message of size bytes: 128-byte aligned stripes (so LL/LL128 lines never
 * straddle two QPs), the last ones possibly empty. */
#define IB_STRIPE_ALIGN 128
void ib_stripe(size_t size, int nparts, int k, size_t* off, size_t* len);

/* Port speed in Mb/s from ibv_port_attr's active_speed(_ex) and active_width codes. */
int ib_port_speed_mbps(int active_speed, int active_speed_ex, int active_width);

/* Merging ports into NICs (NCCL_IB_MERGE_NICS): ports whose PCI device paths are equal apart from
 * the function number are one physical NIC (a dual-port card). group_of[i] gets the group of
 * port i (groups numbered from 0 in order of first appearance, at most max_per_group ports each;
 * paths NULL: a group of its own). Returns the number of groups. */
int ib_merge_groups(const char* const* pci_paths, int n, bool merge, int max_per_group,
                    int* group_of);

/* ---- libibverbs (ib_verbs.c) -------------------------------------------------------------------
 */
#ifdef BATON_HAVE_VERBS
#include <infiniband/verbs.h>

typedef struct ib_verbs {
  struct ibv_device** (*get_device_list)(int* num);
  void (*free_device_list)(struct ibv_device** list);
  const char* (*get_device_name)(struct ibv_device* dev);
  struct ibv_context* (*open_device)(struct ibv_device* dev);
  int (*close_device)(struct ibv_context* ctx);
  int (*query_device)(struct ibv_context* ctx, struct ibv_device_attr* attr);
  int (*query_port)(struct ibv_context* ctx, uint8_t port, struct _compat_ibv_port_attr* attr);
  int (*query_gid)(struct ibv_context* ctx, uint8_t port, int index, union ibv_gid* gid);
  struct ibv_pd* (*alloc_pd)(struct ibv_context* ctx);
  int (*dealloc_pd)(struct ibv_pd* pd);
  struct ibv_mr* (*reg_mr)(struct ibv_pd* pd, void* addr, size_t length, int access);
  int (*dereg_mr)(struct ibv_mr* mr);
  struct ibv_cq* (*create_cq)(struct ibv_context* ctx, int cqe, void* cq_context,
                              struct ibv_comp_channel* channel, int comp_vector);
  int (*destroy_cq)(struct ibv_cq* cq);
  struct ibv_qp* (*create_qp)(struct ibv_pd* pd, struct ibv_qp_init_attr* attr);
  int (*modify_qp)(struct ibv_qp* qp, struct ibv_qp_attr* attr, int mask);
  int (*destroy_qp)(struct ibv_qp* qp);
  int (*get_async_event)(struct ibv_context* ctx, struct ibv_async_event* event);
  void (*ack_async_event)(struct ibv_async_event* event);
  const char* (*wc_status_str)(enum ibv_wc_status status);
  const char* (*event_type_str)(enum ibv_event_type type);
  int (*fork_init)(void);
  /* Optional (NULL when this rdma-core lacks them): */
  struct ibv_mr* (*reg_mr_iova2)(struct ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                 unsigned int access); /* IBVERBS_1.8: relaxed ordering */
  struct ibv_mr* (*reg_dmabuf_mr)(struct ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova,
                                  int fd, int access); /* IBVERBS_1.12 */
} ib_verbs_t;

/* The process's table, NULL (after one INFO line saying why) when libibverbs.so.1 is absent or
 * lacks an entry point. */
const ib_verbs_t* ib_verbs(void);
/* ibv_query_port through the provider's extended op when it has one (as verbs.h does). */
int ib_query_port(const ib_verbs_t* v, struct ibv_context* ctx, uint8_t port,
                  struct ibv_port_attr* attr);

/* ---- Devices (ib_dev.c) ------------------------------------------------------------------------
 */
#define IB_MAX_DEVS 32  /* ports */
#define IB_MAX_VDEVS 64 /* NICs offered (ports, merged ports, makeVDevice) */
#define IB_DEVS_PER_VDEV NCCL_NET_MAX_DEVS_PER_NIC
#define IB_MAX_QPS 32                     /* per connection */
#define IB_MAX_REQS NCCL_NET_MAX_REQUESTS /* in flight per comm */
#define IB_MAX_MSG (1ull << 30)           /* largest message (maxP2pBytes, maxCollBytes) */

typedef struct ib_mr_entry {
  uintptr_t addr; /* page-aligned start */
  size_t pages;
  int refs;
  struct ibv_mr* mr;
} ib_mr_entry_t;

typedef struct ib_dev {
  char name[IB_NAME_MAX];
  int port;
  struct ibv_context* ctx;
  int link_layer; /* IBV_LINK_LAYER_INFINIBAND or _ETHERNET */
  int speed;      /* Mb/s */
  uint16_t lid;
  enum ibv_mtu mtu;
  int gid_index;
  union ibv_gid gid;
  char* pci_path; /* realpath of /sys/class/infiniband/<name>/device, NULL when virtual */
  uint64_t guid;
  int max_qp;
  bool ar;          /* adaptive routing: data as WRITE, then a 0-byte WRITE_WITH_IMM */
  bool dmabuf;      /* ibv_reg_dmabuf_mr works here */
  bool atomics;     /* RDMA atomics (atomic_cap): MRs and QPs here allow remote atomics */
  atomic_int fatal; /* async fatal events (device, CQ or QP errors) seen */
  atomic_bool port_down;
  pthread_mutex_t lock; /* pd and the MR cache */
  struct ibv_pd* pd;
  int pd_refs;
  ib_mr_entry_t* mrs; /* sorted by addr */
  int nmrs, cap_mrs;
} ib_dev_t;

typedef struct ib_vdev {
  char name[IB_DEVS_PER_VDEV * (IB_NAME_MAX + 1)];
  int ndevs;
  int devs[IB_DEVS_PER_VDEV];
} ib_vdev_t;

extern ib_dev_t ib_devs[IB_MAX_DEVS];
extern int ib_ndevs;
extern ib_vdev_t ib_vdevs[IB_MAX_VDEVS];
extern int ib_nvdevs;

/* Finds the ports once per process (NCCL_IB_HCA, NCCL_IB_DISABLE) and starts the async-event
 * thread. ncclSystemError (after an INFO line) when IB is off or nothing usable is there. */
ncclResult_t ib_devices_init(void);
ncclResult_t ib_get_properties(int vdev, ncclNetProperties_t* props);
ncclResult_t ib_make_vdevice(int* d, ncclNetVDeviceProps_t* props);
/* A protection domain of a port, shared by its comms (reference counted). */
ncclResult_t ib_dev_pd_get(int dev, struct ibv_pd** out);
void ib_dev_pd_put(int dev);
/* Registrations, cached per port and page range: the same buffer registered again (by any comm
 * on the port) shares one MR. type is NCCL_PTR_HOST or NCCL_PTR_CUDA; fd >= 0: a dma-buf. */
ncclResult_t ib_dev_reg(int dev, void* data, size_t size, int type, uint64_t offset, int fd,
                        struct ibv_mr** out);
void ib_dev_dereg(int dev, struct ibv_mr* mr);
/* Whether the NVIDIA peer-memory kernel module is loaded (GPU memory through ibv_reg_mr). */
bool ib_peer_mem_loaded(void);
/* Access flags for data buffers: local write, remote write and read, relaxed ordering when
 * enabled (NCCL_IB_PCI_RELAXED_ORDERING). */
int ib_access_flags(void);

/* ---- Connections (ib_conn.c, ib_data.c) --------------------------------------------------------
 */
/* A CTS entry: what the receiver tells the sender about one posted receive. 64 bytes, written by
 * one RDMA WRITE; `seq` (sequence number + 1) is the last field, and the sender reads the others
 * only after seeing it. */
typedef struct ib_cts {
  uint64_t addr;
  uint64_t size;
  uint32_t rkeys[IB_DEVS_PER_VDEV];
  int32_t tag;
  uint32_t pad[5];
  uint64_t seq;
} ib_cts_t;
_Static_assert(sizeof(ib_cts_t) == 64, "a CTS entry is one cache line");

enum { IB_REQ_FREE = 0, IB_REQ_SEND, IB_REQ_RECV, IB_REQ_FLUSH, IB_REQ_PUT };
/* wr_id = request index | kind << 16 */
enum { IB_WR_DATA = 1, IB_WR_RECV = 2, IB_WR_CTS = 3, IB_WR_FLUSH = 4, IB_WR_PUT = 5 };

struct ib_comm;
typedef struct ib_req {
  struct ib_comm* comm;
  int type;
  int events;   /* completions still expected */
  size_t size;  /* send: bytes; recv: from the immediate */
  uint64_t seq; /* message sequence number */
} ib_req_t;

/* Per port a comm uses. */
typedef struct ib_comm_dev {
  int dev; /* index in ib_devs */
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  struct ibv_mr* fifo_mr;  /* send: the CTS FIFO (remote write); recv: the local CTS staging */
  struct ibv_qp* flush_qp; /* recv: loopback QP for RDMA READ flushes, NULL: flushes off */
  struct ibv_mr* flush_mr;
} ib_comm_dev_t;

/* What one side tells the other at connection time (over the TCP side channel). */
typedef struct ib_dev_info {
  uint8_t gid[16];
  uint32_t lid;
  uint32_t fifo_rkey;
  uint8_t port;
  uint8_t link_layer;
  uint8_t mtu;
  uint8_t pad;
  char name[IB_NAME_MAX];
} ib_dev_info_t;

typedef struct ib_meta {
  uint64_t magic;
  uint32_t nqps;
  uint32_t ndevs;
  uint32_t qpn[IB_MAX_QPS];
  ib_dev_info_t devs[IB_DEVS_PER_VDEV];
  uint64_t fifo_addr; /* sender: its CTS FIFO */
  int32_t split;      /* sender: NCCL_IB_SPLIT_DATA_ON_QPS */
  int32_t tc;
  int32_t sl;
  int32_t pad;
  char host[64];
} ib_meta_t;

typedef struct ib_comm {
  bool is_send;
  int vdev;
  int ndevs;
  ib_comm_dev_t devs[IB_DEVS_PER_VDEV];
  int nqps;
  struct ibv_qp* qps[IB_MAX_QPS]; /* QP q lives on devs[q % ndevs] */
  int rem_ndevs;
  ib_dev_info_t rem_devs[IB_DEVS_PER_VDEV];
  bool split;
  bool ar;
  socket_conn_t sock; /* the setup channel, kept to notice a peer that exits */
  char peer[128];     /* "host (address)" for messages */
  uint64_t next_liveness_ns;
  uint64_t port_down_since; /* when a port of this comm was first seen down (0: up) */
  uint64_t closed_since;    /* when the side channel was first seen closed (0: open) */
  ncclResult_t error;       /* first failure: later calls return it without logging again */
  uint64_t seq;             /* messages posted */
  ib_req_t reqs[2 * IB_MAX_REQS];
  /* send */
  ib_cts_t* fifo; /* IB_MAX_REQS entries, written by the peer */
  /* recv */
  ib_cts_t* cts; /* IB_MAX_REQS staging entries */
  uint64_t rem_fifo_addr;
  bool flush;      /* iflush issues an RDMA READ */
  char* flush_buf; /* its landing place */
} ib_comm_t;

/* The setup state of a comm on its way (connect or accept may take several calls). */
typedef struct ib_pending {
  ib_comm_t* comm;
  int stage;
  ib_meta_t meta; /* the peer's, being received */
  size_t done;
  uint8_t ready;
} ib_pending_t;

typedef struct ib_listen {
  int vdev;
  socket_conn_t sock;
  uint64_t magic;
  ib_pending_t pending;
} ib_listen_t;

/* The per-communicator context (v11 init): its traffic class. */
typedef struct ib_ctx {
  int traffic_class;
} ib_ctx_t;

ncclResult_t ib_listen(void* ctx, int dev, void* handle, void** listen_comm);
ncclResult_t ib_connect(void* ctx, int dev, void* handle, void** send_comm,
                        ncclNetDeviceHandle_t** dev_comm);
ncclResult_t ib_accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_t** dev_comm);
ncclResult_t ib_close_comm(void* comm);
ncclResult_t ib_close_listen(void* listen_comm);

ncclResult_t ib_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t ib_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
ncclResult_t ib_dereg_mr(void* comm, void* mhandle);
ncclResult_t ib_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                      void* phandle, void** request);
ncclResult_t ib_irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                      void** mhandles, void** phandles, void** request);
ncclResult_t ib_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                       void** request);
ncclResult_t ib_test(void* request, int* done, int* sizes);
/* One-sided writes (net.h, net_rma_ops_t): a plain RDMA WRITE, and an RDMA fetch-and-add, on the
 * send comm's first QP. */
ncclResult_t ib_iput(void* send_comm, const void* data, size_t bytes, void* mhandle,
                     const net_rma_key_t* dst, uint64_t dst_off, void** request);
ncclResult_t ib_iadd(void* send_comm, uint64_t* scratch, void* mhandle, const net_rma_key_t* dst,
                     uint64_t dst_off, uint64_t add, void** request);
ncclResult_t ib_check(void* comm);
/* Marks the comm failed with res after the caller logged why; returns res. */
ncclResult_t ib_comm_fail(ib_comm_t* c, ncclResult_t res);
/* A memory handle: one MR per port of the comm. */
typedef struct ib_mhandle {
  int ndevs;
  int devs[IB_DEVS_PER_VDEV];
  struct ibv_mr* mrs[IB_DEVS_PER_VDEV];
} ib_mhandle_t;
#endif /* BATON_HAVE_VERBS */

#endif /* BATON_NET_IB_H */
