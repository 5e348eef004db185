/* NET between real hosts, played by network namespaces: the fixture creates two namespaces joined
 * by a veth pair (10.213.7.1/24 and 10.213.7.2/24; lo up in each, nothing else), and every rank
 * enters one of them with setns(2) before its first NCCL call, so each "host" sees only its end of
 * the veth. Ranks in one namespace share a host identity (NCCL_HOSTID) and talk through SHM; ranks
 * in different namespaces can only reach each other across the veth, through NET (socket net,
 * driven by the proxy). Checks results of the collectives and of Send/Recv against independently
 * computed values, which transport each connection used, and that the data crossed the veth (its
 * byte counters, read inside the namespace).
 *
 * Creating namespaces needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and iproute2's `ip`. CI runs as
 * root with iproute2 installed by scripts/setup.sh; anywhere that is missing the tests FAIL with a
 * message saying so, rather than pass without having tested anything. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "collectives/collectives.h"
#include "fork_ranks.h"
#include "itest.h"

#define NETNS_COUNT 2
#define NETNS_RUN_DIR "/var/run/netns" /* where `ip netns add` pins a namespace */
#define NETNS_MAX_RANKS 8
#define NETNS_TIMEOUT_MS 60000

/* ---- The namespaces (made once per test case, in the runner process) ----------------------- */
typedef struct netns_env {
  bool ready;
  char why[512];                /* why not ready: printed by every test */
  char ns[NETNS_COUNT][48];     /* namespace names, with the runner's pid */
  char ifname[NETNS_COUNT][16]; /* the veth end inside each namespace */
  char addr[NETNS_COUNT][24];   /* its address */
} netns_env_t;

static netns_env_t netns_env;

/* Runs `ip <args>` (bounded by timeout(1)), its messages to stderr. Returns its exit status (127:
 * not found). */
