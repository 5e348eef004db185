/* Choosing the network behind the NET transport: an external ncclNet plugin (NCCL_NET_PLUGIN),
 * the built-in IB verbs network (not implemented yet: net_builtin_ib is the hook), or the
 * built-in socket network. Chosen once per process; NCCL_NET forces one by name. */
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
static void* net_plugin_lib; /* dlopen handle of an external plugin, NULL if none */

/* The hook for the built-in IB verbs network (a later issue): returns its table once written.
 * Until then IB is reachable only through an external plugin. */
static const ncclNet_t* net_builtin_ib(void) {
  return NULL; /* NCCL_IB_DISABLE / NCCL_IB_HCA will be read here */
}

static ncclResult_t net_profiler_stub(void** ehandle, int type, void* phandle, int64_t plugin_id,
                                      void* ext_data) {
  if (ehandle != NULL) *ehandle = NULL;
  return ncclSuccess;
}

/* On success, opened receives the name that loaded (same size as the candidates: no truncation). */
static void* net_plugin_open(const char* spec, char opened[static NET_PLUGIN_NAME_MAX]) {
  char names[2][NET_PLUGIN_NAME_MAX];
  int nnames = 0;
  if (spec == NULL) {
    snprintf(names[nnames++], NET_PLUGIN_NAME_MAX, "libnccl-net.so");
  } else if (strchr(spec, '/') != NULL) {
    snprintf(names[nnames++], NET_PLUGIN_NAME_MAX, "%s", spec);
  } else {
    snprintf(names[nnames++], NET_PLUGIN_NAME_MAX, "libnccl-net-%s.so", spec);
    snprintf(names[nnames++], NET_PLUGIN_NAME_MAX, "%s", spec);
  }
  for (int i = 0; i < nnames; i++) {
    void* lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (lib != NULL) {
      memcpy(opened, names[i], NET_PLUGIN_NAME_MAX); /* snprintf terminated it */
      return lib;
    }
    INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: could not load %s: %s", names[i], dlerror());
  }
  return NULL;
}

/* Loads the external plugin if one is configured and present. *out stays NULL otherwise. */
static ncclResult_t net_plugin_load(const ncclNet_t** out) {
  const char* spec = param_str(PARAM_NET_PLUGIN);
  char opened[NET_PLUGIN_NAME_MAX];
  *out = NULL;
  if (spec != NULL && (spec[0] == '\0' || strcasecmp(spec, "none") == 0)) {
    INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: disabled by NCCL_NET_PLUGIN, using internal networks");
    return ncclSuccess;
  }
  void* lib = net_plugin_open(spec, opened);
  if (lib == NULL) {
    INFO(NCCL_INIT | NCCL_NET, "NET/Plugin: no plugin found, using internal networks");
    return ncclSuccess;
  }
  const ncclNet_t* net = NULL;
  void* sym;
  int version = 0;
  if ((sym = dlsym(lib, "ncclNetPlugin_v10")) != NULL) {
    net = (const ncclNet_t*)sym;
    version = 10;
  } else if ((sym = dlsym(lib, "ncclNetPlugin_v9")) != NULL) {
    CHECK(net_compat_from_v9((const ncclNet_v9_t*)sym, &net));
    version = 9;
  } else if ((sym = dlsym(lib, "ncclNetPlugin_v8")) != NULL) {
    CHECK(net_compat_from_v8((const ncclNet_v8_t*)sym, &net));
    version = 8;
  } else {
    INFO(NCCL_INIT | NCCL_NET,
         "NET/Plugin: %s has no ncclNetPlugin_v10, _v9 or _v8 symbol (too old?); using internal "
         "networks",
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

/* Initializes a candidate; ncclSuccess with ndev > 0 when usable. */
static ncclResult_t net_try(const ncclNet_t* net, int* ndev_out) {
  int ndev = 0;
  ncclResult_t res = net->init(log_emit, net_profiler_stub);
  if (res != ncclSuccess) {
    INFO(NCCL_INIT | NCCL_NET, "NET/%s: init failed (error %d), skipped", net->name, (int)res);
    return res;
  }
  res = net->devices(&ndev);
  if (res != ncclSuccess || ndev <= 0) {
    INFO(NCCL_INIT | NCCL_NET, "NET/%s: no usable device, skipped", net->name);
    return res != ncclSuccess ? res : ncclSystemError;
  }
  *ndev_out = ndev;
  return ncclSuccess;
}

static ncclResult_t net_choose(const ncclNet_t** out, int* ndev_out) {
  const ncclNet_t* plugin = NULL;
  CHECK(net_plugin_load(&plugin));
  const ncclNet_t* candidates[3] = {plugin, net_builtin_ib(), &net_socket};
  const char* names[3] = {plugin ? plugin->name : NULL, "IB", net_socket.name};
  const char* forced = param_str(PARAM_NET);
  if (forced != NULL && forced[0] == '\0') forced = NULL;

  for (int i = 0; i < 3; i++) {
    if (forced != NULL && (names[i] == NULL || strcasecmp(forced, names[i]) != 0)) continue;
    if (candidates[i] == NULL) {
      if (forced != NULL) {
        WARN(
            "NCCL_NET=%s: the built-in IB verbs network is not available in this Baton build; "
            "use NCCL_NET=Socket or an external plugin (NCCL_NET_PLUGIN)",
            forced);
        return ncclInvalidUsage;
      }
      continue;
    }
    int ndev = 0;
    ncclResult_t res = net_try(candidates[i], &ndev);
    if (res == ncclSuccess) {
      INFO(NCCL_INIT | NCCL_NET, "NET: using network %s (%d device%s)", candidates[i]->name, ndev,
           ndev == 1 ? "" : "s");
      *out = candidates[i];
      *ndev_out = ndev;
      return ncclSuccess;
    }
    if (forced != NULL) {
      WARN("NCCL_NET=%s: that network failed to initialize or has no device (error %d)", forced,
           (int)res);
      return ncclSystemError;
    }
  }
  if (forced != NULL) {
    WARN("NCCL_NET=%s: no network of that name (available: %s%sSocket)", forced,
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
    net_choice_result = net_choose(&net_current, &net_current_ndev);
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

void net_select_reset(void) {
  pthread_mutex_lock(&net_lock);
  net_chosen = false;
  net_current = NULL;
  net_current_ndev = 0;
  if (net_plugin_lib != NULL) dlclose(net_plugin_lib);
  net_plugin_lib = NULL;
  pthread_mutex_unlock(&net_lock);
}
