/* model.c -- the model: spec parsing, shapes, tensor and bucket layout over
 * flat buffers, initialisation, and forward/backward through the compute
 * backend (SyncBatchNorm reduces its statistics over the communicator). */
#include "model.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

#define BN_EPS      1e-5f
#define BN_MOMENTUM 0.1f

static const char *const spec_help =
    "allowed layers: linear:OUT, conv:OUT:K[:STRIDE[:PAD]], maxpool:K[:STRIDE], "
    "avgpool:K[:STRIDE], gap, bn, relu, gelu, dropout:P, flatten";

/* ---- spec parsing -------------------------------------------------------- */

typedef struct spec_layer {
    layer_kind_t kind;
    char token[40];
    int a[4]; /* numeric arguments */
    int nargs;
    int auto_out; /* linear:auto */
    float p;
} spec_layer_t;

static ddp_status_t spec_err_(int idx, const char *tok, const char *fmt, const char *detail)
{
    char what[256];
    snprintf(what, sizeof what, fmt, detail);
    return ddp_fail(DDP_ERR_USAGE, "--model: layer %d '%s': %s; %s", idx, tok, what, spec_help);
}

/* Parse "name:a:b:c" into s.  Integers must be positive unless noted. */
static ddp_status_t parse_token_(int idx, const char *tok, spec_layer_t *s)
{
    static const struct {
        const char *name;
        layer_kind_t kind;
        int min_args, max_args;
    } kinds[] = {
        {"linear", LAYER_LINEAR, 1, 1},   {"conv", LAYER_CONV, 2, 4},
        {"maxpool", LAYER_MAXPOOL, 1, 2}, {"avgpool", LAYER_AVGPOOL, 1, 2},
        {"gap", LAYER_GAP, 0, 0},         {"bn", LAYER_BN, 0, 0},
        {"relu", LAYER_RELU, 0, 0},       {"gelu", LAYER_GELU, 0, 0},
        {"dropout", LAYER_DROPOUT, 1, 1}, {"flatten", LAYER_FLATTEN, 0, 0},
    };
    memset(s, 0, sizeof *s);
    if (strlen(tok) >= sizeof s->token) return spec_err_(idx, tok, "%s", "token too long");
    strcpy(s->token, tok);
    char buf[64];
    snprintf(buf, sizeof buf, "%s", tok);
    char *save = NULL, *name = strtok_r(buf, ":", &save);
    if (!name) return spec_err_(idx, tok, "%s", "empty layer");
    int k = -1;
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i].name, name) == 0) k = (int)i;
    if (k < 0) return spec_err_(idx, tok, "unknown layer type '%s'", name);
    s->kind = kinds[k].kind;
    char *arg;
    while ((arg = strtok_r(NULL, ":", &save)) != NULL) {
        if (s->nargs >= kinds[k].max_args)
            return spec_err_(idx, tok, "too many arguments for %s", name);
        char *end;
        if (s->kind == LAYER_DROPOUT) {
            double p = strtod(arg, &end);
            if (*end || end == arg || !(p >= 0 && p < 1))
                return spec_err_(idx, tok, "%s", "dropout probability must be in [0, 1)");
            s->p = (float)p;
        } else if (s->kind == LAYER_LINEAR && strcmp(arg, "auto") == 0) {
            s->auto_out = 1;
        } else {
            long v = strtol(arg, &end, 10);
            int allow_zero = s->kind == LAYER_CONV && s->nargs == 3; /* padding */
            if (*end || end == arg || v < (allow_zero ? 0 : 1) || v > (1 << 24))
                return spec_err_(idx, tok, "argument '%s' must be a positive integer", arg);
            s->a[s->nargs] = (int)v;
        }
        s->nargs++;
    }
    if (s->nargs < kinds[k].min_args) return spec_err_(idx, tok, "%s needs more arguments", name);
    return DDP_OK;
}

/* ---- layout ---------------------------------------------------------------- */

typedef struct builder {
    model_t *m;
    int cap_tensors;
} builder_t;

static int add_tensor_(builder_t *b, int layer, const char *suffix, tensor_kind_t kind, int ndim,
                       const int *shape)
{
    model_t *m = b->m;
    if (m->ntensors == b->cap_tensors) {
        int cap = b->cap_tensors ? 2 * b->cap_tensors : 16;
        tensor_t *t = realloc(m->tensors, (size_t)cap * sizeof *t);
        if (!t) return -1;
        m->tensors = t;
        b->cap_tensors = cap;
    }
    tensor_t *t = &m->tensors[m->ntensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "layers.%d.%s", m->layers[layer].index, suffix);
    t->kind = kind;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->numel *= (size_t)shape[i];
    }
    t->layer = layer;
    t->bucket = -1;
    return m->ntensors++;
}

