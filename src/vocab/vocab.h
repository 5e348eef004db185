/* Baton's vocabulary: the words every layer above src/base shares, defined once.
 *   - functions, algorithms and protocols (values follow stock's order),
 *   - which function x algorithm x protocol exists on a communicator (vocab_supports: the one
 *     table the tuning model, the planner, both executors and the tests consult),
 *   - the connection FIFO (conn_fifo_t) and its helpers: the slot of a step, whether a sender may
 *     fill a step's slot, publishing a step; the proxy, the executors' primitives (host and
 *     CUDA), the simulator and core's slot sizes go through them,
 *   - the work format the planner produces and every executor carries out as it is: reduction
 *     operators as executors see them, work items (work_t), operations without peers
 *     (local_op_t) and plans (plan_t); how a span is cut into channel slices (span_part),
 *   - how a work item becomes lanes (steps_lane) and a lane steps (steps_count, steps_plan): the
 *     step math both ends of every connection share, whichever executor drives each end.
 * Plain C11 with nothing but libc, included by topo, transport, proxy, device (host C and nvcc)
 * and everything above; it includes no Baton header. */
#ifndef BATON_VOCAB_H
#define BATON_VOCAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Functions both executors compile: host C, and host and device code under nvcc. */
#ifdef __CUDACC__
#define DEVICE_HOST_FN static __host__ __device__ __forceinline__
#else
#define DEVICE_HOST_FN static inline
#endif

/* ---- Protocols, algorithms, functions (values follow stock's order) ------------------------ */
#define NCCL_STEPS 8
enum { PROTO_LL = 0, PROTO_LL128 = 1, PROTO_SIMPLE = 2, PROTO_COUNT = 3 };
/* Tree and Ring follow stock's numbering; OneShot and TwoShot are Baton's direct algorithms for
 * ranks of one host whose GPUs reach each other (P2P): every rank talks to every other rank
 * straight away through the connection FIFOs with LL, one or two hops instead of a ring's 2(n-1)
 * (their steps: "Steps" below); with PROTO_SIMPLE they run staged, on GPUs whose ranks share
 * staging buffers (device.h, "Staged direct algorithms"; OneShot then runs Reduce too). Up to
 * DIRECT_MAX_RANKS ranks; NCCL_ALGO names them OneShot and TwoShot. */
enum { ALGO_TREE = 0, ALGO_RING = 1, ALGO_ONESHOT = 2, ALGO_TWOSHOT = 3, ALGO_COUNT = 4 };
#define DIRECT_MAX_RANKS 8
#define DIRECT_MAX_PEERS (DIRECT_MAX_RANKS - 1)
typedef enum {
  FUNC_BROADCAST = 0,
  FUNC_REDUCE,
  FUNC_ALLGATHER,
  FUNC_REDUCESCATTER,
  FUNC_ALLREDUCE,
  FUNC_SEND,
  FUNC_RECV,
  FUNC_COUNT
} func_t;

/* Ring AllReduce on 2 ranks with LL or LL128 runs as an exchange: per chunk, step 0 sends this
 * rank's chunk (pre-op applied) to the peer, step 1 receives the peer's and reduces it with its
 * own. One hop instead of two, the same bytes on the link; both ranks combine the same two values
 * (every op is commutative for two operands, so the results are bit-identical). Every executor
 * cuts its steps by this rule, and the tuning model counts its hops by it. */
#define RING_ALLREDUCE_EXCHANGE(nranks, proto) ((nranks) == 2 && (proto) != PROTO_SIMPLE)

/* ---- What exists: the capability table ------------------------------------------------------
 * What a communicator offers, as far as the caller knows it. */
typedef struct vocab_caps {
  bool ll128;  /* LL128 may run: GPUs (128-byte stores seen whole, an NVLink property) and, for a
                * communicator, every rank agreed on it */
  bool direct; /* OneShot/TwoShot are not ruled out here (when they pay is the planner's policy) */
  bool staged; /* the staged OneShot/TwoShot (Simple, over the peers' staging; device.h, "Staged
                * direct algorithms") may run: the communicator has staging (GPUs only) */
  int nranks;
  int nhosts; /* hosts the ranks span; 0: unknown to the caller (an executor: the planner checked)
               */
} vocab_caps_t;

/* Whether function func runs with algorithm algo and protocol proto on a communicator with caps:
 *   protocols   LL and Simple everywhere; LL128 only where caps->ll128.
 *   Ring        every collective (Broadcast, Reduce, AllGather, ReduceScatter, AllReduce).
 *   Tree        AllReduce.
 *   OneShot     with LL: AllReduce, AllGather, ReduceScatter, Broadcast; with Simple (staged,
 *               only where caps->staged): those and Reduce.
 *   TwoShot     AllReduce, with LL, or with Simple where caps->staged. Both only on 2 to
 *               DIRECT_MAX_RANKS ranks of one host, and where caps->direct; never LL128.
 * Send and Recv have no algorithm (false for every one); out-of-range values are false. */
DEVICE_HOST_FN bool vocab_proto_supported(int proto, const vocab_caps_t* caps) {
  return proto == PROTO_LL || proto == PROTO_SIMPLE || (proto == PROTO_LL128 && caps->ll128);
}
DEVICE_HOST_FN bool vocab_direct_supported(int proto, const vocab_caps_t* caps) {
  return (proto == PROTO_LL || (proto == PROTO_SIMPLE && caps->staged)) && caps->direct &&
         caps->nranks >= 2 && caps->nranks <= DIRECT_MAX_RANKS && caps->nhosts <= 1;
}
/* The direct algorithms talk to every other rank at once. With Simple they are staged: they run
 * over the peers' staging and use no connection (device.h, "Staged direct algorithms"); with LL
 * they write the peers' FIFOs. */
