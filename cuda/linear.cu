// linear.cu -- dense layers (ddp_cuda_linear_fwd/bwd) and the backend's GEMM
// entry (gemm.h): row-major tensors on column-major cuBLAS, in fp32 or with
// bf16 inputs (ddp_cuda_state_.bf16_gemm; the forward's rounded weight and
// input kept for the backward, bf16.h), bias add and bias gradient as
// kernels (the gradient as fixed-shape column tiles: deterministic).
#include <cstring>

#include "bf16.h"
#include "gemm.h"

namespace
{

__global__ void grad_scale_kernel(size_t count, float *g, float beta)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        g[i] = beta == 0.0f ? 0.0f : beta * g[i];
}

// y[i, j] = b[j] over y[n, out]
__global__ void bias_fill_kernel(size_t count, int out, const float *b, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        y[i] = b[i % (size_t)out];
}

// db[j] = beta db[j] + sum_i dy[i, j].  A block takes kBiasCols columns at
// a time with kBiasLanes lanes of rows: lane r sums rows r, r + kBiasLanes,
// ... in order (each warp reads kBiasCols consecutive floats of one row),
// then the lanes are added in a fixed tree.  Deterministic, and a batch of
// rows is read by kBiasLanes threads per column, not by one (a 10-class
// output layer at batch 4096 was 4096 dependent-free loads in one thread).
constexpr int kBiasCols = 32, kBiasLanes = 32;

__global__ void bias_grad_kernel(int n, int out, const float *dy, float *db, float beta)
{
    __shared__ float part[kBiasLanes][kBiasCols + 1]; // +1: no bank conflicts
    const int c = threadIdx.x, lane = threadIdx.y;
    // the loop bound is the same for every thread of the block (barriers)
    for (size_t j0 = (size_t)blockIdx.x * kBiasCols; j0 < (size_t)out;
         j0 += (size_t)gridDim.x * kBiasCols) {
        const size_t j = j0 + c;
        float acc = 0.0f;
        if (j < (size_t)out)
            for (int i = lane; i < n; i += kBiasLanes) acc += dy[(size_t)i * out + j];
        part[lane][c] = acc;
        __syncthreads();
        for (int w = kBiasLanes / 2; w > 0; w /= 2) {
            if (lane < w) part[lane][c] += part[lane + w][c];
            __syncthreads();
        }
        if (lane == 0 && j < (size_t)out) db[j] = (beta == 0.0f ? 0.0f : beta * db[j]) + part[0][c];
        __syncthreads(); // part is rewritten by the next columns
    }
}

void bias_grad(cudaStream_t s, int n, int out, const float *dy, float *db, float beta)
{
    size_t tiles = ((size_t)out + kBiasCols - 1) / kBiasCols;
    unsigned blocks = (unsigned)(tiles < 65535 ? tiles : 65535);
    double dyb = 4.0 * n * out, dbb = 4.0 * out;
    DDP_COST(dyb + (beta != 0.0f ? dbb : 0), dbb, (double)n * out);
    DDP_LAUNCH(bias_grad_kernel, blocks, dim3(kBiasCols, kBiasLanes), s, n, out, dy, db, beta);
}

} // namespace

int ddp_cuda_grad_scale_(size_t count, float *g, float beta)
{
    if (count == 0 || beta == 1.0f) return 0;
    DDP_COST(beta != 0.0f ? 4.0 * count : 0, 4.0 * count, beta != 0.0f ? (double)count : 0);
    DDP_LAUNCH(grad_scale_kernel, ddp_blocks_for(count), kDdpThreads, ddp_cuda_state_.stream, count,
               g, beta);
    DDP_CU_LAUNCHED();
    return 0;
}

