/* Baton: the public interface.
 *
 * This header declares NCCL 2.32.3's host API: every type, enumerator, structure layout, macro
 * value and entry point below matches that release (and 2.28.9's, which it extends only by
 * appending), so a program compiled against either header runs on either library. Versioned
 * structures (ncclConfig_t, ncclCollConfig_t, ncclSimInfo_t, ncclEncryptionConfig_t) are read by
 * the size their caller compiled, so a program built against an older, shorter layout keeps
 * working. tests/abi checks the layouts against stock's. The version is 2.32.3's (README: which
 * 2.29-2.32 functions Baton implements, and which it refuses: the device API).
 *
 * Each entry point exists twice: ncclX, which applications call, and pncclX, the same function
 * under a second name for profiling and interposition tools. */
#ifndef NCCL_H_
#define NCCL_H_

/* The reference header's includes, in its order. */
/* clang-format off */
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#if CUDART_VERSION >= 11000
#include <cuda_bf16.h>
#endif
#if defined(__cplusplus) && CUDART_VERSION >= 11080
#include <cuda_fp8.h>
#endif
/* clang-format on */

#include <limits.h>
#include <stddef.h>
#include <stdint.h>

/* ---- Version ---------------------------------------------------------------------------------
 * NCCL_VERSION(X,Y,Z) encodes a release as an integer. Releases up to 2.8 used X*1000+Y*100+Z;
 * later ones use X*10000+Y*100+Z, so codes keep increasing across the change. */
#define NCCL_MAJOR 2
#define NCCL_MINOR 32
#define NCCL_PATCH 3
#define NCCL_SUFFIX ""

#define NCCL_VERSION_CODE 23203
#define NCCL_VERSION(X, Y, Z) \
  (((X) <= 2 && (Y) <= 8) ? (X)*1000 + (Y)*100 + (Z) : (X)*10000 + (Y)*100 + (Z))

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Handles ------------------------------------------------------------------------------- */
typedef struct ncclComm* ncclComm_t;            /* a communicator */
typedef struct ncclWindow_vidmem* ncclWindow_t; /* a registered memory window */
#define NCCL_COMM_NULL NULL

/* Opaque bytes produced by ncclGetUniqueId on one rank and handed to every rank (by any means)
 * before ncclCommInitRank. */
#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
  char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* ---- Results ------------------------------------------------------------------------------- */
typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1, /* a CUDA call failed */
  ncclSystemError = 2,        /* a system call failed (socket, memory, file) */
  ncclInternalError = 3,      /* a bug in the library */
  ncclInvalidArgument = 4,    /* an argument is out of range */
  ncclInvalidUsage = 5,       /* the call is not allowed in this state */
  ncclRemoteError = 6,        /* a peer failed or went away */
  ncclInProgress = 7,         /* nonblocking operation not finished yet */
  ncclTimeout = 8,            /* an operation did not complete in time (2.29) */
  ncclNumResults = 9
} ncclResult_t;

/* ---- Configuration sentinels and flags ------------------------------------------------------- */
#define NCCL_CONFIG_UNDEF_INT INT_MIN /* "not set": the library picks the value */
#define NCCL_CONFIG_UNDEF_PTR NULL
#define NCCL_SPLIT_NOCOLOR -1 /* ncclCommSplit color: this rank joins no new communicator */
#define NCCL_UNDEF_FLOAT -1.0f

/* The magic of every versioned structure's initializer. */
#define NCCL_API_MAGIC 0xcafebeef

/* winFlags of ncclCommWindowRegister */
#define NCCL_WIN_DEFAULT 0x00
#define NCCL_WIN_COLL_SYMMETRIC 0x01 /* every rank registers a buffer of the same size */
#define NCCL_WIN_STRICT_ORDERING 0x02
#define NCCL_WIN_GIN_ONLY 0x04     /* register for GIN only */
#define NCCL_WIN_CFT_COUNTED 0x08  /* register for counted CFT endpoints only */
#define NCCL_WIN_REQUIRED_ALIGNMENT 4096

/* ncclConfig_t.CTAPolicy */
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02

