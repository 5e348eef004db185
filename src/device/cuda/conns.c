/* Device mirrors of the transport's connections, and the per-channel table the kernel reads.
 *
 * The transport creates connections lazily (on the first plan that needs them) and hands the
 * executor conn_fifo_t structures in host memory; their pointers (slots, head, tail, sizes) are
 * device-accessible when the executor is CUDA. The kernel advances each connection's step and
 * must find it again at the next launch, so every connection gets one mirror in device memory
 * (cuda_conn_t), made the first time a launch uses it, and keeps it until fini.
 *
 * The checks on the launch path are pointer comparisons; a write happens only when a connection
 * appears (or is replaced). Writes go through a private non-blocking stream and are waited for
 * before the launch, in relaxed stream-capture mode so that a first use inside a CUDA graph
 * capture works too; they never synchronise with the user's streams. */
#include <stdlib.h>

#include "device/cuda/cuda_exec.h"

size_t cuda_fifo_capacity(const conn_fifo_t* f, int proto) {
  if (f == NULL || proto < 0 || proto >= PROTO_COUNT || f->buffs[proto] == NULL ||
      f->buff_bytes[proto] <= 0)
    return 0;
  size_t slot = fifo_slot_bytes(f->buff_bytes[proto]);
  switch (proto) {
    case PROTO_LL:
      return slot / sizeof(ll_line_t) * 8;
    case PROTO_LL128:
      return slot / LL128_LINE_BYTES * LL128_DATA_BYTES;
    default:
      return slot;
  }
}

/* ---- Relaxed capture mode around the rare setup work ---------------------------------------- */
static enum cudaStreamCaptureMode capture_relax(void) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  return mode;
}

static void capture_restore(enum cudaStreamCaptureMode mode) {
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
}

static ncclResult_t side_copy(cuda_exec_t* ex, void* dst, const void* src, size_t bytes) {
  ncclResult_t res = ncclSuccess;
  enum cudaStreamCaptureMode mode = capture_relax();
  CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ex->side), res, restore);
  ex->pending++;
restore:
  capture_restore(mode);
  return res;
}

static ncclResult_t dev_alloc(void** ptr, size_t bytes) {
  ncclResult_t res = ncclSuccess;
  enum cudaStreamCaptureMode mode = capture_relax();
  CUDA_CHECK_GOTO(cudaMalloc(ptr, bytes), res, restore);
restore:
  capture_restore(mode);
  return res;
}

ncclResult_t cuda_conns_flush(cuda_exec_t* ex) {
  if (ex->pending == 0) return ncclSuccess;
  ncclResult_t res = ncclSuccess;
  enum cudaStreamCaptureMode mode = capture_relax();
  ex->pending = 0;
  CUDA_CHECK_GOTO(cudaStreamSynchronize(ex->side), res, restore);
restore:
  capture_restore(mode);
  return res;
}

/* ---- Mirrors -------------------------------------------------------------------------------- */
static ncclResult_t pool_take(cuda_exec_t* ex, cuda_conn_t** out) {
  if (ex->npool == 0 || ex->pool_used == CUDA_POOL_BLOCK) {
    if (ex->npool == ex->pool_cap) {
      int cap = ex->pool_cap ? 2 * ex->pool_cap : 8;
      cuda_conn_t** p = realloc(ex->pool, (size_t)cap * sizeof(*p));
      if (p == NULL) {
        WARN("CUDA executor: out of memory for %d connection mirror blocks", cap);
        return ncclSystemError;
      }
      ex->pool = p;
      ex->pool_cap = cap;
    }
    void* blk = NULL;
    CHECK(dev_alloc(&blk, CUDA_POOL_BLOCK * sizeof(cuda_conn_t)));
    ex->pool[ex->npool++] = blk;
    ex->pool_used = 0;
  }
  *out = ex->pool[ex->npool - 1] + ex->pool_used++;
  return ncclSuccess;
}

