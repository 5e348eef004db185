/* The timeline (NCCL_BATON_TRACE_FILE): Chrome / Perfetto trace-event JSON, one file per process
 * (%h: host name, %p: pid). Events go to a ring of the last NCCL_BATON_TRACE_EVENTS; the file is
 * rewritten whole (a temporary file, then rename) at every destroy and abort, and when the
 * process gets SIGUSR1 (the handler only writes a byte to the RAS service's wake pipe; that thread
 * writes the file).
 *
 * Each communicator rank has three tracks (trace-event threads): its calls (init, each
 * collective or point-to-point call from entry to return, destroy/abort), the runs of its plans
 * on the host (a group's plan, connect and launch; on the host executor, the whole run), and, on a
 * GPU, its kernels from their start and end on the device's global timer. Times are microseconds
 * of real time (trace_now_ns). Writers claim a slot with one atomic add and publish it with a stamp, so the
 * enqueue path takes no lock. */
#include <signal.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "observe/ras.h"

/* The names of call kinds: the timeline's events, the hang reports' and RAS clients' words. */
static const char* const op_names[OP_KIND_COUNT] = {
    [OP_BROADCAST] = "Broadcast", [OP_REDUCE] = "Reduce",
    [OP_ALLGATHER] = "AllGather", [OP_REDUCESCATTER] = "ReduceScatter",
    [OP_ALLREDUCE] = "AllReduce", [OP_ALLTOALL] = "AlltoAll",
    [OP_GATHER] = "Gather",       [OP_SCATTER] = "Scatter",
    [OP_SEND] = "Send",           [OP_RECV] = "Recv"};

const char* op_kind_name(int kind) {
  return kind >= 0 && kind < OP_KIND_COUNT ? op_names[kind] : "?";
}

typedef struct trace_ev {
  uint64_t stamp; /* atomic: slot index + 1 once written, 0 while being written */
  uint64_t t0, t1;
  uint64_t comm_hash;
  uint64_t seq_first, seq, coll;
  uint64_t count;
  int32_t rank, nranks, root, trace_id;
  uint8_t what, kind, dtype, pad;
} trace_ev_t;

bool trace_enabled;
static pthread_once_t trace_once = PTHREAD_ONCE_INIT;
static char trace_path[1024];
static trace_ev_t* ring;
static uint64_t ring_cap;
static uint64_t ring_next; /* atomic */
static int trace_ids;      /* atomic: communicator tracks handed out */
static int sig_fd = -1;    /* atomic: the service's wake pipe (write end), -1 when none */
static int sig_request;    /* atomic */
static pthread_mutex_t write_lock = PTHREAD_MUTEX_INITIALIZER;

/* Real time as of the first event, then the monotonic clock from there: a process's events stay
 * in order even when the real-time clock is stepped (it went back 250 ns once in a test here),
 * and files of several processes still line up by wall time. */
static int64_t realtime_offset; /* realtime - monotonic, ns; 0 until set */
static pthread_once_t offset_once = PTHREAD_ONCE_INIT;

static void offset_init(void) {
  struct timespec rt, mono;
  clock_gettime(CLOCK_REALTIME, &rt);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  realtime_offset = ((int64_t)rt.tv_sec - (int64_t)mono.tv_sec) * 1000000000ll +
                    ((int64_t)rt.tv_nsec - (int64_t)mono.tv_nsec);
}

uint64_t trace_now_ns(void) {
  pthread_once(&offset_once, offset_init);
  return (uint64_t)((int64_t)clock_ns() + realtime_offset);
}

static void trace_on_signal(int sig) {
  (void)sig;
  int saved = errno;
  __atomic_store_n(&sig_request, 1, __ATOMIC_RELEASE);
  int fd = __atomic_load_n(&sig_fd, __ATOMIC_ACQUIRE);
  if (fd >= 0) {
    char b = 't';
    ssize_t n = write(fd, &b, 1); /* async-signal-safe; a full pipe wakes the thread anyway */
    (void)n;
  }
  errno = saved;
}

void trace_signal_fd(int fd) {
  __atomic_store_n(&sig_fd, fd, __ATOMIC_RELEASE);
}

bool trace_take_request(void) {
  return __atomic_exchange_n(&sig_request, 0, __ATOMIC_ACQ_REL) != 0;
}

