/* The elastic-communicator entry points of NCCL 2.29 that grow a communicator
 * (ncclCommGetUniqueId and ncclCommGrow; suspend.c has ncclCommSuspend, ncclCommResume and
 * ncclCommMemStats) and 2.32's ncclSetEncryption. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* ---- Growing -----------------------------------------------------------------------------------
 * One existing rank asks for an id (a new bootstrap root, as a split's child gets); it goes to the
 * new ranks by the user's means. ncclCommGrow on the existing ranks allgathers over the parent's
 * bootstrap who holds the id (exactly one must), so every existing rank learns it; then existing
 * ranks (keeping their ranks) and new ranks (the ranks from the old size up) initialize the grown
 * communicator from that id, as ncclCommInitRankConfig does: blocking or not as its config says
 * (existing ranks inherit the parent's config when they pass none). The parent stays as it was. */
NCCL_API(ncclResult_t, ncclCommGetUniqueId, ncclComm_t comm, ncclUniqueId* uniqueId) {
  NVTX_API_RANGE("ncclCommGetUniqueId");
  const char* api = "ncclCommGetUniqueId";
  COMM_API_SCOPE();
  CHECK(comm_check_ready(comm, api));
  CHECK(arg_check_ptr(uniqueId, api, "uniqueId"));
  if (comm->grow_id_out) {
    WARN("%s: comm %p already gave an id that ncclCommGrow has not used yet (one at a time)", api,
         (void*)comm);
    return ncclInvalidUsage;
  }
  bootstrap_handle_t handle;
  memset(&handle, 0, sizeof(handle));
  if (bootstrap_is_inproc(comm->bootstrap))
    CHECK(bootstrap_inproc_id(&handle));
  else
    CHECK(bootstrap_root_create(&handle));
  memset(uniqueId, 0, sizeof(*uniqueId));
  memcpy(uniqueId, &handle, sizeof(handle));
  comm->grow_id_out = true;
  return ncclSuccess;
}

typedef struct grow_offer {
  int has_id;
  ncclUniqueId id;
} grow_offer_t;

/* The existing ranks' side: the id every one of them learns from the one that holds it. */
static ncclResult_t grow_agree_id(ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId,
                                  int rank, ncclUniqueId* out) {
  const char* api = "ncclCommGrow";
  CHECK(comm_check_ready(comm, api));
  if (rank != -1) {
    WARN("%s: rank %d: a rank of the communicator being grown passes rank -1 (it keeps rank %d)",
         api, rank, comm->rank);
    return ncclInvalidArgument;
  }
  if (nRanks <= comm->nranks) {
    WARN("%s: nRanks %d must be larger than the communicator's %d ranks", api, nRanks,
         comm->nranks);
    return ncclInvalidArgument;
  }
  ncclResult_t res = ncclSuccess;
  grow_offer_t* all;
  CHECK(MEM_CALLOC(&all, comm->nranks));
  all[comm->rank].has_id = uniqueId != NULL;
  if (uniqueId != NULL) all[comm->rank].id = *uniqueId;
  CHECK_GOTO(bootstrap_allgather(comm->bootstrap, all, sizeof(grow_offer_t)), res, out);
  int holders = 0, holder = -1;
  for (int r = 0; r < comm->nranks; r++)
    if (all[r].has_id) holders++, holder = r;
  if (holders != 1) {
    WARN(
        "%s: exactly one rank of the communicator must pass the id from ncclCommGetUniqueId; "
        "%d did",
        api, holders);
    res = ncclInvalidUsage;
    goto out;
  }
  *out = all[holder].id;
  if (uniqueId != NULL) comm->grow_id_out = false; /* consumed */
out:
  free(all);
  return res;
}

NCCL_API(ncclResult_t, ncclCommGrow, ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId,
         int rank, ncclComm_t* newcomm, ncclConfig_t* config) {
  NVTX_API_RANGE("ncclCommGrow");
  const char* api = "ncclCommGrow";
  COMM_API_SCOPE();
  CHECK(arg_check_ptr(newcomm, api, "newcomm"));
  if (comm == NULL) { /* a new rank */
    CHECK(arg_check_ptr(uniqueId, api, "uniqueId"));
    return pncclCommInitRankConfig(newcomm, nRanks, *uniqueId, rank, config);
  }
  ncclUniqueId id;
  CHECK(grow_agree_id(comm, nRanks, uniqueId, rank, &id));
  ncclConfig_t inherited = comm->config;
  return pncclCommInitRankConfig(newcomm, nRanks, id, comm->rank,
                                 config != NULL ? config : &inherited);
}

/* Baton has no TLS: a configuration carrying a pre-shared key is refused, so a job that asked for
 * encryption never runs in the clear. One that carries none asks for nothing and succeeds. */
NCCL_API(ncclResult_t, ncclSetEncryption, const ncclEncryptionConfig_t* config) {
  NVTX_API_RANGE("ncclSetEncryption");
  if (config == NULL) return ncclSuccess;
  if (config->magic != 0xcafebeefu) {
    WARN(
        "ncclSetEncryption: config (magic 0x%x) was not initialized with "
        "NCCL_ENCRYPTION_CONFIG_INITIALIZER",
        config->magic);
    return ncclInvalidArgument;
  }
  if (config->size >= offsetof(ncclEncryptionConfig_t, psk) + sizeof(config->psk) &&
      config->psk == NULL)
    return ncclSuccess;
  WARN(
      "ncclSetEncryption: Baton was built without TLS and cannot encrypt its TCP traffic "
      "(bootstrap, socket network); refusing rather than running unencrypted");
  return ncclInvalidUsage;
}
