/* The binary interfaces of stock NCCL's tuner plugins (ncclTunerPlugin_v2 .. _v6) and
 * profiler plugins (ncclProfiler_v1 .. _v7), as Baton loads them. Written here from the layouts
 * stock's headers define; the _Static_asserts hold sizes and offsets measured on x86-64 with a
 * probe compiled against stock's own headers, so a slip in a field shows at build time.
 * Plain C11: tests/unit plugins include it too. */
#ifndef BATON_PLUGIN_ABI_H
#define BATON_PLUGIN_ABI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "nccl.h"

/* The logger every plugin kind receives: Baton's log_emit has this shape. */
typedef void (*plugin_logger_t)(int level, unsigned long flags, const char* file, int line,
                                const char* fmt, ...);

/* ncclFunc_t as plugins see it. */
enum {
  PLUGIN_FUNC_BROADCAST = 0,
  PLUGIN_FUNC_REDUCE = 1,
  PLUGIN_FUNC_ALLGATHER = 2,
  PLUGIN_FUNC_REDUCESCATTER = 3,
  PLUGIN_FUNC_ALLREDUCE = 4,
  PLUGIN_FUNC_SENDRECV = 5,
  PLUGIN_FUNC_SEND = 6,
  PLUGIN_FUNC_RECV = 7,
};

/* ==== Tuner ==================================================================================
 * The cost table is float[TUNER_ALGOS][TUNER_PROTOS] of microseconds, passed as float**; an entry
 * of -1 (TUNER_IGNORE) is an algorithm/protocol pair the library cannot run. Stock picks the least
 * non-negative entry after the call, and uses nChannels when the tuner sets it above 0. */
#define TUNER_ALGOS 7  /* Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree, PAT */
#define TUNER_PROTOS 3 /* LL, LL128, Simple */
#define TUNER_ALGO_TREE 0
#define TUNER_ALGO_RING 1
#define TUNER_PROTO_LL 0
#define TUNER_PROTO_LL128 1
#define TUNER_PROTO_SIMPLE 2
#define TUNER_IGNORE (-1.0f)
#define TUNER_HW_LINKS 3
#define TUNER_COMPCAPS 4
#define TUNER_SCALES 3

typedef struct tuner_nvl_domain_v5 {
  int domains; /* NVLink domains (hosts, for Baton) */
  int min_ranks_per_domain;
  int max_ranks_per_domain;
} tuner_nvl_domain_v5_t;

typedef struct tuner_constants_v5 {
  double base_lat[TUNER_ALGOS][TUNER_PROTOS];
  double hw_lat[TUNER_HW_LINKS][TUNER_ALGOS][TUNER_PROTOS];
  double ll_max_bw[TUNER_COMPCAPS][TUNER_SCALES];
  double ring_ll128_bw[TUNER_COMPCAPS][TUNER_SCALES];
  double tree_ll128_bw[TUNER_COMPCAPS][TUNER_SCALES];
  double tree_bw[TUNER_COMPCAPS][TUNER_SCALES];
  double nvls_tree_bw[TUNER_COMPCAPS][TUNER_SCALES];
} tuner_constants_v5_t;

typedef struct tuner_v5 {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                       plugin_logger_t log, tuner_nvl_domain_v5_t* nvl, tuner_constants_v5_t* k);
  ncclResult_t (*get_coll_info)(void* ctx, int func, size_t nbytes, int npipe_ops, float** table,
                                int nalgos, int nprotos, int reg_buff, int* nchannels);
  ncclResult_t (*finalize)(void* ctx);
} tuner_v5_t;

/* v6 (stock 2.30): v5 and an optional getChunkSize at the end; the constants and the
 * NVLink-domain summary are v5's. */
typedef struct tuner_v6 {
  tuner_v5_t v5; /* name, init, getCollInfo, finalize */
  ncclResult_t (*get_chunk_size)(void* ctx, int func, size_t nbytes, int algo, int proto,
                                 int nchannels, size_t* chunk_size);
} tuner_v6_t;

/* v4: init without comm id, domains and constants; "destroy" instead of finalize. */
typedef struct tuner_v4 {
  const char* name;
  ncclResult_t (*init)(size_t nranks, size_t nnodes, plugin_logger_t log, void** ctx);
  ncclResult_t (*get_coll_info)(void* ctx, int func, size_t nbytes, int npipe_ops, float** table,
                                int nalgos, int nprotos, int reg_buff, int* nchannels);
  ncclResult_t (*destroy)(void* ctx);
} tuner_v4_t;

