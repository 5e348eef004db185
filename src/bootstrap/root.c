/* The bootstrap root: the unique id, the root thread, and the registration protocol.
 *
 * Every rank sends the root a registration (magic, rank, nranks, its listen address) and waits for
 * the listen address of its ring successor, rank+1. The root answers a rank as soon as it knows
 * that successor, so it holds few connections at once, and exits when every rank of its slice has
 * its answer, or when NCCL_BOOTSTRAP_TIMEOUT_MS passes without a registration.
 *
 * Several roots (ncclCommInitRankScalable): rank r registers with root r*nroots/nranks, so root k
 * serves the slice [ceil(k*nranks/nroots), ceil((k+1)*nranks/nroots)). The successor of the
 * slice's last rank is the first rank of the next slice, so that first rank also registers with the
 * previous root (a "successor" registration, no answer expected). */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"

#define ROOT_WIRE_VERSION 1
#define ROOT_POLL_SLICE_MS 100

enum { ROOT_REG_MEMBER = 1, ROOT_REG_SUCCESSOR = 2 };

typedef struct root_reg {
  uint64_t magic;
  uint32_t version;
  uint32_t kind; /* ROOT_REG_* */
  int32_t rank;
  int32_t nranks;
  int32_t nroots;
  int32_t root_index;
  socket_addr_t addr; /* the rank's listen address */
} root_reg_t;

typedef struct root_reply {
  uint64_t magic;
  int32_t rank;
  int32_t next_rank;
  socket_addr_t next_addr;
} root_reply_t;

/* ---- Slices (pure) ------------------------------------------------------------------------------
 */

static int root_of_rank(int rank, int nranks, int nroots) {
  return (int)(((int64_t)rank * nroots) / nranks);
}

static int root_slice_first(int k, int nranks, int nroots) {
  return (int)(((int64_t)k * nranks + nroots - 1) / nroots);
}

/* ---- Root thread state --------------------------------------------------------------------------
 */

typedef struct root_conn {
  socket_conn_t conn;
  root_reg_t reg;
  size_t got;
  int waiting_rank; /* a member waiting for its answer; -1 while still reading */
} root_conn_t;

typedef struct root_state {
  struct root_state* next_running; /* list of roots running in this process */
  socket_conn_t listener;
  uint64_t magic;
  char name[80]; /* the listen address as text */
  /* Learned from the first valid registration. */
  int nranks, nroots, index, lo, hi, nslots;
  socket_addr_t* addrs;
  bool* have;
  bool* answered;
  int nanswered;
  int njoined;
  root_conn_t* conns;
  int nconns, cap;
} root_state_t;

static pthread_mutex_t root_list_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t root_atfork_once = PTHREAD_ONCE_INIT;
static root_state_t* root_list;

/* A child forked while a root thread holds the list lock must not inherit it locked. */
static void root_atfork_prepare(void) {
  pthread_mutex_lock(&root_list_lock);
}
static void root_atfork_parent(void) {
  pthread_mutex_unlock(&root_list_lock);
}
static void root_atfork_child(void) {
  root_list = NULL; /* the root threads stay in the parent */
  pthread_mutex_unlock(&root_list_lock);
}
static void root_atfork_register(void) {
  pthread_atfork(root_atfork_prepare, root_atfork_parent, root_atfork_child);
}

static bool addr_equal(const socket_addr_t* a, const socket_addr_t* b) {
  if (a->sa.sa_family != b->sa.sa_family) return false;
  if (a->sa.sa_family == AF_INET)
    return a->sin.sin_port == b->sin.sin_port && a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr;
  if (a->sa.sa_family == AF_INET6)
    return a->sin6.sin6_port == b->sin6.sin6_port &&
           memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, sizeof(a->sin6.sin6_addr)) == 0;
  return false;
}

/* Slot of a rank in this root's tables, or -1 when the rank is none of its business. */
static int root_slot(const root_state_t* st, int rank) {
  if (rank >= st->lo && rank < st->hi) return rank - st->lo;
  if (st->nroots > 1 && rank == st->hi % st->nranks) return st->nslots - 1;
  return -1;
}

