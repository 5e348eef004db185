/* Bootstrap with N processes on loopback: root, ring allgather, tagged send/recv in every order,
 * barrier, subsets, hostile clients, late and missing ranks, aborts, NCCL_COMM_ID, several roots.
 */
#include <arpa/inet.h>
#include <check.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "fork_ranks.h"
#include "unit.h"

#define MAX_RANKS 16
#define MAX_ROOTS 4
#define RUN_TIMEOUT_MS 20000

/* The message header as it travels (the tests forge some). */
typedef struct wire_header {
  uint64_t magic;
  int32_t sender;
  int32_t kind; /* 1: user message */
  int32_t tag;
  uint32_t reserved;
  uint64_t size;
} wire_header_t;

typedef struct shared_area {
  int arrived[2][2][MAX_RANKS]; /* [communicator][barrier round][rank] */
  int sent[2], posted[2];       /* [communicator]: rank 0's progress in step_pairs */
} shared_area_t;

typedef struct boot_case {
  bootstrap_handle_t handles[MAX_ROOTS];
  int nroots;
  int nranks;
  int late_rank; /* -1: none */
  int late_ms;
  bool env_id;        /* each rank computes the handle itself (NCCL_COMM_ID) */
  bool explicit_root; /* rank 0 calls bootstrap_root_start before init */
  int repeat;         /* communicators created one after the other */
  bool attack;        /* rank 0 sends forged messages to rank 1's listener */
  bool info_log;      /* ranks log at INFO to a file and check the bootstrap lines */
  int family;         /* of the listen addresses; 0 means AF_INET */
  shared_area_t* shared;
} boot_case_t;

