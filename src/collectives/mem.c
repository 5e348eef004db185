/* Memory allocation (ncclMemAlloc / ncclMemFree) and buffer registration.
 *
 * ncclMemAlloc gives GPU memory when the calling thread has a CUDA device: a cuMem allocation
 * (granularity-rounded, exportable as a POSIX file descriptor where the driver allows it, mapped
 * read-write for the device and every device that can access it as a peer), or cudaMalloc when
 * the driver API or virtual memory management is unavailable (or NCCL_CUMEM_ENABLE=0). Without a
 * GPU it gives page-aligned, zeroed host memory (host executor): a memfd mapped shared, so that
 * the other processes of the host can map a window on it. A small registry remembers every
 * allocation, so ncclMemFree releases each the way it was made and rejects other pointers.
 *
 * Registration: no buffer has to be registered for correctness (the executors copy through the
 * connection FIFOs). ncclCommRegister records the buffer in a table owned by the communicator and
 * returns a pointer to the record as the handle; the data path is unchanged. ncclCommWindowRegister
 * (collective) records it and asks core to share it with every rank (core/windows.c): a shared
 * window is read in place by OneShot (device.h, "Registered windows read in place"). Deregistration
 * looks the handle up in the table before touching it: a wild pointer, a handle already
 * deregistered or one of another communicator is ncclInvalidArgument with a WARN, never a
 * dereference. The communicator releases what is left at destroy. Collectives give the same
 * results on registered and unregistered buffers, on either executor. */
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collectives/collectives.h"

/* One registration: a buffer (ncclCommRegister's handle) or a window (ncclWindow_t points at
 * one; the type is opaque to users). */
typedef enum { MEM_REG_BUFFER = 0, MEM_REG_WINDOW } mem_reg_kind_t;
struct ncclWindow_vidmem {
  mem_reg_kind_t kind;
  void* buff;
  size_t size;
  int flags;             /* NCCL_WIN_* (windows) */
  int slot;              /* windows shared with every rank: the slot (core/windows.c), else -1 */
  comm_window_t* shared; /* core's record of the sharing (NULL: not shared) */
  uint32_t seq;          /* windows: the registration's number, the same on every rank */
};

/* ---- Allocation registry ------------------------------------------------------------------- */
typedef enum { MEM_KIND_HOST = 0, MEM_KIND_CUMEM, MEM_KIND_CUDA } mem_kind_t;

typedef struct mem_alloc {
  void* ptr;
  size_t bytes; /* mapped size (cuMem, host) */
  mem_kind_t kind;
  int dev;
  CUmemGenericAllocationHandle handle;
  int fd; /* host memory: the memfd behind the mapping (-1: plain heap memory) */
} mem_alloc_t;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_alloc_t* mem_allocs;
static int mem_nallocs, mem_cap;

static ncclResult_t mem_track(const mem_alloc_t* a) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&mem_lock);
  if (mem_nallocs == mem_cap) {
    int cap = mem_cap ? 2 * mem_cap : 16;
    mem_alloc_t* p = realloc(mem_allocs, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      WARN("ncclMemAlloc: out of memory recording %d allocations", cap);
      res = ncclSystemError;
      goto out;
    }
    mem_allocs = p;
    mem_cap = cap;
  }
  mem_allocs[mem_nallocs++] = *a;
out:
  pthread_mutex_unlock(&mem_lock);
  return res;
}

/* Removes ptr's record into *out; false when ptr was not allocated by ncclMemAlloc. */
static bool mem_untrack(void* ptr, mem_alloc_t* out) {
  bool found = false;
  pthread_mutex_lock(&mem_lock);
  for (int i = 0; i < mem_nallocs; i++) {
    if (mem_allocs[i].ptr != ptr) continue;
    *out = mem_allocs[i];
    mem_allocs[i] = mem_allocs[--mem_nallocs];
    found = true;
    break;
  }
  pthread_mutex_unlock(&mem_lock);
  return found;
}

/* ---- GPU allocations ------------------------------------------------------------------------ */
/* Probes: any failure means no cuMem, and the allocation takes cudaMalloc. */
static bool mem_cumem_usable(int dev) {
  const cu_driver_t* d = cu_driver();
  CUdevice cdev;
  int vmm = 0;
  if (param_int(PARAM_CUMEM_ENABLE) == 0 || d == NULL || d->device_get(&cdev, dev) != CUDA_SUCCESS)
    return false;
  if (d->device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                              cdev) != CUDA_SUCCESS)
    return false;
  return vmm != 0;
}

