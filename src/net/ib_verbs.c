/* libibverbs without linking it: dlopen("libibverbs.so.1") once and resolve the entry points the
 * IB network uses (ib.h lists them). Absent library or entry point: one INFO line and ib_verbs()
 * returns NULL, so the IB network reports no device and the socket network is used. Only the
 * header of rdma-core is needed at build time; the inline verbs (post_send, post_recv, poll_cq)
 * go through the provider's function table in struct ibv_context, as verbs.h itself does. */
#ifdef BATON_HAVE_VERBS
#include <dlfcn.h>
#include <pthread.h>

#include "net/ib.h"

#define IB_VERBS_LIB "libibverbs.so.1"

typedef struct ib_sym {
  const char* name;
  size_t offset; /* of the function pointer in ib_verbs_t */
  bool optional;
} ib_sym_t;

#define IB_SYM(field, name, opt) \
  { name, offsetof(ib_verbs_t, field), opt }
static const ib_sym_t ib_syms[] = {
    IB_SYM(get_device_list, "ibv_get_device_list", false),
    IB_SYM(free_device_list, "ibv_free_device_list", false),
    IB_SYM(get_device_name, "ibv_get_device_name", false),
    IB_SYM(open_device, "ibv_open_device", false),
    IB_SYM(close_device, "ibv_close_device", false),
    IB_SYM(query_device, "ibv_query_device", false),
    IB_SYM(query_port, "ibv_query_port", false),
    IB_SYM(query_gid, "ibv_query_gid", false),
    IB_SYM(alloc_pd, "ibv_alloc_pd", false),
    IB_SYM(dealloc_pd, "ibv_dealloc_pd", false),
    IB_SYM(reg_mr, "ibv_reg_mr", false),
    IB_SYM(dereg_mr, "ibv_dereg_mr", false),
    IB_SYM(create_cq, "ibv_create_cq", false),
    IB_SYM(destroy_cq, "ibv_destroy_cq", false),
    IB_SYM(create_qp, "ibv_create_qp", false),
    IB_SYM(modify_qp, "ibv_modify_qp", false),
    IB_SYM(destroy_qp, "ibv_destroy_qp", false),
    IB_SYM(get_async_event, "ibv_get_async_event", false),
    IB_SYM(ack_async_event, "ibv_ack_async_event", false),
    IB_SYM(wc_status_str, "ibv_wc_status_str", false),
    IB_SYM(event_type_str, "ibv_event_type_str", false),
    IB_SYM(fork_init, "ibv_fork_init", false),
    IB_SYM(reg_mr_iova2, "ibv_reg_mr_iova2", true),
    IB_SYM(reg_dmabuf_mr, "ibv_reg_dmabuf_mr", true),
};
#define IB_NSYMS ((int)(sizeof(ib_syms) / sizeof(ib_syms[0])))

static pthread_once_t ib_verbs_once = PTHREAD_ONCE_INIT;
static ib_verbs_t ib_verbs_table;
static bool ib_verbs_ok;

static void ib_verbs_load(void) {
  ib_verbs_t v;
  memset(&v, 0, sizeof(v));
  void* h = dlopen(IB_VERBS_LIB, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    INFO(NCCL_INIT | NCCL_NET,
         "NET/IB: cannot load %s (%s): rdma-core is not installed; the IB network is off",
         IB_VERBS_LIB, dlerror());
    return;
  }
  for (int i = 0; i < IB_NSYMS; i++) {
    void* fn = dlsym(h, ib_syms[i].name);
    if (fn == NULL && !ib_syms[i].optional) {
      INFO(NCCL_INIT | NCCL_NET, "NET/IB: %s has no %s (rdma-core too old?); the IB network is off",
           IB_VERBS_LIB, ib_syms[i].name);
      dlclose(h);
      return;
    }
    memcpy((char*)&v + ib_syms[i].offset, &fn, sizeof(fn));
  }
  /* The handle stays open for the life of the process: the table points into it. */
  ib_verbs_table = v;
  ib_verbs_ok = true;
}

const ib_verbs_t* ib_verbs(void) {
  pthread_once(&ib_verbs_once, ib_verbs_load);
  return ib_verbs_ok ? &ib_verbs_table : NULL;
}

int ib_query_port(const ib_verbs_t* v, struct ibv_context* ctx, uint8_t port,
                  struct ibv_port_attr* attr) {
  struct verbs_context* vctx = verbs_get_ctx_op(ctx, query_port);
  if (vctx != NULL) return vctx->query_port(ctx, port, attr, sizeof(*attr));
  memset(attr, 0, sizeof(*attr));
  return v->query_port(ctx, port, (struct _compat_ibv_port_attr*)attr);
}
#endif /* BATON_HAVE_VERBS */
