// emu_cudnn.cc -- the CPU emulation of cuDNN's convolutions (include/cudnn.h):
// handles on a stream, tensor, filter and convolution descriptors, the _v7
// heuristics and the three passes, each an operation of the handle's stream
// computed as im2col and a GEMM of the host CBLAS per sample (fp32 sums),
// its operands checked against the device-memory table at the call.
#include "emu_internal.h"

#include <cblas.h>
#include <cuda_bf16.h>
#include <cudnn.h>

#include <stdlib.h>
#include <string.h>

#include <atomic>

using namespace emu;

struct cudnnContext {
    cudaStream_t stream;
};
struct cudnnTensorStruct {
    bool set;
    cudnnDataType_t type;
    int n, c, h, w;
};
struct cudnnFilterStruct {
    bool set;
    cudnnDataType_t type;
    int k, c, h, w;
};
struct cudnnConvolutionStruct {
    bool set;
    int pad_h, pad_w, u, v;
    cudnnMathType_t math;
};

namespace
{

Registry g_objects;                                   // live handles and descriptors
std::atomic<int> g_last_algo[3] = {{-1}, {-1}, {-1}}; // ddp_emu_cudnn_last_algo

template <class T> cudnnStatus_t make(T **out, const T &init)
{
    if (!out) return CUDNN_STATUS_BAD_PARAM;
    *out = g_objects.make(init);
    return CUDNN_STATUS_SUCCESS;
}

template <class T> cudnnStatus_t destroy(T *p)
{
    return g_objects.destroy(p) ? CUDNN_STATUS_SUCCESS : CUDNN_STATUS_BAD_PARAM;
}

bool live(const void *p)
{
    return g_objects.live(p);
}

size_t elem(cudnnDataType_t t)
{
    return t == CUDNN_DATA_FLOAT ? 4 : t == CUDNN_DATA_BFLOAT16 ? 2 : 0;
}

// A tensor's (n, c, h, w) or a filter's (k, c, h, w) descriptor set:
// NCHW, fp32 or bf16, every size positive.
template <class D>
cudnnStatus_t set4d(D *d, cudnnTensorFormat_t format, cudnnDataType_t t, int a, int b, int c, int e)
{
    if (!live(d) || a <= 0 || b <= 0 || c <= 0 || e <= 0) return CUDNN_STATUS_BAD_PARAM;
    if (format != CUDNN_TENSOR_NCHW || !elem(t)) return CUDNN_STATUS_NOT_SUPPORTED;
    *d = D{true, t, a, b, c, e};
    return CUDNN_STATUS_SUCCESS;
}

// One convolution's shape, checked against its descriptors.
struct Shape {
    int n, c, h, w, k, r, s, oh, ow, pad_h, pad_w, u, v;
    cudnnDataType_t type;
    bool tf32; // fp32 data under a math that allows TF32
};

cudnnStatus_t shape(cudnnHandle_t h, const cudnnTensorStruct *x, const cudnnFilterStruct *f,
                    const cudnnConvolutionStruct *cv, const cudnnTensorStruct *y, Shape *s)
{
    if (!live(h)) return CUDNN_STATUS_NOT_INITIALIZED;
    if (!live(x) || !live(f) || !live(cv) || !live(y) || !x->set || !f->set || !cv->set || !y->set)
        return CUDNN_STATUS_BAD_PARAM;
    if (x->c != f->c || y->n != x->n || y->c != f->k) return CUDNN_STATUS_BAD_PARAM;
    int oh = (x->h + 2 * cv->pad_h - f->h) / cv->u + 1;
    int ow = (x->w + 2 * cv->pad_w - f->w) / cv->v + 1;
    if (oh <= 0 || ow <= 0 || y->h != oh || y->w != ow) return CUDNN_STATUS_BAD_PARAM;
    if (x->type != f->type || x->type != y->type || !elem(x->type))
        return CUDNN_STATUS_NOT_SUPPORTED;
    const bool tf32 = x->type == CUDNN_DATA_FLOAT && cv->math != CUDNN_FMA_MATH;
    *s = Shape{x->n, x->c,      x->h,      x->w,  f->k,  f->h,    f->w, oh,
               ow,   cv->pad_h, cv->pad_w, cv->u, cv->v, x->type, tf32};
    return CUDNN_STATUS_SUCCESS;
}

// [p, p + count elements of e bytes) inside one device allocation?
bool operand_ok(const char *call, const char *name, const void *p, size_t count, size_t e)
{
    return count == 0 || dev_operand_ok(call, name, p, p, count * e);
}

// count values at p of type t as floats (TF32-rounded when tf32).
std::vector<float> floats(const void *p, size_t count, cudnnDataType_t t, bool tf32)
{
    std::vector<float> out(count);
    if (t == CUDNN_DATA_BFLOAT16) {
        const __nv_bfloat16 *b = (const __nv_bfloat16 *)p;
        for (size_t i = 0; i < count; i++) out[i] = __bfloat162float(b[i]);
    } else {
        memcpy(out.data(), p, count * sizeof(float));
        if (tf32)
            for (float &v : out) v = tf32_round(v);
    }
    return out;
}

// out = alpha acc + beta out, in out's type (beta 0: out not read).
void store(const std::vector<float> &acc, void *out, cudnnDataType_t t, float alpha, float beta)
{
    for (size_t i = 0; i < acc.size(); i++) {
        float v = alpha * acc[i];
        if (t == CUDNN_DATA_BFLOAT16) {
            __nv_bfloat16 *o = (__nv_bfloat16 *)out;
            if (beta != 0.0f) v += beta * __bfloat162float(o[i]);
            o[i] = __float2bfloat16(v);
        } else {
            float *o = (float *)out;
            if (beta != 0.0f) v += beta * o[i];
            o[i] = v;
        }
    }
}

// col[(ci r + i) s + j, oy ow + ox] of one sample x[c, h, w].
void im2col(const Shape &s, const float *x, float *col)
{
    const size_t ohw = (size_t)s.oh * s.ow;
    for (int ci = 0; ci < s.c; ci++)
        for (int i = 0; i < s.r; i++)
            for (int j = 0; j < s.s; j++) {
                float *row = col + (((size_t)ci * s.r + i) * s.s + j) * ohw;
                for (int oy = 0; oy < s.oh; oy++)
                    for (int ox = 0; ox < s.ow; ox++) {
                        int iy = oy * s.u - s.pad_h + i, ix = ox * s.v - s.pad_w + j;
                        bool in = iy >= 0 && iy < s.h && ix >= 0 && ix < s.w;
                        row[(size_t)oy * s.ow + ox] =
                            in ? x[((size_t)ci * s.h + iy) * s.w + ix] : 0.0f;
                    }
            }
}

// dx[c, h, w] += the columns' values where they were read from.
void col2im(const Shape &s, const float *col, float *dx)
{
    const size_t ohw = (size_t)s.oh * s.ow;
    for (int ci = 0; ci < s.c; ci++)
        for (int i = 0; i < s.r; i++)
            for (int j = 0; j < s.s; j++) {
                const float *row = col + (((size_t)ci * s.r + i) * s.s + j) * ohw;
                for (int oy = 0; oy < s.oh; oy++)
                    for (int ox = 0; ox < s.ow; ox++) {
                        int iy = oy * s.u - s.pad_h + i, ix = ox * s.v - s.pad_w + j;
                        if (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w)
                            dx[((size_t)ci * s.h + iy) * s.w + ix] += row[(size_t)oy * s.ow + ox];
                    }
            }
}

size_t x_count(const Shape &s)
{
    return (size_t)s.n * s.c * s.h * s.w;
}
size_t y_count(const Shape &s)
{
    return (size_t)s.n * s.k * s.oh * s.ow;
}
size_t w_count(const Shape &s)
{
    return (size_t)s.k * s.c * s.r * s.s;
}

bool winograd_shape(const Shape &s)
{
    return s.r == 3 && s.s == 3 && s.u == 1 && s.v == 1;
}

// The checks every pass shares: algorithm, workspace, operands, scalars.
cudnnStatus_t pass_check(const char *call, const Shape &s, size_t ws_need, const void *ws,
                         size_t ws_bytes, const void *alpha, const void *beta, const void *a,
                         const char *an, size_t ac, const void *b, const char *bn, size_t bc,
                         const void *o, const char *on, size_t oc)
{
    if (!alpha || !beta) return CUDNN_STATUS_BAD_PARAM;
    if (ws_bytes < ws_need || (ws_need && !ws)) return CUDNN_STATUS_BAD_PARAM;
    const size_t e = elem(s.type);
    if (!operand_ok(call, an, a, ac, e) || !operand_ok(call, bn, b, bc, e) ||
        !operand_ok(call, on, o, oc, e) || !operand_ok(call, "workSpace", ws, ws_need, 1))
        return CUDNN_STATUS_EXECUTION_FAILED;
    return CUDNN_STATUS_SUCCESS;
}

size_t precomp_ws(const Shape &s)
{
    return (size_t)s.oh * s.ow * sizeof(int);
}
size_t filter1_ws(const Shape &s)
{
    return w_count(s) * sizeof(float);
}

} // namespace

