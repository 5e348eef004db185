/* Host side of the device API (src/core/devcomm.c): team arithmetic on fake communicators, LL
 * all-to-all slot sizing, and clean failures for what this build does not support. */
#include <check.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "unit.h"

/* As declared by NCCL 2.28's nccl_device/core.h and ll_a2a.h (not part of nccl.h). */
typedef struct ncclTeam {
  int nRanks, rank, stride;
} ncclTeam_t;
ncclTeam_t ncclTeamWorld(ncclComm_t comm);
ncclTeam_t ncclTeamLsa(ncclComm_t comm);
ncclTeam_t ncclTeamRail(ncclComm_t comm);
ncclTeam_t pncclTeamWorld(ncclComm_t comm);
int ncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
int ncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);
int ncclLLA2ACalcSlots(int maxElts, int maxEltSize);
ncclResult_t ncclDevCommCreate(ncclComm_t comm, const void* reqs, void* outDevComm);
ncclResult_t ncclDevCommDestroy(ncclComm_t comm, const void* devComm);
ncclResult_t ncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers, void* outHandle,
                                             void* outReq);
ncclResult_t ncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                             void* outHandle, void* outReq);
ncclResult_t ncclLLA2ACreateRequirement(int nBlocks, int nSlots, void* outHandle, void* outReq);

static struct ncclComm* fake_comm(int rank, int nranks) {
  struct ncclComm* comm = calloc(1, sizeof(*comm));
  ck_assert_ptr_nonnull(comm);
  comm->magic = COMM_MAGIC;
  comm->rank = rank;
  comm->nranks = nranks;
  comm->cuda_dev = -1;
  return comm;
}

START_TEST(test_world_team) {
  struct ncclComm* comm = fake_comm(5, 8);
  ncclTeam_t world = ncclTeamWorld(comm);
  ck_assert_int_eq(world.nRanks, 8);
  ck_assert_int_eq(world.rank, 5);
  ck_assert_int_eq(world.stride, 1);
  for (int r = 0; r < 8; r++) ck_assert_int_eq(ncclTeamRankToWorld(comm, world, r), r);
  /* The profiling name is the same function. */
  ncclTeam_t pworld = pncclTeamWorld(comm);
  ck_assert_int_eq(pworld.nRanks, 8);
  ck_assert_int_eq(pworld.rank, 5);
  free(comm);
}
END_TEST

/* A team given by the caller: every other rank, this rank (world 5) being member 2. */
START_TEST(test_strided_team_to_world) {
  struct ncclComm* comm = fake_comm(5, 8);
  ncclTeam_t odd = {.nRanks = 4, .rank = 2, .stride = 2};
  for (int i = 0; i < 4; i++) ck_assert_int_eq(ncclTeamRankToWorld(comm, odd, i), 1 + 2 * i);
  free(comm);
}
END_TEST

/* Relations that hold whatever the LSA size is, for every rank of several world sizes. */
START_TEST(test_lsa_rail_invariants) {
  for (int nranks = 1; nranks <= 9; nranks++) {
    for (int rank = 0; rank < nranks; rank++) {
      struct ncclComm* comm = fake_comm(rank, nranks);
      ncclTeam_t lsa = ncclTeamLsa(comm);
      ncclTeam_t rail = ncclTeamRail(comm);
      ncclTeam_t world = ncclTeamWorld(comm);
      ck_assert_int_ge(lsa.nRanks, 1);
      ck_assert_int_eq(lsa.stride, 1);
      ck_assert_int_eq(lsa.rank, rank % lsa.nRanks);
      ck_assert_int_eq(lsa.nRanks * rail.nRanks, nranks);
      ck_assert_int_eq(rail.stride, lsa.nRanks);
      ck_assert_int_eq(rail.rank, rank / lsa.nRanks);
      /* Each team maps its own member index back to this rank. */
      ck_assert_int_eq(ncclTeamRankToWorld(comm, lsa, lsa.rank), rank);
      ck_assert_int_eq(ncclTeamRankToWorld(comm, rail, rail.rank), rank);
      ck_assert_int_eq(ncclTeamRankToLsa(comm, lsa, lsa.rank), lsa.rank);
      ck_assert_int_eq(ncclTeamRankToLsa(comm, world, rank), lsa.rank);
      /* The rail team holds the ranks at this rank's position in every LSA block. */
      for (int i = 0; i < rail.nRanks; i++) {
        int w = ncclTeamRankToWorld(comm, rail, i);
        ck_assert_int_ge(w, 0);
        ck_assert_int_lt(w, nranks);
        ck_assert_int_eq(w % lsa.nRanks, lsa.rank);
        ck_assert_int_eq(w / lsa.nRanks, i);
      }
      /* The LSA team is a block of consecutive world ranks containing this rank. */
      for (int i = 0; i < lsa.nRanks; i++)
        ck_assert_int_eq(ncclTeamRankToWorld(comm, lsa, i), rank - lsa.rank + i);
      free(comm);
    }
  }
}
END_TEST

