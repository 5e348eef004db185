/* ncclCommSplit and ncclCommShrink: a child communicator made of some ranks of a parent.
 * The parent's bootstrap carries the (color, key) allgather and the child's root address; the
 * child then bootstraps on its own root, created by its new rank 0. Shrink talks to the surviving
 * ranks only, so excluded ranks may be dead. */
#include <stdlib.h>

#include "core/core.h"

/* Bootstrap tag for the child root broadcast: this base plus the parent's call sequence. */
#define CORE_TAG_CHILD_ROOT 0x43480000

typedef struct split_entry {
  int color;
  int key;
} split_entry_t;

/* Parent ranks of my color, ordered by key then parent rank; NCCL_SPLIT_NOCOLOR still takes part
 * in the allgather but gets no members. */
static ncclResult_t split_members(ncclComm_t parent, int color, int key, int* members, int* n_out,
                                  int* me_out) {
  ncclResult_t res = ncclSuccess;
  split_entry_t* all;
  CHECK(MEM_CALLOC(&all, parent->nranks));
  all[parent->rank].color = color;
  all[parent->rank].key = key;
  CHECK_GOTO(bootstrap_allgather(parent->bootstrap, all, sizeof(split_entry_t)), res, out);
  int n = 0;
  if (color != NCCL_SPLIT_NOCOLOR) {
    for (int r = 0; r < parent->nranks; r++) {
      if (all[r].color != color) continue;
      int pos = n; /* insertion sort: stable, so equal keys keep parent order */
      while (pos > 0 && all[members[pos - 1]].key > all[r].key) {
        members[pos] = members[pos - 1];
        pos--;
      }
      members[pos] = r;
      n++;
    }
  }
  *n_out = n;
  *me_out = -1;
  for (int i = 0; i < n; i++)
    if (members[i] == parent->rank) *me_out = i;
out:
  free(all);
  return res;
}

/* Parent ranks not in exclude (sorted), in parent order. No communication. */
static void shrink_members(ncclComm_t parent, const int* exclude, int nexclude, int* members,
                           int* n_out, int* me_out) {
  int n = 0, j = 0;
  *me_out = -1;
  for (int r = 0; r < parent->nranks; r++) {
    if (j < nexclude && exclude[j] == r) {
      j++;
      continue;
    }
    if (r == parent->rank) *me_out = n;
    members[n++] = r;
  }
  *n_out = n;
}

/* members[0] starts the child's root and sends its address to the other members. If it cannot,
 * it still sends (an empty handle) so that the others fail at once instead of waiting. */
static ncclResult_t child_root_bcast(ncclComm_t parent, const int* members, int n, int me,
                                     uint32_t seq, bootstrap_handle_t* handle, const char* api) {
  ncclResult_t root_res = ncclSuccess;
  memset(handle, 0, sizeof(*handle));
  /* Always a fresh root, even with NCCL_COMM_ID set (that address belongs to the parent); a
   * parent whose ranks all live in this process has a child that does too. */
  if (me == 0)
    root_res = bootstrap_is_inproc(parent->bootstrap) ? bootstrap_inproc_id(handle)
                                                      : bootstrap_root_create(handle);
  if (RESULT_IS_ERROR(root_res)) memset(handle, 0, sizeof(*handle));
  int tag = CORE_TAG_CHILD_ROOT + (int)(seq & 0xffff);
  CHECK(bootstrap_subset_bcast(parent->bootstrap, members, n, me, 0, tag, handle, sizeof(*handle)));
  if (RESULT_IS_ERROR(root_res)) return root_res;
  if (handle->magic == 0) {
    WARN("%s: rank %d (new rank 0) could not create the new communicator's bootstrap root", api,
         members[0]);
    return ncclRemoteError;
  }
  return ncclSuccess;
}

static ncclResult_t child_job_run(comm_job_t* job) {
  ncclComm_t parent = job->owner, child = job->child;
  int n = 0, me = -1;
  int* members = NULL;
  bootstrap_handle_t handle;
  LOG_SINK_SCOPE(parent->last_error, sizeof(parent->last_error));
  ncclResult_t res = mem_calloc((void**)&members, parent->nranks, sizeof(int));
  if (!RESULT_IS_ERROR(res)) {
    if (job->exclude != NULL)
      shrink_members(parent, job->exclude, job->nexclude, members, &n, &me);
    else
      res = split_members(parent, job->color, job->key, members, &n, &me);
  }
  if (!RESULT_IS_ERROR(res) && child != NULL)
    res = child_root_bcast(parent, members, n, me, job->seq, &handle, job->api);
  ncclResult_t parent_res = res;

  if (child != NULL) {
    if (RESULT_IS_ERROR(res)) {
      snprintf(child->last_error, sizeof(child->last_error), "%s", parent->last_error);
    } else {
      ncclUniqueId id;
      memset(&id, 0, sizeof(id));
      memcpy(&id, &handle, sizeof(handle));
      child->rank = me;
      child->nranks = n;
      child->comm_hash = hash_bytes(&id, sizeof(id));
      (void)log_sink_rebind(child->last_error, sizeof(child->last_error));
      res = comm_init_run(child, &handle, 1, job->api);
    }
    atomic_store(&child->state, RESULT_IS_ERROR(res) ? COMM_STATE_ERROR : COMM_STATE_READY);
    atomic_store(&child->async_error, res);
  }
  if (!job->blocking) atomic_store(&parent->async_error, parent_res);
  free(members);
  return res;
}

