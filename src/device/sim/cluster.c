/* The machines as links, and what each costs.
 *
 * Every node is the same topology (one XML, parsed once). Per node, one direction each:
 *   GPU g      nvl-out, nvl-in  its NVLink port into the NVSwitches (links x rate, topo's estimate)
 *              pcie-up, pcie-down  its PCIe link (SHM, PCIe P2P, GPUDirect to a NIC)
 *   GPU pair   direct NVLinks between two GPUs without a switch (per ordered pair)
 *   NIC i      tx, rx            its line rate x nic_eff (or the fabric's NIC bandwidth)
 *   sockets    sys-up, sys-down  between the two sockets
 *   memory     mem              what the host executor's SHM copies share
 * and, with a fat-tree, per leaf switch an uplink and a downlink carrying the leaf's NIC bandwidth
 * divided by the oversubscription. A connection's path is the links its transport crosses.
 *
 * The costs (sim_calib) come from the measurements in docs/gpu-results.md; docs/sim.md gives the
 * fit and the numbers it was checked against. */
#include <math.h>
#include <stdlib.h>

#include "device/sim/sim_int.h"

/* CUDA: fitted to Baton's times on 2 and 4 H200 (tests/data/sim/h200-measured.txt, from
 * docs/gpu-results.md; docs/sim.md has the fit, the table and the misses): a least-squares fit
 * over every point, measured as the runs measured (nccl-tests -g N: one thread launches for every
 * GPU, operations back to back). The CUDA graph's launch costs and the staged algorithms' costs
 * were fitted afterwards, the others held, to the points tests/data/sim/h100-measured.txt marks
 * "fit" (2 and 4 H100, run 125, each algorithm forced, in graph replay): the staged ones first
 * (OneShot/TwoShot Simple of every collective, 64 KiB-16 MiB), then graph_start_ch_us on the
 * rings. Host: rough figures for the host executor (CPU threads over SHM and sockets), not
 * fitted. */
const sim_calib_t sim_calib = {
    .host_issue_us = {[SIM_EXEC_HOST] = 10.0, [SIM_EXEC_CUDA] = 4.0},
    .launch_us = {[SIM_EXEC_HOST] = 10.0, [SIM_EXEC_CUDA] = 4.0},
    .start_us = {[SIM_EXEC_HOST] = 5.0, [SIM_EXEC_CUDA] = 11.0},
    .start_ch_us = {[SIM_EXEC_HOST] = 0.5, [SIM_EXEC_CUDA] = 0.22},
    .step_us = {[SIM_EXEC_HOST] = {[PROTO_LL] = 4.0, [PROTO_LL128] = 4.0, [PROTO_SIMPLE] = 6.0},
                [SIM_EXEC_CUDA] = {[PROTO_LL] = 0.35, [PROTO_LL128] = 0.6, [PROTO_SIMPLE] = 1.4}},
    .push_gbs = {[SIM_EXEC_HOST] = {[PROTO_LL] = 0.8, [PROTO_LL128] = 0.8, [PROTO_SIMPLE] = 3.0},
                 [SIM_EXEC_CUDA] = {[PROTO_LL] = 5.2, [PROTO_LL128] = 7.0, [PROTO_SIMPLE] = 12.0}},
    .p2p_push_gbs = {[SIM_EXEC_HOST] = 3.0, [SIM_EXEC_CUDA] = 15.0},
    .p2p_peer_us = {[SIM_EXEC_HOST] = 0.0, [SIM_EXEC_CUDA] = 2.0},
    .copy_gbs = {[SIM_EXEC_HOST] = 4.0, [SIM_EXEC_CUDA] = 45.0},
    .reduce_gbs = {[SIM_EXEC_HOST] = 2.0, [SIM_EXEC_CUDA] = 27.0},
    .memcpy_gbs = {[SIM_EXEC_HOST] = 8.0, [SIM_EXEC_CUDA] = 1500.0},
    .graph_launch_us = {[SIM_EXEC_HOST] = 10.0, [SIM_EXEC_CUDA] = 1.0},
    .graph_start_ch_us = {[SIM_EXEC_HOST] = 0.5, [SIM_EXEC_CUDA] = 0.33},
    .stage_copy_us = 0.15,
    .stage_copy_gbs = 28.0,
    .stage_barrier_us = 6.0,
    .stage_pull_gbs = 21.5,
    .stage_load_gbs = 17.5,
    .stage_reduce_gbs = 12.9,
    .stage_source_us = 0.34,
    .nvl_lat_us = 0.41,
    .nvl_eff = 0.94,
    .pci_lat_us = 1.5,
    .shm_lat_us = 1.5,
    .net_lat_us = 3.0,
    .net_step_us = 1.0,
    .nic_eff = 0.96,
    .pcie_gbs = 45.0,
    .pcie4_gbs = 22.0,
    .sys_gbs = 20.0,
    .host_mem_gbs = 8.0,
};

