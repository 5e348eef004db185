/* Helpers for multi-process tests (see fork_ranks.h). */
#include "fork_ranks.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

void fork_ranks_report(const char* file, int line, const char* text) {
  fprintf(stderr, "[pid %d] %s:%d: check failed: %s (last error: %s)\n", (int)getpid(), file, line,
          text, log_last_error());
}

/* Whether every thread of this process but the caller sleeps (state S in /proc). */
static bool others_asleep(void) {
  DIR* d = opendir("/proc/self/task");
  if (d == NULL) return true;
  bool asleep = true;
  struct dirent* e;
  pid_t me = (pid_t)syscall(SYS_gettid);
  while (asleep && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || atoi(e->d_name) == me) continue;
    char path[300], buf[512];
    snprintf(path, sizeof(path), "/proc/self/task/%s/stat", e->d_name);
    FILE* f = fopen(path, "r");
    if (f == NULL) continue;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char* close_paren = strrchr(buf, ')'); /* the state follows the command name */
    if (close_paren != NULL && close_paren[1] == ' ' && close_paren[2] != 'S') asleep = false;
  }
  closedir(d);
  return asleep;
}

void fork_ranks_quiesce(void) {
  int calm = 0;
  for (int i = 0; i < 500 && calm < 2; i++) {
    calm = others_asleep() ? calm + 1 : 0;
    fork_ranks_sleep_ms(2);
  }
}

/* Children wait at a gate until every one of them is forked. A parent with threads of its own (a
 * bootstrap root serving the children) must not fork while one of them is inside the allocator:
 * under AddressSanitizer, whose allocator lock a fork does not release, the child would hang on
 * its first malloc. The gate keeps the children, and so the parent's threads, quiet until the
 * forks are done. */
static void gate_wait(int fd) {
  char b;
  while (read(fd, &b, 1) < 0 && errno == EINTR) {
  }
  close(fd);
}

int fork_ranks_run(int n, fork_rank_fn fn, void* arg, int timeout_ms) {
  pid_t* pids = calloc((size_t)n, sizeof(*pids));
  int* done = calloc((size_t)n, sizeof(*done));
  int failed = 0;
  int gate[2];
  if (pids == NULL || done == NULL || pipe(gate) != 0) abort();
  fork_ranks_quiesce();
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < n; i++) {
    pid_t pid = fork();
    if (pid < 0) {
      fprintf(stderr, "fork failed: %s\n", strerror(errno));
      abort();
    }
    if (pid == 0) {
      close(gate[1]);
      gate_wait(gate[0]);
      /* Backstop in case the parent's wait is itself stuck. */
      alarm((unsigned)(timeout_ms / 1000 + 5));
      int rc = fn(i, n, arg);
      fflush(stdout);
      fflush(stderr);
      _exit(rc == 0 ? 0 : 1);
    }
    pids[i] = pid;
  }
  close(gate[0]);
  close(gate[1]); /* EOF opens the gate for every child at once */
  uint64_t deadline = clock_ns() + (uint64_t)timeout_ms * 1000000ull;
  int remaining = n;
  while (remaining > 0) {
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (int i = 0; i < n; i++) {
        if (pids[i] != pid || done[i]) continue;
        done[i] = 1;
        remaining--;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
          failed++;
          if (WIFSIGNALED(status))
            fprintf(stderr, "child %d (pid %d) killed by signal %d\n", i, (int)pid,
                    WTERMSIG(status));
          else
            fprintf(stderr, "child %d (pid %d) exited with %d\n", i, (int)pid, WEXITSTATUS(status));
        }
      }
      continue;
    }
    if (clock_ns() >= deadline) {
      for (int i = 0; i < n; i++) {
        if (done[i]) continue;
        fprintf(stderr, "child %d (pid %d) still running after %d ms: killed\n", i, (int)pids[i],
                timeout_ms);
        kill(pids[i], SIGKILL);
        waitpid(pids[i], NULL, 0);
        done[i] = 1;
        failed++;
        remaining--;
      }
      break;
    }
    fork_ranks_sleep_ms(5);
  }
  free(pids);
  free(done);
  return failed;
}

static int count_entries(const char* dir) {
  DIR* d = opendir(dir);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') n++;
  closedir(d);
  return n;
}

int fork_ranks_count_fds(void) {
  return count_entries("/proc/self/fd") - 1; /* the directory stream's own descriptor */
}

int fork_ranks_count_threads(void) {
  return count_entries("/proc/self/task");
}

void fork_ranks_sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000l};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

double fork_ranks_ms_since(uint64_t t0_ns) {
  return (double)(clock_ns() - t0_ns) / 1e6;
}

typedef struct aborter {
  volatile uint32_t* flag;
  int delay_ms;
} aborter_t;

static void* aborter_main(void* p) {
  aborter_t* a = p;
  fork_ranks_sleep_ms(a->delay_ms);
  __atomic_store_n(a->flag, 1, __ATOMIC_RELEASE);
  free(a);
  return NULL;
}

pthread_t fork_ranks_abort_after(volatile uint32_t* flag, int delay_ms) {
  aborter_t* a = malloc(sizeof(*a));
  if (a == NULL) abort();
  a->flag = flag;
  a->delay_ms = delay_ms;
  pthread_t t;
  if (pthread_create(&t, NULL, aborter_main, a) != 0) abort();
  return t;
}

int fork_ranks_free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof(a)) != 0 ||
      getsockname(fd, (struct sockaddr*)&a, &len) != 0)
    abort();
  close(fd);
  return ntohs(a.sin_port);
}

void fork_ranks_log_to_file(const char* level, char* path, size_t len) {
  snprintf(path, len, "/tmp/baton-test-%d-%llu.log", (int)getpid(), (unsigned long long)clock_ns());
  setenv("NCCL_DEBUG", level, 1);
  setenv("NCCL_DEBUG_FILE", path, 1);
  log_reset();
  log_emit(NCCL_LOG_TRACE, NCCL_ALL, __func__, __LINE__, "log opened"); /* opens the file now */
}

bool fork_ranks_file_has_line(const char* path, const char* const* needles) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return false;
  char line[4096];
  bool found = false;
  while (!found && fgets(line, sizeof(line), f) != NULL) {
    bool all = true;
    for (int i = 0; needles[i] != NULL && all; i++) all = strstr(line, needles[i]) != NULL;
    found = all;
  }
  fclose(f);
  return found;
}
