/* bench_stage: where a staged direct AllReduce's time goes on N GPUs of one host (issue 26: the
 * middle band, 64 KiB-4 MiB, where OneShot costs 10.7-56 us on 4 H100s against stock's 11-43).
 *
 * Rank r runs on GPU r with its own stream, its own staging buffer (as the library shares it:
 * flags and round counters, then two halves) and every peer's staging mapped; each launch is one
 * float-sum AllReduce run by staged_device.cuh's own code (stage_begin, stage_item, stage_end)
 * on P blocks, block b being part b, as the library's direct kernel runs it. Each configuration
 * (OneShot or TwoShot, bytes, parts) is
 *   checked: CHECKS launches, each after every rank's input changed (in_r[i] = (7i + r) % 64 + k
 *            at launch k), each output compared on the GPU with the sum computed from that
 *            formula, which the staged code never sees; a stale or missing read shows as a miss;
 *   timed:   a graph of NODES launches a GPU, replayed REPS times together (as nccl-tests -G):
 *            the median over replays of the slowest GPU's time, per launch;
 *   split:   the same replays with staged_device.cuh's STAGE_PHASE marks on (c_phases): block 0's
 *            thread 0 adds the time since its previous mark at each point (us a launch):
 *            1 staging mapped, 2 input copied, 3 first barrier, 4 reduced, 5 second barrier,
 *            6 copied out (TwoShot), 7 round counter stored, 8 kernel end. The marks cost about
 *            0.15 us each.
 * Build: nvcc -O3 -arch=sm_90 -Iinclude -Isrc -std=c++17 tests/gpu/bench_stage.cu
 * Run:   bench_stage N [parts ...]  (exit status 1 when a check fails)
 * Built with -DBENCH_LIBKERNEL beside src/device/cuda/kernel_direct.cu, BENCH_LIBKERNEL=1 in the
 * environment runs the library's own direct kernel (every datatype, no marks) in the same
 * harness instead. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

static __device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

#define NPHASES 9
__device__ unsigned long long g_phase[NPHASES], g_launches, g_last;
__constant__ int c_phases;
static __device__ __forceinline__ void phase_mark(int i) {
  if (c_phases == 0 || blockIdx.x != 0 || threadIdx.x != 0) return;
  const unsigned long long t = gtimer();
  g_phase[i] += t - g_last;
  g_last = t;
}
#define STAGE_PHASE(i) phase_mark(i)

#include "device/cuda/staged_device.cuh"

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "bench_stage: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      exit(2);                                                                                  \
    }                                                                                           \
  } while (0)

#define NODES 50
#define REPS 20
#define CHECKS 8
#define MAXR 8
#define HALF ((size_t)8 << 20) /* the library's default staging half (NCCL_BATON_STAGE_BYTES) */
#define MAX_BYTES ((size_t)16 << 20)

__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1)
    stage_kernel(const __grid_constant__ cuda_args_small_t a) {
  __shared__ baton::stage_smem_t s;
  __shared__ volatile int stop;
  if (c_phases != 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    g_last = gtimer();
    g_launches++;
  }
  baton::kctx_t k;
  k.abort_flag = a.hdr.abort_flag;
  k.status = a.hdr.status;
  k.stop = &stop;
  k.channel = blockIdx.x;
  k.trace = nullptr;
  if (threadIdx.x == 0) stop = 0;
  const cuda_work_t* w = &a.works[a.hdr.first[blockIdx.x]];
  baton::stage_item_t it;
  baton::stage_begin(s, &a.hdr, w, it);
  baton::stage_end(s, it, baton::stage_item<baton::ops_f32>(k, s, it, it.half));
  phase_mark(8);
}

/* in[i] = (7 i + r) % 64 + k: a rank's input at launch k */
__global__ void fill_kernel(float* in, size_t count, int r, int k) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x)
    in[i] = (float)((7 * i + r) % 64 + k);
}

/* counts the elements of out that differ from the sum over n ranks of launch k's inputs */
__global__ void check_kernel(const float* out, size_t count, int n, int k,
                             unsigned long long* miss) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
       i += (size_t)gridDim.x * blockDim.x) {
    float want = 0;
    for (int r = 0; r < n; r++) want += (float)((7 * i + r) % 64 + k);
    if (out[i] != want) atomicAdd(miss, 1ull);
  }
}

#ifdef BENCH_LIBKERNEL
extern "C" const void* cuda_direct_kernel(void); /* kernel_direct.cu */
#endif
static const void* kernel = (const void*)stage_kernel;

static int n;
static cudaStream_t st[MAXR];
static float* in[MAXR];
static float* out[MAXR];
static char* staging[MAXR];
static void** zc_tab[MAXR];
static cuda_status_t* status_d[MAXR];
static uint32_t* abort_d;
static unsigned long long* miss[MAXR];

