/* Max-min fair sharing of links among flows (progressive filling), and a memo of solved flow
 * sets. Pure functions apart from the memo's allocations.
 *
 * Every flow is elastic: it takes what its path allows. All rates start at zero and grow together;
 * a link whose remaining capacity, split evenly among its flows still growing, is the smallest
 * share freezes those flows at that share; a flow whose own cap is smaller freezes at its cap.
 * The frozen rates are subtracted from every link they cross, and filling goes on with the rest.
 * The result is the max-min fair allocation: no flow can gain without taking from one that has
 * less. Links tied within a relative 1e-9 freeze together, so a symmetric set (every rank of a
 * ring on its own NVLink port) takes one round, not one per link. */
#include <math.h>
#include <stdlib.h>

#include "device/sim/sim.h"

#define FS_TIE 1e-9

ncclResult_t sim_fair_share(const sim_flows_t* p, double* rate) {
  ncclResult_t res = ncclSuccess;
  double* left = NULL;
  int* active = NULL;
  int* fresh = NULL; /* flows frozen in this round */
  bool* frozen = NULL;
  int nleft = p->nflows;
  if (p->nflows == 0) return ncclSuccess;
  size_t nl = (size_t)(p->nlinks > 0 ? p->nlinks : 1);
  CHECK_GOTO(MEM_CALLOC(&left, nl), res, out);
  CHECK_GOTO(MEM_CALLOC(&active, nl), res, out);
  CHECK_GOTO(MEM_CALLOC(&fresh, (size_t)p->nflows), res, out);
  CHECK_GOTO(MEM_CALLOC(&frozen, (size_t)p->nflows), res, out);
  for (int l = 0; l < p->nlinks; l++) left[l] = p->cap[l] > 0 ? p->cap[l] : 0;
  for (int f = 0; f < p->nflows; f++) {
    rate[f] = 0;
    for (int k = p->off[f]; k < p->off[f + 1]; k++) {
      int l = p->links[k];
      if (l < 0 || l >= p->nlinks) {
        WARN("sim: flow %d crosses link %d of %d", f, l, p->nlinks);
        res = ncclInternalError;
        goto out;
      }
      active[l]++;
    }
    /* A flow with neither a link nor a cap would grow without bound. */
    if (p->off[f] == p->off[f + 1] && !(p->flow_cap != NULL && p->flow_cap[f] > 0)) {
      WARN("sim: flow %d has no link and no cap", f);
      res = ncclInternalError;
      goto out;
    }
  }
  while (nleft > 0) {
    double share = INFINITY;
    for (int l = 0; l < p->nlinks; l++)
      if (active[l] > 0 && left[l] / active[l] < share) share = left[l] / active[l];
    if (p->flow_cap != NULL)
      for (int f = 0; f < p->nflows; f++)
        if (!frozen[f] && p->flow_cap[f] > 0 && p->flow_cap[f] < share) share = p->flow_cap[f];
    const double tie = share * (1 + FS_TIE);
    /* Every flow held by a link at this share, or by its own cap: judged on the round's shares,
     * before any of them is taken out of its links. */
    int nfresh = 0;
    for (int f = 0; f < p->nflows; f++) {
      if (frozen[f]) continue;
      bool stop = p->flow_cap != NULL && p->flow_cap[f] > 0 && p->flow_cap[f] <= tie;
      for (int k = p->off[f]; k < p->off[f + 1] && !stop; k++) {
        int l = p->links[k];
        stop = left[l] / active[l] <= tie;
      }
      if (stop) fresh[nfresh++] = f;
    }
    if (nfresh == 0) { /* cannot happen: the minimum always holds some flow */
      WARN("sim: fair sharing made no progress with %d flows left", nleft);
      res = ncclInternalError;
      goto out;
    }
    for (int i = 0; i < nfresh; i++) {
      int f = fresh[i];
      frozen[f] = true;
      rate[f] = share;
      nleft--;
      for (int k = p->off[f]; k < p->off[f + 1]; k++) {
        int l = p->links[k];
        left[l] = left[l] > share ? left[l] - share : 0;
        active[l]--;
      }
    }
  }
out:
  free(frozen);
  free(fresh);
  free(active);
  free(left);
  return res;
}

/* ---- The memo -------------------------------------------------------------------------------- */
uint64_t sim_flows_hash(const sim_flows_t* p) {
  uint64_t h = 1469598103934665603ull;
  h ^= hash_bytes(&p->nlinks, sizeof(p->nlinks)) + 0x9e3779b97f4a7c15ull * (uint64_t)p->nflows;
  h = h * 1099511628211ull ^ hash_bytes(p->cap, (size_t)p->nlinks * sizeof(*p->cap));
  h = h * 1099511628211ull ^ hash_bytes(p->off, (size_t)(p->nflows + 1) * sizeof(*p->off));
  h = h * 1099511628211ull ^ hash_bytes(p->links, (size_t)p->off[p->nflows] * sizeof(*p->links));
  if (p->flow_cap != NULL)
    h = h * 1099511628211ull ^ hash_bytes(p->flow_cap, (size_t)p->nflows * sizeof(*p->flow_cap));
  return h;
}

void sim_memo_init(sim_memo_t* m) {
  memset(m, 0, sizeof(*m));
}

void sim_memo_free(sim_memo_t* m) {
  for (int i = 0; i < SIM_MEMO_ENTRIES; i++) free(m->e[i].rate);
  memset(m, 0, sizeof(*m));
}

ncclResult_t sim_fair_share_memo(sim_memo_t* m, const sim_flows_t* p, double* rate, bool* hit) {
  uint64_t h = sim_flows_hash(p);
  *hit = false;
  for (int i = 0; i < SIM_MEMO_ENTRIES; i++) {
    sim_memo_entry_t* e = &m->e[i];
    if (e->rate == NULL || e->hash != h || e->nflows != p->nflows) continue;
    memcpy(rate, e->rate, (size_t)p->nflows * sizeof(*rate));
    e->used = ++m->clock;
    m->hits++;
    *hit = true;
    return ncclSuccess;
  }
  CHECK(sim_fair_share(p, rate));
  m->misses++;
  int victim = 0;
  for (int i = 1; i < SIM_MEMO_ENTRIES; i++)
    if (m->e[i].used < m->e[victim].used) victim = i;
  sim_memo_entry_t* e = &m->e[victim];
  double* copy = malloc((size_t)(p->nflows > 0 ? p->nflows : 1) * sizeof(*copy));
  if (copy == NULL) return ncclSuccess; /* solved, just not remembered */
  memcpy(copy, rate, (size_t)p->nflows * sizeof(*rate));
  free(e->rate);
  *e = (sim_memo_entry_t){.hash = h, .nflows = p->nflows, .rate = copy, .used = ++m->clock};
  return ncclSuccess;
}
