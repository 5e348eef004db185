/* GPU test of NCCL 2.29's ncclCommSuspend / ncclCommResume / ncclCommMemStats and of the one-sided
 * operations ncclPutSignal / ncclSignal / ncclWaitSignal, through the public API
 * (tests/gpu/run.sh's unit stage). Ranks are threads of this process, each making its communicator
 * with ncclCommInitRankConfig (numRmaCtx = numRmaSig = 2), in these groups:
 *   - 2 ranks sharing GPU 0 (NCCL_MULTI_RANK_GPU_ENABLE=1, set here);
 *   - 2 ranks on GPUs 0 and 1, and one rank per GPU when there are more (up to 8): SKIP when the
 *     machine has fewer GPUs.
 * Each group, every rank:
 *   (a) runs AllReduce (7, 65537 and 1M+5 floats, checked) so that its connections exist; reads
 *       MemStats (suspendable bytes > 0, not suspended, total = suspendable + persistent); all
 *       ranks suspend with NCCL_SUSPEND_MEM; cudaMemGetInfo's free memory of each GPU must grow by
 *       the sum of its ranks' suspendable bytes (10% + 4 MiB a rank of slack: allocation
 *       granularity); MemStats says suspended and still names the released bytes; an AllReduce,
 *       a second suspend and a PutSignal are refused with ncclInvalidUsage naming the suspension;
 *       resume; free memory shrinks again by as much; MemStats as before; AllReduce checked; a
 *       suspend with flags 0 does nothing; a second cycle, then AllReduce checked again.
 *   (b) registers an ncclMemAlloc window (ncclCommWindowRegister). Rank 0 puts four pieces (1 B,
 *       4093 B, 1 MiB + 3 B, 1001 floats) into rank 1's window with ncclPutSignal; rank 1 waits
 *       for the four signals with one ncclWaitSignal, then copies its window out on the same
 *       stream: every put byte must be there, every other byte keeps the fill, and no other
 *       window changed. Rank 0's stream first runs a host function that sleeps, then the copy
 *       that fills the source: a put that did not wait for its stream's earlier work sends stale
 *       zeros. Then every rank puts into every rank's window (itself included) on a context and
 *       signal index that depend on the pair, and waits for all of them with one call.
 *   (c) ncclSignal alone: rank 1 waits while rank 0 sleeps, then signals; rank 1's wait (with its
 *       stream synchronized) must end after rank 0's signal went out (one clock for all threads).
 *       Then every rank signals every other and waits for all (a barrier).
 *   (d) suspend and resume with the window registered; the every-rank puts again, checked.
 * Then the whole run repeats in a second pass (the test re-executes itself) under
 * NCCL_P2P_DISABLE=1: the connections go through host memory (SHM), so the GPU free-memory check
 * is skipped, and the windows cannot be shared (the planner's direct path needs P2P), so each
 * put's data travels in its signal's message instead of straight into the peer's window.
 *
 * Every wait is bounded: a watchdog fails the test (naming each rank's step) when no rank has
 * moved for STEP_TIMEOUT_S seconds. Without a GPU the test prints SKIP and exits 0.
 * The last line reads like a Check summary ("100%: Checks: N, Failures: 0, Errors: 0"). */
#define _GNU_SOURCE
#include <cuda_runtime.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

#define MAXR 8
#define STEP_TIMEOUT_S 60
#define WIN_BYTES (4u << 20)
#define FILL 0xa5
#define BIG_COUNT ((1u << 20) + 5)
#define LATE_MS 300
#define NRMA 2 /* numRmaCtx and numRmaSig of every communicator */
#define MIB (1024.0 * 1024.0)

/* ---- Results, output and the watchdog -------------------------------------------------------- */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_checks, g_fail, g_prior_checks, g_prior_fail;
static atomic_llong g_deadline_ms;
static const char* volatile g_step[MAXR];
static atomic_int g_at_barrier[MAXR]; /* 1: the rank waits for the others after its step */
static const char* g_group = "setup";

static long long now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void summary_locked(int extra_errors) {
  int checks = g_checks + g_prior_checks, fails = g_fail + g_prior_fail;
  int total = checks + extra_errors;
  printf("%d%%: Checks: %d, Failures: %d, Errors: %d\n",
         total ? 100 * (total - fails - extra_errors) / total : 0, total, fails, extra_errors);
  fflush(stdout);
}

