/* GPU test of the CUDA executor (src/device/cuda), standalone: no transport, no planner. One
 * process builds in-memory FIFOs (conn_fifo_t) between R "ranks" (one per GPU when several are
 * visible, else R ranks sharing GPU 0; peer access between GPUs), an exec_comm_t per rank, and
 * plans in the planner's shape (channel slices aligned to 16 bytes, collectives first, then
 * point-to-point by distance). Every rank's launch is asynchronous on its own stream; the test
 * then waits for all of them under a watchdog that raises the abort flags (kernels must leave)
 * and compares every output element with a host reference in double (integers exactly); outputs
 * are poisoned beforehand and guard bytes around them checked.
 *
 * Cases: AllReduce (ring, tree, OneShot, TwoShot; every rank's result bit-identical),
 * ReduceScatter, AllGather, Broadcast (ring; OneShot, LL only), Reduce (roots 0 and R-1) x Simple,
 * LL, LL128 x float, half, bfloat16,
 * int32, fp8 e4m3, double x sum, prod, min, max, premulsum (host and device scalar), sumpostdiv x
 * counts 0, 1, 7, 1000, 2^20+3 x in and out of place, some with user buffers off 16-byte alignment
 * or a small chunk; point-to-point all-to-all including sends to self; plans with many items (the
 * large parameter block, and splits over several launches); zero-copy OneShot items (every rank's
 * sbuf and rbuf a shared window: read in place, the same bits as over the FIFOs, and the FIFOs
 * where a rank has no window or AllReduce runs in place; the path checked by the steps each
 * connection moved); then an interop pass: even ranks on the
 * host executor sharing connections (pinned host memory) with GPU ranks, Simple and LL.
 *
 * Usage: test_cuda_exec [--ranks R] [--full] [--interop | --no-interop] [--stress N] [--seed S]
 *                       [-v]
 *   default: R = number of GPUs if more than one, else 4 on GPU 0; the quick matrix (the large
 *   count for sum only), then the interop pass. --stress N: instead of all that, the large
 *   all-to-all N times per protocol on the GPU executor. Exit status 0 only if every check
 *   passed; the last line reads like a Check summary ("100%: Checks: N, Failures: 0, ..."). */
#include <cuda_runtime.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <string>
#include <vector>

#include "nccl.h"
extern "C" {
#include "base/base.h"
#include "device/device.h"
}

#define MAXR 8
#define NCH 2
#define ZC_WINDOWS_USED 2 /* the shared window slots the zero-copy cases name */

#define CK(call)                                                                             \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      exit(2);                                                                               \
    }                                                                                        \
  } while (0)

static int g_checks = 0, g_fail = 0, g_errors = 0;
/* What the planner knows and this test plays: each protocol's slot payload and each channel's
 * ring (the same on every rank), set by world_init. */
static size_t g_slot_bytes[PROTO_COUNT];
static int g_ring[NCH][MAXR];
static bool g_verbose = false;
static bool g_dead = false; /* a watchdog fired: connections are out of step, stop testing */

/* ---- Datatypes on the host ---------------------------------------------------------------- */
static size_t tsize(int t) {
  return datatype_size((ncclDataType_t)t);
}
static bool is_int(int t) {
  return t <= ncclUint64;
}
static const char* tname(int t) {
  return datatype_name((ncclDataType_t)t);
}
static const char* oname(int o) {
  static const char* n[] = {"sum", "prod", "min", "max", "premulsum", "sumpostdiv"};
  return n[o];
}
static const char* fname(int f) {
  static const char* n[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter",
                            "AllReduce", "Send",   "Recv"};
  return n[f];
}
static const char* pname(int p) {
  return p == PROTO_LL ? "LL" : p == PROTO_LL128 ? "LL128" : "Simple";
}

static double get(int t, const char* p) {
  switch (t) {
    case ncclInt32: {
      int32_t v;
      memcpy(&v, p, 4);
      return v;
    }
    case ncclFloat32: {
      float v;
      memcpy(&v, p, 4);
      return v;
    }
    case ncclFloat64: {
      double v;
      memcpy(&v, p, 8);
      return v;
    }
    case ncclFloat16: {
      uint16_t v;
      memcpy(&v, p, 2);
      return half_to_float(v);
    }
    case ncclBfloat16: {
      uint16_t v;
      memcpy(&v, p, 2);
      return bf16_to_float(v);
    }
    case ncclFloat8e4m3:
      return fp8e4m3_to_float((uint8_t)*p);
    case ncclFloat8e5m2:
      return fp8e5m2_to_float((uint8_t)*p);
    case ncclInt8:
      return (int8_t)*p;
    default:
      return 0;
  }
}
static void put(int t, char* p, double x) {
  switch (t) {
    case ncclInt32: {
      int32_t v = (int32_t)x;
      memcpy(p, &v, 4);
      break;
    }
    case ncclFloat32: {
      float v = (float)x;
      memcpy(p, &v, 4);
      break;
    }
    case ncclFloat64:
      memcpy(p, &x, 8);
      break;
    case ncclFloat16: {
      uint16_t v = float_to_half((float)x);
      memcpy(p, &v, 2);
      break;
    }
    case ncclBfloat16: {
      uint16_t v = float_to_bf16((float)x);
      memcpy(p, &v, 2);
      break;
    }
    case ncclFloat8e4m3:
      *p = (char)float_to_fp8e4m3((float)x);
      break;
    case ncclFloat8e5m2:
      *p = (char)float_to_fp8e5m2((float)x);
      break;
    case ncclInt8:
      *p = (char)(int8_t)x;
      break;
    default:
      break;
  }
}
static uint64_t scalar_bits(int t, double x) {
  uint64_t b = 0;
  char tmp[8] = {0};
  put(t, tmp, x);
  memcpy(&b, tmp, tsize(t));
  return b;
}

static uint64_t g_rng = 1;
static uint32_t rnd(void) {
  g_rng = g_rng * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(g_rng >> 33);
}
/* A random input of type t for op, chosen so that low precision partial sums stay exact. */
static double rand_val(int t, int op) {
  int r = (int)(rnd() % 5) - 2; /* -2..2 */
  switch (t) {
    case ncclInt32:
      return op == DEV_OP_PROD ? r : (double)((int)(rnd() % 2001) - 1000);
    case ncclFloat32:
    case ncclFloat64:
      return ((double)rnd() / 4294967296.0) * 2.0 - 1.0;
    case ncclFloat16:
    case ncclBfloat16:
      return op == DEV_OP_PROD ? r : (double)((int)(rnd() % 33) - 16) / 8.0;
    default:
      return r; /* fp8 */
  }
}
/* Rank q's PreMulSum scalar: each rank passes its own (it scales that rank's input only). */
static double premul_scalar(int t, int q) {
  const double b = t == ncclInt32 ? 3.0 : t == ncclFloat8e4m3 ? 2.0 : 0.5;
  return t == ncclInt32 ? b + q % 2 : q % 2 ? b / 2 : b;
}
static double tol_rel(int t) {
  switch (t) {
    case ncclFloat32:
      return 1e-5;
    case ncclFloat64:
      return 1e-12;
    case ncclFloat16:
      return 2e-3;
    case ncclBfloat16:
      return 1.6e-2;
    case ncclFloat8e4m3:
      return 0.13;
    default:
      return 0;
  }
}

/* ---- Ranks, channels, connections ----------------------------------------------------------- */
struct conn_mem {
  char* buf[PROTO_COUNT];
  uint64_t* head;
  uint64_t* tail;
  int* sizes;
  bool host;
};

