/* Transport context: FIFO sizes, choosing a transport per connection (first can_connect wins, in
 * the order of transport_table), the connect-info exchange, lookups, peer liveness, teardown. */
#include "transport/transport.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "proxy/proxy.h"

/* Probed in order; the first whose can_connect accepts the pair wins. */
static const transport_ops_t* const transport_table[] = {
    &transport_p2p_ops,
    &transport_shm_ops,
    &transport_net_ops,
};
#define TRANSPORT_COUNT ((int)(sizeof(transport_table) / sizeof(transport_table[0])))

/* Bootstrap tags of the connect-info exchange: one per channel and direction, far from the tags
 * other layers use. Info always flows receiver -> sender. */
#define TRANSPORT_TAG_BASE 0x54520000
#define TRANSPORT_TAG(channel, to_sender) (TRANSPORT_TAG_BASE + 2 * (channel) + (to_sender))

#define FIFO_ALIGN 4096
#define FIFO_LINE 64

/* ---- FIFO memory layout ---------------------------------------------------------------------- */
typedef struct fifo_ctrl {
  volatile uint64_t head;
  char pad0[FIFO_LINE - sizeof(uint64_t)];
  volatile uint64_t tail;
  char pad1[FIFO_LINE - sizeof(uint64_t)];
  volatile int sizes[NCCL_STEPS];
  char pad2[FIFO_LINE - NCCL_STEPS * sizeof(int)];
  volatile uint64_t dmbox[2]; /* conn_fifo_t.dmbox */
} fifo_ctrl_t;

static size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

size_t transport_fifo_bytes(const int buff_bytes[PROTO_COUNT]) {
  size_t off = align_up(sizeof(fifo_ctrl_t), FIFO_ALIGN);
  for (int p = 0; p < PROTO_COUNT; p++)
    if (buff_bytes[p] > 0) off += align_up((size_t)buff_bytes[p], FIFO_ALIGN);
  return off;
}

void transport_fifo_attach(conn_fifo_t* fifo, char* base, const int buff_bytes[PROTO_COUNT],
                           int flags) {
  fifo_ctrl_t* ctrl = (fifo_ctrl_t*)base;
  size_t off = align_up(sizeof(fifo_ctrl_t), FIFO_ALIGN);
  memset(fifo, 0, sizeof(*fifo));
  for (int p = 0; p < PROTO_COUNT; p++) {
    if (buff_bytes[p] <= 0) continue;
    fifo->buffs[p] = base + off;
    fifo->buff_bytes[p] = buff_bytes[p];
    off += align_up((size_t)buff_bytes[p], FIFO_ALIGN);
  }
  fifo->head = &ctrl->head;
  fifo->tail = &ctrl->tail;
  fifo->sizes = ctrl->sizes;
  fifo->dmbox = ctrl->dmbox;
  fifo->step = 0;
  fifo->flags = flags;
  fifo->net_dev = -1;
}

ncclResult_t transport_fifo_map(const transport_ctx_t* ctx, void* base, size_t bytes,
                                bool* mapped) {
  *mapped = false;
  if (!ctx->gpu_fifos) return ncclSuccess;
  void* dev = NULL;
  CHECK(transport_host_mem_to_device(base, bytes, &dev));
  if (dev != base) {
    transport_host_mem_unregister(base);
    WARN(
        "The GPU sees host FIFO memory at %p under another address (%p); Baton needs unified "
        "addressing (64-bit Linux) for SHM and NET connections of the CUDA executor",
        base, dev);
    return ncclSystemError;
  }
  *mapped = true;
  return ncclSuccess;
}

/* ---- Context --------------------------------------------------------------------------------- */
/* A FIFO size: the caller's value if set, else the parameter; whole 128-byte lines per slot. */
static ncclResult_t ctx_buff_size(int given, param_id_t id, int* out) {
  const int64_t unit = NCCL_STEPS * LL128_LINE_BYTES;
  int64_t v = given > 0 ? given : param_int(id);
  if (v < unit || v > (int64_t)0x40000000) {
    WARN("%s=%lld is out of range: a FIFO needs %lld to %lld bytes", param_describe(id)->name,
         (long long)v, (long long)unit, (long long)0x40000000);
    return ncclInvalidArgument;
  }
  *out = (int)(v / unit * unit);
  return ncclSuccess;
}

