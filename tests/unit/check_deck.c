/* check_deck.c -- input decks: coalesced reads against a naive one-sample
 * reader (shards, duplicates, uint8/float32, normalisation), evaluation
 * ranges, the val split, every bad input giving DDP_ERR_INPUT with the
 * file and dataset named, and the progress line and distinct-label count of
 * the label scan. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "deck.h"
#include "h5util.h"
#include "log.h"
#include "rng.h"
#include "test_decks.h"
#include "tests.h"

/* ---- a naive reader: one H5Dread per sample, normalised in double ---- */

typedef struct naive {
    char **paths;
    int nfiles;
    int64_t firsts[8], ns[8];
    double scale;
    int nstat, c;
    size_t numel, hw;
} naive_t;

static void naive_read_(const naive_t *nv, int64_t g, float *x, int32_t *label, float *tg, int k)
{
    int f = 0;
    while (g >= nv->firsts[f] + nv->ns[f]) f++;
    hid_t file = H5Fopen(nv->paths[f], H5F_ACC_RDONLY, H5P_DEFAULT);
    ck_assert_int_ge(file, 0);
    hid_t ds = H5Dopen2(file, "/train/x", H5P_DEFAULT);
    hid_t fs = H5Dget_space(ds);
    hsize_t dims[4], start[4] = {(hsize_t)(g - nv->firsts[f]), 0, 0, 0}, cnt[4];
    int r = H5Sget_simple_extent_dims(fs, dims, NULL);
    cnt[0] = 1;
    for (int i = 1; i < r; i++) cnt[i] = dims[i];
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    hid_t ms = H5Screate_simple(r, cnt, NULL);
    double *raw = malloc(nv->numel * sizeof *raw);
    ck_assert_int_ge(H5Dread(ds, H5T_NATIVE_DOUBLE, ms, fs, H5P_DEFAULT, raw), 0);
    for (size_t e = 0; e < nv->numel; e++) {
        int s = nv->nstat <= 1 ? 0 : nv->nstat == (int)nv->numel ? (int)e : (int)(e / nv->hw);
        double m = nv->nstat ? tdeck_mean(s) : 0, sd = nv->nstat ? tdeck_std(s) : 1;
        x[e] = (float)((raw[e] * nv->scale - m) / sd);
    }
    free(raw);
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(ds);
    ds = H5Dopen2(file, "/train/y", H5P_DEFAULT);
    fs = H5Dget_space(ds);
    r = H5Sget_simple_extent_dims(fs, dims, NULL);
    cnt[1] = r > 1 ? dims[1] : 1;
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, cnt, NULL);
    ms = H5Screate_simple(r, cnt, NULL);
    if (tg)
        ck_assert_int_ge(H5Dread(ds, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, tg), 0);
    else
        ck_assert_int_ge(H5Dread(ds, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, label), 0);
    (void)k;
    H5Sclose(ms);
    H5Sclose(fs);
    H5Dclose(ds);
    H5Fclose(file);
}

/* Random index sets (with duplicates, across shards) read both ways, with
 * every way deck_read has of reading (direct, HDF5 runs, HDF5 union). */
static void compare_reads_once_(deck_t *d, const naive_t *nv, uint64_t seed, int rounds);
static void compare_reads_(deck_t *d, const naive_t *nv, uint64_t seed, int rounds)
{
    static const deck_io_t modes[] = {DECK_IO_AUTO, DECK_IO_RUNS, DECK_IO_UNION};
    for (int i = 0; i < 3; i++) {
        deck_set_io(d, modes[i]);
        compare_reads_once_(d, nv, seed, rounds);
    }
    deck_set_io(d, DECK_IO_AUTO);
}

