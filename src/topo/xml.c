/* The system graph as XML (NCCL_TOPO_DUMP_FILE writes it, NCCL_TOPO_FILE reads it). Schema,
 * version 1: a tree from CPUs down through PCI bridges to GPUs, NVLinks inside each GPU:
 *
 *   <system version="1">
 *     <cpu numaid="0" affinity="0-31,64-95">         NUMA node and its CPUs (both optional)
 *       <pci busid="0000:15:01.0">                   a PCI bridge (nests: switch ports)
 *         <gpu busid="0000:18:00.0" rank="0" dev="0" sm="90" nvswitch="18">
 *           <nvlink target="0000:2a:00.0" count="4"/> direct NVLinks to another GPU
 *         </gpu>
 *       </pci>
 *     </cpu>
 *   </system>
 *
 * NICs follow the cpu elements, one element each (written by detection, kept when read back;
 * pcipath: the bridges above the NIC, '/'-separated):
 *     <nic name="mlx5_0" port="1" rdma="1" active="1" speed="200000" busid="0000:3b:00.0"
 *          numaid="0" pcipath="0000:15:01.0"/>
 *
 * A gpu's NUMA node and CPUs are its cpu's; its PCI path is the chain of pci elements around it.
 * gpu attributes other than busid are optional (rank/dev -1, sm 0, nvswitch 0 by default), as is
 * nvlink's count (1). Comments, an <?xml?> declaration and whitespace are allowed; anything else
 * (unknown elements or attributes, text, a malformed value) is an error reported with its line. */
#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>

#include "topo/topo_sys.h"

#define XML_MAX_DEPTH 32
#define XML_MAX_ATTRS 8
#define XML_NAME_MAX 32
#define XML_VALUE_MAX 512

/* ============================== Writing ============================== */
static void xml_indent(FILE* f, int depth) {
  fprintf(f, "%*s", 2 * depth, "");
}

/* The k-th component of a '/'-separated PCI path into out; false if there are fewer. */
static bool path_component(const char* path, int k, char* out, size_t len) {
  const char* p = path;
  if (p[0] == '\0') return false;
  for (int i = 0; i < k; i++) {
    p = strchr(p, '/');
    if (p == NULL) return false;
    p++;
  }
  size_t n = strcspn(p, "/");
  snprintf(out, len, "%.*s", (int)n, p);
  return true;
}

static void xml_write_gpu(FILE* f, const topo_system_t* sys, int i, int depth) {
  const topo_gpu_t* g = &sys->gpus[i];
  char id[TOPO_BUSID_LEN], to[TOPO_BUSID_LEN];
  topo_busid_format(g->bus_id, id);
  xml_indent(f, depth);
  fprintf(f, "<gpu busid=\"%s\" rank=\"%d\" dev=\"%d\" sm=\"%d\" nvswitch=\"%d\"", id, g->rank,
          g->dev, g->sm, g->nvswitch_links);
  int nlinks = 0;
  for (int j = 0; j < sys->ngpus; j++) nlinks += sys->nvlinks[(size_t)i * sys->ngpus + j] > 0;
  if (nlinks == 0) {
    fprintf(f, "/>\n");
    return;
  }
  fprintf(f, ">\n");
  for (int j = 0; j < sys->ngpus; j++) {
    int count = sys->nvlinks[(size_t)i * sys->ngpus + j];
    if (count <= 0) continue;
    topo_busid_format(sys->gpus[j].bus_id, to);
    xml_indent(f, depth + 1);
    fprintf(f, "<nvlink target=\"%s\" count=\"%d\"/>\n", to, count);
  }
  xml_indent(f, depth);
  fprintf(f, "</gpu>\n");
}

/* GPUs order[lo, hi) share their first `level` path components: write those that end here, and a
 * <pci> element per run of GPUs sharing the next component. */
