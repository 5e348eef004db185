/* One launch of the CUDA executor, from a plan to kernels on the user's stream: the device made
 * current for the communicator's work (enter, leave), the launch's streams joined and ordered
 * after the communicator's previous launch, the capture state asked once, plan.local beside the
 * kernel (local.c), each item packed for the kernel and the plan split over launches when one
 * parameter block cannot hold it; and the launches' progress as the kernels mark it.
 *
 * Packing: work_t -> cuda_work_t, and the split of a plan too large for one parameter block into
 * several launches on the same stream.
 *
 * The planner decided every item (steps clamped to the slots, the root's ring position,
 * point-to-point in bytes; copies to self are plan.local, run by local.c): packing looks up the
 * device mirrors of the connections an item uses, checking that each exists and holds a step.
 *
 * Splitting (rare: more than CUDA_LARGE_WORKS items). Launches on one stream run one after the
 * other, so a split must never put an item in a later launch than an item some peer needs to
 * finish first. Two rules keep that true:
 *  - Collectives (first in every channel's list, and the same lists on every rank): launch r
 *    takes items [r*Q, (r+1)*Q) of every channel, Q the same on every rank, so every rank's
 *    launch r holds exactly the partners of its items.
 *  - Point-to-point: item keys (d, j), d the distance to the peer along the rank order (send to
 *    rank+d, receive from rank-d) and j its position among the channel's items of the same
 *    direction and distance. A send and the receive it pairs with have the same key on their two
 *    ranks, and each direction's items appear in key order. A launch takes every item whose key
 *    is in a range [k0, k1), all channels together: an item then waits only for items with smaller
 *    keys, on any rank, and by induction on the key nothing waits forever. */
#include <pthread.h>
#include <stdlib.h>

#include "device/cuda/cuda_exec.h"
#include "device/cuda/staged_kernels.h"

/* ---- The launch: streams, capture, ordering ------------------------------------------------- */
/* A communicator's work on this thread happens on its device. */
ncclResult_t cuda_exec_enter(int dev, bool relax, exec_scope_t* scope) {
  *scope = (exec_scope_t){.dev = dev, .saved = -1};
  CHECK(cuda_device_enter(dev, &scope->saved));
  if (relax) {
    scope->relaxed = true;
    scope->capture = (int)cuda_capture_relax();
  }
  return ncclSuccess;
}

void cuda_exec_leave(const exec_scope_t* scope) {
  if (scope->relaxed) cuda_capture_restore((enum cudaStreamCaptureMode)scope->capture);
  cuda_device_leave(scope->dev, scope->saved);
}

/* A failure some earlier kernel recorded: reported once, then every launch fails. */
ncclResult_t cuda_status_check(cuda_exec_t* ex) {
  const cuda_status_t* s = ex->h_status;
  int err = s->error;
  if (err == CUDA_ERR_NONE) return ncclSuccess;
  if (!ex->status_reported) {
    ex->status_reported = true;
    if (err == CUDA_ERR_SIZE) {
      WARN(
          "CUDA executor: rank %d channel %d step %llu: a peer sent %d bytes where %d were "
          "expected; the ranks are running different plans (the communicator must be aborted)",
          ex->comm->rank, s->channel, s->step, s->got, s->expected);
    } else {
      WARN(
          "CUDA executor: rank %d: a kernel stopped on the abort flag (channel %d); the "
          "communicator must be destroyed",
          ex->comm->rank, s->channel);
    }
  }
  return ncclInternalError;
}

/* A communicator's kernels must run one after the other (each advances the connections'
 * positions the next one starts from). Launches on one stream are ordered already; when the
 * user moves to another stream, the new one waits for the last launch's stream. Inside a stream
 * capture the graph's own order applies and nothing is waited for.
 * The event is recorded on the last launch's stream only when it is needed (a switch of stream,
 * or a wait): it then also covers whatever the user queued there since, which only waits a
 * little longer. An event record per launch cost the host about a microsecond on every call. */
static ncclResult_t mark_last(cuda_exec_t* ex) {
  if (cudaEventRecord(ex->done, ex->last) == cudaSuccess) return ncclSuccess;
  (void)cudaGetLastError();
  /* the last launch's stream is gone (its owner destroyed it; its work still runs): the whole
   * device then (the event stays as it was: complete) */
  CUDA_CHECK(cudaDeviceSynchronize());
  return ncclSuccess;
}

static ncclResult_t order_before(cuda_exec_t* ex, cudaStream_t stream, bool capturing) {
  if (!capturing && ex->have_last && ex->last != stream) {
    CHECK(mark_last(ex));
    CUDA_CHECK(cudaStreamWaitEvent(stream, ex->done, 0));
  }
  return ncclSuccess;
}

static ncclResult_t order_after(cuda_exec_t* ex, cudaStream_t stream, bool capturing) {
  if (capturing) return ncclSuccess;
  ex->last = stream;
  ex->have_last = true;
  return ncclSuccess;
}

/* ---- The streams of one launch ---------------------------------------------------------------
 * A group's calls may name several streams: the launch runs on the first, after what each other
 * stream holds, and each other stream's later work waits for the launch. */
