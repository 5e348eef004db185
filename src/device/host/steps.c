/* The host executor's steps: the step math both executors share (vocab/vocab.h), with the
 * lane's peers in place of the roles. */
#include "device/host/host_exec.h"

static int role_peer(const host_lane_t* ln, int role) {
  switch (role) {
    case STEP_ROLE_RING_PREV:
      return ln->prev;
    case STEP_ROLE_RING_NEXT:
      return ln->next;
    case STEP_ROLE_TREE_UP:
      return ln->up;
    case STEP_ROLE_P2P_PEER:
      return ln->peer;
    default: /* the role-th other rank (direct lanes), or the role-th tree child */
      if (ln->geo.kind == LANE_DIRECT)
        return role >= 0 && role < ln->geo.n - 1 ? ln->dpeer[role] : HOST_NO_PEER;
      return role >= 0 && role < ln->geo.ndown ? ln->down[role] : HOST_NO_PEER;
  }
}

size_t host_lane_nops(const host_lane_t* ln) {
  return steps_count(&ln->geo);
}

void host_lane_step(const host_lane_t* ln, size_t k, host_step_t* st) {
  step_t s;
  steps_plan(&ln->geo, k, &s);
  *st = (host_step_t){.local = s.local,
                      .out = s.out,
                      .nelem = s.nelem,
                      .nrecv = s.nrecv,
                      .nsend = s.nsend,
                      .reduce = s.reduce,
                      .postop = s.postop,
                      .local_pos = s.local_pos,
                      .part = s.part,
                      .peer_stride = s.peer_stride};
  for (int j = 0; j < STEP_MAX_PEERS; j++) {
    st->recv_peer[j] = j < s.nrecv ? role_peer(ln, s.recv[j]) : HOST_NO_PEER;
    st->send_peer[j] = j < s.nsend ? role_peer(ln, s.send[j]) : HOST_NO_PEER;
  }
}
