/* The table through which core reaches the collectives layer (core.h, core_upper_ops_t): stubs
 * until collectives registers its own when the library loads. */
#include "core/core.h"

static ncclResult_t upper_comm_none(ncclComm_t comm) {
  (void)comm;
  return ncclSuccess;
}

static void upper_leave_none(ncclComm_t comm) {
  (void)comm;
}

static bool upper_group_closed(void) {
  return false;
}

static void upper_error_none(ncclResult_t res) {
  (void)res;
}

static const core_upper_ops_t upper_stubs = {.comm_init = upper_comm_none,
                                             .comm_finalize = upper_comm_none,
                                             .comm_free = upper_comm_none,
                                             .comm_leave_group = upper_leave_none,
                                             .group_open = upper_group_closed,
                                             .group_add_init = upper_comm_none,
                                             .group_set_error = upper_error_none};

static const core_upper_ops_t* _Atomic upper_ops = &upper_stubs;

void core_upper_register(const core_upper_ops_t* ops) {
  atomic_store(&upper_ops, ops != NULL ? ops : &upper_stubs);
}

const core_upper_ops_t* core_upper(void) {
  return atomic_load(&upper_ops);
}
