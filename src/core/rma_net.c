/* One-sided operations between hosts over the network: a put is an RDMA write into the peer's
 * registered window, its signal an RDMA atomic add to the peer's signal word, both on one
 * connection (net.h, net_rma_ops_t: the built-in IB network), so the signal lands after the data
 * (an atomic is not passed by earlier writes, even with PCIe relaxed ordering).
 *
 * Made collectively at the first window registration of a communicator that spans hosts
 * (comm_window_share calls rma_net_window_open on every rank, in the same order):
 *   1. each rank offers a listen handle when it can (host executor, a network with one-sided
 *      writes and adds on its device); the offers are allgathered, and every pair of offering ranks
 * on different hosts connects both ways (this rank's send comm writes to the peer; the peer's comes
 * in through the listen comm and is only kept open);
 *   2. each rank registers its signal words (nranks x nctx x nsig counters: row p is what rank p
 *      raised here, added to only by p) and a word the adds' old values land in, and allgathers
 *      the words' key and whether every connection came up; a pair uses the network only when
 *      both say so.
 * Every window registration then registers the buffer and allgathers its key, so a put knows the
 * peer's address, key and length. A pair that does not use the network (same host, no offer, a
 * failed connection) keeps the bootstrap path of rma.c.
 *
 * Counting: rank s raising sig k at rank d adds 1 to d's word (s, k); a wait on (s, k) for n
 * signals returns once the word reaches what waits took before plus n.
 * A put returns once its writes completed (the source may be reused; the host executor's calls
 * finish before they return). */
#include <stdlib.h>
#include <time.h>

#include "core/core.h"

#define RMA_NET_PIECE (4ull << 20) /* the largest write a put is cut into */
#define RMA_NET_INFLIGHT 16        /* writes in flight per put */
#define RMA_NET_CHECK_NS 100000000ull

typedef struct rma_net_offer {
  int32_t ok; /* 1: this rank takes part (first round), or all its connections came up (second) */
  int32_t pad;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  net_rma_key_t words; /* second round: this rank's signal words */
} rma_net_offer_t;

struct rma_net {
  const ncclNet_t* net;
  const net_rma_ops_t* ops;
  void* net_ctx; /* the NET transport's: lives longer than this */
  int dev;
  int nranks, me, nsigs; /* nsigs: nctx x nsig */
  void* listen;
  void** send; /* nranks: the comm that writes to each peer; NULL: not over the network */
  void** recv; /* the peers' comms into this rank, kept open */
  int nrecv;
  void* reg;       /* the comm registrations are made on (every comm here shares the device) */
  uint64_t* words; /* nranks x nsigs, added to by the peers */
  void* words_mh;
  uint64_t* scratch; /* where an add's old value lands (one add in flight at a time) */
  void* scratch_mh;
  uint64_t* taken;          /* nranks x nsigs: signals the waits have taken */
  net_rma_key_t* word_keys; /* nranks: each peer's words */
};

struct rma_net_win {
  struct rma_net* rn;
  void* mh;            /* this rank's buffer (NULL: not registered) */
  net_rma_key_t* keys; /* nranks: each rank's buffer; bytes + 1 == 0 marks none (UINT64_MAX) */
};

static const uint64_t RMA_NET_NO_KEY = UINT64_MAX;

bool rma_net_pair(const struct rma_net* rn, int peer) {
  return rn != NULL && peer >= 0 && peer < rn->nranks && rn->send[peer] != NULL;
}

void rma_net_free(struct rma_net* rn) {
  if (rn == NULL) return;
  if (rn->words_mh != NULL) rn->net->deregMr(rn->reg, rn->words_mh);
  if (rn->scratch_mh != NULL) rn->net->deregMr(rn->reg, rn->scratch_mh);
  for (int p = 0; rn->send != NULL && p < rn->nranks; p++)
    if (rn->send[p] != NULL) rn->net->closeSend(rn->send[p]);
  for (int i = 0; i < rn->nrecv; i++) rn->net->closeRecv(rn->recv[i]);
  if (rn->listen != NULL) rn->net->closeListen(rn->listen);
  free(rn->send);
  free(rn->recv);
  free(rn->words);
  free(rn->scratch);
  free(rn->taken);
  free(rn->word_keys);
  free(rn);
}

