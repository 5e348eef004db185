/* System topology (src/topo/system.c, gpu.c, xml.c, graph.c): bus ids, path names and
 * NCCL_P2P_LEVEL, the XML file (round trip, forced topologies, errors with line numbers), path
 * classification and channel counts of an NVLink, an NVSwitch and a PCIe machine, detection from
 * peers with NCCL_TOPO_FILE / NCCL_TOPO_DUMP_FILE, sysfs parsing on a fake tree, graph log lines.
 */
#include <check.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "topo/topo_sys.h"
#include "unit.h"

/* Four Hopper GPUs on two NUMA nodes, every pair joined by 6 direct NVLinks. */
static const char* const nvl4_xml =
    "<?xml version=\"1.0\"?>\n"
    "<system version=\"1\">\n"
    "  <cpu numaid=\"0\" affinity=\"0-15\">\n"
    "    <gpu busid=\"0000:18:00.0\" sm=\"90\">\n"
    "      <nvlink target=\"0000:2a:00.0\" count=\"6\"/>\n"
    "      <nvlink target=\"0000:9a:00.0\" count=\"6\"/>\n"
    "      <nvlink target=\"0000:ab:00.0\" count=\"6\"/>\n"
    "    </gpu>\n"
    "    <gpu busid=\"0000:2a:00.0\" sm=\"90\">\n"
    "      <nvlink target=\"0000:18:00.0\" count=\"6\"/>\n"
    "      <nvlink target=\"0000:9a:00.0\" count=\"6\"/>\n"
    "      <nvlink target=\"0000:ab:00.0\" count=\"6\"/>\n"
    "    </gpu>\n"
    "  </cpu>\n"
    "  <cpu numaid=\"1\" affinity=\"16-31\">\n"
    "    <gpu busid=\"0000:9a:00.0\" sm=\"90\">\n"
    "      <nvlink target=\"0000:18:00.0\" count=\"6\"/>\n"
    "      <nvlink target=\"0000:2a:00.0\" count=\"6\"/>\n"
    "      <nvlink target=\"0000:ab:00.0\" count=\"6\"/>\n"
    "    </gpu>\n"
    "    <gpu busid=\"0000:ab:00.0\" sm=\"90\">\n"
    "      <nvlink target=\"0000:18:00.0\" count=\"6\"/>\n"
    "      <nvlink target=\"0000:2a:00.0\" count=\"6\"/>\n"
    "      <nvlink target=\"0000:9a:00.0\" count=\"6\"/>\n"
    "    </gpu>\n"
    "  </cpu>\n"
    "</system>\n";

/* Eight GPUs with 18 NVLinks each to NVSwitches (an HGX H200 board); no direct links. */
static const char* const nvs8_xml =
    "<system>\n"
    "  <cpu numaid=\"0\">\n"
    "    <gpu busid=\"0000:19:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "    <gpu busid=\"0000:3b:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "    <gpu busid=\"0000:4c:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "    <gpu busid=\"0000:5d:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "  </cpu>\n"
    "  <cpu numaid=\"1\">\n"
    "    <gpu busid=\"0000:9b:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "    <gpu busid=\"0000:bb:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "    <gpu busid=\"0000:cb:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "    <gpu busid=\"0000:db:00.0\" sm=\"90\" nvswitch=\"18\"/>\n"
    "  </cpu>\n"
    "</system>\n";

/* Eight PCIe GPUs. NUMA 0: root port 00:01.0 -> switch 01:00.0 with GPUs 03 and 04 on two
 * downstream ports and, on a third, a second switch (05:00.0) with GPU 07; GPU 08 alone on root
 * port 00:02.0. NUMA 1: two switches, GPUs 83/84 and c3/c4. */