/* Shapes: infer every layer's output from its input; create its tensors. */
static ddp_status_t infer_(builder_t *b, const spec_layer_t *sl, int nspec, const model_opts_t *o)
{
    model_t *m = b->m;
    act_shape_t cur = o->input;
    for (int i = 0; i < nspec; i++) {
        layer_t *L = &m->layers[i];
        const spec_layer_t *s = &sl[i];
        memset(L, 0, sizeof *L);
        L->kind = s->kind;
        L->index = i;
        strcpy(L->token, s->token);
        L->weight = L->bias = L->running_mean = L->running_var = L->num_batches = -1;
        act_shape_t in = cur, out = cur;
        char shape_txt[64];
        if (in.image)
            snprintf(shape_txt, sizeof shape_txt, "[%d, %d, %d]", in.c, in.h, in.w);
        else
            snprintf(shape_txt, sizeof shape_txt, "[%d] features", in.c);
        switch (s->kind) {
        case LAYER_LINEAR: {
            int fin = (int)act_numel(in); /* implicit flatten of images */
            int fout = s->auto_out ? o->outputs : s->a[0];
            if (fout < 1)
                return spec_err_(i, s->token, "%s",
                                 "'auto' needs the number of outputs of the data");
            in = (act_shape_t){fin, 1, 1, 0};
            out = (act_shape_t){fout, 1, 1, 0};
            int ws[2] = {fout, fin}, bs[1] = {fout};
            L->weight = add_tensor_(b, i, "weight", TENSOR_PARAM, 2, ws);
            L->bias = add_tensor_(b, i, "bias", TENSOR_PARAM, 1, bs);
            break;
        }
        case LAYER_CONV: {
            if (!in.image)
                return spec_err_(i, s->token, "conv needs image input [C, H, W], got %s",
                                 shape_txt);
            L->k = s->a[1];
            L->stride = s->nargs > 2 ? s->a[2] : 1;
            L->pad = s->nargs > 3 ? s->a[3] : 0;
            int oh = (in.h + 2 * L->pad - L->k) / L->stride + 1;
            int ow = (in.w + 2 * L->pad - L->k) / L->stride + 1;
            if (in.h + 2 * L->pad < L->k || in.w + 2 * L->pad < L->k || oh < 1 || ow < 1)
                return spec_err_(i, s->token, "kernel larger than the (padded) input %s",
                                 shape_txt);
            out = (act_shape_t){s->a[0], oh, ow, 1};
            int ws[4] = {s->a[0], in.c, L->k, L->k}, bs[1] = {s->a[0]};
            L->weight = add_tensor_(b, i, "weight", TENSOR_PARAM, 4, ws);
            L->bias = add_tensor_(b, i, "bias", TENSOR_PARAM, 1, bs);
            break;
        }
        case LAYER_MAXPOOL:
        case LAYER_AVGPOOL: {
            if (!in.image)
                return spec_err_(i, s->token, "pooling needs image input [C, H, W], got %s",
                                 shape_txt);
            L->k = s->a[0];
            L->stride = s->nargs > 1 ? s->a[1] : L->k;
            if (in.h < L->k || in.w < L->k)
                return spec_err_(i, s->token, "window larger than the input %s", shape_txt);
            out = (act_shape_t){in.c, (in.h - L->k) / L->stride + 1, (in.w - L->k) / L->stride + 1,
                                1};
            break;
        }
        case LAYER_GAP:
            if (!in.image)
                return spec_err_(i, s->token, "gap needs image input [C, H, W], got %s", shape_txt);
            out = (act_shape_t){in.c, 1, 1, 0};
            break;
        case LAYER_BN: {
            int cs[1] = {in.c}, none[1] = {0};
            L->weight = add_tensor_(b, i, "weight", TENSOR_PARAM, 1, cs);
            L->bias = add_tensor_(b, i, "bias", TENSOR_PARAM, 1, cs);
            L->running_mean = add_tensor_(b, i, "running_mean", TENSOR_BUFFER, 1, cs);
            L->running_var = add_tensor_(b, i, "running_var", TENSOR_BUFFER, 1, cs);
            L->num_batches = add_tensor_(b, i, "num_batches_tracked", TENSOR_COUNTER, 0, none);
            break;
        }
        case LAYER_FLATTEN: out = (act_shape_t){(int)act_numel(in), 1, 1, 0}; break;
        case LAYER_DROPOUT: L->p = s->p; break;
        case LAYER_RELU:
        case LAYER_GELU: break;
        }
        if (m->ntensors > 0 && m->tensors == NULL)
            return ddp_fail(DDP_ERR_NOMEM, "out of memory building the model");
        L->in = in;
        L->out = out;
        cur = out;
    }
    return DDP_OK;
}

