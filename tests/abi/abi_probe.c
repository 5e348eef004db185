/* ABI probe: prints every fact of nccl.h that a compiled program depends on (sizes, alignments,
 * field offsets, enumerator values, macro values and types, initializer contents and, in C++, the
 * exact type of every entry point). It is built once against Baton's header and once against the
 * reference NCCL 2.28.9 header; run_abi_compare.sh fails on any difference in the output.
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

#ifdef __cplusplus
/* The mangled name of a function's type spells its exact parameter and return types, including
 * structure tags (ncclConfig_v22800) and handle types. typeid does not evaluate its operand, so
 * nothing here needs the library at link time. */
#define PRINT_FUNCTION(f)                            \
  printf("function %s: %s\n", #f, typeid(f).name()); \
  printf("function p%s: %s\n", #f, typeid(p##f).name());
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
}
#else
/* In C, check that every entry point is declared (sizeof does not evaluate, so no link needed). */
#define PRINT_FUNCTION(f)                                                         \
  printf("function %s declared: %d\n", #f, sizeof(&f) == sizeof(void (*)(void))); \
  printf("function p%s declared: %d\n", #f, sizeof(&p##f) == sizeof(void (*)(void)));
static void print_types_c(void) {
  PROBE_FUNCTIONS(PRINT_FUNCTION)
}
#endif

int main(void) {
  print_macros();
  print_enums();
  print_structs();
  print_initializers();
#ifdef __cplusplus
  print_types_cxx();
#else
  print_types_c();
#endif
  return 0;
}
