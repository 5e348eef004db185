/* Host executor: N ranks in one process, each with its own executor_host_ops instance, wired by
 * in-memory FIFOs (the conn_fifo_t format), rings from topo_ring_order and trees from topo_dbtree
 * (plus a three-children tree). Every collective x algorithm x protocol x datatype x operation,
 * point-to-point patterns in every posting order, abort and dead-peer handling. Expected values
 * are computed here, in double, from the inputs. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "device/device.h"
#include "topo/topo.h"

#define MAXR 8
#define MAXCH 3
#define MAXW 16
#define GUARD 64
#define SENTINEL 0xA5
#define SIMPLE_FIFO (128 << 10) /* 16 KiB Simple slots */
#define LL_FIFO (32 << 10)      /* 4 KiB LL slots: 2 KiB of data */

static const int nranks_list[] = {1, 2, 3, 4, 8};

/* ---- A world of fake ranks ------------------------------------------------------------------- */
typedef struct link {
  uint64_t head, tail;
  int sizes[NCCL_STEPS];
  char* buf[PROTO_COUNT];
} link_t;

typedef struct world world_t;
typedef struct rank_ctx {
  world_t* w;
  int rank;
} rank_ctx_t;

struct world {
  int n, nch;
  int ring[MAXCH][MAXR];
  link_t* links[MAXCH][MAXR][MAXR];
  conn_fifo_t fsend[MAXCH][MAXR][MAXR]; /* sender's view of i -> j */
  conn_fifo_t frecv[MAXCH][MAXR][MAXR]; /* receiver's view of i -> j */
  conn_fifo_t* send_tab[MAXR][MAXCH][MAXR];
  conn_fifo_t* recv_tab[MAXR][MAXCH][MAXR];
  dev_channel_t chans[MAXR][MAXCH];
  exec_comm_t comm[MAXR];
  rank_ctx_t rc[MAXR];
  void* state[MAXR];
  volatile uint32_t abort_flag[MAXR];
  int dead; /* rank peer_check reports as gone (-1: none) */
  int peer_checks, proxy_wakes;
};

static ncclResult_t fake_peer_check(void* arg, int peer) {
  rank_ctx_t* rc = arg;
  __atomic_add_fetch(&rc->w->peer_checks, 1, __ATOMIC_RELAXED);
  return peer == rc->w->dead ? ncclRemoteError : ncclSuccess;
}

static void fake_proxy_wake(void* arg) {
  rank_ctx_t* rc = arg;
  __atomic_add_fetch(&rc->w->proxy_wakes, 1, __ATOMIC_RELAXED);
}

/* Channel trees: dbtree 0, dbtree 1, then a tree of up to three children per node. */
static void world_tree(int n, int r, int c, int* up, int* down) {
  if (c % 3 < 2) {
    topo_dbtree(n, r, c % 3, up, down);
    return;
  }
  *up = r == 0 ? -1 : (r - 1) / 3;
  for (int k = 0; k < TREE_MAX_CHILDREN; k++) down[k] = 3 * r + 1 + k < n ? 3 * r + 1 + k : -1;
}