/* Is tensor t named by the --freeze list?  Entries are tensor names or
 * "layers.<i>" for all parameters of a layer. */
static int frozen_by_(const char *list, const tensor_t *t, const layer_t *L)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "layers.%d", L->index);
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ",");
        if ((len == strlen(t->name) && strncmp(p, t->name, len) == 0) ||
            (len == strlen(prefix) && strncmp(p, prefix, len) == 0))
            return 1;
        p += len;
        if (*p == ',') p++;
    }
    return 0;
}

static ddp_status_t check_freeze_list_(const model_t *m, const char *list)
{
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ",");
        int found = 0;
        for (int t = 0; t < m->ntensors && !found; t++) {
            const tensor_t *T = &m->tensors[t];
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layers.%d", m->layers[T->layer].index);
            if (T->kind == TENSOR_PARAM &&
                ((len == strlen(T->name) && strncmp(p, T->name, len) == 0) ||
                 (len == strlen(prefix) && strncmp(p, prefix, len) == 0)))
                found = 1;
        }
        if (!found && len > 0)
            return ddp_fail(DDP_ERR_USAGE,
                            "--freeze: '%.*s' names no parameter of the model "
                            "(use names like layers.0.weight or layers.0)",
                            (int)len, p);
        p += len;
        if (*p == ',') p++;
    }
    return DDP_OK;
}

/* Buckets: trainable parameters in reverse order of the parameter list, a
 * bucket closed when the next parameter would pass its cap (the first
 * bucket has the small first cap).  A parameter is never split. */
static ddp_status_t layout_(model_t *m, const model_opts_t *o)
{
    int nparam = 0;
    for (int t = 0; t < m->ntensors; t++) {
        tensor_t *T = &m->tensors[t];
        if (T->kind != TENSOR_PARAM) continue;
        nparam++;
        T->frozen = o->freeze && o->freeze[0] && frozen_by_(o->freeze, T, &m->layers[T->layer]);
    }
    if (o->freeze && o->freeze[0]) DDP_TRY(check_freeze_list_(m, o->freeze));
    m->buckets = calloc((size_t)(nparam ? nparam : 1), sizeof *m->buckets);
    int *order = calloc((size_t)(nparam ? nparam : 1), sizeof *order);
    if (!m->buckets || !order) {
        free(order);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory laying out the model");
    }
    size_t off = 0;
    int nb = -1, norder = 0;
    size_t cur_bytes = 0;
    for (int t = m->ntensors - 1; t >= 0; t--) {
        tensor_t *T = &m->tensors[t];
        if (T->kind != TENSOR_PARAM || T->frozen) continue;
        size_t bytes = T->numel * sizeof(float);
        size_t cap = nb <= 0 ? o->first_bucket_bytes : o->bucket_cap_bytes;
        if (nb < 0 || (cur_bytes > 0 && cur_bytes + bytes > cap)) {
            if (nb >= 0) m->buckets[nb].count = off - m->buckets[nb].offset;
            nb++;
            m->buckets[nb].offset = off;
            cur_bytes = 0;
        }
        T->bucket = nb;
        T->offset = off;
        off += T->numel;
        cur_bytes += bytes;
        m->buckets[nb].ntensors++;
        order[norder++] = t;
    }
    if (nb >= 0) m->buckets[nb].count = off - m->buckets[nb].offset;
    m->nbuckets = nb + 1;
    m->ntrainable = off;
    if (off == 0) { /* nothing to train: the optimizer and the all-reduce would idle */
        free(order);
        if (nparam == 0)
            return ddp_fail(DDP_ERR_USAGE,
                            "--model %s has no parameters to train (only parameter-free "
                            "layers); add a layer with weights, e.g. linear:auto at the end",
                            o->spec);
        return ddp_fail(DDP_ERR_USAGE,
                        "--freeze %s freezes every parameter of the model: nothing would train; "
                        "freeze fewer (names like layers.0.weight or layers.0)",
                        o->freeze);
    }
    /* tensor lists per bucket, in arrival order */
    for (int b = 0, k = 0; b < m->nbuckets; b++) {
        m->buckets[b].tensors = malloc((size_t)m->buckets[b].ntensors * sizeof(int));
        if (!m->buckets[b].tensors) {
            free(order);
            return ddp_fail(DDP_ERR_NOMEM, "out of memory laying out the model");
        }
        for (int i = 0; i < m->buckets[b].ntensors; i++) m->buckets[b].tensors[i] = order[k++];
    }
    free(order);
    /* frozen parameters after the trainable ones; buffers in their own buffer */
    size_t boff = 0;
    for (int t = 0; t < m->ntensors; t++) {
        tensor_t *T = &m->tensors[t];
        if (T->kind == TENSOR_PARAM && T->frozen) {
            T->offset = off;
            off += T->numel;
        } else if (T->kind == TENSOR_BUFFER) {
            T->offset = boff;
            boff += T->numel;
        }
    }
    m->nparams = off;
    m->nbufs = boff;
    return DDP_OK;
}

