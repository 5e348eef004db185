/* What a GPU communicator adds to the collectives layer (src/collectives/gpu.c), without a GPU:
 * the all-GPU-or-none check, channel clamping, each rank's proposal (channels, LL128, bandwidth,
 * latency) from a topology loaded from XML, the merge every rank makes of the proposals, and the
 * agreement through the bootstrap in forked processes: one topology per host (the lowest rank's,
 * whatever NCCL_TOPO_FILE the other ranks of the host have) and one set of parameters for the
 * communicator. Also communicators created inside a group (ncclGroupStart, ncclCommInitRank for
 * several ranks on one thread, ncclGroupEnd), as nccl-tests creates them. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <unistd.h>

#include "collectives/collectives.h"
#include "fork_ranks.h"
#include "unit.h"

#define RUN_TIMEOUT_MS 60000

/* Four Hopper GPUs on NVSwitches. */
static const char* const nvs4_xml =
    "<system version=\"1\">\n"
    "  <cpu numaid=\"0\">\n"
    "    <gpu busid=\"0000:19:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "    <gpu busid=\"0000:3b:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "    <gpu busid=\"0000:4c:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "    <gpu busid=\"0000:5d:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "  </cpu>\n"
    "</system>\n";
static const int64_t nvs4_bus[4] = {0x19000, 0x3b000, 0x4c000, 0x5d000};

/* Two GPUs below one PCIe switch, no NVLink. */
static const char* const pix2_xml =
    "<system version=\"1\">\n"
    "  <cpu numaid=\"0\">\n"
    "    <pci busid=\"0000:15:00.0\">\n"
    "      <pci busid=\"0000:16:00.0\"><gpu busid=\"0000:18:00.0\" sm=\"90\"/></pci>\n"
    "      <pci busid=\"0000:17:00.0\"><gpu busid=\"0000:2a:00.0\" sm=\"90\"/></pci>\n"
    "    </pci>\n"
    "  </cpu>\n"
    "</system>\n";

static char sandbox[64];

static void setup(void) {
  snprintf(sandbox, sizeof(sandbox), "/tmp/test_coll_gpu_XXXXXX");
  unit_sandbox_enter(sandbox);
}

static void teardown(void) {
  unit_sandbox_leave(sandbox);
}

static topo_system_t* parse(const char* xml) {
  topo_system_t* sys = NULL;
  ck_assert_int_eq(topo_xml_parse(xml, "test", &sys), ncclSuccess);
  return sys;
}

/* Ranks on hosts host[r] (a small number) and GPUs bus[r] (-1: none), dev r. */
static void make_peers(peer_info_t* peers, int n, const int* host, const int64_t* bus) {
  for (int r = 0; r < n; r++)
    peers[r] = (peer_info_t){.rank = r,
                             .cuda_dev = bus[r] >= 0 ? r : -1,
                             .bus_id = bus[r],
                             .host_hash = 0x1000u + (uint64_t)host[r],
                             .pid_hash = 0x2000u + (uint64_t)r,
                             .shm_dev = 7,
                             .pid = 1000 + r};
}

/* ---- Pure functions -------------------------------------------------------------------------- */
START_TEST(test_check_peers) {
  peer_info_t peers[3];
  const int host[3] = {0, 0, 0};
  const int64_t none[3] = {-1, -1, -1}, all[3] = {0x19000, 0x3b000, 0x4c000};
  const int64_t mixed[3] = {0x19000, -1, 0x4c000};
  bool gpu = true;
  make_peers(peers, 3, host, none);
  ck_assert_int_eq(res_gpu_check_peers(peers, 3, &gpu), ncclSuccess);
  ck_assert(!gpu);
  make_peers(peers, 3, host, all);
  ck_assert_int_eq(res_gpu_check_peers(peers, 3, &gpu), ncclSuccess);
  ck_assert(gpu);
  make_peers(peers, 3, host, mixed);
  gpu = false;
  ck_assert_int_eq(res_gpu_check_peers(peers, 3, &gpu), ncclInvalidUsage);
  ck_assert(!gpu); /* untouched on failure */
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "rank 1 has no CUDA device"));
}
END_TEST

