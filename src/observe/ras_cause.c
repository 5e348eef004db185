/* Root causes of cascades (core.h: comm_blame, comm_cause_tell; ras.h: ras_cause_*).
 *
 * When one rank dies, its neighbours fail, abort and exit, and the ranks that waited on those
 * neighbours then see a neighbour leave, not the rank that died first. So every process keeps,
 * per communicator, the first failure it has heard of (a death the keep-alive ring announced, or
 * what another rank said) and the ranks that failed because of it. A rank whose call fails with a
 * peer's or the network's error tells every other process of the communicator why (a CAUSE
 * message on the side channel) before its caller can abort or exit, and its own error text and
 * WARN name the first failure. Telling is bounded (RAS_CAUSE_TELL_MS in all) and done once per
 * communicator. Without the side channel (NCCL_RAS_ENABLE=0) nothing here runs. */
#include <stdlib.h>
#include <strings.h>
#include <unistd.h>

#include "observe/ras.h"

#define CAUSE_SLOTS 16            /* communicators remembered (the oldest is forgotten) */
#define CAUSE_RELAYS 8            /* ranks named as having failed because of the first failure */
#define RAS_CAUSE_WAIT_MS 1000    /* a failing call waits this long for news of a root cause */
#define RAS_CAUSE_TELL_MS 2000    /* telling every process, in all */
#define RAS_CAUSE_TELL_ONE_MS 500 /* telling one process */

typedef struct cause {
  uint64_t comm_hash; /* 0: free slot */
  uint64_t stamp;     /* for replacing the oldest */
  bool has_root;
  int root_rank, root_pid;
  char root_host[RAS_HOST_LEN];
  int nrelays;
  struct {
    int rank, pid;
  } relays[CAUSE_RELAYS];
  bool has_first; /* no root known: the first rank that said it failed, and how */
  int first_rank, first_pid;
  char first_what[256];
} cause_t;

static pthread_mutex_t cause_lock = PTHREAD_MUTEX_INITIALIZER;
static cause_t causes[CAUSE_SLOTS];
static uint64_t cause_stamp;

/* Under cause_lock: the slot of comm_hash, made if needed (replacing the oldest). */
static cause_t* cause_slot(uint64_t comm_hash, bool make) {
  cause_t* oldest = &causes[0];
  for (int i = 0; i < CAUSE_SLOTS; i++) {
    if (causes[i].comm_hash == comm_hash) return &causes[i];
    if (causes[i].stamp < oldest->stamp) oldest = &causes[i];
  }
  if (!make) return NULL;
  memset(oldest, 0, sizeof(*oldest));
  oldest->comm_hash = comm_hash;
  oldest->stamp = ++cause_stamp;
  return oldest;
}

void ras_cause_died(uint64_t comm_hash, int rank, int pid, const char* host) {
  pthread_mutex_lock(&cause_lock);
  cause_t* c = cause_slot(comm_hash, true);
  if (!c->has_root) {
    c->has_root = true;
    c->root_rank = rank;
    c->root_pid = pid;
    snprintf(c->root_host, sizeof(c->root_host), "%s", host);
  }
  pthread_mutex_unlock(&cause_lock);
}

void ras_cause_received(const ras_cause_msg_t* m) {
  pthread_mutex_lock(&cause_lock);
  cause_t* c = cause_slot(m->comm_hash, true);
  if (m->root_rank >= 0 && !c->has_root && m->root_rank != m->from_rank) {
    c->has_root = true;
    c->root_rank = m->root_rank;
    c->root_pid = m->root_pid;
    memcpy(c->root_host, m->root_host, sizeof(c->root_host));
    c->root_host[sizeof(c->root_host) - 1] = '\0';
  }
  if (m->root_rank < 0 && !c->has_first) {
    c->has_first = true;
    c->first_rank = m->from_rank;
    c->first_pid = m->from_pid;
    memcpy(c->first_what, m->from_what, sizeof(c->first_what));
    c->first_what[sizeof(c->first_what) - 1] = '\0';
  }
  bool seen = false;
  for (int i = 0; i < c->nrelays; i++) seen |= c->relays[i].rank == m->from_rank;
  if (!seen && c->nrelays < CAUSE_RELAYS && m->root_rank >= 0 && m->from_rank != m->root_rank) {
    c->relays[c->nrelays].rank = m->from_rank;
    c->relays[c->nrelays].pid = m->from_pid;
    c->nrelays++;
  }
  pthread_mutex_unlock(&cause_lock);
}

/* Whether text names "rank <r>" (any case) not followed by another digit. */
static bool names_rank(const char* text, int r) {
  char want[32];
  snprintf(want, sizeof(want), "rank %d", r);
  size_t n = strlen(want);
  for (const char* p = text; (p = strcasestr(p, want)) != NULL; p += n)
    if (p[n] < '0' || p[n] > '9') return true;
  return false;
}

/* The first failure of comm that this process knows, as a sentence without the final period;
 * false when none is known. *root: the rank named first (-1: none). */
