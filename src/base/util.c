/* Small utilities: zeroed allocation, hashing, host and process identity, and the names
 * of the public datatypes and reduction operators (clock_ns, datatype_size: inline in base.h). */
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

#define UTIL_HOSTNAME_MAX 256
#define UTIL_BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"

ncclResult_t mem_calloc(void** out, size_t nelem, size_t elem_size) {
  /* calloc(0, ...) may return NULL; a zero-sized request still gets a unique pointer. */
  void* p = (nelem == 0 || elem_size == 0) ? calloc(1, 1) : calloc(nelem, elem_size);
  if (p == NULL) {
    WARN("Failed to allocate %zu x %zu bytes: %s", nelem, elem_size, strerror(errno));
    return ncclSystemError;
  }
  *out = p;
  return ncclSuccess;
}

int u64_cmp(const void* a, const void* b) {
  uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
  return (x > y) - (x < y);
}

uint64_t hash_bytes(const void* data, size_t len) {
  const unsigned char* p = data;
  uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a 64 offset basis */
  for (size_t i = 0; i < len; i++) {
    h ^= p[i];
    h *= 0x100000001b3ULL; /* FNV-1a 64 prime */
  }
  return h;
}

/* ---- Host identity ----------------------------------------------------------------------------
 */

static pthread_once_t util_host_once = PTHREAD_ONCE_INIT;
static char util_host_short[UTIL_HOSTNAME_MAX];
static uint64_t util_host_hash; /* hostname + boot id */

static void util_host_init(void) {
  char full[UTIL_HOSTNAME_MAX];
  if (gethostname(full, sizeof(full)) != 0) snprintf(full, sizeof(full), "unknown");
  full[sizeof(full) - 1] = '\0';

  snprintf(util_host_short, sizeof(util_host_short), "%s", full);
  char* dot = strchr(util_host_short, '.');
  if (dot != NULL) *dot = '\0';

  /* Containers on one machine may share a hostname; the boot id tells machines apart. */
  char id[UTIL_HOSTNAME_MAX + 64];
  size_t n = (size_t)snprintf(id, sizeof(id), "%s", full);
  FILE* f = fopen(UTIL_BOOT_ID_PATH, "re");
  if (f != NULL) {
    size_t got = fread(id + n, 1, sizeof(id) - n - 1, f);
    fclose(f);
    n += got;
    while (n > 0 && (id[n - 1] == '\n' || id[n - 1] == ' ')) n--;
  }
  util_host_hash = hash_bytes(id, n);
}

const char* host_name(void) {
  pthread_once(&util_host_once, util_host_init);
  return util_host_short;
}

uint64_t host_hash(void) {
  const char* override = param_str(PARAM_HOSTID);
  if (override != NULL && override[0] != '\0') return hash_bytes(override, strlen(override));
  pthread_once(&util_host_once, util_host_init);
  return util_host_hash;
}

/* Not cached: a forked child must get its own. */
uint64_t pid_hash(void) {
  struct stat st;
  unsigned long long ns_inode =
      stat("/proc/self/ns/pid", &st) == 0 ? (unsigned long long)st.st_ino : 0;
  char id[64];
  int n = snprintf(id, sizeof(id), "%d:%llu", (int)getpid(), ns_inode);
  return hash_bytes(id, (size_t)n);
}

/* ---- Datatypes and operators ------------------------------------------------------------------
 */

/* Names of the public datatypes (their sizes: datatype_size, base.h). */
static const char* const datatype_names[ncclNumTypes] = {
    [ncclInt8] = "ncclInt8",
    [ncclUint8] = "ncclUint8",
    [ncclInt32] = "ncclInt32",
    [ncclUint32] = "ncclUint32",
    [ncclInt64] = "ncclInt64",
    [ncclUint64] = "ncclUint64",
    [ncclFloat16] = "ncclFloat16",
    [ncclFloat32] = "ncclFloat32",
    [ncclFloat64] = "ncclFloat64",
    [ncclBfloat16] = "ncclBfloat16",
    [ncclFloat8e4m3] = "ncclFloat8e4m3",
    [ncclFloat8e5m2] = "ncclFloat8e5m2",
};

static bool datatype_valid(ncclDataType_t t) {
  return (int)t >= 0 && (int)t < ncclNumTypes;
}

const char* datatype_name(ncclDataType_t t) {
  return datatype_valid(t) ? datatype_names[t] : "Unknown";
}

const char* redop_name(ncclRedOp_t op) {
  static const char* const names[ncclNumOps] = {
      [ncclSum] = "Sum", [ncclProd] = "Prod", [ncclMax] = "Max",
      [ncclMin] = "Min", [ncclAvg] = "Avg",
  };
  long v = (long)op;
  if (v >= 0 && v < ncclNumOps) return names[v];
  if (v >= ncclNumOps && v <= (long)ncclMaxRedOp) return "PreMulSum"; /* ncclRedOpCreatePreMulSum */
  return "Unknown";
}

void thread_set_name(pthread_t thread, const char* fmt, ...) {
  if (param_int(PARAM_SET_THREAD_NAME) == 0) return;
  char name[16]; /* Linux keeps 15 characters */
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(name, sizeof(name), fmt, ap);
  va_end(ap);
  (void)pthread_setname_np(thread, name);
}

/* ---- Platform hook --------------------------------------------------------------------------- */
static __thread const platform_t* thread_platform;

void platform_set_thread(const platform_t* p) {
  thread_platform = p;
}

const platform_t* platform_thread(void) {
  return thread_platform;
}