DEVICE_HOST_FN bool vocab_algo_is_direct(int algo) {
  return algo == ALGO_ONESHOT || algo == ALGO_TWOSHOT;
}
DEVICE_HOST_FN bool vocab_algo_is_staged(int algo, int proto) {
  return vocab_algo_is_direct(algo) && proto == PROTO_SIMPLE;
}
DEVICE_HOST_FN bool vocab_supports(int func, int algo, int proto, const vocab_caps_t* caps) {
  if (func < FUNC_BROADCAST || func > FUNC_ALLREDUCE) return false; /* collectives only */
  if (!vocab_proto_supported(proto, caps)) return false;
  switch (algo) {
    case ALGO_RING:
      return true;
    case ALGO_TREE:
      return func == FUNC_ALLREDUCE;
    case ALGO_ONESHOT:
      return (func != FUNC_REDUCE || proto == PROTO_SIMPLE) && vocab_direct_supported(proto, caps);
    case ALGO_TWOSHOT:
      return func == FUNC_ALLREDUCE && vocab_direct_supported(proto, caps);
    default:
      return false;
  }
}

/* ---- Connection FIFO ----------------------------------------------------------------------------
 * One direction of one connection (channel, peer). The receiver owns the slot memory; a FIFO has
 * NCCL_STEPS slots per protocol. Counters count steps (slots filled or freed since connect):
 *   tail: producer progress. The sender publishes step s+1 after filling slot fifo_slot(s)
 *         (all protocols publish it; LL readers may ignore it and poll line flags instead).
 *   head: consumer progress. The receiver publishes s+1 after it is done reading slot s.
 * A sender may fill the slot of step s once head >= s + 1 - NCCL_STEPS (fifo_may_send).
 * Simple: raw bytes; sizes[fifo_slot(s)] = bytes in the slot, written before the tail.
 * LL:     16-byte lines {data0, flag0, data1, flag1} (uint32 each); flag = (uint32_t)(s + 1).
 *         Each 8-byte {data, flag} half is written with one 64-bit store, so a reader that sees
 *         the flag sees the data. A line carries 8 data bytes.
 * LL128:  128-byte lines: 120 data bytes and, in the last 8 bytes, flag = s + 1 (GPU only, NVLink).
 * The executor keeps its own position in `step` (persists across operations: both sides advance
 * the same connection identically because they run the same plan). */
typedef struct conn_fifo {
  char* buffs[PROTO_COUNT];    /* slot memory per protocol (receiver-owned, or proxy staging) */
  int buff_bytes[PROTO_COUNT]; /* whole FIFO per protocol; slot = fifo_slot_bytes(buff_bytes) */
  volatile uint64_t* head;     /* consumer progress (see above) */
  volatile uint64_t* tail;     /* producer progress */
  volatile int* sizes;         /* NCCL_STEPS entries: bytes in each slot (all protocols) */
  uint64_t step;               /* executor-local position */
  int flags;                   /* CONN_FLAG_* */
  int net_dev;                 /* NET: the network device this end uses, else -1 (baton-sim) */
  /* The receiver's output mailbox, in the receiver's memory beside head and tail (both ends point
   * at it): dmbox[0] the base of its output buffer for the current item, dmbox[1] the tag that
   * says which item (steps_direct_tag), written after it. Used by CONN_FLAG_DIRECT ends only. */
  volatile uint64_t* dmbox;
} conn_fifo_t;
#define CONN_FLAG_NET 0x1     /* driven by the proxy (NET transport) */
#define CONN_FLAG_HOSTMEM 0x2 /* slot memory is host memory */
/* Both ends in one process, the sender able to store into the receiver's device memory (P2P
 * direct pointer, NCCL_P2P_DIRECT_DISABLE unset): a direct item's steps that only deliver data
 * (steps_recv_direct) write it straight into the receiver's output instead of a slot. */
#define CONN_FLAG_DIRECT 0x4

typedef union ll_line {
  struct {
    uint32_t data0, flag0, data1, flag1;
  } s;
  uint64_t v[2];
} ll_line_t;
#define LL128_LINE_BYTES 128
#define LL128_DATA_BYTES 120

/* The FIFO helpers: pure arithmetic on counters (no loads of their own), so the CUDA primitives
 * use them at no cost. Every `step % NCCL_STEPS` of src/ is fifo_slot. */
/* The slot step s fills (and its entry in sizes[]). */
DEVICE_HOST_FN uint32_t fifo_slot(uint64_t step) {
  return (uint32_t)(step % NCCL_STEPS);
}
/* Bytes of one slot of a protocol's buffer of fifo_bytes (conn_fifo_t.buff_bytes[proto]). */
DEVICE_HOST_FN size_t fifo_slot_bytes(int fifo_bytes) {
  return (size_t)fifo_bytes / NCCL_STEPS;
}
/* Data bytes a slot of proto's buffer of fifo_bytes carries: all of it with Simple, 8 of each
 * 16-byte LL line, LL128_DATA_BYTES of each LL128 line. */
DEVICE_HOST_FN size_t fifo_slot_data_bytes(int fifo_bytes, int proto) {
  const size_t slot = fifo_slot_bytes(fifo_bytes);
  if (proto == PROTO_LL) return slot / sizeof(ll_line_t) * 8;
  if (proto == PROTO_LL128) return slot / LL128_LINE_BYTES * LL128_DATA_BYTES;
  return slot;
}
/* Where step s's slot starts in a protocol's buffer of fifo_bytes. */
DEVICE_HOST_FN char* fifo_slot_ptr(char* buff, int fifo_bytes, uint64_t step) {
  return buff + (size_t)fifo_slot(step) * fifo_slot_bytes(fifo_bytes);
}
/* Whether the sender may fill the slot of step s, the receiver's head being `head` (the receiver
 * has freed the slot's previous use, step s - NCCL_STEPS). Also: whether a side that has finished
 * `head` steps leaves room for step s of a side at most NCCL_STEPS ahead of it. */
