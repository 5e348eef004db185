/* Baton base layer: the bottom of the stack, included by every other layer.
 * Owns: result-checking macros, logging (NCCL_DEBUG*), the parameter table (NCCL_* variables and
 * conf files), small utilities (allocation, hashing, clocks, host identity).
 * It includes nothing from the layers above it. */
#ifndef BATON_BASE_H
#define BATON_BASE_H

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "nccl.h"

#ifndef BATON_VERSION_STRING
#define BATON_VERSION_STRING "0.0.0"
#endif

/* ---- Exporting the public API --------------------------------------------------------------
 * Stock exports pncclX as the strong symbol and ncclX as a weak alias of it. Use as:
 *   NCCL_API(ncclResult_t, ncclGetVersion, int* version) { ... }                              */
#define BATON_EXPORT __attribute__((visibility("default")))
#define NCCL_API(ret, func, ...)                                              \
  BATON_EXPORT ret func(__VA_ARGS__) __attribute__((weak, alias("p" #func))); \
  BATON_EXPORT ret p##func(__VA_ARGS__)

/* ---- Logging ---------------------------------------------------------------------------------
 * Values match the ncclNet plugin API's ncclDebugLogLevel / ncclDebugLogSubSys, so a plugin's
 * logger is this same function. */
typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5
} ncclDebugLogLevel;

typedef enum {
  NCCL_INIT = 0x1,
  NCCL_COLL = 0x2,
  NCCL_P2P = 0x4,
  NCCL_SHM = 0x8,
  NCCL_NET = 0x10,
  NCCL_GRAPH = 0x20,
  NCCL_TUNING = 0x40,
  NCCL_ENV = 0x80,
  NCCL_ALLOC = 0x100,
  NCCL_CALL = 0x200,
  NCCL_PROXY = 0x400,
  NCCL_NVLS = 0x800,
  NCCL_BOOTSTRAP = 0x1000,
  NCCL_REG = 0x2000,
  NCCL_PROFILE = 0x4000,
  NCCL_RAS = 0x8000,
  NCCL_ALL = ~0
} ncclDebugLogSubSys;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                  int line, const char* fmt, ...);

/* Current level; -1 until the first log call reads NCCL_DEBUG. */
extern int log_level;
/* The one logging function. WARN lines are also recorded as the calling thread's last error and,
 * when a sink is bound (LOG_SINK_SCOPE), copied into a communicator's last-error buffer. */
void log_emit(ncclDebugLogLevel level, unsigned long flags, const char* func, int line,
              const char* fmt, ...) __attribute__((format(printf, 5, 6)));
/* A WARN that is printed whatever NCCL_DEBUG says: to the log as any WARN when NCCL_DEBUG selects
 * WARN lines, else to stderr. For what a person must see without asking (a hang report: new output
 * only for a job that is already stuck). */
void log_alert(const char* func, int line, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define WARN_ALWAYS(...) log_alert(__func__, __LINE__, __VA_ARGS__)
/* Re-read NCCL_DEBUG* settings (ncclResetDebugInit, tests). Closes a NCCL_DEBUG_FILE. */
void log_reset(void);
/* The text of the calling thread's last WARN ("" if none). */
const char* log_last_error(void);
void log_clear_last_error(void);
/* The error sink: while one is bound, the thread's WARN text is also copied into it (a
 * communicator's last-error slot, which ncclGetLastError(comm) reads). Only a scope binds one:
 * LOG_SINK_SCOPE(buf, len) binds buf[len] (NULL: none) from there to the end of the enclosing
 * block and, however the block is left (return, goto out, falling off its end), puts back the sink
 * bound before, so scopes nest and no path leaves a binding behind. One per block. Inside a scope,
 * log_sink_rebind changes the sink until the scope ends (false, nothing bound, outside any). */
typedef struct log_sink {
  char* buf;
  size_t len;
} log_sink_t;
/* The calling thread's sink and open scopes (log.c's WARN copies into the sink); inline, since
 * every entry point opens a scope. */
extern __thread char* log_tls_sink;
extern __thread size_t log_tls_sink_len;
extern __thread int log_tls_sink_scopes;
static inline void log_sink_set(char* buf, size_t len) {
  log_tls_sink = len > 0 ? buf : NULL;
  log_tls_sink_len = buf != NULL ? len : 0;
}
/* LOG_SINK_SCOPE's start: the sink it replaced. */
static inline log_sink_t log_sink_enter(char* buf, size_t len) {
  log_sink_t saved = {log_tls_sink, log_tls_sink_len};
  log_tls_sink_scopes++;
  log_sink_set(buf, len);
  return saved;
}
/* Its end: saved bound again. */
static inline void log_sink_leave(log_sink_t* saved) {
  log_sink_set(saved->buf, saved->len);
  log_tls_sink_scopes--;
}
static inline bool log_sink_rebind(char* buf, size_t len) {
  if (log_tls_sink_scopes <= 0) return false;
  log_sink_set(buf, len);
  return true;
}
#define LOG_SINK_SCOPE(buf, len)                                                \
  log_sink_t log_sink_saved_ __attribute__((cleanup(log_sink_leave), unused)) = \
      log_sink_enter((buf), (len))
/* This thread's device index, printed in the "[dev]" part of log lines; -1 prints nothing. */
void log_set_device(int dev);
/* "Baton <version>; NCCL 2.32.3; build=... cuda_archs=..." (src/base/build_info.c: also an ELF note
 * that tools read from the loaded library). */
const char* build_info(void);
/* "NCCL version 2.32.3+baton-<version>", once per process, at NCCL_DEBUG=VERSION or higher (as
 * an INFO line at INFO and above). Core calls it at the first communicator init. */
void log_version_banner(void);

#define LOG_ENABLED(lvl) (log_level < 0 || log_level >= (lvl))
#define WARN(...) log_emit(NCCL_LOG_WARN, NCCL_ALL, __func__, __LINE__, __VA_ARGS__)
#define INFO(flags, ...)                                                 \
  do {                                                                   \
    if (LOG_ENABLED(NCCL_LOG_INFO))                                      \
      log_emit(NCCL_LOG_INFO, (flags), __func__, __LINE__, __VA_ARGS__); \
  } while (0)
#define TRACE(flags, ...)                                                 \
  do {                                                                    \
    if (LOG_ENABLED(NCCL_LOG_TRACE))                                      \
      log_emit(NCCL_LOG_TRACE, (flags), __func__, __LINE__, __VA_ARGS__); \
  } while (0)

/* ---- Checking macros --------------------------------------------------------------------------
 * Only the code that first detects an error WARNs; callers propagate with CHECK, which leaves an
 * INFO breadcrumb "file:line -> code" so a failing call reads as a backtrace at NCCL_DEBUG=INFO.
 * ncclInProgress is not an error. */
#define RESULT_IS_ERROR(r) ((r) != ncclSuccess && (r) != ncclInProgress)
#define CHECK(call)                                                       \
  do {                                                                    \
    ncclResult_t check_res_ = (call);                                     \
    if (RESULT_IS_ERROR(check_res_)) {                                    \
      INFO(NCCL_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)check_res_); \
      return check_res_;                                                  \
    }                                                                     \
  } while (0)
#define CHECK_GOTO(call, res, label)                                 \
  do {                                                               \
    (res) = (call);                                                  \
    if (RESULT_IS_ERROR(res)) {                                      \
      INFO(NCCL_ALL, "%s:%d -> %d", __FILE__, __LINE__, (int)(res)); \
      goto label;                                                    \
    }                                                                \
  } while (0)
/* A system call returning -1 on failure: retried on EINTR; WARN with errno text, ncclSystemError */
#define SYS_CHECK(call, name)                                 \
  do {                                                        \
    int sys_ret_;                                             \
    do {                                                      \
      sys_ret_ = (int)(call);                                 \
    } while (sys_ret_ == -1 && errno == EINTR);               \
    if (sys_ret_ == -1) {                                     \
      WARN("Call to %s failed: %s", (name), strerror(errno)); \
      return ncclSystemError;                                 \
    }                                                         \
  } while (0)

/* ---- Parameters ---------------------------------------------------------------------------------
 * Every NCCL_* variable Baton reads is one row of src/base/param_table.h. Values come from the
 * environment, else NCCL_CONF_FILE (or ~/.nccl.conf when NCCL_CONF_FILE is unset, as stock), else
 * /etc/nccl.conf, else the default. Conf files: NAME=VALUE lines, '#' comments, blanks trimmed.
 * Read once (thread-safe); rows whose value differs from the default are logged at INFO ENV, a
 * malformed PARAM_INT value WARNs and reads as the default. Strings returned by param_str stay
 * valid for the life of the process (param_reload retires, never frees). */
typedef enum { PARAM_INT, PARAM_STR } param_type_t;
#define PARAM_ENUM_ROW(id, name, type, def, doc) PARAM_##id,
typedef enum {
#include "base/param_table.h"
  PARAM_COUNT
} param_id_t;
#undef PARAM_ENUM_ROW

typedef struct param_desc {
  const char* name; /* "NCCL_BUFFSIZE" */
  param_type_t type;
  const char* def; /* default as text; NULL: unset (param_str returns NULL, param_int -> 0) */
  const char* doc;
} param_desc_t;

const param_desc_t* param_describe(param_id_t id);
/* param_int: a row parsed as a signed integer (decimal or 0x hex). Once the snapshot of the
 * variables has been loaded and reported, a read is an array load here (param_int_values, set by
 * param.c; NULL before the first load and after param_reload); param_int_load loads first. */
extern const int64_t* param_int_values;
int64_t param_int_load(param_id_t id);
static inline int64_t param_int(param_id_t id) {
  const int64_t* v = __atomic_load_n(&param_int_values, __ATOMIC_ACQUIRE);
  if (v == NULL || (unsigned)id >= (unsigned)PARAM_COUNT) return param_int_load(id);
  return v[id];
}
const char* param_str(param_id_t id); /* NULL when unset and no default */
bool param_is_set(param_id_t id);     /* given by env or conf file (not the default) */
/* Forget cached values and re-read env and conf files (tests, ncclResetDebugInit). */
void param_reload(void);
/* The stock variables Baton does not support (src/base/param_unsupported.h), by index; NULL past
 * the end. */
int param_unsupported_count(void);
const char* param_unsupported_name(int i);
/* Test-only seam: read path instead of /etc/nccl.conf from the next (re)load on; NULL restores
 * /etc/nccl.conf. ~/.nccl.conf follows $HOME, so tests move it by setting HOME. */
void param_set_system_conf_path(const char* path);

/* ---- Plugins and the environment -----------------------------------------------------------
 * Stock's plugin kinds; the index picks the library prefix (libnccl-net, -tuner, -profiler, -env).
 */
typedef enum {
  PLUGIN_NET = 0,
  PLUGIN_TUNER,
  PLUGIN_PROFILER,
  PLUGIN_ENV,
  PLUGIN_KIND_COUNT
} plugin_kind_t;
/* dlopens the library that name selects for kind, by stock's rules: NULL or "" opens
 * "libnccl-<kind>.so"; otherwise name itself (a path or a file name), then, when name is neither a
 * path nor a "lib*.so" file name, "libnccl-<kind>-<name>.so"; "STATIC_PLUGIN" is the program
 * itself. Returns the handle, with the opened file's path in path[path_len]; NULL when nothing
 * loaded, with the reasons in why[why_len] (a missing file reads "not found"). Logs nothing (the
 * environment plugin is opened while parameters load). */
void* plugin_lib_open(plugin_kind_t kind, const char* name, char* path, size_t path_len, char* why,
                      size_t why_len);
/* Whether name (a NCCL_*_PLUGIN value) disables the plugin: "none", case-insensitive. */
bool plugin_name_is_none(const char* name);

/* The value the process environment gives name: getenv, or, when NCCL_ENV_PLUGIN (read with
 * getenv, as stock) names an environment plugin (default libnccl-env.so, if present), that
 * plugin's getEnv. The plugin is loaded on the first call and finalized at exit; nothing is
 * logged then (this runs while parameters load): env_plugin_report logs it, once. */
const char* env_get(const char* name);
void env_plugin_report(void);

/* ---- Utilities ------------------------------------------------------------------------------ */
/* Names a thread (printf-style, truncated to the 15 characters Linux keeps) unless
 * NCCL_SET_THREAD_NAME=0. */
void thread_set_name(pthread_t thread, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
/* Zeroed allocation; WARNs with the size on failure and returns ncclSystemError. */
ncclResult_t mem_calloc(void** out, size_t nelem, size_t elem_size);
#define MEM_CALLOC(pptr, n) mem_calloc((void**)(pptr), (n), sizeof(**(pptr)))
uint64_t hash_bytes(const void* data, size_t len); /* stable 64-bit hash (FNV-1a) */
/* qsort's comparison of two uint64_t, ascending. */
int u64_cmp(const void* a, const void* b);
/* CLOCK_MONOTONIC, nanoseconds (inline: every call reads it) */
static inline uint64_t clock_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}
/* Identity of this host: hash of the hostname (+boot id), or of NCCL_HOSTID when set. */
uint64_t host_hash(void);
const char* host_name(void); /* short hostname, cached */
/* Identity of this process (pid + pid namespace), distinct per process on one host. */
uint64_t pid_hash(void);
/* Bytes of one element of t, 0 for an invalid type (inline: every call reads it). */
static inline size_t datatype_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return 1;
    case ncclFloat16:
    case ncclBfloat16:
      return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
      return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
      return 8;
    default:
      return 0;
  }
}
/* The least d with 2^d >= n (0 for n <= 1). */
static inline int ceil_log2(int n) {
  int d = 0;
  while (d < 30 && (1 << d) < n) d++;
  return d;
}
const char* datatype_name(ncclDataType_t t);
const char* redop_name(ncclRedOp_t op);

