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
 * Direct (device.h's ALGO_ONESHOT / ALGO_TWOSHOT, LANE_DIRECT): one lane talks to every other
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

#endif /* BATON_DEVICE_STEPS_H */
