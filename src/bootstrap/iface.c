/* Network interfaces and socket addresses: listing the host's interfaces, choosing the ones that
 * NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY ask for (or the default preference), and converting
 * addresses to and from text. The selection is a pure function over a candidate list. */
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netdb.h>
#include <pthread.h>
#include <stdlib.h>

#include "bootstrap/bootstrap.h"

#define IFACE_SPEC_MAX_ENTRIES 32
#define IFACE_DEFAULT_MAX 16

/* ---- Address text ---------------------------------------------------------------------------- */

/* The numeric host part of an IPv4 or IPv6 address; "" for another family. */
static void addr_host_text(const socket_addr_t* addr, char host[INET6_ADDRSTRLEN]) {
  host[0] = '\0';
  if (addr->sa.sa_family == AF_INET)
    inet_ntop(AF_INET, &addr->sin.sin_addr, host, INET6_ADDRSTRLEN);
  else if (addr->sa.sa_family == AF_INET6)
    inet_ntop(AF_INET6, &addr->sin6.sin6_addr, host, INET6_ADDRSTRLEN);
}

bool socket_addr_equal(const socket_addr_t* a, const socket_addr_t* b) {
  if (a->sa.sa_family != b->sa.sa_family) return false;
  if (a->sa.sa_family == AF_INET)
    return a->sin.sin_port == b->sin.sin_port && a->sin.sin_addr.s_addr == b->sin.sin_addr.s_addr;
  if (a->sa.sa_family == AF_INET6)
    return a->sin6.sin6_port == b->sin6.sin6_port &&
           memcmp(&a->sin6.sin6_addr, &b->sin6.sin6_addr, sizeof(a->sin6.sin6_addr)) == 0;
  return false;
}

const char* socket_addr_format(const socket_addr_t* addr, char* buf, size_t len) {
  char host[INET6_ADDRSTRLEN];
  if (len == 0) return buf;
  addr_host_text(addr, host);
  if (addr->sa.sa_family == AF_INET) {
    snprintf(buf, len, "%s:%u", host, (unsigned)ntohs(addr->sin.sin_port));
  } else if (addr->sa.sa_family == AF_INET6) {
    snprintf(buf, len, "[%s]:%u", host, (unsigned)ntohs(addr->sin6.sin6_port));
  } else {
    snprintf(buf, len, "<address family %d>", (int)addr->sa.sa_family);
  }
  return buf;
}

/* Resolves host (numeric v4/v6, or a name through getaddrinfo; IPv4 results preferred). */
static ncclResult_t addr_resolve(const char* host, const char* text, socket_addr_t* out) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
  struct addrinfo* res = NULL;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || res == NULL) {
    WARN("Bootstrap: cannot resolve host '%s' in address '%s': %s", host, text,
         rc != 0 ? gai_strerror(rc) : "no result");
    return ncclInvalidArgument;
  }
  struct addrinfo* pick = NULL;
  for (struct addrinfo* ai = res; ai != NULL && pick == NULL; ai = ai->ai_next)
    if (ai->ai_family == AF_INET) pick = ai;
  for (struct addrinfo* ai = res; ai != NULL && pick == NULL; ai = ai->ai_next)
    if (ai->ai_family == AF_INET6) pick = ai;
  if (pick == NULL || pick->ai_addrlen > sizeof(*out)) {
    freeaddrinfo(res);
    WARN("Bootstrap: host '%s' in address '%s' has no IPv4 or IPv6 address", host, text);
    return ncclInvalidArgument;
  }
  memset(out, 0, sizeof(*out));
  memcpy(out, pick->ai_addr, pick->ai_addrlen);
  freeaddrinfo(res);
  return ncclSuccess;
}

ncclResult_t socket_addr_parse(const char* text, socket_addr_t* out) {
  char host[256];
  const char* port_text = NULL;
  size_t host_len;
  if (text == NULL || *text == '\0') {
    WARN("Bootstrap: empty address; expected <host>:<port> or [<ipv6>]:<port>");
    return ncclInvalidArgument;
  }
  if (text[0] == '[') {
    const char* close = strchr(text, ']');
    if (close == NULL || close[1] != ':') goto bad_format;
    host_len = (size_t)(close - text - 1);
    if (host_len == 0 || host_len >= sizeof(host)) goto bad_format;
    memcpy(host, text + 1, host_len);
    port_text = close + 2;
  } else {
    const char* colon = strrchr(text, ':');
    if (colon == NULL) goto bad_format;
    host_len = (size_t)(colon - text);
    if (host_len == 0 || host_len >= sizeof(host)) goto bad_format;
    memcpy(host, text, host_len);
    port_text = colon + 1;
  }
  host[host_len] = '\0';
  char* end = NULL;
  errno = 0;
  long port = strtol(port_text, &end, 10);
  if (*port_text == '\0' || *end != '\0' || errno != 0 || port < 0 || port > 65535) goto bad_format;

  socket_addr_t addr;
  memset(&addr, 0, sizeof(addr));
  if (inet_pton(AF_INET, host, &addr.sin.sin_addr) == 1) {
    addr.sin.sin_family = AF_INET;
  } else if (inet_pton(AF_INET6, host, &addr.sin6.sin6_addr) == 1) {
    addr.sin6.sin6_family = AF_INET6;
  } else {
    CHECK(addr_resolve(host, text, &addr));
  }
  if (addr.sa.sa_family == AF_INET)
    addr.sin.sin_port = htons((uint16_t)port);
  else
    addr.sin6.sin6_port = htons((uint16_t)port);
  *out = addr;
  return ncclSuccess;

bad_format:
  WARN(
      "Bootstrap: cannot parse address '%s'; expected <ipv4>:<port>, <hostname>:<port> or "
      "[<ipv6>]:<port>",
      text);
  return ncclInvalidArgument;
}

