/* Test-side harness for transport tests (test_shm.c, test_transport.c): a rank joins a bootstrap
 * on loopback, allgathers its peer_info, builds a transport context, and drives FIFOs with a tiny
 * producer/consumer that follows the rules of conn_fifo_t in src/device/device.h. Every wait is
 * bounded and asks transport_peer_check about the peer every few milliseconds. */
#ifndef BATON_TEST_TRANSPORT_HARNESS_H
#define BATON_TEST_TRANSPORT_HARNESS_H

#include <check.h>
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "fork_ranks.h"
#include "proxy/proxy.h"
#include "transport/transport.h"
#include "unit.h"

#define TH_MAX_RANKS 4
#define TH_WAIT_MS 10000
#define TH_ERR_TIMEOUT 2
#define TH_ERR_PEER 3
#define TH_ERR_DATA 4

typedef struct th_rank {
  bootstrap_t* b;
  peer_info_t peers[TH_MAX_RANKS];
  transport_ctx_t ctx;
  volatile uint32_t abort_flag;
  ncclResult_t peer_error; /* what transport_peer_check returned when a wait gave up */
  uint64_t last_progress_ns;
} th_rank_t;

/* A fresh job on loopback (call it in the test, before forking the ranks): the bootstrap root's
 * handle and a communicator hash of its own (names its shared memory segments). */
static inline void th_job_setup(bootstrap_handle_t* handle, uint64_t* comm_hash) {
  unit_set_param("NCCL_SOCKET_IFNAME", "lo");
  ck_assert_int_eq(bootstrap_get_unique_id(handle), ncclSuccess);
  *comm_hash = ((uint64_t)getpid() << 32) ^ clock_ns();
}

/* Joins the bootstrap and sets up the transport context (FIFO sizes simple/ll, 0: parameters). */
static inline int th_setup(th_rank_t* r, const bootstrap_handle_t* h, int idx, int n,
                           uint64_t comm_hash, int nchannels, int simple_bytes, int ll_bytes) {
  struct stat st;
  memset(r, 0, sizeof(*r));
  CHILD_CHECK(n <= TH_MAX_RANKS);
  CHILD_CHECK(bootstrap_init(h, 1, idx, n, &r->abort_flag, &r->b) == ncclSuccess);
  CHILD_CHECK(stat("/dev/shm", &st) == 0);
  r->peers[idx] = (peer_info_t){.rank = idx,
                                .cuda_dev = -1,
                                .bus_id = -1,
                                .host_hash = host_hash(),
                                .pid_hash = pid_hash(),
                                .shm_dev = (uint64_t)st.st_dev,
                                .pid = getpid()};
  CHILD_CHECK(bootstrap_allgather(r->b, r->peers, sizeof(peer_info_t)) == ncclSuccess);
  r->ctx = (transport_ctx_t){.rank = idx,
                             .nranks = n,
                             .nchannels = nchannels,
                             .peers = r->peers,
                             .bootstrap = r->b,
                             .abort_flag = &r->abort_flag,
                             .comm_hash = comm_hash};
  r->ctx.buff_bytes[PROTO_SIMPLE] = simple_bytes;
  r->ctx.buff_bytes[PROTO_LL] = ll_bytes;
  CHILD_CHECK(transport_ctx_init(&r->ctx) == ncclSuccess);
  return 0;
}

static inline int th_teardown(th_rank_t* r) {
  CHILD_CHECK(transport_ctx_free(&r->ctx) == ncclSuccess);
  CHILD_CHECK(bootstrap_close(r->b) == ncclSuccess);
  return 0;
}

/* Step s of a test stream: LL every third step, otherwise Simple (some empty). */
static inline bool th_step_is_ll(uint64_t s) {
  return s % 3 == 1;
}
static inline uint8_t th_byte(uint64_t s, size_t i, int seed) {
  return (uint8_t)(s * 131 + i * 7 + (size_t)seed * 29 + 1);
}
static inline uint32_t th_word(uint64_t s, size_t i, int seed) {
  return (uint32_t)(s * 2654435761u + i * 40503u + (uint32_t)seed * 977u);
}
static inline size_t th_simple_bytes(const conn_fifo_t* f, uint64_t s) {
  size_t slot = (size_t)f->buff_bytes[PROTO_SIMPLE] / NCCL_STEPS;
  return s % 7 == 0 ? 0 : (s * 7919) % slot + 1;
}
static inline size_t th_ll_lines(const conn_fifo_t* f, uint64_t s) {
  size_t lines = (size_t)f->buff_bytes[PROTO_LL] / NCCL_STEPS / sizeof(ll_line_t);
  return (s * 31) % lines + 1;
}

