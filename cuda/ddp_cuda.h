/* ddp_cuda.h -- the C face of the CUDA kernels: extern "C" launchers only.
 * Pointers are device pointers; launches go to the default stream unless a
 * stream is given.  Each launcher returns 0 or a cudaError_t value. */
#ifndef DDP_CUDA_H
#define DDP_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* "runtime X.Y, driver X.Y" (or the error when no driver is present). */
void ddp_cuda_version_string(char *buf, size_t n);
/* Number of visible GPUs (0 when none or no driver). */
int ddp_cuda_device_count(void);
/* A short message for a CUDA error code. */
const char *ddp_cuda_error_string(int err);

/* y = max(x, 0) over count floats. */
int ddp_cuda_relu_fwd(size_t count, const float *x, float *y);
/* dx = x > 0 ? dy : 0 */
int ddp_cuda_relu_bwd(size_t count, const float *x, const float *dy, float *dx);

/* Memory helpers for tests and the backend. */
int ddp_cuda_malloc(void **p, size_t bytes);
int ddp_cuda_free(void *p);
int ddp_cuda_upload(void *dst, const void *src, size_t bytes);
int ddp_cuda_download(void *dst, const void *src, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
