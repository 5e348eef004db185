/* Choosing the P2P transport (src/transport/p2p.c) without a GPU: the policy (NCCL_P2P_DISABLE,
 * executor, host, GPUs, path vs NCCL_P2P_LEVEL) on forced NVLink and PCIe topologies, symmetric
 * for every pair; can_connect on top of it; the CUDA driver loader's failure paths; host memory
 * registration failing cleanly without a device (and working with one). */
#include <check.h>
#include <stdlib.h>

#include "transport/transport.h"
#include "unit.h"

/* Two GPUs joined by NVLink, plus two PCIe GPUs under one switch and one on another CPU. */
static const char* const topo_xml =
    "<system>\n"
    "  <cpu numaid=\"0\">\n"
    "    <gpu busid=\"0000:18:00.0\" sm=\"90\"><nvlink target=\"0000:2a:00.0\" "
    "count=\"18\"/></gpu>\n"
    "    <gpu busid=\"0000:2a:00.0\" sm=\"90\"><nvlink target=\"0000:18:00.0\" "
    "count=\"18\"/></gpu>\n"
    "    <pci busid=\"0000:30:01.0\"><pci busid=\"0000:31:00.0\">\n"
    "      <pci busid=\"0000:32:00.0\"><gpu busid=\"0000:33:00.0\"/></pci>\n"
    "      <pci busid=\"0000:32:01.0\"><gpu busid=\"0000:34:00.0\"/></pci>\n"
    "      <pci busid=\"0000:32:02.0\"><pci busid=\"0000:35:00.0\"><pci busid=\"0000:36:00.0\">\n"
    "        <gpu busid=\"0000:37:00.0\"/>\n"
    "      </pci></pci></pci>\n"
    "    </pci></pci>\n"
    "    <pci busid=\"0000:40:01.0\"><gpu busid=\"0000:41:00.0\"/></pci>\n"
    "  </cpu>\n"
    "  <cpu numaid=\"1\"><gpu busid=\"0000:c1:00.0\"/></cpu>\n"
    "</system>\n";

enum { R_NV0, R_NV1, R_PIX0, R_PIX1, R_PXB, R_PHB, R_SYS, R_SAME, R_OTHER_HOST, R_NOGPU, NR };
static const char* const bus[NR] = {
    "0000:18:00.0", "0000:2a:00.0", "0000:33:00.0", "0000:34:00.0", "0000:37:00.0",
    "0000:41:00.0", "0000:c1:00.0", "0000:18:00.0", "0000:2a:00.0", NULL};

static peer_info_t peers[NR];
static topo_system_t* sys;
static transport_ctx_t ctx;

static void setup(void) {
  for (int r = 0; r < NR; r++) {
    peers[r] = (peer_info_t){.rank = r,
                             .cuda_dev = bus[r] ? r % 4 : -1,
                             .bus_id = bus[r] ? topo_busid_parse(bus[r]) : -1,
                             .host_hash = r == R_OTHER_HOST ? 2 : 1,
                             .pid_hash = 10 + (uint64_t)r,
                             .pid = 100 + r};
  }
  ck_assert_int_eq(topo_xml_parse(topo_xml, "p2p-test", &sys), ncclSuccess);
  memset(&ctx, 0, sizeof(ctx));
  ctx.nranks = NR;
  ctx.peers = peers;
  ctx.gpu_fifos = true;
  ctx.topo = sys;
  unsetenv("NCCL_P2P_LEVEL");
  unsetenv("NCCL_P2P_DISABLE");
  param_reload();
}

static void teardown(void) {
  topo_system_free(sys);
  sys = NULL;
}

static p2p_verdict_t policy(int a, int b) {
  ctx.rank = a;
  p2p_verdict_t v = transport_p2p_policy(&ctx, &peers[a], &peers[b]);
  ck_assert_int_eq(transport_p2p_policy(&ctx, &peers[b], &peers[a]), v); /* symmetric */
  return v;
}