/* shrinkFlags of ncclCommShrink */
#define NCCL_SHRINK_DEFAULT 0x00 /* the parent is healthy: shrink it as is */
#define NCCL_SHRINK_ABORT 0x01   /* stop the parent's pending operations first */

/* revokeFlags of ncclCommRevoke; no other value is accepted */
#define NCCL_REVOKE_DEFAULT 0x00

/* ncclConfig_t.hostCftMode (2.31) */
typedef enum {
  ncclHostCftDefault = NCCL_CONFIG_UNDEF_INT,
  ncclHostCftEnable = 1,
  ncclHostCftDisable = 2,
  ncclHostCftFallback = 3
} ncclHostCftMode_t;

/* ncclConfig_t.nvlsHostMode (2.31): bits that turn host-side NVLS parts off. */
typedef enum {
  ncclNvlsHostModeDefault = NCCL_CONFIG_UNDEF_INT,
  ncclNvlsHostModeEnable = 0,
  ncclNvlsHostModeDisableTransport = 1 << 0,
  ncclNvlsHostModeDisableSymmetricMultimem = 1 << 1,
  ncclNvlsHostModeDisable = INT_MAX
} ncclNvlsHostMode_t;

/* ---- Communicator configuration ---------------------------------------------------------------
 * Always start from NCCL_CONFIG_INITIALIZER, then set the fields you care about. The first three
 * fields identify the structure's version to the library; fields are only ever appended, and the
 * library reads no field beyond the caller's size. */
typedef struct ncclConfig_v23100 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking; /* 0: init and collectives may return ncclInProgress */
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName; /* network module to use, by name */
  int splitShare;      /* children of ncclCommSplit share the parent's resources */
  int trafficClass;
  const char* commName; /* label shown in logs */
  int collnetEnable;
  int CTAPolicy;   /* NCCL_CTA_POLICY_* */
  int shrinkShare; /* children of ncclCommShrink share the parent's resources */
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
  /* 2.29 and later */
  int graphUsageMode;
  int numRmaCtx;   /* contexts of ncclPutSignal / ncclSignal / ncclWaitSignal */
  int maxP2pPeers; /* peers a rank talks to at once by point to point */
  int graphStreamOrdering;
  int launchOrderImplicit;
  int numRmaSig;    /* signal indexes per RMA context */
  int rmaEagerInit; /* 1: set up the RMA signals at init, not at the first window */
  int hostCftMode;  /* ncclHostCftMode_t */
  int nvlsHostMode; /* ncclNvlsHostMode_t */
} ncclConfig_t;

/* clang-format off */
#define NCCL_CONFIG_INITIALIZER                                                                  \
  {                                                                                              \
    sizeof(ncclConfig_t),                             /* size */                                 \
    NCCL_API_MAGIC,                                   /* magic */                                \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */                              \
    NCCL_CONFIG_UNDEF_INT,                            /* blocking */                             \
    NCCL_CONFIG_UNDEF_INT,                            /* cgaClusterSize */                       \
    NCCL_CONFIG_UNDEF_INT,                            /* minCTAs */                              \
    NCCL_CONFIG_UNDEF_INT,                            /* maxCTAs */                              \
    NCCL_CONFIG_UNDEF_PTR,                            /* netName */                              \
    NCCL_CONFIG_UNDEF_INT,                            /* splitShare */                           \
    NCCL_CONFIG_UNDEF_INT,                            /* trafficClass */                         \
    NCCL_CONFIG_UNDEF_PTR,                            /* commName */                             \
    NCCL_CONFIG_UNDEF_INT,                            /* collnetEnable */                        \
    NCCL_CONFIG_UNDEF_INT,                            /* CTAPolicy */                            \
    NCCL_CONFIG_UNDEF_INT,                            /* shrinkShare */                          \
    NCCL_CONFIG_UNDEF_INT,                            /* nvlsCTAs */                             \
    NCCL_CONFIG_UNDEF_INT,                            /* nChannelsPerNetPeer */                  \
    NCCL_CONFIG_UNDEF_INT,                            /* nvlinkCentricSched */                   \
    NCCL_CONFIG_UNDEF_INT,                            /* graphUsageMode */                       \
    NCCL_CONFIG_UNDEF_INT,                            /* numRmaCtx */                            \
    NCCL_CONFIG_UNDEF_INT,                            /* maxP2pPeers */                          \
    NCCL_CONFIG_UNDEF_INT,                            /* graphStreamOrdering */                  \
    NCCL_CONFIG_UNDEF_INT,                            /* launchOrderImplicit */                  \
    NCCL_CONFIG_UNDEF_INT,                            /* numRmaSig */                            \
    NCCL_CONFIG_UNDEF_INT,                            /* rmaEagerInit */                         \
    NCCL_CONFIG_UNDEF_INT,                            /* hostCftMode */                          \
    NCCL_CONFIG_UNDEF_INT,                            /* nvlsHostMode */                         \
  }
