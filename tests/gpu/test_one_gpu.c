/* GPU test of what one GPU can prove through the public API (tests/gpu/run.sh's unit stage):
 *
 * 1. One-rank communicators launch nothing they do not need. Each operation is captured in a CUDA
 *    graph, whose nodes are counted and typed: in place and not scaling (every collective with a
 *    sum, send/recv to self onto itself, count 0): no node at all; out of place: one memcpy node;
 *    PreMulSum and floating Avg (scaling): one kernel node. Every graph is then replayed on fresh
 *    inputs and the outputs checked against host references, and the same operations run eagerly;
 *    eager copies at odd offsets and sizes (copy kernel and cudaMemcpyAsync) land byte for byte.
 * 2. Duplicate GPUs: two ranks on GPU 0 are refused without NCCL_MULTI_RANK_GPU_ENABLE (as stock
 *    2.28), accepted with it. With it (the test re-executes itself with the variable set), 2 and 4
 *    ranks on GPU 0 in one process run AllReduce (ring and whatever the planner picks), AllGather,
 *    Broadcast, ReduceScatter and AllToAll (its copy to self beside the kernel), eagerly and from a
 *    CUDA graph, every result checked.
 * The last line reads like a Check summary ("100%: Checks: N, Failures: 0, Errors: 0"). */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl.h"

#define MAXR 4

static int g_checks, g_fail;

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(2);                                                                               \
    }                                                                                        \
  } while (0)
#define NK(call)                                                                                 \
  do {                                                                                           \
    ncclResult_t r_ = (call);                                                                    \
    if (r_ != ncclSuccess) {                                                                     \
      fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, ncclGetErrorString(r_), \
              ncclGetLastError(NULL));                                                           \
      exit(2);                                                                                   \
    }                                                                                            \
  } while (0)

static void expect(int ok, const char* what) {
  g_checks++;
  if (!ok) {
    g_fail++;
    printf("FAIL %s\n", what);
  }
}

/* ---- One rank ----------------------------------------------------------------------------------
 */
typedef enum {
  OP_ALLREDUCE,
  OP_ALLGATHER,
  OP_BROADCAST,
  OP_REDUCE,
  OP_REDUCESCATTER,
  OP_SELF,
  OP_ALLTOALL,
  OP_COUNT
} op_t;
static const char* op_names[OP_COUNT] = {"AllReduce",     "AllGather",    "Broadcast", "Reduce",
                                         "ReduceScatter", "SendRecvSelf", "AllToAll"};

/* Issues op on comm: count elements of dtype with redop. */
static ncclResult_t issue(op_t op, const void* s, void* r, size_t count, ncclDataType_t dt,
                          ncclRedOp_t redop, ncclComm_t comm, cudaStream_t st) {
  switch (op) {
    case OP_ALLREDUCE:
      return ncclAllReduce(s, r, count, dt, redop, comm, st);
    case OP_ALLGATHER:
      return ncclAllGather(s, r, count, dt, comm, st);
    case OP_BROADCAST:
      return ncclBroadcast(s, r, count, dt, 0, comm, st);
    case OP_REDUCE:
      return ncclReduce(s, r, count, dt, redop, 0, comm, st);
    case OP_REDUCESCATTER:
      return ncclReduceScatter(s, r, count, dt, redop, comm, st);
    case OP_SELF: {
      ncclResult_t a, b, c, d;
      a = ncclGroupStart();
      b = ncclSend(s, count, dt, 0, comm, st);
      c = ncclRecv(r, count, dt, 0, comm, st);
      d = ncclGroupEnd();
      return a != ncclSuccess ? a : b != ncclSuccess ? b : c != ncclSuccess ? c : d;
    }
    default:
      return ncclAlltoAll(s, r, count, dt, comm, st);
  }
}

/* Graph nodes of one captured operation: total, memcpy nodes, kernel nodes. */
static void capture_count(op_t op, const void* s, void* r, size_t count, ncclDataType_t dt,
                          ncclRedOp_t redop, ncclComm_t comm, cudaStream_t st, cudaGraph_t* g,
                          size_t* n, int* ncopy, int* nkern) {
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
  NK(issue(op, s, r, count, dt, redop, comm, st));
  CK(cudaStreamEndCapture(st, g));
  *n = 0;
  CK(cudaGraphGetNodes(*g, NULL, n));
  cudaGraphNode_t nodes[16];
  size_t m = *n < 16 ? *n : 16;
  *ncopy = *nkern = 0;
  if (m > 0) CK(cudaGraphGetNodes(*g, nodes, &m));
  for (size_t i = 0; i < m; i++) {
    enum cudaGraphNodeType t;
    CK(cudaGraphNodeGetType(nodes[i], &t));
    *ncopy += t == cudaGraphNodeTypeMemcpy;
    *nkern += t == cudaGraphNodeTypeKernel;
  }
}