static world_t* world_new(int n, int nch) {
  world_t* w = calloc(1, sizeof(*w));
  ck_assert_ptr_nonnull(w);
  w->n = n;
  w->nch = nch;
  w->dead = -1;
  int hosts[MAXR];
  for (int r = 0; r < n; r++) hosts[r] = r % 2; /* channel 2: even ranks, then odd ones */
  for (int c = 0; c < nch; c++) topo_ring_order(n, c == 2 ? hosts : NULL, c, w->ring[c]);
  for (int c = 0; c < nch; c++) {
    for (int i = 0; i < n; i++) {
      for (int j = 0; j < n; j++) {
        if (i == j) continue;
        link_t* l = calloc(1, sizeof(*l));
        ck_assert_ptr_nonnull(l);
        l->buf[PROTO_SIMPLE] = calloc(1, SIMPLE_FIFO);
        l->buf[PROTO_LL] = calloc(1, LL_FIFO);
        ck_assert(l->buf[PROTO_SIMPLE] && l->buf[PROTO_LL]);
        w->links[c][i][j] = l;
        conn_fifo_t f = {
            .head = &l->head, .tail = &l->tail, .sizes = l->sizes, .flags = CONN_FLAG_HOSTMEM};
        f.buffs[PROTO_SIMPLE] = l->buf[PROTO_SIMPLE];
        f.buffs[PROTO_LL] = l->buf[PROTO_LL];
        f.buff_bytes[PROTO_SIMPLE] = SIMPLE_FIFO;
        f.buff_bytes[PROTO_LL] = LL_FIFO;
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
      world_tree(n, r, c, &dc->tree_up, dc->tree_down);
      dc->send = w->send_tab[r][c];
      dc->recv = w->recv_tab[r][c];
    }
    w->rc[r] = (rank_ctx_t){.w = w, .rank = r};
    w->comm[r] = (exec_comm_t){.rank = r,
                               .nranks = n,
                               .nchannels = nch,
                               .channels = w->chans[r],
                               .abort_flag = &w->abort_flag[r],
                               .peer_check = fake_peer_check,
                               .proxy_wake = fake_proxy_wake,
                               .arg = &w->rc[r]};
    ck_assert_int_eq(executor_host_ops.init(&w->comm[r], &w->state[r]), ncclSuccess);
  }
  return w;
}

static void world_free(world_t* w) {
  for (int r = 0; r < w->n; r++) ck_assert_int_eq(executor_host_ops.fini(w->state[r]), ncclSuccess);
  for (int c = 0; c < w->nch; c++)
    for (int i = 0; i < w->n; i++)
      for (int j = 0; j < w->n; j++) {
        link_t* l = w->links[c][i][j];
        if (l == NULL) continue;
        free(l->buf[PROTO_SIMPLE]);
        free(l->buf[PROTO_LL]);
        free(l);
      }
  free(w);
}

/* ---- Running plans: one thread per rank --------------------------------------------------- */
typedef struct rank_plan {
  plan_t plan;
  work_t works[MAXCH][MAXW];
} rank_plan_t;

typedef struct launch_arg {
  world_t* w;
  int rank;
  rank_plan_t* rp;
  ncclResult_t res;
  uint64_t end_ns;
} launch_arg_t;

static void* launch_main(void* p) {
  launch_arg_t* a = p;
  a->res = executor_host_ops.launch(a->w->state[a->rank], &a->rp->plan, NULL);
  __atomic_store_n(&a->end_ns, clock_ns(), __ATOMIC_RELEASE);
  return NULL;
}

static void plan_reset(rank_plan_t* rp, int nch) {
  memset(&rp->plan, 0, sizeof(rp->plan));
  rp->plan.nchannels = nch;
  for (int c = 0; c < nch; c++) rp->plan.works[c] = rp->works[c];
}

static void plan_add(rank_plan_t* rp, int c, const work_t* wk) {
  ck_assert_int_lt(rp->plan.nwork[c], MAXW);
  rp->works[c][rp->plan.nwork[c]++] = *wk;
}

/* Launches every rank except `skip` (-1: none) and joins them (bounded). */
static void world_run_args(world_t* w, rank_plan_t* rps, int skip, launch_arg_t* args) {
  pthread_t th[MAXR];
  for (int r = 0; r < w->n; r++) {
    args[r] = (launch_arg_t){.w = w, .rank = r, .rp = &rps[r], .res = ncclSuccess};
    if (r == skip) continue;
    ck_assert_int_eq(pthread_create(&th[r], NULL, launch_main, &args[r]), 0);
  }
  for (int r = 0; r < w->n; r++) {
    if (r == skip) continue;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 60;
    ck_assert_msg(pthread_timedjoin_np(th[r], NULL, &dl) == 0, "rank %d hung", r);
  }
}

static void world_run(world_t* w, rank_plan_t* rps) {
  launch_arg_t args[MAXR];
  world_run_args(w, rps, -1, args);
  for (int r = 0; r < w->n; r++)
    ck_assert_msg(args[r].res == ncclSuccess, "rank %d: launch returned %d", r, args[r].res);
}

/* Channel c's slice of count elements: uneven on purpose. */
static void slice(size_t count, int nch, int c, size_t* off, size_t* n) {
  size_t total_w = (size_t)nch * (nch + 1) / 2;
  size_t a = count * ((size_t)c * (c + 1) / 2) / total_w;
  size_t b = count * ((size_t)(c + 1) * (c + 2) / 2) / total_w;
  *off = a;
  *n = b - a;
}

/* ---- Values: small integers, exact in every tested type -------------------------------------- */
static uint16_t t_f2h(float f) { /* exact for the small values used here */
  if (f == 0) return signbit(f) ? 0x8000 : 0;
  uint32_t sign = f < 0 ? 0x8000 : 0;
  float a = fabsf(f);
  int e;
  float m = frexpf(a, &e); /* a = m * 2^e, m in [0.5, 1) */
  uint32_t mant = (uint32_t)lrintf((m * 2 - 1) * 1024);
  if (mant == 1024) {
    mant = 0;
    e++;
  }
  return (uint16_t)(sign | (uint32_t)(e - 1 + 15) << 10 | mant);
}
static float t_h2f(uint16_t h) {
  int e = (h >> 10) & 0x1f;
  int mant = h & 0x3ff;
  float v = e == 0 ? ldexpf((float)mant, -24) : ldexpf(1.0f + mant / 1024.0f, e - 15);
  return (h & 0x8000) ? -v : v;
}
static uint16_t t_f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return (uint16_t)(u >> 16);
}
static float t_bf2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static void val_store(int dtype, void* base, size_t i, double v) {
  switch (dtype) {
    case ncclFloat32:
      ((float*)base)[i] = (float)v;
      break;
    case ncclInt32:
      ((int32_t*)base)[i] = (int32_t)v;
      break;
    case ncclFloat16:
      ((uint16_t*)base)[i] = t_f2h((float)v);
      break;
    case ncclBfloat16:
      ((uint16_t*)base)[i] = t_f2bf((float)v);
      break;
    case ncclInt8:
      ((int8_t*)base)[i] = (int8_t)v;
      break;
    default:
      ck_abort_msg("dtype %d", dtype);
  }
}
static double val_load(int dtype, const void* base, size_t i) {
  switch (dtype) {
    case ncclFloat32:
      return ((const float*)base)[i];
    case ncclInt32:
      return ((const int32_t*)base)[i];
    case ncclFloat16:
      return t_h2f(((const uint16_t*)base)[i]);
    case ncclBfloat16:
      return t_bf2f(((const uint16_t*)base)[i]);
    case ncclInt8:
      return ((const int8_t*)base)[i];
    default:
      ck_abort_msg("dtype %d", dtype);
  }
  return 0;
}
static double tolerance(int dtype) {
  return dtype == ncclFloat32    ? 1e-6
         : dtype == ncclFloat16  ? 1e-3
         : dtype == ncclBfloat16 ? 1e-2
                                 : 0;
}

