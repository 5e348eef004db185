/* bench_pair: what a small direct AllReduce costs on N GPUs of one host, against the least a kernel
 * that meets its peers can cost (issue 27: where the 5.7 us of an 8-byte graph-replayed
 * all-reduce on 2 H100s go, and how far from the floor it is).
 *
 * Rank r runs on GPU r, each with its own stream and its own graph of NODES launches, replayed
 * together REPS times as nccl-tests -G replays one graph a GPU; time per operation is the slowest
 * GPU's median replay over NODES. Variants, each an 8-byte operation unless named otherwise:
 *   empty        an empty kernel of the executor's shape (256 threads): the launch alone
 *   flag         one thread: read this rank's counter, store counter + 1 into a flag word in every
 *                peer's memory, poll the peers' words in this GPU's memory, store the counter:
 *                the least a kernel that waits for its peers does
 *   flag_block   the same, then one __syncthreads and the counter read by every thread first
 *   empty_tiny_args, empty_small_args
 *                empty kernels taking the tiny and the small (4 KiB) parameter blocks
 *   direct       Baton's direct kernel (direct_device.cuh), OneShot LL, float Max, the small
 *                parameter block as kernel_direct.cu takes it, no progress marks
 *   direct_marks as built: with the launch progress marks
 *   direct_1k, direct_32k  direct at 1 KiB and 32 KiB
 * Each direct variant stamps %globaltimer at the start and the end of rank 0's block: the body's
 * mean and the mean start-to-start interval split an operation into body and gap. The results
 * are checked after the replays (Max over ranks of rank + 1, in place: N everywhere). Then each
 * runs again with direct_device.cuh's DIRECT_PHASE marks on (c_phases): block 0's thread 0 adds
 * the time since its previous mark at eight points, printed as a table (the marks themselves
 * cost about 0.15 us each, so that table's us/op is above the clean one).
 * Build: nvcc -O3 -arch=sm_90 -Iinclude -Isrc -std=c++17 tests/gpu/bench_pair.cu; run: bench_pair N */
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

/* direct_device.cuh's phase marks: block 0's thread 0 adds the time since its last mark */
#define NPHASES 10
__device__ unsigned long long g_phase[NPHASES], g_phase_n[NPHASES], g_last;
__constant__ int c_phases; /* 0: the marks cost a test of a constant (the clean timings) */
static __device__ __forceinline__ void phase_mark(int i) {
  if (c_phases == 0 || blockIdx.x != 0 || threadIdx.x != 0) return;
  const unsigned long long t = gtimer();
  g_phase[i] += t - g_last;
  g_phase_n[i]++;
  g_last = t;
}
#define DIRECT_PHASE(i) phase_mark(i)

#include "device/cuda/cuda_exec.h"
#include "device/cuda/direct_device.cuh"

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      fprintf(stderr, "bench_pair: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      exit(2);                                                                                 \
    }                                                                                          \
  } while (0)

#define NODES 100
#define REPS 30
#define STAMPS 4096
#define MAXR 8
#define ELEMS (32768 / 4)

/* stamps[0]: launches so far; then (start, end) pairs of block 0 (rank 0's stamps only) */
static __device__ __forceinline__ void stamp(unsigned long long* stamps, unsigned long long t0) {
  if (stamps == nullptr) return;
  __syncthreads();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const unsigned long long i = atomicAdd(&stamps[0], 1ull) % (STAMPS / 2 - 1);
    stamps[2 + 2 * i] = t0;
    stamps[3 + 2 * i] = gtimer();
  }
}

__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1) empty_kernel() {}

struct flag_args_t {
  uint64_t* ctr;                      /* this rank's counter (its GPU) */
  volatile uint64_t* mine;            /* the peers' words, here: mine[8 j] written by peer j */
  volatile uint64_t* theirs[MAXR];    /* my word in peer j's memory */
  int peers;
  unsigned long long* stamps;
};

__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1) flag_kernel(const flag_args_t a) {
  const unsigned long long t0 = gtimer();
  if (threadIdx.x == 0) {
    const uint64_t s = *a.ctr + 1;
    for (int j = 0; j < a.peers; j++) *a.theirs[j] = s;
    for (int j = 0; j < a.peers; j++)
      while (a.mine[8 * j] < s) {
      }
    *a.ctr = s;
  }
  stamp(a.stamps, t0);
}

