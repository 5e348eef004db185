/* Passing file descriptors between processes of one host (transport.h describes the contract).
 *
 * The server: one thread per process, listening on the abstract Unix socket "baton-fd-<pid>-<rand>"
 * (abstract names need no file and vanish with the socket; they are shared within one network
 * namespace). A client connects, sends {magic, key}; the server checks that the client runs as
 * the same user (SO_PEERCRED), looks the key up and answers one int32 status, with the
 * descriptor attached (SCM_RIGHTS) when the status is 0. Keys are 64 random bits.
 *
 * Locks: life_lock serialises starting and stopping the thread (export, revoke); table_lock
 * guards the exports, and is the only lock the thread takes. */
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "transport/transport.h"

#define FD_PASS_MAGIC 0x626174666470ull /* "batfdp" */
#define FD_PASS_IO_MS 2000              /* the server's limit on one client's request */
#define FD_PASS_POLL_MS 100             /* a client's wait slice between abort checks */

enum { FD_PASS_OK = 0, FD_PASS_UNKNOWN_KEY = 1 };

typedef struct fd_entry {
  uint64_t key;
  int fd;
} fd_entry_t;

static struct {
  pthread_mutex_t life_lock;
  pthread_mutex_t table_lock;
  bool running;
  pid_t pid; /* process that started the server (a forked child starts its own) */
  pthread_t thread;
  int listen_fd;
  int stop_fd; /* eventfd */
  char name[FD_PASS_NAME_MAX];
  fd_entry_t* entries;
  int n, cap;
} srv = {.life_lock = PTHREAD_MUTEX_INITIALIZER,
         .table_lock = PTHREAD_MUTEX_INITIALIZER,
         .listen_fd = -1,
         .stop_fd = -1};

typedef struct fd_request {
  uint64_t magic;
  uint64_t key;
} fd_request_t;

static socklen_t fd_addr(const char* name, struct sockaddr_un* addr) {
  memset(addr, 0, sizeof(*addr));
  addr->sun_family = AF_UNIX;
  size_t n = strlen(name);
  memcpy(addr->sun_path + 1, name, n); /* sun_path[0] = '\0': abstract */
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n);
}

static uint64_t fd_random(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), 0) != sizeof(v)) v = clock_ns() ^ ((uint64_t)getpid() << 32);
  return v;
}

