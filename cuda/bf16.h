// bf16.h -- the bf16 operands of the backend's GEMMs under --precision bf16
// (bf16.cu): the rounding kernel, two scratch buffers, the memo that keeps
// the copies a layer's forward rounded for its backward, and the mirror of
// the parameters the optimizer writes.
//
// The memo.  A layer's forward rounds its weight (a dense layer also its
// input) to bf16 for its GEMM; its backward multiplies by the same values:
// the input gradient by the weight, the weight gradient by the input.
// Both are unchanged between a layer's forward and its backward (the
// backward must see the forward's values, as on the CPU backend), so the
// forward keeps its copies in the memo and the backward takes them rather
// than rounding again (the cast cache of torch.autocast, for inputs too).
// An entry is keyed by the weight's address and also records the input's
// address and both counts; every forward rewrites its layer's entry, and a
// backward takes a copy only when the entry's last forward had the same
// operands.  On the emulation (DDP_CUDA_EMU) every copy the memo hands out
// is compared with a fresh rounding of its source when the stream reaches
// the GEMM that reads it; one that differs (an operand changed between a
// forward and its backward) aborts with the addresses.
#ifndef DDP_CUDA_BF16_H
#define DDP_CUDA_BF16_H

#include <stddef.h>
#include <stdint.h>

// h[count] = bf16(x[count]) (ddp_f32_to_bf16: to nearest even) on the
// compute stream.  Returns 0 or -1 (failure recorded).
int ddp_bf16_convert_(size_t count, const float *x, uint16_t *h);

// Scratch that grows and never shrinks: the GEMM entry's copies of its
// operands, and a layer's output gradient in bf16 (read by both of its
// backward GEMMs).  Valid until the next call for the same buffer; NULL
// on failure (recorded).
// DDP_BF16_EPILOGUE: a dense layer's fp32 product before its pass writes
// it to a bf16 output, where cuBLASLt cannot (linear.cu).
// DDP_BF16_COLS: the column sums of the loss's gradient (loss.cu).
// DDP_BF16_CONV_X: a convolution's input kept in bf16, widened to fp32 for
// a group cuDNN did not run (conv.cu; DDP_BF16_EPILOGUE then holds its
// fp32 output where that is kept in bf16, or in the backward its output
// gradient widened, and DDP_BF16_CONV_DX its fp32 input gradient).
// DDP_BF16_BIAS_SUMS: the plane sums of a convolution's output gradient
// kept in bf16, for its bias gradient (ddp_bf16_bias_sums_put_).
enum ddp_bf16_scratch {
    DDP_BF16_GEMM_IN,
    DDP_BF16_DY,
    DDP_BF16_EPILOGUE,
    DDP_BF16_COLS,
    DDP_BF16_CONV_X,
    DDP_BF16_CONV_DX,
    DDP_BF16_BIAS_SUMS,
    DDP_BF16_NSCRATCH
};
void *ddp_bf16_scratch_(enum ddp_bf16_scratch which, size_t bytes);

// A forward: round w[wcount] and, when x, x[xcount] into the entry of w,
// replacing what it held.  Returns 0 with the copies in *w16 and *x16
// (NULL for no x), or -1 (failure recorded).
int ddp_bf16_memo_put_(const float *w, size_t wcount, const float *x, size_t xcount,
                       const uint16_t **w16, const uint16_t **x16);
// A backward: the copies the entry of w holds when its last forward had
// the same w, x and counts, else NULL (the caller rounds them itself).
void ddp_bf16_memo_get_(const float *w, size_t wcount, const float *x, size_t xcount,
                        const uint16_t **w16, const uint16_t **x16);

// Every entry invalid: device memory was freed, so an address may come
// back holding other data (ddp_cuda_free), or the precision changed.
void ddp_bf16_memo_forget_(void);

// The parameters' mirror.  The trainer names its flat parameter buffer
// (ddp_cuda_bf16_params); a bf16 copy of all of it is kept beside it, and
// the optimizer kernels write each updated value's rounding there as they
// store it, so that a layer's forward takes its weight's copy (the memo's
// entry points into the mirror) instead of rounding the weight again: the
// weight is read once a step by the optimizer, not again by the forward.
// The mirror holds the rounding of the parameters over the ranges the
// optimizer or a forward's rounding wrote since anything else wrote there:
// an upload, copy or fill of the backend into the buffer, or a write the
// trainer reports (a collective's, ddp_cuda_params_written), makes its range
// stale, and the next forward rounds it again.  On the emulation a copy
// taken from the mirror is compared with a fresh rounding when the stream
// reaches the GEMM, as the memo's are.  A weight whose copy there would not
// be 16-byte aligned (its offset in the parameters not a multiple of 8) is
// rounded into the memo as before.
// [base, base + count) the buffer (count 0: none, the mirror freed).
int ddp_bf16_mirror_set_(const float *base, size_t count);
// The buffer's start, NULL when none.
const float *ddp_bf16_mirror_base_(void);
// The mirror's copy of [p, p + count), or NULL when that is not in the buffer
// (or the GEMMs are not bf16).
uint16_t *ddp_bf16_mirror_at_(const float *p, size_t count);
// The copy of [p, p + count) was written (the optimizer's kernel, queued).
void ddp_bf16_mirror_wrote_(const float *p, size_t count);
// Bytes at p were written otherwise: the mirror's copy of them is stale.
void ddp_bf16_mirror_stale_(const void *p, size_t bytes);
// All of it stale (the GEMMs' precision changed: the optimizer kept no copy).
void ddp_bf16_mirror_forget_(void);

