/* deck.c -- input decks: open and validate HDF5 shards, coalesced batch
 * reads with normalisation, label scans and start-up checks (see deck.h). */
#include "deck.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "clock.h"
#include "h5util.h"
#include "log.h"
#include "memlimit.h"

/* Data sieve buffer of the files a deck opens.  When x is read through
 * HDF5 (compressed or otherwise not direct, see deck_io_t), uncompressed
 * chunks that bypass the chunk cache go through the sieve buffer, which
 * turns every small random sample read into a 64 KiB read by default; with
 * 0 the selected bytes are read directly. */
#ifndef DECK_SIEVE_BYTES
#define DECK_SIEVE_BYTES 0
#endif
/* Size of the HDF5 metadata cache of each file a deck opens. */
#ifndef DECK_MDC_BYTES
#define DECK_MDC_BYTES ((size_t)2 << 20)
#endif
/* Direct reads need every chunk's address.  HDF5 1.10 has no single-pass
 * chunk iterator (H5Dget_chunk_info walks the index from the start on each
 * call), so the table costs O(chunks^2) at open: 4096 chunks take ~0.1 s and
 * 32 KiB.  Datasets with more chunks are read through HDF5 (DECK_IO_RUNS);
 * ddptrain-prep grows its chunks beyond 128 KiB to stay within this.
 * Looking addresses up lazily does not help: H5Dget_chunk_info_by_coord
 * walks the index too (0.6 ms a call at 60000 chunks, measured). */
#ifndef DECK_DIRECT_MAX_CHUNKS
#define DECK_DIRECT_MAX_CHUNKS 4096
#endif
/* The label scan counts distinct labels below this bound exactly (a bitmap
 * of DECK_DISTINCT_MAX / 8 bytes); larger labels each count as distinct. */
#define DECK_DISTINCT_MAX ((int64_t)1 << 24)
/* A class count inferred from the labels (no attribute `classes`) is
 * suspect when it exceeds this many times the distinct labels, plus slack
 * for splits that miss a few classes. */
#define DECK_CLASSES_SUSPECT_RATIO 4
#define DECK_CLASSES_SUSPECT_SLACK 64
/* A dataset may leave at most this many of its declared bytes unwritten
 * (HDF5's fill value) unless at least half of it is stored. */
#define DECK_UNWRITTEN_MAX (64.0 * 1024 * 1024)
/* A scan over every sample (labels at open, deck_check_finite) that runs
 * longer than deck_progress_after_ seconds prints progress on rank 0, then
 * every DECK_PROGRESS_EVERY seconds. */
#define DECK_PROGRESS_EVERY 10.0
static double deck_progress_after_ = 3.0;
/* Labels are scanned at open in pieces of this many values. */
#define DECK_SCAN_PIECE ((hsize_t)1 << 16)
/* deck_check_finite reads about this many bytes at a time. */
#define DECK_CHECK_BYTES ((size_t)4 << 20)

/* ---- progress of long scans ---------------------------------------------- */

typedef struct scan_progress {
    const char *what; /* "the labels of /train/y" */
    int64_t total;    /* samples to scan */
    double start, next;
} scan_progress_t;

void deck_set_progress_after(double seconds)
{
    deck_progress_after_ = seconds;
}

static void progress_begin_(scan_progress_t *p, const char *what, int64_t total)
{
    p->what = what;
    p->total = total;
    p->start = clock_seconds();
    p->next = p->start + deck_progress_after_;
}

static void progress_at_(scan_progress_t *p, int64_t done)
{
    double now = clock_seconds();
    if (now < p->next) return;
    p->next = now + DECK_PROGRESS_EVERY;
    log_info("  scanning %s: %lld of %lld samples (%.0f%%), %.0f s so far", p->what,
             (long long)done, (long long)p->total,
             p->total > 0 ? 100.0 * (double)done / (double)p->total : 100.0, now - p->start);
}

/* ---- opening ------------------------------------------------------------ */

static const char *dtype_name_(deck_dtype_t t)
{
    return t == DECK_U8 ? "uint8" : "float32";
}

/* "[28,28] uint8" for a sample shape (dims without the sample dimension). */
static void shape_str_(const hsize_t *dims, int rank, const char *type, char *buf, size_t n)
{
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < rank && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%llu", i ? "," : "", (unsigned long long)dims[i]);
    if (o < n) snprintf(buf + o, n - o, "] %s", type);
}

