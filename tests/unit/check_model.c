/* check_model.c -- model specs (shapes, names, errors), the flat layout and
 * buckets, --freeze, PyTorch-default initialisation, weights files. */
#define _GNU_SOURCE /* memmem */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "h5util.h"
#include "model.h"
#include "tests.h"
#include "weights.h"

static ddp_status_t build_(model_t *m, const char *spec, act_shape_t in, int outputs, size_t cap,
                           size_t first, const char *freeze)
{
    model_opts_t o = {.spec = spec,
                      .input = in,
                      .outputs = outputs,
                      .batch = 4,
                      .bucket_cap_bytes = cap,
                      .first_bucket_bytes = first,
                      .freeze = freeze};
    return model_build(m, &o, &compute_cpu_ops);
}

static const act_shape_t img = {3, 8, 8, 1}, vec = {20, 1, 1, 0};

START_TEST(cnn_shapes_and_names)
{
    model_t m;
    ck_assert_int_eq(build_(&m,
                            "conv:8:3:1:1,bn,relu,maxpool:2,conv:16:3:2,bn,gelu,gap,dropout:0.5,"
                            "linear:auto",
                            img, 5, 1 << 20, 1 << 20, ""),
                     DDP_OK);
    ck_assert_int_eq(m.nlayers, 10);
    ck_assert_int_eq(m.layers[0].out.c, 8);
    ck_assert_int_eq(m.layers[0].out.h, 8);
    ck_assert_int_eq(m.layers[3].out.h, 4);     /* maxpool 2 */
    ck_assert_int_eq(m.layers[4].out.h, 1);     /* (4 - 3)/2 + 1 */
    ck_assert_int_eq(m.layers[7].out.image, 0); /* gap */
    ck_assert_int_eq(m.outputs, 5);             /* linear:auto */
    int t = model_find_tensor(&m, "layers.0.weight");
    ck_assert_int_ge(t, 0);
    ck_assert_int_eq(m.tensors[t].ndim, 4);
    ck_assert_int_eq(m.tensors[t].shape[0], 8);
    ck_assert_int_eq(m.tensors[t].shape[1], 3);
    ck_assert_int_eq(m.tensors[t].shape[3], 3);
    ck_assert_int_ge(model_find_tensor(&m, "layers.1.running_var"), 0);
    ck_assert_int_ge(model_find_tensor(&m, "layers.5.num_batches_tracked"), 0);
    t = model_find_tensor(&m, "layers.9.weight");
    ck_assert_int_eq(m.tensors[t].shape[0], 5);
    ck_assert_int_eq(m.tensors[t].shape[1], 16);
    ck_assert_int_lt(model_find_tensor(&m, "layers.2.weight"), 0);
    model_free(&m);
}
END_TEST

START_TEST(linear_flattens_images)
{
    model_t m;
    ck_assert_int_eq(build_(&m, "linear:7,relu,flatten,linear:3", img, 3, 1 << 20, 1 << 20, ""),
                     DDP_OK);
    int t = model_find_tensor(&m, "layers.0.weight");
    ck_assert_int_eq(m.tensors[t].shape[1], 3 * 8 * 8);
    ck_assert_int_ge(model_find_tensor(&m, "layers.3.bias"), 0);
    model_free(&m);
}
END_TEST

/* The spec is refused (a usage error) with a message holding needle. */
static void refused_(const char *spec, act_shape_t in, const char *needle, int help)
{
    model_t m;
    ddp_clear_error();
    ck_assert_msg(build_(&m, spec, in, 4, 1 << 20, 1 << 20, "") == DDP_ERR_USAGE,
                  "spec '%s' was accepted", spec);
    ck_assert_msg(strstr(ddp_error_message(), needle) != NULL, "spec '%s': message '%s' lacks '%s'",
                  spec, ddp_error_message(), needle);
    if (help)
        ck_assert_msg(strstr(ddp_error_message(), "allowed layers") != NULL, "no help in '%s'",
                      ddp_error_message());
    ddp_clear_error();
}

static void bad_(const char *spec, act_shape_t in, const char *needle)
{
    refused_(spec, in, needle, 1);
}

static void bad_block_(const char *spec, act_shape_t in, const char *needle)
{
    refused_(spec, in, needle, 0);
}

