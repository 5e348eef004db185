/* Communicator lifecycle on the host executor: init (processes, threads, several roots,
 * nonblocking), queries, split, shrink around a dead rank, finalize/destroy, abort while init
 * waits for a missing rank, revoke. Ranks are forked processes on loopback. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "collectives/collectives.h"
#include "core/core.h"
#include "fork_ranks.h"
#include "unit.h"

#define TIMEOUT_MS 20000

typedef struct world {
  ncclUniqueId ids[2];
  int victim;            /* shrink: the rank that dies */
  volatile int* pids;    /* shared: every rank's pid */
  volatile int* results; /* shared: what each rank saw (test specific) */
} world_t;

static world_t world_make(int nids) {
  world_t w;
  memset(&w, 0, sizeof(w));
  for (int i = 0; i < nids; i++) ck_assert_int_eq(ncclGetUniqueId(&w.ids[i]), ncclSuccess);
  void* shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(shared, MAP_FAILED);
  memset(shared, 0, 4096);
  w.pids = shared;
  w.results = (volatile int*)shared + 64;
  w.victim = -1;
  return w;
}

/* Runs fn on n forked ranks that share a world with nids unique ids; every rank must set its
 * result to 1. */
static void run_world(int nids, int n, fork_rank_fn fn) {
  world_t w = world_make(nids);
  ck_assert_int_eq(fork_ranks_run(n, fn, &w, TIMEOUT_MS), 0);
  for (int i = 0; i < n; i++) ck_assert_int_eq(w.results[i], 1);
}

static double seconds_since(uint64_t t0) {
  return (double)(clock_ns() - t0) / 1e9;
}

/* Every rank contributes base + rank through the comm's bootstrap; checks what arrives. */
static int check_allgather(ncclComm_t comm, int base) {
  int n = comm->nranks;
  int* v = calloc((size_t)n, sizeof(int));
  CHILD_CHECK(v != NULL);
  v[comm->rank] = base + comm->rank;
  CHILD_CHECK(bootstrap_allgather(comm->bootstrap, v, sizeof(int)) == ncclSuccess);
  for (int i = 0; i < n; i++) CHILD_CHECK(v[i] == base + i);
  free(v);
  return 0;
}

/* Polls ncclCommGetAsyncError until it leaves ncclInProgress (bounded). */
static ncclResult_t wait_async(ncclComm_t comm) {
  ncclResult_t st = ncclInProgress;
  uint64_t t0 = clock_ns();
  while (seconds_since(t0) < 10.0) {
    if (ncclCommGetAsyncError(comm, &st) != ncclSuccess) return ncclInternalError;
    if (st != ncclInProgress) return st;
    usleep(1000);
  }
  return ncclInProgress;
}

static int check_queries(ncclComm_t comm, int nranks, int rank) {
  int v = -5;
  CHILD_CHECK(ncclCommCount(comm, &v) == ncclSuccess && v == nranks);
  CHILD_CHECK(ncclCommUserRank(comm, &v) == ncclSuccess && v == rank);
  CHILD_CHECK(ncclCommCuDevice(comm, &v) == ncclSuccess && v == comm->cuda_dev);
  CHILD_CHECK(v == -1); /* host executor (main hides GPUs) */
  return 0;
}

/* ---- Init in processes -------------------------------------------------------------------- */
static int rank_init_basic(int rank, int n, void* arg) {
  world_t* w = arg;
  ncclComm_t comm = NULL;
  CHILD_CHECK(ncclCommInitRank(&comm, n, w->ids[0], rank) == ncclSuccess);
  CHILD_CHECK(check_queries(comm, n, rank) == 0);
  /* Peer info was exchanged: one host, one process per rank. */
  CHILD_CHECK(comm->nnodes == 1 && comm->local_ranks == n && comm->local_rank == rank);
  for (int i = 0; i < n; i++) {
    CHILD_CHECK(comm->peers[i].rank == i);
    CHILD_CHECK(comm->peers[i].host_hash == comm->peers[rank].host_hash);
    if (i != rank) CHILD_CHECK(comm->peers[i].pid_hash != comm->peers[rank].pid_hash);
  }
  CHILD_CHECK(check_allgather(comm, 100) == 0);
  CHILD_CHECK(ncclCommFinalize(comm) == ncclSuccess);
  uint64_t t0 = clock_ns();
  CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess);
  CHILD_CHECK(seconds_since(t0) < 0.2); /* no barrier, no waiting for the others */
  w->results[rank] = 1;
  return 0;
}

