/* baton-perf: the benchmark and demo tool. It starts one process per rank on this machine (one
 * per local GPU, or host-executor ranks when there is no GPU), sweeps message sizes for the chosen
 * collectives out of place and in place, checks every result, and prints nccl-tests' columns:
 * time (the median over repetitions of the per-iteration time averaged over ranks) and its
 * minimum, algbw, busbw, #wrong, plus the algorithm and protocol the library used (read through a
 * profiler plugin, stock's ABI, so it works for stock too).
 *
 * Libraries: the ranks dlopen the library (tools/common/nccl_lib.c), never link it, so one call
 * can time two libraries: --compare runs the same sweep, with the same iteration counts, on a
 * second library in fresh rank processes and prints the ratios. Each process maps one NCCL only.
 * Output: the table, --json FILE (everything measured), --plot FILE.png|svg (bus bandwidth and
 * time against size for each library; tools/perf/baton_plot.py, matplotlib). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl_lib.h"
#include "perf_profiler.h"

#define PERF_MAX_RANKS 64
#define PERF_MAX_SIZES 48
#define PERF_MAX_REPS 20
#define PERF_MAX_LIBS 2
#define PERF_ITERS_MAX 100000

typedef enum {
  COLL_ALLREDUCE,
  COLL_ALLGATHER,
  COLL_REDUCESCATTER,
  COLL_BROADCAST,
  COLL_REDUCE,
  COLL_ALLTOALL,
  COLL_COUNT
} coll_t;
static const char* const coll_names[COLL_COUNT] = {"allreduce", "allgather", "reducescatter",
                                                   "broadcast", "reduce",    "alltoall"};

typedef struct options {
  int nranks;
  size_t min_bytes, max_bytes;
  int factor;
  int iters; /* 0: calibrated so a repetition lasts target_ms */
  int reps, warmup;
  double target_ms;
  bool check;
  bool colls[COLL_COUNT];
  bool use_gpu;
  const char* libs[PERF_MAX_LIBS];
  int nlibs;
  const char* json;
  const char* plot;
  int progress; /* -1: when stderr is a terminal */
} options_t;

/* One (library, collective, size, place) measurement, filled by the ranks. */
typedef struct result {
  double us[PERF_MAX_REPS][PERF_MAX_RANKS]; /* per-iteration time of each repetition and rank */
  long wrong[PERF_MAX_RANKS];
  char algo[16], proto[16];
  int nchannels;
  bool done;             /* rank 0 has measured it */
  atomic_int ranks_done; /* ranks that have stored their times (the parent prints the row then) */
} result_t;

/* Shared by the parent and every rank process (MAP_SHARED before the forks). */
typedef struct shared {
  ncclUniqueId id;
  atomic_int id_ready;
  atomic_int failed;
  int iters[COLL_COUNT][PERF_MAX_SIZES]; /* 0 until calibrated (the first library does it) */
  atomic_int iters_ready[COLL_COUNT][PERF_MAX_SIZES];
  atomic_int progress; /* measurements done by rank 0 */
  char lib_desc[PERF_MAX_LIBS][PATH_MAX + 512];
  char lib_build[PERF_MAX_LIBS][512];
  bool lib_baton[PERF_MAX_LIBS];
  double init_ms[PERF_MAX_LIBS];
  result_t res[PERF_MAX_LIBS][COLL_COUNT][PERF_MAX_SIZES][2];
} shared_t;

static shared_t* sh;
static size_t sizes[PERF_MAX_SIZES];
static int nsizes;

/* ---- Small helpers --------------------------------------------------------------------------- */
static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static void die(const char* fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "baton-perf[%d]: ", (int)getpid());
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  if (sh) atomic_store(&sh->failed, 1);
  exit(2);
}

/* what: the NCCL function's name, for the message. */
#define PERF_NCCL(lib, what, call)                                                           \
  do {                                                                                       \
    ncclResult_t r_ = (call);                                                                \
    if (r_ != ncclSuccess)                                                                   \
      die("%s failed: %s (%s)", what, (lib)->GetErrorString(r_), (lib)->GetLastError(NULL)); \
  } while (0)