/* The parent must be settled, and ready or revoked (stock allows split/shrink after a revoke). */
static ncclResult_t child_parent_check(ncclComm_t parent, const char* api) {
  CHECK(comm_check_settled(parent, api));
  int state = atomic_load(&parent->state);
  if (state == COMM_STATE_READY || state == COMM_STATE_REVOKED) return ncclSuccess;
  if (state == COMM_STATE_FINALIZED)
    WARN("%s: comm %p has been finalized; only ncclCommDestroy is allowed now", api, (void*)parent);
  else
    WARN("%s: comm %p is not initialized", api, (void*)parent);
  return ncclInvalidUsage;
}

/* A blocking parent's split or shrink inside a group (ncclGroupStart ... ncclGroupEnd, how one
 * thread splits the communicators of several ranks): run inline, the first rank's call would wait
 * in the parent's allgather for ranks this thread has not called for yet. So the job runs on a
 * thread of its own, and the outermost ncclGroupEnd waits for it, as for a communicator created in
 * the group: the parent and the child are handed to group_add_init (the parent also for
 * NCCL_SPLIT_NOCOLOR, whose part of the allgather the others need; a group that fails aborts it,
 * which stops that allgather). One such call per parent and group: a second would run its
 * allgather on the parent's bootstrap beside the first. Takes job's reference. */
static ncclResult_t child_start_grouped(ncclComm_t parent, comm_job_t* job, ncclComm_t child,
                                        ncclComm_t* newcomm, const char* api) {
  ncclResult_t res = ncclSuccess;
  if (!comm_job_idle(parent, 0)) {
    WARN(
        "%s: comm %p already has a split or shrink pending in this group; call ncclGroupEnd "
        "before the next one",
        api, (void*)parent);
    res = ncclInvalidUsage;
    goto fail;
  }
  comm_job_attach(parent, job);
  if (child != NULL) comm_job_attach(child, job);
  res = comm_job_start(job, false);
  if (RESULT_IS_ERROR(res)) goto fail;
  res = core_upper()->group_add_init(parent);
  if (res == ncclSuccess && child != NULL) res = core_upper()->group_add_init(child);
  if (res != ncclSuccess) { /* the group's end cannot wait for it: stop it now */
    (void)comm_abort_and_wait(parent);
    goto fail;
  }
  comm_job_release(job);
  *newcomm = child;
  return ncclSuccess;
fail:
  core_upper()->group_set_error(res);
  comm_job_release(job);
  if (child != NULL) comm_free(child);
  return res;
}

/* Builds the child (unless NOCOLOR) and runs the job. Takes ownership of exclude. */
static ncclResult_t child_start(ncclComm_t parent, const ncclConfig_t* config, int color, int key,
                                int* exclude, int nexclude, ncclComm_t* newcomm, const char* api) {
  ncclResult_t res;
  ncclConfig_t cfg;
  comm_job_t* job = NULL;
  ncclComm_t child = NULL;
  if (parent->platform != NULL) {
    WARN("%s: rank %d is a virtual cluster's (baton-sim), whose communicators cannot be split", api,
         parent->rank);
    res = ncclInvalidUsage;
    goto fail;
  }
  if (config != NULL) {
    CHECK_GOTO(config_parse(config, api, &cfg), res, fail);
  } else {
    cfg = parent->config; /* inherited; env overrides still apply, as in stock */
    config_env_override(&cfg);
  }
  CHECK_GOTO(comm_job_create(api, child_job_run, &job), res, fail);
  job->owner = parent;
  job->color = color;
  job->key = key;
  job->exclude = exclude;
  job->nexclude = nexclude;
  exclude = NULL;
  job->seq = ++parent->child_seq;
  if (job->exclude != NULL || color != NCCL_SPLIT_NOCOLOR) {
    CHECK_GOTO(comm_alloc(&cfg, &child), res, fail);
    child->cuda_dev = parent->cuda_dev;
    child->bus_id = parent->bus_id;
    job->child = child;
  } else {
    INFO(NCCL_INIT, "Rank %d has color with NCCL_SPLIT_NOCOLOR, not creating a new communicator",
         parent->rank);
  }

  if (parent->config.blocking && core_upper()->group_open())
    return child_start_grouped(parent, job, child, newcomm, api);
  if (parent->config.blocking) {
    res = comm_job_start(job, true);
    comm_job_release(job);
    if (RESULT_IS_ERROR(res)) {
      if (child) comm_free(child);
      return res;
    }
    *newcomm = child;
    return ncclSuccess;
  }
  /* Nonblocking: the parent reports ncclInProgress until the job is done; the child (returned at
   * once) reports ncclInProgress until it is initialized. */
  atomic_store(&parent->async_error, ncclInProgress);
  comm_job_attach(parent, job);
  if (child) comm_job_attach(child, job);
  res = comm_job_start(job, false);
  comm_job_release(job);
  if (RESULT_IS_ERROR(res)) {
    atomic_store(&parent->async_error, ncclSuccess);
    if (child) comm_free(child);
    return res;
  }
  *newcomm = child;
  return ncclInProgress;

fail:
  if (job) comm_job_release(job);
  free(exclude);
  return res;
}

