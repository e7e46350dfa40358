// linear.cu -- dense layers (ddp_cuda_linear_fwd/bwd) and the backend's GEMM
// entry (gemm.h): row-major tensors on column-major cuBLAS, in fp32 or with
// bf16 inputs (ddp_cuda_state_.bf16_gemm; the forward's rounded weight and
// input kept for the backward, bf16.h).  Around the GEMMs, one pass each
// way: forward, the bias and a fused ReLU added to the GEMM's output;
// backward, one read of the output gradient that masks it for a fused
// ReLU, sums the bias gradient (fixed-shape column tiles: deterministic)
// and writes the GEMMs' operand (masked, or rounded to bf16).  Where
// cuBLASLt is loaded the forward's pass is the matmul's epilogue instead,
// and under bf16 an output kept in bf16 (bf16.h) is written there and read
// as the next layer's input and as the ReLU's mask.
#include <cstring>

#include "backend_math.h"
#include "bf16.h"
#include "gemm.h"
#include "half.h"

namespace
{

__global__ void grad_scale_kernel(size_t count, float *g, float beta)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count;
         i += (size_t)gridDim.x * blockDim.x)
        g[i] = beta == 0.0f ? 0.0f : beta * g[i];
}

// The GEMM's epilogue: y[i, j] = y[i, j] + b[j] over y[n, out] (b NULL: no
// bias); relu: relu(that), as relu_fwd_k (NaN passes).  I: the index type.
template <class I>
__global__ void bias_act_kernel(I count, int out, const float *b, float *y, int relu)
{
    DDP_GRID_STRIDE(I, i, count)
    {
        float v = b ? y[i] + b[(int)(i % (I)out)] : y[i];
        y[i] = relu && v < 0.0f ? 0.0f : v;
    }
}

// The same into a bf16 output: y16[i] = bf16(relu(y[i] + b[j])).
template <class I>
__global__ void bias_act_bf16_kernel(I count, int out, const float *b, const float *y,
                                     uint16_t *y16, int relu)
{
    DDP_GRID_STRIDE(I, i, count)
    {
        float v = b ? y[i] + b[(int)(i % (I)out)] : y[i];
        y16[i] = ddp_f32_to_bf16(relu && v < 0.0f ? 0.0f : v);
    }
}

// The pass over a dense layer's output gradient dy[n, out] before its
// GEMMs, in one of nine modes: kPassMask*: each element zeroed where relu_y
// is <= 0 (a fused ReLU: relu_bwd_k's mask, from its output); db
// (non-NULL) = beta db + the column sums of that; where the GEMMs' operand
// goes: *None: nowhere (they read dy), *F32: the masked values into g32,
// *Bf16: rounded into g16, as ddp_bf16_convert_.  A block takes kBiasCols columns at a time with
// kBiasLanes lanes of rows: lane r sums rows r, r + kBiasLanes, ... in
// order (each warp reads kBiasCols consecutive floats of one row), then the
// lanes are added in a fixed tree: deterministic, and the same sums however
// the operand is written.
// kPassMask16*: relu_y is a layer output kept in bf16 (bf16.h,
// ddp_bf16_act_*), the mask that of its bf16 values.
constexpr int kBiasCols = 32, kBiasLanes = 32;
enum DyPass {
    kPassNone,
    kPassF32,
    kPassBf16,
    kPassMaskNone,
    kPassMaskF32,
    kPassMaskBf16,
    kPassMask16None,
    kPassMask16F32,
    kPassMask16Bf16
};

