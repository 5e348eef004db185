/* The RAS service: one thread per process while it has communicators (core.h, ras.h).
 *
 * The thread sleeps in poll() on: a wake pipe (registrations, stop, SIGUSR1 trace requests), the
 * side-channel listener, the RAS client listener (NCCL_RAS_ADDR), the connections it serves, and
 * its keep-alive connection. While communicators exist it also wakes once per RAS_TICK_MS for the
 * hang watch and to keep the keep-alive ring right; nothing polls in user space.
 *
 * Keep-alive ring: every process keeps one TCP connection open to its successor among the
 * processes it shares a communicator with (ordered by side-channel address), announced by HELLO.
 * A process that dies closes its connections (the kernel does that even on SIGKILL): the neighbour
 * that sees EOF without a GOODBYE tells every process it knows (DEAD), and each fails the calls
 * that wait on the dead rank (hang.c). TCP keep-alive on these connections notices a vanished host
 * without any user-space work.
 *
 * Locking: svc_lock guards the registry and the service's shared fields; the thread takes it for
 * short, non-blocking work only (network I/O happens outside it, or on worker threads). */
#include "observe/ras.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

typedef enum { SVC_REQ = 0, SVC_KEEP, SVC_CLIENT } svc_kind_t;
_Static_assert(sizeof(ras_cause_msg_t) >= sizeof(ras_ident_t) &&
                   sizeof(ras_cause_msg_t) >= sizeof(ras_query_t),
               "svc_conn_t.buf holds the largest message");
typedef struct svc_conn {
  int fd;
  svc_kind_t kind;
  uint64_t deadline_ns; /* SVC_REQ: the request must be complete by then */
  char buf[sizeof(ras_hdr_t) + sizeof(ras_cause_msg_t)]; /* the largest message */
  size_t got;
  ras_ident_t peer; /* SVC_KEEP: who keeps it open */
  bool bye;         /* SVC_KEEP: GOODBYE received */
  ras_client_t* client;
} svc_conn_t;

/* One run of the service (a new one after the last communicator went and a new one came). */
typedef struct svc {
  pthread_t thread;
  int wake[2];
  int listen_fd; /* side channel; -1 when off */
  ras_ident_t self;
  int client_fd; /* RAS clients; -1 while another process serves the address */
  uint64_t client_retry_ns;
  bool stop; /* atomic: set by ras_comm_unregister */
  /* The thread's own. */
  svc_conn_t* conns;
  int nconns, cap;
  int keep_fd; /* to the successor, -1 when none */
  socket_addr_t keep_addr;
  char keep_buf[sizeof(ras_hdr_t) + sizeof(ras_ident_t)]; /* what the successor sent */
  size_t keep_got;
  uint64_t next_tick_ns;
  uint64_t ring_gen;   /* reg_gen the keep-alive was chosen for */
  struct pollfd* pfds; /* allocated up front: a steady-state loop allocates nothing (a fork while
                        * a thread allocates leaves the child a locked allocator under ASan) */
  int pfd_cap;
} svc_t;

typedef struct gone {
  socket_addr_t addr;
  bool died; /* false: said GOODBYE */
} gone_t;

static pthread_mutex_t svc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t svc_once = PTHREAD_ONCE_INIT;
static svc_t* svc_cur; /* the running service, NULL when none */
static int svc_refs;
static ras_entry_t* reg; /* registered communicators */
static int nreg, reg_cap;
static gone_t* gones; /* processes that left */
static int ngones, gones_cap;
static uint64_t reg_gen; /* bumped when the registry or the gone list changes (the ring's input) */

/* ---- Small helpers ------------------------------------------------------------------------- */
/* A total order on addresses (the keep-alive ring). */
static int addr_cmp(const socket_addr_t* a, const socket_addr_t* b) {
  if (a->sa.sa_family != b->sa.sa_family) return a->sa.sa_family < b->sa.sa_family ? -1 : 1;
  if (a->sa.sa_family == AF_INET) {
    uint32_t x = ntohl(a->sin.sin_addr.s_addr), y = ntohl(b->sin.sin_addr.s_addr);
    if (x != y) return x < y ? -1 : 1;
    return (int)ntohs(a->sin.sin_port) - (int)ntohs(b->sin.sin_port);
  }
  int c = memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, sizeof(a->sin6.sin6_addr));
  if (c != 0) return c;
  return (int)ntohs(a->sin6.sin6_port) - (int)ntohs(b->sin6.sin6_port);
}

