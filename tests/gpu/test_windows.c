/* GPU test of zero-copy OneShot over registered windows (device.h, "Registered windows read in
 * place"), end to end through the public API, with every rank in a process of its own on GPU 0:
 * the only way the cuMem descriptor export and import (src/transport/share.c) run for real.
 *
 * Usage: test_windows [NRANKS]  (2 to 8, default 2; tests/gpu/run.sh runs 2 and 4)
 *
 * The parent sets NCCL_MULTI_RANK_GPU_ENABLE=1, NCCL_NVLS_ENABLE=0, NCCL_ALGO=OneShot and
 * NCCL_PROTO=LL, makes the unique id (no CUDA call: the ranks are forked) and forks the ranks.
 * Each rank allocates its send and receive buffers with ncclMemAlloc, registers both as windows
 * (NCCL_WIN_COLL_SYMMETRIC) and reads its own REG log: each window must have been shared ("shared
 * in slot"), else the exchange failed and the collectives below would only prove the FIFO path.
 * Then, for float32, int32 and bfloat16, at counts 1, 7, 1001 and 65537, some at odd element
 * offsets into the windows: AllReduce (sum and a PreMulSum with a scalar of each rank's own, out
 * of place and in place), AllGather (out of place and in place), ReduceScatter (out of place and
 * in place) and Broadcast (two roots, and in place). Every output element is compared with a host
 * reference built from the rank-dependent inputs (small integers, so every sum and product is
 * exact in each type), and the elements just around each output must keep their fill. Last, rank 1
 * passes cudaMalloc buffers outside any window to AllReduce, AllGather and Broadcast while the
 * others pass their windows: the probe finds a buffer in no window, every rank takes the FIFO path,
 * and the results must be right all the same.
 * The last line reads like a Check summary ("100%: Checks: N, Failures: 0, Errors: 0"). */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

#define MAXR 8
/* Each window: 65537 elements x 8 ranks x 4 bytes fit, with the offsets and guards. */
#define WIN_BYTES (4u << 20)
#define GUARD 16           /* elements checked on each side of an output: must keep the fill */
#define FILL 0xa5          /* byte every receive buffer holds before an operation */
#define RANK_TIMEOUT_S 120 /* the parent kills ranks still running after this */

/* One rank's results, in memory the parent shares (the ranks are processes). */
typedef struct rank_result {
  int checks, failures;
  int done; /* reached the end (the ranks' failures are counted, not fatal) */
} rank_result_t;

static rank_result_t* g_res;
static int g_rank;

#define CK(call)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "rank %d: %s:%d: %s: %s\n", g_rank, __FILE__, __LINE__, #call, \
              cudaGetErrorString(e_));                                               \
      _exit(2);                                                                      \
    }                                                                                \
  } while (0)
