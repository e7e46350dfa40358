/* info.c -- `ddptrain-prep info FILE.h5 [MORE.h5 ...]`: per file the shapes,
 * types, chunking and attributes of /train and /val, statistics of the
 * samples (min/max/mean/std, non-finite count; per channel for images with
 * few channels), the label histogram or target statistics; then whether
 * the files, in this order, are a valid input deck (deck_open,
 * deck_check_finite): DDP_ERR_INPUT with the reason if not.  Bounded memory.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "deck.h"
#include "prep.h"

#define INFO_BLOCK_BYTES ((size_t)8 << 20)
#define INFO_MAX_HIST    1000 /* labels printed one by one up to this many classes */

static void type_name_(hid_t t, char *buf, size_t n)
{
    H5T_class_t c = H5Tget_class(t);
    size_t sz = H5Tget_size(t);
    if (c == H5T_INTEGER)
        snprintf(buf, n, "%sint%zu", H5Tget_sign(t) == H5T_SGN_NONE ? "u" : "", 8 * sz);
    else if (c == H5T_FLOAT)
        snprintf(buf, n, "float%zu", 8 * sz);
    else if (c == H5T_STRING)
        snprintf(buf, n, "string");
    else
        snprintf(buf, n, "type class %d", (int)c);
}

static void dims_str_(const hsize_t *d, int r, char *buf, size_t n)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < r && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

/* Shape, type, layout and attribute names of one dataset. */
static void describe_(hid_t ds, const char *name)
{
    hid_t t = H5Dget_type(ds), sp = H5Dget_space(ds), dcpl = H5Dget_create_plist(ds);
    hsize_t d[H5S_MAX_RANK];
    int r = H5Sget_simple_extent_dims(sp, d, NULL);
    char ds_[128], ts[32], layout[160];
    dims_str_(d, r, ds_, sizeof ds_);
    type_name_(t, ts, sizeof ts);
    H5D_layout_t lay = H5Pget_layout(dcpl);
    if (lay == H5D_CHUNKED) {
        hsize_t cd[H5S_MAX_RANK];
        int cr = H5Pget_chunk(dcpl, H5S_MAX_RANK, cd);
        char cs[128];
        dims_str_(cd, cr, cs, sizeof cs);
        size_t cb = H5Tget_size(t);
        for (int i = 0; i < cr; i++) cb *= cd[i];
        int nf = H5Pget_nfilters(dcpl);
        char filt[64] = "uncompressed";
        if (nf > 0) {
            unsigned flags;
            size_t nelm = 0;
            char fname[32] = "";
            H5Z_filter_t id =
                H5Pget_filter2(dcpl, 0, &flags, &nelm, NULL, sizeof fname, fname, NULL);
            snprintf(filt, sizeof filt, "filters: %s%s", fname[0] ? fname : "id ",
                     fname[0] ? "" : (id == H5Z_FILTER_DEFLATE ? "deflate" : "?"));
            if (nf > 1) snprintf(filt + strlen(filt), sizeof filt - strlen(filt), " +%d", nf - 1);
        }
        snprintf(layout, sizeof layout, "chunks %s (%.1f KiB), %s", cs, (double)cb / 1024, filt);
    } else {
        snprintf(layout, sizeof layout, "%s layout",
                 lay == H5D_CONTIGUOUS ? "contiguous"
                 : lay == H5D_COMPACT  ? "compact"
                                       : "other");
    }
    printf("  %-9s %s %s, %s\n", name, ds_, ts, layout);
    int na = H5Aget_num_attrs(ds);
    if (na > 0) {
        printf("  %-9s attributes:", "");
        for (int i = 0; i < na; i++) {
            char an[64];
            hid_t a = H5Aopen_by_idx(ds, ".", H5_INDEX_NAME, H5_ITER_INC, (hsize_t)i, H5P_DEFAULT,
                                     H5P_DEFAULT);
            if (a < 0) continue;
            H5Aget_name(a, sizeof an, an);
            hid_t as = H5Aget_space(a), at = H5Aget_type(a);
            hssize_t np = H5Sget_simple_extent_npoints(as);
            if (H5Tget_class(at) != H5T_STRING && np == 1) {
                double v = 0;
                H5Aread(a, H5T_NATIVE_DOUBLE, &v);
                printf(" %s=%g", an, v);
            } else if (H5Tget_class(at) == H5T_STRING) {
                printf(" %s (text)", an);
            } else {
                printf(" %s[%lld]", an, (long long)np);
            }
            H5Tclose(at);
            H5Sclose(as);
            H5Aclose(a);
        }
        printf("\n");
    }
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Tclose(t);
}

typedef struct acc {
    double min, max, sum, sumsq;
    int64_t n, nonfinite;
} acc_t;

static void acc_init_(acc_t *a)
{
    memset(a, 0, sizeof *a);
    a->min = INFINITY;
    a->max = -INFINITY;
}

