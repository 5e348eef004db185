/* Helpers for the tests that need an RDMA device (see rdma_env.h). */
#include "rdma_env.h"

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define RDMA_SYSFS "/sys/class/infiniband"

int rdma_count_devices(void) {
  DIR* d = opendir(RDMA_SYSFS);
  if (d == NULL) return 0;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

static bool rdma_any_port_active(void) {
  DIR* d = opendir(RDMA_SYSFS);
  if (d == NULL) return false;
  bool active = false;
  struct dirent* e;
  while (!active && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[512], state[64] = "";
    snprintf(path, sizeof(path), RDMA_SYSFS "/%s/ports/1/state", e->d_name);
    FILE* f = fopen(path, "re");
    if (f == NULL) continue;
    if (fgets(state, sizeof(state), f) != NULL) active = strstr(state, "ACTIVE") != NULL;
    fclose(f);
  }
  closedir(d);
  return active;
}

void rdma_require_device(void) {
  const char* why = NULL;
  if (rdma_count_devices() == 0)
    why = "no RDMA device here (" RDMA_SYSFS
          " is empty); the rdma_guest test runs this inside "
          "the Soft-RoCE guest";
  else if (!rdma_any_port_active())
    why = "no RDMA port is ACTIVE";
  else if (geteuid() != 0)
    why = "must run as root (adds RDMA devices and links; the guest runs as root)";
  if (why == NULL) return;
  printf("SKIP: %s\n", why);
  fflush(stdout);
  exit(RDMA_SKIP);
}

int rdma_log_count(const char* dir, const char* const* needles) {
  DIR* d = opendir(dir);
  if (d == NULL) return 0;
  int hits = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[600], line[2048];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE* f = fopen(path, "re");
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
      bool all = true;
      for (int i = 0; needles[i] != NULL && all; i++) all = strstr(line, needles[i]) != NULL;
      hits += all;
    }
    if (f != NULL) fclose(f);
  }
  closedir(d);
  return hits;
}

int rdma_sh(const char* fmt, ...) {
  char cmd[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cmd, sizeof(cmd), fmt, ap);
  va_end(ap);
  char full[1200];
  snprintf(full, sizeof(full), "( %s ) 1>&2", cmd);
  fflush(stdout);
  fflush(stderr);
  int st = system(full);
  if (st == -1) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
