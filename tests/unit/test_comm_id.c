/* NCCL_COMM_ID with child communicators: the ranks init without exchanging an id (rank 0 hosts the
 * root at the env address), then ncclCommSplit and ncclCommShrink make children whose new rank 0
 * starts a fresh root on an ephemeral port; every child carries bootstrap traffic and a host
 * executor all-reduce, and no root thread or descriptor outlives the communicators. Ranks are
 * forked processes on loopback. */
#include <check.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/core.h"
#include "fork_ranks.h"
#include "unit.h"

#define NRANKS 4
#define TIMEOUT_MS 20000
#define EXCLUDED 0 /* shrink drops the rank that hosted the NCCL_COMM_ID root */

typedef struct shared {
  int results[NRANKS];
  ncclUniqueId ids[NRANKS]; /* what ncclGetUniqueId returned on each rank */
} shared_t;

/* Every rank contributes base + rank; checks what arrives. */
static int check_allgather(ncclComm_t comm, int base) {
  int n = comm->nranks;
  int* v = calloc((size_t)n, sizeof(int));
  CHILD_CHECK(v != NULL);
  v[comm->rank] = base + comm->rank;
  ncclResult_t res = bootstrap_allgather(comm->bootstrap, v, sizeof(int));
  int bad = res != ncclSuccess;
  for (int i = 0; i < n && !bad; i++) bad = v[i] != base + i;
  free(v);
  CHILD_CHECK(!bad);
  return 0;
}

/* A sum all-reduce on the host executor: element i of rank r is (r + 1) * (i + seed), so the sum
 * over the members (whose parent ranks are given) is known. */
static int check_allreduce(ncclComm_t comm, const int* parent_ranks, int seed) {
  enum { COUNT = 1000 };
  int* buf = calloc(COUNT, sizeof(int));
  CHILD_CHECK(buf != NULL);
  int me = parent_ranks[comm->rank];
  for (int i = 0; i < COUNT; i++) buf[i] = (me + 1) * (i + seed);
  int weight = 0;
  for (int r = 0; r < comm->nranks; r++) weight += parent_ranks[r] + 1;
  ncclResult_t res = ncclAllReduce(buf, buf, COUNT, ncclInt32, ncclSum, comm, NULL);
  int bad = res != ncclSuccess;
  for (int i = 0; i < COUNT && !bad; i++) bad = buf[i] != weight * (i + seed);
  free(buf);
  CHILD_CHECK(!bad);
  return 0;
}

static int check_shape(ncclComm_t comm, int nranks, int rank) {
  int v = -1;
  CHILD_CHECK(ncclCommCount(comm, &v) == ncclSuccess && v == nranks);
  CHILD_CHECK(ncclCommUserRank(comm, &v) == ncclSuccess && v == rank);
  return 0;
}

/* Waits (bounded) for the thread and descriptor counts to come back; root threads exit on their
 * own shortly after their last answer. */
static int check_nothing_left(int fds, int threads) {
  for (int i = 0; i < 300; i++) {
    if (fork_ranks_count_fds() == fds && fork_ranks_count_threads() == threads) return 0;
    fork_ranks_sleep_ms(10);
  }
  fprintf(stderr, "%d descriptors and %d threads left, %d and %d expected\n",
          fork_ranks_count_fds(), fork_ranks_count_threads(), fds, threads);
  return 1;
}

static int rank_split_shrink(int rank, int n, void* arg) {
  shared_t* sh = arg;
  int fds = fork_ranks_count_fds(), threads = fork_ranks_count_threads();
  ncclComm_t comm = NULL, half = NULL, rest = NULL;
  ncclUniqueId id;
  CHILD_CHECK(ncclGetUniqueId(&id) == ncclSuccess); /* from NCCL_COMM_ID: starts nothing */
  CHILD_CHECK(fork_ranks_count_threads() == threads);
  sh->ids[rank] = id;
  CHILD_CHECK(ncclCommInitRank(&comm, n, id, rank) == ncclSuccess);
  CHILD_CHECK(check_shape(comm, n, rank) == 0);
  CHILD_CHECK(check_allgather(comm, 100) == 0);
  int everyone[NRANKS];
  for (int r = 0; r < n; r++) everyone[r] = r;
  CHILD_CHECK(check_allreduce(comm, everyone, 1) == 0);

  /* Split by parity, keys reversed: parent ranks {2, 0} and {3, 1}; colour 1's new rank 0 is
   * parent rank 3, which hosts no NCCL_COMM_ID root. */
  CHILD_CHECK(ncclCommSplit(comm, rank % 2, -rank, &half, NULL) == ncclSuccess);
  CHILD_CHECK(half != NULL);
  int half_ranks[2] = {rank % 2 + 2, rank % 2};
  CHILD_CHECK(check_shape(half, 2, rank < 2 ? 1 : 0) == 0);
  CHILD_CHECK(check_allgather(half, 200 + 10 * (rank % 2)) == 0);
  CHILD_CHECK(check_allreduce(half, half_ranks, 7) == 0);
  CHILD_CHECK(ncclCommDestroy(half) == ncclSuccess);

  /* Shrink away parent rank 0 (the rank that hosted the NCCL_COMM_ID root). */
  if (rank == EXCLUDED) {
    CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess);
  } else {
    int exclude[1] = {EXCLUDED};
    CHILD_CHECK(ncclCommShrink(comm, exclude, 1, &rest, NULL, NCCL_SHRINK_DEFAULT) == ncclSuccess);
    CHILD_CHECK(rest != NULL);
    CHILD_CHECK(check_shape(rest, n - 1, rank - 1) == 0);
    CHILD_CHECK(check_allgather(rest, 300) == 0);
    int rest_ranks[NRANKS - 1];
    for (int r = 0; r < n - 1; r++) rest_ranks[r] = r + 1;
    CHILD_CHECK(check_allreduce(rest, rest_ranks, 3) == 0);
    CHILD_CHECK(ncclCommDestroy(rest) == ncclSuccess);
    CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess);
  }
  CHILD_CHECK(check_nothing_left(fds, threads) == 0);
  sh->results[rank] = 1;
  return 0;
}

