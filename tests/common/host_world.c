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
  hw_plan_finish(a->w, a->rank, a->rp);
  a->res = executor_host_ops.launch(a->w->state[a->rank], &a->rp->plan, NULL);
  __atomic_store_n(&a->end_ns, clock_ns(), __ATOMIC_RELEASE);
  return NULL;
}

void hw_plan_reset(hw_plan_t* rp, int nch) {
  memset(&rp->plan, 0, sizeof(rp->plan));
  rp->plan.nchannels = nch;
  for (int c = 0; c < nch; c++) rp->plan.works[c] = rp->works[c];
  rp->plan.local = rp->local;
  rp->finished = false;
}

/* A slot's payload for proto (HW_* FIFOs). */
static size_t hw_slot_bytes(int proto) {
  return proto == PROTO_LL ? HW_LL_FIFO / NCCL_STEPS / sizeof(ll_line_t) * 8
                           : HW_SIMPLE_FIFO / NCCL_STEPS;
}

void hw_plan_finish(hw_world_t* w, int rank, hw_plan_t* rp) {
  if (rp->finished) return;
  rp->finished = true;
  plan_t* p = &rp->plan;
  /* sends to self and receives from self pair in order: the k-th of each make one copy */
  const char* ssrc[HW_MAX_LOCAL];
  size_t sbytes[HW_MAX_LOCAL];
  char* rdst[HW_MAX_LOCAL];
  int nsend = 0, nrecv = 0;
  p->nlocal = 0;
  for (int c = 0; c < p->nchannels; c++) {
    int k = 0;
    for (int i = 0; i < p->nwork[c]; i++) {
      work_t x = rp->works[c][i];
      const size_t es = datatype_size((ncclDataType_t)x.dtype);
      const bool p2p = x.func == FUNC_SEND || x.func == FUNC_RECV;
      const size_t cap = es > 0 ? hw_slot_bytes(x.proto) / (p2p ? 1 : es) : 0;
      if (p2p && x.root == rank && es > 0) {
        if (x.func == FUNC_SEND) {
          ssrc[nsend] = (const char*)x.sendbuff + x.chan_off * es;
          sbytes[nsend++] = x.chan_count * es;
        } else {
          rdst[nrecv++] = (char*)x.recvbuff + x.chan_off * es;
        }
        continue;
      }
      if (!p2p && w->n == 1 && es > 0) { /* one rank: a copy or a scaling */
        const bool scales =
            x.op.kind == DEV_OP_PREMULSUM &&
            (x.func == FUNC_REDUCE || x.func == FUNC_REDUCESCATTER || x.func == FUNC_ALLREDUCE);
        const char* src = (const char*)x.sendbuff + x.chan_off * es;
        char* dst = (char*)x.recvbuff + x.chan_off * es;
        if (x.chan_count > 0 && (scales || src != dst)) {
          ck_assert_int_lt(p->nlocal, HW_MAX_LOCAL);
          rp->local[p->nlocal++] =
              (local_op_t){.src = src,
                           .dst = dst,
                           .count = x.chan_count,
                           .dtype = x.dtype,
                           .op = scales ? x.op : (dev_redop_t){.kind = DEV_OP_SUM}};
        }
        continue;
      }
      if (p2p && es > 0) {
        x.chan_off *= es;
        x.chan_count *= es;
        x.chunk *= es;
      }
      x.chunk = x.chunk == 0 || x.chunk > cap ? cap : x.chunk;
      x.root_idx = -1;
      if (!p2p && (x.func == FUNC_BROADCAST || x.func == FUNC_REDUCE))
        for (int j = 0; j < w->n; j++)
          if (w->ring[c][j] == x.root) x.root_idx = j;
      rp->works[c][k++] = x;
    }
    p->nwork[c] = k;
  }
  ck_assert_msg(nsend == nrecv, "rank %d: %d sends to self, %d receives from self", rank, nsend,
                nrecv);
  for (int i = 0; i < nsend; i++) {
    ck_assert_int_lt(p->nlocal, HW_MAX_LOCAL);
    if (ssrc[i] == rdst[i] || sbytes[i] == 0) continue;
    rp->local[p->nlocal++] = (local_op_t){.src = ssrc[i],
                                          .dst = rdst[i],
                                          .count = sbytes[i],
                                          .dtype = ncclInt8,
                                          .op = {.kind = DEV_OP_SUM}};
  }
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
