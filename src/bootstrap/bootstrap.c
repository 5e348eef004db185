/* One communicator's bootstrap: joining through the root(s), the ring allgather, and tagged
 * point-to-point messages between any two ranks. (A communicator whose ranks all live in this
 * process joins in process instead: inproc.c.)
 *
 * Messages: a sender keeps one connection per peer (opened on first use) and writes a header
 * (magic, sender, kind, tag, size) then the payload. A receiver thread per communicator accepts
 * connections on the rank's listener and reads every complete message into a queue; a recv takes
 * the oldest queued message with its (peer, kind, tag). One connection per ordered pair keeps the
 * messages of a pair in order, and the thread drains them whether or not a recv is posted, so sends
 * never wait on the receiver's program order. Bad input (wrong magic, malformed or truncated
 * messages) drops only the offending connection, with a WARN naming its address. */
#include <poll.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap_int.h"

bool bootstrap_aborted(const bootstrap_t* b) {
  return b->abort_flag != NULL && __atomic_load_n(b->abort_flag, __ATOMIC_ACQUIRE) != 0;
}

uint64_t bootstrap_wait_limit_ns(void) {
  int64_t ms = param_int(PARAM_BOOTSTRAP_TIMEOUT_MS);
  return (uint64_t)(ms > 0 ? ms : 300000) * 1000000ull;
}

void bootstrap_cond_init(pthread_cond_t* cond) {
  pthread_condattr_t cattr;
  pthread_condattr_init(&cattr);
  pthread_condattr_setclock(&cattr, CLOCK_MONOTONIC);
  pthread_cond_init(cond, &cattr);
  pthread_condattr_destroy(&cattr);
}

void bootstrap_cond_wait_slice(pthread_cond_t* cond, pthread_mutex_t* lock) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t wake = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec +
                  (uint64_t)MSG_POLL_SLICE_MS * 1000000ull;
  ts.tv_sec = (time_t)(wake / 1000000000ull);
  ts.tv_nsec = (long)(wake % 1000000000ull);
  pthread_cond_timedwait(cond, lock, &ts);
}

/* ---- The queue --------------------------------------------------------------------------------
 */

void bootstrap_queue_push(bootstrap_t* b, msg_t* m) {
  m->next = NULL;
  pthread_mutex_lock(&b->lock);
  if (b->tail)
    b->tail->next = m;
  else
    b->head = m;
  b->tail = m;
  pthread_cond_broadcast(&b->cond);
  pthread_mutex_unlock(&b->lock);
}

/* Caller holds b->lock. */
static msg_t* queue_take(bootstrap_t* b, int peer, int kind, int tag) {
  msg_t* prev = NULL;
  for (msg_t* m = b->head; m != NULL; prev = m, m = m->next) {
    if (m->peer != peer || m->kind != kind || m->tag != tag) continue;
    if (prev)
      prev->next = m->next;
    else
      b->head = m->next;
    if (b->tail == m) b->tail = prev;
    return m;
  }
  return NULL;
}

msg_t* bootstrap_msg_copy(const bootstrap_t* b, int peer, int kind, int tag, const void* data,
                          size_t size) {
  msg_t* m = malloc(sizeof(*m));
  char* copy = malloc(size ? size : 1);
  if (m == NULL || copy == NULL) {
    free(m);
    free(copy);
    WARN("Bootstrap: rank %d out of memory for a %zu-byte message to rank %d", b->rank, size, peer);
    return NULL;
  }
  if (size) memcpy(copy, data, size);
  *m = (msg_t){.peer = b->rank, .kind = kind, .tag = tag, .size = size, .data = copy};
  return m;
}

void bootstrap_msg_free(msg_t* m) {
  if (m == NULL) return;
  free(m->data);
  free(m);
}

/* ---- The receiver thread ----------------------------------------------------------------------
 */

