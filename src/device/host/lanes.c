/* Work items to lanes, and the round-robin progress of a channel's lanes.
 *
 * A collective work item becomes one lane (ring, or a one-rank local step) or two (tree: up and
 * down, the root's down lane gated on its up lane); it runs to completion before the next item.
 * A run of consecutive point-to-point items becomes one lane each, all progressed together, so
 * a rank may post its send to A before its receive from B while A does the opposite. Items to the
 * same peer in the same direction share a connection and stay in posting order.
 *
 * The planner decided everything about each item (steps of work.chunk units, clamped to the slots;
 * the root's ring position; point-to-point in bytes; copies to self are plan.local, not items):
 * this file only checks that the connections it needs exist and hold a step. */
#include <stdlib.h>
#include <string.h>

#include "device/host/host_exec.h"

static ncclResult_t lanes_reserve(host_chan_t* ch, int n) {
  if (n <= ch->lanes_cap) return ncclSuccess;
  host_lane_t* l = realloc(ch->lanes, (size_t)n * sizeof(*l));
  if (l == NULL) {
    WARN("Host executor: out of memory for %d lanes on channel %d", n, ch->id);
    return ncclSystemError;
  }
  ch->lanes = l;
  ch->lanes_cap = n;
  return ncclSuccess;
}

/* What the host executor offers: no LL128 (it needs a GPU's whole 128-byte stores), never the
 * staged direct algorithms (GPUs only); nhosts 0: the planner checked that direct items stay on one
 * host. */
static vocab_caps_t host_caps(const host_chan_t* ch) {
  return (vocab_caps_t){
      .ll128 = false, .direct = true, .staged = false, .nranks = ch->ex->comm->nranks};
}

static bool func_is_p2p(int func) {
  return func == FUNC_SEND || func == FUNC_RECV;
}

/* Checks what every item needs: a datatype, a protocol the host runs. */
static ncclResult_t work_check(const host_chan_t* ch, const work_t* w, size_t* esize) {
  size_t es = datatype_size((ncclDataType_t)w->dtype);
  if (es == 0 || w->func >= FUNC_COUNT) {
    WARN("Host executor: work item with function %d and datatype %d on channel %d is invalid",
         w->func, w->dtype, ch->id);
    return ncclInternalError;
  }
  const vocab_caps_t caps = host_caps(ch);
  if (!vocab_proto_supported(w->proto, &caps)) {
    WARN(
        "Host executor: protocol %d is not available without a GPU (only Simple and LL); "
        "check NCCL_PROTO",
        w->proto);
    return ncclInternalError;
  }
  *esize = es;
  return ncclSuccess;
}

/* Every connection to and from the listed peers exists and a slot holds a step of the lane. */
static ncclResult_t conns_check(host_chan_t* ch, host_lane_t* ln, const int* peers, int npeers,
                                bool send, bool recv) {
  const dev_channel_t* dc = host_chan_dev(ch);
  const size_t step_bytes = ln->geo.chunk * ln->geo.unit;
  for (int j = 0; j < npeers; j++) {
    for (int dir = 0; dir < 2; dir++) {
      if (!(dir == 0 ? send : recv)) continue;
      const conn_fifo_t* f = (dir == 0 ? dc->send : dc->recv)[peers[j]];
      if (f == NULL) {
        WARN(
            "Host executor: rank %d has no connection %s rank %d on channel %d; the planner "
            "must connect it before launching work that uses it",
            ch->ex->comm->rank, dir == 0 ? "to" : "from", peers[j], ch->id);
        return ncclInternalError;
      }
      if (step_bytes == 0 || step_bytes > host_fifo_capacity(f, ln->geo.proto)) {
        WARN(
            "Host executor: channel %d: a step of %zu bytes does not fit a %s slot of %zu bytes "
            "(the planner sizes steps to the slots)",
            ch->id, step_bytes, ln->geo.proto == PROTO_LL ? "LL" : "Simple",
            host_fifo_capacity(f, ln->geo.proto));
        return ncclInternalError;
      }
    }
  }
  if (ln->geo.proto == PROTO_LL) CHECK(host_chan_stage_reserve(ch, step_bytes));
  return ncclSuccess;
}

