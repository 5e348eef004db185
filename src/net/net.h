/* Baton network layer: the ncclNet plugin interface, its loader and version adapters, and the
 * built-in networks ("IB": InfiniBand/RoCE verbs, src/net/ib_*.c; "Socket": TCP, src/net/socket.c).
 * The NET transport and the proxy use it; it uses src/base and the bootstrap's socket helpers.
 *
 * Part 1 is the public plugin interface, binary compatible with NCCL's ncclNet v8 to v11 (tables
 * exported by a plugin library as ncclNetPlugin_v11 / _v10 / _v9 / _v8). Baton's own type ncclNet_t
 * is v11, what stock 2.28 speaks; older plugins are adapted (src/net/compat.c). Every table starts
 * with `name`. A plugin may include this header (it needs nccl.h and src/base/base.h for the logger
 * types).
 *
 * Part 2 is Baton-internal: which network the NET transport uses (an external plugin when one is
 * loaded, else NCCL_NET's choice among the built-ins IB and Socket), and per-communicator contexts.
 */
#ifndef BATON_NET_H
#define BATON_NET_H

#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* ---- Part 1: the plugin API ------------------------------------------------------------------ */
#define NCCL_NET_HANDLE_MAXSIZE 128
#define NCCL_MAX_NET_SIZE_BYTES (1ull << 40) /* ceiling for maxP2pBytes / maxCollBytes */
#define NCCL_NET_OPTIONAL_RECV_COMPLETION 0x1
#define NCCL_NET_MULTI_REQUEST 0x2

#define NCCL_PTR_HOST 0x1
#define NCCL_PTR_CUDA 0x2
#define NCCL_PTR_DMABUF 0x4

/* Requests a comm may have in flight. */
#define NCCL_NET_MAX_REQUESTS 32

/* Device-side network offload (Baton offers none: always NCCL_NET_DEVICE_HOST). */
typedef enum {
  NCCL_NET_DEVICE_HOST = 0,
  NCCL_NET_DEVICE_UNPACK = 1,
  NCCL_NET_DEVICE_GIN_PROXY = 2,
  NCCL_NET_DEVICE_GIN_GDAKI = 3
} ncclNetDeviceType;
#define NCCL_NET_DEVICE_INVALID_VERSION 0x0

typedef struct {
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  void* handle;
  size_t size;
  int needsProxyProgress;
} ncclNetDeviceHandle_v8_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v9_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v10_t;
typedef ncclNetDeviceHandle_v8_t ncclNetDeviceHandle_v11_t;
typedef ncclNetDeviceHandle_v11_t ncclNetDeviceHandle_t;

/* Virtual NICs (v9+): one device made of several physical ones. */
#define NCCL_NET_MAX_DEVS_PER_NIC 4
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC];
} ncclNetVDeviceProps_v9_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v10_t;
typedef ncclNetVDeviceProps_v9_t ncclNetVDeviceProps_v11_t;
typedef ncclNetVDeviceProps_v11_t ncclNetVDeviceProps_t;

/* Per-communicator settings: passed to connect in v10, to init in v11. */
#define NCCL_NET_TRAFFIC_CLASS_UNDEF -1
typedef struct {
  int trafficClass;
} ncclNetCommConfig_v10_t;
typedef ncclNetCommConfig_v10_t ncclNetCommConfig_v11_t;
typedef ncclNetCommConfig_v11_t ncclNetCommConfig_t;

/* Network profiler hook handed to init (v10). Baton passes a callback that records nothing. */
typedef ncclResult_t (*ncclProfilerCallback_t)(void** eHandle, int type, void* phandle,
                                               int64_t pluginId, void* extData);

typedef struct {
  char* name;      /* for logs */
  char* pciPath;   /* device path in /sys, may be NULL */
  uint64_t guid;   /* identifies the NIC chip */
  int ptrSupport;  /* NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF */
  int regIsGlobal; /* a registration is usable with every comm */
  int speed;       /* Mbps */
  int port;
  float latency; /* microseconds */
  int maxComms;
  int maxRecvs; /* receives grouped in one irecv */
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
} ncclNetProperties_v8_t;

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush; /* receives need iflush even for host memory */
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v9_t vProps;
  size_t maxP2pBytes;  /* largest single transfer for point-to-point traffic */
  size_t maxCollBytes; /* largest single transfer for collectives */
} ncclNetProperties_v9_t;
typedef ncclNetProperties_v9_t ncclNetProperties_v10_t; /* same layout */

typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v11_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize; /* requests one multi-request may hold (1: none) */
} ncclNetProperties_v11_t;
typedef ncclNetProperties_v11_t ncclNetProperties_t;

/* v11: hints about the traffic a communicator will send (Baton never calls setNetAttr). */
#define NCCL_NET_ATTR_UNDEF -1
typedef struct {
  int32_t maxConcurrentPeers;
  int32_t minConcurrentPeers;
  int32_t maxFlowsPerPeer;
  int32_t minFlowsPerPeer;
} ncclNetCommAttr_v11_t;
typedef struct {
  ncclNetCommAttr_v11_t sendCommAttr;
  ncclNetCommAttr_v11_t recvCommAttr;
  uint32_t op;
  uint32_t algo;
  uint32_t proto;
} ncclNetAttr_v11_t;
typedef ncclNetAttr_v11_t ncclNetAttr_t;

