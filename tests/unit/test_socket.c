/* Socket helpers on loopback: listen/accept/connect/send/recv, retries and timeouts, aborts,
 * truncated streams, SIGPIPE, non-blocking progress, descriptor hygiene. */
#include <arpa/inet.h>
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "fork_ranks.h"
#include "unit.h"

static socket_addr_t loopback(int port) {
  socket_addr_t a;
  memset(&a, 0, sizeof(a));
  a.sin.sin_family = AF_INET;
  a.sin.sin_port = htons((uint16_t)port);
  a.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

/* A connected pair: *server accepted from listener, *client connected to it. */
static void make_pair(socket_conn_t* listener, socket_conn_t* client, socket_conn_t* server,
                      volatile uint32_t* abort_flag) {
  socket_addr_t any = loopback(0);
  ck_assert_int_eq(socket_listen(&any, abort_flag, listener), ncclSuccess);
  ck_assert_int_eq(socket_connect(&listener->addr, abort_flag, client), ncclSuccess);
  ck_assert_int_eq(socket_accept(listener, server), ncclSuccess);
}

/* ---- Round trip ------------------------------------------------------------------------------ */

#define BIG (4u << 20)

typedef struct echo_arg {
  socket_addr_t addr;
  int rc;
} echo_arg_t;

static void* client_main(void* p) {
  echo_arg_t* a = p;
  socket_conn_t c;
  a->rc = 1;
  if (socket_connect(&a->addr, NULL, &c) != ncclSuccess) return NULL;
  unsigned char* big = malloc(BIG);
  for (size_t i = 0; i < BIG; i++) big[i] = (unsigned char)(i * 7 + 3);
  uint32_t sum = 0;
  if (socket_send_all(&c, "hello", 6) == ncclSuccess &&
      socket_send_all(&c, big, BIG) == ncclSuccess &&
      socket_recv_all(&c, &sum, sizeof(sum)) == ncclSuccess) {
    uint32_t want = 0;
    for (size_t i = 0; i < BIG; i++) want += big[i];
    a->rc = sum == want ? 0 : 2;
  }
  free(big);
  socket_close(&c);
  return NULL;
}

START_TEST(listen_connect_accept_roundtrip) {
  int fds_before = fork_ranks_count_fds();
  socket_addr_t any = loopback(0);
  socket_conn_t listener;
  ck_assert_int_eq(socket_listen(&any, NULL, &listener), ncclSuccess);
  ck_assert_int_ne(ntohs(listener.addr.sin.sin_port), 0);
  echo_arg_t arg = {.addr = listener.addr, .rc = -1};
  pthread_t t;
  pthread_create(&t, NULL, client_main, &arg);
  socket_conn_t server;
  ck_assert_int_eq(socket_accept(&listener, &server), ncclSuccess);
  ck_assert_uint_eq(server.addr.sin.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  char hello[6];
  ck_assert_int_eq(socket_recv_all(&server, hello, sizeof(hello)), ncclSuccess);
  ck_assert_str_eq(hello, "hello");
  unsigned char* big = malloc(BIG);
  ck_assert_int_eq(socket_recv_all(&server, big, BIG), ncclSuccess);
  uint32_t sum = 0;
  size_t bad = 0;
  for (size_t i = 0; i < BIG; i++) {
    bad += big[i] != (unsigned char)(i * 7 + 3);
    sum += big[i];
  }
  ck_assert_uint_eq(bad, 0);
  ck_assert_int_eq(socket_send_all(&server, &sum, sizeof(sum)), ncclSuccess);
  pthread_join(t, NULL);
  ck_assert_int_eq(arg.rc, 0);
  free(big);
  socket_close(&server);
  socket_close(&listener);
  ck_assert_int_eq(server.fd, -1);
  socket_close(&server); /* twice is harmless */
  ck_assert_int_eq(fork_ranks_count_fds(), fds_before);
}
END_TEST

/* ---- Connect retries ------------------------------------------------------------------------- */

START_TEST(connect_refused_retries_then_fails_naming_address) {
  unit_set_param("NCCL_SOCKET_RETRY_CNT", "3");
  unit_set_param("NCCL_SOCKET_RETRY_SLEEP_MSEC", "20");
  int fds_before = fork_ranks_count_fds();
  int port = fork_ranks_free_port();
  socket_addr_t addr = loopback(port);
  socket_conn_t c = {.fd = -42};
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(socket_connect(&addr, NULL, &c), ncclRemoteError);
  double ms = fork_ranks_ms_since(t0);
  ck_assert_int_eq(c.fd, -42); /* output untouched on failure */
  ck_assert_msg(ms >= 110 && ms < 2000, "took %.0f ms (3 retries of 20/40/60 ms expected)", ms);
  char want[64];
  snprintf(want, sizeof(want), "127.0.0.1:%d", port);
  ck_assert_msg(strstr(log_last_error(), want) != NULL, "error '%s' lacks %s", log_last_error(),
                want);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "4 attempt"));
  ck_assert_ptr_nonnull(strstr(log_last_error(), "refused"));
  ck_assert_int_eq(fork_ranks_count_fds(), fds_before);
}
END_TEST

