/* The tuning model: estimated time of one collective for each algorithm x protocol, so the planner
 * can pick the fastest. A pure function of topo_tuning_t; no I/O.
 *
 *   time = base[proto] + (intra_hops * intra_lat + inter_hops * inter_lat) * hop_factor[proto]
 *          + link_bytes / (link_bw * nchannels * proto_bw[proto])
 *
 * link_bw is the per-channel bandwidth of the slowest link the algorithm uses: inter_bw when the
 * ranks span hosts, else intra_bw. Hops are the sequential link traversals on the critical path.
 * Per algorithm, with n ranks on h hosts (ranks of a host contiguous) and `bytes` the size of the
 * larger user buffer (AllGather: the output, ReduceScatter: the input, others: the buffer):
 *   ring AllReduce        2(n-1) hops, each link carries 2(n-1)/n * bytes (reduce-scatter then
 *                         all-gather)
 *   ring AllGather,
 *   ring ReduceScatter    n-1 hops, (n-1)/n * bytes per link
 *   ring Broadcast/Reduce n-1 hops (a pipelined chain), bytes per link; Simple on one host of
 *                         more than 2 GPUs: its own base and share of the GPU's NVLink bandwidth
 *                         (chain_base_us, chain_bw below)
 *   (h of a ring's n links cross hosts, so h/n of its hops are inter-host)
 *   tree AllReduce        ceil(log2 n) hops up to the root and as many back down, of which
 *                         ceil(log2 h) each way cross hosts (the top levels); the whole buffer
 *                         goes once up and once down each rank's links: 2 * bytes, divided by
 *                         tree_bw_efficiency (forwarding to two children costs a little)
 *   OneShot (LL, one host) one hop; each rank sends its whole buffer to every other rank
 *                         (AllReduce, Broadcast's root: (n-1) * bytes) or its n-th to each
 *                         ((n-1)/n * bytes: AllGather, ReduceScatter); no Reduce
 *   TwoShot (LL, AllReduce) two hops, 2(n-1)/n * bytes (reduce-scatter then all-gather)
 *   Both are a kernel's single pass with no forwarding, so their base cost is direct_base_us,
 *                         and each pass waits on the other ranks' flags (Broadcast's: the root's)
 * Tree is only modelled for AllReduce; LL128 only on GPUs (it relies on 128-byte stores being
 * seen whole, an NVLink property); Send/Recv are not modelled. Those return a negative time, as
 * do a missing or non-positive bandwidth and nranks < 1. */
#include "topo/topo.h"

/* The constants below are fitted to the CUDA executor on 4x H100 (docs/gpu-results.md, run 66:
 * all_reduce in graph replay with each protocol forced, 128 KiB-32 MiB; run 74: the staged
 * algorithms): root-mean-square error 6-9% per protocol, 3-5% for the LL direct algorithms and
 * 9% for the staged ones. The earlier fit (2x H200, run 6) was 2x off on 4 GPUs at 256 KiB-4 MiB.
 * Fixed cost of one operation per protocol (launch, setup, final synchronisation), microseconds:
 * a Simple ring on 48 channels pays ~30 us before its bytes count (a system fence a step). */
static const double proto_base_us[PROTO_COUNT] = {
    [PROTO_LL] = 20.0,
    [PROTO_LL128] = 22.0,
    [PROTO_SIMPLE] = 30.0,
};
/* Multiplier on the link's per-hop latency (on one host the fit cannot tell it from the base; LL
 * is kept the lowest, as it is between hosts: data and flag arrive in one store). */
static const double proto_hop_factor[PROTO_COUNT] = {
    [PROTO_LL] = 1.5,
    [PROTO_LL128] = 2.0,
    [PROTO_SIMPLE] = 2.0,
};
/* Share of the per-channel bandwidth the protocol achieves (LL: 8 data bytes a 16-byte line). */
static const double proto_bw[PROTO_COUNT] = {
    [PROTO_LL] = 0.30,
    [PROTO_LL128] = 0.30,
    [PROTO_SIMPLE] = 0.90,
};
static const double tree_bw_efficiency = 0.9;
/* A Simple chain (Broadcast, Reduce) of more than 2 GPUs on one host, a slot a step (plan.c):
 * its fixed cost beside the hops' latency, and the share of a GPU's NVLink bandwidth
 * (stage_read_gbs) it moves. Fitted on 4 H100s, 256 KiB-32 MiB in graph replay (within 10 %):
 * Broadcast 13.3-116.5 us, Reduce 14.3-124.0; the all-reduce ring's constants priced these
 * chains 2x too dear below 4 MiB, so the staged algorithms were chosen where the chain wins. */
