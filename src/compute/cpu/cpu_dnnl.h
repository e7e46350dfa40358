/* cpu_dnnl.h -- the CPU backend's convolutions through oneDNN (cpu_dnnl.c),
 * where the build has it (configure --with-dnnl, the default when found):
 * cpu_conv.c asks first and falls back to its own im2col/Winograd code
 * when a call returns -1 (no oneDNN, DDP_CPU_CONV=native, a shape oneDNN
 * refuses).  Bias and its gradient stay with cpu_conv.c. */
#ifndef DDP_CPU_DNNL_H
#define DDP_CPU_DNNL_H

#include "compute.h"

/* 1 when the convolutions of shape d go through oneDNN. */
int cpu_dnnl_conv_usable(const conv_dims_t *d);
/* y = conv(x, w) (no bias); 0, or -1: not done. */
int cpu_dnnl_conv_fwd(const conv_dims_t *d, const float *x, const float *w, float *y);
/* dx = conv_bwd_data(dy, w) (when dx), dw = beta dw + conv_bwd_weights(x, dy)
 * (when dw); 0, or -1: not done (dx and dw then hold nothing useful). */
int cpu_dnnl_conv_bwd(const conv_dims_t *d, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float beta);
/* 0: the backend's own convolutions from now on, 1: oneDNN again where
 * built (the tests run both). */
void cpu_dnnl_enable(int on);
/* oneDNN's threads: the rank's BLAS threads (cpu_init). */
void cpu_dnnl_threads(int n);

#endif