/* Read local rows [first, first + cnt) of ds into buf. */
static herr_t read_range_(hid_t ds, hid_t memtype, hsize_t first, hsize_t cnt, void *buf)
{
    hid_t fs = H5Dget_space(ds);
    hsize_t dims[H5S_MAX_RANK], start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
    int rank = H5Sget_simple_extent_dims(fs, dims, NULL);
    hsize_t per_row = 1;
    for (int i = 1; i < rank; i++) {
        count[i] = dims[i];
        per_row *= dims[i];
    }
    start[0] = first;
    count[0] = cnt;
    (void)per_row;
    herr_t rc = H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
    /* the same shape in memory as in the file: HDF5's fast path */
    hid_t ms = H5Screate_simple(rank, count, NULL);
    if (rc >= 0) rc = H5Dread(ds, memtype, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc;
}

/* Open a dataset with a chunk cache that suits whole-sample reads: off for
 * uncompressed chunks (direct reads of the selection), a few chunks for
 * compressed ones (each chunk is decompressed once per H5Dread, and a
 * sequential reader re-uses the chunk a batch boundary splits). */
static hid_t dataset_open_(hid_t file, const char *name)
{
    hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
    if (ds < 0) return ds;
    hid_t dcpl = H5Dget_create_plist(ds);
    int chunked = H5Pget_layout(dcpl) == H5D_CHUNKED;
    int filters = chunked ? H5Pget_nfilters(dcpl) : 0;
    size_t chunk_bytes = 0;
    if (chunked) {
        hsize_t cd[H5S_MAX_RANK];
        int r = H5Pget_chunk(dcpl, H5S_MAX_RANK, cd);
        hid_t t = H5Dget_type(ds);
        chunk_bytes = H5Tget_size(t);
        H5Tclose(t);
        for (int i = 0; i < r; i++) chunk_bytes *= cd[i];
    }
    H5Pclose(dcpl);
    if (!chunked) return ds;
    H5Dclose(ds);
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    if (filters > 0) {
        size_t bytes = 4 * chunk_bytes;
        if (bytes < ((size_t)1 << 20)) bytes = (size_t)1 << 20;
        H5Pset_chunk_cache(dapl, 521, bytes, 1.0);
    } else {
        H5Pset_chunk_cache(dapl, 0, 0, 1.0);
    }
    ds = H5Dopen2(file, name, dapl);
    H5Pclose(dapl);
    return ds;
}

/* What fraction of a dataset's storage was ever written: allocated chunks
 * over all its chunks (chunked layout), allocated bytes over declared
 * bytes (contiguous), 1 for compact data.  HDF5 returns the fill value for
 * the rest, so a header can declare 10^12 samples in a file of a few KiB.
 * (Caller holds the HDF5 lock.)  -1 when HDF5 cannot tell. */
static double stored_fraction_(hid_t ds, const hsize_t *dims, int rank, double declared)
{
    hid_t dcpl = H5Dget_create_plist(ds);
    if (dcpl < 0) return -1;
    H5D_layout_t lay = H5Pget_layout(dcpl);
    double frac = 1;
    if (lay == H5D_CHUNKED) {
        hsize_t cd[H5S_MAX_RANK];
        int cr = H5Pget_chunk(dcpl, H5S_MAX_RANK, cd);
        double total = 1;
        for (int i = 0; i < cr && i < rank; i++)
            total *= cd[i] ? ceil((double)dims[i] / (double)cd[i]) : 1;
        hid_t sp = H5Dget_space(ds);
        hsize_t stored = 0;
        frac = sp >= 0 && H5Dget_num_chunks(ds, sp, &stored) >= 0 ? (double)stored / total : -1;
        if (sp >= 0) H5Sclose(sp);
    } else if (lay == H5D_CONTIGUOUS) {
        frac = declared > 0 ? (double)H5Dget_storage_size(ds) / declared : 1;
    }
    H5Pclose(dcpl);
    return frac;
}

/* Refuse a dataset whose declared size the file cannot hold: more than
 * DECK_UNWRITTEN_MAX bytes never written, and less than half of it stored.
 * (Partly written small datasets are read as HDF5's fill value, 0.)  Checked
 * before anything is allocated or scanned by the declared size. */
static ddp_status_t stored_check_(const char *path, hid_t ds, const char *name, const hsize_t *dims,
                                  int rank)
{
    h5_lock();
    hid_t t = H5Dget_type(ds);
    double declared = t >= 0 ? (double)H5Tget_size(t) : 1;
    if (t >= 0) H5Tclose(t);
    for (int i = 0; i < rank; i++) declared *= (double)dims[i];
    double frac = stored_fraction_(ds, dims, rank, declared);
    h5_unlock();
    if (frac < 0 || frac >= 0.5 || declared * (1 - frac) <= DECK_UNWRITTEN_MAX) return DDP_OK;
    char shape[128];
    shape_str_(dims, rank, "", shape, sizeof shape);
    shape[strlen(shape) - 1] = 0; /* the trailing space of an empty type */
    double gib = declared / (1024.0 * 1024.0 * 1024.0);
    return ddp_fail(DDP_ERR_INPUT,
                    "%s: dataset %s declares %s (%.4g GiB) but only %.2g%% of it is stored in "
                    "the file (the rest was never written); the header is wrong or the file "
                    "was not finished: re-create it (ddptrain-prep)",
                    path, name, shape, gib, 100.0 * frac);
}

/* Direct reads of one dataset (see deck_io_t). */
typedef struct deck_direct {
    int64_t chunk_rows; /* rows per chunk (all rows if contiguous) */
    int64_t nchunks;
    uint64_t *addr; /* [nchunks] file address; HADDR_UNDEF: never written */
} deck_direct_t;

/* Can rows of ds be read at their file addresses, as memory type mt?
 * (Caller holds the HDF5 lock.) */
static deck_direct_t *direct_make_(hid_t ds, hid_t mt, int64_t n)
{
    hid_t t = H5Dget_type(ds);
    int ok = mt == H5T_NATIVE_UINT8 ? H5Tget_class(t) == H5T_INTEGER && H5Tget_size(t) == 1
                                    : H5Tequal(t, mt) > 0;
    H5Tclose(t);
    if (!ok) return NULL;
    deck_direct_t *dd = calloc(1, sizeof *dd);
    if (!dd) return NULL;
    hid_t dcpl = H5Dget_create_plist(ds);
    H5D_layout_t lay = H5Pget_layout(dcpl);
    if (lay == H5D_CONTIGUOUS) {
        haddr_t a = H5Dget_offset(ds);
        ok = a != HADDR_UNDEF;
        dd->chunk_rows = n;
        dd->nchunks = 1;
    } else if (lay == H5D_CHUNKED && H5Pget_nfilters(dcpl) == 0) {
        hsize_t cd[H5S_MAX_RANK], xd[H5S_MAX_RANK];
        int cr = H5Pget_chunk(dcpl, H5S_MAX_RANK, cd);
        hid_t sp = H5Dget_space(ds);
        int xr = H5Sget_simple_extent_dims(sp, xd, NULL);
        H5Sclose(sp);
        ok = cr == xr && cd[0] >= 1;
        for (int i = 1; ok && i < xr; i++) ok = cd[i] == xd[i]; /* whole samples per chunk */
        if (ok) {
            dd->chunk_rows = (int64_t)cd[0];
            dd->nchunks = (n + dd->chunk_rows - 1) / dd->chunk_rows;
            ok = dd->nchunks <= DECK_DIRECT_MAX_CHUNKS;
        }
    } else {
        ok = 0;
    }
    H5Pclose(dcpl);
    if (ok) dd->addr = malloc((size_t)dd->nchunks * sizeof *dd->addr);
    ok = ok && dd->addr;
    if (ok && lay == H5D_CONTIGUOUS) {
        dd->addr[0] = H5Dget_offset(ds);
    } else if (ok) {
        for (int64_t c = 0; c < dd->nchunks; c++) dd->addr[c] = HADDR_UNDEF;
        hid_t sp = H5Dget_space(ds);
        hsize_t stored = 0;
        ok = H5Dget_num_chunks(ds, sp, &stored) >= 0;
        for (hsize_t i = 0; ok && i < stored; i++) {
            hsize_t off[H5S_MAX_RANK], size;
            haddr_t a;
            unsigned mask;
            ok = H5Dget_chunk_info(ds, sp, i, off, &mask, &a, &size) >= 0 &&
                 off[0] / (hsize_t)dd->chunk_rows < (hsize_t)dd->nchunks;
            if (ok) dd->addr[off[0] / (hsize_t)dd->chunk_rows] = a;
        }
        H5Sclose(sp);
    }
    if (!ok) {
        free(dd->addr);
        free(dd);
        return NULL;
    }
    return dd;
}

static void direct_free_(deck_direct_t *dd)
{
    if (dd) free(dd->addr);
    free(dd);
}

/* Set up direct reads of x and y for a shard where possible (never fails:
 * ineligible datasets are read through HDF5). */
static void direct_init_(deck_shard_t *sh, const deck_t *d)
{
    h5_lock();
    int ok = 1;
    hsize_t ub = 1;
    hid_t fcpl = H5Fget_create_plist(sh->file);
    if (fcpl < 0 || H5Pget_userblock(fcpl, &ub) < 0 || ub != 0) ok = 0;
    if (fcpl >= 0) H5Pclose(fcpl);
    hid_t fapl = ok ? H5Fget_access_plist(sh->file) : H5I_INVALID_HID;
    if (fapl < 0 || H5Pget_driver(fapl) != H5FD_SEC2) ok = 0;
    if (fapl >= 0) H5Pclose(fapl);
    if (ok) {
        sh->direct_x =
            direct_make_(sh->x, d->dtype == DECK_U8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, sh->n);
        sh->direct_y =
            direct_make_(sh->y, d->regression ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32, sh->n);
    }
    h5_unlock();
    if (sh->direct_x || sh->direct_y) sh->fd = open(sh->path, O_RDONLY | O_CLOEXEC);
    if (sh->fd < 0) {
        direct_free_(sh->direct_x);
        direct_free_(sh->direct_y);
        sh->direct_x = sh->direct_y = NULL;
    }
}

/* Open /<split>/x and /<split>/y of one file and check them against the
 * shards opened before.  *skip is set when a non-train split is absent. */
static ddp_status_t shard_open_(deck_t *d, const char *path, int *skip)
{
    char xname[32], yname[32];
    snprintf(xname, sizeof xname, "/%s/x", d->split);
    snprintf(yname, sizeof yname, "/%s/y", d->split);
    *skip = 0;

    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    h5_lock();
    H5Pset_sieve_buf_size(fapl, DECK_SIEVE_BYTES);
    /* a metadata cache of bounded size: the chunk index of a large file
     * would otherwise grow it with N (up to 32 MiB by default) */
    H5AC_cache_config_t mdc;
    mdc.version = H5AC__CURR_CACHE_CONFIG_VERSION;
    if (H5Pget_mdc_config(fapl, &mdc) >= 0) {
        mdc.set_initial_size = 1;
        mdc.initial_size = DECK_MDC_BYTES;
        mdc.min_size = DECK_MDC_BYTES / 2;
        mdc.max_size = DECK_MDC_BYTES;
        H5Pset_mdc_config(fapl, &mdc);
    }
    h5_unlock();
    hid_t f;
    ddp_status_t s = h5_open_read_fapl(path, fapl, &f);
    h5_lock();
    H5Pclose(fapl);
    h5_unlock();
    if (s != DDP_OK) return s;

    int hasx = h5_exists(f, xname), hasy = h5_exists(f, yname);
    if (!hasx && strcmp(d->split, "train") != 0 && !hasy) {
        h5_lock();
        H5Fclose(f);
        h5_unlock();
        *skip = 1;
        return DDP_OK;
    }
    deck_shard_t *sh = &d->shards[d->nshards];
    memset(sh, 0, sizeof *sh);
    sh->file = f;
    sh->x = sh->y = H5I_INVALID_HID;
    sh->fd = -1;
    sh->path = strdup(path);
    d->nshards++;
    if (!sh->path) return ddp_fail(DDP_ERR_NOMEM, "out of memory opening %s", path);
    if (!hasx)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: no dataset %s; an input deck holds %s [N, ...] "
                        "samples and %s [N] labels (make one with ddptrain-prep)",
                        path, xname, xname, yname);
    if (!hasy)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: no dataset %s (labels or targets for %s); make the "
                        "deck with ddptrain-prep",
                        path, yname, xname);

    h5_lock();
    sh->x = dataset_open_(f, xname);
    sh->y = dataset_open_(f, yname);
    hsize_t xd[H5S_MAX_RANK] = {0}, yd[H5S_MAX_RANK] = {0};
    int xr = -1, yr = -1;
    H5T_class_t xc = H5T_NO_CLASS, yc = H5T_NO_CLASS;
    size_t xsz = 0;
    H5T_sign_t xsign = H5T_SGN_ERROR;
    if (sh->x >= 0) {
        hid_t sp = H5Dget_space(sh->x), t = H5Dget_type(sh->x);
        xr = H5Sget_simple_extent_dims(sp, xd, NULL);
        xc = H5Tget_class(t);
        xsz = H5Tget_size(t);
        if (xc == H5T_INTEGER) xsign = H5Tget_sign(t);
        H5Tclose(t);
        H5Sclose(sp);
    }
    if (sh->y >= 0) {
        hid_t sp = H5Dget_space(sh->y), t = H5Dget_type(sh->y);
        yr = H5Sget_simple_extent_dims(sp, yd, NULL);
        yc = H5Tget_class(t);
        H5Tclose(t);
        H5Sclose(sp);
    }
    h5_unlock();

    if (sh->x < 0 || xr < 0)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: cannot open dataset %s (corrupt file?); re-create "
                        "it with ddptrain-prep",
                        path, xname);
    if (sh->y < 0 || yr < 0)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: cannot open dataset %s (corrupt file?); re-create "
                        "it with ddptrain-prep",
                        path, yname);
    deck_dtype_t dt;
    if (xc == H5T_INTEGER && xsz == 1 && xsign == H5T_SGN_NONE)
        dt = DECK_U8;
    else if (xc == H5T_FLOAT)
        dt = DECK_F32;
    else
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: dataset %s must be uint8 or float32 (it holds "
                        "%zu-byte %s values)",
                        path, xname, xsz, xc == H5T_INTEGER ? "integer" : "non-numeric");
    if (xr < 2 || xr > 4)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: dataset %s has rank %d; expected [N, features], "
                        "[N, H, W] or [N, C, H, W]",
                        path, xname, xr);
    if (xd[0] == 0) return ddp_fail(DDP_ERR_INPUT, "%s: dataset %s holds no samples", path, xname);
    if (yd[0] != xd[0] || yr < 1)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: %s has %llu samples but %s has %llu; x and y must "
                        "have the same length",
                        path, xname, (unsigned long long)xd[0], yname,
                        (unsigned long long)(yr < 1 ? 0 : yd[0]));
    int regression, targets = 0;
    if (yc == H5T_INTEGER && (yr == 1 || (yr == 2 && yd[1] == 1))) {
        regression = 0;
    } else if (yc == H5T_FLOAT && yr <= 2) {
        regression = 1;
        targets = yr == 1 ? 1 : (int)yd[1];
        if (targets < 1)
            return ddp_fail(DDP_ERR_INPUT, "%s: %s has no target columns", path, yname);
    } else {
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: %s must be [N] integer class labels or [N, k] "
                        "float targets",
                        path, yname);
    }

    /* sizes the rest of the code holds in an int, and storage the file can
     * back, before anything is allocated or scanned by these sizes */
    double per_sample = 1;
    for (int i = 1; i < xr; i++) per_sample *= (double)xd[i];
    if (per_sample > INT32_MAX)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: samples of %s have %.0f values; at most %d are supported (is the "
                        "header right?)",
                        path, xname, per_sample, INT32_MAX);
    if (regression && yr == 2 && yd[1] > INT32_MAX)
        return ddp_fail(DDP_ERR_INPUT, "%s: %s has %llu target columns; at most %d are supported",
                        path, yname, (unsigned long long)yd[1], INT32_MAX);
    DDP_TRY(stored_check_(path, sh->x, xname, xd, xr));
    DDP_TRY(stored_check_(path, sh->y, yname, yd, yr));

    act_shape_t shape;
    if (xr == 2)
        shape = (act_shape_t){(int)xd[1], 1, 1, 0};
    else if (xr == 3)
        shape = (act_shape_t){1, (int)xd[1], (int)xd[2], 1};
    else
        shape = (act_shape_t){(int)xd[1], (int)xd[2], (int)xd[3], 1};

    sh->n = (int64_t)xd[0];
    if (d->nshards == 1) {
        d->dtype = dt;
        d->xrank = xr;
        d->yrank = yr;
        d->shape = shape;
        d->sample_numel = act_numel(shape);
        d->sample_bytes = d->sample_numel * (dt == DECK_U8 ? 1 : sizeof(float));
        d->regression = regression;
        d->targets = targets;
        if (d->sample_numel == 0)
            return ddp_fail(DDP_ERR_INPUT, "%s: dataset %s has empty samples", path, xname);
    } else {
        const deck_shard_t *s0 = &d->shards[0];
        hsize_t d0[4] = {0};
        int r0 = d->xrank - 1;
        if (d->xrank == 2)
            d0[0] = (hsize_t)d->shape.c;
        else if (d->xrank == 3) {
            d0[0] = (hsize_t)d->shape.h;
            d0[1] = (hsize_t)d->shape.w;
        } else {
            d0[0] = (hsize_t)d->shape.c;
            d0[1] = (hsize_t)d->shape.h;
            d0[2] = (hsize_t)d->shape.w;
        }
        int same = xr == d->xrank && dt == d->dtype;
        for (int i = 0; same && i < r0; i++) same = d0[i] == xd[i + 1];
        if (!same) {
            char a[96], b[96];
            shape_str_(d0, r0, dtype_name_(d->dtype), a, sizeof a);
            shape_str_(xd + 1, xr - 1, dtype_name_(dt), b, sizeof b);
            return ddp_fail(DDP_ERR_INPUT,
                            "%s: %s samples are %s but %s has %s; the shards of "
                            "one deck must agree",
                            s0->path, xname, a, path, b);
        }
        if (regression != d->regression || targets != d->targets)
            return ddp_fail(DDP_ERR_INPUT,
                            "%s: %s holds %s but %s holds %s; the shards of one "
                            "deck must agree",
                            s0->path, yname, d->regression ? "float targets" : "integer labels",
                            path, regression ? "float targets" : "integer labels");
    }
    sh->first = d->n;
    d->n += sh->n;
    direct_init_(sh, d);
    return DDP_OK;
}

