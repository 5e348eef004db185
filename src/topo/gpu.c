/* Detecting this host's system graph: the GPUs of the local ranks, their PCI bridges, NUMA node
 * and local CPUs (sysfs), their NVLinks (NVML), or all of it from NCCL_TOPO_FILE for the GPUs the
 * file lists. Without NVML, two GPUs that this process sees and that can access each other count
 * as PCIe peers under one switch ("P2P capable, PCIe"). */
#include <limits.h>
#include <stdlib.h>

#include "topo/xml_info.h"

#define TOPO_SYSFS_ROOT "/sys"

/* ---- sysfs
 * --------------------------------------------------------------------------------------- */
void topo_read_line(const char* path, char* buf, size_t len) {
  buf[0] = '\0';
  FILE* f = fopen(path, "re");
  if (f == NULL) return;
  if (fgets(buf, (int)len, f) == NULL) buf[0] = '\0';
  fclose(f);
  buf[strcspn(buf, "\r\n")] = '\0';
}

void topo_sysfs_gpu(const char* sysfs_root, topo_gpu_t* g) {
  char busid[TOPO_BUSID_LEN], path[PATH_MAX], real[PATH_MAX], line[TOPO_CPUS_MAX];
  topo_busid_format(g->bus_id, busid);
  snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", sysfs_root, busid);
  topo_read_line(path, line, sizeof(line));
  if (line[0] != '\0') {
    char* end = NULL;
    long v = strtol(line, &end, 10);
    if (end != line && v >= -1 && v < INT_MAX) g->numa = (int)v;
  }
  snprintf(path, sizeof(path), "%s/bus/pci/devices/%s/local_cpulist", sysfs_root, busid);
  topo_read_line(path, line, sizeof(line));
  if (line[0] != '\0') snprintf(g->cpus, sizeof(g->cpus), "%s", line);
  /* The device's real path: .../pci<domain>:<bus>/<bridge>/.../<bridge>/<the GPU>. */
  snprintf(path, sizeof(path), "%s/bus/pci/devices/%s", sysfs_root, busid);
  int64_t self = -1;
  char chain[TOPO_PCI_PATH_MAX];
  if (realpath(path, real) != NULL && topo_sysfs_pci_chain(real, chain, &self))
    snprintf(g->pci_path, sizeof(g->pci_path), "%s", chain);
}

/* ---- CUDA runtime facts (for GPUs this process sees) --------------------------------------------
 */
