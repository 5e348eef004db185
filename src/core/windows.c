/* Shared windows: user buffers every rank of the communicator can read in place (device.h,
 * "Registered windows read in place").
 *
 * comm_window_share is collective (ncclCommWindowRegister is): every rank exports its buffer
 * (transport's share_export), the descriptions are allgathered, every rank maps every peer's, and
 * a second allgather tells whether all of them managed; only then is the window shared. A shared
 * window takes the lowest slot free on this rank; the ranks register in the same order, so they
 * pick the same slot, and the table is indexed by each rank's own slot all the same
 * (zc_base[slot_p * nranks + p]), so a rank's descriptor always names an entry that rank filled.
 * Only communicators that can run OneShot share (one host, 2 to DIRECT_MAX_RANKS ranks, every
 * GPU pair P2P): a fact every rank agrees on, so either all take part in the exchange or none.
 * A communicator across hosts maps nothing; its windows are registered with the network for
 * one-sided writes instead (rma_net.c), again on every rank alike. */
#include <stdlib.h>

#include "core/core.h"

struct comm_window {
  int slot;   /* this rank's slot, -1: not shared */
  int* slots; /* nranks: each rank's slot for this window */
  void* buff; /* this rank's buffer */
  share_export_t exp;
  share_map_t* maps;       /* nranks: the peers' buffers mapped here */
  size_t* bytes;           /* nranks: the length of each rank's buffer */
  struct rma_net_win* net; /* across hosts: the network's registrations (slot -1, nothing mapped) */
};

/* The exchange of one rank's window: its description, its slot, and later whether it mapped
 * every peer's. */
typedef struct window_offer {
  share_desc_t desc;
  int32_t slot;
  int32_t mapped_all;
} window_offer_t;

bool comm_windows_possible(const comm_res_t* r) {
  return r != NULL && r->windows_ok;
}

static ncclResult_t windows_tables(ncclComm_t comm, comm_res_t* r) {
  const size_t n = (size_t)ZC_MAX_WINDOWS * (size_t)r->nranks;
  if (r->zc_base == NULL) {
    CHECK(mem_calloc((void**)&r->zc_base, n, sizeof(void*)));
    CHECK(mem_calloc((void**)&r->zc_used, ZC_MAX_WINDOWS, sizeof(uint8_t)));
    r->exec.zc_base = (void* const*)r->zc_base;
  }
  if (r->dev_tables && r->zc_base_dev == NULL) {
    exec_scope_t scope;
    CHECK(r->executor->enter(r->dev, true, &scope));
    ncclResult_t res = ncclSuccess;
    void* p = NULL;
    CUDA_CHECK_GOTO(cudaMalloc(&p, n * sizeof(void*)), res, out); /* filled by windows_sync */
    r->zc_base_dev = p;
    r->exec.zc_base_dev = (void* const*)p;
    p = NULL;
  out:
    if (p != NULL) (void)cudaFree(p);
    r->executor->leave(&scope);
    CHECK(res);
  }
  return ncclSuccess;
}

/* The device copy of the table, after a change (registration is rare: the whole table). */
static ncclResult_t windows_sync(ncclComm_t comm, comm_res_t* r) {
  if (r->zc_base_dev == NULL) return ncclSuccess;
  const size_t bytes = (size_t)ZC_MAX_WINDOWS * (size_t)r->nranks * sizeof(void*);
  exec_scope_t scope;
  CHECK(r->executor->enter(r->dev, true, &scope));
  ncclResult_t res = ncclSuccess;
  CUDA_CHECK_GOTO(cudaMemcpy(r->zc_base_dev, r->zc_base, bytes, cudaMemcpyHostToDevice), res, out);
out:
  r->executor->leave(&scope);
  return res;
}

/* Rank p's entry for slot s (its own numbering). */
static void** windows_entry(comm_res_t* r, int s, int p) {
  return &r->zc_base[(size_t)s * (size_t)r->nranks + (size_t)p];
}

