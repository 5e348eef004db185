/* Private to src/topo (and its unit tests): building a topo_system_t, and the two sources of facts
 * about GPUs (sysfs, NVML). Other layers use src/topo/topo.h only. */
#ifndef BATON_TOPO_SYS_H
#define BATON_TOPO_SYS_H

#include "topo/topo.h"

/* Per NVLink, from NVML (stock's limit on links per GPU is 18). */
#define TOPO_MAX_NVLINKS 18
#define TOPO_MAX_GPUS 256 /* per host */
/* Per-channel bandwidth a channel (one block of the CUDA executor) is expected to move, for the
 * channel count. Measured on 2x H200 (NV18), 1 GiB all_reduce/all_gather/sendrecv with 24, 32,
 * 48 and 64 channels: bandwidth grew with the channel count, about 5.5 GB/s per channel at 64
 * (docs/gpu-results.md, run 5). */
#define TOPO_CHANNEL_GBS 6.0
#define TOPO_MAX_CHANNELS 64

/* One NVLink count from a GPU to another (bus ids), while a system is being assembled. */
typedef struct topo_link {
  int64_t from, to;
  int count;
} topo_link_t;

/* Assembles a system from gpus[0..n) (copied, then sorted by bus id) and links between them
 * (links naming an absent GPU are an error: ncclInvalidUsage after a WARN naming `what`). Computes
 * paths and bandwidths. */
ncclResult_t topo_system_build(const topo_gpu_t* gpus, int n, const topo_link_t* links, int nlinks,
                               const char* what, topo_system_t** out);
/* Path and bandwidth between two GPUs joined by nvlinks direct NVLinks (pure). */
topo_path_t topo_gpu_pair_path(const topo_gpu_t* a, const topo_gpu_t* b, int nvlinks);
/* The PCI part of it: two functions by their bridges (pci_path) and NUMA nodes (PIX, PXB, PHB or
 * SYS). */
topo_path_t topo_pci_pair_path(const char* path_a, int numa_a, const char* path_b, int numa_b);
double topo_gpu_pair_bw(const topo_gpu_t* a, const topo_gpu_t* b, int nvlinks, topo_path_t path);

/* The first line of a small file (sysfs, /proc) without its newline; "" when unreadable. */
void topo_read_line(const char* path, char* buf, size_t len);
/* Fills g's numa, cpus and pci_path from <sysfs_root>/bus/pci/devices/<bus id> (sysfs_root is
 * "/sys", or a fake tree in tests). Missing entries leave the unknown values; never fails. */
void topo_sysfs_gpu(const char* sysfs_root, topo_gpu_t* g);

/* The PCI function a sysfs device path (a real path under /sys/devices) belongs to: the last
 * bus-id component is the function (*self), the bus ids before it are its bridges (out, as
 * topo_gpu_t.pci_path). false when the path has no PCI component (a virtual device). */
bool topo_sysfs_pci_chain(const char* real_path, char out[TOPO_PCI_PATH_MAX], int64_t* self);
/* Where hwloc (loaded at run time) puts the PCI function bus_id: its bridges and NUMA node.
 * false when hwloc is unavailable or does not know the function (src/topo/hwloc.c). */
bool topo_hwloc_pci(int64_t bus_id, char path[TOPO_PCI_PATH_MAX], int* numa);
/* NICs below sysfs_root ("/sys", or a fake tree in tests), with their facts from sysfs only. */
ncclResult_t topo_nics_scan(const char* sysfs_root, topo_nic_t** out, int* n);

/* What NVML says about one GPU. */
typedef struct topo_nvml_gpu {
  int sm;             /* 0 unknown */
  int nvswitch_links; /* active links ending at an NVSwitch */
  int nlinks;         /* active links ending at a GPU */
  int64_t remote[TOPO_MAX_NVLINKS];
} topo_nvml_gpu_t;
/* ncclSystemError (no WARN; one INFO per process) when NVML is unusable or does not know the GPU.
 */
ncclResult_t topo_nvml_gpu(int64_t bus_id, topo_nvml_gpu_t* out);

#endif /* BATON_TOPO_SYS_H */