/* "%h" -> host name, "%p" -> pid, as NCCL_DEBUG_FILE. */
static void expand_path(const char* tmpl, char* out, size_t len) {
  size_t o = 0;
  for (const char* p = tmpl; *p && o + 1 < len; p++) {
    if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
      int n = p[1] == 'h' ? snprintf(out + o, len - o, "%s", host_name())
                          : snprintf(out + o, len - o, "%d", (int)getpid());
      if (n > 0) o += (size_t)n < len - o ? (size_t)n : len - o - 1;
      p++;
      continue;
    }
    out[o++] = *p;
  }
  out[o] = '\0';
}

static void trace_once_init(void) {
  const char* tmpl = param_str(PARAM_TRACE_FILE);
  if (tmpl == NULL || tmpl[0] == '\0') return;
  int64_t n = param_int(PARAM_TRACE_EVENTS);
  if (n < 16) n = 16;
  if (n > (1 << 24)) n = 1 << 24;
  ring = calloc((size_t)n, sizeof(*ring));
  if (ring == NULL) {
    WARN("NCCL_BATON_TRACE_FILE: no memory for %lld trace events; no timeline", (long long)n);
    return;
  }
  ring_cap = (uint64_t)n;
  expand_path(tmpl, trace_path, sizeof(trace_path));
  struct sigaction old;
  if (sigaction(SIGUSR1, NULL, &old) == 0 && old.sa_handler == SIG_DFL &&
      !(old.sa_flags & SA_SIGINFO)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = trace_on_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
  } else {
    INFO(NCCL_INIT,
         "NCCL_BATON_TRACE_FILE: SIGUSR1 has a handler already; the timeline is "
         "written at destroy and abort only");
  }
  __atomic_store_n(&trace_enabled, true, __ATOMIC_RELEASE);
  INFO(NCCL_INIT, "Timeline: the last %lld events go to %s", (long long)n, trace_path);
}

void trace_setup(void) {
  pthread_once(&trace_once, trace_once_init);
}