/* Contract shared by all versions: listen returns a handle (<= NCCL_NET_HANDLE_MAXSIZE bytes) that
 * travels out of band to the peer; connect/accept must not block and may return a NULL comm, to be
 * called again; isend/irecv may return a NULL request when they cannot start now (retry later);
 * test reports completion and the byte count; messages on one comm match in posting order. */
/* v11 (stock 2.28): init creates a per-communicator context (commId, config) that listen, connect
 * and finalize receive; connect lost its config argument; finalize and setNetAttr are new. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v11_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v11_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
} ncclNet_v11_t;

/* v12 (stock 2.30): v11's table, with up to 8 physical devices in a virtual one and the NIC's
 * rail and plane in its properties (src/net/compat.c adapts it). */
#define NCCL_NET_MAX_DEVS_PER_NIC_V12 8
typedef struct {
  int ndevs;
  int devs[NCCL_NET_MAX_DEVS_PER_NIC_V12];
} ncclNetVDeviceProps_v12_t;
typedef struct {
  char* name;
  char* pciPath;
  uint64_t guid;
  int ptrSupport;
  int regIsGlobal;
  int forceFlush;
  int speed;
  int port;
  float latency;
  int maxComms;
  int maxRecvs;
  ncclNetDeviceType netDeviceType;
  int netDeviceVersion;
  ncclNetVDeviceProps_v12_t vProps;
  size_t maxP2pBytes;
  size_t maxCollBytes;
  int maxMultiRequestSize;
  int16_t railId;  /* the NIC's rail (NCCL_NET_ID_UNDEF -1: unknown) */
  int16_t planeId; /* and plane */
} ncclNetProperties_v12_t;
#define NCCL_NET_ID_UNDEF -1
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclNetCommConfig_v11_t* config,
                       ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v11_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v11_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v12_t* props);
  ncclResult_t (*finalize)(void* ctx);
  ncclResult_t (*setNetAttr)(void* ctx, ncclNetAttr_v11_t* netAttr);
} ncclNet_v12_t;
_Static_assert(sizeof(ncclNetProperties_v12_t) == 128 &&
                   offsetof(ncclNetProperties_v12_t, railId) == 124,
               "ncclNetProperties_v12_t");
_Static_assert(sizeof(ncclNet_v12_t) == sizeof(ncclNet_v11_t), "ncclNet_v12_t: v11's slots");

