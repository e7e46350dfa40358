// emu_cublas.cc -- the CPU emulation of cuBLAS: handles with a stream and a
// math mode (TF32 rounds fp32 inputs to TF32), and SGEMM, strided batched
// SGEMM, GemmEx (fp32 or bf16 inputs)
// and SGEMV over the host CBLAS (column-major), their operands checked
// against the device-memory table at the call and the product computed as
// an operation of the handle's stream.  The contract is in include/
// cublas_v2.h.
#include "emu_internal.h"

#include <cblas.h>
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
    size_t bytes = (size_t)(hi - lo) * elem;
    std::lock_guard<std::mutex> lock(g_mu);
    if (p && dev_range_locked(base, bytes)) return true;
    if (!p || !is_dev_locked(p))
        ddp_emu_warn("%s: %s = %p is not device memory (a GPU would fault)", call, name, p);
    else
        ddp_emu_warn("%s: %s = %p: %lld bytes from %p run past its device allocation "
                     "(a GPU would fault)",
                     call, name, p, (long long)bytes, (const void *)base);
    return false;
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
// CUBLAS_COMPUTE_32F_FAST_TF32): the fp32 inputs rounded to TF32's 10
// mantissa bits, to nearest with ties away from zero (PTX cvt.rna.tf32.f32),
// Inf and NaN kept; the products, exact in fp32, accumulate in fp32.
bool tf32_mode(cublasHandle_t h)
{
    return (h->mode & ~CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION) ==
           CUBLAS_TF32_TENSOR_OP_MATH;
}
float tf32_round(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&v, &u, sizeof v);
    return v;
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
