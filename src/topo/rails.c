/* Rings between hosts over every NIC, rail by rail: pure functions, no I/O.
 *
 * A ring crosses each host boundary once per channel: it enters a host at one GPU and leaves it
 * from another. If every channel entered and left through the same two GPUs, every channel would
 * cross between hosts through the same NIC pair and a node with eight NICs would use one. So each
 * channel gets its own pair of rails: NICs u and v of the host (u = rails[c % m], v = the next
 * one, m rails), and its two ends are GPUs close to them (a near u, b near v). Hosts alternate
 * the direction of their part of the ring:
 *
 *   host 0 (even):  a0 ... b0  --rail v-->  host 1 (odd):  b1 ... a1  --rail u-->  host 2: a2 ...
 *
 * so the hop out of an even host goes from its GPU b over NIC v to the next host's GPU b, which
 * receives on its NIC v (the same rail), and the hop out of an odd host goes from its GPU a over
 * NIC u to the next host's GPU a. On a node with one NIC per GPU, GPU g of every host talks to GPU
 * g of the next over NIC g. Over m consecutive channels every rail is u once and v once, so every
 * NIC sends and receives the same share. With an odd number of hosts the hop from the last host
 * back to host 0 goes from rail v to rail u (a ring of odd length cannot alternate); the NET
 * transport's NCCL_CROSS_NIC rule decides that hop's NICs.
 *
 * The rails of a host are the NICs that are the closest NIC of at least one of its ranks' GPUs
 * (topo_rank_nics_t.path, the GPU-NIC path of every NIC, allgathered at init so that every rank
 * knows every host's). NICs of different speeds are weighted: the list of rails holds a NIC w
 * times (w: its speed over the slowest rail's), in rounds (every rail, then those of weight 2 or
 * more, ...), so a NIC twice as fast leaves and enters on twice as many channels. The GPU of an end
 * is the best placed one for its rail: the ranks with the best path to that NIC take turns on
 * successive rounds of m channels (two GPUs under one NIC's switch share it); where none is left
 * (one NIC for the whole host), the next best. */
#include <stdlib.h>
#include <string.h>

#include "topo/topo.h"

void topo_rank_nics(const topo_system_t* sys, int64_t gpu_bus, topo_rank_nics_t* out) {
  topo_rank_nics_t r;
  memset(&r, 0, sizeof(r));
  memset(r.path, TOPO_RAIL_NONE, sizeof(r.path));
  const topo_gpu_t* g = sys != NULL ? topo_system_gpu_info(sys, gpu_bus) : NULL;
  if (g == NULL) {
    *out = r;
    return;
  }
  /* Rails are the NICs a network would use: active ones, and the RDMA ones when there are any
   * (an Ethernet interface beside InfiniBand or RoCE ports is the host's management port). */
  bool rdma = false;
  for (int i = 0; i < sys->nnics; i++) rdma |= sys->nics[i].active && sys->nics[i].rdma;
  int n = sys->nnics < TOPO_RAIL_MAX_NICS ? sys->nnics : TOPO_RAIL_MAX_NICS;
  int slowest = 0;
  for (int i = 0; i < n; i++) {
    const topo_nic_t* nic = &sys->nics[i];
    r.weight[i] = 1;
    if (!nic->active || (rdma && !nic->rdma)) continue;
    r.path[i] = (uint8_t)topo_gpu_nic_path(g, nic);
    if (nic->speed_mbps > 0 && (slowest == 0 || nic->speed_mbps < slowest))
      slowest = nic->speed_mbps;
  }
  for (int i = 0; i < n && slowest > 0; i++) {
    int w = (sys->nics[i].speed_mbps + slowest / 2) / slowest;
    if (r.path[i] != TOPO_RAIL_NONE && w > 1)
      r.weight[i] = (uint8_t)(w < TOPO_RAIL_MAX_WEIGHT ? w : TOPO_RAIL_MAX_WEIGHT);
  }
  r.nnics = (uint8_t)n;
  *out = r;
}

/* The best path from this rank's GPU to any rail NIC, TOPO_RAIL_NONE without one. */
static int rail_best(const topo_rank_nics_t* r) {
  int best = TOPO_RAIL_NONE;
  for (int i = 0; i < r->nnics && i < TOPO_RAIL_MAX_NICS; i++)
    if (r->path[i] < best) best = r->path[i];
  return best;
}

