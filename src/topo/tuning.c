/* The tuning model: estimated time of one collective for each algorithm x protocol, so the planner
 * can pick the fastest. A pure function of topo_tuning_t; no I/O.
 *
 *   ring, tree: time = ring_base[proto] + hops * ring_step[proto]
 *                      + inter_hops * inter_lat * hop_factor[proto]
 *                      + link_bytes / (link_bw * nchannels * share[proto]) + the pipeline's fill
 *
 * link_bw is the per-channel bandwidth of the slowest link the algorithm uses: inter_bw when the
 * ranks span hosts, else intra_bw; share is the protocol's share of it for copying or combining
 * steps. Hops are the sequential steps on the critical path. Per algorithm, with n ranks on h
 * hosts (ranks of a host contiguous) and `bytes` the size of the larger user buffer (AllGather:
 * the output, ReduceScatter: the input, others: the buffer):
 *   ring AllReduce        2(n-1) hops, each link carries 2(n-1)/n * bytes (reduce-scatter then
 *                         all-gather)
 *   ring AllGather,
 *   ring ReduceScatter    n-1 hops, (n-1)/n * bytes per link
 *   ring Broadcast/Reduce n-1 hops (a pipelined chain), bytes per link; on one host a chain has
 *                         its own costs (chain_* below)
 *   (h of a ring's n links cross hosts, so h/n of its hops are inter-host)
 *   tree AllReduce        ceil(log2 n) hops up to the root and as many back down, of which
 *                         ceil(log2 h) each way cross hosts (the top levels); a parent sends the
 *                         buffer to each of two children: 2 * bytes (2 ranks: bytes), divided by
 *                         proto_costs_t.tree_eff
 *   OneShot (LL, one host) one hop; each rank sends its whole buffer to every other rank
 *                         (AllReduce, Broadcast's root: (n-1) * bytes) or its n-th to each
 *                         ((n-1)/n * bytes: AllGather, ReduceScatter); no Reduce
 *   TwoShot (LL, AllReduce) two hops, 2(n-1)/n * bytes (reduce-scatter then all-gather)
 *   Both are a kernel's single pass with no forwarding, so their base cost is direct_base_us,
 *                         and each pass waits on the other ranks' flags
 *   OneShot, TwoShot with Simple: the staged algorithms (stage_time_us)
 * Tree is only modelled for AllReduce; LL128 only on GPUs (it relies on 128-byte stores being
 * seen whole, an NVLink property); Send/Recv are not modelled. Those return a negative time, as
 * do a missing or non-positive bandwidth and nranks < 1. */
#include "topo/topo.h"

/* The constants below are fitted to the CUDA executor on 4 and 2 H100s (NV18 between every pair),
 * CUDA-graph replay of every collective with every algorithm and protocol forced, 8 B-1 GiB
 * (docs/gpu-results.md run 125; tests/gpu/fit_model.py fits each family on the points where it is
 * within 25 % of the fastest, and elsewhere only keeps it from being priced below what it took;
 * rings and trees everywhere, as they extrapolate to more ranks and hosts).
 * With them the model's own choice is within 15 % of its measured time at 268 of 270 points, and
 * costs 0.4 % over the fastest measured choice in the geometric mean (the constants before: 43
 * points outside, 2-rank AllReduce and Reduce at 8 MiB on the staged kernel where the ring took
 * 0.85 and 0.64 of the time). With Simple channels that saturate the GPU's NVLink (simple_chan_gbs,
 * below) a later library's choices were within 15 % at 262 of 270 points, the 2-rank AllReduce and
 * ReduceScatter at 8 MiB now on the ring (50.8 us against TwoShot's 55.8; 36.8 against OneShot's
 * 37.1).
 *
 * Per protocol, a ring's (and a tree's) costs (proto_costs below):
 *   base_us, step_us  its fixed cost and the cost of each of its steps on the critical path (a
 *                     step: wait for the peer's data, combine, publish; on one host it holds the
 *                     NVLink hop's latency, so only hops between hosts add their link latency on
 *                     top): a Simple AllReduce ring pays 9.2 + 5.6 per step, 20.5 us on 2 ranks
 *                     and 43 on 4 before its bytes count
 *   hop_factor        multiplier on an inter-host hop's latency (LL the lowest: data and flag
 *                     arrive in one store)
 *   copy_bw, reduce_bw  share of the channels' bandwidth reached by steps that only copy
 *                     (AllGather, Broadcast) and by those that combine (AllReduce, ReduceScatter,
 *                     Reduce): LL and LL128 combine at about half the rate they copy (LL128
 *                     AllReduce on 4 H100s: 106 GB/s against AllGather's 154)
 *   fill_steps, fill_cap  filling the pipeline: a ring's receivers finish one step after their
 *                     senders, which counts when a channel holds few steps (2-rank AllGather at
 *                     64 MiB: one 512 KiB step a channel, 152.6 us where the bytes alone take
 *                     100): this many steps of min(fill_cap, a channel's share of a rank's block),
 *                     at the channel's rate (fill_cap: Simple's 512 KiB slot; for LL and LL128 the
 *                     cap the fit used)
 *   tree_eff          the share of the ring's combining bandwidth a tree AllReduce keeps (a
 *                     parent of two children sends the buffer twice) */