ncclResult_t transport_ctx_init(transport_ctx_t* ctx) {
  int sizes[PROTO_COUNT] = {0};
  size_t n = (size_t)ctx->nchannels * (size_t)ctx->nranks;
  CHECK(ctx_buff_size(ctx->buff_bytes[PROTO_SIMPLE], PARAM_BUFFSIZE, &sizes[PROTO_SIMPLE]));
  CHECK(ctx_buff_size(ctx->buff_bytes[PROTO_LL], PARAM_LL_BUFFSIZE, &sizes[PROTO_LL]));
  /* LL128 only pays off on GPUs; the host executor never uses it. */
  if (ctx->gpu_fifos && !ctx->no_ll128)
    CHECK(ctx_buff_size(ctx->buff_bytes[PROTO_LL128], PARAM_LL128_BUFFSIZE, &sizes[PROTO_LL128]));
  conn_t** send = NULL;
  conn_t** recv = NULL;
  CHECK(MEM_CALLOC(&send, n));
  if (mem_calloc((void**)&recv, n, sizeof(*recv)) != ncclSuccess) {
    free(send);
    return ncclSystemError;
  }
  memcpy(ctx->buff_bytes, sizes, sizeof(sizes));
  ctx->send = send;
  ctx->recv = recv;
  ctx->proxy = NULL;
  ctx->net = NULL;
  return ncclSuccess;
}

/* Peer-major: a rank's connections with one peer over every channel share a few pages, where a
 * channel-major table of many ranks dirties pages on every channel (a 1024-rank simulation holds
 * 1024 of these tables). */
static size_t ctx_index(const transport_ctx_t* ctx, int channel, int peer) {
  return (size_t)peer * (size_t)ctx->nchannels + (size_t)channel;
}

conn_t* transport_conn(const transport_ctx_t* ctx, int channel, int peer, int is_send) {
  if (ctx->send == NULL || channel < 0 || channel >= ctx->nchannels || peer < 0 ||
      peer >= ctx->nranks)
    return NULL;
  return (is_send ? ctx->send : ctx->recv)[ctx_index(ctx, channel, peer)];
}

static conn_t** ctx_slot(transport_ctx_t* ctx, const conn_request_t* r) {
  return &(r->is_send ? ctx->send : ctx->recv)[ctx_index(ctx, r->channel, r->peer)];
}

/* ---- Connecting ------------------------------------------------------------------------------ */
static ncclResult_t conn_pick(transport_ctx_t* ctx, const conn_request_t* r, conn_t** out) {
  const peer_info_t* me = &ctx->peers[ctx->rank];
  const peer_info_t* peer = &ctx->peers[r->peer];
  for (int t = 0; t < TRANSPORT_COUNT; t++) {
    if (!transport_table[t]->can_connect(ctx, me, peer)) continue;
    conn_t* c = NULL;
    CHECK(MEM_CALLOC(&c, 1));
    c->transport = transport_table[t];
    c->channel = r->channel;
    c->peer = r->peer;
    c->is_send = r->is_send;
    *out = c;
    return ncclSuccess;
  }
  WARN(
      "Channel %02d: no transport can connect rank %d and rank %d (SHM: NCCL_SHM_DISABLE=%lld; "
      "NET: NCCL_NET=%s, see the NET lines above)",
      r->channel, ctx->rank, r->peer, (long long)param_int(PARAM_SHM_DISABLE),
      param_str(PARAM_NET) ? param_str(PARAM_NET) : "<unset>");
  return ncclSystemError;
}

static void conn_log(const transport_ctx_t* ctx, const conn_t* c) {
  int src = c->is_send ? ctx->rank : c->peer;
  int dst = c->is_send ? c->peer : ctx->rank;
  INFO(NCCL_INIT | (c->transport == &transport_net_ops ? NCCL_NET : NCCL_SHM),
       "Channel %02d/0 : %d[%d] -> %d[%d] [%s] via %s", c->channel, src, ctx->peers[src].cuda_dev,
       dst, ctx->peers[dst].cuda_dev, c->is_send ? "send" : "receive", c->desc);
}

static bool req_valid(const transport_ctx_t* ctx, const conn_request_t* r) {
  return r->channel >= 0 && r->channel < ctx->nchannels && r->peer >= 0 && r->peer < ctx->nranks;
}

