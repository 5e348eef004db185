/* The collective and point-to-point entry points' argument checks, on the host executor:
 *  - counts whose buffers cannot exist (more than PTRDIFF_MAX bytes, counting the rank factor of
 *    AllGather, ReduceScatter, AlltoAll, Gather and Scatter, or wrapping around the address
 *    space) are refused with ncclInvalidArgument and a WARN naming the count, on every entry
 *    point, before anything is queued: the buffers stay untouched and the group still runs;
 *  - a fuzz of every entry point with random datatypes, operators, roots, counts and buffers:
 *    each call's result is what the rules (written here, apart from the library) say, a refused
 *    call leaves the buffers alone, and the communicators keep working. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "collectives/collectives.h"
#include "core/core.h"
#include "unit.h"

#define BUF_ELEMS \
  4096 /* every valid call fits: count <= 64 elements of at most 8 bytes, x 2 ranks */

typedef enum {
  E_ALLREDUCE = 0,
  E_BROADCAST,
  E_BCAST,
  E_REDUCE,
  E_ALLGATHER,
  E_REDUCESCATTER,
  E_ALLTOALL,
  E_GATHER,
  E_SCATTER,
  E_SEND,
  E_RECV,
  E_COUNT
} entry_t;

static const char* const entry_names[E_COUNT] = {
    "ncclAllReduce", "ncclBroadcast",     "ncclBcast",    "ncclReduce",
    "ncclAllGather", "ncclReduceScatter", "ncclAlltoAll", "ncclGather",
    "ncclScatter",   "ncclSend",          "ncclRecv"};

static ncclResult_t call_entry(entry_t e, const void* sb, void* rb, size_t count, int dt, int op,
                               int root, ncclComm_t comm) {
  ncclDataType_t t = (ncclDataType_t)dt;
  ncclRedOp_t o = (ncclRedOp_t)op;
  switch (e) {
    case E_ALLREDUCE:
      return ncclAllReduce(sb, rb, count, t, o, comm, NULL);
    case E_BROADCAST:
      return ncclBroadcast(sb, rb, count, t, root, comm, NULL);
    case E_BCAST:
      return ncclBcast(rb, count, t, root, comm, NULL);
    case E_REDUCE:
      return ncclReduce(sb, rb, count, t, o, root, comm, NULL);
    case E_ALLGATHER:
      return ncclAllGather(sb, rb, count, t, comm, NULL);
    case E_REDUCESCATTER:
      return ncclReduceScatter(sb, rb, count, t, o, comm, NULL);
    case E_ALLTOALL:
      return ncclAlltoAll(sb, rb, count, t, comm, NULL);
    case E_GATHER:
      return ncclGather(sb, rb, count, t, root, comm, NULL);
    case E_SCATTER:
      return ncclScatter(sb, rb, count, t, root, comm, NULL);
    case E_SEND:
      return ncclSend(sb, count, t, root, comm, NULL);
    default:
      return ncclRecv(rb, count, t, root, comm, NULL);
  }
}

static size_t type_size(int dt) {
  static const size_t sizes[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return dt >= 0 && dt < ncclNumTypes ? sizes[dt] : 0;
}

/* Elements of the largest buffer per unit of count. */
static size_t rank_factor(entry_t e, int nranks) {
  return e == E_ALLGATHER || e == E_REDUCESCATTER || e == E_ALLTOALL || e == E_GATHER ||
                 e == E_SCATTER
             ? (size_t)nranks
             : 1;
}

static bool all_bytes(const unsigned char* p, size_t n, unsigned char v) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != v) return false;
  return true;
}

/* ---- Counts no buffer can have ------------------------------------------------------------------
 */