static cuda_args_small_t stage_args(int r, int algo, size_t bytes, int parts) {
  cuda_args_small_t a;
  memset(&a, 0, sizeof(a));
  a.hdr.abort_flag = abort_d;
  a.hdr.status = status_d[r];
  a.hdr.zc_base = zc_tab[r];
  a.hdr.rank = r;
  a.hdr.nranks = n;
  a.hdr.nblocks = parts;
  const size_t count = bytes / 4;
  const size_t win = stage_window(HALF, parts, n, FUNC_ALLREDUCE, algo, 4);
  for (int b = 0; b < parts; b++) {
    a.hdr.first[b] = (uint16_t)b;
    a.hdr.chan_id[b] = (uint8_t)b;
    cuda_work_t& w = a.works[b];
    w.func = FUNC_ALLREDUCE;
    w.algo = (uint8_t)algo;
    w.proto = PROTO_SIMPLE;
    w.dtype = ncclFloat32;
    w.op = DEV_OP_SUM;
    w.esize = 4;
    w.root = -1;
    w.chunk = (uint32_t)std::min(win, count);
    w.count = count;
    w.off = (uint64_t)b;
    w.cnt = (uint64_t)parts;
    w.sendbuff = (const char*)in[r];
    w.recvbuff = (char*)out[r];
    w.zc_loc = (uint64_t)0 | (uint64_t)HALF << 16; /* slot 0 */
  }
  a.hdr.first[parts] = (uint16_t)parts;
  return a;
}

static void launch(const cuda_args_small_t& a, int r, int parts) {
  void* p[] = {(void*)&a};
  CK(cudaLaunchKernel(kernel, dim3(parts), dim3(CUDA_EXEC_THREADS), p, 0, st[r]));
}

/* Misses over CHECKS launches with changing inputs. */
static unsigned long long check(const std::vector<cuda_args_small_t>& as, size_t bytes, int parts) {
  const size_t count = bytes / 4;
  unsigned long long total = 0;
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaMemset(miss[r], 0, sizeof(unsigned long long)));
  }
  for (int k = 0; k < CHECKS; k++)
    for (int r = 0; r < n; r++) {
      CK(cudaSetDevice(r));
      fill_kernel<<<264, 512, 0, st[r]>>>(in[r], count, r, k);
      CK(cudaMemsetAsync(out[r], 0xff, bytes, st[r])); /* NaN: an element not written misses */
      launch(as[r], r, parts);
      check_kernel<<<264, 512, 0, st[r]>>>(out[r], count, n, k, miss[r]);
    }
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaStreamSynchronize(st[r]));
    unsigned long long m = 0;
    CK(cudaMemcpy(&m, miss[r], sizeof(m), cudaMemcpyDeviceToHost));
    total += m;
  }
  return total;
}

/* Median over REPS of the slowest GPU's replay, per launch. */
static double timed(const std::vector<cuda_args_small_t>& as, int parts) {
  std::vector<cudaGraphExec_t> ge(n);
  std::vector<cudaEvent_t> e0(n), e1(n);
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st[r], cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < NODES; i++) launch(as[r], r, parts);
    CK(cudaStreamEndCapture(st[r], &g));
    CK(cudaGraphInstantiate(&ge[r], g, 0));
    CK(cudaGraphDestroy(g));
    CK(cudaEventCreate(&e0[r]));
    CK(cudaEventCreate(&e1[r]));
  }
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaGraphLaunch(ge[r], st[r]));
  }
  std::vector<double> ms;
  for (int k = 0; k < REPS; k++) {
    for (int r = 0; r < n; r++) {
      CK(cudaSetDevice(r));
      CK(cudaEventRecord(e0[r], st[r]));
      CK(cudaGraphLaunch(ge[r], st[r]));
      CK(cudaEventRecord(e1[r], st[r]));
    }
    double worst = 0;
    for (int r = 0; r < n; r++) {
      CK(cudaSetDevice(r));
      CK(cudaEventSynchronize(e1[r]));
      float t = 0;
      CK(cudaEventElapsedTime(&t, e0[r], e1[r]));
      worst = std::max(worst, (double)t);
    }
    ms.push_back(worst);
  }
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaEventDestroy(e0[r]));
    CK(cudaEventDestroy(e1[r]));
    CK(cudaGraphExecDestroy(ge[r]));
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1000.0 / NODES;
}

static void set_phases(int on) {
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaMemcpyToSymbol(c_phases, &on, sizeof(on)));
  }
}

