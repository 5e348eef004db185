/* The simulator's pure parts (src/device/sim): max-min fair sharing against hand-computed
 * allocations, its memo, the built-in topologies through the real XML reader, and the cluster's
 * links and paths. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "device/sim/sim_int.h"
#include "unit.h"

#define EPS 1e-9

static void solve(int nlinks, const double* cap, int nflows, const int* off, const int* links,
                  const double* fcap, double* rate) {
  sim_flows_t p = {
      .nlinks = nlinks, .cap = cap, .nflows = nflows, .off = off, .links = links, .flow_cap = fcap};
  ck_assert_int_eq(sim_fair_share(&p, rate), ncclSuccess);
}

/* One link of 12 shared by three flows: 4 each. */
START_TEST(test_one_link) {
  double cap[] = {12};
  int off[] = {0, 1, 2, 3}, links[] = {0, 0, 0};
  double r[3];
  solve(1, cap, 3, off, links, NULL, r);
  for (int i = 0; i < 3; i++) ck_assert_double_eq_tol(r[i], 4, EPS);
}
END_TEST

/* Links A = 10, B = 4; f0 crosses A and B, f1 only A, f2 only B. B is the bottleneck (2 each),
 * then f1 takes what A has left: 10 - 2 = 8. */
START_TEST(test_two_bottlenecks) {
  double cap[] = {10, 4};
  int off[] = {0, 2, 3, 4}, links[] = {0, 1, 0, 1};
  double r[3];
  solve(2, cap, 3, off, links, NULL, r);
  ck_assert_double_eq_tol(r[0], 2, EPS);
  ck_assert_double_eq_tol(r[1], 8, EPS);
  ck_assert_double_eq_tol(r[2], 2, EPS);
}
END_TEST

/* Parking lot: three links of 1 in a row, a long flow over all three and a short one on each:
 * every link has two flows, so everyone gets 0.5. */
START_TEST(test_parking_lot) {
  double cap[] = {1, 1, 1};
  int off[] = {0, 3, 4, 5, 6}, links[] = {0, 1, 2, 0, 1, 2};
  double r[4];
  solve(3, cap, 4, off, links, NULL, r);
  for (int i = 0; i < 4; i++) ck_assert_double_eq_tol(r[i], 0.5, EPS);
}
END_TEST

/* A link of 10 with two flows, one capped at 3 (a block's push rate): 3 and 7. Then three flows
 * on 9 with caps 1 and 5 and none: 1, then (9 - 1) / 2 = 4 for the others (5 does not bind). */
START_TEST(test_flow_caps) {
  double cap[] = {10};
  int off[] = {0, 1, 2}, links[] = {0, 0};
  double fcap[] = {3, 0};
  double r[3];
  solve(1, cap, 2, off, links, fcap, r);
  ck_assert_double_eq_tol(r[0], 3, EPS);
  ck_assert_double_eq_tol(r[1], 7, EPS);
  double cap9[] = {9};
  int off3[] = {0, 1, 2, 3}, links3[] = {0, 0, 0};
  double fcap3[] = {1, 5, -1};
  solve(1, cap9, 3, off3, links3, fcap3, r);
  ck_assert_double_eq_tol(r[0], 1, EPS);
  ck_assert_double_eq_tol(r[1], 4, EPS);
  ck_assert_double_eq_tol(r[2], 4, EPS);
}
END_TEST

/* Unequal shares resolved in order: links 6 (flows 0, 1, 2) and 20 (flows 2, 3). Link 0 gives 2
 * each; flow 3 gets 20 - 2 = 18. */
START_TEST(test_levels) {
  double cap[] = {6, 20};
  int off[] = {0, 1, 2, 4, 5}, links[] = {0, 0, 0, 1, 1};
  double r[4];
  solve(2, cap, 4, off, links, NULL, r);
  ck_assert_double_eq_tol(r[0], 2, EPS);
  ck_assert_double_eq_tol(r[1], 2, EPS);
  ck_assert_double_eq_tol(r[2], 2, EPS);
  ck_assert_double_eq_tol(r[3], 18, EPS);
}
END_TEST

START_TEST(test_bad_input) {
  double cap[] = {1};
  int off[] = {0, 0}, links[] = {0};
  int off_bad[] = {0, 1}, links_bad[] = {3};
  double r[1];
  sim_flows_t p = {.nlinks = 1, .cap = cap, .nflows = 1, .off = off, .links = links};
  ck_assert_int_eq(sim_fair_share(&p, r), ncclInternalError); /* no link, no cap: unbounded */
  p.off = off_bad;
  p.links = links_bad;
  ck_assert_int_eq(sim_fair_share(&p, r), ncclInternalError); /* a link that does not exist */
}
END_TEST

