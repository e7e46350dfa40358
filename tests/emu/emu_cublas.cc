// emu_cublas.cc -- the CPU emulation of cuBLAS: handles with a stream and a
// math mode (TF32 rounds fp32 inputs to TF32), and SGEMM, strided batched
// SGEMM, GemmEx (fp32 or bf16 inputs)
// and SGEMV over the host CBLAS (column-major), their operands checked
// against the device-memory table at the call and the product computed as
// an operation of the handle's stream; and cuBLASLt's matmul with its
// bias and ReLU epilogues (fp32 or bf16 output).  The contracts are in
// include/cublas_v2.h and include/cublasLt.h.
#include "emu_internal.h"

#include <cblas.h>
#include <cublasLt.h>
#include <cublas_v2.h>

#include <string.h>

using namespace emu;

// ---- cuBLAS ------------------------------------------------------------------

struct cublasContext {
    cudaStream_t stream;
    cublasMath_t mode;
};

namespace
{

std::set<const void *> g_handles; // live cuBLAS handles (g_mu)

} // namespace

extern "C" const char *cublasGetStatusName(cublasStatus_t s)
{
    switch (s) {
#define EMU_NAME(x)                                                                                \
    case x: return #x;
        EMU_NAME(CUBLAS_STATUS_SUCCESS)
        EMU_NAME(CUBLAS_STATUS_NOT_INITIALIZED)
        EMU_NAME(CUBLAS_STATUS_ALLOC_FAILED)
        EMU_NAME(CUBLAS_STATUS_INVALID_VALUE)
        EMU_NAME(CUBLAS_STATUS_ARCH_MISMATCH)
        EMU_NAME(CUBLAS_STATUS_MAPPING_ERROR)
        EMU_NAME(CUBLAS_STATUS_EXECUTION_FAILED)
        EMU_NAME(CUBLAS_STATUS_INTERNAL_ERROR)
        EMU_NAME(CUBLAS_STATUS_NOT_SUPPORTED)
#undef EMU_NAME
    }
    return "CUBLAS_STATUS_UNKNOWN";
}

extern "C" const char *cublasGetStatusString(cublasStatus_t s)
{
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    }
    return "unknown error";
}