static void expect(bool ok, const char* fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof(what), fmt, ap);
  va_end(ap);
  pthread_mutex_lock(&g_lock);
  g_checks++;
  if (!ok) {
    g_fail++;
    printf("FAIL [%s] %s\n", g_group, what);
    fflush(stdout);
  }
  pthread_mutex_unlock(&g_lock);
}

/* An error the test cannot go on after (a CUDA call failed, a call that must succeed did not). */
static void fatal(const char* fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&g_lock);
  printf("ERROR [%s] ", g_group);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  summary_locked(1);
  _exit(2);
}

#define CK(call)                                                                 \
  do {                                                                           \
    cudaError_t e_ = (call);                                                     \
    if (e_ != cudaSuccess)                                                       \
      fatal("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
  } while (0)
#define NK(x, call)                                                              \
  do {                                                                           \
    ncclResult_t r_ = (call);                                                    \
    if (r_ != ncclSuccess)                                                       \
      fatal("rank %d: %s:%d: %s: %s (%s)", (x)->rank, __FILE__, __LINE__, #call, \
            ncclGetErrorString(r_), ncclGetLastError((x)->comm));                \
  } while (0)

/* This rank is at step what; every step gives all ranks STEP_TIMEOUT_S more. */
static void step(int rank, const char* what) {
  g_step[rank] = what;
  atomic_store(&g_deadline_ms, now_ms() + STEP_TIMEOUT_S * 1000LL);
}

static void* watchdog_main(void* arg) {
  (void)arg;
  for (;;) {
    usleep(200 * 1000);
    long long d = atomic_load(&g_deadline_ms);
    if (d == 0 || now_ms() < d) continue;
    pthread_mutex_lock(&g_lock);
    printf("FAIL [%s] no rank moved for %d s (a hang); each rank's last step:\n", g_group,
           STEP_TIMEOUT_S);
    for (int r = 0; r < MAXR; r++)
      if (g_step[r] != NULL)
        printf("  rank %d: %s%s\n", r, g_step[r],
               atomic_load(&g_at_barrier[r]) ? " (done; waiting for the other ranks)" : "");
    g_fail++;
    summary_locked(0);
    _exit(1);
  }
  return NULL;
}

/* ---- A group of ranks ------------------------------------------------------------------------ */
typedef struct group {
  int n;
  int devs[MAXR];
  bool gpu_conns; /* connections in GPU memory: MemStats comparable with cudaMemGetInfo */
  ncclUniqueId id;
  pthread_barrier_t bar;
  uint64_t suspendable[MAXR]; /* each rank's MemStats before the suspend */
  atomic_llong signal_sent_ms;
  atomic_llong sent_ms[MAXR]; /* signal_barrier: when each rank's signals went out */
} group_t;

typedef struct rank_ctx {
  group_t* g;
  int rank, dev;
  ncclComm_t comm;
  cudaStream_t st;
  float *send, *recv, *host_f;
  unsigned char *win, *src, *host_in, *host_out;
  ncclWindow_t w;
  int round;
} rank_ctx_t;

static void barrier(rank_ctx_t* x) {
  atomic_store(&g_at_barrier[x->rank], 1);
  pthread_barrier_wait(&x->g->bar);
  atomic_store(&g_at_barrier[x->rank], 0);
}

static size_t free_on(int dev) {
  int cur = 0;
  size_t fr = 0, total = 0;
  CK(cudaGetDevice(&cur));
  CK(cudaSetDevice(dev));
  CK(cudaDeviceSynchronize());
  CK(cudaMemGetInfo(&fr, &total));
  CK(cudaSetDevice(cur));
  return fr;
}

/* Rank 0 samples every device of the group (all ranks wait at both barriers). */
static void measure(rank_ctx_t* x, size_t* out) {
  barrier(x);
  if (x->rank == 0)
    for (int r = 0; r < x->g->n; r++) out[r] = free_on(x->g->devs[r]);
  barrier(x);
}

/* Rank 0: each device's change of free memory against its ranks' MemStats. grow: the free memory
 * should have grown (suspend), else shrunk (resume). */
static void compare_free(rank_ctx_t* x, const size_t* before, const size_t* after, bool grow) {
  const group_t* g = x->g;
  if (x->rank != 0) return;
  for (int r = 0; r < g->n; r++) {
    bool first = true; /* each device once: its first rank */
    for (int q = 0; q < r; q++) first &= g->devs[q] != g->devs[r];
    if (!first) continue;
    uint64_t want = 0;
    int on = 0;
    for (int q = 0; q < g->n; q++)
      if (g->devs[q] == g->devs[r]) {
        want += g->suspendable[q];
        on++;
      }
    double change =
        grow ? (double)after[r] - (double)before[r] : (double)before[r] - (double)after[r];
    double slack = (double)want / 10 + 4 * MIB * on;
    bool ok = change >= (double)want - slack && change <= (double)want + slack;
    expect(ok,
           "GPU %d: free memory %s by %.2f MiB across the %s; its %d rank(s)' MemStats say "
           "%.2f MiB (allowed +-%.2f MiB)",
           g->devs[r], grow ? "grew" : "shrank", change / MIB, grow ? "suspend" : "resume", on,
           (double)want / MIB, slack / MIB);
  }
}

/* ---- Reference values ------------------------------------------------------------------------ */
static float ar_input(int rank, size_t i, int salt) {
  return (float)((i * 7 + (size_t)rank * 13 + (size_t)salt * 5) % 101);
}

/* The byte rank `from` puts at offset i of rank `to`'s window in round `round`. */
static unsigned char put_byte(int from, int to, int round, size_t i) {
  uint32_t h = (uint32_t)i * 2654435761u ^
               ((uint32_t)from * 40503u + (uint32_t)to * 977u + (uint32_t)round * 7919u);
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  unsigned char b = (unsigned char)h;
  return b == FILL ? (unsigned char)(FILL + 1) : b; /* never the fill: a missing byte shows */
}

/* ---- (a) Suspend and resume ------------------------------------------------------------------ */
static void allreduce_check(rank_ctx_t* x, size_t count, int salt, const char* when) {
  const int n = x->g->n;
  step(x->rank, "AllReduce");
  for (size_t i = 0; i < count; i++) x->host_f[i] = ar_input(x->rank, i, salt);
  CK(cudaMemcpyAsync(x->send, x->host_f, count * sizeof(float), cudaMemcpyHostToDevice, x->st));
  CK(cudaMemsetAsync(x->recv, 0xff, count * sizeof(float), x->st));
  NK(x, ncclAllReduce(x->send, x->recv, count, ncclFloat32, ncclSum, x->comm, x->st));
  CK(cudaMemcpyAsync(x->host_f, x->recv, count * sizeof(float), cudaMemcpyDeviceToHost, x->st));
  step(x->rank, "AllReduce: cudaStreamSynchronize");
  CK(cudaStreamSynchronize(x->st));
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < count; i++) {
    float want = 0;
    for (int p = 0; p < n; p++) want += ar_input(p, i, salt);
    if (x->host_f[i] != want && bad++ == 0) first = i;
  }
  expect(bad == 0, "rank %d: AllReduce of %zu floats %s: %zu wrong (first at %zu)", x->rank, count,
         when, bad, first);
}