// Row-major C = A B is column-major C^T = B^T A^T: cuBLAS gets the operands
// swapped (B first), m and n swapped, each keeping its own transpose flag
// (a row-major [r, c] matrix with stride ld is a column-major [c, r] one).
// A16 / B16: the operand is bf16 already (its maker rounded it as
// ddp_bf16_convert_ does); the others are fp32, rounded here under bf16.
// batch > 1: cuBLAS's strided batched GEMM, instance i of X at X + i sX.
static int gemm_rm_(int ta, int tb, int m, int n, int k, float alpha, const void *A, bool A16,
                    int lda, long long sA, const void *B, bool B16, int ldb, long long sB,
                    float beta, float *C, int ldc, long long sC, int batch)
{
    if (m <= 0 || n <= 0 || batch <= 0) return 0;
    if ((A16 || B16) && !ddp_cuda_state_.bf16_gemm)
        return ddp_cuda_fail_("ddp_cuda_gemm_rm16_", __FILE__, __LINE__,
                              "a bf16 operand without --precision bf16");
    cublasHandle_t h = ddp_cuda_state_.blas;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    // Stored extents: A is [m, k] (or [k, m] when ta) with row stride lda;
    // a batch's instances tile each operand's memory (gemm.h)
    size_t a_rows = ta ? (size_t)k : (size_t)m, a_cols = ta ? (size_t)m : (size_t)k;
    size_t b_rows = tb ? (size_t)n : (size_t)k, b_cols = tb ? (size_t)k : (size_t)n;
    size_t a_one = k > 0 ? (a_rows - 1) * (size_t)lda + a_cols : 0;
    size_t b_one = k > 0 ? (b_rows - 1) * (size_t)ldb + b_cols : 0;
    size_t a_count = a_one ? (size_t)(batch - 1) * (size_t)sA + a_one : 0;
    size_t b_count = b_one ? (size_t)(batch - 1) * (size_t)sB + b_one : 0;
    // C is read only when beta != 0; the FLOPs are the multiply-adds
    double c_bytes = 4.0 * ((double)(batch - 1) * sC + (double)(m - 1) * ldc + n);
    double flops = 2.0 * m * n * k * batch;
    double c_read = beta != 0.0f ? c_bytes : 0;
    if (!ddp_cuda_state_.bf16_gemm) {
        const float *A32 = (const float *)A, *B32 = (const float *)B;
        const ddp_cuda_math_t math = ddp_cuda_state_.tf32 ? DDP_MATH_TF32 : DDP_MATH_FP32;
        DDP_COST(4.0 * (a_count + b_count) + c_read, c_bytes, flops);
        if (batch > 1) {
            ddp_cost_gemm_("cublasSgemmStridedBatched", math, m, n, k, batch);
            DDP_CUBLAS(cublasSgemmStridedBatched(h, opb, opa, n, m, k, &alpha, B32, ldb, sB, A32,
                                                 lda, sA, &beta, C, ldc, sC, batch));
            return 0;
        }
        ddp_cost_gemm_("cublasSgemm", math, m, n, k);
        DDP_CUBLAS(cublasSgemm(h, opb, opa, n, m, k, &alpha, B32, ldb, A32, lda, &beta, C, ldc));
        return 0;
    }
    const void *ha = A, *hb = B;
    size_t a_bytes = A16 ? 0 : (a_count * 2 + 255) / 256 * 256;
    size_t b_bytes = B16 ? 0 : b_count * 2;
    if (a_bytes + b_bytes) {
        char *scratch = (char *)ddp_bf16_scratch_(DDP_BF16_GEMM_IN, a_bytes + b_bytes + 2);
        if (!scratch) return -1;
        if (!A16) {
            if (ddp_bf16_convert_(a_count, (const float *)A, (uint16_t *)scratch) != 0) return -1;
            ha = scratch;
        }
        if (!B16) {
            uint16_t *conv = (uint16_t *)(scratch + a_bytes);
            if (ddp_bf16_convert_(b_count, (const float *)B, conv) != 0) return -1;
            hb = conv;
        }
    }
    DDP_COST(2.0 * (a_count + b_count) + c_read, c_bytes, flops);
    if (batch > 1) {
        ddp_cost_gemm_("cublasGemmStridedBatchedEx", DDP_MATH_BF16, m, n, k, batch);
        DDP_CUBLAS(cublasGemmStridedBatchedEx(h, opb, opa, n, m, k, &alpha, hb, CUDA_R_16BF, ldb,
                                              sB, ha, CUDA_R_16BF, lda, sA, &beta, C, CUDA_R_32F,
                                              ldc, sC, batch, CUBLAS_COMPUTE_32F,
                                              CUBLAS_GEMM_DEFAULT));
        return 0;
    }
    ddp_cost_gemm_("cublasGemmEx", DDP_MATH_BF16, m, n, k);
    DDP_CUBLAS(cublasGemmEx(h, opb, opa, n, m, k, &alpha, hb, CUDA_R_16BF, ldb, ha, CUDA_R_16BF,
                            lda, &beta, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F,
                            CUBLAS_GEMM_DEFAULT));
    return 0;
}

int ddp_cuda_gemm_rm_(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda,
                      const float *B, int ldb, float beta, float *C, int ldc)
{
    return gemm_rm_(ta, tb, m, n, k, alpha, A, false, lda, 0, B, false, ldb, 0, beta, C, ldc, 0,
                    1);
}