/* The rails of the host whose ranks are seg[0..k), in NIC order, each NIC as many times as its
 * weight, in rounds (rails: TOPO_RAIL_LIST entries). */
#define TOPO_RAIL_LIST (TOPO_RAIL_MAX_NICS * TOPO_RAIL_MAX_WEIGHT)
static int host_rails(const int* seg, int k, const topo_rank_nics_t* nics, int* rails) {
  int weight[TOPO_RAIL_MAX_NICS] = {0}; /* 0: not a rail */
  for (int i = 0; i < k; i++) {
    const topo_rank_nics_t* r = &nics[seg[i]];
    int best = rail_best(r);
    for (int x = 0; x < r->nnics && x < TOPO_RAIL_MAX_NICS && best != TOPO_RAIL_NONE; x++)
      if (r->path[x] == best && weight[x] == 0) weight[x] = r->weight[x] > 1 ? r->weight[x] : 1;
  }
  int m = 0;
  for (int round = 0; round < TOPO_RAIL_MAX_WEIGHT; round++)
    for (int x = 0; x < TOPO_RAIL_MAX_NICS; x++)
      if (weight[x] > round) rails[m++] = x;
  return m;
}

/* Rank r's path to NIC x (TOPO_RAIL_NONE + 1 past its host's NICs). */
static int rail_path(const topo_rank_nics_t* nics, int r, int x) {
  return x < nics[r].nnics ? nics[r].path[x] : TOPO_RAIL_NONE + 1;
}

/* seg[0..k) (rank order) sorted by their path to NIC x into cand, stable; returns how many share
 * the best path. */
static int rail_candidates(const int* seg, int k, const topo_rank_nics_t* nics, int x, int* cand) {
  for (int i = 0; i < k; i++) {
    int r = seg[i], key = rail_path(nics, r, x), j = i;
    while (j > 0 && rail_path(nics, cand[j - 1], x) > key) {
      cand[j] = cand[j - 1];
      j--;
    }
    cand[j] = r;
  }
  int best = 1;
  while (best < k && rail_path(nics, cand[best], x) == rail_path(nics, cand[0], x)) best++;
  return best;
}