static ncclResult_t root_learn_shape(root_state_t* st, const root_reg_t* reg) {
  st->nranks = reg->nranks;
  st->nroots = reg->nroots;
  st->index = reg->root_index;
  st->lo = root_slice_first(st->index, st->nranks, st->nroots);
  st->hi = root_slice_first(st->index + 1, st->nranks, st->nroots);
  st->nslots = st->hi - st->lo + (st->nroots > 1 ? 1 : 0);
  CHECK(MEM_CALLOC(&st->addrs, st->nslots));
  CHECK(MEM_CALLOC(&st->have, st->nslots));
  CHECK(MEM_CALLOC(&st->answered, st->nslots));
  return ncclSuccess;
}

static void root_drop_conn(root_state_t* st, int i) {
  socket_close(&st->conns[i].conn);
  st->conns[i] = st->conns[st->nconns - 1];
  st->nconns--;
}

static void root_unlist(root_state_t* st);

/* Before the last answer: leave the list of running roots and free the port, so that a rank that
 * learns the job is complete (it needs this answer, transitively) can start a new root at once. */
static void root_retire(root_state_t* st) {
  root_unlist(st);
  socket_close(&st->listener);
}

/* Answers member `rank` (waiting on conns[i]) if its successor's address is known. Returns true
 * when conns[i] was consumed. */
static bool root_try_answer(root_state_t* st, int i) {
  root_conn_t* c = &st->conns[i];
  int rank = c->waiting_rank;
  int next = (rank + 1) % st->nranks;
  int slot = root_slot(st, next);
  if (slot < 0 || !st->have[slot]) return false;
  root_reply_t reply = {
      .magic = st->magic, .rank = rank, .next_rank = next, .next_addr = st->addrs[slot]};
  if (st->nanswered + 1 == st->hi - st->lo) root_retire(st);
  if (socket_send_all(&c->conn, &reply, sizeof(reply)) != ncclSuccess)
    INFO(NCCL_BOOTSTRAP, "Bootstrap root %s: could not answer rank %d", st->name, rank);
  st->answered[rank - st->lo] = true;
  st->nanswered++;
  root_drop_conn(st, i);
  return true;
}

static void root_answer_waiting(root_state_t* st) {
  for (int i = 0; i < st->nconns;) {
    if (st->conns[i].waiting_rank >= 0 && root_try_answer(st, i)) continue;
    i++;
  }
}

/* Validates a complete registration on conns[i]; keeps the connection when the rank waits for an
 * answer. Returns true when the registration was accepted. */
static bool root_handle_reg(root_state_t* st, int i) {
  root_conn_t* c = &st->conns[i];
  const root_reg_t* reg = &c->reg;
  char peer[80];
  socket_addr_format(&c->conn.addr, peer, sizeof(peer));
  if (reg->magic != st->magic) {
    WARN(
        "Bootstrap root %s: rejected a connection from %s with a wrong magic (0x%llx); a stray "
        "client, or a rank using another unique id",
        st->name, peer, (unsigned long long)reg->magic);
    goto reject;
  }
  if (reg->version != ROOT_WIRE_VERSION || reg->nranks < 1 || reg->nroots < 1 ||
      reg->nroots > reg->nranks || reg->root_index < 0 || reg->root_index >= reg->nroots ||
      reg->rank < 0 || reg->rank >= reg->nranks ||
      (reg->kind != ROOT_REG_MEMBER && reg->kind != ROOT_REG_SUCCESSOR)) {
    WARN("Bootstrap root %s: rejected a malformed registration from %s (rank %d nranks %d)",
         st->name, peer, reg->rank, reg->nranks);
    goto reject;
  }
  if (st->nranks == 0 && root_learn_shape(st, reg) != ncclSuccess) goto reject;
  if (reg->nranks != st->nranks || reg->nroots != st->nroots || reg->root_index != st->index) {
    WARN(
        "Bootstrap root %s: rank %d from %s says nranks=%d (root %d of %d) but earlier ranks said "
        "nranks=%d (root %d of %d); every rank must pass the same nranks and unique id(s)",
        st->name, reg->rank, peer, reg->nranks, reg->root_index, reg->nroots, st->nranks, st->index,
        st->nroots);
    goto reject;
  }
  int slot = root_slot(st, reg->rank);
  bool is_member = reg->rank >= st->lo && reg->rank < st->hi;
  if (slot < 0 || (reg->kind == ROOT_REG_MEMBER) != is_member) {
    WARN(
        "Bootstrap root %s: rank %d from %s registered with the wrong root (this is root %d of "
        "%d, serving ranks %d..%d)",
        st->name, reg->rank, peer, st->index, st->nroots, st->lo, st->hi - 1);
    goto reject;
  }
  if (st->have[slot]) {
    WARN(
        "Bootstrap root %s: rank %d registered twice (again from %s); two processes use the "
        "same rank",
        st->name, reg->rank, peer);
    goto reject;
  }
  st->have[slot] = true;
  st->addrs[slot] = reg->addr;
  st->njoined++;
  TRACE(NCCL_BOOTSTRAP, "Bootstrap root %s: rank %d joined from %s", st->name, reg->rank, peer);
  if (reg->kind == ROOT_REG_MEMBER) {
    c->waiting_rank = reg->rank;
  } else {
    root_drop_conn(st, i);
  }
  root_answer_waiting(st);
  return true;
reject:
  root_drop_conn(st, i);
  return false;
}