static ncclResult_t join_reserve(cuda_exec_t* ex, int n) {
  if (n <= ex->njoin) return ncclSuccess;
  cudaEvent_t* p = realloc(ex->join, (size_t)n * sizeof(*p));
  if (p == NULL) {
    WARN("Out of memory for %d stream events", n);
    return ncclSystemError;
  }
  ex->join = p;
  enum cudaStreamCaptureMode mode = cuda_capture_relax();
  ncclResult_t res = ncclSuccess;
  for (; ex->njoin < n; ex->njoin++)
    CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&ex->join[ex->njoin], cudaEventDisableTiming), res,
                    restore);
restore:
  cuda_capture_restore(mode);
  return res;
}

static ncclResult_t join_before(cuda_exec_t* ex, const exec_streams_t* st) {
  if (st->n <= 1) return ncclSuccess;
  CHECK(join_reserve(ex, st->n));
  for (int i = 1; i < st->n; i++) {
    CUDA_CHECK(cudaEventRecord(ex->join[i], st->s[i]));
    CUDA_CHECK(cudaStreamWaitEvent(st->s[0], ex->join[i], 0));
  }
  return ncclSuccess;
}

static ncclResult_t join_after(cuda_exec_t* ex, const exec_streams_t* st) {
  if (st->n <= 1) return ncclSuccess;
  CUDA_CHECK(cudaEventRecord(ex->join[0], st->s[0]));
  for (int i = 1; i < st->n; i++) CUDA_CHECK(cudaStreamWaitEvent(st->s[i], ex->join[0], 0));
  return ncclSuccess;
}

void cuda_join_fini(cuda_exec_t* ex) {
  for (int i = 0; i < ex->njoin; i++) (void)cudaEventDestroy(ex->join[i]);
  (void)cudaGetLastError();
  free(ex->join);
}

/* Launches of one communicator run one after the other (order_before), so the last one recorded
 * finishing means all of them have. Launches captured into graphs are the graph's business, and
 * plans of local copies alone (one rank, copies to self) use no resource of the communicator: the
 * user's stream orders them. */
ncclResult_t cuda_exec_wait(void* state) {
  cuda_exec_t* ex = state;
  if (ex == NULL || !ex->have_last) return ncclSuccess;
  CHECK(mark_last(ex));
  CUDA_CHECK(cudaEventSynchronize(ex->done));
  return ncclSuccess; /* a kernel's error report waits for the next launch (cuda_status_check) */
}

/* Copies to self of at most this many bytes in all, outside a capture, run on the launch's own
 * stream before the kernel instead of beside it: the fork and join cost the launching thread four
 * calls, more than the copy's own time (4 H100s, eager: Gather 256 KiB-4 MiB 37-43 -> 24-27 us,
 * AllToAll's median over 256 KiB-16 MiB 58 -> 50, with sized launches). In a graph the fork is
 * free at replay, so captures keep it. */
#define LOCAL_INLINE_MAX ((size_t)1 << 20)
static bool local_inline(const plan_t* plan, bool captured) {
  if (captured) return false;
  size_t bytes = 0;
  for (int i = 0; i < plan->nlocal; i++)
    bytes += plan->local[i].count * datatype_size((ncclDataType_t)plan->local[i].dtype);
  return bytes <= LOCAL_INLINE_MAX;
}

/* The plan on the first stream; the capture state is asked once, here. */
static ncclResult_t launch_on(cuda_exec_t* ex, const plan_t* plan, exec_streams_t* st) {
  const cudaStream_t stream = st->n > 0 ? st->s[0] : NULL;
  const bool kernel = plan_has_channel_work(plan);
  const bool local = plan->nlocal > 0;
  CHECK(join_before(ex, st));
  enum cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
  cudaError_t asked = cudaStreamIsCapturing(stream, &cs);
  if (asked != cudaSuccess) (void)cudaGetLastError();
  if (!kernel) { /* copies without peers touch no connection: no ordering against kernels */
    st->captured =
        asked != cudaSuccess || cs != cudaStreamCaptureStatusNone; /* unknown: as captured */
    CHECK(cuda_local_run(ex, plan, stream, !st->captured));
    return join_after(ex, st);
  }
  if (asked != cudaSuccess) /* the stream is unusable: the launch fails here */
    return cuda_call_failed(asked, "cudaStreamIsCapturing(stream, &cs)", __func__, __FILE__,
                            __LINE__);
  st->captured = cs != cudaStreamCaptureStatusNone;
  CHECK(order_before(ex, stream, st->captured));
  /* work without peers beside the kernel: small copies issued eagerly go first on the launch's
   * own stream; the others are forked before the kernel's launch and joined after it */
  const bool inline_local = local && local_inline(plan, st->captured);
  const bool forked = local && !inline_local;
  if (inline_local) CHECK(cuda_local_run(ex, plan, stream, true));
  if (forked) CHECK(cuda_local_fork(ex, stream));
  CHECK(cuda_plan_launch(ex, plan, stream));
  if (forked) CHECK(cuda_local_run(ex, plan, ex->local_stream, false));
  if (forked) CHECK(cuda_local_join(ex, stream));
  CHECK(order_after(ex, stream, st->captured));
  return join_after(ex, st);
}