static const char* const pcie8_xml =
    "<system version=\"1\">\n"
    "  <cpu numaid=\"0\" affinity=\"0-7\">\n"
    "    <pci busid=\"0000:00:01.0\">\n"
    "      <pci busid=\"0000:01:00.0\">\n"
    "        <pci busid=\"0000:02:00.0\"><gpu busid=\"0000:03:00.0\" sm=\"80\"/></pci>\n"
    "        <pci busid=\"0000:02:01.0\"><gpu busid=\"0000:04:00.0\" sm=\"80\"/></pci>\n"
    "        <pci busid=\"0000:02:02.0\">\n"
    "          <pci busid=\"0000:05:00.0\">\n"
    "            <pci busid=\"0000:06:00.0\"><gpu busid=\"0000:07:00.0\" sm=\"80\"/></pci>\n"
    "          </pci>\n"
    "        </pci>\n"
    "      </pci>\n"
    "    </pci>\n"
    "    <pci busid=\"0000:00:02.0\"><gpu busid=\"0000:08:00.0\" sm=\"80\"/></pci>\n"
    "  </cpu>\n"
    "  <cpu numaid=\"1\" affinity=\"8-15\">\n"
    "    <pci busid=\"0000:80:01.0\"><pci busid=\"0000:81:00.0\">\n"
    "      <pci busid=\"0000:82:00.0\"><gpu busid=\"0000:83:00.0\" sm=\"80\"/></pci>\n"
    "      <pci busid=\"0000:82:01.0\"><gpu busid=\"0000:84:00.0\" sm=\"80\"/></pci>\n"
    "    </pci></pci>\n"
    "    <pci busid=\"0000:c0:01.0\"><pci busid=\"0000:c1:00.0\">\n"
    "      <pci busid=\"0000:c2:00.0\"><gpu busid=\"0000:c3:00.0\" sm=\"80\"/></pci>\n"
    "      <pci busid=\"0000:c2:01.0\"><gpu busid=\"0000:c4:00.0\" sm=\"80\"/></pci>\n"
    "    </pci></pci>\n"
    "  </cpu>\n"
    "</system>\n";

static topo_system_t* parse_ok(const char* text, const char* name) {
  topo_system_t* sys = NULL;
  ncclResult_t r = topo_xml_parse(text, name, &sys);
  ck_assert_msg(r == ncclSuccess, "%s: %d (%s)", name, (int)r, log_last_error());
  ck_assert_ptr_nonnull(sys);
  return sys;
}

static int64_t bid(const char* text) {
  int64_t v = topo_busid_parse(text);
  ck_assert_msg(v >= 0, "bad test bus id %s", text);
  return v;
}

static topo_path_t path_of(const topo_system_t* sys, const char* a, const char* b) {
  return topo_system_path(sys, bid(a), bid(b));
}

/* ---- Bus ids and path names -------------------------------------------------------------------
 */
START_TEST(test_busid) {
  char buf[TOPO_BUSID_LEN];
  ck_assert_int_eq(topo_busid_parse("0000:3b:00.0"), 0x3b000);
  ck_assert_int_eq(topo_busid_parse("00000000:3B:00.0"), 0x3b000); /* NVML's form */
  ck_assert_int_eq(topo_busid_parse("0001:c1:1f.7"), 0x1c11f7);
  const int64_t ids[] = {0x3b000, 0x1c11f7, 0, 0xffff0ff0f, 0x18000};
  for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
    topo_busid_format(ids[i], buf);
    ck_assert_int_eq(topo_busid_parse(buf), ids[i]);
  }
  topo_busid_format(0x3b000, buf);
  ck_assert_str_eq(buf, "0000:3b:00.0");
  const char* bad[] = {"",           "3b:00.0",      "0000:3b:00", "0000:3b:00.0x", "0000:100:00.0",
                       "zz:3b:00.0", "0000:3b:00.10"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
    ck_assert_msg(topo_busid_parse(bad[i]) == -1, "'%s' parsed", bad[i]);
  ck_assert_int_eq(topo_busid_parse(NULL), -1);
}
END_TEST

