/* P2P transport: two GPUs of one host, the FIFO in the receiver's GPU memory, the sender writing
 * into it directly (NVLink or PCIe peer access). One block of transport_fifo_bytes() holds the
 * counters and the slot buffers of every protocol (transport_fifo_attach's layout).
 *
 * Counters: head, tail and sizes all live in the receiver's memory, in that block. The receiver
 * polls tail and LL/LL128 flags locally and publishes head locally; the sender's stores (slots,
 * sizes, tail) are posted writes over the link, and the one remote load is the sender reading
 * head when it needs a free slot. (Keeping head in the sender's memory would also turn that load
 * local, at the cost of a second allocation exported the other way; not done.)
 *
 * How the sender reaches the block, decided by the receiver and named in the connect info:
 *   P2P/direct pointer  same process: the device pointer itself (cuMem: the receiver grants the
 *                       sender's device access; cudaMalloc: the sender enables peer access);
 *   P2P/CUMEM           NCCL_CUMEM_ENABLE=1 (default) and the driver supports it: cuMemCreate
 *                       with a POSIX file descriptor handle, exported through the process's
 *                       descriptor server (fd_pass.c); the sender imports, maps, sets access;
 *   P2P/IPC             otherwise: cudaMalloc + cudaIpcGetMemHandle / cudaIpcOpenMemHandle.
 * All CUDA work runs with the connection's device current (restored after) and in relaxed
 * stream-capture mode, since connections may appear while the user captures a graph. */
#include <stdlib.h>
#include <unistd.h>

#include "transport/transport.h"

#define P2P_INFO_MAGIC 0x50325031u /* "P2P1" */
#define P2P_IMPORT_TIMEOUT_MS 30000

typedef enum { P2P_MEM_DIRECT = 1, P2P_MEM_CUMEM = 2, P2P_MEM_IPC = 3 } p2p_kind_t;

typedef struct p2p_info {
  uint32_t magic;
  uint8_t kind;  /* p2p_kind_t */
  uint8_t cumem; /* the block is a cuMem allocation */
  uint16_t pad;
  int32_t recv_dev; /* receiver's CUDA ordinal (in its process) */
  uint64_t pid_hash;
  uint64_t bytes;     /* transport_fifo_bytes(buff_bytes) */
  uint64_t map_bytes; /* the allocation (granularity-rounded for cuMem) */
  uint64_t ptr;       /* DIRECT: the device pointer */
  int32_t buff_bytes[PROTO_COUNT];
  fd_export_t fd;         /* CUMEM */
  cudaIpcMemHandle_t ipc; /* IPC */
} p2p_info_t;
_Static_assert(sizeof(p2p_info_t) <= CONN_INFO_BYTES, "P2P connect info must fit");

typedef struct p2p_res {
  p2p_kind_t kind;
  bool owner; /* receiver: allocated the block */
  int dev;
  void* ptr;
  size_t map_bytes;
  /* cuMem */
  CUmemGenericAllocationHandle handle;
  bool have_handle, reserved, mapped, exported;
  fd_export_t exp;
  /* runtime */
  bool malloced, ipc_open;
} p2p_res_t;

/* ---- Policy ------------------------------------------------------------------------------------
 */
p2p_verdict_t transport_p2p_policy(const transport_ctx_t* ctx, const peer_info_t* me,
                                   const peer_info_t* peer) {
  if (param_int(PARAM_P2P_DISABLE)) return P2P_NO_DISABLED;
  if (!ctx->gpu_fifos) return P2P_NO_HOST_EXEC;
  if (me->host_hash != peer->host_hash) return P2P_NO_OTHER_HOST;
  if (me->cuda_dev < 0 || peer->cuda_dev < 0 || me->bus_id < 0 || peer->bus_id < 0)
    return P2P_NO_GPU;
  if (topo_system_path(ctx->topo, me->bus_id, peer->bus_id) > topo_p2p_level()) return P2P_NO_PATH;
  return P2P_OK;
}

