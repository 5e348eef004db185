/* From a plan to kernel launches: work_t -> cuda_work_t, and the split of a plan too large for
 * one parameter block into several launches on the same stream.
 *
 * Packing decides on the host what the host executor decides per lane (lanes.c), so both
 * executors cut a connection into the same steps: a collective step carries at most work.chunk
 * elements (0: a slot's worth), clamped to the smallest slot of the connections the item uses;
 * a point-to-point step carries at most work.chunk * datatype size bytes, clamped to the slot;
 * sends to self are paired with receives from self, in order, within a channel's list.
 *
 * Splitting (rare: more than CUDA_LARGE_WORKS items). Launches on one stream run one after the
 * other, so a split must never put an item in a later launch than an item some peer needs to
 * finish first. Two rules keep that true:
 *  - Collectives (first in every channel's list, and the same lists on every rank): launch r
 *    takes items [r*Q, (r+1)*Q) of every channel, Q the same on every rank, so every rank's
 *    launch r holds exactly the partners of its items.
 *  - Point-to-point: item keys (d, j), d the distance to the peer along the rank order (send to
 *    rank+d, receive from rank-d) and j its position among the channel's items of the same
 *    direction and distance. A send and the receive it pairs with have the same key on their two
 *    ranks, and each direction's items appear in key order. A launch takes every item whose key
 *    is in a range [k0, k1), all channels together: an item then waits only for items with smaller
 *    keys, on any rank, and by induction on the key nothing waits forever. */
#include <stdlib.h>

#include "device/cuda/cuda_exec.h"

static bool func_is_p2p(int func) {
  return func == FUNC_SEND || func == FUNC_RECV;
}

/* ---- One item ----------------------------------------------------------------------------------
 */
static ncclResult_t conn_cap(cuda_exec_t* ex, int c, int peer, int is_send, int proto, size_t* cap,
                             bool* net) {
  const dev_channel_t* dc = &ex->comm->channels[c];
  conn_fifo_t** tab = is_send ? dc->send : dc->recv;
  const conn_fifo_t* f = tab != NULL ? tab[peer] : NULL;
  if (f == NULL) {
    WARN(
        "CUDA executor: rank %d has no connection %s rank %d on channel %d; the planner must "
        "connect it before launching work that uses it",
        ex->comm->rank, is_send ? "to" : "from", peer, c);
    return ncclInternalError;
  }
  size_t n = cuda_fifo_capacity(f, proto);
  if (n < *cap) *cap = n;
  if (f->flags & CONN_FLAG_NET) *net = true;
  return ncclSuccess;
}

/* Units per step: want (0: no preference) clamped to the slot capacity cap_bytes. */
static ncclResult_t item_chunk(const cuda_exec_t* ex, int c, const work_t* w, size_t unit,
                               size_t want, size_t cap_bytes, cuda_work_t* o) {
  size_t cap = cap_bytes / unit;
  if (cap == 0) {
    WARN(
        "CUDA executor: rank %d channel %d: a %s FIFO slot of %zu data bytes cannot hold one "
        "element of %zu bytes%s",
        ex->comm->rank, c,
        w->proto == PROTO_LL      ? "LL"
        : w->proto == PROTO_LL128 ? "LL128"
                                  : "Simple",
        cap_bytes, unit,
        w->proto == PROTO_LL128 && cap_bytes == 0
            ? " (the connection has no LL128 buffer: LL128 needs one on every connection it uses; "
              "set NCCL_PROTO to exclude LL128)"
            : "; raise NCCL_BUFFSIZE / NCCL_LL_BUFFSIZE / NCCL_LL128_BUFFSIZE");
    return ncclInternalError;
  }
  size_t chunk = want == 0 || want > cap ? cap : want;
  if (chunk > UINT32_MAX) chunk = UINT32_MAX;
  o->chunk = (uint32_t)chunk;
  return ncclSuccess;
}