START_TEST(test_path_parse_and_level) {
  topo_path_t p;
  for (int i = 0; i < TOPO_PATH_COUNT; i++) {
    ck_assert_int_eq(topo_path_parse(topo_path_names[i], &p), ncclSuccess);
    ck_assert_int_eq(p, i);
  }
  ck_assert_int_eq(topo_path_parse("nvl", &p), ncclSuccess);
  ck_assert_int_eq(p, TOPO_PATH_NVL);
  const struct {
    const char* text;
    topo_path_t want;
  } legacy[] = {{"0", TOPO_PATH_LOC}, {"1", TOPO_PATH_PIX}, {"2", TOPO_PATH_PXB},
                {"3", TOPO_PATH_PHB}, {"4", TOPO_PATH_SYS}, {"7", TOPO_PATH_SYS}};
  for (size_t i = 0; i < sizeof(legacy) / sizeof(legacy[0]); i++) {
    ck_assert_int_eq(topo_path_parse(legacy[i].text, &p), ncclSuccess);
    ck_assert_int_eq(p, legacy[i].want);
  }
  p = TOPO_PATH_NVB;
  ck_assert_int_eq(topo_path_parse("", &p), ncclInvalidUsage);
  ck_assert_int_eq(topo_path_parse("-1", &p), ncclInvalidUsage);
  ck_assert_int_eq(topo_path_parse("NVLINK", &p), ncclInvalidUsage);
  ck_assert_int_eq(topo_path_parse("2x", &p), ncclInvalidUsage);
  ck_assert_int_eq(p, TOPO_PATH_NVB); /* untouched on failure */

  unit_set_param("NCCL_P2P_LEVEL", NULL);
  ck_assert_int_eq(topo_p2p_level(), TOPO_PATH_PXB);
  unit_set_param("NCCL_P2P_LEVEL", "NVL");
  ck_assert_int_eq(topo_p2p_level(), TOPO_PATH_NVL);
  unit_set_param("NCCL_P2P_LEVEL", "3");
  ck_assert_int_eq(topo_p2p_level(), TOPO_PATH_PHB);
  log_clear_last_error();
  unit_set_param("NCCL_P2P_LEVEL", "bogus");
  ck_assert_int_eq(topo_p2p_level(), TOPO_PATH_PXB);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_P2P_LEVEL=bogus"));
}
END_TEST

/* ---- Forced topologies --------------------------------------------------------------------------
 */
START_TEST(test_nvlink4) {
  unit_set_param("NCCL_MIN_NCHANNELS", NULL);
  unit_set_param("NCCL_MAX_NCHANNELS", NULL);
  topo_system_t* sys = parse_ok(nvl4_xml, "nvl4");
  ck_assert_int_eq(sys->ngpus, 4);
  for (int i = 0; i < 4; i++) {
    for (int j = 0; j < 4; j++) {
      size_t k = (size_t)i * 4 + j;
      ck_assert_int_eq(sys->paths[k], i == j ? TOPO_PATH_LOC : TOPO_PATH_NVL);
      if (i != j) {
        ck_assert_int_eq(sys->nvlinks[k], 6);
        ck_assert_double_eq_tol(sys->bw[k], 6 * 20.6, 1e-9);
      }
    }
  }
  /* NVLink wins over the NUMA split below it */
  ck_assert_int_eq(path_of(sys, "0000:18:00.0", "0000:ab:00.0"), TOPO_PATH_NVL);
  ck_assert_int_eq(sys->gpus[0].numa, 0);
  ck_assert_str_eq(sys->gpus[3].cpus, "16-31");
  /* 123.6 GB/s at 6 GB/s a channel: 21, rounded up to even */
  ck_assert_int_eq(topo_system_nchannels(sys), 22);
  unit_set_param("NCCL_MAX_NCHANNELS", "4");
  ck_assert_int_eq(topo_system_nchannels(sys), 4);
  topo_system_free(sys);
}
END_TEST

