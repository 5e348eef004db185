/* ncclPutSignal / ncclSignal / ncclWaitSignal between "hosts" (NCCL_HOSTID per process) over the
 * IB network (Soft-RoCE): puts into a peer on another host are RDMA writes into its registered
 * window, their signals RDMA writes of counters (src/core/rma_net.c).
 *
 * Every rank puts into every rank's window (itself and same-host peers included, which take the
 * bootstrap or a local copy): many small puts of varying sizes over 2 contexts x 3 signal
 * indices, puts of 0 bytes, bare signals, and one large put cut into several network writes. Each
 * rank then waits once for all of it, on descriptors naming every peer, and compares its whole
 * window byte for byte with the pattern computed here (untouched bytes must stay zero). In the
 * second round the last rank puts late: every wait must return after its puts began, so a count
 * taken too early would show. Windows differ in length per rank, so a put that fits the peer's
 * window but not this rank's goes through (the length comes from the peer's registration) and one
 * beyond the peer's is refused. The port counters of the RDMA devices must grow by at least what
 * went between hosts: the data did not travel in bootstrap (TCP) messages. A peer that exits
 * makes a wait on it fail within seconds. Without an RDMA device: SKIP. */
#include <check.h>
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "fork_ranks.h"
#include "itest.h"
#include "rdma_env.h"
#include "unit.h"

#define RMA_NCTX 2
#define RMA_NSIG 3
#define RMA_NSMALL 48
#define RMA_SMALL_MAX 3000
#define RMA_SMALL_AREA (RMA_NSMALL * RMA_SMALL_MAX)
#define RMA_ZERO_PUTS 5
#define RMA_BARE_SIGNALS 3
#define RMA_EXTRA 4096 /* rank r's window is r * RMA_EXTRA bytes longer than rank 0's */
#define RMA_LATE_MS 300

typedef struct rma_cfg {
  int nhosts;
  size_t large;      /* bytes of the large put */
  uint64_t* counted; /* shared: the counters' growth rank 0 measured, and what it expected */
} rma_cfg_t;

static size_t slot_bytes(const rma_cfg_t* c) {
  return RMA_SMALL_AREA + c->large;
}
static size_t window_bytes(const rma_cfg_t* c, int nranks, int rank) {
  return (size_t)nranks * slot_bytes(c) + (size_t)rank * RMA_EXTRA;
}
static int host_of(const rma_cfg_t* c, int rank, int nranks) {
  return rank * c->nhosts / nranks;
}

/* The byte rank `from` puts at offset o of its region in rank `to`'s window, round rd. */
static uint8_t pattern(int from, int to, size_t o, int rd) {
  uint64_t x = (uint64_t)o * 0x9e3779b97f4a7c15ull ^ ((uint64_t)from << 40) ^ ((uint64_t)to << 48) ^
               ((uint64_t)rd << 56);
  x ^= x >> 29;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 32;
  return (uint8_t)x;
}

/* Small put i: its length and where it starts in the region (the puts tile the start of it). */
static size_t small_len(int i) {
  return 1 + (size_t)(i * 977 + 13) % RMA_SMALL_MAX;
}
static size_t small_off(int i) {
  size_t o = 0;
  for (int k = 0; k < i; k++) o += small_len(k);
  return o;
}

/* The signals one sender raises at one receiver per round, per (ctx, sig). */
static void signals_per_index(int counts[RMA_NCTX][RMA_NSIG]) {
  memset(counts, 0, sizeof(int) * RMA_NCTX * RMA_NSIG);
  for (int i = 0; i < RMA_NSMALL; i++) counts[i % RMA_NCTX][i % RMA_NSIG]++;
  for (int i = 0; i < RMA_ZERO_PUTS; i++) counts[(i + 1) % RMA_NCTX][(i + 2) % RMA_NSIG]++;
  for (int i = 0; i < RMA_BARE_SIGNALS; i++) counts[i % RMA_NCTX][(i + 1) % RMA_NSIG]++;
  counts[1][2]++; /* the large put */
}

