/* Collective operations with independently computed expected results. Conversions for the
 * low-precision types are the tests' own (here and in ref_numbers.c), written from the formats'
 * definitions, not the library's. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "itest.h"
#include "ref_numbers.h"

const ncclDataType_t itest_all_types[12] = {
    ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,   ncclInt64,      ncclUint64,
    ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

size_t itest_type_size(ncclDataType_t t) {
  return datatype_size(t);
}

const char* itest_type_name(ncclDataType_t t) {
  static const char* const n[12] = {"int8", "uint8", "int32",  "uint32", "int64", "uint64",
                                    "half", "float", "double", "bf16",   "e4m3",  "e5m2"};
  return (int)t >= 0 && (int)t < 12 ? n[t] : "?";
}

bool itest_type_is_float(ncclDataType_t t) {
  return t >= ncclFloat16;
}

static bool type_signed(ncclDataType_t t) {
  return t == ncclInt8 || t == ncclInt32 || t == ncclInt64;
}

/* ---- Minifloats: the reference formats of ref_numbers.h ------------------------------------- */
static const ref_fmt_t* type_minifloat(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16:
      return &ref_fmt_half;
    case ncclBfloat16:
      return &ref_fmt_bf16;
    case ncclFloat8e4m3:
      return &ref_fmt_e4m3;
    case ncclFloat8e5m2:
      return &ref_fmt_e5m2;
    default:
      return NULL;
  }
}

/* Nearest even by arithmetic on the exponent (saturation is not needed by the tests). */
static uint32_t mf_encode(const ref_fmt_t* f, double v) {
  uint32_t sign = signbit(v) ? 1u : 0u;
  double a = fabs(v);
  uint32_t bits = 0;
  if (a != 0) {
    int e;
    frexp(a, &e); /* a = x * 2^e, x in [0.5, 1): the leading bit is 2^(e-1) */
    int lead = e - 1;
    int min_normal = 1 - f->bias;
    int q = (lead < min_normal ? min_normal : lead) - f->mbits; /* quantum exponent */
    double units = nearbyint(ldexp(a, -q));                     /* ties to even */
    double r = ldexp(units, q);
    frexp(r, &e);
    lead = e - 1;
    if (lead < min_normal) {
      bits = (uint32_t)units; /* subnormal (or zero) */
    } else {
      uint32_t m = (uint32_t)(ldexp(r, -lead) * (1u << f->mbits)) - (1u << f->mbits);
      bits = (uint32_t)(lead + f->bias) << f->mbits | m;
    }
  }
  return sign << (f->ebits + f->mbits) | bits;
}

double itest_decode(ncclDataType_t t, const void* p) {
  switch (t) {
    case ncclInt8:
      return *(const int8_t*)p;
    case ncclUint8:
      return *(const uint8_t*)p;
    case ncclInt32:
      return *(const int32_t*)p;
    case ncclUint32:
      return *(const uint32_t*)p;
    case ncclInt64:
      return (double)*(const int64_t*)p;
    case ncclUint64:
      return (double)*(const uint64_t*)p;
    case ncclFloat32:
      return *(const float*)p;
    case ncclFloat64:
      return *(const double*)p;
    case ncclFloat16:
    case ncclBfloat16:
      return ref_fmt_decode(type_minifloat(t), *(const uint16_t*)p);
    default:
      return ref_fmt_decode(type_minifloat(t), *(const uint8_t*)p);
  }
}

void itest_encode(ncclDataType_t t, double v, void* p) {
  switch (t) {
    case ncclInt8:
      *(int8_t*)p = (int8_t)v;
      break;
    case ncclUint8:
      *(uint8_t*)p = (uint8_t)v;
      break;
    case ncclInt32:
      *(int32_t*)p = (int32_t)v;
      break;
    case ncclUint32:
      *(uint32_t*)p = (uint32_t)v;
      break;
    case ncclInt64:
      *(int64_t*)p = (int64_t)v;
      break;
    case ncclUint64:
      *(uint64_t*)p = (uint64_t)v;
      break;
    case ncclFloat32:
      *(float*)p = (float)v;
      break;
    case ncclFloat64:
      *(double*)p = v;
      break;
    case ncclFloat16:
    case ncclBfloat16:
      *(uint16_t*)p = (uint16_t)mf_encode(type_minifloat(t), v);
      break;
    default:
      *(uint8_t*)p = (uint8_t)mf_encode(type_minifloat(t), v);
      break;
  }
}

