/* The tuning model (src/topo/tuning.c) and the NCCL_ALGO / NCCL_PROTO filters
 * (src/topo/algo_filter.c). The model offers a time exactly for what the vocabulary's capability
 * table (vocab_supports) says exists. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <stdlib.h>

#include "device/device.h"
#include "topo/topo.h"
#include "unit.h"

static const int coll_funcs[] = {FUNC_BROADCAST, FUNC_REDUCE, FUNC_ALLGATHER, FUNC_REDUCESCATTER,
                                 FUNC_ALLREDUCE};
#define NFUNCS ((int)(sizeof(coll_funcs) / sizeof(coll_funcs[0])))

static topo_tuning_t one_host(int nranks, bool gpu) {
  return (topo_tuning_t){.nranks = nranks,
                         .nhosts = 1,
                         .nchannels = 4,
                         .intra_bw_gbs = 20.0,
                         .inter_bw_gbs = 12.0,
                         .intra_lat_us = 0.6,
                         .inter_lat_us = 5.0,
                         .gpu = gpu};
}

/* What exists is the vocabulary's table (tested by itself in test_vocab): LL128 on GPUs here, the
 * staged direct algorithms where the model has staging. */
static bool supported(int func, int algo, int proto, bool gpu, const topo_tuning_t* t) {
  const vocab_caps_t caps = {.ll128 = gpu,
                             .direct = true,
                             .staged = t->stage_half > 0,
                             .nranks = t->nranks,
                             .nhosts = t->nhosts};
  return vocab_supports(func, algo, proto, &caps);
}

/* A Simple operation on one host moves at the GPU's NVLink rate (stage_read_gbs) once its
 * channels can carry it at 12 GB/s each, and never slower than its channels' share of it: the
 * model's time with the NVLink rate known against the same without it (the linear share). */
START_TEST(test_simple_channels_saturate) {
  const size_t bytes = (size_t)16 << 20;
  topo_tuning_t t = one_host(4, true);
  t.nchannels = 48; /* of a communicator's 62: 6 GB/s each */
  t.intra_bw_gbs = 372.0 / 62;
  topo_tuning_t lin = t;
  t.stage_read_gbs = 372.0;
  /* 48 channels: the whole link, where the linear share gave 48/62 of it */
  const double sat = topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, bytes);
  const double share = topo_model_time_us(&lin, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, bytes);
  ck_assert(sat > 0 && share > sat);
  t.nchannels = lin.nchannels = 62; /* every channel: the same either way */
  ck_assert_double_eq_tol(topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, bytes),
                          topo_model_time_us(&lin, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, bytes),
                          1e-9);
  /* a communicator of 16 channels at 23 GB/s each: 12 GB/s a channel is below its share, which
   * stands */
  t.nchannels = lin.nchannels = 16;
  t.intra_bw_gbs = lin.intra_bw_gbs = 23.0;
  ck_assert_double_eq_tol(topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, bytes),
                          topo_model_time_us(&lin, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, bytes),
                          1e-9);
  /* LL is not Simple: its share stands at 48 channels too */
  t.nchannels = lin.nchannels = 48;
  t.intra_bw_gbs = lin.intra_bw_gbs = 372.0 / 62;
  ck_assert_double_eq_tol(topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_LL, bytes),
                          topo_model_time_us(&lin, FUNC_ALLREDUCE, ALGO_RING, PROTO_LL, bytes),
                          1e-9);
}
END_TEST

START_TEST(test_monotonic_in_bytes) {
  const int sizes[] = {1, 2, 3, 8, 64, 1024};
  for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
    for (int gpu = 0; gpu < 2; gpu++) {
      topo_tuning_t t = one_host(sizes[si], gpu);
      if (sizes[si] >= 64) t.nhosts = sizes[si] / 8;
      for (int f = 0; f < NFUNCS; f++)
        for (int a = 0; a < ALGO_COUNT; a++)
          for (int p = 0; p < PROTO_COUNT; p++) {
            if (!supported(coll_funcs[f], a, p, gpu, &t)) {
              ck_assert_msg(topo_model_time_us(&t, coll_funcs[f], a, p, 8) < 0,
                            "n=%d func %d algo %d proto %d: modelled, but not supported", sizes[si],
                            coll_funcs[f], a, p);
              continue;
            }
            double prev = topo_model_time_us(&t, coll_funcs[f], a, p, 0);
            ck_assert_msg(prev > 0, "n=%d func %d algo %d proto %d: %g at 0 bytes", sizes[si],
                          coll_funcs[f], a, p, prev);
            for (size_t bytes = 1; bytes <= ((size_t)1 << 34); bytes *= 4) {
              const double cur = topo_model_time_us(&t, coll_funcs[f], a, p, bytes);
              ck_assert_msg(cur >= prev, "n=%d func %d algo %d proto %d: %g us at %zu < %g",
                            sizes[si], coll_funcs[f], a, p, cur, bytes, prev);
              /* data dominates at large sizes for n > 1: time keeps growing */
              if (sizes[si] > 1 && bytes >= ((size_t)1 << 24))
                ck_assert_msg(cur > prev, "n=%d: flat at %zu bytes", sizes[si], bytes);
              prev = cur;
            }
          }
    }
  }
}
END_TEST