struct rank_t {
  int rank, dev;
  bool host_exec;
  cudaStream_t stream;
  exec_comm_t comm;
  dev_channel_t ch[NCH];
  int ring[NCH][MAXR];
  conn_fifo_t* send_tab[NCH][MAXR];
  conn_fifo_t* recv_tab[NCH][MAXR];
  volatile uint32_t* abort_flag;
  bool abort_pinned;
  const executor_ops_t* ops;
  void* exec;
  char* sbuf; /* user buffers: device memory (host memory for host ranks) */
  char* rbuf;
  size_t buf_bytes;
  char* scalar_dev; /* the premulsum scalar when it lives on the device */
  uint64_t scalar_host;
  /* Zero copy: shared window 0 is every rank's sbuf, window 1 its rbuf (these ranks share one
   * process, so a peer's window lies at its own address); exec_comm_t.zc_base points here */
  void* zc_host[ZC_WINDOWS_USED * MAXR];
  void** zc_dev;
};

struct world_t {
  int R;
  int ngpu;
  bool interop;
  int buff_bytes[PROTO_COUNT];
  rank_t r[MAXR];
  std::vector<conn_mem> mems;
  std::vector<conn_fifo_t*> fifos;
  uint64_t* tail[NCH][MAXR][MAXR]; /* connection a -> b's tail (the sender's position) */
};

static void* alloc_shared(bool host, int dev, size_t bytes) {
  void* p = nullptr;
  if (host) {
    CK(cudaHostAlloc(&p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    memset(p, 0, bytes);
  } else {
    CK(cudaSetDevice(dev));
    CK(cudaMalloc(&p, bytes));
    CK(cudaMemset(p, 0, bytes));
    CK(cudaDeviceSynchronize()); /* the legacy stream's memset, before any launch */
  }
  return p;
}

/* Connection a -> b on channel c: memory on b's GPU (pinned host memory when a host rank takes
 * part), seen through two conn_fifo_t (sender's and receiver's), as a transport would. */
static void make_conn(world_t& w, int c, int a, int b) {
  bool host = w.r[a].host_exec || w.r[b].host_exec;
  conn_mem m;
  memset(&m, 0, sizeof(m));
  m.host = host;
  for (int p = 0; p < PROTO_COUNT; p++) {
    if (w.buff_bytes[p] == 0) continue;
    m.buf[p] = (char*)alloc_shared(host, w.r[b].dev, (size_t)w.buff_bytes[p]);
  }
  m.head = (uint64_t*)alloc_shared(host, w.r[b].dev, 64);
  m.tail = (uint64_t*)alloc_shared(host, w.r[b].dev, 64);
  m.sizes = (int*)alloc_shared(host, w.r[b].dev, NCCL_STEPS * sizeof(int));
  w.mems.push_back(m);
  w.tail[c][a][b] = m.tail;
  for (int side = 0; side < 2; side++) {
    conn_fifo_t* f = (conn_fifo_t*)calloc(1, sizeof(conn_fifo_t));
    for (int p = 0; p < PROTO_COUNT; p++) {
      f->buffs[p] = m.buf[p];
      f->buff_bytes[p] = m.buf[p] ? w.buff_bytes[p] : 0;
    }
    f->head = m.head;
    f->tail = m.tail;
    f->sizes = m.sizes;
    f->step = 0;
    f->flags = host ? CONN_FLAG_HOSTMEM : 0;
    w.fifos.push_back(f);
    if (side == 0)
      w.r[a].send_tab[c][b] = f;
    else
      w.r[b].recv_tab[c][a] = f;
  }
}

/* Channel 0: ring in rank order, binary tree rooted at rank 0. Channel 1: a shuffled ring
 * (reversed when the shuffle is not a permutation), ternary tree rooted at rank R-1. */
static void topology(world_t& w) {
  const int R = w.R;
  for (int c = 0; c < NCH; c++) {
    int order[MAXR];
    bool seen[MAXR] = {false}, perm = true;
    for (int i = 0; i < R; i++) {
      order[i] = c == 0 ? i : (i * 3 + 1) % R;
      perm = perm && !seen[order[i]];
      seen[order[i]] = true;
    }
    if (!perm)
      for (int i = 0; i < R; i++) order[i] = R - 1 - i;
    for (int q = 0; q < R; q++) {
      rank_t& rk = w.r[q];
      dev_channel_t& ch = rk.ch[c];
      memcpy(rk.ring[c], order, sizeof(order));
      memcpy(g_ring[c], order, sizeof(order));
      ch.id = c;
      ch.ring_ranks = rk.ring[c];
      for (int i = 0; i < R; i++)
        if (order[i] == q) ch.ring_index = i;
      ch.ring_next = order[(ch.ring_index + 1) % R];
      ch.ring_prev = order[(ch.ring_index + R - 1) % R];
      const int k = c == 0 ? 2 : 3;         /* tree arity */
      const int l = c == 0 ? q : R - 1 - q; /* q's label in the tree; rank of label x: see below */
      ch.tree_up = l == 0 ? -1 : (c == 0 ? (l - 1) / k : R - 1 - (l - 1) / k);
      for (int j = 0; j < TREE_MAX_CHILDREN; j++) {
        int cl = l * k + 1 + j;
        ch.tree_down[j] = j < k && cl < R ? (c == 0 ? cl : R - 1 - cl) : -1;
      }
      ch.send = rk.send_tab[c];
      ch.recv = rk.recv_tab[c];
    }
  }
}

static ncclResult_t no_peer_check(void*, int) {
  return ncclSuccess;
}

static void world_init(world_t& w, int R, int ngpu, bool interop) {
  w.R = R;
  w.ngpu = ngpu;
  w.interop = interop;
  w.buff_bytes[PROTO_SIMPLE] = 8 * 32768;
  w.buff_bytes[PROTO_LL] = 8 * 4096;
  w.buff_bytes[PROTO_LL128] = interop ? 0 : 8 * 16384;
  g_slot_bytes[PROTO_SIMPLE] = (size_t)w.buff_bytes[PROTO_SIMPLE] / NCCL_STEPS;
  g_slot_bytes[PROTO_LL] = (size_t)w.buff_bytes[PROTO_LL] / NCCL_STEPS / sizeof(ll_line_t) * 8;
  g_slot_bytes[PROTO_LL128] =
      (size_t)w.buff_bytes[PROTO_LL128] / NCCL_STEPS / LL128_LINE_BYTES * LL128_DATA_BYTES;
  for (int q = 0; q < R; q++) {
    rank_t& rk = w.r[q];
    memset((void*)&rk, 0, sizeof(rk));
    rk.rank = q;
    rk.dev = ngpu > 1 ? q % ngpu : 0;
    rk.host_exec = interop && (q % 2 == 0);
    rk.ops = rk.host_exec ? &executor_host_ops : &executor_cuda_ops;
  }
  if (ngpu > 1) {
    for (int a = 0; a < ngpu; a++) {
      CK(cudaSetDevice(a));
      for (int b = 0; b < ngpu; b++) {
        int can = 0;
        if (a == b) continue;
        CK(cudaDeviceCanAccessPeer(&can, a, b));
        if (!can) {
          fprintf(stderr, "GPU %d cannot access GPU %d: this test needs peer access\n", a, b);
          exit(2);
        }
        cudaError_t e = cudaDeviceEnablePeerAccess(b, 0);
        if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
        (void)cudaGetLastError();
      }
    }
  }
  for (int c = 0; c < NCH; c++)
    for (int a = 0; a < R; a++)
      for (int b = 0; b < R; b++)
        if (a != b) make_conn(w, c, a, b);
  topology(w);
  for (int q = 0; q < R; q++) {
    rank_t& rk = w.r[q];
    CK(cudaSetDevice(rk.dev));
    CK(cudaStreamCreateWithFlags(&rk.stream, cudaStreamNonBlocking));
    /* odd GPU ranks keep the abort flag in plain host memory: the executor maps its page */
    if (q % 2 == 1) { /* a page of its own, as the library's (core/comm.c) */
      rk.abort_flag = (volatile uint32_t*)aligned_alloc(4096, 4096);
      memset((void*)rk.abort_flag, 0, 4096);
    } else {
      CK(cudaHostAlloc((void**)&rk.abort_flag, 64, cudaHostAllocMapped | cudaHostAllocPortable));
      rk.abort_pinned = true;
    }
    *rk.abort_flag = 0;
    rk.comm.rank = q;
    rk.comm.nranks = R;
    rk.comm.nchannels = NCH;
    rk.comm.channels = rk.ch;
    rk.comm.abort_flag = rk.abort_flag;
    rk.comm.peer_check = no_peer_check;
    rk.comm.proxy_wake = nullptr;
    rk.comm.arg = nullptr;
    if (rk.ops->init(&rk.comm, &rk.exec) != ncclSuccess) {
      fprintf(stderr, "rank %d: %s executor init failed\n", q, rk.ops->name);
      exit(2);
    }
    CK(cudaMalloc((void**)&rk.scalar_dev, 8));
    CK(cudaMalloc((void**)&rk.zc_dev, sizeof(rk.zc_host)));
  }
}

static void free_bufs(rank_t& rk) {
  if (rk.sbuf == nullptr) return;
  if (rk.host_exec) {
    free(rk.sbuf);
    free(rk.rbuf);
  } else {
    CK(cudaSetDevice(rk.dev));
    CK(cudaFree(rk.sbuf));
    CK(cudaFree(rk.rbuf));
  }
  rk.sbuf = rk.rbuf = nullptr;
  rk.buf_bytes = 0;
}

static void world_fini(world_t& w) {
  for (int q = 0; q < w.R; q++) {
    rank_t& rk = w.r[q];
    CK(cudaSetDevice(rk.dev));
    if (rk.ops->fini(rk.exec) != ncclSuccess) {
      printf("FAIL rank %d: executor fini reported an error\n", q);
      g_errors++;
    }
    free_bufs(rk);
    CK(cudaFree(rk.scalar_dev));
    CK(cudaFree(rk.zc_dev));
    CK(cudaStreamDestroy(rk.stream));
    if (rk.abort_pinned)
      CK(cudaFreeHost((void*)rk.abort_flag));
    else
      free((void*)rk.abort_flag);
  }
  for (conn_mem& m : w.mems) {
    void* ptrs[] = {m.buf[0], m.buf[1], m.buf[2], m.head, m.tail, m.sizes};
    for (void* p : ptrs) {
      if (p == nullptr) continue;
      if (m.host)
        CK(cudaFreeHost(p));
      else
        CK(cudaFree(p));
    }
  }
  for (conn_fifo_t* f : w.fifos) free(f);
  w.mems.clear();
  w.fifos.clear();
}

static void ensure_bufs(world_t& w, size_t bytes) {
  bytes = (bytes + 512 + 255) / 256 * 256;
  for (int q = 0; q < w.R; q++) {
    rank_t& rk = w.r[q];
    if (rk.buf_bytes >= bytes) continue;
    free_bufs(rk);
    if (rk.host_exec) {
      rk.sbuf = (char*)aligned_alloc(256, bytes);
      rk.rbuf = (char*)aligned_alloc(256, bytes);
    } else {
      CK(cudaSetDevice(rk.dev));
      CK(cudaMalloc((void**)&rk.sbuf, bytes));
      CK(cudaMalloc((void**)&rk.rbuf, bytes));
    }
    rk.buf_bytes = bytes;
  }
}

/* Data in and out of a GPU rank's buffers go through the rank's own stream, the stream its
 * launches use: a plain cudaMemcpy/cudaMemset runs on the legacy default stream, which a
 * non-blocking stream does not wait for, so a launch could read a send buffer still being copied
 * in or race the poison of its receive buffer (the cause of the AllToAll failures of runs 31 and
 * 43: rank 0's send to rank 1 is the last part of its buffer to arrive). */
static void to_rank(rank_t& rk, void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (rk.host_exec) {
    memcpy(dst, src, n);
  } else {
    CK(cudaSetDevice(rk.dev));
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, rk.stream));
    CK(cudaStreamSynchronize(rk.stream)); /* src may be reused (a stack value, the next rank's) */
  }
}
static void from_rank(rank_t& rk, void* dst, const void* src, size_t n) {
  if (n == 0) return;
  if (rk.host_exec) {
    memcpy(dst, src, n);
  } else {
    CK(cudaSetDevice(rk.dev));
    CK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, rk.stream));
    CK(cudaStreamSynchronize(rk.stream));
  }
}
static void poison_rank(rank_t& rk, void* p, size_t n) {
  if (rk.host_exec) {
    memset(p, 0xA5, n);
  } else {
    CK(cudaSetDevice(rk.dev));
    CK(cudaMemsetAsync(p, 0xA5, n, rk.stream));
  }
}

