// gemm.h -- the backend's one GEMM entry (linear.cu), shared by linear.cu
// and conv.cu: row-major operands mapped onto column-major cuBLAS, fp32
// throughout, or with ddp_cuda_state_.bf16_gemm the inputs rounded to bf16
// (scratch the backend owns) and multiplied by cublasGemmEx with fp32
// accumulation and fp32 output.  Queued on the compute stream.
#ifndef DDP_CUDA_GEMM_H
#define DDP_CUDA_GEMM_H

#include "ddp_cuda_rt.h"

// Row-major C[m, n] = alpha op(A) op(B) + beta C, op(A) [m, k], op(B) [k, n];
// ta / tb: the operand is stored transposed (A as [k, m], B as [n, k]).
// lda, ldb, ldc are row strides of the stored matrices.  beta == 0 does
// not read C.  Returns 0 or -1 (failure recorded).
int ddp_cuda_gemm_rm_(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc);
// The same with B in bf16 already, rounded by its maker as the entry rounds
// (ddp_f32_to_bf16, half.h): under --precision bf16 only (ddp_cuda_state_.
// bf16_gemm; else a failure), the result bit for bit that of the entry on
// the fp32 B.  A producer that writes its output in bf16 saves the pass
// that would round it (the convolution's columns, conv.cu).
int ddp_cuda_gemm_rm_b16_(int ta, int tb, int m, int n, int k, float alpha, const float *A,
                          int lda, const uint16_t *B16, int ldb, float beta, float *C, int ldc);

// Frees the bf16 scratch (ddp_cuda_shutdown).
void ddp_cuda_gemm_release_(void);

// g[count] = beta g (beta == 0: zero without reading g); on the compute stream.
int ddp_cuda_grad_scale_(size_t count, float *g, float beta);

#endif
