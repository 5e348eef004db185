/* ncclConfig_t: validation, version/size handling, defaults and env overrides (as stock 2.28;
 * the layout is 2.32's, ncclConfig_v23100: a program built against any header from 2.14 to 2.32
 * passes its own size, and the fields beyond it read as undefined).
 * What Baton does with each field: blocking, commName, minCTAs/maxCTAs (the channel range,
 * core/resources.c), netName (checked against the network in use, init.c) and trafficClass
 * (handed to the network's connect) are honoured; cgaClusterSize, splitShare and shrinkShare have
 * no meaning in Baton and a value that asks for something WARNs once per process. */
#include <stdatomic.h>
#include <stddef.h>

#include "core/core.h"

#define CONFIG_MAGIC 0xcafebeefu
#define CONFIG_MAX_CTAS 64 /* stock's MAXCHANNELS: default maxCTAs, nChannelsPerNetPeer limit */
#define UNDEF NCCL_CONFIG_UNDEF_INT
/* The first config version with a layout this library does not know: the release after 2.32,
 * whose header this one's layout matches (the version macros still say 2.28). */
#define CONFIG_NEWER_THAN_US NCCL_VERSION(2, 33, 0)

/* Bytes of the smallest config a program can have been built with (2.14: size, magic, version,
 * blocking). A smaller size means the struct was not set up with NCCL_CONFIG_INITIALIZER. */
#define CONFIG_MIN_SIZE (offsetof(ncclConfig_t, blocking) + sizeof(int))

static const ncclConfig_t config_undefined = NCCL_CONFIG_INITIALIZER;

/* Fields a program built against an older nccl.h cannot have set: they read as undefined (and
 * take defaults), as stock does for every version it accepts. */
static void config_forget_newer_fields(ncclConfig_t* c) {
  if (c->version < NCCL_VERSION(2, 14, 0)) c->blocking = UNDEF;
  if (c->version < NCCL_VERSION(2, 17, 0)) {
    c->cgaClusterSize = c->minCTAs = c->maxCTAs = UNDEF;
    c->netName = NULL;
  }
  if (c->version < NCCL_VERSION(2, 25, 0)) c->trafficClass = UNDEF;
  if (c->version < NCCL_VERSION(2, 27, 0)) {
    c->collnetEnable = c->CTAPolicy = c->shrinkShare = c->nvlsCTAs = UNDEF;
  }
  if (c->version < NCCL_VERSION(2, 28, 0)) c->nChannelsPerNetPeer = c->nvlinkCentricSched = UNDEF;
  /* The 2.29-2.32 fields are known by the caller's size alone: a 2.28 program's 80 bytes end
   * before them (Baton's header before 2.32.3's version gave them with version 2.28.9). */
}

static bool is_bool_or_undef(int v) {
  return v == UNDEF || v == 0 || v == 1;
}

static ncclResult_t config_bad(const char* api, const char* field, int value) {
  WARN("%s: invalid config %s value %d", api, field, value);
  return ncclInvalidArgument;
}

