/* The RAS service's internals, shared by ras.c (the service thread and the side channel),
 * ras_ask.c (asking other processes), hang.c (the hang watch and its reports) and ras_client.c
 * (RAS clients: baton-ras, stock's ncclras). Private to src/observe.
 *
 * Side-channel wire format (TCP, this library on both ends, one byte order): a ras_hdr_t, then
 * hdr.len bytes of payload.
 *   HELLO    ras_ident_t   opens a keep-alive connection (kept open; EOF without GOODBYE = died)
 *   GOODBYE  ras_ident_t   the sender's service stops (its communicators are gone)
 *   QUERY    ras_query_t   answered with STATE, then the connection closes
 *   STATE    uint32 n, uint32 0, n x prog_state_t
 *   DEAD     ras_ident_t   the process named died; the connection closes
 *   UNLINK   ras_ident_t   the sender closes its keep-alive on purpose (its ring changed)
 *   CAUSE    ras_cause_msg_t  a rank failed because of another's failure (or failed first): why,
 *                         so every survivor names the first failure (ras_cause.c) */
#ifndef BATON_OBSERVE_RAS_H
#define BATON_OBSERVE_RAS_H

#include "core/core.h"
#include "observe/observe.h"

#define RAS_MAGIC 0x53415242u /* "BRAS" */
#define RAS_WIRE_VERSION 1
enum {
  RAS_MSG_HELLO = 1,
  RAS_MSG_GOODBYE,
  RAS_MSG_QUERY,
  RAS_MSG_STATE,
  RAS_MSG_DEAD,
  RAS_MSG_UNLINK,
  RAS_MSG_CAUSE
};

typedef struct ras_hdr {
  uint32_t magic;
  uint16_t type;
  uint16_t version;
  uint32_t len;
  uint32_t pad;
} ras_hdr_t;

typedef struct ras_ident {
  socket_addr_t addr; /* the process's side-channel address: who it is */
  int32_t pid;
  int32_t pad;
  uint64_t host_hash;
  char host[RAS_HOST_LEN];
} ras_ident_t;

typedef struct ras_query {
  uint64_t comm_hash; /* 0: every communicator */
  int32_t asker;      /* the asking rank in that communicator, -1 for none */
  int32_t pad;
} ras_query_t;

typedef struct ras_cause_msg {
  uint64_t comm_hash;
  int32_t from_rank, from_pid; /* the rank that failed and tells why */
  int32_t root_rank;           /* the first failure it knows of (-1: none known) */
  int32_t root_pid;
  char root_host[RAS_HOST_LEN];
  char from_what[256]; /* without a known root: the sender's own error text */
} ras_cause_msg_t;

#define RAS_MAX_STATES 65536    /* a STATE larger than this many entries is refused */
#define RAS_TICK_MS 1000        /* the service's pace while communicators exist */
#define RAS_ASK_TIMEOUT_MS 3000 /* times NCCL_RAS_TIMEOUT_FACTOR (ras_timeout_ms) */

/* ---- ras.c ------------------------------------------------------------------------------------
 */
/* ms scaled by NCCL_RAS_TIMEOUT_FACTOR (at least 1). */
int ras_timeout_ms(int ms);
/* Starts fn(arg) on a detached thread; pthread_create's error (0: started). */
int ras_spawn_detached(void* (*fn)(void*), void* arg);
/* This process's identity (addr family 0 when the side channel is off). */
void ras_self(ras_ident_t* out);
/* The states of this process's registered communicators with comm_hash (0: all), as asker sees
 * them; *out is malloc'ed (NULL when n is 0). */
int ras_local_states(uint64_t comm_hash, int asker, prog_state_t** out);
/* The distinct side-channel addresses of every rank of every registered communicator with
 * comm_hash (0: all), this process's own included; malloc'ed. */
int ras_known_processes(uint64_t comm_hash, socket_addr_t** out);
/* Rank r of a registered communicator with comm_hash: its process's address, pid and host name.
 * 0 when found. */
int ras_rank_lookup(uint64_t comm_hash, int r, socket_addr_t* addr, int* pid, char* host,
                    size_t len);
/* Whether the process at addr has been seen to die (EOF on a keep-alive without GOODBYE). */
bool ras_process_died(const socket_addr_t* addr);
/* Sends one message on a blocking or non-blocking fd (bounded: timeout_ms). 0 on success. */
int ras_send_msg(int fd, int type, const void* payload, uint32_t len, int timeout_ms);
/* A process whose keep-alive ended without GOODBYE: record it, tell the others, and let the hang
 * watch fail operations that wait on it. */
