/* Which algorithms and protocols may run: NCCL_ALGO / NCCL_PROTO (coll_filter_init, read once per
 * communicator, with the names both use: coll_algo_name, coll_proto_name), and
 * ncclCollConfig_t.algSelection (NCCL 2.31): which (algorithm, protocol) pairs one call may use.
 *
 * The expression is stock's: names separated by ',' (or), '+' (and) and a leading '^' (not),
 * without parentheses, '+' binding tighter than ','; case does not matter and blanks around names
 * are ignored. A name selects the known names it equals, or else every known name it begins
 * ("ring" selects RING_LL, RING_LL128 and RING_SIMPLE). Known names are Baton's pairs,
 * ALGO_PROTO in topo's spelling (TREE_LL ... TWOSHOT_SIMPLE: the last two are Baton's own), and
 * stock's pairs Baton has not built (NVLS, CollNet, PAT, the symmetric kernels), which select
 * nothing here. A name that is no known name's prefix makes the expression invalid.
 *
 * The algSelection parser is pure: no I/O, no logging; the caller reports. */
#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "collectives/collectives.h"

/* Stock's names of pairs Baton has not built (2.32 user guide, ncclCollConfig_t.algSelection). */
static const char* const select_stock_only[] = {"COLLNET_DIRECT_SIMPLE",
                                                "COLLNET_CHAIN_SIMPLE",
                                                "NVLS_SIMPLE",
                                                "NVLSTREE_SIMPLE",
                                                "PAT_SIMPLE",
                                                "SYMK_AGxLL_R",
                                                "SYMK_AGxLLMC_R",
                                                "SYMK_RSxTmaLD_AGxTmaST",
                                                "SYMK_RSxLD_AGxST",
                                                "SYMK_RSxLDMC_AGxSTMC",
                                                "SYMK_LL",
                                                "SYMK_LLMC",
                                                "SYMK_TmaST",
                                                "SYMK_ST",
                                                "SYMK_TmaSTMC",
                                                "SYMK_STMC",
                                                "SYMK_RailRing_LsaSTMC",
                                                "SYMK_TmaLD",
                                                "SYMK_LD",
                                                "SYMK_LDMC",
                                                "SYMK_RailA2A_LsaLD",
                                                "SYMK_RailA2A_LsaLDMC"};
#define SELECT_NSTOCK ((int)(sizeof(select_stock_only) / sizeof(select_stock_only[0])))
#define SELECT_NPAIRS (ALGO_COUNT * PROTO_COUNT)
#define SELECT_NNAMES (SELECT_NPAIRS + SELECT_NSTOCK)
_Static_assert(SELECT_NNAMES <= 64, "names are bits of a uint64_t");
_Static_assert(SELECT_NPAIRS <= 16, "pairs are bits of a uint16_t");

/* Name i: Baton's pair i (algo * PROTO_COUNT + proto) as ALGO_PROTO, then stock's own names. */
static void select_name(int i, char* out, size_t cap) {
  if (i >= SELECT_NPAIRS) {
    snprintf(out, cap, "%s", select_stock_only[i - SELECT_NPAIRS]);
    return;
  }
  snprintf(out, cap, "%s_%s", coll_algo_name(i / PROTO_COUNT), coll_proto_name(i % PROTO_COUNT));
}

static bool select_prefix(const char* term, size_t n, const char* name, bool exact) {
  if (strlen(name) < n || (exact && strlen(name) != n)) return false;
  for (size_t k = 0; k < n; k++)
    if (tolower((unsigned char)term[k]) != tolower((unsigned char)name[k])) return false;
  return true;
}

/* The names one term selects; 0 when it names none. */
static uint64_t select_term(const char* term, size_t n) {
  char name[64];
  uint64_t exact = 0, prefix = 0;
  for (int i = 0; i < SELECT_NNAMES; i++) {
    select_name(i, name, sizeof(name));
    if (select_prefix(term, n, name, true)) exact |= 1ull << i;
    if (select_prefix(term, n, name, false)) prefix |= 1ull << i;
  }
  return exact != 0 ? exact : prefix;
}

bool coll_select_parse(const char* expr, uint16_t* pairs, char* bad, size_t bad_cap) {
  const uint64_t all = SELECT_NNAMES == 64 ? ~0ull : (1ull << SELECT_NNAMES) - 1;
  uint64_t result = 0, conj = all;
  const char* p = expr;
  for (;;) {
    while (*p == ' ' || *p == '\t') p++;
    bool neg = *p == '^';
    if (neg) p++;
    while (*p == ' ' || *p == '\t') p++;
    const char* start = p;
    while (*p != '\0' && *p != ',' && *p != '+') p++;
    const char* end = p;
    while (end > start && (end[-1] == ' ' || end[-1] == '\t')) end--;
    size_t n = (size_t)(end - start);
    uint64_t set = n > 0 ? select_term(start, n) : 0;
    if (set == 0) {
      snprintf(bad, bad_cap, "%.*s", (int)(n < 48 ? n : 48), start);
      return false;
    }
    conj &= neg ? ~set : set;
    if (*p == '+') {
      p++;
      continue;
    }
    result |= conj;
    conj = all;
    if (*p == '\0') break;
    p++; /* ',' */
  }
  *pairs = (uint16_t)(result & ((1u << SELECT_NPAIRS) - 1)); /* an empty term returned above */
  return true;
}

/* ---- NCCL_ALGO / NCCL_PROTO ------------------------------------------------------------------ */
/* The names NCCL_ALGO / NCCL_PROTO use (topo's tables), so logs and filters agree. */
const char* coll_algo_name(int algo) {
  return algo >= 0 && algo < ALGO_COUNT ? topo_algo_names[coll_algo_name_index(algo)] : "?";
}

const char* coll_proto_name(int proto) {
  return proto >= 0 && proto < PROTO_COUNT ? topo_proto_names[proto] : "?";
}

int coll_algo_name_index(int algo) {
  switch (algo) {
    case ALGO_TREE:
      return TOPO_ALGO_TREE;
    case ALGO_RING:
      return TOPO_ALGO_RING;
    case ALGO_ONESHOT:
      return TOPO_ALGO_ONESHOT;
    default:
      return TOPO_ALGO_TWOSHOT;
  }
}

ncclResult_t coll_filter_init(coll_filter_t* f) {
  const char* algo = param_str(PARAM_ALGO);
  const char* proto = param_str(PARAM_PROTO);
  coll_filter_t out = {0};
  for (int func = 0; func < FUNC_COUNT; func++) {
    /* Send/Recv have no row of their own: only function-less entries apply to them. */
    const char* fname = func < TOPO_FUNC_NAMES_COUNT ? topo_func_names[func] : NULL;
    bool a[TOPO_ALGO_NAMES_COUNT], p[TOPO_PROTO_NAMES_COUNT];
    CHECK(topo_parse_filter(algo, "NCCL_ALGO", topo_algo_names, TOPO_ALGO_NAMES_COUNT, fname, a));
    CHECK(
        topo_parse_filter(proto, "NCCL_PROTO", topo_proto_names, TOPO_PROTO_NAMES_COUNT, fname, p));
    for (int i = 0; i < ALGO_COUNT; i++) {
      const bool ok = a[coll_algo_name_index(i)];
      out.algo_ok[func][i] = ok;
      if (!ok) out.algo_set[func] = true;
    }
    for (int i = 0; i < PROTO_COUNT; i++) {
      out.proto_ok[func][i] = p[i];
      if (!p[i]) out.proto_set[func] = true;
    }
  }
  *f = out;
  return ncclSuccess;
}
