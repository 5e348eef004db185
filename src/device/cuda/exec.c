/* The CUDA executor (executor_cuda_ops) and its state: runs a plan as kernel launches on the
 * user's stream, one block per channel (src/device/cuda/exec_block_device.cuh; the launch itself
 * is launch.c's). Launches are asynchronous and capturable; completion is stream-ordered. This
 * file sets the executor up and takes it down (abort flag mapping, status and progress records,
 * kernels, the device mirrors of the connections and the channels' table) and answers its views.
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

static ncclResult_t cuda_exec_fini(void* state) {
  cuda_exec_t* ex = state;
  if (ex == NULL) return ncclSuccess;
  ncclResult_t res = ncclSuccess;
  int cur = -1;
  if (cudaGetDevice(&cur) == cudaSuccess && cur != ex->device) (void)cudaSetDevice(ex->device);
  if (ex->side != NULL) (void)cudaStreamSynchronize(ex->side);
  cuda_local_fini(ex);
  cuda_join_fini(ex);
  cuda_conns_fini(ex); /* cudaFree waits for kernels still running */
  if (ex->h_status != NULL) {
    if (!ex->status_reported && ex->h_status->error == CUDA_ERR_SIZE) res = cuda_status_check(ex);
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

/* ---- Device mirrors of the connections (cuda_chan_sync, cuda_conn_mirror) ------------------
 * The transport creates connections lazily (on the first plan that needs them) and hands the
 * executor conn_fifo_t structures in host memory; their pointers (slots, head, tail, sizes) are
 * device-accessible when the executor is CUDA. The kernel advances each connection's step and
 * must find it again at the next launch, so every connection gets one mirror in device memory
 * (cuda_conn_t), made the first time a launch uses it, and keeps it until fini.
 *
 * The checks on the launch path are pointer comparisons; a write happens only when a connection
 * appears (or is replaced). Writes go through a private non-blocking stream and are waited for
 * before the launch, in relaxed stream-capture mode so that a first use inside a CUDA graph
 * capture works too; they never synchronise with the user's streams. */
/* ---- Relaxed capture mode around the rare setup work ---------------------------------------- */
static enum cudaStreamCaptureMode capture_relax(void) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
  return mode;
}

static void capture_restore(enum cudaStreamCaptureMode mode) {
  (void)cudaThreadExchangeStreamCaptureMode(&mode);
}

static ncclResult_t side_copy(cuda_exec_t* ex, void* dst, const void* src, size_t bytes) {
  ncclResult_t res = ncclSuccess;
  enum cudaStreamCaptureMode mode = capture_relax();
  CUDA_CHECK_GOTO(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ex->side), res, restore);
  ex->pending++;
restore:
  capture_restore(mode);
  return res;
}

static ncclResult_t dev_alloc(void** ptr, size_t bytes) {
  ncclResult_t res = ncclSuccess;
  enum cudaStreamCaptureMode mode = capture_relax();
  CUDA_CHECK_GOTO(cudaMalloc(ptr, bytes), res, restore);
restore:
  capture_restore(mode);
  return res;
}

ncclResult_t cuda_conns_wait(cuda_exec_t* ex) {
  ncclResult_t res = ncclSuccess;
  enum cudaStreamCaptureMode mode = capture_relax();
  ex->pending = 0;
  CUDA_CHECK_GOTO(cudaStreamSynchronize(ex->side), res, restore);
restore:
  capture_restore(mode);
  return res;
}

/* ---- Mirrors -------------------------------------------------------------------------------- */
static ncclResult_t pool_take(cuda_exec_t* ex, cuda_conn_t** out) {
  if (ex->npool == 0 || ex->pool_used == CUDA_POOL_BLOCK) {
    if (ex->npool == ex->pool_cap) {
      int cap = ex->pool_cap ? 2 * ex->pool_cap : 8;
      cuda_conn_t** p = realloc(ex->pool, (size_t)cap * sizeof(*p));
      if (p == NULL) {
        WARN("CUDA executor: out of memory for %d connection mirror blocks", cap);
        return ncclSystemError;
      }
      ex->pool = p;
      ex->pool_cap = cap;
    }
    void* blk = NULL;
    CHECK(dev_alloc(&blk, CUDA_POOL_BLOCK * sizeof(cuda_conn_t)));
    ex->pool[ex->npool++] = blk;
    ex->pool_used = 0;
  }
  *out = ex->pool[ex->npool - 1] + ex->pool_used++;
  return ncclSuccess;
}

