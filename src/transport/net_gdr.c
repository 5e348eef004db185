/* GPUDirect RDMA for NET connections: whether a connection's Simple buffer lives in GPU memory,
 * which the NIC then reads (send) or writes (receive) directly, and how that memory is handed to
 * the network: a dma-buf descriptor (cuMemGetHandleForAddressRange, through the driver API Baton
 * already loads) or, without dma-buf, the peer-memory kernel module (ibv_reg_mr on the device
 * pointer). The decision (transport_net_gdr) is pure and unit tested; the rest needs a GPU. */
#include <stdlib.h>
#include <unistd.h>

#include "transport/transport.h"

const char* transport_net_gdr_name(net_gdr_mode_t m) {
  return m == NET_GDR_DMABUF ? "on (dma-buf)" : m == NET_GDR_PEERMEM ? "on (peer memory)" : "off";
}

net_gdr_mode_t transport_net_gdr(const net_gdr_query_t* q, char* why, size_t len) {
  bool nic_cuda = (q->nic_ptr_support & NCCL_PTR_CUDA) != 0;
  bool nic_dmabuf = (q->nic_ptr_support & NCCL_PTR_DMABUF) != 0;
  if (!q->gpu_fifos) {
    snprintf(why, len, "host executor: buffers are in host memory");
    return NET_GDR_OFF;
  }
  if (!nic_cuda && !nic_dmabuf) {
    snprintf(why, len,
             "the NIC cannot reach GPU memory (no dma-buf support, no peer-memory module "
             "nvidia_peermem)");
    return NET_GDR_OFF;
  }
  if (!q->gpu_gdr) {
    snprintf(why, len, "the GPU does not support GPUDirect RDMA");
    return NET_GDR_OFF;
  }
  if (q->is_send) {
    if (q->gdr_read == 0) {
      snprintf(why, len, "NCCL_NET_GDR_READ=0 keeps sends in host memory");
      return NET_GDR_OFF;
    }
    if (q->gdr_read < 0 && q->gpu_sm < 80 && !q->gpu_nvlink_peer) {
      snprintf(why, len,
               "before Ampere (sm %d) without an NVLink peer, sends stay in host memory "
               "(NCCL_NET_GDR_READ=1 forces)",
               q->gpu_sm);
      return NET_GDR_OFF;
    }
  }
  if (q->path > q->max_path) {
    snprintf(why, len, "GPU-NIC path %s is beyond NCCL_NET_GDR_LEVEL %s", topo_path_names[q->path],
             topo_path_names[q->max_path]);
    return NET_GDR_OFF;
  }
  if (q->dmabuf_enable && nic_dmabuf && q->gpu_dmabuf) {
    snprintf(why, len, "GPU-NIC path %s within NCCL_NET_GDR_LEVEL %s", topo_path_names[q->path],
             topo_path_names[q->max_path]);
    return NET_GDR_DMABUF;
  }
  if (nic_cuda) {
    snprintf(why, len, "GPU-NIC path %s within NCCL_NET_GDR_LEVEL %s%s", topo_path_names[q->path],
             topo_path_names[q->max_path],
             q->dmabuf_enable ? "" : "; dma-buf off (NCCL_DMABUF_ENABLE=0)");
    return NET_GDR_PEERMEM;
  }
  snprintf(why, len, "dma-buf is %s and the peer-memory module is not loaded",
           q->dmabuf_enable ? "not supported by the GPU or driver" : "off (NCCL_DMABUF_ENABLE=0)");
  return NET_GDR_OFF;
}

topo_path_t transport_net_gdr_level(void) {
  static int warned;
  const char* text = param_str(PARAM_NET_GDR_LEVEL);
  topo_path_t level = TOPO_PATH_PXB;
  if (text == NULL || text[0] == '\0') return level;
  if (topo_path_parse(text, &level) != ncclSuccess) {
    if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      WARN("NCCL_NET_GDR_LEVEL=%s is not a path type (LOC, PIX, PXB, PHB, SYS or 0-4); using PXB",
           text);
    return TOPO_PATH_PXB;
  }
  return level;
}

/* ---- GPU memory for a GPUDirect buffer ------------------------------------------------------- */
void transport_net_gdr_caps(int cuda_dev, bool* gdr, bool* dmabuf) {
  const cu_driver_t* d = cu_driver();
  CUdevice dev;
  int a = 0, b = 0;
  *gdr = *dmabuf = false;
  if (d == NULL || cuda_dev < 0 || d->device_get(&dev, cuda_dev) != CUDA_SUCCESS) return;
  if (d->device_get_attribute(&a, CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, dev) ==
      CUDA_SUCCESS)
    *gdr = a != 0;
  if (d->device_get_attribute(&b, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev) == CUDA_SUCCESS)
    *dmabuf = b != 0;
}

/* A failure is an INFO line, not a WARN: the caller falls back to a host buffer. */
ncclResult_t transport_net_gdr_alloc(size_t bytes, net_gdr_mode_t mode, void** ptr, size_t* alloc,
                                     int* fd) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  size_t n = (bytes + page - 1) / page * page;
  void* p = NULL;
  *fd = -1;
  cudaError_t err = cudaMalloc(&p, n);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    INFO(NCCL_NET, "NET: cudaMalloc of %zu bytes for a GPUDirect buffer failed: %s", n,
         cudaGetErrorString(err));
    return ncclUnhandledCudaError;
  }
  if (cudaMemset(p, 0, n) != cudaSuccess) {
    (void)cudaGetLastError();
    (void)cudaFree(p);
    return ncclUnhandledCudaError;
  }
  if (mode == NET_GDR_DMABUF) {
    const cu_driver_t* d = cu_driver();
    CUresult r = (uintptr_t)p % page != 0
                     ? CUDA_ERROR_INVALID_VALUE
                     : d->mem_get_handle_for_address_range(fd, (CUdeviceptr)(uintptr_t)p, n,
                                                           CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
    if (r != CUDA_SUCCESS) {
      INFO(NCCL_NET, "NET: no dma-buf for a GPUDirect buffer (%s)", cu_error_text(r));
      *fd = -1;
      (void)cudaFree(p);
      return ncclUnhandledCudaError;
    }
  }
  *ptr = p;
  *alloc = n;
  return ncclSuccess;
}

void transport_net_gdr_free(void* ptr, int fd) {
  if (fd >= 0) close(fd);
  if (ptr != NULL && cudaFree(ptr) != cudaSuccess) (void)cudaGetLastError();
}