/* One round of a bounded wait that started at `start`: asks about the peer every ~5 ms, gives up
 * after TH_WAIT_MS; 0 to keep waiting. */
typedef struct th_wait {
  uint64_t start, next_check;
} th_wait_t;
static inline th_wait_t th_wait_begin(void) {
  uint64_t now = clock_ns();
  return (th_wait_t){now, now};
}
static inline int th_wait_round(th_rank_t* r, int peer, th_wait_t* w) {
  uint64_t now = clock_ns();
  if (now >= w->next_check) {
    ncclResult_t res = transport_peer_check(&r->ctx, peer);
    if (res != ncclSuccess) {
      r->peer_error = res;
      return TH_ERR_PEER;
    }
    w->next_check = now + 5000000ull;
  }
  if (now - w->start > (uint64_t)TH_WAIT_MS * 1000000ull) return TH_ERR_TIMEOUT;
  sched_yield();
  return 0;
}

/* Spins until *p >= want (acquire); 0 when reached. */
static inline int th_wait_counter(th_rank_t* r, int peer, volatile uint64_t* p, uint64_t want) {
  th_wait_t w = th_wait_begin();
  int rc;
  while (__atomic_load_n(p, __ATOMIC_ACQUIRE) < want)
    if ((rc = th_wait_round(r, peer, &w)) != 0) return rc;
  r->last_progress_ns = clock_ns();
  return 0;
}

static inline int th_send_step(th_rank_t* r, int peer, conn_fifo_t* f, uint64_t s, int seed) {
  int slot = (int)(s % NCCL_STEPS);
  int rc = th_wait_counter(r, peer, f->head, s + 1 >= NCCL_STEPS ? s + 1 - NCCL_STEPS : 0);
  if (rc) return rc;
  if (th_step_is_ll(s)) {
    size_t n = th_ll_lines(f, s);
    uint64_t* line =
        (uint64_t*)(f->buffs[PROTO_LL] + (size_t)slot * (f->buff_bytes[PROTO_LL] / NCCL_STEPS));
    uint64_t flag = (uint64_t)(uint32_t)(s + 1) << 32;
    for (size_t i = 0; i < n; i++) {
      __atomic_store_n(&line[2 * i], flag | th_word(s, 2 * i, seed), __ATOMIC_RELAXED);
      __atomic_store_n(&line[2 * i + 1], flag | th_word(s, 2 * i + 1, seed), __ATOMIC_RELAXED);
    }
    f->sizes[slot] = (int)(n * sizeof(ll_line_t));
  } else {
    size_t n = th_simple_bytes(f, s);
    char* p = f->buffs[PROTO_SIMPLE] + (size_t)slot * (f->buff_bytes[PROTO_SIMPLE] / NCCL_STEPS);
    for (size_t i = 0; i < n; i++) p[i] = (char)th_byte(s, i, seed);
    f->sizes[slot] = (int)n;
  }
  __atomic_store_n(f->tail, s + 1, __ATOMIC_RELEASE);
  return 0;
}

static inline int th_recv_step(th_rank_t* r, int peer, conn_fifo_t* f, uint64_t s, int seed) {
  int slot = (int)(s % NCCL_STEPS);
  int rc;
  if (th_step_is_ll(s)) {
    /* LL readers poll each line's flags; the tail is not needed. */
    size_t n = th_ll_lines(f, s);
    uint64_t* line =
        (uint64_t*)(f->buffs[PROTO_LL] + (size_t)slot * (f->buff_bytes[PROTO_LL] / NCCL_STEPS));
    uint32_t flag = (uint32_t)(s + 1);
    th_wait_t w = th_wait_begin();
    for (size_t i = 0; i < 2 * n; i++) {
      uint64_t v;
      while ((uint32_t)((v = __atomic_load_n(&line[i], __ATOMIC_ACQUIRE)) >> 32) != flag)
        if ((rc = th_wait_round(r, peer, &w)) != 0) return rc;
      if ((uint32_t)v != th_word(s, i, seed)) {
        fprintf(stderr, "LL step %llu word %zu: got %08x want %08x\n", (unsigned long long)s, i,
                (uint32_t)v, th_word(s, i, seed));
        return TH_ERR_DATA;
      }
    }
    r->last_progress_ns = clock_ns();
  } else {
    if ((rc = th_wait_counter(r, peer, f->tail, s + 1)) != 0) return rc;
    size_t n = th_simple_bytes(f, s);
    const char* p =
        f->buffs[PROTO_SIMPLE] + (size_t)slot * (f->buff_bytes[PROTO_SIMPLE] / NCCL_STEPS);
    if ((size_t)f->sizes[slot] != n) {
      fprintf(stderr, "Simple step %llu: size %d, want %zu\n", (unsigned long long)s,
              f->sizes[slot], n);
      return TH_ERR_DATA;
    }
    for (size_t i = 0; i < n; i++) {
      if ((uint8_t)p[i] != th_byte(s, i, seed)) {
        fprintf(stderr, "Simple step %llu byte %zu: got %u want %u\n", (unsigned long long)s, i,
                (uint8_t)p[i], th_byte(s, i, seed));
        return TH_ERR_DATA;
      }
    }
  }
  __atomic_store_n(f->head, s + 1, __ATOMIC_RELEASE);
  return 0;
}