/* ---- memory -------------------------------------------------------------- */

static void *dev_alloc_(model_t *m, size_t bytes, ddp_status_t *s, const char *what)
{
    if (*s != DDP_OK) return NULL;
    void *p = m->compute->alloc(bytes ? bytes : 1);
    if (!p)
        *s = ddp_fail(DDP_ERR_NOMEM,
                      "out of %s memory allocating %zu bytes for %s; reduce "
                      "--batch or the model size",
                      m->compute->name, bytes, what);
    return p;
}

size_t model_max_bucket(const model_t *m)
{
    size_t most = 1;
    for (int b = 0; b < m->nbuckets; b++)
        if (m->buckets[b].count > most) most = m->buckets[b].count;
    return most;
}

/* gbase: each bucket in its place of the gradient buffer, or in its slot. */
static ddp_status_t grad_bases_(model_t *m)
{
    m->gbase = calloc((size_t)m->nbuckets + 1, sizeof *m->gbase);
    if (!m->gbase) return ddp_fail(DDP_ERR_NOMEM, "out of memory laying out the gradients");
    for (int b = 0; b < m->nbuckets; b++)
        m->gbase[b] = m->grad_slots ? m->grads + (size_t)(b % m->grad_slots) * m->slot_count
                                    : m->grads + m->buckets[b].offset;
    m->gbase[m->nbuckets] =
        m->grads + (m->grad_slots ? (size_t)m->grad_slots * m->slot_count : m->ntrainable);
    return DDP_OK;
}

ddp_status_t model_alloc(model_t *m, const model_mem_t *mem)
{
    ddp_status_t s = DDP_OK;
    if (m->grad_slots) m->slot_count = model_max_bucket(m);
    size_t gcount = m->grad_slots ? (size_t)m->grad_slots * m->slot_count +
                                        (m->nparams - m->ntrainable)
                                  : m->nparams;
    m->grad_bytes = gcount * sizeof(float);
    if (mem && mem->alloc) {
        void *p = NULL, *g = NULL;
        s = mem->alloc(mem->arg, m->nparams * sizeof(float) + sizeof(float), &p);
        if (s == DDP_OK) s = mem->alloc(mem->arg, m->grad_bytes + sizeof(float), &g);
        m->params = p;
        m->grads = g;
        m->mem = *mem;
    } else {
        m->params = dev_alloc_(m, m->nparams * sizeof(float), &s, "parameters");
        m->grads = dev_alloc_(m, m->grad_bytes, &s, "gradients");
    }
    if (s == DDP_OK) s = grad_bases_(m);
    m->bufs = dev_alloc_(m, m->nbufs * sizeof(float), &s, "BatchNorm buffers");
    size_t max_act = model_max_act(m), ws = model_conv_ws_bytes(m, m->batch);
    for (int i = 0; i < m->nlayers && s == DDP_OK; i++) {
        layer_t *L = &m->layers[i];
        size_t outn = act_numel(L->out);
        if (L->kind != LAYER_FLATTEN)
            L->y = dev_alloc_(m, (size_t)m->batch * outn * sizeof(float), &s, L->token);
        if (L->kind == LAYER_MAXPOOL)
            L->argmax = dev_alloc_(m, (size_t)m->batch * outn * sizeof(int32_t), &s, L->token);
        if (L->kind == LAYER_BN) {
            L->mean = dev_alloc_(m, (size_t)L->in.c * sizeof(float), &s, L->token);
            L->invstd = dev_alloc_(m, (size_t)L->in.c * sizeof(float), &s, L->token);
            L->stats = dev_alloc_(m, (size_t)2 * L->in.c * sizeof(double), &s, L->token);
        }
    }
    for (int k = 0; k < 2; k++)
        m->dact[k] =
            dev_alloc_(m, (size_t)m->batch * max_act * sizeof(float), &s, "activation gradients");
    if (ws) m->conv_ws = dev_alloc_(m, ws, &s, "convolution workspace");
    if (s == DDP_OK && !(m->ops_done = m->compute->event_create()))
        s = ddp_fail(DDP_ERR_NOMEM, "out of memory for an event of the %s backend",
                     m->compute->name);
    m->act_bytes = model_act_bytes(m);
    return s;
}

