/* A world of fake ranks for the host executor's tests (see host_world.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "host_world.h"

#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"
#include "topo/topo.h"

/* ---- peer_check and proxy_wake, counted ------------------------------------------------------ */
static ncclResult_t hw_peer_check(void* arg, int peer) {
  hw_rank_ctx_t* rc = arg;
  __atomic_add_fetch(&rc->w->peer_checks, 1, __ATOMIC_RELAXED);
  if (peer != rc->w->dead) return ncclSuccess;
  WARN("test world: rank %d is gone (rank %d waits on it)", peer, rc->rank);
  return ncclRemoteError;
}

static void hw_proxy_wake(void* arg) {
  hw_rank_ctx_t* rc = arg;
  __atomic_add_fetch(&rc->w->proxy_wakes, 1, __ATOMIC_RELAXED);
}

/* Channel trees: dbtree 0, dbtree 1, then a tree of up to three children per node. */
static void hw_world_tree(int n, int r, int c, int* up, int* down) {
  if (c % 3 < 2) {
    topo_dbtree(n, r, c % 3, up, down);
    return;
  }
  *up = r == 0 ? -1 : (r - 1) / 3;
  for (int k = 0; k < TREE_MAX_CHILDREN; k++) down[k] = 3 * r + 1 + k < n ? 3 * r + 1 + k : -1;
}

hw_world_t* hw_world_new(int n, int nch) {
  ck_assert(n >= 1 && n <= HW_MAX_RANKS && nch >= 1 && nch <= HW_MAX_CHANNELS);
  hw_world_t* w = calloc(1, sizeof(*w));
  ck_assert_ptr_nonnull(w);
  w->n = n;
  w->nch = nch;
  w->dead = -1;
  int hosts[HW_MAX_RANKS];
  for (int r = 0; r < n; r++) hosts[r] = r % 2; /* channel 2: even ranks, then odd ones */
  for (int c = 0; c < nch; c++) topo_ring_order(n, c == 2 ? hosts : NULL, c, true, w->ring[c]);
  for (int c = 0; c < nch; c++) {
    for (int i = 0; i < n; i++) {
      for (int j = 0; j < n; j++) {
        if (i == j) continue;
        hw_link_t* l = calloc(1, sizeof(*l));
        ck_assert_ptr_nonnull(l);
        l->buf[PROTO_SIMPLE] = calloc(1, HW_SIMPLE_FIFO);
        l->buf[PROTO_LL] = calloc(1, HW_LL_FIFO);
        ck_assert(l->buf[PROTO_SIMPLE] && l->buf[PROTO_LL]);
        w->links[c][i][j] = l;
        conn_fifo_t f = {
            .head = &l->head, .tail = &l->tail, .sizes = l->sizes, .flags = CONN_FLAG_HOSTMEM};
        f.buffs[PROTO_SIMPLE] = l->buf[PROTO_SIMPLE];
        f.buffs[PROTO_LL] = l->buf[PROTO_LL];
        f.buff_bytes[PROTO_SIMPLE] = HW_SIMPLE_FIFO;
        f.buff_bytes[PROTO_LL] = HW_LL_FIFO;
        w->fsend[c][i][j] = f;
        w->frecv[c][i][j] = f;
        w->send_tab[i][c][j] = &w->fsend[c][i][j];
        w->recv_tab[j][c][i] = &w->frecv[c][i][j];
      }
    }
  }
  for (int r = 0; r < n; r++) {
    for (int c = 0; c < nch; c++) {
      dev_channel_t* dc = &w->chans[r][c];
      dc->id = c;
      dc->ring_ranks = w->ring[c];
      for (int i = 0; i < n; i++)
        if (w->ring[c][i] == r) dc->ring_index = i;
      dc->ring_prev = w->ring[c][(dc->ring_index + n - 1) % n];
      dc->ring_next = w->ring[c][(dc->ring_index + 1) % n];
      hw_world_tree(n, r, c, &dc->tree_up, dc->tree_down);
      dc->send = w->send_tab[r][c];
      dc->recv = w->recv_tab[r][c];
    }
    w->rc[r] = (hw_rank_ctx_t){.w = w, .rank = r};
    w->comm[r] = (exec_comm_t){.rank = r,
                               .nranks = n,
                               .nchannels = nch,
                               .channels = w->chans[r],
                               .abort_flag = &w->abort_flag[r],
                               .peer_check = hw_peer_check,
                               .proxy_wake = hw_proxy_wake,
                               .arg = &w->rc[r],
                               .err_buf = w->err[r],
                               .err_len = sizeof(w->err[r])};
    ck_assert_int_eq(executor_host_ops.init(&w->comm[r], &w->state[r]), ncclSuccess);
  }
  return w;
}