static void run_init_procs(int n) {
  world_t w = world_make(1);
  ck_assert_int_eq(fork_ranks_run(n, rank_init_basic, &w, TIMEOUT_MS), 0);
  for (int i = 0; i < n; i++) ck_assert_int_eq(w.results[i], 1);
}

START_TEST(test_init_one_rank) {
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  ck_assert_ptr_nonnull(comm);
  ck_assert_int_eq(check_queries(comm, 1, 0), 0);
  ck_assert_int_eq(comm->nnodes, 1);
  ck_assert_int_eq(comm->config.blocking, 1);
  ck_assert_uint_eq(comm->comm_hash, hash_bytes(&id, sizeof(id)));
  ck_assert_int_eq(check_allgather(comm, 7), 0);
  ck_assert_int_eq(ncclCommFinalize(comm), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_init_two_procs) {
  run_init_procs(2);
}
END_TEST

START_TEST(test_init_four_procs) {
  run_init_procs(4);
}
END_TEST

/* Two roots: ranks spread over both ids. */
static int rank_init_scalable(int rank, int n, void* arg) {
  world_t* w = arg;
  ncclComm_t comm = NULL;
  CHILD_CHECK(ncclCommInitRankScalable(&comm, n, rank, 2, w->ids, NULL) == ncclSuccess);
  CHILD_CHECK(check_queries(comm, n, rank) == 0);
  CHILD_CHECK(check_allgather(comm, 40) == 0);
  CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess);
  w->results[rank] = 1;
  return 0;
}

START_TEST(test_init_scalable) {
  run_world(2, 4, rank_init_scalable);
}
END_TEST

/* ---- ncclCommInitAll: threads of one process ---------------------------------------------- */
typedef struct ag_thread {
  ncclComm_t comm;
  int rc;
} ag_thread_t;

static void* allgather_thread(void* arg) {
  ag_thread_t* t = arg;
  t->rc = check_allgather(t->comm, 1000);
  return NULL;
}

static void check_comms_connected(ncclComm_t* comms, int n) {
  pthread_t th[8];
  ag_thread_t args[8];
  for (int i = 0; i < n; i++) {
    args[i].comm = comms[i];
    args[i].rc = -1;
    ck_assert_int_eq(pthread_create(&th[i], NULL, allgather_thread, &args[i]), 0);
  }
  for (int i = 0; i < n; i++) {
    pthread_join(th[i], NULL);
    ck_assert_int_eq(args[i].rc, 0);
  }
}

START_TEST(test_init_all_threads) {
  ncclComm_t comms[4] = {NULL};
  ck_assert_int_eq(ncclCommInitAll(comms, 4, NULL), ncclSuccess);
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(check_queries(comms[i], 4, i), 0);
    ck_assert_int_eq(comms[i]->local_ranks, 4);
    /* One process: every peer has this process's identity. */
    ck_assert_uint_eq(comms[i]->peers[(i + 1) % 4].pid_hash, pid_hash());
  }
  ck_assert_uint_eq(comms[0]->comm_hash, comms[3]->comm_hash);
  check_comms_connected(comms, 4);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
}
END_TEST

/* A window deregistered inside the group that registered it, or whose communicator is destroyed
 * there, is never shared: the outermost ncclGroupEnd used to share it anyway, writing into the
 * freed record and leaving a shared window no handle names, or reading the freed communicator. */
START_TEST(test_windows_dropped_in_group) {
  enum { N = 2 };
  ncclComm_t comms[N];
  static char bufs[N][4096];
  ncclWindow_t win[N], kept[N];
  ck_assert_int_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(ncclCommWindowRegister(comms[i], bufs[i], 4096, &win[i], 0), ncclSuccess);
    ck_assert_int_eq(ncclCommWindowRegister(comms[i], bufs[i], 2048, &kept[i], 0), ncclSuccess);
  }
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(ncclCommWindowDeregister(comms[i], win[i]), ncclSuccess);
  ck_assert_int_eq(coll_win_npend, N); /* only the kept ones wait for ncclGroupEnd */
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int i = 0; i < N; i++) {
    ck_assert(comm_windows_shared(comms[i]));
    ck_assert_int_eq(comms[i]->resources->nwindows, 1);
    ck_assert_int_eq(ncclCommWindowDeregister(comms[i], kept[i]), ncclSuccess);
    ck_assert_int_eq(comms[i]->resources->nwindows, 0);
  }
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(ncclCommWindowRegister(comms[i], bufs[i], 4096, &win[i], 0), ncclSuccess);
  for (int i = 0; i < N; i++) ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
  ck_assert_int_eq(coll_win_npend, 0);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
}
END_TEST