/* Reads what is available on conns[i]. Returns true when the registration was accepted (i may now
 * name another connection). */
static bool root_read_conn(root_state_t* st, int i, bool* progressed) {
  root_conn_t* c = &st->conns[i];
  char peer[80];
  if (c->waiting_rank >= 0) {
    /* A waiting member sends nothing more: data or a close means it gave up. */
    char byte;
    ssize_t n = recv(c->conn.fd, &byte, 1, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) || n > 0) {
      INFO(NCCL_BOOTSTRAP, "Bootstrap root %s: rank %d left before its answer", st->name,
           c->waiting_rank);
      st->answered[c->waiting_rank - st->lo] = true;
      st->nanswered++;
      root_drop_conn(st, i);
      *progressed = true;
    }
    return false;
  }
  size_t before = c->got;
  ncclResult_t res = socket_progress(&c->conn, 0, &c->reg, sizeof(c->reg), &c->got);
  if (res != ncclSuccess) {
    /* ncclRemoteError is an orderly close (not yet logged); other errors were logged. */
    if (res == ncclRemoteError && c->got > 0)
      WARN("Bootstrap root %s: rejected a truncated registration from %s (%zu of %zu bytes)",
           st->name, socket_addr_format(&c->conn.addr, peer, sizeof(peer)), c->got, sizeof(c->reg));
    root_drop_conn(st, i);
    return false;
  }
  if (c->got != before) *progressed = true;
  if (c->got < sizeof(c->reg)) return false;
  return root_handle_reg(st, i);
}

static ncclResult_t root_add_conn(root_state_t* st, const socket_conn_t* conn) {
  if (st->nconns == st->cap) {
    int cap = st->cap ? st->cap * 2 : 64;
    root_conn_t* grown = realloc(st->conns, (size_t)cap * sizeof(*grown));
    if (grown == NULL) {
      WARN("Bootstrap root %s: out of memory for %d connections", st->name, cap);
      return ncclSystemError;
    }
    st->conns = grown;
    st->cap = cap;
  }
  root_conn_t* c = &st->conns[st->nconns++];
  memset(c, 0, sizeof(*c));
  c->conn = *conn;
  c->waiting_rank = -1;
  return ncclSuccess;
}

static void root_report_missing(root_state_t* st, int64_t timeout_ms) {
  if (st->njoined == 0) {
    INFO(NCCL_BOOTSTRAP, "Bootstrap root %s: no rank joined within %lld ms; root exits", st->name,
         (long long)timeout_ms);
    return;
  }
  char list[256] = "";
  size_t used = 0;
  int missing = 0;
  for (int s = 0; s < st->nslots; s++) {
    if (st->have[s]) continue;
    int rank = s < st->hi - st->lo ? st->lo + s : st->hi % st->nranks;
    if (missing++ < 16 && used < sizeof(list))
      used += (size_t)snprintf(list + used, sizeof(list) - used, " %d", rank);
  }
  WARN(
      "Bootstrap root %s: timed out after %lld ms waiting for %d rank(s):%s%s; did every rank "
      "start? (NCCL_BOOTSTRAP_TIMEOUT_MS)",
      st->name, (long long)timeout_ms, missing, list, missing > 16 ? " ..." : "");
}

