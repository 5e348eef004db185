/* Ranks split across 2 and 3 "hosts" (NCCL_HOSTID per process): connections between hosts go
 * through NET (sockets over loopback, driven by the proxy), within a host through SHM. Checks
 * results of every collective and point-to-point over the mix, and which transport each
 * connection used. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "collectives/collectives.h"
#include "itest.h"

/* Every connection this rank made uses NET across hosts and SHM within one; at least one NET
 * connection exists. */
static int check_transports(itest_rank_t* r) {
  ncclComm_t comm = r->comms[0];
  struct coll_comm* cc = comm->coll;
  IT_EXPECT(cc != NULL, "no collective state");
  int nnet = 0, nconn = 0;
  for (int c = 0; c < cc->nchannels; c++) {
    for (int peer = 0; peer < r->nranks; peer++) {
      for (int dir = 0; dir < 2; dir++) {
        const char* name = comm_conn_transport(comm, c, peer, dir);
        if (name == NULL) continue;
        nconn++;
        bool cross = comm->peers[peer].host_hash != comm->peers[r->rank].host_hash;
        IT_EXPECT(strcasecmp(name, cross ? "NET" : "SHM") == 0,
                  "channel %d %s rank %d: transport %s, expected %s", c, dir ? "to" : "from", peer,
                  name, cross ? "NET" : "SHM");
        if (cross) nnet++;
      }
    }
  }
  IT_EXPECT(nconn > 0, "no connections at all");
  IT_EXPECT(nnet > 0, "no NET connection on rank %d", r->rank);
  return 0;
}

typedef struct hosts_cfg {
  size_t counts[2];
} hosts_cfg_t;

static int hosts_body(itest_rank_t* r, void* arg) {
  const hosts_cfg_t* cfg = arg;
  IT_EXPECT(r->comms[0]->nnodes == r->opts->nhosts, "comm sees %d hosts, expected %d",
            r->comms[0]->nnodes, r->opts->nhosts);
  static const ncclDataType_t types[4] = {ncclFloat32, ncclInt8, ncclFloat16, ncclUint64};
  for (int i = 0; i < ITEST_HOSTS_CASES; i++) {
    itest_case_t c = itest_hosts_case(i, cfg->counts, types, r->nranks, 300);
    if (itest_op_run(r->comms[0], &c)) return 1;
  }
  /* A ring exchange by Send/Recv, so that every pair along the ring carried data. */
  int n = r->nranks, me = r->rank;
  size_t bytes = 1 << 20;
  char* s = malloc(bytes);
  char* d = calloc(1, bytes);
  char* want = malloc(bytes);
  IT_EXPECT(s && d && want, "out of memory");
  itest_fill_bytes(s, bytes, me, 17, 0);
  IT_NCCL(ncclGroupStart());
  IT_NCCL(ncclSend(s, bytes, ncclUint8, (me + 1) % n, r->comms[0], NULL));
  IT_NCCL(ncclRecv(d, bytes, ncclUint8, (me + n - 1) % n, r->comms[0], NULL));
  IT_NCCL(ncclGroupEnd());
  itest_fill_bytes(want, bytes, (me + n - 1) % n, 17, 0);
  IT_EXPECT(memcmp(want, d, bytes) == 0, "ring exchange: wrong data from rank %d",
            (me + n - 1) % n);
  free(s);
  free(d);
  free(want);
  return check_transports(r);
}

START_TEST(test_two_hosts) {
  hosts_cfg_t cfg = {.counts = {1, 100003}};
  itest_opts_t o = {.nranks = 4, .nhosts = 2, .timeout_s = 180};
  ck_assert_int_eq(itest_run(&o, hosts_body, &cfg), 0);
}
END_TEST

START_TEST(test_three_hosts) {
  hosts_cfg_t cfg = {.counts = {5, 30001}};
  itest_opts_t o = {.nranks = 6, .nhosts = 3, .timeout_s = 180};
  ck_assert_int_eq(itest_run(&o, hosts_body, &cfg), 0);
}
END_TEST

START_TEST(test_three_hosts_tree_ll) {
  hosts_cfg_t cfg = {.counts = {3, 20001}};
  itest_opts_t o = {.nranks = 3,
                    .nhosts = 3,
                    .timeout_s = 180,
                    .env = {"NCCL_ALGO=allreduce:tree", "NCCL_PROTO=LL"}};
  ck_assert_int_eq(itest_run(&o, hosts_body, &cfg), 0);
}
END_TEST

static Suite* hosts_suite(void) {
  Suite* s = suite_create("coll_hosts");
  TCase* tc = tcase_create("hosts");
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, test_two_hosts);
  tcase_add_test(tc, test_three_hosts);
  tcase_add_test(tc, test_three_hosts_tree_ll);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(hosts_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