static uint64_t stat_of(rank_ctx_t* x, ncclCommMemStat_t s) {
  uint64_t v = UINT64_MAX;
  NK(x, ncclCommMemStats(x->comm, s, &v));
  return v;
}

static void expect_refused(rank_ctx_t* x, ncclResult_t res, const char* what, const char* word) {
  const char* last = ncclGetLastError(x->comm);
  expect(res == ncclInvalidUsage && last != NULL && strstr(last, word) != NULL,
         "rank %d: %s: returned %s, last error \"%s\"; want ncclInvalidUsage naming \"%s\"",
         x->rank, what, ncclGetErrorString(res), last ? last : "(null)", word);
}

/* Every rank suspends (or resumes); then rank 0 measures each GPU's free memory into after and
 * compares the change since before with the ranks' MemStats. */
static void suspend_or_resume(rank_ctx_t* x, bool suspend, int cycle, const size_t* before,
                              size_t* after) {
  const char* api = suspend ? "ncclCommSuspend" : "ncclCommResume";
  step(x->rank, api);
  ncclResult_t res = suspend ? ncclCommSuspend(x->comm, NCCL_SUSPEND_MEM) : ncclCommResume(x->comm);
  expect(res == ncclSuccess, "rank %d cycle %d: %s: %s (%s)", x->rank, cycle, api,
         ncclGetErrorString(res), ncclGetLastError(x->comm));
  if (res != ncclSuccess) fatal("rank %d: %s failed; the test cannot go on", x->rank, api);
  measure(x, after);
  if (x->g->gpu_conns) compare_free(x, before, after, suspend);
}

