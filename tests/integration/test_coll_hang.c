/* Hang reports on the host executor (NCCL_BATON_HANG_REPORT_SEC=2): after one good AllReduce, the
 * second one cannot complete because
 *   - skip:  rank 3 never calls it,
 *   - quiet: the same with no NCCL_DEBUG (nor any NCCL variable but the report's delay and the
 *            loopback interface): the report must reach stderr, and not stdout,
 *   - stop:  rank 3 is stopped (SIGSTOP) before calling it,
 *   - die:   rank 3 is killed (SIGKILL),
 *   - stall: rank 2's proxy thread stops moving (2 hosts: its NET connections stall) while every
 *            rank is inside the call.
 * Every waiting rank must WARN one report naming the call (ncclAllReduce #2) and the culprit within
 * HANG_REPORT_SEC + 10 s, ncclCommGetAsyncError must not report an error meanwhile (ncclInProgress
 * for a nonblocking communicator), and a watchdog thread's ncclCommAbort must end the wait within
 * ABORT_WITHIN_S. A dead rank instead makes every survivor's call fail within DEAD_WITHIN_S with
 * an error naming it, also on ranks that do not wait on it directly. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "fork_ranks.h"
#include "itest.h"

#define NRANKS 4
#define VICTIM 3
#define REPORT_SEC 2
#define REPORT_WITHIN_S (REPORT_SEC + 10.0)
#define ABORT_WITHIN_S 1.0
#define DEAD_WITHIN_S 5.0
#define COUNT (1 << 16)

typedef enum { HANG_SKIP = 0, HANG_STOP, HANG_DIE, HANG_STALL, HANG_QUIET } hang_mode_t;

typedef struct hang_shared {
  atomic_int pids[NRANKS];
  atomic_int first_done; /* ranks past the first AllReduce */
  atomic_int finished;   /* waiting ranks that have aborted (or failed) */
  atomic_int failed;     /* die: survivors whose call has failed */
  atomic_int reported;   /* waiting ranks whose watchdog is done looking for the report */
  atomic_int stall_release;
  atomic_int stall_calling; /* stall: rank 2's proxy has stalled and rank 2 is about to call */
  double report_s[NRANKS];  /* when each rank saw its report (-1: never) */
  double abort_s[NRANKS];
} hang_shared_t;

typedef struct hang_cfg {
  hang_mode_t mode;
  hang_shared_t* sh;
  char log_tmpl[128]; /* NCCL_DEBUG_FILE with %d for the pid (quiet: the rank's stderr) */
  char out_tmpl[128]; /* quiet: the rank's stdout, %d for the pid */
} hang_cfg_t;

/* quiet: this process's stdout and stderr go to files from now on. */
static int redirect_to(int fd, const char* tmpl) {
  char path[160];
  snprintf(path, sizeof(path), tmpl, (int)getpid());
  int f = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f < 0) return -1;
  fflush(fd == STDOUT_FILENO ? stdout : stderr);
  int rc = dup2(f, fd);
  close(f);
  return rc < 0 ? -1 : 0;
}

static char env_file[160];
static const char* const env_report = "NCCL_BATON_HANG_REPORT_SEC=2";

/* ---- Stalling a thread (the stall case) --------------------------------------------------------
 */
static atomic_int* stall_flag;
static atomic_int stall_entered;

static void stall_handler(int sig) {
  (void)sig;
  atomic_store(&stall_entered, 1);
  while (atomic_load(stall_flag) == 0) usleep(10 * 1000);
}

/* The tid of this process's thread named name, or -1. */
static int thread_named(const char* name) {
  DIR* d = opendir("/proc/self/task");
  if (d == NULL) return -1;
  struct dirent* e;
  int found = -1;
  while (found < 0 && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    char path[300], comm[32] = "";
    snprintf(path, sizeof(path), "/proc/self/task/%s/comm", e->d_name);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue;
    if (fgets(comm, sizeof(comm), f) != NULL && strncmp(comm, name, strlen(name)) == 0)
      found = atoi(e->d_name);
    fclose(f);
  }
  closedir(d);
  return found;
}

