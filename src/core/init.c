/* Communicator creation: ncclGetUniqueId, ncclCommInitRank{,Config,Scalable}, ncclCommInitAll,
 * and comm_init_run (bootstrap, peer info, collectives hook) that split and shrink reuse. */
#include <stdlib.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/core.h"
#include "net/net.h"

NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId* uniqueId) {
  NVTX_API_RANGE("ncclGetUniqueId");
  CHECK(arg_check_ptr(uniqueId, "ncclGetUniqueId", "uniqueId"));
  bootstrap_handle_t handle;
  /* A virtual cluster's ranks all live in this process: an in-process id. */
  if (platform_thread() != NULL)
    CHECK(bootstrap_inproc_id(&handle));
  else
    CHECK(bootstrap_get_unique_id(&handle));
  memset(uniqueId, 0, sizeof(*uniqueId));
  memcpy(uniqueId, &handle, sizeof(handle));
  return ncclSuccess;
}

/* ---- Init proper ------------------------------------------------------------------------------
 */
static uint64_t shm_device_id(void) {
  struct stat st;
  return stat("/dev/shm", &st) == 0 ? (uint64_t)st.st_dev : 0;
}

static void comm_locality(ncclComm_t comm) {
  const peer_info_t* peers = comm->peers;
  uint64_t my_host = peers[comm->rank].host_hash;
  int nnodes = 0, local_ranks = 0, local_rank = 0;
  for (int i = 0; i < comm->nranks; i++) {
    bool first_of_host = true;
    for (int j = 0; j < i && first_of_host; j++)
      if (peers[j].host_hash == peers[i].host_hash) first_of_host = false;
    nnodes += first_of_host;
    if (peers[i].host_hash == my_host) {
      if (i < comm->rank) local_rank++;
      local_ranks++;
    }
  }
  comm->nnodes = nnodes;
  comm->local_ranks = local_ranks;
  comm->local_rank = local_rank;
}

/* What every rank tells the others at init: the layers' peer_info_t, and core's own part (the
 * RAS side channel's address and the host's name), in one allgather. */
typedef struct comm_peer_wire {
  peer_info_t info;
  socket_addr_t ras_addr;
  char host[RAS_HOST_LEN];
} comm_peer_wire_t;

static ncclResult_t comm_peers_allgather(ncclComm_t comm, const socket_addr_t* ras_addr) {
  int n = comm->nranks;
  comm_peer_wire_t* all = NULL;
  CHECK(MEM_CALLOC(&all, n));
  ncclResult_t res = ncclSuccess;
  comm_peer_wire_t* me = &all[comm->rank];
  me->info.rank = comm->rank;
  me->info.cuda_dev = comm->cuda_dev;
  me->info.bus_id = comm->bus_id;
  me->ras_addr = *ras_addr;
  if (comm->platform != NULL) {
    const platform_t* pf = comm->platform;
    platform_identity_t id;
    pf->identity(pf->ctx, comm->rank, &id);
    me->info.host_hash = id.host_hash;
    me->info.pid_hash = id.pid_hash;
    me->info.shm_dev = id.shm_dev;
    me->info.pid = id.pid;
    me->info.simulated = 1;
    snprintf(me->host, sizeof(me->host), "%s", id.host);
  } else {
    me->info.host_hash = host_hash();
    me->info.pid_hash = pid_hash();
    me->info.shm_dev = shm_device_id();
    me->info.pid = (int)getpid();
    snprintf(me->host, sizeof(me->host), "%s", ras_host_label());
  }
  CHECK_GOTO(bootstrap_allgather(comm->bootstrap, all, sizeof(*all)), res, out);
  CHECK_GOTO(MEM_CALLOC(&comm->peers, n), res, out);
  CHECK_GOTO(MEM_CALLOC(&comm->ras_addrs, n), res, out);
  CHECK_GOTO(MEM_CALLOC(&comm->peer_hosts, n), res, out);
  for (int i = 0; i < n; i++) {
    comm->peers[i] = all[i].info;
    comm->ras_addrs[i] = all[i].ras_addr;
    memcpy(comm->peer_hosts[i], all[i].host, RAS_HOST_LEN);
    comm->peer_hosts[i][RAS_HOST_LEN - 1] = '\0';
  }
out:
  free(all);
  return res;
}

