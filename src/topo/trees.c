/* Double binary trees: pure functions, no I/O.
 *
 * Tree 0 is an in-order binary tree over ranks 0..n-1 laid out by the binary digits of the rank:
 * a rank whose lowest set bit is b sits at height log2(b), so odd ranks are the leaves, and its
 * children are rank - b/2 and rank + b/2 (the right one moves down to rank + b/4, rank + b/8 ...
 * when rank + b/2 is past the end). Its parent is the rank at the next height up that has it as a
 * child: rank + b or rank - b. Rank 0 is the root, with the largest power of two below n as its
 * only child. The depth is at most ceil(log2(n)).
 *
 * Tree 1 is the same shape over relabelled ranks, chosen so that the interior nodes of one tree are
 * leaves in the other (the construction of stock NCCL's double binary tree):
 *   n even: mirror, position p holds rank n-1-p; the odd positions (leaves) hold the even ranks.
 *   n odd:  shift, position p holds rank (p+1) % n; the leaves hold the even ranks >= 2.
 * So with n even every rank is a leaf in one of the trees; with n odd every rank except 0. Each
 * tree carries half of the data, so every rank's links are used in both directions. */
#include "topo/topo.h"

/* Parent and children of position `pos` in tree 0 over n positions (-1 where there is none). */
static void btree_node(int n, int pos, int* up, int* down0, int* down1) {
  *up = *down0 = *down1 = -1;
  if (pos == 0) {
    int top = 1;
    while (top * 2 < n) top *= 2;
    if (n > 1) *down0 = top;
    return;
  }
  const int low = pos & -pos; /* lowest set bit: the height of this node */
  /* the parent sits at height 2*low; it is the one of pos +- low that has bit 2*low set */
  int parent = (pos & (2 * low)) ? pos - low : pos + low;
  if (parent >= n) parent = pos - low;
  *up = parent;
  if (low == 1) return; /* a leaf */
  *down0 = pos - low / 2;
  for (int step = low / 2; step >= 1; step /= 2) {
    if (pos + step < n) {
      *down1 = pos + step;
      break;
    }
  }
}

/* Position of `rank` in tree `tree`, and back. */
static int dbtree_pos(int n, int tree, int rank) {
  if (tree == 0) return rank;
  return n % 2 == 0 ? n - 1 - rank : (rank - 1 + n) % n;
}

static int dbtree_rank(int n, int tree, int pos) {
  if (pos < 0 || tree == 0) return pos;
  return n % 2 == 0 ? n - 1 - pos : (pos + 1) % n;
}

void topo_dbtree(int nranks, int rank, int tree, int* up, int* down) {
  int u, d0, d1;
  btree_node(nranks, dbtree_pos(nranks, tree, rank), &u, &d0, &d1);
  *up = dbtree_rank(nranks, tree, u);
  down[0] = dbtree_rank(nranks, tree, d0);
  down[1] = dbtree_rank(nranks, tree, d1);
  for (int i = 2; i < TOPO_TREE_MAX_CHILDREN; i++) down[i] = -1;
}