/* Does attribute `name` of shard k's x agree with shard 0's (both absent,
 * or the same values)?  The deck normalises every shard with the first
 * shard's mean, std and scale, so shards that disagree are refused. */
static ddp_status_t attr_agree_(const deck_t *d, int k, const char *name, const char *xname)
{
    const deck_shard_t *s0 = &d->shards[0], *sk = &d->shards[k];
    int h0 = h5_attr_exists(s0->x, name), hk = h5_attr_exists(sk->x, name);
    if (!h0 && !hk) return DDP_OK;
    if (h0 != hk)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: %s has attribute %s but %s has none; every shard is normalised "
                        "with the first shard's mean, std and scale: give the shards the same "
                        "attributes (ddptrain-prep split copies them)",
                        h0 ? s0->path : sk->path, xname, name, h0 ? sk->path : s0->path);
    size_t cap = d->sample_numel, n0 = cap, nk = cap;
    float *v0 = ddp_malloc(cap * sizeof *v0, "normalisation"),
          *vk = ddp_malloc(cap * sizeof *vk, "normalisation");
    ddp_status_t s = v0 && vk ? DDP_OK : DDP_ERR_NOMEM;
    if (s == DDP_OK && h5_attr_read_f32v(sk->x, name, vk, &nk) != DDP_OK)
        s = ddp_fail_override(DDP_ERR_INPUT,
                              "%s: attribute %s of %s is not a vector of at most %zu numbers",
                              sk->path, name, xname, cap);
    if (s == DDP_OK && h5_attr_read_f32v(s0->x, name, v0, &n0) != DDP_OK)
        s = DDP_ERR_INTERNAL; /* read once already by stats_ */
    if (s == DDP_OK && n0 != nk)
        s = ddp_fail(DDP_ERR_INPUT,
                     "%s: attribute %s of %s has %zu values but %s's has %zu; every shard "
                     "is normalised with the first shard's mean, std and scale: give the "
                     "shards the same attributes (ddptrain-prep split copies them)",
                     sk->path, name, xname, nk, s0->path, n0);
    for (size_t i = 0; s == DDP_OK && i < n0; i++)
        if (memcmp(&v0[i], &vk[i], sizeof v0[i]) != 0)
            s = ddp_fail(DDP_ERR_INPUT,
                         "%s: attribute %s of %s differs from %s's (value %zu: %g, not %g); "
                         "every shard is normalised with the first shard's mean, std and "
                         "scale: give the shards the same attributes (ddptrain-prep split "
                         "copies them)",
                         sk->path, name, xname, s0->path, i, (double)vk[i], (double)v0[i]);
    free(v0);
    free(vk);
    return s;
}

