/* bench_launch: what one launch of the CUDA executor's kernel costs on the GPU when it has almost
 * nothing to do, against an empty kernel and a memcpy node (tests/gpu/run.sh's launch stage).
 *
 * The question (issue 17): a 1-rank 8-byte all-reduce replayed from a CUDA graph took 7.98 us of
 * GPU time where stock took 0.92. Here the executor's kernel body (exec_block_device.cuh, compiled
 * into this file) runs one 8-byte point-to-point send into a connection whose receiver never
 * needs to answer (its head is far ahead), so nothing waits on a peer: what is measured is the
 * launch and the kernel's own fixed cost. Each variant is a graph of NODES launches replayed
 * REPS times (timed with events; the median replay over NODES), and the timed variants also stamp
 * %globaltimer at the start and the end of block 0, which splits a launch into the kernel body and
 * the gap between kernels.
 *   empty           __global__ void k() {} with 256 threads
 *   empty_smem      the same with the executor's launch shape: 32 KiB of dynamic shared memory,
 *                   __launch_bounds__(256, 1), the shared-memory carveout hint
 *   exec_ll         the executor's kernel, one LL send of 8 bytes (tiny parameter block)
 *   exec_simple     the same, Simple
 *   exec_nocarve    exec_ll without the carveout hint
 *   exec_ll_x8      exec_ll with 8 items in the launch (8 sends of 8 bytes, one block)
 *   memcpy          cudaMemcpyAsync of 8 bytes, device to device (what stock does on one rank)
 *   pair_ring_ll, pair_oneshot, pair_twoshot
 *                   two ranks on this GPU (two streams of one graph), FIFOs between them in its
 *                   memory: an 8-byte float AllReduce by the ring (the 2-rank LL exchange) and by
 *                   the direct algorithms, results checked after the replays
 *   pair_ring_ll_marks, pair_oneshot_marks
 *                   the same with the launch progress marks the kernels write as built
 *                   (cuda_exec.h's progress marks: mapped host memory), what the hang watch costs
 * --ncu: launches every kernel variant 20 times eagerly instead (for ncu --launch-skip).
 * Build: nvcc -O3 -arch=sm_90 -lineinfo -Iinclude -Isrc tests/gpu/bench_launch.cu (add
 * -DBATON_DEVICE_TRACE for the executor's own timelines of block 0). */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "device/cuda/cuda_exec.h"
#include "device/cuda/direct_device.cuh"
#include "device/cuda/exec_block_device.cuh"

#define CK(x)                                                                                    \
  do {                                                                                           \
    cudaError_t e_ = (x);                                                                        \
    if (e_ != cudaSuccess) {                                                                     \
      fprintf(stderr, "bench_launch: %s: %s (line %d)\n", #x, cudaGetErrorString(e_), __LINE__); \
      exit(2);                                                                                   \
    }                                                                                            \
  } while (0)

#define NODES 100
#define REPS 30
#define STAMPS 4096

BATON_EXEC_KERNEL(bench_exec, cuda_args_tiny_t)
BATON_EXEC_KERNEL(bench_exec_nocarve, cuda_args_tiny_t)

/* the direct algorithms' kernel (kernel_direct.cu's body), with the tiny parameter block */
__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1)
    bench_direct(const __grid_constant__ cuda_args_tiny_t args) {
  baton::direct_block(&args.hdr, args.works);
}

/* kernel_direct.cu's entry point as built: with the launch progress marks */
__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1)
    bench_direct_marks(const __grid_constant__ cuda_args_tiny_t args) {
  baton::progress_begin(&args.hdr);
  baton::direct_block(&args.hdr, args.works);
  baton::progress_end(&args.hdr);
}