static void in_drop(bootstrap_t* b, int i) {
  socket_close(&b->in[i].conn);
  free(b->in[i].payload);
  b->in[i] = b->in[b->nin - 1];
  b->nin--;
}

static bool in_header_valid(bootstrap_t* b, in_conn_t* c) {
  const msg_header_t* h = &c->hdr;
  char peer[80];
  socket_addr_format(&c->conn.addr, peer, sizeof(peer));
  if (h->magic != b->magic) {
    WARN(
        "Bootstrap: rank %d rejected a connection from %s: wrong magic 0x%llx (a stray client, "
        "or a process of another job)",
        b->rank, peer, (unsigned long long)h->magic);
    return false;
  }
  if (h->sender < 0 || h->sender >= b->nranks ||
      (h->kind != MSG_USER && h->kind != MSG_ALLGATHER) || h->size > MSG_MAX_PAYLOAD ||
      (c->rank >= 0 && c->rank != h->sender)) {
    WARN(
        "Bootstrap: rank %d rejected a malformed message from %s (sender %d, kind %d, tag %d, "
        "%llu bytes)",
        b->rank, peer, h->sender, h->kind, h->tag, (unsigned long long)h->size);
    return false;
  }
  return true;
}

/* Reads everything available on in[i]; returns false when the connection was dropped. */
static bool in_read(bootstrap_t* b, int i) {
  in_conn_t* c = &b->in[i];
  char peer[80];
  for (;;) {
    if (!c->in_payload) {
      ncclResult_t res = socket_progress(&c->conn, 0, &c->hdr, sizeof(c->hdr), &c->hdr_got);
      if (res == ncclRemoteError && c->hdr_got > 0)
        WARN("Bootstrap: rank %d dropped a truncated message header from %s (%zu of %zu bytes)",
             b->rank, socket_addr_format(&c->conn.addr, peer, sizeof(peer)), c->hdr_got,
             sizeof(c->hdr));
      if (res != ncclSuccess) goto drop; /* a close between messages is the normal end */
      if (c->hdr_got < sizeof(c->hdr)) return true;
      if (!in_header_valid(b, c)) goto drop;
      c->rank = c->hdr.sender;
      c->payload = malloc(c->hdr.size ? c->hdr.size : 1);
      if (c->payload == NULL) {
        WARN("Bootstrap: rank %d cannot allocate %llu bytes for a message from rank %d", b->rank,
             (unsigned long long)c->hdr.size, c->rank);
        goto drop;
      }
      c->payload_got = 0;
      c->in_payload = true;
    }
    ncclResult_t res = socket_progress(&c->conn, 0, c->payload, c->hdr.size, &c->payload_got);
    if (res == ncclRemoteError)
      WARN(
          "Bootstrap: rank %d dropped a truncated message from rank %d at %s (tag %d: %zu of "
          "%llu bytes)",
          b->rank, c->rank, socket_addr_format(&c->conn.addr, peer, sizeof(peer)), c->hdr.tag,
          c->payload_got, (unsigned long long)c->hdr.size);
    if (res != ncclSuccess) goto drop;
    if (c->payload_got < c->hdr.size) return true;
    msg_t* m = malloc(sizeof(*m));
    if (m == NULL) {
      WARN("Bootstrap: rank %d out of memory queueing a message from rank %d", b->rank, c->rank);
      goto drop;
    }
    *m = (msg_t){.peer = c->hdr.sender,
                 .kind = c->hdr.kind,
                 .tag = c->hdr.tag,
                 .size = c->hdr.size,
                 .data = c->payload};
    c->payload = NULL;
    c->in_payload = false;
    c->hdr_got = 0;
    bootstrap_queue_push(b, m);
  }
drop:
  in_drop(b, i);
  return false;
}

