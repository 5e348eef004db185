/* The built-in TCP network "Socket", an ncclNet_t. Devices are the interfaces the bootstrap chose
 * (NCCL_SOCKET_IFNAME). A connection is one control socket plus, when NCCL_NSOCKS_PERTHREAD x
 * NCCL_SOCKET_NTHREADS > 1, that many data sockets served by NCCL_SOCKET_NTHREADS helper threads.
 *
 * Wire format per message: an 8-byte size on the control socket, then the payload.
 *   1 data stream (the default 1x1): the payload follows the size on the control socket, moved by
 *     the caller's thread inside test().
 *   N data streams: the payload is cut into at most N chunks of at least SOCK_MIN_CHUNK bytes;
 *     chunk k travels on stream (first + k) % N, where `first` rotates by one per message. Both
 *     sides derive the same cut from the size, so chunks need no header of their own.
 * Messages on a comm match in posting order; a receive shorter than the message is an error. */
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "net/ib.h"

#define SOCK_MIN_CHUNK (64 * 1024)
#define SOCK_MAX_STREAMS 64
#define SOCK_MAX_THREADS 16
#define SOCK_NREQS NCCL_NET_MAX_REQUESTS
#define SOCK_NAME_MAX 80

typedef struct sock_handle {
  uint64_t magic;
  socket_addr_t addr;
  int32_t nsocks;   /* per thread */
  int32_t nthreads; /* per connection */
} sock_handle_t;
_Static_assert(sizeof(sock_handle_t) <= NCCL_NET_HANDLE_MAXSIZE, "handle must fit");

/* First bytes on every socket of a connection: which stream it is (0: control). */
typedef struct sock_hello {
  uint64_t magic;
  int32_t index;
  int32_t pad;
} sock_hello_t;

enum { REQ_FREE = 0, REQ_HDR, REQ_DATA, REQ_DONE };

struct sock_comm;
typedef struct sock_req {
  struct sock_comm* comm;
  int stage;
  int reported; /* test() said done; the slot frees when it reaches the queue head */
  char* data;
  size_t size;     /* send: message size; recv: buffer size */
  size_t msg_size; /* bytes actually carried */
  uint64_t hdr;
  size_t hdr_done;
  size_t data_done;
  atomic_int chunks_left;
} sock_req_t;

typedef struct sock_task {
  char* data;
  size_t size;
  size_t done;
  sock_req_t* req;
} sock_task_t;

/* A data socket and its queue of chunks (single producer: test(); single consumer: its thread). */
typedef struct sock_stream {
  socket_conn_t conn;
  sock_task_t tasks[SOCK_NREQS];
  atomic_uint_fast64_t head; /* next task to move (consumer) */
  atomic_uint_fast64_t tail; /* next free task (producer) */
  atomic_uint_fast64_t bytes;
} sock_stream_t;

typedef struct sock_thread {
  pthread_t thread;
  bool started;
  int efd; /* eventfd: new tasks or stop */
  struct sock_comm* comm;
  int first, count; /* its streams */
} sock_thread_t;

typedef struct sock_comm {
  int is_send;
  socket_conn_t ctrl;
  char peer[SOCK_NAME_MAX];
  int nstreams; /* 0: payload inline on ctrl */
  sock_stream_t* streams;
  int nthreads;
  sock_thread_t* threads;
  atomic_bool stop;
  atomic_int error;          /* first ncclResult_t error, set by any thread */
  atomic_bool error_claimed; /* the thread that sets error (after logging it) */
  uint64_t msg_seq;
  uint64_t inline_bytes;
  sock_req_t reqs[SOCK_NREQS];
  sock_req_t* queue[SOCK_NREQS]; /* posting order */
  int q_head, q_count;
} sock_comm_t;

typedef struct sock_listen {
  socket_conn_t sock;
  sock_handle_t handle;
  struct sock_comm* pending; /* the comm accept is assembling */
  int naccepted;             /* its sockets accepted so far */
} sock_listen_t;

