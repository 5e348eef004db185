/* One-sided operations on windows (NCCL 2.29): the moving part of ncclPutSignal, ncclSignal and
 * ncclWaitSignal (src/collectives/rma.c checks the arguments and finds the windows).
 *
 * Between ranks on different hosts whose network has one-sided writes (the IB network, host
 * executor), rma_net.c carries data and signals as RDMA writes once the first window registration
 * connected them; before that, such calls are refused (as stock refuses one-sided operations
 * before its RMA connections exist). Everything else takes the bootstrap, as follows.
 *
 * A signal is a small message on the communicator's bootstrap, which queues what arrives before
 * its receive and keeps one (peer, tag) in send order: exactly stock's ordering (operations to
 * one peer and context arrive in program order) and its counting (ncclWaitSignal takes opCnt of
 * them). The data of a put goes first:
 *   - into the peer's buffer itself when the window is shared (comm_window_share: the peer's
 *     buffer is mapped here; one host, the SHM/P2P case), then the signal says "placed";
 *   - else (another host, a window that could not be mapped) in a second message, which the
 *     peer's ncclWaitSignal writes into its own window before it returns (stock promises the data
 *     only then).
 * The receiver finds its window by the registration's number, the same on every rank (windows
 * are registered collectively, in the same order). Signals to oneself are counted here.
 *
 * Every call runs at once on the calling thread, also inside a group; on the CUDA executor the
 * calling thread first waits for the stream's earlier work and the copies are synchronous, so the
 * stream's later work sees the data (not stream-ordered, and refused inside a graph capture). */
#include <stdlib.h>

#include "core/core.h"

#define RMA_TAG_BASE 0x524d0000 /* "RM": apart from the transports' and the barriers' tags */

typedef struct rma_head {
  uint32_t seq;    /* the window's registration number (0: a signal without data) */
  uint32_t placed; /* 1: the data is in the receiver's buffer already */
  uint64_t offset;
  uint64_t bytes;
} rma_head_t;

struct comm_rma {
  int nctx, nsig;
  uint64_t* self_sent; /* [ctx * nsig + sig]: signals this rank raised on itself */
  uint64_t* self_seen; /* and those a wait took */
};

static int rma_tag(const struct comm_rma* m, int ctx, int sig, int data) {
  return RMA_TAG_BASE + 2 * (ctx * m->nsig + sig) + data;
}

static int cfg_count(int v) {
  return v == NCCL_CONFIG_UNDEF_INT || v < 1 ? 1 : v;
}

void comm_rma_shape(ncclComm_t comm, int* nctx, int* nsig) {
  *nctx = cfg_count(comm->config.numRmaCtx);
  *nsig = cfg_count(comm->config.numRmaSig);
}

/* A peer reached over the network only once the first window registration connected it. */
static ncclResult_t rma_net_check_ready(ncclComm_t comm, const char* api, int peer) {
  if (comm->resources->rma_net != NULL || !rma_net_wanted(comm, peer)) return ncclSuccess;
  WARN(
      "%s: rank %d is on another host, reached by one-sided writes over the network once "
      "they are connected, which the communicator's first ncclCommWindowRegister does: register "
      "a window first",
      api, peer);
  return ncclInvalidUsage;
}

static ncclResult_t rma_state(ncclComm_t comm, struct comm_rma** out) {
  comm_res_t* r = comm->resources;
  if (r->rma == NULL) {
    struct comm_rma* m = NULL;
    CHECK(MEM_CALLOC(&m, 1));
    comm_rma_shape(comm, &m->nctx, &m->nsig);
    size_t n = (size_t)m->nctx * (size_t)m->nsig;
    if (MEM_CALLOC(&m->self_sent, n) != ncclSuccess ||
        MEM_CALLOC(&m->self_seen, n) != ncclSuccess) {
      comm_rma_free(m);
      return ncclSystemError;
    }
    r->rma = m;
  }
  *out = r->rma;
  return ncclSuccess;
}

