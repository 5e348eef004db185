/* Network selection and external plugins: NCCL_NET_PLUGIN (none, missing, no symbol), NCCL_NET
 * forcing a name, and plugins of every accepted version (v8, v10, v11, v12) compiled here from
 * small sources against src/net/net.h; a plugin of another version (v7) is refused with a WARN
 * naming the accepted ones. The fake plugins record what Baton passed them in variables the test
 * reads through dlsym. */
#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "fork_ranks.h"
#include "net/net.h"
#include "unit.h"

static ncclResult_t select_with(const char* plugin, const char* forced, const ncclNet_t** out) {
  unit_set_param("NCCL_SOCKET_IFNAME", "lo");
  unit_set_param("NCCL_NET_PLUGIN", plugin);
  unit_set_param("NCCL_NET", forced);
  unit_set_param("NCCL_IB_DISABLE", "1"); /* an RDMA device on the test machine must not win */
  net_select_reset();
  *out = NULL;
  return net_select(out, NULL);
}

START_TEST(plugin_absent_or_unusable_falls_back_to_socket) {
  char log[256];
  fork_ranks_log_to_file("INFO", log, sizeof(log));
  const ncclNet_t* net;
  ck_assert_int_eq(select_with(NULL, NULL, &net), ncclSuccess);
  ck_assert_ptr_eq(net, &net_socket);
  ck_assert_int_eq(select_with("none", NULL, &net), ncclSuccess);
  ck_assert_ptr_eq(net, &net_socket);
  ck_assert_int_eq(select_with("doesnotexist", NULL, &net), ncclSuccess);
  ck_assert_ptr_eq(net, &net_socket);
  ck_assert_int_eq(select_with("libm.so.6", NULL, &net), ncclSuccess); /* no ncclNetPlugin symbol */
  ck_assert_ptr_eq(net, &net_socket);
  ck_assert_int_eq(select_with("none", "socket", &net), ncclSuccess);
  ck_assert_ptr_eq(net, &net_socket);
  const char* l1[] = {"libnccl-net-doesnotexist.so", NULL};
  const char* l2[] = {"libm.so.6", "no ncclNetPlugin_v<N>", "v12, v11, v10, v9 and v8", NULL};
  const char* l3[] = {"NET/Socket : Using", "[0]lo:127.0.0.1", NULL};
  const char* l4[] = {"NET/IB: disabled by NCCL_IB_DISABLE", NULL};
  ck_assert(fork_ranks_file_has_line(log, l1));
  ck_assert(fork_ranks_file_has_line(log, l2));
  ck_assert(fork_ranks_file_has_line(log, l3));
  ck_assert(fork_ranks_file_has_line(log, l4));
  unlink(log);
}
END_TEST

START_TEST(forced_network_must_exist) {
  const ncclNet_t* net;
  ck_assert_int_eq(select_with("none", "IB", &net), ncclSystemError); /* NCCL_IB_DISABLE=1 */
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_NET=IB"));
  ck_assert_int_eq(select_with("none", "Bogus", &net), ncclInvalidArgument);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "Bogus"));
  /* The choice sticks until reset. */
  ck_assert_int_eq(net_select(&net, NULL), ncclInvalidArgument);
}
END_TEST

/* ---- Fake plugins -------------------------------------------------------------------------------
 */
