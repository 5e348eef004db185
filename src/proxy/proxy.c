/* The proxy: one progress thread per communicator that moves NET connections' FIFO slots between
 * the executors and the network plugin.
 *
 * Wire format of one FIFO step: two network messages on the connection's comm, in order:
 *   1. a 16-byte header proxy_hdr_t {proto, size, bytes}: the slot's protocol, the sender's
 *      sizes[] entry (passed through to the receiver's sizes[] unchanged) and the payload length;
 *   2. the payload (omitted when bytes == 0): the slot's first `bytes` bytes, as the executor wrote
 *      them (LL and LL128 lines travel with their flags).
 * The sender learns a slot's protocol from the slot itself: step s wrote an LL slot iff its first
 * LL line carries flag s+1 (a flag that only step s can have written there); likewise LL128 with
 * its per-line flag; otherwise Simple, with sizes[] giving the bytes. For LL/LL128 the payload is
 * every leading line that carries flag s+1.
 * The receiver posts the header receive, then the payload receive once the slot is free (head);
 * Simple lands in place (and is flushed with iflush when the connection asks: GPUDirect RDMA into
 * GPU memory), LL/LL128 land in a bounce buffer and are copied with 8-byte atomic stores so an
 * executor polling a flag never sees it before its data. Then sizes[] and tail (release).
 * A failure's WARN carries the network's own message (peer host and address, device, status).
 *
 * The thread spins while a step is in flight, and otherwise backs off: after ~1 ms without work it
 * sleeps on a condition variable for a growing time (up to 100 ms); proxy_wake ends the sleep. */
#include "proxy/proxy.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#define PROXY_SPIN_NS 1000000ull /* idle time before the thread starts sleeping */
#define PROXY_MAX_SLEEP_NS 100000000ull
#define PROXY_MIN_SLEEP_NS 200000ull
#define PROXY_DRAIN_NS 10000000000ull /* how long proxy_destroy waits for unsent steps */

typedef struct proxy_hdr {
  uint32_t proto;
  int32_t size;
  uint64_t bytes;
} proxy_hdr_t;
_Static_assert(sizeof(proxy_hdr_t) == 16, "wire header is 16 bytes");

typedef struct proxy_priv {
  proxy_hdr_t* hdrs; /* NCCL_STEPS headers (registered) */
  char* bounce;      /* recv: NCCL_STEPS slots of the larger line protocol buffer */
  size_t bounce_slot;
  void* mh_hdrs;
  void* mh_bounce;
  void* req_hdr[NCCL_STEPS];
  void* req_data[NCCL_STEPS];
  void* req_flush[NCCL_STEPS];
  bool hdr_done[NCCL_STEPS];
  bool data_done[NCCL_STEPS];
  bool flushed[NCCL_STEPS];
  /* send: posted = steps sent (both messages issued); done = steps whose sends completed.
   * recv: hdr_posted / data_posted = receives issued; hdr_recvd = headers arrived; done = tail. */
  uint64_t posted, hdr_posted, hdr_recvd, data_posted, done;
  bool send_hdr_issued;    /* the header of step `posted` is out, its payload not yet */
  bool failed;             /* no more progress on this connection */
  bool hdr_eof;            /* recv: the peer closed where the next step's header would start */
  atomic_bool peer_closed; /* recv: the peer closed between steps (not an error by itself) */
} proxy_priv_t;

struct proxy_state {
  pthread_t thread;
  bool started;
  pthread_mutex_t lock; /* sleep/wake */
  pthread_cond_t cond;
  atomic_int wake;
  atomic_int sleeping;
  atomic_bool stop;
  atomic_int error;
  volatile uint32_t* abort_flag;
  char* err_buf; /* the communicator's last-error text: the thread's WARNs land there too */
  size_t err_len;
  bool bind; /* run on cpus */
  cpu_set_t cpus;
  pthread_mutex_t conn_lock; /* the conn list; held by the thread during a pass */
  proxy_conn_t** conns;
  int nconns, cap;
};

static size_t conn_slot_bytes(const conn_fifo_t* f, int proto) {
  return f->buffs[proto] != NULL ? fifo_slot_bytes(f->buff_bytes[proto]) : 0;
}

