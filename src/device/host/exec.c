/* The host executor (executor_host_ops): the reference executor that runs a plan on CPU threads.
 * Channel 0 runs on the launching thread; every other channel with work has its own worker
 * thread, started on first use, that sleeps on a condition variable between launches. launch
 * returns when every channel finished its list, or after the first failure (the other channels
 * of this rank give up at their next wait). After a failure the connections' step positions no
 * longer match the peers': the communicator must be aborted.
 *
 * Waiting: a channel whose lanes cannot move spins briefly, then yields, then sleeps in growing
 * slices (many ranks share few cores in CI); each wait checks the abort flag, and every ~100 ms
 * asks exec_comm.peer_check about every peer it waits on. No wait is unbounded.
 *
 * Errors: worker threads bind exec_comm.err_buf as their error sink, so a WARN on any channel
 * (a dead peer seen by channel 3) reaches the communicator's ncclGetLastError text.
 *
 * Abort from another thread: ncclCommAbort sets the abort flag, which every wait checks, so a
 * running launch returns within a sleep slice; fini waits for launches still inside (bounded)
 * before it frees what they use, and refuses to free (leaks) rather than pull memory from under
 * one that does not leave. */
#include <sched.h>
#include <stdlib.h>
#include <time.h>

#include "device/host/host_exec.h"

#define HOST_SPIN_PASSES 32u               /* idle passes before yielding */
#define HOST_YIELD_NS (2ull * 1000 * 1000) /* then yield for this long before sleeping */
#define HOST_SLEEP_MIN_NS (20ull * 1000)   /* first sleep; doubles up to the max */
#define HOST_SLEEP_MAX_NS (500ull * 1000)
#define HOST_PEER_CHECK_NS (100ull * 1000 * 1000)
#define HOST_FINI_WAIT_S 10 /* fini waits this long for a launch to leave after an abort */

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

/* ---- Waiting -------------------------------------------------------------------------------- */
/* Records the first peer the blocked lanes wait on, for the progress watch (waits). */
static void chan_note_wait(host_chan_t* ch, const host_lane_t* lanes, int nlanes, uint64_t now) {
  const dev_channel_t* dc = host_chan_dev(ch);
  for (int i = 0; i < nlanes; i++) {
    if (lanes[i].pos >= lanes[i].nops) continue;
    for (int j = 0; j < lanes[i].nwait; j++) {
      int p = lanes[i].wait_peers[j];
      if (p < 0 || p >= ch->ex->comm->nranks) continue;
      const conn_fifo_t* rf = dc->recv[p];
      const conn_fifo_t* sf = dc->send[p];
      bool recv_waits = rf != NULL && __atomic_load_n(rf->tail, __ATOMIC_RELAXED) <= rf->step;
      int is_send = !recv_waits && sf != NULL;
      __atomic_store_n(&ch->wait_step,
                       is_send      ? sf->step
                       : rf != NULL ? rf->step
                                    : 0,
                       __ATOMIC_RELAXED);
      __atomic_store_n(&ch->wait_is_send, is_send, __ATOMIC_RELAXED);
      __atomic_store_n(&ch->wait_since_ns, now, __ATOMIC_RELAXED);
      __atomic_store_n(&ch->wait_peer, p, __ATOMIC_RELEASE);
      return;
    }
  }
}

/* Asks about every peer a blocked step waits on, not just the first: a live but slow peer must
 * not hide a dead one. */
static ncclResult_t chan_check_peers(host_chan_t* ch, const host_lane_t* lanes, int nlanes) {
  const exec_comm_t* comm = ch->ex->comm;
  if (comm->peer_check == NULL) return ncclSuccess;
  int last = HOST_NO_PEER;
  for (int i = 0; i < nlanes; i++) {
    if (lanes[i].pos >= lanes[i].nops) continue;
    for (int j = 0; j < lanes[i].nwait; j++) {
      int p = lanes[i].wait_peers[j];
      if (p < 0 || p == comm->rank || p == last) continue;
      CHECK(comm->peer_check(comm->arg, p));
      last = p;
    }
  }
  return ncclSuccess;
}

