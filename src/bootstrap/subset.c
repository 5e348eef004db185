/* Collectives built on tagged send/recv: the barrier, and allgather / broadcast over a list of
 * ranks. Subset operations talk only to the listed ranks, so ranks outside the list may be dead
 * (shrink). The caller's tag keeps concurrent operations apart; between two ranks, messages with
 * one tag are matched in the order they were sent. */
#include "bootstrap/bootstrap.h"

/* Dissemination: in round k each rank signals rank + 2^k and waits for rank - 2^k. Every pair
 * meets at most once per barrier, so one tag serves all rounds. */
ncclResult_t bootstrap_barrier(bootstrap_t* b, int tag) {
  int n = bootstrap_nranks(b);
  int rank = bootstrap_rank(b);
  if (b == NULL) {
    WARN("Bootstrap: barrier on a NULL bootstrap");
    return ncclInvalidArgument;
  }
  for (int dist = 1, round = 0; dist < n; dist <<= 1, round++) {
    int to = (rank + dist) % n;
    int from = (rank - dist % n + n) % n;
    int got = -1;
    CHECK(bootstrap_send(b, to, tag, &round, sizeof(round)));
    CHECK(bootstrap_recv(b, from, tag, &got, sizeof(got)));
    if (got != round) {
      WARN(
          "Bootstrap: barrier (tag %d) on rank %d got round %d from rank %d in round %d; another "
          "operation uses the same tag",
          tag, rank, got, from, round);
      return ncclInternalError;
    }
  }
  return ncclSuccess;
}

static ncclResult_t subset_check(const bootstrap_t* b, const int* ranks, int n, int me,
                                 const char* what) {
  if (b == NULL || ranks == NULL || n < 1 || me < 0 || me >= n) {
    WARN("Bootstrap: %s with invalid subset arguments (n %d, index %d)", what, n, me);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < n; i++) {
    if (ranks[i] < 0 || ranks[i] >= bootstrap_nranks(b)) {
      WARN("Bootstrap: %s: subset entry %d is rank %d, outside 0..%d", what, i, ranks[i],
           bootstrap_nranks(b) - 1);
      return ncclInvalidArgument;
    }
  }
  if (ranks[me] != bootstrap_rank(b)) {
    WARN("Bootstrap: %s: subset entry %d is rank %d, but this is rank %d", what, me, ranks[me],
         bootstrap_rank(b));
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Ring over the subset: slot i (at data + i*size) belongs to ranks[i]. */
ncclResult_t bootstrap_subset_allgather(bootstrap_t* b, const int* ranks, int n, int me, int tag,
                                        void* data, size_t size) {
  CHECK(subset_check(b, ranks, n, me, "subset allgather"));
  int next = ranks[(me + 1) % n];
  int prev = ranks[(me + n - 1) % n];
  char* base = data;
  for (int s = 0; s < n - 1; s++) {
    int send_slot = (me - s + n) % n;
    int recv_slot = (me - s - 1 + 2 * n) % n;
    CHECK(bootstrap_send(b, next, tag, base + (size_t)send_slot * size, size));
    CHECK(bootstrap_recv(b, prev, tag, base + (size_t)recv_slot * size, size));
  }
  return ncclSuccess;
}

/* root is an index into ranks, like me. */
ncclResult_t bootstrap_subset_bcast(bootstrap_t* b, const int* ranks, int n, int me, int root,
                                    int tag, void* data, size_t size) {
  CHECK(subset_check(b, ranks, n, me, "subset broadcast"));
  if (root < 0 || root >= n) {
    WARN("Bootstrap: subset broadcast with root index %d outside 0..%d", root, n - 1);
    return ncclInvalidArgument;
  }
  if (me != root) return bootstrap_recv(b, ranks[root], tag, data, size);
  for (int i = 0; i < n; i++)
    if (i != root) CHECK(bootstrap_send(b, ranks[i], tag, data, size));
  return ncclSuccess;
}
