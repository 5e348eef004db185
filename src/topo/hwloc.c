/* hwloc without linking it: dlopen("libhwloc.so.15") (hwloc 2.x) once, load this machine's
 * topology with its PCI devices and bridges, and answer where a PCI function sits: the chain of
 * PCI bridges above it (the format of topo_gpu_t.pci_path) and its NUMA node. Absent library, an
 * hwloc of another major version, or a failing load: one INFO line and sysfs answers instead.
 * Only hwloc.h is needed at build time (libhwloc-dev); the inline helpers of its headers are not
 * used, since they would call hwloc by link-time name. */
#include "topo/topo_sys.h"

#ifdef BATON_HAVE_HWLOC
#include <dlfcn.h>
#include <hwloc.h>
#include <pthread.h>

#define TOPO_HWLOC_LIB "libhwloc.so.15"

typedef struct topo_hwloc {
  unsigned (*get_api_version)(void);
  int (*topology_init)(hwloc_topology_t* topo);
  int (*topology_set_io_types_filter)(hwloc_topology_t topo, enum hwloc_type_filter_e filter);
  int (*topology_set_type_filter)(hwloc_topology_t topo, hwloc_obj_type_t type,
                                  enum hwloc_type_filter_e filter);
  int (*topology_load)(hwloc_topology_t topo);
  void (*topology_destroy)(hwloc_topology_t topo);
  unsigned (*get_nbobjs_by_depth)(hwloc_topology_t topo, int depth);
  hwloc_obj_t (*get_obj_by_depth)(hwloc_topology_t topo, int depth, unsigned idx);
  int (*bitmap_first)(hwloc_const_bitmap_t set);
  hwloc_topology_t topo;
} topo_hwloc_t;

static pthread_once_t topo_hwloc_once = PTHREAD_ONCE_INIT;
static topo_hwloc_t topo_hwloc_state;
static bool topo_hwloc_ok;

static void* topo_hwloc_sym(void* lib, const char* name, bool* ok) {
  void* fn = dlsym(lib, name);
  if (fn == NULL && *ok) {
    INFO(NCCL_INIT | NCCL_GRAPH, "Topology: %s has no %s; using sysfs for PCI paths",
         TOPO_HWLOC_LIB, name);
    *ok = false;
  }
  return fn;
}

static void topo_hwloc_load(void) {
  void* lib = dlopen(TOPO_HWLOC_LIB, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    INFO(NCCL_INIT | NCCL_GRAPH, "Topology: hwloc not available (%s); using sysfs for PCI paths",
         dlerror());
    return;
  }
  topo_hwloc_t h;
  bool ok = true;
  memset(&h, 0, sizeof(h));
  *(void**)&h.get_api_version = topo_hwloc_sym(lib, "hwloc_get_api_version", &ok);
  *(void**)&h.topology_init = topo_hwloc_sym(lib, "hwloc_topology_init", &ok);
  *(void**)&h.topology_set_io_types_filter =
      topo_hwloc_sym(lib, "hwloc_topology_set_io_types_filter", &ok);
  *(void**)&h.topology_set_type_filter = topo_hwloc_sym(lib, "hwloc_topology_set_type_filter", &ok);
  *(void**)&h.topology_load = topo_hwloc_sym(lib, "hwloc_topology_load", &ok);
  *(void**)&h.topology_destroy = topo_hwloc_sym(lib, "hwloc_topology_destroy", &ok);
  *(void**)&h.get_nbobjs_by_depth = topo_hwloc_sym(lib, "hwloc_get_nbobjs_by_depth", &ok);
  *(void**)&h.get_obj_by_depth = topo_hwloc_sym(lib, "hwloc_get_obj_by_depth", &ok);
  *(void**)&h.bitmap_first = topo_hwloc_sym(lib, "hwloc_bitmap_first", &ok);
  if (!ok) {
    dlclose(lib);
    return;
  }
  unsigned v = h.get_api_version();
  if ((v >> 16) != (HWLOC_API_VERSION >> 16)) {
    INFO(NCCL_INIT | NCCL_GRAPH,
         "Topology: %s is hwloc API %x, Baton was built for %x; using sysfs for PCI paths",
         TOPO_HWLOC_LIB, v, (unsigned)HWLOC_API_VERSION);
    dlclose(lib);
    return;
  }
  if (h.topology_init(&h.topo) != 0) {
    INFO(NCCL_INIT | NCCL_GRAPH, "Topology: hwloc_topology_init failed; using sysfs for PCI paths");
    dlclose(lib);
    return;
  }
  /* Every PCI device and every bridge (a switch's ports are what makes PIX and PXB). */
  h.topology_set_io_types_filter(h.topo, HWLOC_TYPE_FILTER_KEEP_ALL);
  h.topology_set_type_filter(h.topo, HWLOC_OBJ_BRIDGE, HWLOC_TYPE_FILTER_KEEP_ALL);
  if (h.topology_load(h.topo) != 0) {
    INFO(NCCL_INIT | NCCL_GRAPH,
         "Topology: hwloc could not load this machine's topology (%s); "
         "using sysfs for PCI paths",
         strerror(errno));
    h.topology_destroy(h.topo);
    dlclose(lib);
    return;
  }
  /* The library and the loaded topology stay for the life of the process. */
  topo_hwloc_state = h;
  topo_hwloc_ok = true;
  INFO(NCCL_INIT | NCCL_GRAPH, "Topology: hwloc %u.%u loaded (%u PCI devices)", v >> 16,
       (v >> 8) & 0xff, h.get_nbobjs_by_depth(h.topo, HWLOC_TYPE_DEPTH_PCI_DEVICE));
}

