/* What a GPU communicator adds to the collectives layer: the joining of a group's streams around
 * its kernel launch. (Its topology, channel count and device handling are core's resources:
 * src/core/res_gpu.c.) */
#include <stdlib.h>

#include "collectives/collectives.h"

/* ---- Streams of one group -------------------------------------------------------------------- */
static ncclResult_t streams_add(struct coll_comm* cc, cudaStream_t s) {
  for (int i = 0; i < cc->nstreams; i++)
    if (cc->streams[i] == s) return ncclSuccess;
  if (cc->nstreams == cc->streams_cap) {
    int cap = cc->streams_cap ? 2 * cc->streams_cap : 4;
    cudaStream_t* p = realloc(cc->streams, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      WARN("Out of memory joining %d streams of one group", cap);
      return ncclSystemError;
    }
    cc->streams = p;
    cc->streams_cap = cap;
  }
  cc->streams[cc->nstreams++] = s;
  return ncclSuccess;
}

/* Events 0..n-1 exist afterwards (made on the current device, in relaxed capture mode). */
static ncclResult_t events_reserve(struct coll_comm* cc, int n) {
  if (n <= cc->nevents) return ncclSuccess;
  cudaEvent_t* p = realloc(cc->events, (size_t)n * sizeof(*p));
  if (p == NULL) {
    WARN("Out of memory for %d stream events", n);
    return ncclSystemError;
  }
  cc->events = p;
  enum cudaStreamCaptureMode mode = comm_capture_relax();
  ncclResult_t res = ncclSuccess;
  for (; cc->nevents < n; cc->nevents++)
    CUDA_CHECK_GOTO(cudaEventCreateWithFlags(&cc->events[cc->nevents], cudaEventDisableTiming), res,
                    restore);
restore:
  comm_capture_restore(mode);
  return res;
}

ncclResult_t coll_gpu_join_before(struct coll_comm* cc, cudaStream_t* launch) {
  cudaStream_t first = cc->running.n > 0 ? cc->running.items[0].stream : NULL;
  cc->nstreams = 0;
  for (int i = 1; i < cc->running.n; i++)
    if (cc->running.items[i].stream != first) CHECK(streams_add(cc, cc->running.items[i].stream));
  if (cc->nstreams > 0) {
    CHECK(events_reserve(cc, cc->nstreams + 1));
    for (int i = 0; i < cc->nstreams; i++) {
      CUDA_CHECK(cudaEventRecord(cc->events[i], cc->streams[i]));
      CUDA_CHECK(cudaStreamWaitEvent(first, cc->events[i], 0));
    }
  }
  *launch = first;
  return ncclSuccess;
}

ncclResult_t coll_gpu_join_after(struct coll_comm* cc, cudaStream_t launch) {
  if (cc->nstreams == 0) return ncclSuccess;
  cudaEvent_t done = cc->events[cc->nstreams];
  CUDA_CHECK(cudaEventRecord(done, launch));
  for (int i = 0; i < cc->nstreams; i++) CUDA_CHECK(cudaStreamWaitEvent(cc->streams[i], done, 0));
  cc->nstreams = 0;
  return ncclSuccess;
}

void coll_gpu_free(struct coll_comm* cc) {
  for (int i = 0; i < cc->nevents; i++) (void)cudaEventDestroy(cc->events[i]);
  (void)cudaGetLastError();
  free(cc->events);
  free(cc->streams);
  cc->events = NULL;
  cc->streams = NULL;
  cc->nevents = cc->nstreams = cc->streams_cap = 0;
}
