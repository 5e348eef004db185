/* The hang watch (ras.h): every RAS tick, for each registered communicator,
 *  - a call in flight longer than NCCL_BATON_HANG_REPORT_SEC starts a report: a worker thread asks
 *    every rank's process for its state over the side channel and WARNs once with the verdict
 *    (repeated at most every HANG_REPEAT_S for the same call), whatever NCCL_DEBUG says (on stderr
 *    when it does not log WARN lines: WARN_ALWAYS). Nothing is aborted.
 *  - a call that waits on a rank whose process died (ras.c's keep-alive ring) is failed after
 *    HANG_GONE_GRACE_MS (both times NCCL_RAS_TIMEOUT_FACTOR) without progress: a WARN naming the
 * rank and the call (also the communicator's ncclGetLastError text), ncclRemoteError as its async
 * error, and the abort flag, so every survivor's waits end, not only those waiting on the dead rank
 * directly. The verdict itself is a pure function of every rank's answer (hang_verdict). */
#include <stdarg.h>
#include <stdlib.h>

#include "observe/ras.h"

#define HANG_REPEAT_S 300       /* the same call is reported again after this long */
#define HANG_GONE_GRACE_MS 2000 /* a call waiting on a dead rank fails after this long */
#define HANG_LIST_MAX 8         /* ranks named per group of a verdict */
#define HANG_REPORT_LEN 4096

/* ---- Text building -----------------------------------------------------------------------------
 */
typedef struct sbuf {
  char* p;
  size_t len, used;
} sbuf_t;

static void sb_printf(sbuf_t* b, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t* b, const char* fmt, ...) {
  if (b->used + 1 >= b->len) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(b->p + b->used, b->len - b->used, fmt, ap);
  va_end(ap);
  if (n > 0) b->used += (size_t)n < b->len - b->used ? (size_t)n : b->len - b->used - 1;
}

void hang_describe_op(const prog_op_t* op, char* out, size_t len) {
  sbuf_t b = {out, len, 0};
  out[0] = '\0';
  if (op->kind >= OP_KIND_COUNT) {
    sb_printf(&b, "call #%llu (no longer recorded)", (unsigned long long)op->seq);
    return;
  }
  sb_printf(&b, "nccl%s #%llu (", op_kind_name(op->kind), (unsigned long long)op->seq);
  if (op_kind_is_p2p(op->kind)) {
    sb_printf(&b, "%s rank %d, #%llu %s it, ", op->kind == OP_SEND ? "to" : "from", op->root,
              (unsigned long long)op->peer_nth, op->kind == OP_SEND ? "to" : "from");
  } else {
    sb_printf(&b, "collective #%llu, ", (unsigned long long)op->coll);
  }
  sb_printf(&b, "count %llu %s", (unsigned long long)op->count,
            datatype_name((ncclDataType_t)op->dtype));
  bool reduces = op->kind == OP_ALLREDUCE || op->kind == OP_REDUCE || op->kind == OP_REDUCESCATTER;
  if (reduces)
    sb_printf(&b, " %s", op->redop == 255 ? "user-op" : redop_name((ncclRedOp_t)op->redop));
  bool rooted = op->kind == OP_BROADCAST || op->kind == OP_REDUCE || op->kind == OP_GATHER ||
                op->kind == OP_SCATTER;
  if (rooted) sb_printf(&b, ", root %d", op->root);
  sb_printf(&b, ")");
}

/* ---- The verdict (pure) ------------------------------------------------------------------------
 */
static void who(sbuf_t* b, const hang_rank_t* r, int rank) {
  sb_printf(b, "rank %d (pid %d on %s)", rank, r->pid, r->host[0] ? r->host : "?");
}

/* Names the ranks of ranks[] for which pick() holds, as "<intro> rank a (...), rank b (...)". */
typedef bool (*hang_pick_fn)(const prog_state_t* me, const hang_rank_t* r, int rank);
static int name_group(sbuf_t* b, const prog_state_t* me, const hang_rank_t* ranks, int nranks,
                      hang_pick_fn pick, const char* intro, bool details, const char* note) {
  int n = 0;
  for (int r = 0; r < nranks; r++) {
    if (!pick(me, &ranks[r], r)) continue;
    if (n == 0) sb_printf(b, "%s", intro);
    if (n < HANG_LIST_MAX) {
      sb_printf(b, "%s", n ? ", " : " ");
      who(b, &ranks[r], r);
      if (details && ranks[r].st.last_coll.seq != 0) {
        char op[160];
        hang_describe_op(&ranks[r].st.last_coll, op, sizeof(op));
        sb_printf(b, " whose last collective is %s", op);
      } else if (details) {
        sb_printf(b, " which has called no collective yet");
      }
    }
    n++;
  }
  if (n > HANG_LIST_MAX) sb_printf(b, " and %d more", n - HANG_LIST_MAX);
  if (n > 0) sb_printf(b, "%s%s%s. ", note ? " (" : "", note ? note : "", note ? ")" : "");
  return n;
}