START_TEST(test_nchannels_clamp) {
  ck_assert_int_eq(res_nchannels_clamp(24), 24);
  ck_assert_int_eq(res_nchannels_clamp(0), 1);
  ck_assert_int_eq(res_nchannels_clamp(1000), 64); /* NCCL_MAX_NCHANNELS default */
  unit_set_param("NCCL_MAX_NCHANNELS", "8");
  ck_assert_int_eq(res_nchannels_clamp(24), 8);
  unit_set_param("NCCL_MAX_NCHANNELS", "500");
  ck_assert_int_eq(res_nchannels_clamp(1000), PLAN_MAX_CHANNELS);
  unit_set_param("NCCL_MIN_NCHANNELS", "6");
  ck_assert_int_eq(res_nchannels_clamp(2), 6);
}
END_TEST

START_TEST(test_params_nvswitch) {
  topo_system_t* sys = parse(nvs4_xml);
  peer_info_t peers[4];
  const int host[4] = {0, 0, 0, 0};
  make_peers(peers, 4, host, nvs4_bus);
  res_gpu_params_t p;
  res_gpu_params_local(sys, peers, 4, 2, 1, &p);
  ck_assert_int_eq(p.nchannels, topo_system_nchannels(sys));
  ck_assert_int_eq(p.nchannels, 62); /* 18 links x 20.6 GB/s at 6 GB/s per channel */
  ck_assert_int_eq(p.ll128, 1);
  ck_assert_int_eq(p.direct_links, 0); /* NVSwitch: rings one way */
  ck_assert(fabs(p.pair_bw_gbs - 18 * 20.6) < 1e-6);
  ck_assert(p.intra_lat_us > 0 && p.intra_lat_us < 1.0);
  ck_assert_int_eq(p.ring_writes, 0); /* a process a rank: no direct pointers */
  /* Ranks of one process write into each other's outputs, unless NCCL_P2P_DIRECT_DISABLE=1 */
  for (int r = 0; r < 4; r++) peers[r].pid_hash = 0x2000u;
  res_gpu_params_local(sys, peers, 4, 2, 1, &p);
  ck_assert_int_eq(p.ring_writes, 1);
  unit_set_param("NCCL_P2P_DIRECT_DISABLE", "1");
  res_gpu_params_local(sys, peers, 4, 2, 1, &p);
  ck_assert_int_eq(p.ring_writes, 0);
  unit_set_param("NCCL_P2P_DIRECT_DISABLE", NULL);
  peers[0].pid_hash = 0x2001u; /* a pair this rank is not in counts too */
  res_gpu_params_local(sys, peers, 4, 2, 1, &p);
  ck_assert_int_eq(p.ring_writes, 0);
  peers[0].pid_hash = 0x2000u;
  /* P2P off or two hosts: LL128 would cross host memory */
  unit_set_param("NCCL_P2P_DISABLE", "1");
  res_gpu_params_local(sys, peers, 4, 2, 1, &p);
  ck_assert_int_eq(p.ll128, 0);
  ck_assert_int_eq(p.ring_writes, 0);
  unit_set_param("NCCL_P2P_DISABLE", NULL);
  unit_set_param("NCCL_P2P_LEVEL", "LOC");
  res_gpu_params_local(sys, peers, 4, 2, 1, &p);
  ck_assert_int_eq(p.ll128, 0);
  unit_set_param("NCCL_P2P_LEVEL", NULL);
  const int two_hosts[4] = {0, 0, 1, 1};
  make_peers(peers, 4, two_hosts, nvs4_bus);
  for (int r = 0; r < 4; r++) peers[r].pid_hash = 0x2000u;
  res_gpu_params_local(sys, peers, 4, 0, 2, &p);
  ck_assert_int_eq(p.ll128, 0);
  ck_assert_int_eq(p.ring_writes, 0);
  ck_assert_int_eq(p.nchannels, 62);
  topo_system_free(sys);
}
END_TEST

