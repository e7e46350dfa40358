/* prep.c -- ddptrain-prep: builds input decks (from IDX, CSV or a synthetic
 * task), splits them into shards and inspects them.  main(), the help text,
 * and the writer helpers the subcommands share. */
#include "prep.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deck.h"
#include "about.h"

static const char usage_[] =
    "Usage: ddptrain-prep COMMAND [ARGS]  -- make and inspect ddptrain input decks\n"
    "\n"
    "Commands:\n"
    "  idx IMAGES LABELS -o OUT.h5 [--val IMAGES LABELS] [--limit N] [--val-limit NV]\n"
    "      IDX files (MNIST, Fashion-MNIST; gzip'd or plain) -> uint8 [N,H,W] images\n"
    "      and integer labels, with mean/std/scale and a `classes` attribute.\n"
    "      --limit / --val-limit keep only the first N training / NV validation\n"
    "      samples (a quick subset).\n"
    "  csv FILE (--label-column NAME [--regression] | --target-columns A,B\n"
    "      [--label-column NAME]) -o OUT.h5 [--val-fraction F] [--seed S]\n"
    "      A CSV file with a header line -> float32 features [N,F] and integer labels\n"
    "      (non-integer labels are numbered in sorted order and their names stored in\n"
    "      the attribute class_names), or float targets with --regression (the label\n"
    "      column) or --target-columns (regression implied; a --label-column given too\n"
    "      becomes one more target).  --val-fraction moves a random part (picked by\n"
    "      --seed) to /val.\n"
    "  synthetic (--classes C | --regression K) --features D --samples N [--val NV]\n"
    "      [--seed S] -o OUT.h5\n"
    "      A generated task: Gaussian clusters per class in a random low-dimensional\n"
    "      subspace through a fixed random nonlinearity (deterministic from the seed);\n"
    "      --regression K makes K float targets instead of labels.\n"
    "  split IN.h5 --shards K -o PREFIX\n"
    "      PREFIX-0.h5 ... PREFIX-<K-1>.h5, contiguous parts of /train with the same\n"
    "      attributes; /val goes with the first shard only.\n"
    "  info FILE.h5 [MORE.h5 ...]\n"
    "      Shapes, types, chunking, statistics and label histogram, and whether the\n"
    "      files (as shards, in this order) are a valid input deck: exits non-zero and\n"
    "      says why if not (includes the non-finite check).\n"
    "\n"
    "Every writer stores per-channel (images) or per-feature mean/std attributes,\n"
    "chunks along the sample dimension (about 128 KiB per chunk, at most 4096\n"
    "chunks, uncompressed),\n"
    "checks the result as an input deck and writes atomically (temporary file, then\n"
    "rename).  Options: -h/--help, -V/--version.\n";

/* ---- options ---- */

const char *prep_opt(int argc, char **argv, int *i, const char *name, ddp_status_t *s)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *s = ddp_fail(DDP_ERR_USAGE, "option %s needs a value", name);
        return NULL;
    }
    *i += 1;
    return argv[*i];
}

ddp_status_t prep_int(const char *opt, const char *v, int64_t lo, int64_t hi, int64_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end != '\0' || x < lo || x > hi)
        return ddp_fail(DDP_ERR_USAGE, "%s: '%s' is not an integer in [%lld, %lld]", opt, v,
                        (long long)lo, (long long)hi);
    *out = x;
    return DDP_OK;
}

/* ---- writing ---- */

hsize_t prep_chunk_rows(size_t row_bytes, hsize_t n)
{
    hsize_t rows = (hsize_t)((128u << 10) / (row_bytes ? row_bytes : 1));
    if (rows < 1) rows = 1;
    /* at most PREP_MAX_CHUNKS chunks (ddptrain's direct reads need each
     * chunk's address; see deck_io_t) */
    if (rows < (n + PREP_MAX_CHUNKS - 1) / PREP_MAX_CHUNKS)
        rows = (n + PREP_MAX_CHUNKS - 1) / PREP_MAX_CHUNKS;
    if (n > 0 && rows > n) rows = n;
    return rows;
}