/* ---- Devices --------------------------------------------------------------------------------- */
#define SOCK_MAX_DEVS 16
static pthread_mutex_t sock_init_lock = PTHREAD_MUTEX_INITIALIZER;
static socket_iface_t sock_ifaces[SOCK_MAX_DEVS]; /* a copy: stable while in use */
static int sock_nifaces;
static char* sock_pci_paths[SOCK_MAX_DEVS];
static int sock_speeds[SOCK_MAX_DEVS];
static int sock_ctx_token;

static int sock_read_speed(const char* ifname) {
  char path[128];
  int speed = 0;
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
  FILE* f = fopen(path, "re");
  if (f != NULL) {
    if (fscanf(f, "%d", &speed) != 1) speed = 0;
    fclose(f);
  }
  return speed > 0 ? speed : 10000; /* virtual and loopback devices report nothing useful */
}

/* Takes the bootstrap's interface choice (NCCL_SOCKET_IFNAME); refreshed when it changed. */
static ncclResult_t sock_init(void** ctx, uint64_t comm_id, ncclNetCommConfig_t* config,
                              ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  const socket_iface_t* ifs = NULL;
  int n = 0;
  CHECK(socket_default_interfaces(&ifs, &n));
  if (n > SOCK_MAX_DEVS) n = SOCK_MAX_DEVS;
  pthread_mutex_lock(&sock_init_lock);
  if (n != sock_nifaces || memcmp(ifs, sock_ifaces, (size_t)n * sizeof(*ifs)) != 0) {
    char line[512] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
      char path[128], addr[SOCK_NAME_MAX];
      sock_ifaces[i] = ifs[i];
      snprintf(path, sizeof(path), "/sys/class/net/%s/device", ifs[i].name);
      free(sock_pci_paths[i]);
      sock_pci_paths[i] = realpath(path, NULL); /* NULL for virtual interfaces */
      sock_speeds[i] = sock_read_speed(ifs[i].name);
      if (used < sizeof(line))
        used += (size_t)snprintf(line + used, sizeof(line) - used, " [%d]%s:%s", i, ifs[i].name,
                                 socket_addr_format(&ifs[i].addr, addr, sizeof(addr)));
    }
    sock_nifaces = n;
    INFO(NCCL_INIT | NCCL_NET, "NET/Socket : Using%s", line);
  }
  pthread_mutex_unlock(&sock_init_lock);
  *ctx = &sock_ctx_token; /* the socket network keeps no per-communicator state */
  return ncclSuccess;
}

static ncclResult_t sock_finalize(void* ctx) {
  return ncclSuccess;
}

static ncclResult_t sock_set_net_attr(void* ctx, ncclNetAttr_t* attr) {
  return ncclSuccess; /* hints; the socket network has nothing to tune with them */
}

static ncclResult_t sock_devices(int* ndev) {
  *ndev = sock_nifaces;
  return ncclSuccess;
}

