/* Every algorithm x protocol forced through NCCL_ALGO / NCCL_PROTO (and the per-collective form),
 * channel counts from NCCL_MIN/MAX_NCHANNELS and NCCL_MIN/MAX_CTAS, connecting everything at init
 * (NCCL_RUNTIME_CONNECT=0: every connection exists before the first operation), and one 64 MB
 * AllReduce. Each run checks results and that the planner used what was forced. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/collectives.h"
#include "itest.h"

typedef struct forced {
  int algo;            /* expected ALGO_* for AllReduce, -1: not checked */
  int proto;           /* expected PROTO_* for every collective, -1: not checked */
  int other_algo;      /* expected for the other collectives (ring), -1: not checked */
  int other_proto;     /* expected for the other collectives, -1: not checked */
  int nchannels;       /* expected channels of a 1 MB AllReduce, 0: not checked */
  int min_nchannels;   /* expected channels of a one-element AllReduce, 0: not checked */
  bool connected_init; /* every ring and tree connection exists before the first operation */
  size_t counts[3];
} forced_t;

static int check_choice(itest_rank_t* r, int func, int algo, int proto, const char* what) {
  coll_choice_t ch;
  IT_NCCL(coll_last_choice(r->comms[0], &ch));
  IT_EXPECT(ch.func == func, "%s: last operation was func %d, expected %d", what, ch.func, func);
  IT_EXPECT(ch.proto != PROTO_LL128, "%s: LL128 chosen on the host executor", what);
  if (algo >= 0)
    IT_EXPECT(ch.algo == algo, "%s: algo %s, expected %s", what, coll_algo_name(ch.algo),
              coll_algo_name(algo));
  if (proto >= 0)
    IT_EXPECT(ch.proto == proto, "%s: proto %s, expected %s", what, coll_proto_name(ch.proto),
              coll_proto_name(proto));
  return 0;
}

/* Every connection of every channel's ring and trees, as NCCL_RUNTIME_CONNECT=0 promises. */
static int check_all_connected(ncclComm_t comm) {
  const struct coll_comm* cc = comm->coll;
  prog_state_t st;
  progress_state(comm, -1, &st);
  IT_EXPECT(st.seq == 0, "an operation ran before the check");
  for (int c = 0; c < cc->nchannels; c++) {
    const dev_channel_t* ch = &cc->channels[c];
    IT_EXPECT(comm_conn_transport(comm, c, ch->ring_next, 1) != NULL,
              "channel %d: no send connection to ring next %d at init", c, ch->ring_next);
    IT_EXPECT(comm_conn_transport(comm, c, ch->ring_prev, 0) != NULL,
              "channel %d: no receive connection from ring prev %d at init", c, ch->ring_prev);
    int tree[1 + TREE_MAX_CHILDREN] = {ch->tree_up};
    for (int k = 0; k < TREE_MAX_CHILDREN; k++) tree[1 + k] = ch->tree_down[k];
    for (int k = 0; k < 1 + TREE_MAX_CHILDREN; k++) {
      if (tree[k] < 0) continue;
      IT_EXPECT(comm_conn_transport(comm, c, tree[k], 1) != NULL &&
                    comm_conn_transport(comm, c, tree[k], 0) != NULL,
                "channel %d: tree peer %d not connected at init", c, tree[k]);
    }
  }
  return 0;
}

