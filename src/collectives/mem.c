/* Memory allocation and buffer registration for the host executor.
 *
 * Without a GPU there is nothing to pin or map: ncclMemAlloc returns page-aligned host memory
 * (zeroed), and ncclCommRegister / ncclCommWindowRegister return small handles that remember the
 * buffer so that deregistration can check what it is given. Collectives work the same on
 * registered and unregistered buffers. The GPU versions (cuMem allocations, IPC-mapped windows)
 * belong to the CUDA executor. */
#include <stdlib.h>
#include <unistd.h>

#include "collectives/collectives.h"

#define MEM_REG_MAGIC 0x52656748616e646cULL /* "RegHandl" */
#define MEM_WIN_MAGIC 0x57696e646f774862ULL /* "WindowHb" */

typedef struct mem_reg {
  uint64_t magic;
  ncclComm_t comm;
  void* buff;
  size_t size;
} mem_reg_t;

/* ncclWindow_t is a pointer to this (opaque to users). */
struct ncclWindow_vidmem {
  uint64_t magic;
  ncclComm_t comm;
  void* buff;
  size_t size;
  int flags;
};

NCCL_API(ncclResult_t, ncclMemAlloc, void** ptr, size_t size) {
  const char* api = "ncclMemAlloc";
  CHECK(arg_check_ptr(ptr, api, "ptr"));
  if (size == 0) {
    WARN("%s: size is 0", api);
    return ncclInvalidArgument;
  }
  long page = sysconf(_SC_PAGESIZE);
  if (page <= 0) page = 4096;
  size_t rounded = (size + (size_t)page - 1) / (size_t)page * (size_t)page;
  void* p = NULL;
  int err = posix_memalign(&p, (size_t)page, rounded);
  if (err != 0) {
    WARN("%s: posix_memalign of %zu bytes failed: %s", api, rounded, strerror(err));
    return ncclSystemError;
  }
  memset(p, 0, rounded);
  INFO(NCCL_ALLOC, "%s: %zu bytes of host memory at %p (host executor)", api, rounded, p);
  *ptr = p;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclMemFree, void* ptr) {
  free(ptr); /* NULL is allowed, as for free() */
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void* buff, size_t size,
         void** handle) {
  const char* api = "ncclCommRegister";
  ncclResult_t res = comm_check(comm, api);
  if (res != ncclSuccess) goto out;
  CHECK_GOTO(arg_check_ptr(handle, api, "handle"), res, out);
  if (buff == NULL && size > 0) CHECK_GOTO(arg_check_ptr(buff, api, "buff"), res, out);
  mem_reg_t* reg;
  CHECK_GOTO(MEM_CALLOC(&reg, 1), res, out);
  *reg = (mem_reg_t){.magic = MEM_REG_MAGIC, .comm = comm, .buff = buff, .size = size};
  INFO(NCCL_REG, "%s: buff %p size %zu -> handle %p (host executor: nothing to pin)", api, buff,
       size, (void*)reg);
  *handle = reg;
out:
  comm_scope_end();
  return res;
}

NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void* handle) {
  const char* api = "ncclCommDeregister";
  ncclResult_t res = comm_check(comm, api);
  if (res != ncclSuccess) goto out;
  mem_reg_t* reg = handle;
  if (reg == NULL || reg->magic != MEM_REG_MAGIC || reg->comm != comm) {
    WARN("%s: handle %p (handle) was not returned by ncclCommRegister on comm %p", api, handle,
         (void*)comm);
    res = ncclInvalidArgument;
    goto out;
  }
  reg->magic = 0;
  free(reg);
out:
  comm_scope_end();
  return res;
}

NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void* buff, size_t size,
         ncclWindow_t* win, int winFlags) {
  const char* api = "ncclCommWindowRegister";
  ncclResult_t res = comm_check(comm, api);
  if (res != ncclSuccess) goto out;
  CHECK_GOTO(arg_check_ptr(win, api, "win"), res, out);
  if (buff == NULL && size > 0) CHECK_GOTO(arg_check_ptr(buff, api, "buff"), res, out);
  if (winFlags & ~(NCCL_WIN_COLL_SYMMETRIC)) {
    WARN("%s: unknown winFlags 0x%x (winFlags): use NCCL_WIN_DEFAULT or NCCL_WIN_COLL_SYMMETRIC",
         api, (unsigned)winFlags);
    res = ncclInvalidArgument;
    goto out;
  }
  struct ncclWindow_vidmem* w;
  CHECK_GOTO(MEM_CALLOC(&w, 1), res, out);
  *w = (struct ncclWindow_vidmem){
      .magic = MEM_WIN_MAGIC, .comm = comm, .buff = buff, .size = size, .flags = winFlags};
  INFO(NCCL_REG, "%s: buff %p size %zu flags 0x%x -> window %p (host executor: nothing to map)",
       api, buff, size, (unsigned)winFlags, (void*)w);
  *win = w;
out:
  comm_scope_end();
  return res;
}

NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  const char* api = "ncclCommWindowDeregister";
  ncclResult_t res = comm_check(comm, api);
  if (res != ncclSuccess) goto out;
  if (win == NULL || win->magic != MEM_WIN_MAGIC || win->comm != comm) {
    WARN("%s: window %p (win) was not returned by ncclCommWindowRegister on comm %p", api,
         (void*)win, (void*)comm);
    res = ncclInvalidArgument;
    goto out;
  }
  win->magic = 0;
  free(win);
out:
  comm_scope_end();
  return res;
}
