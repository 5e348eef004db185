/* IB data path: memory registration, isend, irecv, iflush, test (the protocol is described in
 * ib.h). Requests live in a fixed pool per comm; a work request's wr_id names its request and
 * what it is (data, receive, CTS write, flush), so a completion is matched without a search.
 * Errors name the peer (host and address), the port, the QP and the status text; the first error
 * of a comm is logged once and returned by every later call. */
#ifdef BATON_HAVE_VERBS
#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "net/ib.h"

#define IB_LIVENESS_NS 100000000ull /* how often a waiting call checks the side channel */
#define IB_POLL_BATCH 16
#define IB_CLOSE_GRACE_NS 1000000000ull /* a closed peer's owed completions may still arrive */

static uint64_t ib_wr_id(const ib_comm_t* c, const ib_req_t* r, int kind) {
  return (uint64_t)(r - c->reqs) | ((uint64_t)kind << 16);
}

/* A free request, if fewer than IB_MAX_REQS of this type are in flight (which keeps the CTS FIFO,
 * the receive queues and the send queues from overflowing); NULL otherwise. */
static ib_req_t* ib_req_get(ib_comm_t* c, int type) {
  int busy = 0;
  ib_req_t* free_slot = NULL;
  for (int i = 0; i < 2 * IB_MAX_REQS; i++) {
    if (c->reqs[i].type == type) busy++;
    if (c->reqs[i].type == IB_REQ_FREE && free_slot == NULL) free_slot = &c->reqs[i];
  }
  if (busy >= IB_MAX_REQS || free_slot == NULL) return NULL;
  free_slot->type = type;
  free_slot->events = 0;
  free_slot->size = 0;
  return free_slot;
}

ncclResult_t ib_comm_fail(ib_comm_t* c, ncclResult_t res) {
  if (c->error == ncclSuccess) c->error = res;
  return c->error;
}

/* ---- Liveness -------------------------------------------------------------------------------- */
static ncclResult_t ib_comm_poll(ib_comm_t* c);

/* Some request of the comm still waits for a completion. */
static bool ib_comm_pending(const ib_comm_t* c) {
  for (int i = 0; i < 2 * IB_MAX_REQS; i++)
    if (c->reqs[i].type != IB_REQ_FREE && c->reqs[i].events > 0) return true;
  return false;
}

/* How long a QP keeps retrying before it fails: NCCL_IB_TIMEOUT x (NCCL_IB_RETRY_CNT + 1), at
 * least a second. */
static uint64_t ib_retry_window_ns(void) {
  int64_t t = param_int(PARAM_IB_TIMEOUT), n = param_int(PARAM_IB_RETRY_CNT);
  if (t < 0) t = 0;
  if (t > 31) t = 31;
  if (n < 0) n = 0;
  uint64_t w = (4096ull << t) * (uint64_t)(n + 1);
  return w < 1000000000ull ? 1000000000ull : w;
}

/* At most once per IB_LIVENESS_NS: a device that had a fatal event; a port that stayed down
 * longer than the QPs retry (a provider may stop retrying while it cannot send at all, so the
 * QP itself never reports it: Soft-RoCE does); a side channel the peer closed (its process
 * exited, or it closed the comm). A receive that finds its sender gone is not logged as an error
 * here (a peer that finished closes too; the caller knows whether it still needed it); a sender
 * that finds its receiver gone WARNs. */
