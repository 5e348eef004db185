/* The step math both executors share (src/vocab/vocab.h), on every lane kind, against the two
 * properties the executors rely on:
 *  - lockstep: over a connection, the sender's steps and the receiver's steps carry the same
 *    sizes in the same order (both ends derive them from the same work item);
 *  - coverage: every element a rank must output is written by exactly one of its steps, and
 *    nothing else is.
 * Rings of 1..6 ranks (Broadcast and Reduce from every root, AllGather, ReduceScatter, AllReduce
 * with Simple and with LL, whose 2-rank form is the exchange), binary trees, the direct lanes
 * (OneShot: AllReduce, AllGather, ReduceScatter, Broadcast from every root; TwoShot AllReduce)
 * and point-to-point, over slices and chunks that do and do not divide. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h" /* TREE_MAX_CHILDREN */
#include "unit.h"
#include "vocab/vocab.h"

#define MAXN 8      /* direct lanes: up to DIRECT_MAX_RANKS */
#define MAXN_RING 6 /* rings and trees */
#define MAXSTEPS 4096
#define UNIT 4

/* The sizes of the steps of one lane that use role (as sender when send, else as receiver). */
typedef struct {
  int n;
  size_t nelem[MAXSTEPS];
} seq_t;

static void collect(const step_lane_t* ln, int role, bool send, seq_t* q) {
  q->n = 0;
  const size_t nops = steps_count(ln);
  ck_assert_uint_le(nops, MAXSTEPS);
  for (size_t k = 0; k < nops; k++) {
    step_t st;
    steps_plan(ln, k, &st);
    ck_assert_int_le(st.nrecv, ln->kind == LANE_DIRECT ? STEP_MAX_PEERS : TREE_MAX_CHILDREN);
    ck_assert_int_le(st.nsend, ln->kind == LANE_DIRECT ? STEP_MAX_PEERS : TREE_MAX_CHILDREN);
    const int* roles = send ? st.send : st.recv;
    const int cnt = send ? st.nsend : st.nrecv;
    int seen = 0;
    for (int j = 0; j < cnt; j++) seen += roles[j] == role;
    ck_assert_int_le(seen, 1); /* a step uses a connection once */
    if (!seen) continue;
    size_t n = st.nelem, off;
    if (ln->kind == LANE_DIRECT && steps_per_peer(&st)) /* what goes to / comes from that rank */
      steps_peer_span(&st, steps_other_rank(ln->rank, role), &off, &n);
    q->nelem[q->n++] = n;
  }
}

static void assert_same(const seq_t* a, const seq_t* b, const char* what) {
  ck_assert_msg(a->n == b->n, "%s: %d sends, %d receives", what, a->n, b->n);
  for (int i = 0; i < a->n; i++)
    ck_assert_msg(a->nelem[i] == b->nelem[i], "%s: step %d carries %zu sent, %zu received", what, i,
                  a->nelem[i], b->nelem[i]);
}

/* Marks what every step of ln writes to the output (in units from recvbuff); fails on a write
 * outside [0, out_units). */
static void mark_outputs(const step_lane_t* ln, unsigned char* hits, size_t out_units) {
  const size_t nops = steps_count(ln);
  for (size_t k = 0; k < nops; k++) {
    step_t st;
    steps_plan(ln, k, &st);
    if (st.out == NULL) continue;
    const size_t at = (size_t)(st.out - ln->recvbuff) / ln->unit;
    ck_assert_msg(at + st.nelem <= out_units, "step %zu writes [%zu, %zu) of %zu", k, at,
                  at + st.nelem, out_units);
    for (size_t i = 0; i < st.nelem; i++) hits[at + i]++;
  }
}

static char g_send[MAXN][1 << 16], g_recv[MAXN][1 << 16];
static int g_ring[MAXN];

static step_lane_t ring_lane(int func, int proto, int n, int r, int root, size_t count, size_t off,
                             size_t cnt, size_t chunk) {
  step_lane_t ln;
  memset(&ln, 0, sizeof(ln));
  ln.kind = LANE_RING;
  ln.func = (uint8_t)func;
  ln.proto = (uint8_t)proto;
  ln.unit = UNIT;
  ln.sendbuff = g_send[r];
  ln.recvbuff = g_recv[r];
  ln.count = count;
  ln.off = off;
  ln.cnt = cnt;
  ln.chunk = chunk;
  ln.n = n;
  ln.idx = r; /* ring 0 1 .. n-1 */
  ln.root_idx = root;
  ln.rank = r;
  ln.ring = g_ring;
  return ln;
}