static ncclResult_t pack_item(cuda_exec_t* ex, int c, const work_t* w, cuda_work_t* o, bool* net) {
  const exec_comm_t* comm = ex->comm;
  const dev_channel_t* dc = &comm->channels[c];
  size_t esize = datatype_size((ncclDataType_t)w->dtype);
  if (esize == 0 || w->func >= FUNC_COUNT || w->proto >= PROTO_COUNT ||
      w->op.kind >= DEV_OP_COUNT) {
    WARN(
        "CUDA executor: work item with function %d, protocol %d, datatype %d, operation %d on "
        "channel %d is invalid",
        w->func, w->proto, w->dtype, w->op.kind, c);
    return ncclInternalError;
  }
  memset(o, 0, sizeof(*o));
  o->func = w->func;
  o->algo = w->algo;
  o->proto = w->proto;
  o->dtype = w->dtype;
  o->op = w->op.kind;
  o->scalar_on_device = w->op.scalar_on_device && w->op.scalar_ptr != NULL;
  o->esize = (uint8_t)esize;
  o->root = -1;
  o->count = w->count;
  o->sendbuff = (const char*)w->sendbuff;
  o->recvbuff = (char*)w->recvbuff;
  if (w->count == 0 || w->chan_count == 0) {
    o->flags = CUDA_WORK_SKIP;
    return ncclSuccess;
  }

  if (func_is_p2p(w->func)) { /* point-to-point counts in bytes */
    int is_send = w->func == FUNC_SEND;
    o->off = w->chan_off * esize;
    o->cnt = w->chan_count * esize;
    if (w->root < 0 || w->root >= comm->nranks) {
      WARN("CUDA executor: %s peer %d is not a rank of this communicator of %d ranks",
           is_send ? "send" : "receive", w->root, comm->nranks);
      return ncclInternalError;
    }
    o->root = w->root;
    if (w->root == comm->rank) { /* paired by the caller */
      o->flags = is_send ? CUDA_WORK_SELF : CUDA_WORK_SKIP;
      return ncclSuccess;
    }
    size_t cap = SIZE_MAX;
    CHECK(conn_cap(ex, c, w->root, is_send, w->proto, &cap, net));
    CHECK(item_chunk(ex, c, w, 1, w->chunk * esize, cap, o));
    return cuda_conn_mirror(ex, c, w->root, is_send, &o->u.conn);
  }

  o->off = w->chan_off;
  o->cnt = w->chan_count;
  if (o->scalar_on_device)
    o->u.scalar_ptr = w->op.scalar_ptr;
  else
    o->u.scalar = w->op.scalar;
  if (comm->nranks == 1) { /* one local step */
    o->chunk = 0;
    return ncclSuccess;
  }
  size_t cap = SIZE_MAX;
  if (w->algo == ALGO_RING) {
    CHECK(conn_cap(ex, c, dc->ring_next, 1, w->proto, &cap, net));
    CHECK(conn_cap(ex, c, dc->ring_prev, 0, w->proto, &cap, net));
    if (w->func == FUNC_BROADCAST || w->func == FUNC_REDUCE) {
      for (int i = 0; i < comm->nranks && dc->ring_ranks != NULL; i++)
        if (dc->ring_ranks[i] == w->root) o->root = i;
      if (o->root < 0) {
        WARN("CUDA executor: root rank %d is not in channel %d's ring of %d ranks", w->root, c,
             comm->nranks);
        return ncclInternalError;
      }
    }
  } else if (w->algo == ALGO_TREE && w->func == FUNC_ALLREDUCE) {
    if (dc->tree_up >= 0) {
      CHECK(conn_cap(ex, c, dc->tree_up, 1, w->proto, &cap, net));
      CHECK(conn_cap(ex, c, dc->tree_up, 0, w->proto, &cap, net));
    }
    for (int j = 0; j < TREE_MAX_CHILDREN; j++) {
      if (dc->tree_down[j] < 0) continue;
      CHECK(conn_cap(ex, c, dc->tree_down[j], 1, w->proto, &cap, net));
      CHECK(conn_cap(ex, c, dc->tree_down[j], 0, w->proto, &cap, net));
    }
    if (cap == SIZE_MAX) {
      WARN(
          "CUDA executor: rank %d is alone in channel %d's tree of %d ranks (no parent, no "
          "children)",
          comm->rank, c, comm->nranks);
      return ncclInternalError;
    }
  } else if (w->algo == ALGO_ONESHOT && w->func == FUNC_ALLREDUCE) {
    if (comm->nranks > TREE_MAX_CHILDREN + 1 || w->op.kind == DEV_OP_PREMULSUM) {
      WARN(
          "CUDA executor: one-shot AllReduce runs on 2 to %d ranks without PreMulSum (got %d "
          "ranks, op %d)",
          TREE_MAX_CHILDREN + 1, comm->nranks, w->op.kind);
      return ncclInternalError;
    }
    for (int p = 0; p < comm->nranks; p++) {
      if (p == comm->rank) continue;
      CHECK(conn_cap(ex, c, p, 1, w->proto, &cap, net));
      CHECK(conn_cap(ex, c, p, 0, w->proto, &cap, net));
    }
  } else {
    WARN(
        "CUDA executor: algorithm %d cannot run function %d (tree and one-shot run AllReduce "
        "only)",
        w->algo, w->func);
    return ncclInternalError;
  }
  return item_chunk(ex, c, w, esize, w->chunk, cap, o);
}

