// conv.cu -- convolution (cross-correlation, zero padding, stride) through
// cuDNN where it is loaded and has a deterministic plain-sum algorithm for
// the shape (dnn.h), one call per group of samples and pass; under
// --precision bf16 its operands and results are bf16 (as torch.autocast's
// convolutions): the input rounded once by the forward and kept for the
// weight gradient, and the weight (bf16.h's memo), the group's output
// gradient rounded into the workspace, and its output,
// input gradient and weight gradient widened to fp32 (the weight gradient
// added to the fp32 one, beta as asked).  Else, and for each pass cuDNN
// refuses, as
// im2col + GEMM (gemm.h) over groups of samples, as the CPU backend: the
// group's columns side by side in one GEMM, its outputs scattered to NCHW
// with the bias.  Backward: the bias gradient by per-channel block
// reductions (double, in sample order), dw by one GEMM per group
// accumulating, dx by GEMM into columns and a gather col2im (each input
// pixel sums the columns that read it: no atomics, deterministic).  Under
// --precision bf16 im2col writes the columns in bf16, rounded as the GEMM
// entry rounds its inputs, so the GEMM takes them as they are
// (ddp_cuda_gemm_rm16_): the same bits as converting fp32 columns, one
// pass over them fewer.  The weight is rounded once per forward (for all
// groups; kept in the memo for the backward, bf16.h) and each group's
// output gradient once for both of its GEMMs (gathered straight to bf16).
// A 1x1 convolution of stride 1 needs no columns: one sample is one GEMM on
// its input, a group of samples of 64 pixels or more one strided batched
// GEMM (gemm.h) that writes each sample's output, and its input gradient,
// in place.  Under
// bf16 a stride-1 convolution's input gradient is, where that moves fewer
// bytes, a convolution of dy by the transposed, flipped weight
// (conv_dx_as_conv): no fp32 columns, no col2im.
// An input or output kept in bf16 (act16.h: under bf16 the output of a
// convolution that only a BatchNorm reads, written without the bias, which
// the BatchNorm adds as it reads it (ddp_cuda_act_bias); the input a
// BatchNorm's, its ReLU's or a max pooling's that only this convolution
// reads) is cuDNN's
// operand or result as it lies: no rounding, no widening, and no copy of
// the input in the memo.  A group cuDNN does not run widens such an input
// into fp32 scratch, runs as im2col + GEMM, and rounds its output into
// place: the values of the fp32 path, rounded.  Their gradients likewise
// (ddp_cuda_grad_bf16): the output gradient cuDNN's operand, the input
// gradient its result, as they lie.
#include "bf16.h"
#include "dnn.h"
#include "gemm.h"
#include "half.h"

#include "block_reduce.h" // after ddp_cuda_rt.h (gemm.h)