double sim_wire_bytes(int proto, double bytes) {
  if (proto == PROTO_LL) return bytes * 2.0;
  if (proto == PROTO_LL128) return bytes * (double)LL128_LINE_BYTES / LL128_DATA_BYTES;
  return bytes;
}

#define GBS(x) ((x)*1000.0) /* GB/s -> B/us */

/* Link indices within a node. */
enum { L_NVL_OUT = 0, L_NVL_IN, L_PCIE_UP, L_PCIE_DOWN, L_PER_GPU };
static int l_gpu(const sim_net_t* n, int node, int g, int which) {
  return node * n->per_node + g * L_PER_GPU + which;
}
static int l_pair(const sim_net_t* n, int node, int a, int b) {
  return node * n->per_node + n->ngpus * L_PER_GPU + a * n->ngpus + b;
}
static int l_nic(const sim_net_t* n, int node, int i, int rx) {
  return node * n->per_node + n->ngpus * (L_PER_GPU + n->ngpus) + 2 * i + rx;
}
int sim_net_nic_link(const sim_net_t* n, int node, int nic, int rx) {
  return l_nic(n, node, nic >= 0 && nic < n->nnics ? nic : 0, rx);
}
static int l_sys(const sim_net_t* n, int node, int down) {
  return node * n->per_node + n->ngpus * (L_PER_GPU + n->ngpus) + 2 * n->nnics + down;
}
static int l_mem(const sim_net_t* n, int node) {
  return l_sys(n, node, 0) + 2;
}
static int l_leaf(const sim_net_t* n, int leaf, int down) {
  return n->fabric_base + 2 * leaf + down;
}

void sim_net_free(sim_net_t* n) {
  if (n == NULL) return;
  topo_system_free(n->node);
  free(n->cap);
  free(n->nvswitch);
  free(n->gpu_numa);
  free(n->nic_numa);
  free(n);
}

