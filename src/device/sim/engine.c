/* Timing a launch: every rank's plan becomes lanes of steps by the executors' own step math
 * (vocab/vocab.h), and each step is timed when what it waits for is known.
 *
 * A channel runs its work items in order, as one block of the CUDA executor does: a collective on
 * a ring is one lane on the whole block, and so is a direct one (OneShot, TwoShot: every other
 * rank); a tree AllReduce an up lane on the block's first half and a down lane on its second (the
 * root's down step k waits for its up step k); a run of point-to-point items a send half and a
 * receive half, each walking its items in order. The next item starts when both halves are done
 * with the previous. The plan's local operations (plan.local) are one copy each on channel 0.
 *
 * Step k of a lane starts when its half is free, its receives have arrived (the k-th message on a
 * connection is the sender's k-th send on it: both ends cut it alike), and each connection it sends
 * on has a free slot (the receiver consumed the message NCCL_STEPS before). It takes a fixed cost
 * plus its data time: its wire bytes at the connection's rate (P2P, SHM: written by the sender's
 * block) or at the block's local rate (NET: into the proxy's buffer; the proxy then sends it at the
 * connection's rate, one message after the other, and it arrives a hop's latency later), or, for
 * a step that only receives, its bytes at the block's copy or reduce rate.
 *
 * Rates: each lane's sending to a peer is a flow over the links its transport crosses (cluster.c),
 * capped by what its block pushes (shared among the peers one step sends to). Flows run together
 * when their lanes do: the lanes of one segment at the same place in their half's order (a
 * collective's lanes; the k-th send of every rank's point-to-point run). Each such phase's flows
 * share the links max-min fairly, and those shares are the rates (memoised by flow set). Messages
 * of different phases can overlap on a NIC without sharing it (a proxy sends on after its block
 * has moved on), so each iteration also ends no earlier than every NIC's bytes at its rate allow
 * (nic_bound: a bound on the time, not a schedule).
 *
 * A staged direct item (OneShot/TwoShot with Simple: no FIFO, every rank reads the peers' staging)
 * is a lane of its own kind (ENG_LANE_STAGED below): per round a copy into staging that signals
 * every peer, then a barrier on every peer's signal and the reads, each source's bytes at its
 * flow's fair share, all of them at the block's load rate. Its channels load no connections, so
 * a launch's start costs count only the channels that do.
 *
 * Channels whose lanes are alike on every rank (same items, same peers, same rates) form a class;
 * one channel of each class is timed, the others take its times. */
#include <math.h>
#include <stdlib.h>

#include "device/sim/sim_int.h"

#define NROLES (STEP_ROLE_P2P_PEER + 1)
#define NO_CONN (-1)
/* A local operation of the plan (plan.local: a copy to self, a one-rank collective): one step on
 * channel 0's block, at the memory copy rate. Not a lane kind of vocab.h's. */
#define ENG_LANE_LOCAL 0xff
/* A staged direct item (OneShot/TwoShot with PROTO_SIMPLE, device.h "Staged direct algorithms"):
 * part `part` of `parts` on this channel's block, in rounds of the planner's window. Each round is
 * phases of two steps: a copy into this rank's staging that ends in a signal to every other rank
 * (a zero-byte message on each connection), then a step that waits for every rank's signal (the
 * barrier) and reads what it needs from the peers' staging. A connection carries data only where
 * its destination reads its source's staging (stage_reads); the others carry the signals. Not a
 * lane kind of vocab.h's. */
#define ENG_LANE_STAGED 0xfe

typedef struct eng_conn {
  int channel, src, dst;
  int tr, src_nic, dst_nic;
  int relay;   /* NET: the source node's GPU that relays to the source NIC (PXN), -1 none */
  bool used;   /* some lane sends on it */
  double rate; /* B/us: the least of its lanes' flow rates (reports, classes) */
  double lat;
  uint64_t sent, recvd;
  double arrive[NCCL_STEPS];
  double consumed[NCCL_STEPS];
  double net_free;
  int loaded;     /* the last iteration_start pass that counted it (chan_loads) */
  double wire;    /* bytes sent */
  double it_wire; /* ... before this iteration (nic_bound) */
  double it_go;   /* NET: the proxy's first send of this iteration, INFINITY none */
} eng_conn_t;

typedef struct eng_lane {
  step_lane_t geo;
  int rank, channel;
  int half; /* 0, 1, or 2: the whole block */
  int algo; /* of its work item */
  int item; /* index of its work item on the channel */
  int seg;  /* segment (items that run together) on the channel */
  int gate; /* lane whose step k this lane's step k waits for, -1 */
  int conn_send[NROLES], conn_recv[NROLES];
  double rate[NROLES]; /* B/us of each send role's flow */
  size_t pos, nsteps;
  double t0, t1;
  double* done_at; /* per step, kept for a lane others gate on */
  int part, parts; /* a staged lane's part (its geo.idx) and the item's parts */
} eng_lane_t;

/* One rank's channel: its lanes lanes[first .. first + n), in item order. */
typedef struct eng_chan {
  int first, n;
  int cur;           /* first lane of the running segment */
  double free_at[2]; /* each half */
  double seg_start;
  int cls; /* class index */
} eng_chan_t;

typedef struct engine {
  const sim_view_t* v;
  int nch; /* channels of the communicator */
  eng_lane_t* lanes;
  int nlanes, lanes_cap;
  eng_chan_t* chans; /* nranks * nch */
  eng_conn_t* conns;
  int nconns, conns_cap;
  int* table; /* open addressing: conn index + 1, 0 empty */
  size_t table_cap;
  int load_stamp; /* chan_loads' pass */
  uint64_t steps;
} engine_t;

static int exec_of(const sim_view_t* v) {
  return v->exec;
}

/* ---- Connections ----------------------------------------------------------------------------- */
static uint64_t conn_key(int channel, int src, int dst) {
  return ((uint64_t)channel << 44) | ((uint64_t)src << 22) | (uint64_t)dst;
}

static size_t key_slot(uint64_t key, size_t cap) {
  return (size_t)((key * 0x9e3779b97f4a7c15ull) >> 17) & (cap - 1);
}

static ncclResult_t table_grow(engine_t* e) {
  size_t cap = e->table_cap ? 2 * e->table_cap : 1024;
  int* t = calloc(cap, sizeof(*t));
  if (t == NULL) {
    WARN("sim: out of memory for %zu connections", cap);
    return ncclSystemError;
  }
  for (int i = 0; i < e->nconns; i++) {
    const eng_conn_t* c = &e->conns[i];
    size_t s = key_slot(conn_key(c->channel, c->src, c->dst), cap);
    while (t[s] != 0) s = (s + 1) & (cap - 1);
    t[s] = i + 1;
  }
  free(e->table);
  e->table = t;
  e->table_cap = cap;
  return ncclSuccess;
}

/* The table slot of the connection, or the empty slot where it would go (table_cap > 0). */
static size_t conn_slot(const engine_t* e, int channel, int src, int dst) {
  size_t s = key_slot(conn_key(channel, src, dst), e->table_cap);
  while (e->table[s] != 0) {
    const eng_conn_t* c = &e->conns[e->table[s] - 1];
    if (c->channel == channel && c->src == src && c->dst == dst) break;
    s = (s + 1) & (e->table_cap - 1);
  }
  return s;
}

/* The connection's index, -1 when there is none. */
static int conn_find(const engine_t* e, int channel, int src, int dst) {
  if (e->table_cap == 0) return -1;
  return e->table[conn_slot(e, channel, src, dst)] - 1;
}