START_TEST(connect_fails_at_bootstrap_timeout) {
  unit_set_param("NCCL_SOCKET_RETRY_CNT", "1000");
  unit_set_param("NCCL_SOCKET_RETRY_SLEEP_MSEC", "10");
  unit_set_param("NCCL_BOOTSTRAP_TIMEOUT_MS", "400");
  socket_addr_t addr = loopback(fork_ranks_free_port());
  socket_conn_t c;
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(socket_connect(&addr, NULL, &c), ncclRemoteError);
  double ms = fork_ranks_ms_since(t0);
  ck_assert_msg(ms >= 250 && ms < 1500, "took %.0f ms, timeout 400 ms", ms);
}
END_TEST

typedef struct late_listener {
  int port;
  int delay_ms;
  int rc;
} late_listener_t;

static void* late_listener_main(void* p) {
  late_listener_t* a = p;
  fork_ranks_sleep_ms(a->delay_ms);
  socket_addr_t addr = loopback(a->port);
  socket_conn_t l, s;
  a->rc = 1;
  if (socket_listen(&addr, NULL, &l) != ncclSuccess) return NULL;
  if (socket_accept(&l, &s) == ncclSuccess) {
    int v = 0;
    a->rc = socket_recv_all(&s, &v, sizeof(v)) == ncclSuccess && v == 1234 ? 0 : 2;
    socket_close(&s);
  }
  socket_close(&l);
  return NULL;
}

START_TEST(connect_retries_until_listener_appears) {
  unit_set_param("NCCL_SOCKET_RETRY_CNT", "50");
  unit_set_param("NCCL_SOCKET_RETRY_SLEEP_MSEC", "20");
  late_listener_t arg = {.port = fork_ranks_free_port(), .delay_ms = 300, .rc = -1};
  pthread_t t;
  pthread_create(&t, NULL, late_listener_main, &arg);
  socket_addr_t addr = loopback(arg.port);
  socket_conn_t c;
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(socket_connect(&addr, NULL, &c), ncclSuccess);
  ck_assert_msg(fork_ranks_ms_since(t0) >= 250, "connected before the listener existed");
  int v = 1234;
  ck_assert_int_eq(socket_send_all(&c, &v, sizeof(v)), ncclSuccess);
  pthread_join(t, NULL);
  ck_assert_int_eq(arg.rc, 0);
  socket_close(&c);
}
END_TEST

/* ---- Aborts and timeouts ----------------------------------------------------------------------
 */

START_TEST(connect_returns_promptly_on_abort) {
  unit_set_param("NCCL_SOCKET_RETRY_CNT", "1000");
  unit_set_param("NCCL_SOCKET_RETRY_SLEEP_MSEC", "100");
  volatile uint32_t flag = 0;
  pthread_t t = fork_ranks_abort_after(&flag, 300);
  socket_addr_t addr = loopback(fork_ranks_free_port());
  socket_conn_t c;
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(socket_connect(&addr, &flag, &c), ncclInternalError);
  double ms = fork_ranks_ms_since(t0);
  pthread_join(t, NULL);
  ck_assert_msg(ms >= 250 && ms < 1300, "returned after %.0f ms (abort at 300 ms)", ms);
}
END_TEST

START_TEST(recv_and_accept_return_promptly_on_abort) {
  volatile uint32_t flag = 0;
  socket_conn_t l, c, s;
  make_pair(&l, &c, &s, &flag);
  pthread_t t = fork_ranks_abort_after(&flag, 300);
  char buf[16];
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(socket_recv_all(&s, buf, sizeof(buf)), ncclInternalError);
  double ms = fork_ranks_ms_since(t0);
  pthread_join(t, NULL);
  ck_assert_msg(ms >= 250 && ms < 1300, "recv returned after %.0f ms (abort at 300 ms)", ms);
  /* The flag stays set: accept gives up at once. */
  socket_conn_t s2;
  t0 = clock_ns();
  ck_assert_int_eq(socket_accept(&l, &s2), ncclInternalError);
  ck_assert_double_lt(fork_ranks_ms_since(t0), 1000);
  socket_close(&c);
  socket_close(&s);
  socket_close(&l);
}
END_TEST

