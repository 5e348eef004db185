/* The collective and point-to-point entry points: check the arguments (a bad one is
 * ncclInvalidArgument with a WARN naming it, and the communicator stays usable), then append tasks
 * to the communicator. A call outside ncclGroupStart/End is a group of its own. AlltoAll, Gather
 * and Scatter become groups of sends and receives. */
#include "collectives/collectives.h"

typedef struct coll_args {
  const char* api;
  int func; /* func_t, or one of the p2p-built collectives below */
  const void* sendbuff;
  void* recvbuff;
  size_t count;
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int root; /* root or peer; -1 when the call has none */
  ncclComm_t comm;
  cudaStream_t stream;
  void* prof_api; /* the call's profiler API event (plugins.c), NULL without one */
  const ncclCollConfig_t* config; /* a *Config call's, NULL otherwise */
  uint64_t prof_tag;              /* from config: its userProfilerTag */
  uint16_t select;                /* from config: coll_task_t.select, select_forced, min_ch, */
  bool select_forced;             /* max_ch */
  int16_t min_ch, max_ch;
} coll_args_t;

/* Collectives that are built from sends and receives. */
enum { COLL_ALLTOALL = FUNC_COUNT, COLL_GATHER, COLL_SCATTER };

static bool enqueue_has_op(int func) {
  return func == FUNC_ALLREDUCE || func == FUNC_REDUCE || func == FUNC_REDUCESCATTER;
}

static bool enqueue_has_root(int func) {
  return func == FUNC_BROADCAST || func == FUNC_REDUCE || func == COLL_GATHER ||
         func == COLL_SCATTER || func == FUNC_SEND || func == FUNC_RECV;
}

/* NCCL_CHECK_POINTERS=1 (unless NCCL_CHECKS_DISABLE=1), GPU communicators: p must be memory the
 * communicator's device can use: not plain host memory, not another device's memory (as stock). */