void model_ops_wait(model_t *m)
{
    m->compute->event_record(m->ops_done);
    m->compute->event_wait(m->ops_done);
}

size_t model_max_act(const model_t *m)
{
    size_t max_act = act_numel(m->input);
    for (int i = 0; i < m->nlayers; i++) {
        const layer_t *L = &m->layers[i];
        if (act_numel(L->in) > max_act) max_act = act_numel(L->in);
        if (act_numel(L->out) > max_act) max_act = act_numel(L->out);
    }
    return max_act;
}

size_t model_conv_ws_bytes(const model_t *m, int batch)
{
    size_t ws = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const layer_t *L = &m->layers[i];
        if (L->kind != LAYER_CONV) continue;
        conv_dims_t d = {batch, L->in.c,   L->in.h, L->in.w,  L->out.c,
                         L->k,  L->stride, L->pad,  L->out.h, L->out.w};
        size_t need = m->compute->conv_ws_bytes(&d);
        if (need > ws) ws = need;
    }
    return ws;
}

size_t model_act_bytes_at(const model_t *m, int batch)
{
    size_t bytes = 0, B = (size_t)batch;
    for (int i = 0; i < m->nlayers; i++) {
        const layer_t *L = &m->layers[i];
        size_t outn = act_numel(L->out);
        if (L->kind != LAYER_FLATTEN) bytes += B * outn * sizeof(float);
        if (L->kind == LAYER_MAXPOOL) bytes += B * outn * sizeof(int32_t);
    }
    return bytes + 2 * B * model_max_act(m) * sizeof(float) + model_conv_ws_bytes(m, batch);
}

size_t model_act_bytes(const model_t *m)
{
    return model_act_bytes_at(m, m->batch);
}

ddp_status_t model_build(model_t *m, const model_opts_t *o, const compute_ops_t *compute)
{
    ddp_status_t s = model_layout(m, o, compute);
    if (s == DDP_OK) s = model_alloc(m, NULL);
    if (s != DDP_OK) model_free(m);
    return s;
}

ddp_status_t model_layout(model_t *m, const model_opts_t *o, const compute_ops_t *compute)
{
    memset(m, 0, sizeof *m);
    m->compute = compute;
    m->input = o->input;
    m->batch = o->batch;
    if (!o->spec || !o->spec[0]) return ddp_fail(DDP_ERR_USAGE, "--model is empty; %s", spec_help);
    /* split the spec */
    int nspec = 1;
    for (const char *p = o->spec; *p; p++) nspec += *p == ',';
    spec_layer_t *sl = calloc((size_t)nspec, sizeof *sl);
    m->layers = calloc((size_t)nspec, sizeof *m->layers);
    if (!sl || !m->layers) {
        free(sl);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory parsing --model");
    }
    ddp_status_t s = DDP_OK;
    const char *p = o->spec;
    for (int i = 0; i < nspec && s == DDP_OK; i++) {
        size_t len = strcspn(p, ",");
        char tok[64];
        snprintf(tok, sizeof tok, "%.*s", (int)(len < 63 ? len : 63), p);
        char *t = tok;
        while (isspace((unsigned char)*t)) t++;
        for (char *e = t + strlen(t); e > t && isspace((unsigned char)e[-1]);) *--e = '\0';
        s = parse_token_(i, t, &sl[i]);
        p += len + (p[len] == ',');
    }
    m->nlayers = nspec;
    builder_t b = {m, 0};
    if (s == DDP_OK) s = infer_(&b, sl, nspec, o);
    free(sl);
    if (s == DDP_OK) {
        act_shape_t last = m->layers[m->nlayers - 1].out;
        if (last.image)
            s = ddp_fail(DDP_ERR_USAGE,
                         "--model: the last layer '%s' outputs an image [%d, %d, %d]; "
                         "end the model with gap or linear:OUT",
                         m->layers[m->nlayers - 1].token, last.c, last.h, last.w);
        m->outputs = last.c;
    }
    if (s == DDP_OK) s = layout_(m, o);
    if (s != DDP_OK) model_free(m);
    return s;
}

