/* cpu_dnnl.c -- convolutions of the CPU backend through oneDNN (cpu_dnnl.h):
 * direct convolutions (no Winograd: the error bound of a plain sum of
 * products), forward, backward data and backward weights, from and to the
 * backend's plain NCHW / OIHW arrays.  Each shape's primitives are made
 * once and kept; oneDNN picks its own memory formats (blocked channels on
 * AVX-512), and the arrays are reordered into and out of them on every
 * call, as PyTorch does for NCHW tensors.  One OpenMP thread per BLAS
 * thread of the rank, so the results are the same on every rank. */
#include "cpu_dnnl.h"

#include "ddp_build.h"

#ifdef HAVE_DNNL

#include <stdlib.h>
#include <string.h>

#include <dnnl.h>

void omp_set_num_threads(int n); /* libgomp, oneDNN's runtime */

/* One array as the user holds it and as a primitive wants it. */
typedef struct dmem {
    dnnl_memory_desc_t user_md, prim_md;
    dnnl_memory_t user, prim; /* prim == user when the formats agree */
    dnnl_primitive_t to_prim, from_prim;
    int same;
} dmem_t;

typedef struct dconv {
    conv_dims_t d;
    dnnl_primitive_t fwd, bwd_data, bwd_weights;
    dmem_t fx, fw, fy;    /* forward: src, weights, dst */
    dmem_t bdy, bw, bdx;  /* backward data: diff_dst, weights, diff_src */
    dmem_t wx, wdy, wdw;  /* backward weights: src, diff_dst, diff_weights */
    float *dw_scratch;    /* beta != 0: the new dw before the sum */
    struct dconv *next;
} dconv_t;

static dnnl_engine_t eng_;
static dnnl_stream_t stream_;
static dconv_t *convs_;
static int state_; /* 0 untried, 1 ready, -1 unavailable */
static int threads_ = 1;

static int off_; /* cpu_dnnl_enable(0) */

void cpu_dnnl_enable(int on)
{
    off_ = !on;
}

static int init_(void)
{
    if (off_) return 0;
    if (state_) return state_ > 0;
    state_ = -1;
    const char *e = getenv("DDP_CPU_CONV");
    if (e && strcmp(e, "native") == 0) return 0;
    if (dnnl_engine_create(&eng_, dnnl_cpu, 0) != dnnl_success) return 0;
    if (dnnl_stream_create(&stream_, eng_, dnnl_stream_default_flags) != dnnl_success) return 0;
    omp_set_num_threads(threads_);
    state_ = 1;
    return 1;
}

void cpu_dnnl_threads(int n)
{
    threads_ = n > 0 ? n : 1;
    if (state_ > 0) omp_set_num_threads(threads_);
}

static int same_dims_(const conv_dims_t *a, const conv_dims_t *b)
{
    return memcmp(a, b, sizeof *a) == 0;
}

/* dm for an array of `tag` layout and the primitive's wanted desc. */
static int dmem_init_(dmem_t *m, const dnnl_memory_desc_t *user, const dnnl_memory_desc_t *want)
{
    memset(m, 0, sizeof *m);
    m->user_md = *user;
    m->prim_md = *want;
    if (dnnl_memory_create(&m->user, &m->user_md, eng_, DNNL_MEMORY_NONE) != dnnl_success) return -1;
    m->same = dnnl_memory_desc_equal(&m->user_md, &m->prim_md);
    if (m->same) {
        m->prim = m->user;
        return 0;
    }
    if (dnnl_memory_create(&m->prim, &m->prim_md, eng_, DNNL_MEMORY_ALLOCATE) != dnnl_success)
        return -1;
    dnnl_primitive_desc_t rpd;
    if (dnnl_reorder_primitive_desc_create(&rpd, &m->user_md, eng_, &m->prim_md, eng_, NULL) !=
        dnnl_success)
        return -1;
    dnnl_status_t s = dnnl_primitive_create(&m->to_prim, rpd);
    dnnl_primitive_desc_destroy(rpd);
    if (s != dnnl_success) return -1;
    if (dnnl_reorder_primitive_desc_create(&rpd, &m->prim_md, eng_, &m->user_md, eng_, NULL) !=
        dnnl_success)
        return -1;
    s = dnnl_primitive_create(&m->from_prim, rpd);
    dnnl_primitive_desc_destroy(rpd);
    return s == dnnl_success ? 0 : -1;
}

