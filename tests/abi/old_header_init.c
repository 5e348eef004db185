/* A program built against the reference NCCL 2.28.9 header (its 80-byte ncclConfig_t and version
 * 22809, passed as OLD_HEADER), linked with Baton: it must initialize a communicator with that
 * config (nonblocking, a name, channel bounds), see the values it set honoured, run an AllReduce
 * on it and check the sum. One rank on the host executor: no GPU needed. Exit 0 when all holds. */
#include OLD_HEADER

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...)                 \
  do {                            \
    fprintf(stderr, "FAIL: ");    \
    fprintf(stderr, __VA_ARGS__); \
    fprintf(stderr, "\n");        \
    return 1;                     \
  } while (0)

int main(void) {
  if (sizeof(ncclConfig_t) != 80)
    FAIL("built against a header whose config is %zu bytes, not 2.28's 80", sizeof(ncclConfig_t));
  /* The config sits at the end of a block whose following bytes are garbage: Baton must not read
   * past the 80 bytes the program knows. */
  struct {
    ncclConfig_t cfg;
    int after[16];
  } mem;
  memset(&mem, 0x7f, sizeof(mem));
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  mem.cfg = init;
  mem.cfg.blocking = 0;
  mem.cfg.commName = "old-header";
  mem.cfg.maxCTAs = 2;
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  if (ncclGetUniqueId(&id) != ncclSuccess) FAIL("ncclGetUniqueId");
  ncclResult_t res = ncclCommInitRankConfig(&comm, 1, id, 0, &mem.cfg);
  if (res != ncclSuccess && res != ncclInProgress)
    FAIL("ncclCommInitRankConfig: %s", ncclGetErrorString(res));
  for (int i = 0; i < 30000; i++) { /* nonblocking: poll until done, 30 s at most */
    if (ncclCommGetAsyncError(comm, &res) != ncclSuccess) FAIL("ncclCommGetAsyncError");
    if (res != ncclInProgress) break;
    usleep(1000);
  }
  if (res != ncclSuccess) FAIL("init finished with %s", ncclGetErrorString(res));
  int version = 0;
  if (ncclGetVersion(&version) != ncclSuccess || version < NCCL_VERSION(2, 28, 0))
    FAIL("ncclGetVersion gave %d", version);
  float in[64], out[64];
  for (int i = 0; i < 64; i++) in[i] = (float)i * 0.5f;
  res = ncclAllReduce(in, out, 64, ncclFloat32, ncclSum, comm, NULL);
  if (res != ncclSuccess && res != ncclInProgress)
    FAIL("ncclAllReduce: %s", ncclGetErrorString(res));
  for (int i = 0; i < 30000; i++) {
    if (ncclCommGetAsyncError(comm, &res) != ncclSuccess) FAIL("ncclCommGetAsyncError");
    if (res != ncclInProgress) break;
    usleep(1000);
  }
  if (res != ncclSuccess) FAIL("AllReduce finished with %s", ncclGetErrorString(res));
  for (int i = 0; i < 64; i++)
    if (out[i] != (float)i * 0.5f)
      FAIL("element %d is %g, expected %g", i, out[i], (float)i * 0.5f);
  if (ncclCommDestroy(comm) != ncclSuccess) FAIL("ncclCommDestroy");
  printf("OK: a 2.28-header program (80-byte ncclConfig_t) initialized and reduced on Baton\n");
  return 0;
}