ddp_status_t prep_ds_create(prep_ds_t *w, hid_t file, const char *name, hid_t file_type,
                            hid_t mem_type, int rank, const hsize_t *dims)
{
    memset(w, 0, sizeof *w);
    snprintf(w->name, sizeof w->name, "%s", name);
    w->memtype = mem_type;
    w->rank = rank;
    memcpy(w->dims, dims, (size_t)rank * sizeof *dims);
    size_t row_bytes = H5Tget_size(file_type);
    hsize_t chunk[4];
    for (int i = 1; i < rank; i++) {
        chunk[i] = dims[i];
        row_bytes *= dims[i];
    }
    chunk[0] = prep_chunk_rows(row_bytes, dims[0]);
    h5_lock();
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (dims[0] > 0) H5Pset_chunk(dcpl, rank, chunk);
    hid_t sp = H5Screate_simple(rank, dims, NULL);
    w->ds = H5Dcreate2(file, name, file_type, sp, lcpl, dcpl, H5P_DEFAULT);
    H5Sclose(sp);
    H5Pclose(dcpl);
    H5Pclose(lcpl);
    h5_unlock();
    if (w->ds < 0) return ddp_fail(DDP_ERR_IO, "cannot create dataset %s", name);
    return DDP_OK;
}

ddp_status_t prep_ds_append(prep_ds_t *w, const void *rows, hsize_t n)
{
    if (n == 0) return DDP_OK;
    if (w->rows + n > w->dims[0])
        return ddp_fail(DDP_ERR_INTERNAL, "%s: writing past the end", w->name);
    hsize_t start[4] = {w->rows, 0, 0, 0}, count[4];
    count[0] = n;
    for (int i = 1; i < w->rank; i++) count[i] = w->dims[i];
    h5_lock();
    hid_t fs = H5Dget_space(w->ds);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    hid_t ms = H5Screate_simple(w->rank, count, NULL);
    herr_t rc = H5Dwrite(w->ds, w->memtype, ms, fs, H5P_DEFAULT, rows);
    H5Sclose(ms);
    H5Sclose(fs);
    h5_unlock();
    if (rc < 0) return ddp_fail(DDP_ERR_IO, "cannot write %s (disk full?)", w->name);
    w->rows += n;
    return DDP_OK;
}

void prep_ds_close(prep_ds_t *w)
{
    if (w->ds > 0) {
        h5_lock();
        H5Dclose(w->ds);
        h5_unlock();
    }
    w->ds = H5I_INVALID_HID;
}

ddp_status_t prep_stats_init(prep_stats_t *st, int nch, size_t per_ch)
{
    memset(st, 0, sizeof *st);
    st->nch = nch;
    st->per_ch = per_ch;
    size_t n = (size_t)nch;
    st->shift = ddp_calloc(n, sizeof(double), "statistics");
    st->sum = ddp_calloc(n, sizeof(double), "statistics");
    st->sumsq = ddp_calloc(n, sizeof(double), "statistics");
    st->isum = ddp_calloc(n, sizeof(uint64_t), "statistics");
    st->isumsq = ddp_calloc(n, sizeof(uint64_t), "statistics");
    if (!st->shift || !st->sum || !st->sumsq || !st->isum || !st->isumsq) {
        prep_stats_free(st);
        return DDP_ERR_NOMEM;
    }
    return DDP_OK;
}

void prep_stats_add_f32(prep_stats_t *st, const float *x, size_t nrows)
{
    size_t row = (size_t)st->nch * st->per_ch;
    for (size_t r = 0; r < nrows; r++) {
        const float *v = x + r * row;
        if (st->count == 0 && r == 0)
            for (int c = 0; c < st->nch; c++) st->shift[c] = v[(size_t)c * st->per_ch];
        for (int c = 0; c < st->nch; c++) {
            double s = 0, q = 0, k = st->shift[c];
            for (size_t e = 0; e < st->per_ch; e++) {
                double d = (double)v[(size_t)c * st->per_ch + e] - k;
                s += d;
                q += d * d;
            }
            st->sum[c] += s;
            st->sumsq[c] += q;
        }
    }
    st->count += (int64_t)(nrows * st->per_ch);
}

void prep_stats_add_u8(prep_stats_t *st, const uint8_t *x, size_t nrows)
{
    size_t row = (size_t)st->nch * st->per_ch;
    for (size_t r = 0; r < nrows; r++) {
        const uint8_t *v = x + r * row;
        for (int c = 0; c < st->nch; c++) {
            uint64_t s = 0, q = 0;
            for (size_t e = 0; e < st->per_ch; e++) {
                uint64_t u = v[(size_t)c * st->per_ch + e];
                s += u;
                q += u * u;
            }
            st->isum[c] += s;
            st->isumsq[c] += q;
        }
    }
    st->count += (int64_t)(nrows * st->per_ch);
}

