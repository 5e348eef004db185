/* baton-info: which libnccl.so.2 a program gets, and what this machine offers it.
 *
 *   baton-info [LIBRARY]
 *
 * LIBRARY (default "libnccl.so.2", found the way a program without an rpath finds it: the
 * LD_LIBRARY_PATH, then the system's library cache) is loaded with dlopen; baton-info prints the
 * file that was mapped, whether it is Baton (its build note) or another NCCL, ncclGetVersion,
 * Baton's build options, the GPUs the CUDA runtime sees, the RDMA devices and network interfaces,
 * and the NCCL_* / LD_* variables set in the environment. Exit status: 0 Baton, 1 another NCCL,
 * 2 nothing loaded. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <arpa/inet.h>
#include <cuda_runtime.h>
#include <dirent.h>
#include <dlfcn.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_lib.h"

extern char** environ;

/* Whether the CUDA driver library can be loaded at all. */
static bool have_driver(void) {
  void* h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (h != NULL) dlclose(h);
  return h != NULL;
}

static void print_gpus(void) {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  if (err != cudaSuccess || n == 0) {
    /* The runtime says "insufficient driver" both for an old driver and for none at all. */
    char why[160];
    if (err == cudaErrorInsufficientDriver && !have_driver())
      snprintf(why, sizeof(why), "no CUDA driver: libcuda.so.1 is not installed");
    else if (err == cudaErrorInsufficientDriver)
      snprintf(why, sizeof(why), "the CUDA driver is older than this build's CUDA runtime %d.%d",
               CUDART_VERSION / 1000, CUDART_VERSION % 1000 / 10);
    else
      snprintf(why, sizeof(why), "%s",
               err != cudaSuccess ? cudaGetErrorString(err) : "no CUDA device");
    printf("GPUs: none (%s); communicators run on Baton's host executor\n", why);
    return;
  }
  printf("GPUs: %d\n", n);
  for (int d = 0; d < n; d++) {
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, d) != cudaSuccess) continue;
    printf("  %d: %s, sm_%d%d, %.0f GiB, %d SMs, PCI %04x:%02x:%02x.0\n", d, p.name, p.major,
           p.minor, (double)p.totalGlobalMem / (1 << 30), p.multiProcessorCount, p.pciDomainID,
           p.pciBusID, p.pciDeviceID);
  }
}

static bool read_line(const char* path, char* out, size_t len) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return false;
  bool ok = fgets(out, (int)len, f) != NULL;
  fclose(f);
  if (ok) out[strcspn(out, "\n")] = '\0';
  return ok;
}

/* RDMA devices (InfiniBand, RoCE) from sysfs: name, port state, rate, link layer. */
static void print_rdma(void) {
  DIR* d = opendir("/sys/class/infiniband");
  int n = 0;
  struct dirent* e;
  while (d != NULL && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char ports_dir[512];
    snprintf(ports_dir, sizeof(ports_dir), "/sys/class/infiniband/%s/ports", e->d_name);
    DIR* pd = opendir(ports_dir);
    struct dirent* pe;
    while (pd != NULL && (pe = readdir(pd)) != NULL) {
      if (pe->d_name[0] == '.') continue;
      char path[1024], state[64] = "?", rate[64] = "?", layer[64] = "?";
      snprintf(path, sizeof(path), "%s/%s/state", ports_dir, pe->d_name);
      read_line(path, state, sizeof(state));
      snprintf(path, sizeof(path), "%s/%s/rate", ports_dir, pe->d_name);
      read_line(path, rate, sizeof(rate));
      snprintf(path, sizeof(path), "%s/%s/link_layer", ports_dir, pe->d_name);
      read_line(path, layer, sizeof(layer));
      printf("  %s port %s: %s, %s, %s\n", e->d_name, pe->d_name, state, rate, layer);
      n++;
    }
    if (pd) closedir(pd);
  }
  if (d) closedir(d);
  if (n == 0) printf("  none (no /sys/class/infiniband device)\n");
}

/* Interfaces that are up, with their addresses and link speed. */
static void print_ifaces(void) {
  struct ifaddrs* list = NULL;
  if (getifaddrs(&list) != 0) {
    printf("  (getifaddrs failed)\n");
    return;
  }
  for (struct ifaddrs* a = list; a != NULL; a = a->ifa_next) {
    if (a->ifa_addr == NULL || !(a->ifa_flags & IFF_UP)) continue;
    int fam = a->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    char addr[INET6_ADDRSTRLEN] = "?", speed[32] = "", path[512];
    const void* raw = fam == AF_INET ? (const void*)&((struct sockaddr_in*)a->ifa_addr)->sin_addr
                                     : (const void*)&((struct sockaddr_in6*)a->ifa_addr)->sin6_addr;
    inet_ntop(fam, raw, addr, sizeof(addr));
    snprintf(path, sizeof(path), "/sys/class/net/%s/speed", a->ifa_name);
    char mbps[32];
    if (read_line(path, mbps, sizeof(mbps)) && atoi(mbps) > 0)
      snprintf(speed, sizeof(speed), ", %d Mb/s", atoi(mbps));
    printf("  %s: %s%s%s\n", a->ifa_name, addr, speed,
           (a->ifa_flags & IFF_LOOPBACK) ? " (loopback)" : "");
  }
  freeifaddrs(list);
}

static void print_env(void) {
  int n = 0;
  printf("Environment:\n");
  for (char** e = environ; *e != NULL; e++) {
    if (strncmp(*e, "NCCL_", 5) != 0 && strncmp(*e, "LD_LIBRARY_PATH=", 16) != 0 &&
        strncmp(*e, "LD_PRELOAD=", 11) != 0)
      continue;
    printf("  %s\n", *e);
    n++;
  }
  if (n == 0) printf("  no NCCL_*, LD_LIBRARY_PATH or LD_PRELOAD set\n");
}

int main(int argc, char** argv) {
  if (argc > 2 || (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")))) {
    fprintf(stderr,
            "usage: baton-info [LIBRARY]\n"
            "  LIBRARY: a path or a name for dlopen (default libnccl.so.2, searched like a\n"
            "  program without an rpath would: LD_LIBRARY_PATH, then the system cache)\n"
            "  exit status: 0 Baton, 1 another NCCL, 2 nothing loaded\n");
    return argc == 2 ? 0 : 2;
  }
  const char* spec = argc == 2 ? argv[1] : "libnccl.so.2";
  nccl_lib_t lib;
  char err[PATH_MAX + 256], line[PATH_MAX + 256];
  if (nccl_lib_open(spec, &lib, err, sizeof(err)) != 0) {
    printf("%s: %s\n", spec, err);
    return 2;
  }
  nccl_lib_describe(&lib, line, sizeof(line));
  printf("Library: %s -> %s\n", spec, line);
  printf("ncclGetVersion: %d\n", lib.version);
  if (lib.baton) printf("Build: %s\n", nccl_lib_build_options(&lib));
  print_gpus();
  printf("RDMA devices:\n");
  print_rdma();
  printf("Network interfaces:\n");
  print_ifaces();
  print_env();
  return lib.baton ? 0 : 1;
}
