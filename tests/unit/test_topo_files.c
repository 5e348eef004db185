/* Stock-format topology files from real machines (tests/data/topo, origins in its README): each
 * one loads with the facts it states (GPUs, NUMA nodes and CPUs from cpumasks, PCI placement,
 * NVSwitch and GPU links, NICs); Baton's dump of it carries every attribute stock's loader
 * requires and loads back to the same system, canonically; a cloud image's file that only places
 * GPUs drives detection; and the parser survives mutated files (a deterministic fuzz). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <check.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include "topo/xml_info.h"
#include "unit.h"

static char* data_file(const char* name) {
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "%s/tests/data/topo/%s", getenv("BATON_SOURCE_DIR"), name);
  char* text = unit_read_file(path);
  ck_assert_msg(text != NULL, "cannot read %s", path);
  return text;
}

static topo_system_t* load(const char* name) {
  char* text = data_file(name);
  topo_system_t* sys = NULL;
  ncclResult_t r = topo_xml_parse(text, name, &sys);
  ck_assert_msg(r == ncclSuccess, "%s: %d (%s)", name, (int)r, log_last_error());
  free(text);
  return sys;
}

static const topo_gpu_t* gpu(const topo_system_t* sys, const char* busid) {
  int i = topo_system_gpu(sys, topo_busid_parse(busid));
  ck_assert_msg(i >= 0, "no GPU %s", busid);
  return &sys->gpus[i];
}

/* "" when a and b describe the same system, else what differs. */
static const char* system_diff(const topo_system_t* a, const topo_system_t* b) {
  static char why[256];
  if (a->ngpus != b->ngpus) return "GPU count";
  for (int i = 0; i < a->ngpus; i++) {
    const topo_gpu_t *x = &a->gpus[i], *y = &b->gpus[i];
    snprintf(why, sizeof(why), "GPU %d", i);
    if (x->bus_id != y->bus_id || x->rank != y->rank || x->dev != y->dev || x->sm != y->sm ||
        x->numa != y->numa || x->nvswitch_links != y->nvswitch_links || strcmp(x->cpus, y->cpus) ||
        strcmp(x->pci_path, y->pci_path) || x->placed_only != y->placed_only)
      return why;
  }
  for (int k = 0; k < a->ngpus * a->ngpus; k++)
    if (a->nvlinks[k] != b->nvlinks[k]) return "NVLink counts";
  int na = a->xml ? a->xml->nnics : 0, nb = b->xml ? b->xml->nnics : 0;
  if (na != nb) return "NIC count";
  for (int i = 0; i < na; i++) {
    /* NICs may come out in another order: find each by its place and nets. */
    bool found = false;
    for (int j = 0; j < nb && !found; j++) {
      const topo_xml_nic_t *x = &a->xml->nics[i], *y = &b->xml->nics[j];
      found = x->bus_id == y->bus_id && x->numa == y->numa && !strcmp(x->pci_path, y->pci_path) &&
              !strcmp(x->nets ? x->nets : "", y->nets ? y->nets : "");
    }
    snprintf(why, sizeof(why), "NIC %d lost", i);
    if (!found) return why;
  }
  return "";
}

static void assert_same(const topo_system_t* a, const topo_system_t* b) {
  const char* why = system_diff(a, b);
  ck_assert_msg(why[0] == '\0', "systems differ: %s", why);
}

