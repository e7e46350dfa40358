/* ckpt_verify.h -- what makes a checkpoint believed on --resume: a required
 * checksum over its metadata, ranges for every number it holds, and finite
 * optimizer state.
 *
 * The metadata checksum (root attribute CKPT_META_CHECKSUM_ATTR, 16 hex
 * digits) is FNV-1a (hash_bytes, hash.h) over, in this order:
 *   - every root attribute but itself, in byte order of their names: the
 *     name and a NUL, a tag byte ('s' string, 'i' integer, 'f' float, 'o'
 *     anything else), the value's length as 8 bytes little-endian, then the
 *     value: a string's bytes (no trailing NUL), integers as int64 and
 *     floats as double, little-endian, element by element; for 'o' its
 *     HDF5 type class and element size as two int64 (not its bytes);
 *   - every group, in byte order of their full names without the leading
 *     '/' ("model", "optimizer"): the name and a NUL, then its attributes
 *     as above (the /optimizer type and step are covered);
 *   - every dataset of the file, in byte order of their full names without
 *     the leading '/' ("model/layers.0.weight"): the name, a NUL, its
 *     checksum attribute (weights.h) and a NUL.
 * Attributes added to a checkpoint later are covered without a change here.
 * tests/e2e/test_ckpt_trust.sh recomputes it in Python. */
#ifndef DDP_CKPT_VERIFY_H
#define DDP_CKPT_VERIFY_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"

#define CKPT_META_CHECKSUM_ATTR "meta_checksum"

/* Write the metadata checksum of f (after everything else is written). */
ddp_status_t ckpt_verify_sign(hid_t f);
/* The metadata checksum of the checkpoint at path: present and right, and
 * every dataset has its checksum; else DDP_ERR_INPUT naming what. */
ddp_status_t ckpt_verify_meta(hid_t f, const char *path);

/* v in [lo, hi], else DDP_ERR_INPUT: "checkpoint PATH: attribute NAME is V,
 * outside [LO, HI] (WHY); ..." */
ddp_status_t ckpt_verify_range(const char *path, const char *name, int64_t v, int64_t lo,
                               int64_t hi, const char *why);
/* The numbers a checkpoint holds (as read), and what bounds them. */
typedef struct ckpt_numbers {
    int64_t step, epoch, sample_in_epoch; /* the position */
    int64_t world_size, batch, accum;     /* at save */
    int64_t local_bn_ranks;               /* 0 or world_size */
    int64_t data_samples;                 /* training samples of the data at save */
} ckpt_numbers_t;
/* Each number in its range (the /optimizer step is checked where it is
 * read, with ckpt_verify_range): DDP_ERR_INPUT naming the attribute, its value
 * and the range allowed. */
ddp_status_t ckpt_verify_numbers(const ckpt_numbers_t *n, const char *path);

/* n values of dataset `name` finite (and >= 0 when nonnegative: a second
 * moment); else DDP_ERR_INPUT naming the dataset and the element. */
ddp_status_t ckpt_verify_finite(const float *v, size_t n, int nonnegative, const char *name,
                                const char *path);

#endif
