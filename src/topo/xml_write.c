/* Writing topology XML in stock NCCL's format (see xml_info.h), so stock loads Baton's dumps:
 * every <cpu> gets the numaid, affinity (a cpumask), arch, vendor, familyid and modelid stock
 * reads, every <pci> its busid, class, link_speed and link_width, every <gpu> dev, sm, rank and
 * gdr. What a file said is written back; what is missing comes from this machine (/proc/cpuinfo,
 * sysfs), else from values stock accepts (class 0x030200 for a GPU, 0x060400 for a bridge, link
 * width 0 = unknown, gdr 0). The output is canonical: formatting a parsed dump gives it back. */
#include <ctype.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/utsname.h>

#include "topo/xml_info.h"

#define XML_SYSFS_PCI "/sys/bus/pci/devices"
#define XML_CPUS_LIMIT 4096 /* CPU numbers a cpumask here may hold */

/* ---- The info kept from files ---------------------------------------------------------------- */
const char* topo_xml_attrs(const topo_xml_info_t* info, int type, int numa, int64_t bus_id) {
  for (int i = 0; info != NULL && i < info->nelems; i++) {
    const topo_xml_elem_t* e = &info->elems[i];
    if (e->type != type) continue;
    if (type == TOPO_XML_TYPE_CPU ? e->numa == numa : e->bus_id == bus_id) return e->attrs;
  }
  return NULL;
}

void topo_xml_info_free(topo_xml_info_t* info) {
  if (info == NULL) return;
  for (int i = 0; i < info->nelems; i++) free(info->elems[i].attrs);
  for (int i = 0; i < info->nnics; i++) free(info->nics[i].nets);
  free(info->elems);
  free(info->nics);
  free(info);
}

void topo_xml_escape(FILE* f, const char* v) {
  for (; *v; v++) {
    unsigned char c = (unsigned char)*v;
    if (c == '&')
      fputs("&amp;", f);
    else if (c == '<')
      fputs("&lt;", f);
    else if (c == '"')
      fputs("&quot;", f);
    else if (c < 0x20)
      fprintf(f, "&#%d;", c); /* a line break or a tab stays inside the value */
    else
      fputc(c, f);
  }
}

/* ---- CPU lists and masks --------------------------------------------------------------------- */
bool topo_cpus_mask_to_list(const char* mask, char* out, size_t len) {
  /* Comma-separated groups of 32 bits in hex, most significant first; every group but the first
   * has 8 digits (Linux prints "ffff,fff00000,..."). */
  uint32_t groups[XML_CPUS_LIMIT / 32];
  int ngroups = 0;
  const char* p = mask;
  while (*p) {
    size_t n = 0;
    while (isxdigit((unsigned char)p[n])) n++;
    if (n == 0 || n > 8 || (ngroups > 0 && n != 8) || ngroups == XML_CPUS_LIMIT / 32) return false;
    uint32_t v = 0;
    for (size_t i = 0; i < n; i++) {
      char c = (char)tolower((unsigned char)p[i]);
      v = v * 16 + (uint32_t)(isdigit((unsigned char)c) ? c - '0' : c - 'a' + 10);
    }
    groups[ngroups++] = v;
    p += n;
    if (*p == ',') {
      p++;
      if (*p == '\0') return false;
    } else if (*p != '\0') {
      return false;
    }
  }
  if (ngroups == 0) return false;
  char buf[TOPO_CPUS_MAX];
  size_t used = 0;
  int run_start = -1, total = ngroups * 32;
  for (int cpu = 0; cpu <= total; cpu++) {
    bool set = cpu < total && ((groups[ngroups - 1 - cpu / 32] >> (cpu % 32)) & 1u);
    if (set && run_start < 0) run_start = cpu;
    if (!set && run_start >= 0) {
      int w = run_start == cpu - 1
                  ? snprintf(buf + used, sizeof(buf) - used, "%s%d", used ? "," : "", run_start)
                  : snprintf(buf + used, sizeof(buf) - used, "%s%d-%d", used ? "," : "", run_start,
                             cpu - 1);
      if (w < 0 || (size_t)w >= sizeof(buf) - used) return false;
      used += (size_t)w;
      run_start = -1;
    }
  }
  buf[used] = '\0';
  snprintf(out, len, "%s", buf);
  return true;
}

