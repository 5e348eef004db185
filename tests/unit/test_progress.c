/* Progress accounting and the hang report's verdict, by themselves:
 *  - hang_verdict (a pure function) on hand-made states of 4 ranks: a rank that has not called the
 *    collective (named with its last one), not started it (its group still open), dead, not
 *    answering, every rank inside with a connection whose sender is ahead of its receiver, a
 *    point-to-point peer that has not posted the matching receive, ranks that disagree;
 *  - a one-rank communicator's numbers: calls, collectives and kinds counted at enqueue, done once
 *    run; calls of dropped groups (ncclGroupSimulateEnd, an argument error) uncounted. */
#include <check.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "observe/ras.h"
#include "unit.h"

static prog_op_t coll_op(int kind, uint64_t seq, uint64_t coll) {
  return (prog_op_t){.seq = seq,
                     .coll = coll,
                     .count = 1024,
                     .root = -1,
                     .kind = (uint8_t)kind,
                     .dtype = ncclFloat32,
                     .redop = ncclSum};
}

/* Four ranks that all answered, each having called and finished `done` collectives (AllReduce),
 * rank 0 stuck in the next one. */
static void world(hang_rank_t* r, prog_state_t* me, uint64_t done) {
  memset(r, 0, 4 * sizeof(*r));
  for (int i = 0; i < 4; i++) {
    r[i].status = RAS_ANSWERED;
    r[i].pid = 100 + i;
    snprintf(r[i].host, sizeof(r[i].host), "node%d", i / 2);
    prog_state_t* st = &r[i].st;
    st->rank = i;
    st->nranks = 4;
    st->cuda_dev = -1;
    st->seq = st->coll = st->planned = st->started = st->done = done;
    st->coll_started = st->coll_done = done;
    st->last_coll = coll_op(OP_ALLREDUCE, done, done);
  }
  /* Rank 0 called #done+1 and is inside it. */
  prog_state_t* s0 = &r[0].st;
  s0->seq = s0->coll = s0->planned = s0->started = s0->coll_started = done + 1;
  s0->inflight = coll_op(OP_ALLREDUCE, done + 1, done + 1);
  *me = *s0;
}

static void enter(hang_rank_t* r, int rank, uint64_t c) {
  prog_state_t* st = &r[rank].st;
  st->seq = st->coll = st->planned = st->started = st->coll_started = c;
  st->inflight = coll_op(OP_ALLREDUCE, c, c);
}

#define VERDICT(me, r, text) hang_verdict(&(me), (r), 4, (text), sizeof(text))
#define HAS(text, needle) \
  ck_assert_msg(strstr((text), (needle)) != NULL, "no '%s' in: %s", (needle), (text))
#define LACKS(text, needle) \
  ck_assert_msg(strstr((text), (needle)) == NULL, "'%s' in: %s", (needle), (text))

START_TEST(test_verdict_not_called) {
  hang_rank_t r[4];
  prog_state_t me;
  char text[2048];
  world(r, &me, 11);
  enter(r, 1, 12);
  enter(r, 2, 12); /* rank 3 stays at 11 */
  VERDICT(me, r, text);
  HAS(text,
      "Not called yet by rank 3 (pid 103 on node1) whose last collective is ncclAllReduce #11");
  LACKS(text, "rank 1 (");
  LACKS(text, "Every rank is inside it");
  char op[192];
  hang_describe_op(&me.inflight, op, sizeof(op));
  ck_assert_str_eq(op, "ncclAllReduce #12 (collective #12, count 1024 ncclFloat32 Sum)");
}
END_TEST

START_TEST(test_verdict_not_started) {
  hang_rank_t r[4];
  prog_state_t me;
  char text[2048];
  world(r, &me, 3);
  for (int i = 1; i < 4; i++) enter(r, i, 4);
  /* Rank 2 enqueued it in a group it has not ended. */
  r[2].st.planned = 3;
  r[2].st.started = r[2].st.coll_started = 3;
  /* Rank 3 launched it on a GPU busy with an earlier kernel. */
  r[3].st.cuda_dev = 0;
  r[3].st.started = r[3].st.coll_started = 3;
  VERDICT(me, r, text);
  HAS(text, "Called but not started by rank 2 (pid 102 on node1) (its group is still open");
  HAS(text, "rank 3 (pid 103 on node1) (not started on its GPU");
  LACKS(text, "Not called yet");
}
END_TEST

