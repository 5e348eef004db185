/* SHM transport: /dev/shm space check, two processes moving Simple and LL steps through shared
 * FIFOs, and no segment left in /dev/shm after connecting, after freeing, or after a receiver
 * whose sender never came. */
#include <check.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport_harness.h"
#include "unit.h"

static bootstrap_handle_t g_handle;
static uint64_t g_comm_hash;
static char g_hash_text[32];

static void setup_job(void) {
  th_job_setup(&g_handle, &g_comm_hash);
  snprintf(g_hash_text, sizeof(g_hash_text), "%016llx", (unsigned long long)g_comm_hash);
}

START_TEST(check_space_reports_size_and_fix) {
  ck_assert_int_eq(shm_check_space(4096), ncclSuccess);
  log_clear_last_error();
  ck_assert_int_eq(shm_check_space((size_t)1 << 60), ncclSystemError);
  const char* err = log_last_error();
  ck_assert_msg(strstr(err, "/dev/shm") != NULL, "%s", err);
  ck_assert_msg(strstr(err, "--shm-size") != NULL, "%s", err);
  ck_assert_msg(strstr(err, "1152921504606846976 bytes") != NULL, "no size needed in: %s", err);
}
END_TEST

START_TEST(can_connect_same_host_same_shm_only) {
  peer_info_t a = {.rank = 0, .host_hash = 7, .shm_dev = 3, .pid = 1};
  peer_info_t b = a;
  b.rank = 1;
  transport_ctx_t ctx = {.rank = 0, .nranks = 2};
  ck_assert(transport_shm_ops.can_connect(&ctx, &a, &b));
  b.shm_dev = 4;
  ck_assert(!transport_shm_ops.can_connect(&ctx, &a, &b));
  b.shm_dev = 3;
  b.host_hash = 8;
  ck_assert(!transport_shm_ops.can_connect(&ctx, &a, &b));
  b.host_hash = 7;
  unit_set_param("NCCL_SHM_DISABLE", "1");
  ck_assert(!transport_shm_ops.can_connect(&ctx, &a, &b));
  unit_set_param("NCCL_SHM_DISABLE", "0");
  ck_assert(transport_shm_ops.can_connect(&ctx, &a, &b));
}
END_TEST

/* A receiver that sets up and is torn down before any sender maps its segment. */
START_TEST(receiver_alone_leaves_nothing) {
  peer_info_t peers[2] = {{.rank = 0, .cuda_dev = -1, .pid = getpid()},
                          {.rank = 1, .cuda_dev = -1, .pid = getpid()}};
  uint64_t hash = clock_ns() ^ 0x5a5a;
  char text[32];
  snprintf(text, sizeof(text), "%016llx", (unsigned long long)hash);
  transport_ctx_t ctx = {.rank = 0, .nranks = 2, .nchannels = 1, .peers = peers, .comm_hash = hash};
  ck_assert_int_eq(transport_ctx_init(&ctx), ncclSuccess);
  conn_t conn = {.transport = &transport_shm_ops, .channel = 0, .peer = 1, .is_send = 0};
  char info[CONN_INFO_BYTES];
  ck_assert_int_eq(transport_shm_ops.recv_setup(&ctx, &conn, info), ncclSuccess);
  ck_assert_int_eq(th_shm_count(text), 1);
  ck_assert_ptr_nonnull(conn.fifo.buffs[PROTO_SIMPLE]);
  ck_assert_ptr_nonnull(conn.fifo.buffs[PROTO_LL]);
  ck_assert_ptr_null(conn.fifo.buffs[PROTO_LL128]); /* host executor: no LL128 FIFO */
  ck_assert_int_eq(conn.fifo.buff_bytes[PROTO_SIMPLE], 4194304);
  ck_assert_int_eq(conn.fifo.buff_bytes[PROTO_LL], 524288);
  ck_assert_uint_eq(((uintptr_t)conn.fifo.buffs[PROTO_LL]) % 4096, 0);
  ck_assert_str_eq(conn.desc, "SHM/direct/direct");
  conn.fifo.buffs[PROTO_SIMPLE][4194303] = 1; /* the whole buffer is mapped */
  ck_assert_int_eq(transport_shm_ops.free(&ctx, &conn), ncclSuccess);
  ck_assert_int_eq(th_shm_count(text), 0);
  ck_assert_int_eq(transport_ctx_free(&ctx), ncclSuccess);
}
END_TEST