/* ---- Platform: where a communicator's facts come from -----------------------------------------
 * NULL (the default): this machine: CUDA, NVML, sysfs and the OS answer, connections allocate
 * memory, the CUDA or host executor runs the plans. A virtual platform (baton-sim's cluster,
 * src/device/sim) answers for virtual ranks instead: their devices, hosts and host topologies
 * are described, nothing is probed, connections are decided as on the hardware but get no
 * memory, and the platform's executor times plans instead of running them. The communicators a
 * thread creates (ncclGetUniqueId, ncclCommInitRank*) take that thread's platform
 * (platform_set_thread): an internal hook, which no public entry point or variable reaches. */
typedef struct platform_identity {
  uint64_t host_hash; /* equal: same host */
  uint64_t pid_hash;  /* equal: same process */
  uint64_t shm_dev;   /* equal (and same host): SHM works between them */
  int pid;            /* 0: no process to watch for liveness */
  char host[48];      /* the host's name in logs and the RAS side channel */
} platform_identity_t;
struct executor_ops;
typedef struct platform {
  const char* name;
  void* ctx; /* the platform's own state, passed to every call (and to its executor's init) */
  /* The device of rank (-1, -1: none): its ordinal on its host and its PCI bus id. */
  void (*device)(void* ctx, int rank, int* dev, int64_t* bus_id);
  void (*identity)(void* ctx, int rank, platform_identity_t* out);
  /* The topology of rank's host in stock's XML format (valid while the platform lives). */
  const char* (*host_xml)(void* ctx, int rank);
  const struct executor_ops* executor; /* runs (times) the communicators' plans */
} platform_t;
/* The platform of the communicators this thread creates from now on (NULL: this machine). */
void platform_set_thread(const platform_t* p);
const platform_t* platform_thread(void);