static void xml_write_pci(FILE* f, const topo_system_t* sys, const int* order, int lo, int hi,
                          int level, int depth) {
  int i = lo;
  while (i < hi) {
    char comp[TOPO_PCI_PATH_MAX], other[TOPO_PCI_PATH_MAX];
    if (!path_component(sys->gpus[order[i]].pci_path, level, comp, sizeof(comp))) {
      xml_write_gpu(f, sys, order[i], depth);
      i++;
      continue;
    }
    int j = i + 1;
    while (j < hi && path_component(sys->gpus[order[j]].pci_path, level, other, sizeof(other)) &&
           strcmp(comp, other) == 0)
      j++;
    xml_indent(f, depth);
    fprintf(f, "<pci busid=\"%s\">\n", comp);
    xml_write_pci(f, sys, order, i, j, level + 1, depth + 1);
    xml_indent(f, depth);
    fprintf(f, "</pci>\n");
    i = j;
  }
}

static int xml_gpu_order(const void* pa, const void* pb, void* arg) {
  const topo_system_t* sys = arg;
  const topo_gpu_t* a = &sys->gpus[*(const int*)pa];
  const topo_gpu_t* b = &sys->gpus[*(const int*)pb];
  if (a->numa != b->numa) return a->numa < b->numa ? -1 : 1;
  int c = strcmp(a->cpus, b->cpus);
  if (c != 0) return c;
  c = strcmp(a->pci_path, b->pci_path);
  if (c != 0) return c;
  return (a->bus_id > b->bus_id) - (a->bus_id < b->bus_id);
}

/* The NICs of the system, after the cpu elements. */
static void xml_write_nics(FILE* f, const topo_system_t* sys) {
  for (int i = 0; i < sys->nnics; i++) {
    const topo_nic_t* n = &sys->nics[i];
    char id[TOPO_BUSID_LEN];
    topo_busid_format(n->bus_id, id);
    fprintf(f,
            "  <nic name=\"%s\" port=\"%d\" rdma=\"%d\" active=\"%d\" speed=\"%d\" "
            "busid=\"%s\" numaid=\"%d\" pcipath=\"%s\"/>\n",
            n->name, n->port, n->rdma, n->active, n->speed_mbps, n->bus_id >= 0 ? id : "none",
            n->numa, n->pci_path);
  }
}

ncclResult_t topo_xml_format(const topo_system_t* sys, char** text_out) {
  char* buf = NULL;
  size_t len = 0;
  int* order = NULL;
  CHECK(MEM_CALLOC(&order, (size_t)sys->ngpus));
  FILE* f = open_memstream(&buf, &len);
  if (f == NULL) {
    WARN("Topology: open_memstream failed: %s", strerror(errno));
    free(order);
    return ncclSystemError;
  }
  for (int i = 0; i < sys->ngpus; i++) order[i] = i;
  qsort_r(order, (size_t)sys->ngpus, sizeof(int), xml_gpu_order, (void*)sys);
  fprintf(f, "<?xml version=\"1.0\"?>\n<!-- Baton system topology (NCCL_TOPO_FILE loads it) -->\n");
  fprintf(f, "<system version=\"1\">\n");
  int i = 0;
  while (i < sys->ngpus) {
    const topo_gpu_t* g = &sys->gpus[order[i]];
    int j = i + 1;
    while (j < sys->ngpus && sys->gpus[order[j]].numa == g->numa &&
           strcmp(sys->gpus[order[j]].cpus, g->cpus) == 0)
      j++;
    fprintf(f, "  <cpu numaid=\"%d\"", g->numa);
    if (g->cpus[0] != '\0') fprintf(f, " affinity=\"%s\"", g->cpus);
    fprintf(f, ">\n");
    xml_write_pci(f, sys, order, i, j, 0, 2);
    fprintf(f, "  </cpu>\n");
    i = j;
  }
  xml_write_nics(f, sys);
  fprintf(f, "</system>\n");
  bool failed = ferror(f) != 0;
  fclose(f);
  free(order);
  if (failed || buf == NULL) {
    WARN("Topology: formatting the XML failed (out of memory?)");
    free(buf);
    return ncclSystemError;
  }
  *text_out = buf;
  return ncclSuccess;
}

ncclResult_t topo_xml_dump(const topo_system_t* sys, const char* path) {
  char* text = NULL;
  CHECK(topo_xml_format(sys, &text));
  FILE* f = fopen(path, "we");
  if (f == NULL) {
    WARN("NCCL_TOPO_DUMP_FILE: cannot create %s: %s", path, strerror(errno));
    free(text);
    return ncclSystemError;
  }
  size_t len = strlen(text);
  bool ok = fwrite(text, 1, len, f) == len;
  ok = fclose(f) == 0 && ok;
  free(text);
  if (!ok) {
    WARN("NCCL_TOPO_DUMP_FILE: writing %s failed: %s", path, strerror(errno));
    return ncclSystemError;
  }
  INFO(NCCL_GRAPH, "Topology: wrote %d GPU(s) to %s", sys->ngpus, path);
  return ncclSuccess;
}