/* Phases (each rank): A. set up every new receive and send its info to the sender; B. receive the
 * info of every new send and connect; C. finish every receive. A never waits for a peer, B waits
 * only for infos sent in A, C only for connects made in B, so no order of requests deadlocks. */
static ncclResult_t transport_peer_alive(void* ctx, int peer) {
  return transport_peer_check(ctx, peer);
}

/* The rank of this rank's host whose GPU is at bus_id, -1 none. */
static int ctx_host_rank(const transport_ctx_t* ctx, int64_t bus_id) {
  const peer_info_t* me = &ctx->peers[ctx->rank];
  for (int q = 0; q < ctx->nranks; q++)
    if (ctx->peers[q].host_hash == me->host_hash && ctx->peers[q].bus_id == bus_id) return q;
  return -1;
}

/* A virtual cluster's rank (ctx->virtual_conns): each connection's transport is
 * chosen as for a real one, but nothing is allocated and no peer takes part; the FIFO only says
 * how it was made (its flags, its sizes, the NIC of a NET connection). */
static ncclResult_t connect_virtual(transport_ctx_t* ctx, const conn_request_t* reqs, int nreqs) {
  for (int i = 0; i < nreqs; i++) {
    const conn_request_t* r = &reqs[i];
    conn_t** slot = ctx_slot(ctx, r);
    if (*slot != NULL) continue;
    conn_t* c = NULL;
    CHECK(conn_pick(ctx, r, &c));
    bool net = c->transport == &transport_net_ops;
    c->fifo.flags = net                                  ? CONN_FLAG_NET | CONN_FLAG_HOSTMEM
                    : c->transport == &transport_shm_ops ? CONN_FLAG_HOSTMEM
                                                         : 0;
    memcpy(c->fifo.buff_bytes, ctx->buff_bytes, sizeof(c->fifo.buff_bytes));
    c->fifo.net_dev = net ? transport_net_virtual_dev(ctx, r->channel, r->peer, r->is_send) : -1;
    int relay = net && r->is_send ? transport_net_virtual_relay(ctx, c->fifo.net_dev) : -1;
    if (relay >= 0) /* PXN: name the rank whose GPU relays */
      snprintf(c->desc, sizeof(c->desc), "NET/virtual/%d PXN rank %d", c->fifo.net_dev,
               ctx_host_rank(ctx, ctx->topo->gpus[relay].bus_id));
    else if (net)
      snprintf(c->desc, sizeof(c->desc), "NET/virtual/%d", c->fifo.net_dev);
    else
      snprintf(c->desc, sizeof(c->desc), "%s/virtual", c->transport->name);
    *slot = c;
    conn_log(ctx, c);
  }
  return ncclSuccess;
}

ncclResult_t transport_connect(transport_ctx_t* ctx, const conn_request_t* reqs, int nreqs) {
  ncclResult_t res = ncclSuccess;
  conn_t** pending = NULL; /* receives between phases A and C */
  char info[CONN_INFO_BYTES];
  if (nreqs <= 0) return ncclSuccess;
  for (int i = 0; i < nreqs; i++) {
    if (!req_valid(ctx, &reqs[i])) {
      WARN("transport_connect: request %d (channel %d, peer %d) is outside %d channels x %d ranks",
           i, reqs[i].channel, reqs[i].peer, ctx->nchannels, ctx->nranks);
      return ncclInvalidArgument;
    }
  }
  if (ctx->virtual_conns) return connect_virtual(ctx, reqs, nreqs);
  CHECK(MEM_CALLOC(&pending, (size_t)nreqs));
  /* A: receivers. A placeholder in the slot marks duplicates in the list. */
  for (int i = 0; i < nreqs; i++) {
    const conn_request_t* r = &reqs[i];
    conn_t** slot = ctx_slot(ctx, r);
    if (r->is_send || *slot != NULL) continue;
    CHECK_GOTO(conn_pick(ctx, r, &pending[i]), res, out);
    memset(info, 0, sizeof(info));
    CHECK_GOTO(pending[i]->transport->recv_setup(ctx, pending[i], info), res, out);
    *slot = pending[i];
    CHECK_GOTO(
        bootstrap_send(ctx->bootstrap, r->peer, TRANSPORT_TAG(r->channel, 1), info, sizeof(info)),
        res, out);
  }
  /* B: senders. */
  for (int i = 0; i < nreqs; i++) {
    const conn_request_t* r = &reqs[i];
    conn_t** slot = ctx_slot(ctx, r);
    if (!r->is_send || *slot != NULL) continue;
    conn_t* c = NULL;
    CHECK_GOTO(conn_pick(ctx, r, &c), res, out);
    /* watched: a connection made at run time (a first Send to a peer) may wait on a dead peer */
    res = bootstrap_recv_watched(ctx->bootstrap, r->peer, TRANSPORT_TAG(r->channel, 1), info,
                                 sizeof(info), transport_peer_alive, ctx);
    if (res == ncclSuccess) res = c->transport->send_connect(ctx, c, info);
    if (res != ncclSuccess) {
      INFO(NCCL_INIT, "%s:%d -> %d", __FILE__, __LINE__, (int)res);
      free(c);
      goto out;
    }
    *slot = c;
    conn_log(ctx, c);
  }
  /* C: receivers finish. */
  for (int i = 0; i < nreqs; i++) {
    conn_t* c = pending[i];
    if (c == NULL) continue;
    CHECK_GOTO(c->transport->recv_connect(ctx, c), res, out);
    pending[i] = NULL;
    conn_log(ctx, c);
  }
out:
  /* Receives that did not finish are torn down; finished connections stay (ctx_free owns them). */
  for (int i = 0; i < nreqs; i++) {
    conn_t* c = pending[i];
    if (c == NULL) continue;
    *ctx_slot(ctx, &reqs[i]) = NULL;
    if (c->priv != NULL) c->transport->free(ctx, c);
    free(c);
  }
  free(pending);
  return res;
}

