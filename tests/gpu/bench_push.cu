/* bench_push: how fast one block pushes data into a peer GPU's memory over NVLink, and what the
 * choices of the CUDA executor's Simple step cost (tests/gpu/run.sh's micro stage runs it).
 *
 * The question it answers: on 4 H200s the first rank of a Reduce chain (read the local input,
 * write the next GPU's slot) moves 4.5-10 GB/s a block where stock NCCL's blocks move ~15
 * (docs/gpu-results.md, run 25). Here the same traffic runs without the executor around it, one
 * knob at a time: threads a block, vectors in flight a thread, which warp touches which bytes,
 * how a step is published (no fence / the leader fences after the closing barrier / a warp set
 * apart fences while the others go on / that warp uses one st.release.sys), step size, block count,
 * load and store flavours (plain, volatile, non-coherent), one or two local sources (a copy, or a
 * float sum as a chain's middle rank does).
 *
 * One process drives every visible GPU with peer access on. Patterns: "one" (GPU 0 writes into
 * GPU 1 alone), "chain" (GPU g writes into GPU g+1, every g < n-1 at once, as a chain's hops do)
 * and "pull" (the same transfers driven by the receivers: GPU g+1 reads GPU g's source over the
 * link and writes its own memory; with two sources the second is the receiver's own, as a
 * chain's middle rank would combine). Each kernel is timed with events on its GPU's stream; a
 * line reports the mean and the slowest transfer's GB/s, after checking what landed in the
 * receiver (a copy of the source, or the sum). Exit status 1 when a check fails.
 *
 * Each line also gives the blocks' own times in the last launch (min, median, max) and the
 * launch's span: with --balance the list is instead a set of block shapes at operation sizes of
 * 64 and 256 MiB a sender, to see how evenly the blocks share the links (an executor's operation
 * lasts as long as its slowest channel).
 *
 * Usage: bench_push [--mib-per-sender N] [--iters N] [--balance] */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "bench_push: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      exit(2);                                                                                 \
    }                                                                                          \
  } while (0)

enum { LAYOUT_STRIDED = 0, LAYOUT_WARP_HUNK = 1, LAYOUT_WARP_SLAB = 2 };
/* How a step is published: not at all; by the leader after the closing barrier (fence, then a
 * relaxed store); by a warp set apart (the same, while the others go on); by a warp set apart
 * with one st.release.sys instead of the fence and the store. */
enum { FENCE_NONE = 0, FENCE_LEADER = 1, FENCE_PUBLISHER = 2, FENCE_RELEASE = 3 };
enum { BAR_ALL = 1, BAR_WORKERS = 2 };

struct push_args {
  const char* src0;
  const char* src1;          /* NULL: a copy; else dst = src0 + src1 (floats) */
  char* dst;                 /* on the receiver */
  unsigned long long* flags; /* on the receiver: one per block, the step count published */
  size_t per_block;          /* bytes, a multiple of 16 */
  size_t step;               /* bytes, a multiple of 16 */
  int layout, fence;
  unsigned long long* times; /* on the mover: per block, globaltimer at its start and its end */
};

static __device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

template <int LD>
static __device__ __forceinline__ uint4 load16(const char* p) {
  if (LD == 2) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  }
  if (LD == 1) {
    uint4 v;
    asm volatile("ld.volatile.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p)
                 : "memory");
    return v;
  }
  return *reinterpret_cast<const uint4*>(p);
}
template <int ST>
static __device__ __forceinline__ void store16(char* p, uint4 v) {
  if (ST == 1) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1,%2,%3,%4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
    return;
  }
  *reinterpret_cast<uint4*>(p) = v;
}
static __device__ __forceinline__ uint4 add_f32x4(uint4 a, uint4 b) {
  return make_uint4(__float_as_uint(__uint_as_float(a.x) + __uint_as_float(b.x)),
                    __float_as_uint(__uint_as_float(a.y) + __uint_as_float(b.y)),
                    __float_as_uint(__uint_as_float(a.z) + __uint_as_float(b.z)),
                    __float_as_uint(__uint_as_float(a.w) + __uint_as_float(b.w)));
}

/* Vector i of a step handled by thread t at round r, slot u: strided (the executor's
 * rc_impl: i = r * nw * U + u * nw + t), in warp hunks (a warp's U loads cover U * 512
 * contiguous bytes: i = (r * nwarps + warp) * U * 32 + u * 32 + lane) or in warp slabs (warp w
 * streams through its own contiguous share of the step, rounds = ceil(share / (U * 512))). */