/* Relative rounding unit of a floating type (2^-mantissa bits). */
static double type_eps(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32:
      return ldexp(1, -23);
    case ncclFloat64:
      return ldexp(1, -52);
    default:
      return ldexp(1, -type_minifloat(t)->mbits);
  }
}

static double type_min_subnormal(ncclDataType_t t) {
  switch (t) {
    case ncclFloat32:
      return ldexp(1, -149);
    case ncclFloat64:
      return ldexp(1, -1074);
    default: {
      const ref_fmt_t* f = type_minifloat(t);
      return ldexp(1, 1 - f->bias - f->mbits);
    }
  }
}

/* ---- Names --------------------------------------------------------------------------------- */
const char* itest_op_name(int op) {
  static const char* const n[IT_OP_COUNT] = {
      "sum", "prod", "min", "max", "avg", "premulsum(host)", "premulsum(device)"};
  return op >= 0 && op < IT_OP_COUNT ? n[op] : "?";
}

const char* itest_func_name(int func) {
  static const char* const n[IT_FUNC_COUNT] = {"AllReduce", "Reduce", "ReduceScatter",
                                               "Broadcast", "Bcast",  "AllGather",
                                               "AlltoAll",  "Gather", "Scatter"};
  return func >= 0 && func < IT_FUNC_COUNT ? n[func] : "?";
}

bool itest_func_reduces(int func) {
  return func == IT_ALLREDUCE || func == IT_REDUCE || func == IT_REDUCESCATTER;
}

/* ---- Values -------------------------------------------------------------------------------- */
uint64_t itest_hash(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = a * 0x9E3779B97F4A7C15ULL ^ (b + 0x632BE59BD9B4E019ULL) * 0xC2B2AE3D27D4EB4FULL ^
               (c + 0x165667B19E3779F9ULL) * 0xD6E8FEB86659FD93ULL;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ULL;
  x ^= x >> 29;
  return x;
}

void itest_fill_bytes(void* buf, size_t bytes, int rank, uint32_t seed, size_t first_byte) {
  unsigned char* p = buf;
  for (size_t i = 0; i < bytes; i++)
    p[i] = (unsigned char)(itest_hash((uint64_t)rank, first_byte + i, seed) >> 24);
}

double itest_value(ncclDataType_t t, int op, int rank, size_t idx, uint32_t seed) {
  uint64_t h = itest_hash((uint64_t)rank + 1, idx, seed);
  bool sgn = type_signed(t) || itest_type_is_float(t);
  switch (op) {
    case IT_PROD: {
      /* factors whose products stay exact in every type: +-1, 2, 1/2 (1/2 only for floats) */
      static const double f_float[6] = {1, -1, 2, 1, 0.5, -1};
      static const double f_signed[4] = {1, -1, 2, 1};
      static const double f_unsigned[3] = {1, 2, 3};
      if (itest_type_is_float(t)) return f_float[h % 6];
      return sgn ? f_signed[h % 4] : f_unsigned[h % 3];
    }
    case IT_MIN:
    case IT_MAX:
      return sgn ? (double)(int)(h % 21) - 10 : (double)(h % 200);
    default:
      /* sums: small integers, exact partial sums in every type for up to 8 ranks */
      if (itest_type_is_float(t)) return (double)(int)(h % 3) - 1;
      return sgn ? (double)(int)(h % 11) - 5 : (double)(h % 11);
  }
}

/* The stored (encoded) value of a contribution. */
static double stored_value(ncclDataType_t t, int op, int rank, size_t idx, uint32_t seed) {
  unsigned char tmp[8];
  itest_encode(t, itest_value(t, op, rank, idx, seed), tmp);
  return itest_decode(t, tmp);
}

