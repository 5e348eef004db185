/* The staged direct algorithms on the GPU (device.h, "Staged direct algorithms"): OneShot and
 * TwoShot items with PROTO_SIMPLE. Every rank copies its input into its own staging buffer, the
 * ranks meet at a per-block barrier, and every rank reads what it needs from the others' staging
 * (mapped here: hdr->zc_base[stage_slot * nranks + p]) with 16-byte loads, combining in rank
 * order. Device code of kernel_direct.cu only (included by direct_device.cuh).
 *
 * Block b of every rank handles part b of every span (part_span), so a barrier between the
 * blocks of one index is all the ordering the data needs: what block b reads of a peer's staging
 * is what that peer's block b wrote. Every wait is bounded and looks at the abort flag. */
#ifndef BATON_DEVICE_CUDA_STAGED_DEVICE_CUH
#define BATON_DEVICE_CUDA_STAGED_DEVICE_CUH

#include "device/cuda/word_rules_device.cuh"
#include "vocab/vocab.h"

/* A diagnostic build's phase marks (tests/gpu/bench_stage.cu defines it to stamp block 0's
 * thread 0 at each numbered point); nothing in the library. */
#ifndef STAGE_PHASE
#define STAGE_PHASE(i)
#endif

namespace baton {

/* 16-byte vectors a source and thread (stage_reduce, stage_copy_out): about 8 loads in flight a
 * thread, whatever the sources. On 4 H100s 2 a source beat 4 at every size (OneShot AllReduce
 * 256 KiB 10.3 us against 12.0, TwoShot 4 MiB 38.9 against 42.0); on 2, 4 a source beat 2 from
 * 1 MiB (OneShot 4 MiB 32.0 against 38.2). 8 a source was slower still on 4, and ptxas ran 19 min
 * at 11 GB on it for every type. bench_stage.cu's variants set STAGE_UNROLL (one for all). */
#ifndef STAGE_GROUP
#define STAGE_GROUP 4 /* sources in flight together (one at a time: 2.5 us a source, now 1.1) */
#endif

/* One staged item as a block sees it (units: elements, unit bytes each). */
struct stage_item_t {
  const char* in;
  char* out;
  size_t unit, count, win; /* count: per rank (AllGather, ReduceScatter) or total; win: a round */
  int func, algo, n, rank, root, op, part, parts;
  uint64_t scalar, div;
  size_t half; /* bytes of a staging half */
};

struct stage_smem_t {
  char* base[DIRECT_MAX_RANKS]; /* every rank's staging, mapped here */
  uint64_t round;               /* rounds this block has run before this item */
};

/* [off, off + len) of part k of K of a span of n elements, parts on STAGE_ALIGN-byte multiples. */
static __device__ __forceinline__ void part_span(size_t n, int k, int K, size_t unit, size_t* off,
                                                 size_t* len) {
  span_part(n, K, k, unit < STAGE_ALIGN ? STAGE_ALIGN / unit : 1, off, len);
}

/* Every rank's block of this index has reached value v (this block's flags), after this block
 * told every peer it has (their flags). false on a stop.
 * GPU-scope ordering suffices and costs far less than system scope (a fence.acq_rel.sys waits
 * for every write in flight over NVLink: 2-10 us, docs/gpu-results.md run 18): the data a peer
 * reads is this GPU's own memory, served by its L2, which a GPU-scope release reaches before the
 * flag leaves; the reader's GPU-scope acquire of its own flag orders its loads after it, and
 * those loads go over NVLink to the writer's L2 (__ldcg / copies that do not keep stale lines). */
static __device__ __forceinline__ uint64_t ld_acquire_gpu(const uint64_t* p) {
  uint64_t v;
  asm volatile("ld.acquire.gpu.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
static __device__ __forceinline__ void fence_acq_rel_gpu() {
  asm volatile("fence.acq_rel.gpu;" ::: "memory");
}

static __device__ bool stage_barrier(const kctx_t& k, const stage_smem_t& s, const stage_item_t& it,
                                     uint64_t v) {
  bool bad = false;
  __syncthreads(); /* the block's writes before the signal (the fence below is cumulative) */
  const int p = threadIdx.x;
  if (p < it.n && p != it.rank) {
    uint64_t* theirs = reinterpret_cast<uint64_t*>(s.base[p] + STAGE_FLAGS_OFF) +
                       (size_t)it.part * DIRECT_MAX_RANKS + it.rank;
    fence_acq_rel_gpu();
    st_volatile_u64(theirs, v);
    const uint64_t* mine = reinterpret_cast<const uint64_t*>(s.base[it.rank] + STAGE_FLAGS_OFF) +
                           (size_t)it.part * DIRECT_MAX_RANKS + p;
    bad = !spin_until(k, [&] { return ld_acquire_gpu(mine) >= v; });
  }
  return !__syncthreads_or(bad);
}

/* dst[0, nbytes) = src[0, nbytes), this rank's own input as it counts in a reduction (pre-op'd
 * with this rank's scalar when the op has one), with the block. */
template <typename O>
static __device__ __noinline__ void stage_copy_in(const stage_item_t& it, char* dst,
                                                  const char* src, size_t nbytes) {
  typedef typename O::elem_t T;
  const bool pre =
      it.op == DEV_OP_PREMULSUM &&
      (it.func == FUNC_ALLREDUCE || it.func == FUNC_REDUCESCATTER || it.func == FUNC_REDUCE);
  if (!pre) {
    char* const dsts[1] = {dst};
    copy_multi(src, dsts, 1, nbytes, threadIdx.x, CUDA_EXEC_THREADS);
    return;
  }
  const T sc = O::from_bits(it.scalar);
  for (size_t at = (size_t)threadIdx.x * 8; at < nbytes; at += (size_t)CUDA_EXEC_THREADS * 8) {
    const int valid = (int)dev_min(nbytes - at, 8);
    const uint64_t w = low_bytes(load8(src + at, valid), valid);
    store8(dst + at, wrules<O>::first(w, it.op, sc), valid);
  }
}

/* dst[0, nbytes) (and dst2 unless NULL) = the n ranks' staging at soff combined in rank order,
 * then finished (post). The sources are STAGE_ALIGN-aligned (a vector past nbytes stays inside
 * the staging half: rounds end on its 16-byte multiples); dst may be anything. A thread issues
 * the loads of STAGE_GROUP sources at once, U vectors each, before it combines any:
 * a source at a time cost a load round trip over NVLink per source. */
template <typename O, int U>
static __device__ __noinline__ void stage_reduce_u(const stage_smem_t& s, const stage_item_t& it,
                                                   size_t soff, char* dst, char* dst2,
                                                   size_t nbytes) {
  typedef wrules<O> W;
  const size_t nv = (nbytes + 15) / 16;
  const bool aligned = (((uintptr_t)dst | (uintptr_t)dst2) & 15) == 0;
  for (size_t v0 = threadIdx.x; v0 < nv; v0 += (size_t)CUDA_EXEC_THREADS * U) {
    uint64_t lo[U], hi[U];
    for (int g = 0; g < it.n; g += STAGE_GROUP) {
      uint4 x[STAGE_GROUP][U];
#pragma unroll
      for (int j = 0; j < STAGE_GROUP; j++) {
        const int r = g + j;
        const uint4* src =
            r < it.n ? reinterpret_cast<const uint4*>(s.base[r] + STAGE_DATA_OFF + soff) : nullptr;
#pragma unroll
        for (int u = 0; u < U; u++) {
          const size_t v = v0 + (size_t)u * CUDA_EXEC_THREADS;
          x[j][u] = src != nullptr && v < nv ? __ldcg(src + v) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int j = 0; j < STAGE_GROUP; j++) {
        const int r = g + j;
        if (r >= it.n) break;
#pragma unroll
        for (int u = 0; u < U; u++) {
          const uint64_t l = (uint64_t)x[j][u].x | (uint64_t)x[j][u].y << 32;
          const uint64_t h = (uint64_t)x[j][u].z | (uint64_t)x[j][u].w << 32;
          lo[u] = r == 0 ? l : W::next(lo[u], l, it.op);
          hi[u] = r == 0 ? h : W::next(hi[u], h, it.op);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; u++) {
      const size_t v = v0 + (size_t)u * CUDA_EXEC_THREADS;
      if (v >= nv) break;
      const uint64_t l = W::post(lo[u], it.op, it.div), h = W::post(hi[u], it.op, it.div);
      const uint4 o =
          make_uint4((uint32_t)l, (uint32_t)(l >> 32), (uint32_t)h, (uint32_t)(h >> 32));
      const int valid = (int)dev_min(nbytes - v * 16, 16);
      if (aligned && valid == 16) {
        reinterpret_cast<uint4*>(dst)[v] = o;
        if (dst2 != nullptr) reinterpret_cast<uint4*>(dst2)[v] = o;
      } else {
        store16(dst + v * 16, o, valid);
        if (dst2 != nullptr) store16(dst2 + v * 16, o, valid);
      }
    }
  }
}

/* Copies out of peers' staging: copy i is dst[i][0, nbytes[i]) = src[i][0, nbytes[i]), src
 * a peer's staging (STAGE_ALIGN-aligned), dst anything. */
struct stage_copies_t {
  const char* src[DIRECT_MAX_RANKS];
  char* dst[DIRECT_MAX_RANKS];
  size_t nbytes[DIRECT_MAX_RANKS];
  int cnt;
};

/* Every copy of c, with the block: the loads of STAGE_GROUP copies, U 16-byte vectors
 * each, in flight a thread at once, past L1 (__ldcg: the lines change between rounds). */
template <int U>
static __device__ __noinline__ void stage_copy_out_u(const stage_copies_t& c) {
  size_t nvmax = 0;
  for (int i = 0; i < c.cnt; i++) {
    const size_t nv = (c.nbytes[i] + 15) / 16;
    if (nv > nvmax) nvmax = nv;
  }
  for (size_t v0 = threadIdx.x; v0 < nvmax; v0 += (size_t)CUDA_EXEC_THREADS * U) {
    for (int g = 0; g < c.cnt; g += STAGE_GROUP) {
      uint4 x[STAGE_GROUP][U];
#pragma unroll
      for (int j = 0; j < STAGE_GROUP; j++) {
        const int i = g + j;
        const size_t nv = i < c.cnt ? (c.nbytes[i] + 15) / 16 : 0;
        const uint4* src = reinterpret_cast<const uint4*>(i < c.cnt ? c.src[i] : nullptr);
#pragma unroll
        for (int u = 0; u < U; u++) {
          const size_t v = v0 + (size_t)u * CUDA_EXEC_THREADS;
          x[j][u] = v < nv ? __ldcg(src + v) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int j = 0; j < STAGE_GROUP; j++) {
        const int i = g + j;
        if (i >= c.cnt) break;
        const size_t nb = c.nbytes[i];
        char* const dst = c.dst[i];
        const bool aligned = ((uintptr_t)dst & 15) == 0;
#pragma unroll
        for (int u = 0; u < U; u++) {
          const size_t v = v0 + (size_t)u * CUDA_EXEC_THREADS;
          if (v * 16 >= nb) break;
          const int valid = (int)dev_min(nb - v * 16, 16);
          if (aligned && valid == 16)
            reinterpret_cast<uint4*>(dst)[v] = x[j][u];
          else
            store16(dst + v * 16, x[j][u], valid);
        }
      }
    }
  }
}

/* stage_reduce_u and stage_copy_out_u at the depth for their sources (the comment at
 * STAGE_GROUP): 4 vectors a source for one or two, else 2. */
template <typename O>
static __device__ __forceinline__ void stage_reduce(const stage_smem_t& s, const stage_item_t& it,
                                                    size_t soff, char* dst, char* dst2,
                                                    size_t nbytes) {
#ifdef STAGE_UNROLL
  stage_reduce_u<O, STAGE_UNROLL>(s, it, soff, dst, dst2, nbytes);
#else
  if (it.n <= 2)
    stage_reduce_u<O, 4>(s, it, soff, dst, dst2, nbytes);
  else
    stage_reduce_u<O, 2>(s, it, soff, dst, dst2, nbytes);
#endif
}
static __device__ __forceinline__ void stage_copy_out(const stage_copies_t& c) {
#ifdef STAGE_UNROLL
  stage_copy_out_u<STAGE_UNROLL>(c);
#else
  if (c.cnt <= 2)
    stage_copy_out_u<4>(c);
  else
    stage_copy_out_u<2>(c);
#endif
}

/* Adds a copy of nbytes from rank p's staging at soff to dst to c. */
static __device__ __forceinline__ void stage_add_copy(stage_copies_t& c, const stage_smem_t& s,
                                                      int p, size_t soff, char* dst,
                                                      size_t nbytes) {
  c.src[c.cnt] = s.base[p] + STAGE_DATA_OFF + soff;
  c.dst[c.cnt] = dst;
  c.nbytes[c.cnt] = nbytes;
  c.cnt++;
}

/* One round: elements [w0, w0 + wn) of the count, in staging half h (byte offset hoff from the
 * data start), barrier values v and v + 1. Part b's data of every slice lies in region b of the
 * half (stage_region), slice q's piece at q * sub (stage_sub), whatever the round's size: region b
 * is only ever written and read by the blocks of part b, so the barriers between them order every
 * access to it, across rounds and items of any size. */
template <typename O>
static __device__ bool stage_round(const kctx_t& k, const stage_smem_t& s, const stage_item_t& it,
                                   size_t w0, size_t wn, size_t hoff, uint64_t v) {
  const size_t u = it.unit;
  const size_t reg = hoff + stage_region(it.half, it.parts) * (size_t)it.part;
  const size_t sub = stage_sub(it.half, it.parts, it.n, it.func, it.algo);
  char* const mine = s.base[it.rank] + STAGE_DATA_OFF + reg;
  size_t po, pn;
  switch (it.func) {
    case FUNC_ALLGATHER: {
      part_span(wn, it.part, it.parts, u, &po, &pn);
      stage_copy_in<O>(it, mine, it.in + (w0 + po) * u, pn * u);
      if (!stage_barrier(k, s, it, v)) return false;
      stage_copies_t c;
      c.cnt = 0;
      for (int p = 0; p < it.n; p++) {
        char* dst = it.out + ((size_t)p * it.count + w0 + po) * u;
        if (p != it.rank || dst != it.in + (w0 + po) * u) stage_add_copy(c, s, p, reg, dst, pn * u);
      }
      stage_copy_out(c);
      return true;
    }
    case FUNC_REDUCESCATTER: {
      part_span(wn, it.part, it.parts, u, &po, &pn);
      for (int q = 0; q < it.n; q++)
        stage_copy_in<O>(it, mine + (size_t)q * sub, it.in + ((size_t)q * it.count + w0 + po) * u,
                         pn * u);
      if (!stage_barrier(k, s, it, v)) return false;
      stage_reduce<O>(s, it, reg + (size_t)it.rank * sub, it.out + (w0 + po) * u, nullptr, pn * u);
      return true;
    }
    case FUNC_BROADCAST: {
      part_span(wn, it.part, it.parts, u, &po, &pn);
      if (it.rank == it.root) {
        stage_copy_in<O>(it, mine, it.in + (w0 + po) * u, pn * u);
        if (it.out != it.in)
          stage_copy_in<O>(it, it.out + (w0 + po) * u, it.in + (w0 + po) * u, pn * u);
      }
      if (!stage_barrier(k, s, it, v)) return false;
      if (it.rank != it.root) {
        stage_copies_t c;
        c.cnt = 0;
        stage_add_copy(c, s, it.root, reg, it.out + (w0 + po) * u, pn * u);
        stage_copy_out(c);
      }
      return true;
    }
    case FUNC_REDUCE: {
      part_span(wn, it.part, it.parts, u, &po, &pn);
      stage_copy_in<O>(it, mine, it.in + (w0 + po) * u, pn * u);
      if (!stage_barrier(k, s, it, v)) return false;
      if (it.rank == it.root) stage_reduce<O>(s, it, reg, it.out + (w0 + po) * u, nullptr, pn * u);
      return true;
    }
    default: /* AllReduce */
      if (it.algo != ALGO_TWOSHOT) {
        part_span(wn, it.part, it.parts, u, &po, &pn);
        stage_copy_in<O>(it, mine, it.in + (w0 + po) * u, pn * u);
        STAGE_PHASE(2);
        if (!stage_barrier(k, s, it, v)) return false;
        STAGE_PHASE(3);
        stage_reduce<O>(s, it, reg, it.out + (w0 + po) * u, nullptr, pn * u);
        STAGE_PHASE(4);
        return true;
      }
      {
        /* slice q of the round: [q * sp, ...) as ring_part cuts it; part b of each */
        const size_t sp = ring_part(wn, (size_t)it.n, u, wn);
        for (int q = 0; q < it.n; q++) {
          const size_t so = dev_min((size_t)q * sp, wn), sn = dev_min(sp, wn - so);
          part_span(sn, it.part, it.parts, u, &po, &pn);
          stage_copy_in<O>(it, mine + (size_t)q * sub, it.in + (w0 + so + po) * u, pn * u);
        }
        STAGE_PHASE(2);
        if (!stage_barrier(k, s, it, v)) return false;
        STAGE_PHASE(3);
        {
          const size_t so = dev_min((size_t)it.rank * sp, wn), sn = dev_min(sp, wn - so);
          part_span(sn, it.part, it.parts, u, &po, &pn);
          stage_reduce<O>(s, it, reg + (size_t)it.rank * sub, it.out + (w0 + so + po) * u,
                          mine + (size_t)it.rank * sub, pn * u);
        }
        STAGE_PHASE(4);
        if (!stage_barrier(k, s, it, v + 1)) return false;
        STAGE_PHASE(5);
        stage_copies_t c;
        c.cnt = 0;
        for (int q = 0; q < it.n; q++) {
          if (q == it.rank) continue;
          const size_t so = dev_min((size_t)q * sp, wn), sn = dev_min(sp, wn - so);
          part_span(sn, it.part, it.parts, u, &po, &pn);
          stage_add_copy(c, s, q, reg + (size_t)q * sub, it.out + (w0 + so + po) * u, pn * u);
        }
        stage_copy_out(c);
        STAGE_PHASE(6);
        return true;
      }
  }
}

/* The item's rounds; the block's round counter goes on from where the last item left it. Inlined
 * into stage_typed: out of line it was slower (4 GPUs, ReduceScatter 256 KiB 10.3 us, not 9.9). */
template <typename O>
static __device__ bool stage_item(const kctx_t& k, const stage_smem_t& s, const stage_item_t& it,
                                  size_t half) {
  uint64_t e = s.round;
  for (size_t w0 = 0; w0 < it.count; w0 += it.win) {
    e++;
    const size_t wn = dev_min(it.win, it.count - w0);
    if (!stage_round<O>(k, s, it, w0, wn, (size_t)(e & 1) * it.half, 2 * e)) return false;
  }
  return true;
}

static __device__ __noinline__ bool stage_typed(const kctx_t& k, const stage_smem_t& s,
                                                const stage_item_t& it, int dtype, size_t half) {
  return with_dtype_ops(dtype, [&](auto o) { return stage_item<decltype(o)>(k, s, it, half); });
}

/* A staged item's start, with the whole block: the item from its work, every rank's staging in
 * shared memory and the block's round counter (launch.c: off is the part, cnt the parts, chunk the
 * round's elements, zc_loc the staging slot and the half's bytes, u.scalar / u.scalar_ptr the op's
 * scalar). */
static __device__ void stage_begin(stage_smem_t& s, const cuda_args_hdr_t* hdr,
                                   const cuda_work_t* w, stage_item_t& it) {
  it.in = w->sendbuff;
  it.out = w->recvbuff;
  it.unit = w->esize;
  it.count = w->count;
  it.win = w->chunk;
  it.func = w->func;
  it.algo = w->algo;
  it.n = hdr->nranks;
  it.rank = hdr->rank;
  it.root = w->root;
  it.op = w->op;
  it.part = (int)w->off;
  it.parts = (int)w->cnt;
  it.div = w->u.scalar;
  it.scalar = work_scalar_bits(w);
  const size_t slot = (size_t)(w->zc_loc & 0xffff);
  it.half = (size_t)(w->zc_loc >> 16);
  if (threadIdx.x < it.n)
    s.base[threadIdx.x] = static_cast<char*>(hdr->zc_base[slot * it.n + threadIdx.x]);
  if (threadIdx.x == 0)
    s.round = *reinterpret_cast<const volatile uint64_t*>(
        static_cast<char*>(hdr->zc_base[slot * it.n + it.rank]) + STAGE_ROUNDS_OFF +
        (size_t)it.part * 8);
  __syncthreads();
  STAGE_PHASE(1);
}

/* A staged item's end: the block's round counter goes on by the item's rounds (when it ran). */
static __device__ bool stage_end(stage_smem_t& s, const stage_item_t& it, bool ok) {
  __syncthreads();
  if (threadIdx.x == 0 && ok) {
    const uint64_t rounds = (it.count + it.win - 1) / it.win;
    *reinterpret_cast<volatile uint64_t*>(s.base[it.rank] + STAGE_ROUNDS_OFF +
                                          (size_t)it.part * 8) = s.round + rounds;
  }
  __syncthreads();
  STAGE_PHASE(7);
  return ok;
}

/* A staged item with the whole block. */
static __device__ bool stage_run(const kctx_t& k, stage_smem_t& s, const cuda_args_hdr_t* hdr,
                                 const cuda_work_t* w) {
  stage_item_t it;
  stage_begin(s, hdr, w, it);
  return stage_end(s, it, stage_typed(k, s, it, w->dtype, it.half));
}

}  // namespace baton

#endif /* BATON_DEVICE_CUDA_STAGED_DEVICE_CUH */