/* Windows registered between ncclGroupStart and ncclGroupEnd by one thread holding every rank (as
 * nccl-tests -g N does): registration is collective, so the sharing must wait for the group's end
 * and run the ranks side by side; one at a time, the first rank's exchange would wait forever
 * for the others. Then an AllReduce over the windows, as a group of the three ranks. */
START_TEST(test_windows_in_group) {
  enum { N = 3, COUNT = 1000 };
  ncclComm_t comms[N] = {NULL};
  float* send[N];
  float* recv[N];
  ncclWindow_t win[N][2];
  ck_assert_int_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess);
  for (int i = 0; i < N; i++) {
    send[i] = malloc(COUNT * sizeof(float));
    recv[i] = malloc(COUNT * sizeof(float));
    ck_assert(send[i] && recv[i]);
    for (int k = 0; k < COUNT; k++) send[i][k] = (float)(i * 1000 + k);
  }
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(
        ncclCommWindowRegister(comms[i], send[i], COUNT * sizeof(float), &win[i][0], 0),
        ncclSuccess);
    ck_assert_int_eq(
        ncclCommWindowRegister(comms[i], recv[i], COUNT * sizeof(float), &win[i][1], 0),
        ncclSuccess);
    ck_assert(!comm_windows_shared(comms[i])); /* not before ncclGroupEnd */
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  /* One process: every rank reads every other's buffer as it is. */
  for (int i = 0; i < N; i++) ck_assert(comm_windows_shared(comms[i]));
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(ncclAllReduce(send[i], recv[i], COUNT, ncclFloat32, ncclSum, comms[i], NULL),
                     ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < COUNT; k++) ck_assert_float_eq(recv[i][k], (float)(3000 + 3 * k));
    for (int j = 0; j < 2; j++)
      ck_assert_int_eq(ncclCommWindowDeregister(comms[i], win[i][j]), ncclSuccess);
    ck_assert_int_eq(ncclCommWindowDeregister(comms[i], win[i][0]), ncclInvalidArgument);
  }
  for (int i = 0; i < N; i++) {
    ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
    free(send[i]);
    free(recv[i]);
  }
}
END_TEST

/* One thread splits the communicators of every rank inside a group, as the NCCL documentation
 * tells a single-threaded multi-GPU program to: each rank's split must wait for ncclGroupEnd (run
 * inline, the first would wait in the parent's allgather for ranks not called yet, forever).
 * Ranks 0, 2, 3 take color 7 with keys that reverse them; rank 1 opts out. Then an AllReduce on
 * the children and one on the parents, each a group of the ranks. A second split of the same
 * parent in one group is refused, and that group fails without hanging. */
START_TEST(test_split_in_group) {
  enum { N = 4, COUNT = 256 };
  ncclComm_t comms[N] = {NULL}, child[N];
  float buf[N][COUNT];
  ck_assert_int_eq(ncclCommInitAll(comms, N, NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < N; i++) {
    child[i] = (ncclComm_t)&child[i]; /* must be overwritten */
    int color = i == 1 ? NCCL_SPLIT_NOCOLOR : 7;
    ck_assert_int_eq(ncclCommSplit(comms[i], color, N - i, &child[i], NULL), ncclSuccess);
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ck_assert(child[1] == NULL);
  /* keys 4, 2, 1 for ranks 0, 2, 3: new ranks 2, 1, 0 */
  const int new_rank[N] = {2, -1, 1, 0};
  for (int i = 0; i < N; i++)
    if (i != 1) ck_assert_int_eq(check_queries(child[i], 3, new_rank[i]), 0);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < N; i++) {
    for (int k = 0; k < COUNT; k++) buf[i][k] = (float)(i + 1);
    if (i != 1)
      ck_assert_int_eq(ncclAllReduce(buf[i], buf[i], COUNT, ncclFloat32, ncclSum, child[i], NULL),
                       ncclSuccess);
  }
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int i = 0; i < N; i++)
    for (int k = 0; k < COUNT && i != 1; k++) ck_assert_float_eq(buf[i][k], 1.0f + 3.0f + 4.0f);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(ncclAllReduce(buf[i], buf[i], 1, ncclFloat32, ncclSum, comms[i], NULL),
                     ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  /* rank 1 still holds 2; the others 8 */
  for (int i = 0; i < N; i++) ck_assert_float_eq(buf[i][0], 8.0f * 3 + 2.0f);
  for (int i = 0; i < N; i++)
    if (i != 1) ck_assert_int_eq(ncclCommDestroy(child[i]), ncclSuccess);

  /* Shrink the same way: ranks 0-2 leave rank 3 out (it does not call). */
  int exclude[1] = {3};
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < N - 1; i++)
    ck_assert_int_eq(ncclCommShrink(comms[i], exclude, 1, &child[i], NULL, NCCL_SHRINK_DEFAULT),
                     ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  for (int i = 0; i < N - 1; i++) {
    ck_assert_int_eq(check_queries(child[i], N - 1, i), 0);
    ck_assert_int_eq(ncclCommDestroy(child[i]), ncclSuccess);
  }

  ncclComm_t second = NULL;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(ncclCommSplit(comms[i], 0, i, &child[i], NULL), ncclSuccess);
  ck_assert_int_eq(ncclCommSplit(comms[0], 1, 0, &second, NULL), ncclInvalidUsage);
  ck_assert(second == NULL);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comms[0]), "already has a split or shrink"));
  ck_assert_int_ne(ncclGroupEnd(), ncclSuccess);
  for (int i = 0; i < N; i++) {
    if (child[i] != NULL) ck_assert_int_eq(ncclCommAbort(child[i]), ncclSuccess);
    ck_assert_int_eq(ncclCommAbort(comms[i]), ncclSuccess);
  }
}
END_TEST