static void compare_reads_once_(deck_t *d, const naive_t *nv, uint64_t seed, int rounds)
{
    size_t numel = d->sample_numel;
    int k = d->regression ? d->targets : 0;
    int maxn = 97;
    int64_t *idx = malloc((size_t)maxn * sizeof *idx);
    float *x = malloc((size_t)maxn * numel * sizeof *x), *ex = malloc(numel * sizeof *ex);
    int32_t *lab = malloc((size_t)maxn * sizeof *lab);
    float *tg = malloc((size_t)maxn * (k ? k : 1) * sizeof *tg), etg[16];
    for (int r = 0; r < rounds; r++) {
        ddp_u32x4_t u = ddp_rand4(seed, (uint64_t)r, 0);
        int n = r == 0 ? (int)(d->n < maxn ? d->n : maxn) : 1 + (int)(u.v[0] % (uint32_t)maxn);
        for (int i = 0; i < n; i++) {
            ddp_u32x4_t v = ddp_rand4(seed, (uint64_t)r, (uint64_t)i + 1);
            if (r == 0)
                idx[i] = i; /* one sequential batch */
            else if (i > 0 && v.v[1] % 5 == 0)
                idx[i] = idx[v.v[2] % (uint32_t)i]; /* duplicate */
            else if (i > 0 && v.v[1] % 5 == 1)
                idx[i] = (idx[i - 1] + 1) % d->n; /* run */
            else
                idx[i] = (int64_t)(v.v[0] % (uint64_t)d->n);
        }
        ck_assert_int_eq(deck_read(d, idx, n, x, k ? NULL : lab, k ? tg : NULL), DDP_OK);
        for (int i = 0; i < n; i++) {
            int32_t el = -1;
            naive_read_(nv, idx[i], ex, &el, k ? etg : NULL, k);
            double diff = test_max_rel_diff(x + (size_t)i * numel, ex, numel, 1.0);
            ck_assert_msg(diff <= 1e-5, "round %d sample %lld: max rel diff %g", r,
                          (long long)idx[i], diff);
            if (k)
                for (int j = 0; j < k; j++) ck_assert_float_eq(tg[i * k + j], etg[j]);
            else
                ck_assert_int_eq(lab[i], el);
        }
    }
    free(idx);
    free(x);
    free(ex);
    free(lab);
    free(tg);
}

static naive_t naive_for_(deck_t *d, char **paths, int nfiles, double scale, int nstat)
{
    naive_t nv = {paths,      nfiles,          {0},
                  {0},        scale,           nstat,
                  d->shape.c, d->sample_numel, (size_t)d->shape.h * (size_t)d->shape.w};
    for (int i = 0; i < d->nshards; i++) {
        nv.firsts[i] = d->shards[i].first;
        nv.ns[i] = d->shards[i].n;
    }
    return nv;
}

START_TEST(read_u8_images_two_shards)
{
    tdeck_t t = {.n = 53,
                 .xrank = 3,
                 .c = 1,
                 .h = 6,
                 .w = 5,
                 .u8 = 1,
                 .classes = 10,
                 .nstat = 1,
                 .classes_attr = 1,
                 .ytype = H5T_STD_U8LE};
    char *paths[2] = {strdup(tdeck_path("u8a.h5")), strdup(tdeck_path("u8b.h5"))};
    ck_assert_int_eq(tdeck_write(paths[0], &t), 0);
    t.first = 53;
    t.n = 40;
    t.chunk_rows = 16;
    ck_assert_int_eq(tdeck_write(paths[1], &t), 0);
    deck_t d;
    ck_assert_msg(deck_open(&d, paths, 2, "train") == DDP_OK, "%s", ddp_error_message());
    ck_assert_int_eq(d.n, 93);
    ck_assert_int_eq(d.nshards, 2);
    ck_assert_int_eq(d.shape.image, 1);
    ck_assert_int_eq(d.shape.c, 1);
    ck_assert_int_eq(d.shape.h, 6);
    ck_assert_int_eq(d.dtype, DECK_U8);
    ck_assert_int_eq(d.classes, 10);
    ck_assert_float_eq_tol(d.scale, 1.0f / 255, 1e-9);
    ck_assert_int_eq(deck_set_io(&d, DECK_IO_AUTO), 2); /* both shards read directly */
    naive_t nv = naive_for_(&d, paths, 2, 1.0 / 255, 1);
    compare_reads_(&d, &nv, 11, 40);
    deck_close(&d);
    free(paths[0]);
    free(paths[1]);
}
END_TEST

