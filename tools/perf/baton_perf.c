/* baton-perf: the perf/demo tool. Starts one process per rank on this machine (one per local GPU,
 * or BATON_PERF_RANKS host-executor ranks when there is no GPU), runs a size sweep of the chosen
 * collectives, checks every result, and prints a table like nccl-tests (time, algbw, busbw,
 * #wrong). Uses only the public NCCL API, so it runs the same against stock NCCL. */
#include <cuda_runtime.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

typedef enum {
  COLL_ALLREDUCE,
  COLL_ALLGATHER,
  COLL_REDUCESCATTER,
  COLL_BROADCAST,
  COLL_REDUCE,
  COLL_ALLTOALL,
  COLL_COUNT
} coll_t;
static const char* coll_names[COLL_COUNT] = {"allreduce", "allgather", "reducescatter",
                                             "broadcast", "reduce",    "alltoall"};

typedef struct options {
  int nranks;
  size_t min_bytes, max_bytes;
  int factor;
  int iters, warmup;
  int colls[COLL_COUNT];
  int use_gpu;
} options_t;

#define PERF_CHECK(call)                                                                 \
  do {                                                                                   \
    ncclResult_t r_ = (call);                                                            \
    if (r_ != ncclSuccess) {                                                             \
      fprintf(stderr, "baton-perf: %s failed: %s (%s)\n", #call, ncclGetErrorString(r_), \
              ncclGetLastError(NULL));                                                   \
      exit(2);                                                                           \
    }                                                                                    \
  } while (0)
#define PERF_CUDA(call)                                                              \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "baton-perf: %s failed: %s\n", #call, cudaGetErrorString(e_)); \
      exit(2);                                                                       \
    }                                                                                \
  } while (0)

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

/* Elements each rank sends and receives for a collective of `bytes` (nccl-tests' convention:
 * bytes is the larger of the send and receive buffer). */
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

static ncclResult_t run_coll(coll_t c, const float* sb, float* rb, size_t send_elems,
                             size_t recv_elems, ncclComm_t comm, cudaStream_t s, int n) {
  switch (c) {
    case COLL_ALLREDUCE:
      return ncclAllReduce(sb, rb, send_elems, ncclFloat, ncclSum, comm, s);
    case COLL_ALLGATHER:
      return ncclAllGather(sb, rb, send_elems, ncclFloat, comm, s);
    case COLL_REDUCESCATTER:
      return ncclReduceScatter(sb, rb, recv_elems, ncclFloat, ncclSum, comm, s);
    case COLL_BROADCAST:
      return ncclBroadcast(sb, rb, send_elems, ncclFloat, 0, comm, s);
    case COLL_REDUCE:
      return ncclReduce(sb, rb, send_elems, ncclFloat, ncclSum, 0, comm, s);
    case COLL_ALLTOALL:
      return ncclAlltoAll(sb, rb, send_elems / n, ncclFloat, comm, s);
    default:
      return ncclInvalidArgument;
  }
}

/* Inputs are small integers, so float sums are exact and the check can be exact. */
static float input_value(int rank, size_t i) {
  return (float)((rank + 1) * 3 + (int)(i % 7));
}

static float expected_value(coll_t c, int rank, int n, size_t i, size_t send_elems,
                            size_t recv_elems) {
  float sum = 0;
  switch (c) {
    case COLL_ALLREDUCE:
    case COLL_REDUCE:
      for (int r = 0; r < n; r++) sum += input_value(r, i);
      return sum;
    case COLL_REDUCESCATTER:
      for (int r = 0; r < n; r++) sum += input_value(r, rank * recv_elems + i);
      return sum;
    case COLL_ALLGATHER:
      return input_value((int)(i / send_elems), i % send_elems);
    case COLL_BROADCAST:
      return input_value(0, i);
    case COLL_ALLTOALL: {
      size_t per = send_elems / n;
      int src = (int)(i / per);
      return input_value(src, rank * per + i % per);
    }
    default:
      return 0;
  }
}

