/* The IB network's devices: finding the usable ports once per process (NCCL_IB_HCA, port state,
 * link layer, GID), offering them as NICs (ports of one card merged when NCCL_IB_MERGE_NICS),
 * logging asynchronous events (a port going down, QP and device errors) from a thread of its own,
 * protection domains and the registration cache. The ncclNet table is at the end. */
#ifdef BATON_HAVE_VERBS
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "net/ib.h"

ib_dev_t ib_devs[IB_MAX_DEVS];
int ib_ndevs;
ib_vdev_t ib_vdevs[IB_MAX_VDEVS];
int ib_nvdevs;

static pthread_mutex_t ib_init_lock = PTHREAD_MUTEX_INITIALIZER;
static bool ib_init_done;
static ncclResult_t ib_init_result;
static bool ib_relaxed_ordering;

#define IB_GID_SCAN_MAX 128 /* GID table entries considered */
#define IB_SYSFS "/sys/class/infiniband"

static const char* ib_link_name(int link_layer) {
  return link_layer == IBV_LINK_LAYER_INFINIBAND ? "IB"
         : link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE"
                                                 : "?";
}

/* ---- GIDs --------------------------------------------------------------------------------------
 */
/* The RoCE version sysfs gives a GID entry: "RoCE v2" -> 2, "IB/RoCE v1" or "RoCE v1" -> 1, else 0
 * (no such file: an IB port, or a container without the entry). */
static int ib_gid_roce_version(const char* dev, int port, int index) {
  char path[PATH_MAX], text[32] = "";
  snprintf(path, sizeof(path), IB_SYSFS "/%s/ports/%d/gid_attrs/types/%d", dev, port, index);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  if (strstr(text, "v2") != NULL) return 2;
  if (strstr(text, "v1") != NULL) return 1;
  return 0;
}

