/* The CUDA executor (executor_cuda_ops): runs a plan as kernel launches on the user's stream,
 * one block per channel (src/device/cuda/exec_block_device.cuh). Launches are asynchronous and
 * capturable; completion is stream-ordered.
 *
 * Kernels wait on peers in bounded spins that read the communicator's abort flag, mapped into
 * the device's address space here, and exit cleanly once it is set. Errors a kernel detects (a
 * peer that sent a slot of the wrong size: the two ranks run different plans) are written to a
 * mapped status block; the next launch (or fini) reports them and fails: after such an error the
 * connections' positions no longer match the peers' and the communicator must be aborted. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "device/cuda/cuda_exec.h"
#include "device/cuda/staged_kernels.h"

/* ---- The abort flag as kernels see it ----------------------------------------------------------
 * Core keeps the flag in ordinary host memory. When the runtime cannot already map it (pinned
 * memory) and the device cannot read pageable memory, the page holding it is registered, once
 * per page for the whole process (several communicators' flags can share one page). */
typedef struct abort_page {
  void* page;
  int refs;
} abort_page_t;
#define ABORT_PAGES_MAX 64
static pthread_mutex_t abort_pages_mu = PTHREAD_MUTEX_INITIALIZER;
static abort_page_t abort_pages[ABORT_PAGES_MAX];

static void* abort_page_of(const volatile void* p) {
  uintptr_t ps = (uintptr_t)sysconf(_SC_PAGESIZE);
  return (void*)((uintptr_t)p & ~(ps - 1));
}

/* Registers page (or takes one more reference); false if it could not be registered. */
static bool abort_page_get(void* page) {
  bool ok = false;
  pthread_mutex_lock(&abort_pages_mu);
  int free_slot = -1;
  for (int i = 0; i < ABORT_PAGES_MAX; i++) {
    if (abort_pages[i].refs > 0 && abort_pages[i].page == page) {
      abort_pages[i].refs++;
      ok = true;
      goto out;
    }
    if (abort_pages[i].refs == 0 && free_slot < 0) free_slot = i;
  }
  if (free_slot < 0) goto out;
  if (cudaHostRegister(page, (size_t)sysconf(_SC_PAGESIZE),
                       cudaHostRegisterMapped | cudaHostRegisterPortable) != cudaSuccess) {
    (void)cudaGetLastError();
    goto out;
  }
  abort_pages[free_slot] = (abort_page_t){.page = page, .refs = 1};
  ok = true;
out:
  pthread_mutex_unlock(&abort_pages_mu);
  return ok;
}

static void abort_page_put(void* page) {
  pthread_mutex_lock(&abort_pages_mu);
  for (int i = 0; i < ABORT_PAGES_MAX; i++) {
    if (abort_pages[i].refs > 0 && abort_pages[i].page == page) {
      if (--abort_pages[i].refs == 0) (void)cudaHostUnregister(page);
      break;
    }
  }
  pthread_mutex_unlock(&abort_pages_mu);
}

static ncclResult_t abort_map(cuda_exec_t* ex) {
  volatile uint32_t* flag = ex->comm->abort_flag;
  void* dptr = NULL;
  if (flag != NULL) {
    if (cudaHostGetDevicePointer(&dptr, (void*)flag, 0) == cudaSuccess) { /* pinned already */
      ex->d_abort = dptr;
      return ncclSuccess;
    }
    (void)cudaGetLastError();
    int pageable = 0;
    if (cudaDeviceGetAttribute(&pageable, cudaDevAttrPageableMemoryAccess, ex->device) ==
            cudaSuccess &&
        pageable) {
      ex->d_abort = flag;
      return ncclSuccess;
    }
    (void)cudaGetLastError();
    void* page = abort_page_of(flag);
    if (abort_page_get(page)) {
      if (cudaHostGetDevicePointer(&dptr, (void*)flag, 0) == cudaSuccess) {
        ex->abort_page = page;
        ex->d_abort = dptr;
        return ncclSuccess;
      }
      (void)cudaGetLastError();
      abort_page_put(page);
    }
    INFO(NCCL_INIT,
         "CUDA executor: rank %d: kernels cannot see the abort flag (it could not be "
         "mapped); ncclCommAbort will not interrupt a kernel waiting on a peer",
         ex->comm->rank);
  }
  /* No flag, or none that kernels can read: one of ours that nobody sets. */
  CUDA_CHECK(cudaHostAlloc((void**)&ex->own_abort, sizeof(uint32_t),
                           cudaHostAllocMapped | cudaHostAllocPortable));
  *ex->own_abort = 0;
  CUDA_CHECK(cudaHostGetDevicePointer(&dptr, ex->own_abort, 0));
  ex->d_abort = dptr;
  return ncclSuccess;
}