static ncclResult_t config_validate(const ncclConfig_t* c, const char* api) {
#define CONFIG_REQUIRE(cond, field) \
  if (!(cond)) return config_bad(api, #field, c->field)
  CONFIG_REQUIRE(is_bool_or_undef(c->blocking), blocking);
  CONFIG_REQUIRE(c->cgaClusterSize == UNDEF || c->cgaClusterSize >= 0, cgaClusterSize);
  CONFIG_REQUIRE(c->minCTAs == UNDEF || c->minCTAs > 0, minCTAs);
  CONFIG_REQUIRE(c->maxCTAs == UNDEF || c->maxCTAs > 0, maxCTAs);
  CONFIG_REQUIRE(is_bool_or_undef(c->splitShare), splitShare);
  CONFIG_REQUIRE(is_bool_or_undef(c->collnetEnable), collnetEnable);
  CONFIG_REQUIRE(c->CTAPolicy == UNDEF || (c->CTAPolicy >= NCCL_CTA_POLICY_DEFAULT &&
                                           c->CTAPolicy <= NCCL_CTA_POLICY_ZERO),
                 CTAPolicy);
  CONFIG_REQUIRE(is_bool_or_undef(c->shrinkShare), shrinkShare);
  CONFIG_REQUIRE(c->nvlsCTAs == UNDEF || c->nvlsCTAs > 0, nvlsCTAs);
  CONFIG_REQUIRE(c->nChannelsPerNetPeer == UNDEF ||
                     (c->nChannelsPerNetPeer > 0 && c->nChannelsPerNetPeer <= CONFIG_MAX_CTAS),
                 nChannelsPerNetPeer);
  CONFIG_REQUIRE(is_bool_or_undef(c->nvlinkCentricSched), nvlinkCentricSched);
  CONFIG_REQUIRE(c->numRmaCtx == UNDEF || c->numRmaCtx > 0, numRmaCtx);
  CONFIG_REQUIRE(c->numRmaSig == UNDEF || c->numRmaSig > 0, numRmaSig);
  CONFIG_REQUIRE(is_bool_or_undef(c->rmaEagerInit), rmaEagerInit);
  CONFIG_REQUIRE(c->hostCftMode == UNDEF ||
                     (c->hostCftMode >= ncclHostCftEnable && c->hostCftMode <= ncclHostCftFallback),
                 hostCftMode);
#undef CONFIG_REQUIRE
  const int64_t rma_ctx = c->numRmaCtx == UNDEF ? 1 : c->numRmaCtx;
  const int64_t rma_sig = c->numRmaSig == UNDEF ? 1 : c->numRmaSig;
  if (rma_ctx * rma_sig > COMM_RMA_MAX_SIGNALS) {
    WARN("%s: invalid config: numRmaCtx %lld x numRmaSig %lld is more than %d signals", api,
         (long long)rma_ctx, (long long)rma_sig, COMM_RMA_MAX_SIGNALS);
    return ncclInvalidArgument;
  }
  if (c->minCTAs != UNDEF && c->maxCTAs != UNDEF && c->minCTAs > c->maxCTAs) {
    WARN("%s: invalid config: minCTAs %d is larger than maxCTAs %d", api, c->minCTAs, c->maxCTAs);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

static void config_default_int(int* field, int def, const char* name) {
  if (*field == UNDEF)
    *field = def;
  else
    INFO(NCCL_ENV, "Comm config %s set to %d", name, *field);
}

static void config_fill_defaults(ncclConfig_t* c) {
  config_default_int(&c->blocking, 1, "blocking");
  config_default_int(&c->cgaClusterSize, 4, "cgaClusterSize");
  config_default_int(&c->minCTAs, 1, "minCTAs");
  config_default_int(&c->maxCTAs, CONFIG_MAX_CTAS, "maxCTAs");
  config_default_int(&c->splitShare, 0, "splitShare");
  config_default_int(&c->collnetEnable, 0, "collnetEnable");
  config_default_int(&c->CTAPolicy, NCCL_CTA_POLICY_DEFAULT, "CTAPolicy");
  config_default_int(&c->shrinkShare, 0, "shrinkShare");
  config_default_int(&c->nvlinkCentricSched, 0, "nvlinkCentricSched");
  /* trafficClass, nvlsCTAs and nChannelsPerNetPeer stay undefined: "let the library choose". */
  if (c->netName) INFO(NCCL_ENV, "Comm config netName set to %s", c->netName);
  if (c->commName) INFO(NCCL_ENV, "Comm config commName set to %s", c->commName);
}

/* NCCL_MIN_CTAS / NCCL_MAX_CTAS, when set to 1..CONFIG_MAX_CTAS, replace the config's value. */
static void config_ctas_override(int* field, param_id_t id, const char* name) {
  if (!param_is_set(id)) return;
  int64_t v = param_int(id);
  if (v < 1 || v > CONFIG_MAX_CTAS) {
    WARN("%s=%lld is outside 1..%d; keeping %s %d", param_describe(id)->name, (long long)v,
         CONFIG_MAX_CTAS, name, *field);
    return;
  }
  if (*field != (int)v)
    INFO(NCCL_ENV, "Comm config %s set to %lld by %s", name, (long long)v,
         param_describe(id)->name);
  *field = (int)v;
}

/* A config asking for more CTAs than a communicator can have channels gets the most there are (as
 * stock: an INFO, not an error), so the config the communicator keeps says what it runs. */
static void config_ctas_cap(int* field, const char* name) {
  if (*field <= CONFIG_MAX_CTAS) return;
  INFO(NCCL_ENV, "Comm config %s %d is more than the %d channels a communicator can have; using %d",
       name, *field, CONFIG_MAX_CTAS, CONFIG_MAX_CTAS);
  *field = CONFIG_MAX_CTAS;
}

void config_env_override(ncclConfig_t* cfg) {
  /* As stock: NCCL_COMM_BLOCKING=0/1, when set, wins over the config. */
  if (param_is_set(PARAM_COMM_BLOCKING)) {
    int64_t v = param_int(PARAM_COMM_BLOCKING);
    if (v == 0 || v == 1)
      cfg->blocking = (int)v;
    else
      INFO(NCCL_ENV, "NCCL_COMM_BLOCKING=%lld is not 0 or 1; ignored", (long long)v);
  }
  config_ctas_override(&cfg->minCTAs, PARAM_MIN_CTAS, "minCTAs");
  config_ctas_override(&cfg->maxCTAs, PARAM_MAX_CTAS, "maxCTAs");
  config_ctas_cap(&cfg->minCTAs, "minCTAs");
  config_ctas_cap(&cfg->maxCTAs, "maxCTAs");
  if (cfg->minCTAs > cfg->maxCTAs) {
    WARN(
        "Comm config minCTAs %d exceeds maxCTAs %d (after NCCL_MIN_CTAS/NCCL_MAX_CTAS); using "
        "maxCTAs for both",
        cfg->minCTAs, cfg->maxCTAs);
    cfg->minCTAs = cfg->maxCTAs;
  }
}

/* Fields a user set to something Baton cannot do: one WARN per field and process. */
static void config_warn_ignored(const ncclConfig_t* c) {
  static atomic_int warned_cga, warned_split, warned_shrink;
  if (c->cgaClusterSize != UNDEF && c->cgaClusterSize != 0 && !atomic_exchange(&warned_cga, 1))
    WARN(
        "Comm config cgaClusterSize=%d is ignored: Baton's kernels do not use thread block "
        "clusters",
        c->cgaClusterSize);
  if (c->splitShare == 1 && !atomic_exchange(&warned_split, 1))
    WARN(
        "Comm config splitShare=1 is ignored: Baton gives every communicator created by "
        "ncclCommSplit its own channels and connections");
  if (c->shrinkShare == 1 && !atomic_exchange(&warned_shrink, 1))
    WARN(
        "Comm config shrinkShare=1 is ignored: Baton gives every communicator created by "
        "ncclCommShrink its own channels and connections");
}

ncclResult_t config_parse(const ncclConfig_t* config, const char* api, ncclConfig_t* out) {
  ncclConfig_t c = config_undefined;
  if (config != NULL) {
    size_t size;
    memcpy(&size, config, sizeof(size)); /* read size first: the struct may be smaller than ours */
    if (size < CONFIG_MIN_SIZE) {
      WARN("%s: config size %zu is too small: initialize ncclConfig_t with NCCL_CONFIG_INITIALIZER",
           api, size);
      return ncclInvalidArgument;
    }
    memcpy(&c, config, size < sizeof(c) ? size : sizeof(c));
    if (c.magic != CONFIG_MAGIC) {
      WARN("%s: config magic 0x%x is wrong: initialize ncclConfig_t with NCCL_CONFIG_INITIALIZER",
           api, c.magic);
      return ncclInvalidArgument;
    }
    /* Older headers are fine (their missing fields take defaults). A newer minor release may
     * have added fields whose meaning this library cannot honour: refuse it. */
    if (c.version >= CONFIG_NEWER_THAN_US) {
      WARN(
          "%s: config version %u comes from a newer nccl.h than this library knows (layouts up "
          "to NCCL 2.32): rebuild against this library's nccl.h",
          api, c.version);
      return ncclInvalidArgument;
    }
    config_forget_newer_fields(&c);
  }
  CHECK(config_validate(&c, api));
  config_warn_ignored(&c);
  config_fill_defaults(&c);
  config_env_override(&c);
  c.size = sizeof(c);
  c.magic = CONFIG_MAGIC;
  c.version = NCCL_VERSION_CODE;
  *out = c;
  return ncclSuccess;
}