/* Units a rank's output holds, and which of them the lane must write exactly once. */
static void expected_outputs(int func, int n, int r, int root, size_t count, size_t off, size_t cnt,
                             unsigned char* want, size_t* out_units) {
  const bool gathers = func == FUNC_ALLGATHER;
  *out_units = gathers ? (size_t)n * count : count;
  memset(want, 0, *out_units);
  if (func == FUNC_REDUCE && r != root) return;
  for (int b = 0; b < (gathers ? n : 1); b++)
    for (size_t i = off; i < off + cnt; i++) want[(size_t)b * count + i] = 1;
}

typedef void (*marker_fn)(const step_lane_t* ln, unsigned char* hits, size_t out_units);

/* Every output unit of rank r's lane written exactly as often as expected_outputs says. */
static void check_outputs(const step_lane_t* me, marker_fn mark, int func, int n, int r, int root,
                          size_t count, size_t off, size_t cnt, const char* what) {
  static unsigned char want[MAXN * 1000], hits[MAXN * 1000];
  size_t out_units;
  expected_outputs(func, n, r, root, count, off, cnt, want, &out_units);
  memset(hits, 0, out_units);
  mark(me, hits, out_units);
  for (size_t i = 0; i < out_units; i++)
    ck_assert_msg(hits[i] == want[i], "%s rank %d: unit %zu written %d times, expected %d", what, r,
                  i, hits[i], want[i]);
}

START_TEST(test_ring_lockstep_and_coverage) {
  static const int funcs[] = {FUNC_BROADCAST, FUNC_REDUCE, FUNC_ALLGATHER, FUNC_REDUCESCATTER,
                              FUNC_ALLREDUCE};
  static const size_t shapes[][4] = {/* count, off, cnt, chunk */
                                     {1, 0, 1, 1},        {7, 2, 5, 2},          {100, 0, 100, 16},
                                     {1000, 40, 900, 64}, {1000, 0, 1000, 1000}, {333, 33, 300, 7}};
  for (int n = 1; n <= MAXN; n++) g_ring[n - 1] = n - 1;
  for (size_t fi = 0; fi < sizeof(funcs) / sizeof(funcs[0]); fi++)
    for (int proto = PROTO_LL; proto <= PROTO_SIMPLE; proto += PROTO_SIMPLE - PROTO_LL)
      for (int n = 2; n <= MAXN_RING; n++)
        for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
          for (int root = 0; root < n; root++) {
            const int func = funcs[fi];
            if (root > 0 && func != FUNC_BROADCAST && func != FUNC_REDUCE) break;
            const size_t count = shapes[si][0], off = shapes[si][1], cnt = shapes[si][2],
                         chunk = shapes[si][3];
            char what[128];
            for (int r = 0; r < n; r++) {
              step_lane_t me = ring_lane(func, proto, n, r, root, count, off, cnt, chunk);
              snprintf(what, sizeof(what), "func %d proto %d n %d root %d shape %zu", func, proto,
                       n, root, si);
              check_outputs(&me, mark_outputs, func, n, r, root, count, off, cnt, what);
              step_lane_t next =
                  ring_lane(func, proto, n, (r + 1) % n, root, count, off, cnt, chunk);
              seq_t sent, got;
              collect(&me, STEP_ROLE_RING_NEXT, true, &sent);
              collect(&next, STEP_ROLE_RING_PREV, false, &got);
              snprintf(what, sizeof(what), "func %d proto %d n %d root %d shape %zu: %d -> %d",
                       func, proto, n, root, si, r, (r + 1) % n);
              assert_same(&sent, &got, what);
            }
          }
}
END_TEST

/* A heap-ordered binary tree: parent (r - 1) / 2, children 2r + 1 and 2r + 2. */
static step_lane_t tree_lane(int kind, int n, int r, size_t cnt, size_t chunk) {
  step_lane_t ln = ring_lane(FUNC_ALLREDUCE, PROTO_SIMPLE, n, r, 0, cnt, 0, cnt, chunk);
  ln.kind = (uint8_t)kind;
  ln.has_up = r > 0;
  for (int c = 2 * r + 1; c <= 2 * r + 2 && c < n; c++) ln.ndown++;
  return ln;
}

