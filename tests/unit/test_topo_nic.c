/* NICs in the system graph: the sysfs scan on a fake tree (RDMA ports and PCI-backed interfaces,
 * virtual devices), PCI chains, GPU-NIC paths by the GPU-pair rules, the XML round trip of NICs,
 * hwloc against sysfs on this machine's real PCI devices, CPU lists and affinity. */
#include <check.h>
#include <dirent.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "topo/topo_sys.h"
#include "unit.h"

static int64_t bid(const char* s) {
  int64_t v = topo_busid_parse(s);
  ck_assert_int_ge(v, 0);
  return v;
}

START_TEST(pci_chain_of_sysfs_paths) {
  char chain[TOPO_PCI_PATH_MAX];
  int64_t self = -1;
  ck_assert(topo_sysfs_pci_chain("/sys/devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:18:00.0",
                                 chain, &self));
  ck_assert_str_eq(chain, "0000:15:01.0/0000:16:00.0");
  ck_assert_int_eq(self, bid("0000:18:00.0"));
  /* an interface's device below its PCI function: the function is the last bus id */
  ck_assert(topo_sysfs_pci_chain("/sys/devices/pci0000:00/0000:00:03.0/virtio2", chain, &self));
  ck_assert_str_eq(chain, "");
  ck_assert_int_eq(self, bid("0000:00:03.0"));
  ck_assert(!topo_sysfs_pci_chain("/sys/devices/virtual/net/lo", chain, &self));
  ck_assert(!topo_sysfs_pci_chain(NULL, chain, &self));
}
END_TEST

/* A fake /sys: a switch 0000:15:01.0 with a GPU (0000:18:00.0) and an RDMA NIC (mlx5_0,
 * 0000:19:00.0) on NUMA 0; an Ethernet NIC (eth1, 0000:5e:00.0) on NUMA 1; a virtual RDMA device
 * (rxe0) and a virtual interface (lo). */
static void mk(const char* root, const char* rel) {
  char p[2 * PATH_MAX];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  char cmd[2 * PATH_MAX + 16];
  snprintf(cmd, sizeof(cmd), "mkdir -p '%s'", p);
  ck_assert_int_eq(system(cmd), 0);
}
static void put(const char* root, const char* rel, const char* text) {
  char p[2 * PATH_MAX];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  unit_write_file(p, text);
}
static void link_to(const char* root, const char* rel, const char* target) {
  char p[2 * PATH_MAX];
  snprintf(p, sizeof(p), "%s/%s", root, rel);
  ck_assert_int_eq(symlink(target, p), 0);
}