/* ---- CUDA driver (dlopen) --------------------------------------------------------------------
 * The CUDA runtime is linked statically and called directly. The driver API (virtual memory
 * management with shareable handles, attributes) is reached without linking libcuda: cu_driver()
 * dlopens libcuda.so.1 once and resolves the entry points below. A missing library, a missing
 * entry point or a failing cuInit is an INFO line and cu_driver() returns NULL: callers fall back
 * (cudaMalloc + cudaIpc). Baton never resolves nor calls a multicast (NVLS) entry point. */
#include <cuda.h>

typedef struct cu_driver {
  int version; /* cuDriverGetVersion: 1000 * major + 10 * minor */
  CUresult (*init)(unsigned int flags);
  CUresult (*get_error_string)(CUresult res, const char** text);
  CUresult (*driver_get_version)(int* version);
  CUresult (*device_get)(CUdevice* dev, int ordinal);
  CUresult (*device_get_attribute)(int* value, CUdevice_attribute attr, CUdevice dev);
  CUresult (*pointer_get_attribute)(void* data, CUpointer_attribute attr, CUdeviceptr ptr);
  CUresult (*mem_create)(CUmemGenericAllocationHandle* handle, size_t size,
                         const CUmemAllocationProp* prop, unsigned long long flags);
  CUresult (*mem_release)(CUmemGenericAllocationHandle handle);
  CUresult (*mem_map)(CUdeviceptr ptr, size_t size, size_t offset,
                      CUmemGenericAllocationHandle handle, unsigned long long flags);
  CUresult (*mem_unmap)(CUdeviceptr ptr, size_t size);
  CUresult (*mem_address_reserve)(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                  unsigned long long flags);
  CUresult (*mem_address_free)(CUdeviceptr ptr, size_t size);
  CUresult (*mem_set_access)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                             size_t count);
  CUresult (*mem_export_to_shareable_handle)(void* shareable, CUmemGenericAllocationHandle handle,
                                             CUmemAllocationHandleType type,
                                             unsigned long long flags);
  CUresult (*mem_import_from_shareable_handle)(CUmemGenericAllocationHandle* handle,
                                               void* os_handle, CUmemAllocationHandleType type);
  CUresult (*mem_get_allocation_granularity)(size_t* granularity, const CUmemAllocationProp* prop,
                                             CUmemAllocationGranularity_flags option);
  /* A dma-buf descriptor for a device memory range (GPUDirect RDMA through dma-buf). */
  CUresult (*mem_get_handle_for_address_range)(void* handle, CUdeviceptr ptr, size_t size,
                                               CUmemRangeHandleType type, unsigned long long flags);
  /* The cuMem allocation mapped at addr (a reference the caller releases with mem_release), and
   * the allocation (or mapping) holding a device pointer: sharing a user's buffer (windows). */
  CUresult (*mem_retain_allocation_handle)(CUmemGenericAllocationHandle* handle, void* addr);
  CUresult (*mem_get_address_range)(CUdeviceptr* base, size_t* size, CUdeviceptr ptr);
  /* A launch whose parameter buffer is given with its size (CU_LAUNCH_PARAM_BUFFER_SIZE): the
   * driver copies only the bytes in use, where the runtime's launch copies the whole declared
   * parameter block. */
  CUresult (*launch_kernel)(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                            unsigned int bx, unsigned int by, unsigned int bz, unsigned int smem,
                            CUstream stream, void** params, void** extra);
} cu_driver_t;

