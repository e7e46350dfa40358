/* check_golden.c -- the whole engine against PyTorch: fixtures written by
 * tests/tools/make_fixtures.py (torch 1.13) hold initial weights, a batch, the
 * train-mode forward output and loss, the gradients, and the weights and BN
 * buffers after 5 steps of SGD-with-momentum and of AdamW.  We load the same
 * initial weights, run the same steps through model/optim/compute_cpu, and
 * compare.  Tolerance: 1e-5 relative, with an absolute floor of 1e-6 for
 * values near zero (float32 summation order differs from PyTorch's).
 * Built with -DDDP_TEST_BACKEND_MIRROR (check_golden_cuda), the same steps
 * run on the "cuda" backend through tests/doubles/compute_mirror.c, same tolerances.
 *
 * One exception, explained in make_fixtures.py: a bias directly followed by
 * BatchNorm has a true gradient of zero, so its gradient is rounding noise;
 * AdamW normalises that noise into steps of up to lr, which no other
 * implementation reproduces.  Under AdamW such a bias (and the running_mean
 * of the BN after it) is only bounded: within 2 * steps * lr of PyTorch. */
#include <hdf5.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "h5util.h"
#include "model.h"
#include "optim.h"
#include "tests.h"
#include "weights.h"
#ifdef DDP_TEST_BACKEND_MIRROR
#include "compute_mirror.h"
#endif

#define REL_TOL   1e-5
#define ABS_FLOOR 1e-6 /* relative differences are taken against max(|ref|, 0.1) */

/* the backend under test (test_suite sets the mirror of "cuda") */
static const compute_ops_t *B = &compute_cpu_ops;

typedef struct fixture {
    char path[1024];
    hid_t f;
    char spec[256];
    act_shape_t in;
    int n, classes;
    float *x;
    int32_t *y;
} fixture_t;

static void *read_all_(hid_t f, const char *name, hid_t type, size_t esz, int *ndim, hsize_t *dims)
{
    hid_t ds = H5Dopen2(f, name, H5P_DEFAULT);
    ck_assert_msg(ds >= 0, "fixture lacks %s", name);
    hid_t sp = H5Dget_space(ds);
    *ndim = H5Sget_simple_extent_ndims(sp);
    H5Sget_simple_extent_dims(sp, dims, NULL);
    size_t n = (size_t)H5Sget_simple_extent_npoints(sp);
    void *buf = malloc(n * esz + 8);
    ck_assert_int_ge(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf), 0);
    H5Sclose(sp);
    H5Dclose(ds);
    return buf;
}

static void fixture_open_(fixture_t *fx, const char *file)
{
    snprintf(fx->path, sizeof fx->path, "%s/fixtures/%s", test_srcdir(), file);
    ck_assert_int_eq(h5_open_read(fx->path, &fx->f), DDP_OK);
    ck_assert_int_eq(h5_attr_read_str(fx->f, "spec", fx->spec, sizeof fx->spec), DDP_OK);
    int nd;
    hsize_t d[8];
    fx->x = read_all_(fx->f, "/x", H5T_NATIVE_FLOAT, 4, &nd, d);
    fx->n = (int)d[0];
    if (nd == 2)
        fx->in = (act_shape_t){(int)d[1], 1, 1, 0};
    else
        fx->in = (act_shape_t){(int)d[1], (int)d[2], (int)d[3], 1};
    fx->y = read_all_(fx->f, "/y", H5T_NATIVE_INT32, 4, &nd, d);
    fx->classes = 0;
    for (int i = 0; i < fx->n; i++)
        if (fx->y[i] + 1 > fx->classes) fx->classes = fx->y[i] + 1;
}

static void fixture_close_(fixture_t *fx)
{
    free(fx->x);
    free(fx->y);
    H5Fclose(fx->f);
}

static void build_(const fixture_t *fx, model_t *m)
{
    model_opts_t o = {.spec = fx->spec,
                      .input = fx->in,
                      .outputs = fx->classes,
                      .batch = fx->n,
                      .bucket_cap_bytes = 1 << 20,
                      .first_bucket_bytes = 1 << 16,
                      .freeze = ""};
    ck_assert_msg(model_build(m, &o, B) == DDP_OK, "%s", ddp_error_message());
    ck_assert_msg(weights_load_group(fx->path, "/init", m) == DDP_OK, "%s", ddp_error_message());
}

