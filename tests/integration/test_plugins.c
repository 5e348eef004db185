/* Each plugin kind, loaded the way stock loads it, sees what it should: the test plugins of
 * tests/plugins log what they are given into BATON_PLUGIN_LOG ("<pid> ..." lines), and the
 * results of the operations are checked as everywhere else.
 *   env (ncclEnvPlugin_v1, and v2 taken first): every NCCL_* variable is read through it
 *     (NCCL_BUFFSIZE 123456; v2's 654321);
 *   tuner v6 (taken before v5), v5 and v2: stock's cost table (Baton's pairs priced, the others
 * -1), and the tuner's choice (Tree/LL on one channel) is what runs; NCCL_ALGO vetoes what it
 * excludes; profiler v5, and v6 and v7 from libraries exporting only that symbol: API, group,
 * collective, point-to-point, launch and channel events, each parented as stock does it, started
 * after its parent and stopped once (a Coll or P2p before its Group); v7 also the user tag of a
 * *Config call on its API and Coll events, 0 elsewhere, and KernelCh events when it asks for
 * KernelPhase; v1: numbers instead of names, no newer event types.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collectives/collectives.h"
#include "itest.h"
#include "unit.h"

static char tmp_dir[256];
static char log_path[512];

static void setup(void) {
  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/baton_plugins_XXXXXX");
  unit_sandbox_enter(tmp_dir);
  snprintf(log_path, sizeof(log_path), "%s/plugin.log", tmp_dir);
  setenv("BATON_PLUGIN_LOG", log_path, 1);
}

static void teardown(void) {
  unit_sandbox_leave(tmp_dir);
}

static const char* plugin_path(const char* file) {
  static char path[1024];
  const char* dir = getenv("BATON_TEST_PLUGIN_DIR");
  ck_assert_msg(dir != NULL, "BATON_TEST_PLUGIN_DIR is not set (run through ctest)");
  snprintf(path, sizeof(path), "%s/%s", dir, file);
  ck_assert_msg(access(path, R_OK) == 0, "%s was not built", path);
  return path;
}

/* The log's lines, one string each (NULL-terminated; free with free_lines). */
static char** read_lines(int* n) {
  char* text = unit_read_file(log_path);
  ck_assert_msg(text != NULL, "the plugin wrote no log");
  int cap = 16, count = 0;
  char** lines = malloc((size_t)cap * sizeof(*lines));
  char* save = NULL;
  for (char* l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    if (count + 1 >= cap) lines = realloc(lines, (size_t)(cap *= 2) * sizeof(*lines));
    lines[count++] = strdup(l);
  }
  lines[count] = NULL;
  free(text);
  *n = count;
  return lines;
}

static void free_lines(char** lines) {
  for (char** l = lines; *l; l++) free(*l);
  free(lines);
}

static int count_lines(char** lines, const char* needle) {
  int n = 0;
  for (char** l = lines; *l; l++) n += strstr(*l, needle) != NULL;
  return n;
}

/* ---- Environment plugin ---------------------------------------------------------------------- */
START_TEST(test_env_plugin) {
  setenv("NCCL_ENV_PLUGIN", "test", 1); /* libnccl-env-test.so, found on LD_LIBRARY_PATH */
  setenv("NCCL_BUFFSIZE", "999", 1);
  ck_assert_int_eq(param_int(PARAM_BUFFSIZE), 123456);
  ck_assert_int_eq(param_is_set(PARAM_BUFFSIZE), true);
  int n;
  char** lines = read_lines(&n);
  char expect[128];
  snprintf(expect, sizeof(expect), "env init %d.%d.%d +baton-%s", NCCL_MAJOR, NCCL_MINOR,
           NCCL_PATCH, BATON_VERSION_STRING);
  ck_assert_int_eq(count_lines(lines, expect), 1);
  free_lines(lines);
}
END_TEST