/* ---- What each file states ------------------------------------------------------------------- */
START_TEST(test_h100_nvswitch_8nic) {
  topo_system_t* sys = load("ibm-h100-8gpu-nvswitch-8nic.xml");
  ck_assert_int_eq(sys->ngpus, 8);
  for (int i = 0; i < 8; i++) {
    ck_assert_int_eq(sys->gpus[i].sm, 90);
    ck_assert_int_eq(sys->gpus[i].nvswitch_links, 18); /* 5+5+4+4 to four switches */
    ck_assert_int_eq(sys->gpus[i].rank, i);            /* ranks follow bus ids here */
    for (int j = 0; j < 8; j++)
      if (i != j) ck_assert_int_eq(sys->paths[i * 8 + j], TOPO_PATH_NVL);
  }
  const topo_gpu_t* g0 = gpu(sys, "0000:a4:00.0");
  ck_assert_int_eq(g0->numa, 0);
  ck_assert_str_eq(g0->cpus, "0-79"); /* 00000000,00000000,0000ffff,ffffffff,ffffffff */
  ck_assert_str_eq(g0->pci_path, "0000:a1:00.0");
  const topo_gpu_t* g7 = gpu(sys, "0000:ea:00.0");
  ck_assert_int_eq(g7->numa, 1);
  ck_assert_str_eq(g7->cpus, "80-159");
  ck_assert_int_eq(topo_system_nchannels(sys), 62); /* 18 NVLinks: as NV18 (ARCHITECTURE) */
  ck_assert_ptr_nonnull(sys->xml);
  ck_assert_int_eq(sys->xml->nnics, 8);
  int beside = 0; /* each NIC sits under its GPU's switch */
  for (int i = 0; i < 8; i++)
    for (int k = 0; k < 8; k++)
      beside += !strcmp(sys->xml->nics[k].pci_path, sys->gpus[i].pci_path);
  ck_assert_int_eq(beside, 8);
  topo_system_free(sys);
}
END_TEST

START_TEST(test_a100_pcie_2socket) {
  topo_system_t* sys = load("a100-pcie-2socket.xml");
  ck_assert_int_eq(sys->ngpus, 2);
  const topo_gpu_t* a = gpu(sys, "0000:69:00.0");
  const topo_gpu_t* b = gpu(sys, "0000:b1:00.0");
  ck_assert_int_eq(a->sm, 80);
  ck_assert_int_eq(a->numa, 0);
  ck_assert_int_eq(b->numa, 1);
  ck_assert_str_eq(a->cpus, "0-27,56-83"); /* "0000,000fffff,ff000000,0fffffff" */
  ck_assert_str_eq(b->cpus, "28-55,84-111");
  ck_assert_int_eq(a->nvswitch_links + b->nvswitch_links, 0);
  ck_assert_int_eq(topo_system_path(sys, a->bus_id, b->bus_id), TOPO_PATH_SYS);
  ck_assert_int_eq(sys->xml->nnics, 1);
  ck_assert_int_eq(unit_count(sys->xml->nics[0].nets, "<net "), 2); /* dual port, kept whole */
  ck_assert_ptr_nonnull(strstr(sys->xml->nics[0].nets, "gin=\"1\""));
  topo_system_free(sys);
}
END_TEST

START_TEST(test_azure_ndv5_placement) {
  topo_system_t* sys = load("azure-ndv5-topo.xml");
  ck_assert_int_eq(sys->ngpus, 8);
  for (int i = 0; i < 8; i++) ck_assert(sys->gpus[i].placed_only);
  const topo_gpu_t* g = gpu(sys, "0001:00:00.0");
  ck_assert_str_eq(g->pci_path, "ffff:ff:01.0");
  ck_assert_int_eq(g->numa, 0);
  ck_assert_str_eq(g->cpus, "48-95"); /* ffffffff,ffff0000,00000000 */
  ck_assert_int_eq(topo_system_path(sys, g->bus_id, topo_busid_parse("0002:00:00.0")),
                   TOPO_PATH_PHB);
  ck_assert_int_eq(topo_system_path(sys, g->bus_id, topo_busid_parse("0009:00:00.0")),
                   TOPO_PATH_SYS);
  ck_assert_int_eq(sys->xml->nnics, 8); /* the NICs' places, class 0x020700 */
  topo_system_free(sys);
}
END_TEST

START_TEST(test_azure_ncv4_quirks) {
  topo_system_t* sys = load("azure-ncv4-topo.xml"); /* NVLinks to itself: not used */
  ck_assert_int_eq(sys->ngpus, 4);
  for (int k = 0; k < 16; k++) ck_assert_int_eq(sys->nvlinks[k], 0);
  ck_assert_int_eq(gpu(sys, "0004:00:00.0")->numa, 3);
  ck_assert_int_eq(sys->xml->nnics, 1);
  ck_assert_int_eq(sys->xml->nics[0].bus_id, -1); /* <nic> right in its <cpu> */
  ck_assert_int_eq(sys->xml->nics[0].numa, 0);
  topo_system_free(sys);
}
END_TEST