static void one_rank(void) {
  int dev = 0;
  ncclComm_t comm;
  NK(ncclCommInitAll(&comm, 1, &dev));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const size_t count = 100003; /* odd: no vector multiple */
  float *s, *r;
  CK(cudaMalloc((void**)&s, count * sizeof(float)));
  CK(cudaMalloc((void**)&r, count * sizeof(float)));
  float* h = malloc(count * sizeof(float));
  float* got = malloc(count * sizeof(float));
  ncclRedOp_t premul;
  float scalar = 0.5f;
  NK(ncclRedOpCreatePreMulSum(&premul, &scalar, ncclFloat32, ncclScalarHostImmediate, comm));
  char what[160];
  for (int op = 0; op < OP_COUNT; op++) {
    for (int k = 0; k < 3; k++) { /* redop: sum, PreMulSum, Avg */
      bool reduces = op == OP_ALLREDUCE || op == OP_REDUCE || op == OP_REDUCESCATTER;
      if (k > 0 && !reduces) continue;
      ncclRedOp_t redop = k == 0 ? ncclSum : k == 1 ? premul : ncclAvg;
      double mul = k == 1 ? 0.5 : 1.0;
      bool scales = k > 0; /* floating Avg on one rank is PreMulSum by 1: the kernel runs */
      for (int inplace = 0; inplace < 2; inplace++) {
        for (int zero = 0; zero < 2; zero++) {
          if (zero && inplace) continue;
          size_t n = zero ? 0 : count;
          float* in = inplace ? r : s;
          cudaGraph_t g;
          size_t nodes;
          int ncopy, nkern;
          capture_count((op_t)op, in, r, n, ncclFloat32, redop, comm, st, &g, &nodes, &ncopy,
                        &nkern);
          size_t want = n == 0 || (inplace && !scales) ? 0 : 1;
          snprintf(what, sizeof(what),
                   "1 rank %s %s %s count=%zu: %zu graph nodes (%d memcpy, %d "
                   "kernel), want %zu %s",
                   op_names[op],
                   k == 0   ? "sum"
                   : k == 1 ? "premulsum"
                            : "avg",
                   inplace ? "in-place" : "out-of-place", n, nodes, ncopy, nkern, want,
                   want == 0 ? ""
                   : scales  ? "kernel"
                             : "memcpy");
          expect(nodes == want && (want == 0 || (scales ? nkern : ncopy) == 1), what);
          /* replay on fresh inputs, then eagerly, and check */
          for (int pass = 0; pass < 2; pass++) {
            for (size_t i = 0; i < count; i++)
              h[i] = (float)((i * 7 + (size_t)pass * 3 + op) % 1000);
            CK(cudaMemcpyAsync(in, h, count * sizeof(float), cudaMemcpyHostToDevice, st));
            if (!inplace) CK(cudaMemsetAsync(r, 0xff, count * sizeof(float), st));
            if (pass == 0) {
              cudaGraphExec_t ge;
              CK(cudaGraphInstantiate(&ge, g, 0));
              CK(cudaGraphLaunch(ge, st));
              CK(cudaStreamSynchronize(st));
              CK(cudaGraphExecDestroy(ge));
            } else {
              NK(issue((op_t)op, in, r, n, ncclFloat32, redop, comm, st));
            }
            CK(cudaMemcpyAsync(got, r, count * sizeof(float), cudaMemcpyDeviceToHost, st));
            CK(cudaStreamSynchronize(st));
            size_t bad = 0;
            for (size_t i = 0; i < count; i++) {
              float ref = n == 0 ? h[i] : (float)(h[i] * mul);
              uint32_t bits;
              memcpy(&bits, &got[i], sizeof(bits));
              bool ok = n == 0 && !inplace ? bits == 0xffffffffu : got[i] == ref;
              bad += !ok;
            }
            snprintf(what, sizeof(what), "1 rank %s %s %s count=%zu %s: %zu wrong elements",
                     op_names[op],
                     k == 0   ? "sum"
                     : k == 1 ? "premulsum"
                              : "avg",
                     inplace ? "in-place" : "out-of-place", n, pass == 0 ? "graph" : "eager", bad);
            expect(bad == 0, what);
          }
          CK(cudaGraphDestroy(g));
        }
      }
    }
  }
  NK(ncclRedOpDestroy(premul, comm));
  NK(ncclCommDestroy(comm));
  CK(cudaStreamDestroy(st));
  CK(cudaFree(s));
  CK(cudaFree(r));
  free(h);
  free(got);
}

/* Eager one-rank copies (a small one runs as a copy kernel, a large one as cudaMemcpyAsync):
 * every byte lands, at odd offsets and sizes around 16-byte vectors and around the switch between
 * the two (local.c's LOCAL_COPY_KERNEL_MAX, 1 MiB), and nothing outside the destination moves. */
