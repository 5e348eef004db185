/* The planner: turns one group's tasks on one communicator into per-channel work items for the
 * executor (algorithm, protocol, channel slices, chunk sizes) and lists the connections they need.
 *
 * Both ends of every connection must walk it identically, so everything that decides which
 * connection carries what (channel counts, slices, chunks, protocol, the order of items in a
 * channel's list) depends only on what every rank knows the same way: the collective's arguments,
 * a point-to-point pair's byte count, and the environment. */
#include <math.h>
#include <stdlib.h>

#include "collectives/collectives.h"
#include "vocab/vocab.h"

/* Point-to-point messages up to this size use LL when it is allowed. */
#define COLL_P2P_LL_MAX_BYTES (16 << 10)
/* Channel slices of point-to-point messages are cut on multiples of this many bytes, so sender
 * and receiver agree on them even when they posted different datatypes of the same size. */
#define COLL_P2P_ALIGN_BYTES 64

/* ---- Names --------------------------------------------------------------------------------- */
const char* coll_func_name(int func) {
  static const char* const names[FUNC_COUNT] = {[FUNC_BROADCAST] = "Broadcast",
                                                [FUNC_REDUCE] = "Reduce",
                                                [FUNC_ALLGATHER] = "AllGather",
                                                [FUNC_REDUCESCATTER] = "ReduceScatter",
                                                [FUNC_ALLREDUCE] = "AllReduce",
                                                [FUNC_SEND] = "Send",
                                                [FUNC_RECV] = "Recv"};
  return func >= 0 && func < FUNC_COUNT ? names[func] : "?";
}

/* ---- Pure arithmetic ------------------------------------------------------------------------ */
void coll_split(size_t total, int nslices, int c, size_t align, size_t* off, size_t* n) {
  span_part(total, nslices, c, align, off, n);
}

int coll_op_nchannels(size_t bytes, int max, int min_forced) {
  if (max < 1) max = 1;
  size_t want = (bytes + COLL_MIN_CHANNEL_BYTES - 1) / COLL_MIN_CHANNEL_BYTES;
  if (bytes < COLL_WIDE_MIN_BYTES && want > COLL_NARROW_CHANNELS) want = COLL_NARROW_CHANNELS;
  if (min_forced > 0 && want < (size_t)min_forced) want = (size_t)min_forced;
  if (want < 1) want = 1;
  if (want > (size_t)max) want = (size_t)max;
  return (int)want;
}

size_t coll_chunk_elems(size_t slot_data_bytes, size_t esize) {
  if (esize == 0) return 1;
  size_t bytes = slot_data_bytes >= 16 ? slot_data_bytes & ~(size_t)15 : slot_data_bytes;
  size_t elems = bytes / esize;
  return elems > 0 ? elems : 1;
}

size_t coll_pipe_chunk_bytes(size_t slice_bytes, int hops, size_t slot_bytes, size_t cost_bytes) {
  size_t c = slot_bytes;
  if (hops > 1) {
    double best = sqrt((double)slice_bytes * (double)cost_bytes / (double)(hops - 1));
    c = best < (double)COLL_PIPE_MIN_BYTES ? COLL_PIPE_MIN_BYTES : (size_t)best;
  }
  if (c > slot_bytes) c = slot_bytes;
  return c >= 16 ? c & ~(size_t)15 : c;
}

size_t coll_pipe_hidden_bytes(size_t cost_bytes, double cost_gbs, double push_gbs, double net_gbs) {
  if (!(net_gbs > 0.0) || !(push_gbs > net_gbs) || !(cost_gbs > 0.0)) return 0;
  double c = (double)cost_bytes / cost_gbs / (1.0 / net_gbs - 1.0 / push_gbs);
  if (c < (double)COLL_PIPE_MIN_BYTES) c = COLL_PIPE_MIN_BYTES;
  return (size_t)c & ~(size_t)15;
}

size_t coll_task_bytes(const coll_task_t* t, int nranks) {
  size_t b = t->count * datatype_size((ncclDataType_t)t->dtype);
  if (t->func == FUNC_ALLGATHER || t->func == FUNC_REDUCESCATTER) b *= (size_t)nranks;
  return b;
}

/* ---- Algorithm and protocol ----------------------------------------------------------------- */
/* What this communicator offers (the vocabulary's capability table decides what exists). */
static vocab_caps_t plan_caps(const struct coll_comm* cc) {
  return (vocab_caps_t){.ll128 = cc->ll128_ok, /* every rank agreed on it (gpu.c) */
                        .direct = !cc->no_direct,
                        .staged = cc->tuning.stage_half > 0, /* every rank shares staging */
                        .nranks = cc->nranks,
                        .nhosts = cc->tuning.nhosts};
}

/* Whether a direct algorithm (OneShot, TwoShot) may run here, beyond what exists at all
 * (vocab_supports: LL, or Simple staged where the communicator has staging; 2 to
 * DIRECT_MAX_RANKS ranks of one host). The staged ones run on GPUs sharing staging, at any size
 * (in rounds). With LL, on GPUs every pair must reach each other by P2P on one host (direct_ok,
 * agreed by every rank); the model offers them up to COLL_DIRECT_MAX_BYTES. Where the model may
 * not choose them (direct_model: the host executor, whose FIFOs for every pair cost shared
 * memory) they run only when NCCL_ALGO names them (CI forces them to prove them). */