/* Lane of kind `kind` of item w (vocab.h's steps_lane: as every executor makes it), with no peer
 * yet; esize: the item's datatype size. */
static void lane_init(host_lane_t* ln, const host_chan_t* ch, const work_t* w, size_t esize,
                      int kind) {
  const exec_comm_t* comm = ch->ex->comm;
  const step_item_t it = steps_item_of_work(w, esize);
  *ln = (host_lane_t){.geo = steps_lane(kind, &it, comm->nranks, comm->rank),
                      .dtype = w->dtype,
                      .op = &w->op,
                      .prev = HOST_NO_PEER,
                      .next = HOST_NO_PEER,
                      .up = HOST_NO_PEER,
                      .peer = HOST_NO_PEER,
                      .pred = -1,
                      .nwait = 0};
}

/* A direct lane (OneShot, TwoShot) of item w: every other rank, both ways. */
static ncclResult_t lane_direct(host_chan_t* ch, host_lane_t* ln) {
  for (int j = 0; j < ln->geo.n - 1; j++) ln->dpeer[j] = steps_other_rank(ln->geo.rank, j);
  return conns_check(ch, ln, ln->dpeer, ln->geo.n - 1, true, true);
}

/* Runs lane ln as far as its connections allow. */
static ncclResult_t lane_progress(host_chan_t* ch, host_lane_t* ln) {
  while (ln->pos < ln->nops) {
    if (ln->gate != NULL && ln->gate->pos <= ln->pos) {
      ln->nwait = 0; /* waits on its own other lane, not on a peer */
      break;
    }
    host_step_t st;
    bool ran;
    host_lane_step(ln, ln->pos, &st);
    CHECK(host_step_try(ch, ln, &st, &ran));
    if (!ran) break;
    ln->pos++;
  }
  return ncclSuccess;
}

static bool lane_done(const host_lane_t* ln) {
  return ln->pos >= ln->nops;
}

/* Progresses every lane round-robin until all are done; waits only after a pass that moved none. */
static ncclResult_t lanes_run(host_chan_t* ch, host_lane_t* lanes, int nlanes) {
  int left = 0;
  for (int i = 0; i < nlanes; i++) left += !lane_done(&lanes[i]);
  host_chan_busy(ch);
  while (left > 0) {
    bool moved = false;
    for (int i = 0; i < nlanes; i++) {
      host_lane_t* ln = &lanes[i];
      if (lane_done(ln)) continue;
      if (ln->pred >= 0 && !lane_done(&lanes[ln->pred])) continue;
      size_t before = ln->pos;
      CHECK(lane_progress(ch, ln));
      if (ln->pos != before) moved = true;
      if (lane_done(ln)) left--;
    }
    if (moved) {
      host_chan_busy(ch);
    } else if (left > 0) {
      CHECK(host_chan_idle(ch, lanes, nlanes));
    }
  }
  return ncclSuccess;
}

/* ---- Zero copy (device.h, "Registered windows read in place") ------------------------------- */
/* A OneShot AllGather of `bytes` bytes (unit 1, LL, one chunk) over the item's connections: the
 * probe and the release, exactly the lines an AllGather item of that size would carry. */