/* Two processes, both directions on two channels; requests listed in opposite orders. */
static int shm_rank(int idx, int n, void* arg) {
  th_rank_t r;
  int peer = 1 - idx;
  if (th_setup(&r, &g_handle, idx, n, g_comm_hash, 2, 8 * 16384, 8 * 4096)) return 1;
  conn_request_t reqs[4] = {
      {.channel = 0, .peer = peer, .is_send = 1},
      {.channel = 0, .peer = peer, .is_send = 0},
      {.channel = 1, .peer = peer, .is_send = 1},
      {.channel = 1, .peer = peer, .is_send = 0},
  };
  if (idx == 1) {
    for (int i = 0; i < 2; i++) {
      conn_request_t t = reqs[i];
      reqs[i] = reqs[3 - i];
      reqs[3 - i] = t;
    }
  }
  CHILD_CHECK(transport_connect(&r.ctx, reqs, 4) == ncclSuccess);
  CHILD_CHECK(transport_connect(&r.ctx, reqs, 4) == ncclSuccess); /* already there: no-op */
  for (int i = 0; i < 4; i++) {
    conn_t* c = transport_conn(&r.ctx, reqs[i].channel, peer, reqs[i].is_send);
    CHILD_CHECK(c != NULL && c->transport == &transport_shm_ops);
    CHILD_CHECK(c->fifo.buff_bytes[PROTO_SIMPLE] == 8 * 16384);
  }
  CHILD_CHECK(r.ctx.proxy == NULL); /* SHM needs no proxy */
  /* Both sides hold their mappings: the names are gone from /dev/shm already. */
  CHILD_CHECK(bootstrap_barrier(r.b, 1) == ncclSuccess);
  CHILD_CHECK(th_shm_count(g_hash_text) == 0);
  CHILD_CHECK(th_traffic(&r, 0, peer, 1000, -1) == 0);
  CHILD_CHECK(th_traffic(&r, 1, peer, 200, -1) == 0);
  CHILD_CHECK(bootstrap_barrier(r.b, 2) == ncclSuccess);
  return th_teardown(&r);
}

START_TEST(two_processes_move_simple_and_ll_steps) {
  setup_job();
  char log[256];
  setenv("NCCL_DEBUG_SUBSYS", "INIT,SHM", 1);
  fork_ranks_log_to_file("INFO", log, sizeof(log));
  ck_assert_int_eq(fork_ranks_run(2, shm_rank, NULL, 30000), 0);
  ck_assert_int_eq(th_shm_count(g_hash_text), 0);
  const char* line[] = {"Channel 00/0 : 0[-1] -> 1[-1]", "via SHM/direct/direct", NULL};
  ck_assert_msg(fork_ranks_file_has_line(log, line), "no SHM connection line in %s", log);
  unlink(log);
}
END_TEST

/* The receiver process dies (SIGKILL) after connecting: the survivor's peer check names it. */
static int shm_dying_rank(int idx, int n, void* arg) {
  th_rank_t r;
  int peer = 1 - idx;
  if (th_setup(&r, &g_handle, idx, n, g_comm_hash, 1, 8 * 16384, 8 * 4096)) return 1;
  conn_request_t reqs[2] = {{.channel = 0, .peer = peer, .is_send = 1},
                            {.channel = 0, .peer = peer, .is_send = 0}};
  CHILD_CHECK(transport_connect(&r.ctx, reqs, 2) == ncclSuccess);
  int rc = th_traffic(&r, 0, peer, 100000, idx == 1 ? 50 : -1);
  CHILD_CHECK(rc == TH_ERR_PEER);
  CHILD_CHECK(r.peer_error == ncclRemoteError);
  CHILD_CHECK(strstr(log_last_error(), "Rank 1") != NULL);
  CHILD_CHECK(strstr(log_last_error(), host_name()) != NULL);
  CHILD_CHECK(transport_ctx_free(&r.ctx) == ncclSuccess);
  return 0;
}

START_TEST(dead_peer_on_same_host_is_reported) {
  setup_job();
  ck_assert_int_eq(th_run_pair_with_victim(shm_dying_rank), 0);
  ck_assert_int_eq(th_shm_count(g_hash_text), 0);
}
END_TEST

int main(void) {
  Suite* s = suite_create("shm");
  TCase* tc = tcase_create("shm");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, check_space_reports_size_and_fix);
  tcase_add_test(tc, can_connect_same_host_same_shm_only);
  tcase_add_test(tc, receiver_alone_leaves_nothing);
  tcase_add_test(tc, two_processes_move_simple_and_ll_steps);
  tcase_add_test(tc, dead_peer_on_same_host_is_reported);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