/* ---- Liveness and teardown ------------------------------------------------------------------- */
/* Whether peer's pid means a process of our pid namespace (containers sharing a host identity may
 * not share pids). pid_hash() hashes "<pid>:<pid namespace inode>" (src/base/util.c); if that
 * formula changes, this answers false and the pid test is skipped, never misapplied. */
static bool peer_in_my_pid_ns(const peer_info_t* p) {
  struct stat st;
  char id[64];
  unsigned long long ns = stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
  int n = snprintf(id, sizeof(id), "%d:%llu", p->pid, ns);
  return n > 0 && hash_bytes(id, (size_t)n) == p->pid_hash;
}

/* An exited process stays a zombie until its parent reaps it, and kill(pid, 0) still succeeds:
 * its /proc state says Z (or X). */
static bool pid_is_zombie(int pid) {
  char path[64], buf[512];
  snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = fopen(path, "re");
  if (f == NULL) return false;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char* close = strrchr(buf, ')'); /* the name may contain spaces and parentheses */
  return close != NULL && close[1] == ' ' && (close[2] == 'Z' || close[2] == 'X');
}

/* Whether a connection from peer holds steps this rank has not consumed yet (tail > head). */
static bool peer_has_unread(const transport_ctx_t* ctx, int peer) {
  for (int ch = 0; ch < ctx->nchannels; ch++) {
    const conn_t* c = transport_conn(ctx, ch, peer, 0);
    if (c != NULL && __atomic_load_n(c->fifo.tail, __ATOMIC_ACQUIRE) >
                         __atomic_load_n(c->fifo.head, __ATOMIC_ACQUIRE))
      return true;
  }
  return false;
}

/* A peer that is gone (exited, or closed its NET connections) is an error only once everything
 * it sent has been consumed: it may have finished its part and left before this rank caught up. */
ncclResult_t transport_peer_check(transport_ctx_t* ctx, int peer) {
  if (peer < 0 || peer >= ctx->nranks || ctx->peers == NULL) return ncclSuccess;
  const peer_info_t* me = &ctx->peers[ctx->rank];
  const peer_info_t* p = &ctx->peers[peer];
  bool exited = false, closed = false;
  if (ctx->proxy != NULL) {
    ncclResult_t res = proxy_error(ctx->proxy);
    if (res != ncclSuccess) return res; /* a network failure; the proxy has logged it */
    closed = proxy_peer_closed(ctx->proxy, peer);
    proxy_wake(ctx->proxy); /* a waiting executor: make sure NET progress is not asleep */
  }
  if (p->host_hash == me->host_hash && p->pid > 0 && p->pid_hash != me->pid_hash &&
      peer_in_my_pid_ns(p))
    exited = (kill(p->pid, 0) != 0 && errno == ESRCH) || pid_is_zombie(p->pid);
  if (!(exited || closed) || peer_has_unread(ctx, peer)) return ncclSuccess;
  if (exited)
    WARN("Rank %d (pid %d on host %s) has exited; rank %d cannot complete its operations with it",
         peer, p->pid, host_name(), ctx->rank);
  else
    WARN(
        "Rank %d closed its NET connection to rank %d (it exited, aborted or destroyed its "
        "communicator) while rank %d still waits on it",
        peer, ctx->rank, ctx->rank);
  return ncclRemoteError;
}

