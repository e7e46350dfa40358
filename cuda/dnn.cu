// dnn.cu -- dnn.h: cuDNN's convolutions, loaded with dlopen (or the CPU
// emulation's), their plans kept per shape and pass, and each call's cost
// declared for the step model as an implicit GEMM's.
#include "dnn.h"

#include <stdlib.h>
#include <string.h>

#include "ddp_build.h"
#include "ddp_cuda_rt.h"

#if defined(DDP_CUDA_EMU) || defined(HAVE_CUDNN)
#define DDP_DNN_BUILT 1
#include <cudnn.h>
#ifndef DDP_CUDA_EMU
#include <dlfcn.h>
#endif
#endif

#ifdef DDP_DNN_BUILT

namespace
{

// The entry points the backend calls.
struct DnnApi {
    decltype(&cudnnCreate) create;
    decltype(&cudnnDestroy) destroy;
    decltype(&cudnnSetStream) set_stream;
    decltype(&cudnnGetErrorString) error_string;
    decltype(&cudnnCreateTensorDescriptor) tensor_create;
    decltype(&cudnnSetTensor4dDescriptor) tensor_set;
    decltype(&cudnnDestroyTensorDescriptor) tensor_destroy;
    decltype(&cudnnCreateFilterDescriptor) filter_create;
    decltype(&cudnnSetFilter4dDescriptor) filter_set;
    decltype(&cudnnDestroyFilterDescriptor) filter_destroy;
    decltype(&cudnnCreateConvolutionDescriptor) conv_create;
    decltype(&cudnnSetConvolution2dDescriptor) conv_set;
    decltype(&cudnnSetConvolutionMathType) conv_math;
    decltype(&cudnnDestroyConvolutionDescriptor) conv_destroy;
    decltype(&cudnnGetConvolutionForwardAlgorithm_v7) fwd_algos;
    decltype(&cudnnGetConvolutionBackwardDataAlgorithm_v7) data_algos;
    decltype(&cudnnGetConvolutionBackwardFilterAlgorithm_v7) filter_algos;
    decltype(&cudnnConvolutionForward) fwd;
    decltype(&cudnnConvolutionBackwardData) data;
    decltype(&cudnnConvolutionBackwardFilter) filter;
};

DnnApi g_api;
cudnnHandle_t g_handle = nullptr;
bool g_enabled = true; // ddp_cuda_dnn_enable

#ifdef DDP_CUDA_EMU
bool load_()
{
    g_api = DnnApi{&cudnnCreate,
                   &cudnnDestroy,
                   &cudnnSetStream,
                   &cudnnGetErrorString,
                   &cudnnCreateTensorDescriptor,
                   &cudnnSetTensor4dDescriptor,
                   &cudnnDestroyTensorDescriptor,
                   &cudnnCreateFilterDescriptor,
                   &cudnnSetFilter4dDescriptor,
                   &cudnnDestroyFilterDescriptor,
                   &cudnnCreateConvolutionDescriptor,
                   &cudnnSetConvolution2dDescriptor,
                   &cudnnSetConvolutionMathType,
                   &cudnnDestroyConvolutionDescriptor,
                   &cudnnGetConvolutionForwardAlgorithm_v7,
                   &cudnnGetConvolutionBackwardDataAlgorithm_v7,
                   &cudnnGetConvolutionBackwardFilterAlgorithm_v7,
                   &cudnnConvolutionForward,
                   &cudnnConvolutionBackwardData,
                   &cudnnConvolutionBackwardFilter};
    return true;
}
#else
// The library (kept loaded once found: its handles outlive a shutdown's).
bool load_()
{
    static void *lib = nullptr;
    if (!lib) lib = dlopen(DDP_CUDNN_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!lib) return false;
    DnnApi t = {};
    const ddp_sym syms[] = {
        {"cudnnCreate", (void **)&t.create},
        {"cudnnDestroy", (void **)&t.destroy},
        {"cudnnSetStream", (void **)&t.set_stream},
        {"cudnnGetErrorString", (void **)&t.error_string},
        {"cudnnCreateTensorDescriptor", (void **)&t.tensor_create},
        {"cudnnSetTensor4dDescriptor", (void **)&t.tensor_set},
        {"cudnnDestroyTensorDescriptor", (void **)&t.tensor_destroy},
        {"cudnnCreateFilterDescriptor", (void **)&t.filter_create},
        {"cudnnSetFilter4dDescriptor", (void **)&t.filter_set},
        {"cudnnDestroyFilterDescriptor", (void **)&t.filter_destroy},
        {"cudnnCreateConvolutionDescriptor", (void **)&t.conv_create},
        {"cudnnSetConvolution2dDescriptor", (void **)&t.conv_set},
        {"cudnnSetConvolutionMathType", (void **)&t.conv_math},
        {"cudnnDestroyConvolutionDescriptor", (void **)&t.conv_destroy},
        {"cudnnGetConvolutionForwardAlgorithm_v7", (void **)&t.fwd_algos},
        {"cudnnGetConvolutionBackwardDataAlgorithm_v7", (void **)&t.data_algos},
        {"cudnnGetConvolutionBackwardFilterAlgorithm_v7", (void **)&t.filter_algos},
        {"cudnnConvolutionForward", (void **)&t.fwd},
        {"cudnnConvolutionBackwardData", (void **)&t.data},
        {"cudnnConvolutionBackwardFilter", (void **)&t.filter}};
    if (ddp_find_syms_(lib, syms, sizeof syms / sizeof *syms)) return false;
    g_api = t;
    return true;
}
#endif

// The operands' type and math: fp32 on FMA, fp32 allowing TF32, bf16.
enum Kind { kFp32, kTf32, kBf16 };

struct Key {
    int pass, n, c, h, w, oc, k, stride, pad, kind;
    size_t budget;
};

// The output's size along an input size of `in`.
int out_(const Key &k, int in)
{
    return (in + 2 * k.pad - k.k) / k.stride + 1;
}

} // namespace