/* What this build chooses (src/core/devcomm.c): no peer memory is mapped, so LSA = this rank. */
START_TEST(test_lsa_is_self_without_executor) {
  struct ncclComm* comm = fake_comm(3, 6);
  ncclTeam_t lsa = ncclTeamLsa(comm);
  ck_assert_int_eq(lsa.nRanks, 1);
  ck_assert_int_eq(lsa.rank, 0);
  ncclTeam_t rail = ncclTeamRail(comm);
  ck_assert_int_eq(rail.nRanks, 6);
  ck_assert_int_eq(rail.rank, 3);
  ck_assert_int_eq(rail.stride, 1);
  free(comm);
}
END_TEST

START_TEST(test_lla2a_slots) {
  ck_assert_int_eq(ncclLLA2ACalcSlots(4, 8), 4);
  ck_assert_int_eq(ncclLLA2ACalcSlots(4, 100), 52); /* 100 bytes: 13 slots of 8 */
  ck_assert_int_eq(ncclLLA2ACalcSlots(3, 16), 6);
  ck_assert_int_eq(ncclLLA2ACalcSlots(5, 1), 5);
  ck_assert_int_eq(ncclLLA2ACalcSlots(7, 9), 14);
  ck_assert_int_eq(ncclLLA2ACalcSlots(0, 8), 0);
  ck_assert_int_eq(ncclLLA2ACalcSlots(-1, 8), -1);
  ck_assert_int_eq(ncclLLA2ACalcSlots(8, -1), -1);
  ck_assert_int_eq(ncclLLA2ACalcSlots(INT_MAX, 16), -1);
}
END_TEST

START_TEST(test_null_and_dead_comm) {
  ncclTeam_t t = ncclTeamWorld(NULL);
  ck_assert_int_eq(t.nRanks, 0);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "ncclTeamWorld"));
  ck_assert_int_eq(ncclTeamLsa(NULL).nRanks, 0);
  ck_assert_int_eq(ncclTeamRail(NULL).nRanks, 0);
  ncclTeam_t world = {.nRanks = 4, .rank = 0, .stride = 1};
  ck_assert_int_eq(ncclTeamRankToWorld(NULL, world, 1), -1);
  ck_assert_int_eq(ncclTeamRankToLsa(NULL, world, 1), -1);

  struct ncclComm* dead = fake_comm(1, 4);
  dead->magic = COMM_MAGIC_DEAD; /* what destroy leaves behind */
  ck_assert_int_eq(ncclTeamWorld(dead).nRanks, 0);
  ck_assert_int_eq(ncclTeamRankToWorld(dead, world, 1), -1);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "ncclTeamRankToWorld"));
  dead->magic = 0; /* never initialized */
  ck_assert_int_eq(ncclTeamRail(dead).nRanks, 0);
  ck_assert_int_eq(ncclTeamRankToLsa(dead, world, 1), -1);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "ncclTeamRankToLsa"));
  free(dead);
}
END_TEST

START_TEST(test_unsupported_fail_cleanly) {
  struct ncclComm* comm = fake_comm(0, 2);
  ncclTeam_t world = ncclTeamWorld(comm);
  char handle[64], req[128], devcomm[512];
  ck_assert_int_eq(ncclDevCommCreate(comm, req, devcomm), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "ncclDevCommCreate is not supported"));
  ck_assert_int_eq(ncclDevCommDestroy(comm, devcomm), ncclInvalidUsage);
  ck_assert_int_eq(ncclDevCommCreate(NULL, NULL, NULL), ncclInvalidUsage);
  ck_assert_int_eq(ncclLsaBarrierCreateRequirement(world, 1, handle, req), ncclInvalidUsage);
  ck_assert_int_eq(ncclGinBarrierCreateRequirement(comm, world, 1, handle, req), ncclInvalidUsage);
  ck_assert_int_eq(ncclLLA2ACreateRequirement(1, 4, handle, req), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "ncclLLA2ACreateRequirement"));
  free(comm);
}
END_TEST

static Suite* devcomm_suite(void) {
  Suite* s = suite_create("devcomm");
  TCase* tc = tcase_create("core");
  tcase_add_test(tc, test_world_team);
  tcase_add_test(tc, test_strided_team_to_world);
  tcase_add_test(tc, test_lsa_rail_invariants);
  tcase_add_test(tc, test_lsa_is_self_without_executor);
  tcase_add_test(tc, test_lla2a_slots);
  tcase_add_test(tc, test_null_and_dead_comm);
  tcase_add_test(tc, test_unsupported_fail_cleanly);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(devcomm_suite());
}
