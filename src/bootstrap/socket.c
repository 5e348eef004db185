/* TCP sockets with bounded waits: every blocking step polls in short slices, watches the abort
 * flag, and gives up after NCCL_BOOTSTRAP_TIMEOUT_MS without progress. All descriptors are
 * non-blocking and close-on-exec; sends use MSG_NOSIGNAL so a closed peer never raises SIGPIPE. */
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"

#define SOCKET_POLL_SLICE_MS 100
#define SOCKET_LISTEN_BACKLOG 16384

static socklen_t addr_len(const socket_addr_t* a) {
  return a->sa.sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static bool conn_aborted(const socket_conn_t* s) {
  return s->abort_flag != NULL && __atomic_load_n(s->abort_flag, __ATOMIC_ACQUIRE) != 0;
}

static uint64_t timeout_ns(void) {
  int64_t ms = param_int(PARAM_BOOTSTRAP_TIMEOUT_MS);
  if (ms <= 0) ms = 300000;
  return (uint64_t)ms * 1000000ull;
}

static void sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000l};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

/* Waits until fd is ready for events, the abort flag is set, or the progress deadline passes. */
static ncclResult_t conn_wait(socket_conn_t* s, short events, uint64_t deadline, const char* what) {
  char peer[80];
  for (;;) {
    if (conn_aborted(s)) {
      INFO(NCCL_BOOTSTRAP, "Bootstrap: %s %s aborted", what,
           socket_addr_format(&s->addr, peer, sizeof(peer)));
      return ncclInternalError;
    }
    uint64_t now = clock_ns();
    if (now >= deadline) {
      WARN(
          "Bootstrap: timed out in %s %s (no progress for %lld ms); raise "
          "NCCL_BOOTSTRAP_TIMEOUT_MS if the peer is just slow",
          what, socket_addr_format(&s->addr, peer, sizeof(peer)),
          (long long)param_int(PARAM_BOOTSTRAP_TIMEOUT_MS));
      return ncclRemoteError;
    }
    uint64_t left_ms = (deadline - now) / 1000000ull + 1;
    struct pollfd pfd = {.fd = s->fd, .events = events};
    int rc = poll(&pfd, 1, left_ms < SOCKET_POLL_SLICE_MS ? (int)left_ms : SOCKET_POLL_SLICE_MS);
    if (rc < 0 && errno != EINTR) {
      WARN("Bootstrap: poll during %s %s failed: %s", what,
           socket_addr_format(&s->addr, peer, sizeof(peer)), strerror(errno));
      return ncclSystemError;
    }
    if (rc > 0) return ncclSuccess;
  }
}