static int best_proto(const topo_tuning_t* t, int func, int algo, size_t bytes) {
  int best = -1;
  double best_t = 0;
  for (int p = 0; p < PROTO_COUNT; p++) {
    const double us = topo_model_time_us(t, func, algo, p, bytes);
    if (us >= 0 && (best < 0 || us < best_t)) {
      best = p;
      best_t = us;
    }
  }
  return best;
}

START_TEST(test_small_ll_large_simple) {
  for (int gpu = 0; gpu < 2; gpu++) {
    for (int n = 2; n <= 64; n *= 2) {
      for (int nhosts = 1; nhosts <= 2; nhosts++) {
        topo_tuning_t t = one_host(n, gpu);
        t.nhosts = nhosts;
        for (int f = 0; f < NFUNCS; f++) {
          ck_assert_msg(best_proto(&t, coll_funcs[f], ALGO_RING, 256) == PROTO_LL,
                        "n=%d gpu=%d func %d: LL not best at 256 B", n, gpu, coll_funcs[f]);
          ck_assert_msg(best_proto(&t, coll_funcs[f], ALGO_RING, (size_t)1 << 30) == PROTO_SIMPLE,
                        "n=%d gpu=%d func %d: Simple not best at 1 GiB", n, gpu, coll_funcs[f]);
        }
        ck_assert_int_eq(best_proto(&t, FUNC_ALLREDUCE, ALGO_TREE, 256), PROTO_LL);
        ck_assert_int_eq(best_proto(&t, FUNC_ALLREDUCE, ALGO_TREE, (size_t)1 << 30), PROTO_SIMPLE);
      }
    }
  }
  /* protocol ordering by themselves: LL lowest latency, Simple highest, LL128 in between; Simple
   * has the most bandwidth */
  const topo_tuning_t t = one_host(8, true);
  const double ll0 = topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_LL, 0);
  const double l128_0 = topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_LL128, 0);
  const double simple0 = topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, 0);
  ck_assert(ll0 < l128_0 && l128_0 < simple0);
  const size_t big = (size_t)1 << 34;
  const double ll = topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_LL, big) - ll0;
  const double l128 = topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_LL128, big) - l128_0;
  const double simple =
      topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, big) - simple0;
  /* measured shares of a channel for combining steps (tuning.c, run 125 on 4 and 2 H100s): Simple
   * 0.925, LL 0.312, LL128 0.247 */
  ck_assert_msg(ll / simple > 2.8 && ll / simple < 3.2, "LL/Simple data time %g", ll / simple);
  ck_assert_msg(simple / l128 > 0.24 && simple / l128 < 0.30, "Simple/LL128 %g", simple / l128);
}
END_TEST

/* The direct algorithms: one hop (TwoShot two) beats the ring's 2(n-1) for a small AllReduce on
 * one host; their traffic ((n-1) x the buffer for OneShot) loses to the ring at large sizes. */
START_TEST(test_direct) {
  for (int n = 2; n <= 8; n++) {
    topo_tuning_t t = one_host(n, true);
    const double ring = topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_LL, 8);
    const double one = topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_ONESHOT, PROTO_LL, 8);
    const double two = topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_TWOSHOT, PROTO_LL, 8);
    ck_assert_msg(one > 0 && one < ring && one < two, "n=%d: one %g two %g ring %g", n, one, two,
                  ring);
    const size_t big = (size_t)1 << 30;
    ck_assert(topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, big) <
              topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_ONESHOT, PROTO_LL, big));
    if (n > 2)
      ck_assert(topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_TWOSHOT, PROTO_LL, big) <
                topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_ONESHOT, PROTO_LL, big));
    ck_assert(topo_model_time_us(&t, FUNC_REDUCE, ALGO_ONESHOT, PROTO_LL, 8) < 0);
    ck_assert(topo_model_time_us(&t, FUNC_ALLGATHER, ALGO_TWOSHOT, PROTO_LL, 8) < 0);
    ck_assert(topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_ONESHOT, PROTO_SIMPLE, 8) < 0);
  }
}
END_TEST