/* ---- Dumps stock can load -------------------------------------------------------------------- */
/* Whether the tag starting at p (up to its '>') has attribute name. */
static bool tag_has(const char* p, const char* name) {
  const char* end = strchr(p, '>');
  char key[64];
  snprintf(key, sizeof(key), " %s=\"", name);
  const char* hit = strstr(p, key);
  return hit != NULL && end != NULL && hit < end;
}

/* Every element carries what stock's loader reads unconditionally (src/graph/topo.cc: cpu numaid
 * and arch, and vendor/familyid/modelid on x86; pci busid, class, link_width, link_speed; gpu
 * sm, rank, dev, gdr; nvlink count, tclass, target; net dev). */
static void assert_stock_loadable(const char* text) {
  static const struct {
    const char* tag;
    const char* attrs[6];
  } rules[] = {
      {"<cpu ", {"numaid", "arch", "vendor", "familyid", "modelid", NULL}},
      {"<pci ", {"busid", "class", "link_width", "link_speed", NULL}},
      {"<gpu ", {"sm", "rank", "dev", "gdr", NULL}},
      {"<nvlink ", {"count", "tclass", "target", NULL}},
      {"<net ", {"dev", NULL}},
  };
  ck_assert_ptr_nonnull(strstr(text, "<system version=\"1\">"));
  for (size_t r = 0; r < sizeof(rules) / sizeof(rules[0]); r++) {
    for (const char* p = strstr(text, rules[r].tag); p; p = strstr(p + 1, rules[r].tag)) {
      for (int a = 0; rules[r].attrs[a]; a++) {
        if (!strcmp(rules[r].attrs[a], "vendor") && strstr(p, "arch=\"x86_64\"") == NULL) break;
        ck_assert_msg(tag_has(p, rules[r].attrs[a]), "%.*s lacks %s", (int)(strchr(p, '>') - p), p,
                      rules[r].attrs[a]);
      }
    }
  }
  /* a gpu sits in its own pci, the way stock finds its bus id */
  for (const char* p = strstr(text, "<gpu "); p; p = strstr(p + 1, "<gpu "))
    ck_assert_msg(!tag_has(p, "busid"), "gpu with its own busid: not stock's form");
}

START_TEST(test_round_trips) {
  static const char* const files[] = {"ibm-h100-8gpu-nvswitch-8nic.xml", "a100-pcie-2socket.xml",
                                      "azure-ndv5-topo.xml", "azure-ncv4-topo.xml"};
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    topo_system_t* a = load(files[i]);
    char* text = NULL;
    ck_assert_int_eq(topo_xml_format(a, &text), ncclSuccess);
    assert_stock_loadable(text);
    topo_system_t* b = NULL;
    ck_assert_msg(topo_xml_parse(text, "dump", &b) == ncclSuccess, "%s: %s", files[i],
                  log_last_error());
    assert_same(a, b);
    char* again = NULL;
    ck_assert_int_eq(topo_xml_format(b, &again), ncclSuccess);
    ck_assert_str_eq(text, again); /* canonical */
    /* what the file said about CPUs and PCI functions went back out */
    char* orig = data_file(files[i]);
    if (strstr(orig, "modelid=\"143\"")) ck_assert_ptr_nonnull(strstr(text, "modelid=\"143\""));
    if (strstr(orig, "device=\"0x101e\"")) ck_assert_ptr_nonnull(strstr(text, "device=\"0x101e\""));
    free(orig);
    free(again);
    free(text);
    topo_system_free(a);
    topo_system_free(b);
  }
}
END_TEST