/* Input element i of rank r for an operation. */
static double gen(int kind, int dtype, int r, size_t i) {
  if (kind == DEV_OP_PROD) {
    static const double f[4] = {-2, -1, 1, 2};
    return f[(i * 3 + (size_t)r * 5) % 4];
  }
  if (kind == DEV_OP_SUMPOSTDIV) return (double)((i * 7919 + (size_t)r * 104729) % 2001) - 1000;
  if (kind < 0) return (double)((i * 5 + (size_t)r * 37) % 251); /* copies: distinct per rank */
  (void)dtype;
  return (double)((i * 7 + (size_t)r * 13 + 3) % 9) - 4;
}

static const double PREMUL_FLOAT = 0.5;
static const int PREMUL_INT = 3;

static dev_redop_t make_op(int kind, int dtype, int n) {
  dev_redop_t op = {.kind = (uint8_t)kind};
  if (kind == DEV_OP_PREMULSUM) {
    if (dtype == ncclInt32) {
      int32_t s = PREMUL_INT;
      memcpy(&op.scalar, &s, 4);
    } else if (dtype == ncclFloat32) {
      float s = (float)PREMUL_FLOAT;
      memcpy(&op.scalar, &s, 4);
    } else {
      uint16_t s = dtype == ncclFloat16 ? t_f2h((float)PREMUL_FLOAT) : t_f2bf((float)PREMUL_FLOAT);
      memcpy(&op.scalar, &s, 2);
    }
  } else if (kind == DEV_OP_SUMPOSTDIV) {
    op.scalar = (uint64_t)n;
  }
  return op;
}

/* The reduction of element i over ranks, where rank r contributes gen(.., r, idx(r)). */
static double expect_reduce(int kind, int dtype, int n, size_t base_i, size_t per_rank_stride,
                            size_t i) {
  double acc = 0;
  int64_t iacc = 0;
  double scalar = dtype == ncclInt32 ? PREMUL_INT : PREMUL_FLOAT;
  for (int r = 0; r < n; r++) {
    double v = gen(kind, dtype, r, base_i + (size_t)r * per_rank_stride + i);
    switch (kind) {
      case DEV_OP_SUM:
        acc += v;
        break;
      case DEV_OP_PREMULSUM:
        acc += scalar * v;
        break;
      case DEV_OP_SUMPOSTDIV:
        iacc += (int64_t)v;
        break;
      case DEV_OP_PROD:
        acc = r == 0 ? v : acc * v;
        break;
      case DEV_OP_MAX:
        acc = r == 0 || v > acc ? v : acc;
        break;
      case DEV_OP_MIN:
        acc = r == 0 || v < acc ? v : acc;
        break;
    }
  }
  if (kind == DEV_OP_SUMPOSTDIV) return (double)(iacc / n);
  return acc;
}

/* ---- One collective on every rank, checked --------------------------------------------------- */
typedef struct coll_case {
  int func, algo, proto, dtype, op; /* op: dev_op_kind_t, or -1 for copies */
  size_t count;
  int root;
  bool inplace;
  size_t chunk;
} coll_case_t;

static bool is_reducing(int func) {
  return func == FUNC_REDUCE || func == FUNC_REDUCESCATTER || func == FUNC_ALLREDUCE;
}

static bool mem_is(const unsigned char* p, size_t len, unsigned char v) {
  for (size_t i = 0; i < len; i++)
    if (p[i] != v) return false;
  return true;
}

