/* weights.c -- write and read weights files (see weights.h). */
#include "weights.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "atomicfile.h"
#include "h5util.h"
#include "hash.h"
#include "version.h"

ddp_status_t weights_host_alloc(weights_host_t *h, const model_t *m)
{
    h->params = malloc((m->nparams + 1) * sizeof *h->params);
    h->bufs = malloc((m->nbufs + 1) * sizeof *h->bufs);
    h->counters = calloc((size_t)m->nlayers + 1, sizeof *h->counters);
    if (h->params && h->bufs && h->counters) return DDP_OK;
    weights_host_free(h);
    return ddp_fail(DDP_ERR_NOMEM, "out of memory for a host copy of the model (%zu parameters)",
                    m->nparams);
}

void weights_host_free(weights_host_t *h)
{
    free(h->params);
    free(h->bufs);
    free(h->counters);
    h->params = h->bufs = NULL;
    h->counters = NULL;
}

void weights_host_download(weights_host_t *h, const model_t *m)
{
    m->compute->download(h->params, m->params, m->nparams * sizeof(float));
    m->compute->download(h->bufs, m->bufs, m->nbufs * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) h->counters[i] = m->layers[i].num_batches_tracked;
}

void weights_host_upload(const weights_host_t *h, model_t *m)
{
    m->compute->upload(m->params, h->params, m->nparams * sizeof(float));
    m->compute->upload(m->bufs, h->bufs, m->nbufs * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) m->layers[i].num_batches_tracked = h->counters[i];
}

ddp_status_t weights_write_dataset(hid_t file, const char *name, hid_t mem_type, hid_t file_type,
                                   int ndim, const hsize_t *dims, const void *data, size_t bytes)
{
    DDP_TRY(h5_write(file, name, mem_type, file_type, ndim, dims, data));
    char sum[24];
    snprintf(sum, sizeof sum, "%016llx", (unsigned long long)hash_words(HASH_SEED, data, bytes));
    h5_lock();
    hid_t ds = H5Dopen2(file, name, H5P_DEFAULT);
    h5_unlock();
    if (ds < 0) return ddp_fail(DDP_ERR_IO, "cannot reopen dataset %s to sign it", name);
    ddp_status_t s = h5_attr_write_str(ds, WEIGHTS_CHECKSUM_ATTR, sum);
    h5_lock();
    H5Dclose(ds);
    h5_unlock();
    return s;
}