static bool pick_gone(const prog_state_t* me, const hang_rank_t* r, int rank) {
  return rank != me->rank && r->status == RAS_GONE;
}
static bool pick_left(const prog_state_t* me, const hang_rank_t* r, int rank) {
  return rank != me->rank && r->status == HANG_LEFT;
}
static bool pick_off(const prog_state_t* me, const hang_rank_t* r, int rank) {
  return rank != me->rank && r->status == HANG_OFF;
}
static bool pick_silent(const prog_state_t* me, const hang_rank_t* r, int rank) {
  return rank != me->rank && r->status == RAS_SILENT;
}
static bool pick_not_called(const prog_state_t* me, const hang_rank_t* r, int rank) {
  return r->status == RAS_ANSWERED && r->st.coll < me->inflight.coll;
}
static bool pick_not_started(const prog_state_t* me, const hang_rank_t* r, int rank) {
  return r->status == RAS_ANSWERED && r->st.coll >= me->inflight.coll &&
         r->st.coll_started < me->inflight.coll;
}
static bool pick_finished(const prog_state_t* me, const hang_rank_t* r, int rank) {
  return rank != me->rank && r->status == RAS_ANSWERED && r->st.coll_done >= me->inflight.coll;
}

static void verdict_unreachable(sbuf_t* b, const prog_state_t* me, const hang_rank_t* ranks,
                                int nranks, int* named) {
  *named += name_group(b, me, ranks, nranks, pick_gone, "Dead:", false, "its process died");
  *named += name_group(b, me, ranks, nranks, pick_left, "Gone from the communicator:", false, NULL);
  *named += name_group(b, me, ranks, nranks, pick_silent, "Not answering:", false,
                       "stopped, e.g. SIGSTOP, or its process is hung");
  *named += name_group(b, me, ranks, nranks, pick_off, "Not asked:", false,
                       "their side channel is off: NCCL_RAS_ENABLE=0");
}

void hang_describe_waits(const prog_state_t* st, char* out, size_t len) {
  sbuf_t b = {out, len, 0};
  out[0] = '\0';
  for (int i = 0; i < st->nwaits && i < PROG_MAX_WAITS; i++) {
    const prog_wait_t* w = &st->waits[i];
    sb_printf(&b, "%s%s rank %d (%s, channel %d, step %llu, %u s)", i ? "; " : "",
              w->is_send ? "no free slot towards" : "no data from", w->peer, w->transport,
              w->channel, (unsigned long long)w->step, w->secs);
  }
}

static const prog_conn_t* find_conn(const prog_state_t* st, int channel, int peer, int is_send) {
  for (int i = 0; i < st->nconns && i < PROG_MAX_CONNS; i++) {
    const prog_conn_t* c = &st->conns[i];
    if (c->channel == channel && c->peer == peer && c->is_send == is_send) return c;
  }
  return NULL;
}

/* Connections that lost their way: the sender has published steps the receiver waits for, or the
 * receiver has freed slots the sender waits for. Either end is alive and inside the call, so the
 * transport between them is what does not move. */
