/* The *Config collectives of NCCL 2.31 (ncclAllReduceConfig ... ncclScatterConfig) on 2 and 3
 * ranks of the host executor: every collective's results with no configuration, a default one
 * and an older (2.31, 64-byte) one; algSelection honoured (the planner's last choice is the
 * selected algorithm and protocol, the results stay right); CTA bounds honoured (channel counts
 * against the communicator's own choice for the same call); and what is refused: a selection
 * that names nothing or nothing that can run here (an error with forceAlgSelection 1, automatic
 * selection with 0), a bad config, a launch-completion event. After every refusal the
 * communicator still runs a collective. */
#include <check.h>
#include <string.h>

#include "collectives/collectives.h"
#include "itest.h"

static int run_config(ncclComm_t comm, const itest_case_t* c, const ncclCollConfig_t* cfg) {
  itest_op_t o;
  if (itest_op_prepare(&o, comm, c)) return 1;
  ncclResult_t res = itest_op_post_config(&o, cfg);
  IT_EXPECT(res == ncclSuccess, "%s with config: %s", itest_func_name(c->func),
            ncclGetErrorString(res));
  int bad = itest_op_check(&o);
  itest_op_release(&o);
  return bad;
}

/* The call fails with want, queues nothing, and the communicator still works. */
static int expect_refused(ncclComm_t comm, const itest_case_t* c, const ncclCollConfig_t* cfg,
                          ncclResult_t want, const char* text, uint32_t seed) {
  itest_op_t o;
  if (itest_op_prepare(&o, comm, c)) return 1;
  ncclResult_t res = itest_op_post_config(&o, cfg);
  itest_op_release(&o);
  IT_EXPECT(res == want, "%s: returned %s, expected %s", text, ncclGetErrorString(res),
            ncclGetErrorString(want));
  IT_EXPECT(strstr(ncclGetLastError(comm), text) != NULL, "last error \"%s\" does not name %s",
            ncclGetLastError(comm), text);
  itest_case_t after = {
      .func = IT_ALLREDUCE, .dtype = ncclInt32, .op = IT_SUM, .count = 1000, .seed = seed};
  return itest_op_run(comm, &after);
}

static int last_choice(ncclComm_t comm, int func, coll_choice_t* ch) {
  IT_NCCL(coll_last_choice(comm, ch));
  IT_EXPECT(ch->func == func, "last operation was func %d, expected %d", ch->func, func);
  return 0;
}

static int body_all_funcs(itest_rank_t* r, void* arg) {
  ncclComm_t comm = r->comms[0];
  uint32_t seed = 1;
  ncclCollConfig_t dflt = NCCL_COLLCONFIG_INITIALIZER;
  /* 2.31's struct ended before launchCompletionEvent: 64 bytes, and whatever follows is not
   * read (a non-NULL "event" there would be refused if it were). */
  struct {
    ncclCollConfig_t cfg;
  } v231 = {.cfg = NCCL_COLLCONFIG_INITIALIZER};
  v231.cfg.size = offsetof(ncclCollConfig_t, launchCompletionEvent);
  v231.cfg.launchCompletionEvent = (cudaEvent_t)&v231;
  const ncclCollConfig_t* cfgs[3] = {NULL, &dflt, &v231.cfg};
  for (int f = 0; f < IT_FUNC_COUNT; f++) {
    for (int k = 0; k < 3; k++) {
      itest_case_t c = {.func = f,
                        .dtype = k == 1 ? ncclFloat32 : ncclInt64,
                        .op = IT_SUM,
                        .count = 3000 + 7 * (size_t)k,
                        .root = (f + k) % r->nranks,
                        .inplace = k == 2 && f < IT_ALLTOALL,
                        .seed = seed++};
      if (run_config(comm, &c, cfgs[k])) return 1;
    }
  }
  return 0;
}

