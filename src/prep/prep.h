/* prep.h -- ddptrain-prep: the subcommands and their shared pieces
 * (option parsing helpers, chunked row writers, per-channel statistics,
 * validation and the atomic commit of an output deck).
 */
#ifndef DDP_PREP_H
#define DDP_PREP_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>

#include "h5util.h"
#include "pathclash.h"
#include "status.h"

/* Subcommands; argv[0] is the subcommand name.  Usage errors return
 * DDP_ERR_USAGE with one line recorded; `info` returns DDP_ERR_INPUT when
 * the files are not a valid input deck. */
ddp_status_t prep_idx(int argc, char **argv);
ddp_status_t prep_csv(int argc, char **argv);
ddp_status_t prep_synthetic(int argc, char **argv);
ddp_status_t prep_split(int argc, char **argv);
ddp_status_t prep_info(int argc, char **argv);

/* ---- options ---- */

/* "--name value" or "--name=value" at argv[*i]: returns the value (advancing
 * *i past it) or NULL when argv[*i] is not that option.  A missing value is
 * a usage error (*s set). */
const char *prep_opt(int argc, char **argv, int *i, const char *name, ddp_status_t *s);
ddp_status_t prep_int(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out);

/* ---- writing ---- */

/* Rows per chunk for samples of row_bytes: about 128 KiB per chunk (whole
 * samples, never more than n), larger when that would make more than
 * PREP_MAX_CHUNKS chunks (a dataset over 512 MiB): ddptrain reads samples
 * at their file addresses, so big chunks cost it nothing, and it needs the
 * address of every chunk (deck_io_t). */
#define PREP_MAX_CHUNKS 4096
hsize_t prep_chunk_rows(size_t row_bytes, hsize_t n);

/* A dataset [n, ...] written in row blocks, chunked along dimension 0, no
 * compression. */
typedef struct prep_ds {
    hid_t ds;
    hid_t memtype;
    int rank;
    hsize_t dims[4];
    hsize_t rows; /* rows written so far */
    char name[64];
} prep_ds_t;
ddp_status_t prep_ds_create(prep_ds_t *w, hid_t file, const char *name, hid_t file_type,
                            hid_t mem_type, int rank, const hsize_t *dims);
ddp_status_t prep_ds_append(prep_ds_t *w, const void *rows, hsize_t n);
void prep_ds_close(prep_ds_t *w);

/* Per-channel mean and std of sample data: nch channels of per_ch elements
 * each per sample (features: nch = features, per_ch = 1). */
typedef struct prep_stats {
    int nch;
    size_t per_ch;
    double *shift, *sum, *sumsq; /* shifted sums (float data) */
    uint64_t *isum, *isumsq;     /* exact sums (uint8 data) */
    int64_t count;               /* values per channel */
} prep_stats_t;
ddp_status_t prep_stats_init(prep_stats_t *st, int nch, size_t per_ch);
void prep_stats_add_f32(prep_stats_t *st, const float *x, size_t nrows);
void prep_stats_add_u8(prep_stats_t *st, const uint8_t *x, size_t nrows);
/* Write mean and std (and, for uint8 data, scale) on ds; uint8 statistics
 * are in scaled units (raw * scale).  A constant channel gets std 1. */
ddp_status_t prep_stats_write(const prep_stats_t *st, hid_t ds, int u8, double scale);
void prep_stats_free(prep_stats_t *st);

/* Close the output, check it as an input deck (train and, if present, val:
 * shapes, labels, finite values), then rename it into place. */
ddp_status_t prep_finish(h5_atomic_t *a);

#endif
