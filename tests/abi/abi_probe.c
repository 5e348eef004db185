/* ABI probe: prints every fact of nccl.h that a compiled program depends on (sizes, alignments,
 * field offsets, enumerator values, macro values and types, initializer contents and, in C++, the
 * exact type of every entry point). It is built once against Baton's header and once against the
 * reference NCCL 2.28.9 header (PROBE_NCCL_228); compare_probes.sh fails on any difference in the
 * 2.28 facts beyond the ones 2.29-2.32 changed. Against Baton's header it also prints the facts of
 * what 2.29-2.32 added, each line starting "v232 ", which must equal nccl-2.32.3-abi-facts.txt.
 *
 * PROBE_HEADER is the full path of the header under test, so the include search path cannot pick
 * the other one by accident. */
#include PROBE_HEADER

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
#include <type_traits>
#include <typeinfo>
#define ALIGN_OF(t) alignof(t)
#define IS_SIGNED_ENUM(t) std::is_signed<std::underlying_type<t>::type>::value
#else
#define ALIGN_OF(t) _Alignof(t)
#define IS_SIGNED_ENUM(t) ((long long)((t)-1) < 0LL)
#endif

/* ---- The type of an expression, by name ---------------------------------------------------- */
#ifdef __cplusplus
static inline const char* type_name(int) {
  return "int";
}
static inline const char* type_name(unsigned int) {
  return "unsigned int";
}
static inline const char* type_name(long) {
  return "long";
}
static inline const char* type_name(unsigned long) {
  return "unsigned long";
}
static inline const char* type_name(long long) {
  return "long long";
}
static inline const char* type_name(unsigned long long) {
  return "unsigned long long";
}
static inline const char* type_name(float) {
  return "float";
}
static inline const char* type_name(double) {
  return "double";
}
static inline const char* type_name(const char*) {
  return "const char*";
}
#define TYPE_NAME(x) type_name(x)
#else
#define TYPE_NAME(x) \
  _Generic((x), int: "int", unsigned int: "unsigned int", long: "long",                          \
           unsigned long: "unsigned long", long long: "long long",                               \
           unsigned long long: "unsigned long long", float: "float", double: "double",           \
           char*: "char*", const char*: "const char*", default: "other")
#endif

#define PRINT_INT(m) printf("macro %s = %lld (%s)\n", #m, (long long)(m), TYPE_NAME(m))

static void print_macros(void) {
  PRINT_INT(NCCL_MAJOR);
  PRINT_INT(NCCL_MINOR);
  PRINT_INT(NCCL_PATCH);
  printf("macro NCCL_SUFFIX = \"%s\" (%zu bytes)\n", NCCL_SUFFIX, sizeof(NCCL_SUFFIX));
  PRINT_INT(NCCL_VERSION_CODE);
  PRINT_INT(NCCL_UNIQUE_ID_BYTES);
  PRINT_INT(NCCL_CONFIG_UNDEF_INT);
  PRINT_INT(NCCL_SPLIT_NOCOLOR);
  PRINT_INT(NCCL_WIN_DEFAULT);
  PRINT_INT(NCCL_WIN_COLL_SYMMETRIC);
  PRINT_INT(NCCL_WIN_REQUIRED_ALIGNMENT);
  PRINT_INT(NCCL_CTA_POLICY_DEFAULT);
  PRINT_INT(NCCL_CTA_POLICY_EFFICIENCY);
  PRINT_INT(NCCL_CTA_POLICY_ZERO);
  PRINT_INT(NCCL_SHRINK_DEFAULT);
  PRINT_INT(NCCL_SHRINK_ABORT);
  PRINT_INT(NCCL_REVOKE_DEFAULT);
  printf("macro NCCL_UNDEF_FLOAT = %a (%s)\n", (double)NCCL_UNDEF_FLOAT,
         TYPE_NAME(NCCL_UNDEF_FLOAT));
  /* NULL's own type differs between C and C++; only its value matters here. */
  printf("macro NCCL_COMM_NULL is null: %d\n", (ncclComm_t)NCCL_COMM_NULL == (ncclComm_t)0);
  printf("macro NCCL_CONFIG_UNDEF_PTR is null: %d\n",
         (const char*)NCCL_CONFIG_UNDEF_PTR == (const char*)0);

  /* NCCL_VERSION over both encodings and their boundary. */
  static const int xs[] = {1, 2, 3};
  static const int ys[] = {0, 7, 8, 9, 28, 99};
  static const int zs[] = {0, 1, 9, 99};
  for (size_t i = 0; i < sizeof(xs) / sizeof(xs[0]); i++)
    for (size_t j = 0; j < sizeof(ys) / sizeof(ys[0]); j++)
      for (size_t k = 0; k < sizeof(zs) / sizeof(zs[0]); k++)
        printf("macro NCCL_VERSION(%d,%d,%d) = %d\n", xs[i], ys[j], zs[k],
               NCCL_VERSION(xs[i], ys[j], zs[k]));
  PRINT_INT(NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH));
}