template <int MODE>
__global__ void dy_pass_kernel(int n, int out, const float *dy, const void *relu_y, float *db,
                               float beta, float *g32, uint16_t *g16)
{
    constexpr bool MASK = MODE >= kPassMaskNone, MASK16 = MODE >= kPassMask16None;
    constexpr int G = MODE % 3; // kPassNone, kPassF32 or kPassBf16
    __shared__ float part[kBiasLanes][kBiasCols + 1]; // +1: no bank conflicts
    const int c = threadIdx.x, lane = threadIdx.y;
    // the loop bound is the same for every thread of the block (barriers)
    for (size_t j0 = (size_t)blockIdx.x * kBiasCols; j0 < (size_t)out;
         j0 += (size_t)gridDim.x * kBiasCols) {
        const size_t j = j0 + c;
        float acc = 0.0f;
        if (j < (size_t)out)
            for (int i = lane; i < n; i += kBiasLanes) {
                const size_t k = (size_t)i * out + j;
                float v = dy[k];
                if (MASK && !ddp_relu_keep(MASK16 ? ddp_bf16_to_f32(((const uint16_t *)relu_y)[k])
                                              : ((const float *)relu_y)[k]))
                    v = 0.0f;
                acc += v;
                if (G == kPassF32) g32[k] = v;
                if (G == kPassBf16) g16[k] = ddp_f32_to_bf16(v);
            }
        if (!db) continue; // the same for the whole block
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

// db[j] = beta db[j] + the sum over b < blocks of cols[b * out + j], in b
// order: the bias gradient from the loss's column sums (ddp_bf16_dy).
__global__ void cols_sum_kernel(int blocks, int out, const float *cols, float *db, float beta)
{
    DDP_GRID_STRIDE(int, j, out)
    {
        float s = 0.0f;
        for (int b = 0; b < blocks; b++) s += cols[(size_t)b * out + j];
        db[j] = (beta == 0.0f ? 0.0f : beta * db[j]) + s;
    }
}

// dy_pass_kernel on the compute stream: relu_y masks (NULL: no ReLU; a
// bf16 layer output, bf16.h: the mask of its bf16 values), db takes the
// bias gradient (NULL: none), the operand goes to g32 or g16 (both NULL:
// nowhere).
int dy_pass(int n, int out, const float *dy, const float *relu_y, float *db, float beta,
            float *g32, uint16_t *g16)
{
    if (n <= 0 || out <= 0 || (!db && !g32 && !g16)) return 0;
    cudaStream_t s = ddp_cuda_state_.stream;
    size_t tiles = ((size_t)out + kBiasCols - 1) / kBiasCols;
    unsigned blocks = (unsigned)(tiles < 65535 ? tiles : 65535);
    const uint16_t *mask16 = ddp_bf16_act_at_(relu_y);
    double count = (double)n * out, dbb = db ? 4.0 * out : 0;
    double rd = 4.0 * count + (relu_y ? (mask16 ? 2.0 : 4.0) * count : 0) +
                (beta != 0.0f ? dbb : 0);
    DDP_COST(rd, dbb + (g32 ? 4.0 : g16 ? 2.0 : 0) * count, count);
    const dim3 tile(kBiasCols, kBiasLanes);
#define DY_PASS_(mode) DDP_LAUNCH(dy_pass_kernel<mode>, blocks, tile, s, n, out, dy, relu_y, db, \
                                  beta, g32, g16)
    if (mask16) {
        if (g32) DY_PASS_(kPassMask16F32);
        else if (g16) DY_PASS_(kPassMask16Bf16);
        else DY_PASS_(kPassMask16None);
    } else if (relu_y) {
        if (g32) DY_PASS_(kPassMaskF32);
        else if (g16) DY_PASS_(kPassMaskBf16);
        else DY_PASS_(kPassMaskNone);
    } else {
        if (g32) DY_PASS_(kPassF32);
        else if (g16) DY_PASS_(kPassBf16);
        else DY_PASS_(kPassNone);
    }
#undef DY_PASS_
    DDP_CU_LAUNCHED();
    return 0;
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

// ---- the fused forward: cuBLASLt, the bias and the ReLU in its epilogue ----

namespace
{

// One shape's descriptors and algorithm (found once, kept): the key, then
// whether cuBLASLt has an algorithm for it.
struct LtPlan {
    int n, in, out, x16, y16, epi, align;
    bool ok;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulAlgo_t algo;
};
constexpr int kLtPlans = 64;
LtPlan g_lt[kLtPlans];
int g_lt_count = 0, g_lt_next = 0; // kept plans; the next one replaced when full

// Destroys p's descriptors (the key stays; ok false).
void lt_free_(LtPlan &p)
{
    if (p.d) cublasLtMatrixLayoutDestroy(p.d);
    if (p.b) cublasLtMatrixLayoutDestroy(p.b);
    if (p.a) cublasLtMatrixLayoutDestroy(p.a);
    if (p.desc) cublasLtMatmulDescDestroy(p.desc);
    p.desc = nullptr, p.a = p.b = p.d = nullptr;
    p.ok = false;
}

// The least alignment of the operands' addresses, up to 256 bytes.
int lt_align_(const void *x, const void *w, const void *y)
{
    uintptr_t bits = (uintptr_t)x | (uintptr_t)w | (uintptr_t)y | 256;
    return (int)(bits & (~bits + 1));
}

// The plan for p's key: descriptors, the operands' alignment promised to
// the heuristic, and its first algorithm; p.ok false when there is none.
void lt_plan_(LtPlan &p)
{
    const cudaDataType ti = p.x16 ? CUDA_R_16BF : CUDA_R_32F, to = p.y16 ? CUDA_R_16BF : CUDA_R_32F;
    const int32_t opt = CUBLAS_OP_T, opn = CUBLAS_OP_N, bias_t = CUDA_R_32F;
    const uint32_t epi = (uint32_t)p.epi, align = (uint32_t)p.align;
    const uint64_t ws = 0; // no workspace: none to plan for, and these GEMMs need no split-K
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulHeuristicResult_t r;
    int found = 0;
    // column-major: D [out, n] = op(A) B with A = w as [in, out] (op T) and B = x as [in, n]
    bool ok = cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == 0 &&
              cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opt,
                                             sizeof opt) == 0 &&
              cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opn,
                                             sizeof opn) == 0 &&
              cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi,
                                             sizeof epi) == 0 &&
              ((epi & CUBLASLT_EPILOGUE_BIAS) == 0 ||
               cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_t,
                                              sizeof bias_t) == 0) &&
              cublasLtMatrixLayoutCreate(&p.a, ti, (uint64_t)p.in, (uint64_t)p.out, p.in) == 0 &&
              cublasLtMatrixLayoutCreate(&p.b, ti, (uint64_t)p.in, (uint64_t)p.n, p.in) == 0 &&
              cublasLtMatrixLayoutCreate(&p.d, to, (uint64_t)p.out, (uint64_t)p.n, p.out) == 0 &&
              cublasLtMatmulPreferenceCreate(&pref) == 0 &&
              cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &ws, sizeof ws) == 0;
    for (int i = 0; ok && i < 4; i++)
        ok = cublasLtMatmulPreferenceSetAttribute(
                 pref,
                 (cublasLtMatmulPreferenceAttributes_t)(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES +
                                                        i),
                 &align, sizeof align) == 0;
    ok = ok &&
         cublasLtMatmulAlgoGetHeuristic(ddp_cuda_state_.lt, p.desc, p.a, p.b, p.d, p.d, pref, 1, &r,
                                        &found) == 0 &&
         found > 0 && r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize == 0;
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (ok) {
        p.algo = r.algo;
        p.ok = true;
    } else {
        lt_free_(p); // the key kept, so that the shape is not tried again
    }
}

} // namespace

