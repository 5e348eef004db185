/* Groups and the API around collectives: mixed operations on two communicators in one group,
 * nested groups, nonblocking communicators, ncclGroupSimulateEnd, argument checking (the
 * communicator stays usable), user reduction operators, memory allocation and registration. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

/* ---- Mixed operations on two communicators, one group
 * -------------------------------------------- */
static int mixed_body(itest_rank_t* r, void* arg) {
  (void)arg;
  int n = r->nranks, me = r->rank;
  itest_case_t cases[6] = {
      {.func = IT_ALLREDUCE, .dtype = ncclFloat32, .op = IT_SUM, .count = 10001, .seed = 1},
      {.func = IT_ALLGATHER, .dtype = ncclInt8, .count = 777, .seed = 2},
      {.func = IT_BROADCAST, .dtype = ncclFloat64, .count = 3001, .root = n - 1, .seed = 3},
      {.func = IT_REDUCESCATTER,
       .dtype = ncclBfloat16,
       .op = IT_MAX,
       .count = 501,
       .seed = 4,
       .inplace = true},
      {.func = IT_REDUCE,
       .dtype = ncclInt64,
       .op = IT_PREMUL_HOST,
       .count = 99,
       .root = 1,
       .seed = 5},
      {.func = IT_ALLTOALL, .dtype = ncclUint32, .count = 1000, .seed = 6},
  };
  itest_op_t ops[6];
  for (int i = 0; i < 6; i++)
    if (itest_op_prepare(&ops[i], r->comms[i % 2], &cases[i])) return 1;
  /* Plus a ring exchange by Send/Recv on the second communicator. */
  size_t pbytes = 123457;
  char* ps = malloc(pbytes);
  char* pd = calloc(1, pbytes);
  IT_EXPECT(ps && pd, "out of memory");
  itest_fill_bytes(ps, pbytes, me, 99, 0);
  IT_NCCL(ncclGroupStart());
  IT_NCCL(ncclGroupStart()); /* nesting: only the outermost end runs the group */
  for (int i = 0; i < 3; i++) IT_NCCL(itest_op_post(&ops[i]));
  IT_NCCL(ncclGroupEnd());
  for (int i = 3; i < 6; i++) IT_NCCL(itest_op_post(&ops[i]));
  /* After the AlltoAll on every rank: messages between a pair match in posting order. */
  IT_NCCL(ncclRecv(pd, pbytes, ncclChar, (me + n - 1) % n, r->comms[1], NULL));
  IT_NCCL(ncclSend(ps, pbytes, ncclChar, (me + 1) % n, r->comms[1], NULL));
  IT_NCCL(ncclGroupEnd());
  for (int i = 0; i < 6; i++) {
    if (itest_op_check(&ops[i])) return 1;
    itest_op_release(&ops[i]);
  }
  char* want = malloc(pbytes);
  IT_EXPECT(want != NULL, "out of memory");
  itest_fill_bytes(want, pbytes, (me + n - 1) % n, 99, 0);
  IT_EXPECT(memcmp(want, pd, pbytes) == 0, "ring exchange on the second communicator: wrong data");
  free(want);
  free(ps);
  free(pd);
  return 0;
}

START_TEST(test_mixed_two_comms) {
  itest_opts_t o = {.nranks = 4, .ncomms = 2, .timeout_s = 120};
  ck_assert_int_eq(itest_run(&o, mixed_body, NULL), 0);
}
END_TEST

/* ---- Several ranks of one communicator driven by one thread -----------------------------------
 */
typedef struct init_arg {
  ncclComm_t comm;
  ncclUniqueId id;
  int nranks, rank;
  ncclResult_t res;
} init_arg_t;

static void* init_thread(void* p) {
  init_arg_t* a = p;
  a->res = ncclCommInitRank(&a->comm, a->nranks, a->id, a->rank);
  return NULL;
}