/* ---- Interface selection --------------------------------------------------------------------- */

typedef struct iface_spec {
  bool exclude; /* leading ^ */
  bool exact;   /* leading = */
  int n;
  char names[IFACE_SPEC_MAX_ENTRIES][SOCKET_IFNAME_MAX];
} iface_spec_t;

static void iface_spec_parse(const char* text, iface_spec_t* spec) {
  memset(spec, 0, sizeof(*spec));
  for (;;) {
    if (*text == '^' && !spec->exclude) {
      spec->exclude = true;
      text++;
    } else if (*text == '=' && !spec->exact) {
      spec->exact = true;
      text++;
    } else {
      break;
    }
  }
  while (*text != '\0' && spec->n < IFACE_SPEC_MAX_ENTRIES) {
    size_t len = strcspn(text, ",");
    if (len > 0) {
      size_t keep = len < SOCKET_IFNAME_MAX - 1 ? len : SOCKET_IFNAME_MAX - 1;
      memcpy(spec->names[spec->n], text, keep);
      spec->names[spec->n][keep] = '\0';
      spec->n++;
    }
    text += len;
    if (*text == ',') text++;
  }
}

static bool iface_spec_matches(const iface_spec_t* spec, const char* name) {
  for (int i = 0; i < spec->n; i++) {
    if (spec->exact ? strcmp(name, spec->names[i]) == 0
                    : strncmp(name, spec->names[i], strlen(spec->names[i])) == 0)
      return true;
  }
  return false;
}

static bool iface_is_link_local_v6(const socket_iface_t* c) {
  return c->addr.sa.sa_family == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&c->addr.sin6.sin6_addr);
}

/* One pass over the candidates with one spec; one address per interface name (IPv4 preferred when
 * no family is forced). Returns how many were written to out. */
static int iface_select_pass(const socket_iface_t* cands, int ncands, const iface_spec_t* spec,
                             int family, bool allow_link_local, socket_iface_t* out, int max) {
  int n = 0;
  for (int i = 0; i < ncands; i++) {
    const socket_iface_t* c = &cands[i];
    int fam = c->addr.sa.sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (family != AF_UNSPEC && fam != family) continue;
    if (!allow_link_local && iface_is_link_local_v6(c)) continue;
    if (iface_spec_matches(spec, c->name) == spec->exclude) continue;
    int dup = -1;
    for (int j = 0; j < n; j++)
      if (strcmp(out[j].name, c->name) == 0) dup = j;
    if (dup >= 0) {
      if (fam == AF_INET && out[dup].addr.sa.sa_family == AF_INET6) out[dup] = *c;
      continue;
    }
    if (n < max) out[n++] = *c;
  }
  return n;
}

static int iface_select_spec(const socket_iface_t* cands, int ncands, const char* text, int family,
                             socket_iface_t* out, int max) {
  iface_spec_t spec;
  iface_spec_parse(text, &spec);
  int n = iface_select_pass(cands, ncands, &spec, family, false, out, max);
  if (n == 0) n = iface_select_pass(cands, ncands, &spec, family, true, out, max);
  return n;
}

ncclResult_t socket_select_interfaces(const socket_iface_t* candidates, int ncandidates,
                                      const char* ifname_spec, int family, socket_iface_t* out,
                                      int max, int* nout) {
  static const char* const defaults[] = {"ib", "^docker,lo", "docker", "lo"};
  if ((ncandidates > 0 && candidates == NULL) || max < 0 || (max > 0 && out == NULL) ||
      nout == NULL) {
    WARN("Bootstrap: socket_select_interfaces called with invalid arguments");
    return ncclInternalError;
  }
  if (family != AF_UNSPEC && family != AF_INET && family != AF_INET6) {
    WARN("Bootstrap: unsupported address family %d (use AF_INET or AF_INET6)", family);
    return ncclInvalidArgument;
  }
  int n = 0;
  if (ifname_spec != NULL && ifname_spec[0] != '\0') {
    n = iface_select_spec(candidates, ncandidates, ifname_spec, family, out, max);
  } else {
    for (size_t d = 0; d < sizeof(defaults) / sizeof(defaults[0]) && n == 0; d++)
      n = iface_select_spec(candidates, ncandidates, defaults[d], family, out, max);
  }
  *nout = n;
  return ncclSuccess;
}