/* ---- Enumerations --------------------------------------------------------------------------- */
#define PRINT_ENUM_TYPE(t)                                                              \
  printf("enum %s: size %zu align %zu signed %d\n", #t, sizeof(t), (size_t)ALIGN_OF(t), \
         (int)IS_SIGNED_ENUM(t))
#define PRINT_ENUMERATOR(e) printf("enumerator %s = %lld\n", #e, (long long)(e))

static void print_enums(void) {
  PRINT_ENUM_TYPE(ncclResult_t);
  PRINT_ENUMERATOR(ncclSuccess);
  PRINT_ENUMERATOR(ncclUnhandledCudaError);
  PRINT_ENUMERATOR(ncclSystemError);
  PRINT_ENUMERATOR(ncclInternalError);
  PRINT_ENUMERATOR(ncclInvalidArgument);
  PRINT_ENUMERATOR(ncclInvalidUsage);
  PRINT_ENUMERATOR(ncclRemoteError);
  PRINT_ENUMERATOR(ncclInProgress);
  PRINT_ENUMERATOR(ncclNumResults);

  PRINT_ENUM_TYPE(ncclRedOp_dummy_t);
  PRINT_ENUMERATOR(ncclNumOps_dummy);
  PRINT_ENUM_TYPE(ncclRedOp_t);
  PRINT_ENUMERATOR(ncclSum);
  PRINT_ENUMERATOR(ncclProd);
  PRINT_ENUMERATOR(ncclMax);
  PRINT_ENUMERATOR(ncclMin);
  PRINT_ENUMERATOR(ncclAvg);
  PRINT_ENUMERATOR(ncclNumOps);
  PRINT_ENUMERATOR(ncclMaxRedOp);

  PRINT_ENUM_TYPE(ncclDataType_t);
  PRINT_ENUMERATOR(ncclInt8);
  PRINT_ENUMERATOR(ncclChar);
  PRINT_ENUMERATOR(ncclUint8);
  PRINT_ENUMERATOR(ncclInt32);
  PRINT_ENUMERATOR(ncclInt);
  PRINT_ENUMERATOR(ncclUint32);
  PRINT_ENUMERATOR(ncclInt64);
  PRINT_ENUMERATOR(ncclUint64);
  PRINT_ENUMERATOR(ncclFloat16);
  PRINT_ENUMERATOR(ncclHalf);
  PRINT_ENUMERATOR(ncclFloat32);
  PRINT_ENUMERATOR(ncclFloat);
  PRINT_ENUMERATOR(ncclFloat64);
  PRINT_ENUMERATOR(ncclDouble);
  PRINT_ENUMERATOR(ncclBfloat16);
  PRINT_ENUMERATOR(ncclFloat8e4m3);
  PRINT_ENUMERATOR(ncclFloat8e5m2);
  PRINT_ENUMERATOR(ncclNumTypes);

  PRINT_ENUM_TYPE(ncclScalarResidence_t);
  PRINT_ENUMERATOR(ncclScalarDevice);
  PRINT_ENUMERATOR(ncclScalarHostImmediate);
}

