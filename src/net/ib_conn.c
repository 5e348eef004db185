/* IB connections: listen, connect and accept over a TCP side channel, then reliable-connected QPs.
 *
 * Setup (neither call blocks on the peer; each returns a NULL comm until it is done):
 *   sender (connect):  TCP connect to the listener, create the QPs (INIT) and its CTS FIFO, send
 *                      its ib_meta_t; once the receiver's arrives, QPs to RTR and RTS, send one
 *                      "ready" byte: done.
 *   receiver (accept): take the TCP connection, read the sender's ib_meta_t, create as many QPs on
 *                      its own NIC, take them to RTR and RTS, send its ib_meta_t; done when the
 *                      "ready" byte arrives (so no CTS is written before the sender's QPs can take
 *                      it). The sender decides what both ends must share: QP count, striping, TC
 *                      and SL.
 * QP q is paired with the peer's QP q; it lives on port q % ndevs of its side. */
#ifdef BATON_HAVE_VERBS
#include <stdlib.h>

#include "net/ib.h"

#define IB_MAGIC 0x4261746f6e494221ull /* "BatonIB!" */
#define IB_FLUSH_BYTES 4096

enum { IB_STAGE_START = 0, IB_STAGE_META, IB_STAGE_READY };

/* The listen handle: where to connect; `pending` is the sender's own setup state (the caller
 * passes the same handle memory to every connect call; the listener sends it zeroed). */
typedef struct ib_handle {
  uint64_t magic;
  socket_addr_t addr;
  ib_pending_t* pending;
} ib_handle_t;
_Static_assert(sizeof(ib_handle_t) <= NCCL_NET_HANDLE_MAXSIZE, "handle must fit");

/* ---- QPs ----------------------------------------------------------------------------------------
 */
static ncclResult_t ib_qp_create(ib_comm_t* c, ib_comm_dev_t* cd, int max_send, int max_recv,
                                 struct ibv_qp** out) {
  const ib_verbs_t* v = ib_verbs();
  const ib_dev_t* d = &ib_devs[cd->dev];
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof(ia));
  ia.qp_context = c;
  ia.send_cq = cd->cq;
  ia.recv_cq = cd->cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = (uint32_t)max_send;
  ia.cap.max_recv_wr = (uint32_t)max_recv;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.cap.max_inline_data = sizeof(ib_cts_t);
  struct ibv_qp* qp = v->create_qp(cd->pd, &ia);
  if (qp == NULL) { /* a provider without inline data */
    ia.cap.max_inline_data = 0;
    qp = v->create_qp(cd->pd, &ia);
  }
  if (qp == NULL) {
    WARN("NET/IB: creating a QP on %s:%d failed: %s (%d send, %d receive requests)", d->name,
         d->port, strerror(errno), max_send, max_recv);
    return ncclSystemError;
  }
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = (uint16_t)param_int(PARAM_IB_PKEY);
  a.port_num = (uint8_t)d->port;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE |
                      (d->atomics ? IBV_ACCESS_REMOTE_ATOMIC : 0);
  int rc =
      v->modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
  if (rc != 0) {
    WARN("NET/IB: QP %u on %s:%d to INIT failed: %s (NCCL_IB_PKEY=%lld)", qp->qp_num, d->name,
         d->port, strerror(rc), (long long)param_int(PARAM_IB_PKEY));
    v->destroy_qp(qp);
    return ncclSystemError;
  }
  *out = qp;
  return ncclSuccess;
}

