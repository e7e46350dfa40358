/* loss.h -- the loss of a batch on the compute backend, one definition for
 * training and evaluation: softmax cross-entropy (classification, with
 * label smoothing) or mean squared error (regression). */
#ifndef DDP_LOSS_H
#define DDP_LOSS_H

#include <stdint.h>

#include "compute.h"
#include "config.h"

typedef struct loss {
    loss_kind_t kind; /* LOSS_XENT or LOSS_MSE */
    int width;        /* classes (LOSS_XENT) or targets per sample (LOSS_MSE) */
} loss_t;

/* The losses of n outputs [n, width] added to sums[0] and (LOSS_XENT) the
 * argmax hits to sums[1] (device doubles).  Unless dout is NULL (evaluation)
 * dout = scale * d(loss)/d(out), with scale = 1 / loss_values(global samples
 * of the step), so the reduced gradient is the mean over the union batch.
 * labels or targets: device arrays of the batch, by kind. */
/* dense: out is a dense layer's output whose backward reads dout next and
 * nothing else does (model_dout_dense): the backend's xent_dense where it
 * has one. */
void loss_apply(const loss_t *l, const compute_ops_t *compute, int n, const float *out,
                const int32_t *labels, const float *targets, float label_smoothing, float scale,
                float *dout, double *sums, int dense);

/* The values a loss sum over `samples` samples averages over: samples for
 * cross-entropy, samples x targets for MSE (PyTorch's reduction='mean'). */
double loss_values(const loss_t *l, double samples);

#endif