static int gcd(int a, int b) {
  while (b != 0) {
    int t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* a * b / gcd, or cap when that exceeds cap. */
static int lcm_capped(int a, int b, int cap) {
  long long l = (long long)a / gcd(a, b) * b;
  return l > cap ? cap : (int)l;
}

/* Segments of order[] (grouped by host) one after another: *start, *k of the next. */
static bool next_host(const int* order, int nranks, const int* hosts, int* start, int* k) {
  *start += *k;
  if (*start >= nranks) return false;
  int end = *start;
  while (end < nranks && hosts[order[end]] == hosts[order[*start]]) end++;
  *k = end - *start;
  return true;
}

int topo_ring_rails_period(int nranks, const int* hosts, const topo_rank_nics_t* nics, int max,
                           int* scratch) {
  if (max < 1) max = 1;
  if (hosts == NULL || nranks < 2) return 1;
  int* order = scratch;
  int* cand = scratch + nranks;
  int rails[TOPO_RAIL_LIST];
  topo_ring_order(nranks, hosts, 0, false, order);
  int period = 1, start = 0, k = 0;
  while (next_host(order, nranks, hosts, &start, &k)) {
    int m = host_rails(order + start, k, nics, rails);
    if (m == 0) continue;
    int p = m;
    for (int i = 0; i < m; i++)
      p = lcm_capped(p, m * rail_candidates(order + start, k, nics, rails[i], cand), max);
    period = lcm_capped(period, p, max);
  }
  return period;
}

/* Lays out one host's part of channel c's ring in seg[0..k): its ends on the channel's rails. */
static bool host_layout(int* seg, int k, const topo_rank_nics_t* nics, int c, bool odd, int* cand,
                        int8_t* nic_out) {
  int rails[TOPO_RAIL_LIST];
  int m = host_rails(seg, k, nics, rails);
  if (m == 0) return false;
  const int u = rails[c % m], v = rails[(c + 1) % m], j = c / m;
  int best = rail_candidates(seg, k, nics, u, cand);
  const int a = cand[j % best];
  best = rail_candidates(seg, k, nics, v, cand);
  int b = a;
  for (int t = 0; t < k && b == a; t++) b = t < best ? cand[(j + t) % best] : cand[t];
  nic_out[b] = (int8_t)v;
  nic_out[a] = (int8_t)u; /* a == b (one rank on the host): both hops on rail u */
  /* a, the others in rank order, b; an odd host's part the other way round. */
  int n = 0;
  for (int i = 0; i < k; i++)
    if (seg[i] != a && seg[i] != b) cand[n++] = seg[i];
  seg[0] = a;
  for (int i = 0; i < n; i++) seg[1 + i] = cand[i];
  if (k > 1) seg[k - 1] = b;
  if (odd) {
    for (int i = 0, e = k - 1; i < e; i++, e--) {
      const int t = seg[i];
      seg[i] = seg[e];
      seg[e] = t;
    }
  }
  return true;
}

bool topo_ring_rails(int nranks, const int* hosts, const topo_rank_nics_t* nics, int channel,
                     int* scratch, int* order_out, int8_t* nic_out) {
  for (int r = 0; r < nranks; r++) nic_out[r] = -1;
  topo_ring_order(nranks, hosts, 0, false, order_out);
  if (hosts == NULL || nranks < 2) return false;
  int start = 0, k = 0, pos = 0;
  bool any = false;
  if (!next_host(order_out, nranks, hosts, &start, &k) || k == nranks) return false; /* 1 host */
  do {
    any |= host_layout(order_out + start, k, nics, channel, pos % 2 != 0, scratch, nic_out);
    pos++;
  } while (next_host(order_out, nranks, hosts, &start, &k));
  return any;
}

/* ---- Trees over every NIC --------------------------------------------------------------------
 * Channel c's tree between hosts. The hosts form the double binary tree over host indices
 * (topo_dbtree, tree (c / m) % 2 for hosts of at most m rails, so every rail carries both trees:
 * a host that is an inner node of one is a leaf of the other), and every hop between hosts joins
 * two hosts' ends of channel c's ring on one rail (topo_ring_rails: end A beside the channel's
 * rail u, end B beside rail v). A host's first child host is entered at its A from the parent's
 * A (rail u), its second at its B from the parent's B (rail v); the root host is laid out as if
 * entered on the rail of its only child. Inside a host the rank entered (E) has the other end (O)
 * as its child, and the host's other ranks hang below, breadth first, so that no rank has more than
 * two children: E sends to O and to the child host on its rail, O to the child host on its rail and
 * to the first of the others.
 *
 * Why: a tree AllReduce is a pipeline up and down again, and a rank that sends every step to
 * three peers splits its block's pushes three ways. The layout before this one headed each host
 * with one rank that had both child hosts and a child in its host, and on 128 nodes of 8 GPUs
 * that head's down steps were slower than its NIC's share, on every channel (docs/sim.md). The
 * price is a hop over NVLink (E to O) on the way to one child host, and one level more inside a
 * host: at most 2 + log2(k - 2) deep for k ranks. Over m channels every NIC is rail u once and
 * rail v once, so every NIC enters its host, and carries, the same share.
 *
 * The roots (host_tree_of below): a tree's root host has one child host and no parent, so it
 * sends and receives one channel's bytes where an inner host does three; with the same root on
 * every channel of a tree, the two roots' NICs carried half the mean. So the root moves from
 * channel to channel: on each, one of the tree's inner hosts trades places with the root. */
static void tree_link(int* up_out, int* down_out, int parent, int child) {
  up_out[child] = parent;
  int* d = down_out + (size_t)parent * TOPO_TREE_MAX_CHILDREN;
  int i = 0;
  while (i < TOPO_TREE_MAX_CHILDREN - 1 && d[i] >= 0) i++;
  d[i] = child;
}

/* Ends A (rail u) and B (rail v) of host h's part of the ring, order[start .. start + k): the
 * ring's layout turns odd hosts' parts the other way round (host_layout). */
static void host_ends(const int* order, int start, int k, int h, int* a, int* b) {
  const int first = order[start], last = order[start + k - 1];
  *a = h % 2 == 0 ? first : last;
  *b = h % 2 == 0 ? last : first;
}

/* A host's tree in breadth-first order: E, O, then the host's other ranks in rank order from E
 * on, round. E moves to the next GPU with the channel's rails, and every place of the host's tree
 * with it, so over the channels every GPU has each place (and its NVLink carries the same share).
 * The ring's layout keeps the others in rank order between the ends, or the other way round
 * (host_layout: an odd host's part), so the i-th of them is a count away. */
typedef struct {
  const int* others; /* the k - 2 others, ascending (step 1) or descending (step -1) */
  int n, step, from, e, o;
} host_members_t;

static host_members_t host_members(const int* order, int start, int k, int e, int o) {
  const bool up = k < 4 || order[start + 1] < order[start + k - 2];
  host_members_t m = {.n = k > 2 ? k - 2 : 0, .step = up ? 1 : -1, .e = e, .o = o};
  m.others = up ? order + start + 1 : order + start + k - 2;
  for (int j = 0; j < m.n; j++) m.from += m.others[j * m.step] < e; /* those before E come last */
  return m;
}

static int host_member(const host_members_t* m, int i) {
  if (i < 2) return i == 0 ? m->e : m->o;
  return m->others[((m->from + i - 2) % m->n) * m->step];
}

/* Channel c's tree over hosts: the double binary tree `tree` (topo_dbtree) with host `swap` in
 * the place of host `root` and the other way round, and with `flip` the root's only child hanging
 * second (from the root's end B, rail v) instead of first (end A, rail u). */
typedef struct {
  int nhosts, tree, root, swap;
  bool flip;
} host_tree_t;

static int host_tree_swapped(const host_tree_t* t, int h) {
  return h == t->root ? t->swap : h == t->swap ? t->root : h;
}

/* Host h's parent and children (-1: none) on the channel's tree. */
static void host_tree_node(const host_tree_t* t, int h, int* up, int* down) {
  topo_dbtree(t->nhosts, host_tree_swapped(t, h), t->tree, up, down);
  if (t->flip && *up < 0) {
    down[1] = down[0];
    down[0] = -1;
  }
  *up = *up >= 0 ? host_tree_swapped(t, *up) : -1;
  for (int i = 0; i < TOPO_TREE_MAX_CHILDREN; i++)
    if (down[i] >= 0) down[i] = host_tree_swapped(t, down[i]);
}

/* Whether host h (on the tree without a swap) may be the root on a channel of t's kind: moving
 * it there must take at most one channel's bytes off each of the channel's two NICs. A host with
 * children that its parent hangs first sends and receives on rail u twice (its parent, its first
 * child) and on rail v once or not at all (its second child); as the root with its only child on
 * rail u it keeps one on u and none on v. So the first children are the candidates where the
 * root's child hangs first, the second children where it hangs second. The root's own child is
 * a first child on the one kind and a second child on the other: it is a candidate of the
 * second, and the root itself of the first, so that every inner host is a candidate once. The
 * other tree's root is none: it is short there already. */
static bool host_tree_candidate(const host_tree_t* t, int h) {
  int up, down[TOPO_TREE_MAX_CHILDREN];
  host_tree_node(t, h, &up, down);
  if (up < 0) return !t->flip;
  if (down[0] < 0 && down[1] < 0) return false; /* a leaf */
  int other_up, other_down[TOPO_TREE_MAX_CHILDREN];
  topo_dbtree(t->nhosts, h, 1 - t->tree, &other_up, other_down);
  if (other_up < 0) return false;
  int pup, pdown[TOPO_TREE_MAX_CHILDREN];
  host_tree_node(t, up, &pup, pdown);
  return pdown[t->flip ? 1 : 0] == h && (t->flip || pup >= 0);
}

/* The tree over nhosts hosts of channel c (hosts of at most `most` rails). The channels of a
 * tree come in groups of `most` (one channel per rail u), and the groups alternate between the
 * two kinds (the root's child first, second); the channels of a kind take its candidates in
 * turn. */
static host_tree_t host_tree_of(int nhosts, int most, int channel) {
  host_tree_t t = {.nhosts = nhosts, .tree = (channel / most) % 2, .root = -1, .swap = -1};
  const int group = channel / (2 * most); /* the tree's group */
  t.flip = group % 2 != 0;
  for (int h = 0; h < nhosts && t.root < 0; h++) {
    int up, down[TOPO_TREE_MAX_CHILDREN];
    host_tree_node(&t, h, &up, down);
    if (up < 0) t.root = t.swap = h;
  }
  /* A root that is a leaf of the other tree is short of its share on both (with an odd number
   * of hosts, tree 0's root is an inner host of tree 1 and carries its share already). */
  int up, down[TOPO_TREE_MAX_CHILDREN];
  topo_dbtree(nhosts, t.root, 1 - t.tree, &up, down);
  if (down[0] >= 0 || down[1] >= 0) return t;
  int n = 0;
  for (int h = 0; h < nhosts; h++) n += host_tree_candidate(&t, h);
  if (n == 0) return t;
  int pick = (group / 2 * most + channel % most) % n; /* the channel's turn among its kind's */
  for (int h = 0; h < nhosts; h++) {
    if (host_tree_candidate(&t, h) && pick-- == 0) {
      t.swap = h;
      break;
    }
  }
  return t;
}

bool topo_tree_rails(int nranks, const int* hosts, const topo_rank_nics_t* nics, int channel,
                     int* scratch, int* up_out, int* down_out) {
  int* order = scratch;
  int* first = scratch + nranks; /* each host's first position in order */
  bool any = false;
  if (hosts != NULL && nranks >= 2) /* up_out lends its bytes to the ring's NICs, unused here */
    any = topo_ring_rails(nranks, hosts, nics, channel, first, order, (int8_t*)up_out);
  for (int r = 0; r < nranks; r++) {
    up_out[r] = -1;
    for (int k = 0; k < TOPO_TREE_MAX_CHILDREN; k++) down_out[r * TOPO_TREE_MAX_CHILDREN + k] = -1;
  }
  if (!any) return false;
  int nhosts = 0, start = 0, k = 0, most = 1;
  while (next_host(order, nranks, hosts, &start, &k)) {
    int rails[TOPO_RAIL_LIST];
    int m = host_rails(order + start, k, nics, rails);
    if (m > most) most = m;
    first[nhosts++] = start;
  }
  if (nhosts < 2) return false;
  const host_tree_t tree = host_tree_of(nhosts, most, channel);
  for (int h = 0; h < nhosts; h++) {
    const int s = first[h], kh = (h + 1 < nhosts ? first[h + 1] : nranks) - s;
    int a, b, hup, hdown[TOPO_TREE_MAX_CHILDREN];
    host_ends(order, s, kh, h, &a, &b);
    host_tree_node(&tree, h, &hup, hdown);
    /* entered at A from the parent's A as its first child, at B from its B as its second; the
     * root host as if it were entered on the rail of its only child (A when it hangs first, B
     * second), and it keeps places for two child hosts as an inner host does: whichever host is
     * the root, its GPUs keep the places (and NVLink flows) they have where it is not */
    int e = tree.flip && hup < 0 ? b : a, o = e == a ? b : a;
    if (hup >= 0) {
      int pa, pb, pu, pd[TOPO_TREE_MAX_CHILDREN];
      const int ps = first[hup], pk = (hup + 1 < nhosts ? first[hup + 1] : nranks) - ps;
      host_ends(order, ps, pk, hup, &pa, &pb);
      host_tree_node(&tree, hup, &pu, pd);
      const bool second = pd[1] == h;
      if (second) {
        e = b;
        o = a;
      }
      tree_link(up_out, down_out, second ? pb : pa, e);
    }
    if (kh < 2) continue; /* one rank: both child hosts' links are its */
    tree_link(up_out, down_out, e, o);
    /* the others, in the ring's order, below E and O breadth first: E keeps a place for the
     * child host on its rail, O for the one on its own (their links are made as each child
     * host is laid out) */
    const bool e_child = hup < 0 || (e == a ? hdown[0] : hdown[1]) >= 0;
    const bool o_child = hup < 0 || (o == a ? hdown[0] : hdown[1]) >= 0;
    const host_members_t members = host_members(order, s, kh, e, o);
    int parent = 0, left = 1 - (int)e_child; /* places left at the parent (list index) */
    for (int i = 2; i < kh; i++) {
      while (left <= 0) {
        parent++;
        left = parent == 1 ? 2 - (int)o_child : 2;
      }
      tree_link(up_out, down_out, host_member(&members, parent), host_member(&members, i));
      left--;
    }
  }
  return true;
}
