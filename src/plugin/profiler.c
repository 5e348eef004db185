/* Profiler plugins: ncclProfiler_v7 .. _v1 behind profiler_open / _start / _record / _stop.
 * Callers build v7 descriptors; an older plugin gets its own version's descriptor (v7's user tags
 * and kernel variant dropped), and events its version does not define (KernelPhase before v7, the
 * copy-engine events before v6, the API and kernel-launch events before v5, kernel-channel and
 * net events before v3) are not sent to it. Before v5 a collective's or point-to-point's parent
 * is the Group event (v5 keeps that in parent_group and points parent at the API event). v1 gets
 * numbers where later versions get names. */
#include <stdlib.h>
#include <unistd.h>

#include "plugin/loader.h"

static const char* const profiler_symbols[] = {
    "ncclProfiler_v7", "ncclProfiler_v6", "ncclProfiler_v5", "ncclProfiler_v4",
    "ncclProfiler_v3", "ncclProfiler_v2", "ncclProfiler_v1"};
enum { PROF_V7 = 0, PROF_V6, PROF_V5, PROF_V4, PROF_V3, PROF_V2, PROF_V1, PROF_VERSIONS };

static plugin_slot_t profiler_slot = {.kind = PLUGIN_PROFILER,
                                      .param = PARAM_PROFILER_PLUGIN,
                                      .tag = "PROFILER",
                                      .what = "profiler",
                                      .symbols = profiler_symbols,
                                      .nsymbols = PROF_VERSIONS,
                                      .lock = PTHREAD_MUTEX_INITIALIZER};

struct profiler {
  int version; /* PROF_V7 .. PROF_V1 */
  const void* table;
  void* ctx;
  int mask; /* what the plugin asked for, less what its version cannot receive */
  uint64_t comm_hash;
  const char* comm_name; /* owned copy, "" when none */
};

/* Event types each version defines. */
static int profiler_version_types(int version) {
  int v2 = PROF_GROUP | PROF_COLL | PROF_P2P | PROF_PROXY_OP | PROF_PROXY_STEP | PROF_PROXY_CTRL;
  int v4 = v2 | PROF_KERNEL_CH | PROF_NET_PLUGIN;
  int v5 = v4 | PROF_GROUP_API | PROF_COLL_API | PROF_P2P_API | PROF_KERNEL_LAUNCH;
  int v6 = v5 | PROF_CE_COLL | PROF_CE_SYNC | PROF_CE_BATCH;
  if (version == PROF_V7) return v6 | PROF_KERNEL_PHASE;
  if (version == PROF_V6) return v6;
  if (version == PROF_V5) return v5;
  if (version == PROF_V4 || version == PROF_V3) return v4;
  return v2;
}

ncclResult_t profiler_open(const profiler_comm_info_t* info, profiler_t** out) {
  *out = NULL;
  int version = 0;
  const void* table = plugin_slot_acquire(&profiler_slot, &version);
  if (table == NULL) return ncclSuccess;
  profiler_t* p = calloc(1, sizeof(*p));
  char* name = strdup(info->comm_name ? info->comm_name : "");
  if (p == NULL || name == NULL) {
    free(p);
    free(name);
    plugin_slot_release(&profiler_slot);
    WARN("Out of memory for a profiler context");
    return ncclSystemError;
  }
  *p = (profiler_t){
      .version = version, .table = table, .comm_hash = info->comm_hash, .comm_name = name};
  plugin_logger_t log = (plugin_logger_t)log_emit;
  int mask = 0;
  ncclResult_t res;
  if (version <= PROF_V5) /* v5, v6 and v7 share init */
    res = ((const profiler_v5_t*)table)
              ->init(&p->ctx, info->comm_hash, &mask, info->comm_name, info->nnodes, info->nranks,
                     info->rank, log);
  else if (version == PROF_V4)
    res = ((const profiler_v4_t*)table)
              ->init(&p->ctx, &mask, info->comm_name, info->comm_hash, info->nnodes, info->nranks,
                     info->rank, log);
  else
    res = ((const profiler_v3_t*)table)->init(&p->ctx, &mask);
  if (res != ncclSuccess) {
    /* As stock: the communicator goes on without it. */
    INFO(NCCL_INIT, "PROFILER/Plugin: init failed (error %d); continuing without a profiler",
         (int)res);
    free(name);
    free(p);
    plugin_slot_release(&profiler_slot);
    return ncclSuccess;
  }
  p->mask = mask & profiler_version_types(version);
  /* As stock: a KernelPhase is a KernelCh's child, so asking for one turns the other on (Baton
   * emits no KernelPhase, but the plugin gets the KernelCh events stock would give it). */
  if (p->mask & PROF_KERNEL_PHASE) p->mask |= PROF_KERNEL_CH;
  INFO(NCCL_INIT, "PROFILER/Plugin: %s (%s) asks for events 0x%x", *(const char* const*)table,
       profiler_symbols[version], mask);
  *out = p;
  return ncclSuccess;
}

