/* Host executor internals (private to src/device/host). The host executor runs a plan's work
 * items on CPU threads, one per channel, over the conn_fifo_t format of device.h.
 *
 * Shape:
 *   exec.c   executor_host_ops: worker threads, launch, the channel loop and its bounded waits
 *   lanes.c  turns work items into lanes (resumable sequences of steps) and progresses them
 *   steps.c  the step math of vocab/vocab.h (shared with the CUDA executor), roles to peers
 *   prims.c  one step over the FIFOs: readiness, Simple and LL slots, reduce, publish
 *
 * A step receives at most one slot from each of up to STEP_MAX_PEERS peers, combines it with
 * this rank's data, writes the user's output and fills one slot to each of up to
 * STEP_MAX_PEERS peers. A step runs only when all of its connections are ready, so it never
 * blocks: a channel progresses all its active lanes round-robin and waits only when none moved. */
#ifndef BATON_DEVICE_HOST_EXEC_H
#define BATON_DEVICE_HOST_EXEC_H

#include <pthread.h>
#include <stdbool.h>

#include "base/base.h"
#include "device/device.h"
#include "vocab/vocab.h"

/* Stands for "no peer" in step and lane fields. */
#define HOST_NO_PEER (-1)

/* ---- Steps ------------------------------------------------------------------------------------
 */
typedef struct host_step {
  const char* local; /* this rank's data for the step (NULL: none) */
  char* out;         /* the user's output for the step (NULL: none) */
  size_t nelem;      /* elements (bytes for point-to-point) */
  int nrecv, nsend;
  int recv_peer[STEP_MAX_PEERS];
  int send_peer[STEP_MAX_PEERS];
  bool reduce; /* combine local and received data with the op (local gets the pre-op); else copy */
  bool postop; /* the result is final: apply host_postop before writing and sending it */
  int local_pos;            /* step_t's: >= 0, every source pre-op'd, combined in rank order */
  size_t part, peer_stride; /* step_t's per-peer spans (steps_peer_span) */
} host_step_t;

/* ---- Lanes ------------------------------------------------------------------------------------
 */
/* One resumable sequence of steps: step k for k in [pos, nops) is a pure function of the lane's
 * geometry (vocab/vocab.h, the rules both executors share); the peers fill its roles. */
typedef struct host_lane {
  step_lane_t geo;
  uint8_t dtype;
  const dev_redop_t* op;
  size_t pos, nops;
  int prev, next;               /* ring neighbours */
  int up;                       /* tree parent (HOST_NO_PEER at the root) */
  int down[TREE_MAX_CHILDREN];  /* tree children, geo.ndown of them */
  int peer;                     /* point-to-point */
  int dpeer[STEP_MAX_PEERS];    /* direct lanes: the other ranks, in rank order */
  const struct host_lane* gate; /* step k waits until gate->pos > k (tree root: down after up) */
  int pred;                     /* index in the segment of a lane that must finish first, -1 */
  /* The peers the last blocked attempt waited on (every not-ready connection of the step). */
  int nwait;
  int wait_peers[2 * STEP_MAX_PEERS];
} host_lane_t;

/* ---- Channels and the executor ----------------------------------------------------------------
 */
#define HOST_STAGES (STEP_MAX_PEERS + 1) /* LL: one per received slot, one for the send data */
#define HOST_STAGE_SEND STEP_MAX_PEERS

struct host_exec;
typedef struct host_chan {
  struct host_exec* ex;
  int id;
  pthread_t thread;
  bool started;
  uint64_t gen_seen;   /* the launch generation the worker starts from */
  bool active;         /* has work in the current launch */
  const work_t* works; /* this launch's list */
  int nwork;
  /* LL staging: unpacked received data and data to pack (grows to the largest LL step). */
  char* stage[HOST_STAGES];
  size_t stage_bytes;
  /* Lanes of the current item or point-to-point segment (grows to the largest segment). */
  host_lane_t* lanes;
  int lanes_cap;
  /* Waiting. */
  unsigned idle; /* passes in a row that moved nothing */
  uint64_t idle_since_ns, last_check_ns;
  /* What the channel waits on while it sleeps (host_chan_idle writes, the progress watch reads
   * from another thread: waits). wait_peer < 0 while the channel moves. */
  int wait_peer, wait_is_send;
  uint64_t wait_step, wait_since_ns;
} host_chan_t;