START_TEST(read_u8_chw_three_shards_per_channel)
{
    /* [N,3,5,4], per-channel stats, one compressed shard */
    tdeck_t t = {.n = 30, .xrank = 4, .c = 3, .h = 5, .w = 4, .u8 = 1, .classes = 7, .nstat = 3};
    char *paths[3];
    int64_t sizes[3] = {30, 1, 45};
    int64_t first = 0;
    for (int i = 0; i < 3; i++) {
        char nm[32];
        snprintf(nm, sizeof nm, "chw%d.h5", i);
        paths[i] = strdup(tdeck_path(nm));
        t.n = sizes[i];
        t.first = first;
        t.deflate = i == 2;
        t.chunk_rows = i == 2 ? 8 : 5;
        ck_assert_int_eq(tdeck_write(paths[i], &t), 0);
        first += sizes[i];
    }
    deck_t d;
    ck_assert_msg(deck_open(&d, paths, 3, "train") == DDP_OK, "%s", ddp_error_message());
    ck_assert_int_eq(d.n, 76);
    ck_assert_int_eq(d.nstat, 3);
    ck_assert_int_eq(d.classes, 7);                     /* max label + 1 */
    ck_assert_int_eq(deck_set_io(&d, DECK_IO_AUTO), 2); /* not the compressed one */
    naive_t nv = naive_for_(&d, paths, 3, 1.0 / 255, 3);
    compare_reads_(&d, &nv, 12, 40);

    /* raw reads: the stored values, unnormalised */
    int64_t idx[3] = {75, 30, 2};
    float x[3 * 60];
    ck_assert_int_eq(deck_read_raw(&d, idx, 3, x, NULL, NULL), DDP_OK);
    for (int i = 0; i < 3; i++)
        for (size_t e = 0; e < 60; e++) ck_assert_float_eq(x[i * 60 + e], tdeck_raw(&t, idx[i], e));
    deck_normalize(&d, x, 3);
    float y[3 * 60];
    ck_assert_int_eq(deck_read(&d, idx, 3, y, NULL, NULL), DDP_OK);
    ck_assert_double_le(test_max_rel_diff(x, y, 180, 1.0), 1e-6);
    deck_close(&d);
    for (int i = 0; i < 3; i++) free(paths[i]);
}
END_TEST

START_TEST(read_f32_features_regression)
{
    tdeck_t t = {
        .n = 64, .xrank = 2, .c = 6, .h = 1, .w = 1, .regression = 2, .nstat = 6, .chunk_rows = 9};
    char *paths[1] = {strdup(tdeck_path("f32.h5"))};
    ck_assert_int_eq(tdeck_write(paths[0], &t), 0);
    deck_t d;
    ck_assert_msg(deck_open(&d, paths, 1, "train") == DDP_OK, "%s", ddp_error_message());
    ck_assert_int_eq(d.shape.image, 0);
    ck_assert_int_eq(d.shape.c, 6);
    ck_assert_int_eq(d.dtype, DECK_F32);
    ck_assert_int_eq(d.regression, 1);
    ck_assert_int_eq(d.targets, 2);
    ck_assert_int_eq(deck_require_targets(&d, 2), DDP_OK);
    naive_t nv = naive_for_(&d, paths, 1, 1.0, 6);
    compare_reads_(&d, &nv, 13, 40);
    ck_assert_int_eq(deck_check_finite(&d), DDP_OK);
    deck_close(&d);
    free(paths[0]);
}
END_TEST

START_TEST(eval_ranges_and_val_split)
{
    /* two shards; only the first holds /val, without its own statistics */
    tdeck_t t = {.n = 20, .xrank = 2, .c = 3, .h = 1, .w = 1, .classes = 4, .nstat = 3, .nval = 11};
    char *paths[2] = {strdup(tdeck_path("val0.h5")), strdup(tdeck_path("val1.h5"))};
    ck_assert_int_eq(tdeck_write(paths[0], &t), 0);
    t.nval = 0;
    t.first = 20;
    ck_assert_int_eq(tdeck_write(paths[1], &t), 0);
    ck_assert(deck_has_split(paths[0], "val"));
    ck_assert(!deck_has_split(paths[1], "val"));
    char *rev[2] = {paths[1], paths[0]};
    ck_assert(deck_has_split_any(rev, 2, "val"));
    ck_assert(!deck_has_split_any(rev, 1, "val"));
    deck_t v;
    ck_assert_msg(deck_open(&v, paths, 2, "val") == DDP_OK, "%s", ddp_error_message());
    ck_assert_int_eq(v.n, 11);
    ck_assert_int_eq(v.nshards, 1);
    ck_assert_int_eq(v.nstat, 3); /* from /train/x */
    ck_assert_float_eq(v.mean[2], tdeck_mean(2));
    for (int w = 1; w <= 5; w++) {
        int64_t next = 0;
        for (int r = 0; r < w; r++) {
            int64_t f, c;
            deck_eval_range(&v, w, r, &f, &c);
            ck_assert_int_eq(f, next);
            ck_assert_int_ge(c, v.n / w);
            ck_assert_int_le(c, v.n / w + 1);
            next = f + c;
        }
        ck_assert_int_eq(next, v.n);
    }
    float x[11 * 3];
    int32_t lab[11];
    ck_assert_int_eq(deck_read_range(&v, 4, 7, x, lab, NULL), DDP_OK);
    for (int i = 0; i < 7; i++) {
        ck_assert_int_eq(lab[i], (1000000 + 4 + i) % 4);
        double want = (tdeck_raw(&t, 1000000 + 4 + i, 1) - tdeck_mean(1)) / tdeck_std(1);
        ck_assert_close(x[i * 3 + 1], want, 1e-5);
    }
    deck_close(&v);
    free(paths[0]);
    free(paths[1]);
}
END_TEST

