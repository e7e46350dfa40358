/* loss.c -- the loss of a batch (see loss.h). */
#include "loss.h"

void loss_apply(const loss_t *l, const compute_ops_t *compute, int n, const float *out,
                const int32_t *labels, const float *targets, float label_smoothing, float scale,
                float *dout, double *sums, int dense)
{
    if (l->kind == LOSS_XENT && dense && dout && compute->xent_dense)
        compute->xent_dense(n, l->width, out, labels, label_smoothing, scale, dout, sums);
    else if (l->kind == LOSS_XENT)
        compute->xent(n, l->width, out, labels, label_smoothing, scale, dout, sums);
    else
        compute->mse(n, l->width, out, targets, scale, dout, sums);
}

double loss_values(const loss_t *l, double samples)
{
    return l->kind == LOSS_MSE ? samples * l->width : samples;
}