static ncclResult_t conn_get(engine_t* e, int channel, int src, int dst, int* out) {
  if ((size_t)(e->nconns + 1) * 2 > e->table_cap) CHECK(table_grow(e));
  size_t s = conn_slot(e, channel, src, dst);
  if (e->table[s] != 0) {
    *out = e->table[s] - 1;
    return ncclSuccess;
  }
  if (e->nconns == e->conns_cap) {
    int cap = e->conns_cap ? 2 * e->conns_cap : 1024;
    eng_conn_t* p = realloc(e->conns, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      WARN("sim: out of memory for %d connections", cap);
      return ncclSystemError;
    }
    e->conns = p;
    e->conns_cap = cap;
  }
  eng_conn_t* c = &e->conns[e->nconns];
  memset(c, 0, sizeof(*c));
  c->channel = channel;
  c->src = src;
  c->dst = dst;
  c->src_nic = c->dst_nic = c->relay = -1;
  e->v->conn(e->v->conn_arg, channel, src, dst, &c->tr, &c->src_nic, &c->dst_nic, &c->relay);
  const sim_rank_view_t* a = &e->v->ranks[src];
  const sim_rank_view_t* b = &e->v->ranks[dst];
  c->lat = sim_net_latency(e->v->net, c->tr, a->node, a->gpu, b->node, b->gpu, c->relay);
  e->table[s] = e->nconns + 1;
  *out = e->nconns++;
  return ncclSuccess;
}

/* ---- Lanes from work items ------------------------------------------------------------------- */
static ncclResult_t lane_push(engine_t* e, eng_lane_t** out) {
  if (e->nlanes == e->lanes_cap) {
    int cap = e->lanes_cap ? 2 * e->lanes_cap : 1024;
    eng_lane_t* p = realloc(e->lanes, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      WARN("sim: out of memory for %d lanes", cap);
      return ncclSystemError;
    }
    e->lanes = p;
    e->lanes_cap = cap;
  }
  eng_lane_t* l = &e->lanes[e->nlanes++];
  memset(l, 0, sizeof(*l));
  l->gate = -1;
  for (int k = 0; k < NROLES; k++) l->conn_send[k] = l->conn_recv[k] = NO_CONN;
  *out = l;
  return ncclSuccess;
}

/* Whom a role names, for the lane's rank. */
static int role_peer(const eng_lane_t* l, const dev_channel_t* ch, int role) {
  if (role == STEP_ROLE_RING_PREV) return ch->ring_prev;
  if (role == STEP_ROLE_RING_NEXT) return ch->ring_next;
  if (role == STEP_ROLE_TREE_UP) return ch->tree_up;
  if (l->geo.kind == LANE_DIRECT) return steps_other_rank(l->geo.rank, role);
  return role < TREE_MAX_CHILDREN ? ch->tree_down[role] : -1;
}

/* The roles a lane sends to and receives from over its steps (bit per role). */
static void lane_roles(const eng_lane_t* l, unsigned* send, unsigned* recv) {
  const step_lane_t* g = &l->geo;
  *send = *recv = 0;
  switch (g->kind) {
    case LANE_RING: {
      bool chain = g->func == FUNC_BROADCAST || g->func == FUNC_REDUCE;
      int d = steps_ring_mod(g->idx - g->root_idx - (g->func == FUNC_REDUCE ? 1 : 0), g->n);
      if (!chain || d < g->n - 1) *send |= 1u << STEP_ROLE_RING_NEXT;
      if (!chain || d > 0) *recv |= 1u << STEP_ROLE_RING_PREV;
      break;
    }
    case LANE_TREE_UP:
      for (int j = 0; j < g->ndown; j++) *recv |= 1u << j;
      if (g->has_up) *send |= 1u << STEP_ROLE_TREE_UP;
      break;
    case LANE_TREE_DOWN:
      for (int j = 0; j < g->ndown; j++) *send |= 1u << j;
      if (g->has_up) *recv |= 1u << STEP_ROLE_TREE_UP;
      break;
    case LANE_SEND:
      *send |= 1u << STEP_ROLE_P2P_PEER;
      break;
    case LANE_RECV:
      *recv |= 1u << STEP_ROLE_P2P_PEER;
      break;
    case LANE_DIRECT: /* every other rank both ways; a Broadcast from its root only */
      if (g->func == FUNC_BROADCAST) {
        if (g->rank == g->root_idx)
          for (int j = 0; j < g->n - 1; j++) *send |= 1u << j;
        else
          *recv |= 1u << steps_peer_index(g->rank, g->root_idx);
        break;
      }
      for (int j = 0; j < g->n - 1; j++) *send |= *recv |= 1u << j;
      break;
    default:
      break;
  }
}

static ncclResult_t lane_connect(engine_t* e, eng_lane_t* l, const dev_channel_t* ch,
                                 int p2p_peer) {
  unsigned send, recv;
  lane_roles(l, &send, &recv);
  for (int role = 0; role < NROLES; role++) {
    if (!((send | recv) >> role & 1)) continue;
    int peer = role == STEP_ROLE_P2P_PEER ? p2p_peer : role_peer(l, ch, role);
    if (peer < 0 || peer >= e->v->nranks) {
      WARN("sim: rank %d channel %d: a %s lane names no peer for role %d", l->rank, l->channel,
           "work", role);
      return ncclInternalError;
    }
    if (send >> role & 1) CHECK(conn_get(e, l->channel, l->rank, peer, &l->conn_send[role]));
    if (recv >> role & 1) CHECK(conn_get(e, l->channel, peer, l->rank, &l->conn_recv[role]));
  }
  return ncclSuccess;
}

/* The lane of kind `kind` of item w (vocab.h's steps_lane, as every executor makes it): the
 * planner decided its slice, steps and root (device.h's work_t), point-to-point in bytes,
 * collectives in elements. */
static void lane_geo(eng_lane_t* l, const work_t* w, const exec_comm_t* x, size_t esize, int kind) {
  const step_item_t it = steps_item_of_work(w, esize);
  l->algo = w->algo;
  l->geo = steps_lane(kind, &it, x->nranks, x->rank);
}

/* plan.local's operations, on channel 0 before its items (each a one-step lane of the block). */
static ncclResult_t chan_locals(engine_t* e, int r, int c, int* seg) {
  const plan_t* p = e->v->ranks[r].plan;
  eng_chan_t* ec = &e->chans[(size_t)r * e->nch + c];
  if (c != 0 || p == NULL) return ncclSuccess;
  for (int i = 0; i < p->nlocal; i++) {
    const local_op_t* o = &p->local[i];
    size_t esize = datatype_size((ncclDataType_t)o->dtype);
    if (o->count == 0 || esize == 0) continue;
    eng_lane_t* l;
    CHECK(lane_push(e, &l));
    l->geo = (step_lane_t){.kind = ENG_LANE_LOCAL,
                           .func = FUNC_SEND,
                           .proto = PROTO_SIMPLE,
                           .unit = esize,
                           .count = o->count,
                           .cnt = o->count,
                           .chunk = o->count,
                           .n = 1,
                           .rank = r};
    l->rank = r;
    l->channel = c;
    l->item = -1 - i;
    l->seg = ++*seg;
    l->half = 2;
    l->nsteps = 1;
    ec->n++;
  }
  return ncclSuccess;
}

/* ---- Staged lanes ---------------------------------------------------------------------------- */
/* Whether rank `reader` reads rank src's staging in a staged item of g's function (device.h:
 * AllReduce, AllGather, ReduceScatter: every rank every other's; Broadcast: the others the
 * root's; Reduce: the root every other's). */