ncclResult_t cuda_exec_launch(void* state, const plan_t* plan, exec_streams_t* streams) {
  cuda_exec_t* ex = state;
  exec_streams_t none = {0};
  exec_streams_t* st = streams != NULL ? streams : &none;
  st->captured = false;
  if (plan == NULL) return ncclSuccess;
  if (!plan_has_channel_work(plan) && plan->nlocal == 0)
    return ncclSuccess; /* nothing to do: nothing is launched */
  CHECK(cuda_status_check(ex));
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess) cur = -1; /* unknown: make ours current, restore none */
  if (cur != ex->device) CUDA_CHECK(cudaSetDevice(ex->device));
  ncclResult_t res = launch_on(ex, plan, st);
  if (cur >= 0 && cur != ex->device) (void)cudaSetDevice(cur);
  return res;
}

/* Reads the kernels' marks; any thread. The largest numbers seen are kept (graph replays write
 * older ones). Without a progress record, a launch counts as started and done once issued. */
void cuda_exec_progress(void* state, exec_progress_t* out) {
  cuda_exec_t* ex = state;
  uint64_t launched = __atomic_load_n(&ex->launched, __ATOMIC_RELAXED);
  if (ex->h_progress == NULL) {
    *out = (exec_progress_t){.launched = launched, .started = launched, .done = launched};
    return;
  }
  uint64_t s = ex->h_progress->started, d = ex->h_progress->done;
  uint64_t ms = __atomic_load_n(&ex->max_started, __ATOMIC_RELAXED);
  uint64_t md = __atomic_load_n(&ex->max_done, __ATOMIC_RELAXED);
  while (s > ms && !__atomic_compare_exchange_n(&ex->max_started, &ms, s, false, __ATOMIC_RELAXED,
                                                __ATOMIC_RELAXED)) {
  }
  while (d > md && !__atomic_compare_exchange_n(&ex->max_done, &md, d, false, __ATOMIC_RELAXED,
                                                __ATOMIC_RELAXED)) {
  }
  out->launched = launched;
  out->started = s > ms ? s : ms;
  out->done = d > md ? d : md;
}

/* ---- Packing and splitting ------------------------------------------------------------------- */
static bool func_is_p2p(int func) {
  return func == FUNC_SEND || func == FUNC_RECV;
}

static bool work_is_direct(const work_t* w) {
  return !func_is_p2p(w->func) && vocab_algo_is_direct(w->algo);
}

/* A staged direct item (device.h): it runs on the peers' staging and uses no connection. */
static bool work_is_staged(const work_t* w) {
  return !func_is_p2p(w->func) && vocab_algo_is_staged(w->algo, w->proto);
}

/* ---- One item ----------------------------------------------------------------------------------
 */
/* Data bytes one slot of f holds for proto (0: the FIFO has no buffer for it). */
static size_t fifo_capacity(const conn_fifo_t* f, int proto) {
  if (f == NULL || proto < 0 || proto >= PROTO_COUNT || f->buffs[proto] == NULL ||
      f->buff_bytes[proto] <= 0)
    return 0;
  return fifo_slot_data_bytes(f->buff_bytes[proto], proto);
}

/* The connection to (is_send) or from peer on channel c exists and a slot of it holds a step of
 * step_bytes. */
static ncclResult_t conn_check(cuda_exec_t* ex, int c, int peer, int is_send, int proto,
                               size_t step_bytes, bool* net) {
  const dev_channel_t* dc = &ex->comm->channels[c];
  conn_fifo_t** tab = is_send ? dc->send : dc->recv;
  const conn_fifo_t* f = tab != NULL ? tab[peer] : NULL;
  if (f == NULL) {
    WARN(
        "CUDA executor: rank %d has no connection %s rank %d on channel %d; the planner must "
        "connect it before launching work that uses it",
        ex->comm->rank, is_send ? "to" : "from", peer, c);
    return ncclInternalError;
  }
  size_t cap = fifo_capacity(f, proto);
  if (step_bytes > cap) {
    WARN(
        "CUDA executor: rank %d channel %d: a step of %zu bytes does not fit the %s slot of %zu "
        "bytes %s rank %d%s",
        ex->comm->rank, c, step_bytes,
        proto == PROTO_LL      ? "LL"
        : proto == PROTO_LL128 ? "LL128"
                               : "Simple",
        cap, is_send ? "to" : "from", peer,
        proto == PROTO_LL128 && cap == 0
            ? " (the connection has no LL128 buffer: set NCCL_PROTO to exclude LL128)"
            : "");
    return ncclInternalError;
  }
  if (f->flags & CONN_FLAG_NET) *net = true;
  return ncclSuccess;
}

/* A zero-copy item's probe fields (device.h, "Registered windows"). Every rank's kernel runs the
 * probe whatever its descriptor says, so what cannot be described is the planner's error, never
 * a quiet "no window" (that would still be safe, but would hide the bug). */