START_TEST(test_init_all_devlist) {
  /* No GPU (main hides them): devlist is validated, and the comms run on the host executor. */
  int devlist[3] = {2, 0, 1};
  ncclComm_t comms[3] = {NULL};
  ck_assert_int_eq(comm_device_count(), 0);
  ck_assert_int_eq(ncclCommInitAll(comms, 3, devlist), ncclSuccess);
  for (int i = 0; i < 3; i++) {
    int dev = -2;
    ck_assert_int_eq(ncclCommCuDevice(comms[i], &dev), ncclSuccess);
    ck_assert_int_eq(dev, -1);
  }
  check_comms_connected(comms, 3);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
}
END_TEST

/* ---- Nonblocking init and finalize ------------------------------------------------------------
 */
static int rank_nonblocking(int rank, int n, void* arg) {
  world_t* w = arg;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  CHILD_CHECK(ncclCommInitRankConfig(&comm, n, w->ids[0], rank, &cfg) == ncclInProgress);
  CHILD_CHECK(comm != NULL);
  CHILD_CHECK(wait_async(comm) == ncclSuccess);
  CHILD_CHECK(check_queries(comm, n, rank) == 0);
  CHILD_CHECK(check_allgather(comm, 5) == 0);
  CHILD_CHECK(ncclCommFinalize(comm) == ncclInProgress);
  CHILD_CHECK(wait_async(comm) == ncclSuccess);
  CHILD_CHECK(atomic_load(&comm->state) == COMM_STATE_FINALIZED);
  CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess);
  w->results[rank] = 1;
  return 0;
}

START_TEST(test_nonblocking_init) {
  world_t w = world_make(1);
  ck_assert_int_eq(fork_ranks_run(2, rank_nonblocking, &w, TIMEOUT_MS), 0);
  ck_assert_int_eq(w.results[0] + w.results[1], 2);
}
END_TEST

/* NCCL_COMM_BLOCKING=0 makes a plain ncclCommInitRank nonblocking (as stock). */
START_TEST(test_nonblocking_env) {
  setenv("NCCL_COMM_BLOCKING", "0", 1);
  param_reload();
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRank(&comm, 1, id, 0), ncclInProgress);
  ck_assert_int_eq(wait_async(comm), ncclSuccess);
  ck_assert_int_eq(comm->config.blocking, 0);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  unsetenv("NCCL_COMM_BLOCKING");
  param_reload();
}
END_TEST

/* Rank 1 never comes: the comm stays in progress, refuses use, and abort ends it quickly. */
START_TEST(test_abort_while_init_waits) {
  ncclUniqueId id;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 2, id, 0, &cfg), ncclInProgress);
  usleep(200 * 1000);
  ncclResult_t st = ncclSuccess;
  ck_assert_int_eq(ncclCommGetAsyncError(comm, &st), ncclSuccess);
  ck_assert_int_eq(st, ncclInProgress);
  int n = 0;
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "ncclCommCount"));
  ck_assert_int_eq(ncclCommDestroy(comm), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommFinalize(comm), ncclInvalidArgument);
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
  ck_assert_double_lt(seconds_since(t0), 1.0);
}
END_TEST

/* A communicator created in a group and aborted before ncclGroupEnd (its other rank never came):
 * the group forgets it, so ncclGroupEnd has nothing to wait for. It used to keep it in the
 * group's list and read the freed communicator there, failing with "rank -1 ... failed to
 * initialize". The same for a blocking one, whose init runs on a thread of its own in a group. */