struct ddp_dnn_plan {
    Key key;
    bool ok;
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t f;
    cudnnConvolutionDescriptor_t cv;
    int algo;
    size_t ws;
};

namespace
{

constexpr int kPlans = 256;
ddp_dnn_plan g_plans[kPlans];
int g_count = 0, g_next = 0; // kept plans; the next one replaced when full

void free_(ddp_dnn_plan &p)
{
    if (p.cv) g_api.conv_destroy(p.cv);
    if (p.f) g_api.filter_destroy(p.f);
    if (p.y) g_api.tensor_destroy(p.y);
    if (p.x) g_api.tensor_destroy(p.x);
    p.x = p.y = nullptr, p.f = nullptr, p.cv = nullptr;
    p.ok = false;
}

// Algorithms whose result is a plain sum of products (no Winograd or FFT
// transform); pick_ also asks that the order be fixed (deterministic: not
// backward ALGO_0 or ALGO_3, which sum with atomics).
bool plain_(int pass, int algo)
{
    switch (pass) {
    case DDP_DNN_FWD:
        return algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM ||
               algo == CUDNN_CONVOLUTION_FWD_ALGO_GEMM || algo == CUDNN_CONVOLUTION_FWD_ALGO_DIRECT;
    case DDP_DNN_BWD_DATA:
        return algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 || algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
    default:
        return algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 ||
               algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1 ||
               algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
    }
}

// The first acceptable entry of a heuristic's ranking: index or -1.
template <class Perf> int pick_(int pass, int kind, size_t budget, const Perf *r, int found)
{
    for (int i = 0; i < found; i++)
        if (r[i].status == CUDNN_STATUS_SUCCESS && r[i].determinism == CUDNN_DETERMINISTIC &&
            plain_(pass, (int)r[i].algo) && r[i].memory <= budget &&
            (kind != kFp32 || r[i].mathType == CUDNN_FMA_MATH))
            return i;
    return -1;
}

// Descriptors and an algorithm for p's key; p.ok false when there is none.
void plan_(ddp_dnn_plan &p)
{
    const Key &k = p.key;
    const cudnnDataType_t t = k.kind == kBf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    const cudnnMathType_t math = k.kind == kFp32   ? CUDNN_FMA_MATH
                                 : k.kind == kTf32 ? CUDNN_DEFAULT_MATH
                                                   : CUDNN_TENSOR_OP_MATH;
    const int oh = out_(k, k.h), ow = out_(k, k.w);
    bool ok = g_api.tensor_create(&p.x) == 0 && g_api.tensor_create(&p.y) == 0 &&
              g_api.filter_create(&p.f) == 0 && g_api.conv_create(&p.cv) == 0 &&
              g_api.tensor_set(p.x, CUDNN_TENSOR_NCHW, t, k.n, k.c, k.h, k.w) == 0 &&
              g_api.tensor_set(p.y, CUDNN_TENSOR_NCHW, t, k.n, k.oc, oh, ow) == 0 &&
              g_api.filter_set(p.f, t, CUDNN_TENSOR_NCHW, k.oc, k.c, k.k, k.k) == 0 &&
              g_api.conv_set(p.cv, k.pad, k.pad, k.stride, k.stride, 1, 1, CUDNN_CROSS_CORRELATION,
                             CUDNN_DATA_FLOAT) == 0 &&
              g_api.conv_math(p.cv, math) == 0;
    int at = -1, found = 0;
    cudnnMathType_t chosen = math;
    if (ok && k.pass == DDP_DNN_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        if (g_api.fwd_algos(g_handle, p.x, p.f, p.cv, p.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &found,
                            r) == 0 &&
            (at = pick_(k.pass, k.kind, k.budget, r, found)) >= 0)
            p.algo = r[at].algo, p.ws = r[at].memory, chosen = r[at].mathType;
    } else if (ok && k.pass == DDP_DNN_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        if (g_api.data_algos(g_handle, p.f, p.y, p.cv, p.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT,
                             &found, r) == 0 &&
            (at = pick_(k.pass, k.kind, k.budget, r, found)) >= 0)
            p.algo = r[at].algo, p.ws = r[at].memory, chosen = r[at].mathType;
    } else if (ok) {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        if (g_api.filter_algos(g_handle, p.x, p.y, p.cv, p.f,
                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found, r) == 0 &&
            (at = pick_(k.pass, k.kind, k.budget, r, found)) >= 0)
            p.algo = r[at].algo, p.ws = r[at].memory, chosen = r[at].mathType;
    }
    // the math the heuristic ranked the algorithm under (cuDNN's advice)
    ok = ok && at >= 0 && (chosen == math || g_api.conv_math(p.cv, chosen) == 0);
    if (ok)
        p.ok = true;
    else
        free_(p); // the key kept, so that the shape is not tried again
}

} // namespace

