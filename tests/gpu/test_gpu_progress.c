/* GPU test of the progress marks, the timeline's kernel times and a hang report on GPUs (issue 20):
 * two ranks on GPUs 0 and 1, threads of one process (ncclCommInitAll); with one GPU, both ranks
 * on GPU 0 (NCCL_MULTI_RANK_GPU_ENABLE=1).
 *   1. Five AllReduces of 4 MiB (ring kernels) and five of 32 bytes (the direct kernel, where the
 *      model picks it) on each rank's stream: once the streams are synchronized, each rank's
 *      progress state says 10 calls done, 10 collectives done: the done marks came from the
 *      kernels (mapped host memory), since the host executor is not involved.
 *   2. The timeline (NCCL_BATON_TRACE_FILE) holds at least 5 "kernel" events per rank with device
 *      times, within a few seconds of the host's own events (the device's global timer and the
 *      host's real-time clock agree); the offset is printed.
 *   3. Rank 1 skips the 6th AllReduce: rank 0's kernel waits, and within
 *      NCCL_BATON_HANG_REPORT_SEC (2) + 10 s rank 0 WARNs a report naming rank 1 as the one that
 *      has not called it; ncclCommAbort of both ranks then returns within a second (the kernel
 *      sees the abort flag).
 * Needs a GPU (prints SKIP otherwise). Exit status 0 when every check passed.
 *
 * Build: cmake -DBATON_GPU_TESTS=ON (tests/gpu/CMakeLists.txt). */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/core.h"

#define COUNT (1 << 20)
#define REPORT_SEC 2

