/* Rings and double binary trees (src/topo/rings.c, trees.c) for every size 1..64: rings are
 * permutations with hosts contiguous, odd channels reversed when asked (both ways) and every
 * channel the same ring otherwise; each tree is a tree (one root,
 * parent/child links agree, every rank reached exactly once from the root, no cycle), its depth
 * is at most ceil(log2 n), and the two trees are complementary where stock's construction
 * guarantees it (n even: every rank is a leaf in one tree; n odd: every rank but 0). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "topo/topo.h"
#include "unit.h"

#define MAXN 64

/* base's ceil_log2, the depth bound below */
START_TEST(test_ceil_log2) {
  const int n[] = {0, 1, 2, 3, 4, 5, 8, 9, 64, 65};
  const int want[] = {0, 0, 1, 2, 2, 3, 3, 4, 6, 7};
  for (size_t i = 0; i < sizeof(n) / sizeof(n[0]); i++) ck_assert_int_eq(ceil_log2(n[i]), want[i]);
}
END_TEST

/* Each rank's position in order[], checking that order[] is a permutation of 0..n-1. */
static void check_permutation(const int* order, int n, int* pos, const char* what) {
  for (int r = 0; r < n; r++) pos[r] = -1;
  for (int i = 0; i < n; i++) {
    ck_assert_msg(order[i] >= 0 && order[i] < n, "%s n=%d: entry %d is %d", what, n, i, order[i]);
    ck_assert_msg(pos[order[i]] == -1, "%s n=%d: rank %d twice", what, n, order[i]);
    pos[order[i]] = i;
  }
}

START_TEST(test_ring_one_host) {
  for (int n = 1; n <= MAXN; n++) {
    int even[MAXN], odd[MAXN], pos_even[MAXN], pos_odd[MAXN];
    topo_ring_order(n, NULL, 0, true, even);
    topo_ring_order(n, NULL, 1, true, odd);
    check_permutation(even, n, pos_even, "channel 0");
    check_permutation(odd, n, pos_odd, "channel 1");
    for (int r = 0; r < n; r++) {
      const int next = even[(pos_even[r] + 1) % n];
      const int prev = even[(pos_even[r] + n - 1) % n];
      /* next and prev are each other's inverses around the ring */
      ck_assert_int_eq(even[(pos_even[next] + n - 1) % n], r);
      ck_assert_int_eq(even[(pos_even[prev] + 1) % n], r);
      /* the odd channel goes the other way: my next there is my prev here */
      ck_assert_msg(odd[(pos_odd[r] + 1) % n] == prev, "n=%d rank %d: odd channel not reversed", n,
                    r);
    }
    /* channels of the same parity use the same ring */
    int again[MAXN];
    topo_ring_order(n, NULL, 2, true, again);
    ck_assert_mem_eq(again, even, sizeof(int) * (size_t)n);
    topo_ring_order(n, NULL, 3, true, again);
    ck_assert_mem_eq(again, odd, sizeof(int) * (size_t)n);
    /* one way: every channel is channel 0's ring of the both-ways case */
    for (int c = 0; c < 4; c++) {
      topo_ring_order(n, NULL, c, false, again);
      ck_assert_msg(memcmp(again, even, sizeof(int) * (size_t)n) == 0,
                    "n=%d channel %d: one-way ring differs from channel 0", n, c);
    }
  }
}
END_TEST

/* Ranks interleaved over hosts (rank r on host (r * 7 + 3) % nhosts): every host's ranks form
 * one contiguous arc of the ring, on both channel parities. */
START_TEST(test_ring_hosts_contiguous) {
  for (int n = 1; n <= MAXN; n++) {
    for (int nhosts = 1; nhosts <= 8 && nhosts <= n; nhosts++) {
      int hosts[MAXN], order[MAXN], pos[MAXN];
      for (int r = 0; r < n; r++) hosts[r] = (r * 7 + 3) % nhosts;
      for (int ch = 0; ch < 4; ch++) {
        topo_ring_order(n, hosts, ch % 2, ch >= 2, order);
        check_permutation(order, n, pos, "hosts");
        /* count host changes around the ring: exactly one entry into each host (or none) */
        int changes = 0;
        for (int i = 0; i < n; i++)
          if (hosts[order[i]] != hosts[order[(i + 1) % n]]) changes++;
        int used = 0;
        for (int h = 0; h < nhosts; h++) {
          int count = 0;
          for (int r = 0; r < n; r++) count += hosts[r] == h;
          used += count > 0;
        }
        ck_assert_msg(changes == (used > 1 ? used : 0), "n=%d hosts=%d ch=%d: %d host changes", n,
                      nhosts, ch, changes);
      }
    }
  }
}
END_TEST