int profiler_mask(const profiler_t* p) {
  return p ? p->mask : 0;
}

/* ---- v1 numbers ------------------------------------------------------------------------------ */
static int profiler_index(const char* s, const char* const* names, int n) {
  for (int i = 0; s != NULL && i < n; i++)
    if (names[i] && strcmp(s, names[i]) == 0) return i;
  return 0;
}

static uint8_t profiler_func_number(const char* s) {
  static const char* const names[] = {"Broadcast", "Reduce",   "AllGather", "ReduceScatter",
                                      "AllReduce", "SendRecv", "Send",      "Recv"};
  return (uint8_t)profiler_index(s, names, 8);
}

static uint8_t profiler_type_number(const char* s) {
  for (int t = 0; s != NULL && t < ncclNumTypes; t++)
    if (strcmp(s, datatype_name((ncclDataType_t)t)) == 0) return (uint8_t)t;
  return 0;
}

static uint8_t profiler_algo_number(const char* s) {
  static const char* const names[] = {"TREE", "RING"};
  return (uint8_t)profiler_index(s, names, 2);
}

static uint8_t profiler_proto_number(const char* s) {
  static const char* const names[] = {"LL", "LL128", "SIMPLE"};
  return (uint8_t)profiler_index(s, names, 3);
}

/* ---- Adapting descriptors -------------------------------------------------------------------- */
/* v6 and v5: each v7 member is its v5 namesake (a shared type) or begins with its fields
 * (plugin_abi.h checks the offsets), so the older member is the first bytes of the newer one.
 * Copy-engine and KernelPhase events never get here: Baton emits neither. */
static void profiler_to_v5(const prof_descr_v7_t* d, prof_descr_v5_t* o) {
  memset(o, 0, sizeof(*o));
  o->type = d->type;
  o->parent = d->parent;
  o->rank = d->rank;
  switch (d->type) {
    case PROF_GROUP_API:
      o->group_api = d->group_api;
      break;
    case PROF_COLL_API:
      memcpy(&o->coll_api, &d->coll_api, sizeof(o->coll_api));
      break;
    case PROF_P2P_API:
      memcpy(&o->p2p_api, &d->p2p_api, sizeof(o->p2p_api));
      break;
    case PROF_KERNEL_LAUNCH:
      o->kernel_launch.stream = d->kernel_launch.stream;
      break;
    case PROF_COLL:
      memcpy(&o->coll, &d->coll, sizeof(o->coll));
      break;
    case PROF_P2P:
      memcpy(&o->p2p, &d->p2p, sizeof(o->p2p));
      break;
    case PROF_PROXY_OP:
      o->proxy_op = d->proxy_op;
      break;
    case PROF_PROXY_STEP:
      o->proxy_step.step = d->proxy_step.step;
      break;
    case PROF_KERNEL_CH:
      o->kernel_ch = d->kernel_ch;
      break;
    case PROF_NET_PLUGIN:
      o->net_plugin = d->net_plugin;
      break;
    default:
      break;
  }
}

static void profiler_to_v4(const prof_descr_v5_t* d, prof_descr_v4_t* o) {
  memset(o, 0, sizeof(*o));
  o->type = (uint8_t)d->type;
  o->parent = d->parent;
  o->rank = d->rank;
  switch (d->type) {
    case PROF_COLL:
      o->parent = d->coll.parent_group;
      o->coll.seq = d->coll.seq;
      o->coll.func = d->coll.func;
      o->coll.sendbuff = d->coll.sendbuff;
      o->coll.recvbuff = d->coll.recvbuff;
      o->coll.count = d->coll.count;
      o->coll.root = d->coll.root;
      o->coll.datatype = d->coll.datatype;
      o->coll.nchannels = d->coll.nchannels;
      o->coll.nwarps = d->coll.nwarps;
      o->coll.algo = d->coll.algo;
      o->coll.proto = d->coll.proto;
      break;
    case PROF_P2P:
      o->parent = d->p2p.parent_group;
      o->p2p.func = d->p2p.func;
      o->p2p.buff = d->p2p.buff;
      o->p2p.datatype = d->p2p.datatype;
      o->p2p.count = d->p2p.count;
      o->p2p.peer = d->p2p.peer;
      o->p2p.nchannels = d->p2p.nchannels;
      break;
    case PROF_PROXY_OP:
      o->proxy_op = d->proxy_op;
      break;
    case PROF_PROXY_STEP:
      o->proxy_step.step = d->proxy_step.step;
      break;
    case PROF_KERNEL_CH:
      o->kernel_ch = d->kernel_ch;
      break;
    case PROF_NET_PLUGIN:
      o->net_plugin = d->net_plugin;
      break;
    default:
      break;
  }
}