static ncclResult_t split_impl(ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
                               ncclConfig_t* config) {
  const char* api = "ncclCommSplit";
  CHECK(comm_check(comm, api));
  CHECK(arg_check_ptr(newcomm, api, "newcomm"));
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR) {
    WARN("%s: invalid color %d: must be >= 0, or NCCL_SPLIT_NOCOLOR", api, color);
    return ncclInvalidArgument;
  }
  CHECK(child_parent_check(comm, api));
  return child_start(comm, config, color, key, NULL, 0, newcomm, api);
}

NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t* newcomm,
         ncclConfig_t* config) {
  NVTX_API_RANGE("ncclCommSplit");
  COMM_API_SCOPE();
  return split_impl(comm, color, key, newcomm, config);
}

static int int_compare(const void* a, const void* b) {
  int x = *(const int*)a, y = *(const int*)b;
  return (x > y) - (x < y);
}

/* Sorted copy of the user's list (stock sorts it in place; we leave it alone), validated. */
static ncclResult_t shrink_exclude_list(ncclComm_t comm, const int* list, int count,
                                        const char* api, int** out) {
  int* sorted;
  CHECK(mem_calloc((void**)&sorted, count, sizeof(int)));
  memcpy(sorted, list, count * sizeof(int));
  qsort(sorted, count, sizeof(int), int_compare);
  for (int i = 0; i < count; i++) {
    if (sorted[i] < 0 || sorted[i] >= comm->nranks) {
      WARN("%s: excludeRanksList holds rank %d, outside 0..%d", api, sorted[i], comm->nranks - 1);
      free(sorted);
      return ncclInvalidArgument;
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      WARN("%s: excludeRanksList holds rank %d twice", api, sorted[i]);
      free(sorted);
      return ncclInvalidArgument;
    }
  }
  if (bsearch(&comm->rank, sorted, count, sizeof(int), int_compare) != NULL) {
    /* Stock: ncclInvalidArgument too. */
    WARN("%s: rank %d is in excludeRanksList; excluded ranks must not call ncclCommShrink", api,
         comm->rank);
    free(sorted);
    return ncclInvalidArgument;
  }
  *out = sorted;
  return ncclSuccess;
}

/* NCCL_SHRINK_ABORT: stop what the parent is doing (work stuck on a dead peer, a nonblocking
 * split), wait for it to stop, then clear the flag so the survivors can talk again. */
static ncclResult_t shrink_abort_parent(ncclComm_t comm) {
  CHECK(comm_abort_and_wait(comm));
  ncclResult_t res = comm_drain(comm);
  if (RESULT_IS_ERROR(res))
    INFO(NCCL_INIT, "comm %p: collectives comm_finalize after abort -> %d", (void*)comm, (int)res);
  __atomic_store_n(comm->abort_flag, 0, __ATOMIC_RELEASE);
  int state = atomic_load(&comm->state);
  if (state == COMM_STATE_READY || state == COMM_STATE_REVOKED)
    atomic_store(&comm->async_error, ncclSuccess);
  return ncclSuccess;
}

static ncclResult_t shrink_impl(ncclComm_t comm, int* excludeRanksList, int excludeRanksCount,
                                ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  const char* api = "ncclCommShrink";
  CHECK(comm_check(comm, api));
  CHECK(arg_check_ptr(newcomm, api, "newcomm"));
  CHECK(arg_check_ptr(excludeRanksList, api, "excludeRanksList"));
  if (excludeRanksCount <= 0) {
    WARN("%s: invalid excludeRanksCount %d: must be at least 1", api, excludeRanksCount);
    return ncclInvalidArgument;
  }
  if (shrinkFlags & ~NCCL_SHRINK_ABORT) {
    WARN("%s: invalid shrinkFlags 0x%x: only NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT", api,
         (unsigned)shrinkFlags);
    return ncclInvalidArgument;
  }
  int* exclude;
  CHECK(shrink_exclude_list(comm, excludeRanksList, excludeRanksCount, api, &exclude));
  ncclResult_t res = ncclSuccess;
  if (shrinkFlags & NCCL_SHRINK_ABORT) CHECK_GOTO(shrink_abort_parent(comm), res, fail);
  CHECK_GOTO(child_parent_check(comm, api), res, fail);
  return child_start(comm, config, 0, comm->rank, exclude, excludeRanksCount, newcomm, api);
fail:
  free(exclude);
  return res;
}

NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int* excludeRanksList,
         int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config, int shrinkFlags) {
  NVTX_API_RANGE("ncclCommShrink");
  COMM_API_SCOPE();
  return shrink_impl(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags);
}
