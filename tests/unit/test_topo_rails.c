/* Rings over every NIC (src/topo/rails.c) on recorded topologies: a DGX-H100-like node with one
 * NIC per GPU (tests/data/topo/ibm-h100-8gpu-nvswitch-8nic.xml) and a node with one NIC per two
 * GPUs (hgx-h100-4nic-per-gpu-pair.xml), as clusters of 2, 3 and 4 such nodes. The expectations
 * come from the files themselves, not from the code under test: the NIC beside a GPU is the one
 * under the same PCIe switch (equal bridge chains), and the rules say every hop between hosts
 * leaves through the NIC beside its sender's GPU and enters through the NIC beside its receiver's,
 * both of one index (a rail) except the hop that closes a ring over an odd number of hosts, and
 * over a period of channels every NIC of a host sends and receives equally often; trees likewise
 * (every edge between hosts on one rail, every NIC heading its host as often). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <limits.h>
#include <stdlib.h>

#include "base/base.h"
#include "topo/topo.h"
#include "unit.h"

#define GPUS 8
#define MAX_HOSTS 4
#define MAX_RANKS (GPUS * MAX_HOSTS)

static topo_system_t* load(const char* name) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/tests/data/topo/%s", getenv("BATON_SOURCE_DIR"), name);
  char* text = unit_read_file(path);
  ck_assert_msg(text != NULL, "cannot read %s", path);
  topo_system_t* sys = NULL;
  ck_assert_msg(topo_xml_parse(text, name, &sys) == ncclSuccess, "%s: %s", name, log_last_error());
  free(text);
  ck_assert_int_eq(sys->ngpus, GPUS);
  return sys;
}

/* The NIC under the same switch as GPU g (the file's placement), -1 when none or several. */
static int nic_beside(const topo_system_t* sys, int g) {
  int found = -1;
  for (int i = 0; i < sys->nnics; i++) {
    if (strcmp(sys->nics[i].pci_path, sys->gpus[g].pci_path) != 0) continue;
    if (found >= 0) return -1;
    found = i;
  }
  return found;
}

typedef struct cluster {
  int nhosts, n;
  int hosts[MAX_RANKS];
  topo_rank_nics_t nics[MAX_RANKS];
  int beside[MAX_RANKS]; /* expected NIC of each rank's GPU */
} cluster_t;

static void cluster_make(const topo_system_t* sys, int nhosts, cluster_t* c) {
  memset(c, 0, sizeof(*c));
  c->nhosts = nhosts;
  c->n = nhosts * GPUS;
  for (int r = 0; r < c->n; r++) {
    c->hosts[r] = r / GPUS;
    topo_rank_nics(sys, sys->gpus[r % GPUS].bus_id, &c->nics[r]);
    c->beside[r] = nic_beside(sys, r % GPUS);
  }
}

/* Checks every rule on channel ch's layout; adds each host's NIC sends/receives and each rank's
 * turns as an end to the counts. */
static void check_channel(const cluster_t* c, int ch, int* order, int8_t* nic, int sends[][32],
                          int recvs[][32], int* ends) {
  int scratch[2 * MAX_RANKS];
  ck_assert(topo_ring_rails(c->n, c->hosts, c->nics, ch, scratch, order, nic));
  bool seen[MAX_RANKS] = {false};
  int hops = 0, crossed = 0;
  for (int i = 0; i < c->n; i++) {
    ck_assert(order[i] >= 0 && order[i] < c->n && !seen[order[i]]);
    seen[order[i]] = true;
    int s = order[i], d = order[(i + 1) % c->n];
    if (c->hosts[s] == c->hosts[d]) continue;
    /* ranks of a host adjacent: one hop out of each host, to the next host */
    ck_assert_int_eq(c->hosts[d], (c->hosts[s] + 1) % c->nhosts);
    hops++;
    ck_assert_msg(nic[s] == c->beside[s], "channel %d: rank %d leaves on NIC %d, beside it is %d",
                  ch, s, nic[s], c->beside[s]);
    ck_assert_msg(nic[d] == c->beside[d], "channel %d: rank %d enters on NIC %d, beside it is %d",
                  ch, d, nic[d], c->beside[d]);
    if (nic[s] != nic[d]) {
      crossed++;
      ck_assert_msg(c->nhosts % 2 == 1 && c->hosts[d] == 0,
                    "channel %d: hop %d->%d crosses rails %d->%d", ch, s, d, nic[s], nic[d]);
    }
    sends[c->hosts[s]][nic[s]]++;
    recvs[c->hosts[d]][nic[d]]++;
    ends[s]++;
    ends[d]++;
  }
  ck_assert_int_eq(hops, c->nhosts);
  ck_assert_int_le(crossed, c->nhosts % 2);
  for (int r = 0; r < c->n; r++) {
    bool end = order[0] == r; /* counted above or not an end at all */
    for (int i = 0; i < c->n; i++) {
      int s = order[i], d = order[(i + 1) % c->n];
      if (c->hosts[s] != c->hosts[d] && (s == r || d == r)) end = true;
    }
    if (!end) ck_assert_int_eq(nic[r], -1);
  }
}