static bool stage_reads(const step_lane_t* g, int reader, int src) {
  if (reader == src) return false;
  if (g->func == FUNC_BROADCAST) return src == g->root_idx;
  if (g->func == FUNC_REDUCE) return reader == g->root_idx;
  return true;
}

/* The ranks whose staging `reader` reads (its block's loads are shared among them). */
static int stage_sources(const step_lane_t* g, int reader) {
  int k = 0;
  for (int p = 0; p < g->n; p++) k += stage_reads(g, reader, p);
  return k;
}

static int stage_phases(const step_lane_t* g) {
  return g->func == FUNC_ALLREDUCE && g->algo == ALGO_TWOSHOT ? 4 : 2;
}

/* Elements of part `part` of a span of n (device.h's part_span: on STAGE_ALIGN-byte multiples). */
static size_t stage_part_len(const eng_lane_t* l, size_t n) {
  size_t off = 0, len = 0;
  size_t unit = l->geo.unit;
  span_part(n, l->parts, l->part, unit < STAGE_ALIGN ? STAGE_ALIGN / unit : 1, &off, &len);
  return len;
}

/* Bytes of step k of a staged lane: what it copies into this rank's staging (copy) and what it
 * reads from the staging of peer rank p (from[p]), as the kernel's rounds cut them
 * (staged_device.cuh, stage_round). */
static void stage_step_bytes(const eng_lane_t* l, size_t k, double* copy, double* from) {
  const step_lane_t* g = &l->geo;
  const int phases = stage_phases(g);
  const size_t round = k / (size_t)phases, ph = k % (size_t)phases;
  const size_t w0 = round * g->chunk;
  const size_t wn = dev_min(g->chunk, g->count - w0);
  const double u = (double)g->unit;
  const bool twoshot = phases == 4;
  *copy = 0;
  for (int p = 0; p < g->n; p++) from[p] = 0;
  if (ph == 2) return; /* TwoShot's second signal */
  if (twoshot) {
    const size_t sp = ring_part(wn, (size_t)g->n, g->unit, wn);
    for (int q = 0; q < g->n; q++) {
      const size_t so = dev_min((size_t)q * sp, wn), sn = dev_min(sp, wn - so);
      const double pq = (double)stage_part_len(l, sn) * u;
      if (ph == 0) *copy += pq;
      if (ph == 3 && q != g->rank) from[q] = pq; /* the others' reduced slices */
    }
    if (ph == 1) {
      const size_t so = dev_min((size_t)g->rank * sp, wn), sn = dev_min(sp, wn - so);
      for (int p = 0; p < g->n; p++)
        if (p != g->rank) from[p] = (double)stage_part_len(l, sn) * u;
    }
    return;
  }
  const double pn = (double)stage_part_len(l, wn) * u;
  if (ph == 0) {
    if (g->func == FUNC_REDUCESCATTER)
      *copy = pn * g->n;
    else if (g->func != FUNC_BROADCAST)
      *copy = pn;
    else if (g->rank == g->root_idx) /* and into its own output, out of place */
      *copy = g->sendbuff != g->recvbuff ? 2 * pn : pn;
    return;
  }
  for (int p = 0; p < g->n; p++)
    if (stage_reads(g, g->rank, p)) from[p] = pn;
}

/* Rank r's lane of staged item w on channel c: a connection to and from every other rank. */
static ncclResult_t stage_lane(engine_t* e, int r, int c, int item, int seg, const work_t* w,
                               size_t esize) {
  const exec_comm_t* x = e->v->ranks[r].exec;
  eng_lane_t* l;
  CHECK(lane_push(e, &l));
  l->geo = (step_lane_t){.kind = ENG_LANE_STAGED,
                         .func = w->func,
                         .proto = PROTO_SIMPLE,
                         .algo = w->algo,
                         .unit = esize,
                         .sendbuff = w->sendbuff,
                         .recvbuff = w->recvbuff,
                         .count = w->count,
                         .cnt = w->count,
                         .chunk = w->chunk,
                         .n = x->nranks,
                         .idx = (int)w->chan_off,
                         .root_idx = w->root,
                         .rank = r};
  l->part = (int)w->chan_off;
  l->parts = (int)w->chan_count;
  l->algo = w->algo;
  l->rank = r;
  l->channel = c;
  l->item = item;
  l->seg = seg;
  l->half = 2;
  if (l->parts < 1 || l->part >= l->parts || x->nranks - 1 > STEP_MAX_PEERS) {
    WARN("sim: rank %d channel %d: a staged item's part %d of %d (%d ranks) is out of range", r, c,
         l->part, l->parts, x->nranks);
    return ncclInternalError;
  }
  for (int j = 0; j < x->nranks - 1; j++) {
    const int p = steps_other_rank(r, j);
    CHECK(conn_get(e, c, r, p, &l->conn_send[j]));
    CHECK(conn_get(e, c, p, r, &l->conn_recv[j]));
  }
  l->nsteps = steps_div_up(w->count, w->chunk) * (size_t)stage_phases(&l->geo);
  return ncclSuccess;
}

/* The lanes of one rank's channel c. */
static ncclResult_t chan_lanes(engine_t* e, int r, int c) {
  const sim_rank_view_t* rv = &e->v->ranks[r];
  const exec_comm_t* x = rv->exec;
  eng_chan_t* ec = &e->chans[(size_t)r * e->nch + c];
  ec->first = e->nlanes;
  ec->n = 0;
  int seg = -1;
  CHECK(chan_locals(e, r, c, &seg));
  if (rv->plan == NULL || c >= rv->plan->nchannels) return ncclSuccess;
  const dev_channel_t* ch = &x->channels[c];
  bool prev_p2p = false;
  for (int i = 0; i < rv->plan->nwork[c]; i++) {
    const work_t* w = &rv->plan->works[c][i];
    size_t esize = datatype_size((ncclDataType_t)w->dtype);
    if (esize == 0 || w->chan_count == 0) continue;
    if (w->chunk == 0) { /* the planner sizes every item's steps; the executors take them as such */
      WARN("sim: rank %d channel %d: work item %d has steps of 0 units", r, c, i);
      return ncclInternalError;
    }
    bool p2p = w->func == FUNC_SEND || w->func == FUNC_RECV;
    if (!(p2p && prev_p2p)) seg++;
    prev_p2p = p2p;
    eng_lane_t* l;
    if (p2p) { /* the send half or the receive half; never to self (plan.local) */
      CHECK(lane_push(e, &l));
      lane_geo(l, w, x, esize, w->func == FUNC_SEND ? LANE_SEND : LANE_RECV);
      l->rank = r;
      l->channel = c;
      l->item = i;
      l->seg = seg;
      l->half = w->func == FUNC_SEND ? 0 : 1;
      CHECK(lane_connect(e, l, ch, w->root));
      l->nsteps = steps_count(&l->geo);
      ec->n++;
      continue;
    }
    if (vocab_algo_is_staged(w->algo, w->proto)) {
      CHECK(stage_lane(e, r, c, i, seg, w, esize));
      ec->n++;
      continue;
    }
    if (w->algo == ALGO_RING || vocab_algo_is_direct(w->algo)) {
      /* One lane on the whole block: the ring, or every other rank straight away. */
      CHECK(lane_push(e, &l));
      lane_geo(l, w, x, esize, w->algo == ALGO_RING ? LANE_RING : LANE_DIRECT);
      if (w->algo == ALGO_RING) {
        l->geo.ring = ch->ring_ranks;
        l->geo.idx = ch->ring_index;
      }
      l->rank = r;
      l->channel = c;
      l->item = i;
      l->seg = seg;
      l->half = 2;
      CHECK(lane_connect(e, l, ch, -1));
      l->nsteps = steps_count(&l->geo);
      ec->n++;
      continue;
    }
    /* Tree AllReduce: an up lane and a down lane, one per half. */
    int ndown = 0;
    for (int k = 0; k < TREE_MAX_CHILDREN; k++) ndown += ch->tree_down[k] >= 0;
    int first = e->nlanes;
    for (int half = 0; half < 2; half++) {
      CHECK(lane_push(e, &l));
      lane_geo(l, w, x, esize, half == 0 ? LANE_TREE_UP : LANE_TREE_DOWN);
      l->geo.has_up = ch->tree_up >= 0;
      l->geo.ndown = ndown;
      l->rank = r;
      l->channel = c;
      l->item = i;
      l->seg = seg;
      l->half = half;
      CHECK(lane_connect(e, l, ch, -1));
      l->nsteps = steps_count(&l->geo);
      ec->n++;
    }
    /* The root's down lane waits for its up lane step by step. */
    if (ch->tree_up < 0) e->lanes[first + 1].gate = first;
  }
  return ncclSuccess;
}