DEVICE_HOST_FN bool fifo_may_send(uint64_t head, uint64_t step) {
  return head + NCCL_STEPS >= step + 1;
}
/* The lowest head that lets the sender fill the slot of step s (0 for the first NCCL_STEPS). */
DEVICE_HOST_FN uint64_t fifo_head_needed(uint64_t step) {
  return step + 1 > NCCL_STEPS ? step + 1 - NCCL_STEPS : 0;
}

/* Publishing step s from host code: its size first, then the tail with release order, so a
 * receiver that acquires the tail sees the size and the slot's data. (The CUDA primitives publish
 * with their own stores and fences, at the same indices: fifo_slot.) */
#ifndef __CUDA_ARCH__
static inline void fifo_publish(volatile int* sizes, volatile uint64_t* tail, uint64_t step,
                                int bytes) {
  sizes[fifo_slot(step)] = bytes;
  __atomic_store_n(tail, step + 1, __ATOMIC_RELEASE);
}
#endif

/* ---- Reduction operators as executors see them ---------------------------------------------- */
typedef enum {
  DEV_OP_SUM = 0,
  DEV_OP_PROD,
  DEV_OP_MIN,
  DEV_OP_MAX,
  DEV_OP_PREMULSUM,  /* each contribution is multiplied by scalar when first loaded, then summed;
                      * also floating types' ncclAvg (scalar = 1/nranks in the datatype) */
  DEV_OP_SUMPOSTDIV, /* integers' ncclAvg: sum, then divide the final result by scalar (the rank
                      * count, C division: truncates toward zero, signed types as signed) */
  DEV_OP_COUNT
} dev_op_kind_t;
typedef struct dev_redop {
  uint8_t kind;             /* dev_op_kind_t */
  uint8_t scalar_on_device; /* PREMULSUM with ncclScalarDevice: scalar_ptr is read at run time */
  uint64_t scalar; /* the scalar's bits, in the datatype (PREMULSUM) or as uint64 (SUMPOSTDIV) */
  const void* scalar_ptr;
} dev_redop_t;

/* ---- Work format: the planner's output ---------------------------------------------------------
 * One work item is one operation's share on one channel, as the planner (src/collectives/plan.c)
 * decided it: the executors carry it out without deriving anything of their own. Units are
 * elements for collectives and bytes for point-to-point. */
typedef struct work {
  uint8_t func;  /* func_t */
  uint8_t algo;  /* ALGO_* (collectives) */
  uint8_t proto; /* PROTO_* */
  uint8_t dtype; /* ncclDataType_t */
  dev_redop_t op;
  const void* sendbuff;
  void* recvbuff;
  size_t count;    /* per-rank count: AllGather sendcount, ReduceScatter recvcount, else total
                    * (elements, whatever the function) */
  size_t chan_off; /* this channel's slice [chan_off, chan_off + chan_count) of that count, in
                    * units (never empty) */
  size_t chan_count;
  size_t chunk; /* units per step: at most one slot's payload of every connection the item
                 * uses (both ends of a connection cut it into the same steps) */
  int root;     /* Broadcast/Reduce root; Send/Recv peer (never this rank) */
  int root_idx; /* Broadcast/Reduce on a ring: the root's position in the channel's ring */
  int nranks;
  /* Zero copy (OneShot items only; see device.h's "Registered windows"). zc: the item starts with
   * the probe. zc_win: the shared window slot holding this rank's whole send span (-1: none);
   * zc_off: sendbuff's offset in it, in bytes. */
  uint8_t zc;
  int zc_win;
  size_t zc_off;
  /* Items steps_direct_writes allows, on the GPU executor: over CONN_FLAG_DIRECT connections,
   * the steps that only deliver data write it into the next rank's output ("Direct writes":
   * steps_send_direct); the same on every rank. */
  uint8_t direct;
} work_t;

/* Work that needs no peer: a send to self paired with its receive from self, or a collective on a
 * communicator of one rank. A copy unless the operation changes the data (PreMulSum, floating
 * types' Avg): dst = src * scalar, element by element. The planner leaves out copies onto
 * themselves (in place) and empty ones. */
typedef struct local_op {
  const void* src;
  void* dst;
  size_t count;   /* elements of dtype */
  uint8_t dtype;  /* ncclDataType_t */
  dev_redop_t op; /* DEV_OP_PREMULSUM: scaled; any other kind: a copy */
} local_op_t;

/* A plan: everything one ncclGroupEnd (or one call) runs on one communicator. Channel lists run
 * in order; local operations are independent of them (an executor may run them before, after or
 * beside the channels' work). */
#define PLAN_MAX_CHANNELS 64
typedef struct plan {
  int nchannels;
  int nwork[PLAN_MAX_CHANNELS];
  work_t* works[PLAN_MAX_CHANNELS]; /* per-channel lists, run in order (p2p items may interleave) */
  int nlocal;
  const local_op_t* local;
} plan_t;

/* Whether a plan has work for peers on some channel (a kernel or host-channel run); plan.local
 * alone needs none. */
static inline bool plan_has_channel_work(const plan_t* p) {
  for (int c = 0; c < p->nchannels; c++)
    if (p->nwork[c] > 0) return true;
  return false;
}

/* ---- Arithmetic both executors share ----------------------------------------------------------
 */
/* a / b and a % b, in 32 bits when both fit (a 64-bit division is a long software routine on the
 * GPU); the smaller of two sizes. */