/* A cloud image's file only places the GPUs: detection fills them in and keeps the places. */
START_TEST(test_detect_with_placement_file) {
  char dir[] = "/tmp/baton-topofiles-XXXXXX", in[PATH_MAX], out[PATH_MAX];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(in, sizeof(in), "%s/topo.xml", dir);
  snprintf(out, sizeof(out), "%s/dump.xml", dir);
  char* text = data_file("azure-ndv5-topo.xml");
  unit_write_file(in, text);
  free(text);
  unit_set_param("NCCL_TOPO_FILE", in);
  unit_set_param("NCCL_TOPO_DUMP_FILE", out);
  unit_set_param("NCCL_TOPO_DUMP_FILE_RANK", "1");
  peer_info_t peers[2] = {
      {.rank = 0, .cuda_dev = 0, .bus_id = topo_busid_parse("0001:00:00.0"), .host_hash = 5},
      {.rank = 1, .cuda_dev = 1, .bus_id = topo_busid_parse("0009:00:00.0"), .host_hash = 5}};
  topo_system_t* sys = NULL;
  ck_assert_int_eq(topo_system_detect(peers, 2, 0, &sys), ncclSuccess);
  ck_assert_int_ne(access(out, F_OK), 0); /* rank 0 is not NCCL_TOPO_DUMP_FILE_RANK */
  topo_system_free(sys);
  ck_assert_int_eq(topo_system_detect(peers, 2, 1, &sys), ncclSuccess);
  ck_assert_int_eq(sys->ngpus, 2);
  const topo_gpu_t* g = gpu(sys, "0009:00:00.0");
  ck_assert(!g->placed_only);
  ck_assert_int_eq(g->rank, 1);
  ck_assert_int_eq(g->numa, 1);
  ck_assert_str_eq(g->pci_path, "ffff:ff:05.0");
  ck_assert_int_eq(topo_system_path(sys, peers[0].bus_id, peers[1].bus_id), TOPO_PATH_SYS);
  topo_system_free(sys);
  /* the dump keeps the file's NICs and CPU facts, and loads */
  char* dumped = unit_read_file(out);
  ck_assert_ptr_nonnull(dumped);
  ck_assert_int_eq(unit_count(dumped, "class=\"0x020700\""), 8);
  ck_assert_int_eq(unit_count(dumped, "<gpu "), 2);
  assert_stock_loadable(dumped);
  topo_system_t* back = NULL;
  ck_assert_int_eq(topo_xml_parse(dumped, "dump", &back), ncclSuccess);
  ck_assert_int_eq(back->ngpus, 2);
  topo_system_free(back);
  free(dumped);
  unlink(in);
  unlink(out);
  rmdir(dir);
}
END_TEST

/* ---- Fuzz -------------------------------------------------------------------------------------
 * Mutations of the real files: parse must succeed or fail with ncclInvalidUsage (never crash,
 * hang or another code), and what it accepts must format and load back to the same system. */
static uint64_t fuzz_state;
static uint32_t fuzz_next(void) {
  fuzz_state = fuzz_state * 6364136223846793005ull + 1442695040888963407ull;
  return (uint32_t)(fuzz_state >> 33);
}

static char* mutate(const char* text) {
  static const char* const tokens[] = {"<pci ",
                                       "<gpu ",
                                       "<nic>",
                                       "</pci>",
                                       "</gpu>",
                                       "/>",
                                       ">",
                                       "\"",
                                       "busid=\"0000:01:00.0\"",
                                       "<!--",
                                       "-->",
                                       "&amp;",
                                       "tclass=\"0x030200\"",
                                       "<cpu numaid=\"7\">",
                                       "</cpu>",
                                       "count=\"-1\"",
                                       "<net dev=\"1\"/>",
                                       "<?x?>",
                                       "\n"};
  size_t n = strlen(text);
  char* out = malloc(2 * n + 256);
  memcpy(out, text, n + 1);
  int edits = 1 + (int)(fuzz_next() % 4);
  for (int e = 0; e < edits; e++) {
    size_t len = strlen(out), at = len ? fuzz_next() % len : 0;
    switch (fuzz_next() % 4) {
      case 0: /* flip a byte */
        if (len) out[at] = (char)(fuzz_next() % 127 + 1);
        break;
      case 1: { /* delete a run */
        size_t k = fuzz_next() % 40;
        if (at + k > len) k = len - at;
        memmove(out + at, out + at + k, len - at - k + 1);
        break;
      }
      case 2: { /* insert a token */
        const char* t = tokens[fuzz_next() % (sizeof(tokens) / sizeof(tokens[0]))];
        size_t k = strlen(t);
        if (len + k + 1 > 2 * n + 255) break;
        memmove(out + at + k, out + at, len - at + 1);
        memcpy(out + at, t, k);
        break;
      }
      default: /* truncate */
        out[at] = '\0';
        break;
    }
  }
  return out;
}