static long check_result(coll_t c, const float* host, int rank, int n, size_t send_elems,
                         size_t recv_elems) {
  long wrong = 0;
  if (c == COLL_REDUCE && rank != 0) return 0;
  for (size_t i = 0; i < recv_elems; i++)
    if (host[i] != expected_value(c, rank, n, i, send_elems, recv_elems)) wrong++;
  return wrong;
}

static void rank_main(const options_t* o, int rank, ncclUniqueId id, int out_fd) {
  cudaStream_t stream = NULL;
  if (o->use_gpu) {
    PERF_CUDA(cudaSetDevice(rank));
    PERF_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  }
  ncclComm_t comm;
  double t0 = now_us();
  PERF_CHECK(ncclCommInitRank(&comm, o->nranks, id, rank));
  double init_us = now_us() - t0;
  size_t max_elems = o->max_bytes / sizeof(float) + 64;
  float *sb, *rb, *host = malloc(max_elems * sizeof(float));
  if (o->use_gpu) {
    PERF_CUDA(cudaMalloc((void**)&sb, max_elems * sizeof(float)));
    PERF_CUDA(cudaMalloc((void**)&rb, max_elems * sizeof(float)));
  } else {
    sb = malloc(max_elems * sizeof(float));
    rb = malloc(max_elems * sizeof(float));
  }
  FILE* out = fdopen(out_fd, "w");
  if (rank == 0) {
    fprintf(out, "# baton-perf: %d ranks on %s, float32, %d iterations, init %.1f ms\n", o->nranks,
            o->use_gpu ? "GPUs" : "the host executor", o->iters, init_us / 1e3);
    fprintf(out, "%-14s %12s %12s %10s %10s %10s %7s\n", "collective", "bytes", "count", "time(us)",
            "algbw", "busbw", "#wrong");
  }
  long total_wrong = 0;
  for (int c = 0; c < COLL_COUNT; c++) {
    if (!o->colls[c]) continue;
    for (size_t bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= o->factor) {
      size_t se, re;
      coll_counts((coll_t)c, bytes, o->nranks, &se, &re);
      for (size_t i = 0; i < se; i++) host[i] = input_value(rank, i);
      if (o->use_gpu) {
        /* Stream-ordered: a plain cudaMemset may still run when the collective does. */
        PERF_CUDA(cudaMemcpyAsync(sb, host, se * sizeof(float), cudaMemcpyHostToDevice, stream));
        PERF_CUDA(cudaMemsetAsync(rb, 0xff, re * sizeof(float), stream));
      } else {
        memcpy(sb, host, se * sizeof(float));
        memset(rb, 0xff, re * sizeof(float));
      }
      PERF_CHECK(run_coll((coll_t)c, sb, rb, se, re, comm, stream, o->nranks));
      if (o->use_gpu) {
        PERF_CUDA(cudaMemcpyAsync(host, rb, re * sizeof(float), cudaMemcpyDeviceToHost, stream));
        PERF_CUDA(cudaStreamSynchronize(stream));
      } else {
        memcpy(host, rb, re * sizeof(float));
      }
      long wrong = check_result((coll_t)c, host, rank, o->nranks, se, re);
      for (int w = 0; w < o->warmup; w++)
        PERF_CHECK(run_coll((coll_t)c, sb, rb, se, re, comm, stream, o->nranks));
      if (o->use_gpu) PERF_CUDA(cudaStreamSynchronize(stream));
      double start = now_us();
      for (int it = 0; it < o->iters; it++)
        PERF_CHECK(run_coll((coll_t)c, sb, rb, se, re, comm, stream, o->nranks));
      if (o->use_gpu) PERF_CUDA(cudaStreamSynchronize(stream));
      double us = (now_us() - start) / o->iters;
      /* Everyone's wrong count reaches rank 0 through an allreduce of the counts. */
      float wrong_f = (float)wrong;
      float* wbuf = o->use_gpu ? rb : &wrong_f;
      if (o->use_gpu) {
        PERF_CUDA(cudaStreamSynchronize(stream));
        PERF_CUDA(cudaMemcpyAsync(rb, &wrong_f, sizeof(float), cudaMemcpyHostToDevice, stream));
      }
      PERF_CHECK(ncclAllReduce(wbuf, wbuf, 1, ncclFloat, ncclSum, comm, stream));
      if (o->use_gpu) {
        PERF_CUDA(cudaMemcpyAsync(&wrong_f, rb, sizeof(float), cudaMemcpyDeviceToHost, stream));
        PERF_CUDA(cudaStreamSynchronize(stream));
      }
      total_wrong += (long)wrong_f;
      if (rank == 0) {
        size_t elems = (c == COLL_ALLGATHER) ? re : se;
        double algbw = (double)elems * sizeof(float) / us / 1e3;
        fprintf(out, "%-14s %12zu %12zu %10.2f %10.2f %10.2f %7ld\n", coll_names[c],
                elems * sizeof(float), elems, us, algbw, algbw * bus_factor((coll_t)c, o->nranks),
                (long)wrong_f);
        fflush(out);
      }
      if (bytes == 0) break;
    }
  }
  t0 = now_us();
  PERF_CHECK(ncclCommDestroy(comm));
  if (rank == 0) {
    fprintf(out, "# destroy %.1f ms; %ld wrong values in total\n", (now_us() - t0) / 1e3,
            total_wrong);
  }
  fclose(out);
  exit(total_wrong ? 1 : 0);
}