// What an injected failure of a pass returns: DDP_EMU_CUDNN_STATUS's code,
// else EXECUTION_FAILED.
static cudnnStatus_t injected_status()
{
    const char *e = getenv("DDP_EMU_CUDNN_STATUS");
    return e && *e ? (cudnnStatus_t)atoi(e) : CUDNN_STATUS_EXECUTION_FAILED;
}

extern "C" const char *cudnnGetErrorString(cudnnStatus_t status)
{
    switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
    case CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER:
        return "CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER";
    case CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT: return "CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_NOT_SUPPORTED_SHAPE: return "CUDNN_STATUS_NOT_SUPPORTED_SHAPE";
    case CUDNN_STATUS_INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
    case CUDNN_STATUS_EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
    }
    return "CUDNN_STATUS_UNKNOWN";
}

extern "C" cudnnStatus_t cudnnCreate(cudnnHandle_t *handle)
{
    if (!handle) return CUDNN_STATUS_BAD_PARAM;
    if (ddp_emu_inject("cudnnCreate")) return CUDNN_STATUS_INTERNAL_ERROR;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (current_physical_locked() < 0) return CUDNN_STATUS_NOT_INITIALIZED;
    }
    return make(handle, cudnnContext{nullptr});
}

extern "C" cudnnStatus_t cudnnDestroy(cudnnHandle_t handle)
{
    return destroy(handle) == CUDNN_STATUS_SUCCESS ? CUDNN_STATUS_SUCCESS
                                                   : CUDNN_STATUS_NOT_INITIALIZED;
}

