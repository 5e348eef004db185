/* Step math of both executors: for a lane (one work item's share on one channel, or one direction
 * of a tree) and a step index k, whom step k receives from and sends to, which part of the
 * user's buffers it reads and writes, and whether it reduces. Pure functions, plain C, compiled
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
 * One-shot (AllReduce, device.h's ALGO_ONESHOT; CUDA executor only): per chunk a send step (my
 * chunk to every other rank) and a receive step (every other rank's chunk combined with mine in
 * rank order, finish, output). */
#ifndef BATON_DEVICE_STEPS_H
#define BATON_DEVICE_STEPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

typedef enum {
  LANE_RING,      /* any collective over the channel's ring */
  LANE_TREE_UP,   /* AllReduce tree: reduce towards the root */
  LANE_TREE_DOWN, /* AllReduce tree: broadcast from the root */
  LANE_SEND,      /* point-to-point */
  LANE_RECV,
  LANE_ONESHOT_SEND, /* CUDA: my chunk to the other ranks, in rank order */
  LANE_ONESHOT_RECV  /* CUDA: the other ranks' chunks, in rank order */
} lane_kind_t;

/* Whom a step receives from or sends to. 0 .. TREE_MAX_CHILDREN-1: the j-th tree child, or the
 * j-th other rank (one-shot). */
typedef enum {
  STEP_ROLE_RING_PREV = TREE_MAX_CHILDREN,
  STEP_ROLE_RING_NEXT,
  STEP_ROLE_TREE_UP,
  STEP_ROLE_P2P_PEER
} step_role_t;

/* A lane's geometry: everything its steps depend on. */
typedef struct step_lane {
  uint8_t kind; /* lane_kind_t */
  uint8_t func; /* func_t */
  uint8_t proto;
  size_t unit;          /* bytes per unit (datatype size; 1 for point-to-point) */
  const char* sendbuff; /* base pointers of the operation */
  char* recvbuff;
  size_t count;               /* work count (per-rank count for AllGather/ReduceScatter) */
  size_t off, cnt;            /* the channel's slice, in units */
  size_t chunk;               /* units per step (already clamped to the slots) */
  int n, idx, root_idx, rank; /* ring: ranks, my ring index, the root's, my rank */
  const int* ring;            /* ring order (n ranks) */
  bool has_up;                /* tree: a parent */
  int ndown;                  /* tree: children; one-shot: n - 1 */
} step_lane_t;

/* One step. */
typedef struct step {
  const char* local; /* this rank's data for the step (NULL: none) */
  char* out;         /* the user's output for the step (NULL: none) */
  size_t nelem;      /* units */
  int nrecv, nsend;
  int recv[TREE_MAX_CHILDREN]; /* step_role_t or a child / other-rank index */
  int send[TREE_MAX_CHILDREN];
  int local_pos; /* -1: local data first (its pre-op applied); else its place among the received
                  * sources, none pre-op'd (one-shot: every rank combines in rank order) */
  bool reduce;   /* combine local and received data with the op; else copy */
  bool postop;   /* the result is final (SUMPOSTDIV divides it) */
} step_t;

DEVICE_HOST_FN size_t steps_div_up(size_t a, size_t b) {
  return dev_udiv(a + b - 1, b);
}
DEVICE_HOST_FN int steps_ring_mod(int a, int n) {
  return ((a % n) + n) % n;
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
    default:
      return steps_div_up(ln->cnt, ln->chunk); /* tree up, send, recv, one-shot */
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

DEVICE_HOST_FN void steps_oneshot(const step_lane_t* ln, size_t k, step_t* st) {
  size_t x, c;
  steps_chunk(ln, k, &x, &c);
  st->nelem = c;
  st->local = steps_at_in(ln, ln->sendbuff, x);
  for (int j = 0; j < ln->n - 1; j++) {
    if (ln->kind == LANE_ONESHOT_SEND)
      steps_send(st, j);
    else
      steps_recv(st, j);
  }
  if (ln->kind == LANE_ONESHOT_RECV) {
    st->reduce = st->postop = true;
    st->out = steps_at_out(ln, ln->recvbuff, x);
    st->local_pos = ln->rank; /* the other ranks in rank order: ranks below mine come first */
  }
}

/* Step k < steps_count(ln) of the lane. */
DEVICE_HOST_FN void steps_plan(const step_lane_t* ln, size_t k, step_t* st) {
  st->local = NULL;
  st->out = NULL;
  st->nelem = 0;
  st->nrecv = st->nsend = 0;
  st->reduce = st->postop = false;
  st->local_pos = -1;
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
    case LANE_ONESHOT_SEND:
    case LANE_ONESHOT_RECV:
      steps_oneshot(ln, k, st);
      break;
    default:
      break;
  }
}

#endif /* BATON_DEVICE_STEPS_H */
