/* A killed peer (shared by the SHM/socket and the IB fault tests): after one good AllReduce, rank
 * `victim` dies (SIGKILL). Every survivor's next operation (an AllReduce, or with p2p a send/recv
 * exchange with every rank) must fail within seconds (the call's result or
 * ncclCommGetAsyncError), ncclGetLastError must explain it, and ncclCommAbort must return
 * promptly. With must_name every survivor's last error names the victim (and survivors wait for
 * each other before aborting, so none fails because another left); named_min is how many must,
 * counted across processes. env: extra "NAME=VALUE" settings (NULL-terminated, may be NULL).
 * Uses Check's asserts: call it from a test. */
#ifndef BATON_TESTS_ITEST_FAULT_H
#define BATON_TESTS_ITEST_FAULT_H

#include <stdbool.h>

void itest_fault_run(int nranks, int nhosts, bool nonblocking, int victim, bool p2p, bool must_name,
                     int named_min, const char* const* env);
/* The cascade: the same, but survivors abort and exit as soon as their own call has failed, so
 * some fail because a survivor left; every survivor's last error must still name the victim. */
void itest_fault_cascade(int nranks, int nhosts, int victim);

#endif /* BATON_TESTS_ITEST_FAULT_H */
