/* The parameter API of NCCL 2.29 (ncclParamBind, ncclParamGet*, ncclParamGetParameter,
 * ncclParamGetAllParameterKeys, ncclParamDumpAll) over Baton's one parameter table
 * (param_table.h): a key is a row's name ("NCCL_BUFFSIZE"), a handle is the row's description, and
 * a value is what param_int / param_str serve (environment, conf files, default). A name that is
 * not a row, stock's variables Baton does not honour included (param_unsupported.h), is
 * ncclInvalidArgument with a WARN.
 *
 * Strings handed out: a string row's value is param_str's, valid for the life of the process (more
 * than the API promises: until the same call on the same thread); an integer row's text is written
 * into a buffer of the calling thread. */
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"

/* The row a handle names: handles are the rows' descriptions (param_describe). */
static int param_api_row(ncclParamHandle_t h, const char* api) {
  if (h != NULL) {
    for (int id = 0; id < PARAM_COUNT; id++)
      if ((const void*)param_describe((param_id_t)id) == (const void*)h) return id;
  }
  WARN("%s: %p is not a handle from ncclParamBind", api, (void*)h);
  return -1;
}

static int param_api_find(const char* key, const char* api) {
  if (key == NULL) {
    WARN("%s: key is NULL", api);
    return -1;
  }
  for (int id = 0; id < PARAM_COUNT; id++)
    if (strcmp(param_describe((param_id_t)id)->name, key) == 0) return id;
  WARN("%s: no parameter is named \"%s\" (ncclParamGetAllParameterKeys lists Baton's)", api, key);
  return -1;
}

/* The row's value as text: a string row's value ("" when unset without default), an integer
 * row's number in the calling thread's buffer. */
static const char* param_api_text(int id) {
  static _Thread_local char num[32];
  if (param_describe((param_id_t)id)->type == PARAM_INT) {
    snprintf(num, sizeof(num), "%" PRId64, param_int((param_id_t)id));
    return num;
  }
  const char* s = param_str((param_id_t)id);
  return s != NULL ? s : "";
}

/* The row's value as a signed 64-bit integer: a string row converts when it is one whole
 * integer. */
static ncclResult_t param_api_int(ncclParamHandle_t h, const void* out, const char* api, int64_t* v,
                                  const char** name) {
  int id = param_api_row(h, api);
  if (id < 0) return ncclInvalidArgument;
  if (out == NULL) {
    WARN("%s: out is NULL", api);
    return ncclInvalidArgument;
  }
  const param_desc_t* d = param_describe((param_id_t)id);
  *name = d->name;
  if (d->type == PARAM_INT) {
    *v = param_int((param_id_t)id);
    return ncclSuccess;
  }
  const char* s = param_str((param_id_t)id);
  char* end = NULL;
  if (s != NULL && *s != '\0') {
    long long x = strtoll(s, &end, 0);
    if (*end == '\0') {
      *v = x;
      return ncclSuccess;
    }
  }
  WARN("%s: %s is \"%s\", not an integer", api, d->name, s != NULL ? s : "");
  return ncclInvalidArgument;
}