static ncclResult_t pack_zc(const exec_comm_t* comm, const work_t* w, cuda_work_t* o) {
  if (comm->zc_base_dev == NULL || w->zc_win >= ZC_MAX_WINDOWS || w->zc_win < -1 ||
      (uint64_t)w->zc_off >> CUDA_ZC_WIN_SHIFT != 0) {
    WARN(
        "CUDA executor: rank %d: a zero-copy item with window slot %d at offset %zu, %s (the "
        "planner sets zc only on a communicator with shared windows, slots below %d)",
        comm->rank, w->zc_win, w->zc_off,
        comm->zc_base_dev == NULL ? "but no device table of shared windows" : "out of range",
        ZC_MAX_WINDOWS);
    return ncclInternalError;
  }
  o->flags |= CUDA_WORK_ZC;
  o->zc_loc = (uint64_t)(w->zc_win + 1) << CUDA_ZC_WIN_SHIFT | (uint64_t)w->zc_off;
  return ncclSuccess;
}

static ncclResult_t pack_item(cuda_exec_t* ex, int c, const work_t* w, cuda_work_t* o, bool* net) {
  const exec_comm_t* comm = ex->comm;
  const dev_channel_t* dc = &comm->channels[c];
  size_t esize = datatype_size((ncclDataType_t)w->dtype);
  if (esize == 0 || w->func >= FUNC_COUNT || w->proto >= PROTO_COUNT ||
      w->op.kind >= DEV_OP_COUNT || w->chan_count == 0 || w->chunk == 0 || w->chunk > UINT32_MAX ||
      comm->nranks < 2) {
    WARN(
        "CUDA executor: work item with function %d, protocol %d, datatype %d, operation %d, "
        "%zu units in steps of %zu on channel %d of a communicator of %d ranks is invalid",
        w->func, w->proto, w->dtype, w->op.kind, w->chan_count, w->chunk, c, comm->nranks);
    return ncclInternalError;
  }
  memset(o, 0, sizeof(*o));
  cuda_work_geo(w, esize, o); /* the root as the item's lane names it (steps_item_root) */
  o->op = w->op.kind;
  o->scalar_on_device = w->op.scalar_on_device && w->op.scalar_ptr != NULL;
  if (w->zc && w->algo == ALGO_ONESHOT) CHECK(pack_zc(comm, w, o));

  if (func_is_p2p(w->func)) { /* point-to-point counts in bytes */
    int is_send = w->func == FUNC_SEND;
    if (w->root < 0 || w->root >= comm->nranks || w->root == comm->rank) {
      WARN("CUDA executor: %s peer %d on rank %d of %d (copies to self are local operations)",
           is_send ? "send" : "receive", w->root, comm->rank, comm->nranks);
      return ncclInternalError;
    }
    CHECK(conn_check(ex, c, w->root, is_send, w->proto, w->chunk, net));
    return cuda_conn_mirror(ex, c, w->root, is_send, &o->u.conn);
  }

  if (o->scalar_on_device)
    o->u.scalar_ptr = w->op.scalar_ptr;
  else
    o->u.scalar = w->op.scalar;
  /* nhosts 0: the planner checked that direct items stay on one host; staged only where this
   * communicator has staging */
  const vocab_caps_t caps = {.ll128 = true,
                             .direct = true,
                             .staged = comm->stage_slot >= 0,
                             .nranks = comm->nranks,
                             .nhosts = 0};
  if (!vocab_supports(w->func, w->algo, w->proto, &caps)) {
    WARN(
        "CUDA executor: algorithm %d cannot run function %d with protocol %d on %d ranks (tree "
        "and TwoShot run AllReduce only; the direct algorithms up to %d ranks, LL without "
        "Reduce, Simple only staged%s)",
        w->algo, w->func, w->proto, comm->nranks, DIRECT_MAX_RANKS,
        comm->stage_slot < 0 ? "; this communicator has no staging" : "");
    return ncclInternalError;
  }
  const size_t step = w->chunk * esize;
  if (w->algo == ALGO_RING) {
    CHECK(conn_check(ex, c, dc->ring_next, 1, w->proto, step, net));
    CHECK(conn_check(ex, c, dc->ring_prev, 0, w->proto, step, net));
    if ((w->func == FUNC_BROADCAST || w->func == FUNC_REDUCE) &&
        (w->root_idx < 0 || w->root_idx >= comm->nranks)) {
      WARN("CUDA executor: channel %d: ring position %d of the root is not one of %d ranks", c,
           w->root_idx, comm->nranks);
      return ncclInternalError;
    }
  } else if (w->algo == ALGO_TREE) {
    bool linked = dc->tree_up >= 0;
    for (int j = 0; j < TREE_MAX_CHILDREN; j++) linked |= dc->tree_down[j] >= 0;
    if (!linked) {
      WARN(
          "CUDA executor: rank %d is alone in channel %d's tree of %d ranks (no parent, no "
          "children)",
          comm->rank, c, comm->nranks);
      return ncclInternalError;
    }
    if (dc->tree_up >= 0) {
      CHECK(conn_check(ex, c, dc->tree_up, 1, w->proto, step, net));
      CHECK(conn_check(ex, c, dc->tree_up, 0, w->proto, step, net));
    }
    for (int j = 0; j < TREE_MAX_CHILDREN; j++) {
      if (dc->tree_down[j] < 0) continue;
      CHECK(conn_check(ex, c, dc->tree_down[j], 1, w->proto, step, net));
      CHECK(conn_check(ex, c, dc->tree_down[j], 0, w->proto, step, net));
    }
  } else if (w->proto == PROTO_SIMPLE) { /* OneShot, TwoShot staged */
    /* staged: no connection; the part, the parts and the round as the planner cut them */
    if (comm->zc_base_dev == NULL || w->chan_count > STAGE_MAX_PARTS ||
        w->chan_off >= w->chan_count || w->root < -1 || w->root >= comm->nranks) {
      WARN(
          "CUDA executor: rank %d: a staged item (part %zu of %zu, root %d) out of range (at "
          "most %d parts)",
          comm->rank, w->chan_off, w->chan_count, w->root, STAGE_MAX_PARTS);
      return ncclInternalError;
    }
    o->zc_loc = (uint64_t)comm->stage_slot | (uint64_t)comm->stage_half << 16;
  } else { /* OneShot, TwoShot with LL (a direct Broadcast's root: its rank, cuda_work_geo) */
    const size_t need =
        (o->flags & CUDA_WORK_ZC) && step < ZC_DESC_BYTES ? ZC_DESC_BYTES : step; /* the probe's */
    for (int p = 0; p < comm->nranks; p++) {
      if (p == comm->rank) continue;
      CHECK(conn_check(ex, c, p, 1, w->proto, need, net));
      CHECK(conn_check(ex, c, p, 0, w->proto, need, net));
    }
  }
  return ncclSuccess;
}