START_TEST(test_policy_default_level) {
  ck_assert_int_eq(policy(R_NV0, R_NV1), P2P_OK);
  ck_assert_int_eq(policy(R_PIX0, R_PIX1), P2P_OK);
  ck_assert_int_eq(policy(R_PIX0, R_PXB), P2P_OK); /* PXB is the default limit */
  ck_assert_int_eq(policy(R_PIX0, R_PHB), P2P_NO_PATH);
  ck_assert_int_eq(policy(R_NV0, R_SYS), P2P_NO_PATH);
  ck_assert_int_eq(policy(R_NV0, R_SAME), P2P_OK); /* two ranks on one GPU: LOC */
  ck_assert_int_eq(policy(R_NV0, R_OTHER_HOST), P2P_NO_OTHER_HOST);
  ck_assert_int_eq(policy(R_NV0, R_NOGPU), P2P_NO_GPU);
}
END_TEST

START_TEST(test_policy_levels) {
  /* for each level, the set of pairs allowed grows exactly with the path order */
  const struct {
    int a, b;
    topo_path_t path;
  } pairs[] = {
      {R_NV0, R_SAME, TOPO_PATH_LOC},  {R_NV0, R_NV1, TOPO_PATH_NVL},
      {R_PIX0, R_PIX1, TOPO_PATH_PIX}, {R_PIX1, R_PXB, TOPO_PATH_PXB},
      {R_PXB, R_PHB, TOPO_PATH_PHB},   {R_PHB, R_SYS, TOPO_PATH_SYS},
      {R_NV1, R_PHB, TOPO_PATH_PHB},   {R_PIX0, R_SYS, TOPO_PATH_SYS},
  };
  const char* const levels[] = {"LOC", "NVL", "PIX", "PXB", "PHB", "SYS", "0", "1", "2", "3", "4"};
  for (size_t l = 0; l < sizeof(levels) / sizeof(levels[0]); l++) {
    topo_path_t level;
    ck_assert_int_eq(topo_path_parse(levels[l], &level), ncclSuccess);
    unit_set_param("NCCL_P2P_LEVEL", levels[l]);
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
      ck_assert_int_eq(topo_system_path(sys, peers[pairs[i].a].bus_id, peers[pairs[i].b].bus_id),
                       pairs[i].path);
      p2p_verdict_t want = pairs[i].path <= level ? P2P_OK : P2P_NO_PATH;
      ck_assert_msg(policy(pairs[i].a, pairs[i].b) == want, "level %s, pair %zu (%s)", levels[l], i,
                    topo_path_names[pairs[i].path]);
    }
  }
}
END_TEST

START_TEST(test_policy_switches) {
  unit_set_param("NCCL_P2P_DISABLE", "1");
  ck_assert_int_eq(policy(R_NV0, R_NV1), P2P_NO_DISABLED);
  unit_set_param("NCCL_P2P_DISABLE", "0");
  ck_assert_int_eq(policy(R_NV0, R_NV1), P2P_OK);
  ctx.gpu_fifos = false; /* the host executor cannot read GPU memory */
  ck_assert_int_eq(policy(R_NV0, R_NV1), P2P_NO_HOST_EXEC);
  ck_assert(!transport_p2p_ops.can_connect(&ctx, &peers[R_NV0], &peers[R_NV1]));
  ctx.gpu_fifos = true;
  /* without a topology every pair of distinct GPUs is "unknown" (SYS) */
  ctx.topo = NULL;
  ck_assert_int_eq(policy(R_NV0, R_NV1), P2P_NO_PATH);
  ck_assert_int_eq(policy(R_NV0, R_SAME), P2P_OK);
  unit_set_param("NCCL_P2P_LEVEL", "SYS");
  ck_assert_int_eq(policy(R_NV0, R_NV1), P2P_OK);
}
END_TEST