/* A plugin with both symbols: v2 is taken (its value, its init with a logger that works). */
START_TEST(test_env_plugin_v2) {
  setenv("NCCL_ENV_PLUGIN", "testv2", 1);
  setenv("NCCL_BUFFSIZE", "999", 1);
  ck_assert_int_eq(param_int(PARAM_BUFFSIZE), 654321);
  int n;
  char** lines = read_lines(&n);
  char expect[128];
  snprintf(expect, sizeof(expect), "env v2 init %d.%d.%d +baton-%s logger=1", NCCL_MAJOR,
           NCCL_MINOR, NCCL_PATCH, BATON_VERSION_STRING);
  ck_assert_int_eq(count_lines(lines, expect), 1);
  ck_assert_int_eq(count_lines(lines, "env init"), 0); /* v1's init never ran */
  free_lines(lines);
}
END_TEST

START_TEST(test_env_plugin_missing) {
  setenv("NCCL_ENV_PLUGIN", "/nonexistent/libnccl-env-x.so", 1);
  setenv("NCCL_BUFFSIZE", "999", 1);
  log_clear_last_error();
  ck_assert_int_eq(param_int(PARAM_BUFFSIZE), 999); /* the process environment, and a WARN */
  ck_assert_msg(strstr(log_last_error(),
                       "NCCL_ENV_PLUGIN=/nonexistent/libnccl-env-x.so: cannot "
                       "load an environment plugin") != NULL,
                "last error: %s", log_last_error());
}
END_TEST

/* ---- Tuner ----------------------------------------------------------------------------------- */
typedef struct tuner_case {
  int algo, proto, nchannels; /* what the AllReduce must have run */
} tuner_case_t;

static int tuner_body(itest_rank_t* r, void* arg) {
  const tuner_case_t* tc = arg;
  itest_case_t c = {
      .func = IT_ALLREDUCE, .dtype = ncclFloat32, .op = IT_SUM, .count = 10000, .seed = 3};
  if (itest_op_run(r->comms[0], &c)) return 1;
  coll_choice_t ch;
  IT_NCCL(coll_last_choice(r->comms[0], &ch));
  IT_EXPECT(ch.algo == tc->algo && ch.proto == tc->proto && ch.nchannels == tc->nchannels,
            "AllReduce ran %s/%s on %d channels, expected %s/%s on %d", coll_algo_name(ch.algo),
            coll_proto_name(ch.proto), ch.nchannels, coll_algo_name(tc->algo),
            coll_proto_name(tc->proto), tc->nchannels);
  itest_case_t g = {.func = IT_ALLGATHER, .dtype = ncclInt32, .count = 777, .seed = 4};
  return itest_op_run(r->comms[0], &g);
}

/* Every table line of the log: 21 costs, the non-Baton algorithms and LL128 (no GPU) at -1. */
static void check_tables(char** lines) {
  int tables = 0;
  for (char** l = lines; *l; l++) {
    const char* t = strstr(*l, "table");
    if (t == NULL) continue;
    tables++;
    ck_assert_msg(strstr(*l, "algos 7 protos 3 ctx 42") != NULL, "%s", *l);
    float v[21];
    int n = sscanf(t + 5, "%f %f %f %f %f %f %f %f %f %f %f %f %f %f %f %f %f %f %f %f %f", &v[0],
                   &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8], &v[9], &v[10], &v[11],
                   &v[12], &v[13], &v[14], &v[15], &v[16], &v[17], &v[18], &v[19], &v[20]);
    ck_assert_msg(n == 21, "cannot parse %s", *l);
    for (int i = 6; i < 21; i++) ck_assert_msg(v[i] == -1.0f, "CollNet/NVLS/PAT priced: %s", *l);
    ck_assert_msg(v[1] == -1.0f && v[4] == -1.0f, "LL128 priced on the host executor: %s", *l);
    ck_assert_msg(v[3] > 0 && v[5] > 0, "Ring LL/Simple not priced: %s", *l);
  }
  ck_assert_int_ge(tables, 6); /* AllReduce and AllGather on 3 ranks */
}