/* v3: as v4 without reg_buff. */
typedef struct tuner_v3 {
  const char* name;
  ncclResult_t (*init)(size_t nranks, size_t nnodes, plugin_logger_t log, void** ctx);
  ncclResult_t (*get_coll_info)(void* ctx, int func, size_t nbytes, int npipe_ops, float** table,
                                int nalgos, int nprotos, int* nchannels);
  ncclResult_t (*destroy)(void* ctx);
} tuner_v3_t;

/* v2: no cost table: the tuner names algorithm and protocol (-1: no opinion). */
typedef struct tuner_v2 {
  const char* name;
  ncclResult_t (*init)(size_t nranks, size_t nnodes, plugin_logger_t log, void** ctx);
  ncclResult_t (*get_coll_info)(void* ctx, int func, size_t nbytes, int collnet_support,
                                int nvls_support, int npipe_ops, int* algo, int* proto,
                                int* nchannels);
  ncclResult_t (*destroy)(void* ctx);
} tuner_v2_t;

/* ==== Profiler =============================================================================== */
enum {
  PROF_GROUP = 1 << 0,
  PROF_COLL = 1 << 1,
  PROF_P2P = 1 << 2,
  PROF_PROXY_OP = 1 << 3,
  PROF_PROXY_STEP = 1 << 4,
  PROF_PROXY_CTRL = 1 << 5,
  PROF_KERNEL_CH = 1 << 6,
  PROF_NET_PLUGIN = 1 << 7,
  PROF_GROUP_API = 1 << 8,      /* v5 */
  PROF_COLL_API = 1 << 9,       /* v5 */
  PROF_P2P_API = 1 << 10,       /* v5 */
  PROF_KERNEL_LAUNCH = 1 << 11, /* v5 */
  PROF_CE_COLL = 1 << 12,       /* v6: copy-engine collectives */
  PROF_CE_SYNC = 1 << 13,       /* v6 */
  PROF_CE_BATCH = 1 << 14,      /* v6 */
  PROF_KERNEL_PHASE = 1 << 15,  /* v7: a phase of a kernel channel (stock's symmetric kernels) */
};

/* Event states (one numbering for every version). */
enum {
  PROF_STATE_PROXY_OP_IN_PROGRESS = 19,
  PROF_STATE_STEP_SEND_GPU_WAIT = 8,
  PROF_STATE_STEP_SEND_PEER_WAIT = 20,
  PROF_STATE_STEP_SEND_WAIT = 9,
  PROF_STATE_STEP_RECV_WAIT = 10,
  PROF_STATE_STEP_RECV_FLUSH_WAIT = 11,
  PROF_STATE_STEP_RECV_GPU_WAIT = 12,
  PROF_STATE_CTRL_IDLE = 13,
  PROF_STATE_CTRL_ACTIVE = 14,
  PROF_STATE_CTRL_SLEEP = 15,
  PROF_STATE_CTRL_WAKEUP = 16,
  PROF_STATE_CTRL_APPEND = 17,
  PROF_STATE_CTRL_APPEND_END = 18,
  PROF_STATE_NET_PLUGIN_UPDATE = 21,
  PROF_STATE_KERNEL_CH_STOP = 22,
  PROF_STATE_GROUP_START_API_STOP = 23,
  PROF_STATE_GROUP_END_API_START = 24,
  PROF_STATE_CE_COLL_START = 25, /* v6: 25 .. 30 start and complete CE coll, sync and batch */
  PROF_STATE_CE_BATCH_COMPLETE = 30,
  PROF_STATE_KERNEL_PHASE_STOP = 31, /* v7 */
};

/* Parts every version shares. */
typedef struct prof_proxy_op {
  pid_t pid;
  uint8_t channel;
  int peer;
  int nsteps;
  int chunk_size;
  int is_send;
} prof_proxy_op_t;

typedef struct prof_net_plugin {
  int64_t id;
  void* data;
} prof_net_plugin_t;

typedef struct prof_kernel_ch { /* v4 on (v3's has the channel only) */
  uint8_t channel;
  uint64_t ptimer; /* start time: the GPU's globaltimer */
} prof_kernel_ch_t;

typedef struct prof_group_api { /* v5 on */
  bool graph_captured;
  int group_depth;
} prof_group_api_t;

typedef struct prof_ce_sync { /* v6 on */
  bool is_complete;
  int nranks;
} prof_ce_sync_t;