/* INIT -> RTR -> RTS towards remote QP rqpn on the remote port r. */
static ncclResult_t ib_qp_connect(struct ibv_qp* qp, const ib_dev_t* d, const ib_dev_info_t* r,
                                  uint32_t rqpn, int tc, int sl, const char* peer) {
  const ib_verbs_t* v = ib_verbs();
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = d->mtu < (enum ibv_mtu)r->mtu ? d->mtu : (enum ibv_mtu)r->mtu;
  a.dest_qp_num = rqpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  union ibv_gid rgid;
  memcpy(rgid.raw, r->gid, 16);
  bool same_subnet = d->link_layer == IBV_LINK_LAYER_INFINIBAND &&
                     rgid.global.subnet_prefix == d->gid.global.subnet_prefix;
  if (r->link_layer == IBV_LINK_LAYER_ETHERNET || !same_subnet) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = rgid;
    a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = (uint8_t)tc;
  }
  if (r->link_layer == IBV_LINK_LAYER_INFINIBAND) a.ah_attr.dlid = (uint16_t)r->lid;
  a.ah_attr.sl = (uint8_t)sl;
  a.ah_attr.port_num = (uint8_t)d->port;
  int rc = v->modify_qp(qp, &a,
                        IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc == 0) {
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = (uint8_t)param_int(PARAM_IB_TIMEOUT);
    a.retry_cnt = (uint8_t)param_int(PARAM_IB_RETRY_CNT);
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    rc = v->modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  }
  if (rc != 0) {
    char gid[INET6_ADDRSTRLEN];
    WARN(
        "NET/IB: connecting QP %u on %s:%d to QP %u of %s (remote GID %s, LID %u) failed: %s "
        "(check NCCL_IB_GID_INDEX, NCCL_IB_TC, NCCL_IB_SL, NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT)",
        qp->qp_num, d->name, d->port, rqpn, peer, ib_gid_format(r->gid, gid, sizeof(gid)), r->lid,
        strerror(rc));
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* ---- Comms --------------------------------------------------------------------------------------
 */
static int ib_param_qps(void) {
  int64_t n = param_int(PARAM_IB_QPS_PER_CONNECTION);
  if (n < 1) n = 1;
  if (n > IB_MAX_QPS) {
    static int warned;
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      WARN("NCCL_IB_QPS_PER_CONNECTION=%lld: at most %d QPs per connection; using %d", (long long)n,
           IB_MAX_QPS, IB_MAX_QPS);
    n = IB_MAX_QPS;
  }
  return (int)n;
}

/* The traffic class a sender asks for: NCCL_IB_TC, else the communicator's, else 0. */
static int ib_traffic_class(const ib_ctx_t* ctx) {
  int64_t tc = param_int(PARAM_IB_TC);
  if (tc >= 0) return (int)tc;
  if (ctx != NULL && ctx->traffic_class >= 0) return ctx->traffic_class;
  return 0;
}

ncclResult_t ib_close_comm(void* comm) {
  ib_comm_t* c = comm;
  if (c == NULL) return ncclSuccess;
  const ib_verbs_t* v = ib_verbs();
  socket_close(&c->sock);
  for (int q = 0; q < c->nqps; q++)
    if (c->qps[q] != NULL) v->destroy_qp(c->qps[q]);
  for (int i = 0; i < c->ndevs; i++) {
    ib_comm_dev_t* cd = &c->devs[i];
    if (cd->flush_qp != NULL) v->destroy_qp(cd->flush_qp);
    if (cd->flush_mr != NULL) ib_dev_dereg(cd->dev, cd->flush_mr);
    if (cd->fifo_mr != NULL) ib_dev_dereg(cd->dev, cd->fifo_mr);
    if (cd->cq != NULL) v->destroy_cq(cd->cq);
    if (cd->pd != NULL) ib_dev_pd_put(cd->dev);
  }
  free(c->fifo);
  free(c->cts);
  free(c->flush_buf);
  free(c);
  return ncclSuccess;
}

/* A self-connected QP per port for flushes (RDMA READ of received data into flush_buf). */
static ncclResult_t ib_flush_setup(ib_comm_t* c) {
  if (posix_memalign((void**)&c->flush_buf, 4096, IB_FLUSH_BYTES) != 0) {
    c->flush_buf = NULL;
    WARN("NET/IB: out of memory for a flush buffer");
    return ncclSystemError;
  }
  memset(c->flush_buf, 0, IB_FLUSH_BYTES);
  for (int i = 0; i < c->ndevs; i++) {
    ib_comm_dev_t* cd = &c->devs[i];
    const ib_dev_t* d = &ib_devs[cd->dev];
    CHECK(ib_dev_reg(cd->dev, c->flush_buf, IB_FLUSH_BYTES, NCCL_PTR_HOST, 0, -1, &cd->flush_mr));
    CHECK(ib_qp_create(c, cd, IB_MAX_REQS, 1, &cd->flush_qp));
    ib_dev_info_t self = {.lid = d->lid,
                          .port = (uint8_t)d->port,
                          .link_layer = (uint8_t)d->link_layer,
                          .mtu = (uint8_t)d->mtu};
    memcpy(self.gid, d->gid.raw, 16);
    CHECK(ib_qp_connect(cd->flush_qp, d, &self, cd->flush_qp->qp_num, 0, 0, "itself (flush)"));
  }
  c->flush = true;
  return ncclSuccess;
}

/* Ports, CQs, QPs (INIT) and the CTS buffers of a new comm on NIC vdev. */
static ncclResult_t ib_comm_create(int vdev, bool is_send, int nqps, bool split, ib_comm_t** out) {
  const ib_verbs_t* v = ib_verbs();
  ib_comm_t* c = NULL;
  ncclResult_t res = ncclSuccess;
  if (vdev < 0 || vdev >= ib_nvdevs) {
    WARN("NET/IB: device %d does not exist (%d devices)", vdev, ib_nvdevs);
    return ncclInvalidArgument;
  }
  CHECK(MEM_CALLOC(&c, 1));
  c->sock.fd = -1;
  c->is_send = is_send;
  c->vdev = vdev;
  c->split = split;
  c->nqps = nqps;
  c->ndevs = ib_vdevs[vdev].ndevs;
  c->ar = true;
  for (int i = 0; i < c->ndevs; i++) {
    ib_comm_dev_t* cd = &c->devs[i];
    cd->dev = ib_vdevs[vdev].devs[i];
    c->ar &= ib_devs[cd->dev].ar;
    CHECK_GOTO(ib_dev_pd_get(cd->dev, &cd->pd), res, fail);
    int qps_here = (nqps + c->ndevs - 1 - i) / c->ndevs;
    int cqe = qps_here * 4 * IB_MAX_REQS + 2 * IB_MAX_REQS;
    cd->cq = v->create_cq(ib_devs[cd->dev].ctx, cqe, NULL, NULL, 0);
    if (cd->cq == NULL) {
      WARN("NET/IB: creating a %d-entry CQ on %s failed: %s", cqe, ib_devs[cd->dev].name,
           strerror(errno));
      res = ncclSystemError;
      goto fail;
    }
  }
  for (int q = 0; q < nqps; q++)
    CHECK_GOTO(ib_qp_create(c, &c->devs[q % c->ndevs], 2 * IB_MAX_REQS, IB_MAX_REQS, &c->qps[q]),
               res, fail);
  ib_cts_t** buf = is_send ? &c->fifo : &c->cts;
  if (posix_memalign((void**)buf, 4096, IB_MAX_REQS * sizeof(ib_cts_t)) != 0) {
    *buf = NULL;
    WARN("NET/IB: out of memory for a CTS FIFO");
    res = ncclSystemError;
    goto fail;
  }
  memset(*buf, 0, IB_MAX_REQS * sizeof(ib_cts_t));
  for (int i = 0; i < c->ndevs; i++)
    CHECK_GOTO(ib_dev_reg(c->devs[i].dev, *buf, IB_MAX_REQS * sizeof(ib_cts_t), NCCL_PTR_HOST, 0,
                          -1, &c->devs[i].fifo_mr),
               res, fail);
  for (int i = 0; i < IB_MAX_REQS * 2; i++) c->reqs[i].comm = c;
  *out = c;
  return ncclSuccess;
fail:
  ib_close_comm(c);
  return res;
}

static void ib_meta_fill(const ib_comm_t* c, ib_meta_t* m, uint64_t magic, int tc, int sl) {
  memset(m, 0, sizeof(*m));
  m->magic = magic;
  m->nqps = (uint32_t)c->nqps;
  m->ndevs = (uint32_t)c->ndevs;
  for (int q = 0; q < c->nqps; q++) m->qpn[q] = c->qps[q]->qp_num;
  for (int i = 0; i < c->ndevs; i++) {
    const ib_dev_t* d = &ib_devs[c->devs[i].dev];
    ib_dev_info_t* di = &m->devs[i];
    memcpy(di->gid, d->gid.raw, 16);
    di->lid = d->lid;
    di->fifo_rkey = c->devs[i].fifo_mr->rkey;
    di->port = (uint8_t)d->port;
    di->link_layer = (uint8_t)d->link_layer;
    di->mtu = (uint8_t)d->mtu;
    snprintf(di->name, sizeof(di->name), "%s", d->name);
  }
  m->fifo_addr = c->is_send ? (uint64_t)(uintptr_t)c->fifo : 0;
  m->split = c->split;
  m->tc = tc;
  m->sl = sl;
  snprintf(m->host, sizeof(m->host), "%s", host_name());
}

/* Takes the peer's description and connects every QP to its counterpart. */
static ncclResult_t ib_comm_join(ib_comm_t* c, const ib_meta_t* r, int tc, int sl) {
  char addr[80];
  snprintf(c->peer, sizeof(c->peer), "%.63s (%s)", r->host,
           socket_addr_format(&c->sock.addr, addr, sizeof(addr)));
  if (r->nqps != (uint32_t)c->nqps || r->ndevs < 1 || r->ndevs > IB_DEVS_PER_VDEV) {
    WARN("NET/IB: %s described %u QPs on %u ports; this side has %d QPs (version mismatch?)",
         c->peer, r->nqps, r->ndevs, c->nqps);
    return ncclInternalError;
  }
  c->rem_ndevs = (int)r->ndevs;
  memcpy(c->rem_devs, r->devs, sizeof(c->rem_devs));
  if (!c->is_send) c->rem_fifo_addr = r->fifo_addr;
  for (int q = 0; q < c->nqps; q++)
    CHECK(ib_qp_connect(c->qps[q], &ib_devs[c->devs[q % c->ndevs].dev],
                        &c->rem_devs[q % c->rem_ndevs], r->qpn[q], tc, sl, c->peer));
  char lgid[INET6_ADDRSTRLEN], rgid[INET6_ADDRSTRLEN];
  const ib_dev_t* d0 = &ib_devs[c->devs[0].dev];
  INFO(NCCL_INIT | NCCL_NET,
       "NET/IB: %s %s via %s:%d GID %s -> %s:%d GID %s, %d QP%s (%s), TC %d SL %d, MTU %d%s",
       c->is_send ? "sending to" : "receiving from", c->peer, ib_vdevs[c->vdev].name, d0->port,
       ib_gid_format(d0->gid.raw, lgid, sizeof(lgid)), r->devs[0].name, r->devs[0].port,
       ib_gid_format(r->devs[0].gid, rgid, sizeof(rgid)), c->nqps, c->nqps == 1 ? "" : "s",
       c->split ? "each message striped over all" : "messages take turns", tc, sl,
       128 << (d0->mtu < (enum ibv_mtu)r->devs[0].mtu ? d0->mtu : (enum ibv_mtu)r->devs[0].mtu),
       c->flush ? ", flush by RDMA READ" : "");
  return ncclSuccess;
}

/* Moves the peer's ib_meta_t in without blocking; *complete once all of it is there. */
static ncclResult_t ib_meta_progress(ib_comm_t* c, ib_pending_t* p, bool* complete) {
  ncclResult_t res = socket_progress(&c->sock, 0, &p->meta, sizeof(p->meta), &p->done);
  if (res == ncclRemoteError) {
    char addr[80];
    WARN("NET/IB: %s closed the setup connection before describing its QPs",
         socket_addr_format(&c->sock.addr, addr, sizeof(addr)));
  }
  CHECK(res);
  *complete = p->done == sizeof(p->meta);
  return ncclSuccess;
}

/* ---- listen / connect / accept ------------------------------------------------------------------
 */
ncclResult_t ib_listen(void* ctx, int dev, void* handle, void** listen_comm) {
  ib_listen_t* l = NULL;
  const socket_iface_t* ifs = NULL;
  int nifs = 0;
  if (dev < 0 || dev >= ib_nvdevs) {
    WARN("NET/IB: device %d does not exist (%d devices)", dev, ib_nvdevs);
    return ncclInvalidArgument;
  }
  CHECK(socket_default_interfaces(&ifs, &nifs));
  if (nifs < 1) {
    WARN("NET/IB: no IP interface for the connection side channel (NCCL_SOCKET_IFNAME)");
    return ncclSystemError;
  }
  CHECK(MEM_CALLOC(&l, 1));
  l->vdev = dev;
  l->sock.fd = -1;
  ncclResult_t res;
  CHECK_GOTO(net_listen_any_port(&ifs[0].addr, &l->sock, &l->magic), res, fail);
  ib_handle_t h = {.magic = l->magic ^ IB_MAGIC, .addr = l->sock.addr, .pending = NULL};
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &h, sizeof(h));
  *listen_comm = l;
  return ncclSuccess;
fail:
  free(l);
  return res;
}