/* ---- Rates ----------------------------------------------------------------------------------- */
typedef struct eng_flow {
  int lane, role;
  int phase;
} eng_flow_t;

static int popcount(unsigned v) {
  return __builtin_popcount(v);
}

static int flow_phase_cmp(const void* a, const void* b) {
  const eng_flow_t* x = a;
  const eng_flow_t* y = b;
  return (x->phase > y->phase) - (x->phase < y->phase);
}

/* A phase: lanes of the same segment at the same place in their half's order. */
static int lane_phase_key(const engine_t* e, int li, int* pos_out) {
  const eng_lane_t* l = &e->lanes[li];
  int pos = 0;
  for (int j = li - 1; j >= 0; j--) {
    const eng_lane_t* m = &e->lanes[j];
    if (m->rank != l->rank || m->channel != l->channel || m->seg != l->seg) break;
    if (m->half == l->half || m->half == 2 || l->half == 2) pos++;
  }
  *pos_out = pos;
  return l->seg;
}

/* What one block (or half) of the lane writes to a peer, GB/s. */
static double lane_push_gbs(const eng_lane_t* l, int ex) {
  if (l->geo.kind == LANE_SEND && l->geo.proto == PROTO_SIMPLE) return sim_calib.p2p_push_gbs[ex];
  return sim_calib.push_gbs[ex][l->geo.proto];
}

static ncclResult_t solve_phase(engine_t* e, const eng_flow_t* fl, int n, bool* hit) {
  const sim_view_t* v = e->v;
  const sim_net_t* net = v->net;
  ncclResult_t res = ncclSuccess;
  int* off = NULL;
  int* links = NULL;
  double* fcap = NULL;
  double* rate = NULL;
  CHECK_GOTO(MEM_CALLOC(&off, (size_t)n + 1), res, out);
  CHECK_GOTO(MEM_CALLOC(&links, (size_t)n * SIM_PATH_MAX), res, out);
  CHECK_GOTO(MEM_CALLOC(&fcap, (size_t)n), res, out);
  CHECK_GOTO(MEM_CALLOC(&rate, (size_t)n), res, out);
  int nl = 0;
  for (int f = 0; f < n; f++) {
    const eng_lane_t* l = &e->lanes[fl[f].lane];
    const eng_conn_t* c = &e->conns[l->conn_send[fl[f].role]];
    const sim_rank_view_t* a = &v->ranks[c->src];
    const sim_rank_view_t* b = &v->ranks[c->dst];
    off[f] = nl;
    nl += sim_net_path(net, c->tr, a->node, a->gpu, b->node, b->gpu, c->src_nic, c->dst_nic,
                       c->relay, links + nl);
    unsigned send, recv;
    lane_roles(l, &send, &recv);
    /* The block writes P2P and SHM data itself, to every peer of a step at once; a NET flow is
     * the proxy's, fed by the block (step_try). A staged flow is the reading block's loads, shared
     * among the ranks it reads from. */
    if (l->geo.kind == ENG_LANE_STAGED)
      fcap[f] = 1000.0 * sim_calib.stage_pull_gbs / stage_sources(&l->geo, c->dst);
    else if (c->tr != SIM_TR_NET)
      fcap[f] = 1000.0 * lane_push_gbs(l, exec_of(v)) / popcount(send);
  }
  off[n] = nl;
  sim_flows_t p = {.nlinks = net->nlinks,
                   .cap = net->cap,
                   .nflows = n,
                   .off = off,
                   .links = links,
                   .flow_cap = fcap};
  bool h = false;
  if (v->memo != NULL)
    res = sim_fair_share_memo(v->memo, &p, rate, &h);
  else
    res = sim_fair_share(&p, rate);
  if (res != ncclSuccess) goto out;
  *hit = *hit && h;
  for (int f = 0; f < n; f++) {
    eng_lane_t* l = &e->lanes[fl[f].lane];
    eng_conn_t* c = &e->conns[l->conn_send[fl[f].role]];
    l->rate[fl[f].role] = rate[f];
    if (!c->used || rate[f] < c->rate) c->rate = rate[f];
    c->used = true;
  }
out:
  free(rate);
  free(fcap);
  free(links);
  free(off);
  return res;
}

static ncclResult_t solve_rates(engine_t* e, bool* memo_hit) {
  ncclResult_t res = ncclSuccess;
  int n = 0, cap = 0;
  eng_flow_t* fl = NULL;
  for (int i = 0; i < e->nlanes; i++) {
    const eng_lane_t* l = &e->lanes[i];
    if (l->nsteps == 0) continue;
    for (int role = 0; role < NROLES; role++) {
      if (l->conn_send[role] == NO_CONN) continue;
      if (l->geo.kind == ENG_LANE_STAGED &&
          !stage_reads(&l->geo, steps_other_rank(l->rank, role), l->rank))
        continue; /* carries the barrier's signals only */
      if (n == cap) {
        cap = cap ? 2 * cap : 1024;
        eng_flow_t* p = realloc(fl, (size_t)cap * sizeof(*p));
        if (p == NULL) {
          free(fl);
          WARN("sim: out of memory for %d flows", cap);
          return ncclSystemError;
        }
        fl = p;
      }
      int pos = 0;
      int seg = lane_phase_key(e, i, &pos);
      fl[n++] = (eng_flow_t){.lane = i, .role = role, .phase = seg * 65536 + pos};
    }
  }
  *memo_hit = n > 0;
  qsort(fl, (size_t)n, sizeof(*fl), flow_phase_cmp);
  for (int a = 0; a < n && res == ncclSuccess;) {
    int b = a;
    while (b < n && fl[b].phase == fl[a].phase) b++;
    res = solve_phase(e, fl + a, b - a, memo_hit);
    a = b;
  }
  free(fl);
  return res;
}

/* ---- Classes of channels --------------------------------------------------------------------- */
static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0x100000001b3ull;
}

static uint64_t conn_sig(const engine_t* e, int ci) {
  if (ci == NO_CONN) return 7;
  const eng_conn_t* c = &e->conns[ci];
  uint64_t h = mix((uint64_t)c->src, (uint64_t)c->dst);
  h = mix(h, (uint64_t)c->tr);
  h = mix(h, (uint64_t)llround(c->rate * 1024.0));
  return mix(h, (uint64_t)llround(c->lat * 1e6));
}