/* Compiles src into <dir>/libnccl-net-fake.so; paths go to dir[] and lib[]. */
static void build_plugin(const char* src_text, char dir[32], char lib[PATH_MAX]) {
  const char* src_dir = getenv("BATON_SOURCE_DIR");
  ck_assert_ptr_nonnull(src_dir);
  snprintf(dir, 32, "/tmp/baton-netplugin-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char src[PATH_MAX], cmd[4 * PATH_MAX];
  snprintf(src, sizeof(src), "%s/fake.c", dir);
  snprintf(lib, PATH_MAX, "%s/libnccl-net-fake.so", dir);
  unit_write_file(src, src_text);
  snprintf(cmd, sizeof(cmd), "cc -std=gnu11 -shared -fPIC -I%s/src -I%s/include -o %s %s", src_dir,
           src_dir, lib, src);
  ck_assert_int_eq(system(cmd), 0);
  unlink(src);
}

static void remove_plugin(const char* dir, const char* lib) {
  net_select_reset();
  unlink(lib);
  rmdir(dir);
}

#define FAKE_COMMON                                                                              \
  "#include \"net/net.h\"\n"                                                                     \
  "int fake_init_calls; int fake_last_tc = -100; unsigned long long fake_last_comm_id;\n"        \
  "static ncclResult_t f_devices(int* n) { *n = 1; return ncclSuccess; }\n"                      \
  "static ncclResult_t f_no(void) { return ncclInternalError; }\n"                               \
  "static ncclResult_t f_listen(int d, void* h, void** l) { *l = (void*)1; return ncclSuccess; " \
  "}\n"

/* v8: int sizes, no context. */
static const char fake_v8_src[] = FAKE_COMMON
    "static ncclResult_t f_init(ncclDebugLogger_t l) { fake_init_calls++; l(NCCL_LOG_INFO, "
    "NCCL_NET, \"fake\", 1, \"FakeNet init called\"); return ncclSuccess; }\n"
    "static ncclResult_t f_props(int d, ncclNetProperties_v8_t* p) { p->name = \"fake0\"; "
    "p->speed = 12345; p->ptrSupport = NCCL_PTR_HOST; p->maxRecvs = 1; return ncclSuccess; }\n"
    "const ncclNet_v8_t ncclNetPlugin_v8 = { .name = \"Fake\", .init = f_init, .devices = "
    "f_devices, .getProperties = f_props, .listen = (void*)f_no, .connect = (void*)f_no, .accept "
    "= (void*)f_no, .regMr = (void*)f_no, .deregMr = (void*)f_no, .isend = (void*)f_no, .irecv = "
    "(void*)f_no, .test = (void*)f_no, .closeSend = (void*)f_no, .closeRecv = (void*)f_no, "
    ".closeListen = (void*)f_no };\n";

/* v10: one init per process, the config comes with connect. */
static const char fake_v10_src[] = FAKE_COMMON
    "static ncclResult_t f_init(ncclDebugLogger_t l, ncclProfilerCallback_t p) { "
    "fake_init_calls++; return ncclSuccess; }\n"
    "static ncclResult_t f_props(int d, ncclNetProperties_v10_t* p) { p->name = \"fake10\"; "
    "p->speed = 100; p->maxRecvs = 1; p->maxP2pBytes = 1 << 20; return ncclSuccess; }\n"
    "static ncclResult_t f_connect(int d, ncclNetCommConfig_v10_t* c, void* h, void** s, "
    "ncclNetDeviceHandle_v10_t** dh) { fake_last_tc = c ? c->trafficClass : -99; *s = (void*)2; "
    "return ncclSuccess; }\n"
    "const ncclNet_v10_t ncclNetPlugin_v10 = { .name = \"Fake10\", .init = f_init, .devices = "
    "f_devices, .getProperties = f_props, .listen = f_listen, .connect = f_connect, .accept = "
    "(void*)f_no, .regMr = (void*)f_no, .deregMr = (void*)f_no, .isend = (void*)f_no, .irecv = "
    "(void*)f_no, .test = (void*)f_no, .closeSend = (void*)f_no, .closeRecv = (void*)f_no, "
    ".closeListen = (void*)f_no };\n";

/* v11: a context per communicator; optional slots left NULL (as stock's own IB table does). */
static const char fake_v11_src[] = FAKE_COMMON
    "static int ctx_token;\n"
    "static ncclResult_t f_init(void** ctx, unsigned long long id, ncclNetCommConfig_v11_t* c, "
    "ncclDebugLogger_t l, ncclProfilerCallback_t p) { fake_init_calls++; fake_last_comm_id = id; "
    "fake_last_tc = c ? c->trafficClass : -99; *ctx = &ctx_token; return ncclSuccess; }\n"
    "static ncclResult_t f_props(int d, ncclNetProperties_v11_t* p) { p->name = \"fake11\"; "
    "p->speed = 400000; p->maxRecvs = 1; p->maxMultiRequestSize = 1; return ncclSuccess; }\n"
    "static ncclResult_t f_listen11(void* ctx, int d, void* h, void** l) { *l = ctx; return "
    "ncclSuccess; }\n"
    "const ncclNet_v11_t ncclNetPlugin_v11 = { .name = \"Fake11\", .init = (void*)f_init, "
    ".devices = f_devices, .getProperties = f_props, .listen = f_listen11, .connect = "
    "(void*)f_no, .accept = (void*)f_no, .regMr = (void*)f_no, .deregMr = (void*)f_no, .isend = "
    "(void*)f_no, .irecv = (void*)f_no, .test = (void*)f_no, .closeSend = (void*)f_no, "
    ".closeRecv = (void*)f_no, .closeListen = (void*)f_no };\n";

/* v12 beside a v11 table (v12 must win): a virtual NIC of 6 devices, a rail and a plane. */
static const char fake_v12_src[] = FAKE_COMMON
    "static int ctx_token; int fake_vdev_ndevs = -1, fake_vdev_last = -1;\n"
    "static ncclResult_t f_init(void** ctx, unsigned long long id, ncclNetCommConfig_v11_t* c, "
    "ncclDebugLogger_t l, ncclProfilerCallback_t p) { fake_init_calls++; *ctx = &ctx_token; "
    "return ncclSuccess; }\n"
    "static ncclResult_t f_props(int d, ncclNetProperties_v12_t* p) { p->name = \"fake12\"; "
    "p->speed = 800000; p->maxRecvs = 1; p->maxMultiRequestSize = 1; p->vProps.ndevs = 6; "
    "for (int i = 0; i < 6; i++) p->vProps.devs[i] = 10 + i; p->maxCollBytes = 77; "
    "p->railId = 3; p->planeId = 1; return ncclSuccess; }\n"
    "static ncclResult_t f_vdev(int* d, ncclNetVDeviceProps_v12_t* v) { fake_vdev_ndevs = "
    "v->ndevs; fake_vdev_last = v->devs[v->ndevs - 1]; *d = 5; return ncclSuccess; }\n"
    "const ncclNet_v12_t ncclNetPlugin_v12 = { .name = \"Fake12\", .init = (void*)f_init, "
    ".devices = f_devices, .getProperties = f_props, .listen = (void*)f_no, .connect = "
    "(void*)f_no, .accept = (void*)f_no, .regMr = (void*)f_no, .deregMr = (void*)f_no, .isend = "
    "(void*)f_no, .irecv = (void*)f_no, .test = (void*)f_no, .closeSend = (void*)f_no, "
    ".closeRecv = (void*)f_no, .closeListen = (void*)f_no, .makeVDevice = f_vdev };\n"
    "const ncclNet_v11_t ncclNetPlugin_v11 = { .name = \"Fake11-beside-12\" };\n";

/* v7: older than Baton accepts. */
static const char fake_v7_src[] =
    "struct old { const char* name; } ncclNetPlugin_v7 = { \"Ancient\" };\n";

static int* plugin_var(const char* lib, const char* name) {
  void* h = dlopen(lib, RTLD_NOW | RTLD_NOLOAD); /* the copy the loader opened */
  ck_assert_ptr_nonnull(h);
  int* v = dlsym(h, name);
  ck_assert_ptr_nonnull(v);
  dlclose(h);
  return v;
}

START_TEST(v8_plugin_is_loaded_and_adapted) {
  char dir[32], lib[PATH_MAX];
  build_plugin(fake_v8_src, dir, lib);
  const ncclNet_t* net;
  ck_assert_int_eq(select_with(lib, NULL, &net), ncclSuccess);
  ck_assert_str_eq(net->name, "Fake");
  ncclNetProperties_t props;
  memset(&props, 0xff, sizeof(props));
  ck_assert_int_eq(net->getProperties(0, &props), ncclSuccess);
  ck_assert_str_eq(props.name, "fake0");
  ck_assert_int_eq(props.speed, 12345);
  ck_assert_int_eq(props.forceFlush, 0);
  ck_assert_int_eq(props.vProps.ndevs, 1);
  ck_assert_uint_eq(props.maxP2pBytes, INT_MAX);
  ck_assert_int_eq(props.maxMultiRequestSize, 1);
  int x = 0;
  void* mh = NULL;
  ck_assert_int_eq(net->regMrDmaBuf(NULL, &x, 4, NCCL_PTR_HOST, 0, -1, &mh), ncclInternalError);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "regMrDmaBuf"));
  /* With the plugin loaded, NCCL_NET still picks a built-in by name. */
  ck_assert_int_eq(select_with(lib, "Socket", &net), ncclSuccess);
  ck_assert_ptr_eq(net, &net_socket);
  remove_plugin(dir, lib);
}
END_TEST