/* v10: one process-wide init; connect takes the per-connection config. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v10_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, ncclNetCommConfig_v10_t* config, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v10_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm,
                         ncclNetDeviceHandle_v10_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void* phandle, void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** phandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v10_t* props);
} ncclNet_v10_t;

/* v9: no profiler (init, isend, irecv) and no connect config. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v9_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v9_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v9_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, size_t size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, size_t* sizes, int* tags,
                        void** mhandles, void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
  ncclResult_t (*makeVDevice)(int* d, ncclNetVDeviceProps_v9_t* props);
} ncclNet_v9_t;

/* v8: int sizes in isend/irecv, v8 properties, no virtual devices. */
typedef struct {
  const char* name;
  ncclResult_t (*init)(ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v8_t* props);
  ncclResult_t (*listen)(int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(int dev, void* handle, void** sendComm,
                          ncclNetDeviceHandle_v8_t** sendDevComm);
  ncclResult_t (*accept)(void* listenComm, void** recvComm, ncclNetDeviceHandle_v8_t** recvDevComm);
  ncclResult_t (*regMr)(void* comm, void* data, size_t size, int type, void** mhandle);
  ncclResult_t (*regMrDmaBuf)(void* comm, void* data, size_t size, int type, uint64_t offset,
                              int fd, void** mhandle);
  ncclResult_t (*deregMr)(void* comm, void* mhandle);
  ncclResult_t (*isend)(void* sendComm, void* data, int size, int tag, void* mhandle,
                        void** request);
  ncclResult_t (*irecv)(void* recvComm, int n, void** data, int* sizes, int* tags, void** mhandles,
                        void** request);
  ncclResult_t (*iflush)(void* recvComm, int n, void** data, int* sizes, void** mhandles,
                         void** request);
  ncclResult_t (*test)(void* request, int* done, int* sizes);
  ncclResult_t (*closeSend)(void* sendComm);
  ncclResult_t (*closeRecv)(void* recvComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*getDeviceMr)(void* comm, void* mhandle, void** dptr_mhandle);
  ncclResult_t (*irecvConsumed)(void* recvComm, int n, void* request);
} ncclNet_v8_t;

typedef ncclNet_v11_t ncclNet_t; /* the version Baton speaks */

/* ---- Part 2: Baton's network selection ------------------------------------------------------- */
/* The built-in networks. */
extern const ncclNet_t net_socket; /* TCP sockets, src/net/socket.c */
/* InfiniBand / RoCE verbs (src/net/ib_*.c); NULL when built without rdma-core's header. */
const ncclNet_t* net_builtin_ib(void);

/* The network NET connections use, initialized, with at least one device; chosen once per process:
 *   NCCL_NET_PLUGIN unset: try libnccl-net.so; "none" or "": no plugin; else the library
 *   plugin_lib_open finds for the name (as stock: the name, then libnccl-net-<name>.so). A
 *   library without an ncclNetPlugin_v11/_v10/_v9/_v8 symbol, or whose init fails or has no
 *   device, is skipped with an INFO line (a WARN when it exports another version).
 *   NCCL_NET=<name> picks a network by name among [plugin, IB, Socket] (error if absent);
 *   otherwise the first usable of that list wins. */
ncclResult_t net_select(const ncclNet_t** out, int* ndev_out);
/* Forget the choice (and unload a plugin): the next net_select chooses again. Tests only; no
 * connection may be open. */
void net_select_reset(void);
/* A communicator's context for net (v11 init with its id and traffic class; traffic_class < 0 or
 * NCCL_CONFIG_UNDEF_INT: the network's default). Listen and connect take it; net_ctx_close
 * finalizes it once every comm made with it is closed. */
ncclResult_t net_ctx_open(const ncclNet_t* net, uint64_t comm_id, int traffic_class, void** ctx);
void net_ctx_close(const ncclNet_t* net, void* ctx);
/* The plugin versions Baton accepts, for messages. */
#define NET_PLUGIN_VERSIONS "v12, v11, v10, v9 and v8"

/* Adapters that present a plugin's table as ncclNet_t (src/net/compat.c): older versions
 * translated, NULL optional slots filled with stubs. One of each at most (a process loads one
 * plugin). */
ncclResult_t net_compat_from_v12(const ncclNet_v12_t* v12, const ncclNet_t** out);
ncclResult_t net_compat_from_v11(const ncclNet_v11_t* v11, const ncclNet_t** out);
ncclResult_t net_compat_from_v10(const ncclNet_v10_t* v10, const ncclNet_t** out);
ncclResult_t net_compat_from_v9(const ncclNet_v9_t* v9, const ncclNet_t** out);
ncclResult_t net_compat_from_v8(const ncclNet_v8_t* v8, const ncclNet_t** out);

/* ---- One-sided writes (Baton-internal) ---------------------------------------------------------
 * The ncclNet API (v8 to v12) has no one-sided calls: stock NCCL puts them in plugin types of their
 * own (ncclRma, ncclGin: a collective connect, symmetric registration, iput / iputSignal). Baton's
 * built-in IB network offers them beside its ncclNet table, for ncclPutSignal between hosts
 * (src/core/rma_net.c): a comm from connect writes straight into memory its peer registered
 * (regMr on any comm of the same network device) and described with `key`, or adds to a word of
 * it. Every operation of a send comm goes on its first QP, so the peer executes them in posting
 * order, and an add (an atomic: a non-posted request) is not passed by the writes before it even
 * where the NIC writes with PCIe relaxed ordering: a signal added after the data lands after it.
 * Requests are tested with the network's test(). */
#define NET_RMA_MAX_KEYS 4 /* ports of one (virtual) NIC */
typedef struct net_rma_key {
  uint64_t addr;  /* the registered memory, in its owner's address space */
  uint64_t bytes; /* how much of it may be written */
  uint32_t rkeys[NET_RMA_MAX_KEYS];
} net_rma_key_t;
typedef struct net_rma_ops {
  /* What a peer needs to write [data, data + bytes), registered as mhandle. */
  ncclResult_t (*key)(void* mhandle, const void* data, size_t bytes, net_rma_key_t* out);
  /* Writes bytes (1 to max_put) at data (mhandle: regMr on send_comm) to dst->addr + dst_off on
   * the peer; *request NULL: too many in flight, test earlier ones and post again. */
  ncclResult_t (*iput)(void* send_comm, const void* data, size_t bytes, void* mhandle,
                       const net_rma_key_t* dst, uint64_t dst_off, void** request);
  /* Adds add to the 8-byte aligned word at dst->addr + dst_off on the peer, after the comm's
   * earlier writes; its old value lands in *scratch (registered as mhandle). */
  ncclResult_t (*iadd)(void* send_comm, uint64_t* scratch, void* mhandle, const net_rma_key_t* dst,
                       uint64_t dst_off, uint64_t add, void** request);
  /* Whether device dev can add (RDMA atomics); without, no one-sided operation uses it. */
  bool (*can_add)(int dev);
  /* Whether the peer of comm is still there (its process exits: ncclRemoteError, logged). */
  ncclResult_t (*check)(void* comm);
  size_t max_put;
} net_rma_ops_t;
/* net's one-sided writes; NULL when it has none (the socket network, external plugins). */
const net_rma_ops_t* net_rma_ops(const ncclNet_t* net);

/* Socket network statistics for tests: number of data streams of a send or recv comm and the
 * bytes each has carried (bytes[] has room for nstreams_max entries). */
ncclResult_t net_socket_comm_stats(void* comm, int nstreams_max, int* nstreams, uint64_t* bytes);

#endif /* BATON_NET_H */