#define NK(call)                                                                          \
  do {                                                                                    \
    ncclResult_t r_ = (call);                                                             \
    if (r_ != ncclSuccess) {                                                              \
      fprintf(stderr, "rank %d: %s:%d: %s: %s (%s)\n", g_rank, __FILE__, __LINE__, #call, \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                            \
      _exit(2);                                                                           \
    }                                                                                     \
  } while (0)

static void expect(bool ok, const char* what) {
  g_res[g_rank].checks++;
  if (!ok) {
    g_res[g_rank].failures++;
    printf("rank %d: FAIL %s\n", g_rank, what);
    fflush(stdout);
  }
}

/* ---- Types and reference values -------------------------------------------------------------- */
typedef struct type_info {
  ncclDataType_t dt;
  const char* name;
  size_t size;
  int range; /* inputs are integers in [-range, range] */
} type_info_t;

/* Ranges keep every reference exact: a float32 PreMulSum of 8 ranks stays under 2^24 in halves,
 * a bfloat16 one under 128 in halves (8 significant bits), int32 far from overflow. */
static const type_info_t types[] = {{ncclFloat32, "float32", 4, 1000},
                                    {ncclInt32, "int32", 4, 1 << 20},
                                    {ncclBfloat16, "bf16", 2, 4}};

/* Rank r's input element i (salt tells cases apart): a hash, so a misplaced element shows. */
static double input_of(const type_info_t* t, int r, size_t i, int salt) {
  uint32_t h = (uint32_t)i * 2654435761u ^ ((uint32_t)r * 40503u + (uint32_t)salt * 977u);
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return (double)(int64_t)(h % (uint32_t)(2 * t->range + 1)) - t->range;
}

/* PreMulSum's scalar of rank r: halves for the floating types (not only whole numbers), r + 1
 * for int32. */
static double scalar_of(const type_info_t* t, int r) {
  return t->dt == ncclInt32 ? (double)(r + 1) : 0.5 * (double)(r + 1);
}

static uint16_t bf16_of(double v) {
  float f = (float)v;
  uint32_t bits;
  memcpy(&bits, &f, sizeof(bits));
  return (uint16_t)(bits >> 16); /* exact: every value here has at most 8 significant bits */
}

static double bf16_value(uint16_t b) {
  uint32_t bits = (uint32_t)b << 16;
  float f;
  memcpy(&f, &bits, sizeof(f));
  return f;
}

static void store(const type_info_t* t, void* base, size_t i, double v) {
  if (t->dt == ncclFloat32) {
    ((float*)base)[i] = (float)v;
  } else if (t->dt == ncclInt32) {
    ((int32_t*)base)[i] = (int32_t)v;
  } else {
    ((uint16_t*)base)[i] = bf16_of(v);
  }
}

static double load(const type_info_t* t, const void* base, size_t i) {
  if (t->dt == ncclFloat32) return ((const float*)base)[i];
  if (t->dt == ncclInt32) return ((const int32_t*)base)[i];
  return bf16_value(((const uint16_t*)base)[i]);
}

/* ---- One rank -------------------------------------------------------------------------------- */
typedef enum {
  K_AR,        /* AllReduce sum */
  K_AR_PREMUL, /* AllReduce PreMulSum */
  K_AG,
  K_RS,
  K_BCAST,
  K_COUNT
} kind_t;
static const char* kind_names[K_COUNT] = {"AllReduce sum", "AllReduce PreMulSum", "AllGather",
                                          "ReduceScatter", "Broadcast"};

typedef struct rank_ctx {
  ncclComm_t comm;
  int rank, n;
  cudaStream_t st;
  char *s, *r;   /* this rank's send and receive buffers (windows or not) */
  char* host_in; /* staging for one rank's input */
  char* host_out;
} rank_ctx_t;

typedef struct op_case {
  kind_t kind;
  const type_info_t* t;
  size_t count, soff, roff; /* elements; offsets into the send and receive buffers */
  bool inplace;
  int root;
  int salt;
} op_case_t;

/* Elements of rank r's input and of every rank's output span. */
static size_t in_count(const op_case_t* c, int n) {
  return c->kind == K_RS ? c->count * (size_t)n : c->count;
}
static size_t out_count(const op_case_t* c, int n) {
  return c->kind == K_AG ? c->count * (size_t)n : c->count;
}

/* Where this rank's input lies in its own buffers (in place: inside the receive span). */
static size_t in_place_offset(const op_case_t* c, int rank) {
  if (c->kind == K_AG) return c->roff + (size_t)rank * c->count;
  return c->roff; /* AllReduce, Broadcast, ReduceScatter: the input starts the receive span */
}

/* The reference value of output element i on rank me. */
static double reference(const op_case_t* c, int me, int n, size_t i) {
  const type_info_t* t = c->t;
  double v = 0;
  switch (c->kind) {
    case K_AR:
      for (int p = 0; p < n; p++) v += input_of(t, p, i, c->salt);
      return v;
    case K_AR_PREMUL:
      for (int p = 0; p < n; p++) v += input_of(t, p, i, c->salt) * scalar_of(t, p);
      return v;
    case K_AG:
      return input_of(t, (int)(i / c->count), i % c->count, c->salt);
    case K_RS:
      for (int p = 0; p < n; p++) v += input_of(t, p, (size_t)me * c->count + i, c->salt);
      return v;
    default:
      return input_of(t, c->root, i, c->salt);
  }
}

static ncclResult_t issue(rank_ctx_t* x, const op_case_t* c, ncclRedOp_t premul) {
  const size_t es = c->t->size;
  /* In place, ReduceScatter's output is this rank's slice of its input. */
  const size_t rs_slice = c->kind == K_RS && c->inplace ? (size_t)x->rank * c->count : 0;
  char* recv = x->r + (c->roff + rs_slice) * es;
  const char* send = c->inplace ? x->r + in_place_offset(c, x->rank) * es : x->s + c->soff * es;
  switch (c->kind) {
    case K_AR:
      return ncclAllReduce(send, recv, c->count, c->t->dt, ncclSum, x->comm, x->st);
    case K_AR_PREMUL:
      return ncclAllReduce(send, recv, c->count, c->t->dt, premul, x->comm, x->st);
    case K_AG:
      return ncclAllGather(send, recv, c->count, c->t->dt, x->comm, x->st);
    case K_RS:
      return ncclReduceScatter(send, recv, c->count, c->t->dt, ncclSum, x->comm, x->st);
    default:
      return ncclBroadcast(send, recv, c->count, c->t->dt, c->root, x->comm, x->st);
  }
}

/* Runs one case on this rank and checks its output and the guard elements around it. */
static void run_case(rank_ctx_t* x, const op_case_t* c, ncclRedOp_t premul, const char* label) {
  const type_info_t* t = c->t;
  const size_t es = t->size, nin = in_count(c, x->n), nout = out_count(c, x->n);
  /* For an in-place ReduceScatter the receive span is where the input lies, rank 0's slice on. */
  const size_t span = c->kind == K_RS && c->inplace ? nin : nout;
  const size_t lo = c->roff >= GUARD ? c->roff - GUARD : 0;
  const size_t hi = c->roff + span + GUARD; /* fits: WIN_BYTES leaves room */
  const size_t out_at =
      c->kind == K_RS && c->inplace ? c->roff + (size_t)x->rank * c->count : c->roff;
  CK(cudaMemsetAsync(x->r, FILL, hi * es, x->st));
  if (c->kind != K_BCAST || x->rank == c->root) { /* a Broadcast reads the root's input only */
    for (size_t i = 0; i < nin; i++) store(t, x->host_in, i, input_of(t, x->rank, i, c->salt));
    char* dst = c->inplace ? x->r + in_place_offset(c, x->rank) * es : x->s + c->soff * es;
    CK(cudaMemcpyAsync(dst, x->host_in, nin * es, cudaMemcpyHostToDevice, x->st));
  }
  NK(issue(x, c, premul));
  CK(cudaMemcpyAsync(x->host_out, x->r, hi * es, cudaMemcpyDeviceToHost, x->st));
  CK(cudaStreamSynchronize(x->st));
  size_t bad = 0, first = (size_t)-1, guard_bad = 0;
  double got_first = 0, want_first = 0;
  for (size_t i = 0; i < c->count * (c->kind == K_AG ? (size_t)x->n : 1); i++) {
    double want = reference(c, x->rank, x->n, i), got = load(t, x->host_out, out_at + i);
    if (got != want) {
      if (bad++ == 0) {
        first = i;
        got_first = got;
        want_first = want;
      }
    }
  }
  for (size_t i = lo; i < hi; i++) {
    if (i >= c->roff && i < c->roff + span) continue;
    for (size_t b = 0; b < es; b++) guard_bad += (unsigned char)x->host_out[i * es + b] != FILL;
  }
  char what[256];
  snprintf(what, sizeof(what),
           "%s %s %s %s count=%zu send+%zu recv+%zu root=%d: %zu wrong elements (first at %zu: "
           "%g, want %g), %zu bytes around the output changed",
           label, kind_names[c->kind], t->name, c->inplace ? "in place" : "out of place", c->count,
           c->soff, c->roff, c->root, bad, first, got_first, want_first, guard_bad);
  expect(bad == 0 && guard_bad == 0, what);
}

/* Each window must have been shared: its "shared in slot" line in this rank's REG log. */
static void check_shared(const char* log_path, void* const* bufs, int nbufs) {
  for (int b = 0; b < nbufs; b++) {
    char want[64], ptr[32], line[1024];
    snprintf(want, sizeof(want), "Window %p (", bufs[b]);
    snprintf(ptr, sizeof(ptr), "%p", bufs[b]);
    FILE* f = fopen(log_path, "r");
    bool shared = false;
    char why[sizeof(line)] = "no line about it";
    if (f == NULL) snprintf(why, sizeof(why), "cannot read the log: %s", strerror(errno));
    if (f != NULL) {
      while (fgets(line, sizeof(line), f) != NULL) {
        if (strstr(line, want) != NULL && strstr(line, "shared in slot") != NULL) shared = true;
        /* The lines that say why not: the export, the mapping, or the registration's verdict. */
        if (strstr(line, ptr) != NULL &&
            (strstr(line, "not shared") != NULL || strstr(line, "not every rank can map") != NULL ||
             strstr(line, "neither a cuMem allocation") != NULL))
          snprintf(why, sizeof(why), "%.*s", (int)strcspn(line, "\n"), line);
      }
      fclose(f);
    }
    char what[1400];
    snprintf(what, sizeof(what), "window %p shared with every rank (%s: %s)", bufs[b], log_path,
             shared ? "shared in slot" : why);
    expect(shared, what);
  }
}

static void run_type(rank_ctx_t* x, const type_info_t* t) {
  static const size_t shapes[][3] = {/* count, send offset, receive offset (elements) */
                                     {1, 0, 0},
                                     {7, 1, 3},
                                     {1001, 5, 2},
                                     {65537, 0, 0},
                                     {65537, 3, 1}};
  ncclRedOp_t premul;
  union {
    float f;
    int32_t i;
    uint16_t b;
  } scalar;
  double sv = scalar_of(t, x->rank);
  if (t->dt == ncclFloat32) {
    scalar.f = (float)sv;
  } else if (t->dt == ncclInt32) {
    scalar.i = (int32_t)sv;
  } else {
    scalar.b = bf16_of(sv);
  }
  NK(ncclRedOpCreatePreMulSum(&premul, &scalar, t->dt, ncclScalarHostImmediate, x->comm));
  int salt = 0;
  for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
    op_case_t c = {.t = t, .count = shapes[s][0], .soff = shapes[s][1], .roff = shapes[s][2]};
    for (int k = 0; k < K_COUNT; k++) {
      c.kind = (kind_t)k;
      for (int inplace = 0; inplace < 2; inplace++) {
        c.inplace = inplace;
        /* Broadcast: two roots out of place, one in place. */
        int roots[2] = {0, x->n - 1}, nroots = k == K_BCAST ? (inplace ? 1 : 2) : 1;
        if (k == K_BCAST && inplace) roots[0] = 1;
        for (int ri = 0; ri < nroots; ri++) {
          c.root = k == K_BCAST ? roots[ri] : 0;
          c.salt = ++salt;
          run_case(x, &c, premul, "windows");
        }
      }
    }
  }
  NK(ncclRedOpDestroy(premul, x->comm));
}