/* ---- Launch progress (cuda_progress_t) ------------------------------------------------------- */
/* A mapped record the kernels mark and a device counter of the blocks that ended. Without them
 * launches still run; only the progress watch knows less (an INFO line says so). */
static ncclResult_t progress_init(cuda_exec_t* ex) {
  void* d = NULL;
  if (cudaHostAlloc((void**)&ex->h_progress, sizeof(cuda_progress_t),
                    cudaHostAllocMapped | cudaHostAllocPortable) != cudaSuccess)
    goto off;
  memset((void*)ex->h_progress, 0, sizeof(cuda_progress_t));
  if (cudaHostGetDevicePointer(&d, ex->h_progress, 0) != cudaSuccess) goto off;
  ex->d_progress = d;
  if (cudaMalloc((void**)&ex->d_progress_blocks, sizeof(unsigned int)) != cudaSuccess) {
    ex->d_progress_blocks = NULL;
    goto off;
  }
  CUDA_CHECK(cudaMemsetAsync(ex->d_progress_blocks, 0, sizeof(unsigned int), ex->side));
  CUDA_CHECK(cudaStreamSynchronize(ex->side));
  return ncclSuccess;
off:
  (void)cudaGetLastError();
  INFO(NCCL_INIT, "CUDA executor: rank %d: no launch progress record; hang reports see less",
       ex->comm->rank);
  if (ex->h_progress != NULL) (void)cudaFreeHost(ex->h_progress);
  ex->h_progress = NULL;
  ex->d_progress = NULL;
  return ncclSuccess;
}

static void progress_fini(cuda_exec_t* ex) {
  if (ex->d_progress_blocks != NULL) (void)cudaFree(ex->d_progress_blocks);
  if (ex->h_progress != NULL) (void)cudaFreeHost(ex->h_progress);
  ex->d_progress_blocks = NULL;
  ex->h_progress = NULL;
  ex->d_progress = NULL;
}

/* Loads kern, a kernel launched with the narrow block (direct or staged), now rather than inside
 * a later stream capture, and checks that it runs that many threads a block. *loaded false: its
 * module does not load on this device (built for other architectures). */
static ncclResult_t narrow_kernel_load(cuda_exec_t* ex, const void* kern, const char* what,
                                       bool* loaded) {
  struct cudaFuncAttributes attr;
  *loaded = false;
  CUDA_CHECK(cudaFuncGetAttributes(&attr, kern));
  *loaded = true;
  if (attr.maxThreadsPerBlock < CUDA_EXEC_NARROW_THREADS) {
    WARN("CUDA executor: %s runs at most %d threads per block on device %d (%d needed)", what,
         attr.maxThreadsPerBlock, ex->device, CUDA_EXEC_NARROW_THREADS);
    return ncclUnhandledCudaError;
  }
  return ncclSuccess;
}

/* ---- executor_ops_t ------------------------------------------------------------------------- */
static ncclResult_t cuda_exec_fini(void* state);

