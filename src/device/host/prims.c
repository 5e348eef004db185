/* One step of the host executor over the connection FIFOs (the format of conn_fifo_t in
 * device.h): receive at most one slot per receiving peer, reduce or copy with this rank's data,
 * write the user's output, fill one slot per sending peer. A step starts only when every slot it
 * needs is ready (received data present, send slot free), so it never blocks.
 *
 * Simple: slot fifo_slot(s) holds raw bytes; the sender writes sizes[] then publishes tail.
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
  return fifo_slot_data_bytes(f->buff_bytes[proto], proto);
}

static char* conn_slot(const conn_fifo_t* f, int proto, uint64_t step) {
  return fifo_slot_ptr(f->buffs[proto], f->buff_bytes[proto], step);
}

static size_t ll_nlines(size_t nbytes) {
  return nbytes == 0 ? 1 : (nbytes + 7) / 8;
}

static bool fifo_send_ready(const conn_fifo_t* f) {
  return fifo_may_send(counter_load(f->head), f->step);
}

static bool ll_line_ready(const ll_line_t* line, uint32_t flag) {
  uint64_t v0 = __atomic_load_n(&line->v[0], __ATOMIC_ACQUIRE);
  uint64_t v1 = __atomic_load_n(&line->v[1], __ATOMIC_ACQUIRE);
  return (uint32_t)(v0 >> 32) == flag && (uint32_t)(v1 >> 32) == flag;
}

static bool fifo_recv_ready(const conn_fifo_t* f, int proto, size_t nbytes) {
  if (proto == PROTO_SIMPLE) return counter_load(f->tail) >= f->step + 1;
  const ll_line_t* lines = (const ll_line_t*)conn_slot(f, PROTO_LL, f->step);
  return ll_line_ready(&lines[ll_nlines(nbytes) - 1], (uint32_t)(f->step + 1));
}

/* Copies the data of the current LL slot into dst; false if a line is not there yet (the caller
 * retries later: nothing is consumed). */
