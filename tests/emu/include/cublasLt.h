/* cublasLt.h -- the CPU emulation of cuBLASLt (tests/emu/emu_cublas.cc):
 * the subset the backend calls (cuda/blas.h), with cuBLASLt's names, values
 * and signatures.  A handle; matmul descriptors with a compute and scale
 * type and the attributes TRANSA, TRANSB, EPILOGUE (DEFAULT, RELU, BIAS,
 * RELU_BIAS), BIAS_POINTER and BIAS_DATA_TYPE; column-major matrix layouts
 * (type, rows, cols, ld); a preference with a workspace limit and the
 * operands' least alignments (an operand less aligned than its preference
 * says fails the matmul with INVALID_VALUE, as a kernel chosen for that
 * alignment would); the heuristic; and the matmul, D = epilogue(alpha op(A) op(B) + beta C):
 * A and B both fp32 or both bf16, C and D of one type, fp32 or bf16, the
 * compute CUBLAS_COMPUTE_32F and the scale fp32.  The epilogue adds the
 * bias (one value per row of D, fp32, or of D's type when BIAS_DATA_TYPE is
 * left unset) to the fp32 result, applies the ReLU (NaN passes, as the
 * backend's), then rounds to D's type (bf16: to nearest even).
 *
 * The emulation checks what cuBLASLt checks, and more:
 * - a NULL or destroyed handle or descriptor, an attribute of the wrong
 *   size or an unknown one: CUBLAS_STATUS_INVALID_VALUE (handle:
 *   NOT_INITIALIZED);
 * - layouts that do not agree with the operation (A's rows and cols as op
 *   reads them, C and D m x n, ld below rows): INVALID_VALUE;
 * - types outside the list above, or a bias the epilogue names but the
 *   descriptor lacks: the heuristic returns no algorithm (returnAlgoCount
 *   0, CUBLAS_STATUS_NOT_SUPPORTED), as cuBLASLt does for a combination it
 *   has no kernel for; the matmul with a NULL algo runs the heuristic;
 * - an operand or the bias not inside one device allocation: the matmul
 *   returns CUBLAS_STATUS_EXECUTION_FAILED with a line on stderr.
 * The work is an operation of the stream passed (queued, as cuBLAS's).
 * DDP_EMU_FAIL=cublasLtMatmulAlgoGetHeuristic:N (or cublasLtMatmul:N)
 * makes the N-th call fail: the heuristic then finds nothing. */
#ifndef DDP_EMU_CUBLASLT_H
#define DDP_EMU_CUBLASLT_H

#include <stddef.h>
#include <stdint.h>

#include "cublas_v2.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cublasLtContext *cublasLtHandle_t;
typedef struct cublasLtMatmulDescOpaque_t cublasLtMatmulDescOpaque_t;
typedef cublasLtMatmulDescOpaque_t *cublasLtMatmulDesc_t;
typedef struct cublasLtMatrixLayoutOpaque_t cublasLtMatrixLayoutOpaque_t;
typedef cublasLtMatrixLayoutOpaque_t *cublasLtMatrixLayout_t;
typedef struct cublasLtMatmulPreferenceOpaque_t cublasLtMatmulPreferenceOpaque_t;
typedef cublasLtMatmulPreferenceOpaque_t *cublasLtMatmulPreference_t;

typedef struct {
    uint64_t data[8];
} cublasLtMatmulAlgo_t;

typedef struct {
    cublasLtMatmulAlgo_t algo;
    size_t workspaceSize;
    cublasStatus_t state;
    float wavesCount;
    int reserved[4];
} cublasLtMatmulHeuristicResult_t;

typedef enum {
    CUBLASLT_MATMUL_DESC_TRANSA = 3,
    CUBLASLT_MATMUL_DESC_TRANSB = 4,
    CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
    CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
    CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26
} cublasLtMatmulDescAttributes_t;

typedef enum {
    CUBLASLT_EPILOGUE_DEFAULT = 1,
    CUBLASLT_EPILOGUE_RELU = 2,
    CUBLASLT_EPILOGUE_BIAS = 4,
    CUBLASLT_EPILOGUE_RELU_BIAS = 6
} cublasLtEpilogue_t;

typedef enum {
    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8
} cublasLtMatmulPreferenceAttributes_t;

cublasStatus_t cublasLtCreate(cublasLtHandle_t *lightHandle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *matmulDesc,
                                        cublasComputeType_t computeType, cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                              cublasLtMatmulDescAttributes_t attr, const void *buf,
                                              size_t sizeInBytes);
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *matLayout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr,
                                                    const void *buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc, cublasLtMatrixLayout_t Adesc,
    cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
    cublasLtMatmulPreference_t preference, int requestedAlgoCount,
    cublasLtMatmulHeuristicResult_t heuristicResultsArray[], int *returnAlgoCount);
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc,
                              const void *alpha, const void *A, cublasLtMatrixLayout_t Adesc,
                              const void *B, cublasLtMatrixLayout_t Bdesc, const void *beta,
                              const void *C, cublasLtMatrixLayout_t Cdesc, void *D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspaceSizeInBytes, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