#define PERF_CUDA(call)                                                         \
  do {                                                                          \
    cudaError_t e_ = (call);                                                    \
    if (e_ != cudaSuccess) die("%s failed: %s", #call, cudaGetErrorString(e_)); \
  } while (0)

/* ---- The collectives (nccl-tests' conventions: bytes is the larger buffer) ------------------- */
static void coll_counts(coll_t c, size_t bytes, int n, size_t* send_elems, size_t* recv_elems) {
  size_t total = bytes / sizeof(float);
  switch (c) {
    case COLL_ALLGATHER:
      *send_elems = total / n;
      *recv_elems = (total / n) * n;
      break;
    case COLL_REDUCESCATTER:
      *recv_elems = total / n;
      *send_elems = (total / n) * n;
      break;
    case COLL_ALLTOALL:
      *send_elems = *recv_elems = (total / n) * n;
      break;
    default:
      *send_elems = *recv_elems = total;
      break;
  }
}

static double bus_factor(coll_t c, int n) {
  switch (c) {
    case COLL_ALLREDUCE:
      return 2.0 * (n - 1) / n;
    case COLL_ALLGATHER:
    case COLL_REDUCESCATTER:
    case COLL_ALLTOALL:
      return (double)(n - 1) / n;
    default:
      return 1.0;
  }
}

/* The count column: what the call is given (per-rank counts for allgather/reducescatter). */
static size_t call_count(coll_t c, size_t se, size_t re, int n) {
  if (c == COLL_ALLGATHER) return se;
  if (c == COLL_REDUCESCATTER) return re;
  if (c == COLL_ALLTOALL) return se / n;
  return se;
}

/* Buffers of one place: in place, allgather reads its part of the output and reducescatter
 * writes its part of the input, as nccl-tests. */
static void place_buffers(coll_t c, int place, int rank, float* sb, float* rb, size_t se, size_t re,
                          const float** send, float** recv) {
  *send = sb;
  *recv = rb;
  if (!place) return;
  if (c == COLL_ALLGATHER) {
    *recv = rb;
    *send = rb + (size_t)rank * se;
  } else if (c == COLL_REDUCESCATTER) {
    *send = sb;
    *recv = sb + (size_t)rank * re;
  } else {
    *recv = sb;
  }
}

static ncclResult_t run_coll(const nccl_lib_t* L, coll_t c, const float* sb, float* rb, size_t se,
                             size_t re, ncclComm_t comm, cudaStream_t s, int n) {
  switch (c) {
    case COLL_ALLREDUCE:
      return L->AllReduce(sb, rb, se, ncclFloat, ncclSum, comm, s);
    case COLL_ALLGATHER:
      return L->AllGather(sb, rb, se, ncclFloat, comm, s);
    case COLL_REDUCESCATTER:
      return L->ReduceScatter(sb, rb, re, ncclFloat, ncclSum, comm, s);
    case COLL_BROADCAST:
      return L->Broadcast(sb, rb, se, ncclFloat, 0, comm, s);
    case COLL_REDUCE:
      return L->Reduce(sb, rb, se, ncclFloat, ncclSum, 0, comm, s);
    case COLL_ALLTOALL:
      return L->AlltoAll(sb, rb, se / n, ncclFloat, comm, s);
    default:
      return ncclInvalidArgument;
  }
}

/* Inputs are small integers, so float sums are exact and the check can be exact. */
static float input_value(int rank, size_t i) {
  return (float)((rank + 1) * 3 + (int)(i % 7));
}

static float expected_value(coll_t c, int rank, int n, size_t i, size_t se, size_t re) {
  float sum = 0;
  switch (c) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
      for (int r = 0; r < n; r++) sum += input_value(r, i);
      return sum;
    case COLL_REDUCESCATTER:
      for (int r = 0; r < n; r++) sum += input_value(r, rank * re + i);
      return sum;
    case COLL_ALLGATHER:
      return input_value((int)(i / se), i % se);
    case COLL_BROADCAST:
      return input_value(0, i);
    case COLL_ALLTOALL: {
      size_t per = se / n;
      return input_value((int)(i / per), rank * per + i % per);
    }
    default:
      return 0;
  }
}

/* ---- One rank ---------------------------------------------------------------------------------
 */
typedef struct rank_ctx {
  const options_t* o;
  const nccl_lib_t* L;
  int lib, rank;
  ncclComm_t comm;
  cudaStream_t stream;
  float *sb, *rb, *host; /* device (or host) buffers, and a host copy */
  size_t max_elems;
  perf_last_coll_t* last; /* the profiler plugin's record, NULL without it */
} rank_ctx_t;

static void rank_sync(rank_ctx_t* r) {
  if (r->o->use_gpu) PERF_CUDA(cudaStreamSynchronize(r->stream));
}

static void rank_upload(rank_ctx_t* r, float* dst, const float* src, size_t elems) {
  if (r->o->use_gpu)
    PERF_CUDA(cudaMemcpyAsync(dst, src, elems * sizeof(float), cudaMemcpyHostToDevice, r->stream));
  else
    memcpy(dst, src, elems * sizeof(float));
}

static void rank_download(rank_ctx_t* r, float* dst, const float* src, size_t elems) {
  if (r->o->use_gpu) {
    PERF_CUDA(cudaMemcpyAsync(dst, src, elems * sizeof(float), cudaMemcpyDeviceToHost, r->stream));
    PERF_CUDA(cudaStreamSynchronize(r->stream));
  } else {
    memcpy(dst, src, elems * sizeof(float));
  }
}

/* Fills the inputs, runs the operation once and counts the wrong output elements. */
static long rank_check(rank_ctx_t* r, coll_t c, int place, size_t se, size_t re) {
  int n = r->o->nranks;
  const float* send;
  float* recv;
  place_buffers(c, place, r->rank, r->sb, r->rb, se, re, &send, &recv);
  for (size_t i = 0; i < se; i++) r->host[i] = input_value(r->rank, i);
  if (place && c == COLL_ALLGATHER) {
    /* Only this rank's part of the output holds input; the rest must be overwritten. */
    for (size_t i = 0; i < re; i++) r->host[i] = -1.0f;
    for (size_t i = 0; i < se; i++) r->host[(size_t)r->rank * se + i] = input_value(r->rank, i);
    rank_upload(r, r->rb, r->host, re);
  } else {
    rank_upload(r, (float*)send, r->host, se);
    if (!place) {
      for (size_t i = 0; i < re; i++) r->host[i] = -1.0f;
      rank_upload(r, recv, r->host, re);
    }
  }
  PERF_NCCL(r->L, coll_names[c], run_coll(r->L, c, send, recv, se, re, r->comm, r->stream, n));
  rank_download(r, r->host, recv, re);
  if ((c == COLL_REDUCE) && r->rank != 0) return 0;
  long wrong = 0;
  for (size_t i = 0; i < re; i++)
    if (r->host[i] != expected_value(c, r->rank, n, i, se, re)) wrong++;
  return wrong;
}

