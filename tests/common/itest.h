/* Integration-test helpers (tests/integration): running N ranks as forked processes on loopback,
 * and collective operations whose expected results are computed here, independently of the
 * library (own float16/bfloat16/fp8 conversions, reductions in double or in modular integer
 * arithmetic, per-type tolerances).
 *
 * Rank bodies report failures with IT_EXPECT, which prints and returns 1; Check's ck_assert is
 * not used inside the forked ranks. */
#ifndef BATON_TESTS_ITEST_H
#define BATON_TESTS_ITEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include "nccl.h"

/* ---- Running ranks --------------------------------------------------------------------------- */
#define ITEST_MAX_RANKS 16
#define ITEST_MAX_COMMS 2
#define ITEST_MAX_ENV 8

typedef struct itest_opts {
  int nranks;
  int ncomms;       /* communicators every rank joins (default 1) */
  int nhosts;       /* >= 2: rank r plays host r * nhosts / nranks (NCCL_HOSTID) */
  bool nonblocking; /* config.blocking = 0 */
  bool no_init;     /* the body creates its communicators itself (ids are still handed out) */
  int timeout_s;    /* bound on the whole run (default 120) */
  const char* env[ITEST_MAX_ENV]; /* "NAME=VALUE", set in every rank before any NCCL call */
  unsigned may_die;               /* ranks (bits) whose exit status is not checked */
} itest_opts_t;

typedef struct itest_rank {
  int rank, nranks;
  ncclUniqueId ids[ITEST_MAX_COMMS];
  ncclComm_t comms[ITEST_MAX_COMMS]; /* destroyed after the body unless it set them to NULL */
  const itest_opts_t* opts;
} itest_rank_t;

/* Returns 0 on success, nonzero (after printing why) on failure. */
typedef int (*itest_body_t)(itest_rank_t* r, void* arg);

/* Forks opts->nranks processes, hands them the unique ids (rank 0 creates them), initializes the
 * communicators, runs body in each and waits (bounded). Returns the number of ranks that failed. */
int itest_run(const itest_opts_t* opts, itest_body_t body, void* arg);

/* Seconds since an arbitrary start (CLOCK_MONOTONIC). */
double itest_now(void);

#define IT_EXPECT(cond, ...)                                                                   \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "[pid %d] %s:%d: check failed: %s: ", (int)getpid(), __FILE__, __LINE__, \
              #cond);                                                                          \
      fprintf(stderr, __VA_ARGS__);                                                            \
      fprintf(stderr, "\n");                                                                   \
      return 1;                                                                                \
    }                                                                                          \
  } while (0)
#define IT_NCCL(call)                                                             \
  do {                                                                            \
    ncclResult_t it_res_ = (call);                                                \
    IT_EXPECT(it_res_ == ncclSuccess, "%s returned %d (%s)", #call, (int)it_res_, \
              ncclGetErrorString(it_res_));                                       \
  } while (0)

/* ---- Typed values ------------------------------------------------------------------------------
 */
extern const ncclDataType_t itest_all_types[12];
size_t itest_type_size(ncclDataType_t t);
const char* itest_type_name(ncclDataType_t t);
bool itest_type_is_float(ncclDataType_t t);
/* Value of a stored element as a double (exact for every type). */
double itest_decode(ncclDataType_t t, const void* p);
/* Stores v rounded to nearest even (saturation is not needed by the tests). */
void itest_encode(ncclDataType_t t, double v, void* p);

/* ---- Operations with checked results ----------------------------------------------------------
 */
typedef enum {
  IT_SUM = 0,
  IT_PROD,
  IT_MIN,
  IT_MAX,
  IT_AVG,
  IT_PREMUL_HOST,   /* ncclRedOpCreatePreMulSum, ncclScalarHostImmediate */
  IT_PREMUL_DEVICE, /* ncclScalarDevice: the scalar is read while the operation runs */
  IT_OP_COUNT
} itest_op_kind_t;
const char* itest_op_name(int op);

