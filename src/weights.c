/* weights.c -- write and read weights files (see weights.h). */
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5util.h"
#include "version.h"

ddp_status_t weights_save(const char *path, const model_t *m, const weights_meta_t *meta)
{
    float *p = malloc((m->nparams + 1) * sizeof *p), *b = malloc((m->nbufs + 1) * sizeof *b);
    if (!p || !b) {
        free(p);
        free(b);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory writing %s", path);
    }
    m->compute->download(p, m->params, m->nparams * sizeof(float));
    m->compute->download(b, m->bufs, m->nbufs * sizeof(float));
    h5_atomic_t a;
    ddp_status_t s = h5_atomic_create(&a, path);
    for (int t = 0; t < m->ntensors && s == DDP_OK; t++) {
        const tensor_t *T = &m->tensors[t];
        char name[TENSOR_NAME_MAX + 8];
        snprintf(name, sizeof name, "/model/%s", T->name);
        hsize_t dims[4];
        for (int i = 0; i < T->ndim; i++) dims[i] = (hsize_t)T->shape[i];
        if (T->kind == TENSOR_COUNTER) {
            int64_t v = m->layers[T->layer].num_batches_tracked;
            s = h5_write(a.file, name, H5T_NATIVE_INT64, H5T_STD_I64LE, 0, dims, &v);
        } else {
            const float *src = (T->kind == TENSOR_PARAM ? p : b) + T->offset;
            s = h5_write(a.file, name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, T->ndim, dims, src);
        }
    }
    if (s == DDP_OK) s = h5_attr_write_str(a.file, "format", WEIGHTS_FORMAT);
    if (s == DDP_OK) s = h5_attr_write_i64(a.file, "format_version", WEIGHTS_FORMAT_VERSION);
    if (s == DDP_OK) s = h5_attr_write_str(a.file, "program_version", ddp_version());
    if (s == DDP_OK && meta) {
        s = h5_attr_write_i64(a.file, "step", meta->step);
        if (s == DDP_OK) s = h5_attr_write_i64(a.file, "epoch", meta->epoch);
        if (s == DDP_OK) s = h5_attr_write_i64(a.file, "world_size", meta->world_size);
        if (s == DDP_OK && meta->cfg) {
            size_t need = config_dump(meta->cfg, NULL, 0) + 1;
            char *text = malloc(need);
            if (!text) {
                s = ddp_fail(DDP_ERR_NOMEM, "out of memory writing %s", path);
            } else {
                config_dump(meta->cfg, text, need);
                s = h5_attr_write_str(a.file, "config", text);
                if (s == DDP_OK) s = h5_attr_write_str(a.file, "model", meta->cfg->model);
                if (s == DDP_OK) s = h5_attr_write_i64(a.file, "seed", meta->cfg->seed);
                free(text);
            }
        }
    }
    free(p);
    free(b);
    if (s != DDP_OK) {
        h5_atomic_abandon(&a);
        return ddp_fail_override(s, "cannot write weights file %s: %s", path, ddp_error_message());
    }
    return h5_atomic_commit(&a);
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

ddp_status_t weights_load(const char *path, model_t *m)
{
    return weights_load_group(path, "/model", m);
}

ddp_status_t weights_load_group(const char *path, const char *group, model_t *m)
{
    hid_t f;
    DDP_TRY(h5_open_read(path, &f));
    problems_t pr = {.used = 0, .n = 0};
    float *p = calloc(m->nparams + 1, sizeof *p), *b = calloc(m->nbufs + 1, sizeof *b);
    int64_t *counters = calloc((size_t)m->nlayers + 1, sizeof *counters);
    ddp_status_t s = DDP_OK;
    if (!p || !b || !counters) s = ddp_fail(DDP_ERR_NOMEM, "out of memory reading %s", path);
    if (s == DDP_OK) {
        m->compute->download(p, m->params, m->nparams * sizeof(float));
        m->compute->download(b, m->bufs, m->nbufs * sizeof(float));
    }
    h5_lock();
    if (s == DDP_OK && !h5_exists(f, group)) {
        s = ddp_fail(DDP_ERR_INPUT,
                     "--init %s: no group %s; a weights file holds "
                     "%s/<name> datasets (PyTorch state_dict names such as layers.0.weight)",
                     path, group, group);
    }
    hid_t g = s == DDP_OK ? H5Gopen2(f, group, H5P_DEFAULT) : H5I_INVALID_HID;
    for (int t = 0; t < m->ntensors && s == DDP_OK; t++) {
        const tensor_t *T = &m->tensors[t];
        if (H5Lexists(g, T->name, H5P_DEFAULT) <= 0) {
            problem_(&pr, "missing tensor %s%s", T->name, "");
            continue;
        }
        hid_t ds = H5Dopen2(g, T->name, H5P_DEFAULT);
        hid_t sp = ds < 0 ? H5I_INVALID_HID : H5Dget_space(ds);
        int nd = sp < 0 ? -1 : H5Sget_simple_extent_ndims(sp);
        hsize_t dims[H5S_MAX_RANK] = {0};
        if (nd >= 0) H5Sget_simple_extent_dims(sp, dims, NULL);
        int ok = nd == T->ndim;
        for (int i = 0; ok && i < nd; i++) ok = dims[i] == (hsize_t)T->shape[i];
        if (!ok) {
            char want[96], got[96], both[256];
            hsize_t wd[4];
            for (int i = 0; i < T->ndim; i++) wd[i] = (hsize_t)T->shape[i];
            shape_text_(want, sizeof want, T->ndim, wd);
            shape_text_(got, sizeof got, nd < 0 ? 0 : nd, dims);
            snprintf(both, sizeof both, "file %s, model %s", got, want);
            problem_(&pr, "%s has shape %s", T->name, both);
        } else {
            herr_t rc;
            if (T->kind == TENSOR_COUNTER)
                rc = H5Dread(ds, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                             &counters[T->layer]);
            else
                rc = H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                             (T->kind == TENSOR_PARAM ? p : b) + T->offset);
            if (rc < 0) problem_(&pr, "%s cannot be read as numbers%s", T->name, "");
        }
        if (sp >= 0) H5Sclose(sp);
        if (ds >= 0) H5Dclose(ds);
    }
    if (s == DDP_OK) {
        extra_iter_t it = {m, &pr};
        H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, find_extra_, &it);
    }
    if (g >= 0) H5Gclose(g);
    H5Fclose(f);
    h5_unlock();
    if (s == DDP_OK && pr.n > 0) {
        char more[48] = "";
        if (pr.shown < pr.n) snprintf(more, sizeof more, "; and %d more", pr.n - pr.shown);
        s = ddp_fail(DDP_ERR_INPUT,
                     "--init %s does not match the model (%d problem%s): %s%s; check "
                     "--model against the file (h5ls -r %s)",
                     path, pr.n, pr.n > 1 ? "s" : "", pr.text, more, path);
    }
    if (s == DDP_OK) {
        m->compute->upload(m->params, p, m->nparams * sizeof(float));
        m->compute->upload(m->bufs, b, m->nbufs * sizeof(float));
        for (int i = 0; i < m->nlayers; i++) m->layers[i].num_batches_tracked = counters[i];
    }
    free(p);
    free(b);
    free(counters);
    return s;
}
