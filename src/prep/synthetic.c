/* synthetic.c -- `ddptrain-prep synthetic`: a generated learning task.
 *
 * Classification: each class is a mixture of SYN_CLUSTERS Gaussian clusters
 * in a random latent space of L = min(D, SYN_LATENT) dimensions; a sample's
 * latent point z is pushed through a fixed random nonlinearity
 * x = tanh(A z + b) + noise into D features.  The clusters of different
 * classes interleave, so a linear model does poorly and a small MLP learns
 * it well but not perfectly.  Regression (--regression K): z ~ N(0, I) and
 * K targets y = V z / sqrt(L) + sin(U z) + noise.
 *
 * Everything is a pure function of (seed, what, index) through Philox
 * (DDP_STREAM_DATA), so the same seed gives the same file, whatever the
 * block size or machine.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep.h"
#include "rng.h"

#define SYN_LATENT   8
#define SYN_CLUSTERS 5
#define SYN_SPREAD   2.0  /* std of the cluster centres (the noise has std 1) */
#define SYN_GAIN     1.5  /* scale of A: how strongly tanh bends */
#define SYN_NOISE    0.05 /* feature noise after the nonlinearity */
#define SYN_BLOCK    4096 /* samples generated and written at a time */

/* Standard normal number for (key, a, b) (Box-Muller). */
static double normal_(uint64_t key, uint64_t a, uint64_t b)
{
    ddp_u32x4_t r = ddp_rand4(key, a, b);
    double u1 =
        ((double)(r.v[0] >> 5) * 67108864.0 + (double)(r.v[1] >> 6) + 1.0) / 9007199254740993.0;
    double u2 = ((double)(r.v[2] >> 5) * 67108864.0 + (double)(r.v[3] >> 6)) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

typedef struct syn {
    int classes, features, latent, targets; /* targets > 0: regression */
    uint64_t seed;
    double *mu;    /* [classes * SYN_CLUSTERS, latent] */
    double *a, *b; /* [features, latent], [features] */
    double *v, *u; /* [targets, latent] */
} syn_t;

static ddp_status_t syn_init_(syn_t *g)
{
    int L = g->latent, D = g->features, C = g->classes, K = g->targets;
    uint64_t kp = ddp_key(g->seed, DDP_STREAM_DATA, 0);
    size_t nmu = (size_t)(C > 0 ? C : 1) * SYN_CLUSTERS * (size_t)L;
    g->mu = ddp_malloc(nmu * sizeof *g->mu, "the generator");
    g->a = ddp_malloc((size_t)D * L * sizeof *g->a, "the generator");
    g->b = ddp_malloc((size_t)D * sizeof *g->b, "the generator");
    g->v = ddp_malloc((size_t)(K ? K : 1) * L * sizeof *g->v, "the generator");
    g->u = ddp_malloc((size_t)(K ? K : 1) * L * sizeof *g->u, "the generator");
    if (!g->mu || !g->a || !g->b || !g->v || !g->u) return DDP_ERR_NOMEM;
    for (size_t i = 0; i < nmu; i++) g->mu[i] = SYN_SPREAD * normal_(kp, i, 1);
    for (size_t i = 0; i < (size_t)D * L; i++) g->a[i] = SYN_GAIN * normal_(kp, i, 2) / sqrt(L);
    for (int j = 0; j < D; j++) g->b[j] = 0.5 * normal_(kp, (uint64_t)j, 3);
    for (size_t i = 0; i < (size_t)K * L; i++) {
        g->v[i] = normal_(kp, i, 4);
        g->u[i] = normal_(kp, i, 5) / sqrt(L);
    }
    return DDP_OK;
}

static void syn_free_(syn_t *g)
{
    free(g->mu);
    free(g->a);
    free(g->b);
    free(g->v);
    free(g->u);
}

/* Sample i of split `sp` (0 train, 1 val): x [features], and label or targets. */
static void syn_sample_(const syn_t *g, int sp, uint64_t i, float *x, int32_t *label,
                        float *targets)
{
    int L = g->latent;
    uint64_t ks = ddp_key(g->seed, DDP_STREAM_DATA, 1 + (uint64_t)sp);
    double z[SYN_LATENT];
    if (g->targets == 0) {
        ddp_u32x4_t r = ddp_rand4(ks, i, 0);
        int y = (int)(((uint64_t)r.v[0] * (uint64_t)g->classes) >> 32);
        int m = (int)(((uint64_t)r.v[1] * SYN_CLUSTERS) >> 32);
        const double *mu = g->mu + ((size_t)y * SYN_CLUSTERS + (size_t)m) * (size_t)L;
        for (int l = 0; l < L; l++) z[l] = mu[l] + normal_(ks, i, 1 + (uint64_t)l);
        *label = y;
    } else {
        for (int l = 0; l < L; l++) z[l] = normal_(ks, i, 1 + (uint64_t)l);
        for (int k = 0; k < g->targets; k++) {
            double lin = 0, arg = 0;
            for (int l = 0; l < L; l++) {
                lin += g->v[(size_t)k * L + l] * z[l];
                arg += g->u[(size_t)k * L + l] * z[l];
            }
            targets[k] = (float)(lin / sqrt(L) + sin(2.0 * arg) +
                                 0.05 * normal_(ks, i, 1000000 + (uint64_t)k));
        }
    }
    for (int j = 0; j < g->features; j++) {
        double h = g->b[j];
        for (int l = 0; l < L; l++) h += g->a[(size_t)j * L + l] * z[l];
        x[j] = (float)(tanh(h) + SYN_NOISE * normal_(ks, i, 1 + (uint64_t)L + (uint64_t)j));
    }
}

/* Generate and write one split; train statistics are accumulated in st. */
static ddp_status_t syn_split_(const syn_t *g, hid_t file, int sp, int64_t n, prep_stats_t *st,
                               hid_t *xds)
{
    const char *split = sp ? "val" : "train";
    char xn[32], yn[32];
    snprintf(xn, sizeof xn, "/%s/x", split);
    snprintf(yn, sizeof yn, "/%s/y", split);
    int D = g->features, K = g->targets;
    hsize_t xd[2] = {(hsize_t)n, (hsize_t)D}, yd[2] = {(hsize_t)n, (hsize_t)K};
    prep_ds_t wx, wy;
    DDP_TRY(prep_ds_create(&wx, file, xn, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd));
    ddp_status_t s = K ? prep_ds_create(&wy, file, yn, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, yd)
                       : prep_ds_create(&wy, file, yn, H5T_STD_I32LE, H5T_NATIVE_INT32, 1, yd);
    if (s != DDP_OK) {
        prep_ds_close(&wx);
        return s;
    }
    float *x = ddp_malloc((size_t)SYN_BLOCK * D * sizeof *x, "generated samples");
    int32_t *lab = ddp_malloc((size_t)SYN_BLOCK * sizeof *lab, "generated labels");
    float *tg = ddp_malloc((size_t)SYN_BLOCK * (K ? K : 1) * sizeof *tg, "generated targets");
    if (!x || !lab || !tg) s = DDP_ERR_NOMEM;
    for (int64_t off = 0; off < n && s == DDP_OK; off += SYN_BLOCK) {
        int64_t cnt = n - off < SYN_BLOCK ? n - off : SYN_BLOCK;
        for (int64_t i = 0; i < cnt; i++)
            syn_sample_(g, sp, (uint64_t)(off + i), x + (size_t)i * D, lab + i, tg + (size_t)i * K);
        if (st) prep_stats_add_f32(st, x, (size_t)cnt);
        s = prep_ds_append(&wx, x, (hsize_t)cnt);
        if (s == DDP_OK)
            s = prep_ds_append(&wy, K ? (const void *)tg : (const void *)lab, (hsize_t)cnt);
    }
    free(x);
    free(lab);
    free(tg);
    if (s == DDP_OK && !K) s = h5_attr_write_i64(wy.ds, "classes", g->classes);
    prep_ds_close(&wy);
    if (s != DDP_OK)
        prep_ds_close(&wx);
    else
        *xds = wx.ds; /* the caller writes the statistics and closes it */
    return s;
}

ddp_status_t prep_synthetic(int argc, char **argv)
{
    int64_t classes = 0, features = 0, samples = 0, val = 0, seed = 1, targets = 0;
    const char *out = NULL, *v;
    ddp_status_t s = DDP_OK;
    for (int i = 1; i < argc && s == DDP_OK; i++) {
        if ((v = prep_opt(argc, argv, &i, "--classes", &s)))
            s = prep_int("--classes", v, 2, 1000000, &classes);
        else if ((v = prep_opt(argc, argv, &i, "--features", &s)))
            s = prep_int("--features", v, 1, 1 << 20, &features);
        else if ((v = prep_opt(argc, argv, &i, "--samples", &s)))
            s = prep_int("--samples", v, 1, INT64_C(1) << 40, &samples);
        else if ((v = prep_opt(argc, argv, &i, "--val", &s)))
            s = prep_int("--val", v, 0, INT64_C(1) << 40, &val);
        else if ((v = prep_opt(argc, argv, &i, "--seed", &s)))
            s = prep_int("--seed", v, 0, INT64_MAX, &seed);
        else if ((v = prep_opt(argc, argv, &i, "--regression", &s)))
            s = prep_int("--regression", v, 1, 4096, &targets);
        else if ((v = prep_opt(argc, argv, &i, "-o", &s)) ||
                 (s == DDP_OK && (v = prep_opt(argc, argv, &i, "--output", &s))))
            out = v;
        else if (s == DDP_OK)
            s = ddp_fail(DDP_ERR_USAGE,
                         "synthetic: unknown argument '%s'; see "
                         "ddptrain-prep --help",
                         argv[i]);
    }
    if (s != DDP_OK) return s;
    if (!out) return ddp_fail(DDP_ERR_USAGE, "synthetic: no output file (-o OUT.h5)");
    const pathclash_file_t files[] = {{"-o", out, PATHCLASH_OUT, NULL, 0}};
    DDP_TRY(pathclash_check(files, 1));
    if (!features) return ddp_fail(DDP_ERR_USAGE, "synthetic: --features D is required");
    if (!samples) return ddp_fail(DDP_ERR_USAGE, "synthetic: --samples N is required");
    if (!classes && !targets)
        return ddp_fail(DDP_ERR_USAGE, "synthetic: give --classes C (classification) or "
                                       "--regression K (K float targets)");
    if (classes && targets)
        return ddp_fail(DDP_ERR_USAGE, "synthetic: --classes and --regression exclude each "
                                       "other");

    syn_t g = {(int)classes, (int)features,  (int)(features < SYN_LATENT ? features : SYN_LATENT),
               (int)targets, (uint64_t)seed, NULL,
               NULL,         NULL,           NULL,
               NULL};
    s = syn_init_(&g);
    prep_stats_t st;
    if (s == DDP_OK)
        s = prep_stats_init(&st, (int)features, 1);
    else
        memset(&st, 0, sizeof st);
    h5_atomic_t a;
    if (s == DDP_OK)
        s = h5_atomic_create(&a, out);
    else
        a.file = H5I_INVALID_HID;
    if (s == DDP_OK) {
        hid_t tx = H5I_INVALID_HID, vx = H5I_INVALID_HID;
        s = syn_split_(&g, a.file, 0, samples, &st, &tx);
        if (s == DDP_OK && val > 0) s = syn_split_(&g, a.file, 1, val, NULL, &vx);
        /* both splits are normalised with the training statistics */
        if (s == DDP_OK) s = prep_stats_write(&st, tx, 0, 1.0);
        if (s == DDP_OK && vx >= 0) s = prep_stats_write(&st, vx, 0, 1.0);
        if (s == DDP_OK) s = h5_attr_write_i64(tx, "seed", seed);
        h5_lock();
        if (tx >= 0) H5Dclose(tx);
        if (vx >= 0) H5Dclose(vx);
        h5_unlock();
        if (s == DDP_OK)
            s = prep_finish(&a);
        else
            h5_atomic_abandon(&a);
    }
    prep_stats_free(&st);
    syn_free_(&g);
    return s;
}
