/* deck.h -- input decks: one or several HDF5 files holding /train and /val.
 *
 * Format (README "Input format"): /<split>/x [N, ...] uint8 or float32,
 * chunked along dimension 0; /<split>/y [N] integer labels or [N, k] float32
 * targets; optional attributes on /<split>/x: mean, std (per channel or per
 * feature), scale (uint8 only; default 1/255); optional group /config whose
 * attributes are run options.  Several files are shards of one dataset,
 * concatenated in the order given.
 *
 * Values the model sees: x = (raw * scale - mean[ch]) / std[ch].
 * All HDF5 calls are made under h5util's global lock.
 */
#ifndef DDP_DECK_H
#define DDP_DECK_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "model.h"
#include "status.h"

typedef enum deck_dtype { DECK_U8, DECK_F32 } deck_dtype_t;

typedef struct deck_shard {
    char *path;
    hid_t file, x, y;   /* open handles */
    int64_t n;          /* samples in this shard */
    int64_t first;      /* global index of its first sample */
} deck_shard_t;

typedef struct deck {
    char split[8];          /* "train" or "val" */
    int nshards;
    deck_shard_t *shards;
    int64_t n;              /* samples over all shards */
    act_shape_t shape;      /* per-sample shape as the model sees it */
    size_t sample_numel;
    deck_dtype_t dtype;
    int regression;         /* 0: integer labels in y [N]; 1: float targets y [N, k] */
    int targets;            /* k for regression */
    int classes;            /* labels: attribute `classes` of y, else max label + 1 */
    float scale;            /* uint8 scale (1 for float32 data) */
    float *mean, *std;      /* per channel (images) or per feature; NULL = 0 / 1 */
    int nstat;              /* entries in mean/std (1, channels or features) */
} deck_t;

/* Open and validate /<split>/ in every path; shapes, types and label kinds
 * must agree across shards.  Errors name the file, dataset and problem. */
ddp_status_t deck_open(deck_t *d, char *const *paths, int npaths, const char *split);
void deck_close(deck_t *d);

/* Does the first file hold /<split>/x? (used for the optional /val split) */
int deck_has_split(const char *path, const char *split);

/* Apply the attributes of the group /config of `path` to cfg (SRC_INPUT). */
ddp_status_t deck_load_config(const char *path, ddp_config_t *cfg);

/* Read the samples with global indices idx[0..n) (any order, duplicates
 * allowed) into x [n, sample_numel] (normalised float) and labels [n] or
 * targets [n, k] (either may be NULL).  Reads are coalesced: one H5Dread per
 * shard with a union of hyperslabs. */
ddp_status_t deck_read(deck_t *d, const int64_t *idx, int n, float *x, int32_t *labels,
                       float *targets);

/* Scan every feature for NaN/Inf (--check-data, ddptrain-prep info). */
ddp_status_t deck_check_finite(deck_t *d);

#endif