static int one_thread_body(itest_rank_t* r, void* arg) {
  (void)arg;
  /* Every process holds ranks p and p + nprocs of one communicator; after init (on two threads),
   * one thread drives both ranks: only a group that runs them side by side can complete. */
  int nprocs = r->nranks, nranks = 2 * nprocs;
  init_arg_t ia[2];
  pthread_t th[2];
  int ranks[2] = {r->rank, r->rank + nprocs};
  for (int k = 0; k < 2; k++) {
    ia[k] = (init_arg_t){.id = r->ids[0], .nranks = nranks, .rank = ranks[k]};
    IT_EXPECT(pthread_create(&th[k], NULL, init_thread, &ia[k]) == 0, "pthread_create");
  }
  for (int k = 0; k < 2; k++) {
    pthread_join(th[k], NULL);
    IT_NCCL(ia[k].res);
  }
  ncclComm_t comms[2] = {ia[0].comm, ia[1].comm};
  size_t count = 4099;
  float* buf[2];
  for (int k = 0; k < 2; k++) {
    buf[k] = malloc(count * sizeof(float));
    IT_EXPECT(buf[k] != NULL, "out of memory");
    for (size_t i = 0; i < count; i++) buf[k][i] = (float)(ranks[k] + 1) * (float)(i % 7);
  }
  char* sb[2];
  char* rb[2];
  size_t pbytes = 1 << 20;
  for (int k = 0; k < 2; k++) {
    sb[k] = malloc(pbytes);
    rb[k] = calloc(1, pbytes);
    IT_EXPECT(sb[k] && rb[k], "out of memory");
    itest_fill_bytes(sb[k], pbytes, ranks[k], 5, 0);
  }
  IT_NCCL(ncclGroupStart());
  for (int k = 0; k < 2; k++) {
    IT_NCCL(ncclAllReduce(buf[k], buf[k], count, ncclFloat32, ncclSum, comms[k], NULL));
    /* and a shift by nprocs: my two ranks exchange with each other's partners */
    IT_NCCL(ncclSend(sb[k], pbytes, ncclUint8, (ranks[k] + nprocs) % nranks, comms[k], NULL));
    IT_NCCL(ncclRecv(rb[k], pbytes, ncclUint8, (ranks[k] + nprocs) % nranks, comms[k], NULL));
  }
  IT_NCCL(ncclGroupEnd());
  float total = (float)(nranks * (nranks + 1) / 2);
  char* want = malloc(pbytes);
  IT_EXPECT(want != NULL, "out of memory");
  for (int k = 0; k < 2; k++) {
    for (size_t i = 0; i < count; i++)
      IT_EXPECT(buf[k][i] == total * (float)(i % 7), "rank %d element %zu: %g, expected %g",
                ranks[k], i, buf[k][i], total * (float)(i % 7));
    itest_fill_bytes(want, pbytes, (ranks[k] + nprocs) % nranks, 5, 0);
    IT_EXPECT(memcmp(want, rb[k], pbytes) == 0, "rank %d: wrong data from rank %d", ranks[k],
              (ranks[k] + nprocs) % nranks);
    free(buf[k]);
    free(sb[k]);
    free(rb[k]);
  }
  free(want);
  for (int k = 0; k < 2; k++) IT_NCCL(ncclCommDestroy(comms[k]));
  return 0;
}

START_TEST(test_ranks_on_one_thread) {
  itest_opts_t o = {.nranks = 2, .no_init = true, .timeout_s = 60};
  ck_assert_int_eq(itest_run(&o, one_thread_body, NULL), 0);
}
END_TEST

/* ---- Nonblocking communicators ------------------------------------------------------------------
 */
static int wait_async(ncclComm_t comm, ncclResult_t* out) {
  double deadline = itest_now() + 60;
  ncclResult_t st = ncclInProgress;
  while (st == ncclInProgress && itest_now() < deadline) {
    IT_NCCL(ncclCommGetAsyncError(comm, &st));
    if (st == ncclInProgress) usleep(200);
  }
  *out = st;
  return 0;
}