/* Sum of a port counter over every RDMA device and port (hw_counters, then counters); -1: none. */
static long long port_counter(const char* name) {
  DIR* d = opendir("/sys/class/infiniband");
  if (d == NULL) return -1;
  long long sum = -1;
  struct dirent* e;
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    for (int port = 1; port <= 2; port++) {
      static const char* const dirs[] = {"hw_counters", "counters"};
      for (int k = 0; k < 2; k++) {
        char path[512];
        snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/%s/%s", e->d_name, port,
                 dirs[k], name);
        FILE* f = fopen(path, "re");
        if (f == NULL) continue;
        long long v = 0;
        if (fscanf(f, "%lld", &v) == 1) sum = (sum < 0 ? 0 : sum) + v;
        fclose(f);
        break;
      }
    }
  }
  closedir(d);
  return sum;
}

static int expect_error(ncclResult_t res, ncclResult_t want, ncclComm_t comm, const char* what,
                        const char* word) {
  IT_EXPECT(res == want, "%s returned %s, expected %s", what, ncclGetErrorString(res),
            ncclGetErrorString(want));
  const char* last = ncclGetLastError(comm);
  IT_EXPECT(last != NULL && strstr(last, word) != NULL, "%s: last error \"%s\" lacks \"%s\"", what,
            last ? last : "(null)", word);
  return 0;
}

/* Bad input once the window exists (me's window win, a scratch source). */
static int bad_input(ncclComm_t comm, const rma_cfg_t* c, int me, int n, ncclWindow_t win,
                     uint8_t* src) {
  int other = -1; /* a peer on another host */
  for (int p = 0; p < n && other < 0; p++)
    if (host_of(c, p, n) != host_of(c, me, n)) other = p;
  IT_EXPECT(other >= 0, "no peer on another host");
  if (expect_error(
          ncclPutSignal(src, 4, ncclInt8, other, (ncclWindow_t)src, 0, 0, 0, 0, comm, NULL),
          ncclInvalidArgument, comm, "a pointer that is no window", "not a window"))
    return 1;
  if (expect_error(ncclPutSignal(src, 4, ncclInt8, n, win, 0, 0, 0, 0, comm, NULL),
                   ncclInvalidArgument, comm, "peer out of range", "peer"))
    return 1;
  size_t theirs = window_bytes(c, n, other);
  if (expect_error(ncclPutSignal(src, 16, ncclInt8, other, win, theirs - 8, 0, 0, 0, comm, NULL),
                   ncclInvalidArgument, comm, "16 bytes 8 before the end of the peer's window",
                   "do not fit"))
    return 1;
  if (expect_error(ncclPutSignal(src, 1, ncclInt8, other, win, theirs, 0, 0, 0, comm, NULL),
                   ncclInvalidArgument, comm, "at the end of the peer's window", "do not fit"))
    return 1;
  /* A window registered and deregistered again is no window any more (registration is
   * collective: every rank does it here). */
  void* spare = calloc(1, 8192);
  IT_EXPECT(spare != NULL, "no memory");
  ncclWindow_t gone = NULL;
  IT_NCCL(ncclCommWindowRegister(comm, spare, 8192, &gone, NCCL_WIN_DEFAULT));
  IT_NCCL(ncclCommWindowDeregister(comm, gone));
  if (expect_error(ncclPutSignal(src, 4, ncclInt8, other, gone, 0, 0, 0, 0, comm, NULL),
                   ncclInvalidArgument, comm, "a deregistered window", "not a window"))
    return 1;
  free(spare);
  return 0;
}

/* Rank 0 puts 16 bytes into rank 1's window past the end of its own (rank 1's is longer): the
 * length known from rank 1's registration lets it through. */
static int longer_peer(ncclComm_t comm, const rma_cfg_t* c, int me, int n, ncclWindow_t win,
                       uint8_t* buf, uint8_t* src) {
  if (host_of(c, 0, n) == host_of(c, 1, n)) return 0; /* bootstrap: own length stands in */
  size_t at = window_bytes(c, n, 0);
  if (me == 0) {
    for (int i = 0; i < 16; i++) src[i] = pattern(0, 1, at + (size_t)i, 9);
    IT_NCCL(ncclPutSignal(src, 16, ncclUint8, 1, win, at, 0, 0, 0, comm, NULL));
  } else if (me == 1) {
    ncclWaitSignalDesc_t d = {.opCnt = 1, .peer = 0, .sigIdx = 0, .ctx = 0};
    IT_NCCL(ncclWaitSignal(1, &d, comm, NULL));
    for (int i = 0; i < 16; i++)
      IT_EXPECT(buf[at + (size_t)i] == pattern(0, 1, at + (size_t)i, 9),
                "byte %zu past rank 0's window length: %u", at + (size_t)i, buf[at + (size_t)i]);
  }
  return 0;
}