static ncclResult_t ib_comm_alive(ib_comm_t* c) {
  if (c->error != ncclSuccess) return c->error;
  uint64_t now = clock_ns();
  if (now < c->next_liveness_ns) return ncclSuccess;
  c->next_liveness_ns = now + IB_LIVENESS_NS;
  bool down = false;
  for (int i = 0; i < c->ndevs; i++) {
    const ib_dev_t* d = &ib_devs[c->devs[i].dev];
    if (atomic_load(&d->fatal) > 0) {
      WARN(
          "NET/IB: %s:%d had a fatal error (see the async event above); the connection %s %s "
          "cannot go on",
          d->name, d->port, c->is_send ? "to" : "from", c->peer);
      return ib_comm_fail(c, ncclSystemError);
    }
    if (!atomic_load(&d->port_down)) continue;
    down = true;
    if (c->port_down_since == 0) c->port_down_since = now;
    if (now - c->port_down_since > ib_retry_window_ns()) {
      WARN(
          "NET/IB: %s port %d has been down for %llu ms, longer than its QPs retry "
          "(NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT): the connection %s %s is lost (status: port "
          "down, async event port error)",
          d->name, d->port, (unsigned long long)((now - c->port_down_since) / 1000000ull),
          c->is_send ? "to" : "from", c->peer);
      return ib_comm_fail(c, ncclSystemError);
    }
  }
  if (!down) c->port_down_since = 0;
  char b;
  ssize_t n = recv(c->sock.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)))
    return ncclSuccess;
  /* A peer closes after its last message landed and after it received ours, but the completions
   * this side is owed may still be on their way (a receiver that got everything exits before
   * the sender polls the acknowledgement of its last write: Soft-RoCE, 1 of 5 guest runs of
   * test_ib_colls). While requests wait, the close counts only IB_CLOSE_GRACE_NS later; with
   * none waiting it counts at once. ib_test looks at its request again after this. */
  if (ib_comm_pending(c)) {
    CHECK(ib_comm_poll(c));
    if (c->closed_since == 0) c->closed_since = now;
    if (!ib_comm_pending(c) || now - c->closed_since < IB_CLOSE_GRACE_NS) {
      c->next_liveness_ns = now; /* the next call looks again (with nothing owed: fails) */
      return ncclSuccess;
    }
  }
  if (c->is_send)
    WARN(
        "NET/IB: %s closed its connection while this side still had data for it (process "
        "exited or aborted?)",
        c->peer);
  else
    INFO(NCCL_NET, "NET/IB: %s closed its connection (%s)", c->peer,
         n == 0 ? "orderly close" : strerror(errno));
  return ib_comm_fail(c, ncclRemoteError);
}

/* ---- Registration ---------------------------------------------------------------------------- */
static ncclResult_t ib_reg(ib_comm_t* c, void* data, size_t size, int type, uint64_t offset, int fd,
                           void** mhandle) {
  ib_mhandle_t* mh = NULL;
  ncclResult_t res = ncclSuccess;
  CHECK(MEM_CALLOC(&mh, 1));
  for (int i = 0; i < c->ndevs; i++) {
    CHECK_GOTO(ib_dev_reg(c->devs[i].dev, data, size, type, offset, fd, &mh->mrs[i]), res, fail);
    mh->devs[i] = c->devs[i].dev;
    mh->ndevs++;
  }
  *mhandle = mh;
  return ncclSuccess;
fail:
  for (int i = 0; i < mh->ndevs; i++) ib_dev_dereg(mh->devs[i], mh->mrs[i]);
  free(mh);
  return res;
}

ncclResult_t ib_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return ib_reg(comm, data, size, type, 0, -1, mhandle);
}

ncclResult_t ib_reg_mr_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle) {
  return ib_reg(comm, data, size, type, offset, fd, mhandle);
}

ncclResult_t ib_dereg_mr(void* comm, void* mhandle) {
  ib_mhandle_t* mh = mhandle;
  if (mh == NULL) return ncclSuccess;
  for (int i = 0; i < mh->ndevs; i++) ib_dev_dereg(mh->devs[i], mh->mrs[i]);
  free(mh);
  return ncclSuccess;
}

/* ---- Posting -----------------------------------------------------------------------------------
 */
static ncclResult_t ib_post_send(ib_comm_t* c, struct ibv_qp* qp, struct ibv_send_wr* wr,
                                 const char* what) {
  struct ibv_send_wr* bad = NULL;
  int rc = ibv_post_send(qp, wr, &bad);
  if (rc != 0) {
    WARN("NET/IB: posting %s %s %s on QP %u failed: %s", what, c->is_send ? "to" : "from", c->peer,
         qp->qp_num, strerror(rc));
    return ib_comm_fail(c, ncclSystemError);
  }
  return ncclSuccess;
}

