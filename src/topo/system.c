/* The system graph: assembling it (GPUs sorted by bus id, NVLink counts), the path type and the
 * bandwidth estimate of each GPU pair, and what they imply (channel count, P2P level). Pure
 * functions apart from reading NCCL_* parameters; detection lives in gpu.c, files in xml.c.
 *
 * Paths between two GPUs (the best one wins):
 *   LOC  the same bus id;
 *   NVL  a direct NVLink, or both GPUs have links to NVSwitches (the fabric joins all of them);
 *   PIX  the PCI bridge chains share a prefix and each GPU is at most one bridge below it (the two
 *        downstream ports of one switch, whose upstream port is the shared part);
 *   PXB  the chains share a prefix but one GPU is deeper (several switches);
 *   PHB  no shared bridge, same NUMA node (through the CPU's host bridge);
 *   SYS  different NUMA nodes.
 * Bandwidth (GB/s, one direction): NVLink links x per-link rate by architecture (20 up to
 * Ampere, 20.6 Hopper, 40 Blackwell); PCIe 24; across CPUs 10. */
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <strings.h>

#include "topo/xml_info.h"

const char* const topo_path_names[TOPO_PATH_COUNT] = {"LOC", "NVL", "NVB", "PIX",
                                                      "PXB", "PXN", "PHB", "SYS"};

#define TOPO_PCI_GBS 24.0
#define TOPO_SYS_GBS 10.0
#define TOPO_LOC_GBS 5000.0

/* ---- Bus ids -----------------------------------------------------------------------------------
 */
void topo_busid_format(int64_t bus_id, char out[TOPO_BUSID_LEN]) {
  if (bus_id < 0) {
    snprintf(out, TOPO_BUSID_LEN, "none");
    return;
  }
  unsigned long long id = (unsigned long long)bus_id;
  snprintf(out, TOPO_BUSID_LEN, "%04llx:%02x:%02x.%x", (id >> 20) & 0xffffffffull,
           (unsigned)((id >> 12) & 0xff), (unsigned)((id >> 4) & 0xff), (unsigned)(id & 0xf));
}

/* Reads between min and max hex digits at *p; -1 when there are not enough. */
static long long hex_run(const char** p, int min, int max) {
  long long v = 0;
  int n = 0;
  while (n < max && isxdigit((unsigned char)**p)) {
    char c = (char)tolower((unsigned char)**p);
    v = v * 16 + (c <= '9' ? c - '0' : c - 'a' + 10);
    (*p)++;
    n++;
  }
  return n >= min ? v : -1;
}

int64_t topo_busid_parse(const char* text) {
  if (text == NULL) return -1;
  const char* p = text;
  long long domain = hex_run(&p, 1, 8);
  if (domain < 0 || *p++ != ':') return -1;
  long long bus = hex_run(&p, 2, 2);
  if (bus < 0 || *p++ != ':') return -1;
  long long dev = hex_run(&p, 2, 2);
  if (dev < 0 || *p++ != '.') return -1;
  long long fn = hex_run(&p, 1, 1);
  if (fn < 0 || *p != '\0') return -1;
  return (int64_t)(((unsigned long long)domain << 20) | ((unsigned long long)bus << 12) |
                   ((unsigned long long)dev << 4) | (unsigned long long)fn);
}

/* ---- Paths -------------------------------------------------------------------------------------
 */
/* Number of '/'-separated components of a PCI path ("" has none). */
static int pci_depth(const char* p) {
  if (p[0] == '\0') return 0;
  int n = 1;
  for (; *p; p++)
    if (*p == '/') n++;
  return n;
}

/* Components shared at the start of both paths. */
static int pci_common(const char* a, const char* b) {
  int n = 0;
  while (*a && *b) {
    size_t la = strcspn(a, "/"), lb = strcspn(b, "/");
    if (la != lb || strncmp(a, b, la) != 0) break;
    n++;
    a += la;
    b += lb;
    if (*a == '/') a++;
    if (*b == '/') b++;
  }
  return n;
}

topo_path_t topo_pci_pair_path(const char* path_a, int numa_a, const char* path_b, int numa_b) {
  int common = pci_common(path_a, path_b);
  if (common > 0) {
    int da = pci_depth(path_a) - common, db = pci_depth(path_b) - common;
    return da <= 1 && db <= 1 ? TOPO_PATH_PIX : TOPO_PATH_PXB;
  }
  return numa_a == numa_b ? TOPO_PATH_PHB : TOPO_PATH_SYS;
}

