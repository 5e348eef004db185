/* NVTX ranges on the host executor, seen by a recording NVTX injection library
 * (tests/plugins/nvtx_recorder.c, loaded through NVTX_INJECTION64_PATH as Nsight Systems loads its
 * own): 2 ranks call every collective and point-to-point entry point, with arguments chosen here,
 * and each rank's record must hold, in call order, one "NCCL" range per call named after it, with
 * the payload fields computed from those arguments (message size = count x type size, data type,
 * reduction operation, root, peer), the same communicator ID on both ranks, and a pop for every
 * push. With NCCL_NVTX_DISABLE=1 nothing is recorded. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "itest.h"
#include "unit.h"

#define NRANKS 2
#define COUNT 1000

typedef struct nvtx_shared {
  int pids[NRANKS];
} nvtx_shared_t;

static int nvtx_body(itest_rank_t* r, void* arg) {
  nvtx_shared_t* sh = arg;
  sh->pids[r->rank] = (int)getpid();
  ncclComm_t comm = r->comms[0];
  float* a = calloc(NRANKS * COUNT, sizeof(float));
  float* b = calloc(NRANKS * COUNT, sizeof(float));
  IT_EXPECT(a != NULL && b != NULL, "out of memory");
  int peer = 1 - r->rank;
  IT_NCCL(ncclAllReduce(a, b, COUNT, ncclFloat32, ncclSum, comm, NULL));
  IT_NCCL(ncclBroadcast(a, b, COUNT, ncclFloat32, 1, comm, NULL));
  IT_NCCL(ncclReduce(a, b, COUNT, ncclFloat32, ncclMax, 0, comm, NULL));
  IT_NCCL(ncclAllGather(a, b, COUNT, ncclFloat32, comm, NULL));
  IT_NCCL(ncclReduceScatter(a, b, COUNT, ncclFloat32, ncclMin, comm, NULL));
  IT_NCCL(ncclAlltoAll(a, b, COUNT / NRANKS, ncclFloat32, comm, NULL));
  IT_NCCL(ncclGather(a, b, COUNT, ncclFloat32, 1, comm, NULL));
  IT_NCCL(ncclScatter(a, b, COUNT, ncclFloat32, 0, comm, NULL));
  IT_NCCL(ncclBcast(a, COUNT, ncclInt32, 0, comm, NULL));
  IT_NCCL(ncclGroupStart());
  IT_NCCL(ncclSend(a, COUNT, ncclInt8, peer, comm, NULL));
  IT_NCCL(ncclRecv(b, COUNT, ncclInt8, peer, comm, NULL));
  IT_NCCL(ncclGroupEnd());
  free(a);
  free(b);
  return 0;
}

/* The record of one rank, or NULL. */
static char* read_record(const char* tmpl, int pid) {
  char path[256];
  snprintf(path, sizeof(path), tmpl, pid);
  char* text = unit_read_file(path);
  if (getenv("BATON_TEST_KEEP_LOGS") == NULL) unlink(path);
  return text;
}

/* The line of the n-th (0-based) range named name, or NULL. */
static const char* find_push(const char* text, const char* name, int nth) {
  char want[96];
  snprintf(want, sizeof(want), "PUSH NCCL %s {", name);
  const char* p = text;
  while ((p = strstr(p, want)) != NULL) {
    if (p == text || p[-1] == '\n') {
      if (nth-- == 0) return p;
    }
    p += strlen(want);
  }
  return NULL;
}

/* Whether the line at line holds field=value (up to its end). */
static bool line_has(const char* line, const char* field, const char* value) {
  char want[128];
  snprintf(want, sizeof(want), "%s=%s;", field, value);
  const char* end = strchr(line, '\n');
  const char* hit = strstr(line, want);
  return hit != NULL && (end == NULL || hit < end);
}

static unsigned long long line_comm(const char* line) {
  const char* p = strstr(line, "NCCL communicator ID=");
  return p != NULL ? strtoull(p + strlen("NCCL communicator ID="), NULL, 10) : 0;
}