/* One signaled RDMA WRITE or READ of len bytes between local (lkey) and remote (rkey) memory. */
static ncclResult_t ib_post_rdma(ib_comm_t* c, struct ibv_qp* qp, enum ibv_wr_opcode op,
                                 void* local, uint32_t len, uint32_t lkey, uint64_t remote,
                                 uint32_t rkey, uint64_t wr_id, const char* what) {
  struct ibv_sge sge = {.addr = (uintptr_t)local, .length = len, .lkey = lkey};
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = op;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr_id = wr_id;
  wr.wr.rdma.remote_addr = remote;
  wr.wr.rdma.rkey = rkey;
  return ib_post_send(c, qp, &wr, what);
}

/* Which QPs message seq uses: all of them (striped) or the next one in turn. */
static int ib_msg_parts(const ib_comm_t* c, int* first) {
  *first = c->split ? 0 : (int)(c->seq % (uint64_t)c->nqps);
  return c->split ? c->nqps : 1;
}

ncclResult_t ib_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                      void* phandle, void** request) {
  ib_comm_t* c = send_comm;
  const ib_mhandle_t* mh = mhandle;
  *request = NULL;
  CHECK(ib_comm_alive(c));
  int slot = (int)(c->seq % IB_MAX_REQS);
  ib_cts_t* e = &c->fifo[slot];
  if (__atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) != c->seq + 1) return ncclSuccess; /* no CTS yet */
  if (size > e->size || e->tag != tag) {
    WARN(
        "NET/IB: message %llu to %s: %zu bytes (tag %d) does not fit the receive it matched (%llu "
        "bytes, tag %d)",
        (unsigned long long)c->seq, c->peer, size, tag, (unsigned long long)e->size, e->tag);
    return ib_comm_fail(c, ncclInternalError);
  }
  ib_req_t* r = ib_req_get(c, IB_REQ_SEND);
  if (r == NULL) return ncclSuccess;
  r->size = size;
  r->seq = c->seq;
  int first, nparts = ib_msg_parts(c, &first);
  for (int k = 0; k < nparts; k++) {
    int q = (first + k) % c->nqps;
    int li = q % c->ndevs, ri = q % c->rem_ndevs;
    size_t off, len;
    ib_stripe(size, nparts, k, &off, &len);
    struct ibv_sge sge = {
        .addr = (uintptr_t)data + off, .length = (uint32_t)len, .lkey = mh->mrs[li]->lkey};
    struct ibv_send_wr wr[2];
    memset(wr, 0, sizeof(wr));
    /* With adaptive routing, packets may arrive out of order: the bulk goes as a plain write and
     * a 0-byte write with the immediate follows (it completes only after the bulk landed). */
    bool two = c->ar && len > (size_t)param_int(PARAM_IB_AR_THRESHOLD);
    struct ibv_send_wr* imm = two ? &wr[1] : &wr[0];
    if (two) {
      wr[0].opcode = IBV_WR_RDMA_WRITE;
      wr[0].sg_list = &sge;
      wr[0].num_sge = 1;
      wr[0].wr.rdma.remote_addr = e->addr + off;
      wr[0].wr.rdma.rkey = e->rkeys[ri];
      wr[0].next = &wr[1];
    } else {
      wr[0].sg_list = len > 0 ? &sge : NULL;
      wr[0].num_sge = len > 0 ? 1 : 0;
    }
    imm->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    imm->imm_data = htonl((uint32_t)size);
    imm->send_flags = IBV_SEND_SIGNALED;
    imm->wr_id = ib_wr_id(c, r, IB_WR_DATA);
    imm->wr.rdma.remote_addr = e->addr + off + (two ? len : 0);
    imm->wr.rdma.rkey = e->rkeys[ri];
    CHECK(ib_post_send(c, c->qps[q], wr, "data"));
    r->events++;
  }
  c->seq++;
  *request = r;
  return ncclSuccess;
}