static void conn_release(transport_ctx_t* ctx, conn_t* c) {
  if (!ctx->virtual_conns) c->transport->free(ctx, c);
  c->priv = NULL;
  c->bytes = 0;
}

ncclResult_t transport_ctx_free(transport_ctx_t* ctx) {
  /* The proxy goes first: it references NET connections' FIFOs and comms. */
  if (ctx->proxy != NULL) {
    proxy_destroy(ctx->proxy);
    ctx->proxy = NULL;
  }
  size_t n = (size_t)ctx->nchannels * (size_t)ctx->nranks;
  for (int dir = 0; dir < 2; dir++) {
    conn_t** table = dir ? ctx->send : ctx->recv;
    if (table == NULL) continue;
    for (size_t i = 0; i < n; i++) {
      conn_t* c = table[i];
      if (c == NULL) continue;
      conn_release(ctx, c);
      free(c);
      table[i] = NULL;
    }
    free(table);
  }
  ctx->send = NULL;
  ctx->recv = NULL;
  for (size_t i = 0; i < ctx->nretired; i++) free(ctx->retired[i]);
  free(ctx->retired);
  ctx->retired = NULL;
  ctx->nretired = ctx->retired_cap = 0;
  transport_net_release(ctx);
  return ncclSuccess;
}

/* Room for more shells in ctx->retired, made before anything is released. */
static ncclResult_t ctx_retired_reserve(transport_ctx_t* ctx, size_t more) {
  if (ctx->nretired + more <= ctx->retired_cap) return ncclSuccess;
  size_t cap = ctx->retired_cap ? ctx->retired_cap : 64;
  while (cap < ctx->nretired + more) cap *= 2;
  conn_t** p = realloc(ctx->retired, cap * sizeof(*p));
  if (p == NULL) {
    WARN("Transport: out of memory for %zu released connections", cap);
    return ncclSystemError;
  }
  ctx->retired = p;
  ctx->retired_cap = cap;
  return ncclSuccess;
}

ncclResult_t transport_release_all(transport_ctx_t* ctx, conn_request_t** out, int* nout) {
  size_t n = (size_t)ctx->nchannels * (size_t)ctx->nranks, live = 0;
  conn_request_t* reqs = NULL;
  int nreqs = 0;
  *out = NULL;
  *nout = 0;
  if (ctx->send == NULL) return ncclSuccess;
  for (size_t i = 0; i < n; i++) live += (ctx->send[i] != NULL) + (ctx->recv[i] != NULL);
  CHECK(ctx_retired_reserve(ctx, live));
  CHECK(MEM_CALLOC(&reqs, live + 1));
  if (ctx->proxy != NULL) { /* it references NET connections' FIFOs and comms */
    proxy_destroy(ctx->proxy);
    ctx->proxy = NULL;
  }
  for (int dir = 0; dir < 2; dir++) {
    conn_t** table = dir ? ctx->send : ctx->recv;
    for (size_t i = 0; i < n; i++) {
      conn_t* c = table[i];
      if (c == NULL) continue;
      reqs[nreqs++] = (conn_request_t){.channel = c->channel, .peer = c->peer, .is_send = dir};
      conn_release(ctx, c);
      table[i] = NULL;
      ctx->retired[ctx->nretired++] = c;
    }
  }
  *out = reqs;
  *nout = nreqs;
  return ncclSuccess;
}

size_t transport_mem_bytes(const transport_ctx_t* ctx) {
  size_t n = (size_t)ctx->nchannels * (size_t)ctx->nranks, sum = 0;
  for (int dir = 0; dir < 2; dir++) {
    conn_t** table = dir ? ctx->send : ctx->recv;
    if (table == NULL) continue;
    for (size_t i = 0; i < n; i++)
      if (table[i] != NULL) sum += table[i]->bytes;
  }
  return sum;
}