/* Read-write access for dev and every device that can reach dev's memory as a peer. */
static ncclResult_t mem_cumem_access(CUdeviceptr p, size_t bytes, int dev) {
  const cu_driver_t* d = cu_driver();
  int ndev = comm_device_count();
  CUmemAccessDesc* acc = NULL;
  CUdevice cdev;
  size_t n = 0;
  ncclResult_t res = ncclSuccess;
  CHECK(mem_calloc((void**)&acc, (size_t)(ndev > 0 ? ndev : 1), sizeof(*acc)));
  CU_CHECK_GOTO(d->device_get(&cdev, dev), res, out);
  acc[n++] = cu_mem_access_rw(cdev);
  for (int peer = 0; peer < ndev; peer++) {
    int can = 0;
    CUdevice cpeer;
    if (peer == dev) continue;
    if (cudaDeviceCanAccessPeer(&can, peer, dev) != cudaSuccess) {
      (void)cudaGetLastError(); /* a probe: no access for that peer */
      continue;
    }
    if (can && d->device_get(&cpeer, peer) == CUDA_SUCCESS) acc[n++] = cu_mem_access_rw(cpeer);
  }
  if (d->mem_set_access(p, bytes, acc, n) != CUDA_SUCCESS && n > 1) {
    INFO(NCCL_ALLOC, "ncclMemAlloc: peer access to device %d's memory refused; local access only",
         dev);
    n = 1;
  }
  if (n == 1) CU_CHECK_GOTO(d->mem_set_access(p, bytes, acc, 1), res, out);
out:
  free(acc);
  return res;
}

static ncclResult_t mem_cumem_alloc(int dev, size_t size, mem_alloc_t* a) {
  const cu_driver_t* d = cu_driver();
  CUdevice cdev;
  CUmemAllocationProp prop;
  size_t gran = 0;
  CUdeviceptr p = 0;
  bool have_handle = false, reserved = false, mapped = false;
  ncclResult_t res;
  CU_CHECK(d->device_get(&cdev, dev));
  prop = cu_mem_prop_device(cdev, cu_mem_fd_supported(dev));
  CU_CHECK(d->mem_get_allocation_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  if (gran == 0) gran = 1;
  a->bytes = (size + gran - 1) / gran * gran;
  CU_CHECK_GOTO(d->mem_create(&a->handle, a->bytes, &prop, 0), res, fail);
  have_handle = true;
  CU_CHECK_GOTO(d->mem_address_reserve(&p, a->bytes, gran, 0, 0), res, fail);
  reserved = true;
  CU_CHECK_GOTO(d->mem_map(p, a->bytes, 0, a->handle, 0), res, fail);
  mapped = true;
  CHECK_GOTO(mem_cumem_access(p, a->bytes, dev), res, fail);
  a->ptr = (void*)(uintptr_t)p;
  a->kind = MEM_KIND_CUMEM;
  a->dev = dev;
  return ncclSuccess;
fail:
  if (mapped) (void)d->mem_unmap(p, a->bytes);
  if (reserved) (void)d->mem_address_free(p, a->bytes);
  if (have_handle) (void)d->mem_release(a->handle);
  return res;
}

static ncclResult_t mem_gpu_alloc(int dev, size_t size, mem_alloc_t* a) {
  if (mem_cumem_usable(dev)) return mem_cumem_alloc(dev, size, a);
  void* p = NULL;
  CUDA_CHECK(cudaMalloc(&p, size));
  *a = (mem_alloc_t){.ptr = p, .bytes = size, .kind = MEM_KIND_CUDA, .dev = dev};
  return ncclSuccess;
}

static ncclResult_t mem_release(const mem_alloc_t* a) {
  if (a->kind == MEM_KIND_HOST) {
    if (a->fd >= 0) {
      munmap(a->ptr, a->bytes);
      close(a->fd);
    } else {
      free(a->ptr);
    }
    return ncclSuccess;
  }
  int saved = -1;
  CHECK(cuda_device_enter(a->dev, &saved));
  ncclResult_t res = ncclSuccess;
  if (a->kind == MEM_KIND_CUMEM) {
    const cu_driver_t* d = cu_driver();
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)a->ptr;
    CU_CHECK_GOTO(d->mem_unmap(p, a->bytes), res, leave);
    CU_CHECK_GOTO(d->mem_address_free(p, a->bytes), res, leave);
    CU_CHECK_GOTO(d->mem_release(a->handle), res, leave);
  } else {
    CUDA_CHECK_GOTO(cudaFree(a->ptr), res, leave);
  }
leave:
  cuda_device_leave(a->dev, saved);
  return res;
}

