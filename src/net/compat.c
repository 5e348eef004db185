/* Adapters presenting ncclNet v12, v10, v9 and v8 plugin tables as Baton's ncclNet_t (v11). Kept
 * apart from the core so the current API can grow without touching the old shapes. A process loads
 * at most one plugin, so each adapter wraps one table, held in a file-level pointer.
 *
 * What v11 changed, and how the adapters bridge it: init is called once per communicator and
 * returns a context (older plugins were initialized once per process: the adapters count
 * references and call the old init the first time); the communicator's config moved from connect
 * to init (the context holds a copy, which v10's connect receives); listen, connect and finalize
 * take the context; properties gained maxMultiRequestSize (1 for older plugins). Optional slots a
 * plugin leaves NULL point at stubs that WARN (or, for finalize and setNetAttr, do nothing). */
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "net/net.h"

/* ---- Shared by the adapters ---------------------------------------------------------------- */
static ncclResult_t compat_unsupported(const char* what) {
  WARN("NET/Plugin: the loaded network plugin does not implement %s", what);
  return ncclInternalError;
}
static ncclResult_t compat_no_dmabuf(void* comm, void* data, size_t size, int type, uint64_t offset,
                                     int fd, void** mhandle) {
  return compat_unsupported("regMrDmaBuf");
}
static ncclResult_t compat_no_flush(void* recv_comm, int n, void** data, int* sizes,
                                    void** mhandles, void** request) {
  return compat_unsupported("iflush");
}
static ncclResult_t compat_no_device_mr(void* comm, void* mhandle, void** dptr_mhandle) {
  return compat_unsupported("getDeviceMr");
}
static ncclResult_t compat_no_consumed(void* recv_comm, int n, void* request) {
  return compat_unsupported("irecvConsumed");
}
static ncclResult_t compat_no_vdevice(int* d, ncclNetVDeviceProps_v11_t* props) {
  return compat_unsupported("makeVDevice");
}
static ncclResult_t compat_set_net_attr(void* ctx, ncclNetAttr_v11_t* attr) {
  return ncclSuccess; /* hints only; older plugins have nowhere to take them */
}

/* The context an adapter hands out: the communicator's config (v10's connect takes it). */
static int compat_refs;

static ncclResult_t compat_ctx_new(const ncclNetCommConfig_v11_t* config, void** ctx) {
  ncclNetCommConfig_v10_t* c = NULL;
  CHECK(MEM_CALLOC(&c, 1));
  c->trafficClass = config != NULL ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  *ctx = c;
  return ncclSuccess;
}

static ncclResult_t compat_finalize(void* ctx) {
  free(ctx);
  if (compat_refs > 0) compat_refs--;
  return ncclSuccess;
}

/* v9 and v10 properties share one layout; v11 appends maxMultiRequestSize. */
static void compat_props_from_v10(const ncclNetProperties_v10_t* p, ncclNetProperties_v11_t* out) {
  ncclNetProperties_v11_t q = {
      .name = p->name,
      .pciPath = p->pciPath,
      .guid = p->guid,
      .ptrSupport = p->ptrSupport,
      .regIsGlobal = p->regIsGlobal,
      .forceFlush = p->forceFlush,
      .speed = p->speed,
      .port = p->port,
      .latency = p->latency,
      .maxComms = p->maxComms,
      .maxRecvs = p->maxRecvs,
      .netDeviceType = p->netDeviceType,
      .netDeviceVersion = p->netDeviceVersion,
      .vProps = p->vProps,
      .maxP2pBytes = p->maxP2pBytes,
      .maxCollBytes = p->maxCollBytes,
      .maxMultiRequestSize = 1,
  };
  *out = q;
}

/* ---- v11 ------------------------------------------------------------------------------------ */
/* A v11 table is used as is, except that optional slots left NULL (stock's own IB table has no
 * getDeviceMr) point at stubs, so callers never test for NULL. */
static ncclNet_t compat_v11_table;

static ncclResult_t v11_no_finalize(void* ctx) {
  return ncclSuccess;
}

ncclResult_t net_compat_from_v11(const ncclNet_v11_t* v11, const ncclNet_t** out) {
  compat_v11_table = *v11;
  ncclNet_t* t = &compat_v11_table;
  if (t->regMrDmaBuf == NULL) t->regMrDmaBuf = compat_no_dmabuf;
  if (t->iflush == NULL) t->iflush = compat_no_flush;
  if (t->getDeviceMr == NULL) t->getDeviceMr = compat_no_device_mr;
  if (t->irecvConsumed == NULL) t->irecvConsumed = compat_no_consumed;
  if (t->makeVDevice == NULL) t->makeVDevice = compat_no_vdevice;
  if (t->finalize == NULL) t->finalize = v11_no_finalize;
  if (t->setNetAttr == NULL) t->setNetAttr = compat_set_net_attr;
  *out = t;
  return ncclSuccess;
}