bool topo_cpus_list_to_mask(const char* list, char* out, size_t len) {
  unsigned char bits[XML_CPUS_LIMIT / 8];
  memset(bits, 0, sizeof(bits));
  int top = -1;
  const char* p = list;
  if (*p == '\0') return false;
  while (*p) {
    char* end;
    long a = strtol(p, &end, 10), b;
    if (end == p || a < 0 || a >= XML_CPUS_LIMIT) return false;
    p = end;
    b = a;
    if (*p == '-') {
      p++;
      b = strtol(p, &end, 10);
      if (end == p || b < a || b >= XML_CPUS_LIMIT) return false;
      p = end;
    }
    for (long c = a; c <= b; c++) bits[c / 8] |= (unsigned char)(1u << (c % 8));
    if (b > top) top = (int)b;
    if (*p == ',')
      p++;
    else if (*p != '\0')
      return false;
  }
  int groups = top / 32 + 1;
  size_t need = (size_t)groups * 9;
  if (need > len) return false;
  size_t used = 0;
  for (int g = groups - 1; g >= 0; g--) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) v |= (uint32_t)bits[g * 4 + k] << (8 * k);
    used += (size_t)snprintf(out + used, len - used, "%s%08x", used ? "," : "", v);
  }
  /* Only a list in the form the reader produces ("0-3,8"): anything else ("1,0", "007") is
   * written as given, so reading the dump gives the same text back. */
  char back[TOPO_CPUS_MAX];
  return topo_cpus_mask_to_list(out, back, sizeof(back)) && strcmp(back, list) == 0;
}

/* ---- Facts of this machine, for what a file did not say -------------------------------------- */
/* ` arch=".." vendor=".." familyid=".." modelid=".."` from uname and /proc/cpuinfo. */
static void xml_local_cpu(char* out, size_t len) {
  struct utsname u;
  char vendor[64] = "", family[16] = "", model[16] = "", line[256];
  const char* arch = uname(&u) == 0 ? u.machine : "x86_64";
  if (strcmp(arch, "aarch64") == 0) arch = "arm64";
  FILE* f = fopen("/proc/cpuinfo", "re");
  while (f != NULL && fgets(line, sizeof(line), f) != NULL &&
         !(vendor[0] && family[0] && model[0])) {
    char* colon = strchr(line, ':');
    if (colon == NULL) continue;
    char* v = colon + 1;
    while (*v == ' ') v++;
    v[strcspn(v, "\r\n")] = '\0';
    if (strncmp(line, "vendor_id", 9) == 0 && !vendor[0]) snprintf(vendor, sizeof(vendor), "%s", v);
    if (strncmp(line, "cpu family", 10) == 0 && !family[0])
      snprintf(family, sizeof(family), "%s", v);
    if (strncmp(line, "model\t", 6) == 0 && !model[0]) snprintf(model, sizeof(model), "%s", v);
  }
  if (f != NULL) fclose(f);
  int n = snprintf(out, len, " arch=\"%s\"", arch);
  if (n > 0 && (size_t)n < len && strcmp(arch, "x86_64") == 0)
    snprintf(out + n, len - (size_t)n, " vendor=\"%s\" familyid=\"%s\" modelid=\"%s\"",
             vendor[0] ? vendor : "GenuineIntel", family[0] ? family : "6",
             model[0] ? model : "85");
}

/* The class, ids and link of a PCI function from sysfs; def_class when sysfs does not know it. */
static void xml_local_pci(int64_t bus_id, const char* def_class, char* out, size_t len) {
  static const char* const files[] = {
      "class",          "vendor",        "device", "subsystem_vendor", "subsystem_device",
      "max_link_speed", "max_link_width"};
  static const char* const names[] = {
      "class",      "vendor",    "device", "subsystem_vendor", "subsystem_device",
      "link_speed", "link_width"};
  char busid[TOPO_BUSID_LEN], path[PATH_MAX], value[64];
  topo_busid_format(bus_id, busid);
  size_t used = 0;
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    snprintf(path, sizeof(path), "%s/%s/%s", XML_SYSFS_PCI, busid, files[i]);
    topo_read_line(path, value, sizeof(value));
    if (i == 0 && value[0] == '\0') snprintf(value, sizeof(value), "%s", def_class);
    if (i == 5 && value[0] == '\0') continue; /* written below */
    if (i == 6 && value[0] == '\0') snprintf(value, sizeof(value), "0");
    if (value[0] == '\0') continue;
    int w = snprintf(out + used, len - used, " %s=\"%s\"", names[i], value);
    if (w < 0 || (size_t)w >= len - used) break;
    used += (size_t)w;
  }
  if (strstr(out, " link_speed=") == NULL && used < len)
    snprintf(out + used, len - used, " link_speed=\"\"");
}