static ncclResult_t conn_check(const cuda_exec_t* ex, int c, int peer, int is_send,
                               const conn_fifo_t* f) {
  for (int p = 0; p < PROTO_COUNT; p++) {
    if (f->buffs[p] == NULL) continue;
    size_t align = p == PROTO_LL128 ? LL128_LINE_BYTES : 16;
    size_t slot = fifo_slot_bytes(f->buff_bytes[p]);
    if ((uintptr_t)f->buffs[p] % align != 0 || slot % align != 0) {
      WARN(
          "CUDA executor: rank %d channel %d: the %s buffer of the FIFO %s rank %d is at %p with "
          "%zu-byte slots; the kernels need both aligned to %zu bytes",
          ex->comm->rank, c,
          p == PROTO_SIMPLE ? "Simple"
          : p == PROTO_LL   ? "LL"
                            : "LL128",
          is_send ? "to" : "from", peer, (void*)f->buffs[p], slot, align);
      return ncclInternalError;
    }
  }
  if (f->head == NULL || f->tail == NULL || f->sizes == NULL) {
    WARN("CUDA executor: rank %d channel %d: the FIFO %s rank %d has no head/tail/sizes counters",
         ex->comm->rank, c, is_send ? "to" : "from", peer);
    return ncclInternalError;
  }
  return ncclSuccess;
}

ncclResult_t cuda_conn_mirror(cuda_exec_t* ex, int c, int peer, int is_send, cuda_conn_t** out) {
  const exec_comm_t* comm = ex->comm;
  const dev_channel_t* dc = &comm->channels[c];
  cuda_chan_host_t* h = &ex->chans[c];
  if (peer < 0 || peer >= comm->nranks) {
    WARN("CUDA executor: rank %d channel %d: peer %d is not a rank of this communicator of %d",
         comm->rank, c, peer, comm->nranks);
    return ncclInternalError;
  }
  const conn_fifo_t* f =
      (is_send ? dc->send : dc->recv) ? (is_send ? dc->send : dc->recv)[peer] : NULL;
  if (f == NULL) {
    WARN(
        "CUDA executor: rank %d has no connection %s rank %d on channel %d; the planner must "
        "connect it before launching work that uses it",
        comm->rank, is_send ? "to" : "from", peer, c);
    return ncclInternalError;
  }
  if (h->mirrors == NULL)
    CHECK(mem_calloc((void**)&h->mirrors, 2 * (size_t)comm->nranks, sizeof(*h->mirrors)));
  cuda_mirror_t* m = &h->mirrors[is_send ? peer : comm->nranks + peer];
  if (m->host == f) {
    *out = m->dev;
    return ncclSuccess;
  }
  CHECK(conn_check(ex, c, peer, is_send, f));
  if (m->dev == NULL) CHECK(pool_take(ex, &m->dev));
  cuda_conn_t img;
  memset(&img, 0, sizeof(img));
  for (int p = 0; p < PROTO_COUNT; p++) {
    img.buffs[p] = f->buffs[p];
    img.buff_bytes[p] = f->buffs[p] != NULL ? f->buff_bytes[p] : 0;
  }
  img.flags = f->flags;
  img.head = (uint64_t*)f->head;
  img.tail = (uint64_t*)f->tail;
  img.sizes = (int*)f->sizes;
  img.dmbox = (uint64_t*)f->dmbox;
  img.step = f->step;
  CHECK(side_copy(ex, m->dev, &img, sizeof(img)));
  m->host = f;
  INFO(NCCL_INIT, "CUDA executor: rank %d channel %d: mirrored the FIFO %s rank %d (step %llu)",
       comm->rank, c, is_send ? "to" : "from", peer, (unsigned long long)f->step);
  *out = m->dev;
  return ncclSuccess;
}

/* ---- Channel table ----------------------------------------------------------------------------
 */
/* The connections the entry of channel c should point at now, and their peers. */
static void chan_current(const exec_comm_t* comm, int c, const conn_fifo_t** cur, int* peer) {
  const dev_channel_t* dc = &comm->channels[c];
  for (int i = 0; i < CUDA_CC_COUNT; i++) {
    peer[i] = cuda_entry_peer(comm, dc, i);
    cur[i] = cuda_entry_conn(comm, dc, i, peer[i]);
  }
}