static void in_accept_all(bootstrap_t* b) {
  for (;;) {
    socket_conn_t conn;
    int accepted = 0;
    if (socket_try_accept(&b->listener, &conn, &accepted) != ncclSuccess || !accepted) return;
    if (b->nin >= 2 * b->nranks + 64) {
      char peer[80];
      WARN("Bootstrap: rank %d refused a connection from %s: already %d open connections", b->rank,
           socket_addr_format(&conn.addr, peer, sizeof(peer)), b->nin);
      socket_close(&conn);
      continue;
    }
    if (b->nin == b->in_cap) {
      int cap = b->in_cap ? 2 * b->in_cap : 16;
      in_conn_t* grown = realloc(b->in, (size_t)cap * sizeof(*grown));
      if (grown == NULL) {
        WARN("Bootstrap: rank %d out of memory for %d connections", b->rank, cap);
        socket_close(&conn);
        return;
      }
      b->in = grown;
      b->in_cap = cap;
    }
    in_conn_t* c = &b->in[b->nin++];
    memset(c, 0, sizeof(*c));
    c->conn = conn;
    c->rank = -1;
  }
}

static void* receiver_main(void* arg) {
  bootstrap_t* b = arg;
  thread_set_name(pthread_self(), "NCCL Bootstrap");
  struct pollfd* pfds = NULL;
  int pfd_cap = 0;
  ncclResult_t res = ncclSuccess;
  while (!__atomic_load_n(&b->stop, __ATOMIC_ACQUIRE)) {
    if (pfd_cap < b->nin + 2) {
      int cap = b->nin + 18;
      struct pollfd* grown = realloc(pfds, (size_t)cap * sizeof(*grown));
      if (grown == NULL) {
        WARN("Bootstrap: rank %d out of memory for %d poll entries", b->rank, cap);
        res = ncclSystemError;
        break;
      }
      pfds = grown;
      pfd_cap = cap;
    }
    int npfd = b->nin + 2;
    pfds[0] = (struct pollfd){.fd = b->listener.fd, .events = POLLIN};
    for (int i = 0; i < b->nin; i++)
      pfds[i + 1] = (struct pollfd){.fd = b->in[i].conn.fd, .events = POLLIN};
    pfds[npfd - 1] = (struct pollfd){.fd = b->wake_fd, .events = POLLIN};
    int rc = poll(pfds, (nfds_t)npfd, MSG_POLL_SLICE_MS);
    if (rc < 0 && errno != EINTR) {
      WARN("Bootstrap: rank %d receiver poll failed: %s", b->rank, strerror(errno));
      res = ncclSystemError;
      break;
    }
    if (rc <= 0) continue;
    /* Backwards: a drop moves the last connection (already visited) into the hole. */
    for (int i = npfd - 3; i >= 0; i--)
      if (pfds[i + 1].revents != 0) in_read(b, i);
    if (pfds[0].revents != 0) in_accept_all(b);
  }
  free(pfds);
  if (res != ncclSuccess) {
    pthread_mutex_lock(&b->lock);
    b->thread_res = res;
    pthread_cond_broadcast(&b->cond);
    pthread_mutex_unlock(&b->lock);
  }
  return NULL;
}

/* ---- Send and receive -------------------------------------------------------------------------
 */