static int nonblocking_body(itest_rank_t* r, void* arg) {
  (void)arg;
  ncclComm_t comm = r->comms[0];
  for (int round = 0; round < 3; round++) {
    itest_case_t cases[3] = {
        {.func = IT_ALLREDUCE,
         .dtype = ncclFloat16,
         .op = IT_AVG,
         .count = 20000 + round,
         .seed = 11},
        {.func = IT_ALLGATHER, .dtype = ncclUint64, .count = 3333, .seed = 12},
        {.func = IT_REDUCE, .dtype = ncclInt32, .op = IT_MIN, .count = 555, .root = 2, .seed = 13},
    };
    itest_op_t ops[3];
    for (int i = 0; i < 3; i++)
      if (itest_op_prepare(&ops[i], comm, &cases[i])) return 1;
    IT_NCCL(ncclGroupStart());
    for (int i = 0; i < 3; i++) {
      ncclResult_t res = itest_op_post(&ops[i]);
      IT_EXPECT(res == ncclSuccess, "posting in a group returned %d", (int)res);
    }
    ncclResult_t end = ncclGroupEnd();
    IT_EXPECT(end == ncclSuccess || end == ncclInProgress, "ncclGroupEnd returned %d", (int)end);
    ncclResult_t st;
    if (wait_async(comm, &st)) return 1;
    IT_EXPECT(st == ncclSuccess, "async state after the group: %d", (int)st);
    for (int i = 0; i < 3; i++) {
      if (itest_op_check(&ops[i])) return 1;
      itest_op_release(&ops[i]);
    }
    /* A single call outside a group: also nonblocking. */
    itest_case_t one = {
        .func = IT_BROADCAST, .dtype = ncclFloat32, .count = 70001, .root = 1, .seed = 14};
    itest_op_t o;
    if (itest_op_prepare(&o, comm, &one)) return 1;
    ncclResult_t res = itest_op_post(&o);
    IT_EXPECT(res == ncclSuccess || res == ncclInProgress, "ncclBroadcast returned %d", (int)res);
    if (wait_async(comm, &st)) return 1;
    IT_EXPECT(st == ncclSuccess, "async state after the call: %d", (int)st);
    if (itest_op_check(&o)) return 1;
    itest_op_release(&o);
  }
  return 0;
}

START_TEST(test_nonblocking_group) {
  itest_opts_t o = {.nranks = 3, .nonblocking = true, .timeout_s = 120};
  ck_assert_int_eq(itest_run(&o, nonblocking_body, NULL), 0);
}
END_TEST

/* ---- ncclGroupSimulateEnd ----------------------------------------------------------------------
 */
static int simulate_body(itest_rank_t* r, void* arg) {
  (void)arg;
  ncclComm_t comm = r->comms[0];
  size_t count = 1 << 16;
  float* buf = malloc(count * sizeof(float));
  IT_EXPECT(buf != NULL, "out of memory");
  for (size_t i = 0; i < count; i++) buf[i] = 1.0f;

  ncclSimInfo_t small = NCCL_SIM_INFO_INITIALIZER, big = NCCL_SIM_INFO_INITIALIZER;
  IT_NCCL(ncclGroupStart());
  IT_NCCL(ncclAllReduce(buf, buf, 16, ncclFloat32, ncclSum, comm, NULL));
  IT_NCCL(ncclGroupSimulateEnd(&small));
  IT_NCCL(ncclGroupStart());
  IT_NCCL(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL));
  IT_NCCL(ncclAllGather(buf, buf, count / 4, ncclFloat32, comm, NULL));
  IT_NCCL(ncclGroupSimulateEnd(&big));
  IT_EXPECT(small.estimatedTime > 0, "estimate of a small AllReduce: %g us", small.estimatedTime);
  IT_EXPECT(big.estimatedTime > small.estimatedTime,
            "256 KB AllReduce + AllGather estimated at %g us, "
            "not more than a 64-byte AllReduce (%g us)",
            big.estimatedTime, small.estimatedTime);
  for (size_t i = 0; i < count; i++)
    IT_EXPECT(buf[i] == 1.0f, "simulated operations ran: element %zu is %g", i, buf[i]);

  /* A simInfo not from NCCL_SIM_INFO_INITIALIZER is refused, and the group is gone. */
  ncclSimInfo_t bad = NCCL_SIM_INFO_INITIALIZER;
  bad.magic = 0;
  IT_NCCL(ncclGroupStart());
  IT_NCCL(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL));
  IT_EXPECT(ncclGroupSimulateEnd(&bad) == ncclInvalidArgument, "bad simInfo magic accepted");
  IT_EXPECT(ncclGroupSimulateEnd(&small) == ncclInvalidUsage, "simulate without a group accepted");
  for (size_t i = 0; i < count; i++) IT_EXPECT(buf[i] == 1.0f, "refused group ran");

  /* The communicator still works, and nothing simulated is left over. */
  IT_NCCL(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL));
  for (size_t i = 0; i < count; i++)
    IT_EXPECT(buf[i] == (float)r->nranks, "element %zu is %g after one AllReduce", i, buf[i]);
  free(buf);
  return 0;
}