static void run_coll(world_t* w, const coll_case_t* cc) {
  int n = w->n;
  size_t es = datatype_size((ncclDataType_t)cc->dtype);
  size_t count = cc->count;
  size_t send_elems = cc->func == FUNC_REDUCESCATTER ? count * n : count;
  size_t recv_elems = cc->func == FUNC_ALLGATHER ? count * n : count;
  size_t alloc_elems = send_elems > recv_elems ? send_elems : recv_elems;
  unsigned char* mem[MAXR][2];
  char *sendbuff[MAXR], *recvbuff[MAXR];
  static rank_plan_t rps[MAXR];
  char what[200];
  snprintf(what, sizeof(what),
           "n=%d func=%d algo=%d proto=%d dtype=%d op=%d count=%zu root=%d %s chunk=%zu", n,
           cc->func, cc->algo, cc->proto, cc->dtype, cc->op, count, cc->root,
           cc->inplace ? "in-place" : "out-of-place", cc->chunk);

  for (int r = 0; r < n; r++) {
    for (int b = 0; b < 2; b++) {
      mem[r][b] = malloc(alloc_elems * es + 2 * GUARD);
      ck_assert_ptr_nonnull(mem[r][b]);
      memset(mem[r][b], SENTINEL, alloc_elems * es + 2 * GUARD);
    }
    char* a = (char*)mem[r][0] + GUARD;
    if (!cc->inplace) {
      sendbuff[r] = a;
      recvbuff[r] = (char*)mem[r][1] + GUARD;
    } else if (cc->func == FUNC_ALLGATHER) {
      recvbuff[r] = a;
      sendbuff[r] = a + (size_t)r * count * es;
    } else if (cc->func == FUNC_REDUCESCATTER) {
      sendbuff[r] = a;
      recvbuff[r] = a + (size_t)r * count * es;
    } else {
      sendbuff[r] = recvbuff[r] = a;
    }
    int gk = is_reducing(cc->func) ? cc->op : -1;
    for (size_t i = 0; i < send_elems; i++)
      val_store(cc->dtype, sendbuff[r], i, gen(gk, cc->dtype, r, i));

    dev_redop_t op = make_op(cc->op < 0 ? DEV_OP_SUM : cc->op, cc->dtype, n);
    plan_reset(&rps[r], w->nch);
    for (int c = 0; c < w->nch; c++) {
      size_t off, cnt;
      slice(count, w->nch, c, &off, &cnt);
      work_t wk = {.func = (uint8_t)cc->func,
                   .algo = (uint8_t)cc->algo,
                   .proto = (uint8_t)cc->proto,
                   .dtype = (uint8_t)cc->dtype,
                   .op = op,
                   .sendbuff = sendbuff[r],
                   .recvbuff = recvbuff[r],
                   .count = count,
                   .chan_off = off,
                   .chan_count = cnt,
                   .chunk = cc->chunk,
                   .root = cc->root,
                   .nranks = n};
      plan_add(&rps[r], c, &wk);
    }
  }
  world_run(w, rps);

  /* Expected results, once: the whole output (AllReduce, Reduce's root, Broadcast), every rank's
   * block (ReduceScatter: block r is rank r's output), or the gathered buffer (AllGather). */
  size_t nexp = cc->func == FUNC_REDUCESCATTER ? count * n : recv_elems;
  double* expv = malloc((nexp > 0 ? nexp : 1) * sizeof(double));
  ck_assert_ptr_nonnull(expv);
  for (size_t i = 0; i < nexp; i++) {
    switch (cc->func) {
      case FUNC_BROADCAST:
        expv[i] = gen(-1, cc->dtype, cc->root, i);
        break;
      case FUNC_ALLGATHER:
        expv[i] = gen(-1, cc->dtype, (int)(i / count), i % count);
        break;
      default:
        expv[i] = expect_reduce(cc->op, cc->dtype, n, i, 0, 0);
        break;
    }
  }
  double tol = tolerance(cc->dtype);
  for (int r = 0; r < n; r++) {
    /* Guards around both allocations. */
    for (int b = 0; b < 2; b++) {
      ck_assert_msg(mem_is(mem[r][b], GUARD, SENTINEL), "%s: rank %d wrote before a buffer", what,
                    r);
      ck_assert_msg(mem_is(mem[r][b] + GUARD + alloc_elems * es, GUARD, SENTINEL),
                    "%s: rank %d wrote past a buffer", what, r);
    }
    bool nonroot = cc->func == FUNC_REDUCE && r != cc->root;
    if (nonroot && !cc->inplace) {
      ck_assert_msg(mem_is((unsigned char*)recvbuff[r], recv_elems * es, SENTINEL),
                    "%s: non-root rank %d wrote its receive buffer", what, r);
    } else {
      const double* e = expv + (cc->func == FUNC_REDUCESCATTER ? (size_t)r * count : 0);
      for (size_t i = 0; i < recv_elems; i++) {
        /* A non-root Reduce in place keeps its input. */
        double exp = nonroot ? gen(cc->op, cc->dtype, r, i) : e[i];
        double got = val_load(cc->dtype, recvbuff[r], i);
        double lim = tol * (fabs(exp) > 1 ? fabs(exp) : 1);
        if (!(fabs(got - exp) <= lim))
          ck_abort_msg("%s: rank %d element %zu: got %g expected %g", what, r, i, got, exp);
      }
    }
    free(mem[r][0]);
    free(mem[r][1]);
  }
  free(expv);
}

