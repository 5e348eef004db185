/* The built-in IB network through the ncclNet API, on a real verbs stack (Soft-RoCE in the guest):
 * devices and properties, messages of many sizes in order over 1 to 4 QPs (taking turns or
 * striped, with and without adaptive-routing writes), more messages than CTS slots, flushes by
 * RDMA READ, a message larger than its receive, peers that close, the registration cache, and a
 * NIC merged from two devices. Without an RDMA device: SKIP. */
#include <check.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "fork_ranks.h"
#include "net/ib.h"
#include "rdma_env.h"
#include "unit.h"

#define WAIT_NS (30ull * 1000000000ull)

typedef struct ib_pair {
  const ncclNet_t* net;
  void* ctx;
  void* send;
  void* recv;
} ib_pair_t;

static const ncclNet_t* ib_net(void** ctx) {
  unit_set_param("NCCL_SOCKET_IFNAME", "lo");
  const ncclNet_t* net = net_builtin_ib();
  ck_assert_ptr_nonnull(net);
  ck_assert_int_eq(net_ctx_open(net, 1, -1, ctx), ncclSuccess);
  return net;
}

static ib_pair_t ib_connect_pair(int dev) {
  ib_pair_t p = {0};
  p.net = ib_net(&p.ctx);
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  void* listen = NULL;
  ck_assert_int_eq(p.net->listen(p.ctx, dev, handle, &listen), ncclSuccess);
  uint64_t deadline = clock_ns() + WAIT_NS;
  while ((p.send == NULL || p.recv == NULL) && clock_ns() < deadline) {
    if (p.send == NULL)
      ck_assert_int_eq(p.net->connect(p.ctx, dev, handle, &p.send, NULL), ncclSuccess);
    if (p.recv == NULL) ck_assert_int_eq(p.net->accept(listen, &p.recv, NULL), ncclSuccess);
  }
  ck_assert_ptr_nonnull(p.send);
  ck_assert_ptr_nonnull(p.recv);
  ck_assert_int_eq(p.net->closeListen(listen), ncclSuccess);
  return p;
}

static void ib_close_pair(ib_pair_t* p) {
  if (p->send) ck_assert_int_eq(p->net->closeSend(p->send), ncclSuccess);
  if (p->recv) ck_assert_int_eq(p->net->closeRecv(p->recv), ncclSuccess);
  net_ctx_close(p->net, p->ctx);
}

static void fill(char* b, size_t n, int seed) {
  for (size_t i = 0; i < n; i++) b[i] = (char)(i * 31 + (size_t)seed * 7 + (i >> 10));
}
static size_t count_bad(const char* b, size_t n, int seed) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += b[i] != (char)(i * 31 + (size_t)seed * 7 + (i >> 10));
  return bad;
}

static ncclResult_t wait_req(const ncclNet_t* net, void* req, int* size) {
  uint64_t deadline = clock_ns() + WAIT_NS;
  for (;;) {
    int done = 0;
    ncclResult_t res = net->test(req, &done, size);
    if (res != ncclSuccess || done) return res;
    if (clock_ns() > deadline) return ncclInternalError;
  }
}

static void* post_recv(ib_pair_t* p, void* data, size_t size, void* mh) {
  void* req = NULL;
  int tag = 0;
  ck_assert_int_eq(p->net->irecv(p->recv, 1, &data, &size, &tag, &mh, NULL, &req), ncclSuccess);
  ck_assert_ptr_nonnull(req);
  return req;
}

/* isend returns no request until the receiver's clear-to-send has arrived. */
static ncclResult_t post_send(ib_pair_t* p, void* data, size_t size, void* mh, void** req) {
  uint64_t deadline = clock_ns() + WAIT_NS;
  *req = NULL;
  while (*req == NULL) {
    ncclResult_t res = p->net->isend(p->send, data, size, 0, mh, NULL, req);
    if (res != ncclSuccess) return res;
    if (clock_ns() > deadline) return ncclInternalError;
  }
  return ncclSuccess;
}

