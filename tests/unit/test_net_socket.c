/* The built-in socket network through the ncclNet API (loopback): devices and properties, message
 * order, messages split over NCCL_NSOCKS_PERTHREAD x NCCL_SOCKET_NTHREADS streams, closed peers,
 * truncation. Network selection and plugins: test_net_plugin.c. */
#include <check.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "fork_ranks.h"
#include "net/net.h"
#include "unit.h"

#define WAIT_NS (10ull * 1000000000ull)

static const ncclNet_t* socket_net(void) {
  unit_set_param("NCCL_SOCKET_IFNAME", "lo");
  unit_set_param("NCCL_NET_PLUGIN", "none");
  net_select_reset();
  const ncclNet_t* net = NULL;
  int ndev = 0;
  ck_assert_int_eq(net_select(&net, &ndev), ncclSuccess);
  ck_assert_ptr_eq(net, &net_socket);
  ck_assert_int_eq(ndev, 1);
  return net;
}

typedef struct pair {
  void* send;
  void* recv;
} pair_t;

static pair_t connect_pair(const ncclNet_t* net) {
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = NULL;
  pair_t p = {NULL, NULL};
  ncclNetDeviceHandle_t* dh = NULL;
  ck_assert_int_eq(net->listen(NULL, 0, handle, &listen), ncclSuccess);
  /* connect may need several calls; the socket network finishes in one. */
  for (int i = 0; i < 1000 && p.send == NULL; i++)
    ck_assert_int_eq(net->connect(NULL, 0, handle, &p.send, &dh), ncclSuccess);
  for (int i = 0; i < 1000 && p.recv == NULL; i++)
    ck_assert_int_eq(net->accept(listen, &p.recv, &dh), ncclSuccess);
  ck_assert_ptr_nonnull(p.send);
  ck_assert_ptr_nonnull(p.recv);
  ck_assert_int_eq(net->closeListen(listen), ncclSuccess);
  return p;
}

static void close_pair(const ncclNet_t* net, pair_t p) {
  if (p.send) ck_assert_int_eq(net->closeSend(p.send), ncclSuccess);
  if (p.recv) ck_assert_int_eq(net->closeRecv(p.recv), ncclSuccess);
}

static void fill(char* p, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) p[i] = (char)(i * 13 + (size_t)seed * 101 + (i >> 12));
}
static size_t count_bad(const char* p, size_t n, int seed) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += p[i] != (char)(i * 13 + (size_t)seed * 101 + (i >> 12));
  return bad;
}

/* Tests reqs until all are done (or one fails); returns the first error. */
static ncclResult_t wait_all(const ncclNet_t* net, void** reqs, int n, int* sizes) {
  uint64_t deadline = clock_ns() + WAIT_NS;
  int left = n;
  while (left > 0) {
    for (int i = 0; i < n; i++) {
      if (reqs[i] == NULL) continue;
      int done = 0, size = -1;
      ncclResult_t res = net->test(reqs[i], &done, &size);
      if (res != ncclSuccess) return res;
      if (done) {
        if (sizes) sizes[i] = size;
        reqs[i] = NULL;
        left--;
      }
    }
    if (clock_ns() > deadline) return ncclInternalError;
  }
  return ncclSuccess;
}

static void* post_send(const ncclNet_t* net, void* comm, void* data, size_t size) {
  void* req = NULL;
  void* mh = NULL;
  ck_assert_int_eq(net->regMr(comm, data, size, NCCL_PTR_HOST, &mh), ncclSuccess);
  ck_assert_int_eq(net->isend(comm, data, size, 0, mh, NULL, &req), ncclSuccess);
  ck_assert_ptr_nonnull(req);
  return req;
}

static void* post_recv(const ncclNet_t* net, void* comm, void* data, size_t size) {
  void* req = NULL;
  int tag = 0;
  void* mh = NULL;
  ck_assert_int_eq(net->irecv(comm, 1, &data, &size, &tag, &mh, NULL, &req), ncclSuccess);
  ck_assert_ptr_nonnull(req);
  return req;
}