static ncclResult_t sock_check_dev(int dev) {
  if (dev < 0 || dev >= sock_nifaces) {
    WARN("NET/Socket: device %d does not exist (%d devices)", dev, sock_nifaces);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static ncclResult_t sock_get_properties(int dev, ncclNetProperties_t* props) {
  CHECK(sock_check_dev(dev));
  ncclNetProperties_t p = {
      .name = (char*)sock_ifaces[dev].name,
      .pciPath = sock_pci_paths[dev],
      .guid = (uint64_t)dev,
      .ptrSupport = NCCL_PTR_HOST,
      .regIsGlobal = 0,
      .forceFlush = 0,
      .speed = sock_speeds[dev],
      .port = 0,
      .latency = 0,
      .maxComms = 65536,
      .maxRecvs = 1,
      .netDeviceType = NCCL_NET_DEVICE_HOST,
      .netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION,
      .vProps = {.ndevs = 1, .devs = {dev}},
      .maxP2pBytes = 0x7fffffff, /* test() reports sizes as int */
      .maxCollBytes = 0x7fffffff,
      .maxMultiRequestSize = 1,
  };
  *props = p;
  return ncclSuccess;
}

/* ---- Connection setup ------------------------------------------------------------------------ */
static void sock_stream_counts(int* nsocks, int* nthreads) {
  int64_t s = param_int(PARAM_NSOCKS_PERTHREAD);
  int64_t t = param_int(PARAM_SOCKET_NTHREADS);
  if (t < 1) t = 1;
  if (t > SOCK_MAX_THREADS) t = SOCK_MAX_THREADS;
  if (s < 1) s = 1;
  if (s * t > SOCK_MAX_STREAMS) s = SOCK_MAX_STREAMS / t;
  *nsocks = (int)s;
  *nthreads = (int)t;
}

ncclResult_t net_listen_any_port(const socket_addr_t* iface, socket_conn_t* out, uint64_t* magic) {
  socket_addr_t addr = *iface;
  if (addr.sa.sa_family == AF_INET6)
    addr.sin6.sin6_port = 0;
  else
    addr.sin.sin_port = 0;
  CHECK(socket_listen(&addr, NULL, out));
  if (getrandom(magic, sizeof(*magic), 0) != sizeof(*magic)) *magic = clock_ns() ^ pid_hash();
  return ncclSuccess;
}

static ncclResult_t sock_listen(void* ctx, int dev, void* handle, void** listen_comm) {
  sock_listen_t* l = NULL;
  CHECK(sock_check_dev(dev));
  CHECK(MEM_CALLOC(&l, 1));
  ncclResult_t res;
  CHECK_GOTO(net_listen_any_port(&sock_ifaces[dev].addr, &l->sock, &l->handle.magic), res, fail);
  l->handle.addr = l->sock.addr;
  sock_stream_counts(&l->handle.nsocks, &l->handle.nthreads);
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  memcpy(handle, &l->handle, sizeof(l->handle));
  *listen_comm = l;
  return ncclSuccess;
fail:
  free(l);
  return res;
}

static void* sock_thread_main(void* arg);

static ncclResult_t sock_comm_alloc(int is_send, const sock_handle_t* h, sock_comm_t** out) {
  sock_comm_t* c = NULL;
  ncclResult_t res = ncclSuccess;
  CHECK(MEM_CALLOC(&c, 1));
  c->is_send = is_send;
  c->ctrl.fd = -1;
  int total = h->nsocks * h->nthreads;
  if (h->nsocks < 1 || h->nthreads < 1 || total > SOCK_MAX_STREAMS) {
    WARN("NET/Socket: connection handle asks for %d x %d sockets (at most %d)", h->nsocks,
         h->nthreads, SOCK_MAX_STREAMS);
    res = ncclInvalidArgument;
    goto fail;
  }
  if (total > 1) {
    c->nstreams = total;
    c->nthreads = h->nthreads;
    CHECK_GOTO(MEM_CALLOC(&c->streams, total), res, fail);
    CHECK_GOTO(MEM_CALLOC(&c->threads, h->nthreads), res, fail);
    for (int i = 0; i < total; i++) c->streams[i].conn.fd = -1;
    for (int t = 0; t < h->nthreads; t++) c->threads[t].efd = -1;
  }
  *out = c;
  return ncclSuccess;
fail:
  free(c->streams);
  free(c->threads);
  free(c);
  return res;
}

static ncclResult_t sock_comm_start_threads(sock_comm_t* c) {
  for (int t = 0; t < c->nthreads; t++) {
    sock_thread_t* th = &c->threads[t];
    th->comm = c;
    th->first = t * (c->nstreams / c->nthreads);
    th->count = c->nstreams / c->nthreads;
    th->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (th->efd < 0) {
      WARN("NET/Socket: eventfd failed: %s", strerror(errno));
      return ncclSystemError;
    }
    int rc = pthread_create(&th->thread, NULL, sock_thread_main, th);
    if (rc != 0) {
      WARN("NET/Socket: creating a helper thread failed: %s", strerror(rc));
      return ncclSystemError;
    }
    th->started = true;
  }
  return ncclSuccess;
}

static void sock_thread_kick(sock_thread_t* th) {
  uint64_t one = 1;
  if (write(th->efd, &one, sizeof(one)) < 0) { /* counter saturated: already signalled */
  }
}

static void sock_comm_free(sock_comm_t* c) {
  if (c == NULL) return;
  atomic_store(&c->stop, true);
  for (int t = 0; t < c->nthreads; t++) {
    sock_thread_t* th = &c->threads[t];
    if (th->started) {
      sock_thread_kick(th);
      pthread_join(th->thread, NULL);
    }
    if (th->efd >= 0) close(th->efd);
  }
  for (int i = 0; i < c->nstreams; i++) socket_close(&c->streams[i].conn);
  socket_close(&c->ctrl);
  free(c->streams);
  free(c->threads);
  free(c);
}

static ncclResult_t sock_connect(void* ctx, int dev, void* handle, void** send_comm,
                                 ncclNetDeviceHandle_t** dev_comm) {
  sock_handle_t h;
  sock_comm_t* c = NULL;
  ncclResult_t res;
  memcpy(&h, handle, sizeof(h));
  CHECK(sock_comm_alloc(1, &h, &c));
  socket_addr_format(&h.addr, c->peer, sizeof(c->peer));
  for (int i = 0; i <= c->nstreams; i++) {
    socket_conn_t* s = i == 0 ? &c->ctrl : &c->streams[i - 1].conn;
    sock_hello_t hello = {.magic = h.magic, .index = i};
    CHECK_GOTO(socket_connect(&h.addr, NULL, s), res, fail);
    CHECK_GOTO(socket_send_all(s, &hello, sizeof(hello)), res, fail);
  }
  CHECK_GOTO(sock_comm_start_threads(c), res, fail);
  *send_comm = c;
  return ncclSuccess;
fail:
  sock_comm_free(c);
  return res;
}

/* Does not block for the connector: returns a NULL comm until all its sockets have arrived. */
static ncclResult_t sock_accept(void* listen_comm, void** recv_comm,
                                ncclNetDeviceHandle_t** dev_comm) {
  sock_listen_t* l = listen_comm;
  ncclResult_t res = ncclSuccess;
  char text[SOCK_NAME_MAX];
  *recv_comm = NULL;
  if (l->pending == NULL) {
    CHECK(sock_comm_alloc(0, &l->handle, &l->pending));
    l->naccepted = 0;
  }
  sock_comm_t* c = l->pending;
  while (l->naccepted <= c->nstreams) {
    struct pollfd pfd = {.fd = l->sock.fd, .events = POLLIN};
    if (poll(&pfd, 1, 0) <= 0) return ncclSuccess; /* call again */
    socket_conn_t s = {.fd = -1};
    sock_hello_t hello;
    CHECK_GOTO(socket_accept(&l->sock, &s), res, fail);
    res = socket_recv_all(&s, &hello, sizeof(hello));
    if (res != ncclSuccess || hello.magic != l->handle.magic || hello.index < 0 ||
        hello.index > c->nstreams) {
      if (res == ncclSuccess) {
        WARN(
            "NET/Socket: unexpected connection from %s on %s (wrong magic or stream index %d); "
            "is another job using this port?",
            socket_addr_format(&s.addr, text, sizeof(text)),
            socket_addr_format(&l->sock.addr, c->peer, sizeof(c->peer)), hello.index);
        res = ncclSystemError;
      }
      socket_close(&s);
      goto fail;
    }
    socket_conn_t* slot = hello.index == 0 ? &c->ctrl : &c->streams[hello.index - 1].conn;
    if (slot->fd >= 0) {
      WARN("NET/Socket: stream %d of a connection from %s arrived twice", hello.index,
           socket_addr_format(&s.addr, text, sizeof(text)));
      socket_close(&s);
      res = ncclSystemError;
      goto fail;
    }
    *slot = s;
    l->naccepted++;
  }
  socket_addr_format(&c->ctrl.addr, c->peer, sizeof(c->peer));
  l->pending = NULL;
  CHECK_GOTO(sock_comm_start_threads(c), res, fail);
  *recv_comm = c;
  return ncclSuccess;
fail:
  sock_comm_free(c);
  l->pending = NULL;
  return res;
}

static ncclResult_t sock_close_listen(void* listen_comm) {
  sock_listen_t* l = listen_comm;
  if (l == NULL) return ncclSuccess;
  sock_comm_free(l->pending);
  socket_close(&l->sock);
  free(l);
  return ncclSuccess;
}

static ncclResult_t sock_close_comm(void* comm) {
  sock_comm_free(comm);
  return ncclSuccess;
}

/* ---- Data path ------------------------------------------------------------------------------- */
/* How a peer closed: not at all (another error, logged where found), between messages (a peer
 * that finished: INFO, the caller decides whether anyone still needed it), or inside one (WARN). */
enum { SOCK_OPEN = 0, SOCK_CLOSED_IDLE, SOCK_CLOSED_MID };

/* Records the first error of a comm; its log line is written before the error is visible. */
static ncclResult_t sock_comm_fail(sock_comm_t* c, ncclResult_t res, int closed) {
  bool expected = false;
  if (atomic_compare_exchange_strong(&c->error_claimed, &expected, true)) {
    if (closed == SOCK_CLOSED_MID)
      WARN(
          "NET/Socket: connection %s %s closed by the peer in the middle of a message (process "
          "exited or aborted?)",
          c->is_send ? "to" : "from", c->peer);
    else if (closed == SOCK_CLOSED_IDLE)
      INFO(NCCL_NET, "NET/Socket: connection %s %s closed by the peer between messages",
           c->is_send ? "to" : "from", c->peer);
    atomic_store(&c->error, (int)res);
  }
  ncclResult_t first = (ncclResult_t)atomic_load(&c->error);
  return first != ncclSuccess ? first : res; /* another thread is still logging the first */
}

/* socket_progress, with a peer's orderly close turned into ncclRemoteError. at_boundary: nothing
 * of the current message has moved yet. */
static ncclResult_t sock_move(sock_comm_t* c, socket_conn_t* s, void* data, size_t size,
                              size_t* done, bool at_boundary) {
  bool fresh = at_boundary && *done == 0;
  ncclResult_t res = socket_progress(s, c->is_send, data, size, done);
  if (res == ncclSuccess) return ncclSuccess;
  /* socket_progress logs real socket errors itself; a closed peer is left to us. */
  int closed = res != ncclRemoteError ? SOCK_OPEN : fresh ? SOCK_CLOSED_IDLE : SOCK_CLOSED_MID;
  return sock_comm_fail(c, res, closed);
}

static void* sock_thread_main(void* arg) {
  sock_thread_t* th = arg;
  sock_comm_t* c = th->comm;
  struct pollfd fds[SOCK_MAX_STREAMS + 1];
  thread_set_name(pthread_self(), "NCCL Sock%c", c->is_send ? 'S' : 'R');
  while (!atomic_load(&c->stop)) {
    int nfds = 0;
    bool progressed = false;
    fds[nfds++] = (struct pollfd){.fd = th->efd, .events = POLLIN};
    if (atomic_load(&c->error) == ncclSuccess) {
      for (int i = th->first; i < th->first + th->count; i++) {
        sock_stream_t* s = &c->streams[i];
        uint64_t head = atomic_load_explicit(&s->head, memory_order_relaxed);
        while (head != atomic_load_explicit(&s->tail, memory_order_acquire)) {
          sock_task_t* t = &s->tasks[head % SOCK_NREQS];
          size_t before = t->done;
          if (sock_move(c, &s->conn, t->data, t->size, &t->done, false) != ncclSuccess) break;
          atomic_fetch_add_explicit(&s->bytes, t->done - before, memory_order_relaxed);
          if (t->done != before) progressed = true;
          if (t->done < t->size) break;
          atomic_fetch_sub_explicit(&t->req->chunks_left, 1, memory_order_release);
          atomic_store_explicit(&s->head, ++head, memory_order_release);
          progressed = true;
        }
        if (head != atomic_load_explicit(&s->tail, memory_order_acquire))
          fds[nfds++] = (struct pollfd){.fd = s->conn.fd, .events = c->is_send ? POLLOUT : POLLIN};
      }
    }
    if (progressed) continue;
    /* Sleep until a socket is ready or test()/close kicks the eventfd. */
    if (poll(fds, (nfds_t)nfds, 100) > 0 && (fds[0].revents & POLLIN)) {
      uint64_t v;
      if (read(th->efd, &v, sizeof(v)) < 0) { /* already drained */
      }
    }
  }
  return NULL;
}

/* Cuts a message over the streams and queues the chunks on their threads. */
static void sock_post_chunks(sock_comm_t* c, sock_req_t* r) {
  size_t n = r->msg_size == 0 ? 0 : (r->msg_size + SOCK_MIN_CHUNK - 1) / SOCK_MIN_CHUNK;
  if (n > (size_t)c->nstreams) n = (size_t)c->nstreams;
  int first = (int)(c->msg_seq++ % (uint64_t)c->nstreams);
  atomic_store_explicit(&r->chunks_left, (int)n, memory_order_relaxed);
  if (n == 0) return;
  size_t chunk = (r->msg_size + n - 1) / n;
  bool kick[SOCK_MAX_THREADS] = {false};
  int per_thread = c->nstreams / c->nthreads;
  for (size_t k = 0; k < n; k++) {
    int si = (int)((first + (int)k) % c->nstreams);
    sock_stream_t* s = &c->streams[si];
    size_t off = k * chunk;
    uint64_t tail = atomic_load_explicit(&s->tail, memory_order_relaxed);
    sock_task_t* t = &s->tasks[tail % SOCK_NREQS];
    t->data = r->data + off;
    t->size = off + chunk <= r->msg_size ? chunk : r->msg_size - off;
    t->done = 0;
    t->req = r;
    atomic_store_explicit(&s->tail, tail + 1, memory_order_release);
    kick[si / per_thread] = true;
  }
  for (int t = 0; t < c->nthreads; t++)
    if (kick[t]) sock_thread_kick(&c->threads[t]);
}

/* Moves every request of the comm as far as it can, in posting order. */
static ncclResult_t sock_comm_progress(sock_comm_t* c) {
  ncclResult_t res = (ncclResult_t)atomic_load(&c->error);
  if (res != ncclSuccess) return res;
  for (int i = 0; i < c->q_count; i++) {
    sock_req_t* r = c->queue[(c->q_head + i) % SOCK_NREQS];
    if (r->stage == REQ_HDR) {
      CHECK(sock_move(c, &c->ctrl, &r->hdr, sizeof(r->hdr), &r->hdr_done, true));
      if (r->hdr_done < sizeof(r->hdr)) return ncclSuccess;
      if (!c->is_send && r->hdr > r->size) {
        WARN("NET/Socket: message from %s is %llu bytes, the posted receive only %zu", c->peer,
             (unsigned long long)r->hdr, r->size);
        return sock_comm_fail(c, ncclInvalidUsage, SOCK_OPEN);
      }
      r->msg_size = (size_t)r->hdr;
      r->stage = REQ_DATA;
      if (c->nstreams > 0) sock_post_chunks(c, r);
    }
    if (r->stage == REQ_DATA) {
      if (c->nstreams == 0) {
        size_t before = r->data_done;
        CHECK(sock_move(c, &c->ctrl, r->data, r->msg_size, &r->data_done, false));
        c->inline_bytes += r->data_done - before;
        if (r->data_done < r->msg_size) return ncclSuccess; /* the next message queues behind */
        r->stage = REQ_DONE;
      } else if (atomic_load_explicit(&r->chunks_left, memory_order_acquire) == 0) {
        r->stage = REQ_DONE;
      }
    }
  }
  return (ncclResult_t)atomic_load(&c->error);
}

static ncclResult_t sock_post(sock_comm_t* c, void* data, size_t size, void** request) {
  *request = NULL;
  if (c->q_count == SOCK_NREQS) return ncclSuccess; /* full: the caller retries */
  sock_req_t* r = NULL;
  for (int i = 0; i < SOCK_NREQS && r == NULL; i++)
    if (c->reqs[i].stage == REQ_FREE) r = &c->reqs[i];
  if (r == NULL) return ncclSuccess;
  memset(r, 0, sizeof(*r));
  r->comm = c;
  r->stage = REQ_HDR;
  r->data = data;
  r->size = size;
  r->hdr = c->is_send ? (uint64_t)size : 0;
  c->queue[(c->q_head + c->q_count) % SOCK_NREQS] = r;
  c->q_count++;
  *request = r;
  return sock_comm_progress(c);
}

static ncclResult_t sock_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                               void* phandle, void** request) {
  sock_comm_t* c = send_comm;
  if (!c->is_send) {
    WARN("NET/Socket: isend on a receive comm");
    return ncclInternalError;
  }
  return sock_post(c, data, size, request);
}

static ncclResult_t sock_irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                               void** mhandles, void** phandles, void** request) {
  sock_comm_t* c = recv_comm;
  if (c->is_send || n != 1) {
    WARN("NET/Socket: irecv takes one buffer on a receive comm (got %d%s)", n,
         c->is_send ? ", send comm" : "");
    return ncclInternalError;
  }
  return sock_post(c, data[0], sizes[0], request);
}