static void fd_close(int* fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

int ras_timeout_ms(int ms) {
  int64_t f = param_int(PARAM_RAS_TIMEOUT_FACTOR);
  if (f < 1) f = 1;
  if (f > 1000) f = 1000;
  return (int)(ms * f);
}

int ras_spawn_detached(void* (*fn)(void*), void* arg) {
  pthread_attr_t attr;
  pthread_t t;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int err = pthread_create(&t, &attr, fn, arg);
  pthread_attr_destroy(&attr);
  return err;
}

/* Makes room for one more element in *items (*cap grows by doubling from first). */
static bool grow(void** items, int n, int* cap, int first, size_t elem) {
  if (n < *cap) return true;
  int c = *cap ? 2 * *cap : first;
  void* p = realloc(*items, (size_t)c * elem);
  if (p == NULL) return false;
  *items = p;
  *cap = c;
  return true;
}

static void wake_service(svc_t* s) {
  char b = 1;
  if (s != NULL && write(s->wake[1], &b, 1) < 0 && errno != EAGAIN) {
    /* a full pipe already wakes it */
  }
}

/* ---- Identity and the registry's views ------------------------------------------------------ */
void ras_self(ras_ident_t* out) {
  pthread_mutex_lock(&svc_lock);
  if (svc_cur != NULL) {
    *out = svc_cur->self;
  } else {
    memset(out, 0, sizeof(*out));
    out->pid = (int32_t)getpid();
    out->host_hash = host_hash();
    snprintf(out->host, sizeof(out->host), "%s", ras_host_label());
  }
  pthread_mutex_unlock(&svc_lock);
}

int ras_local_states(uint64_t comm_hash, int asker, prog_state_t** out) {
  *out = NULL;
  pthread_mutex_lock(&svc_lock);
  int n = 0;
  for (int i = 0; i < nreg; i++) n += comm_hash == 0 || reg[i].comm->comm_hash == comm_hash;
  prog_state_t* st = n > 0 ? calloc((size_t)n, sizeof(*st)) : NULL;
  int k = 0;
  for (int i = 0; i < nreg && st != NULL; i++) {
    if (comm_hash != 0 && reg[i].comm->comm_hash != comm_hash) continue;
    progress_state(reg[i].comm, comm_hash != 0 ? asker : -1, &st[k++]);
  }
  pthread_mutex_unlock(&svc_lock);
  *out = st;
  return st != NULL ? k : 0;
}

static int known_add(socket_addr_t** list, int* n, int* cap, const socket_addr_t* a) {
  if (a->sa.sa_family == 0) return 0;
  for (int i = 0; i < *n; i++)
    if (socket_addr_equal(&(*list)[i], a)) return 0;
  if (!grow((void**)list, *n, cap, 16, sizeof(**list))) return -1;
  (*list)[(*n)++] = *a;
  return 0;
}

/* Under svc_lock. */
static int known_locked(uint64_t comm_hash, socket_addr_t** out) {
  socket_addr_t* list = NULL;
  int n = 0, cap = 0;
  for (int i = 0; i < nreg; i++) {
    ncclComm_t c = reg[i].comm;
    if ((comm_hash != 0 && c->comm_hash != comm_hash) || c->ras_addrs == NULL) continue;
    for (int r = 0; r < c->nranks; r++)
      if (known_add(&list, &n, &cap, &c->ras_addrs[r]) != 0) break;
  }
  *out = list;
  return n;
}

int ras_known_processes(uint64_t comm_hash, socket_addr_t** out) {
  pthread_mutex_lock(&svc_lock);
  int n = known_locked(comm_hash, out);
  pthread_mutex_unlock(&svc_lock);
  return n;
}

int ras_rank_lookup(uint64_t comm_hash, int r, socket_addr_t* addr, int* pid, char* host,
                    size_t len) {
  int rc = -1;
  pthread_mutex_lock(&svc_lock);
  for (int i = 0; i < nreg && rc != 0; i++) {
    ncclComm_t c = reg[i].comm;
    if (c->comm_hash != comm_hash || r < 0 || r >= c->nranks || c->ras_addrs == NULL) continue;
    *addr = c->ras_addrs[r];
    *pid = c->peers != NULL ? c->peers[r].pid : 0;
    snprintf(host, len, "%s", c->peer_hosts != NULL ? c->peer_hosts[r] : "?");
    rc = 0;
  }
  pthread_mutex_unlock(&svc_lock);
  return rc;
}

static gone_t* gone_find(const socket_addr_t* a) {
  for (int i = 0; i < ngones; i++)
    if (socket_addr_equal(&gones[i].addr, a)) return &gones[i];
  return NULL;
}

bool ras_process_died(const socket_addr_t* addr) {
  pthread_mutex_lock(&svc_lock);
  const gone_t* g = gone_find(addr);
  bool died = g != NULL && g->died;
  pthread_mutex_unlock(&svc_lock);
  return died;
}

/* Under svc_lock. Returns false when it was known already. */
static bool gone_add(const socket_addr_t* a, bool died) {
  gone_t* g = gone_find(a);
  if (g != NULL) {
    bool news = died && !g->died;
    g->died |= died;
    return news;
  }
  if (!grow((void**)&gones, ngones, &gones_cap, 16, sizeof(*gones))) return false;
  gones[ngones++] = (gone_t){.addr = *a, .died = died};
  reg_gen++;
  return true;
}

/* ---- Deaths --------------------------------------------------------------------------------- */
typedef struct dead_notice {
  ras_ident_t who;
  socket_addr_t* to;
  int n;
} dead_notice_t;

static void* dead_notice_main(void* arg) {
  dead_notice_t* d = arg;
  for (int i = 0; i < d->n; i++)
    (void)ras_tell(&d->to[i], RAS_MSG_DEAD, &d->who, sizeof(d->who), 1000);
  free(d->to);
  free(d);
  return NULL;
}

void ras_note_died(const ras_ident_t* who, bool tell_others) {
  char text[80];
  uint64_t now = clock_ns();
  pthread_mutex_lock(&svc_lock);
  if (!gone_add(&who->addr, true)) {
    pthread_mutex_unlock(&svc_lock);
    return;
  }
  for (int i = 0; i < nreg; i++) {
    ras_entry_t* e = &reg[i];
    ncclComm_t c = e->comm;
    if (c->ras_addrs == NULL || e->gone_rank >= 0) continue;
    for (int r = 0; r < c->nranks; r++) {
      if (r == c->rank || !socket_addr_equal(&c->ras_addrs[r], &who->addr)) continue;
      e->gone_rank = r;
      e->gone_ns = now;
      ras_cause_died(c->comm_hash, r, c->peers != NULL ? c->peers[r].pid : (int)who->pid,
                     c->peer_hosts != NULL ? c->peer_hosts[r] : who->host);
      INFO(NCCL_RAS | NCCL_INIT, "RAS: comm 0x%llx rank %d: rank %d (pid %d on %s) died",
           (unsigned long long)c->comm_hash, c->rank, r, (int)who->pid, who->host);
      break;
    }
  }
  socket_addr_t* to = NULL;
  int n = tell_others ? known_locked(0, &to) : 0;
  ras_ident_t self = svc_cur != NULL ? svc_cur->self : (ras_ident_t){0};
  pthread_mutex_unlock(&svc_lock);
  INFO(NCCL_RAS, "RAS: process %d on %s (%s) died", (int)who->pid, who->host,
       socket_addr_format(&who->addr, text, sizeof(text)));
  if (n == 0) return;
  /* Tell everyone else (not the dead one, not ourselves), from a thread of its own. */
  int k = 0;
  for (int i = 0; i < n; i++)
    if (!socket_addr_equal(&to[i], &who->addr) && !socket_addr_equal(&to[i], &self.addr))
      to[k++] = to[i];
  dead_notice_t* d = malloc(sizeof(*d));
  if (k == 0 || d == NULL) goto drop;
  *d = (dead_notice_t){.who = *who, .to = to, .n = k};
  int err = ras_spawn_detached(dead_notice_main, d);
  if (err == 0) return;
  INFO(NCCL_RAS, "RAS: cannot start a thread to announce a death: %s", strerror(err));
drop:
  free(d);
  free(to);
}

/* ---- Connections the service serves -------------------------------------------------------- */
static void conn_drop(svc_t* s, int i) {
  svc_conn_t* c = &s->conns[i];
  if (c->kind == SVC_KEEP && !c->bye && !__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE))
    ras_note_died(&c->peer, true);
  if (c->fd >= 0) close(c->fd);
  free(c->client);
  s->conns[i] = s->conns[--s->nconns];
}