ncclResult_t ib_connect(void* ctx, int dev, void* handle, void** send_comm,
                        ncclNetDeviceHandle_t** dev_comm) {
  ib_handle_t* h = handle;
  ncclResult_t res = ncclSuccess;
  *send_comm = NULL;
  int tc = ib_traffic_class(ctx), sl = (int)param_int(PARAM_IB_SL);
  ib_pending_t* p = h->pending;
  bool complete = false;
  if (p == NULL) {
    ib_meta_t mine;
    CHECK(MEM_CALLOC(&p, 1));
    bool split = param_int(PARAM_IB_SPLIT_DATA_ON_QPS) != 0;
    CHECK_GOTO(ib_comm_create(dev, true, ib_param_qps(), split, &p->comm), res, fail);
    CHECK_GOTO(socket_connect(&h->addr, NULL, &p->comm->sock), res, fail);
    ib_meta_fill(p->comm, &mine, h->magic, tc, sl);
    CHECK_GOTO(socket_send_all(&p->comm->sock, &mine, sizeof(mine)), res, fail);
    p->stage = IB_STAGE_META;
    h->pending = p;
  }
  CHECK_GOTO(ib_meta_progress(p->comm, p, &complete), res, fail);
  if (!complete) return ncclSuccess;
  if (p->meta.magic != h->magic) {
    WARN("NET/IB: the peer answering on the setup channel is not this connection's listener");
    res = ncclSystemError;
    goto fail;
  }
  CHECK_GOTO(ib_comm_join(p->comm, &p->meta, tc, sl), res, fail);
  p->ready = 1;
  CHECK_GOTO(socket_send_all(&p->comm->sock, &p->ready, 1), res, fail);
  p->comm->next_liveness_ns = clock_ns();
  *send_comm = p->comm;
  free(p);
  h->pending = NULL;
  return ncclSuccess;
fail:
  ib_close_comm(p != NULL ? p->comm : NULL);
  free(p);
  h->pending = NULL;
  return res;
}