/* v3: v4's fields, the communicator's name and hash in collective and point-to-point events. */
static void profiler_to_v3(const profiler_t* p, const prof_descr_v5_t* d, prof_descr_v3_t* o) {
  prof_descr_v4_t v4;
  profiler_to_v4(d, &v4);
  memset(o, 0, sizeof(*o));
  o->type = v4.type;
  o->parent = v4.parent;
  o->rank = v4.rank;
  if (d->type == PROF_COLL) {
    o->coll.name = p->comm_name;
    o->coll.comm_hash = p->comm_hash;
    o->coll.seq = v4.coll.seq;
    o->coll.func = v4.coll.func;
    o->coll.sendbuff = v4.coll.sendbuff;
    o->coll.recvbuff = v4.coll.recvbuff;
    o->coll.count = v4.coll.count;
    o->coll.root = v4.coll.root;
    o->coll.datatype = v4.coll.datatype;
    o->coll.max_channels = v4.coll.nchannels;
    o->coll.nwarps = v4.coll.nwarps;
    o->coll.algo = v4.coll.algo;
    o->coll.proto = v4.coll.proto;
  } else if (d->type == PROF_P2P) {
    o->p2p = (prof_p2p_v3_t){.name = p->comm_name,
                             .comm_hash = p->comm_hash,
                             .func = v4.p2p.func,
                             .buff = v4.p2p.buff,
                             .datatype = v4.p2p.datatype,
                             .count = v4.p2p.count,
                             .peer = v4.p2p.peer};
  } else if (d->type == PROF_PROXY_OP) {
    o->proxy_op = v4.proxy_op;
  } else if (d->type == PROF_PROXY_STEP) {
    o->proxy_step.step = v4.proxy_step.step;
  } else if (d->type == PROF_KERNEL_CH) {
    o->kernel_ch.channel = v4.kernel_ch.channel;
  } else if (d->type == PROF_NET_PLUGIN) {
    o->net_plugin = v4.net_plugin;
  }
}

/* v2: v3 with traffic bytes in collectives (not known here: 0); no kernel-channel or net events
 * reach it (profiler_version_types). */
static void profiler_to_v2(const profiler_t* p, const prof_descr_v5_t* d, prof_descr_v2_t* o) {
  prof_descr_v3_t v3;
  profiler_to_v3(p, d, &v3);
  memset(o, 0, sizeof(*o));
  o->type = v3.type;
  o->parent = v3.parent;
  o->rank = v3.rank;
  if (d->type == PROF_COLL) {
    o->coll.name = v3.coll.name;
    o->coll.comm_hash = v3.coll.comm_hash;
    o->coll.seq = v3.coll.seq;
    o->coll.func = v3.coll.func;
    o->coll.sendbuff = v3.coll.sendbuff;
    o->coll.recvbuff = v3.coll.recvbuff;
    o->coll.count = v3.coll.count;
    o->coll.root = v3.coll.root;
    o->coll.datatype = v3.coll.datatype;
    o->coll.max_channels = v3.coll.max_channels;
    o->coll.nwarps = v3.coll.nwarps;
    o->coll.algo = v3.coll.algo;
    o->coll.proto = v3.coll.proto;
  } else if (d->type == PROF_P2P) {
    o->p2p = v3.p2p;
  } else if (d->type == PROF_PROXY_OP) {
    o->proxy_op = v3.proxy_op;
  } else if (d->type == PROF_PROXY_STEP) {
    o->proxy_step.step = v3.proxy_step.step;
  }
}

