/* The group scheduler: ncclGroupStart / ncclGroupEnd / ncclGroupSimulateEnd.
 *
 * Groups nest per thread. Each call appends a task to its communicator and puts the communicator
 * on this thread's group list; the outermost ncclGroupEnd runs every listed communicator's tasks.
 * Host executor: one blocking communicator runs on the calling thread; several run on one thread
 * each (a process may hold several ranks of one communicator, which must progress together); a
 * nonblocking one always runs on its own thread and ncclGroupEnd returns ncclInProgress, its
 * completion showing in comm->async_error (ncclCommGetAsyncError).
 * CUDA executor: launches are asynchronous, so every communicator of the group is planned and
 * launched on the calling thread, unless a connection must be made first (both ranks of a pair
 * take part in it at once): then each communicator connects and launches on its own thread as
 * above, and ncclGroupEnd joins those threads, nonblocking communicators included (their
 * groups return ncclSuccess). ncclGroupEnd never waits for the GPU.
 * Communicators created inside a group (ncclCommInitRank* between ncclGroupStart and End, as
 * nccl-tests does for several GPUs of one thread) initialize on their own threads; the outermost
 * ncclGroupEnd waits for the blocking ones. */
#include <stdlib.h>

#include "collectives/collectives.h"

/* ---- The layer's registration with core --------------------------------------------------------
 * Core reaches this layer only through this table (core.h), registered when the library loads.
 * Every other file of this layer finds a communicator's state through coll_of, defined beside the
 * constructor: a static link that pulls any of them in pulls the registration in too (and the
 * table pulls comm.c's init and free). */
static const core_upper_ops_t coll_upper_ops = {.comm_init = coll_comm_init,
                                                .comm_finalize = coll_comm_finalize,
                                                .comm_free = coll_comm_free,
                                                .comm_leave_group = coll_comm_leave_group,
                                                .group_open = coll_group_open,
                                                .group_add_init = coll_group_add_init,
                                                .group_set_error = coll_group_set_error};

__attribute__((constructor)) static void coll_upper_register(void) {
  core_upper_register(&coll_upper_ops);
}

struct coll_comm* coll_of(ncclComm_t comm) {
  return comm->coll;
}

static __thread int group_depth;
static __thread struct coll_comm* group_head;
static __thread struct coll_comm* group_tail;
static __thread ncclResult_t group_error;
static __thread ncclComm_t* group_inits; /* communicators initializing inside the open group */
static __thread int group_ninits, group_inits_cap;

int coll_group_depth(void) {
  return group_depth;
}

ncclResult_t coll_group_start(void) {
  group_depth++;
  return ncclSuccess;
}

void coll_group_set_error(ncclResult_t res) {
  if (group_depth > 0 && group_error == ncclSuccess && RESULT_IS_ERROR(res)) group_error = res;
}

static ncclResult_t group_list_grow(coll_task_list_t* l) {
  int cap = l->cap ? 2 * l->cap : 16;
  coll_task_t* items = realloc(l->items, (size_t)cap * sizeof(*items));
  if (items == NULL) {
    WARN("Out of memory queueing %d operations in one group", cap);
    return ncclSystemError;
  }
  l->items = items;
  l->cap = cap;
  return ncclSuccess;
}

ncclResult_t coll_task_append(struct coll_comm* cc, const coll_task_t* task) {
  if (!cc->in_group) CHECK(comm_hold(cc->comm, "a call in a group"));
  if (cc->pending.n == cc->pending.cap) {
    ncclResult_t res = group_list_grow(&cc->pending);
    if (res != ncclSuccess) {
      if (!cc->in_group) comm_release(cc->comm);
      return res;
    }
  }
  cc->pending.items[cc->pending.n++] = *task;
  if (!cc->in_group) {
    cc->in_group = true;
    cc->group_next = NULL;
    if (group_tail)
      group_tail->group_next = cc;
    else
      group_head = cc;
    group_tail = cc;
  }
  return ncclSuccess;
}

/* Calls that were enqueued but whose run failed before it started count as finished for the
 * progress watch, which would otherwise take them for a hang. */
static void group_abandon(struct coll_comm* cc) {
  uint64_t first, last;
  progress_plan_begin(cc->comm, UINT64_MAX, &first, &last);
  progress_plan_end(cc->comm, 0, true);
}