const ddp_dnn_plan *ddp_dnn_plan_(enum ddp_dnn_pass pass, const ddp_cuda_conv_t *d, int bf16,
                                  size_t budget)
{
    if (!g_handle || !g_enabled || d->n <= 0 || d->oc <= 0) return nullptr;
    Key key;
    memset(&key, 0, sizeof key);
    key.pass = pass, key.n = d->n, key.c = d->c, key.h = d->h, key.w = d->w, key.oc = d->oc;
    key.k = d->k, key.stride = d->stride, key.pad = d->pad;
    key.kind = bf16 ? kBf16 : ddp_cuda_state_.tf32 ? kTf32 : kFp32;
    key.budget = budget;
    for (int i = 0; i < g_count; i++)
        if (memcmp(&g_plans[i].key, &key, sizeof key) == 0)
            return g_plans[i].ok ? &g_plans[i] : nullptr;
    int at = g_count < kPlans ? g_count++ : g_next++ % kPlans;
    ddp_dnn_plan &p = g_plans[at];
    free_(p);
    p = ddp_dnn_plan{};
    p.key = key;
    plan_(p);
    return p.ok ? &p : nullptr;
}

// A call cuDNN refused for this shape or these pointers, which the caller
// runs as im2col + GEMM instead: NOT_SUPPORTED and BAD_PARAM as cuDNN 8 says
// them; cuDNN 9 also says why (CUDNN_STATUS_CATEGORY: 3002 a shape it does
// not support, 2003 a pointer not aligned for its kernel, 2006 too little
// workspace).  Any other status is a failure.
static bool refused_(cudnnStatus_t st)
{
#ifdef CUDNN_STATUS_CATEGORY
    if (CUDNN_STATUS_CATEGORY((int)st) == CUDNN_STATUS_NOT_SUPPORTED ||
        st == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER ||
        st == CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT)
        return true;
#endif
    return st == CUDNN_STATUS_NOT_SUPPORTED || st == CUDNN_STATUS_BAD_PARAM;
}

