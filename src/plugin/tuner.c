/* Tuner plugins: ncclTunerPlugin_v6 .. _v2 behind tuner_open / tuner_choose / tuner_close,
 * the newest a library exports taken first (as stock's loader). v6 and v5 are called as is (v6's
 * table starts with v5's; its optional getChunkSize is not consulted: Baton's chunking follows
 * its FIFO slots, src/collectives/plan.c); v3/v4 lack the communicator id, the NVLink-domain
 * summary and the constants (and v3 the registered-buffer flag); v2 names an algorithm and a
 * protocol instead of editing the table, which Baton turns into a cost of 0 for that pair (as
 * stock). The constants Baton hands a v5 tuner are zeros: Baton's cost model (src/topo/tuning.c) is
 * not built on stock's constants, and a tuner's edits to them are not used. */
#include <stdlib.h>

#include "plugin/loader.h"

static const char* const tuner_symbols[] = {"ncclTunerPlugin_v6", "ncclTunerPlugin_v5",
                                            "ncclTunerPlugin_v4", "ncclTunerPlugin_v3",
                                            "ncclTunerPlugin_v2"};
enum { TUNER_V6 = 0, TUNER_V5, TUNER_V4, TUNER_V3, TUNER_V2 };

static plugin_slot_t tuner_slot = {.kind = PLUGIN_TUNER,
                                   .param = PARAM_TUNER_PLUGIN,
                                   .tag = "TUNER",
                                   .what = "tuner",
                                   .symbols = tuner_symbols,
                                   .nsymbols = 5,
                                   .lock = PTHREAD_MUTEX_INITIALIZER};

struct tuner {
  int version; /* TUNER_V6 .. TUNER_V2 */
  const void* table;
  void* ctx;
};

ncclResult_t tuner_open(const tuner_comm_info_t* info, tuner_t** out) {
  *out = NULL;
  int version = 0;
  const void* table = plugin_slot_acquire(&tuner_slot, &version);
  if (table == NULL) return ncclSuccess;
  tuner_t* t = calloc(1, sizeof(*t));
  if (t == NULL) {
    plugin_slot_release(&tuner_slot);
    WARN("Out of memory for a tuner context");
    return ncclSystemError;
  }
  t->version = version;
  t->table = table;
  ncclResult_t res;
  plugin_logger_t log = (plugin_logger_t)log_emit;
  if (version == TUNER_V6 && ((const tuner_v6_t*)table)->get_chunk_size != NULL)
    INFO(NCCL_INIT | NCCL_TUNING,
         "TUNER/Plugin: %s's getChunkSize is not consulted (Baton's chunks follow its FIFO slots)",
         tuner_name(&(tuner_t){.table = table}));
  if (version == TUNER_V6 || version == TUNER_V5) { /* v6's table starts with v5's */
    tuner_nvl_domain_v5_t nvl = {.domains = info->nnodes,
                                 .min_ranks_per_domain = info->min_ranks_per_node,
                                 .max_ranks_per_domain = info->max_ranks_per_node};
    tuner_constants_v5_t k;
    memset(&k, 0, sizeof(k));
    res = ((const tuner_v5_t*)table)
              ->init(&t->ctx, info->comm_hash, (size_t)info->nranks, (size_t)info->nnodes, log,
                     &nvl, &k);
  } else {
    /* v2, v3 and v4 share init's signature (and its place in the table). */
    res =
        ((const tuner_v4_t*)table)->init((size_t)info->nranks, (size_t)info->nnodes, log, &t->ctx);
  }
  if (res != ncclSuccess) {
    WARN("TUNER/Plugin: %s's init failed (error %d); this communicator tunes itself", tuner_name(t),
         (int)res);
    free(t);
    plugin_slot_release(&tuner_slot);
    return ncclSuccess;
  }
  INFO(NCCL_INIT | NCCL_TUNING, "TUNER/Plugin: %s (%s) tunes this communicator", tuner_name(t),
       tuner_symbols[version]);
  *out = t;
  return ncclSuccess;
}

const char* tuner_name(const tuner_t* t) {
  const char* name = t ? *(const char* const*)t->table : NULL;
  return name ? name : "?";
}

ncclResult_t tuner_choose(tuner_t* t, int func, size_t nbytes, int npipe_ops,
                          float table[TUNER_ALGOS][TUNER_PROTOS], int* nchannels) {
  *nchannels = 0;
  float** cost = (float**)table; /* stock passes the 2-D array as float** */
  ncclResult_t res;
  switch (t->version) {
    case TUNER_V6:
    case TUNER_V5:
      res = ((const tuner_v5_t*)t->table)
                ->get_coll_info(t->ctx, func, nbytes, npipe_ops, cost, TUNER_ALGOS, TUNER_PROTOS, 0,
                                nchannels);
      break;
    case TUNER_V4:
      res = ((const tuner_v4_t*)t->table)
                ->get_coll_info(t->ctx, func, nbytes, npipe_ops, cost, TUNER_ALGOS, TUNER_PROTOS, 0,
                                nchannels);
      break;
    case TUNER_V3:
      res = ((const tuner_v3_t*)t->table)
                ->get_coll_info(t->ctx, func, nbytes, npipe_ops, cost, TUNER_ALGOS, TUNER_PROTOS,
                                nchannels);
      break;
    default: {
      int algo = -1, proto = -1;
      res = ((const tuner_v2_t*)t->table)
                ->get_coll_info(t->ctx, func, nbytes, 0, 0, npipe_ops, &algo, &proto, nchannels);
      if (res == ncclSuccess && algo >= 0 && algo < TUNER_ALGOS && proto >= 0 &&
          proto < TUNER_PROTOS && table[algo][proto] != TUNER_IGNORE)
        table[algo][proto] = 0.0f;
      break;
    }
  }
  if (res != ncclSuccess) {
    INFO(NCCL_TUNING, "TUNER/Plugin: %s failed for %zu bytes (error %d); using Baton's choice",
         tuner_name(t), nbytes, (int)res);
    *nchannels = 0;
    return ncclInternalError;
  }
  return ncclSuccess;
}

void tuner_close(tuner_t* t) {
  if (t == NULL) return;
  ncclResult_t res = t->version == TUNER_V6 || t->version == TUNER_V5
                         ? ((const tuner_v5_t*)t->table)->finalize(t->ctx)
                         : ((const tuner_v4_t*)t->table)->destroy(t->ctx);
  if (res != ncclSuccess)
    INFO(NCCL_INIT | NCCL_TUNING, "TUNER/Plugin: %s's finalize returned %d", tuner_name(t),
         (int)res);
  free(t);
  plugin_slot_release(&tuner_slot);
}