START_TEST(recv_times_out_naming_peer) {
  unit_set_param("NCCL_BOOTSTRAP_TIMEOUT_MS", "300");
  socket_conn_t l, c, s;
  make_pair(&l, &c, &s, NULL);
  char buf[4];
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(socket_recv_all(&s, buf, sizeof(buf)), ncclRemoteError);
  double ms = fork_ranks_ms_since(t0);
  ck_assert_msg(ms >= 250 && ms < 1500, "timed out after %.0f ms (limit 300)", ms);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_BOOTSTRAP_TIMEOUT_MS"));
  ck_assert_ptr_nonnull(strstr(log_last_error(), "127.0.0.1:"));
  socket_close(&c);
  socket_close(&s);
  socket_close(&l);
}
END_TEST

/* ---- Broken peers -----------------------------------------------------------------------------
 */

START_TEST(recv_truncated_stream_is_an_error) {
  socket_conn_t l, c, s;
  make_pair(&l, &c, &s, NULL);
  ck_assert_int_eq(socket_send_all(&c, "0123456789", 10), ncclSuccess);
  socket_close(&c);
  char buf[100];
  ck_assert_int_eq(socket_recv_all(&s, buf, sizeof(buf)), ncclRemoteError);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "10 of 100"));
  char want[64];
  socket_addr_format(&s.addr, want, sizeof(want));
  ck_assert_msg(strstr(log_last_error(), want) != NULL, "'%s' lacks %s", log_last_error(), want);
  socket_close(&s);
  socket_close(&l);
}
END_TEST

START_TEST(send_to_closed_peer_fails_without_sigpipe) {
  signal(SIGPIPE, SIG_DFL);
  socket_conn_t l, c, s;
  make_pair(&l, &c, &s, NULL);
  socket_close(&s);
  size_t size = 32u << 20;
  char* big = calloc(1, size);
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < 4 && res == ncclSuccess; i++) res = socket_send_all(&c, big, size);
  ck_assert_int_ne(res, ncclSuccess); /* and we are still alive */
  free(big);
  socket_close(&c);
  socket_close(&l);
}
END_TEST

START_TEST(progress_is_non_blocking) {
  socket_conn_t l, c, s;
  make_pair(&l, &c, &s, NULL);
  char buf[8] = {0};
  size_t done = 0;
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(socket_progress(&s, 0, buf, sizeof(buf), &done), ncclSuccess);
  ck_assert_uint_eq(done, 0);
  ck_assert_double_lt(fork_ranks_ms_since(t0), 50);
  ck_assert_int_eq(socket_send_all(&c, "abc", 3), ncclSuccess);
  for (int i = 0; i < 200 && done < 3; i++) {
    ck_assert_int_eq(socket_progress(&s, 0, buf, sizeof(buf), &done), ncclSuccess);
    if (done < 3) fork_ranks_sleep_ms(5);
  }
  ck_assert_uint_eq(done, 3);
  ck_assert_str_eq(buf, "abc");
  size_t sent = 0;
  ck_assert_int_eq(socket_progress(&s, 1, "xy", 2, &sent), ncclSuccess);
  ck_assert_uint_eq(sent, 2);
  char xy[2];
  ck_assert_int_eq(socket_recv_all(&c, xy, 2), ncclSuccess);
  ck_assert_int_eq(memcmp(xy, "xy", 2), 0);
  socket_close(&c);
  /* An orderly close is ncclRemoteError from progress. */
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < 200 && res == ncclSuccess; i++) {
    res = socket_progress(&s, 0, buf, sizeof(buf), &done);
    if (res == ncclSuccess) fork_ranks_sleep_ms(5);
  }
  ck_assert_int_eq(res, ncclRemoteError);
  socket_close(&s);
  socket_close(&l);
}
END_TEST

START_TEST(listen_on_busy_port_fails_with_address) {
  socket_conn_t l1, l2;
  socket_addr_t any = loopback(0);
  ck_assert_int_eq(socket_listen(&any, NULL, &l1), ncclSuccess);
  ck_assert_int_eq(socket_listen(&l1.addr, NULL, &l2), ncclSystemError);
  char want[64];
  socket_addr_format(&l1.addr, want, sizeof(want));
  ck_assert_ptr_nonnull(strstr(log_last_error(), want));
  socket_close(&l1);
}
END_TEST

int main(void) {
  Suite* s = suite_create("socket");
  TCase* tc = tcase_create("socket");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, listen_connect_accept_roundtrip);
  tcase_add_test(tc, connect_refused_retries_then_fails_naming_address);
  tcase_add_test(tc, connect_fails_at_bootstrap_timeout);
  tcase_add_test(tc, connect_retries_until_listener_appears);
  tcase_add_test(tc, connect_returns_promptly_on_abort);
  tcase_add_test(tc, recv_and_accept_return_promptly_on_abort);
  tcase_add_test(tc, recv_times_out_naming_peer);
  tcase_add_test(tc, recv_truncated_stream_is_an_error);
  tcase_add_test(tc, send_to_closed_peer_fails_without_sigpipe);
  tcase_add_test(tc, progress_is_non_blocking);
  tcase_add_test(tc, listen_on_busy_port_fails_with_address);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