static int netns_ip(const char* fmt, ...) {
  char args[400], cmd[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(args, sizeof(args), fmt, ap);
  va_end(ap);
  snprintf(cmd, sizeof(cmd), "timeout 20 ip %s 1>&2", args);
  fflush(stdout);
  fflush(stderr);
  int st = system(cmd);
  if (st == -1) return -1;
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static bool netns_exists(const char* name) {
  char path[128];
  struct stat st;
  snprintf(path, sizeof(path), NETNS_RUN_DIR "/%s", name);
  return stat(path, &st) == 0;
}

/* Deletes this process's namespaces (the veth goes with them). Only names carrying our pid are
 * touched, so parallel runs and anything else on the machine are left alone. */
static void netns_remove(void) {
  for (int k = 0; k < NETNS_COUNT; k++) {
    if (netns_env.ns[k][0] == '\0' || !netns_exists(netns_env.ns[k])) continue;
    if (netns_ip("netns del %s", netns_env.ns[k]) != 0)
      fprintf(stderr, "netns test: could not delete namespace %s\n", netns_env.ns[k]);
  }
}

static void netns_fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(netns_env.why, sizeof(netns_env.why), fmt, ap);
  va_end(ap);
  fprintf(stderr, "netns test setup: %s\n", netns_env.why);
}

static void netns_setup(void) {
  memset(&netns_env, 0, sizeof(netns_env));
  int pid = (int)getpid();
  for (int k = 0; k < NETNS_COUNT; k++) {
    snprintf(netns_env.ns[k], sizeof(netns_env.ns[k]), "baton-itest-%d-%d", pid, k);
    snprintf(netns_env.ifname[k], sizeof(netns_env.ifname[k]), "btn%dv%d", pid, k);
    snprintf(netns_env.addr[k], sizeof(netns_env.addr[k]), "10.213.7.%d", k + 1);
  }
  netns_remove(); /* leftovers of an earlier run that had our pid */
  if (geteuid() != 0) {
    netns_fail(
        "must run as root (creates network namespaces and a veth pair; euid is %d). CI "
        "runs the tests as root; run this suite with sudo",
        (int)geteuid());
    return;
  }
  for (int k = 0; k < NETNS_COUNT; k++) {
    int rc = netns_ip("netns add %s", netns_env.ns[k]);
    if (rc != 0) {
      netns_fail(
          "`ip netns add %s` failed (exit %d%s): needs root with CAP_SYS_ADMIN and "
          "iproute2 (scripts/setup.sh installs it)",
          netns_env.ns[k], rc, rc == 127 ? ": ip or timeout not found" : "");
      return;
    }
  }
  /* The veth is created inside the first namespace with its peer directly in the second: it never
   * appears in the namespace this test runs in. */
  if (netns_ip("-n %s link add %s type veth peer name %s netns %s", netns_env.ns[0],
               netns_env.ifname[0], netns_env.ifname[1], netns_env.ns[1]) != 0) {
    netns_fail("could not create the veth pair %s/%s between %s and %s", netns_env.ifname[0],
               netns_env.ifname[1], netns_env.ns[0], netns_env.ns[1]);
    return;
  }
  for (int k = 0; k < NETNS_COUNT; k++) {
    const char* ns = netns_env.ns[k];
    if (netns_ip("-n %s addr add %s/24 dev %s", ns, netns_env.addr[k], netns_env.ifname[k]) != 0 ||
        netns_ip("-n %s link set %s up", ns, netns_env.ifname[k]) != 0 ||
        netns_ip("-n %s link set lo up", ns) != 0) {
      netns_fail("could not configure %s in namespace %s", netns_env.ifname[k], ns);
      return;
    }
  }
  netns_env.ready = true;
}

static void netns_teardown(void) {
  netns_remove();
  for (int k = 0; k < NETNS_COUNT; k++)
    if (netns_exists(netns_env.ns[k]))
      fprintf(stderr, "netns test teardown: namespace %s is still there\n", netns_env.ns[k]);
}

/* ---- Ranks ---------------------------------------------------------------------------------- */
typedef struct netns_run netns_run_t;
typedef int (*netns_body_t)(ncclComm_t comm, int rank, const netns_run_t* run);

struct netns_run {
  int nranks;         /* ranks [k * nranks / NETNS_COUNT, ...) live in namespace k */
  int id_pipe[2];     /* rank 0 hands the unique id to the others */
  const char* env[4]; /* "NAME=VALUE" for every rank, NULL-terminated */
  netns_body_t body;
  size_t min_cross_bytes; /* bytes that must cross the veth each way during the body */
};

static int netns_of(const netns_run_t* run, int rank) {
  return rank * NETNS_COUNT / run->nranks;
}

/* Enters namespace k for this process and every thread it creates later. */
static int netns_enter(int k) {
  char path[128];
  snprintf(path, sizeof(path), NETNS_RUN_DIR "/%s", netns_env.ns[k]);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  IT_EXPECT(fd >= 0, "open %s: %s", path, strerror(errno));
  int rc = setns(fd, CLONE_NEWNET);
  int err = errno;
  close(fd);
  IT_EXPECT(rc == 0, "setns(%s, CLONE_NEWNET): %s", path, strerror(err));
  return 0;
}

/* Byte counters of ifname in this process's network namespace (/proc/self/net/dev is per
 * namespace; /sys/class/net would show the namespace sysfs was mounted in). */
static int netns_counters(const char* ifname, unsigned long long* rx, unsigned long long* tx) {
  FILE* f = fopen("/proc/self/net/dev", "re");
  IT_EXPECT(f != NULL, "open /proc/self/net/dev: %s", strerror(errno));
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    char* colon = strchr(line, ':');
    if (colon == NULL) continue;
    *colon = '\0';
    char* name = line + strspn(line, " ");
    if (strcmp(name, ifname) != 0) continue;
    unsigned long long v[9];
    found = sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) == 9;
    if (found) {
      *rx = v[0];
      *tx = v[8];
    }
  }
  fclose(f);
  IT_EXPECT(found, "no counters for %s in /proc/self/net/dev", ifname);
  return 0;
}

/* One id from rank 0, waiting at most timeout_ms. Writes of fewer than PIPE_BUF bytes to a pipe are
 * atomic, so one read takes a whole id. */
