/* The step math (src/vocab/vocab.h) carried out over real buffers: every rank's ring lane (or
 * a tree AllReduce's up and down lanes) runs its steps on the host, messages travel over
 * unbounded per-connection queues, and each rank's output is compared with the collective's
 * result computed here directly from the inputs (sums of int32 values, so every order of
 * combining gives the same bits). test_steps checks that the
 * steps agree in size and cover the output; this suite checks that they move the right data
 * (which buffer a step reads, which block it writes, what it reduces).
 *
 * A step, as both executors carry it out: receive one message from each peer it names; the
 * result is local combined with the received ones when it reduces, else the received message, or
 * local when it receives none; the result goes to `out` when set and to every peer it sends to. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "device/device.h" /* TREE_MAX_CHILDREN */
#include "topo/topo.h"
#include "unit.h"
#include "vocab/vocab.h"

#define MAXN 6
#define SENTINEL ((int32_t)0x5a5a5a5a)

/* A one-way queue of messages from ring position p to p + 1. */
typedef struct {
  int32_t* data; /* message k occupies data[k * cap_elems ...] */
  size_t* nelem;
  bool* direct; /* message k was stored into the receiver's output (its data: SENTINEL) */
  size_t cap_msgs, cap_elems, head, tail;
} queue_t;

static void queue_init(queue_t* q, size_t msgs, size_t elems) {
  q->data = calloc(msgs * elems + 1, sizeof(int32_t));
  q->nelem = calloc(msgs + 1, sizeof(size_t));
  q->direct = calloc(msgs + 1, sizeof(bool));
  ck_assert(q->data != NULL && q->nelem != NULL && q->direct != NULL);
  q->cap_msgs = msgs;
  q->cap_elems = elems;
  q->head = q->tail = 0;
}

static void queue_free(queue_t* q) {
  free(q->data);
  free(q->nelem);
  free(q->direct);
}

typedef struct {
  int n, func, proto, root_idx;
  bool direct; /* work_t.direct, every connection CONN_FLAG_DIRECT */
  size_t count, chunk;
  int ring[MAXN];        /* ring position -> rank */
  int32_t* send[MAXN];   /* per rank */
  int32_t* recv[MAXN];   /* per rank */
  size_t send_n, recv_n; /* elements of each buffer */
} ring_case_t;

static step_lane_t lane_of(const ring_case_t* rc, int pos, size_t off, size_t cnt) {
  const int rank = rc->ring[pos];
  step_lane_t ln;
  memset(&ln, 0, sizeof(ln));
  ln.kind = LANE_RING;
  ln.algo = ALGO_RING;
  ln.func = (uint8_t)rc->func;
  ln.proto = (uint8_t)rc->proto;
  ln.unit = sizeof(int32_t);
  ln.sendbuff = (const char*)rc->send[rank];
  ln.recvbuff = (char*)rc->recv[rank];
  ln.count = rc->count;
  ln.off = off;
  ln.cnt = cnt;
  ln.chunk = rc->chunk;
  ln.n = rc->n;
  ln.idx = pos;
  ln.root_idx = rc->root_idx;
  ln.rank = rank;
  ln.ring = rc->ring;
  ln.direct = rc->direct;
  return ln;
}

/* Direct writes of a ring step (vocab.h, "Direct writes"; NULL ln: none): a receive that
 * steps_recv_direct names takes its data from the step's output, where its sender stored it; a
 * send that steps_send_direct names stores into next_out (the next rank's output) at the offset
 * the step's output has in this rank's, and its message carries no data. */
typedef struct {
  const step_lane_t* ln;
  char* next_out;
} direct_t;
static size_t direct_sends; /* sends stored into the next rank's output, since the last reset */

/* Carries out step st if every queue it receives from holds a message (in[j]: the queue of its
 * j-th receive, out[j]: of its j-th send); false when one is still empty. res: chunk elements. */
