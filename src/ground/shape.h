/* shape.h -- the per-sample activation shape shared by the data side (deck,
 * augmentation, loader) and the model, with no other dependencies. */
#ifndef DDP_SHAPE_H
#define DDP_SHAPE_H

#include <stddef.h>

/* Per-sample activation shape: images are (c, h, w); feature vectors are
 * (c = features, h = w = 1) with image = 0. */
typedef struct act_shape {
    int c, h, w;
    int image;
} act_shape_t;

static inline size_t act_numel(act_shape_t s)
{
    return (size_t)s.c * s.h * s.w;
}

static inline int act_same(act_shape_t a, act_shape_t b)
{
    return a.c == b.c && a.h == b.h && a.w == b.w && a.image == b.image;
}

#endif