/* A barrier through the library (a one-element allreduce), so repetitions start together. */
static void rank_barrier(rank_ctx_t* r) {
  PERF_NCCL(r->L, "ncclAllReduce (barrier)",
            r->L->AllReduce(r->sb, r->sb, 1, ncclFloat, ncclSum, r->comm, r->stream));
  rank_sync(r);
}

static double rank_time(rank_ctx_t* r, coll_t c, int place, size_t se, size_t re, int iters) {
  const float* send;
  float* recv;
  place_buffers(c, place, r->rank, r->sb, r->rb, se, re, &send, &recv);
  double t0 = now_us();
  for (int i = 0; i < iters; i++)
    PERF_NCCL(r->L, coll_names[c],
              run_coll(r->L, c, send, recv, se, re, r->comm, r->stream, r->o->nranks));
  rank_sync(r);
  return (now_us() - t0) / iters;
}

/* Iterations per repetition for size s: the first library calibrates (rank 0 decides from its
 * warm-up, the others wait for the answer), a second one reuses them. */
static int rank_iters(rank_ctx_t* r, coll_t c, int s, double warm_us) {
  if (r->o->iters > 0) return r->o->iters;
  if (atomic_load(&sh->iters_ready[c][s])) return sh->iters[c][s];
  if (r->rank == 0) {
    double per = warm_us > 0.1 ? warm_us : 0.1;
    double want = r->o->target_ms * 1000.0 / per;
    int iters = want < 1 ? 1 : want > PERF_ITERS_MAX ? PERF_ITERS_MAX : (int)want;
    sh->iters[c][s] = iters;
    atomic_store(&sh->iters_ready[c][s], 1);
    return iters;
  }
  double t0 = now_us();
  while (!atomic_load(&sh->iters_ready[c][s])) {
    if (atomic_load(&sh->failed) || now_us() - t0 > 600e6)
      die("rank %d: no iteration count", r->rank);
    usleep(50);
  }
  return sh->iters[c][s];
}

static void rank_measure(rank_ctx_t* r, coll_t c, int s) {
  const options_t* o = r->o;
  size_t se, re;
  coll_counts(c, sizes[s], o->nranks, &se, &re);
  for (int place = 0; place < 2; place++) {
    result_t* res = &sh->res[r->lib][c][s][place];
    if (place && c == COLL_ALLTOALL) continue; /* no in-place AlltoAll in NCCL */
    unsigned long seen = r->last ? r->last->count : 0;
    long wrong = o->check ? rank_check(r, c, place, se, re) : 0;
    if (!o->check) (void)rank_time(r, c, place, se, re, 1); /* one operation for the plugin */
    if (r->last && r->rank == 0) { /* "-": no collective event (an empty operation) */
      bool fresh = r->last->count != seen;
      snprintf(res->algo, sizeof(res->algo), "%s", fresh ? r->last->algo : "-");
      snprintf(res->proto, sizeof(res->proto), "%s", fresh ? r->last->proto : "-");
      res->nchannels = fresh ? r->last->nchannels : 0;
    }
    res->wrong[r->rank] = wrong;
    double warm = o->warmup > 0 ? rank_time(r, c, place, se, re, o->warmup) : 0;
    int iters = rank_iters(r, c, s, warm);
    for (int rep = 0; rep < o->reps; rep++) {
      rank_barrier(r);
      res->us[rep][r->rank] = rank_time(r, c, place, se, re, iters);
    }
    if (r->rank == 0) {
      res->done = true;
      atomic_fetch_add(&sh->progress, 1);
    }
    atomic_fetch_add(&res->ranks_done, 1);
  }
}

/* The profiler plugin's record: the plugin file next to this executable (build tree) or in
 * ../lib (installed), when NCCL_PROFILER_PLUGIN was left to us. */
static const char* perf_plugin_path(void) {
  static char path[PATH_MAX];
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return NULL;
  exe[n] = '\0';
  char* slash = strrchr(exe, '/');
  if (slash == NULL) return NULL;
  *slash = '\0';
  const char* const where[] = {"%s/" PERF_PROFILER_FILE, "%s/../lib/" PERF_PROFILER_FILE,
                               "%s/../lib64/" PERF_PROFILER_FILE};
  for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++) {
    snprintf(path, sizeof(path), where[i], exe);
    if (access(path, R_OK) == 0) return path;
  }
  return NULL;
}