/* The GID index of a RoCE port: NCCL_IB_GID_INDEX, else ib_gid_select over the table. */
static ncclResult_t ib_port_gid(const ib_verbs_t* v, ib_dev_t* d, int tbl_len) {
  int64_t forced = param_int(PARAM_IB_GID_INDEX);
  ib_gid_entry_t tab[IB_GID_SCAN_MAX];
  int n = tbl_len < IB_GID_SCAN_MAX ? tbl_len : IB_GID_SCAN_MAX;
  if (d->link_layer == IBV_LINK_LAYER_INFINIBAND) {
    d->gid_index = forced >= 0 ? (int)forced : 0;
  } else if (forced >= 0) {
    d->gid_index = (int)forced;
  } else {
    ib_gid_prefs_t prefs;
    ib_gid_prefs_parse(param_str(PARAM_IB_ADDR_FAMILY), param_str(PARAM_IB_ADDR_RANGE),
                       (int)param_int(PARAM_IB_ROCE_VERSION_NUM), &prefs);
    for (int i = 0; i < n; i++) {
      union ibv_gid g;
      memset(&tab[i], 0, sizeof(tab[i]));
      if (v->query_gid(d->ctx, (uint8_t)d->port, i, &g) != 0) continue;
      memcpy(tab[i].raw, g.raw, 16);
      tab[i].roce_version = ib_gid_roce_version(d->name, d->port, i);
    }
    d->gid_index = ib_gid_select(tab, n, &prefs);
    if (d->gid_index < 0) {
      INFO(NCCL_INIT | NCCL_NET,
           "NET/IB: %s:%d has no configured GID (no IP address on its interface?); skipped",
           d->name, d->port);
      return ncclSystemError;
    }
  }
  if (v->query_gid(d->ctx, (uint8_t)d->port, d->gid_index, &d->gid) != 0) {
    WARN("NET/IB: %s:%d: reading GID index %d failed: %s (NCCL_IB_GID_INDEX)", d->name, d->port,
         d->gid_index, strerror(errno));
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* ---- Asynchronous events -----------------------------------------------------------------------
 */
static void ib_async_handle(const ib_verbs_t* v, ib_dev_t* d, struct ibv_async_event* ev) {
  const char* what = v->event_type_str(ev->event_type);
  switch (ev->event_type) {
    case IBV_EVENT_PORT_ERR:
      atomic_store(&d->port_down, true);
      WARN(
          "NET/IB: %s port %d went down (async event %s): connections over it fail once their "
          "retries run out (NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT); check the cable, switch and "
          "`ibstat`/`ip link`",
          d->name, ev->element.port_num, what);
      break;
    case IBV_EVENT_PORT_ACTIVE:
      atomic_store(&d->port_down, false);
      INFO(NCCL_NET, "NET/IB: %s port %d is active again (%s)", d->name, ev->element.port_num,
           what);
      break;
    case IBV_EVENT_DEVICE_FATAL:
    case IBV_EVENT_CQ_ERR:
      atomic_fetch_add(&d->fatal, 1);
      WARN("NET/IB: %s: fatal async event %s; every connection on it fails", d->name, what);
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR: {
      const ib_comm_t* c = ev->element.qp != NULL ? ev->element.qp->qp_context : NULL;
      WARN("NET/IB: %s:%d: QP %u %s %s went into error (async event %s)", d->name, d->port,
           ev->element.qp != NULL ? ev->element.qp->qp_num : 0,
           c != NULL ? (c->is_send ? "sending to" : "receiving from") : "of",
           c != NULL ? c->peer : "an unknown connection", what);
      break;
    }
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      break;
    default:
      INFO(NCCL_NET, "NET/IB: %s:%d async event %s (%d)", d->name, d->port, what,
           (int)ev->event_type);
      break;
  }
}

/* One thread for every open device: waits on their async-event descriptors (non-blocking). */
static void* ib_async_main(void* arg) {
  const ib_verbs_t* v = ib_verbs();
  pthread_setname_np(pthread_self(), "baton-ibasync");
  struct pollfd fds[IB_MAX_DEVS];
  int owner[IB_MAX_DEVS], nfds = 0;
  for (int i = 0; i < ib_ndevs; i++) {
    bool seen = false; /* ports of one device share its context */
    for (int k = 0; k < nfds; k++) seen |= ib_devs[owner[k]].ctx == ib_devs[i].ctx;
    if (seen) continue;
    fds[nfds] = (struct pollfd){.fd = ib_devs[i].ctx->async_fd, .events = POLLIN};
    owner[nfds++] = i;
  }
  for (;;) {
    if (poll(fds, (nfds_t)nfds, -1) <= 0) continue;
    for (int k = 0; k < nfds; k++) {
      if (!(fds[k].revents & POLLIN)) continue;
      struct ibv_async_event ev;
      ib_dev_t* base = &ib_devs[owner[k]];
      while (v->get_async_event(base->ctx, &ev) == 0) {
        ib_dev_t* d = base; /* the port the event names, when it names one */
        for (int i = 0; i < ib_ndevs; i++)
          if (ib_devs[i].ctx == base->ctx && ib_devs[i].port == (int)ev.element.port_num)
            d = &ib_devs[i];
        ib_async_handle(v, d, &ev);
        v->ack_async_event(&ev);
      }
    }
  }
  return NULL;
}

/* ---- Discovery
 * ----------------------------------------------------------------------------------- */
static bool ib_dmabuf_probe(const ib_verbs_t* v, struct ibv_context* ctx) {
  if (v->reg_dmabuf_mr == NULL) return false;
  struct ibv_pd* pd = v->alloc_pd(ctx);
  if (pd == NULL) return false;
  errno = 0;
  struct ibv_mr* mr = v->reg_dmabuf_mr(pd, 0, 0, 0, -1, 0); /* fd -1: EBADF when supported */
  bool ok = mr == NULL && errno != EOPNOTSUPP && errno != EPROTONOSUPPORT;
  if (mr != NULL) v->dereg_mr(mr);
  v->dealloc_pd(pd);
  return ok;
}

static char* ib_pci_path(const char* name) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), IB_SYSFS "/%s/device", name);
  return realpath(path, NULL); /* NULL for virtual devices (Soft-RoCE) */
}