static ncclResult_t cuda_exec_init(const exec_comm_t* comm, void** state_out) {
  cuda_exec_t* ex = NULL;
  ncclResult_t res = ncclSuccess;
  CHECK(mem_calloc((void**)&ex, 1, sizeof(*ex)));
  ex->comm = comm;
  cudaStream_t side = NULL;
  cudaEvent_t done = NULL;
  cuda_status_t* status = NULL;
  CUDA_CHECK_GOTO(cudaGetDevice(&ex->device), res, free_ex);
  CUDA_CHECK_GOTO(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), res, free_ex);
  ex->side = side;
  CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), res, fail);
  ex->done = done;
  CHECK_GOTO(abort_map(ex), res, fail);
  CUDA_CHECK_GOTO(cudaHostAlloc((void**)&status, sizeof(cuda_status_t),
                                cudaHostAllocMapped | cudaHostAllocPortable),
                  res, fail);
  ex->h_status = status;
  memset((void*)ex->h_status, 0, sizeof(cuda_status_t));
  CUDA_CHECK_GOTO(cudaHostGetDevicePointer((void**)&ex->d_status, ex->h_status, 0), res, fail);
  CHECK_GOTO(progress_init(ex), res, fail);
  for (int i = 0; i < 2 * CUDA_KERN_COUNT; i++) {
    const bool wide = i >= CUDA_KERN_COUNT;
    const int k = i % CUDA_KERN_COUNT, threads = CUDA_EXEC_BLOCK_THREADS(wide);
    const void* kern = cuda_exec_kernel(k, wide);
    ex->kern[wide][k] = kern;
    struct cudaFuncAttributes attr;
    /* loads the module now, not inside a later stream capture */
    CUDA_CHECK_GOTO(cudaFuncGetAttributes(&attr, kern), res, no_kernels);
    CUDA_CHECK_GOTO(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         CUDA_EXEC_STAGE_BYTES),
                    res, fail);
    /* Ask for no more shared memory than the kernel uses: the rest of the SM's unified memory
     * stays L1 cache, which holds the threads' stack (a hint; a refusal is harmless). */
    int smem_sm = 0;
    if (cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, ex->device) ==
            cudaSuccess &&
        smem_sm > 0) {
      size_t need = CUDA_EXEC_STAGE_BYTES + attr.sharedSizeBytes + 1024;
      int pct = (int)((need * 100 + (size_t)smem_sm - 1) / (size_t)smem_sm);
      if (pct > 100) pct = 100;
      if (cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout, pct) !=
          cudaSuccess)
        (void)cudaGetLastError();
    }
    if (attr.maxThreadsPerBlock < threads) {
      WARN("CUDA executor: the kernel runs at most %d threads per block (%d needed)",
           attr.maxThreadsPerBlock, threads);
      res = ncclInternalError;
      goto fail;
    }
  }
  { /* the direct algorithms' kernel and the staged ones (one a datatype), loaded now too */
    bool loaded = true;
    ex->kern_direct = cuda_direct_kernel();
    res = narrow_kernel_load(ex, ex->kern_direct, "the direct kernel", &loaded);
    for (int t = 0; t < ncclNumTypes && res == ncclSuccess; t++)
      res = narrow_kernel_load(ex, cuda_staged_kernel(t), "a staged kernel", &loaded);
    if (!loaded) goto no_kernels;
    if (res != ncclSuccess) goto fail;
  }
  const int64_t nt = param_int(PARAM_NTHREADS);
  ex->wide_mode = nt == CUDA_EXEC_WIDE_THREADS     ? CUDA_WIDE_ALWAYS
                  : nt == CUDA_EXEC_NARROW_THREADS ? CUDA_WIDE_NEVER
                                                   : CUDA_WIDE_AUTO;
  if (nt != 0 && ex->wide_mode == CUDA_WIDE_AUTO)
    WARN(
        "NCCL_NTHREADS=%lld: Baton's kernels run %d or %d threads a block; ignoring it (each "
        "launch chooses)",
        (long long)nt, CUDA_EXEC_NARROW_THREADS, CUDA_EXEC_WIDE_THREADS);
  CHECK_GOTO(cuda_conns_init(ex), res, fail);
  INFO(NCCL_INIT,
       "CUDA executor: rank %d on device %d, %d channels, %d threads per block (%d when the "
       "items run Simple and one is a collective), up to %d items per launch",
       comm->rank, ex->device, comm->nchannels, CUDA_EXEC_NARROW_THREADS, CUDA_EXEC_WIDE_THREADS,
       CUDA_LARGE_WORKS);
  *state_out = ex;
  return ncclSuccess;
no_kernels:
  INFO(
      NCCL_INIT,
      "CUDA executor: Baton's kernels do not load on device %d; it was built for BATON_CUDA_ARCHS: "
      "rebuild with this GPU's architecture",
      ex->device);
fail:
  cuda_exec_fini(ex);
  return res;
free_ex:
  free(ex);
  return res;
}