/* ---- Building one launch ----------------------------------------------------------------------
 */
typedef struct builder {
  int nblocks;
  int nworks;
  int chan_first; /* first item of the channel being filled */
  bool net;       /* some item uses a connection the proxy drives */
  bool not_simple; /* some item runs LL or LL128: the launch takes the narrow kernel */
  int self_recv;  /* next self receive to pair within the channel being filled */
} builder_t;

static void b_reset(builder_t* b) {
  *b = (builder_t){.nblocks = 0};
}

static void b_open(cuda_exec_t* ex, builder_t* b, int c) {
  (void)c;
  b->chan_first = b->nworks;
  b->self_recv = b->nworks;
  (void)ex;
}

static ncclResult_t b_item(cuda_exec_t* ex, builder_t* b, int c, const work_t* w) {
  if (b->nworks >= CUDA_LARGE_WORKS) {
    WARN("CUDA executor: internal error: a launch of more than %d items", CUDA_LARGE_WORKS);
    return ncclInternalError;
  }
  CHECK(pack_item(ex, c, w, &ex->args.works[b->nworks], &b->net));
  b->not_simple |= w->proto != PROTO_SIMPLE;
  b->nworks++;
  return ncclSuccess;
}

/* Pairs the channel's sends to self with its receives from self (in order), drops what has
 * nothing to do, and closes the channel's block. */
static ncclResult_t b_close(cuda_exec_t* ex, builder_t* b, int c) {
  cuda_work_t* works = ex->args.works;
  int r = b->chan_first;
  for (int s = b->chan_first; s < b->nworks; s++) {
    cuda_work_t* sw = &works[s];
    if (!(sw->flags & CUDA_WORK_SELF)) continue;
    while (r < b->nworks && !(works[r].func == FUNC_RECV && works[r].root == ex->comm->rank &&
                              works[r].cnt > 0 && works[r].u.self_dst == NULL))
      r++;
    if (r == b->nworks) goto unmatched;
    if (works[r].cnt != sw->cnt) {
      WARN(
          "CUDA executor: rank %d channel %d: a send to self of %llu bytes is paired with a "
          "receive from self of %llu bytes",
          ex->comm->rank, c, (unsigned long long)sw->cnt, (unsigned long long)works[r].cnt);
      return ncclInvalidUsage;
    }
    sw->u.self_dst = works[r].recvbuff + works[r].off;
    works[r].u.self_dst = sw->u.self_dst; /* marks it paired */
    r++;
  }
  for (int i = b->chan_first; i < b->nworks; i++) {
    const cuda_work_t* w = &works[i];
    if (w->func == FUNC_RECV && w->root == ex->comm->rank && w->cnt > 0 && w->u.self_dst == NULL)
      goto unmatched;
  }
  /* compact: drop items with nothing to do; copies to self go last, in a block of their own
   * (they wait for nobody, so they run beside the channel's transfers instead of before them) */
  int k = b->chan_first, nself = 0;
  for (int i = b->chan_first; i < b->nworks; i++) {
    if (works[i].flags & CUDA_WORK_SKIP) continue;
    if (works[i].flags & CUDA_WORK_SELF) {
      ex->self_tmp[nself++] = works[i];
      continue;
    }
    if (k != i) works[k] = works[i];
    k++;
  }
  const int self_first = k;
  for (int i = 0; i < nself; i++) works[k++] = ex->self_tmp[i];
  b->nworks = k;
  if (self_first > b->chan_first) {
    ex->args.hdr.first[b->nblocks] = (uint16_t)b->chan_first;
    ex->args.hdr.chan_id[b->nblocks] = (uint8_t)c;
    b->nblocks++;
  }
  if (nself > 0) {
    ex->args.hdr.first[b->nblocks] = (uint16_t)self_first;
    ex->args.hdr.chan_id[b->nblocks] = (uint8_t)c;
    b->nblocks++;
  }
  return ncclSuccess;
unmatched:
  WARN(
      "CUDA executor: rank %d channel %d: a send to self and a receive from self must come in "
      "pairs in the same channel's list",
      ex->comm->rank, c);
  return ncclInvalidUsage;
}

