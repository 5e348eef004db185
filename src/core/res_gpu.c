/* What a communicator of GPU ranks adds to its resources: one topology per host, the channel
 * count and tuning inputs every rank agrees on, and the device each thread must have current.
 *
 * Agreement matters more than accuracy here: two ranks that disagree on a path type choose
 * different transports for one connection, and two ranks that disagree on the channel count or a
 * tuning input choose different plans; either hangs or corrupts. So the lowest rank of each host
 * detects the host's topology and every rank of that host (itself included) parses the same XML
 * text, and the per-rank proposals (channels, LL128, bandwidth, latency) are allgathered and
 * merged the same way on every rank. */
#include <math.h>
#include <stdlib.h>
#include <strings.h>

#include "core/core.h"

/* Bootstrap tag of the topology broadcast (apart from transport and core tags). */
#define RES_TAG_TOPO 0x544f5030 /* "TOP0" */

/* Tuning inputs of GPU connections. Per-hop latencies: NVLink P2P, anything else on one host
 * (PCIe P2P, SHM through host memory), between hosts (the network). */
#define RES_GPU_NVL_LAT_US 0.8
#define RES_GPU_PCI_LAT_US 2.0
#define RES_GPU_INTER_LAT_US 20.0
#define RES_GPU_INTER_BW_GBS 3.0     /* per channel */
#define RES_GPU_CHANNEL_MAX_GBS 24.0 /* what one block moves at best */
#define RES_GPU_DEFAULT_BW_GBS 20.0  /* one GPU per host: no pair to measure */

/* ---- Pure functions -------------------------------------------------------------------------- */
ncclResult_t res_gpu_check_peers(const peer_info_t* peers, int nranks, bool* gpu) {
  int with = -1, without = -1;
  for (int r = 0; r < nranks; r++) {
    if (peers[r].cuda_dev >= 0 && with < 0) with = r;
    if (peers[r].cuda_dev < 0 && without < 0) without = r;
  }
  if (with >= 0 && without >= 0) {
    WARN(
        "Rank %d runs on CUDA device %d but rank %d has no CUDA device: every rank of a "
        "communicator must have a GPU (CUDA executor) or none may (host executor); make a CUDA "
        "device current (cudaSetDevice) on every rank before creating the communicator",
        with, peers[with].cuda_dev, without);
    return ncclInvalidUsage;
  }
  *gpu = with >= 0;
  return ncclSuccess;
}

int res_nchannels_clamp(int want) {
  int64_t lo = param_int(PARAM_MIN_NCHANNELS), hi = param_int(PARAM_MAX_NCHANNELS);
  int64_t n = want;
  if (hi < 1) hi = 1;
  if (hi > PLAN_MAX_CHANNELS) hi = PLAN_MAX_CHANNELS;
  if (n < lo) n = lo;
  if (n > hi) n = hi;
  if (n < 1) n = 1;
  return (int)n;
}

int res_ctas_clamp(int n, const ncclConfig_t* cfg) {
  int lo = cfg->minCTAs > 1 ? cfg->minCTAs : 1;
  int hi = cfg->maxCTAs < PLAN_MAX_CHANNELS ? cfg->maxCTAs : PLAN_MAX_CHANNELS;
  if (hi < 1) hi = 1;
  if (lo > hi) lo = hi;
  return n < lo ? lo : n > hi ? hi : n;
}

int res_ranks_on_gpu(const peer_info_t* peers, int nranks, int rank) {
  int n = 0;
  for (int r = 0; r < nranks; r++)
    n += peers[r].host_hash == peers[rank].host_hash && peers[r].bus_id == peers[rank].bus_id;
  return n;
}

int res_shared_gpu_channels(int nchannels, int ranks_on_gpu, int nsm) {
  if (ranks_on_gpu <= 1 || nsm <= 0) return nchannels;
  int fit = nsm / ranks_on_gpu;
  if (fit < 1) fit = 1;
  return nchannels < fit ? nchannels : fit;
}

/* Index in topo of the GPU of rank r, -1 when r is elsewhere or unknown. */
static int gpu_index(const topo_system_t* topo, const peer_info_t* peers, int r) {
  return peers[r].bus_id >= 0 ? topo_system_gpu(topo, peers[r].bus_id) : -1;
}