/* ---- Collectives ----------------------------------------------------------------------------- */
static const int dtypes[] = {ncclFloat32, ncclInt32, ncclFloat16, ncclBfloat16};
static const int ops_float[] = {DEV_OP_SUM, DEV_OP_PROD, DEV_OP_MAX, DEV_OP_MIN, DEV_OP_PREMULSUM};
static const int ops_int[] = {DEV_OP_SUM, DEV_OP_PROD,      DEV_OP_MAX,
                              DEV_OP_MIN, DEV_OP_PREMULSUM, DEV_OP_SUMPOSTDIV};
static const struct {
  int func, algo;
} func_algos[] = {
    {FUNC_BROADCAST, ALGO_RING},     {FUNC_REDUCE, ALGO_RING},    {FUNC_ALLGATHER, ALGO_RING},
    {FUNC_REDUCESCATTER, ALGO_RING}, {FUNC_ALLREDUCE, ALGO_RING}, {FUNC_ALLREDUCE, ALGO_TREE},
};
#define NELEMS(a) (sizeof(a) / sizeof((a)[0]))

/* Every func x algo x proto x dtype x op x count x placement on one world size. */
START_TEST(test_coll_matrix) {
  int n = nranks_list[_i];
  world_t* w = world_new(n, 3);
  static const size_t counts[] = {0, 1, 7, 1000};
  static const size_t chunks[] = {0, 5, (size_t)1 << 40}; /* slot-sized, tiny, clamped */
  unsigned iter = 0;
  for (size_t fa = 0; fa < NELEMS(func_algos); fa++) {
    for (int proto = 0; proto < PROTO_COUNT; proto++) {
      if (proto == PROTO_LL128) continue;
      for (size_t d = 0; d < NELEMS(dtypes); d++) {
        int dtype = dtypes[d];
        const int* ops = dtype == ncclInt32 ? ops_int : ops_float;
        int nops = dtype == ncclInt32 ? (int)NELEMS(ops_int) : (int)NELEMS(ops_float);
        if (!is_reducing(func_algos[fa].func)) nops = 1;
        for (int o = 0; o < nops; o++) {
          for (size_t ci = 0; ci < NELEMS(counts); ci++) {
            for (int inplace = 0; inplace < 2; inplace++) {
              iter++;
              coll_case_t cc = {.func = func_algos[fa].func,
                                .algo = func_algos[fa].algo,
                                .proto = proto,
                                .dtype = dtype,
                                .op = is_reducing(func_algos[fa].func) ? ops[o] : -1,
                                .count = counts[ci],
                                .root = (int)((iter * 3 + 1) % (unsigned)n),
                                .inplace = inplace,
                                .chunk = chunks[iter % NELEMS(chunks)]};
              run_coll(w, &cc);
            }
          }
        }
      }
    }
  }
  ck_assert_int_eq(w->proxy_wakes, 0); /* no NET connections here */
  world_free(w);
}
END_TEST

/* 1M elements: every func x algo x proto, datatypes and placements taking turns. */
START_TEST(test_coll_large) {
  static const int sizes[] = {3, 8};
  int n = sizes[_i];
  world_t* w = world_new(n, 2);
  static const struct {
    int dtype, op;
  } kinds[] = {{ncclFloat32, DEV_OP_SUM},
               {ncclInt32, DEV_OP_SUMPOSTDIV},
               {ncclFloat16, DEV_OP_MAX},
               {ncclBfloat16, DEV_OP_PREMULSUM}};
  unsigned iter = (unsigned)_i;
  for (size_t fa = 0; fa < NELEMS(func_algos); fa++) {
    for (int proto = 0; proto < PROTO_COUNT; proto++) {
      if (proto == PROTO_LL128) continue;
      iter++;
      size_t k = iter % NELEMS(kinds);
      size_t count = (size_t)1 << 20;
      if (func_algos[fa].func == FUNC_ALLGATHER || func_algos[fa].func == FUNC_REDUCESCATTER)
        count /= (size_t)n; /* per rank: the total stays about 1M */
      coll_case_t cc = {.func = func_algos[fa].func,
                        .algo = func_algos[fa].algo,
                        .proto = proto,
                        .dtype = kinds[k].dtype,
                        .op = is_reducing(func_algos[fa].func) ? kinds[k].op : -1,
                        .count = count,
                        .root = (int)(iter % (unsigned)n),
                        .inplace = (iter / 2) % 2,
                        .chunk = 0};
      run_coll(w, &cc);
    }
  }
  world_free(w);
}
END_TEST