START_TEST(test_tuner_v5) {
  setenv("NCCL_TUNER_PLUGIN", "testv5", 1); /* the suffix form: libnccl-tuner-testv5.so */
  tuner_case_t tc = {.algo = ALGO_TREE, .proto = PROTO_LL, .nchannels = 1};
  itest_opts_t o = {.nranks = 3, .timeout_s = 120};
  ck_assert_int_eq(itest_run(&o, tuner_body, &tc), 0);
  int n;
  char** lines = read_lines(&n);
  ck_assert_int_eq(count_lines(lines, "tuner init v5 nranks 3 nnodes 1 domains 1 min 3 max 3"), 3);
  ck_assert_int_eq(count_lines(lines, "tuner call func 4 bytes 40000 npipe 1"), 3);
  ck_assert_int_eq(count_lines(lines, "tuner call func 2 bytes 9324 npipe 1"), 3);
  ck_assert_int_eq(count_lines(lines, "tuner finalize ctx 42"), 3);
  check_tables(lines);
  free_lines(lines);
}
END_TEST

/* A library with v6 and v5: v6 is taken, called like v5; its getChunkSize is not called. */
START_TEST(test_tuner_v6) {
  setenv("NCCL_TUNER_PLUGIN", "testv6", 1);
  tuner_case_t tc = {.algo = ALGO_TREE, .proto = PROTO_LL, .nchannels = 1};
  itest_opts_t o = {.nranks = 3, .timeout_s = 120};
  ck_assert_int_eq(itest_run(&o, tuner_body, &tc), 0);
  int n;
  char** lines = read_lines(&n);
  ck_assert_int_eq(count_lines(lines, "tuner init v6 nranks 3 nnodes 1 domains 1 min 3 max 3"), 3);
  ck_assert_int_eq(count_lines(lines, "tuner init v5"), 0);
  ck_assert_int_eq(count_lines(lines, "tuner call func 4 bytes 40000 npipe 1"), 3);
  ck_assert_int_eq(count_lines(lines, "tuner chunk"), 0);
  ck_assert_int_eq(count_lines(lines, "tuner finalize ctx 42"), 3);
  check_tables(lines);
  free_lines(lines);
}
END_TEST

START_TEST(test_tuner_vetoed_by_nccl_algo) {
  setenv("NCCL_TUNER_PLUGIN", plugin_path("libnccl-tuner-testv5.so"), 1);
  /* Tree is ruled out: its column reaches the tuner as -1, and the tuner's 0 there is ignored;
   * its channel count still holds. */
  tuner_case_t tc = {.algo = ALGO_RING, .proto = -1, .nchannels = 1};
  itest_opts_t o = {.nranks = 3, .timeout_s = 120, .env = {"NCCL_ALGO=Ring", "NCCL_PROTO=Simple"}};
  tc.proto = PROTO_SIMPLE;
  ck_assert_int_eq(itest_run(&o, tuner_body, &tc), 0);
  int n;
  char** lines = read_lines(&n);
  for (char** l = lines; *l; l++) {
    const char* t = strstr(*l, "table");
    if (t == NULL || strstr(*l, "func 4") == NULL) continue;
    float tree_ll, tree_simple, ring_ll;
    ck_assert(sscanf(t + 5, "%f %*f %f %f", &tree_ll, &tree_simple, &ring_ll) == 3);
    ck_assert_msg(tree_ll == -1.0f && tree_simple == -1.0f && ring_ll == -1.0f, "%s", *l);
  }
  free_lines(lines);
}
END_TEST

START_TEST(test_tuner_v2) {
  setenv("NCCL_TUNER_PLUGIN", plugin_path("libnccl-tuner-testv2.so"), 1);
  tuner_case_t tc = {.algo = ALGO_TREE, .proto = PROTO_LL, .nchannels = 1};
  itest_opts_t o = {.nranks = 3, .timeout_s = 120};
  ck_assert_int_eq(itest_run(&o, tuner_body, &tc), 0);
  int n;
  char** lines = read_lines(&n);
  ck_assert_int_eq(count_lines(lines, "tuner init v2 nranks 3 nnodes 1"), 3);
  ck_assert_int_eq(count_lines(lines, "tuner call func 4 bytes 40000 npipe 1 ctx 42"), 3);
  ck_assert_int_eq(count_lines(lines, "tuner finalize ctx 42"), 3);
  free_lines(lines);
}
END_TEST