void comm_rma_free(struct comm_rma* m) {
  if (m == NULL) return;
  free(m->self_sent);
  free(m->self_seen);
  free(m);
}

ncclResult_t comm_rma_check_index(ncclComm_t comm, const char* api, int ctx, int sig) {
  struct comm_rma* m;
  CHECK(rma_state(comm, &m));
  if (ctx < 0 || ctx >= m->nctx) {
    WARN("%s: ctx %d is out of range: the communicator has %d RMA context(s) (numRmaCtx)", api, ctx,
         m->nctx);
    return ncclInvalidArgument;
  }
  if (sig < 0 || sig >= m->nsig) {
    WARN(
        "%s: sigIdx %d is out of range: the communicator has %d signal(s) per context "
        "(numRmaSig)",
        api, sig, m->nsig);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Copies between user memory and a window: plain on the host executor, through CUDA (any kind of
 * memory, synchronously) on a GPU. */
static ncclResult_t rma_copy(const comm_res_t* r, void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return ncclSuccess;
  if (!r->dev_tables) {
    memcpy(dst, src, bytes);
    return ncclSuccess;
  }
  CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
  return ncclSuccess;
}

ncclResult_t comm_rma_begin(ncclComm_t comm, const char* api, cudaStream_t stream) {
  comm_res_t* r = comm->resources;
  if (!r->dev_tables) return ncclSuccess;
  enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  CUDA_CHECK(cudaStreamIsCapturing(stream, &st));
  if (st != cudaStreamCaptureStatusNone) {
    WARN(
        "%s: Baton runs one-sided operations on the calling thread; they cannot be captured "
        "into a CUDA graph",
        api);
    return ncclInvalidUsage;
  }
  CUDA_CHECK(cudaStreamSynchronize(stream)); /* the stream's earlier work comes first */
  return ncclSuccess;
}

ncclResult_t comm_rma_put(ncclComm_t comm, const comm_rma_put_t* p) {
  struct comm_rma* m;
  comm_res_t* r = comm->resources;
  CHECK(rma_state(comm, &m));
  if (p->peer == comm->rank) {
    if (p->bytes > 0) CHECK(rma_copy(r, (char*)p->own_base + p->offset, p->src, p->bytes));
    m->self_sent[p->ctx * m->nsig + p->sig]++;
    return ncclSuccess;
  }
  if (rma_net_pair(r->rma_net, p->peer))
    return rma_net_put(comm, comm_window_net(p->win), p->peer, p->ctx * m->nsig + p->sig, p->src,
                       p->offset, p->bytes);
  CHECK(rma_net_check_ready(comm, p->seq != 0 ? "ncclPutSignal" : "ncclSignal", p->peer));
  rma_head_t h = {.seq = p->seq, .offset = p->offset, .bytes = p->bytes};
  if (p->bytes > 0 && p->peer_base != NULL) {
    CHECK(rma_copy(r, (char*)p->peer_base + p->offset, p->src, p->bytes));
    h.placed = 1;
  }
  CHECK(bootstrap_send(comm->bootstrap, p->peer, rma_tag(m, p->ctx, p->sig, 0), &h, sizeof(h)));
  if (p->bytes == 0 || h.placed) return ncclSuccess;
  const void* src = p->src;
  void* bounce = NULL;
  if (r->dev_tables) { /* the bootstrap sends host memory */
    CHECK(mem_calloc(&bounce, p->bytes, 1));
    ncclResult_t res = rma_copy(r, bounce, p->src, p->bytes);
    if (res != ncclSuccess) {
      free(bounce);
      return res;
    }
    src = bounce;
  }
  ncclResult_t res =
      bootstrap_send(comm->bootstrap, p->peer, rma_tag(m, p->ctx, p->sig, 1), src, p->bytes);
  free(bounce);
  return res;
}

static ncclResult_t rma_peer_alive(void* arg, int peer) {
  ncclComm_t comm = arg;
  return transport_peer_check(&comm->resources->tctx, peer);
}

/* One signal from peer: its data written into the window it names (see the file's comment). */
static ncclResult_t rma_take(ncclComm_t comm, struct comm_rma* m, const ncclWaitSignalDesc_t* d,
                             const comm_rma_lookup_t* lookup) {
  rma_head_t h;
  CHECK(bootstrap_recv_watched(comm->bootstrap, d->peer, rma_tag(m, d->ctx, d->sigIdx, 0), &h,
                               sizeof(h), rma_peer_alive, comm));
  if (h.bytes == 0 || h.placed) return ncclSuccess;
  void* buff = NULL;
  size_t size = 0;
  bool found = lookup->find(lookup->arg, h.seq, &buff, &size);
  bool fits = found && h.offset <= size && h.bytes <= size - h.offset;
  void* tmp = NULL;
  bool direct = fits && !comm->resources->dev_tables;
  if (!direct) CHECK(mem_calloc(&tmp, h.bytes, 1)); /* the message must be taken in any case */
  ncclResult_t res = bootstrap_recv(comm->bootstrap, d->peer, rma_tag(m, d->ctx, d->sigIdx, 1),
                                    direct ? (char*)buff + h.offset : tmp, h.bytes);
  if (res == ncclSuccess && !fits) {
    WARN("ncclWaitSignal: rank %d put %llu bytes at offset %llu of window #%u, which rank %d %s",
         d->peer, (unsigned long long)h.bytes, (unsigned long long)h.offset, h.seq, comm->rank,
         found ? "has smaller" : "has not registered (or deregistered)");
    res = ncclInvalidUsage;
  }
  if (res == ncclSuccess && !direct)
    res = rma_copy(comm->resources, (char*)buff + h.offset, tmp, h.bytes);
  free(tmp);
  return res;
}

ncclResult_t comm_rma_wait(ncclComm_t comm, const ncclWaitSignalDesc_t* descs, int n,
                           const comm_rma_lookup_t* lookup) {
  struct comm_rma* m;
  CHECK(rma_state(comm, &m));
  /* Signals to oneself first: nothing else can raise them, so they must all be there already
   * (several descriptors may name the same one). */
  for (int i = 0; i < n; i++) {
    const ncclWaitSignalDesc_t* d = &descs[i];
    if (d->peer != comm->rank) continue;
    size_t k = (size_t)d->ctx * (size_t)m->nsig + (size_t)d->sigIdx;
    uint64_t want = 0;
    for (int j = 0; j < n; j++)
      if (descs[j].peer == d->peer && descs[j].ctx == d->ctx && descs[j].sigIdx == d->sigIdx)
        want += (uint64_t)descs[j].opCnt;
    uint64_t have = m->self_sent[k] - m->self_seen[k];
    if (have < want) {
      WARN(
          "ncclWaitSignal: rank %d waits for %llu signal(s) from itself on ctx %d sigIdx %d but "
          "raised %llu: it would wait forever",
          comm->rank, (unsigned long long)want, d->ctx, d->sigIdx, (unsigned long long)have);
      return ncclInvalidUsage;
    }
  }
  for (int i = 0; i < n; i++)
    if (descs[i].peer != comm->rank && !rma_net_pair(comm->resources->rma_net, descs[i].peer))
      CHECK(rma_net_check_ready(comm, "ncclWaitSignal", descs[i].peer));
  for (int i = 0; i < n; i++) {
    const ncclWaitSignalDesc_t* d = &descs[i];
    int k = d->ctx * m->nsig + d->sigIdx;
    if (d->peer == comm->rank)
      m->self_seen[k] += (uint64_t)d->opCnt;
    else if (rma_net_pair(comm->resources->rma_net, d->peer))
      CHECK(rma_net_wait(comm, d->peer, k, (uint64_t)d->opCnt));
    else
      for (int j = 0; j < d->opCnt; j++) CHECK(rma_take(comm, m, d, lookup));
  }
  return ncclSuccess;
}
