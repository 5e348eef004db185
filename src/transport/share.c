/* Sharing a user's buffer with the other processes of one host (transport.h describes the
 * contract): registered windows that peers read in place.
 *
 * What the exporter can offer, best first:
 *   same process   the address itself (the importer checks it can reach it: same device, or a
 *                  cuMem allocation it can import instead)
 *   cuMem          the allocation behind the buffer (cuMemRetainAllocationHandle) exported as a
 *                  POSIX file descriptor through fd_pass; the importer maps the whole allocation
 *   CUDA IPC       cudaIpcGetMemHandle of the allocation holding the buffer (cudaMalloc memory)
 *   memfd          host memory (host executor): the descriptor behind ncclMemAlloc's host
 *                  allocation, mapped shared by the importer
 * An importer maps the whole allocation and adds the buffer's offset in it. */
#include <sys/mman.h>
#include <unistd.h>

#include "transport/transport.h"

#define SHARE_IMPORT_TIMEOUT_MS 30000

/* The allocation holding [buff, buff + bytes): [*base, *base + *size); false when CUDA does not
 * know the memory or the buffer runs past it. */
static bool share_range(const void* buff, size_t bytes, CUdeviceptr* base, size_t* size) {
  const cu_driver_t* drv = cu_driver();
  if (drv == NULL ||
      drv->mem_get_address_range(base, size, (CUdeviceptr)(uintptr_t)buff) != CUDA_SUCCESS)
    return false;
  return (uintptr_t)buff + bytes <= (uintptr_t)*base + *size;
}

/* The cuMem allocation at base as an exported descriptor; false (no WARN) when the memory is not
 * cuMem or not exportable as a descriptor. */
static bool share_try_cumem(CUdeviceptr base, share_desc_t* d, fd_export_t* exp) {
  const cu_driver_t* drv = cu_driver();
  CUmemGenericAllocationHandle h;
  int fd = -1;
  if (drv->mem_retain_allocation_handle(&h, (void*)(uintptr_t)base) != CUDA_SUCCESS) return false;
  bool ok = drv->mem_export_to_shareable_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                0) == CUDA_SUCCESS;
  (void)drv->mem_release(h); /* the exported descriptor keeps the allocation */
  if (!ok) return false;
  ok = fd_pass_export(fd, exp) == ncclSuccess;
  close(fd); /* fd_pass keeps its own duplicate */
  if (!ok) return false;
  d->kind = SHARE_CUMEM;
  d->fd = *exp;
  return true;
}

/* cudaMalloc memory: an IPC handle of the allocation at base. */
static bool share_try_ipc(CUdeviceptr base, share_desc_t* d) {
  cudaIpcMemHandle_t h;
  if (cudaIpcGetMemHandle(&h, (void*)(uintptr_t)base) != cudaSuccess) {
    (void)cudaGetLastError(); /* a probe: not cudaMalloc memory */
    return false;
  }
  memcpy(d->ipc, &h, sizeof(h));
  d->kind = SHARE_CUDA_IPC;
  return true;
}

ncclResult_t share_export(const peer_info_t* me, const void* buff, size_t bytes,
                          const share_host_mem_t* host, share_desc_t* d, share_export_t* e) {
  memset(d, 0, sizeof(*d));
  memset(e, 0, sizeof(*e));
  d->kind = SHARE_NONE;
  d->pid_hash = me->pid_hash;
  d->host_hash = me->host_hash;
  d->cuda_dev = me->cuda_dev;
  d->addr = (uint64_t)(uintptr_t)buff;
  d->bytes = bytes;
  if (me->cuda_dev >= 0) {
    CUdeviceptr base = 0;
    size_t size = 0;
    if (share_range(buff, bytes, &base, &size)) {
      d->map_bytes = size;
      d->offset = (size_t)((uintptr_t)buff - (uintptr_t)base);
      if (share_try_cumem(base, d, &e->fd))
        e->exported = true;
      else
        (void)share_try_ipc(base, d);
    }
    if (d->kind == SHARE_NONE) {
      INFO(NCCL_REG,
           "Window %p (%zu bytes): neither a cuMem allocation with a file descriptor handle nor "
           "cudaMalloc memory; only this process can read it in place",
           buff, bytes);
    }
    return ncclSuccess;
  }
  if (host != NULL && host->fd >= 0) {
    CHECK(fd_pass_export(host->fd, &e->fd));
    e->exported = true;
    d->kind = SHARE_MEMFD;
    d->fd = e->fd;
    d->map_bytes = host->bytes;
    d->offset = host->offset;
  }
  return ncclSuccess;
}

void share_revoke(share_export_t* e) {
  if (e->exported) fd_pass_revoke(&e->fd);
  e->exported = false;
}