void res_gpu_params_local(const topo_system_t* topo, const peer_info_t* peers, int nranks, int rank,
                          int nhosts, res_gpu_params_t* out) {
  res_gpu_params_t p = {0};
  int want = topo_system_nchannels(topo);
  p.nchannels = res_nchannels_clamp(want > 0 ? want : RES_GPU_DEFAULT_NCHANNELS);
  /* Every pair of ranks of this host: its path and bandwidth, and whether P2P joins it. */
  transport_ctx_t pol = {.rank = rank,
                         .nranks = nranks,
                         .peers = peers,
                         .gpu_fifos = true,
                         .virtual_conns = peers[rank].simulated,
                         .topo = topo};
  bool all_nvl = true, all_p2p = true, any_pair = false, all_writes = true;
  double slowest = INFINITY;
  for (int a = 0; a < nranks; a++) {
    if (peers[a].host_hash != peers[rank].host_hash) continue;
    for (int b = a + 1; b < nranks; b++) {
      if (peers[b].host_hash != peers[rank].host_hash) continue;
      any_pair = true;
      int i = gpu_index(topo, peers, a), j = gpu_index(topo, peers, b);
      topo_path_t path = topo_system_path(topo, peers[a].bus_id, peers[b].bus_id);
      if (transport_p2p_policy(&pol, &peers[a], &peers[b]) != P2P_OK) all_p2p = false;
      if (path != TOPO_PATH_NVL || !all_p2p) all_nvl = false;
      if (!transport_p2p_direct_writes(&peers[a], &peers[b])) all_writes = false;
      /* This rank's own pairs also as the transport will choose them (CUDA peer access); the
       * merge covers every other rank's pairs. */
      if (all_p2p && (a == rank || b == rank) &&
          !transport_p2p_ops.can_connect(&pol, &peers[rank], &peers[a == rank ? b : a]))
        all_p2p = all_nvl = false;
      if (i >= 0 && j >= 0 && topo->nvlinks[(size_t)i * topo->ngpus + j] > 0) p.direct_links = 1;
      double bw = i >= 0 && j >= 0 ? topo->bw[(size_t)i * topo->ngpus + j] : 0;
      if (bw < slowest) slowest = bw;
    }
  }
  p.pair_bw_gbs = any_pair ? slowest : 0;
  p.intra_lat_us = any_pair && all_nvl ? RES_GPU_NVL_LAT_US : RES_GPU_PCI_LAT_US;
  /* LL128 relies on a 128-byte line arriving whole: GPU memory written over NVLink. Host memory
   * (SHM, NET) does not promise it. */
  p.ll128 = nhosts == 1 && nranks > 1 && any_pair && all_nvl;
  /* The direct algorithms write every peer's FIFO straight away: P2P between every pair. */
  p.direct = nhosts == 1 && nranks > 1 && nranks <= DIRECT_MAX_RANKS && any_pair && all_p2p;
  p.ring_writes = nhosts == 1 && nranks > 1 && any_pair && all_p2p && all_writes;
  *out = p;
}

void res_gpu_params_merge(const res_gpu_params_t* all, int n, res_gpu_params_t* out) {
  res_gpu_params_t m = all[0];
  for (int r = 1; r < n; r++) {
    const res_gpu_params_t* p = &all[r];
    if (p->nchannels < m.nchannels) m.nchannels = p->nchannels;
    m.ll128 = m.ll128 && p->ll128;
    m.direct = m.direct && p->direct;
    m.ring_writes = m.ring_writes && p->ring_writes;
    m.direct_links = m.direct_links || p->direct_links;
    /* 0 (no pair on that host) does not count as slow */
    if (p->pair_bw_gbs > 0 && (m.pair_bw_gbs <= 0 || p->pair_bw_gbs < m.pair_bw_gbs))
      m.pair_bw_gbs = p->pair_bw_gbs;
    if (p->intra_lat_us > m.intra_lat_us) m.intra_lat_us = p->intra_lat_us;
  }
  m.nchannels = res_nchannels_clamp(m.nchannels);
  *out = m;
}

int res_rail_nchannels(int nchannels, int period, int floor, int cap) {
  if (period < 2 || nchannels % period == 0) return nchannels;
  const int down = nchannels - nchannels % period, up = down + period;
  const bool up_ok = up <= cap, down_ok = down >= period && down >= floor;
  if (up_ok && (!down_ok || up - nchannels <= nchannels - down)) return up;
  return down_ok ? down : nchannels;
}

/* ---- Agreement through the bootstrap --------------------------------------------------------- */
/* This host's topology: detected, or as a virtual platform describes it. */
static ncclResult_t topo_detect(const platform_t* platform, const peer_info_t* peers, int nranks,
                                int rank, topo_system_t** out) {
  if (platform == NULL) return topo_system_detect(peers, nranks, rank, out);
  char name[96];
  snprintf(name, sizeof(name), "%s's host of rank %d", platform->name, rank);
  return topo_system_from_xml(peers, nranks, rank, platform->host_xml(platform->ctx, rank), name,
                              out);
}