static int forced_body(itest_rank_t* r, void* arg) {
  const forced_t* f = arg;
  ncclComm_t comm = r->comms[0];
  uint32_t seed = 100;
  if (f->connected_init && check_all_connected(comm)) return 1;
  static const ncclDataType_t types[3] = {ncclFloat32, ncclInt64, ncclBfloat16};
  static const int ops[3] = {IT_SUM, IT_AVG, IT_PREMUL_DEVICE};
  for (int k = 0; k < 3; k++) {
    size_t count = f->counts[k];
    for (int place = 0; place < 2; place++) {
      itest_case_t c = {.func = IT_ALLREDUCE,
                        .dtype = types[k],
                        .op = ops[k],
                        .count = count,
                        .inplace = place,
                        .seed = seed++};
      if (itest_op_run(comm, &c)) return 1;
      if (check_choice(r, FUNC_ALLREDUCE, f->algo, f->proto, "AllReduce")) return 1;
      static const int others[4] = {IT_REDUCE, IT_REDUCESCATTER, IT_BROADCAST, IT_ALLGATHER};
      static const int other_funcs[4] = {FUNC_REDUCE, FUNC_REDUCESCATTER, FUNC_BROADCAST,
                                         FUNC_ALLGATHER};
      for (int j = 0; j < 4; j++) {
        itest_case_t o = {
            .func = others[j],
            .dtype = types[k],
            .op = ops[(k + j) % 3],
            .count = count / (others[j] == IT_REDUCESCATTER || others[j] == IT_ALLGATHER
                                  ? (size_t)r->nranks
                                  : 1) +
                     1,
            .root = (j + 1) % r->nranks,
            .inplace = place,
            .seed = seed++};
        if (itest_op_run(comm, &o)) return 1;
        if (check_choice(r, other_funcs[j], f->other_algo, f->other_proto,
                         itest_func_name(others[j])))
          return 1;
      }
    }
  }
  if (f->nchannels > 0) {
    itest_case_t c = {
        .func = IT_ALLREDUCE, .dtype = ncclFloat32, .op = IT_SUM, .count = 1 << 18, .seed = seed++};
    if (itest_op_run(comm, &c)) return 1;
    coll_choice_t ch;
    IT_NCCL(coll_last_choice(comm, &ch));
    IT_EXPECT(ch.nchannels == f->nchannels, "1 MB AllReduce used %d channels, expected %d",
              ch.nchannels, f->nchannels);
  }
  if (f->min_nchannels > 0) { /* the smallest operation, when a minimum forces its channels */
    itest_case_t c = {
        .func = IT_ALLREDUCE, .dtype = ncclFloat32, .op = IT_SUM, .count = 1, .seed = seed++};
    if (itest_op_run(comm, &c)) return 1;
    coll_choice_t ch;
    IT_NCCL(coll_last_choice(comm, &ch));
    IT_EXPECT(ch.nchannels == f->min_nchannels, "1-element AllReduce used %d channels, expected %d",
              ch.nchannels, f->min_nchannels);
  }
  return 0;
}

static void forced_run(int nranks, const char* algo_env, const char* proto_env, const forced_t* f,
                       const char* extra_env) {
  itest_opts_t o = {.nranks = nranks, .timeout_s = 240};
  int e = 0;
  if (algo_env) o.env[e++] = algo_env;
  if (proto_env) o.env[e++] = proto_env;
  if (extra_env) o.env[e++] = extra_env;
  ck_assert_msg(itest_run(&o, forced_body, (void*)f) == 0, "%s %s %s failed",
                algo_env ? algo_env : "", proto_env ? proto_env : "", extra_env ? extra_env : "");
}

START_TEST(test_ring_simple) {
  forced_t f = {.algo = ALGO_RING,
                .proto = PROTO_SIMPLE,
                .other_algo = ALGO_RING,
                .other_proto = PROTO_SIMPLE,
                .counts = {1, 4097, 300007}};
  forced_run(4, "NCCL_ALGO=Ring", "NCCL_PROTO=Simple", &f, NULL);
}
END_TEST

START_TEST(test_ring_ll) {
  forced_t f = {.algo = ALGO_RING,
                .proto = PROTO_LL,
                .other_algo = ALGO_RING,
                .other_proto = PROTO_LL,
                .counts = {1, 4097, 300007}};
  forced_run(3, "NCCL_ALGO=ring", "NCCL_PROTO=LL", &f, NULL);
}
END_TEST

START_TEST(test_tree_simple) {
  /* Tree exists for AllReduce only: the others fall back to the ring (and say so). */
  forced_t f = {.algo = ALGO_TREE,
                .proto = PROTO_SIMPLE,
                .other_algo = ALGO_RING,
                .other_proto = PROTO_SIMPLE,
                .counts = {1, 4097, 300007}};
  forced_run(5, "NCCL_ALGO=Tree", "NCCL_PROTO=Simple", &f, NULL);
}
END_TEST

START_TEST(test_tree_ll) {
  forced_t f = {.algo = ALGO_TREE,
                .proto = PROTO_LL,
                .other_algo = ALGO_RING,
                .other_proto = PROTO_LL,
                .counts = {1, 4097, 300007}};
  forced_run(4, "NCCL_ALGO=TREE", "NCCL_PROTO=ll", &f, NULL);
}
END_TEST

START_TEST(test_tree_more_ranks) {
  /* Deeper trees (interior nodes with two children) on both trees. */
  forced_t f = {.algo = ALGO_TREE,
                .proto = -1,
                .other_algo = -1,
                .other_proto = -1,
                .counts = {7, 10001, 70001}};
  forced_run(7, "NCCL_ALGO=allreduce:tree", NULL, &f, NULL);
}
END_TEST