static int run_reorder_(dnnl_primitive_t r, dnnl_memory_t from, dnnl_memory_t to)
{
    dnnl_exec_arg_t a[2] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}};
    return dnnl_primitive_execute(r, stream_, 2, a) == dnnl_success ? 0 : -1;
}

/* The array p into the primitive's format (in), or out of it (out). */
static int in_(dmem_t *m, const float *p)
{
    if (dnnl_memory_set_data_handle(m->user, (void *)p) != dnnl_success) return -1;
    return m->same ? 0 : run_reorder_(m->to_prim, m->user, m->prim);
}
static int out_(dmem_t *m, float *p)
{
    if (dnnl_memory_set_data_handle(m->user, p) != dnnl_success) return -1;
    return m->same ? 0 : run_reorder_(m->from_prim, m->prim, m->user);
}

static const dnnl_memory_desc_t *want_(const_dnnl_primitive_desc_t pd, dnnl_query_t what)
{
    return dnnl_primitive_desc_query_md(pd, what, 0);
}

static dconv_t *make_(const conv_dims_t *d)
{
    dconv_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->d = *d;
    dnnl_dims_t xd = {d->n, d->c, d->h, d->w}, wd = {d->oc, d->c, d->k, d->k},
                yd = {d->n, d->oc, d->oh, d->ow};
    dnnl_dims_t st = {d->stride, d->stride}, pl = {d->pad, d->pad}, pr = {d->pad, d->pad};
    dnnl_memory_desc_t x_u, w_u, y_u, x_a, w_a, y_a;
    int bad = dnnl_memory_desc_init_by_tag(&x_u, 4, xd, dnnl_f32, dnnl_nchw) != dnnl_success ||
              dnnl_memory_desc_init_by_tag(&w_u, 4, wd, dnnl_f32, dnnl_oihw) != dnnl_success ||
              dnnl_memory_desc_init_by_tag(&y_u, 4, yd, dnnl_f32, dnnl_nchw) != dnnl_success ||
              dnnl_memory_desc_init_by_tag(&x_a, 4, xd, dnnl_f32, dnnl_format_tag_any) != dnnl_success ||
              dnnl_memory_desc_init_by_tag(&w_a, 4, wd, dnnl_f32, dnnl_format_tag_any) != dnnl_success ||
              dnnl_memory_desc_init_by_tag(&y_a, 4, yd, dnnl_f32, dnnl_format_tag_any) != dnnl_success;
    dnnl_convolution_desc_t fd, bdd, bwd;
    dnnl_primitive_desc_t fpd = NULL, bdpd = NULL, bwpd = NULL;
    bad = bad ||
          dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                             &x_a, &w_a, NULL, &y_a, st, pl, pr) != dnnl_success ||
          dnnl_primitive_desc_create(&fpd, &fd, NULL, eng_, NULL) != dnnl_success;
    bad = bad ||
          dnnl_convolution_backward_data_desc_init(&bdd, dnnl_convolution_direct, &x_a, &w_a, &y_a,
                                                   st, pl, pr) != dnnl_success ||
          dnnl_primitive_desc_create(&bdpd, &bdd, NULL, eng_, fpd) != dnnl_success;
    bad = bad ||
          dnnl_convolution_backward_weights_desc_init(&bwd, dnnl_convolution_direct, &x_a, &w_a,
                                                      NULL, &y_a, st, pl, pr) != dnnl_success ||
          dnnl_primitive_desc_create(&bwpd, &bwd, NULL, eng_, fpd) != dnnl_success;
    bad = bad || dnnl_primitive_create(&c->fwd, fpd) != dnnl_success ||
          dnnl_primitive_create(&c->bwd_data, bdpd) != dnnl_success ||
          dnnl_primitive_create(&c->bwd_weights, bwpd) != dnnl_success;
    bad = bad || dmem_init_(&c->fx, &x_u, want_(fpd, dnnl_query_src_md)) ||
          dmem_init_(&c->fw, &w_u, want_(fpd, dnnl_query_weights_md)) ||
          dmem_init_(&c->fy, &y_u, want_(fpd, dnnl_query_dst_md)) ||
          dmem_init_(&c->bdy, &y_u, want_(bdpd, dnnl_query_diff_dst_md)) ||
          dmem_init_(&c->bw, &w_u, want_(bdpd, dnnl_query_weights_md)) ||
          dmem_init_(&c->bdx, &x_u, want_(bdpd, dnnl_query_diff_src_md)) ||
          dmem_init_(&c->wx, &x_u, want_(bwpd, dnnl_query_src_md)) ||
          dmem_init_(&c->wdy, &y_u, want_(bwpd, dnnl_query_diff_dst_md)) ||
          dmem_init_(&c->wdw, &w_u, want_(bwpd, dnnl_query_diff_weights_md));
    if (fpd) dnnl_primitive_desc_destroy(fpd);
    if (bdpd) dnnl_primitive_desc_destroy(bdpd);
    if (bwpd) dnnl_primitive_desc_destroy(bwpd);
    if (bad) return NULL; /* leaks what was made: once per shape, and the native path takes over */
    c->next = convs_;
    convs_ = c;
    return c;
}