/* What one sender puts into one receiver in a round (its region of the receiver's window). */
static int put_all(ncclComm_t comm, const rma_cfg_t* c, int me, int to, int n, int rd,
                   ncclWindow_t win, uint8_t* src) {
  size_t base = (size_t)me * slot_bytes(c), slot = slot_bytes(c);
  for (size_t o = 0; o < slot; o++) src[o] = pattern(me, to, o, rd);
  for (int i = 0; i < RMA_NSMALL; i++) {
    size_t o = small_off(i);
    IT_NCCL(ncclPutSignal(src + o, small_len(i), ncclUint8, to, win, base + o, i % RMA_NSIG,
                          i % RMA_NCTX, 0, comm, NULL));
    if (i < RMA_ZERO_PUTS) /* 0 bytes: a signal and nothing else */
      IT_NCCL(ncclPutSignal(src, 0, ncclFloat32, to, win, base, (i + 2) % RMA_NSIG,
                            (i + 1) % RMA_NCTX, 0, comm, NULL));
    if (i < RMA_BARE_SIGNALS)
      IT_NCCL(ncclSignal(to, (i + 1) % RMA_NSIG, i % RMA_NCTX, 0, comm, NULL));
  }
  /* The large put, as 32-bit words (count in elements). */
  IT_NCCL(ncclPutSignal(src + RMA_SMALL_AREA, c->large / 4, ncclInt32, to, win,
                        base + RMA_SMALL_AREA, 2, 1, 0, comm, NULL));
  (void)n;
  return 0;
}

static int check_window(const rma_cfg_t* c, const uint8_t* buf, int me, int n, int rd) {
  size_t slot = slot_bytes(c), used = small_off(RMA_NSMALL);
  for (int from = 0; from < n; from++) {
    const uint8_t* region = buf + (size_t)from * slot;
    for (size_t o = 0; o < slot; o++) {
      uint8_t want = (o < used || o >= RMA_SMALL_AREA) ? pattern(from, me, o, rd) : 0;
      IT_EXPECT(region[o] == want, "round %d: byte %zu of rank %d's region holds %u, expected %u",
                rd, o, from, region[o], want);
    }
  }
  for (size_t o = (size_t)n * slot; o < window_bytes(c, n, me); o++)
    IT_EXPECT(buf[o] == 0, "round %d: byte %zu past the regions was written", rd, o);
  return 0;
}