static bool step_try(const step_t* st, queue_t* const* in, queue_t* const* out, int32_t* res,
                     const char* who, size_t k, direct_t d) {
  const bool drecv = d.ln != NULL && steps_recv_direct(d.ln, st);
  const bool dsend = d.ln != NULL && steps_send_direct(d.ln, st);
  for (int j = 0; j < st->nrecv; j++) {
    if (in[j]->head == in[j]->tail) return false; /* nothing arrived yet */
    ck_assert_msg(in[j]->nelem[in[j]->head] == st->nelem,
                  "%s step %zu: receives %zu elements, the sender sent %zu", who, k, st->nelem,
                  in[j]->nelem[in[j]->head]);
    ck_assert_msg(in[j]->direct[in[j]->head] == drecv,
                  "%s step %zu: a %s receive of a %s send (the ends disagree)", who, k,
                  drecv ? "direct" : "FIFO", in[j]->direct[in[j]->head] ? "direct" : "FIFO");
  }
  const int32_t* local = (const int32_t*)st->local;
  for (size_t i = 0; i < st->nelem; i++) {
    int32_t v;
    if (st->reduce) {
      ck_assert_ptr_nonnull(local);
      v = local[i];
      for (int j = 0; j < st->nrecv; j++) v += in[j]->data[in[j]->head * in[j]->cap_elems + i];
    } else if (drecv) {
      ck_assert(st->nrecv == 1 && st->out != NULL);
      v = ((const int32_t*)st->out)[i];
    } else {
      ck_assert(st->nrecv == 1 || (st->nrecv == 0 && local != NULL));
      v = st->nrecv == 1 ? in[0]->data[in[0]->head * in[0]->cap_elems + i] : local[i];
    }
    res[i] = v;
  }
  for (int j = 0; j < st->nrecv; j++) in[j]->head++;
  if (st->out != NULL) memcpy(st->out, res, st->nelem * sizeof(int32_t));
  for (int j = 0; j < st->nsend; j++) {
    queue_t* o = out[j];
    ck_assert_uint_lt(o->tail, o->cap_msgs);
    int32_t* slot = o->data + o->tail * o->cap_elems;
    if (dsend) {
      memcpy(d.next_out + (st->out - d.ln->recvbuff), res, st->nelem * sizeof(int32_t));
      for (size_t i = 0; i < st->nelem; i++) slot[i] = SENTINEL;
    } else {
      memcpy(slot, res, st->nelem * sizeof(int32_t));
    }
    o->direct[o->tail] = dsend;
    direct_sends += dsend;
    o->nelem[o->tail++] = st->nelem;
  }
  return true;
}

static void queues_drained(queue_t* q, int nq, const char* what) {
  for (int i = 0; i < nq; i++) {
    ck_assert_msg(q[i].head == q[i].tail, "%s: queue %d left %zu messages unread", what, i,
                  q[i].tail - q[i].head);
    queue_free(&q[i]);
  }
}

/* Runs the lanes of every rank over the slice [off, off + cnt) until all are done. */
static void run_slice(const ring_case_t* rc, size_t off, size_t cnt) {
  const int n = rc->n;
  step_lane_t ln[MAXN];
  size_t nops[MAXN], pos[MAXN];
  queue_t q[MAXN]; /* q[p]: from ring position p to p + 1 */
  size_t most = 0;
  for (int p = 0; p < n; p++) {
    ln[p] = lane_of(rc, p, off, cnt);
    nops[p] = steps_count(&ln[p]);
    pos[p] = 0;
    if (nops[p] > most) most = nops[p];
  }
  for (int p = 0; p < n; p++) queue_init(&q[p], most, rc->chunk);
  /* A lane posts its output in the mailbox exactly when some step of it receives directly (a
   * sender waits for the post before its first direct send). */
  for (int p = 0; p < n; p++) {
    bool any = false;
    for (size_t k = 0; k < nops[p] && !any; k++) {
      step_t st;
      memset(&st, 0, sizeof(st));
      steps_plan(&ln[p], k, &st);
      any = steps_recv_direct(&ln[p], &st);
    }
    ck_assert_msg(steps_lane_recvs_direct(&ln[p]) == any,
                  "func %d n %d position %d: the lane %s its output but %s", rc->func, n, p,
                  any ? "does not post" : "posts", any ? "receives directly" : "never uses it");
  }
  int32_t* res = calloc(rc->chunk + 1, sizeof(int32_t));
  ck_assert_ptr_nonnull(res);
  for (;;) {
    bool moved = false, left = false;
    for (int p = 0; p < n; p++) {
      while (pos[p] < nops[p]) {
        step_t st;
        memset(&st, 0, sizeof(st));
        steps_plan(&ln[p], pos[p], &st);
        ck_assert_uint_le(st.nelem, rc->chunk);
        ck_assert_int_le(st.nrecv, 1);
        ck_assert_int_le(st.nsend, 1);
        if (st.nrecv == 1) ck_assert_int_eq(st.recv[0], STEP_ROLE_RING_PREV);
        if (st.nsend == 1) ck_assert_int_eq(st.send[0], STEP_ROLE_RING_NEXT);
        queue_t* in[1] = {&q[(p + n - 1) % n]};
        queue_t* out[1] = {&q[p]};
        const direct_t d = {&ln[p], (char*)rc->recv[rc->ring[(p + 1) % n]]};
        if (!step_try(&st, in, out, res, "ring", pos[p], d)) break;
        pos[p]++;
        moved = true;
      }
      left |= pos[p] < nops[p];
    }
    if (!left) break;
    ck_assert_msg(moved, "func %d n %d: the ring is stuck (steps out of lockstep)", rc->func, n);
  }
  queues_drained(q, n, "ring");
  free(res);
}