DEVICE_HOST_FN size_t dev_udiv(size_t a, size_t b) {
  return ((a | b) >> 32) == 0 ? (size_t)((uint32_t)a / (uint32_t)b) : a / b;
}
DEVICE_HOST_FN size_t dev_umod(size_t a, size_t b) {
  return ((a | b) >> 32) == 0 ? (size_t)((uint32_t)a % (uint32_t)b) : a % b;
}
DEVICE_HOST_FN size_t dev_min(size_t a, size_t b) {
  return a < b ? a : b;
}
/* Ring AllReduce cuts a loop of lc elements into n parts of ring_part() elements (the last ones
 * may be shorter or empty): lc / n rounded up to 16 bytes, so every part starts 16-byte aligned
 * when the buffers are (the reductions then move 16-byte vectors), and never more than a chunk
 * (n chunks always cover a loop). Both executors cut their steps by this rule. */
DEVICE_HOST_FN size_t ring_part(size_t lc, size_t n, size_t unit, size_t chunk) {
  const size_t align = unit < 16 ? 16 / unit : 1; /* unit is 1, 2, 4 or 8: align a power of 2 */
  const size_t part = (dev_udiv(lc + n - 1, n) + align - 1) & ~(align - 1);
  return part < chunk ? part : chunk;
}

/* How a span is cut into parts, the same on the host and on the GPU: the planner's channel slices
 * (plan.c, coll_split) and the staged kernel's parts (staged_device.cuh). */
/* [*off, *off + *n) of part k of nparts of total units, every part but the last a multiple of
 * align units (the same number of them), the last ones possibly shorter or empty. */
DEVICE_HOST_FN void span_part(size_t total, int nparts, int k, size_t align, size_t* off,
                              size_t* n) {
  if (align == 0) align = 1;
  if (nparts < 1) nparts = 1;
  const size_t per =
      dev_udiv(dev_udiv(total + align - 1, align) + (size_t)nparts - 1, (size_t)nparts) * align;
  const size_t start = per * (size_t)k;
  *off = start < total ? start : total;
  *n = start < total ? dev_min(per, total - start) : 0;
}

/* ---- Steps -----------------------------------------------------------------------------------
 * The step math of every executor: for a lane (one work item's share on one channel, or one
 * direction of a tree) and a step index k, whom step k receives from and sends to, which part of
 * the user's buffers it reads and writes, and whether it reduces. Pure functions, plain C, compiled
 * into the host executor and into the CUDA kernel alike (DEVICE_HOST_FN): both ends of a
 * connection cut it into the same steps carrying the same data, whichever executor drives each
 * end, because there is one copy of the rules.
 *
 * Peers are named by role (step_role_t); the host executor maps a role to a rank, the CUDA
 * executor to one of its group's connection slots.
 *
 * Ring (n ranks, my ring index idx, data flows idx -> idx+1):
 *   AllReduce     (2 ranks, LL/LL128: the exchange of device.h's RING_ALLREDUCE_EXCHANGE)
 *                 loops of n parts of at most `chunk` elements; per loop 2n-1 steps:
 *                 s=0 send part idx-1; s=1..n-2 recv part idx-1-s, reduce, send;
 *                 s=n-1 recv part idx, reduce, finish (postop), output, send;
 *                 s=n-1+t (t=1..n-1) recv part idx-t, output, send unless t=n-1.
 *   ReduceScatter per chunk n steps over the blocks (block m = rank ring[m]'s):
 *                 s=0 send block idx-1; s=1..n-2 recv block idx-1-s, reduce, send;
 *                 s=n-1 recv block idx, reduce, finish, output.
 *   AllGather     per chunk n steps: s=0 send my block (and copy it to my output block);
 *                 s=1..n-1 recv block idx-s, output, send unless s=n-1.
 *   Broadcast     per chunk one step along the chain root -> root+1 -> ... -> root-1.
 *   Reduce        per chunk one step along the chain root+1 -> ... -> root-1 -> root.
 * Tree (AllReduce): per chunk an up step (recv every child, reduce with mine, send to the parent;
 * the root finishes and outputs) and a down step (recv from the parent, output, send to every
 * child; the root sends its output).
 * Direct (ALGO_ONESHOT / ALGO_TWOSHOT, LANE_DIRECT): one lane talks to every other
 * rank; "peer j" is the j-th other rank in rank order (steps_other_rank). Per chunk:
 *   OneShot AllReduce     s=0 send my chunk to every peer; s=1 recv every peer's chunk, combine
 *                         with mine in rank order (each pre-op'd by its sender), finish, output.
 *   OneShot AllGather     s=0 send my chunk to every peer and to my block of the output; s=1 recv
 *                         peer p's chunk into p's block.
 *   OneShot ReduceScatter s=0 send block p of my input to each peer p; s=1 recv my block's chunk
 *                         from every peer, combine with mine in rank order, finish, output.
 *   OneShot Broadcast     one step: the root sends the chunk to every peer (and its output), the
 *                         others receive it from the root.
 *   TwoShot AllReduce     the chunk in n parts (ring_part): s=0 send part p to each peer p;
 *                         s=1 recv part `rank` from every peer, combine with mine in rank order,
 *                         finish, output, send the result to every peer; s=2 recv part p from
 *                         each peer p into the output.
 * One lane, so each connection carries its steps in one order and a step that writes the output
 * in place comes after the sends that read it. */
typedef enum {
  LANE_RING,      /* any collective over the channel's ring */
  LANE_TREE_UP,   /* AllReduce tree: reduce towards the root */
  LANE_TREE_DOWN, /* AllReduce tree: broadcast from the root */
  LANE_SEND,      /* point-to-point */
  LANE_RECV,
  LANE_DIRECT /* OneShot / TwoShot: every other rank */
} lane_kind_t;

/* Whom a step receives from or sends to. 0 .. STEP_MAX_PEERS-1: the j-th tree child, or the j-th
 * other rank (direct lanes). */
#define STEP_MAX_PEERS DIRECT_MAX_PEERS
typedef enum {
  STEP_ROLE_RING_PREV = STEP_MAX_PEERS,
  STEP_ROLE_RING_NEXT,
  STEP_ROLE_TREE_UP,
  STEP_ROLE_P2P_PEER
} step_role_t;

