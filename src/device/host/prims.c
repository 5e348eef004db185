/* One step of the host executor over the connection FIFOs (the format of conn_fifo_t in
 * device.h): receive at most one slot per receiving peer, reduce or copy with this rank's data,
 * write the user's output, fill one slot per sending peer. A step starts only when every slot it
 * needs is ready (received data present, send slot free), so it never blocks.
 *
 * Simple: slot s % NCCL_STEPS holds raw bytes; the sender writes sizes[] then publishes tail.
 * LL:     the slot is 16-byte lines {data0, flag0, data1, flag1}, 8 data bytes a line, each
 *         {data, flag} half written as one 64-bit store; the reader polls the flags
 *         (flag = (uint32_t)(step + 1)). A step always writes at least one line (an empty step
 *         is one line of zeros), so a reader never passes a step the writer has not reached.
 *         sizes[] holds the bytes of lines written (16 per line); tail is published too.
 * Counters are published with release stores and read with acquire loads. */
#include "device/host/host_exec.h"

static uint64_t counter_load(volatile uint64_t* p) {
  return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}
static void counter_store(volatile uint64_t* p, uint64_t v) {
  __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

size_t host_fifo_capacity(const conn_fifo_t* f, int proto) {
  if ((proto != PROTO_SIMPLE && proto != PROTO_LL) || f->buffs[proto] == NULL ||
      f->buff_bytes[proto] <= 0)
    return 0;
  size_t slot = (size_t)f->buff_bytes[proto] / NCCL_STEPS;
  return proto == PROTO_LL ? slot / sizeof(ll_line_t) * 8 : slot;
}

static char* fifo_slot(const conn_fifo_t* f, int proto, uint64_t step) {
  size_t slot = (size_t)f->buff_bytes[proto] / NCCL_STEPS;
  return f->buffs[proto] + (size_t)(step % NCCL_STEPS) * slot;
}

static size_t ll_nlines(size_t nbytes) {
  return nbytes == 0 ? 1 : (nbytes + 7) / 8;
}

static bool fifo_send_ready(const conn_fifo_t* f) {
  return counter_load(f->head) + NCCL_STEPS >= f->step + 1;
}

static bool ll_line_ready(const ll_line_t* line, uint32_t flag) {
  uint64_t v0 = __atomic_load_n(&line->v[0], __ATOMIC_ACQUIRE);
  uint64_t v1 = __atomic_load_n(&line->v[1], __ATOMIC_ACQUIRE);
  return (uint32_t)(v0 >> 32) == flag && (uint32_t)(v1 >> 32) == flag;
}

static bool fifo_recv_ready(const conn_fifo_t* f, int proto, size_t nbytes) {
  if (proto == PROTO_SIMPLE) return counter_load(f->tail) >= f->step + 1;
  const ll_line_t* lines = (const ll_line_t*)fifo_slot(f, PROTO_LL, f->step);
  return ll_line_ready(&lines[ll_nlines(nbytes) - 1], (uint32_t)(f->step + 1));
}

/* Copies the data of the current LL slot into dst; false if a line is not there yet (the caller
 * retries later: nothing is consumed). */
static bool ll_unpack(const conn_fifo_t* f, char* dst, size_t nbytes) {
  const ll_line_t* lines = (const ll_line_t*)fifo_slot(f, PROTO_LL, f->step);
  uint32_t flag = (uint32_t)(f->step + 1);
  size_t nlines = nbytes / 8 + (nbytes % 8 != 0);
  for (size_t i = 0; i < nlines; i++) {
    uint64_t v0 = __atomic_load_n(&lines[i].v[0], __ATOMIC_ACQUIRE);
    uint64_t v1 = __atomic_load_n(&lines[i].v[1], __ATOMIC_ACQUIRE);
    if ((uint32_t)(v0 >> 32) != flag || (uint32_t)(v1 >> 32) != flag) return false;
    uint64_t d = (v0 & 0xffffffffull) | (v1 << 32);
    size_t left = nbytes - i * 8;
    memcpy(dst + i * 8, &d, left < 8 ? left : 8);
  }
  return true;
}

static void ll_pack(conn_fifo_t* f, const char* src, size_t nbytes) {
  ll_line_t* lines = (ll_line_t*)fifo_slot(f, PROTO_LL, f->step);
  uint64_t hi = (uint64_t)(uint32_t)(f->step + 1) << 32;
  size_t nlines = ll_nlines(nbytes);
  for (size_t i = 0; i < nlines; i++) {
    uint64_t d = 0;
    size_t left = nbytes > i * 8 ? nbytes - i * 8 : 0;
    memcpy(&d, src + i * 8, left < 8 ? left : 8);
    __atomic_store_n(&lines[i].v[0], (d & 0xffffffffull) | hi, __ATOMIC_RELAXED);
    __atomic_store_n(&lines[i].v[1], (d >> 32) | hi, __ATOMIC_RELAXED);
  }
  f->sizes[f->step % NCCL_STEPS] = (int)(nlines * sizeof(ll_line_t));
}

static ncclResult_t conn_missing(const host_chan_t* ch, int peer, bool is_send) {
  WARN(
      "Host executor: rank %d has no connection %s rank %d on channel %d; the planner must "
      "connect it before launching work that uses it",
      ch->ex->comm->rank, is_send ? "to" : "from", peer, ch->id);
  return ncclInternalError;
}

/* Simple: the slot must hold exactly what this rank expects (both sides run the same plan). */
static ncclResult_t simple_check_size(const host_chan_t* ch, const conn_fifo_t* f, int peer,
                                      size_t nbytes) {
  if (f->flags & CONN_FLAG_NET) return ncclSuccess; /* the proxy may not mirror sizes here */
  int got = f->sizes[f->step % NCCL_STEPS];
  if (got == (int)nbytes) return ncclSuccess;
  WARN(
      "Host executor: rank %d channel %d step %llu: rank %d sent %d bytes where %zu were "
      "expected; the two ranks are running different plans",
      ch->ex->comm->rank, ch->id, (unsigned long long)f->step, peer, got, nbytes);
  return ncclInternalError;
}

ncclResult_t host_step_try(host_chan_t* ch, host_lane_t* ln, const host_step_t* st, bool* ran) {
  const dev_channel_t* dc = host_chan_dev(ch);
  conn_fifo_t* rf[TREE_MAX_CHILDREN];
  conn_fifo_t* sf[TREE_MAX_CHILDREN];
  const char* in[TREE_MAX_CHILDREN];
  size_t nbytes = st->nelem * ln->geo.unit;
  int proto = ln->geo.proto;
  *ran = false;

  /* Ready? Nothing is consumed or published until every connection is. Every connection that
   * is not is noted: the waiting channel asks about each of those peers. */
  ln->nwait = 0;
  for (int j = 0; j < st->nrecv; j++) {
    rf[j] = dc->recv[st->recv_peer[j]];
    if (rf[j] == NULL) return conn_missing(ch, st->recv_peer[j], false);
    if (!fifo_recv_ready(rf[j], proto, nbytes)) ln->wait_peers[ln->nwait++] = st->recv_peer[j];
  }
  for (int j = 0; j < st->nsend; j++) {
    sf[j] = dc->send[st->send_peer[j]];
    if (sf[j] == NULL) return conn_missing(ch, st->send_peer[j], true);
    if (!fifo_send_ready(sf[j])) ln->wait_peers[ln->nwait++] = st->send_peer[j];
  }
  if (ln->nwait > 0) return ncclSuccess;
  for (int j = 0; j < st->nrecv; j++) {
    if (proto == PROTO_SIMPLE) {
      CHECK(simple_check_size(ch, rf[j], st->recv_peer[j], nbytes));
      in[j] = fifo_slot(rf[j], PROTO_SIMPLE, rf[j]->step);
    } else {
      if (!ll_unpack(rf[j], ch->stage[j], nbytes)) {
        ln->wait_peers[ln->nwait++] = st->recv_peer[j];
        return ncclSuccess;
      }
      in[j] = ch->stage[j];
    }
  }

  /* The step's result: reduced into the output, or into the first send slot (Simple) or the
   * send staging (LL); a copy is just its source. */
  const char* res;
  if (st->reduce) {
    char* dst = st->out;
    if (dst == NULL) {
      dst = proto == PROTO_SIMPLE ? fifo_slot(sf[0], PROTO_SIMPLE, sf[0]->step)
                                  : ch->stage[HOST_STAGE_SEND];
    }
    if (st->nelem > 0) {
      if (st->local != NULL) {
        host_reduce(dst, st->local, st->nrecv > 0 ? in[0] : NULL, st->nelem, ln->dtype, ln->op);
      } else if (dst != in[0]) {
        memmove(dst, in[0], nbytes);
      }
      for (int j = 1; j < st->nrecv; j++)
        host_reduce_partials(dst, dst, in[j], st->nelem, ln->dtype, ln->op);
      if (st->postop) host_postop(dst, st->nelem, ln->dtype, ln->op);
    }
    res = dst;
  } else {
    res = st->local != NULL ? st->local : in[0];
    if (st->out != NULL && st->out != res && nbytes > 0) memmove(st->out, res, nbytes);
  }

  /* Publish: fill and post every send slot, then free every received slot. */
  for (int j = 0; j < st->nsend; j++) {
    conn_fifo_t* f = sf[j];
    if (proto == PROTO_SIMPLE) {
      char* slot = fifo_slot(f, PROTO_SIMPLE, f->step);
      if (slot != res && nbytes > 0) memcpy(slot, res, nbytes);
      f->sizes[f->step % NCCL_STEPS] = (int)nbytes;
    } else {
      ll_pack(f, res, nbytes);
    }
    counter_store(f->tail, ++f->step);
  }
  for (int j = 0; j < st->nrecv; j++) counter_store(rf[j]->head, ++rf[j]->step);
  *ran = true;
  return ncclSuccess;
}
