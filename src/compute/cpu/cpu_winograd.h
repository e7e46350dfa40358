/* cpu_winograd.h -- the Winograd F(2x2, 3x3) path of the CPU convolution
 * (cpu_winograd.c), as cpu_conv.c calls it: 3x3 convolutions with stride 1
 * and pad 1 and at least WINO_MIN_C (16) input and output channels, all
 * three passes.  ws is the convolution's workspace (cpu_conv_ws_bytes,
 * which counts cpu_winograd_ws_floats); dims and semantics as compute.h's
 * conv_fwd and conv_bwd. */
#ifndef DDP_CPU_WINOGRAD_H
#define DDP_CPU_WINOGRAD_H

#include <stddef.h>

#include "compute.h"

/* Whether the convolution d takes the Winograd path. */
int cpu_winograd_ok(const conv_dims_t *d);
/* Floats of workspace the path needs (0 when it does not apply). */
size_t cpu_winograd_ws_floats(const conv_dims_t *d);
/* y = conv(x, w) + b (b may be NULL) */
void cpu_winograd_fwd(const conv_dims_t *d, const float *x, const float *w, const float *b,
                      float *y, void *ws);
/* dw = beta dw + the weight gradient (beta as compute.h's conv_bwd) */
void cpu_winograd_bwd_weights(const conv_dims_t *d, const float *x, const float *dy, float *dw,
                              float beta, void *ws);
/* dx = the input gradient (overwritten) */
void cpu_winograd_bwd_data(const conv_dims_t *d, const float *w, const float *dy, float *dx,
                           void *ws);

#endif