/* Adds the usable ports of one device; *used counts them. */
static void ib_add_ports(const ib_verbs_t* v, struct ibv_device* dev, const ib_hca_filter_t* hca,
                         int* used) {
  const char* name = v->get_device_name(dev);
  struct ibv_context* ctx = v->open_device(dev);
  if (ctx == NULL) {
    WARN("NET/IB: cannot open device %s: %s", name, strerror(errno));
    return;
  }
  struct ibv_device_attr attr;
  memset(&attr, 0, sizeof(attr));
  if (v->query_device(ctx, &attr) != 0) {
    WARN("NET/IB: cannot query device %s: %s", name, strerror(errno));
    v->close_device(ctx);
    return;
  }
  bool dmabuf = ib_dmabuf_probe(v, ctx);
  for (int port = 1; port <= attr.phys_port_cnt && ib_ndevs < IB_MAX_DEVS; port++) {
    struct ibv_port_attr pa;
    if (!ib_hca_match(hca, name, port)) continue;
    if (ib_query_port(v, ctx, (uint8_t)port, &pa) != 0) {
      WARN("NET/IB: cannot query %s port %d: %s", name, port, strerror(errno));
      continue;
    }
    if (pa.state != IBV_PORT_ACTIVE) {
      INFO(NCCL_INIT | NCCL_NET, "NET/IB: %s:%d is not active (state %d), skipped", name, port,
           (int)pa.state);
      continue;
    }
    if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND && pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
      INFO(NCCL_INIT | NCCL_NET, "NET/IB: %s:%d has link layer %d, skipped", name, port,
           (int)pa.link_layer);
      continue;
    }
    ib_dev_t* d = &ib_devs[ib_ndevs];
    memset(d, 0, sizeof(*d));
    snprintf(d->name, sizeof(d->name), "%s", name);
    d->port = port;
    d->ctx = ctx;
    d->link_layer = pa.link_layer;
    /* active_speed_ex (XDR and faster) is newer than the rdma-core headers Baton builds with */
    d->speed = ib_port_speed_mbps(pa.active_speed, 0, pa.active_width);
    d->lid = pa.lid;
    d->mtu = pa.active_mtu;
    d->guid = attr.sys_image_guid;
    d->max_qp = attr.max_qp;
    d->dmabuf = dmabuf;
    d->atomics = attr.atomic_cap != IBV_ATOMIC_NONE;
    int64_t ar = param_int(PARAM_IB_ADAPTIVE_ROUTING);
    d->ar = ar >= 0 ? ar != 0 : pa.link_layer == IBV_LINK_LAYER_INFINIBAND;
    if (ib_port_gid(v, d, pa.gid_tbl_len) != ncclSuccess) continue;
    d->pci_path = ib_pci_path(name);
    pthread_mutex_init(&d->lock, NULL);
    atomic_init(&d->fatal, 0);
    atomic_init(&d->port_down, false);
    char gid[INET6_ADDRSTRLEN];
    INFO(NCCL_INIT | NCCL_NET,
         "NET/IB: [%d] %s:%d/%s speed %d Mb/s MTU %d GID index %d %s%s, PCI %s, adaptive routing "
         "%s, dma-buf %s",
         ib_ndevs, name, port, ib_link_name(d->link_layer), d->speed, 128 << d->mtu, d->gid_index,
         ib_gid_format(d->gid.raw, gid, sizeof(gid)),
         d->link_layer == IBV_LINK_LAYER_ETHERNET
             ? (ib_gid_roce_version(name, port, d->gid_index) == 2 ? " (RoCE v2)" : " (RoCE v1)")
             : "",
         d->pci_path ? d->pci_path : "none (virtual)", d->ar ? "on" : "off",
         dmabuf ? "supported" : "no");
    ib_ndevs++;
    (*used)++;
  }
  if (*used == 0) v->close_device(ctx);
}

static void ib_offer_nics(void) {
  const char* paths[IB_MAX_DEVS];
  int group[IB_MAX_DEVS];
  for (int i = 0; i < ib_ndevs; i++) paths[i] = ib_devs[i].pci_path;
  int ngroups = ib_merge_groups(paths, ib_ndevs, param_int(PARAM_IB_MERGE_NICS) != 0,
                                IB_DEVS_PER_VDEV, group);
  ib_nvdevs = 0;
  for (int g = 0; g < ngroups && ib_nvdevs < IB_MAX_VDEVS; g++) {
    ib_vdev_t* vd = &ib_vdevs[ib_nvdevs++];
    memset(vd, 0, sizeof(*vd));
    for (int i = 0; i < ib_ndevs; i++) {
      if (group[i] != g) continue;
      size_t len = strlen(vd->name);
      snprintf(vd->name + len, sizeof(vd->name) - len, "%s%s", vd->ndevs ? "+" : "",
               ib_devs[i].name);
      vd->devs[vd->ndevs++] = i;
    }
  }
}