/* One suspend/resume cycle of every rank with the checks around it (file comment, (a)). */
static void suspend_cycle(rank_ctx_t* x, int cycle) {
  group_t* g = x->g;
  size_t before[MAXR], suspended[MAXR], resumed[MAXR];
  step(x->rank, "MemStats before suspend");
  uint64_t s0 = stat_of(x, ncclStatGpuMemSuspend), p0 = stat_of(x, ncclStatGpuMemPersist);
  uint64_t t0 = stat_of(x, ncclStatGpuMemTotal), z0 = stat_of(x, ncclStatGpuMemSuspended);
  expect(s0 > 0 && z0 == 0 && t0 == s0 + p0,
         "rank %d cycle %d before suspend: MemStats suspendable %llu (want > 0 after "
         "collectives), persistent %llu, total %llu (want their sum), suspended %llu (want 0)",
         x->rank, cycle, (unsigned long long)s0, (unsigned long long)p0, (unsigned long long)t0,
         (unsigned long long)z0);
  g->suspendable[x->rank] = s0;
  measure(x, before);
  suspend_or_resume(x, true, cycle, before, suspended);

  step(x->rank, "MemStats while suspended");
  uint64_t s1 = stat_of(x, ncclStatGpuMemSuspend), z1 = stat_of(x, ncclStatGpuMemSuspended);
  uint64_t p1 = stat_of(x, ncclStatGpuMemPersist);
  expect(s1 == s0 && z1 == 1 && p1 == p0,
         "rank %d cycle %d while suspended: MemStats suspendable %llu (want the %llu released), "
         "suspended %llu (want 1), persistent %llu (want %llu)",
         x->rank, cycle, (unsigned long long)s1, (unsigned long long)s0, (unsigned long long)z1,
         (unsigned long long)p1, (unsigned long long)p0);
  step(x->rank, "calls on a suspended communicator");
  expect_refused(x, ncclAllReduce(x->send, x->recv, 7, ncclFloat32, ncclSum, x->comm, x->st),
                 "ncclAllReduce while suspended", "suspend");
  expect_refused(x, ncclCommSuspend(x->comm, NCCL_SUSPEND_MEM), "a second ncclCommSuspend",
                 "suspend");
  if (x->w != NULL && g->n > 1)
    expect_refused(
        x,
        ncclPutSignal(x->src, 4, ncclInt8, (x->rank + 1) % g->n, x->w, 0, 0, 0, 0, x->comm, x->st),
        "ncclPutSignal while suspended", "suspend");
  barrier(x); /* no rank resumes before every rank's refusals were seen */

  suspend_or_resume(x, false, cycle, suspended, resumed);
  step(x->rank, "MemStats after resume");
  uint64_t s2 = stat_of(x, ncclStatGpuMemSuspend), z2 = stat_of(x, ncclStatGpuMemSuspended);
  expect(s2 == s0 && z2 == 0,
         "rank %d cycle %d after resume: MemStats suspendable %llu (want %llu again), suspended "
         "%llu (want 0)",
         x->rank, cycle, (unsigned long long)s2, (unsigned long long)s0, (unsigned long long)z2);
  expect_refused(x, ncclCommResume(x->comm), "ncclCommResume when not suspended", "not suspended");
}

static void part_suspend(rank_ctx_t* x) {
  static const size_t counts[3] = {7, 65537, BIG_COUNT};
  for (int i = 0; i < 3; i++) allreduce_check(x, counts[i], 1 + i, "before any suspend");
  suspend_cycle(x, 1);
  for (int i = 0; i < 3; i++) allreduce_check(x, counts[i], 11 + i, "after the first resume");
  /* flags 0 name nothing to suspend: a no-op, as stock */
  step(x->rank, "ncclCommSuspend(0)");
  NK(x, ncclCommSuspend(x->comm, 0));
  expect(stat_of(x, ncclStatGpuMemSuspended) == 0,
         "rank %d: ncclCommSuspend with flags 0 left the communicator suspended", x->rank);
  barrier(x);
  suspend_cycle(x, 2);
  for (int i = 0; i < 3; i++) allreduce_check(x, counts[i], 21 + i, "after the second resume");
}