void model_free(model_t *m)
{
    const compute_ops_t *compute = m->compute;
    if (compute) {
        for (int i = 0; i < m->nlayers; i++) {
            layer_t *L = &m->layers[i];
            compute->free(L->y);
            compute->free(L->argmax);
            compute->free(L->mean);
            compute->free(L->invstd);
            compute->free(L->stats);
        }
        if (m->ops_done) compute->event_destroy(m->ops_done);
        if (m->mem.alloc) {
            if (m->grads) m->mem.free(m->mem.arg, m->grads);
            if (m->params) m->mem.free(m->mem.arg, m->params);
        } else {
            compute->free(m->params);
            compute->free(m->grads);
        }
        compute->free(m->bufs);
        compute->free(m->dact[0]);
        compute->free(m->dact[1]);
        compute->free(m->conv_ws);
    }
    for (int b = 0; b < m->nbuckets; b++) free(m->buckets[b].tensors);
    free(m->gbase);
    free(m->buckets);
    free(m->tensors);
    free(m->layers);
    memset(m, 0, sizeof *m);
}

int model_find_tensor(const model_t *m, const char *name)
{
    for (int t = 0; t < m->ntensors; t++)
        if (strcmp(m->tensors[t].name, name) == 0) return t;
    return -1;
}

int model_has_layer(const model_t *m, layer_kind_t kind)
{
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].kind == kind) return 1;
    return 0;
}

/* ---- initialisation ------------------------------------------------------ */

ddp_status_t model_init_params(model_t *m, uint64_t seed)
{
    float *p = calloc(m->nparams ? m->nparams : 1, sizeof *p);
    float *bf = calloc(m->nbufs ? m->nbufs : 1, sizeof *bf);
    if (!p || !bf) {
        free(p);
        free(bf);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory initialising parameters");
    }
    for (int t = 0; t < m->ntensors; t++) {
        const tensor_t *T = &m->tensors[t];
        const layer_t *L = &m->layers[T->layer];
        if (T->kind == TENSOR_BUFFER) {
            float v = strstr(T->name, "running_var") ? 1.0f : 0.0f;
            for (size_t i = 0; i < T->numel; i++) bf[T->offset + i] = v;
            continue;
        }
        if (T->kind != TENSOR_PARAM) continue;
        float *dst = p + T->offset;
        if (L->kind == LAYER_BN) {
            float v = t == L->weight ? 1.0f : 0.0f;
            for (size_t i = 0; i < T->numel; i++) dst[i] = v;
            continue;
        }
        /* linear / conv: kaiming_uniform(a=sqrt(5)) gives bound 1/sqrt(fan_in);
         * the bias is uniform(+-1/sqrt(fan_in)) too */
        const tensor_t *W = &m->tensors[L->weight];
        size_t fan_in = W->numel / (size_t)W->shape[0];
        float bound = 1.0f / sqrtf((float)fan_in);
        uint64_t key = ddp_key(seed, DDP_STREAM_INIT, (uint64_t)t);
        for (size_t i = 0; i < T->numel; i += 4) {
            ddp_u32x4_t r = ddp_rand4(key, i / 4, 0);
            for (size_t j = 0; j < 4 && i + j < T->numel; j++)
                dst[i + j] = (2.0f * ddp_u01(r.v[j]) - 1.0f) * bound;
        }
    }
    m->compute->upload(m->params, p, m->nparams * sizeof(float));
    m->compute->upload(m->bufs, bf, m->nbufs * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) m->layers[i].num_batches_tracked = 0;
    free(p);
    free(bf);
    return DDP_OK;
}

/* ---- forward / backward ---------------------------------------------------- */

static void conv_dims_(const layer_t *L, int n, conv_dims_t *d)
{
    *d = (conv_dims_t){n,    L->in.c,   L->in.h, L->in.w,  L->out.c,
                       L->k, L->stride, L->pad,  L->out.h, L->out.w};
}

static void pool_dims_(const layer_t *L, int n, pool_dims_t *d)
{
    *d = (pool_dims_t){n, L->in.c, L->in.h, L->in.w, L->k, L->stride, L->pad, L->out.h, L->out.w};
}

/* Tensor t's slice of the parameters, gradients and buffers (NULL when
 * t < 0: the layer has no such tensor). */
static float *param_(const model_t *m, int t)
{
    return t < 0 ? NULL : m->params + m->tensors[t].offset;
}
static float *grad_(const model_t *m, int t)
{
    return model_tensor_grad(m, t);
}

float *model_bucket_grads(const model_t *m, int b)
{
    return m->gbase[b];
}

