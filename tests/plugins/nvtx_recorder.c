/* An NVTX injection library for tests (NVTX_INJECTION64_PATH=<this library>): it attaches to the
 * core API and the payload extension of whatever NVTX instance loads it, and writes one line per
 * range push and pop to $NVTX_RECORD_FILE ("%p" becomes the pid):
 *   PUSH <domain> <message> {<field name>=<value>;...}     (the payload decoded by its schema)
 *   POP <domain>
 * Payload fields are decoded from the registered static schemas: integers, sizes, and enums
 * registered in the same domain (written by entry name). Anything else is written as "?". */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nvtx3/nvToolsExt.h"
#include "nvtx3/nvToolsExtPayload.h"

#define REC_EXPORT __attribute__((visibility("default")))
#define REC_MAX_SCHEMAS 64
#define REC_MAX_ENTRIES 16
#define REC_MAX_ENUMS 64

typedef struct rec_domain {
  char name[64];
} rec_domain_t;

typedef struct rec_schema {
  uint64_t id;
  bool is_enum;
  size_t n;
  struct {
    uint64_t type, offset;
    char name[64];
  } entries[REC_MAX_ENTRIES];
  struct {
    uint64_t value;
    char name[32];
  } values[REC_MAX_ENUMS];
  size_t enum_size;
} rec_schema_t;

static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static FILE* rec_file;
static rec_schema_t rec_schemas[REC_MAX_SCHEMAS];
static int rec_nschemas;
static uint64_t rec_next_id = 1;

static void rec_open(void) {
  if (rec_file != NULL) return;
  const char* pattern = getenv("NVTX_RECORD_FILE");
  if (pattern == NULL) return;
  char path[512];
  size_t n = 0;
  for (const char* p = pattern; *p != '\0' && n + 16 < sizeof(path); p++) {
    if (p[0] == '%' && p[1] == 'p') {
      n += (size_t)snprintf(path + n, sizeof(path) - n, "%d", (int)getpid());
      p++;
    } else {
      path[n++] = *p;
    }
  }
  path[n] = '\0';
  rec_file = fopen(path, "a");
}

static rec_schema_t* rec_find(uint64_t id) {
  for (int i = 0; i < rec_nschemas; i++)
    if (rec_schemas[i].id == id) return &rec_schemas[i];
  return NULL;
}

static nvtxDomainHandle_t rec_domain_create(const char* name) {
  rec_domain_t* d = calloc(1, sizeof(*d));
  if (d != NULL) snprintf(d->name, sizeof(d->name), "%s", name);
  return (nvtxDomainHandle_t)d;
}

static void rec_domain_destroy(nvtxDomainHandle_t domain) {
  (void)domain; /* kept: events may name it after destruction in a racy program */
}

static const char* rec_domain_name(nvtxDomainHandle_t domain) {
  return domain != NULL ? ((rec_domain_t*)domain)->name : "(default)";
}

/* Writes the fields of one payload as "name=value;" pairs. Under rec_lock. */
static void rec_payload(const nvtxPayloadData_t* pd) {
  const rec_schema_t* s = rec_find(pd->schemaId);
  if (s == NULL || s->is_enum) {
    fprintf(rec_file, "?schema=%" PRIu64 ";", pd->schemaId);
    return;
  }
  const char* base = pd->payload;
  for (size_t i = 0; i < s->n; i++) {
    uint64_t t = s->entries[i].type;
    const char* at = base + s->entries[i].offset;
    fprintf(rec_file, "%s=", s->entries[i].name);
    if (t == NVTX_PAYLOAD_ENTRY_TYPE_INT) {
      int v;
      memcpy(&v, at, sizeof(v));
      fprintf(rec_file, "%d", v);
    } else if (t == NVTX_PAYLOAD_ENTRY_TYPE_UINT64) {
      uint64_t v;
      memcpy(&v, at, sizeof(v));
      fprintf(rec_file, "%" PRIu64, v);
    } else if (t == NVTX_PAYLOAD_ENTRY_TYPE_SIZE) {
      size_t v;
      memcpy(&v, at, sizeof(v));
      fprintf(rec_file, "%zu", v);
    } else {
      const rec_schema_t* e = rec_find(t);
      if (e == NULL || !e->is_enum || e->enum_size != sizeof(int32_t)) {
        fprintf(rec_file, "?");
      } else {
        int32_t v;
        memcpy(&v, at, sizeof(v));
        const char* name = "?";
        for (size_t k = 0; k < e->n; k++)
          if (e->values[k].value == (uint64_t)(int64_t)v) name = e->values[k].name;
        fprintf(rec_file, "%s", name);
      }
    }
    fputc(';', rec_file);
  }
}