/* Selections and the (algo, proto) the planner must end with (-1: either of two algorithms). */
typedef struct {
  const char* sel;
  int algo, algo2, proto;
} sel_case_t;

static int body_selection(itest_rank_t* r, void* arg) {
  ncclComm_t comm = r->comms[0];
  uint32_t seed = 100;
  static const sel_case_t cases[] = {
      {"tree", ALGO_TREE, ALGO_TREE, -1},
      {"RING_LL", ALGO_RING, ALGO_RING, PROTO_LL},
      {"ring + ^ring_ll", ALGO_RING, ALGO_RING, PROTO_SIMPLE},
      {" Tree_Simple ", ALGO_TREE, ALGO_TREE, PROTO_SIMPLE},
      {"NVLS,RING_SIMPLE", ALGO_RING, ALGO_RING, PROTO_SIMPLE},
      {"tree_ll,ring_ll", ALGO_TREE, ALGO_RING, PROTO_LL},
      {"OneShot_LL", ALGO_ONESHOT, ALGO_ONESHOT, PROTO_LL},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ncclCollConfig_t cfg = NCCL_COLLCONFIG_INITIALIZER;
    cfg.algSelection = cases[i].sel;
    for (int k = 0; k < 2; k++) {
      itest_case_t c = {.func = IT_ALLREDUCE,
                        .dtype = k ? ncclFloat32 : ncclInt32,
                        .op = IT_SUM,
                        .count = k ? 70001 : 5,
                        .inplace = k == 1,
                        .seed = seed++};
      if (run_config(comm, &c, &cfg)) return 1;
      coll_choice_t ch;
      if (last_choice(comm, FUNC_ALLREDUCE, &ch)) return 1;
      IT_EXPECT(ch.algo == cases[i].algo || ch.algo == cases[i].algo2, "\"%s\": algo %s chosen",
                cases[i].sel, coll_algo_name(ch.algo));
      IT_EXPECT(cases[i].proto < 0 || ch.proto == cases[i].proto, "\"%s\": proto %s chosen",
                cases[i].sel, coll_proto_name(ch.proto));
    }
  }
  /* Ring-only collectives take a ring selection; the next plain call is the model's again. */
  ncclCollConfig_t ring_ll = NCCL_COLLCONFIG_INITIALIZER;
  ring_ll.algSelection = "ring_ll";
  static const int others[4] = {IT_REDUCE, IT_REDUCESCATTER, IT_BROADCAST, IT_ALLGATHER};
  static const int funcs[4] = {FUNC_REDUCE, FUNC_REDUCESCATTER, FUNC_BROADCAST, FUNC_ALLGATHER};
  for (int j = 0; j < 4; j++) {
    itest_case_t c = {.func = others[j],
                      .dtype = ncclFloat32,
                      .op = IT_SUM,
                      .count = 40000,
                      .root = r->nranks - 1,
                      .seed = seed++};
    if (run_config(comm, &c, &ring_ll)) return 1;
    coll_choice_t ch;
    if (last_choice(comm, funcs[j], &ch)) return 1;
    IT_EXPECT(ch.algo == ALGO_RING && ch.proto == PROTO_LL, "%s: %s/%s chosen for ring_ll",
              itest_func_name(others[j]), coll_algo_name(ch.algo), coll_proto_name(ch.proto));
  }
  return 0;
}

