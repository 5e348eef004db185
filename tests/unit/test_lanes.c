/* A work item becomes the same lane in every executor (src/vocab/vocab.h, steps_lane): the host
 * executor and the simulator make the lane's item from the planner's work_t
 * (steps_item_of_work), the CUDA kernel from the parameter block's copy that launch.c packs
 * (cuda_exec.h: cuda_work_geo, then cuda_work_item). For items of every lane kind, both ways must
 * give the same lane, field by field and step by step, and the lane must be what the item says:
 * the slice and step as the planner cut them, units of the datatype for collectives and of bytes
 * for point-to-point, and the root as the lane names it (a ring's root position, a direct
 * Broadcast's root rank), written out here from the work item itself. */
#include <check.h>
#include <string.h>

#include "device/cuda/cuda_exec.h"
#include "unit.h"
#include "vocab/vocab.h"

#define NRANKS 4
#define RANK 1

static char sbuf[4096], rbuf[4096 * NRANKS];

static work_t item(int func, int algo, int proto, int dtype, int root, int root_idx) {
  return (work_t){.func = (uint8_t)func,
                  .algo = (uint8_t)algo,
                  .proto = (uint8_t)proto,
                  .dtype = (uint8_t)dtype,
                  .sendbuff = sbuf,
                  .recvbuff = rbuf,
                  .count = 1000,
                  .chan_off = 136,
                  .chan_count = 500,
                  .chunk = 96,
                  .root = root,
                  .root_idx = root_idx,
                  .nranks = NRANKS};
}

/* The lane the kernel makes of w: packed as launch.c packs it, read back as the kernel reads. */
static step_lane_t kernel_lane(const work_t* w, size_t esize, int kind) {
  cuda_work_t o;
  memset(&o, 0xa5, sizeof(o)); /* what cuda_work_geo leaves unset must not matter */
  cuda_work_geo(w, esize, &o);
  const step_item_t it = cuda_work_item(&o);
  return steps_lane(kind, &it, NRANKS, RANK);
}

static void assert_same_lane(const step_lane_t* a, const step_lane_t* b) {
  ck_assert_int_eq(a->kind, b->kind);
  ck_assert_int_eq(a->func, b->func);
  ck_assert_int_eq(a->proto, b->proto);
  ck_assert_int_eq(a->algo, b->algo);
  ck_assert_uint_eq(a->unit, b->unit);
  ck_assert_ptr_eq(a->sendbuff, b->sendbuff);
  ck_assert_ptr_eq(a->recvbuff, b->recvbuff);
  ck_assert_uint_eq(a->count, b->count);
  ck_assert_uint_eq(a->off, b->off);
  ck_assert_uint_eq(a->cnt, b->cnt);
  ck_assert_uint_eq(a->chunk, b->chunk);
  ck_assert_int_eq(a->n, b->n);
  ck_assert_int_eq(a->rank, b->rank);
  ck_assert_int_eq(a->root_idx, b->root_idx);
  ck_assert_int_eq(a->direct, b->direct);
}

/* Every step of the two lanes, on a channel whose ring puts this rank at index 2. */
static void assert_same_steps(step_lane_t a, step_lane_t b) {
  static const int ring[NRANKS] = {3, 0, 1, 2};
  a.ring = b.ring = ring;
  a.idx = b.idx = 2;
  a.has_up = b.has_up = true;
  a.ndown = b.ndown = 2;
  const size_t n = steps_count(&a);
  ck_assert_uint_eq(n, steps_count(&b));
  ck_assert_uint_gt(n, 0);
  for (size_t k = 0; k < n; k++) {
    step_t x, y;
    steps_plan(&a, k, &x);
    steps_plan(&b, k, &y);
    ck_assert_ptr_eq(x.local, y.local);
    ck_assert_ptr_eq(x.out, y.out);
    ck_assert_uint_eq(x.nelem, y.nelem);
    ck_assert_int_eq(x.nrecv, y.nrecv);
    ck_assert_int_eq(x.nsend, y.nsend);
    ck_assert_int_eq(x.reduce, y.reduce);
    ck_assert_int_eq(x.postop, y.postop);
    ck_assert_uint_eq(x.part, y.part);
    ck_assert_uint_eq(x.peer_stride, y.peer_stride);
  }
}