static void verdict_stuck(sbuf_t* b, const hang_rank_t* ranks, int nranks) {
  int n = 0;
  for (int r = 0; r < nranks; r++) {
    const prog_state_t* st = &ranks[r].st;
    if (ranks[r].status != RAS_ANSWERED) continue;
    for (int i = 0; i < st->nwaits && i < PROG_MAX_WAITS; i++) {
      const prog_wait_t* w = &st->waits[i];
      if (w->peer < 0 || w->peer >= nranks || ranks[w->peer].status != RAS_ANSWERED) continue;
      const prog_conn_t* o = find_conn(&ranks[w->peer].st, w->channel, r, !w->is_send);
      if (o == NULL) continue;
      /* the step it waits for is there: a slot freed (send), data published (receive) */
      bool stuck = w->is_send ? fifo_may_send(o->step, w->step) : o->step > w->step;
      if (!stuck || n++ >= HANG_LIST_MAX) continue;
      if (w->is_send)
        sb_printf(b,
                  " The connection from rank %d to rank %d (%s, channel %d) does not move: rank %d "
                  "has freed slots up to step %llu, rank %d still waits for a free slot at step "
                  "%llu (%u s).",
                  r, w->peer, w->transport, w->channel, w->peer, (unsigned long long)o->step, r,
                  (unsigned long long)w->step, w->secs);
      else
        sb_printf(b,
                  " The connection from rank %d to rank %d (%s, channel %d) does not move: rank %d "
                  "has sent %llu steps, rank %d has received %llu (%u s).",
                  w->peer, r, w->transport, w->channel, w->peer, (unsigned long long)o->step, r,
                  (unsigned long long)w->step, w->secs);
    }
  }
}

static void verdict_coll(sbuf_t* b, const prog_state_t* me, const hang_rank_t* ranks, int nranks) {
  int named = 0;
  verdict_unreachable(b, me, ranks, nranks, &named);
  named += name_group(b, me, ranks, nranks, pick_not_called, "Not called yet by", true, NULL);
  int ns = 0;
  for (int r = 0; r < nranks; r++) {
    if (!pick_not_started(me, &ranks[r], r)) continue;
    const prog_state_t* st = &ranks[r].st;
    if (ns == 0) sb_printf(b, "Called but not started by");
    if (ns < HANG_LIST_MAX) {
      sb_printf(b, "%s", ns ? ", " : " ");
      who(b, &ranks[r], r);
      if (st->inflight.seq != 0 && st->inflight.seq > st->planned)
        sb_printf(b, " (its group is still open: ncclGroupEnd not called)");
      else if (st->cuda_dev >= 0)
        sb_printf(b, " (not started on its GPU: an earlier kernel on its stream still runs)");
    }
    ns++;
  }
  if (ns > HANG_LIST_MAX) sb_printf(b, " and %d more", ns - HANG_LIST_MAX);
  if (ns > 0) sb_printf(b, ". ");
  named += ns;
  name_group(b, me, ranks, nranks, pick_finished, "Already finished by", false,
             "the ranks do not agree on the calls: check counts and order");
  if (named > 0) return;
  sb_printf(b, "Every rank is inside it.");
  verdict_stuck(b, ranks, nranks);
  int nw = 0;
  for (int r = 0; r < nranks; r++) {
    if (ranks[r].status != RAS_ANSWERED || ranks[r].st.nwaits == 0) continue;
    if (nw++ < HANG_LIST_MAX) {
      char w[512];
      hang_describe_waits(&ranks[r].st, w, sizeof(w));
      sb_printf(b, " Rank %d waits: %s.", r, w);
    }
  }
  if (nw > HANG_LIST_MAX) sb_printf(b, " (%d more ranks wait)", nw - HANG_LIST_MAX);
  if (nw == 0)
    sb_printf(b, me->cuda_dev >= 0 ? " Their GPUs have not finished it (no connection state is "
                                     "visible from the host)."
                                   : " No connection reports waiting.");
}

static void verdict_p2p(sbuf_t* b, const prog_state_t* me, const hang_rank_t* ranks, int nranks) {
  const prog_op_t* op = &me->inflight;
  int peer = op->root;
  if (peer < 0 || peer >= nranks) {
    sb_printf(b, "Its peer %d is not a rank of the communicator.", peer);
    return;
  }
  const hang_rank_t* p = &ranks[peer];
  if (p->status != RAS_ANSWERED) {
    int named = 0;
    verdict_unreachable(b, me, ranks, nranks, &named);
    if (named == 0) {
      who(b, p, peer);
      sb_printf(b, " cannot be asked.");
    }
    return;
  }
  bool send = op->kind == OP_SEND;
  uint64_t posted = send ? p->st.recvs_from : p->st.sends_to;
  if (peer == me->rank) {
    sb_printf(b, "A %s to self waits for its matching %s in the same group.",
              send ? "send" : "receive", send ? "receive" : "send");
    return;
  }
  if (posted < op->peer_nth) {
    who(b, p, peer);
    sb_printf(b, " has not posted the matching %s: it has posted %llu %s rank %d, this is #%llu.",
              send ? "receive" : "send", (unsigned long long)posted,
              send ? "receives from" : "sends to", me->rank, (unsigned long long)op->peer_nth);
    return;
  }
  who(b, p, peer);
  sb_printf(b, " has posted the matching %s", send ? "receive" : "send");
  if (p->st.inflight.seq != 0) {
    char d[160];
    hang_describe_op(&p->st.inflight, d, sizeof(d));
    sb_printf(b, "; its oldest unfinished call is %s", d);
  }
  sb_printf(b, ".");
  char w[512];
  if (p->st.nwaits > 0) {
    hang_describe_waits(&p->st, w, sizeof(w));
    sb_printf(b, " Rank %d waits: %s.", peer, w);
  }
  if (me->nwaits > 0) {
    hang_describe_waits(me, w, sizeof(w));
    sb_printf(b, " Rank %d waits: %s.", me->rank, w);
  }
}