static int body(itest_rank_t* r, void* arg) {
  const rma_cfg_t* c = arg;
  const int n = r->nranks, me = r->rank;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.numRmaCtx = RMA_NCTX;
  cfg.numRmaSig = RMA_NSIG;
  ncclComm_t comm = NULL;
  IT_NCCL(ncclCommInitRankConfig(&comm, n, r->ids[0], me, &cfg));
  r->comms[0] = comm;
  const size_t wbytes = window_bytes(c, n, me), slot = slot_bytes(c);
  uint8_t* buf = calloc(1, wbytes);
  uint8_t* src = malloc(slot);
  float dummy = 1.0f;
  IT_EXPECT(buf != NULL && src != NULL, "no memory");

  /* Before any window, a peer on another host is not connected yet: refused, no hang. */
  int other = -1;
  for (int p = 0; p < n && other < 0; p++)
    if (host_of(c, p, n) != host_of(c, me, n)) other = p;
  if (expect_error(ncclSignal(other, 0, 0, 0, comm, NULL), ncclInvalidUsage, comm,
                   "a signal before any window", "register a window first"))
    return 1;
  ncclWaitSignalDesc_t early = {.opCnt = 1, .peer = other, .sigIdx = 0, .ctx = 0};
  if (expect_error(ncclWaitSignal(1, &early, comm, NULL), ncclInvalidUsage, comm,
                   "a wait before any window", "register a window first"))
    return 1;

  ncclWindow_t win = NULL;
  IT_NCCL(ncclCommWindowRegister(comm, buf, wbytes, &win, NCCL_WIN_DEFAULT));
  if (bad_input(comm, c, me, n, win, src)) return 1;
  if (longer_peer(comm, c, me, n, win, buf, src)) return 1;

  /* What goes between hosts per round, over all ranks: the counters must grow by that much. */
  uint64_t cross = 0;
  for (int s = 0; s < n; s++)
    for (int d = 0; d < n; d++)
      if (host_of(c, s, n) != host_of(c, d, n)) cross += small_off(RMA_NSMALL) + c->large;
  int counts[RMA_NCTX][RMA_NSIG];
  signals_per_index(counts);
  ncclWaitSignalDesc_t* descs = calloc((size_t)n * RMA_NCTX * RMA_NSIG, sizeof(*descs));
  IT_EXPECT(descs != NULL, "no memory");
  long long pkts0 = 0, data0 = 0;
  for (int rd = 0; rd < 2; rd++) {
    memset(buf, 0, wbytes);
    IT_NCCL(ncclAllReduce(&dummy, &dummy, 1, ncclFloat32, ncclSum, comm, NULL)); /* all clear */
    if (rd == 0 && me == 0) {
      pkts0 = port_counter("rcvd_pkts");
      data0 = port_counter("port_rcv_data");
    }
    double put_start = 0;
    if (rd == 1 && me == n - 1) {
      usleep(RMA_LATE_MS * 1000);
      put_start = itest_now();
    }
    for (int k = 0; k < n; k++) /* every rank starts with a different peer */
      if (put_all(comm, c, me, (me + k) % n, n, rd, win, src)) return 1;
    int nd = 0;
    for (int p = 0; p < n; p++)
      for (int x = 0; x < RMA_NCTX; x++)
        for (int s = 0; s < RMA_NSIG; s++)
          descs[nd++] =
              (ncclWaitSignalDesc_t){.opCnt = counts[x][s], .peer = p, .sigIdx = s, .ctx = x};
    IT_NCCL(ncclWaitSignal(nd, descs, comm, NULL));
    double returned = itest_now();
    if (check_window(c, buf, me, n, rd)) return 1;
    double latest = put_start;
    IT_NCCL(ncclAllReduce(&put_start, &latest, 1, ncclFloat64, ncclMax, comm, NULL));
    IT_EXPECT(rd == 0 || returned > latest,
              "round %d: the wait returned at %.6f, before the late rank began to put at %.6f", rd,
              returned, latest);
  }
  if (me == 0) {
    long long pkts = port_counter("rcvd_pkts"), data = port_counter("port_rcv_data");
    c->counted[0] = pkts >= 0 ? (uint64_t)(pkts - pkts0) : 0;
    c->counted[1] = data >= 0 ? (uint64_t)(data - data0) : 0;
    c->counted[2] = 2 * cross;
    fprintf(stderr,
            "%d ranks on %d hosts: %llu bytes put between hosts; RDMA devices received %lld "
            "packets and %lld x 4 bytes meanwhile\n",
            n, c->nhosts, (unsigned long long)(2 * cross), pkts >= 0 ? pkts - pkts0 : -1,
            data >= 0 ? data - data0 : -1);
  }
  IT_NCCL(ncclAllReduce(&dummy, &dummy, 1, ncclFloat32, ncclSum, comm, NULL)); /* done with it */
  IT_NCCL(ncclCommWindowDeregister(comm, win));
  free(descs);
  free(buf);
  free(src);
  return 0;
}