static shared_area_t* shared_new(void) {
  void* p =
      mmap(NULL, sizeof(shared_area_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(p, MAP_FAILED);
  memset(p, 0, sizeof(shared_area_t));
  return p;
}

static int local_port(int fd) {
  socket_addr_t a;
  socklen_t len = sizeof(a);
  if (getsockname(fd, &a.sa, &len) != 0) return -1;
  return ntohs(a.sin.sin_port);
}

/* Waits up to 3 s for a line holding all needles to appear in a log file. */
static bool log_wait_line(const char* path, const char* const* needles) {
  for (int i = 0; i < 300; i++) {
    if (fork_ranks_file_has_line(path, needles)) return true;
    fork_ranks_sleep_ms(10);
  }
  return false;
}

/* ---- The steps every rank runs ------------------------------------------------------------------
 */

static unsigned char pattern(int from, int to, int tag, size_t i) {
  return (unsigned char)(from * 31 + to * 17 + tag * 7 + i * 13);
}

static size_t tag_size(int tag) {
  return tag == 3 ? (256u << 10) : (size_t)(16 * tag);
}

static int step_allgather(bootstrap_t* b, const boot_case_t* bc, int rank, int n) {
  uint64_t* ag = malloc((size_t)n * 3 * sizeof(uint64_t));
  memset(ag, 0xff, (size_t)n * 3 * sizeof(uint64_t));
  for (int k = 0; k < 3; k++) ag[rank * 3 + k] = (uint64_t)rank * 1000 + k;
  CHILD_CHECK(bootstrap_allgather(b, ag, 3 * sizeof(uint64_t)) == ncclSuccess);
  for (int r = 0; r < n; r++)
    for (int k = 0; k < 3; k++) CHILD_CHECK(ag[r * 3 + k] == (uint64_t)r * 1000 + k);
  free(ag);
  /* A second allgather of another size right after. */
  char bytes[MAX_RANKS];
  memset(bytes, 0, sizeof(bytes));
  bytes[rank] = (char)('a' + rank);
  CHILD_CHECK(bootstrap_allgather(b, bytes, 1) == ncclSuccess);
  for (int r = 0; r < n; r++) CHILD_CHECK(bytes[r] == (char)('a' + r));
  /* The address table: every rank's listener, all distinct. */
  for (int r = 0; r < n; r++) {
    const socket_addr_t* a = bootstrap_peer_addr(b, r);
    CHILD_CHECK(a != NULL && a->sa.sa_family == (bc->family ? bc->family : AF_INET));
    CHILD_CHECK(a->sin.sin_port != 0); /* same offset in sockaddr_in6 */
    for (int q = 0; q < r; q++)
      CHILD_CHECK(bootstrap_peer_addr(b, q)->sin.sin_port != a->sin.sin_port);
  }
  CHILD_CHECK(bootstrap_peer_addr(b, n) == NULL);
  return 0;
}

/* Every rank sends tags 1..3 to every other rank, then receives peers in descending order and
 * tags in the order 3, 1, 2: most arrive before their recv is posted. */
static int step_all_to_all(bootstrap_t* b, int rank, int n) {
  unsigned char* buf = malloc(tag_size(3));
  for (int p = 0; p < n; p++) {
    if (p == rank) continue;
    for (int tag = 1; tag <= 3; tag++) {
      for (size_t i = 0; i < tag_size(tag); i++) buf[i] = pattern(rank, p, tag, i);
      CHILD_CHECK(bootstrap_send(b, p, tag, buf, tag_size(tag)) == ncclSuccess);
    }
  }
  static const int order[3] = {3, 1, 2};
  for (int d = 1; d < n; d++) {
    int p = (rank - d + n) % n;
    for (int t = 0; t < 3; t++) {
      int tag = order[t];
      memset(buf, 0, tag_size(tag));
      CHILD_CHECK(bootstrap_recv(b, p, tag, buf, tag_size(tag)) == ncclSuccess);
      size_t bad = 0;
      for (size_t i = 0; i < tag_size(tag); i++) bad += buf[i] != pattern(p, rank, tag, i);
      CHILD_CHECK(bad == 0);
    }
  }
  free(buf);
  return 0;
}

/* Waits (bounded) for another process to set *flag. */
static bool wait_flag(int* flag) {
  for (int i = 0; i < 1000; i++) {
    if (__atomic_load_n(flag, __ATOMIC_SEQ_CST)) return true;
    fork_ranks_sleep_ms(10);
  }
  return false;
}

/* Ranks 0 and 1: a recv posted before its message, one posted after, FIFO within a tag, a size
 * mismatch. Every rank: a message to itself. */
static int step_pairs(bootstrap_t* b, const boot_case_t* bc, int rep, int rank, int n) {
  char text[16];
  if (rank == 0 && n > 1) {
    CHILD_CHECK(bootstrap_send(b, 1, 51, "early", 6) == ncclSuccess);
    __atomic_store_n(&bc->shared->sent[rep], 1, __ATOMIC_SEQ_CST);
    uint64_t t0 = clock_ns();
    __atomic_store_n(&bc->shared->posted[rep], 1, __ATOMIC_SEQ_CST);
    CHILD_CHECK(bootstrap_recv(b, 1, 50, text, 5) == ncclSuccess);
    CHILD_CHECK(memcmp(text, "late", 5) == 0);
    CHILD_CHECK(fork_ranks_ms_since(t0) >= 90); /* it really was posted first */
    for (int v = 1; v <= 5; v++)
      CHILD_CHECK(bootstrap_send(b, 1, 80, &v, sizeof(v)) == ncclSuccess);
    uint64_t eight = 8;
    CHILD_CHECK(bootstrap_send(b, 1, 70, &eight, sizeof(eight)) == ncclSuccess);
  } else if (rank == 1) {
    CHILD_CHECK(wait_flag(&bc->shared->sent[rep]));
    fork_ranks_sleep_ms(100); /* the message has arrived before this recv */
    CHILD_CHECK(bootstrap_recv(b, 0, 51, text, 6) == ncclSuccess);
    CHILD_CHECK(strcmp(text, "early") == 0);
    CHILD_CHECK(wait_flag(&bc->shared->posted[rep]));
    fork_ranks_sleep_ms(100); /* rank 0 waits in its recv by now */
    CHILD_CHECK(bootstrap_send(b, 0, 50, "late", 5) == ncclSuccess);
    for (int v = 1; v <= 5; v++) {
      int got = 0;
      CHILD_CHECK(bootstrap_recv(b, 0, 80, &got, sizeof(got)) == ncclSuccess);
      CHILD_CHECK(got == v);
    }
    uint32_t four = 0;
    log_clear_last_error();
    CHILD_CHECK(bootstrap_recv(b, 0, 70, &four, sizeof(four)) == ncclInternalError);
    CHILD_CHECK(strstr(log_last_error(), "expected 4") != NULL);
  }
  int self = rank * 3 + 1, got = 0;
  CHILD_CHECK(bootstrap_send(b, rank, 60, &self, sizeof(self)) == ncclSuccess);
  CHILD_CHECK(bootstrap_recv(b, rank, 60, &got, sizeof(got)) == ncclSuccess);
  CHILD_CHECK(got == self);
  CHILD_CHECK(bootstrap_send(b, n, 60, &self, sizeof(self)) == ncclInvalidArgument);
  CHILD_CHECK(bootstrap_recv(b, -1, 60, &got, sizeof(got)) == ncclInvalidArgument);
  return 0;
}

/* Rank 0 connects to rank 1's listener with forged traffic; rank 1 must drop it with a WARN
 * naming the address and still get the real message with the same tag. */
static int forge(const socket_addr_t* to, const wire_header_t* h, size_t extra, int* port) {
  socket_conn_t c;
  CHILD_CHECK(socket_connect(to, NULL, &c) == ncclSuccess);
  *port = local_port(c.fd);
  char payload[16];
  memset(payload, 'z', sizeof(payload));
  CHILD_CHECK(socket_send_all(&c, h, sizeof(*h)) == ncclSuccess);
  if (extra) CHILD_CHECK(socket_send_all(&c, payload, extra) == ncclSuccess);
  socket_close(&c);
  return 0;
}

static int step_attack(bootstrap_t* b, const boot_case_t* bc, int rank, const char* log_path) {
  unsigned char real[100];
  for (size_t i = 0; i < sizeof(real); i++) real[i] = pattern(0, 1, 42, i);
  if (rank == 0) {
    const socket_addr_t* to = bootstrap_peer_addr(b, 1);
    int ports[4];
    wire_header_t h = {
        .magic = ~bc->handles[0].magic, .sender = 0, .kind = 1, .tag = 42, .size = 4};
    CHILD_CHECK(forge(to, &h, 4, &ports[0]) == 0);
    h.magic = bc->handles[0].magic;
    h.sender = 99;
    CHILD_CHECK(forge(to, &h, 0, &ports[1]) == 0);
    h.sender = 0;
    h.size = 100;
    CHILD_CHECK(forge(to, &h, 10, &ports[2]) == 0);
    /* Half a header. */
    socket_conn_t c;
    CHILD_CHECK(socket_connect(to, NULL, &c) == ncclSuccess);
    ports[3] = local_port(c.fd);
    CHILD_CHECK(socket_send_all(&c, &h, 5) == ncclSuccess);
    socket_close(&c);
    CHILD_CHECK(bootstrap_send(b, 1, 42, real, sizeof(real)) == ncclSuccess);
    CHILD_CHECK(bootstrap_send(b, 1, 43, ports, sizeof(ports)) == ncclSuccess);
  } else if (rank == 1) {
    int ports[4];
    unsigned char got[100];
    CHILD_CHECK(bootstrap_recv(b, 0, 43, ports, sizeof(ports)) == ncclSuccess);
    CHILD_CHECK(bootstrap_recv(b, 0, 42, got, sizeof(got)) == ncclSuccess);
    CHILD_CHECK(memcmp(got, real, sizeof(real)) == 0);
    char a[4][96];
    snprintf(a[0], sizeof(a[0]), "127.0.0.1:%d: wrong magic", ports[0]);
    snprintf(a[1], sizeof(a[1]), "127.0.0.1:%d (sender 99", ports[1]);
    snprintf(a[2], sizeof(a[2]), "127.0.0.1:%d (tag 42: 10 of 100 bytes)", ports[2]);
    snprintf(a[3], sizeof(a[3]), "127.0.0.1:%d (5 of 32 bytes)", ports[3]);
    const char* n0[] = {"WARN", a[0], NULL};
    const char* n1[] = {"WARN", "malformed", a[1], NULL};
    const char* n2[] = {"WARN", "truncated message", a[2], NULL};
    const char* n3[] = {"WARN", "truncated message header", a[3], NULL};
    CHILD_CHECK(log_wait_line(log_path, n0));
    CHILD_CHECK(log_wait_line(log_path, n1));
    CHILD_CHECK(log_wait_line(log_path, n2));
    CHILD_CHECK(log_wait_line(log_path, n3));
  }
  return 0;
}

static int step_barrier(bootstrap_t* b, const boot_case_t* bc, int rep, int rank, int n) {
  for (int round = 0; round < 2; round++) {
    fork_ranks_sleep_ms(20 * (round == 0 ? rank : n - 1 - rank));
    __atomic_store_n(&bc->shared->arrived[rep][round][rank], 1, __ATOMIC_SEQ_CST);
    CHILD_CHECK(bootstrap_barrier(b, 100 + round) == ncclSuccess);
    for (int r = 0; r < n; r++)
      CHILD_CHECK(__atomic_load_n(&bc->shared->arrived[rep][round][r], __ATOMIC_SEQ_CST) == 1);
  }
  return 0;
}

/* Members: every rank but 1 and 4 (all ranks when n == 2), listed in descending order. The others
 * close their bootstrap and leave first, so a member that contacted them would fail. */
static int step_subset(bootstrap_t** bp, int rank, int n) {
  int ranks[MAX_RANKS], m = 0, me = -1;
  for (int r = n - 1; r >= 0; r--) {
    if (n > 2 && (r == 1 || r == 4)) continue;
    if (r == rank) me = m;
    ranks[m++] = r;
  }
  if (me < 0) {
    CHILD_CHECK(bootstrap_close(*bp) == ncclSuccess);
    *bp = NULL;
    return 0;
  }
  bootstrap_t* b = *bp;
  int slots[MAX_RANKS][2];
  memset(slots, 0, sizeof(slots));
  slots[me][0] = rank;
  slots[me][1] = rank * rank + 7;
  CHILD_CHECK(bootstrap_subset_allgather(b, ranks, m, me, 200, slots, sizeof(slots[0])) ==
              ncclSuccess);
  for (int i = 0; i < m; i++)
    CHILD_CHECK(slots[i][0] == ranks[i] && slots[i][1] == ranks[i] * ranks[i] + 7);
  char msg[64];
  int root = m > 1 ? 1 : 0;
  memset(msg, 0, sizeof(msg));
  if (me == root) snprintf(msg, sizeof(msg), "from rank %d", rank);
  CHILD_CHECK(bootstrap_subset_bcast(b, ranks, m, me, root, 201, msg, sizeof(msg)) == ncclSuccess);
  char want[64];
  snprintf(want, sizeof(want), "from rank %d", ranks[root]);
  CHILD_CHECK(strcmp(msg, want) == 0);
  /* Wrong arguments are refused. */
  CHILD_CHECK(bootstrap_subset_bcast(b, ranks, m, me, m, 201, msg, sizeof(msg)) ==
              ncclInvalidArgument);
  CHILD_CHECK(bootstrap_subset_allgather(b, ranks, m, (me + 1) % m, 202, slots, 8) ==
              (m > 1 ? ncclInvalidArgument : ncclSuccess));
  return 0;
}

static int rank_main(int rank, int nchildren, void* arg) {
  boot_case_t* bc = arg;
  int n = bc->nranks;
  char log_path[256] = "";
  if (bc->info_log)
    fork_ranks_log_to_file("INFO", log_path, sizeof(log_path));
  else if (bc->attack && rank == 1)
    fork_ranks_log_to_file("WARN", log_path, sizeof(log_path));
  else
    INFO(NCCL_INIT, "test rank %d", rank); /* logging opens what it needs before we count */
  int fds_before = fork_ranks_count_fds(), threads_before = fork_ranks_count_threads();
  if (rank == bc->late_rank) fork_ranks_sleep_ms(bc->late_ms);
  for (int rep = 0; rep < (bc->repeat ? bc->repeat : 1); rep++) {
    bootstrap_handle_t handles[MAX_ROOTS];
    memcpy(handles, bc->handles, sizeof(handles));
    if (bc->env_id) {
      CHILD_CHECK(bootstrap_get_unique_id(&handles[0]) == ncclSuccess);
      CHILD_CHECK(memcmp(&handles[0], &bc->handles[0], sizeof(handles[0])) == 0);
      if (rank == 0 && bc->explicit_root)
        CHILD_CHECK(bootstrap_root_start(&handles[0]) == ncclSuccess);
    }
    bootstrap_t* b = NULL;
    CHILD_CHECK(bootstrap_init(handles, bc->nroots, rank, n, NULL, &b) == ncclSuccess);
    CHILD_CHECK(bootstrap_rank(b) == rank && bootstrap_nranks(b) == n);
    CHILD_CHECK(step_allgather(b, bc, rank, n) == 0);
    CHILD_CHECK(step_all_to_all(b, rank, n) == 0);
    CHILD_CHECK(step_pairs(b, bc, rep, rank, n) == 0);
    if (bc->attack) CHILD_CHECK(step_attack(b, bc, rank, log_path) == 0);
    CHILD_CHECK(step_barrier(b, bc, rep, rank, n) == 0);
    CHILD_CHECK(step_subset(&b, rank, n) == 0);
    CHILD_CHECK(bootstrap_close(b) == ncclSuccess);
  }
  if (bc->info_log) {
    char joined[64];
    snprintf(joined, sizeof(joined), "Bootstrap: rank %d of %d joined at 127.0.0.1:", rank, n);
    const char* using_lo[] = {"NCCL INFO Bootstrap: using lo:127.0.0.1<0>", NULL};
    const char* join_line[] = {"NCCL INFO", joined, NULL};
    const char* root_line[] = {"NCCL INFO Bootstrap: root started at 127.0.0.1:", NULL};
    CHILD_CHECK(fork_ranks_file_has_line(log_path, using_lo));
    CHILD_CHECK(fork_ranks_file_has_line(log_path, join_line));
    CHILD_CHECK(fork_ranks_file_has_line(log_path, root_line) == (rank == 0 && bc->env_id));
  }
  if (log_path[0]) unlink(log_path);
  CHILD_CHECK(fork_ranks_count_fds() == fds_before);
  /* A root this rank started (NCCL_COMM_ID) exits on its own, shortly after its last answer. */
  for (int i = 0; i < 300 && fork_ranks_count_threads() != threads_before; i++)
    fork_ranks_sleep_ms(10);
  CHILD_CHECK(fork_ranks_count_threads() == threads_before);
  return 0;
}

/* ---- Parent side --------------------------------------------------------------------------------
 */

/* Waits for root threads to finish: the thread and descriptor counts return to their values
 * before the roots started. */
static void wait_roots_gone(int want_fds, int want_threads) {
  int fds = -1, threads = -1;
  for (int i = 0; i < 300; i++) {
    fds = fork_ranks_count_fds();
    threads = fork_ranks_count_threads();
    if (fds == want_fds && threads == want_threads) return;
    fork_ranks_sleep_ms(10);
  }
  ck_abort_msg("%d descriptors and %d threads, %d and %d expected: a root thread is still there",
               fds, threads, want_fds, want_threads);
}

static void run_case(boot_case_t* bc) {
  bc->shared = shared_new();
  ck_assert_int_eq(fork_ranks_run(bc->nranks, rank_main, bc, RUN_TIMEOUT_MS), 0);
  munmap(bc->shared, sizeof(shared_area_t));
}

static void run_basic(int nranks, int nroots) {
  INFO(NCCL_INIT, "test parent");
  int fds = fork_ranks_count_fds(), threads = fork_ranks_count_threads();
  boot_case_t bc = {.nranks = nranks, .nroots = nroots, .late_rank = -1};
  for (int k = 0; k < nroots; k++)
    ck_assert_int_eq(bootstrap_get_unique_id(&bc.handles[k]), ncclSuccess);
  for (int k = 1; k < nroots; k++) ck_assert(bc.handles[k].magic != bc.handles[0].magic);
  ck_assert_int_eq(bc.handles[0].addr.sa.sa_family, AF_INET);
  ck_assert_uint_eq(bc.handles[0].addr.sin.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
  ck_assert_int_eq(fork_ranks_count_threads(), threads + nroots);
  run_case(&bc);
  wait_roots_gone(fds, threads); /* every root exited after serving its ranks */
}

START_TEST(one_rank) {
  run_basic(1, 1);
}
END_TEST
START_TEST(two_ranks) {
  run_basic(2, 1);
}
END_TEST
START_TEST(three_ranks) {
  run_basic(3, 1);
}
END_TEST
START_TEST(eight_ranks) {
  run_basic(8, 1);
}
END_TEST
START_TEST(two_roots_five_ranks) {
  run_basic(5, 2);
}
END_TEST
START_TEST(three_roots_eight_ranks) {
  run_basic(8, 3);
}
END_TEST
START_TEST(three_roots_three_ranks) {
  run_basic(3, 3);
}
END_TEST

START_TEST(late_starter) {
  boot_case_t bc = {.nranks = 3, .nroots = 1, .late_rank = 2, .late_ms = 1000};
  ck_assert_int_eq(bootstrap_get_unique_id(&bc.handles[0]), ncclSuccess);
  uint64_t t0 = clock_ns();
  run_case(&bc);
  ck_assert_double_ge(fork_ranks_ms_since(t0), 1000);
}
END_TEST

static int raw_client(const socket_addr_t* to, const void* data, size_t size, socket_conn_t* keep) {
  socket_conn_t c;
  ck_assert_int_eq(socket_connect(to, NULL, &c), ncclSuccess);
  int port = local_port(c.fd);
  if (size) ck_assert_int_eq(socket_send_all(&c, data, size), ncclSuccess);
  if (keep)
    *keep = c;
  else
    socket_close(&c);
  return port;
}

START_TEST(hostile_clients_are_rejected) {
  char log_path[256];
  fork_ranks_log_to_file("WARN", log_path, sizeof(log_path));
  int fds = fork_ranks_count_fds(), threads = fork_ranks_count_threads();
  boot_case_t bc = {.nranks = 3, .nroots = 1, .late_rank = -1, .attack = true};
  ck_assert_int_eq(bootstrap_get_unique_id(&bc.handles[0]), ncclSuccess);
  /* Garbage, a truncated registration, and an idle connection to the root. */
  unsigned char junk[256];
  memset(junk, 0x5a, sizeof(junk));
  int p_junk = raw_client(&bc.handles[0].addr, junk, sizeof(junk), NULL);
  int p_short = raw_client(&bc.handles[0].addr, junk, 3, NULL);
  socket_conn_t idle;
  raw_client(&bc.handles[0].addr, NULL, 0, &idle);
  run_case(&bc);
  char a[2][96];
  snprintf(a[0], sizeof(a[0]), "from 127.0.0.1:%d: wrong magic", p_junk);
  snprintf(a[1], sizeof(a[1]), "truncated registration from 127.0.0.1:%d (3 of", p_short);
  const char* n0[] = {"WARN", a[0], NULL};
  const char* n1[] = {"WARN", a[1], NULL};
  ck_assert_msg(log_wait_line(log_path, n0), "no WARN for the garbage client");
  ck_assert_msg(log_wait_line(log_path, n1), "no WARN for the truncated registration");
  socket_close(&idle);
  wait_roots_gone(fds, threads);
  unlink(log_path);
}
END_TEST

/* ---- NCCL_COMM_ID
 * --------------------------------------------------------------------------------- */

static void run_env_id(const char* host, bool explicit_root) {
  char id[64];
  int port = fork_ranks_free_port();
  snprintf(id, sizeof(id), "%s:%d", host, port);
  setenv("NCCL_COMM_ID", id, 1);
  param_reload();
  boot_case_t bc = {.nranks = 3,
                    .nroots = 1,
                    .late_rank = 0,
                    .late_ms = 300,
                    .env_id = true,
                    .explicit_root = explicit_root,
                    .repeat = 2,
                    .info_log = true};
  ck_assert_int_eq(bootstrap_get_unique_id(&bc.handles[0]), ncclSuccess);
  ck_assert_int_eq(ntohs(bc.handles[0].addr.sin.sin_port), port);
  /* Nothing was started here: the port is closed. */
  setenv("NCCL_SOCKET_RETRY_CNT", "0", 1);
  param_reload();
  socket_conn_t c;
  ck_assert_int_eq(socket_connect(&bc.handles[0].addr, NULL, &c), ncclRemoteError);
  unsetenv("NCCL_SOCKET_RETRY_CNT");
  param_reload();
  run_case(&bc);
}

START_TEST(comm_id_env_ipv4) {
  run_env_id("127.0.0.1", false);
}
END_TEST
START_TEST(comm_id_env_hostname_explicit_root_start) {
  run_env_id("localhost", true);
}
END_TEST

START_TEST(comm_id_env_bad_value) {
  setenv("NCCL_COMM_ID", "127.0.0.1", 1);
  param_reload();
  bootstrap_handle_t h;
  ck_assert_int_eq(bootstrap_get_unique_id(&h), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "127.0.0.1"));
}
END_TEST

static bool have_ipv6_loopback(void) {
  socket_iface_t list[64];
  int n = 0;
  ck_assert_int_eq(socket_list_interfaces(list, 64, &n), ncclSuccess);
  for (int i = 0; i < n; i++)
    if (strcmp(list[i].name, "lo") == 0 && list[i].addr.sa.sa_family == AF_INET6) return true;
  return false;
}

START_TEST(ipv6_loopback) {
  setenv("NCCL_SOCKET_FAMILY", "AF_INET6", 1);
  param_reload();
  if (!have_ipv6_loopback()) {
    /* This host has no ::1: asking for IPv6 on lo must fail clearly instead. */
    const socket_iface_t* ifs = NULL;
    int nifs = 0;
    ck_assert_int_eq(socket_default_interfaces(&ifs, &nifs), ncclSystemError);
    ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_SOCKET_FAMILY=AF_INET6"));
    return;
  }
  boot_case_t bc = {.nranks = 3, .nroots = 1, .late_rank = -1, .family = AF_INET6};
  ck_assert_int_eq(bootstrap_get_unique_id(&bc.handles[0]), ncclSuccess);
  char text[80];
  socket_addr_format(&bc.handles[0].addr, text, sizeof(text));
  ck_assert_msg(strncmp(text, "[::1]:", 6) == 0, "root at %s", text);
  run_case(&bc);
  /* NCCL_COMM_ID in the bracketed form. */
  char id[64];
  snprintf(id, sizeof(id), "[::1]:%d", fork_ranks_free_port());
  setenv("NCCL_COMM_ID", id, 1);
  param_reload();
  boot_case_t env = {.nranks = 2, .nroots = 1, .late_rank = -1, .family = AF_INET6, .env_id = true};
  ck_assert_int_eq(bootstrap_get_unique_id(&env.handles[0]), ncclSuccess);
  ck_assert_str_eq(socket_addr_format(&env.handles[0].addr, text, sizeof(text)), id);
  run_case(&env);
}
END_TEST

/* ---- Missing ranks and aborts -------------------------------------------------------------------
 */

static int missing_rank_main(int rank, int nchildren, void* arg) {
  boot_case_t* bc = arg;
  INFO(NCCL_INIT, "test rank %d", rank);
  int fds_before = fork_ranks_count_fds();
  volatile uint32_t flag = 0;
  pthread_t t = fork_ranks_abort_after(&flag, 500);
  uint64_t t0 = clock_ns();
  bootstrap_t* b = (bootstrap_t*)0x1;
  ncclResult_t res = bootstrap_init(bc->handles, 1, rank, bc->nranks, &flag, &b);
  double ms = fork_ranks_ms_since(t0);
  pthread_join(t, NULL);
  CHILD_CHECK(res == ncclInternalError);
  CHILD_CHECK(b == (bootstrap_t*)0x1); /* output untouched */
  CHILD_CHECK(ms >= 450 && ms < 1500);
  CHILD_CHECK(fork_ranks_count_fds() == fds_before);
  return 0;
}

START_TEST(missing_rank_then_abort) {
  boot_case_t bc = {.nranks = 3, .nroots = 1, .late_rank = -1};
  ck_assert_int_eq(bootstrap_get_unique_id(&bc.handles[0]), ncclSuccess);
  /* Ranks 0 and 1 start; rank 2 never comes. */
  ck_assert_int_eq(fork_ranks_run(2, missing_rank_main, &bc, RUN_TIMEOUT_MS), 0);
}
END_TEST

static int dead_peer_main(int rank, int nchildren, void* arg) {
  boot_case_t* bc = arg;
  volatile uint32_t flag = 0;
  bootstrap_t* b = NULL;
  CHILD_CHECK(bootstrap_init(bc->handles, 1, rank, 2, &flag, &b) == ncclSuccess);
  CHILD_CHECK(bootstrap_barrier(b, 1) == ncclSuccess);
  if (rank == 1) return bootstrap_close(b) == ncclSuccess ? 0 : 1;
  /* Rank 1 is gone: a recv from it times out naming it, then an abort ends the next wait. */
  setenv("NCCL_BOOTSTRAP_TIMEOUT_MS", "300", 1);
  param_reload();
  int v;
  uint64_t t0 = clock_ns();
  CHILD_CHECK(bootstrap_recv(b, 1, 5, &v, sizeof(v)) == ncclRemoteError);
  double ms = fork_ranks_ms_since(t0);
  CHILD_CHECK(ms >= 250 && ms < 1500);
  CHILD_CHECK(strstr(log_last_error(), "rank 1 at 127.0.0.1:") != NULL);
  CHILD_CHECK(strstr(log_last_error(), "NCCL_BOOTSTRAP_TIMEOUT_MS") != NULL);
  setenv("NCCL_BOOTSTRAP_TIMEOUT_MS", "20000", 1);
  param_reload();
  pthread_t t = fork_ranks_abort_after(&flag, 300);
  t0 = clock_ns();
  CHILD_CHECK(bootstrap_recv(b, 1, 6, &v, sizeof(v)) == ncclInternalError);
  ms = fork_ranks_ms_since(t0);
  pthread_join(t, NULL);
  CHILD_CHECK(ms >= 250 && ms < 1300);
  CHILD_CHECK(bootstrap_barrier(b, 2) == ncclInternalError);
  CHILD_CHECK(bootstrap_close(b) == ncclSuccess);
  return 0;
}

START_TEST(dead_peer_timeout_and_abort) {
  boot_case_t bc = {.nranks = 2, .nroots = 1, .late_rank = -1};
  ck_assert_int_eq(bootstrap_get_unique_id(&bc.handles[0]), ncclSuccess);
  ck_assert_int_eq(fork_ranks_run(2, dead_peer_main, &bc, RUN_TIMEOUT_MS), 0);
}
END_TEST

/* bootstrap_recv_watched: a message the peer sent before it went is still received, even when the
 * check already calls the peer gone; a message that never comes ends with the check's error
 * within about two poll slices, not at NCCL_BOOTSTRAP_TIMEOUT_MS. */
static int gone_calls;
static ncclResult_t peer_gone(void* arg, int peer) {
  (void)arg;
  gone_calls++;
  return peer == 1 ? ncclRemoteError : ncclSuccess;
}

static int watched_main(int rank, int nchildren, void* arg) {
  boot_case_t* bc = arg;
  (void)nchildren;
  bootstrap_t* b = NULL;
  CHILD_CHECK(bootstrap_init(bc->handles, 1, rank, 2, NULL, &b) == ncclSuccess);
  CHILD_CHECK(bootstrap_barrier(b, 1) == ncclSuccess);
  int v = 42;
  if (rank == 1) {
    CHILD_CHECK(bootstrap_send(b, 0, 7, &v, sizeof(v)) == ncclSuccess);
    return bootstrap_close(b) == ncclSuccess ? 0 : 1;
  }
  fork_ranks_sleep_ms(300); /* rank 1 has sent and gone */
  v = 0;
  CHILD_CHECK(bootstrap_recv_watched(b, 1, 7, &v, sizeof(v), peer_gone, NULL) == ncclSuccess);
  CHILD_CHECK(v == 42);
  uint64_t t0 = clock_ns();
  gone_calls = 0;
  CHILD_CHECK(bootstrap_recv_watched(b, 1, 8, &v, sizeof(v), peer_gone, NULL) == ncclRemoteError);
  double ms = fork_ranks_ms_since(t0);
  CHILD_CHECK(ms >= 90 && ms < 1500);
  CHILD_CHECK(gone_calls == 1); /* asked once, then one slice of grace */
  CHILD_CHECK(bootstrap_close(b) == ncclSuccess);
  return 0;
}

START_TEST(watched_recv_of_dead_peer) {
  boot_case_t bc = {.nranks = 2, .nroots = 1, .late_rank = -1};
  ck_assert_int_eq(bootstrap_get_unique_id(&bc.handles[0]), ncclSuccess);
  ck_assert_int_eq(fork_ranks_run(2, watched_main, &bc, RUN_TIMEOUT_MS), 0);
}
END_TEST

/* ---- The root protocol, driven directly (threads of one process)
 * ---------------------------------- */

typedef struct joiner {
  const bootstrap_handle_t* handle;
  int rank, nranks, delay_ms;
  socket_addr_t me, next;
  ncclResult_t res;
} joiner_t;

static void* joiner_main(void* p) {
  joiner_t* j = p;
  fork_ranks_sleep_ms(j->delay_ms);
  j->res = bootstrap_root_join(j->handle, 1, j->rank, j->nranks, &j->me, NULL, &j->next);
  return NULL;
}

START_TEST(root_rejects_inconsistent_registrations) {
  char log_path[256];
  fork_ranks_log_to_file("WARN", log_path, sizeof(log_path));
  bootstrap_handle_t h;
  ck_assert_int_eq(bootstrap_get_unique_id(&h), ncclSuccess);
  joiner_t j[4] = {
      {.handle = &h, .rank = 0, .nranks = 2, .delay_ms = 0},
      {.handle = &h, .rank = 1, .nranks = 3, .delay_ms = 100}, /* wrong nranks */
      {.handle = &h, .rank = 0, .nranks = 2, .delay_ms = 200}, /* rank 0 again */
      {.handle = &h, .rank = 1, .nranks = 2, .delay_ms = 400},
  };
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(socket_addr_parse(i == 3 ? "10.9.9.3:3000" : "10.9.9.1:1000", &j[i].me),
                     ncclSuccess);
    j[i].res = ncclNumResults;
    pthread_create(&t[i], NULL, joiner_main, &j[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  ck_assert_int_eq(j[0].res, ncclSuccess);
  ck_assert_int_ne(j[1].res, ncclSuccess);
  ck_assert_int_ne(j[2].res, ncclSuccess);
  ck_assert_int_eq(j[3].res, ncclSuccess);
  char text[80];
  ck_assert_str_eq(socket_addr_format(&j[0].next, text, sizeof(text)), "10.9.9.3:3000");
  ck_assert_str_eq(socket_addr_format(&j[3].next, text, sizeof(text)), "10.9.9.1:1000");
  const char* n0[] = {"WARN", "rank 1", "nranks=3", "nranks=2", NULL};
  const char* n1[] = {"WARN", "rank 0 registered twice", NULL};
  ck_assert(log_wait_line(log_path, n0));
  ck_assert(log_wait_line(log_path, n1));
  unlink(log_path);
  /* Bad arguments never reach a root. */
  socket_addr_t next;
  ck_assert_int_eq(bootstrap_root_join(&h, 2, 0, 1, &j[0].me, NULL, &next), ncclInvalidArgument);
  bootstrap_t* b = NULL;
  ck_assert_int_eq(bootstrap_init(&h, 1, 3, 3, NULL, &b), ncclInvalidArgument);
  ck_assert_ptr_null(b);
}
END_TEST

/* A registration the root cannot serve (nranks = INT_MAX), or one that disagrees with the job's
 * shape, arriving first, is refused alone with its reason, and the ranks that agree with each
 * other are served. */
START_TEST(root_judges_each_registration_alone) {
  char log_path[256];
  fork_ranks_log_to_file("WARN", log_path, sizeof(log_path));
  bootstrap_handle_t h;
  ck_assert_int_eq(bootstrap_get_unique_id(&h), ncclSuccess);
  joiner_t j[4] = {
      {.handle = &h, .rank = 0, .nranks = INT_MAX, .delay_ms = 0}, /* cannot be served */
      {.handle = &h, .rank = 2, .nranks = 5, .delay_ms = 50},      /* another shape, first */
      {.handle = &h, .rank = 1, .nranks = 2, .delay_ms = 200},
      {.handle = &h, .rank = 0, .nranks = 2, .delay_ms = 300},
  };
  pthread_t t[4];
  for (int i = 0; i < 4; i++) {
    ck_assert_int_eq(socket_addr_parse(i == 3 ? "10.9.9.1:1000" : "10.9.9.2:2000", &j[i].me),
                     ncclSuccess);
    j[i].res = ncclNumResults;
    pthread_create(&t[i], NULL, joiner_main, &j[i]);
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  ck_assert_int_eq(j[0].res, ncclInvalidUsage);
  ck_assert_int_eq(j[1].res, ncclInvalidUsage);
  ck_assert_int_eq(j[2].res, ncclSuccess);
  ck_assert_int_eq(j[3].res, ncclSuccess);
  char text[80];
  ck_assert_str_eq(socket_addr_format(&j[2].next, text, sizeof(text)), "10.9.9.1:1000");
  ck_assert_str_eq(socket_addr_format(&j[3].next, text, sizeof(text)), "10.9.9.2:2000");
  /* Each refused rank was told why: its own WARN carries the root's reason. */
  const char* r0[] = {"WARN", "refused rank 0 of 2147483647", "more than 16777216", NULL};
  const char* r1[] = {"WARN", "refused rank 2 of 5", "said nranks=5", "said nranks=2", NULL};
  ck_assert(log_wait_line(log_path, r0));
  ck_assert(log_wait_line(log_path, r1));
  unlink(log_path);
}
END_TEST

START_TEST(root_times_out_and_exits) {
  char log_path[256];
  fork_ranks_log_to_file("WARN", log_path, sizeof(log_path));
  setenv("NCCL_BOOTSTRAP_TIMEOUT_MS", "300", 1);
  param_reload();
  int fds = fork_ranks_count_fds(), threads = fork_ranks_count_threads();
  /* An id nobody uses, and one where rank 1 of 2 never comes. */
  bootstrap_handle_t unused, h;
  ck_assert_int_eq(bootstrap_get_unique_id(&unused), ncclSuccess);
  ck_assert_int_eq(bootstrap_get_unique_id(&h), ncclSuccess);
  ck_assert_int_eq(fork_ranks_count_threads(), threads + 2);
  joiner_t j = {.handle = &h, .rank = 0, .nranks = 2, .res = ncclNumResults};
  ck_assert_int_eq(socket_addr_parse("10.9.9.1:1000", &j.me), ncclSuccess);
  uint64_t t0 = clock_ns();
  joiner_main(&j);
  ck_assert_int_eq(j.res, ncclRemoteError); /* the rank's own wait timed out */
  ck_assert_double_lt(fork_ranks_ms_since(t0), 1500);
  wait_roots_gone(fds, threads);
  char text[80];
  const char* n0[] = {"WARN", socket_addr_format(&h.addr, text, sizeof(text)),
                      "timed out after 300 ms waiting for 1 rank(s): 1", NULL};
  ck_assert(log_wait_line(log_path, n0));
  unlink(log_path);
}
END_TEST

int main(void) {
  /* Loopback only; a bug fails within seconds instead of the default 5 minutes. */
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  setenv("NCCL_BOOTSTRAP_TIMEOUT_MS", "20000", 1);
  unsetenv("NCCL_COMM_ID");
  param_reload();
  Suite* s = suite_create("bootstrap");
  TCase* tc = tcase_create("ranks");
  tcase_set_timeout(tc, 40);
  tcase_add_test(tc, one_rank);
  tcase_add_test(tc, two_ranks);
  tcase_add_test(tc, three_ranks);
  tcase_add_test(tc, eight_ranks);
  tcase_add_test(tc, two_roots_five_ranks);
  tcase_add_test(tc, three_roots_eight_ranks);
  tcase_add_test(tc, three_roots_three_ranks);
  tcase_add_test(tc, late_starter);
  tcase_add_test(tc, hostile_clients_are_rejected);
  tcase_add_test(tc, comm_id_env_ipv4);
  tcase_add_test(tc, comm_id_env_hostname_explicit_root_start);
  tcase_add_test(tc, comm_id_env_bad_value);
  tcase_add_test(tc, ipv6_loopback);
  tcase_add_test(tc, missing_rank_then_abort);
  tcase_add_test(tc, dead_peer_timeout_and_abort);
  tcase_add_test(tc, watched_recv_of_dead_peer);
  tcase_add_test(tc, root_rejects_inconsistent_registrations);
  tcase_add_test(tc, root_judges_each_registration_alone);
  tcase_add_test(tc, root_times_out_and_exits);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