static ncclResult_t ib_discover(void) {
  if (param_int(PARAM_IB_DISABLE) != 0) {
    INFO(NCCL_INIT | NCCL_NET, "NET/IB: disabled by NCCL_IB_DISABLE");
    return ncclSystemError;
  }
  const ib_verbs_t* v = ib_verbs();
  if (v == NULL) return ncclSystemError;
  v->fork_init(); /* forked children must not share registered pages */
  int n = 0;
  struct ibv_device** list = v->get_device_list(&n);
  if (list == NULL || n == 0) {
    INFO(NCCL_INIT | NCCL_NET, "NET/IB: no RDMA device (%s)",
         list == NULL ? strerror(errno) : "ibv_get_device_list found none");
    if (list != NULL) v->free_device_list(list);
    return ncclSystemError;
  }
  ib_hca_filter_t hca;
  const char* spec = param_str(PARAM_IB_HCA);
  ib_hca_parse(spec, &hca);
  for (int i = 0; i < n && ib_ndevs < IB_MAX_DEVS; i++) {
    int used = 0;
    ib_add_ports(v, list[i], &hca, &used);
  }
  v->free_device_list(list);
  if (ib_ndevs == 0) {
    INFO(NCCL_INIT | NCCL_NET, "NET/IB: %d RDMA device(s) but no active port%s%s", n,
         spec ? " matching NCCL_IB_HCA=" : "", spec ? spec : "");
    return ncclSystemError;
  }
  int64_t ro = param_int(PARAM_IB_PCI_RELAXED_ORDERING);
  ib_relaxed_ordering = ro != 0 && v->reg_mr_iova2 != NULL;
  if (ro == 1 && v->reg_mr_iova2 == NULL)
    INFO(NCCL_INIT | NCCL_NET,
         "NET/IB: NCCL_IB_PCI_RELAXED_ORDERING=1 but this rdma-core has no ibv_reg_mr_iova2; "
         "relaxed ordering is off");
  ib_offer_nics();
  char line[1024] = "";
  size_t used = 0;
  for (int i = 0; i < ib_nvdevs && used < sizeof(line); i++)
    used += (size_t)snprintf(line + used, sizeof(line) - used, " [%d]%s", i, ib_vdevs[i].name);
  INFO(NCCL_INIT | NCCL_NET, "NET/IB: using%s%s", line, ib_relaxed_ordering ? " [RO]" : "");
  pthread_t th;
  for (int i = 0; i < ib_ndevs; i++) {
    int fl = fcntl(ib_devs[i].ctx->async_fd, F_GETFL);
    if (fl >= 0) fcntl(ib_devs[i].ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
  }
  int rc = pthread_create(&th, NULL, ib_async_main, NULL);
  if (rc != 0)
    WARN("NET/IB: cannot start the async-event thread (%s); port events will not be logged",
         strerror(rc));
  else
    pthread_detach(th); /* lives as long as the devices: the process */
  return ncclSuccess;
}

ncclResult_t ib_devices_init(void) {
  pthread_mutex_lock(&ib_init_lock);
  if (!ib_init_done) {
    ib_init_result = ib_discover();
    ib_init_done = true;
  }
  ncclResult_t res = ib_init_result;
  pthread_mutex_unlock(&ib_init_lock);
  return res;
}

/* ---- NICs -------------------------------------------------------------------------------------
 */
bool ib_peer_mem_loaded(void) {
  static const char* const paths[] = {"/sys/kernel/mm/memory_peers/nv_mem/version",
                                      "/sys/module/nvidia_peermem/version",
                                      "/sys/module/nv_peer_mem/version"};
  for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
    if (access(paths[i], F_OK) == 0) return true;
  return false;
}

ncclResult_t ib_get_properties(int vdev, ncclNetProperties_t* props) {
  if (vdev < 0 || vdev >= ib_nvdevs) {
    WARN("NET/IB: device %d does not exist (%d devices)", vdev, ib_nvdevs);
    return ncclInvalidArgument;
  }
  const ib_vdev_t* vd = &ib_vdevs[vdev];
  const ib_dev_t* d0 = &ib_devs[vd->devs[0]];
  int speed = 0, max_comms = INT_MAX;
  bool dmabuf = true;
  for (int i = 0; i < vd->ndevs; i++) {
    const ib_dev_t* d = &ib_devs[vd->devs[i]];
    speed += d->speed;
    if (d->max_qp < max_comms) max_comms = d->max_qp;
    dmabuf &= d->dmabuf;
  }
  ncclNetProperties_t p = {
      .name = (char*)vd->name,
      .pciPath = d0->pci_path,
      .guid = d0->guid,
      .ptrSupport = NCCL_PTR_HOST | (ib_peer_mem_loaded() ? NCCL_PTR_CUDA : 0) |
                    (dmabuf ? NCCL_PTR_DMABUF : 0),
      .regIsGlobal = 0,
      .forceFlush = 0,
      .speed = speed,
      .port = d0->port,
      .latency = 0,
      .maxComms = max_comms,
      .maxRecvs = 1,
      .netDeviceType = NCCL_NET_DEVICE_HOST,
      .netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION,
      .vProps = {.ndevs = vd->ndevs},
      .maxP2pBytes = IB_MAX_MSG,
      .maxCollBytes = IB_MAX_MSG,
      .maxMultiRequestSize = 1,
  };
  memcpy(p.vProps.devs, vd->devs, sizeof(vd->devs));
  *props = p;
  return ncclSuccess;
}

ncclResult_t ib_make_vdevice(int* d, ncclNetVDeviceProps_t* props) {
  pthread_mutex_lock(&ib_init_lock);
  ncclResult_t res = ncclInvalidUsage;
  if (props->ndevs < 1 || props->ndevs > IB_DEVS_PER_VDEV) {
    WARN("NET/IB: a virtual NIC needs 1 to %d ports (asked for %d)", IB_DEVS_PER_VDEV,
         props->ndevs);
  } else if (props->ndevs > 1 && param_int(PARAM_IB_MERGE_NICS) == 0) {
    INFO(NCCL_NET, "NET/IB: not merging %d ports into one NIC: NCCL_IB_MERGE_NICS=0", props->ndevs);
  } else if (ib_nvdevs >= IB_MAX_VDEVS) {
    WARN("NET/IB: no room for another virtual NIC (%d)", IB_MAX_VDEVS);
  } else {
    ib_vdev_t vd;
    memset(&vd, 0, sizeof(vd));
    res = ncclSuccess;
    for (int i = 0; i < props->ndevs && res == ncclSuccess; i++) {
      int p = props->devs[i];
      if (p < 0 || p >= ib_ndevs || ib_devs[p].link_layer != ib_devs[props->devs[0]].link_layer) {
        WARN(
            "NET/IB: cannot merge port %d into a virtual NIC (%d ports; all must share one link "
            "layer)",
            p, ib_ndevs);
        res = ncclInvalidUsage;
        break;
      }
      size_t len = strlen(vd.name);
      snprintf(vd.name + len, sizeof(vd.name) - len, "%s%s", i ? "+" : "", ib_devs[p].name);
      vd.devs[vd.ndevs++] = p;
    }
    if (res == ncclSuccess) {
      *d = ib_nvdevs;
      ib_vdevs[ib_nvdevs++] = vd;
      INFO(NCCL_NET, "NET/IB: virtual NIC [%d] %s", *d, vd.name);
    }
  }
  pthread_mutex_unlock(&ib_init_lock);
  return res;
}

/* ---- Protection domains and registrations ------------------------------------------------------
 */
ncclResult_t ib_dev_pd_get(int dev, struct ibv_pd** out) {
  ib_dev_t* d = &ib_devs[dev];
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&d->lock);
  if (d->pd_refs == 0) {
    d->pd = ib_verbs()->alloc_pd(d->ctx);
    if (d->pd == NULL) {
      WARN("NET/IB: ibv_alloc_pd on %s failed: %s", d->name, strerror(errno));
      res = ncclSystemError;
    }
  }
  if (res == ncclSuccess) {
    d->pd_refs++;
    *out = d->pd;
  }
  pthread_mutex_unlock(&d->lock);
  return res;
}

