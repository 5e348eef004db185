/* Choosing the network behind the NET transport: an external ncclNet plugin (NCCL_NET_PLUGIN),
 * the built-in IB verbs network, or the built-in socket network. Chosen once per process; NCCL_NET
 * forces one by name. The choice is initialized once to count its devices (a context kept until
 * net_select_reset); each communicator opens its own context (net_ctx_open). */
#include <dlfcn.h>
#include <pthread.h>
#include <strings.h>

#include "net/net.h"

#define NET_PLUGIN_NAME_MAX 512

static pthread_mutex_t net_lock = PTHREAD_MUTEX_INITIALIZER;
static bool net_chosen;
static ncclResult_t net_choice_result;
static const ncclNet_t* net_current;
static int net_current_ndev;
static void* net_current_ctx; /* the probe context of the choice */
static void* net_plugin_lib;  /* dlopen handle of an external plugin, NULL if none */

static ncclResult_t net_profiler_stub(void** ehandle, int type, void* phandle, int64_t plugin_id,
                                      void* ext_data) {
  if (ehandle != NULL) *ehandle = NULL;
  return ncclSuccess;
}

/* The version of an ncclNetPlugin_v<N> symbol the library exports outside the accepted range, 0
 * when it has none at all. */
static int net_plugin_other_version(void* lib) {
  for (int v = 1; v <= 32; v++) {
    char name[32];
    if (v >= 8 && v <= 12) continue;
    snprintf(name, sizeof(name), "ncclNetPlugin_v%d", v);
    if (dlsym(lib, name) != NULL) return v;
  }
  return 0;
}

/* Loads the external plugin if one is configured and present. *out stays NULL otherwise. */
static ncclResult_t net_plugin_load(const ncclNet_t** out) {
  const char* spec = param_str(PARAM_NET_PLUGIN);
  char opened[NET_PLUGIN_NAME_MAX], why[1024];
  *out = NULL;
  if (spec != NULL && (spec[0] == '\0' || plugin_name_is_none(spec))) {
    INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: disabled by NCCL_NET_PLUGIN, using internal networks");
    return ncclSuccess;
  }
  void* lib = plugin_lib_open(PLUGIN_NET, spec, opened, sizeof(opened), why, sizeof(why));
  if (lib == NULL) {
    INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: no plugin found (%s), using internal networks", why);
    return ncclSuccess;
  }
  const ncclNet_t* net = NULL;
  void* sym;
  int version = 0;
  if ((sym = dlsym(lib, "ncclNetPlugin_v12")) != NULL) { /* the newest first, as stock */
    CHECK(net_compat_from_v12((const ncclNet_v12_t*)sym, &net));
    version = 12;
  } else if ((sym = dlsym(lib, "ncclNetPlugin_v11")) != NULL) {
    CHECK(net_compat_from_v11((const ncclNet_v11_t*)sym, &net));
    version = 11;
  } else if ((sym = dlsym(lib, "ncclNetPlugin_v10")) != NULL) {
    CHECK(net_compat_from_v10((const ncclNet_v10_t*)sym, &net));
    version = 10;
  } else if ((sym = dlsym(lib, "ncclNetPlugin_v9")) != NULL) {
    CHECK(net_compat_from_v9((const ncclNet_v9_t*)sym, &net));
    version = 9;
  } else if ((sym = dlsym(lib, "ncclNetPlugin_v8")) != NULL) {
    CHECK(net_compat_from_v8((const ncclNet_v8_t*)sym, &net));
    version = 8;
  } else {
    int other = net_plugin_other_version(lib);
    if (other != 0)
      WARN(
          "NET/Plugin: %s exports ncclNetPlugin_v%d, a version Baton does not accept (it "
          "accepts " NET_PLUGIN_VERSIONS "); using internal networks",
          opened, other);
    else
      INFO(NCCL_INIT | NCCL_NET,
           "NET/Plugin: %s has no ncclNetPlugin_v<N> symbol (Baton accepts " NET_PLUGIN_VERSIONS
           "); using internal networks",
           opened);
    dlclose(lib);
    return ncclSuccess;
  }
  INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: loaded %s (ncclNetPlugin_v%d, network %s)", opened,
       version, net->name ? net->name : "?");
  net_plugin_lib = lib;
  *out = net;
  return ncclSuccess;
}

static ncclResult_t net_init_ctx(const ncclNet_t* net, uint64_t comm_id, int traffic_class,
                                 void** ctx) {
  ncclNetCommConfig_t config = {.trafficClass = traffic_class < 0 ? NCCL_NET_TRAFFIC_CLASS_UNDEF
                                                                  : traffic_class};
  *ctx = NULL;
  return net->init(ctx, comm_id, &config, log_emit, net_profiler_stub);
}