/* ncclGroupEnd is done with every communicator of the list: their group holds end (the last may
 * free a communicator that an abort retired meanwhile, so the list is read ahead). */
static void group_release(struct coll_comm* head) {
  struct coll_comm* next;
  for (struct coll_comm* cc = head; cc; cc = next) {
    next = cc->group_next;
    comm_release(cc->comm);
  }
}

void coll_group_forget(struct coll_comm* cc) {
  if (!cc->in_group) return;
  struct coll_comm* prev = NULL;
  for (struct coll_comm* it = group_head; it; prev = it, it = it->group_next) {
    if (it != cc) continue;
    if (prev)
      prev->group_next = it->group_next;
    else
      group_head = it->group_next;
    if (group_tail == it) group_tail = prev;
    break;
  }
  cc->in_group = false;
  cc->pending.n = 0;
  progress_rewind(cc->comm);
  comm_release(cc->comm);
}

/* Takes comm off this thread's list of communicators created in the open group (an abort or
 * destroy before ncclGroupEnd: that would wait on a freed communicator). */
static void group_inits_drop(ncclComm_t comm) {
  int n = 0;
  for (int i = 0; i < group_ninits; i++)
    if (group_inits[i] != comm) group_inits[n++] = group_inits[i];
  group_ninits = n;
}

void coll_comm_leave_group(ncclComm_t comm) {
  struct coll_comm* cc = coll_of(comm);
  if (cc != NULL) coll_group_forget(cc);
  group_inits_drop(comm); /* created (or split) in the group: not to be waited for once freed */
}

/* Takes this thread's list of communicators and resets the group. */
static struct coll_comm* group_take(void) {
  struct coll_comm* head = group_head;
  group_head = group_tail = NULL;
  for (struct coll_comm* cc = head; cc; cc = cc->group_next) cc->in_group = false;
  return head;
}

static void group_drop(struct coll_comm* head) {
  for (struct coll_comm* cc = head; cc; cc = cc->group_next) {
    cc->pending.n = 0;
    progress_rewind(cc->comm); /* they never run: as if never called */
  }
}

ncclResult_t coll_job_join(struct coll_comm* cc) {
  if (!cc->job_running) return ncclSuccess;
  pthread_join(cc->job_thread, NULL);
  cc->job_running = false;
  return cc->job_result;
}

/* ---- One communicator's part of a group: plan, connect, launch (through core) -------------- */
ncclResult_t coll_comm_plan(struct coll_comm* cc) {
  cc->planned = false;
  if (coll_plan_reuse(cc, &cc->running)) {
    cc->planned = true;
    return ncclSuccess;
  }
  const uint64_t gen = coll_regs_gen(cc);
  coll_plan_forget(cc); /* the build overwrites the kept plan */
  ncclResult_t res = coll_plan_build(cc, &cc->running, &cc->plan_nreqs);
  if (res != ncclSuccess) {
    cc->running.n = 0;
    return res;
  }
  coll_plan_keep(cc, &cc->running, gen);
  cc->planned = true;
  return ncclSuccess;
}

static ncclResult_t comm_run(struct coll_comm* cc, bool* captured);

/* The running group's distinct streams into cc->streams, its first task's first. */
static ncclResult_t comm_streams(struct coll_comm* cc) {
  cc->nstreams = 0;
  for (int i = 0; i < cc->running.n; i++) {
    cudaStream_t s = cc->running.items[i].stream;
    bool seen = false;
    for (int k = 0; k < cc->nstreams && !seen; k++) seen = cc->streams[k] == s;
    if (seen) continue;
    if (cc->nstreams == cc->streams_cap) {
      int cap = cc->streams_cap ? 2 * cc->streams_cap : 4;
      cudaStream_t* p = realloc(cc->streams, (size_t)cap * sizeof(*p));
      if (p == NULL) {
        WARN("Out of memory joining %d streams of one group", cap);
        return ncclSystemError;
      }
      cc->streams = p;
      cc->streams_cap = cap;
    }
    cc->streams[cc->nstreams++] = s;
  }
  return ncclSuccess;
}

