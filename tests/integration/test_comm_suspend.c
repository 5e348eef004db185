/* ncclCommSuspend / ncclCommResume / ncclCommMemStats (NCCL 2.29) on the host executor, 2 and 3
 * ranks. The memory a suspend releases is measured outside the library: the SHM connections'
 * FIFO segments this process has mapped (/proc/self/maps), the ones this rank created counted as
 * its own (their names end "-<channel>-<peer>-<owner rank>-<nonce>"). The stat must equal that
 * sum before the suspend and again after the resume; while suspended no segment is mapped, the
 * stat keeps the released bytes (stock's meaning) and says suspended, and collectives fail. Every
 * collective's results are checked before, after the resume, and after a second cycle. Over NET
 * (two hosts) the same cycle must give right results. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

/* Bytes of this process's mappings of SHM FIFO segments: all of them, and those rank created. */
static int shm_mapped(int rank, uint64_t* all, uint64_t* own) {
  FILE* f = fopen("/proc/self/maps", "re");
  IT_EXPECT(f != NULL, "cannot open /proc/self/maps");
  char line[1024];
  *all = *own = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    unsigned long lo, hi;
    const char* name = strstr(line, "/baton-shm-");
    if (name == NULL || sscanf(line, "%lx-%lx", &lo, &hi) != 2) continue;
    /* /baton-shm-<hash>-c<channel>-<peer>-<owner>-<nonce>; the hash is hex with no dash, but may
     * itself begin with "c": the channel's field is the first dash after it */
    int channel = -1, peer = -1, owner = -1;
    const char* c = strchr(name + strlen("/baton-shm-"), '-');
    if (c == NULL || sscanf(c, "-c%d-%d-%d-", &channel, &peer, &owner) != 3) continue;
    *all += hi - lo;
    if (owner == rank) *own += hi - lo;
  }
  fclose(f);
  return 0;
}

static int stat_get(ncclComm_t comm, ncclCommMemStat_t s, uint64_t* v) {
  *v = UINT64_MAX;
  IT_NCCL(ncclCommMemStats(comm, s, v));
  return 0;
}

static int all_funcs(ncclComm_t comm, int nranks, uint32_t seed) {
  for (int f = 0; f < IT_FUNC_COUNT; f++) {
    itest_case_t c = {.func = f,
                      .dtype = f % 2 ? ncclFloat32 : ncclInt32,
                      .op = IT_SUM,
                      .count = 3000 + 7 * (size_t)f,
                      .root = f % nranks,
                      .seed = seed + (uint32_t)f};
    if (itest_op_run(comm, &c)) return 1;
  }
  return 0;
}

static int expect_usage(ncclResult_t res, ncclComm_t comm, const char* what, const char* word) {
  IT_EXPECT(res == ncclInvalidUsage, "%s returned %s, expected ncclInvalidUsage", what,
            ncclGetErrorString(res));
  const char* last = ncclGetLastError(comm);
  IT_EXPECT(last != NULL && strstr(last, word) != NULL, "%s: last error \"%s\" lacks \"%s\"", what,
            last ? last : "(null)", word);
  return 0;
}

