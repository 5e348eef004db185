/* NET transport: a connection through the network chosen by net_select (an ncclNet plugin or a
 * built-in: IB verbs, sockets). Each side keeps its FIFO in its own memory; the proxy thread moves
 * filled slots from the sender's FIFO to the receiver's (src/proxy/proxy.c has the format).
 *   receiver: recv_setup picks a NIC, allocates the FIFO and listens; the listen handle and the
 *             NIC index are the connect info; recv_connect accepts, registers the buffers with
 *             the network and hands the connection to the proxy.
 *   sender:   send_connect picks its NIC (NCCL_CROSS_NIC: the receiver's rail or its own closest),
 *             allocates the FIFO (sized like the receiver's), connects, registers, hands over.
 * Choices per communicator (net_state_t, made at its first NET connection): the network and its
 * context, each NIC's PCI path from this rank's GPU (src/topo), the NICs closest to the GPU
 * (channels spread over them), the proxy thread's CPUs (the GPU's, NCCL_IGNORE_CPU_AFFINITY).
 * Per connection: GPUDirect RDMA (net_gdr.c) puts the Simple buffer in GPU memory, else it is
 * host memory on the GPU's (or the NIC's) NUMA node; an INFO line says which and why.
 * A network's connect may need the peer's accept to finish (the IB network's does: the QPs are
 * paired both ways). transport_connect runs every rank's connects before its accepts, so while a
 * connect waits, this rank also accepts on every receive it has set up (pending_recv): two ranks
 * connecting to each other then never wait on each other. */
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "proxy/proxy.h"
#include "transport/transport.h"

#define NET_MAX_DEVS 64

typedef struct net_info {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  int dev; /* the receiver's NIC: the sender's rail under NCCL_CROSS_NIC 0 and 2 */
  int buff_bytes[PROTO_COUNT];
} net_info_t;
_Static_assert(sizeof(net_info_t) <= CONN_INFO_BYTES, "connect info must fit");

typedef struct net_dev {
  ncclNetProperties_t props;
  topo_path_t path; /* from this rank's GPU (SYS: unknown or no GPU) */
  int numa;         /* the NIC's NUMA node, -1 unknown */
} net_dev_t;

/* The network of a transport context and what this rank chose there. */
typedef struct net_state {
  const ncclNet_t* net;
  void* ctx; /* the communicator's network context (v11 init) */
  int ndev;
  net_dev_t devs[NET_MAX_DEVS];
  int nnear; /* the NICs closest to the GPU, in index order */
  int near[NET_MAX_DEVS];
  int ring_dev[TOPO_RAIL_MAX_NICS]; /* the device of each of topo->nics (the rings' NICs), -1 */
  /* PXN (topo_nic_relay): the topology GPU a send through each device goes through, -1 none */
  int relay[NET_MAX_DEVS];
  bool relayed[NET_MAX_DEVS]; /* relay[i] >= 0 */
  bool own_far;               /* the closest devices are beyond the GPU's PCIe switches */
  const topo_gpu_t* gpu; /* this rank's GPU (CUDA executor), NULL for the host executor */
  bool gpu_gdr, gpu_dmabuf, gpu_nvlink_peer;
  bool bind; /* the proxy thread runs on `cpus` */
  cpu_set_t cpus;
  struct net_res** pending_recv; /* receives set up, not accepted yet */
  int npending, cap_pending;
} net_state_t;

typedef struct net_res {
  transport_ctx_t* ctx;
  const ncclNet_t* net;
  void* net_ctx;
  int dev;
  void* listen_comm;
  void* comm; /* send or recv comm */
  char* mem;  /* host FIFO block (transport_fifo_bytes) */
  size_t mem_bytes;
  bool gpu_mapped; /* mem is registered with CUDA */
  net_gdr_mode_t gdr;
  void* gdr_ptr; /* the Simple buffer in GPU memory, with GPUDirect */
  size_t gdr_bytes;
  int gdr_fd;
  int gdr_dev; /* the CUDA ordinal of a relay GPU holding gdr_ptr (PXN), -1: the rank's GPU */
  char* staging; /* the Simple buffer in host memory after a failed GPUDirect registration */
  size_t staging_bytes;
  bool staging_mapped;
  void* mh[PROTO_COUNT];
  ncclResult_t accept_error; /* an accept run for it while another connection waited */
  proxy_conn_t pconn;
} net_res_t;