/* ============================== Reading ============================== */
typedef struct xml_attr {
  char name[XML_NAME_MAX];
  char value[XML_VALUE_MAX];
} xml_attr_t;

typedef struct xml_parser {
  const char* name; /* file name, for messages */
  const char* p;
  int line;
  int depth;
  char stack[XML_MAX_DEPTH][XML_NAME_MAX];
  int stack_line[XML_MAX_DEPTH];
  bool seen_system;
  /* what the elements describe */
  bool in_cpu;
  int cpu_numa;
  char cpu_affinity[TOPO_CPUS_MAX];
  int npci;
  char pci[XML_MAX_DEPTH][TOPO_BUSID_LEN];
  int cur_gpu; /* index in gpus, -1 outside a gpu */
  topo_gpu_t* gpus;
  int ngpus, gpus_cap;
  topo_link_t* links;
  int* link_lines; /* where each nvlink was, for errors found at the end */
  int nlinks, links_cap;
  topo_nic_t* nics;
  int nnics;
} xml_parser_t;

static ncclResult_t xml_error(const xml_parser_t* x, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
static ncclResult_t xml_error(const xml_parser_t* x, const char* fmt, ...) {
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  WARN("Topology file %s:%d: %s", x->name, x->line, msg);
  return ncclInvalidUsage;
}

static const char* xml_attr_get(const xml_attr_t* attrs, int n, const char* name) {
  for (int i = 0; i < n; i++)
    if (strcmp(attrs[i].name, name) == 0) return attrs[i].value;
  return NULL;
}

/* Every attribute of the element must be one of allowed (NULL-terminated). */
static ncclResult_t xml_attrs_known(const xml_parser_t* x, const char* elem,
                                    const xml_attr_t* attrs, int n, const char* const* allowed) {
  for (int i = 0; i < n; i++) {
    bool ok = false;
    for (const char* const* a = allowed; *a != NULL; a++) ok |= strcmp(attrs[i].name, *a) == 0;
    if (!ok) return xml_error(x, "unknown attribute '%s' of <%s>", attrs[i].name, elem);
  }
  return ncclSuccess;
}

static ncclResult_t xml_int(const xml_parser_t* x, const xml_attr_t* attrs, int n, const char* elem,
                            const char* name, int def, int lo, int* out) {
  const char* v = xml_attr_get(attrs, n, name);
  if (v == NULL) {
    *out = def;
    return ncclSuccess;
  }
  char* end = NULL;
  errno = 0;
  long val = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || val < lo || val > INT_MAX)
    return xml_error(x, "<%s %s=\"%s\">: expected an integer >= %d", elem, name, v, lo);
  *out = (int)val;
  return ncclSuccess;
}

static ncclResult_t xml_busid(const xml_parser_t* x, const xml_attr_t* attrs, int n,
                              const char* elem, const char* name, int64_t* out) {
  const char* v = xml_attr_get(attrs, n, name);
  if (v == NULL) return xml_error(x, "<%s> needs a %s attribute", elem, name);
  int64_t id = topo_busid_parse(v);
  if (id < 0)
    return xml_error(x, "<%s %s=\"%s\">: expected a PCI bus id like 0000:3b:00.0", elem, name, v);
  *out = id;
  return ncclSuccess;
}

