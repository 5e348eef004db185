/* Watching a job from outside, on the host executor:
 *  - the timeline (NCCL_BATON_TRACE_FILE) of a 4-rank run, written on SIGUSR1 and at destroy, is
 *    valid JSON (parsed here), each track's events are in time order and nest, and it holds the
 *    calls that were made, their runs, init and destroy;
 *  - baton-ras (the installed client, run as a program) against a live 8-rank job on 2 fake hosts
 *    prints the right counts per rank and ranks per host, in JSON and in text; against the same
 *    job hung (rank 5 skips an AllReduce, rank 6 is stopped) it names rank 6 missing (not
 *    answering) and rank 5 behind;
 *  - an idle communicator uses no CPU: each process's CPU time over 2 s of idling. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "base/base.h"
#include "fork_ranks.h"
#include "itest.h"
#include "json_mini.h"

#define COUNT 4096

static int allreduce_n(ncclComm_t comm, float* buf, int n) {
  for (int i = 0; i < n; i++)
    IT_NCCL(ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL));
  return 0;
}

/* ---- Timeline -----------------------------------------------------------------------------------
 */
static char trace_env[160];
static char trace_tmpl[160];

/* Every event of a track (tid) in time order, each nested in or apart from the ones before. */
static int check_tracks(const json_t* evs, int pid, int* ncalls, int* nruns, int* ninit,
                        int* ndestroy) {
  typedef struct span {
    double t0, t1;
    int tid;
  } span_t;
  span_t* stack = calloc(evs->n, sizeof(*stack));
  IT_EXPECT(stack != NULL, "out of memory");
  int depth = 0, last_tid = INT_MIN;
  double last_ts = -1;
  uint64_t last_call = 0;
  for (size_t i = 0; i < evs->n; i++) {
    const json_t* e = evs->items[i];
    const json_t* ph = json_get(e, "ph");
    IT_EXPECT(ph && ph->type == JSON_STRING, "event %zu has no ph", i);
    if (strcmp(ph->string, "M") == 0) continue;
    IT_EXPECT(strcmp(ph->string, "X") == 0, "event %zu: ph %s", i, ph->string);
    const json_t* ts = json_get(e, "ts");
    const json_t* dur = json_get(e, "dur");
    const json_t* tid = json_get(e, "tid");
    const json_t* epid = json_get(e, "pid");
    const json_t* name = json_get(e, "name");
    const json_t* args = json_get(e, "args");
    IT_EXPECT(ts && dur && tid && epid && name && args && ts->type == JSON_NUMBER &&
                  dur->type == JSON_NUMBER && name->type == JSON_STRING,
              "event %zu lacks a field", i);
    IT_EXPECT((int)epid->number == pid, "event %zu of pid %g", i, epid->number);
    IT_EXPECT(dur->number >= 0 && ts->number > 0, "event %zu: ts %f dur %f", i, ts->number,
              dur->number);
    int t = (int)tid->number;
    double t0 = ts->number, t1 = ts->number + dur->number;
    if (t != last_tid) {
      depth = 0;
      last_tid = t;
      last_ts = -1;
    }
    IT_EXPECT(t0 >= last_ts, "track %d: event %zu at %f before the previous one at %f", t, i, t0,
              last_ts);
    last_ts = t0;
    /* Times are epoch microseconds: as doubles they hold 0.25 us steps, and ts + dur rounds
     * twice, so an event that starts as the previous one ends may seem to overlap it by 0.25. */
    const double slack = 0.5;
    while (depth > 0 && stack[depth - 1].t1 <= t0 + slack) depth--;
    IT_EXPECT(depth == 0 || t1 <= stack[depth - 1].t1 + slack,
              "track %d: event %zu [%f, %f] overlaps [%f, %f] without nesting", t, i, t0, t1,
              stack[depth - 1].t0, stack[depth - 1].t1);
    stack[depth++] = (span_t){t0, t1, t};
    const char* cat = json_get(e, "cat") ? json_get(e, "cat")->string : "";
    if (strcmp(name->string, "init") == 0) {
      (*ninit)++;
    } else if (strcmp(name->string, "destroy") == 0) {
      (*ndestroy)++;
    } else if (strcmp(name->string, "run") == 0) {
      (*nruns)++;
      IT_EXPECT(json_get(args, "calls") != NULL, "a run without its calls");
    } else if (strcmp(cat, "calls") == 0) {
      const json_t* call = json_get(args, "call");
      IT_EXPECT(call && call->type == JSON_NUMBER, "call event %zu has no call number", i);
      IT_EXPECT((uint64_t)call->number == last_call + 1, "call %g after call %llu", call->number,
                (unsigned long long)last_call);
      last_call = (uint64_t)call->number;
      (*ncalls)++;
    }
  }
  free(stack);
  return 0;
}