static ncclResult_t conn_check(const cuda_exec_t* ex, int c, int peer, int is_send,
                               const conn_fifo_t* f) {
  for (int p = 0; p < PROTO_COUNT; p++) {
    if (f->buffs[p] == NULL) continue;
    size_t align = p == PROTO_LL128 ? LL128_LINE_BYTES : 16;
    size_t slot = fifo_slot_bytes(f->buff_bytes[p]);
    if ((uintptr_t)f->buffs[p] % align != 0 || slot % align != 0) {
      WARN(
          "CUDA executor: rank %d channel %d: the %s buffer of the FIFO %s rank %d is at %p with "
          "%zu-byte slots; the kernels need both aligned to %zu bytes",
          ex->comm->rank, c,
          p == PROTO_SIMPLE ? "Simple"
          : p == PROTO_LL   ? "LL"
                            : "LL128",
          is_send ? "to" : "from", peer, (void*)f->buffs[p], slot, align);
      return ncclInternalError;
    }
  }
  if (f->head == NULL || f->tail == NULL || f->sizes == NULL) {
    WARN("CUDA executor: rank %d channel %d: the FIFO %s rank %d has no head/tail/sizes counters",
         ex->comm->rank, c, is_send ? "to" : "from", peer);
    return ncclInternalError;
  }
  return ncclSuccess;
}

ncclResult_t cuda_conn_mirror(cuda_exec_t* ex, int c, int peer, int is_send, cuda_conn_t** out) {
  const exec_comm_t* comm = ex->comm;
  const dev_channel_t* dc = &comm->channels[c];
  cuda_chan_host_t* h = &ex->chans[c];
  if (peer < 0 || peer >= comm->nranks) {
    WARN("CUDA executor: rank %d channel %d: peer %d is not a rank of this communicator of %d",
         comm->rank, c, peer, comm->nranks);
    return ncclInternalError;
  }
  const conn_fifo_t* f =
      (is_send ? dc->send : dc->recv) ? (is_send ? dc->send : dc->recv)[peer] : NULL;
  if (f == NULL) {
    WARN(
        "CUDA executor: rank %d has no connection %s rank %d on channel %d; the planner must "
        "connect it before launching work that uses it",
        comm->rank, is_send ? "to" : "from", peer, c);
    return ncclInternalError;
  }
  if (h->mirrors == NULL)
    CHECK(mem_calloc((void**)&h->mirrors, 2 * (size_t)comm->nranks, sizeof(*h->mirrors)));
  cuda_mirror_t* m = &h->mirrors[is_send ? peer : comm->nranks + peer];
  if (m->host == f) {
    *out = m->dev;
    return ncclSuccess;
  }
  CHECK(conn_check(ex, c, peer, is_send, f));
  if (m->dev == NULL) CHECK(pool_take(ex, &m->dev));
  cuda_conn_t img;
  memset(&img, 0, sizeof(img));
  for (int p = 0; p < PROTO_COUNT; p++) {
    img.buffs[p] = f->buffs[p];
    img.buff_bytes[p] = f->buffs[p] != NULL ? f->buff_bytes[p] : 0;
  }
  img.flags = f->flags;
  img.head = (uint64_t*)f->head;
  img.tail = (uint64_t*)f->tail;
  img.sizes = (int*)f->sizes;
  img.step = f->step;
  CHECK(side_copy(ex, m->dev, &img, sizeof(img)));
  m->host = f;
  INFO(NCCL_INIT, "CUDA executor: rank %d channel %d: mirrored the FIFO %s rank %d (step %llu)",
       comm->rank, c, is_send ? "to" : "from", peer, (unsigned long long)f->step);
  *out = m->dev;
  return ncclSuccess;
}

/* ---- Channel table ----------------------------------------------------------------------------
 */
static const conn_fifo_t* chan_conn(const dev_channel_t* dc, int peer, int is_send) {
  conn_fifo_t** tab = is_send ? dc->send : dc->recv;
  return peer >= 0 && tab != NULL ? tab[peer] : NULL;
}