/* clang-format on */

/* One vendor option of a per-call configuration: a key (vendorId, a library's own non-zero value
 * below 2^24; optionId, its option) and a value, chained through next. Baton's options:
 * vendorId NCCL_BATON_VENDOR_ID (README). Stock NCCL ignores every extension. */
typedef struct ncclConfigExt {
  struct ncclConfigExt* next;
  struct {
    int vendorId;
    int optionId;
  } key;
  union {
    int i;
    const char* s;
    void* raw;
  } val;
} ncclConfigExt_t;

/* Per-call configuration of the nccl*Config collectives (2.31): start from
 * NCCL_COLLCONFIG_INITIALIZER; set it the same on every rank. */
typedef struct ncclCollConfig_v23200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  ncclConfigExt_t* ext;     /* vendor options, or NULL */
  int minCTAs;              /* channel bounds of this call (UNDEF: the communicator's) */
  int maxCTAs;
  int nvlsCTAs;
  int cgaClusterSize;
  const char* algSelection; /* which algorithms may run ("ring", "tree,ring", "^TREE_LL") */
  int forceAlgSelection;    /* 1: a selection that cannot be honoured is an error; 0: automatic */
  int CTAPolicy;            /* NCCL_CTA_POLICY_*; UNDEF: the communicator's */
  uint64_t userProfilerTag; /* handed to profiler plugins with the call's events */
  cudaEvent_t launchCompletionEvent; /* 2.32: recorded when the call's kernel launch completes */
} ncclCollConfig_t;

/* clang-format off */
#define NCCL_COLLCONFIG_INITIALIZER                                                              \
  {                                                                                              \
    sizeof(ncclCollConfig_t),                         /* size */                                 \
    NCCL_API_MAGIC,                                   /* magic */                                \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */                              \
    NCCL_CONFIG_UNDEF_PTR,                            /* ext */                                  \
    NCCL_CONFIG_UNDEF_INT,                            /* minCTAs */                              \
    NCCL_CONFIG_UNDEF_INT,                            /* maxCTAs */                              \
    NCCL_CONFIG_UNDEF_INT,                            /* nvlsCTAs */                             \
    NCCL_CONFIG_UNDEF_INT,                            /* cgaClusterSize */                       \
    NCCL_CONFIG_UNDEF_PTR,                            /* algSelection */                         \
    1,                                                /* forceAlgSelection */                    \
    NCCL_CONFIG_UNDEF_INT,                            /* CTAPolicy */                            \
    0,                                                /* userProfilerTag */                      \
    NCCL_CONFIG_UNDEF_PTR,                            /* launchCompletionEvent */                \
  }
/* clang-format on */

/* ncclSetEncryption's argument (2.32): a pre-shared key for the library's TCP sockets. The values
 * of stock's NCCL_ENCRYPTION_MODE_* macros were not available when this header was written, so
 * they are not defined here (README); Baton refuses any configuration that carries a key. */
typedef struct {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int mode;
  const char* psk; /* NUL-terminated, at least 32 bytes */
} ncclEncryptionConfig_t;

/* Filled in by ncclGroupSimulateEnd. Start from NCCL_SIM_INFO_INITIALIZER. */
typedef struct ncclSimInfo_v22200 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  float estimatedTime; /* predicted duration of the group */
} ncclSimInfo_t;

