/* backend_math.h -- the arithmetic that the CPU backend (cpu/cpu_loss.c,
 * cpu_bn.c, cpu_optim.c) and the CUDA kernels (cuda/loss.cu, cuda/bn.cu,
 * cuda/optim.cu) share, one definition each (DDP_HD, hostdev.h), so both
 * backends do the same operations in the same order:
 *   ddp_xent_row        one row of softmax cross-entropy with label smoothing
 *   ddp_xent_loss/_grad its loss and gradient element (cuda/loss.cu's
 *                       row-parallel kernel computes the rest itself)
 *   ddp_bn_finalize_ch  one channel of BatchNorm's statistics finalize
 *   ddp_bn_ab           BatchNorm's forward coefficients y = x a + b
 *   ddp_relu_keep       a ReLU's mask (fused after a BatchNorm: bn_fwd and
 *                       the backward that recomputes its output)
 *   ddp_adamw_consts    AdamW's per-step constants (host code, in double)
 *   ddp_adamw_elem      one element of the AdamW update (float)
 * Inline: they run once per row, channel or element inside the callers'
 * loops, which stay the callers' own (a sequential loop on the CPU, a
 * grid-stride loop on the device). */
#ifndef DDP_BACKEND_MATH_H
#define DDP_BACKEND_MATH_H

#include <math.h>
#include <stdint.h>

#include "hostdev.h"

/* Row z[classes] with label y and smoothing eps: max and the first argmax
 * (ties and NaN as a strict >), the sum of the logits and of exp(z - max)
 * in double, then adds the row's loss lse - (1-eps) z_y - eps mean_j z_j
 * (double) to *loss and its hit (argmax == y) to *hits.  dl (NULL: no
 * gradient; it may alias z, whose row is read before dl is written) gets
 * grad_scale (softmax - (1-eps) onehot(y) - eps/classes).  A label outside
 * [0, classes) adds nothing and zeroes dl.  classes >= 1. */
/* The pieces of ddp_xent_row that cuda/loss.cu's row-parallel kernel
 * shares: the row's loss from its max, sum of exp(z - max), label logit
 * and sum of logits; and one gradient element from e = expf(z_j - max),
 * inv = (float)(1 / sum), off = (float)(eps / classes) (before the label's
 * -(1 - eps) grad_scale). */
DDP_HD double ddp_xent_loss(float zmax, double s, float zy, double zsum, double eps, int classes)
{
    double lse = (double)zmax + log(s);
    return lse - (1.0 - eps) * zy - eps * zsum / classes;
}
DDP_HD float ddp_xent_grad(float e, float inv, float off, float grad_scale)
{
    return (e * inv - off) * grad_scale;
}

DDP_HD void ddp_xent_row(int classes, const float *z, int y, double eps, float grad_scale,
                         float *dl, double *loss, double *hits)
{
    const int valid = y >= 0 && y < classes;
    float zmax = z[0];
    int arg = 0;
    double zsum = 0;
    for (int j = 0; j < classes; j++) {
        if (z[j] > zmax) {
            zmax = z[j];
            arg = j;
        }
        zsum += z[j];
    }
    const float zy = valid ? z[y] : 0.0f;
    double s = 0;
    for (int j = 0; j < classes; j++) {
        float e = expf(z[j] - zmax);
        s += e;
        if (dl) dl[j] = e;
    }
    if (!valid) {
        if (dl)
            for (int j = 0; j < classes; j++) dl[j] = 0.0f;
        return;
    }
    *loss += ddp_xent_loss(zmax, s, zy, zsum, eps, classes);
    *hits += arg == y;
    if (dl) {
        const float inv = (float)(1.0 / s), off = (float)(eps / classes);
        for (int j = 0; j < classes; j++) dl[j] = ddp_xent_grad(dl[j], inv, off, grad_scale);
        dl[y] -= (float)(1.0 - eps) * grad_scale;
    }
}

/* Channel ch of c from stats[ch] = sum x, stats[c + ch] = sum x^2 over
 * count values (double): mean[ch], invstd[ch] = 1/sqrt(var + eps) with the
 * biased variance, and with update_running the running statistics (the
 * unbiased variance, the biased one when count == 1).  count <= 0 (no
 * sample anywhere) gives mean 0, invstd 1/sqrt(eps) and leaves the running
 * statistics alone. */
DDP_HD void ddp_bn_finalize_ch(int ch, int c, const double *stats, double count, float eps,
                               float momentum, int update_running, float *mean, float *invstd,
                               float *running_mean, float *running_var)
{
    double m = 0, var = 0;
    if (count > 0) {
        m = stats[ch] / count;
        var = stats[c + ch] / count - m * m;
        if (var < 0) var = 0; /* rounding */
    }
    mean[ch] = (float)m;
    invstd[ch] = (float)(1.0 / sqrt(var + (double)eps));
    if (update_running && count > 0) {
        double unbiased = count > 1 ? var * count / (count - 1) : var;
        running_mean[ch] =
            (float)((1.0 - momentum) * (double)running_mean[ch] + (double)momentum * m);
        running_var[ch] =
            (float)((1.0 - momentum) * (double)running_var[ch] + (double)momentum * unbiased);
    }
}

/* BatchNorm's forward as both backends compute it: y = x a + b with
 * a = invstd gamma, b = beta_ - mean a (PyTorch's CPU form).  A fused
 * ReLU's backward recomputes y so (the same operations on the same floats:
 * the same bits) rather than reading the forward's output. */
DDP_HD void ddp_bn_ab(float mean, float invstd, float gamma, float beta_, float *a, float *b)
{
    *a = invstd * gamma;
    *b = beta_ - mean * *a;
}

/* Whether a ReLU passes the gradient at y (its input or its output): y > 0;
 * NaN passes too, as relu_bwd (y <= 0 is false). */
DDP_HD int ddp_relu_keep(float y)
{
    return !(y <= 0.0f);
}

/* AdamW's constants of step t (t < 1 taken as 1), PyTorch 1.13: bias
 * corrections bc_i = 1 - beta_i^t in double, decay = 1 - lr wd,
 * step_size = lr / bc1, bc2_sqrt = sqrt(bc2), c_i = 1 - beta_i. */
typedef struct ddp_adamw_consts {
    float decay, step_size, bc2_sqrt, c1, c2;
} ddp_adamw_consts_t;

DDP_HD ddp_adamw_consts_t ddp_adamw_consts(float lr, float beta1, float beta2, float wd, int64_t t)
{
    if (t < 1) t = 1;
    const double bc1 = 1.0 - pow((double)beta1, (double)t);
    const double bc2 = 1.0 - pow((double)beta2, (double)t);
    ddp_adamw_consts_t k;
    k.decay = (float)(1.0 - (double)lr * wd);
    k.step_size = (float)((double)lr / bc1);
    k.bc2_sqrt = (float)sqrt(bc2);
    k.c1 = (float)(1.0 - beta1);
    k.c2 = (float)(1.0 - beta2);
    return k;
}

/* One element, in float: m = b1 m + c1 g; v = b2 v + c2 g^2;
 * p = p decay - step_size (m / (sqrt(v) / bc2_sqrt + eps)).  p, m, v
 * distinct. */
DDP_HD void ddp_adamw_elem(float *p, float *m, float *v, float g, float decay, float b1, float c1,
                           float b2, float c2, float step_size, float bc2_sqrt, float eps)
{
    float mk = b1 * *m + c1 * g;
    float vk = b2 * *v + c2 * (g * g);
    *m = mk;
    *v = vk;
    *p = *p * decay - step_size * (mk / (sqrtf(vk) / bc2_sqrt + eps));
}

#endif