/* ---- Host allocations (host executor) --------------------------------------------------------
 * A memfd mapped shared, so that a window registered on it can be mapped by the other processes
 * of the host (they read it in place); zero-filled by the kernel. Page-aligned heap memory where
 * memfd is refused (then only ranks of this process read it in place). */
static ncclResult_t mem_host_alloc(size_t size, mem_alloc_t* a) {
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 4096;
  size_t rounded = (size + (size_t)page - 1) / (size_t)page * (size_t)page;
  *a = (mem_alloc_t){.bytes = rounded, .kind = MEM_KIND_HOST, .dev = -1, .fd = -1};
  int fd = memfd_create("baton-memalloc", MFD_CLOEXEC);
  if (fd >= 0 && ftruncate(fd, (off_t)rounded) == 0) {
    void* p = mmap(NULL, rounded, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p != MAP_FAILED) {
      a->ptr = p;
      a->fd = fd;
      return ncclSuccess;
    }
  }
  if (fd >= 0) close(fd);
  INFO(NCCL_ALLOC, "ncclMemAlloc: no memfd for %zu bytes (%s); heap memory", rounded,
       strerror(errno));
  void* p = NULL;
  int err = posix_memalign(&p, (size_t)page, rounded);
  if (err != 0) {
    WARN("ncclMemAlloc: posix_memalign of %zu bytes failed: %s", rounded, strerror(err));
    return ncclSystemError;
  }
  memset(p, 0, rounded);
  a->ptr = p;
  return ncclSuccess;
}

/* The memfd behind host memory [buff, buff + bytes) that ncclMemAlloc gave; false if none. */
static bool mem_host_share_of(const void* buff, size_t bytes, share_host_mem_t* out) {
  bool found = false;
  pthread_mutex_lock(&mem_lock);
  for (int i = 0; i < mem_nallocs && !found; i++) {
    const mem_alloc_t* a = &mem_allocs[i];
    const uintptr_t lo = (uintptr_t)a->ptr, b = (uintptr_t)buff;
    if (a->kind != MEM_KIND_HOST || a->fd < 0 || b < lo || b + bytes > lo + a->bytes) continue;
    *out = (share_host_mem_t){.fd = a->fd, .bytes = a->bytes, .offset = (size_t)(b - lo)};
    found = true;
  }
  pthread_mutex_unlock(&mem_lock);
  return found;
}

/* ---- Entry points --------------------------------------------------------------------------- */
NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  NVTX_API_RANGE("ncclMemAlloc");
  const char* api = "ncclMemAlloc";
  CHECK(arg_check_ptr(ptr, api, "ptr"));
  if (size == 0) { /* as stock (it calls cudaMalloc, which gives NULL): nccl-tests -b 0 asks this */
    INFO(NCCL_ALLOC, "%s: 0 bytes: NULL", api);
    *ptr = NULL;
    return ncclSuccess;
  }
  /* Rounding it up to pages or the allocation granularity would wrap to a tiny size. */
  if (!arg_span_ok(NULL, size)) {
    WARN("%s: invalid size %zu: more than %td bytes, the largest object there can be", api, size,
         (ptrdiff_t)PTRDIFF_MAX);
    return ncclInvalidArgument;
  }
  int dev = -1;
  if (comm_device_count() > 0 && cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError(); /* no current device: host memory */
    dev = -1;
  }
  mem_alloc_t a;
  memset(&a, 0, sizeof(a));
  if (dev >= 0) {
    CHECK(mem_gpu_alloc(dev, size, &a));
    INFO(NCCL_ALLOC, "%s: %zu bytes on device %d at %p (%s)", api, a.bytes, dev, a.ptr,
         a.kind == MEM_KIND_CUMEM ? "cuMem" : "cudaMalloc");
  } else {
    CHECK(mem_host_alloc(size, &a));
    INFO(NCCL_ALLOC, "%s: %zu bytes of host memory at %p (host executor%s)", api, a.bytes, a.ptr,
         a.fd >= 0 ? ", shareable" : "");
  }
  ncclResult_t res = mem_track(&a);
  if (res != ncclSuccess) {
    (void)mem_release(&a);
    return res;
  }
  *ptr = a.ptr;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  NVTX_API_RANGE("ncclMemFree");
  if (ptr == NULL) return ncclSuccess; /* as free() */
  mem_alloc_t a;
  if (!mem_untrack(ptr, &a)) {
    WARN("ncclMemFree: %p (ptr) was not returned by ncclMemAlloc, or was freed already", ptr);
    return ncclInvalidArgument;
  }
  return mem_release(&a);
}