/* This rank's offer: a listen handle when it can write one-sidedly; false otherwise (it still
 * takes part in the exchanges). */
static bool rma_net_listen(ncclComm_t comm, struct rma_net* rn, char* handle) {
  comm_res_t* r = comm->resources;
  if (r->dev_tables || r->simulated) return false; /* GPU memory: the bootstrap path (see docs) */
  if (transport_net_context(&r->tctx, &rn->net, &rn->net_ctx, &rn->dev) != ncclSuccess) {
    INFO(NCCL_NET,
         "RMA: rank %d has no network; one-sided operations between hosts take the "
         "bootstrap",
         comm->rank);
    return false;
  }
  rn->ops = net_rma_ops(rn->net);
  if (rn->ops == NULL || !rn->ops->can_add(rn->dev)) {
    INFO(NCCL_NET,
         "RMA: network %s has no one-sided writes and adds (RDMA atomics) here; one-sided "
         "operations between hosts take the bootstrap",
         rn->net->name);
    return false;
  }
  if (rn->net->listen(rn->net_ctx, rn->dev, handle, &rn->listen) != ncclSuccess) {
    INFO(NCCL_NET, "RMA: rank %d cannot listen on network device %d; the bootstrap it is",
         comm->rank, rn->dev);
    rn->listen = NULL;
    return false;
  }
  return true;
}

/* Connects to every peer in want[] and accepts as many; bounded by NCCL_BOOTSTRAP_TIMEOUT_MS and
 * the abort flag. */
static ncclResult_t rma_net_connect(ncclComm_t comm, struct rma_net* rn, rma_net_offer_t* offers,
                                    const bool* want) {
  int nwant = 0, nconnected = 0;
  for (int p = 0; p < rn->nranks; p++) nwant += want[p];
  uint64_t limit_ms = (uint64_t)param_int(PARAM_BOOTSTRAP_TIMEOUT_MS);
  uint64_t deadline = clock_ns() + limit_ms * 1000000ull;
  ncclNetDeviceHandle_t* dev_handle = NULL;
  while (nconnected < nwant || rn->nrecv < nwant) {
    for (int p = 0; p < rn->nranks; p++) {
      if (!want[p] || rn->send[p] != NULL) continue;
      CHECK(rn->net->connect(rn->net_ctx, rn->dev, offers[p].handle, &rn->send[p], &dev_handle));
      nconnected += rn->send[p] != NULL;
    }
    if (rn->nrecv < nwant) {
      void* c = NULL;
      CHECK(rn->net->accept(rn->listen, &c, &dev_handle));
      if (c != NULL) rn->recv[rn->nrecv++] = c;
    }
    if (nconnected == nwant && rn->nrecv == nwant) break;
    if (comm->abort_flag != NULL && __atomic_load_n(comm->abort_flag, __ATOMIC_ACQUIRE)) {
      INFO(NCCL_NET, "RMA: connecting rank %d's one-sided connections aborted", comm->rank);
      return ncclInternalError;
    }
    if (clock_ns() > deadline) {
      WARN(
          "RMA: rank %d made %d of %d one-sided connections and accepted %d in %llu ms "
          "(NCCL_BOOTSTRAP_TIMEOUT_MS)",
          comm->rank, nconnected, nwant, rn->nrecv, (unsigned long long)limit_ms);
      return ncclRemoteError;
    }
    struct timespec nap = {.tv_sec = 0, .tv_nsec = 200000};
    nanosleep(&nap, NULL);
  }
  return ncclSuccess;
}

/* The signal words and the adds' scratch word, registered; key gets the words' key. */
static ncclResult_t rma_net_words(struct rma_net* rn, net_rma_key_t* key) {
  size_t bytes = (size_t)rn->nranks * (size_t)rn->nsigs * sizeof(uint64_t);
  CHECK(rn->net->regMr(rn->reg, rn->words, bytes, NCCL_PTR_HOST, &rn->words_mh));
  CHECK(rn->net->regMr(rn->reg, rn->scratch, sizeof(uint64_t), NCCL_PTR_HOST, &rn->scratch_mh));
  return rn->ops->key(rn->words_mh, rn->words, bytes, key);
}