START_TEST(test_tree_lockstep_and_coverage) {
  static const size_t shapes[][2] = {{1, 1}, {10, 3}, {1000, 64}, {999, 1000}};
  for (int n = 2; n <= MAXN_RING; n++)
    for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
      const size_t cnt = shapes[si][0], chunk = shapes[si][1];
      for (int r = 0; r < n; r++) {
        /* every rank outputs each unit once: the root going up, the others coming down */
        static unsigned char hits[1000];
        memset(hits, 0, cnt);
        step_lane_t up = tree_lane(LANE_TREE_UP, n, r, cnt, chunk);
        step_lane_t down = tree_lane(LANE_TREE_DOWN, n, r, cnt, chunk);
        mark_outputs(&up, hits, cnt);
        mark_outputs(&down, hits, cnt);
        for (size_t i = 0; i < cnt; i++)
          ck_assert_msg(hits[i] == 1, "n %d shape %zu rank %d: unit %zu written %d times", n, si, r,
                        i, hits[i]);
        for (int j = 0; j < up.ndown; j++) { /* child j of r is 2r + 1 + j */
          const int c = 2 * r + 1 + j;
          step_lane_t cup = tree_lane(LANE_TREE_UP, n, c, cnt, chunk);
          step_lane_t cdown = tree_lane(LANE_TREE_DOWN, n, c, cnt, chunk);
          seq_t a, b;
          collect(&cup, STEP_ROLE_TREE_UP, true, &a);
          collect(&up, j, false, &b);
          assert_same(&a, &b, "tree up");
          collect(&down, j, true, &a);
          collect(&cdown, STEP_ROLE_TREE_UP, false, &b);
          assert_same(&a, &b, "tree down");
        }
      }
    }
}
END_TEST

/* What a direct lane writes to the output, per-peer spans included. */
static void mark_direct(const step_lane_t* ln, unsigned char* hits, size_t out_units) {
  const size_t nops = steps_count(ln);
  for (size_t k = 0; k < nops; k++) {
    step_t st;
    steps_plan(ln, k, &st);
    if (st.out == NULL) continue;
    const size_t at = (size_t)(st.out - ln->recvbuff) / ln->unit;
    if (steps_per_peer(&st)) {
      for (int j = 0; j < st.nrecv; j++) {
        size_t off, n;
        steps_peer_span(&st, steps_other_rank(ln->rank, st.recv[j]), &off, &n);
        ck_assert_uint_le(at + off + n, out_units);
        for (size_t i = 0; i < n; i++) hits[at + off + i]++;
      }
      continue;
    }
    ck_assert_msg(at + st.nelem <= out_units, "step %zu writes [%zu, %zu) of %zu", k, at,
                  at + st.nelem, out_units);
    for (size_t i = 0; i < st.nelem; i++) hits[at + i]++;
  }
}

static step_lane_t direct_lane(int func, int algo, int n, int r, int root, size_t count, size_t off,
                               size_t cnt, size_t chunk) {
  step_lane_t ln = ring_lane(func, PROTO_LL, n, r, root, count, off, cnt, chunk);
  ln.kind = LANE_DIRECT;
  ln.algo = (uint8_t)algo;
  ln.root_idx = root; /* a direct Broadcast's root: its rank */
  return ln;
}