/* ---- The communicator's registration table ---------------------------------------------------
 * cc->regs holds pointers to the records; a handle is valid only while it is in the table of the
 * communicator it is given with (compared by value, never dereferenced before). */
static ncclResult_t reg_comm(ncclComm_t comm, const char* api, struct coll_comm** out) {
  if (coll_of(comm) == NULL) {
    WARN("%s: comm %p is not initialized", api, (void*)comm);
    return ncclInvalidUsage;
  }
  *out = coll_of(comm);
  return ncclSuccess;
}

/* A range that is no possible object names no buffer: a window of it would let one-sided writes
 * reach any address. */
static ncclResult_t reg_check_range(const char* api, const void* buff, size_t size) {
  if (arg_span_ok(buff, size)) return ncclSuccess;
  WARN("%s: invalid size %zu for buff %p: the range wraps around the address space", api, size,
       buff);
  return ncclInvalidArgument;
}

static ncclResult_t reg_add(struct coll_comm* cc, mem_reg_kind_t kind, void* buff, size_t size,
                            int flags, struct ncclWindow_vidmem** out) {
  struct ncclWindow_vidmem* reg = NULL;
  CHECK(MEM_CALLOC(&reg, 1));
  *reg = (struct ncclWindow_vidmem){
      .kind = kind, .buff = buff, .size = size, .flags = flags, .slot = -1};
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&cc->lock);
  if (cc->nregs == cc->regs_cap) {
    int cap = cc->regs_cap ? 2 * cc->regs_cap : 8;
    struct ncclWindow_vidmem** p = realloc(cc->regs, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      WARN("Registration: out of memory for %d registrations", cap);
      res = ncclSystemError;
    } else {
      cc->regs = p;
      cc->regs_cap = cap;
    }
  }
  if (res == ncclSuccess) {
    cc->regs[cc->nregs++] = reg;
    if (kind == MEM_REG_WINDOW) reg->seq = ++cc->win_seq;
    __atomic_add_fetch(&cc->regs_gen, 1, __ATOMIC_RELEASE); /* kept plans are stale */
  }
  pthread_mutex_unlock(&cc->lock);
  if (res != ncclSuccess) {
    free(reg);
    return res;
  }
  *out = reg;
  return ncclSuccess;
}

static void win_pend_drop(const struct coll_comm* cc, const struct ncclWindow_vidmem* w);

/* Takes handle out of cc's table if it is a registration of that kind there; false otherwise
 * (handle is not dereferenced then). A shared window stops being shared first; one still waiting
 * for this thread's ncclGroupEnd is never shared. */
static bool reg_remove(struct coll_comm* cc, const void* handle, mem_reg_kind_t kind) {
  bool found = false;
  pthread_mutex_lock(&cc->lock);
  for (int i = 0; i < cc->nregs; i++) {
    if ((const void*)cc->regs[i] != handle) continue;
    if (cc->regs[i]->kind != kind) break;
    comm_window_unshare(cc->comm, cc->regs[i]->shared);
    if (kind == MEM_REG_WINDOW) win_pend_drop(cc, cc->regs[i]);
    free(cc->regs[i]);
    cc->regs[i] = cc->regs[--cc->nregs];
    __atomic_add_fetch(&cc->regs_gen, 1, __ATOMIC_RELEASE);
    found = true;
    break;
  }
  pthread_mutex_unlock(&cc->lock);
  return found;
}