/* ---- (b) PutSignal / WaitSignal ---------------------------------------------------------------
 */
static void CUDART_CB sleep_host_fn(void* arg) {
  (void)arg;
  usleep(200 * 1000);
}

static void fill_window(rank_ctx_t* x) {
  step(x->rank, "fill the window");
  CK(cudaMemsetAsync(x->win, FILL, WIN_BYTES, x->st));
  CK(cudaStreamSynchronize(x->st));
}

/* The source, on the stream: zeros at once, the pattern for peer `to` only after a sleeping host
 * function (file comment, (b)). */
static void stage_source(rank_ctx_t* x, int to, size_t off, size_t bytes) {
  step(x->rank, "stage a put's source");
  CK(cudaMemsetAsync(x->src, 0, WIN_BYTES, x->st)); /* after the earlier puts read it */
  CK(cudaStreamSynchronize(x->st));
  for (size_t i = 0; i < bytes; i++) x->host_in[off + i] = put_byte(x->rank, to, x->round, off + i);
  CK(cudaLaunchHostFunc(x->st, sleep_host_fn, NULL));
  CK(cudaMemcpyAsync(x->src + off, x->host_in + off, bytes, cudaMemcpyHostToDevice, x->st));
}

/* A range of x's window [off, off + bytes) expected from `from` (-1: none). */
typedef struct piece {
  size_t off, bytes;
  int from;
} piece_t;

/* Copies this rank's window out on its stream (after whatever waits were queued there) and
 * checks the pieces and the fill around them. */
static void check_window(rank_ctx_t* x, const piece_t* pieces, int npieces, const char* what) {
  step(x->rank, "read the window back");
  CK(cudaMemcpyAsync(x->host_out, x->win, WIN_BYTES, cudaMemcpyDeviceToHost, x->st));
  CK(cudaStreamSynchronize(x->st));
  size_t bad = 0, first = (size_t)-1, fill_bad = 0, first_fill = (size_t)-1;
  unsigned got_first = 0, want_first = 0;
  for (size_t i = 0; i < WIN_BYTES; i++) {
    int from = -1;
    for (int k = 0; k < npieces; k++)
      if (i >= pieces[k].off && i < pieces[k].off + pieces[k].bytes) from = pieces[k].from;
    if (from < 0) {
      if (x->host_out[i] != FILL && fill_bad++ == 0) first_fill = i;
      continue;
    }
    unsigned char want = put_byte(from, x->rank, x->round, i);
    if (x->host_out[i] != want && bad++ == 0) {
      first = i;
      got_first = x->host_out[i];
      want_first = want;
    }
  }
  expect(bad == 0 && fill_bad == 0,
         "rank %d: %s: %zu put bytes wrong (first at %zu: 0x%02x, want 0x%02x), %zu bytes outside "
         "the puts changed (first at %zu)",
         x->rank, what, bad, first, got_first, want_first, fill_bad, first_fill);
}

/* Rank 0 puts four pieces into rank 1's window; rank 1 waits for four signals. */
static void put_zero_to_one(rank_ctx_t* x) {
  static const piece_t pieces[4] = {
      {0, 1, 0}, {67, 4093, 0}, {8192, (1u << 20) + 3, 0}, {(2u << 20) + 4, 1001 * 4, 0}};
  x->round++;
  fill_window(x);
  barrier(x);
  if (x->rank == 0) {
    step(x->rank, "PutSignal 0 -> 1");
    for (int k = 0; k < 4; k++) {
      stage_source(x, 1, pieces[k].off, pieces[k].bytes);
      if (k == 3) /* floats: the count in elements */
        NK(x, ncclPutSignal(x->src + pieces[k].off, pieces[k].bytes / 4, ncclFloat32, 1, x->w,
                            pieces[k].off, 0, 0, 0, x->comm, x->st));
      else
        NK(x, ncclPutSignal(x->src + pieces[k].off, pieces[k].bytes, ncclInt8, 1, x->w,
                            pieces[k].off, 0, 0, 0, x->comm, x->st));
    }
    step(x->rank, "PutSignal 0 -> 1: cudaStreamSynchronize");
    CK(cudaStreamSynchronize(x->st));
  } else if (x->rank == 1) {
    step(x->rank, "WaitSignal for rank 0's 4 puts");
    ncclWaitSignalDesc_t d = {.opCnt = 4, .peer = 0, .sigIdx = 0, .ctx = 0};
    NK(x, ncclWaitSignal(1, &d, x->comm, x->st));
  }
  check_window(x, pieces, x->rank == 1 ? 4 : 0, "after rank 0's four puts into rank 1's window");
  barrier(x);
}