static int netns_read_id(int fd, ncclUniqueId* id, int timeout_ms) {
  _Static_assert(sizeof(*id) < PIPE_BUF, "unique id must fit one atomic pipe write");
  struct pollfd p = {.fd = fd, .events = POLLIN};
  int r;
  do {
    r = poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  IT_EXPECT(r == 1, "no unique id from rank 0 within %d ms", timeout_ms);
  IT_EXPECT(read(fd, id, sizeof(*id)) == (ssize_t)sizeof(*id), "short read of the unique id");
  return 0;
}

/* Every connection of this rank uses NET to the other namespace and SHM within its own; there is
 * at least one NET connection. The expectation comes from the rank layout, not the library. */
static int netns_check_transports(ncclComm_t comm, int rank, const netns_run_t* run) {
  struct coll_comm* cc = comm->coll;
  IT_EXPECT(cc != NULL, "no collective state");
  int nnet = 0, nconn = 0;
  for (int c = 0; c < cc->nchannels; c++) {
    for (int peer = 0; peer < run->nranks; peer++) {
      for (int dir = 0; dir < 2; dir++) {
        const char* name = comm_conn_transport(comm, c, peer, dir);
        if (name == NULL) continue;
        nconn++;
        bool cross = netns_of(run, peer) != netns_of(run, rank);
        IT_EXPECT(strcasecmp(name, cross ? "NET" : "SHM") == 0,
                  "rank %d channel %d %s rank %d: transport %s, expected %s", rank, c,
                  dir ? "to" : "from", peer, name, cross ? "NET" : "SHM");
        nnet += cross;
      }
    }
  }
  IT_EXPECT(nconn > 0, "rank %d: no connections at all", rank);
  IT_EXPECT(nnet > 0, "rank %d: no NET connection", rank);
  return 0;
}

static int netns_rank_main(ncclComm_t* comm, int rank, const netns_run_t* run) {
  int k = netns_of(run, rank);
  if (netns_enter(k) != 0) return 1;
  char ifspec[24], host[32];
  snprintf(ifspec, sizeof(ifspec), "=%s", netns_env.ifname[k]);
  snprintf(host, sizeof(host), "netns-host-%d", k);
  setenv("NCCL_SOCKET_IFNAME", ifspec, 1);
  setenv("NCCL_HOSTID", host, 1);
  for (int i = 0; i < 4 && run->env[i] != NULL; i++) {
    char name[64];
    const char* eq = strchr(run->env[i], '=');
    IT_EXPECT(eq != NULL && (size_t)(eq - run->env[i]) < sizeof(name), "bad env %s", run->env[i]);
    memcpy(name, run->env[i], (size_t)(eq - run->env[i]));
    name[eq - run->env[i]] = '\0';
    setenv(name, eq + 1, 1);
  }
  param_reload();
  log_reset();

  ncclUniqueId id;
  if (rank == 0) {
    IT_NCCL(ncclGetUniqueId(&id));
    for (int q = 1; q < run->nranks; q++)
      IT_EXPECT(write(run->id_pipe[1], &id, sizeof(id)) == (ssize_t)sizeof(id), "pipe write: %s",
                strerror(errno));
  } else {
    if (netns_read_id(run->id_pipe[0], &id, 20000) != 0) return 1;
  }
  unsigned long long rx0, tx0, rx1, tx1;
  if (netns_counters(netns_env.ifname[k], &rx0, &tx0) != 0) return 1;
  IT_NCCL(ncclCommInitRank(comm, run->nranks, id, rank));
  IT_EXPECT((*comm)->nnodes == NETNS_COUNT, "rank %d sees %d hosts, expected %d", rank,
            (*comm)->nnodes, NETNS_COUNT);
  if (run->body(*comm, rank, run) != 0) return 1;
  if (netns_counters(netns_env.ifname[k], &rx1, &tx1) != 0) return 1;
  IT_EXPECT(rx1 - rx0 >= run->min_cross_bytes && tx1 - tx0 >= run->min_cross_bytes,
            "rank %d: %s carried %llu bytes in, %llu out; at least %zu expected each way", rank,
            netns_env.ifname[k], rx1 - rx0, tx1 - tx0, run->min_cross_bytes);
  return netns_check_transports(*comm, rank, run);
}

static int netns_rank(int rank, int nranks, void* arg) {
  (void)nranks;
  netns_run_t* run = arg;
  ncclComm_t comm = NULL;
  int rc = netns_rank_main(&comm, rank, run);
  close(run->id_pipe[0]);
  close(run->id_pipe[1]);
  if (comm != NULL) {
    ncclResult_t res = rc == 0 ? ncclCommDestroy(comm) : ncclCommAbort(comm);
    if (rc == 0 && res != ncclSuccess) {
      fprintf(stderr, "rank %d: ncclCommDestroy returned %d\n", rank, (int)res);
      rc = 1;
    }
  }
  return rc;
}

/* Runs body on nranks ranks spread evenly over the namespaces; returns the number that failed. */
static int netns_run(netns_run_t* run) {
  ck_assert_msg(netns_env.ready, "network namespaces unavailable: %s", netns_env.why);
  ck_assert_int_le(run->nranks, NETNS_MAX_RANKS);
  ck_assert_int_eq(pipe(run->id_pipe), 0);
  int failed = fork_ranks_run(run->nranks, netns_rank, run, NETNS_TIMEOUT_MS);
  close(run->id_pipe[0]);
  close(run->id_pipe[1]);
  return failed;
}

/* ---- Bodies --------------------------------------------------------------------------------- */
#define MB_FLOATS ((size_t)(1u << 20) / 4) /* 1 MB of a 4-byte type */
#define ODD_COUNT ((size_t)100003)

static int netns_case(ncclComm_t comm, int func, ncclDataType_t t, size_t count, int root,
                      bool inplace, uint32_t seed) {
  itest_case_t c = {.func = func,
                    .dtype = t,
                    .op = IT_SUM,
                    .count = count,
                    .root = root,
                    .inplace = inplace,
                    .seed = seed};
  return itest_op_run(comm, &c);
}

/* Each rank exchanges bytes with its partner in the other namespace (rank + n/2), and sends to its
 * ring successor at the same time. */
static int netns_sendrecv(ncclComm_t comm, int me, int n, size_t bytes) {
  int partner = (me + n / 2) % n, next = (me + 1) % n, prev = (me + n - 1) % n;
  char* s = malloc(bytes);
  char* d1 = calloc(1, bytes);
  char* d2 = calloc(1, bytes);
  char* want = malloc(bytes);
  int rc = 1;
  if (s == NULL || d1 == NULL || d2 == NULL || want == NULL) {
    fprintf(stderr, "rank %d: out of memory\n", me);
    goto out;
  }
  itest_fill_bytes(s, bytes, me, 41, 0);
  if (ncclGroupStart() != ncclSuccess || ncclSend(s, bytes, ncclUint8, partner, comm, NULL) ||
      ncclRecv(d1, bytes, ncclUint8, partner, comm, NULL) ||
      ncclSend(s, bytes, ncclUint8, next, comm, NULL) ||
      ncclRecv(d2, bytes, ncclUint8, prev, comm, NULL) || ncclGroupEnd() != ncclSuccess) {
    fprintf(stderr, "rank %d: send/recv failed: %s\n", me, ncclGetLastError(comm));
    goto out;
  }
  itest_fill_bytes(want, bytes, partner, 41, 0);
  if (memcmp(want, d1, bytes) != 0) {
    fprintf(stderr, "rank %d: wrong data from partner %d\n", me, partner);
    goto out;
  }
  itest_fill_bytes(want, bytes, prev, 41, 0);
  if (memcmp(want, d2, bytes) != 0) {
    fprintf(stderr, "rank %d: wrong data from ring predecessor %d\n", me, prev);
    goto out;
  }
  rc = 0;
out:
  free(s);
  free(d1);
  free(d2);
  free(want);
  return rc;
}

/* The collectives the issue names, then Send/Recv. The 1 MB AllReduce alone has to move at least
 * 1 MB each way between the namespaces (every element of each side's result needs the other side's
 * contribution), and is followed by operations that need the other side to have finished it. */
static int netns_body_all(ncclComm_t comm, int rank, const netns_run_t* run) {
  int n = run->nranks;
  uint32_t seed = 7100;
  if (netns_case(comm, IT_ALLREDUCE, ncclFloat32, MB_FLOATS, 0, false, seed++)) return 1;
  if (netns_case(comm, IT_ALLREDUCE, ncclInt32, MB_FLOATS, 0, true, seed++)) return 1;
  if (netns_case(comm, IT_ALLREDUCE, ncclFloat32, ODD_COUNT, 0, true, seed++)) return 1;
  if (netns_case(comm, IT_ALLREDUCE, ncclInt32, ODD_COUNT, 0, false, seed++)) return 1;
  if (netns_case(comm, IT_ALLGATHER, ncclFloat32, ODD_COUNT / n, 0, false, seed++)) return 1;
  if (netns_case(comm, IT_ALLGATHER, ncclInt8, 4099, 0, true, seed++)) return 1;
  if (netns_case(comm, IT_BROADCAST, ncclFloat32, ODD_COUNT, n - 1, false, seed++)) return 1;
  if (netns_case(comm, IT_BROADCAST, ncclUint8, (1u << 20) + 1, 1, true, seed++)) return 1;
  if (netns_case(comm, IT_REDUCESCATTER, ncclInt32, 30001, 0, false, seed++)) return 1;
  if (netns_case(comm, IT_REDUCE, ncclFloat32, ODD_COUNT, n / 2, false, seed++)) return 1;
  if (netns_sendrecv(comm, rank, n, (1u << 20) + 3)) return 1;
  if (netns_case(comm, IT_ALLREDUCE, ncclInt32, 7, 0, false, seed++)) return 1;
  return 0;
}

/* One rank per namespace: every connection is NET. */
static int netns_body_pair(ncclComm_t comm, int rank, const netns_run_t* run) {
  (void)rank;
  (void)run;
  uint32_t seed = 7200;
  if (netns_case(comm, IT_ALLREDUCE, ncclFloat32, MB_FLOATS, 0, false, seed++)) return 1;
  if (netns_case(comm, IT_ALLREDUCE, ncclInt32, ODD_COUNT, 0, true, seed++)) return 1;
  if (netns_case(comm, IT_ALLGATHER, ncclInt32, 5001, 0, false, seed++)) return 1;
  if (netns_case(comm, IT_BROADCAST, ncclFloat32, ODD_COUNT, 1, false, seed++)) return 1;
  if (netns_case(comm, IT_ALLREDUCE, ncclInt32, 7, 0, false, seed++)) return 1;
  return 0;
}

/* ---- Tests ---------------------------------------------------------------------------------- */
START_TEST(test_netns_four_ranks) {
  netns_run_t run = {.nranks = 4, .body = netns_body_all, .min_cross_bytes = 1u << 20};
  ck_assert_int_eq(netns_run(&run), 0);
}
END_TEST

START_TEST(test_netns_two_ranks_tree_ll) {
  netns_run_t run = {.nranks = 2,
                     .body = netns_body_pair,
                     .min_cross_bytes = 1u << 20,
                     .env = {"NCCL_ALGO=allreduce:tree", "NCCL_PROTO=LL"}};
  ck_assert_int_eq(netns_run(&run), 0);
}
END_TEST

static Suite* netns_suite(void) {
  Suite* s = suite_create("coll_netns");
  TCase* tc = tcase_create("netns");
  /* Unchecked: runs in the runner process, so the namespaces are removed even when a test's
   * process dies. */
  tcase_add_unchecked_fixture(tc, netns_setup, netns_teardown);
  tcase_set_timeout(tc, NETNS_TIMEOUT_MS / 1000 + 30);
  tcase_add_test(tc, test_netns_four_ranks);
  tcase_add_test(tc, test_netns_two_ranks_tree_ll);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(netns_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
