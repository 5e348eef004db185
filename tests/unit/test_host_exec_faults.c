/* Host executor, failure paths: N fake ranks (tests/common/host_world.h) where one rank never
 * runs and the others are aborted, a peer that peer_check reports dead, plans the executor must
 * refuse without consuming a step, and the reader side of the FIFO format driven by hand. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "device/device.h"
#include "host_world.h"
#include "unit.h"

#define SENTINEL 0xA5

/* ---- Failures: abort, dead peer, missing connection -------------------------------------- */
static void plan_allreduce(hw_world_t* w, hw_plan_t* rps, float** bufs, size_t count, int proto) {
  for (int r = 0; r < w->n; r++) {
    bufs[r] = calloc(count, 4);
    hw_plan_reset(&rps[r], w->nch);
    for (int c = 0; c < w->nch; c++) {
      size_t off, cnt;
      hw_slice(count, w->nch, c, &off, &cnt);
      work_t wk = {.func = FUNC_ALLREDUCE,
                   .algo = ALGO_RING,
                   .proto = (uint8_t)proto,
                   .dtype = ncclFloat32,
                   .sendbuff = bufs[r],
                   .recvbuff = bufs[r],
                   .count = count,
                   .chan_off = off,
                   .chan_count = cnt,
                   .nranks = w->n};
      hw_plan_add(&rps[r], c, &wk);
    }
  }
}

typedef struct abort_arg {
  hw_world_t* w;
  uint64_t set_ns;
} abort_arg_t;

static void* abort_later(void* p) {
  abort_arg_t* a = p;
  usleep(200 * 1000);
  a->set_ns = clock_ns();
  for (int r = 0; r < a->w->n; r++) __atomic_store_n(&a->w->abort_flag[r], 1, __ATOMIC_RELEASE);
  return NULL;
}

START_TEST(test_abort) {
  for (int proto = 0; proto < PROTO_COUNT; proto += 2) {
    hw_world_t* w = hw_world_new(4, 2);
    static hw_plan_t rps[HW_MAX_RANKS];
    float* bufs[HW_MAX_RANKS];
    hw_launch_t args[HW_MAX_RANKS];
    plan_allreduce(w, rps, bufs, 100000, proto);
    abort_arg_t aa = {.w = w};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, abort_later, &aa), 0);
    hw_world_run_args(w, rps, 3, args); /* rank 3 never runs */
    pthread_join(th, NULL);
    for (int r = 0; r < 3; r++) {
      ck_assert_msg(args[r].res != ncclSuccess, "rank %d completed without rank 3", r);
      ck_assert_msg(args[r].end_ns >= aa.set_ns, "rank %d returned before the abort", r);
      ck_assert_msg(args[r].end_ns - aa.set_ns < 1000ull * 1000 * 1000,
                    "rank %d took %.3f s to see the abort", r, (args[r].end_ns - aa.set_ns) / 1e9);
    }
    for (int r = 0; r < 4; r++) free(bufs[r]);
    hw_world_free(w);
  }
}
END_TEST

START_TEST(test_dead_peer) {
  hw_world_t* w = hw_world_new(3, 2);
  static hw_plan_t rps[HW_MAX_RANKS];
  float* bufs[HW_MAX_RANKS];
  hw_launch_t args[HW_MAX_RANKS];
  plan_allreduce(w, rps, bufs, 100000, PROTO_SIMPLE);
  w->dead = 2;
  uint64_t t0 = clock_ns();
  hw_world_run_args(w, rps, 2, args);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(args[r].res, ncclRemoteError);
    ck_assert_msg(args[r].end_ns - t0 < 2000ull * 1000 * 1000, "rank %d took %.3f s", r,
                  (args[r].end_ns - t0) / 1e9);
  }
  ck_assert_int_gt(w->peer_checks, 0);
  for (int r = 0; r < 3; r++) free(bufs[r]);
  hw_world_free(w);
}
END_TEST

/* Runs rank r's plan alone (the other ranks never run); fails the test if it has not returned
 * within 5 s, after aborting it. */
static ncclResult_t launch_alone(hw_world_t* w, hw_plan_t* rp, int r, double* secs) {
  hw_launch_t a = {.w = w, .rank = r, .rp = rp};
  pthread_t th;
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(pthread_create(&th, NULL, hw_launch_main, &a), 0);
  bool joined = hw_join(th, 5);
  if (!joined) {
    __atomic_store_n(&w->abort_flag[r], 1, __ATOMIC_RELEASE);
    ck_assert(hw_join(th, 10));
  }
  ck_assert_msg(joined, "rank %d did not notice the dead peer within 5 s", r);
  *secs = (double)(a.end_ns - t0) / 1e9;
  return a.res;
}