/* ---- Building one launch ----------------------------------------------------------------------
 */
typedef struct builder {
  int nblocks;
  int nworks;
  int chan_first;  /* first item of the channel being filled */
  bool net;        /* some item uses a connection the proxy drives */
  bool not_simple; /* some item runs LL or LL128: the launch takes the narrow kernel */
  bool coll;       /* some item is a collective: a launch of sends and receives alone takes the
                      narrow kernel too (on 4 H100s 256 threads beat 512 for them: AllToAll 256 KiB
                      13.6 us against 17.4, 16 MiB 64.3 against 71.9; Gather, Scatter, SendRecv
                      alike, within 2 % at 32 MiB) */
  bool direct;     /* the items are direct ones: the launch takes the direct kernel */
  int staged_type; /* every item is staged, of this datatype (the launch takes its staged
                      kernel); -1: some item is not, or the types differ */
} builder_t;

static void b_reset(builder_t* b) {
  *b = (builder_t){.nblocks = 0, .staged_type = -1};
}

static void b_open(builder_t* b) {
  b->chan_first = b->nworks;
}

static ncclResult_t b_item(cuda_exec_t* ex, builder_t* b, int c, const work_t* w) {
  if (b->nworks >= CUDA_LARGE_WORKS) {
    WARN("CUDA executor: internal error: a launch of more than %d items", CUDA_LARGE_WORKS);
    return ncclInternalError;
  }
  if (b->nworks > 0 && work_is_direct(w) != b->direct) {
    WARN("CUDA executor: internal error: a launch mixing direct and other items");
    return ncclInternalError;
  }
  CHECK(pack_item(ex, c, w, &ex->args.works[b->nworks], &b->net));
  b->not_simple |= w->proto != PROTO_SIMPLE;
  b->coll |= !func_is_p2p(w->func);
  b->direct = work_is_direct(w);
  const int staged = work_is_staged(w) ? (int)w->dtype : -1;
  b->staged_type = b->nworks == 0 || b->staged_type == staged ? staged : -1;
  b->nworks++;
  return ncclSuccess;
}

/* Closes the channel's block: a block of the launch walks the items packed since b_open. */
static void b_close(cuda_exec_t* ex, builder_t* b, int c) {
  if (b->nworks == b->chan_first) return;
  ex->args.hdr.first[b->nblocks] = (uint16_t)b->chan_first;
  ex->args.hdr.chan_id[b->nblocks] = (uint8_t)c;
  b->nblocks++;
}

/* ---- The launch ------------------------------------------------------------------------------
 */
/* The runtime's cudaLaunchKernel copies a kernel's whole declared parameter block, used or not: an
 * 8 KiB block cost the launching thread about 5 us a launch (a memory copy inside the driver: 30 %
 * of an eager 4-GPU AllToAll's thread at 4 MiB, against 1 % for stock). The driver's
 * cuLaunchKernel takes the buffer and the bytes in use (the header and the items), as stock
 * launches. The kernels' driver handles are looked up once per device. */
#define LAUNCH_FUNCS 64
static struct {
  int device;
  const void* kern;
  CUfunction fn;
} launch_funcs[LAUNCH_FUNCS];
static int launch_nfuncs;
static pthread_mutex_t launch_lock = PTHREAD_MUTEX_INITIALIZER;

