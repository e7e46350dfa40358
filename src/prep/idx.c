/* idx.c -- `ddptrain-prep idx`: IDX files (MNIST, Fashion-MNIST; gzip'd or
 * plain) -> uint8 images [N, H, W] (or [N, F], [N, C, H, W] by the IDX rank)
 * and int32 labels with a `classes` attribute.  Streams the pixels in
 * blocks, so memory does not grow with N.  --limit N / --val-limit N keep
 * only the first N samples of a file (a quick subset for tests and trials).
 *
 * IDX: two zero bytes, a type byte (0x08 = unsigned byte), the number of
 * dimensions, then each dimension as a big-endian uint32, then the data.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_build.h"
#include "prep.h"

#ifdef HAVE_ZLIB
#include <zlib.h>
#endif

#define IDX_BLOCK_BYTES ((size_t)4 << 20)

typedef struct idx_file {
    const char *path;
#ifdef HAVE_ZLIB
    gzFile gz;
#else
    FILE *fp;
#endif
    int ndim;
    uint32_t dims[4];
} idx_file_t;

/* Read exactly n bytes; 0 on success. */
static int idx_read_(idx_file_t *f, void *buf, size_t n)
{
#ifdef HAVE_ZLIB
    unsigned char *p = buf;
    while (n > 0) {
        unsigned chunk = n > (1u << 30) ? 1u << 30 : (unsigned)n;
        int got = gzread(f->gz, p, chunk);
        if (got <= 0) return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
#else
    return fread(buf, 1, n, f->fp) == n ? 0 : -1;
#endif
}

static void idx_close_(idx_file_t *f)
{
#ifdef HAVE_ZLIB
    if (f->gz) gzclose(f->gz);
    f->gz = NULL;
#else
    if (f->fp) fclose(f->fp);
    f->fp = NULL;
#endif
}

/* Open an IDX file of unsigned bytes and read its header. */
static ddp_status_t idx_open_(idx_file_t *f, const char *path, int min_dim, int max_dim)
{
    memset(f, 0, sizeof *f);
    f->path = path;
#ifdef HAVE_ZLIB
    f->gz = gzopen(path, "rb");
    if (!f->gz)
        return ddp_fail(DDP_ERR_INPUT, "%s: cannot open: %s", path,
                        errno ? strerror(errno) : "out of memory");
    gzbuffer(f->gz, 1 << 17);
#else
    f->fp = fopen(path, "rb");
    if (!f->fp) return ddp_fail(DDP_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
#endif
    unsigned char h[4];
    if (idx_read_(f, h, 4) != 0 || h[0] != 0 || h[1] != 0) {
#ifndef HAVE_ZLIB
        if (h[0] == 0x1f && h[1] == 0x8b) {
            idx_close_(f);
            return ddp_fail(DDP_ERR_INPUT,
                            "%s: gzip'd, but ddptrain-prep was built without "
                            "zlib; gunzip it first",
                            path);
        }
#endif
        idx_close_(f);
        return ddp_fail(DDP_ERR_INPUT, "%s: not an IDX file (bad magic number)", path);
    }
    if (h[2] != 0x08) {
        idx_close_(f);
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: IDX data type 0x%02x; only unsigned bytes (0x08) "
                        "are supported",
                        path, h[2]);
    }
    if (h[3] < min_dim || h[3] > max_dim) {
        idx_close_(f);
        return ddp_fail(DDP_ERR_INPUT, "%s: IDX file has %d dimensions; expected %d to %d", path,
                        h[3], min_dim, max_dim);
    }
    f->ndim = h[3];
    for (int i = 0; i < f->ndim; i++) {
        unsigned char b[4];
        if (idx_read_(f, b, 4) != 0) {
            idx_close_(f);
            return ddp_fail(DDP_ERR_INPUT, "%s: truncated IDX header", path);
        }
        f->dims[i] = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
        if (f->dims[i] == 0) {
            idx_close_(f);
            return ddp_fail(DDP_ERR_INPUT, "%s: IDX dimension %d is 0", path, i);
        }
    }
    return DDP_OK;
}

/* Convert one images/labels pair into /<split>/x and /<split>/y: the first
 * `limit` samples (0: all; a limit above the file's count keeps all).  Train
 * statistics go to st (NULL for val); *max_label is updated. */
static ddp_status_t idx_pair_(hid_t file, const char *split, const char *images, const char *labels,
                              int64_t limit, prep_stats_t *st, int *nch, int *max_label, hid_t *xds,
                              hid_t *yds)
{
    idx_file_t fi, fl;
    DDP_TRY(idx_open_(&fi, images, 2, 4));
    ddp_status_t s = idx_open_(&fl, labels, 1, 1);
    if (s != DDP_OK) {
        idx_close_(&fi);
        return s;
    }
    hsize_t n = fi.dims[0];
    if (fl.dims[0] != n) {
        s = ddp_fail(DDP_ERR_INPUT,
                     "%s holds %llu images but %s holds %u labels; give the "
                     "matching pair",
                     images, (unsigned long long)n, labels, fl.dims[0]);
        goto out;
    }
    if (limit > 0 && (hsize_t)limit < n) n = (hsize_t)limit;
    hsize_t xd[4] = {n, 0, 0, 0};
    size_t row = 1;
    for (int i = 1; i < fi.ndim; i++) {
        xd[i] = fi.dims[i];
        row *= fi.dims[i];
    }
    /* channels of the statistics: features for [N,F], 1 for [N,H,W], C for [N,C,H,W] */
    int c = fi.ndim == 2 ? (int)fi.dims[1] : fi.ndim == 3 ? 1 : (int)fi.dims[1];
    *nch = c;
    if (st && (s = prep_stats_init(st, c, row / (size_t)c)) != DDP_OK) goto out;

    char xn[32], yn[32];
    snprintf(xn, sizeof xn, "/%s/x", split);
    snprintf(yn, sizeof yn, "/%s/y", split);
    prep_ds_t wx, wy;
    if ((s = prep_ds_create(&wx, file, xn, H5T_STD_U8LE, H5T_NATIVE_UINT8, fi.ndim, xd)) != DDP_OK)
        goto out;
    if ((s = prep_ds_create(&wy, file, yn, H5T_STD_I32LE, H5T_NATIVE_INT32, 1, xd)) != DDP_OK) {
        prep_ds_close(&wx);
        goto out;
    }
    size_t rows = IDX_BLOCK_BYTES / row;
    if (rows < 1) rows = 1;
    uint8_t *buf = ddp_malloc(rows * row, "IDX conversion");
    uint8_t *lb = ddp_malloc(rows, "IDX conversion");
    int32_t *li = ddp_malloc(rows * sizeof *li, "IDX conversion");
    if (!buf || !lb || !li) s = DDP_ERR_NOMEM;
    for (hsize_t off = 0; off < n && s == DDP_OK; off += rows) {
        size_t cnt = n - off < rows ? (size_t)(n - off) : rows;
        if (idx_read_(&fi, buf, cnt * row) != 0) {
            s = ddp_fail(DDP_ERR_INPUT,
                         "%s: truncated IDX file: the header promises %llu "
                         "images of %zu bytes, the data ends before image %llu",
                         images, (unsigned long long)n, row, (unsigned long long)off + 1);
            break;
        }
        if (idx_read_(&fl, lb, cnt) != 0) {
            s = ddp_fail(DDP_ERR_INPUT,
                         "%s: truncated IDX file: the header promises %llu "
                         "labels",
                         labels, (unsigned long long)n);
            break;
        }
        for (size_t i = 0; i < cnt; i++) {
            li[i] = lb[i];
            if (li[i] > *max_label) *max_label = li[i];
        }
        if (st) prep_stats_add_u8(st, buf, cnt);
        s = prep_ds_append(&wx, buf, cnt);
        if (s == DDP_OK) s = prep_ds_append(&wy, li, cnt);
    }
    free(buf);
    free(lb);
    free(li);
    if (s == DDP_OK) {
        *xds = wx.ds;
        *yds = wy.ds;
    } else {
        prep_ds_close(&wx);
        prep_ds_close(&wy);
    }
out:
    idx_close_(&fi);
    idx_close_(&fl);
    return s;
}

ddp_status_t prep_idx(int argc, char **argv)
{
    const char *pos[2] = {NULL, NULL}, *val[2] = {NULL, NULL}, *out = NULL, *v;
    int npos = 0;
    int64_t limit = 0, val_limit = 0;
    ddp_status_t s = DDP_OK;
    for (int i = 1; i < argc && s == DDP_OK; i++) {
        if ((v = prep_opt(argc, argv, &i, "-o", &s)) ||
            (s == DDP_OK && (v = prep_opt(argc, argv, &i, "--output", &s)))) {
            out = v;
        } else if (s == DDP_OK && (v = prep_opt(argc, argv, &i, "--limit", &s))) {
            s = prep_int("--limit", v, 1, UINT32_MAX, &limit);
        } else if (s == DDP_OK && (v = prep_opt(argc, argv, &i, "--val-limit", &s))) {
            s = prep_int("--val-limit", v, 1, UINT32_MAX, &val_limit);
        } else if (s == DDP_OK && !strcmp(argv[i], "--val")) {
            if (i + 2 >= argc)
                return ddp_fail(DDP_ERR_USAGE, "idx: --val needs two files: IMAGES LABELS");
            val[0] = argv[++i];
            val[1] = argv[++i];
        } else if (s == DDP_OK && argv[i][0] == '-' && argv[i][1]) {
            s = ddp_fail(DDP_ERR_USAGE, "idx: unknown option '%s'; see ddptrain-prep --help",
                         argv[i]);
        } else if (s == DDP_OK) {
            if (npos == 2)
                return ddp_fail(DDP_ERR_USAGE,
                                "idx: unexpected argument '%s' (give IMAGES "
                                "LABELS -o OUT.h5)",
                                argv[i]);
            pos[npos++] = argv[i];
        }
    }
    if (s != DDP_OK) return s;
    if (npos != 2)
        return ddp_fail(DDP_ERR_USAGE, "idx: give IMAGES LABELS -o OUT.h5 (two IDX files)");
    if (!out) return ddp_fail(DDP_ERR_USAGE, "idx: no output file (-o OUT.h5)");
    if (val_limit && !val[0])
        return ddp_fail(DDP_ERR_USAGE, "idx: --val-limit without --val IMAGES LABELS");
    const pathclash_file_t files[] = {{"IMAGES", pos[0], PATHCLASH_IN, NULL, 0},
                                      {"LABELS", pos[1], PATHCLASH_IN, NULL, 0},
                                      {"--val IMAGES", val[0], PATHCLASH_IN, NULL, 0},
                                      {"--val LABELS", val[1], PATHCLASH_IN, NULL, 0},
                                      {"-o", out, PATHCLASH_OUT, NULL, 0}};
    DDP_TRY(pathclash_check(files, 5));

    h5_atomic_t a;
    DDP_TRY(h5_atomic_create(&a, out));
    prep_stats_t st;
    memset(&st, 0, sizeof st);
    hid_t tx = H5I_INVALID_HID, ty = H5I_INVALID_HID, vx = H5I_INVALID_HID, vy = H5I_INVALID_HID;
    int nch = 1, vnch = 1, max_label = -1;
    s = idx_pair_(a.file, "train", pos[0], pos[1], limit, &st, &nch, &max_label, &tx, &ty);
    if (s == DDP_OK && val[0]) {
        s = idx_pair_(a.file, "val", val[0], val[1], val_limit, NULL, &vnch, &max_label, &vx, &vy);
        if (s == DDP_OK) {
            /* the val samples must have the training samples' shape */
            hsize_t d1[4], d2[4];
            h5_lock();
            hid_t s1 = H5Dget_space(tx), s2 = H5Dget_space(vx);
            int r1 = H5Sget_simple_extent_dims(s1, d1, NULL);
            int r2 = H5Sget_simple_extent_dims(s2, d2, NULL);
            H5Sclose(s1);
            H5Sclose(s2);
            h5_unlock();
            int same = r1 == r2;
            for (int i = 1; same && i < r1; i++) same = d1[i] == d2[i];
            if (!same)
                s = ddp_fail(DDP_ERR_INPUT,
                             "%s: the validation images differ in shape from "
                             "the training images in %s",
                             val[0], pos[0]);
        }
    }
    const double scale = 1.0 / 255.0;
    if (s == DDP_OK) s = prep_stats_write(&st, tx, 1, scale);
    if (s == DDP_OK && vx >= 0) s = prep_stats_write(&st, vx, 1, scale);
    if (s == DDP_OK) s = h5_attr_write_i64(ty, "classes", max_label + 1);
    if (s == DDP_OK && vy >= 0) s = h5_attr_write_i64(vy, "classes", max_label + 1);
    h5_lock();
    hid_t ids[4] = {tx, ty, vx, vy};
    for (int i = 0; i < 4; i++)
        if (ids[i] >= 0) H5Dclose(ids[i]);
    h5_unlock();
    prep_stats_free(&st);
    (void)nch;
    (void)vnch;
    if (s != DDP_OK) {
        h5_atomic_abandon(&a);
        return s;
    }
    return prep_finish(&a);
}