START_TEST(devices_and_properties) {
  void* ctx = NULL;
  const ncclNet_t* net = ib_net(&ctx);
  ck_assert_str_eq(net->name, "IB");
  int ndev = 0;
  ck_assert_int_eq(net->devices(&ndev), ncclSuccess);
  ck_assert_int_ge(ndev, 1);
  ncclNetProperties_t props;
  memset(&props, 0, sizeof(props));
  ck_assert_int_eq(net->getProperties(0, &props), ncclSuccess);
  ck_assert_ptr_nonnull(strstr(props.name, "rxe"));
  ck_assert(props.ptrSupport & NCCL_PTR_HOST);
  ck_assert_int_gt(props.speed, 0);
  ck_assert_int_eq(props.port, 1);
  ck_assert_int_eq(props.maxRecvs, 1);
  ck_assert_int_eq(props.vProps.ndevs, 1);
  ck_assert_uint_eq(props.maxP2pBytes, IB_MAX_MSG);
  ck_assert_int_eq(net->getProperties(ndev, &props), ncclInvalidArgument);
  /* rxe0 on lo: the chosen GID is the RoCE v2 one of 127.0.0.1 */
  int i = 0;
  while (i < ib_ndevs && strcmp(ib_devs[i].name, "rxe0") != 0) i++;
  ck_assert_int_lt(i, ib_ndevs);
  char gid[64];
  ck_assert_str_eq(ib_gid_format(ib_devs[i].gid.raw, gid, sizeof(gid)), "::ffff:127.0.0.1");
  net_ctx_close(net, ctx);
}
END_TEST

/* Messages of many sizes, receives posted first, checked byte by byte; the connection uses the
 * QP count and striping of the environment. Returns the number of messages. */
static void messages_case(const char* qps, const char* split, const char* ar) {
  char log[256];
  unit_set_param("NCCL_IB_QPS_PER_CONNECTION", qps);
  unit_set_param("NCCL_IB_SPLIT_DATA_ON_QPS", split);
  unit_set_param("NCCL_IB_ADAPTIVE_ROUTING", ar);
  unit_set_param("NCCL_IB_AR_THRESHOLD", "1000");
  unit_set_param("NCCL_DEBUG_SUBSYS", "INIT,NET");
  fork_ranks_log_to_file("INFO", log, sizeof(log));
  ib_pair_t p = ib_connect_pair(0);
  enum { N = 12 };
  size_t sizes[N] = {0, 1, 7, 128, 4096, 65536, 65537, 300000, 2, 1 << 20, 0, 123457};
  size_t cap = (1 << 20) + 4096;
  char* big = malloc((size_t)N * 2 * cap);
  ck_assert_ptr_nonnull(big);
  void *smh = NULL, *rmh = NULL;
  ck_assert_int_eq(p.net->regMr(p.send, big, (size_t)N * cap, NCCL_PTR_HOST, &smh), ncclSuccess);
  ck_assert_int_eq(
      p.net->regMr(p.recv, big + (size_t)N * cap, (size_t)N * cap, NCCL_PTR_HOST, &rmh),
      ncclSuccess);
  void* rreq[N];
  void* sreq[N];
  for (int i = 0; i < N; i++) {
    fill(big + (size_t)i * cap, sizes[i], i);
    memset(big + (size_t)(N + i) * cap, 0xee, cap);
    rreq[i] = post_recv(&p, big + (size_t)(N + i) * cap, cap, rmh);
  }
  for (int i = 0; i < N; i++)
    ck_assert_int_eq(post_send(&p, big + (size_t)i * cap, sizes[i], smh, &sreq[i]), ncclSuccess);
  for (int i = 0; i < N; i++) {
    int got = -1;
    ck_assert_int_eq(wait_req(p.net, rreq[i], &got), ncclSuccess);
    ck_assert_int_eq(got, (int)sizes[i]);
    ck_assert_uint_eq(count_bad(big + (size_t)(N + i) * cap, sizes[i], i), 0);
    /* nothing beyond the message was written */
    ck_assert_int_eq((unsigned char)big[(size_t)(N + i) * cap + sizes[i]], 0xee);
  }
  for (int i = 0; i < N; i++) ck_assert_int_eq(wait_req(p.net, sreq[i], NULL), ncclSuccess);
  ck_assert_int_eq(p.net->deregMr(p.send, smh), ncclSuccess);
  ck_assert_int_eq(p.net->deregMr(p.recv, rmh), ncclSuccess);
  ib_close_pair(&p);
  free(big);
  char want[64];
  snprintf(want, sizeof(want), "%s QP", qps);
  const char* line[] = {"NET/IB: sending to", want, split[0] == '1' ? "striped" : "take turns",
                        "GID ::ffff:127.0.0.1", NULL};
  ck_assert_msg(fork_ranks_file_has_line(log, line), "no connection line with %s QPs in %s", qps,
                log);
  unlink(log);
}