static ncclResult_t check_peer(const bootstrap_t* b, int peer, const char* what) {
  if (b == NULL || peer < 0 || peer >= b->nranks) {
    WARN("Bootstrap: %s with invalid peer %d (nranks %d)", what, peer, b ? b->nranks : 0);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static ncclResult_t msg_send(bootstrap_t* b, int peer, int kind, int tag, const void* data,
                             size_t size) {
  char text[80];
  CHECK(check_peer(b, peer, "send"));
  if (size > MSG_MAX_PAYLOAD || (size > 0 && data == NULL)) {
    WARN("Bootstrap: send of %zu bytes to rank %d: invalid buffer or size (at most %llu bytes)",
         size, peer, (unsigned long long)MSG_MAX_PAYLOAD);
    return ncclInvalidArgument;
  }
  if (bootstrap_aborted(b)) {
    INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d: send to rank %d (tag %d) aborted", b->rank, peer,
         tag);
    return ncclInternalError;
  }
  if (peer == b->rank) {
    msg_t* m = bootstrap_msg_copy(b, peer, kind, tag, data, size);
    if (m == NULL) return ncclSystemError;
    bootstrap_queue_push(b, m);
    return ncclSuccess;
  }
  if (b->world != NULL) return inproc_send(b, peer, kind, tag, data, size);
  msg_header_t hdr = {.magic = b->magic, .sender = b->rank, .kind = kind, .tag = tag, .size = size};
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&b->send_lock);
  socket_conn_t* conn = &b->out[peer];
  if (conn->fd < 0) CHECK_GOTO(socket_connect(&b->peers[peer], b->abort_flag, conn), res, unlock);
  CHECK_GOTO(socket_send_all(conn, &hdr, sizeof(hdr)), res, broken);
  if (size) CHECK_GOTO(socket_send_all(conn, data, size), res, broken);
  goto unlock;
broken:
  /* A partial message leaves the stream unusable; the next send reconnects. */
  socket_close(conn);
  /* The socket layer named the address; the user needs the rank (ncclGetLastError). */
  WARN(
      "Bootstrap: rank %d could not send tag %d to rank %d at %s: that rank has exited or "
      "aborted, or the network failed",
      b->rank, tag, peer, socket_addr_format(&b->peers[peer], text, sizeof(text)));
unlock:
  pthread_mutex_unlock(&b->send_lock);
  return res;
}

/* alive (may be NULL): bootstrap_recv_watched's check of the peer. */
static ncclResult_t msg_recv(bootstrap_t* b, int peer, int kind, int tag, void* data, size_t size,
                             bootstrap_alive_fn alive, void* alive_arg) {
  char text[80];
  CHECK(check_peer(b, peer, "recv"));
  ncclResult_t res = ncclSuccess, gone = ncclSuccess;
  msg_t* m = NULL;
  uint64_t deadline = clock_ns() + bootstrap_wait_limit_ns(), gone_at = 0;
  pthread_mutex_lock(&b->lock);
  for (;;) {
    m = queue_take(b, peer, kind, tag);
    if (m != NULL) break;
    if (b->thread_res != ncclSuccess) {
      res = b->thread_res;
      break;
    }
    if (gone != ncclSuccess && clock_ns() >= gone_at) { /* a slice's grace has passed */
      res = gone;
      break;
    }
    if (alive != NULL && gone == ncclSuccess) {
      pthread_mutex_unlock(&b->lock); /* the check may take a while; the queue may grow */
      gone = alive(alive_arg, peer);
      pthread_mutex_lock(&b->lock);
      if (gone != ncclSuccess) {
        gone_at = clock_ns() + (uint64_t)MSG_POLL_SLICE_MS * 1000000ull;
        continue;
      }
    }
    if (bootstrap_aborted(b)) {
      INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d: receive from rank %d (tag %d) aborted", b->rank,
           peer, tag);
      res = ncclInternalError;
      break;
    }
    uint64_t now = clock_ns();
    if (now >= deadline) {
      WARN(
          "Bootstrap: rank %d timed out after %lld ms waiting for rank %d at %s (tag %d); is it "
          "alive? (NCCL_BOOTSTRAP_TIMEOUT_MS)",
          b->rank, (long long)param_int(PARAM_BOOTSTRAP_TIMEOUT_MS), peer,
          b->peers ? socket_addr_format(&b->peers[peer], text, sizeof(text)) : "this process", tag);
      res = ncclRemoteError;
      break;
    }
    bootstrap_cond_wait_slice(&b->cond, &b->lock);
  }
  pthread_mutex_unlock(&b->lock);
  if (m == NULL) return res;
  if (m->size != size) {
    WARN(
        "Bootstrap: rank %d received %zu bytes from rank %d (tag %d) but expected %zu; the ranks "
        "disagree on the message size",
        b->rank, m->size, peer, tag, size);
    res = ncclInternalError;
  } else if (size) {
    memcpy(data, m->data, size);
  }
  bootstrap_msg_free(m);
  return res;
}