void ib_dev_pd_put(int dev) {
  ib_dev_t* d = &ib_devs[dev];
  pthread_mutex_lock(&d->lock);
  if (--d->pd_refs == 0) {
    if (ib_verbs()->dealloc_pd(d->pd) != 0)
      INFO(NCCL_NET, "NET/IB: ibv_dealloc_pd on %s: %s", d->name, strerror(errno));
    d->pd = NULL;
  }
  pthread_mutex_unlock(&d->lock);
}

int ib_access_flags(void) {
  int f = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  return ib_relaxed_ordering ? f | IBV_ACCESS_RELAXED_ORDERING : f;
}

static struct ibv_mr* ib_mr_new(ib_dev_t* d, void* addr, size_t len, uint64_t offset, int fd) {
  const ib_verbs_t* v = ib_verbs();
  int access = ib_access_flags() | (d->atomics ? IBV_ACCESS_REMOTE_ATOMIC : 0);
  if (fd >= 0) return v->reg_dmabuf_mr(d->pd, offset, len, (uint64_t)(uintptr_t)addr, fd, access);
  if (access & IBV_ACCESS_RELAXED_ORDERING)
    return v->reg_mr_iova2(d->pd, addr, len, (uint64_t)(uintptr_t)addr, (unsigned)access);
  return v->reg_mr(d->pd, addr, len, access);
}