__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1) flag_block_kernel(const flag_args_t a) {
  const unsigned long long t0 = gtimer();
  const uint64_t s = *(volatile uint64_t*)a.ctr + 1;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int j = 0; j < a.peers; j++) *a.theirs[j] = s;
    for (int j = 0; j < a.peers; j++)
      while (a.mine[8 * j] < s) {
      }
    *a.ctr = s;
  }
  __syncthreads();
  stamp(a.stamps, t0);
}

/* kernel_direct.cu's body with the small parameter block; the progress marks are written when
 * hdr.progress is set (progress_begin/end return at once without it) */
__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1)
    direct_kernel(const __grid_constant__ cuda_args_small_t args, unsigned long long* stamps) {
  const unsigned long long t0 = gtimer();
  if (blockIdx.x == 0 && threadIdx.x == 0) g_last = t0;
  baton::progress_begin(&args.hdr);
  baton::direct_block(&args.hdr, args.works);
  baton::progress_end(&args.hdr);
  phase_mark(8);
  stamp(stamps, t0);
}

/* empty kernels with the tiny and the small parameter blocks: what the block's size costs */
__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1)
    empty_tiny_kernel(const __grid_constant__ cuda_args_tiny_t args) {
  if (args.hdr.nblocks < 0) args.hdr.status->error = 1; /* never: keeps the block read */
}
__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1)
    empty_small_kernel(const __grid_constant__ cuda_args_small_t args) {
  if (args.hdr.nblocks < 0) args.hdr.status->error = 1;
}

static int n;
static cudaStream_t st[MAXR];
static float* buf[MAXR];
static cuda_chan_t* chans[MAXR];
static uint32_t* abort_d;
static cuda_status_t* status_h[MAXR];
static cuda_status_t* status_d[MAXR];
static cuda_progress_t* prog_h[MAXR];
static unsigned int* prog_blocks[MAXR];
static unsigned long long* stamps; /* on GPU 0 */

/* The FIFO a -> b in b's memory (the receiver owns it), with the sender's mirror on a and the
 * receiver's on b. */
static void fifo(int a, int b, cuda_conn_t** send_mirror, cuda_conn_t** recv_mirror) {
  cuda_conn_t c;
  memset(&c, 0, sizeof(c));
  c.buff_bytes[PROTO_LL] = 8 * 65536;
  CK(cudaSetDevice(b));
  CK(cudaMalloc((void**)&c.buffs[PROTO_LL], (size_t)c.buff_bytes[PROTO_LL]));
  CK(cudaMemset(c.buffs[PROTO_LL], 0, (size_t)c.buff_bytes[PROTO_LL]));
  CK(cudaMalloc((void**)&c.head, 64));
  CK(cudaMalloc((void**)&c.tail, 64));
  CK(cudaMalloc((void**)&c.sizes, 64));
  CK(cudaMemset(c.head, 0, 64));
  CK(cudaMemset(c.tail, 0, 64));
  CK(cudaMalloc((void**)recv_mirror, sizeof(c)));
  CK(cudaMemcpy(*recv_mirror, &c, sizeof(c), cudaMemcpyHostToDevice));
  CK(cudaSetDevice(a));
  CK(cudaMalloc((void**)send_mirror, sizeof(c)));
  CK(cudaMemcpy(*send_mirror, &c, sizeof(c), cudaMemcpyHostToDevice));
}

static cuda_args_small_t direct_args(int r, size_t bytes, bool marks) {
  cuda_args_small_t a;
  memset(&a, 0, sizeof(a));
  a.hdr.chans = chans[r];
  a.hdr.abort_flag = abort_d;
  a.hdr.status = status_d[r];
  a.hdr.rank = r;
  a.hdr.nranks = n;
  a.hdr.nblocks = 1;
  a.hdr.first[1] = 1;
  if (marks) {
    void* d = NULL;
    CK(cudaHostGetDevicePointer(&d, (void*)prog_h[r], 0));
    a.hdr.progress = (cuda_progress_t*)d;
    a.hdr.progress_blocks = prog_blocks[r];
    a.hdr.launch = 1;
  }
  cuda_work_t& w = a.works[0];
  w.func = FUNC_ALLREDUCE;
  w.algo = ALGO_ONESHOT;
  w.proto = PROTO_LL;
  w.dtype = ncclFloat32;
  w.op = DEV_OP_MAX;
  w.esize = 4;
  w.root = -1;
  w.chunk = 65536 / 16 * 8 / 4; /* a slot's lines, in elements */
  w.count = bytes / 4;
  w.cnt = bytes / 4;
  w.sendbuff = (const char*)buf[r];
  w.recvbuff = (char*)buf[r];
  return a;
}

