/* NICs in the system graph: every RDMA port (/sys/class/infiniband/<dev>/ports/<n>: state, rate)
 * and every network interface backed by a PCI function (/sys/class/net/<if>/device: operstate,
 * speed), placed on the PCI tree (the bridges above them) and a NUMA node by hwloc when it loads,
 * else by sysfs; and the GPU-NIC path, by the rules GPU pairs use (system.c), so that a rank can
 * use the NIC closest to its GPU. */
#include <dirent.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>

#include "topo/topo_sys.h"

#define TOPO_NICS_MAX 64

bool topo_sysfs_pci_chain(const char* real_path, char out[TOPO_PCI_PATH_MAX], int64_t* self) {
  if (real_path == NULL) return false;
  const char* host = NULL; /* the ".../pci<domain>:<bus>" component: above it is no PCI */
  for (const char* p = strstr(real_path, "/pci"); p != NULL; p = strstr(p + 1, "/pci")) host = p;
  if (host == NULL) return false;
  const char* rest = strchr(host + 1, '/');
  char chain[TOPO_PCI_PATH_MAX] = "";
  size_t len = 0, last_len = 0;
  int64_t last = -1;
  while (rest != NULL) {
    rest++;
    size_t n = strcspn(rest, "/");
    char comp[64];
    snprintf(comp, sizeof(comp), "%.*s", (int)(n < sizeof(comp) - 1 ? n : sizeof(comp) - 1), rest);
    int64_t id = topo_busid_parse(comp);
    if (id >= 0) {
      if (last >= 0) { /* the previous function was a bridge above this one */
        len = last_len;
        char text[TOPO_BUSID_LEN];
        topo_busid_format(last, text);
        int w = snprintf(chain + len, sizeof(chain) - len, "%s%s", len ? "/" : "", text);
        if (w < 0 || (size_t)w >= sizeof(chain) - len) return false; /* too deep */
        len += (size_t)w;
      }
      last = id;
      last_len = len;
    }
    rest = rest[n] == '/' ? rest + n : NULL;
  }
  if (last < 0) return false;
  snprintf(out, TOPO_PCI_PATH_MAX, "%s", chain);
  *self = last;
  return true;
}