void hw_world_free(hw_world_t* w) {
  for (int r = 0; r < w->n; r++) ck_assert_int_eq(executor_host_ops.fini(w->state[r]), ncclSuccess);
  for (int c = 0; c < w->nch; c++)
    for (int i = 0; i < w->n; i++)
      for (int j = 0; j < w->n; j++) {
        hw_link_t* l = w->links[c][i][j];
        if (l == NULL) continue;
        free(l->buf[PROTO_SIMPLE]);
        free(l->buf[PROTO_LL]);
        free(l);
      }
  free(w);
}

/* ---- Running plans: one thread per rank --------------------------------------------------- */
void* hw_launch_main(void* p) {
  hw_launch_t* a = p;
  a->res = executor_host_ops.launch(a->w->state[a->rank], &a->rp->plan, NULL);
  __atomic_store_n(&a->end_ns, clock_ns(), __ATOMIC_RELEASE);
  return NULL;
}

void hw_plan_reset(hw_plan_t* rp, int nch) {
  memset(&rp->plan, 0, sizeof(rp->plan));
  rp->plan.nchannels = nch;
  for (int c = 0; c < nch; c++) rp->plan.works[c] = rp->works[c];
}

void hw_plan_add(hw_plan_t* rp, int c, const work_t* wk) {
  ck_assert_int_lt(rp->plan.nwork[c], HW_MAX_WORKS);
  rp->works[c][rp->plan.nwork[c]++] = *wk;
}

bool hw_join(pthread_t th, int seconds) {
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += seconds;
  return pthread_timedjoin_np(th, NULL, &dl) == 0;
}

void hw_world_run_args(hw_world_t* w, hw_plan_t* rps, int skip, hw_launch_t* args) {
  pthread_t th[HW_MAX_RANKS];
  for (int r = 0; r < w->n; r++) {
    args[r] = (hw_launch_t){.w = w, .rank = r, .rp = &rps[r], .res = ncclSuccess};
    if (r == skip) continue;
    ck_assert_int_eq(pthread_create(&th[r], NULL, hw_launch_main, &args[r]), 0);
  }
  for (int r = 0; r < w->n; r++) {
    if (r == skip) continue;
    ck_assert_msg(hw_join(th[r], 60), "rank %d hung", r);
  }
}

void hw_world_run(hw_world_t* w, hw_plan_t* rps) {
  hw_launch_t args[HW_MAX_RANKS];
  hw_world_run_args(w, rps, -1, args);
  for (int r = 0; r < w->n; r++)
    ck_assert_msg(args[r].res == ncclSuccess, "rank %d: launch returned %d", r, args[r].res);
}

void hw_slice(size_t count, int nch, int c, size_t* off, size_t* n) {
  size_t total_w = (size_t)nch * (nch + 1) / 2;
  size_t a = count * ((size_t)c * (c + 1) / 2) / total_w;
  size_t b = count * ((size_t)(c + 1) * (c + 2) / 2) / total_w;
  *off = a;
  *n = b - a;
}
