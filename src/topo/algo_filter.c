/* NCCL_ALGO / NCCL_PROTO filters: stock NCCL 2.28's syntax, parsed without side effects.
 *
 *   spec    := entry { ";" entry }
 *   entry   := [ function ":" ] list        only the first entry may leave out the function
 *   list    := [ "^" ] name { "," name }    "^": everything except the names
 *
 * An entry without a function sets every function's row; an entry with one replaces that
 * function's row (later entries win). Names and functions match case-insensitively; functions are
 * Broadcast, Reduce, AllGather, ReduceScatter, AllReduce. Examples:
 *   "ring"                           ring only, for every function
 *   "^tree"                          all but tree
 *   "ring,tree;allreduce:^ring"      ring and tree, but allreduce never ring
 *   "allreduce:tree;broadcast:ring"  allreduce tree only, broadcast ring only, others unchanged
 * Unlike stock, blanks around names are ignored and a trailing ';' or ',' is harmless. */
#include <strings.h>

#include "topo/topo.h"

const char* const topo_algo_names[TOPO_ALGO_NAMES_COUNT] = {
    "Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT", "OneShot", "TwoShot",
};
const char* const topo_proto_names[TOPO_PROTO_NAMES_COUNT] = {"LL", "LL128", "Simple"};
const char* const topo_func_names[TOPO_FUNC_NAMES_COUNT] = {
    "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce",
};

/* A slice [s, s + len) of the spec. */
typedef struct filter_tok {
  const char* s;
  size_t len;
} filter_tok_t;

static filter_tok_t tok_trim(const char* s, const char* end) {
  while (s < end && (*s == ' ' || *s == '\t')) s++;
  while (end > s && (end[-1] == ' ' || end[-1] == '\t')) end--;
  return (filter_tok_t){.s = s, .len = (size_t)(end - s)};
}

static bool tok_is(filter_tok_t t, const char* name) {
  return name != NULL && strlen(name) == t.len && strncasecmp(t.s, name, t.len) == 0;
}

static const char* find_char(const char* s, const char* end, char c) {
  while (s < end && *s != c) s++;
  return s;
}

/* Parses one list into vals[]. */
static ncclResult_t filter_parse_list(filter_tok_t list, const char* var_name, const char* spec,
                                      const char* const* names, int nnames, bool* vals) {
  bool negate = false;
  if (list.len > 0 && list.s[0] == '^') {
    negate = true;
    list = tok_trim(list.s + 1, list.s + list.len);
  }
  for (int i = 0; i < nnames; i++) vals[i] = negate;
  const char* end = list.s + list.len;
  for (const char* p = list.s; p < end;) {
    const char* comma = find_char(p, end, ',');
    const filter_tok_t name = tok_trim(p, comma);
    p = comma < end ? comma + 1 : end;
    if (name.len == 0) continue;
    int i = 0;
    while (i < nnames && !tok_is(name, names[i])) i++;
    if (i == nnames) {
      char known[256];
      size_t off = 0;
      known[0] = '\0';
      for (int k = 0; k < nnames && off < sizeof(known); k++) {
        off += (size_t)snprintf(known + off, sizeof(known) - off, "%s%s", k ? ", " : "", names[k]);
      }
      WARN("%s=\"%s\": unknown name \"%.*s\" (known: %s)", var_name, spec, (int)name.len, name.s,
           known);
      return ncclInvalidUsage;
    }
    vals[i] = !negate;
  }
  return ncclSuccess;
}

ncclResult_t topo_parse_filter(const char* spec, const char* var_name, const char* const* names,
                               int nnames, const char* func_name, bool* allowed) {
  bool row[TOPO_FILTER_MAX_NAMES];
  bool vals[TOPO_FILTER_MAX_NAMES];
  if (nnames < 1 || nnames > TOPO_FILTER_MAX_NAMES || names == NULL || allowed == NULL) {
    WARN("topo_parse_filter: %d names (1 to %d allowed)", nnames, TOPO_FILTER_MAX_NAMES);
    return ncclInternalError;
  }
  if (var_name == NULL) var_name = "filter";
  for (int i = 0; i < nnames; i++) row[i] = true;

  const char* end = spec != NULL ? spec + strlen(spec) : NULL;
  int nentries = 0;
  for (const char* p = spec; p != NULL && p < end;) {
    const char* semi = find_char(p, end, ';');
    const filter_tok_t entry = tok_trim(p, semi);
    p = semi < end ? semi + 1 : end;
    if (entry.len == 0) continue;

    const char* entry_end = entry.s + entry.len;
    const char* colon = find_char(entry.s, entry_end, ':');
    filter_tok_t list;
    bool applies;
    if (colon < entry_end) {
      const filter_tok_t func = tok_trim(entry.s, colon);
      list = tok_trim(colon + 1, entry_end);
      int f = 0;
      while (f < TOPO_FUNC_NAMES_COUNT && !tok_is(func, topo_func_names[f])) f++;
      if (f == TOPO_FUNC_NAMES_COUNT) {
        WARN(
            "%s=\"%s\": unknown function \"%.*s\" before ':' (functions: Broadcast, Reduce, "
            "AllGather, ReduceScatter, AllReduce)",
            var_name, spec, (int)func.len, func.s);
        return ncclInvalidUsage;
      }
      if (find_char(list.s, list.s + list.len, ':') < list.s + list.len) {
        WARN("%s=\"%s\": more than one ':' in \"%.*s\" (separate entries with ';')", var_name, spec,
             (int)entry.len, entry.s);
        return ncclInvalidUsage;
      }
      if (list.len == 0) {
        WARN("%s=\"%s\": empty list after \"%.*s:\"", var_name, spec, (int)func.len, func.s);
        return ncclInvalidUsage;
      }
      applies = tok_is(func, func_name);
    } else {
      if (nentries > 0) {
        WARN(
            "%s=\"%s\": only the first entry may leave out the function; write "
            "\"<function>:%.*s\"",
            var_name, spec, (int)entry.len, entry.s);
        return ncclInvalidUsage;
      }
      list = entry;
      applies = true;
    }
    CHECK(filter_parse_list(list, var_name, spec, names, nnames, vals));
    if (applies) memcpy(row, vals, sizeof(bool) * (size_t)nnames);
    nentries++;
  }
  memcpy(allowed, row, sizeof(bool) * (size_t)nnames);
  return ncclSuccess;
}