START_TEST(v10_plugin_gets_one_init_and_the_config_at_connect) {
  char dir[32], lib[PATH_MAX];
  build_plugin(fake_v10_src, dir, lib);
  const ncclNet_t* net;
  ck_assert_int_eq(select_with(lib, NULL, &net), ncclSuccess);
  ck_assert_str_eq(net->name, "Fake10");
  int* calls = plugin_var(lib, "fake_init_calls");
  int* tc = plugin_var(lib, "fake_last_tc");
  ck_assert_int_eq(*calls, 1);
  void *a = NULL, *b = NULL, *send = NULL, *listen = NULL;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ck_assert_int_eq(net_ctx_open(net, 7, 104, &a), ncclSuccess);
  ck_assert_int_eq(net_ctx_open(net, 8, -1, &b), ncclSuccess);
  ck_assert_int_eq(*calls, 1); /* v10 plugins are initialized once per process */
  ck_assert_int_eq(net->listen(a, 0, handle, &listen), ncclSuccess);
  ck_assert_int_eq(net->connect(a, 0, handle, &send, NULL), ncclSuccess);
  ck_assert_int_eq(*tc, 104); /* the communicator's traffic class reached the v10 connect */
  ck_assert_int_eq(net->connect(b, 0, handle, &send, NULL), ncclSuccess);
  ck_assert_int_eq(*tc, NCCL_NET_TRAFFIC_CLASS_UNDEF);
  ncclNetProperties_t props;
  ck_assert_int_eq(net->getProperties(0, &props), ncclSuccess);
  ck_assert_str_eq(props.name, "fake10");
  ck_assert_uint_eq(props.maxP2pBytes, 1 << 20);
  ck_assert_int_eq(props.maxMultiRequestSize, 1);
  net_ctx_close(net, a);
  net_ctx_close(net, b);
  remove_plugin(dir, lib);
}
END_TEST