/* ---- The watchdog: waits for the report, checks the async error, aborts ---------------------- */
typedef struct watchdog {
  ncclComm_t comm;
  const hang_cfg_t* cfg;
  int rank;
  bool nonblocking; /* the async error must stay ncclInProgress (else ncclSuccess) */
  double t0;
  const char* needles[6];
  bool saw_report, async_ok;
  double report_s, abort_s;
  ncclResult_t abort_res;
} watchdog_t;

static void* watchdog_main(void* p) {
  watchdog_t* w = p;
  char path[160];
  snprintf(path, sizeof(path), w->cfg->log_tmpl, (int)getpid());
  w->async_ok = true;
  while (itest_now() - w->t0 < REPORT_WITHIN_S + 5) {
    ncclResult_t st = ncclSuccess;
    if (ncclCommGetAsyncError(w->comm, &st) != ncclSuccess ||
        (st != (w->nonblocking ? ncclInProgress : ncclSuccess)))
      w->async_ok = false;
    if (fork_ranks_file_has_line(path, w->needles)) {
      w->saw_report = true;
      w->report_s = itest_now() - w->t0;
      break;
    }
    usleep(100 * 1000);
  }
  /* Every waiting rank reports before any aborts: a rank that aborts and exits early would be a
   * dead peer for the others. */
  hang_shared_t* sh = w->cfg->sh;
  int waiters = w->cfg->mode == HANG_STALL ? NRANKS : NRANKS - 1;
  atomic_fetch_add(&sh->reported, 1);
  while (atomic_load(&sh->reported) < waiters && itest_now() - w->t0 < REPORT_WITHIN_S + 5)
    usleep(10 * 1000);
  if (w->cfg->mode == HANG_STALL) atomic_store(&sh->stall_release, 1);
  double a0 = itest_now();
  w->abort_res = ncclCommAbort(w->comm);
  w->abort_s = itest_now() - a0;
  return NULL;
}

/* What a rank wrote into path (the lines holding needle; NULL: all), for the test's log. */
static void print_file(int rank, const char* what, const char* path, const char* needle) {
  FILE* f = fopen(path, "r");
  if (f == NULL) {
    fprintf(stderr, "--- rank %d: no %s at %s\n", rank, what, path);
    return;
  }
  fprintf(stderr, "--- rank %d's %s:\n", rank, what);
  char line[4096];
  while (fgets(line, sizeof(line), f) != NULL)
    if (needle == NULL || strstr(line, needle) != NULL) fputs(line, stderr);
  fclose(f);
}