ncclResult_t sim_net_build(const sim_cluster_desc_t* d, sim_net_t** out) {
  ncclResult_t res = ncclSuccess;
  sim_net_t* n = NULL;
  if (d->nnodes < 1) {
    WARN("sim: a cluster of %d nodes", d->nnodes);
    return ncclInvalidArgument;
  }
  CHECK(MEM_CALLOC(&n, 1));
  CHECK_GOTO(
      topo_xml_parse(d->node_xml, d->node_name ? d->node_name : "the node topology", &n->node), res,
      fail);
  const topo_system_t* t = n->node;
  n->nnodes = d->nnodes;
  n->host_only = d->host_only;
  n->ngpus = d->host_only ? 0 : t->ngpus;
  n->ranks_per_node = d->host_only ? d->ranks_per_node : t->ngpus;
  if (n->ranks_per_node < 1) {
    WARN("sim: %s has no GPU; a host-executor cluster needs a rank count per node",
         d->node_name ? d->node_name : "the node topology");
    res = ncclInvalidArgument;
    goto fail;
  }
  n->nnics = t->nnics > 0 ? t->nnics : 1; /* no NIC described: one of the fabric's bandwidth */
  n->per_node = n->ngpus * (L_PER_GPU + n->ngpus) + 2 * n->nnics + 3;
  n->leaf_nodes =
      d->fabric.leaf_nodes > 0 && d->fabric.leaf_nodes < d->nnodes ? d->fabric.leaf_nodes : 0;
  n->nleaves = n->leaf_nodes > 0 ? (d->nnodes + n->leaf_nodes - 1) / n->leaf_nodes : 0;
  n->fabric_base = n->nleaves > 0 ? n->nnodes * n->per_node : -1;
  n->nlinks = n->nnodes * n->per_node + 2 * n->nleaves;
  n->net_lat_us = d->fabric.net_lat_us >= 0 ? d->fabric.net_lat_us : sim_calib.net_lat_us;
  CHECK_GOTO(MEM_CALLOC(&n->cap, (size_t)n->nlinks), res, fail);
  CHECK_GOTO(MEM_CALLOC(&n->nvswitch, (size_t)(n->ngpus > 0 ? n->ngpus : 1)), res, fail);
  CHECK_GOTO(MEM_CALLOC(&n->gpu_numa, (size_t)(n->ngpus > 0 ? n->ngpus : 1)), res, fail);
  CHECK_GOTO(MEM_CALLOC(&n->nic_numa, (size_t)n->nnics), res, fail);

  /* One node's capacities, then copied to every node. */
  double* c = n->cap;
  double nic_total = 0;
  for (int g = 0; g < n->ngpus; g++) {
    const topo_gpu_t* gpu = &t->gpus[g];
    n->nvswitch[g] = gpu->nvswitch_links > 0;
    n->gpu_numa[g] = gpu->numa;
    double port = 0;
    for (int h = 0; h < n->ngpus; h++) {
      size_t k = (size_t)g * n->ngpus + h;
      if (h == g || t->paths[k] != TOPO_PATH_NVL) continue;
      int direct = t->nvlinks[k] > t->nvlinks[(size_t)h * n->ngpus + g]
                       ? t->nvlinks[k]
                       : t->nvlinks[(size_t)h * n->ngpus + g];
      if (n->nvswitch[g] && t->gpus[h].nvswitch_links > 0) {
        if (t->bw[k] > port) port = t->bw[k];
      } else if (direct > 0) {
        c[l_pair(n, 0, g, h)] = GBS(t->bw[k]);
      }
    }
    c[l_gpu(n, 0, g, L_NVL_OUT)] = c[l_gpu(n, 0, g, L_NVL_IN)] = GBS(port) * sim_calib.nvl_eff;
    double pcie = GBS(gpu->sm >= 90 ? sim_calib.pcie_gbs : sim_calib.pcie4_gbs);
    c[l_gpu(n, 0, g, L_PCIE_UP)] = c[l_gpu(n, 0, g, L_PCIE_DOWN)] = pcie;
  }
  for (int i = 0; i < n->nnics; i++) {
    double gbs = d->fabric.nic_gbs > 0 ? d->fabric.nic_gbs
                 : t->nnics > 0 && t->nics[i].speed_mbps > 0
                     ? t->nics[i].speed_mbps / 8000.0 * sim_calib.nic_eff
                     : 12.5 * sim_calib.nic_eff; /* an undescribed NIC: 100 Gb/s */
    c[l_nic(n, 0, i, 0)] = c[l_nic(n, 0, i, 1)] = GBS(gbs);
    n->nic_numa[i] = t->nnics > 0 ? t->nics[i].numa : -1;
    nic_total += GBS(gbs);
  }
  c[l_sys(n, 0, 0)] = c[l_sys(n, 0, 1)] = GBS(sim_calib.sys_gbs);
  c[l_mem(n, 0)] = GBS(sim_calib.host_mem_gbs);
  for (int node = 1; node < n->nnodes; node++)
    memcpy(c + (size_t)node * n->per_node, c, (size_t)n->per_node * sizeof(*c));
  if (n->nleaves > 0) {
    double ratio = d->fabric.oversub >= 1 ? d->fabric.oversub : 1;
    for (int leaf = 0; leaf < n->nleaves; leaf++) {
      int nodes = leaf == n->nleaves - 1 ? n->nnodes - leaf * n->leaf_nodes : n->leaf_nodes;
      c[l_leaf(n, leaf, 0)] = c[l_leaf(n, leaf, 1)] = nodes * nic_total / ratio;
    }
  }
  *out = n;
  return ncclSuccess;
fail:
  sim_net_free(n);
  return res;
}