static __device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/* stamps[0]: launches so far; then (start, end) pairs of block 0 */
__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1)
    bench_exec_timed(const __grid_constant__ cuda_args_tiny_t args, unsigned long long* stamps) {
  const unsigned long long t0 = gtimer();
  baton::exec_block(&args.hdr, args.works);
  __syncthreads();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const unsigned long long i = atomicAdd(&stamps[0], 1ull) % (STAMPS / 2 - 1);
    stamps[2 + 2 * i] = t0;
    stamps[3 + 2 * i] = gtimer();
  }
}

__global__ void empty_kernel() {}

__global__ void __launch_bounds__(CUDA_EXEC_THREADS, 1)
    empty_smem_kernel(unsigned long long* stamps) {
  extern __shared__ char dyn[];
  const unsigned long long t0 = gtimer();
  if (threadIdx.x == 1023) dyn[0] = 0; /* never: keeps the shared memory declared */
  __syncthreads();
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    const unsigned long long i = atomicAdd(&stamps[0], 1ull) % (STAMPS / 2 - 1);
    stamps[2 + 2 * i] = t0;
    stamps[3 + 2 * i] = gtimer();
  }
}

/* A connection towards a receiver that is never waited for. */
static cuda_conn_t* make_conn(int proto) {
  cuda_conn_t c;
  memset(&c, 0, sizeof(c));
  c.buff_bytes[PROTO_SIMPLE] = 8 * 65536;
  c.buff_bytes[PROTO_LL] = 8 * 4096;
  CK(cudaMalloc((void**)&c.buffs[PROTO_SIMPLE], (size_t)c.buff_bytes[PROTO_SIMPLE]));
  CK(cudaMalloc((void**)&c.buffs[PROTO_LL], (size_t)c.buff_bytes[PROTO_LL]));
  CK(cudaMalloc((void**)&c.head, 64));
  CK(cudaMalloc((void**)&c.tail, 64));
  CK(cudaMalloc((void**)&c.sizes, 64));
  CK(cudaMemset(c.head, 0x7f, 8)); /* far ahead: the sender never waits */
  c.head_seen = 1ull << 60;
  (void)proto;
  cuda_conn_t* d;
  CK(cudaMalloc((void**)&d, sizeof(c)));
  CK(cudaMemcpy(d, &c, sizeof(c), cudaMemcpyHostToDevice));
  return d;
}

static cuda_args_tiny_t make_args(int proto, int nitems, const char* src, const cuda_chan_t* chans,
                                  cuda_conn_t* conn, const uint32_t* abort_flag,
                                  cuda_status_t* status) {
  cuda_args_tiny_t a;
  memset(&a, 0, sizeof(a));
  a.hdr.chans = chans;
  a.hdr.abort_flag = abort_flag;
  a.hdr.status = status;
  a.hdr.rank = 0;
  a.hdr.nranks = 2;
  a.hdr.nblocks = 1;
  a.hdr.first[0] = 0;
  a.hdr.first[1] = (uint16_t)nitems;
  a.hdr.chan_id[0] = 0;
  for (int i = 0; i < nitems; i++) {
    cuda_work_t& w = a.works[i];
    w.func = FUNC_SEND;
    w.algo = ALGO_RING;
    w.proto = (uint8_t)proto;
    w.dtype = ncclFloat32;
    w.op = DEV_OP_SUM;
    w.esize = 4;
    w.root = 1;
    w.chunk = proto == PROTO_LL ? 4096 / 16 * 8 : 65536;
    w.count = 2;
    w.off = 0;
    w.cnt = 8;
    w.sendbuff = src;
    w.u.conn = conn;
  }
  return a;
}

/* ---- Two ranks on this GPU ---------------------------------------------------------------------
 */
struct pair_t {
  cuda_chan_t* chans[2]; /* each rank's channel table (one channel) */
  float* buf[2];         /* each rank's in/out (in place) */
  int* ring;
};