weights_read_t weights_read_dataset(hid_t loc, const char *name, hid_t mem_type, int ndim,
                                    const int *shape, void *out, size_t bytes, int *got_ndim,
                                    hsize_t *got_dims)
{
    h5_lock();
    weights_read_t r = WEIGHTS_READ_OK;
    *got_ndim = -1;
    if (!h5_exists(loc, name)) {
        h5_unlock();
        return WEIGHTS_READ_MISSING;
    }
    hid_t ds = H5Dopen2(loc, name, H5P_DEFAULT);
    hid_t sp = ds < 0 ? H5I_INVALID_HID : H5Dget_space(ds);
    int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
    if (nd >= 0 && nd <= H5S_MAX_RANK) H5Sget_simple_extent_dims(sp, got_dims, NULL);
    *got_ndim = nd;
    int ok = nd == ndim;
    for (int i = 0; ok && i < nd; i++) ok = got_dims[i] == (hsize_t)shape[i];
    if (ds < 0 || sp < 0)
        r = WEIGHTS_READ_DAMAGED;
    else if (!ok)
        r = WEIGHTS_READ_SHAPE;
    else if (H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
        r = WEIGHTS_READ_DAMAGED;
    else if (h5_attr_exists(ds, WEIGHTS_CHECKSUM_ATTR)) {
        char want[64], have[24];
        snprintf(have, sizeof have, "%016llx",
                 (unsigned long long)hash_words(HASH_SEED, out, bytes));
        if (h5_attr_read_str(ds, WEIGHTS_CHECKSUM_ATTR, want, sizeof want) != DDP_OK ||
            strcmp(want, have) != 0)
            r = WEIGHTS_READ_DAMAGED;
    }
    if (sp >= 0) H5Sclose(sp);
    if (ds >= 0) H5Dclose(ds);
    h5_unlock();
    return r;
}

size_t weights_model_bytes(const model_t *m)
{
    return (m->nparams + m->nbufs) * sizeof(float) + (size_t)m->nlayers * sizeof(int64_t);
}

ddp_status_t weights_write_model(hid_t file, const model_t *m, const weights_host_t *h)
{
    ddp_status_t s = DDP_OK;
    for (int t = 0; t < m->ntensors && s == DDP_OK; t++) {
        const tensor_t *T = &m->tensors[t];
        char name[TENSOR_NAME_MAX + 8];
        snprintf(name, sizeof name, "/model/%s", T->name);
        hsize_t dims[4];
        for (int i = 0; i < T->ndim; i++) dims[i] = (hsize_t)T->shape[i];
        if (T->kind == TENSOR_COUNTER) {
            s = weights_write_dataset(file, name, H5T_NATIVE_INT64, H5T_STD_I64LE, 0, dims,
                                      &h->counters[T->layer], sizeof(int64_t));
        } else {
            const float *src = (T->kind == TENSOR_PARAM ? h->params : h->bufs) + T->offset;
            s = weights_write_dataset(file, name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, T->ndim, dims,
                                      src, T->numel * sizeof(float));
        }
    }
    return s;
}

ddp_status_t weights_write_attrs(hid_t file, const char *format, int64_t format_version,
                                 const weights_meta_t *meta)
{
    DDP_TRY(h5_attr_write_str(file, "format", format));
    DDP_TRY(h5_attr_write_i64(file, "format_version", format_version));
    DDP_TRY(h5_attr_write_str(file, "program_version", ddp_version()));
    if (!meta) return DDP_OK;
    DDP_TRY(h5_attr_write_i64(file, "step", meta->step));
    DDP_TRY(h5_attr_write_i64(file, "epoch", meta->epoch));
    DDP_TRY(h5_attr_write_i64(file, "world_size", meta->world_size));
    if (!meta->cfg) return DDP_OK;
    size_t need = config_dump(meta->cfg, NULL, 0) + 1;
    char *text = malloc(need);
    if (!text) return ddp_fail(DDP_ERR_NOMEM, "out of memory for the configuration text");
    config_dump(meta->cfg, text, need);
    ddp_status_t s = h5_attr_write_str(file, "config", text);
    free(text);
    DDP_TRY(s);
    DDP_TRY(h5_attr_write_str(file, "model", meta->cfg->model));
    return h5_attr_write_i64(file, "seed", meta->cfg->seed);
}

ddp_status_t weights_save(const char *path, const model_t *m, const weights_meta_t *meta)
{
    weights_host_t h;
    DDP_TRY(weights_host_alloc(&h, m));
    weights_host_download(&h, m);
    hid_t f;
    h5_mem_image_t img = {0};
    ddp_status_t s = h5_mem_create(&f, &img, weights_model_bytes(m) + ((size_t)64 << 10));
    if (s == DDP_OK) {
        s = weights_write_model(f, m, &h);
        if (s == DDP_OK) s = weights_write_attrs(f, WEIGHTS_FORMAT, WEIGHTS_FORMAT_VERSION, meta);
        if (s == DDP_OK)
            s = h5_mem_finish(f, &img);
        else
            h5_mem_abandon(f);
        if (s == DDP_OK) s = atomicfile_write(path, img.data, img.len);
    }
    h5_mem_image_free(&img);
    weights_host_free(&h);
    if (s != DDP_OK && s != DDP_ERR_IO)
        return ddp_fail_override(s, "cannot write weights file %s: %s", path, ddp_error_message());
    return s;
}

/* ---- loading ------------------------------------------------------------- */

/* The problems found, as many as fit in one error line (the rest counted). */
typedef struct problems {
    char text[640];
    size_t used;
    int n, shown;
} problems_t;

static void problem_(problems_t *pr, const char *fmt, const char *a, const char *b)
{
    char item[320];
    pr->n++;
    int w = snprintf(item, sizeof item, fmt, a, b);
    if (w < 0 || pr->used + (size_t)w + 2 >= sizeof pr->text) return; /* counted, not shown */
    pr->used += (size_t)snprintf(pr->text + pr->used, sizeof pr->text - pr->used, "%s%s",
                                 pr->shown ? "; " : "", item);
    pr->shown++;
}

static void shape_text_(char *buf, size_t n, int ndim, const hsize_t *d)
{
    size_t u = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && u < n; i++)
        u += (size_t)snprintf(buf + u, n - u, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
    if (u < n) snprintf(buf + u, n - u, "]");
}

typedef struct extra_iter {
    const model_t *m;
    problems_t *pr;
} extra_iter_t;

static herr_t find_extra_(hid_t g, const char *name, const h5_link_info_t *info, void *arg)
{
    extra_iter_t *it = arg;
    if (model_find_tensor(it->m, name) < 0) problem_(it->pr, "unexpected tensor %s%s", name, "");
    return 0;
}

/* Whether dataset `name` of g, where it exists, carries its checksum
 * (under the HDF5 lock). */
static int dataset_signed_(hid_t g, const char *name)
{
    if (!h5_exists(g, name)) return 1; /* reported as missing */
    hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
    if (ds < 0) return 1; /* reported as unreadable */
    int yes = h5_attr_exists(ds, WEIGHTS_CHECKSUM_ATTR);
    H5Dclose(ds);
    return yes;
}

ddp_status_t weights_load(const char *path, model_t *m)
{
    return weights_load_group(path, "/model", m);
}

ddp_status_t weights_load_group(const char *path, const char *group, model_t *m)
{
    hid_t f;
    if (h5_open_read(path, &f) != DDP_OK)
        return ddp_fail_override(DDP_ERR_INPUT, "--init %s", ddp_error_message());
    weights_host_t h;
    ddp_status_t s = weights_host_alloc(&h, m);
    if (s == DDP_OK) {
        weights_host_download(&h, m);
        int damaged;
        s = weights_read_group(f, group, m, &h, "--init", path, &damaged);
        if (s == DDP_OK) weights_host_upload(&h, m);
        weights_host_free(&h);
    }
    h5_lock();
    H5Fclose(f);
    h5_unlock();
    return s;
}

ddp_status_t weights_read_group(hid_t f, const char *group, const model_t *m, weights_host_t *h,
                                const char *option, const char *path, int *damaged)
{
    problems_t pr = {.used = 0, .n = 0};
    int bad_tensor = -1; /* the first tensor holding a non-finite value */
    size_t bad_index = 0;
    float bad_value = 0;
    *damaged = 0;
    h5_lock();
    if (!h5_exists(f, group)) {
        h5_unlock();
        return ddp_fail(DDP_ERR_INPUT,
                        "%s %s: no group %s; a weights file holds "
                        "%s/<name> datasets (PyTorch state_dict names such as layers.0.weight)",
                        option, path, group, group);
    }
    hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    /* a file ddptrain wrote signs every dataset: one without is not believed
     * (files from PyTorch or h5py have no format_version and no checksums) */
    int signed_file = h5_attr_exists(f, "format_version");
    const char *unsigned_name = NULL;
    for (int t = 0; t < m->ntensors && g >= 0; t++) {
        const tensor_t *T = &m->tensors[t];
        if (signed_file && !unsigned_name && !dataset_signed_(g, T->name)) unsigned_name = T->name;
        int nd;
        hsize_t dims[H5S_MAX_RANK] = {0};
        void *out;
        size_t bytes;
        hid_t type;
        if (T->kind == TENSOR_COUNTER) {
            out = &h->counters[T->layer];
            bytes = sizeof(int64_t);
            type = H5T_NATIVE_INT64;
        } else {
            out = (T->kind == TENSOR_PARAM ? h->params : h->bufs) + T->offset;
            bytes = T->numel * sizeof(float);
            type = H5T_NATIVE_FLOAT;
        }
        weights_read_t r =
            weights_read_dataset(g, T->name, type, T->ndim, T->shape, out, bytes, &nd, dims);
        if (r == WEIGHTS_READ_MISSING) {
            problem_(&pr, "missing tensor %s%s", T->name, "");
        } else if (r == WEIGHTS_READ_SHAPE) {
            char want[96], got[96], both[256];
            hsize_t wd[4];
            for (int i = 0; i < T->ndim; i++) wd[i] = (hsize_t)T->shape[i];
            shape_text_(want, sizeof want, T->ndim, wd);
            shape_text_(got, sizeof got, nd < 0 ? 0 : nd, dims);
            snprintf(both, sizeof both, "file %s, model %s", got, want);
            problem_(&pr, "%s has shape %s", T->name, both);
        } else if (r == WEIGHTS_READ_DAMAGED) {
            problem_(&pr, "%s cannot be read or fails its checksum (corrupt file)%s", T->name, "");
            *damaged = 1;
        } else if (T->kind != TENSOR_COUNTER && bad_tensor < 0) {
            /* a NaN or Inf would surface later as a diverged loss, far from its cause */
            const float *v = out;
            for (size_t i = 0; i < T->numel && bad_tensor < 0; i++)
                if (!isfinite(v[i])) {
                    bad_tensor = t;
                    bad_index = i;
                    bad_value = v[i];
                }
        }
    }
    if (g >= 0) {
        extra_iter_t it = {m, &pr};
        H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, find_extra_, &it);
        H5Gclose(g);
    } else {
        problem_(&pr, "group %s cannot be opened%s", group, "");
        *damaged = 1;
    }
    h5_unlock();
    if (unsigned_name) {
        *damaged = 1;
        return ddp_fail(DDP_ERR_INPUT,
                        "%s %s: dataset %s/%s has no checksum (the file was edited or written by "
                        "another tool); use an unedited file, or export the weights without "
                        "ddptrain's format attributes",
                        option, path, group, unsigned_name);
    }
    if (pr.n == 0 && bad_tensor >= 0) {
        const tensor_t *T = &m->tensors[bad_tensor];
        return ddp_fail(DDP_ERR_INPUT,
                        "%s %s: dataset %s/%s holds %s at element %zu of %zu (a diverged run's "
                        "weights?); fix or re-export the file, or start without %s",
                        option, path, group, T->name,
                        isnan(bad_value) ? "NaN"
                        : bad_value > 0  ? "+Inf"
                                         : "-Inf",
                        bad_index, T->numel, option);
    }
    if (pr.n == 0) return DDP_OK;
    char more[48] = "";
    if (pr.shown < pr.n) snprintf(more, sizeof more, "; and %d more", pr.n - pr.shown);
    return ddp_fail(DDP_ERR_INPUT,
                    "%s %s does not match the model (%d problem%s): %s%s; check "
                    "--model against the file (h5ls -r %s)",
                    option, path, pr.n, pr.n > 1 ? "s" : "", pr.text, more, path);
}