static void window_release(comm_window_t* w, int nranks) {
  if (w == NULL) return;
  rma_net_window_close(w->net);
  if (w->maps != NULL)
    for (int p = 0; p < nranks; p++) share_unmap(&w->maps[p]);
  share_revoke(&w->exp);
  free(w->maps);
  free(w->slots);
  free(w->bytes);
  free(w);
}

static ncclResult_t windows_track(comm_res_t* r, comm_window_t* w) {
  if (r->nwindows == r->windows_cap) {
    int cap = r->windows_cap ? 2 * r->windows_cap : 8;
    comm_window_t** p = realloc(r->windows, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      WARN("Window sharing: out of memory for %d windows", cap);
      return ncclSystemError;
    }
    r->windows = p;
    r->windows_cap = cap;
  }
  r->windows[r->nwindows++] = w;
  return ncclSuccess;
}

/* A communicator across hosts: nothing mapped, the buffer registered with the network for the
 * peers' one-sided writes (rma_net.c; collective). *out stays NULL when no pair writes so. */
static ncclResult_t window_net(ncclComm_t comm, void* buff, size_t bytes, comm_window_t** out) {
  comm_res_t* r = comm->resources;
  struct rma_net_win* nw = NULL;
  comm_window_t* w = NULL;
  CHECK(rma_net_window_open(comm, buff, bytes, &nw));
  if (nw == NULL) return ncclSuccess;
  ncclResult_t res = MEM_CALLOC(&w, 1);
  if (res != ncclSuccess) {
    rma_net_window_close(nw);
    return res;
  }
  *w = (comm_window_t){.slot = -1, .buff = buff, .net = nw};
  res = windows_track(r, w);
  if (res != ncclSuccess) {
    window_release(w, r->nranks);
    return res;
  }
  *out = w;
  return ncclSuccess;
}

static ncclResult_t window_share(ncclComm_t comm, void* buff, size_t bytes,
                                 const share_host_mem_t* host, bool internal, int* slot,
                                 comm_window_t** out) {
  comm_res_t* r = comm->resources;
  const int n = comm->nranks, me = comm->rank;
  *slot = -1;
  *out = NULL;
  if (!comm_windows_possible(r))
    return internal || comm->nnodes < 2 ? ncclSuccess : window_net(comm, buff, bytes, out);
  CHECK(windows_tables(comm, r));
  comm_window_t* w = NULL;
  window_offer_t* all = NULL;
  ncclResult_t res = ncclSuccess;
  CHECK_GOTO(MEM_CALLOC(&w, 1), res, fail);
  w->slot = -1;
  w->buff = buff;
  CHECK_GOTO(MEM_CALLOC(&w->slots, (size_t)n), res, fail);
  CHECK_GOTO(MEM_CALLOC(&w->maps, (size_t)n), res, fail);
  CHECK_GOTO(MEM_CALLOC(&w->bytes, (size_t)n), res, fail);
  CHECK_GOTO(MEM_CALLOC(&all, (size_t)n), res, fail);
  int mine = -1;
  for (int s = 0; s < ZC_MAX_WINDOWS && mine < 0; s++)
    if (!r->zc_used[s]) mine = s;
  /* From here on every rank must reach both allgathers: local trouble only withdraws the offer. */
  if (share_export(&comm->peers[me], buff, bytes, host, &all[me].desc, &w->exp) != ncclSuccess) {
    INFO(NCCL_REG, "Window %p: export failed; not shared", buff);
    all[me].desc.kind = SHARE_NONE;
  }
  all[me].slot = mine;
  CHECK_GOTO(bootstrap_allgather(comm->bootstrap, all, sizeof(*all)), res, fail);
  bool mapped = mine >= 0;
  for (int p = 0; p < n && mapped; p++) {
    if (p == me) {
      w->maps[p].base = buff;
      continue;
    }
    if (all[p].slot < 0 ||
        share_import(&comm->peers[me], &all[p].desc, comm->abort_flag, &w->maps[p]) !=
            ncclSuccess ||
        w->maps[p].base == NULL)
      mapped = false;
  }
  all[me].mapped_all = mapped;
  CHECK_GOTO(bootstrap_allgather(comm->bootstrap, all, sizeof(*all)), res, fail);
  bool shared = true;
  for (int p = 0; p < n; p++) shared &= all[p].mapped_all != 0;
  if (!shared) {
    INFO(NCCL_REG,
         "Window %p (%zu bytes): not every rank can map every other's; collectives copy through "
         "the FIFOs",
         buff, bytes);
    window_release(w, n);
    free(all);
    return ncclSuccess;
  }
  w->slot = mine;
  for (int p = 0; p < n; p++) {
    w->slots[p] = all[p].slot;
    w->bytes[p] = p == me ? bytes : all[p].desc.bytes;
    *windows_entry(r, all[p].slot, p) = w->maps[p].base;
  }
  r->zc_used[mine] = 1;
  CHECK_GOTO(windows_sync(comm, r), res, fail);
  CHECK_GOTO(windows_track(r, w), res, fail);
  if (!internal) r->zc_shared = true;
  INFO(NCCL_REG, "Window %p (%zu bytes): shared in slot %d; %s", buff, bytes, mine,
       internal ? "the staged algorithms' staging" : "OneShot reads it in place");
  *slot = mine;
  *out = w;
  free(all);
  return ncclSuccess;
fail:
  if (w != NULL && w->slot >= 0) {
    for (int p = 0; p < n; p++) *windows_entry(r, w->slots[p], p) = NULL;
    r->zc_used[w->slot] = 0;
    (void)windows_sync(comm, r);
  }
  window_release(w, n);
  free(all);
  return res;
}