START_TEST(test_verdict_dead_and_silent) {
  hang_rank_t r[4];
  prog_state_t me;
  char text[2048];
  world(r, &me, 7);
  enter(r, 1, 8);
  r[2].status = RAS_GONE;
  r[3].status = RAS_SILENT;
  VERDICT(me, r, text);
  HAS(text, "Dead: rank 2 (pid 102 on node1) (its process died). ");
  HAS(text, "Not answering: rank 3 (pid 103 on node1)");
  LACKS(text, "Not called yet"); /* what the silent and dead ranks did is unknown */
  r[2].status = HANG_LEFT;
  r[3].status = HANG_OFF;
  VERDICT(me, r, text);
  HAS(text, "Gone from the communicator: rank 2");
  HAS(text, "Not asked: rank 3 (pid 103 on node1) (their side channel is off");
}
END_TEST

START_TEST(test_verdict_stuck_connection) {
  hang_rank_t r[4];
  prog_state_t me;
  char text[4096];
  world(r, &me, 1);
  for (int i = 1; i < 4; i++) enter(r, i, 2);
  /* Ring 0 -> 1 -> 2 -> 3 -> 0 on channel 0. Rank 1 has sent 10 steps to rank 2, which has
   * received 6 and waits for more; rank 3 waits on rank 2, which has sent it only 7 (no loss). */
  for (int i = 0; i < 4; i++) {
    prog_state_t* st = &r[i].st;
    st->nconns = 2;
    st->conns[0] = (prog_conn_t){.channel = 0, .peer = (i + 1) % 4, .is_send = 1, .step = 7};
    st->conns[1] = (prog_conn_t){.channel = 0, .peer = (i + 3) % 4, .is_send = 0, .step = 7};
  }
  r[1].st.conns[0].step = 10;
  r[2].st.conns[1].step = 6;
  r[2].st.nwaits = 1;
  r[2].st.waits[0] = (prog_wait_t){
      .channel = 0, .peer = 1, .is_send = 0, .secs = 61, .step = 6, .transport = "NET"};
  r[3].st.nwaits = 1;
  r[3].st.waits[0] = (prog_wait_t){
      .channel = 0, .peer = 2, .is_send = 0, .secs = 61, .step = 7, .transport = "SHM"};
  me = r[0].st;
  VERDICT(me, r, text);
  HAS(text, "Every rank is inside it.");
  HAS(text,
      "The connection from rank 1 to rank 2 (NET, channel 0) does not move: rank 1 has sent 10 "
      "steps, rank 2 has received 6 (61 s).");
  LACKS(text, "from rank 2 to rank 3"); /* rank 2 has sent all it had: no loss there */
  HAS(text, "Rank 3 waits: no data from rank 2 (SHM, channel 0, step 7, 61 s)");
}
END_TEST

START_TEST(test_verdict_p2p_and_disagreement) {
  hang_rank_t r[4];
  prog_state_t me;
  char text[2048];
  world(r, &me, 5);
  /* Rank 0's 3rd send to rank 2; rank 2 has posted 2 receives from rank 0. */
  r[0].st.inflight = (prog_op_t){
      .seq = 9, .peer_nth = 3, .count = 8, .root = 2, .kind = OP_SEND, .dtype = ncclInt8};
  r[2].st.recvs_from = 2;
  me = r[0].st;
  VERDICT(me, r, text);
  HAS(text,
      "rank 2 (pid 102 on node1) has not posted the matching receive: it has posted 2 "
      "receives from rank 0, this is #3.");
  r[2].st.recvs_from = 3;
  VERDICT(me, r, text);
  HAS(text, "has posted the matching receive");
  /* Collectives: rank 1 finished the call rank 0 is stuck in. */
  world(r, &me, 5);
  enter(r, 2, 6);
  enter(r, 3, 6);
  r[1].st.seq = r[1].st.coll = r[1].st.planned = r[1].st.started = r[1].st.done = 6;
  r[1].st.coll_started = r[1].st.coll_done = 6;
  VERDICT(me, r, text);
  HAS(text, "Already finished by rank 1 (pid 101 on node0)");
  HAS(text, "do not agree on the calls");
}
END_TEST

/* ---- The numbers of a real communicator -------------------------------------------------------
 */
