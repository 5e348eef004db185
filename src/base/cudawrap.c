/* The CUDA driver API without linking libcuda: dlopen("libcuda.so.1") once, resolve the entry
 * points Baton uses (base.h lists them) by name, cuInit. Absent or unusable driver: one INFO line
 * and cu_driver() returns NULL, so callers take their runtime-only path. No multicast entry point
 * is ever resolved. */
#include <dlfcn.h>
#include <pthread.h>

#include "base/base.h"

#define CU_DRIVER_LIB "libcuda.so.1"

typedef struct cu_sym {
  const char* name;
  size_t offset; /* of the function pointer in cu_driver_t */
} cu_sym_t;

#define CU_SYM(field, name) \
  { name, offsetof(cu_driver_t, field) }
/* The plain names are the ABI these signatures describe (none has a _v2 twin in cuda.h), but for
 * cuMemGetAddressRange, whose 64-bit signature is the _v2 entry point. */
static const cu_sym_t cu_syms[] = {
    CU_SYM(init, "cuInit"),
    CU_SYM(get_error_string, "cuGetErrorString"),
    CU_SYM(driver_get_version, "cuDriverGetVersion"),
    CU_SYM(device_get, "cuDeviceGet"),
    CU_SYM(device_get_attribute, "cuDeviceGetAttribute"),
    CU_SYM(pointer_get_attribute, "cuPointerGetAttribute"),
    CU_SYM(mem_create, "cuMemCreate"),
    CU_SYM(mem_release, "cuMemRelease"),
    CU_SYM(mem_map, "cuMemMap"),
    CU_SYM(mem_unmap, "cuMemUnmap"),
    CU_SYM(mem_address_reserve, "cuMemAddressReserve"),
    CU_SYM(mem_address_free, "cuMemAddressFree"),
    CU_SYM(mem_set_access, "cuMemSetAccess"),
    CU_SYM(mem_export_to_shareable_handle, "cuMemExportToShareableHandle"),
    CU_SYM(mem_import_from_shareable_handle, "cuMemImportFromShareableHandle"),
    CU_SYM(mem_get_allocation_granularity, "cuMemGetAllocationGranularity"),
    CU_SYM(mem_get_handle_for_address_range, "cuMemGetHandleForAddressRange"),
    CU_SYM(mem_retain_allocation_handle, "cuMemRetainAllocationHandle"),
    CU_SYM(mem_get_address_range, "cuMemGetAddressRange_v2"),
    CU_SYM(launch_kernel, "cuLaunchKernel"),
};
#define CU_NSYMS ((int)(sizeof(cu_syms) / sizeof(cu_syms[0])))

ncclResult_t cu_driver_load(const char* lib, cu_driver_t* out) {
  cu_driver_t d;
  memset(&d, 0, sizeof(d));
  void* h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    INFO(NCCL_INIT, "CUDA driver: cannot load %s (%s); cuMem allocations are off", lib, dlerror());
    return ncclSystemError;
  }
  for (int i = 0; i < CU_NSYMS; i++) {
    void* fn = dlsym(h, cu_syms[i].name);
    if (fn == NULL) {
      INFO(NCCL_INIT, "CUDA driver: %s has no %s (driver too old?); cuMem allocations are off", lib,
           cu_syms[i].name);
      dlclose(h);
      return ncclSystemError;
    }
    memcpy((char*)&d + cu_syms[i].offset, &fn, sizeof(fn));
  }
  CUresult r = d.init(0);
  if (r != CUDA_SUCCESS) {
    const char* text = NULL;
    if (d.get_error_string(r, &text) != CUDA_SUCCESS || text == NULL) text = "unknown error";
    INFO(NCCL_INIT, "CUDA driver: cuInit failed (%d: %s); cuMem allocations are off", (int)r, text);
    dlclose(h);
    return ncclSystemError;
  }
  if (d.driver_get_version(&d.version) != CUDA_SUCCESS) d.version = 0;
  /* The handle stays open for the life of the process: the table points into it. */
  *out = d;
  return ncclSuccess;
}

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static cu_driver_t cu_table;
static bool cu_ok;