ncclResult_t cuda_chan_write(cuda_exec_t* ex, int c) {
  const exec_comm_t* comm = ex->comm;
  const dev_channel_t* dc = &comm->channels[c];
  cuda_chan_host_t* h = &ex->chans[c];
  const conn_fifo_t* cur[CUDA_CC_COUNT];
  int peer[CUDA_CC_COUNT];
  chan_current(comm, c, cur, peer);

  cuda_chan_t* e = &h->entry;
  if (dc->ring_ranks != h->ring_src && dc->ring_ranks != NULL) {
    if (h->d_ring == NULL) CHECK(dev_alloc((void**)&h->d_ring, (size_t)comm->nranks * sizeof(int)));
    CHECK(side_copy(ex, h->d_ring, dc->ring_ranks, (size_t)comm->nranks * sizeof(int)));
    h->ring_src = dc->ring_ranks;
  }
  e->ring_ranks = h->d_ring;
  e->ring_index = dc->ring_index;
  e->tree_up = dc->tree_up;
  e->ndown = 0;
  for (int j = 0; j < TREE_MAX_CHILDREN; j++) {
    e->tree_down[j] = dc->tree_down[j];
    if (dc->tree_down[j] >= 0) e->ndown++;
  }
  cuda_conn_t* dev[CUDA_CC_COUNT];
  for (int i = 0; i < CUDA_CC_COUNT; i++) {
    dev[i] = NULL;
    if (cur[i] == NULL) continue;
    CHECK(cuda_conn_mirror(ex, c, peer[i], cuda_cc_is_send(i), &dev[i]));
  }
  e->ring_send = dev[CUDA_CC_RING_SEND];
  e->ring_recv = dev[CUDA_CC_RING_RECV];
  e->up_send = dev[CUDA_CC_UP_SEND];
  e->up_recv = dev[CUDA_CC_UP_RECV];
  for (int k = 0; k < TREE_MAX_CHILDREN; k++) {
    e->down_send[k] = dev[CUDA_CC_DOWN_SEND + k];
    e->down_recv[k] = dev[CUDA_CC_DOWN_RECV + k];
  }
  for (int k = 0; k < DIRECT_MAX_PEERS; k++) {
    e->peer_send[k] = dev[CUDA_CC_PEER_SEND + k];
    e->peer_recv[k] = dev[CUDA_CC_PEER_RECV + k];
  }
  CHECK(side_copy(ex, &ex->d_chans[c], e, sizeof(*e)));
  memcpy(h->src, cur, sizeof(cur));
  h->written = true;
  return ncclSuccess;
}

/* ---- Lifetime ------------------------------------------------------------------------------- */
ncclResult_t cuda_conns_init(cuda_exec_t* ex) {
  int nch = ex->comm->nchannels;
  if (nch < 1 || nch > PLAN_MAX_CHANNELS) {
    WARN("CUDA executor: a communicator with %d channels (1 to %d supported)", nch,
         PLAN_MAX_CHANNELS);
    return ncclInternalError;
  }
  CHECK(mem_calloc((void**)&ex->chans, (size_t)nch, sizeof(*ex->chans)));
  CHECK(dev_alloc((void**)&ex->d_chans, (size_t)nch * sizeof(cuda_chan_t)));
  CUDA_CHECK(cudaMemsetAsync(ex->d_chans, 0, (size_t)nch * sizeof(cuda_chan_t), ex->side));
  ex->pending++;
  return cuda_conns_flush(ex);
}

void cuda_conns_fini(cuda_exec_t* ex) {
  if (ex->chans != NULL) {
    for (int c = 0; c < ex->comm->nchannels; c++) {
      if (ex->chans[c].d_ring != NULL) (void)cudaFree(ex->chans[c].d_ring);
      free(ex->chans[c].mirrors);
    }
    free(ex->chans);
    ex->chans = NULL;
  }
  for (int i = 0; i < ex->npool; i++) (void)cudaFree(ex->pool[i]);
  free(ex->pool);
  ex->pool = NULL;
  ex->npool = ex->pool_cap = 0;
  if (ex->d_chans != NULL) (void)cudaFree(ex->d_chans);
  ex->d_chans = NULL;
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