int ddp_lt_linear_(int n, int in, int out, const void *x, const void *w, int x16, const float *b,
                   int relu, void *y, int y16)
{
    // TF32 GEMMs stay with cuBLAS's handle (its math mode)
    if (!ddp_cuda_state_.lt || ddp_cuda_state_.tf32 || n <= 0 || in <= 0 || out <= 0 ||
        (b && (uintptr_t)b % 16))
        return 0;
    const int epi = b ? (relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS)
                      : (relu ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT);
    const LtPlan key = {n, in, out, x16 != 0, y16 != 0, epi, lt_align_(x, w, y), false,
                        nullptr, nullptr, nullptr, nullptr, {}};
    LtPlan *p = nullptr;
    for (int i = 0; i < g_lt_count && !p; i++) {
        const LtPlan &q = g_lt[i];
        if (q.n == key.n && q.in == key.in && q.out == key.out && q.x16 == key.x16 &&
            q.y16 == key.y16 && q.epi == key.epi && q.align == key.align)
            p = &g_lt[i];
    }
    if (!p) {
        int at = g_lt_count < kLtPlans ? g_lt_count++ : g_lt_next++ % kLtPlans;
        p = &g_lt[at];
        lt_free_(*p);
        *p = key;
        lt_plan_(*p);
    }
    if (!p->ok) return 0;
    if (b && cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b,
                                            sizeof b) != CUBLAS_STATUS_SUCCESS)
        return 0;
    const double es = x16 ? 2.0 : 4.0, count = (double)n * out;
    const double flops = 2.0 * n * (double)in * out;
    DDP_COST(es * ((double)n * in + (double)out * in) + (b ? 4.0 * out : 0),
             (y16 ? 2.0 : 4.0) * count, flops);
    ddp_cost_gemm_("cublasLtMatmul", x16 ? DDP_MATH_BF16 : DDP_MATH_FP32, out, n, in);
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t st =
        cublasLtMatmul(ddp_cuda_state_.lt, p->desc, &one, w, p->a, x, p->b, &zero, y, p->d, y,
                       p->d, &p->algo, nullptr, 0, ddp_cuda_state_.stream);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
        p->ok = false; // refused at the call: this shape runs apart from now on
        return 0;
    }
    if (st != CUBLAS_STATUS_SUCCESS)
        return ddp_cuda_fail_("cublasLtMatmul", __FILE__, __LINE__, cublasGetStatusString(st));
    return 1;
}