static ncclResult_t param_api_range(const char* api, const char* name, int64_t v, int64_t lo,
                                    uint64_t hi, const char* type) {
  if (v < lo || (v > 0 && (uint64_t)v > hi)) {
    WARN("%s: %s is %" PRId64 ", which %s cannot hold", api, name, v, type);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

#define PARAM_API_GETTER(suffix, ctype, lo, hi)                                                   \
  NCCL_API(ncclResult_t, ncclParamGet##suffix, ncclParamHandle_t h, ctype* out) {                 \
    int64_t v;                                                                                    \
    const char* name;                                                                             \
    CHECK(param_api_int(h, out, "ncclParamGet" #suffix, &v, &name));                              \
    CHECK(                                                                                        \
        param_api_range("ncclParamGet" #suffix, name, v, (int64_t)(lo), (uint64_t)(hi), #ctype)); \
    *out = (ctype)v;                                                                              \
    return ncclSuccess;                                                                           \
  }

PARAM_API_GETTER(I8, int8_t, INT8_MIN, INT8_MAX)
PARAM_API_GETTER(I16, int16_t, INT16_MIN, INT16_MAX)
PARAM_API_GETTER(I32, int32_t, INT32_MIN, INT32_MAX)
PARAM_API_GETTER(I64, int64_t, INT64_MIN, INT64_MAX)
PARAM_API_GETTER(U8, uint8_t, 0, UINT8_MAX)
PARAM_API_GETTER(U16, uint16_t, 0, UINT16_MAX)
PARAM_API_GETTER(U32, uint32_t, 0, UINT32_MAX)
PARAM_API_GETTER(U64, uint64_t, 0, INT64_MAX) /* Baton's integers are signed 64-bit */

NCCL_API(ncclResult_t, ncclParamBind, ncclParamHandle_t* out, const char* key) {
  int id = param_api_find(key, "ncclParamBind");
  if (id < 0) return ncclInvalidArgument;
  if (out == NULL) {
    WARN("ncclParamBind: out is NULL");
    return ncclInvalidArgument;
  }
  *out = (ncclParamHandle_t)(uintptr_t)param_describe((param_id_t)id);
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGetStr, ncclParamHandle_t h, const char** out) {
  int id = param_api_row(h, "ncclParamGetStr");
  if (id < 0) return ncclInvalidArgument;
  if (out == NULL) {
    WARN("ncclParamGetStr: out is NULL");
    return ncclInvalidArgument;
  }
  *out = param_api_text(id);
  return ncclSuccess;
}

/* The value's bytes: an integer row's int64_t, a string row's characters and NUL. Too small a
 * buffer is ncclInvalidArgument with *len the size needed. */
NCCL_API(ncclResult_t, ncclParamGet, ncclParamHandle_t h, void* out, int maxLen, int* len) {
  int id = param_api_row(h, "ncclParamGet");
  if (id < 0) return ncclInvalidArgument;
  if (len == NULL || (out == NULL && maxLen > 0) || maxLen < 0) {
    WARN("ncclParamGet: needs len, and out of maxLen %d bytes", maxLen);
    return ncclInvalidArgument;
  }
  int64_t num;
  const void* src;
  size_t n;
  if (param_describe((param_id_t)id)->type == PARAM_INT) {
    num = param_int((param_id_t)id);
    src = &num;
    n = sizeof(num);
  } else {
    src = param_api_text(id);
    n = strlen(src) + 1;
  }
  if (n > INT_MAX || (size_t)maxLen < n) {
    *len = n > INT_MAX ? INT_MAX : (int)n;
    WARN("ncclParamGet: %s needs %zu bytes, the buffer has %d",
         param_describe((param_id_t)id)->name, n, maxLen);
    return ncclInvalidArgument;
  }
  memcpy(out, src, n);
  *len = (int)n;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclParamGetParameter, const char* key, const char** value, int* valueLen) {
  int id = param_api_find(key, "ncclParamGetParameter");
  if (id < 0) return ncclInvalidArgument;
  if (value == NULL || valueLen == NULL) {
    WARN("ncclParamGetParameter: value and valueLen must not be NULL");
    return ncclInvalidArgument;
  }
  const char* s = param_api_text(id);
  *value = s;
  *valueLen = (int)strlen(s);
  return ncclSuccess;
}

static const char* param_api_keys[PARAM_COUNT];
static pthread_once_t param_api_keys_once = PTHREAD_ONCE_INIT;

static void param_api_keys_fill(void) {
  for (int id = 0; id < PARAM_COUNT; id++)
    param_api_keys[id] = param_describe((param_id_t)id)->name;
}

/* Every row of the table: all the variables Baton honours (it has no unpublished ones). */
NCCL_API(ncclResult_t, ncclParamGetAllParameterKeys, const char*** table, int* tableLen) {
  if (table == NULL || tableLen == NULL) {
    WARN("ncclParamGetAllParameterKeys: table and tableLen must not be NULL");
    return ncclInvalidArgument;
  }
  pthread_once(&param_api_keys_once, param_api_keys_fill);
  *table = param_api_keys;
  *tableLen = PARAM_COUNT;
  return ncclSuccess;
}

NCCL_API(void, ncclParamDumpAll, void) {
  for (int id = 0; id < PARAM_COUNT; id++) {
    const param_desc_t* d = param_describe((param_id_t)id);
    INFO(NCCL_ENV, "%s=%s%s", d->name, param_api_text(id),
         param_is_set((param_id_t)id) ? "" : " (default)");
  }
}
