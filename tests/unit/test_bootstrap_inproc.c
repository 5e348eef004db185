/* The in-process bootstrap (src/bootstrap/inproc.c): many ranks on threads of this process join one
 * world, allgather (several in a row, of different sizes), send and receive in every order, run a
 * barrier and subset operations; a wrong size, a rank that joins twice, an id from nowhere, an
 * abort and a rank that never comes fail cleanly. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>

#include "bootstrap/bootstrap.h"
#include "unit.h"

#define MANY 256

typedef struct rank_arg {
  bootstrap_handle_t handle;
  int rank, nranks;
  volatile uint32_t* abort_flag;
  ncclResult_t res;
  int errors; /* wrong values seen */
} rank_arg_t;

typedef void* (*rank_fn)(void*);

static void run_ranks(int n, rank_fn fn, rank_arg_t* args, const bootstrap_handle_t* h,
                      volatile uint32_t* abort_flag) {
  pthread_t* t = calloc((size_t)n, sizeof(*t));
  ck_assert_ptr_nonnull(t);
  for (int r = 0; r < n; r++) {
    args[r] = (rank_arg_t){.handle = *h, .rank = r, .nranks = n, .abort_flag = abort_flag};
    ck_assert_int_eq(pthread_create(&t[r], NULL, fn, &args[r]), 0);
  }
  for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
  free(t);
}

/* Value rank `from` contributes at slot word i of allgather round k. */
static uint64_t gather_value(int from, int k, int i) {
  return (uint64_t)from * 1000003u + (uint64_t)k * 7919u + (uint64_t)i;
}

/* Three allgathers of growing size, a message to every other rank with two tags (sent in rank
 * order, received in reverse order), a barrier, and a subset broadcast and allgather over the
 * even ranks. */
static void* rank_full(void* p) {
  rank_arg_t* a = p;
  bootstrap_t* b = NULL;
  a->res = bootstrap_init(&a->handle, 1, a->rank, a->nranks, NULL, &b);
  if (a->res != ncclSuccess) return NULL;
  int n = a->nranks, me = a->rank;
  if (!bootstrap_is_inproc(b) || bootstrap_peer_addr(b, me) != NULL) a->errors++;
  for (int k = 0; k < 3 && a->res == ncclSuccess; k++) {
    int words = 1 + 5 * k;
    uint64_t* all = calloc((size_t)n * (size_t)words, sizeof(uint64_t));
    for (int i = 0; i < words; i++) all[(size_t)me * words + i] = gather_value(me, k, i);
    a->res = bootstrap_allgather(b, all, (size_t)words * sizeof(uint64_t));
    for (int r = 0; r < n && a->res == ncclSuccess; r++)
      for (int i = 0; i < words; i++)
        if (all[(size_t)r * words + i] != gather_value(r, k, i)) a->errors++;
    free(all);
  }
  for (int tag = 1; tag <= 2 && a->res == ncclSuccess; tag++)
    for (int r = 0; r < n && a->res == ncclSuccess; r++) {
      int v = me * 10 + tag;
      a->res = bootstrap_send(b, r, tag, &v, sizeof(v));
    }
  for (int tag = 2; tag >= 1 && a->res == ncclSuccess; tag--)
    for (int r = n - 1; r >= 0 && a->res == ncclSuccess; r--) {
      int v = -1;
      a->res = bootstrap_recv(b, r, tag, &v, sizeof(v));
      if (v != r * 10 + tag) a->errors++;
    }
  if (a->res == ncclSuccess) a->res = bootstrap_barrier(b, 77);
  if (a->res == ncclSuccess && me % 2 == 0) {
    int m = (n + 1) / 2;
    int* even = calloc((size_t)m, sizeof(int));
    for (int i = 0; i < m; i++) even[i] = 2 * i;
    uint64_t word = me == 2 * (m - 1) ? 0xabcdefull : 0; /* the last even rank is the root */
    a->res = bootstrap_subset_bcast(b, even, m, me / 2, m - 1, 88, &word, sizeof(word));
    if (word != 0xabcdefull) a->errors++;
    int* got = calloc((size_t)m, sizeof(int));
    got[me / 2] = me + 5;
    if (a->res == ncclSuccess)
      a->res = bootstrap_subset_allgather(b, even, m, me / 2, 89, got, sizeof(int));
    for (int i = 0; i < m && a->res == ncclSuccess; i++)
      if (got[i] != 2 * i + 5) a->errors++;
    free(got);
    free(even);
  }
  /* Nobody leaves while another rank may still send to it. */
  if (a->res == ncclSuccess) a->res = bootstrap_barrier(b, 78);
  ncclResult_t r = bootstrap_close(b);
  if (a->res == ncclSuccess) a->res = r;
  return NULL;
}

static void check_all(const rank_arg_t* args, int n) {
  for (int r = 0; r < n; r++) {
    ck_assert_msg(args[r].res == ncclSuccess, "rank %d: result %d", r, args[r].res);
    ck_assert_msg(args[r].errors == 0, "rank %d saw %d wrong values", r, args[r].errors);
  }
}