START_TEST(test_nvswitch8) {
  unit_set_param("NCCL_MIN_NCHANNELS", NULL);
  unit_set_param("NCCL_MAX_NCHANNELS", NULL);
  topo_system_t* sys = parse_ok(nvs8_xml, "nvs8");
  ck_assert_int_eq(sys->ngpus, 8);
  for (int i = 0; i < 8; i++)
    for (int j = 0; j < 8; j++) {
      ck_assert_int_eq(sys->paths[i * 8 + j], i == j ? TOPO_PATH_LOC : TOPO_PATH_NVL);
      ck_assert_int_eq(sys->nvlinks[i * 8 + j], 0);
    }
  /* 18 links x 20.6 GB/s = 370.8 GB/s at 6 GB/s a channel: 62 */
  ck_assert_int_eq(topo_system_nchannels(sys), 62);
  unit_set_param("NCCL_MAX_NCHANNELS", "16");
  ck_assert_int_eq(topo_system_nchannels(sys), 16);
  topo_system_free(sys);
}
END_TEST

START_TEST(test_pcie8) {
  unit_set_param("NCCL_MIN_NCHANNELS", NULL);
  unit_set_param("NCCL_MAX_NCHANNELS", NULL);
  topo_system_t* sys = parse_ok(pcie8_xml, "pcie8");
  ck_assert_int_eq(sys->ngpus, 8);
  const struct {
    const char *a, *b;
    topo_path_t want;
  } cases[] = {
      {"0000:03:00.0", "0000:04:00.0", TOPO_PATH_PIX}, /* one switch */
      {"0000:83:00.0", "0000:84:00.0", TOPO_PATH_PIX},
      {"0000:03:00.0", "0000:07:00.0", TOPO_PATH_PXB}, /* two switches, one root port */
      {"0000:04:00.0", "0000:07:00.0", TOPO_PATH_PXB},
      {"0000:03:00.0", "0000:08:00.0", TOPO_PATH_PHB}, /* two root ports of one CPU */
      {"0000:83:00.0", "0000:c4:00.0", TOPO_PATH_PHB},
      {"0000:03:00.0", "0000:83:00.0", TOPO_PATH_SYS}, /* two NUMA nodes */
      {"0000:08:00.0", "0000:c3:00.0", TOPO_PATH_SYS},
      {"0000:07:00.0", "0000:07:00.0", TOPO_PATH_LOC},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ck_assert_msg(path_of(sys, cases[i].a, cases[i].b) == cases[i].want, "%s-%s: %s, want %s",
                  cases[i].a, cases[i].b, topo_path_names[path_of(sys, cases[i].a, cases[i].b)],
                  topo_path_names[cases[i].want]);
    ck_assert_int_eq(path_of(sys, cases[i].b, cases[i].a), cases[i].want); /* symmetric */
  }
  int g = topo_system_gpu(sys, bid("0000:07:00.0"));
  ck_assert_int_ge(g, 0);
  ck_assert_str_eq(sys->gpus[g].pci_path,
                   "0000:00:01.0/0000:01:00.0/0000:02:02.0/0000:05:00.0/0000:06:00.0");
  /* unknown GPUs are as far as can be */
  ck_assert_int_eq(path_of(sys, "0000:03:00.0", "0000:ee:00.0"), TOPO_PATH_SYS);
  ck_assert_int_eq(topo_system_path(NULL, bid("0000:03:00.0"), bid("0000:04:00.0")), TOPO_PATH_SYS);
  /* the slowest pair crosses CPUs (10 GB/s): 2 channels */
  ck_assert_int_eq(topo_system_nchannels(sys), 2);
  unit_set_param("NCCL_MIN_NCHANNELS", "6");
  ck_assert_int_eq(topo_system_nchannels(sys), 6);
  topo_system_free(sys);
  /* one GPU: no opinion */
  sys = parse_ok("<system><gpu busid=\"0000:01:00.0\"/></system>", "one");
  ck_assert_int_eq(topo_system_nchannels(sys), 0);
  topo_system_free(sys);
}
END_TEST

/* ---- Round trip
 * ----------------------------------------------------------------------------------- */