/* One finite value into the running statistics. */
static void acc_add_(acc_t *a, double v)
{
    if (v < a->min) a->min = v;
    if (v > a->max) a->max = v;
    a->sum += v;
    a->sumsq += v * v;
    a->n++;
}

static void acc_print_(const acc_t *a, const char *what)
{
    double m = a->n ? a->sum / (double)a->n : 0;
    double var = a->n ? a->sumsq / (double)a->n - m * m : 0;
    printf("  %-9s %s: min %.6g, max %.6g, mean %.6g, std %.6g", "", what, a->n ? a->min : 0,
           a->n ? a->max : 0, m, var > 0 ? sqrt(var) : 0);
    if (a->nonfinite) printf(", NON-FINITE values: %lld", (long long)a->nonfinite);
    printf("\n");
}

/* Statistics of the sample values of x (per channel for small C images). */
static void x_stats_(hid_t ds)
{
    hid_t sp = H5Dget_space(ds);
    hsize_t d[H5S_MAX_RANK];
    int r = H5Sget_simple_extent_dims(sp, d, NULL);
    size_t row = 1;
    for (int i = 1; i < r; i++) row *= d[i];
    int nch = r == 4 && d[1] > 1 && d[1] <= 16 ? (int)d[1] : 0;
    size_t hw = nch ? row / (size_t)nch : row;
    acc_t all, ch[16];
    acc_init_(&all);
    for (int c = 0; c < 16; c++) acc_init_(&ch[c]);
    hsize_t rows = INFO_BLOCK_BYTES / (row * sizeof(double));
    if (rows < 1) rows = 1;
    if (rows > d[0]) rows = d[0];
    double *buf = malloc((size_t)rows * row * sizeof *buf);
    int64_t first_bad = -1;
    for (hsize_t off = 0; buf && off < d[0]; off += rows) {
        hsize_t cnt = d[0] - off < rows ? d[0] - off : rows;
        hsize_t start[H5S_MAX_RANK] = {off}, count[H5S_MAX_RANK];
        memcpy(count, d, sizeof count);
        count[0] = cnt;
        H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL);
        hid_t ms = H5Screate_simple(r, count, NULL);
        herr_t rc = H5Dread(ds, H5T_NATIVE_DOUBLE, ms, sp, H5P_DEFAULT, buf);
        H5Sclose(ms);
        if (rc < 0) {
            printf("  %-9s READ ERROR in samples [%llu, %llu)\n", "", (unsigned long long)off,
                   (unsigned long long)(off + cnt));
            break;
        }
        for (size_t i = 0; i < (size_t)cnt * row; i++) {
            double v = buf[i];
            acc_t *c = nch ? &ch[(i % row) / hw] : NULL;
            if (!isfinite(v)) {
                all.nonfinite++;
                if (first_bad < 0) first_bad = (int64_t)(off + i / row);
                continue;
            }
            acc_add_(&all, v);
            if (c) acc_add_(c, v);
        }
    }
    free(buf);
    H5Sclose(sp);
    acc_print_(&all, "raw values");
    if (first_bad >= 0)
        printf("  %-9s first non-finite value in sample %lld\n", "", (long long)first_bad);
    for (int c = 0; c < nch; c++) {
        char w[32];
        snprintf(w, sizeof w, "channel %d", c);
        acc_print_(&ch[c], w);
    }
}

/* Label histogram (integer y) or target statistics (float y). */
static void y_stats_(hid_t ds)
{
    hid_t sp = H5Dget_space(ds), t = H5Dget_type(ds);
    int integer = H5Tget_class(t) == H5T_INTEGER;
    H5Tclose(t);
    hsize_t d[H5S_MAX_RANK];
    int r = H5Sget_simple_extent_dims(sp, d, NULL);
    size_t row = r > 1 ? (size_t)d[1] : 1;
    hsize_t rows = INFO_BLOCK_BYTES / (row * 8);
    if (rows > d[0]) rows = d[0];
    void *buf = malloc((size_t)(rows ? rows : 1) * row * 8);
    int64_t *hist = calloc(INFO_MAX_HIST, sizeof *hist);
    int64_t neg = 0, maxl = -1, minl = INT64_MAX;
    acc_t acc;
    acc_init_(&acc);
    for (hsize_t off = 0; buf && hist && off < d[0]; off += rows) {
        hsize_t cnt = d[0] - off < rows ? d[0] - off : rows;
        hsize_t start[2] = {off, 0}, count[2] = {cnt, row};
        H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL);
        hid_t ms = H5Screate_simple(r, count, NULL);
        herr_t rc =
            H5Dread(ds, integer ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, ms, sp, H5P_DEFAULT, buf);
        H5Sclose(ms);
        if (rc < 0) {
            printf("  %-9s READ ERROR in samples [%llu, %llu)\n", "", (unsigned long long)off,
                   (unsigned long long)(off + cnt));
            break;
        }
        for (size_t i = 0; i < (size_t)cnt * row; i++) {
            if (integer) {
                int64_t v = ((int64_t *)buf)[i];
                if (v < 0)
                    neg++;
                else if (v < INFO_MAX_HIST)
                    hist[v]++;
                if (v > maxl) maxl = v;
                if (v < minl) minl = v;
            } else {
                double v = ((double *)buf)[i];
                if (!isfinite(v)) {
                    acc.nonfinite++;
                    continue;
                }
                acc_add_(&acc, v);
            }
        }
    }
    if (integer) {
        printf("  %-9s labels %lld..%lld", "", (long long)(d[0] ? minl : 0), (long long)maxl);
        if (neg) printf(", NEGATIVE labels: %lld", (long long)neg);
        printf("\n");
        if (maxl >= 0 && maxl < INFO_MAX_HIST) {
            printf("  %-9s histogram:", "");
            for (int64_t c = 0; c <= maxl; c++)
                printf("%s %lld:%lld", c && c % 10 == 0 ? "\n           " : "", (long long)c,
                       (long long)hist[c]);
            printf("\n");
        }
    } else {
        acc_print_(&acc, "targets");
    }
    free(buf);
    free(hist);
    H5Sclose(sp);
}

