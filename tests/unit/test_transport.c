/* Transport context and the NET transport: FIFO sizes and layout, transport choice, NET between
 * two processes that claim different hosts (NCCL_HOSTID) with FIFO traffic through the proxy,
 * the proxy sleeping when idle, a peer killed mid-transfer, and liveness of same-host peers. */
#include <check.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "transport_harness.h"
#include "unit.h"

static bootstrap_handle_t g_handle;
static uint64_t g_comm_hash;

static void setup_job(void) {
  th_job_setup(&g_handle, &g_comm_hash);
}

/* ---- Context --------------------------------------------------------------------------------- */
START_TEST(ctx_init_sizes_from_params) {
  peer_info_t peers[2] = {{.rank = 0, .cuda_dev = -1}, {.rank = 1, .cuda_dev = -1}};
  transport_ctx_t ctx = {.rank = 0, .nranks = 2, .nchannels = 3, .peers = peers};
  ck_assert_int_eq(transport_ctx_init(&ctx), ncclSuccess);
  ck_assert_int_eq(ctx.buff_bytes[PROTO_SIMPLE], 4194304);
  ck_assert_int_eq(ctx.buff_bytes[PROTO_LL], 524288);
  ck_assert_int_eq(ctx.buff_bytes[PROTO_LL128], 0); /* host executor */
  ck_assert_ptr_null(transport_conn(&ctx, 2, 1, 1));
  ck_assert_ptr_null(transport_conn(&ctx, 3, 1, 1)); /* out of range */
  ck_assert_ptr_null(transport_conn(&ctx, 0, 2, 0));
  ck_assert_int_eq(transport_ctx_free(&ctx), ncclSuccess);

  unit_set_param("NCCL_BUFFSIZE", "100000");
  peers[0].cuda_dev = 0;
  transport_ctx_t gpu = {.rank = 0, .nranks = 2, .nchannels = 1, .peers = peers, .gpu_fifos = true};
  ck_assert_int_eq(transport_ctx_init(&gpu), ncclSuccess);
  ck_assert_int_eq(gpu.buff_bytes[PROTO_SIMPLE], 99328); /* whole 128-byte lines per slot */
  ck_assert_int_eq(gpu.buff_bytes[PROTO_LL128], 4915200);
  ck_assert_int_eq(transport_ctx_free(&gpu), ncclSuccess);

  unit_set_param("NCCL_BUFFSIZE", "1000");
  transport_ctx_t small = {.rank = 0, .nranks = 2, .nchannels = 1, .peers = peers};
  ck_assert_int_eq(transport_ctx_init(&small), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_BUFFSIZE"));
}
END_TEST

START_TEST(fifo_layout_is_aligned_and_disjoint) {
  int sizes[PROTO_COUNT] = {[PROTO_LL] = 8192, [PROTO_LL128] = 0, [PROTO_SIMPLE] = 65536};
  size_t bytes = transport_fifo_bytes(sizes);
  char* base = aligned_alloc(4096, bytes);
  memset(base, 0, bytes);
  conn_fifo_t f;
  transport_fifo_attach(&f, base, sizes, CONN_FLAG_HOSTMEM);
  ck_assert_ptr_null(f.buffs[PROTO_LL128]);
  ck_assert_int_eq(f.buff_bytes[PROTO_LL128], 0);
  ck_assert_uint_eq((uintptr_t)f.buffs[PROTO_LL] % 4096, 0);
  ck_assert_uint_eq((uintptr_t)f.buffs[PROTO_SIMPLE] % 4096, 0);
  ck_assert((char*)f.head != (char*)f.tail);
  ck_assert_uint_ge((uintptr_t)f.tail - (uintptr_t)f.head, 64); /* separate cache lines */
  ck_assert((char*)(f.sizes + NCCL_STEPS) <= f.buffs[PROTO_LL]);
  ck_assert(f.buffs[PROTO_LL] + 8192 <= f.buffs[PROTO_SIMPLE]);
  ck_assert(f.buffs[PROTO_SIMPLE] + 65536 <= base + bytes);
  ck_assert_int_eq(f.flags, CONN_FLAG_HOSTMEM);
  ck_assert_uint_eq(*f.head + *f.tail, 0);
  free(base);
}
END_TEST

START_TEST(net_is_chosen_when_shm_cannot) {
  unit_set_param("NCCL_SOCKET_IFNAME", "lo");
  peer_info_t a = {.rank = 0, .host_hash = 1, .shm_dev = 5};
  peer_info_t b = {.rank = 1, .host_hash = 2, .shm_dev = 5};
  transport_ctx_t ctx = {.rank = 0, .nranks = 2};
  ck_assert(!transport_shm_ops.can_connect(&ctx, &a, &b));
  ck_assert(transport_net_ops.can_connect(&ctx, &a, &b));
  unit_set_param("NCCL_NET", "IB"); /* forced to a network that does not exist yet */
  net_select_reset();
  ck_assert(!transport_net_ops.can_connect(&ctx, &a, &b));
  net_select_reset();
}
END_TEST

/* Joins as one of two ranks that claim different hosts (so NET is chosen) and connects both
 * directions with the other on channel 0. */
static int net_pair_setup(th_rank_t* r, int idx, int n) {
  int peer = 1 - idx;
  unit_set_param("NCCL_HOSTID", idx == 0 ? "baton-host-a" : "baton-host-b");
  if (th_setup(r, &g_handle, idx, n, g_comm_hash, 1, 8 * 16384, 8 * 4096)) return 1;
  conn_request_t reqs[2] = {{.channel = 0, .peer = peer, .is_send = 1},
                            {.channel = 0, .peer = peer, .is_send = 0}};
  CHILD_CHECK(transport_connect(&r->ctx, reqs, 2) == ncclSuccess);
  return 0;
}

/* ---- NET between two "hosts" ---------------------------------------------------------------- */
static int net_rank(int idx, int n, void* arg) {
  th_rank_t r;
  int peer = 1 - idx;
  unit_set_param("NCCL_HOSTID", idx == 0 ? "baton-host-a" : "baton-host-b");
  if (th_setup(&r, &g_handle, idx, n, g_comm_hash, 2, 8 * 16384, 8 * 4096)) return 1;
  CHILD_CHECK(r.peers[0].host_hash != r.peers[1].host_hash);
  conn_request_t reqs[4] = {{.channel = 0, .peer = peer, .is_send = idx == 0},
                            {.channel = 0, .peer = peer, .is_send = idx != 0},
                            {.channel = 1, .peer = peer, .is_send = 0},
                            {.channel = 1, .peer = peer, .is_send = 1}};
  CHILD_CHECK(transport_connect(&r.ctx, reqs, 4) == ncclSuccess);
  for (int i = 0; i < 4; i++) {
    conn_t* c = transport_conn(&r.ctx, reqs[i].channel, peer, reqs[i].is_send);
    CHILD_CHECK(c != NULL && c->transport == &transport_net_ops);
    CHILD_CHECK(strcmp(c->desc, "NET/Socket/0") == 0);
    CHILD_CHECK(c->fifo.flags == (CONN_FLAG_NET | CONN_FLAG_HOSTMEM));
  }
  CHILD_CHECK(r.ctx.proxy != NULL);
  CHILD_CHECK(th_traffic(&r, 0, peer, 1000, -1) == 0);
  CHILD_CHECK(th_traffic(&r, 1, peer, 300, -1) == 0);
  CHILD_CHECK(proxy_error(r.ctx.proxy) == ncclSuccess);
  CHILD_CHECK(bootstrap_barrier(r.b, 1) == ncclSuccess);

  /* Idle: the proxy thread must sleep, not spin (a spinning thread burns ~100 ticks a second). */
  long t0 = th_thread_ticks("NCCL Proxy");
  CHILD_CHECK(t0 >= 0);
  fork_ranks_sleep_ms(1000);
  long t1 = th_thread_ticks("NCCL Proxy");
  if (getenv("TH_VERBOSE") || t1 - t0 > 10)
    fprintf(stderr, "rank %d: idle proxy used %ld ticks in 1 s\n", idx, t1 - t0);
  CHILD_CHECK(t1 - t0 <= 10);

  /* Woken again, it moves data at once. */
  CHILD_CHECK(bootstrap_barrier(r.b, 2) == ncclSuccess);
  conn_t* out = transport_conn(&r.ctx, 0, peer, 1);
  conn_t* in = transport_conn(&r.ctx, 0, peer, 0);
  proxy_wake(r.ctx.proxy);
  for (uint64_t s = 1000; s < 1100; s++) {
    int rc = th_send_step(&r, peer, &out->fifo, s, idx);
    if (rc == 0) rc = th_recv_step(&r, peer, &in->fifo, s, peer);
    if (rc != 0)
      fprintf(stderr, "rank %d: step %llu after idling failed (%d)\n", idx, (unsigned long long)s,
              rc);
    CHILD_CHECK(rc == 0);
  }
  CHILD_CHECK(bootstrap_barrier(r.b, 3) == ncclSuccess);
  return th_teardown(&r);
}

START_TEST(net_two_hosts_through_proxy) {
  setup_job();
  char log[256];
  setenv("NCCL_DEBUG_SUBSYS", "INIT,NET", 1);
  fork_ranks_log_to_file("INFO", log, sizeof(log));
  ck_assert_int_eq(fork_ranks_run(2, net_rank, NULL, 40000), 0);
  const char* l1[] = {"Channel 00/0 : 0[-1] -> 1[-1] [send] via NET/Socket/0", NULL};
  const char* l2[] = {"Channel 01/0 : 1[-1] -> 0[-1] [receive] via NET/Socket/0", NULL};
  ck_assert_msg(fork_ranks_file_has_line(log, l1), "no NET send line in %s", log);
  ck_assert_msg(fork_ranks_file_has_line(log, l2), "no NET receive line in %s", log);
  unlink(log);
}
END_TEST

START_TEST(net_with_split_streams) {
  setup_job();
  unit_set_param("NCCL_NSOCKS_PERTHREAD", "2");
  unit_set_param("NCCL_SOCKET_NTHREADS", "2");
  ck_assert_int_eq(fork_ranks_run(2, net_rank, NULL, 40000), 0);
}
END_TEST

/* Rank 1 is killed in the middle of the traffic; rank 0 must see an error within seconds. */
static int net_dying_rank(int idx, int n, void* arg) {
  th_rank_t r;
  int peer = 1 - idx;
  if (net_pair_setup(&r, idx, n)) return 1;
  CHILD_CHECK(th_traffic(&r, 0, peer, 100000, idx == 1 ? 200 : -1) == TH_ERR_PEER);
  uint64_t latency_ms = (clock_ns() - r.last_progress_ns) / 1000000ull;
  fprintf(stderr, "rank 0 saw the dead peer %llu ms after the last progress\n",
          (unsigned long long)latency_ms);
  CHILD_CHECK(latency_ms < 5000);
  CHILD_CHECK(r.peer_error != ncclSuccess);
  CHILD_CHECK(transport_peer_check(&r.ctx, peer) == r.peer_error); /* stays failed */
  CHILD_CHECK(transport_ctx_free(&r.ctx) == ncclSuccess);
  return 0;
}

START_TEST(net_peer_killed_mid_transfer) {
  setup_job();
  char log[256];
  fork_ranks_log_to_file("WARN", log, sizeof(log));
  ck_assert_int_eq(th_run_pair_with_victim(net_dying_rank), 0);
  /* A failure inside a step (the proxy's WARN) or a close between steps (the peer check's). */
  const char* l1[] = {"WARN", "Proxy", "rank 1", NULL};
  const char* l2[] = {"WARN", "Rank 1 closed its NET connection to rank 0", NULL};
  ck_assert_msg(fork_ranks_file_has_line(log, l1) || fork_ranks_file_has_line(log, l2),
                "no WARN naming rank 1 in %s", log);
  unlink(log);
}
END_TEST

/* Rank 1 destroys its side after the traffic: rank 0's proxy sees the close but stays quiet until
 * someone waits on rank 1. */
static char g_log[256];
static int net_leaving_rank(int idx, int n, void* arg) {
  th_rank_t r;
  int peer = 1 - idx;
  if (net_pair_setup(&r, idx, n)) return 1;
  CHILD_CHECK(th_traffic(&r, 0, peer, 50, -1) == 0);
  CHILD_CHECK(bootstrap_barrier(r.b, 1) == ncclSuccess);
  if (idx == 1) return th_teardown(&r);
  proxy_wake(r.ctx.proxy);
  /* Quiet once it has noticed: wait (bounded) until the proxy has seen the close, then look. */
  for (int i = 0; i < 2000 && !proxy_peer_closed(r.ctx.proxy, peer); i++) fork_ranks_sleep_ms(5);
  CHILD_CHECK(proxy_peer_closed(r.ctx.proxy, peer));
  const char* warned[] = {"WARN", "NET", NULL};
  CHILD_CHECK(proxy_error(r.ctx.proxy) == ncclSuccess);
  CHILD_CHECK(!fork_ranks_file_has_line(g_log, warned));
  log_clear_last_error();
  CHILD_CHECK(transport_peer_check(&r.ctx, peer) == ncclRemoteError);
  CHILD_CHECK(strstr(log_last_error(), "Rank 1 closed its NET connection to rank 0") != NULL);
  CHILD_CHECK(transport_peer_check(&r.ctx, peer) == ncclRemoteError);
  CHILD_CHECK(transport_ctx_free(&r.ctx) == ncclSuccess);
  return 0;
}

/* Rank 0 publishes a FIFO's worth of steps and frees its side at once: its proxy still sends
 * them (proxy_destroy drains), and rank 1, which starts receiving later, gets them all. */
static int net_early_leaver_rank(int idx, int n, void* arg) {
  th_rank_t r;
  int peer = 1 - idx;
  unit_set_param("NCCL_HOSTID", idx == 0 ? "baton-host-a" : "baton-host-b");
  if (th_setup(&r, &g_handle, idx, n, g_comm_hash, 1, 8 * 65536, 8 * 4096)) return 1;
  conn_request_t req = {.channel = 0, .peer = peer, .is_send = idx == 0};
  CHILD_CHECK(transport_connect(&r.ctx, &req, 1) == ncclSuccess);
  conn_t* c = transport_conn(&r.ctx, 0, peer, idx == 0);
  CHILD_CHECK(c != NULL);
  if (idx == 0) {
    proxy_wake(r.ctx.proxy);
    for (uint64_t s = 0; s < NCCL_STEPS; s++)
      CHILD_CHECK(th_send_step(&r, peer, &c->fifo, s, idx) == 0);
    return th_teardown(&r);
  }
  fork_ranks_sleep_ms(300);
  proxy_wake(r.ctx.proxy);
  for (uint64_t s = 0; s < NCCL_STEPS; s++)
    CHILD_CHECK(th_recv_step(&r, peer, &c->fifo, s, peer) == 0);
  return th_teardown(&r);
}

START_TEST(net_sender_leaving_early_still_delivers) {
  setup_job();
  ck_assert_int_eq(fork_ranks_run(2, net_early_leaver_rank, NULL, 30000), 0);
}
END_TEST

START_TEST(net_peer_leaving_is_quiet_until_waited_on) {
  setup_job();
  fork_ranks_log_to_file("WARN", g_log, sizeof(g_log));
  ck_assert_int_eq(fork_ranks_run(2, net_leaving_rank, NULL, 30000), 0);
  unlink(g_log);
}
END_TEST

/* ---- Liveness -------------------------------------------------------------------------------- */
START_TEST(peer_check_same_host_dead_pid) {
  int fds[2];
  uint64_t child_hash = 0;
  ck_assert_int_eq(pipe(fds), 0);
  pid_t child = fork();
  ck_assert_int_ge(child, 0);
  if (child == 0) {
    uint64_t h = pid_hash();
    _exit(write(fds[1], &h, sizeof(h)) == sizeof(h) ? 0 : 1);
  }
  ck_assert_int_eq(read(fds[0], &child_hash, sizeof(child_hash)), sizeof(child_hash));
  close(fds[0]);
  close(fds[1]);
  peer_info_t peers[4] = {
      {.rank = 0, .host_hash = host_hash(), .pid_hash = pid_hash(), .pid = getpid()},
      {.rank = 1, .host_hash = host_hash(), .pid_hash = child_hash, .pid = child},
      {.rank = 2, .host_hash = host_hash() + 1, .pid_hash = child_hash, .pid = child},
      /* Same host identity, another pid namespace (the hash does not match): no pid test. */
      {.rank = 3, .host_hash = host_hash(), .pid_hash = child_hash ^ 1, .pid = child},
  };
  transport_ctx_t ctx = {.rank = 0, .nranks = 4, .nchannels = 1, .peers = peers};
  ck_assert_int_eq(transport_ctx_init(&ctx), ncclSuccess);
  ck_assert_int_eq(transport_peer_check(&ctx, 0), ncclSuccess);
  /* Exited but not reaped yet (a zombie): already gone for the check. */
  for (int i = 0; i < 1000 && transport_peer_check(&ctx, 1) == ncclSuccess; i++) usleep(1000);
  ck_assert_int_eq(transport_peer_check(&ctx, 1), ncclRemoteError);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "Rank 1"));
  ck_assert_ptr_nonnull(strstr(log_last_error(), host_name()));
  ck_assert_int_eq(transport_peer_check(&ctx, 2), ncclSuccess); /* no pid test across hosts */
  ck_assert_int_eq(transport_peer_check(&ctx, 3), ncclSuccess);
  ck_assert_int_eq(waitpid(child, NULL, 0), child); /* reaped: the pid is gone */
  log_clear_last_error();
  ck_assert_int_eq(transport_peer_check(&ctx, 1), ncclRemoteError);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "Rank 1"));
  /* Steps it sent before leaving and this rank has not consumed: not an error until drained. */
  uint64_t counters[2] = {2, 3}; /* head, tail */
  conn_t from1 = {.fifo = {.head = &counters[0], .tail = &counters[1]}, .peer = 1};
  ctx.recv[0 * ctx.nranks + 1] = &from1;
  ck_assert_int_eq(transport_peer_check(&ctx, 1), ncclSuccess);
  counters[0] = 3;
  ck_assert_int_eq(transport_peer_check(&ctx, 1), ncclRemoteError);
  ctx.recv[0 * ctx.nranks + 1] = NULL;
  /* A live process of this namespace passes: rank 1 claims this test's own pid. */
  peers[1].pid = getpid();
  peers[1].pid_hash = pid_hash(); /* same formula: in our namespace */
  peers[0].pid_hash = 1;          /* so rank 1 is not "this process" */
  ck_assert_int_eq(transport_peer_check(&ctx, 1), ncclSuccess);
  ck_assert_int_eq(transport_ctx_free(&ctx), ncclSuccess);
}
END_TEST

int main(void) {
  Suite* s = suite_create("transport");
  TCase* tc = tcase_create("transport");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, ctx_init_sizes_from_params);
  tcase_add_test(tc, fifo_layout_is_aligned_and_disjoint);
  tcase_add_test(tc, net_is_chosen_when_shm_cannot);
  tcase_add_test(tc, net_two_hosts_through_proxy);
  tcase_add_test(tc, net_with_split_streams);
  tcase_add_test(tc, net_peer_killed_mid_transfer);
  tcase_add_test(tc, net_peer_leaving_is_quiet_until_waited_on);
  tcase_add_test(tc, net_sender_leaving_early_still_delivers);
  tcase_add_test(tc, peer_check_same_host_dead_pid);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