float *model_tensor_grad(const model_t *m, int id)
{
    if (id < 0) return NULL;
    const tensor_t *T = &m->tensors[id];
    if (T->bucket >= 0) return m->gbase[T->bucket] + (T->offset - m->buckets[T->bucket].offset);
    return m->gbase[m->nbuckets] + (T->offset - m->ntrainable);
}
static float *buffer_(const model_t *m, int t)
{
    return t < 0 ? NULL : m->bufs + m->tensors[t].offset;
}

static ddp_status_t bn_forward_(model_t *m, layer_t *L, const float *x, const step_ctx_t *ctx)
{
    const compute_ops_t *compute = m->compute;
    int n = ctx->n, c = L->in.c, hw = L->in.h * L->in.w;
    if (ctx->train) {
        double count = ctx->sync_bn ? (double)ctx->global_n * hw : (double)n * hw;
        if (ctx->sync_bn || n > 0) {
            compute->bn_stats(n, c, hw, x, L->stats);
            if (ctx->sync_bn) {
                comm_desc_t d = {"syncbn-forward", L->index, ctx->step + 1};
                /* the statistics are written (a stream-ordered backend waits on the device) */
                if (!(comm_caps(ctx->sync_bn) & COMM_CAP_STREAM_ORDERED)) model_ops_wait(m);
                DDP_TRY(comm_allreduce(ctx->sync_bn, L->stats, (size_t)2 * c, COMM_DOUBLE, &d));
            }
            if (count <= 1)
                return ddp_fail(DDP_ERR_USAGE,
                                "BatchNorm layer %d ('%s') got %.0f value(s) per "
                                "channel in training; it needs more than 1: raise --batch%s",
                                L->index, L->token, count, ctx->sync_bn ? "" : " or use --sync-bn");
            compute->bn_finalize(c, L->stats, count, BN_EPS, BN_MOMENTUM, 1, L->mean, L->invstd,
                                 buffer_(m, L->running_mean), buffer_(m, L->running_var));
            L->num_batches_tracked++;
        }
    } else {
        compute->bn_eval_params(c, buffer_(m, L->running_mean), buffer_(m, L->running_var), BN_EPS,
                                L->mean, L->invstd);
    }
    compute->bn_fwd(n, c, hw, x, L->mean, L->invstd, param_(m, L->weight), param_(m, L->bias),
                    L->y);
    return DDP_OK;
}

ddp_status_t model_forward(model_t *m, const float *x, const step_ctx_t *ctx, const float **out)
{
    const compute_ops_t *compute = m->compute;
    int n = ctx->n;
    const float *cur = x;
    for (int i = 0; i < m->nlayers; i++) {
        layer_t *L = &m->layers[i];
        size_t count = (size_t)n * act_numel(L->in);
        switch (L->kind) {
        case LAYER_LINEAR:
            compute->linear_fwd(n, L->in.c, L->out.c, cur, param_(m, L->weight), param_(m, L->bias),
                                L->y);
            break;
        case LAYER_CONV: {
            conv_dims_t d;
            conv_dims_(L, n, &d);
            compute->conv_fwd(&d, cur, param_(m, L->weight), param_(m, L->bias), L->y, m->conv_ws);
            break;
        }
        case LAYER_MAXPOOL: {
            pool_dims_t d;
            pool_dims_(L, n, &d);
            compute->maxpool_fwd(&d, cur, L->y, L->argmax);
            break;
        }
        case LAYER_AVGPOOL: {
            pool_dims_t d;
            pool_dims_(L, n, &d);
            compute->avgpool_fwd(&d, cur, L->y);
            break;
        }
        case LAYER_GAP: compute->gap_fwd(n, L->in.c, L->in.h * L->in.w, cur, L->y); break;
        case LAYER_BN: DDP_TRY(bn_forward_(m, L, cur, ctx)); break;
        case LAYER_RELU: compute->relu_fwd(count, cur, L->y); break;
        case LAYER_GELU: compute->gelu_fwd(count, cur, L->y); break;
        case LAYER_DROPOUT:
            if (ctx->train && L->p > 0)
                compute->dropout_fwd(n, act_numel(L->in), cur, L->y, L->p, ctx->seed,
                                     (uint64_t)ctx->step, (uint32_t)L->index, ctx->sample_idx);
            else
                compute->copy(L->y, cur, count * sizeof(float));
            break;
        case LAYER_FLATTEN: break;
        }
        if (L->kind != LAYER_FLATTEN) cur = L->y;
    }
    *out = cur;
    return DDP_OK;
}

float *model_dout(model_t *m)
{
    return m->dact[0];
}