/* A lane's geometry: everything its steps depend on. */
typedef struct step_lane {
  uint8_t kind; /* lane_kind_t */
  uint8_t func; /* func_t */
  uint8_t proto;
  uint8_t algo;         /* direct lanes: ALGO_ONESHOT or ALGO_TWOSHOT */
  size_t unit;          /* bytes per unit (datatype size; 1 for point-to-point) */
  const char* sendbuff; /* base pointers of the operation */
  char* recvbuff;
  size_t count;               /* work count (per-rank count for AllGather/ReduceScatter) */
  size_t off, cnt;            /* the channel's slice, in units */
  size_t chunk;               /* units per step (already clamped to the slots) */
  int n, idx, root_idx, rank; /* ring: ranks, my ring index, the root's, my rank (a direct
                               * Broadcast: root_idx is the root's rank) */
  const int* ring;            /* ring order (n ranks) */
  bool has_up;                /* tree: a parent */
  int ndown;                  /* tree: children */
  bool direct;                /* work_t.direct */
} step_lane_t;

/* One step. */
typedef struct step {
  const char* local; /* this rank's data for the step (NULL: none) */
  char* out;         /* the user's output for the step (NULL: none) */
  size_t nelem;      /* units */
  int nrecv, nsend;
  int recv[STEP_MAX_PEERS]; /* step_role_t or a child / other-rank index */
  int send[STEP_MAX_PEERS];
  int local_pos; /* -1: local data first (its pre-op applied); else its place among the received
                  * sources, pre-op'd by their senders (a direct send of this rank's own input
                  * is), combined in rank order (direct lanes: every rank gets the same bits) */
  bool reduce;   /* combine local and received data with the op; else copy */
  bool postop;   /* the result is final (SUMPOSTDIV divides it) */
  /* Direct steps that do not reduce: what goes to (from local) or comes from (into out) rank p is
   * its own span, steps_peer_span: with part > 0 the p-th part of the step's nelem units, else
   * nelem units at p * peer_stride (0: the same data for every peer). */
  size_t part, peer_stride;
} step_t;

DEVICE_HOST_FN size_t steps_div_up(size_t a, size_t b) {
  return dev_udiv(a + b - 1, b);
}
DEVICE_HOST_FN int steps_ring_mod(int a, int n) {
  return ((a % n) + n) % n;
}

/* Direct lanes: steps per chunk (see the header). */
DEVICE_HOST_FN int steps_direct_per_chunk(const step_lane_t* ln) {
  if (ln->algo == ALGO_TWOSHOT) return 3;
  return ln->func == FUNC_BROADCAST ? 1 : 2;
}
/* The rank of peer j (the j-th other rank in rank order) of rank me, and back. */
DEVICE_HOST_FN int steps_other_rank(int me, int j) {
  return j < me ? j : j + 1;
}
DEVICE_HOST_FN int steps_peer_index(int me, int rank) {
  return rank < me ? rank : rank - 1;
}
/* A direct step's span for rank p: offset (units from local or out) and length. */
DEVICE_HOST_FN void steps_peer_span(const step_t* st, int p, size_t* off, size_t* n) {
  if (st->part > 0) {
    const size_t a = dev_min((size_t)p * st->part, st->nelem);
    *off = a;
    *n = dev_min(st->part, st->nelem - a);
  } else {
    *off = (size_t)p * st->peer_stride;
    *n = st->nelem;
  }
}
/* Whether sends and receives of the step go by steps_peer_span. */
DEVICE_HOST_FN bool steps_per_peer(const step_t* st) {
  return !st->reduce && (st->part > 0 || st->peer_stride > 0);
}

/* ---- A work item's lane, the same in every executor ---------------------------------------------
 * The planner decided everything about a work item (work_t: slice, step, root); the
 * executors take it as it is. What a lane needs of an item is a step_item_t: the host executor
 * (host/lanes.c) and the simulator (sim/engine.c) make it from a work_t (steps_item_of_work), the
 * kernel from its packed copy (cuda_exec.h's cuda_work_item, of launch.c's cuda_work_geo);
 * steps_lane makes the lane, to which the executor adds only its channel's links (ring order and
 * position, tree parent and children) and whose roles it maps to its connections.
 * tests/unit/test_lanes.c checks that both ways give the same lane. */
typedef struct step_item {
  uint8_t func, algo, proto;
  size_t esize; /* the datatype's size */
  const void* sendbuff;
  void* recvbuff;
  size_t count, off, cnt, chunk; /* work_t.count, chan_off, chan_count, chunk */
  int root;                      /* steps_item_root */
  bool direct;                   /* work_t.direct */
} step_item_t;

/* Units of an item's steps: point-to-point counts bytes, collectives elements. */
DEVICE_HOST_FN size_t steps_unit(int func, size_t esize) {
  return func == FUNC_SEND || func == FUNC_RECV ? 1 : esize;
}
/* The root as an item's lane names it: a ring's root is its position in the channel's ring
 * (work_t.root_idx), a direct Broadcast's its rank, a point-to-point item's the peer (work_t.root).
 */
