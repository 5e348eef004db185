/* A test environment plugin. ENV_VERSION 1 (default): ncclEnvPlugin_v1, NCCL_BUFFSIZE always reads
 * 123456, whatever the process environment says; other names come from getenv. It logs init's
 * arguments. ENV_VERSION 2: ncclEnvPlugin_v2 as well, whose NCCL_BUFFSIZE is 654321 and whose init
 * also gets a logger, which it calls (a loader that took v1, or that the call deadlocks, fails the
 * test). */
#include <stdint.h>
#include <string.h>

#include "nccl.h"
#include "plugin_log.h"

static ncclResult_t env_init(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix) {
  plugin_log("env init %u.%u.%u %s", major, minor, patch, suffix ? suffix : "(null)");
  return ncclSuccess;
}

static ncclResult_t env_finalize(void) {
  return ncclSuccess;
}

static const char* env_get(const char* name) {
  if (strcmp(name, "NCCL_BUFFSIZE") == 0) return "123456";
  return getenv(name);
}

typedef struct {
  const char* name;
  ncclResult_t (*init)(uint8_t, uint8_t, uint8_t, const char*);
  ncclResult_t (*finalize)(void);
  const char* (*getEnv)(const char*);
} env_v1_t;

__attribute__((visibility("default"))) const env_v1_t ncclEnvPlugin_v1 = {
    .name = "test-env", .init = env_init, .finalize = env_finalize, .getEnv = env_get};

#if defined(ENV_VERSION) && ENV_VERSION >= 2
/* The logger's type (stock's ncclDebugLogger_t; level 3 is INFO, subsystem 1 INIT). */
typedef void (*logger_t)(int level, unsigned long flags, const char* file, int line,
                         const char* fmt, ...);

static ncclResult_t env_init_v2(uint8_t major, uint8_t minor, uint8_t patch, const char* suffix,
                                logger_t log) {
  plugin_log("env v2 init %u.%u.%u %s logger=%d", major, minor, patch, suffix ? suffix : "(null)",
             log != NULL);
  if (log != NULL) log(3, 1, __FILE__, __LINE__, "test-env-v2 says hello %d", 42);
  return ncclSuccess;
}

static const char* env_get_v2(const char* name) {
  if (strcmp(name, "NCCL_BUFFSIZE") == 0) return "654321";
  return getenv(name);
}

typedef struct {
  const char* name;
  ncclResult_t (*init)(uint8_t, uint8_t, uint8_t, const char*, logger_t);
  ncclResult_t (*finalize)(void);
  const char* (*getEnv)(const char*);
} env_v2_t;

__attribute__((visibility("default"))) const env_v2_t ncclEnvPlugin_v2 = {
    .name = "test-env-v2", .init = env_init_v2, .finalize = env_finalize, .getEnv = env_get_v2};
#endif