/* ---- The communicator's network and NICs --------------------------------------------------- */
static void net_state_log(const transport_ctx_t* ctx, const net_state_t* st) {
  if (!LOG_ENABLED(NCCL_LOG_INFO)) return;
  char line[512] = "";
  size_t used = 0;
  for (int i = 0; i < st->nnear && used < sizeof(line); i++) {
    const net_dev_t* d = &st->devs[st->near[i]];
    used += (size_t)snprintf(line + used, sizeof(line) - used, " [%d]%s", st->near[i],
                             d->props.name ? d->props.name : "?");
  }
  char gpu[TOPO_BUSID_LEN] = "none";
  if (st->gpu != NULL) topo_busid_format(st->gpu->bus_id, gpu);
  INFO(NCCL_INIT | NCCL_NET,
       "NET/%s: rank %d (GPU %s) uses %d of %d device(s), GPU-NIC path %s:%s; proxy CPUs %s",
       st->net->name, ctx->rank, gpu, st->nnear, st->ndev,
       topo_path_names[st->devs[st->near[0]].path], line,
       st->bind ? (st->gpu && st->gpu->cpus[0] ? st->gpu->cpus : "?") : "unbound");
}

static void net_state_place(const transport_ctx_t* ctx, net_state_t* st) {
  const peer_info_t* me = &ctx->peers[ctx->rank];
  st->gpu = ctx->gpu_fifos ? topo_system_gpu_info(ctx->topo, me->bus_id) : NULL;
  if (st->gpu != NULL) {
    transport_net_gdr_caps(me->cuda_dev, &st->gpu_gdr, &st->gpu_dmabuf);
    int g = topo_system_gpu(ctx->topo, me->bus_id);
    st->gpu_nvlink_peer = ctx->topo->ngpus == 1;
    for (int j = 0; j < ctx->topo->ngpus; j++)
      st->gpu_nvlink_peer |=
          j != g && ctx->topo->paths[(size_t)g * ctx->topo->ngpus + j] == TOPO_PATH_NVL;
    cpu_set_t allowed;
    if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
      st->bind = topo_cpu_affinity(st->gpu->cpus, &allowed,
                                   param_int(PARAM_IGNORE_CPU_AFFINITY) != 0, &st->cpus);
  }
  topo_path_t best = TOPO_PATH_SYS;
  for (int k = 0; k < TOPO_RAIL_MAX_NICS; k++) st->ring_dev[k] = -1;
  int ntopo = ctx->topo != NULL ? ctx->topo->nnics : 0;
  if (ntopo > TOPO_RAIL_MAX_NICS) ntopo = TOPO_RAIL_MAX_NICS;
  for (int i = 0; i < st->ndev; i++) {
    net_dev_t* d = &st->devs[i];
    topo_nic_t nic;
    bool placed = topo_nic_describe(d->props.pciPath, &nic);
    d->path = TOPO_PATH_SYS;
    d->numa = -1;
    if (placed) {
      d->numa = nic.numa;
      d->path = topo_gpu_nic_path(st->gpu, &nic);
    }
    if (d->path < best) best = d->path;
    for (int k = 0; k < ntopo; k++)
      if (st->ring_dev[k] < 0 &&
          transport_net_same_nic(&ctx->topo->nics[k], d->props.name, placed ? &nic : NULL))
        st->ring_dev[k] = i;
  }
  st->nnear = 0;
  for (int i = 0; i < st->ndev; i++)
    if (st->devs[i].path == best) st->near[st->nnear++] = i;
  st->own_far = best > TOPO_PATH_PXB;
  bool pxn = st->gpu != NULL && topo_pxn_enabled();
  for (int i = 0; i < st->ndev; i++) st->relay[i] = -1;
  for (int k = 0; k < ntopo && pxn; k++)
    if (st->ring_dev[k] >= 0) st->relay[st->ring_dev[k]] = topo_nic_relay(ctx->topo, me->bus_id, k);
  for (int i = 0; i < st->ndev; i++) st->relayed[i] = st->relay[i] >= 0;
}

static ncclResult_t net_state_open(transport_ctx_t* ctx, net_state_t* st) {
  CHECK(net_select(&st->net, &st->ndev));
  if (st->ndev > NET_MAX_DEVS) st->ndev = NET_MAX_DEVS;
  for (int i = 0; i < st->ndev; i++) CHECK(st->net->getProperties(i, &st->devs[i].props));
  CHECK(net_ctx_open(st->net, ctx->comm_hash, ctx->traffic_class, &st->ctx));
  net_state_place(ctx, st);
  net_state_log(ctx, st);
  return ncclSuccess;
}