/* Channels alike on every rank get one class; the first of each is its representative. */
static ncclResult_t classify(engine_t* e, int* nclasses, int** rep_out) {
  int nch = e->nch, nr = e->v->nranks;
  uint64_t* sig = NULL;
  int* rep = NULL;
  ncclResult_t res = ncclSuccess;
  CHECK_GOTO(MEM_CALLOC(&sig, (size_t)nch), res, fail);
  CHECK_GOTO(MEM_CALLOC(&rep, (size_t)nch), res, fail);
  for (int r = 0; r < nr; r++) {
    for (int c = 0; c < nch; c++) {
      const eng_chan_t* ec = &e->chans[(size_t)r * nch + c];
      uint64_t h = mix(sig[c], (uint64_t)ec->n);
      for (int i = ec->first; i < ec->first + ec->n; i++) {
        const eng_lane_t* l = &e->lanes[i];
        const step_lane_t* g = &l->geo;
        h = mix(h, ((uint64_t)g->kind << 40) | ((uint64_t)g->func << 32) |
                       ((uint64_t)g->proto << 24) | ((uint64_t)l->half << 16) |
                       (uint64_t)(l->gate >= 0 ? 1 + i - l->gate : 0));
        h = mix(h, g->unit);
        h = mix(h, g->cnt);
        h = mix(h, g->chunk);
        h = mix(h, g->count);
        h = mix(h, ((uint64_t)g->idx << 32) | (uint64_t)g->root_idx);
        h = mix(h, ((uint64_t)g->has_up << 8) | (uint64_t)g->ndown);
        h = mix(h, (uint64_t)l->seg);
        for (int role = 0; role < NROLES; role++) {
          h = mix(h, conn_sig(e, l->conn_send[role]));
          h = mix(h, conn_sig(e, l->conn_recv[role]));
          h = mix(h, (uint64_t)llround(l->rate[role] * 1024.0));
        }
      }
      sig[c] = h;
    }
  }
  int n = 0;
  for (int c = 0; c < nch; c++) {
    rep[c] = c;
    for (int d = 0; d < c; d++)
      if (sig[d] == sig[c]) {
        rep[c] = rep[d];
        break;
      }
    if (rep[c] == c) n++;
  }
  free(sig);
  *nclasses = n;
  *rep_out = rep;
  return ncclSuccess;
fail:
  free(sig);
  free(rep);
  return res;
}

/* ---- Steps ----------------------------------------------------------------------------------- */
static double max2(double a, double b) {
  return a > b ? a : b;
}

/* Step l->pos of a staged lane (stage_step_bytes): a copy step runs when each connection has a
 * free slot for its signal and costs the copy at the block's rate; a read step waits for every
 * peer's signal, then costs the barrier and the slowest of its reads at the fair-share rates of
 * the flows from each source. */
static ncclResult_t stage_step_try(engine_t* e, eng_lane_t* l, double ready, bool* ran,
                                   double* end) {
  const step_lane_t* g = &l->geo;
  const bool signal = l->pos % 2 == 0;
  const int npeers = g->n - 1;
  double from[DIRECT_MAX_RANKS] = {0}, copy = 0;
  double start = ready, data = 0;
  int nsrc = 0; /* the sources a read step loads from */
  *ran = false;
  stage_step_bytes(l, l->pos, &copy, from);
  for (int j = 0; j < npeers; j++) {
    const eng_conn_t* c = &e->conns[signal ? l->conn_send[j] : l->conn_recv[j]];
    if (signal) {
      if (!fifo_may_send(c->recvd, c->sent)) return ncclSuccess;
      if (c->sent >= NCCL_STEPS) start = max2(start, c->consumed[fifo_slot(c->sent - NCCL_STEPS)]);
    } else {
      if (c->sent <= c->recvd) return ncclSuccess; /* that rank has not signalled yet */
      start = max2(start, c->arrive[fifo_slot(c->recvd)]);
    }
  }
  if (signal) {
    data = copy / (1000.0 * sim_calib.stage_copy_gbs);
  } else {
    double loads = 0; /* every source's bytes, this rank's own staging included */
    for (int j = 0; j < npeers; j++) {
      const double b = from[steps_other_rank(g->rank, j)];
      const double r = e->conns[l->conn_recv[j]].rate;
      if (b > 0 && r > 0) data = max2(data, b / r);
      loads += b;
    }
    if (loads > 0) {
      /* A reduction reads this rank's own staging too, as does an AllGather's copy of its own
       * block; TwoShot's last step copies the peers' slices only. */
      const bool last = stage_phases(g) == 4 && l->pos % 4 == 3;
      const bool reduce = !last && g->func != FUNC_ALLGATHER && g->func != FUNC_BROADCAST;
      nsrc = stage_sources(g, g->rank);
      if (reduce || g->func == FUNC_ALLGATHER) {
        loads += loads / nsrc;
        nsrc++;
      }
      const double gbs = reduce ? sim_calib.stage_reduce_gbs : sim_calib.stage_load_gbs;
      data = max2(data, loads / (1000.0 * gbs));
    }
  }
  double fixed = sim_calib.stage_barrier_us;
  if (signal)
    fixed = copy > 0 ? sim_calib.stage_copy_us : 0.0; /* a Broadcast's other ranks copy nothing */
  else if (nsrc > 0)
    fixed += sim_calib.stage_source_us * nsrc;
  const double finish = start + fixed + data;
  for (int j = 0; j < npeers; j++) {
    if (signal) {
      eng_conn_t* c = &e->conns[l->conn_send[j]];
      c->arrive[fifo_slot(c->sent)] = finish + c->lat;
      c->sent++;
    } else {
      eng_conn_t* c = &e->conns[l->conn_recv[j]];
      c->consumed[fifo_slot(c->recvd)] = finish;
      c->recvd++;
      c->wire += from[steps_other_rank(g->rank, j)]; /* read by this rank from c->src */
    }
  }
  if (l->pos == 0) l->t0 = start;
  l->pos++;
  l->t1 = finish;
  e->steps++;
  *end = finish;
  *ran = true;
  return ncclSuccess;
}

