// dnn.h -- convolutions through cuDNN (dnn.cu), for conv.cu: its legacy
// convolution API (cuDNN 8 and 9), the entry points found with dlopen of
// libcudnn.so.<major> (DDP_CUDNN_SONAME, from configure) at ddp_cuda_init,
// or the emulated functions on the CPU emulation (tests/emu/emu_cudnn.cc).
// Optional: a build without cudnn.h, a node without the library, a failed
// handle or DDP_CUDA_CONV=im2col leave it out, and conv.cu runs im2col and
// GEMMs as before.
//
// Each shape and pass gets a plan, made once and kept: its descriptors
// (NCHW tensors, a KCRS filter, cross-correlation with fp32 compute) and the
// first algorithm of cuDNN's heuristic that is a plain sum of products (no
// Winograd or FFT, whose transforms round differently from the CPU
// reference), deterministic (not the backward's atomic ALGO_0 and ALGO_3:
// implicit GEMM forward, ALGO_1 backward, in practice), fits the
// workspace budget and, for fp32 without TF32, runs on FMA (CUDNN_FMA_MATH:
// cuDNN's default math lets fp32 data through TF32 tensor cores).  A shape
// without such an algorithm, or whose call cuDNN refuses, runs apart.
#ifndef DDP_CUDA_DNN_H
#define DDP_CUDA_DNN_H

#include <stddef.h>

#include "ddp_cuda.h"

enum ddp_dnn_pass {
    DDP_DNN_FWD,        // out y = conv(a x, b w)
    DDP_DNN_BWD_DATA,   // out dx = conv^T(a w, b dy)
    DDP_DNN_BWD_FILTER, // out dw = beta dw + dconv(a x, b dy)
};

struct ddp_dnn_plan;

// The plan of `pass` over d (d->n samples) with every operand bf16 (bf16
// != 0; the output too, rounded to nearest even as cuDNN writes it) or
// fp32 (TF32 when the backend's GEMMs are), whose algorithm needs at most
// budget bytes of workspace; NULL when cuDNN is not loaded or has none.
const ddp_dnn_plan *ddp_dnn_plan_(enum ddp_dnn_pass pass, const ddp_cuda_conv_t *d, int bf16,
                                  size_t budget);
// Runs p on the compute stream with its workspace at ws (256-byte aligned,
// the budget's bytes): 1 when queued, 0 when cuDNN refused the call (the
// plan is dropped: the caller runs the pass apart, now and from then on),
// -1 on failure (recorded).
int ddp_dnn_run_(const ddp_dnn_plan *p, const void *a, const void *b, void *out, float beta,
                 void *ws);

// 1 when convolutions go to cuDNN (loaded, not turned off by a test).
int ddp_dnn_active_(void);

// Loads cuDNN and makes its handle on the compute stream (ddp_cuda_init;
// nothing when it cannot), and frees both (ddp_cuda_shutdown).
void ddp_dnn_init_(void);
void ddp_dnn_shutdown_(void);

#endif
