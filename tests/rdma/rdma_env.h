/* Helpers for the tests that need an RDMA device (label `rdma`): they run inside the Soft-RoCE
 * guest (tests/rdma/guest.sh; the `rdma_guest` test starts it), and anywhere else say SKIP with
 * the reason (exit status RDMA_SKIP, ctest's SKIP_RETURN_CODE), never pass without testing. */
#ifndef BATON_TEST_RDMA_ENV_H
#define BATON_TEST_RDMA_ENV_H

#include <stdbool.h>

#define RDMA_SKIP 77

/* Exits with RDMA_SKIP (after printing why) unless an RDMA device with an active port exists
 * and this process may use it (root: the tests also add devices and links). */
void rdma_require_device(void);
/* Runs a shell command line (printf-style), its output to stderr; returns its exit status. */
int rdma_sh(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
/* How many lines of the files in dir (the ranks' logs) contain every one of the NULL-terminated
 * needles. */
int rdma_log_count(const char* dir, const char* const* needles);
/* How many RDMA devices /sys/class/infiniband lists. */
int rdma_count_devices(void);

#endif /* BATON_TEST_RDMA_ENV_H */
