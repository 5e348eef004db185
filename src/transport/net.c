/* NET transport: a connection through the network chosen by net_select (an ncclNet plugin or a
 * built-in). Each side keeps its FIFO in its own host memory; the proxy thread moves filled slots
 * from the sender's staging FIFO to the receiver's FIFO (see src/proxy/proxy.c for the format).
 *   receiver: recv_setup allocates the FIFO and listens; the listen handle is the connect info;
 *             recv_connect accepts and hands the connection to the proxy.
 *   sender:   send_connect allocates the staging FIFO (sized like the receiver's), connects and
 *             hands the connection to the proxy. The proxy starts with the first NET connection. */
#include <stdlib.h>
#include <time.h>

#include "proxy/proxy.h"
#include "transport/transport.h"

typedef struct net_info {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  int dev;
  int buff_bytes[PROTO_COUNT];
} net_info_t;
_Static_assert(sizeof(net_info_t) <= CONN_INFO_BYTES, "connect info must fit");

/* The network of a transport context and the context it opened there (one per communicator). */
typedef struct net_state {
  const ncclNet_t* net;
  void* ctx;
  int ndev;
} net_state_t;

typedef struct net_res {
  const ncclNet_t* net;
  void* net_ctx;
  int dev;
  void* listen_comm;
  void* comm; /* send or recv comm */
  char* mem;  /* FIFO block (transport_fifo_bytes) */
  bool gpu_mapped;
  proxy_conn_t pconn;
} net_res_t;

static bool net_can_connect(const transport_ctx_t* ctx, const peer_info_t* me,
                            const peer_info_t* peer) {
  const ncclNet_t* net = NULL;
  return net_select(&net, NULL) == ncclSuccess;
}

static ncclResult_t net_state_get(transport_ctx_t* ctx, net_state_t** out) {
  if (ctx->net == NULL) {
    net_state_t* st = NULL;
    CHECK(MEM_CALLOC(&st, 1));
    ncclResult_t res = net_select(&st->net, &st->ndev);
    if (res == ncclSuccess)
      res = net_ctx_open(st->net, ctx->comm_hash, ctx->traffic_class, &st->ctx);
    if (res != ncclSuccess) {
      free(st);
      return res;
    }
    ctx->net = st;
  }
  *out = ctx->net;
  return ncclSuccess;
}

void transport_net_release(transport_ctx_t* ctx) {
  net_state_t* st = ctx->net;
  if (st == NULL) return;
  net_ctx_close(st->net, st->ctx);
  free(st);
  ctx->net = NULL;
}

static ncclResult_t net_res_alloc(transport_ctx_t* ctx, conn_t* conn, const int buff_bytes[],
                                  net_res_t** out) {
  net_res_t* r = NULL;
  net_state_t* st = NULL;
  CHECK(net_state_get(ctx, &st));
  CHECK(MEM_CALLOC(&r, 1));
  ncclResult_t res;
  r->net = st->net;
  r->net_ctx = st->ctx;
  r->dev = conn->channel % st->ndev;
  size_t bytes = transport_fifo_bytes(buff_bytes);
  if (posix_memalign((void**)&r->mem, 4096, bytes) != 0) {
    WARN("NET: out of host memory for a %zu-byte FIFO (NCCL_BUFFSIZE)", bytes);
    res = ncclSystemError;
    goto fail;
  }
  memset(r->mem, 0, bytes);
  CHECK_GOTO(transport_fifo_map(ctx, r->mem, bytes, &r->gpu_mapped), res, fail);
  transport_fifo_attach(&conn->fifo, r->mem, buff_bytes, CONN_FLAG_NET | CONN_FLAG_HOSTMEM);
  *out = r;
  return ncclSuccess;
fail:
  free(r->mem);
  free(r);
  return res;
}

/* Connect/accept may return no comm yet: call again, bounded by the abort flag and a timeout. */
static ncclResult_t net_wait_comm(transport_ctx_t* ctx, conn_t* conn, net_res_t* r, void* handle) {
  uint64_t limit_ms = (uint64_t)param_int(PARAM_BOOTSTRAP_TIMEOUT_MS);
  uint64_t deadline = clock_ns() + limit_ms * 1000000ull;
  ncclNetDeviceHandle_t* dev_handle = NULL;
  while (r->comm == NULL) {
    if (conn->is_send)
      CHECK(r->net->connect(r->net_ctx, r->dev, handle, &r->comm, &dev_handle));
    else
      CHECK(r->net->accept(r->listen_comm, &r->comm, &dev_handle));
    if (r->comm != NULL) break;
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
  if (ctx->proxy == NULL)
    CHECK(proxy_create(ctx->abort_flag, ctx->err_buf, ctx->err_len, &ctx->proxy));
  r->pconn = (proxy_conn_t){.fifo = &conn->fifo,
                            .is_send = conn->is_send,
                            .net_comm = r->comm,
                            .net = r->net,
                            .peer = conn->peer};
  CHECK(proxy_add_conn(ctx->proxy, &r->pconn));
  snprintf(conn->desc, sizeof(conn->desc), "NET/%s/%d", r->net->name, r->dev);
  return ncclSuccess;
}

static ncclResult_t net_res_free(net_res_t* r) {
  if (r == NULL) return ncclSuccess;
  if (r->comm != NULL) {
    if (r->pconn.is_send)
      r->net->closeSend(r->comm);
    else
      r->net->closeRecv(r->comm);
  }
  if (r->listen_comm != NULL) r->net->closeListen(r->listen_comm);
  if (r->gpu_mapped) transport_host_mem_unregister(r->mem);
  free(r->mem);
  free(r);
  return ncclSuccess;
}

static ncclResult_t net_recv_setup(transport_ctx_t* ctx, conn_t* conn, void* info) {
  net_res_t* r = NULL;
  net_info_t ni;
  ncclResult_t res;
  memset(&ni, 0, sizeof(ni));
  CHECK(net_res_alloc(ctx, conn, ctx->buff_bytes, &r));
  CHECK_GOTO(r->net->listen(r->net_ctx, r->dev, ni.handle, &r->listen_comm), res, fail);
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
  CHECK(net_res_alloc(ctx, conn, ni.buff_bytes, &r));
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
