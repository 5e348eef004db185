/* The in-process bootstrap: every rank of a communicator lives in this process (baton-sim's
 * virtual ranks, one thread each while they initialize), so a message is put straight into the
 * receiver's queue (the queue and the waits of bootstrap.c's recv are the same) and an allgather
 * is one buffer that every rank fills and copies out.
 *
 * A world is created by bootstrap_inproc_id and registered under its magic; ranks join it in
 * bootstrap_init (the first one sets its size) and leave it in bootstrap_close; the last one to
 * leave frees it. A send to a rank that has not joined yet waits for it (bounded like a recv);
 * a send to a rank that has left fails. Waits watch the sender's abort flag. */
#include <stdlib.h>

#include "bootstrap/bootstrap_int.h"

/* An in-process handle: no address family, and this marker where a socket address would be. */
#define INPROC_MARK "BatonInProc"

typedef struct inproc_gather {
  uint64_t seq; /* which allgather of the ranks (each rank counts its own) */
  char* buf;    /* nranks * size bytes while in use, NULL when free */
  size_t size;
  int arrived, left;
} inproc_gather_t;

typedef struct inproc_world {
  struct inproc_world* next; /* the registry */
  uint64_t magic;
  int nranks; /* 0 until the first rank joins */
  int joined, members;
  bootstrap_t** ranks; /* nranks: each rank's bootstrap while it is a member, else NULL */
  pthread_mutex_t lock;
  pthread_cond_t cond; /* a rank joined, an allgather filled or drained */
  /* Allgather s uses slot s % 2: a rank reaches allgather s + 2 only after every rank has
   * arrived at s + 1, hence after every rank has copied s out. */
  inproc_gather_t gather[2];
} inproc_world_t;

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static inproc_world_t* registry;
static uint64_t registry_count;

bool bootstrap_handle_is_inproc(const bootstrap_handle_t* h) {
  return h != NULL && h->addr.sa.sa_family == AF_UNSPEC && h->magic != 0 &&
         memcmp(h->addr.sa.sa_data, INPROC_MARK, sizeof(INPROC_MARK) - 1) == 0;
}

ncclResult_t bootstrap_inproc_id(bootstrap_handle_t* out) {
  inproc_world_t* w = NULL;
  CHECK(MEM_CALLOC(&w, 1));
  pthread_mutex_init(&w->lock, NULL);
  bootstrap_cond_init(&w->cond);
  pthread_mutex_lock(&registry_lock);
  /* Unique within the process, which is all an in-process world needs; never 0. */
  w->magic =
      hash_bytes(&w, sizeof(w)) ^ (clock_ns() << 1) ^ (++registry_count * 0x9e3779b97f4a7c15ull);
  if (w->magic == 0) w->magic = 1;
  w->next = registry;
  registry = w;
  pthread_mutex_unlock(&registry_lock);
  memset(out, 0, sizeof(*out));
  out->magic = w->magic;
  out->addr.sa.sa_family = AF_UNSPEC;
  memcpy(out->addr.sa.sa_data, INPROC_MARK, sizeof(INPROC_MARK) - 1);
  INFO(NCCL_BOOTSTRAP, "Bootstrap: in-process world 0x%llx", (unsigned long long)w->magic);
  return ncclSuccess;
}

/* Waits on w->cond (w->lock held) for up to a poll slice; false once deadline has passed or
 * the abort flag is set (logged by the caller). */
static bool world_wait(inproc_world_t* w, const bootstrap_t* b, uint64_t deadline) {
  if (bootstrap_aborted(b) || clock_ns() >= deadline) return false;
  bootstrap_cond_wait_slice(&w->cond, &w->lock);
  return true;
}

ncclResult_t inproc_join(const bootstrap_handle_t* handle, bootstrap_t* b) {
  inproc_world_t* w = NULL;
  pthread_mutex_lock(&registry_lock);
  for (inproc_world_t* it = registry; it != NULL; it = it->next)
    if (it->magic == handle->magic) w = it;
  pthread_mutex_unlock(&registry_lock);
  if (w == NULL) {
    WARN(
        "Bootstrap: rank %d: in-process world 0x%llx does not exist in this process (an "
        "in-process id cannot be used by another process)",
        b->rank, (unsigned long long)handle->magic);
    return ncclInvalidArgument;
  }
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&w->lock);
  if (w->nranks == 0) {
    if (mem_calloc((void**)&w->ranks, (size_t)b->nranks, sizeof(*w->ranks)) != ncclSuccess) {
      res = ncclSystemError;
      goto out;
    }
    w->nranks = b->nranks;
  }
  if (w->nranks != b->nranks || w->ranks[b->rank] != NULL) {
    WARN("Bootstrap: rank %d of %d cannot join in-process world 0x%llx of %d ranks%s", b->rank,
         b->nranks, (unsigned long long)w->magic, w->nranks,
         w->nranks == b->nranks ? ": that rank has joined already" : "");
    res = ncclInvalidUsage;
    goto out;
  }
  w->ranks[b->rank] = b;
  w->joined++;
  w->members++;
  b->world = w;
  pthread_cond_broadcast(&w->cond);