static const double chain_base_us[FUNC_COUNT] = {[FUNC_BROADCAST] = 8.4, [FUNC_REDUCE] = 10.5};
static const double chain_bw[FUNC_COUNT] = {[FUNC_BROADCAST] = 0.87, [FUNC_REDUCE] = 0.82};
/* Fixed cost of a direct (OneShot/TwoShot) LL operation: one pass of the kernel, no chain of
 * steps; what each further rank a rank waits on adds to a pass (its flags' round trip); and the
 * share of the channels' bandwidth its lines reach. 4 H100s in graph replay, 8-512 B: one rank
 * waited on (2-rank all-reduce, Broadcast) 5.6-5.9 us, three (all-reduce, all-gather,
 * reduce-scatter) 7.6-8.5, TwoShot's two passes 12.0 at 2 KiB; a single base priced TwoShot
 * 25 % low and 2 ranks 20 % high (0.35-0.4 of the bandwidth: 128 KiB-4 MiB). */
static const double direct_base_us = 4.9;
static const double direct_peer_us = 1.2;
static const double direct_bw = 0.38;
/* Staged direct algorithms (device.h), fitted to the staged points of 80 graph-replay times of
 * the library's own choices (4 and 2 H100s, 64 KiB-32 MiB; root-mean-square error 7.8 %, where
 * the earlier fit, made before the staged kernels per datatype, was 16.5 %): a launch's fixed
 * cost; a barrier between every rank's blocks (about 5 us: the flag round trip over NVLink and
 * the blocks' skew); per round, each source a block reduces and each peer it copies from (their
 * loads are in flight together); the local copy into staging (bytes/us); a GPU pulls from its
 * peers at about its NVLink bandwidth and a root serves its peers at 1.49 of it (several peers
 * read its memory at once). */
static const double stage_base_us = 1.56;
static const double stage_barrier_us = 4.99;
static const double stage_reduce_src_us = 0.49;
static const double stage_copy_peer_us = 0.28;
static const double stage_copy_bytes_per_us = 4.66e5;
static const double stage_pull_share = 0.91;
static const double stage_serve_share = 1.49;

/* The staged algorithms' time: every round copies this rank's input into its staging, meets the
 * other ranks once (TwoShot AllReduce: twice) and pulls from the peers' staging; the slower of
 * what a GPU pulls in and what it serves out counts. */
static double stage_time_us(const topo_tuning_t* t, int func, int algo, size_t bytes) {
  const double n = t->nranks;
  const double b = (double)bytes;
  double copy, in, out, staged, lat;
  int barriers = 1;
  switch (func) {
    case FUNC_ALLGATHER: /* bytes: the output; each rank stages its n-th, pulls the others' */
      copy = staged = b / n;
      in = out = (n - 1) / n * b;
      lat = (n - 1) * stage_copy_peer_us;
      break;
    case FUNC_REDUCESCATTER: /* bytes: the input; stages all of it, pulls its block from each */
      copy = staged = b;
      in = out = (n - 1) / n * b;
      lat = n * stage_reduce_src_us;
      break;
    case FUNC_BROADCAST: /* the others pull from the root */
      copy = staged = b;
      in = b;
      out = (n - 1) * b;
      lat = stage_copy_peer_us;
      break;
    case FUNC_REDUCE: /* the root pulls from every other rank */
      copy = staged = b;
      in = (n - 1) * b;
      out = b;
      lat = n * stage_reduce_src_us;
      break;
    default: /* AllReduce */
      copy = staged = b;
      if (algo == ALGO_TWOSHOT) {
        in = out = 2.0 * (n - 1) / n * b;
        barriers = 2;
        lat = n * stage_reduce_src_us + (n - 1) * stage_copy_peer_us;
      } else {
        in = out = (n - 1) * b;
        lat = n * stage_reduce_src_us;
      }
      break;
  }
  double rounds = staged > 0 ? (double)(((size_t)staged + t->stage_half - 1) / t->stage_half) : 1;
  if (rounds < 1) rounds = 1;
  const double link = t->stage_read_gbs * 1e3; /* bytes/us */
  const double pull = in / (link * stage_pull_share), serve = out / (link * stage_serve_share);
  return stage_base_us + rounds * (barriers * stage_barrier_us + lat) +
         copy / stage_copy_bytes_per_us + (pull > serve ? pull : serve);
}