/* ---- Profiler -------------------------------------------------------------------------------- */
/* An AllReduce, then a group of a send and a receive with the other rank. */
static int profiler_body(itest_rank_t* r, void* arg) {
  (void)arg;
  itest_case_t c = {
      .func = IT_ALLREDUCE, .dtype = ncclFloat32, .op = IT_SUM, .count = 1000, .seed = 9};
  if (itest_op_run(r->comms[0], &c)) return 1;
  int peer = 1 - r->rank;
  int out[64], in[64];
  for (int i = 0; i < 64; i++) out[i] = r->rank * 1000 + i;
  IT_NCCL(ncclGroupStart());
  IT_NCCL(ncclSend(out, 64, ncclInt32, peer, r->comms[0], NULL));
  IT_NCCL(ncclRecv(in, 64, ncclInt32, peer, r->comms[0], NULL));
  IT_NCCL(ncclGroupEnd());
  for (int i = 0; i < 64; i++) IT_EXPECT(in[i] == peer * 1000 + i, "in[%d] = %d", i, in[i]);
  return 0;
}

/* profiler_body, then an AllReduce of PROF_TAG_COUNT int32 through ncclAllReduceConfig with
 * userProfilerTag PROF_TAG (each rank gives rank + i; the sum is checked). */
#define PROF_TAG 0xba7042ull
#define PROF_TAG_COUNT 96
static int profiler_tagged_body(itest_rank_t* r, void* arg) {
  if (profiler_body(r, arg)) return 1;
  int in[PROF_TAG_COUNT], out[PROF_TAG_COUNT];
  for (int i = 0; i < PROF_TAG_COUNT; i++) in[i] = r->rank + i;
  ncclCollConfig_t cfg = NCCL_COLLCONFIG_INITIALIZER;
  cfg.userProfilerTag = PROF_TAG;
  IT_NCCL(
      ncclAllReduceConfig(in, out, PROF_TAG_COUNT, ncclInt32, ncclSum, r->comms[0], NULL, &cfg));
  for (int i = 0; i < PROF_TAG_COUNT; i++)
    IT_EXPECT(out[i] == 1 + 2 * i, "out[%d] = %d", i, out[i]); /* ranks 0 and 1 */
  return 0;
}

typedef struct prof_event {
  int pid, id, type, parent;
  char text[256];
  int stops, states[4], nstates;
  int start_line, stop_line; /* where in the log */
  unsigned long long ptimer_start, ptimer_stop;
} prof_event_t;

/* Parses "prof start/state/stop" lines of one pid into events[]. */
static int parse_events(char** lines, int pid, prof_event_t* ev, int cap) {
  int n = 0;
  for (char** l = lines; *l; l++) {
    int lpid, id, type, parent, state, off = 0;
    if (sscanf(*l, "%d prof start %d type %d parent %d %n", &lpid, &id, &type, &parent, &off) ==
            4 &&
        lpid == pid) {
      ck_assert_int_lt(n, cap);
      ev[n] = (prof_event_t){
          .pid = pid, .id = id, .type = type, .parent = parent, .start_line = (int)(l - lines)};
      snprintf(ev[n].text, sizeof(ev[n].text), "%s", *l + off);
      const char* pt = strstr(*l, "ptimer ");
      if (pt) ev[n].ptimer_start = strtoull(pt + 7, NULL, 10);
      n++;
      continue;
    }
    bool is_state = sscanf(*l, "%d prof state %d %d", &lpid, &id, &state) == 3;
    bool is_stop = !is_state && sscanf(*l, "%d prof stop %d", &lpid, &id) == 2;
    if ((!is_state && !is_stop) || lpid != pid) continue;
    prof_event_t* e = NULL;
    for (int i = 0; i < n; i++)
      if (ev[i].id == id) e = &ev[i];
    ck_assert_msg(e != NULL, "state or stop of an event never started: %s", *l);
    if (is_stop) {
      e->stops++;
      e->stop_line = (int)(l - lines);
    } else {
      if (e->nstates < 4) e->states[e->nstates++] = state;
      const char* pt = strstr(*l, "ptimer ");
      if (pt) e->ptimer_stop = strtoull(pt + 7, NULL, 10);
    }
  }
  return n;
}