DEVICE_HOST_FN int steps_item_root(int func, int algo, int root, int root_idx) {
  const bool p2p = func == FUNC_SEND || func == FUNC_RECV;
  return !p2p && (algo == ALGO_RING || algo == ALGO_TREE) ? root_idx : root;
}
DEVICE_HOST_FN step_item_t steps_item_of_work(const work_t* w, size_t esize) {
  step_item_t it;
  it.func = w->func;
  it.algo = w->algo;
  it.proto = w->proto;
  it.esize = esize;
  it.sendbuff = w->sendbuff;
  it.recvbuff = w->recvbuff;
  it.count = w->count;
  it.off = w->chan_off;
  it.cnt = w->chan_count;
  it.chunk = w->chunk;
  it.root = steps_item_root(w->func, w->algo, w->root, w->root_idx);
  it.direct = w->direct != 0;
  return it;
}
/* The lane of kind `kind` (lane_kind_t) of item it on rank `rank` of n; no channel links yet. */
DEVICE_HOST_FN step_lane_t steps_lane(int kind, const step_item_t* it, int n, int rank) {
  step_lane_t ln;
  ln.kind = (uint8_t)kind;
  ln.func = it->func;
  ln.proto = it->proto;
  ln.algo = it->algo;
  ln.unit = steps_unit(it->func, it->esize);
  ln.sendbuff = (const char*)it->sendbuff;
  ln.recvbuff = (char*)it->recvbuff;
  ln.count = it->count;
  ln.off = it->off;
  ln.cnt = it->cnt;
  ln.chunk = it->chunk;
  ln.n = n;
  ln.idx = 0;
  ln.root_idx = it->root;
  ln.rank = rank;
  ln.ring = NULL;
  ln.has_up = false;
  ln.ndown = 0;
  ln.direct = it->direct;
  return ln;
}

/* Number of steps of a lane. */
DEVICE_HOST_FN size_t steps_count(const step_lane_t* ln) {
  if (ln->cnt == 0) return 0;
  switch (ln->kind) {
    case LANE_RING:
      switch (ln->func) {
        case FUNC_ALLREDUCE:
          if (RING_ALLREDUCE_EXCHANGE(ln->n, ln->proto))
            return steps_div_up(ln->cnt, ln->chunk) * 2;
          return steps_div_up(ln->cnt, (size_t)ln->n * ln->chunk) * (size_t)(2 * ln->n - 1);
        case FUNC_ALLGATHER:
        case FUNC_REDUCESCATTER:
          return steps_div_up(ln->cnt, ln->chunk) * (size_t)ln->n;
        default:
          return steps_div_up(ln->cnt, ln->chunk);
      }
    case LANE_TREE_DOWN:
      return ln->has_up || ln->ndown > 0 ? steps_div_up(ln->cnt, ln->chunk) : 0;
    case LANE_DIRECT:
      return steps_div_up(ln->cnt, ln->chunk) * (size_t)steps_direct_per_chunk(ln);
    default:
      return steps_div_up(ln->cnt, ln->chunk); /* tree up, send, recv */
  }
}

DEVICE_HOST_FN const char* steps_at_in(const step_lane_t* ln, const char* base, size_t u) {
  return base + u * ln->unit;
}
DEVICE_HOST_FN char* steps_at_out(const step_lane_t* ln, char* base, size_t u) {
  return base + u * ln->unit;
}
DEVICE_HOST_FN void steps_recv(step_t* st, int role) {
  st->recv[st->nrecv++] = role;
}
DEVICE_HOST_FN void steps_send(step_t* st, int role) {
  st->send[st->nsend++] = role;
}

/* The k-th chunk of the slice: unit offset (from 0 of the count) and length. */
DEVICE_HOST_FN void steps_chunk(const step_lane_t* ln, size_t k, size_t* x, size_t* c) {
  const size_t start = k * ln->chunk;
  *x = ln->off + start;
  *c = dev_min(ln->chunk, ln->cnt - start);
}

/* RING_ALLREDUCE_EXCHANGE: step 2c sends chunk c, step 2c+1 receives the peer's and finishes. */
DEVICE_HOST_FN void steps_ring_exchange(const step_lane_t* ln, size_t k, step_t* st) {
  size_t x, c;
  steps_chunk(ln, k >> 1, &x, &c);
  st->nelem = c;
  st->local = steps_at_in(ln, ln->sendbuff, x);
  st->reduce = true;
  if ((k & 1) == 0) {
    steps_send(st, STEP_ROLE_RING_NEXT);
  } else {
    steps_recv(st, STEP_ROLE_RING_PREV);
    st->postop = true;
    st->out = steps_at_out(ln, ln->recvbuff, x);
  }
}

DEVICE_HOST_FN void steps_ring_allreduce(const step_lane_t* ln, size_t k, step_t* st) {
  if (RING_ALLREDUCE_EXCHANGE(ln->n, ln->proto)) {
    steps_ring_exchange(ln, k, st);
    return;
  }
  const int n = ln->n, idx = ln->idx;
  const size_t per_loop = (size_t)(2 * n - 1);
  const size_t loop = dev_udiv(k, per_loop);
  const int s = (int)dev_umod(k, per_loop);
  const size_t loop_elems = (size_t)n * ln->chunk;
  const size_t lbase = loop * loop_elems;
  const size_t lc = dev_min(loop_elems, ln->cnt - lbase);
  const size_t part = ring_part(lc, (size_t)n, ln->unit, ln->chunk);
  const int m = steps_ring_mod(s <= n - 1 ? idx - 1 - s : idx - (s - (n - 1)), n);
  const size_t pstart = dev_min((size_t)m * part, lc);
  const size_t pend = dev_min((size_t)(m + 1) * part, lc);
  const size_t x = ln->off + lbase + pstart;
  st->nelem = pend - pstart;
  if (s <= n - 1) { /* reduce-scatter phase */
    if (s > 0) steps_recv(st, STEP_ROLE_RING_PREV);
    st->local = steps_at_in(ln, ln->sendbuff, x);
    st->reduce = true;
    if (s == n - 1) {
      st->postop = true;
      st->out = steps_at_out(ln, ln->recvbuff, x);
    }
    steps_send(st, STEP_ROLE_RING_NEXT);
  } else { /* all-gather phase */
    steps_recv(st, STEP_ROLE_RING_PREV);
    st->out = steps_at_out(ln, ln->recvbuff, x);
    if (s - (n - 1) <= n - 2) steps_send(st, STEP_ROLE_RING_NEXT);
  }
}