/* Collective: the connections and signal words (the file's comment, steps 1 and 2). Local
 * trouble withdraws this rank's offer; only a failed exchange is an error. */
static ncclResult_t rma_net_setup(ncclComm_t comm, struct rma_net** out) {
  const int n = comm->nranks, me = comm->rank;
  struct rma_net* rn = NULL;
  rma_net_offer_t* offers = NULL;
  bool* want = NULL;
  ncclResult_t res = ncclSuccess;
  int nctx = 1, nsig = 1;
  comm_rma_shape(comm, &nctx, &nsig);
  CHECK(MEM_CALLOC(&rn, 1));
  rn->nranks = n;
  rn->me = me;
  rn->nsigs = nctx * nsig;
  const size_t nw = (size_t)n * (size_t)rn->nsigs;
  CHECK_GOTO(MEM_CALLOC(&rn->send, (size_t)n), res, fail);
  CHECK_GOTO(MEM_CALLOC(&rn->recv, (size_t)n), res, fail);
  CHECK_GOTO(MEM_CALLOC(&rn->words, nw), res, fail);
  CHECK_GOTO(MEM_CALLOC(&rn->scratch, 1), res, fail);
  CHECK_GOTO(MEM_CALLOC(&rn->taken, nw), res, fail);
  CHECK_GOTO(MEM_CALLOC(&rn->word_keys, (size_t)n), res, fail);
  CHECK_GOTO(MEM_CALLOC(&offers, (size_t)n), res, fail);
  CHECK_GOTO(MEM_CALLOC(&want, (size_t)n), res, fail);
  offers[me].ok = rma_net_listen(comm, rn, offers[me].handle);
  CHECK_GOTO(bootstrap_allgather(comm->bootstrap, offers, sizeof(*offers)), res, fail);
  int nwant = 0;
  for (int p = 0; p < n; p++) {
    want[p] = p != me && offers[me].ok && offers[p].ok &&
              comm->peers[p].host_hash != comm->peers[me].host_hash;
    nwant += want[p];
  }
  bool up = nwant > 0;
  if (up && rma_net_connect(comm, rn, offers, want) != ncclSuccess) up = false;
  if (up) {
    rn->reg = rn->recv[0];
    if (rma_net_words(rn, &offers[me].words) != ncclSuccess) up = false;
  }
  offers[me].ok = up;
  CHECK_GOTO(bootstrap_allgather(comm->bootstrap, offers, sizeof(*offers)), res, fail);
  int npairs = 0;
  for (int p = 0; p < n; p++) {
    if (want[p] && up && offers[p].ok) {
      rn->word_keys[p] = offers[p].words;
      npairs++;
      continue;
    }
    if (rn->send[p] != NULL) rn->net->closeSend(rn->send[p]);
    rn->send[p] = NULL;
  }
  if (npairs > 0)
    INFO(NCCL_INIT | NCCL_NET,
         "RMA: rank %d writes one-sidedly over NET/%s device %d to %d peer(s) on other hosts; "
         "%d signal word(s) per peer",
         me, rn->net->name, rn->dev, npairs, rn->nsigs);
  else
    INFO(NCCL_INIT | NCCL_NET,
         "RMA: rank %d: no peer on another host is reached by one-sided writes; one-sided "
         "operations take the bootstrap",
         me);
  free(offers);
  free(want);
  *out = rn;
  return ncclSuccess;
fail:
  free(offers);
  free(want);
  rma_net_free(rn);
  return res;
}

void rma_net_window_close(struct rma_net_win* w) {
  if (w == NULL) return;
  if (w->mh != NULL) w->rn->net->deregMr(w->rn->reg, w->mh);
  free(w->keys);
  free(w);
}