START_TEST(devices_and_properties) {
  const ncclNet_t* net = socket_net();
  ck_assert_str_eq(net->name, "Socket");
  ncclNetProperties_t props;
  memset(&props, 0, sizeof(props));
  ck_assert_int_eq(net->getProperties(0, &props), ncclSuccess);
  ck_assert_str_eq(props.name, "lo");
  ck_assert_int_eq(props.ptrSupport, NCCL_PTR_HOST);
  ck_assert_int_gt(props.speed, 0);
  ck_assert_int_eq(props.maxRecvs, 1);
  ck_assert_int_eq(props.vProps.ndevs, 1);
  ck_assert_int_eq(net->getProperties(1, &props), ncclInvalidArgument);
  void* mh = NULL;
  int x;
  ck_assert_int_eq(net->regMr(NULL, &x, sizeof(x), NCCL_PTR_CUDA, &mh), ncclInternalError);
}
END_TEST

#define NMSG 12
START_TEST(messages_arrive_in_order) {
  const ncclNet_t* net = socket_net();
  pair_t p = connect_pair(net);
  size_t sizes[NMSG] = {0, 1, 7, 4096, 65536, 65537, 300000, 2, 1 << 20, 0, 123457, 8};
  char* out[NMSG];
  char* in[NMSG];
  void* sreq[NMSG];
  void* rreq[NMSG];
  int got[NMSG];
  for (int i = 0; i < NMSG; i++) {
    out[i] = malloc(sizes[i] + 1);
    in[i] = malloc((1 << 20) + 1);
    fill(out[i], sizes[i], i);
  }
  /* Receives posted first for half of them, sends first for the rest. */
  for (int i = 0; i < NMSG / 2; i++) rreq[i] = post_recv(net, p.recv, in[i], (1 << 20) + 1);
  for (int i = 0; i < NMSG; i++) sreq[i] = post_send(net, p.send, out[i], sizes[i]);
  for (int i = NMSG / 2; i < NMSG; i++) rreq[i] = post_recv(net, p.recv, in[i], (1 << 20) + 1);
  ck_assert_int_eq(wait_all(net, rreq, NMSG, got), ncclSuccess);
  ck_assert_int_eq(wait_all(net, sreq, NMSG, NULL), ncclSuccess);
  for (int i = 0; i < NMSG; i++) {
    ck_assert_int_eq(got[i], (int)sizes[i]);
    ck_assert_uint_eq(count_bad(in[i], sizes[i], i), 0);
    free(out[i]);
    free(in[i]);
  }
  /* At most NCCL_NET_MAX_REQUESTS in flight: the next post returns no request. */
  void* reqs[NCCL_NET_MAX_REQUESTS + 1];
  char byte = 5;
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) reqs[i] = post_send(net, p.send, &byte, 1);
  void* none = (void*)1;
  ck_assert_int_eq(net->isend(p.send, &byte, 1, 0, NULL, NULL, &none), ncclSuccess);
  ck_assert_ptr_null(none);
  char sink[NCCL_NET_MAX_REQUESTS];
  void* rr[NCCL_NET_MAX_REQUESTS];
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) rr[i] = post_recv(net, p.recv, &sink[i], 1);
  ck_assert_int_eq(wait_all(net, rr, NCCL_NET_MAX_REQUESTS, NULL), ncclSuccess);
  ck_assert_int_eq(wait_all(net, reqs, NCCL_NET_MAX_REQUESTS, NULL), ncclSuccess);
  for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++) ck_assert_int_eq(sink[i], 5);
  close_pair(net, p);
}
END_TEST