int ddp_dnn_run_(const ddp_dnn_plan *cp, const void *a, const void *b, void *out, float beta,
                 void *ws)
{
    ddp_dnn_plan &p = g_plans[cp - g_plans];
    const Key &k = p.key;
    const double es = k.kind == kBf16 ? 2.0 : 4.0;
    const int oh = out_(k, k.h), ow = out_(k, k.w);
    const double x = (double)k.n * k.c * k.h * k.w, y = (double)k.n * k.oc * oh * ow;
    const double w = (double)k.oc * k.c * k.k * k.k, ckk = (double)k.c * k.k * k.k;
    const double flops = 2.0 * y * ckk;
    const ddp_cuda_math_t math = k.kind == kBf16   ? DDP_MATH_BF16
                                 : k.kind == kTf32 ? DDP_MATH_TF32
                                                   : DDP_MATH_FP32;
    const long long npix = (long long)k.n * oh * ow;
    const float one = 1.0f;
    const char *call;
    cudnnStatus_t st;
    // each pass as the implicit GEMM it is: its operands read once, its output written
    if (k.pass == DDP_DNN_FWD) {
        call = "cudnnConvolutionForward";
        DDP_COST(es * (x + w) + (beta != 0.0f ? es * y : 0), es * y, flops);
        ddp_cost_gemm_(call, math, k.oc, npix, (long long)ckk);
        st = g_api.fwd(g_handle, &one, p.x, a, p.f, b, p.cv, (cudnnConvolutionFwdAlgo_t)p.algo, ws,
                       p.ws, &beta, p.y, out);
    } else if (k.pass == DDP_DNN_BWD_DATA) {
        call = "cudnnConvolutionBackwardData";
        DDP_COST(es * (w + y) + (beta != 0.0f ? es * x : 0), es * x, flops);
        ddp_cost_gemm_(call, math, (long long)ckk, npix, k.oc);
        st = g_api.data(g_handle, &one, p.f, a, p.y, b, p.cv, (cudnnConvolutionBwdDataAlgo_t)p.algo,
                        ws, p.ws, &beta, p.x, out);
    } else {
        call = "cudnnConvolutionBackwardFilter";
        DDP_COST(es * (x + y) + (beta != 0.0f ? es * w : 0), es * w, flops);
        ddp_cost_gemm_(call, math, k.oc, (long long)ckk, npix);
        st = g_api.filter(g_handle, &one, p.x, a, p.y, b, p.cv,
                          (cudnnConvolutionBwdFilterAlgo_t)p.algo, ws, p.ws, &beta, p.f, out);
    }
    if (refused_(st)) {
        free_(p); // refused at the call: this shape runs apart from now on
        return 0;
    }
    if (st != CUDNN_STATUS_SUCCESS)
        return ddp_cuda_fail_(call, __FILE__, __LINE__, g_api.error_string(st));
    return 1;
}

void ddp_dnn_init_(void)
{
    const char *e = getenv("DDP_CUDA_CONV");
    if (g_handle || (e && strcmp(e, "im2col") == 0) || !load_()) return;
    cudnnHandle_t h = nullptr;
    if (g_api.create(&h) != CUDNN_STATUS_SUCCESS) return;
    if (g_api.set_stream(h, ddp_cuda_state_.stream) != CUDNN_STATUS_SUCCESS) {
        g_api.destroy(h);
        return;
    }
    g_handle = h;
}

void ddp_dnn_shutdown_(void)
{
    for (int i = 0; i < g_count; i++) free_(g_plans[i]);
    g_count = g_next = 0;
    if (g_handle) g_api.destroy(g_handle);
    g_handle = nullptr;
}

extern "C" int ddp_cuda_dnn_loaded(void)
{
    return g_handle != nullptr;
}

extern "C" int ddp_cuda_conv_acts_bf16(void)
{
    const char *e = getenv("DDP_CUDA_CONV_ACTS");
    return g_handle != nullptr && !(e && strcmp(e, "fp32") == 0);
}

int ddp_dnn_active_(void)
{
    return g_handle && g_enabled;
}

extern "C" void ddp_cuda_dnn_enable(int on)
{
    g_enabled = on != 0;
}

extern "C" void ddp_cuda_dnn_forget(void)
{
    for (int i = 0; i < g_count; i++) free_(g_plans[i]);
    g_count = g_next = 0;
}

#else // no cuDNN in this build

const ddp_dnn_plan *ddp_dnn_plan_(enum ddp_dnn_pass, const ddp_cuda_conv_t *, int, size_t)
{
    return nullptr;
}
int ddp_dnn_run_(const ddp_dnn_plan *, const void *, const void *, void *, float, void *)
{
    return 0;
}
int ddp_dnn_active_(void)
{
    return 0;
}
void ddp_dnn_init_(void) {}
void ddp_dnn_shutdown_(void) {}
extern "C" int ddp_cuda_dnn_loaded(void)
{
    return 0;
}
extern "C" void ddp_cuda_dnn_enable(int) {}
extern "C" void ddp_cuda_dnn_forget(void) {}

#endif