/* ---- v12 ------------------------------------------------------------------------------------
 * v11's table but for two slots: properties with up to 8 devices in a virtual NIC and the NIC's
 * rail and plane (Baton lays out rails from its topology: they are not used), and makeVDevice with
 * those 8. A virtual NIC of more than v11's 4 devices shows its first 4 (INFO). */
static const ncclNet_v12_t* compat_v12;
static ncclNet_t compat_v12_table;

static ncclResult_t v12_get_properties(int dev, ncclNetProperties_v11_t* props) {
  ncclNetProperties_v12_t p;
  memset(&p, 0, sizeof(p));
  CHECK(compat_v12->getProperties(dev, &p));
  /* Everything before vProps has v11's layout. */
  _Static_assert(
      offsetof(ncclNetProperties_v12_t, vProps) == offsetof(ncclNetProperties_v11_t, vProps),
      "v11 and v12 properties agree up to vProps");
  memset(props, 0, sizeof(*props));
  memcpy(props, &p, offsetof(ncclNetProperties_v11_t, vProps));
  int n = p.vProps.ndevs < 0 ? 0 : p.vProps.ndevs;
  if (n > NCCL_NET_MAX_DEVS_PER_NIC) {
    INFO(NCCL_NET, "NET/Plugin: device %d is a virtual NIC of %d devices; Baton sees its first %d",
         dev, n, NCCL_NET_MAX_DEVS_PER_NIC);
    n = NCCL_NET_MAX_DEVS_PER_NIC;
  }
  props->vProps.ndevs = n;
  memcpy(props->vProps.devs, p.vProps.devs, (size_t)n * sizeof(int));
  props->maxP2pBytes = p.maxP2pBytes;
  props->maxCollBytes = p.maxCollBytes;
  props->maxMultiRequestSize = p.maxMultiRequestSize;
  return ncclSuccess;
}

static ncclResult_t v12_make_vdevice(int* d, ncclNetVDeviceProps_v11_t* props) {
  ncclNetVDeviceProps_v12_t p;
  memset(&p, 0, sizeof(p));
  p.ndevs = props->ndevs;
  memcpy(p.devs, props->devs, sizeof(props->devs));
  return compat_v12->makeVDevice(d, &p);
}

ncclResult_t net_compat_from_v12(const ncclNet_v12_t* v12, const ncclNet_t** out) {
  /* Every other slot has v11's type: the table is v11's with two slots replaced. */
  _Static_assert(offsetof(ncclNet_v12_t, getProperties) == offsetof(ncclNet_v11_t, getProperties) &&
                     offsetof(ncclNet_v12_t, makeVDevice) == offsetof(ncclNet_v11_t, makeVDevice),
                 "ncclNet_v12_t lays out like ncclNet_v11_t");
  ncclNet_v11_t as11;
  memcpy(&as11, v12, sizeof(as11));
  compat_v12 = v12;
  as11.getProperties = v12_get_properties;
  as11.makeVDevice = v12->makeVDevice != NULL ? v12_make_vdevice : NULL;
  CHECK(net_compat_from_v11(&as11, out));
  compat_v12_table = **out; /* net_compat_from_v11 filled the optional slots' stubs */
  *out = &compat_v12_table;
  return ncclSuccess;
}

/* ---- v10 ------------------------------------------------------------------------------------ */
static const ncclNet_v10_t* compat_v10;
static ncclNet_t compat_v10_table;

static ncclResult_t v10_init(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config,
                             ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  if (compat_refs == 0) CHECK(compat_v10->init(log, prof));
  CHECK(compat_ctx_new(config, ctx));
  compat_refs++;
  return ncclSuccess;
}
static ncclResult_t v10_get_properties(int dev, ncclNetProperties_v11_t* props) {
  ncclNetProperties_v10_t p;
  memset(&p, 0, sizeof(p));
  CHECK(compat_v10->getProperties(dev, &p));
  compat_props_from_v10(&p, props);
  return ncclSuccess;
}
static ncclResult_t v10_listen(void* ctx, int dev, void* handle, void** listen_comm) {
  return compat_v10->listen(dev, handle, listen_comm);
}
static ncclResult_t v10_connect(void* ctx, int dev, void* handle, void** send_comm,
                                ncclNetDeviceHandle_v11_t** dev_comm) {
  return compat_v10->connect(dev, (ncclNetCommConfig_v10_t*)ctx, handle, send_comm, dev_comm);
}
static ncclResult_t v10_make_vdevice(int* d, ncclNetVDeviceProps_v11_t* props) {
  return compat_v10->makeVDevice(d, props);
}