const cu_driver_t* cu_driver_ready; /* base.h: &cu_table once loaded */

static void cu_driver_init(void) {
  if (cu_driver_load(CU_DRIVER_LIB, &cu_table) != ncclSuccess) return;
  cu_ok = true;
  INFO(NCCL_INIT, "CUDA driver %d.%d loaded from %s", cu_table.version / 1000,
       (cu_table.version % 1000) / 10, CU_DRIVER_LIB);
  __atomic_store_n(&cu_driver_ready, &cu_table, __ATOMIC_RELEASE);
}

const cu_driver_t* cu_driver_once(void) {
  pthread_once(&cu_once, cu_driver_init);
  return cu_ok ? &cu_table : NULL;
}

const char* cu_error_text(CUresult res) {
  const cu_driver_t* d = cu_driver();
  const char* text = NULL;
  if (d != NULL && d->get_error_string(res, &text) == CUDA_SUCCESS && text != NULL) return text;
  switch (res) {
    case CUDA_ERROR_INVALID_VALUE:
      return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_OUT_OF_MEMORY:
      return "CUDA_ERROR_OUT_OF_MEMORY";
    case CUDA_ERROR_NOT_INITIALIZED:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_NOT_SUPPORTED:
      return "CUDA_ERROR_NOT_SUPPORTED";
    case CUDA_ERROR_INVALID_DEVICE:
      return "CUDA_ERROR_INVALID_DEVICE";
    default:
      return "CUDA driver error (no text available)";
  }
}

/* base.h: CUDA_CHECK and CU_CHECK. The WARN carries the caller's function and line. */
ncclResult_t cuda_call_failed(cudaError_t err, const char* call, const char* func, const char* file,
                              int line) {
  (void)cudaGetLastError(); /* the error is reported here: later calls must not see it again */
  log_emit(NCCL_LOG_WARN, NCCL_ALL, func, line, "CUDA call %s failed at %s:%d: %s (%d)", call, file,
           line, cudaGetErrorString(err), (int)err);
  return ncclUnhandledCudaError;
}

ncclResult_t cu_call_failed(CUresult res, const char* call, const char* func, const char* file,
                            int line) {
  log_emit(NCCL_LOG_WARN, NCCL_ALL, func, line, "CUDA driver call %s failed at %s:%d: %s (%d)",
           call, file, line, cu_error_text(res), (int)res);
  return ncclUnhandledCudaError;
}

/* ---- The capture mode (the current device: cuda_device_enter, inline in base.h) ------------- */
enum cudaStreamCaptureMode cuda_capture_relax(void) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) {
    (void)cudaGetLastError();
    mode = cudaStreamCaptureModeRelaxed;
  }
  return mode;
}

void cuda_capture_restore(enum cudaStreamCaptureMode mode) {
  if (cudaThreadExchangeStreamCaptureMode(&mode) != cudaSuccess) (void)cudaGetLastError();
}

bool cu_mem_fd_supported(int ordinal) {
  const cu_driver_t* d = cu_driver();
  CUdevice dev;
  int vmm = 0, fd = 0;
  if (d == NULL || ordinal < 0 || d->device_get(&dev, ordinal) != CUDA_SUCCESS) return false;
  if (d->device_get_attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev) !=
      CUDA_SUCCESS)
    vmm = 0;
  if (d->device_get_attribute(&fd, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED,
                              dev) != CUDA_SUCCESS)
    fd = 0;
  return vmm != 0 && fd != 0;
}

CUmemAllocationProp cu_mem_prop_device(CUdevice dev, bool fd_shareable) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = dev;
  prop.requestedHandleTypes =
      fd_shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
  return prop;
}

CUmemAccessDesc cu_mem_access_rw(CUdevice dev) {
  CUmemAccessDesc a;
  memset(&a, 0, sizeof(a));
  a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  a.location.id = dev;
  a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  return a;
}