typedef struct host_exec {
  const exec_comm_t* comm; /* borrowed: stays valid and current until fini */
  pthread_mutex_t mu;
  pthread_cond_t wake; /* workers wait for a new launch (gen) or quit */
  pthread_cond_t done; /* launch waits for pending to reach 0 */
  uint64_t gen;
  int pending;
  bool quit;
  volatile int stop;   /* a channel failed: the others give up at their next wait */
  ncclResult_t result; /* the first failure of the current launch */
  /* Launches issued, begun and finished (exec_progress_t; atomics, read from other threads). */
  uint64_t launched, started, finished;
  int in_launch;       /* launches running now (under mu): fini waits for them to leave */
  pthread_cond_t left; /* signalled when in_launch drops to 0 */
  host_chan_t chans[PLAN_MAX_CHANNELS];
} host_exec_t;

/* ---- steps.c: the shared step math with peers for roles ------------------------------------ */
/* Number of steps of a lane whose geometry is set. */
size_t host_lane_nops(const host_lane_t* ln);
/* Step k < nops of the lane. */
void host_lane_step(const host_lane_t* ln, size_t k, host_step_t* st);

/* ---- prims.c: FIFO access ------------------------------------------------------------------- */
/* Data bytes one slot of the FIFO holds for proto (0 when the FIFO has no buffer for it). */
size_t host_fifo_capacity(const conn_fifo_t* f, int proto);
/* Runs step st of lane ln if every connection it uses is ready: *ran says whether it did. On
 * not ready, ln->wait_peers names every peer whose connection is not ready. Errors: a missing
 * connection, a slot whose size disagrees with the step (the two sides run different plans). */
ncclResult_t host_step_try(host_chan_t* ch, host_lane_t* ln, const host_step_t* st, bool* ran);

/* ---- lanes.c: work items to lanes, progress ------------------------------------------------- */
/* Runs one collective work item, or a segment of consecutive point-to-point items, to completion
 * on channel ch (waiting through host_chan_idle). */
ncclResult_t host_coll_run(host_chan_t* ch, const work_t* w);
ncclResult_t host_p2p_run(host_chan_t* ch, const work_t* works, int nwork);
/* Runs a channel's whole list: collectives one after another, p2p runs as segments. */
ncclResult_t host_list_run(host_chan_t* ch, const work_t* works, int nwork);

/* ---- exec.c ------------------------------------------------------------------------------- */
/* Called after a pass over the active lanes that moved nothing: spins, then yields, then sleeps;
 * fails on the abort flag or another channel's failure, and every ~100 ms asks peer_check about
 * every peer the blocked lanes wait on. */
ncclResult_t host_chan_idle(host_chan_t* ch, const host_lane_t* lanes, int nlanes);
static inline void host_chan_busy(host_chan_t* ch) {
  ch->idle = 0;
  if (ch->wait_peer >= 0) __atomic_store_n(&ch->wait_peer, -1, __ATOMIC_RELAXED);
}
/* Makes sure every LL staging buffer holds bytes. */
ncclResult_t host_chan_stage_reserve(host_chan_t* ch, size_t bytes);
/* The channel as the communicator describes it (ring, tree, connections). */
static inline const dev_channel_t* host_chan_dev(const host_chan_t* ch) {
  return &ch->ex->comm->channels[ch->id];
}

#endif /* BATON_DEVICE_HOST_EXEC_H */