static void assert_same_system(const topo_system_t* a, const topo_system_t* b) {
  ck_assert_int_eq(a->ngpus, b->ngpus);
  size_t n = (size_t)a->ngpus;
  for (size_t i = 0; i < n; i++) {
    const topo_gpu_t *x = &a->gpus[i], *y = &b->gpus[i];
    ck_assert_int_eq(x->bus_id, y->bus_id);
    ck_assert_int_eq(x->rank, y->rank);
    ck_assert_int_eq(x->dev, y->dev);
    ck_assert_int_eq(x->sm, y->sm);
    ck_assert_int_eq(x->numa, y->numa);
    ck_assert_int_eq(x->nvswitch_links, y->nvswitch_links);
    ck_assert_str_eq(x->cpus, y->cpus);
    ck_assert_str_eq(x->pci_path, y->pci_path);
  }
  ck_assert_mem_eq(a->nvlinks, b->nvlinks, n * n * sizeof(int));
  ck_assert_mem_eq(a->paths, b->paths, n * n * sizeof(topo_path_t));
  ck_assert_mem_eq(a->bw, b->bw, n * n * sizeof(double));
}

START_TEST(test_round_trip) {
  /* a mix: nested PCI, GPUs without PCI path or NUMA node, two CPU lists on one NUMA node,
   * asymmetric link counts, NVSwitch links, ranks and devices */
  static const char* const mixed =
      "<system>\n"
      "  <gpu busid=\"0000:e1:00.0\" rank=\"5\" dev=\"1\"/>\n"
      "  <cpu numaid=\"0\" affinity=\"0-3\">\n"
      "    <pci busid=\"0000:00:01.0\"><pci busid=\"0000:01:00.0\">\n"
      "      <gpu busid=\"0000:02:00.0\" rank=\"0\" dev=\"0\" sm=\"90\" nvswitch=\"4\">\n"
      "        <nvlink target=\"0000:03:00.0\" count=\"2\"/>\n"
      "      </gpu>\n"
      "      <pci busid=\"0000:01:01.0\"><gpu busid=\"0000:03:00.0\" rank=\"1\" sm=\"90\"/></pci>\n"
      "    </pci></pci>\n"
      "    <gpu busid=\"0000:04:00.0\" nvswitch=\"4\" sm=\"100\"/>\n"
      "  </cpu>\n"
      "  <cpu numaid=\"0\" affinity=\"4-7\"><gpu busid=\"0000:05:00.0\"/></cpu>\n"
      "  <cpu><gpu busid=\"0001:06:00.0\"/></cpu>\n"
      "</system>\n";
  const char* const inputs[] = {nvl4_xml, nvs8_xml, pcie8_xml, mixed};
  for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
    topo_system_t* a = parse_ok(inputs[i], "input");
    char* text = NULL;
    ck_assert_int_eq(topo_xml_format(a, &text), ncclSuccess);
    topo_system_t* b = parse_ok(text, "formatted");
    assert_same_system(a, b);
    char* again = NULL;
    ck_assert_int_eq(topo_xml_format(b, &again), ncclSuccess);
    ck_assert_str_eq(text, again); /* the format is canonical */
    free(again);
    free(text);
    topo_system_free(a);
    topo_system_free(b);
  }
  /* files */
  char dir[] = "/tmp/baton-topo-XXXXXX", path[PATH_MAX];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(path, sizeof(path), "%s/t.xml", dir);
  topo_system_t* a = parse_ok(pcie8_xml, "pcie8");
  topo_system_t* b = NULL;
  ck_assert_int_eq(topo_xml_dump(a, path), ncclSuccess);
  ck_assert_int_eq(topo_xml_load(path, &b), ncclSuccess);
  assert_same_system(a, b);
  topo_system_free(a);
  topo_system_free(b);
  unlink(path);
  b = NULL;
  ck_assert_int_eq(topo_xml_load(path, &b), ncclInvalidUsage);
  ck_assert_ptr_null(b);
  ck_assert_ptr_nonnull(strstr(log_last_error(), path));
  rmdir(dir);
}
END_TEST

/* ---- Errors
 * --------------------------------------------------------------------------------------- */