void ddp_lt_release_(void)
{
    for (int i = 0; i < g_lt_count; i++) lt_free_(g_lt[i]);
    g_lt_count = g_lt_next = 0;
}

extern "C" void ddp_cuda_lt_forget(void)
{
    ddp_lt_release_();
}

extern "C" int ddp_cuda_lt_loaded(void)
{
    return ddp_cuda_state_.lt != nullptr;
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

// y[n,out] = x[n,in] w[out,in]^T + b[out]; relu: relu(y).  One cuBLASLt
// matmul with the bias and the ReLU in its epilogue where it can
// (ddp_lt_linear_); else the GEMM writes y, then one pass adds the bias and
// applies the ReLU: the same bits, the product and the bias rounded once,
// as when cuBLAS adds a bias put in C first.
int ddp_cuda_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b,
                        float *y, int relu)
{
    if (n <= 0 || out <= 0) return 0;
    cudaStream_t s = ddp_cuda_state_.stream;
    size_t count = (size_t)n * out;
    // y kept in bf16 (bf16.h): the fp32 result rounded once into it
    uint16_t *y16 = (uint16_t *)ddp_bf16_act_at_(y);
    float *y32 = y;
    if (in <= 0) {
        if (y16) {
            y32 = (float *)ddp_bf16_scratch_(DDP_BF16_EPILOGUE, count * sizeof(float));
            if (!y32) return -1;
        }
        DDP_CU(cudaMemsetAsync(y32, 0, count * sizeof *y32, s));
    } else {
        // bf16: the weight and the input rounded into the memo, for the
        // backward too (an input kept in bf16 is its own copy)
        const void *xq = x, *wq = w;
        const int q16 = ddp_cuda_state_.bf16_gemm;
        if (q16) {
            const uint16_t *w16, *x16, *xa = ddp_bf16_act_at_(x);
            if (ddp_bf16_memo_put_(w, (size_t)out * in, xa ? nullptr : x, (size_t)n * in, &w16,
                                   &x16) != 0)
                return -1;
            xq = xa ? xa : x16, wq = w16;
        }
        int fused = ddp_lt_linear_(n, in, out, xq, wq, q16, b, relu, y, y16 != nullptr);
        if (fused) return fused < 0 ? -1 : 0;
        if (y16) {
            y32 = (float *)ddp_bf16_scratch_(DDP_BF16_EPILOGUE, count * sizeof(float));
            if (!y32) return -1;
        }
        if (ddp_cuda_gemm_rm16_(0, 1, n, out, in, 1.0f, xq, q16, in, wq, q16, in, 0.0f, y32, out) !=
            0)
            return -1;
    }
    if (y16) {
        DDP_COST(4.0 * count + (b ? 4.0 * out : 0), 2.0 * count, (double)count);
        DDP_LAUNCH_IDX(bias_act_bf16_kernel, count, ddp_blocks_for(count), kDdpThreads, s, count,
                       out, b, y32, y16, relu);
        DDP_CU_LAUNCHED();
        return 0;
    }
    if (!b && !relu) return 0;
    DDP_COST(4.0 * count + (b ? 4.0 * out : 0), 4.0 * count, (double)count);
    DDP_LAUNCH_IDX(bias_act_kernel, count, ddp_blocks_for(count), kDdpThreads, s, count, out, b, y,
                   relu);
    DDP_CU_LAUNCHED();
    return 0;
}