START_TEST(test_simulate) {
  itest_opts_t o = {.nranks = 3, .timeout_s = 60};
  ck_assert_int_eq(itest_run(&o, simulate_body, NULL), 0);
}
END_TEST

/* Every operation kind's estimate is the simulator's: baton-sim (a virtual cluster of host ranks
 * running each rank's own real plan) predicts the same time for the same operation on the same
 * shape (3 host ranks on one host), and a 1 MiB operation takes longer than a 1 KiB one. */
typedef enum {
  SK_ALLREDUCE,
  SK_ALLGATHER,
  SK_REDUCESCATTER,
  SK_BROADCAST,
  SK_REDUCE,
  SK_SENDRECV,
  SK_ALLTOALL,
  SK_GATHER,
  SK_SCATTER,
  SK_COUNT
} sim_kind_t;
static const char* const sk_names[SK_COUNT] = {"allreduce", "allgather", "reducescatter",
                                               "broadcast", "reduce",    "sendrecv",
                                               "alltoall",  "gather",    "scatter"};

static ncclResult_t sk_post(sim_kind_t k, ncclComm_t comm, int rank, int n, float* buf,
                            size_t count) {
  float* out = buf + count * (size_t)n;
  switch (k) {
    case SK_ALLREDUCE:
      return ncclAllReduce(buf, out, count, ncclFloat32, ncclSum, comm, NULL);
    case SK_ALLGATHER:
      return ncclAllGather(buf, out, count, ncclFloat32, comm, NULL);
    case SK_REDUCESCATTER:
      return ncclReduceScatter(buf, out, count, ncclFloat32, ncclSum, comm, NULL);
    case SK_BROADCAST:
      return ncclBroadcast(buf, out, count, ncclFloat32, 1, comm, NULL);
    case SK_REDUCE:
      return ncclReduce(buf, out, count, ncclFloat32, ncclSum, 1, comm, NULL);
    case SK_SENDRECV: {
      ncclResult_t r = ncclSend(buf, count, ncclFloat32, (rank + 1) % n, comm, NULL);
      return r != ncclSuccess ? r
                              : ncclRecv(out, count, ncclFloat32, (rank + n - 1) % n, comm, NULL);
    }
    case SK_ALLTOALL:
      return ncclAlltoAll(buf, out, count, ncclFloat32, comm, NULL);
    case SK_GATHER:
      return ncclGather(buf, out, count, ncclFloat32, 0, comm, NULL);
    case SK_SCATTER:
      return ncclScatter(buf, out, count, ncclFloat32, 0, comm, NULL);
    default:
      return ncclInvalidArgument;
  }
}

/* baton-sim's predicted_us for kind k of count elements per rank (nccl-tests' sizes), or -1. */
static double sk_baton_sim(sim_kind_t k, int n, size_t count) {
  const char* dir = getenv("BATON_BINARY_DIR");
  if (dir == NULL) return -1;
  bool whole = k == SK_ALLGATHER || k == SK_REDUCESCATTER || k == SK_ALLTOALL || k == SK_GATHER ||
               k == SK_SCATTER;
  size_t bytes = count * sizeof(float) * (whole ? (size_t)n : 1);
  int root = k == SK_BROADCAST || k == SK_REDUCE || k == SK_SENDRECV ? 1 : 0;
  char cmd[512];
  snprintf(cmd, sizeof(cmd),
           "%s/tools/baton-sim --topo pcie4x4 --host-ranks %d --op %s --bytes %zu --root %d", dir,
           n, sk_names[k], bytes, root);
  FILE* p = popen(cmd, "r");
  if (p == NULL) return -1;
  char line[1024];
  double us = -1;
  while (fgets(line, sizeof(line), p) != NULL) {
    const char* f = strstr(line, " predicted_us=");
    if (strncmp(line, "op=", 3) == 0 && f != NULL) us = strtod(f + 14, NULL);
  }
  return pclose(p) == 0 ? us : -1;
}