/* Checks one tree over n ranks; returns its depth and fills leaf[r]. */
static int check_tree(int n, int tree, bool* leaf) {
  int up[MAXN], down[MAXN][TOPO_TREE_MAX_CHILDREN];
  int root = -1;
  for (int r = 0; r < n; r++) {
    for (int c = 0; c < TOPO_TREE_MAX_CHILDREN; c++) down[r][c] = 1000; /* must be written */
    up[r] = 1000;
    topo_dbtree(n, r, tree, &up[r], down[r]);
    ck_assert_msg(up[r] >= -1 && up[r] < n && up[r] != r, "n=%d tree %d: rank %d up=%d", n, tree, r,
                  up[r]);
    if (up[r] == -1) {
      ck_assert_msg(root == -1, "n=%d tree %d: two roots %d and %d", n, tree, root, r);
      root = r;
    }
    ck_assert_msg(down[r][2] == -1, "n=%d tree %d: rank %d has a third child", n, tree, r);
    leaf[r] = true;
    for (int c = 0; c < TOPO_TREE_MAX_CHILDREN; c++) {
      const int ch = down[r][c];
      ck_assert_msg(ch >= -1 && ch < n && ch != r, "n=%d tree %d: rank %d child %d", n, tree, r,
                    ch);
      if (ch >= 0) leaf[r] = false;
      for (int c2 = 0; c2 < c; c2++)
        ck_assert_msg(ch == -1 || down[r][c2] != ch, "n=%d: rank %d lists child %d twice", n, r,
                      ch);
    }
  }
  ck_assert_msg(root >= 0, "n=%d tree %d: no root", n, tree);
  /* symmetry: r's parent lists r as a child, and each child names r as its parent */
  for (int r = 0; r < n; r++) {
    if (up[r] >= 0) {
      bool found = false;
      for (int c = 0; c < TOPO_TREE_MAX_CHILDREN; c++) found |= down[up[r]][c] == r;
      ck_assert_msg(found, "n=%d tree %d: parent %d of %d does not list it", n, tree, up[r], r);
    }
    for (int c = 0; c < TOPO_TREE_MAX_CHILDREN; c++)
      if (down[r][c] >= 0)
        ck_assert_msg(up[down[r][c]] == r, "n=%d tree %d: child %d of %d has parent %d", n, tree,
                      down[r][c], r, up[down[r][c]]);
  }
  /* breadth-first walk from the root: each rank seen exactly once (no cycle, all connected) */
  int queue[MAXN], depth[MAXN], seen[MAXN] = {0};
  int head = 0, tail = 0, maxdepth = 0;
  queue[tail++] = root;
  depth[root] = 0;
  seen[root] = 1;
  while (head < tail) {
    const int r = queue[head++];
    if (depth[r] > maxdepth) maxdepth = depth[r];
    for (int c = 0; c < TOPO_TREE_MAX_CHILDREN; c++) {
      const int ch = down[r][c];
      if (ch < 0) continue;
      ck_assert_msg(!seen[ch], "n=%d tree %d: rank %d reached twice", n, tree, ch);
      seen[ch] = 1;
      depth[ch] = depth[r] + 1;
      queue[tail++] = ch;
    }
  }
  ck_assert_msg(tail == n, "n=%d tree %d: %d of %d ranks reachable from root %d", n, tree, tail, n,
                root);
  return maxdepth;
}

START_TEST(test_dbtree_structure) {
  for (int n = 1; n <= MAXN; n++) {
    bool leaf0[MAXN], leaf1[MAXN];
    const int d0 = check_tree(n, 0, leaf0);
    const int d1 = check_tree(n, 1, leaf1);
    ck_assert_msg(d0 <= ceil_log2(n) && d1 <= ceil_log2(n), "n=%d: depths %d, %d > %d", n, d0, d1,
                  ceil_log2(n));
    if (n < 2) continue;
    for (int r = 0; r < n; r++) {
      if (n % 2 == 1 && r == 0) continue; /* stock's shifted tree keeps rank 0 inside both */
      ck_assert_msg(leaf0[r] || leaf1[r], "n=%d: rank %d is interior in both trees", n, r);
    }
    /* and the trees differ: the roots are different ranks */
    int up0, up1, down[TOPO_TREE_MAX_CHILDREN];
    int root0 = -1, root1 = -1;
    for (int r = 0; r < n; r++) {
      topo_dbtree(n, r, 0, &up0, down);
      topo_dbtree(n, r, 1, &up1, down);
      if (up0 == -1) root0 = r;
      if (up1 == -1) root1 = r;
    }
    ck_assert_msg(root0 != root1, "n=%d: both trees rooted at %d", n, root0);
  }
}
END_TEST

/* Interior nodes have two children where the size allows: a binary tree, not a chain. */
START_TEST(test_dbtree_is_binary) {
  for (int n = 4; n <= MAXN; n++) {
    for (int tree = 0; tree < 2; tree++) {
      int two = 0;
      for (int r = 0; r < n; r++) {
        int up, down[TOPO_TREE_MAX_CHILDREN];
        topo_dbtree(n, r, tree, &up, down);
        two += down[0] >= 0 && down[1] >= 0;
      }
      /* a binary tree of n nodes with depth <= ceil(log2 n) needs many two-child nodes */
      ck_assert_msg(two >= (n - 2) / 2 - ceil_log2(n), "n=%d tree %d: only %d binary nodes", n,
                    tree, two);
    }
  }
}
END_TEST

static Suite* trees_suite(void) {
  Suite* s = suite_create("trees");
  TCase* tc = tcase_create("rings_trees");
  tcase_add_test(tc, test_ceil_log2);
  tcase_add_test(tc, test_ring_one_host);
  tcase_add_test(tc, test_ring_hosts_contiguous);
  tcase_add_test(tc, test_dbtree_structure);
  tcase_add_test(tc, test_dbtree_is_binary);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(trees_suite());
}