ncclResult_t ib_accept(void* listen_comm, void** recv_comm, ncclNetDeviceHandle_t** dev_comm) {
  ib_listen_t* l = listen_comm;
  ib_pending_t* p = &l->pending;
  ncclResult_t res = ncclSuccess;
  *recv_comm = NULL;
  if (p->stage == IB_STAGE_START) {
    socket_conn_t s = {.fd = -1};
    int accepted = 0;
    CHECK(socket_try_accept(&l->sock, &s, &accepted));
    if (!accepted) return ncclSuccess;
    CHECK_GOTO(MEM_CALLOC(&p->comm, 1), res, fail_sock);
    p->comm->sock = s; /* a placeholder comm until the sender's description arrives */
    p->done = 0;
    p->stage = IB_STAGE_META;
    goto meta;
  fail_sock:
    socket_close(&s);
    return res;
  }
meta:
  if (p->stage == IB_STAGE_META) {
    bool complete = false;
    CHECK_GOTO(ib_meta_progress(p->comm, p, &complete), res, fail);
    if (!complete) return ncclSuccess;
    if (p->meta.magic != (l->magic ^ IB_MAGIC)) {
      char addr[80];
      WARN(
          "NET/IB: unexpected connection from %s on the setup channel (wrong magic); is another "
          "job using this port?",
          socket_addr_format(&p->comm->sock.addr, addr, sizeof(addr)));
      res = ncclSystemError;
      goto fail;
    }
    if (p->meta.nqps < 1 || p->meta.nqps > IB_MAX_QPS) {
      WARN("NET/IB: the sender asks for %u QPs (1 to %d supported)", p->meta.nqps, IB_MAX_QPS);
      res = ncclInternalError;
      goto fail;
    }
    ib_comm_t* c = NULL;
    CHECK_GOTO(ib_comm_create(l->vdev, false, (int)p->meta.nqps, p->meta.split != 0, &c), res,
               fail);
    c->sock = p->comm->sock; /* the placeholder hands its socket over */
    free(p->comm);
    p->comm = c;
    int64_t force = param_int(PARAM_NET_FORCE_FLUSH);
    bool gdr = ib_peer_mem_loaded() || ib_devs[c->devs[0].dev].dmabuf;
    if ((gdr && param_int(PARAM_GDR_FLUSH_DISABLE) == 0) || force > 0)
      CHECK_GOTO(ib_flush_setup(c), res, fail);
    CHECK_GOTO(ib_comm_join(c, &p->meta, p->meta.tc, p->meta.sl), res, fail);
    ib_meta_t mine;
    ib_meta_fill(c, &mine, p->meta.magic, p->meta.tc, p->meta.sl);
    CHECK_GOTO(socket_send_all(&c->sock, &mine, sizeof(mine)), res, fail);
    p->stage = IB_STAGE_READY;
    p->done = 0;
  }
  size_t before = p->done;
  res = socket_progress(&p->comm->sock, 0, &p->ready, 1, &p->done);
  if (res == ncclRemoteError)
    WARN("NET/IB: %s closed the setup connection before it was ready", p->comm->peer);
  CHECK_GOTO(res, res, fail);
  if (p->done == before) return ncclSuccess;
  p->comm->next_liveness_ns = clock_ns();
  *recv_comm = p->comm;
  memset(p, 0, sizeof(*p));
  return ncclSuccess;
fail:
  ib_close_comm(p->comm); /* also the placeholder: it has a socket and nothing else */
  memset(p, 0, sizeof(*p));
  return res;
}

ncclResult_t ib_close_listen(void* listen_comm) {
  ib_listen_t* l = listen_comm;
  if (l == NULL) return ncclSuccess;
  ib_close_comm(l->pending.comm);
  socket_close(&l->sock);
  free(l);
  return ncclSuccess;
}
#endif /* BATON_HAVE_VERBS */
