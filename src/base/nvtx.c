/* NVTX ranges of the API calls (base.h: nvtx_begin, nvtx_end, NVTX_API_RANGE).
 *
 * Every entry point is a push/pop range in the "NCCL" domain, named after the call, as stock
 * NCCL's are; the collective, point-to-point and communicator calls carry a binary payload with
 * stock's field names ("NCCL communicator ID", "Message size [bytes]", "Reduction operation",
 * "Root", "Peer rank") and a "Data type" field, described by payload schemas registered once; the
 * other calls are plain ranges. NVTX is the CUDA toolkit's header-only nvtx3: with no tool
 * attached (no NVTX_INJECTION64_PATH), the domain cannot be created, and each call then costs one
 * load and a branch. NCCL_NVTX_DISABLE=1 turns the ranges off (no NVTX call at all). */
#include <pthread.h>

#include "base/base.h"
#include "nvtx3/nvToolsExt.h"
#include "nvtx3/nvToolsExtPayload.h"

int nvtx_state; /* base.h: NVTX_STATE_*, 0 until the first call decides; atomic */
static pthread_once_t nvtx_once = PTHREAD_ONCE_INIT;
static nvtxDomainHandle_t nvtx_domain;

#define NVTX_SCHEMA_BASE (NVTX_PAYLOAD_SCHEMA_ID_STATIC_START + 0xBA70)
enum {
  NVTX_ID_REDOP = NVTX_SCHEMA_BASE, /* enums */
  NVTX_ID_DTYPE,
  NVTX_ID_PAYLOAD /* + nvtx_payload_kind_t */
};

static const nvtxPayloadEnum_t nvtx_redops[] = {
    {.name = "Sum", .value = ncclSum}, {.name = "Product", .value = ncclProd},
    {.name = "Max", .value = ncclMax}, {.name = "Min", .value = ncclMin},
    {.name = "Avg", .value = ncclAvg},
};
static const nvtxPayloadEnum_t nvtx_dtypes[] = {
    {.name = "ncclInt8", .value = ncclInt8},
    {.name = "ncclUint8", .value = ncclUint8},
    {.name = "ncclInt32", .value = ncclInt32},
    {.name = "ncclUint32", .value = ncclUint32},
    {.name = "ncclInt64", .value = ncclInt64},
    {.name = "ncclUint64", .value = ncclUint64},
    {.name = "ncclFloat16", .value = ncclFloat16},
    {.name = "ncclFloat32", .value = ncclFloat32},
    {.name = "ncclFloat64", .value = ncclFloat64},
    {.name = "ncclBfloat16", .value = ncclBfloat16},
    {.name = "ncclFloat8e4m3", .value = ncclFloat8e4m3},
    {.name = "ncclFloat8e5m2", .value = ncclFloat8e5m2},
};

#define NVTX_ENTRY(field, entry_type, entry_name) \
  { .type = (entry_type), .name = (entry_name), .offset = offsetof(nvtx_args_t, field) }
#define E_COMM NVTX_ENTRY(comm, NVTX_PAYLOAD_ENTRY_TYPE_UINT64, "NCCL communicator ID")
#define E_BYTES NVTX_ENTRY(bytes, NVTX_PAYLOAD_ENTRY_TYPE_SIZE, "Message size [bytes]")
#define E_DTYPE NVTX_ENTRY(dtype, NVTX_ID_DTYPE, "Data type")
#define E_OP NVTX_ENTRY(op, NVTX_ID_REDOP, "Reduction operation")
#define E_ROOT NVTX_ENTRY(root, NVTX_PAYLOAD_ENTRY_TYPE_INT, "Root")
#define E_PEER NVTX_ENTRY(root, NVTX_PAYLOAD_ENTRY_TYPE_INT, "Peer rank")

static const nvtxPayloadSchemaEntry_t nvtx_e_coll[] = {E_COMM, E_BYTES, E_DTYPE};
static const nvtxPayloadSchemaEntry_t nvtx_e_coll_op[] = {E_COMM, E_BYTES, E_DTYPE, E_OP};
static const nvtxPayloadSchemaEntry_t nvtx_e_coll_root[] = {E_COMM, E_BYTES, E_DTYPE, E_ROOT};
static const nvtxPayloadSchemaEntry_t nvtx_e_coll_root_op[] = {E_COMM, E_BYTES, E_DTYPE, E_ROOT,
                                                               E_OP};
static const nvtxPayloadSchemaEntry_t nvtx_e_p2p[] = {E_COMM, E_BYTES, E_DTYPE, E_PEER};

static const struct {
  const char* name;
  const nvtxPayloadSchemaEntry_t* entries;
  size_t n;
} nvtx_schemas[NVTX_PL_KINDS] = {
#define NVTX_SCHEMA(name, e) {name, e, sizeof(e) / sizeof(e[0])}
    [NVTX_PL_COLL] = NVTX_SCHEMA("NCCL collective", nvtx_e_coll),
    [NVTX_PL_COLL_OP] = NVTX_SCHEMA("NCCL reduction", nvtx_e_coll_op),
    [NVTX_PL_COLL_ROOT] = NVTX_SCHEMA("NCCL rooted collective", nvtx_e_coll_root),
    [NVTX_PL_COLL_ROOT_OP] = NVTX_SCHEMA("NCCL rooted reduction", nvtx_e_coll_root_op),
    [NVTX_PL_P2P] = NVTX_SCHEMA("NCCL point-to-point", nvtx_e_p2p),
#undef NVTX_SCHEMA
};