static ncclResult_t comm_peers_exchange(ncclComm_t comm, const char* api) {
  socket_addr_t ras_addr;
  if (comm->platform == NULL)
    ras_comm_prepare(comm, &ras_addr);
  else
    memset(&ras_addr, 0, sizeof(ras_addr)); /* virtual ranks: no side channel */
  CHECK(comm_peers_allgather(comm, &ras_addr));
  const peer_info_t* me = &comm->peers[comm->rank];
  for (int i = 0; i < comm->nranks; i++) {
    const peer_info_t* p = &comm->peers[i];
    if (p->rank != i) {
      WARN("%s: peer info exchange is inconsistent: slot %d holds rank %d", api, i, p->rank);
      return ncclInternalError;
    }
    if (i != comm->rank && me->bus_id >= 0 && p->host_hash == me->host_hash &&
        p->bus_id == me->bus_id && param_int(PARAM_MULTI_RANK_GPU_ENABLE) == 0) {
      WARN(
          "%s: duplicate GPU detected: rank %d and rank %d both on CUDA device %llx (set "
          "NCCL_MULTI_RANK_GPU_ENABLE=1 to let ranks share a GPU)",
          api, comm->rank, i, (unsigned long long)me->bus_id);
      return ncclInvalidUsage;
    }
  }
  comm_locality(comm);
  return ncclSuccess;
}

/* ncclConfig_t.netName: Baton uses one network per process (NCCL_NET, else the first that
 * works); a communicator that names another one fails here rather than run over the wrong one.
 * NCCL_NET, when set, wins over netName (as stock). */