DEVICE_HOST_FN void steps_ring_reducescatter(const step_lane_t* ln, size_t k, step_t* st) {
  const int n = ln->n, idx = ln->idx;
  const int s = (int)dev_umod(k, (size_t)n);
  size_t x, c;
  steps_chunk(ln, dev_udiv(k, (size_t)n), &x, &c);
  const int m = steps_ring_mod(s == n - 1 ? idx : idx - 1 - s, n);
  st->nelem = c;
  st->local = steps_at_in(ln, ln->sendbuff, (size_t)ln->ring[m] * ln->count + x);
  st->reduce = true;
  if (s > 0) steps_recv(st, STEP_ROLE_RING_PREV);
  if (s < n - 1) {
    steps_send(st, STEP_ROLE_RING_NEXT);
  } else {
    st->postop = true;
    st->out = steps_at_out(ln, ln->recvbuff, x);
  }
}

DEVICE_HOST_FN void steps_ring_allgather(const step_lane_t* ln, size_t k, step_t* st) {
  const int n = ln->n, idx = ln->idx;
  const int s = (int)dev_umod(k, (size_t)n);
  size_t x, c;
  steps_chunk(ln, dev_udiv(k, (size_t)n), &x, &c);
  st->nelem = c;
  if (s == 0) {
    st->local = steps_at_in(ln, ln->sendbuff, x);
    st->out = steps_at_out(ln, ln->recvbuff, (size_t)ln->rank * ln->count + x);
  } else {
    const int m = steps_ring_mod(idx - s, n);
    steps_recv(st, STEP_ROLE_RING_PREV);
    st->out = steps_at_out(ln, ln->recvbuff, (size_t)ln->ring[m] * ln->count + x);
  }
  if (s < n - 1) steps_send(st, STEP_ROLE_RING_NEXT);
}

/* Broadcast: chain root -> ... -> root-1; Reduce: chain root+1 -> ... -> root. */
DEVICE_HOST_FN void steps_ring_chain(const step_lane_t* ln, size_t k, step_t* st) {
  const int n = ln->n;
  const bool reduce = ln->func == FUNC_REDUCE;
  const int d = steps_ring_mod(ln->idx - ln->root_idx - (reduce ? 1 : 0), n); /* chain position */
  size_t x, c;
  steps_chunk(ln, k, &x, &c);
  st->nelem = c;
  if (d > 0) steps_recv(st, STEP_ROLE_RING_PREV);
  if (d < n - 1) steps_send(st, STEP_ROLE_RING_NEXT);
  if (reduce) {
    st->local = steps_at_in(ln, ln->sendbuff, x);
    st->reduce = true;
    if (d == n - 1) {
      st->postop = true;
      st->out = steps_at_out(ln, ln->recvbuff, x);
    }
  } else {
    if (d == 0) st->local = steps_at_in(ln, ln->sendbuff, x);
    st->out = steps_at_out(ln, ln->recvbuff, x);
  }
}

DEVICE_HOST_FN void steps_tree(const step_lane_t* ln, size_t k, step_t* st) {
  size_t x, c;
  steps_chunk(ln, k, &x, &c);
  st->nelem = c;
  if (ln->kind == LANE_TREE_UP) {
    for (int j = 0; j < ln->ndown; j++) steps_recv(st, j);
    st->local = steps_at_in(ln, ln->sendbuff, x);
    st->reduce = true;
    if (ln->has_up) {
      steps_send(st, STEP_ROLE_TREE_UP);
    } else {
      st->postop = true;
      st->out = steps_at_out(ln, ln->recvbuff, x);
    }
  } else {
    if (ln->has_up) {
      steps_recv(st, STEP_ROLE_TREE_UP);
      st->out = steps_at_out(ln, ln->recvbuff, x);
    } else {
      st->local = steps_at_out(ln, ln->recvbuff, x); /* the root's finished result */
    }
    for (int j = 0; j < ln->ndown; j++) steps_send(st, j);
  }
}

DEVICE_HOST_FN void steps_direct_all(const step_lane_t* ln, step_t* st, bool send) {
  for (int j = 0; j < ln->n - 1; j++) {
    if (send)
      steps_send(st, j);
    else
      steps_recv(st, j);
  }
}

DEVICE_HOST_FN void steps_direct(const step_lane_t* ln, size_t k, step_t* st) {
  const size_t per = (size_t)steps_direct_per_chunk(ln);
  const size_t ck = dev_udiv(k, per);
  const int s = (int)(k - ck * per);
  size_t x, c;
  steps_chunk(ln, ck, &x, &c);
  st->nelem = c;
  switch (ln->func) {
    case FUNC_BROADCAST:
      if (ln->rank == ln->root_idx) {
        st->local = steps_at_in(ln, ln->sendbuff, x);
        st->out = steps_at_out(ln, ln->recvbuff, x);
        steps_direct_all(ln, st, true);
      } else {
        st->out = steps_at_out(ln, ln->recvbuff, x);
        steps_recv(st, steps_peer_index(ln->rank, ln->root_idx));
      }
      break;
    case FUNC_ALLGATHER:
      if (s == 0) {
        st->local = steps_at_in(ln, ln->sendbuff, x);
        st->out = steps_at_out(ln, ln->recvbuff, (size_t)ln->rank * ln->count + x);
        steps_direct_all(ln, st, true);
      } else {
        st->out = steps_at_out(ln, ln->recvbuff, x);
        st->peer_stride = ln->count;
        steps_direct_all(ln, st, false);
      }
      break;
    case FUNC_REDUCESCATTER:
      if (s == 0) {
        st->local = steps_at_in(ln, ln->sendbuff, x);
        st->peer_stride = ln->count;
        steps_direct_all(ln, st, true);
      } else {
        st->local = steps_at_in(ln, ln->sendbuff, (size_t)ln->rank * ln->count + x);
        st->out = steps_at_out(ln, ln->recvbuff, x);
        st->reduce = st->postop = true;
        st->local_pos = ln->rank;
        steps_direct_all(ln, st, false);
      }
      break;
    default: /* AllReduce */
      if (ln->algo != ALGO_TWOSHOT) {
        st->local = steps_at_in(ln, ln->sendbuff, x);
        if (s == 1) {
          st->out = steps_at_out(ln, ln->recvbuff, x);
          st->reduce = st->postop = true;
          st->local_pos = ln->rank;
        }
        steps_direct_all(ln, st, s == 0);
        break;
      }
      {
        const size_t part = ring_part(c, (size_t)ln->n, ln->unit, c);
        st->part = part;
        if (s == 0) {
          st->local = steps_at_in(ln, ln->sendbuff, x);
          steps_direct_all(ln, st, true);
        } else if (s == 1) { /* my part: combined, finished, output and sent to everyone */
          size_t o, n;
          steps_peer_span(st, ln->rank, &o, &n);
          st->part = 0;
          st->nelem = n;
          st->local = steps_at_in(ln, ln->sendbuff, x + o);
          st->out = steps_at_out(ln, ln->recvbuff, x + o);
          st->reduce = st->postop = true;
          st->local_pos = ln->rank;
          steps_direct_all(ln, st, false);
          steps_direct_all(ln, st, true);
        } else {
          st->out = steps_at_out(ln, ln->recvbuff, x);
          steps_direct_all(ln, st, false);
        }
      }
      break;
  }
}