/* ---- Expected reductions ----------------------------------------------------------------------
 */
static uint64_t int_bits(ncclDataType_t t, double v) {
  unsigned char tmp[8] = {0};
  itest_encode(t, v, tmp);
  uint64_t u = 0;
  memcpy(&u, tmp, itest_type_size(t));
  size_t w = itest_type_size(t) * 8;
  if (type_signed(t) && w < 64 && (u >> (w - 1) & 1)) u |= ~0ULL << w; /* sign-extend */
  return u;
}

static uint64_t int_wrap(ncclDataType_t t, uint64_t u) {
  size_t w = itest_type_size(t) * 8;
  if (w == 64) return u;
  u &= (1ULL << w) - 1;
  if (type_signed(t) && (u >> (w - 1) & 1)) u |= ~0ULL << w;
  return u;
}

/* Rank r's PreMulSum scalar from the case's (even ranks'): every rank passes its own, which
 * scales that rank's input only. Odd ranks: twice it (floats: exact), or 2 more (integers). */
static double rank_scalar(ncclDataType_t t, double base, int r) {
  return r % 2 == 0 ? base : itest_type_is_float(t) ? base * 2 : base + 2;
}

/* Integer reduction over ranks in modular arithmetic; returns the expected bits (sign-extended). */
static uint64_t expect_int(ncclDataType_t t, int op, int nranks, size_t idx, uint32_t seed,
                           int64_t scalar) {
  bool sg = type_signed(t);
  uint64_t acc = 0;
  for (int r = 0; r < nranks; r++) {
    uint64_t x = int_bits(t, itest_value(t, op, r, idx, seed));
    const uint64_t s = (uint64_t)(int64_t)rank_scalar(t, (double)scalar, r);
    if (r == 0) {
      acc = op == IT_PREMUL_HOST || op == IT_PREMUL_DEVICE ? int_wrap(t, x * s) : x;
      continue;
    }
    switch (op) {
      case IT_PROD:
        acc = int_wrap(t, acc * x);
        break;
      case IT_MIN:
        acc = sg ? ((int64_t)x < (int64_t)acc ? x : acc) : (x < acc ? x : acc);
        break;
      case IT_MAX:
        acc = sg ? ((int64_t)x > (int64_t)acc ? x : acc) : (x > acc ? x : acc);
        break;
      case IT_PREMUL_HOST:
      case IT_PREMUL_DEVICE:
        acc = int_wrap(t, acc + int_wrap(t, x * s));
        break;
      default:
        acc = int_wrap(t, acc + x);
        break;
    }
  }
  if (op == IT_AVG) {
    if (sg)
      acc = int_wrap(t, (uint64_t)((int64_t)acc / nranks)); /* C division: toward zero */
    else
      acc = acc / (uint64_t)nranks;
  }
  return acc;
}

/* Floating reduction in double, with the tolerance the type's roundings allow. */
static void expect_float(ncclDataType_t t, int op, int nranks, size_t idx, uint32_t seed,
                         double scalar, double* val, double* tol) {
  double acc = 0, mag = 0;
  for (int r = 0; r < nranks; r++) {
    double x = stored_value(t, op, r, idx, seed);
    switch (op) {
      case IT_PROD:
        acc = r == 0 ? x : acc * x;
        break;
      case IT_MIN:
        acc = r == 0 ? x : fmin(acc, x);
        break;
      case IT_MAX:
        acc = r == 0 ? x : fmax(acc, x);
        break;
      case IT_AVG:
        acc += x / nranks;
        mag += fabs(x / nranks);
        break;
      case IT_PREMUL_HOST:
      case IT_PREMUL_DEVICE:
        acc += x * rank_scalar(t, scalar, r);
        mag += fabs(x * rank_scalar(t, scalar, r));
        break;
      default:
        acc += x;
        mag += fabs(x);
        break;
    }
  }
  double eps = type_eps(t);
  if (op == IT_MIN || op == IT_MAX)
    *tol = 0;
  else if (op == IT_PROD)
    *tol = nranks * eps * fabs(acc);
  else
    *tol = (nranks + 3) * eps * mag + 2 * type_min_subnormal(t);
  *val = acc;
}