ncclResult_t ib_irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                      void** mhandles, void** phandles, void** request) {
  ib_comm_t* c = recv_comm;
  *request = NULL;
  if (n != 1) {
    WARN("NET/IB: irecv takes one buffer (maxRecvs is 1), got %d", n);
    return ncclInternalError;
  }
  CHECK(ib_comm_alive(c));
  const ib_mhandle_t* mh = mhandles[0];
  if (sizes[0] > IB_MAX_MSG) {
    WARN("NET/IB: a %zu-byte receive exceeds the largest message (%llu)", sizes[0],
         (unsigned long long)IB_MAX_MSG);
    return ncclInternalError;
  }
  ib_req_t* r = ib_req_get(c, IB_REQ_RECV);
  if (r == NULL) return ncclSuccess;
  r->seq = c->seq;
  int first, nparts = ib_msg_parts(c, &first);
  for (int k = 0; k < nparts; k++) {
    struct ibv_qp* qp = c->qps[(first + k) % c->nqps];
    struct ibv_recv_wr wr = {.wr_id = ib_wr_id(c, r, IB_WR_RECV)}, *bad = NULL;
    int rc = ibv_post_recv(qp, &wr, &bad);
    if (rc != 0) {
      WARN("NET/IB: posting a receive from %s on QP %u failed: %s", c->peer, qp->qp_num,
           strerror(rc));
      return ib_comm_fail(c, ncclSystemError);
    }
    r->events++;
  }
  /* Clear to send: where the data goes, written into the sender's FIFO. */
  int slot = (int)(c->seq % IB_MAX_REQS);
  ib_cts_t* e = &c->cts[slot];
  memset(e, 0, sizeof(*e));
  e->addr = (uint64_t)(uintptr_t)data[0];
  e->size = sizes[0];
  e->tag = tags != NULL ? tags[0] : 0;
  for (int i = 0; i < mh->ndevs; i++) e->rkeys[i] = mh->mrs[i]->rkey;
  e->seq = c->seq + 1;
  int li = first % c->ndevs, ri = first % c->rem_ndevs;
  CHECK(ib_post_rdma(c, c->qps[first], IBV_WR_RDMA_WRITE, e, sizeof(*e), c->devs[li].fifo_mr->lkey,
                     c->rem_fifo_addr + (uint64_t)slot * sizeof(ib_cts_t),
                     c->rem_devs[ri].fifo_rkey, ib_wr_id(c, r, IB_WR_CTS), "a clear-to-send"));
  r->events++;
  c->seq++;
  *request = r;
  return ncclSuccess;
}

ncclResult_t ib_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                       void** request) {
  ib_comm_t* c = recv_comm;
  *request = NULL;
  int last = -1;
  for (int i = 0; i < n; i++)
    if (sizes[i] > 0) last = i;
  if (!c->flush || last < 0) return ncclSuccess; /* nothing to make visible */
  CHECK(ib_comm_alive(c));
  const ib_mhandle_t* mh = mhandles[last];
  ib_req_t* r = ib_req_get(c, IB_REQ_FLUSH);
  if (r == NULL) {
    WARN("NET/IB: more than %d flushes in flight on the connection from %s", IB_MAX_REQS, c->peer);
    return ib_comm_fail(c, ncclInternalError);
  }
  /* A read through each port the data may have come by: it completes only after every earlier
   * write of that port reached memory. */
  for (int i = 0; i < c->ndevs; i++) {
    ib_comm_dev_t* cd = &c->devs[i];
    CHECK(ib_post_rdma(c, cd->flush_qp, IBV_WR_RDMA_READ, c->flush_buf, 1, cd->flush_mr->lkey,
                       (uintptr_t)data[last], mh->mrs[i]->rkey, ib_wr_id(c, r, IB_WR_FLUSH),
                       "a flush"));
    r->events++;
  }
  *request = r;
  return ncclSuccess;
}

/* One one-sided operation on QP 0, whose remote end is the peer's first port (so dst->rkeys[0] is
 * its key): an RDMA WRITE of len bytes at local (no immediate: the peer posts nothing and sees no
 * completion) or an ATOMIC_FETCH_AND_ADD of add (the old value lands at local). */