static ncclResult_t comm_net_name_check(ncclComm_t comm, const char* api) {
  const char* want = comm->config.netName;
  if (want == NULL || comm->platform != NULL) return ncclSuccess; /* a virtual network */
  if (param_is_set(PARAM_NET)) {
    INFO(NCCL_INIT | NCCL_ENV, "%s: config netName %s overridden by NCCL_NET=%s", api, want,
         param_str(PARAM_NET));
    return ncclSuccess;
  }
  const ncclNet_t* net = NULL;
  CHECK(net_select(&net, NULL));
  if (strcasecmp(net->name, want) != 0) {
    WARN(
        "%s: config netName is %s but this process uses the %s network (Baton picks one network "
        "per process: set NCCL_NET=%s for every communicator instead)",
        api, want, net->name, want);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t comm_init_run(ncclComm_t comm, const bootstrap_handle_t* handles, int nhandles,
                           const char* api) {
  char bus[24];
  uint64_t t_start = clock_ns();
  INFO(NCCL_INIT, "%s comm %p rank %d nranks %d cudaDev %d busId %s commId 0x%llx - Init START",
       api, (void*)comm, comm->rank, comm->nranks, comm->cuda_dev, comm_bus_text(comm->bus_id, bus),
       (unsigned long long)comm->comm_hash);
  CHECK(comm_net_name_check(comm, api));
  uint64_t trace_t0 = trace_now_ns();
  CHECK(progress_create(comm));
  CHECK(bootstrap_init(handles, nhandles, comm->rank, comm->nranks, comm->abort_flag,
                       &comm->bootstrap));
  uint64_t t_boot = clock_ns();
  CHECK(comm_peers_exchange(comm, api));
  uint64_t t_peers = clock_ns();
  CHECK(comm_res_init(comm));
  CHECK(core_upper()->comm_init(comm));
  uint64_t t_end = clock_ns();
  ras_comm_register(comm);
  trace_span(comm, TRACE_INIT, trace_t0, trace_now_ns(), NULL, 0);

  INFO(NCCL_INIT, "comm %p rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL 0",
       (void*)comm, comm->rank, comm->nranks, comm->nnodes, comm->local_ranks, comm->local_rank);
  INFO(NCCL_INIT, "%s comm %p rank %d nranks %d cudaDev %d busId %s commId 0x%llx - Init COMPLETE",
       api, (void*)comm, comm->rank, comm->nranks, comm->cuda_dev, comm_bus_text(comm->bus_id, bus),
       (unsigned long long)comm->comm_hash);
  INFO(NCCL_INIT | NCCL_PROFILE,
       "Init timings - %s: rank %d nranks %d total %.2f (bootstrap %.2f, allgathers %.2f, "
       "collectives %.2f)",
       api, comm->rank, comm->nranks, (t_end - t_start) / 1e9, (t_boot - t_start) / 1e9,
       (t_peers - t_boot) / 1e9, (t_end - t_peers) / 1e9);
  return ncclSuccess;
}

static ncclResult_t init_job_run(comm_job_t* job) {
  ncclComm_t comm = job->owner;
  LOG_SINK_SCOPE(comm->last_error, sizeof(comm->last_error));
  ncclResult_t res = comm_init_run(comm, job->handles, job->nhandles, job->api);
  atomic_store(&comm->state, RESULT_IS_ERROR(res) ? COMM_STATE_ERROR : COMM_STATE_READY);
  atomic_store(&comm->async_error, res);
  return res;
}

/* Device: COMM_DEV_CURRENT means the calling thread's current CUDA device (if any). */
#define COMM_DEV_CURRENT (-2)

/* Checks the arguments and builds the communicator and its init job (not started). */
static ncclResult_t comm_init_prepare(int nranks, const ncclUniqueId* ids, int nids, int rank,
                                      const ncclConfig_t* config, int dev, const char* api,
                                      ncclComm_t* comm_out, comm_job_t** job_out) {
  ncclResult_t res;
  if (nranks < 1) {
    WARN("%s: invalid nranks %d: must be at least 1", api, nranks);
    return ncclInvalidArgument;
  }
  if (rank < 0 || rank >= nranks) {
    WARN("%s: invalid rank %d: must be in 0..%d (nranks %d)", api, rank, nranks - 1, nranks);
    return ncclInvalidArgument;
  }
  if (nids < 1 || nids > nranks) {
    WARN("%s: invalid number of unique ids %d: must be in 1..nranks (%d)", api, nids, nranks);
    return ncclInvalidArgument;
  }
  ncclConfig_t cfg;
  CHECK(config_parse(config, api, &cfg));

  comm_job_t* job;
  CHECK(comm_job_create(api, init_job_run, &job));
  CHECK_GOTO(mem_calloc((void**)&job->handles, nids, sizeof(bootstrap_handle_t)), res, fail_job);
  for (int i = 0; i < nids; i++) memcpy(&job->handles[i], &ids[i], sizeof(bootstrap_handle_t));
  job->nhandles = nids;

  ncclComm_t comm;
  CHECK_GOTO(comm_alloc(&cfg, &comm), res, fail_job);
  /* The root starts last, so a failed prepare leaves none waiting out NCCL_BOOTSTRAP_TIMEOUT_MS. */
  if (param_is_set(PARAM_COMM_ID)) {
    if (nids > 1) {
      INFO(NCCL_INIT | NCCL_ENV, "NCCL_COMM_ID cannot be used with more than one ncclUniqueId");
      job->nhandles = 1;
    }
    if (rank == 0) {
      INFO(NCCL_ENV, "NCCL_COMM_ID set by environment to %s", param_str(PARAM_COMM_ID));
      CHECK_GOTO(bootstrap_root_start(&job->handles[0]), res, fail_comm);
    }
  }
  comm->rank = rank;
  comm->nranks = nranks;
  comm->platform = platform_thread();
  if (comm->platform != NULL) {
    comm->platform->device(comm->platform->ctx, rank, &comm->cuda_dev, &comm->bus_id);
  } else if (dev == COMM_DEV_CURRENT) {
    comm_device_current(&comm->cuda_dev, &comm->bus_id);
  } else {
    comm->cuda_dev = dev;
    comm->bus_id = comm_device_bus_id(dev);
  }
  comm->comm_hash = hash_bytes(&ids[0], sizeof(ncclUniqueId));
  job->owner = comm;
  *comm_out = comm;
  *job_out = job;
  return ncclSuccess;

fail_comm:
  comm_free(comm);
fail_job:
  comm_job_release(job);
  return res;
}

/* Starts the init job on its own thread; the comm keeps a reference to it. */
static ncclResult_t comm_init_start_async(ncclComm_t comm, comm_job_t* job) {
  comm_job_attach(comm, job);
  ncclResult_t res = comm_job_start(job, false);
  comm_job_release(job);
  return res;
}

static ncclResult_t comm_init_entry(ncclComm_t* newcomm, int nranks, const ncclUniqueId* ids,
                                    int nids, int rank, const ncclConfig_t* config,
                                    const char* api) {
  log_version_banner();
  /* The other ranks may be created later in this group. */
  bool grouped = core_upper()->group_open();
  ncclComm_t comm;
  comm_job_t* job;
  ncclResult_t res = arg_check_ptr(newcomm, api, "newcomm");
  if (res == ncclSuccess)
    res = comm_init_prepare(nranks, ids, nids, rank, config, COMM_DEV_CURRENT, api, &comm, &job);
  if (res != ncclSuccess) {
    if (grouped) core_upper()->group_set_error(res);
    return res;
  }
  if (comm->config.blocking && !grouped) {
    res = comm_job_start(job, true);
    comm_job_release(job);
  } else {
    res = comm_init_start_async(comm, job);
  }
  if (grouped && !RESULT_IS_ERROR(res)) {
    ncclResult_t r = core_upper()->group_add_init(comm);
    if (r != ncclSuccess) {
      (void)comm_abort_and_wait(comm);
      res = r;
    } else if (comm->config.blocking) {
      res = ncclSuccess; /* ncclGroupEnd waits for it */
    }
  }
  if (RESULT_IS_ERROR(res)) {
    if (grouped) core_upper()->group_set_error(res);
    comm_free(comm);
    return res;
  }
  *newcomm = comm;
  return res; /* ncclSuccess, or ncclInProgress (nonblocking) */
}

NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t* newcomm, int nranks, ncclUniqueId commId,
         int myrank) {
  NVTX_API_RANGE("ncclCommInitRank");
  return comm_init_entry(newcomm, nranks, &commId, 1, myrank, NULL, "ncclCommInitRank");
}

NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t* newcomm, int nranks, ncclUniqueId commId,
         int myrank, ncclConfig_t* config) {
  NVTX_API_RANGE("ncclCommInitRankConfig");
  return comm_init_entry(newcomm, nranks, &commId, 1, myrank, config, "ncclCommInitRankConfig");
}

NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t* newcomm, int nranks, int myrank,
         int nId, ncclUniqueId* commIds, ncclConfig_t* config) {
  NVTX_API_RANGE("ncclCommInitRankScalable");
  CHECK(arg_check_ptr(commIds, "ncclCommInitRankScalable", "commIds"));
  return comm_init_entry(newcomm, nranks, commIds, nId, myrank, config, "ncclCommInitRankScalable");
}

/* ---- ncclCommInitAll: every rank's init on its own thread, in this process ------------------- */
static ncclResult_t init_all_check_devlist(int ndev, const int* devlist, int ngpu) {
  const char* api = "ncclCommInitAll";
  if (devlist == NULL) {
    if (ngpu > 0 && ndev > ngpu) {
      WARN("%s: ndev %d exceeds the %d visible CUDA devices; pass a devlist", api, ndev, ngpu);
      return ncclInvalidArgument;
    }
    return ncclSuccess;
  }
  for (int i = 0; i < ndev; i++) {
    if (devlist[i] < 0 || (ngpu > 0 && devlist[i] >= ngpu)) {
      WARN("%s: invalid device %d in devlist[%d] (%d CUDA devices visible)", api, devlist[i], i,
           ngpu);
      return ncclInvalidArgument;
    }
    for (int j = 0; j < i && param_int(PARAM_MULTI_RANK_GPU_ENABLE) == 0; j++) {
      if (devlist[j] == devlist[i]) {
        WARN(
            "%s: device %d appears twice in devlist (entries %d and %d; "
            "NCCL_MULTI_RANK_GPU_ENABLE=1 lets ranks share a GPU)",
            api, devlist[i], j, i);
        return ncclInvalidUsage;
      }
    }
  }
  return ncclSuccess;
}

