/* One-sided operations on windows (NCCL 2.29): ncclPutSignal, ncclSignal, ncclWaitSignal.
 *
 * Here: the arguments (a bad one is a WARN naming it and ncclInvalidArgument; nothing is sent)
 * and the windows (peerWin is looked up among this communicator's windows; its registration
 * number names it on the peer). src/core/rma.c moves the data and the signals. */
#include "collectives/collectives.h"

/* What every call checks first: the communicator (ready, not suspended), the peer, ctx, sigIdx,
 * flags. */
static ncclResult_t rma_check(ncclComm_t comm, const char* api, int peer, int ctx, int sig,
                              unsigned int flags) {
  CHECK(comm_check_ready(comm, api));
  if (peer < 0 || peer >= comm->nranks) {
    WARN("%s: peer %d is not a rank of this communicator of %d ranks", api, peer, comm->nranks);
    return ncclInvalidArgument;
  }
  if (flags != 0) {
    WARN("%s: flags 0x%x: no flag is defined yet (pass 0)", api, flags);
    return ncclInvalidArgument;
  }
  return comm_rma_check_index(comm, api, ctx, sig);
}

static ncclResult_t rma_run_put(ncclComm_t comm, const char* api, cudaStream_t stream,
                                const comm_rma_put_t* p) {
  CHECK(comm_hold(comm, api));
  ncclResult_t res = comm_rma_begin(comm, api, stream);
  if (res == ncclSuccess) res = comm_rma_put(comm, p);
  comm_release(comm);
  return res;
}

NCCL_API(ncclResult_t, ncclPutSignal, const void* localbuff, size_t count, ncclDataType_t datatype,
         int peer, ncclWindow_t peerWin, size_t peerWinOffset, int sigIdx, int ctx,
         unsigned int flags, ncclComm_t comm, cudaStream_t stream) {
  NVTX_API_RANGE("ncclPutSignal");
  const char* api = "ncclPutSignal";
  COMM_API_SCOPE();
  CHECK(rma_check(comm, api, peer, ctx, sigIdx, flags));
  size_t esize = datatype_size(datatype);
  if (esize == 0) {
    WARN("%s: datatype %d is not an ncclDataType_t", api, (int)datatype);
    return ncclInvalidArgument;
  }
  if (count > SIZE_MAX / esize) {
    WARN("%s: count %zu of %zu-byte elements overflows", api, count, esize);
    return ncclInvalidArgument;
  }
  size_t bytes = count * esize;
  if (bytes > 0) CHECK(arg_check_ptr(localbuff, api, "localbuff"));
  CHECK(arg_check_ptr(peerWin, api, "peerWin"));
  comm_rma_put_t p = {.peer = peer,
                      .ctx = ctx,
                      .sig = sigIdx,
                      .offset = peerWinOffset,
                      .bytes = bytes,
                      .src = localbuff};
  size_t size = 0;
  comm_window_t* shared = NULL;
  if (!coll_window_of(coll_of(comm), peerWin, &p.own_base, &size, &p.seq, &shared)) {
    WARN(
        "%s: peerWin %p is not a window registered with ncclCommWindowRegister on comm %p (or "
        "was deregistered)",
        api, (void*)peerWin, (void*)comm);
    return ncclInvalidArgument;
  }
  /* Windows are symmetric: this rank's length stands for the peer's where it is not known (the
   * bootstrap path). */
  size_t peer_size = size;
  p.win = shared;
  p.peer_base = peer != comm->rank ? comm_window_peer(shared, peer, &peer_size) : NULL;
  if (p.peer_base == NULL &&
      (peer == comm->rank || !rma_net_window_peer(comm_window_net(shared), peer, &peer_size)))
    peer_size = size;
  if (peerWinOffset > peer_size || bytes > peer_size - peerWinOffset) {
    WARN("%s: %zu bytes at peerWinOffset %zu do not fit rank %d's window of %zu bytes", api, bytes,
         peerWinOffset, peer, peer_size);
    return ncclInvalidArgument;
  }
  return rma_run_put(comm, api, stream, &p);
}

NCCL_API(ncclResult_t, ncclSignal, int peer, int sigIdx, int ctx, unsigned int flags,
         ncclComm_t comm, cudaStream_t stream) {
  NVTX_API_RANGE("ncclSignal");
  const char* api = "ncclSignal";
  COMM_API_SCOPE();
  CHECK(rma_check(comm, api, peer, ctx, sigIdx, flags));
  comm_rma_put_t p = {.peer = peer, .ctx = ctx, .sig = sigIdx};
  return rma_run_put(comm, api, stream, &p);
}

NCCL_API(ncclResult_t, ncclWaitSignal, int nDesc, ncclWaitSignalDesc_t* signalDescs,
         ncclComm_t comm, cudaStream_t stream) {
  NVTX_API_RANGE("ncclWaitSignal");
  const char* api = "ncclWaitSignal";
  COMM_API_SCOPE();
  CHECK(comm_check_ready(comm, api));
  if (nDesc < 0) {
    WARN("%s: nDesc %d is negative", api, nDesc);
    return ncclInvalidArgument;
  }
  if (nDesc > 0) CHECK(arg_check_ptr(signalDescs, api, "signalDescs"));
  for (int i = 0; i < nDesc; i++) {
    const ncclWaitSignalDesc_t* d = &signalDescs[i];
    CHECK(rma_check(comm, api, d->peer, d->ctx, d->sigIdx, 0));
    if (d->opCnt < 0) {
      WARN("%s: signalDescs[%d].opCnt %d is negative", api, i, d->opCnt);
      return ncclInvalidArgument;
    }
  }
  CHECK(comm_hold(comm, api));
  comm_rma_lookup_t lookup = {.find = coll_window_by_seq, .arg = coll_of(comm)};
  ncclResult_t res = comm_rma_begin(comm, api, stream);
  if (res == ncclSuccess) res = comm_rma_wait(comm, signalDescs, nDesc, &lookup);
  comm_release(comm);
  return res;
}