// Layer outputs kept in bf16 only (ddp_cuda_act_bf16): [y, y + count * 2
// bytes) holds count bf16 values, written by the layer whose output it is
// (dense, convolution, BatchNorm) and read as such by the layers that read
// it (act16.h).  A free of y forgets it.  The gradients of the convolution
// nets' ones, while they are (ddp_cuda_grad_bf16), likewise.  count 0: y
// holds fp32 again.
void ddp_bf16_act_set_(const void *y, size_t count);
// y, such an output, is written without a convolution's bias, which its
// readers add (ddp_cuda_act_bias; NULL: none); -1 when y is not one.
int ddp_bf16_act_carry_(const void *y, const float *bias);
// p when p is such an output (under bf16 GEMMs), else NULL.
const uint16_t *ddp_bf16_act_at_(const void *p);
// The bias the output at p carries (ddp_bf16_act_carry_), else NULL.
const float *ddp_bf16_act_bias_(const void *p);
// p was freed.
void ddp_bf16_act_drop_(const void *p);

// fp32 layer outputs with a bf16 copy beside them (ddp_cuda_act_copy16):
// the kernel that writes y through act16.h's ddp_act_out writes its
// rounding to the copy too, and the convolutions that read y take the copy
// as their bf16 operand, forward and backward, instead of each rounding y
// into the memo.  set: count values (the copy allocated; 0: freed, none);
// 0 or -1 (failure recorded).  out: the copy a writer of y writes (NULL:
// none), from then on the readers'.  at: the copy of [x, x + count) for a
// reader under bf16 GEMMs, NULL where there is none or its writer has not
// run (on the emulation checked, when the stream reaches it, to be the
// rounding of x: a writer that bypassed it aborts).
int ddp_bf16_copy_set_(const void *y, size_t count);
uint16_t *ddp_bf16_copy_out_(const void *y);
const uint16_t *ddp_bf16_copy_at_(const void *x, size_t count);
// The bf16 values of [x, x + count) a reader takes as they lie: x itself
// where it is kept in bf16 (ddp_bf16_act_at_), or the copy beside it
// (ddp_bf16_copy_at_); NULL: neither (the reader rounds x itself).
const uint16_t *ddp_bf16_input_at_(const void *x, size_t count);

// The gradient dy of a convolution's output that carries its bias, kept in
// bf16: the pass that writes it (the BatchNorm's backward, bn.cu) also sums
// each (sample i, channel o) plane of its fp32 values, in double, into
// part[o n + i] as conv.cu's bias gradient would sum them, and the
// convolution's backward takes those sums for its bias gradient instead of
// reading dy.  put: the scratch for n x oc sums, recorded for dy (NULL on
// failure, recorded); take: 1 with *part when sums for dy of that shape
// were put since the last take, else 0 (forgotten either way).
double *ddp_bf16_bias_sums_put_(const void *dy, int n, int oc);
int ddp_bf16_bias_sums_take_(const void *dy, int n, int oc, const double **part);

// The loss's gradient kept for a dense layer's backward (ddp_cuda_xent_dense):
// dy's n x out gradient as bf16 in d16 (the DDP_BF16_DY scratch) and the
// column sums of `blocks` row groups in cols, never written to dy itself.
struct ddp_bf16_dy {
    const float *dy;
    int n, out, blocks;
    const uint16_t *d16;
    const float *cols;
};
void ddp_bf16_dy_set_(const float *dy, int n, int out, int blocks, const uint16_t *d16,
                      const float *cols);
// The next backward of a dense layer: 1 with *got filled when its dy, n
// and out are those kept (taken: kept no more), else 0.
int ddp_bf16_dy_take_(const float *dy, int n, int out, struct ddp_bf16_dy *got);

// Frees the scratch and the memo (ddp_cuda_shutdown).
void ddp_bf16_release_(void);

#endif