double topo_model_time_us(const topo_tuning_t* t, int func, int algo, int proto, size_t bytes) {
  if (t == NULL || t->nranks < 1) return -1.0;
  const vocab_caps_t caps = {.ll128 = t->gpu,
                             .direct = true,
                             .staged = t->stage_half > 0,
                             .nranks = t->nranks,
                             .nhosts = t->nhosts};
  if (!vocab_supports(func, algo, proto, &caps)) return -1.0;
  if ((algo == ALGO_ONESHOT || algo == ALGO_TWOSHOT) && proto == PROTO_SIMPLE) {
    if (!(t->stage_read_gbs > 0.0)) return -1.0; /* staged: one host (the table), staging */
    return stage_time_us(t, func, algo, bytes);
  }

  const bool multi_host = t->nhosts > 1;
  const double link_bw = multi_host ? t->inter_bw_gbs : t->intra_bw_gbs; /* GB/s == bytes/ns */
  if (!(link_bw > 0.0) || t->intra_lat_us < 0.0 || (multi_host && t->inter_lat_us < 0.0))
    return -1.0;
  const int nchannels = t->nchannels > 0 ? t->nchannels : 1;
  const double bytes_per_us = link_bw * 1e3 * nchannels * proto_bw[proto];

  const double n = t->nranks;
  const int nhosts = multi_host ? (t->nhosts < t->nranks ? t->nhosts : t->nranks) : 1;
  double hops, inter_hops, link_bytes;
  if (algo == ALGO_ONESHOT || algo == ALGO_TWOSHOT) {
    const bool whole = func == FUNC_ALLREDUCE || func == FUNC_BROADCAST;
    hops = algo == ALGO_TWOSHOT ? 2.0 : 1.0;
    inter_hops = 0.0;
    link_bytes = algo == ALGO_TWOSHOT ? 2.0 * (n - 1) / n * (double)bytes
                 : whole              ? (n - 1) * (double)bytes
                                      : (n - 1) / n * (double)bytes;
    /* a line is read as it lands; a Broadcast's ranks wait on the root alone */
    const double waited = func == FUNC_BROADCAST ? 1.0 : n - 1;
    const double lat_us = hops * (t->intra_lat_us + (waited - 1) * direct_peer_us);
    return direct_base_us + lat_us + link_bytes / (bytes_per_us / proto_bw[proto] * direct_bw);
  } else if (algo == ALGO_TREE) {
    hops = 2.0 * ceil_log2(t->nranks);
    inter_hops = 2.0 * ceil_log2(nhosts);
    link_bytes = t->nranks > 1 ? 2.0 * (double)bytes / tree_bw_efficiency : 0.0;
  } else {
    switch (func) {
      case FUNC_ALLREDUCE: /* 2 ranks with LL/LL128: one exchange (RING_ALLREDUCE_EXCHANGE) */
        hops = RING_ALLREDUCE_EXCHANGE(t->nranks, proto) ? 1.0 : 2.0 * (n - 1);
        link_bytes = 2.0 * (n - 1) / n * (double)bytes;
        break;
      case FUNC_ALLGATHER:
      case FUNC_REDUCESCATTER:
        hops = n - 1;
        link_bytes = (n - 1) / n * (double)bytes;
        break;
      default: /* Broadcast, Reduce */
        hops = n - 1;
        link_bytes = t->nranks > 1 ? (double)bytes : 0.0;
        if (!multi_host && t->nranks > 2 && proto == PROTO_SIMPLE && t->stage_read_gbs > 0.0 &&
            chain_bw[func] > 0.0)
          return chain_base_us[func] + hops * t->intra_lat_us * proto_hop_factor[proto] +
                 link_bytes / (t->stage_read_gbs * 1e3 * chain_bw[func]);
        break;
    }
    inter_hops = multi_host ? hops * nhosts / n : 0.0;
  }
  const double lat_us = (hops - inter_hops) * t->intra_lat_us + inter_hops * t->inter_lat_us;
  return proto_base_us[proto] + lat_us * proto_hop_factor[proto] + link_bytes / bytes_per_us;
}