void trace_span(ncclComm_t comm, int what, uint64_t t0, uint64_t t1, const prog_op_t* op,
                uint64_t seq_first) {
  if (!trace_on() || comm == NULL) return;
  int id = __atomic_load_n(&comm->trace_id, __ATOMIC_RELAXED);
  if (id == 0) {
    int fresh = __atomic_add_fetch(&trace_ids, 1, __ATOMIC_RELAXED);
    if (__atomic_compare_exchange_n(&comm->trace_id, &id, fresh, false, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
      id = fresh;
  }
  uint64_t idx = __atomic_fetch_add(&ring_next, 1, __ATOMIC_RELAXED);
  trace_ev_t* e = &ring[idx % ring_cap];
  __atomic_store_n(&e->stamp, 0, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
  e->t0 = t0;
  e->t1 = t1 >= t0 ? t1 : t0;
  e->comm_hash = comm->comm_hash;
  e->rank = comm->rank;
  e->nranks = comm->nranks;
  e->trace_id = id;
  e->what = (uint8_t)what;
  e->seq_first = seq_first;
  if (op != NULL) {
    e->seq = op->seq;
    e->coll = op->coll;
    e->count = op->count;
    e->root = op->root;
    e->kind = op->kind;
    e->dtype = op->dtype;
  } else {
    e->seq = e->coll = e->count = 0;
    e->root = -1;
    e->kind = 255;
    e->dtype = 0;
  }
  __atomic_store_n(&e->stamp, idx + 1, __ATOMIC_RELEASE);
}

/* ---- Writing --------------------------------------------------------------------------------- */
static const char* const lane_names[3] = {"calls", "host runs", "GPU kernels"};

static int lane_of(int what) {
  return what == TRACE_RUN ? 1 : what == TRACE_GPU ? 2 : 0;
}

static int ev_cmp(const void* a, const void* b) {
  const trace_ev_t* x = a;
  const trace_ev_t* y = b;
  int tx = x->trace_id * 4 + lane_of(x->what), ty = y->trace_id * 4 + lane_of(y->what);
  if (tx != ty) return tx < ty ? -1 : 1;
  if (x->t0 != y->t0) return x->t0 < y->t0 ? -1 : 1;
  if (x->t1 != y->t1) return x->t1 > y->t1 ? -1 : 1; /* the enclosing one first */
  return 0;
}

static const char* ev_name(const trace_ev_t* e) {
  switch (e->what) {
    case TRACE_INIT:
      return "init";
    case TRACE_DESTROY:
      return "destroy";
    case TRACE_ABORT:
      return "abort";
    case TRACE_RUN:
      return "run";
    case TRACE_GPU:
      return "kernel";
    default:
      return op_kind_name(e->kind);
  }
}

static void ev_write(FILE* f, const trace_ev_t* e, int pid, bool* first) {
  fprintf(f,
          "%s\n{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,"
          "\"ts\":%llu.%03llu,\"dur\":%llu.%03llu,\"args\":{\"comm\":\"0x%016llx\",\"rank\":%d,"
          "\"nranks\":%d",
          *first ? "" : ",", ev_name(e), lane_names[lane_of(e->what)], pid,
          e->trace_id * 4 + lane_of(e->what), (unsigned long long)(e->t0 / 1000),
          (unsigned long long)(e->t0 % 1000), (unsigned long long)((e->t1 - e->t0) / 1000),
          (unsigned long long)((e->t1 - e->t0) % 1000), (unsigned long long)e->comm_hash, e->rank,
          e->nranks);
  *first = false;
  if (e->what == TRACE_CALL) {
    fprintf(f, ",\"call\":%llu,\"count\":%llu,\"datatype\":\"%s\"", (unsigned long long)e->seq,
            (unsigned long long)e->count, datatype_name((ncclDataType_t)e->dtype));
    if (e->coll != 0) fprintf(f, ",\"collective\":%llu", (unsigned long long)e->coll);
    if (e->root >= 0) fprintf(f, ",\"%s\":%d", op_kind_is_p2p(e->kind) ? "peer" : "root", e->root);
  } else if (e->what == TRACE_RUN || e->what == TRACE_GPU) {
    fprintf(f, ",\"calls\":\"%llu-%llu\"", (unsigned long long)e->seq_first,
            (unsigned long long)e->seq);
  }
  fprintf(f, "}}");
}

void trace_write(void) {
  if (!trace_on()) return;
  pthread_mutex_lock(&write_lock);
  uint64_t end = __atomic_load_n(&ring_next, __ATOMIC_ACQUIRE);
  uint64_t begin = end > ring_cap ? end - ring_cap : 0;
  trace_ev_t* evs = malloc((size_t)(end - begin + 1) * sizeof(*evs));
  char tmp[1100];
  FILE* f = NULL;
  if (evs == NULL) goto out;
  size_t n = 0;
  for (uint64_t i = begin; i < end; i++) {
    const trace_ev_t* e = &ring[i % ring_cap];
    if (__atomic_load_n(&e->stamp, __ATOMIC_ACQUIRE) != i + 1) continue;
    evs[n] = *e;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&e->stamp, __ATOMIC_RELAXED) == i + 1) n++; /* not overwritten meanwhile */
  }
  qsort(evs, n, sizeof(*evs), ev_cmp);
  snprintf(tmp, sizeof(tmp), "%s.tmp%d", trace_path, (int)getpid());
  f = fopen(tmp, "w");
  if (f == NULL) {
    INFO(NCCL_INIT, "Timeline: cannot write %s: %s", tmp, strerror(errno));
    goto out;
  }
  int pid = (int)getpid();
  fprintf(f,
          "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"library\":\"Baton %s\",\"events\":%zu,"
          "\"dropped\":%llu},\n\"traceEvents\":[",
          BATON_VERSION_STRING, n, (unsigned long long)begin);
  bool first = true;
  fprintf(f,
          "\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":"
          "\"pid %d on %s\"}}",
          pid, pid, host_name());
  first = false;
  int last_tid = -1;
  for (size_t i = 0; i < n; i++) {
    int tid = evs[i].trace_id * 4 + lane_of(evs[i].what);
    if (tid == last_tid) continue;
    last_tid = tid;
    fprintf(f,
            ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":"
            "\"comm 0x%016llx rank %d: %s\"}}",
            pid, tid, (unsigned long long)evs[i].comm_hash, evs[i].rank,
            lane_names[lane_of(evs[i].what)]);
  }
  for (size_t i = 0; i < n; i++) ev_write(f, &evs[i], pid, &first);
  fprintf(f, "\n]}\n");
  bool ok = fflush(f) == 0;
  ok = fclose(f) == 0 && ok;
  f = NULL;
  if (!ok || rename(tmp, trace_path) != 0) {
    INFO(NCCL_INIT, "Timeline: cannot write %s: %s", trace_path, strerror(errno));
    unlink(tmp);
  } else {
    INFO(NCCL_INIT, "Timeline: %zu events written to %s", n, trace_path);
  }
out:
  free(evs);
  pthread_mutex_unlock(&write_lock);
}