ncclResult_t ib_dev_reg(int dev, void* data, size_t size, int type, uint64_t offset, int fd,
                        struct ibv_mr** out) {
  ib_dev_t* d = &ib_devs[dev];
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  uintptr_t start = (uintptr_t)data / page * page;
  uintptr_t end = ((uintptr_t)data + (size ? size : 1) + page - 1) / page * page;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&d->lock);
  if (fd < 0) {
    for (int i = 0; i < d->nmrs; i++) {
      ib_mr_entry_t* e = &d->mrs[i];
      if (e->addr <= start && end <= e->addr + e->pages * page) {
        e->refs++;
        *out = e->mr;
        goto out;
      }
    }
  }
  struct ibv_mr* mr = fd >= 0 ? ib_mr_new(d, data, size, offset, fd)
                              : ib_mr_new(d, (void*)start, end - start, 0, -1);
  if (mr == NULL) {
    const char* kind = fd >= 0 ? "dma-buf" : type == NCCL_PTR_CUDA ? "GPU" : "host";
    if (fd >= 0 || type == NCCL_PTR_CUDA) /* GPUDirect: the caller stages through host memory */
      INFO(NCCL_NET, "NET/IB: registering %zu bytes of %s memory at %p on %s failed: %s", size,
           kind, data, d->name, strerror(errno));
    else
      WARN("NET/IB: registering %zu bytes of host memory at %p on %s failed: %s%s", size, data,
           d->name, strerror(errno),
           errno == ENOMEM ? " (raise the locked-memory limit: ulimit -l unlimited)" : "");
    res = ncclSystemError;
    goto out;
  }
  if (fd < 0) { /* cached; dma-buf registrations are tied to their descriptor and are not */
    if (d->nmrs == d->cap_mrs) {
      int cap = d->cap_mrs ? 2 * d->cap_mrs : 16;
      ib_mr_entry_t* grown = realloc(d->mrs, (size_t)cap * sizeof(*grown));
      if (grown == NULL) {
        ib_verbs()->dereg_mr(mr);
        WARN("NET/IB: out of memory growing the registration cache of %s", d->name);
        res = ncclSystemError;
        goto out;
      }
      d->mrs = grown;
      d->cap_mrs = cap;
    }
    int at = d->nmrs;
    while (at > 0 && d->mrs[at - 1].addr > start) at--;
    memmove(&d->mrs[at + 1], &d->mrs[at], (size_t)(d->nmrs - at) * sizeof(*d->mrs));
    d->mrs[at] = (ib_mr_entry_t){.addr = start, .pages = (end - start) / page, .refs = 1, .mr = mr};
    d->nmrs++;
  }
  *out = mr;
out:
  pthread_mutex_unlock(&d->lock);
  return res;
}

void ib_dev_dereg(int dev, struct ibv_mr* mr) {
  ib_dev_t* d = &ib_devs[dev];
  pthread_mutex_lock(&d->lock);
  int i = 0;
  while (i < d->nmrs && d->mrs[i].mr != mr) i++;
  bool release = true;
  if (i < d->nmrs) {
    release = --d->mrs[i].refs == 0;
    if (release) {
      memmove(&d->mrs[i], &d->mrs[i + 1], (size_t)(d->nmrs - i - 1) * sizeof(*d->mrs));
      d->nmrs--;
    }
  }
  if (release && ib_verbs()->dereg_mr(mr) != 0)
    INFO(NCCL_NET, "NET/IB: ibv_dereg_mr on %s: %s", d->name, strerror(errno));
  pthread_mutex_unlock(&d->lock);
}

