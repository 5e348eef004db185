/* The choices of NET connections that cannot run here for real (no GPU, no RDMA NIC): the
 * GPUDirect RDMA decision (src/transport/net_gdr.c), every rule with its reason, and
 * NCCL_NET_GDR_LEVEL parsing; the NIC a connection uses under NCCL_CROSS_NIC. Expected outcomes
 * are the documented rules, written out per case. */
#include <check.h>
#include <stdlib.h>

#include "transport/transport.h"
#include "unit.h"

/* A Hopper GPU next to an RDMA NIC behind one PCIe switch, both able to do dma-buf. */
static net_gdr_query_t good(void) {
  net_gdr_query_t q = {.gpu_fifos = true,
                       .is_send = false,
                       .nic_ptr_support = NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF,
                       .gpu_gdr = true,
                       .gpu_dmabuf = true,
                       .gpu_sm = 90,
                       .gpu_nvlink_peer = true,
                       .path = TOPO_PATH_PIX,
                       .max_path = TOPO_PATH_PXB,
                       .gdr_read = -1,
                       .dmabuf_enable = true};
  return q;
}

static net_gdr_mode_t decide(const net_gdr_query_t* q, char* why) {
  return transport_net_gdr(q, why, 192);
}

START_TEST(gdr_on_with_dmabuf_when_everything_allows) {
  char why[192];
  net_gdr_query_t q = good();
  ck_assert_int_eq(decide(&q, why), NET_GDR_DMABUF);
  ck_assert_ptr_nonnull(strstr(why, "PIX"));
  q.is_send = true; /* sends from Ampere on read GPU memory by default */
  ck_assert_int_eq(decide(&q, why), NET_GDR_DMABUF);
  q.path = TOPO_PATH_PXB; /* the default level is inclusive */
  ck_assert_int_eq(decide(&q, why), NET_GDR_DMABUF);
  ck_assert_str_eq(transport_net_gdr_name(NET_GDR_DMABUF), "on (dma-buf)");
}
END_TEST

START_TEST(gdr_off_reasons) {
  char why[192];
  net_gdr_query_t q = good();
  q.gpu_fifos = false;
  ck_assert_int_eq(decide(&q, why), NET_GDR_OFF);
  ck_assert_ptr_nonnull(strstr(why, "host executor"));

  q = good();
  q.nic_ptr_support = NCCL_PTR_HOST; /* Soft-RoCE, sockets */
  ck_assert_int_eq(decide(&q, why), NET_GDR_OFF);
  ck_assert_ptr_nonnull(strstr(why, "cannot reach GPU memory"));

  q = good();
  q.gpu_gdr = false;
  ck_assert_int_eq(decide(&q, why), NET_GDR_OFF);
  ck_assert_ptr_nonnull(strstr(why, "does not support GPUDirect"));

  q = good();
  q.path = TOPO_PATH_PHB; /* through the CPU: beyond the default PXB */
  ck_assert_int_eq(decide(&q, why), NET_GDR_OFF);
  ck_assert_ptr_nonnull(strstr(why, "PHB is beyond NCCL_NET_GDR_LEVEL PXB"));
  q.max_path = TOPO_PATH_SYS; /* NCCL_NET_GDR_LEVEL=SYS */
  ck_assert_int_eq(decide(&q, why), NET_GDR_DMABUF);

  q = good();
  q.is_send = true;
  q.gdr_read = 0;
  ck_assert_int_eq(decide(&q, why), NET_GDR_OFF);
  ck_assert_ptr_nonnull(strstr(why, "NCCL_NET_GDR_READ=0"));
  q.is_send = false; /* the read setting does not touch receives */
  ck_assert_int_eq(decide(&q, why), NET_GDR_DMABUF);
}
END_TEST

START_TEST(gdr_reads_before_ampere) {
  char why[192];
  net_gdr_query_t q = good();
  q.is_send = true;
  q.gpu_sm = 70;
  q.gpu_nvlink_peer = false;
  ck_assert_int_eq(decide(&q, why), NET_GDR_OFF);
  ck_assert_ptr_nonnull(strstr(why, "before Ampere"));
  q.gpu_nvlink_peer = true; /* with an NVLink peer the PCIe flows are the NIC's */
  ck_assert_int_eq(decide(&q, why), NET_GDR_DMABUF);
  q.gpu_nvlink_peer = false;
  q.gdr_read = 1; /* forced */
  ck_assert_int_eq(decide(&q, why), NET_GDR_DMABUF);
  q.is_send = false; /* receives are not reads */
  q.gdr_read = -1;
  ck_assert_int_eq(decide(&q, why), NET_GDR_DMABUF);
}
END_TEST