START_TEST(test_params_pcie_and_alone) {
  topo_system_t* sys = parse(pix2_xml);
  peer_info_t peers[2];
  const int host[2] = {0, 0};
  const int64_t bus[2] = {0x18000, 0x2a000};
  make_peers(peers, 2, host, bus);
  res_gpu_params_t p;
  res_gpu_params_local(sys, peers, 2, 0, 1, &p);
  ck_assert_int_eq(topo_system_path(sys, bus[0], bus[1]), TOPO_PATH_PIX);
  ck_assert_int_eq(p.ll128, 0);
  ck_assert_int_eq(p.nchannels, topo_system_nchannels(sys));
  ck_assert(p.intra_lat_us > 1.0);
  ck_assert(p.pair_bw_gbs > 0 && p.pair_bw_gbs < 100);
  topo_system_free(sys);
  /* One rank on its host, no topology: the GPU default, no pair, no LL128. */
  const int64_t one[1] = {0x18000};
  make_peers(peers, 1, host, one);
  res_gpu_params_local(NULL, peers, 1, 0, 1, &p);
  ck_assert_int_eq(p.nchannels, RES_GPU_DEFAULT_NCHANNELS);
  ck_assert_int_eq(p.ll128, 0);
  ck_assert(p.pair_bw_gbs == 0);
}
END_TEST

/* NCCL_MULTI_RANK_GPU_ENABLE: ranks sharing a GPU (same host and bus id) and the channel cap that
 * keeps all their blocks resident together. */
START_TEST(test_shared_gpu) {
  topo_system_t* sys = parse(nvs4_xml);
  peer_info_t peers[4];
  const int host[4] = {0, 0, 0, 1};
  const int64_t bus[4] = {nvs4_bus[0], nvs4_bus[0], nvs4_bus[1], nvs4_bus[0]};
  make_peers(peers, 4, host, bus);
  ck_assert_int_eq(res_ranks_on_gpu(peers, 4, 0), 2); /* rank 3: same bus id, other host */
  ck_assert_int_eq(res_ranks_on_gpu(peers, 4, 1), 2);
  ck_assert_int_eq(res_ranks_on_gpu(peers, 4, 2), 1);
  ck_assert_int_eq(res_ranks_on_gpu(peers, 4, 3), 1);
  /* the pair on one GPU is a local path: P2P may join it */
  ck_assert_int_eq(topo_system_path(sys, bus[0], bus[1]), TOPO_PATH_LOC);
  transport_ctx_t ctx = {.rank = 0, .nranks = 4, .peers = peers, .gpu_fifos = true, .topo = sys};
  ck_assert_int_eq(transport_p2p_policy(&ctx, &peers[0], &peers[1]), P2P_OK);
  /* alone: untouched; 4 ranks on 132 SMs: 33 each; never below 1 */
  ck_assert_int_eq(res_shared_gpu_channels(62, 1, 132), 62);
  ck_assert_int_eq(res_shared_gpu_channels(62, 4, 132), 33);
  ck_assert_int_eq(res_shared_gpu_channels(4, 4, 132), 4);
  ck_assert_int_eq(res_shared_gpu_channels(8, 16, 4), 1);
  ck_assert_int_eq(res_shared_gpu_channels(8, 2, 0), 8); /* SM count unknown */
  topo_system_free(sys);
}
END_TEST

/* With rings over every NIC: whole periods only (every NIC the same share), the nearer multiple
 * (up on a tie), never above the cap (NCCL_MAX_NCHANNELS, maxCTAs, a shared GPU), below the floor
 * (NCCL_MIN_NCHANNELS, minCTAs) nor to zero periods. */
START_TEST(test_rail_nchannels) {
  ck_assert_int_eq(res_rail_nchannels(62, 16, 1, 64), 64); /* 64 is 2 away, 48 is 14 */
  ck_assert_int_eq(res_rail_nchannels(62, 16, 1, 62), 48); /* 64 is above the cap */
  ck_assert_int_eq(res_rail_nchannels(50, 16, 1, 64), 48); /* 48 is nearer than 64 */
  ck_assert_int_eq(res_rail_nchannels(56, 16, 1, 64), 64); /* a tie: up */
  ck_assert_int_eq(res_rail_nchannels(56, 16, 1, 60), 48);
  ck_assert_int_eq(res_rail_nchannels(62, 4, 1, 64), 64);
  ck_assert_int_eq(res_rail_nchannels(61, 4, 1, 64), 60);
  ck_assert_int_eq(res_rail_nchannels(64, 8, 1, 64), 64);
  ck_assert_int_eq(res_rail_nchannels(62, 16, 60, 62), 62); /* 48 below the floor, 64 above */
  ck_assert_int_eq(res_rail_nchannels(6, 8, 1, 6), 6);      /* less than one period, no room */
  ck_assert_int_eq(res_rail_nchannels(6, 8, 1, 64), 8);
  ck_assert_int_eq(res_rail_nchannels(62, 1, 1, 64), 62); /* one layout: anything goes */
}
END_TEST

