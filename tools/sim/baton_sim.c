/* baton-sim: a cluster on a laptop. Creates every rank of a virtual cluster in this process with
 * Baton's real init (topology, channels, transport choice, tuning model) on a virtual platform,
 * posts each operation on every rank through the public API (so the real planner plans it), and
 * times the plans with the simulator's network model (src/device/sim). One line per operation:
 *
 *   baton-sim --topo h200x8 --nodes 128 --op allreduce --bytes 1G
 *   op=allreduce bytes=1073741824 ... algo=Ring proto=Simple channels=16 chunk=... flows=...
 *      predicted_us=... algbw=... busbw=...
 *
 * It links the static library: the platform hook (platform_set_thread) and the world are
 * internal interfaces that no program linking libnccl.so.2 can reach. */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "device/sim/sim.h"
#include "nccl.h"

typedef enum {
  OP_AR = 0,
  OP_AG,
  OP_RS,
  OP_BC,
  OP_RED,
  OP_A2A,
  OP_SR,
  OP_GATHER,
  OP_SCATTER,
  OP_NKINDS
} op_kind_t;
static const char* const op_names[OP_NKINDS] = {"allreduce", "allgather", "reducescatter",
                                                "broadcast", "reduce",    "alltoall",
                                                "sendrecv",  "gather",    "scatter"};

typedef struct sim_op {
  op_kind_t kind;
  size_t bytes; /* nccl-tests' size: the larger buffer of one rank (sendrecv: the message) */
  ncclDataType_t dtype;
  int root; /* root, or for sendrecv the distance to the peer */
} sim_op_t;

typedef struct options {
  const char* topo;
  int nodes;
  int nics;
  int host_ranks;
  sim_fabric_t fabric;
  const char* op;
  const char* bytes;
  const char* sweep;
  const char* workload;
  const char* algo;
  const char* proto;
  const char* dtype;
  int root;
  const char* trace;
  int trace_ranks;
  int iters;
  int per_process;
  bool graph;
  bool json, flows, stats;
} options_t;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char* fmt, const char* arg) {
  fprintf(stderr, "baton-sim: ");
  fprintf(stderr, fmt, arg);
  fprintf(stderr, "\n");
  exit(2);
}

/* "8", "64K", "1M", "1G" (binary multiples). */
static size_t parse_size(const char* text) {
  char* end = NULL;
  errno = 0;
  double v = strtod(text, &end);
  if (errno != 0 || end == text || v < 0) die("not a size: %s", text);
  double mult = 1;
  switch (toupper((unsigned char)*end)) {
    case 'K':
      mult = 1024.0;
      end++;
      break;
    case 'M':
      mult = 1024.0 * 1024;
      end++;
      break;
    case 'G':
      mult = 1024.0 * 1024 * 1024;
      end++;
      break;
    case 'T':
      mult = 1024.0 * 1024 * 1024 * 1024;
      end++;
      break;
    default:
      break;
  }
  if (toupper((unsigned char)*end) == 'B') end++;
  if (*end != '\0') die("not a size: %s", text);
  return (size_t)llround(v * mult);
}

static int parse_op(const char* name) {
  for (int k = 0; k < OP_NKINDS; k++)
    if (strcasecmp(name, op_names[k]) == 0) return k;
  if (strcasecmp(name, "all_reduce") == 0) return OP_AR;
  if (strcasecmp(name, "all_gather") == 0) return OP_AG;
  if (strcasecmp(name, "reduce_scatter") == 0) return OP_RS;
  return -1;
}

static ncclDataType_t parse_dtype(const char* name) {
  static const struct {
    const char* name;
    ncclDataType_t t;
  } types[] = {{"int8", ncclInt8},       {"uint8", ncclUint8},      {"int32", ncclInt32},
               {"int", ncclInt32},       {"uint32", ncclUint32},    {"int64", ncclInt64},
               {"uint64", ncclUint64},   {"half", ncclFloat16},     {"float16", ncclFloat16},
               {"float", ncclFloat32},   {"float32", ncclFloat32},  {"double", ncclFloat64},
               {"float64", ncclFloat64}, {"bfloat16", ncclBfloat16}};
  for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
    if (strcasecmp(name, types[i].name) == 0) return types[i].t;
  die("unknown datatype %s", name);
  return ncclFloat32;
}

