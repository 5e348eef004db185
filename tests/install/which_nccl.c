/* Built by tests/install/check_install.sh with `pkg-config --cflags --libs nccl` and nothing else:
 * prints the file that defines ncclGetVersion in this process ("LOADED <path>") and the version,
 * then creates and destroys a one-rank communicator (NCCL_DEBUG=VERSION prints the banner). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>

int main(void) {
  Dl_info info;
  if (dladdr((void*)ncclGetVersion, &info) == 0 || info.dli_fname == NULL) {
    fprintf(stderr, "dladdr failed\n");
    return 1;
  }
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess) return 1;
  printf("LOADED %s\nVERSION %d\n", info.dli_fname, version);
  fflush(stdout);
  ncclUniqueId id;
  ncclComm_t comm;
  if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess) {
    fprintf(stderr, "init failed: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  return ncclCommDestroy(comm) == ncclSuccess ? 0 : 1;
}