/* The FIFO a -> b in device memory, and the sender's and the receiver's mirrors of it. */
static void pair_fifo(cuda_conn_t** send_mirror, cuda_conn_t** recv_mirror) {
  cuda_conn_t c;
  memset(&c, 0, sizeof(c));
  c.buff_bytes[PROTO_LL] = 8 * 4096;
  CK(cudaMalloc((void**)&c.buffs[PROTO_LL], (size_t)c.buff_bytes[PROTO_LL]));
  CK(cudaMemset(c.buffs[PROTO_LL], 0, (size_t)c.buff_bytes[PROTO_LL]));
  CK(cudaMalloc((void**)&c.head, 64));
  CK(cudaMalloc((void**)&c.tail, 64));
  CK(cudaMalloc((void**)&c.sizes, 64));
  CK(cudaMemset(c.head, 0, 64));
  CK(cudaMemset(c.tail, 0, 64));
  CK(cudaMalloc((void**)send_mirror, sizeof(c)));
  CK(cudaMalloc((void**)recv_mirror, sizeof(c)));
  CK(cudaMemcpy(*send_mirror, &c, sizeof(c), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(*recv_mirror, &c, sizeof(c), cudaMemcpyHostToDevice));
}

static pair_t pair_make() {
  pair_t p;
  cuda_conn_t *s01, *r01, *s10, *r10;
  pair_fifo(&s01, &r01);
  pair_fifo(&s10, &r10);
  CK(cudaMalloc((void**)&p.ring, 2 * sizeof(int)));
  const int ring[2] = {0, 1};
  CK(cudaMemcpy(p.ring, ring, sizeof(ring), cudaMemcpyHostToDevice));
  for (int r = 0; r < 2; r++) {
    cuda_chan_t ch;
    memset(&ch, 0, sizeof(ch));
    ch.ring_ranks = p.ring;
    ch.ring_index = r;
    ch.tree_up = -1;
    for (int j = 0; j < TREE_MAX_CHILDREN; j++) ch.tree_down[j] = -1;
    ch.ring_send = r == 0 ? s01 : s10;
    ch.ring_recv = r == 0 ? r10 : r01;
    ch.peer_send[0] = ch.ring_send;
    ch.peer_recv[0] = ch.ring_recv;
    CK(cudaMalloc((void**)&p.chans[r], sizeof(ch)));
    CK(cudaMemcpy(p.chans[r], &ch, sizeof(ch), cudaMemcpyHostToDevice));
    CK(cudaMalloc((void**)&p.buf[r], 4096));
  }
  return p;
}

static cuda_args_tiny_t pair_args(const pair_t& p, int r, int algo, const uint32_t* abort_flag,
                                  cuda_status_t* status) {
  cuda_args_tiny_t a;
  memset(&a, 0, sizeof(a));
  a.hdr.chans = p.chans[r];
  a.hdr.abort_flag = abort_flag;
  a.hdr.status = status;
  a.hdr.rank = r;
  a.hdr.nranks = 2;
  a.hdr.nblocks = 1;
  a.hdr.first[1] = 1;
  cuda_work_t& w = a.works[0];
  w.func = FUNC_ALLREDUCE;
  w.algo = (uint8_t)algo;
  w.proto = PROTO_LL;
  w.dtype = ncclFloat32;
  w.op = DEV_OP_MAX;
  w.esize = 4;
  w.root = -1;
  w.chunk = 4096 / 16 * 8 / 4;
  w.count = 2;
  w.cnt = 2;
  w.sendbuff = (const char*)p.buf[r];
  w.recvbuff = (char*)p.buf[r];
  return a;
}

struct result {
  const char* name;
  double us_per_launch;
  double body_us; /* kernel body of block 0 (timed variants), -1 if none */
  double start_to_start_us;
};

/* Median replay time per node of a graph of NODES issues of fn on a capturing stream. */
template <typename F>
static double graph_time(cudaStream_t st, F fn) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < NODES; i++) fn();
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaGraphLaunch(ge, st)); /* warm up */
  CK(cudaGraphLaunch(ge, st));
  CK(cudaStreamSynchronize(st));
  std::vector<float> ms;
  for (int r = 0; r < REPS; r++) {
    CK(cudaEventRecord(e0, st));
    CK(cudaGraphLaunch(ge, st));
    CK(cudaEventRecord(e1, st));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  return ms[ms.size() / 2] * 1000.0 / NODES;
}

