/* split.c -- `ddptrain-prep split IN.h5 --shards K -o PREFIX`: PREFIX-0.h5 ...
 * PREFIX-<K-1>.h5, contiguous parts of /train (sizes differ by at most one)
 * in the input's types, with every attribute of /train/x and /train/y
 * copied.  /val goes with the first shard only (a deck opened from all the
 * shards finds it there); the group /config goes with every shard.  Given
 * to ddptrain in order, the shards are the same dataset as IN.h5.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "deck.h"
#include "prep.h"

#define SPLIT_BLOCK_BYTES ((size_t)8 << 20)

static herr_t copy_attr_(hid_t src, const char *name, const H5A_info_t *info, void *arg)
{
    hid_t dst = *(hid_t *)arg;
    hid_t at = H5Aopen(src, name, H5P_DEFAULT);
    if (at < 0) return -1;
    hid_t ft = H5Aget_type(at), sp = H5Aget_space(at);
    hid_t mt =
        H5Tget_class(ft) == H5T_STRING ? H5Tcopy(ft) : H5Tget_native_type(ft, H5T_DIR_ASCEND);
    hssize_t np = H5Sget_simple_extent_npoints(sp);
    size_t bytes = H5Tget_size(mt) * (size_t)(np > 0 ? np : 1);
    void *buf = calloc(bytes ? bytes : 1, 1);
    herr_t rc = buf ? H5Aread(at, mt, buf) : -1;
    if (rc >= 0) {
        hid_t na = H5Acreate2(dst, name, ft, sp, H5P_DEFAULT, H5P_DEFAULT);
        rc = na < 0 ? -1 : H5Awrite(na, mt, buf);
        if (na >= 0) H5Aclose(na);
        if (H5Tis_variable_str(ft) > 0) H5Dvlen_reclaim(mt, sp, H5P_DEFAULT, buf);
    }
    free(buf);
    H5Tclose(mt);
    H5Tclose(ft);
    H5Sclose(sp);
    H5Aclose(at);
    return rc < 0 ? -1 : 0;
}

/* Copy every attribute of src onto dst (under the HDF5 lock). */
static ddp_status_t copy_attrs_(hid_t src, hid_t dst, const char *what)
{
    hsize_t idx = 0;
    h5_lock();
    herr_t rc = H5Aiterate2(src, H5_INDEX_NAME, H5_ITER_INC, &idx, copy_attr_, &dst);
    h5_unlock();
    if (rc < 0) return ddp_fail(DDP_ERR_IO, "cannot copy the attributes of %s", what);
    return DDP_OK;
}

/* Copy rows [first, first + n) of dataset `name` of src into a new chunked
 * dataset of the same name and type in dst, with its attributes. */
static ddp_status_t copy_rows_(hid_t src, hid_t dst, const char *in, const char *name,
                               hsize_t first, hsize_t n)
{
    h5_lock();
    hid_t ds = H5Dopen2(src, name, H5P_DEFAULT);
    hid_t ft = ds < 0 ? -1 : H5Dget_type(ds);
    hid_t mt = ft < 0 ? -1 : H5Tget_native_type(ft, H5T_DIR_ASCEND);
    hid_t fs = ds < 0 ? -1 : H5Dget_space(ds);
    hsize_t dims[H5S_MAX_RANK] = {0};
    int rank = fs < 0 ? -1 : H5Sget_simple_extent_dims(fs, dims, NULL);
    h5_unlock();
    ddp_status_t s = DDP_OK;
    if (rank < 1 || rank > 4) {
        s = ddp_fail(DDP_ERR_INPUT, "%s: cannot read dataset %s (or its rank is not 1..4)", in,
                     name);
        goto out;
    }
    hsize_t od[4];
    memcpy(od, dims, sizeof od);
    od[0] = n;
    prep_ds_t w;
    if ((s = prep_ds_create(&w, dst, name, ft, mt, rank, od)) != DDP_OK) goto out;
    size_t row = H5Tget_size(mt);
    for (int i = 1; i < rank; i++) row *= dims[i];
    hsize_t rows = SPLIT_BLOCK_BYTES / (row ? row : 1);
    if (rows < 1) rows = 1;
    void *buf = ddp_malloc((size_t)(rows < n ? rows : n) * row, "copying");
    if (!buf) s = DDP_ERR_NOMEM;
    for (hsize_t off = 0; off < n && s == DDP_OK; off += rows) {
        hsize_t cnt = n - off < rows ? n - off : rows;
        hsize_t start[4] = {first + off, 0, 0, 0}, count[4];
        memcpy(count, dims, sizeof count);
        count[0] = cnt;
        h5_lock();
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        hid_t ms = H5Screate_simple(rank, count, NULL);
        herr_t rc = H5Dread(ds, mt, ms, fs, H5P_DEFAULT, buf);
        H5Sclose(ms);
        h5_unlock();
        if (rc < 0)
            s = ddp_fail(DDP_ERR_INPUT,
                         "%s: reading %s rows [%llu, %llu) failed (truncated or "
                         "corrupt file?)",
                         in, name, (unsigned long long)(first + off),
                         (unsigned long long)(first + off + cnt));
        else
            s = prep_ds_append(&w, buf, cnt);
    }
    free(buf);
    if (s == DDP_OK) s = copy_attrs_(ds, w.ds, name);
    prep_ds_close(&w);
out:
    h5_lock();
    if (fs >= 0) H5Sclose(fs);
    if (mt >= 0) H5Tclose(mt);
    if (ft >= 0) H5Tclose(ft);
    if (ds >= 0) H5Dclose(ds);
    h5_unlock();
    return s;
}