/* The lowest layer that must run backward: the first with trainable
 * parameters (nothing below it needs gradients). */
static int first_backward_layer_(const model_t *m)
{
    for (int i = 0; i < m->nlayers; i++) {
        const layer_t *L = &m->layers[i];
        if ((L->weight >= 0 && !m->tensors[L->weight].frozen) ||
            (L->bias >= 0 && !m->tensors[L->bias].frozen))
            return i;
    }
    return m->nlayers;
}

ddp_status_t model_backward(model_t *m, const float *x, const step_ctx_t *ctx)
{
    const compute_ops_t *compute = m->compute;
    int n = ctx->n, k = 0; /* dact[k] holds d(loss)/d(output of layer i) */
    int lo = first_backward_layer_(m);
    float beta = ctx->grad_beta;
    for (int i = m->nlayers - 1; i >= lo; i--) {
        layer_t *L = &m->layers[i];
        /* the layer's input: the previous non-flatten output, or x */
        const float *in = x;
        for (int j = i - 1; j >= 0; j--)
            if (m->layers[j].kind != LAYER_FLATTEN) {
                in = m->layers[j].y;
                break;
            }
        if (ctx->grads_needed && (L->weight >= 0 || L->bias >= 0))
            DDP_TRY(ctx->grads_needed(ctx->grads_ready_arg, i));
        const float *dy = m->dact[k];
        float *dx = i > lo ? m->dact[1 - k] : NULL;
        size_t count = (size_t)n * act_numel(L->in);
        int swap = 1;
        switch (L->kind) {
        case LAYER_LINEAR:
            compute->linear_bwd(n, L->in.c, L->out.c, in, param_(m, L->weight), dy, dx,
                                grad_(m, L->weight), grad_(m, L->bias), beta);
            break;
        case LAYER_CONV: {
            conv_dims_t d;
            conv_dims_(L, n, &d);
            compute->conv_bwd(&d, in, param_(m, L->weight), dy, dx, grad_(m, L->weight),
                              grad_(m, L->bias), beta, m->conv_ws);
            break;
        }
        case LAYER_MAXPOOL: {
            pool_dims_t d;
            pool_dims_(L, n, &d);
            if (dx) compute->maxpool_bwd(&d, dy, L->argmax, dx);
            break;
        }
        case LAYER_AVGPOOL: {
            pool_dims_t d;
            pool_dims_(L, n, &d);
            if (dx) compute->avgpool_bwd(&d, dy, dx);
            break;
        }
        case LAYER_GAP:
            if (dx) compute->gap_bwd(n, L->in.c, L->in.h * L->in.w, dy, dx);
            break;
        case LAYER_BN: {
            int c = L->in.c, hw = L->in.h * L->in.w;
            compute->bn_bwd_stats(n, c, hw, in, dy, L->mean, L->invstd, L->stats,
                                  grad_(m, L->weight), grad_(m, L->bias), beta);
            double count_bn = (double)n * hw;
            if (ctx->sync_bn) {
                comm_desc_t d = {"syncbn-backward", L->index, ctx->step + 1};
                /* the statistics are written (a stream-ordered backend waits on the device) */
                if (!(comm_caps(ctx->sync_bn) & COMM_CAP_STREAM_ORDERED)) model_ops_wait(m);
                DDP_TRY(comm_allreduce(ctx->sync_bn, L->stats, (size_t)2 * c, COMM_DOUBLE, &d));
                count_bn = (double)ctx->global_n * hw;
            }
            if (dx && n > 0)
                compute->bn_bwd_data(n, c, hw, in, dy, L->mean, L->invstd, param_(m, L->weight),
                                     L->stats, count_bn, dx);
            break;
        }
        case LAYER_RELU:
            if (dx) compute->relu_bwd(count, in, dy, dx);
            break;
        case LAYER_GELU:
            if (dx) compute->gelu_bwd(count, in, dy, dx);
            break;
        case LAYER_DROPOUT:
            if (dx) {
                if (ctx->train && L->p > 0)
                    compute->dropout_bwd(n, act_numel(L->in), dy, dx, L->p, ctx->seed,
                                         (uint64_t)ctx->step, (uint32_t)L->index, ctx->sample_idx);
                else
                    compute->copy(dx, dy, count * sizeof(float));
            }
            break;
        case LAYER_FLATTEN: swap = 0; break;
        }
        if (ctx->grads_ready && (L->weight >= 0 || L->bias >= 0))
            DDP_TRY(ctx->grads_ready(ctx->grads_ready_arg, i));
        if (swap) k = 1 - k;
    }
    return DDP_OK;
}