static ncclResult_t proxy_fail(proxy_state_t* p, proxy_conn_t* c, ncclResult_t res,
                               const char* what) {
  proxy_priv_t* pv = c->priv;
  pv->failed = true;
  /* Only the proxy thread writes p->error: log first, so whoever sees the error finds the line.
   * The thread makes only network calls, so its last WARN, if any, is the network's own account
   * (peer host and address, device and port, status); it goes into this line, which names the
   * rank, so that one message (ncclGetLastError) says everything. */
  if (atomic_load(&p->error) == ncclSuccess) {
    char cause[768];
    snprintf(cause, sizeof(cause), "%s", log_last_error());
    if (cause[0] != '\0')
      WARN("Proxy: NET/%s %s %s rank %d failed (error %d): %s", c->net->name, what,
           c->is_send ? "to" : "from", c->peer, (int)res, cause);
    else
      WARN("Proxy: NET/%s %s %s rank %d failed (error %d); the peer may have exited or aborted",
           c->net->name, what, c->is_send ? "to" : "from", c->peer, (int)res);
    atomic_store(&p->error, (int)res);
  }
  return res;
}

/* ---- Send side ------------------------------------------------------------------------------ */
/* Counts the leading lines of a line-protocol slot written by step `step` (flag == step + 1). */
static size_t ll_written_bytes(const conn_fifo_t* f, uint64_t step) {
  size_t slot = conn_slot_bytes(f, PROTO_LL);
  if (slot == 0) return 0;
  const uint64_t* p = (const uint64_t*)(f->buffs[PROTO_LL] + fifo_slot(step) * slot);
  uint32_t flag = (uint32_t)(step + 1);
  size_t n = 0;
  for (; n < slot / sizeof(ll_line_t); n++) {
    uint64_t a = __atomic_load_n(&p[2 * n], __ATOMIC_RELAXED);
    uint64_t b = __atomic_load_n(&p[2 * n + 1], __ATOMIC_RELAXED);
    if ((uint32_t)(a >> 32) != flag && (uint32_t)(b >> 32) != flag) break;
  }
  return n * sizeof(ll_line_t);
}

static size_t ll128_written_bytes(const conn_fifo_t* f, uint64_t step) {
  size_t slot = conn_slot_bytes(f, PROTO_LL128);
  if (slot == 0) return 0;
  const char* base = f->buffs[PROTO_LL128] + fifo_slot(step) * slot;
  size_t n = 0;
  for (; n < slot / LL128_LINE_BYTES; n++) {
    const uint64_t* flag = (const uint64_t*)(base + n * LL128_LINE_BYTES + LL128_DATA_BYTES);
    if (__atomic_load_n(flag, __ATOMIC_RELAXED) != step + 1) break;
  }
  return n * LL128_LINE_BYTES;
}

static ncclResult_t send_describe(proxy_state_t* p, proxy_conn_t* c, uint64_t step,
                                  proxy_hdr_t* h) {
  const conn_fifo_t* f = c->fifo;
  int slot = (int)fifo_slot(step);
  h->size = f->sizes[slot];
  if ((h->bytes = ll_written_bytes(f, step)) > 0) {
    h->proto = PROTO_LL;
  } else if ((h->bytes = ll128_written_bytes(f, step)) > 0) {
    h->proto = PROTO_LL128;
  } else {
    h->proto = PROTO_SIMPLE;
    if (h->size < 0 || (size_t)h->size > conn_slot_bytes(f, PROTO_SIMPLE)) {
      WARN("Proxy: step %llu towards rank %d has %d bytes, a Simple slot holds %zu (executor bug)",
           (unsigned long long)step, c->peer, h->size, conn_slot_bytes(f, PROTO_SIMPLE));
      return proxy_fail(p, c, ncclInternalError, "send");
    }
    h->bytes = (uint64_t)h->size;
  }
  return ncclSuccess;
}