typedef struct proto_costs {
  double base_us, step_us, hop_factor, copy_bw, reduce_bw, fill_steps;
  size_t fill_cap;
  double tree_eff;
} proto_costs_t;
static const proto_costs_t proto_costs[PROTO_COUNT] = {
    [PROTO_LL] = {.base_us = 5.77,
                  .step_us = 3.92,
                  .hop_factor = 1.5,
                  .copy_bw = 0.508,
                  .reduce_bw = 0.312,
                  .fill_steps = 0.665,
                  .fill_cap = 64 << 10,
                  .tree_eff = 0.748},
    [PROTO_LL128] = {.base_us = 5.99,
                     .step_us = 4.07,
                     .hop_factor = 2.0,
                     .copy_bw = 0.532,
                     .reduce_bw = 0.247,
                     .fill_steps = 0.354,
                     .fill_cap = 64 << 10,
                     .tree_eff = 0.548},
    [PROTO_SIMPLE] = {.base_us = 9.22,
                      .step_us = 5.55,
                      .hop_factor = 2.0,
                      .copy_bw = 0.962,
                      .reduce_bw = 0.925,
                      .fill_steps = 0.458,
                      .fill_cap = 512 << 10,
                      .tree_eff = 0.828},
};
/* What one channel of a Simple ring moves at best, GB/s: on 2 H200s an 8 MiB ring AllReduce on 24
 * channels took 57.2 us, on 32 51.6 and on 62 50.5 (its bytes at 0.79, 0.96 and all of the
 * NVLink rate). */
static const double simple_chan_gbs = 12.0;
/* A Simple chain (Broadcast, Reduce on one host, a slot a step: plan.c): its fixed cost beside
 * the hops' latency, and the share of a GPU's NVLink bandwidth (stage_read_gbs) it moves. With LL
 * and LL128 a chain forwards each line as it lands: a step costs chain_ll_step_share of a ring's,
 * and a Reduce's combine adds chain_ll_reduce_us. */
static const double chain_base_us[FUNC_COUNT] = {[FUNC_BROADCAST] = 10.79, [FUNC_REDUCE] = 11.88};
static const double chain_bw[FUNC_COUNT] = {[FUNC_BROADCAST] = 0.897, [FUNC_REDUCE] = 0.910};
static const double chain_ll_step_share = 0.122;
static const double chain_ll_reduce_us = 1.98;
/* A direct (OneShot/TwoShot) LL operation: one pass of the kernel, no chain of steps; each
 * further rank a rank waits on adds to a pass (its flags' round trip; a Broadcast's root pays
 * direct_bc_less_us less: nothing to combine); its lines move at a share of the GPU's NVLink
 * bandwidth, whatever the channels (one channel's block already writes lines as fast as they
 * land: 2-rank AllGather 4-32 KiB 6.1-7.0 us on 1-8 channels). */
static const double direct_base_us = 5.67;
static const double direct_peer_us = 1.19;
static const double direct_bc_less_us = 1.95;
static const double direct_bw = 0.0393;
/* Staged direct algorithms (device.h): a launch's fixed cost (a ReduceScatter's slices add
 * stage_rs_us); a barrier between every rank's blocks (the flag round trip over NVLink and the
 * blocks' skew); per round, each source a block reduces and each peer it copies from (their
 * loads are in flight together); the local copy into staging and the combining of the sources
 * (bytes/us); a GPU pulls from its peers at 1.1 of its nominal NVLink bandwidth and a root serves
 * its peers at 1.13 of it (several peers read its memory at once); a GPU that pulls and serves at
 * once (AllGather, ReduceScatter, AllReduce) pays stage_duplex of the link time of what it pulls
 * again (2-rank AllGather at 16 MiB: 47.7 us where the pull alone takes 22). */