/* Each NIC's expected share of the channels: its speed over the slowest NIC's (the file's
 * speeds), *sum the total. */
static void file_weights(const topo_system_t* sys, int* w, int* sum) {
  int slowest = 0;
  for (int i = 0; i < sys->nnics; i++)
    if (slowest == 0 || sys->nics[i].speed_mbps < slowest) slowest = sys->nics[i].speed_mbps;
  *sum = 0;
  for (int i = 0; i < sys->nnics; i++) *sum += w[i] = sys->nics[i].speed_mbps / slowest;
}

static void check_file(const char* name, int nnics_expected) {
  topo_system_t* sys = load(name);
  ck_assert_int_eq(sys->nnics, nnics_expected);
  int w[32], wsum;
  file_weights(sys, w, &wsum);
  for (int nhosts = 2; nhosts <= MAX_HOSTS; nhosts++) {
    cluster_t c;
    cluster_make(sys, nhosts, &c);
    for (int r = 0; r < c.n; r++)
      ck_assert_msg(c.beside[r] >= 0, "%s: GPU %d has no NIC of its own", name, r % GPUS);
    int scratch[2 * MAX_RANKS];
    int period = topo_ring_rails_period(c.n, c.hosts, c.nics, 64, scratch);
    /* every rail is each end once per round (a NIC twice as fast twice), and two GPUs sharing a
     * NIC take turns */
    ck_assert_int_eq(period, wsum * (GPUS / nnics_expected));
    int sends[MAX_HOSTS][32] = {{0}}, recvs[MAX_HOSTS][32] = {{0}}, ends[MAX_RANKS] = {0};
    int order[MAX_RANKS], again[MAX_RANKS];
    int8_t nic[MAX_RANKS], nic_again[MAX_RANKS];
    for (int ch = 0; ch < period; ch++) {
      check_channel(&c, ch, order, nic, sends, recvs, ends);
      /* channel ch + period is the same layout (core keeps one ring per period) */
      ck_assert(topo_ring_rails(c.n, c.hosts, c.nics, ch + period, scratch, again, nic_again));
      ck_assert_mem_eq(order, again, sizeof(order[0]) * (size_t)c.n);
      ck_assert_mem_eq(nic, nic_again, (size_t)c.n);
    }
    /* Every NIC of every host carries its speed's share each way, every GPU beside a NIC is an
     * end as often as the others beside NICs of its speed. */
    for (int h = 0; h < nhosts; h++) {
      for (int i = 0; i < sys->nnics; i++) {
        ck_assert_msg(sends[h][i] == period * w[i] / wsum, "%s, %d hosts: host %d NIC %d sends %d",
                      name, nhosts, h, i, sends[h][i]);
        ck_assert_int_eq(recvs[h][i], period * w[i] / wsum);
      }
    }
    for (int r = 1; r < c.n; r++)
      ck_assert_int_eq(ends[r] * w[c.beside[0]], ends[0] * w[c.beside[r]]);
  }
  topo_system_free(sys);
}