START_TEST(bad_specs_point_at_the_layer)
{
    bad_("linear:10,relux", vec, "layer 1 'relux'");
    bad_("linear:0", vec, "layer 0 'linear:0'");
    bad_("linear:10,conv:3:3", vec, "layer 1 'conv:3:3'");
    bad_("conv:4:9", img, "kernel larger");
    bad_("maxpool:2,maxpool:2,maxpool:2,maxpool:2", img, "layer 3");
    bad_("linear:4,dropout:1.5", vec, "dropout probability");
    bad_("linear:4,,relu", vec, "layer 1");
    bad_("linear:4:5", vec, "too many arguments");
    bad_("conv:4", img, "needs more arguments");
    bad_("gap", vec, "gap needs image input");
    model_t m;
    ck_assert_int_eq(build_(&m, "conv:4:3", img, 4, 1 << 20, 1 << 20, ""), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "end the model with gap or linear"));
    ddp_clear_error();
}
END_TEST

START_TEST(buckets_reverse_contiguous_capped)
{
    /* 784-1024-1024-10 MLP with BN: the first bucket (last layers) under 1 MiB */
    model_t m;
    act_shape_t in = {784, 1, 1, 0};
    ck_assert_int_eq(build_(&m, "linear:1024,bn,relu,linear:1024,bn,relu,linear:10", in, 10,
                            (size_t)5 << 20, (size_t)1 << 20, ""),
                     DDP_OK);
    ck_assert_int_eq(m.ntrainable, m.nparams);
    size_t expect_off = 0, values = 0;
    int last_layer = 1 << 30;
    for (int b = 0; b < m.nbuckets; b++) {
        const bucket_t *B = &m.buckets[b];
        /* each bucket at the next multiple of 64 elements (256 bytes) */
        ck_assert_uint_eq(B->offset, (expect_off + 63) / 64 * 64);
        size_t sum = 0;
        for (int i = 0; i < B->ntensors; i++) {
            const tensor_t *T = &m.tensors[B->tensors[i]];
            ck_assert_int_eq(T->bucket, b);
            ck_assert_int_le(T->layer, last_layer); /* reverse layer order */
            last_layer = T->layer;
            /* inside the bucket; sizes of multiples of 64 and 8 start there */
            ck_assert_uint_ge(T->offset, B->offset);
            ck_assert_uint_le(T->offset + T->numel, B->offset + B->count);
            if (T->numel % 64 == 0) ck_assert_uint_eq(T->offset % 64, 0);
            if (T->numel % 8 == 0) ck_assert_uint_eq(T->offset % 8, 0);
            for (int j = 0; j < i; j++) { /* no two overlap */
                const tensor_t *U = &m.tensors[B->tensors[j]];
                ck_assert(T->offset >= U->offset + U->numel || U->offset >= T->offset + T->numel);
            }
            sum += T->numel;
        }
        ck_assert_uint_eq(sum, B->count); /* no gaps inside */
        size_t cap = b == 0 ? (size_t)1 << 20 : (size_t)5 << 20;
        /* a bucket passes its cap only when it holds one tensor larger than it */
        ck_assert(B->count * 4 <= cap || B->ntensors == 1);
        expect_off = B->offset + B->count;
        values += B->count;
    }
    ck_assert_uint_eq(expect_off, m.ntrainable);
    ck_assert_uint_eq(values, m.ntrainable_values);
    /* the last layer's bias of 10 is placed after its weight, not before */
    int fcb = model_find_tensor(&m, "layers.6.bias"), fcw = model_find_tensor(&m, "layers.6.weight");
    ck_assert_uint_gt(m.tensors[fcb].offset, m.tensors[fcw].offset);
    ck_assert_int_eq(m.tensors[m.buckets[0].tensors[0]].layer, 6);
    ck_assert_uint_le(m.buckets[0].count * 4, (size_t)1 << 20);
    ck_assert_int_ge(m.nbuckets, 3);
    model_free(&m);
}
END_TEST

START_TEST(freeze_excludes_from_buckets)
{
    model_t m;
    ck_assert_int_eq(
        build_(&m, "linear:8,bn,relu,linear:4", vec, 4, 1 << 20, 1 << 20, "layers.0,layers.3.bias"),
        DDP_OK);
    int w0 = model_find_tensor(&m, "layers.0.weight"), b3 = model_find_tensor(&m, "layers.3.bias");
    int w3 = model_find_tensor(&m, "layers.3.weight");
    ck_assert(m.tensors[w0].frozen && m.tensors[b3].frozen && !m.tensors[w3].frozen);
    ck_assert_int_eq(m.tensors[w0].bucket, -1);
    ck_assert_uint_ge(m.tensors[w0].offset, m.ntrainable); /* after the trainable range */
    ck_assert_uint_eq(m.ntrainable, 4 * 8 + 8 + 8);        /* layers.3.weight + bn */
    model_free(&m);
    ck_assert_int_eq(build_(&m, "linear:8,relu,linear:4", vec, 4, 1 << 20, 1 << 20, "layers.7"),
                     DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "'layers.7'"));
    ddp_clear_error();
    /* nothing left to train: every parameter frozen, or none at all */
    ck_assert_int_eq(
        build_(&m, "linear:8,relu,linear:4", vec, 4, 1 << 20, 1 << 20, "layers.0,layers.2"),
        DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "freezes every parameter"));
    ddp_clear_error();
    ck_assert_int_eq(build_(&m, "relu,dropout:0.5", vec, 4, 1 << 20, 1 << 20, ""), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "has no parameters to train"));
    ddp_clear_error();
}
END_TEST