/* Every rank puts a piece into every rank's window (itself included) on ctx (p + q) % 2, sigIdx
 * p % 2; each rank waits for all of them in one call. */
static void put_all_to_all(rank_ctx_t* x, const char* when) {
  const int n = x->g->n;
  const size_t chunk = WIN_BYTES / MAXR;
  x->round++;
  fill_window(x);
  barrier(x);
  step(x->rank, "PutSignal to every rank");
  for (int k = 0; k < n; k++) {
    int q = (x->rank + k) % n; /* each rank starts with a different peer */
    size_t off = (size_t)x->rank * chunk + 5, bytes = chunk - 11 - (size_t)q;
    stage_source(x, q, off, bytes);
    NK(x, ncclPutSignal(x->src + off, bytes, ncclUint8, q, x->w, off, x->rank % NRMA,
                        (x->rank + q) % NRMA, 0, x->comm, x->st));
    /* the source is staged again for the next peer: this put must be done with it */
    step(x->rank, "PutSignal to every rank: cudaStreamSynchronize");
    CK(cudaStreamSynchronize(x->st));
  }
  ncclWaitSignalDesc_t d[MAXR];
  piece_t pieces[MAXR];
  for (int p = 0; p < n; p++) {
    d[p] = (ncclWaitSignalDesc_t){
        .opCnt = 1, .peer = p, .sigIdx = p % NRMA, .ctx = (p + x->rank) % NRMA};
    pieces[p] =
        (piece_t){.off = (size_t)p * chunk + 5, .bytes = chunk - 11 - (size_t)x->rank, .from = p};
  }
  step(x->rank, "WaitSignal for every rank's put");
  NK(x, ncclWaitSignal(n, d, x->comm, x->st));
  char what[128];
  snprintf(what, sizeof(what), "every rank's put into every window (%s)", when);
  check_window(x, pieces, n, what);
  barrier(x);
}

/* ---- (c) Signal / WaitSignal ------------------------------------------------------------------
 */
static void signal_late_sender(rank_ctx_t* x) {
  group_t* g = x->g;
  atomic_store(&g->signal_sent_ms, 0);
  barrier(x);
  if (x->rank == 0) {
    step(x->rank, "sleep, then Signal 0 -> 1");
    usleep(LATE_MS * 1000);
    atomic_store(&g->signal_sent_ms, now_ms());
    NK(x, ncclSignal(1, 1, 1, 0, x->comm, x->st));
    CK(cudaStreamSynchronize(x->st));
  } else if (x->rank == 1) {
    step(x->rank, "WaitSignal for rank 0's late signal");
    long long start = now_ms();
    ncclWaitSignalDesc_t d = {.opCnt = 1, .peer = 0, .sigIdx = 1, .ctx = 1};
    NK(x, ncclWaitSignal(1, &d, x->comm, x->st));
    CK(cudaStreamSynchronize(x->st));
    long long done = now_ms(), sent = atomic_load(&g->signal_sent_ms);
    char when[64] = "not sent yet";
    if (sent != 0) snprintf(when, sizeof(when), "sent %lld ms after it began", sent - start);
    expect(sent != 0 && done >= sent,
           "rank 1: WaitSignal (and its stream) ended %lld ms after it began, %s rank 0's signal "
           "(%s)",
           done - start, sent != 0 && done >= sent ? "after" : "BEFORE", when);
  }
  barrier(x);
}

/* Every rank signals every other after a sleep of its own and waits for all: no wait may end
 * before the last of its peers' signals went out. */