static int simulate_kinds_body(itest_rank_t* r, void* arg) {
  (void)arg;
  ncclComm_t comm = r->comms[0];
  int n = r->nranks;
  size_t big = (size_t)1 << 18, small = 256; /* floats: 1 MiB and 1 KiB per rank */
  float* buf = calloc(big * (size_t)n * 2, sizeof(float));
  IT_EXPECT(buf != NULL, "out of memory");
  for (int k = 0; k < SK_COUNT; k++) {
    ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER, b = NCCL_SIM_INFO_INITIALIZER;
    IT_NCCL(ncclGroupStart());
    IT_NCCL(sk_post((sim_kind_t)k, comm, r->rank, n, buf, small));
    IT_NCCL(ncclGroupSimulateEnd(&s));
    IT_NCCL(ncclGroupStart());
    IT_NCCL(sk_post((sim_kind_t)k, comm, r->rank, n, buf, big));
    IT_NCCL(ncclGroupSimulateEnd(&b));
    IT_EXPECT(s.estimatedTime > 0 && b.estimatedTime > s.estimatedTime,
              "%s: 1 KiB estimated at %g us, 1 MiB at %g us", sk_names[k], s.estimatedTime,
              b.estimatedTime);
    /* A gather's or scatter's time is its root's: the others' estimates see only their part. */
    if ((k == SK_GATHER || k == SK_SCATTER) && r->rank != 0) continue;
    double want = sk_baton_sim((sim_kind_t)k, n, big);
    IT_EXPECT(want > 0, "%s: baton-sim gave no prediction", sk_names[k]);
    IT_EXPECT(fabs(b.estimatedTime / want - 1) < 0.05,
              "%s of 1 MiB: ncclGroupSimulateEnd %g us, baton-sim %g us", sk_names[k],
              b.estimatedTime, want);
  }
  for (size_t i = 0; i < big * (size_t)n * 2; i++)
    IT_EXPECT(buf[i] == 0.0f, "a simulated operation ran: element %zu is %g", i, buf[i]);
  free(buf);
  return 0;
}

START_TEST(test_simulate_every_kind) {
  itest_opts_t o = {.nranks = 3, .timeout_s = 120};
  ck_assert_int_eq(itest_run(&o, simulate_kinds_body, NULL), 0);
}
END_TEST

/* ---- Argument checks ----------------------------------------------------------------------------
 */
static int expect_invalid(ncclComm_t comm, ncclResult_t res, const char* word, const char* what) {
  IT_EXPECT(res == ncclInvalidArgument, "%s: returned %d, expected ncclInvalidArgument", what,
            (int)res);
  const char* msg = ncclGetLastError(comm);
  IT_EXPECT(msg != NULL && strstr(msg, word) != NULL, "%s: last error \"%s\" does not name %s",
            what, msg ? msg : "(null)", word);
  return 0;
}