static void root_free(root_state_t* st) {
  for (int i = 0; i < st->nconns; i++) socket_close(&st->conns[i].conn);
  socket_close(&st->listener);
  free(st->conns);
  free(st->addrs);
  free(st->have);
  free(st->answered);
  free(st);
}

static void root_unlist(root_state_t* st) {
  pthread_mutex_lock(&root_list_lock);
  for (root_state_t** p = &root_list; *p != NULL; p = &(*p)->next_running) {
    if (*p == st) {
      *p = st->next_running;
      break;
    }
  }
  pthread_mutex_unlock(&root_list_lock);
}

static void* root_thread_main(void* arg) {
  root_state_t* st = arg;
  thread_set_name(pthread_self(), "NCCL BootstrapR");
  int64_t timeout_ms = param_int(PARAM_BOOTSTRAP_TIMEOUT_MS);
  if (timeout_ms <= 0) timeout_ms = 300000;
  uint64_t start = clock_ns();
  uint64_t deadline = start + (uint64_t)timeout_ms * 1000000ull;
  struct pollfd* pfds = NULL;
  int pfd_cap = 0;
  bool ok = false;
  for (;;) {
    if (st->nranks > 0 && st->nanswered == st->hi - st->lo) {
      ok = true;
      break;
    }
    if (clock_ns() >= deadline) {
      root_report_missing(st, timeout_ms);
      break;
    }
    if (pfd_cap < st->nconns + 1) {
      int cap = st->nconns + 65;
      struct pollfd* grown = realloc(pfds, (size_t)cap * sizeof(*grown));
      if (grown == NULL) {
        WARN("Bootstrap root %s: out of memory for %d poll entries", st->name, cap);
        break;
      }
      pfds = grown;
      pfd_cap = cap;
    }
    pfds[0] = (struct pollfd){.fd = st->listener.fd, .events = POLLIN};
    int npfd = st->nconns + 1;
    for (int i = 0; i < st->nconns; i++)
      pfds[i + 1] = (struct pollfd){.fd = st->conns[i].conn.fd, .events = POLLIN};
    int rc = poll(pfds, (nfds_t)npfd, ROOT_POLL_SLICE_MS);
    if (rc < 0 && errno != EINTR) {
      WARN("Bootstrap root %s: poll failed: %s", st->name, strerror(errno));
      break;
    }
    if (rc <= 0) continue;
    bool progressed = false;
    /* Connections first (indices match pfds until the first one is dropped; walk backwards so a
     * drop, which moves the last connection into the hole, never skips one). */
    for (int i = npfd - 2; i >= 0; i--) {
      if (i >= st->nconns || pfds[i + 1].revents == 0) continue;
      if (st->conns[i].conn.fd != pfds[i + 1].fd) continue;
      if (root_read_conn(st, i, &progressed)) progressed = true;
    }
    if (pfds[0].revents != 0) {
      for (;;) {
        socket_conn_t conn;
        int accepted = 0;
        if (socket_try_accept(&st->listener, &conn, &accepted) != ncclSuccess || !accepted) break;
        if (root_add_conn(st, &conn) != ncclSuccess) {
          socket_close(&conn);
          break;
        }
      }
    }
    if (progressed) deadline = clock_ns() + (uint64_t)timeout_ms * 1000000ull;
  }
  if (ok)
    INFO(NCCL_BOOTSTRAP,
         "Bootstrap root %s: all %d rank(s) of root %d/%d joined in %.3f s; root "
         "exits",
         st->name, st->hi - st->lo, st->index, st->nroots, (double)(clock_ns() - start) / 1e9);
  free(pfds);
  root_unlist(st);
  root_free(st);
  return NULL;
}