int topo_gpu_local_ordinal(int64_t bus_id) {
  char text[TOPO_BUSID_LEN];
  int dev = -1;
  topo_busid_format(bus_id, text);
  if (cudaDeviceGetByPCIBusId(&dev, text) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return dev;
}

static int runtime_sm(int64_t bus_id) {
  int dev = topo_gpu_local_ordinal(bus_id), major = 0, minor = 0;
  if (dev < 0) return 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return major * 10 + minor;
}

/* Both GPUs visible here and able to access each other both ways. */
static bool runtime_peers(int64_t a, int64_t b) {
  int da = topo_gpu_local_ordinal(a), db = topo_gpu_local_ordinal(b), ab = 0, ba = 0;
  if (da < 0 || db < 0) return false;
  if (cudaDeviceCanAccessPeer(&ab, da, db) != cudaSuccess ||
      cudaDeviceCanAccessPeer(&ba, db, da) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return ab && ba;
}

/* ---- Detection ----------------------------------------------------------------------------------
 */
static void gpu_log(const topo_system_t* sys) {
  if (!LOG_ENABLED(NCCL_LOG_INFO)) return;
  char a[TOPO_BUSID_LEN], b[TOPO_BUSID_LEN];
  for (int i = 0; i < sys->ngpus; i++) {
    const topo_gpu_t* g = &sys->gpus[i];
    topo_busid_format(g->bus_id, a);
    INFO(NCCL_GRAPH,
         "Topology: GPU %s rank %d dev %d sm %d NUMA %d CPUs %s PCI %s NVSwitch links %d", a,
         g->rank, g->dev, g->sm, g->numa, g->cpus[0] ? g->cpus : "?",
         g->pci_path[0] ? g->pci_path : "?", g->nvswitch_links);
  }
  for (int i = 0; i < sys->ngpus; i++) {
    for (int j = i + 1; j < sys->ngpus; j++) {
      size_t k = (size_t)i * sys->ngpus + j;
      topo_busid_format(sys->gpus[i].bus_id, a);
      topo_busid_format(sys->gpus[j].bus_id, b);
      INFO(NCCL_GRAPH, "Topology: %s <-> %s %s, %d direct NVLinks, %.1f GB/s", a, b,
           topo_path_names[sys->paths[k]], sys->nvlinks[k], sys->bw[k]);
    }
  }
}

static void nic_log(const topo_system_t* sys) {
  if (!LOG_ENABLED(NCCL_LOG_INFO)) return;
  for (int i = 0; i < sys->nnics; i++) {
    const topo_nic_t* n = &sys->nics[i];
    char id[TOPO_BUSID_LEN], line[256] = "";
    size_t used = 0;
    topo_busid_format(n->bus_id, id);
    for (int g = 0; g < sys->ngpus && used < sizeof(line); g++) {
      char gid[TOPO_BUSID_LEN];
      topo_busid_format(sys->gpus[g].bus_id, gid);
      used += (size_t)snprintf(line + used, sizeof(line) - used, " %s:%s", gid,
                               topo_path_names[topo_gpu_nic_path(&sys->gpus[g], n)]);
    }
    INFO(NCCL_GRAPH,
         "Topology: NIC %s%s%.0d %s, %s, %d Mb/s, PCI %s NUMA %d bridges %s; GPU paths%s", n->name,
         n->port ? ":" : "", n->port, n->rdma ? "RDMA" : "Ethernet", n->active ? "active" : "down",
         n->speed_mbps, n->bus_id >= 0 ? id : "none (virtual)", n->numa,
         n->pci_path[0] ? n->pci_path : "-", used ? line : " -");
  }
}

/* Adds g's facts from the file's entry fi (its rank and dev stay the peers'). */
static void gpu_from_file(topo_gpu_t* g, const topo_gpu_t* fi) {
  int rank = g->rank, dev = g->dev;
  *g = *fi;
  g->rank = rank;
  g->dev = dev;
  g->placed_only = false;
}

/* A GPU the file only places (a cloud image's file: class 0x03.. without <gpu>): detected, then
 * put where the file says. */
static void gpu_place_from_file(topo_gpu_t* g, const topo_gpu_t* fi) {
  g->numa = fi->numa;
  snprintf(g->cpus, sizeof(g->cpus), "%s", fi->cpus);
  snprintf(g->pci_path, sizeof(g->pci_path), "%s", fi->pci_path);
}

static void gpu_detect(topo_gpu_t* g, const topo_gpu_t* all, int n, topo_link_t* links, int* nlinks,
                       bool* nvml_ok) {
  topo_nvml_gpu_t nv;
  topo_sysfs_gpu(TOPO_SYSFS_ROOT, g);
  if (topo_nvml_gpu(g->bus_id, &nv) == ncclSuccess) {
    g->sm = nv.sm;
    g->nvswitch_links = nv.nvswitch_links;
    for (int l = 0; l < nv.nlinks; l++) {
      for (int j = 0; j < n; j++) {
        if (all[j].bus_id != nv.remote[l] || all[j].bus_id == g->bus_id) continue;
        /* one entry per link; build() sums them */
        links[(*nlinks)++] = (topo_link_t){.from = g->bus_id, .to = nv.remote[l], .count = 1};
      }
    }
  } else {
    *nvml_ok = false;
  }
  if (g->sm == 0) g->sm = runtime_sm(g->bus_id);
}

ncclResult_t topo_system_detect(const peer_info_t* peers, int nranks, int my_rank,
                                topo_system_t** out) {
  ncclResult_t res = ncclSuccess;
  topo_gpu_t* gpus = NULL;
  topo_link_t* links = NULL;
  topo_system_t* file = NULL;
  topo_system_t* sys = NULL;
  int n = 0, nlinks = 0;
  bool nvml_ok = true;
  const char* file_path = param_str(PARAM_TOPO_FILE);
  const char* dump_path = param_str(PARAM_TOPO_DUMP_FILE);
  const peer_info_t* me = &peers[my_rank];

  CHECK(MEM_CALLOC(&gpus, (size_t)nranks));
  for (int r = 0; r < nranks; r++) {
    const peer_info_t* p = &peers[r];
    if (p->host_hash != me->host_hash || p->cuda_dev < 0 || p->bus_id < 0) continue;
    int k = 0;
    while (k < n && gpus[k].bus_id != p->bus_id) k++;
    if (k < n) continue; /* ranks come in order: the first is the lowest */
    gpus[n++] = (topo_gpu_t){.bus_id = p->bus_id, .rank = r, .dev = p->cuda_dev, .numa = -1};
  }
  if (file_path != NULL && file_path[0] != '\0')
    CHECK_GOTO(topo_xml_load(file_path, &file), res, out);
  size_t cap = (size_t)n * TOPO_MAX_NVLINKS + (file ? (size_t)n * n : 0) + 1;
  CHECK_GOTO(MEM_CALLOC(&links, cap), res, out);
  int from_file = 0;
  for (int i = 0; i < n; i++) {
    int fi = topo_system_gpu(file, gpus[i].bus_id);
    if (fi < 0 || file->gpus[fi].placed_only) {
      gpu_detect(&gpus[i], gpus, n, links, &nlinks, &nvml_ok);
      if (fi >= 0) gpu_place_from_file(&gpus[i], &file->gpus[fi]);
      continue;
    }
    from_file++;
    gpu_from_file(&gpus[i], &file->gpus[fi]);
    for (int j = 0; j < n; j++) {
      int fj = topo_system_gpu(file, gpus[j].bus_id);
      int count = fj >= 0 && fj != fi ? file->nvlinks[(size_t)fi * file->ngpus + fj] : 0;
      if (count > 0)
        links[nlinks++] =
            (topo_link_t){.from = gpus[i].bus_id, .to = gpus[j].bus_id, .count = count};
    }
  }
  CHECK_GOTO(
      topo_system_build(gpus, n, links, nlinks, file_path ? file_path : "topology detection", &sys),
      res, out);
  if (!nvml_ok && from_file < n) {
    /* PCIe fallback: pairs the runtime says are peers count as one switch apart. */
    for (int i = 0; i < n; i++) {
      for (int j = 0; j < n; j++) {
        size_t k = (size_t)i * n + j;
        if (i == j || sys->paths[k] <= TOPO_PATH_PIX) continue;
        if (!runtime_peers(sys->gpus[i].bus_id, sys->gpus[j].bus_id)) continue;
        sys->paths[k] = TOPO_PATH_PIX;
        sys->bw[k] = topo_gpu_pair_bw(&sys->gpus[i], &sys->gpus[j], 0, TOPO_PATH_PIX);
      }
    }
  }
  CHECK_GOTO(topo_nics_detect(&sys->nics, &sys->nnics), res, out);
  INFO(NCCL_INIT | NCCL_GRAPH,
       "Topology: %d GPU(s) on this host (%d from %s, NVML %s), %d channels", n, from_file,
       file_path ? file_path : "no NCCL_TOPO_FILE", nvml_ok ? "used" : "unavailable",
       topo_system_nchannels(sys));
  gpu_log(sys);
  nic_log(sys);
  if (file != NULL) { /* what the file said beyond the GPUs goes into dumps */
    sys->xml = file->xml;
    file->xml = NULL;
  }
  if (my_rank == param_int(PARAM_TOPO_DUMP_FILE_RANK) && dump_path != NULL && dump_path[0] != '\0')
    CHECK_GOTO(topo_xml_dump(sys, dump_path), res, out);
  *out = sys;
  sys = NULL;
out:
  topo_system_free(sys);
  topo_system_free(file);
  free(links);
  free(gpus);
  return res;
}

ncclResult_t topo_system_from_xml(const peer_info_t* peers, int nranks, int my_rank,
                                  const char* xml, const char* name, topo_system_t** out) {
  topo_system_t* sys = NULL;
  char bus[TOPO_BUSID_LEN];
  const peer_info_t* me = &peers[my_rank];
  CHECK(topo_xml_parse(xml, name, &sys));
  for (int i = 0; i < sys->ngpus; i++) sys->gpus[i].rank = sys->gpus[i].dev = -1;
  for (int r = 0; r < nranks; r++) {
    const peer_info_t* p = &peers[r];
    if (p->host_hash != me->host_hash || p->cuda_dev < 0 || p->bus_id < 0) continue;
    int g = topo_system_gpu(sys, p->bus_id);
    if (g < 0) {
      topo_busid_format(p->bus_id, bus);
      WARN("Topology %s has no GPU %s (rank %d's)", name, bus, r);
      topo_system_free(sys);
      return ncclInvalidUsage;
    }
    if (sys->gpus[g].rank < 0) { /* ranks come in order: the first is the lowest */
      sys->gpus[g].rank = r;
      sys->gpus[g].dev = p->cuda_dev;
    }
  }
  INFO(NCCL_GRAPH, "Topology: %d GPU(s), %d NIC(s) from %s, %d channels", sys->ngpus, sys->nnics,
       name, topo_system_nchannels(sys));
  gpu_log(sys);
  nic_log(sys);
  *out = sys;
  return ncclSuccess;
}
