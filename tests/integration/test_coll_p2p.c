/* Point to point: Send/Recv in every posting order (messages larger than a connection's FIFO, so
 * an order that needs the other side to progress first would deadlock), several messages to one
 * peer, sends to self, datatypes that differ but agree in bytes, calls outside a group, and
 * AlltoAll / Gather / Scatter. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "itest.h"

#define BIG (3u << 20) /* bytes: many FIFO slots of both protocols */

/* Message from src to dst number k: bytes derived from (src, dst, k). */
static void msg_fill(char* buf, size_t bytes, int src, int dst, int k) {
  itest_fill_bytes(buf, bytes, src * 64 + dst, (uint32_t)(1000 + k), 0);
}

static int msg_check(const char* buf, size_t bytes, int src, int dst, int k) {
  char* want = malloc(bytes ? bytes : 1);
  IT_EXPECT(want != NULL, "out of memory");
  msg_fill(want, bytes, src, dst, k);
  int bad = memcmp(want, buf, bytes) != 0;
  size_t at = 0;
  while (bad && want[at] == buf[at]) at++;
  free(want);
  IT_EXPECT(!bad, "message %d from %d to %d (%zu bytes) differs at byte %zu", k, src, dst, bytes,
            at);
  return 0;
}

/* ---- Two ranks, every order ------------------------------------------------------------------ */
typedef struct order_cfg {
  int order[2]; /* per rank: 0 = send first, 1 = recv first */
  size_t bytes;
  bool grouped;
} order_cfg_t;

static int order_body(itest_rank_t* r, void* arg) {
  const order_cfg_t* cfg = arg;
  int peer = 1 - r->rank;
  char* s = malloc(cfg->bytes);
  char* d = malloc(cfg->bytes);
  IT_EXPECT(s && d, "out of memory");
  msg_fill(s, cfg->bytes, r->rank, peer, 0);
  memset(d, 0, cfg->bytes);
  ncclComm_t c = r->comms[0];
  if (cfg->grouped) IT_NCCL(ncclGroupStart());
  if (cfg->order[r->rank] == 0) {
    IT_NCCL(ncclSend(s, cfg->bytes, ncclUint8, peer, c, NULL));
    IT_NCCL(ncclRecv(d, cfg->bytes, ncclUint8, peer, c, NULL));
  } else {
    IT_NCCL(ncclRecv(d, cfg->bytes, ncclUint8, peer, c, NULL));
    IT_NCCL(ncclSend(s, cfg->bytes, ncclUint8, peer, c, NULL));
  }
  if (cfg->grouped) IT_NCCL(ncclGroupEnd());
  if (msg_check(d, cfg->bytes, peer, r->rank, 0)) return 1;
  free(s);
  free(d);
  return 0;
}

START_TEST(test_sendrecv_orders) {
  static const size_t sizes[3] = {1, 5000, BIG};
  for (int a = 0; a < 2; a++)
    for (int b = 0; b < 2; b++)
      for (int z = 0; z < 3; z++) {
        order_cfg_t cfg = {.order = {a, b}, .bytes = sizes[z], .grouped = true};
        itest_opts_t o = {.nranks = 2, .timeout_s = 60};
        ck_assert_msg(itest_run(&o, order_body, &cfg) == 0, "orders %d/%d, %zu bytes", a, b,
                      sizes[z]);
      }
}
END_TEST

START_TEST(test_sendrecv_ungrouped) {
  /* Outside a group, a send must be met by the peer's receive: rank 0 sends first and rank 1
   * receives first (each call completes on its own). */
  order_cfg_t cfg = {.order = {0, 1}, .bytes = BIG, .grouped = false};
  itest_opts_t o = {.nranks = 2, .timeout_s = 60};
  ck_assert_int_eq(itest_run(&o, order_body, &cfg), 0);
}
END_TEST

/* ---- Everyone to everyone, in a per-rank shuffled order ----------------------------------------
 */
typedef struct all_cfg {
  size_t bytes;
  int msgs_per_pair; /* several messages to one peer: matched in posting order */
  bool with_self;
} all_cfg_t;