START_TEST(scan_fake_sysfs) {
  char root[] = "/tmp/baton-nics-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(root));
  const char* sw = "devices/pci0000:15/0000:15:01.0";
  char gpu[256], nic[256], eth[256];
  snprintf(gpu, sizeof(gpu), "%s/0000:18:00.0", sw);
  snprintf(nic, sizeof(nic), "%s/0000:19:00.0", sw);
  snprintf(eth, sizeof(eth), "devices/pci0000:5d/0000:5d:02.0/0000:5e:00.0");
  mk(root, gpu);
  mk(root, nic);
  mk(root, eth);
  mk(root, "devices/virtual/net/lo");
  mk(root, "bus/pci/devices");
  put(root, "devices/pci0000:15/0000:15:01.0/0000:19:00.0/numa_node", "0\n");
  put(root, "devices/pci0000:5d/0000:5d:02.0/0000:5e:00.0/numa_node", "1\n");
  link_to(root, "bus/pci/devices/0000:19:00.0",
          "../../../devices/pci0000:15/0000:15:01.0/0000:19:00.0");
  link_to(root, "bus/pci/devices/0000:5e:00.0",
          "../../../devices/pci0000:5d/0000:5d:02.0/0000:5e:00.0");
  mk(root, "class/infiniband/mlx5_0/ports/1");
  put(root, "class/infiniband/mlx5_0/ports/1/state", "4: ACTIVE\n");
  put(root, "class/infiniband/mlx5_0/ports/1/rate", "200 Gb/sec (4X HDR)\n");
  link_to(root, "class/infiniband/mlx5_0/device",
          "../../../devices/pci0000:15/0000:15:01.0/0000:19:00.0");
  mk(root, "class/infiniband/rxe0/ports/1");
  put(root, "class/infiniband/rxe0/ports/1/state", "1: DOWN\n");
  put(root, "class/infiniband/rxe0/ports/1/rate", "10 Gb/sec (1X QDR)\n");
  mk(root, "class/net/eth1");
  link_to(root, "class/net/eth1/device", "../../../devices/pci0000:5d/0000:5d:02.0/0000:5e:00.0");
  put(root, "class/net/eth1/operstate", "up\n");
  put(root, "class/net/eth1/speed", "25000\n");
  mk(root, "class/net/lo");
  put(root, "class/net/lo/operstate", "unknown\n");

  topo_nic_t* nics = NULL;
  int n = 0;
  ck_assert_int_eq(topo_nics_scan(root, &nics, &n), ncclSuccess);
  ck_assert_int_eq(n, 3); /* mlx5_0:1, rxe0:1, eth1; not lo */
  /* in one order on every host (a NIC's index is its rail): RDMA ports, then by name */
  ck_assert_str_eq(nics[0].name, "mlx5_0");
  ck_assert_str_eq(nics[1].name, "rxe0");
  ck_assert_str_eq(nics[2].name, "eth1");
  const topo_nic_t *mlx = NULL, *rxe = NULL, *e1 = NULL;
  for (int i = 0; i < n; i++) {
    if (strcmp(nics[i].name, "mlx5_0") == 0) mlx = &nics[i];
    if (strcmp(nics[i].name, "rxe0") == 0) rxe = &nics[i];
    if (strcmp(nics[i].name, "eth1") == 0) e1 = &nics[i];
  }
  ck_assert(mlx && rxe && e1);
  ck_assert(mlx->rdma && mlx->active);
  ck_assert_int_eq(mlx->port, 1);
  ck_assert_int_eq(mlx->speed_mbps, 200000);
  ck_assert_int_eq(mlx->bus_id, bid("0000:19:00.0"));
  ck_assert_int_eq(mlx->numa, 0);
  ck_assert_str_eq(mlx->pci_path, "0000:15:01.0");
  ck_assert(rxe->rdma && !rxe->active);
  ck_assert_int_eq(rxe->bus_id, -1);
  ck_assert(!e1->rdma && e1->active);
  ck_assert_int_eq(e1->speed_mbps, 25000);
  ck_assert_int_eq(e1->numa, 1);
  ck_assert_str_eq(e1->pci_path, "0000:5d:02.0");

  /* GPU-NIC paths by the GPU-pair rules */
  topo_gpu_t g = {.bus_id = bid("0000:18:00.0"), .numa = 0};
  snprintf(g.pci_path, sizeof(g.pci_path), "0000:15:01.0");
  ck_assert_int_eq(topo_gpu_nic_path(&g, mlx), TOPO_PATH_PIX);
  ck_assert_int_eq(topo_gpu_nic_path(&g, e1), TOPO_PATH_SYS);  /* another NUMA node */
  ck_assert_int_eq(topo_gpu_nic_path(&g, rxe), TOPO_PATH_SYS); /* virtual */
  ck_assert_int_eq(topo_gpu_nic_path(NULL, mlx), TOPO_PATH_SYS);
  topo_gpu_t deep = g; /* two switches below the shared one */
  snprintf(deep.pci_path, sizeof(deep.pci_path), "0000:15:01.0/0000:16:00.0/0000:17:08.0");
  ck_assert_int_eq(topo_gpu_nic_path(&deep, mlx), TOPO_PATH_PXB);
  topo_gpu_t same_node = {.bus_id = bid("0000:3b:00.0"), .numa = 1};
  snprintf(same_node.pci_path, sizeof(same_node.pci_path), "0000:3a:00.0");
  ck_assert_int_eq(topo_gpu_nic_path(&same_node, e1), TOPO_PATH_PHB);

  /* A dump lists the detected NICs in stock's form (<net> in <nic> in the NIC's <pci>), and
   * parsing it gives them back as the system's NICs */
  topo_system_t* sys = NULL;
  ck_assert_int_eq(topo_system_build(&g, 1, NULL, 0, "test", &sys), ncclSuccess);
  sys->nics = nics;
  sys->nnics = n;
  char* text = NULL;
  ck_assert_int_eq(topo_xml_format(sys, &text), ncclSuccess);
  const char* pci = strstr(text, "<pci busid=\"0000:19:00.0\" class=\"0x020000\"");
  ck_assert_ptr_nonnull(pci);
  ck_assert_ptr_nonnull(strstr(pci, "<nic>"));
  ck_assert_ptr_nonnull(strstr(pci, "<net name=\"mlx5_0\" dev=\""));
  ck_assert_ptr_nonnull(strstr(pci, "speed=\"200000\" port=\"1\""));
  topo_system_t* back = NULL;
  ck_assert_int_eq(topo_xml_parse(text, "round trip", &back), ncclSuccess);
  ck_assert_int_eq(back->nnics, n);
  for (int i = 0; i < n; i++) {
    const topo_nic_t* b = NULL;
    for (int k = 0; k < back->nnics; k++)
      if (strcmp(back->nics[k].name, nics[i].name) == 0) b = &back->nics[k];
    ck_assert_msg(b != NULL, "%s missing after the round trip", nics[i].name);
    ck_assert_int_eq(b->bus_id, nics[i].bus_id);
    ck_assert_int_eq(b->numa, nics[i].numa);
    ck_assert_int_eq(b->port, nics[i].port);
    ck_assert_int_eq(b->speed_mbps, nics[i].speed_mbps);
    ck_assert_int_eq(b->rdma, nics[i].rdma);
    ck_assert_int_eq(b->active, nics[i].active);
    ck_assert_str_eq(b->pci_path, nics[i].pci_path);
  }
  topo_system_t* bad = NULL;
  ck_assert_int_eq(topo_xml_parse("<system><nic port=\"1\"/></system>", "bad", &bad),
                   ncclInvalidUsage); /* a nic sits in a <cpu> or <pci> */
  ck_assert_ptr_null(bad);
  free(text);
  topo_system_free(back);
  topo_system_free(sys); /* frees nics */
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* hwloc (when this machine has it) and sysfs agree on every PCI function: bridges and, where
 * sysfs knows it, the NUMA node. */
START_TEST(hwloc_agrees_with_sysfs) {
  DIR* d = opendir("/sys/bus/pci/devices");
  ck_assert_ptr_nonnull(d);
  struct dirent* e;
  int checked = 0, hwloc_known = 0;
  while ((e = readdir(d)) != NULL) {
    int64_t id = topo_busid_parse(e->d_name);
    if (id < 0) continue;
    char link[PATH_MAX], real[PATH_MAX], chain[TOPO_PCI_PATH_MAX], hpath[TOPO_PCI_PATH_MAX];
    snprintf(link, sizeof(link), "/sys/bus/pci/devices/%s", e->d_name);
    int64_t self = -1;
    ck_assert_ptr_nonnull(realpath(link, real));
    ck_assert(topo_sysfs_pci_chain(real, chain, &self));
    ck_assert_int_eq(self, id);
    int hnuma = -2;
    checked++;
    if (!topo_hwloc_pci(id, hpath, &hnuma)) continue;
    hwloc_known++;
    ck_assert_msg(strcmp(hpath, chain) == 0, "%s: hwloc says bridges '%s', sysfs '%s'", e->d_name,
                  hpath, chain);
  }
  closedir(d);
  ck_assert_int_gt(checked, 0);
  void* lib = dlopen("libhwloc.so.15", RTLD_NOW | RTLD_LOCAL);
  if (lib != NULL) { /* hwloc is installed: it must know them all */
    dlclose(lib);
    ck_assert_int_eq(hwloc_known, checked);
  }
}
END_TEST

START_TEST(cpu_lists_and_affinity) {
  cpu_set_t s, allowed, out;
  ck_assert(topo_cpulist_parse("0-3,8,10-11\n", &s));
  ck_assert_int_eq(CPU_COUNT(&s), 7);
  ck_assert(CPU_ISSET(8, &s) && CPU_ISSET(11, &s) && !CPU_ISSET(9, &s));
  ck_assert(!topo_cpulist_parse("3-1", &s));
  ck_assert(!topo_cpulist_parse("a", &s));
  ck_assert(!topo_cpulist_parse("1,,", &s) || CPU_COUNT(&s) == 1);
  CPU_ZERO(&allowed);
  CPU_SET(2, &allowed);
  CPU_SET(9, &allowed);
  ck_assert(topo_cpu_affinity("0-3", &allowed, false, &out));
  ck_assert_int_eq(CPU_COUNT(&out), 1); /* the part the process may use */
  ck_assert(CPU_ISSET(2, &out));
  ck_assert(topo_cpu_affinity("0-3", &allowed, true, &out)); /* NCCL_IGNORE_CPU_AFFINITY=1 */
  ck_assert_int_eq(CPU_COUNT(&out), 4);
  ck_assert(!topo_cpu_affinity("4-7", &allowed, false, &out)); /* nothing in common */
  ck_assert(!topo_cpu_affinity("", &allowed, false, &out));
  ck_assert(!topo_cpu_affinity(NULL, &allowed, true, &out));
}
END_TEST

int main(void) {
  Suite* s = suite_create("topo_nic");
  TCase* tc = tcase_create("topo_nic");
  tcase_add_test(tc, pci_chain_of_sysfs_paths);
  tcase_add_test(tc, scan_fake_sysfs);
  tcase_add_test(tc, hwloc_agrees_with_sysfs);
  tcase_add_test(tc, cpu_lists_and_affinity);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