/* ---- Prepared operations
 * ------------------------------------------------------------------------- */
#define GUARD_ELEMS 8
#define GUARD_BYTE 0xA5
#define POISON_BYTE 0x5A

static struct {
  bool on;
  int outside;
} it_windows = {false, -1};

void itest_windows(bool on, int outside) {
  it_windows.on = on;
  it_windows.outside = outside;
}

static size_t guarded_bytes(size_t elems, size_t esize) {
  return (elems + 2 * GUARD_ELEMS) * esize;
}

/* malloc, or ncclMemAlloc for a window (mem) */
static char* alloc_guarded_in(size_t elems, size_t esize, char** raw, bool mem) {
  size_t bytes = guarded_bytes(elems, esize);
  if (mem) {
    if (ncclMemAlloc((void**)raw, bytes) != ncclSuccess) *raw = NULL;
  } else {
    *raw = malloc(bytes);
  }
  if (*raw == NULL) return NULL;
  memset(*raw, GUARD_BYTE, bytes);
  return *raw + GUARD_ELEMS * esize;
}

/* Windows mode: one window per buffer the case has (the same number on every rank). */
static int windows_register(itest_op_t* o, size_t send_bytes, size_t recv_bytes) {
  if (o->rank == it_windows.outside) {
    size_t most = send_bytes > recv_bytes ? send_bytes : recv_bytes;
    IT_NCCL(ncclMemAlloc(&o->decoy, most));
    IT_NCCL(ncclCommWindowRegister(o->comm, o->decoy, most, &o->win[0], NCCL_WIN_DEFAULT));
    if (!o->c.inplace)
      IT_NCCL(ncclCommWindowRegister(o->comm, o->decoy, most, &o->win[1], NCCL_WIN_DEFAULT));
    return 0;
  }
  IT_NCCL(ncclCommWindowRegister(o->comm, o->recv_raw, recv_bytes, &o->win[0], NCCL_WIN_DEFAULT));
  if (!o->c.inplace)
    IT_NCCL(ncclCommWindowRegister(o->comm, o->send_raw, send_bytes, &o->win[1], NCCL_WIN_DEFAULT));
  return 0;
}

static int guards_intact(const char* raw, size_t elems, size_t esize) {
  const unsigned char* p = (const unsigned char*)raw;
  size_t g = GUARD_ELEMS * esize, tail = g + elems * esize;
  for (size_t i = 0; i < g; i++)
    if (p[i] != GUARD_BYTE || p[tail + i] != GUARD_BYTE) return 0;
  return 1;
}

/* Fills this rank's input for the case at dst (elements [first, first + n) of its input). */
static void fill_input(const itest_op_t* o, char* dst, size_t first, size_t n) {
  ncclDataType_t t = o->c.dtype;
  size_t es = itest_type_size(t);
  if (itest_func_reduces(o->c.func)) {
    for (size_t i = 0; i < n; i++)
      itest_encode(t, itest_value(t, o->c.op, o->rank, first + i, o->c.seed), dst + i * es);
  } else {
    itest_fill_bytes(dst, n * es, o->rank, o->c.seed, first * es);
  }
}

