/* Private to src/bootstrap: one communicator's bootstrap state and its message queue, shared by
 * the socket transport (bootstrap.c, root.c) and the in-process one (inproc.c). Other layers use
 * bootstrap/bootstrap.h only. */
#ifndef BATON_BOOTSTRAP_INT_H
#define BATON_BOOTSTRAP_INT_H

#include <pthread.h>

#include "bootstrap/bootstrap.h"

#define MSG_POLL_SLICE_MS 100
#define MSG_MAX_PAYLOAD (1ull << 30)

/* Message kinds: user tags and the internal allgather never match each other. */
enum { MSG_USER = 1, MSG_ALLGATHER = 2 };
enum { ALLGATHER_TAG_USER = 0, ALLGATHER_TAG_ADDRS = 1 };

typedef struct msg_header {
  uint64_t magic;
  int32_t sender;
  int32_t kind;
  int32_t tag;
  uint32_t reserved;
  uint64_t size;
} msg_header_t;
_Static_assert(sizeof(msg_header_t) == 32, "wire header is 32 bytes");

typedef struct msg {
  struct msg* next;
  int peer, kind, tag;
  size_t size;
  char* data;
} msg_t;

/* An accepted connection, read by the receiver thread only. */
typedef struct in_conn {
  socket_conn_t conn;
  int rank; /* sender named by the first header; -1 before */
  msg_header_t hdr;
  size_t hdr_got;
  char* payload;
  size_t payload_got;
  bool in_payload;
} in_conn_t;

struct bootstrap {
  int rank, nranks;
  uint64_t magic;
  volatile uint32_t* abort_flag;
  socket_addr_t* peers; /* every rank's listen address */
  socket_conn_t listener;

  pthread_mutex_t send_lock; /* serializes writers: one message at a time per connection */
  socket_conn_t* out;        /* per peer; fd -1 until first use */

  in_conn_t* in; /* receiver thread only */
  int nin, in_cap;
  pthread_t thread;
  bool thread_started;
  int stop;
  int wake_fd; /* eventfd: bootstrap_close wakes the receiver thread at once */

  pthread_mutex_t lock; /* the queue and thread_res */
  pthread_cond_t cond;
  msg_t* head;
  msg_t* tail;
  ncclResult_t thread_res;

  /* In-process transport (inproc.c): every rank of the communicator is in this process, and
   * messages go straight into the receiver's queue. NULL for the socket transport. */
  struct inproc_world* world;
  uint64_t ag_seq; /* allgathers this rank has made (inproc.c) */
};

/* bootstrap.c: the queue (messages that arrived, waiting for their recv). msg_copy makes a message
 * from b with a copy of data, addressed to peer (WARN and NULL without memory). */
msg_t* bootstrap_msg_copy(const bootstrap_t* b, int peer, int kind, int tag, const void* data,
                          size_t size);
void bootstrap_msg_free(msg_t* m);
void bootstrap_queue_push(bootstrap_t* b, msg_t* m);
uint64_t bootstrap_wait_limit_ns(void);
/* A condition variable on CLOCK_MONOTONIC, and one wait on it of at most MSG_POLL_SLICE_MS (lock
 * held), after which the caller checks its abort flag and deadline. */
void bootstrap_cond_init(pthread_cond_t* cond);
void bootstrap_cond_wait_slice(pthread_cond_t* cond, pthread_mutex_t* lock);
bool bootstrap_aborted(const bootstrap_t* b);

/* inproc.c: the in-process transport behind the same calls. join fills b->world (b->rank,
 * b->nranks and b->abort_flag are set); send puts a copy of the message into the peer's queue
 * (waiting while the peer has not joined yet); allgather fills every slot; leave makes the rank
 * unreachable and drops the world when it was the last. */
ncclResult_t inproc_join(const bootstrap_handle_t* handle, bootstrap_t* b);
ncclResult_t inproc_send(bootstrap_t* b, int peer, int kind, int tag, const void* data,
                         size_t size);
ncclResult_t inproc_allgather(bootstrap_t* b, void* data, size_t size);
void inproc_leave(bootstrap_t* b);

#endif /* BATON_BOOTSTRAP_INT_H */
