/* A world of fake ranks for the host executor's tests (tests/unit/test_host_exec*.c): N ranks in
 * one process, each with its own executor_host_ops instance, wired by in-memory FIFOs in the
 * conn_fifo_t format, on up to three channels: rings from topo_ring_order (channel 2 groups even
 * ranks, then odd ones, as if they were two hosts), trees from topo_dbtree on channels 0 and 1 and
 * a tree of up to three children per node on channel 2. Plans run with one thread per rank, every
 * join bounded. The helpers use Check's asserts: call them from a test. */
#ifndef BATON_TEST_HOST_WORLD_H
#define BATON_TEST_HOST_WORLD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "device/device.h"

#define HW_MAX_RANKS 8
#define HW_MAX_CHANNELS 3
#define HW_MAX_WORKS 16            /* work items per channel in one plan */
#define HW_SIMPLE_FIFO (128 << 10) /* 16 KiB Simple slots */
#define HW_LL_FIFO (32 << 10)      /* 4 KiB LL slots: 2 KiB of data */

/* The memory of one connection i -> j: what a transport would allocate. */
typedef struct hw_link {
  uint64_t head, tail;
  int sizes[NCCL_STEPS];
  char* buf[PROTO_COUNT];
} hw_link_t;

typedef struct hw_world hw_world_t;
typedef struct hw_rank_ctx {
  hw_world_t* w;
  int rank;
} hw_rank_ctx_t;

struct hw_world {
  int n, nch;
  int ring[HW_MAX_CHANNELS][HW_MAX_RANKS];
  hw_link_t* links[HW_MAX_CHANNELS][HW_MAX_RANKS][HW_MAX_RANKS];
  conn_fifo_t fsend[HW_MAX_CHANNELS][HW_MAX_RANKS][HW_MAX_RANKS]; /* sender's view of i -> j */
  conn_fifo_t frecv[HW_MAX_CHANNELS][HW_MAX_RANKS][HW_MAX_RANKS]; /* receiver's view of i -> j */
  conn_fifo_t* send_tab[HW_MAX_RANKS][HW_MAX_CHANNELS][HW_MAX_RANKS];
  conn_fifo_t* recv_tab[HW_MAX_RANKS][HW_MAX_CHANNELS][HW_MAX_RANKS];
  dev_channel_t chans[HW_MAX_RANKS][HW_MAX_CHANNELS];
  exec_comm_t comm[HW_MAX_RANKS];
  hw_rank_ctx_t rc[HW_MAX_RANKS];
  void* state[HW_MAX_RANKS];
  volatile uint32_t abort_flag[HW_MAX_RANKS];
  int dead; /* rank peer_check reports as gone, with a WARN naming it (-1: none) */
  char err[HW_MAX_RANKS][256]; /* each rank's last-error text (exec_comm_t.err_buf) */
  int peer_checks, proxy_wakes;
};

/* n ranks (at most HW_MAX_RANKS) on nch channels (at most HW_MAX_CHANNELS), executors started. */
hw_world_t* hw_world_new(int n, int nch);
void hw_world_free(hw_world_t* w);

/* One rank's plan with room for its work items. Tests add items as a user would describe them
 * (counts in elements, chunk 0 for a slot's worth, the root's rank, sends to self and one-rank
 * collectives as items); the launch first turns them into what the planner decides
 * (hw_plan_finish: src/collectives/plan.c's rules, played here): steps clamped to the slots, the
 * root's ring position, point-to-point in bytes, local operations for what needs no peer. */
#define HW_MAX_LOCAL (HW_MAX_CHANNELS * HW_MAX_WORKS)
typedef struct hw_plan {
  plan_t plan;
  work_t works[HW_MAX_CHANNELS][HW_MAX_WORKS];
  local_op_t local[HW_MAX_LOCAL];
  bool finished;
} hw_plan_t;

void hw_plan_reset(hw_plan_t* rp, int nch);
void hw_plan_add(hw_plan_t* rp, int c, const work_t* wk);
/* Rank rank's plan as the planner would have made it (done once; the launch calls it). */
void hw_plan_finish(hw_world_t* w, int rank, hw_plan_t* rp);

/* One rank's launch on its own thread: its result, and when it returned (clock_ns). */
typedef struct hw_launch {
  hw_world_t* w;
  int rank;
  hw_plan_t* rp;
  ncclResult_t res;
  uint64_t end_ns;
} hw_launch_t;

/* Joins th, waiting at most `seconds`; false when it is still running then. */
bool hw_join(pthread_t th, int seconds);
/* Thread body: launches a->rp on rank a->rank's executor, then records res and end_ns. */
void* hw_launch_main(void* a);
/* Launches every rank's plan rps[r] except `skip` (-1: none) and joins them (60 s at most each);
 * args[r] gets each rank's result. */
void hw_world_run_args(hw_world_t* w, hw_plan_t* rps, int skip, hw_launch_t* args);
/* Every rank, and every launch must succeed. */
void hw_world_run(hw_world_t* w, hw_plan_t* rps);

/* Channel c's slice [*off, *off + *n) of count elements over nch channels: uneven on purpose. */
void hw_slice(size_t count, int nch, int c, size_t* off, size_t* n);

#endif /* BATON_TEST_HOST_WORLD_H */
