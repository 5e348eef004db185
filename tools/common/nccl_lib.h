/* A libnccl.so.2 opened with dlopen, for Baton's tools: which file it is, whether it is Baton
 * (the build note, src/base/build_info.c) or another NCCL, and the entry points the tools call.
 * Tools never link libnccl: a process loads exactly the library it was asked for, so baton-perf
 * can time Baton and stock NCCL in the same call (each in its own rank processes). */
#ifndef BATON_TOOLS_NCCL_LIB_H
#define BATON_TOOLS_NCCL_LIB_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#include "nccl.h"

typedef struct nccl_lib {
  void* handle;
  char path[PATH_MAX]; /* the file the dynamic loader mapped */
  bool baton;          /* it carries Baton's build note */
  char build[512];     /* the note's text ("Baton 0.1.0; NCCL 2.32.3; build=..."), or "" */
  int version;         /* ncclGetVersion */
  ncclResult_t (*GetVersion)(int*);
  const char* (*GetErrorString)(ncclResult_t);
  const char* (*GetLastError)(ncclComm_t);
  ncclResult_t (*GetUniqueId)(ncclUniqueId*);
  ncclResult_t (*CommInitRank)(ncclComm_t*, int, ncclUniqueId, int);
  ncclResult_t (*CommDestroy)(ncclComm_t);
  ncclResult_t (*GroupStart)(void);
  ncclResult_t (*GroupEnd)(void);
  ncclResult_t (*AllReduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*AllGather)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*ReduceScatter)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                                cudaStream_t);
  ncclResult_t (*Broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t);
  ncclResult_t (*Reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, int, ncclComm_t,
                         cudaStream_t);
  ncclResult_t (*AlltoAll)(const void*, void*, size_t, ncclDataType_t, ncclComm_t, cudaStream_t);
  ncclResult_t (*Send)(const void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
  ncclResult_t (*Recv)(void*, size_t, ncclDataType_t, int, ncclComm_t, cudaStream_t);
} nccl_lib_t;

/* Opens spec (a path, or a file name the dynamic loader searches for, e.g. "libnccl.so.2") and
 * resolves every entry point above. 0 on success; -1 with the reason in err[errlen]. */
int nccl_lib_open(const char* spec, nccl_lib_t* out, char* err, size_t errlen);
/* One line: "<path>: Baton 0.1.0 (NCCL 2.32.3 API)" or "<path>: not Baton: NCCL 2.28.9 ...". */
void nccl_lib_describe(const nccl_lib_t* lib, char* out, size_t len);
/* The build options of a Baton library (the note's text after its second "; "), or "". */
const char* nccl_lib_build_options(const nccl_lib_t* lib);

#endif /* BATON_TOOLS_NCCL_LIB_H */