START_TEST(large_messages_split_over_streams) {
  unit_set_param("NCCL_NSOCKS_PERTHREAD", "2");
  unit_set_param("NCCL_SOCKET_NTHREADS", "2");
  const ncclNet_t* net = socket_net();
  pair_t p = connect_pair(net);
  const size_t big = 8u << 20;
  size_t sizes[4] = {big, 100, 3 * 65536 + 5, big / 2 + 3};
  uint64_t total = 0;
  for (int round = 0; round < 4; round++) {
    char* out = malloc(sizes[round]);
    char* in = calloc(1, big);
    fill(out, sizes[round], round);
    void* r = post_recv(net, p.recv, in, big);
    void* s = post_send(net, p.send, out, sizes[round]);
    int got = 0;
    ck_assert_int_eq(wait_all(net, &r, 1, &got), ncclSuccess);
    ck_assert_int_eq(wait_all(net, &s, 1, NULL), ncclSuccess);
    ck_assert_int_eq(got, (int)sizes[round]);
    ck_assert_uint_eq(count_bad(in, sizes[round], round), 0);
    total += sizes[round];
    free(out);
    free(in);
  }
  int ns = 0, nr = 0;
  uint64_t sb[8] = {0}, rb[8] = {0}, ssum = 0, rsum = 0;
  ck_assert_int_eq(net_socket_comm_stats(p.send, 8, &ns, sb), ncclSuccess);
  ck_assert_int_eq(net_socket_comm_stats(p.recv, 8, &nr, rb), ncclSuccess);
  ck_assert_int_eq(ns, 4);
  ck_assert_int_eq(nr, 4);
  for (int i = 0; i < 4; i++) {
    ck_assert_msg(sb[i] >= (big / 4) && rb[i] >= (big / 4), "stream %d carried %llu/%llu bytes", i,
                  (unsigned long long)sb[i], (unsigned long long)rb[i]);
    ssum += sb[i];
    rsum += rb[i];
  }
  ck_assert_uint_eq(ssum, total);
  ck_assert_uint_eq(rsum, total);
  close_pair(net, p);
}
END_TEST

START_TEST(default_uses_one_stream) {
  unit_set_param("NCCL_NSOCKS_PERTHREAD", "1");
  unit_set_param("NCCL_SOCKET_NTHREADS", "1");
  const ncclNet_t* net = socket_net();
  pair_t p = connect_pair(net);
  size_t n = 3u << 20;
  char* out = malloc(n);
  char* in = malloc(n);
  fill(out, n, 9);
  void* r = post_recv(net, p.recv, in, n);
  void* s = post_send(net, p.send, out, n);
  ck_assert_int_eq(wait_all(net, &r, 1, NULL), ncclSuccess);
  ck_assert_int_eq(wait_all(net, &s, 1, NULL), ncclSuccess);
  ck_assert_uint_eq(count_bad(in, n, 9), 0);
  int ns = 0;
  uint64_t b[4];
  ck_assert_int_eq(net_socket_comm_stats(p.send, 4, &ns, b), ncclSuccess);
  ck_assert_int_eq(ns, 1);
  ck_assert_uint_eq(b[0], n);
  free(out);
  free(in);
  close_pair(net, p);
}
END_TEST

/* A sender that closes between messages: the receive fails (ncclRemoteError) but nothing is
 * WARNed (a peer that finished is the caller's call); closing inside a message is a WARN. */
static void closed_sender_case(void) {
  char log[256];
  fork_ranks_log_to_file("WARN", log, sizeof(log));
  const ncclNet_t* net = socket_net();
  pair_t p = connect_pair(net);
  char buf[4096];
  void* r = post_recv(net, p.recv, buf, sizeof(buf));
  ck_assert_int_eq(net->closeSend(p.send), ncclSuccess);
  p.send = NULL;
  log_clear_last_error();
  ck_assert_int_eq(wait_all(net, &r, 1, NULL), ncclRemoteError);
  ck_assert_str_eq(log_last_error(), "");
  close_pair(net, p);

  p = connect_pair(net);
  size_t n = 64u << 20;
  char* out = calloc(1, n);
  char* in = malloc(n);
  r = post_recv(net, p.recv, in, n);
  void* s = post_send(net, p.send, out, n);
  int done = 0;
  for (int i = 0; i < 100; i++) ck_assert_int_eq(net->test(s, &done, NULL), ncclSuccess);
  ck_assert_int_eq(done, 0); /* 64 MiB do not fit in socket buffers */
  ck_assert_int_eq(net->closeSend(p.send), ncclSuccess);
  p.send = NULL;
  ck_assert_int_eq(wait_all(net, &r, 1, NULL), ncclRemoteError);
  /* Logged by whichever thread saw it (a helper thread with several streams). */
  const char* line[] = {"WARN", "middle of a message", "127.0.0.1:", NULL};
  ck_assert_msg(fork_ranks_file_has_line(log, line), "no WARN naming the peer in %s", log);
  /* The buffers stay the network's until the comms close: another stream's thread may still
   * be moving bytes of the failed request. */
  close_pair(net, p);
  free(out);
  free(in);
  unlink(log);
}