START_TEST(init_follows_pytorch_defaults)
{
    model_t m;
    act_shape_t in = {400, 1, 1, 0};
    ck_assert_int_eq(build_(&m, "linear:300,bn,relu,linear:2", in, 2, 1 << 20, 1 << 20, ""),
                     DDP_OK);
    ck_assert_int_eq(model_init_params(&m, 7), DDP_OK);
    const tensor_t *W = &m.tensors[model_find_tensor(&m, "layers.0.weight")];
    const float *w = m.params + W->offset;
    double bound = 1.0 / sqrt(400.0), s = 0, s2 = 0, mx = 0;
    for (size_t i = 0; i < W->numel; i++) {
        s += w[i];
        s2 += (double)w[i] * w[i];
        mx = fmax(mx, fabs(w[i]));
    }
    double mean = s / W->numel, var = s2 / W->numel - mean * mean;
    ck_assert_double_le(mx, bound);
    ck_assert_double_ge(mx, 0.99 * bound);
    ck_assert_double_le(fabs(mean), 5 * bound / sqrt(3.0 * W->numel));
    ck_assert_double_le(fabs(var - bound * bound / 3) / (bound * bound / 3), 0.02); /* U(-b,b) */
    const tensor_t *G = &m.tensors[model_find_tensor(&m, "layers.1.weight")];
    const tensor_t *RV = &m.tensors[model_find_tensor(&m, "layers.1.running_var")];
    for (size_t i = 0; i < G->numel; i++) {
        ck_assert_float_eq(m.params[G->offset + i], 1.0f);
        ck_assert_float_eq(m.bufs[RV->offset + i], 1.0f);
    }
    /* same seed: same weights; another seed: different */
    float first = w[0];
    ck_assert_int_eq(model_init_params(&m, 7), DDP_OK);
    ck_assert_float_eq(w[0], first);
    ck_assert_int_eq(model_init_params(&m, 8), DDP_OK);
    ck_assert_float_ne(w[0], first);
    model_free(&m);
}
END_TEST

/* The bytes of a file (NULL if unreadable); *n its size. */
static char *slurp_(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = malloc(1 << 20);
    *n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    return buf;
}