/* ---- Plans in the planner's shape -------------------------------------------------------------
 */
struct plan_buf {
  plan_t plan;
  std::vector<work_t> w[PLAN_MAX_CHANNELS];
  std::vector<local_op_t> local;
  void finish() {
    memset(&plan, 0, sizeof(plan));
    for (int c = 0; c < PLAN_MAX_CHANNELS; c++) {
      plan.nwork[c] = (int)w[c].size();
      plan.works[c] = w[c].empty() ? nullptr : w[c].data();
      if (!w[c].empty()) plan.nchannels = c + 1;
    }
    plan.nlocal = (int)local.size();
    plan.local = local.empty() ? nullptr : local.data();
  }
};

static void split(size_t total, int nslices, int c, size_t align, size_t* off, size_t* n) {
  size_t units = (total + align - 1) / align;
  size_t per = (units + (size_t)nslices - 1) / (size_t)nslices * align;
  size_t start = per * (size_t)c;
  if (start >= total) {
    *off = total;
    *n = 0;
    return;
  }
  size_t end = start + per > total ? total : start + per;
  *off = start;
  *n = end - start;
}

struct coll_t {
  int func, algo, proto, dtype;
  dev_redop_t op;
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  int root;
  size_t chunk; /* 0: a slot's worth */
};

/* A work item as the planner decides it: the step (want 0: a slot's worth) clamped to the slot,
 * the root's position in channel c's ring; point-to-point in bytes. */
static work_t make_work(int c, int func, int algo, int proto, int dtype, const dev_redop_t* op,
                        const void* sb, void* rb, size_t count, size_t off, size_t n, size_t chunk,
                        int root, int nranks) {
  const bool p2p = func == FUNC_SEND || func == FUNC_RECV;
  const size_t unit = p2p ? 1 : tsize(dtype);
  const size_t cap = g_slot_bytes[proto] / unit;
  work_t w;
  memset(&w, 0, sizeof(w));
  w.func = (uint8_t)func;
  w.algo = (uint8_t)algo;
  w.proto = (uint8_t)proto;
  w.dtype = (uint8_t)dtype;
  if (op) w.op = *op;
  w.sendbuff = sb;
  w.recvbuff = rb;
  w.count = count;
  w.chan_off = off;
  w.chan_count = n;
  w.chunk = chunk == 0 || chunk > cap ? cap : chunk;
  w.root = root;
  w.root_idx = -1;
  if (!p2p)
    for (int i = 0; i < nranks; i++)
      if (g_ring[c][i] == root) w.root_idx = i;
  w.nranks = nranks;
  return w;
}

static void plan_coll(plan_buf& pb, const coll_t& t, int nranks, int nch) {
  size_t es = tsize(t.dtype);
  size_t align = es < 16 ? 16 / es : 1;
  for (int c = 0; c < nch; c++) {
    size_t off, n;
    split(t.count, nch, c, align, &off, &n);
    if (n == 0) continue;
    pb.w[c].push_back(make_work(c, t.func, t.algo, t.proto, t.dtype, &t.op, t.sendbuff, t.recvbuff,
                                t.count, off, n, t.chunk, t.root, nranks));
  }
}