/* ---- Direct writes (work_t.direct over CONN_FLAG_DIRECT connections) -------------------------
 * On a direct ring lane, a step that receives without reducing only delivers data to this rank's
 * output (and may forward it): its sender stores that data straight into this rank's output, at
 * the offset the step's own output has here (the same on every rank), and the step finds it there
 * (steps_recv_direct). The sending step is one with an output of its own (steps_send_direct):
 * AllReduce's last reduce-scatter step and its all-gather steps, every AllGather step. (Broadcast
 * chains could do the same; on 2 H200s they ran 2-8 % slower that way at every size from 1 MiB,
 * while AllGather gained up to 13 %: a chain's receivers copy out of the slots off its critical
 * path.) The two ends of a connection pair up step for step (the sender's step s with the
 * receiver's s + 1 on a ring), so a send is direct exactly when the matching receive is; each
 * executor applies the rules where its connection has CONN_FLAG_DIRECT, the same flag at both
 * ends. The receiver tells the sender where its output lies through the connection's mailbox
 * (conn_fifo_t.dmbox), once per item that receives that way, tagged steps_direct_tag. */
/* The items whose steps pair up that way: ring AllReduce (its general cut, not the 2-rank LL
 * exchange) and AllGather, with Simple. The planner sets work_t.direct only on these. */
DEVICE_HOST_FN bool steps_direct_writes(int func, int algo, int proto) {
  return algo == ALGO_RING && proto == PROTO_SIMPLE &&
         (func == FUNC_ALLREDUCE || func == FUNC_ALLGATHER);
}
DEVICE_HOST_FN bool steps_lane_direct(const step_lane_t* ln) {
  return ln->direct && ln->kind == LANE_RING && steps_direct_writes(ln->func, ln->algo, ln->proto);
}
DEVICE_HOST_FN bool steps_recv_direct(const step_lane_t* ln, const step_t* st) {
  return steps_lane_direct(ln) && st->nrecv > 0 && !st->reduce && st->out != NULL;
}
DEVICE_HOST_FN bool steps_send_direct(const step_lane_t* ln, const step_t* st) {
  return steps_lane_direct(ln) && st->nsend > 0 && st->out != NULL;
}
/* Whether some step of the lane receives that way (every lane of a direct item with steps): the
 * lane posts its output in the mailbox. */
DEVICE_HOST_FN bool steps_lane_recvs_direct(const step_lane_t* ln) {
  return steps_lane_direct(ln) && ln->cnt > 0;
}
/* The mailbox tag of an item whose steps on the connection start at FIFO step `start`: nonzero,
 * and larger for every later item that receives on it (each has at least one step there). */
DEVICE_HOST_FN uint64_t steps_direct_tag(uint64_t start) {
  return start + 1;
}

/* Step k < steps_count(ln) of the lane. */
DEVICE_HOST_FN void steps_plan(const step_lane_t* ln, size_t k, step_t* st) {
  st->local = NULL;
  st->out = NULL;
  st->nelem = 0;
  st->nrecv = st->nsend = 0;
  st->reduce = st->postop = false;
  st->local_pos = -1;
  st->part = st->peer_stride = 0;
  size_t x, c;
  switch (ln->kind) {
    case LANE_RING:
      switch (ln->func) {
        case FUNC_ALLREDUCE:
          steps_ring_allreduce(ln, k, st);
          break;
        case FUNC_REDUCESCATTER:
          steps_ring_reducescatter(ln, k, st);
          break;
        case FUNC_ALLGATHER:
          steps_ring_allgather(ln, k, st);
          break;
        default:
          steps_ring_chain(ln, k, st);
          break;
      }
      break;
    case LANE_TREE_UP:
    case LANE_TREE_DOWN:
      steps_tree(ln, k, st);
      break;
    case LANE_SEND:
      steps_chunk(ln, k, &x, &c);
      st->nelem = c;
      st->local = steps_at_in(ln, ln->sendbuff, x);
      steps_send(st, STEP_ROLE_P2P_PEER);
      break;
    case LANE_RECV:
      steps_chunk(ln, k, &x, &c);
      st->nelem = c;
      st->out = steps_at_out(ln, ln->recvbuff, x);
      steps_recv(st, STEP_ROLE_P2P_PEER);
      break;
    case LANE_DIRECT:
      steps_direct(ln, k, st);
      break;
    default:
      break;
  }
}

#endif /* BATON_VOCAB_H */
