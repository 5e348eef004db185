/* The direct algorithms on the GPU (device.h's ALGO_ONESHOT, ALGO_TWOSHOT; vocab.h's
 * LANE_DIRECT has their steps): the whole block, every thread carrying its own LL lines from start
 * to end. Device code of the kernel_*.cu only.
 *
 * A chunk's data travels as LL lines (data and flag in one 16-byte store) in the connection FIFOs
 * to and from every other rank, the same slots, steps and flags the host executor's lanes use, so
 * nothing but the line itself says that data has arrived. Each thread takes lines i, i + nth, ...:
 * it loads its words of the input, writes them into every peer's slot, then polls the lines of
 * the same index that the peers wrote to it and combines them with its own word in rank order (so
 * every rank computes the same bits), and stores its words of the output. No thread waits for
 * another thread of its block: the only block-wide meetings are before a chunk (the leader has
 * checked that every send slot is free) and after it (the leader publishes head, tail and sizes),
 * so a small operation costs one pass of loads, stores and polls. Every poll is bounded and looks
 * at the abort flag (should_stop).
 *
 * Per chunk and connection: OneShot one step each way (Broadcast: one step from the root);
 * TwoShot two: the reduce-scatter part, then the combined part from its owner. A zero-copy
 * OneShot item (work.zc) first exchanges descriptors (the probe: one step each way, as a 24-byte
 * AllGather) and then either reads the other ranks' inputs in their shared windows and ends with
 * the release (one more step each way), or runs its chunks as above (zc_run).
 *
 * Direct items run in a kernel of their own (kernel_direct.cu: a plan's direct collectives are
 * all or none of its collectives, plan.c), launched before the plan's point-to-point items, the
 * same way on every rank; the datatype is a template parameter, the op a run-time one. */
#ifndef BATON_DEVICE_CUDA_DIRECT_DEVICE_CUH
#define BATON_DEVICE_CUDA_DIRECT_DEVICE_CUH

#include "device/cuda/staged_device.cuh"

/* A diagnostic build's phase marks (tests/gpu/bench_pair.cu defines it to stamp block 0's thread
 * 0 at each numbered point); nothing in the library. */
#ifndef DIRECT_PHASE
#define DIRECT_PHASE(i)
#endif