/* The staged direct algorithms (PROTO_SIMPLE with OneShot/TwoShot): offered only with staging on
 * one host, for every function OneShot can run (Reduce too) and TwoShot AllReduce; their time
 * grows with the size, a round more costs more, and at large sizes TwoShot (every rank reads
 * 2(n-1)/n of the data) beats OneShot (n-1 times the data). */
START_TEST(test_staged) {
  topo_tuning_t t = one_host(4, true);
  for (int f = 0; f < NFUNCS; f++) /* no staging: never */
    ck_assert(topo_model_time_us(&t, coll_funcs[f], ALGO_ONESHOT, PROTO_SIMPLE, 1024) < 0);
  t.stage_half = (size_t)8 << 20;
  t.stage_read_gbs = 300.0;
  for (int f = 0; f < NFUNCS; f++) {
    double prev = topo_model_time_us(&t, coll_funcs[f], ALGO_ONESHOT, PROTO_SIMPLE, 0);
    ck_assert_msg(prev > 0, "func %d: %g", coll_funcs[f], prev);
    for (size_t bytes = 16; bytes <= ((size_t)1 << 30); bytes *= 4) {
      double cur = topo_model_time_us(&t, coll_funcs[f], ALGO_ONESHOT, PROTO_SIMPLE, bytes);
      ck_assert_msg(cur >= prev, "func %d: %g us at %zu < %g", coll_funcs[f], cur, bytes, prev);
      prev = cur;
    }
    const double two = topo_model_time_us(&t, coll_funcs[f], ALGO_TWOSHOT, PROTO_SIMPLE, 1024);
    ck_assert(coll_funcs[f] == FUNC_ALLREDUCE ? two > 0 : two < 0);
  }
  const size_t big = (size_t)64 << 20;
  ck_assert(topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_TWOSHOT, PROTO_SIMPLE, big) <
            topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_ONESHOT, PROTO_SIMPLE, big));
  /* one byte past a half is a second round: its barrier costs more than the byte */
  const double one =
      topo_model_time_us(&t, FUNC_BROADCAST, ALGO_ONESHOT, PROTO_SIMPLE, t.stage_half);
  const double two =
      topo_model_time_us(&t, FUNC_BROADCAST, ALGO_ONESHOT, PROTO_SIMPLE, t.stage_half + 16);
  ck_assert_msg(two > one + 0.5, "%g vs %g", two, one);
  t.nhosts = 2; /* staging is mapped from peers of one host only */
  ck_assert(topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_TWOSHOT, PROTO_SIMPLE, 1024) < 0);
}
END_TEST

START_TEST(test_tree_vs_ring) {
  for (int gpu = 0; gpu < 2; gpu++) {
    for (int p = 0; p < PROTO_COUNT; p++) {
      /* many ranks over many hosts, small message: tree's log2(n) hops win */
      topo_tuning_t t = one_host(128, gpu);
      if (!supported(FUNC_ALLREDUCE, ALGO_RING, p, gpu, &t)) continue;
      t.nhosts = 16;
      ck_assert(topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_TREE, p, 4096) <
                topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, p, 4096));
      t = one_host(32, gpu);
      ck_assert(topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_TREE, p, 1024) <
                topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, p, 1024));
      /* huge message on few ranks: ring's bandwidth wins */
      t = one_host(4, gpu);
      ck_assert(topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_RING, p, (size_t)1 << 32) <
                topo_model_time_us(&t, FUNC_ALLREDUCE, ALGO_TREE, p, (size_t)1 << 32));
    }
  }
}
END_TEST