/* Tree AllReduce over the tree parent[] / kids[] (kids: TREE_MAX_CHILDREN a rank, -1 where unused;
 * NULL: a binary tree, rank r's parent (r - 1) / 2 and its children 2r + 1 and 2r + 2) of n ranks,
 * every rank's up and down lanes over [off, off + cnt); the root's down lane goes no further than
 * its up lane. */
#define MAXT 64
static int tree_kid(const int* kids, int n, int r, int j) {
  if (kids != NULL) return kids[r * TREE_MAX_CHILDREN + j];
  return 2 * r + 1 + j < n && j < 2 ? 2 * r + 1 + j : -1;
}

static void run_tree_of(int n, const int* parent, const int* kids, int32_t* const* send,
                        int32_t* const* recv, size_t count, size_t off, size_t cnt, size_t chunk) {
  ck_assert_int_le(n, MAXT);
  step_lane_t ln[2 * MAXT]; /* 2r: rank r's up lane, 2r + 1: its down lane */
  size_t nops[2 * MAXT], pos[2 * MAXT], most = 0;
  queue_t up[MAXT], down[MAXT]; /* up[r]: r to its parent; down[r]: the parent to r */
  for (int i = 0; i < 2 * n; i++) {
    const int r = i / 2;
    memset(&ln[i], 0, sizeof(ln[i]));
    ln[i].kind = i % 2 == 0 ? LANE_TREE_UP : LANE_TREE_DOWN;
    ln[i].func = FUNC_ALLREDUCE;
    ln[i].proto = PROTO_SIMPLE;
    ln[i].unit = sizeof(int32_t);
    ln[i].sendbuff = (const char*)send[r];
    ln[i].recvbuff = (char*)recv[r];
    ln[i].count = count;
    ln[i].off = off;
    ln[i].cnt = cnt;
    ln[i].chunk = chunk;
    ln[i].n = n;
    ln[i].rank = r;
    ln[i].has_up = parent != NULL ? parent[r] >= 0 : r > 0;
    ln[i].ndown = 0;
    while (ln[i].ndown < TREE_MAX_CHILDREN && tree_kid(kids, n, r, ln[i].ndown) >= 0) ln[i].ndown++;
    nops[i] = steps_count(&ln[i]);
    pos[i] = 0;
    if (nops[i] > most) most = nops[i];
  }
  for (int r = 0; r < n; r++) {
    queue_init(&up[r], most, chunk);
    queue_init(&down[r], most, chunk);
  }
  int32_t* res = calloc(chunk + 1, sizeof(int32_t));
  ck_assert_ptr_nonnull(res);
  for (;;) {
    bool moved = false, left = false;
    for (int i = 0; i < 2 * n; i++) {
      const int r = i / 2;
      const bool root_down = i % 2 == 1 && !ln[i].has_up;
      while (pos[i] < nops[i] && !(root_down && pos[i - 1] <= pos[i])) {
        step_t st;
        memset(&st, 0, sizeof(st));
        steps_plan(&ln[i], pos[i], &st);
        ck_assert_uint_le(st.nelem, chunk);
        queue_t* in[TREE_MAX_CHILDREN];
        queue_t* out[TREE_MAX_CHILDREN];
        for (int j = 0; j < st.nrecv; j++) {
          const int role = st.recv[j];
          ck_assert(role == STEP_ROLE_TREE_UP || (role >= 0 && role < ln[i].ndown));
          in[j] = role == STEP_ROLE_TREE_UP ? &down[r] : &up[tree_kid(kids, n, r, role)];
        }
        for (int j = 0; j < st.nsend; j++) {
          const int role = st.send[j];
          ck_assert(role == STEP_ROLE_TREE_UP || (role >= 0 && role < ln[i].ndown));
          out[j] = role == STEP_ROLE_TREE_UP ? &up[r] : &down[tree_kid(kids, n, r, role)];
        }
        const direct_t none = {NULL, NULL};
        if (!step_try(&st, in, out, res, i % 2 == 0 ? "tree up" : "tree down", pos[i], none)) break;
        pos[i]++;
        moved = true;
      }
      left |= pos[i] < nops[i];
    }
    if (!left) break;
    ck_assert_msg(moved, "tree of %d ranks: stuck (steps out of lockstep)", n);
  }
  queues_drained(up, n, "tree up");
  queues_drained(down, n, "tree down");
  free(res);
}