static const prof_event_t* find_event(const prof_event_t* ev, int n, int id) {
  for (int i = 0; i < n; i++)
    if (ev[i].id == id) return &ev[i];
  return NULL;
}

static int count_type(const prof_event_t* ev, int n, int type) {
  int c = 0;
  for (int i = 0; i < n; i++) c += ev[i].type == type;
  return c;
}

/* The pids that logged an init line. */
static int plugin_pids(char** lines, const char* init, int* pids, int cap) {
  int n = 0;
  for (char** l = lines; *l; l++) {
    int pid;
    if (strstr(*l, init) && sscanf(*l, "%d", &pid) == 1 && n < cap) pids[n++] = pid;
  }
  return n;
}

/* The events of profiler_body (tagged: profiler_tagged_body) as a v5, v6 or v7 plugin logs
 * them, one rank's after the other's; version 7's lines carry user tags. */
static void check_v5_events(int version, bool tagged) {
  int n;
  char** lines = read_lines(&n);
  int pids[4];
  char init[64];
  snprintf(init, sizeof(init), "prof init v%d nranks 2", version);
  ck_assert_int_eq(plugin_pids(lines, init, pids, 4), 2);
  ck_assert_int_eq(count_lines(lines, "prof finalize ctx 7"), 2);
  for (int k = 0; k < 2; k++) {
    prof_event_t ev[256];
    int ne = parse_events(lines, pids[k], ev, 256);
    for (int i = 0; i < ne; i++) {
      ck_assert_msg(ev[i].stops == 1, "event %d (%s) stopped %d times", ev[i].id, ev[i].text,
                    ev[i].stops);
      ck_assert_msg(ev[i].type <= PROF_KERNEL_LAUNCH,
                    "event type %d: Baton emits no CE or KernelPhase events", ev[i].type);
      const prof_event_t* parent = find_event(ev, ne, ev[i].parent);
      ck_assert_msg(ev[i].parent == 0 || (parent && parent->start_line < ev[i].start_line),
                    "event %d (%s) started before its parent %d", ev[i].id, ev[i].text,
                    ev[i].parent);
    }
    ck_assert_int_ge(count_type(ev, ne, PROF_GROUP_API), 2);
    ck_assert_int_ge(count_type(ev, ne, PROF_KERNEL_LAUNCH), 2);
    int colls = 0, p2ps = 0, chans = 0, tagged_colls = 0;
    for (int i = 0; i < ne; i++) {
      const prof_event_t* e = &ev[i];
      const prof_event_t* parent = find_event(ev, ne, e->parent);
      if (e->type == PROF_GROUP_API) {
        ck_assert_msg(e->nstates == 2 && e->states[0] == PROF_STATE_GROUP_START_API_STOP &&
                          e->states[1] == PROF_STATE_GROUP_END_API_START,
                      "GroupApi %d states", e->id);
      } else if (e->type == PROF_COLL_API || e->type == PROF_P2P_API ||
                 e->type == PROF_KERNEL_LAUNCH) {
        ck_assert_msg(parent && parent->type == PROF_GROUP_API, "%s: parent %d", e->text,
                      e->parent);
      } else if (e->type == PROF_COLL) {
        colls++;
        ck_assert_msg(parent && parent->type == PROF_COLL_API, "Coll parent %d", e->parent);
        /* The tagged call is the second AllReduce: seq 1, its own count and type. */
        bool second = strstr(e->text, "seq 1 ") != NULL;
        tagged_colls += second;
        const char* api = second ? "func AllReduce count 96 type ncclInt32 root -1"
                                 : "func AllReduce count 1000 type ncclFloat32 root -1";
        const char* coll = second ? "func AllReduce count 96 type ncclInt32 seq 1 algo "
                                  : "func AllReduce count 1000 type ncclFloat32 seq 0 algo ";
        ck_assert_msg(strstr(parent->text, api), "CollApi: %s", parent->text);
        ck_assert_msg(strstr(e->text, coll), "Coll: %s", e->text);
        ck_assert_msg(strstr(e->text, "algo RING") || strstr(e->text, "algo TREE"), "%s", e->text);
        if (version == 7) {
          char tag[32];
          snprintf(tag, sizeof(tag), "tag %llu", second ? PROF_TAG : 0ull);
          ck_assert_msg(strstr(e->text, tag) && strstr(e->text, "variant none sym 0"), "Coll: %s",
                        e->text);
          ck_assert_msg(strstr(parent->text, tag), "CollApi: %s", parent->text);
        }
        int group;
        const char* g = strstr(e->text, "group ");
        ck_assert(g && sscanf(g, "group %d", &group) == 1);
        const prof_event_t* ge = find_event(ev, ne, group);
        ck_assert_msg(ge && ge->type == PROF_GROUP, "Coll's group %d", group);
        ck_assert_msg(ge->stop_line > e->stop_line, "Group %d stopped before its Coll", group);
      } else if (e->type == PROF_P2P) {
        p2ps++;
        ck_assert_msg(parent && parent->type == PROF_P2P_API, "P2p parent %d", e->parent);
        ck_assert_msg(strstr(e->text, "count 64 peer ") && strstr(parent->text, "count 64"),
                      "P2p: %s / %s", e->text, parent->text);
        if (version == 7)
          ck_assert_msg(strstr(e->text, "tag 0") && strstr(parent->text, "tag 0"),
                        "untagged P2p: %s / %s", e->text, parent->text);
      } else if (e->type == PROF_KERNEL_CH) {
        chans++;
        ck_assert_msg(parent && (parent->type == PROF_COLL || parent->type == PROF_P2P),
                      "KernelCh parent %d", e->parent);
        ck_assert_msg(e->nstates == 1 && e->states[0] == PROF_STATE_KERNEL_CH_STOP,
                      "KernelCh %d states", e->id);
        ck_assert_msg(e->ptimer_start > 0 && e->ptimer_stop >= e->ptimer_start,
                      "KernelCh times %llu .. %llu", e->ptimer_start, e->ptimer_stop);
      }
    }
    ck_assert_int_eq(colls, tagged ? 2 : 1);
    ck_assert_int_eq(tagged_colls, tagged ? 1 : 0);
    ck_assert_int_eq(p2ps, 2);
    ck_assert_int_ge(chans, 3); /* the AllReduce's channel(s), the send's and the receive's */
  }
  free_lines(lines);
}