static void one_rank_copies(void) {
  int dev = 0;
  ncclComm_t comm;
  NK(ncclCommInitAll(&comm, 1, &dev));
  cudaStream_t st;
  CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
  const size_t cap = (4u << 20) + 64;
  unsigned char *s, *r;
  CK(cudaMalloc((void**)&s, cap));
  CK(cudaMalloc((void**)&r, cap));
  unsigned char* h = malloc(cap);
  unsigned char* got = malloc(cap);
  for (size_t i = 0; i < cap; i++) h[i] = (unsigned char)(i * 31 + 7);
  CK(cudaMemcpy(s, h, cap, cudaMemcpyHostToDevice));
  static const size_t sizes[] = {
      1, 15, 16, 17, 8191, 8192, 100001, (1u << 20) - 1, 1u << 20, (1u << 20) + 1, 4u << 20};
  static const size_t offs[][2] = {{0, 0}, {1, 1}, {3, 8}, {16, 5}};
  char what[160];
  for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
    for (size_t oi = 0; oi < sizeof(offs) / sizeof(offs[0]); oi++) {
      const size_t n = sizes[si], so = offs[oi][0], ro = offs[oi][1];
      if (ro + n > cap || so + n > cap) continue;
      CK(cudaMemsetAsync(r, 0xee, cap, st));
      NK(ncclAllReduce(s + so, r + ro, n, ncclInt8, ncclSum, comm, st));
      CK(cudaMemcpyAsync(got, r, cap, cudaMemcpyDeviceToHost, st));
      CK(cudaStreamSynchronize(st));
      size_t bad = 0;
      for (size_t i = 0; i < cap; i++) {
        const bool in = i >= ro && i < ro + n;
        bad += got[i] != (in ? h[so + i - ro] : 0xee);
      }
      snprintf(what, sizeof(what),
               "1 rank eager copy of %zu bytes, source +%zu, destination +%zu: "
               "%zu wrong bytes",
               n, so, ro, bad);
      expect(bad == 0, what);
    }
  }
  NK(ncclCommDestroy(comm));
  CK(cudaStreamDestroy(st));
  CK(cudaFree(s));
  CK(cudaFree(r));
  free(h);
  free(got);
}

/* ---- Several ranks on GPU 0 --------------------------------------------------------------------
 */
static void refused_without_variable(void) {
  int devs[2] = {0, 0};
  ncclComm_t comms[2] = {NULL, NULL};
  ncclResult_t res = ncclCommInitAll(comms, 2, devs);
  expect(res == ncclInvalidUsage, "two ranks on GPU 0 without NCCL_MULTI_RANK_GPU_ENABLE: refused");
  for (int i = 0; i < 2; i++)
    if (comms[i] != NULL) (void)ncclCommDestroy(comms[i]);
}

typedef struct rank_bufs {
  float *s, *r;
  cudaStream_t st;
} rank_bufs_t;

/* Runs op on every rank (one group, one thread), eagerly or through one graph per rank. */
static void run_all(op_t op, ncclComm_t* comms, rank_bufs_t* b, int n, size_t count, bool graph) {
  cudaGraph_t g[MAXR];
  if (graph)
    for (int q = 0; q < n; q++) CK(cudaStreamBeginCapture(b[q].st, cudaStreamCaptureModeRelaxed));
  NK(ncclGroupStart());
  for (int q = 0; q < n; q++)
    NK(issue(op, b[q].s, b[q].r, count, ncclFloat32, ncclSum, comms[q], b[q].st));
  NK(ncclGroupEnd());
  if (!graph) return;
  cudaGraphExec_t ge[MAXR];
  for (int q = 0; q < n; q++) {
    CK(cudaStreamEndCapture(b[q].st, &g[q]));
    CK(cudaGraphInstantiate(&ge[q], g[q], 0));
  }
  for (int q = 0; q < n; q++) CK(cudaGraphLaunch(ge[q], b[q].st));
  for (int q = 0; q < n; q++) {
    CK(cudaStreamSynchronize(b[q].st));
    CK(cudaGraphExecDestroy(ge[q]));
    CK(cudaGraphDestroy(g[q]));
  }
}