typedef struct prof_ce_batch { /* v6 on */
  int nops;
  size_t total_bytes;
  bool use_intra_sync;
} prof_ce_batch_t;

/* The v5 event descriptor (v6's is it with three more members). */
typedef struct prof_descr_v5 {
  uint64_t type; /* one PROF_* bit */
  void* parent;  /* the parent event's handle, or NULL */
  int rank;
  union {
    prof_group_api_t group_api;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      int root;
      void* stream;
      bool graph_captured;
    } coll_api;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      void* stream;
      bool graph_captured;
    } p2p_api;
    struct {
      void* stream;
    } kernel_launch;
    struct {
      uint64_t seq;
      const char* func;
      const void* sendbuff;
      void* recvbuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nchannels;
      uint8_t nwarps;
      const char* algo;
      const char* proto;
      void* parent_group; /* the Group event (what v4 calls the parent) */
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nchannels;
      void* parent_group;
    } p2p;
    prof_proxy_op_t proxy_op;
    struct {
      int step;
    } proxy_step;
    prof_kernel_ch_t kernel_ch; /* ptimer: the host clock on the host executor */
    prof_net_plugin_t net_plugin;
  };
} prof_descr_v5_t;

typedef union prof_state_args_v5 {
  struct {
    size_t trans_size;
  } proxy_step;
  struct {
    int appended_proxy_ops;
  } proxy_ctrl;
  struct {
    void* data;
  } net_plugin;
  struct {
    uint64_t ptimer;
  } kernel_ch;
} prof_state_args_v5_t;

typedef struct profiler_v5 {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t comm_id, int* mask, const char* comm_name, int nnodes,
                       int nranks, int rank, plugin_logger_t log);
  ncclResult_t (*start_event)(void* ctx, void** handle, prof_descr_v5_t* d);
  ncclResult_t (*stop_event)(void* handle);
  ncclResult_t (*record_state)(void* handle, int state, prof_state_args_v5_t* args);
  ncclResult_t (*finalize)(void* ctx);
} profiler_v5_t;

/* ---- v7 and v6 ----
 * v7 (stock 2.31): v6's events, a user tag (ncclCollConfig_t.userProfilerTag, 0 when untagged)
 * appended to the API, collective, point-to-point and CE collective events, the collective's
 * kernel variant and symmetric flag after its parent group, and the KernelPhase event. Each
 * member begins with its v5/v6 namesake's fields, at the same offsets (checked below). Baton
 * builds this descriptor and adapts it for older plugins. */
typedef struct prof_descr_v7 {
  uint64_t type; /* one PROF_* bit */
  void* parent;  /* the parent event's handle, or NULL */
  int rank;
  union {
    prof_group_api_t group_api;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      int root;
      void* stream;
      bool graph_captured;
      uint64_t user_tag;
    } coll_api;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      void* stream;
      bool graph_captured;
      uint64_t user_tag;
    } p2p_api;
    struct {
      void* stream;
    } kernel_launch;
    struct {
      uint64_t seq;
      const char* func;
      const void* sendbuff;
      void* recvbuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nchannels;
      uint8_t nwarps;
      const char* algo;
      const char* proto;
      void* parent_group;
      const char* kernel_variant; /* stock: a symmetric kernel's name, else NULL */
      bool is_sym_coll;
      uint64_t user_tag;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nchannels;
      void* parent_group;
      uint64_t user_tag;
    } p2p;
    prof_proxy_op_t proxy_op;
    struct {
      int step;
    } proxy_step;
    prof_kernel_ch_t kernel_ch;
    prof_net_plugin_t net_plugin;
    struct {
      uint64_t seq;
      const char* func;
      const void* sendbuff;
      void* recvbuff;
      size_t count;
      int root;
      const char* datatype;
      const char* sync_strategy;
      bool intra_batch_sync;
      uint32_t batch_size;
      uint32_t nbatches;
      uint32_t ce_seq;
      void* stream;
      uint64_t user_tag;
    } ce_coll;
    prof_ce_sync_t ce_sync;
    prof_ce_batch_t ce_batch;
    struct {
      uint8_t channel;
      uint8_t phase; /* 0 initial sync, 1 compute, 2 final sync */
      const char* phase_name;
      uint64_t ptimer;
    } kernel_phase;
  };
} prof_descr_v7_t;