ncclResult_t host_chan_idle(host_chan_t* ch, const host_lane_t* lanes, int nlanes) {
  host_exec_t* ex = ch->ex;
  const exec_comm_t* comm = ex->comm;
  if (comm->abort_flag != NULL && __atomic_load_n(comm->abort_flag, __ATOMIC_ACQUIRE) != 0) {
    INFO(NCCL_COLL, "Host executor: rank %d channel %d aborted", comm->rank, ch->id);
    return ncclInternalError;
  }
  if (__atomic_load_n(&ex->stop, __ATOMIC_ACQUIRE)) return ncclInternalError; /* not the first */
  unsigned idle = ++ch->idle;
  if (idle <= HOST_SPIN_PASSES) {
    cpu_relax();
    return ncclSuccess;
  }
  uint64_t now = clock_ns();
  if (idle == HOST_SPIN_PASSES + 1) {
    ch->idle_since_ns = now;
    ch->last_check_ns = now;
    chan_note_wait(ch, lanes, nlanes, now);
  }
  if (now - ch->last_check_ns >= HOST_PEER_CHECK_NS) {
    ch->last_check_ns = now;
    CHECK(chan_check_peers(ch, lanes, nlanes));
  }
  uint64_t waited = now - ch->idle_since_ns;
  if (waited < HOST_YIELD_NS) {
    sched_yield();
    return ncclSuccess;
  }
  uint64_t ns = HOST_SLEEP_MIN_NS;
  while (ns < HOST_SLEEP_MAX_NS && ns < (waited - HOST_YIELD_NS) / 4) ns *= 2;
  if (ns > HOST_SLEEP_MAX_NS) ns = HOST_SLEEP_MAX_NS;
  struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)ns};
  nanosleep(&ts, NULL); /* an early wake-up (EINTR) is harmless: the caller polls again */
  return ncclSuccess;
}

ncclResult_t host_chan_stage_reserve(host_chan_t* ch, size_t bytes) {
  if (bytes <= ch->stage_bytes) return ncclSuccess;
  bytes = (bytes + 63) & ~(size_t)63;
  for (int i = 0; i < HOST_STAGES; i++) {
    char* p = realloc(ch->stage[i], bytes);
    if (p == NULL) {
      WARN("Host executor: out of memory for %zu bytes of LL staging on channel %d", bytes, ch->id);
      return ncclSystemError;
    }
    ch->stage[i] = p;
  }
  ch->stage_bytes = bytes;
  return ncclSuccess;
}

/* ---- Workers ----------------------------------------------------------------------------------
 */
static void exec_record(host_exec_t* ex, ncclResult_t res) {
  pthread_mutex_lock(&ex->mu);
  if (ex->result == ncclSuccess) ex->result = res;
  __atomic_store_n(&ex->stop, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&ex->mu);
}

/* A channel's list of the current launch, between the profiler's channel events. */
static ncclResult_t chan_run_list(host_chan_t* ch) {
  const exec_comm_t* comm = ch->ex->comm;
  if (comm->channel_event != NULL) comm->channel_event(comm->channel_arg, ch->id, 1);
  ncclResult_t res = host_list_run(ch, ch->works, ch->nwork);
  if (comm->channel_event != NULL) comm->channel_event(comm->channel_arg, ch->id, 0);
  return res;
}

static void* chan_main(void* arg) {
  host_chan_t* ch = arg;
  host_exec_t* ex = ch->ex;
  uint64_t seen = ch->gen_seen;
  thread_set_name(pthread_self(), "NCCL HostCh %d", ch->id);
  /* Channel 0 runs on the launching thread, which the caller has bound to the same buffer. */
  LOG_SINK_SCOPE(ex->comm->err_buf, ex->comm->err_len);
  pthread_mutex_lock(&ex->mu);
  for (;;) {
    while (ex->gen == seen && !ex->quit) pthread_cond_wait(&ex->wake, &ex->mu);
    if (ex->quit) break;
    seen = ex->gen;
    if (!ch->active) continue;
    pthread_mutex_unlock(&ex->mu);
    ncclResult_t res = chan_run_list(ch);
    if (RESULT_IS_ERROR(res)) exec_record(ex, res);
    pthread_mutex_lock(&ex->mu);
    if (--ex->pending == 0) pthread_cond_signal(&ex->done);
  }
  pthread_mutex_unlock(&ex->mu);
  return NULL;
}