/* Starts a root thread on an open listener; takes ownership of it. */
static ncclResult_t root_spawn(const socket_conn_t* listener, uint64_t magic) {
  root_state_t* st = NULL;
  ncclResult_t res = MEM_CALLOC(&st, 1);
  if (res != ncclSuccess) {
    socket_conn_t doomed = *listener;
    socket_close(&doomed);
    return res;
  }
  st->listener = *listener;
  st->listener.abort_flag = NULL;
  st->magic = magic;
  socket_addr_format(&listener->addr, st->name, sizeof(st->name));
  pthread_once(&root_atfork_once, root_atfork_register);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  pthread_mutex_lock(&root_list_lock);
  st->next_running = root_list;
  root_list = st;
  pthread_t tid;
  int err = pthread_create(&tid, &attr, root_thread_main, st);
  if (err != 0) root_list = st->next_running;
  pthread_mutex_unlock(&root_list_lock);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    WARN("Bootstrap: cannot start the root thread for %s: %s", st->name, strerror(err));
    root_free(st);
    return ncclSystemError;
  }
  /* st belongs to the thread now (it frees it on exit). */
  char name[80];
  INFO(NCCL_BOOTSTRAP | NCCL_INIT, "Bootstrap: root started at %s",
       socket_addr_format(&listener->addr, name, sizeof(name)));
  return ncclSuccess;
}

static bool root_is_running(const bootstrap_handle_t* handle) {
  bool found = false;
  pthread_mutex_lock(&root_list_lock);
  for (root_state_t* st = root_list; st != NULL && !found; st = st->next_running)
    found = st->magic == handle->magic && addr_equal(&st->listener.addr, &handle->addr);
  pthread_mutex_unlock(&root_list_lock);
  return found;
}

/* ---- Unique id
 * ----------------------------------------------------------------------------------- */

static ncclResult_t random_magic(uint64_t* out) {
  uint64_t v = 0;
  size_t got = 0;
  while (got < sizeof(v)) {
    ssize_t n = getrandom((char*)&v + got, sizeof(v) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      WARN("Bootstrap: getrandom failed: %s", strerror(errno));
      return ncclSystemError;
    }
    got += (size_t)n;
  }
  *out = v;
  return ncclSuccess;
}

/* The handle that NCCL_COMM_ID describes: its address, and a magic every rank derives alike. */
static ncclResult_t handle_from_env(const char* comm_id, bootstrap_handle_t* out) {
  bootstrap_handle_t h;
  memset(&h, 0, sizeof(h));
  CHECK(socket_addr_parse(comm_id, &h.addr));
  h.magic = hash_bytes(comm_id, strlen(comm_id)) ^ 0x62746f6e2d636f6dull;
  *out = h;
  return ncclSuccess;
}

ncclResult_t bootstrap_get_unique_id(bootstrap_handle_t* out) {
  const char* comm_id = param_str(PARAM_COMM_ID);
  if (comm_id != NULL && comm_id[0] != '\0') {
    CHECK(handle_from_env(comm_id, out));
    INFO(NCCL_BOOTSTRAP, "Bootstrap: unique id from NCCL_COMM_ID=%s (rank 0 starts the root)",
         comm_id);
    return ncclSuccess;
  }
  return bootstrap_root_create(out);
}

ncclResult_t bootstrap_root_create(bootstrap_handle_t* out) {
  const socket_iface_t* ifaces = NULL;
  int nifaces = 0;
  CHECK(socket_default_interfaces(&ifaces, &nifaces));
  bootstrap_handle_t h;
  memset(&h, 0, sizeof(h));
  CHECK(random_magic(&h.magic));
  socket_addr_t bind_addr = ifaces[0].addr;
  if (bind_addr.sa.sa_family == AF_INET)
    bind_addr.sin.sin_port = 0;
  else
    bind_addr.sin6.sin6_port = 0;
  socket_conn_t listener;
  CHECK(socket_listen(&bind_addr, NULL, &listener));
  h.addr = listener.addr;
  ncclResult_t res = root_spawn(&listener, h.magic);
  if (res != ncclSuccess) return res; /* root_spawn closed the listener */
  *out = h;
  return ncclSuccess;
}