static bool p2p_can_connect(const transport_ctx_t* ctx, const peer_info_t* me,
                            const peer_info_t* peer) {
  if (transport_p2p_policy(ctx, me, peer) != P2P_OK) return false;
  if (me->bus_id == peer->bus_id || ctx->virtual_conns) return true; /* virtual: the path decided */
  int other = topo_gpu_local_ordinal(peer->bus_id);
  if (other < 0) return true; /* not visible here: cuMem and IPC still work; the path decided */
  int ab = 0, ba = 0;
  cudaError_t err = cudaDeviceCanAccessPeer(&ab, me->cuda_dev, other);
  if (err == cudaSuccess) err = cudaDeviceCanAccessPeer(&ba, other, me->cuda_dev);
  if (err != cudaSuccess || !ab || !ba) { /* a probe: the path decides without P2P */
    (void)cudaGetLastError();
    INFO(NCCL_P2P,
         "P2P: CUDA devices %d and %d (rank %d) cannot access each other (%s); not using "
         "P2P between them",
         me->cuda_dev, other, peer->rank,
         err != cudaSuccess ? cudaGetErrorString(err) : "no peer access");
    return false;
  }
  return true;
}

/* ---- CUDA scope: the connection's device, relaxed capture
 * ---------------------------------------- */
typedef struct p2p_scope {
  int saved;
  bool switched;
  enum cudaStreamCaptureMode mode;
} p2p_scope_t;

static ncclResult_t p2p_enter(int dev, p2p_scope_t* s) {
  ncclResult_t res = ncclSuccess;
  s->switched = false;
  s->mode = cudaStreamCaptureModeRelaxed;
  (void)cudaThreadExchangeStreamCaptureMode(&s->mode);
  CUDA_CHECK_GOTO(cudaGetDevice(&s->saved), res, restore_mode);
  if (s->saved != dev) {
    CUDA_CHECK_GOTO(cudaSetDevice(dev), res, restore_mode);
    s->switched = true;
  }
  return ncclSuccess;
restore_mode:
  (void)cudaThreadExchangeStreamCaptureMode(&s->mode);
  return res;
}

static void p2p_leave(p2p_scope_t* s) {
  if (s->switched) (void)cudaSetDevice(s->saved);
  (void)cudaThreadExchangeStreamCaptureMode(&s->mode);
}

static ncclResult_t p2p_zero(void* ptr, size_t bytes) {
  cudaStream_t s;
  ncclResult_t res = ncclSuccess;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_CHECK_GOTO(cudaMemsetAsync(ptr, 0, bytes, s), res, destroy);
  CUDA_CHECK_GOTO(cudaStreamSynchronize(s), res, destroy);
destroy:
  (void)cudaStreamDestroy(s);
  return res;
}

/* ---- Resources
 * ----------------------------------------------------------------------------------- */
static void p2p_res_free(p2p_res_t* r) {
  if (r == NULL) return;
  p2p_scope_t s;
  bool entered = r->dev >= 0 && p2p_enter(r->dev, &s) == ncclSuccess;
  const cu_driver_t* d = cu_driver();
  if (d != NULL) {
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)r->ptr;
    if (r->mapped) (void)d->mem_unmap(p, r->map_bytes);
    if (r->reserved) (void)d->mem_address_free(p, r->map_bytes);
    if (r->have_handle) (void)d->mem_release(r->handle);
  }
  if (r->exported) fd_pass_revoke(&r->exp);
  if (r->ipc_open) (void)cudaIpcCloseMemHandle(r->ptr);
  if (r->malloced) (void)cudaFree(r->ptr);
  (void)cudaGetLastError();
  if (entered) p2p_leave(&s);
  free(r);
}