static int body_ctas(itest_rank_t* r, void* arg) {
  ncclComm_t comm = r->comms[0];
  /* NCCL_MIN_NCHANNELS=6 (run_ctas): 6 channels, every operation on all of them by itself. */
  int nch = comm->coll->nchannels;
  IT_EXPECT(nch == 6 && comm->coll->min_channels == 6, "the communicator has %d channels, %d "
            "forced; NCCL_MIN_NCHANNELS=6 asked for 6", nch, comm->coll->min_channels);
  uint32_t seed = 200;
  /* 1 MB: the planner spreads it over every channel by itself. */
  itest_case_t big = {
      .func = IT_ALLREDUCE, .dtype = ncclFloat32, .op = IT_SUM, .count = 1 << 18, .seed = seed++};
  if (itest_op_run(comm, &big)) return 1;
  coll_choice_t ch;
  if (last_choice(comm, FUNC_ALLREDUCE, &ch)) return 1;
  IT_EXPECT(ch.nchannels == nch, "1 MB AllReduce used %d channels unbounded", ch.nchannels);
  ncclCollConfig_t cfg = NCCL_COLLCONFIG_INITIALIZER;
  cfg.maxCTAs = 2;
  big.seed = seed++;
  if (run_config(comm, &big, &cfg)) return 1;
  if (last_choice(comm, FUNC_ALLREDUCE, &ch)) return 1;
  IT_EXPECT(ch.nchannels == 2, "maxCTAs 2: %d channels", ch.nchannels);
  /* A single element: the communicator's forced minimum unbounded, the call's minCTAs when it
   * has one. */
  itest_case_t one = {
      .func = IT_REDUCESCATTER, .dtype = ncclInt32, .op = IT_SUM, .count = 1, .seed = seed++};
  if (itest_op_run(comm, &one)) return 1;
  if (last_choice(comm, FUNC_REDUCESCATTER, &ch)) return 1;
  IT_EXPECT(ch.nchannels == nch, "one element used %d channels unbounded", ch.nchannels);
  cfg = (ncclCollConfig_t)NCCL_COLLCONFIG_INITIALIZER;
  cfg.minCTAs = 3;
  one.seed = seed++;
  if (run_config(comm, &one, &cfg)) return 1;
  if (last_choice(comm, FUNC_REDUCESCATTER, &ch)) return 1;
  IT_EXPECT(ch.nchannels == 3, "minCTAs 3: %d channels", ch.nchannels);
  /* minCTAs above maxCTAs: minCTAs becomes 1 (stock's rule), so maxCTAs alone bounds. */
  cfg.minCTAs = 4;
  cfg.maxCTAs = 2;
  big.seed = seed++;
  if (run_config(comm, &big, &cfg)) return 1;
  if (last_choice(comm, FUNC_ALLREDUCE, &ch)) return 1;
  IT_EXPECT(ch.nchannels == 2, "minCTAs 4 maxCTAs 2: %d channels", ch.nchannels);
  /* Out of range: ignored. */
  cfg.minCTAs = 0;
  cfg.maxCTAs = 1000;
  big.seed = seed++;
  if (run_config(comm, &big, &cfg)) return 1;
  if (last_choice(comm, FUNC_ALLREDUCE, &ch)) return 1;
  IT_EXPECT(ch.nchannels == nch, "maxCTAs 1000 (ignored): %d channels", ch.nchannels);
  /* In a group, the bound is the call's own. */
  cfg = (ncclCollConfig_t)NCCL_COLLCONFIG_INITIALIZER;
  cfg.maxCTAs = 1;
  itest_op_t a, b;
  itest_case_t ca = big, cb = big;
  ca.seed = seed++;
  cb.seed = seed++;
  cb.func = IT_ALLGATHER;
  cb.count = big.count / (size_t)r->nranks;
  if (itest_op_prepare(&a, comm, &ca) || itest_op_prepare(&b, comm, &cb)) return 1;
  IT_NCCL(ncclGroupStart());
  IT_NCCL(itest_op_post_config(&a, &cfg));
  IT_NCCL(itest_op_post(&b));
  IT_NCCL(ncclGroupEnd());
  int bad = itest_op_check(&a) || itest_op_check(&b);
  itest_op_release(&a);
  itest_op_release(&b);
  if (bad) return 1;
  if (last_choice(comm, FUNC_ALLGATHER, &ch)) return 1;
  IT_EXPECT(ch.nchannels == nch, "the grouped plain AllGather used %d channels", ch.nchannels);
  return 0;
}

