/* Passing descriptors between processes (src/transport/fd_pass.c): a memfd exported by one
 * process is imported by a forked one and both see the same file; unknown keys, revoked exports
 * and a stopped server fail promptly with a WARN; the server thread goes away with the last
 * export; an aborted import returns. */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fork_ranks.h"
#include "transport/transport.h"
#include "unit.h"

#define WAIT_MS 20000

static int make_memfd(const char* text) {
  int fd = memfd_create("baton-test", MFD_CLOEXEC);
  ck_assert_int_ge(fd, 0);
  size_t n = strlen(text) + 1;
  ck_assert_int_eq(ftruncate(fd, 4096), 0);
  ck_assert_int_eq(pwrite(fd, text, n, 0), (ssize_t)n);
  return fd;
}

typedef struct child_arg {
  fd_export_t exp;
  fd_export_t bogus;
} child_arg_t;

/* Child: import, check the content, write an answer into the same file through a mapping. */
static int child_import(int idx, int n, void* argp) {
  child_arg_t* arg = argp;
  int fd = -1;
  char buf[64] = {0};
  CHILD_CHECK(fd_pass_import(&arg->exp, NULL, WAIT_MS, &fd) == ncclSuccess);
  CHILD_CHECK(fd >= 0);
  CHILD_CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC);
  CHILD_CHECK(pread(fd, buf, sizeof(buf) - 1, 0) > 0);
  CHILD_CHECK(strcmp(buf, "hello from the parent") == 0);
  char* map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  CHILD_CHECK(map != MAP_FAILED);
  snprintf(map + 1024, 64, "child %d was here", idx);
  munmap(map, 4096);
  close(fd);
  /* a key nobody exported */
  fd = -1;
  CHILD_CHECK(fd_pass_import(&arg->bogus, NULL, WAIT_MS, &fd) == ncclSystemError);
  CHILD_CHECK(fd == -1);
  CHILD_CHECK(strstr(log_last_error(), "unknown or revoked") != NULL);
  return 0;
}

START_TEST(test_pass_memfd) {
  int threads = fork_ranks_count_threads();
  int fd = make_memfd("hello from the parent");
  child_arg_t arg;
  ck_assert_int_eq(fd_pass_export(fd, &arg.exp), ncclSuccess);
  close(fd); /* the export holds its own duplicate */
  ck_assert_int_eq(fork_ranks_count_threads(), threads + 1);
  arg.bogus = arg.exp;
  arg.bogus.key ^= 0x5a5a5a5a5a5a5a5aull;
  ck_assert_int_eq(fork_ranks_run(3, child_import, &arg, WAIT_MS), 0);
  /* the parent can import its own export, and sees what the children wrote */
  int back = -1;
  char buf[64] = {0};
  ck_assert_int_eq(fd_pass_import(&arg.exp, NULL, WAIT_MS, &back), ncclSuccess);
  ck_assert_int_gt(pread(back, buf, sizeof(buf) - 1, 1024), 0);
  ck_assert_ptr_nonnull(strstr(buf, "was here"));
  close(back);
  fd_pass_revoke(&arg.exp);
  ck_assert_int_eq(fork_ranks_count_threads(), threads); /* server stopped */
  /* the server is gone: refused at once */
  back = -1;
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(fd_pass_import(&arg.exp, NULL, WAIT_MS, &back), ncclSystemError);
  ck_assert_int_eq(back, -1);
  ck_assert_uint_lt(clock_ns() - t0, 2000000000ull);
  ck_assert_ptr_nonnull(strstr(log_last_error(), arg.exp.name));
}
END_TEST

START_TEST(test_revoke_one_of_two) {
  int fa = make_memfd("first"), fb = make_memfd("second");
  fd_export_t a, b;
  ck_assert_int_eq(fd_pass_export(fa, &a), ncclSuccess);
  ck_assert_int_eq(fd_pass_export(fb, &b), ncclSuccess);
  ck_assert_str_eq(a.name, b.name); /* one server per process */
  ck_assert_uint_ne(a.key, b.key);
  fd_pass_revoke(&a);
  int fd = -1;
  char buf[16] = {0};
  ck_assert_int_eq(fd_pass_import(&a, NULL, WAIT_MS, &fd), ncclSystemError);
  ck_assert_int_eq(fd_pass_import(&b, NULL, WAIT_MS, &fd), ncclSuccess);
  ck_assert_int_gt(pread(fd, buf, sizeof(buf) - 1, 0), 0);
  ck_assert_str_eq(buf, "second");
  close(fd);
  fd_pass_revoke(&b);
  /* a fresh export starts a new server under a new name */
  fd_export_t c;
  ck_assert_int_eq(fd_pass_export(fa, &c), ncclSuccess);
  ck_assert_str_ne(c.name, b.name);
  fd_pass_revoke(&c);
  close(fa);
  close(fb);
  int nfds = fork_ranks_count_fds();
  for (int i = 0; i < 20; i++) {
    int m = make_memfd("x");
    ck_assert_int_eq(fd_pass_export(m, &c), ncclSuccess);
    close(m);
    ck_assert_int_eq(fd_pass_import(&c, NULL, WAIT_MS, &fd), ncclSuccess);
    close(fd);
    fd_pass_revoke(&c);
  }
  ck_assert_int_eq(fork_ranks_count_fds(), nfds); /* nothing leaks */
}
END_TEST

/* A server that accepts but never answers: the import gives up at the abort flag or timeout. */
START_TEST(test_import_abort_and_timeout) {
  fd_export_t e = {.key = 1};
  snprintf(e.name, sizeof(e.name), "baton-test-silent-%d", (int)getpid());
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  memcpy(addr.sun_path + 1, e.name, strlen(e.name));
  ck_assert_int_eq(bind(s, (struct sockaddr*)&addr,
                        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(e.name))),
                   0);
  ck_assert_int_eq(listen(s, 4), 0);
  int fd = -1;
  uint64_t t0 = clock_ns();
  ck_assert_int_eq(fd_pass_import(&e, NULL, 300, &fd), ncclSystemError);
  uint64_t took = clock_ns() - t0;
  ck_assert_uint_ge(took, 250000000ull);
  ck_assert_uint_lt(took, 3000000000ull);
  volatile uint32_t abort_flag = 1;
  t0 = clock_ns();
  ck_assert_int_eq(fd_pass_import(&e, &abort_flag, WAIT_MS, &fd), ncclSystemError);
  ck_assert_uint_lt(clock_ns() - t0, 3000000000ull);
  ck_assert_int_eq(fd, -1);
  close(s);
}
END_TEST

static Suite* fd_pass_suite(void) {
  Suite* s = suite_create("fd_pass");
  TCase* tc = tcase_create("fd_pass");
  tcase_set_timeout(tc, 60);
  tcase_add_test(tc, test_pass_memfd);
  tcase_add_test(tc, test_revoke_one_of_two);
  tcase_add_test(tc, test_import_abort_and_timeout);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(fd_pass_suite());
}