static ncclResult_t chan_start(host_exec_t* ex, int c) {
  host_chan_t* ch = &ex->chans[c];
  if (ch->started) return ncclSuccess;
  ch->gen_seen = ex->gen; /* the launch about to happen is new to it */
  int err = pthread_create(&ch->thread, NULL, chan_main, ch);
  if (err != 0) {
    WARN("Host executor: pthread_create for channel %d failed: %s", c, strerror(err));
    return ncclSystemError;
  }
  ch->started = true;
  return ncclSuccess;
}

/* ---- executor_ops_t ------------------------------------------------------------------------- */
static ncclResult_t host_exec_init(const exec_comm_t* comm, void** state_out) {
  host_exec_t* ex = NULL;
  int err;
  CHECK(MEM_CALLOC(&ex, 1));
  ex->comm = comm;
  if ((err = pthread_mutex_init(&ex->mu, NULL)) != 0) goto fail_free;
  if ((err = pthread_cond_init(&ex->wake, NULL)) != 0) goto fail_mutex;
  if ((err = pthread_cond_init(&ex->done, NULL)) != 0) goto fail_wake;
  if ((err = pthread_cond_init(&ex->left, NULL)) != 0) goto fail_done;
  for (int c = 0; c < PLAN_MAX_CHANNELS; c++) {
    ex->chans[c].ex = ex;
    ex->chans[c].id = c;
    ex->chans[c].wait_peer = -1;
  }
  *state_out = ex;
  return ncclSuccess;
fail_done:
  pthread_cond_destroy(&ex->done);
fail_wake:
  pthread_cond_destroy(&ex->wake);
fail_mutex:
  pthread_mutex_destroy(&ex->mu);
fail_free:
  free(ex);
  WARN("Host executor: pthread_mutex_init/pthread_cond_init failed: %s", strerror(err));
  return ncclSystemError;
}

static bool plan_uses_net(const exec_comm_t* comm, const plan_t* plan) {
  for (int c = 0; c < plan->nchannels; c++) {
    if (plan->nwork[c] == 0) continue;
    const dev_channel_t* dc = &comm->channels[c];
    for (int p = 0; p < comm->nranks; p++) {
      if (dc->send[p] != NULL && (dc->send[p]->flags & CONN_FLAG_NET)) return true;
      if (dc->recv[p] != NULL && (dc->recv[p]->flags & CONN_FLAG_NET)) return true;
    }
  }
  return false;
}

/* A rank has finished a plan only once its NET sends have left the process: the proxy owns staged
 * steps until the network took them (head catches up with tail), and a rank that exits right
 * after a collective must not take its peers' data with it. */
static ncclResult_t exec_drain_net_sends(host_exec_t* ex, const plan_t* plan) {
  const exec_comm_t* comm = ex->comm;
  host_chan_t* ch = &ex->chans[0];
  for (int c = 0; c < plan->nchannels; c++) {
    if (plan->nwork[c] == 0) continue;
    const dev_channel_t* dc = &comm->channels[c];
    for (int p = 0; p < comm->nranks; p++) {
      const conn_fifo_t* f = dc->send[p];
      if (f == NULL || !(f->flags & CONN_FLAG_NET)) continue;
      host_lane_t waiting = {.pos = 0, .nops = 1, .nwait = 1, .wait_peers = {p}};
      ch->idle = 0;
      while (__atomic_load_n(f->head, __ATOMIC_ACQUIRE) <
             __atomic_load_n(f->tail, __ATOMIC_ACQUIRE))
        CHECK(host_chan_idle(ch, &waiting, 1));
    }
  }
  return ncclSuccess;
}

/* Work without peers, on the launching thread: copies (memmove: in place never reaches here, but a
 * user's overlapping buffers stay defined) and PreMulSum scalings. */
static ncclResult_t exec_local_run(const plan_t* plan) {
  for (int i = 0; i < plan->nlocal; i++) {
    const local_op_t* l = &plan->local[i];
    size_t esize = datatype_size((ncclDataType_t)l->dtype);
    if (esize == 0) {
      WARN("Host executor: a local operation of datatype %d is invalid", l->dtype);
      return ncclInternalError;
    }
    if (l->op.kind == DEV_OP_PREMULSUM)
      host_reduce(l->dst, l->src, NULL, l->count, l->dtype, &l->op);
    else
      memmove(l->dst, l->src, l->count * esize);
  }
  return ncclSuccess;
}