int sim_net_path(const sim_net_t* n, int tr, int na, int ga, int nb, int gb, int src_nic,
                 int dst_nic, int relay, int* links) {
  int k = 0;
  if (tr == SIM_TR_P2P || tr == SIM_TR_SHM) {
    if (ga < 0 || gb < 0) {
      links[k++] = l_mem(n, na);
      return k;
    }
    if (tr == SIM_TR_P2P && n->nvswitch[ga] && n->nvswitch[gb]) {
      links[k++] = l_gpu(n, na, ga, L_NVL_OUT);
      links[k++] = l_gpu(n, nb, gb, L_NVL_IN);
      return k;
    }
    if (tr == SIM_TR_P2P && n->cap[l_pair(n, na, ga, gb)] > 0) {
      links[k++] = l_pair(n, na, ga, gb);
      return k;
    }
    /* SHM, or P2P over PCIe. */
    links[k++] = l_gpu(n, na, ga, L_PCIE_UP);
    if (n->gpu_numa[ga] != n->gpu_numa[gb]) links[k++] = l_sys(n, na, 0);
    links[k++] = l_gpu(n, nb, gb, L_PCIE_DOWN);
    return k;
  }
  /* NET */
  int si = src_nic >= 0 && src_nic < n->nnics ? src_nic : 0;
  int di = dst_nic >= 0 && dst_nic < n->nnics ? dst_nic : 0;
  if (ga >= 0 && relay >= 0 && relay < n->ngpus && relay != ga) {
    /* PXN: over NVLink into the relay's memory, which the NIC reads through the relay's PCIe */
    k += sim_net_path(n, SIM_TR_P2P, na, ga, na, relay, -1, -1, -1, links + k);
    ga = relay;
  }
  if (ga >= 0) {
    links[k++] = l_gpu(n, na, ga, L_PCIE_UP);
    if (n->nic_numa[si] >= 0 && n->gpu_numa[ga] != n->nic_numa[si]) links[k++] = l_sys(n, na, 0);
  }
  links[k++] = l_nic(n, na, si, 0);
  if (n->nleaves > 0 && na / n->leaf_nodes != nb / n->leaf_nodes) {
    links[k++] = l_leaf(n, na / n->leaf_nodes, 0);
    links[k++] = l_leaf(n, nb / n->leaf_nodes, 1);
  }
  links[k++] = l_nic(n, nb, di, 1);
  if (gb >= 0) {
    if (n->nic_numa[di] >= 0 && n->gpu_numa[gb] != n->nic_numa[di]) links[k++] = l_sys(n, nb, 1);
    links[k++] = l_gpu(n, nb, gb, L_PCIE_DOWN);
  }
  return k;
}

double sim_net_latency(const sim_net_t* n, int tr, int na, int ga, int nb, int gb, int relay) {
  if (tr == SIM_TR_NET) {
    bool cross = n->nleaves > 0 && na / n->leaf_nodes != nb / n->leaf_nodes;
    double pxn = ga >= 0 && relay >= 0 && relay < n->ngpus && relay != ga
                     ? sim_net_latency(n, SIM_TR_P2P, na, ga, na, relay, -1)
                     : 0.0;
    return n->net_lat_us + (cross ? 1.0 : 0.0) + pxn; /* two more switch hops through the spine */
  }
  if (tr == SIM_TR_SHM || ga < 0 || gb < 0) return sim_calib.shm_lat_us;
  if ((n->nvswitch[ga] && n->nvswitch[gb]) || n->cap[l_pair(n, na, ga, gb)] > 0)
    return sim_calib.nvl_lat_us;
  return sim_calib.pci_lat_us;
}

void sim_net_link_name(const sim_net_t* n, int l, char* buf, size_t len) {
  static const char* const gpu_names[L_PER_GPU] = {"nvl-out", "nvl-in", "pcie-up", "pcie-down"};
  if (n->fabric_base >= 0 && l >= n->fabric_base) {
    int x = l - n->fabric_base;
    snprintf(buf, len, "leaf%d.%s", x / 2, x % 2 ? "down" : "up");
    return;
  }
  int node = l / n->per_node, x = l % n->per_node;
  if (x < n->ngpus * L_PER_GPU) {
    snprintf(buf, len, "n%d.gpu%d.%s", node, x / L_PER_GPU, gpu_names[x % L_PER_GPU]);
    return;
  }
  x -= n->ngpus * L_PER_GPU;
  if (x < n->ngpus * n->ngpus) {
    snprintf(buf, len, "n%d.nvl%d-%d", node, x / n->ngpus, x % n->ngpus);
    return;
  }
  x -= n->ngpus * n->ngpus;
  if (x < 2 * n->nnics) {
    snprintf(buf, len, "n%d.nic%d.%s", node, x / 2, x % 2 ? "rx" : "tx");
    return;
  }
  x -= 2 * n->nnics;
  snprintf(buf, len, "n%d.%s", node, x == 0 ? "sys-up" : x == 1 ? "sys-down" : "mem");
}