/* One train-mode forward + backward of the mean cross-entropy; returns the loss. */
static double fwd_bwd_(const fixture_t *fx, model_t *m, const float **out)
{
    step_ctx_t ctx = {.n = fx->n, .global_n = fx->n, .train = 1, .grad_beta = 0.0f, .seed = 1};
    ck_assert_int_eq(model_forward(m, fx->x, &ctx, out), DDP_OK);
    double acc[2] = {0, 0};
    m->compute->xent(fx->n, m->outputs, *out, fx->y, 0.0f, 1.0f / (float)fx->n, model_dout(m), acc);
    ck_assert_int_eq(model_backward(m, fx->x, &ctx), DDP_OK);
    return acc[0] / fx->n;
}

/* Is tensor t a bias feeding BatchNorm, or the running_mean of that BN? */
static int noise_driven_(const model_t *m, int t)
{
    const tensor_t *T = &m->tensors[t];
    int l = T->layer;
    if (t == m->layers[l].bias && l + 1 < m->nlayers && m->layers[l + 1].kind == LAYER_BN) return 1;
    return t == m->layers[l].running_mean && l > 0 && m->layers[l - 1].bias >= 0;
}

/* Compare tensor values (params, buffers, or grads) with the fixture group.
 * bound > 0: noise-driven tensors are only checked to lie within bound. */
static void compare_group_(const fixture_t *fx, const model_t *m, const char *group, int grads,
                           double bound)
{
    for (int t = 0; t < m->ntensors; t++) {
        const tensor_t *T = &m->tensors[t];
        if (grads && T->kind != TENSOR_PARAM) continue;
        char name[256];
        snprintf(name, sizeof name, "%s/%s", group, T->name);
        int nd;
        hsize_t d[8];
        if (T->kind == TENSOR_COUNTER) {
            int64_t *v = read_all_(fx->f, name, H5T_NATIVE_INT64, 8, &nd, d);
            ck_assert_int_eq(m->layers[T->layer].num_batches_tracked, v[0]);
            free(v);
            continue;
        }
        float *ref = read_all_(fx->f, name, H5T_NATIVE_FLOAT, 4, &nd, d);
        const float *got = grads ? m->grads + T->offset
                                 : (T->kind == TENSOR_PARAM ? m->params : m->bufs) + T->offset;
        if (bound > 0 && noise_driven_(m, t)) {
            for (size_t i = 0; i < T->numel; i++)
                ck_assert_msg(fabs((double)got[i] - ref[i]) <= bound, "%s[%zu] = %g, torch %g",
                              name, i, got[i], ref[i]);
            free(ref);
            continue;
        }
        double worst = 0;
        size_t at = 0;
        for (size_t i = 0; i < T->numel; i++) {
            double diff = fabs((double)got[i] - ref[i]);
            double rel = diff / fmax(fabs((double)ref[i]), 0.1);
            if (diff > ABS_FLOOR && rel > worst) worst = rel, at = i;
        }
        ck_assert_msg(worst <= REL_TOL, "%s: element %zu = %.9g, torch %.9g (rel %.3g > %g)", name,
                      at, got[at], ref[at], worst, REL_TOL);
        free(ref);
    }
}

