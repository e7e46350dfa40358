/* ckpt_verify.c -- the checks that make a checkpoint believed: the metadata
 * checksum over every root attribute and every dataset's checksum, the
 * ranges of its numbers, finite optimizer state (see ckpt_verify.h). */
#include "ckpt_verify.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5util.h"
#include "hash.h"
#include "weights.h"

/* ---- the metadata checksum ------------------------------------------------ */

typedef struct name_list {
    char **names;
    size_t n, cap;
    int failed;
} name_list_t;

static void names_add_(name_list_t *l, const char *name)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 32;
        char **p = realloc(l->names, cap * sizeof *p);
        if (!p) {
            l->failed = 1;
            return;
        }
        l->names = p;
        l->cap = cap;
    }
    char *copy = strdup(name);
    if (!copy) {
        l->failed = 1;
        return;
    }
    l->names[l->n++] = copy;
}

static void names_free_(name_list_t *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->names[i]);
    free(l->names);
    *l = (name_list_t){0};
}

static int cmp_names_(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static herr_t attr_name_(hid_t loc, const char *name, const H5A_info_t *info, void *arg)
{
    (void)loc, (void)info;
    if (strcmp(name, CKPT_META_CHECKSUM_ATTR) != 0) names_add_(arg, name);
    return 0;
}

typedef struct objects {
    name_list_t groups, sets;
} objects_t;

static herr_t object_name_(hid_t loc, const char *name, const h5_link_info_t *info, void *arg)
{
    objects_t *o = arg;
    if (info->type != H5L_TYPE_HARD) return 0;
    hid_t id = H5Oopen(loc, name, H5P_DEFAULT);
    if (id < 0) return 0;
    H5I_type_t type = H5Iget_type(id);
    if (type == H5I_DATASET) names_add_(&o->sets, name);
    if (type == H5I_GROUP) names_add_(&o->groups, name);
    H5Oclose(id);
    return 0;
}

static uint64_t hash_item_(uint64_t h, char tag, const void *v, uint64_t len)
{
    h = hash_bytes(h, &tag, 1);
    h = hash_bytes(h, &len, sizeof len);
    return hash_bytes(h, v, (size_t)len);
}

/* One attribute of obj into the hash (under the HDF5 lock). */
static int hash_attr_(hid_t obj, const char *name, uint64_t *h)
{
    hid_t at = H5Aopen(obj, name, H5P_DEFAULT);
    if (at < 0) return -1;
    hid_t ft = H5Aget_type(at), sp = H5Aget_space(at);
    H5T_class_t cls = H5Tget_class(ft);
    hssize_t np = H5Sget_simple_extent_npoints(sp);
    int rc = np < 0 ? -1 : 0;
    *h = hash_bytes(*h, name, strlen(name) + 1);
    if (rc == 0 && cls == H5T_STRING && np == 1) {
        char *text = NULL;
        if (H5Tis_variable_str(ft) > 0) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            H5Tset_cset(mt, H5Tget_cset(ft));
            char *v = NULL;
            if (H5Aread(at, mt, &v) >= 0 && v) text = strdup(v);
            if (v) H5free_memory(v);
            H5Tclose(mt);
        } else {
            size_t sz = H5Tget_size(ft);
            text = calloc(sz + 1, 1);
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, sz + 1);
            H5Tset_cset(mt, H5Tget_cset(ft));
            if (text && H5Aread(at, mt, text) < 0) {
                free(text);
                text = NULL;
            }
            H5Tclose(mt);
        }
        if (text)
            *h = hash_item_(*h, 's', text, strlen(text));
        else
            rc = -1;
        free(text);
    } else if (rc == 0 && (cls == H5T_INTEGER || cls == H5T_FLOAT)) {
        size_t n = (size_t)np;
        void *v = malloc(n * 8 + 1);
        hid_t mt = cls == H5T_INTEGER ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE;
        if (v && H5Aread(at, mt, v) >= 0)
            *h = hash_item_(*h, cls == H5T_INTEGER ? 'i' : 'f', v, (uint64_t)n * 8);
        else
            rc = -1;
        free(v);
    } else if (rc == 0) {
        int64_t what[2] = {(int64_t)cls, (int64_t)H5Tget_size(ft)};
        *h = hash_item_(*h, 'o', what, sizeof what);
    }
    H5Sclose(sp);
    H5Tclose(ft);
    H5Aclose(at);
    return rc;
}