START_TEST(weights_round_trip_and_errors)
{
    model_t a, b;
    char path[600], bad[600];
    snprintf(path, sizeof path, "%s/w.h5", test_tmpdir());
    ck_assert_int_eq(build_(&a, "linear:6,bn,relu,linear:3", vec, 3, 1 << 20, 1 << 20, ""), DDP_OK);
    ck_assert_int_eq(model_init_params(&a, 1), DDP_OK);
    a.layers[1].num_batches_tracked = 17;
    a.bufs[0] = 0.25f;
    ck_assert_int_eq(weights_save(path, &a, NULL), DDP_OK);
    ck_assert_int_eq(build_(&b, "linear:6,bn,relu,linear:3", vec, 3, 1 << 20, 1 << 20, ""), DDP_OK);
    ck_assert_int_eq(model_init_params(&b, 2), DDP_OK);
    ck_assert_msg(weights_load(path, &b) == DDP_OK, "%s", ddp_error_message());
    ck_assert_int_eq(memcmp(a.params, b.params, a.nparams * 4), 0);
    ck_assert_int_eq(memcmp(a.bufs, b.bufs, a.nbufs * 4), 0);
    ck_assert_int_eq(b.layers[1].num_batches_tracked, 17);
    model_free(&b);

    /* another model: every missing, extra and mis-shaped tensor is named */
    ck_assert_int_eq(build_(&b, "linear:7,relu,linear:3", vec, 3, 1 << 20, 1 << 20, ""), DDP_OK);
    ck_assert_int_eq(weights_load(path, &b), DDP_ERR_INPUT);
    const char *msg = ddp_error_message();
    ck_assert_ptr_nonnull(strstr(msg, "layers.0.weight has shape file [6, 20], model [7, 20]"));
    ck_assert_ptr_nonnull(strstr(msg, "layers.2.weight")); /* missing */
    ck_assert_ptr_nonnull(strstr(msg, "unexpected tensor layers.1.running_mean"));
    ck_assert_ptr_nonnull(strstr(msg, "unexpected tensor layers.3.weight"));
    ddp_clear_error();
    model_free(&b);

    /* not a weights file at all */
    snprintf(bad, sizeof bad, "%s/notweights.h5", test_tmpdir());
    FILE *f = fopen(bad, "w");
    fputs("not hdf5", f);
    fclose(f);
    ck_assert_int_eq(weights_load(bad, &a), DDP_ERR_INPUT);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "not an HDF5 file"));
    ddp_clear_error();

    /* a failed save leaves the old file intact: a missing directory, and an
     * old file at the path whose save cannot create its temporary file (a
     * directory holds its name): the old file keeps every byte */
    snprintf(bad, sizeof bad, "%s/no/such/dir/w.h5", test_tmpdir());
    ck_assert_int_eq(weights_save(bad, &a, NULL), DDP_ERR_IO);
    ddp_clear_error();
    size_t n_old = 0, n_now = 0;
    char *old = slurp_(path, &n_old);
    ck_assert(old && n_old > 0);
    char tmp[sizeof path + 300];
    atomicfile_tmp_name(path, tmp, sizeof tmp);
    ck_assert_int_eq(mkdir(tmp, 0700), 0);
    ddp_status_t s = weights_save(path, &a, NULL);
    rmdir(tmp);
    char *now = slurp_(path, &n_now);
    ck_assert_msg(now && n_now == n_old && memcmp(now, old, n_old) == 0,
                  "a save that failed (or wrote in place) changed the old file %s", path);
    ck_assert_int_eq(s, DDP_ERR_IO);
    ddp_clear_error();
    free(old);
    free(now);
    model_free(&a);
}
END_TEST

/* Every dataset ddptrain writes carries a checksum: one flipped bit in a
 * tensor's data is named on load (HDF5 alone would read it as a number). */
START_TEST(weights_checksum_catches_a_flipped_bit)
{
    model_t a;
    char path[600];
    snprintf(path, sizeof path, "%s/sum.h5", test_tmpdir());
    ck_assert_int_eq(build_(&a, "linear:6,relu,linear:3", vec, 3, 1 << 20, 1 << 20, ""), DDP_OK);
    ck_assert_int_eq(model_init_params(&a, 1), DDP_OK);
    ck_assert_int_eq(weights_save(path, &a, NULL), DDP_OK);
    size_t n = 0;
    char *bytes = slurp_(path, &n);
    ck_assert(bytes && n > 0);
    /* the bytes of layers.0.weight (the first 8 of its values) in the file */
    const tensor_t *T = &a.tensors[model_find_tensor(&a, "layers.0.weight")];
    char *at = memmem(bytes, n, a.params + T->offset, 8 * sizeof(float));
    ck_assert_ptr_nonnull(at);
    at[5] ^= 0x10;
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(bytes, 1, n, f), n);
    fclose(f);
    free(bytes);
    ck_assert_int_eq(weights_load(path, &a), DDP_ERR_INPUT);
    ck_assert_msg(
        strstr(ddp_error_message(), "layers.0.weight cannot be read or fails its checksum"), "%s",
        ddp_error_message());
    ddp_clear_error();
    model_free(&a);
}
END_TEST

/* Dropout draws its mask from (seed, step, sample, layer): the same keys give
 * the same output, a new step, seed or sample a new mask, eval mode none;
 * and backward uses the forward's mask (the gradient of sum(out) with
 * respect to the first bias against a central difference: the model is
 * linear in it, so the difference is exact up to rounding). */
static void forward_(model_t *m, const float *x, const int64_t *idx, int64_t step, uint64_t seed,
                     int train, float *out)
{
    step_ctx_t ctx = {.n = 4, .global_n = 4, .sample_idx = idx, .step = step, .seed = seed,
                      .train = train};
    const float *y;
    ck_assert_int_eq(model_forward(m, x, &ctx, &y), DDP_OK);
    memcpy(out, y, 4 * 4 * sizeof *out);
}

static double sum16_(const float *v)
{
    double s = 0;
    for (int i = 0; i < 16; i++) s += v[i];
    return s;
}