START_TEST(closed_sender_fails_receive) {
  closed_sender_case();
  unit_set_param("NCCL_NSOCKS_PERTHREAD", "2");
  unit_set_param("NCCL_SOCKET_NTHREADS", "2");
  closed_sender_case();
}
END_TEST

START_TEST(closed_receiver_fails_send_without_sigpipe) {
  const ncclNet_t* net = socket_net();
  pair_t p = connect_pair(net);
  ck_assert_int_eq(net->closeRecv(p.recv), ncclSuccess);
  p.recv = NULL;
  size_t n = 4u << 20;
  char* data = calloc(1, n);
  ncclResult_t res = ncclSuccess;
  uint64_t deadline = clock_ns() + WAIT_NS;
  while (res == ncclSuccess && clock_ns() < deadline) {
    void* s = NULL;
    res = net->isend(p.send, data, n, 0, NULL, NULL, &s); /* may fail at once */
    if (res == ncclSuccess && s != NULL) res = wait_all(net, &s, 1, NULL);
  }
  ck_assert_msg(res == ncclRemoteError || res == ncclSystemError, "send result %d", (int)res);
  ck_assert_msg(strstr(log_last_error(), "127.0.0.1:") != NULL, "no peer address in '%s'",
                log_last_error());
  free(data);
  close_pair(net, p);
}
END_TEST

START_TEST(truncated_receive_is_an_error) {
  const ncclNet_t* net = socket_net();
  pair_t p = connect_pair(net);
  char out[1000], in[500];
  memset(out, 1, sizeof(out));
  void* r = post_recv(net, p.recv, in, sizeof(in));
  void* s = post_send(net, p.send, out, sizeof(out));
  ck_assert_int_eq(wait_all(net, &r, 1, NULL), ncclInvalidUsage);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "1000 bytes"));
  (void)s;
  close_pair(net, p);
}
END_TEST

START_TEST(wrong_magic_is_rejected) {
  const ncclNet_t* net = socket_net();
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = NULL;
  void* send = NULL;
  void* recv = NULL;
  ncclNetDeviceHandle_t* dh = NULL;
  ck_assert_int_eq(net->listen(NULL, 0, handle, &listen), ncclSuccess);
  handle[0] ^= 0x55; /* the magic is the handle's first field */
  ck_assert_int_eq(net->accept(listen, &recv, &dh), ncclSuccess); /* nobody yet: no comm */
  ck_assert_ptr_null(recv);
  ck_assert_int_eq(net->connect(NULL, 0, handle, &send, &dh), ncclSuccess);
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < 10000 && res == ncclSuccess && recv == NULL; i++) {
    res = net->accept(listen, &recv, &dh);
    usleep(100);
  }
  ck_assert_int_eq(res, ncclSystemError);
  ck_assert_ptr_null(recv);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "magic"));
  ck_assert_int_eq(net->closeSend(send), ncclSuccess);
  ck_assert_int_eq(net->closeListen(listen), ncclSuccess);
}
END_TEST

int main(void) {
  Suite* s = suite_create("net_socket");
  TCase* tc = tcase_create("net_socket");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, devices_and_properties);
  tcase_add_test(tc, messages_arrive_in_order);
  tcase_add_test(tc, large_messages_split_over_streams);
  tcase_add_test(tc, default_uses_one_stream);
  tcase_add_test(tc, closed_sender_fails_receive);
  tcase_add_test(tc, closed_receiver_fails_send_without_sigpipe);
  tcase_add_test(tc, truncated_receive_is_an_error);
  tcase_add_test(tc, wrong_magic_is_rejected);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