/* *captured: the launch went into a CUDA graph being captured (it runs when the graph does). */
static ncclResult_t comm_launch_plan(struct coll_comm* cc, bool* captured) {
  CHECK(comm_streams(cc));
  CHECK(coll_prof_exec_hook(cc));
  exec_streams_t streams = {.s = cc->streams, .n = cc->nstreams};
  void* ev = coll_prof_launch_begin(cc, cc->nstreams > 0 ? cc->streams[0] : NULL);
  ncclResult_t res = comm_res_launch(cc->comm, &cc->plan, &streams);
  coll_prof_launch_end(cc, ev);
  *captured = streams.captured;
  return res;
}

/* Profiler events (plugins.c) bracket the launch: on the host executor they end when the plan has
 * run, on the CUDA executor once it has been launched (as stock's end when the launch is made). */
static ncclResult_t comm_launch(struct coll_comm* cc, bool* captured) {
  if (cc->plan.nlocal == 0 && !plan_has_channel_work(&cc->plan))
    return ncclSuccess; /* nothing to do: nothing is launched */
  coll_prof_run_begin(cc);
  ncclResult_t res = comm_launch_plan(cc, captured);
  coll_prof_run_end(cc);
  return res;
}

/* The progress watch learns which launches carry the calls of this run (core.h, progress). A run
 * that failed, or went into a graph capture, counts as finished: its failure was reported, and a
 * captured run's launches are the graph's. */
ncclResult_t coll_comm_run(struct coll_comm* cc) {
  exec_progress_t ep = {0};
  uint64_t first, last;
  bool captured = false;
  comm_res_progress(cc->comm, &ep);
  progress_plan_begin(cc->comm, ep.launched + 1, &first, &last);
  ncclResult_t res = comm_run(cc, &captured);
  comm_res_progress(cc->comm, &ep);
  progress_plan_end(cc->comm, ep.launched, RESULT_IS_ERROR(res) || captured);
  return res;
}

static ncclResult_t comm_run(struct coll_comm* cc, bool* captured) {
  ncclResult_t res = ncclSuccess;
  exec_scope_t scope;
  bool entered = false;
  if (!cc->planned) CHECK_GOTO(coll_comm_plan(cc), res, out);
  CHECK_GOTO(comm_res_enter(cc->comm, false, &scope), res, out);
  entered = true;
  if (cc->plan_nreqs > 0) /* only what does not exist yet: usually nothing */
    CHECK_GOTO(comm_res_connect(cc->comm, cc->reqs, cc->plan_nreqs), res, out);
  CHECK_GOTO(comm_launch(cc, captured), res, out);
out:
  if (entered) comm_res_leave(cc->comm, &scope);
  cc->planned = false;
  cc->running.n = 0;
  return res;
}

/* Errors after which the communicator cannot be trusted: a peer or the network failed. */
static bool group_error_is_fatal(ncclResult_t res) {
  return res == ncclRemoteError || res == ncclSystemError || res == ncclInternalError ||
         res == ncclUnhandledCudaError;
}

/* A communicator's part of the group is over: its result goes where the user looks for it. */
static void group_publish(struct coll_comm* cc, ncclResult_t res) {
  ncclComm_t comm = cc->comm;
  if (group_error_is_fatal(res)) comm_blame(comm, res); /* names the cascade's first failure */
  if (!comm->config.blocking) {
    atomic_store(&comm->async_error, RESULT_IS_ERROR(res) ? (int)res : (int)ncclSuccess);
  } else if (group_error_is_fatal(res)) {
    int expected = ncclSuccess;
    atomic_compare_exchange_strong(&comm->async_error, &expected, (int)res);
  }
}

static ncclResult_t group_run_comm(struct coll_comm* cc) {
  ncclResult_t res = coll_comm_run(cc);
  group_publish(cc, res);
  return res;
}

/* group_run_comm and coll_comm_plan with WARNs going to the communicator's last-error slot. */
static ncclResult_t group_run_comm_scoped(struct coll_comm* cc) {
  LOG_SINK_SCOPE(cc->comm->last_error, sizeof(cc->comm->last_error));
  return group_run_comm(cc);
}

static ncclResult_t group_plan_comm_scoped(struct coll_comm* cc) {
  LOG_SINK_SCOPE(cc->comm->last_error, sizeof(cc->comm->last_error));
  return coll_comm_plan(cc);
}