START_TEST(test_parse_errors) {
  const struct {
    const char* text;
    const char* where;
    const char* what;
  } cases[] = {
      {"<system>\n<cpu>\n</system>\n", "bad:3:", "closes <cpu> opened at line 2"},
      {"<system>\n  <cpu>\n    <gpu busid=\"0000:3g:00.0\"/>\n", "bad:3:", "PCI bus id"},
      {"<system>\n\n<net busid=\"0000:01:00.0\"/>\n</system>", "bad:3:", "unknown element <net>"},
      {"<system>\n<cpu numa=\"0\"/>\n</system>", "bad:2:", "unknown attribute 'numa'"},
      {"<system>\n<cpu numaid=\"x\"/>\n</system>", "bad:2:", "expected an integer"},
      {"<system>\n<gpu busid=\"0000:01:00.0\">\n</system>", "bad:3:", "closes <gpu>"},
      {"<system>\n<gpu busid=\"0000:01:00.0\"/>\n<gpu busid=\"0000:01:00.0\"/>\n</system>",
       "bad:3:", "listed twice"},
      {"<system>\n<gpu busid=\"0000:01:00.0\">\n<nvlink "
       "target=\"0000:02:00.0\"/>\n</gpu>\n</system>",
       "bad:3:", "no <gpu> has that bus id"},
      {"<system>\n<gpu busid=\"0000:01:00.0\">\n<nvlink target=\"0000:01:00.0\"/></gpu></system>",
       "bad:3:", "to itself"},
      {"<system>\n<nvlink target=\"0000:01:00.0\"/>\n</system>", "bad:2:", "must be inside <gpu>"},
      {"<system>\n<!-- open\n\n", "bad:2:", "unterminated comment"},
      {"<system>\nhello\n</system>", "bad:2:", "unexpected text"},
      {"\n\n", "bad:3:", "no <system> element"},
      {"<system/>\n<system/>\n", "bad:2:", "one <system> root"},
      {"<system version=\"2\"/>", "bad:1:", "version 1"},
      {"<system>\n<cpu\n affinity=\"0-3\n\n", "bad:3:", "unterminated attribute value"},
      {"<system>\n<gpu busid=\"0000:01:00.0\" busid=\"0000:02:00.0\"/>\n</system>",
       "bad:2:", "repeats attribute"},
      {"<system>\n<cpu affinity=\"a&b\"/>\n</system>", "bad:2:", "unknown entity"},
      {"<system>\n</cpu>\n", "bad:2:", "</cpu> closes <system>"},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    topo_system_t* sys = NULL;
    log_clear_last_error();
    ncclResult_t r = topo_xml_parse(cases[i].text, "bad", &sys);
    ck_assert_msg(r == ncclInvalidUsage, "case %zu: result %d", i, (int)r);
    ck_assert_ptr_null(sys);
    const char* err = log_last_error();
    ck_assert_msg(strstr(err, cases[i].where) != NULL && strstr(err, cases[i].what) != NULL,
                  "case %zu: WARN '%s' lacks '%s' or '%s'", i, err, cases[i].where, cases[i].what);
  }
  /* entities and comments are fine */
  topo_system_t* sys = parse_ok(
      "<!-- c --><system><cpu affinity=\"0&amp;1\"><gpu busid='0000:01:00.0'/></cpu></system>",
      "ok");
  ck_assert_str_eq(sys->gpus[0].cpus, "0&1");
  topo_system_free(sys);
}
END_TEST

/* ---- Detection from peers
 * ---------------------------------------------------------------------------- */
static peer_info_t peer(int rank, int dev, const char* busid, uint64_t host) {
  return (peer_info_t){.rank = rank,
                       .cuda_dev = dev,
                       .bus_id = busid ? bid(busid) : -1,
                       .host_hash = host,
                       .pid_hash = 100 + (uint64_t)rank,
                       .pid = 1000 + rank};
}