/* Mean body and mean start-to-start interval from the stamps of the last replays. */
static void stamps_read(unsigned long long* d, double* body, double* s2s) {
  std::vector<unsigned long long> h(STAMPS);
  CK(cudaMemcpy(h.data(), d, STAMPS * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  const unsigned long long n = h[0] < (STAMPS / 2 - 1) ? h[0] : (STAMPS / 2 - 1);
  double b = 0, s = 0;
  int nb = 0, ns = 0;
  for (unsigned long long i = 0; i < n; i++) {
    b += (double)(h[3 + 2 * i] - h[2 + 2 * i]);
    nb++;
    if (i > 0 && h[2 + 2 * i] > h[2 * i] && h[2 + 2 * i] - h[2 * i] < 100000) {
      s += (double)(h[2 + 2 * i] - h[2 * i]);
      ns++;
    }
  }
  *body = nb ? b / nb / 1000.0 : -1;
  *s2s = ns ? s / ns / 1000.0 : -1;
  CK(cudaMemset(d, 0, STAMPS * sizeof(unsigned long long)));
}

static void set_exec_attrs(const void* k, bool carveout) {
  CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, CUDA_EXEC_STAGE_BYTES));
  if (!carveout) return;
  struct cudaFuncAttributes attr;
  CK(cudaFuncGetAttributes(&attr, k));
  int smem_sm = 0;
  CK(cudaDeviceGetAttribute(&smem_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, 0));
  size_t need = CUDA_EXEC_STAGE_BYTES + attr.sharedSizeBytes + 1024;
  int pct = (int)((need * 100 + (size_t)smem_sm - 1) / (size_t)smem_sm);
  CK(cudaFuncSetAttribute(k, cudaFuncAttributePreferredSharedMemoryCarveout,
                          pct > 100 ? 100 : pct));
  printf("# %s: %d registers, %zu bytes static shared, %zu local, carveout %d%%\n",
         k == (const void*)bench_exec ? "exec" : "exec_timed", attr.numRegs, attr.sharedSizeBytes,
         attr.localSizeBytes, pct);
}