static int body_refused(itest_rank_t* r, void* arg) {
  ncclComm_t comm = r->comms[0];
  uint32_t seed = 300;
  itest_case_t c = {
      .func = IT_ALLREDUCE, .dtype = ncclFloat32, .op = IT_SUM, .count = 999, .seed = seed++};
  ncclCollConfig_t cfg = NCCL_COLLCONFIG_INITIALIZER;
  cfg.algSelection = "NVLS";
  if (expect_refused(comm, &c, &cfg, ncclInvalidArgument, "selects nothing that can run here",
                     seed++))
    return 1;
  cfg.algSelection = "ring,bogus";
  if (expect_refused(comm, &c, &cfg, ncclInvalidArgument, "names no algorithm: bogus", seed++))
    return 1;
  cfg.algSelection = "tree_ll128"; /* no LL128 on the host executor */
  if (expect_refused(comm, &c, &cfg, ncclInvalidArgument, "tree_ll128", seed++)) return 1;
  cfg.algSelection = "ring+tree"; /* both at once: nothing */
  if (expect_refused(comm, &c, &cfg, ncclInvalidArgument, "ring+tree", seed++)) return 1;
  /* Not forced: automatic selection, right results. */
  cfg.forceAlgSelection = 0;
  cfg.algSelection = "NVLS";
  c.seed = seed++;
  if (run_config(comm, &c, &cfg)) return 1;
  cfg.algSelection = "bogus";
  c.seed = seed++;
  if (run_config(comm, &c, &cfg)) return 1;
  /* Tree exists for AllReduce only. */
  itest_case_t bc = {.func = IT_BROADCAST, .dtype = ncclInt8, .count = 100, .seed = seed++};
  cfg = (ncclCollConfig_t)NCCL_COLLCONFIG_INITIALIZER;
  cfg.algSelection = "tree";
  if (expect_refused(comm, &bc, &cfg, ncclInvalidArgument, "ncclBroadcastConfig", seed++)) return 1;
  /* AlltoAll, Gather and Scatter have no selectable algorithm. */
  itest_case_t a2a = {.func = IT_ALLTOALL, .dtype = ncclInt32, .count = 10, .seed = seed++};
  cfg.algSelection = "ring";
  if (expect_refused(comm, &a2a, &cfg, ncclInvalidArgument, "sends and receives", seed++)) return 1;
  ncclCollConfig_t bad = NCCL_COLLCONFIG_INITIALIZER;
  bad.magic = 0;
  if (expect_refused(comm, &c, &bad, ncclInvalidArgument, "magic", seed++)) return 1;
  bad = (ncclCollConfig_t)NCCL_COLLCONFIG_INITIALIZER;
  bad.size = 16;
  if (expect_refused(comm, &c, &bad, ncclInvalidArgument, "size 16", seed++)) return 1;
  bad = (ncclCollConfig_t)NCCL_COLLCONFIG_INITIALIZER;
  bad.forceAlgSelection = 2;
  if (expect_refused(comm, &c, &bad, ncclInvalidArgument, "forceAlgSelection 2", seed++)) return 1;
  bad = (ncclCollConfig_t)NCCL_COLLCONFIG_INITIALIZER;
  bad.CTAPolicy = 9;
  if (expect_refused(comm, &c, &bad, ncclInvalidArgument, "CTAPolicy 9", seed++)) return 1;
  bad = (ncclCollConfig_t)NCCL_COLLCONFIG_INITIALIZER;
  bad.launchCompletionEvent = (cudaEvent_t)&bad;
  if (expect_refused(comm, &c, &bad, ncclInvalidUsage, "launchCompletionEvent", seed++)) return 1;
  /* Inside a group a refused call fails the group, which then runs nothing. */
  cfg = (ncclCollConfig_t)NCCL_COLLCONFIG_INITIALIZER;
  cfg.algSelection = "NVLS";
  itest_op_t o;
  if (itest_op_prepare(&o, comm, &c)) return 1;
  IT_NCCL(ncclGroupStart());
  ncclResult_t res = itest_op_post_config(&o, &cfg);
  ncclResult_t end = ncclGroupEnd();
  itest_op_release(&o);
  IT_EXPECT(res == ncclInvalidArgument && end == ncclInvalidArgument,
            "refused call in a group: %d, group end %d", (int)res, (int)end);
  /* A forced direct-only selection grouped with a forced ring one: the group cannot honour both
   * (the direct algorithms are all of a group or none), so it fails; not forced, it runs. */
  ncclCollConfig_t direct = NCCL_COLLCONFIG_INITIALIZER, ring = NCCL_COLLCONFIG_INITIALIZER;
  direct.algSelection = "OneShot_LL";
  ring.algSelection = "ring";
  for (int forced = 1; forced >= 0; forced--) {
    direct.forceAlgSelection = forced;
    itest_op_t d, g;
    itest_case_t cd = {
        .func = IT_ALLREDUCE, .dtype = ncclFloat32, .op = IT_SUM, .count = 513, .seed = seed++};
    itest_case_t cg = cd;
    cg.seed = seed++;
    if (itest_op_prepare(&d, comm, &cd) || itest_op_prepare(&g, comm, &cg)) return 1;
    IT_NCCL(ncclGroupStart());
    IT_NCCL(itest_op_post_config(&d, &direct));
    IT_NCCL(itest_op_post_config(&g, &ring));
    ncclResult_t ge = ncclGroupEnd();
    int wrong = 0;
    if (forced) {
      IT_EXPECT(ge == ncclInvalidArgument, "forced OneShot beside a forced ring: group end %d",
                (int)ge);
      IT_EXPECT(strstr(ncclGetLastError(comm), "cannot run in this group") != NULL,
                "last error \"%s\"", ncclGetLastError(comm));
    } else {
      IT_EXPECT(ge == ncclSuccess, "OneShot not forced beside a forced ring: group end %d",
                (int)ge);
      wrong = itest_op_check(&d) || itest_op_check(&g);
    }
    itest_op_release(&d);
    itest_op_release(&g);
    if (wrong) return 1;
  }
  itest_case_t after = {
      .func = IT_ALLREDUCE, .dtype = ncclInt32, .op = IT_SUM, .count = 10, .seed = seed++};
  return itest_op_run(comm, &after);
}