static int rec_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* ev) {
  pthread_mutex_lock(&rec_lock);
  rec_open();
  if (rec_file != NULL) {
    const char* msg =
        ev != NULL && ev->messageType == NVTX_MESSAGE_TYPE_ASCII ? ev->message.ascii : "?";
    fprintf(rec_file, "PUSH %s %s {", rec_domain_name(domain), msg);
    if (ev != NULL && ev->payloadType == NVTX_PAYLOAD_TYPE_EXT) {
      const nvtxPayloadData_t* pd = (const nvtxPayloadData_t*)(uintptr_t)ev->payload.ullValue;
      for (int32_t i = 0; i < ev->reserved0; i++) rec_payload(&pd[i]);
    }
    fprintf(rec_file, "}\n");
    fflush(rec_file);
  }
  pthread_mutex_unlock(&rec_lock);
  return 0;
}

static int rec_pop(nvtxDomainHandle_t domain) {
  pthread_mutex_lock(&rec_lock);
  rec_open();
  if (rec_file != NULL) {
    fprintf(rec_file, "POP %s\n", rec_domain_name(domain));
    fflush(rec_file);
  }
  pthread_mutex_unlock(&rec_lock);
  return 0;
}

static uint64_t rec_schema_register(nvtxDomainHandle_t domain, const nvtxPayloadSchemaAttr_t* a) {
  (void)domain;
  pthread_mutex_lock(&rec_lock);
  uint64_t id = 0;
  if (rec_nschemas < REC_MAX_SCHEMAS && a != NULL &&
      (a->fieldMask & NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_ENTRIES) && a->numEntries <= REC_MAX_ENTRIES) {
    rec_schema_t* s = &rec_schemas[rec_nschemas++];
    memset(s, 0, sizeof(*s));
    s->id = (a->fieldMask & NVTX_PAYLOAD_SCHEMA_ATTR_FIELD_SCHEMA_ID) ? a->schemaId : rec_next_id++;
    s->n = a->numEntries;
    for (size_t i = 0; i < s->n; i++) {
      s->entries[i].type = a->entries[i].type;
      s->entries[i].offset = a->entries[i].offset;
      snprintf(s->entries[i].name, sizeof(s->entries[i].name), "%s",
               a->entries[i].name ? a->entries[i].name : "?");
    }
    id = s->id;
  }
  pthread_mutex_unlock(&rec_lock);
  return id;
}

static uint64_t rec_enum_register(nvtxDomainHandle_t domain, const nvtxPayloadEnumAttr_t* a) {
  (void)domain;
  pthread_mutex_lock(&rec_lock);
  uint64_t id = 0;
  if (rec_nschemas < REC_MAX_SCHEMAS && a != NULL && a->numEntries <= REC_MAX_ENUMS) {
    rec_schema_t* s = &rec_schemas[rec_nschemas++];
    memset(s, 0, sizeof(*s));
    s->is_enum = true;
    s->id = (a->fieldMask & NVTX_PAYLOAD_ENUM_ATTR_FIELD_SCHEMA_ID) ? a->schemaId : rec_next_id++;
    s->n = a->numEntries;
    s->enum_size = a->sizeOfEnum;
    for (size_t i = 0; i < s->n; i++) {
      s->values[i].value = a->entries[i].value;
      snprintf(s->values[i].name, sizeof(s->values[i].name), "%s", a->entries[i].name);
    }
    id = s->id;
  }
  pthread_mutex_unlock(&rec_lock);
  return id;
}

/* The core API: the NVTX instance hands over its tables of function pointers to fill. */
REC_EXPORT int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
  const NvtxExportTableCallbacks* cb = get_table(NVTX_ETID_CALLBACKS);
  if (cb == NULL) return 0;
  NvtxFunctionTable table = NULL;
  unsigned int size = 0;
  if (!cb->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size) ||
      size <= NVTX_CBID_CORE2_DomainDestroy)
    return 0;
  *table[NVTX_CBID_CORE2_DomainCreateA] = (NvtxFunctionPointer)rec_domain_create;
  *table[NVTX_CBID_CORE2_DomainDestroy] = (NvtxFunctionPointer)rec_domain_destroy;
  *table[NVTX_CBID_CORE2_DomainRangePushEx] = (NvtxFunctionPointer)rec_push;
  *table[NVTX_CBID_CORE2_DomainRangePop] = (NvtxFunctionPointer)rec_pop;
  return 1;
}

/* Extensions: only the payload extension's schema and enum registration. */
REC_EXPORT int InitializeInjectionNvtxExtension(nvtxExtModuleInfo_t* info) {
  if (info == NULL || info->moduleId != NVTX_EXT_PAYLOAD_MODULEID || info->segmentsCount < 1)
    return info != NULL; /* another extension: nothing to attach, not a failure */
  intptr_t* slots = info->segments[0].functionSlots;
  if (info->segments[0].slotCount <= NVTX3EXT_CBID_nvtxPayloadEnumRegister) return 0;
  slots[NVTX3EXT_CBID_nvtxPayloadSchemaRegister] = (intptr_t)rec_schema_register;
  slots[NVTX3EXT_CBID_nvtxPayloadEnumRegister] = (intptr_t)rec_enum_register;
  return 1;
}