static int check_trace_file(const char* path, int expect_calls, bool final) {
  char* text = json_read_file(path);
  IT_EXPECT(text != NULL, "no trace file %s", path);
  size_t at = 0;
  json_t* doc = json_parse(text, &at);
  IT_EXPECT(doc != NULL, "%s is not JSON (error at byte %zu)", path, at);
  const json_t* evs = json_get(doc, "traceEvents");
  IT_EXPECT(evs && evs->type == JSON_ARRAY && evs->n > 0, "no traceEvents in %s", path);
  int ncalls = 0, nruns = 0, ninit = 0, ndestroy = 0;
  int rc = check_tracks(evs, (int)getpid(), &ncalls, &nruns, &ninit, &ndestroy);
  json_free(doc);
  free(text);
  if (rc) return rc;
  IT_EXPECT(ncalls == expect_calls, "%d call events, %d calls made", ncalls, expect_calls);
  IT_EXPECT(ninit == 1 && nruns >= 5, "init %d, runs %d", ninit, nruns);
  IT_EXPECT(ndestroy == (final ? 1 : 0), "destroy events: %d", ndestroy);
  return 0;
}

static int trace_body(itest_rank_t* r, void* arg) {
  (void)arg;
  ncclComm_t comm = r->comms[0];
  int n = r->nranks, me = r->rank;
  float* buf = calloc(2 * COUNT * (size_t)n, sizeof(float));
  IT_EXPECT(buf != NULL, "out of memory");
  if (allreduce_n(comm, buf, 3)) return 1;
  IT_NCCL(ncclBroadcast(buf, buf, COUNT, ncclFloat32, 1, comm, NULL));
  IT_NCCL(ncclGroupStart());
  IT_NCCL(ncclSend(buf, COUNT, ncclFloat32, (me + 1) % n, comm, NULL));
  IT_NCCL(ncclRecv(buf + COUNT, COUNT, ncclFloat32, (me + n - 1) % n, comm, NULL));
  IT_NCCL(ncclGroupEnd());
  IT_NCCL(ncclAllGather(buf, buf + COUNT, COUNT, ncclFloat32, comm, NULL));
  /* 7 calls so far. SIGUSR1 asks for the timeline now. */
  char path[200];
  snprintf(path, sizeof(path), trace_tmpl, (int)getpid());
  IT_EXPECT(raise(SIGUSR1) == 0, "raise");
  struct stat st;
  double t0 = itest_now();
  while (stat(path, &st) != 0 && itest_now() - t0 < 10) usleep(10 * 1000);
  IT_EXPECT(stat(path, &st) == 0, "no timeline %s after SIGUSR1", path);
  if (check_trace_file(path, 7, false)) return 1;
  IT_NCCL(ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL));
  IT_NCCL(ncclCommDestroy(comm));
  r->comms[0] = NULL;
  if (check_trace_file(path, 8, true)) return 1;
  unlink(path);
  free(buf);
  return 0;
}

START_TEST(test_trace_four_ranks) {
  snprintf(trace_tmpl, sizeof(trace_tmpl), "/tmp/baton-trace-%d-%%d.json", (int)getpid());
  snprintf(trace_env, sizeof(trace_env), "NCCL_BATON_TRACE_FILE=/tmp/baton-trace-%d-%%p.json",
           (int)getpid());
  itest_opts_t o = {.nranks = 4, .timeout_s = 60, .env = {trace_env}};
  ck_assert_int_eq(itest_run(&o, trace_body, NULL), 0);
}
END_TEST

/* ---- baton-ras ----------------------------------------------------------------------------------
 */
#define RAS_RANKS 8

typedef struct ras_shared {
  atomic_int phase;   /* ranks that finished the first part */
  atomic_int clients; /* 1: the live checks are done; 2: the hung checks are done */
  atomic_int pids[RAS_RANKS];
  int base_port;
  int failed;
} ras_shared_t;