static void conn_add(svc_t* s, int fd, svc_kind_t kind) {
  if (!grow((void**)&s->conns, s->nconns, &s->cap, 16, sizeof(*s->conns))) {
    close(fd);
    return;
  }
  svc_conn_t* c = &s->conns[s->nconns];
  memset(c, 0, sizeof(*c));
  c->fd = fd;
  c->kind = kind;
  c->deadline_ns = clock_ns() + (kind == SVC_CLIENT ? 60ull : 5ull) * 1000000000ull;
  if (kind == SVC_CLIENT) {
    c->client = calloc(1, sizeof(*c->client));
    if (c->client == NULL) {
      close(fd);
      return;
    }
    c->client->fd = fd;
    c->client->timeout_s = -1;
  }
  s->nconns++;
}

static void answer_query(int fd, const ras_query_t* q) {
  prog_state_t* st = NULL;
  int n = ras_local_states(q->comm_hash, q->asker, &st);
  size_t len = 8 + (size_t)n * sizeof(prog_state_t);
  char* buf = malloc(len);
  if (buf != NULL) {
    uint32_t head[2] = {(uint32_t)n, 0};
    memcpy(buf, head, 8);
    if (n > 0) memcpy(buf + 8, st, (size_t)n * sizeof(prog_state_t));
    (void)ras_send_msg(fd, RAS_MSG_STATE, buf, (uint32_t)len, 2000);
  }
  free(buf);
  free(st);
}

