/* Two NICs a host (issue 28): rxe0 (on lo) and a second Soft-RoCE device rxe_nic1 (on a dummy
 * interface with an address of its own), both offered by the IB network to every process. Two and
 * three "hosts" (NCCL_HOSTID per process, NCCL_NET=IB) run every collective and AlltoAll, Gather,
 * Scatter, results checked against independently computed values, and both devices' transmit
 * counters (ports/1/counters/port_xmit_data, or hw_counters/sent_pkts where rxe has no PMA
 * counters; the dummy interface gets lo's 4096-byte RoCE MTU, so packets compare) must grow by a
 * share: the channels' connections spread over the two NICs. The ranks
 * run the host executor (Soft-RoCE has no GPU), so this is the NET transport's per-channel NIC
 * choice and the IB network driving two devices at once; the rings' rail layout
 * (src/topo/rails.c) needs GPU ranks and is checked by test_topo_rails and baton_sim_nics.
 * Without an RDMA device: SKIP. */
#include <check.h>
#include <stdlib.h>

#include "itest.h"
#include "rdma_env.h"
#include "unit.h"

#define NIC1 "rxe_nic1"
#define NIC1_IF "btnnic1"

/* A device's transmit counter: port_xmit_data (4-byte words) or, on rxe, sent_pkts; -1 when
 * neither is readable. */
static long long tx_counter(const char* dev) {
  static const char* const names[] = {"counters/port_xmit_data", "hw_counters/sent_pkts"};
  for (int i = 0; i < 2; i++) {
    char path[256];
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/1/%s", dev, names[i]);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1) v = -1;
    fclose(f);
    if (v >= 0) return v;
  }
  return -1;
}

/* Every collective, and AlltoAll, Gather, Scatter (point-to-point underneath), checked. */
static int nics_body(itest_rank_t* r, void* arg) {
  (void)arg;
  static const ncclDataType_t types[4] = {ncclFloat32, ncclInt8, ncclBfloat16, ncclUint64};
  static const size_t counts[2] = {3, 70001};
  for (int i = 0; i < ITEST_HOSTS_CASES; i++) {
    itest_case_t c = itest_hosts_case(i, counts, types, r->nranks, 900);
    if (itest_op_run(r->comms[0], &c) != 0) return 1;
  }
  return 0;
}

static void two_nics(int nranks, int nhosts) {
  long long before[2] = {tx_counter("rxe0"), tx_counter(NIC1)};
  ck_assert_msg(before[0] >= 0 && before[1] >= 0,
                "no traffic counter under /sys/class/infiniband/{rxe0," NIC1 "}/ports/1");
  char logdir[] = "/tmp/baton-ibnics-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(logdir));
  char logfile[128];
  snprintf(logfile, sizeof(logfile), "NCCL_DEBUG_FILE=%s/rank.%%p", logdir);
  itest_opts_t o = {.nranks = nranks,
                    .nhosts = nhosts,
                    .timeout_s = 600,
                    .env = {"NCCL_NET=IB", "NCCL_IB_HCA=rxe0," NIC1, "NCCL_MIN_NCHANNELS=2",
                            "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET", logfile}};
  double t0 = itest_now();
  ck_assert_int_eq(itest_run(&o, nics_body, NULL), 0);
  long long after[2] = {tx_counter("rxe0"), tx_counter(NIC1)};
  long long d0 = after[0] - before[0], d1 = after[1] - before[1];
  fprintf(stderr, "%d ranks on %d hosts, two NICs: %.1f s; rxe0 +%lld, " NIC1 " +%lld\n", nranks,
          nhosts, itest_now() - t0, d0, d1);
  /* both carried a share: each at least two thirds of the other (6343 and 6119 packets seen) */
  ck_assert_msg(d0 > 0 && d1 > 0 && 3 * d0 >= 2 * d1 && 3 * d1 >= 2 * d0,
                "NIC shares: rxe0 +%lld, " NIC1 " +%lld", d0, d1);
  /* and the connections said so: channels on either device */
  const char* on0[] = {"NET/IB: channel", "on device", "(rxe0,", NULL};
  const char* on1[] = {"NET/IB: channel", "on device", "(" NIC1 ",", NULL};
  ck_assert_int_gt(rdma_log_count(logdir, on0), 0);
  ck_assert_int_gt(rdma_log_count(logdir, on1), 0);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", logdir);
  ck_assert_int_eq(system(cmd), 0);
}

START_TEST(two_hosts_two_nics) {
  two_nics(4, 2);
}
END_TEST

START_TEST(three_hosts_two_nics) {
  two_nics(3, 3);
}
END_TEST

int main(void) {
  rdma_require_device();
  bool second =
      rdma_sh("ip link add " NIC1_IF " type dummy && ip addr add 10.78.0.1/24 dev " NIC1_IF
              " && ip link set " NIC1_IF " mtu 9000 up && rdma link add " NIC1
              " type rxe netdev " NIC1_IF " && sleep 1") == 0;
  if (!second) {
    fprintf(stderr, "could not add a second RDMA device (" NIC1 "): two-NIC cases failed\n");
    return EXIT_FAILURE;
  }
  Suite* s = suite_create("ib_nics");
  TCase* tc = tcase_create("ib_nics");
  tcase_set_timeout(tc, 900);
  tcase_add_test(tc, two_hosts_two_nics);
  tcase_add_test(tc, three_hosts_two_nics);
  suite_add_tcase(s, tc);
  int rc = unit_run_suite(s);
  rdma_sh("rdma link delete " NIC1 "; ip link delete " NIC1_IF);
  return rc;
}