out:
  pthread_mutex_unlock(&w->lock);
  return res;
}

ncclResult_t inproc_send(bootstrap_t* b, int peer, int kind, int tag, const void* data,
                         size_t size) {
  inproc_world_t* w = b->world;
  msg_t* m = bootstrap_msg_copy(b, peer, kind, tag, data, size);
  if (m == NULL) return ncclSystemError;
  ncclResult_t res = ncclSuccess;
  uint64_t deadline = clock_ns() + bootstrap_wait_limit_ns();
  pthread_mutex_lock(&w->lock);
  /* Not joined yet: wait for it. Joined and gone: its communicator is closed. */
  while (w->ranks[peer] == NULL && w->joined < w->nranks) {
    if (!world_wait(w, b, deadline)) break;
  }
  if (w->ranks[peer] != NULL) {
    bootstrap_queue_push(w->ranks[peer], m); /* under w->lock: the peer cannot leave meanwhile */
    m = NULL;
  } else if (bootstrap_aborted(b)) {
    INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d: send to rank %d (tag %d) aborted", b->rank, peer,
         tag);
    res = ncclInternalError;
  } else {
    WARN("Bootstrap: rank %d could not send tag %d to rank %d: that rank %s", b->rank, tag, peer,
         w->joined < w->nranks ? "did not join in time (NCCL_BOOTSTRAP_TIMEOUT_MS)"
                               : "has closed its communicator");
    res = ncclRemoteError;
  }
  pthread_mutex_unlock(&w->lock);
  bootstrap_msg_free(m);
  return res;
}

ncclResult_t inproc_allgather(bootstrap_t* b, void* data, size_t size) {
  inproc_world_t* w = b->world;
  const uint64_t seq = b->ag_seq++;
  inproc_gather_t* g = &w->gather[seq % 2];
  const size_t n = (size_t)w->nranks;
  ncclResult_t res = ncclSuccess;
  uint64_t deadline = clock_ns() + bootstrap_wait_limit_ns();
  pthread_mutex_lock(&w->lock);
  while (g->buf != NULL && g->seq != seq) /* defensive: the slot's previous use still drains */
    if (!world_wait(w, b, deadline)) goto stuck;
  if (g->buf == NULL) {
    g->buf = malloc(n * size > 0 ? n * size : 1);
    if (g->buf == NULL) {
      WARN("Bootstrap: rank %d out of memory for an allgather of %zu x %zu bytes", b->rank, n,
           size);
      res = ncclSystemError;
      goto out;
    }
    g->seq = seq;
    g->size = size;
    g->arrived = g->left = 0;
  }
  if (g->size != size) {
    WARN("Bootstrap: rank %d's allgather #%llu has %zu bytes a rank, another rank's %zu", b->rank,
         (unsigned long long)seq, size, g->size);
    res = ncclInternalError;
    goto out;
  }
  memcpy(g->buf + (size_t)b->rank * size, (const char*)data + (size_t)b->rank * size, size);
  if (++g->arrived == w->nranks) pthread_cond_broadcast(&w->cond);
  while (g->arrived < w->nranks)
    if (!world_wait(w, b, deadline)) goto stuck;
  pthread_mutex_unlock(&w->lock);
  memcpy(data, g->buf, n * size); /* the buffer stays until every rank has copied it */
  pthread_mutex_lock(&w->lock);
  if (++g->left == w->nranks) {
    free(g->buf);
    g->buf = NULL;
    pthread_cond_broadcast(&w->cond);
  }
  goto out;
stuck:
  if (bootstrap_aborted(b)) {
    INFO(NCCL_BOOTSTRAP, "Bootstrap: rank %d: allgather aborted", b->rank);
    res = ncclInternalError;
  } else {
    WARN("Bootstrap: rank %d timed out in an in-process allgather (%d of %d ranks arrived)",
         b->rank, g->arrived, w->nranks);
    res = ncclRemoteError;
  }
out:
  pthread_mutex_unlock(&w->lock);
  return res;
}

void inproc_leave(bootstrap_t* b) {
  inproc_world_t* w = b->world;
  bool last;
  pthread_mutex_lock(&w->lock);
  w->ranks[b->rank] = NULL;
  last = --w->members == 0 && w->joined == w->nranks;
  pthread_cond_broadcast(&w->cond);
  pthread_mutex_unlock(&w->lock);
  b->world = NULL;
  if (!last) return;
  /* The last member of a world every rank joined: nobody can reach it any more. (A world some rank
   * never joined stays registered: a handle may still name it.) */
  pthread_mutex_lock(&registry_lock);
  for (inproc_world_t** it = &registry; *it != NULL; it = &(*it)->next) {
    if (*it != w) continue;
    *it = w->next;
    break;
  }
  pthread_mutex_unlock(&registry_lock);
  for (int i = 0; i < 2; i++) free(w->gather[i].buf);
  free(w->ranks);
  pthread_cond_destroy(&w->cond);
  pthread_mutex_destroy(&w->lock);
  free(w);
}