static ncclResult_t net_state_get(transport_ctx_t* ctx, net_state_t** out) {
  if (ctx->net == NULL) {
    net_state_t* st = NULL;
    CHECK(MEM_CALLOC(&st, 1));
    ncclResult_t res = net_state_open(ctx, st);
    if (res != ncclSuccess) {
      free(st);
      return res;
    }
    ctx->net = st;
  }
  *out = ctx->net;
  return ncclSuccess;
}

ncclResult_t transport_net_context(transport_ctx_t* ctx, const ncclNet_t** net, void** net_ctx,
                                   int* dev) {
  net_state_t* st = NULL;
  CHECK(net_state_get(ctx, &st));
  *net = st->net;
  *net_ctx = st->ctx;
  *dev = st->near[0];
  return ncclSuccess;
}

void transport_net_release(transport_ctx_t* ctx) {
  net_state_t* st = ctx->net;
  if (st == NULL) return;
  net_ctx_close(st->net, st->ctx);
  free(st->pending_recv);
  free(st);
  ctx->net = NULL;
}

int transport_net_pick_ring_nic(const int* near, int nnear, int ndev, int channel, int own,
                                int rail, int cross_nic) {
  int mine = own >= 0 && own < ndev ? own : near[channel % nnear];
  if (rail < 0 || rail >= ndev || rail == mine) return mine;
  if (cross_nic == 0) return rail;
  if (cross_nic == 1) return mine;
  for (int i = 0; i < nnear; i++)
    if (near[i] == rail) return rail;
  return mine;
}

int transport_net_pick_nic(const int* near, int nnear, int ndev, int channel, int rail,
                           int cross_nic) {
  return transport_net_pick_ring_nic(near, nnear, ndev, channel, -1, rail, cross_nic);
}

int transport_net_pxn_nic(int picked, int rail, int ndev, const bool* relayed, bool own_far,
                          int level) {
  if (rail < 0 || rail >= ndev || rail == picked || relayed == NULL || !relayed[rail])
    return picked;
  return level >= 2 || (level == 1 && own_far) ? rail : picked;
}

bool transport_net_same_nic(const topo_nic_t* t, const char* dev_name, const topo_nic_t* placed) {
  if (placed != NULL && t->bus_id >= 0) return t->bus_id == placed->bus_id;
  size_t len = strlen(t->name);
  return dev_name != NULL && len > 0 && strncmp(dev_name, t->name, len) == 0 &&
         (dev_name[len] == '\0' || dev_name[len] == '+');
}

int transport_ring_nic(const transport_ctx_t* ctx, int channel, int r) {
  if (ctx->ring_nics == NULL || ctx->nrings < 1 || channel < 0) return -1;
  return ctx->ring_nics[(size_t)(channel % ctx->nrings) * (size_t)ctx->nranks + (size_t)r];
}

bool transport_layout_hop(const transport_ctx_t* ctx, int channel, int peer) {
  int own = transport_ring_nic(ctx, channel, ctx->rank);
  return own >= 0 && own == transport_ring_nic(ctx, channel, peer);
}

int transport_net_virtual_dev(const transport_ctx_t* ctx, int channel, int peer, int is_send) {
  int near_me[NET_MAX_DEVS], near_peer[NET_MAX_DEVS];
  const topo_system_t* t = ctx->topo;
  int nnics = t != NULL ? t->nnics : 0;
  if (nnics == 0) return 0; /* one undescribed NIC */
  if (nnics > NET_MAX_DEVS) nnics = NET_MAX_DEVS;
  /* Every host of a virtual cluster is alike: the peer's closest NICs are found in this host's
   * topology by its GPU's bus id, and a NIC index means the same NIC on every host. */
  int nme = topo_nics_near(t, ctx->peers[ctx->rank].bus_id, near_me, nnics);
  int npeer = topo_nics_near(t, ctx->peers[peer].bus_id, near_peer, nnics);
  int cross = (int)param_int(PARAM_CROSS_NIC);
  int own = transport_ring_nic(ctx, channel, ctx->rank);
  if (!is_send) return transport_net_pick_ring_nic(near_me, nme, nnics, channel, own, -1, cross);
  int rail = transport_net_pick_ring_nic(near_peer, npeer, nnics, channel,
                                         transport_ring_nic(ctx, channel, peer), -1, cross);
  int dev = transport_net_pick_ring_nic(near_me, nme, nnics, channel, own, rail, cross);
  if (transport_layout_hop(ctx, channel, peer)) return dev; /* the layout's NICs */
  bool relayed[NET_MAX_DEVS];
  for (int k = 0; k < nnics; k++) relayed[k] = transport_net_virtual_relay(ctx, k) >= 0;
  const topo_gpu_t* g = topo_system_gpu_info(t, ctx->peers[ctx->rank].bus_id);
  bool own_far = topo_gpu_nic_path(g, &t->nics[near_me[0]]) > TOPO_PATH_PXB;
  return transport_net_pxn_nic(dev, rail, nnics, relayed, own_far, topo_p2p_pxn_level());
}

