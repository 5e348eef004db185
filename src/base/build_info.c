/* What this library is and how it was built, readable without calling it: an ELF note (owner
 * "Baton", type BUILD_NOTE_TYPE) in the loaded image's PT_NOTE segment. Tools (baton-info,
 * baton-perf --version) find it with dl_iterate_phdr to tell Baton from stock NCCL, which has the
 * same SONAME, the same symbols and the same ncclGetVersion. The text is
 *   "Baton <version>; NCCL <major>.<minor>.<patch>; <key=value options from CMake>". */
#include "base/base.h"

#ifndef BATON_BUILD_OPTIONS
#define BATON_BUILD_OPTIONS "unknown"
#endif

#define BUILD_STR2(x) #x
#define BUILD_STR(x) BUILD_STR2(x)
#define BUILD_NOTE_TEXT                                                        \
  "Baton " BATON_VERSION_STRING "; NCCL " BUILD_STR(NCCL_MAJOR) "." BUILD_STR( \
      NCCL_MINOR) "." BUILD_STR(NCCL_PATCH) "; " BATON_BUILD_OPTIONS
#define BUILD_NOTE_OWNER "Baton"
#define BUILD_NOTE_TYPE 0x4e544142u /* "BATN" */

/* The ELF note layout: sizes, type, then owner and text, each padded to 4 bytes. */
typedef struct build_note {
  uint32_t namesz, descsz, type;
  char name[(sizeof(BUILD_NOTE_OWNER) + 3) & ~3u];
  char desc[(sizeof(BUILD_NOTE_TEXT) + 3) & ~3u];
} build_note_t;

/* The assembler gives sections named .note* the SHT_NOTE type; the linker maps them into PT_NOTE.
 */
__attribute__((section(".note.baton.build"), aligned(4),
               used)) static const build_note_t build_note = {.namesz = sizeof(BUILD_NOTE_OWNER),
                                                              .descsz = sizeof(BUILD_NOTE_TEXT),
                                                              .type = BUILD_NOTE_TYPE,
                                                              .name = BUILD_NOTE_OWNER,
                                                              .desc = BUILD_NOTE_TEXT};

const char* build_info(void) {
  return build_note.desc;
}