/* Latency grows with hops: more ranks cost more for the ring, inter-host hops more than intra. */
START_TEST(test_scaling) {
  topo_tuning_t a = one_host(8, true), b = one_host(16, true);
  ck_assert(topo_model_time_us(&a, FUNC_ALLREDUCE, ALGO_RING, PROTO_LL, 8) <
            topo_model_time_us(&b, FUNC_ALLREDUCE, ALGO_RING, PROTO_LL, 8));
  b = a;
  b.nhosts = 2;
  ck_assert(topo_model_time_us(&a, FUNC_ALLGATHER, ALGO_RING, PROTO_SIMPLE, 1 << 20) <
            topo_model_time_us(&b, FUNC_ALLGATHER, ALGO_RING, PROTO_SIMPLE, 1 << 20));
  /* the same bandwidth but slower inter-host hops: small messages take longer on two hosts,
   * and longer still on four (more of the ring's hops cross hosts) */
  b = a;
  b.nhosts = 2;
  b.inter_bw_gbs = a.intra_bw_gbs;
  topo_tuning_t c = b;
  c.nhosts = 4;
  for (int algo = 0; algo < ALGO_COUNT; algo++) {
    if (algo == ALGO_ONESHOT || algo == ALGO_TWOSHOT) { /* one host only */
      ck_assert(topo_model_time_us(&a, FUNC_ALLREDUCE, algo, PROTO_LL, 8) > 0);
      ck_assert(topo_model_time_us(&b, FUNC_ALLREDUCE, algo, PROTO_LL, 8) < 0);
      continue;
    }
    const double t1 = topo_model_time_us(&a, FUNC_ALLREDUCE, algo, PROTO_LL, 8);
    const double t2 = topo_model_time_us(&b, FUNC_ALLREDUCE, algo, PROTO_LL, 8);
    const double t4 = topo_model_time_us(&c, FUNC_ALLREDUCE, algo, PROTO_LL, 8);
    ck_assert_msg(t1 < t2 && t2 < t4, "algo %d: %g %g %g", algo, t1, t2, t4);
  }
  /* more channels: more bandwidth */
  b = a;
  b.nchannels = 16;
  ck_assert(topo_model_time_us(&b, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, 1 << 28) <
            topo_model_time_us(&a, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, 1 << 28));
  /* ring AllReduce moves about twice AllGather's data over each link */
  const size_t big = (size_t)1 << 34;
  const double ar = topo_model_time_us(&a, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, big);
  const double ag = topo_model_time_us(&a, FUNC_ALLGATHER, ALGO_RING, PROTO_SIMPLE, big);
  ck_assert_msg(ar / ag > 1.9 && ar / ag < 2.1, "allreduce/allgather %g", ar / ag);
}
END_TEST

START_TEST(test_unsupported) {
  const topo_tuning_t cpu = one_host(8, false), gpu = one_host(8, true);
  for (int f = 0; f < NFUNCS; f++) {
    for (int p = 0; p < PROTO_COUNT; p++) {
      const double tree = topo_model_time_us(&gpu, coll_funcs[f], ALGO_TREE, p, 1024);
      if (coll_funcs[f] == FUNC_ALLREDUCE)
        ck_assert(tree > 0);
      else
        ck_assert_msg(tree < 0, "tree offered for func %d", coll_funcs[f]);
    }
    ck_assert(topo_model_time_us(&cpu, coll_funcs[f], ALGO_RING, PROTO_LL128, 1024) < 0);
    ck_assert(topo_model_time_us(&gpu, coll_funcs[f], ALGO_RING, PROTO_LL128, 1024) > 0);
    ck_assert(topo_model_time_us(&cpu, coll_funcs[f], ALGO_RING, PROTO_SIMPLE, 1024) > 0);
  }
  ck_assert(topo_model_time_us(&gpu, FUNC_SEND, ALGO_RING, PROTO_SIMPLE, 1024) < 0);
  ck_assert(topo_model_time_us(&gpu, FUNC_ALLREDUCE, ALGO_COUNT, PROTO_SIMPLE, 1024) < 0);
  ck_assert(topo_model_time_us(&gpu, FUNC_ALLREDUCE, ALGO_RING, PROTO_COUNT, 1024) < 0);
  ck_assert(topo_model_time_us(NULL, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, 1024) < 0);
  topo_tuning_t nobw = gpu;
  nobw.intra_bw_gbs = 0;
  ck_assert(topo_model_time_us(&nobw, FUNC_ALLREDUCE, ALGO_RING, PROTO_SIMPLE, 1024) < 0);
}
END_TEST