static bool cause_describe(ncclComm_t comm, char* out, size_t len, int* root, int* nrelays) {
  pthread_mutex_lock(&cause_lock);
  const cause_t* c = cause_slot(comm->comm_hash, false);
  bool known = c != NULL && (c->has_root || c->has_first);
  *root = -1;
  *nrelays = 0;
  if (known && c->has_root) {
    size_t n = (size_t)snprintf(out, len,
                                "the first failure: rank %d (pid %d on %s) died (its process "
                                "ended without closing its communicators)",
                                c->root_rank, c->root_pid, c->root_host);
    for (int i = 0; i < c->nrelays && n < len; i++) {
      if (c->relays[i].rank == comm->rank) continue;
      n += (size_t)snprintf(out + n, len - n, "%s rank %d (pid %d)", *nrelays ? "," : "; then",
                            c->relays[i].rank, c->relays[i].pid);
      (*nrelays)++;
    }
    if (*nrelays > 0 && n < len) snprintf(out + n, len - n, " failed because of it");
    *root = c->root_rank;
  } else if (known) {
    snprintf(out, len, "the first failure reported: rank %d (pid %d) failed with \"%s\"",
             c->first_rank, c->first_pid, c->first_what);
    *root = c->first_rank;
  }
  pthread_mutex_unlock(&cause_lock);
  return known;
}

/* Sends why this rank failed to every other process of comm (once per communicator). */
void comm_cause_tell(ncclComm_t comm) {
  if (comm->ras_addrs == NULL || comm->rank < 0 || comm->cause_told) return;
  comm->cause_told = true;
  ras_cause_msg_t m;
  memset(&m, 0, sizeof(m));
  m.comm_hash = comm->comm_hash;
  m.from_rank = comm->rank;
  m.from_pid = (int32_t)getpid();
  m.root_rank = -1;
  pthread_mutex_lock(&cause_lock);
  const cause_t* c = cause_slot(comm->comm_hash, false);
  if (c != NULL && c->has_root) {
    m.root_rank = c->root_rank;
    m.root_pid = c->root_pid;
    memcpy(m.root_host, c->root_host, sizeof(m.root_host));
  }
  pthread_mutex_unlock(&cause_lock);
  if (m.root_rank < 0)
    snprintf(m.from_what, sizeof(m.from_what), "%.*s", (int)sizeof(m.from_what) - 1,
             comm->last_error);
  ras_ident_t self;
  ras_self(&self);
  uint64_t deadline = clock_ns() + (uint64_t)ras_timeout_ms(RAS_CAUSE_TELL_MS) * 1000000ull;
  int told = 0;
  for (int r = 0; r < comm->nranks && clock_ns() < deadline; r++) {
    const socket_addr_t* a = &comm->ras_addrs[r];
    if (a->sa.sa_family == 0 || socket_addr_equal(a, &self.addr) || ras_process_died(a)) continue;
    bool dup = false;
    for (int q = 0; q < r && !dup; q++) dup = socket_addr_equal(&comm->ras_addrs[q], a);
    if (dup) continue;
    told += ras_tell(a, RAS_MSG_CAUSE, &m, sizeof(m), RAS_CAUSE_TELL_ONE_MS) == 0;
  }
  INFO(NCCL_RAS, "RAS: comm 0x%llx rank %d told %d process(es) why it failed (first failure: %s)",
       (unsigned long long)comm->comm_hash, comm->rank, told,
       m.root_rank >= 0 ? "known" : "its own");
}

void comm_blame(ncclComm_t comm, ncclResult_t res) {
  if (res != ncclRemoteError && res != ncclSystemError) return;
  if (comm->ras_addrs == NULL || comm->rank < 0) return;
  /* Aborted or destroyed here (a watchdog, the user): not a peer's failure, and no waiting. */
  if (atomic_load(&comm->closing)) return;
  char cause[640];
  int root = -1, nrelays = 0;
  uint64_t deadline = clock_ns() + (uint64_t)ras_timeout_ms(RAS_CAUSE_WAIT_MS) * 1000000ull;
  bool known = cause_describe(comm, cause, sizeof(cause), &root, &nrelays);
  while (!known && clock_ns() < deadline && !comm->cause_told && !atomic_load(&comm->closing)) {
    usleep(10 * 1000); /* the side channel may be a moment behind the transports */
    known = cause_describe(comm, cause, sizeof(cause), &root, &nrelays);
  }
  char seen[COMM_LAST_ERROR_LEN];
  snprintf(seen, sizeof(seen), "%s", comm->last_error);
  /* Said already when this rank's own error names the first failure and nobody relayed it. */
  if (known && root != comm->rank && !(nrelays == 0 && names_rank(seen, root))) {
    LOG_SINK_SCOPE(comm->last_error, sizeof(comm->last_error));
    WARN("comm 0x%llx rank %d failed after %s%s%s", (unsigned long long)comm->comm_hash, comm->rank,
         cause, seen[0] ? ". What this rank saw: " : "", seen);
  }
  comm_cause_tell(comm);
}