ncclResult_t socket_list_interfaces(socket_iface_t* out, int max, int* nout) {
  struct ifaddrs* list = NULL;
  if (getifaddrs(&list) != 0) {
    WARN("Bootstrap: getifaddrs failed: %s", strerror(errno));
    return ncclSystemError;
  }
  int n = 0;
  for (struct ifaddrs* ifa = list; ifa != NULL && n < max; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP)) continue;
    int fam = ifa->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    socket_iface_t* c = &out[n++];
    memset(c, 0, sizeof(*c));
    snprintf(c->name, sizeof(c->name), "%s", ifa->ifa_name);
    memcpy(&c->addr, ifa->ifa_addr,
           fam == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
  }
  freeifaddrs(list);
  *nout = n;
  return ncclSuccess;
}

/* ---- The interfaces of this process ------------------------------------------------------------
 * Cached; recomputed when NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY change (param_reload in tests).
 */
static pthread_mutex_t iface_lock = PTHREAD_MUTEX_INITIALIZER;
static socket_iface_t iface_chosen[IFACE_DEFAULT_MAX];
static int iface_nchosen = -1;
static char iface_cached_spec[256];
static char iface_cached_family[32];

static int iface_family_from_param(const char* text) {
  if (text == NULL || text[0] == '\0') return AF_UNSPEC;
  if (strcmp(text, "AF_INET") == 0) return AF_INET;
  if (strcmp(text, "AF_INET6") == 0) return AF_INET6;
  WARN("Bootstrap: NCCL_SOCKET_FAMILY=%s not understood (use AF_INET or AF_INET6); ignoring it",
       text);
  return AF_UNSPEC;
}

/* "name:address<0>" of one chosen interface: longest name, ':', longest IPv6 text, "<0>". */
#define IFACE_DESC_MAX (SOCKET_IFNAME_MAX + 1 + INET6_ADDRSTRLEN + 3)
static void iface_describe(const socket_iface_t* c, char* buf, size_t len) {
  char host[INET6_ADDRSTRLEN];
  addr_host_text(&c->addr, host); /* the list holds IPv4 and IPv6 interfaces only */
  /* The precision states the name field's bound: called on an element of iface_chosen, gcc
   * otherwise takes the name for a string as long as the rest of the array. */
  snprintf(buf, len, "%.*s:%s<0>", (int)sizeof(c->name), c->name, host);
}

ncclResult_t socket_default_interfaces(const socket_iface_t** out, int* nout) {
  ncclResult_t res = ncclSuccess;
  const char* spec = param_str(PARAM_SOCKET_IFNAME);
  const char* fam_text = param_str(PARAM_SOCKET_FAMILY);
  pthread_mutex_lock(&iface_lock);
  if (iface_nchosen > 0 && strcmp(iface_cached_spec, spec ? spec : "") == 0 &&
      strcmp(iface_cached_family, fam_text ? fam_text : "") == 0)
    goto done;

  socket_iface_t cands[128];
  int ncands = 0;
  CHECK_GOTO(socket_list_interfaces(cands, 128, &ncands), res, unlock);
  int n = 0;
  CHECK_GOTO(socket_select_interfaces(cands, ncands, spec, iface_family_from_param(fam_text),
                                      iface_chosen, IFACE_DEFAULT_MAX, &n),
             res, unlock);
  if (n == 0) {
    WARN(
        "Bootstrap: no usable network interface found (NCCL_SOCKET_IFNAME=%s, "
        "NCCL_SOCKET_FAMILY=%s); set NCCL_SOCKET_IFNAME to one of this host's interfaces",
        spec ? spec : "<unset>", fam_text ? fam_text : "<unset>");
    res = ncclSystemError;
    goto unlock;
  }
  iface_nchosen = n;
  snprintf(iface_cached_spec, sizeof(iface_cached_spec), "%s", spec ? spec : "");
  snprintf(iface_cached_family, sizeof(iface_cached_family), "%s", fam_text ? fam_text : "");
  char line[512] = "";
  size_t used = 0;
  for (int i = 0; i < n && used < sizeof(line); i++) {
    char one[IFACE_DESC_MAX];
    iface_describe(&iface_chosen[i], one, sizeof(one));
    used += (size_t)snprintf(line + used, sizeof(line) - used, "%s%s", i ? " " : "", one);
  }
  INFO(NCCL_BOOTSTRAP | NCCL_INIT, "Bootstrap: using %s", line);
done:
  *out = iface_chosen;
  *nout = iface_nchosen;
unlock:
  pthread_mutex_unlock(&iface_lock);
  return res;
}