ncclResult_t net_compat_from_v10(const ncclNet_v10_t* v10, const ncclNet_t** out) {
  compat_v10 = v10;
  compat_v10_table = (ncclNet_t){
      .name = v10->name,
      .init = v10_init,
      .devices = v10->devices,
      .getProperties = v10_get_properties,
      .listen = v10_listen,
      .connect = v10_connect,
      .accept = v10->accept,
      .regMr = v10->regMr,
      .regMrDmaBuf = v10->regMrDmaBuf ? v10->regMrDmaBuf : compat_no_dmabuf,
      .deregMr = v10->deregMr,
      .isend = v10->isend,
      .irecv = v10->irecv,
      .iflush = v10->iflush ? v10->iflush : compat_no_flush,
      .test = v10->test,
      .closeSend = v10->closeSend,
      .closeRecv = v10->closeRecv,
      .closeListen = v10->closeListen,
      .getDeviceMr = v10->getDeviceMr ? v10->getDeviceMr : compat_no_device_mr,
      .irecvConsumed = v10->irecvConsumed ? v10->irecvConsumed : compat_no_consumed,
      .makeVDevice = v10->makeVDevice ? v10_make_vdevice : compat_no_vdevice,
      .finalize = compat_finalize,
      .setNetAttr = compat_set_net_attr,
  };
  compat_refs = 0;
  *out = &compat_v10_table;
  return ncclSuccess;
}

/* ---- v9 ------------------------------------------------------------------------------------- */
static const ncclNet_v9_t* compat_v9;
static ncclNet_t compat_v9_table;

static ncclResult_t v9_init(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config,
                            ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  if (compat_refs == 0) CHECK(compat_v9->init(log));
  CHECK(compat_ctx_new(config, ctx));
  compat_refs++;
  return ncclSuccess;
}
static ncclResult_t v9_get_properties(int dev, ncclNetProperties_v11_t* props) {
  ncclNetProperties_v9_t p;
  memset(&p, 0, sizeof(p));
  CHECK(compat_v9->getProperties(dev, &p));
  compat_props_from_v10(&p, props);
  return ncclSuccess;
}
static ncclResult_t v9_listen(void* ctx, int dev, void* handle, void** listen_comm) {
  return compat_v9->listen(dev, handle, listen_comm);
}
static ncclResult_t v9_connect(void* ctx, int dev, void* handle, void** send_comm,
                               ncclNetDeviceHandle_v11_t** dev_comm) {
  return compat_v9->connect(dev, handle, send_comm, dev_comm);
}
static ncclResult_t v9_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                             void* phandle, void** request) {
  return compat_v9->isend(send_comm, data, size, tag, mhandle, request);
}
static ncclResult_t v9_irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                             void** mhandles, void** phandles, void** request) {
  return compat_v9->irecv(recv_comm, n, data, sizes, tags, mhandles, request);
}
static ncclResult_t v9_make_vdevice(int* d, ncclNetVDeviceProps_v11_t* props) {
  return compat_v9->makeVDevice(d, props);
}

ncclResult_t net_compat_from_v9(const ncclNet_v9_t* v9, const ncclNet_t** out) {
  compat_v9 = v9;
  compat_v9_table = (ncclNet_t){
      .name = v9->name,
      .init = v9_init,
      .devices = v9->devices,
      .getProperties = v9_get_properties,
      .listen = v9_listen,
      .connect = v9_connect,
      .accept = v9->accept,
      .regMr = v9->regMr,
      .regMrDmaBuf = v9->regMrDmaBuf ? v9->regMrDmaBuf : compat_no_dmabuf,
      .deregMr = v9->deregMr,
      .isend = v9_isend,
      .irecv = v9_irecv,
      .iflush = v9->iflush ? v9->iflush : compat_no_flush,
      .test = v9->test,
      .closeSend = v9->closeSend,
      .closeRecv = v9->closeRecv,
      .closeListen = v9->closeListen,
      .getDeviceMr = v9->getDeviceMr ? v9->getDeviceMr : compat_no_device_mr,
      .irecvConsumed = v9->irecvConsumed ? v9->irecvConsumed : compat_no_consumed,
      .makeVDevice = v9->makeVDevice ? v9_make_vdevice : compat_no_vdevice,
      .finalize = compat_finalize,
      .setNetAttr = compat_set_net_attr,
  };
  compat_refs = 0;
  *out = &compat_v9_table;
  return ncclSuccess;
}