static void shared_gpu(int n) {
  int devs[MAXR] = {0, 0, 0, 0};
  ncclComm_t comms[MAXR];
  NK(ncclCommInitAll(comms, n, devs));
  rank_bufs_t b[MAXR];
  const size_t max_count = (1 << 20) + 5;
  size_t bytes = max_count * (size_t)n * sizeof(float);
  float* h = malloc(bytes);
  float* got = malloc(bytes);
  for (int q = 0; q < n; q++) {
    CK(cudaMalloc((void**)&b[q].s, bytes));
    CK(cudaMalloc((void**)&b[q].r, bytes));
    CK(cudaStreamCreateWithFlags(&b[q].st, cudaStreamNonBlocking));
  }
  static const size_t counts[3] = {7, 4099, (1 << 20) + 5};
  static const op_t ops[5] = {OP_ALLREDUCE, OP_ALLGATHER, OP_BROADCAST, OP_REDUCESCATTER,
                              OP_ALLTOALL};
  char what[160];
  for (int oi = 0; oi < 5; oi++) {
    for (int ci = 0; ci < 3; ci++) {
      for (int graph = 0; graph < 2; graph++) {
        op_t op = ops[oi];
        size_t count = counts[ci];
        if (op == OP_ALLTOALL || op == OP_REDUCESCATTER || op == OP_ALLGATHER)
          count = count / (size_t)n + 1;
        size_t in_n = op == OP_REDUCESCATTER || op == OP_ALLTOALL ? count * (size_t)n : count;
        size_t out_n = op == OP_ALLGATHER || op == OP_ALLTOALL ? count * (size_t)n : count;
        for (int q = 0; q < n; q++) {
          for (size_t i = 0; i < in_n; i++) h[i] = (float)((i * 13 + (size_t)q * 101 + ci) % 997);
          CK(cudaMemcpyAsync(b[q].s, h, in_n * sizeof(float), cudaMemcpyHostToDevice, b[q].st));
          CK(cudaMemsetAsync(b[q].r, 0xff, out_n * sizeof(float), b[q].st));
          CK(cudaStreamSynchronize(b[q].st));
        }
        run_all(op, comms, b, n, count, graph);
        size_t bad = 0;
        for (int q = 0; q < n; q++) {
          CK(cudaMemcpyAsync(got, b[q].r, out_n * sizeof(float), cudaMemcpyDeviceToHost, b[q].st));
          CK(cudaStreamSynchronize(b[q].st));
          for (size_t i = 0; i < out_n; i++) {
            double ref = 0;
#define V(rank, idx) ((double)(((size_t)(idx)*13 + (size_t)(rank)*101 + ci) % 997))
            switch (op) {
              case OP_ALLREDUCE:
                for (int z = 0; z < n; z++) ref += V(z, i);
                break;
              case OP_ALLGATHER:
                ref = V(i / count, i % count);
                break;
              case OP_BROADCAST:
                ref = V(0, i);
                break;
              case OP_REDUCESCATTER:
                for (int z = 0; z < n; z++) ref += V(z, (size_t)q * count + i);
                break;
              default: /* block j of rank q's output is block q of rank j's input */
                ref = V(i / count, (size_t)q * count + i % count);
                break;
            }
#undef V
            bad += got[i] != (float)ref;
          }
        }
        snprintf(what, sizeof(what), "%d ranks on GPU 0: %s count=%zu %s: %zu wrong elements", n,
                 op_names[op], count, graph ? "graph" : "eager", bad);
        expect(bad == 0, what);
      }
    }
  }
  for (int q = 0; q < n; q++) {
    NK(ncclCommDestroy(comms[q]));
    CK(cudaFree(b[q].s));
    CK(cudaFree(b[q].r));
    CK(cudaStreamDestroy(b[q].st));
  }
  free(h);
  free(got);
}

int main(int argc, char** argv) {
  (void)argc;
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    printf("SKIP: no GPU\n");
    return 0;
  }
  const char* multi = getenv("NCCL_MULTI_RANK_GPU_ENABLE");
  if (multi == NULL || strcmp(multi, "1") != 0) {
    one_rank();
    one_rank_copies();
    refused_without_variable();
    printf("-- part 1: %d checks, %d failures; re-running with NCCL_MULTI_RANK_GPU_ENABLE=1\n",
           g_checks, g_fail);
    fflush(stdout);
    if (g_fail > 0) {
      printf("%d%%: Checks: %d, Failures: %d, Errors: 0\n",
             g_checks ? 100 * (g_checks - g_fail) / g_checks : 0, g_checks, g_fail);
      return 1;
    }
    setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1);
    char part1[32];
    snprintf(part1, sizeof(part1), "%d", g_checks);
    setenv("TEST_ONE_GPU_PART1_CHECKS", part1, 1); /* the summary counts both parts */
    execv("/proc/self/exe", argv);
    printf("FAIL execv: %s\n0%%: Checks: 1, Failures: 1, Errors: 0\n", strerror(errno));
    return 1;
  }
  shared_gpu(2);
  shared_gpu(4);
  const char* part1 = getenv("TEST_ONE_GPU_PART1_CHECKS");
  if (part1 != NULL) g_checks += atoi(part1);
  printf("%d%%: Checks: %d, Failures: %d, Errors: 0\n",
         g_checks ? 100 * (g_checks - g_fail) / g_checks : 0, g_checks, g_fail);
  return g_fail == 0 ? 0 : 1;
}