/* clang-format off */
#define NCCL_SIM_INFO_INITIALIZER                                                                \
  {                                                                                              \
    sizeof(ncclSimInfo_t),                            /* size */                                 \
    0x74685283,                                       /* magic */                                \
    NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), /* version */                              \
    NCCL_UNDEF_FLOAT                                  /* estimatedTime */                        \
  }
/* clang-format on */

/* ---- Reduction operators and data types -------------------------------------------------------
 * ncclRedOp_t must keep the size of a plain enum. ncclMaxRedOp is the largest positive value an
 * enum of that size holds; values from ncclNumOps up to it name operators created at run time
 * (ncclRedOpCreatePreMulSum). */
typedef enum { ncclNumOps_dummy = 5 } ncclRedOp_dummy_t;
typedef enum {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff >> (32 - 8 * sizeof(ncclRedOp_dummy_t))
} ncclRedOp_t;

typedef enum {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12
} ncclDataType_t;

/* Where the scalar of ncclRedOpCreatePreMulSum lives, and when it is read. */
typedef enum {
  ncclScalarDevice = 0,       /* device memory, read while the collective runs */
  ncclScalarHostImmediate = 1 /* host memory, read before ncclRedOpCreatePreMulSum returns */
} ncclScalarResidence_t;

/* ---- Memory --------------------------------------------------------------------------------- */
/* Allocate / free device memory suitable for registration and zero-copy transfers. */
ncclResult_t ncclMemAlloc(void** ptr, size_t size);
ncclResult_t pncclMemAlloc(void** ptr, size_t size);
ncclResult_t ncclMemFree(void* ptr);
ncclResult_t pncclMemFree(void* ptr);

/* ---- Library information ------------------------------------------------------------------- */
/* *version = NCCL_VERSION_CODE of the library actually loaded. */
ncclResult_t ncclGetVersion(int* version);
ncclResult_t pncclGetVersion(int* version);

const char* ncclGetErrorString(ncclResult_t result);
const char* pncclGetErrorString(ncclResult_t result);

/* Human-readable text of the most recent error. */
const char* ncclGetLastError(ncclComm_t comm);
const char* pncclGetLastError(ncclComm_t comm);

/* Re-read the logging environment variables. Not part of the supported API. */
__attribute__((
    deprecated("ncclResetDebugInit is not supported as part of the NCCL API and will be removed in "
               "the future"))) void
ncclResetDebugInit(void);
__attribute__((
    deprecated("pncclResetDebugInit is not supported as part of the NCCL API and will be removed "
               "in the future"))) void
pncclResetDebugInit(void);

/* ---- Communicator creation ------------------------------------------------------------------ */
/* Called on one rank; the id is then shared with all ranks of the future communicator. */
ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId);
ncclResult_t pncclGetUniqueId(ncclUniqueId* uniqueId);

/* Process-wide encryption of the library's TCP sockets with a pre-shared key (2.32). Baton has
 * no TLS: a configuration carrying a key is refused with ncclInvalidUsage. */
ncclResult_t ncclSetEncryption(const ncclEncryptionConfig_t* config);
ncclResult_t pncclSetEncryption(const ncclEncryptionConfig_t* config);

/* Collective over nranks callers (threads or processes) holding the same id; each gives its
 * rank in [0, nranks). Uses the current CUDA device. */
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t pncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank);

/* Same, with a configuration (NULL: defaults). */
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
                                     ncclConfig_t* config);

/* Same, bootstrapped from nId ids (identical list on every rank) to spread the startup load. */
ncclResult_t ncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                      ncclUniqueId* commIds, ncclConfig_t* config);
ncclResult_t pncclCommInitRankScalable(ncclComm_t* newcomm, int nranks, int myrank, int nId,
                                       ncclUniqueId* commIds, ncclConfig_t* config);

/* One process, ndev devices: fills comm[0..ndev) with one communicator per device (devlist, or
 * devices 0..ndev-1 when devlist is NULL). */
ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);
ncclResult_t pncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist);