START_TEST(test_counts_and_dropped_groups) {
  ncclComm_t comm = unit_one_rank_comm();
  float a[64] = {0};
  for (int i = 0; i < 3; i++)
    ck_assert_int_eq(ncclAllReduce(a, a, 64, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclBroadcast(a, a, 64, ncclFloat32, 0, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclSend(a, 8, ncclFloat32, 0, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclRecv(a + 8, 8, ncclFloat32, 0, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  /* Two groups that never run: simulated, and one with a refused call. */
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclAllReduce(a, a, 64, ncclFloat32, ncclSum, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclReduce(a, a, 64, ncclFloat32, ncclSum, 0, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclGroupSimulateEnd(&sim), ncclSuccess);
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclAllGather(a, a, 8, ncclFloat32, comm, NULL), ncclSuccess);
  ck_assert_int_eq(ncclAllReduce(a, a, 64, (ncclDataType_t)99, ncclSum, comm, NULL),
                   ncclInvalidArgument);
  ck_assert_int_eq(ncclGroupEnd(), ncclInvalidArgument);
  prog_state_t st;
  progress_state(comm, 0, &st);
  ck_assert_uint_eq(st.seq, 6);
  ck_assert_uint_eq(st.coll, 4);
  ck_assert_uint_eq(st.done, 6);
  ck_assert_uint_eq(st.started, 6);
  ck_assert_uint_eq(st.coll_done, 4);
  ck_assert_uint_eq(st.kinds[OP_ALLREDUCE], 3);
  ck_assert_uint_eq(st.kinds[OP_BROADCAST], 1);
  ck_assert_uint_eq(st.kinds[OP_SEND], 1);
  ck_assert_uint_eq(st.kinds[OP_RECV], 1);
  ck_assert_uint_eq(st.kinds[OP_REDUCE], 0);
  ck_assert_uint_eq(st.kinds[OP_ALLGATHER], 0);
  ck_assert_uint_eq(st.sends_to, 1); /* asker 0: the send to self */
  ck_assert_uint_eq(st.recvs_from, 1);
  ck_assert_uint_eq(st.inflight.seq, 0);
  ck_assert_uint_eq(st.last_coll.seq, 4);
  ck_assert_int_eq(st.last_coll.kind, OP_BROADCAST);
  /* A call in an open group is enqueued, not started. */
  ck_assert_int_eq(ncclGroupStart(), ncclSuccess);
  ck_assert_int_eq(ncclAllReduce(a, a, 64, ncclFloat32, ncclMax, comm, NULL), ncclSuccess);
  progress_state(comm, -1, &st);
  ck_assert_uint_eq(st.seq, 7);
  ck_assert_uint_eq(st.planned, 6);
  ck_assert_uint_eq(st.inflight.seq, 7);
  ck_assert_int_eq(st.inflight.redop, ncclMax);
  ck_assert_int_eq(ncclGroupEnd(), ncclSuccess);
  progress_state(comm, -1, &st);
  ck_assert_uint_eq(st.done, 7);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* The service thread runs while a communicator needs it, and only then. */
static bool service_thread_runs(void) {
  DIR* d = opendir("/proc/self/task");
  bool found = false;
  struct dirent* e;
  while (d != NULL && !found && (e = readdir(d)) != NULL) {
    char path[300], name[32] = "";
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue;
    found = fgets(name, sizeof(name), f) != NULL && strncmp(name, "NCCL RAS", 8) == 0;
    fclose(f);
  }
  if (d != NULL) closedir(d);
  return found;
}

START_TEST(test_service_lifetime) {
  ck_assert(!service_thread_runs());
  unit_set_param("NCCL_RAS_ENABLE", "0");
  unit_set_param("NCCL_BATON_HANG_REPORT_SEC", "0");
  ncclComm_t comm = unit_one_rank_comm();
  ck_assert(!service_thread_runs()); /* nothing asked for it */
  ck_assert_int_eq(comm->ras_addrs[0].sa.sa_family, 0);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  unit_set_param("NCCL_RAS_ENABLE", NULL);
  unit_set_param("NCCL_BATON_HANG_REPORT_SEC", NULL);
  ncclComm_t a = unit_one_rank_comm(), b = unit_one_rank_comm();
  ck_assert(service_thread_runs());
  ck_assert_int_ne(a->ras_addrs[0].sa.sa_family, 0);
  ck_assert(socket_addr_equal(&a->ras_addrs[0], &b->ras_addrs[0])); /* one per process */
  ck_assert_int_eq(ncclCommDestroy(a), ncclSuccess);
  ck_assert(service_thread_runs());
  ck_assert_int_eq(ncclCommDestroy(b), ncclSuccess);
  ck_assert(!service_thread_runs()); /* the last communicator took it along */
}
END_TEST

int main(void) {
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  Suite* s = suite_create("progress");
  TCase* tc = tcase_create("verdict");
  tcase_add_test(tc, test_verdict_not_called);
  tcase_add_test(tc, test_verdict_not_started);
  tcase_add_test(tc, test_verdict_dead_and_silent);
  tcase_add_test(tc, test_verdict_stuck_connection);
  tcase_add_test(tc, test_verdict_p2p_and_disagreement);
  tcase_add_test(tc, test_counts_and_dropped_groups);
  tcase_add_test(tc, test_service_lifetime);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