static ncclResult_t send_progress(proxy_state_t* p, proxy_conn_t* c, bool* progressed, bool* busy) {
  proxy_priv_t* pv = c->priv;
  conn_fifo_t* f = c->fifo;
  ncclResult_t res;
  uint64_t tail = __atomic_load_n(f->tail, __ATOMIC_ACQUIRE);
  /* Issue the messages of newly published steps. */
  while (pv->posted < tail && fifo_may_send(pv->done, pv->posted)) {
    uint64_t s = pv->posted;
    int slot = (int)fifo_slot(s);
    proxy_hdr_t* h = &pv->hdrs[slot];
    if (!pv->send_hdr_issued) {
      CHECK(send_describe(p, c, s, h));
      void* req = NULL;
      if ((res = c->net->isend(c->net_comm, h, sizeof(*h), 0, pv->mh_hdrs, NULL, &req)) !=
          ncclSuccess)
        return proxy_fail(p, c, res, "send");
      if (req == NULL) break;
      pv->req_hdr[slot] = req;
      pv->hdr_done[slot] = false;
      pv->send_hdr_issued = true;
      *progressed = true;
    }
    pv->req_data[slot] = NULL;
    pv->data_done[slot] = h->bytes == 0;
    if (h->bytes > 0) {
      void* req = NULL;
      char* data = f->buffs[h->proto] + (size_t)slot * conn_slot_bytes(f, (int)h->proto);
      res = c->net->isend(c->net_comm, data, h->bytes, 0, c->mh[h->proto], NULL, &req);
      if (res != ncclSuccess) return proxy_fail(p, c, res, "send");
      if (req == NULL) {
        /* The payload cannot start (a receiver-driven network waits for the receiver's go-ahead,
         * which may never come if the header was lost): test the header meanwhile, so that its
         * failure surfaces instead of a silent wait. */
        if (!pv->hdr_done[slot]) {
          int done = 0;
          if ((res = c->net->test(pv->req_hdr[slot], &done, NULL)) != ncclSuccess)
            return proxy_fail(p, c, res, "send");
          pv->hdr_done[slot] = done;
        }
        break;
      }
      pv->req_data[slot] = req;
    }
    pv->send_hdr_issued = false;
    pv->posted++;
    *progressed = true;
  }
  /* Complete in order; each completed step frees its slot for the executor. */
  while (pv->done < pv->posted) {
    int slot = (int)fifo_slot(pv->done);
    int done = 0;
    if (!pv->hdr_done[slot]) {
      if ((res = c->net->test(pv->req_hdr[slot], &done, NULL)) != ncclSuccess)
        return proxy_fail(p, c, res, "send");
      pv->hdr_done[slot] = done;
    }
    if (!pv->data_done[slot]) {
      if ((res = c->net->test(pv->req_data[slot], &done, NULL)) != ncclSuccess)
        return proxy_fail(p, c, res, "send");
      pv->data_done[slot] = done;
    }
    if (!pv->hdr_done[slot] || !pv->data_done[slot]) break;
    pv->done++;
    __atomic_store_n(f->head, pv->done, __ATOMIC_RELEASE);
    *progressed = true;
  }
  if (tail > pv->done) *busy = true;
  return ncclSuccess;
}

/* ---- Receive side --------------------------------------------------------------------------- */
static ncclResult_t recv_check_hdr(proxy_state_t* p, proxy_conn_t* c, const proxy_hdr_t* h) {
  const conn_fifo_t* f = c->fifo;
  proxy_priv_t* pv = c->priv;
  size_t cap = 0;
  if (h->proto < PROTO_COUNT) cap = conn_slot_bytes(f, (int)h->proto);
  if (h->proto != PROTO_SIMPLE && cap > pv->bounce_slot) cap = 0;
  if (h->proto >= PROTO_COUNT || h->bytes > cap) {
    WARN(
        "Proxy: rank %d sent a step of protocol %u and %llu bytes; this side's slot holds %zu "
        "(mismatched NCCL_BUFFSIZE / NCCL_LL_BUFFSIZE between ranks?)",
        c->peer, h->proto, (unsigned long long)h->bytes, cap);
    return proxy_fail(p, c, ncclInvalidUsage, "receive");
  }
  return ncclSuccess;
}

/* Copies line-protocol data from the bounce buffer with 8-byte stores, in order, the last line
 * after a release fence: a reader that sees the last line's flag sees every earlier line. */
static void recv_store_lines(char* dst, const char* src, size_t bytes, size_t line_bytes) {
  uint64_t* d = (uint64_t*)dst;
  const uint64_t* s = (const uint64_t*)src;
  size_t n = bytes / sizeof(uint64_t);
  size_t last = bytes >= line_bytes ? (bytes - line_bytes) / sizeof(uint64_t) : 0;
  for (size_t i = 0; i < n; i++) {
    if (i == last) __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&d[i], s[i], __ATOMIC_RELAXED);
  }
}