START_TEST(test_abort_init_in_group) {
  for (int blocking = 0; blocking <= 1; blocking++) {
    ncclUniqueId id;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = blocking;
    ncclComm_t comm = NULL;
    ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
    ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
    ck_assert_int_eq(ncclCommInitRankConfig(&comm, 2, id, 0, &cfg),
                     blocking ? ncclSuccess : ncclInProgress);
    ck_assert_ptr_nonnull(comm);
    usleep(100 * 1000);
    ck_assert_int_eq(ncclCommAbort(comm), ncclSuccess);
    uint64_t t0 = clock_ns();
    ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
    ck_assert_double_lt(seconds_since(t0), 1.0);
  }
}
END_TEST

/* Abort from another thread while the creating thread is still polling. */
typedef struct abort_arg {
  ncclComm_t comm;
  ncclResult_t res;
  double seconds;
} abort_arg_t;

static void* abort_thread(void* arg) {
  abort_arg_t* a = arg;
  usleep(100 * 1000);
  uint64_t t0 = clock_ns();
  a->res = ncclCommAbort(a->comm);
  a->seconds = seconds_since(t0);
  return NULL;
}

START_TEST(test_abort_from_other_thread) {
  ncclUniqueId id;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  abort_arg_t a = {.comm = NULL, .res = ncclInternalError};
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRankConfig(&a.comm, 3, id, 1, &cfg), ncclInProgress);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, abort_thread, &a), 0);
  pthread_join(th, NULL);
  ck_assert_int_eq(a.res, ncclSuccess);
  ck_assert_double_lt(a.seconds, 1.0);
}
END_TEST

/* ---- Split --------------------------------------------------------------------------------------
 */
/* Colors by parity; keys reverse the order: new rank = (members - 1) - rank / 2. Then the child
 * is split again (same order) and both generations must carry bootstrap traffic. */
static int rank_split(int rank, int n, void* arg) {
  world_t* w = arg;
  ncclComm_t comm = NULL, child = NULL, grandchild = NULL;
  CHILD_CHECK(ncclCommInitRank(&comm, n, w->ids[0], rank) == ncclSuccess);
  CHILD_CHECK(ncclCommSplit(comm, rank % 2, n - rank, &child, NULL) == ncclSuccess);
  CHILD_CHECK(child != NULL);
  int members = (n - rank % 2 + 1) / 2;
  CHILD_CHECK(check_queries(child, members, members - 1 - rank / 2) == 0);
  CHILD_CHECK(child->config.blocking == 1); /* inherited */
  CHILD_CHECK(child->comm_hash != comm->comm_hash);
  CHILD_CHECK(check_allgather(child, 10 * (rank % 2)) == 0);
  /* Which parent rank holds each child rank. */
  int* parent_of = calloc((size_t)members, sizeof(int));
  parent_of[child->rank] = rank;
  CHILD_CHECK(bootstrap_allgather(child->bootstrap, parent_of, sizeof(int)) == ncclSuccess);
  for (int i = 0; i < members; i++) CHILD_CHECK(parent_of[i] == (rank % 2) + 2 * (members - 1 - i));
  free(parent_of);

  CHILD_CHECK(ncclCommSplit(child, 0, child->rank, &grandchild, NULL) == ncclSuccess);
  CHILD_CHECK(grandchild != NULL);
  CHILD_CHECK(check_queries(grandchild, members, child->rank) == 0);
  CHILD_CHECK(check_allgather(grandchild, 77) == 0);
  /* The parent still works after its children were made. */
  CHILD_CHECK(check_allgather(comm, 3) == 0);
  CHILD_CHECK(ncclCommDestroy(grandchild) == ncclSuccess);
  CHILD_CHECK(ncclCommDestroy(child) == ncclSuccess);
  CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess);
  w->results[rank] = 1;
  return 0;
}

START_TEST(test_split_colors_keys) {
  run_world(1, 4, rank_split);
}
END_TEST

/* Rank 1 opts out: it gets NULL but takes part in the exchange; equal keys keep parent order. */
static int rank_split_nocolor(int rank, int n, void* arg) {
  world_t* w = arg;
  ncclComm_t comm = NULL;
  ncclComm_t child = (ncclComm_t)&child; /* must be overwritten */
  CHILD_CHECK(ncclCommInitRank(&comm, n, w->ids[0], rank) == ncclSuccess);
  int color = rank == 1 ? NCCL_SPLIT_NOCOLOR : 5;
  CHILD_CHECK(ncclCommSplit(comm, color, 0, &child, NULL) == ncclSuccess);
  if (rank == 1) {
    CHILD_CHECK(child == NULL);
  } else {
    CHILD_CHECK(child != NULL);
    CHILD_CHECK(check_queries(child, n - 1, rank > 1 ? rank - 1 : rank) == 0);
    CHILD_CHECK(check_allgather(child, 9) == 0);
    CHILD_CHECK(ncclCommDestroy(child) == ncclSuccess);
  }
  CHILD_CHECK(check_allgather(comm, 1) == 0);
  CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess);
  w->results[rank] = 1;
  return 0;
}