START_TEST(dropout_keyed_by_step_and_sample)
{
    model_t m;
    ck_assert_int_eq(build_(&m, "linear:32,dropout:0.5,linear:4", vec, 4, 1 << 20, 1 << 20, ""),
                     DDP_OK);
    ck_assert_int_eq(model_init_params(&m, 3), DDP_OK);
    float x[4 * 20], a[16], b[16];
    for (int i = 0; i < 4 * 20; i++) x[i] = (float)((i * 37) % 17) / 8.0f - 1.0f;
    int64_t idx[4] = {0, 1, 2, 3}, idx2[4] = {4, 5, 6, 7};
    forward_(&m, x, idx, 5, 1, 1, a);
    forward_(&m, x, idx, 5, 1, 1, b);
    ck_assert(memcmp(a, b, sizeof a) == 0); /* the same keys, the same mask */
    forward_(&m, x, idx, 6, 1, 1, b);
    ck_assert_msg(memcmp(a, b, sizeof a) != 0, "step 6 drew step 5's dropout mask");
    forward_(&m, x, idx, 5, 2, 1, b);
    ck_assert_msg(memcmp(a, b, sizeof a) != 0, "seed 2 drew seed 1's dropout mask");
    forward_(&m, x, idx2, 5, 1, 1, b);
    ck_assert_msg(memcmp(a, b, sizeof a) != 0, "other samples drew the same dropout mask");
    forward_(&m, x, idx, 5, 1, 0, b);
    ck_assert_msg(memcmp(a, b, sizeof a) != 0, "eval mode applied dropout");

    /* backward at step 6 against a central difference at step 6 */
    step_ctx_t ctx = {.n = 4, .global_n = 4, .sample_idx = idx, .step = 6, .seed = 1, .train = 1};
    const float *y;
    ck_assert_int_eq(model_forward(&m, x, &ctx, &y), DDP_OK);
    float *dout = model_dout(&m);
    for (int i = 0; i < 16; i++) dout[i] = 1.0f;
    ck_assert_int_eq(model_backward(&m, x, &ctx), DDP_OK);
    const tensor_t *bias = &m.tensors[model_find_tensor(&m, "layers.0.bias")];
    for (int j = 0; j < 32; j++) {
        float *p = m.params + bias->offset + j, keep = *p, g = m.grads[bias->offset + j];
        const float h = 0.25f;
        *p = keep + h;
        forward_(&m, x, idx, 6, 1, 1, a);
        *p = keep - h;
        forward_(&m, x, idx, 6, 1, 1, b);
        *p = keep;
        double fd = (sum16_(a) - sum16_(b)) / (2 * h);
        ck_assert_msg(fabs(fd - g) <= 1e-4 * fmax(1.0, fabs(fd)),
                      "layers.0.bias[%d]: gradient %g, central difference %g (backward's dropout "
                      "mask is not the forward's)", j, g, fd);
    }
    model_free(&m);
}
END_TEST

/* Residual blocks: names (the block's body and downsample, as a PyTorch
 * module with attributes body and downsample), shapes, the projection only
 * where the shape changes, the add's inputs. */