/* The process's driver table (loaded on first call), NULL when the driver is unusable. Once
 * loaded it is published in cu_driver_ready (cudawrap.c), so every launch reads it inline. */
extern const cu_driver_t* cu_driver_ready;
const cu_driver_t* cu_driver_once(void);
static inline const cu_driver_t* cu_driver(void) {
  const cu_driver_t* d = __atomic_load_n(&cu_driver_ready, __ATOMIC_ACQUIRE);
  return d != NULL ? d : cu_driver_once();
}
/* Loads lib (e.g. "libcuda.so.1") into *out: every entry point resolved and cuInit(0) done.
 * ncclSystemError with an INFO line naming what is missing otherwise (tests use other libs). */
ncclResult_t cu_driver_load(const char* lib, cu_driver_t* out);
/* Whether device `ordinal` supports cuMem allocations shared as POSIX file descriptors. */
bool cu_mem_fd_supported(int ordinal);
/* Properties of a pinned allocation in device dev's memory, exportable as a POSIX file
 * descriptor when fd_shareable. */
CUmemAllocationProp cu_mem_prop_device(CUdevice dev, bool fd_shareable);
/* One cuMemSetAccess entry: read-write access for device dev. */
CUmemAccessDesc cu_mem_access_rw(CUdevice dev);
/* The driver's text for res ("CUDA_ERROR_..." name when the driver has none). */
const char* cu_error_text(CUresult res);

