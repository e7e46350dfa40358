/* model.c -- the model: spec parsing, shapes, tensor and bucket layout over
 * flat buffers, initialisation, and forward/backward through the compute
 * backend (SyncBatchNorm reduces its statistics over the communicator). */
#include "model.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "archs.h"
#include "rng.h"

#define BN_EPS      1e-5f
#define BN_MOMENTUM 0.1f

static const char *const spec_help =
    "allowed layers: linear:OUT, conv:OUT:K[:STRIDE[:PAD]][:nobias], maxpool:K[:STRIDE[:PAD]], "
    "avgpool:K[:STRIDE], gap, bn, relu, gelu, dropout:P, flatten; res(LAYER,...) for a residual "
    "block; NAME=LAYER to name one; or a named architecture: resnet20 ... resnet152 (docs/usage.md, \"Model spec\")";

/* ---- spec parsing -------------------------------------------------------- */

typedef struct spec_layer {
    layer_kind_t kind;
    char token[40];
    int a[4]; /* numeric arguments */
    int nargs;
    int auto_out; /* linear:auto */
    int nobias;   /* conv:...:nobias */
    float p;
} spec_layer_t;

/* The parsed spec: layers, and the two ends of each residual block, with
 * the name of every layer and block. */
typedef enum { ITEM_LAYER, ITEM_BLOCK_BEGIN, ITEM_BLOCK_END } item_mark_t;
typedef struct spec_item {
    item_mark_t mark;
    spec_layer_t l;             /* ITEM_LAYER */
    char name[LAYER_NAME_MAX];  /* layer or block name */
    int item;                   /* position of the top-level item it belongs to */
} spec_item_t;

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
        {"maxpool", LAYER_MAXPOOL, 1, 3}, {"avgpool", LAYER_AVGPOOL, 1, 2},
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
        if (s->kind == LAYER_CONV && strcmp(arg, "nobias") == 0 && !s->nobias) {
            s->nobias = 1; /* not an argument: any position after conv */
            continue;
        }
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
            int allow_zero = (s->kind == LAYER_CONV && s->nargs == 3) ||
                             (s->kind == LAYER_MAXPOOL && s->nargs == 2); /* padding */
            if (*end || end == arg || v < (allow_zero ? 0 : 1) || v > (1 << 24))
                return spec_err_(idx, tok, "argument '%s' must be a positive integer", arg);
            s->a[s->nargs] = (int)v;
        }
        s->nargs++;
    }
    if (s->nargs < kinds[k].min_args) return spec_err_(idx, tok, "%s needs more arguments", name);
    return DDP_OK;
}

/* A name given in the spec: letters, digits, '_' and '.', not empty. */
static int name_char_(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '.';
}

static ddp_status_t structure_err_(const char *what, const char *at)
{
    return ddp_fail(DDP_ERR_USAGE, "--model: %s at '%.24s%s'; %s", what, at,
                    strlen(at) > 24 ? "..." : "", spec_help);
}

typedef struct spec_list {
    spec_item_t *it;
    int n, cap;
} spec_list_t;

static spec_item_t *push_(spec_list_t *l)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 32;
        spec_item_t *p = realloc(l->it, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        l->it = p;
        l->cap = cap;
    }
    memset(&l->it[l->n], 0, sizeof l->it[0]);
    return &l->it[l->n++];
}

/* Parse the items of a spec (depth 0) or of a block's res(...) (depth 1,
 * `block` its name) from *p; at depth 1 stops before the closing ')'.
 * Names: NAME=item, else layers.<i> (depth 0) or <block>.body.<j>; inside
 * a block a given name is prefixed by the block's. */
