/* Reduction operators: the built-in ones as executors see them (Avg becomes PreMulSum for floating
 * types, SumPostDiv for integers) and the per-communicator table of user operators created by
 * ncclRedOpCreatePreMulSum (values ncclNumOps + index). */
#include <stdlib.h>

#include "collectives/collectives.h"

static bool redop_is_float(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16:
    case ncclFloat32:
    case ncclFloat64:
    case ncclBfloat16:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
      return true;
    default:
      return false;
  }
}

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

ncclResult_t coll_redop_resolve(struct coll_comm* cc, ncclRedOp_t op, ncclDataType_t dtype,
                                const char* api, dev_redop_t* out) {
  dev_redop_t r = {0};
  switch (op) {
    case ncclSum:
      r.kind = DEV_OP_SUM;
      break;
    case ncclProd:
      r.kind = DEV_OP_PROD;
      break;
    case ncclMin:
      r.kind = DEV_OP_MIN;
      break;
    case ncclMax:
      r.kind = DEV_OP_MAX;
      break;
    case ncclAvg:
      if (redop_is_float(dtype)) {
        r.kind = DEV_OP_PREMULSUM;
        r.scalar = coll_scalar_bits(1.0 / (double)cc->nranks, dtype);
      } else {
        r.kind = DEV_OP_SUMPOSTDIV;
        r.scalar = (uint64_t)cc->nranks;
      }
      break;
    default: {
      int idx = (int)op - (int)ncclNumOps;
      if ((int)op < 0 || idx < 0) {
        WARN("%s: invalid reduction operation %d (op)", api, (int)op);
        return ncclInvalidArgument;
      }
      pthread_mutex_lock(&cc->lock);
      bool ok = idx < cc->nuser_ops && cc->user_ops[idx].in_use;
      coll_user_op_t u = ok ? cc->user_ops[idx] : (coll_user_op_t){0};
      pthread_mutex_unlock(&cc->lock);
      if (!ok) {
        WARN(
            "%s: reduction operation %d (op) was not created on this communicator or was already "
            "destroyed with ncclRedOpDestroy",
            api, (int)op);
        return ncclInvalidArgument;
      }
      if (u.dtype != (uint8_t)dtype) {
        WARN("%s: user reduction operation %d (op) was created for datatype %s, not %s", api,
             (int)op, datatype_name((ncclDataType_t)u.dtype), datatype_name(dtype));
        return ncclInvalidArgument;
      }
      r = u.op;
      break;
    }
  }
  *out = r;
  return ncclSuccess;
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