/* As the planner: channels by size (one per 16 KB), slices on 64-byte boundaries, in bytes. A
 * message to self is a local copy (plan.local), made once, by the send. */
static void plan_p2p(plan_buf& pb, int func, int proto, int dtype, const void* sb, void* rb,
                     size_t count, int peer, int nranks, int nch, int me) {
  size_t es = tsize(dtype), bytes = count * es;
  if (bytes == 0) return;
  if (peer == me) {
    if (func == FUNC_SEND) {
      local_op_t l;
      memset(&l, 0, sizeof(l));
      l.src = sb;
      l.count = bytes;
      l.dtype = ncclInt8;
      l.op.kind = DEV_OP_SUM;
      pb.local.push_back(l);
    } else { /* the receive gives the copy its destination: sends and receives pair in order */
      for (local_op_t& l : pb.local)
        if (l.dst == nullptr) {
          l.dst = rb;
          break;
        }
    }
    return;
  }
  int use = (int)((bytes + 16383) / 16384);
  if (use < 1) use = 1;
  if (use > nch) use = nch;
  for (int c = 0; c < use; c++) {
    size_t boff, bn;
    split(bytes, use, c, 64, &boff, &bn);
    if (bn == 0) continue;
    pb.w[c].push_back(make_work(c, func, ALGO_RING, proto, dtype, nullptr, sb, rb, count, boff, bn,
                                0, peer, nranks));
  }
}