ncclResult_t comm_window_share(ncclComm_t comm, void* buff, size_t bytes,
                               const share_host_mem_t* host, int* slot, comm_window_t** out) {
  return window_share(comm, buff, bytes, host, false, slot, out);
}

/* Every rank takes part in the sharing's allgathers whatever happens here: a rank that could not
 * allocate offers nothing, and then no rank has staging. The header (flags and round counters)
 * starts at zero; the allocation is then waited for, so no kernel on another stream runs first. */
ncclResult_t comm_stage_init(ncclComm_t comm) {
  comm_res_t* r = comm->resources;
  const int64_t want = param_int(PARAM_STAGE_BYTES);
  if (want <= 0) return ncclSuccess;
  const size_t half = ((size_t)want + 4095) & ~(size_t)4095;
  if (r->stage_virtual) { /* the planner's view of staging, as a real run would share it */
    r->exec.stage_slot = 0;
    r->exec.stage_half = half;
    return ncclSuccess;
  }
  if (!r->dev_tables || !comm_windows_possible(r)) return ncclSuccess;
  const size_t bytes = STAGE_DATA_OFF + 2 * half;
  void* buf = NULL;
  if (cudaMalloc(&buf, bytes) != cudaSuccess || cudaMemset(buf, 0, STAGE_DATA_OFF) != cudaSuccess ||
      cudaStreamSynchronize(0) != cudaSuccess) {
    (void)cudaGetLastError();
    INFO(NCCL_INIT, "Staging: cannot allocate %zu bytes on device %d; no staged algorithms", bytes,
         comm->cuda_dev);
    if (buf != NULL) (void)cudaFree(buf);
    buf = NULL;
  }
  int slot = -1;
  comm_window_t* w = NULL;
  ncclResult_t res = window_share(comm, buf, buf != NULL ? bytes : 0, NULL, true, &slot, &w);
  if (res != ncclSuccess || w == NULL) {
    if (buf != NULL) (void)cudaFree(buf);
    return res;
  }
  /* the kernels index every rank's staging by one slot: the same on every rank (it is, at init) */
  bool same = true;
  for (int p = 0; p < r->nranks; p++) same &= w->slots[p] == slot;
  if (!same) {
    comm_window_unshare(comm, w);
    (void)cudaFree(buf);
    return ncclSuccess;
  }
  r->stage_buf = buf;
  r->stage_bytes = bytes;
  r->exec.stage_slot = slot;
  r->exec.stage_half = half;
  INFO(NCCL_INIT, "comm %p rank %d: staging of 2 x %zu bytes shared in slot %d", (void*)comm,
       r->rank, half, slot);
  return ncclSuccess;
}