/* v6 (stock 2.29): v5's events and the copy-engine ones, each as in v7 less its user tag.
 * A v6 descriptor is a v5 descriptor with three more union members: `ce` views its header and
 * those members. */
typedef struct prof_descr_v6 {
  union {
    prof_descr_v5_t v5;
    struct {
      uint64_t type;
      void* parent;
      int rank;
      union {
        struct {
          uint64_t seq;
          const char* func;
          const void* sendbuff;
          void* recvbuff;
          size_t count;
          int root;
          const char* datatype;
          const char* sync_strategy;
          bool intra_batch_sync;
          uint32_t batch_size;
          uint32_t nbatches;
          uint32_t ce_seq;
          void* stream;
        } ce_coll;
        prof_ce_sync_t ce_sync;
        prof_ce_batch_t ce_batch;
      };
    } ce;
  };
} prof_descr_v6_t;

/* v5's state arguments serve v6 and v7 (KernelPhase's stop time is kernel_ch.ptimer). */
typedef struct profiler_v7 {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t comm_id, int* mask, const char* comm_name, int nnodes,
                       int nranks, int rank, plugin_logger_t log);
  ncclResult_t (*start_event)(void* ctx, void** handle, prof_descr_v7_t* d);
  ncclResult_t (*stop_event)(void* handle);
  ncclResult_t (*record_state)(void* handle, int state, prof_state_args_v5_t* args);
  ncclResult_t (*finalize)(void* ctx);
} profiler_v7_t;

typedef struct profiler_v6 {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t comm_id, int* mask, const char* comm_name, int nnodes,
                       int nranks, int rank, plugin_logger_t log);
  ncclResult_t (*start_event)(void* ctx, void** handle, prof_descr_v6_t* d);
  ncclResult_t (*stop_event)(void* handle);
  ncclResult_t (*record_state)(void* handle, int state, prof_state_args_v5_t* args);
  ncclResult_t (*finalize)(void* ctx);
} profiler_v6_t;

/* v4: no API events; coll/p2p parent is the Group event; 8-bit type; init's arguments differ. */
typedef struct prof_descr_v4 {
  uint8_t type;
  void* parent;
  int rank;
  union {
    struct {
      uint64_t seq;
      const char* func;
      const void* sendbuff;
      void* recvbuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nchannels;
      uint8_t nwarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nchannels;
    } p2p;
    prof_proxy_op_t proxy_op;
    struct {
      int step;
    } proxy_step;
    prof_kernel_ch_t kernel_ch;
    prof_net_plugin_t net_plugin;
  };
} prof_descr_v4_t;

typedef prof_state_args_v5_t prof_state_args_v4_t; /* the same union */

typedef struct profiler_v4 {
  const char* name;
  ncclResult_t (*init)(void** ctx, int* mask, const char* comm_name, uint64_t comm_hash, int nnodes,
                       int nranks, int rank, plugin_logger_t log);
  ncclResult_t (*start_event)(void* ctx, void** handle, prof_descr_v4_t* d);
  ncclResult_t (*stop_event)(void* handle);
  ncclResult_t (*record_state)(void* handle, int state, prof_state_args_v4_t* args);
  ncclResult_t (*finalize)(void* ctx);
} profiler_v4_t;

/* v2 and v3's point-to-point part. */
typedef struct prof_p2p_v3 {
  const char* name;
  uint64_t comm_hash;
  const char* func;
  void* buff;
  const char* datatype;
  size_t count;
  int peer;
} prof_p2p_v3_t;

/* v3: communicator name and hash in every coll/p2p event, no nchannels for p2p. */
typedef struct prof_descr_v3 {
  uint8_t type;
  void* parent;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t comm_hash;
      uint64_t seq;
      const char* func;
      const void* sendbuff;
      void* recvbuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t max_channels;
      uint8_t nwarps;
      const char* algo;
      const char* proto;
    } coll;
    prof_p2p_v3_t p2p;
    prof_proxy_op_t proxy_op;
    struct {
      int step;
    } proxy_step;
    struct {
      uint8_t channel;
    } kernel_ch;
    prof_net_plugin_t net_plugin;
  };
} prof_descr_v3_t;

/* v1..v3 state arguments. */
typedef union prof_state_args_v3 {
  struct {
    size_t trans_size;
    int steps;
  } proxy_op;
  struct {
    int appended_proxy_ops;
  } proxy_ctrl;
} prof_state_args_v3_t;