START_TEST(messages_one_qp) {
  messages_case("1", "0", "0");
}
END_TEST
START_TEST(messages_four_qps_taking_turns) {
  messages_case("4", "0", "0");
}
END_TEST
START_TEST(messages_three_qps_striped) {
  messages_case("3", "1", "0");
}
END_TEST
START_TEST(messages_striped_adaptive_routing_writes) {
  messages_case("2", "1", "1");
}
END_TEST

/* Far more messages than CTS slots, a window of them in flight: the FIFO wraps many times. */
START_TEST(fifo_wraps) {
  unit_set_param("NCCL_IB_QPS_PER_CONNECTION", "2");
  ib_pair_t p = ib_connect_pair(0);
  enum { W = 8, TOTAL = 300, SZ = 3000 };
  char* out = malloc(W * SZ);
  char* in = malloc(W * SZ);
  void *smh = NULL, *rmh = NULL;
  ck_assert_int_eq(p.net->regMr(p.send, out, W * SZ, NCCL_PTR_HOST, &smh), ncclSuccess);
  ck_assert_int_eq(p.net->regMr(p.recv, in, W * SZ, NCCL_PTR_HOST, &rmh), ncclSuccess);
  void* rreq[W] = {0};
  void* sreq[W] = {0};
  for (int m = 0; m < TOTAL + W; m++) {
    int slot = m % W;
    if (m >= W) { /* retire message m - W */
      int got = -1;
      ck_assert_int_eq(wait_req(p.net, rreq[slot], &got), ncclSuccess);
      ck_assert_int_eq(wait_req(p.net, sreq[slot], NULL), ncclSuccess);
      ck_assert_int_eq(got, SZ - (m - W) % 7);
      ck_assert_uint_eq(count_bad(in + slot * SZ, (size_t)got, m - W), 0);
    }
    if (m >= TOTAL) continue;
    size_t sz = SZ - m % 7;
    fill(out + slot * SZ, sz, m);
    rreq[slot] = post_recv(&p, in + slot * SZ, SZ, rmh);
    ck_assert_int_eq(post_send(&p, out + slot * SZ, sz, smh, &sreq[slot]), ncclSuccess);
  }
  p.net->deregMr(p.send, smh);
  p.net->deregMr(p.recv, rmh);
  ib_close_pair(&p);
  free(out);
  free(in);
}
END_TEST

START_TEST(flush_reads_back_when_forced) {
  for (int forced = 0; forced < 2; forced++) {
    unit_set_param("NCCL_NET_FORCE_FLUSH", forced ? "1" : "0");
    ib_pair_t p = ib_connect_pair(0);
    char out[5000], in[5000];
    fill(out, sizeof(out), 3);
    void *smh = NULL, *rmh = NULL, *s = NULL, *f = (void*)1;
    ck_assert_int_eq(p.net->regMr(p.send, out, sizeof(out), NCCL_PTR_HOST, &smh), ncclSuccess);
    ck_assert_int_eq(p.net->regMr(p.recv, in, sizeof(in), NCCL_PTR_HOST, &rmh), ncclSuccess);
    void* r = post_recv(&p, in, sizeof(in), rmh);
    ck_assert_int_eq(post_send(&p, out, sizeof(out), smh, &s), ncclSuccess);
    ck_assert_int_eq(wait_req(p.net, r, NULL), ncclSuccess);
    void* data = in;
    int size = sizeof(in);
    ck_assert_int_eq(p.net->iflush(p.recv, 1, &data, &size, &rmh, &f), ncclSuccess);
    if (forced) {
      ck_assert_ptr_nonnull(f);
      ck_assert_int_eq(wait_req(p.net, f, NULL), ncclSuccess);
    } else {
      ck_assert_ptr_null(f); /* host memory and no GPUDirect: nothing to flush */
    }
    ck_assert_uint_eq(count_bad(in, sizeof(in), 3), 0);
    ck_assert_int_eq(wait_req(p.net, s, NULL), ncclSuccess);
    p.net->deregMr(p.send, smh);
    p.net->deregMr(p.recv, rmh);
    ib_close_pair(&p);
  }
}
END_TEST