size_t ddp_cuda_linear_ws_bytes(int n, int out)
{
    if (n <= 0 || out <= 0 || ddp_cuda_state_.bf16_gemm) return 0;
    return (size_t)n * out * sizeof(float);
}

// dw = beta dw + dy^T x ; db = beta db + sum_n dy ; dx = dy w, of dy masked
// where relu_y <= 0 (a fused ReLU; NULL: none).  One pass over dy first
// (dy_pass): the bias gradient, and the GEMMs' operand where it is not dy
// itself (masked into ws, or under bf16 masked and rounded into the
// scratch of bf16.h).
int ddp_cuda_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy,
                        float *dx, float *dw, float *db, float beta, const float *relu_y,
                        void *ws)
{
    cudaStream_t s = ddp_cuda_state_.stream;
    if (n <= 0 || in <= 0 || (!dw && !dx)) {
        if (dw && in > 0 && out > 0 && ddp_cuda_grad_scale_((size_t)out * in, dw, beta) != 0)
            return -1;
        if (db && out > 0) { // in == 0: the bias still has a gradient
            if (n > 0) return dy_pass(n, out, dy, relu_y, db, beta, nullptr, nullptr);
            return ddp_cuda_grad_scale_((size_t)out, db, beta);
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
    ddp_bf16_dy kept;
    if (ddp_cuda_state_.bf16_gemm) {
        const uint16_t *xm, *wm, *xa = ddp_bf16_act_at_(x); // x kept in bf16: its own copy
        ddp_bf16_memo_get_(w, (size_t)out * in, xa ? nullptr : x, (size_t)n * in, &wm, &xm);
        if (xa) xm = xa;
        if (xm) xq = xm, x16 = 1;
        if (wm) wq = wm, w16 = 1;
        if (ddp_bf16_dy_take_(dy, n, out, &kept)) {
            // the loss wrote dy in bf16 and its column sums (ddp_cuda_xent_dense)
            if (relu_y)
                return ddp_cuda_fail_("ddp_cuda_linear_bwd", __FILE__, __LINE__,
                                      "the loss's bf16 gradient reached a layer with a ReLU");
            if (db) {
                DDP_COST(4.0 * kept.blocks * out + (beta != 0.0f ? 4.0 * out : 0), 4.0 * out,
                         (double)kept.blocks * out);
                DDP_LAUNCH(cols_sum_kernel, ddp_blocks_for((size_t)out), kDdpThreads,
                           ddp_cuda_state_.stream, kept.blocks, out, kept.cols, db, beta);
                DDP_CU_LAUNCHED();
            }
            dyq = kept.d16, dy16 = 1;
        } else {
            uint16_t *h = (uint16_t *)ddp_bf16_scratch_(DDP_BF16_DY, (size_t)n * out * 2);
            if (!h || dy_pass(n, out, dy, relu_y, db, beta, nullptr, h) != 0) return -1;
            dyq = h, dy16 = 1;
        }
    } else if (relu_y) {
        if (!ws)
            return ddp_cuda_fail_("ddp_cuda_linear_bwd", __FILE__, __LINE__,
                                  "a fused ReLU's backward without its workspace (the layer "
                                  "was planned under --precision bf16)");
        if (dy_pass(n, out, dy, relu_y, db, beta, (float *)ws, nullptr) != 0) return -1;
        dyq = ws;
    } else if (db && dy_pass(n, out, dy, nullptr, db, beta, nullptr, nullptr) != 0) {
        return -1;
    }
    if (dw && ddp_cuda_gemm_rm16_(1, 0, out, in, n, 1.0f, dyq, dy16, out, xq, x16, in, beta, dw,
                                  in) != 0)
        return -1;
    if (dx && ddp_cuda_gemm_rm16_(0, 0, n, in, out, 1.0f, dyq, dy16, out, wq, w16, in, 0.0f, dx,
                                  in) != 0)
        return -1;
    return 0;
}

} // extern "C"
