/* The IB network's pure rules (see ib.h): NCCL_IB_HCA, the GID choice, striping over QPs, port
 * speed, merging ports into NICs. No verbs calls: tests/unit/test_net_ib.c checks them without a
 * device. */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdlib.h>

#include "net/ib.h"

/* ---- NCCL_IB_HCA ----------------------------------------------------------------------------- */
void ib_hca_parse(const char* spec, ib_hca_filter_t* out) {
  memset(out, 0, sizeof(*out));
  if (spec == NULL) return;
  const char* p = spec;
  while (isspace((unsigned char)*p)) p++;
  if (*p == '^') {
    out->exclude = true;
    p++;
  }
  if (*p == '=') {
    out->exact = true;
    p++;
  }
  while (*p != '\0' && out->n < IB_HCA_MAX) {
    size_t len = strcspn(p, ",:");
    ib_hca_item_t* it = &out->items[out->n];
    it->port = -1;
    if (len > 0) {
      size_t n = len < IB_NAME_MAX - 1 ? len : IB_NAME_MAX - 1;
      memcpy(it->name, p, n);
      it->name[n] = '\0';
    }
    p += len;
    if (*p == ':') {
      char* end = NULL;
      long port = strtol(p + 1, &end, 10);
      if (end != p + 1 && port >= 0 && port < 256) it->port = (int)port;
      p += strcspn(p, ","); /* anything else up to the next item is ignored, as stock does */
    }
    if (len > 0) out->n++;
    if (*p == ',') p++;
  }
}

bool ib_hca_match(const ib_hca_filter_t* f, const char* dev, int port) {
  if (f->n == 0) return true; /* no list: every device (a bare "^" or "=" too) */
  bool hit = false;
  for (int i = 0; i < f->n && !hit; i++) {
    const ib_hca_item_t* it = &f->items[i];
    bool name_ok =
        f->exact ? strcmp(dev, it->name) == 0 : strncmp(dev, it->name, strlen(it->name)) == 0;
    hit = name_ok && (it->port < 0 || port < 0 || it->port == port);
  }
  return hit != f->exclude;
}

/* ---- GIDs ------------------------------------------------------------------------------------ */
static bool gid_is_zero(const uint8_t raw[16]) {
  for (int i = 0; i < 16; i++)
    if (raw[i] != 0) return false;
  return true;
}

bool ib_gid_is_link_local(const uint8_t raw[16]) {
  return raw[0] == 0xfe && (raw[1] & 0xc0) == 0x80;
}

/* Unset entries read as zero, or as the link-local prefix with no interface id. */
static bool gid_configured(const uint8_t raw[16]) {
  if (gid_is_zero(raw)) return false;
  static const uint8_t zero[14] = {0};
  if (ib_gid_is_link_local(raw) && memcmp(raw + 2, zero, sizeof(zero)) == 0) return false;
  return true;
}

int ib_gid_family(const uint8_t raw[16]) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(raw, mapped, sizeof(mapped)) == 0 ? AF_INET : AF_INET6;
}

static bool gid_in_range(const uint8_t raw[16], const ib_gid_prefs_t* p) {
  if (p->range_bits <= 0) return true;
  int bits = p->range_bits;
  const uint8_t* addr = raw;
  const uint8_t* base = p->range;
  if (p->family == AF_INET) { /* compare the IPv4 part of the mapped address */
    addr = raw + 12;
    if (bits > 32) bits = 32;
  }
  for (int i = 0; bits > 0; i++, bits -= 8) {
    uint8_t mask = bits >= 8 ? 0xff : (uint8_t)(0xff << (8 - bits));
    if ((addr[i] & mask) != (base[i] & mask)) return false;
  }
  return true;
}

void ib_gid_prefs_parse(const char* family, const char* range, int roce_version,
                        ib_gid_prefs_t* out) {
  memset(out, 0, sizeof(*out));
  out->family = AF_INET;
  out->roce_version = roce_version;
  if (family != NULL && family[0] != '\0') {
    if (strcmp(family, "AF_INET6") == 0)
      out->family = AF_INET6;
    else if (strcmp(family, "AF_INET") != 0)
      WARN("NCCL_IB_ADDR_FAMILY=%s is neither AF_INET nor AF_INET6; using AF_INET", family);
  }
  if (range == NULL || range[0] == '\0') return;
  char text[INET6_ADDRSTRLEN + 8];
  snprintf(text, sizeof(text), "%s", range);
  char* slash = strchr(text, '/');
  char* end = NULL;
  long bits = slash != NULL ? strtol(slash + 1, &end, 10) : -1;
  int max_bits = out->family == AF_INET ? 32 : 128;
  if (slash != NULL) *slash = '\0';
  if (slash == NULL || end == slash + 1 || *end != '\0' || bits < 0 || bits > max_bits ||
      inet_pton(out->family, text, out->range) != 1) {
    WARN(
        "NCCL_IB_ADDR_RANGE=%s is not an %s prefix (<address>/<bits>, at most %d bits); any "
        "address is accepted",
        range, out->family == AF_INET ? "IPv4" : "IPv6", max_bits);
    memset(out->range, 0, sizeof(out->range));
    return;
  }
  out->range_bits = (int)bits;
}