static bool ll_unpack(const conn_fifo_t* f, char* dst, size_t nbytes) {
  const ll_line_t* lines = (const ll_line_t*)conn_slot(f, PROTO_LL, f->step);
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

/* Writes the LL lines of the current step; returns the bytes of lines written (its size). */
static int ll_pack(conn_fifo_t* f, const char* src, size_t nbytes) {
  ll_line_t* lines = (ll_line_t*)conn_slot(f, PROTO_LL, f->step);
  uint64_t hi = (uint64_t)(uint32_t)(f->step + 1) << 32;
  size_t nlines = ll_nlines(nbytes);
  for (size_t i = 0; i < nlines; i++) {
    uint64_t d = 0;
    size_t left = nbytes > i * 8 ? nbytes - i * 8 : 0;
    memcpy(&d, src + i * 8, left < 8 ? left : 8);
    __atomic_store_n(&lines[i].v[0], (d & 0xffffffffull) | hi, __ATOMIC_RELAXED);
    __atomic_store_n(&lines[i].v[1], (d >> 32) | hi, __ATOMIC_RELAXED);
  }
  return (int)(nlines * sizeof(ll_line_t));
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
  int got = f->sizes[fifo_slot(f->step)];
  if (got == (int)nbytes) return ncclSuccess;
  WARN(
      "Host executor: rank %d channel %d step %llu: rank %d sent %d bytes where %zu were "
      "expected; the two ranks are running different plans",
      ch->ex->comm->rank, ch->id, (unsigned long long)f->step, peer, got, nbytes);
  return ncclInternalError;
}

/* What a step moves on its j-th receive or send: bytes, and where in out (receives) or local
 * (sends) it goes or comes from, per peer for direct steps that do not reduce. */
static size_t step_span(const host_lane_t* ln, const host_step_t* st, bool per_peer, int peer,
                        size_t* off_bytes) {
  *off_bytes = 0;
  if (!per_peer) return st->nelem * ln->geo.unit;
  step_t s = {.nelem = st->nelem, .part = st->part, .peer_stride = st->peer_stride};
  size_t off, n;
  steps_peer_span(&s, peer, &off, &n);
  *off_bytes = off * ln->geo.unit;
  return n * ln->geo.unit;
}

/* dst = the sources combined in rank order: the received ones, already pre-op'd by the ranks that
 * sent them (direct_contribution), with local, pre-op'd here, at position local_pos. In place (dst
 * is local) the combination builds in the send staging first, since local is read after dst is
 * first written. */
static void reduce_rank_order(host_chan_t* ch, host_lane_t* ln, const host_step_t* st, char* dst,
                              const char* const* in) {
  const char* src[STEP_MAX_PEERS + 1] = {st->local};
  int n = 0;
  for (int j = 0; j <= st->nrecv; j++) {
    if (j == st->local_pos) src[n++] = st->local;
    if (j < st->nrecv) src[n++] = in[j];
  }
  char* acc = dst;
  if (dst == st->local && st->local_pos > 0) acc = ch->stage[HOST_STAGE_SEND];
  for (int k = 0; k < n; k++) {
    const void* prev = k == 0 ? NULL : acc;
    if (src[k] == st->local)
      host_reduce(acc, src[k], prev, st->nelem, ln->dtype, ln->op);
    else
      host_reduce_partials(acc, src[k], prev, st->nelem, ln->dtype, ln->op);
  }
  if (acc != dst) memcpy(dst, acc, st->nelem * ln->geo.unit);
}

/* A direct step that sends this rank's own input to a reduction: it leaves pre-op'd, since a
 * PreMulSum scalar is the sending rank's (each rank may pass its own). */
static bool direct_contribution(const host_lane_t* ln, const host_step_t* st) {
  return ln->geo.kind == LANE_DIRECT && !st->reduce && ln->op->kind == DEV_OP_PREMULSUM &&
         (ln->geo.func == FUNC_ALLREDUCE || ln->geo.func == FUNC_REDUCESCATTER);
}

ncclResult_t host_step_try(host_chan_t* ch, host_lane_t* ln, const host_step_t* st, bool* ran) {
  const dev_channel_t* dc = host_chan_dev(ch);
  conn_fifo_t* rf[STEP_MAX_PEERS];
  conn_fifo_t* sf[STEP_MAX_PEERS];
  const char* in[STEP_MAX_PEERS];
  size_t rbytes[STEP_MAX_PEERS], roff[STEP_MAX_PEERS], sbytes[STEP_MAX_PEERS], soff[STEP_MAX_PEERS];
  const size_t nbytes = st->nelem * ln->geo.unit;
  const int proto = ln->geo.proto;
  step_t span = {
      .nelem = st->nelem, .part = st->part, .peer_stride = st->peer_stride, .reduce = st->reduce};
  const bool per_peer = steps_per_peer(&span);
  *ran = false;

  /* Ready? Nothing is consumed or published until every connection is. Every connection that
   * is not is noted: the waiting channel asks about each of those peers. */
  ln->nwait = 0;
  for (int j = 0; j < st->nrecv; j++) {
    rf[j] = dc->recv[st->recv_peer[j]];
    if (rf[j] == NULL) return conn_missing(ch, st->recv_peer[j], false);
    rbytes[j] = step_span(ln, st, per_peer, st->recv_peer[j], &roff[j]);
    if (!fifo_recv_ready(rf[j], proto, rbytes[j])) ln->wait_peers[ln->nwait++] = st->recv_peer[j];
  }
  for (int j = 0; j < st->nsend; j++) {
    sf[j] = dc->send[st->send_peer[j]];
    if (sf[j] == NULL) return conn_missing(ch, st->send_peer[j], true);
    sbytes[j] = step_span(ln, st, per_peer, st->send_peer[j], &soff[j]);
    if (!fifo_send_ready(sf[j])) ln->wait_peers[ln->nwait++] = st->send_peer[j];
  }
  if (ln->nwait > 0) return ncclSuccess;
  for (int j = 0; j < st->nrecv; j++) {
    if (proto == PROTO_SIMPLE) {
      CHECK(simple_check_size(ch, rf[j], st->recv_peer[j], rbytes[j]));
      in[j] = conn_slot(rf[j], PROTO_SIMPLE, rf[j]->step);
    } else {
      if (!ll_unpack(rf[j], ch->stage[j], rbytes[j])) {
        ln->wait_peers[ln->nwait++] = st->recv_peer[j];
        return ncclSuccess;
      }
      in[j] = ch->stage[j];
    }
  }

  /* The step's result: reduced into the output, or into the first send slot (Simple) or the
   * send staging (LL); a copy is just its source (per peer: each receive to its own place). */
  const char* res;
  if (st->reduce) {
    char* dst = st->out;
    if (dst == NULL) {
      dst = proto == PROTO_SIMPLE ? conn_slot(sf[0], PROTO_SIMPLE, sf[0]->step)
                                  : ch->stage[HOST_STAGE_SEND];
    }
    if (st->nelem > 0) {
      if (st->local_pos >= 0) {
        reduce_rank_order(ch, ln, st, dst, in);
      } else {
        if (st->local != NULL) {
          host_reduce(dst, st->local, st->nrecv > 0 ? in[0] : NULL, st->nelem, ln->dtype, ln->op);
        } else if (dst != in[0]) {
          memmove(dst, in[0], nbytes);
        }
        for (int j = 1; j < st->nrecv; j++)
          host_reduce_partials(dst, dst, in[j], st->nelem, ln->dtype, ln->op);
      }
      if (st->postop) host_postop(dst, st->nelem, ln->dtype, ln->op);
    }
    res = dst;
  } else if (per_peer) {
    res = st->local;
    for (int j = 0; j < st->nrecv; j++)
      if (rbytes[j] > 0) memmove(st->out + roff[j], in[j], rbytes[j]);
  } else {
    res = st->local != NULL ? st->local : in[0];
    if (st->out != NULL && st->out != res && nbytes > 0) memmove(st->out, res, nbytes);
  }

  /* Publish: fill and post every send slot, then free every received slot. */
  const bool scale = direct_contribution(ln, st);
  for (int j = 0; j < st->nsend; j++) {
    conn_fifo_t* f = sf[j];
    const char* data = res + soff[j];
    int bytes;
    if (proto == PROTO_SIMPLE) {
      char* slot = conn_slot(f, PROTO_SIMPLE, f->step);
      if (scale)
        host_reduce(slot, data, NULL, sbytes[j] / ln->geo.unit, ln->dtype, ln->op);
      else if (slot != data && sbytes[j] > 0)
        memcpy(slot, data, sbytes[j]);
      bytes = (int)sbytes[j];
    } else {
      if (scale) {
        host_reduce(ch->stage[HOST_STAGE_SEND], data, NULL, sbytes[j] / ln->geo.unit, ln->dtype,
                    ln->op);
        data = ch->stage[HOST_STAGE_SEND];
      }
      bytes = ll_pack(f, data, sbytes[j]);
    }
    fifo_publish(f->sizes, f->tail, f->step++, bytes);
  }
  for (int j = 0; j < st->nrecv; j++) counter_store(rf[j]->head, ++rf[j]->step);
  *ran = true;
  return ncclSuccess;
}