int main(int argc, char** argv) {
  n = argc > 1 ? atoi(argv[1]) : 2;
#ifdef BENCH_LIBKERNEL
  if (getenv("BENCH_LIBKERNEL") != nullptr) kernel = cuda_direct_kernel();
#endif
  std::vector<int> partss;
  for (int i = 2; i < argc; i++) partss.push_back(atoi(argv[i]));
  if (partss.empty()) partss = {8, 16, 32, 48};
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (n < 2 || n > MAXR || n > DIRECT_MAX_RANKS || n > ndev) {
    printf("SKIP: bench_stage %d needs that many GPUs (%d here, at most %d)\n", n, ndev, MAXR);
    return 0;
  }
  for (int p : partss)
    if (p < 1 || p > STAGE_MAX_PARTS || p > CUDA_SMALL_WORKS) {
      printf("bench_stage: %d parts: 1 to %d\n", p, std::min(STAGE_MAX_PARTS, CUDA_SMALL_WORKS));
      return 2;
    }
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    for (int p = 0; p < n; p++)
      if (p != r) {
        int can = 0;
        CK(cudaDeviceCanAccessPeer(&can, r, p));
        if (!can) {
          printf("SKIP: GPU %d cannot reach GPU %d\n", r, p);
          return 0;
        }
        CK(cudaDeviceEnablePeerAccess(p, 0));
      }
    CK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
    CK(cudaMalloc((void**)&in[r], MAX_BYTES));
    CK(cudaMalloc((void**)&out[r], MAX_BYTES));
    CK(cudaMalloc((void**)&staging[r], STAGE_DATA_OFF + 2 * HALF));
    CK(cudaMemset(staging[r], 0, STAGE_DATA_OFF));
    CK(cudaMalloc((void**)&status_d[r], sizeof(cuda_status_t)));
    CK(cudaMemset(status_d[r], 0, sizeof(cuda_status_t)));
    CK(cudaMalloc((void**)&miss[r], sizeof(unsigned long long)));
  }
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaMalloc((void**)&zc_tab[r], n * sizeof(void*)));
    CK(cudaMemcpy(zc_tab[r], staging, n * sizeof(void*), cudaMemcpyHostToDevice));
  }
  CK(cudaSetDevice(0));
  CK(cudaMalloc((void**)&abort_d, 64)); /* never set: the waits are bounded by the run's limit */
  CK(cudaMemset(abort_d, 0, 64));

  const size_t sizes[] = {256,     64 << 10, 256 << 10, 512 << 10, 1 << 20,
                          2 << 20, 4 << 20,  8 << 20,   16 << 20};
  const char* algo_name[] = {"OneShot", "TwoShot"};
  const int algos[] = {ALGO_ONESHOT, ALGO_TWOSHOT};
  bool all = true;
  printf(
      "# bench_stage: %s kernel, %d GPUs, float sum, graph replay of %d launches, median of %d;\n"
      "# phases (us a launch, block 0): 1 mapped, 2 copied in, 3 barrier, 4 reduced,\n"
      "# 5 barrier 2, 6 copied out, 7 counter, 8 end\n",
      kernel == (const void*)stage_kernel ? "its own" : "the library's", n, NODES, REPS);
  printf("%-8s %8s %5s %9s %9s %6s", "algo", "bytes", "parts", "us/op", "marked", "miss");
  for (int i = 1; i < NPHASES; i++) printf(" %6d", i);
  printf("\n");
  for (int ai = 0; ai < 2; ai++)
    for (size_t bytes : sizes)
      for (int parts : partss) {
        std::vector<cuda_args_small_t> as(n);
        for (int r = 0; r < n; r++) as[r] = stage_args(r, algos[ai], bytes, parts);
        set_phases(0);
        const unsigned long long m = check(as, bytes, parts);
        const double us = timed(as, parts);
        set_phases(1);
        unsigned long long zero[NPHASES] = {0}, ph[NPHASES], nl = 0, z1 = 0;
        CK(cudaSetDevice(0));
        CK(cudaMemcpyToSymbol(g_phase, zero, sizeof(zero)));
        CK(cudaMemcpyToSymbol(g_launches, &z1, sizeof(z1)));
        const double marked = timed(as, parts);
        CK(cudaSetDevice(0));
        CK(cudaMemcpyFromSymbol(ph, g_phase, sizeof(ph)));
        CK(cudaMemcpyFromSymbol(&nl, g_launches, sizeof(nl)));
        printf("%-8s %8zu %5d %9.2f %9.2f %6llu", algo_name[ai], bytes, parts, us, marked, m);
        for (int i = 1; i < NPHASES; i++) printf(" %6.2f", nl ? ph[i] / (double)nl / 1000.0 : -1);
        printf("\n");
        fflush(stdout);
        all = all && m == 0;
      }
  for (int r = 0; r < n; r++) {
    cuda_status_t h;
    CK(cudaSetDevice(r));
    CK(cudaMemcpy(&h, status_d[r], sizeof(h), cudaMemcpyDeviceToHost));
    if (h.error != 0) {
      printf("# rank %d: kernel error %d\n", r, h.error);
      all = false;
    }
  }
  if (!all) {
    printf("FAIL: a staged AllReduce computed a wrong result\n");
    return 1;
  }
  return 0;
}