/* Collective: ranks passing the same color form a new communicator, ordered by key then by
 * parent rank. color NCCL_SPLIT_NOCOLOR yields *newcomm = NULL. config NULL: inherit. */
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                           ncclConfig_t* config);
ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                            ncclConfig_t* config);

/* A new communicator without the excluded ranks; the remaining ranks keep their order.
 * shrinkFlags: NCCL_SHRINK_*. */
ncclResult_t ncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                            ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);
ncclResult_t pncclCommShrink(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                             ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags);

/* An id for growing comm (2.29): called on one existing rank, handed to the new ranks. */
ncclResult_t ncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);
ncclResult_t pncclCommGetUniqueId(ncclComm_t comm, ncclUniqueId* uniqueId);

/* A communicator of nRanks ranks: comm's ranks keep theirs, new ranks join with comm NULL, the id
 * and their rank (2.29). Existing ranks pass rank -1 (uniqueId only on the one that made it). */
ncclResult_t ncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                          ncclComm_t* newcomm, ncclConfig_t* config);
ncclResult_t pncclCommGrow(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank,
                           ncclComm_t* newcomm, ncclConfig_t* config);

/* ---- Communicator teardown ------------------------------------------------------------------ */
/* Completes outstanding work and releases shared resources; then ncclCommDestroy. */
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t pncclCommFinalize(ncclComm_t comm);

ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t pncclCommDestroy(ncclComm_t comm);

/* Stops whatever is running and frees the communicator. */
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t pncclCommAbort(ncclComm_t comm);

/* Cancels in-flight work; afterwards only destroy, split and shrink are allowed. */
ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags);
ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags);

/* ---- Suspending a communicator's memory (2.29) ------------------------------------------------
 * NCCL_SUSPEND_MEM releases the communicator's dynamic memory (its connection buffers); nothing
 * may run on it until ncclCommResume restores them. */
#define NCCL_SUSPEND_MEM 0x01
ncclResult_t ncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t pncclCommSuspend(ncclComm_t comm, int flags);
ncclResult_t ncclCommResume(ncclComm_t comm);
ncclResult_t pncclCommResume(ncclComm_t comm);

typedef enum {
  ncclStatGpuMemSuspend = 0,   /* bytes that suspending releases */
  ncclStatGpuMemSuspended = 1, /* 1 while suspended */
  ncclStatGpuMemPersist = 2,   /* bytes that stay while suspended */
  ncclStatGpuMemTotal = 3      /* all bytes the communicator holds */
} ncclCommMemStat_t;
ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);
ncclResult_t pncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value);

/* ---- Communicator queries ------------------------------------------------------------------- */
/* Error raised asynchronously (or ncclInProgress while nonblocking work is pending). */
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);
ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* asyncError);

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t pncclCommCount(const ncclComm_t comm, int* count);

ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int* device);

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
ncclResult_t pncclCommUserRank(const ncclComm_t comm, int* rank);

/* ---- Buffer registration -------------------------------------------------------------------- */
ncclResult_t ncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t pncclCommRegister(const ncclComm_t comm, void* buff, size_t size, void** handle);
ncclResult_t ncclCommDeregister(const ncclComm_t comm, void* handle);
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void* handle);

/* Collective: registers buff as a window visible to the other ranks. winFlags: NCCL_WIN_*. */
ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                    int winFlags);
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void* buff, size_t size, ncclWindow_t* win,
                                     int winFlags);
ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win);

/* The buffer this rank registered as win (2.29). */
ncclResult_t ncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);
ncclResult_t pncclWinGetUserPtr(ncclComm_t comm, ncclWindow_t win, void** outUserPtr);

/* ---- Custom reduction operators ------------------------------------------------------------- */
/* An operator that multiplies each input by *scalar, then sums; valid only on comm and with
 * datatype. Destroy it with ncclRedOpDestroy once no call using it is pending. */
ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                       ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

/* ---- Collectives -----------------------------------------------------------------------------
 * Every rank of comm makes the matching call. A call returns once the work is queued on stream.
 * Counts are in elements of datatype. "In place" means sendbuff and recvbuff alias as noted. */