bool coll_direct_allowed(const struct coll_comm* cc, int func, int algo, int proto, size_t bytes,
                         bool forced) {
  if (!vocab_algo_is_direct(algo)) return true;
  const vocab_caps_t caps = plan_caps(cc);
  if (!vocab_supports(func, algo, proto, &caps)) return false;
  if (proto == PROTO_SIMPLE) return true; /* staged (the table asked for staging): any size */
  if (!forced && bytes > COLL_DIRECT_MAX_BYTES) return false;
  if (!cc->direct_ok) return false;
  if (cc->direct_model) return true;
  return forced && cc->filter.algo_set[func] && cc->filter.algo_ok[func][algo];
}

/* The model's price of (algo, proto) on base's link figures and nch channels, of which a direct
 * LL item runs on at most COLL_DIRECT_MAX_CHANNELS (each connects every pair): what every choice
 * below compares. */
static double plan_price(const topo_tuning_t* base, int nch, int func, int algo, int proto,
                         size_t bytes) {
  topo_tuning_t tun = *base;
  tun.nchannels = nch;
  if (vocab_algo_is_direct(algo) && proto != PROTO_SIMPLE && nch > COLL_DIRECT_MAX_CHANNELS)
    tun.nchannels = COLL_DIRECT_MAX_CHANNELS;
  return topo_model_time_us(&tun, func, algo, proto, bytes);
}

/* Best (algo, proto) by the model among the supported ones, among those NCCL_ALGO allows when
 * use_algo and those NCCL_PROTO allows when use_proto. Returns false when none qualifies. */
static bool plan_pick(const struct coll_comm* cc, const topo_tuning_t* tun, int func, size_t bytes,
                      bool use_algo, bool use_proto, int* algo, int* proto, double* us) {
  bool found = false;
  double best = 0;
  const vocab_caps_t caps = plan_caps(cc);
  for (int a = 0; a < ALGO_COUNT; a++) {
    if (use_algo && !cc->filter.algo_ok[func][a]) continue;
    for (int p = 0; p < PROTO_COUNT; p++) {
      if (!vocab_supports(func, a, p, &caps)) continue;
      if (use_proto && !cc->filter.proto_ok[func][p]) continue;
      if (!coll_direct_allowed(cc, func, a, p, bytes, use_algo)) continue;
      double t = plan_price(tun, tun->nchannels, func, a, p, bytes);
      if (t < 0) continue;
      if (!found || t < best) {
        found = true;
        best = t;
        *algo = a;
        *proto = p;
      }
    }
  }
  if (found) *us = best;
  return found;
}

double coll_model_us(const struct coll_comm* cc, const coll_task_t* t, int algo, int proto,
                     size_t bytes) {
  const vocab_caps_t caps = plan_caps(cc);
  if (!vocab_supports(t->func, algo, proto, &caps)) return -1;
  if (!cc->filter.algo_ok[t->func][algo] || !cc->filter.proto_ok[t->func][proto]) return -1;
  if (!coll_direct_allowed(cc, t->func, algo, proto, bytes, cc->filter.algo_set[t->func]))
    return -1;
  return plan_price(&cc->tuning, t->nchannels, t->func, algo, proto, bytes);
}

/* The model's choice under the NCCL_ALGO / NCCL_PROTO filters; why says what decided. */
static void plan_model_choice(struct coll_comm* cc, coll_task_t* t, size_t bytes, int* algo,
                              int* proto, double* us, const char** why) {
  topo_tuning_t tun = cc->tuning;
  tun.nchannels = t->nchannels;
  *algo = ALGO_RING;
  *proto = PROTO_SIMPLE;
  *us = -1;
  *why = "tuning model";
  bool aset = cc->filter.algo_set[t->func], pset = cc->filter.proto_set[t->func];
  /* What the filters allow; if that is nothing this build offers for the function, drop the
   * algorithm filter first, then the protocol filter, and say so. */
  t->forced = aset || pset;
  if (plan_pick(cc, &tun, t->func, bytes, aset, pset, algo, proto, us)) {
    if (aset || pset)
      *why = aset && pset ? "NCCL_ALGO and NCCL_PROTO"
             : aset       ? "NCCL_ALGO, then the model"
                          : "NCCL_PROTO, then the model";
  } else if (pset && plan_pick(cc, &tun, t->func, bytes, false, true, algo, proto, us)) {
    *why = "NCCL_PROTO, then the model; NCCL_ALGO allows no algorithm this build has for it";
  } else if (aset && plan_pick(cc, &tun, t->func, bytes, true, false, algo, proto, us)) {
    *why = "NCCL_ALGO, then the model; NCCL_PROTO allows no protocol this build has for it";
  } else if (plan_pick(cc, &tun, t->func, bytes, false, false, algo, proto, us)) {
    *why = "the model; NCCL_ALGO/NCCL_PROTO allow nothing this build has for it";
    t->forced = false;
  } else {
    *algo = ALGO_RING;
    *proto = PROTO_SIMPLE;
    *why = "default; the tuning model offered nothing";
    t->forced = false;
  }
}

/* The model's best among a *Config call's selected pairs that can run here (within NCCL_ALGO and
 * NCCL_PROTO); the direct algorithms count as forced, as when NCCL_ALGO names them. */
static bool plan_pick_selected(const struct coll_comm* cc, const coll_task_t* t, size_t bytes,
                               int* algo, int* proto, double* us) {
  bool found = false;
  const vocab_caps_t caps = plan_caps(cc);
  for (int a = 0; a < ALGO_COUNT; a++) {
    for (int p = 0; p < PROTO_COUNT; p++) {
      if (!(t->select & (1u << (a * PROTO_COUNT + p)))) continue;
      if (!cc->filter.algo_ok[t->func][a] || !cc->filter.proto_ok[t->func][p]) continue;
      if (!vocab_supports(t->func, a, p, &caps)) continue;
      if (vocab_algo_is_direct(a) && p != PROTO_SIMPLE && !cc->direct_ok) continue;
      double time = plan_price(&cc->tuning, t->nchannels, t->func, a, p, bytes);
      if (found && (time < 0 || (*us >= 0 && time >= *us))) continue;
      found = true;
      *algo = a;
      *proto = p;
      *us = time;
    }
  }
  return found;
}