ncclResult_t rma_net_window_open(ncclComm_t comm, void* buff, size_t bytes,
                                 struct rma_net_win** out) {
  comm_res_t* r = comm->resources;
  *out = NULL;
  if (r->rma_net == NULL) CHECK(rma_net_setup(comm, &r->rma_net));
  struct rma_net* rn = r->rma_net;
  const int n = comm->nranks, me = comm->rank;
  struct rma_net_win* w = NULL;
  ncclResult_t res = ncclSuccess;
  CHECK(MEM_CALLOC(&w, 1));
  w->rn = rn;
  CHECK_GOTO(MEM_CALLOC(&w->keys, (size_t)n), res, fail);
  w->keys[me].bytes = RMA_NET_NO_KEY;
  bool pairs = false;
  for (int p = 0; p < n; p++) pairs |= rma_net_pair(rn, p);
  if (pairs && bytes > 0 &&
      rn->net->regMr(rn->reg, buff, bytes, NCCL_PTR_HOST, &w->mh) == ncclSuccess &&
      rn->ops->key(w->mh, buff, bytes, &w->keys[me]) != ncclSuccess)
    w->keys[me].bytes = RMA_NET_NO_KEY; /* registration failed: logged by the network */
  if (pairs && bytes == 0) w->keys[me] = (net_rma_key_t){.bytes = 0};
  CHECK_GOTO(bootstrap_allgather(comm->bootstrap, w->keys, sizeof(*w->keys)), res, fail);
  if (!pairs) { /* every rank took part; none writes into it */
    rma_net_window_close(w);
    return ncclSuccess;
  }
  INFO(NCCL_REG, "RMA: window %p (%zu bytes) registered on NET/%s for one-sided writes%s", buff,
       bytes, rn->net->name, w->keys[me].bytes == RMA_NET_NO_KEY ? " (failed here)" : "");
  *out = w;
  return ncclSuccess;
fail:
  rma_net_window_close(w);
  return res;
}

bool rma_net_window_peer(const struct rma_net_win* w, int peer, size_t* bytes) {
  if (w == NULL || peer < 0 || peer >= w->rn->nranks || w->keys[peer].bytes == RMA_NET_NO_KEY)
    return false;
  *bytes = (size_t)w->keys[peer].bytes;
  return true;
}

/* Waits for the requests in reqs[0..n) (NULL entries are done), bounded by the abort flag. */
static ncclResult_t rma_net_drain(ncclComm_t comm, struct rma_net* rn, void** reqs, int n) {
  for (int i = 0; i < n; i++) {
    int done = 0;
    while (reqs[i] != NULL) {
      CHECK(rn->net->test(reqs[i], &done, NULL));
      if (done) {
        reqs[i] = NULL;
        break;
      }
      if (comm->abort_flag != NULL && __atomic_load_n(comm->abort_flag, __ATOMIC_ACQUIRE))
        return ncclInternalError;
    }
  }
  return ncclSuccess;
}

/* One write of bytes at data, or (data NULL) an add of 1 to a word, posted once the network takes
 * it (earlier ones are waited for meanwhile). */
static ncclResult_t rma_net_post(ncclComm_t comm, struct rma_net* rn, int peer, const void* data,
                                 size_t bytes, void* mh, const net_rma_key_t* dst, uint64_t off,
                                 void** reqs, int* nreqs) {
  if (*nreqs == RMA_NET_INFLIGHT) {
    CHECK(rma_net_drain(comm, rn, reqs, *nreqs));
    *nreqs = 0;
  }
  for (;;) {
    void* req = NULL;
    if (data != NULL)
      CHECK(rn->ops->iput(rn->send[peer], data, bytes, mh, dst, off, &req));
    else
      CHECK(rn->ops->iadd(rn->send[peer], rn->scratch, rn->scratch_mh, dst, off, 1, &req));
    if (req != NULL) {
      reqs[(*nreqs)++] = req;
      return ncclSuccess;
    }
    CHECK(rma_net_drain(comm, rn, reqs, *nreqs)); /* full: let earlier ones finish */
    *nreqs = 0;
  }
}