static __device__ __forceinline__ size_t vec_index(int layout, size_t round, int u, int t, int nw,
                                                   int U, size_t rounds) {
  if (layout == LAYOUT_STRIDED) return round * (size_t)nw * U + (size_t)u * nw + t;
  const int warp = t >> 5, lane = t & 31, nwarps = nw >> 5;
  if (layout == LAYOUT_WARP_SLAB)
    return ((size_t)warp * rounds + round) * U * 32 + (size_t)u * 32 + lane;
  return (round * nwarps + warp) * (size_t)U * 32 + (size_t)u * 32 + lane;
}

template <int U, int LD, int ST>
static __device__ void move_step(const push_args& a, size_t off, size_t n, int t, int nw) {
  const size_t nvec = n / 16;
  const char* s0 = a.src0 + off;
  const char* s1 = a.src1 != nullptr ? a.src1 + off : nullptr;
  char* d = a.dst + off;
  const size_t rounds = (nvec + (size_t)nw * U - 1) / ((size_t)nw * U);
  for (size_t r = 0; r < rounds; r++) {
    uint4 x[U];
#pragma unroll
    for (int u = 0; u < U; u++) {
      const size_t i = vec_index(a.layout, r, u, t, nw, U, rounds);
      x[u] = i < nvec ? load16<LD>(s0 + i * 16) : make_uint4(0, 0, 0, 0);
    }
    if (s1 != nullptr) {
      uint4 y[U];
#pragma unroll
      for (int u = 0; u < U; u++) {
        const size_t i = vec_index(a.layout, r, u, t, nw, U, rounds);
        y[u] = i < nvec ? load16<LD>(s1 + i * 16) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; u++) x[u] = add_f32x4(x[u], y[u]);
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const size_t i = vec_index(a.layout, r, u, t, nw, U, rounds);
      if (i < nvec) store16<ST>(d + i * 16, x[u]);
    }
  }
}

static __device__ __forceinline__ void bar(int id, int n) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
static __device__ __forceinline__ void publish(unsigned long long* flag, unsigned long long v,
                                               bool release) {
  if (release) {
    asm volatile("st.release.sys.global.u64 [%0], %1;" ::"l"(flag), "l"(v) : "memory");
    return;
  }
  asm volatile("fence.acq_rel.sys;" ::: "memory");
  asm volatile("st.volatile.global.u64 [%0], %1;" ::"l"(flag), "l"(v) : "memory");
}

/* One block per slice; a step = (leader's turn) barrier, data, barrier, publish, as the executor's
 * Simple step (FENCE_NONE drops the publish, FENCE_PUBLISHER hands it to the last warp). */
template <int U, int LD, int ST>
__global__ void __launch_bounds__(512, 1) push_kernel(const push_args a) {
  const int nth = blockDim.x, t = threadIdx.x;
  const bool split = a.fence == FENCE_PUBLISHER || a.fence == FENCE_RELEASE;
  const int nw = split ? nth - 32 : nth;
  const size_t base = (size_t)blockIdx.x * a.per_block;
  unsigned long long* flag = a.flags + blockIdx.x;
  unsigned long long s = 0;
  if (t == 0) a.times[2 * blockIdx.x] = globaltimer_ns();
  for (size_t off = 0; off < a.per_block; off += a.step, s++) {
    const size_t n = a.per_block - off < a.step ? a.per_block - off : a.step;
    if (split) {
      if (t >= nw) { /* the publishing warp */
        bar(BAR_ALL, nth);
        if (t == nw) publish(flag, s + 1, a.fence == FENCE_RELEASE);
        continue;
      }
      bar(BAR_WORKERS, nw); /* the leader's waits and plan, in the executor */
      move_step<U, LD, ST>(a, base + off, n, t, nw);
      bar(BAR_ALL, nth);
      continue;
    }
    bar(BAR_ALL, nth);
    move_step<U, LD, ST>(a, base + off, n, t, nw);
    bar(BAR_ALL, nth);
    if (a.fence == FENCE_LEADER && t == 0) publish(flag, s + 1, false);
  }
  __syncthreads();
  if (t == 0) a.times[2 * blockIdx.x + 1] = globaltimer_ns();
}

struct config {
  const char* pattern; /* "one", "chain" or "pull" */
  int srcs, threads, unroll, layout, fence;
  size_t step;
  int blocks, ld, st;
  size_t mib; /* MiB a sender moves per launch (0: --mib-per-sender); an operation's size */
};

static size_t bytes_per_sender;
static size_t config_bytes(const struct config& c) {
  return c.mib != 0 && (c.mib << 20) <= bytes_per_sender ? c.mib << 20 : bytes_per_sender;
}

