/* Steps of the CUDA executor: the step math both executors share (device/steps.h), with the
 * group's connection slots in place of the roles. Device code of the kernel_*.cu only.
 *
 * A group's connections (grp_t.conns): a ring lane receives on CONN_RING_RECV and sends on
 * CONN_RING_SEND; a tree lane talks to its j-th child on slot j and to its parent on
 * CONN_TREE_UP; a one-shot lane to the j-th other rank (in rank order) on slot j; a
 * point-to-point lane to its peer on CONN_P2P. */
#ifndef BATON_DEVICE_CUDA_STEPS_DEVICE_CUH
#define BATON_DEVICE_CUDA_STEPS_DEVICE_CUH

#include "device/cuda/prims_device.cuh"

namespace baton {

/* Connection slots of a group (indexes into grp_t.conns). */
enum { CONN_RING_RECV = 0, CONN_RING_SEND = 1, CONN_TREE_UP = TREE_MAX_CHILDREN, CONN_P2P = 0 };
#define GRP_CONNS (TREE_MAX_CHILDREN + 1)

typedef step_lane_t lane_t;

static __device__ __forceinline__ int conn_of_role(int role) {
  switch (role) {
    case STEP_ROLE_RING_PREV:
      return CONN_RING_RECV;
    case STEP_ROLE_RING_NEXT:
      return CONN_RING_SEND;
    case STEP_ROLE_TREE_UP:
      return CONN_TREE_UP;
    case STEP_ROLE_P2P_PEER:
      return CONN_P2P;
    default: /* the role-th child, or the role-th other rank */
      return role;
  }
}

static __device__ __forceinline__ size_t lane_nops(const lane_t& ln) {
  return steps_count(&ln);
}

static __device__ void lane_step(const lane_t& ln, size_t k, dstep_t& st) {
  steps_plan(&ln, k, &st);
  for (int j = 0; j < st.nrecv; j++) st.recv[j] = conn_of_role(st.recv[j]);
  for (int j = 0; j < st.nsend; j++) st.send[j] = conn_of_role(st.send[j]);
}

}  // namespace baton

#endif /* BATON_DEVICE_CUDA_STEPS_DEVICE_CUH */
