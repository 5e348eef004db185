/* The staged algorithms' kernels, one a datatype (kernel_staged.cu), for the CUDA executor's
 * host side: a header of its own so that the other kernels do not depend on it. */
#ifndef BATON_DEVICE_CUDA_STAGED_KERNELS_H
#define BATON_DEVICE_CUDA_STAGED_KERNELS_H

#ifdef __cplusplus
extern "C" {
#endif
/* The kernel of ncclDataType_t dtype; NULL for a type it does not know. */
const void* cuda_staged_kernel(int dtype);
#ifdef __cplusplus
}
#endif

#endif /* BATON_DEVICE_CUDA_STAGED_KERNELS_H */