START_TEST(test_params_merge) {
  res_gpu_params_t all[3] = {
      {.nchannels = 24, .ll128 = 1, .ring_writes = 1, .pair_bw_gbs = 370.8, .intra_lat_us = 0.8},
      {.nchannels = 16, .ll128 = 1, .ring_writes = 1, .pair_bw_gbs = 0, .intra_lat_us = 2.0},
      {.nchannels = 20, .ll128 = 1, .ring_writes = 1, .pair_bw_gbs = 82.4, .intra_lat_us = 0.8}};
  res_gpu_params_t m;
  res_gpu_params_merge(all, 3, &m);
  ck_assert_int_eq(m.nchannels, 16);
  ck_assert_int_eq(m.ll128, 1);
  ck_assert_int_eq(m.ring_writes, 1);
  ck_assert_int_eq(m.direct_links, 0);
  ck_assert(fabs(m.pair_bw_gbs - 82.4) < 1e-9); /* 0 (no pair) is not "slowest" */
  ck_assert(fabs(m.intra_lat_us - 2.0) < 1e-9);
  all[2].ll128 = 0;
  all[1].direct_links = 1; /* one host with direct links: both ways for all */
  all[0].ring_writes = 0;
  res_gpu_params_merge(all, 3, &m);
  ck_assert_int_eq(m.ll128, 0);
  ck_assert_int_eq(m.ring_writes, 0);
  ck_assert_int_eq(m.direct_links, 1);
  unit_set_param("NCCL_MAX_NCHANNELS", "4");
  res_gpu_params_merge(all, 3, &m);
  ck_assert_int_eq(m.nchannels, 4);
  res_gpu_params_merge(all, 1, &m);
  ck_assert_int_eq(m.nchannels, 4);
  ck_assert(fabs(m.pair_bw_gbs - 370.8) < 1e-9);
}
END_TEST

/* ---- Agreement through the bootstrap (forked ranks) ----------------------------------------- */
/* Ranks 0, 1 on host A (rank 0 reads a_xml), ranks 2, 3 on host B (rank 2 reads b_xml); ranks 1
 * and 3 read other_xml, which would give them PCIe paths if they used it. */
static const char* const a_xml =
    "<system version=\"1\"><cpu numaid=\"0\">\n"
    "  <gpu busid=\"0000:18:00.0\" sm=\"90\"><nvlink target=\"0000:2a:00.0\" count=\"4\"/></gpu>\n"
    "  <gpu busid=\"0000:2a:00.0\" sm=\"90\"><nvlink target=\"0000:18:00.0\" count=\"4\"/></gpu>\n"
    "</cpu></system>\n";
static const char* const b_xml =
    "<system version=\"1\"><cpu numaid=\"1\">\n"
    "  <gpu busid=\"0000:3b:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "  <gpu busid=\"0000:4c:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "</cpu></system>\n";
static const char* const other_xml =
    "<system version=\"1\"><cpu numaid=\"0\"><pci busid=\"0000:10:00.0\">\n"
    "  <gpu busid=\"0000:18:00.0\" sm=\"80\"/><gpu busid=\"0000:2a:00.0\" sm=\"80\"/>\n"
    "  <gpu busid=\"0000:3b:00.0\" sm=\"80\"/><gpu busid=\"0000:4c:00.0\" sm=\"80\"/>\n"
    "</pci></cpu></system>\n";

typedef struct agree_case {
  bootstrap_handle_t handle;
  char files[3][128]; /* a, b, other */
} agree_case_t;