static ncclResult_t recv_progress(proxy_state_t* p, proxy_conn_t* c, bool* progressed, bool* busy) {
  proxy_priv_t* pv = c->priv;
  conn_fifo_t* f = c->fifo;
  ncclResult_t res;
  for (;;) {
    bool moved = false;
    /* Header of the next step, posted behind the previous payload so messages match in order. */
    if (!pv->hdr_eof && pv->hdr_posted == pv->data_posted &&
        fifo_may_send(pv->done, pv->hdr_posted)) {
      int slot = (int)fifo_slot(pv->hdr_posted);
      void* data = &pv->hdrs[slot];
      size_t size = sizeof(proxy_hdr_t);
      int tag = 0;
      void* req = NULL;
      res = c->net->irecv(c->net_comm, 1, &data, &size, &tag, &pv->mh_hdrs, NULL, &req);
      if (res == ncclRemoteError) { /* closed before this header: see hdr_eof below */
        pv->hdr_eof = true;
        req = NULL;
      } else if (res != ncclSuccess) {
        return proxy_fail(p, c, res, "receive");
      }
      if (req != NULL) {
        pv->req_hdr[slot] = req;
        pv->hdr_posted++;
        moved = true;
      }
    }
    /* The header arrived: post the payload once the slot is free. */
    if (!pv->hdr_eof && pv->hdr_recvd < pv->hdr_posted) {
      int slot = (int)fifo_slot(pv->hdr_recvd);
      int done = 0;
      if ((res = c->net->test(pv->req_hdr[slot], &done, NULL)) != ncclSuccess) {
        /* Closed where a step would start: a peer that finished (destroyed its communicator).
         * The steps already posted still land; after them the connection is closed, which is
         * an error only for an executor still waiting on it (transport_peer_check). */
        if (res != ncclRemoteError) return proxy_fail(p, c, res, "receive");
        pv->hdr_eof = true;
        done = 0;
        moved = true;
      }
      if (done) {
        CHECK(recv_check_hdr(p, c, &pv->hdrs[slot]));
        pv->hdr_recvd++;
        moved = true;
      }
    }
    if (pv->data_posted < pv->hdr_recvd &&
        fifo_may_send(__atomic_load_n(f->head, __ATOMIC_ACQUIRE), pv->data_posted)) {
      int slot = (int)fifo_slot(pv->data_posted);
      const proxy_hdr_t* h = &pv->hdrs[slot];
      pv->req_data[slot] = NULL;
      pv->req_flush[slot] = NULL;
      pv->data_done[slot] = h->bytes == 0;
      pv->flushed[slot] = !c->flush || h->bytes == 0 || h->proto != PROTO_SIMPLE;
      if (h->bytes > 0) {
        bool direct = h->proto == PROTO_SIMPLE;
        void* data = direct
                         ? f->buffs[PROTO_SIMPLE] + (size_t)slot * conn_slot_bytes(f, PROTO_SIMPLE)
                         : pv->bounce + (size_t)slot * pv->bounce_slot;
        void* mh = direct ? c->mh[PROTO_SIMPLE] : pv->mh_bounce;
        size_t size = h->bytes;
        int tag = 0;
        void* req = NULL;
        res = c->net->irecv(c->net_comm, 1, &data, &size, &tag, &mh, NULL, &req);
        if (res != ncclSuccess) return proxy_fail(p, c, res, "receive");
        if (req == NULL) goto next;
        pv->req_data[slot] = req;
      }
      pv->data_posted++;
      moved = true;
    }
  next:
    /* Complete in order: land line data with 8-byte stores, then sizes and tail. */
    if (pv->done < pv->data_posted) {
      int slot = (int)fifo_slot(pv->done);
      const proxy_hdr_t* h = &pv->hdrs[slot];
      if (!pv->data_done[slot]) {
        int done = 0;
        if ((res = c->net->test(pv->req_data[slot], &done, NULL)) != ncclSuccess)
          return proxy_fail(p, c, res, "receive");
        pv->data_done[slot] = done;
      }
      if (pv->data_done[slot] && !pv->flushed[slot]) { /* data the GPU must see: flush first */
        if (pv->req_flush[slot] == NULL) {
          void* data = f->buffs[PROTO_SIMPLE] + (size_t)slot * conn_slot_bytes(f, PROTO_SIMPLE);
          int size = (int)h->bytes;
          void* mh = c->mh[PROTO_SIMPLE];
          if ((res = c->net->iflush(c->net_comm, 1, &data, &size, &mh, &pv->req_flush[slot])) !=
              ncclSuccess)
            return proxy_fail(p, c, res, "flush of data");
          if (pv->req_flush[slot] == NULL) pv->flushed[slot] = true; /* nothing to flush */
        }
        if (pv->req_flush[slot] != NULL) {
          int done = 0;
          if ((res = c->net->test(pv->req_flush[slot], &done, NULL)) != ncclSuccess)
            return proxy_fail(p, c, res, "flush of data");
          pv->flushed[slot] = done;
        }
      }
      if (pv->data_done[slot] && pv->flushed[slot]) {
        if (h->proto != PROTO_SIMPLE && h->bytes > 0)
          recv_store_lines(f->buffs[h->proto] + (size_t)slot * conn_slot_bytes(f, (int)h->proto),
                           pv->bounce + (size_t)slot * pv->bounce_slot, h->bytes,
                           h->proto == PROTO_LL ? sizeof(ll_line_t) : LL128_LINE_BYTES);
        fifo_publish(f->sizes, f->tail, pv->done++, h->size);
        moved = true;
      }
    }
    if (!moved) break;
    *progressed = true;
  }
  if (pv->hdr_eof && pv->done == pv->data_posted) {
    pv->failed = true;
    atomic_store(&pv->peer_closed, true);
    INFO(NCCL_NET | NCCL_PROXY, "Proxy: rank %d closed its NET/%s connection after %llu steps",
         c->peer, c->net->name, (unsigned long long)pv->done);
    return ncclSuccess;
  }
  if (pv->hdr_recvd > pv->done) *busy = true; /* a step has started arriving */
  return ncclSuccess;
}