/* Rank 1 passes cudaMalloc buffers outside any window; the others pass their windows. */
static void run_outside_window(rank_ctx_t* x, char* plain_s, char* plain_r) {
  rank_ctx_t y = *x;
  if (x->rank == 1) {
    y.s = plain_s;
    y.r = plain_r;
  }
  const type_info_t* t = &types[0];
  static const size_t counts[] = {7, 65537};
  static const kind_t kinds[] = {K_AR, K_AG, K_BCAST};
  int salt = 1000;
  for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
      /* Broadcast from rank 1 (its input outside) and from rank 0 (its input in a window, rank
       * 1's output outside). */
      for (int root = 0; root < (kinds[k] == K_BCAST ? 2 : 1); root++) {
        op_case_t c = {.kind = kinds[k],
                       .t = t,
                       .count = counts[ci],
                       .soff = 1,
                       .roff = 2,
                       .root = kinds[k] == K_BCAST ? 1 - root : 0,
                       .salt = ++salt};
        run_case(&y, &c, (ncclRedOp_t)0, "rank 1 outside a window:");
      }
    }
  }
}

static int rank_main(int rank, int n, ncclUniqueId id, int parent) {
  g_rank = rank;
  char log_pattern[128], log_path[128];
  snprintf(log_pattern, sizeof(log_pattern), "/tmp/baton-winT-%d-%%p.log", parent);
  snprintf(log_path, sizeof(log_path), "/tmp/baton-winT-%d-%d.log", parent, (int)getpid());
  /* The log must be this process's own: the parent may have opened its log already, and that
   * state is inherited, so the settings are read again here. */
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "REG", 1);
  setenv("NCCL_DEBUG_FILE", log_pattern, 1);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit(); /* deprecated in 2.28, still exported: the one way to re-read them */