typedef void (*kernel_fn)(const push_args);
template <int U>
static kernel_fn pick_ld_st(int ld, int st) {
  static const kernel_fn table[6] = {push_kernel<U, 0, 0>, push_kernel<U, 0, 1>,
                                     push_kernel<U, 1, 0>, push_kernel<U, 1, 1>,
                                     push_kernel<U, 2, 0>, push_kernel<U, 2, 1>};
  return table[ld * 2 + (st ? 1 : 0)];
}
static kernel_fn pick_kernel(int unroll, int ld, int st) {
  return unroll == 16  ? pick_ld_st<16>(ld, st)
         : unroll == 8 ? pick_ld_st<8>(ld, st)
                       : pick_ld_st<4>(ld, st);
}

struct gpu_bufs {
  char *src0, *src1, *dst;
  unsigned long long* flags;
  unsigned long long* times; /* 2 per block: start, end (ns) */
  cudaStream_t stream;
  cudaEvent_t t0, t1;
};

static int ngpus;
static int iters = 5;
static std::vector<gpu_bufs> bufs;
static std::vector<float> host_a, host_b;

/* Element i of source 0 and 1 on GPU g: small integers, so float sums are exact. */
static float src_value(int g, int which, size_t i) {
  return (float)((i * 7 + (size_t)g * 13 + (size_t)which * 5) % 1021);
}

