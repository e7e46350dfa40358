/* bench_gpu_gemm.cu -- the reference of bench_gpu: the GEMMs of an MLP
 * training step through cuBLAS alone, on the same shapes and in the same
 * precision as the step through the compute ops table (bench_gpu.c), so the
 * step's time can be put next to what its GEMMs cost by themselves.
 *
 * Built like the .cu files of cuda/: with nvcc in CUDA builds, and with the C++ compiler
 * against the CPU emulation of the runtime and cuBLAS (tests/emu) otherwise
 * (bench_gpu_gemm_emu.cc), where it checks only that the shapes and the
 * FLOP accounting run.  Only the extern "C" functions below cross into C. */
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "bench_gpu_gemm.h"

static cublasHandle_t gemm_handle_;
static void *gemm_w_, *gemm_x_, *gemm_dy_, *gemm_out_; /* the largest operands of any layer */
static char gemm_error_[256];

static int gemm_cuda_(cudaError_t e, const char *what, int line)
{
    if (e == cudaSuccess) return 0;
    snprintf(gemm_error_, sizeof gemm_error_, "%s: %s (bench_gpu_gemm.cu:%d)", what,
             cudaGetErrorString(e), line);
    return -1;
}

static int gemm_cublas_(cublasStatus_t s, const char *what, int line)
{
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    snprintf(gemm_error_, sizeof gemm_error_, "%s: %s (bench_gpu_gemm.cu:%d)", what,
             cublasGetStatusString(s), line);
    return -1;
}
#define GEMM_CU(call)     gemm_cuda_((call), #call, __LINE__)
#define GEMM_CUBLAS(call) gemm_cublas_((call), #call, __LINE__)

extern "C" const char *bench_gpu_gemm_error(void)
{
    return gemm_error_;
}

extern "C" int bench_gpu_gemm_init(int max_dim, int batch)
{
    size_t w = (size_t)max_dim * max_dim * 4, a = (size_t)batch * max_dim * 4;
    if (GEMM_CUBLAS(cublasCreate(&gemm_handle_))) return -1;
    if (GEMM_CU(cudaMalloc(&gemm_w_, w)) || GEMM_CU(cudaMalloc(&gemm_x_, a)) ||
        GEMM_CU(cudaMalloc(&gemm_dy_, a)) || GEMM_CU(cudaMalloc(&gemm_out_, w > a ? w : a)))
        return -1;
    /* Operands like the step's: random values in (-1, 1) (all zeros would
     * draw less power and could run at higher clocks than real data).  Each
     * 16-bit half is a bf16 number in (-1, 1), so the buffers read as bf16
     * and as fp32 (a bf16 high half, random low mantissa bits) are finite. */
    static uint16_t host[1 << 16];
    unsigned s = 777u;
    void *bufs[3] = {gemm_w_, gemm_x_, gemm_dy_};
    size_t sizes[3] = {w, a, a};
    for (int b = 0; b < 3; b++)
        for (size_t off = 0; off < sizes[b]; off += sizeof host) {
            size_t n = sizes[b] - off < sizeof host ? sizes[b] - off : sizeof host;
            for (size_t i = 0; i < n / 2; i++) {
                s = s * 1664525u + 1013904223u;
                float v = (float)(s >> 8) * (1.0f / 8388608.0f) - 1.0f;
                uint32_t bits;
                memcpy(&bits, &v, 4);
                host[i] = (uint16_t)(bits >> 16);
            }
            if (GEMM_CU(cudaMemcpy((char *)bufs[b] + off, host, n, cudaMemcpyHostToDevice)))
                return -1;
        }
    return GEMM_CU(cudaDeviceSynchronize());
}

extern "C" void bench_gpu_gemm_free(void)
{
    cudaFree(gemm_w_), cudaFree(gemm_x_), cudaFree(gemm_dy_), cudaFree(gemm_out_);
    if (gemm_handle_) cublasDestroy(gemm_handle_);
    gemm_handle_ = NULL;
}

/* C(m x n) = op(A) op(B) + beta C, column-major, fp32 or bf16 inputs with
 * fp32 accumulation and output (what the backend's bf16 GEMMs compute). */
static int gemm_(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *A,
                 int lda, const void *B, int ldb, float beta, void *C, int ldc, int bf16)
{
    const float one = 1.0f;
    if (!bf16)
        return GEMM_CUBLAS(cublasSgemm(gemm_handle_, ta, tb, m, n, k, &one, (const float *)A, lda,
                                       (const float *)B, ldb, &beta, (float *)C, ldc));
    return GEMM_CUBLAS(cublasGemmEx(gemm_handle_, ta, tb, m, n, k, &one, A, CUDA_R_16BF, lda, B,
                                    CUDA_R_16BF, ldb, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
}

extern "C" int bench_gpu_gemm_steps(int layers, const int *dims, int batch, int bf16, int steps)
{
    /* Row-major x[B,in], w[out,in], y[B,out] are the column-major
     * [in,B], [in,out], [out,B]:  y = x w^T    is  Y = W^T X  (T, N);
     * dw = dy^T x  is  dW = X dY^T  (N, T);   dx = dy w  is  dX = W dY  (N, N). */
    for (int s = 0; s < steps; s++) {
        for (int l = 0; l < layers; l++) /* forward */
            if (gemm_(CUBLAS_OP_T, CUBLAS_OP_N, dims[l + 1], batch, dims[l], gemm_w_, dims[l],
                      gemm_x_, dims[l], 0.0f, gemm_out_, dims[l + 1], bf16))
                return -1;
        for (int l = layers - 1; l >= 0; l--) { /* backward: weight and input gradients */
            if (gemm_(CUBLAS_OP_N, CUBLAS_OP_T, dims[l], dims[l + 1], batch, gemm_x_, dims[l],
                      gemm_dy_, dims[l + 1], 0.0f, gemm_out_, dims[l], bf16))
                return -1;
            if (l > 0 && gemm_(CUBLAS_OP_N, CUBLAS_OP_N, dims[l], batch, dims[l + 1], gemm_w_,
                               dims[l], gemm_dy_, dims[l + 1], 0.0f, gemm_out_, dims[l], bf16))
                return -1;
        }
    }
    return GEMM_CU(cudaDeviceSynchronize());
}
