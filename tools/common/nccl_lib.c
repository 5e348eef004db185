/* Opening a libnccl.so.2 with dlopen and telling Baton from other builds (see nccl_lib.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "nccl_lib.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BATON_NOTE_OWNER "Baton"
#define BATON_NOTE_TYPE 0x4e544142u /* src/base/build_info.c */

typedef struct note_search {
  ElfW(Addr) base; /* l_addr of the object to search */
  const char* name;
  char* out;
  size_t len;
  bool found;
} note_search_t;

static size_t align4(size_t n) {
  return (n + 3) & ~(size_t)3;
}

/* Walks the notes of one PT_NOTE segment for Baton's. */
static bool note_scan(const char* p, size_t size, char* out, size_t len) {
  size_t off = 0;
  while (off + 12 <= size) {
    uint32_t namesz, descsz, type;
    memcpy(&namesz, p + off, 4);
    memcpy(&descsz, p + off + 4, 4);
    memcpy(&type, p + off + 8, 4);
    const char* name = p + off + 12;
    const char* desc = name + align4(namesz);
    size_t next = off + 12 + align4(namesz) + align4(descsz);
    if (next > size) return false;
    if (type == BATON_NOTE_TYPE && namesz == sizeof(BATON_NOTE_OWNER) &&
        memcmp(name, BATON_NOTE_OWNER, namesz) == 0 && descsz > 0) {
      size_t n = strnlen(desc, descsz);
      if (n >= len) n = len - 1;
      memcpy(out, desc, n);
      out[n] = '\0';
      return true;
    }
    off = next;
  }
  return false;
}

static int note_visit(struct dl_phdr_info* info, size_t size, void* arg) {
  note_search_t* s = arg;
  (void)size;
  if (info->dlpi_addr != s->base || info->dlpi_name == NULL || strcmp(info->dlpi_name, s->name))
    return 0;
  for (int i = 0; i < info->dlpi_phnum && !s->found; i++) {
    const ElfW(Phdr)* ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    s->found = note_scan((const char*)(info->dlpi_addr + ph->p_vaddr), ph->p_memsz, s->out, s->len);
  }
  return 1;
}

#define RESOLVE(field, sym)                                                       \
  do {                                                                            \
    *(void**)&out->field = dlsym(out->handle, sym);                               \
    if (out->field == NULL) {                                                     \
      snprintf(err, errlen, "%s has no %s: not an NCCL library", out->path, sym); \
      goto fail;                                                                  \
    }                                                                             \
  } while (0)

int nccl_lib_open(const char* spec, nccl_lib_t* out, char* err, size_t errlen) {
  memset(out, 0, sizeof(*out));
  out->handle = dlopen(spec, RTLD_NOW | RTLD_LOCAL);
  if (out->handle == NULL) {
    snprintf(err, errlen, "cannot load %s: %s", spec, dlerror());
    return -1;
  }
  struct link_map* map = NULL;
  if (dlinfo(out->handle, RTLD_DI_LINKMAP, &map) != 0 || map == NULL) {
    snprintf(err, errlen, "dlinfo on %s failed", spec);
    goto fail;
  }
  const char* mapped = map->l_name[0] ? map->l_name : spec;
  if (realpath(mapped, out->path) == NULL) snprintf(out->path, sizeof(out->path), "%s", mapped);
  RESOLVE(GetVersion, "ncclGetVersion");
  RESOLVE(GetErrorString, "ncclGetErrorString");
  RESOLVE(GetLastError, "ncclGetLastError");
  RESOLVE(GetUniqueId, "ncclGetUniqueId");
  RESOLVE(CommInitRank, "ncclCommInitRank");
  RESOLVE(CommDestroy, "ncclCommDestroy");
  RESOLVE(GroupStart, "ncclGroupStart");
  RESOLVE(GroupEnd, "ncclGroupEnd");
  RESOLVE(AllReduce, "ncclAllReduce");
  RESOLVE(AllGather, "ncclAllGather");
  RESOLVE(ReduceScatter, "ncclReduceScatter");
  RESOLVE(Broadcast, "ncclBroadcast");
  RESOLVE(Reduce, "ncclReduce");
  RESOLVE(AlltoAll, "ncclAlltoAll");
  RESOLVE(Send, "ncclSend");
  RESOLVE(Recv, "ncclRecv");
  if (out->GetVersion(&out->version) != ncclSuccess) out->version = 0;
  note_search_t s = {
      .base = map->l_addr, .name = map->l_name, .out = out->build, .len = sizeof(out->build)};
  dl_iterate_phdr(note_visit, &s);
  out->baton = s.found && strncmp(out->build, "Baton ", 6) == 0;
  if (!out->baton) out->build[0] = '\0';
  return 0;
fail:
  dlclose(out->handle);
  out->handle = NULL;
  return -1;
}

const char* nccl_lib_build_options(const nccl_lib_t* lib) {
  const char* p = lib->baton ? strstr(lib->build, "; ") : NULL;
  p = p ? strstr(p + 2, "; ") : NULL;
  return p ? p + 2 : "";
}

void nccl_lib_describe(const nccl_lib_t* lib, char* out, size_t len) {
  int v = lib->version;
  /* Versions since 2.9 read major*10000 + minor*100 + patch. */
  int major = v / 10000, minor = (v / 100) % 100, patch = v % 100;
  if (lib->baton) {
    char name[64] = "";
    const char* semi = strchr(lib->build, ';');
    size_t n = semi ? (size_t)(semi - lib->build) : strlen(lib->build);
    snprintf(name, sizeof(name), "%.*s", (int)n, lib->build);
    snprintf(out, len, "%s: %s (NCCL %d.%d.%d API)", lib->path, name, major, minor, patch);
  } else {
    snprintf(out, len, "%s: NOT Baton (no Baton build note): NCCL %d.%d.%d, stock or another build",
             lib->path, major, minor, patch);
  }
}