START_TEST(test_detect_with_file) {
  char dir[] = "/tmp/baton-topo-XXXXXX", in[PATH_MAX], out[PATH_MAX];
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(in, sizeof(in), "%s/in.xml", dir);
  snprintf(out, sizeof(out), "%s/out.xml", dir);
  FILE* f = fopen(in, "w");
  ck_assert_ptr_nonnull(f);
  fputs(nvl4_xml, f);
  fclose(f);
  unit_set_param("NCCL_TOPO_FILE", in);
  unit_set_param("NCCL_TOPO_DUMP_FILE", out);
  /* ranks 0-2 on GPUs of the file, rank 3 on another host, rank 4 without GPU, rank 5 sharing
   * rank 1's GPU, rank 6 on a GPU the file does not list (detected: this machine has no such
   * device, so nothing is known about it) */
  peer_info_t peers[7] = {peer(0, 2, "0000:9a:00.0", 7), peer(1, 0, "0000:18:00.0", 7),
                          peer(2, 1, "0000:2a:00.0", 7), peer(3, 0, "0000:ab:00.0", 8),
                          peer(4, -1, NULL, 7),          peer(5, 0, "0000:18:00.0", 7),
                          peer(6, 3, "00ff:ee:1f.7", 7)};
  topo_system_t* sys = NULL;
  ck_assert_int_eq(topo_system_detect(peers, 7, 0, &sys), ncclSuccess);
  ck_assert_int_eq(sys->ngpus, 4);
  int g18 = topo_system_gpu(sys, bid("0000:18:00.0")),
      g9a = topo_system_gpu(sys, bid("0000:9a:00.0"));
  int gab = topo_system_gpu(sys, bid("0000:ab:00.0")),
      gee = topo_system_gpu(sys, bid("00ff:ee:1f.7"));
  ck_assert_int_eq(gab, -1); /* another host's */
  ck_assert_int_ge(g18, 0);
  ck_assert_int_ge(gee, 0);
  ck_assert_int_eq(sys->gpus[g18].rank, 1); /* lowest rank on it; dev from the peer, not file */
  ck_assert_int_eq(sys->gpus[g18].dev, 0);
  ck_assert_int_eq(sys->gpus[g9a].rank, 0);
  ck_assert_int_eq(sys->gpus[g9a].dev, 2);
  ck_assert_int_eq(sys->gpus[g9a].numa, 1);
  ck_assert_int_eq(sys->nvlinks[g18 * 4 + g9a], 6);
  ck_assert_int_eq(path_of(sys, "0000:18:00.0", "0000:2a:00.0"), TOPO_PATH_NVL);
  ck_assert_int_eq(sys->gpus[gee].numa, -1);
  ck_assert_str_eq(sys->gpus[gee].pci_path, "");
  ck_assert_int_eq(path_of(sys, "0000:18:00.0", "00ff:ee:1f.7"), TOPO_PATH_SYS);
  /* rank 0 dumped it */
  topo_system_t* dumped = NULL;
  ck_assert_int_eq(topo_xml_load(out, &dumped), ncclSuccess);
  assert_same_system(sys, dumped);
  topo_system_free(dumped);
  topo_system_free(sys);
  /* another rank does not dump */
  unlink(out);
  ck_assert_int_eq(topo_system_detect(peers, 7, 1, &sys), ncclSuccess);
  ck_assert_int_ne(access(out, F_OK), 0);
  topo_system_free(sys);
  /* a broken file fails detection */
  f = fopen(in, "w");
  fputs("<system>\n<gpu>\n", f);
  fclose(f);
  sys = NULL;
  ck_assert_int_eq(topo_system_detect(peers, 7, 0, &sys), ncclInvalidUsage);
  ck_assert_ptr_null(sys);
  unlink(in);
  rmdir(dir);
}
END_TEST