/* ---- Running a plan on every rank ----------------------------------------------------------- */
struct host_launch_arg {
  rank_t* rk;
  const plan_t* plan;
  ncclResult_t res;
};
static void* host_launch_main(void* p) {
  host_launch_arg* a = (host_launch_arg*)p;
  a->res = a->rk->ops->launch(a->rk->exec, a->plan, nullptr);
  return nullptr;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Launches plans[q] on every rank (host ranks on threads) and waits for all under a deadline. */
static bool run_plans(world_t& w, plan_buf* plans, const std::string& what) {
  pthread_t th[MAXR];
  host_launch_arg ha[MAXR];
  bool ok = true;
  for (int q = 0; q < w.R; q++) {
    rank_t& rk = w.r[q];
    plans[q].finish();
    if (rk.host_exec) {
      ha[q] = {&rk, &plans[q].plan, ncclSuccess};
      if (pthread_create(&th[q], nullptr, host_launch_main, &ha[q]) != 0) {
        fprintf(stderr, "pthread_create failed\n");
        exit(2);
      }
    } else {
      CK(cudaSetDevice(rk.dev));
      exec_streams_t st = {&rk.stream, 1, false};
      ncclResult_t res = rk.ops->launch(rk.exec, &plans[q].plan, &st);
      if (res != ncclSuccess) {
        printf("FAIL %s: rank %d launch returned %d\n", what.c_str(), q, (int)res);
        ok = false;
      }
    }
  }
  double deadline = now_s() + 60.0;
  bool fired = false;
  for (int q = 0; q < w.R; q++) {
    rank_t& rk = w.r[q];
    if (rk.host_exec) continue;
    CK(cudaSetDevice(rk.dev));
    for (;;) {
      cudaError_t e = cudaStreamQuery(rk.stream);
      if (e == cudaSuccess) break;
      if (e != cudaErrorNotReady) {
        printf("FAIL %s: rank %d: %s\n", what.c_str(), q, cudaGetErrorString(e));
        printf("0%%: Checks: %d, Failures: %d, Errors: %d\n", g_checks, g_fail, g_errors + 1);
        exit(1);
      }
      if (!fired && now_s() > deadline) {
        printf("FAIL %s: rank %d not done after 60 s; raising every abort flag\n", what.c_str(), q);
        fired = true;
        for (int z = 0; z < w.R; z++) *w.r[z].abort_flag = 1;
        deadline = now_s() + 20.0;
      } else if (fired && now_s() > deadline) {
        printf("FAIL %s: kernels did not leave within 20 s of the abort flag\n", what.c_str());
        printf("0%%: Checks: %d, Failures: %d, Errors: %d\n", g_checks, g_fail, g_errors + 1);
        exit(1);
      }
      struct timespec ts = {0, 200000};
      nanosleep(&ts, nullptr);
    }
  }
  for (int q = 0; q < w.R; q++) {
    if (!w.r[q].host_exec) continue;
    pthread_join(th[q], nullptr);
    if (ha[q].res != ncclSuccess && !fired) {
      printf("FAIL %s: host rank %d launch returned %d\n", what.c_str(), q, (int)ha[q].res);
      ok = false;
    }
  }
  if (fired) {
    g_dead = true;
    ok = false;
  }
  return ok;
}

/* ---- Collective cases --------------------------------------------------------------------- */
struct ccase {
  int func, algo, proto, dtype, op;
  size_t count;
  bool inplace;
  int root;
  int misalign; /* elements added to the user pointers (off 16-byte alignment) */
  bool scalar_dev;
  size_t chunk;
  /* Zero copy (OneShot): 0 off; ZCASE_ALL, every rank's input in a shared window; ZCASE_LAST_NONE,
   * rank R-1's not (zc_win -1) */
  int zc;
};
enum { ZCASE_OFF = 0, ZCASE_ALL, ZCASE_LAST_NONE };

static std::string case_name(const ccase& c) {
  char b[256];
  snprintf(b, sizeof(b), "%s/%s/%s %s %s count=%zu %s root=%d mis=%d%s chunk=%zu", fname(c.func),
           c.algo == ALGO_TREE      ? "tree"
           : c.algo == ALGO_ONESHOT ? "oneshot"
           : c.algo == ALGO_TWOSHOT ? "twoshot"
                                    : "ring",
           pname(c.proto), tname(c.dtype), oname(c.op), c.count,
           c.inplace ? "in-place" : "out-of-place", c.root, c.misalign,
           c.scalar_dev ? " device-scalar" : "", c.chunk);
  if (c.zc != ZCASE_OFF)
    snprintf(b + strlen(b), sizeof(b) - strlen(b), "%s",
             c.zc == ZCASE_ALL ? " zero-copy" : " zero-copy, rank R-1 without a window");
  return b;
}

static bool reduces(int f) {
  return f == FUNC_ALLREDUCE || f == FUNC_REDUCE || f == FUNC_REDUCESCATTER;
}

/* Reference of one reduced element from the R contributions v[q]; mag: a scale for the error. */
static void ref_reduce(int t, int op, const double* v, int R, double* ref, double* mag) {
  if (is_int(t)) { /* int32, wrapping */
    int64_t acc = 0;
    for (int q = 0; q < R; q++) {
      int64_t x = (int64_t)v[q];
      const int64_t s = (int64_t)premul_scalar(t, q);
      if (op == DEV_OP_PREMULSUM) x = (int32_t)(uint32_t)((uint64_t)x * (uint64_t)s);
      if (q == 0) {
        acc = x;
        continue;
      }
      switch (op) {
        case DEV_OP_PROD:
          acc = (int32_t)(uint32_t)((uint64_t)acc * (uint64_t)x);
          break;
        case DEV_OP_MIN:
          acc = x < acc ? x : acc;
          break;
        case DEV_OP_MAX:
          acc = x > acc ? x : acc;
          break;
        default:
          acc = (int32_t)(uint32_t)((uint64_t)acc + (uint64_t)x);
          break;
      }
    }
    if (op == DEV_OP_SUMPOSTDIV) acc = acc / R;
    *ref = (double)acc;
    *mag = 0;
    return;
  }
  double acc = 0, m = 0;
  for (int q = 0; q < R; q++) {
    double x = op == DEV_OP_PREMULSUM ? v[q] * premul_scalar(t, q) : v[q];
    m += fabs(x);
    if (q == 0) {
      acc = x;
      continue;
    }
    switch (op) {
      case DEV_OP_PROD:
        acc *= x;
        break;
      case DEV_OP_MIN:
        acc = x < acc ? x : acc;
        break;
      case DEV_OP_MAX:
        acc = x > acc ? x : acc;
        break;
      default:
        acc += x;
        break;
    }
  }
  if (op == DEV_OP_SUMPOSTDIV) {
    acc /= R;
    m /= R;
  }
  if (op == DEV_OP_PROD || op == DEV_OP_MIN || op == DEV_OP_MAX) m = fabs(acc);
  *ref = acc;
  *mag = m;
}

static bool close_enough(int t, double got, double ref, double mag) {
  if (is_int(t)) return got == ref;
  if (got != got) return false;
  double scale = mag > fabs(ref) ? mag : fabs(ref);
  double tol = tol_rel(t) * scale;
  if (t == ncclFloat8e4m3 || t == ncclFloat16 || t == ncclBfloat16) tol += tol_rel(t) * 0.5;
  return fabs(got - ref) <= tol;
}

/* ---- Zero copy --------------------------------------------------------------------------------
 * Whether every rank reads the inputs in place (device.h's zc_usable, decided here from the case
 * alone): every rank's input in a window, no in-place AllReduce; Broadcast needs the root's only.
 */
static bool zc_expect_usable(const ccase& cs, int R) {
  if (cs.zc == ZCASE_OFF || (cs.func == FUNC_ALLREDUCE && cs.inplace)) return false;
  const int none = cs.zc == ZCASE_LAST_NONE ? R - 1 : -1;
  return cs.func == FUNC_BROADCAST ? cs.root != none : none < 0;
}

/* Every rank's table of shared windows (slot 0: sbuf, slot 1: rbuf of every rank), written
 * again after ensure_bufs may have moved the buffers. */
static void zc_tables(world_t& w) {
  for (int q = 0; q < w.R; q++) {
    rank_t& rk = w.r[q];
    for (int p = 0; p < w.R; p++) {
      rk.zc_host[0 * w.R + p] = w.r[p].sbuf;
      rk.zc_host[1 * w.R + p] = w.r[p].rbuf;
    }
    to_rank(rk, rk.zc_dev, rk.zc_host, sizeof(rk.zc_host));
    rk.comm.zc_base = rk.zc_host;
    rk.comm.zc_base_dev = rk.zc_dev;
  }
}

static void read_tails(world_t& w, uint64_t (*t)[MAXR][MAXR]) {
  for (int c = 0; c < NCH; c++)
    for (int a = 0; a < w.R; a++)
      for (int b = 0; b < w.R; b++) {
        t[c][a][b] = 0;
        if (a != b) CK(cudaMemcpy(&t[c][a][b], w.tail[c][a][b], 8, cudaMemcpyDefault));
      }
}

/* Which path a OneShot item took shows in its connections' positions: read in place, the probe
 * and the release (2 steps each way); over the FIFOs, the probe and a step per chunk (Broadcast:
 * from the root only). False (and a FAIL line) if some connection moved otherwise. */
static bool zc_check_steps(world_t& w, const ccase& cs, plan_buf* plans,
                           uint64_t (*before)[MAXR][MAXR], const std::string& what) {
  uint64_t after[NCH][MAXR][MAXR];
  read_tails(w, after);
  const bool usable = zc_expect_usable(cs, w.R);
  for (int c = 0; c < NCH; c++)
    for (int a = 0; a < w.R; a++) {
      uint64_t want = 0;
      for (const work_t& wk : plans[a].w[c]) {
        const bool sends = cs.func != FUNC_BROADCAST || a == cs.root;
        want += usable ? 2 : 1 + (sends ? (wk.chan_count + wk.chunk - 1) / wk.chunk : 0);
      }
      for (int b = 0; b < w.R; b++) {
        if (a == b || after[c][a][b] - before[c][a][b] == want) continue;
        printf("FAIL %s: channel %d connection %d -> %d moved %llu steps, expected %llu (%s)\n",
               what.c_str(), c, a, b, (unsigned long long)(after[c][a][b] - before[c][a][b]),
               (unsigned long long)want, usable ? "read in place" : "over the FIFOs");
        return false;
      }
    }
  return true;
}

/* Runs one collective case on every rank and checks every rank's output; keep: rank 0's output
 * (for comparing two paths' bits). */
static void run_coll_case(world_t& w, const ccase& cs, std::vector<char>* keep = nullptr) {
  const int R = w.R, t = cs.dtype;
  const size_t es = tsize(t), n = cs.count;
  const bool gather = cs.func == FUNC_ALLGATHER, scatter = cs.func == FUNC_REDUCESCATTER;
  const size_t in_elems = scatter ? n * R : n, out_elems = gather ? n * R : n;
  const size_t region = (in_elems > out_elems ? in_elems : out_elems) * es;
  const size_t mis = (size_t)cs.misalign * es;
  const size_t guard = 64;
  const size_t span = guard + mis + region + guard;
  const std::string what = case_name(cs);
  ensure_bufs(w, span);
  if (cs.zc != ZCASE_OFF) zc_tables(w);
  g_checks++;

  std::vector<std::vector<double>> vals(R);
  std::vector<char> bytes;
  plan_buf* plans = new plan_buf[R];
  for (int q = 0; q < R; q++) {
    rank_t& rk = w.r[q];
    bytes.resize(in_elems * es);
    vals[q].resize(in_elems);
    for (size_t i = 0; i < in_elems; i++) {
      put(t, &bytes[i * es], rand_val(t, cs.op));
      vals[q][i] = get(t, &bytes[i * es]);
    }
    /* rbuf: [guard][mis][region][guard]. In place: the input lives inside the region
     * (AllGather: at q*n, NCCL's rule; ReduceScatter: the output is at q*n of the input). */
    poison_rank(rk, rk.rbuf, span);
    poison_rank(rk, rk.sbuf, span);
    char* region_p = rk.rbuf + guard + mis;
    char* inp = !cs.inplace ? rk.sbuf + guard + mis
                : gather    ? region_p + (size_t)q * n * es
                            : region_p;
    char* outp = scatter && cs.inplace ? region_p + (size_t)q * n * es : region_p;
    to_rank(rk, inp, bytes.data(), bytes.size());
    dev_redop_t op;
    memset(&op, 0, sizeof(op));
    op.kind = (uint8_t)cs.op;
    if (cs.op == DEV_OP_PREMULSUM) {
      op.scalar = scalar_bits(t, premul_scalar(t, q));
      if (cs.scalar_dev) {
        uint64_t b = op.scalar;
        op.scalar_on_device = 1;
        op.scalar = 0; /* must come from the pointer */
        if (rk.host_exec) {
          rk.scalar_host = b;
          op.scalar_ptr = &rk.scalar_host;
        } else {
          to_rank(rk, rk.scalar_dev, &b, 8);
          op.scalar_ptr = rk.scalar_dev;
        }
      }
    } else if (cs.op == DEV_OP_SUMPOSTDIV) {
      op.scalar = (uint64_t)R;
    }
    coll_t ct = {cs.func, cs.algo, cs.proto, t, op, inp, outp, n, cs.root, cs.chunk};
    plan_coll(plans[q], ct, R, NCH);
    if (cs.zc != ZCASE_OFF) { /* the input's window: slot 0 out of place, slot 1 in place */
      const bool none = cs.zc == ZCASE_LAST_NONE && q == R - 1;
      for (int c = 0; c < NCH; c++)
        for (work_t& wk : plans[q].w[c]) {
          wk.zc = 1;
          wk.zc_win = none ? -1 : cs.inplace ? 1 : 0;
          wk.zc_off = none ? 0 : (size_t)(inp - (cs.inplace ? rk.rbuf : rk.sbuf));
        }
    }
  }
  uint64_t tails[NCH][MAXR][MAXR];
  if (cs.zc != ZCASE_OFF) read_tails(w, tails);
  if (!run_plans(w, plans, what) ||
      (cs.zc != ZCASE_OFF && !zc_check_steps(w, cs, plans, tails, what))) {
    g_fail++;
    delete[] plans;
    return;
  }

  bool ok = true;
  int reported = 0;
  std::vector<char> got(span), first;
  for (int q = 0; q < R && ok; q++) {
    rank_t& rk = w.r[q];
    from_rank(rk, got.data(), rk.rbuf, span);
    const char* region_p = got.data() + guard + mis;
    /* AllReduce: every rank holds the same bits (each algorithm finishes a value once, or
     * combines in one order everywhere), not just values close to the reference */
    if (cs.func == FUNC_ALLREDUCE) {
      if (q == 0) {
        first.assign(region_p, region_p + out_elems * es);
      } else if (memcmp(first.data(), region_p, out_elems * es) != 0) {
        printf("FAIL %s: rank %d's result differs from rank 0's in its bits\n", what.c_str(), q);
        ok = false;
        break;
      }
    }
    const char* outp = scatter && cs.inplace ? region_p + (size_t)q * n * es : region_p;
    if (q == 0 && keep != nullptr) keep->assign(outp, outp + out_elems * es);
    const size_t touched = (cs.inplace ? region : out_elems * es);
    for (size_t i = 0; i < guard + mis && ok; i++) ok = (uint8_t)got[i] == 0xA5;
    for (size_t i = guard + mis + touched; i < span && ok; i++) ok = (uint8_t)got[i] == 0xA5;
    if (!ok) {
      printf("FAIL %s: rank %d wrote outside its output\n", what.c_str(), q);
      break;
    }
    const bool has_out = !(cs.func == FUNC_REDUCE && q != cs.root);
    for (size_t i = 0; i < out_elems && ok; i++) {
      double ref, mag = 0;
      const char* gp = outp + i * es;
      if (!has_out) {
        if (!cs.inplace) {
          bool untouched = true;
          for (size_t b = 0; b < es; b++) untouched &= (uint8_t)gp[b] == 0xA5;
          if (!untouched) {
            printf("FAIL %s: non-root rank %d wrote its receive buffer\n", what.c_str(), q);
            ok = false;
          }
          continue;
        }
        ref = vals[q][i]; /* in place: the input, untouched */
      } else if (gather) {
        ref = vals[i / n][i % n];
      } else if (cs.func == FUNC_BROADCAST) {
        ref = vals[cs.root][i];
      } else {
        double v[MAXR];
        for (int z = 0; z < R; z++) v[z] = vals[z][scatter ? (size_t)q * n + i : i];
        ref_reduce(t, cs.op, v, R, &ref, &mag);
      }
      double g = get(t, gp);
      if (!close_enough(t, g, ref, mag)) {
        if (reported++ < 3)
          printf("FAIL %s: rank %d element %zu = %.9g, expected %.9g\n", what.c_str(), q, i, g,
                 ref);
        ok = false;
      }
    }
  }
  if (!ok)
    g_fail++;
  else if (g_verbose)
    printf("ok   %s\n", what.c_str());
  delete[] plans;
}

/* ---- Point-to-point: all-to-all including self, msgs messages per pair ----------------------- */
/* Where a received message differs: how many bytes, the first and last, and how many of them
 * still hold the poison (never written) rather than other data. */
static void report_diff(const char* what, int q, int from, int m, const char* got, const char* want,
                        size_t n) {
  size_t bad = 0, poison = 0, first = 0, last = 0;
  for (size_t i = 0; i < n; i++) {
    if (got[i] == want[i]) continue;
    if (bad++ == 0) first = i;
    last = i;
    poison += (uint8_t)got[i] == 0xA5;
  }
  printf(
      "FAIL %s: rank %d: data from rank %d (message %d) differs: %zu of %zu bytes, first at %zu "
      "(got %02x want %02x), last at %zu, %zu still poison\n",
      what, q, from, m, bad, n, first, (uint8_t)got[first], (uint8_t)want[first], last, poison);
}

static void run_alltoall(world_t& w, int proto, int dtype, size_t cnt, int msgs) {
  const int R = w.R;
  const size_t es = tsize(dtype), blk = cnt * es, total = blk * R * msgs;
  char what[160];
  snprintf(what, sizeof(what), "AllToAll/%s %s count=%zu x%d messages", pname(proto), tname(dtype),
           cnt, msgs);
  ensure_bufs(w, total + 64);
  g_checks++;
  std::vector<std::vector<char>> in(R);
  plan_buf* plans = new plan_buf[R];
  for (int q = 0; q < R; q++) {
    rank_t& rk = w.r[q];
    in[q].resize(total);
    for (size_t i = 0; i < total; i++) in[q][i] = (char)rnd();
    to_rank(rk, rk.sbuf, in[q].data(), total);
    poison_rank(rk, rk.rbuf, total + 64);
    /* the planner's order: by distance d (send to q+d, receive from q-d), posting order kept */
    for (int d = 0; d < R; d++) {
      int to = (q + d) % R, from = (q - d + R) % R;
      for (int m = 0; m < msgs; m++) {
        size_t so = ((size_t)to * msgs + m) * blk, ro = ((size_t)from * msgs + m) * blk;
        plan_p2p(plans[q], FUNC_SEND, proto, dtype, rk.sbuf + so, nullptr, cnt, to, R, NCH, q);
        plan_p2p(plans[q], FUNC_RECV, proto, dtype, nullptr, rk.rbuf + ro, cnt, from, R, NCH, q);
      }
    }
  }
  bool ok = run_plans(w, plans, what);
  std::vector<char> got(total + 64);
  for (int q = 0; q < R && ok; q++) {
    from_rank(w.r[q], got.data(), w.r[q].rbuf, got.size());
    for (int from = 0; from < R && ok; from++)
      for (int m = 0; m < msgs && ok; m++)
        if (blk && memcmp(&got[((size_t)from * msgs + m) * blk],
                          &in[from][((size_t)q * msgs + m) * blk], blk) != 0) {
          report_diff(what, q, from, m, &got[((size_t)from * msgs + m) * blk],
                      &in[from][((size_t)q * msgs + m) * blk], blk);
          ok = false;
        }
    for (size_t i = total; i < got.size() && ok; i++)
      if ((uint8_t)got[i] != 0xA5) {
        printf("FAIL %s: rank %d wrote past its receive buffer\n", what, q);
        ok = false;
      }
  }
  if (!ok)
    g_fail++;
  else if (g_verbose)
    printf("ok   %s\n", what);
  delete[] plans;
}

/* ---- Many small AllReduces in one plan, alternating channels and algorithms ----------------- */
static void run_many_allreduce(world_t& w, int proto, int nops, bool direct) {
  const int R = w.R;
  const size_t n = 7, stride = 16; /* elements */
  char what[128];
  snprintf(what, sizeof(what), "Fused %d x AllReduce/%s%s float count=7", nops, pname(proto),
           direct ? " OneShot/TwoShot" : "");
  ensure_bufs(w, (size_t)nops * stride * 4 + 64);
  g_checks++;
  std::vector<std::vector<float>> in(R);
  plan_buf* plans = new plan_buf[R];
  for (int q = 0; q < R; q++) {
    rank_t& rk = w.r[q];
    in[q].resize((size_t)nops * stride);
    for (float& v : in[q]) v = (float)(int)(rnd() % 100);
    to_rank(rk, rk.sbuf, in[q].data(), in[q].size() * 4);
    poison_rank(rk, rk.rbuf, in[q].size() * 4);
    dev_redop_t op;
    memset(&op, 0, sizeof(op));
    op.kind = DEV_OP_SUM;
    for (int k = 0; k < nops; k++) {
      char* sb = rk.sbuf + (size_t)k * stride * 4;
      char* rb = rk.rbuf + (size_t)k * stride * 4;
      /* a plan's collectives are all direct or none (the planner's rule): the direct ones
       * alternate OneShot and TwoShot in a plan of their own */
      const int algo = direct       ? (k % 2 ? ALGO_TWOSHOT : ALGO_ONESHOT)
                       : k % 3 == 2 ? ALGO_TREE
                                    : ALGO_RING;
      plans[q].w[k % 2].push_back(make_work(k % 2, FUNC_ALLREDUCE, algo, proto, ncclFloat32, &op,
                                            sb, rb, n, 0, n, 0, 0, R));
    }
  }
  bool ok = run_plans(w, plans, what);
  std::vector<float> got((size_t)nops * stride);
  for (int q = 0; q < R && ok; q++) {
    from_rank(w.r[q], got.data(), w.r[q].rbuf, got.size() * 4);
    for (int k = 0; k < nops && ok; k++)
      for (size_t i = 0; i < n && ok; i++) {
        float ref = 0;
        for (int z = 0; z < R; z++) ref += in[z][(size_t)k * stride + i];
        if (got[(size_t)k * stride + i] != ref) {
          printf("FAIL %s: rank %d op %d element %zu = %g, expected %g\n", what, q, k, i,
                 got[(size_t)k * stride + i], ref);
          ok = false;
        }
      }
  }
  if (!ok)
    g_fail++;
  else if (g_verbose)
    printf("ok   %s\n", what);
  delete[] plans;
}

/* ---- The matrix ------------------------------------------------------------------------------ */
static void run_matrix(world_t& w, bool full) {
  const int types[] = {ncclFloat32, ncclFloat16,    ncclBfloat16,
                       ncclInt32,   ncclFloat8e4m3, ncclFloat64};
  const size_t counts[] = {0, 1, 7, 1000, (1u << 20) + 3};
  struct fa {
    int func, algo;
  };
  const fa funcs[] = {{FUNC_ALLREDUCE, ALGO_RING},     {FUNC_ALLREDUCE, ALGO_TREE},
                      {FUNC_ALLREDUCE, ALGO_ONESHOT},  {FUNC_ALLREDUCE, ALGO_TWOSHOT},
                      {FUNC_REDUCESCATTER, ALGO_RING}, {FUNC_REDUCESCATTER, ALGO_ONESHOT},
                      {FUNC_ALLGATHER, ALGO_RING},     {FUNC_ALLGATHER, ALGO_ONESHOT},
                      {FUNC_BROADCAST, ALGO_RING},     {FUNC_BROADCAST, ALGO_ONESHOT},
                      {FUNC_REDUCE, ALGO_RING}};
  int idx = 0;
  for (const fa& f : funcs) {
    /* the direct algorithms: LL, up to DIRECT_MAX_RANKS ranks; with the interop pass, the host
     * executor's ranks run the same steps over the same FIFOs */
    const bool direct = f.algo == ALGO_ONESHOT || f.algo == ALGO_TWOSHOT;
    if (direct && w.R > DIRECT_MAX_RANKS) continue;
    for (int proto = 0; proto < PROTO_COUNT; proto++) {
      if (w.interop && proto == PROTO_LL128) continue;
      if (direct && proto != PROTO_LL) continue;
      for (int t : types) {
        if (w.interop && !full && t != ncclFloat32 && t != ncclFloat16 && t != ncclInt32) continue;
        const int nops = reduces(f.func) ? DEV_OP_COUNT : 1;
        for (int op = 0; op < nops; op++) {
          for (size_t count : counts) {
            const bool big = count > 100000;
            if (!full && big && (op != DEV_OP_SUM || w.interop)) continue;
            if (w.interop && !full && count == 0) continue;
            for (int inplace = 0; inplace < 2; inplace++) {
              if (!full && big && inplace) continue;
              const int nroots = f.func == FUNC_BROADCAST || f.func == FUNC_REDUCE ? 2 : 1;
              for (int ri = 0; ri < nroots; ri++) {
                if (g_dead) return;
                ccase c;
                c.func = f.func;
                c.algo = f.algo;
                c.proto = proto;
                c.dtype = t;
                c.op = op;
                c.count = count;
                c.inplace = inplace != 0;
                c.root = ri == 0 ? 0 : w.R - 1;
                c.misalign = (count == 7 || count == 1000) && idx % 3 == 1 ? 1 : 0;
                c.scalar_dev = op == DEV_OP_PREMULSUM && idx % 2 == 0;
                c.chunk = count == 1000 && idx % 4 == 3 ? 100 : 0;
                c.zc = ZCASE_OFF;
                idx++;
                run_coll_case(w, c);
              }
            }
          }
        }
      }
    }
  }
}

/* Zero-copy OneShot items (device.h, "Registered windows"): read in place for every function,
 * type and op, the reductions' bits compared with the same inputs over the FIFOs; in-place
 * AllReduce and a rank without a window take the FIFOs after the probe. Each case also checks
 * which path it took (zc_check_steps). */
/* A zero-copy OneShot case, out of place, aligned, a slot's worth a step. */
static ccase zc_case(int func, int dtype, int op, size_t count, int root, int zc) {
  ccase c;
  memset(&c, 0, sizeof(c));
  c.func = func;
  c.algo = ALGO_ONESHOT;
  c.proto = PROTO_LL;
  c.dtype = dtype;
  c.op = op;
  c.count = count;
  c.root = root;
  c.zc = zc;
  return c;
}

static void run_zc_matrix(world_t& w, bool full) {
  const int types[] = {ncclFloat32, ncclFloat16,    ncclBfloat16,
                       ncclInt32,   ncclFloat8e4m3, ncclFloat64};
  const size_t counts[] = {1, 7, 1000, 70001};
  const int funcs[] = {FUNC_ALLREDUCE, FUNC_ALLGATHER, FUNC_REDUCESCATTER, FUNC_BROADCAST};
  int idx = 0;
  for (int f : funcs)
    for (int t : types) {
      const int nops = reduces(f) ? DEV_OP_COUNT : 1;
      for (int op = 0; op < nops; op++)
        for (size_t count : counts) {
          if (!full && count > 10000 && op != DEV_OP_SUM) continue;
          for (int inplace = 0; inplace < 2; inplace++)
            for (int ri = 0; ri < (f == FUNC_BROADCAST ? 2 : 1); ri++) {
              if (g_dead) return;
              ccase c = zc_case(f, t, op, count, ri == 0 ? 0 : w.R - 1, ZCASE_ALL);
              c.inplace = inplace != 0;
              /* odd element offsets: the 8-byte and byte paths; else 16-byte vectors */
              c.misalign = count != 1 && idx % 3 == 1 ? 1 : 0;
              c.scalar_dev = op == DEV_OP_PREMULSUM && idx % 2 == 0;
              c.chunk = count == 1000 && idx % 4 == 3 ? 100 : 0;
              idx++;
              if (!reduces(f)) {
                run_coll_case(w, c);
                continue;
              }
              /* the same inputs (the generator's state) over the FIFOs: the same bits */
              const uint64_t rng = g_rng;
              const int fails = g_fail;
              std::vector<char> zc_out, fifo_out;
              run_coll_case(w, c, &zc_out);
              c.zc = ZCASE_OFF;
              g_rng = rng;
              run_coll_case(w, c, &fifo_out);
              if (g_fail == fails && zc_out != fifo_out) {
                c.zc = ZCASE_ALL;
                printf("FAIL %s: rank 0's result differs in its bits from the FIFO path's\n",
                       case_name(c).c_str());
                g_fail++;
              }
            }
        }
    }
  /* one rank's input outside any window: nobody reads in place (Broadcast: unless the root's
   * is in one) */
  for (int f : funcs)
    for (int t : {ncclFloat32, ncclInt32})
      for (size_t count : {(size_t)7, (size_t)1000})
        for (int ri = 0; ri < (f == FUNC_BROADCAST ? 2 : 1); ri++) {
          if (g_dead) return;
          const int op = reduces(f) ? DEV_OP_PREMULSUM : DEV_OP_SUM;
          ccase c = zc_case(f, t, op, count, ri == 0 ? 0 : w.R - 1, ZCASE_LAST_NONE);
          c.chunk = count == 1000 ? 100 : 0;
          run_coll_case(w, c);
        }
}

/* A zero-copy item on a communicator without the device table of windows is the planner's bug:
 * every rank's launch refuses it (ncclInternalError) before launching anything. */
static void run_zc_no_table(world_t& w) {
  const char* what = "AllReduce/oneshot zero-copy without a window table";
  g_checks++;
  ensure_bufs(w, 1024);
  bool ok = true;
  for (int q = 0; q < w.R; q++) {
    rank_t& rk = w.r[q];
    dev_redop_t op;
    memset(&op, 0, sizeof(op));
    op.kind = DEV_OP_SUM;
    plan_buf pb;
    coll_t ct = {FUNC_ALLREDUCE, ALGO_ONESHOT, PROTO_LL, ncclFloat32, op,
                 rk.sbuf,        rk.rbuf,      64,       0,           0};
    plan_coll(pb, ct, w.R, NCH);
    for (int c = 0; c < NCH; c++)
      for (work_t& wk : pb.w[c]) {
        wk.zc = 1;
        wk.zc_win = 0;
      }
    pb.finish();
    void* const* saved = rk.comm.zc_base_dev;
    rk.comm.zc_base_dev = nullptr;
    CK(cudaSetDevice(rk.dev));
    exec_streams_t st = {&rk.stream, 1, false};
    const ncclResult_t res = rk.ops->launch(rk.exec, &pb.plan, &st);
    rk.comm.zc_base_dev = saved;
    if (res != ncclInternalError) {
      printf("FAIL %s: rank %d's launch returned %d, expected ncclInternalError\n", what, q,
             (int)res);
      ok = false;
    }
  }
  if (!ok)
    g_fail++;
  else if (g_verbose)
    printf("ok   %s\n", what);
}

/* --stress N: the large point-to-point case N more times per protocol (races that show once in
 * many runs; the count of failures is the result). */
static void run_stress(world_t& w, int n) {
  const int protos[] = {PROTO_SIMPLE, PROTO_LL, PROTO_LL128};
  for (int p : protos) {
    const int f0 = g_fail;
    for (int i = 0; i < n && !g_dead; i++) run_alltoall(w, p, ncclFloat32, 70001, 1);
    printf("stress AllToAll/%s float count=70001: %d runs, %d failed\n", pname(p), n, g_fail - f0);
    fflush(stdout);
  }
}

static void run_all(world_t& w, bool full) {
  run_matrix(w, full);
  /* zero copy: the GPU world only (the interop pass gives host ranks plain host buffers) */
  if (!w.interop && w.R <= DIRECT_MAX_RANKS) {
    if (!g_dead) run_zc_no_table(w);
    if (!g_dead) run_zc_matrix(w, full);
  }
  const int protos[] = {PROTO_SIMPLE, PROTO_LL, PROTO_LL128};
  for (int p : protos) {
    if (w.interop && p == PROTO_LL128) continue;
    if (!g_dead) run_alltoall(w, p, ncclFloat32, 1, 1);
    if (!g_dead) run_alltoall(w, p, ncclInt8, 1001, 1);
    if (!g_dead) run_alltoall(w, p, ncclFloat32, 70001, 1);
    if (w.interop) continue;
    if (!g_dead) run_alltoall(w, p, ncclFloat16, 33, 120); /* too many items: split by key */
    if (!g_dead) run_many_allreduce(w, p, 40, false);      /* the large parameter block */
    if (!g_dead) run_many_allreduce(w, p, 450, false);     /* split over launches */
    if (p == PROTO_LL && w.R <= DIRECT_MAX_RANKS) {        /* the direct kernel's rounds */
      if (!g_dead) run_many_allreduce(w, p, 40, true);
      if (!g_dead) run_many_allreduce(w, p, 450, true);
    }
  }
}

int main(int argc, char** argv) {
  int ranks = 0, stress = 0;
  bool full = false, interop_only = false, no_interop = false;
  unsigned long seed = 12345;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
      ranks = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--full")) {
      full = true;
    } else if (!strcmp(argv[i], "--interop")) {
      interop_only = true;
    } else if (!strcmp(argv[i], "--no-interop")) {
      no_interop = true;
    } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
      seed = strtoul(argv[++i], nullptr, 0);
    } else if (!strcmp(argv[i], "--stress") && i + 1 < argc) {
      stress = atoi(argv[++i]);
      no_interop = true; /* the interop world has no LL128 */
    } else if (!strcmp(argv[i], "-v")) {
      g_verbose = true;
    } else {
      fprintf(stderr,
              "usage: %s [--ranks R] [--full] [--interop | --no-interop] [--stress N] [--seed S] "
              "[-v]\n",
              argv[0]);
      return 2;
    }
  }
  g_rng = seed;
  int ngpu = 0;
  if (cudaGetDeviceCount(&ngpu) != cudaSuccess || ngpu == 0) {
    printf("no CUDA device: nothing was tested\n0%%: Checks: 0, Failures: 0, Errors: 1\n");
    return 1;
  }
  if (ngpu > MAXR) ngpu = MAXR;
  if (ranks <= 0) ranks = ngpu > 1 ? ngpu : 4;
  if (ranks > MAXR) ranks = MAXR;
  if (ranks < 2) ranks = 2;
  double t0 = now_s();
  if (!interop_only) {
    world_t* w = new world_t();
    world_init(*w, ranks, ngpu, false);
    printf("CUDA executor: %d ranks on %d GPU(s), %d channels%s\n", ranks, ngpu, NCH,
           full ? ", full matrix" : "");
    fflush(stdout);
    if (stress > 0)
      run_stress(*w, stress);
    else
      run_all(*w, full);
    if (!g_dead) world_fini(*w);
    delete w;
    printf("GPU pass: %d checks, %d failures, %.1f s\n", g_checks, g_fail, now_s() - t0);
    fflush(stdout);
  }
  if (!no_interop && !g_dead) {
    double t1 = now_s();
    int c0 = g_checks, f0 = g_fail;
    world_t* w = new world_t();
    world_init(*w, ranks < 4 ? 4 : ranks, ngpu, true);
    printf("Interop: %d ranks, even ranks on the host executor\n", w->R);
    fflush(stdout);
    run_all(*w, full);
    if (!g_dead) world_fini(*w);
    delete w;
    printf("interop pass: %d checks, %d failures, %.1f s\n", g_checks - c0, g_fail - f0,
           now_s() - t1);
  }
  int passed = g_checks - g_fail - g_errors;
  printf("%d%%: Checks: %d, Failures: %d, Errors: %d\n",
         g_checks ? (int)(100.0 * passed / g_checks) : 0, g_checks, g_fail, g_errors);
  return g_fail == 0 && g_errors == 0 && g_checks > 0 ? 0 : 1;
}