static CUfunction launch_find(int n, int device, const void* kern) {
  for (int i = 0; i < n; i++)
    if (launch_funcs[i].kern == kern && launch_funcs[i].device == device)
      return __atomic_load_n(&launch_funcs[i].fn, __ATOMIC_RELAXED);
  return NULL;
}

/* A kernel's handle belongs to the device's context: looked up with the device current (the
 * launch's caller made it so), once per device and kernel, again when stale is given (the
 * context was made anew: a handle from the old one is refused). NULL: the runtime launches it. */
static CUfunction launch_func(int device, const void* kern, CUfunction stale) {
  CUfunction fn = launch_find(__atomic_load_n(&launch_nfuncs, __ATOMIC_ACQUIRE), device, kern);
  if (fn != NULL && fn != stale) return fn;
  pthread_mutex_lock(&launch_lock);
  int n = launch_nfuncs, at = n;
  for (int i = 0; i < n; i++)
    if (launch_funcs[i].kern == kern && launch_funcs[i].device == device) at = i;
  fn = at < n ? launch_funcs[at].fn : NULL;
  cudaFunction_t f;
  if ((fn == NULL || fn == stale) && at < LAUNCH_FUNCS) {
    fn = NULL;
    if (cudaGetFuncBySymbol(&f, kern) == cudaSuccess) {
      fn = (CUfunction)f;
      launch_funcs[at].device = device;
      launch_funcs[at].kern = kern;
      __atomic_store_n(&launch_funcs[at].fn, fn, __ATOMIC_RELAXED);
      if (at == n) __atomic_store_n(&launch_nfuncs, n + 1, __ATOMIC_RELEASE);
    } else {
      (void)cudaGetLastError(); /* the runtime's launch reports what is wrong */
    }
  }
  pthread_mutex_unlock(&launch_lock);
  return fn;
}