static int args_body(itest_rank_t* r, void* arg) {
  (void)arg;
  ncclComm_t comm = r->comms[0];
  int n = r->nranks;
  float buf[64] = {0};
  ncclComm_t c = comm;
#define BAD(call, word) \
  if (expect_invalid(c, (call), word, #call)) return 1
  BAD(ncclAllReduce(NULL, buf, 4, ncclFloat32, ncclSum, c, NULL), "sendbuff");
  BAD(ncclAllReduce(buf, NULL, 4, ncclFloat32, ncclSum, c, NULL), "recvbuff");
  BAD(ncclAllReduce(buf, buf, 4, (ncclDataType_t)12, ncclSum, c, NULL), "datatype");
  BAD(ncclAllReduce(buf, buf, 4, (ncclDataType_t)-1, ncclSum, c, NULL), "datatype");
  BAD(ncclAllReduce(buf, buf, 4, ncclFloat32, (ncclRedOp_t)ncclNumOps, c, NULL), "op");
  BAD(ncclAllReduce(buf, buf, 4, ncclFloat32, (ncclRedOp_t)-3, c, NULL), "op");
  BAD(ncclReduce(buf, buf, 4, ncclFloat32, ncclSum, n, c, NULL), "root");
  BAD(ncclReduce(buf, buf, 4, ncclFloat32, ncclSum, -1, c, NULL), "root");
  BAD(ncclBroadcast(buf, buf, 4, ncclFloat32, n + 5, c, NULL), "root");
  BAD(ncclBcast(NULL, 4, ncclFloat32, 0, c, NULL), "buff");
  BAD(ncclGather(buf, buf, 1, ncclFloat32, n, c, NULL), "root");
  BAD(ncclScatter(buf, buf, 1, ncclFloat32, -2, c, NULL), "root");
  BAD(ncclAllGather(buf, NULL, 1, ncclFloat32, c, NULL), "recvbuff");
  BAD(ncclReduceScatter(NULL, buf, 1, ncclFloat32, ncclMax, c, NULL), "sendbuff");
  BAD(ncclAlltoAll(buf, buf, 1, (ncclDataType_t)99, c, NULL), "datatype");
  BAD(ncclSend(buf, 4, ncclFloat32, n, c, NULL), "peer");
  BAD(ncclRecv(buf, 4, ncclFloat32, -1, c, NULL), "peer");
  BAD(ncclSend(NULL, 4, ncclFloat32, 0, c, NULL), "sendbuff");
  c = NULL; /* the error is the thread's (ncclGetLastError(NULL)) */
  BAD(ncclAllReduce(buf, buf, 4, ncclFloat32, ncclSum, NULL, NULL), "comm");
  c = comm;
  /* NULL buffers are fine with count 0. */
  IT_NCCL(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, c, NULL));
  IT_NCCL(ncclBroadcast(NULL, NULL, 0, ncclFloat32, 0, c, NULL));

  /* User operators: destroyed, unknown, wrong datatype. */
  float scalar = 2.0f;
  ncclRedOp_t op;
  IT_NCCL(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, c));
  IT_EXPECT((int)op >= (int)ncclNumOps, "user op value %d", (int)op);
  BAD(ncclAllReduce(buf, buf, 4, ncclFloat64, op, c, NULL), "op");
  IT_NCCL(ncclRedOpDestroy(op, c));
  BAD(ncclAllReduce(buf, buf, 4, ncclFloat32, op, c, NULL), "op");
  BAD(ncclRedOpDestroy(op, c), "op");
  BAD(ncclRedOpDestroy(ncclSum, c), "op");
  BAD(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, (ncclScalarResidence_t)5, c),
      "residence");

  /* Inside a group, a bad call fails the group: nothing of it runs. */
  for (int i = 0; i < 64; i++) buf[i] = 1.0f;
  IT_NCCL(ncclGroupStart());
  IT_NCCL(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, c, NULL));
  BAD(ncclAllReduce(buf, NULL, 4, ncclFloat32, ncclSum, c, NULL), "recvbuff");
  IT_EXPECT(ncclGroupEnd() == ncclInvalidArgument, "group with a bad call did not fail");
  for (int i = 0; i < 64; i++) IT_EXPECT(buf[i] == 1.0f, "failed group ran");
  IT_EXPECT(ncclGroupEnd() == ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart accepted");

  /* The communicator is still usable. */
  IT_NCCL(ncclAllReduce(buf, buf, 64, ncclFloat32, ncclSum, c, NULL));
  for (int i = 0; i < 64; i++)
    IT_EXPECT(buf[i] == (float)n, "element %d is %g after the checks", i, buf[i]);
#undef BAD
  return 0;
}

START_TEST(test_argument_checks) {
  itest_opts_t o = {.nranks = 2, .timeout_s = 60};
  ck_assert_int_eq(itest_run(&o, args_body, NULL), 0);
}
END_TEST

/* ---- User operators: many, reused slots, device scalar read at run time ------------------------
 */
