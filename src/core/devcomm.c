/* Host side of the NCCL 2.28 device API (nccl_device.h): teams, device communicators and the
 * resource requirements of device-side barriers and low-latency all-to-all.
 *
 * The declarations live in stock's nccl_device headers, not in nccl.h; the few types used here
 * are restated privately, with the same layout.
 *
 * Teams. A team is a strided set of world ranks: member i is world rank
 *   base + i*stride, and this rank is member `rank`.
 * The LSA ("load/store accessible") team is the block of consecutive world ranks whose memory this
 * rank can address directly; the rail team is the set of ranks at the same position in every LSA
 * block (stride = LSA size). Until Baton's CUDA executor maps peer memory, no other rank's memory
 * is load/store accessible, so the LSA team is this rank alone (size 1) and the rail team is the
 * world. devcomm_lsa_size() is the one place to change when that arrives.
 *
 * Device communicators and the *CreateRequirement helpers need that executor too: they fail with
 * ncclInvalidUsage. */
#include <limits.h>

#include "core/core.h"

/* ---- Device-API types (layouts from NCCL 2.28's nccl_device/core.h) ------------------------- */
typedef struct ncclTeam {
  int nRanks;
  int rank;
  int stride;
} ncclTeam_t;
_Static_assert(sizeof(ncclTeam_t) == 12, "ncclTeam_t is three ints");

/* Only passed through by pointer here. */
typedef struct ncclDevComm ncclDevComm_t;
typedef struct ncclDevCommRequirements ncclDevCommRequirements_t;
typedef struct ncclDevResourceRequirements ncclDevResourceRequirements_t;
typedef struct ncclLsaBarrierHandle ncclLsaBarrierHandle_t;
typedef struct ncclGinBarrierHandle ncclGinBarrierHandle_t;
typedef struct ncclLLA2AHandle ncclLLA2AHandle_t;

/* Returned for a NULL or dead communicator: a team with no members. */
static const ncclTeam_t devcomm_no_team = {.nRanks = 0, .rank = -1, .stride = 1};

/* Bytes of payload per low-latency line: a 16-byte line carries 8 bytes of data and 8 of flags. */
#define DEVCOMM_LL_BYTES_PER_SLOT 8

static ncclResult_t devcomm_unsupported(const char* name) {
  WARN("%s is not supported by this build", name);
  return ncclInvalidUsage;
}

/* Number of consecutive world ranks in this rank's LSA block (see the top of this file). */
static int devcomm_lsa_size(ncclComm_t comm) {
  (void)comm;
  return 1;
}

/* ---- Teams ----------------------------------------------------------------------------------
 * A NULL or dead comm is reported by comm_check (WARN) and yields devcomm_no_team, or -1 for a
 * rank. */
NCCL_API(ncclTeam_t, ncclTeamWorld, ncclComm_t comm) {
  NVTX_API_RANGE("ncclTeamWorld");
  COMM_API_SCOPE();
  if (comm_check(comm, "ncclTeamWorld") != ncclSuccess) return devcomm_no_team;
  ncclTeam_t team = {.nRanks = comm->nranks, .rank = comm->rank, .stride = 1};
  return team;
}

NCCL_API(ncclTeam_t, ncclTeamLsa, ncclComm_t comm) {
  NVTX_API_RANGE("ncclTeamLsa");
  COMM_API_SCOPE();
  if (comm_check(comm, "ncclTeamLsa") != ncclSuccess) return devcomm_no_team;
  int lsa = devcomm_lsa_size(comm);
  ncclTeam_t team = {.nRanks = lsa, .rank = comm->rank % lsa, .stride = 1};
  return team;
}

/* The outer factor of the world by the LSA size: one member per LSA block. */
NCCL_API(ncclTeam_t, ncclTeamRail, ncclComm_t comm) {
  NVTX_API_RANGE("ncclTeamRail");
  COMM_API_SCOPE();
  if (comm_check(comm, "ncclTeamRail") != ncclSuccess) return devcomm_no_team;
  int lsa = devcomm_lsa_size(comm);
  ncclTeam_t team = {.nRanks = comm->nranks / lsa, .rank = comm->rank / lsa, .stride = lsa};
  return team;
}