#pragma GCC diagnostic pop

  rank_ctx_t x = {.rank = rank, .n = n};
  CK(cudaSetDevice(0));
  NK(ncclCommInitRank(&x.comm, n, id, rank));
  CK(cudaStreamCreateWithFlags(&x.st, cudaStreamNonBlocking));
  NK(ncclMemAlloc((void**)&x.s, WIN_BYTES));
  NK(ncclMemAlloc((void**)&x.r, WIN_BYTES));
  ncclWindow_t ws, wr;
  NK(ncclCommWindowRegister(x.comm, x.s, WIN_BYTES, &ws, NCCL_WIN_COLL_SYMMETRIC));
  NK(ncclCommWindowRegister(x.comm, x.r, WIN_BYTES, &wr, NCCL_WIN_COLL_SYMMETRIC));
  void* bufs[2] = {x.s, x.r};
  check_shared(log_path, bufs, 2);
  x.host_in = malloc(WIN_BYTES);
  x.host_out = malloc(WIN_BYTES);
  if (x.host_in == NULL || x.host_out == NULL) {
    fprintf(stderr, "rank %d: out of host memory\n", rank);
    _exit(2);
  }
  for (size_t ti = 0; ti < sizeof(types) / sizeof(types[0]); ti++) run_type(&x, &types[ti]);

  char *plain_s = NULL, *plain_r = NULL;
  if (rank == 1) {
    CK(cudaMalloc((void**)&plain_s, WIN_BYTES));
    CK(cudaMalloc((void**)&plain_r, WIN_BYTES));
  }
  run_outside_window(&x, plain_s, plain_r);
  if (rank == 1) {
    CK(cudaFree(plain_s));
    CK(cudaFree(plain_r));
  }

  NK(ncclCommWindowDeregister(x.comm, ws));
  NK(ncclCommWindowDeregister(x.comm, wr));
  NK(ncclMemFree(x.s));
  NK(ncclMemFree(x.r));
  NK(ncclCommDestroy(x.comm));
  CK(cudaStreamDestroy(x.st));
  free(x.host_in);
  free(x.host_out);
  /* A failing rank's log stays for a person to read (the checks printed its path). */
  if (g_res[rank].failures == 0) unlink(log_path);
  g_res[rank].done = 1;
  return g_res[rank].failures == 0 ? 0 : 1;
}