static int all_pairs_body(itest_rank_t* r, void* arg) {
  const all_cfg_t* cfg = arg;
  int n = r->nranks, me = r->rank, m = cfg->msgs_per_pair;
  int nops = 2 * n * m;
  /* op j: peer = j / (2m), k = (j / 2) % m, send when j even. Sizes vary per message. */
  char** bufs = calloc((size_t)nops, sizeof(char*));
  int* perm = malloc((size_t)nops * sizeof(int));
  IT_EXPECT(bufs && perm, "out of memory");
  for (int j = 0; j < nops; j++) perm[j] = j;
  /* A different order on every rank; messages to one peer keep their relative order. */
  for (int j = nops - 1; j > 0; j--) {
    int q = (int)(itest_hash((uint64_t)me, (uint64_t)j, 77) % (uint64_t)(j + 1));
    int t = perm[j];
    perm[j] = perm[q];
    perm[q] = t;
  }
  /* Restore per-(peer, direction) order of k by sorting k values within each such class. */
  for (int j = 0; j < nops; j++) {
    for (int i = j + 1; i < nops; i++) {
      int a = perm[j], b = perm[i];
      bool same = a / (2 * m) == b / (2 * m) && a % 2 == b % 2;
      if (same && (a / 2) % m > (b / 2) % m) {
        perm[j] = b;
        perm[i] = a;
      }
    }
  }
  IT_NCCL(ncclGroupStart());
  for (int idx = 0; idx < nops; idx++) {
    int j = perm[idx];
    int peer = j / (2 * m), k = (j / 2) % m;
    bool send = j % 2 == 0;
    if (peer == me && !cfg->with_self) continue;
    size_t bytes = cfg->bytes + (size_t)k * 131 + (size_t)(send ? me : peer) * 17;
    bufs[j] = malloc(bytes);
    IT_EXPECT(bufs[j] != NULL, "out of memory");
    if (send) {
      msg_fill(bufs[j], bytes, me, peer, k);
      IT_NCCL(ncclSend(bufs[j], bytes, ncclUint8, peer, r->comms[0], NULL));
    } else {
      memset(bufs[j], 0, bytes);
      IT_NCCL(ncclRecv(bufs[j], bytes, ncclUint8, peer, r->comms[0], NULL));
    }
  }
  IT_NCCL(ncclGroupEnd());
  for (int j = 0; j < nops; j++) {
    int peer = j / (2 * m), k = (j / 2) % m;
    if (j % 2 == 1 && bufs[j] != NULL) {
      size_t bytes = cfg->bytes + (size_t)k * 131 + (size_t)peer * 17;
      if (msg_check(bufs[j], bytes, peer, me, k)) return 1;
    }
    free(bufs[j]);
  }
  free(bufs);
  free(perm);
  return 0;
}

START_TEST(test_all_pairs_shuffled) {
  all_cfg_t cfg = {.bytes = 300000, .msgs_per_pair = 1, .with_self = true};
  itest_opts_t o = {.nranks = 4, .timeout_s = 120};
  ck_assert_int_eq(itest_run(&o, all_pairs_body, &cfg), 0);
  all_cfg_t small = {.bytes = 3, .msgs_per_pair = 3, .with_self = true};
  itest_opts_t o5 = {.nranks = 5, .timeout_s = 120};
  ck_assert_int_eq(itest_run(&o5, all_pairs_body, &small), 0);
  all_cfg_t many = {.bytes = 70000, .msgs_per_pair = 2, .with_self = false};
  itest_opts_t o3 = {.nranks = 3, .timeout_s = 120};
  ck_assert_int_eq(itest_run(&o3, all_pairs_body, &many), 0);
}
END_TEST

/* ---- Ring shift, with LL forced and with different datatypes of the same size -----------------
 */