static void rank_main(const options_t* o, int lib, int rank) {
  rank_ctx_t r = {.o = o, .lib = lib, .rank = rank};
  if (o->use_gpu) {
    PERF_CUDA(cudaSetDevice(rank));
    PERF_CUDA(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
  }
  const char* plugin = getenv("NCCL_PROFILER_PLUGIN") ? NULL : perf_plugin_path();
  if (plugin != NULL) {
    setenv("NCCL_PROFILER_PLUGIN", plugin, 1);
    void* h = dlopen(plugin, RTLD_NOW | RTLD_LOCAL);
    r.last = h ? dlsym(h, PERF_PROFILER_SYMBOL) : NULL;
  }
  nccl_lib_t L;
  char err[PATH_MAX + 256];
  if (nccl_lib_open(o->libs[lib], &L, err, sizeof(err)) != 0) die("%s", err);
  r.L = &L;
  if (rank == 0) {
    PERF_NCCL(&L, "ncclGetUniqueId", L.GetUniqueId(&sh->id));
    atomic_store(&sh->id_ready, lib + 1);
  } else {
    double t0 = now_us();
    while (atomic_load(&sh->id_ready) != lib + 1) {
      if (atomic_load(&sh->failed) || now_us() - t0 > 120e6) die("rank %d: no unique id", rank);
      usleep(100);
    }
  }
  double t0 = now_us();
  PERF_NCCL(&L, "ncclCommInitRank", L.CommInitRank(&r.comm, o->nranks, sh->id, rank));
  if (rank == 0) sh->init_ms[lib] = (now_us() - t0) / 1e3;
  r.max_elems = o->max_bytes / sizeof(float) + 64;
  size_t bytes = r.max_elems * sizeof(float);
  r.host = malloc(bytes);
  if (o->use_gpu) {
    PERF_CUDA(cudaMalloc((void**)&r.sb, bytes));
    PERF_CUDA(cudaMalloc((void**)&r.rb, bytes));
  } else {
    r.sb = malloc(bytes);
    r.rb = malloc(bytes);
  }
  if (r.host == NULL || r.sb == NULL || r.rb == NULL) die("out of memory for %zu bytes", bytes);
  for (int c = 0; c < COLL_COUNT; c++) {
    if (!o->colls[c]) continue;
    for (int s = 0; s < nsizes; s++) rank_measure(&r, (coll_t)c, s);
  }
  PERF_NCCL(&L, "ncclCommDestroy", L.CommDestroy(r.comm));
  exit(0);
}

/* ---- Running the ranks ------------------------------------------------------------------------
 */
static int total_measurements(const options_t* o) {
  int n = 0;
  for (int c = 0; c < COLL_COUNT; c++)
    if (o->colls[c]) n += nsizes * (c == COLL_ALLTOALL ? 1 : 2);
  return n;
}

static void print_header(const options_t* o, int lib);
static int print_rows(const options_t* o, int lib, int next, bool all);

/* Forks the ranks of library lib and waits, drawing the progress line and printing each row of
 * the table as soon as every rank has measured it (to a file or a pipe as well: nothing waits for
 * the end of the sweep). 0 on success. */
static int run_library(const options_t* o, int lib) {
  atomic_store(&sh->progress, 0);
  atomic_store(&sh->failed, 0);
  fflush(NULL);
  pid_t pids[PERF_MAX_RANKS];
  for (int r = 0; r < o->nranks; r++) {
    pids[r] = fork();
    if (pids[r] == 0) rank_main(o, lib, r);
    if (pids[r] < 0) die("fork: %s", strerror(errno));
  }
  int total = total_measurements(o), alive = o->nranks, failed = 0, next = 0;
  bool show = o->progress > 0 || (o->progress < 0 && isatty(STDERR_FILENO));
  double t0 = now_us(), shown = 0;
  print_header(o, lib);
  while (alive > 0) {
    int printed = print_rows(o, lib, next, false);
    if (printed != next && show && shown > 0) fprintf(stderr, "\r%80s\r", ""); /* under the row */
    next = printed;
    int status;
    pid_t p = waitpid(-1, &status, WNOHANG);
    if (p > 0) {
      alive--;
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        failed = 1;
        atomic_store(&sh->failed, 1);
      }
      continue;
    }
    if (failed) { /* a rank died: the others would wait for it forever */
      for (int r = 0; r < o->nranks; r++) kill(pids[r], SIGKILL);
    }
    double now = now_us();
    if (show && now - shown > 250e3 && now - t0 > 2e6) {
      int done = atomic_load(&sh->progress);
      double eta = done > 0 ? (now - t0) / 1e6 * (total - done) / done : -1;
      fprintf(stderr, "\r[%s] %d/%d measurements, %.0f s elapsed%s%.0f%s   ",
              lib == 0 ? "library" : "compare", done, total, (now - t0) / 1e6,
              eta >= 0 ? ", about " : "", eta >= 0 ? eta : 0, eta >= 0 ? " s left" : "");
      shown = now;
    }
    usleep(20000);
  }
  if (show && now_us() - t0 > 2e6) fprintf(stderr, "\r%80s\r", "");
  print_rows(o, lib, next, true);
  return failed;
}

