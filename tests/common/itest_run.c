/* Running N ranks as forked processes: environment, unique-id hand-out through a pipe, init,
 * the body, destroy, and a bounded wait in the parent. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "base/base.h"
#include "fork_ranks.h"
#include "itest.h"

double itest_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int itest_read_full(int fd, void* buf, size_t len, int timeout_ms) {
  size_t got = 0;
  double deadline = itest_now() + timeout_ms / 1000.0;
  while (got < len) {
    int left = (int)((deadline - itest_now()) * 1000);
    if (left <= 0) return -1;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    int r = poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    ssize_t n = read(fd, (char*)buf + got, len - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
  }
  return 0;
}

static int itest_init_comm(itest_rank_t* r, int k) {
  const itest_opts_t* o = r->opts;
  if (!o->nonblocking) {
    IT_NCCL(ncclCommInitRank(&r->comms[k], r->nranks, r->ids[k], r->rank));
    return 0;
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  ncclResult_t res = ncclCommInitRankConfig(&r->comms[k], r->nranks, r->ids[k], r->rank, &cfg);
  IT_EXPECT(res == ncclSuccess || res == ncclInProgress, "nonblocking init returned %d", (int)res);
  double deadline = itest_now() + 60;
  ncclResult_t async = ncclInProgress;
  while (async == ncclInProgress && itest_now() < deadline) {
    IT_NCCL(ncclCommGetAsyncError(r->comms[k], &async));
    if (async == ncclInProgress) usleep(1000);
  }
  IT_EXPECT(async == ncclSuccess, "nonblocking init finished with %d", (int)async);
  return 0;
}

static int itest_child(const itest_opts_t* o, int rank, int pipe_rd, int pipe_wr, itest_body_t body,
                       void* arg) {
  alarm((unsigned)(o->timeout_s > 0 ? o->timeout_s : 120) + 5); /* the parent kills first */
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  for (int i = 0; i < ITEST_MAX_ENV && o->env[i]; i++) {
    char name[128];
    const char* eq = strchr(o->env[i], '=');
    if (eq == NULL || (size_t)(eq - o->env[i]) >= sizeof(name)) continue;
    memcpy(name, o->env[i], (size_t)(eq - o->env[i]));
    name[eq - o->env[i]] = '\0';
    setenv(name, eq + 1, 1);
  }
  if (o->nhosts >= 2) {
    char host[64];
    snprintf(host, sizeof(host), "itest-host-%d", rank * o->nhosts / o->nranks);
    setenv("NCCL_HOSTID", host, 1);
  }
  param_reload();
  log_reset();

  itest_rank_t r = {.rank = rank, .nranks = o->nranks, .opts = o};
  int ncomms = o->ncomms > 0 ? o->ncomms : 1;
  size_t idbytes = (size_t)ncomms * sizeof(ncclUniqueId);
  if (rank == 0) {
    for (int k = 0; k < ncomms; k++) IT_NCCL(ncclGetUniqueId(&r.ids[k]));
    for (int q = 1; q < o->nranks; q++)
      IT_EXPECT(write(pipe_wr, r.ids, idbytes) == (ssize_t)idbytes, "pipe write: %s",
                strerror(errno));
  } else {
    IT_EXPECT(itest_read_full(pipe_rd, r.ids, idbytes, 30000) == 0, "no unique id from rank 0");
  }
  close(pipe_rd);
  close(pipe_wr);
  if (!o->no_init) {
    for (int k = 0; k < ncomms; k++)
      if (itest_init_comm(&r, k) != 0) return 1;
  }
  int rc = body(&r, arg);
  for (int k = 0; k < ncomms; k++) {
    if (r.comms[k] == NULL) continue;
    ncclResult_t res = rc == 0 ? ncclCommDestroy(r.comms[k]) : ncclCommAbort(r.comms[k]);
    if (rc == 0 && res != ncclSuccess) {
      fprintf(stderr, "rank %d: ncclCommDestroy returned %d\n", rank, (int)res);
      rc = 1;
    }
  }
  return rc;
}

int itest_run(const itest_opts_t* o, itest_body_t body, void* arg) {
  int n = o->nranks;
  if (n < 1 || n > ITEST_MAX_RANKS) {
    fprintf(stderr, "itest_run: bad nranks %d\n", n);
    return 1;
  }
  int fds[2];
  if (pipe(fds) != 0) {
    perror("pipe");
    return n;
  }
  pid_t pids[ITEST_MAX_RANKS];
  int gate[2]; /* children start once all are forked (fork_ranks.c says why) */
  if (pipe(gate) != 0) {
    perror("pipe");
    return n;
  }
  fork_ranks_quiesce();
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] < 0) {
      perror("fork");
      for (int q = 0; q < r; q++) kill(pids[q], SIGKILL);
      return n;
    }
    if (pids[r] == 0) {
      char b;
      close(gate[1]);
      while (read(gate[0], &b, 1) < 0 && errno == EINTR) {
      }
      close(gate[0]);
      int rc = itest_child(o, r, fds[0], fds[1], body, arg);
      fflush(stdout);
      fflush(stderr);
      _exit(rc == 0 ? 0 : 1);
    }
  }
  close(gate[0]);
  close(gate[1]);
  close(fds[0]);
  close(fds[1]);

  int failed = 0, left = n;
  int status[ITEST_MAX_RANKS];
  bool done[ITEST_MAX_RANKS] = {0};
  double deadline = itest_now() + (o->timeout_s > 0 ? o->timeout_s : 120);
  while (left > 0) {
    for (int r = 0; r < n; r++) {
      if (done[r]) continue;
      pid_t p = waitpid(pids[r], &status[r], WNOHANG);
      if (p == pids[r]) {
        done[r] = true;
        left--;
      }
    }
    if (left == 0) break;
    if (itest_now() > deadline) {
      for (int r = 0; r < n; r++) {
        if (done[r]) continue;
        fprintf(stderr, "itest_run: rank %d (pid %d) still running after %d s: killed\n", r,
                (int)pids[r], o->timeout_s > 0 ? o->timeout_s : 120);
        kill(pids[r], SIGKILL);
        waitpid(pids[r], &status[r], 0);
        status[r] = -1;
        done[r] = true;
      }
      break;
    }
    usleep(2000);
  }
  for (int r = 0; r < n; r++) {
    if (o->may_die & (1u << r)) continue;
    if (status[r] == -1) {
      failed++;
    } else if (WIFSIGNALED(status[r])) {
      fprintf(stderr, "itest_run: rank %d died of signal %d\n", r, WTERMSIG(status[r]));
      failed++;
    } else if (WEXITSTATUS(status[r]) != 0) {
      fprintf(stderr, "itest_run: rank %d failed (exit %d)\n", r, WEXITSTATUS(status[r]));
      failed++;
    }
  }
  return failed;
}