int main(int argc, char** argv) {
  const bool ncu = argc > 1 && strcmp(argv[1], "--ncu") == 0;
  CK(cudaSetDevice(0));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  char* src;
  char* dst;
  CK(cudaMalloc((void**)&src, 4096));
  CK(cudaMalloc((void**)&dst, 4096));
  cuda_chan_t* chans;
  CK(cudaMalloc((void**)&chans, sizeof(cuda_chan_t)));
  CK(cudaMemset(chans, 0, sizeof(cuda_chan_t)));
  uint32_t* abort_h;
  uint32_t* abort_d;
  CK(cudaHostAlloc((void**)&abort_h, 64, cudaHostAllocMapped));
  *abort_h = 0;
  CK(cudaHostGetDevicePointer((void**)&abort_d, abort_h, 0));
  cuda_status_t* status_h;
  cuda_status_t* status_d;
  CK(cudaHostAlloc((void**)&status_h, sizeof(cuda_status_t), cudaHostAllocMapped));
  memset((void*)status_h, 0, sizeof(cuda_status_t));
  CK(cudaHostGetDevicePointer((void**)&status_d, status_h, 0));
  unsigned long long* stamps;
  CK(cudaMalloc((void**)&stamps, STAMPS * sizeof(unsigned long long)));
  CK(cudaMemset(stamps, 0, STAMPS * sizeof(unsigned long long)));

  set_exec_attrs((const void*)bench_exec, true);
  set_exec_attrs((const void*)bench_exec_timed, true);
  set_exec_attrs((const void*)bench_exec_nocarve, false);
  set_exec_attrs((const void*)empty_smem_kernel, true);

  cuda_conn_t* conn_ll = make_conn(PROTO_LL);
  cuda_conn_t* conn_simple = make_conn(PROTO_SIMPLE);
  const cuda_args_tiny_t ll = make_args(PROTO_LL, 1, src, chans, conn_ll, abort_d, status_d);
  const cuda_args_tiny_t simple =
      make_args(PROTO_SIMPLE, 1, src, chans, conn_simple, abort_d, status_d);
  const cuda_args_tiny_t ll8 = make_args(PROTO_LL, 8, src, chans, conn_ll, abort_d, status_d);
  const dim3 grid(1), block(CUDA_EXEC_THREADS);
  const size_t smem = CUDA_EXEC_STAGE_BYTES;

  auto launch_exec = [&](const void* k, const cuda_args_tiny_t& a, bool timed) {
    void* params[2] = {(void*)&a, (void*)&stamps};
    CK(cudaLaunchKernel(k, grid, block, params, smem, st));
    (void)timed;
  };
  if (ncu) {
    for (int i = 0; i < 20; i++) {
      empty_kernel<<<1, CUDA_EXEC_THREADS, 0, st>>>();
      empty_smem_kernel<<<1, CUDA_EXEC_THREADS, smem, st>>>(stamps);
      launch_exec((const void*)bench_exec, ll, false);
      launch_exec((const void*)bench_exec, simple, false);
      launch_exec((const void*)bench_exec_nocarve, ll, false);
    }
    CK(cudaStreamSynchronize(st));
    printf("ncu mode: done (status error %d)\n", status_h->error);
    return 0;
  }

  std::vector<result> res;
  double body, s2s;
  res.push_back(
      {"empty", graph_time(st, [&] { empty_kernel<<<1, CUDA_EXEC_THREADS, 0, st>>>(); }), -1, -1});
  double t = graph_time(st, [&] { empty_smem_kernel<<<1, CUDA_EXEC_THREADS, smem, st>>>(stamps); });
  stamps_read(stamps, &body, &s2s);
  res.push_back({"empty_smem", t, body, s2s});
  t = graph_time(st, [&] { launch_exec((const void*)bench_exec_timed, ll, true); });
  stamps_read(stamps, &body, &s2s);
  res.push_back({"exec_ll", t, body, s2s});
  t = graph_time(st, [&] { launch_exec((const void*)bench_exec_timed, simple, true); });
  stamps_read(stamps, &body, &s2s);
  res.push_back({"exec_simple", t, body, s2s});
  res.push_back({"exec_ll_untimed",
                 graph_time(st, [&] { launch_exec((const void*)bench_exec, ll, false); }), -1, -1});
  res.push_back({"exec_nocarve",
                 graph_time(st, [&] { launch_exec((const void*)bench_exec_nocarve, ll, false); }),
                 -1, -1});
  t = graph_time(st, [&] { launch_exec((const void*)bench_exec_timed, ll8, true); });
  stamps_read(stamps, &body, &s2s);
  res.push_back({"exec_ll_x8", t, body, s2s});
  res.push_back(
      {"memcpy",
       graph_time(st, [&] { CK(cudaMemcpyAsync(dst, src, 8, cudaMemcpyDeviceToDevice, st)); }), -1,
       -1});
  /* two ranks on this GPU, in place, Max: rank 1's 2.0 everywhere after the first operation */
  pair_t pr = pair_make();
  cudaStream_t st2;
  CK(cudaStreamCreateWithFlags(&st2, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  static const int algos[5] = {ALGO_RING, ALGO_ONESHOT, ALGO_TWOSHOT, ALGO_RING, ALGO_ONESHOT};
  static const char* names[5] = {"pair_ring_ll", "pair_oneshot", "pair_twoshot",
                                 "pair_ring_ll_marks", "pair_oneshot_marks"};
  cuda_progress_t* prog_h[2];
  unsigned int* prog_blocks[2];
  for (int r = 0; r < 2; r++) {
    CK(cudaHostAlloc((void**)&prog_h[r], sizeof(cuda_progress_t), cudaHostAllocMapped));
    memset((void*)prog_h[r], 0, sizeof(cuda_progress_t));
    CK(cudaMalloc((void**)&prog_blocks[r], sizeof(unsigned int)));
    CK(cudaMemset(prog_blocks[r], 0, sizeof(unsigned int)));
  }
  for (int ai = 0; ai < 5; ai++) {
    const bool marks = ai >= 3;
    cuda_args_tiny_t a0 = pair_args(pr, 0, algos[ai], abort_d, status_d);
    cuda_args_tiny_t a1 = pair_args(pr, 1, algos[ai], abort_d, status_d);
    if (marks) {
      cuda_args_tiny_t* a[2] = {&a0, &a1};
      for (int r = 0; r < 2; r++) {
        void* d = NULL;
        CK(cudaHostGetDevicePointer(&d, (void*)prog_h[r], 0));
        a[r]->hdr.progress = (cuda_progress_t*)d;
        a[r]->hdr.progress_blocks = prog_blocks[r];
        a[r]->hdr.launch = 1;
        prog_h[r]->done = 0;
      }
    }
    const float init[2][2] = {{1.0f, 1.0f}, {2.0f, 2.0f}};
    for (int r = 0; r < 2; r++)
      CK(cudaMemcpy(pr.buf[r], init[r], sizeof(init[r]), cudaMemcpyHostToDevice));
    t = graph_time(st, [&] {
      CK(cudaEventRecord(fork, st));
      CK(cudaStreamWaitEvent(st2, fork, 0));
      void* p0[] = {(void*)&a0};
      void* p1[] = {(void*)&a1};
      const void* kern = algos[ai] == ALGO_RING ? (const void*)bench_exec
                         : marks                ? (const void*)bench_direct_marks
                                                : (const void*)bench_direct;
      const size_t sm = algos[ai] == ALGO_RING ? smem : 0;
      CK(cudaLaunchKernel(kern, grid, block, p0, sm, st));
      CK(cudaLaunchKernel(kern, grid, block, p1, sm, st2));
      CK(cudaEventRecord(join, st2));
      CK(cudaStreamWaitEvent(st, join, 0));
    });
    float got[2][2];
    for (int r = 0; r < 2; r++)
      CK(cudaMemcpy(got[r], pr.buf[r], sizeof(got[r]), cudaMemcpyDeviceToHost));
    const double want = 2.0;
    const bool ok =
        got[0][0] == 2.0f && got[0][1] == 2.0f && got[1][0] == 2.0f && got[1][1] == 2.0f;
    res.push_back({names[ai], t, -1, -1});
    if (marks && (prog_h[0]->done != 1 || prog_h[1]->done != 1)) {
      printf("# %s: no end mark (done %llu)\n", names[ai], (unsigned long long)prog_h[0]->done);
      status_h->error = 98;
    }
    printf("# %s: result %g (expected %g) %s\n", names[ai], got[0][0], want, ok ? "ok" : "WRONG");
    if (!ok) status_h->error = 99;
  }
  CK(cudaStreamSynchronize(st));
  if (status_h->error != 0) {
    printf("FAIL: the kernel reported error %d\n", status_h->error);
    return 1;
  }
  printf("%-20s %12s %12s %16s\n", "variant", "us/launch", "body us", "start-start us");
  for (const result& r : res)
    printf("%-20s %12.3f %12.3f %16.3f\n", r.name, r.us_per_launch, r.body_us, r.start_to_start_us);
  return 0;
}