static int count_lines(const char* text, const char* prefix) {
  int n = 0;
  size_t len = strlen(prefix);
  for (const char* p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
    n += strncmp(p, prefix, len) == 0;
  return n;
}

static void run(bool disabled, char* tmpl, size_t len, nvtx_shared_t* sh) {
  const char* lib = getenv("BATON_NVTX_RECORDER");
  ck_assert_msg(lib != NULL, "BATON_NVTX_RECORDER is not set (tests/CMakeLists.txt sets it)");
  static char env_lib[512], env_file[256];
  snprintf(env_lib, sizeof(env_lib), "NVTX_INJECTION64_PATH=%s", lib);
  snprintf(tmpl, len, "/tmp/baton-nvtx-%d-%d-%%d.log", (int)getpid(), (int)disabled);
  snprintf(env_file, sizeof(env_file), "NVTX_RECORD_FILE=/tmp/baton-nvtx-%d-%d-%%p.log",
           (int)getpid(), (int)disabled);
  itest_opts_t o = {.nranks = NRANKS,
                    .timeout_s = 60,
                    .env = {env_lib, env_file, disabled ? "NCCL_NVTX_DISABLE=1" : NULL}};
  ck_assert_int_eq(itest_run(&o, nvtx_body, sh), 0);
}

START_TEST(test_nvtx_ranges) {
  nvtx_shared_t* sh =
      mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_ptr_ne(sh, MAP_FAILED);
  char tmpl[256];
  run(false, tmpl, sizeof(tmpl), sh);
  char bytes[32], bytes_a2a[32], bytes_i8[32];
  snprintf(bytes, sizeof(bytes), "%zu", (size_t)COUNT * sizeof(float));
  snprintf(bytes_a2a, sizeof(bytes_a2a), "%zu", (size_t)COUNT / NRANKS * sizeof(float));
  snprintf(bytes_i8, sizeof(bytes_i8), "%d", COUNT);
  unsigned long long comm_id[NRANKS] = {0};
  for (int r = 0; r < NRANKS; r++) {
    char* text = read_record(tmpl, sh->pids[r]);
    ck_assert_msg(text != NULL, "rank %d recorded nothing (was the injection loaded?)", r);
    fprintf(stderr, "--- rank %d's NVTX record:\n%s", r, text);
    const char* peer = r == 0 ? "1" : "0";
    const struct {
      const char* name;
      const char* size;
      const char* dtype;
      const char* field; /* a third field and its value, or NULL */
      const char* value;
      const char* field2;
      const char* value2;
    } calls[] = {
        {"ncclAllReduce", bytes, "ncclFloat32", "Reduction operation", "Sum", NULL, NULL},
        {"ncclBroadcast", bytes, "ncclFloat32", "Root", "1", NULL, NULL},
        {"ncclReduce", bytes, "ncclFloat32", "Root", "0", "Reduction operation", "Max"},
        {"ncclAllGather", bytes, "ncclFloat32", NULL, NULL, NULL, NULL},
        {"ncclReduceScatter", bytes, "ncclFloat32", "Reduction operation", "Min", NULL, NULL},
        {"ncclAlltoAll", bytes_a2a, "ncclFloat32", NULL, NULL, NULL, NULL},
        {"ncclGather", bytes, "ncclFloat32", "Root", "1", NULL, NULL},
        {"ncclScatter", bytes, "ncclFloat32", "Root", "0", NULL, NULL},
        {"ncclBcast", bytes, "ncclInt32", "Root", "0", NULL, NULL},
        {"ncclSend", bytes_i8, "ncclInt8", "Peer rank", peer, NULL, NULL},
        {"ncclRecv", bytes_i8, "ncclInt8", "Peer rank", peer, NULL, NULL},
    };
    const char* prev = text;
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
      const char* line = find_push(text, calls[i].name, 0);
      ck_assert_msg(line != NULL, "rank %d: no range for %s", r, calls[i].name);
      ck_assert_msg(line >= prev, "rank %d: %s is out of call order", r, calls[i].name);
      prev = line;
      ck_assert_msg(line_has(line, "Message size [bytes]", calls[i].size),
                    "rank %d: %s: message size is not %s", r, calls[i].name, calls[i].size);
      ck_assert_msg(line_has(line, "Data type", calls[i].dtype), "rank %d: %s: data type is not %s",
                    r, calls[i].name, calls[i].dtype);
      if (calls[i].field != NULL)
        ck_assert_msg(line_has(line, calls[i].field, calls[i].value), "rank %d: %s: %s is not %s",
                      r, calls[i].name, calls[i].field, calls[i].value);
      if (calls[i].field2 != NULL)
        ck_assert_msg(line_has(line, calls[i].field2, calls[i].value2), "rank %d: %s: %s is not %s",
                      r, calls[i].name, calls[i].field2, calls[i].value2);
      unsigned long long id = line_comm(line);
      ck_assert_msg(id != 0, "rank %d: %s has no communicator ID", r, calls[i].name);
      if (comm_id[r] == 0) comm_id[r] = id;
      ck_assert_msg(id == comm_id[r], "rank %d: %s names another communicator", r, calls[i].name);
    }
    /* The calls without a payload are ranges too. */
    const char* plain[] = {"ncclGetUniqueId", "ncclCommInitRank", "ncclGroupStart", "ncclGroupEnd",
                           "ncclCommDestroy"};
    for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++)
      ck_assert_msg(find_push(text, plain[i], 0) != NULL || (r != 0 && i == 0),
                    "rank %d: no range for %s", r, plain[i]);
    int pushes = count_lines(text, "PUSH NCCL "), pops = count_lines(text, "POP NCCL");
    ck_assert_msg(pushes == pops, "rank %d: %d pushes but %d pops", r, pushes, pops);
    free(text);
  }
  ck_assert_msg(comm_id[0] == comm_id[1], "the ranks give their communicator different IDs");
  /* Off: no range at all (the injection is never even loaded). */
  run(true, tmpl, sizeof(tmpl), sh);
  for (int r = 0; r < NRANKS; r++) {
    char* text = read_record(tmpl, sh->pids[r]);
    ck_assert_msg(text == NULL || count_lines(text, "PUSH ") == 0,
                  "rank %d: NCCL_NVTX_DISABLE=1 still recorded ranges", r);
    free(text);
  }
  munmap(sh, sizeof(*sh));
}
END_TEST

int main(void) {
  Suite* s = suite_create("nvtx");
  TCase* tc = tcase_create("nvtx");
  tcase_set_timeout(tc, 120);
  tcase_add_test(tc, test_nvtx_ranges);
  suite_add_tcase(s, tc);
  SRunner* sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