static ncclResult_t sock_test(void* request, int* done, int* size) {
  sock_req_t* r = request;
  sock_comm_t* c = r->comm;
  *done = 0;
  ncclResult_t res = sock_comm_progress(c);
  /* A message that arrived whole is delivered even if the comm failed after it. */
  if (r->stage != REQ_DONE) return res;
  *done = 1;
  if (size != NULL) *size = (int)r->msg_size;
  r->reported = 1;
  while (c->q_count > 0 && c->queue[c->q_head]->reported) {
    c->queue[c->q_head]->stage = REQ_FREE;
    c->q_head = (c->q_head + 1) % SOCK_NREQS;
    c->q_count--;
  }
  return ncclSuccess;
}

/* ---- Memory registration and unsupported ops ------------------------------------------------- */
static int sock_mr_token;

static ncclResult_t sock_reg_mr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (type != NCCL_PTR_HOST) {
    WARN("NET/Socket: only host memory can be sent through sockets (pointer type %d)", type);
    return ncclInternalError;
  }
  *mhandle = &sock_mr_token;
  return ncclSuccess;
}

static ncclResult_t sock_reg_mr_dmabuf(void* comm, void* data, size_t size, int type,
                                       uint64_t offset, int fd, void** mhandle) {
  WARN("NET/Socket: DMA-BUF registration is not supported by the socket network");
  return ncclInternalError;
}