/* The attributes of obj (but the metadata checksum) in name order into *h;
 * the name of one that cannot be read in *bad (under the HDF5 lock). */
static int hash_attrs_(hid_t obj, uint64_t *h, char *bad, size_t nbad)
{
    name_list_t attrs = {0};
    hsize_t idx = 0;
    if (H5Aiterate2(obj, H5_INDEX_NAME, H5_ITER_INC, &idx, attr_name_, &attrs) < 0 ||
        attrs.failed) {
        names_free_(&attrs);
        snprintf(bad, nbad, "(a list of attributes)");
        return -1;
    }
    qsort(attrs.names, attrs.n, sizeof *attrs.names, cmp_names_);
    int rc = 0;
    for (size_t i = 0; i < attrs.n && rc == 0; i++)
        if ((rc = hash_attr_(obj, attrs.names[i], h)) != 0)
            snprintf(bad, nbad, "%s", attrs.names[i]);
    names_free_(&attrs);
    return rc;
}

/* The metadata checksum of f; a dataset without its checksum is an error
 * (path: the file's name for messages, NULL while writing). */
static ddp_status_t meta_sum_(hid_t f, const char *path, uint64_t *sum)
{
    objects_t obj = {{0}, {0}};
    ddp_status_t s = DDP_OK;
    uint64_t h = HASH_SEED;
    const char *where = path ? path : "in memory";
    char bad[512] = "";
    h5_lock();
    herr_t rc = H5Lvisit(f, H5_INDEX_NAME, H5_ITER_INC, object_name_, &obj);
    if (rc < 0 || obj.groups.failed || obj.sets.failed)
        s = ddp_fail(DDP_ERR_INPUT,
                     "checkpoint %s: its groups and datasets cannot be listed (damaged "
                     "checkpoint)",
                     where);
    if (s == DDP_OK) {
        qsort(obj.groups.names, obj.groups.n, sizeof *obj.groups.names, cmp_names_);
        qsort(obj.sets.names, obj.sets.n, sizeof *obj.sets.names, cmp_names_);
        if (hash_attrs_(f, &h, bad, sizeof bad) != 0)
            s = ddp_fail(DDP_ERR_INPUT,
                         "checkpoint %s: root attribute %s cannot be read (damaged checkpoint)",
                         where, bad);
    }
    for (size_t i = 0; i < obj.groups.n && s == DDP_OK; i++) {
        const char *name = obj.groups.names[i];
        hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
        h = hash_bytes(h, name, strlen(name) + 1);
        if (g < 0 || hash_attrs_(g, &h, bad, sizeof bad) != 0)
            s = ddp_fail(DDP_ERR_INPUT,
                         "checkpoint %s: attribute %s of /%s cannot be read (damaged checkpoint)",
                         where, bad, name);
        if (g >= 0) H5Gclose(g);
    }
    for (size_t i = 0; i < obj.sets.n && s == DDP_OK; i++) {
        const char *name = obj.sets.names[i];
        char dsum[64] = "";
        hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
        int have = ds >= 0 && h5_attr_exists(ds, WEIGHTS_CHECKSUM_ATTR) &&
                   h5_attr_read_str(ds, WEIGHTS_CHECKSUM_ATTR, dsum, sizeof dsum) == DDP_OK;
        if (ds >= 0) H5Dclose(ds);
        if (!have)
            s = ddp_fail(DDP_ERR_INPUT,
                         "checkpoint %s: dataset /%s has no checksum (the file was edited or "
                         "written by another tool); resume from an unedited checkpoint",
                         where, name);
        h = hash_bytes(h, name, strlen(name) + 1);
        h = hash_bytes(h, dsum, strlen(dsum) + 1);
    }
    h5_unlock();
    names_free_(&obj.groups);
    names_free_(&obj.sets);
    *sum = h;
    return s;
}

ddp_status_t ckpt_verify_sign(hid_t f)
{
    uint64_t sum;
    DDP_TRY(meta_sum_(f, NULL, &sum));
    char text[24];
    snprintf(text, sizeof text, "%016llx", (unsigned long long)sum);
    return h5_attr_write_str(f, CKPT_META_CHECKSUM_ATTR, text);
}