/* Initializes a candidate; ncclSuccess with ndev > 0 when usable (*ctx then holds its context). */
static ncclResult_t net_try(const ncclNet_t* net, int* ndev_out, void** ctx) {
  int ndev = 0;
  ncclResult_t res = net_init_ctx(net, 0, -1, ctx);
  if (res != ncclSuccess) {
    INFO(NCCL_INIT | NCCL_NET, "NET/%s: init failed (error %d), skipped", net->name, (int)res);
    return res;
  }
  res = net->devices(&ndev);
  if (res != ncclSuccess || ndev <= 0) {
    INFO(NCCL_INIT | NCCL_NET, "NET/%s: no usable device, skipped", net->name);
    net->finalize(*ctx);
    *ctx = NULL;
    return res != ncclSuccess ? res : ncclSystemError;
  }
  *ndev_out = ndev;
  return ncclSuccess;
}

static ncclResult_t net_choose(const ncclNet_t** out, int* ndev_out, void** ctx_out) {
  const ncclNet_t* plugin = NULL;
  CHECK(net_plugin_load(&plugin));
  const ncclNet_t* candidates[3] = {plugin, net_builtin_ib(), &net_socket};
  const char* names[3] = {plugin ? plugin->name : NULL, "IB", net_socket.name};
  const char* forced = param_str(PARAM_NET);
  if (forced != NULL && forced[0] == '\0') forced = NULL;

  for (int i = 0; i < 3; i++) {
    if (forced != NULL && (names[i] == NULL || strcasecmp(forced, names[i]) != 0)) continue;
    if (candidates[i] == NULL) continue;
    int ndev = 0;
    ncclResult_t res = net_try(candidates[i], &ndev, ctx_out);
    if (res == ncclSuccess) {
      INFO(NCCL_INIT | NCCL_NET, "NET: using network %s (%d device%s)", candidates[i]->name, ndev,
           ndev == 1 ? "" : "s");
      *out = candidates[i];
      *ndev_out = ndev;
      return ncclSuccess;
    }
    if (forced != NULL) {
      WARN(
          "NCCL_NET=%s: that network failed to initialize or has no device (error %d; the NET "
          "lines at NCCL_DEBUG=INFO say why)",
          forced, (int)res);
      return ncclSystemError;
    }
  }
  if (forced != NULL) {
    WARN("NCCL_NET=%s: no network of that name (available: %s%sIB, Socket)", forced,
         plugin ? plugin->name : "", plugin ? ", " : "");
    return ncclInvalidArgument;
  }
  WARN(
      "NET: no usable network (the socket network found no interface; check "
      "NCCL_SOCKET_IFNAME)");
  return ncclSystemError;
}

ncclResult_t net_select(const ncclNet_t** out, int* ndev_out) {
  pthread_mutex_lock(&net_lock);
  if (!net_chosen) {
    net_choice_result = net_choose(&net_current, &net_current_ndev, &net_current_ctx);
    net_chosen = true;
  }
  ncclResult_t res = net_choice_result;
  const ncclNet_t* net = net_current;
  int ndev = net_current_ndev;
  pthread_mutex_unlock(&net_lock);
  if (res != ncclSuccess) return res;
  *out = net;
  if (ndev_out != NULL) *ndev_out = ndev;
  return ncclSuccess;
}

ncclResult_t net_ctx_open(const ncclNet_t* net, uint64_t comm_id, int traffic_class, void** ctx) {
  ncclResult_t res = net_init_ctx(net, comm_id, traffic_class, ctx);
  if (res != ncclSuccess)
    WARN("NET/%s: init for communicator %llx failed (error %d)", net->name,
         (unsigned long long)comm_id, (int)res);
  return res;
}

void net_ctx_close(const ncclNet_t* net, void* ctx) {
  ncclResult_t res = net->finalize(ctx);
  if (res != ncclSuccess) INFO(NCCL_NET, "NET/%s: finalize returned %d", net->name, (int)res);
}

void net_select_reset(void) {
  pthread_mutex_lock(&net_lock);
  if (net_current != NULL && net_current_ctx != NULL) net_current->finalize(net_current_ctx);
  net_current_ctx = NULL;
  net_chosen = false;
  net_current = NULL;
  net_current_ndev = 0;
  if (net_plugin_lib != NULL) dlclose(net_plugin_lib);
  net_plugin_lib = NULL;
  pthread_mutex_unlock(&net_lock);
}