/* ---- Thread ---------------------------------------------------------------------------------- */
static void proxy_sleep(proxy_state_t* p, uint64_t ns) {
  pthread_mutex_lock(&p->lock);
  atomic_store(&p->sleeping, 1);
  if (!atomic_exchange(&p->wake, 0) && !atomic_load(&p->stop)) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    uint64_t t = (uint64_t)ts.tv_nsec + ns;
    ts.tv_sec += (time_t)(t / 1000000000ull);
    ts.tv_nsec = (long)(t % 1000000000ull);
    pthread_cond_timedwait(&p->cond, &p->lock, &ts);
    atomic_store(&p->wake, 0);
  }
  atomic_store(&p->sleeping, 0);
  pthread_mutex_unlock(&p->lock);
}

static void* proxy_main(void* arg) {
  proxy_state_t* p = arg;
  thread_set_name(pthread_self(), "NCCL Proxy");
  LOG_SINK_SCOPE(p->err_buf, p->err_len);
  if (p->bind) {
    int rc = pthread_setaffinity_np(pthread_self(), sizeof(p->cpus), &p->cpus);
    if (rc != 0)
      INFO(NCCL_INIT | NCCL_PROXY, "Proxy: binding to the GPU's CPUs failed: %s", strerror(rc));
  }
  uint64_t idle_since = clock_ns();
  while (!atomic_load(&p->stop)) {
    bool progressed = false, busy = false;
    bool live = atomic_load(&p->error) == ncclSuccess &&
                (p->abort_flag == NULL || __atomic_load_n(p->abort_flag, __ATOMIC_ACQUIRE) == 0);
    if (live) {
      pthread_mutex_lock(&p->conn_lock);
      for (int i = 0; i < p->nconns; i++) {
        proxy_conn_t* c = p->conns[i];
        if (((proxy_priv_t*)c->priv)->failed) continue;
        ncclResult_t res = c->is_send ? send_progress(p, c, &progressed, &busy)
                                      : recv_progress(p, c, &progressed, &busy);
        if (res != ncclSuccess) break; /* proxy_fail logged it and set p->error */
      }
      pthread_mutex_unlock(&p->conn_lock);
    }
    uint64_t now = clock_ns();
    if (progressed || busy || atomic_exchange(&p->wake, 0)) {
      idle_since = now;
      if (!progressed) sched_yield(); /* waiting on the network or the peer */
      continue;
    }
    uint64_t idle = now - idle_since;
    if (idle < PROXY_SPIN_NS) {
      sched_yield();
      continue;
    }
    uint64_t ns = idle / 4;
    if (ns < PROXY_MIN_SLEEP_NS) ns = PROXY_MIN_SLEEP_NS;
    if (ns > PROXY_MAX_SLEEP_NS) ns = PROXY_MAX_SLEEP_NS;
    proxy_sleep(p, ns);
  }
  return NULL;
}