/* v2: as v3 plus traffic bytes, no kernel-channel or net events. */
typedef struct prof_descr_v2 {
  uint8_t type;
  void* parent;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t comm_hash;
      uint64_t seq;
      const char* func;
      const void* sendbuff;
      void* recvbuff;
      size_t count;
      int root;
      const char* datatype;
      size_t traffic_bytes;
      uint8_t max_channels;
      uint8_t nwarps;
      const char* algo;
      const char* proto;
    } coll;
    prof_p2p_v3_t p2p;
    prof_proxy_op_t proxy_op;
    struct {
      int step;
    } proxy_step;
  };
} prof_descr_v2_t;

/* v1: function, datatype, algorithm and protocol as numbers. */
typedef struct prof_descr_v1 {
  uint8_t type;
  void* parent;
  int rank;
  union {
    struct {
      const char* name;
      uint64_t comm_hash;
      uint64_t seq;
      uint8_t func;
      const void* sendbuff;
      void* recvbuff;
      size_t count;
      int root;
      uint8_t datatype;
      uint32_t op;
      size_t traffic_bytes;
      uint8_t max_channels;
      uint8_t nwarps;
      uint8_t algo;
      uint8_t proto;
      int is_collnet;
      int is_nvls;
    } coll;
    struct {
      const char* name;
      uint64_t comm_hash;
      uint8_t func;
      void* buff;
      uint8_t datatype;
      size_t count;
      int peer;
    } p2p;
    prof_proxy_op_t proxy_op;
    struct {
      int step;
    } proxy_step;
  };
} prof_descr_v1_t;

/* v1..v3 share the plugin table's shape; only the descriptor type differs. */
typedef struct profiler_v3 {
  const char* name;
  ncclResult_t (*init)(void** ctx, int* mask);
  ncclResult_t (*start_event)(void* ctx, void** handle, void* descr);
  ncclResult_t (*stop_event)(void* handle);
  ncclResult_t (*record_state)(void* handle, int state, prof_state_args_v3_t* args);
  ncclResult_t (*finalize)(void* ctx);
} profiler_v3_t;

#if defined(__x86_64__)
/* Measured with stock's headers (see the top of this file). */
_Static_assert(sizeof(tuner_constants_v5_t) == 1152, "ncclTunerConstants_v5_t");
_Static_assert(offsetof(tuner_constants_v5_t, ll_max_bw) == 672, "ncclTunerConstants_v5_t");
_Static_assert(sizeof(tuner_nvl_domain_v5_t) == 12, "ncclNvlDomainInfo_v5_t");
_Static_assert(sizeof(tuner_v5_t) == 32 && sizeof(tuner_v2_t) == 32, "ncclTuner_v5_t");
_Static_assert(sizeof(tuner_v6_t) == 40 && offsetof(tuner_v6_t, get_chunk_size) == 32,
               "ncclTuner_v6_t: v5's table and getChunkSize");
/* v7 and v6: computed from stock's declarations (2.31's profiler_v7.h, 2.29's profiler_v6.h)
 * by the x86-64 rules, and v7's members checked to begin as v5's (the adapter relies on it). */
_Static_assert(sizeof(prof_descr_v7_t) == 136, "ncclProfilerEventDescr_v7_t");
_Static_assert(offsetof(prof_descr_v7_t, coll_api.user_tag) == 72, "v7 collApi.userTag");
_Static_assert(offsetof(prof_descr_v7_t, p2p_api.user_tag) == 64, "v7 p2pApi.userTag");
_Static_assert(offsetof(prof_descr_v7_t, coll.kernel_variant) == 112, "v7 coll.kernelVariant");
_Static_assert(offsetof(prof_descr_v7_t, coll.is_sym_coll) == 120, "v7 coll.isSymColl");
_Static_assert(offsetof(prof_descr_v7_t, coll.user_tag) == 128, "v7 coll.userTag");
_Static_assert(offsetof(prof_descr_v7_t, p2p.user_tag) == 72, "v7 p2p.userTag");
_Static_assert(offsetof(prof_descr_v7_t, ce_coll.stream) == 104, "v7 ceColl.stream");
_Static_assert(offsetof(prof_descr_v7_t, ce_coll.user_tag) == 112, "v7 ceColl.userTag");
_Static_assert(offsetof(prof_descr_v7_t, kernel_phase.ptimer) == 40, "v7 kernelPhase.pTimer");
_Static_assert(offsetof(prof_descr_v7_t, coll.parent_group) ==
                       offsetof(prof_descr_v5_t, coll.parent_group) &&
                   offsetof(prof_descr_v7_t, coll_api.graph_captured) ==
                       offsetof(prof_descr_v5_t, coll_api.graph_captured) &&
                   offsetof(prof_descr_v7_t, p2p_api.graph_captured) ==
                       offsetof(prof_descr_v5_t, p2p_api.graph_captured) &&
                   offsetof(prof_descr_v7_t, p2p.parent_group) ==
                       offsetof(prof_descr_v5_t, p2p.parent_group),
               "v7's members begin as v5's");