/* A dead peer seen by a worker channel (channel 1; channel 0 has no work, so nothing runs on the
 * launching thread): the WARN reaches the rank's last-error buffer (exec_comm_t.err_buf). */
START_TEST(test_worker_error_sink) {
  hw_world_t* w = hw_world_new(3, 2);
  static hw_plan_t rps[HW_MAX_RANKS];
  hw_launch_t args[HW_MAX_RANKS];
  char bufs[2][1000];
  for (int r = 0; r < 2; r++) { /* ranks 0 and 1 receive from rank 2 on channel 1 */
    work_t wk = {.func = FUNC_RECV,
                 .algo = ALGO_RING,
                 .proto = PROTO_SIMPLE,
                 .dtype = ncclInt8,
                 .recvbuff = bufs[r],
                 .count = sizeof(bufs[r]),
                 .chan_off = 0,
                 .chan_count = sizeof(bufs[r]),
                 .root = 2,
                 .nranks = 3};
    hw_plan_reset(&rps[r], 2);
    hw_plan_add(&rps[r], 1, &wk);
  }
  hw_plan_reset(&rps[2], 2);
  w->dead = 2;
  hw_world_run_args(w, rps, 2, args);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(args[r].res, ncclRemoteError);
    ck_assert_msg(strstr(w->err[r], "rank 2 is gone") != NULL,
                  "rank %d: last error \"%s\" does not name dead rank 2", r, w->err[r]);
  }
  ck_assert_ptr_null(strstr(log_last_error(), "is gone")); /* not this thread's: the sink's */
  hw_world_free(w);
}
END_TEST

/* A step that waits on several peers (a tree root receiving from three children) where the first
 * one is alive but silent and the last one is dead: the dead one is found and named, on a worker
 * channel (channel 2). */
START_TEST(test_dead_among_waited) {
  for (int proto = 0; proto < PROTO_COUNT; proto += 2) {
    hw_world_t* w = hw_world_new(4, 3);
    static hw_plan_t rp;
    const dev_channel_t* dc = &w->chans[0][2];
    ck_assert_int_eq(dc->tree_up, -1);
    ck_assert_int_eq(dc->tree_down[0], 1);
    ck_assert_int_eq(dc->tree_down[2], 3);
    float* buf = calloc(5000, sizeof(float));
    hw_plan_reset(&rp, 3);
    work_t wk = {.func = FUNC_ALLREDUCE,
                 .algo = ALGO_TREE,
                 .proto = (uint8_t)proto,
                 .dtype = ncclFloat32,
                 .sendbuff = buf,
                 .recvbuff = buf,
                 .count = 5000,
                 .chan_off = 0,
                 .chan_count = 5000,
                 .nranks = 4};
    hw_plan_add(&rp, 2, &wk);
    w->dead = 3;
    double secs;
    ck_assert_int_eq(launch_alone(w, &rp, 0, &secs), ncclRemoteError);
    ck_assert_msg(secs < 2.0, "took %.3f s", secs);
    ck_assert_msg(strstr(w->err[0], "rank 3 is gone") != NULL, "last error \"%s\"", w->err[0]);
    free(buf);
    hw_world_free(w);
  }
}
END_TEST

START_TEST(test_bad_plans) {
  hw_world_t* w = hw_world_new(2, 1);
  static hw_plan_t rps[HW_MAX_RANKS];
  float* bufs[HW_MAX_RANKS];
  plan_allreduce(w, rps, bufs, 1000, PROTO_SIMPLE);
  /* A missing connection fails at once instead of waiting. */
  w->chans[0][0].send[1] = NULL;
  ck_assert_int_eq(executor_host_ops.launch(w->state[0], &rps[0].plan, NULL), ncclInternalError);
  w->chans[0][0].send[1] = &w->fsend[0][0][1];
  /* LL128 is GPU-only; tree runs AllReduce only; a root outside the ring. */
  rps[0].works[0][0].proto = PROTO_LL128;
  ck_assert_int_eq(executor_host_ops.launch(w->state[0], &rps[0].plan, NULL), ncclInternalError);
  rps[0].works[0][0].proto = PROTO_SIMPLE;
  rps[0].works[0][0].func = FUNC_BROADCAST;
  rps[0].works[0][0].algo = ALGO_TREE;
  ck_assert_int_eq(executor_host_ops.launch(w->state[0], &rps[0].plan, NULL), ncclInternalError);
  rps[0].works[0][0].algo = ALGO_RING;
  rps[0].works[0][0].root = 5;
  ck_assert_int_eq(executor_host_ops.launch(w->state[0], &rps[0].plan, NULL), ncclInternalError);
  /* A plan with more channels than the communicator. */
  rps[0].plan.nchannels = 2;
  ck_assert_int_eq(executor_host_ops.launch(w->state[0], &rps[0].plan, NULL), ncclInternalError);
  /* None of that consumed a step: a real AllReduce still works afterwards. */
  plan_allreduce(w, rps, bufs + 2, 1000, PROTO_LL);
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 1000; i++) bufs[2 + r][i] = (float)(r + 1);
  hw_world_run(w, rps);
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 1000; i++) ck_assert_float_eq(bufs[2 + r][i], 3.0f);
  /* A NET connection wakes the proxy. */
  w->fsend[0][0][1].flags |= CONN_FLAG_NET;
  hw_world_run(w, rps);
  ck_assert_int_ge(w->proxy_wakes, 1);
  for (int r = 0; r < 4; r++) free(bufs[r]);
  hw_world_free(w);
}
END_TEST