static ddp_status_t parse_items_(const char **p, int depth, const char *block, spec_list_t *l)
{
    for (int pos = 0;; pos++) {
        const char *q = *p;
        while (isspace((unsigned char)*q)) q++;
        const char *start = q;
        if (depth > 0 && pos == 0 && *q == ')')
            return structure_err_("a residual block needs at least one layer", q);
        char given[LAYER_NAME_MAX] = "";
        const char *e = q;
        while (name_char_(*e)) e++;
        if (*e == '=' && e > q) {
            if ((size_t)(e - q) >= sizeof given - (depth ? strlen(block) + 1 : 0))
                return structure_err_("the name is too long", q);
            snprintf(given, sizeof given, "%.*s", (int)(e - q), q);
            q = e + 1;
        } else if (*e == '=') {
            return structure_err_("a name before '=' is empty or has a character other than "
                                  "letters, digits, '_' and '.'", start);
        }
        char name[LAYER_NAME_MAX];
        if (depth == 0 && given[0])
            snprintf(name, sizeof name, "%s", given);
        else if (depth == 0)
            snprintf(name, sizeof name, "layers.%d", pos);
        else if (given[0])
            snprintf(name, sizeof name, "%s.%s", block, given);
        else if (snprintf(name, sizeof name, "%s.body.%d", block, pos) >= (int)sizeof name)
            return structure_err_("the block's name is too long for its layers' names", start);
        int item = depth ? l->it[l->n - 1].item : pos; /* the block's, inside one */
        if (strncmp(q, "res(", 4) == 0) {
            if (depth > 0) return structure_err_("residual blocks do not nest", q);
            spec_item_t *b = push_(l);
            if (!b) return ddp_fail(DDP_ERR_NOMEM, "out of memory parsing --model");
            b->mark = ITEM_BLOCK_BEGIN;
            b->item = pos;
            snprintf(b->name, sizeof b->name, "%s", name);
            const char *inner = q + 4;
            DDP_TRY(parse_items_(&inner, 1, name, l));
            if (*inner != ')') return structure_err_("res( has no closing ')'", q);
            if (l->it[l->n - 1].mark == ITEM_BLOCK_BEGIN)
                return structure_err_("a residual block needs at least one layer", q);
            spec_item_t *end = push_(l);
            if (!end) return ddp_fail(DDP_ERR_NOMEM, "out of memory parsing --model");
            end->mark = ITEM_BLOCK_END;
            end->item = pos;
            snprintf(end->name, sizeof end->name, "%s", name);
            q = inner + 1;
        } else {
            size_t len = strcspn(q, ",()");
            if (q[len] == '(') return structure_err_("'(' belongs only after res", q);
            char tok[64];
            if (len >= sizeof tok) return structure_err_("layer token too long", q);
            snprintf(tok, sizeof tok, "%.*s", (int)len, q);
            char *t = tok;
            for (char *te = t + strlen(t); te > t && isspace((unsigned char)te[-1]);) *--te = '\0';
            spec_item_t *it = push_(l);
            if (!it) return ddp_fail(DDP_ERR_NOMEM, "out of memory parsing --model");
            it->mark = ITEM_LAYER;
            it->item = item;
            snprintf(it->name, sizeof it->name, "%s", name);
            DDP_TRY(parse_token_(l->n - 1, t, &it->l));
            q += len;
        }
        while (isspace((unsigned char)*q)) q++;
        *p = q;
        if (*q == ',') {
            *p = q + 1;
            continue;
        }
        if (*q == ')') {
            if (depth == 0) return structure_err_("')' without its res(", q);
            return DDP_OK;
        }
        if (*q == '\0') {
            if (depth > 0) return structure_err_("res( has no closing ')'", start);
            return DDP_OK;
        }
        return structure_err_("expected ',' between layers", q);
    }
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
    snprintf(t->name, sizeof t->name, "%s.%s", m->layers[layer].name, suffix);
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

static void shape_txt_(act_shape_t a, char *txt, size_t n)
{
    if (a.image)
        snprintf(txt, n, "[%d, %d, %d]", a.c, a.h, a.w);
    else
        snprintf(txt, n, "[%d] features", a.c);
}

/* Layer L (its kind, index, src and name set) from its spec on input `in`:
 * its output shape and its tensors. */
static ddp_status_t infer_layer_(builder_t *b, layer_t *L, const spec_layer_t *s, act_shape_t in,
                                 const model_opts_t *o)
{
    act_shape_t out = in;
    char shape_txt[64];
    shape_txt_(in, shape_txt, sizeof shape_txt);
    switch (s->kind) {
    case LAYER_LINEAR: {
        int fin = (int)act_numel(in); /* implicit flatten of images */
        int fout = s->auto_out ? o->outputs : s->a[0];
        if (fout < 1)
            return spec_err_(L->index, s->token, "%s",
                             "'auto' needs the number of outputs of the data");
        in = (act_shape_t){fin, 1, 1, 0};
        out = (act_shape_t){fout, 1, 1, 0};
        int ws[2] = {fout, fin}, bs[1] = {fout};
        L->weight = add_tensor_(b, L->index, "weight", TENSOR_PARAM, 2, ws);
        L->bias = add_tensor_(b, L->index, "bias", TENSOR_PARAM, 1, bs);
        break;
    }
    case LAYER_CONV: {
        if (!in.image)
            return spec_err_(L->index, s->token, "conv needs image input [C, H, W], got %s",
                             shape_txt);
        L->k = s->a[1];
        L->stride = s->nargs > 2 ? s->a[2] : 1;
        L->pad = s->nargs > 3 ? s->a[3] : 0;
        int oh = (in.h + 2 * L->pad - L->k) / L->stride + 1;
        int ow = (in.w + 2 * L->pad - L->k) / L->stride + 1;
        if (in.h + 2 * L->pad < L->k || in.w + 2 * L->pad < L->k || oh < 1 || ow < 1)
            return spec_err_(L->index, s->token, "kernel larger than the (padded) input %s",
                             shape_txt);
        out = (act_shape_t){s->a[0], oh, ow, 1};
        int ws[4] = {s->a[0], in.c, L->k, L->k}, bs[1] = {s->a[0]};
        L->weight = add_tensor_(b, L->index, "weight", TENSOR_PARAM, 4, ws);
        if (!s->nobias) L->bias = add_tensor_(b, L->index, "bias", TENSOR_PARAM, 1, bs);
        break;
    }
    case LAYER_MAXPOOL:
    case LAYER_AVGPOOL: {
        if (!in.image)
            return spec_err_(L->index, s->token, "pooling needs image input [C, H, W], got %s",
                             shape_txt);
        L->k = s->a[0];
        L->stride = s->nargs > 1 ? s->a[1] : L->k;
        L->pad = s->nargs > 2 ? s->a[2] : 0;
        if (2 * L->pad > L->k)
            return spec_err_(L->index, s->token, "%s",
                             "the padding must be at most half the window (as PyTorch's)");
        if (in.h + 2 * L->pad < L->k || in.w + 2 * L->pad < L->k)
            return spec_err_(L->index, s->token, "window larger than the input %s", shape_txt);
        out = (act_shape_t){in.c, (in.h + 2 * L->pad - L->k) / L->stride + 1,
                            (in.w + 2 * L->pad - L->k) / L->stride + 1, 1};
        break;
    }
    case LAYER_GAP:
        if (!in.image)
            return spec_err_(L->index, s->token, "gap needs image input [C, H, W], got %s", shape_txt);
        out = (act_shape_t){in.c, 1, 1, 0};
        break;
    case LAYER_BN: {
        int cs[1] = {in.c}, none[1] = {0};
        L->weight = add_tensor_(b, L->index, "weight", TENSOR_PARAM, 1, cs);
        L->bias = add_tensor_(b, L->index, "bias", TENSOR_PARAM, 1, cs);
        L->running_mean = add_tensor_(b, L->index, "running_mean", TENSOR_BUFFER, 1, cs);
        L->running_var = add_tensor_(b, L->index, "running_var", TENSOR_BUFFER, 1, cs);
        L->num_batches = add_tensor_(b, L->index, "num_batches_tracked", TENSOR_COUNTER, 0, none);
        break;
    }
    case LAYER_FLATTEN: out = (act_shape_t){(int)act_numel(in), 1, 1, 0}; break;
    case LAYER_DROPOUT: L->p = s->p; break;
    case LAYER_RELU:
    case LAYER_GELU:
    case LAYER_ADD: break;
    }
    if (b->m->ntensors > 0 && b->m->tensors == NULL)
        return ddp_fail(DDP_ERR_NOMEM, "out of memory building the model");
    L->in = in;
    L->out = out;
    return DDP_OK;
}

static layer_t *new_layer_(model_t *m, layer_kind_t kind, int src, int item, const char *name,
                           const char *token)
{
    layer_t *L = &m->layers[m->nlayers];
    memset(L, 0, sizeof *L);
    L->kind = kind;
    L->index = m->nlayers++;
    L->item = item;
    L->src = src;
    L->skip = -1;
    snprintf(L->name, sizeof L->name, "%s", name);
    snprintf(L->token, sizeof L->token, "%s", token);
    L->weight = L->bias = L->running_mean = L->running_var = L->num_batches = -1;
    return L;
}

/* The end of a residual block that began at `bsrc` (its input, of shape
 * bin): the projection where the path changed the shape, then the add. */
static ddp_status_t close_block_(builder_t *b, const spec_item_t *end, int bsrc, act_shape_t bin,
                                 const model_opts_t *o)
{
    model_t *m = b->m;
    const layer_t *last = &m->layers[m->nlayers - 1];
    act_shape_t mout = last->out;
    int skip = bsrc;
    char bt[64], mt[64];
    shape_txt_(bin, bt, sizeof bt);
    shape_txt_(mout, mt, sizeof mt);
    if (!act_same(bin, mout)) {
        int stride = 0;
        for (int st = 1; bin.image && mout.image && st <= bin.h && !stride; st++)
            if ((bin.h - 1) / st + 1 == mout.h && (bin.w - 1) / st + 1 == mout.w) stride = st;
        if (!stride)
            return ddp_fail(DDP_ERR_USAGE,
                            "--model: residual block %s turns its input %s into %s, which no 1x1 "
                            "convolution with a stride can match for the skip connection; give "
                            "its layers an output of the input's shape, or of its shape with "
                            "other channels and the height and width divided by a stride",
                            end->name, bt, mt);
        char name[LAYER_NAME_MAX], tok[40];
        spec_layer_t sc = {.kind = LAYER_CONV, .nargs = 4, .a = {mout.c, 1, stride, 0}, .nobias = 1};
        snprintf(tok, sizeof tok, "conv:%d:1:%d:0:nobias", mout.c, stride);
        snprintf(sc.token, sizeof sc.token, "%s", tok);
        if (snprintf(name, sizeof name, "%s.downsample.0", end->name) >= (int)sizeof name)
            return ddp_fail(DDP_ERR_USAGE, "--model: block name %s is too long", end->name);
        layer_t *P = new_layer_(m, LAYER_CONV, bsrc, end->item, name, tok);
        DDP_TRY(infer_layer_(b, P, &sc, bin, o));
        spec_layer_t sb = {.kind = LAYER_BN, .token = "bn"};
        if (snprintf(name, sizeof name, "%s.downsample.1", end->name) >= (int)sizeof name)
            return ddp_fail(DDP_ERR_USAGE, "--model: block name %s is too long", end->name);
        layer_t *N = new_layer_(m, LAYER_BN, P->index, end->item, name, "bn");
        DDP_TRY(infer_layer_(b, N, &sb, P->out, o));
        skip = N->index;
    }
    spec_layer_t sa = {.kind = LAYER_ADD, .token = "add"};
    layer_t *A = new_layer_(m, LAYER_ADD, last->index, end->item, end->name, "add");
    A->skip = skip;
    return infer_layer_(b, A, &sa, mout, o);
}

/* The layers of the parsed spec, in order: every layer's output from its
 * input, its tensors; a block's layers read the block's input, and at its
 * end come its projection and the add. */
static ddp_status_t infer_(builder_t *b, const spec_list_t *l, const model_opts_t *o)
{
    model_t *m = b->m;
    act_shape_t cur = o->input, bin = o->input;
    int cur_src = -1, bsrc = -1;
    for (int i = 0; i < l->n; i++) {
        const spec_item_t *it = &l->it[i];
        if (it->mark == ITEM_BLOCK_BEGIN) {
            bin = cur;
            bsrc = cur_src;
            continue;
        }
        if (it->mark == ITEM_BLOCK_END) {
            DDP_TRY(close_block_(b, it, bsrc, bin, o));
        } else {
            layer_t *L = new_layer_(m, it->l.kind, cur_src, it->item, it->name, it->l.token);
            DDP_TRY(infer_layer_(b, L, &it->l, cur, o));
        }
        cur = m->layers[m->nlayers - 1].out;
        cur_src = m->nlayers - 1;
    }
    return DDP_OK;
}

/* Does --freeze entry p[0, len) name tensor t: its name, or a prefix of
 * it that ends at a '.' (layers.0, layer1, layer1.0.bn1)? */
static int entry_names_(const char *p, size_t len, const char *tname)
{
    return len > 0 && strncmp(p, tname, len) == 0 && (tname[len] == '\0' || tname[len] == '.');
}

/* Is tensor t named by the --freeze list?  Entries are tensor names or
 * the names of layers or blocks (layers.<i>, layer1.0) for all their
 * parameters. */
static int frozen_by_(const char *list, const tensor_t *t)
{
    const char *p = list;
    while (*p) {
        size_t len = strcspn(p, ",");
        if (entry_names_(p, len, t->name)) return 1;
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
        for (int t = 0; t < m->ntensors && !found; t++)
            found = m->tensors[t].kind == TENSOR_PARAM && entry_names_(p, len, m->tensors[t].name);
        if (!found && len > 0)
            return ddp_fail(DDP_ERR_USAGE,
                            "--freeze: '%.*s' names no parameter of the model "
                            "(use names like %s or %s)",
                            (int)len, p, m->ntensors ? m->tensors[0].name : "layers.0.weight",
                            m->ntensors ? m->layers[m->tensors[0].layer].name : "layers.0");
        p += len;
        if (*p == ',') p++;
    }
    return DDP_OK;
}

/* Offsets in the flat buffers are rounded up to MODEL_ALIGN elements (256
 * bytes) where a bucket or a frozen parameter starts. */
#define MODEL_ALIGN 64
static size_t align_up_(size_t off)
{
    return (off + MODEL_ALIGN - 1) / MODEL_ALIGN * MODEL_ALIGN;
}

/* A tensor's place in its bucket: those whose size is a multiple of 64
 * elements first, then of 8, then the rest, each in arrival order, so
 * that every tensor of the first kind starts at 256 bytes and every one of
 * the second at 32 (a GEMM's operand at 16 or more: cuBLAS's tensor-core
 * kernels, the bf16 mirror of cuda/bf16.h). */
static int align_class_(size_t numel)
{
    return numel % 64 == 0 ? 0 : numel % 8 == 0 ? 1 : 2;
}

/* Buckets: trainable parameters in reverse order of the parameter list, a
 * bucket closed when the next parameter would pass its cap (the first
 * bucket has the small first cap).  A parameter is never split.  Each
 * bucket starts at a multiple of 256 bytes and holds its tensors in the
 * order of align_class_; the elements between buckets (and between frozen
 * parameters) belong to no tensor: zero, never written, not reduced. */
static ddp_status_t layout_(model_t *m, const model_opts_t *o)
{
    int nparam = 0;
    for (int t = 0; t < m->ntensors; t++) {
        tensor_t *T = &m->tensors[t];
        if (T->kind != TENSOR_PARAM) continue;
        nparam++;
        T->frozen = o->freeze && o->freeze[0] && frozen_by_(o->freeze, T);
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
    m->nvalues = m->ntrainable_values = 0;
    for (int t = m->ntensors - 1; t >= 0; t--) {
        tensor_t *T = &m->tensors[t];
        if (T->kind != TENSOR_PARAM || T->frozen) continue;
        size_t bytes = T->numel * sizeof(float);
        size_t cap = nb <= 0 ? o->first_bucket_bytes : o->bucket_cap_bytes;
        if (nb < 0 || (cur_bytes > 0 && cur_bytes + bytes > cap)) {
            if (nb >= 0) m->buckets[nb].count = off - m->buckets[nb].offset;
            nb++;
            m->buckets[nb].offset = off = align_up_(off);
            cur_bytes = 0;
        }
        T->bucket = nb;
        off += T->numel;
        cur_bytes += bytes;
        m->buckets[nb].ntensors++;
        m->ntrainable_values += T->numel;
        order[norder++] = t;
    }
    /* each bucket's offsets, its tensors by align_class_ */
    for (int b = 0, k = 0; b <= nb; k += m->buckets[b].ntensors, b++) {
        size_t at = m->buckets[b].offset;
        for (int cls = 0; cls < 3; cls++)
            for (int i = k; i < k + m->buckets[b].ntensors; i++) {
                tensor_t *T = &m->tensors[order[i]];
                if (align_class_(T->numel) != cls) continue;
                T->offset = at;
                at += T->numel;
            }
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
    m->nvalues = m->ntrainable_values;
    for (int t = 0; t < m->ntensors; t++) {
        tensor_t *T = &m->tensors[t];
        if (T->kind == TENSOR_PARAM && T->frozen) {
            off = align_up_(off);
            T->offset = off;
            off += T->numel;
            m->nvalues += T->numel;
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

/* Whether layer L has an output buffer of its own: not a flatten (its
 * input's), a layer with a ReLU fused after it (the ReLU's, fuse_relus_),
 * a BatchNorm a block's add applies (none: fuse_bn_adds_) or a BatchNorm
 * (or its fused ReLU) a max pooling computes (none: fuse_bn_pools_). */
static int owns_output_(const layer_t *L)
{
    return L->kind != LAYER_FLATTEN && !(L->kind != LAYER_RELU && L->fused_relu) &&
           !L->bn_in_add && !L->pooled;
}

/* Whether max pooling L keeps its argmax for its backward: not where it
 * pools its BatchNorm's output (fuse_bn_pools_) over windows that do not
 * overlap, where the backward finds each window's maximum again from the
 * BatchNorm's input, a scan of one window a cell (compute.h bn_maxpool). */
static int keeps_argmax_(const layer_t *L)
{
    return L->kind == LAYER_MAXPOOL && !(L->pool_bn && L->stride >= L->k);
}

/* A ReLU fused into the dense layer or BatchNorm below it: that layer's
 * backward masks the ReLU's gradient (the ReLU passes it through).  A ReLU
 * fused after an add runs its own backward. */
static int relu_in_below_(const model_t *m, const layer_t *L)
{
    return L->kind == LAYER_RELU && L->fused_relu && m->layers[L->src].kind != LAYER_ADD;
}

static int readers_(const model_t *m, int j);
static float *param_(const model_t *m, int t);

/* The layer whose kernel computes and writes layer L's output: a fused
 * ReLU's is its source's. */
static const layer_t *computes_(const model_t *m, const layer_t *L)
{
    return L->kind == LAYER_RELU && L->fused_relu && L->src >= 0 ? &m->layers[L->src] : L;
}

/* The layer that reads layer j's output when it has one reader, through
 * flattens (whose buffer is their input's); NULL: none, or more than one. */
static const layer_t *only_reader_(const model_t *m, int j)
{
    for (;;) {
        if (readers_(m, j) != 1) return NULL;
        const layer_t *R = NULL;
        for (int k = 0; k < m->nlayers && !R; k++)
            if (m->layers[k].src == j) R = &m->layers[k];
        if (!R || R->kind != LAYER_FLATTEN) return R;
        j = R->index;
    }
}

int model_out_bf16(const model_t *m, int i)
{
    if (!m->bf16_acts || m->unfused || i < 0 || i >= m->nlayers) return 0;
    const layer_t *L = &m->layers[i];
    if (L->kind == LAYER_FLATTEN) return model_out_bf16(m, L->src); /* its input's buffer */
    const layer_t *C = computes_(m, L);
    if (C != L && C->kind != LAYER_LINEAR && C->kind != LAYER_BN) return 0;
    layer_kind_t reader;
    if (C->kind == LAYER_LINEAR && (C != L || !L->fused_relu))
        reader = LAYER_LINEAR;
    else if (m->bf16_conv_acts && C->kind == LAYER_CONV && (C->bias < 0 || m->compute->act_bias))
        reader = LAYER_BN; /* a bias carried to the BatchNorm (act_bias) */
    else if (m->bf16_conv_acts && C->kind == LAYER_BN && (C != L || !L->fused_relu) &&
             !C->bn_in_add)
        reader = LAYER_CONV;
    else if (m->bf16_conv_acts && C->kind == LAYER_MAXPOOL)
        reader = LAYER_CONV; /* or a dense layer, below */
    else
        return 0;
    if (readers_(m, i) != 1) return 0;
    for (int k = 0; k < m->nlayers; k++)
        if (m->layers[k].src == i) {
            /* a max pooling's read by a dense layer (through flattens) too */
            const layer_t *R = C->kind == LAYER_MAXPOOL ? only_reader_(m, i) : &m->layers[k];
            return R && (R->kind == reader || (C->kind == LAYER_MAXPOOL && R->kind == LAYER_LINEAR));
        }
    return 0;
}

int model_out_copy16(const model_t *m, int i)
{
    const compute_ops_t *c = m->compute;
    if (!m->bf16_conv_acts || !c->act_copy16 || !c->conv_input_bf16 || !c->conv_input_bf16() ||
        m->unfused || i < 0 || i >= m->nlayers)
        return 0;
    const layer_t *L = &m->layers[i];
    if (!owns_output_(L) || model_out_bf16(m, i)) return 0;
    const layer_t *C = computes_(m, L);
    if (C->kind != LAYER_BN && C->kind != LAYER_MAXPOOL && C->kind != LAYER_ADD) return 0;
    for (int k = 0; k < m->nlayers; k++)
        if (m->layers[k].src == i && m->layers[k].kind == LAYER_CONV) return 1;
    return 0;
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
    size_t max_act = model_max_act(m), ws = model_ws_bytes(m, m->batch);
    for (int i = 0; i < m->nlayers && s == DDP_OK; i++) {
        layer_t *L = &m->layers[i];
        size_t outn = act_numel(L->out);
        if (owns_output_(L))
            L->y = dev_alloc_(m, (size_t)m->batch * outn * (model_out_bf16(m, i) ? 2 : 4), &s,
                              L->token);
        if (keeps_argmax_(L))
            L->argmax = dev_alloc_(m, (size_t)m->batch * outn * sizeof(int32_t), &s, L->token);
        if (L->kind == LAYER_BN) {
            L->mean = dev_alloc_(m, (size_t)L->in.c * sizeof(float), &s, L->token);
            L->invstd = dev_alloc_(m, (size_t)L->in.c * sizeof(float), &s, L->token);
            L->stats = dev_alloc_(m, (size_t)2 * L->in.c * sizeof(double), &s, L->token);
        }
    }
    for (int i = 0; i < m->nlayers; i++) /* a layer with a fused ReLU writes the ReLU's output */
        if (m->layers[i].kind == LAYER_RELU && m->layers[i].fused_relu)
            m->layers[m->layers[i].src].y = m->layers[i].y;
    for (int i = 0; i < m->nlayers; i++) /* nothing reads a BatchNorm an add applies */
        if (m->layers[i].add_bn) m->layers[m->layers[i].add_bn - 1].y = m->layers[i].y;
    for (int i = 0; i < m->nlayers && s == DDP_OK; i++) /* outputs kept in bf16 */
        if (!owns_output_(&m->layers[i])) /* a flatten's is its input's */
            continue;
        else if (model_out_bf16(m, i) &&
            m->compute->act_bf16(m->layers[i].y, (size_t)m->batch * act_numel(m->layers[i].out)) !=
                0)
            s = ddp_fail(DDP_ERR_DEVICE, "the %s backend refused a bf16 layer output (layer %d)",
                         m->compute->name, i);
        else if (model_out_bf16(m, i) && m->layers[i].kind == LAYER_CONV &&
                 m->layers[i].bias >= 0 &&
                 m->compute->act_bias(m->layers[i].y, param_(m, m->layers[i].bias)) != 0)
            s = ddp_fail(DDP_ERR_DEVICE, "the %s backend refused a carried bias (layer %d)",
                         m->compute->name, i);
        else if (model_out_copy16(m, i) &&
                 m->compute->act_copy16(m->layers[i].y,
                                        (size_t)m->batch * act_numel(m->layers[i].out)) != 0)
            s = ddp_fail(DDP_ERR_DEVICE, "the %s backend refused a bf16 copy of layer %d's output",
                         m->compute->name, i);
    for (int k = 0; k < m->ndact; k++)
        m->dact[k] =
            dev_alloc_(m, (size_t)m->batch * max_act * sizeof(float), &s, "activation gradients");
    if (ws) m->ws = dev_alloc_(m, ws, &s, "layer workspace");
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

size_t model_ws_bytes(const model_t *m, int batch)
{
    size_t ws = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const layer_t *L = &m->layers[i];
        if (L->kind == LAYER_LINEAR && L->fused_relu && L->bwd) {
            size_t need = m->compute->linear_ws_bytes(batch, L->out.c);
            if (need > ws) ws = need;
        }
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
        if (owns_output_(L)) bytes += B * outn * (model_out_bf16(m, i) ? 2 : 4);
        if (keeps_argmax_(L)) bytes += B * outn * sizeof(int32_t);
    }
    return bytes + (size_t)m->ndact * B * model_max_act(m) * sizeof(float) +
           model_ws_bytes(m, batch);
}

size_t model_act_bytes(const model_t *m)
{
    return model_act_bytes_at(m, m->batch);
}

/* How many layers read layer j's output (as input or as a block's skip). */
static int readers_(const model_t *m, int j)
{
    int readers = 0;
    for (int k = 0; k < m->nlayers; k++)
        readers += (m->layers[k].src == j) +
                   (m->layers[k].kind == LAYER_ADD && m->layers[k].skip == j);
    return readers;
}

/* A ReLU whose input is a dense layer's or a BatchNorm's output and its
 * only reader runs inside that layer's kernels (compute.h: linear_fwd's and
 * bn_fwd's relu, the backward's mask): one pass over the activation less
 * each way (the cuda backend's dense layer: its GEMM's epilogue pass adds
 * the bias and applies the ReLU; its backward's one pass over dy masks it,
 * sums the bias gradient and rounds it for bf16 GEMMs).  After a block's
 * add, the add writes the ReLU's output and the ReLU's backward reads that
 * as its mask (relu_bwd: the same mask from the input or the output): one
 * pass less forward.  The same bits either way; the producer's own output
 * buffer is not allocated (it writes the ReLU's). */
static void fuse_relus_(model_t *m)
{
    for (int i = 0; i < m->nlayers; i++) {
        layer_t *R = &m->layers[i];
        if (R->kind != LAYER_RELU || R->src < 0) continue;
        layer_kind_t below = m->layers[R->src].kind;
        if (below != LAYER_LINEAR && below != LAYER_BN && below != LAYER_ADD) continue;
        if (readers_(m, R->src) != 1) continue;
        R->fused_relu = 1;
        m->layers[R->src].fused_relu = 1;
    }
}

/* A BatchNorm whose only reader is a block's add is applied by the add
 * (bn_fwd with the add's other input as res, and the ReLU fused after the
 * add): the BatchNorm's output is never written nor read again, one pass
 * and one activation buffer less.  Its statistics are still taken at its
 * own place (a SyncBatchNorm's all-reduce in the same order); its backward
 * is unchanged (it reads x, not its output).  One BatchNorm an add (a
 * projection block's two branches both end in one). */
static void fuse_bn_adds_(model_t *m)
{
    for (int i = 0; i < m->nlayers; i++) {
        layer_t *A = &m->layers[i];
        if (A->kind != LAYER_ADD) continue;
        int ins[2] = {A->src, A->skip};
        for (int k = 0; k < 2 && !A->add_bn; k++) {
            int j = ins[k];
            if (j < 0 || m->layers[j].kind != LAYER_BN || readers_(m, j) != 1) continue;
            A->add_bn = j + 1;
            m->layers[j].bn_in_add = 1;
        }
    }
}

/* A max pooling whose input is a BatchNorm's output (or its fused ReLU's)
 * that nothing else reads runs the BatchNorm's forward inside its own
 * pass, and the BatchNorm's backward reads the pooled gradient (compute.h
 * bn_maxpool_*): the BatchNorm's output and its gradient are neither
 * written nor read, two passes over them and two activation buffers less
 * (the BatchNorm's output and the pooling's dx).  The BatchNorm's
 * statistics are still taken at its own place; the same bits.  Planes of
 * more than one cell (a plane of one is BatchNorm1d's). */
static void fuse_bn_pools_(model_t *m)
{
    const compute_ops_t *c = m->compute;
    if (!c->bn_maxpool || !c->bn_maxpool_fwd || !c->bn_maxpool_bwd_stats ||
        !c->bn_maxpool_bwd_data || !c->bn_maxpool())
        return;
    for (int i = 0; i < m->nlayers; i++) {
        layer_t *P = &m->layers[i];
        if (P->kind != LAYER_MAXPOOL || P->src < 0 || P->in.h * P->in.w <= 1) continue;
        layer_t *R = &m->layers[P->src]; /* the BatchNorm, or its fused ReLU */
        int b = relu_in_below_(m, R) ? R->src : P->src;
        layer_t *B = &m->layers[b];
        if (B->kind != LAYER_BN || B->bn_in_add || readers_(m, P->src) != 1) continue;
        P->pool_bn = b + 1;
        B->pooled = R->pooled = i + 1;
    }
}

ddp_status_t model_build(model_t *m, const model_opts_t *o, const compute_ops_t *compute)
{
    ddp_status_t s = model_layout(m, o, compute);
    if (s == DDP_OK) s = model_alloc(m, NULL);
    if (s != DDP_OK) model_free(m);
    return s;
}

static void mark_backward_(model_t *m);

ddp_status_t model_layout(model_t *m, const model_opts_t *o, const compute_ops_t *compute)
{
    memset(m, 0, sizeof *m);
    m->compute = compute;
    m->input = o->input;
    m->batch = o->batch;
    if (!o->spec || !o->spec[0]) return ddp_fail(DDP_ERR_USAGE, "--model is empty; %s", spec_help);
    DDP_TRY(model_expand(o->spec, &m->expanded));
    spec_list_t l = {0};
    const char *p = m->expanded;
    ddp_status_t s = parse_items_(&p, 0, "", &l);
    /* every item one layer; a block's end: its projection (2) and add */
    int cap = 0;
    for (int i = 0; i < l.n; i++) cap += l.it[i].mark == ITEM_LAYER ? 1 : 3;
    if (s == DDP_OK && !(m->layers = calloc((size_t)(cap ? cap : 1), sizeof *m->layers)))
        s = ddp_fail(DDP_ERR_NOMEM, "out of memory parsing --model");
    builder_t b = {m, 0};
    if (s == DDP_OK) s = infer_(&b, &l, o);
    free(l.it);
    m->ndact = model_has_layer(m, LAYER_ADD) ? 3 : 2;
    if (s == DDP_OK) {
        act_shape_t last = m->layers[m->nlayers - 1].out;
        if (last.image)
            s = ddp_fail(DDP_ERR_USAGE,
                         "--model: the last layer '%s' outputs an image [%d, %d, %d]; "
                         "end the model with gap or linear:OUT",
                         m->layers[m->nlayers - 1].token, last.c, last.h, last.w);
        m->outputs = last.c;
    }
    for (int t = 0; s == DDP_OK && t < m->ntensors; t++)
        for (int u = 0; u < t; u++)
            if (strcmp(m->tensors[t].name, m->tensors[u].name) == 0) {
                s = ddp_fail(DDP_ERR_USAGE,
                             "--model: two layers are named %s (tensor %s twice); give them "
                             "different names",
                             m->layers[m->tensors[t].layer].name, m->tensors[t].name);
                break;
            }
    if (s == DDP_OK) s = layout_(m, o);
    if (s == DDP_OK) mark_backward_(m);
    m->unfused = o->unfused;
    if (s == DDP_OK && !o->unfused) {
        fuse_relus_(m);
        fuse_bn_adds_(m);
        fuse_bn_pools_(m);
    }
    if (s != DDP_OK) model_free(m);
    return s;
}

void model_free(model_t *m)
{
    const compute_ops_t *compute = m->compute;
    if (compute) {
        for (int i = 0; i < m->nlayers; i++) {
            layer_t *L = &m->layers[i];
            if (owns_output_(L)) compute->free(L->y); /* NULL for a flatten */
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
        for (int k = 0; k < 3; k++) compute->free(m->dact[k]);
        compute->free(m->ws);
    }
    for (int b = 0; b < m->nbuckets; b++) free(m->buckets[b].tensors);
    free(m->gbase);
    free(m->buckets);
    free(m->tensors);
    free(m->layers);
    free(m->expanded);
    memset(m, 0, sizeof *m);
}

int model_find_tensor(const model_t *m, const char *name)
{
    for (int t = 0; t < m->ntensors; t++)
        if (strcmp(m->tensors[t].name, name) == 0) return t;
    return -1;
}

int model_weights_aligned(const model_t *m, size_t elems)
{
    for (int i = 0; i < m->nlayers; i++) {
        const layer_t *L = &m->layers[i];
        if ((L->kind == LAYER_LINEAR || L->kind == LAYER_CONV) && L->weight >= 0 &&
            m->tensors[L->weight].offset % elems != 0)
            return 0;
    }
    return 1;
}

int model_has_layer(const model_t *m, layer_kind_t kind)
{
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].kind == kind) return 1;
    return 0;
}

int model_item_text(const model_t *m, int first, char *name, size_t nn, char *text, size_t n,
                    size_t *params)
{
    int item = m->layers[first].item, end = first;
    while (end < m->nlayers && m->layers[end].item == item) end++;
    const layer_t *last = &m->layers[end - 1];
    int block = last->kind == LAYER_ADD;
    snprintf(name, nn, "%s", last->name);
    size_t u = 0;
    *params = 0;
    text[0] = '\0';
    for (int i = first; i < end; i++) {
        const layer_t *L = &m->layers[i];
        for (int t = 0; t < m->ntensors; t++)
            if (m->tensors[t].layer == i && m->tensors[t].kind == TENSOR_PARAM)
                *params += m->tensors[t].numel;
        if (L->kind == LAYER_ADD) continue;
        int proj = block && L->src == m->layers[first].src && i > first;
        const char *pre = i == first && block ? "res(" : proj ? ") + downsample(" : i > first ? "," : "";
        if (u < n) u += (size_t)snprintf(text + u, n - u, "%s%s", pre, L->token);
    }
    if (block && u < n) u += (size_t)snprintf(text + u, n - u, ")");
    if (u >= n && n > 4) strcpy(text + n - 4, "...");
    return end;
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
    *d = (pool_dims_t){.n = n, .c = L->in.c, .h = L->in.h, .w = L->in.w, .k = L->k,
                       .stride = L->stride, .pad = L->pad, .oh = L->out.h, .ow = L->out.w};
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
            /* the same count on every rank of a SyncBatchNorm: all stop here */
            if (count <= 1)
                return ddp_fail(DDP_ERR_USAGE,
                                "BatchNorm layer %d ('%s') got %.0f value(s) per "
                                "channel in training; it needs more than 1: raise --batch%s",
                                L->index, L->token, count, ctx->sync_bn ? "" : " or use --sync-bn");
            float *rm = buffer_(m, L->running_mean), *rv = buffer_(m, L->running_var);
            if (!ctx->sync_bn && compute->bn_stats_finalize) {
                compute->bn_stats_finalize(n, c, hw, x, L->stats, count, BN_EPS, BN_MOMENTUM, 1,
                                           L->mean, L->invstd, rm, rv);
            } else {
                compute->bn_stats(n, c, hw, x, L->stats);
                if (ctx->sync_bn) {
                    comm_desc_t d = {"syncbn-forward", L->index, ctx->step + 1};
                    /* the statistics are written (a stream-ordered backend waits on the
                     * device) */
                    if (!(comm_caps(ctx->sync_bn) & COMM_CAP_STREAM_ORDERED)) model_ops_wait(m);
                    DDP_TRY(
                        comm_allreduce(ctx->sync_bn, L->stats, (size_t)2 * c, COMM_DOUBLE, &d));
                }
                compute->bn_finalize(c, L->stats, count, BN_EPS, BN_MOMENTUM, 1, L->mean,
                                     L->invstd, rm, rv);
            }
            L->num_batches_tracked++;
        }
    } else {
        compute->bn_eval_params(c, buffer_(m, L->running_mean), buffer_(m, L->running_var), BN_EPS,
                                L->mean, L->invstd);
    }
    if (!L->bn_in_add && !L->pooled) /* else its add or pooling applies it */
        compute->bn_fwd(n, c, hw, x, L->mean, L->invstd, param_(m, L->weight), param_(m, L->bias),
                        L->y, L->fused_relu, NULL);
    return DDP_OK;
}

/* The output of layer j (a flatten's is its input's; j < 0: x). */
static const float *act_(const model_t *m, int j, const float *x)
{
    while (j >= 0 && m->layers[j].kind == LAYER_FLATTEN) j = m->layers[j].src;
    return j < 0 ? x : m->layers[j].y;
}

/* A block's add: y = a + b, or the BatchNorm it applies (fuse_bn_adds_)
 * plus its other input, in one pass; relu: the ReLU after it. */
static void add_forward_(model_t *m, const layer_t *L, const float *x, int n)
{
    if (!L->add_bn) {
        size_t count = (size_t)n * act_numel(L->in);
        m->compute->add(count, act_(m, L->src, x), act_(m, L->skip, x), L->y, L->fused_relu);
        return;
    }
    const layer_t *B = &m->layers[L->add_bn - 1];
    const float *other = act_(m, L->add_bn - 1 == L->src ? L->skip : L->src, x);
    m->compute->bn_fwd(n, B->in.c, B->in.h * B->in.w, act_(m, B->src, x), B->mean, B->invstd,
                       param_(m, B->weight), param_(m, B->bias), L->y, L->fused_relu, other);
}

ddp_status_t model_forward(model_t *m, const float *x, const step_ctx_t *ctx, const float **out)
{
    const compute_ops_t *compute = m->compute;
    int n = ctx->n;
    for (int i = 0; i < m->nlayers; i++) {
        layer_t *L = &m->layers[i];
        const float *cur = act_(m, L->src, x);
        size_t count = (size_t)n * act_numel(L->in);
        switch (L->kind) {
        case LAYER_LINEAR:
            compute->linear_fwd(n, L->in.c, L->out.c, cur, param_(m, L->weight), param_(m, L->bias),
                                L->y, L->fused_relu);
            break;
        case LAYER_CONV: {
            conv_dims_t d;
            conv_dims_(L, n, &d);
            compute->conv_fwd(&d, cur, param_(m, L->weight), param_(m, L->bias), L->y, m->ws);
            break;
        }
        case LAYER_MAXPOOL: {
            pool_dims_t d;
            pool_dims_(L, n, &d);
            const layer_t *B = L->pool_bn ? &m->layers[L->pool_bn - 1] : NULL;
            if (B)
                compute->bn_maxpool_fwd(&d, act_(m, B->src, x), B->mean, B->invstd,
                                        param_(m, B->weight), param_(m, B->bias), B->fused_relu,
                                        L->y, L->argmax);
            else
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
        case LAYER_RELU:
            if (!L->fused_relu) compute->relu_fwd(count, cur, L->y);
            break;
        case LAYER_GELU: compute->gelu_fwd(count, cur, L->y); break;
        case LAYER_DROPOUT:
            if (ctx->train && L->p > 0)
                compute->dropout_fwd(n, act_numel(L->in), cur, L->y, L->p, ctx->seed,
                                     (uint64_t)ctx->step, (uint32_t)L->index, ctx->sample_idx);
            else
                compute->copy(L->y, cur, count * sizeof(float));
            break;
        case LAYER_ADD: add_forward_(m, L, x, n); break;
        case LAYER_FLATTEN: break;
        }
    }
    *out = act_(m, m->nlayers - 1, x);
    return DDP_OK;
}

float *model_dout(model_t *m)
{
    return m->dact[0];
}

int model_dout_dense(const model_t *m)
{
    if (!m->bf16_acts || m->unfused || m->nlayers == 0) return 0;
    const layer_t *L = &m->layers[m->nlayers - 1];
    return L->kind == LAYER_LINEAR && !L->fused_relu && L->bwd;
}

/* Which layers run backward: those with trainable parameters and every
 * layer above one (a layer whose input's gradient is needed). */
static void mark_backward_(model_t *m)
{
    for (int i = 0; i < m->nlayers; i++) {
        layer_t *L = &m->layers[i];
        int own = (L->weight >= 0 && !m->tensors[L->weight].frozen) ||
                  (L->bias >= 0 && !m->tensors[L->bias].frozen);
        L->bwd = own || (L->src >= 0 && m->layers[L->src].bwd) ||
                 (L->kind == LAYER_ADD && L->skip >= 0 && m->layers[L->skip].bwd);
    }
}

/* Backward's bookkeeping of the activation-gradient buffers: layer j's
 * gslot is the buffer holding d(loss)/d(its output) until it ran; live[k]
 * counts the layers waiting on buffer k. */
typedef struct grad_slots {
    int live[3];
    int bf16[3]; /* buffer k holds a gradient kept in bf16 (grad16_) */
} grad_slots_t;

/* A buffer no waiting layer holds. */
static int free_slot_(const model_t *m, const grad_slots_t *g)
{
    for (int k = 0; k < m->ndact; k++)
        if (g->live[k] == 0) return k;
    return -1;
}

/* Buffer w holds a gradient for layer j's output, from `n` samples: the
 * first contribution is taken as it is; another is added into w (a layer
 * read by two: a block's input).  `computed`: w was just written for j
 * alone (a pass-through of another layer's buffer cannot be summed into). */
static ddp_status_t contribute_(model_t *m, grad_slots_t *g, int j, int w, int computed, int n)
{
    if (j < 0 || !m->layers[j].bwd) return DDP_OK;
    layer_t *J = &m->layers[j];
    if (J->gslot >= 0) {
        if (!computed || J->gslot == w)
            return ddp_fail(DDP_ERR_INTERNAL, "model backward: layer %d's gradient has two "
                            "sources it cannot sum", j);
        size_t count = (size_t)n * act_numel(J->out);
        m->compute->add(count, m->dact[w], m->dact[J->gslot], m->dact[w], 0);
        g->live[J->gslot]--;
    }
    J->gslot = w;
    g->live[w]++;
    return DDP_OK;
}

/* Layer i's gradient for its input j, the output of the layer just before
 * it, completes j's (its other readers come later, so ran first) and j runs
 * next: where j is a ReLU that runs its own backward and already holds one
 * gradient, the two are summed inside its mask (relu_bwd's dy2) instead of
 * by an add first: one pass over the activation less, the same bits. */
static int sums_in_relu_(const model_t *m, int i, int j)
{
    if (j != i - 1 || m->unfused) return 0;
    const layer_t *J = &m->layers[j];
    return J->kind == LAYER_RELU && !relu_in_below_(m, J) && J->gslot >= 0;
}

/* Whether a convolution's gradient for ReLU j's output is read only by
 * the ReLU's own backward (relu_bwd, as dy or dy2): j, after a block's add
 * (not fused into the layer below), has two readers, one of them the
 * layer just after it, whose gradient comes last and is summed inside the
 * mask (sums_in_relu_); the other's, first, is taken as it is
 * (contribute_).  Nothing adds into either. */
static int relu_reads_only_(const model_t *m, const layer_t *L)
{
    const int j = L->src;
    if (L->kind != LAYER_CONV || j < 0 || j + 1 >= m->nlayers || m->unfused) return 0;
    const layer_t *J = &m->layers[j];
    return J->kind == LAYER_RELU && !relu_in_below_(m, J) && readers_(m, j) == 2 &&
           m->layers[j + 1].src == j;
}

/* Whether layer i's gradient for its input is kept in bf16 (compute.h
 * grad_bf16): where a convolution or BatchNorm computes it for an output
 * kept in bf16 (model_out_bf16: a convolution net's), whose only reader it
 * is, so no other gradient is summed into it (a convolution's with a bias
 * too: the BatchNorm's backward hands it the sums its bias gradient needs,
 * compute.h act_bias); or where a convolution computes it for a ReLU
 * whose backward alone reads it (relu_reads_only_: a residual block's
 * input, whose gradient from cuDNN is bf16 either way). */
static int grad16_(const model_t *m, const layer_t *L)
{
    return m->bf16_conv_acts && m->compute->grad_bf16 &&
           (((L->kind == LAYER_CONV || L->kind == LAYER_BN) && model_out_bf16(m, L->src)) ||
            relu_reads_only_(m, L));
}

/* Every gradient buffer holds fp32 (at the start of a backward: also after
 * one that failed half-way; a backward that completes leaves none in bf16,
 * each released by its reader). */
static void grads_fp32_(model_t *m, grad_slots_t *g)
{
    if (!m->bf16_conv_acts || !m->compute->grad_bf16) return;
    for (int k = 0; k < m->ndact; k++) {
        m->compute->grad_bf16(m->dact[k], 0);
        g->bf16[k] = 0;
    }
}

ddp_status_t model_backward(model_t *m, const float *x, const step_ctx_t *ctx)
{
    const compute_ops_t *compute = m->compute;
    int n = ctx->n;
    float beta = ctx->grad_beta;
    grad_slots_t g = {{0}, {0}};
    grads_fp32_(m, &g);
    for (int i = 0; i < m->nlayers; i++) m->layers[i].gslot = m->layers[i].gslot2 = -1;
    DDP_TRY(contribute_(m, &g, m->nlayers - 1, 0, 1, n)); /* the loss wrote dact[0] */
    for (int i = m->nlayers - 1; i >= 0; i--) {
        layer_t *L = &m->layers[i];
        if (!L->bwd) continue;
        int r = L->gslot;
        if (r < 0) return ddp_fail(DDP_ERR_INTERNAL, "model backward: no gradient for layer %d", i);
        const float *in = act_(m, L->src, x);
        if (ctx->grads_needed && (L->weight >= 0 || L->bias >= 0))
            DDP_TRY(ctx->grads_needed(ctx->grads_ready_arg, i));
        const float *dy = m->dact[r];
        /* dx: where the input's gradient goes, when a layer below needs it */
        int pass = /* dx is dy (a pooling its BatchNorm's backward gathers: the pooled one) */
            L->kind == LAYER_FLATTEN || L->kind == LAYER_ADD || relu_in_below_(m, L) ||
            L->pool_bn;
        /* a ReLU holding a second gradient writes dx over it (sums_in_relu_),
         * unless that is held in bf16 (its fp32 dx would overrun it) */
        int w = !pass && L->src >= 0 && m->layers[L->src].bwd
                    ? (L->gslot2 >= 0 && !g.bf16[L->gslot2] ? L->gslot2 : free_slot_(m, &g))
                    : -1;
        if (!pass && L->src >= 0 && m->layers[L->src].bwd && w < 0)
            return ddp_fail(DDP_ERR_INTERNAL, "model backward: no free gradient buffer at layer %d",
                            i);
        float *dx = w >= 0 ? m->dact[w] : NULL;
        size_t count = (size_t)n * act_numel(L->in);
        if (dx && grad16_(m, L)) { /* written, and read by its reader, in bf16 */
            compute->grad_bf16(dx, count);
            g.bf16[w] = 1;
        } else if (dx && g.bf16[w]) { /* its last reader did not release it */
            return ddp_fail(DDP_ERR_INTERNAL,
                            "model backward: gradient buffer %d still holds bf16 at layer %d", w,
                            i);
        }
        switch (L->kind) {
        case LAYER_LINEAR:
            compute->linear_bwd(n, L->in.c, L->out.c, in, param_(m, L->weight), dy, dx,
                                grad_(m, L->weight), grad_(m, L->bias), beta,
                                L->fused_relu ? L->y : NULL, m->ws);
            break;
        case LAYER_CONV: {
            conv_dims_t d;
            conv_dims_(L, n, &d);
            compute->conv_bwd(&d, in, param_(m, L->weight), dy, dx, grad_(m, L->weight),
                              grad_(m, L->bias), beta, m->ws);
            break;
        }
        case LAYER_MAXPOOL: {
            pool_dims_t d;
            pool_dims_(L, n, &d);
            if (L->pool_bn)
                DDP_TRY(contribute_(m, &g, L->src, r, 0, n));
            else if (dx)
                compute->maxpool_bwd(&d, dy, L->argmax, dx);
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
            /* a fused ReLU's mask: the BatchNorm's gamma and beta (dy is the ReLU's) */
            const float *rg = L->fused_relu ? param_(m, L->weight) : NULL;
            const float *rb = L->fused_relu ? param_(m, L->bias) : NULL;
            /* pooled: dy is the gradient of its max pooling's output */
            const layer_t *P = L->pooled ? &m->layers[L->pooled - 1] : NULL;
            pool_dims_t pd;
            if (P) {
                pool_dims_(P, n, &pd);
                compute->bn_maxpool_bwd_stats(&pd, P->argmax, in, dy, L->mean, L->invstd,
                                              param_(m, L->weight), param_(m, L->bias),
                                              L->fused_relu, L->stats, grad_(m, L->weight),
                                              grad_(m, L->bias), beta);
            } else {
                compute->bn_bwd_stats(n, c, hw, in, dy, L->mean, L->invstd, L->stats,
                                      grad_(m, L->weight), grad_(m, L->bias), beta, rg, rb);
            }
            double count_bn = (double)n * hw;
            if (ctx->sync_bn) {
                comm_desc_t d = {"syncbn-backward", L->index, ctx->step + 1};
                /* the statistics are written (a stream-ordered backend waits on the device) */
                if (!(comm_caps(ctx->sync_bn) & COMM_CAP_STREAM_ORDERED)) model_ops_wait(m);
                DDP_TRY(comm_allreduce(ctx->sync_bn, L->stats, (size_t)2 * c, COMM_DOUBLE, &d));
                count_bn = (double)ctx->global_n * hw;
            }
            if (dx && n > 0 && P)
                compute->bn_maxpool_bwd_data(&pd, P->argmax, in, dy, L->mean, L->invstd,
                                             param_(m, L->weight), param_(m, L->bias),
                                             L->fused_relu, L->stats, count_bn, dx);
            else if (dx && n > 0)
                compute->bn_bwd_data(n, c, hw, in, dy, L->mean, L->invstd, param_(m, L->weight),
                                     L->stats, count_bn, dx, rb);
            break;
        }
        case LAYER_RELU:
            if (relu_in_below_(m, L)) /* the BatchNorm masks dy */
                DDP_TRY(contribute_(m, &g, L->src, r, 0, n));
            else if (dx)
                compute->relu_bwd(count, in, dy, dx, L->gslot2 >= 0 ? m->dact[L->gslot2] : NULL);
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
        case LAYER_FLATTEN: DDP_TRY(contribute_(m, &g, L->src, r, 0, n)); break;
        case LAYER_ADD: /* both paths get the sum's gradient */
            DDP_TRY(contribute_(m, &g, L->src, r, 0, n));
            DDP_TRY(contribute_(m, &g, L->skip, r, 0, n));
            break;
        }
        if (ctx->grads_ready && (L->weight >= 0 || L->bias >= 0))
            DDP_TRY(ctx->grads_ready(ctx->grads_ready_arg, i));
        if (w >= 0 && sums_in_relu_(m, i, L->src)) {
            m->layers[L->src].gslot2 = w; /* its backward, next, adds it */
            g.live[w]++;
        } else if (w >= 0) {
            DDP_TRY(contribute_(m, &g, L->src, w, 1, n));
        }
        /* read: a buffer held in bf16 holds fp32 again for the next writer */
        if (L->gslot2 >= 0 && g.bf16[L->gslot2]) {
            compute->grad_bf16(m->dact[L->gslot2], 0);
            g.bf16[L->gslot2] = 0;
        }
        if (L->gslot2 >= 0) g.live[L->gslot2]--;
        if (!pass && g.bf16[r]) {
            compute->grad_bf16(m->dact[r], 0);
            g.bf16[r] = 0;
        }
        g.live[r]--;
        L->gslot = L->gslot2 = -1;
    }
    for (int k = 0; k < m->ndact; k++) /* each released by its reader */
        if (g.bf16[k])
            return ddp_fail(DDP_ERR_INTERNAL, "model backward: gradient buffer %d left in bf16", k);
    return DDP_OK;
}
