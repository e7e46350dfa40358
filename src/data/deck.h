/* deck.h -- input decks: one or several HDF5 files holding /train and /val.
 *
 * Format (docs/input.md): /<split>/x [N, ...] uint8 or float32,
 * chunked along dimension 0; /<split>/y [N] integer labels or [N, k] float32
 * targets; optional attributes on /<split>/x: mean, std (per channel or per
 * feature), scale (uint8 only; default 1/255); optional group /config whose
 * attributes are run options.  Several files are shards of one dataset,
 * concatenated in the order given.
 *
 * Values the model sees: x = (raw * scale - mean[ch]) / std[ch].
 * All HDF5 calls are made under h5util's global lock.
 *
 * Rooms: deck_open.c opens and validates (and reads /config), deck_read.c
 * reads batches (the direct pread path included), deck_check.c scans and
 * checks (labels, finite values, sizes), deck_fingerprint.c fingerprints;
 * deck_internal.h is what they share beyond this header.
 *
 * Details:
 *   - x ranks: [N, F] features (shape c = F, h = w = 1, image = 0);
 *     [N, H, W] grayscale images (c = 1); [N, C, H, W] images.
 *   - y: [N] of any HDF5 integer type = class labels; [N, k] (or [N]) float
 *     = regression targets.  Labels are scanned once at open (bounded
 *     memory; a progress line after 3 s): negative labels, or labels >= the
 *     `classes` attribute, are input errors; `classes` must be an integer;
 *     the scan counts distinct labels (deck_classes_warning).
 *   - Sizes: a dataset declaring far more than its file stores (over 64 MiB
 *     never written and under half stored) is refused at open, before any
 *     allocation or scan by the declared size; so is a sample too large for
 *     the memory left (DDP_ERR_NOMEM).
 *   - mean/std: 1 value, one per channel (images) or one per element of a
 *     sample.  For the val split they come from /val/x, else from /train/x
 *     (so validation data is normalised like the training data).
 *   - Shards: every file must hold /train; /val may be in any subset of the
 *     files (ddptrain-prep split puts it in the first shard only), files
 *     without it are skipped when opening "val".  Attributes come from the
 *     first file holding the split; mean, std and scale must be the same in
 *     every shard.  A file given twice (same device and inode) is refused.
 *   - A deck_t is used by one thread at a time (it owns scratch buffers);
 *     open a second deck_t for another thread (e.g. evaluation).
 *   - Uncompressed data is read with pread at the rows' file addresses
 *     (deck_io_t), outside the HDF5 lock; what HDF5 reads itself it reads
 *     with the chunk cache off for uncompressed chunks, and with a cache of
 *     a few chunks for compressed ones (random access then costs a whole
 *     chunk per sample: prefer uncompressed decks, as ddptrain-prep writes).
 */
#ifndef DDP_DECK_H
#define DDP_DECK_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "shape.h"
#include "status.h"

typedef enum deck_dtype { DECK_U8, DECK_F32 } deck_dtype_t;

typedef struct deck_shard {
    char *path;
    hid_t file, x, y; /* open handles */
    int64_t n;        /* samples in this shard */
    int64_t first;    /* global index of its first sample */

    /* private (deck_read.c): direct reads at the file addresses of rows */
    int fd;                                  /* own read-only descriptor, -1 if none */
    struct deck_direct *direct_x, *direct_y; /* NULL: read through HDF5 */
    /* private (deck_fingerprint.c): its content fingerprint, once computed */
    struct deck_fp *fp_memo;
} deck_shard_t;

/* How deck_read reads x and y.  HDF5 1.10 maps a read whose memory and
 * file selections differ in shape (a union of hyperslabs into a packed
 * buffer) element by element, about 50 ns per value: 2% of a raw pread for
 * 28x28 images (bench/bench_loader).  So:
 *   DECK_IO_DIRECT: rows of uncompressed data are read with pread() at the
 *     addresses HDF5 reports for their chunks (H5Dget_chunk_info, a table
 *     built at open) or for contiguous data (H5Dget_offset); rows adjacent
 *     in the file are merged into one pread.  Only for files without a user
 *     block, opened with the default (sec2) driver, data stored in the
 *     memory type (uint8 or native float32 x; native int32 labels or float32
 *     targets), chunks of whole samples, at most 4096 chunks (the table
 *     takes O(chunks^2) to build with HDF5 1.10's API; ddptrain-prep keeps
 *     its decks within that).
 *   DECK_IO_RUNS: one H5Dread per run of consecutive samples, memory and
 *     file selections of the same shape (HDF5's fast path); used for
 *     compressed or otherwise ineligible datasets.
 *   DECK_IO_UNION: one H5Dread per shard over the union of the runs
 *     (H5S_SELECT_OR); kept for benchmarks.
 * DECK_IO_AUTO (the default) is DIRECT where a dataset qualifies, else RUNS
 * for x and UNION for y (a few values per sample). */