int ddp_cuda_gemm_rm16_(int ta, int tb, int m, int n, int k, float alpha, const void *A, int a16,
                        int lda, const void *B, int b16, int ldb, float beta, float *C, int ldc)
{
    return gemm_rm_(ta, tb, m, n, k, alpha, A, a16 != 0, lda, 0, B, b16 != 0, ldb, 0, beta, C, ldc,
                    0, 1);
}

int ddp_cuda_gemm_rm_batched_(int ta, int tb, int m, int n, int k, const void *A, int a16, int lda,
                              long long sA, const void *B, int b16, int ldb, long long sB,
                              float beta, float *C, int ldc, long long sC, int batch)
{
    return gemm_rm_(ta, tb, m, n, k, 1.0f, A, a16 != 0, lda, sA, B, b16 != 0, ldb, sB, beta, C,
                    ldc, sC, batch);
}

extern "C" {

// y[n,out] = x[n,in] w[out,in]^T + b[out]: the bias goes in first and the
// GEMM adds onto it (as the CPU backend).
int ddp_cuda_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b,
                        float *y)
{
    if (n <= 0 || out <= 0) return 0;
    cudaStream_t s = ddp_cuda_state_.stream;
    size_t count = (size_t)n * out;
    if (b) {
        DDP_COST(4.0 * out, 4.0 * count, 0);
        DDP_LAUNCH(bias_fill_kernel, ddp_blocks_for(count), kDdpThreads, s, count, out, b, y);
        DDP_CU_LAUNCHED();
    }
    if (in <= 0) {
        if (!b) DDP_CU(cudaMemsetAsync(y, 0, count * sizeof *y, s));
        return 0;
    }
    const float beta = b ? 1.0f : 0.0f;
    if (!ddp_cuda_state_.bf16_gemm)
        return ddp_cuda_gemm_rm_(0, 1, n, out, in, 1.0f, x, in, w, in, beta, y, out);
    // bf16: the weight and the input rounded into the memo, for the backward too
    const uint16_t *w16, *x16;
    if (ddp_bf16_memo_put_(w, (size_t)out * in, x, (size_t)n * in, &w16, &x16) != 0) return -1;
    return ddp_cuda_gemm_rm16_(0, 1, n, out, in, 1.0f, x16, 1, in, w16, 1, in, beta, y, out);
}

// dw = beta dw + dy^T x ; db = beta db + sum_n dy ; dx = dy w
int ddp_cuda_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy,
                        float *dx, float *dw, float *db, float beta)
{
    cudaStream_t s = ddp_cuda_state_.stream;
    if (n <= 0 || in <= 0) {
        if (dw && in > 0 && out > 0 && ddp_cuda_grad_scale_((size_t)out * in, dw, beta) != 0)
            return -1;
        if (db && out > 0) {
            if (n > 0) { // in == 0: the bias still has a gradient
                bias_grad(s, n, out, dy, db, beta);
                DDP_CU_LAUNCHED();
            } else if (ddp_cuda_grad_scale_((size_t)out, db, beta) != 0) {
                return -1;
            }
        }
        return 0;
    }
    if (out <= 0) {
        if (dx) DDP_CU(cudaMemsetAsync(dx, 0, (size_t)n * in * sizeof *dx, s));
        return 0;
    }
    // bf16: dy rounded once for both GEMMs; x and w as the forward rounded
    // them (the memo), or rounded by the GEMM entry where the memo has none
    const void *dyq = dy, *xq = x, *wq = w;
    int dy16 = 0, x16 = 0, w16 = 0;
    if (ddp_cuda_state_.bf16_gemm && (dw || dx)) {
        const uint16_t *xm, *wm;
        ddp_bf16_memo_get_(w, (size_t)out * in, x, (size_t)n * in, &wm, &xm);
        if (xm) xq = xm, x16 = 1;
        if (wm) wq = wm, w16 = 1;
        uint16_t *h = (uint16_t *)ddp_bf16_scratch_(DDP_BF16_DY, (size_t)n * out * 2);
        if (!h || ddp_bf16_convert_((size_t)n * out, dy, h) != 0) return -1;
        dyq = h, dy16 = 1;
    }
    if (dw && ddp_cuda_gemm_rm16_(1, 0, out, in, n, 1.0f, dyq, dy16, out, xq, x16, in, beta, dw,
                                  in) != 0)
        return -1;
    if (db) {
        bias_grad(s, n, out, dy, db, beta);
        DDP_CU_LAUNCHED();
    }
    if (dx && ddp_cuda_gemm_rm16_(0, 0, n, in, out, 1.0f, dyq, dy16, out, wq, w16, in, 0.0f, dx,
                                  in) != 0)
        return -1;
    return 0;
}

} // extern "C"