ncclResult_t bootstrap_root_start(const bootstrap_handle_t* handle) {
  if (root_is_running(handle)) return ncclSuccess;
  socket_conn_t listener;
  CHECK(socket_listen(&handle->addr, NULL, &listener));
  CHECK(root_spawn(&listener, handle->magic));
  return ncclSuccess;
}

/* ---- The rank's side
 * ------------------------------------------------------------------------------ */

static ncclResult_t root_send_reg(const bootstrap_handle_t* handle, uint32_t kind, int rank,
                                  int nranks, int nroots, int root_index,
                                  const socket_addr_t* listen_addr, volatile uint32_t* abort_flag,
                                  socket_conn_t* out) {
  root_reg_t reg;
  memset(&reg, 0, sizeof(reg));
  reg.magic = handle->magic;
  reg.version = ROOT_WIRE_VERSION;
  reg.kind = kind;
  reg.rank = rank;
  reg.nranks = nranks;
  reg.nroots = nroots;
  reg.root_index = root_index;
  reg.addr = *listen_addr;
  socket_conn_t conn;
  CHECK(socket_connect(&handle->addr, abort_flag, &conn));
  ncclResult_t res = socket_send_all(&conn, &reg, sizeof(reg));
  if (res != ncclSuccess) {
    socket_close(&conn);
    return res;
  }
  *out = conn;
  return ncclSuccess;
}

ncclResult_t bootstrap_root_join(const bootstrap_handle_t* handles, int nhandles, int rank,
                                 int nranks, const socket_addr_t* listen_addr,
                                 volatile uint32_t* abort_flag, socket_addr_t* next_out) {
  char text[80];
  if (nhandles < 1 || nhandles > nranks || rank < 0 || rank >= nranks) {
    WARN(
        "Bootstrap: invalid registration: rank %d, nranks %d, %d root(s) (need 0 <= rank < "
        "nranks and 1 <= roots <= nranks)",
        rank, nranks, nhandles);
    return ncclInvalidArgument;
  }
  /* With NCCL_COMM_ID, rank 0 hosts the root (bootstrap_root_start is idempotent). */
  const char* comm_id = param_str(PARAM_COMM_ID);
  if (rank == 0 && nhandles == 1 && comm_id != NULL && comm_id[0] != '\0') {
    bootstrap_handle_t env;
    if (handle_from_env(comm_id, &env) == ncclSuccess && env.magic == handles[0].magic &&
        addr_equal(&env.addr, &handles[0].addr))
      CHECK(bootstrap_root_start(&env));
  }
  int k = root_of_rank(rank, nranks, nhandles);
  socket_conn_t conn;
  if (nhandles > 1 && rank == root_slice_first(k, nranks, nhandles)) {
    int prev = (k + nhandles - 1) % nhandles;
    CHECK(root_send_reg(&handles[prev], ROOT_REG_SUCCESSOR, rank, nranks, nhandles, prev,
                        listen_addr, abort_flag, &conn));
    socket_close(&conn);
  }
  CHECK(root_send_reg(&handles[k], ROOT_REG_MEMBER, rank, nranks, nhandles, k, listen_addr,
                      abort_flag, &conn));
  root_reply_t reply;
  ncclResult_t res = socket_recv_all(&conn, &reply, sizeof(reply));
  socket_close(&conn);
  if (res != ncclSuccess) {
    INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d got no answer from root %s (see the root's log)", rank,
         socket_addr_format(&handles[k].addr, text, sizeof(text)));
    return res;
  }
  int next = (rank + 1) % nranks;
  if (reply.magic != handles[k].magic || reply.rank != rank || reply.next_rank != next) {
    WARN("Bootstrap: rank %d got a malformed answer from root %s (magic 0x%llx, rank %d, next %d)",
         rank, socket_addr_format(&handles[k].addr, text, sizeof(text)),
         (unsigned long long)reply.magic, reply.rank, reply.next_rank);
    return ncclRemoteError;
  }
  *next_out = reply.next_addr;
  return ncclSuccess;
}
