/* RAS clients (baton-ras, or stock's ncclras): the line protocol stock's client speaks, learned
 * from its public sources (newline-terminated commands, case-insensitive):
 *   CLIENT PROTOCOL <n>        -> "SERVER PROTOCOL 2"
 *   TIMEOUT <seconds>          -> "OK" (how long to wait for other processes; 0: the default)
 *   SET FORMAT text|json       -> "OK"
 *   STATUS | VERBOSE STATUS    -> the job's status, then the connection closes
 *   anything else              -> "ERROR: ..."
 * STATUS is answered by a worker thread: it asks every process this one knows (ras_ask_all) and
 * prints, per communicator, its ranks per host, each rank's operation counts, and the ranks that
 * are missing, dead or behind. The wording and layout are Baton's own. */
#include <netdb.h>
#include <stdarg.h>
#include <stdlib.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "observe/ras.h"

#define RAS_CLIENT_PROTOCOL 2

/* ---- Output buffer ------------------------------------------------------------------------------
 */
typedef struct obuf {
  char* p;
  size_t len, cap;
  bool failed;
} obuf_t;

static void ob_printf(obuf_t* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void ob_printf(obuf_t* b, const char* fmt, ...) {
  for (int tries = 0; tries < 2 && !b->failed; tries++) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if (b->p != NULL && b->len + (size_t)n < b->cap) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap <= b->len + (size_t)n) cap *= 2;
    char* p = realloc(b->p, cap);
    if (p == NULL) {
      b->failed = true;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

/* ---- The job's status ---------------------------------------------------------------------------
 */
typedef struct rank_seen {
  const prog_state_t* st; /* NULL: no process reported it */
} rank_seen_t;

typedef struct comm_view {
  uint64_t hash;
  int nranks;
  rank_seen_t* ranks;
} comm_view_t;

typedef struct job_view {
  ras_answer_t* ans; /* one per known process */
  int nproc;
  comm_view_t* comms;
  int ncomms;
} job_view_t;

static comm_view_t* view_comm(job_view_t* v, uint64_t hash, int nranks) {
  for (int i = 0; i < v->ncomms; i++)
    if (v->comms[i].hash == hash) return &v->comms[i];
  comm_view_t* p = realloc(v->comms, (size_t)(v->ncomms + 1) * sizeof(*p));
  if (p == NULL) return NULL;
  v->comms = p;
  comm_view_t* c = &v->comms[v->ncomms];
  c->ranks = nranks > 0 ? calloc((size_t)nranks, sizeof(*c->ranks)) : NULL;
  if (c->ranks == NULL) return NULL;
  c->hash = hash;
  c->nranks = nranks;
  v->ncomms++;
  return c;
}

static const char* proc_status_text(int status) {
  return status == RAS_ANSWERED ? "answering" : status == RAS_SILENT ? "not answering" : "dead";
}

/* Where rank r of communicator hash lives according to this process's own communicators: the
 * process's index in v->ans, or -1. */
static int rank_process(const job_view_t* v, uint64_t hash, int r, int* pid, char* host,
                        size_t len) {
  socket_addr_t a;
  if (ras_rank_lookup(hash, r, &a, pid, host, len) != 0) return -1;
  for (int i = 0; i < v->nproc; i++)
    if (socket_addr_equal(&v->ans[i].addr, &a)) return i;
  return -1;
}

static bool proc_dead(const ras_answer_t* a) {
  return a->status == RAS_GONE || (a->status != RAS_ANSWERED && ras_process_died(&a->addr));
}

static void status_text(obuf_t* b, job_view_t* v, bool verbose) {
  ras_ident_t self;
  ras_self(&self);
  int answered = 0, silent = 0, dead = 0;
  for (int i = 0; i < v->nproc; i++) {
    bool ok = v->ans[i].status == RAS_ANSWERED;
    answered += ok;
    dead += !ok && proc_dead(&v->ans[i]);
    silent += !ok && !proc_dead(&v->ans[i]);
  }
  ob_printf(b, "Baton RAS status (NCCL %d.%d.%d+baton-%s), asked from pid %d on %s\n", NCCL_MAJOR,
            NCCL_MINOR, NCCL_PATCH, BATON_VERSION_STRING, (int)self.pid, self.host);
  ob_printf(b, "Processes: %d known, %d answering, %d not answering, %d dead\n", v->nproc, answered,
            silent, dead);
  for (int i = 0; i < v->nproc; i++) {
    if (v->ans[i].status == RAS_ANSWERED) continue;
    char a[80];
    ob_printf(b, "  process at %s: %s\n", socket_addr_format(&v->ans[i].addr, a, sizeof(a)),
              proc_dead(&v->ans[i]) ? "dead" : "not answering (stopped, or hung)");
  }
  for (int ci = 0; ci < v->ncomms; ci++) {
    comm_view_t* c = &v->comms[ci];
    int found = 0;
    uint64_t max_coll = 0, min_coll = UINT64_MAX;
    for (int r = 0; r < c->nranks; r++) {
      if (c->ranks[r].st == NULL) continue;
      found++;
      uint64_t k = c->ranks[r].st->coll;
      if (k > max_coll) max_coll = k;
      if (k < min_coll) min_coll = k;
    }
    ob_printf(b, "\nCommunicator 0x%016llx: %d ranks, %d found, %d missing\n",
              (unsigned long long)c->hash, c->nranks, found, c->nranks - found);
    /* Ranks per host. */
    const char* hosts[64];
    int nh = 0;
    for (int r = 0; r < c->nranks; r++) {
      if (c->ranks[r].st == NULL) continue;
      const char* h = c->ranks[r].st->host;
      bool seen = false;
      for (int k = 0; k < nh && !seen; k++) seen = strcmp(hosts[k], h) == 0;
      if (!seen && nh < 64) hosts[nh++] = h;
    }
    for (int k = 0; k < nh; k++) {
      int cnt = 0;
      for (int r = 0; r < c->nranks; r++)
        cnt += c->ranks[r].st && !strcmp(c->ranks[r].st->host, hosts[k]);
      ob_printf(b, "  host %s: %d rank%s:", hosts[k], cnt, cnt == 1 ? "" : "s");
      for (int r = 0; r < c->nranks; r++)
        if (c->ranks[r].st && !strcmp(c->ranks[r].st->host, hosts[k])) ob_printf(b, " %d", r);
      ob_printf(b, "\n");
    }
    /* Operation counts: the same on every rank is one number, else a range. */
    ob_printf(b, "  operations:");
    size_t before = b->len;
    for (int kind = 0; kind < OP_KIND_COUNT; kind++) {
      uint64_t lo = UINT64_MAX, hi = 0;
      for (int r = 0; r < c->nranks; r++) {
        if (c->ranks[r].st == NULL) continue;
        uint64_t x = c->ranks[r].st->kinds[kind];
        if (x < lo) lo = x;
        if (x > hi) hi = x;
      }
      if (hi == 0) continue;
      if (lo == hi)
        ob_printf(b, " %s %llu", op_kind_name(kind), (unsigned long long)hi);
      else
        ob_printf(b, " %s %llu-%llu", op_kind_name(kind), (unsigned long long)lo,
                  (unsigned long long)hi);
    }
    ob_printf(b, "%s\n", b->len == before ? " none yet" : "");
    if (found > 0)
      ob_printf(b, "  collectives: %llu called by the most advanced rank%s\n",
                (unsigned long long)max_coll, min_coll == max_coll ? ", by every rank found" : "");
    for (int r = 0; r < c->nranks; r++) {
      const prog_state_t* st = c->ranks[r].st;
      if (st == NULL) {
        int pid = 0;
        char host[RAS_HOST_LEN] = "?";
        int p = rank_process(v, c->hash, r, &pid, host, sizeof(host));
        ob_printf(b, "  MISSING rank %d", r);
        if (p >= 0)
          ob_printf(b, " (pid %d on %s): its process is %s", pid, host,
                    proc_dead(&v->ans[p]) ? "dead" : proc_status_text(v->ans[p].status));
        ob_printf(b, "\n");
        continue;
      }
      if (st->coll < max_coll)
        ob_printf(b, "  BEHIND rank %d (pid %d on %s): %llu collectives called, %llu by others\n",
                  r, st->pid, st->host, (unsigned long long)st->coll, (unsigned long long)max_coll);
      if (st->inflight.seq != 0) {
        char op[192];
        hang_describe_op(&st->inflight, op, sizeof(op));
        ob_printf(b, "  rank %d: %s in flight for %.1f s\n", r, op, st->inflight_age_ns / 1e9);
      }
      if (st->async_error != ncclSuccess && st->async_error != ncclInProgress)
        ob_printf(b, "  rank %d: ERROR %s\n", r, ncclGetErrorString((ncclResult_t)st->async_error));
    }
    if (!verbose) continue;
    for (int r = 0; r < c->nranks; r++) {
      const prog_state_t* st = c->ranks[r].st;
      if (st == NULL) continue;
      ob_printf(b, "    rank %d pid %d host %s dev %d: calls %llu, collectives %llu, done %llu", r,
                st->pid, st->host, st->cuda_dev, (unsigned long long)st->seq,
                (unsigned long long)st->coll, (unsigned long long)st->done);
      if (st->nwaits > 0) {
        char w[512];
        hang_describe_waits(st, w, sizeof(w));
        ob_printf(b, "; waits: %s", w);
      }
      ob_printf(b, "\n");
    }
  }
}

static void json_op(obuf_t* b, const prog_op_t* op) {
  ob_printf(b,
            "{\"call\":%llu,\"kind\":\"%s\",\"collective\":%llu,\"count\":%llu,\"datatype\":\"%s\","
            "\"root\":%d}",
            (unsigned long long)op->seq, op_kind_name(op->kind), (unsigned long long)op->coll,
            (unsigned long long)op->count, datatype_name((ncclDataType_t)op->dtype), op->root);
}

static void status_json(obuf_t* b, job_view_t* v) {
  ras_ident_t self;
  ras_self(&self);
  ob_printf(b, "{\"version\":\"%d.%d.%d+baton-%s\",\"pid\":%d,\"host\":\"%s\",\"processes\":[",
            NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, BATON_VERSION_STRING, (int)self.pid, self.host);
  for (int i = 0; i < v->nproc; i++) {
    char a[80];
    ob_printf(b, "%s{\"address\":\"%s\",\"status\":\"%s\"}", i ? "," : "",
              socket_addr_format(&v->ans[i].addr, a, sizeof(a)),
              v->ans[i].status == RAS_ANSWERED ? "answering"
              : proc_dead(&v->ans[i])          ? "dead"
                                               : "not answering");
  }
  ob_printf(b, "],\"communicators\":[");
  for (int ci = 0; ci < v->ncomms; ci++) {
    comm_view_t* c = &v->comms[ci];
    uint64_t max_coll = 0;
    int found = 0;
    for (int r = 0; r < c->nranks; r++) {
      if (c->ranks[r].st == NULL) continue;
      found++;
      if (c->ranks[r].st->coll > max_coll) max_coll = c->ranks[r].st->coll;
    }
    ob_printf(b, "%s{\"hash\":\"0x%016llx\",\"nranks\":%d,\"found\":%d,\"missing\":[",
              ci ? "," : "", (unsigned long long)c->hash, c->nranks, found);
    int k = 0;
    for (int r = 0; r < c->nranks; r++)
      if (c->ranks[r].st == NULL) ob_printf(b, "%s%d", k++ ? "," : "", r);
    ob_printf(b, "],\"behind\":[");
    k = 0;
    for (int r = 0; r < c->nranks; r++)
      if (c->ranks[r].st != NULL && c->ranks[r].st->coll < max_coll)
        ob_printf(b, "%s%d", k++ ? "," : "", r);
    ob_printf(b, "],\"ranks\":[");
    k = 0;
    for (int r = 0; r < c->nranks; r++) {
      const prog_state_t* st = c->ranks[r].st;
      if (st == NULL) continue;
      ob_printf(b,
                "%s{\"rank\":%d,\"host\":\"%s\",\"pid\":%d,\"cuda_dev\":%d,\"calls\":%llu,"
                "\"collectives\":%llu,\"started\":%llu,\"done\":%llu,\"counts\":{",
                k++ ? "," : "", r, st->host, st->pid, st->cuda_dev, (unsigned long long)st->seq,
                (unsigned long long)st->coll, (unsigned long long)st->started,
                (unsigned long long)st->done);
      for (int kind = 0; kind < OP_KIND_COUNT; kind++)
        ob_printf(b, "%s\"%s\":%llu", kind ? "," : "", op_kind_name(kind),
                  (unsigned long long)st->kinds[kind]);
      ob_printf(b, "},\"error\":\"%s\",\"inflight\":",
                st->async_error == ncclSuccess || st->async_error == ncclInProgress
                    ? ""
                    : ncclGetErrorString((ncclResult_t)st->async_error));
      if (st->inflight.seq != 0) {
        json_op(b, &st->inflight);
        ob_printf(b, ",\"inflight_s\":%.3f", st->inflight_age_ns / 1e9);
      } else {
        ob_printf(b, "null");
      }
      ob_printf(b, "}");
    }
    ob_printf(b, "]}");
  }
  ob_printf(b, "]}\n");
}

typedef struct status_job {
  int fd;
  bool json, verbose;
  int timeout_s;
} status_job_t;

static void* status_main(void* arg) {
  status_job_t* j = arg;
  job_view_t v = {0};
  socket_addr_t* procs = NULL;
  v.nproc = ras_known_processes(0, &procs);
  v.ans = calloc((size_t)(v.nproc > 0 ? v.nproc : 1), sizeof(*v.ans));
  obuf_t b = {0};
  if (v.ans == NULL) goto out;
  int timeout_ms = j->timeout_s > 0 ? j->timeout_s * 1000 : ras_timeout_ms(RAS_ASK_TIMEOUT_MS);
  ras_ask_all(procs, v.nproc, 0, -1, timeout_ms, v.ans);
  for (int i = 0; i < v.nproc; i++) {
    for (int q = 0; q < v.ans[i].nstates; q++) {
      const prog_state_t* st = &v.ans[i].states[q];
      comm_view_t* c = view_comm(&v, st->comm_hash, st->nranks);
      if (c != NULL && st->rank >= 0 && st->rank < c->nranks) c->ranks[st->rank].st = st;
    }
  }
  if (j->json)
    status_json(&b, &v);
  else
    status_text(&b, &v, j->verbose);
  if (!b.failed && b.p != NULL) {
    struct timeval tv = {.tv_sec = 5};
    setsockopt(j->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    size_t done = 0;
    while (done < b.len) {
      ssize_t n = send(j->fd, b.p + done, b.len - done, MSG_NOSIGNAL);
      if (n <= 0 && errno != EINTR && errno != EAGAIN) break;
      if (n > 0) done += (size_t)n;
    }
  }
out:
  for (int i = 0; i < v.ncomms; i++) free(v.comms[i].ranks);
  free(v.comms);
  if (v.ans != NULL) ras_answers_free(v.ans, v.nproc);
  free(v.ans);
  free(procs);
  free(b.p);
  close(j->fd);
  free(j);
  return NULL;
}

/* ---- RAS clients' listener --------------------------------------------------------------------
 */
int ras_client_listen(void) {
  const char* spec = param_str(PARAM_RAS_ADDR);
  char host[256];
  const char* port = "28028";
  snprintf(host, sizeof(host), "%s", spec != NULL && spec[0] ? spec : "localhost:28028");
  char* colon = strrchr(host, ':');
  if (colon != NULL) {
    *colon = '\0';
    port = colon + 1;
  }
  char* h = host;
  if (h[0] == '[') { /* [v6]:port */
    h++;
    char* end = strchr(h, ']');
    if (end) *end = '\0';
  }
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
  struct addrinfo* ai = NULL;
  if (getaddrinfo(h[0] ? h : NULL, port, &hints, &ai) != 0 || ai == NULL) {
    INFO(NCCL_RAS, "RAS: cannot resolve NCCL_RAS_ADDR=%s; no RAS client service", spec ? spec : "");
    return -1;
  }
  int fd = -1;
  for (struct addrinfo* p = ai; p != NULL && fd < 0; p = p->ai_next) {
    fd = socket(p->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, p->ai_addr, p->ai_addrlen) != 0 || listen(fd, 16) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(ai);
  if (fd >= 0) INFO(NCCL_RAS, "RAS: serving RAS clients at %s", spec ? spec : "localhost:28028");
  return fd;
}

/* ---- The line protocol ------------------------------------------------------------------------
 */
static void reply(ras_client_t* c, const char* text) {
  (void)send(c->fd, text, strlen(text), MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Returns false when the connection is over. */
static bool client_line(ras_client_t* c, char* line) {
  char out[320];
  size_t n = strlen(line);
  while (n > 0 && (line[n - 1] == '\r' || line[n - 1] == ' ')) line[--n] = '\0';
  if (strncasecmp(line, "client protocol ", 16) == 0) {
    snprintf(out, sizeof(out), "SERVER PROTOCOL %d\n", RAS_CLIENT_PROTOCOL);
    reply(c, out);
    return true;
  }
  if (strncasecmp(line, "timeout ", 8) == 0) {
    char* end = NULL;
    long t = strtol(line + 8, &end, 10);
    if (end == line + 8 || *end != '\0' || t < 0) {
      snprintf(out, sizeof(out), "ERROR: Invalid timeout value %.200s\n", line + 8);
    } else {
      c->timeout_s = (int)(t > 3600 ? 3600 : t);
      snprintf(out, sizeof(out), "OK\n");
    }
    reply(c, out);
    return true;
  }
  if (strncasecmp(line, "set format ", 11) == 0) {
    const char* f = line + 11;
    if (strcasecmp(f, "text") == 0 || strcasecmp(f, "json") == 0) {
      c->json = strcasecmp(f, "json") == 0;
      reply(c, "OK\n");
    } else {
      snprintf(out, sizeof(out), "ERROR: Invalid format %.200s\n", f);
      reply(c, out);
    }
    return true;
  }
  if (strcasecmp(line, "status") == 0 || strcasecmp(line, "verbose status") == 0) {
    status_job_t* j = malloc(sizeof(*j));
    if (j == NULL) return false;
    *j = (status_job_t){.fd = c->fd,
                        .json = c->json,
                        .verbose = strcasecmp(line, "verbose status") == 0,
                        .timeout_s = c->timeout_s};
    int err = ras_spawn_detached(status_main, j);
    if (err != 0) {
      free(j);
      reply(c, "ERROR: cannot start a thread to gather the status\n");
      close(c->fd);
    }
    c->fd = -1; /* the worker owns it now */
    return false;
  }
  snprintf(out, sizeof(out), "ERROR: Unknown command %.200s\n", line);
  reply(c, out);
  return true;
}

bool ras_client_readable(ras_client_t* c) {
  for (;;) {
    ssize_t n = recv(c->fd, c->line + c->got, sizeof(c->line) - 1 - c->got, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return true;
    if (n <= 0) {
      close(c->fd);
      c->fd = -1;
      return false;
    }
    c->got += (size_t)n;
    c->line[c->got] = '\0';
    char* nl;
    while ((nl = strchr(c->line, '\n')) != NULL) {
      *nl = '\0';
      bool more = client_line(c, c->line);
      size_t rest = c->got - (size_t)(nl + 1 - c->line);
      memmove(c->line, nl + 1, rest + 1);
      c->got = rest;
      if (!more) {
        if (c->fd >= 0) close(c->fd);
        c->fd = -1;
        return false;
      }
    }
    if (c->got >= sizeof(c->line) - 1) { /* a line longer than any command */
      reply(c, "ERROR: line too long\n");
      close(c->fd);
      c->fd = -1;
      return false;
    }
  }
}