START_TEST(test_split_nocolor) {
  run_world(1, 4, rank_split_nocolor);
}
END_TEST

/* A nonblocking parent splits nonblocking: InProgress, then both report success. */
static int rank_split_nonblocking(int rank, int n, void* arg) {
  world_t* w = arg;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclComm_t comm = NULL, child = NULL;
  CHILD_CHECK(ncclCommInitRankConfig(&comm, n, w->ids[0], rank, &cfg) == ncclInProgress);
  CHILD_CHECK(wait_async(comm) == ncclSuccess);
  CHILD_CHECK(ncclCommSplit(comm, 0, -rank, &child, NULL) == ncclInProgress);
  CHILD_CHECK(child != NULL);
  CHILD_CHECK(wait_async(comm) == ncclSuccess);
  CHILD_CHECK(wait_async(child) == ncclSuccess);
  CHILD_CHECK(check_queries(child, n, n - 1 - rank) == 0);
  CHILD_CHECK(child->config.blocking == 0);
  CHILD_CHECK(check_allgather(child, 21) == 0);
  CHILD_CHECK(ncclCommDestroy(child) == ncclSuccess);
  CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess);
  w->results[rank] = 1;
  return 0;
}

START_TEST(test_split_nonblocking) {
  run_world(1, 3, rank_split_nonblocking);
}
END_TEST

/* ---- Shrink around a dead rank --------------------------------------------------------------- */
static int wait_dead(pid_t pid) {
  uint64_t t0 = clock_ns();
  while (seconds_since(t0) < 10.0) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return 0; /* reaped by the test process */
    usleep(2000);
  }
  return 1;
}

static int rank_shrink_common(int rank, int n, world_t* w, int flags) {
  ncclComm_t comm = NULL, child = NULL;
  w->pids[rank] = (int)getpid();
  CHILD_CHECK(ncclCommInitRank(&comm, n, w->ids[0], rank) == ncclSuccess);
  CHILD_CHECK(check_allgather(comm, 0) == 0); /* everyone is up, pids are published */
  if (rank == w->victim) raise(SIGKILL);
  CHILD_CHECK(wait_dead((pid_t)w->pids[w->victim]) == 0);
  int exclude[1] = {w->victim};
  CHILD_CHECK(ncclCommShrink(comm, exclude, 1, &child, NULL, flags) == ncclSuccess);
  CHILD_CHECK(exclude[0] == w->victim); /* the caller's list is left alone */
  CHILD_CHECK(child != NULL);
  CHILD_CHECK(check_queries(child, n - 1, rank < w->victim ? rank : rank - 1) == 0);
  CHILD_CHECK(check_allgather(child, 50) == 0);
  CHILD_CHECK(ncclCommDestroy(child) == ncclSuccess);
  CHILD_CHECK(ncclCommAbort(comm) == ncclSuccess);
  w->results[rank] = 1;
  return 0;
}

static int rank_shrink(int rank, int n, void* arg) {
  return rank_shrink_common(rank, n, arg, NCCL_SHRINK_DEFAULT);
}

static int rank_shrink_abort(int rank, int n, void* arg) {
  return rank_shrink_common(rank, n, arg, NCCL_SHRINK_ABORT);
}

static void run_shrink(fork_rank_fn fn, int victim) {
  world_t w = world_make(1);
  w.victim = victim;
  /* The victim's SIGKILL is the one expected failure. */
  ck_assert_int_eq(fork_ranks_run(4, fn, &w, TIMEOUT_MS), 1);
  for (int i = 0; i < 4; i++) ck_assert_int_eq(w.results[i], i == victim ? 0 : 1);
}

START_TEST(test_shrink_dead_rank) {
  run_shrink(rank_shrink, 1);
}
END_TEST

START_TEST(test_shrink_abort_flag) {
  run_shrink(rank_shrink_abort, 3);
}
END_TEST

/* ---- Revoke, finalize, destroy -----------------------------------------------------------------
 */