/* recvbuff (root only) = op over all ranks' sendbuff. In place: sendbuff == recvbuff. */
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclReduce(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                         cudaStream_t stream);

/* Older in-place form of ncclBroadcast. */
ncclResult_t ncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                       cudaStream_t stream);
ncclResult_t pncclBcast(void* buff, size_t count, ncclDataType_t datatype, int root,
                        ncclComm_t comm, cudaStream_t stream);

/* Every rank's recvbuff = root's sendbuff. */
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclBroadcast(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, int root, ncclComm_t comm,
                            cudaStream_t stream);

/* Every rank's recvbuff = op over all ranks' sendbuff. */
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclAllReduce(const void* sendbuff, void* recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);

/* sendbuff holds nranks*recvcount elements; rank r receives block r of the reduction.
 * In place: recvbuff == sendbuff + r*recvcount. */
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream);
ncclResult_t pncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount,
                                ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                cudaStream_t stream);

/* recvbuff holds nranks*sendcount elements; block i comes from rank i.
 * In place: sendbuff == recvbuff + r*sendcount. */
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount,
                            ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* Block j of sendbuff (count elements) goes to rank j; block i of recvbuff comes from rank i. */
ncclResult_t ncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclAlltoAll(const void* sendbuff, void* recvbuff, size_t count,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);

