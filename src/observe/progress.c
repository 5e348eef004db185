/* Progress accounting: every call a communicator takes is numbered at enqueue, and the plans that
 * carry the calls are tied to the executor's launch numbers, so this rank can always say which of
 * its calls have not started, which run, and which are done (core.h, "Progress").
 *
 * The enqueueing thread writes; the RAS service thread and the timeline read. One mutex per
 * communicator guards the rings: taken once per call and once per plan, never contended except
 * while a report reads (no system call on the fast path). */
#include <stdlib.h>
#include <unistd.h>

#include "core/core.h"

#define PROG_RING 256 /* calls remembered (the in-flight one must be among them to be described) \
                       */
#define PROG_PLANS 128

typedef struct prog_plan {
  uint64_t seq_first, seq_last; /* the calls it carries */
  uint64_t coll_last;           /* collectives enqueued up to seq_last */
  uint64_t launch_first;        /* the executor's first launch number for it */
  uint64_t launch_last;         /* its last; UINT64_MAX while it runs */
  uint64_t begin_rt;            /* trace_now_ns() at its begin (the timeline) */
  bool abandoned;               /* failed, dropped or captured: counts as finished */
} prog_plan_t;

struct comm_progress {
  pthread_mutex_t lock;
  int nranks;
  uint64_t seq, coll;
  uint64_t kinds[OP_KIND_COUNT];
  uint64_t* peer_sends; /* nranks */
  uint64_t* peer_recvs; /* nranks */
  prog_op_t ring[PROG_RING];
  prog_op_t last_coll;
  prog_plan_t plans[PROG_PLANS]; /* plan n at n % PROG_PLANS */
  uint64_t nplans;
  uint64_t planned; /* the last call handed to a plan */
  /* Derived (under lock): what the executor's progress says so far. */
  uint64_t done_seq, started_seq, done_coll, started_coll;
  uint64_t scan;          /* the first plan not known to be done */
  uint64_t traced_launch; /* the timeline has the GPU times of launches up to this one */
};

const char* ras_host_label(void) {
  const char* id = param_str(PARAM_HOSTID);
  return id != NULL && id[0] != '\0' ? id : host_name();
}

ncclResult_t progress_create(ncclComm_t comm) {
  struct comm_progress* p;
  CHECK(MEM_CALLOC(&p, 1));
  p->nranks = comm->nranks;
  if (mem_calloc((void**)&p->peer_sends, (size_t)comm->nranks, sizeof(uint64_t)) != ncclSuccess ||
      mem_calloc((void**)&p->peer_recvs, (size_t)comm->nranks, sizeof(uint64_t)) != ncclSuccess) {
    free(p->peer_sends);
    free(p);
    return ncclSystemError;
  }
  pthread_mutex_init(&p->lock, NULL);
  comm->progress = p;
  return ncclSuccess;
}

void progress_free(ncclComm_t comm) {
  struct comm_progress* p = comm->progress;
  if (p == NULL) return;
  pthread_mutex_destroy(&p->lock);
  free(p->peer_sends);
  free(p->peer_recvs);
  free(p);
  comm->progress = NULL;
}

void progress_enqueue(ncclComm_t comm, int kind, size_t count, int dtype, int redop, int root,
                      prog_op_t* op) {
  struct comm_progress* p = comm->progress;
  prog_op_t o = {.count = count,
                 .enq_ns = clock_ns(),
                 .root = root,
                 .kind = (uint8_t)kind,
                 .dtype = (uint8_t)dtype,
                 .redop = redop >= 0 && redop < 255 ? (uint8_t)redop : 255};
  if (p == NULL) {
    *op = o;
    return;
  }
  pthread_mutex_lock(&p->lock);
  o.seq = ++p->seq;
  p->kinds[kind]++;
  if (op_kind_is_p2p(kind)) {
    if (root >= 0 && root < p->nranks)
      o.peer_nth = kind == OP_SEND ? ++p->peer_sends[root] : ++p->peer_recvs[root];
  } else {
    o.coll = ++p->coll;
    p->last_coll = o;
  }
  p->ring[o.seq % PROG_RING] = o;
  pthread_mutex_unlock(&p->lock);
  *op = o;
}