static void* group_thread(void* arg) {
  struct coll_comm* cc = arg;
  thread_set_name(pthread_self(), "NCCL Group %d", cc->rank);
  log_set_device(cc->comm->cuda_dev); /* coll_comm_run makes the device current itself */
  cc->job_result = group_run_comm_scoped(cc);
  return NULL;
}

static ncclResult_t group_thread_start(struct coll_comm* cc) {
  int err = pthread_create(&cc->job_thread, NULL, group_thread, cc);
  if (err != 0) {
    WARN("ncclGroupEnd: pthread_create failed: %s", strerror(err));
    return ncclSystemError;
  }
  cc->job_running = true;
  return ncclSuccess;
}

/* Communicators whose launches queue (GPU, simulated): plans every one on this thread. Returns
 * whether they can also launch here (no connection to make). A failed plan is published and leaves
 * that communicator out. */
static bool group_plan_all(struct coll_comm* head, ncclResult_t* res) {
  bool need_connect = false;
  for (struct coll_comm* cc = head; cc; cc = cc->group_next) {
    ncclResult_t r = group_plan_comm_scoped(cc);
    if (r != ncclSuccess) {
      cc->group_res = r;
      group_publish(cc, r);
      group_abandon(cc);
      if (*res == ncclSuccess) *res = r;
      continue;
    }
    need_connect |= cc->plan_nreqs > 0;
  }
  return !need_connect;
}

static ncclResult_t group_launch_all(struct coll_comm* head, ncclResult_t res) {
  for (struct coll_comm* cc = head; cc; cc = cc->group_next) {
    if (cc->group_res != ncclSuccess) continue;
    ncclResult_t r = group_run_comm_scoped(cc);
    if (RESULT_IS_ERROR(r) && res == ncclSuccess) res = r;
  }
  return res;
}

ncclResult_t coll_group_add_init(ncclComm_t comm) {
  if (group_ninits == group_inits_cap) {
    int cap = group_inits_cap ? 2 * group_inits_cap : 8;
    ncclComm_t* p = realloc(group_inits, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      WARN("Out of memory recording %d communicators created in one group", cap);
      return ncclSystemError;
    }
    group_inits = p;
    group_inits_cap = cap;
  }
  group_inits[group_ninits++] = comm;
  return ncclSuccess;
}

bool coll_group_open(void) {
  return group_depth > 0;
}

/* The communicators created in the group: waits for the blocking ones, aborting all of them once
 * one fails or when `abort` (a create call of the group failed): the others would wait for the
 * missing rank forever. ncclInProgress when a nonblocking one was among them, else the first
 * failure. */
static ncclResult_t group_wait_inits(bool abort) {
  int n = group_ninits;
  ncclComm_t* comms = group_inits;
  ncclResult_t res = ncclSuccess;
  bool any_nonblocking = false, failed = abort;
  group_ninits = 0;
  if (abort) /* a create call of the group failed: its rank will never join */
    for (int j = 0; j < n; j++) __atomic_store_n(comms[j]->abort_flag, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < n; i++) {
    if (!comms[i]->config.blocking) {
      any_nonblocking = true;
      continue;
    }
    while (!comm_job_idle(comms[i], 100)) {
      for (int j = 0; j < n && !failed; j++)
        failed = RESULT_IS_ERROR(atomic_load(&comms[j]->async_error));
      if (failed)
        for (int j = 0; j < n; j++) __atomic_store_n(comms[j]->abort_flag, 1, __ATOMIC_RELEASE);
    }
  }
  for (int i = 0; i < n && res == ncclSuccess; i++) {
    ncclResult_t r = (ncclResult_t)atomic_load(&comms[i]->async_error);
    if (comms[i]->config.blocking && RESULT_IS_ERROR(r)) {
      WARN(
          "ncclGroupEnd: rank %d's communicator creation, split or shrink in this group failed: %s",
          comms[i]->rank, comms[i]->last_error);
      res = r;
    }
  }
  if (res == ncclSuccess && any_nonblocking) res = ncclInProgress;
  return res;
}

static ncclResult_t group_run(struct coll_comm* head);