static int redop_body(itest_rank_t* r, void* arg) {
  (void)arg;
  ncclComm_t comm = r->comms[0];
  int n = r->nranks;
  ncclRedOp_t ops[40];
  double scalars[40];
  for (int k = 0; k < 40; k++) {
    scalars[k] = (double)(k % 5) + 0.5;
    IT_NCCL(
        ncclRedOpCreatePreMulSum(&ops[k], &scalars[k], ncclFloat64, ncclScalarHostImmediate, comm));
    for (int j = 0; j < k; j++)
      IT_EXPECT(ops[j] != ops[k], "user ops %d and %d share value %d", j, k, (int)ops[k]);
  }
  double buf[5];
  for (int k = 0; k < 40; k += 7) {
    for (int i = 0; i < 5; i++) buf[i] = (double)(r->rank + i);
    IT_NCCL(ncclAllReduce(buf, buf, 5, ncclFloat64, ops[k], comm, NULL));
    for (int i = 0; i < 5; i++) {
      double want = scalars[k] * ((double)n * (n - 1) / 2 + (double)n * i);
      IT_EXPECT(buf[i] == want, "op %d element %d: %g, expected %g", k, i, buf[i], want);
    }
  }
  for (int k = 0; k < 40; k += 2) IT_NCCL(ncclRedOpDestroy(ops[k], comm));
  ncclRedOp_t again;
  double s = 3;
  IT_NCCL(ncclRedOpCreatePreMulSum(&again, &s, ncclFloat64, ncclScalarHostImmediate, comm));
  for (int i = 0; i < 5; i++) buf[i] = 1;
  IT_NCCL(ncclAllReduce(buf, buf, 5, ncclFloat64, again, comm, NULL));
  IT_EXPECT(buf[0] == 3.0 * n, "reused slot: %g", buf[0]);
  IT_NCCL(ncclRedOpDestroy(again, comm));
  for (int k = 1; k < 40; k += 2) IT_NCCL(ncclRedOpDestroy(ops[k], comm));
  return 0;
}

START_TEST(test_user_ops) {
  itest_opts_t o = {.nranks = 3, .timeout_s = 60};
  ck_assert_int_eq(itest_run(&o, redop_body, NULL), 0);
}
END_TEST

/* ---- ncclMemAlloc and registration -------------------------------------------------------------
 */
static int mem_body(itest_rank_t* r, void* arg) {
  (void)arg;
  ncclComm_t comm = r->comms[0];
  size_t count = 100001;
  float* buf = NULL;
  IT_NCCL(ncclMemAlloc((void**)&buf, count * sizeof(float)));
  IT_EXPECT(buf != NULL && ((uintptr_t)buf % 4096) == 0, "ncclMemAlloc returned %p", (void*)buf);
  void* handle = NULL;
  ncclWindow_t win = NULL;
  IT_NCCL(ncclCommRegister(comm, buf, count * sizeof(float), &handle));
  IT_NCCL(ncclCommWindowRegister(comm, buf, count * sizeof(float), &win, NCCL_WIN_COLL_SYMMETRIC));
  for (size_t i = 0; i < count; i++) buf[i] = (float)(i % 13);
  IT_NCCL(ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL));
  for (size_t i = 0; i < count; i++)
    IT_EXPECT(buf[i] == (float)(r->nranks * (int)(i % 13)), "element %zu: %g", i, buf[i]);
  IT_EXPECT(ncclCommDeregister(comm, (void*)buf) == ncclInvalidArgument, "bogus handle accepted");
  IT_NCCL(ncclCommWindowDeregister(comm, win));
  IT_NCCL(ncclCommDeregister(comm, handle));
  IT_NCCL(ncclMemFree(buf));
  IT_EXPECT(ncclMemAlloc(NULL, 16) == ncclInvalidArgument, "NULL ptr accepted");
  return 0;
}

START_TEST(test_mem_and_registration) {
  itest_opts_t o = {.nranks = 2, .timeout_s = 60};
  ck_assert_int_eq(itest_run(&o, mem_body, NULL), 0);
}
END_TEST

static Suite* group_suite(void) {
  Suite* s = suite_create("coll_group");
  TCase* tc = tcase_create("group");
  tcase_set_timeout(tc, 200);
  tcase_add_test(tc, test_mixed_two_comms);
  tcase_add_test(tc, test_ranks_on_one_thread);
  tcase_add_test(tc, test_nonblocking_group);
  tcase_add_test(tc, test_simulate);
  tcase_add_test(tc, test_simulate_every_kind);
  tcase_add_test(tc, test_argument_checks);
  tcase_add_test(tc, test_user_ops);
  tcase_add_test(tc, test_mem_and_registration);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(group_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