static ncclResult_t exec_run(host_exec_t* ex, const plan_t* plan);

/* Counts the launch in and out (fini waits for launches inside) and numbers it for the progress
 * watch. */
static ncclResult_t host_exec_launch(void* state, const plan_t* plan, exec_streams_t* streams) {
  host_exec_t* ex = state;
  if (streams != NULL) streams->captured = false; /* host memory: nothing is stream-ordered */
  pthread_mutex_lock(&ex->mu);
  if (ex->quit) {
    pthread_mutex_unlock(&ex->mu);
    WARN("Host executor: rank %d: a launch after the executor was shut down", ex->comm->rank);
    return ncclInternalError;
  }
  ex->in_launch++;
  uint64_t n = __atomic_add_fetch(&ex->launched, 1, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&ex->mu);
  __atomic_store_n(&ex->started, n, __ATOMIC_RELEASE);
  ncclResult_t res = exec_run(ex, plan);
  if (res == ncclSuccess) __atomic_store_n(&ex->finished, n, __ATOMIC_RELEASE);
  pthread_mutex_lock(&ex->mu);
  if (--ex->in_launch == 0) pthread_cond_broadcast(&ex->left);
  pthread_mutex_unlock(&ex->mu);
  return res;
}

static ncclResult_t exec_run(host_exec_t* ex, const plan_t* plan) {
  const exec_comm_t* comm = ex->comm;
  if (plan->nchannels < 0 || plan->nchannels > PLAN_MAX_CHANNELS ||
      plan->nchannels > comm->nchannels) {
    WARN("Host executor: a plan of %d channels on a communicator of %d channels", plan->nchannels,
         comm->nchannels);
    return ncclInternalError;
  }
  CHECK(exec_local_run(plan));
  if (comm->proxy_wake != NULL && plan_uses_net(comm, plan)) comm->proxy_wake(comm->arg);
  for (int c = 1; c < plan->nchannels; c++)
    if (plan->nwork[c] > 0) CHECK(chan_start(ex, c));

  pthread_mutex_lock(&ex->mu);
  ex->result = ncclSuccess;
  __atomic_store_n(&ex->stop, 0, __ATOMIC_RELEASE);
  ex->pending = 0;
  for (int c = 0; c < PLAN_MAX_CHANNELS; c++) {
    host_chan_t* ch = &ex->chans[c];
    ch->active = c < plan->nchannels && plan->nwork[c] > 0;
    ch->works = ch->active ? plan->works[c] : NULL;
    ch->nwork = ch->active ? plan->nwork[c] : 0;
    if (c > 0 && ch->active) ex->pending++;
  }
  ex->gen++;
  if (ex->pending > 0) pthread_cond_broadcast(&ex->wake);
  pthread_mutex_unlock(&ex->mu);

  host_chan_t* ch0 = &ex->chans[0];
  if (ch0->active) {
    ncclResult_t res = chan_run_list(ch0);
    if (RESULT_IS_ERROR(res)) exec_record(ex, res);
  }
  pthread_mutex_lock(&ex->mu);
  while (ex->pending > 0) pthread_cond_wait(&ex->done, &ex->mu);
  ncclResult_t res = ex->result;
  pthread_mutex_unlock(&ex->mu);
  if (res == ncclSuccess && plan_uses_net(comm, plan)) CHECK(exec_drain_net_sends(ex, plan));
  return res;
}

/* Waits (bounded) until no launch runs; false if one is still inside. Called with mu held. */
static bool exec_wait_launches(host_exec_t* ex) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += HOST_FINI_WAIT_S;
  while (ex->in_launch > 0) {
    if (pthread_cond_timedwait(&ex->left, &ex->mu, &deadline) == ETIMEDOUT) break;
  }
  return ex->in_launch == 0;
}