topo_path_t topo_gpu_pair_path(const topo_gpu_t* a, const topo_gpu_t* b, int nvlinks) {
  if (a->bus_id == b->bus_id) return TOPO_PATH_LOC;
  if (nvlinks > 0 || (a->nvswitch_links > 0 && b->nvswitch_links > 0)) return TOPO_PATH_NVL;
  return topo_pci_pair_path(a->pci_path, a->numa, b->pci_path, b->numa);
}

static double nvlink_gbs(int sm) {
  if (sm >= 100) return 40.0;
  if (sm >= 90) return 20.6;
  return 20.0;
}

double topo_gpu_pair_bw(const topo_gpu_t* a, const topo_gpu_t* b, int nvlinks, topo_path_t path) {
  switch (path) {
    case TOPO_PATH_LOC:
      return TOPO_LOC_GBS;
    case TOPO_PATH_NVL:
    case TOPO_PATH_NVB: {
      int sm = a->sm < b->sm ? a->sm : b->sm;
      int links = nvlinks;
      if (a->nvswitch_links > 0 && b->nvswitch_links > 0)
        links += a->nvswitch_links < b->nvswitch_links ? a->nvswitch_links : b->nvswitch_links;
      return links * nvlink_gbs(sm);
    }
    case TOPO_PATH_SYS:
      return TOPO_SYS_GBS;
    default:
      return TOPO_PCI_GBS;
  }
}

/* ---- Assembling --------------------------------------------------------------------------------
 */
static int gpu_cmp(const void* pa, const void* pb) {
  const topo_gpu_t* a = pa;
  const topo_gpu_t* b = pb;
  return (a->bus_id > b->bus_id) - (a->bus_id < b->bus_id);
}

int topo_system_gpu(const topo_system_t* sys, int64_t bus_id) {
  if (sys == NULL) return -1;
  int lo = 0, hi = sys->ngpus - 1;
  while (lo <= hi) {
    int mid = (lo + hi) / 2;
    if (sys->gpus[mid].bus_id == bus_id) return mid;
    if (sys->gpus[mid].bus_id < bus_id)
      lo = mid + 1;
    else
      hi = mid - 1;
  }
  return -1;
}

void topo_system_free(topo_system_t* sys) {
  if (sys == NULL) return;
  free(sys->gpus);
  free(sys->nics);
  free(sys->nvlinks);
  free(sys->paths);
  free(sys->bw);
  topo_xml_info_free(sys->xml);
  free(sys);
}

ncclResult_t topo_system_build(const topo_gpu_t* gpus, int n, const topo_link_t* links, int nlinks,
                               const char* what, topo_system_t** out) {
  ncclResult_t res = ncclSuccess;
  topo_system_t* sys = NULL;
  char a[TOPO_BUSID_LEN], b[TOPO_BUSID_LEN];
  if (n < 0 || n > TOPO_MAX_GPUS) {
    WARN("%s: %d GPUs, at most %d per host are supported", what, n, TOPO_MAX_GPUS);
    return ncclInvalidUsage;
  }
  size_t nn = (size_t)n * (size_t)n;
  CHECK(MEM_CALLOC(&sys, 1));
  sys->ngpus = n;
  CHECK_GOTO(MEM_CALLOC(&sys->gpus, (size_t)n), res, fail);
  CHECK_GOTO(MEM_CALLOC(&sys->nvlinks, nn), res, fail);
  CHECK_GOTO(MEM_CALLOC(&sys->paths, nn), res, fail);
  CHECK_GOTO(MEM_CALLOC(&sys->bw, nn), res, fail);
  if (n > 0) memcpy(sys->gpus, gpus, (size_t)n * sizeof(*gpus));
  qsort(sys->gpus, (size_t)n, sizeof(*sys->gpus), gpu_cmp);
  for (int i = 0; i + 1 < n; i++) {
    if (sys->gpus[i].bus_id == sys->gpus[i + 1].bus_id) {
      topo_busid_format(sys->gpus[i].bus_id, a);
      WARN("%s: GPU %s is listed twice", what, a);
      res = ncclInvalidUsage;
      goto fail;
    }
  }
  for (int k = 0; k < nlinks; k++) {
    int i = topo_system_gpu(sys, links[k].from), j = topo_system_gpu(sys, links[k].to);
    if (i < 0 || j < 0 || i == j || links[k].count < 0) {
      topo_busid_format(links[k].from, a);
      topo_busid_format(links[k].to, b);
      WARN("%s: NVLink from %s to %s (count %d) does not join two distinct GPUs of the system",
           what, a, b, links[k].count);
      res = ncclInvalidUsage;
      goto fail;
    }
    sys->nvlinks[(size_t)i * n + j] += links[k].count;
  }
  for (int i = 0; i < n; i++) {
    for (int j = 0; j < n; j++) {
      int nv = sys->nvlinks[(size_t)i * n + j];
      if (sys->nvlinks[(size_t)j * n + i] > nv) nv = sys->nvlinks[(size_t)j * n + i];
      topo_path_t p = topo_gpu_pair_path(&sys->gpus[i], &sys->gpus[j], nv);
      sys->paths[(size_t)i * n + j] = p;
      sys->bw[(size_t)i * n + j] = topo_gpu_pair_bw(&sys->gpus[i], &sys->gpus[j], nv, p);
    }
  }
  *out = sys;
  return ncclSuccess;
fail:
  topo_system_free(sys);
  return res;
}