ncclResult_t socket_listen(const socket_addr_t* bind_addr, volatile uint32_t* abort_flag,
                           socket_conn_t* out) {
  char text[80];
  socket_addr_t addr = *bind_addr;
  int fd = socket(addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    WARN("Bootstrap: socket() for listening on %s failed: %s",
         socket_addr_format(&addr, text, sizeof(text)), strerror(errno));
    return ncclSystemError;
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, &addr.sa, addr_len(&addr)) != 0) {
    WARN("Bootstrap: bind to %s failed: %s%s", socket_addr_format(&addr, text, sizeof(text)),
         strerror(errno),
         errno == EADDRINUSE ? " (is another job using this port? check NCCL_COMM_ID)" : "");
    close(fd);
    return ncclSystemError;
  }
  if (listen(fd, SOCKET_LISTEN_BACKLOG) != 0) {
    WARN("Bootstrap: listen on %s failed: %s", socket_addr_format(&addr, text, sizeof(text)),
         strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  socklen_t len = sizeof(addr);
  if (getsockname(fd, &addr.sa, &len) != 0) {
    WARN("Bootstrap: getsockname on listener %s failed: %s",
         socket_addr_format(bind_addr, text, sizeof(text)), strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  out->fd = fd;
  out->addr = addr;
  out->abort_flag = abort_flag;
  return ncclSuccess;
}

static void conn_tune(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

ncclResult_t socket_try_accept(socket_conn_t* listener, socket_conn_t* out, int* accepted) {
  socket_addr_t peer;
  socklen_t len = sizeof(peer);
  memset(&peer, 0, sizeof(peer));
  int fd = accept4(listener->fd, &peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) {
    /* Nothing pending, or a connection that was reset before we took it: not our error. */
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED ||
        errno == EPROTO) {
      *accepted = 0;
      return ncclSuccess;
    }
    char text[80];
    WARN("Bootstrap: accept on %s failed: %s%s",
         socket_addr_format(&listener->addr, text, sizeof(text)), strerror(errno),
         errno == EMFILE || errno == ENFILE ? " (raise the open-file limit, ulimit -n)" : "");
    return ncclSystemError;
  }
  conn_tune(fd);
  out->fd = fd;
  out->addr = peer;
  out->abort_flag = listener->abort_flag;
  *accepted = 1;
  return ncclSuccess;
}

ncclResult_t socket_accept(socket_conn_t* listener, socket_conn_t* out) {
  uint64_t deadline = clock_ns() + timeout_ns();
  for (;;) {
    int accepted = 0;
    CHECK(socket_try_accept(listener, out, &accepted));
    if (accepted) return ncclSuccess;
    CHECK(conn_wait(listener, POLLIN, deadline, "accepting a connection on"));
  }
}

static bool connect_error_is_retryable(int err) {
  return err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH || err == ETIMEDOUT ||
         err == ECONNRESET || err == EAGAIN;
}

/* One attempt: returns 0 and a connected fd, or an errno value (and -1 in *fd). */
static int connect_once(const socket_addr_t* addr, volatile uint32_t* abort_flag, uint64_t deadline,
                        int* fd_out) {
  *fd_out = -1;
  int fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  int rc;
  do {
    rc = connect(fd, &addr->sa, addr_len(addr));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno != EINPROGRESS) {
    int err = errno;
    close(fd);
    return err;
  }
  if (rc != 0) {
    socket_conn_t tmp = {.fd = fd, .addr = *addr, .abort_flag = abort_flag};
    ncclResult_t res = conn_wait(&tmp, POLLOUT, deadline, "connecting to");
    if (res != ncclSuccess) {
      close(fd);
      return res == ncclInternalError ? ECANCELED : ETIMEDOUT;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err != 0) {
      close(fd);
      return err;
    }
  }
  conn_tune(fd);
  *fd_out = fd;
  return 0;
}

ncclResult_t socket_connect(const socket_addr_t* addr, volatile uint32_t* abort_flag,
                            socket_conn_t* out) {
  char text[80];
  int64_t retries = param_int(PARAM_SOCKET_RETRY_CNT);
  int64_t sleep_step = param_int(PARAM_SOCKET_RETRY_SLEEP_MSEC);
  if (retries < 0) retries = 0;
  if (sleep_step < 0) sleep_step = 0;
  uint64_t start = clock_ns();
  uint64_t deadline = start + timeout_ns();
  int err = 0;
  int64_t attempt = 0;
  for (;;) {
    int fd = -1;
    err = connect_once(addr, abort_flag, deadline, &fd);
    if (err == 0) {
      out->fd = fd;
      out->addr = *addr;
      out->abort_flag = abort_flag;
      if (attempt > 0)
        TRACE(NCCL_BOOTSTRAP, "Bootstrap: connected to %s after %lld retries",
              socket_addr_format(addr, text, sizeof(text)), (long long)attempt);
      return ncclSuccess;
    }
    if (err == ECANCELED) {
      INFO(NCCL_BOOTSTRAP, "Bootstrap: connecting to %s aborted",
           socket_addr_format(addr, text, sizeof(text)));
      return ncclInternalError;
    }
    if (!connect_error_is_retryable(err) || attempt >= retries) break;
    attempt++;
    /* Linear back-off, slept in short slices so an abort is seen promptly. */
    int64_t wait_ms = sleep_step * attempt;
    uint64_t wake = clock_ns() + (uint64_t)wait_ms * 1000000ull;
    if (wake > deadline) break;
    while (clock_ns() < wake) {
      if (abort_flag != NULL && __atomic_load_n(abort_flag, __ATOMIC_ACQUIRE) != 0) {
        INFO(NCCL_BOOTSTRAP, "Bootstrap: connecting to %s aborted",
             socket_addr_format(addr, text, sizeof(text)));
        return ncclInternalError;
      }
      uint64_t left_ms = (wake - clock_ns()) / 1000000ull + 1;
      sleep_ms(left_ms < 20 ? (int)left_ms : 20);
    }
  }
  WARN(
      "Bootstrap: connect to %s failed after %lld attempt(s) in %.1f s: %s; is the peer "
      "running and reachable? (NCCL_SOCKET_RETRY_CNT, NCCL_SOCKET_RETRY_SLEEP_MSEC, "
      "NCCL_SOCKET_IFNAME)",
      socket_addr_format(addr, text, sizeof(text)), (long long)attempt + 1,
      (double)(clock_ns() - start) / 1e9, strerror(err));
  return ncclRemoteError;
}

/* Moves what the socket takes without blocking. An orderly close by the peer sets *closed and is
 * not logged here: whether it is an error depends on the caller. */
static ncclResult_t conn_move(socket_conn_t* s, int is_send, void* data, size_t size, size_t* done,
                              bool* closed) {
  char text[80];
  *closed = false;
  while (*done < size) {
    char* p = (char*)data + *done;
    ssize_t n = is_send ? send(s->fd, p, size - *done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(s->fd, p, size - *done, MSG_DONTWAIT);
    if (n > 0) {
      *done += (size_t)n;
      continue;
    }
    if (n == 0 && !is_send) {
      *closed = true;
      return ncclRemoteError;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    WARN("Bootstrap: %s %s failed: %s", is_send ? "send to" : "receive from",
         socket_addr_format(&s->addr, text, sizeof(text)), n < 0 ? strerror(errno) : "no progress");
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t socket_progress(socket_conn_t* s, int is_send, void* data, size_t size, size_t* done) {
  bool closed;
  return conn_move(s, is_send, data, size, done, &closed);
}

static ncclResult_t socket_transfer_all(socket_conn_t* s, int is_send, void* data, size_t size) {
  size_t done = 0;
  uint64_t deadline = clock_ns() + timeout_ns();
  while (done < size) {
    size_t before = done;
    bool closed = false;
    ncclResult_t res = conn_move(s, is_send, data, size, &done, &closed);
    if (closed) {
      char text[80];
      WARN("Bootstrap: connection to %s closed by the peer after %zu of %zu bytes",
           socket_addr_format(&s->addr, text, sizeof(text)), done, size);
    }
    if (res != ncclSuccess) return res;
    if (done == size) break;
    if (done != before) deadline = clock_ns() + timeout_ns();
    CHECK(conn_wait(s, is_send ? POLLOUT : POLLIN, deadline,
                    is_send ? "sending to" : "receiving from"));
  }
  return ncclSuccess;
}

ncclResult_t socket_send_all(socket_conn_t* s, const void* data, size_t size) {
  return socket_transfer_all(s, 1, (void*)data, size);
}

ncclResult_t socket_recv_all(socket_conn_t* s, void* data, size_t size) {
  return socket_transfer_all(s, 0, data, size);
}

void socket_close(socket_conn_t* s) {
  if (s == NULL || s->fd < 0) return;
  close(s->fd);
  s->fd = -1;
}