static ncclResult_t sock_dereg_mr(void* comm, void* mhandle) {
  return ncclSuccess;
}

static ncclResult_t sock_iflush(void* recv_comm, int n, void** data, int* sizes, void** mhandles,
                                void** request) {
  *request = NULL; /* host memory only: nothing to flush */
  return ncclSuccess;
}

static ncclResult_t sock_get_device_mr(void* comm, void* mhandle, void** dptr_mhandle) {
  WARN("NET/Socket: device-side memory handles are not supported by the socket network");
  return ncclInternalError;
}

static ncclResult_t sock_irecv_consumed(void* recv_comm, int n, void* request) {
  WARN("NET/Socket: irecvConsumed is not supported by the socket network");
  return ncclInternalError;
}

static ncclResult_t sock_make_vdevice(int* d, ncclNetVDeviceProps_t* props) {
  WARN("NET/Socket: virtual devices are not supported by the socket network");
  return ncclInternalError;
}

ncclResult_t net_socket_comm_stats(void* comm, int nstreams_max, int* nstreams, uint64_t* bytes) {
  sock_comm_t* c = comm;
  int n = c->nstreams == 0 ? 1 : c->nstreams;
  for (int i = 0; i < n && i < nstreams_max; i++)
    bytes[i] = c->nstreams == 0 ? c->inline_bytes : atomic_load(&c->streams[i].bytes);
  *nstreams = n;
  return ncclSuccess;
}

const ncclNet_t net_socket = {
    .name = "Socket",
    .init = sock_init,
    .devices = sock_devices,
    .getProperties = sock_get_properties,
    .listen = sock_listen,
    .connect = sock_connect,
    .accept = sock_accept,
    .regMr = sock_reg_mr,
    .regMrDmaBuf = sock_reg_mr_dmabuf,
    .deregMr = sock_dereg_mr,
    .isend = sock_isend,
    .irecv = sock_irecv,
    .iflush = sock_iflush,
    .test = sock_test,
    .closeSend = sock_close_comm,
    .closeRecv = sock_close_comm,
    .closeListen = sock_close_listen,
    .getDeviceMr = sock_get_device_mr,
    .irecvConsumed = sock_irecv_consumed,
    .makeVDevice = sock_make_vdevice,
    .finalize = sock_finalize,
    .setNetAttr = sock_set_net_attr,
};