static bool cc_is_send(int i) {
  return i == CUDA_CC_RING_SEND || i == CUDA_CC_UP_SEND ||
         (i >= CUDA_CC_DOWN_SEND && i < CUDA_CC_DOWN_RECV) ||
         (i >= CUDA_CC_PEER_SEND && i < CUDA_CC_PEER_RECV);
}

/* The peer behind entry i of a channel's table (the CUDA_CC_* order), -1 for none: the ring's
 * neighbours, the tree's parent, its children packed in order and, for the direct algorithms,
 * the other ranks in rank order. */
static int entry_peer(const exec_comm_t* comm, const dev_channel_t* dc, int i) {
  if (comm->nranks < 2) return -1;
  switch (i) {
    case CUDA_CC_RING_SEND:
      return dc->ring_next;
    case CUDA_CC_RING_RECV:
      return dc->ring_prev;
    case CUDA_CC_UP_SEND:
    case CUDA_CC_UP_RECV:
      return dc->tree_up;
    default:
      break;
  }
  if (i < CUDA_CC_PEER_SEND) { /* DOWN_RECV = DOWN_SEND + TREE_MAX_CHILDREN */
    int k = (i - CUDA_CC_DOWN_SEND) % TREE_MAX_CHILDREN;
    for (int j = 0; j < TREE_MAX_CHILDREN; j++)
      if (dc->tree_down[j] >= 0 && k-- == 0) return dc->tree_down[j];
    return -1;
  }
  const int k = (i - CUDA_CC_PEER_SEND) % DIRECT_MAX_PEERS; /* PEER_RECV = PEER_SEND + that */
  if (comm->nranks > DIRECT_MAX_RANKS || k >= comm->nranks - 1) return -1;
  return k < comm->rank ? k : k + 1;
}

static const conn_fifo_t* entry_conn(const exec_comm_t* comm, const dev_channel_t* dc, int i,
                                     int peer) {
  return peer >= 0 && peer != comm->rank ? chan_conn(dc, peer, cc_is_send(i)) : NULL;
}

/* The connections the entry of channel c should point at now, and their peers. */
static void chan_current(const exec_comm_t* comm, int c, const conn_fifo_t** cur, int* peer) {
  const dev_channel_t* dc = &comm->channels[c];
  for (int i = 0; i < CUDA_CC_COUNT; i++) {
    peer[i] = entry_peer(comm, dc, i);
    cur[i] = entry_conn(comm, dc, i, peer[i]);
  }
}

/* The entries of each kind of connection (CUDA_CHAN_USES_*), as ranges of the CUDA_CC_* order. */
static const struct {
  int first, end;
} chan_uses_range[] = {{CUDA_CC_RING_SEND, CUDA_CC_UP_SEND},
                       {CUDA_CC_UP_SEND, CUDA_CC_PEER_SEND},
                       {CUDA_CC_PEER_SEND, CUDA_CC_COUNT}};

/* Whether channel c's entries of the kinds in `uses` still mirror what chan_current gives,
 * compared entry by entry with no table built. Only the kinds a launch's items read are compared:
 * all 24 entries of 48 channels on 4 communicators were 35 % of an eager 4-GPU Reduce's launching
 * thread (a sampled profile), which a ring item reads 2 of. */
static bool chan_unchanged(const exec_comm_t* comm, int c, const cuda_chan_host_t* h,
                           unsigned uses) {
  const dev_channel_t* dc = &comm->channels[c];
  if (!h->written || dc->ring_ranks != h->ring_src) return false;
  for (unsigned k = 0; k < sizeof(chan_uses_range) / sizeof(chan_uses_range[0]); k++) {
    if (!(uses & (1u << k))) continue;
    for (int i = chan_uses_range[k].first; i < chan_uses_range[k].end; i++)
      if (entry_conn(comm, dc, i, entry_peer(comm, dc, i)) != h->src[i]) return false;
  }
  return true;
}

