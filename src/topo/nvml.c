/* NVML through dlopen("libnvidia-ml.so.1"): which NVLinks of a GPU are up and where each one ends
 * (another GPU, or an NVSwitch), and the GPU's compute capability. Loaded and initialised once per
 * process; an absent or failing NVML is one INFO line and every query returns ncclSystemError, so
 * detection falls back to PCIe facts. The few NVML types used are declared here (NVML's ABI). */
#include <dlfcn.h>
#include <pthread.h>

#include "topo/topo_sys.h"

#define NVML_LIB "libnvidia-ml.so.1"

typedef int nvml_return_t; /* nvmlReturn_t: 0 is NVML_SUCCESS */
typedef struct nvml_device_st* nvml_device_t;
typedef struct nvml_pci_info { /* nvmlPciInfo_t (the _v2 queries' layout) */
  char bus_id_legacy[16];
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pci_device_id;
  unsigned int pci_subsystem_id;
  char bus_id[32];
} nvml_pci_info_t;
#define NVML_SUCCESS 0
#define NVML_FEATURE_ENABLED 1
/* nvmlIntNvLinkDeviceType_t */
#define NVML_NVLINK_DEVICE_TYPE_GPU 0x00
#define NVML_NVLINK_DEVICE_TYPE_SWITCH 0x02

static struct {
  nvml_return_t (*init)(void);
  const char* (*error_string)(nvml_return_t r);
  nvml_return_t (*handle_by_pci_bus_id)(const char* bus_id, nvml_device_t* dev);
  nvml_return_t (*nvlink_state)(nvml_device_t dev, unsigned int link, int* active);
  nvml_return_t (*nvlink_remote_pci)(nvml_device_t dev, unsigned int link, nvml_pci_info_t* pci);
  /* optional */
  nvml_return_t (*nvlink_remote_type)(nvml_device_t dev, unsigned int link, int* type);
  nvml_return_t (*compute_capability)(nvml_device_t dev, int* major, int* minor);
} nvml;
static pthread_once_t nvml_once = PTHREAD_ONCE_INIT;
static bool nvml_ok;
/* Queries are serialised and their answers kept: concurrent queries of one GPU from two threads
 * have been seen to miss all of its NVLinks (H200, in a VM), and two ranks of one process must
 * see the same links. */
static pthread_mutex_t nvml_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  int64_t bus_id;
  topo_nvml_gpu_t gpu;
} nvml_cache[TOPO_MAX_GPUS];
static int nvml_ncached;

static void nvml_load(void) {
  void* h = dlopen(NVML_LIB, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    INFO(NCCL_INIT | NCCL_GRAPH, "NVML: cannot load %s (%s); NVLinks are not detected", NVML_LIB,
         dlerror());
    return;
  }
  struct {
    void** slot;
    const char* name;
    bool required;
  } syms[] = {
      {(void**)&nvml.init, "nvmlInit_v2", true},
      {(void**)&nvml.error_string, "nvmlErrorString", true},
      {(void**)&nvml.handle_by_pci_bus_id, "nvmlDeviceGetHandleByPciBusId_v2", true},
      {(void**)&nvml.nvlink_state, "nvmlDeviceGetNvLinkState", true},
      {(void**)&nvml.nvlink_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2", true},
      {(void**)&nvml.nvlink_remote_type, "nvmlDeviceGetNvLinkRemoteDeviceType", false},
      {(void**)&nvml.compute_capability, "nvmlDeviceGetCudaComputeCapability", false},
  };
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    *syms[i].slot = dlsym(h, syms[i].name);
    if (*syms[i].slot == NULL && syms[i].required) {
      INFO(NCCL_INIT | NCCL_GRAPH, "NVML: %s has no %s; NVLinks are not detected", NVML_LIB,
           syms[i].name);
      dlclose(h);
      return;
    }
  }
  nvml_return_t r = nvml.init();
  if (r != NVML_SUCCESS) {
    INFO(NCCL_INIT | NCCL_GRAPH, "NVML: nvmlInit_v2 failed (%d: %s); NVLinks are not detected", r,
         nvml.error_string(r));
    dlclose(h);
    return;
  }
  nvml_ok = true; /* stays loaded and initialised for the life of the process */
}