int transport_net_virtual_relay(const transport_ctx_t* ctx, int nic) {
  if (ctx->topo == NULL || !topo_pxn_enabled()) return -1;
  return topo_nic_relay(ctx->topo, ctx->peers[ctx->rank].bus_id, nic);
}

static ncclResult_t net_pending_add(net_state_t* st, net_res_t* r) {
  if (st->npending == st->cap_pending) {
    int cap = st->cap_pending ? 2 * st->cap_pending : 16;
    net_res_t** grown = realloc(st->pending_recv, (size_t)cap * sizeof(*grown));
    if (grown == NULL) {
      WARN("NET: out of memory listing %d pending receives", cap);
      return ncclSystemError;
    }
    st->pending_recv = grown;
    st->cap_pending = cap;
  }
  st->pending_recv[st->npending++] = r;
  return ncclSuccess;
}

static void net_pending_remove(net_state_t* st, const net_res_t* r) {
  for (int i = 0; st != NULL && i < st->npending; i++) {
    if (st->pending_recv[i] != r) continue;
    st->pending_recv[i] = st->pending_recv[--st->npending];
    return;
  }
}

/* One accept attempt on every receive still waiting for its sender (but `self`). */
static void net_pending_progress(net_state_t* st, const net_res_t* self) {
  ncclNetDeviceHandle_t* dev_handle = NULL;
  for (int i = 0; i < st->npending; i++) {
    net_res_t* p = st->pending_recv[i];
    if (p == self || p->comm != NULL || p->accept_error != ncclSuccess) continue;
    p->accept_error = p->net->accept(p->listen_comm, &p->comm, &dev_handle);
  }
}

static bool net_can_connect(const transport_ctx_t* ctx, const peer_info_t* me,
                            const peer_info_t* peer) {
  const ncclNet_t* net = NULL;
  if (ctx->virtual_conns) return true; /* a virtual cluster's network */
  return net_select(&net, NULL) == ncclSuccess;
}

/* ---- Buffers --------------------------------------------------------------------------------- */
/* Page-aligned, zeroed host memory on NUMA node numa (when libnuma can place it), mapped for the
 * GPU with the CUDA executor. */
static ncclResult_t net_host_alloc(transport_ctx_t* ctx, size_t bytes, int numa, char** out,
                                   bool* mapped) {
  char* p = NULL;
  if (posix_memalign((void**)&p, 4096, bytes) != 0) {
    WARN("NET: out of host memory for a %zu-byte FIFO (NCCL_BUFFSIZE)", bytes);
    return ncclSystemError;
  }
  topo_numa_bind_memory(p, bytes, numa); /* before the first touch */
  memset(p, 0, bytes);
  ncclResult_t res = transport_fifo_map(ctx, p, bytes, mapped);
  if (res != ncclSuccess) {
    free(p);
    return res;
  }
  *out = p;
  return ncclSuccess;
}

static void net_host_free(char* p, bool mapped) {
  if (p == NULL) return;
  if (mapped) transport_host_mem_unregister(p);
  free(p);
}

/* PXN (topo_nic_relay): the GPU a send through device dev goes through, NULL when none or when
 * this process cannot place a buffer on it (CUDA_VISIBLE_DEVICES hides it: an INFO line). */
typedef struct net_relay {
  const topo_gpu_t* gpu;
  int ordinal;      /* its CUDA ordinal in this process */
  topo_path_t path; /* its path to the NIC */
} net_relay_t;