void hang_verdict(const prog_state_t* me, const hang_rank_t* ranks, int nranks, char* out,
                  size_t len) {
  sbuf_t b = {out, len, 0};
  out[0] = '\0';
  if (op_kind_is_p2p(me->inflight.kind))
    verdict_p2p(&b, me, ranks, nranks);
  else if (me->inflight.kind < OP_KIND_COUNT)
    verdict_coll(&b, me, ranks, nranks);
  else
    sb_printf(&b, "The call is no longer recorded (too many calls queued after it).");
}

/* ---- The report worker --------------------------------------------------------------------------
 */
typedef struct report_job {
  prog_state_t me;
  int nranks;
  socket_addr_t* addrs; /* nranks */
  int* pids;            /* nranks */
  char (*hosts)[RAS_HOST_LEN];
  char name[64];
} report_job_t;

static void report_job_free(report_job_t* j) {
  free(j->addrs);
  free(j->pids);
  free(j->hosts);
  free(j);
}

static void* report_main(void* arg) {
  report_job_t* j = arg;
  int n = j->nranks;
  hang_rank_t* ranks = calloc((size_t)n, sizeof(*ranks));
  socket_addr_t* procs = calloc((size_t)n, sizeof(*procs));
  ras_answer_t* ans = calloc((size_t)n, sizeof(*ans));
  int np = 0;
  if (ranks == NULL || procs == NULL || ans == NULL) goto out;
  for (int r = 0; r < n; r++) {
    bool seen = false;
    for (int k = 0; k < np && !seen; k++) seen = socket_addr_equal(&procs[k], &j->addrs[r]);
    if (!seen && j->addrs[r].sa.sa_family != 0) procs[np++] = j->addrs[r];
  }
  ras_ask_all(procs, np, j->me.comm_hash, j->me.rank, ras_timeout_ms(RAS_ASK_TIMEOUT_MS), ans);
  for (int r = 0; r < n; r++) {
    hang_rank_t* h = &ranks[r];
    h->pid = j->pids[r];
    snprintf(h->host, sizeof(h->host), "%s", j->hosts[r]);
    h->status = RAS_SILENT;
    if (j->addrs[r].sa.sa_family == 0) { /* no side channel there (NCCL_RAS_ENABLE=0) */
      h->status = r == j->me.rank ? RAS_ANSWERED : HANG_OFF;
      if (r == j->me.rank) h->st = j->me;
      continue;
    }
    for (int k = 0; k < np; k++) {
      if (!socket_addr_equal(&procs[k], &j->addrs[r])) continue;
      h->status = ans[k].status;
      if (h->status != RAS_ANSWERED) break;
      h->status = HANG_LEFT;
      for (int q = 0; q < ans[k].nstates; q++) {
        if (ans[k].states[q].rank != r) continue;
        h->st = ans[k].states[q];
        h->status = RAS_ANSWERED;
      }
      break;
    }
    if (h->status != RAS_ANSWERED && ras_process_died(&j->addrs[r])) h->status = RAS_GONE;
  }
  if (ranks[j->me.rank].status == RAS_ANSWERED) j->me = ranks[j->me.rank].st; /* fresher */
  if (j->me.inflight.seq == 0) goto out; /* it finished meanwhile */
  char op[192], verdict[HANG_REPORT_LEN - 512];
  hang_describe_op(&j->me.inflight, op, sizeof(op));
  hang_verdict(&j->me, ranks, n, verdict, sizeof(verdict));
  WARN_ALWAYS(
      "Hang report: comm 0x%llx (%d ranks%s%s) rank %d: %s has been in flight for %.0f s. %s",
      (unsigned long long)j->me.comm_hash, n, j->name[0] ? ", " : "", j->name, j->me.rank, op,
      (double)j->me.inflight_age_ns / 1e9, verdict);
out:
  if (ans != NULL) ras_answers_free(ans, np);
  free(ans);
  free(procs);
  free(ranks);
  report_job_free(j);
  return NULL;
}