/* Receiver: a cuMem block on dev, accessible from dev and (same process) from peer_dev. */
static ncclResult_t p2p_cumem_alloc(int dev, int peer_dev, size_t bytes, bool shareable,
                                    p2p_res_t* r) {
  const cu_driver_t* d = cu_driver();
  CUdevice cdev, cpeer;
  CUmemAllocationProp prop;
  size_t gran = 0;
  CUdeviceptr p;
  CU_CHECK(d->device_get(&cdev, dev));
  prop = cu_mem_prop_device(cdev, shareable);
  CU_CHECK(d->mem_get_allocation_granularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  if (gran == 0) gran = 1;
  r->map_bytes = (bytes + gran - 1) / gran * gran;
  CU_CHECK(d->mem_create(&r->handle, r->map_bytes, &prop, 0));
  r->have_handle = true;
  CU_CHECK(d->mem_address_reserve(&p, r->map_bytes, gran, 0, 0));
  r->ptr = (void*)(uintptr_t)p;
  r->reserved = true;
  CU_CHECK(d->mem_map(p, r->map_bytes, 0, r->handle, 0));
  r->mapped = true;
  CUmemAccessDesc acc[2] = {cu_mem_access_rw(cdev)};
  size_t nacc = 1;
  if (peer_dev >= 0 && peer_dev != dev) {
    CU_CHECK(d->device_get(&cpeer, peer_dev));
    acc[nacc++] = cu_mem_access_rw(cpeer);
  }
  CU_CHECK(d->mem_set_access(p, r->map_bytes, acc, nacc));
  return ncclSuccess;
}

/* Sender: import the receiver's block through its exported descriptor and map it for dev. */
static ncclResult_t p2p_cumem_import(transport_ctx_t* ctx, conn_t* conn, const p2p_info_t* pi,
                                     int dev, p2p_res_t* r) {
  const cu_driver_t* d = cu_driver();
  CUdevice cdev;
  CUdeviceptr p;
  int fd = -1;
  if (d == NULL) {
    WARN(
        "P2P: rank %d shares its FIFO as a cuMem allocation but rank %d has no usable CUDA "
        "driver API; set NCCL_CUMEM_ENABLE=0 on every rank",
        conn->peer, ctx->rank);
    return ncclSystemError;
  }
  CHECK(fd_pass_import(&pi->fd, ctx->abort_flag, P2P_IMPORT_TIMEOUT_MS, &fd));
  ncclResult_t res = ncclSuccess;
  CU_CHECK_GOTO(d->mem_import_from_shareable_handle(&r->handle, (void*)(intptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                res, close_fd);
  r->have_handle = true;
close_fd:
  close(fd); /* the handle keeps the allocation */
  CHECK(res);
  r->map_bytes = pi->map_bytes;
  CU_CHECK(d->device_get(&cdev, dev));
  CU_CHECK(d->mem_address_reserve(&p, r->map_bytes, 0, 0, 0));
  r->ptr = (void*)(uintptr_t)p;
  r->reserved = true;
  CU_CHECK(d->mem_map(p, r->map_bytes, 0, r->handle, 0));
  r->mapped = true;
  CUmemAccessDesc acc = cu_mem_access_rw(cdev);
  CU_CHECK(d->mem_set_access(p, r->map_bytes, &acc, 1));
  return ncclSuccess;
}

static void p2p_describe(conn_t* conn, p2p_kind_t kind) {
  snprintf(conn->desc, sizeof(conn->desc), "%s",
           kind == P2P_MEM_DIRECT  ? "P2P/direct pointer"
           : kind == P2P_MEM_CUMEM ? "P2P/CUMEM"
                                   : "P2P/IPC");
}

/* Both ends of a direct-pointer connection may take direct writes into the receiver's output
 * (CONN_FLAG_DIRECT), as stock's P2P/direct pointer does, unless NCCL_P2P_DIRECT_DISABLE=1 (for
 * user buffers that the other GPUs of the process cannot reach: cuMem or memory-pool allocations
 * without peer access). Both ends read the same process's parameter. */
static bool p2p_direct_writes(void) {
  return param_int(PARAM_P2P_DIRECT_DISABLE) == 0;
}
static int p2p_conn_flags(p2p_kind_t kind) {
  return kind == P2P_MEM_DIRECT && p2p_direct_writes() ? CONN_FLAG_DIRECT : 0;
}
/* A direct pointer is what p2p_recv_alloc gives ranks of one process. */
bool transport_p2p_direct_writes(const peer_info_t* a, const peer_info_t* b) {
  return a->pid_hash == b->pid_hash && p2p_direct_writes();
}

/* ---- Receiver
 * ------------------------------------------------------------------------------------ */
static ncclResult_t p2p_recv_alloc(transport_ctx_t* ctx, conn_t* conn, p2p_res_t* r,
                                   p2p_info_t* pi) {
  const peer_info_t* me = &ctx->peers[ctx->rank];
  const peer_info_t* peer = &ctx->peers[conn->peer];
  bool same_proc = me->pid_hash == peer->pid_hash;
  size_t bytes = transport_fifo_bytes(ctx->buff_bytes);
  bool cumem = param_int(PARAM_CUMEM_ENABLE) != 0 && cu_driver() != NULL &&
               cu_mem_fd_supported(me->cuda_dev);
  r->kind = same_proc ? P2P_MEM_DIRECT : cumem ? P2P_MEM_CUMEM : P2P_MEM_IPC;
  if (cumem) {
    CHECK(p2p_cumem_alloc(me->cuda_dev, same_proc ? peer->cuda_dev : -1, bytes, !same_proc, r));
  } else {
    CUDA_CHECK(cudaMalloc(&r->ptr, bytes));
    r->malloced = true;
    r->map_bytes = bytes;
  }
  CHECK(p2p_zero(r->ptr, bytes));
  if (r->kind == P2P_MEM_CUMEM) {
    int fd = -1;
    CU_CHECK(cu_driver()->mem_export_to_shareable_handle(
        &fd, r->handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    ncclResult_t res = fd_pass_export(fd, &r->exp);
    close(fd);
    CHECK(res);
    r->exported = true;
    pi->fd = r->exp;
  } else if (r->kind == P2P_MEM_IPC) {
    CUDA_CHECK(cudaIpcGetMemHandle(&pi->ipc, r->ptr));
  }
  pi->magic = P2P_INFO_MAGIC;
  pi->kind = (uint8_t)r->kind;
  pi->cumem = cumem;
  pi->recv_dev = me->cuda_dev;
  pi->pid_hash = me->pid_hash;
  pi->bytes = bytes;
  pi->map_bytes = r->map_bytes;
  pi->ptr = (uint64_t)(uintptr_t)r->ptr;
  for (int p = 0; p < PROTO_COUNT; p++) pi->buff_bytes[p] = ctx->buff_bytes[p];
  return ncclSuccess;
}

static ncclResult_t p2p_recv_setup(transport_ctx_t* ctx, conn_t* conn, void* info) {
  p2p_res_t* r = NULL;
  p2p_info_t pi;
  p2p_scope_t s;
  memset(&pi, 0, sizeof(pi));
  CHECK(MEM_CALLOC(&r, 1));
  r->owner = true;
  r->dev = ctx->peers[ctx->rank].cuda_dev;
  ncclResult_t res = p2p_enter(r->dev, &s);
  if (res != ncclSuccess) {
    free(r);
    return res;
  }
  res = p2p_recv_alloc(ctx, conn, r, &pi);
  p2p_leave(&s);
  if (res != ncclSuccess) {
    p2p_res_free(r);
    return res;
  }
  transport_fifo_attach(&conn->fifo, r->ptr, ctx->buff_bytes, p2p_conn_flags(r->kind));
  memcpy(info, &pi, sizeof(pi));
  conn->priv = r;
  conn->bytes = r->map_bytes; /* the block is this side's; the sender only maps it */
  p2p_describe(conn, r->kind);
  return ncclSuccess;
}

static ncclResult_t p2p_recv_connect(transport_ctx_t* ctx, conn_t* conn) {
  return ncclSuccess; /* the sender needs nothing more from the receiver */
}

/* ---- Sender
 * -------------------------------------------------------------------------------------- */
static ncclResult_t p2p_send_attach(transport_ctx_t* ctx, conn_t* conn, const p2p_info_t* pi,
                                    p2p_res_t* r) {
  const peer_info_t* me = &ctx->peers[ctx->rank];
  switch (pi->kind) {
    case P2P_MEM_DIRECT:
      if (pi->pid_hash != me->pid_hash) {
        WARN("P2P: rank %d sent a direct pointer but runs in another process than rank %d",
             conn->peer, ctx->rank);
        return ncclInternalError;
      }
      r->ptr = (void*)(uintptr_t)pi->ptr;
      if ((!pi->cumem || p2p_direct_writes()) && pi->recv_dev != r->dev) {
        /* cudaMalloc'd memory of another device of this process: needs peer access (cuMem memory
         * got access for this device from the receiver already), and so do direct writes into
         * the receiver's output (the user's cudaMalloc'd buffers). */
        CUDA_CHECK(cuda_accept(cudaDeviceEnablePeerAccess(pi->recv_dev, 0),
                               cudaErrorPeerAccessAlreadyEnabled));
      }
      return ncclSuccess;
    case P2P_MEM_CUMEM:
      return p2p_cumem_import(ctx, conn, pi, r->dev, r);
    case P2P_MEM_IPC:
      CUDA_CHECK(cudaIpcOpenMemHandle(&r->ptr, pi->ipc, cudaIpcMemLazyEnablePeerAccess));
      r->ipc_open = true;
      return ncclSuccess;
    default:
      WARN("P2P: connect info from rank %d names an unknown memory kind %d", conn->peer, pi->kind);
      return ncclInternalError;
  }
}

static ncclResult_t p2p_send_connect(transport_ctx_t* ctx, conn_t* conn, const void* info) {
  p2p_info_t pi;
  p2p_res_t* r = NULL;
  p2p_scope_t s;
  memcpy(&pi, info, sizeof(pi));
  if (pi.magic != P2P_INFO_MAGIC || pi.bytes != transport_fifo_bytes(pi.buff_bytes) ||
      pi.map_bytes < pi.bytes) {
    WARN(
        "P2P: malformed connect info from rank %d (channel %d): is every rank running the same "
        "Baton build?",
        conn->peer, conn->channel);
    return ncclInternalError;
  }
  pi.fd.name[FD_PASS_NAME_MAX - 1] = '\0';
  CHECK(MEM_CALLOC(&r, 1));
  r->dev = ctx->peers[ctx->rank].cuda_dev;
  r->kind = (p2p_kind_t)pi.kind;
  ncclResult_t res = p2p_enter(r->dev, &s);
  if (res != ncclSuccess) {
    free(r);
    return res;
  }
  res = p2p_send_attach(ctx, conn, &pi, r);
  p2p_leave(&s);
  if (res != ncclSuccess) {
    p2p_res_free(r);
    return res;
  }
  transport_fifo_attach(&conn->fifo, r->ptr, pi.buff_bytes, p2p_conn_flags(r->kind));
  conn->priv = r;
  p2p_describe(conn, r->kind);
  return ncclSuccess;
}

static ncclResult_t p2p_free(transport_ctx_t* ctx, conn_t* conn) {
  p2p_res_free(conn->priv);
  conn->priv = NULL;
  return ncclSuccess;
}

const transport_ops_t transport_p2p_ops = {
    .name = "P2P",
    .can_connect = p2p_can_connect,
    .recv_setup = p2p_recv_setup,
    .send_connect = p2p_send_connect,
    .recv_connect = p2p_recv_connect,
    .free = p2p_free,
};