ncclResult_t cuda_chan_sync(cuda_exec_t* ex, int c, unsigned uses) {
  const exec_comm_t* comm = ex->comm;
  const dev_channel_t* dc = &comm->channels[c];
  cuda_chan_host_t* h = &ex->chans[c];
  if (chan_unchanged(comm, c, h, uses)) return ncclSuccess; /* the launch path: nothing changed */
  const conn_fifo_t* cur[CUDA_CC_COUNT];
  int peer[CUDA_CC_COUNT];
  chan_current(comm, c, cur, peer);

  cuda_chan_t* e = &h->entry;
  if (dc->ring_ranks != h->ring_src && dc->ring_ranks != NULL) {
    if (h->d_ring == NULL) CHECK(dev_alloc((void**)&h->d_ring, (size_t)comm->nranks * sizeof(int)));
    CHECK(side_copy(ex, h->d_ring, dc->ring_ranks, (size_t)comm->nranks * sizeof(int)));
    h->ring_src = dc->ring_ranks;
  }
  e->ring_ranks = h->d_ring;
  e->ring_index = dc->ring_index;
  e->tree_up = dc->tree_up;
  e->ndown = 0;
  for (int j = 0; j < TREE_MAX_CHILDREN; j++) {
    e->tree_down[j] = dc->tree_down[j];
    if (dc->tree_down[j] >= 0) e->ndown++;
  }
  cuda_conn_t* dev[CUDA_CC_COUNT];
  for (int i = 0; i < CUDA_CC_COUNT; i++) {
    dev[i] = NULL;
    if (cur[i] == NULL) continue;
    CHECK(cuda_conn_mirror(ex, c, peer[i], cc_is_send(i), &dev[i]));
  }
  e->ring_send = dev[CUDA_CC_RING_SEND];
  e->ring_recv = dev[CUDA_CC_RING_RECV];
  e->up_send = dev[CUDA_CC_UP_SEND];
  e->up_recv = dev[CUDA_CC_UP_RECV];
  for (int k = 0; k < TREE_MAX_CHILDREN; k++) {
    e->down_send[k] = dev[CUDA_CC_DOWN_SEND + k];
    e->down_recv[k] = dev[CUDA_CC_DOWN_RECV + k];
  }
  for (int k = 0; k < DIRECT_MAX_PEERS; k++) {
    e->peer_send[k] = dev[CUDA_CC_PEER_SEND + k];
    e->peer_recv[k] = dev[CUDA_CC_PEER_RECV + k];
  }
  CHECK(side_copy(ex, &ex->d_chans[c], e, sizeof(*e)));
  memcpy(h->src, cur, sizeof(cur));
  h->written = true;
  return ncclSuccess;
}

/* ---- Lifetime ------------------------------------------------------------------------------- */
ncclResult_t cuda_conns_init(cuda_exec_t* ex) {
  int nch = ex->comm->nchannels;
  if (nch < 1 || nch > PLAN_MAX_CHANNELS) {
    WARN("CUDA executor: a communicator with %d channels (1 to %d supported)", nch,
         PLAN_MAX_CHANNELS);
    return ncclInternalError;
  }
  CHECK(mem_calloc((void**)&ex->chans, (size_t)nch, sizeof(*ex->chans)));
  CHECK(dev_alloc((void**)&ex->d_chans, (size_t)nch * sizeof(cuda_chan_t)));
  CUDA_CHECK(cudaMemsetAsync(ex->d_chans, 0, (size_t)nch * sizeof(cuda_chan_t), ex->side));
  ex->pending++;
  return cuda_conns_flush(ex);
}

void cuda_conns_fini(cuda_exec_t* ex) {
  if (ex->chans != NULL) {
    for (int c = 0; c < ex->comm->nchannels; c++) {
      if (ex->chans[c].d_ring != NULL) (void)cudaFree(ex->chans[c].d_ring);
      free(ex->chans[c].mirrors);
    }
    free(ex->chans);
    ex->chans = NULL;
  }
  for (int i = 0; i < ex->npool; i++) (void)cudaFree(ex->pool[i]);
  free(ex->pool);
  ex->pool = NULL;
  ex->npool = ex->pool_cap = 0;
  if (ex->d_chans != NULL) (void)cudaFree(ex->d_chans);
  ex->d_chans = NULL;
}