static ncclResult_t zc_allgather(host_chan_t* ch, const work_t* w, const void* mine, void* all,
                                 size_t bytes) {
  const work_t g = {.func = FUNC_ALLGATHER,
                    .algo = ALGO_ONESHOT,
                    .proto = PROTO_LL,
                    .dtype = ncclUint8,
                    .sendbuff = mine,
                    .recvbuff = all,
                    .count = bytes,
                    .chan_off = 0,
                    .chan_count = bytes,
                    .chunk = bytes,
                    .root = w->root,
                    .nranks = w->nranks};
  host_lane_t* ln = &ch->lanes[0];
  lane_init(ln, ch, &g, 1, LANE_DIRECT);
  CHECK(lane_direct(ch, ln));
  ln->nops = host_lane_nops(ln);
  return lanes_run(ch, ln, 1);
}

/* rank r's contribution as it counts: its own scalar for PreMulSum */
static dev_redop_t zc_rank_op(const work_t* w, const zc_desc_t* d, int r) {
  dev_redop_t op = w->op;
  if (op.kind == DEV_OP_PREMULSUM) {
    op.scalar = d[r].scalar;
    op.scalar_on_device = 0;
  }
  return op;
}

/* dst[0, n) = every rank's src[r] combined in rank order (each with its own scalar), finished. */
static void zc_fold(const work_t* w, const zc_desc_t* d, const char* const* src, char* dst,
                    size_t n) {
  for (int r = 0; r < w->nranks; r++) {
    const dev_redop_t op = zc_rank_op(w, d, r);
    host_reduce(dst, src[r], r == 0 ? NULL : dst, n, w->dtype, &op);
  }
  host_postop(dst, n, w->dtype, &w->op);
}

/* The item's slice with every rank's input read where it lies. */
static ncclResult_t zc_run_slice(host_chan_t* ch, const work_t* w, const zc_desc_t* d,
                                 size_t esize) {
  const exec_comm_t* comm = ch->ex->comm;
  const int n = comm->nranks, me = comm->rank;
  const char* src[DIRECT_MAX_RANKS];
  for (int p = 0; p < n; p++) {
    const uint32_t win = (uint32_t)d[p].win;
    src[p] = p == me ? (const char*)w->sendbuff
             : win > 0
                 ? (const char*)comm->zc_base[(size_t)(win - 1) * (size_t)n + (size_t)p] + d[p].off
                 : NULL;
  }
  const size_t off = w->chan_off * esize, bytes = w->chan_count * esize;
  char* out = w->recvbuff;
  switch (w->func) {
    case FUNC_BROADCAST:
      if (out + off != src[w->root] + off) memcpy(out + off, src[w->root] + off, bytes);
      return ncclSuccess;
    case FUNC_ALLGATHER:
      for (int p = 0; p < n; p++) {
        char* dst = out + (size_t)p * w->count * esize + off;
        if (dst != src[p] + off) memcpy(dst, src[p] + off, bytes);
      }
      return ncclSuccess;
    case FUNC_ALLREDUCE: { /* out of place on every rank (zc_usable) */
      const char* s[DIRECT_MAX_RANKS];
      for (int p = 0; p < n; p++) s[p] = src[p] + off;
      zc_fold(w, d, s, out + off, w->chan_count);
      return ncclSuccess;
    }
    default: { /* ReduceScatter: block `me` of every input; in place, the output is this rank's
                * own block, so the combination builds in the staging buffer piece by piece */
      const size_t blk = (size_t)me * w->count * esize + off;
      const char* s[DIRECT_MAX_RANKS];
      for (int p = 0; p < n; p++) s[p] = src[p] + blk;
      if (out + off != s[me]) {
        zc_fold(w, d, s, out + off, w->chan_count);
        return ncclSuccess;
      }
      const size_t piece = ch->stage_bytes / esize;
      if (piece == 0) {
        WARN("Host executor: channel %d has no staging for an in-place ReduceScatter", ch->id);
        return ncclInternalError;
      }
      for (size_t done = 0; done < w->chan_count; done += piece) {
        const size_t k = dev_min(piece, w->chan_count - done);
        const char* sp[DIRECT_MAX_RANKS];
        for (int p = 0; p < n; p++) sp[p] = s[p] + done * esize;
        zc_fold(w, d, sp, ch->stage[HOST_STAGE_SEND], k);
        memcpy(out + off + done * esize, ch->stage[HOST_STAGE_SEND], k * esize);
      }
      return ncclSuccess;
    }
  }
}