START_TEST(test_sysfs_fake_tree) {
  char root[] = "/tmp/baton-sysfs-XXXXXX", p[2 * PATH_MAX], dev[PATH_MAX];
  ck_assert_ptr_nonnull(mkdtemp(root));
  const char* const dirs[] = {"devices",
                              "devices/pci0000:15",
                              "devices/pci0000:15/0000:15:01.0",
                              "devices/pci0000:15/0000:15:01.0/0000:16:00.0",
                              "devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:18:00.0",
                              "bus",
                              "bus/pci",
                              "bus/pci/devices"};
  for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
    snprintf(p, sizeof(p), "%s/%s", root, dirs[i]);
    ck_assert_int_eq(mkdir(p, 0700), 0);
  }
  snprintf(dev, sizeof(dev), "%s/%s", root, dirs[4]);
  snprintf(p, sizeof(p), "%s/numa_node", dev);
  unit_write_file(p, "1\n");
  snprintf(p, sizeof(p), "%s/local_cpulist", dev);
  unit_write_file(p, "8-15,24-31\n");
  snprintf(p, sizeof(p), "%s/bus/pci/devices/0000:18:00.0", root);
  ck_assert_int_eq(symlink("../../../devices/pci0000:15/0000:15:01.0/0000:16:00.0/0000:18:00.0", p),
                   0);
  topo_gpu_t g = {.bus_id = bid("0000:18:00.0"), .numa = -1};
  topo_sysfs_gpu(root, &g);
  ck_assert_int_eq(g.numa, 1);
  ck_assert_str_eq(g.cpus, "8-15,24-31");
  ck_assert_str_eq(g.pci_path, "0000:15:01.0/0000:16:00.0");
  /* a device sysfs does not know keeps its unknowns */
  topo_gpu_t h = {.bus_id = bid("0000:19:00.0"), .numa = -1};
  topo_sysfs_gpu(root, &h);
  ck_assert_int_eq(h.numa, -1);
  ck_assert_str_eq(h.cpus, "");
  ck_assert_str_eq(h.pci_path, "");
  char cmd[PATH_MAX + 16];
  snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- Graph lines
 * ---------------------------------------------------------------------------------- */
START_TEST(test_graph_lines) {
  char buf[256];
  const int ring[4] = {0, 1, 2, 3};
  ck_assert_int_eq(topo_format_ring(buf, sizeof(buf), 1, 24, ring, 4), 23);
  ck_assert_str_eq(buf, "Channel 01/24 : 0 1 2 3");
  ck_assert_int_eq(topo_format_ring(buf, 10, 1, 24, ring, 4), 9); /* truncated, terminated */
  ck_assert_str_eq(buf, "Channel 0");
  const int up[2] = {-1, 1};
  const int down[2 * TOPO_TREE_MAX_CHILDREN] = {1, -1, -1, -1, -1, -1};
  topo_format_trees(buf, sizeof(buf), 0, 2, up, down);
  ck_assert_str_eq(buf, "Trees [0] 1/-1/-1->0->-1 [1] -1/-1/-1->0->1");
  /* the logger takes the same arrays (and must not crash on many channels) */
  int rings[64 * 4], ups[64], downs[64 * TOPO_TREE_MAX_CHILDREN];
  for (int c = 0; c < 64; c++) {
    topo_ring_order(4, NULL, c, true, rings + c * 4);
    topo_dbtree(4, 2, c % 2, &ups[c], downs + c * TOPO_TREE_MAX_CHILDREN);
  }
  topo_log_graph(2, 4, 64, rings, ups, downs);
}
END_TEST

static Suite* topo_suite(void) {
  Suite* s = suite_create("topo_xml");
  TCase* basics = tcase_create("basics");
  tcase_add_test(basics, test_busid);
  tcase_add_test(basics, test_path_parse_and_level);
  tcase_add_test(basics, test_graph_lines);
  suite_add_tcase(s, basics);
  TCase* forced = tcase_create("forced");
  tcase_add_test(forced, test_nvlink4);
  tcase_add_test(forced, test_nvswitch8);
  tcase_add_test(forced, test_pcie8);
  suite_add_tcase(s, forced);
  TCase* xml = tcase_create("xml");
  tcase_add_test(xml, test_round_trip);
  tcase_add_test(xml, test_parse_errors);
  suite_add_tcase(s, xml);
  TCase* detect = tcase_create("detect");
  tcase_add_test(detect, test_detect_with_file);
  tcase_add_test(detect, test_sysfs_fake_tree);
  suite_add_tcase(s, detect);
  return s;
}

int main(void) {
  return unit_run_suite(topo_suite());
}