/* Runs body on 2 ranks with the profiler plugin `plugin` (a path, or a name's suffix). */
static void profiler_run(const char* plugin, itest_body_t body) {
  setenv("NCCL_PROFILER_PLUGIN", plugin, 1);
  itest_opts_t o = {.nranks = 2, .timeout_s = 120};
  ck_assert_int_eq(itest_run(&o, body, NULL), 0);
}

START_TEST(test_profiler_v5) {
  profiler_run(plugin_path("libnccl-profiler-testv5.so"), profiler_body);
  check_v5_events(5, false);
}
END_TEST

/* Libraries exporting only ncclProfiler_v6 / _v7 are loaded (the newest symbol first, as stock);
 * v6 gets v5's events in its descriptor, v7 the user tags too. */
START_TEST(test_profiler_v6) {
  profiler_run("testv6", profiler_tagged_body);
  check_v5_events(6, true);
}
END_TEST

START_TEST(test_profiler_v7) {
  profiler_run(plugin_path("libnccl-profiler-testv7.so"), profiler_tagged_body);
  check_v5_events(7, true);
}
END_TEST

/* A v7 plugin asking for KernelPhase only gets KernelCh events (stock turns them on with it;
 * Baton emits no KernelPhase), each with its stop state; a v6 plugin asking the same gets none
 * (v6 has no KernelPhase). */