START_TEST(one_nic_per_gpu) {
  check_file("ibm-h100-8gpu-nvswitch-8nic.xml", 8);
}
END_TEST

START_TEST(one_nic_per_gpu_pair) {
  check_file("hgx-h100-4nic-per-gpu-pair.xml", 4);
}
END_TEST

/* Trees over every NIC on the same files: on every channel a valid tree (one root, each rank's
 * children name it as parent, every rank reaches the root), every edge between hosts joins ranks
 * whose GPUs have NICs of one index beside them, both ranks of such an edge are ends of the
 * channel's ring on that NIC (so the hop uses the ring's NIC), no rank has more than two children,
 * and over the period every NIC heads its host (is entered from another host) equally often. */
static void check_trees(const char* name, int nnics) {
  topo_system_t* sys = load(name);
  int w[32], wsum;
  file_weights(sys, w, &wsum);
  for (int nhosts = 2; nhosts <= MAX_HOSTS; nhosts++) {
    cluster_t c;
    cluster_make(sys, nhosts, &c);
    int scratch[2 * MAX_RANKS], up[MAX_RANKS], down[MAX_RANKS * TOPO_TREE_MAX_CHILDREN];
    int order[MAX_RANKS];
    int8_t nic[MAX_RANKS];
    int period = 2 * topo_ring_rails_period(c.n, c.hosts, c.nics, 64, scratch);
    int heads[MAX_HOSTS][32] = {{0}};
    for (int ch = 0; ch < period; ch++) {
      ck_assert(topo_tree_rails(c.n, c.hosts, c.nics, ch, scratch, up, down));
      ck_assert(topo_ring_rails(c.n, c.hosts, c.nics, ch, scratch, order, nic));
      int roots = 0;
      for (int r = 0; r < c.n; r++) {
        if (up[r] < 0) roots++;
        int hops = 0; /* reaches the root */
        for (int x = r; up[x] >= 0 && hops <= c.n; x = up[x]) hops++;
        ck_assert_int_le(hops, c.n - 1);
        int nchild = 0;
        for (int k = 0; k < TOPO_TREE_MAX_CHILDREN; k++) {
          int d = down[r * TOPO_TREE_MAX_CHILDREN + k];
          if (d < 0) continue;
          nchild++;
          ck_assert_int_eq(up[d], r);
          if (c.hosts[d] != c.hosts[r]) {
            ck_assert_int_eq(c.beside[d], c.beside[r]); /* one rail */
            ck_assert_int_eq(nic[d], c.beside[d]);      /* the ring's NIC for that rank */
            ck_assert_int_eq(nic[r], c.beside[r]);
          }
        }
        int named = 0; /* every rank naming r as parent is among its children */
        for (int x = 0; x < c.n; x++) named += up[x] == r;
        ck_assert_int_eq(named, nchild);
        /* no rank sends a step to more than two peers (a third would split its block's pushes
         * below its NIC's share on 128 nodes: docs/sim.md) */
        ck_assert_int_le(nchild, 2);
        /* shallow inside a host: a chain of k ranks would fill a pipeline k - 1 hops deep each
         * way; the host's tree is its two ends over a binary tree of the other k - 2 ranks */
        int k = 0, depth = 0, bound = 2;
        for (int x = 0; x < c.n; x++) k += c.hosts[x] == c.hosts[r];
        for (int x = r; up[x] >= 0 && c.hosts[up[x]] == c.hosts[r]; x = up[x]) depth++;
        while ((1 << (bound - 1)) <= k - 2) bound++; /* 2 + floor(log2(k - 2)) */
        ck_assert_int_le(depth, k > 2 ? bound : k - 1);
        /* a host's head: the rank with a parent elsewhere or none */
        if (up[r] < 0 || c.hosts[up[r]] != c.hosts[r]) heads[c.hosts[r]][c.beside[r]]++;
      }
      ck_assert_int_eq(roots, 1);
    }
    for (int h = 0; h < nhosts; h++)
      for (int i = 0; i < nnics; i++) ck_assert_int_eq(heads[h][i], period * w[i] / wsum);
  }
  topo_system_free(sys);
}