START_TEST(test_fuzz) {
  static const char* const files[] = {"ibm-h100-8gpu-nvswitch-8nic.xml", "a100-pcie-2socket.xml",
                                      "azure-ndv5-topo.xml", "azure-ncv4-topo.xml"};
  setenv("NCCL_DEBUG", "NONE", 1); /* thousands of expected WARNs */
  log_reset();
  /* BATON_FUZZ_ITERS / BATON_FUZZ_SEED for longer runs by hand; ctest runs 1500 per file. */
  const char* iters_env = getenv("BATON_FUZZ_ITERS");
  const char* seed_env = getenv("BATON_FUZZ_SEED");
  int iters = iters_env ? atoi(iters_env) : 1500;
  fuzz_state = seed_env ? strtoull(seed_env, NULL, 10) : 20251123;
  int accepted = 0, rejected = 0;
  for (size_t f = 0; f < sizeof(files) / sizeof(files[0]); f++) {
    char* text = data_file(files[f]);
    for (int i = 0; i < iters; i++) {
      char* m = mutate(text);
      topo_system_t* a = NULL;
      ncclResult_t r = topo_xml_parse(m, "fuzz", &a);
      if (r != ncclSuccess && r != ncclInvalidUsage)
        unit_write_file("/tmp/baton_fuzz_input.xml", m);
      ck_assert_msg(r == ncclSuccess || r == ncclInvalidUsage,
                    "result %d (/tmp/baton_fuzz_input.xml)", (int)r);
      if (r == ncclSuccess) {
        accepted++;
        char* out = NULL;
        ck_assert_int_eq(topo_xml_format(a, &out), ncclSuccess);
        topo_system_t* b = NULL;
        if (topo_xml_parse(out, "fuzz-dump", &b) != ncclSuccess) {
          unit_write_file("/tmp/baton_fuzz_input.xml", m);
          unit_write_file("/tmp/baton_fuzz_output.xml", out);
          ck_abort_msg("a formatted system does not load: %s", log_last_error());
        }
        const char* why = system_diff(a, b);
        if (why[0] != '\0') { /* keep the case for whoever looks into it */
          unit_write_file("/tmp/baton_fuzz_input.xml", m);
          unit_write_file("/tmp/baton_fuzz_output.xml", out);
        }
        ck_assert_msg(why[0] == '\0', "round trip: %s (/tmp/baton_fuzz_input.xml)", why);
        topo_system_free(b);
        free(out);
      } else {
        ck_assert_ptr_null(a);
        rejected++;
      }
      topo_system_free(a);
      free(m);
    }
    free(text);
  }
  ck_assert_int_gt(accepted, iters / 15); /* the mutations exercise both outcomes */
  ck_assert_int_gt(rejected, iters / 2);
}
END_TEST

static char tmp_dir[256];
static void setup(void) {
  snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/baton_topofiles_XXXXXX");
  unit_sandbox_enter(tmp_dir);
}
static void teardown(void) {
  unit_sandbox_leave(tmp_dir);
}

static Suite* topo_files_suite(void) {
  Suite* s = suite_create("topo_files");
  TCase* tc = tcase_create("files");
  tcase_add_checked_fixture(tc, setup, teardown);
  tcase_set_timeout(tc, 240);
  tcase_add_test(tc, test_h100_nvswitch_8nic);
  tcase_add_test(tc, test_a100_pcie_2socket);
  tcase_add_test(tc, test_azure_ndv5_placement);
  tcase_add_test(tc, test_azure_ncv4_quirks);
  tcase_add_test(tc, test_round_trips);
  tcase_add_test(tc, test_detect_with_placement_file);
  tcase_add_test(tc, test_fuzz);
  suite_add_tcase(s, tc);
  return s;
}

int main(void) {
  return unit_run_suite(topo_files_suite());
}