static ncclResult_t xml_open_gpu(xml_parser_t* x, const xml_attr_t* attrs, int n) {
  static const char* const allowed[] = {"busid", "rank", "dev", "sm", "nvswitch", NULL};
  topo_gpu_t g;
  memset(&g, 0, sizeof(g));
  CHECK(xml_attrs_known(x, "gpu", attrs, n, allowed));
  CHECK(xml_busid(x, attrs, n, "gpu", "busid", &g.bus_id));
  CHECK(xml_int(x, attrs, n, "gpu", "rank", -1, -1, &g.rank));
  CHECK(xml_int(x, attrs, n, "gpu", "dev", -1, -1, &g.dev));
  CHECK(xml_int(x, attrs, n, "gpu", "sm", 0, 0, &g.sm));
  CHECK(xml_int(x, attrs, n, "gpu", "nvswitch", 0, 0, &g.nvswitch_links));
  for (int i = 0; i < x->ngpus; i++)
    if (x->gpus[i].bus_id == g.bus_id)
      return xml_error(x, "<gpu busid=\"%s\"> is listed twice", xml_attr_get(attrs, n, "busid"));
  g.numa = x->in_cpu ? x->cpu_numa : -1;
  snprintf(g.cpus, sizeof(g.cpus), "%s", x->in_cpu ? x->cpu_affinity : "");
  size_t len = 0;
  for (int i = 0; i < x->npci; i++) {
    int w = snprintf(g.pci_path + len, sizeof(g.pci_path) - len, "%s%s", i ? "/" : "", x->pci[i]);
    if (w < 0 || (size_t)w >= sizeof(g.pci_path) - len)
      return xml_error(x, "<gpu> is nested in too many <pci> elements");
    len += (size_t)w;
  }
  if (x->ngpus == x->gpus_cap) {
    int cap = x->gpus_cap ? 2 * x->gpus_cap : 8;
    if (cap > TOPO_MAX_GPUS) return xml_error(x, "more than %d GPUs", TOPO_MAX_GPUS);
    topo_gpu_t* p = realloc(x->gpus, (size_t)cap * sizeof(*p));
    if (p == NULL) return xml_error(x, "out of memory");
    x->gpus = p;
    x->gpus_cap = cap;
  }
  x->cur_gpu = x->ngpus;
  x->gpus[x->ngpus++] = g;
  return ncclSuccess;
}

static ncclResult_t xml_open_nvlink(xml_parser_t* x, const xml_attr_t* attrs, int n) {
  static const char* const allowed[] = {"target", "count", NULL};
  topo_link_t l;
  CHECK(xml_attrs_known(x, "nvlink", attrs, n, allowed));
  CHECK(xml_busid(x, attrs, n, "nvlink", "target", &l.to));
  CHECK(xml_int(x, attrs, n, "nvlink", "count", 1, 1, &l.count));
  l.from = x->gpus[x->cur_gpu].bus_id;
  if (l.to == l.from) return xml_error(x, "<nvlink> from a GPU to itself");
  if (x->nlinks == x->links_cap) {
    int cap = x->links_cap ? 2 * x->links_cap : 16;
    topo_link_t* p = realloc(x->links, (size_t)cap * sizeof(*p));
    if (p == NULL) return xml_error(x, "out of memory");
    x->links = p;
    int* q = realloc(x->link_lines, (size_t)cap * sizeof(*q));
    if (q == NULL) return xml_error(x, "out of memory");
    x->link_lines = q;
    x->links_cap = cap;
  }
  x->link_lines[x->nlinks] = x->line;
  x->links[x->nlinks++] = l;
  return ncclSuccess;
}

static ncclResult_t xml_open_nic(xml_parser_t* x, const xml_attr_t* attrs, int n) {
  static const char* const allowed[] = {"name",  "port",   "rdma",    "active", "speed",
                                        "busid", "numaid", "pcipath", NULL};
  topo_nic_t nic;
  int rdma = 0, active = 0;
  memset(&nic, 0, sizeof(nic));
  CHECK(xml_attrs_known(x, "nic", attrs, n, allowed));
  const char* name = xml_attr_get(attrs, n, "name");
  const char* bus = xml_attr_get(attrs, n, "busid");
  const char* path = xml_attr_get(attrs, n, "pcipath");
  if (name == NULL || strlen(name) >= sizeof(nic.name))
    return xml_error(x, "<nic> needs a name of at most %d characters", TOPO_NIC_NAME_MAX - 1);
  snprintf(nic.name, sizeof(nic.name), "%s", name);
  CHECK(xml_int(x, attrs, n, "nic", "port", 0, 0, &nic.port));
  CHECK(xml_int(x, attrs, n, "nic", "rdma", 0, 0, &rdma));
  CHECK(xml_int(x, attrs, n, "nic", "active", 0, 0, &active));
  CHECK(xml_int(x, attrs, n, "nic", "speed", 0, 0, &nic.speed_mbps));
  CHECK(xml_int(x, attrs, n, "nic", "numaid", -1, -1, &nic.numa));
  nic.rdma = rdma != 0;
  nic.active = active != 0;
  nic.bus_id = -1;
  if (bus != NULL && strcmp(bus, "none") != 0)
    CHECK(xml_busid(x, attrs, n, "nic", "busid", &nic.bus_id));
  if (path != NULL && strlen(path) >= sizeof(nic.pci_path))
    return xml_error(x, "<nic pcipath>: longer than %d characters", TOPO_PCI_PATH_MAX - 1);
  snprintf(nic.pci_path, sizeof(nic.pci_path), "%s", path ? path : "");
  topo_nic_t* grown = realloc(x->nics, (size_t)(x->nnics + 1) * sizeof(*grown));
  if (grown == NULL) return xml_error(x, "out of memory");
  x->nics = grown;
  x->nics[x->nnics++] = nic;
  return ncclSuccess;
}