namespace baton {

/* What direct_run keeps in shared memory: the mirrors of every connection it drives, and a zero
 * copy item's exchanges (device.h, "Registered windows"): this rank's descriptor and every
 * rank's (the probe's output), the release's zero word and its output, and where every rank's
 * input lies in this process. */
struct direct_smem_t {
  cuda_conn_t send[DIRECT_MAX_PEERS];
  cuda_conn_t recv[DIRECT_MAX_PEERS];
  zc_desc_t zc_mine;
  zc_desc_t zc_desc[DIRECT_MAX_RANKS];
  uint64_t zc_zero;
  uint64_t zc_done[DIRECT_MAX_RANKS];
  const char* zc_src[DIRECT_MAX_RANKS];
};

/* The geometry of one direct item, as steps_direct cuts it (units: elements). */
struct direct_item_t {
  const char* local;
  char* out;
  size_t unit, count, off, cnt, chunk;
  int func, algo, n, rank, root, op;
  uint64_t scalar, div;
  bool zc_read; /* zero copy, after a usable probe: read the inputs where they lie (zc_item) */
};

/* Polls line i of c's slot at step c.step + dstep until its flags are there; false on a stop. */
static __device__ __forceinline__ bool dline_read(const kctx_t& k, const cuda_conn_t& c, int dstep,
                                                  size_t i, uint64_t& word) {
  const uint64_t step = c.step + (uint64_t)dstep;
  const char* p =
      fifo_slot_ptr(c.buffs[PROTO_LL], c.buff_bytes[PROTO_LL], step) + i * sizeof(ll_line_t);
  const uint32_t flag = (uint32_t)(step + 1);
  int n = 0, checks = 0;
  for (;;) {
    const uint4 v = ld_volatile_v4(p);
    if (v.y == flag && v.w == flag) {
      word = (uint64_t)v.x | (uint64_t)v.z << 32;
      return true;
    }
    if (++n == SPIN_CHECK) {
      n = 0;
      if (should_stop(k, checks)) return false;
    }
  }
}

static __device__ __forceinline__ void dline_write(const cuda_conn_t& c, int dstep, size_t i,
                                                   uint64_t word) {
  const uint64_t step = c.step + (uint64_t)dstep;
  char* p = fifo_slot_ptr(c.buffs[PROTO_LL], c.buff_bytes[PROTO_LL], step) + i * sizeof(ll_line_t);
  const uint32_t flag = (uint32_t)(step + 1);
  st_volatile_v4(p, make_uint4((uint32_t)word, flag, (uint32_t)(word >> 32), flag));
}

static __device__ __forceinline__ size_t dlines(size_t nbytes) {
  return nbytes == 0 ? 1 : (nbytes + 7) / 8;
}

/* A thread's loop over its lines of a span of nbytes: fn(line, valid bytes of the line). A line
 * at a time costs about 0.8 us for each further line a thread has (32 KiB in one block: 20.6 us
 * on two H100s); batches of four lines with the peers' polls issued together, their words in
 * arrays the arithmetic indexes, were no faster at 32 KiB (22.3 us against 22.4) and slower at 8 B
 * (7.7 against 6.5), and took ptxas 11-20 minutes: not kept. */
template <typename F>
static __device__ __forceinline__ bool dlines_for(size_t nbytes, F fn) {
  const size_t nl = dlines(nbytes);
  for (size_t i = threadIdx.x; i < nl; i += CUDA_EXEC_THREADS) {
    const int valid = nbytes > i * 8 ? (int)dev_min(nbytes - i * 8, 8) : 0;
    if (!fn(i, valid)) return false;
  }
  return true;
}

/* Sends nbytes of src to peer j's slot at step dstep (a zero line when empty). */
static __device__ __forceinline__ void dsend(const direct_smem_t& d, int j, int dstep,
                                             const char* src, size_t nbytes) {
  dlines_for(nbytes, [&](size_t i, int valid) {
    dline_write(d.send[j], dstep, i, valid > 0 ? low_bytes(load8(src + i * 8, valid), valid) : 0);
    return true;
  });
}

/* Sends nbytes of this rank's input to a reduction: each word as it counts (W::first). */
template <typename O>
static __device__ __forceinline__ void dsend_own(const direct_smem_t& d, const direct_item_t& it,
                                                 int j, const char* src, size_t nbytes) {
  typedef typename O::elem_t T;
  const T s = O::from_bits(it.scalar);
  dlines_for(nbytes, [&](size_t i, int valid) {
    const uint64_t w = valid > 0 ? low_bytes(load8(src + i * 8, valid), valid) : 0;
    dline_write(d.send[j], 0, i, low_bytes(wrules<O>::first(w, it.op, s), valid));
    return true;
  });
}

/* Receives nbytes from peer j's step dstep into dst. */
static __device__ __forceinline__ bool drecv(const kctx_t& k, const direct_smem_t& d, int j,
                                             int dstep, char* dst, size_t nbytes) {
  return dlines_for(nbytes, [&](size_t i, int valid) {
    uint64_t w;
    if (!dline_read(k, d.recv[j], dstep, i, w)) return false;
    if (valid > 0) store8(dst + i * 8, w, valid);
    return true;
  });
}

/* dst = the n ranks' words of a span (mine from src, pre-op'd here; the others' from their step
 * dstep, pre-op'd by their senders), combined in rank order and finished; also sent on to every
 * peer at send step sstep (sstep < 0: not). */
template <typename O>
static __device__ bool dreduce(const kctx_t& k, const direct_smem_t& d, const direct_item_t& it,
                               int dstep, const char* src, char* dst, size_t nbytes, int sstep) {
  typedef typename O::elem_t T;
  typedef wrules<O> W;
  const T s = O::from_bits(it.scalar);
  return dlines_for(nbytes, [&](size_t i, int valid) {
    uint64_t acc = 0;
    for (int r = 0; r < it.n; r++) {
      uint64_t x;
      if (r == it.rank) {
        x = W::first(valid > 0 ? low_bytes(load8(src + i * 8, valid), valid) : 0, it.op, s);
      } else if (!dline_read(k, d.recv[steps_peer_index(it.rank, r)], dstep, i, x)) {
        return false;
      }
      acc = r == 0 ? x : W::next(acc, x, it.op);
    }
    acc = low_bytes(W::post(acc, it.op, it.div), valid);
    if (valid > 0) store8(dst + i * 8, acc, valid);
    if (sstep >= 0)
      for (int j = 0; j < it.n - 1; j++) dline_write(d.send[j], sstep, i, acc);
    return true;
  });
}

/* One chunk [x, x + c) of the item: every step of it, with the block's threads. */
template <typename O>
static __device__ bool direct_chunk(const kctx_t& k, const direct_smem_t& d,
                                    const direct_item_t& it, size_t x, size_t c) {
  const size_t u = it.unit, nb = c * u;
  const int peers = it.n - 1;
  switch (it.func) {
    case FUNC_BROADCAST:
      if (it.rank == it.root) {
        for (int j = 0; j < peers; j++) dsend(d, j, 0, it.local + x * u, nb);
        return dlines_for(nb, [&](size_t i, int valid) {
          if (valid > 0 && it.out != it.local)
            store8(it.out + x * u + i * 8, load8(it.local + x * u + i * 8, valid), valid);
          return true;
        });
      }
      return drecv(k, d, steps_peer_index(it.rank, it.root), 0, it.out + x * u, nb);
    case FUNC_ALLGATHER: {
      const char* src = it.local + x * u;
      char* mine = it.out + ((size_t)it.rank * it.count + x) * u;
      for (int j = 0; j < peers; j++) dsend(d, j, 0, src, nb);
      dlines_for(nb, [&](size_t i, int valid) {
        if (valid > 0 && mine != src) store8(mine + i * 8, load8(src + i * 8, valid), valid);
        return true;
      });
      for (int j = 0; j < peers; j++) {
        const int p = steps_other_rank(it.rank, j);
        if (!drecv(k, d, j, 0, it.out + ((size_t)p * it.count + x) * u, nb)) return false;
      }
      return true;
    }
    case FUNC_REDUCESCATTER:
      for (int j = 0; j < peers; j++) {
        const int p = steps_other_rank(it.rank, j);
        dsend_own<O>(d, it, j, it.local + ((size_t)p * it.count + x) * u, nb);
      }
      return dreduce<O>(k, d, it, 0, it.local + ((size_t)it.rank * it.count + x) * u,
                        it.out + x * u, nb, -1);
    default: /* AllReduce */
      if (it.algo != ALGO_TWOSHOT) {
        for (int j = 0; j < peers; j++) dsend_own<O>(d, it, j, it.local + x * u, nb);
        DIRECT_PHASE(7);
        return dreduce<O>(k, d, it, 0, it.local + x * u, it.out + x * u, nb, -1);
      }
      {
        step_t sp;
        sp.nelem = c;
        sp.part = ring_part(c, (size_t)it.n, u, c);
        sp.peer_stride = 0;
        size_t o, n;
        for (int j = 0; j < peers; j++) { /* step 0: part p to rank p */
          steps_peer_span(&sp, steps_other_rank(it.rank, j), &o, &n);
          dsend_own<O>(d, it, j, it.local + (x + o) * u, n * u);
        }
        steps_peer_span(&sp, it.rank, &o, &n); /* step 1: my part, combined, to everyone */
        if (!dreduce<O>(k, d, it, 0, it.local + (x + o) * u, it.out + (x + o) * u, n * u, 1))
          return false;
        for (int j = 0; j < peers; j++) { /* step 2: part p from rank p */
          steps_peer_span(&sp, steps_other_rank(it.rank, j), &o, &n);
          if (!drecv(k, d, j, 1, it.out + (x + o) * u, n * u)) return false;
        }
        return true;
      }
  }
}

/* The item's chunks; every connection advances by the chunk's steps after each. */
template <typename O>
static __device__ bool direct_chunks(const kctx_t& k, direct_smem_t& d, const direct_item_t& it) {
  const int peers = it.n - 1;
  const int nsteps = it.algo == ALGO_TWOSHOT ? 2 : 1; /* per chunk and connection */
  const bool root = it.func == FUNC_BROADCAST && it.rank == it.root;
  const int rj = it.func == FUNC_BROADCAST ? steps_peer_index(it.rank, it.root) : -1;
  for (size_t start = 0; start < it.cnt; start += it.chunk) {
    const size_t c = dev_min(it.chunk, it.cnt - start);
    bool bad = false;
    if (threadIdx.x == 0) { /* every send slot of the chunk free */
      for (int j = 0; j < peers && !bad; j++) {
        if (it.func == FUNC_BROADCAST && !root) break;
        cuda_conn_t& s = d.send[j];
        const uint64_t last = s.step + (uint64_t)(nsteps - 1); /* the chunk's last step */
        if (fifo_may_send(s.head_seen, last)) continue;
        bad = !wait_counter(k, s.head, fifo_head_needed(last), &s.head_seen);
      }
    }
    if (__syncthreads_or(bad)) return false;
    DIRECT_PHASE(2);
    bad = !direct_chunk<O>(k, d, it, it.off + start, c);
    DIRECT_PHASE(3);
    if (__syncthreads_or(bad)) return false;
    DIRECT_PHASE(4);
    if (threadIdx.x == 0) { /* publish: sizes and tail of the sends, head of the receives */
      for (int j = 0; j < peers; j++) {
        const bool sends = it.func != FUNC_BROADCAST || root;
        const bool recvs = it.func != FUNC_BROADCAST || (!root && j == rj);
        for (int q = 0; q < nsteps && sends; q++) {
          cuda_conn_t& s = d.send[j];
          st_volatile_s32(s.sizes + fifo_slot(s.step + (uint64_t)q),
                          (int)(16 * dlines(c * it.unit)));
        }
        if (sends) {
          d.send[j].step += (uint64_t)nsteps;
          st_volatile_u64(d.send[j].tail, d.send[j].step);
        }
        if (recvs) {
          d.recv[j].step += (uint64_t)nsteps;
          st_volatile_u64(d.recv[j].head, d.recv[j].step);
        }
      }
    }
    __syncthreads();
    DIRECT_PHASE(5);
  }
  return true;
}

/* ---- Zero copy: the inputs read where they lie (device.h, "Registered windows") ---------------
 * After a usable probe, d.zc_src[p] is rank p's input in this process (its window, mapped here,
 * or this rank's own sendbuff). Copies are the block's copy_multi; a reduction has every thread
 * take its share of 16-byte vectors, ZC_UNROLL of them in flight per source, when every pointer
 * of the span is 16-byte aligned, and 8-byte words (load8 / store8: any alignment) otherwise and
 * for the tail. Peers' windows are
 * read with ordinary loads: the probe's lines said that each peer's kernel began, so its stream
 * had finished writing the input; the release keeps the peers from changing it meanwhile. */
#define ZC_UNROLL 4

/* dst[0, nbytes) = every rank's source at byte soff, combined word by word as dreduce does (in
 * rank order, each rank's word pre-op'd with that rank's scalar, then post): the FIFO path's
 * bits. A thread reads all of a word's sources before it stores it (in-place ReduceScatter). */
template <typename O>
static __device__ void zc_reduce(const direct_smem_t& d, const direct_item_t& it, size_t soff,
                                 char* dst, size_t nbytes) {
  typedef typename O::elem_t T;
  typedef wrules<O> W;
  uintptr_t a = (uintptr_t)dst;
  for (int r = 0; r < it.n; r++) a |= (uintptr_t)(d.zc_src[r] + soff);
  size_t done = 0;
  if ((a & 15) == 0) {
    const size_t nv = nbytes / 16;
    for (size_t v0 = threadIdx.x; v0 < nv; v0 += (size_t)CUDA_EXEC_THREADS * ZC_UNROLL) {
      uint64_t lo[ZC_UNROLL], hi[ZC_UNROLL];
      for (int r = 0; r < it.n; r++) {
        const char* s = d.zc_src[r] + soff;
        const T sc = O::from_bits(d.zc_desc[r].scalar);
        uint4 x[ZC_UNROLL];
#pragma unroll
        for (int u = 0; u < ZC_UNROLL; u++) {
          const size_t v = v0 + (size_t)u * CUDA_EXEC_THREADS;
          x[u] = v < nv ? *reinterpret_cast<const uint4*>(s + v * 16) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < ZC_UNROLL; u++) {
          const uint64_t l = W::first((uint64_t)x[u].x | (uint64_t)x[u].y << 32, it.op, sc);
          const uint64_t h = W::first((uint64_t)x[u].z | (uint64_t)x[u].w << 32, it.op, sc);
          lo[u] = r == 0 ? l : W::next(lo[u], l, it.op);
          hi[u] = r == 0 ? h : W::next(hi[u], h, it.op);
        }
      }
#pragma unroll
      for (int u = 0; u < ZC_UNROLL; u++) {
        const size_t v = v0 + (size_t)u * CUDA_EXEC_THREADS;
        if (v >= nv) break;
        const uint64_t l = W::post(lo[u], it.op, it.div), h = W::post(hi[u], it.op, it.div);
        *reinterpret_cast<uint4*>(dst + v * 16) =
            make_uint4((uint32_t)l, (uint32_t)(l >> 32), (uint32_t)h, (uint32_t)(h >> 32));
      }
    }
    done = nv * 16;
  }
  const size_t nw = (nbytes - done + 7) / 8;
  for (size_t i = threadIdx.x; i < nw; i += CUDA_EXEC_THREADS) {
    const size_t at = done + i * 8;
    const int valid = (int)dev_min(nbytes - at, 8);
    uint64_t acc = 0;
    for (int r = 0; r < it.n; r++) {
      const uint64_t w = low_bytes(load8(d.zc_src[r] + soff + at, valid), valid);
      const uint64_t x = W::first(w, it.op, O::from_bits(d.zc_desc[r].scalar));
      acc = r == 0 ? x : W::next(acc, x, it.op);
    }
    store8(dst + at, low_bytes(W::post(acc, it.op, it.div), valid), valid);
  }
}

/* dst[0, nbytes) = src[0, nbytes), with the block (prims_device.cuh's copy). */
static __device__ __forceinline__ void zc_copy(char* dst, const char* src, size_t nbytes) {
  char* const dsts[1] = {dst};
  copy_multi(src, dsts, 1, nbytes, threadIdx.x, CUDA_EXEC_THREADS);
}

/* The item's channel slice, read in place (no connection is touched). */
template <typename O>
static __device__ bool zc_item(const direct_smem_t& d, const direct_item_t& it) {
  const size_t u = it.unit, x = it.off, nb = it.cnt * u;
  switch (it.func) {
    case FUNC_ALLREDUCE:
      zc_reduce<O>(d, it, x * u, it.out + x * u, nb);
      break;
    case FUNC_REDUCESCATTER:
      zc_reduce<O>(d, it, ((size_t)it.rank * it.count + x) * u, it.out + x * u, nb);
      break;
    case FUNC_ALLGATHER:
      for (int p = 0; p < it.n; p++) {
        char* dst = it.out + ((size_t)p * it.count + x) * u;
        const char* src = d.zc_src[p] + x * u;
        if (src != dst) zc_copy(dst, src, nb); /* in place: this rank's block is its input */
      }
      break;
    default: /* Broadcast */
      if (d.zc_src[it.root] + x * u != it.out + x * u)
        zc_copy(it.out + x * u, d.zc_src[it.root] + x * u, nb);
      break;
  }
  return true;
}

/* The item with its datatype's arithmetic: its chunks over the FIFOs, or read in place. Inline:
 * out of line (fewer spills by ptxas) it was slower, 4 GPUs 8 B-128 KiB 7.5-8.5 us +1-2 %. */
template <typename O>
static __device__ __forceinline__ bool direct_item(const kctx_t& k, direct_smem_t& d,
                                                   const direct_item_t& it) {
  return it.zc_read ? zc_item<O>(d, it) : direct_chunks<O>(k, d, it);
}

static __device__ __noinline__ bool direct_typed(const kctx_t& k, direct_smem_t& d,
                                                 const direct_item_t& it, int dtype) {
  return with_dtype_ops(dtype, [&](auto o) { return direct_item<decltype(o)>(k, d, it); });
}

/* A OneShot AllGather of nbytes (unit 1, one chunk) from src to out (n * nbytes), both in shared
 * memory: the probe's and the release's exchange, the lines direct_chunk sends for it. */
static __device__ bool zc_exchange(const kctx_t& k, direct_smem_t& d, const direct_item_t& it,
                                   const void* src, void* out, size_t nbytes) {
  direct_item_t x = it;
  x.local = static_cast<const char*>(src);
  x.out = static_cast<char*>(out);
  x.unit = 1;
  x.count = x.cnt = x.chunk = nbytes;
  x.off = 0;
  x.func = FUNC_ALLGATHER;
  x.algo = ALGO_ONESHOT;
  x.root = 0;
  x.op = DEV_OP_SUM;
  x.scalar = x.div = 0;
  x.zc_read = false;
  return direct_chunks<ops_u8>(k, d, x);
}

/* A zero-copy item: the probe, then the item read in place and the release if every rank can,
 * else its ordinary chunks (every rank decides alike, on the same n descriptors). */
static __device__ bool zc_run(const kctx_t& k, direct_smem_t& d, const cuda_args_hdr_t* hdr,
                              const cuda_work_t* w, const direct_item_t& it) {
  if (threadIdx.x == 0) {
    const uint64_t win = w->zc_loc >> CUDA_ZC_WIN_SHIFT;
    d.zc_mine.win = win | (it.func == FUNC_ALLREDUCE && it.local == it.out ? ZC_DESC_INPLACE : 0);
    d.zc_mine.off = w->zc_loc & ((1ull << CUDA_ZC_WIN_SHIFT) - 1);
    d.zc_mine.scalar = it.op == DEV_OP_PREMULSUM ? it.scalar : 0;
    d.zc_zero = 0;
  }
  __syncthreads();
  if (!zc_exchange(k, d, it, &d.zc_mine, d.zc_desc, ZC_DESC_BYTES)) return false;
  if (!zc_usable(it.func, it.root, it.n, d.zc_desc)) return direct_typed(k, d, it, w->dtype);
  for (int p = threadIdx.x; p < it.n; p += CUDA_EXEC_THREADS) {
    const zc_desc_t& z = d.zc_desc[p];
    const uint32_t slot = (uint32_t)z.win - 1; /* meaningful where z.win names a window */
    d.zc_src[p] = p == it.rank ? it.local
                  : (uint32_t)z.win == 0
                      ? nullptr /* a Broadcast's non-root: never read */
                      : static_cast<const char*>(hdr->zc_base[(size_t)slot * it.n + p]) + z.off;
  }
  /* the probe's lines (relaxed loads) before the reads of the inputs they vouch for: an acquire
   * in every thread that polled, which the barrier hands to every thread that reads */
  fence_acq_rel_sys();
  __syncthreads();
  direct_item_t rd = it;
  rd.zc_read = true;
  direct_typed(k, d, rd, w->dtype);
  /* every thread's reads of the peers' inputs are done before any release line is written */
  fence_acq_rel_sys();
  __syncthreads();
  return zc_exchange(k, d, it, &d.zc_zero, d.zc_done, ZC_DONE_BYTES);
}

/* A direct item with the whole block: the mirrors of every connection to and from the other
 * ranks come into shared memory, a 64-bit word a thread, and their positions go back at the end. */
static __device__ bool direct_run(const kctx_t& k, direct_smem_t& d, const cuda_args_hdr_t* hdr,
                                  const cuda_chan_t* ch, const cuda_work_t* w) {
  enum { WORDS = sizeof(cuda_conn_t) / 8 };
  static_assert(sizeof(cuda_conn_t) % 8 == 0, "cuda_conn_t is copied in 64-bit words");
  const int peers = hdr->nranks - 1;
  for (int t = threadIdx.x; t < 2 * peers * WORDS; t += CUDA_EXEC_THREADS) {
    const int j = t / WORDS, word = t % WORDS;
    const cuda_conn_t* src = j < peers ? ch->peer_send[j] : ch->peer_recv[j - peers];
    cuda_conn_t* dst = j < peers ? &d.send[j] : &d.recv[j - peers];
    reinterpret_cast<uint64_t*>(dst)[word] = reinterpret_cast<const uint64_t*>(src)[word];
  }
  direct_item_t it; /* in shared memory (written by one thread) it cost 0.35 us more at 8 B */
  it.local = w->sendbuff;
  it.out = w->recvbuff;
  it.unit = w->esize;
  it.count = w->count;
  it.off = w->off;
  it.cnt = w->cnt;
  it.chunk = w->chunk;
  it.func = w->func;
  it.algo = w->algo;
  it.n = hdr->nranks;
  it.rank = hdr->rank;
  it.root = w->root;
  it.op = w->op;
  it.div = w->u.scalar;
  it.scalar = work_scalar_bits(w);
  it.zc_read = false;
  __syncthreads();
  DIRECT_PHASE(1);
  const bool ok = (w->flags & CUDA_WORK_ZC) && w->algo == ALGO_ONESHOT
                      ? zc_run(k, d, hdr, w, it)
                      : direct_typed(k, d, it, w->dtype);
  __syncthreads();
  if (threadIdx.x < 2 * peers) {
    const int j = threadIdx.x;
    cuda_conn_t* home = j < peers ? ch->peer_send[j] : ch->peer_recv[j - peers];
    const cuda_conn_t& c = j < peers ? d.send[j] : d.recv[j - peers];
    home->step = c.step;
    home->head_seen = c.head_seen;
  }
  __syncthreads();
  DIRECT_PHASE(6);
  return ok;
}

/* The direct kernel's body: block b runs its channel's items in order (kernel_direct.cu). */
static __device__ void direct_block(const cuda_args_hdr_t* hdr, const cuda_work_t* works) {
  __shared__ direct_smem_t d;
  __shared__ stage_smem_t s;
  __shared__ volatile int stop;
  kctx_t k;
  k.abort_flag = hdr->abort_flag;
  k.status = hdr->status;
  k.stop = &stop;
  k.channel = hdr->chan_id[blockIdx.x];
  k.trace = nullptr;
  if (threadIdx.x == 0) stop = 0;
  __syncthreads();
  const cuda_chan_t* ch = hdr->chans + k.channel;
  for (int i = hdr->first[blockIdx.x]; i < hdr->first[blockIdx.x + 1]; i++) {
    const bool ok = works[i].proto == PROTO_SIMPLE ? stage_run(k, s, hdr, &works[i])
                                                   : direct_run(k, d, hdr, ch, &works[i]);
    if (!ok) return; /* every thread learnt it at a barrier */
  }
}

}  // namespace baton

#endif /* BATON_DEVICE_CUDA_DIRECT_DEVICE_CUH */