extern "C" cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId)
{
    if (!live(handle)) return CUDNN_STATUS_NOT_INITIALIZED;
    std::lock_guard<std::mutex> lock(g_mu);
    if (!stream_ok_locked(streamId)) return CUDNN_STATUS_BAD_PARAM;
    handle->stream = streamId;
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t cudnnCreateTensorDescriptor(cudnnTensorDescriptor_t *tensorDesc)
{
    return make(tensorDesc, cudnnTensorStruct{false, CUDNN_DATA_FLOAT, 0, 0, 0, 0});
}

extern "C" cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t d,
                                                    cudnnTensorFormat_t format,
                                                    cudnnDataType_t dataType, int n, int c, int h,
                                                    int w)
{
    return set4d(d, format, dataType, n, c, h, w);
}

extern "C" cudnnStatus_t cudnnDestroyTensorDescriptor(cudnnTensorDescriptor_t d)
{
    return destroy(d);
}

extern "C" cudnnStatus_t cudnnCreateFilterDescriptor(cudnnFilterDescriptor_t *filterDesc)
{
    return make(filterDesc, cudnnFilterStruct{false, CUDNN_DATA_FLOAT, 0, 0, 0, 0});
}

extern "C" cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t d,
                                                    cudnnDataType_t dataType,
                                                    cudnnTensorFormat_t format, int k, int c, int h,
                                                    int w)
{
    return set4d(d, format, dataType, k, c, h, w);
}