/* ---- Point-to-point ------------------------------------------------------------------------ */
typedef struct p2p_msg {
  int from, to;
  size_t count; /* int32 elements */
  int tag;      /* distinguishes messages between the same pair */
} p2p_msg_t;

/* Posts every rank's sends and receives of msgs in an order chosen by `order` (0: sends first,
 * 1: receives first, 2: alternating by rank, 3: reversed list), splits each over the channels,
 * runs, checks. */
static void run_p2p(world_t* w, const p2p_msg_t* msgs, int nmsg, int proto, int order) {
  int n = w->n;
  static rank_plan_t rps[MAXR];
  int32_t* sbuf[64];
  int32_t* rbuf[64];
  ck_assert_int_le(nmsg, 64);
  for (int m = 0; m < nmsg; m++) {
    sbuf[m] = malloc(msgs[m].count * 4 + GUARD);
    rbuf[m] = malloc(msgs[m].count * 4 + GUARD);
    for (size_t i = 0; i < msgs[m].count; i++)
      sbuf[m][i] =
          (int32_t)(msgs[m].from * 1000003 + msgs[m].to * 7919 + msgs[m].tag * 131 + (int)i);
    memset(rbuf[m], SENTINEL, msgs[m].count * 4 + GUARD);
  }
  for (int r = 0; r < n; r++) {
    plan_reset(&rps[r], w->nch);
    bool recv_first = order == 1 || (order == 2 && r % 2 == 1);
    for (int pass = 0; pass < 2; pass++) {
      bool sends = (pass == 0) != recv_first;
      for (int k = 0; k < nmsg; k++) {
        int m = order == 3 ? nmsg - 1 - k : k;
        if (sends ? msgs[m].from != r : msgs[m].to != r) continue;
        for (int c = 0; c < w->nch; c++) {
          size_t off, cnt;
          slice(msgs[m].count, w->nch, c, &off, &cnt);
          work_t wk = {.func = sends ? FUNC_SEND : FUNC_RECV,
                       .algo = ALGO_RING,
                       .proto = (uint8_t)proto,
                       .dtype = ncclInt32,
                       .sendbuff = sbuf[m],
                       .recvbuff = rbuf[m],
                       .count = msgs[m].count,
                       .chan_off = off,
                       .chan_count = cnt,
                       .chunk = 300,
                       .root = sends ? msgs[m].to : msgs[m].from,
                       .nranks = n};
          plan_add(&rps[r], c, &wk);
        }
      }
    }
  }
  world_run(w, rps);
  for (int m = 0; m < nmsg; m++) {
    for (size_t i = 0; i < msgs[m].count; i++)
      if (rbuf[m][i] != sbuf[m][i])
        ck_abort_msg(
            "message %d (%d -> %d, %zu elements, proto %d, order %d): element %zu is %d, "
            "expected %d",
            m, msgs[m].from, msgs[m].to, msgs[m].count, proto, order, i, rbuf[m][i], sbuf[m][i]);
    ck_assert(mem_is((unsigned char*)rbuf[m] + msgs[m].count * 4, GUARD, SENTINEL));
    free(sbuf[m]);
    free(rbuf[m]);
  }
}

START_TEST(test_p2p_patterns) {
  int n = nranks_list[_i];
  world_t* w = world_new(n, 2);
  static const size_t counts[] = {0, 1, 7, 1000, (size_t)1 << 20};
  p2p_msg_t msgs[64];
  for (int proto = 0; proto < PROTO_COUNT; proto++) {
    if (proto == PROTO_LL128) continue;
    for (int order = 0; order < 4; order++) {
      /* Rings at every distance (distance 0: each rank to itself). */
      for (size_t ci = 0; ci < NELEMS(counts); ci++) {
        if (counts[ci] > 1000 && order > 1) continue;
        for (int d = 0; d < n; d++) {
          if (counts[ci] > 1000 && d > 1) continue;
          for (int r = 0; r < n; r++)
            msgs[r] = (p2p_msg_t){.from = r, .to = (r + d) % n, .count = counts[ci], .tag = d};
          run_p2p(w, msgs, n, proto, order);
        }
      }
      /* All to all, self included, sizes differ per pair. */
      int nm = 0;
      for (int a = 0; a < n; a++)
        for (int b = 0; b < n; b++)
          msgs[nm++] =
              (p2p_msg_t){.from = a, .to = b, .count = (size_t)(a * 97 + b * 31) % 700, .tag = 1};
      run_p2p(w, msgs, nm, proto, order);
      /* Several messages on one connection stay in order. */
      if (n > 1) {
        nm = 0;
        for (int k = 0; k < 3; k++)
          for (int r = 0; r < n; r++)
            msgs[nm++] = (p2p_msg_t){
                .from = r, .to = (r + 1) % n, .count = (size_t)(k == 1 ? 20000 : 33 + k), .tag = k};
        run_p2p(w, msgs, nm, proto, order);
      }
    }
  }
  world_free(w);
}
END_TEST