static void fill_sources() {
  const size_t n = bytes_per_sender / sizeof(float);
  host_a.resize(n);
  host_b.resize(n);
  for (int g = 0; g < ngpus; g++) {
    for (size_t i = 0; i < n; i++) {
      host_a[i] = src_value(g, 0, i);
      host_b[i] = src_value(g, 1, i);
    }
    CK(cudaSetDevice(g));
    CK(cudaMemcpy(bufs[g].src0, host_a.data(), bytes_per_sender, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(bufs[g].src1, host_b.data(), bytes_per_sender, cudaMemcpyHostToDevice));
    /* a pageable copy returns before its DMA lands, and the kernels run on non-blocking streams */
    CK(cudaDeviceSynchronize());
  }
}

/* Receiver g + 1 holds what sender g pushed (sampled: every 4099th float and the last one). */
static bool check(const config& c, int g) {
  const size_t n = bytes_per_sender / sizeof(float);
  const size_t per_block = config_bytes(c) / (size_t)c.blocks / 16 * 16;
  const size_t covered = per_block * (size_t)c.blocks / sizeof(float);
  static std::vector<float> got; /* sized once: a fresh 256 MiB vector per check costs seconds */
  got.resize(n);
  CK(cudaSetDevice(g + 1));
  CK(cudaMemcpy(got.data(), bufs[g + 1].dst, bytes_per_sender, cudaMemcpyDeviceToHost));
  for (size_t k = 0; k <= covered / 4099; k++) {
    const size_t i = k < covered / 4099 ? k * 4099 : covered - 1;
    const bool pull = strcmp(c.pattern, "pull") == 0;
    const float want =
        src_value(g, 0, i) + (c.srcs == 2 ? src_value(pull ? g + 1 : g, 1, i) : 0.0f);
    if (got[i] != want) {
      fprintf(stderr, "bench_push: GPU %d -> %d element %zu: %g, expected %g\n", g, g + 1, i,
              (double)got[i], (double)want);
      return false;
    }
  }
  return true;
}

static bool run(const config& c) {
  const int nsend = strcmp(c.pattern, "one") == 0 ? 1 : ngpus - 1;
  const bool pull = strcmp(c.pattern, "pull") == 0;
  const size_t per_block = config_bytes(c) / (size_t)c.blocks / 16 * 16;
  kernel_fn k = pick_kernel(c.unroll, c.ld, c.st);
  for (int g = 0; g < nsend; g++) {
    CK(cudaSetDevice(g + 1));
    CK(cudaMemset(bufs[g + 1].dst, 0, bytes_per_sender));
    CK(cudaDeviceSynchronize());
  }
  std::vector<std::vector<float>> ms(nsend);
  for (int it = 0; it < iters + 1; it++) {
    for (int g = 0; g < nsend; g++) {
      const int on = pull ? g + 1 : g; /* the GPU whose kernel moves transfer g -> g + 1 */
      push_args a;
      a.src0 = bufs[g].src0;
      a.src1 = c.srcs == 2 ? bufs[on].src1 : nullptr;
      a.dst = bufs[g + 1].dst;
      a.flags = bufs[g + 1].flags;
      a.per_block = per_block;
      a.step = c.step;
      a.layout = c.layout;
      a.fence = c.fence;
      a.times = bufs[on].times;
      CK(cudaSetDevice(on));
      CK(cudaEventRecord(bufs[on].t0, bufs[on].stream));
      k<<<c.blocks, c.threads, 0, bufs[on].stream>>>(a);
      CK(cudaGetLastError());
      CK(cudaEventRecord(bufs[on].t1, bufs[on].stream));
    }
    for (int g = 0; g < nsend; g++) {
      const int on = pull ? g + 1 : g;
      CK(cudaSetDevice(on));
      CK(cudaStreamSynchronize(bufs[on].stream));
      float t = 0;
      CK(cudaEventElapsedTime(&t, bufs[on].t0, bufs[on].t1));
      if (it > 0) ms[g].push_back(t); /* the first run warms up */
    }
  }
  bool ok = true;
  for (int g = 0; g < nsend && ok; g++) ok = check(c, g);
  double sum = 0, worst = 1e30;
  for (int g = 0; g < nsend; g++) {
    std::vector<float> v = ms[g];
    std::sort(v.begin(), v.end());
    const double gbs = (double)per_block * c.blocks / (v[v.size() / 2] * 1e-3) / 1e9;
    sum += gbs;
    if (gbs < worst) worst = gbs;
  }
  /* How evenly the blocks of the first transfer's last launch moved their equal shares: each
   * block's time against the launch's span (first start to last end), which is what an
   * operation costs when every block must finish before the next one starts. */
  std::vector<unsigned long long> tm(2 * (size_t)c.blocks);
  const int mover = pull ? 1 : 0;
  CK(cudaSetDevice(mover));
  CK(cudaMemcpy(tm.data(), bufs[mover].times, tm.size() * sizeof(tm[0]), cudaMemcpyDeviceToHost));
  std::vector<double> dur(c.blocks);
  unsigned long long first = ~0ull, last = 0;
  for (int b = 0; b < c.blocks; b++) {
    dur[b] = (double)(tm[2 * b + 1] - tm[2 * b]) * 1e-3;
    first = std::min(first, tm[2 * b]);
    last = std::max(last, tm[2 * b + 1]);
  }
  std::sort(dur.begin(), dur.end());
  printf(
      "move pattern=%s srcs=%d threads=%d unroll=%d layout=%s fence=%s step=%zuK blocks=%d "
      "ld=%s st=%s MiB=%zu : GB/s a sender mean %.1f slowest %.1f, a block %.2f; block us "
      "min %.0f median %.0f max %.0f span %.0f %s\n",
      c.pattern, c.srcs, c.threads, c.unroll,
      c.layout == LAYOUT_WARP_SLAB   ? "slab"
      : c.layout == LAYOUT_WARP_HUNK ? "hunk"
                                     : "strided",
      c.fence == FENCE_NONE        ? "none"
      : c.fence == FENCE_LEADER    ? "leader"
      : c.fence == FENCE_PUBLISHER ? "publisher"
                                   : "release",
      c.step >> 10, c.blocks,
      c.ld == 2 ? "nc"
      : c.ld    ? "volatile"
                : "plain",
      c.st ? "cs" : "plain", config_bytes(c) >> 20, sum / nsend, worst, sum / nsend / c.blocks,
      dur[0], dur[dur.size() / 2], dur.back(), (double)(last - first) * 1e-3, ok ? "OK" : "WRONG");
  fflush(stdout);
  return ok;
}

int main(int argc, char** argv) {
  size_t mib = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (strcmp(argv[i], "--mib-per-sender") == 0)
      mib = strtoull(argv[i + 1], nullptr, 10);
    else if (strcmp(argv[i], "--iters") == 0)
      iters = atoi(argv[i + 1]);
  }
  const bool balance = argc > 1 && strcmp(argv[argc - 1], "--balance") == 0;
  CK(cudaGetDeviceCount(&ngpus));
  if (ngpus < 2) {
    fprintf(stderr, "bench_push: needs 2 GPUs or more, found %d\n", ngpus);
    return 2;
  }
  bytes_per_sender = mib << 20;
  bufs.resize(ngpus);
  for (int g = 0; g < ngpus; g++) {
    CK(cudaSetDevice(g));
    for (int p = 0; p < ngpus; p++) {
      if (p == g) continue;
      int can = 0;
      CK(cudaDeviceCanAccessPeer(&can, g, p));
      if (!can) {
        fprintf(stderr, "bench_push: GPU %d cannot access GPU %d\n", g, p);
        return 2;
      }
      cudaError_t e = cudaDeviceEnablePeerAccess(p, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
      (void)cudaGetLastError();
    }
    CK(cudaMalloc(&bufs[g].src0, bytes_per_sender));
    CK(cudaMalloc(&bufs[g].src1, bytes_per_sender));
    CK(cudaMalloc(&bufs[g].dst, bytes_per_sender));
    CK(cudaMalloc(&bufs[g].flags, 1024 * sizeof(unsigned long long)));
    CK(cudaMalloc(&bufs[g].times, 2 * 1024 * sizeof(unsigned long long)));
    CK(cudaStreamCreateWithFlags(&bufs[g].stream, cudaStreamNonBlocking));
    CK(cudaEventCreate(&bufs[g].t0));
    CK(cudaEventCreate(&bufs[g].t1));
  }
  fill_sources();

  /* Two baselines, then one knob at a time around each: Baton's executor today (256 threads, 8
   * vectors, strided, the publishing warp, ~192 KiB steps, 62 blocks) and stock NCCL's shape
   * (512 threads, 4 vectors, warp hunks, publishing warp, 512 KiB steps, 24 blocks). */
  const config ours = {"chain", 1, 256, 8, LAYOUT_STRIDED, FENCE_PUBLISHER, 192 << 10, 62, 0, 0};
  const config stockish = {"chain",         1,         512, 4, LAYOUT_WARP_HUNK,
                           FENCE_PUBLISHER, 512 << 10, 24,  0, 0};
  std::vector<config> list;
  for (const config& b : {ours, stockish}) {
    list.push_back(b);
    config c = b;
    c.pattern = "one";
    list.push_back(c);
    c.pattern = "pull";
    list.push_back(c);
    c.srcs = 2;
    list.push_back(c);
    for (int v : {1, 8, 24, 32, 62}) {
      c = b;
      c.blocks = v;
      if (v != b.blocks) list.push_back(c);
    }
    for (int v : {256, 512}) {
      c = b;
      c.threads = v;
      c.unroll = v == 256 ? 8 : 4;
      if (v != b.threads) list.push_back(c);
    }
    for (int v : {4, 8, 16}) {
      c = b;
      c.unroll = v;
      if (v != b.unroll) list.push_back(c);
    }
    for (int v : {LAYOUT_STRIDED, LAYOUT_WARP_HUNK, LAYOUT_WARP_SLAB}) {
      c = b;
      c.layout = v;
      if (v != b.layout) list.push_back(c);
    }
    for (int v : {FENCE_NONE, FENCE_LEADER, FENCE_PUBLISHER, FENCE_RELEASE}) {
      c = b;
      c.fence = v;
      if (v != b.fence) list.push_back(c);
    }
    for (size_t v : {(size_t)64 << 10, (size_t)192 << 10, (size_t)512 << 10}) {
      c = b;
      c.step = v;
      if (v != b.step) list.push_back(c);
    }
    for (int v : {1, 2}) {
      c = b;
      c.ld = v;
      list.push_back(c);
    }
    c = b;
    c.st = 1;
    list.push_back(c);
    c = b;
    c.srcs = 2;
    list.push_back(c);
  }
  if (balance) { /* --balance: how evenly blocks share the links, per operation size */
    list.clear();
    const struct {
      int threads, unroll, layout, blocks;
    } shapes[] = {{256, 8, LAYOUT_STRIDED, 62},   {256, 8, LAYOUT_WARP_HUNK, 62},
                  {512, 4, LAYOUT_WARP_HUNK, 62}, {256, 8, LAYOUT_STRIDED, 48},
                  {256, 8, LAYOUT_STRIDED, 32},   {256, 8, LAYOUT_STRIDED, 24},
                  {512, 4, LAYOUT_WARP_HUNK, 48}, {512, 4, LAYOUT_WARP_HUNK, 32},
                  {512, 4, LAYOUT_WARP_HUNK, 24}, {512, 4, LAYOUT_WARP_HUNK, 16}};
    for (size_t mib : {(size_t)64, (size_t)256})
      for (const auto& sh : shapes) {
        config c = ours;
        c.threads = sh.threads;
        c.unroll = sh.unroll;
        c.layout = sh.layout;
        c.blocks = sh.blocks;
        c.mib = mib;
        list.push_back(c);
        if (mib == 64 && sh.blocks == 62 && sh.threads == 256 && sh.layout == LAYOUT_STRIDED) {
          c.pattern = "one";
          list.push_back(c);
          c.pattern = "chain";
          c.srcs = 2;
          list.push_back(c);
        }
      }
  }
  int bad = 0;
  for (const config& c : list) bad += run(c) ? 0 : 1;
  printf("bench_push: %zu configurations, %d wrong\n", list.size(), bad);
  return bad ? 1 : 0;
}