/* An element opened (depth is its parent's depth). */
static ncclResult_t xml_open(xml_parser_t* x, const char* elem, const xml_attr_t* attrs, int n) {
  const char* parent = x->depth > 0 ? x->stack[x->depth - 1] : "";
  if (x->depth == 0) {
    static const char* const allowed[] = {"version", NULL};
    if (strcmp(elem, "system") != 0 || x->seen_system)
      return xml_error(x, "expected one <system> root element, found <%s>", elem);
    CHECK(xml_attrs_known(x, elem, attrs, n, allowed));
    const char* v = xml_attr_get(attrs, n, "version");
    if (v != NULL && strcmp(v, "1") != 0)
      return xml_error(x, "<system version=\"%s\">: this Baton reads version 1", v);
    x->seen_system = true;
    return ncclSuccess;
  }
  if (strcmp(elem, "cpu") == 0) {
    static const char* const allowed[] = {"numaid", "affinity", NULL};
    if (strcmp(parent, "system") != 0) return xml_error(x, "<cpu> must be inside <system>");
    CHECK(xml_attrs_known(x, elem, attrs, n, allowed));
    CHECK(xml_int(x, attrs, n, elem, "numaid", -1, -1, &x->cpu_numa));
    const char* aff = xml_attr_get(attrs, n, "affinity");
    if (aff != NULL && strlen(aff) >= sizeof(x->cpu_affinity))
      return xml_error(x, "<cpu affinity>: longer than %d characters", TOPO_CPUS_MAX - 1);
    snprintf(x->cpu_affinity, sizeof(x->cpu_affinity), "%s", aff ? aff : "");
    x->in_cpu = true;
    return ncclSuccess;
  }
  if (strcmp(elem, "pci") == 0) {
    static const char* const allowed[] = {"busid", NULL};
    int64_t id = -1; /* set by xml_busid on success (the compiler cannot see it) */
    if (strcmp(parent, "cpu") != 0 && strcmp(parent, "pci") != 0 && strcmp(parent, "system") != 0)
      return xml_error(x, "<pci> must be inside <system>, <cpu> or <pci>, not <%s>", parent);
    CHECK(xml_attrs_known(x, elem, attrs, n, allowed));
    CHECK(xml_busid(x, attrs, n, elem, "busid", &id));
    topo_busid_format(id, x->pci[x->npci++]);
    return ncclSuccess;
  }
  if (strcmp(elem, "gpu") == 0) {
    if (strcmp(parent, "cpu") != 0 && strcmp(parent, "pci") != 0 && strcmp(parent, "system") != 0)
      return xml_error(x, "<gpu> must be inside <system>, <cpu> or <pci>, not <%s>", parent);
    return xml_open_gpu(x, attrs, n);
  }
  if (strcmp(elem, "nvlink") == 0) {
    if (strcmp(parent, "gpu") != 0) return xml_error(x, "<nvlink> must be inside <gpu>");
    return xml_open_nvlink(x, attrs, n);
  }
  if (strcmp(elem, "nic") == 0) {
    if (strcmp(parent, "system") != 0) return xml_error(x, "<nic> must be inside <system>");
    return xml_open_nic(x, attrs, n);
  }
  return xml_error(x, "unknown element <%s> (expected system, cpu, pci, gpu, nvlink or nic)", elem);
}