static void forward_and_grads_(const char *file)
{
    fixture_t fx;
    model_t m;
    fixture_open_(&fx, file);
    build_(&fx, &m);
    const float *out;
    double loss = fwd_bwd_(&fx, &m, &out);
    int nd;
    hsize_t d[8];
    float *ref = read_all_(fx.f, "/forward/out", H5T_NATIVE_FLOAT, 4, &nd, d);
    ck_assert_int_eq(d[0] * d[1], (hsize_t)fx.n * m.outputs);
    double worst = 0;
    for (size_t i = 0; i < d[0] * d[1]; i++)
        worst = fmax(worst, fabs(out[i] - ref[i]) / fmax(fabs(ref[i]), 0.1));
    ck_assert_msg(worst <= REL_TOL, "%s forward output: rel diff %.3g", file, worst);
    float *rl = read_all_(fx.f, "/forward/loss", H5T_NATIVE_FLOAT, 4, &nd, d);
    ck_assert_msg(fabs(loss - rl[0]) <= REL_TOL * fabs(rl[0]), "%s loss %.9g, torch %.9g", file,
                  loss, rl[0]);
    compare_group_(&fx, &m, "/grad", 1, 0);
    free(ref);
    free(rl);
    model_free(&m);
    fixture_close_(&fx);
}

static void five_steps_(const char *file, const char *opt)
{
    fixture_t fx;
    model_t m;
    fixture_open_(&fx, file);
    build_(&fx, &m);
    ddp_config_t cfg;
    config_defaults(&cfg);
    char group[32];
    snprintf(group, sizeof group, "/%s", opt);
    hid_t g = H5Gopen2(fx.f, group, H5P_DEFAULT);
    ck_assert_int_ge(g, 0);
    ck_assert_int_eq(h5_attr_read_f64(g, "lr", &cfg.lr), DDP_OK);
    ck_assert_int_eq(h5_attr_read_f64(g, "weight_decay", &cfg.weight_decay), DDP_OK);
    if (strcmp(opt, "sgd") == 0) {
        cfg.optimizer = OPTIM_SGD;
        ck_assert_int_eq(h5_attr_read_f64(g, "momentum", &cfg.momentum), DDP_OK);
    } else {
        cfg.optimizer = OPTIM_ADAMW;
        ck_assert_int_eq(h5_attr_read_f64(g, "beta1", &cfg.beta1), DDP_OK);
        ck_assert_int_eq(h5_attr_read_f64(g, "beta2", &cfg.beta2), DDP_OK);
        ck_assert_int_eq(h5_attr_read_f64(g, "eps", &cfg.eps), DDP_OK);
    }
    H5Gclose(g);
    optim_t o;
    optim_opts_t oo = optim_opts_from_config(&cfg, 5);
    ck_assert_int_eq(optim_init(&o, &oo, &m, NULL, NULL), DDP_OK);
    for (int s = 0; s < 5; s++) {
        const float *out;
        fwd_bwd_(&fx, &m, &out);
        ck_assert_int_eq(optim_step(&o, &m, 0), DDP_OK); /* no clipping: the norm is not read */
    }
    snprintf(group, sizeof group, "/%s/step5", opt);
    compare_group_(&fx, &m, group, 0, strcmp(opt, "adamw") == 0 ? 2 * 5 * cfg.lr : 0);
    optim_free(&o);
    model_free(&m);
    fixture_close_(&fx);
}

START_TEST(mlp_forward_backward)
{
    forward_and_grads_("mlp.h5");
}
END_TEST
START_TEST(cnn_forward_backward)
{
    forward_and_grads_("cnn.h5");
}
END_TEST
START_TEST(mlp_sgd)
{
    five_steps_("mlp.h5", "sgd");
}
END_TEST
START_TEST(mlp_adamw)
{
    five_steps_("mlp.h5", "adamw");
}
END_TEST
START_TEST(cnn_sgd)
{
    five_steps_("cnn.h5", "sgd");
}
END_TEST
START_TEST(cnn_adamw)
{
    five_steps_("cnn.h5", "adamw");
}
END_TEST

Suite *test_suite(void)
{
#ifdef DDP_TEST_BACKEND_MIRROR
    B = compute_mirror_cuda("check_golden_cuda");
#endif
    Suite *s = suite_create("golden");
    TCase *t = tcase_create("pytorch");
    tcase_add_test(t, mlp_forward_backward);
    tcase_add_test(t, cnn_forward_backward);
    tcase_add_test(t, mlp_sgd);
    tcase_add_test(t, mlp_adamw);
    tcase_add_test(t, cnn_sgd);
    tcase_add_test(t, cnn_adamw);
    suite_add_tcase(s, t);
    return s;
}