static int shift_body(itest_rank_t* r, void* arg) {
  (void)arg;
  int n = r->nranks, me = r->rank;
  int next = (me + 1) % n, prev = (me + n - 1) % n;
  size_t words = 250001; /* int32 sent, received as 4 * words uint8 */
  char* s = malloc(words * 4);
  char* d = calloc(words, 4);
  IT_EXPECT(s && d, "out of memory");
  msg_fill(s, words * 4, me, next, 0);
  IT_NCCL(ncclGroupStart());
  if (me % 2) {
    IT_NCCL(ncclRecv(d, words * 4, ncclUint8, prev, r->comms[0], NULL));
    IT_NCCL(ncclSend(s, words, ncclInt32, next, r->comms[0], NULL));
  } else {
    IT_NCCL(ncclSend(s, words, ncclInt32, next, r->comms[0], NULL));
    IT_NCCL(ncclRecv(d, words * 4, ncclUint8, prev, r->comms[0], NULL));
  }
  IT_NCCL(ncclGroupEnd());
  if (msg_check(d, words * 4, prev, me, 0)) return 1;
  free(s);
  free(d);
  return 0;
}

START_TEST(test_shift_mixed_types) {
  itest_opts_t o = {.nranks = 3, .timeout_s = 60};
  ck_assert_int_eq(itest_run(&o, shift_body, NULL), 0);
  itest_opts_t ll = {.nranks = 4, .timeout_s = 60, .env = {"NCCL_PROTO=LL"}};
  ck_assert_int_eq(itest_run(&ll, shift_body, NULL), 0);
}
END_TEST

/* ---- AlltoAll, Gather, Scatter ------------------------------------------------------------------
 */
typedef struct a2a_cfg {
  size_t counts[3];
  int ncounts;
} a2a_cfg_t;

static int a2a_body(itest_rank_t* r, void* arg) {
  const a2a_cfg_t* cfg = arg;
  uint32_t seed = 50;
  for (int k = 0; k < cfg->ncounts; k++) {
    for (int ti = 0; ti < 12; ti += 5) {
      ncclDataType_t t = itest_all_types[ti];
      for (int f = IT_ALLTOALL; f <= IT_SCATTER; f++) {
        for (int root = 0; root < r->nranks; root += (f == IT_ALLTOALL ? r->nranks : 3)) {
          itest_case_t c = {
              .func = f, .dtype = t, .count = cfg->counts[k], .root = root, .seed = seed++};
          if (itest_op_run(r->comms[0], &c)) return 1;
        }
      }
    }
  }
  return 0;
}

START_TEST(test_alltoall_8ranks) {
  a2a_cfg_t cfg = {.counts = {0, 1, 20001}, .ncounts = 3};
  itest_opts_t o = {.nranks = 8, .timeout_s = 180};
  ck_assert_int_eq(itest_run(&o, a2a_body, &cfg), 0);
}
END_TEST

START_TEST(test_gather_scatter) {
  a2a_cfg_t cfg = {.counts = {7, 100003}, .ncounts = 2};
  itest_opts_t o = {.nranks = 5, .timeout_s = 120};
  ck_assert_int_eq(itest_run(&o, a2a_body, &cfg), 0);
}
END_TEST

/* ---- A one-rank communicator: every call is local ----------------------------------------------
 */
static int single_body(itest_rank_t* r, void* arg) {
  (void)arg;
  uint32_t seed = 9;
  for (int f = 0; f < IT_FUNC_COUNT; f++) {
    for (int op = 0; op < IT_OP_COUNT; op++) {
      if (!itest_func_reduces(f) && op > 0) break;
      itest_case_t c = {.func = f,
                        .dtype = itest_all_types[(f + op) % 12],
                        .op = op,
                        .count = 1234,
                        .seed = seed++};
      if (itest_op_run(r->comms[0], &c)) return 1;
    }
  }
  return 0;
}

START_TEST(test_single_rank) {
  itest_opts_t o = {.nranks = 1, .timeout_s = 60};
  ck_assert_int_eq(itest_run(&o, single_body, NULL), 0);
}
END_TEST

static Suite* p2p_suite(void) {
  Suite* s = suite_create("coll_p2p");
  TCase* tc = tcase_create("p2p");
  tcase_set_timeout(tc, 300);
  tcase_add_test(tc, test_sendrecv_orders);
  tcase_add_test(tc, test_sendrecv_ungrouped);
  tcase_add_test(tc, test_all_pairs_shuffled);
  tcase_add_test(tc, test_shift_mixed_types);
  tcase_add_test(tc, test_alltoall_8ranks);
  tcase_add_test(tc, test_gather_scatter);
  tcase_add_test(tc, test_single_rank);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(p2p_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