namespace
{

constexpr long kConvCols = 1L << 16; // GEMM columns per group, about

int conv_group(const ddp_cuda_conv_t *d)
{
    long ohw = (long)d->oh * d->ow;
    long g = ohw > 0 ? kConvCols / ohw : 1;
    long n = d->n > 1 ? d->n : 1;
    if (g < 1) g = 1;
    return (int)(g < n ? g : n);
}

// A 1x1 convolution of stride 1 without padding: a sample's output
// [oc, ohw] is w [oc, c] times its input [c, ohw] as it lies in memory.
bool conv_pointwise(const ddp_cuda_conv_t *d)
{
    return d->k == 1 && d->stride == 1 && d->pad == 0;
}

// A group of pointwise samples as a strided batch (conv_pointwise_batch):
// only where a sample's output is at least this many columns wide.  A
// narrower one (ResNet's last stages: 7x7, 4x4) would leave most of each
// tensor-core tile empty, which the step model does not see, so there the
// group stays one GEMM over its gathered columns.
constexpr size_t kBatchMinCols = 64;

// One sample of a pointwise convolution: one GEMM on x itself (no im2col).
// A group of them is one strided batched GEMM, each sample's output and
// input gradient written in place (no im2col, scatter or col2im).
int conv_direct(const ddp_cuda_conv_t *d, int gn)
{
    return conv_pointwise(d) && gn == 1;
}

bool conv_pointwise_batch(const ddp_cuda_conv_t *d, int gn)
{
    return gn > 1 && conv_pointwise(d) && (size_t)d->oh * d->ow >= kBatchMinCols;
}

// A stride-1 convolution's input gradient is itself a stride-1 convolution:
// of dy [n, oc, oh, ow], with padding k - 1 - pad, by the weight transposed
// (its c outputs from oc inputs) and flipped in both kernel axes.  Its
// columns and a GEMM that writes dx (a group: a scatter) replace the GEMM
// into c k k column rows of fp32 and col2im's gather-sum over them.
bool conv_dx_as_conv(const ddp_cuda_conv_t *d)
{
    return d->stride == 1 && d->k > 1 && d->pad <= d->k - 1;
}

// That convolution's shape.
ddp_cuda_conv_t conv_dx_dims(const ddp_cuda_conv_t *d)
{
    return ddp_cuda_conv_t{d->n, d->oc, d->oh, d->ow, d->c, d->k, 1, d->k - 1 - d->pad, d->h,
                           d->w};
}

// wt[ci, (o k + kh) k + kw] = w[o, ci, k - 1 - kh, k - 1 - kw]: the weight of
// the input gradient's convolution, fp32 or (bf16 GEMMs) rounded as the
// GEMM entry rounds.
template <class T> __device__ inline T wt_value(float v);
template <> __device__ inline float wt_value<float>(float v)
{
    return v;
}
template <> __device__ inline uint16_t wt_value<uint16_t>(float v)
{
    return ddp_f32_to_bf16(v);
}
template <class T> __global__ void conv_wt_kernel(int oc, int c, int k, const float *w, T *wt)
{
    const size_t kk = (size_t)k * k, count = (size_t)oc * c * kk;
    DDP_GRID_STRIDE(size_t, idx, count)
    {
        size_t ci = idx / ((size_t)oc * kk), r = idx - ci * oc * kk;
        size_t o = r / kk, t = r - o * kk, kh = t / k, kw = t - kh * k;
        wt[idx] = wt_value<T>(w[((o * c + ci) * k + (k - 1 - kh)) * k + (k - 1 - kw)]);
    }
}

// col[ckk, gn*ohw] of samples x[gn, c, h, w]: row (ci*k + ki)*k + kj, column
// gi*ohw + oy*ow + ox.  I: the index type (DDP_LAUNCH_IDX).
template <class I>
__device__ inline float im2col_at(const ddp_cuda_conv_t &d, I ohw, I ld, const float *x, I idx)
{
    I r = idx / ld, q = idx - r * ld;
    int gi = (int)(q / ohw), p = (int)(q - (I)gi * ohw);
    int kk = (int)r, ci = kk / (d.k * d.k), kr = kk - ci * d.k * d.k;
    int ki = kr / d.k, kj = kr - ki * d.k;
    int oy = p / d.ow, ox = p - oy * d.ow;
    int iy = oy * d.stride - d.pad + ki, ix = ox * d.stride - d.pad + kj;
    if (iy >= 0 && iy < d.h && ix >= 0 && ix < d.w)
        return x[(((size_t)gi * d.c + ci) * d.h + iy) * d.w + ix];
    return 0.0f;
}

template <class I> __global__ void im2col_kernel(ddp_cuda_conv_t d, int gn, const float *x, float *col)
{
    const I ohw = (I)d.oh * d.ow, ld = (I)gn * ohw;
    const I count = (I)d.c * d.k * d.k * ld;
    DDP_GRID_STRIDE(I, idx, count) col[idx] = im2col_at<I>(d, ohw, ld, x, idx);
}

// The columns in bf16 (--precision bf16), rounded as the GEMM entry rounds
// its inputs: what the GEMM reads, without the pass that would convert
// fp32 columns (half the bytes written, a third of the read skipped).
template <class I>
__global__ void im2col_bf16_kernel(ddp_cuda_conv_t d, int gn, const float *x, uint16_t *col)
{
    const I ohw = (I)d.oh * d.ow, ld = (I)gn * ohw;
    const I count = (I)d.c * d.k * d.k * ld;
    DDP_GRID_STRIDE(I, idx, count) col[idx] = ddp_f32_to_bf16(im2col_at<I>(d, ohw, ld, x, idx));
}

// The columns of samples [i0, i0 + gn) into ws, fp32 or (bf16 GEMMs) bf16.
int im2col(const ddp_cuda_conv_t *d, int gn, const float *xg, void *ws, size_t ckk, size_t ld,
           cudaStream_t s)
{
    const size_t count = ckk * ld, chw = (size_t)d->c * d->h * d->w;
    if (ddp_cuda_state_.bf16_gemm) {
        DDP_COST(4.0 * gn * chw, 2.0 * count, 0);
        DDP_LAUNCH_IDX(im2col_bf16_kernel, count, ddp_blocks_for(count), kDdpThreads, s, *d, gn,
                       xg, (uint16_t *)ws);
    } else {
        DDP_COST(4.0 * gn * chw, 4.0 * count, 0);
        DDP_LAUNCH_IDX(im2col_kernel, count, ddp_blocks_for(count), kDdpThreads, s, *d, gn, xg,
                       (float *)ws);
    }
    DDP_CU_LAUNCHED();
    return 0;
}

// dst[m, n] (+)= A B with B the columns of im2col (fp32 or bf16, as it wrote
// them) or, where no im2col ran (a direct 1x1), the fp32 input itself; A
// fp32, or bf16 when a16.
int gemm_cols(int ta, int tb, int m, int n, int k, const void *A, bool a16, int lda,
              const void *B, bool cols, int ldb, float beta, float *C, int ldc)
{
    const bool b16 = cols && ddp_cuda_state_.bf16_gemm;
    return ddp_cuda_gemm_rm16_(ta, tb, m, n, k, 1.0f, A, a16, lda, B, b16, ldb, beta, C, ldc);
}

// dx[gn, c, h, w] = the sum of the columns that read each pixel (col2im).
template <class I> __global__ void col2im_kernel(ddp_cuda_conv_t d, int gn, const float *col, float *dx)
{
    const size_t ohw = (size_t)d.oh * d.ow, ld = (size_t)gn * ohw;
    const I hw = (I)d.h * d.w, count = (I)gn * d.c * hw;
    DDP_GRID_STRIDE(I, idx, count)
    {
        I plane = idx / hw, pix = idx - plane * hw;
        int iy = (int)pix / d.w, ix = (int)pix - iy * d.w;
        int gi = (int)(plane / d.c), ci = (int)plane - gi * d.c;
        float acc = 0.0f;
        for (int ki = 0; ki < d.k; ki++) {
            int ty = iy + d.pad - ki;
            if (ty < 0 || ty % d.stride) continue;
            int oy = ty / d.stride;
            if (oy >= d.oh) continue;
            for (int kj = 0; kj < d.k; kj++) {
                int tx = ix + d.pad - kj;
                if (tx < 0 || tx % d.stride) continue;
                int ox = tx / d.stride;
                if (ox >= d.ow) continue;
                size_t r = ((size_t)ci * d.k + ki) * d.k + kj;
                acc += col[r * ld + (size_t)gi * ohw + (size_t)oy * d.ow + ox];
            }
        }
        dx[idx] = acc;
    }
}

// y[gn, oc, ohw] = stage[oc, gn*ohw] + b (b may be NULL)
template <class I>
__global__ void scatter_bias_kernel(int gn, int oc, size_t ohw_, const float *stage, const float *b,
                                    float *y)
{
    const I ohw = (I)ohw_, ld = (I)gn * ohw, count = (I)gn * oc * ohw;
    DDP_GRID_STRIDE(I, idx, count)
    {
        I plane = idx / ohw, p = idx - plane * ohw;
        int gi = (int)(plane / oc), o = (int)plane - gi * oc;
        y[idx] = stage[(I)o * ld + (I)gi * ohw + p] + (b ? b[o] : 0.0f);
    }
}

// y[gn, oc, ohw] += b (in place)
template <class I>
__global__ void bias_add_kernel(int gn, int oc, size_t ohw_, const float *b, float *y)
{
    const I ohw = (I)ohw_, count = (I)gn * oc * ohw;
    DDP_GRID_STRIDE(I, idx, count) y[idx] += b[(idx / ohw) % (I)oc];
}

// y[gn, oc, ohw] += b on the compute stream
int bias_add(int gn, int oc, size_t ohw, const float *b, float *y)
{
    const size_t count = (size_t)gn * oc * ohw;
    DDP_COST(4.0 * (count + oc), 4.0 * count, (double)count);
    DDP_LAUNCH_IDX(bias_add_kernel, count, ddp_blocks_for(count), kDdpThreads,
                   ddp_cuda_state_.stream, gn, oc, ohw, b, y);
    DDP_CU_LAUNCHED();
    return 0;
}

// Where element idx of dy[gn, oc, ohw] goes in stage[oc, gn*ohw].
template <class I> __device__ inline I gather_at(I idx, int oc, I ohw, I ld)
{
    I plane = idx / ohw, p = idx - plane * ohw;
    int gi = (int)(plane / oc), o = (int)plane - gi * oc;
    return (I)o * ld + (I)gi * ohw + p;
}

// stage[oc, gn*ohw] = dy[gn, oc, ohw]
template <class I>
__global__ void gather_kernel(int gn, int oc, size_t ohw_, const float *dy, float *stage)
{
    const I ohw = (I)ohw_, ld = (I)gn * ohw, count = (I)gn * oc * ohw;
    DDP_GRID_STRIDE(I, idx, count) stage[gather_at<I>(idx, oc, ohw, ld)] = dy[idx];
}

// The same in bf16, rounded as the GEMM entry rounds (bf16 GEMMs)
template <class I>
__global__ void gather_bf16_kernel(int gn, int oc, size_t ohw_, const float *dy, uint16_t *stage)
{
    const I ohw = (I)ohw_, ld = (I)gn * ohw, count = (I)gn * oc * ohw;
    DDP_GRID_STRIDE(I, idx, count) stage[gather_at<I>(idx, oc, ohw, ld)] = ddp_f32_to_bf16(dy[idx]);
}

// The bias gradient db[o] = beta db[o] + the sum over samples, in order, of
// the float of the double sum of the sample's plane (as the CPU backend), in
// two passes, so that few channels still fill the GPU: block (o, i) sums
// channel o's plane of sample i (ddp_block_sum's tree) into part[o n + i]; then one
// thread per channel adds its n sums in order.
__global__ void conv_bias_planes_kernel(int n, int oc, size_t ohw, const float *dy, double *part)
{
    __shared__ double sum[kDdpThreads];
    for (int i = blockIdx.y; i < n; i += gridDim.y)
        for (int o = blockIdx.x; o < oc; o += gridDim.x) {
            const float *p = dy + ((size_t)i * oc + o) * ohw;
            double t = 0.0;
            for (size_t k = threadIdx.x; k < ohw; k += blockDim.x) t += (double)p[k];
            const double total = ddp_block_sum(sum, t); // sum reusable after it
            if (threadIdx.x == 0) part[(size_t)o * n + i] = total;
        }
}

// The second pass: a block per channel (thread 0 adds; a chain in order).
__global__ void conv_bias_combine_kernel(int n, int oc, const double *part, float *db, float beta)
{
    if (threadIdx.x != 0) return;
    for (int o = blockIdx.x; o < oc; o += gridDim.x) {
        float acc = beta == 0.0f ? 0.0f : beta * db[o];
        for (int i = 0; i < n; i++) acc += (float)part[(size_t)o * n + i];
        db[o] = acc;
    }
}

unsigned grid_for(size_t count)
{
    return ddp_blocks_for(count);
}

// ---- through cuDNN (dnn.h) -------------------------------------------------

size_t up256(size_t bytes)
{
    return (bytes + 255) / 256 * 256;
}

// What a group of gn samples stages in the workspace for cuDNN under bf16:
// the forward its input and output; the backward its output gradient, its
// input (the weight gradient's operand, then the input gradient's result),
// the weight gradient and the weight where the memo has none.  The rest of
// the workspace is the algorithm's.
size_t dnn_stage_fwd(const ddp_cuda_conv_t *d, int gn)
{
    return up256(2 * (size_t)gn * d->c * d->h * d->w) +
           up256(2 * (size_t)gn * d->oc * d->oh * d->ow);
}
size_t dnn_stage_bwd(const ddp_cuda_conv_t *d, int gn)
{
    const size_t wn = (size_t)d->oc * d->c * d->k * d->k;
    return up256(2 * (size_t)gn * d->oc * d->oh * d->ow) +
           up256(2 * (size_t)gn * d->c * d->h * d->w) + 2 * up256(2 * wn);
}

// y[count] = the bf16 h widened, plus b[channel] (b NULL: none), the
// channel of element idx being (idx / ohw) % oc.
template <class I>
__global__ void widen_kernel(int oc, size_t ohw_, size_t count_, const uint16_t *h, const float *b,
                             float *y)
{
    const I ohw = (I)ohw_, count = (I)count_;
    DDP_GRID_STRIDE(I, idx, count)
    y[idx] = ddp_bf16_to_f32(h[idx]) + (b ? b[(idx / ohw) % (I)oc] : 0.0f);
}

int widen(int oc, size_t ohw, size_t count, const uint16_t *h, const float *b, float *y)
{
    DDP_COST(2.0 * count + (b ? 4.0 * oc : 0), 4.0 * count, b ? (double)count : 0);
    DDP_LAUNCH_IDX(widen_kernel, count, grid_for(count), kDdpThreads, ddp_cuda_state_.stream, oc,
                   ohw, count, h, b, y);
    DDP_CU_LAUNCHED();
    return 0;
}

// g[count] = beta g + the bf16 h widened (beta 0: g not read)
__global__ void widen_add_kernel(size_t count, const uint16_t *h, float *g, float beta)
{
    DDP_GRID_STRIDE(size_t, i, count)
    g[i] = ddp_bf16_to_f32(h[i]) + (beta == 0.0f ? 0.0f : beta * g[i]);
}

// Samples per cuDNN call: a group of im2col's (conv_group) or, where that
// is less, as many as make kDnnCols output pixels (no columns to hold: only
// the bf16 staging, dnn_stage_*), and g where cuDNN is not loaded.
constexpr long kDnnCols = 1L << 18;
int dnn_group_max(const ddp_cuda_conv_t *d, int g)
{
    long ohw = (long)d->oh * d->ow, n = d->n > 1 ? d->n : 1;
    long G = ohw > 0 ? kDnnCols / ohw : 1;
    if (G > n) G = n;
    return G > g ? (int)G : g;
}
int dnn_group(const ddp_cuda_conv_t *d, int g)
{
    return ddp_cuda_dnn_loaded() ? dnn_group_max(d, g) : g;
}

// gn samples [c, hw] of an input (or output gradient) kept in bf16
// widened into fp32 scratch for the im2col path (a group cuDNN did not
// run); NULL on failure.
const float *widen_group(const uint16_t *x16, int c, size_t hw, int gn,
                         ddp_bf16_scratch which = DDP_BF16_CONV_X)
{
    const size_t count = (size_t)gn * c * hw;
    float *xw = (float *)ddp_bf16_scratch_(which, count * sizeof(float));
    return xw && widen(c, hw, count, x16, nullptr, xw) == 0 ? xw : nullptr;
}

// One group's forward through cuDNN: 1 done, 0 not (the caller runs it as
// im2col + GEMM), -1 failed.  wq: the weight as the GEMMs take it (bf16
// from the memo under bf16); x16g: the group's input in bf16 (the memo's,
// or the input itself where it is kept in bf16), NULL: rounded here;
// y16g: the group's output where it is kept in bf16 (no bias), written
// there as cuDNN writes it, else yg in fp32.
int dnn_fwd(const ddp_cuda_conv_t *d, int gn, const float *xg, const uint16_t *x16g,
            const void *wq, const float *b, float *yg, uint16_t *y16g, void *ws, size_t wsb)
{
    ddp_cuda_conv_t g = *d;
    g.n = gn;
    const size_t ohw = (size_t)d->oh * d->ow, ycount = (size_t)gn * d->oc * ohw;
    if (!ddp_cuda_state_.bf16_gemm) {
        const ddp_dnn_plan *p = ddp_dnn_plan_(DDP_DNN_FWD, &g, 0, wsb);
        int r = p ? ddp_dnn_run_(p, xg, wq, yg, 0.0f, ws) : 0;
        if (r <= 0) return r;
        return b && bias_add(gn, d->oc, ohw, b, yg) != 0 ? -1 : 1;
    }
    const size_t stage = dnn_stage_fwd(d, gn);
    const ddp_dnn_plan *p = stage <= wsb ? ddp_dnn_plan_(DDP_DNN_FWD, &g, 1, wsb - stage) : nullptr;
    if (!p) return 0;
    uint16_t *x16 = (uint16_t *)ws;
    uint16_t *y16 = (uint16_t *)((char *)ws + up256(2 * (size_t)gn * d->c * d->h * d->w));
    if (x16g)
        x16 = (uint16_t *)x16g; // the memo's, or kept in bf16 (ddp_cuda_conv_fwd)
    else if (ddp_bf16_convert_((size_t)gn * d->c * d->h * d->w, xg, x16) != 0)
        return -1;
    int r = ddp_dnn_run_(p, x16, wq, y16g ? y16g : y16, 0.0f, (char *)ws + stage);
    if (r <= 0 || y16g) return r;
    return widen(d->oc, ohw, ycount, y16, b, yg) != 0 ? -1 : 1;
}

// One group's weight gradient (dw_out) and input gradient (dx_out, or
// dx16_out where it is kept in bf16; neither: none) through cuDNN, each as
// far as it can: *did_dw / *did_dx say which ran; 0, or -1 failed.  wbeta:
// dw's beta (1 after the first group).  w16, x16g: the weight and the
// group's input as the forward rounded them (bf16, the memo's, or the
// input kept in bf16; NULL: rounded here); dy16g: the group's output
// gradient where it is kept in bf16 (NULL: dyg rounded here).
int dnn_bwd(const ddp_cuda_conv_t *d, int gn, const float *xg, const uint16_t *x16g,
            const float *w, const uint16_t *w16, const float *dyg, const uint16_t *dy16g,
            float *dw_out, float wbeta, float *dx_out, uint16_t *dx16_out, void *ws, size_t wsb,
            bool *did_dw, bool *did_dx)
{
    *did_dw = *did_dx = false;
    ddp_cuda_conv_t g = *d;
    g.n = gn;
    const size_t chw = (size_t)d->c * d->h * d->w, ycount = (size_t)gn * d->oc * d->oh * d->ow;
    const size_t wn = (size_t)d->oc * d->c * d->k * d->k;
    if (!ddp_cuda_state_.bf16_gemm) {
        if (dw_out) {
            const ddp_dnn_plan *p = ddp_dnn_plan_(DDP_DNN_BWD_FILTER, &g, 0, wsb);
            int r = p ? ddp_dnn_run_(p, xg, dyg, dw_out, wbeta, ws) : 0;
            if (r < 0) return -1;
            *did_dw = r > 0;
        }
        if (dx_out) {
            const ddp_dnn_plan *p = ddp_dnn_plan_(DDP_DNN_BWD_DATA, &g, 0, wsb);
            int r = p ? ddp_dnn_run_(p, w, dyg, dx_out, 0.0f, ws) : 0;
            if (r < 0) return -1;
            *did_dx = r > 0;
        }
        return 0;
    }
    const size_t stage = dnn_stage_bwd(d, gn);
    if (stage > wsb) return 0;
    const size_t budget = wsb - stage;
    char *at = (char *)ws;
    uint16_t *dy16 = (uint16_t *)at;
    uint16_t *x16 = (uint16_t *)(at += up256(2 * ycount)); // then dx's bf16 result
    uint16_t *dw16 = (uint16_t *)(at += up256(2 * (size_t)gn * chw));
    uint16_t *wr16 = (uint16_t *)(at += up256(2 * wn));
    void *algo_ws = at + up256(2 * wn);
    const ddp_dnn_plan *pf = dw_out ? ddp_dnn_plan_(DDP_DNN_BWD_FILTER, &g, 1, budget) : nullptr;
    const ddp_dnn_plan *pd =
        dx_out || dx16_out ? ddp_dnn_plan_(DDP_DNN_BWD_DATA, &g, 1, budget) : nullptr;
    if (!pf && !pd) return 0;
    if (dy16g)
        dy16 = (uint16_t *)dy16g; // kept in bf16: as it lies
    else if (ddp_bf16_convert_(ycount, dyg, dy16) != 0)
        return -1;
    if (pf) {
        // fetched again: pd's plan may have taken the slot of a full cache
        pf = ddp_dnn_plan_(DDP_DNN_BWD_FILTER, &g, 1, budget);
        if (!pf) return 0;
        if (!x16g && ddp_bf16_convert_((size_t)gn * chw, xg, x16) != 0) return -1;
        int r = ddp_dnn_run_(pf, x16g ? x16g : x16, dy16, dw16, 0.0f, algo_ws);
        if (r < 0) return -1;
        if (r > 0) {
            DDP_COST(2.0 * wn + (wbeta != 0.0f ? 4.0 * wn : 0), 4.0 * wn, (double)wn);
            DDP_LAUNCH(widen_add_kernel, grid_for(wn), kDdpThreads, ddp_cuda_state_.stream, wn,
                       dw16, dw_out, wbeta);
            DDP_CU_LAUNCHED();
            *did_dw = true;
        }
    }
    if (pd) {
        pd = ddp_dnn_plan_(DDP_DNN_BWD_DATA, &g, 1, budget);
        if (!pd) return 0;
        if (!w16) {
            if (ddp_bf16_convert_(wn, w, wr16) != 0) return -1;
            w16 = wr16;
        }
        int r = ddp_dnn_run_(pd, w16, dy16, dx16_out ? dx16_out : x16, 0.0f, algo_ws);
        if (r < 0) return -1;
        if (r > 0) {
            if (!dx16_out &&
                widen(d->c, (size_t)d->h * d->w, (size_t)gn * chw, x16, nullptr, dx_out) != 0)
                return -1;
            *did_dx = true;
        }
    }
    return 0;
}

} // namespace