START_TEST(test_per_collective_form) {
  /* AllReduce: tree only; everything LL except AllReduce, which must be Simple. */
  forced_t f = {.algo = ALGO_TREE,
                .proto = PROTO_SIMPLE,
                .other_algo = ALGO_RING,
                .other_proto = PROTO_LL,
                .counts = {3, 5000, 100003}};
  forced_run(4, "NCCL_ALGO=ring;allreduce:tree", "NCCL_PROTO=LL;allreduce:Simple", &f, NULL);
}
END_TEST

START_TEST(test_ll128_falls_back) {
  /* LL128 is GPU-only: on the host the model's choice runs instead, and results are right. */
  forced_t f = {
      .algo = -1, .proto = -1, .other_algo = -1, .other_proto = -1, .counts = {1, 999, 65537}};
  forced_run(3, NULL, "NCCL_PROTO=LL128", &f, NULL);
}
END_TEST

START_TEST(test_channels) {
  forced_t f = {.algo = -1,
                .proto = -1,
                .other_algo = -1,
                .other_proto = -1,
                .nchannels = 4,
                .min_nchannels = 4,
                .counts = {1, 9, 100001}};
  itest_opts_t o = {
      .nranks = 3, .timeout_s = 240, .env = {"NCCL_MIN_NCHANNELS=4", "NCCL_MAX_NCHANNELS=4"}};
  ck_assert_int_eq(itest_run(&o, forced_body, &f), 0);
  f.nchannels = 1;
  f.min_nchannels = 1;
  itest_opts_t o1 = {.nranks = 4, .timeout_s = 240, .env = {"NCCL_MAX_NCHANNELS=1"}};
  ck_assert_int_eq(itest_run(&o1, forced_body, &f), 0);
}
END_TEST

/* ncclConfig_t.minCTAs / maxCTAs, here through NCCL_MIN_CTAS / NCCL_MAX_CTAS (which override the
 * config): the host executor's 2 channels become 3, used even by a one-element operation; or 1. */
START_TEST(test_ctas) {
  forced_t f = {.algo = -1,
                .proto = -1,
                .other_algo = -1,
                .other_proto = -1,
                .nchannels = 3,
                .min_nchannels = 3,
                .counts = {1, 9, 100001}};
  itest_opts_t o = {.nranks = 3, .timeout_s = 240, .env = {"NCCL_MIN_CTAS=3"}};
  ck_assert_int_eq(itest_run(&o, forced_body, &f), 0);
  f.nchannels = 1;
  f.min_nchannels = 1;
  itest_opts_t o1 = {.nranks = 3, .timeout_s = 240, .env = {"NCCL_MAX_CTAS=1"}};
  ck_assert_int_eq(itest_run(&o1, forced_body, &f), 0);
}
END_TEST

START_TEST(test_connect_at_init) {
  forced_t f = {.algo = -1,
                .proto = -1,
                .other_algo = -1,
                .other_proto = -1,
                .connected_init = true,
                .counts = {1, 777, 40000}};
  forced_run(4, NULL, NULL, &f, "NCCL_RUNTIME_CONNECT=0");
}
END_TEST

/* One 64 MB AllReduce (16 Mi floats), checked element by element. */
static int large_body(itest_rank_t* r, void* arg) {
  (void)arg;
  double t0 = itest_now();
  itest_case_t c = {.func = IT_ALLREDUCE,
                    .dtype = ncclFloat32,
                    .op = IT_SUM,
                    .count = (64u << 20) / 4,
                    .seed = 7};
  if (itest_op_run(r->comms[0], &c)) return 1;
  coll_choice_t ch;
  IT_NCCL(coll_last_choice(r->comms[0], &ch));
  if (r->rank == 0)
    fprintf(stderr, "64 MB AllReduce: algo %s proto %s nchannels %d, %.2f s with checking\n",
            coll_algo_name(ch.algo), coll_proto_name(ch.proto), ch.nchannels, itest_now() - t0);
  return 0;
}

START_TEST(test_large_64mb) {
  itest_opts_t o = {.nranks = 2, .timeout_s = 240};
  ck_assert_int_eq(itest_run(&o, large_body, NULL), 0);
}
END_TEST

static Suite* algos_suite(void) {
  Suite* s = suite_create("coll_algos");
  TCase* tc = tcase_create("forced");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_ring_simple);
  tcase_add_test(tc, test_ring_ll);
  tcase_add_test(tc, test_tree_simple);
  tcase_add_test(tc, test_tree_ll);
  tcase_add_test(tc, test_tree_more_ranks);
  tcase_add_test(tc, test_per_collective_form);
  tcase_add_test(tc, test_ll128_falls_back);
  tcase_add_test(tc, test_channels);
  tcase_add_test(tc, test_ctas);
  tcase_add_test(tc, test_connect_at_init);
  tcase_add_test(tc, test_large_64mb);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(algos_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