ncclResult_t res_topo_agree(const platform_t* platform, bootstrap_t* b, const peer_info_t* peers,
                            int nranks, int rank, topo_system_t** out) {
  ncclResult_t res = ncclSuccess;
  int* host = NULL;
  char* text = NULL;
  int n = 0, me = -1;
  CHECK(MEM_CALLOC(&host, (size_t)nranks));
  for (int r = 0; r < nranks; r++) {
    if (peers[r].host_hash != peers[rank].host_hash) continue;
    if (r == rank) me = n;
    host[n++] = r;
  }
  if (n == 1) { /* alone on this host: nobody to agree with */
    res = topo_detect(platform, peers, nranks, rank, out);
    goto done;
  }
  uint64_t len = 0;
  ncclResult_t detect = ncclSuccess;
  if (me == 0) {
    topo_system_t* sys = NULL;
    detect = topo_detect(platform, peers, nranks, rank, &sys);
    if (detect == ncclSuccess) detect = topo_xml_format(sys, &text);
    topo_system_free(sys);
    if (detect != ncclSuccess) { /* the others learn it from len == 0 */
      free(text);
      text = NULL;
    }
    len = text != NULL ? strlen(text) + 1 : 0;
  }
  CHECK_GOTO(bootstrap_subset_bcast(b, host, n, me, 0, RES_TAG_TOPO, &len, sizeof(len)), res, done);
  if (len == 0) {
    if (me != 0)
      WARN("Rank %d could not detect the topology of this host (see its log); rank %d cannot go on",
           host[0], rank);
    res = me == 0 ? detect : ncclRemoteError;
    goto done;
  }
  if (me != 0) CHECK_GOTO(MEM_CALLOC(&text, (size_t)len), res, done);
  CHECK_GOTO(bootstrap_subset_bcast(b, host, n, me, 0, RES_TAG_TOPO, text, (size_t)len), res, done);
  text[len - 1] = '\0';
  char name[64];
  snprintf(name, sizeof(name), "the topology of rank %d", host[0]);
  CHECK_GOTO(topo_xml_parse(text, name, out), res, done);
  INFO(NCCL_GRAPH,
       "Topology: rank %d uses rank %d's view of this host (%d GPUs, %llu bytes of XML)", rank,
       host[0], (*out)->ngpus, (unsigned long long)len);
done:
  free(text);
  free(host);
  return res;
}

ncclResult_t res_gpu_params_agree(bootstrap_t* b, int nranks, int rank,
                                  const res_gpu_params_t* mine, res_gpu_params_t* out) {
  res_gpu_params_t* all = NULL;
  CHECK(MEM_CALLOC(&all, (size_t)nranks));
  all[rank] = *mine;
  ncclResult_t res = bootstrap_allgather(b, all, sizeof(*all));
  if (res == ncclSuccess) res_gpu_params_merge(all, nranks, out);
  free(all);
  return res;
}

ncclResult_t res_gpu_nics_agree(comm_res_t* r, bootstrap_t* b, const peer_info_t* peers) {
  if (r->nhosts < 2) return ncclSuccess; /* no hop between hosts to lay out */
  CHECK(MEM_CALLOC(&r->rank_nics, (size_t)r->nranks));
  topo_rank_nics(r->topo, peers[r->rank].bus_id, &r->rank_nics[r->rank]);
  return bootstrap_allgather(b, r->rank_nics, sizeof(*r->rank_nics));
}

/* NCCL_LAUNCH_MODE: PARALLEL or GROUP (any case); anything else WARNs once and reads as
 * PARALLEL, as stock. ncclGroupEnd launches every GPU communicator of the group from the calling
 * thread in posting order, which is what GROUP asks for when one thread drives several GPUs;
 * stock's barrier between the launches of ranks on separate threads of one process is not built,
 * and GROUP says so once. */
static void gpu_launch_mode_check(void) {
  static atomic_int said;
  const char* mode = param_str(PARAM_LAUNCH_MODE);
  bool group = strcasecmp(mode, "GROUP") == 0;
  if (group || strcasecmp(mode, "PARALLEL") == 0) {
    if (group && !atomic_exchange(&said, 1))
      INFO(NCCL_INIT | NCCL_ENV,
           "NCCL_LAUNCH_MODE=GROUP: launches of one thread's group go out in order; ranks on "
           "separate threads of a process are not synchronized before launching");
    return;
  }
  if (!atomic_exchange(&said, 1))
    WARN("NCCL_LAUNCH_MODE=%s is neither PARALLEL nor GROUP; using PARALLEL", mode);
}