START_TEST(test_memo) {
  sim_memo_t m;
  sim_memo_init(&m);
  double cap[] = {10, 4};
  int off[] = {0, 2, 3, 4}, links[] = {0, 1, 0, 1};
  sim_flows_t p = {.nlinks = 2, .cap = cap, .nflows = 3, .off = off, .links = links};
  double a[3], b[3];
  bool hit = true;
  ck_assert_int_eq(sim_fair_share_memo(&m, &p, a, &hit), ncclSuccess);
  ck_assert(!hit);
  ck_assert_int_eq(sim_fair_share_memo(&m, &p, b, &hit), ncclSuccess);
  ck_assert(hit);
  for (int i = 0; i < 3; i++) ck_assert_double_eq(a[i], b[i]);
  double cap2[] = {10, 8}; /* another flow set: solved again, B no longer binds */
  p.cap = cap2;
  ck_assert_int_eq(sim_fair_share_memo(&m, &p, b, &hit), ncclSuccess);
  ck_assert(!hit);
  ck_assert_double_eq_tol(b[0], 4, EPS);
  ck_assert_double_eq_tol(b[1], 6, EPS);
  ck_assert_double_eq_tol(b[2], 4, EPS);
  ck_assert_uint_eq(m.hits, 1);
  ck_assert_uint_eq(m.misses, 2);
  sim_memo_free(&m);
}
END_TEST

/* ---- Topologies and the cluster -------------------------------------------------------------- */
START_TEST(test_builtin_topologies) {
  static const struct {
    const char* name;
    int gpus, nics, nvswitch;
    topo_path_t pair01, pair03;
  } want[] = {{"h200x8", 8, 8, 18, TOPO_PATH_NVL, TOPO_PATH_NVL},
              {"h100x8-nvswitch-8nic", 8, 8, 18, TOPO_PATH_NVL, TOPO_PATH_NVL},
              {"h200x4", 4, 0, 18, TOPO_PATH_NVL, TOPO_PATH_NVL},
              {"h200x2", 2, 0, 18, TOPO_PATH_NVL, TOPO_PATH_COUNT},
              {"h100x4", 4, 0, 18, TOPO_PATH_NVL, TOPO_PATH_NVL},
              {"h100x2", 2, 0, 18, TOPO_PATH_NVL, TOPO_PATH_COUNT},
              {"pcie4x4", 4, 1, 0, TOPO_PATH_PIX, TOPO_PATH_PHB}};
  for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
    char* xml = NULL;
    topo_system_t* sys = NULL;
    ck_assert_int_eq(sim_topo_builtin(want[i].name, 0, &xml), ncclSuccess);
    ck_assert_int_eq(topo_xml_parse(xml, want[i].name, &sys), ncclSuccess);
    ck_assert_int_eq(sys->ngpus, want[i].gpus);
    ck_assert_int_eq(sys->nnics, want[i].nics);
    ck_assert_int_eq(sys->gpus[0].nvswitch_links, want[i].nvswitch);
    ck_assert_int_eq(sys->paths[1], want[i].pair01);
    if (want[i].pair03 != TOPO_PATH_COUNT) ck_assert_int_eq(sys->paths[3], want[i].pair03);
    ck_assert_ptr_nonnull(sim_topo_about(want[i].name));
    topo_system_free(sys);
    free(xml);
  }
  /* 4 NICs on an 8-GPU board: under the switches of GPUs 0, 2, 4, 6; each GPU then has one
   * closest NIC (its own switch's or, for odd GPUs, none closer than its socket's). */
  char* xml = NULL;
  topo_system_t* sys = NULL;
  ck_assert_int_eq(sim_topo_builtin("h200x8", 4, &xml), ncclSuccess);
  ck_assert_int_eq(topo_xml_parse(xml, "h200x8/4", &sys), ncclSuccess);
  ck_assert_int_eq(sys->nnics, 4);
  int near[8];
  ck_assert_int_eq(topo_nics_near(sys, sys->gpus[2].bus_id, near, 8), 1);
  ck_assert_int_eq(near[0], 1);
  topo_system_free(sys);
  free(xml);
  ck_assert_int_eq(sim_topo_builtin("h200x8", 9, &xml), ncclInvalidArgument);
  ck_assert_int_eq(sim_topo_builtin("h200x2", 1, &xml), ncclInvalidArgument);
  ck_assert_int_eq(sim_topo_builtin("dgx-z", 0, &xml), ncclInvalidArgument);
}
END_TEST