static ncclResult_t nvml_query(int64_t bus_id, topo_nvml_gpu_t* out) {
  char text[TOPO_BUSID_LEN];
  nvml_device_t dev;
  topo_nvml_gpu_t g;
  topo_busid_format(bus_id, text);
  nvml_return_t r = nvml.handle_by_pci_bus_id(text, &dev);
  if (r != NVML_SUCCESS) {
    INFO(NCCL_GRAPH, "NVML: no device at %s (%s)", text, nvml.error_string(r));
    return ncclSystemError;
  }
  memset(&g, 0, sizeof(g));
  int major = 0, minor = 0;
  if (nvml.compute_capability != NULL &&
      nvml.compute_capability(dev, &major, &minor) == NVML_SUCCESS)
    g.sm = major * 10 + minor;
  for (unsigned int link = 0; link < TOPO_MAX_NVLINKS; link++) {
    int active = 0;
    nvml_pci_info_t pci;
    /* Links past the GPU's last answer an error (not supported / invalid argument): skip them. */
    nvml_return_t lr = nvml.nvlink_state(dev, link, &active);
    if (lr != NVML_SUCCESS || active != NVML_FEATURE_ENABLED) {
      TRACE(NCCL_GRAPH, "NVML: %s link %u: state %d (%s)", text, link, active,
            nvml.error_string(lr));
      continue;
    }
    memset(&pci, 0, sizeof(pci));
    lr = nvml.nvlink_remote_pci(dev, link, &pci);
    if (lr != NVML_SUCCESS) {
      INFO(NCCL_GRAPH, "NVML: %s link %u is up but its far end is unknown (%s)", text, link,
           nvml.error_string(lr));
      continue;
    }
    pci.bus_id[sizeof(pci.bus_id) - 1] = '\0';
    int64_t remote = topo_busid_parse(pci.bus_id);
    int type = -1;
    if (nvml.nvlink_remote_type == NULL ||
        nvml.nvlink_remote_type(dev, link, &type) != NVML_SUCCESS) {
      /* Older NVML: a far end NVML knows as a device is a GPU, anything else a switch. */
      nvml_device_t far;
      type = remote >= 0 && nvml.handle_by_pci_bus_id(pci.bus_id, &far) == NVML_SUCCESS
                 ? NVML_NVLINK_DEVICE_TYPE_GPU
                 : NVML_NVLINK_DEVICE_TYPE_SWITCH;
    }
    if (type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
      g.nvswitch_links++;
    } else if (type == NVML_NVLINK_DEVICE_TYPE_GPU && remote >= 0) {
      g.remote[g.nlinks++] = remote;
    }
  }
  *out = g;
  return ncclSuccess;
}

ncclResult_t topo_nvml_gpu(int64_t bus_id, topo_nvml_gpu_t* out) {
  ncclResult_t res = ncclSuccess;
  pthread_once(&nvml_once, nvml_load);
  if (!nvml_ok) return ncclSystemError;
  pthread_mutex_lock(&nvml_lock);
  int i = 0;
  while (i < nvml_ncached && nvml_cache[i].bus_id != bus_id) i++;
  if (i < nvml_ncached) {
    *out = nvml_cache[i].gpu;
  } else {
    topo_nvml_gpu_t g;
    res = nvml_query(bus_id, &g);
    if (res == ncclSuccess) {
      if (nvml_ncached < TOPO_MAX_GPUS) {
        nvml_cache[nvml_ncached].bus_id = bus_id;
        nvml_cache[nvml_ncached++].gpu = g;
      }
      *out = g;
    }
  }
  pthread_mutex_unlock(&nvml_lock);
  return res;
}
