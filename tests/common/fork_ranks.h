/* Helpers for multi-process tests: run a function in N forked children with a bounded wait, count
 * open descriptors, capture a process's log in a file, find a free loopback port. */
#ifndef BATON_TEST_FORK_RANKS_H
#define BATON_TEST_FORK_RANKS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Runs in child number idx of n; returns 0 on success. */
typedef int (*fork_rank_fn)(int idx, int n, void* arg);

/* Forks n children running fn (each exits with its return value) and waits for all of them, at
 * most timeout_ms in total; children still running then are killed and count as failures.
 * Returns the number of failed children and prints a line to stderr for each. */
int fork_ranks_run(int n, fork_rank_fn fn, void* arg, int timeout_ms);

/* Waits (at most about a second) until every other thread of this process sleeps, so a fork
 * does not catch one inside the allocator: under AddressSanitizer, whose allocator lock a fork
 * does not release, the child would hang at its first malloc (a thread just started, such as a
 * bootstrap root, allocates while it initializes). fork_ranks_run and itest_run call it. */
void fork_ranks_quiesce(void);

/* Number of open file descriptors of this process (from /proc/self/fd). */
int fork_ranks_count_fds(void);

/* Number of threads of this process (from /proc/self/task). */
int fork_ranks_count_threads(void);

void fork_ranks_sleep_ms(int ms);
double fork_ranks_ms_since(uint64_t t0_ns); /* t0 from clock_ns() */
/* Starts a thread that sets *flag to 1 after delay_ms; join it with pthread_join. */
pthread_t fork_ranks_abort_after(volatile uint32_t* flag, int delay_ms);

/* A TCP port on 127.0.0.1 that was free a moment ago. */
int fork_ranks_free_port(void);

/* Sends this process's log (NCCL_DEBUG=level, e.g. "WARN" or "INFO") to a fresh file, opened at
 * once, and writes its path to path[len]. */
void fork_ranks_log_to_file(const char* level, char* path, size_t len);
/* Whether the file at path contains every one of the NULL-terminated needles on one line. */
bool fork_ranks_file_has_line(const char* path, const char* const* needles);

/* Reports a failed check in a child (where Check's asserts must not be used) and returns 1. */
#define CHILD_CHECK(cond)                           \
  do {                                              \
    if (!(cond)) {                                  \
      fork_ranks_report(__FILE__, __LINE__, #cond); \
      return 1;                                     \
    }                                               \
  } while (0)
void fork_ranks_report(const char* file, int line, const char* text);

#endif /* BATON_TEST_FORK_RANKS_H */