/* One item, one lane kind: host and kernel agree, and the lane is what the item says. */
static void check(const work_t* w, size_t esize, int kind) {
  const step_item_t it = steps_item_of_work(w, esize);
  const step_lane_t host = steps_lane(kind, &it, NRANKS, RANK);
  const step_lane_t kern = kernel_lane(w, esize, kind);
  assert_same_lane(&host, &kern);
  assert_same_steps(host, kern);
  const bool p2p = w->func == FUNC_SEND || w->func == FUNC_RECV;
  const bool direct = w->algo == ALGO_ONESHOT || w->algo == ALGO_TWOSHOT;
  ck_assert_int_eq(host.kind, kind);
  ck_assert_uint_eq(host.unit, (p2p ? 1 : esize));
  ck_assert_int_eq(host.root_idx, (p2p || direct ? w->root : w->root_idx));
  ck_assert_uint_eq(host.off, w->chan_off);
  ck_assert_uint_eq(host.cnt, w->chan_count);
  ck_assert_uint_eq(host.chunk, w->chunk);
  ck_assert_uint_eq(host.count, w->count);
  ck_assert_int_eq(host.n, NRANKS);
  ck_assert_int_eq(host.rank, RANK);
  ck_assert_int_eq(host.direct, w->direct != 0);
}

START_TEST(test_every_kind) {
  /* rings: the root's ring position differs from its rank, so a lane that took the wrong one
   * shows */
  work_t w = item(FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, ncclFloat32, -1, 0);
  check(&w, 4, LANE_RING);
  w = item(FUNC_BROADCAST, ALGO_RING, PROTO_LL, ncclFloat16, 2, 3);
  check(&w, 2, LANE_RING);
  w = item(FUNC_REDUCE, ALGO_RING, PROTO_LL128, ncclInt64, 0, 1);
  check(&w, 8, LANE_RING);
  w = item(FUNC_ALLGATHER, ALGO_RING, PROTO_SIMPLE, ncclInt8, -1, 0);
  check(&w, 1, LANE_RING);
  w.direct = 1; /* direct writes reach the kernel's lane */
  check(&w, 1, LANE_RING);
  w = item(FUNC_BROADCAST, ALGO_RING, PROTO_SIMPLE, ncclFloat32, 2, 3);
  w.direct = 1;
  check(&w, 4, LANE_RING);
  /* trees: both halves */
  w = item(FUNC_ALLREDUCE, ALGO_TREE, PROTO_SIMPLE, ncclFloat64, -1, 0);
  check(&w, 8, LANE_TREE_UP);
  check(&w, 8, LANE_TREE_DOWN);
  /* direct: a Broadcast's root is its rank */
  w = item(FUNC_BROADCAST, ALGO_ONESHOT, PROTO_LL, ncclFloat32, 3, 0);
  check(&w, 4, LANE_DIRECT);
  w = item(FUNC_ALLREDUCE, ALGO_TWOSHOT, PROTO_LL, ncclBfloat16, -1, 0);
  check(&w, 2, LANE_DIRECT);
  /* point-to-point: bytes, whatever the datatype; the root is the peer */
  w = item(FUNC_SEND, ALGO_RING, PROTO_SIMPLE, ncclFloat32, 2, 0);
  check(&w, 4, LANE_SEND);
  w = item(FUNC_RECV, ALGO_RING, PROTO_LL, ncclInt32, 3, 0);
  check(&w, 4, LANE_RECV);
}
END_TEST

static Suite* lanes_suite(void) {
  Suite* s = suite_create("lanes");
  TCase* tc = tcase_create("lanes");
  tcase_add_test(tc, test_every_kind);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(lanes_suite());
}