/* ---- The ncclNet table
 * ---------------------------------------------------------------------------- */
static ncclResult_t ib_init(void** ctx, uint64_t comm_id, ncclNetCommConfig_t* config,
                            ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  CHECK(ib_devices_init());
  ib_ctx_t* c = NULL;
  CHECK(MEM_CALLOC(&c, 1));
  c->traffic_class = config != NULL ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  *ctx = c;
  return ncclSuccess;
}

static ncclResult_t ib_devices(int* ndev) {
  *ndev = ib_nvdevs;
  return ncclSuccess;
}

static ncclResult_t ib_finalize(void* ctx) {
  free(ctx); /* the devices stay open for the process (as the async thread does) */
  return ncclSuccess;
}

static ncclResult_t ib_set_net_attr(void* ctx, ncclNetAttr_t* attr) {
  return ncclSuccess; /* hints; nothing here uses them */
}

static ncclResult_t ib_get_device_mr(void* comm, void* mhandle, void** dptr_mhandle) {
  WARN("NET/IB: device-side memory handles are not supported (no device network offload)");
  return ncclInternalError;
}

static ncclResult_t ib_irecv_consumed(void* recv_comm, int n, void* request) {
  WARN("NET/IB: irecvConsumed is not supported (no device network offload)");
  return ncclInternalError;
}

static const ncclNet_t net_ib = {
    .name = "IB",
    .init = ib_init,
    .devices = ib_devices,
    .getProperties = ib_get_properties,
    .listen = ib_listen,
    .connect = ib_connect,
    .accept = ib_accept,
    .regMr = ib_reg_mr,
    .regMrDmaBuf = ib_reg_mr_dmabuf,
    .deregMr = ib_dereg_mr,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .iflush = ib_iflush,
    .test = ib_test,
    .closeSend = ib_close_comm,
    .closeRecv = ib_close_comm,
    .closeListen = ib_close_listen,
    .getDeviceMr = ib_get_device_mr,
    .irecvConsumed = ib_irecv_consumed,
    .makeVDevice = ib_make_vdevice,
    .finalize = ib_finalize,
    .setNetAttr = ib_set_net_attr,
};

const ncclNet_t* net_builtin_ib(void) {
  return &net_ib;
}

static ncclResult_t ib_rma_key(void* mhandle, const void* data, size_t bytes, net_rma_key_t* out) {
  const ib_mhandle_t* mh = mhandle;
  memset(out, 0, sizeof(*out));
  out->addr = (uint64_t)(uintptr_t)data;
  out->bytes = bytes;
  for (int i = 0; i < mh->ndevs; i++) out->rkeys[i] = mh->mrs[i]->rkey;
  return ncclSuccess;
}

static bool ib_rma_atomics(int vdev) {
  bool all = vdev >= 0 && vdev < ib_nvdevs;
  for (int i = 0; all && i < ib_vdevs[vdev].ndevs; i++)
    all = ib_devs[ib_vdevs[vdev].devs[i]].atomics;
  return all;
}

_Static_assert(NET_RMA_MAX_KEYS >= IB_DEVS_PER_VDEV, "a key holds every port's rkey");
static const net_rma_ops_t ib_rma_ops = {.key = ib_rma_key,
                                         .iput = ib_iput,
                                         .iadd = ib_iadd,
                                         .can_add = ib_rma_atomics,
                                         .check = ib_check,
                                         .max_put = IB_MAX_MSG};

const net_rma_ops_t* net_rma_ops(const ncclNet_t* net) {
  return net != NULL && net == &net_ib ? &ib_rma_ops : NULL;
}

#else /* !BATON_HAVE_VERBS: built without rdma-core's header */
#include "net/net.h"

const ncclNet_t* net_builtin_ib(void) {
  INFO(NCCL_INIT | NCCL_NET,
       "NET/IB: this Baton was built without infiniband/verbs.h (libibverbs-dev); the IB network "
       "is off");
  return NULL;
}

const net_rma_ops_t* net_rma_ops(const ncclNet_t* net) {
  return NULL;
}
#endif /* BATON_HAVE_VERBS */
