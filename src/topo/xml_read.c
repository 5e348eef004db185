/* Reading topology XML: stock NCCL's format and Baton's earlier one (see xml_info.h). A small
 * streaming parser: elements, attributes (quoted, with the five standard entities), comments,
 * <?..?> declarations; no text content. */
#include <ctype.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>

#include "topo/xml_info.h"

#define XML_MAX_DEPTH 32
#define XML_MAX_ATTRS 24
#define XML_NAME_MAX 32
#define XML_VALUE_MAX 512

typedef struct xml_attr {
  char name[XML_NAME_MAX];
  char value[XML_VALUE_MAX];
} xml_attr_t;

/* One <pci> element being read. */
typedef struct xml_pci {
  int64_t bus_id;
  char cls[16];    /* class attribute, "" when absent */
  bool has_device; /* a <gpu> or <nic> inside it: it is that device's own function */
  bool has_children;
} xml_pci_t;

typedef struct xml_link {
  int64_t from, to;
  int count;
  char tclass[16];
  int line;
} xml_link_t;

typedef struct xml_parser {
  const char* name; /* file name, for messages */
  const char* p;
  int line;
  int depth;
  char stack[XML_MAX_DEPTH][XML_NAME_MAX];
  int stack_line[XML_MAX_DEPTH];
  int skip_depth; /* > 0: inside an unknown element opened at this depth */
  bool seen_system;
  /* what the elements describe */
  bool in_cpu;
  int cpu_numa;
  char cpu_affinity[TOPO_CPUS_MAX];
  int npci;
  xml_pci_t pci[XML_MAX_DEPTH];
  int cur_gpu;        /* index in gpus, -1 outside a gpu */
  bool gpu_busid_own; /* the current gpu named its bus id itself (Baton's form) */
  int cur_nic;        /* index in info->nics, -1 outside a nic */
  topo_nic_t* nets;   /* every <net>, as the system's NICs (topo_system_t.nics) */
  int nnets, nets_cap;
  topo_gpu_t* gpus;
  int ngpus, gpus_cap;
  xml_link_t* links;
  int nlinks, links_cap;
  topo_xml_info_t* info;
  char ignored[8][XML_NAME_MAX * 2]; /* "elem.attr" already reported */
  int nignored;
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

static ncclResult_t xml_oom(const xml_parser_t* x) {
  return xml_error(x, "out of memory");
}

/* An INFO line per element/attribute name the reader does not use, once per file. */
static void xml_note_ignored(xml_parser_t* x, const char* elem, const char* attr) {
  char key[XML_NAME_MAX * 2];
  snprintf(key, sizeof(key), "%s.%s", elem, attr ? attr : "");
  for (int i = 0; i < x->nignored; i++)
    if (strcmp(x->ignored[i], key) == 0) return;
  if (x->nignored < 8) snprintf(x->ignored[x->nignored++], sizeof(x->ignored[0]), "%s", key);
  if (attr)
    INFO(NCCL_GRAPH, "Topology file %s:%d: attribute '%s' of <%s> is not used; skipped", x->name,
         x->line, attr, elem);
  else
    INFO(NCCL_GRAPH, "Topology file %s:%d: element <%s> is not used; skipped", x->name, x->line,
         elem);
}

static const char* xml_attr_get(const xml_attr_t* attrs, int n, const char* name) {
  for (int i = 0; i < n; i++)
    if (strcmp(attrs[i].name, name) == 0) return attrs[i].value;
  return NULL;
}

/* Notes the attributes outside used[] (NULL-terminated) as skipped. */
static void xml_attrs_used(xml_parser_t* x, const char* elem, const xml_attr_t* attrs, int n,
                           const char* const* used) {
  for (int i = 0; i < n; i++) {
    bool ok = false;
    for (const char* const* a = used; *a != NULL; a++) ok |= strcmp(attrs[i].name, *a) == 0;
    if (!ok) xml_note_ignored(x, elem, attrs[i].name);
  }
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

static ncclResult_t xml_busid_value(const xml_parser_t* x, const char* elem, const char* name,
                                    const char* v, int64_t* out) {
  int64_t id = topo_busid_parse(v);
  if (id < 0)
    return xml_error(x, "<%s %s=\"%s\">: expected a PCI bus id like 0000:3b:00.0", elem, name, v);
  *out = id;
  return ncclSuccess;
}

static ncclResult_t xml_busid(const xml_parser_t* x, const xml_attr_t* attrs, int n,
                              const char* elem, const char* name, int64_t* out) {
  const char* v = xml_attr_get(attrs, n, name);
  if (v == NULL) return xml_error(x, "<%s> needs a %s attribute", elem, name);
  return xml_busid_value(x, elem, name, v, out);
}

/* ` name="value"` for every attribute but skip (NULL-terminated), escaped: what a dump writes
 * back. NULL (and no error) when there is none. */
static ncclResult_t xml_attrs_text(const xml_parser_t* x, const xml_attr_t* attrs, int n,
                                   const char* const* skip, char** out) {
  char* buf = NULL;
  size_t len = 0;
  *out = NULL;
  FILE* f = open_memstream(&buf, &len);
  if (f == NULL) return xml_oom(x);
  int written = 0;
  for (int i = 0; i < n; i++) {
    bool skipped = false;
    for (const char* const* s = skip; *s != NULL; s++) skipped |= strcmp(attrs[i].name, *s) == 0;
    if (skipped) continue;
    fprintf(f, " %s=\"", attrs[i].name);
    topo_xml_escape(f, attrs[i].value);
    fputc('"', f);
    written++;
  }
  bool failed = ferror(f) != 0;
  fclose(f);
  if (failed) {
    free(buf);
    return xml_oom(x);
  }
  if (written == 0) {
    free(buf);
    return ncclSuccess;
  }
  *out = buf;
  return ncclSuccess;
}

/* Keeps the extra attributes of a <cpu> or <pci> for the writer. */
static ncclResult_t xml_keep_elem(xml_parser_t* x, int type, int numa, int64_t bus_id,
                                  const xml_attr_t* attrs, int n) {
  static const char* const cpu_keys[] = {"numaid", "affinity", NULL};
  static const char* const pci_keys[] = {"busid", NULL};
  char* text = NULL;
  CHECK(xml_attrs_text(x, attrs, n, type == TOPO_XML_TYPE_CPU ? cpu_keys : pci_keys, &text));
  if (text == NULL) return ncclSuccess;
  topo_xml_info_t* info = x->info;
  for (int i = 0; i < info->nelems; i++) { /* a cpu listed twice: the first one's attributes */
    topo_xml_elem_t* e = &info->elems[i];
    if (e->type == type && (type == TOPO_XML_TYPE_CPU ? e->numa == numa : e->bus_id == bus_id)) {
      free(text);
      return ncclSuccess;
    }
  }
  if (info->nelems == info->elems_cap) {
    int cap = info->elems_cap ? 2 * info->elems_cap : 16;
    topo_xml_elem_t* p = realloc(info->elems, (size_t)cap * sizeof(*p));
    if (p == NULL) {
      free(text);
      return xml_oom(x);
    }
    info->elems = p;
    info->elems_cap = cap;
  }
  info->elems[info->nelems++] =
      (topo_xml_elem_t){.type = type, .numa = numa, .bus_id = bus_id, .attrs = text};
  return ncclSuccess;
}

/* The '/'-separated bus ids of the enclosing bridges: pci[0 .. upto). */
static ncclResult_t xml_pci_path(const xml_parser_t* x, int upto, char* out, size_t cap) {
  size_t len = 0;
  out[0] = '\0';
  for (int i = 0; i < upto; i++) {
    char id[TOPO_BUSID_LEN];
    topo_busid_format(x->pci[i].bus_id, id);
    int w = snprintf(out + len, cap - len, "%s%s", i ? "/" : "", id);
    if (w < 0 || (size_t)w >= cap - len) return xml_error(x, "nested in too many <pci> elements");
    len += (size_t)w;
  }
  return ncclSuccess;
}

static bool xml_class_is_gpu(const char* cls) {
  return strncmp(cls, "0x03", 4) == 0;
}

/* ---- GPUs and links -------------------------------------------------------------------------- */
/* A device's bus id (a GPU, a NIC, another device) must name one device of the file. */
static ncclResult_t xml_device_unique(xml_parser_t* x, int64_t bus_id, const char* label) {
  bool taken = false;
  for (int i = 0; i < x->ngpus && !taken; i++) taken = x->gpus[i].bus_id == bus_id;
  for (int i = 0; i < x->info->nnics && !taken; i++) taken = x->info->nics[i].bus_id == bus_id;
  if (!taken) return ncclSuccess;
  char id[TOPO_BUSID_LEN];
  topo_busid_format(bus_id, id);
  return xml_error(x, "%s %s is listed twice", label, id);
}

static ncclResult_t xml_add_gpu(xml_parser_t* x, const topo_gpu_t* g, const char* label) {
  CHECK(xml_device_unique(x, g->bus_id, label));
  if (x->ngpus == x->gpus_cap) {
    int cap = x->gpus_cap ? 2 * x->gpus_cap : 8;
    if (cap > TOPO_MAX_GPUS) return xml_error(x, "more than %d GPUs", TOPO_MAX_GPUS);
    topo_gpu_t* p = realloc(x->gpus, (size_t)cap * sizeof(*p));
    if (p == NULL) return xml_oom(x);
    x->gpus = p;
    x->gpus_cap = cap;
  }
  x->gpus[x->ngpus++] = *g;
  return ncclSuccess;
}

/* A GPU at bus_id below bridges pci[0 .. depth) of the current cpu. */
static void xml_gpu_place(xml_parser_t* x, topo_gpu_t* g, int64_t bus_id) {
  memset(g, 0, sizeof(*g));
  g->bus_id = bus_id;
  g->rank = g->dev = -1;
  g->numa = x->in_cpu ? x->cpu_numa : -1;
  snprintf(g->cpus, sizeof(g->cpus), "%s", x->in_cpu ? x->cpu_affinity : "");
}

static ncclResult_t xml_open_gpu(xml_parser_t* x, const xml_attr_t* attrs, int n) {
  static const char* const used[] = {"busid", "rank", "dev", "sm", "nvswitch", "gdr", NULL};
  topo_gpu_t g;
  int64_t bus_id = -1;
  int path_depth = x->npci;
  const char* own = xml_attr_get(attrs, n, "busid");
  xml_attrs_used(x, "gpu", attrs, n, used);
  if (own != NULL) { /* Baton's earlier form */
    CHECK(xml_busid_value(x, "gpu", "busid", own, &bus_id));
  } else {
    if (x->npci == 0) return xml_error(x, "<gpu> without busid must be inside its <pci>");
    xml_pci_t* pci = &x->pci[x->npci - 1];
    if (pci->has_device) return xml_error(x, "a second device inside one <pci>");
    pci->has_device = true;
    bus_id = pci->bus_id;
    path_depth = x->npci - 1;
  }
  xml_gpu_place(x, &g, bus_id);
  CHECK(xml_pci_path(x, path_depth, g.pci_path, sizeof(g.pci_path)));
  CHECK(xml_int(x, attrs, n, "gpu", "rank", -1, -1, &g.rank));
  CHECK(xml_int(x, attrs, n, "gpu", "dev", -1, -1, &g.dev));
  CHECK(xml_int(x, attrs, n, "gpu", "sm", 0, 0, &g.sm));
  CHECK(xml_int(x, attrs, n, "gpu", "nvswitch", 0, 0, &g.nvswitch_links));
  int gdr = 0;
  CHECK(xml_int(x, attrs, n, "gpu", "gdr", 0, 0, &gdr));
  CHECK(xml_add_gpu(x, &g, "<gpu>"));
  x->cur_gpu = x->ngpus - 1;
  x->gpu_busid_own = own != NULL;
  return ncclSuccess;
}

static ncclResult_t xml_open_nvlink(xml_parser_t* x, const xml_attr_t* attrs, int n) {
  static const char* const used[] = {"target", "count", "tclass", NULL};
  xml_link_t l;
  memset(&l, 0, sizeof(l));
  xml_attrs_used(x, "nvlink", attrs, n, used);
  CHECK(xml_busid(x, attrs, n, "nvlink", "target", &l.to));
  CHECK(xml_int(x, attrs, n, "nvlink", "count", 1, 0, &l.count));
  const char* tclass = xml_attr_get(attrs, n, "tclass");
  snprintf(l.tclass, sizeof(l.tclass), "%.15s", tclass ? tclass : "");
  l.from = x->gpus[x->cur_gpu].bus_id;
  l.line = x->line;
  bool to_gpu = tclass == NULL || xml_class_is_gpu(tclass);
  if (to_gpu && l.to == l.from) {
    if (tclass == NULL) return xml_error(x, "<nvlink> from a GPU to itself");
    /* Some cloud images' files list a GPU's NVLink bridge as a link to itself: nothing to use. */
    INFO(NCCL_GRAPH, "Topology file %s:%d: an NVLink from a GPU to itself is not used", x->name,
         x->line);
    return ncclSuccess;
  }
  if (x->nlinks == x->links_cap) {
    int cap = x->links_cap ? 2 * x->links_cap : 16;
    xml_link_t* p = realloc(x->links, (size_t)cap * sizeof(*p));
    if (p == NULL) return xml_oom(x);
    x->links = p;
    x->links_cap = cap;
  }
  x->links[x->nlinks++] = l;
  return ncclSuccess;
}

/* ---- NICs and other devices ------------------------------------------------------------------ */
static ncclResult_t xml_add_nic(xml_parser_t* x, int64_t bus_id, int path_depth) {
  topo_xml_info_t* info = x->info;
  if (bus_id >= 0) CHECK(xml_device_unique(x, bus_id, "<pci> device"));
  if (info->nnics == info->nics_cap) {
    int cap = info->nics_cap ? 2 * info->nics_cap : 8;
    topo_xml_nic_t* p = realloc(info->nics, (size_t)cap * sizeof(*p));
    if (p == NULL) return xml_oom(x);
    info->nics = p;
    info->nics_cap = cap;
  }
  topo_xml_nic_t* nic = &info->nics[info->nnics];
  memset(nic, 0, sizeof(*nic));
  nic->numa = x->in_cpu ? x->cpu_numa : -1;
  snprintf(nic->cpus, sizeof(nic->cpus), "%s", x->in_cpu ? x->cpu_affinity : "");
  nic->bus_id = bus_id;
  CHECK(xml_pci_path(x, path_depth, nic->pci_path, sizeof(nic->pci_path)));
  info->nnics++;
  return ncclSuccess;
}

static ncclResult_t xml_open_nic(xml_parser_t* x, const xml_attr_t* attrs, int n) {
  static const char* const used[] = {NULL};
  xml_attrs_used(x, "nic", attrs, n, used);
  if (x->npci > 0 && strcmp(x->stack[x->depth - 1], "pci") == 0) {
    xml_pci_t* pci = &x->pci[x->npci - 1];
    if (pci->has_device) return xml_error(x, "a second device inside one <pci>");
    pci->has_device = true;
    CHECK(xml_add_nic(x, pci->bus_id, x->npci - 1));
  } else {
    CHECK(xml_add_nic(x, -1, x->npci));
  }
  x->cur_nic = x->info->nnics - 1;
  return ncclSuccess;
}

/* A <net> as one of the system's NICs: name, port and speed (stock's attributes); rdma and active
 * are Baton's (a file without them: a port >= 1 is an RDMA port, as stock numbers them, and every
 * listed port is up, since stock lists only those). */
static ncclResult_t xml_add_net(xml_parser_t* x, const topo_xml_nic_t* nic, const xml_attr_t* attrs,
                                int n) {
  topo_nic_t d = {.bus_id = nic->bus_id, .numa = nic->numa};
  const char* name = xml_attr_get(attrs, n, "name");
  size_t len = name != NULL ? strlen(name) : 0;
  if (len >= sizeof(d.name))
    return xml_error(x, "<net name>: longer than %d characters", (int)sizeof(d.name) - 1);
  memcpy(d.name, name != NULL ? name : "", len);
  memcpy(d.pci_path, nic->pci_path, sizeof(d.pci_path));
  int rdma = 0, active = 1;
  CHECK(xml_int(x, attrs, n, "net", "port", 0, 0, &d.port));
  CHECK(xml_int(x, attrs, n, "net", "speed", 0, 0, &d.speed_mbps));
  CHECK(xml_int(x, attrs, n, "net", "rdma", d.port >= 1, 0, &rdma));
  CHECK(xml_int(x, attrs, n, "net", "active", 1, 0, &active));
  d.rdma = rdma != 0;
  d.active = active != 0;
  if (x->nnets == x->nets_cap) {
    int cap = x->nets_cap ? 2 * x->nets_cap : 8;
    topo_nic_t* p = realloc(x->nets, (size_t)cap * sizeof(*p));
    if (p == NULL) return xml_oom(x);
    x->nets = p;
    x->nets_cap = cap;
  }
  x->nets[x->nnets++] = d;
  return ncclSuccess;
}

static ncclResult_t xml_open_net(xml_parser_t* x, const xml_attr_t* attrs, int n) {
  static const char* const none[] = {NULL};
  topo_xml_nic_t* nic = &x->info->nics[x->cur_nic];
  int dev = 0;
  CHECK(xml_int(x, attrs, n, "net", "dev", 0, 0, &dev)); /* stock needs it: check it */
  CHECK(xml_add_net(x, nic, attrs, n));
  char* text = NULL;
  CHECK(xml_attrs_text(x, attrs, n, none, &text));
  size_t old = nic->nets ? strlen(nic->nets) : 0, add = text ? strlen(text) : 0;
  char* p = realloc(nic->nets, old + add + 8);
  if (p == NULL) {
    free(text);
    return xml_oom(x);
  }
  snprintf(p + old, add + 8, "<net%s/>\n", text ? text : "");
  nic->nets = p;
  free(text);
  return ncclSuccess;
}

/* A <pci> that held no gpu or nic is a bridge when it has children; as a leaf, a GPU's place
 * (class 0x03..: the GPU is detected) or another device, kept for the writer. */
static ncclResult_t xml_close_pci(xml_parser_t* x) {
  xml_pci_t* pci = &x->pci[x->npci - 1];
  x->npci--;
  if (pci->has_device || pci->has_children) return ncclSuccess;
  if (xml_class_is_gpu(pci->cls)) {
    topo_gpu_t g;
    xml_gpu_place(x, &g, pci->bus_id);
    g.placed_only = true;
    CHECK(xml_pci_path(x, x->npci, g.pci_path, sizeof(g.pci_path)));
    return xml_add_gpu(x, &g, "<pci> of a GPU");
  }
  return xml_add_nic(x, pci->bus_id, x->npci);
}

/* ---- Elements -------------------------------------------------------------------------------- */
static ncclResult_t xml_open_cpu(xml_parser_t* x, const xml_attr_t* attrs, int n) {
  static const char* const used[] = {"numaid",   "affinity", "arch",      "vendor",
                                     "familyid", "modelid",  "host_hash", NULL};
  xml_attrs_used(x, "cpu", attrs, n, used);
  CHECK(xml_int(x, attrs, n, "cpu", "numaid", -1, -1, &x->cpu_numa));
  const char* aff = xml_attr_get(attrs, n, "affinity");
  if (aff != NULL && strlen(aff) >= sizeof(x->cpu_affinity))
    return xml_error(x, "<cpu affinity>: longer than %d characters", TOPO_CPUS_MAX - 1);
  x->cpu_affinity[0] = '\0';
  if (aff != NULL && !topo_cpus_mask_to_list(aff, x->cpu_affinity, sizeof(x->cpu_affinity)))
    snprintf(x->cpu_affinity, sizeof(x->cpu_affinity), "%s", aff); /* a CPU list, or as given */
  x->in_cpu = true;
  return xml_keep_elem(x, TOPO_XML_TYPE_CPU, x->cpu_numa, -1, attrs, n);
}

static ncclResult_t xml_open_pci(xml_parser_t* x, const xml_attr_t* attrs, int n) {
  static const char* const used[] = {
      "busid",      "class",      "vendor", "device", "subsystem_vendor", "subsystem_device",
      "link_speed", "link_width", NULL};
  xml_attrs_used(x, "pci", attrs, n, used);
  if (x->npci > 0) x->pci[x->npci - 1].has_children = true;
  xml_pci_t* pci = &x->pci[x->npci];
  memset(pci, 0, sizeof(*pci));
  CHECK(xml_busid(x, attrs, n, "pci", "busid", &pci->bus_id));
  const char* cls = xml_attr_get(attrs, n, "class");
  snprintf(pci->cls, sizeof(pci->cls), "%.15s", cls ? cls : "");
  int width = 0;
  CHECK(xml_int(x, attrs, n, "pci", "link_width", 0, 0, &width));
  x->npci++;
  return xml_keep_elem(x, TOPO_XML_TYPE_PCI, -1, pci->bus_id, attrs, n);
}

/* An element opened (depth is its parent's depth). */
static ncclResult_t xml_open(xml_parser_t* x, const char* elem, const xml_attr_t* attrs, int n) {
  const char* parent = x->depth > 0 ? x->stack[x->depth - 1] : "";
  if (x->depth == 0) {
    static const char* const used[] = {"version", NULL};
    if (strcmp(elem, "system") != 0 || x->seen_system)
      return xml_error(x, "expected one <system> root element, found <%s>", elem);
    xml_attrs_used(x, elem, attrs, n, used);
    int version = 1;
    CHECK(xml_int(x, attrs, n, elem, "version", 1, 1, &version));
    if (version != 1)
      INFO(NCCL_GRAPH, "Topology file %s: <system version=\"%d\">, read as version 1", x->name,
           version);
    x->seen_system = true;
    return ncclSuccess;
  }
  bool in_container =
      strcmp(parent, "system") == 0 || strcmp(parent, "cpu") == 0 || strcmp(parent, "pci") == 0;
  if (strcmp(elem, "cpu") == 0) {
    if (strcmp(parent, "system") != 0) return xml_error(x, "<cpu> must be inside <system>");
    return xml_open_cpu(x, attrs, n);
  }
  if (strcmp(elem, "pci") == 0) {
    if (!in_container)
      return xml_error(x, "<pci> must be inside <system>, <cpu> or <pci>, not <%s>", parent);
    return xml_open_pci(x, attrs, n);
  }
  if (strcmp(elem, "gpu") == 0) {
    if (!in_container)
      return xml_error(x, "<gpu> must be inside <system>, <cpu> or <pci>, not <%s>", parent);
    if (x->npci > 0 && strcmp(parent, "pci") == 0) x->pci[x->npci - 1].has_children = true;
    return xml_open_gpu(x, attrs, n);
  }
  if (strcmp(elem, "nvlink") == 0) {
    if (strcmp(parent, "gpu") != 0) return xml_error(x, "<nvlink> must be inside <gpu>");
    return xml_open_nvlink(x, attrs, n);
  }
  if (strcmp(elem, "nic") == 0) {
    if (strcmp(parent, "cpu") != 0 && strcmp(parent, "pci") != 0)
      return xml_error(x, "<nic> must be inside <cpu> or <pci>, not <%s>", parent);
    if (strcmp(parent, "pci") == 0) x->pci[x->npci - 1].has_children = true;
    return xml_open_nic(x, attrs, n);
  }
  if (strcmp(elem, "net") == 0) {
    if (strcmp(parent, "nic") != 0) return xml_error(x, "<net> must be inside <nic>");
    return xml_open_net(x, attrs, n);
  }
  /* Something newer stock versions write (c2c, pcilink, ...): skipped with its contents. */
  if (strcmp(parent, "pci") == 0) x->pci[x->npci - 1].has_children = true;
  xml_note_ignored(x, elem, NULL);
  x->skip_depth = x->depth + 1;
  return ncclSuccess;
}

static ncclResult_t xml_close(xml_parser_t* x, const char* elem) {
  if (x->skip_depth > 0) {
    if (x->depth + 1 == x->skip_depth) x->skip_depth = 0;
    return ncclSuccess;
  }
  if (strcmp(elem, "pci") == 0) return xml_close_pci(x);
  if (strcmp(elem, "gpu") == 0)
    x->cur_gpu = -1;
  else if (strcmp(elem, "nic") == 0)
    x->cur_nic = -1;
  else if (strcmp(elem, "cpu") == 0)
    x->in_cpu = false;
  return ncclSuccess;
}

/* ---- Tokens ---------------------------------------------------------------------------------- */
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
    if (c == '&' && x->p[1] == '#') { /* &#10; or &#xa;: what the writer uses for controls */
      bool hex = x->p[2] == 'x';
      char* end = NULL;
      long v = strtol(x->p + (hex ? 3 : 2), &end, hex ? 16 : 10);
      if (end == x->p + (hex ? 3 : 2) || *end != ';' || v < 1 || v > 127)
        return xml_error(x, "bad character reference '%.8s'", x->p);
      c = (char)v;
      x->p = end;
    } else if (c == '&') {
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
  return xml_close(x, name);
}

static ncclResult_t xml_tag_open(xml_parser_t* x) {
  char name[XML_NAME_MAX];
  xml_attr_t* attrs = NULL;
  int n = 0, line = x->line;
  ncclResult_t res = ncclSuccess;
  x->p++;
  CHECK(xml_read_name(x, name, "an element name"));
  CHECK(MEM_CALLOC(&attrs, XML_MAX_ATTRS));
  for (;;) {
    xml_skip_space(x);
    if (*x->p == '/' || *x->p == '>') break;
    if (n == XML_MAX_ATTRS) {
      res = xml_error(x, "<%s> has more than %d attributes", name, n);
      goto out;
    }
    CHECK_GOTO(xml_read_name(x, attrs[n].name, "an attribute name"), res, out);
    for (int i = 0; i < n; i++) {
      if (strcmp(attrs[i].name, attrs[n].name) != 0) continue;
      res = xml_error(x, "<%s> repeats attribute '%s'", name, attrs[n].name);
      goto out;
    }
    xml_skip_space(x);
    if (*x->p != '=') {
      res = xml_error(x, "expected '=' after attribute '%s'", attrs[n].name);
      goto out;
    }
    x->p++;
    xml_skip_space(x);
    CHECK_GOTO(xml_read_value(x, attrs[n].value), res, out);
    n++;
  }
  bool empty = *x->p == '/';
  if (empty && x->p[1] != '>') {
    res = xml_error(x, "expected '/>' to end <%s>", name);
    goto out;
  }
  x->p += empty ? 2 : 1;
  if (x->depth == XML_MAX_DEPTH) {
    res = xml_error(x, "elements nested deeper than %d", XML_MAX_DEPTH);
    goto out;
  }
  int keep = x->line;
  x->line = line; /* semantic errors point at the tag's first line */
  if (x->skip_depth == 0) res = xml_open(x, name, attrs, n);
  if (res == ncclSuccess) {
    snprintf(x->stack[x->depth], XML_NAME_MAX, "%s", name);
    x->stack_line[x->depth++] = line;
    if (empty) {
      x->depth--;
      res = xml_close(x, name);
    }
  }
  x->line = keep;
out:
  free(attrs);
  return res;
}

/* The links, once every GPU is known: to a GPU (tclass 0x03.., or none: Baton's form), or to an
 * NVSwitch (any other class), which counts toward the GPU's switch links. */
static ncclResult_t xml_resolve_links(xml_parser_t* x, topo_link_t* out, int* nout) {
  int n = 0;
  for (int k = 0; k < x->nlinks; k++) {
    const xml_link_t* l = &x->links[k];
    bool to_gpu = l->tclass[0] == '\0' || xml_class_is_gpu(l->tclass);
    if (!to_gpu) {
      if (strcmp(l->tclass, "0x068001") == 0) continue; /* to the CPU (C2C): not modelled */
      for (int i = 0; i < x->ngpus; i++)
        if (x->gpus[i].bus_id == l->from) x->gpus[i].nvswitch_links += l->count;
      continue;
    }
    bool found = false;
    for (int i = 0; i < x->ngpus && !found; i++) found = x->gpus[i].bus_id == l->to;
    if (!found) {
      char to[TOPO_BUSID_LEN];
      topo_busid_format(l->to, to);
      x->line = l->line;
      return xml_error(x, "<nvlink target=\"%s\">: no <gpu> has that bus id", to);
    }
    out[n++] = (topo_link_t){.from = l->from, .to = l->to, .count = l->count};
  }
  *nout = n;
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
  return ncclSuccess;
}

ncclResult_t topo_xml_parse(const char* text, const char* name, topo_system_t** out) {
  xml_parser_t* x = NULL;
  topo_link_t* links = NULL;
  int nlinks = 0;
  CHECK(MEM_CALLOC(&x, 1));
  ncclResult_t res = MEM_CALLOC(&x->info, 1);
  if (res == ncclSuccess) {
    x->name = name;
    x->p = text;
    x->line = 1;
    x->cur_gpu = x->cur_nic = -1;
    res = xml_run(x);
  }
  if (res == ncclSuccess) res = MEM_CALLOC(&links, (size_t)x->nlinks + 1);
  if (res == ncclSuccess) res = xml_resolve_links(x, links, &nlinks);
  if (res == ncclSuccess) res = topo_system_build(x->gpus, x->ngpus, links, nlinks, name, out);
  if (res == ncclSuccess) {
    (*out)->xml = x->info;
    x->info = NULL;
    (*out)->nics = x->nets;
    (*out)->nnics = x->nnets;
    x->nets = NULL;
  }
  topo_xml_info_free(x->info);
  free(x->nets);
  free(links);
  free(x->gpus);
  free(x->links);
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
    INFO(NCCL_GRAPH, "Topology: loaded %d GPU(s) and %d other device(s) from %s", (*out)->ngpus,
         (*out)->xml ? (*out)->xml->nnics : 0, path);
  return res;
}