/* mean / std / scale from the first shard's x (or its /train/x for val). */
static ddp_status_t stats_(deck_t *d)
{
    const deck_shard_t *sh = &d->shards[0];
    char xname[32];
    snprintf(xname, sizeof xname, "/%s/x", d->split);
    hid_t obj = sh->x, own = H5I_INVALID_HID;
    if (strcmp(d->split, "train") != 0 && !h5_attr_exists(obj, "mean") &&
        !h5_attr_exists(obj, "std") && !h5_attr_exists(obj, "scale") &&
        h5_exists(sh->file, "/train/x")) {
        h5_lock();
        own = H5Dopen2(sh->file, "/train/x", H5P_DEFAULT);
        h5_unlock();
        if (own >= 0) {
            obj = own;
            snprintf(xname, sizeof xname, "/train/x");
        }
    }
    ddp_status_t s = DDP_OK;
    size_t numel = d->sample_numel;
    size_t nmean = numel, nstd = numel;
    float *mean = ddp_malloc(numel * sizeof *mean, "normalisation"),
          *sd = ddp_malloc(numel * sizeof *sd, "normalisation");
    d->norm_a = ddp_malloc(numel * sizeof *d->norm_a, "normalisation");
    d->norm_b = ddp_malloc(numel * sizeof *d->norm_b, "normalisation");
    if (!mean || !sd || !d->norm_a || !d->norm_b) {
        free(mean);
        free(sd);
        s = DDP_ERR_NOMEM;
        goto out;
    }
    double scale = d->dtype == DECK_U8 ? 1.0 / 255.0 : 1.0;
    if (d->dtype == DECK_U8 && h5_attr_exists(obj, "scale")) {
        s = h5_attr_read_f64(obj, "scale", &scale);
        if (s == DDP_OK && !(isfinite(scale) && scale > 0))
            s = ddp_fail(DDP_ERR_INPUT,
                         "%s: attribute scale of %s is %g; it must be a positive "
                         "number",
                         sh->path, xname, scale);
        else if (s != DDP_OK)
            s = ddp_fail_override(DDP_ERR_INPUT, "%s: attribute scale of %s must be one number",
                                  sh->path, xname);
    }
    int hm = h5_attr_exists(obj, "mean"), hs = h5_attr_exists(obj, "std");
    for (int k = 0; s == DDP_OK && k < 2; k++) {
        const char *which = k ? "std" : "mean";
        if (!(k ? hs : hm)) continue;
        s = h5_attr_read_f32v(obj, which, k ? sd : mean, k ? &nstd : &nmean);
        if (s != DDP_OK)
            s = ddp_fail_override(DDP_ERR_INPUT,
                                  "%s: attribute %s of %s is not a vector "
                                  "of at most %zu numbers",
                                  sh->path, which, xname, numel);
    }
    if (s == DDP_OK) {
        if (!hm) {
            nmean = 1;
            mean[0] = 0;
        }
        if (!hs) {
            nstd = 1;
            sd[0] = 1;
        }
        size_t c = (size_t)d->shape.c;
        if (nmean != nstd && hm && hs)
            s = ddp_fail(DDP_ERR_INPUT,
                         "%s: attributes mean (%zu values) and std (%zu values) "
                         "of %s differ in length",
                         sh->path, nmean, nstd, xname);
        for (int k = 0; s == DDP_OK && k < 2; k++) {
            size_t m = k ? nstd : nmean;
            if (m != 1 && m != c && m != numel)
                s = ddp_fail(DDP_ERR_INPUT,
                             "%s: attribute %s of %s has %zu values; expected 1, "
                             "one per channel (%zu) or one per element (%zu)",
                             sh->path, k ? "std" : "mean", xname, m, c, numel);
        }
        for (size_t i = 0; s == DDP_OK && i < nmean; i++)
            if (!isfinite(mean[i]))
                s = ddp_fail(DDP_ERR_INPUT,
                             "%s: attribute mean of %s has a non-finite value "
                             "at %zu",
                             sh->path, xname, i);
        for (size_t i = 0; s == DDP_OK && i < nstd; i++)
            if (!(isfinite(sd[i]) && sd[i] > 0))
                s = ddp_fail(DDP_ERR_INPUT,
                             "%s: attribute std of %s has %g at %zu; every std "
                             "must be positive and finite",
                             sh->path, xname, (double)sd[i], i);
    }
    if (s == DDP_OK) {
        size_t hw = (size_t)d->shape.h * (size_t)d->shape.w;
        for (size_t e = 0; e < numel; e++) {
            size_t im = nmean == 1 ? 0 : nmean == numel ? e : e / hw;
            size_t is = nstd == 1 ? 0 : nstd == numel ? e : e / hw;
            d->norm_a[e] = (float)(scale / sd[is]);
            d->norm_b[e] = (float)(-(double)mean[im] / sd[is]);
        }
        /* stats per sample or per channel: convert with scalars (faster) */
        if (nmean == 1 && nstd == 1)
            d->norm_run = numel;
        else if (d->shape.image && (nmean == 1 || nmean == (size_t)d->shape.c) &&
                 (nstd == 1 || nstd == (size_t)d->shape.c))
            d->norm_run = hw;
        else
            d->norm_run = 0;
        d->scale = (float)scale;
        d->nstat = (int)(nmean > nstd ? nmean : nstd);
        /* keep mean/std in deck_t at the common length */
        float *m2 = ddp_malloc((size_t)d->nstat * sizeof *m2, "normalisation");
        float *s2 = ddp_malloc((size_t)d->nstat * sizeof *s2, "normalisation");
        if (!m2 || !s2) {
            free(m2);
            free(s2);
            s = DDP_ERR_NOMEM;
        } else {
            for (int i = 0; i < d->nstat; i++) {
                m2[i] = mean[nmean == 1 ? 0 : i];
                s2[i] = sd[nstd == 1 ? 0 : i];
            }
            d->mean = m2;
            d->std = s2;
        }
    }
    free(mean);
    free(sd);
    snprintf(xname, sizeof xname, "/%s/x", d->split);
    for (int k = 1; s == DDP_OK && k < d->nshards; k++) {
        s = attr_agree_(d, k, "mean", xname);
        if (s == DDP_OK) s = attr_agree_(d, k, "std", xname);
        if (s == DDP_OK && d->dtype == DECK_U8) s = attr_agree_(d, k, "scale", xname);
    }
out:
    if (own >= 0) {
        h5_lock();
        H5Dclose(own);
        h5_unlock();
    }
    return s;
}

/* Scan the labels of every shard (bounded memory): range checks and the
 * number of classes. */
