/* Asking other processes' RAS services (ras.h): bounded connects, one-shot notices, and queries
 * sent to many processes at once whose answers are collected with one poll loop. Used by worker
 * threads (hang reports, RAS clients, death notices), never by the service thread's loop. */
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "observe/ras.h"

int ras_send_msg(int fd, int type, const void* payload, uint32_t len, int timeout_ms) {
  ras_hdr_t h;
  memset(&h, 0, sizeof(h));
  h.magic = RAS_MAGIC;
  h.type = (uint16_t)type;
  h.version = RAS_WIRE_VERSION;
  h.len = len;
  const char* parts[2] = {(const char*)&h, payload};
  size_t sizes[2] = {sizeof(h), len};
  uint64_t deadline = clock_ns() + (uint64_t)timeout_ms * 1000000ull;
  for (int i = 0; i < 2; i++) {
    size_t done = 0;
    while (done < sizes[i]) {
      ssize_t n = send(fd, parts[i] + done, sizes[i] - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        done += (size_t)n;
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
      uint64_t now = clock_ns();
      if (now >= deadline) return -1;
      struct pollfd p = {.fd = fd, .events = POLLOUT};
      (void)poll(&p, 1, (int)((deadline - now) / 1000000ull) + 1);
    }
  }
  return 0;
}

socklen_t ras_addr_len(const socket_addr_t* addr) {
  return addr->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

int ras_connect(const socket_addr_t* addr, int timeout_ms, bool* refused) {
  *refused = false;
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, &addr->sa, ras_addr_len(addr)) == 0) return fd;
  if (errno != EINPROGRESS) {
    *refused = errno == ECONNREFUSED;
    close(fd);
    return -1;
  }
  struct pollfd p = {.fd = fd, .events = POLLOUT};
  int rc;
  do {
    rc = poll(&p, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
  int err = 0;
  socklen_t elen = sizeof(err);
  if (rc <= 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
    *refused = err == ECONNREFUSED;
    close(fd);
    return -1;
  }
  return fd;
}

int ras_tell(const socket_addr_t* addr, int type, const void* payload, uint32_t len,
             int timeout_ms) {
  bool refused;
  int fd = ras_connect(addr, timeout_ms, &refused);
  if (fd < 0) return -1;
  int rc = ras_send_msg(fd, type, payload, len, timeout_ms);
  close(fd);
  return rc;
}

/* One query in flight. */
typedef struct ask {
  int fd;
  int phase; /* 0 connecting, 1 reading the header, 2 reading the payload, 3 done */
  ras_hdr_t hdr;
  char* payload;
  size_t got;
} ask_t;

static void ask_finish(ask_t* q, ras_answer_t* a, int status) {
  if (q->fd >= 0) close(q->fd);
  q->fd = -1;
  q->phase = 3;
  a->status = status;
  if (status != RAS_ANSWERED) return;
  uint32_t n = 0;
  memcpy(&n, q->payload, sizeof(n));
  if ((size_t)q->hdr.len != 8 + (size_t)n * sizeof(prog_state_t)) {
    a->status = RAS_GONE; /* not a reply we understand */
    return;
  }
  if (n > 0) {
    a->states = malloc((size_t)n * sizeof(prog_state_t));
    if (a->states == NULL) {
      a->status = RAS_SILENT;
      return;
    }
    memcpy(a->states, q->payload + 8, (size_t)n * sizeof(prog_state_t));
  }
  a->nstates = (int)n;
}

/* Moves one query on after poll said its socket is ready. */
static void ask_step(ask_t* q, ras_answer_t* a, const ras_query_t* req, short revents) {
  if (q->phase == 0) {
    int err = 0;
    socklen_t elen = sizeof(err);
    if (getsockopt(q->fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0 || err != 0) {
      ask_finish(q, a, err == ECONNREFUSED ? RAS_GONE : RAS_SILENT);
      return;
    }
    if (ras_send_msg(q->fd, RAS_MSG_QUERY, req, sizeof(*req), 1000) != 0) {
      ask_finish(q, a, RAS_GONE);
      return;
    }
    q->phase = 1;
    return;
  }
  if (!(revents & (POLLIN | POLLHUP | POLLERR))) return;
  for (;;) {
    char* dst = q->phase == 1 ? (char*)&q->hdr + q->got : q->payload + q->got;
    size_t want = q->phase == 1 ? sizeof(q->hdr) : q->hdr.len;
    ssize_t n = recv(q->fd, dst, want - q->got, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    if (n <= 0) {
      ask_finish(q, a, RAS_GONE); /* closed before answering in full */
      return;
    }
    q->got += (size_t)n;
    if (q->got < want) continue;
    if (q->phase == 2) {
      ask_finish(q, a, RAS_ANSWERED);
      return;
    }
    if (q->hdr.magic != RAS_MAGIC || q->hdr.type != RAS_MSG_STATE || q->hdr.len < 8 ||
        q->hdr.len > 8 + (size_t)RAS_MAX_STATES * sizeof(prog_state_t) ||
        (q->payload = malloc(q->hdr.len)) == NULL) {
      ask_finish(q, a, RAS_GONE);
      return;
    }
    q->phase = 2;
    q->got = 0;
  }
}

static void ask_batch(const socket_addr_t* addrs, int n, uint64_t comm_hash, int asker,
                      int timeout_ms, ras_answer_t* out) {
  ras_ident_t self;
  ras_self(&self);
  ras_query_t req = {.comm_hash = comm_hash, .asker = asker};
  ask_t* qs = calloc((size_t)(n > 0 ? n : 1), sizeof(*qs));
  struct pollfd* pfds = calloc((size_t)(n > 0 ? n : 1), sizeof(*pfds));
  int left = 0;
  for (int i = 0; i < n; i++) {
    out[i] = (ras_answer_t){.addr = addrs[i], .status = RAS_SILENT};
    if (qs == NULL || pfds == NULL) continue;
    qs[i].fd = -1;
    qs[i].phase = 3;
    if (addrs[i].sa.sa_family == 0) continue; /* that process has no side channel */
    if (self.addr.sa.sa_family != 0 && socket_addr_equal(&addrs[i], &self.addr)) {
      out[i].nstates = ras_local_states(comm_hash, asker, &out[i].states);
      out[i].status = RAS_ANSWERED;
      continue;
    }
    int fd = socket(addrs[i].sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, &addrs[i].sa, ras_addr_len(&addrs[i])) != 0 && errno != EINPROGRESS) {
      out[i].status = errno == ECONNREFUSED ? RAS_GONE : RAS_SILENT;
      close(fd);
      continue;
    }
    qs[i].fd = fd;
    qs[i].phase = 0;
    left++;
  }
  uint64_t deadline = clock_ns() + (uint64_t)timeout_ms * 1000000ull;
  while (left > 0) {
    uint64_t now = clock_ns();
    if (now >= deadline) break;
    int np = 0;
    for (int i = 0; i < n; i++) {
      if (qs[i].phase == 3) continue;
      pfds[np++] = (struct pollfd){.fd = qs[i].fd, .events = qs[i].phase == 0 ? POLLOUT : POLLIN};
    }
    int rc = poll(pfds, (nfds_t)np, (int)((deadline - now) / 1000000ull) + 1);
    if (rc < 0 && errno != EINTR) break;
    if (rc <= 0) continue;
    int k = 0;
    for (int i = 0; i < n; i++) {
      if (qs[i].phase == 3) continue;
      short ev = pfds[k++].revents;
      if (ev == 0) continue;
      ask_step(&qs[i], &out[i], &req, ev);
      if (qs[i].phase == 3) left--;
    }
  }
  for (int i = 0; i < n && qs != NULL; i++) {
    if (qs[i].phase != 3) {
      close(qs[i].fd); /* no answer in time: stopped, or hung */
      out[i].status = RAS_SILENT;
    }
    free(qs[i].payload);
  }
  free(qs);
  free(pfds);
}

/* A few hundred sockets at a time, within the usual limit on open descriptors. */
#define RAS_ASK_BATCH 256

void ras_ask_all(const socket_addr_t* addrs, int n, uint64_t comm_hash, int asker, int timeout_ms,
                 ras_answer_t* out) {
  for (int off = 0; off < n; off += RAS_ASK_BATCH) {
    int k = n - off < RAS_ASK_BATCH ? n - off : RAS_ASK_BATCH;
    ask_batch(addrs + off, k, comm_hash, asker, timeout_ms, out + off);
  }
}

void ras_answers_free(ras_answer_t* a, int n) {
  for (int i = 0; i < n; i++) {
    free(a[i].states);
    a[i].states = NULL;
  }
}