ncclResult_t proxy_create(volatile uint32_t* abort_flag, char* err_buf, size_t err_len,
                          const cpu_set_t* cpus, proxy_state_t** out) {
  proxy_state_t* p = NULL;
  pthread_condattr_t attr;
  CHECK(MEM_CALLOC(&p, 1));
  p->abort_flag = abort_flag;
  p->bind = cpus != NULL;
  if (cpus != NULL) p->cpus = *cpus;
  p->err_buf = err_buf;
  p->err_len = err_buf != NULL ? err_len : 0;
  pthread_mutex_init(&p->lock, NULL);
  pthread_mutex_init(&p->conn_lock, NULL);
  pthread_condattr_init(&attr);
  pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cond, &attr);
  pthread_condattr_destroy(&attr);
  int rc = pthread_create(&p->thread, NULL, proxy_main, p);
  if (rc != 0) {
    WARN("Proxy: creating the progress thread failed: %s", strerror(rc));
    pthread_cond_destroy(&p->cond);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->conn_lock);
    free(p);
    return ncclSystemError;
  }
  p->started = true;
  INFO(NCCL_INIT | NCCL_PROXY, "Proxy: progress thread started");
  *out = p;
  return ncclSuccess;
}

/* Teardown: a registration the network fails to release leaves nothing to undo here; note it
 * (the plugin reports its own cause) and go on. */
static void proxy_dereg(proxy_conn_t* c, void** mh) {
  if (*mh == NULL) return;
  ncclResult_t res = c->net->deregMr(c->net_comm, *mh);
  if (res != ncclSuccess)
    INFO(NCCL_NET | NCCL_PROXY, "Proxy: NET/%s deregMr for rank %d returned %d at teardown",
         c->net->name, c->peer, (int)res);
  *mh = NULL;
}

static void proxy_conn_release(proxy_conn_t* c) {
  proxy_priv_t* pv = c->priv;
  if (pv == NULL) return;
  proxy_dereg(c, &pv->mh_hdrs);
  proxy_dereg(c, &pv->mh_bounce);
  free(pv->hdrs);
  free(pv->bounce);
  free(pv);
  c->priv = NULL;
}

ncclResult_t proxy_add_conn(proxy_state_t* proxy, proxy_conn_t* conn) {
  proxy_priv_t* pv = NULL;
  const conn_fifo_t* f = conn->fifo;
  ncclResult_t res = ncclSuccess;
  CHECK(MEM_CALLOC(&pv, 1));
  conn->priv = pv;
  if (posix_memalign((void**)&pv->hdrs, 64, NCCL_STEPS * sizeof(proxy_hdr_t)) != 0) {
    WARN("Proxy: out of memory for %zu header bytes", NCCL_STEPS * sizeof(proxy_hdr_t));
    res = ncclSystemError;
    goto fail;
  }
  memset(pv->hdrs, 0, NCCL_STEPS * sizeof(proxy_hdr_t));
  CHECK_GOTO(conn->net->regMr(conn->net_comm, pv->hdrs, NCCL_STEPS * sizeof(proxy_hdr_t),
                              NCCL_PTR_HOST, &pv->mh_hdrs),
             res, fail);
  if (!conn->is_send) {
    pv->bounce_slot = conn_slot_bytes(f, PROTO_LL);
    if (conn_slot_bytes(f, PROTO_LL128) > pv->bounce_slot)
      pv->bounce_slot = conn_slot_bytes(f, PROTO_LL128);
    if (pv->bounce_slot > 0) {
      if (posix_memalign((void**)&pv->bounce, 4096, pv->bounce_slot * NCCL_STEPS) != 0) {
        WARN("Proxy: out of memory for a %zu-byte receive bounce buffer",
             pv->bounce_slot * NCCL_STEPS);
        res = ncclSystemError;
        goto fail;
      }
      CHECK_GOTO(conn->net->regMr(conn->net_comm, pv->bounce, pv->bounce_slot * NCCL_STEPS,
                                  NCCL_PTR_HOST, &pv->mh_bounce),
                 res, fail);
    }
  }
  pthread_mutex_lock(&proxy->conn_lock);
  if (proxy->nconns == proxy->cap) {
    int cap = proxy->cap ? proxy->cap * 2 : 16;
    proxy_conn_t** grown = realloc(proxy->conns, (size_t)cap * sizeof(*grown));
    if (grown == NULL) {
      pthread_mutex_unlock(&proxy->conn_lock);
      WARN("Proxy: out of memory growing the connection list to %d", cap);
      res = ncclSystemError;
      goto fail;
    }
    proxy->conns = grown;
    proxy->cap = cap;
  }
  proxy->conns[proxy->nconns++] = conn;
  pthread_mutex_unlock(&proxy->conn_lock);
  return ncclSuccess;
fail:
  proxy_conn_release(conn);
  return res;
}