static const double stage_base_us = 0.53;
static const double stage_rs_us = 1.61;
static const double stage_barrier_us = 5.8;
static const double stage_reduce_src_us = 0.566;
static const double stage_copy_peer_us = 0.803;
static const double stage_copy_bytes_per_us = 1.151e6;
static const double stage_combine_bytes_per_us = 1.123e6;
static const double stage_pull_share = 1.115;
static const double stage_serve_share = 1.13;
static const double stage_duplex = 0.214;

/* The staged algorithms' time: every round copies this rank's input into its staging, meets the
 * other ranks once (TwoShot AllReduce: twice) and pulls from the peers' staging, combining what
 * it reduces; the slower of what a GPU pulls in and what it serves out counts. */
static double stage_time_us(const topo_tuning_t* t, int func, int algo, size_t bytes) {
  const double n = t->nranks;
  const double b = (double)bytes;
  double copy, in, out, staged, lat, combined;
  int barriers = 1;
  switch (func) {
    case FUNC_ALLGATHER: /* bytes: the output; each rank stages its n-th, pulls the others' */
      copy = staged = b / n;
      in = out = (n - 1) / n * b;
      lat = (n - 1) * stage_copy_peer_us;
      combined = 0;
      break;
    case FUNC_REDUCESCATTER: /* bytes: the input; stages all of it, pulls its block from each */
      copy = staged = b;
      in = out = (n - 1) / n * b;
      lat = n * stage_reduce_src_us;
      combined = b; /* n sources of its n-th */
      break;
    case FUNC_BROADCAST: /* the others pull from the root */
      copy = staged = b;
      in = b;
      out = (n - 1) * b;
      lat = stage_copy_peer_us;
      combined = 0;
      break;
    case FUNC_REDUCE: /* the root pulls from every other rank */
      copy = staged = b;
      in = (n - 1) * b;
      out = b;
      lat = n * stage_reduce_src_us;
      combined = n * b;
      break;
    default: /* AllReduce */
      copy = staged = b;
      if (algo == ALGO_TWOSHOT) {
        in = out = 2.0 * (n - 1) / n * b;
        barriers = 2;
        lat = n * stage_reduce_src_us + (n - 1) * stage_copy_peer_us;
        combined = b; /* n sources of its n-th */
      } else {
        in = out = (n - 1) * b;
        lat = n * stage_reduce_src_us;
        combined = n * b;
      }
      break;
  }
  double rounds = staged > 0 ? (double)(((size_t)staged + t->stage_half - 1) / t->stage_half) : 1;
  if (rounds < 1) rounds = 1;
  const double link = t->stage_read_gbs * 1e3; /* bytes/us */
  const double pull = in / (link * stage_pull_share), serve = out / (link * stage_serve_share);
  const bool duplex = func != FUNC_BROADCAST && func != FUNC_REDUCE; /* root and others apart */
  return stage_base_us + (func == FUNC_REDUCESCATTER ? stage_rs_us : 0.0) +
         rounds * (barriers * stage_barrier_us + lat) + copy / stage_copy_bytes_per_us +
         combined / stage_combine_bytes_per_us + (pull > serve ? pull : serve) +
         (duplex ? stage_duplex * in / link : 0.0);
}