static void xml_close(xml_parser_t* x, const char* elem) {
  if (strcmp(elem, "pci") == 0)
    x->npci--;
  else if (strcmp(elem, "gpu") == 0)
    x->cur_gpu = -1;
  else if (strcmp(elem, "cpu") == 0)
    x->in_cpu = false;
}

/* ---- Tokens ---- */
static void xml_skip_space(xml_parser_t* x) {
  while (*x->p != '\0' && isspace((unsigned char)*x->p)) {
    if (*x->p == '\n') x->line++;
    x->p++;
  }
}

/* Skips past `end`, counting lines; false if the text ends first. */
static bool xml_skip_past(xml_parser_t* x, const char* end) {
  const char* e = strstr(x->p, end);
  if (e == NULL) return false;
  for (; x->p < e; x->p++)
    if (*x->p == '\n') x->line++;
  x->p += strlen(end);
  return true;
}

static bool xml_name_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '-' || c == ':' || c == '.';
}

static ncclResult_t xml_read_name(xml_parser_t* x, char* out, const char* what) {
  size_t n = 0;
  while (xml_name_char(x->p[n])) n++;
  if (n == 0) return xml_error(x, "expected %s, found '%.10s'", what, x->p);
  if (n >= XML_NAME_MAX) return xml_error(x, "%s '%.*s' is too long", what, (int)n, x->p);
  memcpy(out, x->p, n);
  out[n] = '\0';
  x->p += n;
  return ncclSuccess;
}

static ncclResult_t xml_read_value(xml_parser_t* x, char* out) {
  char quote = *x->p;
  size_t n = 0;
  int start = x->line;
  if (quote != '"' && quote != '\'') return xml_error(x, "expected a quoted attribute value");
  x->p++;
  while (*x->p != quote) {
    char c = *x->p;
    if (c == '\0') {
      x->line = start;
      return xml_error(x, "unterminated attribute value");
    }
    if (c == '<') return xml_error(x, "'<' inside an attribute value");
    if (c == '\n') x->line++;
    if (c == '&') {
      static const struct {
        const char* ent;
        char ch;
      } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
      size_t k = 0;
      while (k < sizeof(ents) / sizeof(ents[0]) && strncmp(x->p, ents[k].ent, strlen(ents[k].ent)))
        k++;
      if (k == sizeof(ents) / sizeof(ents[0])) return xml_error(x, "unknown entity '%.8s'", x->p);
      c = ents[k].ch;
      x->p += strlen(ents[k].ent) - 1;
    }
    if (n + 1 >= XML_VALUE_MAX)
      return xml_error(x, "attribute value longer than %d characters", XML_VALUE_MAX - 1);
    out[n++] = c;
    x->p++;
  }
  out[n] = '\0';
  x->p++;
  return ncclSuccess;
}

static ncclResult_t xml_tag_close(xml_parser_t* x) {
  char name[XML_NAME_MAX];
  x->p += 2;
  CHECK(xml_read_name(x, name, "an element name"));
  xml_skip_space(x);
  if (*x->p != '>') return xml_error(x, "expected '>' to end </%s>", name);
  x->p++;
  if (x->depth == 0) return xml_error(x, "</%s> closes nothing", name);
  if (strcmp(x->stack[x->depth - 1], name) != 0)
    return xml_error(x, "</%s> closes <%s> opened at line %d", name, x->stack[x->depth - 1],
                     x->stack_line[x->depth - 1]);
  x->depth--;
  xml_close(x, name);
  return ncclSuccess;
}