bool coll_select_possible(const struct coll_comm* cc, int func, size_t bytes, uint16_t select) {
  if (func < 0 || func >= FUNC_COUNT || func == FUNC_SEND || func == FUNC_RECV) return false;
  coll_task_t t = {.func = (uint8_t)func, .select = select, .nchannels = 1};
  int algo, proto;
  double us = -1;
  return plan_pick_selected(cc, &t, bytes, &algo, &proto, &us);
}

/* Whether a Simple ring AllReduce runs on COLL_RING_AR_CHANNELS channels instead of the size's
 * count (direct writes on every pair, below COLL_RING_AR_WIDE_BYTES; never below NCCL_MIN_NCHANNELS
 * or the call's minimum). */
static bool plan_ring_ar_narrow(const struct coll_comm* cc, const coll_task_t* t, int algo,
                                int proto, size_t bytes) {
  const int floor = t->min_ch > 0 ? t->min_ch : cc->min_channels;
  return algo == ALGO_RING && proto == PROTO_SIMPLE && t->func == FUNC_ALLREDUCE && cc->kernels &&
         cc->ring_writes && bytes < COLL_RING_AR_WIDE_BYTES &&
         t->nchannels > COLL_RING_AR_CHANNELS && floor <= COLL_RING_AR_CHANNELS;
}

ncclResult_t coll_plan_choose(struct coll_comm* cc, coll_task_t* t) {
  size_t bytes = coll_task_bytes(t, cc->nranks);
  int max_ch = t->max_ch > 0 && t->max_ch < cc->nchannels ? t->max_ch : cc->nchannels;
  t->nchannels = coll_op_nchannels(bytes, max_ch, t->min_ch > 0 ? t->min_ch : cc->min_channels);
  int algo, proto;
  double us = -1;
  const char* why = "the call's algSelection";
  if (t->select == 0 || !plan_pick_selected(cc, t, bytes, &algo, &proto, &us)) {
    if (t->select != 0 && t->select_forced) {
      /* The call checked that its selection runs here; what a group rules out later is the
       * direct algorithms (a kernel of their own: all of a group's collectives or none). */
      WARN(
          "%s: the call's algSelection (forceAlgSelection 1) cannot run in this group: it "
          "selects only the direct algorithms (OneShot, TwoShot), and the group holds "
          "collectives that cannot run them; call it outside the group, or select others too",
          coll_func_name(t->func));
      return ncclInvalidArgument;
    }
    plan_model_choice(cc, t, bytes, &algo, &proto, &us, &why);
    if (cc->tuner != NULL) coll_tuner_apply(cc, t, bytes, &algo, &proto, &why);
  } else {
    t->forced = true;
  }
  if (vocab_algo_is_staged(algo, proto))
    t->nchannels = cc->stage_parts; /* every staged item runs on the same parts */
  else if (vocab_algo_is_direct(algo) && t->nchannels > COLL_DIRECT_MAX_CHANNELS)
    t->nchannels = COLL_DIRECT_MAX_CHANNELS; /* every channel connects every pair */
  else if (plan_ring_ar_narrow(cc, t, algo, proto, bytes)) {
    t->nchannels = COLL_RING_AR_CHANNELS;
    if (us >= 0) us = plan_price(&cc->tuning, t->nchannels, t->func, algo, proto, bytes);
  }
  t->algo = (uint8_t)algo;
  t->proto = (uint8_t)proto;
  t->model_us = us;
  /* The first use of each choice also shows at the default INFO subsystems. */
  uint32_t bit = 1u << (algo * PROTO_COUNT + proto);
  unsigned long flags = NCCL_TUNING | ((cc->logged[t->func] & bit) ? 0 : NCCL_INIT);
  cc->logged[t->func] |= bit;
  INFO(flags, "%s: %zu bytes -> algo %s proto %s nchannels %d (model %.1f us; chosen by %s)",
       coll_func_name(t->func), bytes, coll_algo_name(algo), coll_proto_name(proto), t->nchannels,
       us, why);
  return ncclSuccess;
}

/* Protocol of a point-to-point pair: both sides decide from the byte count and the environment. */
static int plan_p2p_proto(const struct coll_comm* cc, size_t bytes) {
  bool ll = cc->filter.proto_ok[FUNC_SEND][PROTO_LL];
  bool simple = cc->filter.proto_ok[FUNC_SEND][PROTO_SIMPLE];
  if (ll && (bytes <= COLL_P2P_LL_MAX_BYTES || !simple)) return PROTO_LL;
  return PROTO_SIMPLE;
}

/* ---- Connections ------------------------------------------------------------------------------
 */
static bool plan_conn_made(const struct coll_comm* cc, int channel, int peer, int is_send) {
  const dev_channel_t* ch = &cc->channels[channel];
  return (is_send ? ch->send : ch->recv)[peer] != NULL;
}

static void plan_req_add(struct coll_comm* cc, int channel, int peer, int is_send, int* nreqs) {
  if (peer < 0 || peer == cc->rank) return;
  size_t key = ((size_t)channel * (size_t)cc->nranks + (size_t)peer) * 2 + (size_t)is_send;
  if (cc->conn_mark[key]) return;
  if (plan_conn_made(cc, channel, peer, is_send)) return;
  cc->conn_mark[key] = 1;
  cc->reqs[(*nreqs)++] = (conn_request_t){.channel = channel, .peer = peer, .is_send = is_send};
}