static void signal_barrier(rank_ctx_t* x) {
  group_t* g = x->g;
  const int n = g->n;
  atomic_store(&g->sent_ms[x->rank], 0);
  barrier(x);
  step(x->rank, "sleep, then Signal to every other rank");
  usleep((useconds_t)(50 + 60 * x->rank) * 1000);
  atomic_store(&g->sent_ms[x->rank], now_ms());
  for (int p = 0; p < n; p++)
    if (p != x->rank) NK(x, ncclSignal(p, 0, 1, 0, x->comm, x->st));
  ncclWaitSignalDesc_t d[MAXR];
  int nd = 0;
  for (int p = 0; p < n; p++)
    if (p != x->rank)
      d[nd++] = (ncclWaitSignalDesc_t){.opCnt = 1, .peer = p, .sigIdx = 0, .ctx = 1};
  step(x->rank, "WaitSignal for every other rank's signal");
  NK(x, ncclWaitSignal(nd, d, x->comm, x->st));
  CK(cudaStreamSynchronize(x->st));
  long long done = now_ms(), last = 0;
  bool all_sent = true;
  for (int p = 0; p < n; p++) {
    if (p == x->rank) continue;
    long long t = atomic_load(&g->sent_ms[p]);
    all_sent &= t != 0;
    if (t > last) last = t;
  }
  expect(all_sent && done >= last,
         "rank %d: a WaitSignal on every other rank ended %s every peer had signalled (%s)",
         x->rank, all_sent && done >= last ? "after" : "BEFORE",
         all_sent ? "the last of them counted" : "some had not signalled yet");
  barrier(x);
}

/* ---- One rank -------------------------------------------------------------------------------- */
static void* rank_main(void* arg) {
  rank_ctx_t* x = arg;
  group_t* g = x->g;
  step(x->rank, "init");
  CK(cudaSetDevice(x->dev));
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.numRmaCtx = NRMA;
  cfg.numRmaSig = NRMA;
  NK(x, ncclCommInitRankConfig(&x->comm, g->n, g->id, x->rank, &cfg));
  CK(cudaStreamCreateWithFlags(&x->st, cudaStreamNonBlocking));
  CK(cudaMalloc((void**)&x->send, BIG_COUNT * sizeof(float)));
  CK(cudaMalloc((void**)&x->recv, BIG_COUNT * sizeof(float)));
  CK(cudaMallocHost((void**)&x->host_f, BIG_COUNT * sizeof(float)));
  CK(cudaMallocHost((void**)&x->host_in, WIN_BYTES));
  CK(cudaMallocHost((void**)&x->host_out, WIN_BYTES));
  CK(cudaMalloc((void**)&x->src, WIN_BYTES));

  part_suspend(x); /* (a), before any window: its table would be persistent memory */

  step(x->rank, "ncclMemAlloc + ncclCommWindowRegister");
  NK(x, ncclMemAlloc((void**)&x->win, WIN_BYTES));
  NK(x, ncclCommWindowRegister(x->comm, x->win, WIN_BYTES, &x->w, NCCL_WIN_DEFAULT));
  put_zero_to_one(x);                    /* (b) */
  put_all_to_all(x, "before a suspend"); /* (b) */
  signal_late_sender(x);                 /* (c) */
  signal_barrier(x);                     /* (c) */
  suspend_cycle(x, 3);                   /* (d) */
  put_all_to_all(x, "after a suspend and resume with the window registered");
  allreduce_check(x, 65537, 31, "after the one-sided operations");

  step(x->rank, "teardown");
  NK(x, ncclCommWindowDeregister(x->comm, x->w));
  NK(x, ncclMemFree(x->win));
  NK(x, ncclCommDestroy(x->comm));
  CK(cudaStreamDestroy(x->st));
  CK(cudaFree(x->send));
  CK(cudaFree(x->recv));
  CK(cudaFree(x->src));
  CK(cudaFreeHost(x->host_f));
  CK(cudaFreeHost(x->host_in));
  CK(cudaFreeHost(x->host_out));
  step(x->rank, "done");
  return NULL;
}