/* ---- Parent ---------------------------------------------------------------------------------- */
static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* GPUs visible, asked in a child: the parent must not create a CUDA context before forking. */
static int gpu_count(void) {
  pid_t probe = fork();
  if (probe == 0) {
    int ndev = 0;
    _exit(cudaGetDeviceCount(&ndev) == cudaSuccess && ndev > 0 ? (ndev > 100 ? 100 : ndev) : 0);
  }
  int status = 0;
  if (probe < 0 || waitpid(probe, &status, 0) != probe) return 0;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 0;
}

int main(int argc, char** argv) {
  int n = argc > 1 ? atoi(argv[1]) : 2;
  if (n < 2 || n > MAXR) {
    fprintf(stderr, "usage: %s [NRANKS]  (2 to %d ranks, all on GPU 0)\n", argv[0], MAXR);
    return 2;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* Before the unique id: the library reads its parameters once, and the ranks inherit them. */
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1);
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("NCCL_ALGO", "OneShot", 1);
  setenv("NCCL_PROTO", "LL", 1);
  if (gpu_count() == 0) {
    printf("no GPU visible\n0%%: Checks: 1, Failures: 1, Errors: 0\n");
    return 1;
  }
  g_res = mmap(NULL, MAXR * sizeof(rank_result_t), PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_res == MAP_FAILED) {
    perror("mmap");
    return 2;
  }
  memset(g_res, 0, MAXR * sizeof(rank_result_t));
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) {
    fprintf(stderr, "ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
    return 2;
  }
  printf("zero-copy windows: %d ranks in processes on GPU 0, NCCL_ALGO=OneShot NCCL_PROTO=LL\n", n);
  const int parent = (int)getpid();
  pid_t pids[MAXR];
  for (int i = 0; i < n; i++) {
    pids[i] = fork();
    if (pids[i] == 0) _exit(rank_main(i, n, id, parent));
    if (pids[i] < 0) {
      perror("fork");
      for (int j = 0; j < i; j++) kill(pids[j], SIGKILL);
      return 2;
    }
  }
  /* Wait for every rank, bounded: a rank that dies leaves the others waiting in a collective,
   * so they are killed at once; a hang is killed at the deadline. */
  int status[MAXR], left = n, errors = 0;
  bool reaped[MAXR] = {false}, killed = false;
  const double deadline = now_s() + RANK_TIMEOUT_S;
  while (left > 0) {
    bool any = false;
    for (int i = 0; i < n; i++) {
      if (reaped[i] || waitpid(pids[i], &status[i], WNOHANG) != pids[i]) continue;
      reaped[i] = any = true;
      left--;
      bool clean = WIFEXITED(status[i]) && WEXITSTATUS(status[i]) <= 1 && g_res[i].done;
      if (!clean) {
        errors++;
        if (killed) continue; /* killed by us: counted, not reported again */
        if (WIFSIGNALED(status[i]))
          fprintf(stderr, "rank %d died of signal %d\n", i, WTERMSIG(status[i]));
        else
          fprintf(stderr, "rank %d exited with status %d\n", i, WEXITSTATUS(status[i]));
      }
      if (!clean && !killed) {
        for (int j = 0; j < n; j++)
          if (!reaped[j]) kill(pids[j], SIGKILL);
        killed = true;
      }
    }
    if (left > 0 && !killed && now_s() > deadline) {
      fprintf(stderr, "ranks still running after %d s: killed\n", RANK_TIMEOUT_S);
      for (int j = 0; j < n; j++)
        if (!reaped[j]) kill(pids[j], SIGKILL);
      killed = true;
    }
    if (!any) usleep(50 * 1000);
  }
  int checks = 0, failures = 0;
  for (int i = 0; i < n; i++) {
    checks += g_res[i].checks;
    failures += g_res[i].failures;
    printf("rank %d: %d checks, %d failures%s\n", i, g_res[i].checks, g_res[i].failures,
           g_res[i].done ? "" : ", did not finish");
  }
  const int total = checks + errors;
  printf("%d%%: Checks: %d, Failures: %d, Errors: %d\n",
         total ? 100 * (total - failures - errors) / total : 0, total, failures, errors);
  return failures == 0 && errors == 0 && checks > 0 ? 0 : 1;
}