/* Waits for every started init; once one fails the others are aborted (they would wait for it).
 * Returns the index of the first failed rank, or -1. */
static int init_all_wait(ncclComm_t* comms, int n) {
  int failed = -1;
  for (int i = 0; i < n; i++) {
    while (!comm_job_wait_done(comms[i]->job, 100)) {
      for (int j = 0; j < n && failed < 0; j++)
        if (RESULT_IS_ERROR(atomic_load(&comms[j]->async_error))) failed = j;
      if (failed >= 0)
        for (int j = 0; j < n; j++) __atomic_store_n(comms[j]->abort_flag, 1, __ATOMIC_RELEASE);
    }
  }
  for (int j = 0; j < n && failed < 0; j++)
    if (RESULT_IS_ERROR(atomic_load(&comms[j]->async_error))) failed = j;
  return failed;
}

NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t* comms, int ndev, const int* devlist) {
  NVTX_API_RANGE("ncclCommInitAll");
  const char* api = "ncclCommInitAll";
  ncclResult_t res = ncclSuccess;
  log_version_banner();
  CHECK(arg_check_ptr(comms, api, "comms"));
  if (ndev < 0) {
    WARN("%s: invalid ndev %d: must not be negative", api, ndev);
    return ncclInvalidArgument;
  }
  int ngpu = comm_device_count();
  CHECK(init_all_check_devlist(ndev, devlist, ngpu));
  if (ndev == 0) return ncclSuccess;

  ncclUniqueId id;
  CHECK(pncclGetUniqueId(&id));
  ncclComm_t* local;
  CHECK(MEM_CALLOC(&local, ndev));
  int started = 0;
  for (; started < ndev; started++) {
    int dev = ngpu == 0 ? -1 : (devlist ? devlist[started] : started);
    ncclComm_t comm;
    comm_job_t* job;
    CHECK_GOTO(comm_init_prepare(ndev, &id, 1, started, NULL, dev, api, &comm, &job), res, abort);
    /* Each rank waits for the others: they must run concurrently, whatever config.blocking says
     * (it still applies to later calls on these communicators). */
    res = comm_init_start_async(comm, job);
    if (RESULT_IS_ERROR(res)) {
      comm_free(comm);
      goto abort;
    }
    local[started] = comm;
  }
  res = ncclSuccess;
  int failed = init_all_wait(local, ndev);
  if (failed >= 0) {
    res = (ncclResult_t)atomic_load(&local[failed]->async_error);
    WARN("%s: initialization of rank %d failed: %s", api, failed, local[failed]->last_error);
    goto free_all;
  }
  for (int i = 0; i < ndev; i++) comms[i] = local[i];
  free(local);
  return ncclSuccess;

abort:
  for (int i = 0; i < started; i++) __atomic_store_n(local[i]->abort_flag, 1, __ATOMIC_RELEASE);
  (void)init_all_wait(local, started);
free_all:
  for (int i = 0; i < started; i++) comm_free(local[i]);
  free(local);
  return res;
}