/* ---- v8 ------------------------------------------------------------------------------------- */
#define COMPAT_V8_MAX_RECVS 8
static const ncclNet_v8_t* compat_v8;
static ncclNet_t compat_v8_table;

static ncclResult_t v8_init(void** ctx, uint64_t comm_id, ncclNetCommConfig_v11_t* config,
                            ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  if (compat_refs == 0) CHECK(compat_v8->init(log));
  CHECK(compat_ctx_new(config, ctx));
  compat_refs++;
  return ncclSuccess;
}
static ncclResult_t v8_get_properties(int dev, ncclNetProperties_v11_t* props) {
  ncclNetProperties_v8_t p8;
  memset(&p8, 0, sizeof(p8));
  CHECK(compat_v8->getProperties(dev, &p8));
  ncclNetProperties_v11_t p = {
      .name = p8.name,
      .pciPath = p8.pciPath,
      .guid = p8.guid,
      .ptrSupport = p8.ptrSupport,
      .regIsGlobal = p8.regIsGlobal,
      .forceFlush = 0,
      .speed = p8.speed,
      .port = p8.port,
      .latency = p8.latency,
      .maxComms = p8.maxComms,
      .maxRecvs = p8.maxRecvs,
      .netDeviceType = p8.netDeviceType,
      .netDeviceVersion = p8.netDeviceVersion,
      .vProps = {.ndevs = 1, .devs = {dev}},
      .maxP2pBytes = INT_MAX, /* v8 sizes are int */
      .maxCollBytes = INT_MAX,
      .maxMultiRequestSize = 1,
  };
  *props = p;
  return ncclSuccess;
}
static ncclResult_t v8_listen(void* ctx, int dev, void* handle, void** listen_comm) {
  return compat_v8->listen(dev, handle, listen_comm);
}
static ncclResult_t v8_connect(void* ctx, int dev, void* handle, void** send_comm,
                               ncclNetDeviceHandle_v11_t** dev_comm) {
  return compat_v8->connect(dev, handle, send_comm, dev_comm);
}
static ncclResult_t v8_isend(void* send_comm, void* data, size_t size, int tag, void* mhandle,
                             void* phandle, void** request) {
  if (size > INT_MAX) {
    WARN("NET/Plugin: %zu-byte send exceeds what a v8 network plugin can take (%d)", size, INT_MAX);
    return ncclInternalError;
  }
  return compat_v8->isend(send_comm, data, (int)size, tag, mhandle, request);
}
static ncclResult_t v8_irecv(void* recv_comm, int n, void** data, size_t* sizes, int* tags,
                             void** mhandles, void** phandles, void** request) {
  int isizes[COMPAT_V8_MAX_RECVS];
  if (n < 1 || n > COMPAT_V8_MAX_RECVS) {
    WARN("NET/Plugin: %d grouped receives, a v8 plugin adapter takes 1..%d", n,
         COMPAT_V8_MAX_RECVS);
    return ncclInternalError;
  }
  for (int i = 0; i < n; i++) {
    if (sizes[i] > INT_MAX) {
      WARN("NET/Plugin: %zu-byte receive exceeds what a v8 network plugin can take (%d)", sizes[i],
           INT_MAX);
      return ncclInternalError;
    }
    isizes[i] = (int)sizes[i];
  }
  return compat_v8->irecv(recv_comm, n, data, isizes, tags, mhandles, request);
}

ncclResult_t net_compat_from_v8(const ncclNet_v8_t* v8, const ncclNet_t** out) {
  compat_v8 = v8;
  compat_v8_table = (ncclNet_t){
      .name = v8->name,
      .init = v8_init,
      .devices = v8->devices,
      .getProperties = v8_get_properties,
      .listen = v8_listen,
      .connect = v8_connect,
      .accept = v8->accept,
      .regMr = v8->regMr,
      .regMrDmaBuf = v8->regMrDmaBuf ? v8->regMrDmaBuf : compat_no_dmabuf,
      .deregMr = v8->deregMr,
      .isend = v8_isend,
      .irecv = v8_irecv,
      .iflush = v8->iflush ? v8->iflush : compat_no_flush,
      .test = v8->test,
      .closeSend = v8->closeSend,
      .closeRecv = v8->closeRecv,
      .closeListen = v8->closeListen,
      .getDeviceMr = v8->getDeviceMr ? v8->getDeviceMr : compat_no_device_mr,
      .irecvConsumed = v8->irecvConsumed ? v8->irecvConsumed : compat_no_consumed,
      .makeVDevice = compat_no_vdevice,
      .finalize = compat_finalize,
      .setNetAttr = compat_set_net_attr,
  };
  compat_refs = 0;
  *out = &compat_v8_table;
  return ncclSuccess;
}