/* ---- Workloads ------------------------------------------------------------------------------- */
typedef struct op_list {
  sim_op_t* ops;
  int n, cap;
} op_list_t;

static void ops_add(op_list_t* l, sim_op_t op) {
  if (l->n == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 16;
    l->ops = realloc(l->ops, (size_t)l->cap * sizeof(*l->ops));
    if (l->ops == NULL) die("%s", "out of memory");
  }
  l->ops[l->n++] = op;
}

static char* read_file(const char* path) {
  FILE* f = fopen(path, "r");
  if (f == NULL) die("cannot open %s", path);
  size_t cap = 1 << 16, n = 0;
  char* buf = malloc(cap);
  for (;;) {
    if (buf == NULL) die("%s", "out of memory");
    n += fread(buf + n, 1, cap - n - 1, f);
    if (n < cap - 1) break;
    cap *= 2;
    buf = realloc(buf, cap);
  }
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* Text: one operation a line, "<op> <size> [dtype=T] [root=R] [repeat=N]"; '#' starts a comment. */
static void workload_text(char* text, int nranks, op_list_t* out) {
  int line = 0;
  for (char *save = NULL, *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
    line++;
    char* hash = strchr(l, '#');
    if (hash) *hash = '\0';
    char* tok_save = NULL;
    char* name = strtok_r(l, " \t\r", &tok_save);
    if (name == NULL) continue;
    int k = parse_op(name);
    if (k < 0) die("workload: unknown operation %s", name);
    char* size = strtok_r(NULL, " \t\r", &tok_save);
    if (size == NULL) die("workload: %s without a size", name);
    sim_op_t op = {.kind = (op_kind_t)k,
                   .bytes = parse_size(size),
                   .dtype = ncclFloat32,
                   .root = k == OP_SR ? 1 : 0};
    int repeat = 1;
    for (char* t = strtok_r(NULL, " \t\r", &tok_save); t; t = strtok_r(NULL, " \t\r", &tok_save)) {
      if (strncmp(t, "dtype=", 6) == 0)
        op.dtype = parse_dtype(t + 6);
      else if (strncmp(t, "root=", 5) == 0)
        op.root = atoi(t + 5);
      else if (strncmp(t, "repeat=", 7) == 0)
        repeat = atoi(t + 7);
      else
        die("workload: unknown field %s", t);
    }
    if (op.root < 0 || op.root >= nranks) die("workload: root/peer distance %s out of range", size);
    for (int i = 0; i < repeat; i++) ops_add(out, op);
  }
}

/* A field's text in one trace event object (between start and end), or NULL. */
static const char* ev_field(const char* start, const char* end, const char* key, char* buf,
                            size_t len) {
  char pat[32];
  snprintf(pat, sizeof(pat), "\"%s\":", key);
  const char* p = strstr(start, pat);
  if (p == NULL || p >= end) return NULL;
  p += strlen(pat);
  if (*p == '"') p++;
  size_t n = strcspn(p, "\",}");
  if (n >= len) n = len - 1;
  memcpy(buf, p, n);
  buf[n] = '\0';
  return buf;
}

/* A timeline written by NCCL_BATON_TRACE_FILE (src/observe/trace.c): the calls of its lowest rank
 * of its first communicator, in order. A Send or Recv replays as every rank sending to (or
 * receiving from) the rank at the same distance; a run of them is one group. */
static void workload_trace(const char* text, int nranks, op_list_t* out) {
  static const struct {
    const char* name;
    int kind;
  } calls[] = {{"AllReduce", OP_AR},  {"AllGather", OP_AG},    {"ReduceScatter", OP_RS},
               {"Broadcast", OP_BC},  {"Reduce", OP_RED},      {"AlltoAll", OP_A2A},
               {"Gather", OP_GATHER}, {"Scatter", OP_SCATTER}, {"Send", OP_SR}};
  char comm[40] = "", val[64], first_comm[40] = "";
  int first_rank = -1, trace_nranks = 0;
  /* Pass 1: the communicator and rank to follow. */
  for (const char* p = strstr(text, "{\"ph\":\"X\""); p; p = strstr(p + 1, "{\"ph\":\"X\"")) {
    const char* e = strstr(p, "}}");
    if (e == NULL) break;
    if (ev_field(p, e, "cat", val, sizeof(val)) == NULL || strcmp(val, "calls") != 0) continue;
    if (ev_field(p, e, "comm", comm, sizeof(comm)) == NULL) continue;
    if (first_comm[0] == '\0') snprintf(first_comm, sizeof(first_comm), "%s", comm);
    if (strcmp(comm, first_comm) != 0) continue;
    int r = atoi(ev_field(p, e, "rank", val, sizeof(val)) ? val : "0");
    if (first_rank < 0 || r < first_rank) first_rank = r;
    if (ev_field(p, e, "nranks", val, sizeof(val))) trace_nranks = atoi(val);
  }
  if (first_rank < 0) die("%s", "trace: no call events (cat \"calls\") found");
  if (trace_nranks != nranks)
    fprintf(stderr, "baton-sim: the trace's communicator has %d ranks; replaying on %d\n",
            trace_nranks, nranks);
  for (const char* p = strstr(text, "{\"ph\":\"X\""); p; p = strstr(p + 1, "{\"ph\":\"X\"")) {
    const char* e = strstr(p, "}}");
    if (e == NULL) break;
    if (ev_field(p, e, "cat", val, sizeof(val)) == NULL || strcmp(val, "calls") != 0) continue;
    if (ev_field(p, e, "comm", comm, sizeof(comm)) == NULL || strcmp(comm, first_comm) != 0)
      continue;
    if (atoi(ev_field(p, e, "rank", val, sizeof(val)) ? val : "-1") != first_rank) continue;
    char name[32];
    if (ev_field(p, e, "name", name, sizeof(name)) == NULL) continue;
    int kind = -1;
    for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
      if (strcmp(name, calls[i].name) == 0) kind = calls[i].kind;
    if (kind < 0) continue; /* Recv: paired with the Send at the same distance */
    size_t count = strtoull(ev_field(p, e, "count", val, sizeof(val)) ? val : "0", NULL, 10);
    ncclDataType_t dt = parse_dtype(ev_field(p, e, "datatype", val, sizeof(val)) ? val : "float32");
    int root = 0;
    if (ev_field(p, e, kind == OP_SR ? "peer" : "root", val, sizeof(val))) root = atoi(val);
    if (kind == OP_SR) root = ((root - first_rank) % nranks + nranks) % nranks;
    size_t es = datatype_size(dt);
    size_t per = count * es;
    size_t bytes =
        kind == OP_AG || kind == OP_RS || kind == OP_A2A || kind == OP_GATHER || kind == OP_SCATTER
            ? per * (size_t)nranks
            : per;
    ops_add(out, (sim_op_t){.kind = (op_kind_t)kind, .bytes = bytes, .dtype = dt, .root = root});
  }
}

/* ---- Running one operation ------------------------------------------------------------------- */
static size_t op_count(const sim_op_t* op, int nranks) {
  size_t es = datatype_size(op->dtype);
  switch (op->kind) {
    case OP_AG:
    case OP_RS:
    case OP_A2A:
    case OP_GATHER:
    case OP_SCATTER:
      return op->bytes / es / (size_t)nranks;
    default:
      return op->bytes / es;
  }
}

static double bus_factor(op_kind_t k, int n) {
  switch (k) {
    case OP_AR:
      return n > 1 ? 2.0 * (n - 1) / n : 1;
    case OP_AG:
    case OP_RS:
    case OP_A2A:
    case OP_GATHER:
    case OP_SCATTER:
      return n > 1 ? (double)(n - 1) / n : 1;
    default:
      return 1;
  }
}

static ncclResult_t op_post(const sim_op_t* op, ncclComm_t comm, int rank, int nranks) {
  /* Buffers are never touched: the simulated executor moves no data. */
  void* sb = (void*)(uintptr_t)0x100000000ull;
  void* rb = (void*)(uintptr_t)0x900000000ull;
  size_t count = op_count(op, nranks);
  switch (op->kind) {
    case OP_AR:
      return ncclAllReduce(sb, rb, count, op->dtype, ncclSum, comm, NULL);
    case OP_AG:
      return ncclAllGather(sb, rb, count, op->dtype, comm, NULL);
    case OP_RS:
      return ncclReduceScatter(sb, rb, count, op->dtype, ncclSum, comm, NULL);
    case OP_BC:
      return ncclBroadcast(sb, rb, count, op->dtype, op->root, comm, NULL);
    case OP_RED:
      return ncclReduce(sb, rb, count, op->dtype, ncclSum, op->root, comm, NULL);
    case OP_A2A:
      return ncclAlltoAll(sb, rb, count, op->dtype, comm, NULL);
    case OP_GATHER:
      return ncclGather(sb, rb, count, op->dtype, op->root, comm, NULL);
    case OP_SCATTER:
      return ncclScatter(sb, rb, count, op->dtype, op->root, comm, NULL);
    case OP_SR: {
      ncclResult_t r = ncclSend(sb, count, op->dtype, (rank + op->root) % nranks, comm, NULL);
      if (r != ncclSuccess) return r;
      return ncclRecv(rb, count, op->dtype, (rank - op->root + nranks) % nranks, comm, NULL);
    }
    default:
      return ncclInvalidArgument;
  }
}

static const char* func_name(int f) {
  static const char* const n[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter",
                                  "AllReduce", "Send",   "Recv"};
  return f >= 0 && f < (int)(sizeof(n) / sizeof(n[0])) ? n[f] : "-";
}
static const char* algo_name(int a) {
  return a == ALGO_TREE      ? "Tree"
         : a == ALGO_RING    ? "Ring"
         : a == ALGO_ONESHOT ? "OneShot"
         : a == ALGO_TWOSHOT ? "TwoShot"
                             : "-";
}
static const char* proto_name(int p) {
  return p == PROTO_LL ? "LL" : p == PROTO_LL128 ? "LL128" : p == PROTO_SIMPLE ? "Simple" : "-";
}

/* ---- Output ---------------------------------------------------------------------------------- */
typedef struct trace_out {
  FILE* f;
  bool first;
} trace_out_t;

static void trace_spans(trace_out_t* t, const sim_result_t* r, double t0, int opi,
                        const char* opname) {
  if (t->f == NULL) return;
  fprintf(t->f,
          "%s\n{\"ph\":\"X\",\"pid\":-1,\"tid\":0,\"name\":\"%s\",\"ts\":%.3f,\"dur\":%.3f,"
          "\"args\":{\"op\":%d}}",
          t->first ? "" : ",", opname, t0, r->time_us, opi);
  t->first = false;
  for (int i = 0; i < r->nspans; i++) {
    const sim_span_t* s = &r->spans[i];
    fprintf(t->f,
            ",\n{\"ph\":\"X\",\"pid\":%d,\"tid\":%d,\"name\":\"%s %s/%s\",\"ts\":%.3f,"
            "\"dur\":%.3f,\"args\":{\"op\":%d,\"channel\":%d,\"bytes\":%llu}}",
            s->rank, s->channel * 2 + s->half, func_name(s->func), algo_name(s->algo),
            proto_name(s->proto), t0 + s->t0, s->t1 - s->t0, opi, s->channel,
            (unsigned long long)s->bytes);
  }
}

static void print_flows_text(const sim_result_t* r) {
  for (int i = 0; i < r->nflows; i++) {
    const sim_flow_out_t* f = &r->flows[i];
    printf("  flow %d->%d bytes=%llu via=%s", f->src, f->dst, (unsigned long long)f->bytes,
           sim_transport_names[f->transport]);
    if (f->transport == SIM_TR_NET) printf(" nic=%d->%d", f->src_nic, f->dst_nic);
    printf(" rate_gbs=%.2f", f->gbs);
    if (f->relay >= 0) printf(" pxn=%d", f->relay);
    printf("\n");
  }
}

static void print_flows_json(const sim_result_t* r) {
  printf(",\"flow_list\":[");
  for (int i = 0; i < r->nflows; i++) {
    const sim_flow_out_t* f = &r->flows[i];
    printf(
        "%s{\"src\":%d,\"dst\":%d,\"bytes\":%llu,\"transport\":\"%s\",\"src_nic\":%d,"
        "\"dst_nic\":%d,\"pxn\":%d,\"rate_gbs\":%.3f}",
        i ? "," : "", f->src, f->dst, (unsigned long long)f->bytes,
        sim_transport_names[f->transport], f->src_nic, f->dst_nic, f->relay, f->gbs);
  }
  printf("]");
}

static void usage(void) {
  printf(
      "usage: baton-sim --topo NAME|FILE [--nodes N] [options] (--op OP (--bytes SIZE | --sweep "
      "MIN:MAX[:FACTOR]) | --workload FILE)\n"
      "  --topo NAME|FILE    a built-in node (h200x8, h100x8-nvswitch-8nic, h200x4, h200x2,\n"
      "                      h100x4, h100x2, pcie4x4) or a topology file in stock NCCL's XML\n"
      "                      format\n"
      "  --nodes N           nodes of that kind (default 1)\n"
      "  --nics N            NICs per node of a built-in topology (default: the board's)\n"
      "  --nic-gbs X         every NIC's bandwidth, GB/s one way (default: its speed)\n"
      "  --net-lat US        one network hop, microseconds (default 3)\n"
      "  --fat-tree L:R      leaf switches of L nodes whose uplinks are oversubscribed R:1\n"
      "  --host-ranks N      ranks without GPUs (the host executor), N per node\n"
      "  --op OP             allreduce allgather reducescatter broadcast reduce alltoall sendrecv\n"
      "                      gather scatter\n"
      "  --bytes SIZE        nccl-tests' size: 8, 64K, 1M, 1G ...\n"
      "  --sweep MIN:MAX[:F] sizes MIN, MIN*F, ... MAX (F default 2)\n"
      "  --workload FILE     operations, one a line (\"allreduce 1G [dtype=T] [root=R] "
      "[repeat=N]\"),\n"
      "                      or a timeline written by NCCL_BATON_TRACE_FILE\n"
      "  --algo A, --proto P as NCCL_ALGO, NCCL_PROTO\n"
      "  --dtype T           float (default), half, bfloat16, double, int8, int32, ...\n"
      "  --root R            root (broadcast, reduce, gather, scatter) or sendrecv distance\n"
      "  --trace OUT.json    the simulated timeline (Chrome trace), ranks below --trace-ranks "
      "(16)\n"
      "  --json              one JSON document instead of lines\n"
      "  --flows             every point-to-point flow of each operation\n"
      "  --iters N           time N operations back to back, as a benchmark loop does:\n"
      "                      predicted_us is then the time per operation in the loop\n"
      "  --ranks-per-process N  a process launches for N ranks of a node one after another\n"
      "                      (nccl-tests -g N); default 1, a process per rank\n"
      "  --graph             the --iters loop is a CUDA graph's replay (nccl-tests -G): each\n"
      "                      launch starts when its GPU is done with the last, no host issue\n"
      "  --stats             init time, fair-share memo, peak memory\n");
}

int main(int argc, char** argv) {
  options_t o = {.nodes = 1,
                 .root = -1,
                 .trace_ranks = 16,
                 .iters = 1,
                 .per_process = 1,
                 .fabric = {.net_lat_us = -1}};
  static const struct option longs[] = {{"topo", required_argument, 0, 't'},
                                        {"nodes", required_argument, 0, 'n'},
                                        {"nics", required_argument, 0, 'N'},
                                        {"nic-gbs", required_argument, 0, 'G'},
                                        {"net-lat", required_argument, 0, 'L'},
                                        {"fat-tree", required_argument, 0, 'F'},
                                        {"host-ranks", required_argument, 0, 'H'},
                                        {"op", required_argument, 0, 'o'},
                                        {"bytes", required_argument, 0, 'b'},
                                        {"sweep", required_argument, 0, 's'},
                                        {"workload", required_argument, 0, 'w'},
                                        {"algo", required_argument, 0, 'a'},
                                        {"proto", required_argument, 0, 'p'},
                                        {"dtype", required_argument, 0, 'd'},
                                        {"root", required_argument, 0, 'r'},
                                        {"trace", required_argument, 0, 'T'},
                                        {"trace-ranks", required_argument, 0, 'R'},
                                        {"json", no_argument, 0, 'j'},
                                        {"flows", no_argument, 0, 'f'},
                                        {"stats", no_argument, 0, 'S'},
                                        {"iters", required_argument, 0, 'I'},
                                        {"ranks-per-process", required_argument, 0, 'P'},
                                        {"graph", no_argument, 0, 'g'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  int c;
  while ((c = getopt_long(argc, argv, "h", longs, NULL)) != -1) {
    switch (c) {
      case 't':
        o.topo = optarg;
        break;
      case 'n':
        o.nodes = atoi(optarg);
        break;
      case 'N':
        o.nics = atoi(optarg);
        break;
      case 'G':
        o.fabric.nic_gbs = atof(optarg);
        break;
      case 'L':
        o.fabric.net_lat_us = atof(optarg);
        break;
      case 'F':
        if (sscanf(optarg, "%d:%lf", &o.fabric.leaf_nodes, &o.fabric.oversub) != 2 ||
            o.fabric.leaf_nodes < 1 || o.fabric.oversub < 1)
          die("--fat-tree wants NODES:RATIO (e.g. 16:2), not %s", optarg);
        break;
      case 'H':
        o.host_ranks = atoi(optarg);
        break;
      case 'o':
        o.op = optarg;
        break;
      case 'b':
        o.bytes = optarg;
        break;
      case 's':
        o.sweep = optarg;
        break;
      case 'w':
        o.workload = optarg;
        break;
      case 'a':
        o.algo = optarg;
        break;
      case 'p':
        o.proto = optarg;
        break;
      case 'd':
        o.dtype = optarg;
        break;
      case 'r':
        o.root = atoi(optarg);
        break;
      case 'T':
        o.trace = optarg;
        break;
      case 'R':
        o.trace_ranks = atoi(optarg);
        break;
      case 'j':
        o.json = true;
        break;
      case 'f':
        o.flows = true;
        break;
      case 'S':
        o.stats = true;
        break;
      case 'I':
        o.iters = atoi(optarg);
        break;
      case 'P':
        o.per_process = atoi(optarg);
        break;
      case 'g':
        o.graph = true;
        break;
      case 'h':
        usage();
        return 0;
      default:
        usage();
        return 2;
    }
  }
  if (o.topo == NULL) die("%s", "--topo is required (--help)");
  if (o.nodes < 1) die("%s", "--nodes must be at least 1");
  if (o.workload == NULL && (o.op == NULL || (o.bytes == NULL) == (o.sweep == NULL)))
    die("%s", "give --op with --bytes or --sweep, or --workload (--help)");
  if (o.algo) setenv("NCCL_ALGO", o.algo, 1);
  if (o.proto) setenv("NCCL_PROTO", o.proto, 1);

  /* The node: built in, or a file. */
  char* xml = NULL;
  bool builtin = false;
  for (int i = 0; sim_topo_names[i]; i++) builtin |= strcasecmp(o.topo, sim_topo_names[i]) == 0;
  if (builtin) {
    if (sim_topo_builtin(o.topo, o.nics, &xml) != ncclSuccess) return 1;
  } else {
    if (o.nics) die("%s", "--nics applies to built-in topologies only");
    if (access(o.topo, R_OK) != 0) {
      fprintf(
          stderr,
          "baton-sim: --topo %s is neither a built-in node nor a readable file; built in:", o.topo);
      for (int i = 0; sim_topo_names[i]; i++) fprintf(stderr, " %s", sim_topo_names[i]);
      fprintf(stderr, "\n");
      return 2;
    }
    xml = read_file(o.topo);
  }
  sim_cluster_desc_t desc = {.node_xml = xml,
                             .node_name = o.topo,
                             .nnodes = o.nodes,
                             .host_only = o.host_ranks > 0,
                             .ranks_per_node = o.host_ranks,
                             .fabric = o.fabric};
  sim_world_t* w = NULL;
  if (sim_world_create(&desc, &w) != ncclSuccess) return 1;
  int n = sim_world_nranks(w);

  /* The operations. */
  op_list_t ops = {0};
  ncclDataType_t dt = o.dtype ? parse_dtype(o.dtype) : ncclFloat32;
  if (o.workload) {
    char* text = read_file(o.workload);
    const char* p = text;
    while (isspace((unsigned char)*p)) p++;
    if (*p == '{')
      workload_trace(text, n, &ops);
    else
      workload_text(text, n, &ops);
    free(text);
  } else {
    int k = parse_op(o.op);
    if (k < 0) die("unknown operation %s (--help)", o.op);
    int root = o.root >= 0 ? o.root : k == OP_SR ? 1 : 0;
    if (root >= n) die("%s", "--root is not a rank of the cluster");
    if (o.bytes) {
      ops_add(&ops,
              (sim_op_t){
                  .kind = (op_kind_t)k, .bytes = parse_size(o.bytes), .dtype = dt, .root = root});
    } else {
      char lo[32], hi[32];
      double f = 2;
      int got = sscanf(o.sweep, "%31[^:]:%31[^:]:%lf", lo, hi, &f);
      if (got < 2 || f <= 1) die("--sweep wants MIN:MAX[:FACTOR], not %s", o.sweep);
      for (double b = (double)parse_size(lo); b <= (double)parse_size(hi) * 1.0000001; b *= f)
        ops_add(&ops,
                (sim_op_t){
                    .kind = (op_kind_t)k, .bytes = (size_t)llround(b), .dtype = dt, .root = root});
    }
  }

  /* Every rank's communicator, through the real init, on the virtual platform. */
  double t_init = now_s();
  platform_set_thread(sim_world_platform(w));
  ncclUniqueId id;
  ncclComm_t* comms = calloc((size_t)n, sizeof(*comms));
  if (comms == NULL || ncclGetUniqueId(&id) != ncclSuccess) die("%s", "cannot start");
  ncclGroupStart();
  for (int r = 0; r < n; r++)
    if (ncclCommInitRank(&comms[r], n, id, r) != ncclSuccess) die("%s", "ncclCommInitRank failed");
  if (ncclGroupEnd() != ncclSuccess) die("communicator init failed: %s", ncclGetLastError(NULL));
  platform_set_thread(NULL);
  t_init = now_s() - t_init;

  trace_out_t tr = {.f = NULL, .first = true};
  if (o.trace) {
    tr.f = fopen(o.trace, "w");
    if (tr.f == NULL) die("cannot write %s", o.trace);
    fprintf(tr.f,
            "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"tool\":\"baton-sim\","
            "\"topology\":\"%s\",\"nodes\":%d,\"nranks\":%d},\n\"traceEvents\":[",
            o.topo, o.nodes, n);
  }
  if (o.json)
    printf("{\"topology\":\"%s\",\"nodes\":%d,\"nranks\":%d,\"ops\":[", o.topo, o.nodes, n);
  double t_sim = now_s(), clock_us = 0;
  int status = 0;
  for (int i = 0; i < ops.n; i++) {
    const sim_op_t* op = &ops.ops[i];
    size_t count = op_count(op, n);
    sim_result_t res = {.func = -1, .algo = -1, .proto = -1};
    if (count > 0) {
      ncclGroupStart();
      for (int r = 0; r < n && status == 0; r++)
        if (op_post(op, comms[r], r, n) != ncclSuccess) status = 1;
      if (ncclGroupEnd() != ncclSuccess) status = 1;
      sim_time_opts_t to = {.trace_ranks = o.trace ? o.trace_ranks : 0,
                            .iters = o.iters,
                            .per_process = o.per_process,
                            .graph = o.graph};
      if (status != 0 || sim_world_time(w, &to, &res) != ncclSuccess) {
        fprintf(stderr, "baton-sim: %s of %zu bytes failed: %s\n", op_names[op->kind], op->bytes,
                ncclGetLastError(NULL));
        status = 1;
        break;
      }
    }
    double us = count > 0 ? (o.iters > 1 ? res.loop_us : res.time_us) : 0;
    double algbw = us > 0 ? (double)op->bytes / us / 1e3 : 0; /* GB/s */
    double busbw = algbw * bus_factor(op->kind, n);
    if (o.json) {
      printf(
          "%s\n{\"op\":\"%s\",\"bytes\":%zu,\"count\":%zu,\"dtype_bytes\":%zu,\"algo\":\"%s\","
          "\"proto\":\"%s\",\"channels\":%d,\"chunk\":%zu,\"steps\":%llu,\"classes\":%d,"
          "\"flows\":%d,\"predicted_us\":%.3f,\"first_us\":%.3f,\"algbw\":%.3f,"
          "\"busbw\":%.3f",
          i ? "," : "", op_names[op->kind], op->bytes, count, datatype_size(op->dtype),
          algo_name(res.algo), proto_name(res.proto), res.nchannels, res.chunk_bytes,
          (unsigned long long)res.steps, res.nclasses, res.nflows, us, res.time_us, algbw, busbw);
      if (res.nic_bound) printf(",\"bound\":\"nic\"");
      if (o.flows) print_flows_json(&res);
      printf("}");
    } else {
      printf(
          "op=%s bytes=%zu count=%zu nranks=%d algo=%s proto=%s channels=%d chunk=%zu "
          "flows=%d predicted_us=%.2f algbw=%.2f busbw=%.2f%s\n",
          op_names[op->kind], op->bytes, count, n, algo_name(res.algo), proto_name(res.proto),
          res.nchannels, res.chunk_bytes, res.nflows, us, algbw, busbw,
          res.nic_bound ? " bound=nic" : "");
      if (o.iters > 1)
        printf("  first_us=%.2f (the first of %d back to back)\n", res.time_us, o.iters);
      if (o.flows) print_flows_text(&res);
    }
    trace_spans(&tr, &res, clock_us, i, op_names[op->kind]);
    clock_us += us;
  }
  t_sim = now_s() - t_sim;
  for (int r = 0; r < n; r++) ncclCommDestroy(comms[r]);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  uint64_t hits = 0, misses = 0;
  sim_world_memo_stats(w, &hits, &misses);
  if (o.json) {
    printf(
        "\n],\"total_us\":%.3f,\"init_s\":%.3f,\"sim_s\":%.3f,\"memo_hits\":%llu,"
        "\"memo_misses\":%llu,\"peak_rss_kb\":%ld}\n",
        clock_us, t_init, t_sim, (unsigned long long)hits, (unsigned long long)misses,
        ru.ru_maxrss);
  } else if (o.stats) {
    printf(
        "stats: nranks=%d init_s=%.2f sim_s=%.2f total_predicted_us=%.2f memo_hits=%llu "
        "memo_misses=%llu peak_rss_kb=%ld\n",
        n, t_init, t_sim, clock_us, (unsigned long long)hits, (unsigned long long)misses,
        ru.ru_maxrss);
  }
  if (tr.f) {
    fprintf(tr.f, "\n]}\n");
    fclose(tr.f);
  }
  sim_world_free(w);
  free(comms);
  free(ops.ops);
  free(xml);
  return status;
}