/* A failure some earlier kernel recorded: reported once, then every launch fails. */
static ncclResult_t status_check(cuda_exec_t* ex) {
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

static void join_fini(cuda_exec_t* ex) {
  for (int i = 0; i < ex->njoin; i++) (void)cudaEventDestroy(ex->join[i]);
  (void)cudaGetLastError();
  free(ex->join);
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

static ncclResult_t cuda_exec_launch(void* state, const plan_t* plan, exec_streams_t* streams) {
  cuda_exec_t* ex = state;
  exec_streams_t none = {0};
  exec_streams_t* st = streams != NULL ? streams : &none;
  st->captured = false;
  if (plan == NULL) return ncclSuccess;
  if (!plan_has_channel_work(plan) && plan->nlocal == 0)
    return ncclSuccess; /* nothing to do: nothing is launched */
  CHECK(status_check(ex));
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess) cur = -1; /* unknown: make ours current, restore none */
  if (cur != ex->device) CUDA_CHECK(cudaSetDevice(ex->device));
  ncclResult_t res = launch_on(ex, plan, st);
  if (cur >= 0 && cur != ex->device) (void)cudaSetDevice(cur);
  return res;
}

static ncclResult_t cuda_exec_fini(void* state) {
  cuda_exec_t* ex = state;
  if (ex == NULL) return ncclSuccess;
  ncclResult_t res = ncclSuccess;
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != ex->device) (void)cudaSetDevice(ex->device);
  if (ex->side != NULL) (void)cudaStreamSynchronize(ex->side);
  cuda_local_fini(ex);
  join_fini(ex);
  cuda_conns_fini(ex); /* cudaFree waits for kernels still running */
  if (ex->h_status != NULL) {
    if (!ex->status_reported && ex->h_status->error == CUDA_ERR_SIZE) res = status_check(ex);
    (void)cudaFreeHost(ex->h_status);
  }
  cuda_split_free(&ex->split);
  progress_fini(ex);
  if (ex->own_abort != NULL) (void)cudaFreeHost(ex->own_abort);
  if (ex->abort_page != NULL) abort_page_put(ex->abort_page);
  if (ex->done != NULL) (void)cudaEventDestroy(ex->done);
  if (ex->side != NULL) (void)cudaStreamDestroy(ex->side);
  if (cur >= 0 && cur != ex->device) (void)cudaSetDevice(cur);
  free(ex);
  return res;
}

/* Launches of one communicator run one after the other (order_before), so the last one recorded
 * finishing means all of them have. Launches captured into graphs are the graph's business, and
 * plans of local copies alone (one rank, copies to self) use no resource of the communicator: the
 * user's stream orders them. */
static ncclResult_t cuda_exec_wait(void* state) {
  cuda_exec_t* ex = state;
  if (ex == NULL || !ex->have_last) return ncclSuccess;
  CHECK(mark_last(ex));
  CUDA_CHECK(cudaEventSynchronize(ex->done));
  return ncclSuccess; /* a kernel's error report waits for the next launch (status_check) */
}

/* Reads the kernels' marks; any thread. The largest numbers seen are kept (graph replays write
 * older ones). Without a progress record, a launch counts as started and done once issued. */
static void cuda_exec_progress(void* state, exec_progress_t* out) {
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

static int cuda_exec_waits(void* state, exec_wait_t* out, int max) {
  (void)state, (void)out, (void)max;
  return 0; /* the kernels' positions live in device memory */
}

static int cuda_exec_positions(void* state, exec_conn_t* out, int max) {
  (void)state, (void)out, (void)max;
  return 0; /* the kernels' positions live in device memory */
}

static bool cuda_exec_launch_time(void* state, uint64_t launch, uint64_t* start_ns,
                                  uint64_t* end_ns) {
  cuda_exec_t* ex = state;
  if (ex->h_progress == NULL || launch == 0) return false;
  const cuda_launch_time_t* t = &ex->h_progress->slots[launch % CUDA_PROGRESS_SLOTS];
  if (t->start_launch != launch || t->end_launch != launch) return false;
  uint64_t a = t->start_ns, b = t->end_ns;
  if (t->start_launch != launch || t->end_launch != launch || b < a) return false;
  *start_ns = a;
  *end_ns = b;
  return true;
}

/* A communicator's work on this thread happens on its device. */
static ncclResult_t cuda_exec_enter(int dev, bool relax, exec_scope_t* scope) {
  *scope = (exec_scope_t){.dev = dev, .saved = -1};
  CHECK(cuda_device_enter(dev, &scope->saved));
  if (relax) {
    scope->relaxed = true;
    scope->capture = (int)cuda_capture_relax();
  }
  return ncclSuccess;
}

static void cuda_exec_leave(const exec_scope_t* scope) {
  if (scope->relaxed) cuda_capture_restore((enum cudaStreamCaptureMode)scope->capture);
  cuda_device_leave(scope->dev, scope->saved);
}

const executor_ops_t executor_cuda_ops = {
    .name = "cuda",
    .queues = true,
    .enter = cuda_exec_enter,
    .leave = cuda_exec_leave,
    .init = cuda_exec_init,
    .launch = cuda_exec_launch,
    .fini = cuda_exec_fini,
    .wait = cuda_exec_wait,
    .progress = cuda_exec_progress,
    .waits = cuda_exec_waits,
    .positions = cuda_exec_positions,
    .launch_time = cuda_exec_launch_time,
    .estimate_us = sim_estimate_us,
};