static int hang_body(itest_rank_t* r, void* arg) {
  const hang_cfg_t* cfg = arg;
  hang_shared_t* sh = cfg->sh;
  ncclComm_t comm = r->comms[0];
  float* buf = malloc(COUNT * sizeof(float));
  IT_EXPECT(buf != NULL, "out of memory");
  for (int i = 0; i < COUNT; i++) buf[i] = 1.0f;
  atomic_store(&sh->pids[r->rank], (int)getpid());
  if (cfg->mode == HANG_QUIET) {
    IT_EXPECT(getenv("NCCL_DEBUG") == NULL && getenv("NCCL_DEBUG_FILE") == NULL,
              "quiet: NCCL_DEBUG or NCCL_DEBUG_FILE is set");
    IT_EXPECT(redirect_to(STDOUT_FILENO, cfg->out_tmpl) == 0, "cannot redirect stdout");
    IT_EXPECT(redirect_to(STDERR_FILENO, cfg->log_tmpl) == 0, "cannot redirect stderr");
  }
  ncclResult_t first = ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL);
  IT_EXPECT(first == ncclSuccess || (first == ncclInProgress && r->opts->nonblocking),
            "first AllReduce returned %d", (int)first);
  if (r->opts->nonblocking) {
    ncclResult_t st = ncclInProgress;
    double d = itest_now() + 30;
    while (st == ncclInProgress && itest_now() < d) IT_NCCL(ncclCommGetAsyncError(comm, &st));
    IT_EXPECT(st == ncclSuccess, "first AllReduce: %d", (int)st);
  }
  IT_EXPECT(buf[0] == NRANKS, "first AllReduce gave %g", buf[0]);
  atomic_fetch_add(&sh->first_done, 1);
  double d0 = itest_now();
  while (atomic_load(&sh->first_done) < NRANKS && itest_now() - d0 < 30) usleep(1000);

  if (r->rank == VICTIM && cfg->mode != HANG_STALL) {
    if (cfg->mode == HANG_STOP) kill(getpid(), SIGSTOP);
    if (cfg->mode == HANG_DIE) kill(getpid(), SIGKILL);
    /* skip: wait (idle) until the others are done */
    while (atomic_load(&sh->finished) < NRANKS - 1 && itest_now() - d0 < 60) usleep(10 * 1000);
    free(buf);
    return 0;
  }
  if (cfg->mode == HANG_STALL && r->rank == 2) {
    stall_flag = &sh->stall_release;
    signal(SIGUSR2, stall_handler);
    int tid = thread_named("NCCL Proxy");
    IT_EXPECT(tid > 0, "rank 2 has no proxy thread");
    IT_EXPECT(syscall(SYS_tgkill, getpid(), tid, SIGUSR2) == 0, "tgkill failed");
    /* The proxy stalls before the operation starts (on a loaded machine the signal could land
     * after the operation's traffic had already gone through, and the call completed). */
    double s0 = itest_now();
    while (!atomic_load(&stall_entered) && itest_now() - s0 < 10) usleep(1000);
    IT_EXPECT(atomic_load(&stall_entered), "rank 2's proxy thread did not stall");
  }

  watchdog_t w = {.comm = comm,
                  .cfg = cfg,
                  .rank = r->rank,
                  .nonblocking = r->opts->nonblocking,
                  .t0 = itest_now()};
  char who[96];
  int vpid = atomic_load(&sh->pids[VICTIM]);
  int n = 0;
  w.needles[n++] = "Hang report";
  w.needles[n++] = "rank";
  w.needles[n++] = "ncclAllReduce #2 (collective #2";
  if (cfg->mode == HANG_SKIP || cfg->mode == HANG_QUIET) {
    snprintf(who, sizeof(who), "Not called yet by rank %d (pid %d", VICTIM, vpid);
    w.needles[n++] = who;
  } else if (cfg->mode == HANG_STOP) {
    snprintf(who, sizeof(who), "Not answering: rank %d (pid %d", VICTIM, vpid);
    w.needles[n++] = who;
  } else if (cfg->mode == HANG_STALL) {
    w.needles[n++] = "Every rank is inside it";
  }
  w.needles[n] = NULL;

  ncclResult_t res;
  if (cfg->mode == HANG_DIE) {
    double t0 = itest_now();
    res = ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL);
    ncclResult_t st = res;
    while (itest_now() - t0 < DEAD_WITHIN_S + 10 && (st == ncclSuccess || st == ncclInProgress)) {
      IT_NCCL(ncclCommGetAsyncError(comm, &st));
      if (st == ncclSuccess && res == ncclSuccess) break;
      usleep(1000);
    }
    double failed_s = itest_now() - t0;
    const char* msg = ncclGetLastError(comm);
    char want[32];
    snprintf(want, sizeof(want), "rank %d", VICTIM);
    fprintf(stderr, "rank %d: failed after %.2f s (result %d, async %d): %s\n", r->rank, failed_s,
            (int)res, (int)st, msg);
    IT_EXPECT(res != ncclSuccess || (st != ncclSuccess && st != ncclInProgress),
              "rank %d: the call with a dead rank did not fail", r->rank);
    IT_EXPECT(failed_s < DEAD_WITHIN_S, "rank %d: failed after %.1f s", r->rank, failed_s);
    IT_EXPECT(strcasestr(msg, want) != NULL, "rank %d: the error does not name rank %d: %s",
              r->rank, VICTIM, msg);
    /* Survivors leave together: one that exits early would be a second dead rank. */
    atomic_fetch_add(&sh->failed, 1);
    while (atomic_load(&sh->failed) < NRANKS - 1 && itest_now() - t0 < 20) usleep(1000);
    double a0 = itest_now();
    IT_NCCL(ncclCommAbort(comm));
    r->comms[0] = NULL;
    sh->abort_s[r->rank] = itest_now() - a0;
    IT_EXPECT(sh->abort_s[r->rank] < ABORT_WITHIN_S, "abort took %.2f s", sh->abort_s[r->rank]);
    atomic_fetch_add(&sh->finished, 1);
    free(buf);
    return 0;
  }

  /* stall: the others call once rank 2 is about to. A rank whose report came before rank 2 had
   * called (its proxy's stall took a while on a loaded machine) rightly said "Not called yet by
   * rank 2", once, and no report follows for the same call. */
  if (cfg->mode == HANG_STALL && r->rank == 2) atomic_store(&sh->stall_calling, 1);
  if (cfg->mode == HANG_STALL && r->rank != 2) {
    double c0 = itest_now();
    while (!atomic_load(&sh->stall_calling) && itest_now() - c0 < 30) usleep(1000);
    IT_EXPECT(atomic_load(&sh->stall_calling), "rank %d: rank 2 never got to its call", r->rank);
    w.t0 = itest_now();
  }
  pthread_t t;
  if (!r->opts->nonblocking) IT_EXPECT(pthread_create(&t, NULL, watchdog_main, &w) == 0, "thread");
  res = ncclAllReduce(buf, buf, COUNT, ncclFloat32, ncclSum, comm, NULL);
  if (r->opts->nonblocking) {
    IT_EXPECT(res == ncclInProgress, "nonblocking AllReduce returned %d", (int)res);
    watchdog_main(&w); /* the same checks on this thread: async must stay ncclInProgress */
  } else {
    pthread_join(t, NULL); /* before any check returns: w lives on this stack */
    /* stall: the watchdogs release rank 2's proxy just before they abort, so the steps rank 1 had
     * already sent may still land and the call complete before this rank's abort takes hold: a
     * success is then right, with the right sums. Elsewhere a rank never calls, so it cannot. */
    bool completed = res == ncclSuccess;
    for (int i = 0; completed && cfg->mode == HANG_STALL && i < COUNT; i++)
      IT_EXPECT(buf[i] == NRANKS * NRANKS, "rank %d: the released AllReduce gave %g at %d", r->rank,
                buf[i], i);
    if (completed) fprintf(stderr, "rank %d: the call completed once released\n", r->rank);
    IT_EXPECT(!completed || cfg->mode == HANG_STALL, "rank %d: the hung AllReduce returned success",
              r->rank);
  }
  r->comms[0] = NULL; /* aborted by the watchdog */
  sh->report_s[r->rank] = w.saw_report ? w.report_s : -1;
  sh->abort_s[r->rank] = w.abort_s;
  atomic_fetch_add(&sh->finished, 1);
  if (cfg->mode == HANG_STOP && atomic_load(&sh->finished) == NRANKS - 1)
    kill(atomic_load(&sh->pids[VICTIM]), SIGKILL);
  fprintf(stderr, "rank %d: report after %.2f s, abort took %.3f s\n", r->rank, w.report_s,
          w.abort_s);
  if (!w.saw_report && cfg->mode != HANG_QUIET) { /* quiet: printed whole below */
    char path[160];
    snprintf(path, sizeof(path), cfg->log_tmpl, (int)getpid());
    print_file(r->rank, "reports", path, "Hang report");
  }
  IT_EXPECT(w.saw_report, "rank %d: no hang report with the expected verdict within %.0f s",
            r->rank, REPORT_WITHIN_S);
  IT_EXPECT(w.async_ok, "rank %d: ncclCommGetAsyncError reported an error during the wait",
            r->rank);
  IT_EXPECT(w.abort_res == ncclSuccess, "abort returned %d", (int)w.abort_res);
  IT_EXPECT(w.abort_s < ABORT_WITHIN_S, "rank %d: abort took %.2f s", r->rank, w.abort_s);
  free(buf);
  return 0;
}