static ddp_status_t scan_labels_(deck_t *d)
{
    char yname[32];
    snprintf(yname, sizeof yname, "/%s/y", d->split);
    d->label_min = INT64_MAX;
    d->label_max = -1;
    int64_t attr_classes = 0;
    int attr_shard = -1;
    hsize_t piece = DECK_SCAN_PIECE;
    int64_t *buf = ddp_malloc((size_t)piece * sizeof *buf, "the label scan");
    /* distinct labels below DECK_DISTINCT_MAX, one bit each (pages that
     * stay zero are never touched); labels above it count as distinct */
    unsigned char *seen = calloc(DECK_DISTINCT_MAX / 8, 1);
    int64_t distinct = 0, above = 0;
    if (!buf || !seen) {
        free(buf);
        free(seen);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory for the label scan");
    }
    ddp_status_t s = DDP_OK;
    char what[64];
    snprintf(what, sizeof what, "the labels of %s", yname);
    scan_progress_t prog;
    progress_begin_(&prog, what, d->n);
    for (int k = 0; k < d->nshards && s == DDP_OK; k++) {
        deck_shard_t *sh = &d->shards[k];
        if (h5_attr_exists(sh->y, "classes")) {
            int64_t c;
            double f = NAN;
            s = h5_attr_read_i64(sh->y, "classes", &c);
            if (s != DDP_OK) h5_attr_read_f64(sh->y, "classes", &f); /* for the message */
            if (s != DDP_OK || c < 1 || c > INT32_MAX) {
                char val[48] = "";
                if (s == DDP_OK)
                    snprintf(val, sizeof val, " is %lld;", (long long)c);
                else if (!isnan(f))
                    snprintf(val, sizeof val, " is %.17g;", f);
                s = ddp_fail_override(DDP_ERR_INPUT,
                                      "%s: attribute classes of %s%s it must be a "
                                      "positive integer (the number of classes, at most %d)",
                                      sh->path, yname, val, INT32_MAX);
                break;
            }
            if (c > attr_classes) {
                attr_classes = c;
                attr_shard = k;
            }
        }
        for (hsize_t off = 0; off < (hsize_t)sh->n && s == DDP_OK; off += piece) {
            hsize_t cnt = (hsize_t)sh->n - off < piece ? (hsize_t)sh->n - off : piece;
            progress_at_(&prog, sh->first + (int64_t)off);
            h5_lock();
            herr_t rc = read_range_(sh->y, H5T_NATIVE_INT64, off, cnt, buf);
            h5_unlock();
            if (rc < 0) {
                s = ddp_fail(DDP_ERR_INPUT,
                             "%s: cannot read %s samples [%llu, %llu) (truncated "
                             "or corrupt file?); re-create it with ddptrain-prep",
                             sh->path, yname, (unsigned long long)off,
                             (unsigned long long)(off + cnt));
                break;
            }
            for (hsize_t i = 0; i < cnt; i++) {
                int64_t v = buf[i];
                if (v < 0) {
                    s = ddp_fail(DDP_ERR_INPUT,
                                 "%s: %s sample %llu has label %lld; class labels "
                                 "must be 0, 1, ..., classes-1",
                                 sh->path, yname, (unsigned long long)(off + i), (long long)v);
                    break;
                }
                if (v > d->label_max) {
                    d->label_max = v;
                    d->label_max_shard = k;
                    d->label_max_row = (int64_t)(off + i);
                }
                if (v < d->label_min) d->label_min = v;
                if (v >= DECK_DISTINCT_MAX) {
                    above++;
                } else if (!(seen[v >> 3] & (1u << (v & 7)))) {
                    seen[v >> 3] |= (unsigned char)(1u << (v & 7));
                    distinct++;
                }
            }
        }
    }
    free(buf);
    free(seen);
    d->label_distinct = distinct + above;
    d->classes_inferred = attr_classes == 0;
    if (s != DDP_OK) return s;
    if (d->label_max >= INT32_MAX)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: %s holds label %lld; class labels must be "
                        "0..classes-1",
                        d->shards[d->label_max_shard].path, yname, (long long)d->label_max);
    if (attr_classes > 0 && d->label_max >= attr_classes)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: %s holds label %lld but its attribute classes "
                        "says %lld (from %s); labels must be 0..classes-1",
                        d->shards[d->label_max_shard].path, yname, (long long)d->label_max,
                        (long long)attr_classes, d->shards[attr_shard].path);
    d->classes = (int)(attr_classes > 0 ? attr_classes : d->label_max + 1);
    return DDP_OK;
}

/* The normalisation tables (stats_) and a batch of a few samples must fit
 * in the memory left: a header of 10^9 features would otherwise be
 * allocated (and touched) before any other check. */
static ddp_status_t memory_check_(const deck_t *d)
{
    const char *limit;
    memlimit_t l;
    memlimit_probe(&l, NULL, NULL);
    uint64_t avail = memlimit_available(&l, &limit);
    double need = (double)d->sample_numel * (6 * sizeof(float) + 8 * sizeof(float));
    if (need <= (double)avail) return DDP_OK;
    char a[32], b[32], c[32];
    return ddp_fail(DDP_ERR_NOMEM,
                    "%s: samples of /%s/x have %zu values (%s as float32 each); "
                    "normalising and reading them needs about %s, more than the %s this "
                    "process can still allocate (%s); is the header right?",
                    d->shards[0].path, d->split, d->sample_numel,
                    memlimit_format((double)d->sample_numel * sizeof(float), a, sizeof a),
                    memlimit_format(need, b, sizeof b), memlimit_format((double)avail, c, sizeof c),
                    limit);
}

ddp_status_t deck_open(deck_t *d, char *const *paths, int npaths, const char *split)
{
    memset(d, 0, sizeof *d);
    snprintf(d->split, sizeof d->split, "%s", split);
    if (npaths < 1 || !paths) return ddp_fail(DDP_ERR_USAGE, "no input file given");
    d->shards = ddp_calloc((size_t)npaths, sizeof *d->shards, "the input shards");
    if (!d->shards) return DDP_ERR_NOMEM;
    ddp_status_t s = DDP_OK;
    /* the same file twice (a repeated name, a link) would double its data */
    struct stat *seen = ddp_calloc((size_t)npaths, sizeof *seen, "the input shards");
    if (!seen) s = DDP_ERR_NOMEM;
    for (int i = 0; i < npaths && s == DDP_OK; i++) {
        if (stat(paths[i], &seen[i]) != 0) continue; /* shard_open_ says why */
        for (int j = 0; j < i && s == DDP_OK; j++)
            if (seen[j].st_ino == seen[i].st_ino && seen[j].st_dev == seen[i].st_dev &&
                seen[j].st_nlink > 0)
                s = ddp_fail(DDP_ERR_INPUT,
                             "%s: input file %d is the same file as input file %d (%s); "
                             "each shard may be given once (its samples would count twice)",
                             paths[i], i + 1, j + 1, paths[j]);
    }
    free(seen);
    for (int i = 0; i < npaths && s == DDP_OK; i++) {
        int skip;
        s = shard_open_(d, paths[i], &skip);
    }
    if (s == DDP_OK && d->nshards == 0)
        s = ddp_fail(DDP_ERR_INPUT, "%s: no dataset /%s/x in %s", paths[0], split,
                     npaths > 1 ? "any of the input files" : "the file");
    if (s == DDP_OK) s = memory_check_(d);
    if (s == DDP_OK) s = stats_(d);
    if (s == DDP_OK && !d->regression) s = scan_labels_(d);
    if (s != DDP_OK) deck_close(d);
    return s;
}

void deck_close(deck_t *d)
{
    h5_lock();
    for (int i = 0; i < d->nshards; i++) {
        deck_shard_t *sh = &d->shards[i];
        if (sh->x >= 0) H5Dclose(sh->x);
        if (sh->y >= 0) H5Dclose(sh->y);
        if (sh->file >= 0) H5Fclose(sh->file);
        if (sh->fd >= 0) close(sh->fd);
        direct_free_(sh->direct_x);
        direct_free_(sh->direct_y);
        free(sh->path);
    }
    h5_unlock();
    free(d->shards);
    free(d->mean);
    free(d->std);
    free(d->norm_a);
    free(d->norm_b);
    free(d->scratch);
    char split[sizeof d->split];
    memcpy(split, d->split, sizeof split);
    memset(d, 0, sizeof *d);
    memcpy(d->split, split, sizeof split);
}

/* ---- reading ------------------------------------------------------------ */

typedef struct pos_pair {
    int64_t idx; /* global sample index */
    int64_t pos; /* position in the batch */
} pos_pair_t;

static int pair_cmp_(const void *a, const void *b)
{
    const pos_pair_t *x = a, *y = b;
    if (x->idx != y->idx) return x->idx < y->idx ? -1 : 1;
    return (x->pos > y->pos) - (x->pos < y->pos);
}

static void *scratch_(deck_t *d, size_t bytes)
{
    if (bytes > d->scratch_bytes) {
        void *p = realloc(d->scratch, bytes);
        if (!p) {
            ddp_fail(DDP_ERR_NOMEM,
                     "out of memory allocating %zu bytes for a batch read; "
                     "reduce --batch",
                     bytes);
            return NULL;
        }
        d->scratch = p;
        d->scratch_bytes = bytes;
    }
    return d->scratch;
}

/* One run of consecutive local rows [start, start + cnt) of ds into buf,
 * the memory space shaped like the file selection (HDF5's fast path). */
static herr_t read_run_(hid_t ds, hid_t memtype, hsize_t start0, hsize_t cnt, void *buf)
{
    return read_range_(ds, memtype, start0, cnt, buf);
}

/* The union of the runs of consecutive local indices u[0..m) (global
 * indices minus base) in one H5Dread into buf (m packed rows). */