static ncclResult_t ib_one_sided(ib_comm_t* c, bool atomic, void* local, uint32_t len,
                                 uint32_t lkey, uint64_t remote, uint32_t rkey, uint64_t add,
                                 void** request) {
  CHECK(ib_comm_alive(c));
  ib_req_t* r = ib_req_get(c, IB_REQ_PUT);
  if (r == NULL) return ncclSuccess;
  r->size = len;
  struct ibv_sge sge = {.addr = (uintptr_t)local, .length = len, .lkey = lkey};
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr_id = ib_wr_id(c, r, IB_WR_PUT);
  if (atomic) {
    wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    wr.wr.atomic.remote_addr = remote;
    wr.wr.atomic.compare_add = add;
    wr.wr.atomic.rkey = rkey;
  } else {
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = rkey;
  }
  ncclResult_t res =
      ib_post_send(c, c->qps[0], &wr, atomic ? "a one-sided add" : "a one-sided write");
  if (res != ncclSuccess) {
    r->type = IB_REQ_FREE;
    return res;
  }
  r->events = 1;
  *request = r;
  return ncclSuccess;
}

ncclResult_t ib_iput(void* send_comm, const void* data, size_t bytes, void* mhandle,
                     const net_rma_key_t* dst, uint64_t dst_off, void** request) {
  ib_comm_t* c = send_comm;
  const ib_mhandle_t* mh = mhandle;
  *request = NULL;
  if (!c->is_send || bytes == 0 || bytes > IB_MAX_MSG || mh == NULL || mh->ndevs < 1) {
    WARN(
        "NET/IB: a one-sided write of %zu bytes to %s: needs a send comm, a registration and 1 "
        "to %llu bytes",
        bytes, c->peer, (unsigned long long)IB_MAX_MSG);
    return ncclInternalError;
  }
  return ib_one_sided(c, false, (void*)data, (uint32_t)bytes, mh->mrs[0]->lkey, dst->addr + dst_off,
                      dst->rkeys[0], 0, request);
}

/* An atomic is a non-posted request at the peer's PCIe root: no earlier write of the QP can be
 * passed by it, relaxed ordering or not, so the data a signal follows is in memory when its count
 * shows. */
ncclResult_t ib_iadd(void* send_comm, uint64_t* scratch, void* mhandle, const net_rma_key_t* dst,
                     uint64_t dst_off, uint64_t add, void** request) {
  ib_comm_t* c = send_comm;
  const ib_mhandle_t* mh = mhandle;
  *request = NULL;
  if (!c->is_send || mh == NULL || mh->ndevs < 1 || !ib_devs[c->devs[0].dev].atomics ||
      (dst->addr + dst_off) % sizeof(uint64_t) != 0) {
    WARN(
        "NET/IB: a one-sided add to %s: needs a send comm, a registration, a device with RDMA "
        "atomics and an 8-byte aligned word",
        c->peer);
    return ncclInternalError;
  }
  return ib_one_sided(c, true, scratch, sizeof(uint64_t), mh->mrs[0]->lkey, dst->addr + dst_off,
                      dst->rkeys[0], add, request);
}

ncclResult_t ib_check(void* comm) {
  return ib_comm_alive(comm);
}

/* ---- Completions -------------------------------------------------------------------------------
 */
static const char* ib_wr_kind_text(int kind) {
  switch (kind) {
    case IB_WR_DATA:
      return "sending data to";
    case IB_WR_RECV:
      return "receiving data from";
    case IB_WR_CTS:
      return "telling its receive buffer to";
    case IB_WR_FLUSH:
      return "flushing data received from";
    case IB_WR_PUT:
      return "writing one-sided data to";
    default:
      return "talking to";
  }
}

