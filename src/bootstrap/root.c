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
 * previous root (a "successor" registration, no answer expected).
 *
 * Each registration is judged on its own: one that disagrees with the others about the job's shape
 * (nranks, roots) starts a shape of its own instead of poisoning the root (at most
 * ROOT_MAX_SHAPES), a shape whose tables cannot be allocated is refused alone, and the root serves
 * the first shape whose every rank registered. Every refused rank gets a reply that says why
 * (status and text), so its init fails with the root's reason, not with a closed connection. */
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/random.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"

#define ROOT_WIRE_VERSION 2
#define ROOT_POLL_SLICE_MS 100
#define ROOT_MAX_SHAPES 4        /* conflicting job shapes one root keeps apart */
#define ROOT_MAX_SLOTS (1 << 24) /* ranks one root serves at most (16 M) */
#define ROOT_REASON_LEN 192

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
  uint64_t magic; /* the registration's magic (a refused stranger can read its reason too) */
  int32_t rank;
  int32_t next_rank;
  int32_t status; /* ncclSuccess, or the ncclResult_t the refused rank fails with */
  int32_t pad;
  socket_addr_t next_addr;
  char reason[ROOT_REASON_LEN]; /* why it was refused */
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
  int shape;        /* the shape it registered in (waiting members) */
} root_conn_t;

/* One job shape: what the ranks that registered in it agree on, and their addresses. */
typedef struct root_shape {
  int nranks, nroots, index, lo, hi, nslots;
  socket_addr_t* addrs;
  bool* have;
  bool* answered;
  int nanswered;
  int njoined;
} root_shape_t;