extern "C" cudnnStatus_t cudnnDestroyFilterDescriptor(cudnnFilterDescriptor_t d)
{
    return destroy(d);
}

extern "C" cudnnStatus_t cudnnCreateConvolutionDescriptor(cudnnConvolutionDescriptor_t *convDesc)
{
    return make(convDesc, cudnnConvolutionStruct{false, 0, 0, 1, 1, CUDNN_DEFAULT_MATH});
}

extern "C" cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t d, int pad_h,
                                                         int pad_w, int u, int v, int dilation_h,
                                                         int dilation_w,
                                                         cudnnConvolutionMode_t mode,
                                                         cudnnDataType_t computeType)
{
    if (!live(d) || pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dilation_h <= 0 ||
        dilation_w <= 0)
        return CUDNN_STATUS_BAD_PARAM;
    if (dilation_h != 1 || dilation_w != 1 || mode != CUDNN_CROSS_CORRELATION ||
        computeType != CUDNN_DATA_FLOAT)
        return CUDNN_STATUS_NOT_SUPPORTED;
    d->set = true;
    d->pad_h = pad_h, d->pad_w = pad_w, d->u = u, d->v = v;
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t d,
                                                     cudnnMathType_t mathType)
{
    if (!live(d) || mathType < CUDNN_DEFAULT_MATH || mathType > CUDNN_FMA_MATH)
        return CUDNN_STATUS_BAD_PARAM;
    d->math = mathType;
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t cudnnDestroyConvolutionDescriptor(cudnnConvolutionDescriptor_t d)
{
    return destroy(d);
}

// ---- the heuristics ----------------------------------------------------------

namespace
{

// Fills out[0..) from the list (algo, workspace, deterministic) up to
// requested entries; the math type the descriptor's.
template <class Perf, class Algo>
cudnnStatus_t rank(const char *call, cudnnStatus_t st, const Shape &s,
                   const cudnnConvolutionStruct *cv,
                   const std::vector<std::pair<Algo, size_t>> &list, const int requested,
                   int *returned, Perf *out, std::initializer_list<Algo> nondet)
{
    bool inject = ddp_emu_inject(call);
    if (st) return st;
    if (!returned || !out || requested <= 0) return CUDNN_STATUS_BAD_PARAM;
    *returned = 0;
    if (inject) return CUDNN_STATUS_SUCCESS; // nothing found
    float t = 1.0f;
    for (const auto &a : list) {
        if (*returned == requested) break;
        Perf p;
        memset(&p, 0, sizeof p);
        p.algo = a.first;
        p.status = CUDNN_STATUS_SUCCESS;
        p.time = t, t += 1.0f;
        p.memory = a.second;
        p.determinism = CUDNN_DETERMINISTIC;
        for (Algo n : nondet)
            if (n == a.first) p.determinism = CUDNN_NON_DETERMINISTIC;
        p.mathType = s.type == CUDNN_DATA_FLOAT ? cv->math : CUDNN_TENSOR_OP_MATH;
        out[(*returned)++] = p;
    }
    return CUDNN_STATUS_SUCCESS;
}

} // namespace

extern "C" cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnFilterDescriptor_t filterDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t destDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionFwdAlgoPerf_t *perfResults)
{
    Shape s{};
    cudnnStatus_t st = shape(handle, srcDesc, filterDesc, convDesc, destDesc, &s);
    std::vector<std::pair<cudnnConvolutionFwdAlgo_t, size_t>> list;
    if (st == CUDNN_STATUS_SUCCESS && winograd_shape(s))
        list.push_back({CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, w_count(s) * 16});
    list.push_back({CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, precomp_ws(s)});
    list.push_back({CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, 0});
    return rank<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
        "cudnnGetConvolutionForwardAlgorithm_v7", st, s, convDesc, list, requestedAlgoCount,
        returnedAlgoCount, perfResults, {});
}