/* Median over REPS of the slowest rank's replay time, per node. */
static double replay(std::vector<cudaGraphExec_t>& ge) {
  std::vector<cudaEvent_t> e0(n), e1(n);
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaEventCreate(&e0[r]));
    CK(cudaEventCreate(&e1[r]));
  }
  for (int w = 0; w < 2; w++) {
    for (int r = 0; r < n; r++) {
      CK(cudaSetDevice(r));
      CK(cudaGraphLaunch(ge[r], st[r]));
    }
  }
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaStreamSynchronize(st[r]));
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
  std::sort(ms.begin(), ms.end());
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaEventDestroy(e0[r]));
    CK(cudaEventDestroy(e1[r]));
    CK(cudaGraphExecDestroy(ge[r]));
  }
  return ms[ms.size() / 2] * 1000.0 / NODES;
}

/* A graph a rank of NODES launches of fn(r), replayed. */
template <typename F>
static double graph_time(F fn) {
  std::vector<cudaGraphExec_t> ge(n);
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st[r], cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < NODES; i++) fn(r);
    CK(cudaStreamEndCapture(st[r], &g));
    CK(cudaGraphInstantiate(&ge[r], g, 0));
    CK(cudaGraphDestroy(g));
  }
  return replay(ge);
}

static void stamps_read(double* body, double* s2s) {
  CK(cudaSetDevice(0));
  std::vector<unsigned long long> h(STAMPS);
  CK(cudaMemcpy(h.data(), stamps, STAMPS * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  const unsigned long long k = h[0] < (STAMPS / 2 - 1) ? h[0] : (STAMPS / 2 - 1);
  double b = 0, s = 0;
  int nb = 0, ns = 0;
  for (unsigned long long i = 0; i < k; i++) {
    b += (double)(h[3 + 2 * i] - h[2 + 2 * i]);
    nb++;
    if (i > 0 && h[2 + 2 * i] > h[2 * i] && h[2 + 2 * i] - h[2 * i] < 100000) {
      s += (double)(h[2 + 2 * i] - h[2 * i]);
      ns++;
    }
  }
  *body = nb ? b / nb / 1000.0 : -1;
  *s2s = ns ? s / ns / 1000.0 : -1;
  CK(cudaMemset(stamps, 0, STAMPS * sizeof(unsigned long long)));
}

static bool check(size_t bytes, const char* name) {
  bool ok = true;
  std::vector<float> h(bytes / 4);
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaStreamSynchronize(st[r]));
    CK(cudaMemcpy(h.data(), buf[r], bytes, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < h.size(); i++)
      if (h[i] != (float)n) {
        printf("# %s: rank %d element %zu is %g, expected %d\n", name, r, i, h[i], n);
        ok = false;
        break;
      }
    if (status_h[r]->error != 0) {
      printf("# %s: rank %d kernel error %d\n", name, r, status_h[r]->error);
      ok = false;
    }
  }
  return ok;
}

static void reset_bufs() {
  std::vector<float> h(ELEMS);
  for (int r = 0; r < n; r++) {
    std::fill(h.begin(), h.end(), (float)(r + 1));
    CK(cudaSetDevice(r));
    CK(cudaMemcpy(buf[r], h.data(), ELEMS * 4, cudaMemcpyHostToDevice));
  }
}

int main(int argc, char** argv) {
  n = argc > 1 ? atoi(argv[1]) : 2;
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  if (n < 2 || n > MAXR || n > DIRECT_MAX_RANKS || n > ndev) {
    printf("SKIP: bench_pair %d needs that many GPUs (%d here, at most %d)\n", n, ndev, MAXR);
    return 0;
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
    CK(cudaMalloc((void**)&buf[r], ELEMS * 4));
    CK(cudaHostAlloc((void**)&status_h[r], sizeof(cuda_status_t), cudaHostAllocMapped));
    memset((void*)status_h[r], 0, sizeof(cuda_status_t));
    CK(cudaHostGetDevicePointer((void**)&status_d[r], status_h[r], 0));
    CK(cudaHostAlloc((void**)&prog_h[r], sizeof(cuda_progress_t), cudaHostAllocMapped));
    memset((void*)prog_h[r], 0, sizeof(cuda_progress_t));
    CK(cudaMalloc((void**)&prog_blocks[r], sizeof(unsigned int)));
    CK(cudaMemset(prog_blocks[r], 0, sizeof(unsigned int)));
  }
  uint32_t* abort_h;
  CK(cudaSetDevice(0));
  CK(cudaHostAlloc((void**)&abort_h, 64, cudaHostAllocMapped | cudaHostAllocPortable));
  *abort_h = 0;
  CK(cudaHostGetDevicePointer((void**)&abort_d, abort_h, 0));
  CK(cudaMalloc((void**)&stamps, STAMPS * sizeof(unsigned long long)));
  CK(cudaMemset(stamps, 0, STAMPS * sizeof(unsigned long long)));

  /* the direct kernel's connections: send[j] / recv[j] to and from the j-th other rank */
  cuda_conn_t* sm[MAXR][MAXR];
  cuda_conn_t* rm[MAXR][MAXR];
  for (int a = 0; a < n; a++)
    for (int b = 0; b < n; b++)
      if (a != b) fifo(a, b, &sm[a][b], &rm[a][b]);
  for (int r = 0; r < n; r++) {
    cuda_chan_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.tree_up = -1;
    for (int j = 0; j < TREE_MAX_CHILDREN; j++) ch.tree_down[j] = -1;
    for (int j = 0; j < n - 1; j++) {
      const int p = steps_other_rank(r, j);
      ch.peer_send[j] = sm[r][p];
      ch.peer_recv[j] = rm[p][r];
    }
    CK(cudaSetDevice(r));
    CK(cudaMalloc((void**)&chans[r], sizeof(ch)));
    CK(cudaMemcpy(chans[r], &ch, sizeof(ch), cudaMemcpyHostToDevice));
  }
  /* the flag kernels' words: flags[r][j] in GPU r's memory, written by r's j-th peer */
  flag_args_t fa[MAXR];
  uint64_t* flags[MAXR];
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaMalloc((void**)&flags[r], 64 * MAXR));
    CK(cudaMemset(flags[r], 0, 64 * MAXR));
  }
  for (int r = 0; r < n; r++) {
    memset(&fa[r], 0, sizeof(fa[r]));
    CK(cudaSetDevice(r));
    CK(cudaMalloc((void**)&fa[r].ctr, 64));
    CK(cudaMemset(fa[r].ctr, 0, 64));
    fa[r].mine = flags[r];
    fa[r].peers = n - 1;
    for (int j = 0; j < n - 1; j++) {
      const int p = steps_other_rank(r, j);
      fa[r].theirs[j] = flags[p] + steps_peer_index(p, r) * 8; /* a word per 64-byte line */
    }
    fa[r].stamps = r == 0 ? stamps : nullptr;
  }

  struct row {
    const char* name;
    double us, body, s2s;
    bool ok;
  };
  std::vector<row> rows;
  double body = -1, s2s = -1;
  const dim3 grid(1), block(CUDA_EXEC_THREADS);

  rows.push_back({"empty", graph_time([&](int r) { empty_kernel<<<grid, block, 0, st[r]>>>(); }),
                  -1, -1, true});
  double t = graph_time([&](int r) { flag_kernel<<<grid, block, 0, st[r]>>>(fa[r]); });
  stamps_read(&body, &s2s);
  rows.push_back({"flag", t, body, s2s, true});
  t = graph_time([&](int r) { flag_block_kernel<<<grid, block, 0, st[r]>>>(fa[r]); });
  stamps_read(&body, &s2s);
  rows.push_back({"flag_block", t, body, s2s, true});

  {
    cuda_args_tiny_t et;
    cuda_args_small_t es;
    memset(&et, 0, sizeof(et));
    memset(&es, 0, sizeof(es));
    rows.push_back({"empty_tiny_args", graph_time([&](int r) {
                      empty_tiny_kernel<<<grid, block, 0, st[r]>>>(et);
                    }), -1, -1, true});
    rows.push_back({"empty_small_args", graph_time([&](int r) {
                      empty_small_kernel<<<grid, block, 0, st[r]>>>(es);
                    }), -1, -1, true});
  }
  struct dv {
    const char* name;
    size_t bytes;
    bool marks;
  };
  const dv dvs[] = {{"direct", 8, false},       {"direct_marks", 8, true},
                    {"direct_1k", 1024, false},   {"direct_2k", 2048, false},
                    {"direct_4k", 4096, false},   {"direct_8k", 8192, false},
                    {"direct_32k", 32768, false}};
  std::vector<std::vector<double>> phases;
  for (int pass = 0; pass < 2; pass++) {
  const int on = pass;
  for (int r = 0; r < n; r++) {
    CK(cudaSetDevice(r));
    CK(cudaMemcpyToSymbol(c_phases, &on, sizeof(on)));
  }
  for (const dv& v : dvs) {
    if (pass == 1 && v.marks) continue;
    reset_bufs();
    std::vector<cuda_args_small_t> as(n);
    for (int r = 0; r < n; r++) as[r] = direct_args(r, v.bytes, v.marks);
    t = graph_time([&](int r) {
      unsigned long long* sp = r == 0 ? stamps : nullptr;
      void* p[] = {(void*)&as[r], (void*)&sp};
      CK(cudaLaunchKernel((const void*)direct_kernel, grid, block, p, 0, st[r]));
    });
    stamps_read(&body, &s2s);
    if (pass == 0) rows.push_back({v.name, t, body, s2s, check(v.bytes, v.name)});
    unsigned long long ph[NPHASES], pn[NPHASES], zero[NPHASES] = {0};
    CK(cudaSetDevice(0));
    CK(cudaMemcpyFromSymbol(ph, g_phase, sizeof(ph)));
    CK(cudaMemcpyFromSymbol(pn, g_phase_n, sizeof(pn)));
    CK(cudaMemcpyToSymbol(g_phase, zero, sizeof(zero)));
    CK(cudaMemcpyToSymbol(g_phase_n, zero, sizeof(zero)));
    std::vector<double> pr;
    const double launches = (double)(pn[8] ? pn[8] : 1);
    for (int i = 0; i < NPHASES; i++) pr.push_back(ph[i] / launches / 1000.0);
    pr.push_back(pn[2] / launches); /* chunks a launch */
    pr.push_back(t);
    if (pass == 1) phases.push_back(pr);
  }
  }
  bool all = true;
  printf("# bench_pair: %d GPUs, graph replay, %d launches a graph, median of %d\n", n, NODES, REPS);
  printf("%-18s %10s %10s %14s %6s\n", "variant", "us/op", "body us", "start-start us", "check");
  for (const row& r : rows) {
    printf("%-18s %10.3f %10.3f %14.3f %6s\n", r.name, r.us, r.body, r.s2s, r.ok ? "ok" : "WRONG");
    all = all && r.ok;
  }
  printf("# rank 0's block, us a launch since the previous mark: 1 mirrors in, 2 head checked,\n"
         "# 7 sends issued, 3 own lines done, 4 every thread done, 5 published, 6 mirrors out,\n"
         "# 8 end (marks); then chunks a launch\n");
  printf("%-18s", "variant");
  for (int i = 1; i < 9; i++) printf(" %6d", i);
  printf(" %7s %8s\n", "chunks", "us/op");
  for (size_t v = 0, m = 0; v < sizeof(dvs) / sizeof(dvs[0]); v++) {
    if (dvs[v].marks) continue;
    printf("%-18s", dvs[v].name);
    for (int i = 1; i < 9; i++) printf(" %6.3f", phases[m][i]);
    printf(" %7.2f %8.3f\n", phases[m][NPHASES], phases[m][NPHASES + 1]);
    m++;
  }
  if (!all) {
    printf("FAIL: a direct variant computed a wrong result\n");
    return 1;
  }
  return 0;
}