START_TEST(test_direct_lanes) {
  static const int kinds[][2] = {{FUNC_ALLREDUCE, ALGO_ONESHOT},
                                 {FUNC_ALLREDUCE, ALGO_TWOSHOT},
                                 {FUNC_ALLGATHER, ALGO_ONESHOT},
                                 {FUNC_REDUCESCATTER, ALGO_ONESHOT},
                                 {FUNC_BROADCAST, ALGO_ONESHOT}};
  static const size_t shapes[][4] = {/* count, off, cnt, chunk */
                                     {1, 0, 1, 1},      {7, 2, 5, 2},          {100, 0, 100, 16},
                                     {333, 33, 300, 7}, {1000, 0, 1000, 1000}, {64, 0, 64, 40}};
  for (size_t ki = 0; ki < sizeof(kinds) / sizeof(kinds[0]); ki++)
    for (int n = 2; n <= MAXN; n++)
      for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++)
        for (int root = 0; root < n; root++) {
          const int func = kinds[ki][0], algo = kinds[ki][1];
          if (root > 0 && func != FUNC_BROADCAST) break;
          const size_t count = shapes[si][0], off = shapes[si][1], cnt = shapes[si][2],
                       chunk = shapes[si][3];
          char what[160];
          for (int r = 0; r < n; r++) {
            step_lane_t me = direct_lane(func, algo, n, r, root, count, off, cnt, chunk);
            snprintf(what, sizeof(what), "func %d algo %d n %d root %d shape %zu", func, algo, n,
                     root, si);
            check_outputs(&me, mark_direct, func, n, r, root, count, off, cnt, what);
            for (int p = 0; p < n; p++) { /* what r sends p, p receives from r, step for step */
              if (p == r) continue;
              step_lane_t other = direct_lane(func, algo, n, p, root, count, off, cnt, chunk);
              seq_t sent, got;
              collect(&me, steps_peer_index(r, p), true, &sent);
              collect(&other, steps_peer_index(p, r), false, &got);
              snprintf(what, sizeof(what), "func %d algo %d n %d root %d shape %zu: %d -> %d", func,
                       algo, n, root, si, r, p);
              assert_same(&sent, &got, what);
            }
            /* a reducing step combines in rank order, every contribution pre-op'd */
            for (size_t k = 0; k < steps_count(&me); k++) {
              step_t st;
              steps_plan(&me, k, &st);
              if (st.reduce) ck_assert_int_eq(st.local_pos, r);
              ck_assert(st.nrecv <= n - 1 && st.nsend <= n - 1);
            }
          }
        }
}
END_TEST

/* TwoShot cuts each chunk of c units into n parts of the least whole number of 16-byte vectors
 * that covers c / n: the parts stay balanced. */
START_TEST(test_twoshot_parts) {
  static const size_t units[] = {1, 2, 4, 8};
  static const size_t chunks[] = {1, 3, 16, 100, 257, 1000, 4099};
  for (size_t ui = 0; ui < sizeof(units) / sizeof(units[0]); ui++)
    for (int n = 2; n <= MAXN; n++)
      for (size_t ci = 0; ci < sizeof(chunks) / sizeof(chunks[0]); ci++) {
        const size_t u = units[ui], c = chunks[ci];
        step_lane_t ln = direct_lane(FUNC_ALLREDUCE, ALGO_TWOSHOT, n, 0, 0, c, 0, c, c);
        ln.unit = u;
        step_t st;
        steps_plan(&ln, 0, &st);
        const size_t share = (c + (size_t)n - 1) / (size_t)n * u; /* bytes of c / n, rounded up */
        size_t want = (share + 15) / 16 * 16 / u;
        if (want > c) want = c;
        ck_assert_msg(st.part == want, "unit %zu n %d chunk %zu: part %zu, want %zu", u, n, c,
                      st.part, want);
      }
}
END_TEST

START_TEST(test_p2p) {
  static const size_t shapes[][2] = {{1, 1}, {100, 7}, {4096, 4096}};
  for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
    const size_t cnt = shapes[si][0], chunk = shapes[si][1];
    /* point-to-point: a send lane and the matching receive lane cut the same steps */
    step_lane_t s = ring_lane(FUNC_SEND, PROTO_SIMPLE, 2, 0, 0, cnt, 0, cnt, chunk);
    step_lane_t r = ring_lane(FUNC_RECV, PROTO_SIMPLE, 2, 1, 0, cnt, 0, cnt, chunk);
    s.kind = LANE_SEND;
    r.kind = LANE_RECV;
    seq_t a, b;
    collect(&s, STEP_ROLE_P2P_PEER, true, &a);
    collect(&r, STEP_ROLE_P2P_PEER, false, &b);
    assert_same(&a, &b, "p2p");
    ck_assert_int_eq(a.n, (int)((cnt + chunk - 1) / chunk));
  }
}
END_TEST

static Suite* steps_suite(void) {
  Suite* s = suite_create("steps");
  TCase* tc = tcase_create("steps");
  tcase_add_test(tc, test_ring_lockstep_and_coverage);
  tcase_add_test(tc, test_tree_lockstep_and_coverage);
  tcase_add_test(tc, test_direct_lanes);
  tcase_add_test(tc, test_twoshot_parts);
  tcase_add_test(tc, test_p2p);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(steps_suite());
}