/* Both directions with peer on channel ch, nsteps steps, interleaved send/recv. When die_at >= 0,
 * this process kills itself (SIGKILL) after sending that many steps. */
static inline int th_traffic(th_rank_t* r, int ch, int peer, uint64_t nsteps, long die_at) {
  conn_t* out = transport_conn(&r->ctx, ch, peer, 1);
  conn_t* in = transport_conn(&r->ctx, ch, peer, 0);
  CHILD_CHECK(out != NULL && in != NULL);
  if (r->ctx.proxy != NULL) proxy_wake(r->ctx.proxy);
  for (uint64_t s = 0; s < nsteps; s++) {
    if (die_at >= 0 && s == (uint64_t)die_at) kill(getpid(), SIGKILL);
    int rc = th_send_step(r, peer, &out->fifo, s, r->ctx.rank);
    if (rc == 0) rc = th_recv_step(r, peer, &in->fifo, s, peer);
    if (rc != 0) {
      fprintf(stderr, "rank %d: step %llu with rank %d failed (%d, %s)\n", r->ctx.rank,
              (unsigned long long)s, peer, rc, log_last_error());
      return rc;
    }
  }
  out->fifo.step = nsteps;
  in->fifo.step = nsteps;
  return 0;
}

/* Forks ranks 0 and 1 running fn; rank 1 is expected to die by SIGKILL (it kills itself) and
 * rank 0 to exit 0. Returns 0 when both did. */
static inline int th_run_pair_with_victim(fork_rank_fn fn) {
  pid_t pids[2];
  int st0 = 0, st1 = 0;
  fork_ranks_quiesce(); /* the root thread must not be inside the allocator (ASan) */
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < 2; i++) {
    pids[i] = fork();
    if (pids[i] < 0) return -1;
    if (pids[i] == 0) {
      alarm(20);
      _exit(fn(i, 2, NULL));
    }
  }
  /* Rank 1 first: reaping it makes its pid disappear for rank 0's liveness checks. */
  if (waitpid(pids[1], &st1, 0) != pids[1] || waitpid(pids[0], &st0, 0) != pids[0]) return -1;
  if (!WIFSIGNALED(st1) || WTERMSIG(st1) != SIGKILL) {
    fprintf(stderr, "rank 1 status %d, expected SIGKILL\n", st1);
    return 1;
  }
  if (!WIFEXITED(st0) || WEXITSTATUS(st0) != 0) {
    fprintf(stderr, "survivor status %d\n", st0);
    return 1;
  }
  return 0;
}

/* Entries of /dev/shm whose name contains needle. */
static inline int th_shm_count(const char* needle) {
  DIR* d = opendir("/dev/shm");
  int n = 0;
  struct dirent* e;
  if (d == NULL) return -1;
  while ((e = readdir(d)) != NULL) n += strstr(e->d_name, needle) != NULL;
  closedir(d);
  return n;
}

/* The CPU time (clock ticks, user + system) of this process's thread named name; -1 if none. */
static inline long th_thread_ticks(const char* name) {
  DIR* d = opendir("/proc/self/task");
  struct dirent* e;
  long ticks = -1;
  if (d == NULL) return -1;
  while (ticks < 0 && (e = readdir(d)) != NULL) {
    char path[300], comm[64] = "", stat[1024];
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(comm, sizeof(comm), f) == NULL) comm[0] = '\0';
    fclose(f);
    comm[strcspn(comm, "\n")] = '\0';
    if (strcmp(comm, name) != 0) continue;
    snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
    f = fopen(path, "r");
    if (f == NULL) continue;
    size_t len = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[len] = '\0';
    /* Fields after the ")" that closes the name: state is field 3, utime 14, stime 15. */
    char* p = strrchr(stat, ')');
    unsigned long ut = 0, st = 0;
    if (p != NULL &&
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
      ticks = (long)(ut + st);
  }
  closedir(d);
  return ticks;
}

#endif /* BATON_TEST_TRANSPORT_HARNESS_H */
