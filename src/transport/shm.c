/* SHM transport: two processes of one host share a FIFO through a POSIX shared-memory segment.
 * The receiver creates the segment (counters + one buffer per protocol) and sends its name; the
 * sender maps it and unlinks the name at once, so nothing stays in /dev/shm once both sides hold
 * the mapping. The receiver unlinks too when it frees a connection the sender never mapped. */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "transport/transport.h"

#define SHM_NAME_MAX 96
#define SHM_DIR "/dev/shm"

typedef struct shm_info {
  char name[SHM_NAME_MAX];
  uint64_t bytes;
  int buff_bytes[PROTO_COUNT];
} shm_info_t;
_Static_assert(sizeof(shm_info_t) <= CONN_INFO_BYTES, "connect info must fit");

typedef struct shm_res {
  char name[SHM_NAME_MAX];
  void* base;
  size_t bytes;
  bool owner; /* receiver: created the name */
  bool unlinked;
  bool gpu_mapped; /* registered for the CUDA executor (transport_fifo_map) */
} shm_res_t;

static void shm_format_bytes(size_t bytes, char* buf, size_t len) {
  if (bytes >= (1ull << 30))
    snprintf(buf, len, "%.2f GiB", (double)bytes / (1ull << 30));
  else
    snprintf(buf, len, "%.1f MiB", (double)bytes / (1ull << 20));
}

ncclResult_t shm_check_space(size_t bytes) {
  struct statvfs st;
  if (statvfs(SHM_DIR, &st) != 0) {
    WARN(
        "SHM: statvfs(%s) failed: %s; shared memory is needed between processes of one host "
        "(or set NCCL_SHM_DISABLE=1)",
        SHM_DIR, strerror(errno));
    return ncclSystemError;
  }
  size_t avail = (size_t)st.f_bavail * (size_t)st.f_frsize;
  if (avail < bytes) {
    char need[32], have[32], total[32];
    shm_format_bytes(bytes, need, sizeof(need));
    shm_format_bytes(avail, have, sizeof(have));
    shm_format_bytes((size_t)st.f_blocks * (size_t)st.f_frsize, total, sizeof(total));
    WARN(
        "SHM: %s has %s free (of %s) but a connection needs %s (%zu bytes); increase %s, e.g. "
        "docker run --shm-size=1g, or lower NCCL_BUFFSIZE, or set NCCL_SHM_DISABLE=1",
        SHM_DIR, have, total, need, bytes, SHM_DIR);
    return ncclSystemError;
  }
  return ncclSuccess;
}

static bool shm_can_connect(const transport_ctx_t* ctx, const peer_info_t* me,
                            const peer_info_t* peer) {
  if (param_int(PARAM_SHM_DISABLE)) return false;
  return me->host_hash == peer->host_hash && me->shm_dev == peer->shm_dev;
}

static void shm_res_free(shm_res_t* r) {
  if (r == NULL) return;
  if (r->gpu_mapped) transport_host_mem_unregister(r->base);
  if (r->base != NULL) munmap(r->base, r->bytes);
  if (r->owner && !r->unlinked) shm_unlink(r->name); /* the sender never mapped it */
  free(r);
}

static void shm_describe(conn_t* conn) {
  snprintf(conn->desc, sizeof(conn->desc), "SHM/direct/direct");
}

/* Maps r->bytes of the open segment fd (closed here) and, for the CUDA executor, into the GPU. */
static ncclResult_t shm_map(const transport_ctx_t* ctx, shm_res_t* r, int fd) {
  void* base = mmap(NULL, r->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    WARN("SHM: mmap of %zu bytes of %s failed: %s", r->bytes, r->name, strerror(errno));
    return ncclSystemError;
  }
  r->base = base;
  CHECK(transport_fifo_map(ctx, r->base, r->bytes, &r->gpu_mapped));
  return ncclSuccess;
}

