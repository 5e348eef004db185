/* Bad arguments to every lifecycle entry point: each returns stock's code, its WARN names the
 * argument (ncclGetLastError(comm), or (NULL) without a comm), outputs are left alone, and the
 * communicator keeps working. Also the config rules (config_parse). */
#include <check.h>
#include <stddef.h>
#include <stdlib.h>

#include "core/core.h"
#include "fork_ranks.h"
#include "unit.h"

/* The call's result, and the text ncclGetLastError(comm) gives right after it. */
#define EXPECT_ERR(call, code, comm, needle)                                                 \
  do {                                                                                       \
    log_clear_last_error();                                                                  \
    ncclResult_t r_ = (call);                                                                \
    ck_assert_msg(r_ == (code), "%s returned %d, expected %d", #call, (int)r_, (int)(code)); \
    const char* e_ = ncclGetLastError(comm);                                                 \
    ck_assert_msg(strstr(e_, (needle)) != NULL, "%s: last error '%s' lacks '%s'", #call, e_, \
                  (needle));                                                                 \
  } while (0)

static void check_still_works(ncclComm_t comm) {
  int n = -1;
  ck_assert_int_eq(ncclCommCount(comm, &n), ncclSuccess);
  ck_assert_int_eq(n, comm->nranks);
  ncclComm_t child = NULL;
  ck_assert_int_eq(ncclCommSplit(comm, 0, 0, &child, NULL), ncclSuccess);
  ck_assert_ptr_nonnull(child);
  ck_assert_int_eq(ncclCommCount(child, &n), ncclSuccess);
  ck_assert_int_eq(n, comm->nranks);
  ck_assert_int_eq(ncclCommDestroy(child), ncclSuccess);
}

#define SENTINEL ((ncclComm_t)(uintptr_t)0x5eed)

START_TEST(test_init_args) {
  ncclUniqueId id;
  ncclComm_t comm = SENTINEL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  EXPECT_ERR(ncclGetUniqueId(NULL), ncclInvalidArgument, NULL, "uniqueId");
  EXPECT_ERR(ncclCommInitRank(NULL, 1, id, 0), ncclInvalidArgument, NULL, "newcomm");
  EXPECT_ERR(ncclCommInitRank(&comm, 0, id, 0), ncclInvalidArgument, NULL, "nranks 0");
  EXPECT_ERR(ncclCommInitRank(&comm, -3, id, 0), ncclInvalidArgument, NULL, "nranks -3");
  EXPECT_ERR(ncclCommInitRank(&comm, 2, id, 2), ncclInvalidArgument, NULL, "rank 2");
  EXPECT_ERR(ncclCommInitRank(&comm, 2, id, -1), ncclInvalidArgument, NULL, "rank -1");
  EXPECT_ERR(ncclCommInitRankConfig(&comm, 2, id, 5, NULL), ncclInvalidArgument, NULL,
             "ncclCommInitRankConfig");
  EXPECT_ERR(ncclCommInitRankScalable(&comm, 2, 0, 1, NULL, NULL), ncclInvalidArgument, NULL,
             "commIds");
  ncclUniqueId ids[3] = {id, id, id};
  EXPECT_ERR(ncclCommInitRankScalable(&comm, 2, 0, 0, ids, NULL), ncclInvalidArgument, NULL,
             "unique ids 0");
  EXPECT_ERR(ncclCommInitRankScalable(&comm, 2, 0, 3, ids, NULL), ncclInvalidArgument, NULL,
             "unique ids 3");
  ck_assert_ptr_eq(comm, SENTINEL); /* never written on failure */
}
END_TEST

START_TEST(test_init_all_args) {
  ncclComm_t comms[2] = {SENTINEL, SENTINEL};
  EXPECT_ERR(ncclCommInitAll(NULL, 2, NULL), ncclInvalidArgument, NULL, "comms");
  EXPECT_ERR(ncclCommInitAll(comms, -1, NULL), ncclInvalidArgument, NULL, "ndev -1");
  int negative[2] = {0, -1};
  EXPECT_ERR(ncclCommInitAll(comms, 2, negative), ncclInvalidArgument, NULL, "devlist[1]");
  int twice[2] = {0, 0};
  EXPECT_ERR(ncclCommInitAll(comms, 2, twice), ncclInvalidUsage, NULL, "twice");
  ck_assert_ptr_eq(comms[0], SENTINEL);
  ck_assert_int_eq(ncclCommInitAll(comms, 0, NULL), ncclSuccess);
}
END_TEST

/* ---- Config ------------------------------------------------------------------------------------
 */
typedef struct bad_field {
  const char* name;
  size_t offset;
  int value;
} bad_field_t;

#define BAD(field, v) \
  { #field, offsetof(ncclConfig_t, field), (v) }
static const bad_field_t bad_fields[] = {
    BAD(blocking, 2),
    BAD(blocking, -1),
    BAD(cgaClusterSize, -1),
    BAD(minCTAs, 0),
    BAD(maxCTAs, -4),
    BAD(splitShare, 2),
    BAD(collnetEnable, 3),
    BAD(CTAPolicy, 3),
    BAD(CTAPolicy, -2),
    BAD(shrinkShare, 7),
    BAD(nvlsCTAs, 0),
    BAD(nChannelsPerNetPeer, 65),
    BAD(nChannelsPerNetPeer, 0),
    BAD(nvlinkCentricSched, 2),
    BAD(numRmaCtx, 0), /* 2.29-2.32 fields */
    BAD(numRmaSig, -1),
    BAD(rmaEagerInit, 2),
    BAD(hostCftMode, 4),
    BAD(hostCftMode, 0),
};

START_TEST(test_config_bad_fields) {
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  for (size_t i = 0; i < sizeof(bad_fields) / sizeof(bad_fields[0]); i++) {
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    *(int*)((char*)&cfg + bad_fields[i].offset) = bad_fields[i].value;
    ncclComm_t comm = SENTINEL;
    EXPECT_ERR(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclInvalidArgument, NULL,
               bad_fields[i].name);
    ck_assert_ptr_eq(comm, SENTINEL);
  }
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  ncclComm_t comm = SENTINEL;
  cfg.minCTAs = 8;
  cfg.maxCTAs = 4;
  EXPECT_ERR(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclInvalidArgument, NULL,
             "minCTAs 8 is larger than maxCTAs 4");
  /* numRmaCtx x numRmaSig bootstrap tag pairs: at most 32768 (a product that overflowed int
   * used to be accepted, its tags wrapping into other layers'). */
  cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
  cfg.numRmaCtx = 65536;
  cfg.numRmaSig = 65536;
  EXPECT_ERR(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclInvalidArgument, NULL,
             "numRmaCtx 65536 x numRmaSig 65536 is more than 32768 signals");
  cfg.numRmaCtx = NCCL_CONFIG_UNDEF_INT;
  cfg.numRmaSig = 32769;
  EXPECT_ERR(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclInvalidArgument, NULL,
             "numRmaCtx 1 x numRmaSig 32769");
  ck_assert_ptr_eq(comm, SENTINEL);
  cfg.numRmaCtx = 128; /* 128 x 256 = 32768: the most there may be */
  cfg.numRmaSig = 256;
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  comm = SENTINEL;
  ncclConfig_t bad_magic = NCCL_CONFIG_INITIALIZER;
  bad_magic.magic = 0x12345678;
  EXPECT_ERR(ncclCommInitRankConfig(&comm, 1, id, 0, &bad_magic), ncclInvalidArgument, NULL,
             "magic");
  ncclConfig_t bad_size = NCCL_CONFIG_INITIALIZER;
  bad_size.size = 4;
  EXPECT_ERR(ncclCommInitRankConfig(&comm, 1, id, 0, &bad_size), ncclInvalidArgument, NULL,
             "size 4");
  /* A config from a release newer than the 2.32 layout this library knows: refused. */
  ncclConfig_t newer = NCCL_CONFIG_INITIALIZER;
  newer.version = NCCL_VERSION(2, 33, 0);
  EXPECT_ERR(ncclCommInitRankConfig(&comm, 1, id, 0, &newer), ncclInvalidArgument, NULL,
             "version 23300 comes from a newer nccl.h");
  ck_assert_ptr_eq(comm, SENTINEL);
}
END_TEST

START_TEST(test_config_defaults_and_versions) {
  ncclConfig_t out;
  ck_assert_int_eq(config_parse(NULL, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.blocking, 1);
  ck_assert_int_eq(out.cgaClusterSize, 4);
  ck_assert_int_eq(out.minCTAs, 1);
  ck_assert_int_eq(out.maxCTAs, 64);
  ck_assert_int_eq(out.splitShare, 0);
  ck_assert_int_eq(out.CTAPolicy, NCCL_CTA_POLICY_DEFAULT);
  ck_assert_int_eq(out.trafficClass, NCCL_CONFIG_UNDEF_INT);
  ck_assert_int_eq(out.nvlsCTAs, NCCL_CONFIG_UNDEF_INT);
  ck_assert_ptr_null(out.commName);
  ck_assert_uint_eq(out.magic, 0xcafebeef);

  /* Set fields are kept. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 0;
  cfg.minCTAs = 2;
  cfg.maxCTAs = 8;
  cfg.commName = "trainer";
  ck_assert_int_eq(config_parse(&cfg, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.blocking, 0);
  ck_assert_int_eq(out.minCTAs, 2);
  ck_assert_int_eq(out.maxCTAs, 8);
  ck_assert_str_eq(out.commName, "trainer");

  /* More CTAs than there can be channels: the most there are, as stock (not an error). */
  cfg.minCTAs = 100;
  cfg.maxCTAs = 1000;
  ck_assert_int_eq(config_parse(&cfg, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.minCTAs, 64);
  ck_assert_int_eq(out.maxCTAs, 64);
  cfg.minCTAs = 2;
  cfg.maxCTAs = 65;
  ck_assert_int_eq(config_parse(&cfg, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.minCTAs, 2);
  ck_assert_int_eq(out.maxCTAs, 64);

  /* Built against 2.16: minCTAs did not exist yet, so its (invalid) value is ignored. */
  ncclConfig_t old = NCCL_CONFIG_INITIALIZER;
  old.version = NCCL_VERSION(2, 16, 0);
  old.minCTAs = 0;
  old.blocking = 0;
  ck_assert_int_eq(config_parse(&old, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.minCTAs, 1);
  ck_assert_int_eq(out.blocking, 0);

  /* Older headers are accepted as stock does: 2.27's struct (no nChannelsPerNetPeer nor
   * nvlinkCentricSched: whatever follows it is ignored), and a version before ncclConfig_t existed
   * (blocking reads as undefined). A later patch of 2.28 shares 2.28's layout. */
  struct {
    ncclConfig_t cfg;
  } v227 = {.cfg = NCCL_CONFIG_INITIALIZER};
  v227.cfg.version = NCCL_VERSION(2, 27, 3);
  v227.cfg.size = offsetof(ncclConfig_t, nChannelsPerNetPeer);
  v227.cfg.nChannelsPerNetPeer = -5;
  v227.cfg.nvlinkCentricSched = 7;
  v227.cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
  ck_assert_int_eq(config_parse(&v227.cfg, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.CTAPolicy, NCCL_CTA_POLICY_ZERO);
  ck_assert_int_eq(out.nvlinkCentricSched, 0);
  ck_assert_int_eq(out.nChannelsPerNetPeer, NCCL_CONFIG_UNDEF_INT);
  ncclConfig_t ancient = NCCL_CONFIG_INITIALIZER;
  ancient.version = 1234;
  ancient.blocking = 77;
  ck_assert_int_eq(config_parse(&ancient, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.blocking, 1);
  ncclConfig_t patch = NCCL_CONFIG_INITIALIZER;
  patch.version = NCCL_VERSION(2, 28, 99);
  ck_assert_int_eq(config_parse(&patch, "test", &out), ncclSuccess);

  /* 2.28's struct (80 bytes: it ends after nvlinkCentricSched): what follows it in the caller's
   * memory is not read, so an invalid numRmaCtx there changes nothing. */
  ncclConfig_t v228 = NCCL_CONFIG_INITIALIZER;
  v228.version = NCCL_VERSION(2, 28, 9);
  v228.size = 80;
  v228.nvlinkCentricSched = 1;
  v228.numRmaCtx = -3;
  v228.hostCftMode = 99;
  ck_assert_int_eq(config_parse(&v228, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.nvlinkCentricSched, 1);
  ck_assert_int_eq(out.numRmaCtx, NCCL_CONFIG_UNDEF_INT);
  ck_assert_int_eq(out.hostCftMode, NCCL_CONFIG_UNDEF_INT);
  ck_assert_uint_eq(out.size, sizeof(ncclConfig_t));
  /* 2.32's (stock's header: version 23203): its fields are read and checked. */
  ncclConfig_t v232 = NCCL_CONFIG_INITIALIZER;
  v232.version = NCCL_VERSION(2, 32, 3);
  v232.numRmaCtx = 4;
  v232.nvlsHostMode = ncclNvlsHostModeDisable;
  ck_assert_int_eq(config_parse(&v232, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.numRmaCtx, 4);
  ck_assert_int_eq(out.nvlsHostMode, ncclNvlsHostModeDisable);
  v232.numRmaCtx = 0;
  ck_assert_int_eq(config_parse(&v232, "test", &out), ncclInvalidArgument);

  /* A smaller struct: fields past its size are undefined (defaults), whatever follows it. */
  ncclConfig_t small = NCCL_CONFIG_INITIALIZER;
  small.size = offsetof(ncclConfig_t, netName);
  small.splitShare = 99;
  small.maxCTAs = 3;
  ck_assert_int_eq(config_parse(&small, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.splitShare, 0);
  ck_assert_int_eq(out.maxCTAs, 3);

  /* A larger (newer) struct: our part is read. */
  struct {
    ncclConfig_t cfg;
    int future[4];
  } big = {.cfg = NCCL_CONFIG_INITIALIZER};
  big.cfg.size = sizeof(big);
  big.cfg.cgaClusterSize = 2;
  ck_assert_int_eq(config_parse(&big.cfg, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.cgaClusterSize, 2);
}
END_TEST

/* NCCL_MIN_CTAS / NCCL_MAX_CTAS replace the config's minCTAs / maxCTAs (as stock); a value out of
 * 1..64 WARNs and is ignored; a minimum above the maximum becomes the maximum. */
START_TEST(test_config_env_ctas) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER, out;
  cfg.minCTAs = 2;
  cfg.maxCTAs = 16;
  unit_set_param("NCCL_MIN_CTAS", "3");
  unit_set_param("NCCL_MAX_CTAS", "8");
  ck_assert_int_eq(config_parse(&cfg, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.minCTAs, 3);
  ck_assert_int_eq(out.maxCTAs, 8);
  unit_set_param("NCCL_MAX_CTAS", "0");
  log_clear_last_error();
  ck_assert_int_eq(config_parse(&cfg, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.maxCTAs, 16);
  ck_assert_ptr_nonnull(strstr(log_last_error(), "NCCL_MAX_CTAS=0 is outside 1..64"));
  unit_set_param("NCCL_MIN_CTAS", "40");
  unit_set_param("NCCL_MAX_CTAS", "12");
  ck_assert_int_eq(config_parse(&cfg, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.minCTAs, 12);
  ck_assert_int_eq(out.maxCTAs, 12);
  unit_set_param("NCCL_MIN_CTAS", NULL);
  unit_set_param("NCCL_MAX_CTAS", NULL);
  ck_assert_int_eq(config_parse(&cfg, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.minCTAs, 2);
  ck_assert_int_eq(out.maxCTAs, 16);
}
END_TEST

/* Fields Baton cannot honour WARN once per process when a user asks for them; their defaults and
 * the values Baton already behaves as are silent. */
START_TEST(test_config_ignored_fields_warn_once) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER, out;
  log_clear_last_error();
  ck_assert_int_eq(config_parse(&cfg, "test", &out), ncclSuccess);
  cfg.cgaClusterSize = 0;
  cfg.splitShare = 0;
  ck_assert_int_eq(config_parse(&cfg, "test", &out), ncclSuccess);
  ck_assert_str_eq(log_last_error(), "");
  static const struct {
    const char* needle;
    int field;
  } cases[] = {{"cgaClusterSize=2 is ignored", 0},
               {"splitShare=1 is ignored", 1},
               {"shrinkShare=1 is ignored", 2}};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
    if (cases[i].field == 0) c.cgaClusterSize = 2;
    if (cases[i].field == 1) c.splitShare = 1;
    if (cases[i].field == 2) c.shrinkShare = 1;
    for (int round = 0; round < 2; round++) {
      log_clear_last_error();
      ck_assert_int_eq(config_parse(&c, "test", &out), ncclSuccess);
      if (round == 0)
        ck_assert_msg(strstr(log_last_error(), cases[i].needle) != NULL, "'%s' lacks '%s'",
                      log_last_error(), cases[i].needle);
      else
        ck_assert_str_eq(log_last_error(), ""); /* once per process */
    }
  }
}
END_TEST

/* netName must name the network this process uses; another name fails init with a WARN naming
 * both (NCCL_NET, when set, wins over it, as stock). */
START_TEST(test_config_net_name) {
  ncclUniqueId id;
  ncclComm_t comm = SENTINEL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.netName = "NoSuchNet";
  EXPECT_ERR(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclInvalidArgument, NULL,
             "config netName is NoSuchNet but this process uses the");
  ck_assert_ptr_eq(comm, SENTINEL);
  unit_set_param("NCCL_NET", "Socket");
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_config_env_blocking) {
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER, out;
  cfg.blocking = 1;
  setenv("NCCL_COMM_BLOCKING", "0", 1);
  param_reload();
  ck_assert_int_eq(config_parse(NULL, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.blocking, 0);
  ck_assert_int_eq(config_parse(&cfg, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.blocking, 0); /* as stock, the env variable wins when set */
  unsetenv("NCCL_COMM_BLOCKING");
  param_reload();
  ck_assert_int_eq(config_parse(NULL, "test", &out), ncclSuccess);
  ck_assert_int_eq(out.blocking, 1);
}
END_TEST

/* The comm keeps an owned copy of commName. */
START_TEST(test_config_comm_name_copied) {
  char name[16] = "solver";
  ncclUniqueId id;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.commName = name;
  ncclComm_t comm = NULL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclSuccess);
  name[0] = 'X';
  ck_assert_str_eq(comm->config.commName, "solver");
  ck_assert_ptr_ne(comm->config.commName, name);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* A program built against 2.19's nccl.h (a shorter struct, an older version) initializes. */
START_TEST(test_config_older_header_inits) {
  ncclUniqueId id;
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.version = NCCL_VERSION(2, 19, 3);
  cfg.size = offsetof(ncclConfig_t, collnetEnable);
  cfg.blocking = 1;
  cfg.CTAPolicy = 12345; /* beyond its size and version: never read */
  ncclComm_t comm = NULL;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(ncclCommInitRankConfig(&comm, 1, id, 0, &cfg), ncclSuccess);
  ck_assert_int_eq(comm->config.CTAPolicy, NCCL_CTA_POLICY_DEFAULT);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* ---- Queries and lifecycle calls on a live comm ------------------------------------------------
 */
START_TEST(test_query_args) {
  ncclComm_t comm = unit_one_rank_comm();
  int n = -7;
  ncclResult_t st;
  EXPECT_ERR(ncclCommCount(NULL, &n), ncclInvalidArgument, NULL, "ncclCommCount: argument comm");
  EXPECT_ERR(ncclCommCount(comm, NULL), ncclInvalidArgument, comm, "argument count");
  EXPECT_ERR(ncclCommUserRank(comm, NULL), ncclInvalidArgument, comm, "argument rank");
  EXPECT_ERR(ncclCommUserRank(NULL, &n), ncclInvalidArgument, NULL, "ncclCommUserRank");
  EXPECT_ERR(ncclCommCuDevice(comm, NULL), ncclInvalidArgument, comm, "argument device");
  EXPECT_ERR(ncclCommCuDevice(NULL, &n), ncclInvalidArgument, NULL, "ncclCommCuDevice");
  EXPECT_ERR(ncclCommGetAsyncError(comm, NULL), ncclInvalidArgument, comm, "asyncError");
  EXPECT_ERR(ncclCommGetAsyncError(NULL, &st), ncclInvalidArgument, NULL, "ncclCommGetAsyncError");
  ck_assert_int_eq(n, -7);
  ck_assert_int_eq(ncclCommGetAsyncError(comm, &st), ncclSuccess);
  ck_assert_int_eq(st, ncclSuccess);
  check_still_works(comm);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_split_args) {
  ncclComm_t comm = unit_one_rank_comm();
  ncclComm_t child = SENTINEL;
  ncclConfig_t bad = NCCL_CONFIG_INITIALIZER;
  bad.magic = 0;
  EXPECT_ERR(ncclCommSplit(NULL, 0, 0, &child, NULL), ncclInvalidArgument, NULL, "ncclCommSplit");
  EXPECT_ERR(ncclCommSplit(comm, 0, 0, NULL, NULL), ncclInvalidArgument, comm, "newcomm");
  EXPECT_ERR(ncclCommSplit(comm, -7, 0, &child, NULL), ncclInvalidArgument, comm, "color -7");
  EXPECT_ERR(ncclCommSplit(comm, 0, 0, &child, &bad), ncclInvalidArgument, comm, "magic");
  ck_assert_ptr_eq(child, SENTINEL);
  /* A valid config for the child is honoured. */
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.maxCTAs = 5;
  ck_assert_int_eq(ncclCommSplit(comm, 0, 0, &child, &cfg), ncclSuccess);
  ck_assert_int_eq(child->config.maxCTAs, 5);
  ck_assert_int_eq(ncclCommDestroy(child), ncclSuccess);
  check_still_works(comm);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_shrink_args) {
  ncclComm_t comm = unit_one_rank_comm();
  ncclComm_t child = SENTINEL;
  int self[1] = {0}, outside[1] = {5}, twice[2] = {0, 0};
  EXPECT_ERR(ncclCommShrink(NULL, self, 1, &child, NULL, 0), ncclInvalidArgument, NULL,
             "ncclCommShrink");
  EXPECT_ERR(ncclCommShrink(comm, NULL, 1, &child, NULL, 0), ncclInvalidArgument, comm,
             "excludeRanksList");
  EXPECT_ERR(ncclCommShrink(comm, self, 0, &child, NULL, 0), ncclInvalidArgument, comm,
             "excludeRanksCount 0");
  EXPECT_ERR(ncclCommShrink(comm, self, 1, NULL, NULL, 0), ncclInvalidArgument, comm, "newcomm");
  EXPECT_ERR(ncclCommShrink(comm, self, 1, &child, NULL, 0x4), ncclInvalidArgument, comm,
             "shrinkFlags");
  EXPECT_ERR(ncclCommShrink(comm, outside, 1, &child, NULL, 0), ncclInvalidArgument, comm,
             "rank 5, outside");
  EXPECT_ERR(ncclCommShrink(comm, twice, 2, &child, NULL, 0), ncclInvalidArgument, comm, "twice");
  /* As stock: an excluded rank calling shrink is an invalid argument. */
  EXPECT_ERR(ncclCommShrink(comm, self, 1, &child, NULL, NCCL_SHRINK_ABORT), ncclInvalidArgument,
             comm, "rank 0 is in excludeRanksList");
  ck_assert_ptr_eq(child, SENTINEL);
  ck_assert_uint_eq(*comm->abort_flag, 0);
  check_still_works(comm);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

START_TEST(test_lifecycle_args) {
  ck_assert_int_eq(ncclCommFinalize(NULL), ncclSuccess); /* all as stock */
  ck_assert_int_eq(ncclCommDestroy(NULL), ncclSuccess);
  ck_assert_int_eq(ncclCommAbort(NULL), ncclSuccess);
  ck_assert_int_eq(ncclCommRevoke(NULL, 0), ncclSuccess);
  EXPECT_ERR(ncclGetVersion(NULL), ncclInvalidArgument, NULL, "version");
  ncclComm_t comm = unit_one_rank_comm();
  EXPECT_ERR(ncclCommRevoke(comm, 3), ncclInvalidArgument, comm, "revokeFlags 3");
  check_still_works(comm);
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
}
END_TEST

/* A destroyed comm's shell stays mapped (quarantine) with a poisoned magic: using it again is
 * reported, not undefined. */
START_TEST(test_use_after_destroy) {
  ncclComm_t comm = unit_one_rank_comm();
  ncclComm_t aborted = unit_one_rank_comm();
  int n;
  ck_assert_int_eq(ncclCommDestroy(comm), ncclSuccess);
  ck_assert_int_eq(ncclCommAbort(aborted), ncclSuccess);
  EXPECT_ERR(ncclCommDestroy(comm), ncclInvalidArgument, NULL, "already been destroyed");
  EXPECT_ERR(ncclCommAbort(comm), ncclInvalidArgument, NULL, "already been destroyed");
  EXPECT_ERR(ncclCommDestroy(aborted), ncclInvalidArgument, NULL, "already been destroyed");
  EXPECT_ERR(ncclCommCount(comm, &n), ncclInvalidArgument, NULL, "already been destroyed");
  EXPECT_ERR(ncclCommFinalize(comm), ncclInvalidArgument, NULL, "already been destroyed");
  EXPECT_ERR(ncclCommRevoke(comm, 0), ncclInvalidArgument, NULL, "already been destroyed");
  ncclComm_t child = NULL;
  EXPECT_ERR(ncclCommSplit(comm, 0, 0, &child, NULL), ncclInvalidArgument, NULL, "destroyed");

  struct ncclComm fake;
  memset(&fake, 0x5a, sizeof(fake));
  EXPECT_ERR(ncclCommCount(&fake, &n), ncclInvalidArgument, NULL, "not a valid communicator");
  EXPECT_ERR(ncclCommDestroy(&fake), ncclInvalidArgument, NULL, "not a valid communicator");
}
END_TEST

/* Two processes: after a burst of bad calls, the comm still splits and carries traffic. */
static int rank_bad_calls(int rank, int n, void* arg) {
  ncclUniqueId* id = arg;
  ncclComm_t comm = NULL, child = NULL;
  int v;
  CHILD_CHECK(ncclCommInitRank(&comm, n, *id, rank) == ncclSuccess);
  CHILD_CHECK(ncclCommCount(comm, NULL) == ncclInvalidArgument);
  CHILD_CHECK(ncclCommSplit(comm, -4, 0, &child, NULL) == ncclInvalidArgument);
  int self[1] = {rank};
  CHILD_CHECK(ncclCommShrink(comm, self, 1, &child, NULL, 0) == ncclInvalidArgument);
  CHILD_CHECK(ncclCommRevoke(comm, 9) == ncclInvalidArgument);
  CHILD_CHECK(strstr(ncclGetLastError(comm), "revokeFlags") != NULL);
  CHILD_CHECK(ncclCommSplit(comm, 0, -rank, &child, NULL) == ncclSuccess);
  CHILD_CHECK(ncclCommUserRank(child, &v) == ncclSuccess && v == n - 1 - rank);
  int vals[2] = {0, 0};
  vals[child->rank] = 11 + child->rank;
  CHILD_CHECK(bootstrap_allgather(child->bootstrap, vals, sizeof(int)) == ncclSuccess);
  CHILD_CHECK(vals[0] == 11 && vals[1] == 12);
  CHILD_CHECK(ncclCommDestroy(child) == ncclSuccess);
  CHILD_CHECK(ncclCommDestroy(comm) == ncclSuccess);
  return 0;
}

/* Registration handles are looked up in the communicator's own table before use: a wild pointer,
 * a second deregistration, another communicator's handle and a window passed as a buffer handle
 * are all ncclInvalidArgument with a WARN, and nothing crashes (the records of the valid handles
 * stay usable). */
START_TEST(test_register_args) {
  ncclComm_t a = unit_one_rank_comm(), b = unit_one_rank_comm();
  static char buf[4096];
  void* ha = NULL;
  void* hb = NULL;
  ncclWindow_t wa = NULL;
  ck_assert_int_eq(ncclCommRegister(a, buf, sizeof(buf), &ha), ncclSuccess);
  ck_assert_int_eq(ncclCommRegister(b, buf, sizeof(buf), &hb), ncclSuccess);
  ck_assert_int_eq(ncclCommWindowRegister(a, buf, sizeof(buf), &wa, NCCL_WIN_DEFAULT), ncclSuccess);
  EXPECT_ERR(ncclCommRegister(a, buf, sizeof(buf), NULL), ncclInvalidArgument, a, "handle");
  /* Ranges that wrap around the address space: no record, outputs untouched. A window of one
   * would let ncclPutSignal's offset check pass any offset. */
  void* hw = SENTINEL;
  ncclWindow_t ww = (ncclWindow_t)SENTINEL;
  EXPECT_ERR(ncclCommRegister(a, buf, SIZE_MAX, &hw), ncclInvalidArgument, a, "wraps around");
  EXPECT_ERR(ncclCommWindowRegister(a, buf, SIZE_MAX - 8, &ww, NCCL_WIN_DEFAULT),
             ncclInvalidArgument, a, "wraps around");
  EXPECT_ERR(ncclCommWindowRegister(a, (void*)(UINTPTR_MAX - 15), 32, &ww, NCCL_WIN_DEFAULT),
             ncclInvalidArgument, a, "wraps around");
  ck_assert_ptr_eq(hw, SENTINEL);
  ck_assert_ptr_eq(ww, (ncclWindow_t)SENTINEL);
  /* a wild pointer (unmapped), the buffer itself, NULL */
  EXPECT_ERR(ncclCommDeregister(a, (void*)(uintptr_t)0x10), ncclInvalidArgument, a,
             "was not returned by ncclCommRegister");
  EXPECT_ERR(ncclCommDeregister(a, buf), ncclInvalidArgument, a, "ncclCommDeregister");
  EXPECT_ERR(ncclCommDeregister(a, NULL), ncclInvalidArgument, a, "ncclCommDeregister");
  /* another communicator's handle, a window as a handle, a handle as a window */
  EXPECT_ERR(ncclCommDeregister(a, hb), ncclInvalidArgument, a, "belongs to the communicator");
  EXPECT_ERR(ncclCommDeregister(a, (void*)wa), ncclInvalidArgument, a, "ncclCommDeregister");
  EXPECT_ERR(ncclCommWindowDeregister(a, (ncclWindow_t)ha), ncclInvalidArgument, a,
             "ncclCommWindowRegister");
  EXPECT_ERR(ncclCommWindowDeregister(b, wa), ncclInvalidArgument, b, "ncclCommWindowDeregister");
  /* the valid ones still work, once */
  ck_assert_int_eq(ncclCommDeregister(a, ha), ncclSuccess);
  EXPECT_ERR(ncclCommDeregister(a, ha), ncclInvalidArgument, a, "deregistered already");
  ck_assert_int_eq(ncclCommWindowDeregister(a, wa), ncclSuccess);
  EXPECT_ERR(ncclCommWindowDeregister(a, wa), ncclInvalidArgument, a, "deregistered already");
  ck_assert_int_eq(ncclCommDeregister(b, hb), ncclSuccess);
  /* left registered at destroy: released by the communicator */
  ck_assert_int_eq(ncclCommRegister(a, buf, sizeof(buf), &ha), ncclSuccess);
  check_still_works(a);
  ck_assert_int_eq(ncclCommDestroy(a), ncclSuccess);
  ck_assert_int_eq(ncclCommDestroy(b), ncclSuccess);
}
END_TEST

START_TEST(test_comm_works_after_bad_calls) {
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  ck_assert_int_eq(fork_ranks_run(2, rank_bad_calls, &id, 20000), 0);
}
END_TEST

int main(void) {
  setenv("CUDA_VISIBLE_DEVICES", "", 1); /* host executor */
  setenv("NCCL_SOCKET_IFNAME", "lo", 1);
  Suite* s = suite_create("args");
  TCase* tc = tcase_create("args");
  tcase_set_timeout(tc, 30);
  tcase_add_test(tc, test_init_args);
  tcase_add_test(tc, test_init_all_args);
  tcase_add_test(tc, test_config_bad_fields);
  tcase_add_test(tc, test_config_defaults_and_versions);
  tcase_add_test(tc, test_config_older_header_inits);
  tcase_add_test(tc, test_config_env_blocking);
  tcase_add_test(tc, test_config_env_ctas);
  tcase_add_test(tc, test_config_ignored_fields_warn_once);
  tcase_add_test(tc, test_config_net_name);
  tcase_add_test(tc, test_config_comm_name_copied);
  tcase_add_test(tc, test_query_args);
  tcase_add_test(tc, test_split_args);
  tcase_add_test(tc, test_shrink_args);
  tcase_add_test(tc, test_lifecycle_args);
  tcase_add_test(tc, test_use_after_destroy);
  tcase_add_test(tc, test_comm_works_after_bad_calls);
  tcase_add_test(tc, test_register_args);
  suite_add_tcase(s, tc);
  return unit_run_suite(s);
}