/* A channel list with several collectives, then a point-to-point segment, then a collective. */
START_TEST(test_plan_mixed) {
  int n = 4;
  world_t* w = world_new(n, 2);
  static rank_plan_t rps[MAXR];
  size_t count = 5000;
  float* ar[MAXR];
  int32_t* bc[MAXR];
  int32_t *ps[MAXR], *pr[MAXR];
  float* ar2[MAXR];
  for (int r = 0; r < n; r++) {
    ar[r] = malloc(count * 4);
    ar2[r] = malloc(count * 4);
    bc[r] = malloc(count * 4);
    ps[r] = malloc(count * 4);
    pr[r] = malloc(count * 4);
    for (size_t i = 0; i < count; i++) {
      ar[r][i] = (float)(r + 1);
      ar2[r][i] = (float)(i % 5);
      bc[r][i] = r == 2 ? (int32_t)i : -1;
      ps[r][i] = r * 100000 + (int)i;
      pr[r][i] = -7;
    }
    plan_reset(&rps[r], 2);
    for (int c = 0; c < 2; c++) {
      size_t off, cnt;
      slice(count, 2, c, &off, &cnt);
      work_t base = {.algo = ALGO_RING,
                     .chan_off = off,
                     .chan_count = cnt,
                     .count = count,
                     .nranks = n,
                     .chunk = 64};
      work_t a = base, b = base, s = base, v = base, t = base;
      a.func = FUNC_ALLREDUCE;
      a.algo = ALGO_TREE;
      a.proto = PROTO_LL;
      a.dtype = ncclFloat32;
      a.sendbuff = a.recvbuff = ar[r];
      b.func = FUNC_BROADCAST;
      b.proto = PROTO_SIMPLE;
      b.dtype = ncclInt32;
      b.root = 2;
      b.sendbuff = b.recvbuff = bc[r];
      s.func = FUNC_SEND;
      s.proto = PROTO_SIMPLE;
      s.dtype = ncclInt32;
      s.root = (r + 1) % n;
      s.sendbuff = ps[r];
      v.func = FUNC_RECV;
      v.proto = PROTO_SIMPLE;
      v.dtype = ncclInt32;
      v.root = (r + n - 1) % n;
      v.recvbuff = pr[r];
      t.func = FUNC_ALLREDUCE;
      t.proto = PROTO_SIMPLE;
      t.dtype = ncclFloat32;
      t.sendbuff = t.recvbuff = ar2[r];
      plan_add(&rps[r], c, &a);
      plan_add(&rps[r], c, &b);
      plan_add(&rps[r], c, r % 2 ? &v : &s);
      plan_add(&rps[r], c, r % 2 ? &s : &v);
      plan_add(&rps[r], c, &t);
    }
  }
  for (int rep = 0; rep < 3; rep++) {
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++) {
        ar[r][i] = (float)(r + 1);
        ar2[r][i] = (float)(i % 5);
      }
    world_run(w, rps);
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++) {
        ck_assert_float_eq(ar[r][i], 10.0f);
        ck_assert_int_eq(bc[r][i], (int32_t)i);
        ck_assert_int_eq(pr[r][i], ((r + n - 1) % n) * 100000 + (int)i);
        ck_assert_float_eq(ar2[r][i], (float)(4 * (i % 5)));
      }
  }
  for (int r = 0; r < n; r++) {
    free(ar[r]);
    free(ar2[r]);
    free(bc[r]);
    free(ps[r]);
    free(pr[r]);
  }
  world_free(w);
}
END_TEST

/* ---- Failures: abort, dead peer, missing connection -------------------------------------- */
static void plan_allreduce(world_t* w, rank_plan_t* rps, float** bufs, size_t count, int proto) {
  for (int r = 0; r < w->n; r++) {
    bufs[r] = calloc(count, 4);
    plan_reset(&rps[r], w->nch);
    for (int c = 0; c < w->nch; c++) {
      size_t off, cnt;
      slice(count, w->nch, c, &off, &cnt);
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
      plan_add(&rps[r], c, &wk);
    }
  }
}

typedef struct abort_arg {
  world_t* w;
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
    world_t* w = world_new(4, 2);
    static rank_plan_t rps[MAXR];
    float* bufs[MAXR];
    launch_arg_t args[MAXR];
    plan_allreduce(w, rps, bufs, 100000, proto);
    abort_arg_t aa = {.w = w};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, abort_later, &aa), 0);
    world_run_args(w, rps, 3, args); /* rank 3 never runs */
    pthread_join(th, NULL);
    for (int r = 0; r < 3; r++) {
      ck_assert_msg(args[r].res != ncclSuccess, "rank %d completed without rank 3", r);
      ck_assert_msg(args[r].end_ns >= aa.set_ns, "rank %d returned before the abort", r);
      ck_assert_msg(args[r].end_ns - aa.set_ns < 1000ull * 1000 * 1000,
                    "rank %d took %.3f s to see the abort", r, (args[r].end_ns - aa.set_ns) / 1e9);
    }
    for (int r = 0; r < 4; r++) free(bufs[r]);
    world_free(w);
  }
}
END_TEST