typedef enum deck_io { DECK_IO_AUTO, DECK_IO_DIRECT, DECK_IO_RUNS, DECK_IO_UNION } deck_io_t;

typedef struct deck {
    char split[8]; /* "train" or "val" */
    int nshards;
    deck_shard_t *shards;
    int64_t n;         /* samples over all shards */
    act_shape_t shape; /* per-sample shape as the model sees it */
    size_t sample_numel;
    deck_dtype_t dtype;
    int regression;    /* 0: integer labels in y [N]; 1: float targets y [N, k] */
    int targets;       /* k for regression */
    int classes;       /* labels: attribute `classes` of y, else max label + 1 */
    float scale;       /* uint8 scale (1 for float32 data) */
    float *mean, *std; /* per channel (images) or per feature; NULL = 0 / 1 */
    int nstat;         /* entries in mean/std (1, channels or features) */

    /* private (deck_open.c, deck_read.c, deck_check.c) */
    int64_t label_min, label_max; /* over all shards (labels only) */
    int label_max_shard;          /* the shard holding label_max */
    int64_t label_max_row;        /* its row in that shard */
    int64_t label_distinct;       /* distinct labels seen (exact below 2^24) */
    int classes_inferred;         /* 1: no attribute `classes`, max label + 1 */
    int xrank;                    /* rank of the x datasets (2, 3 or 4) */
    int yrank;                    /* rank of the y datasets (1 or 2) */
    size_t sample_bytes;          /* raw bytes of one sample of x */
    float *norm_a, *norm_b;       /* per element: value = raw * a + b */
    size_t norm_run;              /* a, b constant over runs of this many elements
                                   * (whole sample or channel); 0: per element */
    void *scratch;                /* staging buffers of deck_read */
    size_t scratch_bytes;
    deck_io_t io; /* deck_set_io */
} deck_t;

/* Open and validate /<split>/ in every path; shapes, types and label kinds
 * must agree across shards.  Errors name the file, dataset and problem. */
ddp_status_t deck_open(deck_t *d, char *const *paths, int npaths, const char *split);
/* deck_open's check that the file holds what dataset `name` of the open
 * file f (of path) declares: a header of 10^12 rows over a few KiB of
 * storage is DDP_ERR_INPUT naming the file, the dataset and its declared
 * shape, before anything reads or allocates by that size (for the tools
 * that read datasets themselves: ddptrain-prep info and split). */
ddp_status_t deck_check_stored(const char *path, hid_t f, const char *name);
void deck_close(deck_t *d);

/* Does the first file hold /<split>/x? (used for the optional /val split) */
int deck_has_split(const char *path, const char *split);
/* Does any of the files hold /<split>/x?  (With shards, /val may be in any
 * of them; ddptrain-prep split puts it in the first.) */
int deck_has_split_any(char *const *paths, int npaths, const char *split);

/* Apply the attributes of the group /config of `path` to cfg (SRC_INPUT). */
ddp_status_t deck_load_config(const char *path, ddp_config_t *cfg);

/* Read the samples with global indices idx[0..n) (any order, duplicates
 * allowed) into x [n, sample_numel] (normalised float) and labels [n] or
 * targets [n, k] (either may be NULL).  Reads are coalesced: the indices
 * are sorted (keeping the inverse permutation), duplicates read once,
 * consecutive samples merged into runs, then scattered into batch order
 * while converting and normalising; see deck_io_t for how x is read.  A
 * failed read is DDP_ERR_INPUT naming the file, dataset and sample range. */
ddp_status_t deck_read(deck_t *d, const int64_t *idx, int n, float *x, int32_t *labels,
                       float *targets);