/* ---- NCCL_ALGO / NCCL_PROTO filters -------------------------------------------------------- */
/* allowed[] for one function as a bit mask (bit i = names[i]); -1 on error. */
static int algo_mask(const char* spec, const char* func) {
  bool allowed[TOPO_ALGO_NAMES_COUNT];
  memset(allowed, 0x5a, sizeof(allowed)); /* neither true nor false: must be overwritten */
  if (topo_parse_filter(spec, "NCCL_ALGO", topo_algo_names, TOPO_ALGO_NAMES_COUNT, func, allowed) !=
      ncclSuccess)
    return -1;
  int mask = 0;
  for (int i = 0; i < TOPO_ALGO_NAMES_COUNT; i++) {
    unsigned char raw;
    memcpy(&raw, &allowed[i], 1);
    ck_assert_msg(raw <= 1, "allowed[%d] not written", i);
    mask |= allowed[i] ? 1 << i : 0;
  }
  return mask;
}

static int proto_mask(const char* spec, const char* func) {
  bool allowed[TOPO_PROTO_NAMES_COUNT];
  if (topo_parse_filter(spec, "NCCL_PROTO", topo_proto_names, TOPO_PROTO_NAMES_COUNT, func,
                        allowed) != ncclSuccess)
    return -1;
  int mask = 0;
  for (int i = 0; i < TOPO_PROTO_NAMES_COUNT; i++) mask |= allowed[i] ? 1 << i : 0;
  return mask;
}

#define TREE (1 << ALGO_TREE)
#define RING (1 << ALGO_RING)
#define ALL_ALGOS ((1 << TOPO_ALGO_NAMES_COUNT) - 1)
#define DIRECT ((1 << TOPO_ALGO_ONESHOT) | (1 << TOPO_ALGO_TWOSHOT))
#define LL (1 << PROTO_LL)
#define LL128 (1 << PROTO_LL128)
#define SIMPLE (1 << PROTO_SIMPLE)

START_TEST(test_filter_names_match_enums) {
  ck_assert_str_eq(topo_algo_names[ALGO_TREE], "Tree");
  ck_assert_str_eq(topo_algo_names[ALGO_RING], "Ring");
  ck_assert_str_eq(topo_proto_names[PROTO_LL], "LL");
  ck_assert_str_eq(topo_proto_names[PROTO_LL128], "LL128");
  ck_assert_str_eq(topo_proto_names[PROTO_SIMPLE], "Simple");
  ck_assert_str_eq(topo_func_names[FUNC_BROADCAST], "Broadcast");
  ck_assert_str_eq(topo_func_names[FUNC_ALLREDUCE], "AllReduce");
  ck_assert_str_eq(topo_func_names[FUNC_REDUCESCATTER], "ReduceScatter");
}
END_TEST

START_TEST(test_filter_lists) {
  ck_assert_int_eq(algo_mask(NULL, "AllReduce"), ALL_ALGOS);
  ck_assert_int_eq(algo_mask("", "AllReduce"), ALL_ALGOS);
  ck_assert_int_eq(algo_mask("ring", "AllReduce"), RING);
  ck_assert_int_eq(algo_mask("Ring,TREE", "Broadcast"), RING | TREE);
  ck_assert_int_eq(algo_mask(" tree , ring ", "Reduce"), RING | TREE);
  ck_assert_int_eq(algo_mask("^tree", "AllReduce"), ALL_ALGOS & ~TREE);
  ck_assert_int_eq(algo_mask("^ring,tree", "AllGather"), ALL_ALGOS & ~(TREE | RING));
  ck_assert_int_eq(algo_mask("^", "AllGather"), ALL_ALGOS);
  /* names Baton does not implement are accepted (and simply never available) */
  ck_assert_int_eq(algo_mask("nvls,collnetdirect,CollNetChain,NVLSTree,pat", "AllReduce"),
                   ALL_ALGOS & ~(TREE | RING | DIRECT));
  /* Baton's own names */
  ck_assert_int_eq(algo_mask("OneShot,twoshot", "AllReduce"), DIRECT);
  ck_assert_int_eq(algo_mask("^oneshot", "AllGather"), ALL_ALGOS & ~(1 << TOPO_ALGO_ONESHOT));
  ck_assert_int_eq(proto_mask("LL", "AllReduce"), LL);
  ck_assert_int_eq(proto_mask("ll128,simple", "AllReduce"), LL128 | SIMPLE);
  ck_assert_int_eq(proto_mask("^LL128", "ReduceScatter"), LL | SIMPLE);
  ck_assert_int_eq(proto_mask("simple,", "Reduce"), SIMPLE);
}
END_TEST