/* The reader side of the format, driven by hand as a transport or proxy would write it: an LL
 * slot whose lines are not all there is not consumed; a Simple slot whose size disagrees with the
 * plan is an error, not silent corruption. */
static void ll_write_line(ll_line_t* line, const int32_t* data, uint32_t flag) {
  __atomic_store_n(&line->v[0], (uint64_t)(uint32_t)data[0] | (uint64_t)flag << 32,
                   __ATOMIC_RELEASE);
  __atomic_store_n(&line->v[1], (uint64_t)(uint32_t)data[1] | (uint64_t)flag << 32,
                   __ATOMIC_RELEASE);
}

START_TEST(test_fifo_reader) {
  hw_world_t* w = hw_world_new(2, 1);
  static hw_plan_t rp[HW_MAX_RANKS];
  int32_t src[26] = {0}, out[25];
  for (int i = 0; i < 25; i++) src[i] = i * 11 + 1;
  memset(out, SENTINEL, sizeof(out));
  work_t wk = {.func = FUNC_RECV,
               .algo = ALGO_RING,
               .proto = PROTO_LL,
               .dtype = ncclInt32,
               .recvbuff = out,
               .count = 25,
               .chan_off = 0,
               .chan_count = 25,
               .root = 0,
               .nranks = 2};
  hw_plan_reset(&rp[1], 1);
  hw_plan_add(&rp[1], 0, &wk);
  hw_launch_t a = {.w = w, .rank = 1, .rp = &rp[1]};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, hw_launch_main, &a), 0);
  hw_link_t* l = w->links[0][0][1];
  ll_line_t* lines = (ll_line_t*)l->buf[PROTO_LL]; /* slot 0: step 0, flag 1 */
  for (int i = 0; i < 13; i++)
    if (i != 5) ll_write_line(&lines[i], &src[2 * i], 1);
  usleep(100 * 1000);
  ck_assert_msg(__atomic_load_n(&a.end_ns, __ATOMIC_ACQUIRE) == 0,
                "the receive completed with line 5 missing");
  ck_assert_int_eq(__atomic_load_n(&l->head, __ATOMIC_ACQUIRE), 0);
  ll_write_line(&lines[5], &src[10], 1);
  ck_assert(hw_join(th, 10));
  ck_assert_int_eq(a.res, ncclSuccess);
  ck_assert_mem_eq(out, src, sizeof(out));
  ck_assert_int_eq(__atomic_load_n(&l->head, __ATOMIC_ACQUIRE), 1);

  /* Simple, next step (1): the sender claims 50 bytes where the plan says 100. */
  rp[1].works[0][0].proto = PROTO_SIMPLE;
  memcpy(l->buf[PROTO_SIMPLE] + HW_SIMPLE_FIFO / NCCL_STEPS, src, 100);
  l->sizes[1] = 50;
  __atomic_store_n(&l->tail, 2, __ATOMIC_RELEASE);
  ck_assert_int_eq(executor_host_ops.launch(w->state[1], &rp[1].plan, NULL), ncclInternalError);
  hw_world_free(w);
}

static Suite* host_exec_faults_suite(void) {
  Suite* s = suite_create("host_exec_faults");
  TCase* tf = tcase_create("failures");
  tcase_set_timeout(tf, 60);
  tcase_add_test(tf, test_abort);
  tcase_add_test(tf, test_dead_peer);
  tcase_add_test(tf, test_worker_error_sink);
  tcase_add_test(tf, test_dead_among_waited);
  tcase_add_test(tf, test_bad_plans);
  tcase_add_test(tf, test_fifo_reader);
  suite_add_tcase(s, tf);
  return s;
}

int main(void) {
  return unit_run_suite(host_exec_faults_suite());
}