static void net_relay_find(const transport_ctx_t* ctx, const net_state_t* st, const conn_t* conn,
                           int dev, net_relay_t* out) {
  *out = (net_relay_t){.gpu = NULL, .ordinal = -1, .path = TOPO_PATH_SYS};
  if (!conn->is_send || !ctx->gpu_fifos || st->relay[dev] < 0) return;
  const topo_gpu_t* g = &ctx->topo->gpus[st->relay[dev]];
  char bus[TOPO_BUSID_LEN];
  topo_busid_format(g->bus_id, bus);
  int ordinal = topo_gpu_local_ordinal(g->bus_id);
  if (ordinal < 0) {
    INFO(NCCL_NET, "NET: channel %02d send to rank %d: device %d is reached through GPU %s (PXN), "
         "which this process does not see; sending over the CPU instead", conn->channel,
         conn->peer, dev, bus);
    return;
  }
  topo_nic_t nic;
  out->path = topo_nic_describe(st->devs[dev].props.pciPath, &nic) ? topo_gpu_nic_path(g, &nic)
                                                                   : TOPO_PATH_SYS;
  out->gpu = g;
  out->ordinal = ordinal;
}

/* The rank's GPU writes a buffer on the relay's GPU over NVLink: peer access from the current
 * device (the rank's) to `relay_dev`. */
static bool net_relay_reach(int relay_dev) {
  cudaError_t e = cudaDeviceEnablePeerAccess(relay_dev, 0);
  if (e == cudaErrorPeerAccessAlreadyEnabled) e = cudaSuccess;
  if (e != cudaSuccess)
    INFO(NCCL_NET, "NET: no peer access to GPU %d for a PXN buffer: %s", relay_dev,
         cudaGetErrorString(e));
  (void)cudaGetLastError();
  return e == cudaSuccess;
}

/* Frees the GPUDirect buffer, on the relay's device when it is there (PXN). */
static void net_gdr_release(net_res_t* r) {
  int saved = -1;
  if (r->gdr_dev >= 0 && r->gdr_ptr != NULL && cudaGetDevice(&saved) == cudaSuccess)
    (void)cudaSetDevice(r->gdr_dev);
  transport_net_gdr_free(r->gdr_ptr, r->gdr_fd);
  if (saved >= 0) (void)cudaSetDevice(saved);
  (void)cudaGetLastError();
  r->gdr_ptr = NULL;
  r->gdr_fd = -1;
}

/* GPUDirect or not, for this connection; says which and why. With a relay (PXN) the NIC reads the
 * relay GPU's memory, so the relay's path to the NIC counts. */
static net_gdr_mode_t net_gdr_decide(const transport_ctx_t* ctx, const net_state_t* st,
                                     const conn_t* conn, int dev, const net_relay_t* relay,
                                     char* why, size_t len) {
  const net_dev_t* d = &st->devs[dev];
  net_gdr_query_t q = {.gpu_fifos = ctx->gpu_fifos && st->gpu != NULL,
                       .is_send = conn->is_send != 0,
                       .nic_ptr_support = d->props.ptrSupport,
                       .gpu_gdr = st->gpu_gdr,
                       .gpu_dmabuf = st->gpu_dmabuf && cu_driver() != NULL,
                       .gpu_sm = st->gpu ? st->gpu->sm : 0,
                       .gpu_nvlink_peer = st->gpu_nvlink_peer,
                       .path = relay->gpu != NULL ? relay->path : d->path,
                       .max_path = transport_net_gdr_level(),
                       .gdr_read = (int)param_int(PARAM_NET_GDR_READ),
                       .dmabuf_enable = param_int(PARAM_DMABUF_ENABLE) != 0};
  return transport_net_gdr(&q, why, len);
}