START_TEST(v11_plugin_is_used_as_is_with_stubs_for_null_slots) {
  char dir[32], lib[PATH_MAX];
  build_plugin(fake_v11_src, dir, lib);
  const ncclNet_t* net;
  ck_assert_int_eq(select_with(lib, NULL, &net), ncclSuccess);
  ck_assert_str_eq(net->name, "Fake11");
  int* calls = plugin_var(lib, "fake_init_calls");
  int* tc = plugin_var(lib, "fake_last_tc");
  unsigned long long* id = (unsigned long long*)plugin_var(lib, "fake_last_comm_id");
  void* ctx = NULL;
  int before = *calls;
  ck_assert_int_eq(net_ctx_open(net, 0xabcdef, 3, &ctx), ncclSuccess);
  ck_assert_int_eq(*calls, before + 1); /* v11: one init per communicator */
  ck_assert_uint_eq(*id, 0xabcdef);
  ck_assert_int_eq(*tc, 3);
  void* listen = NULL;
  char handle[NCCL_NET_HANDLE_MAXSIZE];
  ck_assert_int_eq(net->listen(ctx, 0, handle, &listen), ncclSuccess);
  ck_assert_ptr_eq(listen, ctx); /* the context reached listen */
  void* dptr = NULL;
  ck_assert_int_eq(net->getDeviceMr(NULL, NULL, &dptr), ncclInternalError); /* stub, not NULL */
  ck_assert_ptr_nonnull(strstr(log_last_error(), "getDeviceMr"));
  ck_assert_int_eq(net->finalize(ctx), ncclSuccess);
  ck_assert_int_eq(net->setNetAttr(ctx, NULL), ncclSuccess);
  remove_plugin(dir, lib);
}
END_TEST