/* A complete message on a side-channel connection. Returns false when the connection is done. */
static bool conn_message(svc_conn_t* c) {
  const ras_hdr_t* h = (const ras_hdr_t*)c->buf;
  const void* payload = c->buf + sizeof(ras_hdr_t);
  switch (h->type) {
    case RAS_MSG_HELLO:
      memcpy(&c->peer, payload, sizeof(c->peer));
      c->kind = SVC_KEEP;
      c->got = 0;
      return true;
    case RAS_MSG_UNLINK:
      c->bye = true;
      return false;
    case RAS_MSG_GOODBYE:
      c->bye = true;
      pthread_mutex_lock(&svc_lock);
      gone_add(&((const ras_ident_t*)payload)->addr, false);
      pthread_mutex_unlock(&svc_lock);
      return false;
    case RAS_MSG_QUERY: {
      ras_query_t q;
      memcpy(&q, payload, sizeof(q));
      answer_query(c->fd, &q);
      return false;
    }
    case RAS_MSG_DEAD: {
      ras_ident_t who;
      memcpy(&who, payload, sizeof(who));
      ras_note_died(&who, false);
      return false;
    }
    case RAS_MSG_CAUSE: {
      ras_cause_msg_t m;
      memcpy(&m, payload, sizeof(m));
      ras_cause_received(&m);
      return false;
    }
    default:
      return false;
  }
}

static size_t msg_payload_len(int type) {
  switch (type) {
    case RAS_MSG_HELLO:
    case RAS_MSG_GOODBYE:
    case RAS_MSG_DEAD:
    case RAS_MSG_UNLINK:
      return sizeof(ras_ident_t);
    case RAS_MSG_QUERY:
      return sizeof(ras_query_t);
    case RAS_MSG_CAUSE:
      return sizeof(ras_cause_msg_t);
    default:
      return SIZE_MAX;
  }
}