static void plan_req_collective(struct coll_comm* cc, const coll_task_t* t, int channel,
                                int* nreqs) {
  const dev_channel_t* ch = &cc->channels[channel];
  if (vocab_algo_is_direct(t->algo)) { /* every peer, both directions */
    for (int p = 0; p < cc->nranks; p++) {
      plan_req_add(cc, channel, p, 1, nreqs);
      plan_req_add(cc, channel, p, 0, nreqs);
    }
  } else if (t->algo == ALGO_TREE) {
    plan_req_add(cc, channel, ch->tree_up, 1, nreqs);
    plan_req_add(cc, channel, ch->tree_up, 0, nreqs);
    for (int k = 0; k < TREE_MAX_CHILDREN; k++) {
      plan_req_add(cc, channel, ch->tree_down[k], 1, nreqs);
      plan_req_add(cc, channel, ch->tree_down[k], 0, nreqs);
    }
  } else {
    /* Both ring directions, whatever the collective: every rank lists the same pairs. */
    plan_req_add(cc, channel, ch->ring_next, 1, nreqs);
    plan_req_add(cc, channel, ch->ring_prev, 0, nreqs);
  }
}

/* ---- Building the plan ------------------------------------------------------------------------
 */
static ncclResult_t plan_reserve(struct coll_comm* cc, int ntasks) {
  size_t nworks = (size_t)cc->nchannels * (size_t)(ntasks > 0 ? ntasks : 1);
  if (nworks > cc->works_cap) {
    work_t* w = realloc(cc->works, nworks * sizeof(*w));
    if (w == NULL) {
      WARN("Planner: out of memory for %zu work items", nworks);
      return ncclSystemError;
    }
    cc->works = w;
    cc->works_cap = nworks;
  }
  /* Per task at most 2 ring, 8 tree or 2 * DIRECT_MAX_PEERS direct connections per channel. */
  const int per = 2 + 2 * TREE_MAX_CHILDREN > 2 * DIRECT_MAX_PEERS ? 2 + 2 * TREE_MAX_CHILDREN
                                                                   : 2 * DIRECT_MAX_PEERS;
  int nreqs = cc->nchannels * (ntasks > 0 ? ntasks : 1) * per;
  if (nreqs > cc->reqs_cap) {
    conn_request_t* r = realloc(cc->reqs, (size_t)nreqs * sizeof(*r));
    if (r == NULL) {
      WARN("Planner: out of memory for %d connection requests", nreqs);
      return ncclSystemError;
    }
    cc->reqs = r;
    cc->reqs_cap = nreqs;
  }
  if (ntasks > cc->order_cap) {
    uint64_t* o = realloc(cc->order, (size_t)ntasks * sizeof(*o));
    if (o == NULL) {
      WARN("Planner: out of memory ordering %d tasks", ntasks);
      return ncclSystemError;
    }
    cc->order = o;
    cc->order_cap = ntasks;
  }
  if (ntasks > cc->locals_cap) {
    local_op_t* l = realloc(cc->locals, (size_t)ntasks * sizeof(*l));
    if (l == NULL) {
      WARN("Planner: out of memory for %d local operations", ntasks);
      return ncclSystemError;
    }
    cc->locals = l;
    cc->locals_cap = ntasks;
  }
  return ncclSuccess;
}

static void plan_add_work(struct coll_comm* cc, int channel, const work_t* w) {
  plan_t* plan = &cc->plan;
  TRACE(NCCL_COLL,
        "plan: channel %d item %d: %s %s/%s root/peer %d count %zu slice %zu+%zu chunk %zu",
        channel, plan->nwork[channel], coll_func_name(w->func), coll_algo_name(w->algo),
        coll_proto_name(w->proto), w->root, w->count, w->chan_off, w->chan_count, w->chunk);
  plan->works[channel][plan->nwork[channel]++] = *w;
  if (channel + 1 > plan->nchannels) plan->nchannels = channel + 1;
}

/* Hops of the pipeline the function runs along (a chain or a tree), 0 when it is not one. */
static int plan_pipe_hops(const struct coll_comm* cc, const coll_task_t* t) {
  if (cc->nranks <= 2 || t->proto != PROTO_SIMPLE) return 0;
  if (t->func == FUNC_BROADCAST || t->func == FUNC_REDUCE) return cc->nranks - 1;
  if (t->func != FUNC_ALLREDUCE || t->algo != ALGO_TREE) return 0;
  return 2 * ceil_log2(cc->nranks); /* up the tree and down again: twice its depth */
}

/* Elements a step of a channel's slice of n elements carries: a slot's worth, or a pipeline's
 * chunk (coll_pipe_chunk_bytes), a multiple of 16 bytes either way. */
static size_t plan_chunk(const struct coll_comm* cc, const coll_task_t* t, size_t n, size_t esize,
                         size_t align) {
  size_t chunk = coll_chunk_elems(cc->slot_data_bytes[t->proto], esize);
  int hops = plan_pipe_hops(cc, t);
  if (hops == 0) return chunk;
  /* A GPU chain on one host steps a slot at a time: on 4 H100s every chunk from 192 KiB to the
   * slot timed the same, and the formula's (48 KiB cost) were slower: Reduce 2 MiB 25.1 us against
   * 21.2, 16 MiB 77.0 against 71.7; Broadcast 2 MiB 21.9 against 19.6, 16 MiB 70.7 against 66.9. */
  if (cc->kernels && cc->tuning.nhosts <= 1 && t->algo == ALGO_RING) return chunk;
  size_t bytes = coll_pipe_chunk_bytes(n * esize, hops, chunk * esize, cc->pipe_cost_bytes);
  /* a GPU block's steps across hosts wait for the network (the constants are a GPU's) */
  if (t->algo == ALGO_TREE && cc->tuning.nhosts > 1 && cc->kernels) {
    size_t hidden = coll_pipe_hidden_bytes(cc->pipe_cost_bytes, COLL_PIPE_COST_GBS,
                                           COLL_PIPE_PUSH_GBS, cc->tuning.inter_bw_gbs);
    if (hidden > 0 && hidden < bytes) bytes = hidden;
  }
  size_t want = bytes / esize;
  want = want / align * align;
  if (want == 0) want = align;
  return want < chunk ? want : chunk;
}

