/* Reduction operators: a scalar in a datatype's bits, and the per-communicator table of user
 * operators created by ncclRedOpCreatePreMulSum (values ncclNumOps + index). An entry point's
 * operation becomes what executors see in enqueue.c (coll_redop_resolve). */
#include <stdlib.h>

#include "collectives/collectives.h"

uint64_t coll_scalar_bits(double v, ncclDataType_t dtype) {
  uint64_t bits = 0;
  switch (dtype) {
    case ncclInt8: {
      int8_t x = (int8_t)v;
      memcpy(&bits, &x, sizeof(x));
      break;
    }
    case ncclUint8: {
      uint8_t x = (uint8_t)v;
      memcpy(&bits, &x, sizeof(x));
      break;
    }
    case ncclInt32: {
      int32_t x = (int32_t)v;
      memcpy(&bits, &x, sizeof(x));
      break;
    }
    case ncclUint32: {
      uint32_t x = (uint32_t)v;
      memcpy(&bits, &x, sizeof(x));
      break;
    }
    case ncclInt64: {
      int64_t x = (int64_t)v;
      memcpy(&bits, &x, sizeof(x));
      break;
    }
    case ncclUint64: {
      uint64_t x = (uint64_t)v;
      memcpy(&bits, &x, sizeof(x));
      break;
    }
    case ncclFloat16: {
      uint16_t x = float_to_half((float)v);
      memcpy(&bits, &x, sizeof(x));
      break;
    }
    case ncclFloat32: {
      float x = (float)v;
      memcpy(&bits, &x, sizeof(x));
      break;
    }
    case ncclFloat64:
      memcpy(&bits, &v, sizeof(v));
      break;
    case ncclBfloat16: {
      uint16_t x = float_to_bf16((float)v);
      memcpy(&bits, &x, sizeof(x));
      break;
    }
    case ncclFloat8e4m3: {
      uint8_t x = float_to_fp8e4m3((float)v);
      memcpy(&bits, &x, sizeof(x));
      break;
    }
    case ncclFloat8e5m2: {
      uint8_t x = float_to_fp8e5m2((float)v);
      memcpy(&bits, &x, sizeof(x));
      break;
    }
    default:
      break;
  }
  return bits;
}

void coll_user_ops_free(struct coll_comm* cc) {
  free(cc->user_ops);
  cc->user_ops = NULL;
  cc->nuser_ops = 0;
}

/* Finds a free slot in the table (growing it), under cc->lock. */
static ncclResult_t redop_slot_take(struct coll_comm* cc, int* out) {
  for (int i = 0; i < cc->nuser_ops; i++) {
    if (!cc->user_ops[i].in_use) {
      *out = i;
      return ncclSuccess;
    }
  }
  int n = cc->nuser_ops ? 2 * cc->nuser_ops : 8;
  if ((int64_t)n > (int64_t)ncclMaxRedOp - ncclNumOps) {
    WARN(
        "ncclRedOpCreatePreMulSum: too many user reduction operations (%d) on this communicator; "
        "destroy unused ones with ncclRedOpDestroy",
        cc->nuser_ops);
    return ncclInvalidUsage;
  }
  coll_user_op_t* grown = realloc(cc->user_ops, (size_t)n * sizeof(*grown));
  if (grown == NULL) {
    WARN("ncclRedOpCreatePreMulSum: out of memory growing the operator table to %d entries", n);
    return ncclSystemError;
  }
  memset(grown + cc->nuser_ops, 0, (size_t)(n - cc->nuser_ops) * sizeof(*grown));
  *out = cc->nuser_ops;
  cc->user_ops = grown;
  cc->nuser_ops = n;
  return ncclSuccess;
}

NCCL_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t* op, void* scalar,
         ncclDataType_t datatype, ncclScalarResidence_t residence, ncclComm_t comm) {
  NVTX_API_RANGE("ncclRedOpCreatePreMulSum");
  const char* api = "ncclRedOpCreatePreMulSum";
  COMM_API_SCOPE();
  ncclResult_t res = comm_check(comm, api);
  if (res != ncclSuccess) goto out;
  CHECK_GOTO(arg_check_ptr(op, api, "op"), res, out);
  CHECK_GOTO(arg_check_ptr(scalar, api, "scalar"), res, out);
  if ((int)datatype < 0 || datatype >= ncclNumTypes) {
    WARN("%s: invalid datatype %d (datatype)", api, (int)datatype);
    res = ncclInvalidArgument;
    goto out;
  }
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    WARN(
        "%s: invalid scalar residence %d (residence): use ncclScalarDevice or "
        "ncclScalarHostImmediate",
        api, (int)residence);
    res = ncclInvalidArgument;
    goto out;
  }
  struct coll_comm* cc = coll_of(comm);
  if (cc == NULL) {
    WARN("%s: communicator is not initialized yet", api);
    res = ncclInvalidUsage;
    goto out;
  }
  coll_user_op_t u = {.in_use = true, .dtype = (uint8_t)datatype};
  u.op.kind = DEV_OP_PREMULSUM;
  if (residence == ncclScalarHostImmediate) {
    memcpy(&u.op.scalar, scalar, datatype_size(datatype)); /* read now, as the API promises */
  } else {
    u.op.scalar_on_device = 1; /* read while the collective runs */
    u.op.scalar_ptr = scalar;
  }
  pthread_mutex_lock(&cc->lock);
  int idx = -1;
  res = redop_slot_take(cc, &idx);
  if (res == ncclSuccess) cc->user_ops[idx] = u;
  pthread_mutex_unlock(&cc->lock);
  if (res != ncclSuccess) goto out;
  *op = (ncclRedOp_t)((int)ncclNumOps + idx);
  INFO(NCCL_COLL, "%s: op %d datatype %s residence %s", api, (int)*op, datatype_name(datatype),
       residence == ncclScalarDevice ? "device" : "host-immediate");
out:
  return res;
}

NCCL_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm) {
  NVTX_API_RANGE("ncclRedOpDestroy");
  const char* api = "ncclRedOpDestroy";
  COMM_API_SCOPE();
  ncclResult_t res = comm_check(comm, api);
  if (res != ncclSuccess) goto out;
  if ((int)op >= 0 && (int)op < (int)ncclNumOps) {
    WARN(
        "%s: op %d (op) is a built-in operation; only operations from ncclRedOpCreatePreMulSum "
        "can be destroyed",
        api, (int)op);
    res = ncclInvalidArgument;
    goto out;
  }
  struct coll_comm* cc = coll_of(comm);
  int idx = (int)op - (int)ncclNumOps;
  bool ok = false;
  if (cc != NULL && (int)op >= 0) {
    pthread_mutex_lock(&cc->lock);
    if (idx < cc->nuser_ops && cc->user_ops[idx].in_use) {
      cc->user_ops[idx].in_use = false;
      ok = true;
    }
    pthread_mutex_unlock(&cc->lock);
  }
  if (!ok) {
    WARN("%s: op %d (op) was not created on this communicator or was already destroyed", api,
         (int)op);
    res = ncclInvalidArgument;
  }
out:
  return res;
}