_Static_assert(sizeof(prof_descr_v6_t) == 112 && offsetof(prof_descr_v6_t, ce.ce_coll) == 24,
               "ncclProfilerEventDescr_v6_t");
_Static_assert(offsetof(prof_descr_v6_t, ce.ce_coll.stream) == 104 &&
                   offsetof(prof_descr_v6_t, ce.ce_batch.use_intra_sync) == 40,
               "v6 ceColl.stream, ceCollBatch.useIntraSync");
_Static_assert(sizeof(profiler_v7_t) == 48 && sizeof(profiler_v6_t) == 48, "ncclProfiler_v7_t");
_Static_assert(sizeof(prof_descr_v5_t) == 112, "ncclProfilerEventDescr_v5_t");
_Static_assert(offsetof(prof_descr_v5_t, rank) == 16, "v5 rank");
_Static_assert(offsetof(prof_descr_v5_t, coll.seq) == 24, "v5 coll.seqNumber");
_Static_assert(offsetof(prof_descr_v5_t, coll.algo) == 88, "v5 coll.algo");
_Static_assert(offsetof(prof_descr_v5_t, coll.parent_group) == 104, "v5 coll.parentGroup");
_Static_assert(offsetof(prof_descr_v5_t, p2p.parent_group) == 64, "v5 p2p.parentGroup");
_Static_assert(offsetof(prof_descr_v5_t, proxy_op.is_send) == 44, "v5 proxyOp.isSend");
_Static_assert(offsetof(prof_descr_v5_t, kernel_ch.ptimer) == 32, "v5 kernelCh.pTimer");
_Static_assert(offsetof(prof_descr_v5_t, coll_api.graph_captured) == 64, "v5 collApi");
_Static_assert(offsetof(prof_descr_v5_t, p2p_api.graph_captured) == 56, "v5 p2pApi");
_Static_assert(sizeof(prof_state_args_v5_t) == 8, "ncclProfilerEventStateArgs_v5_t");
_Static_assert(sizeof(profiler_v5_t) == 48, "ncclProfiler_v5_t");
_Static_assert(sizeof(prof_descr_v4_t) == 104, "ncclProfilerEventDescr_v4_t");
_Static_assert(offsetof(prof_descr_v4_t, coll.proto) == 96, "v4 coll.proto");
_Static_assert(offsetof(prof_descr_v4_t, p2p.nchannels) == 60, "v4 p2p.nChannels");
_Static_assert(offsetof(prof_descr_v4_t, kernel_ch.ptimer) == 32, "v4 kernelCh.pTimer");
_Static_assert(sizeof(prof_descr_v3_t) == 120, "ncclProfilerEventDescr_v3_t");
_Static_assert(offsetof(prof_descr_v3_t, coll.proto) == 112, "v3 coll.proto");
_Static_assert(offsetof(prof_descr_v3_t, p2p.peer) == 72, "v3 p2p.peer");
_Static_assert(sizeof(prof_descr_v2_t) == 128, "ncclProfilerEventDescr_v2_t");
_Static_assert(offsetof(prof_descr_v2_t, coll.traffic_bytes) == 96, "v2 coll.trafficBytes");
_Static_assert(offsetof(prof_descr_v2_t, coll.proto) == 120, "v2 coll.proto");
_Static_assert(sizeof(prof_descr_v1_t) == 120, "ncclProfilerEventDescr_v1_t");
_Static_assert(offsetof(prof_descr_v1_t, coll.op) == 88, "v1 coll.op");
_Static_assert(offsetof(prof_descr_v1_t, coll.is_nvls) == 112, "v1 coll.isNvls");
_Static_assert(offsetof(prof_descr_v1_t, p2p.peer) == 72, "v1 p2p.peer");
_Static_assert(sizeof(prof_state_args_v3_t) == 16, "ncclProfilerEventStateArgs_v3_t");
#endif

#endif /* BATON_PLUGIN_ABI_H */