static void fd_set_timeouts(int fd, int ms) {
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  (void)setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  (void)setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static bool fd_same_user(int sock) {
  struct ucred cred;
  socklen_t len = sizeof(cred);
  return getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == geteuid();
}

/* Sends status and, when fd >= 0, the descriptor. */
static int fd_send_reply(int sock, int32_t status, int fd) {
  char ctrl[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {.iov_base = &status, .iov_len = sizeof(status)};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  if (fd >= 0) {
    memset(ctrl, 0, sizeof(ctrl));
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof(ctrl);
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
  }
  ssize_t n;
  do n = sendmsg(sock, &msg, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  return n == (ssize_t)sizeof(status) ? 0 : -1;
}

static void fd_serve_one(int sock) {
  fd_request_t req;
  fd_set_timeouts(sock, FD_PASS_IO_MS);
  if (!fd_same_user(sock)) {
    INFO(NCCL_P2P, "fd server %s: refused a client of another user", srv.name);
    return;
  }
  ssize_t n;
  do n = recv(sock, &req, sizeof(req), MSG_WAITALL);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof(req) || req.magic != FD_PASS_MAGIC) return;
  int dup_fd = -1;
  pthread_mutex_lock(&srv.table_lock);
  for (int i = 0; i < srv.n; i++) {
    if (srv.entries[i].key == req.key) {
      dup_fd = fcntl(srv.entries[i].fd, F_DUPFD_CLOEXEC, 0);
      break;
    }
  }
  pthread_mutex_unlock(&srv.table_lock);
  (void)fd_send_reply(sock, dup_fd >= 0 ? FD_PASS_OK : FD_PASS_UNKNOWN_KEY, dup_fd);
  if (dup_fd >= 0) close(dup_fd);
}

static void* fd_server_main(void* arg) {
  (void)arg;
  thread_set_name(pthread_self(), "NCCL FdServer");
  for (;;) {
    struct pollfd p[2] = {{.fd = srv.listen_fd, .events = POLLIN},
                          {.fd = srv.stop_fd, .events = POLLIN}};
    int r = poll(p, 2, -1);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (p[1].revents & POLLIN)) break;
    if (!(p[0].revents & POLLIN)) continue;
    int c = accept4(srv.listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (c < 0) continue; /* EAGAIN (a client gave up), ECONNABORTED ... */
    fd_serve_one(c);
    close(c);
  }
  return NULL;
}

/* Holding life_lock. */
static ncclResult_t fd_server_start(void) {
  struct sockaddr_un addr;
  srv.listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (srv.listen_fd < 0) {
    WARN("P2P: socket(AF_UNIX) for the descriptor server failed: %s", strerror(errno));
    return ncclSystemError;
  }
  snprintf(srv.name, sizeof(srv.name), "baton-fd-%d-%016llx", (int)getpid(),
           (unsigned long long)fd_random());
  socklen_t len = fd_addr(srv.name, &addr);
  if (bind(srv.listen_fd, (struct sockaddr*)&addr, len) != 0 || listen(srv.listen_fd, 256) != 0) {
    WARN(
        "P2P: binding the abstract socket @%s failed: %s (set NCCL_CUMEM_ENABLE=0 to share GPU "
        "memory with CUDA IPC handles instead)",
        srv.name, strerror(errno));
    goto fail;
  }
  srv.stop_fd = eventfd(0, EFD_CLOEXEC);
  if (srv.stop_fd < 0) {
    WARN("P2P: eventfd failed: %s", strerror(errno));
    goto fail;
  }
  int err = pthread_create(&srv.thread, NULL, fd_server_main, NULL);
  if (err != 0) {
    WARN("P2P: starting the descriptor server thread failed: %s", strerror(err));
    goto fail;
  }
  srv.running = true;
  srv.pid = getpid();
  INFO(NCCL_P2P, "P2P: descriptor server listening on @%s", srv.name);
  return ncclSuccess;
fail:
  if (srv.stop_fd >= 0) close(srv.stop_fd);
  close(srv.listen_fd);
  srv.stop_fd = srv.listen_fd = -1;
  return ncclSystemError;
}

/* Holding life_lock, with no export left. */
static void fd_server_stop(void) {
  uint64_t one = 1;
  if (write(srv.stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
    INFO(NCCL_P2P, "P2P: waking the descriptor server failed: %s", strerror(errno));
  pthread_join(srv.thread, NULL);
  close(srv.stop_fd);
  close(srv.listen_fd);
  srv.stop_fd = srv.listen_fd = -1;
  srv.running = false;
}

/* Holding life_lock: a child forked from a process with a server has the state but no thread. */
static void fd_server_forget_parent(void) {
  if (!srv.running || srv.pid == getpid()) return;
  for (int i = 0; i < srv.n; i++) close(srv.entries[i].fd);
  srv.n = 0;
  close(srv.stop_fd);
  close(srv.listen_fd);
  srv.stop_fd = srv.listen_fd = -1;
  srv.running = false;
}

ncclResult_t fd_pass_export(int fd, fd_export_t* out) {
  ncclResult_t res = ncclSuccess;
  fd_entry_t e = {.key = fd_random(), .fd = fcntl(fd, F_DUPFD_CLOEXEC, 0)};
  if (e.fd < 0) {
    WARN("P2P: duplicating descriptor %d failed: %s", fd, strerror(errno));
    return ncclSystemError;
  }
  pthread_mutex_lock(&srv.life_lock);
  fd_server_forget_parent();
  if (!srv.running) CHECK_GOTO(fd_server_start(), res, out);
  pthread_mutex_lock(&srv.table_lock);
  if (srv.n == srv.cap) {
    int cap = srv.cap ? 2 * srv.cap : 16;
    fd_entry_t* p = realloc(srv.entries, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      pthread_mutex_unlock(&srv.table_lock);
      WARN("P2P: out of memory for %d exported descriptors", cap);
      res = ncclSystemError;
      goto out;
    }
    srv.entries = p;
    srv.cap = cap;
  }
  srv.entries[srv.n++] = e;
  pthread_mutex_unlock(&srv.table_lock);
  snprintf(out->name, sizeof(out->name), "%s", srv.name);
  out->key = e.key;
  e.fd = -1;
out:
  if (res != ncclSuccess && srv.running && srv.n == 0) fd_server_stop();
  pthread_mutex_unlock(&srv.life_lock);
  if (e.fd >= 0) close(e.fd);
  return res;
}

void fd_pass_revoke(const fd_export_t* e) {
  pthread_mutex_lock(&srv.life_lock);
  fd_server_forget_parent();
  pthread_mutex_lock(&srv.table_lock);
  for (int i = 0; i < srv.n; i++) {
    if (srv.entries[i].key != e->key) continue;
    close(srv.entries[i].fd);
    srv.entries[i] = srv.entries[--srv.n];
    break;
  }
  bool idle = srv.n == 0;
  pthread_mutex_unlock(&srv.table_lock);
  if (idle && srv.running) fd_server_stop();
  if (idle) {
    free(srv.entries);
    srv.entries = NULL;
    srv.cap = 0;
  }
  pthread_mutex_unlock(&srv.life_lock);
}

/* ---- Client --------------------------------------------------------------------------------- */
static bool fd_client_gave_up(volatile uint32_t* abort_flag, uint64_t deadline) {
  return (abort_flag != NULL && __atomic_load_n(abort_flag, __ATOMIC_ACQUIRE) != 0) ||
         clock_ns() > deadline;
}

ncclResult_t fd_pass_import(const fd_export_t* e, volatile uint32_t* abort_flag, int timeout_ms,
                            int* fd_out) {
  struct sockaddr_un addr;
  char name[FD_PASS_NAME_MAX];
  ncclResult_t res = ncclSystemError;
  uint64_t deadline = clock_ns() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
  snprintf(name, sizeof(name), "%.*s", FD_PASS_NAME_MAX - 1, e->name);
  socklen_t len = fd_addr(name, &addr);
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) {
    WARN("P2P: socket(AF_UNIX) failed: %s", strerror(errno));
    return ncclSystemError;
  }
  /* A full backlog answers EAGAIN: retry until the deadline. */
  for (;;) {
    if (connect(s, (struct sockaddr*)&addr, len) == 0) break;
    if (errno != EAGAIN && errno != EINTR) {
      WARN(
          "P2P: connecting to the descriptor server @%s of the peer failed: %s (is the peer in "
          "another network namespace? set NCCL_CUMEM_ENABLE=0 to use CUDA IPC handles)",
          name, strerror(errno));
      goto out;
    }
    if (fd_client_gave_up(abort_flag, deadline)) {
      WARN("P2P: the descriptor server @%s stayed busy for %d ms", name, timeout_ms);
      goto out;
    }
    usleep(1000);
  }
  if (!fd_same_user(s)) {
    WARN("P2P: the descriptor server @%s runs as another user; refusing it", name);
    goto out;
  }
  fd_set_timeouts(s, FD_PASS_POLL_MS);
  fd_request_t req = {.magic = FD_PASS_MAGIC, .key = e->key};
  if (send(s, &req, sizeof(req), MSG_NOSIGNAL) != (ssize_t)sizeof(req)) {
    WARN("P2P: sending a request to the descriptor server @%s failed: %s", name, strerror(errno));
    goto out;
  }
  int32_t status = -1;
  char ctrl[CMSG_SPACE(sizeof(int))];
  struct iovec iov = {.iov_base = &status, .iov_len = sizeof(status)};
  struct msghdr msg = {
      .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctrl, .msg_controllen = sizeof(ctrl)};
  ssize_t n;
  for (;;) {
    n = recvmsg(s, &msg, MSG_CMSG_CLOEXEC);
    if (n >= 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) break;
    if (fd_client_gave_up(abort_flag, deadline)) {
      WARN(
          "P2P: no answer from the descriptor server @%s within %d ms (or the communicator was "
          "aborted)",
          name, timeout_ms);
      goto out;
    }
  }
  int fd = -1;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS &&
        c->cmsg_len == CMSG_LEN(sizeof(int)))
      memcpy(&fd, CMSG_DATA(c), sizeof(int));
  if (n != (ssize_t)sizeof(status) || status != FD_PASS_OK || fd < 0 ||
      (msg.msg_flags & MSG_CTRUNC)) {
    if (fd >= 0) close(fd);
    WARN("P2P: the descriptor server @%s did not hand over export %016llx (%s)", name,
         (unsigned long long)e->key,
         n != (ssize_t)sizeof(status)    ? (n < 0 ? strerror(errno) : "connection closed")
         : status == FD_PASS_UNKNOWN_KEY ? "unknown or revoked export"
                                         : "no descriptor attached");
    goto out;
  }
  *fd_out = fd;
  res = ncclSuccess;
out:
  close(s);
  return res;
}