START_TEST(residual_blocks_shapes_and_names)
{
    model_t m;
    ck_assert_int_eq(build_(&m,
                            "conv:8:3:1:1:nobias,bn,relu,res(conv:8:3:1:1:nobias,bn,relu,"
                            "conv:8:3:1:1:nobias,bn),relu,res(conv:16:3:2:1:nobias,bn,relu,"
                            "conv:16:3:1:1:nobias,bn),relu,gap,linear:auto",
                            img, 5, 1 << 20, 1 << 20, ""),
                     DDP_OK);
    /* 3 + (5 + add) + relu + (5 + downsample 2 + add) + relu + gap + linear */
    ck_assert_int_eq(m.nlayers, 3 + 6 + 1 + 8 + 1 + 2);
    ck_assert_int_eq(m.ndact, 3);
    ck_assert_int_lt(model_find_tensor(&m, "layers.0.bias"), 0); /* nobias */
    ck_assert_int_ge(model_find_tensor(&m, "layers.3.body.0.weight"), 0);
    ck_assert_int_ge(model_find_tensor(&m, "layers.3.body.4.running_var"), 0);
    ck_assert_int_lt(model_find_tensor(&m, "layers.3.downsample.0.weight"), 0); /* identity */
    int t = model_find_tensor(&m, "layers.5.downsample.0.weight");
    ck_assert_int_ge(t, 0);
    ck_assert_int_eq(m.tensors[t].shape[0], 16);
    ck_assert_int_eq(m.tensors[t].shape[1], 8);
    ck_assert_int_eq(m.tensors[t].shape[2], 1);
    ck_assert_int_lt(model_find_tensor(&m, "layers.5.downsample.0.bias"), 0);
    ck_assert_int_ge(model_find_tensor(&m, "layers.5.downsample.1.num_batches_tracked"), 0);
    const layer_t *P = &m.layers[m.tensors[t].layer];
    ck_assert_int_eq(P->stride, 2);
    ck_assert_int_eq(P->src, 9); /* the block's input: the relu after the first block */
    const layer_t *A = &m.layers[P->index + 2];
    ck_assert_int_eq(A->kind, LAYER_ADD);
    ck_assert_int_eq(A->src, P->index - 1); /* the body's last bn */
    ck_assert_int_eq(A->skip, P->index + 1);
    ck_assert_int_eq(A->out.c, 16);
    ck_assert_int_eq(A->out.h, 4);
    ck_assert_int_eq(m.layers[8].kind, LAYER_ADD); /* the identity block's */
    ck_assert_int_eq(m.layers[8].skip, 2);
    ck_assert_int_eq(m.outputs, 5);
    /* --freeze by a block's name freezes its body and projection */
    model_free(&m);
    ck_assert_int_eq(build_(&m, "conv:4:3:1:1,res(conv:6:3:2:1,bn),gap,linear:auto", img, 5,
                            1 << 20, 1 << 20, "layers.1"),
                     DDP_OK);
    for (int i = 0; i < m.ntensors; i++)
        if (m.tensors[i].kind == TENSOR_PARAM)
            ck_assert_int_eq(m.tensors[i].frozen, strncmp(m.tensors[i].name, "layers.1.", 9) == 0);
    model_free(&m);
}
END_TEST

/* The named architectures: parameter counts of torchvision's resnet18 and
 * resnet50 (torchvision.models, 3-channel input, 1000 classes: 11,689,512
 * and 25,557,032), and of the CIFAR ResNet-20 and -56 with projection
 * shortcuts (counted by PyTorch on tests/tools/resnets.py's modules, which
 * give torchvision's two counts too: 272,474 and 855,770), names as
 * torchvision's. */
START_TEST(named_architectures)
{
    static const struct {
        const char *spec;
        act_shape_t in;
        int classes;
        size_t params;
    } cases[] = {
        {"resnet18", {3, 64, 64, 1}, 1000, 11689512},
        {"resnet50", {3, 64, 64, 1}, 1000, 25557032},
        {"resnet20", {3, 32, 32, 1}, 10, 272474},
        {"resnet56", {3, 32, 32, 1}, 10, 855770},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        model_t m;
        model_opts_t o = {.spec = cases[i].spec, .input = cases[i].in, .outputs = cases[i].classes,
                          .batch = 2, .bucket_cap_bytes = 25 << 20, .first_bucket_bytes = 1 << 20};
        ck_assert_int_eq(model_layout(&m, &o, &compute_cpu_ops), DDP_OK);
        ck_assert_msg(m.nvalues == cases[i].params, "%s: %zu parameters, torchvision has %zu",
                      cases[i].spec, m.nvalues, cases[i].params);
        ck_assert(model_weights_aligned(&m, 8)); /* every GEMM's weight 16-byte aligned */
        ck_assert_int_ge(model_find_tensor(&m, "conv1.weight"), 0);
        ck_assert_int_ge(model_find_tensor(&m, "bn1.running_mean"), 0);
        ck_assert_int_ge(model_find_tensor(&m, "layer1.0.conv1.weight"), 0);
        ck_assert_int_ge(model_find_tensor(&m, "layer2.0.downsample.0.weight"), 0);
        ck_assert_int_ge(model_find_tensor(&m, "layer2.0.downsample.1.running_var"), 0);
        ck_assert_int_ge(model_find_tensor(&m, "fc.bias"), 0);
        ck_assert_int_lt(model_find_tensor(&m, "conv1.bias"), 0);
        model_free(&m);
    }
    model_t m;
    model_opts_t o = {.spec = "resnet18:width=8", .input = {1, 28, 28, 1}, .outputs = 10,
                      .batch = 2, .bucket_cap_bytes = 25 << 20, .first_bucket_bytes = 1 << 20};
    ck_assert_int_eq(model_layout(&m, &o, &compute_cpu_ops), DDP_OK);
    int t = model_find_tensor(&m, "layer4.1.conv2.weight");
    ck_assert_int_eq(m.tensors[t].shape[0], 64); /* 8 WIDTH */
    t = model_find_tensor(&m, "conv1.weight");
    ck_assert_int_eq(m.tensors[t].shape[1], 1); /* the data's channels */
    ck_assert_int_eq(m.layers[m.nlayers - 1].out.c, 10);
    model_free(&m);
}
END_TEST