int ib_gid_select(const ib_gid_entry_t* tab, int n, const ib_gid_prefs_t* p) {
  int best = -1, best_score = -1;
  for (int i = 0; i < n; i++) {
    const uint8_t* raw = tab[i].raw;
    if (!gid_configured(raw)) continue;
    int score = 0;
    if (ib_gid_family(raw) == p->family && gid_in_range(raw, p)) score += 4;
    if (!ib_gid_is_link_local(raw)) score += 2;
    if (tab[i].roce_version == p->roce_version) score += 1;
    if (score > best_score) { /* strictly better: the lowest index wins a tie */
      best = i;
      best_score = score;
    }
  }
  return best;
}

const char* ib_gid_format(const uint8_t raw[16], char* buf, size_t len) {
  if (inet_ntop(AF_INET6, raw, buf, (socklen_t)len) == NULL) snprintf(buf, len, "?");
  return buf;
}

/* ---- Striping -------------------------------------------------------------------------------- */
void ib_stripe(size_t size, int nparts, int k, size_t* off, size_t* len) {
  if (nparts < 1) nparts = 1;
  size_t chunk = (size + (size_t)nparts - 1) / (size_t)nparts;
  chunk = (chunk + IB_STRIPE_ALIGN - 1) / IB_STRIPE_ALIGN * IB_STRIPE_ALIGN;
  size_t start = chunk * (size_t)k;
  if (start >= size) {
    *off = size;
    *len = 0;
    return;
  }
  *off = start;
  *len = size - start < chunk ? size - start : chunk;
}

/* ---- Port speed ------------------------------------------------------------------------------ */
int ib_port_speed_mbps(int active_speed, int active_speed_ex, int active_width) {
  /* Lane rates by code bit: SDR, DDR, QDR, FDR10, FDR, EDR, HDR, NDR, XDR. */
  static const int lane_mbps[] = {2500, 5000, 10000, 10000, 14000, 25000, 50000, 100000, 200000};
  /* Lanes by code bit: 1x, 4x, 8x, 12x, 2x. */
  static const int lanes[] = {1, 4, 8, 12, 2};
  int code = active_speed_ex != 0 ? active_speed_ex : active_speed;
  int s = 0, w = 0;
  while (s < (int)(sizeof(lane_mbps) / sizeof(lane_mbps[0])) - 1 && !(code & (1 << s))) s++;
  while (w < (int)(sizeof(lanes) / sizeof(lanes[0])) - 1 && !(active_width & (1 << w))) w++;
  return lane_mbps[s] * lanes[w];
}

/* ---- Merging ports into NICs ----------------------------------------------------------------- */
/* Length of the path without its function number: ".../0000:3b:00.1" -> ".../0000:3b:00". */
static size_t path_device_len(const char* path) {
  const char* slash = strrchr(path, '/');
  const char* dot = strrchr(path, '.');
  if (dot != NULL && (slash == NULL || dot > slash)) return (size_t)(dot - path);
  return strlen(path);
}

int ib_merge_groups(const char* const* pci_paths, int n, bool merge, int max_per_group,
                    int* group_of) {
  int ngroups = 0;
  for (int i = 0; i < n; i++) {
    group_of[i] = -1;
    bool may_merge = merge && pci_paths[i] != NULL;
    size_t li = may_merge ? path_device_len(pci_paths[i]) : 0;
    /* Earlier ports are met in the order their groups were opened: the first match not full. */
    for (int j = 0; j < i && may_merge && group_of[i] < 0; j++) {
      const char* other = pci_paths[j];
      if (other == NULL || path_device_len(other) != li || strncmp(other, pci_paths[i], li) != 0)
        continue;
      int members = 0;
      for (int k = 0; k < i; k++) members += group_of[k] == group_of[j];
      if (members < max_per_group) group_of[i] = group_of[j];
    }
    if (group_of[i] < 0) group_of[i] = ngroups++;
  }
  return ngroups;
}