int itest_op_prepare(itest_op_t* o, ncclComm_t comm, const itest_case_t* c) {
  memset(o, 0, sizeof(*o));
  o->c = *c;
  if (c->func == IT_BCAST) o->c.inplace = true; /* ncclBcast has one buffer */
  c = &o->c;
  o->comm = comm;
  IT_NCCL(ncclCommUserRank(comm, &o->rank));
  IT_NCCL(ncclCommCount(comm, &o->nranks));
  int n = o->nranks;
  size_t cnt = c->count, es = itest_type_size(c->dtype);
  bool root = o->rank == c->root;
  size_t in_elems = cnt, out_elems = cnt;
  switch (c->func) {
    case IT_REDUCESCATTER:
      in_elems = cnt * n;
      break;
    case IT_ALLGATHER:
      out_elems = cnt * n;
      break;
    case IT_ALLTOALL:
      in_elems = out_elems = cnt * n;
      break;
    case IT_GATHER:
      out_elems = root ? cnt * n : 0;
      break;
    case IT_SCATTER:
      in_elems = root ? cnt * n : 0;
      break;
    default:
      break;
  }
  o->nccl_op = (ncclRedOp_t)(c->op == IT_PROD  ? ncclProd
                             : c->op == IT_MIN ? ncclMin
                             : c->op == IT_MAX ? ncclMax
                             : c->op == IT_AVG ? ncclAvg
                                               : ncclSum);
  if (itest_func_reduces(c->func) && (c->op == IT_PREMUL_HOST || c->op == IT_PREMUL_DEVICE)) {
    /* Floats: 1/2 (or 2 with device residence); integers: 3. Exact in every type. Odd ranks
     * pass another scalar (rank_scalar). */
    const double base = itest_type_is_float(c->dtype) ? (c->op == IT_PREMUL_HOST ? 0.5 : 2.0) : 3.0;
    const double s = rank_scalar(c->dtype, base, o->rank);
    o->scalar_mem = calloc(1, 8);
    IT_EXPECT(o->scalar_mem != NULL, "out of memory");
    if (c->op == IT_PREMUL_DEVICE) {
      /* Created with another value: the one stored before the operation runs must be used. */
      itest_encode(c->dtype, 7.0, o->scalar_mem);
    } else {
      itest_encode(c->dtype, s, o->scalar_mem);
    }
    IT_NCCL(ncclRedOpCreatePreMulSum(
        &o->nccl_op, o->scalar_mem, c->dtype,
        c->op == IT_PREMUL_HOST ? ncclScalarHostImmediate : ncclScalarDevice, comm));
    o->user_op = true;
    if (c->op == IT_PREMUL_HOST)
      itest_encode(c->dtype, 9.0, o->scalar_mem); /* must not matter */
    else
      itest_encode(c->dtype, s, o->scalar_mem);
    o->scalar = base;
  }

  o->windows = it_windows.on;
  const bool mem = o->windows && o->rank != it_windows.outside;
  if (c->inplace) {
    size_t elems = in_elems > out_elems ? in_elems : out_elems;
    o->recv = alloc_guarded_in(elems, es, &o->recv_raw, mem);
    IT_EXPECT(o->recv != NULL, "out of memory for %zu elements", elems);
    o->recv_elems = o->send_elems = elems;
    switch (c->func) {
      case IT_ALLGATHER:
        o->send = o->recv + (size_t)o->rank * cnt * es;
        fill_input(o, o->send, 0, cnt);
        break;
      case IT_REDUCESCATTER:
        o->send = o->recv;
        o->recv = o->send + (size_t)o->rank * cnt * es;
        fill_input(o, o->send, 0, in_elems);
        break;
      default:
        o->send = o->recv;
        if (c->func == IT_BROADCAST || c->func == IT_BCAST) {
          if (root)
            fill_input(o, o->send, 0, cnt);
          else
            memset(o->recv, POISON_BYTE, cnt * es);
        } else {
          fill_input(o, o->send, 0, in_elems);
        }
        break;
    }
  } else {
    o->send = alloc_guarded_in(in_elems, es, &o->send_raw, mem);
    o->recv = alloc_guarded_in(out_elems, es, &o->recv_raw, mem);
    IT_EXPECT(o->send && o->recv, "out of memory");
    o->send_elems = in_elems;
    o->recv_elems = out_elems;
    fill_input(o, o->send, 0, in_elems);
    memset(o->recv, POISON_BYTE, out_elems * es);
    if ((c->func == IT_BROADCAST) && !root) memset(o->send, POISON_BYTE, in_elems * es);
  }
  if (o->windows && windows_register(o, c->inplace ? 0 : guarded_bytes(o->send_elems, es),
                                     guarded_bytes(o->recv_elems, es)))
    return 1;
  o->input_copy = malloc(o->send_elems * es + 1);
  IT_EXPECT(o->input_copy != NULL, "out of memory");
  size_t send_elems_now = c->inplace ? o->send_elems : in_elems;
  if (c->inplace && c->func == IT_ALLGATHER) send_elems_now = cnt;
  if (c->inplace && c->func == IT_REDUCESCATTER) send_elems_now = in_elems;
  memcpy(o->input_copy, o->send, send_elems_now * es);
  return 0;
}