START_TEST(trees_one_nic_per_gpu) {
  check_trees("ibm-h100-8gpu-nvswitch-8nic.xml", 8);
}
END_TEST

START_TEST(trees_one_nic_per_gpu_pair) {
  check_trees("hgx-h100-4nic-per-gpu-pair.xml", 4);
}
END_TEST

/* Every NIC carries its share of the trees (issue 28's done-when: every NIC within 10 % of the
 * same bytes). Clusters of 2-128 hosts of 8 GPUs with 1, 2, 4 or 8 NICs (GPU g beside NIC
 * g * NICs / 8), 64 channels: each hop between hosts carries a channel's bytes up and down, so
 * a host's NIC sends and receives one unit per channel for each tree edge at its end on that NIC.
 * Summed over the channels from the trees' edges and the rings' NICs: every host's every NIC
 * within 10 % of the mean each way, every channel's tree joins the hosts with nhosts - 1 edges,
 * and from 8 hosts no host is the root on more than an eighth of the channels (a root sends and
 * receives one unit where an inner host does three: the same roots on every channel left their
 * NICs half the mean). */
START_TEST(trees_share_every_nic) {
  enum { K = 8, C = 64, MAXH = 128, N = MAXH * K };
  static const int sizes[] = {2, 4, 6, 8, 12, 16, 24, 32, 64, 128};
  static int hosts[N], scratch[2 * N], up[N], down[N * TOPO_TREE_MAX_CHILDREN], order[N];
  static topo_rank_nics_t nics[N];
  static int8_t nic[N];
  for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
    for (int m = 1; m <= 8; m *= 2) {
      const int nh = sizes[si], n = nh * K;
      static double tx[MAXH][8], rx[MAXH][8];
      int roots[MAXH] = {0};
      memset(tx, 0, sizeof(tx));
      memset(rx, 0, sizeof(rx));
      for (int r = 0; r < n; r++) {
        hosts[r] = r / K;
        memset(&nics[r], 0, sizeof(nics[r]));
        memset(nics[r].path, TOPO_RAIL_NONE, sizeof(nics[r].path));
        nics[r].nnics = (uint8_t)m;
        for (int x = 0; x < m; x++) {
          nics[r].path[x] = (uint8_t)(x == (r % K) * m / K ? TOPO_PATH_PIX : TOPO_PATH_SYS);
          nics[r].weight[x] = 1;
        }
      }
      for (int c = 0; c < C; c++) {
        ck_assert(topo_ring_rails(n, hosts, nics, c, scratch, order, nic));
        ck_assert(topo_tree_rails(n, hosts, nics, c, scratch, up, down));
        int edges = 0;
        for (int r = 0; r < n; r++) {
          const int p = up[r];
          if (p < 0) roots[hosts[r]]++;
          if (p < 0 || hosts[p] == hosts[r]) continue;
          ck_assert(nic[r] >= 0 && nic[p] >= 0);
          edges++;
          tx[hosts[r]][nic[r]] += 1; /* up */
          rx[hosts[p]][nic[p]] += 1;
          tx[hosts[p]][nic[p]] += 1; /* down */
          rx[hosts[r]][nic[r]] += 1;
        }
        ck_assert_int_eq(edges, nh - 1);
      }
      const double mean = 2.0 * (nh - 1) * C / (nh * m);
      for (int h = 0; h < nh; h++) {
        for (int x = 0; x < m; x++) {
          ck_assert_msg(tx[h][x] >= 0.9 * mean && tx[h][x] <= 1.1 * mean &&
                            rx[h][x] >= 0.9 * mean && rx[h][x] <= 1.1 * mean,
                        "%d hosts, %d NICs: host %d NIC %d sends %.0f, receives %.0f (mean %.2f)",
                        nh, m, h, x, tx[h][x], rx[h][x], mean);
        }
        if (nh >= 8)
          ck_assert_msg(roots[h] <= C / 8, "%d hosts, %d NICs: host %d is the root on %d channels",
                        nh, m, h, roots[h]);
      }
    }
  }
}
END_TEST