/* A cuMem allocation of another process (or of this one, for another device) mapped for dev. */
static ncclResult_t share_map_cumem(const share_desc_t* d, int dev, volatile uint32_t* abort_flag,
                                    share_map_t* m) {
  const cu_driver_t* drv = cu_driver();
  CUdevice cdev;
  CUdeviceptr p = 0;
  int fd = -1;
  ncclResult_t res = ncclSuccess;
  if (drv == NULL) {
    WARN(
        "Window sharing: a peer shares a cuMem allocation but this process has no CUDA driver API");
    return ncclSystemError;
  }
  CHECK(fd_pass_import(&d->fd, abort_flag, SHARE_IMPORT_TIMEOUT_MS, &fd));
  CU_CHECK_GOTO(drv->mem_import_from_shareable_handle(&m->handle, (void*)(intptr_t)fd,
                                                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                res, close_fd);
  m->have_handle = true;
close_fd:
  close(fd);
  CHECK(res);
  CU_CHECK(drv->device_get(&cdev, dev));
  CU_CHECK(drv->mem_address_reserve(&p, d->map_bytes, 0, 0, 0));
  m->map = (void*)(uintptr_t)p;
  m->map_bytes = d->map_bytes;
  m->reserved = true;
  CU_CHECK(drv->mem_map(p, d->map_bytes, 0, m->handle, 0));
  m->mapped = true;
  CUmemAccessDesc acc = cu_mem_access_rw(cdev);
  CU_CHECK(drv->mem_set_access(p, d->map_bytes, &acc, 1));
  m->base = (char*)m->map + d->offset;
  return ncclSuccess;
}

static ncclResult_t share_map_memfd(const share_desc_t* d, volatile uint32_t* abort_flag,
                                    share_map_t* m) {
  int fd = -1;
  CHECK(fd_pass_import(&d->fd, abort_flag, SHARE_IMPORT_TIMEOUT_MS, &fd));
  void* p = mmap(NULL, d->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int err = errno;
  close(fd);
  if (p == MAP_FAILED) {
    WARN("Window sharing: mapping a peer's %zu bytes of host memory failed: %s", d->map_bytes,
         strerror(err));
    return ncclSystemError;
  }
  m->map = p;
  m->map_bytes = d->map_bytes;
  m->host_mapped = true;
  m->base = (char*)p + d->offset;
  return ncclSuccess;
}

ncclResult_t share_import(const peer_info_t* me, const share_desc_t* d,
                          volatile uint32_t* abort_flag, share_map_t* m) {
  memset(m, 0, sizeof(*m));
  m->dev = me->cuda_dev;
  if (d->host_hash != me->host_hash) return ncclSuccess; /* another host: nothing to map */
  const bool same_proc = d->pid_hash == me->pid_hash;
  if (same_proc && (me->cuda_dev < 0 || d->cuda_dev == me->cuda_dev)) {
    m->base = (void*)(uintptr_t)d->addr; /* one address space, one device: as it is */
    return ncclSuccess;
  }
  switch (d->kind) {
    case SHARE_CUMEM:
      if (me->cuda_dev < 0) return ncclSuccess;
      return share_map_cumem(d, me->cuda_dev, abort_flag, m);
    case SHARE_CUDA_IPC: {
      if (me->cuda_dev < 0) return ncclSuccess;
      if (same_proc) {
        /* IPC handles do not open in the process that made them: reach the other device's
         * memory as a peer, if CUDA allows. */
        int can = 0;
        if (cudaDeviceCanAccessPeer(&can, me->cuda_dev, d->cuda_dev) != cudaSuccess || !can) {
          (void)cudaGetLastError(); /* a probe */
          return ncclSuccess;
        }
        CUDA_CHECK(cuda_accept(cudaDeviceEnablePeerAccess(d->cuda_dev, 0),
                               cudaErrorPeerAccessAlreadyEnabled));
        m->base = (void*)(uintptr_t)d->addr;
        return ncclSuccess;
      }
      cudaIpcMemHandle_t h;
      void* p = NULL;
      memcpy(&h, d->ipc, sizeof(h));
      CUDA_CHECK(cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess));
      m->map = p;
      m->ipc_opened = true;
      m->base = (char*)p + d->offset;
      return ncclSuccess;
    }
    case SHARE_MEMFD:
      if (me->cuda_dev >= 0) return ncclSuccess;
      return share_map_memfd(d, abort_flag, m);
    default:
      return ncclSuccess; /* nothing offered */
  }
}

void share_unmap(share_map_t* m) {
  const cu_driver_t* drv = cu_driver();
  CUdeviceptr p = (CUdeviceptr)(uintptr_t)m->map;
  /* Best effort: a teardown error leaves nothing to retry. */
  if (m->mapped && drv != NULL) (void)drv->mem_unmap(p, m->map_bytes);
  if (m->reserved && drv != NULL) (void)drv->mem_address_free(p, m->map_bytes);
  if (m->have_handle && drv != NULL) (void)drv->mem_release(m->handle);
  if (m->ipc_opened && cudaIpcCloseMemHandle(m->map) != cudaSuccess) (void)cudaGetLastError();
  if (m->host_mapped) munmap(m->map, m->map_bytes);
  memset(m, 0, sizeof(*m));
}