/* ---- Structures and handles ----------------------------------------------------------------- */
#define PRINT_TYPE(t) printf("type %s: size %zu align %zu\n", #t, sizeof(t), (size_t)ALIGN_OF(t))
#define PRINT_FIELD(t, f) \
  printf("field %s.%s: offset %zu size %zu\n", #t, #f, offsetof(t, f), sizeof(((t*)0)->f))

static void print_structs(void) {
  PRINT_TYPE(ncclComm_t);
  PRINT_TYPE(ncclWindow_t);

  PRINT_TYPE(ncclUniqueId);
  PRINT_FIELD(ncclUniqueId, internal);

  PRINT_TYPE(ncclConfig_t);
  PRINT_FIELD(ncclConfig_t, size);
  PRINT_FIELD(ncclConfig_t, magic);
  PRINT_FIELD(ncclConfig_t, version);
  PRINT_FIELD(ncclConfig_t, blocking);
  PRINT_FIELD(ncclConfig_t, cgaClusterSize);
  PRINT_FIELD(ncclConfig_t, minCTAs);
  PRINT_FIELD(ncclConfig_t, maxCTAs);
  PRINT_FIELD(ncclConfig_t, netName);
  PRINT_FIELD(ncclConfig_t, splitShare);
  PRINT_FIELD(ncclConfig_t, trafficClass);
  PRINT_FIELD(ncclConfig_t, commName);
  PRINT_FIELD(ncclConfig_t, collnetEnable);
  PRINT_FIELD(ncclConfig_t, CTAPolicy);
  PRINT_FIELD(ncclConfig_t, shrinkShare);
  PRINT_FIELD(ncclConfig_t, nvlsCTAs);
  PRINT_FIELD(ncclConfig_t, nChannelsPerNetPeer);
  PRINT_FIELD(ncclConfig_t, nvlinkCentricSched);

  PRINT_TYPE(ncclSimInfo_t);
  PRINT_FIELD(ncclSimInfo_t, size);
  PRINT_FIELD(ncclSimInfo_t, magic);
  PRINT_FIELD(ncclSimInfo_t, version);
  PRINT_FIELD(ncclSimInfo_t, estimatedTime);
}

/* ---- Initializers --------------------------------------------------------------------------- */
#define PRINT_INIT(v, f) printf("init %s.%s = %lld\n", #v, #f, (long long)(v).f)
#define PRINT_INIT_PTR(v, f) printf("init %s.%s is null: %d\n", #v, #f, (v).f == NULL)

static void print_initializers(void) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  PRINT_INIT(config, size);
  PRINT_INIT(config, magic);
  PRINT_INIT(config, version);
  PRINT_INIT(config, blocking);
  PRINT_INIT(config, cgaClusterSize);
  PRINT_INIT(config, minCTAs);
  PRINT_INIT(config, maxCTAs);
  PRINT_INIT_PTR(config, netName);
  PRINT_INIT(config, splitShare);
  PRINT_INIT(config, trafficClass);
  PRINT_INIT_PTR(config, commName);
  PRINT_INIT(config, collnetEnable);
  PRINT_INIT(config, CTAPolicy);
  PRINT_INIT(config, shrinkShare);
  PRINT_INIT(config, nvlsCTAs);
  PRINT_INIT(config, nChannelsPerNetPeer);
  PRINT_INIT(config, nvlinkCentricSched);

  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  PRINT_INIT(sim, size);
  PRINT_INIT(sim, magic);
  PRINT_INIT(sim, version);
  printf("init sim.estimatedTime = %a\n", (double)sim.estimatedTime);
}