static void report_start(ncclComm_t comm, const prog_state_t* st) {
  report_job_t* j = calloc(1, sizeof(*j));
  if (j == NULL) return;
  int n = comm->nranks;
  j->me = *st;
  j->nranks = n;
  j->addrs = calloc((size_t)n, sizeof(*j->addrs));
  j->pids = calloc((size_t)n, sizeof(*j->pids));
  j->hosts = calloc((size_t)n, sizeof(*j->hosts));
  if (j->addrs == NULL || j->pids == NULL || j->hosts == NULL) goto fail;
  for (int r = 0; r < n; r++) {
    if (comm->ras_addrs != NULL) j->addrs[r] = comm->ras_addrs[r];
    j->pids[r] = comm->peers != NULL ? comm->peers[r].pid : 0;
    if (comm->peer_hosts != NULL) memcpy(j->hosts[r], comm->peer_hosts[r], RAS_HOST_LEN);
  }
  if (comm->comm_name != NULL) snprintf(j->name, sizeof(j->name), "%s", comm->comm_name);
  int err = ras_spawn_detached(report_main, j);
  if (err == 0) return;
  INFO(NCCL_RAS, "Hang watch: cannot start a report thread: %s", strerror(err));
fail:
  report_job_free(j);
}

/* ---- Failing a call that waits on a dead rank ----------------------------------------------- */
static bool op_needs(const prog_op_t* op, int rank) {
  return !op_kind_is_p2p(op->kind) || op->root == rank;
}

static void fail_for_dead(ras_entry_t* e, const prog_state_t* st) {
  ncclComm_t comm = e->comm;
  int r = e->gone_rank;
  char op[192];
  hang_describe_op(&st->inflight, op, sizeof(op));
  {
    LOG_SINK_SCOPE(comm->last_error, sizeof(comm->last_error));
    WARN("comm 0x%llx rank %d: %s cannot complete: rank %d (pid %d on %s) has died",
         (unsigned long long)comm->comm_hash, comm->rank, op, r,
         comm->peers != NULL ? comm->peers[r].pid : 0,
         comm->peer_hosts != NULL ? comm->peer_hosts[r] : "?");
  }
  int expected = ncclSuccess;
  if (!atomic_compare_exchange_strong(&comm->async_error, &expected, (int)ncclRemoteError)) {
    expected = ncclInProgress;
    (void)atomic_compare_exchange_strong(&comm->async_error, &expected, (int)ncclRemoteError);
  }
  __atomic_store_n(comm->abort_flag, 1, __ATOMIC_RELEASE);
  e->failed = true;
}

void hang_tick(ras_entry_t* e, uint64_t now) {
  ncclComm_t comm = e->comm;
  if (atomic_load(&comm->state) != COMM_STATE_READY) return;
  prog_state_t st;
  progress_state(comm, -1, &st);
  const prog_op_t* op = &st.inflight;
  if (op->seq == 0) return;
  if (e->gone_rank >= 0 && !e->failed && op->seq <= st.planned && op_needs(op, e->gone_rank)) {
    uint64_t since = e->gone_ns > op->enq_ns ? e->gone_ns : op->enq_ns;
    if (now - since >= (uint64_t)ras_timeout_ms(HANG_GONE_GRACE_MS) * 1000000ull)
      fail_for_dead(e, &st);
  }
  int64_t sec = param_int(PARAM_HANG_REPORT_SEC);
  if (sec <= 0 || e->failed || st.inflight_age_ns < (uint64_t)sec * 1000000000ull) return;
  if (e->reported_seq == op->seq && now - e->reported_ns < (uint64_t)HANG_REPEAT_S * 1000000000ull)
    return;
  e->reported_seq = op->seq;
  e->reported_ns = now;
  report_start(comm, &st);
}