static int64_t topo_hwloc_busid(const struct hwloc_pcidev_attr_s* a) {
  return (int64_t)(((uint64_t)a->domain << 20) | ((uint64_t)a->bus << 12) |
                   ((uint64_t)a->dev << 4) | (uint64_t)a->func);
}

bool topo_hwloc_pci(int64_t bus_id, char path[TOPO_PCI_PATH_MAX], int* numa) {
  pthread_once(&topo_hwloc_once, topo_hwloc_load);
  if (!topo_hwloc_ok || bus_id < 0) return false;
  const topo_hwloc_t* h = &topo_hwloc_state;
  unsigned n = h->get_nbobjs_by_depth(h->topo, HWLOC_TYPE_DEPTH_PCI_DEVICE);
  hwloc_obj_t dev = NULL;
  for (unsigned i = 0; i < n && dev == NULL; i++) {
    hwloc_obj_t o = h->get_obj_by_depth(h->topo, HWLOC_TYPE_DEPTH_PCI_DEVICE, i);
    if (o != NULL && topo_hwloc_busid(&o->attr->pcidev) == bus_id) dev = o;
  }
  if (dev == NULL) return false;
  /* Bridges from the device up to the host bridge, then written top-down. */
  int64_t chain[32];
  int depth = 0;
  hwloc_obj_t o = dev->parent;
  for (; o != NULL && o->type == HWLOC_OBJ_BRIDGE; o = o->parent) {
    if (o->attr->bridge.upstream_type != HWLOC_OBJ_BRIDGE_PCI) continue; /* the host bridge */
    if (depth < (int)(sizeof(chain) / sizeof(chain[0])))
      chain[depth++] = topo_hwloc_busid(&o->attr->bridge.upstream.pci);
  }
  char out[TOPO_PCI_PATH_MAX] = "";
  size_t len = 0;
  for (int k = depth - 1; k >= 0; k--) {
    char id[TOPO_BUSID_LEN];
    topo_busid_format(chain[k], id);
    int w = snprintf(out + len, sizeof(out) - len, "%s%s", len ? "/" : "", id);
    if (w < 0 || (size_t)w >= sizeof(out) - len) return false;
    len += (size_t)w;
  }
  while (o != NULL && o->nodeset == NULL) o = o->parent; /* the first non-I/O ancestor */
  *numa = o != NULL ? h->bitmap_first(o->nodeset) : -1;
  snprintf(path, TOPO_PCI_PATH_MAX, "%s", out);
  return true;
}

#else  /* !BATON_HAVE_HWLOC */
bool topo_hwloc_pci(int64_t bus_id, char path[TOPO_PCI_PATH_MAX], int* numa) {
  static int said;
  if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
    INFO(NCCL_INIT | NCCL_GRAPH,
         "Topology: built without hwloc.h (libhwloc-dev); using sysfs for PCI paths");
  return false;
}
#endif /* BATON_HAVE_HWLOC */
