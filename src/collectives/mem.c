/* Memory allocation (ncclMemAlloc / ncclMemFree) and buffer registration.
 *
 * ncclMemAlloc gives GPU memory when the calling thread has a CUDA device: a cuMem allocation
 * (granularity-rounded, exportable as a POSIX file descriptor where the driver allows it, mapped
 * read-write for the device and every device that can access it as a peer), or cudaMalloc when
 * the driver API or virtual memory management is unavailable (or NCCL_CUMEM_ENABLE=0). Without a
 * GPU it gives page-aligned, zeroed host memory (host executor). A small registry remembers every
 * allocation, so ncclMemFree releases each the way it was made and rejects other pointers.
 *
 * Registration: the executors copy user buffers through the connection FIFOs, so no buffer has
 * to be registered for correctness. ncclCommRegister / ncclCommWindowRegister check their
 * arguments and return small handles that remember the buffer (deregistration checks what it is
 * given); collectives work the same on registered and unregistered buffers, on either executor. */
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "collectives/collectives.h"

#define MEM_REG_MAGIC 0x52656748616e646cULL /* "RegHandl" */
#define MEM_WIN_MAGIC 0x57696e646f774862ULL /* "WindowHb" */

typedef struct mem_reg {
  uint64_t magic;
  ncclComm_t comm;
  void* buff;
  size_t size;
} mem_reg_t;

/* ncclWindow_t is a pointer to this (opaque to users). */
struct ncclWindow_vidmem {
  uint64_t magic;
  ncclComm_t comm;
  void* buff;
  size_t size;
  int flags;
};

/* ---- Allocation registry ------------------------------------------------------------------- */
typedef enum { MEM_KIND_HOST = 0, MEM_KIND_CUMEM, MEM_KIND_CUDA } mem_kind_t;