/* Random clusters (a fixed seed): 1-7 hosts of 1-9 ranks, 0-5 NICs a host at random paths, some
 * NICs unusable, speeds (weights) at random, hosts sometimes interleaved in rank order. Whatever
 * the input: the ring is a permutation with the ranks of a host adjacent, nic_out is set only on
 * ranks with a hop between hosts, the tree has one root, no cycle, and children and parents agree;
 * ring and tree layouts apply together. */
static unsigned long long rails_seed = 88172645463325252ull;
static unsigned rails_rand(void) {
  rails_seed ^= rails_seed << 13;
  rails_seed ^= rails_seed >> 7;
  rails_seed ^= rails_seed << 17;
  return (unsigned)rails_seed;
}

START_TEST(random_clusters) {
  enum { N = 64 };
  for (int iter = 0; iter < 1000; iter++) {
    int nhosts = 1 + (int)(rails_rand() % 7), n = 0, hosts[N];
    topo_rank_nics_t nics[N];
    for (int h = 0; h < nhosts; h++) {
      int k = 1 + (int)(rails_rand() % 9), nn = (int)(rails_rand() % 6);
      for (int i = 0; i < k && n < N; i++, n++) {
        hosts[n] = h;
        memset(&nics[n], 0, sizeof(nics[n]));
        memset(nics[n].path, TOPO_RAIL_NONE, sizeof(nics[n].path));
        nics[n].nnics = (uint8_t)nn;
        for (int x = 0; x < nn; x++) {
          nics[n].path[x] =
              rails_rand() % 5 == 0 ? TOPO_RAIL_NONE : (uint8_t)(3 + rails_rand() % 5);
          nics[n].weight[x] = (uint8_t)(rails_rand() % (TOPO_RAIL_MAX_WEIGHT + 1)); /* 0: as 1 */
        }
      }
    }
    for (int i = n - 1; i > 0 && rails_rand() % 2; i--) { /* interleave the hosts */
      int j = (int)(rails_rand() % (unsigned)(i + 1)), t = hosts[i];
      topo_rank_nics_t u = nics[i];
      hosts[i] = hosts[j];
      hosts[j] = t;
      nics[i] = nics[j];
      nics[j] = u;
    }
    int scratch[2 * N], order[N], up[N], down[N * TOPO_TREE_MAX_CHILDREN];
    int8_t nic[N];
    int period = topo_ring_rails_period(n, hosts, nics, 64, scratch);
    ck_assert(period >= 1 && period <= 64);
    for (int c = 0; c < 32; c++) { /* several groups of channels: the roots move */
      bool ring = topo_ring_rails(n, hosts, nics, c, scratch, order, nic);
      bool seen[N] = {false};
      for (int i = 0; i < n; i++) {
        ck_assert(order[i] >= 0 && order[i] < n && !seen[order[i]]);
        seen[order[i]] = true;
        if (i + 1 < n) ck_assert_int_le(hosts[order[i]], hosts[order[i + 1]]);
        int prev = order[(i + n - 1) % n], next = order[(i + 1) % n];
        if (hosts[prev] == hosts[order[i]] && hosts[next] == hosts[order[i]])
          ck_assert_int_eq(nic[order[i]], -1);
      }
      ck_assert(ring == topo_tree_rails(n, hosts, nics, c, scratch, up, down));
      if (!ring) continue;
      int roots = 0;
      for (int r = 0; r < n; r++) {
        roots += up[r] < 0;
        int hops = 0;
        for (int x = r; up[x] >= 0 && hops <= n; x = up[x]) hops++;
        ck_assert_int_lt(hops, n);
        int named = 0, nchild = 0;
        for (int x = 0; x < n; x++) named += up[x] == r;
        for (int k = 0; k < TOPO_TREE_MAX_CHILDREN; k++) {
          int d = down[r * TOPO_TREE_MAX_CHILDREN + k];
          if (d < 0) continue;
          nchild++;
          ck_assert_int_eq(up[d], r);
        }
        ck_assert_int_eq(named, nchild);
        ck_assert_int_le(nchild, 2);
      }
      ck_assert_int_eq(roots, 1);
    }
  }
}
END_TEST