extern "C" cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdDataAlgoPerf_t *perfResults)
{
    Shape s{};
    cudnnStatus_t st = shape(handle, gradDesc, filterDesc, convDesc, diffDesc, &s);
    return rank<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
        "cudnnGetConvolutionBackwardDataAlgorithm_v7", st, s, convDesc,
        {{CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, 0}, {CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, 0}},
        requestedAlgoCount, returnedAlgoCount, perfResults, {CUDNN_CONVOLUTION_BWD_DATA_ALGO_0});
}

extern "C" cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(
    cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
    const cudnnTensorDescriptor_t diffDesc, const cudnnConvolutionDescriptor_t convDesc,
    const cudnnFilterDescriptor_t gradDesc, const int requestedAlgoCount, int *returnedAlgoCount,
    cudnnConvolutionBwdFilterAlgoPerf_t *perfResults)
{
    Shape s{};
    cudnnStatus_t st = shape(handle, srcDesc, gradDesc, convDesc, diffDesc, &s);
    return rank<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
        "cudnnGetConvolutionBackwardFilterAlgorithm_v7", st, s, convDesc,
        {{CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, 0},
         {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, 0},
         {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, filter1_ws(s)}},
        requestedAlgoCount, returnedAlgoCount, perfResults,
        {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3});
}

// ---- the passes ----------------------------------------------------------------

extern "C" cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void *alpha,
                                                 const cudnnTensorDescriptor_t xDesc, const void *x,
                                                 const cudnnFilterDescriptor_t wDesc, const void *w,
                                                 const cudnnConvolutionDescriptor_t convDesc,
                                                 cudnnConvolutionFwdAlgo_t algo, void *workSpace,
                                                 size_t workSpaceSizeInBytes, const void *beta,
                                                 const cudnnTensorDescriptor_t yDesc, void *y)
{
    const char *call = "cudnnConvolutionForward";
    bool inject = ddp_emu_inject(call);
    Shape s{};
    cudnnStatus_t st = shape(handle, xDesc, wDesc, convDesc, yDesc, &s);
    if (st) return st;
    size_t need;
    switch (algo) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM: need = 0; break;
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM: need = precomp_ws(s); break;
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
        if (!winograd_shape(s)) return CUDNN_STATUS_NOT_SUPPORTED;
        need = w_count(s) * 16;
        break;
    default: return CUDNN_STATUS_NOT_SUPPORTED;
    }
    st = pass_check(call, s, need, workSpace, workSpaceSizeInBytes, alpha, beta, x, "x", x_count(s),
                    w, "w", w_count(s), y, "y", y_count(s));
    if (st) return st;
    if (inject) return injected_status();
    g_last_algo[0] = algo;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    submit(handle->stream, device_op(call, "", 0, [=]() {
               const size_t ckk = (size_t)s.c * s.r * s.s, ohw = (size_t)s.oh * s.ow;
               const size_t chw = (size_t)s.c * s.h * s.w, e = elem(s.type);
               std::vector<float> wf = floats(w, w_count(s), s.type, s.tf32);
               std::vector<float> col(ckk * ohw), acc((size_t)s.k * ohw);
               for (int i = 0; i < s.n; i++) {
                   std::vector<float> xf =
                       floats((const char *)x + i * chw * e, chw, s.type, s.tf32);
                   im2col(s, xf.data(), col.data());
                   cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.k, (int)ohw, (int)ckk,
                               1.0f, wf.data(), (int)ckk, col.data(), (int)ohw, 0.0f, acc.data(),
                               (int)ohw);
                   store(acc, (char *)y + i * acc.size() * e, s.type, al, be);
               }
           }));
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t cudnnConvolutionBackwardData(
    cudnnHandle_t handle, const void *alpha, const cudnnFilterDescriptor_t wDesc, const void *w,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdDataAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnTensorDescriptor_t dxDesc, void *dx)
{
    const char *call = "cudnnConvolutionBackwardData";
    bool inject = ddp_emu_inject(call);
    Shape s{};
    cudnnStatus_t st = shape(handle, dxDesc, wDesc, convDesc, dyDesc, &s);
    if (st) return st;
    if (algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 && algo != CUDNN_CONVOLUTION_BWD_DATA_ALGO_1)
        return CUDNN_STATUS_NOT_SUPPORTED;
    st = pass_check(call, s, 0, workSpace, workSpaceSizeInBytes, alpha, beta, w, "w", w_count(s),
                    dy, "dy", y_count(s), dx, "dx", x_count(s));
    if (st) return st;
    if (inject) return injected_status();
    g_last_algo[1] = algo;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    submit(handle->stream, device_op(call, "", 0, [=]() {
               const size_t ckk = (size_t)s.c * s.r * s.s, ohw = (size_t)s.oh * s.ow;
               const size_t chw = (size_t)s.c * s.h * s.w, e = elem(s.type);
               std::vector<float> wf = floats(w, w_count(s), s.type, s.tf32);
               std::vector<float> col(ckk * ohw), acc(chw);
               for (int i = 0; i < s.n; i++) {
                   std::vector<float> dyf = floats((const char *)dy + i * (size_t)s.k * ohw * e,
                                                   (size_t)s.k * ohw, s.type, s.tf32);
                   cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ckk, (int)ohw, s.k,
                               1.0f, wf.data(), (int)ckk, dyf.data(), (int)ohw, 0.0f, col.data(),
                               (int)ohw);
                   std::fill(acc.begin(), acc.end(), 0.0f);
                   col2im(s, col.data(), acc.data());
                   store(acc, (char *)dx + i * chw * e, s.type, al, be);
               }
           }));
    return CUDNN_STATUS_SUCCESS;
}