/* Tries step l->pos; true when it ran. *free_at: the half's (or block's) free time. */
static ncclResult_t step_try(engine_t* e, eng_lane_t* l, double ready, bool* ran, double* end) {
  const sim_view_t* v = e->v;
  const int ex = exec_of(v);
  if (l->geo.kind == ENG_LANE_STAGED) return stage_step_try(e, l, ready, ran, end);
  step_t st;
  steps_plan(&l->geo, l->pos, &st);
  if (l->geo.kind == ENG_LANE_LOCAL) st.nelem = l->geo.cnt; /* one copy */
  double start = ready;
  *ran = false;
  if (l->gate >= 0) {
    const eng_lane_t* g = &e->lanes[l->gate];
    if (g->pos <= l->pos) return ncclSuccess;
    start = max2(start, g->done_at[l->pos]);
  }
  for (int j = 0; j < st.nrecv; j++) {
    int ci = l->conn_recv[st.recv[j]];
    if (ci == NO_CONN) goto missing;
    const eng_conn_t* c = &e->conns[ci];
    if (c->sent <= c->recvd) return ncclSuccess; /* not sent yet */
    start = max2(start, c->arrive[fifo_slot(c->recvd)]);
  }
  for (int j = 0; j < st.nsend; j++) {
    int ci = l->conn_send[st.send[j]];
    if (ci == NO_CONN) goto missing;
    const eng_conn_t* c = &e->conns[ci];
    if (!fifo_may_send(c->recvd, c->sent)) return ncclSuccess; /* no free slot yet */
    if (c->sent >= NCCL_STEPS) /* the slot's last use must have been read */
      start = max2(start, c->consumed[fifo_slot(c->sent - NCCL_STEPS)]);
  }
  const int proto = l->geo.proto;
  const double bytes = (double)st.nelem * (double)l->geo.unit;
  /* A direct step that sends each peer its own part (TwoShot, ReduceScatter) puts that part on
   * each connection, not the whole step. */
  double peer_bytes = bytes;
  if (l->geo.kind == LANE_DIRECT && steps_per_peer(&st)) {
    size_t off = 0, cnt = 0;
    steps_peer_span(&st, 0, &off, &cnt);
    peer_bytes = (double)cnt * (double)l->geo.unit;
  }
  const double wire = sim_wire_bytes(proto, peer_bytes);
  const double push = 1000.0 * lane_push_gbs(l, ex);
  double data = 0;
  for (int j = 0; j < st.nsend; j++) {
    const eng_conn_t* c = &e->conns[l->conn_send[st.send[j]]];
    double r = c->tr == SIM_TR_NET ? push : l->rate[st.send[j]];
    if (r > 0) data = max2(data, wire / r);
  }
  if (l->geo.kind == ENG_LANE_LOCAL)
    data = max2(data, bytes / (1000.0 * sim_calib.memcpy_gbs[ex]));
  else if (st.reduce && st.nrecv > 0)
    data = max2(data, bytes / (1000.0 * sim_calib.reduce_gbs[ex]));
  else if (st.nsend == 0)
    data = max2(data, bytes / (1000.0 * sim_calib.copy_gbs[ex]));
  const double finish = start + sim_calib.step_us[ex][proto] + data;
  for (int j = 0; j < st.nsend; j++) {
    eng_conn_t* c = &e->conns[l->conn_send[st.send[j]]];
    double arrive = finish + c->lat;
    if (c->tr == SIM_TR_NET) {
      double go = max2(finish + sim_calib.net_step_us, c->net_free);
      if (go < c->it_go) c->it_go = go;
      double r = l->rate[st.send[j]];
      c->net_free = go + (r > 0 ? wire / r : 0);
      arrive = c->net_free + c->lat;
    }
    c->arrive[fifo_slot(c->sent)] = arrive;
    c->sent++;
    c->wire += wire;
  }
  for (int j = 0; j < st.nrecv; j++) {
    eng_conn_t* c = &e->conns[l->conn_recv[st.recv[j]]];
    c->consumed[fifo_slot(c->recvd)] = finish;
    c->recvd++;
  }
  if (l->pos == 0) l->t0 = start;
  if (l->done_at != NULL) l->done_at[l->pos] = finish;
  l->pos++;
  l->t1 = finish;
  e->steps++;
  *end = finish;
  *ran = true;
  return ncclSuccess;
missing:
  WARN(
      "sim: rank %d channel %d: a step uses a connection its lane did not list (step math and "
      "lane roles disagree)",
      l->rank, l->channel);
  return ncclInternalError;
}

/* Advances one rank's channel as far as it can; *moved counts the steps. */
static ncclResult_t chan_advance(engine_t* e, eng_chan_t* ec, uint64_t* moved) {
  for (;;) {
    if (ec->cur >= ec->n) return ncclSuccess;
    int seg = e->lanes[ec->first + ec->cur].seg;
    int end = ec->cur;
    bool all_done = true;
    bool progress = false;
    while (end < ec->n && e->lanes[ec->first + end].seg == seg) end++;
    /* Each half runs the first unfinished lane of the segment it owns. */
    for (int half = 0; half < 2; half++) {
      for (int i = ec->cur; i < end; i++) {
        eng_lane_t* l = &e->lanes[ec->first + i];
        if (l->half != half && l->half != 2) continue;
        if (l->pos >= l->nsteps) continue;
        if (l->half == 2 && half == 1) break; /* the whole block: advanced as half 0 */
        for (;;) {
          double ready = l->half == 2 ? max2(ec->free_at[0], ec->free_at[1]) : ec->free_at[half];
          bool ran = false;
          double fin = 0;
          CHECK(step_try(e, l, ready, &ran, &fin));
          if (!ran) break;
          progress = true;
          (*moved)++;
          if (l->half == 2)
            ec->free_at[0] = ec->free_at[1] = fin;
          else
            ec->free_at[half] = fin;
          if (l->pos >= l->nsteps) break;
        }
        break; /* the half's first unfinished lane only */
      }
    }
    for (int i = ec->cur; i < end; i++) {
      const eng_lane_t* l = &e->lanes[ec->first + i];
      if (l->pos < l->nsteps) all_done = false;
    }
    if (all_done) {
      double t = max2(ec->free_at[0], ec->free_at[1]);
      for (int i = ec->cur; i < end; i++) {
        eng_lane_t* l = &e->lanes[ec->first + i];
        if (l->nsteps == 0) l->t0 = l->t1 = t;
      }
      ec->free_at[0] = ec->free_at[1] = t; /* the next item starts on the whole block */
      ec->cur = end;
      continue;
    }
    if (!progress) return ncclSuccess;
  }
}

/* ---- The launch ------------------------------------------------------------------------------ */
static void engine_free(engine_t* e) {
  for (int i = 0; i < e->nlanes; i++) free(e->lanes[i].done_at);
  free(e->lanes);
  free(e->chans);
  free(e->conns);
  free(e->table);
}

/* Point-to-point flows summed over channels; a connection of a channel that was not timed takes
 * its class representative's bytes (channels of a class are alike). */
static ncclResult_t flows_report(engine_t* e, const int* rep, sim_result_t* out) {
  ncclResult_t res = ncclSuccess;
  size_t cap = 64;
  while (cap < (size_t)e->nconns * 2) cap *= 2;
  int* slot = calloc(cap, sizeof(*slot)); /* pair -> index + 1 */
  sim_flow_out_t* f = calloc((size_t)(e->nconns > 0 ? e->nconns : 1), sizeof(*f));
  int n = 0;
  if (slot == NULL || f == NULL) {
    WARN("sim: out of memory for the flow report (%d connections)", e->nconns);
    res = ncclSystemError;
    goto out;
  }
  for (int ci = 0; ci < e->nconns; ci++) {
    const eng_conn_t* c = &e->conns[ci];
    if (!c->used) continue;
    double wire = c->wire;
    if (rep[c->channel] != c->channel) {
      int ri = conn_find(e, rep[c->channel], c->src, c->dst);
      wire = ri >= 0 ? e->conns[ri].wire : 0;
    }
    /* one flow per pair and, between nodes, per pair of NICs (channels may differ in those) */
    const int snic = c->tr == SIM_TR_NET ? c->src_nic : -1;
    const int dnic = c->tr == SIM_TR_NET ? c->dst_nic : -1;
    uint64_t key = conn_key(0, c->src, c->dst);
    size_t s = key_slot(key, cap);
    while (slot[s] != 0 && !(f[slot[s] - 1].src == c->src && f[slot[s] - 1].dst == c->dst &&
                             f[slot[s] - 1].src_nic == snic && f[slot[s] - 1].dst_nic == dnic))
      s = (s + 1) & (cap - 1);
    if (slot[s] == 0) {
      const int relay = c->tr == SIM_TR_NET ? c->relay : -1;
      f[n] = (sim_flow_out_t){.src = c->src,
                              .dst = c->dst,
                              .transport = c->tr,
                              .src_nic = snic,
                              .dst_nic = dnic,
                              .relay = relay >= 0 ? c->src - e->v->ranks[c->src].gpu + relay : -1,
                              .gbs = c->rate / 1000.0};
      slot[s] = ++n;
    }
    sim_flow_out_t* o = &f[slot[s] - 1];
    o->bytes += (uint64_t)llround(wire);
    if (c->rate / 1000.0 < o->gbs) o->gbs = c->rate / 1000.0;
  }
  out->flows = f;
  out->nflows = n;
  f = NULL;
out:
  free(f);
  free(slot);
  return res;
}