static void hang_run(hang_mode_t mode, int nhosts, bool nonblocking, const char* check_union) {
  hang_shared_t* sh =
      mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
  memset(sh, 0, sizeof(*sh));
  hang_cfg_t cfg = {.mode = mode, .sh = sh};
  snprintf(cfg.log_tmpl, sizeof(cfg.log_tmpl), "/tmp/baton-hang-%d-%d-%%d.log", (int)getpid(),
           (int)mode);
  snprintf(env_file, sizeof(env_file), "NCCL_DEBUG_FILE=/tmp/baton-hang-%d-%d-%%p.log",
           (int)getpid(), (int)mode);
  itest_opts_t o = {.nranks = NRANKS,
                    .nhosts = nhosts,
                    .nonblocking = nonblocking,
                    .timeout_s = 60,
                    .env = {"NCCL_DEBUG=WARN", env_file, env_report},
                    .may_die = mode == HANG_STOP || mode == HANG_DIE ? 1u << VICTIM : 0};
  if (mode == HANG_QUIET) {
    /* What a job gets by default: no NCCL variable from the test's own environment either. */
    for (bool again = true; again;) {
      again = false;
      for (char** e = environ; *e != NULL && !again; e++) {
        if (strncmp(*e, "NCCL_", 5) != 0) continue;
        char name[128];
        size_t n = strcspn(*e, "=");
        snprintf(name, sizeof(name), "%.*s", (int)n, *e);
        unsetenv(name);
        again = true;
      }
    }
    snprintf(cfg.log_tmpl, sizeof(cfg.log_tmpl), "/tmp/baton-hang-%d-quiet-%%d.err", (int)getpid());
    snprintf(cfg.out_tmpl, sizeof(cfg.out_tmpl), "/tmp/baton-hang-%d-quiet-%%d.out", (int)getpid());
    memset(o.env, 0, sizeof(o.env));
    o.env[0] = env_report;
  }
  ck_assert_int_eq(itest_run(&o, hang_body, &cfg), 0);
  bool found = check_union == NULL;
  int on_stdout = 0;
  for (int r = 0; r < NRANKS; r++) {
    char path[160];
    snprintf(path, sizeof(path), cfg.log_tmpl, atomic_load(&sh->pids[r]));
    const char* needles[] = {"Hang report", check_union, NULL};
    if (!found && check_union != NULL) found = fork_ranks_file_has_line(path, needles);
    if (mode == HANG_QUIET) print_file(r, "stderr", path, NULL);
    if (getenv("BATON_TEST_KEEP_LOGS") == NULL) unlink(path);
    if (mode != HANG_QUIET) continue;
    snprintf(path, sizeof(path), cfg.out_tmpl, atomic_load(&sh->pids[r]));
    const char* report[] = {"Hang report", NULL};
    on_stdout += fork_ranks_file_has_line(path, report);
    if (getenv("BATON_TEST_KEEP_LOGS") == NULL) unlink(path);
  }
  ck_assert_msg(found, "no rank's report has \"%s\"", check_union);
  ck_assert_msg(on_stdout == 0, "%d ranks printed the report on stdout", on_stdout);
  munmap(sh, sizeof(*sh));
}