START_TEST(test_dead_peer) {
  world_t* w = world_new(3, 2);
  static rank_plan_t rps[MAXR];
  float* bufs[MAXR];
  launch_arg_t args[MAXR];
  plan_allreduce(w, rps, bufs, 100000, PROTO_SIMPLE);
  w->dead = 2;
  uint64_t t0 = clock_ns();
  world_run_args(w, rps, 2, args);
  for (int r = 0; r < 2; r++) {
    ck_assert_int_eq(args[r].res, ncclRemoteError);
    ck_assert_msg(args[r].end_ns - t0 < 2000ull * 1000 * 1000, "rank %d took %.3f s", r,
                  (args[r].end_ns - t0) / 1e9);
  }
  ck_assert_int_gt(w->peer_checks, 0);
  for (int r = 0; r < 3; r++) free(bufs[r]);
  world_free(w);
}
END_TEST

START_TEST(test_bad_plans) {
  world_t* w = world_new(2, 1);
  static rank_plan_t rps[MAXR];
  float* bufs[MAXR];
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
  world_run(w, rps);
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < 1000; i++) ck_assert_float_eq(bufs[2 + r][i], 3.0f);
  /* A NET connection wakes the proxy. */
  w->fsend[0][0][1].flags |= CONN_FLAG_NET;
  world_run(w, rps);
  ck_assert_int_ge(w->proxy_wakes, 1);
  for (int r = 0; r < 4; r++) free(bufs[r]);
  world_free(w);
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
  world_t* w = world_new(2, 1);
  static rank_plan_t rp[MAXR];
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
  plan_reset(&rp[1], 1);
  plan_add(&rp[1], 0, &wk);
  launch_arg_t a = {.w = w, .rank = 1, .rp = &rp[1]};
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, launch_main, &a), 0);
  link_t* l = w->links[0][0][1];
  ll_line_t* lines = (ll_line_t*)l->buf[PROTO_LL]; /* slot 0: step 0, flag 1 */
  for (int i = 0; i < 13; i++)
    if (i != 5) ll_write_line(&lines[i], &src[2 * i], 1);
  usleep(100 * 1000);
  ck_assert_msg(__atomic_load_n(&a.end_ns, __ATOMIC_ACQUIRE) == 0,
                "the receive completed with line 5 missing");
  ck_assert_int_eq(__atomic_load_n(&l->head, __ATOMIC_ACQUIRE), 0);
  ll_write_line(&lines[5], &src[10], 1);
  struct timespec dl;
  clock_gettime(CLOCK_REALTIME, &dl);
  dl.tv_sec += 10;
  ck_assert_int_eq(pthread_timedjoin_np(th, NULL, &dl), 0);
  ck_assert_int_eq(a.res, ncclSuccess);
  ck_assert_mem_eq(out, src, sizeof(out));
  ck_assert_int_eq(__atomic_load_n(&l->head, __ATOMIC_ACQUIRE), 1);

  /* Simple, next step (1): the sender claims 50 bytes where the plan says 100. */
  rp[1].works[0][0].proto = PROTO_SIMPLE;
  memcpy(l->buf[PROTO_SIMPLE] + SIMPLE_FIFO / NCCL_STEPS, src, 100);
  l->sizes[1] = 50;
  __atomic_store_n(&l->tail, 2, __ATOMIC_RELEASE);
  ck_assert_int_eq(executor_host_ops.launch(w->state[1], &rp[1].plan, NULL), ncclInternalError);
  world_free(w);
}
END_TEST

static Suite* host_exec_suite(void) {
  Suite* s = suite_create("host_exec");
  TCase* tc = tcase_create("collectives");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, test_coll_matrix, 0, (int)NELEMS(nranks_list));
  tcase_add_loop_test(tc, test_coll_large, 0, 2);
  tcase_add_test(tc, test_plan_mixed);
  suite_add_tcase(s, tc);
  TCase* tp = tcase_create("p2p");
  tcase_set_timeout(tp, 120);
  tcase_add_loop_test(tp, test_p2p_patterns, 0, (int)NELEMS(nranks_list));
  suite_add_tcase(s, tp);
  TCase* tf = tcase_create("failures");
  tcase_set_timeout(tf, 60);
  tcase_add_test(tf, test_abort);
  tcase_add_test(tf, test_dead_peer);
  tcase_add_test(tf, test_bad_plans);
  tcase_add_test(tf, test_fifo_reader);
  suite_add_tcase(s, tf);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(host_exec_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