static void run_tree(int n, int32_t* const* send, int32_t* const* recv, size_t count, size_t off,
                     size_t cnt, size_t chunk) {
  run_tree_of(n, NULL, NULL, send, recv, count, off, cnt, chunk);
}

static int32_t input_value(int rank, size_t i) {
  return (int32_t)((rank + 1) * 1000 + (int32_t)(i % 997) - 300);
}

/* The collective's result at element i of rank r's output, from the inputs alone. */
static int32_t expected(const ring_case_t* rc, int r, size_t i) {
  const int n = rc->n, root = rc->ring[rc->root_idx];
  int32_t sum = 0;
  switch (rc->func) {
    case FUNC_ALLREDUCE:
      for (int q = 0; q < n; q++) sum += input_value(q, i);
      return sum;
    case FUNC_REDUCESCATTER: /* rank r's block of every input */
      for (int q = 0; q < n; q++) sum += input_value(q, (size_t)r * rc->count + i);
      return sum;
    case FUNC_ALLGATHER: /* block q is rank q's input */
      return input_value((int)(i / rc->count), i % rc->count);
    case FUNC_BROADCAST:
      return input_value(root, i);
    default: /* Reduce: the root only */
      if (r != root) return SENTINEL;
      for (int q = 0; q < n; q++) sum += input_value(q, i);
      return sum;
  }
}

/* Runs one collective over nslices channel slices and checks every rank's output; direct: with
 * direct writes (work_t.direct over CONN_FLAG_DIRECT connections). */
static void run_case_of(int func, int proto, int n, int root_idx, size_t count, size_t chunk,
                        int nslices, bool in_place, bool direct) {
  ring_case_t rc;
  memset(&rc, 0, sizeof(rc));
  rc.direct = direct;
  rc.n = n;
  rc.func = func;
  rc.proto = proto;
  rc.root_idx = root_idx;
  rc.count = count;
  rc.chunk = chunk;
  for (int p = 0; p < n; p++) rc.ring[p] = (n - p) % n; /* 0, n-1, ..., 1: not rank order */
  const bool scatters = func == FUNC_REDUCESCATTER, gathers = func == FUNC_ALLGATHER;
  rc.send_n = scatters ? count * (size_t)n : count;
  rc.recv_n = gathers ? count * (size_t)n : count;
  for (int r = 0; r < n; r++) {
    rc.send[r] = malloc((rc.send_n + 1) * sizeof(int32_t));
    rc.recv[r] = in_place ? rc.send[r] : malloc((rc.recv_n + 1) * sizeof(int32_t));
    ck_assert(rc.send[r] != NULL && rc.recv[r] != NULL);
    if (!in_place)
      for (size_t i = 0; i < rc.recv_n; i++) rc.recv[r][i] = SENTINEL;
    for (size_t i = 0; i < rc.send_n; i++) rc.send[r][i] = input_value(r, i);
  }
  /* channel slices: equal shares, the last takes the rest */
  const size_t share = (count + (size_t)nslices - 1) / (size_t)nslices;
  for (size_t off = 0; off < count; off += share)
    run_slice(&rc, off, count - off < share ? count - off : share);
  for (int r = 0; r < n; r++) {
    for (size_t i = 0; i < rc.recv_n; i++) {
      const int32_t want = expected(&rc, r, i);
      ck_assert_msg(rc.recv[r][i] == want,
                    "func %d proto %d n %d root position %d count %zu chunk %zu slices %d%s%s: "
                    "rank %d element %zu is %d, expected %d",
                    func, proto, n, root_idx, count, chunk, nslices, in_place ? " in place" : "",
                    direct ? " direct" : "", r, i, rc.recv[r][i], want);
    }
  }
  for (int r = 0; r < n; r++) {
    if (rc.recv[r] != rc.send[r]) free(rc.recv[r]);
    free(rc.send[r]);
  }
}