START_TEST(test_hang_skip) {
  hang_run(HANG_SKIP, 1, false, NULL);
}
END_TEST

START_TEST(test_hang_skip_quiet) {
  hang_run(HANG_QUIET, 1, false, NULL);
}
END_TEST

START_TEST(test_hang_skip_nonblocking) {
  hang_run(HANG_SKIP, 2, true, NULL);
}
END_TEST

START_TEST(test_hang_stopped_rank) {
  hang_run(HANG_STOP, 2, false, NULL);
}
END_TEST

START_TEST(test_hang_dead_rank) {
  hang_run(HANG_DIE, 1, false, NULL);
}
END_TEST

/* Rank 2's proxy carries its NET connections (hosts {0,1} and {2,3}); with it stopped, the reports
 * name the NET connection into rank 2 (ring 0 -> 1 -> 2 -> 3): rank 1 has sent what rank 2 never
 * receives. */
START_TEST(test_hang_stalled_connection) {
  hang_run(HANG_STALL, 2, false, "The connection from rank 1 to rank 2 (NET, channel");
}
END_TEST

static Suite* hang_suite(void) {
  Suite* s = suite_create("coll_hang");
  /* One case each, so CK_RUN_CASE picks one (BATON_TEST_KEEP_LOGS keeps the ranks' logs). */
  const struct {
    const char* name;
    const TTest* test;
  } cases[] = {{"skip", test_hang_skip},
               {"skip_quiet", test_hang_skip_quiet},
               {"skip_nonblocking", test_hang_skip_nonblocking},
               {"stop", test_hang_stopped_rank},
               {"die", test_hang_dead_rank},
               {"stall", test_hang_stalled_connection}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    TCase* tc = tcase_create(cases[i].name);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, cases[i].test);
    suite_add_tcase(s, tc);
  }
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(hang_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