/* ---- Checking CUDA calls ----------------------------------------------------------------------
 * A runtime call that must succeed goes through CUDA_CHECK (return) or CUDA_CHECK_GOTO (set res,
 * goto a cleanup label); a driver call through cu_driver() through CU_CHECK / CU_CHECK_GOTO. On
 * failure the WARN names the call as written, its file:line and the CUDA text; a runtime error is
 * also cleared from the thread's last-error state (cudaGetLastError) so that later calls do not
 * report it again; the result is ncclUnhandledCudaError (as stock). A call whose failure is
 * expected and handled in place (probing an attribute, a peer or a pointer; best-effort cleanup)
 * is not checked: it is cast to (void), or compared in place with (void)cudaGetLastError() after
 * it, with a comment where the reason is not plain. */
ncclResult_t cuda_call_failed(cudaError_t err, const char* call, const char* func, const char* file,
                              int line);
ncclResult_t cu_call_failed(CUresult res, const char* call, const char* func, const char* file,
                            int line);
/* err, with `accepted` (an outcome the caller expects, e.g. "already enabled") cleared and read as
 * success: CUDA_CHECK(cuda_accept(cudaX(...), cudaErrorY)). */
static inline cudaError_t cuda_accept(cudaError_t err, cudaError_t accepted) {
  if (err != accepted) return err;
  (void)cudaGetLastError();
  return cudaSuccess;
}
#define CUDA_CHECK(call)                                                       \
  do {                                                                         \
    cudaError_t cuda_err_ = (call);                                            \
    if (cuda_err_ != cudaSuccess)                                              \
      return cuda_call_failed(cuda_err_, #call, __func__, __FILE__, __LINE__); \
  } while (0)
#define CUDA_CHECK_GOTO(call, res, label)                                       \
  do {                                                                          \
    cudaError_t cuda_err_ = (call);                                             \
    if (cuda_err_ != cudaSuccess) {                                             \
      (res) = cuda_call_failed(cuda_err_, #call, __func__, __FILE__, __LINE__); \
      goto label;                                                               \
    }                                                                           \
  } while (0)
#define CU_CHECK(call)                                                     \
  do {                                                                     \
    CUresult cu_res_ = (call);                                             \
    if (cu_res_ != CUDA_SUCCESS)                                           \
      return cu_call_failed(cu_res_, #call, __func__, __FILE__, __LINE__); \
  } while (0)
#define CU_CHECK_GOTO(call, res, label)                                     \
  do {                                                                      \
    CUresult cu_res_ = (call);                                              \
    if (cu_res_ != CUDA_SUCCESS) {                                          \
      (res) = cu_call_failed(cu_res_, #call, __func__, __FILE__, __LINE__); \
      goto label;                                                           \
    }                                                                       \
  } while (0)
/* Makes CUDA device dev current on this thread (the one current before in *saved, -1 when none
 * could be read), and back; leave restores nothing when saved is -1 or dev (inline: every launch
 * on a GPU enters). */
static inline ncclResult_t cuda_device_enter(int dev, int* saved) {
  int cur = -1;
  if (cudaGetDevice(&cur) != cudaSuccess) {
    (void)cudaGetLastError(); /* a probe: no device current */
    cur = -1;
  }
  *saved = cur;
  if (cur == dev) return ncclSuccess;
  CUDA_CHECK(cudaSetDevice(dev));
  return ncclSuccess;
}
static inline void cuda_device_leave(int dev, int saved) {
  if (saved >= 0 && saved != dev && cudaSetDevice(saved) != cudaSuccess) (void)cudaGetLastError();
}
/* The thread's stream-capture mode set to relaxed, for setup work that may run while the user
 * captures a graph (allocating and registering memory is legal then only in relaxed mode); the
 * mode before, for cuda_capture_restore. */
enum cudaStreamCaptureMode cuda_capture_relax(void);
void cuda_capture_restore(enum cudaStreamCaptureMode mode);

/* ---- NVTX ranges (nvtx.c) ----------------------------------------------------------------------
 * Each API call is a range in the "NCCL" domain named after the call; nvtx_begin pushes it (false
 * when nothing was pushed: no tool attached, or NCCL_NVTX_DISABLE=1) and nvtx_end pops what it
 * pushed. A payload kind picks the fields of args a tool sees (stock's names); root holds the root
 * or the peer. NVTX_API_RANGE(name) is a plain range for the rest of the enclosing block. */
typedef enum {
  NVTX_PL_NONE = 0,
  NVTX_PL_COLL,         /* comm, bytes, dtype: AllGather, AlltoAll */
  NVTX_PL_COLL_OP,      /* + op: AllReduce, ReduceScatter */
  NVTX_PL_COLL_ROOT,    /* + root: Broadcast, Gather, Scatter */
  NVTX_PL_COLL_ROOT_OP, /* + root and op: Reduce */
  NVTX_PL_P2P,          /* + peer (in root): Send, Recv */
  NVTX_PL_KINDS
} nvtx_payload_kind_t;
typedef struct nvtx_args {
  uint64_t comm; /* the communicator's hash (its id across ranks) */
  size_t bytes;
  int32_t dtype, op, root;
} nvtx_args_t;
/* nvtx.c: whether ranges are pushed (0: not decided yet, the first call decides; atomic), and
 * the push and pop themselves. The test is inline, so a call without a tool stays in its file. */
enum { NVTX_STATE_OFF = 1, NVTX_STATE_LIVE = 2 };
extern int nvtx_state;
bool nvtx_push(const char* name, nvtx_payload_kind_t kind, const nvtx_args_t* args);
void nvtx_pop(void);
static inline bool nvtx_begin(const char* name, nvtx_payload_kind_t kind, const nvtx_args_t* args) {
  if (__atomic_load_n(&nvtx_state, __ATOMIC_ACQUIRE) == NVTX_STATE_OFF) return false;
  return nvtx_push(name, kind, args);
}
static inline void nvtx_end(bool pushed) {
  if (pushed) nvtx_pop();
}
static inline void nvtx_scope_end(bool* pushed) { /* NVTX_API_RANGE's cleanup */
  nvtx_end(*pushed);
}
#define NVTX_API_RANGE(name)                                           \
  bool nvtx_pushed_ __attribute__((cleanup(nvtx_scope_end), unused)) = \
      nvtx_begin((name), NVTX_PL_NONE, NULL)

#endif /* BATON_BASE_H */