/* Member `rank` of team lies (rank - team.rank) members away from this rank, each member
 * team.stride world ranks apart. */
NCCL_API(int, ncclTeamRankToWorld, ncclComm_t comm, ncclTeam_t team, int rank) {
  NVTX_API_RANGE("ncclTeamRankToWorld");
  COMM_API_SCOPE();
  if (comm_check(comm, "ncclTeamRankToWorld") != ncclSuccess) return -1;
  int world_rank = comm->rank + (rank - team.rank) * team.stride;
  return world_rank;
}

NCCL_API(int, ncclTeamRankToLsa, ncclComm_t comm, ncclTeam_t team, int rank) {
  NVTX_API_RANGE("ncclTeamRankToLsa");
  COMM_API_SCOPE();
  if (comm_check(comm, "ncclTeamRankToLsa") != ncclSuccess) return -1;
  int lsa_rank = comm->rank % devcomm_lsa_size(comm) + (rank - team.rank) * team.stride;
  return lsa_rank;
}

/* ---- Low-latency all-to-all sizing ------------------------------------------------------------
 * An element of maxEltSize bytes occupies ceil(maxEltSize / 8) slots, so a buffer for maxElts such
 * elements needs maxElts * ceil(maxEltSize / 8) slots. -1 (with a WARN) for negative sizes or a
 * result that does not fit in an int. */
NCCL_API(int, ncclLLA2ACalcSlots, int maxElts, int maxEltSize) {
  NVTX_API_RANGE("ncclLLA2ACalcSlots");
  if (maxElts < 0 || maxEltSize < 0) {
    WARN("ncclLLA2ACalcSlots: maxElts (%d) and maxEltSize (%d) must not be negative", maxElts,
         maxEltSize);
    return -1;
  }
  int64_t per_elt =
      ((int64_t)maxEltSize + DEVCOMM_LL_BYTES_PER_SLOT - 1) / DEVCOMM_LL_BYTES_PER_SLOT;
  int64_t slots = (int64_t)maxElts * per_elt;
  if (slots > INT_MAX) {
    WARN("ncclLLA2ACalcSlots: %d elements of %d bytes need %lld slots, more than an int holds",
         maxElts, maxEltSize, (long long)slots);
    return -1;
  }
  return (int)slots;
}

/* ---- Device communicators and resource requirements (need the CUDA executor) ---------------- */
NCCL_API(ncclResult_t, ncclDevCommCreate, ncclComm_t comm, ncclDevCommRequirements_t const* reqs,
         ncclDevComm_t* outDevComm) {
  NVTX_API_RANGE("ncclDevCommCreate");
  return devcomm_unsupported("ncclDevCommCreate");
}

NCCL_API(ncclResult_t, ncclDevCommDestroy, ncclComm_t comm, ncclDevComm_t const* devComm) {
  NVTX_API_RANGE("ncclDevCommDestroy");
  return devcomm_unsupported("ncclDevCommDestroy");
}

NCCL_API(ncclResult_t, ncclLsaBarrierCreateRequirement, ncclTeam_t team, int nBarriers,
         ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  NVTX_API_RANGE("ncclLsaBarrierCreateRequirement");
  return devcomm_unsupported("ncclLsaBarrierCreateRequirement");
}

NCCL_API(ncclResult_t, ncclGinBarrierCreateRequirement, ncclComm_t comm, ncclTeam_t team,
         int nBarriers, ncclGinBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  NVTX_API_RANGE("ncclGinBarrierCreateRequirement");
  return devcomm_unsupported("ncclGinBarrierCreateRequirement");
}

NCCL_API(ncclResult_t, ncclLLA2ACreateRequirement, int nBlocks, int nSlots,
         ncclLLA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq) {
  NVTX_API_RANGE("ncclLLA2ACreateRequirement");
  return devcomm_unsupported("ncclLLA2ACreateRequirement");
}