/* ---- bad input ---- */

/* The last error is an input error naming `file` and `what`. */
#define ck_assert_input_error(s, file, what)                                                       \
    do {                                                                                           \
        ck_assert_msg((s) == DDP_ERR_INPUT, "status %d: %s", (int)(s), ddp_error_message());       \
        ck_assert_msg(strstr(ddp_error_message(), (file)) != NULL, "'%s' not in: %s", (file),      \
                      ddp_error_message());                                                        \
        ck_assert_msg(strstr(ddp_error_message(), (what)) != NULL, "'%s' not in: %s", (what),      \
                      ddp_error_message());                                                        \
        ddp_clear_error();                                                                         \
    } while (0)

static ddp_status_t open1_(deck_t *d, const char *path)
{
    char *p[1] = {(char *)path};
    ddp_clear_error();
    return deck_open(d, p, 1, "train");
}

/* A deck from raw arrays: x float [nx, 3] (values v), y int [ny] (labels). */
static void write_xy_(const char *path, int nx, const float *x, int ny, const int *y,
                      int classes_attr)
{
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    ck_assert_int_ge(f, 0);
    if (nx > 0) {
        hsize_t d[2] = {(hsize_t)nx, 3};
        ck_assert_int_eq(h5_write(f, "/train/x", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 2, d, x),
                         DDP_OK);
    }
    if (ny > 0) {
        hsize_t d = (hsize_t)ny;
        ck_assert_int_eq(h5_write(f, "/train/y", H5T_NATIVE_INT, H5T_STD_I16LE, 1, &d, y), DDP_OK);
        if (classes_attr) {
            hid_t ds = H5Dopen2(f, "/train/y", H5P_DEFAULT);
            ck_assert_int_eq(h5_attr_write_i64(ds, "classes", classes_attr), DDP_OK);
            H5Dclose(ds);
        }
    }
    H5Fclose(f);
}

START_TEST(bad_missing_and_not_hdf5)
{
    deck_t d;
    const char *p = tdeck_path("does-not-exist.h5");
    ck_assert_input_error(open1_(&d, p), p, "does-not-exist.h5");
    p = tdeck_path("text.h5");
    FILE *f = fopen(p, "w");
    fputs("this is not HDF5\n", f);
    fclose(f);
    ck_assert_input_error(open1_(&d, p), p, "not an HDF5 file");
}
END_TEST

START_TEST(bad_missing_datasets_and_lengths)
{
    deck_t d;
    float x[12 * 3] = {0};
    int y[12] = {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2};
    const char *p = tdeck_path("noX.h5");
    write_xy_(p, 0, x, 12, y, 0);
    ck_assert_input_error(open1_(&d, p), p, "/train/x");
    p = tdeck_path("noY.h5");
    write_xy_(p, 12, x, 0, y, 0);
    ck_assert_input_error(open1_(&d, p), p, "/train/y");
    p = tdeck_path("len.h5");
    write_xy_(p, 12, x, 11, y, 0);
    ck_assert_input_error(open1_(&d, p), p, "/train/y has 11");
}
END_TEST