/* Runs baton-ras with args; its standard output into out (malloc'ed). */
static int run_client(const char* args, char** out) {
  char exe[PATH_MAX], cmd[PATH_MAX + 128];
  const char* bin = getenv("BATON_BINARY_DIR");
  if (bin != NULL) {
    snprintf(exe, sizeof(exe), "%s/tools/baton-ras", bin);
  } else { /* run by hand from build/tests */
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    IT_EXPECT(n > 0, "readlink");
    self[n] = '\0';
    snprintf(exe, sizeof(exe), "%s/../tools/baton-ras", dirname(self));
  }
  snprintf(cmd, sizeof(cmd), "%s %s", exe, args);
  FILE* p = popen(cmd, "r");
  IT_EXPECT(p != NULL, "popen %s", cmd);
  size_t cap = 1 << 16, len = 0;
  char* buf = malloc(cap);
  IT_EXPECT(buf != NULL, "out of memory");
  size_t got;
  while ((got = fread(buf + len, 1, cap - 1 - len, p)) > 0) {
    len += got;
    if (len + 1 >= cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      IT_EXPECT(buf != NULL, "out of memory");
    }
  }
  buf[len] = '\0';
  int status = pclose(p);
  IT_EXPECT(status == 0, "%s exited with %d; output:\n%s", cmd, status, buf);
  *out = buf;
  return 0;
}

static const json_t* find_comm(const json_t* doc, int nranks) {
  const json_t* comms = json_get(doc, "communicators");
  if (comms == NULL || comms->type != JSON_ARRAY) return NULL;
  for (size_t i = 0; i < comms->n; i++) {
    const json_t* n = json_get(comms->items[i], "nranks");
    if (n != NULL && (int)n->number == nranks) return comms->items[i];
  }
  return NULL;
}

static bool json_array_is(const json_t* a, const int* want, size_t n) {
  if (a == NULL || a->type != JSON_ARRAY || a->n != n) return false;
  for (size_t i = 0; i < n; i++)
    if ((int)a->items[i]->number != want[i]) return false;
  return true;
}

/* The live job: 3 AllReduce, 2 Broadcast, 1 AllGather on every rank. */
static int check_live(const ras_shared_t* sh) {
  char args[64];
  char* out = NULL;
  snprintf(args, sizeof(args), "-p %d -f json -t 3", sh->base_port);
  if (run_client(args, &out)) return 1;
  json_t* doc = json_parse(out, NULL);
  IT_EXPECT(doc != NULL, "baton-ras -f json printed no JSON:\n%s", out);
  const json_t* procs = json_get(doc, "processes");
  IT_EXPECT(procs && procs->n == RAS_RANKS, "%zu processes", procs ? procs->n : 0);
  for (size_t i = 0; i < procs->n; i++)
    IT_EXPECT(strcmp(json_get(procs->items[i], "status")->string, "answering") == 0,
              "process %zu: %s", i, json_get(procs->items[i], "status")->string);
  const json_t* c = find_comm(doc, RAS_RANKS);
  IT_EXPECT(c != NULL, "no 8-rank communicator in:\n%s", out);
  IT_EXPECT((int)json_get(c, "found")->number == RAS_RANKS, "found %g",
            json_get(c, "found")->number);
  IT_EXPECT(json_array_is(json_get(c, "missing"), NULL, 0), "missing ranks");
  IT_EXPECT(json_array_is(json_get(c, "behind"), NULL, 0), "behind ranks");
  const json_t* ranks = json_get(c, "ranks");
  IT_EXPECT(ranks && ranks->n == RAS_RANKS, "ranks listed: %zu", ranks ? ranks->n : 0);
  for (size_t i = 0; i < ranks->n; i++) {
    const json_t* rk = ranks->items[i];
    int r = (int)json_get(rk, "rank")->number;
    const json_t* counts = json_get(rk, "counts");
    IT_EXPECT((int)json_get(counts, "AllReduce")->number == 3 &&
                  (int)json_get(counts, "Broadcast")->number == 2 &&
                  (int)json_get(counts, "AllGather")->number == 1 &&
                  (int)json_get(counts, "Send")->number == 0,
              "rank %d: wrong counts", r);
    IT_EXPECT(
        (int)json_get(rk, "collectives")->number == 6 && (int)json_get(rk, "done")->number == 6,
        "rank %d: collectives %g done %g", r, json_get(rk, "collectives")->number,
        json_get(rk, "done")->number);
    char host[32];
    snprintf(host, sizeof(host), "itest-host-%d", r * 2 / RAS_RANKS);
    IT_EXPECT(strcmp(json_get(rk, "host")->string, host) == 0, "rank %d on %s", r,
              json_get(rk, "host")->string);
    IT_EXPECT((int)json_get(rk, "pid")->number == atomic_load(&sh->pids[r]), "rank %d pid", r);
  }
  json_free(doc);
  free(out);
  /* The text form: ranks per host and the counts. */
  snprintf(args, sizeof(args), "-p %d", sh->base_port);
  if (run_client(args, &out)) return 1;
  IT_EXPECT(strstr(out, "8 ranks, 8 found, 0 missing") != NULL, "text:\n%s", out);
  IT_EXPECT(strstr(out, "host itest-host-0: 4 ranks: 0 1 2 3") != NULL, "text:\n%s", out);
  IT_EXPECT(strstr(out, "host itest-host-1: 4 ranks: 4 5 6 7") != NULL, "text:\n%s", out);
  IT_EXPECT(strstr(out, "AllReduce 3 AllGather 1") != NULL || strstr(out, "AllReduce 3") != NULL,
            "text:\n%s", out);
  free(out);
  return 0;
}

