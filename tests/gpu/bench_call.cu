/* bench_call: the host's time per call of small one-rank collectives, and of the CUDA calls they
 * reduce to (issue 17: one rank at small sizes is the host's time, 5-7 us a call in nccl-tests
 * on the device machine, with stock's broadcast 0.7 us under Baton's in runs 51 and 53).
 *
 * Each measurement issues N calls on one stream, then synchronizes it; the time per call is the
 * whole span over N (what nccl-tests reports, without its own per-iteration work). Every
 * measurement repeats REPS times, interleaved with the others, and prints the minimum and the
 * median. Which library answers the NCCL calls is the loader's choice (LD_PRELOAD / the library
 * path), so one binary measures stock and Baton.
 *   memcpy_default   cudaMemcpyAsync of 8 bytes, device to device, cudaMemcpyDefault
 *   memcpy_d2d       the same with cudaMemcpyDeviceToDevice
 *   kernel_empty     an empty kernel, one block of 512 threads
 *   kernel_copy8     a kernel that copies 8 bytes
 *   allreduce, broadcast, allgather, sendrecv_self   one rank, out of place, 8 bytes and 64 KiB
 *   allreduce, allgather of 0 bytes   a count-0 call (issue 27: it must cost no more than stock's)
 * Build: nvcc -O3 -arch=sm_90 -Iinclude -o bench_call tests/gpu/bench_call.cu -Lbuild -lnccl
 * Run: taskset -c 4-7 ./bench_call [N] [REPS] (N 20000, REPS 7). The results are checked once. */
#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <string>
#include <vector>

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)
#define NK(x)                                                                            \
  do {                                                                                   \
    ncclResult_t r_ = (x);                                                               \
    if (r_ != ncclSuccess) {                                                             \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, ncclGetErrorString(r_)); \
      exit(1);                                                                           \
    }                                                                                    \
  } while (0)

__global__ void k_empty() {}
__global__ void k_copy8(const uint64_t* s, uint64_t* d) {
  if (threadIdx.x == 0) *d = *s;
}

static double now_us() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

struct ctx_t {
  ncclComm_t comm;
  cudaStream_t st;
  char *src, *dst;
};

/* One call of variant v with bytes. */
static void call(const ctx_t& c, const std::string& v, size_t bytes) {
  const size_t nf = bytes / 4;
  if (v == "memcpy_default") {
    CK(cudaMemcpyAsync(c.dst, c.src, bytes, cudaMemcpyDefault, c.st));
  } else if (v == "memcpy_d2d") {
    CK(cudaMemcpyAsync(c.dst, c.src, bytes, cudaMemcpyDeviceToDevice, c.st));
  } else if (v == "kernel_empty") {
    k_empty<<<1, 512, 0, c.st>>>();
  } else if (v == "kernel_copy8") {
    k_copy8<<<1, 512, 0, c.st>>>((const uint64_t*)c.src, (uint64_t*)c.dst);
  } else if (v == "allreduce") {
    NK(ncclAllReduce(c.src, c.dst, nf, ncclFloat32, ncclSum, c.comm, c.st));
  } else if (v == "broadcast") {
    NK(ncclBroadcast(c.src, c.dst, nf, ncclFloat32, 0, c.comm, c.st));
  } else if (v == "allgather") {
    NK(ncclAllGather(c.src, c.dst, nf, ncclFloat32, c.comm, c.st));
  } else if (v == "sendrecv_self") {
    NK(ncclGroupStart());
    NK(ncclSend(c.src, nf, ncclFloat32, 0, c.comm, c.st));
    NK(ncclRecv(c.dst, nf, ncclFloat32, 0, c.comm, c.st));
    NK(ncclGroupEnd());
  }
}

int main(int argc, char** argv) {
  const int N = argc > 1 ? atoi(argv[1]) : 20000;
  const int REPS = argc > 2 ? atoi(argv[2]) : 7;
  ctx_t c;
  CK(cudaSetDevice(0));
  CK(cudaStreamCreateWithFlags(&c.st, cudaStreamNonBlocking));
  const size_t maxb = 64 << 10;
  CK(cudaMalloc(&c.src, maxb));
  CK(cudaMalloc(&c.dst, maxb));
  int dev = 0;
  NK(ncclCommInitAll(&c.comm, 1, &dev));
  int ver = 0;
  NK(ncclGetVersion(&ver));

  struct var_t {
    std::string name;
    size_t bytes;
    std::vector<double> us;
  };
  std::vector<var_t> vs;
  for (const char* n : {"memcpy_default", "memcpy_d2d", "kernel_empty", "kernel_copy8"})
    vs.push_back({n, 8, {}});
  for (size_t b : {(size_t)8, maxb})
    for (const char* n : {"allreduce", "broadcast", "allgather", "sendrecv_self"})
      vs.push_back({n, b, {}});
  for (const char* n : {"allreduce", "allgather"}) vs.push_back({n, 0, {}});

  /* every variant's result once: the copy must have happened */
  std::vector<unsigned char> h(maxb), g(maxb);
  for (auto& v : vs) {
    if (v.name == "kernel_empty") continue;
    for (size_t i = 0; i < maxb; i++) h[i] = (unsigned char)(i * 7 + v.bytes + v.name.size());
    /* all on the calls' stream: a non-blocking stream does not wait for the legacy one */
    CK(cudaMemcpyAsync(c.src, h.data(), maxb, cudaMemcpyHostToDevice, c.st));
    CK(cudaMemsetAsync(c.dst, 0, maxb, c.st));
    call(c, v.name, v.bytes);
    CK(cudaMemcpyAsync(g.data(), c.dst, maxb, cudaMemcpyDeviceToHost, c.st));
    CK(cudaStreamSynchronize(c.st));
    if (memcmp(g.data(), h.data(), v.bytes) != 0) {
      fprintf(stderr, "# %s %zu: wrong result\n", v.name.c_str(), v.bytes);
      return 1;
    }
    for (size_t i = v.bytes; v.bytes == 0 && i < maxb; i++) /* a count-0 call writes nothing */
      if (g[i] != 0) {
        fprintf(stderr, "# %s 0: byte %zu written\n", v.name.c_str(), i);
        return 1;
      }
  }

  for (int r = 0; r < REPS; r++) {
    for (auto& v : vs) {
      for (int i = 0; i < N / 10; i++) call(c, v.name, v.bytes); /* warm-up */
      CK(cudaStreamSynchronize(c.st));
      const double t0 = now_us();
      for (int i = 0; i < N; i++) call(c, v.name, v.bytes);
      CK(cudaStreamSynchronize(c.st));
      v.us.push_back((now_us() - t0) / N);
    }
  }
  printf("# bench_call: NCCL version %d, N %d, REPS %d (us a call: min, median)\n", ver, N, REPS);
  for (auto& v : vs) {
    std::sort(v.us.begin(), v.us.end());
    printf("%-16s %8zu %8.3f %8.3f\n", v.name.c_str(), v.bytes, v.us[0], v.us[v.us.size() / 2]);
  }
  NK(ncclCommDestroy(c.comm));
  return 0;
}