/* The first iteration's spans of the first trace_ranks ranks (a channel of a class takes its
 * representative's times). */
static ncclResult_t trace_collect(engine_t* e, const int* rep, sim_result_t* out) {
  const sim_view_t* v = e->v;
  int nt = v->trace_ranks < v->nranks ? v->trace_ranks : v->nranks;
  int n = 0;
  for (int r = 0; r < nt; r++)
    for (int c = 0; c < e->nch; c++) n += e->chans[(size_t)r * e->nch + c].n;
  sim_span_t* s = calloc((size_t)(n > 0 ? n : 1), sizeof(*s));
  if (s == NULL) {
    WARN("sim: out of memory for %d trace spans", n);
    return ncclSystemError;
  }
  int k = 0;
  for (int r = 0; r < nt; r++)
    for (int c = 0; c < e->nch; c++) {
      const eng_chan_t* ec = &e->chans[(size_t)r * e->nch + c];
      const eng_chan_t* er = &e->chans[(size_t)r * e->nch + rep[c]];
      for (int i = 0; i < ec->n; i++) {
        const eng_lane_t* l = &e->lanes[ec->first + i];
        const eng_lane_t* t = &e->lanes[er->first + (i < er->n ? i : er->n - 1)];
        s[k++] = (sim_span_t){.rank = r,
                              .channel = c,
                              .half = l->half == 1 ? 1 : 0,
                              .func = l->geo.func,
                              .algo = (uint8_t)l->algo,
                              .proto = l->geo.proto,
                              .t0 = t->t0,
                              .t1 = t->t1,
                              .bytes = (uint64_t)l->geo.cnt * l->geo.unit};
      }
    }
  out->spans = s;
  out->nspans = k;
  return ncclSuccess;
}

/* Each rank's distinct (peer, direction) pairs of its point-to-point lanes (npeers[nranks]): the
 * lanes' (rank, direction, peer) keys sorted, then counted once each. */
static ncclResult_t p2p_peer_counts(const engine_t* e, int* npeers) {
  size_t n = 0;
  uint64_t* key = NULL;
  for (int i = 0; i < e->nlanes; i++)
    n += e->lanes[i].geo.kind == LANE_SEND || e->lanes[i].geo.kind == LANE_RECV;
  CHECK(MEM_CALLOC(&key, n > 0 ? n : 1));
  n = 0;
  for (int i = 0; i < e->nlanes; i++) {
    const eng_lane_t* l = &e->lanes[i];
    if (l->geo.kind != LANE_SEND && l->geo.kind != LANE_RECV) continue;
    bool send = l->geo.kind == LANE_SEND;
    const eng_conn_t* c =
        &e->conns[send ? l->conn_send[STEP_ROLE_P2P_PEER] : l->conn_recv[STEP_ROLE_P2P_PEER]];
    key[n++] =
        ((uint64_t)l->rank << 32) | ((uint64_t)send << 31) | (uint64_t)(send ? c->dst : c->src);
  }
  qsort(key, n, sizeof(*key), u64_cmp);
  for (size_t i = 0; i < n; i++)
    if (i == 0 || key[i] != key[i - 1]) npeers[key[i] >> 32]++;
  free(key);
  return ncclSuccess;
}

/* The NICs' line rates, as a bound on an iteration's end (not a schedule). Rates are shared only
 * among the flows of one phase (solve_rates), but a NET send's proxy goes on after its block has
 * moved to the next peer, so the messages of different phases (an alltoall's peers) overlap on a
 * NIC without sharing it. Here each NIC's bytes of the iteration, each way, are summed over every
 * channel (a channel of a class: its representative's), and its last byte cannot leave (or come
 * in) before the first of them left plus those bytes at the NIC's rate (its link's capacity: line
 * rate x nic_eff). Where that is later than the schedule's own last byte through the NIC (the
 * NIC was over its rate), every rank with a NET connection through it ends no earlier (the last
 * byte could be any of theirs); *bound: some rank's end was raised. A NIC that kept to its rate
 * in the schedule changes nothing. */
static ncclResult_t nic_bound(engine_t* e, const int* rep, double* end, bool* bound) {
  const sim_view_t* v = e->v;
  const sim_net_t* net = v->net;
  double* bytes = NULL;
  double* first = NULL;
  double* last = NULL; /* the schedule's last byte through the link */
  ncclResult_t res = ncclSuccess;
  CHECK_GOTO(MEM_CALLOC(&bytes, (size_t)net->nlinks), res, out);
  CHECK_GOTO(MEM_CALLOC(&first, (size_t)net->nlinks), res, out);
  CHECK_GOTO(MEM_CALLOC(&last, (size_t)net->nlinks), res, out);
  for (int l = 0; l < net->nlinks; l++) first[l] = INFINITY;
  for (int pass = 0; pass < 2; pass++)
    for (int ci = 0; ci < e->nconns; ci++) {
      const eng_conn_t* c = &e->conns[ci];
      if (!c->used || c->tr != SIM_TR_NET) continue;
      int ti = rep[c->channel] == c->channel ? ci : conn_find(e, rep[c->channel], c->src, c->dst);
      if (ti < 0) continue;
      const eng_conn_t* t = &e->conns[ti];
      double w = t->wire - t->it_wire;
      if (w <= 0) continue;
      const int src = c->src, dst = c->dst;
      const int tx = sim_net_nic_link(net, v->ranks[src].node, c->src_nic, 0);
      const int rx = sim_net_nic_link(net, v->ranks[dst].node, c->dst_nic, 1);
      if (pass == 0) {
        bytes[tx] += w;
        bytes[rx] += w;
        if (t->it_go < first[tx]) first[tx] = t->it_go;
        if (t->it_go < first[rx]) first[rx] = t->it_go;
        last[tx] = max2(last[tx], t->net_free);
        last[rx] = max2(last[rx], t->net_free);
        continue;
      }
      for (int k = 0; k < 2; k++) {
        int l = k == 0 ? tx : rx;
        if (!(net->cap[l] > 0) || !isfinite(first[l])) continue;
        double at = first[l] + bytes[l] / net->cap[l];
        if (at <= last[l]) continue;
        for (int j = 0; j < 2; j++) {
          int r = j == 0 ? src : dst;
          if (at > end[r]) {
            end[r] = at;
            *bound = true;
          }
        }
      }
    }
out:
  free(last);
  free(first);
  free(bytes);
  return res;
}

/* What channel ec's block loads before its first step, in connections: those its ring lanes send
 * or receive on, each counted once (stamp: this pass's mark). A ring's channel loads two (from
 * its previous rank, to its next), a chain's ends one (a Broadcast's root only sends, its last
 * rank only receives). A channel with other work on connections (trees, point-to-point, direct
 * LL) counts as a ring's two: their set-up was fitted per channel (and per peer, p2p_peer_us). */