START_TEST(test_filter_per_function) {
  /* stock's examples */
  const char* a = "ring,collnetdirect;allreduce:tree,collnetdirect;broadcast:ring";
  ck_assert_int_eq(algo_mask(a, "AllReduce"), TREE | (1 << 2));
  ck_assert_int_eq(algo_mask(a, "Broadcast"), RING);
  ck_assert_int_eq(algo_mask(a, "Reduce"), RING | (1 << 2));
  ck_assert_int_eq(algo_mask(a, NULL), RING | (1 << 2));
  const char* p = "LL,Simple;allreduce:^LL";
  ck_assert_int_eq(proto_mask(p, "AllReduce"), LL128 | SIMPLE);
  ck_assert_int_eq(proto_mask(p, "AllGather"), LL | SIMPLE);
  const char* q = "^LL128;allreduce:LL128";
  ck_assert_int_eq(proto_mask(q, "AllReduce"), LL128);
  ck_assert_int_eq(proto_mask(q, "Broadcast"), LL | SIMPLE);
  /* no general entry: functions not named keep everything */
  const char* r = "allreduce:tree;broadcast:ring";
  ck_assert_int_eq(algo_mask(r, "allreduce"), TREE);
  ck_assert_int_eq(algo_mask(r, "BROADCAST"), RING);
  ck_assert_int_eq(algo_mask(r, "ReduceScatter"), ALL_ALGOS);
  ck_assert_int_eq(algo_mask(r, NULL), ALL_ALGOS);
  /* a later entry for the same function wins; empty entries are skipped */
  ck_assert_int_eq(algo_mask("allgather:tree;;allgather:ring;", "AllGather"), RING);
}
END_TEST

START_TEST(test_filter_errors) {
  static const char* const bad[] = {
      "rings",               /* unknown name */
      "ring;tree",           /* only the first entry may leave out the function */
      "allreduce:tree;ring", /* same */
      "allreduce:bogus",     /* unknown name after a function */
      "allreduc:tree",       /* unknown function */
      "sendrecv:ring",       /* not a collective stock filters */
      "allreduce:",          /* empty list */
      "allreduce:tree:ring", /* two colons */
      "ring,^tree",          /* '^' only at the start of a list */
  };
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    bool allowed[TOPO_ALGO_NAMES_COUNT];
    memset(allowed, 0x5a, sizeof(allowed));
    log_clear_last_error();
    /* the whole spec is checked, whichever function is asked about */
    ck_assert_msg(topo_parse_filter(bad[i], "NCCL_ALGO", topo_algo_names, TOPO_ALGO_NAMES_COUNT,
                                    "Broadcast", allowed) == ncclInvalidUsage,
                  "\"%s\" accepted", bad[i]);
    unsigned char raw;
    memcpy(&raw, &allowed[0], 1);
    ck_assert_msg(raw == 0x5a, "\"%s\": output written on failure", bad[i]);
    const char* err = log_last_error();
    ck_assert_msg(strstr(err, "NCCL_ALGO") != NULL, "\"%s\": WARN \"%s\" lacks the variable",
                  bad[i], err);
  }
  log_clear_last_error();
  ck_assert_int_eq(algo_mask("ring,bogus", "AllReduce"), -1);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "\"bogus\""));
  log_clear_last_error();
  ck_assert_int_eq(algo_mask("allreduc:tree", "AllReduce"), -1);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "\"allreduc\""));
  log_clear_last_error();
  ck_assert_int_eq(proto_mask("LL129", "AllReduce"), -1);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_PROTO"));
  ck_assert_ptr_nonnull(strstr(log_last_error(), "\"LL129\""));
}
END_TEST

static Suite* tuning_suite(void) {
  Suite* s = suite_create("tuning");
  TCase* model = tcase_create("model");
  tcase_add_test(model, test_monotonic_in_bytes);
  tcase_add_test(model, test_simple_channels_saturate);
  tcase_add_test(model, test_small_ll_large_simple);
  tcase_add_test(model, test_tree_vs_ring);
  tcase_add_test(model, test_direct);
  tcase_add_test(model, test_staged);
  tcase_add_test(model, test_scaling);
  tcase_add_test(model, test_unsupported);
  suite_add_tcase(s, model);
  TCase* filter = tcase_create("filter");
  tcase_add_test(filter, test_filter_names_match_enums);
  tcase_add_test(filter, test_filter_lists);
  tcase_add_test(filter, test_filter_per_function);
  tcase_add_test(filter, test_filter_errors);
  suite_add_tcase(s, filter);
  return s;
}

int main(void) {
  return unit_run_suite(tuning_suite());
}