/* An entry point owns its error-sink scope: its WARNs land in ncclGetLastError(comm), and however
 * it returns (an early failed check, a nested job's scope, success) the caller's sink is bound
 * again afterwards. */
START_TEST(test_entry_point_error_sink) {
  ncclComm_t comm = unit_one_rank_comm();
  char outer[256] = "";
  int n = 0;
  {
    LOG_SINK_SCOPE(outer, sizeof(outer));
    /* A failed argument check after comm_check: the comm's slot, not the caller's sink. */
    ck_assert_int_eq(ncclCommCount(comm, NULL), ncclInvalidArgument);
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "count"));
    ck_assert_str_eq(outer, "");
    WARN("caller after ncclCommCount");
    ck_assert_str_eq(outer, "caller after ncclCommCount");
    ck_assert_ptr_null(strstr(ncclGetLastError(comm), "caller after"));
    /* A dead comm binds nothing: its WARN reaches neither sink. */
    ck_assert_int_eq(ncclCommRegister(NULL, NULL, 0, NULL), ncclInvalidArgument);
    ck_assert_str_eq(outer, "caller after ncclCommCount");
    ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "count"));
    /* A blocking split runs the child's job, with scopes of its own, on this thread. */
    ncclComm_t child = NULL;
    ck_assert_int_eq(ncclCommSplit(comm, 0, 0, &child, NULL), ncclSuccess);
    WARN("caller after ncclCommSplit");
    ck_assert_str_eq(outer, "caller after ncclCommSplit");
    ck_assert_int_eq(ncclCommCount(child, &n), ncclSuccess);
    ck_assert_int_eq(n, 1);
    ck_assert_int_eq(ncclCommDestroy(child), ncclSuccess);
    WARN("caller after ncclCommDestroy");
    ck_assert_str_eq(outer, "caller after ncclCommDestroy");
  }
  WARN("after the caller's scope");
  ck_assert_str_eq(outer, "caller after ncclCommDestroy");
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_revoke) {
  ncclComm_t comm = unit_one_rank_comm();
  {
    COMM_API_SCOPE(); /* as an entry point: the check binds the comm's last-error slot */
    ck_assert_int_eq(comm_check_ready(comm, "test"), ncclSuccess);
  }
  ck_assert_int_eq(ncclCommRevoke(comm, 1), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "revokeFlags"));
  ck_assert_int_eq(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), ncclSuccess);
  /* Collectives are refused... */
  {
    COMM_API_SCOPE(); /* as an entry point: the check binds the comm's last-error slot */
    ck_assert_int_eq(comm_check_ready(comm, "ncclAllReduce"), ncclInvalidUsage);
  }
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "revoked"));
  ck_assert_int_eq(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT), ncclInvalidArgument);
  ck_assert_int_eq(ncclCommFinalize(comm), ncclInvalidArgument);
  /* ...queries, split and destroy still work, and the bootstrap is usable again. */
  int n = 0;
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclSuccess);
  ck_assert_int_eq(n, 1);
  ck_assert_uint_eq(*comm->abort_flag, 0);
  ncclComm_t child = NULL;
  ck_assert_int_eq(ncclCommSplit(comm, 0, 0, &child, NULL), ncclSuccess);
  ck_assert_int_eq(check_queries(child, 1, 0), 0);
  ck_assert_int_eq(ncclCommDestroy(child), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

static int rank_revoke_shrink(int rank, int n, void* arg) {
  world_t* w = arg;
  ncclComm_t comm = NULL, child = NULL;
  CHILD_CHECK(ncclCommInitRank(&comm, n, w->ids[0], rank) == ncclSuccess);
  CHILD_CHECK(ncclCommRevoke(comm, 0) == ncclSuccess);
  if (rank == n - 1) {
    CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess); /* leaves; the others shrink it away */
  } else {
    int exclude[1] = {n - 1};
    CHILD_CHECK(ncclCommShrink(comm, exclude, 1, &child, NULL, NCCL_SHRINK_DEFAULT) == ncclSuccess);
    CHILD_CHECK(check_queries(child, n - 1, rank) == 0);
    CHILD_CHECK(check_allgather(child, 8) == 0);
    CHILD_CHECK(ncclCommDestroy(child) == ncclSuccess);
    CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess);
  }
  w->results[rank] = 1;
  return 0;
}

START_TEST(test_revoke_then_shrink) {
  run_world(1, 3, rank_revoke_shrink);
}
END_TEST

