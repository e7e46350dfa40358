/* deck_read.c -- reading batches of an open deck (see deck.h): indices
 * sorted and merged into runs, rows read by pread() at their file addresses
 * where the data allows (the direct-read tables, built at open) or through
 * HDF5 run by run, then scattered into batch order while converting and
 * normalising; contiguous ranges for evaluation. */
#include "deck.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "deck_internal.h"
#include "h5util.h"

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

/* ---- HDF5 rows and direct-read tables ------------------------------------ */

/* Read local rows [first, first + cnt) of ds into buf (deck_internal.h). */
herr_t deck_h5_read_rows(hid_t ds, hid_t memtype, hsize_t first, hsize_t cnt, void *buf)
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

void deck_direct_free(deck_direct_t *dd)
{
    if (dd) free(dd->addr);
    free(dd);
}

/* Set up direct reads of x and y for a shard where possible (never fails:
 * ineligible datasets are read through HDF5). */
void deck_direct_init(deck_shard_t *sh, const deck_t *d)
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
        deck_direct_free(sh->direct_x);
        deck_direct_free(sh->direct_y);
        sh->direct_x = sh->direct_y = NULL;
    }
}

/* ---- reading batches ---------------------------------------------------- */

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
    return deck_h5_read_rows(ds, memtype, start0, cnt, buf);
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