static void check_huge_counts(ncclComm_t comm) {
  int nranks = comm->nranks;
  unsigned char* sb = malloc(256);
  unsigned char* rb = malloc(256);
  ck_assert(sb && rb);
  for (int e = 0; e < E_COUNT; e++) {
    int peer = e == E_SEND || e == E_RECV ? comm->rank : 0;
    const size_t counts[3][2] = {
        {(size_t)ncclFloat32, SIZE_MAX / 2 + 1},
        {(size_t)ncclInt8, SIZE_MAX},
        {(size_t)ncclFloat64, (size_t)PTRDIFF_MAX / 8 / rank_factor(e, nranks) + 1}};
    for (int k = 0; k < 3; k++) {
      int dt = (int)counts[k][0];
      size_t count = counts[k][1];
      memset(sb, 0xa5, 256);
      memset(rb, 0x5a, 256);
      log_clear_last_error();
      ncclResult_t res = call_entry(e, sb, rb, count, dt, ncclSum, peer, comm);
      ck_assert_msg(res == ncclInvalidArgument, "%s count %zu type %d: %d", entry_names[e], count,
                    dt, (int)res);
      const char* err = ncclGetLastError(comm);
      const char* name = e == E_ALLGATHER       ? "invalid sendcount"
                         : e == E_REDUCESCATTER ? "invalid recvcount"
                                                : "invalid count";
      ck_assert_msg(strstr(err, name) != NULL && strstr(err, entry_names[e]) != NULL,
                    "%s: the WARN does not name the count: %s", entry_names[e], err);
      ck_assert(all_bytes(sb, 256, 0xa5) && all_bytes(rb, 256, 0x5a));
    }
  }
  /* A buffer that would wrap around the address space. */
  log_clear_last_error();
  void* high = (void*)(UINTPTR_MAX - 1023);
  ck_assert_int_eq(ncclAllReduce(high, high, 1024, ncclFloat32, ncclSum, comm, NULL),
                   ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(ncclGetLastError(comm), "wraps around the address space"));
  /* In a group: the refused call fails the group, and nothing of it runs. */
  float* a = calloc(64, sizeof(float));
  ck_assert_ptr_nonnull(a);
  for (int i = 0; i < 64; i++) a[i] = 1.0f;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclAllReduce(a, a, 64, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclAllReduce(a, a, SIZE_MAX / 4, ncclFloat32, ncclSum, comm, NULL),
                   ncclInvalidArgument);
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidArgument);
  ck_assert(a[0] == 1.0f); /* the group's first AllReduce did not run either */
  free(a);
  free(sb);
  free(rb);
}

START_TEST(test_huge_counts_one_rank) {
  ncclComm_t comm = unit_one_rank_comm();
  check_huge_counts(comm);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* Two ranks of one process: the rank factor matters (the same count is fine on one rank). */
typedef struct pair_run {
  ncclComm_t comm;
  int ok;
} pair_run_t;

static void* pair_main(void* p) {
  pair_run_t* r = p;
  check_huge_counts(r->comm);
  /* The communicators still work: an AllReduce over both. */
  float v[8];
  for (int i = 0; i < 8; i++) v[i] = (float)(r->comm->rank + 1);
  r->ok =
      ncclAllReduce(v, v, 8, ncclFloat32, ncclSum, r->comm, NULL) == ncclSuccess && v[7] == 3.0f;
  return NULL;
}

START_TEST(test_huge_counts_two_ranks) {
  ncclComm_t comms[2];
  ck_assert_int_eq(ncclCommInitAll(comms, 2, NULL), ncclSuccess);
  pair_run_t runs[2] = {{.comm = comms[0]}, {.comm = comms[1]}};
  pthread_t t[2];
  for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, pair_main, &runs[i]);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
  ck_assert(runs[0].ok && runs[1].ok);
  for (int i = 0; i < 2; i++) ck_assert_int_eq(ncclCommDestroy(comms[i]), ncclSuccess);
}
END_TEST

/* ---- Fuzz ---------------------------------------------------------------------------------------
 */
static uint64_t rng_next(uint64_t* s) {
  *s ^= *s << 13;
  *s ^= *s >> 7;
  *s ^= *s << 17;
  return *s;
}

static bool entry_reduces(entry_t e) {
  return e == E_ALLREDUCE || e == E_REDUCE || e == E_REDUCESCATTER;
}
static bool entry_rooted(entry_t e) {
  return e == E_BROADCAST || e == E_BCAST || e == E_REDUCE || e == E_GATHER || e == E_SCATTER ||
         e == E_SEND || e == E_RECV;
}

/* What the rules say about a call on a one-rank communicator. */
static ncclResult_t expected(entry_t e, const void* sb, const void* rb, size_t count, int dt,
                             int op, int root) {
  size_t es = type_size(dt);
  if (es == 0) return ncclInvalidArgument;
  if (entry_rooted(e) && (root < 0 || root >= 1)) return ncclInvalidArgument;
  if (entry_reduces(e) && (op < 0 || op >= ncclNumOps)) return ncclInvalidArgument;
  if (count > (size_t)PTRDIFF_MAX / es) return ncclInvalidArgument;
  if (count == 0) return ncclSuccess;
  bool needs_send = e != E_RECV && e != E_BCAST;
  bool needs_recv = e != E_SEND;
  if ((needs_send && sb == NULL) || (needs_recv && rb == NULL)) return ncclInvalidArgument;
  return ncclSuccess;
}