bool coll_window_find(struct coll_comm* cc, const void* buff, size_t bytes, int* slot,
                      size_t* off) {
  bool found = false;
  const uintptr_t b = (uintptr_t)buff;
  pthread_mutex_lock(&cc->lock);
  for (int i = 0; i < cc->nregs && !found; i++) {
    const struct ncclWindow_vidmem* w = cc->regs[i];
    const uintptr_t lo = (uintptr_t)w->buff;
    if (w->slot < 0 || b < lo || b + bytes > lo + w->size || b + bytes < b) continue;
    *slot = w->slot;
    *off = (size_t)(b - lo);
    found = true;
  }
  pthread_mutex_unlock(&cc->lock);
  return found;
}

bool coll_window_of(struct coll_comm* cc, ncclWindow_t win, void** buff, size_t* size,
                    uint32_t* seq, comm_window_t** shared) {
  bool found = false;
  pthread_mutex_lock(&cc->lock);
  for (int i = 0; i < cc->nregs && !found; i++) {
    const struct ncclWindow_vidmem* w = cc->regs[i];
    if (w != win || w->kind != MEM_REG_WINDOW) continue;
    *buff = w->buff;
    *size = w->size;
    *seq = w->seq;
    *shared = w->shared;
    found = true;
  }
  pthread_mutex_unlock(&cc->lock);
  return found;
}

bool coll_window_by_seq(void* arg, uint32_t seq, void** buff, size_t* size) {
  struct coll_comm* cc = arg;
  bool found = false;
  pthread_mutex_lock(&cc->lock);
  for (int i = 0; i < cc->nregs && !found; i++) {
    const struct ncclWindow_vidmem* w = cc->regs[i];
    if (w->kind != MEM_REG_WINDOW || w->seq != seq) continue;
    *buff = w->buff;
    *size = w->size;
    found = true;
  }
  pthread_mutex_unlock(&cc->lock);
  return found;
}

/* core released the shared windows with the communicator's resources, before this runs. */
void coll_regs_free(struct coll_comm* cc) {
  if (cc->nregs > 0)
    INFO(NCCL_REG, "comm %p: releasing %d registrations left at destroy", (void*)cc->comm,
         cc->nregs);
  win_pend_drop(cc, NULL); /* destroyed inside the group that registered them */
  for (int i = 0; i < cc->nregs; i++) free(cc->regs[i]);
  free(cc->regs);
  cc->regs = NULL;
  cc->nregs = cc->regs_cap = 0;
}

