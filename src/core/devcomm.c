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
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

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
typedef struct ncclMultimemHandle {
  void* mcBasePtr;
} ncclMultimemHandle_t; /* passed by value */

/* Returned for a NULL or dead communicator: a team with no members. */
static const ncclTeam_t devcomm_no_team = {.nRanks = 0, .rank = -1, .stride = 1};

/* Bytes of payload per low-latency line: a 16-byte line carries 8 bytes of data and 8 of flags. */
#define DEVCOMM_LL_BYTES_PER_SLOT 8

static ncclResult_t devcomm_unsupported(const char* name) {
  WARN("%s is not supported by this build: Baton has no device API (nccl_device.h) yet", name);
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

/* ---- Added by 2.29-2.32 (declared by stock's nccl_device/core.h, cft.h and gin headers) ------
 * Layouts from NCCL 2.30.7's nccl_device/core.h (ncclCommProperties) and, for the 2.31/2.32
 * functions, the signatures stock's 2.32 device headers give; the types only passed through by
 * pointer stay incomplete here. */
typedef int ncclCftTeamMode_t;
typedef struct ncclCftLeId ncclCftLeId;
typedef struct ncclGinOutboxHandle ncclGinOutboxHandle;
typedef struct ncclGinInboxA2AHandle ncclGinInboxA2AHandle;

typedef struct ncclCommProperties {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int rank;
  int nRanks;
  int cudaDev;
  int nvmlDev;
  bool deviceApiSupport;
  bool multimemSupport;
  int ginType; /* ncclGinType_t: NCCL_GIN_TYPE_NONE = 0 */
  int nLsaTeams;
  bool hostRmaSupport;
  int railedGinType;
} ncclCommProperties_t;
_Static_assert(offsetof(ncclCommProperties_t, deviceApiSupport) == 32, "2.30 layout");
_Static_assert(sizeof(ncclCommProperties_t) == 56, "2.30 layout");

/* What a program asks before using the device API: this communicator's rank, size and device, and
 * that none of the device API (nor multimem, GIN or host RMA) is available. The caller's struct
 * may be older or newer: fields up to its size are written, nothing beyond. */
NCCL_API(ncclResult_t, ncclCommQueryProperties, ncclComm_t comm, ncclCommProperties_t* props) {
  NVTX_API_RANGE("ncclCommQueryProperties");
  COMM_API_SCOPE();
  CHECK(comm_check(comm, "ncclCommQueryProperties"));
  if (props == NULL) {
    WARN("ncclCommQueryProperties: props is NULL");
    return ncclInvalidArgument;
  }
  if (props->magic != 0xcafebeefu || props->size < offsetof(ncclCommProperties_t, rank)) {
    WARN(
        "ncclCommQueryProperties: props (size %zu, magic 0x%x) was not initialized with "
        "NCCL_COMM_PROPERTIES_INITIALIZER",
        props->size, props->magic);
    return ncclInvalidArgument;
  }
  ncclCommProperties_t p = {.size = props->size,
                            .magic = props->magic,
                            .version = props->version,
                            .rank = comm->rank,
                            .nRanks = comm->nranks,
                            .cudaDev = comm->cuda_dev,
                            .nvmlDev = -1,
                            .nLsaTeams = comm->nranks / devcomm_lsa_size(comm),
                            /* ncclPutSignal and co. work on every communicator; stock fills
                             * the field for callers newer than 2.29.3 */
                            .hostRmaSupport = props->version > NCCL_VERSION(2, 29, 3)};
  memcpy(props, &p, props->size < sizeof(p) ? props->size : sizeof(p));
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclGetLsaMultimemDevicePointer, ncclWindow_t window, size_t offset,
         void** outPtr) {
  NVTX_API_RANGE("ncclGetLsaMultimemDevicePointer");
  return devcomm_unsupported("ncclGetLsaMultimemDevicePointer (multimem)");
}

NCCL_API(ncclResult_t, ncclGetMultimemDevicePointer, ncclWindow_t window, size_t offset,
         ncclMultimemHandle_t multimem, void** outPtr) {
  NVTX_API_RANGE("ncclGetMultimemDevicePointer");
  return devcomm_unsupported("ncclGetMultimemDevicePointer (multimem)");
}

NCCL_API(ncclResult_t, ncclGetLsaDevicePointer, ncclWindow_t window, size_t offset, int lsaRank,
         void** outPtr) {
  NVTX_API_RANGE("ncclGetLsaDevicePointer");
  return devcomm_unsupported("ncclGetLsaDevicePointer");
}

NCCL_API(ncclResult_t, ncclGetPeerDevicePointer, ncclWindow_t window, size_t offset, int peer,
         void** outPtr) {
  NVTX_API_RANGE("ncclGetPeerDevicePointer");
  return devcomm_unsupported("ncclGetPeerDevicePointer");
}

NCCL_API(ncclResult_t, ncclGetMultimemDeviceLeInfo, ncclWindow_t window, size_t offset,
         ncclCftLeId* leId, size_t* leOffset) {
  NVTX_API_RANGE("ncclGetMultimemDeviceLeInfo");
  return devcomm_unsupported("ncclGetMultimemDeviceLeInfo (multimem CFT)");
}

NCCL_API(ncclResult_t, ncclGetCftDeviceLeInfo, ncclWindow_t window, size_t offset, int peerCft,
         ncclTeam_t cftTeam, ncclCftLeId* leId, size_t* leOffset) {
  NVTX_API_RANGE("ncclGetCftDeviceLeInfo");
  return devcomm_unsupported("ncclGetCftDeviceLeInfo (CFT)");
}

NCCL_API(ncclResult_t, ncclGetPeerDeviceLeInfo, ncclWindow_t window, size_t offset, int peerWorld,
         ncclCftLeId* leId, size_t* leOffset) {
  NVTX_API_RANGE("ncclGetPeerDeviceLeInfo");
  return devcomm_unsupported("ncclGetPeerDeviceLeInfo (CFT)");
}

/* Teams of the compute fabric (CFT): Baton has none, so the team is empty, with a WARN. */
NCCL_API(ncclTeam_t, ncclTeamCft, ncclComm_t comm, ncclCftTeamMode_t mode) {
  NVTX_API_RANGE("ncclTeamCft");
  (void)devcomm_unsupported("ncclTeamCft (CFT)");
  return devcomm_no_team;
}

NCCL_API(ncclTeam_t, ncclTeamCftMultimem, ncclComm_t comm) {
  NVTX_API_RANGE("ncclTeamCftMultimem");
  (void)devcomm_unsupported("ncclTeamCftMultimem (multimem CFT)");
  return devcomm_no_team;
}

NCCL_API(ncclResult_t, ncclGinOutboxCreateRequirement, int nBlocks, int size_log2,
         ncclGinOutboxHandle* outHandle, ncclDevResourceRequirements_t* outReq) {
  NVTX_API_RANGE("ncclGinOutboxCreateRequirement");
  return devcomm_unsupported("ncclGinOutboxCreateRequirement (GIN)");
}

NCCL_API(ncclResult_t, ncclGinInboxA2ACreateRequirement, ncclTeam_t peers, int nBlocks,
         int size_log2, ncclGinInboxA2AHandle* outHandle, ncclDevResourceRequirements_t* outReq) {
  NVTX_API_RANGE("ncclGinInboxA2ACreateRequirement");
  return devcomm_unsupported("ncclGinInboxA2ACreateRequirement (GIN)");
}