static int agree_rank(int rank, int n, void* arg) {
  agree_case_t* ac = arg;
  const int host[4] = {0, 0, 1, 1};
  const int64_t bus[4] = {0x18000, 0x2a000, 0x3b000, 0x4c000};
  const char* file = rank == 0 ? ac->files[0] : rank == 2 ? ac->files[1] : ac->files[2];
  char max[8];
  snprintf(max, sizeof(max), "%d", 8 + 4 * rank); /* each rank allows a different maximum */
  setenv("NCCL_TOPO_FILE", file, 1);
  setenv("NCCL_MAX_NCHANNELS", max, 1);
  param_reload();
  peer_info_t peers[4];
  make_peers(peers, n, host, bus);
  bootstrap_t* b = NULL;
  CHILD_CHECK(bootstrap_init(&ac->handle, 1, rank, n, NULL, &b) == ncclSuccess);
  topo_system_t* sys = NULL;
  CHILD_CHECK(res_topo_agree(NULL, b, peers, n, rank, &sys) == ncclSuccess);
  CHILD_CHECK(sys->ngpus == 2);
  topo_path_t path = topo_system_path(sys, bus[host[rank] * 2], bus[host[rank] * 2 + 1]);
  CHILD_CHECK(path == TOPO_PATH_NVL); /* the leader's view, not other_xml's PCIe */
  int i = topo_system_gpu(sys, bus[host[rank] * 2]),
      j = topo_system_gpu(sys, bus[host[rank] * 2 + 1]);
  CHILD_CHECK(i >= 0 && j >= 0);
  if (host[rank] == 0) CHILD_CHECK(sys->nvlinks[i * sys->ngpus + j] == 4);
  if (host[rank] == 1) CHILD_CHECK(sys->gpus[i].nvswitch_links == 18 && sys->gpus[i].sm == 90);
  /* The ranks of a host hold the same text; the two hosts differ. */
  char* text = NULL;
  CHILD_CHECK(topo_xml_format(sys, &text) == ncclSuccess);
  uint64_t hashes[4] = {0};
  hashes[rank] = hash_bytes(text, strlen(text));
  free(text);
  CHILD_CHECK(bootstrap_allgather(b, hashes, sizeof(hashes[0])) == ncclSuccess);
  CHILD_CHECK(hashes[0] == hashes[1] && hashes[2] == hashes[3] && hashes[0] != hashes[2]);
  /* Parameters: host A's topology allows 14 channels (4 x 20.6 GB/s), host B's 62; each rank
   * cuts that to its own maximum (8, 12, 16, 20); all agree on the smallest. */
  res_gpu_params_t mine, agreed;
  res_gpu_params_local(sys, peers, n, rank, 2, &mine);
  const int allowed = host[rank] == 0 ? 14 : 62;
  CHILD_CHECK(mine.nchannels == (allowed < 8 + 4 * rank ? allowed : 8 + 4 * rank));
  CHILD_CHECK(mine.direct_links == (host[rank] == 0)); /* host A's pair: 4 links of its own */
  CHILD_CHECK(res_gpu_params_agree(b, n, rank, &mine, &agreed) == ncclSuccess);
  CHILD_CHECK(agreed.nchannels == 8);
  CHILD_CHECK(agreed.ll128 == 0);        /* two hosts */
  CHILD_CHECK(agreed.direct_links == 1); /* host A's links: every rank runs rings both ways */
  CHILD_CHECK(fabs(agreed.pair_bw_gbs - 4 * 20.6) < 1e-6);
  topo_system_free(sys);
  CHILD_CHECK(bootstrap_close(b) == ncclSuccess);
  return 0;
}

START_TEST(test_agree_forked) {
  agree_case_t ac;
  const char* texts[3] = {a_xml, b_xml, other_xml};
  for (int k = 0; k < 3; k++) {
    snprintf(ac.files[k], sizeof(ac.files[k]), "%s/topo%d.xml", sandbox, k);
    unit_write_file(ac.files[k], texts[k]);
  }
  ck_assert_int_eq(bootstrap_get_unique_id(&ac.handle), ncclSuccess);
  ck_assert_int_eq(fork_ranks_run(4, agree_rank, &ac, RUN_TIMEOUT_MS), 0);
}
END_TEST