START_TEST(message_larger_than_its_receive_fails) {
  ib_pair_t p = ib_connect_pair(0);
  char out[1000], in[500];
  memset(out, 1, sizeof(out));
  void *smh = NULL, *rmh = NULL, *s = NULL;
  ck_assert_int_eq(p.net->regMr(p.send, out, sizeof(out), NCCL_PTR_HOST, &smh), ncclSuccess);
  ck_assert_int_eq(p.net->regMr(p.recv, in, sizeof(in), NCCL_PTR_HOST, &rmh), ncclSuccess);
  post_recv(&p, in, sizeof(in), rmh);
  ck_assert_int_eq(post_send(&p, out, sizeof(out), smh, &s), ncclInternalError);
  const char* err = log_last_error();
  ck_assert_msg(strstr(err, "1000 bytes") != NULL && strstr(err, "500 bytes") != NULL, "%s", err);
  p.net->deregMr(p.send, smh);
  p.net->deregMr(p.recv, rmh);
  ib_close_pair(&p);
}
END_TEST

/* A sender that closes: the pending receive fails within about a second, as ncclRemoteError and
 * without a WARN (a peer that finished closes too). A receiver that closes: the sender's next
 * send fails with a WARN naming the peer. */
START_TEST(closed_peers_are_noticed) {
  ib_pair_t p = ib_connect_pair(0);
  char buf[4096];
  void* rmh = NULL;
  ck_assert_int_eq(p.net->regMr(p.recv, buf, sizeof(buf), NCCL_PTR_HOST, &rmh), ncclSuccess);
  void* r = post_recv(&p, buf, sizeof(buf), rmh);
  ck_assert_int_eq(p.net->closeSend(p.send), ncclSuccess);
  p.send = NULL;
  log_clear_last_error();
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(wait_req(p.net, r, NULL), ncclRemoteError);
  ck_assert_double_lt(fork_ranks_ms_since(t0), 3000);
  ck_assert_str_eq(log_last_error(), "");
  p.net->deregMr(p.recv, rmh);
  ib_close_pair(&p);

  p = ib_connect_pair(0);
  ck_assert_int_eq(p.net->closeRecv(p.recv), ncclSuccess);
  p.recv = NULL;
  void* smh = NULL;
  ck_assert_int_eq(p.net->regMr(p.send, buf, sizeof(buf), NCCL_PTR_HOST, &smh), ncclSuccess);
  void* s = NULL;
  t0 = clock_ns();
  ck_assert_int_eq(post_send(&p, buf, sizeof(buf), smh, &s), ncclRemoteError);
  ck_assert_double_lt(fork_ranks_ms_since(t0), 3000);
  const char* err = log_last_error();
  ck_assert_msg(strstr(err, "127.0.0.1") != NULL && strstr(err, host_name()) != NULL,
                "the WARN does not name the peer: %s", err);
  p.net->deregMr(p.send, smh);
  ib_close_pair(&p);
}
END_TEST

START_TEST(registrations_are_cached_per_buffer) {
  ib_pair_t p = ib_connect_pair(0);
  size_t n = 1 << 20;
  char* buf = aligned_alloc(4096, n);
  int before = ib_devs[0].nmrs;
  void *a = NULL, *b = NULL, *c = NULL;
  ck_assert_int_eq(p.net->regMr(p.send, buf, n, NCCL_PTR_HOST, &a), ncclSuccess);
  ck_assert_int_eq(p.net->regMr(p.recv, buf + 4096, 8192, NCCL_PTR_HOST, &b), ncclSuccess);
  ck_assert_int_eq(p.net->regMr(p.send, buf, n, NCCL_PTR_HOST, &c), ncclSuccess);
  const ib_mhandle_t* ma = a;
  const ib_mhandle_t* mb = b;
  const ib_mhandle_t* mc = c;
  ck_assert_ptr_eq(ma->mrs[0], mb->mrs[0]); /* a part of a registered buffer shares its MR */
  ck_assert_ptr_eq(ma->mrs[0], mc->mrs[0]);
  ck_assert_int_eq(ib_devs[0].nmrs, before + 1);
  ck_assert_int_eq(p.net->deregMr(p.send, a), ncclSuccess);
  ck_assert_int_eq(p.net->deregMr(p.recv, b), ncclSuccess);
  ck_assert_int_eq(ib_devs[0].nmrs, before + 1); /* one user left */
  ck_assert_int_eq(p.net->deregMr(p.send, c), ncclSuccess);
  ck_assert_int_eq(ib_devs[0].nmrs, before);
  ib_close_pair(&p);
  free(buf);
}
END_TEST