/* One suspend/resume cycle with every check; *dyn: the stat before, the same every cycle. */
static int cycle(itest_rank_t* r, ncclComm_t comm, bool shm, uint64_t* dyn) {
  uint64_t before, persist, total, flag, all, own;
  if (stat_get(comm, ncclStatGpuMemSuspend, &before) ||
      stat_get(comm, ncclStatGpuMemPersist, &persist) ||
      stat_get(comm, ncclStatGpuMemTotal, &total) || stat_get(comm, ncclStatGpuMemSuspended, &flag))
    return 1;
  IT_EXPECT(before > 0, "no suspendable memory after collectives");
  IT_EXPECT(flag == 0, "suspended flag %" PRIu64 " on an active comm", flag);
  IT_EXPECT(total == before + persist, "total %" PRIu64 " != %" PRIu64 " + %" PRIu64, total, before,
            persist);
  if (*dyn != 0) IT_EXPECT(before == *dyn, "suspendable %" PRIu64 " then %" PRIu64, *dyn, before);
  *dyn = before;
  if (shm) {
    if (shm_mapped(r->rank, &all, &own)) return 1;
    IT_EXPECT(own == before, "stat says %" PRIu64 " bytes, this rank's segments map %" PRIu64,
              before, own);
  }

  IT_NCCL(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  if (stat_get(comm, ncclStatGpuMemSuspended, &flag)) return 1;
  IT_EXPECT(flag == 1, "suspended flag %" PRIu64 " after ncclCommSuspend", flag);
  uint64_t released, persist2;
  if (stat_get(comm, ncclStatGpuMemSuspend, &released) ||
      stat_get(comm, ncclStatGpuMemPersist, &persist2))
    return 1;
  IT_EXPECT(released == before, "released %" PRIu64 ", had %" PRIu64, released, before);
  IT_EXPECT(persist2 == persist, "persistent %" PRIu64 " became %" PRIu64, persist, persist2);
  if (shm) {
    if (shm_mapped(r->rank, &all, &own)) return 1;
    IT_EXPECT(all == 0, "%" PRIu64 " bytes of SHM FIFOs still mapped while suspended", all);
  }
  /* Nothing runs while suspended; a second suspend is refused. */
  int x = 1;
  if (expect_usage(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, comm, NULL), comm,
                   "ncclAllReduce while suspended", "suspended"))
    return 1;
  if (expect_usage(ncclSend(&x, 1, ncclInt32, (r->rank + 1) % r->nranks, comm, NULL), comm,
                   "ncclSend while suspended", "suspended"))
    return 1;
  if (expect_usage(ncclCommSuspend(comm, NCCL_SUSPEND_MEM), comm, "second ncclCommSuspend",
                   "suspended already"))
    return 1;
  /* Inside a group: refused, the group still ends cleanly. */
  IT_NCCL(ncclGroupStart());
  ncclResult_t in_group = ncclCommResume(comm);
  IT_NCCL(ncclGroupEnd());
  if (expect_usage(in_group, comm, "ncclCommResume inside a group", "group")) return 1;

  IT_NCCL(ncclCommResume(comm));
  uint64_t after;
  if (stat_get(comm, ncclStatGpuMemSuspend, &after) ||
      stat_get(comm, ncclStatGpuMemSuspended, &flag))
    return 1;
  IT_EXPECT(flag == 0, "suspended flag %" PRIu64 " after ncclCommResume", flag);
  IT_EXPECT(after == before, "restored %" PRIu64 " bytes of %" PRIu64, after, before);
  if (shm) {
    if (shm_mapped(r->rank, &all, &own)) return 1;
    IT_EXPECT(own == before, "after resume this rank's segments map %" PRIu64 ", expected %" PRIu64,
              own, before);
  }
  if (expect_usage(ncclCommResume(comm), comm, "ncclCommResume when not suspended",
                   "not suspended"))
    return 1;
  return 0;
}

static int body_suspend(itest_rank_t* r, void* arg) {
  bool shm = *(const bool*)arg;
  ncclComm_t comm = r->comms[0];
  uint64_t v = 0, dyn = 0;
  /* Bad arguments first. */
  ncclResult_t res = ncclCommMemStats(comm, ncclStatGpuMemTotal, NULL);
  IT_EXPECT(res == ncclInvalidArgument, "MemStats(NULL value): %s", ncclGetErrorString(res));
  res = ncclCommMemStats(comm, (ncclCommMemStat_t)7, &v);
  IT_EXPECT(res == ncclInvalidArgument, "MemStats(stat 7): %s", ncclGetErrorString(res));
  res = ncclCommSuspend(NULL, NCCL_SUSPEND_MEM);
  IT_EXPECT(res == ncclInvalidArgument, "Suspend(NULL): %s", ncclGetErrorString(res));
  if (expect_usage(ncclCommResume(comm), comm, "ncclCommResume before any suspend",
                   "not suspended"))
    return 1;
  /* flags without NCCL_SUSPEND_MEM: nothing happens (stock). */
  IT_NCCL(ncclCommSuspend(comm, 0));
  if (stat_get(comm, ncclStatGpuMemSuspended, &v)) return 1;
  IT_EXPECT(v == 0, "ncclCommSuspend(0) suspended the communicator");

  if (all_funcs(comm, r->nranks, 100)) return 1;
  if (cycle(r, comm, shm, &dyn)) return 1;
  if (all_funcs(comm, r->nranks, 200)) return 1;
  if (cycle(r, comm, shm, &dyn)) return 1;
  if (all_funcs(comm, r->nranks, 300)) return 1;
  /* Suspended without use since the last resume, then destroyed while suspended. */
  IT_NCCL(ncclCommSuspend(comm, NCCL_SUSPEND_MEM));
  return 0;
}

static void run(int nranks, int nhosts, bool shm) {
  itest_opts_t o = {.nranks = nranks, .nhosts = nhosts, .timeout_s = 240};
  ck_assert_int_eq(itest_run(&o, body_suspend, &shm), 0);
}

START_TEST(test_suspend_shm_2) {
  run(2, 1, true);
}
END_TEST

START_TEST(test_suspend_shm_3) {
  run(3, 1, true);
}
END_TEST

START_TEST(test_suspend_net_3) {
  run(3, 2, false);
}
END_TEST

static Suite* suspend_suite(void) {
  Suite* s = suite_create("comm_suspend");
  TCase* tc = tcase_create("suspend");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_suspend_shm_2);
  tcase_add_test(tc, test_suspend_shm_3);
  tcase_add_test(tc, test_suspend_net_3);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(suspend_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
