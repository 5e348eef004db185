/* How a span is cut into parts, the same on the host and on the GPU: the planner's channel slices
 * (plan.c, coll_split) and the staged kernel's parts (staged_device.cuh). A header of its own so
 * that the kernels which do not cut spans do not depend on it. */
#ifndef BATON_DEVICE_SPAN_H
#define BATON_DEVICE_SPAN_H

#include "device/device.h"

/* [*off, *off + *n) of part k of nparts of total units, every part but the last a multiple of
 * align units (the same number of them), the last ones possibly shorter or empty. */
DEVICE_HOST_FN void span_part(size_t total, int nparts, int k, size_t align, size_t* off,
                              size_t* n) {
  if (align == 0) align = 1;
  if (nparts < 1) nparts = 1;
  const size_t per =
      dev_udiv(dev_udiv(total + align - 1, align) + (size_t)nparts - 1, (size_t)nparts) * align;
  const size_t start = per * (size_t)k;
  *off = start < total ? start : total;
  *n = start < total ? dev_min(per, total - start) : 0;
}

#endif /* BATON_DEVICE_SPAN_H */