/* A leader that cannot load its topology: every rank of its host fails, nobody hangs. */
static int fail_rank(int rank, int n, void* arg) {
  agree_case_t* ac = arg;
  const int host[3] = {0, 0, 0};
  const int64_t bus[3] = {0x18000, 0x2a000, 0x3b000};
  setenv("NCCL_TOPO_FILE", rank == 0 ? ac->files[0] : ac->files[1], 1);
  param_reload();
  peer_info_t peers[3];
  make_peers(peers, n, host, bus);
  bootstrap_t* b = NULL;
  CHILD_CHECK(bootstrap_init(&ac->handle, 1, rank, n, NULL, &b) == ncclSuccess);
  topo_system_t* sys = NULL;
  ncclResult_t res = res_topo_agree(NULL, b, peers, n, rank, &sys);
  CHILD_CHECK(res == (rank == 0 ? ncclInvalidUsage : ncclRemoteError));
  CHILD_CHECK(sys == NULL);
  CHILD_CHECK(bootstrap_close(b) == ncclSuccess);
  return 0;
}

START_TEST(test_agree_leader_fails) {
  agree_case_t ac;
  snprintf(ac.files[0], sizeof(ac.files[0]), "%s/bad.xml", sandbox);
  snprintf(ac.files[1], sizeof(ac.files[1]), "%s/good.xml", sandbox);
  unit_write_file(ac.files[0], "<system><gpu busid=\"nonsense\"/></system>\n");
  unit_write_file(ac.files[1], other_xml);
  ck_assert_int_eq(bootstrap_get_unique_id(&ac.handle), ncclSuccess);
  ck_assert_int_eq(fork_ranks_run(3, fail_rank, &ac, RUN_TIMEOUT_MS), 0);
}
END_TEST

/* ---- Communicators created inside a group --------------------------------------------------- */
#define GROUP_RANKS 3

static void group_allreduce_check(ncclComm_t* comms, int n) {
  float buf[GROUP_RANKS][64];
  for (int r = 0; r < n; r++)
    for (int i = 0; i < 64; i++) buf[r][i] = (float)(r + 1) * (float)i;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < n; r++)
    ck_assert_int_eq(ncclAllReduce(buf[r], buf[r], 64, ncclFloat, ncclSum, comms[r], NULL),
                     ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  float ranks_sum = (float)(n * (n + 1) / 2);
  for (int r = 0; r < n; r++)
    for (int i = 0; i < 64; i++) ck_assert(buf[r][i] == ranks_sum * (float)i);
}

START_TEST(test_init_in_group) {
  ncclUniqueId id;
  ncclComm_t comms[GROUP_RANKS];
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < GROUP_RANKS; r++) /* would deadlock if each init waited for the others */
    ck_assert_int_eq(ncclCommInitRank(&comms[r], GROUP_RANKS, id, r), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < GROUP_RANKS; r++) {
    int rank = -1, count = 0;
    ncclResult_t async = ncclInProgress;
    ck_assert_int_eq(ncclCommGetAsyncError(comms[r], &async), ncclSuccess);
    ck_assert_int_eq(async, ncclSuccess);
    ck_assert_int_eq(ncclCommUserRank(comms[r], &rank), ncclSuccess);
    ck_assert_int_eq(ncclCommCount(comms[r], &count), ncclSuccess);
    ck_assert_int_eq(rank, r);
    ck_assert_int_eq(count, GROUP_RANKS);
  }
  group_allreduce_check(comms, GROUP_RANKS);
  for (int r = 0; r < GROUP_RANKS; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
}
END_TEST

START_TEST(test_init_in_group_nonblocking) {
  ncclUniqueId id;
  ncclComm_t comms[2];
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; r++) {
    ncclResult_t res = ncclCommInitRankConfig(&comms[r], 2, id, r, &cfg);
    ck_assert(res == ncclSuccess || res == ncclInProgress);
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclInProgress);
  for (int r = 0; r < 2; r++) {
    ncclResult_t async = ncclInProgress;
    for (int t = 0; t < 6000 && async == ncclInProgress; t++) {
      ck_assert_int_eq(ncclCommGetAsyncError(comms[r], &async), ncclSuccess);
      if (async == ncclInProgress) fork_ranks_sleep_ms(5);
    }
    ck_assert_int_eq(async, ncclSuccess);
  }
  for (int r = 0; r < 2; r++) ck_assert_int_eq(ncclCommDestroy(comms[r]), ncclSuccess);
}
END_TEST

