/* Every collective and point-to-point over the IB network between 2 and 3 "hosts" (NCCL_HOSTID per
 * process, NCCL_NET=IB, host staging: Soft-RoCE has no GPU memory), results checked against
 * independently computed values; then the same operations over the socket network, whose
 * outputs must be bit for bit the same (a checksum per operation and rank, compared across the
 * two runs). Also what NCCL_DEBUG=INFO says per connection: NIC, GID, QP count and the GPUDirect
 * decision. Without an RDMA device: SKIP. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "collectives/collectives.h"
#include "fork_ranks.h"
#include "itest.h"
#include "rdma_env.h"
#include "unit.h"

#define COLLS_MAX_CASES 128
enum { NET_IB = 0, NET_SOCKET = 1 };

typedef struct colls_shared {
  uint64_t sums[2][ITEST_MAX_RANKS][COLLS_MAX_CASES];
  int ncases[2][ITEST_MAX_RANKS];
} colls_shared_t;

typedef struct colls_cfg {
  int net;
  size_t counts[2];
  colls_shared_t* sh;
} colls_cfg_t;

static uint64_t fnv(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ ((const unsigned char*)p)[i]) * 1099511628211ull;
  return h;
}

/* Cross-host connections use NET over the expected network; the rest SHM. */
static int check_transports(itest_rank_t* r, const char* net) {
  ncclComm_t comm = r->comms[0];
  const comm_res_t* cc = comm->resources;
  char want[32];
  snprintf(want, sizeof(want), "NET/%s/", net);
  int nnet = 0;
  for (int c = 0; c < cc->nchannels; c++) {
    for (int peer = 0; peer < r->nranks; peer++) {
      for (int dir = 0; dir < 2; dir++) {
        const conn_t* conn = transport_conn(&cc->tctx, c, peer, dir);
        if (conn == NULL) continue;
        bool cross = comm->peers[peer].host_hash != comm->peers[r->rank].host_hash;
        IT_EXPECT(cross ? strncmp(conn->desc, want, strlen(want)) == 0
                        : strncmp(conn->desc, "SHM", 3) == 0,
                  "rank %d channel %d %s rank %d: %s", r->rank, c, dir ? "to" : "from", peer,
                  conn->desc);
        nnet += cross;
      }
    }
  }
  IT_EXPECT(nnet > 0, "rank %d: no NET connection", r->rank);
  return 0;
}

static int colls_body(itest_rank_t* r, void* arg) {
  const colls_cfg_t* cfg = arg;
  ncclComm_t comm = r->comms[0];
  IT_EXPECT(comm->nnodes == r->opts->nhosts, "comm sees %d hosts, expected %d", comm->nnodes,
            r->opts->nhosts);
  static const ncclDataType_t types[4] = {ncclFloat32, ncclInt8, ncclBfloat16, ncclUint64};
  int ncase = 0;
  for (int i = 0; i < ITEST_HOSTS_CASES; i++) {
    itest_case_t c = itest_hosts_case(i, cfg->counts, types, r->nranks, 900);
    itest_op_t o;
    IT_EXPECT(itest_op_prepare(&o, comm, &c) == 0, "prepare %s", itest_func_name(c.func));
    IT_NCCL(itest_op_post(&o));
    if (itest_op_check(&o) != 0) {
      fprintf(stderr, "rank %d: %s %s count %zu over %s: wrong result\n", r->rank,
              itest_func_name(c.func), itest_type_name(c.dtype), c.count,
              cfg->net == NET_IB ? "IB" : "Socket");
      return 1;
    }
    IT_EXPECT(ncase < COLLS_MAX_CASES, "too many cases");
    cfg->sh->sums[cfg->net][r->rank][ncase++] =
        fnv(o.recv, itest_output_elems(&c, r->rank, r->nranks) * itest_type_size(c.dtype));
    itest_op_release(&o);
  }
  /* A ring of Send/Recv: every neighbouring pair carried data. */
  int n = r->nranks, me = r->rank;
  size_t bytes = 300000;
  char* s = malloc(bytes);
  char* d = calloc(1, bytes);
  char* want = malloc(bytes);
  IT_EXPECT(s && d && want, "out of memory");
  itest_fill_bytes(s, bytes, me, 41, 0);
  IT_NCCL(ncclGroupStart());
  IT_NCCL(ncclSend(s, bytes, ncclUint8, (me + 1) % n, comm, NULL));
  IT_NCCL(ncclRecv(d, bytes, ncclUint8, (me + n - 1) % n, comm, NULL));
  IT_NCCL(ncclGroupEnd());
  itest_fill_bytes(want, bytes, (me + n - 1) % n, 41, 0);
  IT_EXPECT(memcmp(want, d, bytes) == 0, "ring exchange: wrong data from rank %d",
            (me + n - 1) % n);
  cfg->sh->sums[cfg->net][me][ncase++] = fnv(d, bytes);
  cfg->sh->ncases[cfg->net][me] = ncase;
  free(s);
  free(d);
  free(want);
  return check_transports(r, cfg->net == NET_IB ? "IB" : "Socket");
}