static void usage(void) {
  fprintf(stderr,
          "usage: baton-perf [-n ranks] [-b min_bytes] [-e max_bytes] [-f factor] [-i iters]\n"
          "                  [-w warmup] [-c allreduce,allgather,reducescatter,broadcast,reduce,"
          "alltoall|all]\n");
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
  }
  return (size_t)v;
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
  options_t o = {
      .nranks = 0, .min_bytes = 8, .max_bytes = 64 << 20, .factor = 8, .iters = 20, .warmup = 5};
  int gpus = count_gpus();
  o.use_gpu = gpus > 0;
  const char* colls = "allreduce";
  int opt;
  while ((opt = getopt(argc, argv, "n:b:e:f:i:w:c:h")) != -1) {
    switch (opt) {
      case 'n':
        o.nranks = atoi(optarg);
        break;
      case 'b':
        o.min_bytes = parse_size(optarg);
        break;
      case 'e':
        o.max_bytes = parse_size(optarg);
        break;
      case 'f':
        o.factor = atoi(optarg);
        break;
      case 'i':
        o.iters = atoi(optarg);
        break;
      case 'w':
        o.warmup = atoi(optarg);
        break;
      case 'c':
        colls = optarg;
        break;
      default:
        usage();
        return opt == 'h' ? 0 : 2;
    }
  }
  if (o.nranks <= 0) {
    const char* env = getenv("BATON_PERF_RANKS");
    o.nranks = o.use_gpu ? gpus : (env ? atoi(env) : 4);
  }
  if (o.use_gpu && o.nranks > gpus) {
    fprintf(stderr, "baton-perf: %d ranks requested but only %d GPUs\n", o.nranks, gpus);
    return 2;
  }
  if (o.factor < 2 || o.nranks < 1 || o.min_bytes > o.max_bytes) {
    usage();
    return 2;
  }
  char* list = strdup(colls);
  for (char* tok = strtok(list, ","); tok != NULL; tok = strtok(NULL, ",")) {
    int found = 0;
    for (int c = 0; c < COLL_COUNT; c++) {
      if (strcmp(tok, "all") == 0 || strcmp(tok, coll_names[c]) == 0) o.colls[c] = found = 1;
    }
    if (!found) {
      fprintf(stderr, "baton-perf: unknown collective '%s'\n", tok);
      usage();
      return 2;
    }
  }
  free(list);
  fflush(stdout);
  ncclUniqueId id;
  PERF_CHECK(ncclGetUniqueId(&id));
  int fds[2];
  if (pipe(fds) != 0) return 2;
  for (int r = 0; r < o.nranks; r++) {
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      rank_main(&o, r, id, r == 0 ? fds[1] : open("/dev/null", 1));
    }
  }
  close(fds[1]);
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof(buf))) > 0) fwrite(buf, 1, (size_t)n, stdout);
  int failed = 0;
  for (int r = 0; r < o.nranks; r++) {
    int status;
    if (wait(&status) < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
  }
  if (failed) fprintf(stderr, "baton-perf: a rank failed\n");
  return failed;
}