/* One host, or hosts without NICs: no layout (the caller keeps topo_ring_order's ring). */
START_TEST(no_layout_without_hosts_or_nics) {
  topo_system_t* sys = load("ibm-h100-8gpu-nvswitch-8nic.xml");
  cluster_t c;
  cluster_make(sys, 1, &c);
  int scratch[2 * MAX_RANKS], order[MAX_RANKS], plain[MAX_RANKS];
  int8_t nic[MAX_RANKS];
  ck_assert(!topo_ring_rails(c.n, c.hosts, c.nics, 3, scratch, order, nic));
  topo_ring_order(c.n, c.hosts, 3, false, plain);
  ck_assert_mem_eq(order, plain, sizeof(int) * (size_t)c.n);
  cluster_make(sys, 2, &c);
  for (int r = 0; r < c.n; r++) topo_rank_nics(NULL, -1, &c.nics[r]); /* no GPU known */
  ck_assert(!topo_ring_rails(c.n, c.hosts, c.nics, 3, scratch, order, nic));
  for (int r = 0; r < c.n; r++) ck_assert_int_eq(nic[r], -1);
  ck_assert_int_eq(topo_ring_rails_period(c.n, c.hosts, c.nics, 64, scratch), 1);
  topo_system_free(sys);
}
END_TEST

/* One NIC for the whole host (placed beside GPU 0 of the 8-NIC file, the others dropped): every
 * host's part of every channel has GPU 0, the only GPU under the NIC's switch, at one end and
 * another GPU of its socket (the next best placed) at the other, and every hop is on NIC 0. */
START_TEST(one_nic_per_host) {
  topo_system_t* sys = load("ibm-h100-8gpu-nvswitch-8nic.xml");
  int keep = nic_beside(sys, 0);
  sys->nics[0] = sys->nics[keep];
  sys->nnics = 1;
  cluster_t c;
  cluster_make(sys, 2, &c);
  int scratch[2 * MAX_RANKS], order[MAX_RANKS];
  int8_t nic[MAX_RANKS];
  for (int ch = 0; ch < 4; ch++) {
    ck_assert(topo_ring_rails(c.n, c.hosts, c.nics, ch, scratch, order, nic));
    for (int i = 0; i < c.n; i++) {
      int s = order[i], d = order[(i + 1) % c.n];
      if (c.hosts[s] == c.hosts[d]) continue;
      ck_assert_int_eq(nic[s], 0);
      ck_assert_int_eq(nic[d], 0);
      ck_assert_int_eq(s % GPUS, d % GPUS); /* alike hosts: the same GPU on both sides */
      ck_assert_int_eq(sys->gpus[s % GPUS].numa, sys->gpus[0].numa);
    }
    /* each host's part runs from GPU 0 to another GPU, or back */
    for (int h = 0; h < 2; h++) {
      int first = order[h * GPUS] % GPUS, last = order[h * GPUS + GPUS - 1] % GPUS;
      ck_assert_msg((first == 0) != (last == 0), "channel %d host %d: ends %d, %d", ch, h, first,
                    last);
    }
  }
  topo_system_free(sys);
}
END_TEST

/* NICs of two speeds (two of 400 Gb/s, two of 200, one per GPU pair): the faster ones are rails
 * on twice as many channels, of rings and trees alike. */
START_TEST(nics_of_two_speeds) {
  check_file("hgx-h100-4nic-mixed-speeds.xml", 4);
  check_trees("hgx-h100-4nic-mixed-speeds.xml", 4);
}
END_TEST

/* PXN (src/topo/pxn.c): the GPU a send through a NIC goes through. Expected from the file's
 * placement alone: a GPU under the same PCIe switch as the NIC sends itself; any other goes
 * through the GPUs under the NIC's switch (all of them NVLink peers through the NVSwitches), GPU
 * g taking the (g mod count)-th of them in bus order. */