START_TEST(test_can_connect) {
  for (int a = 0; a < NR; a++) {
    for (int b = 0; b < NR; b++) {
      if (a == b) continue;
      ctx.rank = a;
      bool ok = transport_p2p_ops.can_connect(&ctx, &peers[a], &peers[b]);
      ctx.rank = b;
      ck_assert_int_eq(transport_p2p_ops.can_connect(&ctx, &peers[b], &peers[a]), ok);
      /* never beyond the policy */
      if (transport_p2p_policy(&ctx, &peers[a], &peers[b]) != P2P_OK)
        ck_assert_msg(!ok, "pair %d-%d accepted against the policy", a, b);
    }
  }
  /* one GPU shared by two ranks needs no peer access */
  ck_assert(transport_p2p_ops.can_connect(&ctx, &peers[R_NV0], &peers[R_SAME]));
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
  (void)cudaGetLastError();
  if (ndev == 0) {
    /* GPUs this process does not see: the topology decides (cuMem and IPC handles work for
     * devices hidden by CUDA_VISIBLE_DEVICES) */
    ck_assert(transport_p2p_ops.can_connect(&ctx, &peers[R_NV0], &peers[R_NV1]));
  }
  ck_assert_str_eq(transport_p2p_ops.name, "P2P");
  ck_assert_ptr_nonnull(transport_p2p_ops.recv_setup);
  ck_assert_ptr_nonnull(transport_p2p_ops.send_connect);
  ck_assert_ptr_nonnull(transport_p2p_ops.recv_connect);
  ck_assert_ptr_nonnull(transport_p2p_ops.free);
}
END_TEST

/* ---- CUDA driver loader and host registration --------------------------------------------------
 */
START_TEST(test_driver_loader) {
  cu_driver_t d;
  memset(&d, 0xab, sizeof(d));
  cu_driver_t before = d;
  ck_assert_int_eq(cu_driver_load("libbaton-no-such-library.so.1", &d), ncclSystemError);
  ck_assert_mem_eq(&d, &before, sizeof(d));
  /* libc loads but has no driver entry points */
  ck_assert_int_eq(cu_driver_load("libc.so.6", &d), ncclSystemError);
  ck_assert_mem_eq(&d, &before, sizeof(d));
  /* the process table agrees with a fresh load of the real library */
  cu_driver_t real;
  bool loads = cu_driver_load("libcuda.so.1", &real) == ncclSuccess;
  ck_assert_int_eq(cu_driver() != NULL, loads);
  if (loads) {
    ck_assert_int_gt(cu_driver()->version, 0);
    ck_assert_ptr_nonnull(cu_driver()->mem_create);
  } else {
    ck_assert(!cu_mem_fd_supported(0));
  }
  ck_assert(!cu_mem_fd_supported(-1));
  ck_assert_ptr_nonnull(cu_error_text(CUDA_ERROR_OUT_OF_MEMORY));
}
END_TEST

START_TEST(test_host_mem_registration) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess) ndev = 0;
  (void)cudaGetLastError();
  size_t bytes = 1 << 16;
  void* host = aligned_alloc(4096, bytes);
  ck_assert_ptr_nonnull(host);
  void* dev = (void*)0x1;
  ncclResult_t r = transport_host_mem_to_device(host, bytes, &dev);
  if (ndev == 0) {
    ck_assert_int_eq(r, ncclUnhandledCudaError);
    ck_assert_ptr_eq(dev, (void*)0x1); /* written only on success */
    ck_assert_ptr_nonnull(strstr(log_last_error(), "cudaHostRegister"));
  } else {
    ck_assert_int_eq(r, ncclSuccess);
    ck_assert_ptr_nonnull(dev);
    ck_assert_int_eq(transport_host_mem_unregister(host), ncclSuccess);
  }
  free(host);
}
END_TEST

static Suite* p2p_suite(void) {
  Suite* s = suite_create("p2p_select");
  TCase* pol = tcase_create("policy");
  tcase_add_checked_fixture(pol, setup, teardown);
  tcase_add_test(pol, test_policy_default_level);
  tcase_add_test(pol, test_policy_levels);
  tcase_add_test(pol, test_policy_switches);
  tcase_add_test(pol, test_can_connect);
  suite_add_tcase(s, pol);
  TCase* cuda = tcase_create("cuda");
  tcase_add_test(cuda, test_driver_loader);
  tcase_add_test(cuda, test_host_mem_registration);
  suite_add_tcase(s, cuda);
  return s;
}

int main(void) {
  return unit_run_suite(p2p_suite());
}
