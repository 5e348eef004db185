/* The executor interface (executor_ops_t, device.h): every executor fills every slot, so the layers
 * above can call any op without asking which executor they have; the host executor's launch takes
 * the streams of a group's calls, runs the plan and reports it was not captured. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "device/device.h"
#include "device/sim/sim.h"
#include "host_world.h"
#include "unit.h"

static void check_table(const executor_ops_t* ops, const char* name) {
  ck_assert_ptr_nonnull(ops->name);
  ck_assert_str_eq(ops->name, name);
  ck_assert_msg(ops->enter != NULL, "%s: no enter", name);
  ck_assert_msg(ops->leave != NULL, "%s: no leave", name);
  ck_assert_msg(ops->init != NULL, "%s: no init", name);
  ck_assert_msg(ops->launch != NULL, "%s: no launch", name);
  ck_assert_msg(ops->fini != NULL, "%s: no fini", name);
  ck_assert_msg(ops->wait != NULL, "%s: no wait", name);
  ck_assert_msg(ops->progress != NULL, "%s: no progress", name);
  ck_assert_msg(ops->waits != NULL, "%s: no waits", name);
  ck_assert_msg(ops->positions != NULL, "%s: no positions", name);
  ck_assert_msg(ops->launch_time != NULL, "%s: no launch_time", name);
  ck_assert_msg(ops->estimate_us != NULL, "%s: no estimate_us", name);
}

START_TEST(test_tables_complete) {
  check_table(&executor_host_ops, "host");
  check_table(&executor_cuda_ops, "cuda");
  check_table(&executor_sim_ops, "sim");
  /* the host executor's launch runs the plan before it returns; the others queue it */
  ck_assert(!executor_host_ops.queues);
  ck_assert(executor_cuda_ops.queues);
  ck_assert(executor_sim_ops.queues);
}
END_TEST

/* Host memory has no device to make current and no capture mode: enter records the device asked
 * for and changes nothing, so leave has nothing to put back. */
START_TEST(test_host_scope) {
  exec_scope_t scope;
  memset(&scope, 0x5a, sizeof(scope));
  ck_assert_int_eq(executor_host_ops.enter(3, true, &scope), ncclSuccess);
  ck_assert_int_eq(scope.dev, 3);
  ck_assert_int_eq(scope.saved, -1);
  ck_assert(!scope.relaxed);
  executor_host_ops.leave(&scope);
}
END_TEST

/* A plan of copies without peers, launched with two streams and a caller that expects a capture:
 * the host executor runs it at once (the data arrives) and says it was not captured. */
START_TEST(test_host_launch_streams) {
  hw_world_t* w = hw_world_new(2, 1);
  enum { N = 1000 };
  float* src = malloc(N * sizeof(float));
  float* dst = calloc(N, sizeof(float));
  ck_assert_ptr_nonnull(src);
  ck_assert_ptr_nonnull(dst);
  for (int i = 0; i < N; i++) src[i] = (float)(3 * i + 1);
  local_op_t op = {
      .src = src, .dst = dst, .count = N, .dtype = ncclFloat32, .op = {.kind = DEV_OP_SUM}};
  plan_t plan;
  memset(&plan, 0, sizeof(plan));
  plan.local = &op;
  plan.nlocal = 1;
  const cudaStream_t s[2] = {(cudaStream_t)0x1000, (cudaStream_t)0x2000}; /* never touched */
  exec_streams_t streams = {.s = s, .n = 2, .captured = true};
  ck_assert_int_eq(executor_host_ops.launch(w->state[0], &plan, &streams), ncclSuccess);
  ck_assert(!streams.captured);
  for (int i = 0; i < N; i++)
    ck_assert_msg(dst[i] == (float)(3 * i + 1), "element %d is %g, expected %d", i, dst[i],
                  3 * i + 1);
  free(src);
  free(dst);
  hw_world_free(w);
}
END_TEST

/* Rank r's successor on channel c's ring, from the world's ring order. */
static int ring_next_of(const hw_world_t* w, int c, int r) {
  for (int i = 0; i < w->n; i++)
    if (w->ring[c][i] == r) return w->ring[c][(i + 1) % w->n];
  return -1;
}

/* After a ring AllReduce on 4 ranks, each rank's send position towards its ring successor is the
 * successor's receive position from it, and both moved (the data went round). */
START_TEST(test_host_positions) {
  enum { R = 4, N = 4096 };
  hw_world_t* w = hw_world_new(R, 1);
  static hw_plan_t rps[HW_MAX_RANKS];
  float* bufs[R];
  for (int r = 0; r < R; r++) {
    bufs[r] = malloc(N * sizeof(float));
    ck_assert_ptr_nonnull(bufs[r]);
    for (int i = 0; i < N; i++) bufs[r][i] = (float)(r + 1);
    hw_plan_reset(&rps[r], 1);
    work_t wk = {.func = FUNC_ALLREDUCE,
                 .algo = ALGO_RING,
                 .proto = PROTO_SIMPLE,
                 .dtype = ncclFloat32,
                 .sendbuff = bufs[r],
                 .recvbuff = bufs[r],
                 .count = N,
                 .chan_off = 0,
                 .chan_count = N,
                 .nranks = R};
    hw_plan_add(&rps[r], 0, &wk);
  }
  hw_world_run(w, rps);
  for (int i = 0; i < N; i++) ck_assert(bufs[0][i] == (float)(R * (R + 1) / 2));
  exec_conn_t pos[R][4];
  int n[R];
  for (int r = 0; r < R; r++) {
    n[r] = executor_host_ops.positions(w->state[r], pos[r], 4);
    ck_assert_int_eq(n[r], 2);
  }
  for (int r = 0; r < R; r++) {
    const exec_conn_t* s = pos[r][0].is_send ? &pos[r][0] : &pos[r][1];
    ck_assert_int_eq(s->peer, ring_next_of(w, 0, r));
    ck_assert_uint_gt(s->step, 0);
    const exec_conn_t* q = pos[s->peer][0].is_send ? &pos[s->peer][1] : &pos[s->peer][0];
    ck_assert_int_eq(q->is_send, 0);
    ck_assert_int_eq(q->peer, r);
    ck_assert_uint_eq(q->step, s->step);
  }
  for (int r = 0; r < R; r++) free(bufs[r]);
  hw_world_free(w);
}
END_TEST

static Suite* executor_ops_suite(void) {
  Suite* s = suite_create("executor_ops");
  TCase* tc = tcase_create("ops");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_tables_complete);
  tcase_add_test(tc, test_host_scope);
  tcase_add_test(tc, test_host_launch_streams);
  tcase_add_test(tc, test_host_positions);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(executor_ops_suite());
}