void ras_note_died(const ras_ident_t* who, bool tell_others);

/* ---- ras_cause.c: root causes of cascades ------------------------------------------------ */
/* Rank `rank` of communicator comm_hash died (its process ended without closing): the first
 * failure there, unless one is known already. */
void ras_cause_died(uint64_t comm_hash, int rank, int pid, const char* host);
/* A CAUSE message arrived. */
void ras_cause_received(const ras_cause_msg_t* m);

/* ---- ras_ask.c: asking other processes (blocking, bounded: worker threads only) ------------- */
enum { RAS_ANSWERED = 0, RAS_SILENT, RAS_GONE };
typedef struct ras_answer {
  socket_addr_t addr;
  int status; /* RAS_ANSWERED, RAS_SILENT (no answer in time), RAS_GONE (refused/closed) */
  prog_state_t* states; /* malloc'ed */
  int nstates;
} ras_answer_t;
/* Asks every address (a batch of RAS_ASK_BATCH at once, each batch within timeout_ms); this
 * process's own address is answered locally. */
void ras_ask_all(const socket_addr_t* addrs, int n, uint64_t comm_hash, int asker, int timeout_ms,
                 ras_answer_t* out);
void ras_answers_free(ras_answer_t* a, int n);
/* Connects (bounded), sends one message, closes. 0 on success. */
int ras_tell(const socket_addr_t* addr, int type, const void* payload, uint32_t len,
             int timeout_ms);
/* A connected non-blocking TCP socket to addr within timeout_ms, or -1 (refused: *refused). */
int ras_connect(const socket_addr_t* addr, int timeout_ms, bool* refused);
/* The size of addr's sockaddr for connect and bind (IPv4 or IPv6). */
socklen_t ras_addr_len(const socket_addr_t* addr);

/* ---- hang.c -----------------------------------------------------------------------------------
 */
/* One registered communicator as the watch keeps it (the service's registry entry). */
typedef struct ras_entry {
  ncclComm_t comm;
  uint64_t reported_seq, reported_ns; /* the last hang report this rank made */
  int gone_rank;                      /* a rank whose process died (-1: none) */
  uint64_t gone_ns;                   /* when that was learned */
  bool failed;                        /* the watch failed the call in flight because of it */
} ras_entry_t;
/* Every tick, for each entry (under the service lock): starts a report, fails a call that waits
 * on a dead rank. */
void hang_tick(ras_entry_t* e, uint64_t now);
/* What a report says about one rank. */
enum {
  HANG_LEFT = RAS_GONE + 1, /* its process answered, without this communicator */
  HANG_OFF                  /* not asked: its process has no side channel (NCCL_RAS_ENABLE=0) */
};
typedef struct hang_rank {
  int status; /* RAS_ANSWERED, RAS_SILENT, RAS_GONE, HANG_LEFT, HANG_OFF */
  prog_state_t st;
  int pid;
  char host[RAS_HOST_LEN];
} hang_rank_t;
/* The verdict on call `me->inflight` of rank me->rank, from every rank's answer (pure). */
void hang_verdict(const prog_state_t* me, const hang_rank_t* ranks, int nranks, char* out,
                  size_t len);
/* "no data from rank 3 (SHM, channel 0, step 9, 12 s); ..." (pure). */
void hang_describe_waits(const prog_state_t* st, char* out, size_t len);
/* "ncclAllReduce #12 (collective #9, count 1048576 ncclFloat32 Sum)" for a call (pure). */
void hang_describe_op(const prog_op_t* op, char* out, size_t len);

/* ---- ras_client.c: RAS clients ----------------------------------------------------------------
 */
typedef struct ras_client {
  int fd;
  char line[512];
  size_t got;
  bool json;
  int timeout_s;
} ras_client_t;
/* Handles the bytes that arrived; returns false when the connection is over (closed, or handed
 * to a worker that answers STATUS). */
bool ras_client_readable(ras_client_t* c);
/* A listening socket on NCCL_RAS_ADDR, or -1 (another process serves it, or it cannot be
 * resolved: an INFO line says which). */
int ras_client_listen(void);

/* ---- trace.c: the service thread's part ---------------------------------------------------- */
/* The service thread's part: a SIGUSR1 asked for a dump (the handler only writes to fd). */
void trace_signal_fd(int fd);
bool trace_take_request(void);

#endif /* BATON_OBSERVE_RAS_H */