int coll_ring_index(const int* ring, int n, int rank) {
  for (int i = 0; ring != NULL && i < n; i++)
    if (ring[i] == rank) return i;
  return -1;
}

size_t coll_step_units(size_t slot_bytes, size_t unit, size_t want) {
  size_t cap = unit > 0 ? slot_bytes / unit : 0;
  return want == 0 || want > cap ? cap : want;
}

/* The last decisions of a collective item on channel c: the step (checked against the slot) and
 * the root's ring position. */
static ncclResult_t plan_item_finish(const struct coll_comm* cc, int c, size_t esize, work_t* w) {
  w->chunk = coll_step_units(cc->slot_data_bytes[w->proto], esize, w->chunk);
  if (w->chunk == 0) {
    WARN(
        "Planner: a %s FIFO slot of %zu data bytes cannot hold one element of %zu bytes; raise "
        "NCCL_BUFFSIZE / NCCL_LL_BUFFSIZE / NCCL_LL128_BUFFSIZE",
        coll_proto_name(w->proto), cc->slot_data_bytes[w->proto], esize);
    return ncclInvalidArgument;
  }
  w->root_idx = -1;
  if (w->algo == ALGO_RING && (w->func == FUNC_BROADCAST || w->func == FUNC_REDUCE)) {
    w->root_idx = coll_ring_index(cc->channels[c].ring_ranks, cc->nranks, w->root);
    if (w->root_idx < 0) {
      WARN("Planner: root rank %d is not in channel %d's ring of %d ranks", w->root, c, cc->nranks);
      return ncclInternalError;
    }
  }
  return ncclSuccess;
}

/* Zero copy (device.h, "Registered windows read in place"): on a communicator that has shared a
 * window (every rank knows it alike), OneShot items start with the probe (on GPUs from a size on:
 * the count decides, the same on every rank); zc_win names the shared window holding this rank's
 * whole send span, if one does. */
static void plan_zero_copy(struct coll_comm* cc, const coll_task_t* t, size_t esize, work_t* w) {
  w->zc = 0;
  w->zc_win = -1;
  w->zc_off = 0;
  if (t->algo != ALGO_ONESHOT || t->proto != PROTO_LL || !comm_windows_shared(cc->comm)) return;
  if (t->func != FUNC_ALLREDUCE && t->func != FUNC_ALLGATHER && t->func != FUNC_REDUCESCATTER &&
      t->func != FUNC_BROADCAST)
    return;
  /* On GPUs the probe and the release cost a fixed 6-8 us (ranks sharing one H100): reading in
   * place first beat the FIFOs at 64 KiB for AllReduce and between 256 and 512 KiB (the output)
   * for AllGather. Broadcast is taken with AllReduce, ReduceScatter with AllGather (how much each
   * rank reads); unmeasured on several GPUs. */
  if (cc->kernels &&
      coll_task_bytes(t, cc->nranks) < (t->func == FUNC_ALLREDUCE || t->func == FUNC_BROADCAST
                                            ? COLL_ZC_MIN_BYTES_WHOLE
                                            : COLL_ZC_MIN_BYTES_PARTS))
    return;
  w->zc = 1;
  size_t span = t->count * esize;
  if (t->func == FUNC_REDUCESCATTER) span *= (size_t)cc->nranks;
  int slot;
  size_t off;
  if (t->sendbuff != NULL && coll_window_find(cc, t->sendbuff, span, &slot, &off)) {
    w->zc_win = slot;
    w->zc_off = off;
  }
}

/* Direct writes (vocab.h's "Direct writes"): ring AllReduce and AllGather items with Simple on
 * the GPU executor, where a step that only delivers data stores it into the next rank's output
 * over a connection that allows it (CONN_FLAG_DIRECT), instead of into a slot the next rank then
 * copies out: the same on every rank. (The host executor has no such connections.) On 2 H200s,
 * graph replay: AllGather 6-12 % faster at 16-128 MiB, AllReduce 3-7 % at 8-64 MiB; below 8 MiB
 * (on 62 channels) the sender's read of the receiver's output address, a round trip across the
 * link per item, cost more than the copies saved (1 MiB: 1.4 us for AllReduce, 2.0 for
 * AllGather), so it starts at COLL_DIRECT_WRITE_MIN_CHANNEL_BYTES a channel. */
static uint8_t plan_direct(const struct coll_comm* cc, const coll_task_t* t) {
  return cc->kernels && steps_direct_writes(t->func, t->algo, t->proto) && t->nchannels > 0 &&
         coll_task_bytes(t, cc->nranks) / (size_t)t->nchannels >=
             COLL_DIRECT_WRITE_MIN_CHANNEL_BYTES;
}

/* A collective item as the task gives it; the caller sets its channel's share (and the root's
 * ring position, plan_item_finish). */
static work_t plan_work_of(const struct coll_comm* cc, const coll_task_t* t) {
  return (work_t){.func = t->func,
                  .algo = t->algo,
                  .proto = t->proto,
                  .dtype = t->dtype,
                  .op = t->op,
                  .sendbuff = t->sendbuff,
                  .recvbuff = t->recvbuff,
                  .count = t->count,
                  .root = t->root,
                  .root_idx = -1,
                  .nranks = cc->nranks,
                  .zc_win = -1};
}