/* root's recvbuff block i = rank i's sendbuff. In place: sendbuff == recvbuff + root*count. */
ncclResult_t ncclGather(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclGather(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* rank i's recvbuff = root's sendbuff block i. In place: recvbuff == sendbuff + root*count. */
ncclResult_t ncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclScatter(const void* sendbuff, void* recvbuff, size_t count,
                          ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);

/* The same collectives with a per-call configuration (2.31); config NULL is the plain call. */
ncclResult_t ncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                 cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t pncclAllReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t ncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t datatype, int root, ncclComm_t comm,
                                 cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t pncclBroadcastConfig(const void* sendbuff, void* recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t ncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                              ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                              cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t pncclReduceConfig(const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm,
                               cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t ncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount,
                                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                                 const ncclCollConfig_t* config);
ncclResult_t pncclAllGatherConfig(const void* sendbuff, void* recvbuff, size_t sendcount,
                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                                  const ncclCollConfig_t* config);
ncclResult_t ncclReduceScatterConfig(const void* sendbuff, void* recvbuff, size_t recvcount,
                                     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t pncclReduceScatterConfig(const void* sendbuff, void* recvbuff, size_t recvcount,
                                      ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                      cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t ncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count,
                                ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                                const ncclCollConfig_t* config);
ncclResult_t pncclAlltoAllConfig(const void* sendbuff, void* recvbuff, size_t count,
                                 ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
                                 const ncclCollConfig_t* config);
ncclResult_t ncclGatherConfig(const void* sendbuff, void* recvbuff, size_t count,
                              ncclDataType_t datatype, int root, ncclComm_t comm,
                              cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t pncclGatherConfig(const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t ncclScatterConfig(const void* sendbuff, void* recvbuff, size_t count,
                               ncclDataType_t datatype, int root, ncclComm_t comm,
                               cudaStream_t stream, const ncclCollConfig_t* config);
ncclResult_t pncclScatterConfig(const void* sendbuff, void* recvbuff, size_t count,
                                ncclDataType_t datatype, int root, ncclComm_t comm,
                                cudaStream_t stream, const ncclCollConfig_t* config);

/* ---- Point to point --------------------------------------------------------------------------
 * A send to peer pairs with a receive from this rank on peer, same count and datatype. Sends and
 * receives that must progress together go inside one ncclGroupStart/ncclGroupEnd. */
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                      ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
                       ncclComm_t comm, cudaStream_t stream);

/* ---- One-sided operations on windows (2.29) ---------------------------------------------------
 * ncclPutSignal writes count elements of localbuff into peer's window peerWin at peerWinOffset
 * bytes, then raises signal sigIdx of context ctx on peer; ncclSignal raises it without data;
 * ncclWaitSignal waits until each descriptor's peer has raised its signal opCnt times. */
ncclResult_t ncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                           ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                           unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t pncclPutSignal(const void* localbuff, size_t count, ncclDataType_t datatype, int peer,
                            ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
                            unsigned int flags, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                        cudaStream_t stream);
ncclResult_t pncclSignal(int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                         cudaStream_t stream);

typedef struct {
  int opCnt;  /* signals to wait for */
  int peer;   /* from this rank */
  int sigIdx; /* on this signal index */
  int ctx;    /* of this context */
} ncclWaitSignalDesc_t;

ncclResult_t ncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t pncclWaitSignal(int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                             cudaStream_t stream);

/* ---- Groups ----------------------------------------------------------------------------------
 * Calls between ncclGroupStart and ncclGroupEnd are collected and issued together at
 * ncclGroupEnd: needed to drive several communicators from one thread, and to fuse operations.
 * Groups nest; only the outermost ncclGroupEnd issues the work. */
ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);

/* Like ncclGroupEnd, but only estimates the group's time into *simInfo; nothing runs. */
ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t* simInfo);
ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t* simInfo);

/* ---- Parameters (2.29) ------------------------------------------------------------------------
 * The library's parameters (NCCL_* variables) by name: a handle for typed reads, or the value as
 * text. Strings and tables returned are the library's, valid until the same call on the same
 * thread. An unknown key is ncclInvalidArgument. */
typedef struct ncclParamHandle* ncclParamHandle_t;
ncclResult_t ncclParamBind(ncclParamHandle_t* out, const char* key);
ncclResult_t pncclParamBind(ncclParamHandle_t* out, const char* key);
ncclResult_t ncclParamGetI8(ncclParamHandle_t h, int8_t* out);
ncclResult_t pncclParamGetI8(ncclParamHandle_t h, int8_t* out);
ncclResult_t ncclParamGetI16(ncclParamHandle_t h, int16_t* out);
ncclResult_t pncclParamGetI16(ncclParamHandle_t h, int16_t* out);
ncclResult_t ncclParamGetI32(ncclParamHandle_t h, int32_t* out);
ncclResult_t pncclParamGetI32(ncclParamHandle_t h, int32_t* out);
ncclResult_t ncclParamGetI64(ncclParamHandle_t h, int64_t* out);
ncclResult_t pncclParamGetI64(ncclParamHandle_t h, int64_t* out);
ncclResult_t ncclParamGetU8(ncclParamHandle_t h, uint8_t* out);
ncclResult_t pncclParamGetU8(ncclParamHandle_t h, uint8_t* out);
ncclResult_t ncclParamGetU16(ncclParamHandle_t h, uint16_t* out);
ncclResult_t pncclParamGetU16(ncclParamHandle_t h, uint16_t* out);
ncclResult_t ncclParamGetU32(ncclParamHandle_t h, uint32_t* out);
ncclResult_t pncclParamGetU32(ncclParamHandle_t h, uint32_t* out);
ncclResult_t ncclParamGetU64(ncclParamHandle_t h, uint64_t* out);
ncclResult_t pncclParamGetU64(ncclParamHandle_t h, uint64_t* out);
ncclResult_t ncclParamGetStr(ncclParamHandle_t h, const char** out);
ncclResult_t pncclParamGetStr(ncclParamHandle_t h, const char** out);
/* The value's bytes (an integer in its own width, a string with its NUL) into out. */
ncclResult_t ncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len);
ncclResult_t pncclParamGet(ncclParamHandle_t h, void* out, int maxLen, int* len);
ncclResult_t ncclParamGetParameter(const char* key, const char** value, int* valueLen);
ncclResult_t pncclParamGetParameter(const char* key, const char** value, int* valueLen);
ncclResult_t ncclParamGetAllParameterKeys(const char*** table, int* tableLen);
ncclResult_t pncclParamGetAllParameterKeys(const char*** table, int* tableLen);
/* Every parameter and its value, at INFO. */
void ncclParamDumpAll(void);
void pncclParamDumpAll(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* NCCL_H_ */