topo_path_t topo_system_path(const topo_system_t* sys, int64_t bus_a, int64_t bus_b) {
  if (bus_a >= 0 && bus_a == bus_b) return TOPO_PATH_LOC;
  int i = topo_system_gpu(sys, bus_a), j = topo_system_gpu(sys, bus_b);
  if (i < 0 || j < 0) return TOPO_PATH_SYS;
  return sys->paths[(size_t)i * sys->ngpus + j];
}

/* ---- What the graph implies --------------------------------------------------------------------
 */
int topo_system_nchannels(const topo_system_t* sys) {
  if (sys == NULL || sys->ngpus < 2) return 0;
  double slowest = INFINITY;
  for (int i = 0; i < sys->ngpus; i++)
    for (int j = 0; j < sys->ngpus; j++)
      if (i != j && sys->bw[(size_t)i * sys->ngpus + j] < slowest)
        slowest = sys->bw[(size_t)i * sys->ngpus + j];
  int n = (int)ceil(slowest / TOPO_CHANNEL_GBS - 1e-9);
  if (n < 2) n = 2;
  if (n % 2 != 0) n++;
  int64_t hi = param_int(PARAM_MAX_NCHANNELS), lo = param_int(PARAM_MIN_NCHANNELS);
  if (hi < 1) hi = 1;
  if (hi > TOPO_MAX_CHANNELS) hi = TOPO_MAX_CHANNELS;
  if (lo > hi) lo = hi;
  if (n > hi) n = (int)hi;
  if (n < lo) n = (int)lo;
  return n;
}

ncclResult_t topo_path_parse(const char* text, topo_path_t* out) {
  if (text == NULL || text[0] == '\0') return ncclInvalidUsage;
  for (int p = 0; p < TOPO_PATH_COUNT; p++) {
    if (strcasecmp(text, topo_path_names[p]) == 0) {
      *out = (topo_path_t)p;
      return ncclSuccess;
    }
  }
  /* Stock's legacy numbers: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS. */
  char* end = NULL;
  errno = 0;
  long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 0) return ncclInvalidUsage;
  static const topo_path_t legacy[] = {TOPO_PATH_LOC, TOPO_PATH_PIX, TOPO_PATH_PXB, TOPO_PATH_PHB,
                                       TOPO_PATH_SYS};
  *out = v >= 4 ? TOPO_PATH_SYS : legacy[v];
  return ncclSuccess;
}

topo_path_t topo_p2p_level(void) {
  static volatile int warned;
  const char* text = param_str(PARAM_P2P_LEVEL);
  topo_path_t level = TOPO_PATH_PXB;
  if (text == NULL || text[0] == '\0') return level;
  if (topo_path_parse(text, &level) != ncclSuccess) {
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      WARN(
          "NCCL_P2P_LEVEL=%s is not a path type (LOC, NVL, NVB, PIX, PXB, PXN, PHB, SYS or 0-4); "
          "using PXB",
          text);
    return TOPO_PATH_PXB;
  }
  return level;
}