static dconv_t *find_(const conv_dims_t *d)
{
    for (dconv_t *c = convs_; c; c = c->next)
        if (same_dims_(&c->d, d)) return c;
    return make_(d);
}

/* Primitive p on two arguments already in its formats, its output (argument
 * ao) into the array out. */
static int exec3_(dnnl_primitive_t p, int a0, dnnl_memory_t m0, int a1, dnnl_memory_t m1, int ao,
                  dmem_t *o, float *out)
{
    if (dnnl_memory_set_data_handle(o->user, out) != dnnl_success) return -1;
    dnnl_exec_arg_t a[3] = {{a0, m0}, {a1, m1}, {ao, o->prim}};
    if (dnnl_primitive_execute(p, stream_, 3, a) != dnnl_success) return -1;
    return out_(o, out);
}

int cpu_dnnl_conv_fwd(const conv_dims_t *d, const float *x, const float *w, float *y)
{
    if (d->n <= 0 || !init_()) return -1;
    dconv_t *c = find_(d);
    if (!c) return -1;
    if (in_(&c->fx, x) || in_(&c->fw, w) ||
        exec3_(c->fwd, DNNL_ARG_SRC, c->fx.prim, DNNL_ARG_WEIGHTS, c->fw.prim, DNNL_ARG_DST, &c->fy,
               y))
        return -1;
    return dnnl_stream_wait(stream_) == dnnl_success ? 0 : -1;
}

int cpu_dnnl_conv_bwd(const conv_dims_t *d, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float beta)
{
    if (d->n <= 0 || !init_()) return -1;
    dconv_t *c = find_(d);
    if (!c) return -1;
    if (dx && (in_(&c->bdy, dy) || in_(&c->bw, w) ||
               exec3_(c->bwd_data, DNNL_ARG_DIFF_DST, c->bdy.prim, DNNL_ARG_WEIGHTS, c->bw.prim,
                      DNNL_ARG_DIFF_SRC, &c->bdx, dx)))
        return -1;
    if (dw) {
        size_t nw = (size_t)d->oc * d->c * d->k * d->k;
        float *to = dw;
        if (beta != 0.0f) {
            if (!c->dw_scratch && !(c->dw_scratch = malloc(nw * sizeof(float)))) return -1;
            to = c->dw_scratch;
        }
        /* dy: the copy backward data reordered, when both want the same format */
        dnnl_memory_t dym = c->wdy.prim;
        if (dx && !c->wdy.same && dnnl_memory_desc_equal(&c->wdy.prim_md, &c->bdy.prim_md))
            dym = c->bdy.prim;
        else if (in_(&c->wdy, dy))
            return -1;
        if (in_(&c->wx, x) || exec3_(c->bwd_weights, DNNL_ARG_SRC, c->wx.prim, DNNL_ARG_DIFF_DST,
                                     dym, DNNL_ARG_DIFF_WEIGHTS, &c->wdw, to))
            return -1;
        if (dnnl_stream_wait(stream_) != dnnl_success) return -1;
        if (beta != 0.0f)
            for (size_t i = 0; i < nw; i++) dw[i] = beta * dw[i] + to[i];
    }
    return dnnl_stream_wait(stream_) == dnnl_success ? 0 : -1;
}

int cpu_dnnl_conv_usable(const conv_dims_t *d)
{
    return d->n > 0 && init_();
}

#else

void cpu_dnnl_enable(int on)
{
    (void)on;
}
int cpu_dnnl_conv_usable(const conv_dims_t *d)
{
    (void)d;
    return 0;
}
int cpu_dnnl_conv_fwd(const conv_dims_t *d, const float *x, const float *w, float *y)
{
    (void)d, (void)x, (void)w, (void)y;
    return -1;
}
int cpu_dnnl_conv_bwd(const conv_dims_t *d, const float *x, const float *w, const float *dy,
                      float *dx, float *dw, float beta)
{
    (void)d, (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)beta;
    return -1;
}
void cpu_dnnl_threads(int n)
{
    (void)n;
}

#endif