START_TEST(bad_blocks_are_named)
{
    bad_block_("conv:4:3,res(conv:4:3:1:1", img, "res( has no closing ')'");
    bad_block_("conv:4:3,res()", img, "at least one layer");
    bad_block_("res(res(relu)),gap,linear:4", img, "do not nest");
    bad_block_("relu),gap,linear:4", img, "')' without its res(");
    bad_block_("relu(2),gap,linear:4", img, "'(' belongs only after res");
    bad_block_("conv:4:3,b1=res(linear:5),linear:4", img, "residual block b1 turns its input");
    bad_block_("res(conv:4:3),gap,linear:4", img, "residual block layers.0 turns");
    bad_block_("a=linear:3,a=linear:3", vec, "two layers are named a");
    bad_block_("=linear:3", vec, "a name before '='");
    bad_block_("maxpool:3:2:2,gap,linear:4", img, "at most half the window");
    bad_block_("resnet19", img, "no such architecture");
    bad_block_("resnet18:depth=3", img, "width=N");
    bad_block_("resnet20:width=0", img, "width must be");
    bad_block_("conv:4:3:nobias:nobias", img, "argument 'nobias'");
}
END_TEST

/* Backward through residual blocks (identity and projection) against
 * central differences of a weighted sum of the outputs: the layer below a
 * block gets both paths' gradients, the projection its own.  GELU, not
 * ReLU: a difference across ReLU's kink is off by several percent. */
START_TEST(residual_backward_matches_differences)
{
    model_t m;
    ck_assert_int_eq(build_(&m,
                            "conv:4:3:1:1,res(conv:4:3:1:1:nobias,bn,gelu,conv:4:3:1:1),"
                            "res(conv:6:3:2:1:nobias,bn,gelu,conv:6:3:1:1:nobias,bn),gelu,gap,"
                            "linear:auto",
                            img, 4, 1 << 20, 1 << 20, ""),
                     DDP_OK);
    ck_assert_int_eq(model_init_params(&m, 5), DDP_OK);
    float x[4 * 3 * 8 * 8], wsum[16];
    for (int i = 0; i < 4 * 3 * 64; i++) x[i] = (float)((i * 37) % 29) / 14.0f - 1.0f;
    for (int i = 0; i < 16; i++) wsum[i] = (float)((i * 7) % 5) - 2.0f;
    int64_t idx[4] = {0, 1, 2, 3};
    step_ctx_t ctx = {.n = 4, .global_n = 4, .sample_idx = idx, .step = 1, .seed = 1, .train = 1};
    const float *y;
    ck_assert_int_eq(model_forward(&m, x, &ctx, &y), DDP_OK);
    memcpy(model_dout(&m), wsum, sizeof wsum);
    ck_assert_int_eq(model_backward(&m, x, &ctx), DDP_OK);
    static const char *names[] = {"layers.0.weight", "layers.0.bias", "layers.1.body.0.weight",
                                  "layers.1.body.3.bias", "layers.2.downsample.0.weight",
                                  "layers.2.downsample.1.weight", "layers.2.body.4.bias"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        const tensor_t *T = &m.tensors[model_find_tensor(&m, names[k])];
        for (size_t j = 0; j < T->numel && j < 6; j++) {
            float *p = m.params + T->offset + j, keep = *p, g = m.grads[T->offset + j];
            const float h = 1e-2f;
            double lo = 0, hi = 0;
            float out[16];
            *p = keep + h;
            forward_(&m, x, idx, 1, 1, 1, out);
            for (int i = 0; i < 16; i++) hi += (double)wsum[i] * out[i];
            *p = keep - h;
            forward_(&m, x, idx, 1, 1, 1, out);
            for (int i = 0; i < 16; i++) lo += (double)wsum[i] * out[i];
            *p = keep;
            double fd = (hi - lo) / (2 * h);
            ck_assert_msg(fabs(fd - g) <= 1e-3 + 1e-2 * fabs(fd),
                          "%s[%zu]: gradient %g, central difference %g", names[k], j, g, fd);
        }
    }
    model_free(&m);
}
END_TEST