void proxy_wake(proxy_state_t* proxy) {
  if (proxy == NULL) return;
  atomic_store(&proxy->wake, 1);
  if (atomic_load(&proxy->sleeping)) {
    pthread_mutex_lock(&proxy->lock);
    pthread_cond_signal(&proxy->cond);
    pthread_mutex_unlock(&proxy->lock);
  }
}

ncclResult_t proxy_error(proxy_state_t* proxy) {
  if (proxy == NULL) return ncclSuccess;
  return (ncclResult_t)atomic_load(&proxy->error);
}

bool proxy_peer_closed(proxy_state_t* proxy, int peer) {
  bool closed = false;
  if (proxy == NULL) return false;
  pthread_mutex_lock(&proxy->conn_lock);
  for (int i = 0; i < proxy->nconns && !closed; i++) {
    proxy_conn_t* c = proxy->conns[i];
    closed = c->peer == peer && atomic_load(&((proxy_priv_t*)c->priv)->peer_closed);
  }
  pthread_mutex_unlock(&proxy->conn_lock);
  return closed;
}

/* Before stopping: let published sends reach the network (an executor's send is complete when
 * its data is in the staging FIFO, so a rank may destroy its communicator before the proxy has
 * sent everything). Skipped after an abort or an error; bounded by PROXY_DRAIN_NS. */
static void proxy_drain(proxy_state_t* p) {
  uint64_t deadline = clock_ns() + PROXY_DRAIN_NS;
  for (;;) {
    if (atomic_load(&p->error) != ncclSuccess ||
        (p->abort_flag != NULL && __atomic_load_n(p->abort_flag, __ATOMIC_ACQUIRE) != 0))
      return;
    int pending = 0, first_peer = -1;
    pthread_mutex_lock(&p->conn_lock);
    for (int i = 0; i < p->nconns; i++) {
      proxy_conn_t* c = p->conns[i];
      proxy_priv_t* pv = c->priv;
      if (!c->is_send || pv->failed) continue;
      if (pv->done < __atomic_load_n(c->fifo->tail, __ATOMIC_ACQUIRE)) {
        if (pending++ == 0) first_peer = c->peer;
      }
    }
    pthread_mutex_unlock(&p->conn_lock);
    if (pending == 0) return;
    if (clock_ns() > deadline) {
      WARN(
          "Proxy: %d NET connection(s) (first to rank %d) still had data to send %llu ms after "
          "the communicator was freed; dropped (did the peer stop receiving?)",
          pending, first_peer, (unsigned long long)(PROXY_DRAIN_NS / 1000000ull));
      return;
    }
    proxy_wake(p);
    struct timespec nap = {.tv_sec = 0, .tv_nsec = 200000};
    nanosleep(&nap, NULL);
  }
}

ncclResult_t proxy_destroy(proxy_state_t* proxy) {
  if (proxy == NULL) return ncclSuccess;
  if (proxy->started) {
    proxy_drain(proxy);
    atomic_store(&proxy->stop, true);
    pthread_mutex_lock(&proxy->lock);
    pthread_cond_signal(&proxy->cond);
    pthread_mutex_unlock(&proxy->lock);
    pthread_join(proxy->thread, NULL);
  }
  for (int i = 0; i < proxy->nconns; i++) proxy_conn_release(proxy->conns[i]);
  free(proxy->conns);
  pthread_cond_destroy(&proxy->cond);
  pthread_mutex_destroy(&proxy->lock);
  pthread_mutex_destroy(&proxy->conn_lock);
  free(proxy);
  return ncclSuccess;
}