static ncclResult_t xml_tag_open(xml_parser_t* x) {
  char name[XML_NAME_MAX];
  xml_attr_t attrs[XML_MAX_ATTRS];
  int n = 0, line = x->line;
  x->p++;
  CHECK(xml_read_name(x, name, "an element name"));
  for (;;) {
    xml_skip_space(x);
    if (*x->p == '/' || *x->p == '>') break;
    if (n == XML_MAX_ATTRS) return xml_error(x, "<%s> has more than %d attributes", name, n);
    CHECK(xml_read_name(x, attrs[n].name, "an attribute name"));
    for (int i = 0; i < n; i++)
      if (strcmp(attrs[i].name, attrs[n].name) == 0)
        return xml_error(x, "<%s> repeats attribute '%s'", name, attrs[n].name);
    xml_skip_space(x);
    if (*x->p != '=') return xml_error(x, "expected '=' after attribute '%s'", attrs[n].name);
    x->p++;
    xml_skip_space(x);
    CHECK(xml_read_value(x, attrs[n].value));
    n++;
  }
  bool empty = *x->p == '/';
  if (empty && x->p[1] != '>') return xml_error(x, "expected '/>' to end <%s>", name);
  x->p += empty ? 2 : 1;
  int keep = x->line;
  x->line = line; /* semantic errors point at the tag's first line */
  ncclResult_t res = xml_open(x, name, attrs, n);
  x->line = keep;
  if (res != ncclSuccess) return res;
  if (empty) {
    xml_close(x, name);
    return ncclSuccess;
  }
  if (x->depth == XML_MAX_DEPTH)
    return xml_error(x, "elements nested deeper than %d", XML_MAX_DEPTH);
  snprintf(x->stack[x->depth], XML_NAME_MAX, "%s", name);
  x->stack_line[x->depth++] = line;
  return ncclSuccess;
}

static ncclResult_t xml_run(xml_parser_t* x) {
  for (;;) {
    xml_skip_space(x);
    if (*x->p == '\0') break;
    if (*x->p != '<') return xml_error(x, "unexpected text '%.16s'", x->p);
    if (strncmp(x->p, "<!--", 4) == 0) {
      if (!xml_skip_past(x, "-->")) return xml_error(x, "unterminated comment");
    } else if (strncmp(x->p, "<?", 2) == 0) {
      if (!xml_skip_past(x, "?>")) return xml_error(x, "unterminated <? declaration");
    } else if (strncmp(x->p, "</", 2) == 0) {
      CHECK(xml_tag_close(x));
    } else {
      CHECK(xml_tag_open(x));
    }
  }
  if (x->depth > 0)
    return xml_error(x, "<%s> opened at line %d is never closed", x->stack[x->depth - 1],
                     x->stack_line[x->depth - 1]);
  if (!x->seen_system) return xml_error(x, "no <system> element");
  for (int k = 0; k < x->nlinks; k++) {
    bool found = false;
    for (int i = 0; i < x->ngpus && !found; i++) found = x->gpus[i].bus_id == x->links[k].to;
    if (!found) {
      char to[TOPO_BUSID_LEN];
      topo_busid_format(x->links[k].to, to);
      x->line = x->link_lines[k];
      return xml_error(x, "<nvlink target=\"%s\">: no <gpu> has that bus id", to);
    }
  }
  return ncclSuccess;
}

ncclResult_t topo_xml_parse(const char* text, const char* name, topo_system_t** out) {
  xml_parser_t* x = NULL;
  CHECK(MEM_CALLOC(&x, 1));
  x->name = name;
  x->p = text;
  x->line = 1;
  x->cur_gpu = -1;
  ncclResult_t res = xml_run(x);
  if (res == ncclSuccess)
    res = topo_system_build(x->gpus, x->ngpus, x->links, x->nlinks, name, out);
  if (res == ncclSuccess) { /* the NICs go to the system as they are */
    (*out)->nics = x->nics;
    (*out)->nnics = x->nnics;
    x->nics = NULL;
  }
  free(x->nics);
  free(x->gpus);
  free(x->links);
  free(x->link_lines);
  free(x);
  return res;
}

ncclResult_t topo_xml_load(const char* path, topo_system_t** out) {
  FILE* f = fopen(path, "re");
  char* text = NULL;
  size_t len = 0;
  if (f == NULL) {
    WARN("NCCL_TOPO_FILE: cannot open %s: %s", path, strerror(errno));
    return ncclInvalidUsage;
  }
  ssize_t got = getdelim(&text, &len, '\0', f);
  bool failed = ferror(f) != 0;
  fclose(f);
  if (failed) {
    WARN("NCCL_TOPO_FILE: reading %s failed: %s", path, strerror(errno));
    free(text);
    return ncclSystemError;
  }
  ncclResult_t res = topo_xml_parse(got > 0 ? text : "", path, out);
  free(text);
  if (res == ncclSuccess)
    INFO(NCCL_GRAPH, "Topology: loaded %d GPU(s) from %s", (*out)->ngpus, path);
  return res;
}