/* The probe; then either the slice read in place and the release (true in *done), or nothing
 * more (the caller runs the item's ordinary steps). */
static ncclResult_t zc_try(host_chan_t* ch, const work_t* w, size_t esize, bool* done) {
  const exec_comm_t* comm = ch->ex->comm;
  const int n = comm->nranks, me = comm->rank;
  zc_desc_t d[DIRECT_MAX_RANKS], mine;
  *done = false;
  mine.win = w->zc_win >= 0 ? (uint64_t)(w->zc_win + 1) : 0;
  if (w->func == FUNC_ALLREDUCE && w->sendbuff == w->recvbuff) mine.win |= ZC_DESC_INPLACE;
  mine.off = w->zc_off;
  mine.scalar = host_scalar_bits(&w->op, esize);
  CHECK(lanes_reserve(ch, 1));
  CHECK(zc_allgather(ch, w, &mine, d, sizeof(zc_desc_t)));
  if (!zc_usable(w->func, w->root, n, d)) return ncclSuccess;
  if (comm->zc_base == NULL) {
    WARN("Host executor: rank %d: the ranks' windows are shared but this rank has no table", me);
    return ncclInternalError;
  }
  __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the peers' inputs, before their probe lines */
  CHECK(host_chan_stage_reserve(ch, w->chunk * esize));
  CHECK(zc_run_slice(ch, w, d, esize));
  INFO(NCCL_COLL, "Host executor: rank %d channel %d: %s of %zu elements read in place", me, ch->id,
       w->func == FUNC_ALLREDUCE   ? "AllReduce"
       : w->func == FUNC_ALLGATHER ? "AllGather"
       : w->func == FUNC_BROADCAST ? "Broadcast"
                                   : "ReduceScatter",
       w->chan_count);
  __atomic_thread_fence(__ATOMIC_RELEASE); /* every read done before the release line */
  uint64_t rel = 0, rels[DIRECT_MAX_RANKS];
  CHECK(zc_allgather(ch, w, &rel, rels, ZC_DONE_BYTES));
  *done = true;
  return ncclSuccess;
}