extern "C" cudnnStatus_t cudnnConvolutionBackwardFilter(
    cudnnHandle_t handle, const void *alpha, const cudnnTensorDescriptor_t xDesc, const void *x,
    const cudnnTensorDescriptor_t dyDesc, const void *dy,
    const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionBwdFilterAlgo_t algo,
    void *workSpace, size_t workSpaceSizeInBytes, const void *beta,
    const cudnnFilterDescriptor_t dwDesc, void *dw)
{
    const char *call = "cudnnConvolutionBackwardFilter";
    bool inject = ddp_emu_inject(call);
    Shape s{};
    cudnnStatus_t st = shape(handle, xDesc, dwDesc, convDesc, dyDesc, &s);
    if (st) return st;
    size_t need;
    switch (algo) {
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0:
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3: need = 0; break;
    case CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1: need = filter1_ws(s); break;
    default: return CUDNN_STATUS_NOT_SUPPORTED;
    }
    st = pass_check(call, s, need, workSpace, workSpaceSizeInBytes, alpha, beta, x, "x", x_count(s),
                    dy, "dy", y_count(s), dw, "dw", w_count(s));
    if (st) return st;
    if (inject) return injected_status();
    g_last_algo[2] = algo;
    const float al = *(const float *)alpha, be = *(const float *)beta;
    submit(
        handle->stream, device_op(call, "", 0, [=]() {
            const size_t ckk = (size_t)s.c * s.r * s.s, ohw = (size_t)s.oh * s.ow;
            const size_t chw = (size_t)s.c * s.h * s.w, e = elem(s.type);
            std::vector<float> col(ckk * ohw), acc((size_t)s.k * ckk, 0.0f);
            for (int i = 0; i < s.n; i++) {
                std::vector<float> xf = floats((const char *)x + i * chw * e, chw, s.type, s.tf32);
                std::vector<float> dyf = floats((const char *)dy + i * (size_t)s.k * ohw * e,
                                                (size_t)s.k * ohw, s.type, s.tf32);
                im2col(s, xf.data(), col.data());
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s.k, (int)ckk, (int)ohw, 1.0f,
                            dyf.data(), (int)ohw, col.data(), (int)ohw, 1.0f, acc.data(), (int)ckk);
            }
            store(acc, dw, s.type, al, be);
        }));
    return CUDNN_STATUS_SUCCESS;
}

extern "C" int ddp_emu_cudnn_last_algo(int pass)
{
    return pass >= 0 && pass < 3 ? g_last_algo[pass].load() : -1;
}