ncclResult_t res_gpu_setup(comm_res_t* cc, ncclComm_t comm) {
  res_gpu_params_t mine, agreed;
  gpu_launch_mode_check();
  CHECK(res_topo_agree(comm->platform, comm->bootstrap, comm->peers, cc->nranks, cc->rank,
                       &cc->topo));
  res_gpu_params_local(cc->topo, comm->peers, cc->nranks, cc->rank, cc->nhosts, &mine);
  mine.nchannels = res_ctas_clamp(mine.nchannels, &comm->config);
  int sharing = res_ranks_on_gpu(comm->peers, cc->nranks, cc->rank);
  if (sharing > 1) { /* NCCL_MULTI_RANK_GPU_ENABLE: every rank's blocks must be resident at once */
    int nsm = 0;
    if (cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, comm->cuda_dev) != cudaSuccess)
      (void)cudaGetLastError(); /* unknown (0): the channel count stays as proposed */
    int want = mine.nchannels;
    mine.nchannels = res_shared_gpu_channels(want, sharing, nsm);
    INFO(NCCL_INIT,
         "comm %p rank %d: %d ranks share CUDA device %d (%d SMs): at most %d channels (of %d) so "
         "that every rank's blocks run at once",
         (void*)comm, cc->rank, sharing, comm->cuda_dev, nsm, mine.nchannels, want);
  }
  CHECK(res_gpu_params_agree(comm->bootstrap, cc->nranks, cc->rank, &mine, &agreed));
  CHECK(res_gpu_nics_agree(cc, comm->bootstrap, comm->peers));
  cc->nchannels = agreed.nchannels;
  cc->ll128_ok = agreed.ll128 != 0;
  cc->direct_ok = agreed.direct != 0;
  cc->ring_writes = agreed.ring_writes != 0;
  cc->rings_both_ways = agreed.direct_links != 0;
  if (cc->rank_nics != NULL && !cc->rings_both_ways) { /* rings over every NIC (rails.c) */
    int* scratch = NULL;
    CHECK(MEM_CALLOC(&scratch, 2 * (size_t)cc->nranks));
    /* Twice the rings' period: the trees alternate over it (topo_tree_rails), and a NIC that
     * carries one tree on more channels than the other carries more bytes (resources.c). */
    int period =
        2 * topo_ring_rails_period(cc->nranks, cc->host_of, cc->rank_nics, cc->nchannels, scratch);
    free(scratch);
    int64_t floor = param_int(PARAM_MIN_NCHANNELS);
    if (comm->config.minCTAs > floor) floor = comm->config.minCTAs;
    /* Up to a whole number of periods where the limits allow, never on a shared GPU (its blocks
     * must all be resident: res_shared_gpu_channels). */
    int cap = sharing > 1 ? cc->nchannels : res_nchannels_clamp(PLAN_MAX_CHANNELS);
    if (comm->config.maxCTAs < cap) cap = comm->config.maxCTAs;
    cc->nchannels = res_rail_nchannels(cc->nchannels, period, (int)floor, cap);
  }
  double pair = agreed.pair_bw_gbs > 0 ? agreed.pair_bw_gbs : RES_GPU_DEFAULT_BW_GBS;
  double per_channel = pair / cc->nchannels;
  if (per_channel > RES_GPU_CHANNEL_MAX_GBS) per_channel = RES_GPU_CHANNEL_MAX_GBS;
  cc->tuning = (topo_tuning_t){.nranks = cc->nranks,
                               .nhosts = cc->nhosts,
                               .nchannels = cc->nchannels,
                               .intra_bw_gbs = per_channel,
                               .inter_bw_gbs = RES_GPU_INTER_BW_GBS,
                               .intra_lat_us = agreed.intra_lat_us,
                               .inter_lat_us = RES_GPU_INTER_LAT_US,
                               .gpu = cc->ll128_ok,
                               .stage_read_gbs = pair};
  INFO(NCCL_INIT | NCCL_TUNING,
       "comm %p rank %d: %d channels (this rank proposed %d), LL128 %s, OneShot/TwoShot %s, rings "
       "%s, direct writes %s, %.1f GB/s per channel, %.1f us per hop",
       (void*)comm, cc->rank, cc->nchannels, mine.nchannels, cc->ll128_ok ? "on" : "off",
       cc->direct_ok ? "on" : "off", cc->rings_both_ways ? "both ways" : "one way",
       cc->ring_writes ? "on every pair" : "not on every pair", per_channel, agreed.intra_lat_us);
  return ncclSuccess;
}