static const char* ib_wc_hint(enum ibv_wc_status st) {
  switch (st) {
    case IBV_WC_RETRY_EXC_ERR:
      return "the peer stopped acknowledging: a link or port went down, the peer's process is "
             "gone, or the fabric drops packets (NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT bound the "
             "retries)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "the peer had no receive posted";
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
      return "the peer refused the access (its buffer was deregistered, or the two sides run "
             "different Baton versions)";
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
      return "a local buffer is not registered for this access";
    case IBV_WC_WR_FLUSH_ERR:
      return "the QP had already failed (an earlier error is the cause)";
    case IBV_WC_LOC_QP_OP_ERR:
      return "the QP could not send: no route to the peer (is the link up?) or a malformed request";
    default:
      return "see the status";
  }
}

static void ib_wc_report(ib_comm_t* c, int devi, const struct ibv_wc* wc) {
  const ib_dev_t* d = &ib_devs[c->devs[devi].dev];
  int q = 0;
  while (q < c->nqps && c->qps[q]->qp_num != wc->qp_num) q++;
  const ib_dev_info_t* r = &c->rem_devs[(q < c->nqps ? q : 0) % (c->rem_ndevs ? c->rem_ndevs : 1)];
  char lgid[INET6_ADDRSTRLEN], rgid[INET6_ADDRSTRLEN];
  WARN(
      "NET/IB: %s %s failed on %s port %d%s: completion status %s (%d), vendor error 0x%x, QP %u "
      "(local GID %s, remote %s:%d GID %s); %s",
      ib_wr_kind_text((int)(wc->wr_id >> 16)), c->peer, d->name, d->port,
      atomic_load(&d->port_down) ? " (the port is down)" : "",
      ib_verbs()->wc_status_str(wc->status), (int)wc->status, wc->vendor_err, wc->qp_num,
      ib_gid_format(d->gid.raw, lgid, sizeof(lgid)), r->name, r->port,
      ib_gid_format(r->gid, rgid, sizeof(rgid)), ib_wc_hint(wc->status));
}

/* Drains the comm's completion queues into its requests. */
static ncclResult_t ib_comm_poll(ib_comm_t* c) {
  if (c->error != ncclSuccess) return c->error;
  for (int i = 0; i < c->ndevs; i++) {
    struct ibv_wc wcs[IB_POLL_BATCH];
    int n;
    while ((n = ibv_poll_cq(c->devs[i].cq, IB_POLL_BATCH, wcs)) > 0) {
      for (int k = 0; k < n; k++) {
        const struct ibv_wc* wc = &wcs[k];
        if (wc->status != IBV_WC_SUCCESS) {
          ib_wc_report(c, i, wc);
          return ib_comm_fail(c, ncclSystemError);
        }
        unsigned idx = (unsigned)(wc->wr_id & 0xffff);
        if (idx >= 2 * IB_MAX_REQS || c->reqs[idx].events <= 0) {
          WARN("NET/IB: completion for request %u that expects none (connection %s %s)", idx,
               c->is_send ? "to" : "from", c->peer);
          return ib_comm_fail(c, ncclInternalError);
        }
        ib_req_t* r = &c->reqs[idx];
        if ((wc->wr_id >> 16) == IB_WR_RECV) r->size = ntohl(wc->imm_data);
        r->events--;
      }
    }
    if (n < 0) {
      WARN("NET/IB: polling the completion queue of %s failed (connection %s %s)",
           ib_devs[c->devs[i].dev].name, c->is_send ? "to" : "from", c->peer);
      return ib_comm_fail(c, ncclSystemError);
    }
  }
  return ncclSuccess;
}

ncclResult_t ib_test(void* request, int* done, int* sizes) {
  ib_req_t* r = request;
  ib_comm_t* c = r->comm;
  *done = 0;
  if (r->events > 0) CHECK(ib_comm_poll(c));
  ncclResult_t alive = r->events > 0 ? ib_comm_alive(c) : ncclSuccess; /* it may poll again */
  if (r->events == 0) { /* done, even if the peer has closed since */
    *done = 1;
    if (sizes != NULL) sizes[0] = (int)r->size;
    r->type = IB_REQ_FREE;
    return ncclSuccess;
  }
  return alive;
}
#endif /* BATON_HAVE_VERBS */