/* Reads what arrived on a side-channel connection. Returns false when it is to be dropped. */
static bool conn_readable(svc_conn_t* c) {
  for (;;) {
    size_t want = sizeof(ras_hdr_t);
    if (c->got >= sizeof(ras_hdr_t)) {
      const ras_hdr_t* h = (const ras_hdr_t*)c->buf;
      size_t plen = msg_payload_len(h->type);
      if (h->magic != RAS_MAGIC || h->version != RAS_WIRE_VERSION || plen != h->len) {
        c->bye = true; /* not ours, or a different version: not a death either */
        return false;
      }
      want += plen;
    }
    if (c->got == want) {
      if (!conn_message(c)) return false;
      continue;
    }
    ssize_t n = recv(c->fd, c->buf + c->got, want - c->got, MSG_DONTWAIT);
    if (n > 0) {
      c->got += (size_t)n;
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    return false; /* EOF or error */
  }
}

/* ---- The keep-alive ring -------------------------------------------------------------------- */
static void keepalive_opts(int fd) {
  int one = 1, idle = 5, intvl = 2, cnt = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* The successor of self among the live known processes, if any. Under svc_lock. */
static bool ring_successor(const svc_t* s, socket_addr_t* out) {
  socket_addr_t* known = NULL;
  int n = known_locked(0, &known);
  const socket_addr_t* best = NULL;
  const socket_addr_t* lowest = NULL;
  for (int i = 0; i < n; i++) {
    const socket_addr_t* a = &known[i];
    if (socket_addr_equal(a, &s->self.addr) || gone_find(a) != NULL) continue;
    if (lowest == NULL || addr_cmp(a, lowest) < 0) lowest = a;
    if (addr_cmp(a, &s->self.addr) > 0 && (best == NULL || addr_cmp(a, best) < 0)) best = a;
  }
  if (best == NULL) best = lowest;
  bool found = best != NULL;
  if (found) *out = *best;
  free(known);
  return found;
}

static void ring_update(svc_t* s) {
  socket_addr_t next;
  pthread_mutex_lock(&svc_lock);
  if (s->keep_fd >= 0 && s->ring_gen == reg_gen) { /* nothing changed: nothing to allocate */
    pthread_mutex_unlock(&svc_lock);
    return;
  }
  s->ring_gen = reg_gen;
  bool have = s->listen_fd >= 0 && ring_successor(s, &next);
  pthread_mutex_unlock(&svc_lock);
  if (s->keep_fd >= 0 && have && socket_addr_equal(&next, &s->keep_addr)) return;
  if (s->keep_fd >= 0) {
    (void)ras_send_msg(s->keep_fd, RAS_MSG_UNLINK, &s->self, sizeof(s->self), 100);
    fd_close(&s->keep_fd);
  }
  if (!have) return;
  bool refused = false;
  int fd = ras_connect(&next, 1000, &refused);
  if (fd < 0) {
    /* Nobody listens there any more. Not a death: a process that stopped cleanly said GOODBYE
     * to its own ring neighbours, not to us (an 8-rank job whose ranks left one by one had its
     * last call failed with "rank died"); one that crashed was seen by its predecessor, whose
     * DEAD notice reaches everyone. So it is gone quietly, and the ring closes over it. */
    if (refused) {
      pthread_mutex_lock(&svc_lock);
      gone_add(&next, false);
      pthread_mutex_unlock(&svc_lock);
    }
    return;
  }
  keepalive_opts(fd);
  if (ras_send_msg(fd, RAS_MSG_HELLO, &s->self, sizeof(s->self), 1000) != 0) {
    close(fd);
    return;
  }
  s->keep_fd = fd;
  s->keep_addr = next;
  s->keep_got = 0;
}

/* The successor's end of the keep-alive: it only ever sends GOODBYE (its service stops) before
 * closing; an EOF without it means it died. */
static void keep_readable(svc_t* s) {
  for (;;) {
    ssize_t n = recv(s->keep_fd, s->keep_buf + s->keep_got, sizeof(s->keep_buf) - s->keep_got,
                     MSG_DONTWAIT);
    if (n > 0) {
      s->keep_got += (size_t)n;
      if (s->keep_got < sizeof(s->keep_buf)) continue;
      const ras_hdr_t* h = (const ras_hdr_t*)s->keep_buf;
      bool bye = h->magic == RAS_MAGIC && h->type == RAS_MSG_GOODBYE;
      if (bye) {
        pthread_mutex_lock(&svc_lock);
        gone_add(&s->keep_addr, false);
        pthread_mutex_unlock(&svc_lock);
      }
      s->keep_got = 0;
      fd_close(&s->keep_fd);
      return;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    break;
  }
  socket_addr_t a = s->keep_addr;
  s->keep_got = 0;
  fd_close(&s->keep_fd);
  ras_ident_t who = {.addr = a, .pid = -1};
  snprintf(who.host, sizeof(who.host), "?");
  ras_note_died(&who, true);
}

/* ---- The thread ---------------------------------------------------------------------------------
 */
static void svc_accept(svc_t* s, int lfd, svc_kind_t kind) {
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    conn_add(s, fd, kind);
  }
}

static void svc_tick(svc_t* s, uint64_t now) {
  ring_update(s);
  if (s->client_fd < 0 && s->listen_fd >= 0 && now >= s->client_retry_ns) {
    s->client_fd = ras_client_listen(); /* whoever held the address may have gone */
    s->client_retry_ns = now + 10ull * 1000000000ull;
  }
  pthread_mutex_lock(&svc_lock);
  for (int i = 0; i < nreg; i++) hang_tick(&reg[i], now);
  pthread_mutex_unlock(&svc_lock);
}

static void* svc_main(void* arg) {
  svc_t* s = arg;
  struct pollfd* pfds = s->pfds;
  int pcap = s->pfd_cap;
  while (!__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) {
    int need = s->nconns + 4;
    if (need > pcap) {
      struct pollfd* p = realloc(pfds, (size_t)need * sizeof(*p));
      if (p == NULL) break;
      pfds = p;
      pcap = need;
    }
    int n = 0;
    pfds[n++] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
    pfds[n++] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
    pfds[n++] = (struct pollfd){.fd = s->client_fd, .events = POLLIN};
    pfds[n++] = (struct pollfd){.fd = s->keep_fd, .events = POLLIN};
    for (int i = 0; i < s->nconns; i++)
      pfds[n++] = (struct pollfd){.fd = s->conns[i].fd, .events = POLLIN};
    pthread_mutex_lock(&svc_lock);
    bool busy = nreg > 0;
    pthread_mutex_unlock(&svc_lock);
    uint64_t now = clock_ns();
    int timeout = -1;
    if (busy) {
      if (s->next_tick_ns == 0) s->next_tick_ns = now;
      timeout = s->next_tick_ns > now ? (int)((s->next_tick_ns - now) / 1000000ull) + 1 : 0;
    }
    for (int i = 0; i < s->nconns; i++) {
      if (s->conns[i].kind == SVC_KEEP) continue;
      uint64_t d = s->conns[i].deadline_ns;
      int ms = d > now ? (int)((d - now) / 1000000ull) + 1 : 0;
      if (timeout < 0 || ms < timeout) timeout = ms;
    }
    int rc = poll(pfds, (nfds_t)n, timeout);
    if (rc < 0 && errno != EINTR) break;
    now = clock_ns();
    if (pfds[0].revents) {
      char buf[64];
      while (read(s->wake[0], buf, sizeof(buf)) > 0) {
      }
      if (trace_take_request()) { /* SIGUSR1: the GPUs' latest kernel times, then the file */
        pthread_mutex_lock(&svc_lock);
        for (int i = 0; i < nreg; i++) progress_trace_gpu(reg[i].comm);
        pthread_mutex_unlock(&svc_lock);
        trace_write();
      }
    }
    if (__atomic_load_n(&s->stop, __ATOMIC_ACQUIRE)) break;
    /* Connections first: indices match pfds[4..] until one is dropped; walk backwards. */
    for (int i = n - 5; i >= 0; i--) {
      if (i >= s->nconns || s->conns[i].fd != pfds[i + 4].fd) continue;
      svc_conn_t* c = &s->conns[i];
      bool keep = true;
      if (pfds[i + 4].revents != 0) {
        keep = c->kind == SVC_CLIENT ? ras_client_readable(c->client) : conn_readable(c);
        if (c->kind == SVC_CLIENT && !keep) c->fd = -1; /* the client code closed or took it */
      } else if (c->kind != SVC_KEEP && now >= c->deadline_ns) {
        keep = false;
      }
      if (!keep) conn_drop(s, i);
    }
    if (pfds[1].revents) svc_accept(s, s->listen_fd, SVC_REQ);
    if (pfds[2].revents) svc_accept(s, s->client_fd, SVC_CLIENT);
    if (pfds[3].revents && s->keep_fd >= 0) keep_readable(s);
    if (busy && now >= s->next_tick_ns) {
      s->next_tick_ns = now + RAS_TICK_MS * 1000000ull;
      svc_tick(s, now);
    }
  }
  s->pfds = pfds;
  s->pfd_cap = pcap;
  /* Leaving: say goodbye to the neighbours so they do not take it for a death. */
  if (s->keep_fd >= 0)
    (void)ras_send_msg(s->keep_fd, RAS_MSG_GOODBYE, &s->self, sizeof(s->self), 200);
  for (int i = 0; i < s->nconns; i++) {
    if (s->conns[i].kind == SVC_KEEP)
      (void)ras_send_msg(s->conns[i].fd, RAS_MSG_GOODBYE, &s->self, sizeof(s->self), 200);
  }
  return NULL;
}

/* ---- Starting and stopping ------------------------------------------------------------------- */
static void svc_free(svc_t* s) {
  for (int i = 0; i < s->nconns; i++) {
    if (s->conns[i].fd >= 0) close(s->conns[i].fd);
    free(s->conns[i].client);
  }
  free(s->conns);
  free(s->pfds);
  fd_close(&s->keep_fd);
  fd_close(&s->listen_fd);
  fd_close(&s->client_fd);
  fd_close(&s->wake[0]);
  fd_close(&s->wake[1]);
  free(s);
}

/* A forked child has no service thread: forget the parent's (its descriptors close with it). */
static void svc_atfork_prepare(void) {
  pthread_mutex_lock(&svc_lock);
}
static void svc_atfork_parent(void) {
  pthread_mutex_unlock(&svc_lock);
}
static void svc_atfork_child(void) {
  svc_t* s = svc_cur;
  if (s != NULL) {
    fd_close(&s->listen_fd);
    fd_close(&s->client_fd);
    fd_close(&s->keep_fd);
    fd_close(&s->wake[0]);
    fd_close(&s->wake[1]);
    for (int i = 0; i < s->nconns; i++) fd_close(&s->conns[i].fd);
  }
  svc_cur = NULL; /* the parent's memory: leaked in the child on purpose */
  svc_refs = 0;
  nreg = 0;
  ngones = 0;
  pthread_mutex_unlock(&svc_lock);
}
static void svc_once_init(void) {
  pthread_atfork(svc_atfork_prepare, svc_atfork_parent, svc_atfork_child);
}

/* The side-channel listener on the bootstrap's interface (any port). */
static int svc_listen(ncclComm_t comm, socket_addr_t* out) {
  const socket_addr_t* boot =
      comm->bootstrap ? bootstrap_peer_addr(comm->bootstrap, comm->rank) : NULL;
  if (boot == NULL) return -1;
  socket_addr_t a = *boot;
  if (a.sa.sa_family == AF_INET)
    a.sin.sin_port = 0;
  else
    a.sin6.sin6_port = 0;
  int fd = socket(a.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  socklen_t len = ras_addr_len(&a);
  if (bind(fd, &a.sa, len) != 0 || listen(fd, 128) != 0 || getsockname(fd, &a.sa, &len) != 0) {
    close(fd);
    return -1;
  }
  *out = a;
  return fd;
}

static svc_t* svc_start(ncclComm_t comm) {
  char text[80];
  svc_t* s = calloc(1, sizeof(*s));
  if (s == NULL) return NULL;
  s->listen_fd = s->client_fd = s->keep_fd = -1;
  s->wake[0] = s->wake[1] = -1;
  s->self.pid = (int32_t)getpid();
  s->self.host_hash = host_hash();
  snprintf(s->self.host, sizeof(s->self.host), "%s", ras_host_label());
  if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) != 0) goto fail;
  s->pfd_cap = 64;
  s->pfds = calloc((size_t)s->pfd_cap, sizeof(*s->pfds));
  if (s->pfds == NULL) goto fail;
  if (param_int(PARAM_RAS_ENABLE) != 0) {
    s->listen_fd = svc_listen(comm, &s->self.addr);
    if (s->listen_fd < 0)
      INFO(NCCL_RAS | NCCL_INIT,
           "RAS: no side-channel listener (%s); hang reports see this rank only", strerror(errno));
    else
      s->client_fd = ras_client_listen();
    s->client_retry_ns = clock_ns() + 10ull * 1000000000ull;
  }
  trace_signal_fd(s->wake[1]);
  int err = pthread_create(&s->thread, NULL, svc_main, s);
  if (err != 0) {
    INFO(NCCL_RAS | NCCL_INIT, "RAS: cannot start the service thread: %s", strerror(err));
    trace_signal_fd(-1);
    goto fail;
  }
  /* Named here, not by the thread itself, so it carries its name once init returns. */
  thread_set_name(s->thread, "NCCL RAS");
  INFO(NCCL_RAS | NCCL_INIT, "RAS: service started, side channel at %s",
       s->listen_fd >= 0 ? socket_addr_format(&s->self.addr, text, sizeof(text)) : "(off)");
  return s;
fail:
  svc_free(s);
  return NULL;
}

static bool svc_wanted(void) {
  return param_int(PARAM_RAS_ENABLE) != 0 || param_int(PARAM_HANG_REPORT_SEC) > 0 || trace_on();
}

void ras_comm_prepare(ncclComm_t comm, socket_addr_t* out) {
  memset(out, 0, sizeof(*out));
  pthread_once(&svc_once, svc_once_init);
  trace_setup();
  if (!svc_wanted()) return;
  pthread_mutex_lock(&svc_lock);
  if (svc_cur == NULL) svc_cur = svc_start(comm);
  if (svc_cur != NULL) {
    svc_refs++;
    comm->ras_ref = true;
    *out = svc_cur->self.addr;
  }
  pthread_mutex_unlock(&svc_lock);
}

void ras_comm_register(ncclComm_t comm) {
  if (!comm->ras_ref) return;
  pthread_mutex_lock(&svc_lock);
  if (!grow((void**)&reg, nreg, &reg_cap, 8, sizeof(*reg))) goto out;
  reg[nreg++] = (ras_entry_t){.comm = comm, .gone_rank = -1};
  reg_gen++;
  comm->ras_listed = true;
  wake_service(svc_cur); /* the keep-alive ring may change */
out:
  pthread_mutex_unlock(&svc_lock);
}

void ras_comm_unregister(ncclComm_t comm) {
  svc_t* stopping = NULL;
  pthread_mutex_lock(&svc_lock);
  if (comm->ras_listed) {
    for (int i = 0; i < nreg; i++) {
      if (reg[i].comm != comm) continue;
      reg[i] = reg[--nreg];
      reg_gen++;
      break;
    }
    comm->ras_listed = false;
  }
  if (comm->ras_ref) {
    comm->ras_ref = false;
    if (--svc_refs == 0 && svc_cur != NULL) {
      stopping = svc_cur;
      svc_cur = NULL;
      __atomic_store_n(&stopping->stop, true, __ATOMIC_RELEASE);
      trace_signal_fd(-1);
      ngones = 0;
    }
  }
  pthread_mutex_unlock(&svc_lock);
  if (stopping == NULL) return;
  wake_service(stopping);
  pthread_join(stopping->thread, NULL);
  svc_free(stopping);
}
