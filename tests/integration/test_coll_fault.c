/* A killed peer: after one good operation, one rank dies (SIGKILL). The survivors' next
 * operation must fail within seconds (the call's result or ncclCommGetAsyncError), and
 * ncclCommAbort must return promptly. On one host (SHM) and across "hosts" (NET), blocking and
 * nonblocking.
 *
 * The survivors' ncclGetLastError(comm) must explain the failure: whichever thread saw it (the
 * caller's channel 0, a worker channel with NCCL_MIN_NCHANNELS=2, the proxy). Where every
 * survivor waits on the victim directly (3 ranks on 3 hosts: the proxy watches every NET
 * connection), each must name the victim; survivors then wait for each other before aborting, so
 * none fails because another one left instead. On one host the ring runs one way (0 -> 1 -> 2):
 * rank 1 only sends to the victim, and may fail on rank 0 instead. In the cascade cases survivors
 * do not wait for each other: some fail because another survivor left, and must still name the
 * victim. */
#include <check.h>
#include <stdlib.h>

#include "itest_fault.h"

/* Rank 0 receives from the victim and must name it; rank 1 waits on rank 0. */
START_TEST(test_killed_peer_shm) {
  itest_fault_run(3, 1, false, 2, false, false, 1, NULL);
}
END_TEST

/* Rank 3 may only wait on survivors, and fail when one of them leaves: at least one names it. */
START_TEST(test_killed_peer_net) {
  itest_fault_run(4, 2, false, 1, false, false, 1, NULL);
}
END_TEST

/* Every survivor reaches the victim over NET only. */
START_TEST(test_killed_peer_net_named) {
  itest_fault_run(3, 3, false, 2, false, true, 2, NULL);
}
END_TEST

/* The first p2p exchange with a peer connects at run time, through the bootstrap, which must
 * notice that the peer is dead instead of waiting for its connect info. */
START_TEST(test_killed_peer_p2p) {
  itest_fault_run(3, 1, false, 0, true, true, 2, NULL);
}
END_TEST

START_TEST(test_killed_peer_nonblocking) {
  itest_fault_run(3, 3, true, 1, false, true, 2, NULL);
}
END_TEST

/* Cascades: survivors leave as soon as they fail, and every one still names the killed rank
 * (the first failure travels over the side channel). */
START_TEST(test_killed_peer_cascade_shm) {
  itest_fault_cascade(4, 1, 2);
}
END_TEST

START_TEST(test_killed_peer_cascade_net) {
  itest_fault_cascade(4, 2, 1);
}
END_TEST

static Suite* fault_suite(void) {
  Suite* s = suite_create("coll_fault");
  TCase* tc = tcase_create("fault");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_killed_peer_shm);
  tcase_add_test(tc, test_killed_peer_net);
  tcase_add_test(tc, test_killed_peer_net_named);
  tcase_add_test(tc, test_killed_peer_p2p);
  tcase_add_test(tc, test_killed_peer_nonblocking);
  tcase_add_test(tc, test_killed_peer_cascade_shm);
  tcase_add_test(tc, test_killed_peer_cascade_net);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  SRunner* sr = srunner_create(fault_suite());
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
