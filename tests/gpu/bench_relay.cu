/* bench_relay: a Reduce chain's whole traffic without the executor around it (tests/gpu/run.sh's
 * micro stage builds and runs it beside bench_push).
 *
 * The question: on 4 H200s Baton's Reduce chain (GPU 0 -> 1 -> 2 -> 3, each hop a FIFO of
 * NCCL_STEPS slots per block) moves ~0.65x stock's bytes, while bench_push, where every GPU only
 * pushes into the next, reaches the link's rate with the same block shape. Here every GPU but the
 * first also consumes: its blocks wait for the previous GPU's step (a tail flag in their memory),
 * add the slot to their own input and write the sum into the next GPU's slot (the last GPU into
 * its output), then free the slot (a head flag the previous GPU reads across the link when its
 * cached value shows no room). Same step shape as the executor's Simple step: the leader waits,
 * the workers move 16-byte vectors (8 in flight a thread, strided), a warp of its own fences and
 * publishes. If this reaches the push rate, the executor loses the difference; if not, the
 * traffic pattern itself does.
 *
 * Each shape runs twice: 8 operations back to back in one launch (the step counters go on), whose
 * time per operation is the chain's steady rate, and one operation a launch, which also pays
 * the pipeline's fill (the last GPU starts a step time after the one before it). Time: the last
 * GPU's kernel, launched first. Its output is checked against the sum of every GPU's input.
 *
 * Usage: bench_relay [--mib N] [--iters N] */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define CK(x)                                                                                   \
  do {                                                                                          \
    cudaError_t e_ = (x);                                                                       \
    if (e_ != cudaSuccess) {                                                                    \
      fprintf(stderr, "bench_relay: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      exit(2);                                                                                  \
    }                                                                                           \
  } while (0)

enum { SLOTS = 8, U = 8, BAR_ALL = 1, BAR_WORKERS = 2 };

struct relay_args {
  const char* in;                /* this GPU's input (per_block bytes a block) */
  char* fifo_in;                 /* this GPU's receive slots (SLOTS a block), NULL on the first */
  char* fifo_out;                /* the next GPU's receive slots, NULL on the last */
  char* out;                     /* the last GPU's output */
  unsigned long long* tail_in;   /* here, a flag a block: steps the previous GPU filled */
  unsigned long long* head_in;   /* here, a flag a block: steps this GPU freed */
  unsigned long long* tail_next; /* on the next GPU */
  const unsigned long long* head_next; /* on the next GPU */
  size_t per_block, step;
  int reps; /* operations back to back in the launch */
};

static __device__ __forceinline__ unsigned long long ld_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ void st_volatile(unsigned long long* p, unsigned long long v) {
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
static __device__ __forceinline__ void bar(int id, int n) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
static __device__ __forceinline__ uint4 add4(uint4 a, uint4 b) {
  return make_uint4(__float_as_uint(__uint_as_float(a.x) + __uint_as_float(b.x)),
                    __float_as_uint(__uint_as_float(a.y) + __uint_as_float(b.y)),
                    __float_as_uint(__uint_as_float(a.z) + __uint_as_float(b.z)),
                    __float_as_uint(__uint_as_float(a.w) + __uint_as_float(b.w)));
}

/* dst = s0 (+ s1) over n bytes (a multiple of 16), by nw threads. */
static __device__ void move(const uint4* s0, const uint4* s1, uint4* dst, size_t n, int t, int nw) {
  const size_t nvec = n / 16;
  for (size_t base = 0; base < nvec; base += (size_t)nw * U) {
    uint4 x[U], y[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const size_t i = base + (size_t)u * nw + t;
      x[u] = i < nvec ? s0[i] : make_uint4(0, 0, 0, 0);
    }
    if (s1 != nullptr) {
#pragma unroll
      for (int u = 0; u < U; u++) {
        const size_t i = base + (size_t)u * nw + t;
        y[u] = i < nvec ? s1[i] : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; u++) x[u] = add4(x[u], y[u]);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const size_t i = base + (size_t)u * nw + t;
      if (i < nvec) dst[i] = x[u];
    }
  }
}

__global__ void __launch_bounds__(256, 1) relay_kernel(const relay_args a) {
  const int nth = blockDim.x, t = threadIdx.x, nw = nth - 32, b = blockIdx.x;
  const size_t steps = (a.per_block + a.step - 1) / a.step;
  __shared__ unsigned long long head_seen;
  if (t == 0) head_seen = 0;
  __syncthreads();
  for (unsigned long long s = 0; s < (unsigned long long)a.reps * steps; s++) {
    const size_t off = (size_t)(s % steps) * a.step;
    const size_t n = a.per_block - off < a.step ? a.per_block - off : a.step;
    const size_t slot = ((size_t)b * SLOTS + (size_t)(s % SLOTS)) * a.step;
    if (t >= nw) { /* the publishing warp: after the workers' data, fence and publish */
      bar(BAR_ALL, nth);
      if (t == nw) {
        if (a.fifo_out != nullptr) {
          asm volatile("fence.acq_rel.sys;" ::: "memory");
          st_volatile(a.tail_next + b, s + 1);
        }
        if (a.fifo_in != nullptr) st_volatile(a.head_in + b, s + 1);
      }
      continue;
    }
    if (t == 0) { /* the leader: the slot to read has arrived, the slot to write is free */
      if (a.fifo_in != nullptr)
        while (ld_acquire(a.tail_in + b) < s + 1) {
        }
      if (a.fifo_out != nullptr && head_seen + SLOTS < s + 1)
        while ((head_seen = ld_acquire(a.head_next + b)) + SLOTS < s + 1) {
        }
    }
    bar(BAR_WORKERS, nw);
    const uint4* mine = reinterpret_cast<const uint4*>(a.in + (size_t)b * a.per_block + off);
    const uint4* got =
        a.fifo_in != nullptr ? reinterpret_cast<const uint4*>(a.fifo_in + slot) : nullptr;
    uint4* dst = a.fifo_out != nullptr
                     ? reinterpret_cast<uint4*>(a.fifo_out + slot)
                     : reinterpret_cast<uint4*>(a.out + (size_t)b * a.per_block + off);
    move(mine, got, dst, n, t, nw);
    bar(BAR_ALL, nth);
  }
}

struct gpu_t {
  char *in, *fifo, *out;
  unsigned long long *tail, *head;
  cudaStream_t stream;
  cudaEvent_t t0, t1;
};

static float value(int g, size_t i) {
  return (float)((i * 7 + (size_t)g * 13) % 1021);
}

int main(int argc, char** argv) {
  size_t mib = 64;
  int iters = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--mib") == 0) mib = strtoull(argv[i + 1], nullptr, 10);
    if (strcmp(argv[i], "--iters") == 0) iters = atoi(argv[i + 1]);
  }
  int n = 0;
  CK(cudaGetDeviceCount(&n));
  if (n < 2) {
    fprintf(stderr, "bench_relay: needs 2 GPUs or more, found %d\n", n);
    return 2;
  }
  const size_t bytes = mib << 20;
  const size_t max_blocks = 64, max_step = 512 << 10;
  std::vector<gpu_t> gpu(n);
  std::vector<float> host(bytes / sizeof(float));
  for (int g = 0; g < n; g++) {
    CK(cudaSetDevice(g));
    for (int p = 0; p < n; p++) {
      if (p == g) continue;
      cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
      (void)cudaGetLastError();
    }
    CK(cudaMalloc(&gpu[g].in, bytes));
    CK(cudaMalloc(&gpu[g].out, bytes));
    CK(cudaMalloc(&gpu[g].fifo, max_blocks * SLOTS * max_step));
    CK(cudaMalloc(&gpu[g].tail, max_blocks * sizeof(unsigned long long)));
    CK(cudaMalloc(&gpu[g].head, max_blocks * sizeof(unsigned long long)));
    CK(cudaStreamCreateWithFlags(&gpu[g].stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&gpu[g].t0));
    CK(cudaEventCreate(&gpu[g].t1));
    for (size_t i = 0; i < host.size(); i++) host[i] = value(g, i);
    CK(cudaMemcpy(gpu[g].in, host.data(), bytes, cudaMemcpyHostToDevice));
    CK(cudaDeviceSynchronize()); /* the DMA has landed before any non-blocking stream reads it */
  }
  struct shape {
    int gpus, blocks;
    size_t step;
    int reps;
  };
  std::vector<shape> shapes;
  for (int k = 2; k <= n; k++)
    for (int blocks : {62, 24})
      for (size_t step : {(size_t)32 << 10, (size_t)64 << 10, (size_t)192 << 10, (size_t)512 << 10})
        for (int reps : {8, 1}) shapes.push_back({k, blocks, step, reps});
  int bad = 0;
  for (const shape& sh : shapes) {
    const size_t per_block = bytes / (size_t)sh.blocks / 16 * 16;
    std::vector<float> ms;
    for (int it = 0; it <= iters; it++) {
      for (int g = 0; g < sh.gpus; g++) { /* flags start from 0 every launch */
        CK(cudaSetDevice(g));
        CK(cudaMemset(gpu[g].tail, 0, max_blocks * sizeof(unsigned long long)));
        CK(cudaMemset(gpu[g].head, 0, max_blocks * sizeof(unsigned long long)));
        CK(cudaDeviceSynchronize());
      }
      for (int g = sh.gpus - 1; g >= 0; g--) { /* consumers first: the last GPU is timed */
        relay_args a;
        a.in = gpu[g].in;
        a.fifo_in = g > 0 ? gpu[g].fifo : nullptr;
        a.fifo_out = g < sh.gpus - 1 ? gpu[g + 1].fifo : nullptr;
        a.out = gpu[g].out;
        a.tail_in = gpu[g].tail;
        a.head_in = gpu[g].head;
        a.tail_next = g < sh.gpus - 1 ? gpu[g + 1].tail : nullptr;
        a.head_next = g < sh.gpus - 1 ? gpu[g + 1].head : nullptr;
        a.per_block = per_block;
        a.step = sh.step;
        a.reps = sh.reps;
        CK(cudaSetDevice(g));
        CK(cudaEventRecord(gpu[g].t0, gpu[g].stream));
        relay_kernel<<<sh.blocks, 256, 0, gpu[g].stream>>>(a);
        CK(cudaGetLastError());
        CK(cudaEventRecord(gpu[g].t1, gpu[g].stream));
      }
      for (int g = 0; g < sh.gpus; g++) {
        CK(cudaSetDevice(g));
        CK(cudaStreamSynchronize(gpu[g].stream));
      }
      float t = 0;
      CK(cudaEventElapsedTime(&t, gpu[sh.gpus - 1].t0, gpu[sh.gpus - 1].t1));
      if (it > 0) ms.push_back(t / sh.reps);
    }
    /* the last GPU's output: the sum of every GPU's input (sampled) */
    const int last = sh.gpus - 1;
    CK(cudaSetDevice(last));
    CK(cudaMemcpy(host.data(), gpu[last].out, bytes, cudaMemcpyDeviceToHost));
    const size_t covered = per_block * (size_t)sh.blocks / sizeof(float);
    bool ok = true;
    for (size_t i = 0; ok; i += 4099) { /* every 4099th element and the last one */
      if (i >= covered) i = covered - 1;
      float want = 0;
      for (int g = 0; g < sh.gpus; g++) want += value(g, i);
      if (host[i] != want) {
        fprintf(stderr, "bench_relay: %d GPUs, element %zu: %g, expected %g\n", sh.gpus, i,
                (double)host[i], (double)want);
        ok = false;
      }
      if (i == covered - 1) break;
    }
    bad += ok ? 0 : 1;
    std::sort(ms.begin(), ms.end());
    const double med = ms[ms.size() / 2];
    printf(
        "relay gpus=%d blocks=%d step=%zuK ops/launch=%d MiB=%zu : %.1f us an operation, %.1f "
        "GB/s a hop %s\n",
        sh.gpus, sh.blocks, sh.step >> 10, sh.reps, mib, med * 1e3,
        (double)per_block * sh.blocks / (med * 1e-3) / 1e9, ok ? "OK" : "WRONG");
    fflush(stdout);
  }
  printf("bench_relay: %zu configurations, %d wrong\n", shapes.size(), bad);
  return bad ? 1 : 0;
}