static ncclResult_t net_res_alloc(transport_ctx_t* ctx, conn_t* conn, const int buff_bytes[],
                                  int rail, net_res_t** out) {
  net_res_t* r = NULL;
  net_state_t* st = NULL;
  char why[192];
  CHECK(net_state_get(ctx, &st));
  CHECK(MEM_CALLOC(&r, 1));
  ncclResult_t res;
  r->ctx = ctx;
  r->net = st->net;
  r->net_ctx = st->ctx;
  r->gdr_fd = -1;
  r->gdr_dev = -1;
  int ring = transport_ring_nic(ctx, conn->channel, ctx->rank);
  int own = ring >= 0 && ring < TOPO_RAIL_MAX_NICS ? st->ring_dev[ring] : -1;
  r->dev = transport_net_pick_ring_nic(st->near, st->nnear, st->ndev, conn->channel, own, rail,
                                       (int)param_int(PARAM_CROSS_NIC));
  if (conn->is_send && !transport_layout_hop(ctx, conn->channel, conn->peer))
    /* point-to-point: the receiver's rail, through a peer GPU where it needs one */
    r->dev = transport_net_pxn_nic(r->dev, rail, st->ndev, st->relayed, st->own_far,
                                   topo_p2p_pxn_level());
  net_relay_t relay;
  net_relay_find(ctx, st, conn, r->dev, &relay);
  r->gdr = net_gdr_decide(ctx, st, conn, r->dev, &relay, why, sizeof(why));
  int host_bytes[PROTO_COUNT];
  memcpy(host_bytes, buff_bytes, sizeof(host_bytes));
  if (r->gdr != NET_GDR_OFF) {
    /* on the rank's GPU, or on the relay's, which the rank's GPU then writes over NVLink */
    int dev = relay.gpu != NULL ? relay.ordinal : ctx->peers[ctx->rank].cuda_dev;
    int saved = -1;
    /* Failures here fall back to host staging (INFO below), so they are not CUDA_CHECKed. */
    if (cudaGetDevice(&saved) != cudaSuccess || cudaSetDevice(dev) != cudaSuccess) saved = -1;
    ncclResult_t got = saved < 0 ? ncclUnhandledCudaError
                                 : transport_net_gdr_alloc((size_t)buff_bytes[PROTO_SIMPLE], r->gdr,
                                                           &r->gdr_ptr, &r->gdr_bytes, &r->gdr_fd);
    if (saved >= 0) (void)cudaSetDevice(saved);
    if (got == ncclSuccess && relay.gpu != NULL) { /* the rank's device is current: connects run in
                                                     the executor's scope (comm_res_enter) */
      r->gdr_dev = dev;
      if (!net_relay_reach(dev)) {
        net_gdr_release(r);
        r->gdr_dev = -1;
        got = ncclUnhandledCudaError;
      }
    }
    (void)cudaGetLastError();
    if (got == ncclSuccess) {
      host_bytes[PROTO_SIMPLE] = 0; /* the Simple buffer is in GPU memory */
    } else {
      snprintf(why, sizeof(why), "no GPU buffer could be set up for it (see above)");
      r->gdr = NET_GDR_OFF;
    }
  }
  size_t bytes = transport_fifo_bytes(host_bytes);
  int numa = st->gpu != NULL ? st->gpu->numa : st->devs[r->dev].numa;
  CHECK_GOTO(net_host_alloc(ctx, bytes, numa, &r->mem, &r->gpu_mapped), res, fail);
  r->mem_bytes = bytes;
  transport_fifo_attach(&conn->fifo, r->mem, host_bytes, CONN_FLAG_NET | CONN_FLAG_HOSTMEM);
  conn->fifo.net_dev = r->dev;
  if (r->gdr != NET_GDR_OFF) {
    conn->fifo.buffs[PROTO_SIMPLE] = r->gdr_ptr;
    conn->fifo.buff_bytes[PROTO_SIMPLE] = buff_bytes[PROTO_SIMPLE];
  }
  const net_dev_t* d = &st->devs[r->dev];
  char pxn[96] = "";
  if (r->gdr_dev >= 0) {
    char bus[TOPO_BUSID_LEN];
    topo_busid_format(relay.gpu->bus_id, bus);
    snprintf(pxn, sizeof(pxn), " through GPU %s (PXN over NVLink, its path %s)", bus,
             topo_path_names[relay.path]);
  }
  INFO(NCCL_INIT | NCCL_NET,
       "NET/%s: channel %02d %s rank %d on device %d (%s, %d Mb/s, GPU-NIC path %s)%s; "
       "GPUDirect RDMA %s: %s",
       r->net->name, conn->channel, conn->is_send ? "send to" : "receive from", conn->peer, r->dev,
       d->props.name ? d->props.name : "?", d->props.speed, topo_path_names[d->path], pxn,
       transport_net_gdr_name(r->gdr), why);
  *out = r;
  return ncclSuccess;
fail:
  net_gdr_release(r);
  free(r);
  return res;
}

static void net_dereg(net_res_t* r) {
  for (int p = 0; p < PROTO_COUNT; p++) {
    if (r->mh[p] == NULL) continue;
    ncclResult_t res = r->net->deregMr(r->comm, r->mh[p]);
    if (res != ncclSuccess)
      INFO(NCCL_NET, "NET/%s: deregMr returned %d at teardown", r->net->name, (int)res);
    r->mh[p] = NULL;
  }
}