static void nvtx_register(void) {
  const nvtxPayloadEnumAttr_t enums[2] = {
      {.fieldMask = NVTX_PAYLOAD_ENUM_ATTR_FIELD_NAME | NVTX_PAYLOAD_ENUM_ATTR_FIELD_ENTRIES |
                    NVTX_PAYLOAD_ENUM_ATTR_FIELD_NUM_ENTRIES | NVTX_PAYLOAD_ENUM_ATTR_FIELD_SIZE |
                    NVTX_PAYLOAD_ENUM_ATTR_FIELD_SCHEMA_ID,
       .name = "ncclRedOp_t",
       .entries = nvtx_redops,
       .numEntries = sizeof(nvtx_redops) / sizeof(nvtx_redops[0]),
       .sizeOfEnum = sizeof(int32_t),
       .schemaId = NVTX_ID_REDOP},
      {.fieldMask = NVTX_PAYLOAD_ENUM_ATTR_FIELD_NAME | NVTX_PAYLOAD_ENUM_ATTR_FIELD_ENTRIES |
                    NVTX_PAYLOAD_ENUM_ATTR_FIELD_NUM_ENTRIES | NVTX_PAYLOAD_ENUM_ATTR_FIELD_SIZE |
                    NVTX_PAYLOAD_ENUM_ATTR_FIELD_SCHEMA_ID,
       .name = "ncclDataType_t",
       .entries = nvtx_dtypes,
       .numEntries = sizeof(nvtx_dtypes) / sizeof(nvtx_dtypes[0]),
       .sizeOfEnum = sizeof(int32_t),
       .schemaId = NVTX_ID_DTYPE}};
  for (int i = 0; i < 2; i++) (void)nvtxPayloadEnumRegister(nvtx_domain, &enums[i]);
  for (int k = 0; k < NVTX_PL_KINDS; k++) {
    if (nvtx_schemas[k].entries == NULL) continue;
    nvtxPayloadSchemaAttr_t a = {
        .fieldMask =
            NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_NAME | NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_TYPE |
            NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_ENTRIES | NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_NUM_ENTRIES |
            NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_STATIC_SIZE | NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_SCHEMA_ID,
        .name = nvtx_schemas[k].name,
        .type = NVTX_PAYLOAD_SCHEMA_TYPE_STATIC,
        .entries = nvtx_schemas[k].entries,
        .numEntries = nvtx_schemas[k].n,
        .payloadStaticSize = sizeof(nvtx_args_t),
        .schemaId = (uint64_t)NVTX_ID_PAYLOAD + (uint64_t)k};
    (void)nvtxPayloadSchemaRegister(nvtx_domain, &a);
  }
}

static void nvtx_init(void) {
  int state = NVTX_STATE_OFF;
  if (param_int(PARAM_NVTX_DISABLE) == 0) {
    /* NULL unless a tool is attached (NVTX_INJECTION64_PATH): nothing more is done then. */
    nvtx_domain = nvtxDomainCreateA("NCCL");
    if (nvtx_domain != NULL) {
      nvtx_register();
      state = NVTX_STATE_LIVE;
    }
  }
  __atomic_store_n(&nvtx_state, state, __ATOMIC_RELEASE);
}

bool nvtx_push(const char* name, nvtx_payload_kind_t kind, const nvtx_args_t* args) {
  int state = __atomic_load_n(&nvtx_state, __ATOMIC_ACQUIRE);
  if (state == 0) {
    pthread_once(&nvtx_once, nvtx_init);
    state = __atomic_load_n(&nvtx_state, __ATOMIC_ACQUIRE);
  }
  if (state != NVTX_STATE_LIVE) return false;
  nvtxEventAttributes_t ev = {.version = NVTX_VERSION,
                              .size = NVTX_EVENT_ATTRIB_STRUCT_SIZE,
                              .messageType = NVTX_MESSAGE_TYPE_ASCII,
                              .message.ascii = name};
  nvtxPayloadData_t data;
  if (kind != NVTX_PL_NONE && kind < NVTX_PL_KINDS && args != NULL) {
    data = (nvtxPayloadData_t){.schemaId = (uint64_t)NVTX_ID_PAYLOAD + (uint64_t)kind,
                               .size = sizeof(*args),
                               .payload = args};
    ev.payloadType = NVTX_PAYLOAD_TYPE_EXT;
    ev.payload.ullValue = (uint64_t)(uintptr_t)&data;
    ev.reserved0 = 1; /* one payload */
  }
  nvtxDomainRangePushEx(nvtx_domain, &ev);
  return true;
}

void nvtx_pop(void) {
  nvtxDomainRangePop(nvtx_domain);
}