ncclResult_t itest_op_post(itest_op_t* o) {
  const itest_case_t* c = &o->c;
  switch (c->func) {
    case IT_ALLREDUCE:
      return ncclAllReduce(o->send, o->recv, c->count, c->dtype, o->nccl_op, o->comm, NULL);
    case IT_REDUCE:
      return ncclReduce(o->send, o->recv, c->count, c->dtype, o->nccl_op, c->root, o->comm, NULL);
    case IT_REDUCESCATTER:
      return ncclReduceScatter(o->send, o->recv, c->count, c->dtype, o->nccl_op, o->comm, NULL);
    case IT_BROADCAST:
      return ncclBroadcast(o->send, o->recv, c->count, c->dtype, c->root, o->comm, NULL);
    case IT_BCAST:
      return ncclBcast(o->recv, c->count, c->dtype, c->root, o->comm, NULL);
    case IT_ALLGATHER:
      return ncclAllGather(o->send, o->recv, c->count, c->dtype, o->comm, NULL);
    case IT_ALLTOALL:
      return ncclAlltoAll(o->send, o->recv, c->count, c->dtype, o->comm, NULL);
    case IT_GATHER:
      return ncclGather(o->send, o->recv, c->count, c->dtype, c->root, o->comm, NULL);
    case IT_SCATTER:
      return ncclScatter(o->send, o->recv, c->count, c->dtype, c->root, o->comm, NULL);
    default:
      return ncclInvalidArgument;
  }
}

/* The same through the *Config entry points (ncclBcast has none: ncclBroadcastConfig in place). */
ncclResult_t itest_op_post_config(itest_op_t* o, const ncclCollConfig_t* cfg) {
  const itest_case_t* c = &o->c;
  switch (c->func) {
    case IT_ALLREDUCE:
      return ncclAllReduceConfig(o->send, o->recv, c->count, c->dtype, o->nccl_op, o->comm, NULL,
                                 cfg);
    case IT_REDUCE:
      return ncclReduceConfig(o->send, o->recv, c->count, c->dtype, o->nccl_op, c->root, o->comm,
                              NULL, cfg);
    case IT_REDUCESCATTER:
      return ncclReduceScatterConfig(o->send, o->recv, c->count, c->dtype, o->nccl_op, o->comm,
                                     NULL, cfg);
    case IT_BROADCAST:
      return ncclBroadcastConfig(o->send, o->recv, c->count, c->dtype, c->root, o->comm, NULL,
                                 cfg);
    case IT_BCAST:
      return ncclBroadcastConfig(o->recv, o->recv, c->count, c->dtype, c->root, o->comm, NULL,
                                 cfg);
    case IT_ALLGATHER:
      return ncclAllGatherConfig(o->send, o->recv, c->count, c->dtype, o->comm, NULL, cfg);
    case IT_ALLTOALL:
      return ncclAlltoAllConfig(o->send, o->recv, c->count, c->dtype, o->comm, NULL, cfg);
    case IT_GATHER:
      return ncclGatherConfig(o->send, o->recv, c->count, c->dtype, c->root, o->comm, NULL, cfg);
    case IT_SCATTER:
      return ncclScatterConfig(o->send, o->recv, c->count, c->dtype, c->root, o->comm, NULL, cfg);
    default:
      return ncclInvalidArgument;
  }
}

#define CASE_FMT "%s %s %s count %zu root %d %s rank %d/%d"
#define CASE_ARGS(o)                                                                               \
  itest_func_name((o)->c.func), itest_type_name((o)->c.dtype),                                     \
      itest_func_reduces((o)->c.func) ? itest_op_name((o)->c.op) : "-", (o)->c.count, (o)->c.root, \
      (o)->c.inplace ? "in-place" : "out-of-place", (o)->rank, (o)->nranks