static void run_group(const char* label, int n, const int* devs, bool gpu_conns) {
  group_t g = {.n = n, .gpu_conns = gpu_conns};
  rank_ctx_t x[MAXR];
  pthread_t th[MAXR];
  memcpy(g.devs, devs, (size_t)n * sizeof(int));
  g_group = label;
  printf("-- %s\n", label);
  fflush(stdout);
  if (ncclGetUniqueId(&g.id) != ncclSuccess) fatal("ncclGetUniqueId: %s", ncclGetLastError(NULL));
  pthread_barrier_init(&g.bar, NULL, (unsigned)n);
  int before = g_checks, before_fail = g_fail;
  for (int r = 0; r < n; r++) {
    x[r] = (rank_ctx_t){.g = &g, .rank = r, .dev = devs[r]};
    int err = pthread_create(&th[r], NULL, rank_main, &x[r]);
    if (err != 0) fatal("pthread_create: %s", strerror(err));
  }
  for (int r = 0; r < n; r++) pthread_join(th[r], NULL);
  pthread_barrier_destroy(&g.bar);
  for (int r = 0; r < MAXR; r++) g_step[r] = NULL;
  printf("   %d checks, %d failures\n", g_checks - before, g_fail - before_fail);
  fflush(stdout);
}

int main(int argc, char** argv) {
  (void)argc;
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* Before the first NCCL call: the library reads its parameters once. */
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("NCCL_MULTI_RANK_GPU_ENABLE", "1", 1);
  const char* pass_env = getenv("TEST_SUSPEND_RMA_PASS");
  const int pass = pass_env != NULL && strcmp(pass_env, "2") == 0 ? 2 : 1;
  const char* prior = getenv("TEST_SUSPEND_RMA_PASS1");
  if (pass == 2 && prior != NULL) sscanf(prior, "%d %d", &g_prior_checks, &g_prior_fail);

  int ndev = 0;
  cudaError_t e = cudaGetDeviceCount(&ndev);
  if (e != cudaSuccess || ndev < 1) {
    printf("SKIP: no GPU (%s)\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    return 0;
  }
  pthread_t wd;
  if (pthread_create(&wd, NULL, watchdog_main, NULL) != 0) fatal("watchdog: pthread_create failed");
  pthread_detach(wd);
  printf("== pass %d: %s; %d GPU(s) visible\n", pass,
         pass == 1 ? "default transports (P2P: GPU memory; windows shared)"
                   : "NCCL_P2P_DISABLE=1 (SHM: host memory; windows not shared)",
         ndev);

  const bool gpu_conns = pass == 1;
  if (!gpu_conns)
    printf("SKIP the free-memory comparison in this pass: the connections are host memory\n");
  int devs[MAXR] = {0};
  run_group(pass == 1 ? "2 ranks sharing GPU 0" : "2 ranks sharing GPU 0, no P2P", 2, devs,
            gpu_conns);
  if (ndev >= 2) {
    devs[1] = 1;
    run_group(pass == 1 ? "2 ranks on GPUs 0 and 1" : "2 ranks on GPUs 0 and 1, no P2P", 2, devs,
              gpu_conns);
  } else {
    printf("SKIP 2 ranks on 2 GPUs: only 1 GPU visible\n");
  }
  const int nmax = ndev < MAXR ? ndev : MAXR;
  if (pass == 1 && nmax >= 3) {
    for (int r = 0; r < nmax; r++) devs[r] = r;
    char label[64];
    snprintf(label, sizeof(label), "%d ranks, one per GPU", nmax);
    run_group(label, nmax, devs, gpu_conns);
  } else if (pass == 1) {
    printf("SKIP one rank on each of 3 or more GPUs: %d GPU(s) visible\n", ndev);
  }
  atomic_store(&g_deadline_ms, 0);

  if (pass == 1) {
    char part1[64];
    snprintf(part1, sizeof(part1), "%d %d", g_checks, g_fail);
    printf("-- pass 1: %d checks, %d failures; re-running with NCCL_P2P_DISABLE=1\n", g_checks,
           g_fail);
    setenv("TEST_SUSPEND_RMA_PASS", "2", 1);
    setenv("TEST_SUSPEND_RMA_PASS1", part1, 1);
    setenv("NCCL_P2P_DISABLE", "1", 1);
    execv("/proc/self/exe", argv);
    printf("FAIL execv: %s\n", strerror(errno));
    g_fail++;
  }
  pthread_mutex_lock(&g_lock);
  summary_locked(0);
  pthread_mutex_unlock(&g_lock);
  return g_fail + g_prior_fail == 0 ? 0 : 1;
}