ncclResult_t bootstrap_send(bootstrap_t* b, int peer, int tag, const void* data, size_t size) {
  return msg_send(b, peer, MSG_USER, tag, data, size);
}

ncclResult_t bootstrap_recv(bootstrap_t* b, int peer, int tag, void* data, size_t size) {
  return msg_recv(b, peer, MSG_USER, tag, data, size, NULL, NULL);
}

ncclResult_t bootstrap_recv_watched(bootstrap_t* b, int peer, int tag, void* data, size_t size,
                                    bootstrap_alive_fn alive, void* arg) {
  return msg_recv(b, peer, MSG_USER, tag, data, size, alive, arg);
}

/* ---- Ring allgather ---------------------------------------------------------------------------
 */

/* Step s: send slot (rank - s) to the next rank, receive slot (rank - s - 1) from the previous. */
static ncclResult_t ring_allgather(bootstrap_t* b, int tag, void* data, size_t size) {
  int n = b->nranks;
  int next = (b->rank + 1) % n;
  int prev = (b->rank + n - 1) % n;
  char* base = data;
  for (int s = 0; s < n - 1; s++) {
    int send_slot = (b->rank - s + n) % n;
    int recv_slot = (b->rank - s - 1 + 2 * n) % n;
    CHECK(msg_send(b, next, MSG_ALLGATHER, tag, base + (size_t)send_slot * size, size));
    CHECK(msg_recv(b, prev, MSG_ALLGATHER, tag, base + (size_t)recv_slot * size, size, NULL, NULL));
  }
  return ncclSuccess;
}

ncclResult_t bootstrap_allgather(bootstrap_t* b, void* data, size_t size) {
  if (b == NULL || (data == NULL && size > 0)) {
    WARN("Bootstrap: allgather with a NULL %s", b == NULL ? "bootstrap" : "buffer");
    return ncclInvalidArgument;
  }
  if (b->world != NULL) return inproc_allgather(b, data, size);
  return ring_allgather(b, ALLGATHER_TAG_USER, data, size);
}

/* ---- Lifetime ---------------------------------------------------------------------------------
 */

