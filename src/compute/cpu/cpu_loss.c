/* cpu_loss.c -- the losses of the CPU backend (as cuda/loss.cu): softmax
 * cross-entropy with label smoothing (row by row, ddp_xent_row of
 * backend_math.h, shared with the GPU) and mean squared error, each adding
 * its sums to acc and writing the scaled gradient. */
#include <stddef.h>
#include <stdint.h>

#include "backend_math.h"
#include "cpu_kernels.h"

/* Per row (ddp_xent_row, backend_math.h, shared with cuda/loss.cu): max
 * and the first argmax, then sum exp(z - max) and log in double; loss =
 * lse - (1-eps) z_y - eps mean_j z_j (equal to the PyTorch form, agreeing
 * with it to float rounding of the logits, ~1e-6 relative).  dlogits =
 * grad_scale (softmax - (1-eps) onehot - eps/C); it may alias logits.
 * Labels outside [0, classes) contribute nothing. */
void cpu_xent(int n, int classes, const float *logits, const int32_t *labels, float smoothing,
              float grad_scale, float *dlogits, double *acc)
{
    if (n <= 0 || classes <= 0) return;
    const double eps = smoothing;
    double loss = 0, hits = 0;
    for (int i = 0; i < n; i++) {
        const float *z = logits + (size_t)i * classes;
        float *dl = dlogits ? dlogits + (size_t)i * classes : NULL;
        ddp_xent_row(classes, z, labels[i], eps, grad_scale, dl, &loss, &hits);
    }
    acc[0] += loss;
    acc[1] += hits;
}

void cpu_mse(int n, int k, const float *pred, const float *target, float grad_scale, float *dpred,
             double *acc)
{
    if (n <= 0 || k <= 0) return;
    const size_t count = (size_t)n * k;
    const float two = 2.0f * grad_scale;
    double s[VB] = {0}, tail = 0;
    size_t i = 0;
    for (; i + VB <= count; i += VB) {
        float t[VB];
        for (int q = 0; q < VB; q++) {
            t[q] = pred[i + q] - target[i + q];
            s[q] += (double)t[q] * t[q];
        }
        if (dpred)
            for (int q = 0; q < VB; q++) dpred[i + q] = two * t[q];
    }
    for (; i < count; i++) {
        float t = pred[i] - target[i];
        tail += (double)t * t;
        if (dpred) dpred[i] = two * t;
    }
    for (int q = 0; q < VB; q++) tail += s[q];
    acc[0] += tail;
}