/* Checks reduced element i of out against element idx of the inputs. */
static int check_reduced(const itest_op_t* o, const char* out, size_t i, size_t idx) {
  ncclDataType_t t = o->c.dtype;
  size_t es = itest_type_size(t);
  const char* p = out + i * es;
  if (!itest_type_is_float(t)) {
    uint64_t want = expect_int(t, o->c.op, o->nranks, idx, o->c.seed, (int64_t)o->scalar);
    uint64_t got = 0;
    memcpy(&got, p, es);
    uint64_t mask = es == 8 ? ~0ULL : (1ULL << (es * 8)) - 1;
    IT_EXPECT((got & mask) == (want & mask), CASE_FMT ": element %zu is 0x%llx, expected 0x%llx",
              CASE_ARGS(o), i, (unsigned long long)(got & mask), (unsigned long long)(want & mask));
    return 0;
  }
  double want, tol;
  expect_float(t, o->c.op, o->nranks, idx, o->c.seed, o->scalar, &want, &tol);
  double got = itest_decode(t, p);
  IT_EXPECT(fabs(got - want) <= tol,
            CASE_FMT ": element %zu is %.9g, expected %.9g (tolerance %.3g)", CASE_ARGS(o), i, got,
            want, tol);
  return 0;
}

/* Checks n elements at out equal rank src's input elements [first, first + n) byte for byte. */
static int check_copied(const itest_op_t* o, const char* out, int src, size_t first, size_t n) {
  size_t es = itest_type_size(o->c.dtype);
  unsigned char buf[4096];
  for (size_t done = 0; done < n * es;) {
    size_t len = n * es - done < sizeof(buf) ? n * es - done : sizeof(buf);
    itest_fill_bytes(buf, len, src, o->c.seed, first * es + done);
    if (memcmp(buf, out + done, len) != 0) {
      size_t k = 0;
      while (buf[k] == (unsigned char)out[done + k]) k++;
      IT_EXPECT(0, CASE_FMT ": byte %zu of the block from rank %d is 0x%02x, expected 0x%02x",
                CASE_ARGS(o), done + k, src, (unsigned char)out[done + k], buf[k]);
    }
    done += len;
  }
  return 0;
}

static int check_unchanged(const itest_op_t* o, const char* p, const char* ref, size_t bytes,
                           const char* what) {
  IT_EXPECT(memcmp(p, ref, bytes) == 0, CASE_FMT ": %s was modified", CASE_ARGS(o), what);
  return 0;
}

static int check_poison(const itest_op_t* o, const char* p, size_t bytes, const char* what) {
  for (size_t i = 0; i < bytes; i++)
    IT_EXPECT((unsigned char)p[i] == POISON_BYTE, CASE_FMT ": %s byte %zu was written",
              CASE_ARGS(o), what, i);
  return 0;
}