static ncclResult_t launch_sized(int device, const void* kern, dim3 grid, dim3 block, void* args,
                                 size_t bytes, size_t smem, cudaStream_t stream) {
  const cu_driver_t* d = cu_driver();
  CUfunction fn = d != NULL ? launch_func(device, kern, NULL) : NULL;
  if (fn == NULL) { /* no driver table: the runtime's launch, whole block */
    void* params[] = {args};
    CUDA_CHECK(cudaLaunchKernel(kern, grid, block, params, smem, stream));
    return ncclSuccess;
  }
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, args, CU_LAUNCH_PARAM_BUFFER_SIZE, &bytes,
                   CU_LAUNCH_PARAM_END};
  CUresult r = d->launch_kernel(fn, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                (unsigned int)smem, (CUstream)stream, NULL, extra);
  if (r == CUDA_ERROR_INVALID_HANDLE || r == CUDA_ERROR_INVALID_CONTEXT) {
    CUfunction again = launch_func(device, kern, fn);
    if (again != NULL && again != fn)
      r = d->launch_kernel(again, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                           (unsigned int)smem, (CUstream)stream, NULL, extra);
  }
  if (r != CUDA_SUCCESS) {
    WARN("CUDA executor: cuLaunchKernel of %zu parameter bytes failed: %s", bytes,
         cu_error_text(r));
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

static ncclResult_t b_launch(cuda_exec_t* ex, builder_t* b, cudaStream_t stream) {
  if (b->nblocks == 0) return ncclSuccess;
  cuda_args_hdr_t* h = &ex->args.hdr;
  h->first[b->nblocks] = (uint16_t)b->nworks;
  h->nblocks = b->nblocks;
  h->chans = ex->d_chans;
  h->abort_flag = ex->d_abort;
  h->status = ex->d_status;
  h->progress = ex->d_progress;
  h->progress_blocks = ex->d_progress_blocks;
  h->zc_base = ex->comm->zc_base_dev; /* core may have shared a window since the last launch */
  h->launch = ex->launched + 1;
  h->rank = ex->comm->rank;
  h->nranks = ex->comm->nranks;
  CHECK(cuda_conns_flush(ex));
  if (b->net && ex->comm->proxy_wake != NULL) ex->comm->proxy_wake(ex->comm->arg);
  const int which = b->nworks <= CUDA_TINY_WORKS     ? CUDA_KERN_TINY
                    : b->nworks <= CUDA_SMALL_WORKS  ? CUDA_KERN_SMALL
                    : b->nworks <= CUDA_MEDIUM_WORKS ? CUDA_KERN_MEDIUM
                                                     : CUDA_KERN_LARGE;
  const bool wide = ex->wide_mode == CUDA_WIDE_ALWAYS ||
                    (ex->wide_mode == CUDA_WIDE_AUTO && !b->not_simple && b->coll);
  dim3 grid = {(unsigned)b->nblocks, 1, 1};
  dim3 block = {CUDA_EXEC_BLOCK_THREADS(wide), 1, 1};
  const void* kern = ex->kern[wide][which];
  size_t smem = CUDA_EXEC_STAGE_BYTES;
  if (b->direct) { /* the small parameter block (the caller keeps to it), the narrow block */
    if (b->nworks > CUDA_SMALL_WORKS) {
      WARN("CUDA executor: internal error: a direct launch of %d items", b->nworks);
      return ncclInternalError;
    }
    const void* staged = b->staged_type >= 0 ? cuda_staged_kernel(b->staged_type) : NULL;
    kern = staged != NULL ? staged : ex->kern_direct;
    block.x = CUDA_EXEC_NARROW_THREADS;
    smem = 0;
  }
  const size_t bytes = offsetof(cuda_args_large_t, works) + (size_t)b->nworks * sizeof(cuda_work_t);
  CHECK(launch_sized(ex->device, kern, grid, block, &ex->args, bytes, smem, stream));
  __atomic_store_n(&ex->launched, ex->launched + 1, __ATOMIC_RELAXED); /* read by other threads */
  b_reset(b);
  return ncclSuccess;
}

/* ---- Splitting --------------------------------------------------------------------------------
 */
static ncclResult_t split_reserve(cuda_split_t* s, size_t n) {
  if (n <= s->cap) return ncclSuccess;
  uint64_t* k = realloc(s->keys, n * sizeof(*k));
  if (k == NULL) goto oom;
  s->keys = k;
  uint64_t* t = realloc(s->sorted, n * sizeof(*t));
  if (t == NULL) goto oom;
  s->sorted = t;
  s->cap = n;
  return ncclSuccess;
oom:
  WARN("CUDA executor: out of memory splitting a plan of %zu items", n);
  return ncclSystemError;
}

void cuda_split_free(cuda_split_t* s) {
  free(s->keys);
  free(s->sorted);
  s->keys = s->sorted = NULL;
  s->cap = 0;
}

/* Keys (d << 32 | j) of channel c's point-to-point items [lo, n) into keys[lo..n). */
static void p2p_keys(const cuda_exec_t* ex, const work_t* works, int lo, int n, uint64_t* keys,
                     uint64_t* tmp) {
  int nranks = ex->comm->nranks, rank = ex->comm->rank;
  int m = 0;
  for (int i = lo; i < n; i++) {
    const work_t* w = &works[i];
    int d = w->func == FUNC_SEND ? (w->root - rank + nranks) % nranks
                                 : (rank - w->root + nranks) % nranks;
    uint64_t group = (uint64_t)d * 2 + (w->func == FUNC_SEND);
    tmp[m++] = group << 32 | (uint64_t)(i - lo);
  }
  qsort(tmp, (size_t)m, sizeof(*tmp), u64_cmp);
  uint64_t prev = UINT64_MAX, j = 0;
  for (int k = 0; k < m; k++) {
    uint64_t group = tmp[k] >> 32;
    j = group == prev ? j + 1 : 0;
    prev = group;
    keys[lo + (int)(tmp[k] & 0xffffffffu)] = (group >> 1) << 32 | j;
  }
}

/* The collectives (the first ncoll[c] items of each channel) in launches of at most cap items:
 * launch r takes items [r*q, (r+1)*q) of every channel, q the same on every rank, so every rank's
 * launch r holds exactly the partners of its items. */
static ncclResult_t launch_rounds(cuda_exec_t* ex, const plan_t* plan, const int* ncoll, int cap,
                                  cudaStream_t stream) {
  int nchan_coll = 0, max_coll = 0;
  for (int c = 0; c < plan->nchannels; c++) {
    if (ncoll[c] > 0) nchan_coll++;
    if (ncoll[c] > max_coll) max_coll = ncoll[c];
  }
  if (nchan_coll == 0) return ncclSuccess;
  builder_t b;
  b_reset(&b);
  const int q = cap / nchan_coll;
  if (q < 1) {
    WARN("CUDA executor: internal error: collectives on %d channels cannot share a launch of %d",
         nchan_coll, cap);
    return ncclInternalError;
  }
  for (int lo = 0; lo < max_coll; lo += q) {
    for (int c = 0; c < plan->nchannels; c++) {
      int hi = lo + q < ncoll[c] ? lo + q : ncoll[c];
      if (lo >= hi) continue;
      b_open(&b);
      for (int i = lo; i < hi; i++) CHECK(b_item(ex, &b, c, &plan->works[c][i]));
      b_close(ex, &b, c);
    }
    CHECK(b_launch(ex, &b, stream));
  }
  return ncclSuccess;
}

static ncclResult_t launch_split(cuda_exec_t* ex, const plan_t* plan, cudaStream_t stream,
                                 size_t total) {
  cuda_split_t* s = &ex->split;
  CHECK(split_reserve(s, total));
  int ncoll[PLAN_MAX_CHANNELS];
  size_t base[PLAN_MAX_CHANNELS];
  size_t at = 0;
  for (int c = 0; c < plan->nchannels; c++) {
    const work_t* ws = plan->works[c];
    int n = plan->nwork[c], i = 0;
    while (i < n && !func_is_p2p(ws[i].func)) i++;
    ncoll[c] = i;
    for (int k = i; k < n; k++) {
      if (!func_is_p2p(ws[k].func)) {
        WARN(
            "CUDA executor: a plan of %zu items (more than one launch holds) has collectives "
            "after point-to-point items on channel %d; it cannot be split safely",
            total, c);
        return ncclInternalError;
      }
    }
    base[c] = at;
    at += (size_t)n;
  }
  builder_t b;
  b_reset(&b);
  CHECK(launch_rounds(ex, plan, ncoll, CUDA_LARGE_WORKS, stream));
  /* Point-to-point: key ranges over all channels. */
  size_t nkeys = 0;
  for (int c = 0; c < plan->nchannels; c++) {
    p2p_keys(ex, plan->works[c], ncoll[c], plan->nwork[c], s->keys + base[c], s->sorted);
  }
  for (int c = 0; c < plan->nchannels; c++)
    for (int i = ncoll[c]; i < plan->nwork[c]; i++)
      s->sorted[nkeys++] = s->keys[base[c] + (size_t)i];
  qsort(s->sorted, nkeys, sizeof(*s->sorted), u64_cmp);
  size_t k = 0;
  while (k < nkeys) {
    /* the longest run of whole key groups that fits one launch */
    size_t end = k;
    while (end < nkeys) {
      size_t g = end;
      while (g < nkeys && s->sorted[g] == s->sorted[end]) g++;
      if (g - k > (size_t)CUDA_LARGE_WORKS && end > k) break;
      end = g;
    }
    uint64_t k0 = s->sorted[k], k1 = s->sorted[end - 1];
    for (int c = 0; c < plan->nchannels; c++) {
      bool open = false;
      for (int i = ncoll[c]; i < plan->nwork[c]; i++) {
        uint64_t key = s->keys[base[c] + (size_t)i];
        if (key < k0 || key > k1) continue;
        if (!open) b_open(&b);
        open = true;
        CHECK(b_item(ex, &b, c, &plan->works[c][i]));
      }
      if (open) b_close(ex, &b, c);
    }
    CHECK(b_launch(ex, &b, stream));
    k = end;
  }
  return ncclSuccess;
}

/* ---- Entry ------------------------------------------------------------------------------------
 */
ncclResult_t cuda_plan_launch(cuda_exec_t* ex, const plan_t* plan, cudaStream_t stream) {
  if (plan->nchannels > ex->comm->nchannels) {
    WARN("CUDA executor: a plan over %d channels on a communicator of %d", plan->nchannels,
         ex->comm->nchannels);
    return ncclInternalError;
  }
  size_t total = 0;
  for (int c = 0; c < plan->nchannels; c++) {
    if (plan->nwork[c] <= 0) continue;
    total += (size_t)plan->nwork[c];
    /* the channel's entry (its connections) for the collectives that use connections, of the
     * kinds they read: staged items use none, and syncing 32 channels' entries for them cost the
     * host 10 % of an eager 64 KiB all-reduce on 4 H100s (a sampled profile) */
    unsigned uses = 0;
    for (int i = 0; i < plan->nwork[c]; i++) {
      const work_t* w = &plan->works[c][i];
      if (func_is_p2p(w->func) || work_is_staged(w)) continue;
      uses |= w->algo == ALGO_TREE ? CUDA_CHAN_USES_TREE
              : work_is_direct(w)  ? CUDA_CHAN_USES_PEERS
                                   : CUDA_CHAN_USES_RING;
    }
    if (uses != 0) CHECK(cuda_chan_sync(ex, c, uses));
  }
  if (total == 0) return ncclSuccess;
  /* Direct collectives (all of the plan's collectives or none: plan.c) go first, in the direct
   * kernel; then the point-to-point items, as on every rank. */
  int ncoll[PLAN_MAX_CHANNELS];
  bool direct = false;
  for (int c = 0; c < plan->nchannels; c++) {
    ncoll[c] = 0;
    while (ncoll[c] < plan->nwork[c] && !func_is_p2p(plan->works[c][ncoll[c]].func)) ncoll[c]++;
    for (int i = 0; i < ncoll[c]; i++) direct |= work_is_direct(&plan->works[c][i]);
  }
  plan_t rest;
  if (direct) {
    CHECK(launch_rounds(ex, plan, ncoll, CUDA_SMALL_WORKS, stream));
    rest = *plan;
    total = 0;
    for (int c = 0; c < plan->nchannels; c++) {
      rest.works[c] = plan->works[c] + ncoll[c];
      rest.nwork[c] = plan->nwork[c] - ncoll[c];
      total += (size_t)rest.nwork[c];
    }
    if (total == 0) return ncclSuccess;
    plan = &rest;
  }
  if (total > (size_t)CUDA_LARGE_WORKS) return launch_split(ex, plan, stream, total);
  builder_t b;
  b_reset(&b);
  for (int c = 0; c < plan->nchannels; c++) {
    if (plan->nwork[c] <= 0) continue;
    b_open(&b);
    for (int i = 0; i < plan->nwork[c]; i++) CHECK(b_item(ex, &b, c, &plan->works[c][i]));
    b_close(ex, &b, c);
  }
  return b_launch(ex, &b, stream);
}