void progress_plan_begin(ncclComm_t comm, uint64_t launch_first, uint64_t* seq_first,
                         uint64_t* seq_last) {
  struct comm_progress* p = comm->progress;
  *seq_first = *seq_last = 0;
  if (p == NULL) return;
  pthread_mutex_lock(&p->lock);
  prog_plan_t* pl = &p->plans[p->nplans % PROG_PLANS];
  if (p->nplans - p->scan >= PROG_PLANS) p->scan = p->nplans - PROG_PLANS + 1; /* forgotten */
  *pl = (prog_plan_t){.seq_first = p->planned + 1,
                      .seq_last = p->seq,
                      .coll_last = p->coll,
                      .launch_first = launch_first,
                      .launch_last = UINT64_MAX,
                      .begin_rt = trace_on() ? trace_now_ns() : 0};
  p->planned = p->seq;
  p->nplans++;
  *seq_first = pl->seq_first;
  *seq_last = pl->seq_last;
  pthread_mutex_unlock(&p->lock);
}

void progress_plan_end(ncclComm_t comm, uint64_t launch_last, bool abandoned) {
  struct comm_progress* p = comm->progress;
  if (p == NULL) return;
  prog_plan_t pl = {0};
  pthread_mutex_lock(&p->lock);
  if (p->nplans > 0) {
    prog_plan_t* last = &p->plans[(p->nplans - 1) % PROG_PLANS];
    last->launch_last = launch_last;
    last->abandoned = abandoned;
    pl = *last;
  }
  pthread_mutex_unlock(&p->lock);
  if (trace_on() && pl.begin_rt != 0 && pl.seq_last >= pl.seq_first) {
    prog_op_t op = {.seq = pl.seq_last, .coll = pl.coll_last, .root = -1, .kind = 255};
    trace_span(comm, TRACE_RUN, pl.begin_rt, trace_now_ns(), &op, pl.seq_first);
  }
  if (trace_on()) progress_trace_gpu(comm);
}

void progress_trace_gpu(ncclComm_t comm) {
  struct comm_progress* p = comm->progress;
  if (p == NULL || !trace_on()) return;
  exec_progress_t ep = {0};
  comm_res_progress(comm, &ep);
  pthread_mutex_lock(&p->lock);
  uint64_t from = p->traced_launch + 1;
  if (ep.done > p->traced_launch) p->traced_launch = ep.done;
  uint64_t first_plan = p->nplans > PROG_PLANS ? p->nplans - PROG_PLANS : 0;
  for (uint64_t l = from; l <= ep.done; l++) {
    uint64_t t0, t1;
    if (!comm_res_launch_time(comm, l, &t0, &t1)) continue;
    prog_op_t op = {.root = -1, .kind = 255};
    uint64_t seq_first = 0;
    for (uint64_t n = first_plan; n < p->nplans; n++) {
      const prog_plan_t* pl = &p->plans[n % PROG_PLANS];
      if (pl->launch_first > l || pl->launch_last < l) continue;
      op.seq = pl->seq_last;
      op.coll = pl->coll_last;
      seq_first = pl->seq_first;
      break;
    }
    trace_span(comm, TRACE_GPU, t0, t1, &op, seq_first);
  }
  pthread_mutex_unlock(&p->lock);
}