/* A staged item (device.h, "Staged direct algorithms"): the same item on each of the parts, each
 * part its channel; no connection. The round's window fills a staging half. */
static ncclResult_t plan_staged(struct coll_comm* cc, const coll_task_t* t) {
  size_t esize = datatype_size((ncclDataType_t)t->dtype);
  const size_t half = cc->tuning.stage_half;
  size_t win = stage_window(half, t->nchannels, cc->nranks, t->func, t->algo, esize);
  if (win == 0) {
    WARN("Planner: a staging half of %zu bytes holds no round of %s (%zu-byte elements)", half,
         coll_func_name(t->func), esize);
    return ncclInternalError;
  }
  for (int c = 0; c < t->nchannels; c++) {
    work_t w = plan_work_of(cc, t);
    w.chan_off = (size_t)c;
    w.chan_count = (size_t)t->nchannels;
    w.chunk = win < t->count ? win : t->count;
    plan_add_work(cc, c, &w);
  }
  return ncclSuccess;
}

static ncclResult_t plan_collective(struct coll_comm* cc, const coll_task_t* t, int* nreqs) {
  if (vocab_algo_is_staged(t->algo, t->proto)) return plan_staged(cc, t);
  size_t esize = datatype_size((ncclDataType_t)t->dtype);
  size_t align = esize < 16 ? 16 / esize : 1;
  work_t zc;
  plan_zero_copy(cc, t, esize, &zc);
  const uint8_t direct = plan_direct(cc, t);
  for (int c = 0; c < t->nchannels; c++) {
    size_t off, n;
    coll_split(t->count, t->nchannels, c, align, &off, &n);
    if (n == 0) continue;
    work_t w = plan_work_of(cc, t);
    w.chan_off = off;
    w.chan_count = n;
    w.chunk = plan_chunk(cc, t, n, esize, align);
    w.zc = zc.zc;
    w.zc_win = zc.zc_win;
    w.zc_off = zc.zc_off;
    w.direct = direct;
    CHECK(plan_item_finish(cc, c, esize, &w));
    plan_add_work(cc, c, &w);
    plan_req_collective(cc, t, c, nreqs);
  }
  return ncclSuccess;
}

/* ---- Work without peers ---------------------------------------------------------------------- */
bool coll_local_changes_data(int func, const dev_redop_t* op) {
  bool reduces = func == FUNC_REDUCE || func == FUNC_REDUCESCATTER || func == FUNC_ALLREDUCE;
  return reduces && op->kind == DEV_OP_PREMULSUM;
}

/* A collective on one rank: its input to its output, scaled where the op changes data (PreMulSum,
 * floating Avg); nothing when that is a copy onto itself. Rank 0's block of AllGather's output and
 * ReduceScatter's input are the buffers' starts. */
bool coll_local_of_task(const coll_task_t* t, local_op_t* out) {
  if (t->count == 0) return false;
  bool scaled = coll_local_changes_data(t->func, &t->op);
  if (!scaled && t->sendbuff == t->recvbuff) return false;
  *out = (local_op_t){.src = t->sendbuff,
                      .dst = t->recvbuff,
                      .count = t->count,
                      .dtype = t->dtype,
                      .op = scaled ? t->op : (dev_redop_t){.kind = DEV_OP_SUM}};
  return true;
}

static void plan_add_local(struct coll_comm* cc, const local_op_t* l) {
  TRACE(NCCL_COLL, "plan: local %s of %zu elements of type %d, %p -> %p",
        l->op.kind == DEV_OP_PREMULSUM ? "scale" : "copy", l->count, l->dtype, l->src, l->dst);
  cc->locals[cc->nlocal++] = *l;
}

/* Sends to self and receives from self pair in posting order: the k-th of each make one copy. */
static ncclResult_t plan_self_pairs(struct coll_comm* cc, coll_task_list_t* tasks) {
  int s = 0, r = 0;
  for (;;) {
    while (s < tasks->n && !(tasks->items[s].func == FUNC_SEND &&
                             tasks->items[s].root == cc->rank && tasks->items[s].count > 0))
      s++;
    while (r < tasks->n && !(tasks->items[r].func == FUNC_RECV &&
                             tasks->items[r].root == cc->rank && tasks->items[r].count > 0))
      r++;
    if (s == tasks->n && r == tasks->n) return ncclSuccess;
    if (s == tasks->n || r == tasks->n) {
      WARN(
          "Rank %d: a %s self has no matching %s self in the group (sends to self and receives "
          "from self must come in pairs of equal size)",
          cc->rank, s == tasks->n ? "receive from" : "send to",
          s == tasks->n ? "send to" : "receive from");
      return ncclInvalidUsage;
    }
    const coll_task_t* st = &tasks->items[s];
    const coll_task_t* rt = &tasks->items[r];
    size_t sbytes = st->count * datatype_size((ncclDataType_t)st->dtype);
    size_t rbytes = rt->count * datatype_size((ncclDataType_t)rt->dtype);
    if (sbytes != rbytes) {
      WARN("Rank %d: a send to self of %zu bytes is paired with a receive from self of %zu bytes",
           cc->rank, sbytes, rbytes);
      return ncclInvalidUsage;
    }
    if (st->sendbuff != rt->recvbuff) {
      local_op_t l = {.src = st->sendbuff,
                      .dst = rt->recvbuff,
                      .count = sbytes,
                      .dtype = ncclInt8,
                      .op = {.kind = DEV_OP_SUM}};
      plan_add_local(cc, &l);
    }
    s++;
    r++;
  }
}