static void run(int nranks, int nhosts, size_t large) {
  uint64_t* counted = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(counted, MAP_FAILED);
  memset(counted, 0, 4096);
  char logdir[] = "/tmp/baton-ibrma-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(logdir));
  char logfile[128];
  snprintf(logfile, sizeof(logfile), "NCCL_DEBUG_FILE=%s/rank.%%p", logdir);
  rma_cfg_t cfg = {.nhosts = nhosts, .large = large, .counted = counted};
  itest_opts_t o = {
      .nranks = nranks,
      .nhosts = nhosts,
      .no_init = true,
      .timeout_s = 600,
      .env = {"NCCL_NET=IB", "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=INIT,NET,REG", logfile}};
  double t0 = itest_now();
  ck_assert_int_eq(itest_run(&o, body, &cfg), 0);
  fprintf(stderr, "%d ranks on %d hosts: %.1f s\n", nranks, nhosts, itest_now() - t0);
  /* The data went through the RDMA devices: a received packet carries at most 4096 bytes (the
   * largest RoCE MTU), and port_rcv_data counts 4-byte words where the device keeps it. */
  ck_assert_msg(counted[0] * 4096 >= counted[2] || counted[1] * 4 >= counted[2],
                "RDMA devices received %llu packets, %llu x 4 bytes: less than the %llu bytes put "
                "between hosts",
                (unsigned long long)counted[0], (unsigned long long)counted[1],
                (unsigned long long)counted[2]);
  /* Every rank with a peer on another host said it writes one-sidedly over NET/IB. */
  const char* line[] = {"RMA: rank", "writes one-sidedly over NET/IB", NULL};
  ck_assert_int_eq(rdma_log_count(logdir, line), nranks);
  char cmd[128];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", logdir);
  ck_assert_int_eq(system(cmd), 0);
  munmap(counted, 4096);
}

/* Rank 1 exits without a word once the window exists: rank 0's wait for its signal and a put to
 * it fail within seconds, naming it, instead of waiting forever. */
static int body_gone(itest_rank_t* r, void* arg) {
  ncclComm_t comm = r->comms[0];
  char* buf = calloc(1, 65536);
  IT_EXPECT(buf != NULL, "no memory");
  ncclWindow_t win = NULL;
  IT_NCCL(ncclCommWindowRegister(comm, buf, 65536, &win, NCCL_WIN_DEFAULT));
  if (r->rank == 1) _exit(0);
  ncclWaitSignalDesc_t d = {.opCnt = 1, .peer = 1, .sigIdx = 0, .ctx = 0};
  double t0 = itest_now();
  ncclResult_t res = ncclWaitSignal(1, &d, comm, NULL);
  double waited = itest_now() - t0;
  IT_EXPECT(res == ncclRemoteError, "the wait on a rank that exited returned %s",
            ncclGetErrorString(res));
  IT_EXPECT(waited < 30, "the wait took %.1f s to notice", waited);
  const char* last = ncclGetLastError(comm);
  IT_EXPECT(last != NULL && strstr(last, "rank 1") != NULL, "last error \"%s\" names no rank 1",
            last ? last : "(null)");
  res = ncclPutSignal(buf, 64, ncclInt8, 1, win, 0, 0, 0, 0, comm, NULL);
  IT_EXPECT(res != ncclSuccess, "a put to a rank that exited succeeded");
  fprintf(stderr, "rank 0: the wait failed after %.2f s: %s\n", waited, last);
  IT_NCCL(ncclCommAbort(comm));
  r->comms[0] = NULL;
  free(buf);
  (void)arg;
  return 0;
}

START_TEST(peer_gone) {
  itest_opts_t o = {
      .nranks = 2, .nhosts = 2, .timeout_s = 120, .may_die = 1u << 1, .env = {"NCCL_NET=IB"}};
  ck_assert_int_eq(itest_run(&o, body_gone, NULL), 0);
}
END_TEST

START_TEST(two_hosts) {
  run(2, 2, (9u << 20) + 1236); /* the large put: 3 network writes */
}
END_TEST

START_TEST(three_hosts) {
  run(3, 3, (5u << 20) + 4);
}
END_TEST

START_TEST(four_ranks_two_hosts) { /* same-host pairs take the bootstrap in the same calls */
  run(4, 2, (1u << 20) + 8);
}
END_TEST

int main(void) {
  rdma_require_device();
  Suite* s = suite_create("ib_rma");
  TCase* tc = tcase_create("ib_rma");
  tcase_set_timeout(tc, 900);
  tcase_add_test(tc, two_hosts);
  tcase_add_test(tc, three_hosts);
  tcase_add_test(tc, four_ranks_two_hosts);
  tcase_add_test(tc, peer_gone);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