extern "C" {

int ddp_cuda_conv_group_samples(const ddp_cuda_conv_t *d)
{
    return dnn_group(d, conv_group(d));
}

size_t ddp_cuda_conv_ws_bytes(const ddp_cuda_conv_t *d)
{
    const size_t ohw = (size_t)d->oh * d->ow, ckk = (size_t)d->c * d->k * d->k;
    const size_t g = (size_t)conv_group(d);
    size_t floats = ckk * g * ohw + (g > 1 ? (size_t)d->oc * g * ohw : 0);
    if (conv_dx_as_conv(d)) floats += (size_t)d->oc * ckk; // the transposed weight
    // cuDNN under bf16: its staging, and an algorithm's workspace of the
    // weight's size in fp32 or 1 MiB where the columns leave less
    const size_t dnn =
        dnn_stage_bwd(d, dnn_group_max(d, (int)g)) + 4 * (size_t)d->oc * ckk + ((size_t)1 << 20);
    const size_t bytes = (floats ? floats : 1) * sizeof(float);
    return bytes > dnn ? bytes : dnn;
}

int ddp_cuda_conv_fwd(const ddp_cuda_conv_t *d, const float *x, const float *w, const float *b,
                      float *y, void *ws)
{
    if (d->n <= 0 || d->oc <= 0) return 0;
    cudaStream_t s = ddp_cuda_state_.stream;
    const size_t ohw = (size_t)d->oh * d->ow, chw = (size_t)d->c * d->h * d->w;
    const int ckk = d->c * d->k * d->k, g = conv_group(d);
    float *stage = (float *)ws + (size_t)ckk * g * ohw;
    const void *wq = w; // bf16: rounded once for every group, kept for the backward
    const bool w16 = ddp_cuda_state_.bf16_gemm != 0;
    // input and output kept in bf16 (act16.h), NULL: fp32
    const uint16_t *xa = ddp_bf16_act_at_(x);
    uint16_t *ya = (uint16_t *)ddp_bf16_act_at_(y);
    if (ya && b && ddp_bf16_act_bias_(y) != b)
        return ddp_cuda_fail_("ddp_cuda_conv_fwd", __FILE__, __LINE__,
                              "a convolution with a bias whose output is kept in bf16 without "
                              "carrying it");
    if (ya) b = nullptr; // carried: its readers add it (ddp_cuda_act_bias)
    // through cuDNN: the input rounded once, kept for dw (or as it lies:
    // kept in bf16, or an fp32 input's copy beside it, ddp_cuda_act_copy16)
    const uint16_t *x16 = ddp_bf16_input_at_(x, (size_t)d->n * chw);
    if (w16) {
        const uint16_t *h, *xm;
        const bool keep_x = ddp_dnn_active_() && !x16;
        if (ddp_bf16_memo_put_(w, (size_t)d->oc * ckk, keep_x ? x : nullptr,
                               keep_x ? (size_t)d->n * chw : 0, &h, &xm) != 0)
            return -1;
        wq = h;
        if (!x16) x16 = xm;
    }
    // cuDNN's groups (dnn_group), each as one call or, where cuDNN does
    // not run it, as the im2col groups inside it
    const size_t wsb = ddp_cuda_conv_ws_bytes(d);
    const int G = dnn_group(d, g);
    for (int j0 = 0; j0 < d->n; j0 += G) {
        const int jn = d->n - j0 < G ? d->n - j0 : G;
        const size_t y0 = (size_t)j0 * d->oc * ohw; // the group's first output
        int r = dnn_fwd(d, jn, x + (size_t)j0 * chw, x16 ? x16 + (size_t)j0 * chw : nullptr, wq,
                        b, y + y0, ya ? ya + y0 : nullptr, ws, wsb);
        if (r < 0) return -1;
        if (r > 0) continue;
        // im2col + GEMM over [xb, yb): the group's input and output, or
        // their fp32 stand-ins where they are kept in bf16
        const float *xb = x + (size_t)j0 * chw;
        float *yb = y + y0;
        if (xa && !(xb = widen_group(xa + (size_t)j0 * chw, d->c, (size_t)d->h * d->w, jn)))
            return -1;
        if (ya && !(yb = (float *)ddp_bf16_scratch_(DDP_BF16_EPILOGUE,
                                                    (size_t)jn * d->oc * ohw * sizeof(float))))
            return -1;
        for (int i0 = 0; i0 < jn; i0 += g) {
            int gn = jn - i0 < g ? jn - i0 : g;
            size_t ld = (size_t)gn * ohw;
            const float *xg = xb + (size_t)i0 * chw;
            const void *cg = xg; // direct: x is [c, ohw] already
            const bool cols = !conv_direct(d, gn) && !conv_pointwise_batch(d, gn);
            if (cols) {
                if (im2col(d, gn, xg, ws, (size_t)ckk, ld, s) != 0) return -1;
                cg = ws;
            }
            float *yg = yb + (size_t)i0 * d->oc * ohw;
            if (conv_pointwise_batch(d, gn)) {
                // y_i = w x_i for the group's samples i; bf16: x rounded into ws
                const void *xq = xg;
                if (w16) {
                    if (ddp_bf16_convert_((size_t)gn * chw, xg, (uint16_t *)ws) != 0) return -1;
                    xq = ws;
                }
                if (ddp_cuda_gemm_rm_batched_(0, 0, d->oc, (int)ohw, ckk, wq, w16, ckk, 0, xq, w16,
                                              (int)ohw, (long long)chw, 0.0f, yg, (int)ohw,
                                              (long long)d->oc * ohw, gn) != 0 ||
                    (b && bias_add(gn, d->oc, ohw, b, yg) != 0))
                    return -1;
                continue;
            }
            if (gn == 1) {
                if (gemm_cols(0, 0, d->oc, (int)ohw, ckk, wq, w16, ckk, cg, cols, (int)ld, 0.0f, yg,
                              (int)ohw) != 0 ||
                    (b && bias_add(1, d->oc, ohw, b, yg) != 0))
                    return -1;
                continue;
            }
            if (gemm_cols(0, 0, d->oc, (int)ld, ckk, wq, w16, ckk, cg, cols, (int)ld, 0.0f, stage,
                          (int)ld) != 0)
                return -1;
            DDP_COST(4.0 * d->oc * (ld + (b ? 1 : 0)), 4.0 * d->oc * ld,
                     b ? (double)d->oc * ld : 0);
            DDP_LAUNCH_IDX(scatter_bias_kernel, (size_t)d->oc * ld, grid_for((size_t)d->oc * ld),
                           kDdpThreads, s, gn, d->oc, ohw, stage, b, yg);
            DDP_CU_LAUNCHED();
        }
        if (ya && ddp_bf16_convert_((size_t)jn * d->oc * ohw, yb, ya + y0) != 0) return -1;
    }
    return 0;
}

int ddp_cuda_conv_bwd(const ddp_cuda_conv_t *d, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float *db, float beta, void *ws)
{
    cudaStream_t s = ddp_cuda_state_.stream;
    const int ckk = d->c * d->k * d->k;
    if (d->n <= 0 || d->oc <= 0) {
        if (dw && ddp_cuda_grad_scale_((size_t)(d->oc > 0 ? d->oc : 0) * ckk, dw, beta) != 0)
            return -1;
        if (db && d->oc > 0 && ddp_cuda_grad_scale_((size_t)d->oc, db, beta) != 0) return -1;
        if (d->n > 0 && dx) {
            const size_t dxb = (size_t)d->n * d->c * d->h * d->w * sizeof *dx;
            ddp_cost_copy_("cudaMemsetAsync", 0, (double)dxb);
            DDP_CU(cudaMemsetAsync(dx, 0, dxb, s));
        }
        return 0;
    }
    const size_t ohw = (size_t)d->oh * d->ow, chw = (size_t)d->c * d->h * d->w;
    const int g = conv_group(d);
    float *col = (float *)ws;
    float *stage = col + (size_t)ckk * g * ohw;
    // dx as a convolution of dy (conv_dx_as_conv) where its columns and, for
    // a group, its output fit the workspace's columns and stage, and it moves
    // fewer bytes a sample than the GEMM into columns and col2im: columns
    // written and read (bf16 under --precision bf16, where it pays when oc
    // is not above c; fp32 columns cost what col2im's do, plus the scatter)
    const ddp_cuda_conv_t t = conv_dx_dims(d);
    const size_t hw = (size_t)d->h * d->w, tkk = (size_t)d->oc * d->k * d->k;
    const size_t elem = ddp_cuda_state_.bf16_gemm ? 2 : 4;
    const double via_cols = 8.0 * ckk * ohw + 4.0 * chw + (double)elem * d->oc * ohw;
    const double via_conv =
        2.0 * elem * tkk * hw + 4.0 * chw + (g > 1 ? 8.0 * chw : 0) + 4.0 * d->oc * ohw;
    const bool dx_conv = dx && conv_dx_as_conv(d) && tkk * hw * elem <= (size_t)ckk * ohw * 4 &&
                         (g == 1 || (size_t)d->c * hw <= (size_t)d->oc * ohw) &&
                         via_conv < via_cols;
    void *wt = (float *)ws + (size_t)ckk * g * ohw + (g > 1 ? (size_t)d->oc * g * ohw : 0);
    bool wt_made = false; // wt written (once; again after cuDNN staged over it)
    // the output gradient and the input gradient kept in bf16 (act16.h), NULL: fp32
    const uint16_t *dya = ddp_bf16_act_at_(dy);
    uint16_t *dxa = (uint16_t *)ddp_bf16_act_at_(dx);
    // an output gradient kept in bf16 with a bias: the plane sums of its fp32
    // values, from the pass that wrote it (ddp_bf16_bias_sums_put_)
    const double *sums16 = nullptr;
    if (db && dya && !ddp_bf16_bias_sums_take_(dy, d->n, d->oc, &sums16))
        return ddp_cuda_fail_("ddp_cuda_conv_bwd", __FILE__, __LINE__,
                              "a convolution with a bias whose output gradient is kept in bf16 "
                              "without the sums of its values");
    if (db) {
        const double *part = sums16;
        const dim3 planes((unsigned)(d->oc < 4096 ? d->oc : 4096),
                          (unsigned)(d->n < 65535 ? d->n : 65535));
        const double dyn = (double)d->n * d->oc * ohw, sums = (double)d->n * d->oc;
        if (!part) {
            double *p;
            if (ddp_cuda_partials_((size_t)d->n * d->oc, &p) != 0) return -1;
            DDP_COST(4.0 * dyn, 8.0 * sums, dyn);
            DDP_LAUNCH(conv_bias_planes_kernel, planes, kDdpThreads, s, d->n, d->oc, ohw, dy, p);
            DDP_CU_LAUNCHED();
            part = p;
        }
        DDP_COST(8.0 * sums + (beta != 0.0f ? 4.0 * d->oc : 0), 4.0 * d->oc, sums);
        DDP_LAUNCH(conv_bias_combine_kernel, planes.x, 32, s, d->n, d->oc, part, db, beta);
        DDP_CU_LAUNCHED();
    }
    // bf16: the weight as the forward rounded it (the memo, or by the GEMM
    // entry where it has none), each group's dy rounded once for both GEMMs
    const bool b16 = ddp_cuda_state_.bf16_gemm != 0;
    const void *wq = w;
    bool w16 = false;
    // the forward's roundings of w and (through cuDNN) of x, for cuDNN and the GEMMs
    // (an input kept in bf16, or the copy its writer keeps beside it, as it
    // lies: ddp_bf16_input_at_)
    const uint16_t *memo16 = nullptr, *x16 = nullptr, *xa = ddp_bf16_act_at_(x);
    if (b16) {
        const uint16_t *xi = ddp_bf16_input_at_(x, (size_t)d->n * chw);
        if (!xi) ddp_bf16_memo_get_(w, (size_t)d->oc * ckk, x, (size_t)d->n * chw, &memo16, &x16);
        if (!memo16) ddp_bf16_memo_get_(w, (size_t)d->oc * ckk, nullptr, 0, &memo16, &x16);
        if (xi) x16 = xi;
        if (memo16 && dx && !dx_conv) wq = memo16, w16 = true; // dx_conv: the transposed weight
    }
    const size_t wsb = ddp_cuda_conv_ws_bytes(d);
    const int G = dnn_group(d, g);
    float wbeta = beta;
    for (int j0 = 0; j0 < d->n; j0 += G) {
        const int jn = d->n - j0 < G ? d->n - j0 : G;
        // cuDNN first; what it did not do runs below, as im2col + GEMM
        bool dnn_dw = false, dnn_dx = false;
        const size_t y0 = (size_t)j0 * d->oc * ohw, x0 = (size_t)j0 * chw;
        if (dnn_bwd(d, jn, x + x0, x16 ? x16 + x0 : nullptr, w, memo16, dy + y0,
                    dya ? dya + y0 : nullptr, dw, wbeta, dx && !dxa ? dx + x0 : nullptr,
                    dxa ? dxa + x0 : nullptr, ws, wsb, &dnn_dw, &dnn_dx) != 0)
            return -1;
        if (dnn_dw) wbeta = 1.0f;
        if (dnn_dw || dnn_dx) wt_made = false; // the workspace was cuDNN's
        float *const gdw = dnn_dw ? nullptr : dw;
        if (!gdw && (!dx || dnn_dx)) continue;
        // the group as im2col + GEMM reads it: its input for dw's columns and
        // its output gradient in fp32, widened where kept in bf16, and writes
        // its input gradient to gdx, fp32 scratch where that is kept in bf16
        const float *xb = x + x0, *dyb = dy + y0;
        float *gdx = dx && !dnn_dx ? dx + x0 : nullptr;
        if (gdw && xa && !(xb = widen_group(xa + x0, d->c, hw, jn))) return -1;
        if (dya && !(dyb = widen_group(dya + y0, d->oc, ohw, jn, DDP_BF16_EPILOGUE))) return -1;
        if (gdx && dxa &&
            !(gdx = (float *)ddp_bf16_scratch_(DDP_BF16_CONV_DX, (size_t)jn * chw * sizeof(float))))
            return -1;
        if (gdx && dx_conv && !wt_made) {
            const size_t wn = (size_t)d->oc * ckk;
            DDP_COST(4.0 * wn, (double)elem * wn, 0);
            if (elem == 2)
                DDP_LAUNCH(conv_wt_kernel<uint16_t>, ddp_blocks_for(wn), kDdpThreads, s, d->oc,
                           d->c, d->k, w, (uint16_t *)wt);
            else
                DDP_LAUNCH(conv_wt_kernel<float>, ddp_blocks_for(wn), kDdpThreads, s, d->oc, d->c,
                           d->k, w, (float *)wt);
            DDP_CU_LAUNCHED();
            wt_made = true;
        }
        for (int i0 = j0; i0 < j0 + jn; i0 += g) {
            int gn = j0 + jn - i0 < g ? j0 + jn - i0 : g;
            size_t ld = (size_t)gn * ohw, count = (size_t)d->oc * ld;
            const int direct = conv_direct(d, gn);
            const float *dyg = dyb + (size_t)(i0 - j0) * d->oc * ohw; // [oc, ohw] for one sample
            const void *dyq = dyg; // dy as the GEMMs of dw and (not dx_conv) of dx read it
            if (!gdw && dx_conv) {
                // dx from dy as it lies: nothing gathered or rounded here
            } else if (b16) {
                uint16_t *h = (uint16_t *)ddp_bf16_scratch_(DDP_BF16_DY, count * 2);
                if (!h) return -1;
                if (gn > 1) {
                    DDP_COST(4.0 * count, 2.0 * count, 0);
                    DDP_LAUNCH_IDX(gather_bf16_kernel, count, grid_for(count), kDdpThreads, s, gn,
                                   d->oc, ohw, dyg, h);
                    DDP_CU_LAUNCHED();
                } else if (ddp_bf16_convert_(count, dyg, h) != 0) {
                    return -1;
                }
                dyq = h;
            } else if (gn > 1) {
                DDP_COST(4.0 * count, 4.0 * count, 0);
                DDP_LAUNCH_IDX(gather_kernel, count, grid_for(count), kDdpThreads, s, gn, d->oc,
                               ohw, dyg, stage);
                DDP_CU_LAUNCHED();
                dyq = stage;
            }
            if (gdw) {
                const float *xg = xb + (size_t)(i0 - j0) * chw;
                const void *xcol = xg;
                if (!direct) {
                    if (im2col(d, gn, xg, ws, (size_t)ckk, ld, s) != 0) return -1;
                    xcol = ws;
                }
                // dw[oc, ckk] (+)= dyg[oc, ld] col[ckk, ld]^T
                if (gemm_cols(0, 1, d->oc, ckk, (int)ld, dyq, b16, (int)ld, xcol, !direct, (int)ld,
                              wbeta, gdw, ckk) != 0)
                    return -1;
                wbeta = 1.0f;
            }
            if (gdx && conv_pointwise_batch(d, gn)) {
                // dx_i[c, ohw] = w[oc, c]^T dy_i: sample i's columns of the gathered dy
                float *dxg = gdx + (size_t)(i0 - j0) * chw;
                if (ddp_cuda_gemm_rm_batched_(1, 0, ckk, (int)ohw, d->oc, wq, w16, ckk, 0, dyq, b16,
                                              (int)ld, (long long)ohw, 0.0f, dxg, (int)ohw,
                                              (long long)chw, gn) != 0)
                    return -1;
            } else if (gdx && dx_conv) {
                // the columns of dy for the transposed, flipped weight; a group's
                // result [c, gn*hw] in the stage (free once dw's GEMM read it)
                const float *dyn = dyb + (size_t)(i0 - j0) * d->oc * ohw; // [gn, oc, oh, ow]
                const size_t tld = (size_t)gn * hw;
                float *dxg = gdx + (size_t)(i0 - j0) * chw, *out = gn > 1 ? stage : dxg;
                if (im2col(&t, gn, dyn, ws, tkk, tld, s) != 0 ||
                    ddp_cuda_gemm_rm16_(0, 0, d->c, (int)tld, (int)tkk, 1.0f, wt, elem == 2,
                                        (int)tkk, ws, elem == 2, (int)tld, 0.0f, out,
                                        (int)tld) != 0)
                    return -1;
                if (gn > 1) {
                    DDP_COST(4.0 * d->c * tld, 4.0 * d->c * tld, 0);
                    DDP_LAUNCH_IDX(scatter_bias_kernel, (size_t)d->c * tld,
                                   grid_for((size_t)d->c * tld), kDdpThreads, s, gn, d->c, hw,
                                   stage, (const float *)nullptr, dxg);
                    DDP_CU_LAUNCHED();
                }
            } else if (gdx) {
                // dcol[ckk, ld] = w[oc, ckk]^T dyg[oc, ld], then col2im (direct: dx itself)
                float *dxg = gdx + (size_t)(i0 - j0) * chw;
                float *dcol = direct ? dxg : col;
                if (ddp_cuda_gemm_rm16_(1, 0, ckk, (int)ld, d->oc, 1.0f, wq, w16, ckk, dyq, b16,
                                        (int)ld, 0.0f, dcol, (int)ld) != 0)
                    return -1;
                if (!direct) {
                    DDP_COST(4.0 * ckk * ld, 4.0 * gn * chw, (double)ckk * ld);
                    DDP_LAUNCH_IDX(col2im_kernel, (size_t)gn * chw, grid_for((size_t)gn * chw),
                                   kDdpThreads, s, *d, gn, col, dxg);
                    DDP_CU_LAUNCHED();
                }
            }
        }
        if (gdx && dxa && ddp_bf16_convert_((size_t)jn * chw, gdx, dxa + x0) != 0) return -1;
    }
    return 0;
}

} // extern "C"