/* Runs the matrix over IB and over sockets with the same settings; both must be right, and equal.
 */
static void colls_both_nets(int nranks, int nhosts, size_t c0, size_t c1, const char* qps,
                            const char* split, const char* proto) {
  colls_shared_t* sh =
      mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  char logdir[] = "/tmp/baton-ibcolls-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(logdir));
  char logfile[128], qp_env[64], split_env[64], proto_env[64];
  snprintf(logfile, sizeof(logfile), "NCCL_DEBUG_FILE=%s/rank.%%p", logdir);
  snprintf(qp_env, sizeof(qp_env), "NCCL_IB_QPS_PER_CONNECTION=%s", qps);
  snprintf(split_env, sizeof(split_env), "NCCL_IB_SPLIT_DATA_ON_QPS=%s", split);
  snprintf(proto_env, sizeof(proto_env), "NCCL_PROTO=%s", proto ? proto : "");
  for (int net = 0; net < 2; net++) {
    colls_cfg_t cfg = {.net = net, .counts = {c0, c1}, .sh = sh};
    itest_opts_t o = {.nranks = nranks,
                      .nhosts = nhosts,
                      .timeout_s = 600,
                      .env = {net == NET_IB ? "NCCL_NET=IB" : "NCCL_NET=Socket", qp_env, split_env,
                              "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET",
                              net == NET_IB ? logfile : "NCCL_DEBUG_FILE=/dev/null", proto_env}};
    double t0 = itest_now();
    ck_assert_int_eq(itest_run(&o, colls_body, &cfg), 0);
    fprintf(stderr, "%d ranks on %d hosts over %s (%s QPs, split %s, proto %s): %.1f s\n", nranks,
            nhosts, net == NET_IB ? "IB" : "Socket", qps, split, proto ? proto : "any",
            itest_now() - t0);
  }
  for (int r = 0; r < nranks; r++) {
    ck_assert_int_gt(sh->ncases[NET_IB][r], 0);
    ck_assert_int_eq(sh->ncases[NET_IB][r], sh->ncases[NET_SOCKET][r]);
    for (int c = 0; c < sh->ncases[NET_IB][r]; c++)
      ck_assert_msg(sh->sums[NET_IB][r][c] == sh->sums[NET_SOCKET][r][c],
                    "rank %d case %d: IB and Socket results differ", r, c);
  }
  /* NCCL_DEBUG=INFO: per connection the NIC, GIDs, QP count, and the GPUDirect decision. */
  char qp_text[32];
  snprintf(qp_text, sizeof(qp_text), "%s QP", qps);
  const char* ib_line[] = {"NET/IB: sending to", "via rxe", "GID ::ffff:127.0.0.1", qp_text, NULL};
  const char* gdr_line[] = {"NET/IB: channel", "on device", "rxe",
                            "GPUDirect RDMA off: host executor", NULL};
  ck_assert_int_gt(rdma_log_count(logdir, ib_line), 0);
  ck_assert_int_gt(rdma_log_count(logdir, gdr_line), 0);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", logdir);
  ck_assert_int_eq(system(cmd), 0);
  munmap(sh, sizeof(*sh));
}

START_TEST(two_hosts_one_qp) {
  colls_both_nets(4, 2, 1, 40001, "1", "0", NULL);
}
END_TEST

START_TEST(three_hosts_four_qps_striped) {
  colls_both_nets(3, 3, 7, 30011, "4", "1", NULL);
}
END_TEST

START_TEST(three_hosts_ll_two_qps) {
  colls_both_nets(3, 3, 5, 20001, "2", "0", "LL");
}
END_TEST

int main(void) {
  rdma_require_device();
  Suite* s = suite_create("ib_colls");
  TCase* tc = tcase_create("ib_colls");
  tcase_set_timeout(tc, 1200);
  tcase_add_test(tc, two_hosts_one_qp);
  tcase_add_test(tc, three_hosts_four_qps_striped);
  tcase_add_test(tc, three_hosts_ll_two_qps);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
