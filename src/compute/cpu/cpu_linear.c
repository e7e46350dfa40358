/* cpu_linear.c -- dense layers of the CPU backend (linear_fwd/bwd, as
 * cuda/linear.cu): y = x w^T + b and its gradients, each GEMM one
 * row-major cblas_sgemm, the bias and its gradient in vectorised spans. */
#include <cblas.h>
#include <string.h>

#include "cpu_kernels.h"

/* y[n,out] = x[n,in] w[out,in]^T + b[out]; relu: then relu(y) in place */
void cpu_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b,
                    float *y, int relu)
{
    if (n <= 0 || out <= 0) return;
    /* the bias goes in first so the GEMM adds onto it (one pass over y) */
    if (b)
        for (int i = 0; i < n; i++) memcpy(y + (size_t)i * out, b, (size_t)out * sizeof *y);
    if (in <= 0) {
        if (!b) memset(y, 0, (size_t)n * out * sizeof *y);
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, out, in, 1.0f, x, in, w, in,
                    b ? 1.0f : 0.0f, y, out);
    }
    if (relu) cpu_relu_fwd((size_t)n * out, y, y);
}

size_t cpu_linear_ws_bytes(int n, int out)
{
    return n > 0 && out > 0 ? (size_t)n * out * sizeof(float) : 0;
}

/* dw = beta dw + dy^T x ; db = beta db + sum_n dy ; dx = dy w; relu_y: of
 * dy masked into ws first (relu_bwd on the ReLU's output) */
void cpu_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy,
                    float *dx, float *dw, float *db, float beta, const float *relu_y, void *ws)
{
    if (relu_y && n > 0 && out > 0) {
        cpu_relu_bwd((size_t)n * out, relu_y, dy, ws, NULL);
        dy = ws;
    }
    if (n <= 0 || in <= 0) {
        if (dw && in > 0) grad_scale_((size_t)out * in, dw, beta);
        if (db && out > 0) grad_scale_((size_t)out, db, beta);
        if (db && out > 0 && n > 0) /* in == 0: the bias still has a gradient */
            for (int i = 0; i < n; i++) span_add_((size_t)out, dy + (size_t)i * out, db);
        return;
    }
    if (out <= 0) {
        if (dx) memset(dx, 0, (size_t)n * in * sizeof *dx);
        return;
    }
    if (dw)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, n, 1.0f, dy, out, x, in, beta,
                    dw, in);
    if (db) {
        /* column sum of dy, row by row (unit stride, vectorised) */
        grad_scale_((size_t)out, db, beta);
        for (int i = 0; i < n; i++) span_add_((size_t)out, dy + (size_t)i * out, db);
    }
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, in, out, 1.0f, dy, out, w, in,
                    0.0f, dx, in);
}