/* snprintf into a path buffer; false when it did not fit (the entry is then skipped). */
static bool topo_path_fmt(char* out, size_t len, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool topo_path_fmt(char* out, size_t len, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(out, len, fmt, ap);
  va_end(ap);
  return w >= 0 && (size_t)w < len;
}

static int topo_read_int(const char* path, int fallback) {
  char line[64];
  topo_read_line(path, line, sizeof(line));
  char* end = NULL;
  long v = strtol(line, &end, 10);
  return end != line && v > INT_MIN && v < INT_MAX ? (int)v : fallback;
}

/* PCI chain and NUMA node of the device at sysfs path dev_link (a symlink or real path). */
static void topo_nic_place(const char* sysfs_root, const char* dev_link, topo_nic_t* n) {
  char real[PATH_MAX], path[PATH_MAX];
  n->bus_id = -1;
  n->numa = -1;
  n->pci_path[0] = '\0';
  if (dev_link == NULL || realpath(dev_link, real) == NULL) return;
  if (!topo_sysfs_pci_chain(real, n->pci_path, &n->bus_id)) return;
  char id[TOPO_BUSID_LEN];
  topo_busid_format(n->bus_id, id);
  topo_path_fmt(path, sizeof(path), "%s/bus/pci/devices/%s/numa_node", sysfs_root, id);
  n->numa = topo_read_int(path, -1);
}

static bool topo_nic_add(topo_nic_t** nics, int* n, int* cap, const topo_nic_t* nic) {
  if (*n == *cap) {
    int c = *cap ? 2 * *cap : 8;
    if (c > TOPO_NICS_MAX) return false;
    topo_nic_t* grown = realloc(*nics, (size_t)c * sizeof(*grown));
    if (grown == NULL) return false;
    *nics = grown;
    *cap = c;
  }
  (*nics)[(*n)++] = *nic;
  return true;
}

/* RDMA ports first, then by name in version order (mlx5_2 before mlx5_10), then port: the same
 * order on every host alike, whatever order the directories list (a NIC's index is its rail,
 * src/topo/rails.c). */
static int topo_nic_cmp(const void* pa, const void* pb) {
  const topo_nic_t *a = pa, *b = pb;
  if (a->rdma != b->rdma) return a->rdma ? -1 : 1;
  int c = strverscmp(a->name, b->name);
  if (c != 0) return c;
  return (a->port > b->port) - (a->port < b->port);
}

ncclResult_t topo_nics_scan(const char* sysfs_root, topo_nic_t** out, int* nout) {
  topo_nic_t* nics = NULL;
  int n = 0, cap = 0;
  char dir[PATH_MAX], path[PATH_MAX], line[128];
  /* RDMA ports */
  snprintf(dir, sizeof(dir), "%s/class/infiniband", sysfs_root);
  DIR* d = opendir(dir);
  struct dirent* e;
  while (d != NULL && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char ports[PATH_MAX];
    topo_path_fmt(ports, sizeof(ports), "%s/%s/ports", dir, e->d_name);
    DIR* pd = opendir(ports);
    struct dirent* pe;
    while (pd != NULL && (pe = readdir(pd)) != NULL) {
      if (pe->d_name[0] == '.') continue;
      topo_nic_t nic;
      memset(&nic, 0, sizeof(nic));
      snprintf(nic.name, sizeof(nic.name), "%.31s", e->d_name);
      nic.port = atoi(pe->d_name);
      nic.rdma = true;
      topo_path_fmt(path, sizeof(path), "%s/%s/state", ports, pe->d_name);
      topo_read_line(path, line, sizeof(line));
      nic.active = strstr(line, "ACTIVE") != NULL;
      topo_path_fmt(path, sizeof(path), "%s/%s/rate", ports,
                    pe->d_name); /* "100 Gb/sec (4X EDR)" */
      topo_read_line(path, line, sizeof(line));
      nic.speed_mbps = (int)(strtod(line, NULL) * 1000.0);
      topo_path_fmt(path, sizeof(path), "%s/%s/device", dir, e->d_name);
      topo_nic_place(sysfs_root, path, &nic);
      if (!topo_nic_add(&nics, &n, &cap, &nic)) break;
    }
    if (pd != NULL) closedir(pd);
  }
  if (d != NULL) closedir(d);
  /* Interfaces with a PCI device (lo, veth, bridges have none) */
  snprintf(dir, sizeof(dir), "%s/class/net", sysfs_root);
  d = opendir(dir);
  while (d != NULL && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    topo_nic_t nic;
    memset(&nic, 0, sizeof(nic));
    snprintf(nic.name, sizeof(nic.name), "%.31s", e->d_name);
    topo_path_fmt(path, sizeof(path), "%s/%s/device", dir, e->d_name);
    topo_nic_place(sysfs_root, path, &nic);
    if (nic.bus_id < 0) continue;
    topo_path_fmt(path, sizeof(path), "%s/%s/operstate", dir, e->d_name);
    topo_read_line(path, line, sizeof(line));
    nic.active = strcmp(line, "up") == 0;
    topo_path_fmt(path, sizeof(path), "%s/%s/speed", dir, e->d_name);
    int speed = topo_read_int(path, 0);
    nic.speed_mbps = speed > 0 ? speed : 0;
    if (!topo_nic_add(&nics, &n, &cap, &nic)) break;
  }
  if (d != NULL) closedir(d);
  if (n > 1) qsort(nics, (size_t)n, sizeof(*nics), topo_nic_cmp);
  *out = nics;
  *nout = n;
  return ncclSuccess;
}

/* hwloc's view of where a NIC sits, when it has one: its bridges, and the NUMA node sysfs did not
 * give. */
static void topo_nic_hwloc(topo_nic_t* nic) {
  char path[TOPO_PCI_PATH_MAX];
  int numa = -1;
  if (nic->bus_id < 0 || !topo_hwloc_pci(nic->bus_id, path, &numa)) return;
  snprintf(nic->pci_path, sizeof(nic->pci_path), "%s", path);
  if (nic->numa < 0) nic->numa = numa;
}

ncclResult_t topo_nics_detect(topo_nic_t** out, int* n) {
  CHECK(topo_nics_scan("/sys", out, n));
  for (int i = 0; i < *n; i++) topo_nic_hwloc(&(*out)[i]);
  return ncclSuccess;
}

bool topo_nic_describe(const char* sysfs_path, topo_nic_t* out) {
  topo_nic_t nic;
  memset(&nic, 0, sizeof(nic));
  topo_nic_place("/sys", sysfs_path, &nic);
  if (nic.bus_id < 0) return false;
  topo_nic_hwloc(&nic);
  *out = nic;
  return true;
}

topo_path_t topo_gpu_nic_path(const topo_gpu_t* gpu, const topo_nic_t* nic) {
  if (gpu == NULL || nic == NULL || gpu->bus_id < 0 || nic->bus_id < 0) return TOPO_PATH_SYS;
  /* The rules of a GPU pair; a NIC has no NVLinks. */
  if (gpu->bus_id == nic->bus_id) return TOPO_PATH_LOC;
  return topo_pci_pair_path(gpu->pci_path, gpu->numa, nic->pci_path, nic->numa);
}

const topo_gpu_t* topo_system_gpu_info(const topo_system_t* sys, int64_t bus_id) {
  int i = topo_system_gpu(sys, bus_id);
  return i < 0 ? NULL : &sys->gpus[i];
}

int topo_nics_near(const topo_system_t* sys, int64_t gpu_bus, int* near, int max) {
  const topo_gpu_t* g = topo_system_gpu_info(sys, gpu_bus);
  topo_path_t best = TOPO_PATH_SYS;
  for (int i = 0; i < sys->nnics; i++) {
    topo_path_t p = topo_gpu_nic_path(g, &sys->nics[i]);
    if (p < best) best = p;
  }
  int n = 0;
  for (int i = 0; i < sys->nnics && n < max; i++)
    if (topo_gpu_nic_path(g, &sys->nics[i]) == best) near[n++] = i;
  return n;
}