ncclResult_t comm_stage_fini(ncclComm_t comm) {
  comm_res_t* r = comm->resources;
  if (r->stage_buf == NULL) return ncclSuccess;
  for (int i = 0; i < r->nwindows; i++) {
    if (r->windows[i]->buff != r->stage_buf) continue;
    comm_window_unshare(comm, r->windows[i]);
    break;
  }
  r->exec.stage_slot = -1;
  ncclResult_t res = ncclSuccess;
  exec_scope_t scope;
  CHECK(r->executor->enter(r->dev, false, &scope));
  CUDA_CHECK_GOTO(cudaFree(r->stage_buf), res, out);
out:
  r->executor->leave(&scope);
  r->stage_buf = NULL;
  r->stage_bytes = 0;
  return res;
}

const struct rma_net_win* comm_window_net(const comm_window_t* w) {
  return w != NULL ? w->net : NULL;
}

void* comm_window_peer(const comm_window_t* w, int peer, size_t* bytes) {
  *bytes = 0;
  if (w == NULL || w->slot < 0 || w->maps == NULL || w->maps[peer].base == NULL) return NULL;
  *bytes = w->bytes[peer];
  return w->maps[peer].base;
}

size_t comm_windows_table_bytes(const comm_res_t* r) {
  const size_t n = (size_t)ZC_MAX_WINDOWS * (size_t)r->nranks;
  size_t bytes = 0;
  if (r->zc_base != NULL) bytes += n * sizeof(void*) + ZC_MAX_WINDOWS * sizeof(uint8_t);
  if (r->zc_base_dev != NULL) bytes += n * sizeof(void*);
  return bytes;
}

void comm_window_unshare(ncclComm_t comm, comm_window_t* w) {
  comm_res_t* r = comm->resources;
  if (w == NULL || r == NULL) return;
  for (int i = 0; i < r->nwindows; i++) {
    if (r->windows[i] != w) continue;
    r->windows[i] = r->windows[--r->nwindows];
    if (w->slot >= 0) {
      /* An entry another window took meanwhile (a peer deregistered first and registered again)
       * stays. */
      for (int p = 0; p < r->nranks; p++) {
        void** e = windows_entry(r, w->slots[p], p);
        if (*e == w->maps[p].base) *e = NULL;
      }
      r->zc_used[w->slot] = 0;
      (void)windows_sync(comm, r);
    }
    window_release(w, r->nranks);
    return;
  }
}

void comm_windows_free(ncclComm_t comm, comm_res_t* r) {
  for (int i = 0; i < r->nwindows; i++) window_release(r->windows[i], r->nranks);
  if (r->stage_buf != NULL && cudaFree(r->stage_buf) != cudaSuccess) (void)cudaGetLastError();
  r->stage_buf = NULL;
  r->stage_bytes = 0;
  r->exec.stage_slot = -1;
  free(r->windows);
  r->windows = NULL;
  r->nwindows = r->windows_cap = 0;
  if (r->zc_base_dev != NULL && cudaFree(r->zc_base_dev) != cudaSuccess)
    (void)cudaGetLastError(); /* teardown: nothing to retry */
  free(r->zc_base);
  free(r->zc_used);
  r->zc_base = NULL;
  r->zc_base_dev = NULL;
  r->zc_used = NULL;
  (void)comm;
}

bool comm_windows_shared(ncclComm_t comm) {
  const comm_res_t* r = comm != NULL ? comm->resources : NULL;
  return r != NULL && r->zc_shared;
}