int coll_p2p_nchannels(size_t bytes, int nranks, int nchannels, int min_channels) {
  int nch = coll_op_nchannels(bytes, nchannels, min_channels);
  size_t want = (bytes + COLL_P2P_MIN_CHANNEL_BYTES - 1) / COLL_P2P_MIN_CHANNEL_BYTES;
  if (nranks > 2 && bytes <= (size_t)COLL_P2P_SPREAD_MAX_BYTES) {
    size_t share = (size_t)(nchannels / nranks);
    if (want > share) want = share;
  }
  if (want < 1) want = 1;
  if (min_channels <= 0 && want < (size_t)nch) nch = (int)want;
  return nch;
}

/* A point-to-point task's distance: a send to rank+d and a receive from rank-d have the same d,
 * on their two ranks. */
static int plan_p2p_distance(const struct coll_comm* cc, const coll_task_t* t) {
  int n = cc->nranks;
  return t->func == FUNC_SEND ? (t->root - cc->rank + n) % n : (cc->rank - t->root + n) % n;
}

static void plan_p2p(struct coll_comm* cc, const coll_task_t* t, int* nreqs) {
  size_t esize = datatype_size((ncclDataType_t)t->dtype);
  size_t bytes = t->count * esize;
  int nch = coll_p2p_nchannels(bytes, cc->nranks, cc->nchannels, cc->min_channels);
  /* Messages at distance d (send to rank+d, receive from rank-d: the same d on both sides) start
   * at channel d * nchannels / nranks, so an AlltoAll's peers (and its copy to self) land on
   * different blocks instead of queueing on the same ones. */
  int d = plan_p2p_distance(cc, t);
  int first = (int)(((size_t)d * (size_t)cc->nchannels) / (size_t)cc->nranks);
  int proto = plan_p2p_proto(cc, bytes);
  /* Steps in bytes (a multiple of 16 when the slot allows), the same on both sides whatever
   * datatype each posted. */
  size_t chunk = coll_chunk_elems(cc->slot_data_bytes[proto], 1);
  int is_send = t->func == FUNC_SEND;
  for (int i = 0; i < nch; i++) {
    size_t boff, bn;
    coll_split(bytes, nch, i, COLL_P2P_ALIGN_BYTES, &boff, &bn);
    if (bn == 0) continue;
    int c = (first + i) % cc->nchannels;
    work_t w = {.func = t->func,
                .algo = ALGO_RING,
                .proto = (uint8_t)proto,
                .dtype = t->dtype,
                .op = t->op,
                .sendbuff = t->sendbuff,
                .recvbuff = t->recvbuff,
                .count = t->count,
                .chan_off = boff,
                .chan_count = bn,
                .chunk = chunk,
                .root = t->root,
                .root_idx = -1,
                .nranks = cc->nranks};
    plan_add_work(cc, c, &w);
    plan_req_add(cc, c, t->root, is_send, nreqs);
  }
  uint32_t bit = 1u << (ALGO_RING * PROTO_COUNT + proto);
  unsigned long flags = NCCL_P2P | ((cc->logged[t->func] & bit) ? 0 : NCCL_INIT);
  cc->logged[t->func] |= bit;
  INFO(flags, "%s: %zu bytes %s peer %d -> proto %s nchannels %d (%s)", coll_func_name(t->func),
       bytes, is_send ? "to" : "from", t->root, coll_proto_name(proto), nch,
       cc->filter.proto_set[t->func] ? "NCCL_PROTO, then size" : "by size");
}

/* A point-to-point task that moves data over a connection (not to self, not empty). */
static bool plan_is_p2p(const struct coll_comm* cc, const coll_task_t* t) {
  return (t->func == FUNC_SEND || t->func == FUNC_RECV) && t->count > 0 && t->root != cc->rank;
}

