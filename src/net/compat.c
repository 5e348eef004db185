/* Adapters presenting ncclNet v9 and v8 plugin tables as Baton's ncclNet_t (v10). Kept apart from
 * the core so the current API can grow without touching the old shapes. A process loads at most
 * one plugin, so each adapter wraps one table, held in a file-level pointer. */
#include <limits.h>

#include "net/net.h"

/* ---- Stubs for optional slots a plugin left NULL ------------------------------------------- */
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
static ncclResult_t compat_no_vdevice(int* d, ncclNetVDeviceProps_v10_t* props) {
  return compat_unsupported("makeVDevice");
}

/* ---- v9 ------------------------------------------------------------------------------------- */
static const ncclNet_v9_t* compat_v9;
static ncclNet_t compat_v9_table;

static ncclResult_t v9_init(ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  return compat_v9->init(log);
}
static ncclResult_t v9_connect(int dev, ncclNetCommConfig_v10_t* config, void* handle,
                               void** send_comm, ncclNetDeviceHandle_v10_t** dev_comm) {
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

ncclResult_t net_compat_from_v9(const ncclNet_v9_t* v9, const ncclNet_t** out) {
  compat_v9 = v9;
  compat_v9_table = (ncclNet_t){
      .name = v9->name,
      .init = v9_init,
      .devices = v9->devices,
      .getProperties = v9->getProperties, /* v9 and v10 properties share one layout */
      .listen = v9->listen,
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
      .makeVDevice = v9->makeVDevice ? v9->makeVDevice : compat_no_vdevice,
  };
  *out = &compat_v9_table;
  return ncclSuccess;
}

/* ---- v8 ------------------------------------------------------------------------------------- */
#define COMPAT_V8_MAX_RECVS 8
static const ncclNet_v8_t* compat_v8;
static ncclNet_t compat_v8_table;

static ncclResult_t v8_init(ncclDebugLogger_t log, ncclProfilerCallback_t prof) {
  return compat_v8->init(log);
}
static ncclResult_t v8_get_properties(int dev, ncclNetProperties_v10_t* props) {
  ncclNetProperties_v8_t p8;
  memset(&p8, 0, sizeof(p8));
  CHECK(compat_v8->getProperties(dev, &p8));
  ncclNetProperties_v10_t p = {
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
  };
  *props = p;
  return ncclSuccess;
}
static ncclResult_t v8_connect(int dev, ncclNetCommConfig_v10_t* config, void* handle,
                               void** send_comm, ncclNetDeviceHandle_v10_t** dev_comm) {
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
      .listen = v8->listen,
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
  };
  *out = &compat_v8_table;
  return ncclSuccess;
}
