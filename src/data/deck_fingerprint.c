/* deck_fingerprint.c -- a cheap content fingerprint of the shards of an
 * open deck, for the start-up check that every rank reads the same data
 * under the same path (see deck_fingerprint in deck.h). */
#include "deck.h"

#include <stdlib.h>
#include <string.h>

#include "h5util.h"
#include "hash.h"

/* Blocks of rows sampled from each dataset: the first, the last and
 * DECK_FP_BLOCKS - 2 evenly spaced between them. */
#ifndef DECK_FP_BLOCKS
#define DECK_FP_BLOCKS 8
#endif
/* A block is one chunk's rows (dimension 0), cut to at most this many bytes;
 * rows of this many bytes for contiguous data. */
#ifndef DECK_FP_BLOCK_BYTES
#define DECK_FP_BLOCK_BYTES ((size_t)1 << 20)
#endif

static uint64_t hash_u64_(uint64_t h, uint64_t v)
{
    return hash_bytes(h, &v, sizeof v);
}

/* The type's own binary description (class, size, order, sign, ...). */
static uint64_t hash_type_(uint64_t h, hid_t type)
{
    size_t n = 0;
    if (H5Tencode(type, NULL, &n) < 0 || n == 0) return hash_u64_(h, 0);
    unsigned char *buf = malloc(n);
    if (buf && H5Tencode(type, buf, &n) >= 0) h = hash_bytes(h, buf, n);
    free(buf);
    return hash_u64_(h, n);
}

static uint64_t hash_space_(uint64_t h, hid_t space)
{
    hsize_t dims[H5S_MAX_RANK];
    int r = H5Sget_simple_extent_dims(space, dims, NULL);
    h = hash_u64_(h, (uint64_t)(int64_t)r);
    if (r > 0) h = hash_bytes(h, dims, (size_t)r * sizeof dims[0]);
    return h;
}

/* Dims, type, storage layout, chunk dims and filters (with their settings). */
static uint64_t layout_hash_(hid_t ds)
{
    uint64_t h = HASH_SEED;
    hid_t sp = H5Dget_space(ds), t = H5Dget_type(ds), dcpl = H5Dget_create_plist(ds);
    h = hash_space_(h, sp);
    h = hash_type_(h, t);
    H5D_layout_t lay = H5Pget_layout(dcpl);
    h = hash_u64_(h, (uint64_t)lay);
    if (lay == H5D_CHUNKED) {
        hsize_t cd[H5S_MAX_RANK];
        int cr = H5Pget_chunk(dcpl, H5S_MAX_RANK, cd);
        h = hash_u64_(h, (uint64_t)(int64_t)cr);
        if (cr > 0) h = hash_bytes(h, cd, (size_t)cr * sizeof cd[0]);
        int nf = H5Pget_nfilters(dcpl);
        h = hash_u64_(h, (uint64_t)(int64_t)nf);
        for (int i = 0; i < nf; i++) {
            unsigned flags = 0, cdv[16];
            size_t ncd = sizeof cdv / sizeof cdv[0];
            char name[8];
            H5Z_filter_t id =
                H5Pget_filter2(dcpl, (unsigned)i, &flags, &ncd, cdv, sizeof name, name, NULL);
            if (ncd > sizeof cdv / sizeof cdv[0]) ncd = sizeof cdv / sizeof cdv[0];
            h = hash_u64_(h, (uint64_t)(int64_t)id);
            h = hash_bytes(h, cdv, ncd * sizeof cdv[0]);
        }
    }
    H5Pclose(dcpl);
    H5Tclose(t);
    H5Sclose(sp);
    return h;
}

/* One attribute: its name, type, shape and value (visited in name order). */
static herr_t attr_hash_(hid_t loc, const char *name, const H5A_info_t *info, void *arg)
{
    (void)info;
    uint64_t *h = arg;
    *h = hash_bytes(*h, name, strlen(name) + 1);
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return 0;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    *h = hash_type_(*h, t);
    *h = hash_space_(*h, sp);
    hssize_t npts = H5Sget_simple_extent_npoints(sp);
    H5T_class_t cls = H5Tget_class(t);
    if (npts > 0 && H5Tis_variable_str(t) > 0) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        char **s = calloc((size_t)npts, sizeof *s);
        if (s && H5Aread(a, mt, s) >= 0) {
            for (hssize_t i = 0; i < npts; i++)
                if (s[i]) *h = hash_bytes(*h, s[i], strlen(s[i]) + 1);
            H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, s);
        }
        free(s);
        H5Tclose(mt);
    } else if (npts > 0 && cls != H5T_VLEN && cls != H5T_REFERENCE) {
        /* fixed-size values, read as stored (the file type: no conversion) */
        size_t bytes = (size_t)npts * H5Tget_size(t);
        void *buf = malloc(bytes);
        if (buf && H5Aread(a, t, buf) >= 0) *h = hash_bytes(*h, buf, bytes);
        free(buf);
    }
    H5Sclose(sp);
    H5Tclose(t);
    H5Aclose(a);
    return 0;
}

static uint64_t attrs_hash_(hid_t ds)
{
    uint64_t h = HASH_SEED;
    hsize_t idx = 0;
    H5Aiterate2(ds, H5_INDEX_NAME, H5_ITER_INC, &idx, attr_hash_, &h);
    return h;
}

/* Rows per block: a chunk's rows, cut to DECK_FP_BLOCK_BYTES. */
static hsize_t block_rows_(hid_t ds, hsize_t row_bytes)
{
    hsize_t rows = 0;
    hid_t dcpl = H5Dget_create_plist(ds);
    if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t cd[H5S_MAX_RANK];
        if (H5Pget_chunk(dcpl, H5S_MAX_RANK, cd) > 0) rows = cd[0];
    }
    H5Pclose(dcpl);
    hsize_t cap = row_bytes ? DECK_FP_BLOCK_BYTES / row_bytes : 1;
    if (cap < 1) cap = 1;
    if (rows == 0 || rows > cap) rows = cap;
    return rows;
}