typedef struct mem_alloc {
  void* ptr;
  size_t bytes; /* mapped size (cuMem) */
  mem_kind_t kind;
  int dev;
  CUmemGenericAllocationHandle handle;
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
static ncclResult_t mem_cu(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return ncclSuccess;
  WARN("ncclMemAlloc: %s failed: %s (NCCL_CUMEM_ENABLE=0 uses cudaMalloc instead)", what,
       cu_error_text(r));
  return ncclUnhandledCudaError;
}

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
  CHECK(mem_calloc((void**)&acc, (size_t)(ndev > 0 ? ndev : 1), sizeof(*acc)));
  ncclResult_t res = mem_cu(d->device_get(&cdev, dev), "cuDeviceGet");
  if (res != ncclSuccess) goto out;
  acc[n++] = cu_mem_access_rw(cdev);
  for (int peer = 0; peer < ndev; peer++) {
    int can = 0;
    CUdevice cpeer;
    if (peer == dev) continue;
    if (cudaDeviceCanAccessPeer(&can, peer, dev) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    if (can && d->device_get(&cpeer, peer) == CUDA_SUCCESS) acc[n++] = cu_mem_access_rw(cpeer);
  }
  if (d->mem_set_access(p, bytes, acc, n) != CUDA_SUCCESS && n > 1) {
    INFO(NCCL_ALLOC, "ncclMemAlloc: peer access to device %d's memory refused; local access only",
         dev);
    n = 1;
  }
  if (n == 1) res = mem_cu(d->mem_set_access(p, bytes, acc, 1), "cuMemSetAccess");
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
  CHECK(mem_cu(d->device_get(&cdev, dev), "cuDeviceGet"));
  prop = cu_mem_prop_device(cdev, cu_mem_fd_supported(dev));
  CHECK(
      mem_cu(d->mem_get_allocation_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
             "cuMemGetAllocationGranularity"));
  if (gran == 0) gran = 1;
  a->bytes = (size + gran - 1) / gran * gran;
  CHECK_GOTO(mem_cu(d->mem_create(&a->handle, a->bytes, &prop, 0), "cuMemCreate"), res, fail);
  have_handle = true;
  CHECK_GOTO(mem_cu(d->mem_address_reserve(&p, a->bytes, gran, 0, 0), "cuMemAddressReserve"), res,
             fail);
  reserved = true;
  CHECK_GOTO(mem_cu(d->mem_map(p, a->bytes, 0, a->handle, 0), "cuMemMap"), res, fail);
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
  cudaError_t err = cudaMalloc(&p, size);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    WARN("ncclMemAlloc: cudaMalloc of %zu bytes on device %d failed: %s", size, dev,
         cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  *a = (mem_alloc_t){.ptr = p, .bytes = size, .kind = MEM_KIND_CUDA, .dev = dev};
  return ncclSuccess;
}

static ncclResult_t mem_release(const mem_alloc_t* a) {
  if (a->kind == MEM_KIND_HOST) {
    free(a->ptr);
    return ncclSuccess;
  }
  int saved = -1;
  CHECK(coll_device_enter(a->dev, &saved));
  ncclResult_t res = ncclSuccess;
  if (a->kind == MEM_KIND_CUMEM) {
    const cu_driver_t* d = cu_driver();
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)a->ptr;
    CUresult r = d->mem_unmap(p, a->bytes);
    if (r == CUDA_SUCCESS) r = d->mem_address_free(p, a->bytes);
    if (r == CUDA_SUCCESS) r = d->mem_release(a->handle);
    if (r != CUDA_SUCCESS) {
      WARN("ncclMemFree: releasing the cuMem allocation at %p failed: %s", a->ptr,
           cu_error_text(r));
      res = ncclUnhandledCudaError;
    }
  } else {
    cudaError_t err = cudaFree(a->ptr);
    if (err != cudaSuccess) {
      (void)cudaGetLastError();
      WARN("ncclMemFree: cudaFree(%p) failed: %s", a->ptr, cudaGetErrorString(err));
      res = ncclUnhandledCudaError;
    }
  }
  coll_device_leave(a->dev, saved);
  return res;
}

/* ---- Entry points --------------------------------------------------------------------------- */
NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  const char* api = "ncclMemAlloc";
  CHECK(arg_check_ptr(ptr, api, "ptr"));
  if (size == 0) {
    WARN("%s: size is 0", api);
    return ncclInvalidArgument;
  }
  int dev = -1;
  if (comm_device_count() > 0 && cudaGetDevice(&dev) != cudaSuccess) {
    (void)cudaGetLastError();
    dev = -1;
  }
  mem_alloc_t a;
  memset(&a, 0, sizeof(a));
  if (dev >= 0) {
    CHECK(mem_gpu_alloc(dev, size, &a));
    INFO(NCCL_ALLOC, "%s: %zu bytes on device %d at %p (%s)", api, a.bytes, dev, a.ptr,
         a.kind == MEM_KIND_CUMEM ? "cuMem" : "cudaMalloc");
  } else {
    long page = sysconf(_SC_PAGESIZE);
    if (page <= 0) page = 4096;
    size_t rounded = (size + (size_t)page - 1) / (size_t)page * (size_t)page;
    void* p = NULL;
    int err = posix_memalign(&p, (size_t)page, rounded);
    if (err != 0) {
      WARN("%s: posix_memalign of %zu bytes failed: %s", api, rounded, strerror(err));
      return ncclSystemError;
    }
    memset(p, 0, rounded);
    a = (mem_alloc_t){.ptr = p, .bytes = rounded, .kind = MEM_KIND_HOST, .dev = -1};
    INFO(NCCL_ALLOC, "%s: %zu bytes of host memory at %p (host executor)", api, rounded, p);
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
  if (ptr == NULL) return ncclSuccess; /* as free() */
  mem_alloc_t a;
  if (!mem_untrack(ptr, &a)) {
    WARN("ncclMemFree: %p (ptr) was not returned by ncclMemAlloc, or was freed already", ptr);
    return ncclInvalidArgument;
  }
  return mem_release(&a);
}

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size,
         void** handle) {
  const char* api = "ncclCommRegister";
  ncclResult_t res = comm_check(comm, api);
  if (res != ncclSuccess) goto out;
  CHECK_GOTO(arg_check_ptr(handle, api, "handle"), res, out);
  if (buff == NULL && size > 0) CHECK_GOTO(arg_check_ptr(buff, api, "buff"), res, out);
  mem_reg_t* reg;
  CHECK_GOTO(MEM_CALLOC(&reg, 1), res, out);
  *reg = (mem_reg_t){.magic = MEM_REG_MAGIC, .comm = comm, .buff = buff, .size = size};
  INFO(NCCL_REG,
       "%s: buff %p size %zu -> handle %p (no registration needed: the executors copy through "
       "FIFOs)",
       api, buff, size, (void*)reg);
  *handle = reg;
out:
  comm_scope_end();
  return res;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  const char* api = "ncclCommDeregister";
  ncclResult_t res = comm_check(comm, api);
  if (res != ncclSuccess) goto out;
  mem_reg_t* reg = handle;
  if (reg == NULL || reg->magic != MEM_REG_MAGIC || reg->comm != comm) {
    WARN("%s: handle %p (handle) was not returned by ncclCommRegister on comm %p", api, handle,
         (void*)comm);
    res = ncclInvalidArgument;
    goto out;
  }
  reg->magic = 0;
  free(reg);
out:
  comm_scope_end();
  return res;
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size,
         ncclWindow_t* win, int winFlags) {
  const char* api = "ncclCommWindowRegister";
  ncclResult_t res = comm_check(comm, api);
  if (res != ncclSuccess) goto out;
  CHECK_GOTO(arg_check_ptr(win, api, "win"), res, out);
  if (buff == NULL && size > 0) CHECK_GOTO(arg_check_ptr(buff, api, "buff"), res, out);
  if (winFlags & ~(NCCL_WIN_COLL_SYMMETRIC)) {
    WARN("%s: unknown winFlags 0x%x (winFlags): use NCCL_WIN_DEFAULT or NCCL_WIN_COLL_SYMMETRIC",
         api, (unsigned)winFlags);
    res = ncclInvalidArgument;
    goto out;
  }
  struct ncclWindow_vidmem* w;
  CHECK_GOTO(MEM_CALLOC(&w, 1), res, out);
  *w = (struct ncclWindow_vidmem){
      .magic = MEM_WIN_MAGIC, .comm = comm, .buff = buff, .size = size, .flags = winFlags};
  INFO(NCCL_REG,
       "%s: buff %p size %zu flags 0x%x -> window %p (no mapping needed: the executors copy "
       "through FIFOs)",
       api, buff, size, (unsigned)winFlags, (void*)w);
  *win = w;
out:
  comm_scope_end();
  return res;
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  const char* api = "ncclCommWindowDeregister";
  ncclResult_t res = comm_check(comm, api);
  if (res != ncclSuccess) goto out;
  if (win == NULL || win->magic != MEM_WIN_MAGIC || win->comm != comm) {
    WARN("%s: window %p (win) was not returned by ncclCommWindowRegister on comm %p", api,
         (void*)win, (void*)comm);
    res = ncclInvalidArgument;
    goto out;
  }
  win->magic = 0;
  free(win);
out:
  comm_scope_end();
  return res;
}
