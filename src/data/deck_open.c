/* deck_open.c -- opening an input deck (see deck.h): every shard's /<split>/x
 * and /<split>/y checked against the format and against the other shards,
 * storage the file really holds, memory for a sample, the normalisation
 * attributes (mean, std, scale), the label scan (deck_check.c), the one-line
 * description; and the /config options of an input file. */
#include "deck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "deck_internal.h"
#include "h5util.h"
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
/* A dataset may leave at most this many of its declared bytes unwritten
 * (HDF5's fill value) unless at least half of it is stored. */
#define DECK_UNWRITTEN_MAX (64.0 * 1024 * 1024)

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

ddp_status_t deck_check_stored(const char *path, hid_t f, const char *name)
{
    h5_lock();
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    hid_t sp = ds < 0 ? -1 : H5Dget_space(ds);
    hsize_t dims[H5S_MAX_RANK] = {0};
    int rank = sp < 0 ? -1 : H5Sget_simple_extent_dims(sp, dims, NULL);
    if (sp >= 0) H5Sclose(sp);
    h5_unlock();
    /* an unreadable dataset is for the reader to name */
    ddp_status_t s = rank < 1 ? DDP_OK : stored_check_(path, ds, name, dims, rank);
    h5_lock();
    if (ds >= 0) H5Dclose(ds);
    h5_unlock();
    return s;
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
    deck_direct_init(sh, d);
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
    if (s == DDP_OK && !d->regression) s = deck_scan_labels(d);
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
        deck_direct_free(sh->direct_x);
        deck_direct_free(sh->direct_y);
        free(sh->fp_memo);
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