ncclResult_t coll_plan_build(struct coll_comm* cc, coll_task_list_t* tasks, int* nreqs_out) {
  int nranks = cc->nranks;
  int nreqs = 0;
  ncclResult_t res = ncclSuccess;
  CHECK(plan_reserve(cc, tasks->n));
  plan_t* plan = &cc->plan;
  plan->nchannels = 0;
  cc->nlocal = 0;
  for (int c = 0; c < cc->nchannels; c++) {
    plan->nwork[c] = 0;
    plan->works[c] = cc->works + (size_t)c * (size_t)(tasks->n > 0 ? tasks->n : 1);
  }

  /* Collectives first, in posting order: every rank posts them in the same order. The direct
   * algorithms run in a kernel of their own (src/device/cuda/kernel_direct.cu), so a group's
   * collectives are all direct or none: if the model chose them for some and not for others, it
   * chooses again for those without them. This depends only on the collectives, which every
   * rank posts alike. */
  if (nranks > 1) {
    bool direct = false, other = false;
    for (int i = 0; i < tasks->n; i++) {
      coll_task_t* t = &tasks->items[i];
      if (t->func == FUNC_SEND || t->func == FUNC_RECV || t->count == 0) continue;
      CHECK_GOTO(coll_plan_choose(cc, t), res, out);
      const bool d = vocab_algo_is_direct(t->algo);
      direct |= d;
      other |= !d;
    }
    if (direct && other) {
      cc->no_direct = true;
      for (int i = 0; i < tasks->n && res == ncclSuccess; i++) {
        coll_task_t* t = &tasks->items[i];
        if (t->func == FUNC_SEND || t->func == FUNC_RECV || t->count == 0) continue;
        if (vocab_algo_is_direct(t->algo)) res = coll_plan_choose(cc, t);
      }
      cc->no_direct = false;
      CHECK_GOTO(res, res, out);
    }
  }
  for (int i = 0; i < tasks->n; i++) {
    coll_task_t* t = &tasks->items[i];
    if (t->func == FUNC_SEND || t->func == FUNC_RECV || t->count == 0) continue;
    if (nranks == 1) { /* no peer: a copy, a scaling, or nothing at all (in place) */
      local_op_t l;
      if (coll_local_of_task(t, &l)) plan_add_local(cc, &l);
      t->algo = ALGO_RING;
      t->proto = PROTO_SIMPLE;
      t->nchannels = 0;
      t->forced = false;
    } else {
      CHECK_GOTO(plan_collective(cc, t, &nreqs), res, out);
    }
    cc->last = (coll_choice_t){.func = t->func,
                               .algo = t->algo,
                               .proto = t->proto,
                               .nchannels = t->nchannels,
                               .forced = t->forced};
  }

  /* Copies to self, then point-to-point by distance: step d sends to rank+d and receives from
   * rank-d, so at each step the pairs that talk are at the same step on both sides. Posting order
   * is kept within a step (several messages to one peer arrive in the order they were posted). */
  CHECK_GOTO(plan_self_pairs(cc, tasks), res, out);
  int norder = 0;
  for (int i = 0; i < tasks->n; i++)
    if (plan_is_p2p(cc, &tasks->items[i]))
      cc->order[norder++] = (uint64_t)plan_p2p_distance(cc, &tasks->items[i]) << 32 | (uint32_t)i;
  qsort(cc->order, (size_t)norder, sizeof(*cc->order), u64_cmp); /* keys never equal */
  for (int k = 0; k < norder; k++) plan_p2p(cc, &tasks->items[(uint32_t)cc->order[k]], &nreqs);
  plan->nlocal = cc->nlocal;
  plan->local = cc->locals;

out:
  /* Reset the dedup marks for the next run. */
  for (int k = 0; k < nreqs; k++) {
    const conn_request_t* r = &cc->reqs[k];
    cc->conn_mark[((size_t)r->channel * (size_t)nranks + (size_t)r->peer) * 2 +
                  (size_t)r->is_send] = 0;
  }
  if (res != ncclSuccess) {
    plan->nchannels = 0;
    plan->nlocal = 0;
    return res;
  }
  *nreqs_out = nreqs;
  return ncclSuccess;
}

/* ---- The last plan, again -----------------------------------------------------------------------
 * A training or serving loop posts the same groups over and over (the same buckets, the same
 * buffers); planning them again cost the launching thread of an eager 4-GPU ring Reduce 18 % of
 * its time (a sampled profile). Everything the planner reads besides the tasks is fixed for the
 * communicator's life (resources, filters, channels) except the registrations (windows read in
 * place), which regs_gen tracks, and a tuner plugin's answers, which are never kept. */
static bool task_same(const coll_task_t* a, const coll_task_t* b) {
  return a->func == b->func && a->dtype == b->dtype && a->root == b->root &&
         a->op.kind == b->op.kind && a->op.scalar_on_device == b->op.scalar_on_device &&
         a->op.scalar == b->op.scalar && a->op.scalar_ptr == b->op.scalar_ptr &&
         a->sendbuff == b->sendbuff && a->recvbuff == b->recvbuff && a->count == b->count &&
         a->select == b->select && a->select_forced == b->select_forced && a->min_ch == b->min_ch &&
         a->max_ch == b->max_ch;
}

uint64_t coll_regs_gen(struct coll_comm* cc) {
  return __atomic_load_n(&cc->regs_gen, __ATOMIC_ACQUIRE);
}

bool coll_plan_reuse(struct coll_comm* cc, coll_task_list_t* tasks) {
  if (!cc->kept_valid || tasks->n != cc->kept.n || cc->kept_regs_gen != coll_regs_gen(cc))
    return false;
  for (int i = 0; i < tasks->n; i++)
    if (!task_same(&tasks->items[i], &cc->kept.items[i])) return false;
  for (int i = 0; i < tasks->n; i++) {
    coll_task_t* t = &tasks->items[i];
    const coll_task_t* k = &cc->kept.items[i];
    t->algo = k->algo;
    t->proto = k->proto;
    t->nchannels = k->nchannels;
    t->forced = k->forced;
    t->model_us = k->model_us;
  }
  /* Its connection requests, less those made since (the first run of a plan makes them): with
   * none left the group launches on the calling thread. */
  int n = 0;
  for (int k = 0; k < cc->plan_nreqs; k++) {
    const conn_request_t r = cc->reqs[k];
    if (!plan_conn_made(cc, r.channel, r.peer, r.is_send)) cc->reqs[n++] = r;
  }
  cc->plan_nreqs = n;
  cc->plan_reuses++; /* cc->last is still the kept plan's: the build of it set it last */
  return true;
}

void coll_plan_keep(struct coll_comm* cc, const coll_task_list_t* tasks, uint64_t gen) {
  cc->kept_valid = false;
  if (cc->tuner != NULL || tasks->n == 0) return;
  if (tasks->n > cc->kept.cap) {
    coll_task_t* p = realloc(cc->kept.items, (size_t)tasks->n * sizeof(*p));
    if (p == NULL) return; /* nothing kept: the next group is planned again */
    cc->kept.items = p;
    cc->kept.cap = tasks->n;
  }
  memcpy(cc->kept.items, tasks->items, (size_t)tasks->n * sizeof(*tasks->items));
  cc->kept.n = tasks->n;
  cc->kept_regs_gen = gen;
  cc->kept_valid = true;
}

void coll_plan_forget(struct coll_comm* cc) {
  cc->kept_valid = false;
}
