/* A test environment plugin (ncclEnvPlugin_v1): NCCL_BUFFSIZE always reads 123456, whatever the
 * process environment says; other names come from getenv. It logs init's arguments. */
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