/* Two devices made one NIC (makeVDevice): QPs alternate between them, data arrives whole. The
 * second device is rxe1 on a dummy interface, added by main() for this suite. */
START_TEST(merged_nic_carries_data) {
  void* ctx = NULL;
  const ncclNet_t* net = ib_net(&ctx);
  int ndev = 0;
  ck_assert_int_eq(net->devices(&ndev), ncclSuccess);
  ck_assert_msg(ndev >= 2, "expected rxe0 and rxe1, found %d device(s)", ndev);
  ncclNetVDeviceProps_t vp = {.ndevs = 2, .devs = {0, 1}};
  int vdev = -1;
  ck_assert_int_eq(net->makeVDevice(&vdev, &vp), ncclSuccess);
  ncclNetProperties_t props;
  ck_assert_int_eq(net->getProperties(vdev, &props), ncclSuccess);
  ck_assert_int_eq(props.vProps.ndevs, 2);
  ck_assert_ptr_nonnull(strchr(props.name, '+'));
  net_ctx_close(net, ctx);
  unit_set_param("NCCL_IB_QPS_PER_CONNECTION", "4");
  unit_set_param("NCCL_IB_SPLIT_DATA_ON_QPS", "1");
  ib_pair_t p = ib_connect_pair(vdev);
  size_t n = 777777;
  char* out = malloc(n);
  char* in = calloc(1, n);
  fill(out, n, 9);
  void *smh = NULL, *rmh = NULL, *s = NULL;
  ck_assert_int_eq(p.net->regMr(p.send, out, n, NCCL_PTR_HOST, &smh), ncclSuccess);
  ck_assert_int_eq(p.net->regMr(p.recv, in, n, NCCL_PTR_HOST, &rmh), ncclSuccess);
  ck_assert_int_eq(((ib_mhandle_t*)smh)->ndevs, 2);
  void* r = post_recv(&p, in, n, rmh);
  ck_assert_int_eq(post_send(&p, out, n, smh, &s), ncclSuccess);
  int got = -1;
  ck_assert_int_eq(wait_req(p.net, r, &got), ncclSuccess);
  ck_assert_int_eq(got, (int)n);
  ck_assert_uint_eq(count_bad(in, n, 9), 0);
  ck_assert_int_eq(wait_req(p.net, s, NULL), ncclSuccess);
  p.net->deregMr(p.send, smh);
  p.net->deregMr(p.recv, rmh);
  ib_close_pair(&p);
  free(out);
  free(in);
  /* NCCL_IB_MERGE_NICS=0 refuses to merge */
  unit_set_param("NCCL_IB_MERGE_NICS", "0");
  ck_assert_int_eq(net->makeVDevice(&vdev, &vp), ncclInvalidUsage);
}
END_TEST

int main(void) {
  rdma_require_device();
  /* A second device for the merged NIC: rxe1 on a dummy interface with its own address. */
  bool second = rdma_sh(
                    "ip link add btnrxe type dummy && ip addr add 10.77.0.1/24 dev btnrxe && "
                    "ip link set btnrxe up && rdma link add rxe1 type rxe netdev btnrxe") == 0;
  Suite* s = suite_create("ib_net");
  TCase* tc = tcase_create("ib_net");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, devices_and_properties);
  tcase_add_test(tc, messages_one_qp);
  tcase_add_test(tc, messages_four_qps_taking_turns);
  tcase_add_test(tc, messages_three_qps_striped);
  tcase_add_test(tc, messages_striped_adaptive_routing_writes);
  tcase_add_test(tc, fifo_wraps);
  tcase_add_test(tc, flush_reads_back_when_forced);
  tcase_add_test(tc, message_larger_than_its_receive_fails);
  tcase_add_test(tc, closed_peers_are_noticed);
  tcase_add_test(tc, registrations_are_cached_per_buffer);
  if (second) tcase_add_test(tc, merged_nic_carries_data);
  suite_add_tcase(s, tc);
  int rc = unit_run_suite(s);
  if (second) rdma_sh("rdma link delete rxe1; ip link delete btnrxe");
  if (!second) {
    fprintf(stderr, "could not add a second RDMA device (rxe1): the merged-NIC case failed\n");
    rc = EXIT_FAILURE;
  }
  return rc;
}