START_TEST(test_finalize_then_destroy) {
  ncclComm_t comm = unit_one_rank_comm();
  ck_assert_int_eq(ncclCommFinalize(comm), ncclSuccess);
  ck_assert_int_eq(atomic_load(&comm->state), COMM_STATE_FINALIZED);
  {
    COMM_API_SCOPE(); /* as an entry point: the check binds the comm's last-error slot */
    ck_assert_int_eq(comm_check_ready(comm, "ncclAllReduce"), ncclInvalidUsage);
  }
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "finalized"));
  ck_assert_int_eq(ncclCommFinalize(comm), ncclInvalidArgument); /* twice: as stock */
  int n = 0;
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclSuccess);
  ck_assert_int_eq(n, 1);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* ---- NCCL_COMM_ID: no id exchange, rank 0 hosts the root ------------------------------------- */
static int rank_comm_id(int rank, int n, void* arg) {
  world_t* w = arg;
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  CHILD_CHECK(ncclGetUniqueId(&id) ==
              ncclSuccess); /* derived from NCCL_COMM_ID, alike everywhere */
  CHILD_CHECK(ncclCommInitRank(&comm, n, id, rank) == ncclSuccess);
  CHILD_CHECK(check_queries(comm, n, rank) == 0);
  CHILD_CHECK(check_allgather(comm, 60) == 0);
  CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess);
  w->results[rank] = 1;
  return 0;
}

START_TEST(test_comm_id_env) {
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", fork_ranks_free_port());
  setenv("NCCL_COMM_ID", addr, 1);
  param_reload();
  world_t w = world_make(0);
  ck_assert_int_eq(fork_ranks_run(3, rank_comm_id, &w, TIMEOUT_MS), 0);
  for (int i = 0; i < 3; i++) ck_assert_int_eq(w.results[i], 1);
  unsetenv("NCCL_COMM_ID");
  param_reload();
}
END_TEST

/* The INIT lines that tools grep for, as stock prints them. */
START_TEST(test_init_log_lines) {
  char path[256];
  fork_ranks_log_to_file("INFO", path, sizeof(path));
  ncclComm_t comm = unit_one_rank_comm();
  char ptr[32];
  snprintf(ptr, sizeof(ptr), "comm %p ", (void*)comm);
  const char* const banner[] = {"NCCL version 2.32.3", NULL};
  const char* const topo[] = {ptr, "rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0",
                              NULL};
  const char* const complete[] = {"ncclCommInitRank", ptr, "Init COMPLETE", NULL};
  const char* const timings[] = {"Init timings - ncclCommInitRank: rank 0 nranks 1 total", NULL};
  ck_assert(fork_ranks_file_has_line(path, banner));
  ck_assert(fork_ranks_file_has_line(path, topo));
  ck_assert(fork_ranks_file_has_line(path, complete));
  ck_assert(fork_ranks_file_has_line(path, timings));
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  const char* const destroyed[] = {ptr, "Destroy COMPLETE", NULL};
  ck_assert(fork_ranks_file_has_line(path, destroyed));
  unsetenv("NCCL_DEBUG");
  unsetenv("NCCL_DEBUG_FILE");
  log_reset();
  unlink(path);
}
END_TEST

int main(void) {
  /* Host executor: several processes per machine must not share (and trip over) one GPU. */
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  Suite* s = suite_create("comm");
  TCase* tc = tcase_create("lifecycle");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_init_one_rank);
  tcase_add_test(tc, test_init_two_procs);
  tcase_add_test(tc, test_init_four_procs);
  tcase_add_test(tc, test_init_scalable);
  tcase_add_test(tc, test_init_all_threads);
  tcase_add_test(tc, test_init_all_devlist);
  tcase_add_test(tc, test_windows_in_group);
  tcase_add_test(tc, test_windows_dropped_in_group);
  tcase_add_test(tc, test_nonblocking_init);
  tcase_add_test(tc, test_nonblocking_env);
  tcase_add_test(tc, test_abort_while_init_waits);
  tcase_add_test(tc, test_abort_init_in_group);
  tcase_add_test(tc, test_abort_from_other_thread);
  tcase_add_test(tc, test_split_colors_keys);
  tcase_add_test(tc, test_split_nocolor);
  tcase_add_test(tc, test_split_in_group);
  tcase_add_test(tc, test_split_nonblocking);
  tcase_add_test(tc, test_shrink_dead_rank);
  tcase_add_test(tc, test_shrink_abort_flag);
  tcase_add_test(tc, test_entry_point_error_sink);
  tcase_add_test(tc, test_revoke);
  tcase_add_test(tc, test_revoke_then_shrink);
  tcase_add_test(tc, test_finalize_then_destroy);
  tcase_add_test(tc, test_comm_id_env);
  tcase_add_test(tc, test_init_log_lines);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
