/* Baton's vocabulary: the words every layer above src/base shares, defined once.
 *   - functions, algorithms and protocols (values follow stock's order),
 *   - which function x algorithm x protocol exists on a communicator (vocab_supports: the one
 *     table the tuning model, the planner, both executors and the tests consult),
 *   - the connection FIFO (conn_fifo_t) and its helpers: the slot of a step, whether a sender may
 *     fill a step's slot, publishing a step; the proxy, the executors' primitives (host and
 *     CUDA), the simulator and core's slot sizes go through them.
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
 * ranks whose GPUs reach each other (P2P on one host): every rank talks to every other rank
 * straight away, through the connection FIFOs with LL (data and flag in one store), so a small
 * operation takes one or two hops instead of a ring's 2(n-1) (device/steps.h has their steps):
 *   OneShot  AllReduce: every rank sends its data to every other rank and combines what it
 *            receives with its own, in rank order (every rank computes the same bits); AllGather,
 *            ReduceScatter and Broadcast: the same, each block straight to where it belongs.
 *   TwoShot  AllReduce: reduce-scatter (rank p combines part p from everyone) then all-gather of
 *            the combined parts, both straight between every pair.
 * With PROTO_SIMPLE they run staged instead, on GPUs whose ranks share staging buffers (device.h,
 * "Staged direct algorithms"; OneShot then runs Reduce too).
 * Up to DIRECT_MAX_RANKS ranks; NCCL_ALGO names them OneShot and TwoShot. */
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
} conn_fifo_t;
#define CONN_FLAG_NET 0x1     /* driven by the proxy (NET transport) */
#define CONN_FLAG_HOSTMEM 0x2 /* slot memory is host memory */

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

#endif /* BATON_VOCAB_H */