ncclResult_t coll_group_end(void) {
  if (group_depth == 0) {
    WARN("ncclGroupEnd: called without a matching ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--group_depth > 0) return ncclSuccess;
  coll_prof_group_end_begin();
  ncclResult_t err = group_error;
  group_error = ncclSuccess;
  ncclResult_t inits = group_ninits > 0 ? group_wait_inits(err != ncclSuccess) : ncclSuccess;
  struct coll_comm* head = group_take();
  if (err == ncclSuccess && RESULT_IS_ERROR(inits)) err = inits;
  ncclResult_t wins = coll_windows_share_deferred(); /* before the group's operations */
  if (err == ncclSuccess) err = wins;
  if (err != ncclSuccess) {
    /* An operation of the group failed its checks (WARNed then): nothing of the group runs. */
    group_drop(head);
    group_release(head);
    coll_prof_group_end_done();
    return err;
  }
  ncclResult_t res = group_run(head);
  group_release(head);
  coll_prof_group_end_done();
  return res == ncclSuccess ? inits : res; /* ncclInProgress: a nonblocking init still runs */
}

/* Runs the tasks of every communicator in head's list. */
static ncclResult_t group_run(struct coll_comm* head) {
  int ncomms = 0;
  bool any_nonblocking = false;
  for (struct coll_comm* cc = head; cc; cc = cc->group_next) {
    ncomms++;
    (void)coll_job_join(cc); /* a finished nonblocking group (its result is in async_error) */
    coll_task_list_t t = cc->running; /* empty: swap so both buffers are reused */
    cc->running = cc->pending;
    cc->pending = t;
    cc->pending.n = 0;
    if (!cc->comm->config.blocking) any_nonblocking = true;
  }
  if (ncomms == 0) return ncclSuccess;
  if (ncomms == 1 && !any_nonblocking) {
    return group_run_comm_scoped(head);
  }

  ncclResult_t res = ncclSuccess;
  bool all_queue = true; /* every launch returns before the peers run: one thread does them all */
  for (struct coll_comm* cc = head; cc; cc = cc->group_next) {
    all_queue = all_queue && cc->queues;
    cc->group_res = ncclSuccess;
  }
  if (all_queue) {
    bool inline_ok = group_plan_all(head, &res);
    if (inline_ok) return group_launch_all(head, res);
  }
  for (struct coll_comm* cc = head; cc; cc = cc->group_next) {
    if (cc->group_res != ncclSuccess) continue; /* its planning failed (published already) */
    if (!cc->comm->config.blocking) atomic_store(&cc->comm->async_error, (int)ncclInProgress);
    ncclResult_t r = group_thread_start(cc);
    if (r != ncclSuccess) {
      if (!cc->comm->config.blocking) atomic_store(&cc->comm->async_error, (int)r);
      cc->running.n = 0;
      group_abandon(cc);
      if (res == ncclSuccess) res = r;
    }
  }
  /* Blocking communicators complete before ncclGroupEnd returns. When launches queue (GPUs),
   * every communicator's thread only connects and launches (the kernels stay asynchronous), and
   * every rank of a pair takes part in the same group, so a nonblocking one is joined too: its
   * group then returns ncclSuccess like one that launched inline. PyTorch checks some nonblocking
   * calls (e.g. the ncclAlltoAll of all_to_all_single) with a macro that takes ncclInProgress as a
   * failure. */
  for (struct coll_comm* cc = head; cc; cc = cc->group_next) {
    if ((!cc->comm->config.blocking && !all_queue) || !cc->job_running) continue;
    ncclResult_t r = coll_job_join(cc);
    if (RESULT_IS_ERROR(r) && res == ncclSuccess) res = r;
  }
  if (res == ncclSuccess && any_nonblocking && !all_queue) res = ncclInProgress;
  return res;
}

NCCL_API(ncclResult_t, ncclGroupStart, void) {
  NVTX_API_RANGE("ncclGroupStart");
  INFO(NCCL_CALL, "ncclGroupStart depth %d", group_depth);
  return coll_group_start();
}

NCCL_API(ncclResult_t, ncclGroupEnd, void) {
  NVTX_API_RANGE("ncclGroupEnd");
  INFO(NCCL_CALL, "ncclGroupEnd depth %d", group_depth);
  return coll_group_end();
}

/* ---- Simulation ------------------------------------------------------------------------------ */
#define SIM_INFO_MAGIC 0x74685283u
#define SIM_INFO_MIN_VERSION NCCL_VERSION(2, 22, 0)

/* The cost table's sum over the tasks: where the simulator's model cannot time the plan. */
static double group_simulate_table(struct coll_comm* cc) {
  double total = 0;
  for (int i = 0; i < cc->pending.n; i++) {
    coll_task_t* t = &cc->pending.items[i];
    if (t->count == 0 || cc->nranks == 1) continue;
    if (t->func == FUNC_SEND || t->func == FUNC_RECV) {
      if (t->root == cc->rank) continue;
      topo_tuning_t tun = cc->tuning;
      size_t bytes = coll_task_bytes(t, cc->nranks);
      tun.nchannels = coll_op_nchannels(bytes, cc->nchannels, cc->min_channels);
      double us = topo_model_time_us(&tun, t->func, ALGO_RING, PROTO_SIMPLE, bytes);
      if (us > 0) total += us;
      continue;
    }
    if (coll_plan_choose(cc, t) == ncclSuccess && t->model_us > 0) total += t->model_us;
  }
  return total;
}

/* The group's plan on this communicator, as it would run, timed by the simulator's model (the
 * executor's estimate: every rank running the same plan from its own place), launch included.
 * Nothing is connected or launched; the plan's memory is the communicator's, idle in a blocking
 * group. */
static double group_simulate_comm(struct coll_comm* cc) {
  bool any = false;
  for (int i = 0; i < cc->pending.n; i++) any |= cc->pending.items[i].count > 0;
  if (!any) return 0;
  if (coll_job_join(cc) != ncclSuccess) return group_simulate_table(cc);
  coll_choice_t last = cc->last;
  int nreqs = 0;
  double us = -1;
  coll_plan_forget(cc); /* the build below overwrites the kept plan */
  if (coll_plan_build(cc, &cc->pending, &nreqs) == ncclSuccess)
    us = comm_res_estimate_us(cc->comm, &cc->plan);
  cc->last = last;
  cc->plan.nchannels = cc->plan.nlocal = cc->nlocal = 0;
  return us >= 0 ? us : group_simulate_table(cc);
}

NCCL_API(ncclResult_t, ncclGroupSimulateEnd, ncclSimInfo_t* simInfo) {
  NVTX_API_RANGE("ncclGroupSimulateEnd");
  const char* api = "ncclGroupSimulateEnd";
  if (group_depth == 0) {
    WARN("%s: called without a matching ncclGroupStart", api);
    return ncclInvalidUsage;
  }
  ncclResult_t res = ncclSuccess;
  if (simInfo == NULL) {
    WARN("%s: argument simInfo is NULL", api);
    res = ncclInvalidArgument;
  } else if (simInfo->magic != SIM_INFO_MAGIC || simInfo->size < sizeof(ncclSimInfo_t) ||
             simInfo->version < SIM_INFO_MIN_VERSION) {
    WARN(
        "%s: simInfo (magic 0x%x, size %zu, version %u) was not initialized with "
        "NCCL_SIM_INFO_INITIALIZER",
        api, simInfo->magic, simInfo->size, simInfo->version);
    res = ncclInvalidArgument;
  }
  if (res != ncclSuccess) {
    coll_group_set_error(res);
    group_depth = 1;
    (void)coll_group_end(); /* drops the group */
    return res;
  }
  if (--group_depth > 0) return ncclSuccess;
  ncclResult_t err = group_error;
  group_error = ncclSuccess;
  ncclResult_t inits = group_ninits > 0 ? group_wait_inits(err != ncclSuccess) : ncclSuccess;
  if (err == ncclSuccess && RESULT_IS_ERROR(inits)) err = inits;
  ncclResult_t wins = coll_windows_share_deferred();
  if (err == ncclSuccess) err = wins;
  struct coll_comm* head = group_take();
  double est = 0;
  if (err == ncclSuccess) {
    for (struct coll_comm* cc = head; cc; cc = cc->group_next) {
      double us = group_simulate_comm(cc); /* communicators run side by side: the longest counts */
      if (us > est) est = us;
    }
  }
  group_drop(head); /* nothing runs */
  group_release(head);
  if (err != ncclSuccess) return err;
  simInfo->estimatedTime = (float)est;
  INFO(NCCL_TUNING, "%s: estimated %.1f us", api, est);
  return ncclSuccess;
}
