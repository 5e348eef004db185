/* CPU and memory affinity: host threads that serve a GPU run on its local CPUs, and their pinned
 * buffers live on its NUMA node. The CPU list comes from sysfs (topo_gpu_t.cpus); memory placement
 * uses libnuma, loaded at run time (absent: one INFO line, the kernel's first-touch placement). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>

#include "topo/topo_sys.h"

#define TOPO_NUMA_LIB "libnuma.so.1"

bool topo_cpulist_parse(const char* text, cpu_set_t* out) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (text == NULL) return false;
  const char* p = text;
  while (*p != '\0' && *p != '\n') {
    char* end = NULL;
    long a = strtol(p, &end, 10);
    if (end == p || a < 0 || a >= CPU_SETSIZE) return false;
    long b = a;
    p = end;
    if (*p == '-') {
      b = strtol(p + 1, &end, 10);
      if (end == p + 1 || b < a || b >= CPU_SETSIZE) return false;
      p = end;
    }
    for (long c = a; c <= b; c++) CPU_SET((int)c, &set);
    if (*p == ',')
      p++;
    else if (*p != '\0' && *p != '\n')
      return false;
  }
  *out = set;
  return true;
}

bool topo_cpu_affinity(const char* gpu_cpus, const cpu_set_t* allowed, bool ignore_mask,
                       cpu_set_t* out) {
  cpu_set_t gpu, res;
  if (gpu_cpus == NULL || gpu_cpus[0] == '\0' || !topo_cpulist_parse(gpu_cpus, &gpu)) return false;
  if (ignore_mask || allowed == NULL)
    res = gpu;
  else
    CPU_AND(&res, &gpu, allowed);
  if (CPU_COUNT(&res) == 0) return false;
  *out = res;
  return true;
}

typedef struct topo_numa {
  int (*available)(void);
  void (*tonode_memory)(void* start, size_t size, int node);
} topo_numa_t;

static pthread_once_t topo_numa_once = PTHREAD_ONCE_INIT;
static topo_numa_t topo_numa_fns;
static bool topo_numa_ok;

static void topo_numa_load(void) {
  void* lib = dlopen(TOPO_NUMA_LIB, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    INFO(NCCL_INIT, "NUMA: libnuma not available (%s); host buffers are placed on first touch",
         dlerror());
    return;
  }
  *(void**)&topo_numa_fns.available = dlsym(lib, "numa_available");
  *(void**)&topo_numa_fns.tonode_memory = dlsym(lib, "numa_tonode_memory");
  if (topo_numa_fns.available == NULL || topo_numa_fns.tonode_memory == NULL ||
      topo_numa_fns.available() < 0) {
    INFO(NCCL_INIT,
         "NUMA: %s is unusable here (no NUMA support?); host buffers are placed on "
         "first touch",
         TOPO_NUMA_LIB);
    dlclose(lib);
    return;
  }
  topo_numa_ok = true; /* the library stays loaded */
}

bool topo_numa_bind_memory(void* ptr, size_t bytes, int node) {
  if (node < 0 || ptr == NULL || bytes == 0) return false;
  pthread_once(&topo_numa_once, topo_numa_load);
  if (!topo_numa_ok) return false;
  topo_numa_fns.tonode_memory(ptr, bytes, node);
  return true;
}