/* The hung job: rank 5 did not call the 7th collective, rank 6 is stopped. */
static int check_hung(const ras_shared_t* sh) {
  char args[64];
  char* out = NULL;
  snprintf(args, sizeof(args), "-p %d -t 2", sh->base_port);
  if (run_client(args, &out)) return 1;
  fprintf(stderr, "%s", out);
  IT_EXPECT(strstr(out, "MISSING rank 6") != NULL && strstr(out, "not answering") != NULL,
            "rank 6 not named missing:\n%s", out);
  IT_EXPECT(strstr(out, "BEHIND rank 5") != NULL &&
                strstr(out, "6 collectives called, 7 by others") != NULL,
            "rank 5 not named behind:\n%s", out);
  IT_EXPECT(strstr(out, "ncclAllReduce #7") != NULL, "the hung call is not shown:\n%s", out);
  free(out);
  snprintf(args, sizeof(args), "-p %d -t 2 -f json", sh->base_port);
  if (run_client(args, &out)) return 1;
  json_t* doc = json_parse(out, NULL);
  IT_EXPECT(doc != NULL, "no JSON:\n%s", out);
  const json_t* c = find_comm(doc, RAS_RANKS);
  IT_EXPECT(c != NULL, "no communicator:\n%s", out);
  static const int missing[] = {6}, behind[] = {5};
  IT_EXPECT(json_array_is(json_get(c, "missing"), missing, 1), "missing:\n%s", out);
  IT_EXPECT(json_array_is(json_get(c, "behind"), behind, 1), "behind:\n%s", out);
  json_free(doc);
  free(out);
  return 0;
}

typedef struct client_thread {
  ras_shared_t* sh;
  int rc;
} client_thread_t;

static void* hung_client_main(void* p) {
  client_thread_t* ct = p;
  usleep(300 * 1000); /* the others are inside the AllReduce by then */
  ct->rc = check_hung(ct->sh);
  atomic_store(&ct->sh->clients, 2);
  return NULL;
}

typedef struct aborter {
  ncclComm_t comm;
  ras_shared_t* sh;
} aborter_t;

static void* abort_when_done(void* p) {
  aborter_t* a = p;
  double t0 = itest_now();
  while (atomic_load(&a->sh->clients) < 2 && itest_now() - t0 < 60) usleep(10 * 1000);
  (void)ncclCommAbort(a->comm);
  return NULL;
}