ddp_status_t prep_stats_write(const prep_stats_t *st, hid_t ds, int u8, double scale)
{
    size_t n = (size_t)st->nch;
    float *mean = ddp_malloc(n * sizeof *mean, "statistics");
    float *sd = ddp_malloc(n * sizeof *sd, "statistics");
    if (!mean || !sd) {
        free(mean);
        free(sd);
        return DDP_ERR_NOMEM;
    }
    double cnt = st->count > 0 ? (double)st->count : 1;
    for (size_t c = 0; c < n; c++) {
        double m, var;
        if (u8) {
            m = (double)st->isum[c] / cnt;
            var = (double)st->isumsq[c] / cnt - m * m;
            m *= scale;
            var *= scale * scale;
        } else {
            double ms = st->sum[c] / cnt;
            m = st->shift[c] + ms;
            var = st->sumsq[c] / cnt - ms * ms;
        }
        double s = var > 0 ? sqrt(var) : 0;
        mean[c] = (float)m;
        sd[c] = s > 1e-12 * fmax(1.0, fabs(m)) ? (float)s : 1.0f;
    }
    ddp_status_t s = h5_attr_write_f32v(ds, "mean", mean, n);
    if (s == DDP_OK) s = h5_attr_write_f32v(ds, "std", sd, n);
    if (s == DDP_OK && u8) s = h5_attr_write_f64(ds, "scale", scale);
    free(mean);
    free(sd);
    return s;
}

void prep_stats_free(prep_stats_t *st)
{
    free(st->shift);
    free(st->sum);
    free(st->sumsq);
    free(st->isum);
    free(st->isumsq);
    memset(st, 0, sizeof *st);
}

ddp_status_t prep_finish(h5_atomic_t *a)
{
    herr_t rc = h5_close_file(a->file);
    a->file = H5I_INVALID_HID;
    if (rc < 0 || h5_atomic_write_failed(a)) { /* also a chunk lost at a dataset's close */
        h5_atomic_abandon(a);
        return ddp_fail(DDP_ERR_IO, "writing %s failed (disk full or quota?)", a->path);
    }
    char *paths[1] = {a->tmp};
    const char *splits[2] = {"train", "val"};
    ddp_status_t s = DDP_OK;
    for (int k = 0; k < 2 && s == DDP_OK; k++) {
        if (k == 1 && !deck_has_split(a->tmp, "val")) break;
        deck_t d;
        s = deck_open(&d, paths, 1, splits[k]);
        if (s == DDP_OK) {
            s = deck_check_finite(&d);
            deck_close(&d);
        }
    }
    if (s != DDP_OK) {
        h5_atomic_abandon(a);
        return ddp_fail_override(s,
                                 "%s was not written: the result is not a valid input "
                                 "deck: %s",
                                 a->path, ddp_error_message());
    }
    return h5_atomic_commit(a);
}

/* ---- main ---- */

int main(int argc, char **argv)
{
    h5_quiet();
    if (argc < 2) {
        fprintf(stderr, "ddptrain-prep: error: no command given (idx, csv, synthetic, split, "
                        "info); see ddptrain-prep --help\n");
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        fputs(usage_, stdout);
        return 0;
    }
    if (!strcmp(cmd, "-V") || !strcmp(cmd, "--version")) {
        ddp_print_version(stdout, "ddptrain-prep");
        return 0;
    }
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage_, stdout);
            return 0;
        }
    ddp_status_t (*fn)(int, char **) = NULL;
    if (!strcmp(cmd, "idx"))
        fn = prep_idx;
    else if (!strcmp(cmd, "csv"))
        fn = prep_csv;
    else if (!strcmp(cmd, "synthetic"))
        fn = prep_synthetic;
    else if (!strcmp(cmd, "split"))
        fn = prep_split;
    else if (!strcmp(cmd, "info"))
        fn = prep_info;
    if (!fn) {
        fprintf(stderr,
                "ddptrain-prep: error: unknown command '%s' (idx, csv, synthetic, "
                "split, info); see ddptrain-prep --help\n",
                cmd);
        return 2;
    }
    ddp_status_t s = fn(argc - 1, argv + 1);
    if (s != DDP_OK) {
        fprintf(stderr, "ddptrain-prep %s: error: %s\n", cmd, ddp_error_message());
        return ddp_exit_code(s);
    }
    return 0;
}
