/* A test tuner plugin, built three times: as ncclTunerPlugin_v5 (TUNER_VERSION 5), as
 * ncclTunerPlugin_v6 and _v5 together (TUNER_VERSION 6: the loader must take v6, whose init logs
 * "v6") and as ncclTunerPlugin_v2 (TUNER_VERSION 2). For AllReduce it asks for Tree/LL on one
 * channel; it logs init's arguments and, for every call, the function, size and the cost table it
 * was given. */
#include <string.h>

#include "plugin/plugin_abi.h"
#include "plugin_log.h"

static int ctx_token = 42;

#if TUNER_VERSION >= 5
static ncclResult_t t_init_as(int version, void** ctx, size_t nranks, size_t nnodes,
                              tuner_nvl_domain_v5_t* nvl) {
  plugin_log("tuner init v%d nranks %zu nnodes %zu domains %d min %d max %d", version, nranks,
             nnodes, nvl->domains, nvl->min_ranks_per_domain, nvl->max_ranks_per_domain);
  *ctx = &ctx_token;
  return ncclSuccess;
}

static ncclResult_t t_init(void** ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                           plugin_logger_t log, tuner_nvl_domain_v5_t* nvl,
                           tuner_constants_v5_t* k) {
  return t_init_as(5, ctx, nranks, nnodes, nvl);
}

static ncclResult_t t_get(void* ctx, int func, size_t nbytes, int npipe, float** cost, int nalgo,
                          int nproto, int reg, int* nch) {
  float(*table)[TUNER_PROTOS] = (float(*)[TUNER_PROTOS])cost;
  char line[512];
  int n = snprintf(line, sizeof(line),
                   "tuner call func %d bytes %zu npipe %d algos %d protos %d "
                   "ctx %d table",
                   func, nbytes, npipe, nalgo, nproto, *(int*)ctx);
  for (int a = 0; a < nalgo; a++)
    for (int p = 0; p < nproto; p++)
      n += snprintf(line + n, sizeof(line) - n, " %.3g", table[a][p]);
  plugin_log("%s", line);
  if (func == PLUGIN_FUNC_ALLREDUCE) {
    table[TUNER_ALGO_TREE][TUNER_PROTO_LL] = 0.0f; /* cheapest: chosen when Baton may run it */
    *nch = 1;
  }
  return ncclSuccess;
}

static ncclResult_t t_fini(void* ctx) {
  plugin_log("tuner finalize ctx %d", *(int*)ctx);
  return ncclSuccess;
}

__attribute__((visibility("default"))) const tuner_v5_t ncclTunerPlugin_v5 = {
    .name = "test-tuner-v5", .init = t_init, .get_coll_info = t_get, .finalize = t_fini};
#if TUNER_VERSION == 6
static ncclResult_t t_init6(void** ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                            plugin_logger_t log, tuner_nvl_domain_v5_t* nvl,
                            tuner_constants_v5_t* k) {
  return t_init_as(6, ctx, nranks, nnodes, nvl);
}

static ncclResult_t t_chunk(void* ctx, int func, size_t nbytes, int algo, int proto, int nch,
                            size_t* chunk) {
  plugin_log("tuner chunk func %d", func);
  return ncclSuccess;
}

__attribute__((visibility("default"))) const tuner_v6_t ncclTunerPlugin_v6 = {
    .v5 = {.name = "test-tuner-v6", .init = t_init6, .get_coll_info = t_get, .finalize = t_fini},
    .get_chunk_size = t_chunk};
#endif
#else
static ncclResult_t t_init(size_t nranks, size_t nnodes, plugin_logger_t log, void** ctx) {
  plugin_log("tuner init v2 nranks %zu nnodes %zu", nranks, nnodes);
  *ctx = &ctx_token;
  return ncclSuccess;
}

static ncclResult_t t_get(void* ctx, int func, size_t nbytes, int collnet, int nvls, int npipe,
                          int* algo, int* proto, int* nch) {
  plugin_log("tuner call func %d bytes %zu npipe %d ctx %d", func, nbytes, npipe, *(int*)ctx);
  if (func == PLUGIN_FUNC_ALLREDUCE) {
    *algo = TUNER_ALGO_TREE;
    *proto = TUNER_PROTO_LL;
    *nch = 1;
  }
  return ncclSuccess;
}

static ncclResult_t t_fini(void* ctx) {
  plugin_log("tuner finalize ctx %d", *(int*)ctx);
  return ncclSuccess;
}

__attribute__((visibility("default"))) const tuner_v2_t ncclTunerPlugin_v2 = {
    .name = "test-tuner-v2", .init = t_init, .get_coll_info = t_get, .destroy = t_fini};
#endif