static ncclResult_t shm_recv_setup(transport_ctx_t* ctx, conn_t* conn, void* info) {
  shm_res_t* r = NULL;
  shm_info_t si;
  ncclResult_t res = ncclSuccess;
  uint32_t nonce = 0;
  memset(&si, 0, sizeof(si));
  CHECK(MEM_CALLOC(&r, 1));
  r->bytes = transport_fifo_bytes(ctx->buff_bytes);
  CHECK_GOTO(shm_check_space(r->bytes), res, fail);
  if (getrandom(&nonce, sizeof(nonce), 0) != sizeof(nonce)) nonce = (uint32_t)clock_ns();
  snprintf(r->name, sizeof(r->name), "/baton-shm-%016llx-c%d-%d-%d-%08x",
           (unsigned long long)ctx->comm_hash, conn->channel, conn->peer, ctx->rank, nonce);
  int fd = shm_open(r->name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    WARN("SHM: shm_open(%s) failed: %s", r->name, strerror(errno));
    res = ncclSystemError;
    goto fail;
  }
  r->owner = true;
  int err = ftruncate(fd, (off_t)r->bytes) != 0 ? errno : posix_fallocate(fd, 0, (off_t)r->bytes);
  if (err != 0) {
    char need[32];
    shm_format_bytes(r->bytes, need, sizeof(need));
    WARN(
        "SHM: allocating %s for %s failed: %s; increase %s (e.g. docker run --shm-size=1g) or "
        "set NCCL_SHM_DISABLE=1",
        need, r->name, strerror(err), SHM_DIR);
    close(fd);
    res = ncclSystemError;
    goto fail;
  }
  CHECK_GOTO(shm_map(ctx, r, fd), res, fail);
  transport_fifo_attach(&conn->fifo, r->base, ctx->buff_bytes, CONN_FLAG_HOSTMEM);
  snprintf(si.name, sizeof(si.name), "%s", r->name);
  si.bytes = r->bytes;
  memcpy(si.buff_bytes, ctx->buff_bytes, sizeof(si.buff_bytes));
  memcpy(info, &si, sizeof(si));
  conn->priv = r;
  conn->bytes = r->bytes; /* the segment is this side's; the sender only maps it */
  shm_describe(conn);
  return ncclSuccess;
fail:
  shm_res_free(r);
  return res;
}

static ncclResult_t shm_send_connect(transport_ctx_t* ctx, conn_t* conn, const void* info) {
  shm_res_t* r = NULL;
  shm_info_t si;
  ncclResult_t res = ncclSuccess;
  struct stat st;
  memcpy(&si, info, sizeof(si));
  si.name[SHM_NAME_MAX - 1] = '\0';
  CHECK(MEM_CALLOC(&r, 1));
  snprintf(r->name, sizeof(r->name), "%s", si.name);
  int fd = shm_open(r->name, O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    WARN(
        "SHM: rank %d cannot open rank %d's segment %s: %s (different /dev/shm? set "
        "NCCL_SHM_DISABLE=1)",
        ctx->rank, conn->peer, r->name, strerror(errno));
    res = ncclSystemError;
    goto fail;
  }
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != si.bytes ||
      si.bytes != transport_fifo_bytes(si.buff_bytes)) {
    WARN("SHM: segment %s of rank %d has %lld bytes, expected %llu", r->name, conn->peer,
         (long long)st.st_size, (unsigned long long)si.bytes);
    close(fd);
    res = ncclInternalError;
    goto fail;
  }
  r->bytes = si.bytes;
  CHECK_GOTO(shm_map(ctx, r, fd), res, fail);
  /* Both sides hold the mapping now: the name is no longer needed. */
  if (shm_unlink(r->name) != 0 && errno != ENOENT)
    INFO(NCCL_SHM, "SHM: shm_unlink(%s) failed: %s", r->name, strerror(errno));
  r->unlinked = true;
  transport_fifo_attach(&conn->fifo, r->base, si.buff_bytes, CONN_FLAG_HOSTMEM);
  conn->priv = r;
  shm_describe(conn);
  return ncclSuccess;
fail:
  shm_res_free(r);
  return res;
}

static ncclResult_t shm_recv_connect(transport_ctx_t* ctx, conn_t* conn) {
  return ncclSuccess;
}

static ncclResult_t shm_free(transport_ctx_t* ctx, conn_t* conn) {
  shm_res_free(conn->priv);
  conn->priv = NULL;
  return ncclSuccess;
}

const transport_ops_t transport_shm_ops = {
    .name = "SHM",
    .can_connect = shm_can_connect,
    .recv_setup = shm_recv_setup,
    .send_connect = shm_send_connect,
    .recv_connect = shm_recv_connect,
    .free = shm_free,
};