START_TEST(test_many_ranks) {
  for (int n = 1; n <= MANY; n *= 4) {
    bootstrap_handle_t h;
    ck_assert_int_eq(bootstrap_inproc_id(&h), ncclSuccess);
    ck_assert(bootstrap_handle_is_inproc(&h));
    rank_arg_t* args = calloc((size_t)n, sizeof(*args));
    run_ranks(n, rank_full, args, &h, NULL);
    check_all(args, n);
    free(args);
  }
}
END_TEST

START_TEST(test_ids_distinct) {
  bootstrap_handle_t a, b;
  ck_assert_int_eq(bootstrap_inproc_id(&a), ncclSuccess);
  ck_assert_int_eq(bootstrap_inproc_id(&b), ncclSuccess);
  ck_assert(a.magic != b.magic);
  bootstrap_handle_t zero;
  memset(&zero, 0, sizeof(zero));
  ck_assert(!bootstrap_handle_is_inproc(&zero));
}
END_TEST

/* Rank 0 allgathers 8 bytes, rank 1 16: both fail, neither hangs. */
static void* rank_mismatch(void* p) {
  rank_arg_t* a = p;
  bootstrap_t* b = NULL;
  a->res = bootstrap_init(&a->handle, 1, a->rank, a->nranks, NULL, &b);
  if (a->res != ncclSuccess) return NULL;
  uint64_t buf[4] = {0};
  a->res = bootstrap_allgather(b, buf, a->rank == 0 ? 8 : 16);
  bootstrap_close(b);
  return NULL;
}

START_TEST(test_size_mismatch) {
  char dir[] = "/tmp/inproc_mismatch_XXXXXX";
  unit_sandbox_enter(dir);
  unit_set_param("NCCL_BOOTSTRAP_TIMEOUT_MS", "1000");
  bootstrap_handle_t h;
  ck_assert_int_eq(bootstrap_inproc_id(&h), ncclSuccess);
  rank_arg_t args[2];
  run_ranks(2, rank_mismatch, args, &h, NULL);
  ck_assert(args[0].res != ncclSuccess || args[1].res != ncclSuccess);
  unit_sandbox_leave(dir);
}
END_TEST

START_TEST(test_bad_joins) {
  char dir[] = "/tmp/inproc_joins_XXXXXX";
  unit_sandbox_enter(dir);
  bootstrap_handle_t h;
  ck_assert_int_eq(bootstrap_inproc_id(&h), ncclSuccess);
  bootstrap_t* b0 = NULL;
  bootstrap_t* again = NULL;
  bootstrap_t* other = NULL;
  ck_assert_int_eq(bootstrap_init(&h, 1, 0, 2, NULL, &b0), ncclSuccess);
  ck_assert_int_eq(bootstrap_init(&h, 1, 0, 2, NULL, &again), ncclInvalidUsage); /* twice */
  ck_assert_int_eq(bootstrap_init(&h, 1, 1, 3, NULL, &other), ncclInvalidUsage); /* size */
  bootstrap_handle_t stranger = h;
  stranger.magic ^= 0x5555;
  ck_assert_int_eq(bootstrap_init(&stranger, 1, 0, 2, NULL, &other), ncclInvalidArgument);
  bootstrap_close(b0);
  unit_sandbox_leave(dir);
}
END_TEST

/* Rank 1 never joins: rank 0's send and allgather give up at the timeout, or at once on abort. */
START_TEST(test_missing_rank) {
  char dir[] = "/tmp/inproc_missing_XXXXXX";
  unit_sandbox_enter(dir);
  unit_set_param("NCCL_BOOTSTRAP_TIMEOUT_MS", "300");
  bootstrap_handle_t h;
  ck_assert_int_eq(bootstrap_inproc_id(&h), ncclSuccess);
  bootstrap_t* b = NULL;
  volatile uint32_t flag = 0;
  ck_assert_int_eq(bootstrap_init(&h, 1, 0, 2, &flag, &b), ncclSuccess);
  int v = 1;
  ck_assert_int_eq(bootstrap_send(b, 1, 5, &v, sizeof(v)), ncclRemoteError);
  uint64_t words[2] = {0};
  ck_assert_int_eq(bootstrap_allgather(b, words, sizeof(words[0])), ncclRemoteError);
  flag = 1;
  ck_assert_int_eq(bootstrap_recv(b, 1, 5, &v, sizeof(v)), ncclInternalError);
  bootstrap_close(b);
  unit_sandbox_leave(dir);
}
END_TEST

int main(void) {
  Suite* s = suite_create("bootstrap_inproc");
  TCase* tc = tcase_create("inproc");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_many_ranks);
  tcase_add_test(tc, test_ids_distinct);
  tcase_add_test(tc, test_size_mismatch);
  tcase_add_test(tc, test_bad_joins);
  tcase_add_test(tc, test_missing_rank);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