/* Registers the buffers the network moves: the sender's slots of every protocol, the receiver's
 * Simple slots (line protocols land in the proxy's bounce buffer). A GPUDirect buffer the network
 * refuses is replaced by host memory, with an INFO line. */
static ncclResult_t net_register(transport_ctx_t* ctx, conn_t* conn, net_res_t* r) {
  conn_fifo_t* f = &conn->fifo;
  for (int p = 0; p < PROTO_COUNT; p++) {
    if (f->buffs[p] == NULL || f->buff_bytes[p] <= 0) continue;
    if (!conn->is_send && p != PROTO_SIMPLE) continue;
    size_t n = (size_t)f->buff_bytes[p];
    if (p == PROTO_SIMPLE && r->gdr != NET_GDR_OFF) {
      ncclResult_t res =
          r->gdr == NET_GDR_DMABUF
              ? r->net->regMrDmaBuf(r->comm, f->buffs[p], n, NCCL_PTR_CUDA, 0, r->gdr_fd, &r->mh[p])
              : r->net->regMr(r->comm, f->buffs[p], n, NCCL_PTR_CUDA, &r->mh[p]);
      if (res == ncclSuccess) continue;
      INFO(NCCL_INIT | NCCL_NET,
           "NET/%s: channel %02d %s rank %d: the network refused the GPU buffer (%s, error %d); "
           "GPUDirect RDMA off, staging through host memory",
           r->net->name, conn->channel, conn->is_send ? "send to" : "receive from", conn->peer,
           transport_net_gdr_name(r->gdr), (int)res);
      net_gdr_release(r);
      r->gdr_bytes = 0;
      r->gdr_dev = -1;
      r->gdr = NET_GDR_OFF;
      r->mh[p] = NULL;
      CHECK(net_host_alloc(ctx, n, -1, &r->staging, &r->staging_mapped));
      r->staging_bytes = n;
      f->buffs[p] = r->staging;
    }
    CHECK(r->net->regMr(r->comm, f->buffs[p], n, NCCL_PTR_HOST, &r->mh[p]));
  }
  return ncclSuccess;
}

/* ---- Connecting ---------------------------------------------------------------------------- */
/* Connect/accept may return no comm yet: call again, bounded by the abort flag and a timeout. */
static ncclResult_t net_wait_comm(transport_ctx_t* ctx, conn_t* conn, net_res_t* r, void* handle) {
  uint64_t limit_ms = (uint64_t)param_int(PARAM_BOOTSTRAP_TIMEOUT_MS);
  uint64_t deadline = clock_ns() + limit_ms * 1000000ull;
  ncclNetDeviceHandle_t* dev_handle = NULL;
  CHECK(r->accept_error); /* failed while another connection waited (logged then) */
  while (r->comm == NULL) {
    if (conn->is_send)
      CHECK(r->net->connect(r->net_ctx, r->dev, handle, &r->comm, &dev_handle));
    else
      CHECK(r->net->accept(r->listen_comm, &r->comm, &dev_handle));
    if (r->comm != NULL) break;
    net_pending_progress(ctx->net, r);
    if (ctx->abort_flag != NULL && __atomic_load_n(ctx->abort_flag, __ATOMIC_ACQUIRE)) {
      INFO(NCCL_NET, "NET: connecting with rank %d aborted", conn->peer);
      return ncclInternalError;
    }
    if (clock_ns() > deadline) {
      WARN(
          "NET/%s: rank %d gave up %s rank %d on channel %d after %llu ms "
          "(NCCL_BOOTSTRAP_TIMEOUT_MS)",
          r->net->name, ctx->rank, conn->is_send ? "connecting to" : "accepting from", conn->peer,
          conn->channel, (unsigned long long)limit_ms);
      return ncclRemoteError;
    }
    struct timespec nap = {.tv_sec = 0, .tv_nsec = 200000};
    nanosleep(&nap, NULL);
  }
  return ncclSuccess;
}