static void file_report_(const char *path)
{
    struct stat st;
    if (stat(path, &st) == 0)
        printf("%s (%.1f MiB)\n", path, (double)st.st_size / (1024.0 * 1024.0));
    else
        printf("%s\n", path);
    hid_t f;
    if (h5_open_read(path, &f) != DDP_OK) {
        printf("  %s\n", ddp_error_message());
        ddp_clear_error();
        return;
    }
    static const char *names[] = {"/train/x", "/train/y", "/val/x", "/val/y"};
    for (int i = 0; i < 4; i++) {
        if (!h5_exists(f, names[i])) {
            if (i < 2) printf("  %-9s MISSING\n", names[i]);
            continue;
        }
        h5_lock();
        hid_t ds = H5Dopen2(f, names[i], H5P_DEFAULT);
        if (ds < 0) {
            printf("  %-9s cannot be opened (corrupt?)\n", names[i]);
        } else {
            describe_(ds, names[i]);
            /* statistics scan every row: not of a header the file cannot back */
            h5_unlock();
            ddp_status_t held = deck_check_stored(path, f, names[i]);
            h5_lock();
            if (held != DDP_OK) {
                printf("  %-9s no statistics: %s\n", "", ddp_error_message());
                ddp_clear_error();
            } else if (i % 2 == 0) {
                x_stats_(ds);
            } else {
                y_stats_(ds);
            }
            H5Dclose(ds);
        }
        h5_unlock();
    }
    if (h5_exists(f, "/config")) {
        h5_lock();
        hid_t g = H5Gopen2(f, "/config", H5P_DEFAULT);
        printf("  /config   %d run options\n", g >= 0 ? H5Aget_num_attrs(g) : 0);
        if (g >= 0) H5Gclose(g);
        h5_unlock();
    }
    h5_lock();
    H5Fclose(f);
    h5_unlock();
}

/* Open one split of the files as a deck, scan it for non-finite values and
 * describe it. */
static ddp_status_t check_split_(char **paths, int n, const char *split, char *desc, size_t len)
{
    deck_t d;
    ddp_status_t s = deck_open(&d, paths, n, split);
    if (s == DDP_OK) {
        s = deck_check_finite(&d);
        deck_describe(&d, desc, len);
        deck_close(&d);
    }
    return s;
}

ddp_status_t prep_info(int argc, char **argv)
{
    int n = 0;
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '-' && argv[i][1])
            return ddp_fail(DDP_ERR_USAGE, "info: unknown option '%s'; see ddptrain-prep --help",
                            argv[i]);
        n++;
    }
    if (n == 0) return ddp_fail(DDP_ERR_USAGE, "info: give one or more FILE.h5");
    char **paths = argv + 1;
    pathclash_file_t *files = calloc((size_t)n, sizeof *files);
    if (!files) return ddp_fail(DDP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) files[i] = (pathclash_file_t){"the file", paths[i], PATHCLASH_IN, NULL, 0};
    ddp_status_t s = pathclash_check(files, n); /* no FIFO or device: refused unopened */
    free(files);
    if (s != DDP_OK) return s;
    for (int i = 0; i < n; i++) file_report_(paths[i]);

    char desc[256];
    s = check_split_(paths, n, "train", desc, sizeof desc);
    if (s != DDP_OK) {
        printf("NOT a valid input deck: %s\n", ddp_error_message());
        return s;
    }
    printf("valid input deck: train: %s\n", desc);
    if (deck_has_split_any(paths, n, "val")) {
        s = check_split_(paths, n, "val", desc, sizeof desc);
        if (s != DDP_OK) {
            printf("NOT a valid input deck (val split): %s\n", ddp_error_message());
            return s;
        }
        printf("                  val: %s\n", desc);
    }
    return DDP_OK;
}
