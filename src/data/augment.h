/* augment.h -- image augmentation for the loader: random horizontal flip and
 * random crop after zero padding (`--augment hflip,crop:P`).
 *
 * Augmentation works on raw values (before normalisation), so padded pixels
 * are raw 0, normalised like any other pixel.  The random choices of a
 * sample are a pure function of (seed, epoch, global sample index) through
 * Philox (DDP_STREAM_AUGMENT): the same on every rank and world size.
 * Order: crop, then flip (torchvision's RandomCrop, RandomHorizontalFlip).
 */
#ifndef DDP_AUGMENT_H
#define DDP_AUGMENT_H

#include <stdint.h>

#include "shape.h"
#include "status.h"

typedef struct augment {
    int hflip; /* random horizontal flip with probability 1/2 */
    int crop;  /* padding P of the random crop; 0 = no crop */
} augment_t;

/* Parse "hflip,crop:4" ("" or "none": nothing) and check it fits the sample
 * shape (images only; P < min(h, w)).  DDP_ERR_USAGE naming --augment. */
ddp_status_t augment_parse(const char *spec, act_shape_t shape, augment_t *a);
/* The same check without keeping the result. */
ddp_status_t augment_check(const char *spec, act_shape_t shape);
static inline int augment_active(const augment_t *a)
{
    return a->hflip || a->crop > 0;
}

/* Augment one raw sample x [c, h, w] in place; tmp holds c*h*w floats. */
void augment_sample(const augment_t *a, act_shape_t shape, uint64_t seed, int64_t epoch,
                    int64_t sample, float *x, float *tmp);

#endif