static void profiler_to_v1(const profiler_t* p, const prof_descr_v5_t* d, prof_descr_v1_t* o) {
  prof_descr_v2_t v2;
  profiler_to_v2(p, d, &v2);
  memset(o, 0, sizeof(*o));
  o->type = v2.type;
  o->parent = v2.parent;
  o->rank = v2.rank;
  if (d->type == PROF_COLL) {
    o->coll.name = v2.coll.name;
    o->coll.comm_hash = v2.coll.comm_hash;
    o->coll.seq = v2.coll.seq;
    o->coll.func = profiler_func_number(v2.coll.func);
    o->coll.sendbuff = v2.coll.sendbuff;
    o->coll.recvbuff = v2.coll.recvbuff;
    o->coll.count = v2.coll.count;
    o->coll.root = v2.coll.root;
    o->coll.datatype = profiler_type_number(v2.coll.datatype);
    o->coll.max_channels = v2.coll.max_channels;
    o->coll.nwarps = v2.coll.nwarps;
    o->coll.algo = profiler_algo_number(v2.coll.algo);
    o->coll.proto = profiler_proto_number(v2.coll.proto);
  } else if (d->type == PROF_P2P) {
    o->p2p.name = v2.p2p.name;
    o->p2p.comm_hash = v2.p2p.comm_hash;
    o->p2p.func = profiler_func_number(v2.p2p.func);
    o->p2p.buff = v2.p2p.buff;
    o->p2p.datatype = profiler_type_number(v2.p2p.datatype);
    o->p2p.count = v2.p2p.count;
    o->p2p.peer = v2.p2p.peer;
  } else if (d->type == PROF_PROXY_OP) {
    o->proxy_op = v2.proxy_op;
  } else if (d->type == PROF_PROXY_STEP) {
    o->proxy_step.step = v2.proxy_step.step;
  }
}

/* ---- Events ---------------------------------------------------------------------------------- */
void* profiler_start(profiler_t* p, prof_descr_v7_t* d7) {
  if (p == NULL || (p->mask & (int)d7->type) == 0) return NULL;
  void* handle = NULL;
  ncclResult_t res;
  if (p->version == PROF_V7)
    return ((const profiler_v7_t*)p->table)->start_event(p->ctx, &handle, d7) == ncclSuccess
               ? handle
               : NULL;
  prof_descr_v6_t v6;
  prof_descr_v5_t* d = &v6.v5;
  profiler_to_v5(d7, d);
  if (p->version == PROF_V6) {
    res = ((const profiler_v6_t*)p->table)->start_event(p->ctx, &handle, &v6);
  } else if (p->version == PROF_V5) {
    res = ((const profiler_v5_t*)p->table)->start_event(p->ctx, &handle, d);
  } else if (p->version == PROF_V4) {
    prof_descr_v4_t v4;
    profiler_to_v4(d, &v4);
    res = ((const profiler_v4_t*)p->table)->start_event(p->ctx, &handle, &v4);
  } else if (p->version == PROF_V3) {
    prof_descr_v3_t v3;
    profiler_to_v3(p, d, &v3);
    res = ((const profiler_v3_t*)p->table)->start_event(p->ctx, &handle, &v3);
  } else if (p->version == PROF_V2) {
    prof_descr_v2_t v2;
    profiler_to_v2(p, d, &v2);
    res = ((const profiler_v3_t*)p->table)->start_event(p->ctx, &handle, &v2);
  } else {
    prof_descr_v1_t v1;
    profiler_to_v1(p, d, &v1);
    res = ((const profiler_v3_t*)p->table)->start_event(p->ctx, &handle, &v1);
  }
  return res == ncclSuccess ? handle : NULL;
}

void profiler_record(profiler_t* p, void* handle, int state, prof_state_args_v5_t* args) {
  if (p == NULL || handle == NULL) return;
  if (p->version <= PROF_V4) {
    /* v4 .. v7 share the state arguments (and Baton records no v6/v7 state). */
    (void)((const profiler_v5_t*)p->table)->record_state(handle, state, args);
    return;
  }
  /* v1..v3 know the proxy and control states only; their arguments differ. */
  if (state == PROF_STATE_KERNEL_CH_STOP || state == PROF_STATE_GROUP_START_API_STOP ||
      state == PROF_STATE_GROUP_END_API_START || state == PROF_STATE_NET_PLUGIN_UPDATE)
    return;
  prof_state_args_v3_t old;
  memset(&old, 0, sizeof(old));
  if (args != NULL) {
    if (state == PROF_STATE_CTRL_APPEND_END)
      old.proxy_ctrl.appended_proxy_ops = args->proxy_ctrl.appended_proxy_ops;
    else
      old.proxy_op.trans_size = args->proxy_step.trans_size;
  }
  (void)((const profiler_v3_t*)p->table)->record_state(handle, state, &old);
}

void profiler_stop(profiler_t* p, void* handle) {
  if (p == NULL || handle == NULL) return;
  /* stop_event has the same place and signature in every version. */
  (void)((const profiler_v5_t*)p->table)->stop_event(handle);
}

void profiler_close(profiler_t* p) {
  if (p == NULL) return;
  (void)((const profiler_v5_t*)p->table)->finalize(p->ctx);
  free((void*)p->comm_name);
  free(p);
  plugin_slot_release(&profiler_slot);
}
