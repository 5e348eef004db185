/* ncclResetDebugInit: re-read the logging settings (NCCL_DEBUG, NCCL_DEBUG_SUBSYS,
 * NCCL_DEBUG_FILE) after the application changed them in its environment. The parameter table is
 * re-read with them, so other NCCL_* changes apply to communicators created afterwards. */
#include "base/base.h"

NCCL_API(void, ncclResetDebugInit, void) {
  NVTX_API_RANGE("ncclResetDebugInit");
  log_reset();
}

/* Plain (non-weak) export of the same, for tools that must not bind to the weak alias. */
BATON_EXPORT void ncclResetDebugInitInternal(void);
void ncclResetDebugInitInternal(void) {
  log_reset();
}