/* The raw bytes of the sampled blocks of rows of ds.  Returns 0, or -1
 * when memory ran out (*nomem set) or reading rows [bad[0], bad[1])
 * failed (a corrupt chunk). */
static int data_hash_(hid_t ds, uint64_t *out, int *nomem, hsize_t bad[2])
{
    uint64_t h = HASH_SEED;
    int rc = 0;
    hid_t sp = H5Dget_space(ds), t = H5Dget_type(ds);
    hsize_t dims[H5S_MAX_RANK];
    int r = H5Sget_simple_extent_dims(sp, dims, NULL);
    if (r < 1 || dims[0] == 0) {
        H5Tclose(t);
        H5Sclose(sp);
        *out = h;
        return 0;
    }
    hsize_t row_bytes = H5Tget_size(t);
    for (int i = 1; i < r; i++) row_bytes *= dims[i];
    hsize_t n = dims[0], rows = block_rows_(ds, row_bytes);
    hsize_t nblocks = (n + rows - 1) / rows;
    void *buf = malloc((size_t)(rows * row_bytes) + 1);
    if (!buf) {
        *nomem = 1;
        rc = -1;
    }
    hsize_t prev = nblocks; /* none */
    for (int b = 0; b < DECK_FP_BLOCKS && rc == 0; b++) {
        hsize_t blk = DECK_FP_BLOCKS > 1 ? (hsize_t)b * (nblocks - 1) / (DECK_FP_BLOCKS - 1) : 0;
        if (blk == prev) continue; /* fewer blocks than samples taken */
        prev = blk;
        hsize_t start[H5S_MAX_RANK] = {0}, count[H5S_MAX_RANK];
        memcpy(count, dims, sizeof count);
        start[0] = blk * rows;
        count[0] = n - start[0] < rows ? n - start[0] : rows;
        hid_t ms = H5Screate_simple(r, count, NULL);
        if (ms < 0 || H5Sselect_hyperslab(sp, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
            H5Dread(ds, t, ms, sp, H5P_DEFAULT, buf) < 0) {
            bad[0] = start[0];
            bad[1] = start[0] + count[0];
            rc = -1;
        }
        if (ms >= 0) H5Sclose(ms);
        if (rc == 0) {
            h = hash_u64_(h, start[0]);
            h = hash_words(h, buf, (size_t)(count[0] * row_bytes));
        }
    }
    free(buf);
    H5Tclose(t);
    H5Sclose(sp);
    *out = h;
    return rc;
}

static void fp_dataset_(hid_t ds, uint64_t *layout, uint64_t *attrs)
{
    *layout = hash_u64_(*layout, layout_hash_(ds));
    *attrs = hash_u64_(*attrs, attrs_hash_(ds));
}

ddp_status_t deck_fingerprint(const deck_t *d, deck_fp_t *fp)
{
    for (int i = 0; i < d->nshards; i++) {
        deck_shard_t *sh = &d->shards[i];
        deck_fp_t *f = &fp[i];
        if (sh->fp_memo) {
            *f = *sh->fp_memo;
            continue;
        }
        for (int p = 0; p < DECK_FP_PARTS; p++) f->part[p] = HASH_SEED;
        hsize_t size = 0;
        uint64_t hx = 0, hy = 0;
        int nomem = 0, bad = 0;
        hsize_t rows[2] = {0, 0};
        h5_lock();
        if (H5Fget_filesize(sh->file, &size) < 0) size = 0;
        fp_dataset_(sh->x, &f->part[DECK_FP_LAYOUT], &f->part[DECK_FP_ATTRS]);
        fp_dataset_(sh->y, &f->part[DECK_FP_LAYOUT], &f->part[DECK_FP_ATTRS]);
        if (data_hash_(sh->x, &hx, &nomem, rows) != 0) bad = 'x';
        if (!bad && data_hash_(sh->y, &hy, &nomem, rows) != 0) bad = 'y';
        h5_unlock();
        if (nomem) return ddp_fail(DDP_ERR_NOMEM, "out of memory fingerprinting %s", sh->path);
        if (bad)
            return ddp_fail(DDP_ERR_INPUT,
                            "%s: reading /%s/%c samples [%llu, %llu) failed in the start-up "
                            "content check (truncated or corrupt file?); check the file with "
                            "ddptrain-prep info and re-create it",
                            sh->path, d->split, bad, (unsigned long long)rows[0],
                            (unsigned long long)rows[1]);
        f->part[DECK_FP_SIZE] = hash_u64_(f->part[DECK_FP_SIZE], size);
        f->part[DECK_FP_DATA] = hash_u64_(hash_u64_(f->part[DECK_FP_DATA], hx), hy);
        /* the files do not change under an open deck: the next caller reuses it */
        sh->fp_memo = malloc(sizeof *sh->fp_memo);
        if (sh->fp_memo) *sh->fp_memo = *f;
    }
    return DDP_OK;
}

const char *deck_fp_part_name(int part)
{
    static const char *names[DECK_FP_PARTS] = {
        [DECK_FP_SIZE] = "file size",
        [DECK_FP_LAYOUT] = "shapes, types or chunking",
        [DECK_FP_ATTRS] = "attributes (mean, std, scale, classes)",
        [DECK_FP_DATA] = "sampled chunks",
    };
    return part >= 0 && part < DECK_FP_PARTS ? names[part] : "content";
}