START_TEST(v12_plugin_is_taken_first_and_adapted) {
  char dir[32], lib[PATH_MAX];
  build_plugin(fake_v12_src, dir, lib);
  const ncclNet_t* net;
  ck_assert_int_eq(select_with(lib, NULL, &net), ncclSuccess);
  ck_assert_str_eq(net->name, "Fake12");
  ncclNetProperties_v11_t props;
  memset(&props, 0x5a, sizeof(props));
  ck_assert_int_eq(net->getProperties(0, &props), ncclSuccess);
  ck_assert_str_eq(props.name, "fake12");
  ck_assert_int_eq(props.speed, 800000);
  ck_assert_int_eq(props.maxCollBytes, 77); /* a field after the wider vProps */
  ck_assert_int_eq(props.maxMultiRequestSize, 1);
  ck_assert_int_eq(props.vProps.ndevs, NCCL_NET_MAX_DEVS_PER_NIC); /* 6, shown as v11's 4 */
  for (int i = 0; i < NCCL_NET_MAX_DEVS_PER_NIC; i++)
    ck_assert_int_eq(props.vProps.devs[i], 10 + i);
  ncclNetVDeviceProps_v11_t v = {.ndevs = 3, .devs = {7, 8, 9}};
  int d = -1;
  ck_assert_int_eq(net->makeVDevice(&d, &v), ncclSuccess);
  ck_assert_int_eq(d, 5);
  ck_assert_int_eq(*plugin_var(lib, "fake_vdev_ndevs"), 3);
  ck_assert_int_eq(*plugin_var(lib, "fake_vdev_last"), 9);
  void* dptr = NULL;
  ck_assert_int_eq(net->getDeviceMr(NULL, NULL, &dptr), ncclInternalError); /* stub, not NULL */
  remove_plugin(dir, lib);
}
END_TEST

START_TEST(other_version_is_refused_with_the_accepted_ones_named) {
  char dir[32], lib[PATH_MAX];
  build_plugin(fake_v7_src, dir, lib);
  const ncclNet_t* net;
  ck_assert_int_eq(select_with(lib, NULL, &net), ncclSuccess);
  ck_assert_ptr_eq(net, &net_socket);
  const char* err = log_last_error();
  ck_assert_msg(strstr(err, "ncclNetPlugin_v7") != NULL && strstr(err, "v12, v11, v10, v9 and v8"),
                "WARN was: %s", err);
  remove_plugin(dir, lib);
}
END_TEST

int main(void) {
  Suite* s = suite_create("net_plugin");
  TCase* tc = tcase_create("net_plugin");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, plugin_absent_or_unusable_falls_back_to_socket);
  tcase_add_test(tc, forced_network_must_exist);
  tcase_add_test(tc, v8_plugin_is_loaded_and_adapted);
  tcase_add_test(tc, v10_plugin_gets_one_init_and_the_config_at_connect);
  tcase_add_test(tc, v11_plugin_is_used_as_is_with_stubs_for_null_slots);
  tcase_add_test(tc, v12_plugin_is_taken_first_and_adapted);
  tcase_add_test(tc, other_version_is_refused_with_the_accepted_ones_named);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