static void run_case(int func, int proto, int n, int root_idx, size_t count, size_t chunk,
                     int nslices, bool in_place) {
  run_case_of(func, proto, n, root_idx, count, chunk, nslices, in_place, false);
}

static const size_t counts[] = {1, 7, 100, 1001};
static const size_t chunks[] = {5, 16, 64};
static const int protos[] = {PROTO_SIMPLE, PROTO_LL};

START_TEST(test_ring_allreduce_data) {
  for (int n = 2; n <= MAXN; n++)
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
      for (size_t ki = 0; ki < sizeof(chunks) / sizeof(chunks[0]); ki++)
        for (int pi = 0; pi < 2; pi++)
          for (int slices = 1; slices <= 3; slices += 2) {
            run_case(FUNC_ALLREDUCE, protos[pi], n, 0, counts[ci], chunks[ki], slices, false);
            run_case(FUNC_ALLREDUCE, protos[pi], n, 0, counts[ci], chunks[ki], slices, true);
          }
}
END_TEST

START_TEST(test_ring_gather_scatter_data) {
  for (int n = 2; n <= MAXN; n++)
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
      for (size_t ki = 0; ki < sizeof(chunks) / sizeof(chunks[0]); ki++)
        for (int slices = 1; slices <= 3; slices += 2) {
          run_case(FUNC_ALLGATHER, PROTO_SIMPLE, n, 0, counts[ci], chunks[ki], slices, false);
          run_case(FUNC_REDUCESCATTER, PROTO_SIMPLE, n, 0, counts[ci], chunks[ki], slices, false);
        }
}
END_TEST

START_TEST(test_ring_chain_data) {
  for (int n = 2; n <= MAXN; n++)
    for (int root = 0; root < n; root++)
      for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        run_case(FUNC_BROADCAST, PROTO_SIMPLE, n, root, counts[ci], 16, 2, false);
        run_case(FUNC_REDUCE, PROTO_SIMPLE, n, root, counts[ci], 16, 2, false);
      }
}
END_TEST

/* Direct writes: AllReduce (in place too) and AllGather store what a step only delivers into the
 * next rank's output, and the slots carry none of it (SENTINEL); every output is still the
 * collective's result, and every receive pairs with a send of its kind (step_try). Broadcast,
 * Reduce and ReduceScatter have no such steps, and Simple only. */
START_TEST(test_ring_direct_data) {
  for (int n = 2; n <= MAXN; n++)
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
      for (size_t ki = 0; ki < sizeof(chunks) / sizeof(chunks[0]); ki++)
        for (int slices = 1; slices <= 3; slices += 2) {
          const size_t count = counts[ci], chunk = chunks[ki];
          direct_sends = 0;
          run_case_of(FUNC_ALLREDUCE, PROTO_SIMPLE, n, 0, count, chunk, slices, false, true);
          run_case_of(FUNC_ALLREDUCE, PROTO_SIMPLE, n, 0, count, chunk, slices, true, true);
          run_case_of(FUNC_ALLGATHER, PROTO_SIMPLE, n, 0, count, chunk, slices, false, true);
          ck_assert_uint_gt(direct_sends, 0);
          direct_sends = 0;
          for (int root = 0; root < n; root++)
            run_case_of(FUNC_BROADCAST, PROTO_SIMPLE, n, root, count, chunk, slices, false, true);
          run_case_of(FUNC_REDUCESCATTER, PROTO_SIMPLE, n, 0, count, chunk, slices, false, true);
          run_case_of(FUNC_REDUCE, PROTO_SIMPLE, n, n - 1, count, chunk, slices, false, true);
          run_case_of(FUNC_ALLREDUCE, PROTO_LL, n, 0, count, chunk, slices, false, true);
          ck_assert_uint_eq(direct_sends, 0);
        }
}
END_TEST

/* Every rank's input (input_value) and an output of SENTINEL, count elements each (and one more
 * past the end, untouched). */
static void tree_bufs(int n, size_t count, int32_t** send, int32_t** recv) {
  for (int r = 0; r < n; r++) {
    send[r] = malloc((count + 1) * sizeof(int32_t));
    recv[r] = malloc((count + 1) * sizeof(int32_t));
    ck_assert(send[r] != NULL && recv[r] != NULL);
    for (size_t i = 0; i < count; i++) {
      send[r][i] = input_value(r, i);
      recv[r][i] = SENTINEL;
    }
  }
}

