/* Faults over the IB network (Soft-RoCE): a killed peer is reported on every survivor within
 * seconds, naming it; a link lost in the middle of operations (packets dropped: the QPs fail; the
 * link down: the ports go down) is reported with the peer's rank, host and address, the device
 * and port and the status, and the port's async event is logged. Without an RDMA device: SKIP. */
#include <check.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/base.h"
#include "itest.h"
#include "itest_fault.h"
#include "rdma_env.h"
#include "unit.h"

static const char* const ib_env[] = {"NCCL_NET=IB", "NCCL_IB_QPS_PER_CONNECTION=2",
                                     "NCCL_IB_HCA==rxe0", NULL};

/* Every survivor reaches the victim over IB only and must name it. */
START_TEST(killed_peer_three_hosts) {
  itest_fault_run(3, 3, false, 2, false, true, 2, ib_env);
}
END_TEST

START_TEST(killed_peer_nonblocking) {
  itest_fault_run(3, 3, true, 0, false, true, 2, ib_env);
}
END_TEST

/* Rank 3 may only wait on survivors; at least one names the victim. */
START_TEST(killed_peer_two_hosts) {
  itest_fault_run(4, 2, false, 1, false, false, 1, ib_env);
}
END_TEST

/* ---- A link lost in the middle of operations ----------------------------------------------------
 */
/* Two "hosts" with RDMA devices of their own: rxe_a and rxe_b on the two ends of a veth pair,
 * reached only through IPv6 link-local addresses (so the traffic really crosses the veth; the
 * bootstrap and the IB setup channel stay on lo). main() makes them; rank 0 uses rxe_a, rank 1
 * rxe_b (NCCL_IB_HCA per rank, set before its communicator exists). After a few good operations
 * rank 1 breaks the link, with operations under way:
 *   "loss": every packet on the veth is dropped (netem): the QPs retry, give up and complete with
 *            an error status: the QP error a switch or cable failure gives on real hardware;
 *   "down": the veth goes down: both ports go down (async event). Soft-RoCE stops retrying when it
 *            cannot send at all, so this is reported once the port has stayed down longer than
 *            the QPs would retry. */
#define LINK_A "btnva"
#define LINK_B "btnvb"

typedef struct link_shared {
  atomic_int failed;
  atomic_int good_ops;
  const char* breaker; /* the command rank 1 runs */
  char err[2][1024];
} link_shared_t;

static int link_body(itest_rank_t* r, void* arg) {
  link_shared_t* sh = arg;
  setenv("NCCL_IB_HCA", r->rank == 0 ? "=rxe_a" : "=rxe_b", 1);
  param_reload();
  IT_NCCL(ncclCommInitRank(&r->comms[0], r->nranks, r->ids[0], r->rank));
  ncclComm_t comm = r->comms[0];
  size_t count = 256 * 1024; /* 1 MiB of float: several steps in flight */
  float* buf = malloc(count * sizeof(float));
  IT_EXPECT(buf != NULL, "out of memory");
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < 400 && res == ncclSuccess; i++) {
    for (size_t k = 0; k < count; k++) buf[k] = 1.0f;
    if (i == 3 && r->rank == 1) {
      /* both ranks' first three operations have completed: the link worked before */
      for (int w = 0; w < 3000 && atomic_load(&sh->good_ops) < 2 * 3; w++) usleep(10 * 1000);
      IT_EXPECT(rdma_sh("%s", sh->breaker) == 0, "could not run: %s", sh->breaker);
    }
    res = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL);
    if (res == ncclSuccess) {
      IT_EXPECT(buf[0] == 2.0f && buf[count - 1] == 2.0f, "AllReduce result %g", buf[0]);
      atomic_fetch_add(&sh->good_ops, 1);
    }
  }
  IT_EXPECT(res != ncclSuccess, "rank %d: operations kept succeeding over a broken link", r->rank);
  const char* msg = ncclGetLastError(comm);
  snprintf(sh->err[r->rank], sizeof(sh->err[r->rank]), "%s", msg ? msg : "");
  fprintf(stderr, "rank %d failed with %d: %s\n", r->rank, (int)res, sh->err[r->rank]);
  atomic_fetch_add(&sh->failed, 1);
  IT_NCCL(ncclCommAbort(comm));
  r->comms[0] = NULL;
  free(buf);
  return 0;
}

/* Runs the two ranks until both fail; returns whether one rank's error has every needle (beside
 * the peer's rank, host and address, which every such error must name) and the log has log_line
 * (NULL: not checked). */