static void run(int nranks, itest_body_t body) {
  itest_opts_t o = {.nranks = nranks, .timeout_s = 240};
  if (body == body_ctas) o.env[0] = "NCCL_MIN_NCHANNELS=6";
  ck_assert_int_eq(itest_run(&o, body, NULL), 0);
}

START_TEST(test_all_funcs_2) {
  run(2, body_all_funcs);
}
END_TEST
START_TEST(test_all_funcs_3) {
  run(3, body_all_funcs);
}
END_TEST
START_TEST(test_selection_2) {
  run(2, body_selection);
}
END_TEST
START_TEST(test_selection_3) {
  run(3, body_selection);
}
END_TEST
START_TEST(test_ctas_2) {
  run(2, body_ctas);
}
END_TEST
START_TEST(test_ctas_3) {
  run(3, body_ctas);
}
END_TEST
START_TEST(test_refused_2) {
  run(2, body_refused);
}
END_TEST
START_TEST(test_refused_3) {
  run(3, body_refused);
}
END_TEST

static Suite* config_suite(void) {
  Suite* s = suite_create("coll_config");
  TCase* tc = tcase_create("config");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_all_funcs_2);
  tcase_add_test(tc, test_all_funcs_3);
  tcase_add_test(tc, test_selection_2);
  tcase_add_test(tc, test_selection_3);
  tcase_add_test(tc, test_ctas_2);
  tcase_add_test(tc, test_ctas_3);
  tcase_add_test(tc, test_refused_2);
  tcase_add_test(tc, test_refused_3);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(config_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
