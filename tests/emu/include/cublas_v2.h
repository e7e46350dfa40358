/* cublas_v2.h -- the CPU emulation of cuBLAS (tests/emu/emu_cublas.cc): the handle,
 * the status codes, and SGEMM, strided batched SGEMM, GemmEx (A and B fp32
 * or bf16, C fp32, fp32 compute) and SGEMV over the host CBLAS with
 * CblasColMajor.  Column-major semantics exactly as cuBLAS documents them.
 *
 * The emulation checks what cuBLAS checks, and more:
 * - handle NULL or destroyed: CUBLAS_STATUS_NOT_INITIALIZED;
 * - m, n, k, batchCount < 0, an unknown operation, lda < max(1, rows of A as
 *   stored: m for OP_N, k for OP_T), ldb likewise (k or n), ldc < max(1, m),
 *   incx or incy 0: CUBLAS_STATUS_INVALID_VALUE;
 * - an operand not inside one tracked device allocation over its whole
 *   extent (lda * (cols - 1) + rows elements; with strides over all
 *   batches), i.e. a host pointer or an out-of-bounds matrix:
 *   CUBLAS_STATUS_EXECUTION_FAILED (a GPU would fault), with one line on
 *   stderr naming the call and the operand;
 * - unsupported GemmEx types: CUBLAS_STATUS_NOT_SUPPORTED.
 * TF32: with the handle's math mode CUBLAS_TF32_TENSOR_OP_MATH (SGEMM,
 * strided batched SGEMM, GemmEx with CUBLAS_COMPUTE_32F) or GemmEx's
 * CUBLAS_COMPUTE_32F_FAST_TF32, fp32 A and B are rounded to TF32 (10
 * mantissa bits, to nearest, ties away from zero) before the product, as
 * the tensor cores see them; accumulation and C stay fp32.
 * beta == 0 never reads C (it may hold NaN).  alpha and beta are host
 * pointers (CUBLAS_POINTER_MODE_HOST, the default), read at the call.  The
 * work is an operation of the handle's stream (queued, see cuda_runtime.h,
 * DDP_EMU_STREAMS); the operands are checked at the call.
 * DDP_EMU_FAIL=cublasSgemm:N etc. makes the N-th call fail (cuda_runtime.h).
 */
#ifndef DDP_EMU_CUBLAS_V2_H
#define DDP_EMU_CUBLAS_V2_H

#include "cuda_runtime.h"
#include "cuda_bf16.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- library_types.h ---------------------------------------------------- */
typedef enum cudaDataType_t {
    CUDA_R_16F = 2,
    CUDA_R_32F = 0,
    CUDA_R_64F = 1,
    CUDA_R_16BF = 14
} cudaDataType_t;
typedef cudaDataType_t cudaDataType;

/* ---- cuBLAS ------------------------------------------------------------- */
typedef enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_MAPPING_ERROR = 11,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;

typedef enum {
    CUBLAS_DEFAULT_MATH = 0,
    CUBLAS_TENSOR_OP_MATH = 1,
    CUBLAS_PEDANTIC_MATH = 2,
    CUBLAS_TF32_TENSOR_OP_MATH = 3,
    CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16
} cublasMath_t;

typedef enum {
    CUBLAS_COMPUTE_16F = 64,
    CUBLAS_COMPUTE_32F = 68,
    CUBLAS_COMPUTE_32F_PEDANTIC = 69,
    CUBLAS_COMPUTE_32F_FAST_16F = 74,
    CUBLAS_COMPUTE_32F_FAST_16BF = 75,
    CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
    CUBLAS_COMPUTE_64F = 70
} cublasComputeType_t;

typedef enum {
    CUBLAS_GEMM_DEFAULT = -1,
    CUBLAS_GEMM_DFALT = -1,
    CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99,
    CUBLAS_GEMM_DFALT_TENSOR_OP = 99
} cublasGemmAlgo_t;

typedef struct cublasContext *cublasHandle_t;

const char *cublasGetStatusString(cublasStatus_t status);
const char *cublasGetStatusName(cublasStatus_t status);
cublasStatus_t cublasCreate(cublasHandle_t *handle);
cublasStatus_t cublasDestroy(cublasHandle_t handle);
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasGetStream(cublasHandle_t handle, cudaStream_t *stream);
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t *mode);

cublasStatus_t cublasSgemm(cublasHandle_t handle, cublasOperation_t transa,
                           cublasOperation_t transb, int m, int n, int k, const float *alpha,
                           const float *A, int lda, const float *B, int ldb, const float *beta,
                           float *C, int ldc);
cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t handle, cublasOperation_t transa,
                                         cublasOperation_t transb, int m, int n, int k,
                                         const float *alpha, const float *A, int lda,
                                         long long int strideA, const float *B, int ldb,
                                         long long int strideB, const float *beta, float *C,
                                         int ldc, long long int strideC, int batchCount);
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo);
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType Atype,
                                          int lda, long long int strideA, const void *B,
                                          cudaDataType Btype, int ldb, long long int strideB,
                                          const void *beta, void *C, cudaDataType Ctype, int ldc,
                                          long long int strideC, int batchCount,
                                          cublasComputeType_t computeType, cublasGemmAlgo_t algo);
cublasStatus_t cublasSgemv(cublasHandle_t handle, cublasOperation_t trans, int m, int n,
                           const float *alpha, const float *A, int lda, const float *x, int incx,
                           const float *beta, float *y, int incy);

#ifdef __cplusplus
}
#endif

#endif