typedef struct root_state {
  struct root_state* next_running; /* list of roots running in this process */
  socket_conn_t listener;
  uint64_t magic;
  char name[80]; /* the listen address as text */
  root_shape_t shapes[ROOT_MAX_SHAPES];
  int nshapes;
  int done_shape; /* the shape every rank of which was answered, -1 until then */
  root_conn_t* conns;
  int nconns, cap;
  struct pollfd* pfds; /* allocated before the thread starts: a thread that allocates while its
                        * process forks leaves the child a locked allocator under ASan */
  int pfd_cap;
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

/* Slot of a rank in a shape's tables, or -1 when the rank is none of its business. */
static int root_slot(const root_shape_t* sh, int rank) {
  if (rank >= sh->lo && rank < sh->hi) return rank - sh->lo;
  if (sh->nroots > 1 && rank == sh->hi % sh->nranks) return sh->nslots - 1;
  return -1;
}

static bool shape_matches(const root_shape_t* sh, const root_reg_t* reg) {
  return sh->nranks == reg->nranks && sh->nroots == reg->nroots && sh->index == reg->root_index;
}

static void shape_free(root_shape_t* sh) {
  free(sh->addrs);
  free(sh->have);
  free(sh->answered);
  memset(sh, 0, sizeof(*sh));
}

/* The shape reg belongs to, a new one if none matches (NULL and *why when there is no room). */
static root_shape_t* root_shape_for(root_state_t* st, const root_reg_t* reg, char* why,
                                    size_t len) {
  for (int i = 0; i < st->nshapes; i++)
    if (shape_matches(&st->shapes[i], reg)) return &st->shapes[i];
  if (st->nshapes == ROOT_MAX_SHAPES) {
    snprintf(why, len, "%d other ranks' shapes disagree already (nranks=%d first)", ROOT_MAX_SHAPES,
             st->shapes[0].nranks);
    return NULL;
  }
  root_shape_t sh = {.nranks = reg->nranks, .nroots = reg->nroots, .index = reg->root_index};
  sh.lo = root_slice_first(sh.index, sh.nranks, sh.nroots);
  sh.hi = root_slice_first(sh.index + 1, sh.nranks, sh.nroots);
  sh.nslots = sh.hi - sh.lo + (sh.nroots > 1 ? 1 : 0);
  if (sh.nslots > ROOT_MAX_SLOTS) {
    snprintf(why, len, "nranks=%d gives this root %d ranks to serve, more than %d", sh.nranks,
             sh.nslots, ROOT_MAX_SLOTS);
    return NULL;
  }
  sh.addrs = calloc((size_t)sh.nslots, sizeof(*sh.addrs));
  sh.have = calloc((size_t)sh.nslots, sizeof(*sh.have));
  sh.answered = calloc((size_t)sh.nslots, sizeof(*sh.answered));
  if (sh.addrs == NULL || sh.have == NULL || sh.answered == NULL) {
    shape_free(&sh);
    snprintf(why, len, "the root has no memory for nranks=%d", reg->nranks);
    return NULL;
  }
  st->shapes[st->nshapes] = sh;
  return &st->shapes[st->nshapes++];
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

static void reply_init(root_reply_t* r, uint64_t magic, int rank) {
  memset(r, 0, sizeof(*r)); /* no uninitialized padding goes out */
  r->magic = magic;
  r->rank = rank;
  r->next_rank = -1;
}

/* Refuses the registration on conns[i]: WARN here, the reason to the rank, then drop it. */
static void root_refuse(root_state_t* st, int i, ncclResult_t status, const char* why) {
  root_conn_t* c = &st->conns[i];
  char peer[80];
  socket_addr_format(&c->conn.addr, peer, sizeof(peer));
  bool known = c->reg.magic == st->magic; /* only then is its rank worth naming */
  if (known)
    WARN("Bootstrap root %s: refused rank %d from %s: %s", st->name, c->reg.rank, peer, why);
  else
    WARN("Bootstrap root %s: refused a registration from %s: %s", st->name, peer, why);
  if (c->reg.kind == ROOT_REG_MEMBER || c->waiting_rank >= 0) {
    root_reply_t reply;
    reply_init(&reply, c->reg.magic, c->reg.rank);
    reply.status = (int32_t)status;
    snprintf(reply.reason, sizeof(reply.reason), "%s", why);
    if (socket_send_all(&c->conn, &reply, sizeof(reply)) != ncclSuccess)
      INFO(NCCL_BOOTSTRAP, "Bootstrap root %s: could not tell rank %d why", st->name, c->reg.rank);
  }
  root_drop_conn(st, i);
}

/* Answers member `rank` (waiting on conns[i]) if its successor's address is known. Returns true
 * when conns[i] was consumed. */
static bool root_try_answer(root_state_t* st, int i) {
  root_conn_t* c = &st->conns[i];
  root_shape_t* sh = &st->shapes[c->shape];
  int rank = c->waiting_rank;
  int next = (rank + 1) % sh->nranks;
  int slot = root_slot(sh, next);
  if (slot < 0 || !sh->have[slot]) return false;
  root_reply_t reply;
  reply_init(&reply, st->magic, rank);
  reply.next_rank = next;
  reply.next_addr = sh->addrs[slot];
  if (sh->nanswered + 1 == sh->hi - sh->lo) {
    st->done_shape = c->shape;
    root_retire(st);
  }
  if (socket_send_all(&c->conn, &reply, sizeof(reply)) != ncclSuccess)
    INFO(NCCL_BOOTSTRAP, "Bootstrap root %s: could not answer rank %d", st->name, rank);
  sh->answered[rank - sh->lo] = true;
  sh->nanswered++;
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
  char why[ROOT_REASON_LEN];
  if (reg->magic != st->magic) {
    snprintf(why, sizeof(why),
             "wrong magic (0x%llx): a stray client, or a rank using another unique id",
             (unsigned long long)reg->magic);
    root_refuse(st, i, ncclInvalidArgument, why);
    return false;
  }
  if (reg->version != ROOT_WIRE_VERSION || reg->nranks < 1 || reg->nroots < 1 ||
      reg->nroots > reg->nranks || reg->root_index < 0 || reg->root_index >= reg->nroots ||
      reg->rank < 0 || reg->rank >= reg->nranks ||
      (reg->kind != ROOT_REG_MEMBER && reg->kind != ROOT_REG_SUCCESSOR)) {
    snprintf(why, sizeof(why),
             "malformed registration (version %u, rank %d, nranks %d, root %d of %d): another "
             "library version, or not a rank",
             reg->version, reg->rank, reg->nranks, reg->root_index, reg->nroots);
    root_refuse(st, i, ncclInvalidUsage, why);
    return false;
  }
  root_shape_t* sh = root_shape_for(st, reg, why, sizeof(why));
  if (sh == NULL) {
    root_refuse(st, i, ncclInvalidUsage, why);
    return false;
  }
  int slot = root_slot(sh, reg->rank);
  bool is_member = reg->rank >= sh->lo && reg->rank < sh->hi;
  if (slot < 0 || (reg->kind == ROOT_REG_MEMBER) != is_member) {
    snprintf(why, sizeof(why),
             "registered with the wrong root (this is root %d of %d, serving ranks %d..%d)",
             sh->index, sh->nroots, sh->lo, sh->hi - 1);
    root_refuse(st, i, ncclInvalidUsage, why);
    return false;
  }
  if (sh->have[slot]) {
    snprintf(why, sizeof(why),
             "rank %d registered twice; two processes use the same rank (nranks=%d)", reg->rank,
             reg->nranks);
    root_refuse(st, i, ncclInvalidUsage, why);
    return false;
  }
  sh->have[slot] = true;
  sh->addrs[slot] = reg->addr;
  sh->njoined++;
  char peer[80];
  TRACE(NCCL_BOOTSTRAP, "Bootstrap root %s: rank %d of %d joined from %s", st->name, reg->rank,
        reg->nranks, socket_addr_format(&c->conn.addr, peer, sizeof(peer)));
  if (reg->kind == ROOT_REG_MEMBER) {
    c->waiting_rank = reg->rank;
    c->shape = (int)(sh - st->shapes);
  } else {
    root_drop_conn(st, i);
  }
  root_answer_waiting(st);
  return true;
}

/* Once a shape is served, ranks waiting in another one will never be answered: tell them why. */
static void root_refuse_others(root_state_t* st) {
  const root_shape_t* won = &st->shapes[st->done_shape];
  for (int i = st->nconns - 1; i >= 0; i--) {
    char why[ROOT_REASON_LEN];
    const root_reg_t* reg = &st->conns[i].reg;
    snprintf(why, sizeof(why),
             "it said nranks=%d (root %d of %d) but the ranks served said nranks=%d (root %d of "
             "%d); every rank must pass the same nranks and unique id(s)",
             reg->nranks, reg->root_index, reg->nroots, won->nranks, won->index, won->nroots);
    if (st->conns[i].waiting_rank >= 0) root_refuse(st, i, ncclInvalidUsage, why);
  }
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
      root_shape_t* sh = &st->shapes[c->shape];
      sh->answered[c->waiting_rank - sh->lo] = true;
      sh->nanswered++;
      if (sh->nanswered == sh->hi - sh->lo) st->done_shape = c->shape;
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
  const root_shape_t* sh = NULL; /* the shape most ranks joined */
  for (int k = 0; k < st->nshapes; k++)
    if (sh == NULL || st->shapes[k].njoined > sh->njoined) sh = &st->shapes[k];
  if (sh == NULL || sh->njoined == 0) {
    INFO(NCCL_BOOTSTRAP, "Bootstrap root %s: no rank joined within %lld ms; root exits", st->name,
         (long long)timeout_ms);
    return;
  }
  char list[256] = "";
  size_t used = 0;
  int missing = 0;
  for (int s = 0; s < sh->nslots; s++) {
    if (sh->have[s]) continue;
    int rank = s < sh->hi - sh->lo ? sh->lo + s : sh->hi % sh->nranks;
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
  free(st->pfds);
  for (int k = 0; k < st->nshapes; k++) shape_free(&st->shapes[k]);
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
  struct pollfd* pfds = st->pfds;
  int pfd_cap = st->pfd_cap;
  bool ok = false;
  for (;;) {
    if (st->done_shape >= 0) {
      root_refuse_others(st);
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
  if (ok) {
    const root_shape_t* sh = &st->shapes[st->done_shape];
    INFO(NCCL_BOOTSTRAP,
         "Bootstrap root %s: all %d rank(s) of root %d/%d joined in %.3f s; root "
         "exits",
         st->name, sh->hi - sh->lo, sh->index, sh->nroots, (double)(clock_ns() - start) / 1e9);
  }
  st->pfds = pfds;
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
  st->done_shape = -1;
  st->pfd_cap = 65;
  st->pfds = calloc((size_t)st->pfd_cap, sizeof(*st->pfds));
  if (st->pfds == NULL) {
    WARN("Bootstrap: out of memory for the root's poll table");
    socket_close(&st->listener);
    free(st);
    return ncclSystemError;
  }
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
    found = st->magic == handle->magic && socket_addr_equal(&st->listener.addr, &handle->addr);
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
        socket_addr_equal(&env.addr, &handles[0].addr))
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
  if (reply.magic == handles[k].magic && reply.status != ncclSuccess) {
    reply.reason[sizeof(reply.reason) - 1] = '\0';
    WARN("Bootstrap: root %s refused rank %d of %d: %s",
         socket_addr_format(&handles[k].addr, text, sizeof(text)), rank, nranks, reply.reason);
    return RESULT_IS_ERROR((ncclResult_t)reply.status) ? (ncclResult_t)reply.status
                                                       : ncclInvalidUsage;
  }
  if (reply.magic != handles[k].magic || reply.rank != rank || reply.next_rank != next) {
    WARN("Bootstrap: rank %d got a malformed answer from root %s (magic 0x%llx, rank %d, next %d)",
         rank, socket_addr_format(&handles[k].addr, text, sizeof(text)),
         (unsigned long long)reply.magic, reply.rank, reply.next_rank);
    return ncclRemoteError;
  }
  *next_out = reply.next_addr;
  return ncclSuccess;
}