static ncclResult_t reg_deregister(ncclComm_t comm, const void* handle, mem_reg_kind_t kind,
                                   const char* api, const char* what) {
  struct coll_comm* cc;
  CHECK(reg_comm(comm, api, &cc));
  if (handle == NULL || !reg_remove(cc, handle, kind)) {
    WARN(
        "%s: %s %p was not returned by %s on comm %p, or was deregistered already (a handle "
        "belongs to the communicator it was registered with)",
        api, what, handle, kind == MEM_REG_WINDOW ? "ncclCommWindowRegister" : "ncclCommRegister",
        (void*)comm);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* ---- Windows registered inside a group --------------------------------------------------------
 * Sharing is collective, and one thread may hold several ranks (nccl-tests -g N registers every
 * rank's windows between ncclGroupStart and ncclGroupEnd): inside a group the window is recorded
 * at once and shared at the outermost ncclGroupEnd, every communicator's windows in registration
 * order on a thread of its own, so that ranks of one thread meet in their exchanges. */
typedef struct win_pending {
  struct coll_comm* cc;
  struct ncclWindow_vidmem* w;
  bool has_host;
  share_host_mem_t host;
} win_pending_t;
static __thread win_pending_t* win_pend;
__thread int coll_win_npend; /* collectives.h: windows waiting for the outermost ncclGroupEnd */
static __thread int win_pend_cap;

static ncclResult_t win_defer(struct coll_comm* cc, struct ncclWindow_vidmem* w,
                              const share_host_mem_t* host) {
  if (coll_win_npend == win_pend_cap) {
    int cap = win_pend_cap ? 2 * win_pend_cap : 8;
    win_pending_t* p = realloc(win_pend, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      WARN("ncclCommWindowRegister: out of memory deferring %d windows to ncclGroupEnd", cap);
      return ncclSystemError;
    }
    win_pend = p;
    win_pend_cap = cap;
  }
  win_pend[coll_win_npend++] = (win_pending_t){
      .cc = cc, .w = w, .has_host = host != NULL, .host = host ? *host : (share_host_mem_t){0}};
  return ncclSuccess;
}

/* Forgets this thread's deferred sharing of w (NULL: of every window of cc), which is going away
 * before the outermost ncclGroupEnd: that must not share a freed record, nor run on a freed
 * communicator. */
static void win_pend_drop(const struct coll_comm* cc, const struct ncclWindow_vidmem* w) {
  int n = 0;
  for (int i = 0; i < coll_win_npend; i++)
    if (win_pend[i].cc != cc || (w != NULL && win_pend[i].w != w)) win_pend[n++] = win_pend[i];
  coll_win_npend = n;
}

/* Shares w and records the outcome in it (held by cc's table). */
static ncclResult_t win_share(struct coll_comm* cc, struct ncclWindow_vidmem* w,
                              const share_host_mem_t* host) {
  int slot = -1;
  comm_window_t* shared = NULL;
  CHECK(comm_window_share(cc->comm, w->buff, w->size, host, &slot, &shared));
  pthread_mutex_lock(&cc->lock);
  w->slot = slot;
  w->shared = shared;
  __atomic_add_fetch(&cc->regs_gen, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&cc->lock);
  INFO(NCCL_REG, "Window %p: buff %p size %zu flags 0x%x (%s)", (void*)w, w->buff, w->size,
       (unsigned)w->flags,
       slot >= 0 ? "shared: OneShot reads it in place" : "not shared: copied through the FIFOs");
  return ncclSuccess;
}

typedef struct win_job {
  pthread_t thread;
  struct coll_comm* cc;
  const win_pending_t* list;
  int n;
  ncclResult_t res;
} win_job_t;

static void* win_job_main(void* arg) {
  win_job_t* j = arg;
  ncclComm_t comm = j->cc->comm;
  LOG_SINK_SCOPE(comm->last_error, sizeof(comm->last_error));
  if (j->cc->kernels && cudaSetDevice(comm->cuda_dev) == cudaSuccess)
    (void)cudaFree(NULL); /* the device's context current for the driver calls */
  (void)cudaGetLastError();
  j->res = ncclSuccess;
  for (int i = 0; i < j->n && j->res == ncclSuccess; i++)
    if (j->list[i].cc == j->cc)
      j->res = win_share(j->cc, j->list[i].w, j->list[i].has_host ? &j->list[i].host : NULL);
  return NULL;
}

ncclResult_t coll_windows_share_pending(void) {
  const int n = coll_win_npend;
  win_pending_t* list = win_pend;
  win_pend = NULL;
  coll_win_npend = win_pend_cap = 0;
  if (n == 0) return ncclSuccess;
  win_job_t* jobs = NULL;
  int njobs = 0;
  ncclResult_t res = MEM_CALLOC(&jobs, (size_t)n);
  for (int i = 0; i < n && res == ncclSuccess; i++) {
    bool seen = false;
    for (int k = 0; k < njobs && !seen; k++) seen = jobs[k].cc == list[i].cc;
    if (!seen) jobs[njobs++] = (win_job_t){.cc = list[i].cc, .list = list, .n = n};
  }
  int started = 0;
  for (; started < njobs && res == ncclSuccess; started++) {
    int err = pthread_create(&jobs[started].thread, NULL, win_job_main, &jobs[started]);
    if (err != 0) {
      WARN("ncclGroupEnd: pthread_create for a window's sharing failed: %s", strerror(err));
      res = ncclSystemError;
      break;
    }
  }
  for (int k = 0; k < started; k++) {
    pthread_join(jobs[k].thread, NULL);
    if (res == ncclSuccess) res = jobs[k].res;
  }
  free(jobs);
  free(list);
  return res;
}

/* ---- Registration entry points --------------------------------------------------------------- */
NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size,
         void** handle) {
  NVTX_API_RANGE("ncclCommRegister");
  const char* api = "ncclCommRegister";
  struct coll_comm* cc;
  struct ncclWindow_vidmem* reg;
  COMM_API_SCOPE();
  CHECK(comm_check(comm, api));
  CHECK(arg_check_ptr(handle, api, "handle"));
  if (buff == NULL && size > 0) CHECK(arg_check_ptr(buff, api, "buff"));
  CHECK(reg_check_range(api, buff, size));
  CHECK(reg_comm(comm, api, &cc));
  CHECK(reg_add(cc, MEM_REG_BUFFER, buff, size, 0, &reg));
  INFO(NCCL_REG,
       "%s: buff %p size %zu -> handle %p (no registration needed: the executors copy through "
       "FIFOs)",
       api, buff, size, (void*)reg);
  *handle = reg;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  NVTX_API_RANGE("ncclCommDeregister");
  COMM_API_SCOPE();
  CHECK(comm_check(comm, "ncclCommDeregister"));
  return reg_deregister(comm, handle, MEM_REG_BUFFER, "ncclCommDeregister", "handle");
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size,
         ncclWindow_t* win, int winFlags) {
  NVTX_API_RANGE("ncclCommWindowRegister");
  const char* api = "ncclCommWindowRegister";
  struct coll_comm* cc;
  struct ncclWindow_vidmem* w;
  COMM_API_SCOPE();
  CHECK(comm_check(comm, api));
  CHECK(arg_check_ptr(win, api, "win"));
  if (buff == NULL && size > 0) CHECK(arg_check_ptr(buff, api, "buff"));
  CHECK(reg_check_range(api, buff, size));
  if (winFlags & ~(NCCL_WIN_COLL_SYMMETRIC)) {
    WARN("%s: unknown winFlags 0x%x (winFlags): use NCCL_WIN_DEFAULT or NCCL_WIN_COLL_SYMMETRIC",
         api, (unsigned)winFlags);
    return ncclInvalidArgument;
  }
  CHECK(reg_comm(comm, api, &cc));
  /* Collective from here: every rank takes part in the sharing, whatever its buffer. */
  share_host_mem_t host, *hostp = NULL;
  /* ranks without GPUs share a host buffer through the memfd under it */
  if (buff != NULL && size > 0 && !cc->kernels && mem_host_share_of(buff, size, &host))
    hostp = &host;
  CHECK(reg_add(cc, MEM_REG_WINDOW, buff, size, winFlags, &w));
  ncclResult_t res = coll_group_depth() > 0 ? win_defer(cc, w, hostp) : win_share(cc, w, hostp);
  if (res != ncclSuccess) {
    (void)reg_remove(cc, w, MEM_REG_WINDOW);
    return res;
  }
  *win = w;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  NVTX_API_RANGE("ncclCommWindowDeregister");
  COMM_API_SCOPE();
  CHECK(comm_check(comm, "ncclCommWindowDeregister"));
  return reg_deregister(comm, win, MEM_REG_WINDOW, "ncclCommWindowDeregister", "window (win)");
}

/* The buffer this rank registered as win (2.29). A window of another communicator, or one
 * deregistered already, is ncclInvalidArgument: win is looked up, never dereferenced blindly. */
NCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win, void** outUserPtr) {
  NVTX_API_RANGE("ncclWinGetUserPtr");
  const char* api = "ncclWinGetUserPtr";
  struct coll_comm* cc;
  COMM_API_SCOPE();
  CHECK(comm_check(comm, api));
  CHECK(arg_check_ptr(outUserPtr, api, "outUserPtr"));
  CHECK(reg_comm(comm, api, &cc));
  void* buff = NULL;
  bool found = false;
  pthread_mutex_lock(&cc->lock);
  for (int i = 0; i < cc->nregs && !found; i++) {
    if (cc->regs[i] != win || cc->regs[i]->kind != MEM_REG_WINDOW) continue;
    buff = cc->regs[i]->buff;
    found = true;
  }
  pthread_mutex_unlock(&cc->lock);
  if (!found) {
    WARN(
        "%s: window (win) %p was not returned by ncclCommWindowRegister on comm %p, or was "
        "deregistered already",
        api, (void*)win, (void*)comm);
    return ncclInvalidArgument;
  }
  *outUserPtr = buff;
  return ncclSuccess;
}