/* ---- The tree -------------------------------------------------------------------------------- */
/* A leaf of the tree: a GPU or a NIC (other device), with where it sits. */
typedef struct xml_leaf {
  bool gpu;
  int index;                 /* in sys->gpus (a GPU) */
  const topo_xml_nic_t* nic; /* a NIC */
  int numa;
  const char* cpus;
  const char* path;
  int64_t bus_id; /* -1: a <nic> directly in its <cpu> */
} xml_leaf_t;

static int xml_leaf_cmp(const void* pa, const void* pb) {
  const xml_leaf_t* a = pa;
  const xml_leaf_t* b = pb;
  if (a->numa != b->numa) return a->numa < b->numa ? -1 : 1;
  int c = strcmp(a->cpus, b->cpus);
  if (c != 0) return c;
  c = strcmp(a->path, b->path);
  if (c != 0) return c;
  if (a->bus_id != b->bus_id) return a->bus_id < b->bus_id ? -1 : 1;
  return a->gpu != b->gpu ? (a->gpu ? -1 : 1) : 0;
}

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

/* <pci busid=".." ...attributes...> of a bridge or a device. */
static void xml_open_pci(FILE* f, const topo_system_t* sys, int64_t bus_id, const char* def_class,
                         int depth, bool empty) {
  char id[TOPO_BUSID_LEN], local[512];
  topo_busid_format(bus_id, id);
  const char* attrs = topo_xml_attrs(sys->xml, TOPO_XML_TYPE_PCI, -1, bus_id);
  if (attrs == NULL) {
    local[0] = '\0';
    xml_local_pci(bus_id, def_class, local, sizeof(local));
    attrs = local;
  }
  xml_indent(f, depth);
  fprintf(f, "<pci busid=\"%s\"%s%s>\n", id, attrs, empty ? "/" : "");
}

static void xml_write_gpu(FILE* f, const topo_system_t* sys, int i, int depth) {
  const topo_gpu_t* g = &sys->gpus[i];
  char to[TOPO_BUSID_LEN];
  if (g->placed_only) { /* only where it sits, as the file said: detection does the rest */
    xml_open_pci(f, sys, g->bus_id, "0x030200", depth, true);
    return;
  }
  xml_open_pci(f, sys, g->bus_id, "0x030200", depth, false);
  xml_indent(f, depth + 1);
  fprintf(f, "<gpu dev=\"%d\" sm=\"%d\" rank=\"%d\" gdr=\"0\"", g->dev, g->sm, g->rank);
  int nlinks = g->nvswitch_links > 0;
  for (int j = 0; j < sys->ngpus; j++) nlinks += sys->nvlinks[(size_t)i * sys->ngpus + j] > 0;
  if (nlinks == 0) {
    fprintf(f, "/>\n");
  } else {
    fprintf(f, ">\n");
    for (int j = 0; j < sys->ngpus; j++) {
      int count = sys->nvlinks[(size_t)i * sys->ngpus + j];
      if (count <= 0) continue;
      topo_busid_format(sys->gpus[j].bus_id, to);
      xml_indent(f, depth + 2);
      fprintf(f, "<nvlink target=\"%s\" count=\"%d\" tclass=\"0x030200\"/>\n", to, count);
    }
    /* The switches as one target, as stock writes them when it cannot name them. */
    if (g->nvswitch_links > 0) {
      xml_indent(f, depth + 2);
      fprintf(f, "<nvlink target=\"ffffffff:ff:ff.0\" count=\"%d\" tclass=\"0x068000\"/>\n",
              g->nvswitch_links);
    }
    xml_indent(f, depth + 1);
    fprintf(f, "</gpu>\n");
  }
  xml_indent(f, depth);
  fprintf(f, "</pci>\n");
}

static void xml_write_nets(FILE* f, const char* nets, int depth) {
  for (const char* p = nets; p && *p;) {
    size_t n = strcspn(p, "\n");
    xml_indent(f, depth);
    fprintf(f, "%.*s\n", (int)n, p);
    p += n + (p[n] == '\n');
  }
}

static void xml_write_nic(FILE* f, const topo_system_t* sys, const topo_xml_nic_t* nic, int depth) {
  bool has_nets = nic->nets != NULL && nic->nets[0] != '\0';
  if (nic->bus_id >= 0) {
    xml_open_pci(f, sys, nic->bus_id, "0x020000", depth, !has_nets);
    if (!has_nets) return;
    depth++;
  }
  xml_indent(f, depth);
  fprintf(f, "<nic>\n");
  xml_write_nets(f, nic->nets, depth + 1);
  xml_indent(f, depth);
  fprintf(f, "</nic>\n");
  if (nic->bus_id >= 0) {
    xml_indent(f, depth - 1);
    fprintf(f, "</pci>\n");
  }
}