START_TEST(gdr_dmabuf_or_peer_memory) {
  char why[192];
  net_gdr_query_t q = good();
  q.dmabuf_enable = false; /* NCCL_DMABUF_ENABLE=0: the peer-memory module */
  ck_assert_int_eq(decide(&q, why), NET_GDR_PEERMEM);
  ck_assert_ptr_nonnull(strstr(why, "NCCL_DMABUF_ENABLE=0"));
  q = good();
  q.gpu_dmabuf = false;
  ck_assert_int_eq(decide(&q, why), NET_GDR_PEERMEM);
  q.nic_ptr_support = NCCL_PTR_HOST | NCCL_PTR_DMABUF; /* no peer memory either */
  ck_assert_int_eq(decide(&q, why), NET_GDR_OFF);
  ck_assert_ptr_nonnull(strstr(why, "not supported by the GPU or driver"));
  q = good();
  q.nic_ptr_support = NCCL_PTR_HOST | NCCL_PTR_DMABUF;
  q.dmabuf_enable = false;
  ck_assert_int_eq(decide(&q, why), NET_GDR_OFF);
  ck_assert_ptr_nonnull(strstr(why, "off (NCCL_DMABUF_ENABLE=0)"));
  q = good();
  q.nic_ptr_support = NCCL_PTR_HOST | NCCL_PTR_CUDA; /* an older NIC stack: peer memory only */
  ck_assert_int_eq(decide(&q, why), NET_GDR_PEERMEM);
}
END_TEST

START_TEST(gdr_level_parameter) {
  char dir[] = "/tmp/baton_gdr_XXXXXX";
  unit_sandbox_enter(dir);
  ck_assert_int_eq(transport_net_gdr_level(), TOPO_PATH_PXB);
  unit_set_param("NCCL_NET_GDR_LEVEL", "SYS");
  ck_assert_int_eq(transport_net_gdr_level(), TOPO_PATH_SYS);
  unit_set_param("NCCL_NET_GDR_LEVEL", "1"); /* stock's legacy numbers */
  ck_assert_int_eq(transport_net_gdr_level(), TOPO_PATH_PIX);
  unit_set_param("NCCL_NET_GDR_LEVEL", "FAR");
  ck_assert_int_eq(transport_net_gdr_level(), TOPO_PATH_PXB);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_NET_GDR_LEVEL=FAR"));
  unit_sandbox_leave(dir);
}
END_TEST

/* Four NICs; this GPU's closest are 1 and 3 (the others are a socket away). */
START_TEST(nic_choice_and_cross_nic) {
  const int near[2] = {1, 3};
  /* receivers spread channels over their closest NICs */
  ck_assert_int_eq(transport_net_pick_nic(near, 2, 4, 0, -1, 2), 1);
  ck_assert_int_eq(transport_net_pick_nic(near, 2, 4, 1, -1, 2), 3);
  ck_assert_int_eq(transport_net_pick_nic(near, 2, 4, 2, -1, 2), 1);
  /* default (2): the receiver's rail when it is among the sender's closest */
  ck_assert_int_eq(transport_net_pick_nic(near, 2, 4, 0, 3, 2), 3);
  ck_assert_int_eq(transport_net_pick_nic(near, 2, 4, 0, 2, 2), 1); /* rail 2 is far: own */
  /* 0: always the rail (rail-optimized fabrics), 1: always its own */
  ck_assert_int_eq(transport_net_pick_nic(near, 2, 4, 0, 2, 0), 2);
  ck_assert_int_eq(transport_net_pick_nic(near, 2, 4, 1, 1, 1), 3);
  /* a rail the sender does not have (fewer NICs here): its own */
  ck_assert_int_eq(transport_net_pick_nic(near, 2, 4, 0, 7, 0), 1);
}
END_TEST

/* The rings' say (topo_ring_rails): the NIC the layout gives this rank on a channel replaces the
 * channel's turn among its closest; the sender still follows the receiver's rail by
 * NCCL_CROSS_NIC. */