ncclResult_t bootstrap_init(const bootstrap_handle_t* handles, int nhandles, int rank, int nranks,
                            volatile uint32_t* abort_flag, bootstrap_t** out) {
  char text[80];
  if (handles == NULL || out == NULL || nranks < 1 || rank < 0 || rank >= nranks || nhandles < 1 ||
      nhandles > nranks) {
    WARN("Bootstrap: invalid init arguments: rank %d, nranks %d, %d handle(s)", rank, nranks,
         nhandles);
    return ncclInvalidArgument;
  }
  uint64_t start = clock_ns();
  ncclResult_t res = ncclSuccess;
  bootstrap_t* b = NULL;
  CHECK(MEM_CALLOC(&b, 1));
  b->rank = rank;
  b->nranks = nranks;
  b->magic = handles[0].magic;
  b->abort_flag = abort_flag;
  b->listener.fd = -1;
  b->wake_fd = -1;
  pthread_mutex_init(&b->send_lock, NULL);
  pthread_mutex_init(&b->lock, NULL);
  bootstrap_cond_init(&b->cond);
  if (bootstrap_handle_is_inproc(&handles[0])) {
    /* Every rank is in this process: no listener, no receiver thread, no root. */
    CHECK_GOTO(inproc_join(&handles[0], b), res, fail);
    INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d of %d joined in process", rank, nranks);
    *out = b;
    return ncclSuccess;
  }
  CHECK_GOTO(MEM_CALLOC(&b->peers, nranks), res, fail);
  CHECK_GOTO(MEM_CALLOC(&b->out, nranks), res, fail);
  for (int i = 0; i < nranks; i++) b->out[i].fd = -1;

  const socket_iface_t* ifaces = NULL;
  int nifaces = 0;
  CHECK_GOTO(socket_default_interfaces(&ifaces, &nifaces), res, fail);
  socket_addr_t bind_addr = ifaces[0].addr;
  if (bind_addr.sa.sa_family == AF_INET)
    bind_addr.sin.sin_port = 0;
  else
    bind_addr.sin6.sin6_port = 0;
  CHECK_GOTO(socket_listen(&bind_addr, abort_flag, &b->listener), res, fail);
  b->peers[rank] = b->listener.addr;

  b->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (b->wake_fd < 0) {
    WARN("Bootstrap: rank %d cannot create an eventfd: %s", rank, strerror(errno));
    res = ncclSystemError;
    goto fail;
  }
  int err = pthread_create(&b->thread, NULL, receiver_main, b);
  if (err != 0) {
    WARN("Bootstrap: rank %d cannot start its receiver thread: %s", rank, strerror(err));
    res = ncclSystemError;
    goto fail;
  }
  b->thread_started = true;

  int next = (rank + 1) % nranks;
  CHECK_GOTO(bootstrap_root_join(handles, nhandles, rank, nranks, &b->listener.addr, abort_flag,
                                 &b->peers[next]),
             res, fail);
  CHECK_GOTO(ring_allgather(b, ALLGATHER_TAG_ADDRS, b->peers, sizeof(b->peers[0])), res, fail);
  INFO(NCCL_BOOTSTRAP | NCCL_INIT, "Bootstrap: rank %d of %d joined at %s in %.3f s", rank, nranks,
       socket_addr_format(&b->listener.addr, text, sizeof(text)),
       (double)(clock_ns() - start) / 1e9);
  *out = b;
  return ncclSuccess;
fail:
  (void)bootstrap_close(b); /* releases what init made; cannot fail. res is the error */
  return res;
}

int bootstrap_rank(const bootstrap_t* b) {
  return b ? b->rank : -1;
}
int bootstrap_nranks(const bootstrap_t* b) {
  return b ? b->nranks : 0;
}

const socket_addr_t* bootstrap_peer_addr(const bootstrap_t* b, int rank) {
  if (b == NULL || b->peers == NULL || rank < 0 || rank >= b->nranks) return NULL;
  return &b->peers[rank];
}

bool bootstrap_is_inproc(const bootstrap_t* b) {
  return b != NULL && b->world != NULL;
}

ncclResult_t bootstrap_close(bootstrap_t* b) {
  if (b == NULL) return ncclSuccess;
  if (b->world != NULL) inproc_leave(b); /* nobody can queue a message for it from here on */
  if (b->thread_started) {
    __atomic_store_n(&b->stop, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    ssize_t wrote = write(b->wake_fd, &one, sizeof(one)); /* else: seen within one poll slice */
    (void)wrote;
    pthread_join(b->thread, NULL);
  }
  if (b->wake_fd >= 0) close(b->wake_fd);
  while (b->nin > 0) in_drop(b, b->nin - 1);
  free(b->in);
  socket_close(&b->listener);
  if (b->out)
    for (int i = 0; i < b->nranks; i++) socket_close(&b->out[i]);
  int left = 0;
  while (b->head != NULL) {
    msg_t* m = b->head;
    b->head = m->next;
    bootstrap_msg_free(m);
    left++;
  }
  if (left)
    INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d closed with %d unreceived message(s)", b->rank, left);
  pthread_cond_destroy(&b->cond);
  pthread_mutex_destroy(&b->lock);
  pthread_mutex_destroy(&b->send_lock);
  free(b->out);
  free(b->peers);
  free(b);
  return ncclSuccess;
}
