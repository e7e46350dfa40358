// gemm.h -- the backend's one GEMM entry (linear.cu), shared by linear.cu
// and conv.cu: row-major operands mapped onto column-major cuBLAS, fp32
// throughout, or with ddp_cuda_state_.bf16_gemm the inputs rounded to bf16
// (bf16.h) and multiplied by cublasGemmEx with fp32 accumulation and fp32
// output.  Queued on the compute stream.
#ifndef DDP_CUDA_GEMM_H
#define DDP_CUDA_GEMM_H

#include "ddp_cuda_rt.h"

// Row-major C[m, n] = alpha op(A) op(B) + beta C, op(A) [m, k], op(B) [k, n];
// ta / tb: the operand is stored transposed (A as [k, m], B as [n, k]).
// lda, ldb, ldc are row strides of the stored matrices.  beta == 0 does
// not read C.  Returns 0 or -1 (failure recorded).
int ddp_cuda_gemm_rm_(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc);
// The same with each operand fp32 (a16 / b16 0: rounded by the entry under
// bf16) or bf16 already (1: rounded by its maker as the entry rounds,
// ddp_bf16_convert_), under --precision bf16 only (else a failure); the
// result bit for bit that of the entry on the fp32 operands.  A producer
// that writes its output in bf16 saves the pass that would round it (the
// convolution's columns, conv.cu), and an operand used twice is rounded
// once (a layer's weight and input in the memo, its output gradient by both
// backward GEMMs: bf16.h).
int ddp_cuda_gemm_rm16_(int ta, int tb, int m, int n, int k, float alpha, const void *A, int a16,
                        int lda, const void *B, int b16, int ldb, float beta, float *C, int ldc);

// `batch` GEMMs of those shapes in one strided batched call (cuBLAS's
// StridedBatched): C_i = op(A_i) op(B_i) + beta C_i with X_i = X + i sX
// elements (sA == 0: one A for all); operands fp32 or bf16 as above.  The
// instances of an operand must tile its memory without overlap or gaps
// (its extent, (batch - 1) sX + one instance's, is what the cost declares).
int ddp_cuda_gemm_rm_batched_(int ta, int tb, int m, int n, int k, const void *A, int a16, int lda,
                              long long sA, const void *B, int b16, int ldb, long long sB,
                              float beta, float *C, int ldc, long long sC, int batch);

// Row-major y[n, out] = x[n, in] w[out, in]^T, plus b[out] (b NULL: none),
// then relu (relu != 0), as one cuBLASLt matmul with the bias and the ReLU
// in its epilogue (the fp32 product plus the bias, rounded once to y's
// type: the bits of the GEMM entry followed by a pass adding them).  x16:
// x and w are bf16 (made as ddp_bf16_convert_ makes them), else fp32; y16:
// y is bf16, else fp32.  Returns 1 when queued, 0 when cuBLASLt cannot run
// it (not loaded, no algorithm for these types and alignments, a bias not
// 16-byte aligned: the caller runs the GEMM and the epilogue apart), -1 on
// failure (recorded).  Each shape's descriptors and algorithm are kept.
int ddp_lt_linear_(int n, int in, int out, const void *x, const void *w, int x16, const float *b,
                   int relu, void *y, int y16);
// Frees the kept descriptors (ddp_cuda_shutdown).
void ddp_lt_release_(void);

// g[count] = beta g (beta == 0: zero without reading g); on the compute stream.
int ddp_cuda_grad_scale_(size_t count, float *g, float beta);

#endif