static ncclResult_t enqueue_check_pointer(const coll_args_t* a, const void* p, const char* name) {
  int dev = a->comm->cuda_dev;
  if (dev < 0 || param_int(PARAM_CHECK_POINTERS) == 0 || param_int(PARAM_CHECKS_DISABLE) != 0)
    return ncclSuccess;
  struct cudaPointerAttributes attr;
  cudaError_t err = cudaPointerGetAttributes(&attr, p);
  if (err != cudaSuccess) { /* a probe: a pointer CUDA does not know is the caller's error */
    (void)cudaGetLastError();
    WARN("%s: %s %p: cudaPointerGetAttributes failed: %s (NCCL_CHECK_POINTERS)", a->api, name, p,
         cudaGetErrorString(err));
    return ncclInvalidArgument;
  }
  if (attr.type == cudaMemoryTypeUnregistered) {
    WARN("%s: %s %p is host memory the GPU cannot access (NCCL_CHECK_POINTERS)", a->api, name, p);
    return ncclInvalidArgument;
  }
  if (attr.type == cudaMemoryTypeDevice && attr.device != dev) {
    WARN(
        "%s: %s %p is memory of device %d, but the communicator's rank %d runs on device %d "
        "(NCCL_CHECK_POINTERS)",
        a->api, name, p, attr.device, a->comm->rank, dev);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static ncclResult_t enqueue_check_buffer(const coll_args_t* a, const void* p, const char* name) {
  if (p != NULL) return enqueue_check_pointer(a, p, name);
  WARN("%s: argument %s is NULL with count %zu on rank %d", a->api, name, a->count, a->comm->rank);
  return ncclInvalidArgument;
}

/* The count's name in the API (what a WARN calls it). */
static const char* enqueue_count_name(int func) {
  return func == FUNC_ALLGATHER ? "sendcount" : func == FUNC_REDUCESCATTER ? "recvcount" : "count";
}

/* Every buffer a call names must be a possible C object (arg_span_ok), so that the planner and the
 * executors add offsets and chunk sizes to byte counts without overflow: refused before anything
 * is queued. */
static ncclResult_t enqueue_check_size(const coll_args_t* a) {
  size_t esize = datatype_size(a->dtype);
  size_t per = 1; /* elements of the largest buffer per unit of count */
  switch (a->func) {
    case FUNC_ALLGATHER:
    case FUNC_REDUCESCATTER:
    case COLL_ALLTOALL:
    case COLL_GATHER:
    case COLL_SCATTER:
      per = (size_t)a->comm->nranks;
      break;
    default:
      break;
  }
  size_t max_count = (size_t)PTRDIFF_MAX / esize / per;
  if (a->count > max_count) {
    WARN(
        "%s: invalid %s %zu (%s of %zu bytes%s): the buffer would exceed %td bytes, the largest "
        "object there can be",
        a->api, enqueue_count_name(a->func), a->count, datatype_name(a->dtype), esize,
        per > 1 ? ", times the rank count" : "", (ptrdiff_t)PTRDIFF_MAX);
    return ncclInvalidArgument;
  }
  size_t bytes = a->count * esize * per;
  const void* bufs[2] = {a->sendbuff, a->recvbuff};
  static const char* const names[2] = {"sendbuff", "recvbuff"};
  for (int i = 0; i < 2; i++) {
    if (arg_span_ok(bufs[i], bytes)) continue;
    WARN("%s: invalid %s %p with %s %zu: the buffer of %zu bytes wraps around the address space",
         a->api, names[i], bufs[i], enqueue_count_name(a->func), a->count, bytes);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* A *Config call's ncclCollConfig_t, read by its size (2.31's ended before launchCompletionEvent;
 * later fields read as the initializer's): algSelection into a->select (an invalid or
 * unsatisfiable one is an error with forceAlgSelection 1, automatic selection with 0), CTA bounds
 * into a->min_ch / max_ch (out of 1..64 ignored, as stock; bounds of AlltoAll, Gather and Scatter,
 * which are point-to-point, are ignored too), userProfilerTag into a->prof_tag (for profiler
 * plugins). cgaClusterSize, nvlsCTAs, CTAPolicy and vendor extensions change nothing in Baton; a
 * launchCompletionEvent is refused (not built). */
#define ENQUEUE_MAX_CTAS 64
static ncclResult_t enqueue_config(coll_args_t* a) {
  const ncclCollConfig_t defaults = NCCL_COLLCONFIG_INITIALIZER;
  ncclCollConfig_t c = defaults;
  size_t size;
  memcpy(&size, a->config, sizeof(size));
  if (size < offsetof(ncclCollConfig_t, launchCompletionEvent)) {
    WARN("%s: config size %zu is too small: initialize ncclCollConfig_t with "
         "NCCL_COLLCONFIG_INITIALIZER", a->api, size);
    return ncclInvalidArgument;
  }
  memcpy(&c, a->config, size < sizeof(c) ? size : sizeof(c));
  if (c.magic != NCCL_API_MAGIC) {
    WARN("%s: config magic 0x%x is wrong: initialize ncclCollConfig_t with "
         "NCCL_COLLCONFIG_INITIALIZER", a->api, c.magic);
    return ncclInvalidArgument;
  }
  if (c.forceAlgSelection != 0 && c.forceAlgSelection != 1) {
    WARN("%s: invalid config forceAlgSelection %d (0 or 1)", a->api, c.forceAlgSelection);
    return ncclInvalidArgument;
  }
  if (c.CTAPolicy != NCCL_CONFIG_UNDEF_INT && (c.CTAPolicy < 0 || c.CTAPolicy > 3)) {
    WARN("%s: invalid config CTAPolicy %d (NCCL_CTA_POLICY_* bits)", a->api, c.CTAPolicy);
    return ncclInvalidArgument;
  }
  if (c.launchCompletionEvent != NULL) {
    WARN("%s: config launchCompletionEvent is not supported by Baton yet; pass NULL and record "
         "an event on the stream after the call", a->api);
    return ncclInvalidUsage;
  }
  a->prof_tag = c.userProfilerTag;
  bool p2p = a->func >= FUNC_COUNT;
  int lo = c.minCTAs >= 1 && c.minCTAs <= ENQUEUE_MAX_CTAS ? c.minCTAs : 0;
  int hi = c.maxCTAs >= 1 && c.maxCTAs <= ENQUEUE_MAX_CTAS ? c.maxCTAs : 0;
  if (lo > 0 && hi > 0 && lo > hi) lo = 1;
  a->min_ch = p2p ? 0 : (int16_t)lo;
  a->max_ch = p2p ? 0 : (int16_t)hi;
  if (c.algSelection == NULL || c.algSelection[0] == '\0') return ncclSuccess;
  char bad[64] = "";
  uint16_t pairs = 0;
  const char* why = NULL;
  if (!coll_select_parse(c.algSelection, &pairs, bad, sizeof(bad)))
    why = "names no algorithm";
  else if (p2p)
    why = "selects nothing: this collective runs as sends and receives";
  else if (!coll_select_possible(coll_of(a->comm), a->func, coll_task_bytes(&(coll_task_t){
               .func = (uint8_t)a->func, .dtype = (uint8_t)a->dtype, .count = a->count},
               a->comm->nranks), pairs))
    why = "selects nothing that can run here (what this communicator has, NCCL_ALGO, NCCL_PROTO)";
  if (why == NULL) {
    a->select = pairs;
    a->select_forced = c.forceAlgSelection == 1;
    return ncclSuccess;
  }
  if (c.forceAlgSelection == 0) {
    INFO(NCCL_TUNING, "%s: algSelection \"%s\" %s%s%s; selecting automatically", a->api,
         c.algSelection, why, bad[0] ? ": " : "", bad);
    return ncclSuccess;
  }
  WARN("%s: config algSelection \"%s\" %s%s%s (forceAlgSelection 1)", a->api, c.algSelection,
       why, bad[0] ? ": " : "", bad);
  return ncclInvalidArgument;
}

/* ---- The operation as executors see it ---------------------------------------------------------
 * Avg becomes PreMulSum for floating types, SumPostDiv for integers; a user operator (redop.c's
 * table) is the PreMulSum it was created as. */
static bool redop_is_float(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16:
    case ncclFloat32:
    case ncclFloat64:
    case ncclBfloat16:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return true;
    default:
      return false;
  }
}

ncclResult_t coll_redop_resolve(struct coll_comm* cc, ncclRedOp_t op, ncclDataType_t dtype,
                                const char* api, dev_redop_t* out) {
  dev_redop_t r = {0};
  switch (op) {
    case ncclSum:
      r.kind = DEV_OP_SUM;
      break;
    case ncclProd:
      r.kind = DEV_OP_PROD;
      break;
    case ncclMin:
      r.kind = DEV_OP_MIN;
      break;
    case ncclMax:
      r.kind = DEV_OP_MAX;
      break;
    case ncclAvg:
      if (redop_is_float(dtype)) {
        r.kind = DEV_OP_PREMULSUM;
        r.scalar = coll_scalar_bits(1.0 / (double)cc->nranks, dtype);
      } else {
        r.kind = DEV_OP_SUMPOSTDIV;
        r.scalar = (uint64_t)cc->nranks;
      }
      break;
    default: {
      int idx = (int)op - (int)ncclNumOps;
      if ((int)op < 0 || idx < 0) {
        WARN("%s: invalid reduction operation %d (op)", api, (int)op);
        return ncclInvalidArgument;
      }
      pthread_mutex_lock(&cc->lock);
      bool ok = idx < cc->nuser_ops && cc->user_ops[idx].in_use;
      coll_user_op_t u = ok ? cc->user_ops[idx] : (coll_user_op_t){0};
      pthread_mutex_unlock(&cc->lock);
      if (!ok) {
        WARN(
            "%s: reduction operation %d (op) was not created on this communicator or was already "
            "destroyed with ncclRedOpDestroy",
            api, (int)op);
        return ncclInvalidArgument;
      }
      if (u.dtype != (uint8_t)dtype) {
        WARN("%s: user reduction operation %d (op) was created for datatype %s, not %s", api,
             (int)op, datatype_name((ncclDataType_t)u.dtype), datatype_name(dtype));
        return ncclInvalidArgument;
      }
      r = u.op;
      break;
    }
  }
  *out = r;
  return ncclSuccess;
}

static ncclResult_t enqueue_check(coll_args_t* a, dev_redop_t* op) {
  ncclComm_t comm = a->comm;
  if ((int)a->dtype < 0 || a->dtype >= ncclNumTypes) {
    WARN("%s: invalid datatype %d (datatype)", a->api, (int)a->dtype);
    return ncclInvalidArgument;
  }
  CHECK(enqueue_check_size(a));
  if (enqueue_has_root(a->func) && (a->root < 0 || a->root >= comm->nranks)) {
    bool p2p = a->func == FUNC_SEND || a->func == FUNC_RECV;
    WARN("%s: invalid %s %d (%s): the communicator has %d ranks", a->api, p2p ? "peer" : "root",
         a->root, p2p ? "peer" : "root", comm->nranks);
    return ncclInvalidArgument;
  }
  if (a->config != NULL) CHECK(enqueue_config(a));
  *op = (dev_redop_t){0};
  if (enqueue_has_op(a->func))
    CHECK(coll_redop_resolve(coll_of(comm), a->op, a->dtype, a->api, op));
  if (a->count == 0) return ncclSuccess;
  bool root = a->root == comm->rank;
  bool need_send = true, need_recv = true;
  switch (a->func) {
    case FUNC_BROADCAST:
      need_send = root;
      break;
    case FUNC_REDUCE:
      need_recv = root;
      break;
    case COLL_GATHER:
      need_recv = root;
      break;
    case COLL_SCATTER:
      need_send = root;
      break;
    case FUNC_SEND:
      need_recv = false;
      break;
    case FUNC_RECV:
      need_send = false;
      break;
    default:
      break;
  }
  if (need_send) CHECK(enqueue_check_buffer(a, a->sendbuff, "sendbuff"));
  if (need_recv) CHECK(enqueue_check_buffer(a, a->recvbuff, "recvbuff"));
  return ncclSuccess;
}

/* One task of call a: func on (sendbuff, recvbuff) with root or peer `root`. */
static ncclResult_t enqueue_task(const coll_args_t* a, int func, const void* sendbuff,
                                 void* recvbuff, int root, const dev_redop_t* op) {
  coll_task_t t = {.func = (uint8_t)func,
                   .dtype = (uint8_t)a->dtype,
                   .root = root,
                   .op = *op,
                   .sendbuff = sendbuff,
                   .recvbuff = recvbuff,
                   .count = a->count,
                   .stream = a->stream,
                   .select = a->select,
                   .select_forced = a->select_forced,
                   .min_ch = a->min_ch,
                   .max_ch = a->max_ch,
                   .prof_api = a->prof_api,
                   .prof_tag = a->prof_tag};
  return coll_task_append(coll_of(a->comm), &t);
}

static ncclResult_t enqueue_tasks(const coll_args_t* a, const dev_redop_t* op) {
  int nranks = a->comm->nranks, rank = a->comm->rank;
  size_t bytes = a->count * datatype_size(a->dtype);
  const char* sb = a->sendbuff;
  char* rb = a->recvbuff;
  switch (a->func) {
    case COLL_ALLTOALL:
      for (int r = 0; r < nranks; r++) {
        CHECK(enqueue_task(a, FUNC_SEND, sb + (size_t)r * bytes, NULL, r, op));
        CHECK(enqueue_task(a, FUNC_RECV, NULL, rb + (size_t)r * bytes, r, op));
      }
      return ncclSuccess;
    case COLL_GATHER:
      CHECK(enqueue_task(a, FUNC_SEND, sb, NULL, a->root, op));
      if (rank == a->root) {
        for (int r = 0; r < nranks; r++)
          CHECK(enqueue_task(a, FUNC_RECV, NULL, rb + (size_t)r * bytes, r, op));
      }
      return ncclSuccess;
    case COLL_SCATTER:
      if (rank == a->root) {
        for (int r = 0; r < nranks; r++)
          CHECK(enqueue_task(a, FUNC_SEND, sb + (size_t)r * bytes, NULL, r, op));
      }
      CHECK(enqueue_task(a, FUNC_RECV, NULL, rb, a->root, op));
      return ncclSuccess;
    default:
      return enqueue_task(a, a->func, a->sendbuff, a->recvbuff,
                          enqueue_has_root(a->func) ? a->root : -1, op);
  }
}

static const char* enqueue_name(int func) {
  switch (func) {
    case COLL_ALLTOALL:
      return "AlltoAll";
    case COLL_GATHER:
      return "Gather";
    case COLL_SCATTER:
      return "Scatter";
    default:
      return coll_func_name(func);
  }
}

/* The progress watch's kind of a call. */
static int enqueue_kind(int func) {
  switch (func) {
    case FUNC_BROADCAST:
      return OP_BROADCAST;
    case FUNC_REDUCE:
      return OP_REDUCE;
    case FUNC_ALLGATHER:
      return OP_ALLGATHER;
    case FUNC_REDUCESCATTER:
      return OP_REDUCESCATTER;
    case FUNC_ALLREDUCE:
      return OP_ALLREDUCE;
    case FUNC_SEND:
      return OP_SEND;
    case FUNC_RECV:
      return OP_RECV;
    case COLL_ALLTOALL:
      return OP_ALLTOALL;
    case COLL_GATHER:
      return OP_GATHER;
    default:
      return OP_SCATTER;
  }
}

/* The call in its error-sink scope; *held: the communicator is held (coll_enqueue releases it
 * after the scope has ended, as the release may free it). */
static ncclResult_t enqueue_call(coll_args_t* a, bool* held) {
  dev_redop_t op;
  uint64_t t0 = trace_on() ? trace_now_ns() : 0;
  COMM_API_SCOPE();
  ncclResult_t res = comm_check_ready(a->comm, a->api);
  if (res != ncclSuccess) goto fail;
  if (coll_of(a->comm) == NULL) {
    WARN("%s: comm %p has no collective state (its initialization did not complete)", a->api,
         (void*)a->comm);
    res = ncclInvalidUsage;
    goto fail;
  }
  CHECK_GOTO(comm_hold(a->comm, a->api), res, fail);
  *held = true;
  CHECK_GOTO(enqueue_check(a, &op), res, fail);
  /* An empty collective is discarded once its arguments pass, as stock discards it: no task, no
   * group, no operation number, no profiler event. A point-to-point call of 0 bytes still goes
   * to its peer, which may be waiting for it. */
  if (a->count == 0 && a->func != FUNC_SEND && a->func != FUNC_RECV) {
    INFO(NCCL_COLL, "%s: count 0 comm %p: nothing to do", enqueue_name(a->func), (void*)a->comm);
    return ncclSuccess;
  }
  struct coll_comm* cc = coll_of(a->comm);
  prog_op_t pop;
  progress_enqueue(a->comm, enqueue_kind(a->func), a->count, (int)a->dtype, (int)a->op,
                   enqueue_has_root(a->func) ? a->root : -1, &pop);
  INFO(NCCL_COLL,
       "%s: opCount %lx sendbuff %p recvbuff %p count %zu datatype %d op %d root %d comm %p "
       "[nranks=%d] stream %p",
       enqueue_name(a->func), (unsigned long)(pop.seq - 1), a->sendbuff, a->recvbuff, a->count,
       (int)a->dtype, (int)a->op, a->root, (void*)a->comm, a->comm->nranks, (void*)a->stream);
  bool implicit = coll_group_depth() == 0;
  if (implicit) coll_group_start();
  bool p2p = a->func == FUNC_SEND || a->func == FUNC_RECV || a->func >= FUNC_COUNT;
  a->prof_api = coll_prof_api_begin(cc, p2p, enqueue_name(a->func), a->count, a->dtype, a->root,
                                    a->stream, a->prof_tag);
  res = enqueue_tasks(a, &op);
  coll_prof_api_end(cc, a->prof_api);
  coll_group_set_error(res);
  if (implicit) {
    ncclResult_t end = coll_group_end();
    if (res == ncclSuccess) res = end;
  }
  if (t0 != 0) trace_span(a->comm, TRACE_CALL, t0, trace_now_ns(), &pop, 0);
  return res;
fail:
  coll_group_set_error(res);
  return res;
}

static ncclResult_t coll_enqueue(coll_args_t* a) {
  bool held = false;
  ncclResult_t res = enqueue_call(a, &held);
  if (held) comm_release(a->comm); /* last: a retired communicator may be freed by it */
  return res;
}

/* Every entry point: its name and function, and the call's arguments as given.
 * root is the root or peer, -1 for a call that has none; op is ignored by calls without one. */
static ncclResult_t coll_call_config(const char* api, int func, const void* sendbuff,
                                     void* recvbuff, size_t count, ncclDataType_t dtype,
                                     ncclRedOp_t op, int root, ncclComm_t comm,
                                     cudaStream_t stream, const ncclCollConfig_t* config) {
  coll_args_t a = {.api = api,
                   .func = func,
                   .sendbuff = sendbuff,
                   .recvbuff = recvbuff,
                   .count = count,
                   .dtype = dtype,
                   .op = op,
                   .root = root,
                   .comm = comm,
                   .stream = stream,
                   .config = config};
  /* The call's NVTX range, with its arguments as the payload (nothing without a tool). */
  nvtx_payload_kind_t kind = func == FUNC_SEND || func == FUNC_RECV ? NVTX_PL_P2P
                             : func == FUNC_REDUCE                  ? NVTX_PL_COLL_ROOT_OP
                             : func == FUNC_ALLREDUCE || func == FUNC_REDUCESCATTER
                                 ? NVTX_PL_COLL_OP
                             : root >= 0 ? NVTX_PL_COLL_ROOT
                                         : NVTX_PL_COLL;
  nvtx_args_t nv = {.comm = comm != NULL && comm->magic == COMM_MAGIC ? comm->comm_hash : 0,
                    .bytes = count * datatype_size(dtype),
                    .dtype = (int32_t)dtype,
                    .op = (int32_t)op,
                    .root = root};
  bool pushed = nvtx_begin(api, kind, &nv);
  ncclResult_t res = coll_enqueue(&a);
  nvtx_end(pushed);
  return res;
}

static ncclResult_t coll_call(const char* api, int func, const void* sendbuff, void* recvbuff,
                              size_t count, ncclDataType_t dtype, ncclRedOp_t op, int root,
                              ncclComm_t comm, cudaStream_t stream) {
  return coll_call_config(api, func, sendbuff, recvbuff, count, dtype, op, root, comm, stream,
                          NULL);
}

/* ---- Collectives ------------------------------------------------------------------------------
 */
NCCL_API(ncclResult_t, ncclAllReduce, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return coll_call("ncclAllReduce", FUNC_ALLREDUCE, sendbuff, recvbuff, count, datatype, op, -1,
                   comm, stream);
}

NCCL_API(ncclResult_t, ncclBroadcast, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return coll_call("ncclBroadcast", FUNC_BROADCAST, sendbuff, recvbuff, count, datatype, ncclSum,
                   root, comm, stream);
}

NCCL_API(ncclResult_t, ncclBcast, void* buff, size_t count, ncclDataType_t datatype, int root,
         ncclComm_t comm, cudaStream_t stream) {
  return coll_call("ncclBcast", FUNC_BROADCAST, buff, buff, count, datatype, ncclSum, root, comm,
                   stream);
}

NCCL_API(ncclResult_t, ncclReduce, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return coll_call("ncclReduce", FUNC_REDUCE, sendbuff, recvbuff, count, datatype, op, root, comm,
                   stream);
}

NCCL_API(ncclResult_t, ncclAllGather, const void* sendbuff, void* recvbuff, size_t sendcount,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return coll_call("ncclAllGather", FUNC_ALLGATHER, sendbuff, recvbuff, sendcount, datatype,
                   ncclSum, -1, comm, stream);
}

NCCL_API(ncclResult_t, ncclReduceScatter, const void* sendbuff, void* recvbuff, size_t recvcount,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return coll_call("ncclReduceScatter", FUNC_REDUCESCATTER, sendbuff, recvbuff, recvcount, datatype,
                   op, -1, comm, stream);
}

NCCL_API(ncclResult_t, ncclAlltoAll, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  return coll_call("ncclAlltoAll", COLL_ALLTOALL, sendbuff, recvbuff, count, datatype, ncclSum, -1,
                   comm, stream);
}

NCCL_API(ncclResult_t, ncclGather, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return coll_call("ncclGather", COLL_GATHER, sendbuff, recvbuff, count, datatype, ncclSum, root,
                   comm, stream);
}

NCCL_API(ncclResult_t, ncclScatter, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream) {
  return coll_call("ncclScatter", COLL_SCATTER, sendbuff, recvbuff, count, datatype, ncclSum, root,
                   comm, stream);
}

/* ---- Point to point ---------------------------------------------------------------------------
 */
NCCL_API(ncclResult_t, ncclSend, const void* sendbuff, size_t count, ncclDataType_t datatype,
         int peer, ncclComm_t comm, cudaStream_t stream) {
  return coll_call("ncclSend", FUNC_SEND, sendbuff, NULL, count, datatype, ncclSum, peer, comm,
                   stream);
}

NCCL_API(ncclResult_t, ncclRecv, void* recvbuff, size_t count, ncclDataType_t datatype, int peer,
         ncclComm_t comm, cudaStream_t stream) {
  return coll_call("ncclRecv", FUNC_RECV, NULL, recvbuff, count, datatype, ncclSum, peer, comm,
                   stream);
}

/* ---- Collectives with a per-call configuration (2.31) -----------------------------------------
 * config NULL is the plain call. */
NCCL_API(ncclResult_t, ncclAllReduceConfig, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t* config) {
  return coll_call_config("ncclAllReduceConfig", FUNC_ALLREDUCE, sendbuff, recvbuff, count,
                          datatype, op, -1, comm, stream, config);
}

NCCL_API(ncclResult_t, ncclBroadcastConfig, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t* config) {
  return coll_call_config("ncclBroadcastConfig", FUNC_BROADCAST, sendbuff, recvbuff, count,
                          datatype, ncclSum, root, comm, stream, config);
}

NCCL_API(ncclResult_t, ncclReduceConfig, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t* config) {
  return coll_call_config("ncclReduceConfig", FUNC_REDUCE, sendbuff, recvbuff, count, datatype,
                          op, root, comm, stream, config);
}

NCCL_API(ncclResult_t, ncclAllGatherConfig, const void* sendbuff, void* recvbuff,
         size_t sendcount, ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t* config) {
  return coll_call_config("ncclAllGatherConfig", FUNC_ALLGATHER, sendbuff, recvbuff, sendcount,
                          datatype, ncclSum, -1, comm, stream, config);
}

NCCL_API(ncclResult_t, ncclReduceScatterConfig, const void* sendbuff, void* recvbuff,
         size_t recvcount, ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
         cudaStream_t stream, const ncclCollConfig_t* config) {
  return coll_call_config("ncclReduceScatterConfig", FUNC_REDUCESCATTER, sendbuff, recvbuff,
                          recvcount, datatype, op, -1, comm, stream, config);
}

NCCL_API(ncclResult_t, ncclAlltoAllConfig, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t* config) {
  return coll_call_config("ncclAlltoAllConfig", COLL_ALLTOALL, sendbuff, recvbuff, count,
                          datatype, ncclSum, -1, comm, stream, config);
}

NCCL_API(ncclResult_t, ncclGatherConfig, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t* config) {
  return coll_call_config("ncclGatherConfig", COLL_GATHER, sendbuff, recvbuff, count, datatype,
                          ncclSum, root, comm, stream, config);
}

NCCL_API(ncclResult_t, ncclScatterConfig, const void* sendbuff, void* recvbuff, size_t count,
         ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream,
         const ncclCollConfig_t* config) {
  return coll_call_config("ncclScatterConfig", COLL_SCATTER, sendbuff, recvbuff, count, datatype,
                          ncclSum, root, comm, stream, config);
}