/* One rank of the group cannot be created (an invalid rank): the group fails, the valid init
 * that would wait for the missing rank is aborted instead of hanging. */
START_TEST(test_init_in_group_failure) {
  ncclUniqueId id;
  ncclComm_t comms[2] = {NULL, NULL};
  unit_set_param("NCCL_BOOTSTRAP_TIMEOUT_MS", "5000"); /* a regression fails, not hangs */
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comms[0], 2, id, 0), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comms[1], 2, id, 5), ncclInvalidArgument);
  ncclResult_t res = ncclGroupEnd();
  ck_assert(res != ncclSuccess && res != ncclInProgress);
  ck_assert_int_eq(ncclCommAbort(comms[0]), ncclSuccess);
}
END_TEST

/* ---- ncclMemAlloc / ncclMemFree (host memory here: no GPU) -------------------------------- */
START_TEST(test_mem_registry) {
  void* a = NULL;
  void* b = NULL;
  ck_assert_int_eq(ncclMemAlloc(&a, 100), ncclSuccess);
  ck_assert_int_eq(ncclMemAlloc(&b, 5000), ncclSuccess);
  ck_assert_ptr_nonnull(a);
  ck_assert(((uintptr_t)a % 4096) == 0 && ((uintptr_t)b % 4096) == 0);
  ck_assert_int_eq(((unsigned char*)b)[4999], 0); /* zeroed */
  memset(b, 0x5a, 5000);
  int local = 0;
  ck_assert_int_eq(ncclMemFree(&local), ncclInvalidArgument); /* not ncclMemAlloc's */
  ck_assert_int_eq(ncclMemFree((char*)a + 1), ncclInvalidArgument);
  ck_assert_int_eq(ncclMemFree(a), ncclSuccess);
  ck_assert_int_eq(ncclMemFree(a), ncclInvalidArgument); /* twice */
  ck_assert_int_eq(ncclMemFree(NULL), ncclSuccess);
  ck_assert_int_eq(ncclMemFree(b), ncclSuccess);
  a = &local; /* 0 bytes: success and NULL, as stock's cudaMalloc(ptr, 0); freeing it is a no-op */
  ck_assert_int_eq(ncclMemAlloc(&a, 0), ncclSuccess);
  ck_assert_ptr_null(a);
  ck_assert_int_eq(ncclMemFree(a), ncclSuccess);
  ck_assert_int_eq(ncclMemAlloc(NULL, 8), ncclInvalidArgument);
  /* Sizes no object can have (rounded up to pages they used to wrap to a page or to nothing, and
   * succeed) are refused, naming the size, and the output is left alone. */
  const size_t huge[] = {SIZE_MAX, SIZE_MAX - 100, (size_t)PTRDIFF_MAX + 1};
  for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
    a = &local;
    log_clear_last_error();
    ck_assert_int_eq(ncclMemAlloc(&a, huge[i]), ncclInvalidArgument);
    ck_assert_ptr_eq(a, &local);
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(NULL), "ncclMemAlloc: invalid size"));
  }
}
END_TEST

static Suite* gpu_suite(void) {
  Suite* s = suite_create("coll_gpu");
  TCase* tc = tcase_create("pure");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_check_peers);
  tcase_add_test(tc, test_nchannels_clamp);
  tcase_add_test(tc, test_params_nvswitch);
  tcase_add_test(tc, test_params_pcie_and_alone);
  tcase_add_test(tc, test_params_merge);
  tcase_add_test(tc, test_shared_gpu);
  tcase_add_test(tc, test_rail_nchannels);
  tcase_add_test(tc, test_mem_registry);
  suite_add_tcase(s, tc);
  tc = tcase_create("agree");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, test_agree_forked);
  tcase_add_test(tc, test_agree_leader_fails);
  suite_add_tcase(s, tc);
  tc = tcase_create("group_init");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 90);
  tcase_add_test(tc, test_init_in_group);
  tcase_add_test(tc, test_init_in_group_nonblocking);
  tcase_add_test(tc, test_init_in_group_failure);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(gpu_suite());
}