/* As deck_read, but x receives raw values as float (uint8 0..255, float32
 * as stored: no scale, no mean/std), for augmentation that must happen
 * before normalisation (deck_normalize). */
ddp_status_t deck_read_raw(deck_t *d, const int64_t *idx, int n, float *x, int32_t *labels,
                           float *targets);
/* Choose how x and y are read (default DECK_IO_AUTO; DIRECT falls back as
 * AUTO does).  Returns how many shards read x directly under this choice. */
int deck_set_io(deck_t *d, deck_io_t io);

/* Normalise n raw samples in place: x = x * scale/std + (-mean/std). */
void deck_normalize(const deck_t *d, float *x, int n);

/* Contiguous reads (evaluation): samples [first, first + n) in order.  Read
 * a rank's range in pieces of at most a batch (scratch grows with n). */
ddp_status_t deck_read_range(deck_t *d, int64_t first, int n, float *x, int32_t *labels,
                             float *targets);
/* Evaluation partition: rank r of W reads [r*N/W, (r+1)*N/W) (disjoint,
 * covering, unpadded; counts differ by at most one). */
void deck_eval_range(const deck_t *d, int world, int rank, int64_t *first, int64_t *count);

/* Scan every feature (and regression target) for NaN/Inf (--check-data,
 * ddptrain-prep info).  Bounded memory. */
ddp_status_t deck_check_finite(deck_t *d);

/* Scans over every sample (the label scan of deck_open, deck_check_finite)
 * that run longer than `seconds` (default 3) print a progress line on rank
 * 0 (log_info), then one every 10 s.  For tests: 0 prints at once. */
void deck_set_progress_after(double seconds);

/* Start-up checks for the trainer (DDP_ERR_INPUT with file and dataset named):
 * the loss needs integer class labels (not float targets); */
ddp_status_t deck_require_labels(const deck_t *d);
/* the model has `outputs` classes: every label must be < outputs; */
ddp_status_t deck_check_classes(const deck_t *d, int outputs);
/* regression needs float targets of width `outputs`; */
ddp_status_t deck_require_targets(const deck_t *d, int outputs);
/* at least world * batch samples (one full global batch). */
ddp_status_t deck_check_size(const deck_t *d, int world, int batch, int drop_last);

/* A class count inferred from the labels (no attribute `classes`) far
 * above the number of distinct labels (a stray large label builds a huge
 * last layer): writes the warning into buf and returns 1; else 0.  The
 * caller prints it (once, from rank 0). */
int deck_classes_warning(const deck_t *d, char *buf, size_t n);

/* One line describing the deck: "20000 samples of 64 features (float32),
 * 10 classes, 1 file". */
void deck_describe(const deck_t *d, char *buf, size_t n);

/* Content fingerprint (deck_fingerprint.c), for the start-up check that
 * every rank reads the same data under the same path (a stale node-local
 * copy).  Per shard of d, four hashes, so a mismatch can say what differs:
 * the dims, type, layout, chunk dims and filters of x and y; every
 * attribute of x and y; the raw bytes of a fixed sample of rows of x and
 * of y; and the file size.  The sample: DECK_FP_BLOCKS (8) blocks of rows
 * at the same positions on every rank (the first, the last and 6 evenly
 * spaced between), a block being one chunk's rows cut to at most
 * DECK_FP_BLOCK_BYTES (1 MiB; at least one row).  Data outside the sample is not looked at:
 * a difference there goes unseen.  fp has d->nshards entries.  Errors: a
 * sampled chunk that cannot be read (DDP_ERR_INPUT naming the file and
 * dataset), out of memory.  Computed once per open deck: the start-up
 * check and the checkpoints' data fingerprint read the files once. */
typedef enum deck_fp_part {
    DECK_FP_LAYOUT,
    DECK_FP_ATTRS,
    DECK_FP_DATA,
    DECK_FP_SIZE, /* last: the least telling when others differ too */
    DECK_FP_PARTS
} deck_fp_part_t;
typedef struct deck_fp {
    uint64_t part[DECK_FP_PARTS];
} deck_fp_t;
ddp_status_t deck_fingerprint(const deck_t *d, deck_fp_t *fp);
/* What a part covers, for messages ("file size", ...). */
const char *deck_fp_part_name(int part);

#endif