START_TEST(test_fuzz_entry_points) {
  ncclComm_t comm = unit_one_rank_comm();
  unsigned char* sb = malloc(BUF_ELEMS * 8);
  unsigned char* rb = malloc(BUF_ELEMS * 8);
  ck_assert(sb && rb);
  uint64_t seed = 0x9e3779b97f4a7c15ull;
  int refused = 0, ran = 0;
  for (int it = 0; it < 3000; it++) {
    entry_t e = (entry_t)(rng_next(&seed) % E_COUNT);
    int dt = (int)(rng_next(&seed) % 16) - 2;  /* -2 .. 13 */
    int op = (int)(rng_next(&seed) % 9) - 2;   /* -2 .. 6 */
    int root = (int)(rng_next(&seed) % 5) - 2; /* -2 .. 2 */
    size_t count;
    switch (rng_next(&seed) % 4) {
      case 0:
        count = 0;
        break;
      case 1:
      case 2:
        count = rng_next(&seed) % 65; /* small: fits the buffers */
        break;
      default: /* beyond any buffer: huge, or just past the limit of its type */
        count = type_size(dt) ? (size_t)PTRDIFF_MAX / type_size(dt) + 1 + rng_next(&seed) % 1000
                              : rng_next(&seed);
        if (count < 65) count = SIZE_MAX - count;
    }
    const void* s = rng_next(&seed) % 8 == 0 ? NULL : sb;
    void* r = rng_next(&seed) % 8 == 0 ? NULL : rb;
    if (e == E_BCAST) s = r;
    ncclResult_t want = expected(e, s, r, count, dt, op, root);
    memset(sb, 0x11, BUF_ELEMS * 8);
    memset(rb, 0x22, BUF_ELEMS * 8);
    /* Send and receive to self must pair up: post both in a group. */
    ncclResult_t got;
    if (e == E_SEND || e == E_RECV) {
      ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
      got = call_entry(e, s, r, count, dt, op, root, comm);
      ncclResult_t other = ncclSuccess;
      if (got == ncclSuccess)
        other = call_entry(e == E_SEND ? E_RECV : E_SEND, sb, rb, count, dt, op, root, comm);
      ncclResult_t end = ncclGroupEnd();
      ck_assert_int_eq(other, ncclSuccess);
      ck_assert_msg(end == got, "group end %d after %d", (int)end, (int)got);
    } else {
      got = call_entry(e, s, r, count, dt, op, root, comm);
    }
    ck_assert_msg(
        got == want,
        "it %d: %s(count %zu, type %d, op %d, root %d, send %p, recv %p) = %d, expected %d", it,
        entry_names[e], count, dt, op, root, s, (void*)r, (int)got, (int)want);
    if (got != ncclSuccess) {
      refused++;
      ck_assert_msg(all_bytes(sb, BUF_ELEMS * 8, 0x11) && all_bytes(rb, BUF_ELEMS * 8, 0x22),
                    "it %d: a refused %s wrote a buffer", it, entry_names[e]);
      ck_assert_msg(ncclGetLastError(comm)[0] != '\0', "it %d: refused without a WARN", it);
    } else {
      ran++;
    }
  }
  ck_assert_int_gt(refused, 500);
  ck_assert_int_gt(ran, 200);
  /* Still usable. */
  float v[4] = {1, 2, 3, 4};
  ck_assert_int_eq(ncclAllReduce(v, v, 4, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
  ck_assert(v[3] == 4.0f);
  free(sb);
  free(rb);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* An empty collective is discarded once its arguments pass, as stock discards it: inside a group
 * a count-0 call of every collective entry point leaves no task, a bad argument is still refused,
 * and a 0-byte send and receive are still tasks (a peer may wait for them). */
START_TEST(test_empty_collectives_discarded) {
  ncclComm_t comm = unit_one_rank_comm();
  struct coll_comm* cc = coll_of(comm);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  for (int e = 0; e < E_COUNT; e++) {
    if (e == E_SEND || e == E_RECV) continue;
    ncclResult_t r = call_entry((entry_t)e, NULL, NULL, 0, ncclFloat32, ncclSum, 0, comm);
    ck_assert_msg(r == ncclSuccess, "%s of count 0: %d", entry_names[e], (int)r);
  }
  ck_assert_int_eq(cc->pending.n, 0);
  ck_assert_int_eq(call_entry(E_SEND, NULL, NULL, 0, ncclFloat32, ncclSum, 0, comm), ncclSuccess);
  ck_assert_int_eq(call_entry(E_RECV, NULL, NULL, 0, ncclFloat32, ncclSum, 0, comm), ncclSuccess);
  ck_assert_int_eq(cc->pending.n, 2);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  ck_assert_int_eq(ncclAllReduce(NULL, NULL, 0, (ncclDataType_t)99, ncclSum, comm, NULL),
                   ncclInvalidArgument);
  ck_assert_int_eq(ncclReduce(NULL, NULL, 0, ncclFloat32, ncclSum, 5, comm, NULL),
                   ncclInvalidArgument);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

int main(void) {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  Suite* s = suite_create("enqueue_args");
  TCase* tc = tcase_create("args");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_huge_counts_one_rank);
  tcase_add_test(tc, test_huge_counts_two_ranks);
  tcase_add_test(tc, test_fuzz_entry_points);
  tcase_add_test(tc, test_empty_collectives_discarded);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