double topo_model_time_us(const topo_tuning_t* t, int func, int algo, int proto, size_t bytes) {
  if (t == NULL || t->nranks < 1) return -1.0;
  const vocab_caps_t caps = {.ll128 = t->gpu,
                             .direct = true,
                             .staged = t->stage_half > 0,
                             .nranks = t->nranks,
                             .nhosts = t->nhosts};
  if (!vocab_supports(func, algo, proto, &caps)) return -1.0;
  if (vocab_algo_is_staged(algo, proto)) {
    if (!(t->stage_read_gbs > 0.0)) return -1.0; /* staged: one host (the table), staging */
    return stage_time_us(t, func, algo, bytes);
  }

  const bool multi_host = t->nhosts > 1;
  const double link_bw = multi_host ? t->inter_bw_gbs : t->intra_bw_gbs; /* GB/s == bytes/ns */
  if (!(link_bw > 0.0) || t->intra_lat_us < 0.0 || (multi_host && t->inter_lat_us < 0.0))
    return -1.0;
  const int nchannels = t->nchannels > 0 ? t->nchannels : 1;
  const bool combines = func != FUNC_ALLGATHER && func != FUNC_BROADCAST;
  const proto_costs_t* pc = &proto_costs[proto];
  const double share = combines ? pc->reduce_bw : pc->copy_bw;
  /* Simple on one host: an operation on fewer channels than the communicator's still fills the
   * GPU's NVLink bandwidth (stage_read_gbs, what the communicator's channels share) until its
   * channels reach simple_chan_gbs each: a linear share of it priced 8 MiB rings on the 48
   * channels below COLL_WIDE_MIN_BYTES 17-19 % above what they took on 2 and 4 H100s. */
  double op_gbs = link_bw * nchannels;
  if (!multi_host && proto == PROTO_SIMPLE) {
    const double sat = t->stage_read_gbs < simple_chan_gbs * nchannels
                           ? t->stage_read_gbs
                           : simple_chan_gbs * nchannels;
    if (sat > op_gbs) op_gbs = sat; /* never below the channels' share */
  }
  const double bytes_per_us = op_gbs * 1e3 * share;

  const double n = t->nranks;
  const int nhosts = multi_host ? (t->nhosts < t->nranks ? t->nhosts : t->nranks) : 1;
  double hops, inter_hops, link_bytes;
  if (vocab_algo_is_direct(algo)) {
    const bool whole = func == FUNC_ALLREDUCE || func == FUNC_BROADCAST;
    hops = algo == ALGO_TWOSHOT ? 2.0 : 1.0;
    link_bytes = algo == ALGO_TWOSHOT ? 2.0 * (n - 1) / n * (double)bytes
                 : whole              ? (n - 1) * (double)bytes
                                      : (n - 1) / n * (double)bytes;
    const double lat_us = hops * (t->intra_lat_us + (n - 2) * direct_peer_us);
    /* the GPU's NVLink bandwidth (staging's figure), else the channels' */
    const double gpu_gbs =
        t->stage_read_gbs > 0.0 ? t->stage_read_gbs : t->intra_bw_gbs * (double)nchannels;
    return direct_base_us - (func == FUNC_BROADCAST ? direct_bc_less_us : 0.0) + lat_us +
           link_bytes / (gpu_gbs * 1e3 * direct_bw);
  } else if (algo == ALGO_TREE) {
    hops = 2.0 * ceil_log2(t->nranks);
    inter_hops = 2.0 * ceil_log2(nhosts);
    link_bytes = (t->nranks > 2 ? 2.0 : 1.0) * (double)bytes / pc->tree_eff;
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
      default: /* Broadcast, Reduce: a chain */
        hops = n - 1;
        link_bytes = t->nranks > 1 ? (double)bytes : 0.0;
        if (!multi_host && proto == PROTO_SIMPLE && t->stage_read_gbs > 0.0 && chain_bw[func] > 0.0)
          return chain_base_us[func] + hops * t->intra_lat_us * pc->hop_factor +
                 link_bytes / (t->stage_read_gbs * 1e3 * chain_bw[func]);
        if (!multi_host && proto != PROTO_SIMPLE)
          return pc->base_us + hops * pc->step_us * chain_ll_step_share +
                 (func == FUNC_REDUCE ? chain_ll_reduce_us : 0.0) + link_bytes / bytes_per_us;
        break;
    }
    inter_hops = multi_host ? hops * nhosts / n : 0.0;
  }
  /* a step of the pipeline's fill (rings and trees): a slot, or less when a channel's share of a
   * block is less */
  double step = n > 0 ? (double)bytes / ((double)nchannels * n) : 0.0;
  if (step > (double)pc->fill_cap) step = (double)pc->fill_cap;
  const double fill = pc->fill_steps * step / (bytes_per_us / nchannels);
  return pc->base_us + hops * pc->step_us + inter_hops * t->inter_lat_us * pc->hop_factor +
         link_bytes / bytes_per_us + fill;
}