int itest_op_check(const itest_op_t* o) {
  const itest_case_t* c = &o->c;
  size_t es = itest_type_size(c->dtype), cnt = c->count;
  int n = o->nranks, me = o->rank;
  bool root = me == c->root;
  const char* out = o->recv;
  switch (c->func) {
    case IT_ALLREDUCE:
      for (size_t i = 0; i < cnt; i++)
        if (check_reduced(o, out, i, i)) return 1;
      break;
    case IT_REDUCE:
      if (root) {
        for (size_t i = 0; i < cnt; i++)
          if (check_reduced(o, out, i, i)) return 1;
      } else if (c->inplace) {
        if (check_unchanged(o, out, o->input_copy, cnt * es, "a non-root recvbuff (in place)"))
          return 1;
      } else if (check_poison(o, out, cnt * es, "a non-root recvbuff")) {
        return 1;
      }
      break;
    case IT_REDUCESCATTER:
      for (size_t i = 0; i < cnt; i++)
        if (check_reduced(o, out, i, (size_t)me * cnt + i)) return 1;
      break;
    case IT_BROADCAST:
    case IT_BCAST:
      if (check_copied(o, out, c->root, 0, cnt)) return 1;
      break;
    case IT_ALLGATHER:
      for (int r = 0; r < n; r++)
        if (check_copied(o, out + (size_t)r * cnt * es, r, 0, cnt)) return 1;
      break;
    case IT_ALLTOALL:
      for (int r = 0; r < n; r++)
        if (check_copied(o, out + (size_t)r * cnt * es, r, (size_t)me * cnt, cnt)) return 1;
      break;
    case IT_GATHER:
      if (root) {
        for (int r = 0; r < n; r++)
          if (check_copied(o, out + (size_t)r * cnt * es, r, 0, cnt)) return 1;
      }
      break;
    case IT_SCATTER:
      if (check_copied(o, out, c->root, (size_t)me * cnt, cnt)) return 1;
      break;
  }
  /* Guards around the buffers, and inputs an out-of-place operation must not touch. */
  IT_EXPECT(guards_intact(o->recv_raw, c->inplace ? o->recv_elems : o->recv_elems, es),
            CASE_FMT ": a write outside recvbuff", CASE_ARGS(o));
  if (!c->inplace) {
    IT_EXPECT(guards_intact(o->send_raw, o->send_elems, es), CASE_FMT ": a write outside sendbuff",
              CASE_ARGS(o));
    if (check_unchanged(o, o->send, o->input_copy, o->send_elems * es, "sendbuff")) return 1;
  }
  return 0;
}

void itest_op_release(itest_op_t* o) {
  if (o->user_op) (void)ncclRedOpDestroy(o->nccl_op, o->comm);
  for (int i = 0; i < 2; i++)
    if (o->win[i] != NULL) (void)ncclCommWindowDeregister(o->comm, o->win[i]);
  if (o->windows && o->rank != it_windows.outside) {
    (void)ncclMemFree(o->send_raw);
    (void)ncclMemFree(o->recv_raw);
  } else {
    free(o->send_raw);
    free(o->recv_raw);
  }
  (void)ncclMemFree(o->decoy);
  free(o->input_copy);
  free(o->scalar_mem);
  memset(o, 0, sizeof(*o));
}

itest_case_t itest_hosts_case(int idx, const size_t counts[2], const ncclDataType_t types[4],
                              int nranks, uint32_t seed0) {
  int f = idx % IT_FUNC_COUNT, ti = (idx / IT_FUNC_COUNT) % 4, k = idx / (4 * IT_FUNC_COUNT);
  itest_case_t c = {.func = f,
                    .dtype = types[ti],
                    .op = itest_func_reduces(f) ? (ti + f + k) % IT_OP_COUNT : IT_SUM,
                    .count = counts[k],
                    .root = (f + k) % nranks,
                    .inplace = (f + ti) % 2 == 1 && f < IT_ALLTOALL,
                    .seed = seed0 + (uint32_t)idx};
  return c;
}

size_t itest_output_elems(const itest_case_t* c, int rank, int nranks) {
  bool root = rank == c->root;
  switch (c->func) {
    case IT_ALLGATHER:
    case IT_ALLTOALL:
      return c->count * (size_t)nranks;
    case IT_GATHER:
      return root ? c->count * (size_t)nranks : 0;
    case IT_REDUCE:
      return root ? c->count : 0;
    default:
      return c->count;
  }
}

int itest_op_run(ncclComm_t comm, const itest_case_t* c) {
  itest_op_t o;
  if (itest_op_prepare(&o, comm, c) != 0) {
    itest_op_release(&o);
    return 1;
  }
  ncclResult_t res = itest_op_post(&o);
  int rc = 0;
  if (res != ncclSuccess) {
    fprintf(stderr, CASE_FMT ": returned %d (%s): %s\n", CASE_ARGS(&o), (int)res,
            ncclGetErrorString(res), ncclGetLastError(comm));
    rc = 1;
  } else {
    rc = itest_op_check(&o);
  }
  itest_op_release(&o);
  return rc;
}