static bool same_switch(const char* a, const char* b) {
  return a[0] != '\0' && strcmp(a, b) == 0; /* equal bridge chains, as nic_beside */
}

static void check_relays(const char* name, int expect_relayed) {
  topo_system_t* sys = load(name);
  int relayed = 0;
  for (int g = 0; g < GPUS; g++) {
    for (int n = 0; n < sys->nnics; n++) {
      int cand[GPUS], k = 0;
      for (int p = 0; p < GPUS; p++)
        if (same_switch(sys->gpus[p].pci_path, sys->nics[n].pci_path)) cand[k++] = p;
      bool beside = same_switch(sys->gpus[g].pci_path, sys->nics[n].pci_path);
      int want = beside || k == 0 ? -1 : cand[g % k];
      int got = topo_nic_relay(sys, sys->gpus[g].bus_id, n);
      ck_assert_msg(got == want, "%s: GPU %d, NIC %d: relay %d, want %d", name, g, n, got, want);
      relayed += got >= 0;
    }
  }
  ck_assert_int_eq(relayed, expect_relayed);
  /* no relay for an unknown GPU or NIC */
  ck_assert_int_eq(topo_nic_relay(sys, 0x1234567, 0), -1);
  ck_assert_int_eq(topo_nic_relay(sys, sys->gpus[4].bus_id, sys->nnics), -1);
  ck_assert_int_eq(topo_nic_relay(NULL, sys->gpus[4].bus_id, 0), -1);
  topo_system_free(sys);
}

START_TEST(pxn_relays) {
  /* NICs on socket 0 only: GPUs 4-7 reach all 4 through a peer, GPUs 0-3 the 2 of the other
   * switch: 4 x 4 + 4 x 2 */
  check_relays("hgx-h100-4nic-socket0.xml", 24);
  check_relays("ibm-h100-8gpu-nvswitch-8nic.xml", 8 * 7); /* every NIC but its own */
  check_relays("hgx-h100-4nic-per-gpu-pair.xml", 8 * 3);
}
END_TEST

/* Without NVLink between the GPUs, or with PXN off, nothing is relayed. */
START_TEST(pxn_needs_nvlink_and_is_a_switch) {
  topo_system_t* sys = load("hgx-h100-4nic-socket0.xml");
  for (int i = 0; i < GPUS * GPUS; i++)
    if (sys->paths[i] == TOPO_PATH_NVL) sys->paths[i] = TOPO_PATH_SYS;
  for (int g = 0; g < GPUS; g++)
    for (int n = 0; n < sys->nnics; n++)
      ck_assert_int_eq(topo_nic_relay(sys, sys->gpus[g].bus_id, n), -1);
  topo_system_free(sys);
  ck_assert(topo_pxn_enabled());
  ck_assert_int_eq(topo_p2p_pxn_level(), 2);
  unit_set_param("NCCL_PXN_DISABLE", "1");
  unit_set_param("NCCL_P2P_PXN_LEVEL", "7");
  ck_assert(!topo_pxn_enabled());
  ck_assert_int_eq(topo_p2p_pxn_level(), 2); /* clamped */
  unit_set_param("NCCL_PXN_DISABLE", NULL);
  unit_set_param("NCCL_P2P_PXN_LEVEL", NULL);
}
END_TEST

static Suite* topo_rails_suite(void) {
  Suite* s = suite_create("topo_rails");
  TCase* tc = tcase_create("rails");
  tcase_add_test(tc, one_nic_per_gpu);
  tcase_add_test(tc, one_nic_per_gpu_pair);
  tcase_add_test(tc, trees_one_nic_per_gpu);
  tcase_add_test(tc, trees_one_nic_per_gpu_pair);
  tcase_add_test(tc, trees_share_every_nic);
  tcase_add_test(tc, nics_of_two_speeds);
  tcase_add_test(tc, random_clusters);
  tcase_add_test(tc, no_layout_without_hosts_or_nics);
  tcase_add_test(tc, one_nic_per_host);
  tcase_add_test(tc, pxn_relays);
  tcase_add_test(tc, pxn_needs_nvlink_and_is_a_switch);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(topo_rails_suite());
}