static ncclResult_t b_launch(cuda_exec_t* ex, builder_t* b, cudaStream_t stream) {
  if (b->nblocks == 0) return ncclSuccess;
  cuda_args_hdr_t* h = &ex->args.hdr;
  h->first[b->nblocks] = (uint16_t)b->nworks;
  h->nblocks = b->nblocks;
  h->chans = ex->d_chans;
  h->abort_flag = ex->d_abort;
  h->status = ex->d_status;
  h->progress = ex->d_progress;
  h->progress_blocks = ex->d_progress_blocks;
  h->launch = ex->launched + 1;
  h->rank = ex->comm->rank;
  h->nranks = ex->comm->nranks;
  CHECK(cuda_conns_flush(ex));
  if (b->net && ex->comm->proxy_wake != NULL) ex->comm->proxy_wake(ex->comm->arg);
  const int which = b->nworks <= CUDA_TINY_WORKS     ? CUDA_KERN_TINY
                    : b->nworks <= CUDA_SMALL_WORKS  ? CUDA_KERN_SMALL
                    : b->nworks <= CUDA_MEDIUM_WORKS ? CUDA_KERN_MEDIUM
                                                     : CUDA_KERN_LARGE;
  void* params[] = {&ex->args};
  const bool wide = ex->wide_mode == CUDA_WIDE_ALWAYS ||
                    (ex->wide_mode == CUDA_WIDE_AUTO && !b->not_simple);
  dim3 grid = {(unsigned)b->nblocks, 1, 1};
  dim3 block = {CUDA_EXEC_BLOCK_THREADS(wide), 1, 1};
  cudaError_t err =
      cudaLaunchKernel(ex->kern[wide][which], grid, block, params, CUDA_EXEC_STAGE_BYTES, stream);
  if (err != cudaSuccess) {
    WARN("CUDA executor: rank %d: launching the kernel (%d blocks, %d items) failed: %s",
         ex->comm->rank, b->nblocks, b->nworks, cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  __atomic_store_n(&ex->launched, ex->launched + 1, __ATOMIC_RELAXED); /* read by other threads */
  b_reset(b);
  return ncclSuccess;
}

/* ---- Splitting --------------------------------------------------------------------------------
 */
static int cmp_u64(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return x < y ? -1 : x > y;
}

static ncclResult_t split_reserve(cuda_split_t* s, size_t n) {
  if (n <= s->cap) return ncclSuccess;
  uint64_t* k = realloc(s->keys, n * sizeof(*k));
  if (k == NULL) goto oom;
  s->keys = k;
  uint64_t* t = realloc(s->sorted, n * sizeof(*t));
  if (t == NULL) goto oom;
  s->sorted = t;
  s->cap = n;
  return ncclSuccess;
oom:
  WARN("CUDA executor: out of memory splitting a plan of %zu items", n);
  return ncclSystemError;
}

void cuda_split_free(cuda_split_t* s) {
  free(s->keys);
  free(s->sorted);
  s->keys = s->sorted = NULL;
  s->cap = 0;
}

/* Keys (d << 32 | j) of channel c's point-to-point items [lo, n) into keys[lo..n). */
static void p2p_keys(const cuda_exec_t* ex, const work_t* works, int lo, int n, uint64_t* keys,
                     uint64_t* tmp) {
  int nranks = ex->comm->nranks, rank = ex->comm->rank;
  int m = 0;
  for (int i = lo; i < n; i++) {
    const work_t* w = &works[i];
    int d = w->func == FUNC_SEND ? (w->root - rank + nranks) % nranks
                                 : (rank - w->root + nranks) % nranks;
    uint64_t group = (uint64_t)d * 2 + (w->func == FUNC_SEND);
    tmp[m++] = group << 32 | (uint64_t)(i - lo);
  }
  qsort(tmp, (size_t)m, sizeof(*tmp), cmp_u64);
  uint64_t prev = UINT64_MAX, j = 0;
  for (int k = 0; k < m; k++) {
    uint64_t group = tmp[k] >> 32;
    j = group == prev ? j + 1 : 0;
    prev = group;
    keys[lo + (int)(tmp[k] & 0xffffffffu)] = (group >> 1) << 32 | j;
  }
}

static ncclResult_t launch_split(cuda_exec_t* ex, const plan_t* plan, cudaStream_t stream,
                                 size_t total) {
  cuda_split_t* s = &ex->split;
  CHECK(split_reserve(s, total));
  int ncoll[PLAN_MAX_CHANNELS];
  size_t base[PLAN_MAX_CHANNELS];
  int nchan_coll = 0, max_coll = 0;
  size_t at = 0;
  for (int c = 0; c < plan->nchannels; c++) {
    const work_t* ws = plan->works[c];
    int n = plan->nwork[c], i = 0;
    while (i < n && !func_is_p2p(ws[i].func)) i++;
    ncoll[c] = i;
    for (int k = i; k < n; k++) {
      if (!func_is_p2p(ws[k].func)) {
        WARN(
            "CUDA executor: a plan of %zu items (more than one launch holds) has collectives "
            "after point-to-point items on channel %d; it cannot be split safely",
            total, c);
        return ncclInternalError;
      }
    }
    if (i > 0) nchan_coll++;
    if (i > max_coll) max_coll = i;
    base[c] = at;
    at += (size_t)n;
  }
  builder_t b;
  b_reset(&b);
  /* Collectives: the same rounds on every rank. */
  if (nchan_coll > 0) {
    int q = CUDA_LARGE_WORKS / nchan_coll;
    for (int lo = 0; lo < max_coll; lo += q) {
      for (int c = 0; c < plan->nchannels; c++) {
        int hi = lo + q < ncoll[c] ? lo + q : ncoll[c];
        if (lo >= hi) continue;
        b_open(ex, &b, c);
        for (int i = lo; i < hi; i++) CHECK(b_item(ex, &b, c, &plan->works[c][i]));
        CHECK(b_close(ex, &b, c));
      }
      CHECK(b_launch(ex, &b, stream));
    }
  }
  /* Point-to-point: key ranges over all channels. */
  size_t nkeys = 0;
  for (int c = 0; c < plan->nchannels; c++) {
    p2p_keys(ex, plan->works[c], ncoll[c], plan->nwork[c], s->keys + base[c], s->sorted);
  }
  for (int c = 0; c < plan->nchannels; c++)
    for (int i = ncoll[c]; i < plan->nwork[c]; i++)
      s->sorted[nkeys++] = s->keys[base[c] + (size_t)i];
  qsort(s->sorted, nkeys, sizeof(*s->sorted), cmp_u64);
  size_t k = 0;
  while (k < nkeys) {
    /* the longest run of whole key groups that fits one launch */
    size_t end = k;
    while (end < nkeys) {
      size_t g = end;
      while (g < nkeys && s->sorted[g] == s->sorted[end]) g++;
      if (g - k > (size_t)CUDA_LARGE_WORKS && end > k) break;
      end = g;
    }
    uint64_t k0 = s->sorted[k], k1 = s->sorted[end - 1];
    for (int c = 0; c < plan->nchannels; c++) {
      bool open = false;
      for (int i = ncoll[c]; i < plan->nwork[c]; i++) {
        uint64_t key = s->keys[base[c] + (size_t)i];
        if (key < k0 || key > k1) continue;
        if (!open) b_open(ex, &b, c);
        open = true;
        CHECK(b_item(ex, &b, c, &plan->works[c][i]));
      }
      if (open) CHECK(b_close(ex, &b, c));
    }
    CHECK(b_launch(ex, &b, stream));
    k = end;
  }
  return ncclSuccess;
}

/* ---- Entry ------------------------------------------------------------------------------------
 */
ncclResult_t cuda_plan_launch(cuda_exec_t* ex, const plan_t* plan, cudaStream_t stream) {
  if (plan->nchannels > ex->comm->nchannels) {
    WARN("CUDA executor: a plan over %d channels on a communicator of %d", plan->nchannels,
         ex->comm->nchannels);
    return ncclInternalError;
  }
  size_t total = 0;
  for (int c = 0; c < plan->nchannels; c++) {
    if (plan->nwork[c] <= 0) continue;
    total += (size_t)plan->nwork[c];
    bool coll = false;
    for (int i = 0; i < plan->nwork[c] && !coll; i++) coll = !func_is_p2p(plan->works[c][i].func);
    if (coll && ex->comm->nranks > 1) CHECK(cuda_chan_sync(ex, c));
  }
  if (total == 0) return ncclSuccess;
  if (total > (size_t)CUDA_LARGE_WORKS) return launch_split(ex, plan, stream, total);
  builder_t b;
  b_reset(&b);
  for (int c = 0; c < plan->nchannels; c++) {
    if (plan->nwork[c] <= 0) continue;
    b_open(ex, &b, c);
    for (int i = 0; i < plan->nwork[c]; i++) CHECK(b_item(ex, &b, c, &plan->works[c][i]));
    CHECK(b_close(ex, &b, c));
  }
  return b_launch(ex, &b, stream);
}