ncclResult_t host_coll_run(host_chan_t* ch, const work_t* w) {
  const dev_channel_t* dc = host_chan_dev(ch);
  size_t esize;
  if (w->count == 0 || w->chan_count == 0) return ncclSuccess;
  CHECK(work_check(ch, w, &esize));
  const vocab_caps_t caps = host_caps(ch);
  if (!vocab_supports(w->func, w->algo, w->proto, &caps) || caps.nranks < 2) {
    WARN(
        "Host executor: algorithm %d cannot run function %d on %d ranks (the planner runs "
        "one-rank work locally; tree and TwoShot run AllReduce only, the direct algorithms up "
        "to %d ranks and not Reduce)",
        w->algo, w->func, caps.nranks, DIRECT_MAX_RANKS);
    return ncclInternalError;
  }
  if (w->zc && w->algo == ALGO_ONESHOT) {
    bool done;
    CHECK(zc_try(ch, w, esize, &done));
    if (done) return ncclSuccess;
  }
  CHECK(lanes_reserve(ch, 2));
  host_lane_t* ln = &ch->lanes[0];
  lane_init(ln, ch, w, esize,
            w->algo == ALGO_RING   ? LANE_RING
            : w->algo == ALGO_TREE ? LANE_TREE_UP
                                   : LANE_DIRECT);
  int nlanes = 1;
  if (w->algo == ALGO_RING) {
    ln->geo.ring = dc->ring_ranks;
    ln->geo.idx = dc->ring_index;
    ln->prev = dc->ring_prev;
    ln->next = dc->ring_next;
    CHECK(conns_check(ch, ln, &ln->next, 1, true, false));
    CHECK(conns_check(ch, ln, &ln->prev, 1, false, true));
  } else if (w->algo == ALGO_TREE) {
    ln->up = dc->tree_up;
    ln->geo.has_up = ln->up >= 0;
    for (int j = 0; j < TREE_MAX_CHILDREN; j++)
      if (dc->tree_down[j] >= 0) ln->down[ln->geo.ndown++] = dc->tree_down[j];
    if (ln->up < 0 && ln->geo.ndown == 0) {
      WARN(
          "Host executor: rank %d is alone in channel %d's tree of %d ranks (no parent, no "
          "children)",
          ln->geo.rank, ch->id, ln->geo.n);
      return ncclInternalError;
    }
    if (ln->up >= 0) CHECK(conns_check(ch, ln, &ln->up, 1, true, true));
    CHECK(conns_check(ch, ln, ln->down, ln->geo.ndown, true, true));
    ch->lanes[1] = *ln;
    ch->lanes[1].geo.kind = LANE_TREE_DOWN;
    if (ln->up < 0) ch->lanes[1].gate = ln; /* the root sends down what its up lane finished */
    nlanes = 2;
  } else { /* OneShot, TwoShot */
    CHECK(lane_direct(ch, ln));
    /* an in-place combination in rank order builds in the send staging (prims.c) */
    CHECK(host_chan_stage_reserve(ch, ln->geo.chunk * ln->geo.unit));
  }
  for (int i = 0; i < nlanes; i++) ch->lanes[i].nops = host_lane_nops(&ch->lanes[i]);
  return lanes_run(ch, ch->lanes, nlanes);
}

ncclResult_t host_p2p_run(host_chan_t* ch, const work_t* works, int nwork) {
  const exec_comm_t* comm = ch->ex->comm;
  CHECK(lanes_reserve(ch, nwork));
  host_lane_t* lanes = ch->lanes;
  int nlanes = 0;
  for (int i = 0; i < nwork; i++) {
    const work_t* w = &works[i];
    size_t esize;
    if (w->count == 0 || w->chan_count == 0) continue;
    CHECK(work_check(ch, w, &esize));
    if (w->root < 0 || w->root >= comm->nranks || w->root == comm->rank) {
      WARN("Host executor: %s peer %d on rank %d of %d (copies to self are local operations)",
           w->func == FUNC_SEND ? "send" : "receive", w->root, comm->rank, comm->nranks);
      return ncclInternalError;
    }
    host_lane_t* ln = &lanes[nlanes];
    lane_init(ln, ch, w, esize, w->func == FUNC_SEND ? LANE_SEND : LANE_RECV); /* in bytes */
    ln->peer = w->root;
    CHECK(conns_check(ch, ln, &ln->peer, 1, ln->geo.kind == LANE_SEND, ln->geo.kind == LANE_RECV));
    for (int j = nlanes - 1; j >= 0; j--) { /* same connection: wait for the earlier item */
      if (lanes[j].geo.kind == ln->geo.kind && lanes[j].peer == ln->peer) {
        ln->pred = j;
        break;
      }
    }
    nlanes++;
  }
  for (int i = 0; i < nlanes; i++) lanes[i].nops = host_lane_nops(&lanes[i]);
  return lanes_run(ch, lanes, nlanes);
}

ncclResult_t host_list_run(host_chan_t* ch, const work_t* works, int nwork) {
  int i = 0;
  while (i < nwork) {
    if (!func_is_p2p(works[i].func)) {
      CHECK(host_coll_run(ch, &works[i]));
      i++;
      continue;
    }
    int j = i;
    while (j < nwork && func_is_p2p(works[j].func)) j++;
    CHECK(host_p2p_run(ch, works + i, j - i));
    i = j;
  }
  return ncclSuccess;
}