ncclResult_t rma_net_put(ncclComm_t comm, const struct rma_net_win* w, int peer, int sig,
                         const void* src, size_t off, size_t bytes) {
  struct rma_net* rn = comm->resources->rma_net;
  void* reqs[RMA_NET_INFLIGHT];
  int nreqs = 0;
  void* mh = NULL;
  ncclResult_t res = ncclSuccess;
  if (bytes > 0) {
    size_t have = 0;
    if (!rma_net_window_peer(w, peer, &have)) {
      WARN(
          "ncclPutSignal: rank %d's window could not be registered with NET/%s (see its log); "
          "no one-sided write into it is possible",
          peer, rn->net->name);
      return ncclInvalidUsage;
    }
    if (off > have || bytes > have - off) {
      WARN("ncclPutSignal: %zu bytes at offset %zu do not fit rank %d's window of %zu bytes", bytes,
           off, peer, have);
      return ncclInvalidArgument;
    }
    CHECK(rn->net->regMr(rn->send[peer], (void*)src, bytes, NCCL_PTR_HOST, &mh));
    size_t piece = rn->ops->max_put < RMA_NET_PIECE ? rn->ops->max_put : RMA_NET_PIECE;
    for (size_t done = 0; done < bytes && res == ncclSuccess; done += piece) {
      size_t len = bytes - done < piece ? bytes - done : piece;
      res = rma_net_post(comm, rn, peer, (const char*)src + done, len, mh, &w->keys[peer],
                         off + done, reqs, &nreqs);
    }
  }
  /* The signal: 1 added to the peer's word for (this rank, sig), after the data. */
  size_t word = ((size_t)rn->me * (size_t)rn->nsigs + (size_t)sig) * sizeof(uint64_t);
  if (res == ncclSuccess)
    res = rma_net_post(comm, rn, peer, NULL, 0, NULL, &rn->word_keys[peer], word, reqs, &nreqs);
  ncclResult_t drained = rma_net_drain(comm, rn, reqs, nreqs);
  if (res == ncclSuccess) res = drained;
  if (mh != NULL) rn->net->deregMr(rn->send[peer], mh);
  if (res == ncclSuccess)
    TRACE(NCCL_NET, "RMA: %zu bytes and signal index %d written to rank %d over NET/%s", bytes, sig,
          peer, rn->net->name);
  return res;
}

ncclResult_t rma_net_wait(ncclComm_t comm, int peer, int sig, uint64_t count) {
  struct rma_net* rn = comm->resources->rma_net;
  size_t k = (size_t)peer * (size_t)rn->nsigs + (size_t)sig;
  const uint64_t want = rn->taken[k] + count;
  uint64_t next_check = clock_ns() + RMA_NET_CHECK_NS;
  unsigned spins = 0;
  while (__atomic_load_n(&rn->words[k], __ATOMIC_ACQUIRE) < want) {
    if (comm->abort_flag != NULL && __atomic_load_n(comm->abort_flag, __ATOMIC_ACQUIRE))
      return ncclInternalError;
    if (++spins < 1000) continue;
    uint64_t now = clock_ns();
    if (now > next_check) {
      next_check = now + RMA_NET_CHECK_NS;
      ncclResult_t res = rn->ops->check(rn->send[peer]);
      if (res != ncclSuccess) {
        WARN(
            "ncclWaitSignal: rank %d waits for signals from rank %d (%llu of %llu arrived), "
            "which is gone",
            comm->rank, peer,
            (unsigned long long)(__atomic_load_n(&rn->words[k], __ATOMIC_ACQUIRE) - rn->taken[k]),
            (unsigned long long)count);
        return res;
      }
    }
    struct timespec nap = {.tv_sec = 0, .tv_nsec = 20000};
    nanosleep(&nap, NULL);
  }
  rn->taken[k] = want;
  return ncclSuccess;
}

bool rma_net_wanted(ncclComm_t comm, int peer) {
  comm_res_t* r = comm->resources;
  const ncclNet_t* net = NULL;
  void* net_ctx = NULL;
  int dev = 0;
  if (peer == comm->rank || comm->peers[peer].host_hash == comm->peers[comm->rank].host_hash ||
      r->dev_tables || r->simulated)
    return false;
  return transport_net_context(&r->tctx, &net, &net_ctx, &dev) == ncclSuccess &&
         net_rma_ops(net) != NULL;
}