START_TEST(test_profiler_kernel_phase_mask) {
  char ask[16];
  snprintf(ask, sizeof(ask), "%d", PROF_KERNEL_PHASE);
  setenv("BATON_TEST_PROFILER_MASK", ask, 1);
  profiler_run("testv7", profiler_body);
  profiler_run("testv6", profiler_body);
  int n;
  char** lines = read_lines(&n);
  int pids7[4], pids6[4];
  ck_assert_int_eq(plugin_pids(lines, "prof init v7 nranks 2", pids7, 4), 2);
  ck_assert_int_eq(plugin_pids(lines, "prof init v6 nranks 2", pids6, 4), 2);
  for (int k = 0; k < 2; k++) {
    prof_event_t ev[256];
    int ne = parse_events(lines, pids7[k], ev, 256);
    ck_assert_int_ge(ne, 3); /* the AllReduce's channel(s), the send's and the receive's */
    ck_assert_int_eq(count_type(ev, ne, PROF_KERNEL_CH), ne);
    for (int i = 0; i < ne; i++)
      ck_assert_msg(ev[i].stops == 1 && ev[i].nstates == 1 &&
                        ev[i].states[0] == PROF_STATE_KERNEL_CH_STOP && ev[i].parent == 0,
                    "KernelCh %d: %d stops, %d states, parent %d", ev[i].id, ev[i].stops,
                    ev[i].nstates, ev[i].parent);
    ck_assert_int_eq(parse_events(lines, pids6[k], ev, 256), 0);
  }
  free_lines(lines);
}
END_TEST

START_TEST(test_profiler_v1) {
  profiler_run("testv1", profiler_body);
  int n;
  char** lines = read_lines(&n);
  int pids[4];
  ck_assert_int_eq(plugin_pids(lines, "prof init v1", pids, 4), 2);
  for (int k = 0; k < 2; k++) {
    prof_event_t ev[256];
    int ne = parse_events(lines, pids[k], ev, 256);
    int colls = 0;
    for (int i = 0; i < ne; i++) {
      const prof_event_t* e = &ev[i];
      ck_assert_msg(e->type <= PROF_PROXY_CTRL, "v1 got event type %d", e->type);
      ck_assert_int_eq(e->stops, 1);
      if (e->type != PROF_COLL) continue;
      colls++;
      /* AllReduce is 4, float32 is 7; the parent is the Group event. */
      ck_assert_msg(strstr(e->text, "func 4 count 1000 type 7 algo "), "%s", e->text);
      const prof_event_t* parent = find_event(ev, ne, e->parent);
      ck_assert_msg(parent && parent->type == PROF_GROUP, "v1 Coll parent %d", e->parent);
    }
    ck_assert_int_eq(colls, 1);
    ck_assert_int_eq(count_type(ev, ne, PROF_P2P), 2);
  }
  free_lines(lines);
}
END_TEST

static Suite* plugins_suite(void) {
  Suite* s = suite_create("plugins");
  TCase* tc = tcase_create("plugins");
  tcase_set_timeout(tc, 200);
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_add_test(tc, test_env_plugin);
  tcase_add_test(tc, test_env_plugin_v2);
  tcase_add_test(tc, test_env_plugin_missing);
  tcase_add_test(tc, test_tuner_v5);
  tcase_add_test(tc, test_tuner_v6);
  tcase_add_test(tc, test_tuner_vetoed_by_nccl_algo);
  tcase_add_test(tc, test_tuner_v2);
  tcase_add_test(tc, test_profiler_v5);
  tcase_add_test(tc, test_profiler_v6);
  tcase_add_test(tc, test_profiler_v7);
  tcase_add_test(tc, test_profiler_kernel_phase_mask);
  tcase_add_test(tc, test_profiler_v1);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(plugins_suite());
}