static herr_t read_union_(hid_t ds, hid_t memtype, const int64_t *u, int64_t m, int64_t base,
                          void *buf)
{
    hid_t fs = H5Dget_space(ds);
    hsize_t dims[H5S_MAX_RANK], start[H5S_MAX_RANK] = {0};
    int rank = H5Sget_simple_extent_dims(fs, dims, NULL);
    hsize_t count[H5S_MAX_RANK];
    size_t per_row = 1;
    for (int i = 1; i < rank; i++) {
        count[i] = dims[i];
        per_row *= dims[i];
    }
    herr_t rc = 0;
    H5S_seloper_t op = H5S_SELECT_SET;
    for (int64_t a = 0; a < m && rc >= 0;) {
        int64_t b = a + 1;
        while (b < m && u[b] == u[b - 1] + 1) b++;
        start[0] = (hsize_t)(u[a] - base);
        count[0] = (hsize_t)(b - a);
        rc = H5Sselect_hyperslab(fs, op, start, NULL, count, NULL);
        op = H5S_SELECT_OR;
        a = b;
    }
    hsize_t mdims[2] = {(hsize_t)m, per_row};
    hid_t ms = H5Screate_simple(2, mdims, NULL);
    if (rc >= 0) rc = H5Dread(ds, memtype, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc;
}

/* Run by run (one H5Dread each); on failure *lo, *hi name the run. */
static herr_t read_runs_(hid_t ds, hid_t memtype, const int64_t *u, int64_t m, int64_t base,
                         unsigned char *buf, size_t row, int64_t *lo, int64_t *hi)
{
    for (int64_t a = 0; a < m;) {
        int64_t b = a + 1;
        while (b < m && u[b] == u[b - 1] + 1) b++;
        if (read_run_(ds, memtype, (hsize_t)(u[a] - base), (hsize_t)(b - a),
                      buf + (size_t)a * row) < 0) {
            *lo = u[a] - base;
            *hi = u[b - 1] - base + 1;
            return -1;
        }
        a = b;
    }
    return 0;
}

/* File address of chunk c; 1: never written (fill value 0). */
static int chunk_addr_(const deck_direct_t *dd, int64_t c, uint64_t *addr)
{
    *addr = dd->addr[c];
    return *addr == HADDR_UNDEF ? 1 : 0;
}

static int pread_full_(int fd, unsigned char *p, size_t len, uint64_t off)
{
    while (len > 0) {
        ssize_t r = pread(fd, p, len, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        p += r;
        len -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/* Rows u[0..m) (global, sorted, unique) of x by pread at their addresses;
 * rows adjacent in the file (and in buf) are merged into one pread.  On
 * failure *lo, *hi name the local sample range. */
static int read_direct_(const deck_shard_t *sh, const deck_direct_t *dd, const int64_t *u,
                        int64_t m, unsigned char *buf, size_t row, int64_t *lo, int64_t *hi)
{
    uint64_t p_off = 0;
    size_t p_len = 0;
    unsigned char *p_dst = NULL;
    int64_t p_first = 0, p_last = 0;
    for (int64_t i = 0; i <= m; i++) {
        uint64_t off = 0;
        int state = 0;
        int64_t local = 0;
        if (i < m) {
            local = u[i] - sh->first;
            int64_t c = local / dd->chunk_rows;
            state = chunk_addr_(dd, c, &off);
            off += (uint64_t)(local - c * dd->chunk_rows) * row;
            if (state == 0 && p_len && p_off + p_len == off &&
                p_dst + p_len == buf + (size_t)i * row) {
                p_len += row;
                p_last = local;
                continue;
            }
        }
        if (p_len && pread_full_(sh->fd, p_dst, p_len, p_off) != 0) {
            *lo = p_first;
            *hi = p_last + 1;
            return -1;
        }
        p_len = 0;
        if (i == m) break;
        if (state == 1) { /* a chunk never written: HDF5's fill value */
            memset(buf + (size_t)i * row, 0, row);
            continue;
        }
        p_off = off;
        p_len = row;
        p_dst = buf + (size_t)i * row;
        p_first = p_last = local;
    }
    return 0;
}

int deck_set_io(deck_t *d, deck_io_t io)
{
    d->io = io;
    int n = 0;
    for (int i = 0; i < d->nshards; i++) n += d->shards[i].direct_x != NULL;
    return io == DECK_IO_AUTO || io == DECK_IO_DIRECT ? n : 0;
}

static ddp_status_t read_fail_(const deck_t *d, const deck_shard_t *sh, const char *what,
                               int64_t lo, int64_t hi)
{
    return ddp_fail(DDP_ERR_INPUT,
                    "%s: reading /%s/%s samples [%lld, %lld) failed (truncated "
                    "or corrupt file?); check the file with ddptrain-prep info and re-create it",
                    sh->path, d->split, what, (long long)lo, (long long)hi);
}

/* Read x rows u[0..m) of one shard into buf (m packed rows). */
static ddp_status_t read_x_(deck_t *d, deck_shard_t *sh, const int64_t *u, int64_t m,
                            unsigned char *buf)
{
    hid_t xt = d->dtype == DECK_U8 ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT;
    size_t row = d->sample_bytes;
    int64_t lo = u[0] - sh->first, hi = u[m - 1] - sh->first + 1;
    int rc;
    if (sh->direct_x && (d->io == DECK_IO_AUTO || d->io == DECK_IO_DIRECT)) {
        rc = read_direct_(sh, sh->direct_x, u, m, buf, row, &lo, &hi);
    } else if (d->io == DECK_IO_UNION) {
        h5_lock();
        rc = read_union_(sh->x, xt, u, m, sh->first, buf) < 0;
        h5_unlock();
        if (rc) { /* find the run that fails on its own */
            h5_lock();
            read_runs_(sh->x, xt, u, m, sh->first, buf, row, &lo, &hi);
            h5_unlock();
        }
    } else {
        h5_lock();
        rc = read_runs_(sh->x, xt, u, m, sh->first, buf, row, &lo, &hi);
        h5_unlock();
    }
    return rc ? read_fail_(d, sh, "x", lo, hi) : DDP_OK;
}

/* Read y rows u[0..m) of one shard (labels as int32, targets as float). */
static ddp_status_t read_y_(deck_t *d, deck_shard_t *sh, const int64_t *u, int64_t m,
                            unsigned char *buf, size_t row)
{
    hid_t yt = d->regression ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32;
    int64_t lo = u[0] - sh->first, hi = u[m - 1] - sh->first + 1;
    int rc;
    if (sh->direct_y && (d->io == DECK_IO_AUTO || d->io == DECK_IO_DIRECT)) {
        rc = read_direct_(sh, sh->direct_y, u, m, buf, row, &lo, &hi);
    } else {
        h5_lock();
        rc = read_union_(sh->y, yt, u, m, sh->first, buf) < 0;
        if (rc) read_runs_(sh->y, yt, u, m, sh->first, buf, row, &lo, &hi);
        h5_unlock();
    }
    return rc ? read_fail_(d, sh, "y", lo, hi) : DDP_OK;
}

static void affine_f32_(float *restrict dst, const float *restrict src, const float *restrict a,
                        const float *restrict b, size_t n);

/* dst = src * a + b element-wise (a == NULL: dst = src), in blocks of 16
 * so that GCC vectorises it at -O2. */
static void convert_u8_(float *restrict dst, const unsigned char *restrict src,
                        const float *restrict a, const float *restrict b, size_t n)
{
    size_t e = 0;
    if (!a) {
        for (; e + 16 <= n; e += 16)
            for (int j = 0; j < 16; j++) dst[e + j] = (float)src[e + j];
        for (; e < n; e++) dst[e] = (float)src[e];
        return;
    }
    for (; e + 16 <= n; e += 16)
        for (int j = 0; j < 16; j++) dst[e + j] = (float)src[e + j] * a[e + j] + b[e + j];
    for (; e < n; e++) dst[e] = (float)src[e] * a[e] + b[e];
}

/* dst = src * a + b with scalar a, b. */
static void convert_u8_s_(float *restrict dst, const unsigned char *restrict src, float a, float b,
                          size_t n)
{
    size_t e = 0;
    for (; e + 16 <= n; e += 16)
        for (int j = 0; j < 16; j++) dst[e + j] = (float)src[e + j] * a + b;
    for (; e < n; e++) dst[e] = (float)src[e] * a + b;
}

static void affine_f32_s_(float *restrict dst, const float *restrict src, float a, float b,
                          size_t n)
{
    size_t e = 0;
    for (; e + 16 <= n; e += 16)
        for (int j = 0; j < 16; j++) dst[e + j] = src[e + j] * a + b;
    for (; e < n; e++) dst[e] = src[e] * a + b;
}

/* One sample: raw -> normalised value (u8 or float source). */
static void normalize_sample_(const deck_t *d, float *dst, const void *src)
{
    size_t numel = d->sample_numel, L = d->norm_run;
    if (L && L >= 16) {
        for (size_t o = 0; o < numel; o += L) {
            if (d->dtype == DECK_U8)
                convert_u8_s_(dst + o, (const unsigned char *)src + o, d->norm_a[o], d->norm_b[o],
                              L);
            else
                affine_f32_s_(dst + o, (const float *)src + o, d->norm_a[o], d->norm_b[o], L);
        }
    } else if (d->dtype == DECK_U8) {
        convert_u8_(dst, src, d->norm_a, d->norm_b, numel);
    } else {
        affine_f32_(dst, src, d->norm_a, d->norm_b, numel);
    }
}

static void affine_f32_(float *restrict dst, const float *restrict src, const float *restrict a,
                        const float *restrict b, size_t n)
{
    size_t e = 0;
    for (; e + 16 <= n; e += 16)
        for (int j = 0; j < 16; j++) dst[e + j] = src[e + j] * a[e + j] + b[e + j];
    for (; e < n; e++) dst[e] = src[e] * a[e] + b[e];
}

static void affine_inplace_(float *restrict v, const float *restrict a, const float *restrict b,
                            size_t n)
{
    size_t e = 0;
    for (; e + 16 <= n; e += 16)
        for (int j = 0; j < 16; j++) v[e + j] = v[e + j] * a[e + j] + b[e + j];
    for (; e < n; e++) v[e] = v[e] * a[e] + b[e];
}

/* deck_read (raw = 0) and deck_read_raw (raw = 1). */
static ddp_status_t read_samples_(deck_t *d, const int64_t *idx, int n, float *x, int32_t *labels,
                                  float *targets, int raw)
{
    if (n <= 0) return DDP_OK;
    for (int i = 0; i < n; i++)
        if (idx[i] < 0 || idx[i] >= d->n)
            return ddp_fail(DDP_ERR_INTERNAL, "deck_read: sample index %lld outside [0, %lld)",
                            (long long)idx[i], (long long)d->n);
    if (labels && d->regression) labels = NULL;
    if (targets && !d->regression) targets = NULL;
    size_t k = d->regression ? (size_t)d->targets : 1;
    size_t yrow = d->regression ? k * sizeof(float) : sizeof(int32_t);
    int want_y = labels || targets;

    /* scratch: pairs [n], slot [n], uniq [n], x rows [n], y rows [n] */
    size_t nn = (size_t)n;
    size_t off_slot = nn * sizeof(pos_pair_t);
    size_t off_uniq = off_slot + nn * sizeof(int64_t);
    size_t off_x = off_uniq + nn * sizeof(int64_t);
    size_t off_y = off_x + ((nn * d->sample_bytes + 15) & ~(size_t)15);
    char *sc = scratch_(d, off_y + nn * yrow);
    if (!sc) return DDP_ERR_NOMEM;
    pos_pair_t *pairs = (pos_pair_t *)sc;
    int64_t *slot = (int64_t *)(sc + off_slot), *uniq = (int64_t *)(sc + off_uniq);
    unsigned char *xb = (unsigned char *)sc + off_x;
    unsigned char *yb = (unsigned char *)sc + off_y;

    /* sort, keeping the inverse permutation; merge duplicates */
    for (int i = 0; i < n; i++) pairs[i] = (pos_pair_t){idx[i], i};
    qsort(pairs, nn, sizeof *pairs, pair_cmp_);
    int64_t m = 0;
    for (int i = 0; i < n; i++) {
        if (m == 0 || uniq[m - 1] != pairs[i].idx) uniq[m++] = pairs[i].idx;
        slot[pairs[i].pos] = m - 1;
    }

    /* each shard's share of the sorted rows */
    ddp_status_t s = DDP_OK;
    int64_t a = 0;
    for (int sidx = 0; sidx < d->nshards && a < m && s == DDP_OK; sidx++) {
        deck_shard_t *sh = &d->shards[sidx];
        int64_t end = sh->first + sh->n, b = a;
        while (b < m && uniq[b] < end) b++;
        if (b == a) continue;
        if (x) s = read_x_(d, sh, uniq + a, b - a, xb + (size_t)a * d->sample_bytes);
        if (s == DDP_OK && want_y) s = read_y_(d, sh, uniq + a, b - a, yb + (size_t)a * yrow, yrow);
        a = b;
    }
    if (s != DDP_OK) return s;

    /* scatter into batch order, converting and normalising */
    size_t numel = d->sample_numel;
    for (int i = 0; i < n; i++) {
        size_t r = (size_t)slot[i];
        float *dst = x ? x + (size_t)i * numel : NULL;
        const unsigned char *src = xb + r * d->sample_bytes;
        if (dst && raw && d->dtype == DECK_U8)
            convert_u8_(dst, src, NULL, NULL, numel);
        else if (dst && raw)
            memcpy(dst, src, numel * sizeof *dst);
        else if (dst)
            normalize_sample_(d, dst, src);
        if (labels) labels[i] = ((const int32_t *)yb)[r];
        if (targets) memcpy(targets + (size_t)i * k, yb + r * yrow, yrow);
    }
    return DDP_OK;
}

ddp_status_t deck_read(deck_t *d, const int64_t *idx, int n, float *x, int32_t *labels,
                       float *targets)
{
    return read_samples_(d, idx, n, x, labels, targets, 0);
}

ddp_status_t deck_read_raw(deck_t *d, const int64_t *idx, int n, float *x, int32_t *labels,
                           float *targets)
{
    return read_samples_(d, idx, n, x, labels, targets, 1);
}

void deck_normalize(const deck_t *d, float *x, int n)
{
    size_t numel = d->sample_numel;
    size_t L = d->norm_run;
    for (int i = 0; i < n; i++) {
        float *v = x + (size_t)i * numel;
        if (L >= 16)
            for (size_t o = 0; o < numel; o += L) {
                float a = d->norm_a[o], b = d->norm_b[o];
                for (size_t e = o; e < o + L; e++) v[e] = v[e] * a + b;
            }
        else
            affine_inplace_(v, d->norm_a, d->norm_b, numel);
    }
}

ddp_status_t deck_read_range(deck_t *d, int64_t first, int n, float *x, int32_t *labels,
                             float *targets)
{
    if (n <= 0) return DDP_OK;
    int64_t *idx = ddp_malloc((size_t)n * sizeof *idx, "a range read");
    if (!idx) return DDP_ERR_NOMEM;
    for (int i = 0; i < n; i++) idx[i] = first + i;
    ddp_status_t s = deck_read(d, idx, n, x, labels, targets);
    free(idx);
    return s;
}

void deck_eval_range(const deck_t *d, int world, int rank, int64_t *first, int64_t *count)
{
    int64_t lo = d->n * rank / world, hi = d->n * (rank + 1) / world;
    *first = lo;
    *count = hi - lo;
}

/* ---- checks ------------------------------------------------------------- */

/* Scan one float dataset of a shard for NaN/Inf in pieces. */
static ddp_status_t check_finite_ds_(const deck_t *d, const deck_shard_t *sh, hid_t ds,
                                     const char *what, size_t per_row, float *buf, size_t cap,
                                     scan_progress_t *prog)
{
    char name[32];
    snprintf(name, sizeof name, "/%s/%s", d->split, what);
    size_t rows = cap / per_row;
    if (rows == 0) rows = 1;
    for (int64_t off = 0; off < sh->n; off += (int64_t)rows) {
        int64_t cnt = sh->n - off < (int64_t)rows ? sh->n - off : (int64_t)rows;
        progress_at_(prog, sh->first + off);
        h5_lock();
        herr_t rc = read_range_(ds, H5T_NATIVE_FLOAT, (hsize_t)off, (hsize_t)cnt, buf);
        h5_unlock();
        if (rc < 0)
            return ddp_fail(DDP_ERR_INPUT,
                            "%s: reading %s samples [%lld, %lld) failed "
                            "(truncated or corrupt file?); re-create it",
                            sh->path, name, (long long)off, (long long)(off + cnt));
        size_t total = (size_t)cnt * per_row;
        for (size_t i = 0; i < total; i++)
            if (!isfinite(buf[i]))
                return ddp_fail(DDP_ERR_INPUT,
                                "%s: %s sample %lld, element %zu is %s; the "
                                "data must be finite (fix or drop that sample)",
                                sh->path, name, (long long)(off + (int64_t)(i / per_row)),
                                i % per_row, isnan(buf[i]) ? "NaN" : "infinite");
    }
    return DDP_OK;
}

ddp_status_t deck_check_finite(deck_t *d)
{
    if (d->dtype == DECK_U8 && !d->regression) return DDP_OK;
    size_t cap = DECK_CHECK_BYTES / sizeof(float);
    size_t need = d->sample_numel > (size_t)d->targets ? d->sample_numel : (size_t)d->targets;
    if (cap < need) cap = need;
    float *buf = ddp_malloc(cap * sizeof *buf, "the finite check");
    if (!buf) return DDP_ERR_NOMEM;
    ddp_status_t s = DDP_OK;
    char what[64];
    snprintf(what, sizeof what, "/%s for non-finite values (--check-data)", d->split);
    scan_progress_t prog;
    progress_begin_(&prog, what, d->n);
    for (int k = 0; k < d->nshards && s == DDP_OK; k++) {
        const deck_shard_t *sh = &d->shards[k];
        if (d->dtype == DECK_F32)
            s = check_finite_ds_(d, sh, sh->x, "x", d->sample_numel, buf, cap, &prog);
        if (s == DDP_OK && d->regression)
            s = check_finite_ds_(d, sh, sh->y, "y", (size_t)d->targets, buf, cap, &prog);
    }
    free(buf);
    return s;
}

ddp_status_t deck_require_labels(const deck_t *d)
{
    if (!d->regression) return DDP_OK;
    char dims[32];
    snprintf(dims, sizeof dims, "[N, %d]", d->targets);
    return ddp_fail(DDP_ERR_INPUT,
                    "%s: /%s/y holds float targets %s but the loss needs "
                    "integer class labels [N]; use --loss mse for regression, or store labels",
                    d->shards[0].path, d->split, d->yrank == 1 ? "[N]" : dims);
}

ddp_status_t deck_check_classes(const deck_t *d, int outputs)
{
    DDP_TRY(deck_require_labels(d));
    if (d->label_max < outputs) return DDP_OK;
    return ddp_fail(DDP_ERR_INPUT,
                    "%s: /%s/y holds label %lld but the model has %d outputs; "
                    "make the last layer linear:%d (the deck has %d classes)",
                    d->shards[d->label_max_shard].path, d->split, (long long)d->label_max, outputs,
                    d->classes, d->classes);
}

ddp_status_t deck_require_targets(const deck_t *d, int outputs)
{
    if (!d->regression)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: /%s/y holds integer class labels but the loss "
                        "needs float targets [N, %d]; use a classification loss, or store "
                        "float targets (ddptrain-prep csv --regression)",
                        d->shards[0].path, d->split, outputs);
    if (d->targets != outputs)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: /%s/y holds %d targets per sample but the model "
                        "has %d outputs; make the last layer linear:%d",
                        d->shards[0].path, d->split, d->targets, outputs, d->targets);
    return DDP_OK;
}

ddp_status_t deck_check_size(const deck_t *d, int world, int batch, int drop_last)
{
    int64_t need = (int64_t)world * batch;
    if (d->n >= need) return DDP_OK;
    return ddp_fail(DDP_ERR_INPUT,
                    "%s%s: /%s holds %lld samples, fewer than one global batch "
                    "(%d ranks x --batch %d = %lld)%s; use a smaller --batch or fewer ranks",
                    d->shards[0].path, d->nshards > 1 ? " (and the other shards)" : "", d->split,
                    (long long)d->n, world, batch, (long long)need,
                    drop_last ? " so --drop-last leaves no step" : "");
}

void deck_describe(const deck_t *d, char *buf, size_t n)
{
    char shape[64];
    if (d->shape.image)
        snprintf(shape, sizeof shape, "%dx%dx%d images", d->shape.c, d->shape.h, d->shape.w);
    else
        snprintf(shape, sizeof shape, "%d features", d->shape.c);
    char kind[96];
    if (d->regression && d->yrank == 1)
        snprintf(kind, sizeof kind,
                 "1 regression target (/%s/y [N] is float: regression, "
                 "not class labels)",
                 d->split);
    else if (d->regression)
        snprintf(kind, sizeof kind, "%d regression target%s", d->targets,
                 d->targets == 1 ? "" : "s");
    else
        snprintf(kind, sizeof kind, "%d classes", d->classes);
    snprintf(buf, n, "%lld samples of %s (%s), %s, %d file%s", (long long)d->n, shape,
             dtype_name_(d->dtype), kind, d->nshards, d->nshards == 1 ? "" : "s");
}

int deck_classes_warning(const deck_t *d, char *buf, size_t n)
{
    if (d->regression || !d->classes_inferred || d->classes <= 1) return 0;
    if ((int64_t)d->classes <=
        DECK_CLASSES_SUSPECT_RATIO * d->label_distinct + DECK_CLASSES_SUSPECT_SLACK)
        return 0;
    snprintf(buf, n,
             "%s: /%s/y has no attribute classes, so the model gets the largest label + 1 = "
             "%d classes (label %lld at sample %lld), but only %lld distinct labels occur; "
             "if that label is a mistake fix it, else set the number of classes with the "
             "attribute classes on /%s/y (h5py: f['%s/y'].attrs['classes'] = K)",
             d->shards[d->label_max_shard].path, d->split, d->classes, (long long)d->label_max,
             (long long)d->label_max_row, (long long)d->label_distinct, d->split, d->split);
    return 1;
}

int deck_has_split(const char *path, const char *split)
{
    hid_t f;
    if (h5_open_read(path, &f) != DDP_OK) {
        ddp_clear_error();
        return 0;
    }
    char name[32];
    snprintf(name, sizeof name, "/%s/x", split);
    int yes = h5_exists(f, name);
    h5_lock();
    H5Fclose(f);
    h5_unlock();
    return yes;
}

int deck_has_split_any(char *const *paths, int npaths, const char *split)
{
    for (int i = 0; i < npaths; i++)
        if (deck_has_split(paths[i], split)) return 1;
    return 0;
}

typedef struct cfg_iter {
    ddp_config_t *cfg;
    const char *path;
    ddp_status_t status;
} cfg_iter_t;

/* Render one /config attribute as text and apply it. */
static herr_t config_attr_(hid_t loc, const char *name, const H5A_info_t *info, void *arg)
{
    cfg_iter_t *it = arg;
    char where[4200], text[CONFIG_STR_MAX];
    snprintf(where, sizeof where, "%s: attribute /config/%s", it->path, name);
    hid_t at = H5Aopen(loc, name, H5P_DEFAULT);
    hid_t t = at < 0 ? -1 : H5Aget_type(at);
    hid_t sp = at < 0 ? -1 : H5Aget_space(at);
    H5T_class_t cls = t < 0 ? H5T_NO_CLASS : H5Tget_class(t);
    ddp_status_t s = DDP_OK;
    if (sp < 0 || H5Sget_simple_extent_npoints(sp) != 1) {
        s = ddp_fail(DDP_ERR_INPUT, "%s: must be a single value", where);
    } else if (cls == H5T_INTEGER) {
        long long v;
        if (H5Aread(at, H5T_NATIVE_LLONG, &v) < 0)
            s = ddp_fail(DDP_ERR_INPUT, "%s: unreadable", where);
        snprintf(text, sizeof text, "%lld", v);
    } else if (cls == H5T_FLOAT) {
        double v;
        if (H5Aread(at, H5T_NATIVE_DOUBLE, &v) < 0)
            s = ddp_fail(DDP_ERR_INPUT, "%s: unreadable", where);
        snprintf(text, sizeof text, "%.17g", v);
    } else if (cls == H5T_STRING) {
        s = h5_attr_read_str(loc, name, text, sizeof text);
        if (s != DDP_OK) s = ddp_fail_override(DDP_ERR_INPUT, "%s: unreadable string", where);
    } else {
        s = ddp_fail(DDP_ERR_INPUT, "%s: must be a string or a number", where);
    }
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    if (at >= 0) H5Aclose(at);
    if (s == DDP_OK) s = config_set(it->cfg, name, text, SRC_INPUT, where);
    it->status = s;
    return s == DDP_OK ? 0 : 1;
}

ddp_status_t deck_load_config(const char *path, ddp_config_t *cfg)
{
    hid_t f;
    DDP_TRY(h5_open_read(path, &f));
    cfg_iter_t it = {cfg, path, DDP_OK};
    h5_lock();
    if (H5Lexists(f, "/config", H5P_DEFAULT) > 0) {
        hid_t g = H5Gopen2(f, "/config", H5P_DEFAULT);
        hsize_t idx = 0;
        if (g >= 0) {
            H5Aiterate2(g, H5_INDEX_NAME, H5_ITER_INC, &idx, config_attr_, &it);
            H5Gclose(g);
        }
    }
    H5Fclose(f);
    h5_unlock();
    return it.status;
}