/* Tree AllReduce: every rank's output is the sum of every input. */
START_TEST(test_tree_allreduce_data) {
  for (int n = 2; n <= MAXN; n++)
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++)
      for (size_t ki = 0; ki < sizeof(chunks) / sizeof(chunks[0]); ki++) {
        const size_t count = counts[ci], chunk = chunks[ki];
        int32_t* send[MAXN];
        int32_t* recv[MAXN];
        tree_bufs(n, count, send, recv);
        const size_t half = (count + 1) / 2; /* two channel slices */
        run_tree(n, send, recv, count, 0, half, chunk);
        if (count > half) run_tree(n, send, recv, count, half, count - half, chunk);
        for (int r = 0; r < n; r++)
          for (size_t i = 0; i < count; i++) {
            int32_t want = 0;
            for (int q = 0; q < n; q++) want += input_value(q, i);
            ck_assert_msg(recv[r][i] == want,
                          "tree n %d count %zu chunk %zu: rank %d element %zu is %d, expected %d",
                          n, count, chunk, r, i, recv[r][i], want);
          }
        for (int r = 0; r < n; r++) {
          free(send[r]);
          free(recv[r]);
        }
      }
}
END_TEST

/* Tree AllReduce over the trees between hosts that GPU communicators lay out over every NIC
 * (topo_tree_rails): 2, 3, 5 and 8 hosts of 8 ranks with a NIC beside each (GPU g beside NIC g),
 * 3 hosts of 3 ranks sharing 2 NICs, and 4 hosts of one rank, every channel of four periods (both
 * trees, every rail, the roots that move from channel to channel): every rank's output is the sum
 * of every input. */
START_TEST(test_tree_rails_allreduce_data) {
  const struct {
    int nhosts, k, nnics;
  } shapes[] = {{2, 8, 8}, {3, 8, 8}, {5, 8, 8}, {3, 3, 2}, {4, 1, 1}, {8, 8, 8}};
  for (size_t si = 0; si < sizeof(shapes) / sizeof(shapes[0]); si++) {
    const int n = shapes[si].nhosts * shapes[si].k, nnics = shapes[si].nnics;
    int hosts[MAXT], scratch[2 * MAXT], parent[MAXT], kids[MAXT * TOPO_TREE_MAX_CHILDREN];
    topo_rank_nics_t nics[MAXT];
    for (int r = 0; r < n; r++) {
      hosts[r] = r / shapes[si].k;
      memset(&nics[r], 0, sizeof(nics[r]));
      memset(nics[r].path, TOPO_RAIL_NONE, sizeof(nics[r].path));
      nics[r].nnics = (uint8_t)nnics;
      for (int x = 0; x < nnics; x++) {
        nics[r].path[x] =
            (uint8_t)(x == (r % shapes[si].k) % nnics ? TOPO_PATH_PIX : TOPO_PATH_SYS);
        nics[r].weight[x] = 1;
      }
    }
    const int period = 2 * topo_ring_rails_period(n, hosts, nics, 64, scratch);
    const size_t count = 300, chunk = 32;
    int32_t* send[MAXT];
    int32_t* recv[MAXT];
    tree_bufs(n, count, send, recv);
    for (int c = 0; c < 4 * period; c++) {
      ck_assert(topo_tree_rails(n, hosts, nics, c, scratch, parent, kids));
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++) recv[r][i] = SENTINEL;
      run_tree_of(n, parent, kids, send, recv, count, 0, count, chunk);
      for (int r = 0; r < n; r++)
        for (size_t i = 0; i < count; i++) {
          int32_t want = 0;
          for (int q = 0; q < n; q++) want += input_value(q, i);
          ck_assert_msg(recv[r][i] == want,
                        "tree over %d hosts of %d, channel %d: rank %d element %zu is %d, "
                        "expected %d",
                        shapes[si].nhosts, shapes[si].k, c, r, i, recv[r][i], want);
        }
    }
    for (int r = 0; r < n; r++) {
      free(send[r]);
      free(recv[r]);
    }
  }
}
END_TEST

static Suite* steps_data_suite(void) {
  Suite* s = suite_create("steps_data");
  TCase* tc = tcase_create("steps_data");
  tcase_add_test(tc, test_ring_allreduce_data);
  tcase_add_test(tc, test_ring_gather_scatter_data);
  tcase_add_test(tc, test_ring_chain_data);
  tcase_add_test(tc, test_ring_direct_data);
  tcase_add_test(tc, test_tree_allreduce_data);
  tcase_add_test(tc, test_tree_rails_allreduce_data);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(steps_data_suite());
}