static int g_failures;
#define EXPECT(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) {                                                             \
      g_failures++;                                                            \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, "\n");                                                   \
    }                                                                          \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static char* read_file(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* buf = malloc((size_t)n + 1);
  if (buf != NULL && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  if (buf != NULL) buf[n] = '\0';
  fclose(f);
  return buf;
}

static int count(const char* text, const char* needle) {
  int n = 0;
  for (const char* p = text; (p = strstr(p, needle)) != NULL; p += strlen(needle)) n++;
  return n;
}

/* The smallest "ts" of events named name in a trace file (us), or -1. */
static double first_ts(const char* text, const char* name) {
  char key[64];
  snprintf(key, sizeof(key), "\"name\":\"%s\"", name);
  double best = -1;
  for (const char* p = text; (p = strstr(p, key)) != NULL; p += strlen(key)) {
    const char* ts = strstr(p, "\"ts\":");
    if (ts == NULL) break;
    double v = strtod(ts + 5, NULL);
    if (best < 0 || v < best) best = v;
  }
  return best;
}

int main(void) {
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("SKIP: test_gpu_progress needs a GPU (%d visible)\n", ndev);
    return 0;
  }
  int devs[2] = {0, ndev > 1 ? 1 : 0};
  if (ndev < 2) setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1);
  printf("ranks on GPUs %d and %d\n", devs[0], devs[1]);
  char trace[128], log[128];
  snprintf(trace, sizeof(trace), "/tmp/baton-gpu-trace-%d.json", (int)getpid());
  snprintf(log, sizeof(log), "/tmp/baton-gpu-hang-%d.log", (int)getpid());
  setenv("NCCL_BATON_TRACE_FILE", trace, 1);
  setenv("NCCL_BATON_HANG_REPORT_SEC", "2", 1);
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", log, 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  param_reload();
  log_reset();

  ncclComm_t comms[2];
  if (ncclCommInitAll(comms, 2, devs) != ncclSuccess) {
    fprintf(stderr, "ncclCommInitAll failed: %s\n", ncclGetLastError(NULL));
    return 1;
  }
  float* buf[2];
  cudaStream_t st[2];
  for (int r = 0; r < 2; r++) {
    cudaSetDevice(devs[r]);
    cudaMalloc((void**)&buf[r], COUNT * sizeof(float));
    cudaMemset(buf[r], 0, COUNT * sizeof(float));
    cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking);
  }
  cudaDeviceSynchronize();

  /* 1. Done marks from the kernels. */
  const int calls = 10;
  for (int i = 0; i < calls; i++) {
    ncclGroupStart();
    for (int r = 0; r < 2; r++)
      ncclAllReduce(buf[r], buf[r], i < 5 ? COUNT : 8, ncclFloat32, ncclSum, comms[r], st[r]);
    EXPECT(ncclGroupEnd() == ncclSuccess, "AllReduce %d", i);
  }
  for (int r = 0; r < 2; r++) {
    cudaSetDevice(devs[r]);
    EXPECT(cudaStreamSynchronize(st[r]) == cudaSuccess, "stream %d", r);
  }
  usleep(10 * 1000);
  for (int r = 0; r < 2; r++) {
    prog_state_t ps;
    progress_state(comms[r], -1, &ps);
    printf("rank %d: calls %llu, started %llu, done %llu, collectives done %llu\n", r,
           (unsigned long long)ps.seq, (unsigned long long)ps.started, (unsigned long long)ps.done,
           (unsigned long long)ps.coll_done);
    EXPECT(ps.seq == calls && ps.done == calls && ps.coll_done == calls && ps.inflight.seq == 0,
           "rank %d: progress from the kernels: calls %llu done %llu", r,
           (unsigned long long)ps.seq, (unsigned long long)ps.done);
  }

  /* 3. A hang: rank 1 skips the 11th AllReduce. */
  cudaSetDevice(devs[0]);
  EXPECT(ncclAllReduce(buf[0], buf[0], COUNT, ncclFloat32, ncclSum, comms[0], st[0]) == ncclSuccess,
         "the 11th AllReduce did not launch");
  double t0 = now_s();
  bool reported = false;
  while (!reported && now_s() - t0 < REPORT_SEC + 10) {
    char* text = read_file(log);
    reported = text != NULL && strstr(text, "Hang report") != NULL &&
               strstr(text, "ncclAllReduce #11") != NULL &&
               strstr(text, "Not called yet by rank 1");
    free(text);
    if (!reported) usleep(100 * 1000);
  }
  printf("hang report after %.1f s: %s\n", now_s() - t0, reported ? "yes" : "NO");
  EXPECT(reported, "no report naming rank 1 within %d s", REPORT_SEC + 10);
  ncclResult_t async = ncclSuccess;
  EXPECT(ncclCommGetAsyncError(comms[0], &async) == ncclSuccess && async == ncclSuccess,
         "async error %d during the hang", (int)async);
  double a0 = now_s();
  for (int r = 0; r < 2; r++) EXPECT(ncclCommAbort(comms[r]) == ncclSuccess, "abort %d", r);
  double abort_s = now_s() - a0;
  printf("abort of both ranks: %.3f s\n", abort_s);
  EXPECT(abort_s < 1.0, "abort took %.2f s", abort_s);

  /* 2. The timeline, written at the aborts. */
  char* text = read_file(trace);
  EXPECT(text != NULL, "no timeline at %s", trace);
  if (text != NULL) {
    int kernels = count(text, "\"name\":\"kernel\"");
    double k0 = first_ts(text, "kernel"), c0 = first_ts(text, "AllReduce");
    printf("timeline: %d kernel events; first kernel %.0f us, first call %.0f us (offset %.3f s)\n",
           kernels, k0, c0, (k0 - c0) / 1e6);
    EXPECT(kernels >= 2 * calls, "%d kernel events, expected %d per rank", kernels, calls);
    EXPECT(k0 > 0 && c0 > 0 && k0 - c0 > -5e6 && k0 - c0 < 5e6,
           "device times are %.3f s from the host's", (k0 - c0) / 1e6);
    free(text);
  }
  for (int r = 0; r < 2; r++) {
    cudaSetDevice(devs[r]);
    cudaFree(buf[r]);
    cudaStreamDestroy(st[r]);
  }
  unlink(trace);
  if (g_failures == 0) unlink(log);
  printf("%s\n", g_failures == 0 ? "PASS" : "FAIL");
  return g_failures == 0 ? 0 : 1;
}