START_TEST(bad_labels)
{
    deck_t d;
    float x[6 * 3] = {0};
    int y[6] = {0, 1, -2, 0, 1, 2};
    const char *p = tdeck_path("neg.h5");
    write_xy_(p, 6, x, 6, y, 0);
    ck_assert_input_error(open1_(&d, p), p, "/train/y sample 2 has label -2");
    int y2[6] = {0, 1, 2, 3, 4, 5};
    p = tdeck_path("attr.h5");
    write_xy_(p, 6, x, 6, y2, 4);
    ck_assert_input_error(open1_(&d, p), p, "classes");
    /* labels fine, but the model has too few outputs */
    p = tdeck_path("ok6.h5");
    write_xy_(p, 6, x, 6, y2, 0);
    ck_assert_int_eq(open1_(&d, p), DDP_OK);
    ck_assert_int_eq(d.classes, 6);
    ck_assert_int_eq(deck_check_classes(&d, 6), DDP_OK);
    ck_assert_input_error(deck_check_classes(&d, 5), p, "/train/y holds label 5");
    ck_assert_input_error(deck_require_targets(&d, 1), p, "/train/y");
    ck_assert_input_error(deck_check_size(&d, 2, 4, 0), p, "fewer than one global batch");
    ck_assert_int_eq(deck_check_size(&d, 2, 3, 1), DDP_OK);
    deck_close(&d);
    /* float targets where labels are needed */
    tdeck_t t = {.n = 10, .xrank = 2, .c = 2, .h = 1, .w = 1, .regression = 1};
    p = tdeck_path("reg.h5");
    ck_assert_int_eq(tdeck_write(p, &t), 0);
    ck_assert_int_eq(open1_(&d, p), DDP_OK);
    ck_assert_input_error(deck_require_labels(&d), p, "/train/y holds float targets");
    ck_assert_input_error(deck_check_classes(&d, 10), p, "/train/y");
    deck_close(&d);
}
END_TEST

START_TEST(bad_nonfinite)
{
    deck_t d;
    float x[5 * 3] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14};
    x[10] = NAN;
    int y[5] = {0, 1, 0, 1, 0};
    const char *p = tdeck_path("nan.h5");
    write_xy_(p, 5, x, 5, y, 0);
    ck_assert_int_eq(open1_(&d, p), DDP_OK);
    ck_assert_input_error(deck_check_finite(&d), p, "/train/x sample 3, element 1 is NaN");
    deck_close(&d);
}
END_TEST

START_TEST(bad_shards_disagree)
{
    deck_t d;
    tdeck_t a = {.n = 10, .xrank = 2, .c = 4, .h = 1, .w = 1, .classes = 3};
    tdeck_t b = a;
    b.c = 5;
    char *p[2] = {strdup(tdeck_path("sa.h5")), strdup(tdeck_path("sb.h5"))};
    ck_assert_int_eq(tdeck_write(p[0], &a), 0);
    ck_assert_int_eq(tdeck_write(p[1], &b), 0);
    ck_assert_input_error(deck_open(&d, p, 2, "train"), p[1], "/train/x samples are [4] float32");
    b = a;
    b.u8 = 1;
    ck_assert_int_eq(tdeck_write(p[1], &b), 0);
    ck_assert_input_error(deck_open(&d, p, 2, "train"), p[1], "[4] uint8");
    b = a;
    b.regression = 1;
    ck_assert_int_eq(tdeck_write(p[1], &b), 0);
    ck_assert_input_error(deck_open(&d, p, 2, "train"), p[1], "/train/y holds integer labels");
    free(p[0]);
    free(p[1]);
}
END_TEST

START_TEST(bad_types_and_attributes)
{
    deck_t d;
    const char *p = tdeck_path("u16.h5");
    hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    uint16_t xv[8] = {0};
    int yv[4] = {0};
    hsize_t xd[2] = {4, 2}, yd = 4;
    h5_write(f, "/train/x", H5T_NATIVE_UINT16, H5T_STD_U16LE, 2, xd, xv);
    h5_write(f, "/train/y", H5T_NATIVE_INT, H5T_STD_I32LE, 1, &yd, yv);
    H5Fclose(f);
    ck_assert_input_error(open1_(&d, p), p, "/train/x must be uint8 or float32");

    tdeck_t t = {.n = 10, .xrank = 2, .c = 4, .h = 1, .w = 1, .classes = 3, .nstat = 3};
    p = tdeck_path("nstat.h5");
    ck_assert_int_eq(tdeck_write(p, &t), 0);
    ck_assert_input_error(open1_(&d, p), p, "attribute mean of /train/x has 3 values");
}
END_TEST