extern "C" cublasStatus_t cublasCreate(cublasHandle_t *handle)
{
    if (!handle) return CUBLAS_STATUS_INVALID_VALUE;
    if (ddp_emu_inject("cublasCreate")) return CUBLAS_STATUS_ALLOC_FAILED;
    std::lock_guard<std::mutex> lock(g_mu);
    if (current_physical_locked() < 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    cublasHandle_t h = new cublasContext{nullptr, CUBLAS_DEFAULT_MATH};
    g_handles.insert(h);
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasDestroy(cublasHandle_t handle)
{
    std::lock_guard<std::mutex> lock(g_mu);
    if (!handle || !g_handles.erase(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete handle;
    return CUBLAS_STATUS_SUCCESS;
}

namespace
{

bool handle_ok(cublasHandle_t h)
{
    std::lock_guard<std::mutex> lock(g_mu);
    return h && g_handles.count(h);
}

bool op_ok(cublasOperation_t op)
{
    return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

// An operand of `rows` x `cols` elements of `elem` bytes, leading dimension
// ld, `batch` copies `stride` elements apart: inside one device allocation?
bool operand_ok(const char *call, const char *name, const void *p, long rows, long cols, long ld,
                size_t elem, long long stride = 0, long batch = 1)
{
    if (rows == 0 || cols == 0 || batch == 0) return true;
    long long extent = (long long)(cols - 1) * ld + rows;
    long long last = (long long)(batch - 1) * stride;
    long long lo = last < 0 ? last : 0;
    long long hi = (last > 0 ? last : 0) + extent;
    const char *base = (const char *)p + lo * (long long)elem;
    return dev_operand_ok(call, name, p, base, (size_t)(hi - lo) * elem);
}

CBLAS_TRANSPOSE cblas_op(cublasOperation_t op)
{
    return op == CUBLAS_OP_N ? CblasNoTrans : CblasTrans;
}

// C = alpha op(A) op(B) + beta C on checked operands; beta == 0 never reads C.
void gemm_run(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
              const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (m == 0 || n == 0) return;
    if (beta == 0.0f) {
        for (int j = 0; j < n; j++) memset(C + (size_t)j * ldc, 0, (size_t)m * sizeof(float));
    } else if ((k == 0 || alpha == 0.0f) && beta != 1.0f) {
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) C[(size_t)j * ldc + i] *= beta;
    }
    if (k == 0 || alpha == 0.0f) return;
    cblas_sgemm(CblasColMajor, cblas_op(ta), cblas_op(tb), m, n, k, alpha, A, lda, B, ldb,
                beta == 0.0f ? 0.0f : beta, C, ldc);
}

// TF32 math (the handle's CUBLAS_TF32_TENSOR_OP_MATH, or GemmEx's
// CUBLAS_COMPUTE_32F_FAST_TF32): the fp32 inputs rounded to TF32
// (tf32_round); the products, exact in fp32, accumulate in fp32.
bool tf32_mode(cublasHandle_t h)
{
    return (h->mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) ==
           CUBLAS_TF32_TENSOR_OP_MATH;
}
// An fp32 operand rounded to TF32, with the same leading dimension.
std::vector<float> tf32_copy(const float *p, long rows, long cols, long ld)
{
    std::vector<float> out;
    if (rows == 0 || cols == 0) return out;
    out.resize((size_t)(cols - 1) * ld + rows);
    for (size_t i = 0; i < out.size(); i++) out[i] = tf32_round(p[i]);
    return out;
}
// gemm_run with the inputs rounded to TF32 first.
void gemm_run_tf32(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, float alpha,
                   const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (k == 0 || alpha == 0.0f || m == 0 || n == 0) {
        gemm_run(ta, tb, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    std::vector<float> a = tf32_copy(A, ta == CUBLAS_OP_N ? m : k, ta == CUBLAS_OP_N ? k : m, lda),
                       b = tf32_copy(B, tb == CUBLAS_OP_N ? k : n, tb == CUBLAS_OP_N ? n : k, ldb);
    gemm_run(ta, tb, m, n, k, alpha, a.data(), lda, b.data(), ldb, beta, C, ldc);
}

// The checks every GEMM shares; 0 when they pass.
cublasStatus_t gemm_check(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m,
                          int n, int k, const void *alpha, const void *beta, int lda, int ldb,
                          int ldc)
{
    if (!handle_ok(h)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op_ok(ta) || !op_ok(tb) || m < 0 || n < 0 || k < 0 || !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    int rows_a = ta == CUBLAS_OP_N ? m : k, rows_b = tb == CUBLAS_OP_N ? k : n;
    if (lda < std::max(1, rows_a) || ldb < std::max(1, rows_b) || ldc < std::max(1, m))
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

} // namespace

extern "C" cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream)
{
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    std::lock_guard<std::mutex> lock(g_mu);
    if (!stream_ok_locked(stream)) return CUBLAS_STATUS_INVALID_VALUE;
    handle->stream = stream;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream)
{
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream) return CUBLAS_STATUS_INVALID_VALUE;
    *stream = handle->stream;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode)
{
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    int base = mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;
    if (base != CUBLAS_DEFAULT_MATH && base != CUBLAS_TENSOR_OP_MATH &&
        base != CUBLAS_PEDANTIC_MATH && base != CUBLAS_TF32_TENSOR_OP_MATH)
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->mode = mode;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode)
{
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!mode) return CUBLAS_STATUS_INVALID_VALUE;
    *mode = handle->mode;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                                      cublasOperation_t transb, int m, int n, int k,
                                      const float *alpha, const float *A, int lda, const float *B,
                                      int ldb, const float *beta, float *C, int ldc)
{
    const char *call = "cublasSgemm";
    bool inject = ddp_emu_inject(call);
    cublasStatus_t st = gemm_check(handle, transa, transb, m, n, k, alpha, beta, lda, ldb, ldc);
    if (st) return st;
    if (inject) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    bool use_ab = k > 0 && *alpha != 0.0f;
    if (use_ab && (!operand_ok(call, "A", A, transa == CUBLAS_OP_N ? m : k,
                               transa == CUBLAS_OP_N ? k : m, lda, sizeof(float)) ||
                   !operand_ok(call, "B", B, transb == CUBLAS_OP_N ? k : n,
                               transb == CUBLAS_OP_N ? n : k, ldb, sizeof(float))))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!operand_ok(call, "C", C, m, n, ldc, sizeof(float))) return CUBLAS_STATUS_EXECUTION_FAILED;
    float al = *alpha, be = *beta; // host pointer mode: read at the call
    auto run = tf32_mode(handle) ? gemm_run_tf32 : gemm_run;
    submit(handle->stream, device_op(call, "", 0, [=]() {
               run(transa, transb, m, n, k, al, A, lda, B, ldb, be, C, ldc);
           }));
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                                    cublasOperation_t transb, int m, int n, int k,
                                                    const float *alpha, const float *A, int lda,
                                                    long long int strideA, const float *B, int ldb,
                                                    long long int strideB, const float *beta,
                                                    float *C, int ldc, long long int strideC,
                                                    int batchCount)
{
    const char *call = "cublasSgemmStridedBatched";
    bool inject = ddp_emu_inject(call);
    cublasStatus_t st = gemm_check(handle, transa, transb, m, n, k, alpha, beta, lda, ldb, ldc);
    if (st) return st;
    if (batchCount < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (inject) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    bool use_ab = k > 0 && *alpha != 0.0f;
    if (use_ab &&
        (!operand_ok(call, "A", A, transa == CUBLAS_OP_N ? m : k, transa == CUBLAS_OP_N ? k : m,
                     lda, sizeof(float), strideA, batchCount) ||
         !operand_ok(call, "B", B, transb == CUBLAS_OP_N ? k : n, transb == CUBLAS_OP_N ? n : k,
                     ldb, sizeof(float), strideB, batchCount)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!operand_ok(call, "C", C, m, n, ldc, sizeof(float), strideC, batchCount))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    float al = *alpha, be = *beta;
    auto run = tf32_mode(handle) ? gemm_run_tf32 : gemm_run;
    submit(handle->stream, device_op(call, "", 0, [=]() {
               for (int b = 0; b < batchCount; b++)
                   run(transa, transb, m, n, k, al, A + b * strideA, lda, B + b * strideB, ldb,
                       be, C + b * strideC, ldc);
           }));
    return CUBLAS_STATUS_SUCCESS;
}

namespace
{

// A bf16 operand as floats, with the same leading dimension.
std::vector<float> bf16_to_float(const void *p, long rows, long cols, long ld)
{
    std::vector<float> out;
    if (rows == 0 || cols == 0) return out;
    size_t extent = (size_t)(cols - 1) * ld + rows;
    out.resize(extent);
    const __nv_bfloat16 *src = (const __nv_bfloat16 *)p;
    for (size_t i = 0; i < extent; i++) out[i] = __bfloat162float(src[i]);
    return out;
}

} // namespace

// GemmEx and its strided batches (GemmEx: one): fp32 or bf16 inputs, fp32
// output and accumulation, batchCount GEMMs stride* elements apart.
static cublasStatus_t gemm_ex_(const char *call, cublasHandle_t handle, cublasOperation_t transa,
                               cublasOperation_t transb, int m, int n, int k, const void *alpha,
                               const void *A, cudaDataType Atype, int lda, long long strideA,
                               const void *B, cudaDataType Btype, int ldb, long long strideB,
                               const void *beta, void *C, cudaDataType Ctype, int ldc,
                               long long strideC, int batch, cublasComputeType_t computeType,
                               cublasGemmAlgo_t algo)
{
    bool inject = ddp_emu_inject(call);
    cublasStatus_t st = gemm_check(handle, transa, transb, m, n, k, alpha, beta, lda, ldb, ldc);
    if (st) return st;
    if (batch < 0) return CUBLAS_STATUS_INVALID_VALUE;
    if (!((algo >= CUBLAS_GEMM_DEFAULT && algo <= 23) ||
          (algo >= CUBLAS_GEMM_DEFAULT_TENSOR_OP && algo <= 115)))
        return CUBLAS_STATUS_INVALID_VALUE;
    bool f32 = Atype == CUDA_R_32F && Btype == CUDA_R_32F;
    bool bf16 = Atype == CUDA_R_16BF && Btype == CUDA_R_16BF;
    bool compute_ok =
        computeType == CUBLAS_COMPUTE_32F || computeType == CUBLAS_COMPUTE_32F_PEDANTIC ||
        computeType == CUBLAS_COMPUTE_32F_FAST_TF32 || computeType == CUBLAS_COMPUTE_32F_FAST_16BF;
    if (!(f32 || bf16) || Ctype != CUDA_R_32F || !compute_ok) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (inject) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0 || batch == 0) return CUBLAS_STATUS_SUCCESS;
    float a = *(const float *)alpha, b = *(const float *)beta;
    size_t elem = bf16 ? 2 : 4;
    long ra = transa == CUBLAS_OP_N ? m : k, ca = transa == CUBLAS_OP_N ? k : m;
    long rb = transb == CUBLAS_OP_N ? k : n, cb = transb == CUBLAS_OP_N ? n : k;
    bool use_ab = k > 0 && a != 0.0f;
    if (use_ab && (!operand_ok(call, "A", A, ra, ca, lda, elem, strideA, batch) ||
                   !operand_ok(call, "B", B, rb, cb, ldb, elem, strideB, batch)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if (!operand_ok(call, "C", C, m, n, ldc, sizeof(float), strideC, batch))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    // fp32 inputs in TF32: asked for, or allowed by the handle's math mode
    const bool tf32 = f32 && (computeType == CUBLAS_COMPUTE_32F_FAST_TF32 ||
                              (computeType == CUBLAS_COMPUTE_32F && tf32_mode(handle)));
    submit(handle->stream, device_op(call, "", 0, [=]() {
        for (int i = 0; i < batch; i++) {
            const char *Ai = (const char *)A + i * strideA * (long long)elem;
            const char *Bi = (const char *)B + i * strideB * (long long)elem;
            float *Ci = (float *)C + i * strideC;
            if (tf32) {
                gemm_run_tf32(transa, transb, m, n, k, a, (const float *)Ai, lda,
                              (const float *)Bi, ldb, b, Ci, ldc);
            } else if (bf16 && use_ab) {
                std::vector<float> fa = bf16_to_float(Ai, ra, ca, lda),
                                   fb = bf16_to_float(Bi, rb, cb, ldb);
                gemm_run(transa, transb, m, n, k, a, fa.data(), lda, fb.data(), ldb, b, Ci, ldc);
            } else {
                gemm_run(transa, transb, m, n, k, a, (const float *)Ai, lda, (const float *)Bi,
                         ldb, b, Ci, ldc);
            }
        }
    }));
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                                       cublasOperation_t transb, int m, int n, int k,
                                       const void *alpha, const void *A, cudaDataType Atype,
                                       int lda, const void *B, cudaDataType Btype, int ldb,
                                       const void *beta, void *C, cudaDataType Ctype, int ldc,
                                       cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    return gemm_ex_("cublasGemmEx", handle, transa, transb, m, n, k, alpha, A, Atype, lda, 0, B,
                    Btype, ldb, 0, beta, C, Ctype, ldc, 0, 1, computeType, algo);
}

extern "C" cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n, int k,
    const void *alpha, const void *A, cudaDataType Atype, int lda, long long int strideA,
    const void *B, cudaDataType Btype, int ldb, long long int strideB, const void *beta, void *C,
    cudaDataType Ctype, int ldc, long long int strideC, int batchCount,
    cublasComputeType_t computeType, cublasGemmAlgo_t algo)
{
    return gemm_ex_("cublasGemmStridedBatchedEx", handle, transa, transb, m, n, k, alpha, A, Atype,
                    lda, strideA, B, Btype, ldb, strideB, beta, C, Ctype, ldc, strideC, batchCount,
                    computeType, algo);
}

extern "C" cublasStatus_t cublasSgemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                                      const float *alpha, const float *A, int lda, const float *x,
                                      int incx, const float *beta, float *y, int incy)
{
    const char *call = "cublasSgemv";
    bool inject = ddp_emu_inject(call);
    if (!handle_ok(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!op_ok(trans) || m < 0 || n < 0 || lda < std::max(1, m) || incx == 0 || incy == 0 ||
        !alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (inject) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    long lx = trans == CUBLAS_OP_N ? n : m, ly = trans == CUBLAS_OP_N ? m : n;
    long ax = incx < 0 ? -(long)incx : incx, ay = incy < 0 ? -(long)incy : incy;
    if (!operand_ok(call, "A", A, m, n, lda, sizeof(float)) ||
        !operand_ok(call, "x", x, 1, lx, ax, sizeof(float)) ||
        !operand_ok(call, "y", y, 1, ly, ay, sizeof(float)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    float al = *alpha, be = *beta;
    submit(handle->stream, device_op(call, "", 0, [=]() {
               if (be == 0.0f)
                   for (long i = 0; i < ly; i++) y[i * ay] = 0.0f;
               cblas_sgemv(CblasColMajor, cblas_op(trans), m, n, al, A, lda, x, incx, be, y,
                           incy);
           }));
    return CUBLAS_STATUS_SUCCESS;
}

// ---- cuBLASLt (include/cublasLt.h) ------------------------------------------

struct cublasLtContext {
    int unused;
};
struct cublasLtMatmulDescOpaque_t {
    cublasComputeType_t compute;
    cudaDataType scale;
    int32_t ta, tb;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type; // -1: D's
};
struct cublasLtMatrixLayoutOpaque_t {
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
};
struct cublasLtMatmulPreferenceOpaque_t {
    uint64_t workspace;
    uint32_t align[4]; // A, B, C, D: the least alignment promised (0: 256)
};

namespace
{

Registry g_lt_objects;                              // live handles and descriptors
constexpr uint64_t kLtAlgo = 0x6464706c74616c67ull; // the one algorithm's tag

template <class T> cublasStatus_t lt_make(T **out, const T &init)
{
    if (!out) return CUBLAS_STATUS_INVALID_VALUE;
    *out = g_lt_objects.make(init);
    return CUBLAS_STATUS_SUCCESS;
}

template <class T> cublasStatus_t lt_free(T *p)
{
    return g_lt_objects.destroy(p) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_INVALID_VALUE;
}

bool lt_live(const void *p)
{
    return g_lt_objects.live(p);
}

size_t lt_elem(cudaDataType t)
{
    return t == CUDA_R_32F ? 4 : t == CUDA_R_16BF ? 2 : 0;
}

// The operation's shape from its layouts: INVALID_VALUE where they do not
// agree, NOT_SUPPORTED for types the emulation (and the backend) has no
// kernel for; m, n, k out.
cublasStatus_t lt_shape(cublasLtMatmulDesc_t d, cublasLtMatrixLayout_t A, cublasLtMatrixLayout_t B,
                        cublasLtMatrixLayout_t C, cublasLtMatrixLayout_t D, long *m, long *n,
                        long *k)
{
    if (!lt_live(d) || !lt_live(A) || !lt_live(B) || !lt_live(C) || !lt_live(D))
        return CUBLAS_STATUS_INVALID_VALUE;
    *m = (long)D->rows, *n = (long)D->cols;
    long am = d->ta == CUBLAS_OP_N ? (long)A->rows : (long)A->cols;
    *k = d->ta == CUBLAS_OP_N ? (long)A->cols : (long)A->rows;
    long bk = d->tb == CUBLAS_OP_N ? (long)B->rows : (long)B->cols;
    long bn = d->tb == CUBLAS_OP_N ? (long)B->cols : (long)B->rows;
    if (am != *m || bk != *k || bn != *n || C->rows != D->rows || C->cols != D->cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (cublasLtMatrixLayout_t L : {A, B, C, D})
        if (L->ld < (int64_t)std::max<uint64_t>(1, L->rows)) return CUBLAS_STATUS_INVALID_VALUE;
    bool ab = A->type == B->type && lt_elem(A->type);
    bool cd = C->type == D->type && lt_elem(D->type);
    bool bias_t = d->bias_type == -1 || d->bias_type == CUDA_R_32F || d->bias_type == (int)D->type;
    if (!ab || !cd || !bias_t || d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F)
        return CUBLAS_STATUS_NOT_SUPPORTED;
    return CUBLAS_STATUS_SUCCESS;
}

bool lt_has_bias(uint32_t epi)
{
    return epi == CUBLASLT_EPILOGUE_BIAS || epi == CUBLASLT_EPILOGUE_RELU_BIAS;
}
bool lt_has_relu(uint32_t epi)
{
    return epi == CUBLASLT_EPILOGUE_RELU || epi == CUBLASLT_EPILOGUE_RELU_BIAS;
}

// An operand of layout L (fp32 or bf16) as floats, with L's ld.
std::vector<float> lt_floats(const void *p, const cublasLtMatrixLayoutOpaque_t *L)
{
    if (L->type == CUDA_R_16BF) return bf16_to_float(p, (long)L->rows, (long)L->cols, (long)L->ld);
    std::vector<float> out;
    if (L->rows && L->cols) {
        const float *f = (const float *)p;
        out.assign(f, f + (size_t)(L->cols - 1) * L->ld + L->rows);
    }
    return out;
}

} // namespace

extern "C" cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle)
{
    if (!lightHandle) return CUBLAS_STATUS_INVALID_VALUE;
    if (ddp_emu_inject("cublasLtCreate")) return CUBLAS_STATUS_ALLOC_FAILED;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (current_physical_locked() < 0) return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    return lt_make(lightHandle, cublasLtContext{0});
}

extern "C" cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle)
{
    return lt_free(lightHandle) == CUBLAS_STATUS_SUCCESS ? CUBLAS_STATUS_SUCCESS
                                                         : CUBLAS_STATUS_NOT_INITIALIZED;
}

extern "C" cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                                   cublasComputeType_t computeType,
                                                   cudaDataType_t scaleType)
{
    return lt_make(matmulDesc, cublasLtMatmulDescOpaque_t{computeType, scaleType, CUBLAS_OP_N,
                                                          CUBLAS_OP_N, CUBLASLT_EPILOGUE_DEFAULT,
                                                          nullptr, -1});
}

extern "C" cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc)
{
    return lt_free(matmulDesc);
}

extern "C" cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                         cublasLtMatmulDescAttributes_t attr,
                                                         const void *buf, size_t sizeInBytes)
{
    if (!lt_live(matmulDesc) || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
    case CUBLASLT_MATMUL_DESC_TRANSB: {
        int32_t v;
        if (sizeInBytes != sizeof v) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&v, buf, sizeof v);
        if (!op_ok((cublasOperation_t)v)) return CUBLAS_STATUS_INVALID_VALUE;
        (attr == CUBLASLT_MATMUL_DESC_TRANSA ? matmulDesc->ta : matmulDesc->tb) = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_EPILOGUE: {
        uint32_t v;
        if (sizeInBytes != sizeof v) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&v, buf, sizeof v);
        if (v != CUBLASLT_EPILOGUE_DEFAULT && !lt_has_relu(v) && !lt_has_bias(v))
            return CUBLAS_STATUS_INVALID_VALUE;
        matmulDesc->epilogue = v;
        return CUBLAS_STATUS_SUCCESS;
    }
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
        if (sizeInBytes != sizeof(void *)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&matmulDesc->bias, buf, sizeof(void *));
        return CUBLAS_STATUS_SUCCESS;
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
        if (sizeInBytes != sizeof(int32_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&matmulDesc->bias_type, buf, sizeof(int32_t));
        return CUBLAS_STATUS_SUCCESS;
    }
    return CUBLAS_STATUS_INVALID_VALUE;
}

extern "C" cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout,
                                                     cudaDataType type, uint64_t rows,
                                                     uint64_t cols, int64_t ld)
{
    if (ld < 0) return CUBLAS_STATUS_INVALID_VALUE;
    return lt_make(matLayout, cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld});
}

extern "C" cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout)
{
    return lt_free(matLayout);
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref)
{
    return lt_make(pref, cublasLtMatmulPreferenceOpaque_t{0, {0, 0, 0, 0}});
}

extern "C" cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref)
{
    return lt_free(pref);
}

extern "C" cublasStatus_t
cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                     cublasLtMatmulPreferenceAttributes_t attr, const void *buf,
                                     size_t sizeInBytes)
{
    if (!lt_live(pref) || !buf) return CUBLAS_STATUS_INVALID_VALUE;
    if (attr == CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES) {
        if (sizeInBytes != sizeof(uint64_t)) return CUBLAS_STATUS_INVALID_VALUE;
        memcpy(&pref->workspace, buf, sizeof(uint64_t));
        return CUBLAS_STATUS_SUCCESS;
    }
    int i = (int)attr - (int)CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES;
    if (i < 0 || i > 3 || sizeInBytes != sizeof(uint32_t)) return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(&pref->align[i], buf, sizeof(uint32_t));
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount)
{
    bool inject = ddp_emu_inject("cublasLtMatmulAlgoGetHeuristic");
    if (!lt_live(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!lt_live(preference) || requestedAlgoCount < 1 || !heuristicResultsArray ||
        !returnAlgoCount)
        return CUBLAS_STATUS_INVALID_VALUE;
    *returnAlgoCount = 0;
    long m, n, k;
    cublasStatus_t st = lt_shape(operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &m, &n, &k);
    if (st == CUBLAS_STATUS_SUCCESS && inject) st = CUBLAS_STATUS_NOT_SUPPORTED;
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    cublasLtMatmulHeuristicResult_t r;
    memset(&r, 0, sizeof r);
    r.algo.data[0] = kLtAlgo;
    for (int i = 0; i < 4; i++) r.algo.data[1 + i] = preference->align[i] ? preference->align[i] : 256;
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    heuristicResultsArray[0] = r;
    *returnAlgoCount = 1;
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle,
                                         cublasLtMatmulDesc_t computeDesc, const void *alpha,
                                         const void *A, cublasLtMatrixLayout_t Adesc,
                                         const void *B, cublasLtMatrixLayout_t Bdesc,
                                         const void *beta, const void *C,
                                         cublasLtMatrixLayout_t Cdesc, void *D,
                                         cublasLtMatrixLayout_t Ddesc,
                                         const cublasLtMatmulAlgo_t *algo, void *workspace,
                                         size_t workspaceSizeInBytes, cudaStream_t stream)
{
    const char *call = "cublasLtMatmul";
    bool inject = ddp_emu_inject(call);
    (void)workspace, (void)workspaceSizeInBytes;
    if (!lt_live(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta || (algo && algo->data[0] != kLtAlgo)) return CUBLAS_STATUS_INVALID_VALUE;
    long m, n, k;
    cublasStatus_t st = lt_shape(computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &m, &n, &k);
    if (st != CUBLAS_STATUS_SUCCESS) return st;
    const uint32_t epi = computeDesc->epilogue;
    const float *bias = (const float *)computeDesc->bias;
    const bool bias16 = computeDesc->bias_type == CUDA_R_16BF ||
                        (computeDesc->bias_type == -1 && Ddesc->type == CUDA_R_16BF);
    if (lt_has_bias(epi) && !bias) return CUBLAS_STATUS_INVALID_VALUE;
    {
        std::lock_guard<std::mutex> lock(g_mu);
        if (!stream_ok_locked(stream)) return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (algo) { // the algorithm's kernel assumes its preference's alignments
        const void *ops[4] = {A, B, C, D};
        for (int i = 0; i < 4; i++)
            if ((uintptr_t)ops[i] % algo->data[1 + i]) return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (inject) return CUBLAS_STATUS_EXECUTION_FAILED;
    if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
    float a = *(const float *)alpha, b = *(const float *)beta;
    bool use_ab = k > 0 && a != 0.0f;
    if (use_ab && (!operand_ok(call, "A", A, (long)Adesc->rows, (long)Adesc->cols,
                               (long)Adesc->ld, lt_elem(Adesc->type)) ||
                   !operand_ok(call, "B", B, (long)Bdesc->rows, (long)Bdesc->cols,
                               (long)Bdesc->ld, lt_elem(Bdesc->type))))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    if ((b != 0.0f && !operand_ok(call, "C", C, m, n, (long)Cdesc->ld, lt_elem(Cdesc->type))) ||
        !operand_ok(call, "D", D, m, n, (long)Ddesc->ld, lt_elem(Ddesc->type)) ||
        (lt_has_bias(epi) && !operand_ok(call, "bias", bias, m, 1, m, bias16 ? 2 : 4)))
        return CUBLAS_STATUS_EXECUTION_FAILED;
    const cublasOperation_t ta = (cublasOperation_t)computeDesc->ta,
                            tb = (cublasOperation_t)computeDesc->tb;
    const cublasLtMatrixLayoutOpaque_t la = *Adesc, lb = *Bdesc, lc = *Cdesc, ld = *Ddesc;
    submit(stream, device_op(call, "", 0, [=]() {
               // the fp32 result, m x n with ld m, then the epilogue into D
               std::vector<float> r((size_t)m * n);
               if (b != 0.0f) {
                   std::vector<float> c = lt_floats(C, &lc);
                   for (long j = 0; j < n; j++)
                       memcpy(&r[(size_t)j * m], &c[(size_t)j * lc.ld], (size_t)m * sizeof(float));
               }
               if (use_ab) {
                   std::vector<float> fa = lt_floats(A, &la), fb = lt_floats(B, &lb);
                   gemm_run(ta, tb, (int)m, (int)n, (int)k, a, fa.data(), (int)la.ld, fb.data(),
                            (int)lb.ld, b, r.data(), (int)m);
               } else {
                   for (float &v : r) v *= b;
               }
               for (long j = 0; j < n; j++)
                   for (long i = 0; i < m; i++) {
                       float v = r[(size_t)j * m + i];
                       if (lt_has_bias(epi))
                           v += bias16 ? __bfloat162float(((const __nv_bfloat16 *)bias)[i])
                                       : bias[i];
                       if (lt_has_relu(epi) && v < 0.0f) v = 0.0f;
                       size_t at = (size_t)j * ld.ld + i;
                       if (ld.type == CUDA_R_16BF)
                           ((__nv_bfloat16 *)D)[at] = __float2bfloat16(v);
                       else
                           ((float *)D)[at] = v;
                   }
           }));
    return CUBLAS_STATUS_SUCCESS;
}