/* Identifies a library in a short-lived child (the parent maps no NCCL). */
static void identify(const options_t* o, int lib) {
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) {
    nccl_lib_t L;
    char err[PATH_MAX + 256];
    if (nccl_lib_open(o->libs[lib], &L, err, sizeof(err)) != 0) {
      snprintf(sh->lib_desc[lib], sizeof(sh->lib_desc[lib]), "%s", err);
      _exit(1);
    }
    nccl_lib_describe(&L, sh->lib_desc[lib], sizeof(sh->lib_desc[lib]));
    snprintf(sh->lib_build[lib], sizeof(sh->lib_build[lib]), "%s", nccl_lib_build_options(&L));
    sh->lib_baton[lib] = L.baton;
    _exit(0);
  }
  int status = 0;
  if (p < 0 || waitpid(p, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    die("%s", sh->lib_desc[lib][0] ? sh->lib_desc[lib] : "cannot load the library");
}

/* ---- Results ----------------------------------------------------------------------------------
 */
static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

/* Median and minimum over repetitions of the time averaged over ranks. */
static void summarize(const options_t* o, const result_t* res, double* median, double* min,
                      long* wrong) {
  double per_rep[PERF_MAX_REPS];
  for (int rep = 0; rep < o->reps; rep++) {
    double sum = 0;
    for (int r = 0; r < o->nranks; r++) sum += res->us[rep][r];
    per_rep[rep] = sum / o->nranks;
  }
  qsort(per_rep, (size_t)o->reps, sizeof(double), cmp_double);
  *min = per_rep[0];
  *median =
      o->reps % 2 ? per_rep[o->reps / 2] : (per_rep[o->reps / 2 - 1] + per_rep[o->reps / 2]) / 2;
  *wrong = 0;
  for (int r = 0; r < o->nranks; r++) *wrong += res->wrong[r];
}

static double algbw_gbs(size_t bytes, double us) {
  return us > 0 ? (double)bytes / us / 1e3 : 0;
}

static long lib_wrong[PERF_MAX_LIBS]; /* wrong values in the rows printed so far */

static void print_header(const options_t* o, int lib) {
  printf("# library %c: %s\n", 'A' + lib, sh->lib_desc[lib]);
  if (sh->lib_build[lib][0]) printf("#   build: %s\n", sh->lib_build[lib]);
  printf("#%90s%51s\n", "out-of-place", "in-place");
  printf("# %-13s %12s %11s %9s %9s %11s %11s %6s %9s %9s %11s %11s %6s  %s\n", "collective",
         "size(B)", "count", "time(us)", "min(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong",
         "time(us)", "min(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "algo/proto/channels");
  fflush(stdout);
}

static void print_row(const options_t* o, int lib, int c, int s) {
  size_t se, re;
  coll_counts((coll_t)c, sizes[s], o->nranks, &se, &re);
  size_t bytes = (c == COLL_ALLGATHER ? re : se) * sizeof(float);
  printf("  %-13s %12zu %11zu", coll_names[c], bytes, call_count((coll_t)c, se, re, o->nranks));
  for (int place = 0; place < 2; place++) {
    const result_t* res = &sh->res[lib][c][s][place];
    if (!res->done || atomic_load(&res->ranks_done) < o->nranks) {
      printf(" %9s %9s %11s %11s %6s", "n/a", "", "", "", "");
      continue;
    }
    double med, min;
    long wrong;
    summarize(o, res, &med, &min, &wrong);
    double alg = algbw_gbs(bytes, med);
    printf(" %9.2f %9.2f %11.2f %11.2f %6ld", med, min, alg, alg * bus_factor((coll_t)c, o->nranks),
           wrong);
    lib_wrong[lib] += wrong;
  }
  const result_t* r0 = &sh->res[lib][c][s][0];
  printf("  %s/%s/%d\n", r0->algo[0] ? r0->algo : "?", r0->proto[0] ? r0->proto : "?",
         r0->nchannels);
  fflush(stdout);
}

/* Prints the rows from number next on that every rank has measured (all: every remaining row,
 * "n/a" where a measurement is missing, then the totals); returns the next row to print. */
static int print_rows(const options_t* o, int lib, int next, bool all) {
  int row = 0;
  for (int c = 0; c < COLL_COUNT; c++) {
    if (!o->colls[c]) continue;
    for (int s = 0; s < nsizes; s++, row++) {
      if (row < next) continue;
      bool ready = true;
      for (int place = 0; place < (c == COLL_ALLTOALL ? 1 : 2); place++)
        ready = ready && atomic_load(&sh->res[lib][c][s][place].ranks_done) >= o->nranks;
      if (!ready && !all) return row;
      print_row(o, lib, c, s);
    }
  }
  if (all) {
    printf("#   init %.1f ms (rank 0)\n", sh->init_ms[lib]);
    printf("# %ld wrong values in total\n", lib_wrong[lib]);
    fflush(stdout);
  }
  return row;
}

static void print_compare(const options_t* o) {
  printf("# ratio B/A (median out-of-place time; < 1: B is faster), and busbw of each\n");
  printf("# %-13s %12s %12s %12s %9s %14s %14s\n", "collective", "size(B)", "A time(us)",
         "B time(us)", "B/A", "A busbw(GB/s)", "B busbw(GB/s)");
  for (int c = 0; c < COLL_COUNT; c++) {
    if (!o->colls[c]) continue;
    for (int s = 0; s < nsizes; s++) {
      size_t se, re;
      coll_counts((coll_t)c, sizes[s], o->nranks, &se, &re);
      size_t bytes = (c == COLL_ALLGATHER ? re : se) * sizeof(float);
      double ma, mb, mina, minb;
      long wa, wb;
      summarize(o, &sh->res[0][c][s][0], &ma, &mina, &wa);
      summarize(o, &sh->res[1][c][s][0], &mb, &minb, &wb);
      double bf = bus_factor((coll_t)c, o->nranks);
      printf("  %-13s %12zu %12.2f %12.2f %9.3f %14.2f %14.2f\n", coll_names[c], bytes, ma, mb,
             ma > 0 ? mb / ma : 0, algbw_gbs(bytes, ma) * bf, algbw_gbs(bytes, mb) * bf);
    }
  }
}

static void json_string(FILE* f, const char* s) {
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"' || *s == '\\')
      fprintf(f, "\\%c", *s);
    else if ((unsigned char)*s < 0x20)
      fprintf(f, "\\u%04x", *s);
    else
      fputc(*s, f);
  }
  fputc('"', f);
}

/* Every measurement of the first nlibs libraries (those that ran). */
static void write_json(const options_t* o, int nlibs, const char* path) {
  FILE* f = fopen(path, "w");
  if (f == NULL) die("cannot write %s: %s", path, strerror(errno));
  fprintf(f, "{\n  \"nranks\": %d,\n  \"executor\": \"%s\",\n  \"reps\": %d,\n  \"libraries\": [",
          o->nranks, o->use_gpu ? "gpu" : "host", o->reps);
  for (int lib = 0; lib < nlibs; lib++) {
    fprintf(f, "%s\n    {\"spec\": ", lib ? "," : "");
    json_string(f, o->libs[lib]);
    fprintf(f, ", \"description\": ");
    json_string(f, sh->lib_desc[lib]);
    fprintf(f, ", \"baton\": %s, \"build\": ", sh->lib_baton[lib] ? "true" : "false");
    json_string(f, sh->lib_build[lib]);
    fprintf(f, ", \"init_ms\": %.3f, \"results\": [", sh->init_ms[lib]);
    bool first = true;
    for (int c = 0; c < COLL_COUNT; c++) {
      if (!o->colls[c]) continue;
      for (int s = 0; s < nsizes; s++) {
        size_t se, re;
        coll_counts((coll_t)c, sizes[s], o->nranks, &se, &re);
        size_t bytes = (c == COLL_ALLGATHER ? re : se) * sizeof(float);
        for (int place = 0; place < 2; place++) {
          const result_t* res = &sh->res[lib][c][s][place];
          if (!res->done) continue;
          double med, min;
          long wrong;
          summarize(o, res, &med, &min, &wrong);
          double alg = algbw_gbs(bytes, med);
          fprintf(f,
                  "%s\n      {\"collective\": \"%s\", \"bytes\": %zu, \"in_place\": %s, "
                  "\"iters\": %d, \"time_us\": %.3f, \"min_us\": %.3f, \"algbw_gbs\": %.4f, "
                  "\"busbw_gbs\": %.4f, \"wrong\": %ld, \"algo\": \"%s\", \"proto\": \"%s\", "
                  "\"nchannels\": %d}",
                  first ? "" : ",", coll_names[c], bytes, place ? "true" : "false",
                  sh->iters[c][s] ? sh->iters[c][s] : o->iters, med, min, alg,
                  alg * bus_factor((coll_t)c, o->nranks), wrong, sh->res[lib][c][s][0].algo,
                  sh->res[lib][c][s][0].proto, sh->res[lib][c][s][0].nchannels);
          first = false;
        }
      }
    }
    fprintf(f, "\n    ]}");
  }
  fprintf(f, "\n  ]\n}\n");
  fclose(f);
}

/* --plot: tools/perf/baton_plot.py next to this executable (or in ../share/baton). */
static int make_plot(const options_t* o, const char* json) {
  char exe[PATH_MAX], script[PATH_MAX + 64];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return 1;
  exe[n] = '\0';
  *strrchr(exe, '/') = '\0';
  const char* const where[] = {"%s/baton_plot.py", "%s/../share/baton/baton_plot.py"};
  bool found = false;
  for (size_t i = 0; i < 2 && !found; i++) {
    snprintf(script, sizeof(script), where[i], exe);
    found = access(script, R_OK) == 0;
  }
  if (!found) {
    fprintf(stderr, "baton-perf: --plot: baton_plot.py not found next to %s\n", exe);
    return 1;
  }
  fflush(NULL);
  pid_t p = fork();
  if (p == 0) {
    execlp("python3", "python3", script, json, o->plot, (char*)NULL);
    fprintf(stderr, "baton-perf: --plot needs python3 (with matplotlib): %s\n", strerror(errno));
    _exit(127);
  }
  int status = 0;
  if (p < 0 || waitpid(p, &status, 0) < 0) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* ---- Options ----------------------------------------------------------------------------------
 */
static void usage(FILE* f) {
  fprintf(f,
          "usage: baton-perf [options]\n"
          "Times NCCL collectives on this machine: one process per local GPU, or host-executor\n"
          "ranks when there is none. Sizes take K, M, G suffixes (powers of 1024); times are\n"
          "microseconds per operation, bandwidths GB/s (1e9 bytes per second).\n"
          "  -n, --ranks N        ranks (default: every GPU; without GPUs $BATON_PERF_RANKS or 4)\n"
          "  -b, --minbytes SIZE  smallest message (default 8)\n"
          "  -e, --maxbytes SIZE  largest message (default 64M on GPUs, 4M on the host executor)\n"
          "  -f, --stepfactor N   size multiplier between steps (default 2)\n"
          "  -c, --colls LIST     allreduce,allgather,reducescatter,broadcast,reduce,alltoall or\n"
          "                       all (default allreduce)\n"
          "  -w, --warmup N       warm-up iterations per size and place (default 5)\n"
          "  -i, --iters N        iterations per repetition (default 0: enough for --time)\n"
          "  -t, --time MS        target duration of one repetition when -i is 0 (default 20)\n"
          "  -r, --reps N         repetitions; the table shows their median and minimum\n"
          "                       (default 5, at most %d)\n"
          "  -C, --check 0|1      check every result before timing (default 1)\n"
          "  -L, --lib LIB        the library to time: a path, or a name the loader searches\n"
          "                       (default libnccl.so.2: Baton next to this tool, unless\n"
          "                       LD_LIBRARY_PATH or LD_PRELOAD gives another)\n"
          "      --compare LIB    also time LIB (e.g. stock's libnccl.so.2) and print B/A ratios\n"
          "      --json FILE      write every measurement as JSON\n"
          "      --plot FILE      draw busbw and time against size (.png or .svg; needs python3\n"
          "                       and matplotlib)\n"
          "      --progress 0|1   a progress line on stderr (default: when it is a terminal)\n"
          "      --version        which library (and --compare library) would run, and exit\n"
          "  -h, --help           this text\n",
          PERF_MAX_REPS);
}

static size_t parse_size(const char* s) {
  char* end;
  double v = strtod(s, &end);
  switch (*end) {
    case 'K':
    case 'k':
      v *= 1024;
      break;
    case 'M':
    case 'm':
      v *= 1024 * 1024;
      break;
    case 'G':
    case 'g':
      v *= 1024.0 * 1024 * 1024;
      break;
    case '\0':
      break;
    default:
      die("bad size '%s'", s);
  }
  return (size_t)v;
}

static int parse_int(const char* s, const char* what) {
  char* end;
  long v = strtol(s, &end, 10);
  if (*end != '\0' || v < 0 || v > INT_MAX) die("bad %s '%s'", what, s);
  return (int)v;
}

/* CUDA must not be initialised in a process that forks ranks afterwards, so a short-lived child
 * counts the GPUs and reports the number through its exit status. */
static int count_gpus(void) {
  pid_t pid = fork();
  if (pid == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    _exit(n > 100 ? 100 : n);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status)) return 0;
  return WEXITSTATUS(status);
}

int main(int argc, char** argv) {
  options_t o = {.min_bytes = 8,
                 .factor = 2,
                 .reps = 5,
                 .warmup = 5,
                 .target_ms = 20,
                 .check = true,
                 .libs = {"libnccl.so.2"},
                 .nlibs = 1,
                 .progress = -1};
  int gpus = count_gpus();
  o.use_gpu = gpus > 0;
  o.max_bytes = o.use_gpu ? (64u << 20) : (4u << 20);
  const char* colls = "allreduce";
  bool version = false;
  enum { OPT_COMPARE = 1000, OPT_JSON, OPT_PLOT, OPT_PROGRESS, OPT_VERSION };
  static const struct option longs[] = {{"ranks", required_argument, NULL, 'n'},
                                        {"minbytes", required_argument, NULL, 'b'},
                                        {"maxbytes", required_argument, NULL, 'e'},
                                        {"stepfactor", required_argument, NULL, 'f'},
                                        {"colls", required_argument, NULL, 'c'},
                                        {"warmup", required_argument, NULL, 'w'},
                                        {"iters", required_argument, NULL, 'i'},
                                        {"time", required_argument, NULL, 't'},
                                        {"reps", required_argument, NULL, 'r'},
                                        {"check", required_argument, NULL, 'C'},
                                        {"lib", required_argument, NULL, 'L'},
                                        {"compare", required_argument, NULL, OPT_COMPARE},
                                        {"json", required_argument, NULL, OPT_JSON},
                                        {"plot", required_argument, NULL, OPT_PLOT},
                                        {"progress", required_argument, NULL, OPT_PROGRESS},
                                        {"version", no_argument, NULL, OPT_VERSION},
                                        {"help", no_argument, NULL, 'h'},
                                        {NULL, 0, NULL, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "n:b:e:f:c:w:i:t:r:C:L:h", longs, NULL)) != -1) {
    switch (opt) {
      case 'n':
        o.nranks = parse_int(optarg, "rank count");
        break;
      case 'b':
        o.min_bytes = parse_size(optarg);
        break;
      case 'e':
        o.max_bytes = parse_size(optarg);
        break;
      case 'f':
        o.factor = parse_int(optarg, "step factor");
        break;
      case 'c':
        colls = optarg;
        break;
      case 'w':
        o.warmup = parse_int(optarg, "warm-up count");
        break;
      case 'i':
        o.iters = parse_int(optarg, "iteration count");
        break;
      case 't':
        o.target_ms = atof(optarg);
        break;
      case 'r':
        o.reps = parse_int(optarg, "repetition count");
        break;
      case 'C':
        o.check = parse_int(optarg, "check flag") != 0;
        break;
      case 'L':
        o.libs[0] = optarg;
        break;
      case OPT_COMPARE:
        o.libs[1] = optarg;
        o.nlibs = 2;
        break;
      case OPT_JSON:
        o.json = optarg;
        break;
      case OPT_PLOT:
        o.plot = optarg;
        break;
      case OPT_PROGRESS:
        o.progress = parse_int(optarg, "progress flag");
        break;
      case OPT_VERSION:
        version = true;
        break;
      case 'h':
        usage(stdout);
        return 0;
      default:
        usage(stderr);
        return 2;
    }
  }
  if (optind < argc) die("unexpected argument '%s' (see --help)", argv[optind]);
  if (o.nranks <= 0) {
    const char* env = getenv("BATON_PERF_RANKS");
    o.nranks = o.use_gpu ? gpus : (env ? atoi(env) : 4);
  }
  if (o.use_gpu && o.nranks > gpus) die("%d ranks requested but only %d GPUs", o.nranks, gpus);
  if (o.nranks < 1 || o.nranks > PERF_MAX_RANKS) die("ranks must be 1..%d", PERF_MAX_RANKS);
  if (o.factor < 2) die("--stepfactor must be at least 2");
  if (o.min_bytes > o.max_bytes) die("--minbytes is larger than --maxbytes");
  if (o.reps < 1 || o.reps > PERF_MAX_REPS) die("--reps must be 1..%d", PERF_MAX_REPS);
  if (o.iters == 0 && !(o.target_ms > 0)) die("--time must be positive");
  if (o.plot) {
    const char* dot = strrchr(o.plot, '.');
    if (!dot || (strcmp(dot, ".png") && strcmp(dot, ".svg")))
      die("--plot takes a .png or .svg file name");
  }
  char* list = strdup(colls);
  for (char* tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
    bool found = false;
    for (int c = 0; c < COLL_COUNT; c++)
      if (strcmp(tok, "all") == 0 || strcmp(tok, coll_names[c]) == 0) o.colls[c] = found = true;
    if (!found) die("unknown collective '%s' (see --help)", tok);
  }
  free(list);
  for (size_t b = o.min_bytes; b <= o.max_bytes && nsizes < PERF_MAX_SIZES; b *= (size_t)o.factor) {
    sizes[nsizes++] = b;
    if (b == 0) break;
  }

  sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (sh == MAP_FAILED) die("mmap: %s", strerror(errno));
  for (int lib = 0; lib < o.nlibs; lib++) identify(&o, lib);
  if (version) {
    printf("baton-perf %s\n", BATON_VERSION_STRING);
    for (int lib = 0; lib < o.nlibs; lib++) {
      printf("library %c: %s\n", 'A' + lib, sh->lib_desc[lib]);
      if (sh->lib_build[lib][0]) printf("  build: %s\n", sh->lib_build[lib]);
    }
    return 0;
  }
  printf(
      "# baton-perf %s: %d ranks on %s, float32, sum; %d repetitions of %s iterations after %d "
      "warm-up; results %s\n",
      BATON_VERSION_STRING, o.nranks, o.use_gpu ? "GPUs" : "the host executor", o.reps,
      o.iters ? "fixed" : "calibrated", o.warmup, o.check ? "checked" : "not checked");
  printf(
      "# time: median over repetitions of the per-iteration time averaged over ranks; min: "
      "the fastest repetition\n");
  if (!o.use_gpu)
    printf(
        "# the host executor runs the operations on CPU threads: these numbers test the code "
        "path and say nothing about the speed on GPUs\n");
  fflush(stdout);
  /* Stock NCCL has no host executor (its init fails without a GPU): said before the sweep, and
   * the libraries before it still run. */
  int runnable = o.nlibs;
  for (int lib = 0; lib < o.nlibs && runnable == o.nlibs; lib++) {
    if (o.use_gpu || sh->lib_baton[lib]) continue;
    fprintf(stderr,
            "baton-perf: library %c (%s) is not Baton and there is no GPU: stock NCCL runs only on "
            "GPUs, so a comparison with it needs a GPU; library %c is not run\n",
            'A' + lib, o.libs[lib], 'A' + lib);
    runnable = lib;
  }
  int failed = runnable < o.nlibs, ran = 0; /* ran: libraries whose sweep completed */
  for (int lib = 0; lib < runnable; lib++) {
    if (run_library(&o, lib) != 0) {
      fprintf(stderr, "baton-perf: a rank of library %c (%s) failed\n", 'A' + lib, o.libs[lib]);
      failed = 1;
      break;
    }
    ran++;
  }
  long wrong = 0;
  for (int lib = 0; lib < ran; lib++) wrong += lib_wrong[lib];
  if (ran == 2) print_compare(&o);
  if (failed && ran > 0 && (o.json || o.plot))
    fprintf(stderr, "baton-perf: writing what was measured (library A%s)\n", ran > 1 ? ", B" : "");
  char tmp_json[64] = "";
  const char* json = o.json;
  if (ran > 0 && o.plot && json == NULL) {
    snprintf(tmp_json, sizeof(tmp_json), "/tmp/baton-perf-%d.json", (int)getpid());
    json = tmp_json;
  }
  if (ran > 0 && json) write_json(&o, ran, json);
  int plot_rc = 0;
  if (ran > 0 && o.plot) {
    plot_rc = make_plot(&o, json);
    if (plot_rc == 0) printf("# plot written to %s\n", o.plot);
  }
  if (tmp_json[0]) unlink(tmp_json);
  if (failed) return 2;
  if (plot_rc != 0) return 3;
  return wrong ? 1 : 0;
}