START_TEST(nic_choice_from_rings) {
  const int near[2] = {1, 3};
  /* receiver: the layout's NIC, whatever the channel's turn would be */
  ck_assert_int_eq(transport_net_pick_ring_nic(near, 2, 4, 0, 3, -1, 2), 3);
  ck_assert_int_eq(transport_net_pick_ring_nic(near, 2, 4, 1, 1, -1, 2), 1);
  /* none (-1) or out of range: the closest-NIC rule */
  ck_assert_int_eq(transport_net_pick_ring_nic(near, 2, 4, 1, -1, -1, 2), 3);
  ck_assert_int_eq(transport_net_pick_ring_nic(near, 2, 4, 1, 9, -1, 2), 3);
  /* sender on its rail's NIC: that NIC under every setting */
  for (int cross = 0; cross <= 2; cross++)
    ck_assert_int_eq(transport_net_pick_ring_nic(near, 2, 4, 0, 3, 3, cross), 3);
  /* the hop that closes a ring over an odd number of hosts: receiver on rail 0, sender's NIC 3 */
  ck_assert_int_eq(transport_net_pick_ring_nic(near, 2, 4, 0, 3, 0, 0), 0); /* stays on the rail */
  ck_assert_int_eq(transport_net_pick_ring_nic(near, 2, 4, 0, 3, 0, 1), 3); /* its own */
  ck_assert_int_eq(transport_net_pick_ring_nic(near, 2, 4, 0, 3, 0, 2), 3); /* rail 0 is far */
  ck_assert_int_eq(transport_net_pick_ring_nic(near, 2, 4, 0, 3, 1, 2), 1); /* rail 1 is close */
}
END_TEST

/* PXN for a point-to-point send (transport_net_pxn_nic): the sender's NIC 1 was picked, the
 * receiver is on rail 3; whether it takes rail 3 through a peer GPU by NCCL_P2P_PXN_LEVEL. */
START_TEST(nic_choice_with_pxn) {
  const bool relayed[4] = {false, false, true, true}; /* NICs 2, 3 only through a peer */
  ck_assert_int_eq(transport_net_pxn_nic(1, 3, 4, relayed, false, 2), 3);
  ck_assert_int_eq(transport_net_pxn_nic(1, 3, 4, relayed, true, 2), 3);
  ck_assert_int_eq(transport_net_pxn_nic(1, 3, 4, relayed, false, 1), 1); /* its own is near */
  ck_assert_int_eq(transport_net_pxn_nic(1, 3, 4, relayed, true, 1), 3);  /* its own is far */
  ck_assert_int_eq(transport_net_pxn_nic(1, 3, 4, relayed, true, 0), 1);
  /* rail 0 needs no relay (it is near, or the cross-NIC rule already decided): the pick stays */
  ck_assert_int_eq(transport_net_pxn_nic(1, 0, 4, relayed, true, 2), 1);
  /* no rail, a rail out of range, no relay table */
  ck_assert_int_eq(transport_net_pxn_nic(1, -1, 4, relayed, true, 2), 1);
  ck_assert_int_eq(transport_net_pxn_nic(1, 4, 4, relayed, true, 2), 1);
  ck_assert_int_eq(transport_net_pxn_nic(1, 3, 4, NULL, true, 2), 1);
}
END_TEST

/* A network device and the topology's NIC it is: by PCI function, else by name (virtual devices:
 * Soft-RoCE), a merged device as its first port. */
START_TEST(nic_of_the_topology) {
  topo_nic_t mlx0 = {.name = "mlx5_0", .bus_id = 0x3b000};
  topo_nic_t mlx1 = {.name = "mlx5_1", .bus_id = 0x3c000};
  topo_nic_t rxe = {.name = "rxe0", .bus_id = -1};
  topo_nic_t at0 = {.bus_id = 0x3b000}, at1 = {.bus_id = 0x3c000};
  ck_assert(transport_net_same_nic(&mlx0, "mlx5_0", &at0));
  ck_assert(!transport_net_same_nic(&mlx0, "mlx5_0", &at1)); /* the PCI place decides */
  ck_assert(transport_net_same_nic(&mlx1, "anything", &at1));
  ck_assert(transport_net_same_nic(&rxe, "rxe0", NULL));
  ck_assert(!transport_net_same_nic(&rxe, "rxe01", NULL));
  ck_assert(!transport_net_same_nic(&rxe, NULL, NULL));
  ck_assert(transport_net_same_nic(&mlx0, "mlx5_0+mlx5_1", NULL)); /* merged, no place */
  ck_assert(!transport_net_same_nic(&mlx1, "mlx5_0+mlx5_1", NULL));
  ck_assert(!transport_net_same_nic(&mlx1, "mlx5_10", NULL));
}
END_TEST

int main(void) {
  Suite* s = suite_create("net_gdr");
  TCase* tc = tcase_create("net_gdr");
  tcase_add_test(tc, gdr_on_with_dmabuf_when_everything_allows);
  tcase_add_test(tc, gdr_off_reasons);
  tcase_add_test(tc, gdr_reads_before_ampere);
  tcase_add_test(tc, gdr_dmabuf_or_peer_memory);
  tcase_add_test(tc, gdr_level_parameter);
  tcase_add_test(tc, nic_choice_and_cross_nic);
  tcase_add_test(tc, nic_choice_from_rings);
  tcase_add_test(tc, nic_choice_with_pxn);
  tcase_add_test(tc, nic_of_the_topology);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