static ncclResult_t host_exec_fini(void* state) {
  host_exec_t* ex = state;
  if (ex == NULL) return ncclSuccess;
  pthread_mutex_lock(&ex->mu);
  ex->quit = true;
  if (!exec_wait_launches(ex)) {
    pthread_mutex_unlock(&ex->mu);
    WARN(
        "Host executor: rank %d: a launch did not stop within %d s of the communicator's end; "
        "its executor is left allocated",
        ex->comm->rank, HOST_FINI_WAIT_S);
    return ncclInternalError;
  }
  pthread_cond_broadcast(&ex->wake);
  pthread_mutex_unlock(&ex->mu);
  for (int c = 0; c < PLAN_MAX_CHANNELS; c++) {
    host_chan_t* ch = &ex->chans[c];
    if (ch->started) pthread_join(ch->thread, NULL);
    for (int i = 0; i < HOST_STAGES; i++) free(ch->stage[i]);
    free(ch->lanes);
  }
  pthread_cond_destroy(&ex->left);
  pthread_cond_destroy(&ex->done);
  pthread_cond_destroy(&ex->wake);
  pthread_mutex_destroy(&ex->mu);
  free(ex);
  return ncclSuccess;
}

/* launch returns once the plan has completed: nothing is ever outstanding. */
static ncclResult_t host_exec_wait(void* state) {
  (void)state;
  return ncclSuccess;
}

static void host_exec_progress(void* state, exec_progress_t* out) {
  host_exec_t* ex = state;
  out->launched = __atomic_load_n(&ex->launched, __ATOMIC_ACQUIRE);
  out->started = __atomic_load_n(&ex->started, __ATOMIC_ACQUIRE);
  out->done = __atomic_load_n(&ex->finished, __ATOMIC_ACQUIRE);
}

static int host_exec_waits(void* state, exec_wait_t* out, int max) {
  host_exec_t* ex = state;
  int n = 0;
  for (int c = 0; c < PLAN_MAX_CHANNELS && n < max; c++) {
    host_chan_t* ch = &ex->chans[c];
    int peer = __atomic_load_n(&ch->wait_peer, __ATOMIC_ACQUIRE);
    if (peer < 0) continue;
    out[n++] = (exec_wait_t){.channel = c,
                             .peer = peer,
                             .is_send = __atomic_load_n(&ch->wait_is_send, __ATOMIC_RELAXED),
                             .step = __atomic_load_n(&ch->wait_step, __ATOMIC_RELAXED),
                             .since_ns = __atomic_load_n(&ch->wait_since_ns, __ATOMIC_RELAXED)};
  }
  return n;
}

static int host_exec_positions(void* state, exec_conn_t* out, int max) {
  const exec_comm_t* comm = ((host_exec_t*)state)->comm;
  int n = 0;
  for (int c = 0; c < comm->nchannels && n + 2 <= max; c++) {
    const dev_channel_t* ch = &comm->channels[c];
    const conn_fifo_t* s = ch->ring_next >= 0 ? ch->send[ch->ring_next] : NULL;
    const conn_fifo_t* r = ch->ring_prev >= 0 ? ch->recv[ch->ring_prev] : NULL;
    if (s != NULL)
      out[n++] = (exec_conn_t){.channel = c,
                               .peer = ch->ring_next,
                               .is_send = 1,
                               .step = __atomic_load_n(&s->step, __ATOMIC_RELAXED)};
    if (r != NULL)
      out[n++] = (exec_conn_t){.channel = c,
                               .peer = ch->ring_prev,
                               .is_send = 0,
                               .step = __atomic_load_n(&r->step, __ATOMIC_RELAXED)};
  }
  return n;
}

static bool host_exec_launch_time(void* state, uint64_t launch, uint64_t* start_ns,
                                  uint64_t* end_ns) {
  (void)state, (void)launch, (void)start_ns, (void)end_ns;
  return false; /* no device clock: the timeline records the host's own times */
}

/* Host memory needs no device current and no capture mode. */
static ncclResult_t host_exec_enter(int dev, bool relax, exec_scope_t* scope) {
  (void)relax;
  *scope = (exec_scope_t){.dev = dev, .saved = -1};
  return ncclSuccess;
}

static void host_exec_leave(const exec_scope_t* scope) {
  (void)scope;
}

const executor_ops_t executor_host_ops = {
    .name = "host",
    .queues = false,
    .enter = host_exec_enter,
    .leave = host_exec_leave,
    .init = host_exec_init,
    .launch = host_exec_launch,
    .fini = host_exec_fini,
    .wait = host_exec_wait,
    .progress = host_exec_progress,
    .waits = host_exec_waits,
    .positions = host_exec_positions,
    .launch_time = host_exec_launch_time,
    .estimate_us = sim_estimate_us,
};