static void link_case(const char* breaker, const char* const* needles,
                      const char* const* log_line) {
  link_shared_t* sh =
      mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  sh->breaker = breaker;
  char logdir[] = "/tmp/baton-iblink-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(logdir));
  char logfile[128];
  snprintf(logfile, sizeof(logfile), "NCCL_DEBUG_FILE=%s/rank.%%p", logdir);
  /* Short retries, but not so short that a busy emulated guest trips them before the link breaks
   * (it did with 17 ms x 3: a failure after 2 good operations): 4.096 us x 2^14 = 67 ms a try,
   * 6 retries, about half a second (7 hangs: Soft-RoCE seems to take it as "retry forever"). */
  itest_opts_t o = {.nranks = 2,
                    .nhosts = 2,
                    .no_init = true,
                    .timeout_s = 180,
                    .env = {"NCCL_NET=IB", "NCCL_IB_TIMEOUT=14", "NCCL_IB_RETRY_CNT=6",
                            "NCCL_DEBUG=WARN", logfile}};
  double t0 = itest_now();
  ck_assert_int_eq(itest_run(&o, link_body, sh), 0);
  fprintf(stderr, "%s: %d good operations, both ranks failed after %.1f s\n", breaker,
          atomic_load(&sh->good_ops), itest_now() - t0);
  ck_assert_int_eq(atomic_load(&sh->failed), 2);
  ck_assert_int_ge(atomic_load(&sh->good_ops), 2 * 3); /* the link worked before */
  bool reported = false;
  for (int r = 0; r < 2 && !reported; r++) {
    char peer[16];
    snprintf(peer, sizeof(peer), "rank %d", 1 - r);
    const char* e = sh->err[r];
    bool all = strstr(e, peer) && strstr(e, "127.0.0.1") && strstr(e, "baton-guest");
    for (int i = 0; needles[i] != NULL && all; i++) all = strstr(e, needles[i]) != NULL;
    reported = all;
  }
  ck_assert_msg(reported, "no rank reported the failure in full: rank 0: '%s' rank 1: '%s'",
                sh->err[0], sh->err[1]);
  if (log_line != NULL)
    ck_assert_msg(rdma_log_count(logdir, log_line) > 0, "%s not logged (%s)", log_line[0], logdir);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", logdir);
  ck_assert_int_eq(system(cmd), 0);
  munmap(sh, sizeof(*sh));
}

/* Leftovers of a failed case must not break the next one. */
static void link_restore(void) {
  rdma_sh("tc qdisc del dev " LINK_A " root 2>/dev/null; tc qdisc del dev " LINK_B
          " root 2>/dev/null; ip link set " LINK_A " up; ip link set " LINK_B " up; sleep 1");
}

START_TEST(packets_lost_mid_operation) {
  link_restore();
  const char* needles[] = {
      "completion status", "transport retry counter exceeded", "port 1", "rxe_", "QP", NULL};
  link_case("tc qdisc add dev " LINK_A
            " root netem loss 100% && "
            "tc qdisc add dev " LINK_B " root netem loss 100%",
            needles, NULL);
  ck_assert_int_eq(rdma_sh("tc qdisc del dev " LINK_A " root; tc qdisc del dev " LINK_B " root"),
                   0);
}
END_TEST

START_TEST(link_down_mid_operation) {
  /* Soft-RoCE fails the QP at once (no route); hardware would after its retries */
  const char* needles[] = {"port 1", "rxe_", "completion status", NULL};
  const char* port_down[] = {"NET/IB: rxe_", "went down", NULL};
  link_restore();
  link_case("ip link set " LINK_B " down", needles, port_down);
  ck_assert_int_eq(rdma_sh("ip link set " LINK_B " up"), 0);
}
END_TEST

int main(void) {
  rdma_require_device();
  Suite* s = suite_create("ib_faults");
  TCase* tc = tcase_create("ib_faults");
  tcase_set_timeout(tc, 600);
  tcase_add_test(tc, killed_peer_three_hosts);
  tcase_add_test(tc, killed_peer_nonblocking);
  tcase_add_test(tc, killed_peer_two_hosts);
  bool link = rdma_sh(
                  "sysctl -qw net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 && "
                  "ip link add " LINK_A " type veth peer name " LINK_B " && ip link set " LINK_A
                  " up && ip link set " LINK_B " up && rdma link add rxe_a type rxe netdev " LINK_A
                  " && rdma link add rxe_b type rxe netdev " LINK_B " && sleep 2") == 0;
  if (link) {
    tcase_add_test(tc, packets_lost_mid_operation);
    tcase_add_test(tc, link_down_mid_operation);
  }
  suite_add_tcase(s, tc);
  int rc = unit_run_suite(s);
  if (link) {
    rdma_sh("rdma link delete rxe_a; rdma link delete rxe_b; ip link delete " LINK_A);
  } else {
    fprintf(stderr, "could not make the veth pair with rxe_a and rxe_b: the link case failed\n");
    rc = EXIT_FAILURE;
  }
  return rc;
}