START_TEST(test_cluster_links) {
  char* xml = NULL;
  ck_assert_int_eq(sim_topo_builtin("h200x8", 0, &xml), ncclSuccess);
  sim_cluster_desc_t d = {.node_xml = xml,
                          .node_name = "h200x8",
                          .nnodes = 8,
                          .fabric = {.leaf_nodes = 4, .oversub = 2, .net_lat_us = -1}};
  sim_net_t* n = NULL;
  ck_assert_int_eq(sim_net_build(&d, &n), ncclSuccess);
  ck_assert_int_eq(n->ngpus, 8);
  ck_assert_int_eq(n->nnics, 8);
  ck_assert_int_eq(n->nleaves, 2);
  int l[SIM_PATH_MAX];
  char name[64];
  /* Two GPUs of a node through the NVSwitches: out of one port, into the other; the port is
   * 18 links x 20.6 GB/s (topo's estimate) x nvl_eff. */
  ck_assert_int_eq(sim_net_path(n, SIM_TR_P2P, 3, 1, 3, 5, -1, -1, -1, l), 2);
  ck_assert_double_eq_tol(n->cap[l[0]], 18 * 20.6 * 1000 * sim_calib.nvl_eff, 1e-6);
  sim_net_link_name(n, l[0], name, sizeof(name));
  ck_assert_str_eq(name, "n3.gpu1.nvl-out");
  sim_net_link_name(n, l[1], name, sizeof(name));
  ck_assert_str_eq(name, "n3.gpu5.nvl-in");
  /* Node 1 to node 6 (leaves 0 and 1): PCIe, NIC, two leaf links, NIC, PCIe. */
  ck_assert_int_eq(sim_net_path(n, SIM_TR_NET, 1, 2, 6, 2, 2, 2, -1, l), 6);
  sim_net_link_name(n, l[1], name, sizeof(name));
  ck_assert_str_eq(name, "n1.nic2.tx");
  ck_assert_double_eq_tol(n->cap[l[1]], 400000 / 8000.0 * sim_calib.nic_eff * 1000, 1e-6);
  sim_net_link_name(n, l[2], name, sizeof(name));
  ck_assert_str_eq(name, "leaf0.up");
  /* The leaf's uplink: 4 nodes x 8 NICs, oversubscribed 2:1. */
  ck_assert_double_eq_tol(n->cap[l[2]], 4 * 8 * 48.0 * 1000 / 2, 1e-6);
  sim_net_link_name(n, l[4], name, sizeof(name));
  ck_assert_str_eq(name, "n6.nic2.rx");
  /* Within a leaf: no leaf link. */
  ck_assert_int_eq(sim_net_path(n, SIM_TR_NET, 0, 0, 3, 0, 0, 0, -1, l), 4);
  ck_assert(sim_net_latency(n, SIM_TR_NET, 1, 2, 6, 2, -1) >
            sim_net_latency(n, SIM_TR_NET, 0, 0, 3, 0, -1));
  /* PXN: GPU 5 of node 0 sends through NIC 2 by way of GPU 2 (relay): NVLink out of 5 and into
   * 2, GPU 2's PCIe up (the NIC reads its memory), the NICs, node 3's GPU 2 PCIe down; one
   * NVLink hop's latency more than the direct path. */
  static const char* const pxn[] = {"n0.gpu5.nvl-out", "n0.gpu2.nvl-in", "n0.gpu2.pcie-up",
                                    "n0.nic2.tx",      "n3.nic2.rx",     "n3.gpu2.pcie-down"};
  ck_assert_int_eq(sim_net_path(n, SIM_TR_NET, 0, 5, 3, 2, 2, 2, 2, l), 6);
  for (int i = 0; i < 6; i++) {
    sim_net_link_name(n, l[i], name, sizeof(name));
    ck_assert_str_eq(name, pxn[i]);
  }
  ck_assert_double_eq_tol(sim_net_latency(n, SIM_TR_NET, 0, 5, 3, 2, 2),
                          sim_net_latency(n, SIM_TR_NET, 0, 5, 3, 2, -1) + sim_calib.nvl_lat_us,
                          1e-9);
  /* a relay that is the sender itself is no relay */
  ck_assert_int_eq(sim_net_path(n, SIM_TR_NET, 0, 2, 3, 2, 2, 2, 2, l), 4);
  sim_net_free(n);
  free(xml);
}
END_TEST

START_TEST(test_wire_bytes) {
  ck_assert_double_eq(sim_wire_bytes(PROTO_SIMPLE, 1200), 1200);
  ck_assert_double_eq(sim_wire_bytes(PROTO_LL, 1200), 2400);
  ck_assert_double_eq(sim_wire_bytes(PROTO_LL128, 1200), 1280);
}
END_TEST

int main(void) {
  Suite* s = suite_create("sim_model");
  TCase* tc = tcase_create("model");
  tcase_add_test(tc, test_one_link);
  tcase_add_test(tc, test_two_bottlenecks);
  tcase_add_test(tc, test_parking_lot);
  tcase_add_test(tc, test_flow_caps);
  tcase_add_test(tc, test_levels);
  tcase_add_test(tc, test_bad_input);
  tcase_add_test(tc, test_memo);
  tcase_add_test(tc, test_builtin_topologies);
  tcase_add_test(tc, test_cluster_links);
  tcase_add_test(tc, test_wire_bytes);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
