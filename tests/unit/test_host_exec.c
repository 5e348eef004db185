/* Host executor, every kind of work: N fake ranks (tests/common/host_world.h) run every collective
 * x algorithm x protocol x datatype x operation, point-to-point patterns in every posting order,
 * and plans that mix collectives with point-to-point. Expected values are computed here, in
 * double, from the inputs. Failure paths are in test_host_exec_faults.c. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "base/base.h"
#include "device/device.h"
#include "host_world.h"
#include "itest.h"
#include "unit.h"

#define GUARD 64
#define SENTINEL 0xA5

static const int nranks_list[] = {1, 2, 3, 4, 8};

/* ---- Values: small integers, exact in every tested type -------------------------------------- */
/* Element i of a buffer, through the tests' own conversions (itest.h), not the library's. */
static void val_store(int dtype, void* base, size_t i, double v) {
  const ncclDataType_t t = (ncclDataType_t)dtype;
  itest_encode(t, v, (char*)base + i * itest_type_size(t));
}
static double val_load(int dtype, const void* base, size_t i) {
  const ncclDataType_t t = (ncclDataType_t)dtype;
  return itest_decode(t, (const char*)base + i * itest_type_size(t));
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
  if (kind == DEV_OP_PREMULSUM) { /* the scalar's bits, in the type's width */
    char bits[8];
    val_store(dtype, bits, 0, dtype == ncclInt32 ? PREMUL_INT : PREMUL_FLOAT);
    memcpy(&op.scalar, bits, itest_type_size((ncclDataType_t)dtype));
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

static void run_coll(hw_world_t* w, const coll_case_t* cc) {
  int n = w->n;
  size_t es = datatype_size((ncclDataType_t)cc->dtype);
  size_t count = cc->count;
  size_t send_elems = cc->func == FUNC_REDUCESCATTER ? count * n : count;
  size_t recv_elems = cc->func == FUNC_ALLGATHER ? count * n : count;
  size_t alloc_elems = send_elems > recv_elems ? send_elems : recv_elems;
  unsigned char* mem[HW_MAX_RANKS][2];
  char *sendbuff[HW_MAX_RANKS], *recvbuff[HW_MAX_RANKS];
  static hw_plan_t rps[HW_MAX_RANKS];
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
    hw_plan_reset(&rps[r], w->nch);
    for (int c = 0; c < w->nch; c++) {
      size_t off, cnt;
      hw_slice(count, w->nch, c, &off, &cnt);
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
      hw_plan_add(&rps[r], c, &wk);
    }
  }
  hw_world_run(w, rps);

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
  hw_world_t* w = hw_world_new(n, 3);
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
  hw_world_free(w);
}
END_TEST

/* 1M elements: every func x algo x proto, datatypes and placements taking turns. */
START_TEST(test_coll_large) {
  static const int sizes[] = {3, 8};
  int n = sizes[_i];
  hw_world_t* w = hw_world_new(n, 2);
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
  hw_world_free(w);
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
static void run_p2p(hw_world_t* w, const p2p_msg_t* msgs, int nmsg, int proto, int order) {
  int n = w->n;
  static hw_plan_t rps[HW_MAX_RANKS];
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
    hw_plan_reset(&rps[r], w->nch);
    bool recv_first = order == 1 || (order == 2 && r % 2 == 1);
    for (int pass = 0; pass < 2; pass++) {
      bool sends = (pass == 0) != recv_first;
      for (int k = 0; k < nmsg; k++) {
        int m = order == 3 ? nmsg - 1 - k : k;
        if (sends ? msgs[m].from != r : msgs[m].to != r) continue;
        for (int c = 0; c < w->nch; c++) {
          size_t off, cnt;
          hw_slice(msgs[m].count, w->nch, c, &off, &cnt);
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
          hw_plan_add(&rps[r], c, &wk);
        }
      }
    }
  }
  hw_world_run(w, rps);
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
  hw_world_t* w = hw_world_new(n, 2);
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
  hw_world_free(w);
}
END_TEST

/* A channel list with several collectives, then a point-to-point segment, then a collective. */
START_TEST(test_plan_mixed) {
  int n = 4;
  hw_world_t* w = hw_world_new(n, 2);
  static hw_plan_t rps[HW_MAX_RANKS];
  size_t count = 5000;
  float* ar[HW_MAX_RANKS];
  int32_t* bc[HW_MAX_RANKS];
  int32_t *ps[HW_MAX_RANKS], *pr[HW_MAX_RANKS];
  float* ar2[HW_MAX_RANKS];
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
    hw_plan_reset(&rps[r], 2);
    for (int c = 0; c < 2; c++) {
      size_t off, cnt;
      hw_slice(count, 2, c, &off, &cnt);
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
      hw_plan_add(&rps[r], c, &a);
      hw_plan_add(&rps[r], c, &b);
      hw_plan_add(&rps[r], c, r % 2 ? &v : &s);
      hw_plan_add(&rps[r], c, r % 2 ? &s : &v);
      hw_plan_add(&rps[r], c, &t);
    }
  }
  for (int rep = 0; rep < 3; rep++) {
    for (int r = 0; r < n; r++)
      for (size_t i = 0; i < count; i++) {
        ar[r][i] = (float)(r + 1);
        ar2[r][i] = (float)(i % 5);
      }
    hw_world_run(w, rps);
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
  hw_world_free(w);
}

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
  return s;
}

int main(void) {
  return unit_run_suite(host_exec_suite());
}