static int chan_loads(engine_t* e, const eng_chan_t* ec, int stamp) {
  int n = 0;
  bool other = false;
  for (int i = ec->first; i < ec->first + ec->n; i++) {
    const eng_lane_t* l = &e->lanes[i];
    if (l->geo.kind == ENG_LANE_STAGED) continue;
    if (l->geo.kind != LANE_RING) {
      other = true;
      continue;
    }
    for (int k = 0; k < 2 * NROLES; k++) {
      int ci = k < NROLES ? l->conn_send[k] : l->conn_recv[k - NROLES];
      if (ci == NO_CONN || e->conns[ci].loaded == stamp) continue;
      e->conns[ci].loaded = stamp;
      n++;
    }
  }
  return other && n < 2 ? 2 : n;
}

/* Iteration it begins: rank r's host issues it after its process's earlier launches (a process
 * launches for per_process ranks, one after another, host_issue_us each); it reaches the GPU
 * launch_us later, starts when the GPU has finished the previous one (replayed from a CUDA graph:
 * graph_launch_us after the previous one, whatever the host does, and graph_start_ch_us per channel
 * that loads connections in place of the start costs below), and its blocks take
 * start_us + start_ch_us per channel that loads connections (a staged item's load none; a
 * channel that loads one, a chain's end, half: chan_loads) before the first step, and
 * p2p_peer_us per point-to-point peer and direction (the kernel sets up each one's transfers:
 * npeers, p2p_peer_counts). Lanes start over; connections keep their positions. */
static ncclResult_t iteration_start(engine_t* e, const int* rep, const int* npeers, int it,
                                    const double* end) {
  const sim_view_t* v = e->v;
  const int ex = exec_of(v);
  const int per = v->per_process > 0 ? v->per_process : 1;
  for (int i = 0; i < e->nconns; i++) {
    e->conns[i].it_wire = e->conns[i].wire;
    e->conns[i].it_go = INFINITY;
  }
  for (int r = 0; r < v->nranks; r++) {
    int nloads = 0; /* connections its channels load */
    for (int c = 0; c < e->nch; c++)
      nloads += chan_loads(e, &e->chans[(size_t)r * e->nch + c], ++e->load_stamp);
    const double nch = nloads / 2.0; /* ... as channels of a ring */
    double issue = (double)(it * per + v->ranks[r].local + 1) * sim_calib.host_issue_us[ex];
    double start = issue + sim_calib.launch_us[ex];
    if (it > 0 && v->graph) { /* the graph's next kernel: no host, its own start costs */
      start = end[r] + sim_calib.graph_launch_us[ex] + sim_calib.graph_start_ch_us[ex] * nch;
    } else {
      if (it > 0) start = max2(start, end[r]);
      start += sim_calib.start_us[ex] + sim_calib.start_ch_us[ex] * nch;
    }
    start += sim_calib.p2p_peer_us[ex] * npeers[r];
    for (int c = 0; c < e->nch; c++) {
      if (rep[c] != c) continue;
      eng_chan_t* ec = &e->chans[(size_t)r * e->nch + c];
      ec->cur = 0;
      ec->free_at[0] = ec->free_at[1] = start;
      for (int i = ec->first; i < ec->first + ec->n; i++) {
        eng_lane_t* l = &e->lanes[i];
        l->pos = 0;
        l->t0 = l->t1 = start;
      }
    }
  }
  return ncclSuccess;
}

ncclResult_t sim_engine_run(const sim_view_t* v, sim_result_t* out) {
  ncclResult_t res = ncclSuccess;
  engine_t e = {.v = v};
  int* rep = NULL;
  double* end = NULL; /* each rank's end of the last iteration */
  int* npeers = NULL; /* each rank's point-to-point peers and directions */
  memset(out, 0, sizeof(*out));
  out->func = out->algo = out->proto = -1;
  for (int r = 0; r < v->nranks; r++)
    if (v->ranks[r].exec != NULL && v->ranks[r].exec->nchannels > e.nch)
      e.nch = v->ranks[r].exec->nchannels;
  CHECK_GOTO(MEM_CALLOC(&e.chans, (size_t)v->nranks * (size_t)(e.nch > 0 ? e.nch : 1)), res, out);
  for (int r = 0; r < v->nranks; r++)
    for (int c = 0; c < e.nch; c++) CHECK_GOTO(chan_lanes(&e, r, c), res, out);
  for (int i = 0; i < e.nlanes; i++) {
    eng_lane_t* l = &e.lanes[i];
    if (l->gate < 0) continue;
    eng_lane_t* g = &e.lanes[l->gate];
    if (g->done_at == NULL && g->nsteps > 0)
      CHECK_GOTO(MEM_CALLOC(&g->done_at, g->nsteps), res, out);
  }
  CHECK_GOTO(solve_rates(&e, &out->memo_hit), res, out);
  CHECK_GOTO(classify(&e, &out->nclasses, &rep), res, out);

  /* The launch, iters times back to back: each iteration, passes over the representative
   * channels until every lane is done. */
  int iters = v->iters > 1 ? v->iters : 1;
  CHECK_GOTO(MEM_CALLOC(&end, (size_t)v->nranks), res, out);
  CHECK_GOTO(MEM_CALLOC(&npeers, (size_t)v->nranks), res, out);
  CHECK_GOTO(p2p_peer_counts(&e, npeers), res, out);
  for (int it = 0; it < iters; it++) {
    CHECK_GOTO(iteration_start(&e, rep, npeers, it, end), res, out);
    for (;;) {
      uint64_t moved = 0;
      bool left = false;
      for (int r = 0; r < v->nranks; r++)
        for (int c = 0; c < e.nch; c++) {
          if (rep[c] != c) continue;
          eng_chan_t* ec = &e.chans[(size_t)r * e.nch + c];
          CHECK_GOTO(chan_advance(&e, ec, &moved), res, out);
          if (ec->cur < ec->n) left = true;
        }
      if (!left) break;
      if (moved == 0) {
        WARN(
            "sim: the launch cannot finish: every channel left waits on another (the plans of "
            "the ranks do not match)");
        res = ncclInternalError;
        goto out;
      }
    }
    double last = 0;
    for (int r = 0; r < v->nranks; r++) {
      end[r] = 0;
      for (int c = 0; c < e.nch; c++) {
        const eng_chan_t* ec = &e.chans[(size_t)r * e.nch + rep[c]];
        end[r] = max2(end[r], max2(ec->free_at[0], ec->free_at[1]));
      }
    }
    CHECK_GOTO(nic_bound(&e, rep, end, &out->nic_bound), res, out);
    for (int r = 0; r < v->nranks; r++) last = max2(last, end[r]);
    if (it == 0) out->time_us = last;
    out->loop_us = iters > 1 ? (last - out->time_us) / (iters - 1) : out->time_us;
    if (it == 0 && v->trace_ranks > 0) CHECK_GOTO(trace_collect(&e, rep, out), res, out);
  }

  /* Results. */
  out->launch_us = sim_calib.launch_us[exec_of(v)];
  out->steps = e.steps;
  const sim_rank_view_t* r0 = &v->ranks[0];
  if (r0->plan != NULL) {
    for (int c = 0; c < r0->plan->nchannels; c++) {
      if (r0->plan->nwork[c] == 0) continue;
      out->nchannels++;
      if (out->func >= 0) continue;
      const work_t* w = &r0->plan->works[c][0];
      out->func = w->func;
      out->algo = w->algo;
      out->proto = w->proto;
      const eng_chan_t* ec = &e.chans[c];
      if (ec->n > 0) {
        const eng_lane_t* l = &e.lanes[ec->first];
        out->chunk_bytes = l->geo.chunk * l->geo.unit;
      }
    }
  }
  CHECK_GOTO(flows_report(&e, rep, out), res, out);
out:
  free(npeers);
  free(end);
  free(rep);
  engine_free(&e);
  return res;
}
