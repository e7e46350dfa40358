/* test_decks.h -- small input decks written by the data tests: values are a
 * known function of the global sample index, so any reader can be checked
 * against the formula and against a naive one-sample HDF5 read. */
#ifndef DDP_TEST_DECKS_H
#define DDP_TEST_DECKS_H

#include <hdf5.h>
#include <stdint.h>

typedef struct tdeck {
    int64_t n;        /* samples in this file */
    int64_t first;    /* global index of its first sample (shards) */
    int xrank;        /* 2 features, 3 [N,H,W], 4 [N,C,H,W] */
    int c, h, w;      /* features = c for xrank 2 */
    int u8;           /* uint8 x, else float32 */
    int regression;   /* k > 0: float targets [N, k] */
    int classes;      /* labels = gidx % classes */
    int chunk_rows;   /* 0: 7 */
    int deflate;      /* gzip the x chunks */
    int nstat;        /* mean/std attributes: 0 none, 1, c, or per element */
    int classes_attr; /* write y's `classes` attribute */
    hid_t ytype;      /* file type of integer labels (0: H5T_STD_I32LE) */
    int64_t nval;     /* samples in /val (0: none) */
    int val_stats;    /* also write mean/std on /val/x */
} tdeck_t;

/* Write a deck file; returns 0 on success. */
int tdeck_write(const char *path, const tdeck_t *t);
/* Raw value of element e of global sample g (as stored). */
double tdeck_raw(const tdeck_t *t, int64_t g, size_t e);
/* mean/std written for stat slot k (k < nstat). */
float tdeck_mean(int k);
float tdeck_std(int k);
/* A path under the test's temporary directory. */
const char *tdeck_path(const char *name);

#endif