static ncclResult_t net_hand_to_proxy(transport_ctx_t* ctx, conn_t* conn, net_res_t* r) {
  const net_state_t* st = ctx->net;
  CHECK(net_register(ctx, conn, r));
  if (ctx->proxy == NULL)
    CHECK(proxy_create(ctx->abort_flag, ctx->err_buf, ctx->err_len, st->bind ? &st->cpus : NULL,
                       &ctx->proxy));
  const ncclNetProperties_t* props = &st->devs[r->dev].props;
  bool gpu_recv = !conn->is_send && r->gdr != NET_GDR_OFF;
  bool flush = param_int(PARAM_NET_FORCE_FLUSH) > 0 ||
               (gpu_recv && (props->forceFlush || (st->gpu != NULL && st->gpu->sm < 90)));
  r->pconn = (proxy_conn_t){.fifo = &conn->fifo,
                            .is_send = conn->is_send,
                            .net_comm = r->comm,
                            .net = r->net,
                            .peer = conn->peer,
                            .flush = !conn->is_send && flush};
  memcpy(r->pconn.mh, r->mh, sizeof(r->mh));
  CHECK(proxy_add_conn(ctx->proxy, &r->pconn));
  snprintf(conn->desc, sizeof(conn->desc), "NET/%s/%d%s", r->net->name, r->dev,
           r->gdr != NET_GDR_OFF ? "/GDRDMA" : "");
  conn->bytes = r->mem_bytes + r->gdr_bytes + r->staging_bytes; /* each side has its own */
  return ncclSuccess;
}

static ncclResult_t net_res_free(net_res_t* r) {
  if (r == NULL) return ncclSuccess;
  net_pending_remove(r->ctx->net, r);
  if (r->comm != NULL) {
    net_dereg(r);
    if (r->pconn.is_send)
      r->net->closeSend(r->comm);
    else
      r->net->closeRecv(r->comm);
  }
  if (r->listen_comm != NULL) r->net->closeListen(r->listen_comm);
  net_host_free(r->mem, r->gpu_mapped);
  net_host_free(r->staging, r->staging_mapped);
  net_gdr_release(r);
  free(r);
  return ncclSuccess;
}

static ncclResult_t net_recv_setup(transport_ctx_t* ctx, conn_t* conn, void* info) {
  net_res_t* r = NULL;
  net_info_t ni;
  ncclResult_t res;
  memset(&ni, 0, sizeof(ni));
  CHECK(net_res_alloc(ctx, conn, ctx->buff_bytes, -1, &r));
  CHECK_GOTO(r->net->listen(r->net_ctx, r->dev, ni.handle, &r->listen_comm), res, fail);
  CHECK_GOTO(net_pending_add(ctx->net, r), res, fail);
  ni.dev = r->dev;
  memcpy(ni.buff_bytes, ctx->buff_bytes, sizeof(ni.buff_bytes));
  memcpy(info, &ni, sizeof(ni));
  snprintf(conn->desc, sizeof(conn->desc), "NET/%s/%d", r->net->name, r->dev);
  conn->priv = r;
  return ncclSuccess;
fail:
  net_res_free(r);
  return res;
}

static ncclResult_t net_recv_connect(transport_ctx_t* ctx, conn_t* conn) {
  net_res_t* r = conn->priv;
  CHECK(net_wait_comm(ctx, conn, r, NULL));
  net_pending_remove(ctx->net, r);
  r->pconn.is_send = 0;
  r->net->closeListen(r->listen_comm);
  r->listen_comm = NULL;
  CHECK(net_hand_to_proxy(ctx, conn, r));
  return ncclSuccess;
}

static ncclResult_t net_send_connect(transport_ctx_t* ctx, conn_t* conn, const void* info) {
  net_res_t* r = NULL;
  net_info_t ni;
  ncclResult_t res;
  memcpy(&ni, info, sizeof(ni));
  CHECK(net_res_alloc(ctx, conn, ni.buff_bytes, ni.dev, &r));
  r->pconn.is_send = 1;
  CHECK_GOTO(net_wait_comm(ctx, conn, r, ni.handle), res, fail);
  CHECK_GOTO(net_hand_to_proxy(ctx, conn, r), res, fail);
  conn->priv = r;
  return ncclSuccess;
fail:
  net_res_free(r);
  return res;
}

/* Called by transport_ctx_free once the proxy has stopped (it may still reference the FIFO). */
static ncclResult_t net_free(transport_ctx_t* ctx, conn_t* conn) {
  net_res_free(conn->priv);
  conn->priv = NULL;
  return ncclSuccess;
}

const transport_ops_t transport_net_ops = {
    .name = "NET",
    .can_connect = net_can_connect,
    .recv_setup = net_recv_setup,
    .send_connect = net_send_connect,
    .recv_connect = net_recv_connect,
    .free = net_free,
};