/* Leaves [lo, hi) share their first `level` path components: write those that end here, and a
 * <pci> bridge per run of leaves sharing the next component. */
static void xml_write_level(FILE* f, const topo_system_t* sys, const xml_leaf_t* leaves, int lo,
                            int hi, int level, int depth) {
  int i = lo;
  while (i < hi) {
    char comp[TOPO_PCI_PATH_MAX], other[TOPO_PCI_PATH_MAX];
    if (!path_component(leaves[i].path, level, comp, sizeof(comp))) {
      if (leaves[i].gpu)
        xml_write_gpu(f, sys, leaves[i].index, depth);
      else
        xml_write_nic(f, sys, leaves[i].nic, depth);
      i++;
      continue;
    }
    int j = i + 1;
    while (j < hi && path_component(leaves[j].path, level, other, sizeof(other)) &&
           strcmp(comp, other) == 0)
      j++;
    xml_open_pci(f, sys, topo_busid_parse(comp), "0x060400", depth, false);
    xml_write_level(f, sys, leaves, i, j, level + 1, depth + 1);
    xml_indent(f, depth);
    fprintf(f, "</pci>\n");
    i = j;
  }
}

static void xml_write_cpu(FILE* f, const topo_system_t* sys, const xml_leaf_t* leaf,
                          const char* local_cpu) {
  char mask[TOPO_CPUS_MAX * 2];
  fprintf(f, "  <cpu numaid=\"%d\"", leaf->numa);
  if (leaf->cpus[0] != '\0') {
    fputs(" affinity=\"", f);
    if (topo_cpus_list_to_mask(leaf->cpus, mask, sizeof(mask)))
      fputs(mask, f);
    else
      topo_xml_escape(f, leaf->cpus); /* not a list: as it was given */
    fputc('"', f);
  }
  const char* attrs = topo_xml_attrs(sys->xml, TOPO_XML_TYPE_CPU, leaf->numa, -1);
  fprintf(f, "%s>\n", attrs ? attrs : local_cpu);
}

/* The NICs a dump lists: those of the file the system came from, else the detected ones (sys->nics)
 * in the file's form: one <nic> per PCI function (its ports as <net> elements, in stock's
 * attributes plus Baton's rdma and active), placed by the NIC's NUMA node and PCI path. *own is
 * what the caller frees (NULL when the file's list is used). */
static ncclResult_t xml_dump_nics(const topo_system_t* sys, const topo_xml_nic_t** nics_out,
                                  int* n_out, topo_xml_nic_t** own) {
  *own = NULL;
  if (sys->xml != NULL && sys->xml->nnics > 0) {
    *nics_out = sys->xml->nics;
    *n_out = sys->xml->nnics;
    return ncclSuccess;
  }
  *nics_out = NULL;
  *n_out = 0;
  if (sys->nnics == 0) return ncclSuccess;
  topo_xml_nic_t* out = NULL;
  CHECK(MEM_CALLOC(&out, (size_t)sys->nnics));
  int n = 0;
  for (int i = 0; i < sys->nnics; i++) {
    const topo_nic_t* d = &sys->nics[i];
    topo_xml_nic_t* x = NULL; /* a port of a function already listed joins its <nic> */
    for (int k = 0; k < n && d->bus_id >= 0 && x == NULL; k++)
      if (out[k].bus_id == d->bus_id) x = &out[k];
    if (x == NULL) {
      x = &out[n++];
      x->numa = d->numa;
      x->bus_id = d->bus_id;
      snprintf(x->pci_path, sizeof(x->pci_path), "%s", d->pci_path);
      for (int g = 0; g < sys->ngpus && x->cpus[0] == '\0'; g++) /* its <cpu>: as the GPUs' */
        if (sys->gpus[g].numa == d->numa) snprintf(x->cpus, sizeof(x->cpus), "%s", sys->gpus[g].cpus);
    }
    char line[256];
    int w = snprintf(line, sizeof(line),
                     "<net name=\"%s\" dev=\"%d\" speed=\"%d\" port=\"%d\" latency=\"0\" "
                     "maxconn=\"65536\" gdr=\"0\" rdma=\"%d\" active=\"%d\"/>",
                     d->name, i, d->speed_mbps, d->port, d->rdma ? 1 : 0, d->active ? 1 : 0);
    size_t old = x->nets ? strlen(x->nets) : 0;
    char* grown = realloc(x->nets, old + (size_t)w + 2);
    if (grown == NULL) {
      for (int k = 0; k < n; k++) free(out[k].nets);
      free(out);
      WARN("Topology: out of memory listing NICs");
      return ncclSystemError;
    }
    x->nets = grown;
    snprintf(x->nets + old, (size_t)w + 2, "%s%s", old ? "\n" : "", line);
  }
  *nics_out = out;
  *n_out = n;
  *own = out;
  return ncclSuccess;
}

