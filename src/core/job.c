/* Lifecycle jobs: init, split, shrink and finalize run inline (blocking communicators) or on a
 * detached thread (nonblocking). Whoever must wait for a job (abort, destroy of a finished comm)
 * waits on its condition variable; the job object lives until its last reference goes. */
#include <stdlib.h>
#include <time.h>

#include "core/core.h"

ncclResult_t comm_job_create(const char* api, ncclResult_t (*run)(comm_job_t*), comm_job_t** out) {
  comm_job_t* job;
  CHECK(MEM_CALLOC(&job, 1));
  pthread_mutex_init(&job->lock, NULL);
  pthread_cond_init(&job->cond, NULL);
  job->refs = 1;
  job->api = api;
  job->run = run;
  *out = job;
  return ncclSuccess;
}

void comm_job_retain(comm_job_t* job) {
  pthread_mutex_lock(&job->lock);
  job->refs++;
  pthread_mutex_unlock(&job->lock);
}

void comm_job_release(comm_job_t* job) {
  pthread_mutex_lock(&job->lock);
  int left = --job->refs;
  pthread_mutex_unlock(&job->lock);
  if (left > 0) return;
  pthread_mutex_destroy(&job->lock);
  pthread_cond_destroy(&job->cond);
  free(job->handles);
  free(job->exclude);
  free(job);
}

void comm_job_attach(ncclComm_t comm, comm_job_t* job) {
  if (comm->job != NULL) comm_job_release(comm->job);
  comm_job_retain(job);
  comm->job = job;
}

static void comm_job_mark_done(comm_job_t* job) {
  pthread_mutex_lock(&job->lock);
  job->done = true;
  pthread_cond_broadcast(&job->cond);
  pthread_mutex_unlock(&job->lock);
}

static void* comm_job_thread(void* arg) {
  comm_job_t* job = arg;
  ncclComm_t comm = job->child ? job->child : job->owner;
  thread_set_name(pthread_self(), "NCCL Job %d", comm->rank);
  log_set_device(comm->cuda_dev);
  if (comm->cuda_dev >= 0 && cudaSetDevice(comm->cuda_dev) != cudaSuccess) (void)cudaGetLastError();
  (void)job->run(job); /* publishes its results in the comms' async_error/state */
  comm_job_mark_done(job);
  comm_job_release(job);
  return NULL;
}

ncclResult_t comm_job_start(comm_job_t* job, bool blocking) {
  job->blocking = blocking;
  if (blocking) {
    ncclResult_t res = job->run(job);
    comm_job_mark_done(job);
    return res;
  }
  pthread_attr_t attr;
  pthread_t thread;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  comm_job_retain(job); /* the thread's reference */
  int err = pthread_create(&thread, &attr, comm_job_thread, job);
  pthread_attr_destroy(&attr);
  if (err != 0) {
    WARN("%s: pthread_create failed: %s", job->api, strerror(err));
    comm_job_mark_done(job); /* it will never run: nobody must wait for it */
    comm_job_release(job);
    return ncclSystemError;
  }
  return ncclInProgress;
}

bool comm_job_wait_done(comm_job_t* job, int timeout_ms) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_ms / 1000;
  deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&job->lock);
  while (!job->done) {
    if (pthread_cond_timedwait(&job->cond, &job->lock, &deadline) == ETIMEDOUT) break;
  }
  bool done = job->done;
  pthread_mutex_unlock(&job->lock);
  return done;
}

ncclResult_t comm_job_wait(comm_job_t* job, int timeout_ms) {
  if (comm_job_wait_done(job, timeout_ms)) return ncclSuccess;
  WARN("%s did not stop within %d ms after its communicator was aborted", job->api, timeout_ms);
  return ncclInternalError;
}

bool comm_job_idle(ncclComm_t comm, int timeout_ms) {
  return comm->job == NULL || comm_job_wait_done(comm->job, timeout_ms);
}

ncclResult_t comm_abort_and_wait(ncclComm_t comm) {
  __atomic_store_n(comm->abort_flag, 1, __ATOMIC_RELEASE);
  comm_job_t* job = comm->job;
  if (job == NULL) return ncclSuccess;
  /* A split/shrink started on this comm may be initializing its child: stop that too. The child
   * cannot be freed before the job is done (its free waits for the job), hence the lock. */
  pthread_mutex_lock(&job->lock);
  if (job->owner == comm && job->child != NULL && !job->done)
    __atomic_store_n(job->child->abort_flag, 1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&job->lock);
  return comm_job_wait(job, COMM_ABORT_WAIT_MS);
}