/* A ReLU after a dense layer, a BatchNorm or a block's add that nothing
 * else reads runs inside it (fuse_relus_), a BatchNorm only a block's add
 * reads is applied by the add (fuse_bn_adds_), and a block's output ReLU
 * read by the next block sums its two gradients in its mask
 * (sums_in_relu_): the model gives the bits of the layers run alone,
 * forward and backward, and the producer's own output buffer is not
 * allocated.  A BatchNorm or dense layer read by a
 * block's add too stays alone; a fused dense layer's ReLU output read by
 * two (a block's input) gets the sum of their gradients. */
START_TEST(relu_fused_into_bn_same_bits)
{
    const char *spec = "conv:4:3:1:1,bn,relu,res(conv:4:3:1:1:nobias,bn,relu,conv:4:3:1:1:nobias,"
                       "bn),relu,res(conv:4:3:1:1,bn),relu,conv:4:3:1:1,bn,res(relu,conv:4:3:1:1),"
                       "gap,linear:12,relu,res(linear:12,relu),linear:12,res(relu,linear:12),"
                       "linear:auto";
    model_t m[2];
    float x[4 * 3 * 8 * 8], wsum[16], out[2][16];
    for (int i = 0; i < 4 * 3 * 64; i++) x[i] = (float)((i * 37) % 29) / 14.0f - 1.0f;
    for (int i = 0; i < 16; i++) wsum[i] = (float)((i * 7) % 5) - 2.0f;
    int64_t idx[4] = {0, 1, 2, 3};
    for (int u = 0; u < 2; u++) {
        model_opts_t o = {.spec = spec, .input = img, .outputs = 4, .batch = 4,
                          .bucket_cap_bytes = 1 << 20, .first_bucket_bytes = 1 << 20,
                          .unfused = u};
        ck_assert_int_eq(model_build(&m[u], &o, &compute_cpu_ops), DDP_OK);
        ck_assert_int_eq(model_init_params(&m[u], 5), DDP_OK);
        step_ctx_t ctx = {.n = 4, .global_n = 4, .sample_idx = idx, .step = 1, .seed = 1,
                          .train = 1};
        const float *y;
        ck_assert_int_eq(model_forward(&m[u], x, &ctx, &y), DDP_OK);
        memcpy(out[u], y, sizeof out[u]);
        memcpy(model_dout(&m[u]), wsum, sizeof wsum);
        ck_assert_int_eq(model_backward(&m[u], x, &ctx), DDP_OK);
        int fused = 0, in_add = 0;
        for (int i = 0; i < m[u].nlayers; i++) {
            fused += m[u].layers[i].kind == LAYER_RELU && m[u].layers[i].fused_relu;
            in_add += m[u].layers[i].bn_in_add;
        }
        ck_assert_int_eq(fused, u ? 0 : 6);
        ck_assert_int_eq(in_add, u ? 0 : 2);
    }
    ck_assert_mem_eq(out[0], out[1], sizeof out[0]);
    ck_assert_uint_eq(m[0].nparams, m[1].nparams);
    ck_assert_mem_eq(m[0].grads, m[1].grads, m[0].nparams * sizeof(float));
    /* four BatchNorm outputs and two adds' of [4, 4, 8, 8] floats and two
     * dense layers' of [4, 12] not allocated (the convolutions' workspace is
     * larger than the dense layers' masked gradient) */
    ck_assert_uint_eq(m[1].act_bytes - m[0].act_bytes,
                      (6 * 4 * 4 * 64 + 2 * 4 * 12) * sizeof(float));
    model_free(&m[0]);
    model_free(&m[1]);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("model");
    TCase *t = tcase_create("model");
    tcase_add_test(t, cnn_shapes_and_names);
    tcase_add_test(t, linear_flattens_images);
    tcase_add_test(t, bad_specs_point_at_the_layer);
    tcase_add_test(t, buckets_reverse_contiguous_capped);
    tcase_add_test(t, freeze_excludes_from_buckets);
    tcase_add_test(t, init_follows_pytorch_defaults);
    tcase_add_test(t, weights_round_trip_and_errors);
    tcase_add_test(t, weights_checksum_catches_a_flipped_bit);
    tcase_add_test(t, dropout_keyed_by_step_and_sample);
    tcase_add_test(t, residual_blocks_shapes_and_names);
    tcase_add_test(t, named_architectures);
    tcase_add_test(t, bad_blocks_are_named);
    tcase_add_test(t, residual_backward_matches_differences);
    tcase_add_test(t, relu_fused_into_bn_same_bits);
    suite_add_tcase(s, t);
    return s;
}