/* ---- What 2.29-2.32 added (not in the 2.28 reference header) -------------------------------- */
#ifndef PROBE_NCCL_228
#define V232(...) (printf("v232 "), printf(__VA_ARGS__))
#define V232_INT(m) V232("macro %s = %lld (%s)\n", #m, (long long)(m), TYPE_NAME(m))
#define V232_ENUM(e) V232("enumerator %s = %lld\n", #e, (long long)(e))
#define V232_TYPE(t) V232("type %s: size %zu align %zu\n", #t, sizeof(t), (size_t)ALIGN_OF(t))
#define V232_FIELD(t, f) \
  V232("field %s.%s: offset %zu size %zu\n", #t, #f, offsetof(t, f), sizeof(((t*)0)->f))
#define V232_INIT(v, f) V232("init %s.%s = %lld\n", #v, #f, (long long)(v).f)
#define V232_INIT_PTR(v, f) V232("init %s.%s is null: %d\n", #v, #f, (v).f == NULL)

static void print_232(void) {
  V232_INT(NCCL_API_MAGIC);
  V232_INT(NCCL_WIN_STRICT_ORDERING);
  V232_INT(NCCL_WIN_GIN_ONLY);
  V232_INT(NCCL_WIN_CFT_COUNTED);
  V232_INT(NCCL_SUSPEND_MEM);
  V232_ENUM(ncclTimeout);
  V232_ENUM(ncclNumResults);
  V232_ENUM(ncclHostCftDefault);
  V232_ENUM(ncclHostCftEnable);
  V232_ENUM(ncclHostCftDisable);
  V232_ENUM(ncclHostCftFallback);
  V232_ENUM(ncclNvlsHostModeDefault);
  V232_ENUM(ncclNvlsHostModeEnable);
  V232_ENUM(ncclNvlsHostModeDisableTransport);
  V232_ENUM(ncclNvlsHostModeDisableSymmetricMultimem);
  V232_ENUM(ncclNvlsHostModeDisable);
  V232_ENUM(ncclStatGpuMemSuspend);
  V232_ENUM(ncclStatGpuMemSuspended);
  V232_ENUM(ncclStatGpuMemPersist);
  V232_ENUM(ncclStatGpuMemTotal);
  V232_TYPE(ncclCommMemStat_t);

  V232_TYPE(ncclConfig_t);
  V232_FIELD(ncclConfig_t, nvlinkCentricSched);
  V232_FIELD(ncclConfig_t, graphUsageMode);
  V232_FIELD(ncclConfig_t, numRmaCtx);
  V232_FIELD(ncclConfig_t, maxP2pPeers);
  V232_FIELD(ncclConfig_t, graphStreamOrdering);
  V232_FIELD(ncclConfig_t, launchOrderImplicit);
  V232_FIELD(ncclConfig_t, numRmaSig);
  V232_FIELD(ncclConfig_t, rmaEagerInit);
  V232_FIELD(ncclConfig_t, hostCftMode);
  V232_FIELD(ncclConfig_t, nvlsHostMode);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  V232_INIT(config, size);
  V232_INIT(config, magic);
  V232_INIT(config, graphUsageMode);
  V232_INIT(config, numRmaCtx);
  V232_INIT(config, maxP2pPeers);
  V232_INIT(config, graphStreamOrdering);
  V232_INIT(config, launchOrderImplicit);
  V232_INIT(config, numRmaSig);
  V232_INIT(config, rmaEagerInit);
  V232_INIT(config, hostCftMode);
  V232_INIT(config, nvlsHostMode);

  V232_TYPE(ncclConfigExt_t);
  V232_FIELD(ncclConfigExt_t, next);
  V232_FIELD(ncclConfigExt_t, key.vendorId);
  V232_FIELD(ncclConfigExt_t, key.optionId);
  V232_FIELD(ncclConfigExt_t, val);
  V232_FIELD(ncclConfigExt_t, val.i);
  V232_FIELD(ncclConfigExt_t, val.s);
  V232_FIELD(ncclConfigExt_t, val.raw);

  V232_TYPE(ncclCollConfig_t);
  V232_FIELD(ncclCollConfig_t, size);
  V232_FIELD(ncclCollConfig_t, magic);
  V232_FIELD(ncclCollConfig_t, version);
  V232_FIELD(ncclCollConfig_t, ext);
  V232_FIELD(ncclCollConfig_t, minCTAs);
  V232_FIELD(ncclCollConfig_t, maxCTAs);
  V232_FIELD(ncclCollConfig_t, nvlsCTAs);
  V232_FIELD(ncclCollConfig_t, cgaClusterSize);
  V232_FIELD(ncclCollConfig_t, algSelection);
  V232_FIELD(ncclCollConfig_t, forceAlgSelection);
  V232_FIELD(ncclCollConfig_t, CTAPolicy);
  V232_FIELD(ncclCollConfig_t, userProfilerTag);
  V232_FIELD(ncclCollConfig_t, launchCompletionEvent);
  ncclCollConfig_t coll = NCCL_COLLCONFIG_INITIALIZER;
  V232_INIT(coll, size);
  V232_INIT(coll, magic);
  V232_INIT_PTR(coll, ext);
  V232_INIT(coll, minCTAs);
  V232_INIT(coll, maxCTAs);
  V232_INIT(coll, nvlsCTAs);
  V232_INIT(coll, cgaClusterSize);
  V232_INIT_PTR(coll, algSelection);
  V232_INIT(coll, forceAlgSelection);
  V232_INIT(coll, CTAPolicy);
  V232_INIT(coll, userProfilerTag);
  V232_INIT_PTR(coll, launchCompletionEvent);

  V232_TYPE(ncclEncryptionConfig_t);
  V232_FIELD(ncclEncryptionConfig_t, size);
  V232_FIELD(ncclEncryptionConfig_t, magic);
  V232_FIELD(ncclEncryptionConfig_t, version);
  V232_FIELD(ncclEncryptionConfig_t, mode);
  V232_FIELD(ncclEncryptionConfig_t, psk);

  V232_TYPE(ncclWaitSignalDesc_t);
  V232_FIELD(ncclWaitSignalDesc_t, opCnt);
  V232_FIELD(ncclWaitSignalDesc_t, peer);
  V232_FIELD(ncclWaitSignalDesc_t, sigIdx);
  V232_FIELD(ncclWaitSignalDesc_t, ctx);
  V232_TYPE(ncclParamHandle_t);
}
#endif

/* ---- Entry points --------------------------------------------------------------------------- */
/* Every function of the header, by base name; the probe covers ncclX and pncclX. */
#define PROBE_FUNCTIONS(X)                                                                         \
  X(ncclMemAlloc)                                                                                  \
  X(ncclMemFree) X(ncclGetVersion) X(ncclGetErrorString) X(ncclGetLastError) X(ncclResetDebugInit) \
      X(ncclGetUniqueId) X(ncclCommInitRank) X(ncclCommInitRankConfig) X(ncclCommInitRankScalable) \
          X(ncclCommInitAll) X(ncclCommSplit) X(ncclCommShrink) X(ncclCommFinalize)                \
              X(ncclCommDestroy) X(ncclCommAbort) X(ncclCommRevoke) X(ncclCommGetAsyncError)       \
                  X(ncclCommCount) X(ncclCommCuDevice) X(ncclCommUserRank) X(ncclCommRegister)     \
                      X(ncclCommDeregister) X(ncclCommWindowRegister) X(ncclCommWindowDeregister)  \
                          X(ncclRedOpCreatePreMulSum) X(ncclRedOpDestroy) X(ncclReduce)            \
                              X(ncclBcast) X(ncclBroadcast) X(ncclAllReduce) X(ncclReduceScatter)  \
                                  X(ncclAllGather) X(ncclAlltoAll) X(ncclGather) X(ncclScatter)    \
                                      X(ncclSend) X(ncclRecv) X(ncclGroupStart) X(ncclGroupEnd)    \
                                          X(ncclGroupSimulateEnd)

/* The functions 2.29-2.32 added to nccl.h. */
#ifdef PROBE_NCCL_228
#define PROBE_FUNCTIONS_232(X)
#else
#define PROBE_FUNCTIONS_232(X)                                                                   \
  X(ncclSetEncryption) X(ncclCommGetUniqueId) X(ncclCommGrow) X(ncclCommSuspend)                 \
  X(ncclCommResume) X(ncclCommMemStats) X(ncclWinGetUserPtr) X(ncclAllReduceConfig)              \
  X(ncclBroadcastConfig) X(ncclReduceConfig) X(ncclAllGatherConfig) X(ncclReduceScatterConfig)   \
  X(ncclAlltoAllConfig) X(ncclGatherConfig) X(ncclScatterConfig) X(ncclPutSignal) X(ncclSignal)  \
  X(ncclWaitSignal) X(ncclParamBind) X(ncclParamGetI8) X(ncclParamGetI16) X(ncclParamGetI32)     \
  X(ncclParamGetI64) X(ncclParamGetU8) X(ncclParamGetU16) X(ncclParamGetU32) X(ncclParamGetU64)  \
  X(ncclParamGetStr) X(ncclParamGet) X(ncclParamGetParameter) X(ncclParamGetAllParameterKeys)    \
  X(ncclParamDumpAll)
#endif

#ifdef __cplusplus
/* The mangled name of a function's type spells its exact parameter and return types, including
 * structure tags (ncclConfig_v22800) and handle types. typeid does not evaluate its operand, so
 * nothing here needs the library at link time. */
#define PRINT_FUNCTION(f)                            \
  printf("function %s: %s\n", #f, typeid(f).name()); \
  printf("function p%s: %s\n", #f, typeid(p##f).name());
#define PRINT_FUNCTION_232(f)                                                       \
  V232("function %s declared: %d\n", #f, sizeof(&f) == sizeof(&p##f));              \
  printf("v232cxx function %s: %s\n", #f, typeid(f).name());                       \
  printf("v232cxx function p%s: %s\n", #f, typeid(p##f).name());
static void print_types_cxx(void) {
  printf("typeid ncclUniqueId: %s\n", typeid(ncclUniqueId).name());
  printf("typeid ncclConfig_t: %s\n", typeid(ncclConfig_t).name());
  printf("typeid ncclSimInfo_t: %s\n", typeid(ncclSimInfo_t).name());
  printf("typeid ncclComm_t: %s\n", typeid(ncclComm_t).name());
  printf("typeid ncclWindow_t: %s\n", typeid(ncclWindow_t).name());
  printf("typeid ncclRedOp_t: %s\n", typeid(ncclRedOp_t).name());
  printf("typeid ncclDataType_t: %s\n", typeid(ncclDataType_t).name());
  printf("typeid ncclScalarResidence_t: %s\n", typeid(ncclScalarResidence_t).name());
  PROBE_FUNCTIONS(PRINT_FUNCTION)
  /* No reference header of 2.32 to compare these with: printed, not compared. */
  PROBE_FUNCTIONS_232(PRINT_FUNCTION_232)
}
#else
/* In C, check that every entry point is declared (sizeof does not evaluate, so no link needed). */
#define PRINT_FUNCTION(f)                                                         \
  printf("function %s declared: %d\n", #f, sizeof(&f) == sizeof(void (*)(void))); \
  printf("function p%s declared: %d\n", #f, sizeof(&p##f) == sizeof(void (*)(void)));
#define PRINT_FUNCTION_232(f) V232("function %s declared: %d\n", #f, sizeof(&f) == sizeof(&p##f));
static void print_types_c(void) {
  PROBE_FUNCTIONS(PRINT_FUNCTION)
  PROBE_FUNCTIONS_232(PRINT_FUNCTION_232)
}
#endif

int main(void) {
  print_macros();
  print_enums();
  print_structs();
  print_initializers();
#ifndef PROBE_NCCL_228
  print_232();
#endif
#ifdef __cplusplus
  print_types_cxx();
#else
  print_types_c();
#endif
  return 0;
}