START_TEST(bad_truncated_and_corrupt_chunk)
{
    deck_t d;
    tdeck_t t = {.n = 70,
                 .xrank = 3,
                 .c = 1,
                 .h = 8,
                 .w = 8,
                 .u8 = 1,
                 .classes = 10,
                 .deflate = 1,
                 .chunk_rows = 7};
    const char *p = tdeck_path("corrupt.h5");
    ck_assert_int_eq(tdeck_write(p, &t), 0);

    /* overwrite the compressed chunk holding samples [14, 21) with garbage */
    hid_t f = H5Fopen(p, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t ds = H5Dopen2(f, "/train/x", H5P_DEFAULT);
    hsize_t coord[3] = {14, 0, 0}, size;
    haddr_t addr;
    unsigned mask;
    ck_assert_int_ge(H5Dget_chunk_info_by_coord(ds, coord, &mask, &addr, &size), 0);
    H5Dclose(ds);
    H5Fclose(f);
    FILE *fp = fopen(p, "r+b");
    ck_assert_ptr_nonnull(fp);
    fseek(fp, (long)addr, SEEK_SET);
    for (hsize_t i = 0; i < size; i++) fputc((int)(i * 151 + 7) & 0xff, fp);
    fclose(fp);

    ck_assert_int_eq(open1_(&d, p), DDP_OK); /* labels are intact */
    float x[4 * 64];
    int32_t lab[4];
    int64_t ok[3] = {0, 40, 69};
    ck_assert_int_eq(deck_read(&d, ok, 3, x, lab, NULL), DDP_OK);
    int64_t bad[4] = {3, 16, 50, 2};
    ck_assert_input_error(deck_read(&d, bad, 4, x, lab, NULL), p, "/train/x samples [16, 17)");
    deck_close(&d);

    /* a truncated file fails at open */
    const char *q = tdeck_path("truncated.h5");
    t.deflate = 0;
    ck_assert_int_eq(tdeck_write(q, &t), 0);
    ck_assert_int_eq(truncate(q, 2000), 0);
    ck_assert_input_error(open1_(&d, q), q, "truncated");

    /* uncompressed data truncated under an open deck (direct reads): the
     * failing read names the file, dataset and sample range */
    q = tdeck_path("shrunk.h5");
    ck_assert_int_eq(tdeck_write(q, &t), 0);
    ck_assert_int_eq(open1_(&d, q), DDP_OK);
    ck_assert_int_eq(deck_set_io(&d, DECK_IO_AUTO), 1);
    f = H5Fopen(q, H5F_ACC_RDONLY, H5P_DEFAULT);
    ds = H5Dopen2(f, "/train/x", H5P_DEFAULT);
    coord[0] = 63;
    ck_assert_int_ge(H5Dget_chunk_info_by_coord(ds, coord, &mask, &addr, &size), 0);
    H5Dclose(ds);
    H5Fclose(f);
    ck_assert_int_eq(truncate(q, (off_t)addr + 64), 0); /* inside sample 63 */
    int64_t late[2] = {65, 66};
    ck_assert_input_error(deck_read(&d, late, 2, x, lab, NULL), q, "/train/x samples [65, 67)");
    deck_close(&d);
}
END_TEST

START_TEST(read_contiguous_layout)
{
    /* h5_write makes contiguous datasets: read at H5Dget_offset directly */
    float x[40 * 3];
    int y[40];
    for (int i = 0; i < 40; i++) {
        y[i] = i % 4;
        for (int e = 0; e < 3; e++) x[i * 3 + e] = (float)(i * 10 + e);
    }
    const char *p = tdeck_path("contig.h5");
    write_xy_(p, 40, x, 40, y, 0);
    deck_t d;
    ck_assert_int_eq(open1_(&d, p), DDP_OK);
    ck_assert_int_eq(deck_set_io(&d, DECK_IO_AUTO), 1);
    int64_t idx[6] = {39, 0, 17, 18, 17, 5};
    float out[6 * 3];
    int32_t lab[6];
    for (int mode = 0; mode < 3; mode++) {
        deck_set_io(&d, mode == 0 ? DECK_IO_AUTO : mode == 1 ? DECK_IO_RUNS : DECK_IO_UNION);
        ck_assert_int_eq(deck_read(&d, idx, 6, out, lab, NULL), DDP_OK);
        for (int i = 0; i < 6; i++) {
            ck_assert_int_eq(lab[i], idx[i] % 4);
            for (int e = 0; e < 3; e++)
                ck_assert_float_eq(out[i * 3 + e], (float)(idx[i] * 10 + e));
        }
    }
    deck_close(&d);
}
END_TEST

START_TEST(read_many_chunks_through_hdf5)
{
    /* 6000 chunks of one sample: more than the direct path's address table
     * takes (DECK_DIRECT_MAX_CHUNKS), so read through HDF5, correctly */
    tdeck_t t = {.n = 6000, .xrank = 2, .c = 3, .h = 1, .w = 1, .classes = 5, .chunk_rows = 1};
    char *paths[1] = {strdup(tdeck_path("many.h5"))};
    ck_assert_int_eq(tdeck_write(paths[0], &t), 0);
    deck_t d;
    ck_assert_msg(deck_open(&d, paths, 1, "train") == DDP_OK, "%s", ddp_error_message());
    ck_assert_int_eq(deck_set_io(&d, DECK_IO_AUTO), 0);
    naive_t nv = naive_for_(&d, paths, 1, 1.0, 0);
    compare_reads_(&d, &nv, 14, 30);
    deck_close(&d);
    free(paths[0]);
}
END_TEST

START_TEST(read_unwritten_chunks_as_fill)
{
    /* x [100, 4] in chunks of 10 rows, only rows [0, 50) written: the other
     * chunks are never allocated and read as HDF5's fill value, 0 */
    const char *p = tdeck_path("partial.h5");
    hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hsize_t xd[2] = {100, 4}, ch[2] = {10, 4}, yd = 100;
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 2, ch);
    hid_t xs = H5Screate_simple(2, xd, NULL);
    hid_t x = H5Dcreate2(f, "/train/x", H5T_IEEE_F32LE, xs, lcpl, dcpl, H5P_DEFAULT);
    float xv[50 * 4];
    for (int i = 0; i < 200; i++) xv[i] = 1.0f + (float)i;
    hsize_t start[2] = {0, 0}, count[2] = {50, 4};
    H5Sselect_hyperslab(xs, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t ms = H5Screate_simple(2, count, NULL);
    ck_assert_int_ge(H5Dwrite(x, H5T_NATIVE_FLOAT, ms, xs, H5P_DEFAULT, xv), 0);
    hid_t ys = H5Screate_simple(1, &yd, NULL);
    hid_t y = H5Dcreate2(f, "/train/y", H5T_STD_I32LE, ys, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    int32_t yv[100];
    for (int i = 0; i < 100; i++) yv[i] = i % 3;
    ck_assert_int_ge(H5Dwrite(y, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, yv), 0);
    H5Sclose(ms);
    H5Sclose(xs);
    H5Sclose(ys);
    H5Dclose(x);
    H5Dclose(y);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    ck_assert_int_ge(H5Fclose(f), 0);

    deck_t d;
    ck_assert_int_eq(open1_(&d, p), DDP_OK);
    ck_assert_int_eq(deck_set_io(&d, DECK_IO_AUTO), 1);
    int64_t idx[7] = {99, 0, 49, 50, 75, 12, 50};
    float out[7 * 4];
    int32_t lab[7];
    for (int mode = 0; mode < 2; mode++) {
        deck_set_io(&d, mode == 0 ? DECK_IO_AUTO : DECK_IO_RUNS);
        ck_assert_int_eq(deck_read(&d, idx, 7, out, lab, NULL), DDP_OK);
        for (int i = 0; i < 7; i++) {
            ck_assert_int_eq(lab[i], idx[i] % 3);
            for (int e = 0; e < 4; e++)
                ck_assert_float_eq(out[i * 4 + e],
                                   idx[i] < 50 ? 1.0f + (float)(idx[i] * 4 + e) : 0.0f);
        }
    }
    deck_close(&d);
}
END_TEST

START_TEST(scan_progress_and_distinct_labels)
{
    /* with the progress threshold at 0 the label scan reports at once, on
     * stdout (rank 0's log_info) */
    tdeck_t t = {.n = 100, .xrank = 2, .c = 3, .h = 1, .w = 1, .classes = 3};
    const char *p = tdeck_path("progress.h5");
    ck_assert_int_eq(tdeck_write(p, &t), 0);
    const char *out = tdeck_path("progress.txt");
    fflush(stdout);
    int saved = dup(1), fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    dup2(fd, 1);
    close(fd);
    log_setup(log_rank(), LOG_INFO); /* test_main runs quiet */
    deck_set_progress_after(0);
    deck_t d;
    ddp_status_t s = open1_(&d, p);
    deck_set_progress_after(3);
    log_setup(log_rank(), LOG_QUIET);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    ck_assert_int_eq(s, DDP_OK);
    char text[512] = "";
    FILE *f = fopen(out, "r");
    ck_assert_ptr_nonnull(f);
    size_t got = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[got] = 0;
    ck_assert_msg(strstr(text, "scanning the labels of /train/y: 0 of 100 samples") != NULL,
                  "no progress line in: '%s'", text);
    /* 3 distinct labels for 3 classes: no warning */
    char w[1024];
    ck_assert_int_eq(d.label_distinct, 3);
    ck_assert_int_eq(deck_classes_warning(&d, w, sizeof w), 0);
    deck_close(&d);

    /* one stray label of 1000: 1001 classes from 4 distinct labels */
    float x[8 * 3] = {0};
    int y[8] = {0, 1, 2, 0, 1000, 2, 0, 1};
    p = tdeck_path("stray.h5");
    write_xy_(p, 8, x, 8, y, 0);
    ck_assert_int_eq(open1_(&d, p), DDP_OK);
    ck_assert_int_eq(d.classes, 1001);
    ck_assert_int_eq(d.label_distinct, 4);
    ck_assert_int_eq(deck_classes_warning(&d, w, sizeof w), 1);
    ck_assert_msg(strstr(w, "1001 classes (label 1000 at sample 4), but only 4 distinct") != NULL,
                  "%s", w);
    ck_assert_msg(strstr(w, "attribute classes on /train/y") != NULL, "%s", w);
    deck_close(&d);
    /* the same labels with an explicit classes attribute: the user said so */
    write_xy_(p, 8, x, 8, y, 2000);
    ck_assert_int_eq(open1_(&d, p), DDP_OK);
    ck_assert_int_eq(d.classes, 2000);
    ck_assert_int_eq(deck_classes_warning(&d, w, sizeof w), 0);
    deck_close(&d);
}
END_TEST

START_TEST(bad_sample_beyond_memory)
{
    /* one sample of 5*10^8 float32 values, stored (contiguous, allocated at
     * creation, never filled: a sparse file of 2 GB on disk as a few KiB),
     * under an address-space limit 1 GiB above what the process uses: the
     * normalisation tables alone would need 10 GB, so the open is refused
     * as out of memory before allocating them */
    const char *p = tdeck_path("widesample.h5");
    hid_t f = H5Fcreate(p, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    hsize_t xd[2] = {1, 500000000}, yd = 1;
    hid_t xs = H5Screate_simple(2, xd, NULL), ys = H5Screate_simple(1, &yd, NULL);
    hid_t x = H5Dcreate2(f, "/train/x", H5T_IEEE_F32LE, xs, lcpl, dcpl, H5P_DEFAULT);
    hid_t y = H5Dcreate2(f, "/train/y", H5T_STD_I32LE, ys, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    int32_t label = 0;
    ck_assert_int_ge(H5Dwrite(y, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, &label), 0);
    H5Dclose(x);
    H5Dclose(y);
    H5Sclose(xs);
    H5Sclose(ys);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    ck_assert_int_ge(H5Fclose(f), 0);

    struct rlimit old, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_AS, &old), 0);
    size_t used = 0;
    FILE *st = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(st);
    char line[256];
    while (fgets(line, sizeof line, st))
        if (strncmp(line, "VmSize:", 7) == 0) used = (size_t)strtoull(line + 7, NULL, 10) * 1024;
    fclose(st);
    lim = old;
    lim.rlim_cur = (rlim_t)(used + ((size_t)1 << 30));
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &lim), 0);
    deck_t d;
    ddp_status_t s = open1_(&d, p);
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &old), 0);
    ck_assert_msg(s == DDP_ERR_NOMEM, "status %d: %s", (int)s, ddp_error_message());
    const char *msg = ddp_error_message();
    ck_assert_msg(strstr(msg, p) && strstr(msg, "samples of /train/x have 500000000 values") &&
                      strstr(msg, "(ulimit -v)"),
                  "%s", msg);
    ddp_clear_error();
    unlink(p);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("deck");
    TCase *t = tcase_create("read");
    tcase_add_test(t, read_u8_images_two_shards);
    tcase_add_test(t, read_u8_chw_three_shards_per_channel);
    tcase_add_test(t, read_f32_features_regression);
    tcase_add_test(t, eval_ranges_and_val_split);
    tcase_add_test(t, read_contiguous_layout);
    tcase_add_test(t, read_many_chunks_through_hdf5);
    tcase_add_test(t, read_unwritten_chunks_as_fill);
    suite_add_tcase(s, t);
    TCase *b = tcase_create("bad input");
    tcase_add_test(b, bad_missing_and_not_hdf5);
    tcase_add_test(b, bad_missing_datasets_and_lengths);
    tcase_add_test(b, bad_labels);
    tcase_add_test(b, bad_nonfinite);
    tcase_add_test(b, bad_shards_disagree);
    tcase_add_test(b, bad_types_and_attributes);
    tcase_add_test(b, bad_truncated_and_corrupt_chunk);
    tcase_add_test(b, scan_progress_and_distinct_labels);
    tcase_add_test(b, bad_sample_beyond_memory);
    suite_add_tcase(s, b);
    return s;
}