void progress_rewind(ncclComm_t comm) {
  struct comm_progress* p = comm->progress;
  if (p == NULL) return;
  pthread_mutex_lock(&p->lock);
  for (uint64_t s = p->seq; s > p->planned; s--) {
    const prog_op_t* o = &p->ring[s % PROG_RING];
    if (o->seq != s) break; /* older than the ring: left counted */
    p->kinds[o->kind]--;
    if (!op_kind_is_p2p(o->kind)) {
      p->coll--;
    } else if (o->root >= 0 && o->root < p->nranks) {
      uint64_t* c = o->kind == OP_SEND ? &p->peer_sends[o->root] : &p->peer_recvs[o->root];
      if (*c > 0) (*c)--;
    }
    p->seq = s - 1;
  }
  /* The last collective still counted. */
  memset(&p->last_coll, 0, sizeof(p->last_coll));
  for (uint64_t s = p->seq; s > 0 && p->seq - s < PROG_RING; s--) {
    const prog_op_t* o = &p->ring[s % PROG_RING];
    if (o->seq != s) break;
    if (!op_kind_is_p2p(o->kind)) {
      p->last_coll = *o;
      break;
    }
  }
  pthread_mutex_unlock(&p->lock);
}

/* Moves done/started forward by the executor's launch progress. Under lock. */
static void progress_refresh(ncclComm_t comm, struct comm_progress* p) {
  exec_progress_t ep = {0};
  comm_res_progress(comm, &ep);
  for (uint64_t n = p->scan; n < p->nplans; n++) {
    const prog_plan_t* pl = &p->plans[n % PROG_PLANS];
    bool running = pl->launch_last == UINT64_MAX; /* its group call has not returned */
    bool nothing = !running && (pl->abandoned || pl->launch_last < pl->launch_first);
    bool began = nothing || ep.started >= pl->launch_first;
    if (began && pl->seq_last > p->started_seq) {
      p->started_seq = pl->seq_last;
      p->started_coll = pl->coll_last;
    }
    bool ended = !running && (pl->abandoned || ep.done >= pl->launch_last);
    if (!ended) break;
    p->done_seq = pl->seq_last;
    p->done_coll = pl->coll_last;
    p->scan = n + 1;
  }
  if (p->started_seq < p->done_seq) {
    p->started_seq = p->done_seq;
    p->started_coll = p->done_coll;
  }
}

void progress_state(ncclComm_t comm, int asker, prog_state_t* out) {
  memset(out, 0, sizeof(*out));
  out->comm_hash = comm->comm_hash;
  out->rank = comm->rank;
  out->nranks = comm->nranks;
  out->pid = (int32_t)getpid();
  out->cuda_dev = comm->cuda_dev;
  out->host_hash = host_hash();
  snprintf(out->host, sizeof(out->host), "%s", ras_host_label());
  out->comm_state = atomic_load(&comm->state);
  out->async_error = atomic_load(&comm->async_error);
  out->asker = asker;
  struct comm_progress* p = comm->progress;
  if (p == NULL) return;
  pthread_mutex_lock(&p->lock);
  progress_refresh(comm, p);
  out->seq = p->seq;
  out->coll = p->coll;
  out->planned = p->planned;
  out->started = p->started_seq;
  out->done = p->done_seq;
  out->coll_started = p->started_coll;
  out->coll_done = p->done_coll;
  memcpy(out->kinds, p->kinds, sizeof(out->kinds));
  out->last_coll = p->last_coll;
  if (p->done_seq < p->seq) {
    uint64_t s = p->done_seq + 1;
    const prog_op_t* o = &p->ring[s % PROG_RING];
    if (o->seq == s) {
      out->inflight = *o;
    } else { /* forgotten: only its number is known */
      out->inflight.seq = s;
      out->inflight.kind = 255;
    }
    uint64_t t = o->seq == s ? o->enq_ns : 0;
    out->inflight_age_ns = t != 0 ? clock_ns() - t : 0;
  }
  if (asker >= 0 && asker < p->nranks) {
    out->sends_to = p->peer_sends[asker];
    out->recvs_from = p->peer_recvs[asker];
  }
  pthread_mutex_unlock(&p->lock);
  out->nwaits = comm_res_waits(comm, out->waits, PROG_MAX_WAITS);
  out->nconns = comm_res_conns(comm, out->conns, PROG_MAX_CONNS);
}