typedef enum {
  IT_ALLREDUCE = 0,
  IT_REDUCE,
  IT_REDUCESCATTER,
  IT_BROADCAST,
  IT_BCAST, /* ncclBcast: always in place */
  IT_ALLGATHER,
  IT_ALLTOALL,
  IT_GATHER,
  IT_SCATTER,
  IT_FUNC_COUNT
} itest_func_t;
const char* itest_func_name(int func);
bool itest_func_reduces(int func);

typedef struct itest_case {
  int func; /* itest_func_t */
  ncclDataType_t dtype;
  int op;       /* itest_op_kind_t, for the reducing functions */
  size_t count; /* as the API takes it */
  int root;
  bool inplace;
  uint32_t seed;
} itest_case_t;

/* One prepared operation: buffers (with guard zones), a user op if needed. */
typedef struct itest_op {
  itest_case_t c;
  ncclComm_t comm;
  int rank, nranks;
  char* send_raw;
  char* recv_raw;
  char* send;                    /* what is passed as sendbuff */
  char* recv;                    /* what is passed as recvbuff */
  size_t send_elems, recv_elems; /* sizes of the buffers (in place: the one buffer) */
  char* input_copy; /* this rank's input, to check that out-of-place sendbuff is untouched */
  ncclRedOp_t nccl_op;
  bool user_op;
  bool windows;        /* buffers from ncclMemAlloc, registered as windows (itest_windows) */
  ncclWindow_t win[2]; /* the windows this rank registered for the case (NULL: none) */
  void* decoy;         /* itest_windows' outside rank: the buffer its windows cover instead */
  double scalar;       /* the PreMulSum scalar of even ranks (odd ones pass another) */
  void* scalar_mem;    /* device-residence scalar (host memory on the host executor) */
} itest_op_t;

/* Windows mode for the cases prepared from now on in this process: every buffer comes from
 * ncclMemAlloc and is registered with ncclCommWindowRegister (collective: every rank prepares the
 * same cases), and deregistered at release. Rank `outside` (-1: none) registers as many windows,
 * over a buffer of its own, and passes ordinary buffers outside them. */
void itest_windows(bool on, int outside);

/* Allocates and fills buffers; creates a user op for IT_PREMUL_*. 0 on success. */
int itest_op_prepare(itest_op_t* o, ncclComm_t comm, const itest_case_t* c);
/* Calls the NCCL entry point (inside or outside a group, as the caller arranges). */
ncclResult_t itest_op_post(itest_op_t* o);
/* The same through the *Config entry point of the case's collective (2.31), with cfg. */
ncclResult_t itest_op_post_config(itest_op_t* o, const ncclCollConfig_t* cfg);
/* Checks results, guard zones and untouched inputs; 0 when all good (else prints why). */
int itest_op_check(const itest_op_t* o);
void itest_op_release(itest_op_t* o);
/* prepare + post + check + release. */
int itest_op_run(ncclComm_t comm, const itest_case_t* c);

/* Case idx of the multi-host matrix (idx < 2 * 4 * IT_FUNC_COUNT): counts[idx / 36] elements,
 * types[(idx / IT_FUNC_COUNT) % 4], every function, with ops, roots and in-place use rotating so
 * that each combination appears; seeds seed0 + idx. */
#define ITEST_HOSTS_CASES (2 * 4 * IT_FUNC_COUNT)
itest_case_t itest_hosts_case(int idx, const size_t counts[2], const ncclDataType_t types[4],
                              int nranks, uint32_t seed0);
/* Elements of the defined output at o->recv after case c on rank (scratch parts of an in-place
 * buffer and non-root outputs left out). */
size_t itest_output_elems(const itest_case_t* c, int rank, int nranks);

/* Deterministic pseudo-random bytes for copies, values for reductions. */
uint64_t itest_hash(uint64_t a, uint64_t b, uint64_t c);
void itest_fill_bytes(void* buf, size_t bytes, int rank, uint32_t seed, size_t first_byte);
/* The value rank contributes at element index idx of a reduction with op (before encoding). */
double itest_value(ncclDataType_t t, int op, int rank, size_t idx, uint32_t seed);

#endif /* BATON_TESTS_ITEST_H */