ddp_status_t ckpt_verify_meta(hid_t f, const char *path)
{
    char want[64] = "";
    if (!h5_attr_exists(f, CKPT_META_CHECKSUM_ATTR) ||
        h5_attr_read_str(f, CKPT_META_CHECKSUM_ATTR, want, sizeof want) != DDP_OK)
        return ddp_fail_override(DDP_ERR_INPUT,
                                 "checkpoint %s has no attribute " CKPT_META_CHECKSUM_ATTR
                                 " (the file was edited, or written by a ddptrain before "
                                 "checksummed metadata); resume from an unedited checkpoint",
                                 path);
    uint64_t sum;
    DDP_TRY(meta_sum_(f, path, &sum));
    char have[24];
    snprintf(have, sizeof have, "%016llx", (unsigned long long)sum);
    if (strcmp(want, have) != 0)
        return ddp_fail(DDP_ERR_INPUT,
                        "checkpoint %s fails its metadata checksum (" CKPT_META_CHECKSUM_ATTR
                        " %s, contents %s): an attribute or a dataset's checksum was changed "
                        "(damaged or edited checkpoint); resume from another checkpoint",
                        path, want, have);
    return DDP_OK;
}

/* ---- ranges --------------------------------------------------------------- */

ddp_status_t ckpt_verify_range(const char *path, const char *name, int64_t v, int64_t lo,
                               int64_t hi, const char *why)
{
    if (v >= lo && v <= hi) return DDP_OK;
    return ddp_fail(DDP_ERR_INPUT,
                    "checkpoint %s: attribute %s is %" PRId64 ", outside [%" PRId64 ", %" PRId64
                    "] (%s); the checkpoint is damaged or was edited: resume from another one",
                    path, name, v, lo, hi, why);
}

ddp_status_t ckpt_verify_numbers(const ckpt_numbers_t *n, const char *path)
{
    const int64_t big = INT64_MAX / 4;
    DDP_TRY(ckpt_verify_range(path, "world_size", n->world_size, 1, 1 << 24, "ranks"));
    DDP_TRY(ckpt_verify_range(path, "batch", n->batch, 1, 1 << 24, "the --batch range"));
    DDP_TRY(ckpt_verify_range(path, "accum", n->accum, 1, 1 << 20, "the --accum range"));
    if (n->local_bn_ranks != n->world_size)
        DDP_TRY(
            ckpt_verify_range(path, "local_bn_ranks", n->local_bn_ranks, 0, 0, "0, or world_size"));
    DDP_TRY(ckpt_verify_range(path, "data_samples", n->data_samples, 1, big, "training samples"));
    DDP_TRY(ckpt_verify_range(path, "sample_in_epoch", n->sample_in_epoch, 0, n->data_samples,
                              "samples of an epoch"));
    /* an epoch takes a step at least, and a step a sample at least */
    int64_t begun = (n->epoch > 0 ? n->epoch : 0) + 1;
    int64_t most = begun > big / n->data_samples ? big : begun * n->data_samples;
    DDP_TRY(ckpt_verify_range(path, "step", n->step, 0, most,
                              "at most one step per training sample of the epochs begun"));
    /* not --epochs: --steps takes a run past it, and may change on resume */
    DDP_TRY(ckpt_verify_range(path, "epoch", n->epoch, 0, n->step, "at most one epoch per step"));
    return DDP_OK;
}

/* ---- optimizer state ------------------------------------------------------ */

ddp_status_t ckpt_verify_finite(const float *v, size_t n, int nonnegative, const char *name,
                                const char *path)
{
    for (size_t i = 0; i < n; i++) {
        if (isfinite(v[i]) && (!nonnegative || v[i] >= 0)) continue;
        return ddp_fail(DDP_ERR_INPUT,
                        "checkpoint %s: dataset %s holds %s at element %zu of %zu (a diverged "
                        "run's state, or an edited file); resume from an earlier checkpoint",
                        path, name,
                        isnan(v[i])   ? "NaN"
                        : isinf(v[i]) ? (v[i] > 0 ? "+Inf" : "-Inf")
                                      : "a negative value",
                        i, n);
    }
    return DDP_OK;
}