static void xml_dump_nics_free(topo_xml_nic_t* own, int n) {
  for (int k = 0; own != NULL && k < n; k++) free(own[k].nets);
  free(own);
}

ncclResult_t topo_xml_format(const topo_system_t* sys, char** text_out) {
  char* buf = NULL;
  size_t len = 0;
  const topo_xml_nic_t* nics = NULL;
  topo_xml_nic_t* own_nics = NULL;
  int nnics = 0;
  CHECK(xml_dump_nics(sys, &nics, &nnics, &own_nics));
  int n = sys->ngpus + nnics;
  xml_leaf_t* leaves = NULL;
  ncclResult_t res = MEM_CALLOC(&leaves, (size_t)(n > 0 ? n : 1));
  if (res != ncclSuccess) {
    xml_dump_nics_free(own_nics, nnics);
    return res;
  }
  for (int i = 0; i < sys->ngpus; i++) {
    const topo_gpu_t* g = &sys->gpus[i];
    leaves[i] = (xml_leaf_t){.gpu = true,
                             .index = i,
                             .numa = g->numa,
                             .cpus = g->cpus,
                             .path = g->pci_path,
                             .bus_id = g->bus_id};
  }
  for (int i = 0; i < nnics; i++) {
    const topo_xml_nic_t* nic = &nics[i];
    leaves[sys->ngpus + i] = (xml_leaf_t){.gpu = false,
                                          .nic = nic,
                                          .numa = nic->numa,
                                          .cpus = nic->cpus,
                                          .path = nic->pci_path,
                                          .bus_id = nic->bus_id};
  }
  qsort(leaves, (size_t)n, sizeof(*leaves), xml_leaf_cmp);
  FILE* f = open_memstream(&buf, &len);
  if (f == NULL) {
    WARN("Topology: open_memstream failed: %s", strerror(errno));
    free(leaves);
    xml_dump_nics_free(own_nics, nnics);
    return ncclSystemError;
  }
  char local_cpu[256];
  xml_local_cpu(local_cpu, sizeof(local_cpu));
  fprintf(f, "<system version=\"1\">\n");
  int i = 0;
  while (i < n) {
    int j = i + 1;
    while (j < n && leaves[j].numa == leaves[i].numa && strcmp(leaves[j].cpus, leaves[i].cpus) == 0)
      j++;
    xml_write_cpu(f, sys, &leaves[i], local_cpu);
    xml_write_level(f, sys, leaves, i, j, 0, 2);
    fprintf(f, "  </cpu>\n");
    i = j;
  }
  fprintf(f, "</system>\n");
  bool failed = ferror(f) != 0;
  fclose(f);
  free(leaves);
  xml_dump_nics_free(own_nics, nnics);
  if (failed || buf == NULL) {
    WARN("Topology: formatting the XML failed (out of memory?)");
    free(buf);
    return ncclSystemError;
  }
  *text_out = buf;
  return ncclSuccess;
}

ncclResult_t topo_text_write(const char* text, const char* var, const char* path) {
  FILE* f = fopen(path, "we");
  if (f == NULL) {
    WARN("%s: cannot create %s: %s", var, path, strerror(errno));
    return ncclSystemError;
  }
  size_t len = strlen(text);
  bool ok = fwrite(text, 1, len, f) == len;
  ok = fclose(f) == 0 && ok;
  if (!ok) {
    WARN("%s: writing %s failed: %s", var, path, strerror(errno));
    return ncclSystemError;
  }
  return ncclSuccess;
}

ncclResult_t topo_xml_dump(const topo_system_t* sys, const char* path) {
  char* text = NULL;
  CHECK(topo_xml_format(sys, &text));
  ncclResult_t res = topo_text_write(text, "NCCL_TOPO_DUMP_FILE", path);
  free(text);
  CHECK(res);
  INFO(NCCL_GRAPH, "Topology: wrote %d GPU(s) to %s", sys->ngpus, path);
  return ncclSuccess;
}
