/* Baton plugin layer: stock NCCL's tuner and profiler plugins (NCCL_TUNER_PLUGIN,
 * NCCL_PROFILER_PLUGIN), every version stock 2.32 loads, behind one small interface each. It sits
 * just above base (the environment plugin lives in base: every variable is read through it) and
 * knows nothing of communicators: callers pass plain values. The ABIs are in plugin_abi.h.
 *
 * A library is loaded once per process, on the first communicator that asks, and closed when the
 * last one lets go. Nothing here is on the hot path unless a plugin is loaded. */
#ifndef BATON_PLUGIN_H
#define BATON_PLUGIN_H

#include "base/base.h"
#include "plugin/plugin_abi.h"

/* ---- Tuner ------------------------------------------------------------------------------------
 */
typedef struct tuner tuner_t; /* one communicator's tuner context */

typedef struct tuner_comm_info {
  uint64_t comm_hash;
  int nranks, nnodes;
  int min_ranks_per_node, max_ranks_per_node;
} tuner_comm_info_t;

/* Initializes the tuner plugin (loaded on first use) for one communicator. *out is NULL when no
 * plugin is configured or found, or when its init fails (WARNed: the communicator tunes itself). */
ncclResult_t tuner_open(const tuner_comm_info_t* info, tuner_t** out);
/* Lets the tuner edit table (microseconds, TUNER_IGNORE where a pair cannot run) for one
 * collective (func: PLUGIN_FUNC_*) of nbytes, one of npipe_ops in its group; *nchannels gets the
 * tuner's channel count, 0 for none. ncclInternalError when the tuner fails (INFO logged): the
 * caller then keeps its own choice. */
ncclResult_t tuner_choose(tuner_t* t, int func, size_t nbytes, int npipe_ops,
                          float table[TUNER_ALGOS][TUNER_PROTOS], int* nchannels);
const char* tuner_name(const tuner_t* t);
void tuner_close(tuner_t* t); /* NULL is fine */

/* ---- Profiler ---------------------------------------------------------------------------------
 */
typedef struct profiler profiler_t; /* one communicator's profiler context */

typedef struct profiler_comm_info {
  uint64_t comm_hash;
  const char* comm_name; /* may be NULL */
  int nnodes, nranks, rank;
} profiler_comm_info_t;

/* Initializes the profiler plugin (loaded on first use) for one communicator; *out NULL as for
 * the tuner. */
ncclResult_t profiler_open(const profiler_comm_info_t* info, profiler_t** out);
/* The event types the plugin asked for (PROF_* bits); 0 for NULL. */
int profiler_mask(const profiler_t* p);
/* Starts an event of a type the plugin asked for (v7 descriptor, adapted for older plugins; a
 * type the plugin's version lacks is not sent); returns its handle, NULL when none. */
void* profiler_start(profiler_t* p, prof_descr_v7_t* d);
void profiler_record(profiler_t* p, void* handle, int state, prof_state_args_v5_t* args);
void profiler_stop(profiler_t* p, void* handle); /* NULL handle: nothing */
void profiler_close(profiler_t* p);              /* NULL is fine */

#endif /* BATON_PLUGIN_H */