START_TEST(test_comm_id_split_shrink) {
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", fork_ranks_free_port());
  unit_set_param("NCCL_COMM_ID", addr);
  shared_t* sh =
      mmap(NULL, sizeof(shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  int fds = fork_ranks_count_fds(), threads = fork_ranks_count_threads();
  ck_assert_int_eq(fork_ranks_run(NRANKS, rank_split_shrink, sh, TIMEOUT_MS), 0);
  for (int r = 0; r < NRANKS; r++) {
    ck_assert_int_eq(sh->results[r], 1);
    ck_assert_mem_eq(&sh->ids[r], &sh->ids[0], sizeof(ncclUniqueId)); /* no id was exchanged */
  }
  /* The test process started no root of its own either. */
  ck_assert_int_eq(fork_ranks_count_fds(), fds);
  ck_assert_int_eq(fork_ranks_count_threads(), threads);
  munmap(sh, sizeof(*sh));
  unit_set_param("NCCL_COMM_ID", NULL);
}
END_TEST

/* bootstrap_root_create ignores NCCL_COMM_ID: each call is a fresh root (new magic, an ephemeral
 * port that is not the env port) whose thread serves one rank and exits; the user-visible id
 * still comes from the env. */
START_TEST(test_root_create_ignores_env) {
  int port = fork_ranks_free_port();
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", port);
  unit_set_param("NCCL_COMM_ID", addr);
  int fds = fork_ranks_count_fds(), threads = fork_ranks_count_threads();
  bootstrap_handle_t env, a, b;
  ck_assert_int_eq(bootstrap_get_unique_id(&env), ncclSuccess);
  ck_assert_int_eq(ntohs(env.addr.sin.sin_port), port);
  ck_assert_int_eq(fork_ranks_count_threads(), threads); /* the env id starts nothing */
  ck_assert_int_eq(bootstrap_root_create(&a), ncclSuccess);
  ck_assert_int_eq(bootstrap_root_create(&b), ncclSuccess);
  ck_assert_int_eq(fork_ranks_count_threads(), threads + 2);
  ck_assert_int_eq(a.addr.sa.sa_family, AF_INET);
  ck_assert_int_ne(ntohs(a.addr.sin.sin_port), 0);
  ck_assert_int_ne(ntohs(a.addr.sin.sin_port), port);
  ck_assert_int_ne(ntohs(b.addr.sin.sin_port), ntohs(a.addr.sin.sin_port));
  ck_assert_uint_ne(a.magic, env.magic);
  ck_assert_uint_ne(a.magic, b.magic);
  /* A one-rank communicator on each root: both roots serve it and exit. */
  bootstrap_handle_t* roots[2] = {&a, &b};
  for (int i = 0; i < 2; i++) {
    bootstrap_t* boot = NULL;
    ck_assert_int_eq(bootstrap_init(roots[i], 1, 0, 1, NULL, &boot), ncclSuccess);
    ck_assert_int_eq(bootstrap_nranks(boot), 1);
    ck_assert_int_eq(bootstrap_close(boot), ncclSuccess);
  }
  ck_assert_int_eq(check_nothing_left(fds, threads), 0);
  unit_set_param("NCCL_COMM_ID", NULL);
}
END_TEST

int main(void) {
  /* Host executor: several processes per machine must not share (and trip over) one GPU. */
  setenv("CUDA_VISIBLE_DEVICES", "", 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  Suite* s = suite_create("comm_id");
  TCase* tc = tcase_create("comm_id");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_root_create_ignores_env);
  tcase_add_test(tc, test_comm_id_split_shrink);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
