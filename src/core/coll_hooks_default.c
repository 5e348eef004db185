/* Default collectives hooks (see core.h): weak no-ops until src/collectives defines the real
 * coll_comm_init / coll_comm_finalize / coll_comm_free, which then override these at link time. */
#include "core/core.h"

__attribute__((weak)) ncclResult_t coll_comm_init(ncclComm_t comm) {
  (void)comm; /* nothing to set up: no collectives layer in this build yet */
  return ncclSuccess;
}

__attribute__((weak)) ncclResult_t coll_comm_finalize(ncclComm_t comm) {
  (void)comm; /* no work can have been issued */
  return ncclSuccess;
}

__attribute__((weak)) ncclResult_t coll_comm_free(ncclComm_t comm) {
  (void)comm;
  return ncclSuccess;
}

__attribute__((weak)) bool coll_group_open(void) {
  return false; /* no groups without a collectives layer */
}

__attribute__((weak)) ncclResult_t coll_group_add_init(ncclComm_t comm) {
  (void)comm;
  return ncclSuccess;
}

__attribute__((weak)) void coll_group_set_error(ncclResult_t res) {
  (void)res;
}