static int ras_body(itest_rank_t* r, void* arg) {
  ras_shared_t* sh = arg;
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%d", sh->base_port + r->rank);
  setenv("NCCL_RAS_ADDR", addr, 1); /* rank 0 serves the client; none is stopped */
  param_reload();
  ncclComm_t comm;
  IT_NCCL(ncclCommInitRank(&comm, r->nranks, r->ids[0], r->rank));
  atomic_store(&sh->pids[r->rank], (int)getpid());
  float* buf = calloc((size_t)COUNT * RAS_RANKS, sizeof(float));
  IT_EXPECT(buf != NULL, "out of memory");
  if (allreduce_n(comm, buf, 3)) return 1;
  IT_NCCL(ncclBroadcast(buf, buf, COUNT, ncclFloat32, 2, comm, NULL));
  IT_NCCL(ncclBroadcast(buf, buf, COUNT, ncclFloat32, 5, comm, NULL));
  IT_NCCL(ncclAllGather(buf, buf, COUNT / RAS_RANKS, ncclFloat32, comm, NULL));
  atomic_fetch_add(&sh->phase, 1);
  double t0 = itest_now();
  while (atomic_load(&sh->phase) < RAS_RANKS && itest_now() - t0 < 30) usleep(1000);
  if (r->rank == 0) {
    int rc = check_live(sh);
    if (rc) sh->failed = 1;
    atomic_store(&sh->clients, 1);
    if (rc) return 1;
  }
  while (atomic_load(&sh->clients) < 1 && itest_now() - t0 < 60) usleep(1000);
  if (sh->failed) return 0;
  /* The hang. */
  if (r->rank == 6) {
    kill(getpid(), SIGSTOP);
    return 0; /* never reached: rank 0 kills it */
  }
  if (r->rank == 5) {
    while (atomic_load(&sh->clients) < 2 && itest_now() - t0 < 60) usleep(10 * 1000);
    IT_NCCL(ncclCommDestroy(comm));
    free(buf);
    return 0;
  }
  pthread_t t;
  client_thread_t ct = {.sh = sh};
  aborter_t ab = {.comm = comm, .sh = sh};
  if (r->rank == 0) pthread_create(&t, NULL, hung_client_main, &ct);
  pthread_t at;
  pthread_create(&at, NULL, abort_when_done, &ab);
  ncclResult_t res = ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL);
  pthread_join(at, NULL);
  IT_EXPECT(res != ncclSuccess, "the hung AllReduce returned success");
  if (r->rank == 0) {
    pthread_join(t, NULL);
    kill(atomic_load(&sh->pids[6]), SIGKILL);
    IT_EXPECT(ct.rc == 0, "the hung job's status was wrong");
  }
  free(buf);
  return 0;
}

START_TEST(test_ras_client_live_and_hung) {
  ras_shared_t* sh =
      mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  sh->base_port = fork_ranks_free_port();
  if (sh->base_port > 60000) sh->base_port = 41000 + sh->base_port % 1000;
  itest_opts_t o = {.nranks = RAS_RANKS,
                    .nhosts = 2,
                    .no_init = true,
                    .timeout_s = 90,
                    .env = {"NCCL_BATON_HANG_REPORT_SEC=0"},
                    .may_die = 1u << 6};
  ck_assert_int_eq(itest_run(&o, ras_body, sh), 0);
  ck_assert_int_eq(sh->failed, 0);
  munmap(sh, sizeof(*sh));
}
END_TEST

/* ---- Idle ---------------------------------------------------------------------------------------
 */
#define IDLE_S 2
#define IDLE_MAX_CPU_MS 20.0

static double cpu_ms(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec * 1e3 + ru.ru_utime.tv_usec / 1e3 + ru.ru_stime.tv_sec * 1e3 +
         ru.ru_stime.tv_usec / 1e3;
}

static int idle_body(itest_rank_t* r, void* arg) {
  (void)arg;
  float* buf = calloc(COUNT, sizeof(float));
  IT_EXPECT(buf != NULL, "out of memory");
  if (allreduce_n(r->comms[0], buf, 5)) return 1; /* SHM and NET connections, the proxy */
  usleep(200 * 1000);                             /* let spinning end */
  double c0 = cpu_ms();
  sleep(IDLE_S);
  double used = cpu_ms() - c0;
  fprintf(stderr, "rank %d: %.2f ms of CPU in %d s idle\n", r->rank, used, IDLE_S);
  IT_EXPECT(used < IDLE_MAX_CPU_MS, "rank %d used %.1f ms of CPU in %d s idle", r->rank, used,
            IDLE_S);
  free(buf);
  return 0;
}

START_TEST(test_idle_uses_no_cpu) {
  itest_opts_t o = {.nranks = 4, .nhosts = 2, .timeout_s = 60};
  ck_assert_int_eq(itest_run(&o, idle_body, NULL), 0);
}
END_TEST

int main(void) {
  Suite* s = suite_create("coll_observe");
  const struct {
    const char* name;
    const TTest* test;
  } cases[] = {{"trace", test_trace_four_ranks},
               {"ras", test_ras_client_live_and_hung},
               {"idle", test_idle_uses_no_cpu}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    TCase* tc = tcase_create(cases[i].name);
    tcase_set_timeout(tc, 150);
    tcase_add_test(tc, cases[i].test);
    suite_add_tcase(s, tc);
  }
  SRunner* sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