/* PREFIX-<i>.h5 */
static void shard_name_(const char *prefix, int64_t i, char *buf, size_t n)
{
    snprintf(buf, n, "%s-%lld.h5", prefix, (long long)i);
}

/* The input against every shard and the shards against each other (a
 * link among them), none a FIFO or device (pathclash.h), before any is
 * written. */
static ddp_status_t check_paths_(const char *in, const char *prefix, int64_t k)
{
    pathclash_file_t *f = calloc((size_t)k + 1, sizeof *f);
    char(*names)[4096] = calloc((size_t)k, sizeof *names);
    char(*roles)[32] = calloc((size_t)k, sizeof *roles);
    ddp_status_t s = DDP_OK;
    if (!f || !names || !roles) {
        s = ddp_fail(DDP_ERR_NOMEM, "out of memory");
    } else {
        f[0] = (pathclash_file_t){"the input", in, PATHCLASH_IN, NULL, 0};
        for (int64_t i = 0; i < k; i++) {
            shard_name_(prefix, i, names[i], sizeof names[i]);
            snprintf(roles[i], sizeof roles[i], "shard %lld", (long long)i);
            f[i + 1] = (pathclash_file_t){roles[i], names[i], PATHCLASH_OUT, NULL, 0};
        }
        s = pathclash_check(f, (int)k + 1);
    }
    free(f);
    free(names);
    free(roles);
    return s;
}

ddp_status_t prep_split(int argc, char **argv)
{
    const char *in = NULL, *prefix = NULL, *v;
    int64_t k = 0;
    ddp_status_t s = DDP_OK;
    for (int i = 1; i < argc && s == DDP_OK; i++) {
        if ((v = prep_opt(argc, argv, &i, "-o", &s)) ||
            (s == DDP_OK && (v = prep_opt(argc, argv, &i, "--output", &s))))
            prefix = v;
        else if (s == DDP_OK && (v = prep_opt(argc, argv, &i, "--shards", &s)))
            s = prep_int("--shards", v, 1, 100000, &k);
        else if (s == DDP_OK && argv[i][0] == '-' && argv[i][1])
            s = ddp_fail(DDP_ERR_USAGE, "split: unknown option '%s'; see ddptrain-prep --help",
                         argv[i]);
        else if (s == DDP_OK && in)
            s = ddp_fail(DDP_ERR_USAGE, "split: unexpected argument '%s' (one input file)",
                         argv[i]);
        else if (s == DDP_OK)
            in = argv[i];
    }
    if (s != DDP_OK) return s;
    if (!in || !prefix || !k)
        return ddp_fail(DDP_ERR_USAGE, "split: give IN.h5 --shards K -o PREFIX");
    DDP_TRY(check_paths_(in, prefix, k));

    hid_t f;
    DDP_TRY(h5_open_read(in, &f));
    if (!h5_exists(f, "/train/x") || !h5_exists(f, "/train/y")) {
        h5_lock();
        H5Fclose(f);
        h5_unlock();
        return ddp_fail(DDP_ERR_INPUT, "%s: no /train/x and /train/y to split", in);
    }
    /* a header declaring more rows than the file holds: refused as ddptrain
     * refuses it, before a shard is created or a row copied */
    static const char *const all[] = {"/train/x", "/train/y", "/val/x", "/val/y"};
    for (int j = 0; j < 4 && s == DDP_OK; j++)
        if (h5_exists(f, all[j])) s = deck_check_stored(in, f, all[j]);
    if (s != DDP_OK) {
        h5_lock();
        H5Fclose(f);
        h5_unlock();
        return s;
    }
    hsize_t n = h5_rows(f, "/train/x");
    int has_val = h5_exists(f, "/val/x") && h5_exists(f, "/val/y");
    int has_config = h5_exists(f, "/config");
    if ((hsize_t)k > n) {
        s = ddp_fail(DDP_ERR_USAGE, "split: %s holds %llu samples, fewer than --shards %lld", in,
                     (unsigned long long)n, (long long)k);
    }
    for (int64_t i = 0; i < k && s == DDP_OK; i++) {
        char out[4096];
        shard_name_(prefix, i, out, sizeof out);
        hsize_t lo = n * (hsize_t)i / (hsize_t)k, hi = n * (hsize_t)(i + 1) / (hsize_t)k;
        h5_atomic_t a;
        if ((s = h5_atomic_create(&a, out)) != DDP_OK) break;
        s = copy_rows_(f, a.file, in, "/train/x", lo, hi - lo);
        if (s == DDP_OK) s = copy_rows_(f, a.file, in, "/train/y", lo, hi - lo);
        if (s == DDP_OK && has_val && i == 0) {
            for (int j = 0; j < 2 && s == DDP_OK; j++) {
                const char *nm = j ? "/val/y" : "/val/x";
                s = copy_rows_(f, a.file, in, nm, 0, h5_rows(f, nm));
            }
        }
        if (s == DDP_OK && has_config) {
            h5_lock();
            hid_t g = H5Gopen2(f, "/config", H5P_DEFAULT);
            hid_t og = H5Gcreate2(a.file, "/config", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
            h5_unlock();
            s = copy_attrs_(g, og, "/config");
            h5_lock();
            H5Gclose(og);
            H5Gclose(g);
            h5_unlock();
        }
        if (s == DDP_OK)
            s = prep_finish(&a);
        else
            h5_atomic_abandon(&a);
        if (s == DDP_OK)
            printf("%s: /train samples [%llu, %llu)%s\n", out, (unsigned long long)lo,
                   (unsigned long long)hi, has_val && i == 0 ? " and /val" : "");
    }
    h5_lock();
    H5Fclose(f);
    h5_unlock();
    return s;
}
