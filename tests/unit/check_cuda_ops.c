/* check_cuda_ops.c -- the CUDA backend's launchers (cuda/ddp_cuda.h) against
 * the CPU backend (compute_cpu_ops) on the same random inputs: upload, run
 * the launcher, download, compare with the CPU op's result.
 *
 * Built two ways (tests/Makefile.am): against the CPU emulation of the CUDA
 * runtime (libddpcuda_emu.a, builds without CUDA: the kernels' real code,
 * index math and reductions run on the CPU, with the host's libm and no
 * fused multiply-add), and against the real libddpcuda.a (CUDA builds; exit
 * 77, skipped, where no GPU is visible).  The tolerances therefore have two
 * columns: EMU where the emulation must give the CPU backend's bits, GPU
 * where the device's libm (erff, expf, log: CUDA's documented maximum
 * errors are 2, 2 and 1 ulp) and nvcc's contraction of a*b + c into one
 * fused multiply-add change the last bits.  ulp(r) is the spacing of floats
 * at |r|; "abs" an absolute floor for results that cancel to near zero.
 *
 *   op              EMU            GPU             why
 *   add             bits           bits, NaN       one addition (the device's NaNs
 *                                  for NaN         carry no payload)
 *   relu fwd/bwd    bits           bits            a compare and a select
 *   dropout f/b     bits           bits            rng.h's Philox on both; one multiply
 *   scale           bits           bits            one multiply
 *   to/from_half    bits           bits            half.h on both: integer ops and exact scalings
 *   all_finite      equal          equal           a predicate
 *   mse dpred       bits           bits            one subtract, one multiply
 *   gelu fwd        bits           8 ulp + 1e-6    erff 2 ulp; 1 + erf cancels for x << 0
 *   gelu bwd        bits           8 ulp + 1e-6|dy| erff, expf
 *   xent dlogits    bits           8 ulp + 1e-6 g  the CPU's terms expf(z - max), summed
 *                                                  in double in another order (1/sum
 *                                                  rounds to the same float); expf 2 ulp
 *                                                  of p <= 1, g = |grad_scale|
 *   xent acc[0]     1e-12 rel      1e-6 rel + 1e-6 n   rows and each row's sums in another
 *                                                  order (double); device expf/log per row
 *   xent acc[1]     equal          equal           the CPU's first-argmax rule per row
 *   mse acc[0]      1e-12 rel      1e-12 rel       double sums in another order
 *   sumsq           1e-12 rel      1e-12 rel       exact double products, another order
 *   sgd p, buf      bits           16 ulp + 1e-7   same operation order (float4 or one
 *                                                  float at a time); FMA contraction
 *   adamw p         bits           16 ulp + 1e-8   same order, constants from the same host
 *   adamw m, v      bits           16 ulp + 1e-7   code in double; FMA contraction
 * (after each of 5 optimizer steps: the errors of the GPU column compound
 * at most linearly over the steps, well inside 16 ulp).  The layers:
 *   linear, conv    2(K+1)u S + 2 ulp, both    K products per output summed in another
 *   (y, dx, dw, db)                            order (cuBLAS or its emulation's blocking);
 *                                              u = 2^-24, S = sum |terms| (the CPU op on
 *                                              |inputs|); TF32 or a wrong term fails it
 *   maxpool         bits           bits        compares; dx the CPU's additions, its order
 *                                              (with -inf padding too)
 *   avgpool y, dx   bits           4k^2 ulp + 1e-6   the CPU's additions; FMA
 *   gap y           2 ulp + 1e-15 hw S, both   a double sum in another order
 *   gap dx          bits           2 ulp       one multiply
 *   bn_stats,       2 N 2^-53 S, both          double sums of the same terms in another
 *   bn_bwd_stats                               order (N = n hw); dgamma, dbeta: their
 *                                              float roundings, 2 ulp
 *   bn_finalize,    bits           1 ulp       double arithmetic rounded once to float
 *   eval_params                                (from the CPU's stats)
 *   bn_fwd          bits           4 ulp + 1e-6   x a + b per element: FMA
 *   bn_bwd_data     bits           8 ulp + 1e-5   A dy + B (x - mean) + C: FMA
 *
 * Sizes: 0 (nothing written, acc unchanged, beta = 0 still clears
 * gradients), sizes that do not fill a block (1, 7, 255, 257) and sizes
 * beyond one grid-stride pass (more than ddp_blocks_for's cap of 4096
 * blocks x 256 threads elements, rows or dropout groups), so the
 * grid-stride loops take a second turn.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute.h"
#include "ddp_cuda.h"
#include "half.h"
#include "rng.h"
#include "test_rand.h"
#include "tests.h"

#ifdef CHECK_CUDA_EMU
#define EMU 1
void ddp_emu_reload_env(void);         /* the emulation: re-read its environment (DDP_EMU_FAIL) */
int ddp_emu_cudnn_last_algo(int pass); /* cuDNN's last algorithm: fwd, bwd data, bwd filter */
#else
#define EMU 0
#endif

/* More elements than one grid-stride pass covers (4096 blocks x 256). */
#define PASS  ((size_t)4096 * 256)
#define LARGE (PASS + 333)

static const compute_ops_t *C = &compute_cpu_ops;

/* ---- helpers ---------------------------------------------------------- */

#define CU(call) ck_assert_msg((call) == 0, "%s failed: %s", #call, ddp_cuda_last_error())

static void *hnew_(size_t bytes)
{
    void *p = calloc(bytes ? bytes : 1, 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

static float *fdup_(const float *a, size_t n)
{
    float *b = hnew_(n * sizeof *b);
    memcpy(b, a, n * sizeof *b);
    return b;
}

/* device copy of host memory h, or zeros when h is NULL (at least 16
 * bytes, so n == 0 has a pointer) */
static void *dput_(const void *h, size_t bytes)
{
    void *d = NULL;
    CU(ddp_cuda_malloc(&d, bytes < 16 ? 16 : bytes));
    if (h && bytes) CU(ddp_cuda_upload(d, h, bytes));
    return d;
}

static void dget_(void *h, const void *d, size_t bytes)
{
    if (bytes) CU(ddp_cuda_download(h, d, bytes));
}

static void dfree_(void *d)
{
    CU(ddp_cuda_free(d));
}

/* the same bits, element by element (NaN payloads included), as `ref`
 * computed by `by` */
static void same_bits_by_(const char *what, const void *got, const void *ref, size_t n,
                          size_t elem, const char *by)
{
    const unsigned char *g = got, *r = ref;
    for (size_t i = 0; i < n; i++)
        if (memcmp(g + i * elem, r + i * elem, elem)) {
            uint32_t a = 0, b = 0;
            memcpy(&a, g + i * elem, elem < 4 ? elem : 4);
            memcpy(&b, r + i * elem, elem < 4 ? elem : 4);
            ck_abort_msg("%s: element %zu of %zu: 0x%08x, %s 0x%08x", what, i, n, a, by, b);
        }
}

/* same_bits_by_ of floats (elem 4) or doubles (8), where a NaN matches any
 * NaN: two ways of computing with NaN operands (a NaN input and the NaN
 * statistics of its channel) may return either operand's NaN, whose sign
 * bit the host's x86 code keeps and a GPU's canonical NaN does not */
static void same_values_by_(const char *what, const void *got, const void *ref, size_t n,
                            size_t elem, const char *by)
{
    const unsigned char *g = got, *r = ref;
    for (size_t i = 0; i < n; i++) {
        double a, b;
        if (elem == 4) {
            float fa, fb;
            memcpy(&fa, g + i * 4, 4), memcpy(&fb, r + i * 4, 4);
            a = fa, b = fb;
        } else {
            memcpy(&a, g + i * 8, 8), memcpy(&b, r + i * 8, 8);
        }
        if (!(isnan(a) && isnan(b))) same_bits_by_(what, g + i * elem, r + i * elem, 1, elem, by);
    }
}

static void same_bits_(const char *what, const void *got, const void *ref, size_t n, size_t elem)
{
    same_bits_by_(what, got, ref, n, elem, "the CPU backend");
}

/* n values of v rounded to bf16, as bf16 and widened back to fp32 */
static uint16_t *bf16_of_(const float *v, size_t n, float **wide)
{
    uint16_t *h = hnew_(n * 2);
    *wide = hnew_(n * 4);
    for (size_t i = 0; i < n; i++) {
        h[i] = ddp_f32_to_bf16(v[i]);
        (*wide)[i] = ddp_bf16_to_f32(h[i]);
    }
    return h;
}

static double ulp_(float r)
{
    float a = fabsf(r);
    return (double)nextafterf(a, INFINITY) - a;
}

/* |got - ref| <= nulp ulp(ref) + abs_tol everywhere (the same NaN/Inf where
 * ref is not finite); bits when EMU and exact_on_emu */
static void close_(const char *what, const float *got, const float *ref, size_t n, double nulp,
                   double abs_tol, int exact_on_emu)
{
    if (EMU && exact_on_emu) {
        same_bits_(what, got, ref, n, sizeof *got);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ref[i])) {
            ck_assert_msg(isnan(ref[i]) ? isnan(got[i]) : got[i] == ref[i],
                          "%s: element %zu: %g, the CPU backend %g", what, i, got[i], ref[i]);
            continue;
        }
        double d = fabs((double)got[i] - ref[i]);
        ck_assert_msg(d <= nulp * ulp_(ref[i]) + abs_tol,
                      "%s: element %zu of %zu: %.9g, the CPU backend %.9g (%.3g ulp)", what, i, n,
                      got[i], ref[i], d / ulp_(ref[i]));
    }
}

static void rel_close_(const char *what, double got, double ref, double rel, double abs_tol)
{
    ck_assert_msg(fabs(got - ref) <= rel * fabs(ref) + abs_tol,
                  "%s: %.17g, the CPU backend %.17g (rel %.3g)", what, got, ref,
                  fabs(got - ref) / fmax(fabs(ref), 1e-300));
}

/* ---- elementwise ------------------------------------------------------ */

/* x with NaN, +-Inf, +-0 and negatives sprinkled in */
static float *special_vec_(size_t n)
{
    float *x = test_fvec(n, 4.0f);
    const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-42f, -1e-42f};
    for (size_t i = 0; i < n; i += 97) x[i] = sp[(i / 97) % 8];
    return x;
}

START_TEST(relu_bits)
{
    const size_t sizes[] = {0, 1, 257, LARGE};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s];
        test_seed(10 + s);
        float *x = special_vec_(n), *dy = test_fvec(n, 1.0f);
        float *y = hnew_(n * 4), *dx = hnew_(n * 4), *gy = hnew_(n * 4), *gdx = hnew_(n * 4);
        C->relu_fwd(n, x, y);
        C->relu_bwd(n, x, dy, dx, NULL);
        float *dxd = dput_(x, n * 4), *ddy = dput_(dy, n * 4);
        float *dyd = dput_(NULL, n * 4), *ddx = dput_(NULL, n * 4);
        const float sentinel[4] = {42.0f, 42.0f, 42.0f, 42.0f};
        if (n == 0) { /* must stay as they are */
            CU(ddp_cuda_upload(dyd, sentinel, sizeof sentinel));
            CU(ddp_cuda_upload(ddx, sentinel, sizeof sentinel));
        }
        CU(ddp_cuda_relu_fwd(n, dxd, dyd));
        CU(ddp_cuda_relu_bwd(n, dxd, ddy, ddx, NULL));
        dget_(gy, dyd, n * 4);
        dget_(gdx, ddx, n * 4);
        same_bits_("relu_fwd", gy, y, n, 4);
        same_bits_("relu_bwd", gdx, dx, n, 4);
        /* in place: y == x, dx == dy */
        CU(ddp_cuda_relu_bwd(n, dxd, ddy, ddy, NULL));
        CU(ddp_cuda_relu_fwd(n, dxd, dxd));
        dget_(gy, dxd, n * 4);
        dget_(gdx, ddy, n * 4);
        same_bits_("relu_fwd in place", gy, y, n, 4);
        same_bits_("relu_bwd in place", gdx, dx, n, 4);
        if (n > 0) { /* with a second gradient summed in the mask, written over it */
            float *dy2 = test_fvec(n, 1.0f), *ddy2 = dput_(dy2, n * 4);
            CU(ddp_cuda_upload(ddy, dy, n * 4));
            CU(ddp_cuda_upload(dxd, x, n * 4)); /* relu_fwd above ran in place */
            C->relu_bwd(n, x, dy, dx, dy2);
            CU(ddp_cuda_relu_bwd(n, dxd, ddy, ddy2, ddy2));
            dget_(gdx, ddy2, n * 4);
            same_bits_("relu_bwd of two gradients", gdx, dx, n, 4);
            dfree_(ddy2), free(dy2);
        }
        if (n == 0) { /* nothing written */
            float probe[4];
            dget_(probe, dyd, sizeof probe);
            ck_assert(memcmp(probe, sentinel, sizeof probe) == 0);
            dget_(probe, ddx, sizeof probe);
            ck_assert(memcmp(probe, sentinel, sizeof probe) == 0);
        }
        dfree_(dxd), dfree_(ddy), dfree_(dyd), dfree_(ddx);
        free(x), free(dy), free(y), free(dx), free(gy), free(gdx);
    }
}
END_TEST

START_TEST(add_bits)
{
    const size_t sizes[] = {0, 1, 257, LARGE};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s];
        test_seed(15 + s);
        float *a = special_vec_(n), *b = test_fvec(n, 4.0f);
        float *y = hnew_(n * 4), *gy = hnew_(n * 4);
        C->add(n, a, b, y, 1);
        float *ad = dput_(a, n * 4), *bd = dput_(b, n * 4), *yd = dput_(NULL, n * 4);
        CU(ddp_cuda_add(n, ad, bd, yd, 1)); /* a fused ReLU */
        dget_(gy, yd, n * 4);
        close_("add relu", gy, y, n, 0, 0, 1);
        C->add(n, a, b, y, 0);
        const float sentinel[4] = {42.0f, 42.0f, 42.0f, 42.0f};
        if (n == 0) CU(ddp_cuda_upload(yd, sentinel, sizeof sentinel)); /* must stay */
        CU(ddp_cuda_add(n, ad, bd, yd, 0));
        dget_(gy, yd, n * 4);
        close_("add", gy, y, n, 0, 0, 1);
        if (n == 0) {
            float probe[4];
            dget_(probe, yd, sizeof probe);
            ck_assert(memcmp(probe, sentinel, sizeof probe) == 0);
        }
        /* in place: y == b, then y == a */
        CU(ddp_cuda_add(n, ad, bd, bd, 0));
        dget_(gy, bd, n * 4);
        close_("add in place (y == b)", gy, y, n, 0, 0, 1);
        CU(ddp_cuda_upload(bd, b, n * 4));
        CU(ddp_cuda_add(n, ad, bd, ad, 0));
        dget_(gy, ad, n * 4);
        close_("add in place (y == a)", gy, y, n, 0, 0, 1);
        dfree_(ad), dfree_(bd), dfree_(yd);
        free(a), free(b), free(y), free(gy);
    }
}
END_TEST

START_TEST(gelu_matches)
{
    const size_t sizes[] = {0, 7, 255, LARGE};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s];
        test_seed(20 + s);
        float *x = test_fvec(n, 8.0f), *dy = test_fvec(n, 1.0f);
        float *y = hnew_(n * 4), *dx = hnew_(n * 4), *gy = hnew_(n * 4), *gdx = hnew_(n * 4);
        C->gelu_fwd(n, x, y);
        C->gelu_bwd(n, x, dy, dx);
        float *dxd = dput_(x, n * 4), *ddy = dput_(dy, n * 4);
        float *dyd = dput_(NULL, n * 4), *ddx = dput_(NULL, n * 4);
        CU(ddp_cuda_gelu_fwd(n, dxd, dyd));
        CU(ddp_cuda_gelu_bwd(n, dxd, ddy, ddx));
        dget_(gy, dyd, n * 4);
        dget_(gdx, ddx, n * 4);
        close_("gelu_fwd", gy, y, n, 8, 1e-6 * 8, 1);
        close_("gelu_bwd", gdx, dx, n, 8, 1e-6, 1);
        dfree_(dxd), dfree_(ddy), dfree_(dyd), dfree_(ddx);
        free(x), free(dy), free(y), free(dx), free(gy), free(gdx);
    }
}
END_TEST

static void dropout_case_(int n, size_t features, float p, int in_place)
{
    const size_t count = (size_t)n * features;
    const uint64_t seed = 1234567, step = 77;
    const uint32_t layer = 3;
    int64_t *idx = hnew_((size_t)(n > 0 ? n : 1) * sizeof *idx);
    for (int i = 0; i < n; i++) idx[i] = 1000000000000ll + 3 * i + (i % 5) * 100003;
    float *x = test_fvec(count, 2.0f), *dy = test_fvec(count, 1.0f);
    for (size_t i = 0; i < count; i++) /* nonzero: kept <=> y != 0 */
        if (x[i] == 0.0f) x[i] = 0.5f;
    float *y = hnew_(count * 4), *dx = hnew_(count * 4), *gy = hnew_(count * 4);
    float *gdx = hnew_(count * 4);
    C->dropout_fwd(n, features, x, y, p, seed, step, layer, idx);
    C->dropout_bwd(n, features, dy, dx, p, seed, step, layer, idx);
    int64_t *didx = dput_(idx, (size_t)(n > 0 ? n : 0) * sizeof *idx);
    float *dxd = dput_(x, count * 4), *ddy = dput_(dy, count * 4);
    float *dyd = in_place ? dxd : dput_(NULL, count * 4);
    float *ddx = in_place ? ddy : dput_(NULL, count * 4);
    CU(ddp_cuda_dropout_fwd(n, features, dxd, dyd, p, seed, step, layer, didx));
    CU(ddp_cuda_dropout_bwd(n, features, ddy, ddx, p, seed, step, layer, didx));
    dget_(gy, dyd, count * 4);
    dget_(gdx, ddx, count * 4);
    char what[96];
    snprintf(what, sizeof what, "dropout_fwd n=%d f=%zu p=%g%s", n, features, p,
             in_place ? " in place" : "");
    same_bits_(what, gy, y, count, 4);
    snprintf(what, sizeof what, "dropout_bwd n=%d f=%zu p=%g%s", n, features, p,
             in_place ? " in place" : "");
    same_bits_(what, gdx, dx, count, 4);
    /* the mask is rng.h's, element by element (every 7th on big cases) */
    size_t kept = 0, seen = 0;
    const size_t stride = count > 100000 ? 7 : 1;
    for (size_t e = 0; e < count; e += stride, seen++) {
        size_t i = e / features, j = e % features;
        int keep = ddp_dropout_keep(seed, step, layer, idx[i], j, p);
        kept += keep;
        ck_assert_msg(keep == (gy[e] != 0.0f), "dropout mask at row %zu, element %zu: %s", i, j,
                      keep ? "dropped, rng.h keeps it" : "kept, rng.h drops it");
    }
    if (seen > 10000) { /* and about 1 - p of them */
        double frac = (double)kept / seen;
        ck_assert_msg(fabs(frac - (1.0 - p)) < 0.01, "kept %.4f, expected about %.4f", frac,
                      1.0 - p);
    }
    dfree_(didx), dfree_(dxd), dfree_(ddy);
    if (!in_place) dfree_(dyd), dfree_(ddx);
    free(idx), free(x), free(dy), free(y), free(dx), free(gy), free(gdx);
}

START_TEST(dropout_bits)
{
    dropout_case_(0, 10, 0.5f, 0);
    dropout_case_(1, 1, 0.5f, 0);
    dropout_case_(5, 7, 0.3f, 0);
    dropout_case_(17, 13, 0.9f, 0);
    dropout_case_(6, 5, 0.5f, 1);
    dropout_case_(4, 10, 0.0f, 0); /* all kept, scale 1 */
    dropout_case_(4, 10, 0.0f, 1);
    dropout_case_(4, 10, 1.0f, 0); /* nothing kept */
    /* 600 rows of 1751 groups of four: more groups than one grid pass */
    dropout_case_(600, 7001, 0.25f, 0);
}
END_TEST

START_TEST(scale_bits)
{
    const size_t sizes[] = {0, 5, 256, LARGE};
    const float alphas[] = {0.37f, -3.0f, 0.0f};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
        for (int a = 0; a < 3; a++) {
            const size_t n = sizes[s];
            test_seed(40 + s);
            float *x = special_vec_(n), *ref = fdup_(x, n), *got = hnew_(n * 4 + 16);
            C->scale(n, ref, alphas[a]);
            float *d = dput_(x, n * 4);
            CU(ddp_cuda_scale(n, d, alphas[a]));
            dget_(got, d, n * 4);
            same_bits_("scale", got, ref, n, 4);
            dfree_(d);
            free(x), free(ref), free(got);
        }
}
END_TEST

static uint32_t f2u_(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float u2f_(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

START_TEST(half_casts_bits)
{
    /* specials first, then random bit patterns over the whole float range */
    const uint32_t sp[] = {
        0x00000000, 0x80000000,
        0x7f800000, 0xff800000, /* +-0, +-Inf */
        0x7fc00000, 0xffc00001,
        0x7f800001, 0x7fbfffff, /* qNaN, -NaN payload, sNaN */
        0x7f7fffff, 0xff7fffff,
        0x00000001, 0x807fffff, /* max, float subnormals */
        0x477fe000, 0x477fefff,
        0x477ff000, 0x47800000, /* 65504, just below/at fp16 overflow */
        0x33800000, 0x33000000,
        0x33400000, 0x33c00000, /* 2^-24, 2^-25 (tie), 1.5*2^-25, 1.5*2^-24 */
        0x38800000, 0x387fffff,
        0x38000000, 0x387fe000, /* 2^-14, below, fp16 subnormals */
        0x3f808000, 0x3f818000,
        0x3f800001, 0x3f80ffff, /* bf16 ties to even, near ties */
        0x3f801000, 0x3f803000,
        0xbf801000, 0x3c003000, /* fp16 ties to even */
    };
    const size_t nsp = sizeof sp / sizeof *sp;
    const size_t sizes[] = {0, nsp, LARGE};
    for (size_t s = 0; s < 3; s++) {
        const size_t n = sizes[s];
        test_seed(50 + s);
        float *x = hnew_(n * 4);
        for (size_t i = 0; i < n; i++) x[i] = u2f_(i < nsp ? sp[i] : (uint32_t)test_bits());
        for (int bf16 = 0; bf16 < 2; bf16++) {
            uint16_t *ref = hnew_(n * 2), *got = hnew_(n * 2 + 16);
            C->to_half(n, x, ref, bf16);
            float *dx = dput_(x, n * 4);
            uint16_t *dh = dput_(NULL, n * 2);
            CU(ddp_cuda_to_half(n, dx, dh, bf16));
            dget_(got, dh, n * 2);
            same_bits_(bf16 ? "to_half bf16" : "to_half fp16", got, ref, n, 2);
            dfree_(dx), dfree_(dh);
            free(ref), free(got);
        }
        free(x);
    }
    /* a few by hand, so both sides being wrong the same way shows */
    uint16_t h[8];
    float xs[8] = {65504.0f, 65520.0f,         u2f_(0x33000000),  u2f_(0x33400000),
                   INFINITY, u2f_(0x7f800001), 1.0f + 1.0f / 256, -0.0f};
    float *dx = dput_(xs, sizeof xs);
    uint16_t *dh = dput_(NULL, sizeof h);
    CU(ddp_cuda_to_half(8, dx, dh, 0));
    dget_(h, dh, sizeof h);
    const uint16_t want16[8] = {0x7bff, 0x7c00, 0x0000, 0x0001, 0x7c00, 0x7e00, 0x3c04, 0x8000};
    for (int i = 0; i < 8; i++) ck_assert_uint_eq(h[i], want16[i]);
    CU(ddp_cuda_to_half(8, dx, dh, 1));
    dget_(h, dh, sizeof h);
    const uint16_t wantbf[8] = {0x4780, 0x4780, 0x3300, 0x3340, 0x7f80, 0x7fc0, 0x3f80, 0x8000};
    for (int i = 0; i < 8; i++) ck_assert_uint_eq(h[i], wantbf[i]);
    dfree_(dx), dfree_(dh);

    /* from_half: every 16-bit pattern, both formats (and n == 0) */
    const size_t n = 65536;
    uint16_t *all = hnew_(n * 2);
    for (size_t i = 0; i < n; i++) all[i] = (uint16_t)i;
    uint16_t *dall = dput_(all, n * 2);
    for (int bf16 = 0; bf16 < 2; bf16++) {
        float *ref = hnew_(n * 4), *got = hnew_(n * 4);
        C->from_half(n, all, ref, bf16);
        float *dxo = dput_(NULL, n * 4);
        CU(ddp_cuda_from_half(n, dall, dxo, bf16));
        CU(ddp_cuda_from_half(0, dall, dxo, bf16)); /* writes nothing */
        dget_(got, dxo, n * 4);
        same_bits_(bf16 ? "from_half bf16" : "from_half fp16", got, ref, n, 4);
        ck_assert_uint_eq(f2u_(got[0x3c00]), bf16 ? 0x3c000000u : 0x3f800000u);
        dfree_(dxo);
        free(ref), free(got);
    }
    dfree_(dall);
    free(all);
}
END_TEST

/* ---- reductions ------------------------------------------------------- */

START_TEST(sumsq_deterministic)
{
    const size_t sizes[] = {0, 1, 255, 256, PASS + 1, 3 * PASS + 5};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        const size_t n = sizes[s];
        test_seed(60 + s);
        float *x = test_fvec(n, 3.0f);
        for (size_t i = 0; i < n; i += 1001) x[i] *= 1e4f; /* a wide range */
        double ref = C->sumsq(n, x), got = -1, again = -2;
        float *d = dput_(x, n * 4);
        CU(ddp_cuda_sumsq(n, d, &got));
        CU(ddp_cuda_sumsq(n, d, &again));
        rel_close_("sumsq", got, ref, 1e-12, 0);
        ck_assert_msg(memcmp(&got, &again, sizeof got) == 0,
                      "sumsq not deterministic: %.17g, %.17g", got, again);
        if (n == 0) ck_assert(got == 0.0);
        dfree_(d);
        free(x);
    }
}
END_TEST

/* Many sums of squares with one wait (the gradient norm's pieces,
 * ddp_cuda_sumsq_many): each the bits of ddp_cuda_sumsq of its piece, a
 * piece of 0 values 0, in any order of sizes; then more pieces than
 * before (its device array grows). */
START_TEST(sumsq_many_bits)
{
    test_seed(66);
    const size_t sizes[] = {PASS + 1, 0, 1, 3 * PASS + 5, 256, 0, 255};
    enum { N = sizeof sizes / sizeof *sizes };
    float *h[N], *d[N];
    double want[N], got[2 * N];
    for (int i = 0; i < N; i++) {
        h[i] = test_fvec(sizes[i], 3.0f);
        d[i] = dput_(h[i], sizes[i] * 4);
        CU(ddp_cuda_sumsq(sizes[i], d[i], &want[i]));
    }
    for (int round = 0; round < 2; round++) { /* N pieces, then 2N (the first N twice) */
        const int n = round ? 2 * N : N;
        const float *x[2 * N];
        size_t count[2 * N];
        for (int i = 0; i < n; i++) x[i] = d[i % N], count[i] = sizes[i % N];
        for (int i = 0; i < n; i++) got[i] = -1;
        CU(ddp_cuda_sumsq_many(n, x, count, got));
        for (int i = 0; i < n; i++)
            ck_assert_msg(memcmp(&got[i], &want[i % N], sizeof got[i]) == 0,
                          "sumsq_many piece %d of %d (%zu values): %.17g, sumsq %.17g", i, n,
                          count[i], got[i], want[i % N]);
    }
    for (int i = 0; i < N; i++) dfree_(d[i]), free(h[i]);
}
END_TEST

START_TEST(all_finite_matches)
{
    const size_t n = 2 * PASS + 77;
    test_seed(70);
    float *x = test_fvec(n, 1e30f);
    float *d = dput_(x, n * 4);
    int got = -1;
    CU(ddp_cuda_all_finite(0, d, &got));
    ck_assert_int_eq(got, 1);
    CU(ddp_cuda_all_finite(n, d, &got));
    ck_assert_int_eq(got, 1);
    ck_assert_int_eq(C->all_finite(n, x), 1);
    /* one bad value at the start, in the middle, in the last grid pass, last */
    const size_t where[] = {0, 1, 12345, PASS + 3, n - 1};
    const float bad[] = {NAN, INFINITY, -INFINITY, -NAN};
    for (size_t w = 0; w < sizeof where / sizeof *where; w++)
        for (int b = 0; b < 4; b++) {
            float keep = x[where[w]];
            x[where[w]] = bad[b];
            CU(ddp_cuda_upload(d + where[w], &bad[b], 4));
            CU(ddp_cuda_all_finite(n, d, &got));
            ck_assert_msg(got == 0 && C->all_finite(n, x) == 0, "%g at %zu: all_finite says %d",
                          bad[b], where[w], got);
            /* a prefix without it is finite */
            CU(ddp_cuda_all_finite(where[w], d, &got));
            ck_assert_int_eq(got, 1);
            x[where[w]] = keep;
            CU(ddp_cuda_upload(d + where[w], &keep, 4));
        }
    /* finite extremes are finite */
    const float ext[] = {3.4028235e38f, -3.4028235e38f, 1e-45f, -0.0f};
    CU(ddp_cuda_upload(d, ext, sizeof ext));
    CU(ddp_cuda_all_finite(4, d, &got));
    ck_assert_int_eq(got, 1);
    dfree_(d);
    free(x);
}
END_TEST

/* ---- losses ----------------------------------------------------------- */

static void xent_case_(int n, int classes, float smoothing, int with_grad, int alias, int ties)
{
    const size_t count = (size_t)n * classes;
    const float grad_scale = n > 0 ? 1.0f / n : 1.0f;
    float *z = test_fvec(count, 5.0f);
    int32_t *y = hnew_((size_t)(n > 0 ? n : 1) * sizeof *y);
    for (int i = 0; i < n; i++) {
        y[i] = (int32_t)(test_bits() % (uint64_t)classes);
        if (i % 11 == 3) y[i] = -1; /* invalid labels: no loss, zero gradient */
        if (i % 13 == 5) y[i] = classes;
        if (ties && classes >= 4 && i % 3 != 2) { /* the max twice: the first one wins */
            float *r = z + (size_t)i * classes;
            r[1] = r[classes - 1] = 9.0f;
            y[i] = i % 3 == 0 ? 1 : classes - 1;
            if (classes >= 40 && i % 3 == 1) { /* the first max in a later lane than others */
                for (int j = 16; j < classes; j += 16) r[j] = 9.0f;
                r[1] = r[classes - 1] = 0.0f;
                r[5] = 9.0f;
                y[i] = 5;
            }
        }
        if (ties && i % 3 == 2) /* a row of equal logits: argmax 0 */
            for (int j = 0; j < classes; j++) z[(size_t)i * classes + j] = 0.25f;
    }
    double ref[2] = {1.5, 2.0}, got[2];
    float *dl = with_grad ? hnew_(count * 4) : NULL, *gdl = hnew_(count * 4);
    if (alias && with_grad) {
        memcpy(dl, z, count * 4);
        C->xent(n, classes, dl, y, smoothing, grad_scale, dl, ref);
    } else {
        C->xent(n, classes, z, y, smoothing, grad_scale, dl, ref);
    }
    float *dz = dput_(z, count * 4);
    int32_t *dy = dput_(y, (size_t)(n > 0 ? n : 0) * sizeof *y);
    double *dacc = dput_((double[2]){1.5, 2.0}, 2 * sizeof(double));
    float *ddl = !with_grad ? NULL : alias ? dz : dput_(NULL, count * 4);
    CU(ddp_cuda_xent(n, classes, dz, dy, smoothing, grad_scale, ddl, dacc));
    dget_(got, dacc, sizeof got);
    if (with_grad) dget_(gdl, ddl, count * 4);
    char what[96];
    snprintf(what, sizeof what, "xent n=%d C=%d eps=%g%s%s loss", n, classes, smoothing,
             with_grad ? "" : " dlogits NULL", alias ? " in place" : "");
    rel_close_(what, got[0], ref[0], EMU ? 1e-12 : 1e-6, EMU ? 0 : 1e-6 * n);
    snprintf(what, sizeof what, "xent n=%d C=%d hits", n, classes);
    ck_assert_msg(got[1] == ref[1], "%s: %.17g, the CPU backend %.17g", what, got[1], ref[1]);
    if (with_grad) {
        snprintf(what, sizeof what, "xent n=%d C=%d eps=%g%s dlogits", n, classes, smoothing,
                 alias ? " in place" : "");
        close_(what, gdl, dl, count, 8, 1e-6 * grad_scale, 1);
    }
    if (n == 0) ck_assert(got[0] == 1.5 && got[1] == 2.0);
    dfree_(dz), dfree_(dy), dfree_(dacc);
    if (with_grad && !alias) dfree_(ddl);
    free(z), free(y), free(dl), free(gdl);
}

START_TEST(xent_matches)
{
    test_seed(80);
    xent_case_(0, 10, 0.0f, 1, 0, 0);
    xent_case_(1, 1, 0.0f, 1, 0, 0);
    for (int grad = 0; grad < 2; grad++)
        for (int e = 0; e < 2; e++) {
            const float eps = e ? 0.1f : 0.0f;
            xent_case_(37, 10, eps, grad, 0, 1);
            xent_case_(300, 7, eps, grad, 0, 1); /* two blocks of rows */
            xent_case_(5, 1000, eps, grad, 0, 0); /* a warp per row, float4 */
            xent_case_(37, 8, eps, grad, 0, 1);   /* float4, ties across lanes */
            xent_case_(3, 1027, eps, grad, 0, 1); /* a block per row, floats */
            xent_case_(4, 4096, eps, grad, 0, 1); /* a block per row, float4 */
        }
    xent_case_(37, 10, 0.1f, 1, 1, 1); /* dlogits == logits */
    xent_case_(9, 2048, 0.1f, 1, 1, 1); /* in place, a block per row, float4 */
    /* more rows than one grid pass */
    xent_case_((int)PASS + 3, 2, 0.1f, 1, 0, 0);
}
END_TEST

static void mse_case_(int n, int k, int with_grad)
{
    const size_t count = (size_t)n * k;
    const float grad_scale = count ? 1.0f / (float)count : 1.0f;
    float *p = test_fvec(count, 2.0f), *t = test_fvec(count, 2.0f);
    float *dp = with_grad ? hnew_(count * 4) : NULL, *gdp = hnew_(count * 4);
    double ref[1] = {0.75}, got[1];
    C->mse(n, k, p, t, grad_scale, dp, ref);
    float *dpd = dput_(p, count * 4), *dtd = dput_(t, count * 4);
    double *dacc = dput_((double[1]){0.75}, sizeof(double));
    float *ddp = with_grad ? dput_(NULL, count * 4) : NULL;
    CU(ddp_cuda_mse(n, k, dpd, dtd, grad_scale, ddp, dacc));
    dget_(got, dacc, sizeof got);
    rel_close_("mse loss", got[0], ref[0], 1e-12, 0);
    if (with_grad) {
        dget_(gdp, ddp, count * 4);
        same_bits_("mse dpred", gdp, dp, count, 4);
        dfree_(ddp);
    }
    if (count == 0) ck_assert(got[0] == 0.75);
    dfree_(dpd), dfree_(dtd), dfree_(dacc);
    free(p), free(t), free(dp), free(gdp);
}

START_TEST(mse_matches)
{
    test_seed(90);
    mse_case_(0, 3, 1);
    mse_case_(1, 1, 1);
    mse_case_(7, 3, 1);
    mse_case_(7, 3, 0);
    mse_case_(1000, 1100, 1); /* more than one grid pass */
}
END_TEST

/* ---- optimizers: 5 steps, compared after each ---------------------------- */

/* The parameters at element `off` of their device array: off 1 is not
 * 16-byte aligned, so the kernels take their one-float path. */
static float *dput_off_(const float *h, size_t n, int off, float **base)
{
    *base = dput_(NULL, (n + (size_t)off) * 4);
    if (n) CU(ddp_cuda_upload(*base + off, h, n * 4));
    return *base + off;
}

static void sgd_case_(size_t n, float momentum, int nesterov, float wd, int with_buf, int off)
{
    const float lr = 0.1f;
    float *p = test_fvec(n, 1.0f), *buf = hnew_(n * 4), *gp = hnew_(n * 4), *gbuf = hnew_(n * 4);
    for (size_t i = 0; i < n; i++) buf[i] = NAN; /* the first step must not read it */
    float *dpb, *dp = dput_off_(p, n, off, &dpb), *dbuf = with_buf ? dput_(buf, n * 4) : NULL;
    for (int step = 1; step <= 5; step++) {
        float *g = test_fvec(n, 1.0f);
        float *dg = dput_(g, n * 4);
        C->sgd_step(n, p, g, with_buf ? buf : NULL, lr, momentum, nesterov, wd, step == 1);
        CU(ddp_cuda_sgd_step(n, dp, dg, dbuf, lr, momentum, nesterov, wd, step == 1));
        dget_(gp, dp, n * 4);
        char what[96];
        snprintf(what, sizeof what, "sgd n=%zu m=%g nesterov=%d wd=%g off %d step %d p", n,
                 momentum, nesterov, wd, off, step);
        close_(what, gp, p, n, 16, 1e-7, 1);
        if (with_buf && momentum != 0.0f) {
            dget_(gbuf, dbuf, n * 4);
            snprintf(what, sizeof what, "sgd n=%zu m=%g nesterov=%d step %d buf", n, momentum,
                     nesterov, step);
            close_(what, gbuf, buf, n, 16, 1e-7, 1);
        }
        dfree_(dg);
        free(g);
    }
    dfree_(dpb);
    if (dbuf) dfree_(dbuf);
    free(p), free(buf), free(gp), free(gbuf);
}

START_TEST(sgd_steps)
{
    test_seed(100);
    const size_t sizes[] = {0, 1001, LARGE};
    for (size_t s = 0; s < 3; s++)
        for (int off = 0; off < 2; off++) { /* float4s (and a tail), and one float at a time */
            sgd_case_(sizes[s], 0.0f, 0, 0.0f, 0, off);
            sgd_case_(sizes[s], 0.9f, 0, 1e-4f, 1, off);
            sgd_case_(sizes[s], 0.9f, 1, 5e-4f, 1, off);
        }
    sgd_case_(1001, 0.9f, 0, 1e-4f, 0, 0); /* momentum without a buffer: plain SGD */
    sgd_case_(1001, 0.0f, 0, 1e-2f, 1, 0); /* a buffer without momentum: untouched */
}
END_TEST

static void adamw_case_(size_t n, int64_t t0, int off)
{
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 1e-2f;
    float *p = test_fvec(n, 1.0f), *m = hnew_(n * 4), *v = hnew_(n * 4);
    float *gp = hnew_(n * 4), *gm = hnew_(n * 4), *gv = hnew_(n * 4);
    float *dpb, *dp = dput_off_(p, n, off, &dpb), *dm = dput_(NULL, n * 4),
                *dv = dput_(NULL, n * 4);
    for (int64_t t = t0; t < t0 + 5; t++) {
        float *g = test_fvec(n, t % 2 ? 1.0f : 0.01f);
        float *dg = dput_(g, n * 4);
        C->adamw_step(n, p, g, m, v, lr, b1, b2, eps, wd, t);
        CU(ddp_cuda_adamw_step(n, dp, dg, dm, dv, lr, b1, b2, eps, wd, t));
        dget_(gp, dp, n * 4);
        dget_(gm, dm, n * 4);
        dget_(gv, dv, n * 4);
        char what[64];
        snprintf(what, sizeof what, "adamw n=%zu off %d t=%lld p", n, off, (long long)t);
        close_(what, gp, p, n, 16, 1e-8, 1);
        snprintf(what, sizeof what, "adamw n=%zu t=%lld m", n, (long long)t);
        close_(what, gm, m, n, 16, 1e-7, 1);
        snprintf(what, sizeof what, "adamw n=%zu t=%lld v", n, (long long)t);
        close_(what, gv, v, n, 16, 1e-7, 1);
        dfree_(dg);
        free(g);
    }
    dfree_(dpb), dfree_(dm), dfree_(dv);
    free(p), free(m), free(v), free(gp), free(gm), free(gv);
}

START_TEST(adamw_steps)
{
    test_seed(110);
    for (int off = 0; off < 2; off++) { /* float4s (and a tail), and one float at a time */
        adamw_case_(0, 1, off);
        adamw_case_(1, 1, off);
        adamw_case_(1001, 1, off);
        adamw_case_(LARGE, 1, off);
    }
    adamw_case_(257, 0, 0); /* t = 0 counts as 1 */
    adamw_case_(257, 1000, 0);
}
END_TEST

/* ---- layers (linear.cu, conv.cu, pool.cu, bn.cu) ----------------------- */

/* A sum of K products computed in two orders differs by at most
 * 2 (K + 1) u sum |terms| (u = 2^-24; the products' own rounding
 * included), plus the final rounding of each side: the GEMM-based ops
 * (cuBLAS against OpenBLAS, other blockings) are held to that, with
 * sum |terms| from the CPU op on |inputs|. */
static void gemm_close_(const char *what, const float *got, const float *ref, const float *absref,
                        size_t n, size_t k)
{
    const double u = 1.0 / 16777216.0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - ref[i]);
        double tol = 2.0 * (k + 1) * u * absref[i] + 2 * ulp_(ref[i]);
        ck_assert_msg(d <= tol, "%s: element %zu of %zu: %.9g, the CPU backend %.9g (bound %.3g)",
                      what, i, n, got[i], ref[i], tol);
    }
}

static float *fabs_(const float *a, size_t n)
{
    float *b = fdup_(a, n);
    for (size_t i = 0; i < n; i++) b[i] = fabsf(b[i]);
    return b;
}

/* old gradients for the beta contract: beta = 0 must overwrite NaN */
static float *grad_old_(size_t n, float beta)
{
    float *g = test_fvec(n, 1.0f);
    if (beta == 0.0f)
        for (size_t i = 0; i < n; i++) g[i] = NAN;
    return g;
}

/* relu: a ReLU fused after the layer; its backward's mask is the CPU
 * backend's output on both sides (an output within the bound of 0 could
 * otherwise mask differently), the bounds those of the layer without it
 * (a ReLU and its mask only drop terms). */
static void linear_case_(int n, int in, int out, float beta, int with_dx, int relu)
{
    const size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
    float *x = test_fvec(nx, 1.0f), *w = test_fvec(nw, 0.5f), *b = test_fvec((size_t)out, 1.0f);
    float *dy = test_fvec(ny, 1.0f), *dw0 = grad_old_(nw, beta),
          *db0 = grad_old_((size_t)out, beta);
    float *y = hnew_(ny * 4), *dx = hnew_(nx * 4), *dw = fdup_(dw0, nw), *db = fdup_(db0, out);
    float *ws = hnew_(ny * 4);
    C->linear_fwd(n, in, out, x, w, b, y, relu);
    C->linear_bwd(n, in, out, x, w, dy, with_dx ? dx : NULL, dw, db, beta, relu ? y : NULL, ws);
    /* the bounds' sums of |terms| */
    float *ax = fabs_(x, nx), *aw = fabs_(w, nw), *ab = fabs_(b, out), *ady = fabs_(dy, ny);
    float *ay = hnew_(ny * 4), *adx = hnew_(nx * 4), *adw = fabs_(dw0, nw), *adb = fabs_(db0, out);
    C->linear_fwd(n, in, out, ax, aw, ab, ay, 0);
    C->linear_bwd(n, in, out, ax, aw, ady, adx, adw, adb, beta == 0.0f ? 0.0f : 1.0f, NULL, NULL);
    float *dxd = dput_(x, nx * 4), *dwd = dput_(w, nw * 4), *dbd = dput_(b, out * 4);
    float *dyd = dput_(dy, ny * 4), *yd = dput_(NULL, ny * 4), *dxo = dput_(NULL, nx * 4);
    float *dwo = dput_(dw0, nw * 4), *dbo = dput_(db0, out * 4);
    float *maskd = dput_(y, ny * 4), *wsd = dput_(NULL, ny * 4);
    CU(ddp_cuda_linear_fwd(n, in, out, dxd, dwd, dbd, yd, relu));
    CU(ddp_cuda_linear_bwd(n, in, out, dxd, dwd, dyd, with_dx ? dxo : NULL, dwo, dbo, beta,
                           relu ? maskd : NULL, wsd));
    float *gy = hnew_(ny * 4), *gdx = hnew_(nx * 4), *gdw = hnew_(nw * 4), *gdb = hnew_(out * 4);
    dget_(gy, yd, ny * 4);
    dget_(gdx, dxo, nx * 4);
    dget_(gdw, dwo, nw * 4);
    dget_(gdb, dbo, out * 4);
    char what[96];
    const char *r = relu ? "+relu" : "";
    snprintf(what, sizeof what, "linear%s n=%d %d->%d beta=%g y", r, n, in, out, beta);
    gemm_close_(what, gy, y, ay, ny, in);
    snprintf(what, sizeof what, "linear%s n=%d %d->%d beta=%g dw", r, n, in, out, beta);
    gemm_close_(what, gdw, dw, adw, nw, n);
    snprintf(what, sizeof what, "linear%s n=%d %d->%d beta=%g db", r, n, in, out, beta);
    gemm_close_(what, gdb, db, adb, out, n);
    if (with_dx) {
        snprintf(what, sizeof what, "linear%s n=%d %d->%d dx", r, n, in, out);
        gemm_close_(what, gdx, dx, adx, nx, out);
    }
    dfree_(dxd), dfree_(dwd), dfree_(dbd), dfree_(dyd), dfree_(yd), dfree_(dxo), dfree_(dwo),
        dfree_(dbo), dfree_(maskd), dfree_(wsd);
    float *all[] = {x,  w,  b,   dy, dw0, db0, y,   dx, dw,  db,  ax,  aw,
                    ab, ady, ay, adx, adw, adb, gy, gdx, gdw, gdb, ws};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
}

START_TEST(linear_matches)
{
    test_seed(120);
    for (int relu = 0; relu < 2; relu++) {
        linear_case_(0, 5, 3, 0.0f, 1, relu); /* dw = db = 0 */
        linear_case_(0, 5, 3, 1.0f, 1, relu); /* dw, db as they were */
        linear_case_(1, 1, 1, 0.0f, 1, relu);
        linear_case_(37, 29, 11, 0.0f, 1, relu);
        linear_case_(37, 29, 11, 1.0f, 0, relu);
        linear_case_(64, 300, 257, 1.0f, 1, relu);
        linear_case_(9, 0, 40, 1.0f, 1, relu); /* no inputs: the bias gradient still */
    }
}
END_TEST

/* The cost log's entries named `name` since recording began. */
/* Entries logged since the record started named `name` (prefix: whose
 * names begin with it). */
static int logged_by_(const char *name, int prefix)
{
    const ddp_cuda_cost_t *e;
    size_t count = ddp_cuda_cost_log(&e);
    int r = 0;
    for (size_t i = 0; i < count; i++)
        r += (prefix ? strncmp(e[i].name, name, strlen(name)) : strcmp(e[i].name, name)) == 0;
    return r;
}

static int logged_(const char *name)
{
    return logged_by_(name, 0);
}

/* dnn: through cuDNN (1; on the emulation each pass must have run there,
 * with a deterministic plain-sum algorithm) or as im2col + GEMM (0). */
static void conv_case_(int dnn, int n, int c, int h, int w, int oc, int k, int stride, int pad,
                       float beta)
{
    conv_dims_t d = {n,
                     c,
                     h,
                     w,
                     oc,
                     k,
                     stride,
                     pad,
                     (h + 2 * pad - k) / stride + 1,
                     (w + 2 * pad - k) / stride + 1};
    ddp_cuda_conv_t g = {d.n, d.c, d.h, d.w, d.oc, d.k, d.stride, d.pad, d.oh, d.ow};
    const size_t nx = (size_t)n * c * h * w, nw = (size_t)oc * c * k * k;
    const size_t ny = (size_t)n * oc * d.oh * d.ow;
    float *x = test_fvec(nx, 1.0f), *wt = test_fvec(nw, 0.5f), *b = test_fvec((size_t)oc, 1.0f);
    float *dy = test_fvec(ny, 1.0f), *dw0 = grad_old_(nw, beta), *db0 = grad_old_((size_t)oc, beta);
    float *y = hnew_(ny * 4), *dx = hnew_(nx * 4), *dw = fdup_(dw0, nw), *db = fdup_(db0, oc);
    void *ws = hnew_(C->conv_ws_bytes(&d));
    C->conv_fwd(&d, x, wt, b, y, ws);
    C->conv_bwd(&d, x, wt, dy, dx, dw, db, beta, ws);
    float *ax = fabs_(x, nx), *aw = fabs_(wt, nw), *ab = fabs_(b, oc), *ady = fabs_(dy, ny);
    float *ay = hnew_(ny * 4), *adx = hnew_(nx * 4), *adw = fabs_(dw0, nw), *adb = fabs_(db0, oc);
    C->conv_fwd(&d, ax, aw, ab, ay, ws);
    C->conv_bwd(&d, ax, aw, ady, adx, adw, adb, beta == 0.0f ? 0.0f : 1.0f, ws);
    float *dxd = dput_(x, nx * 4), *dwd = dput_(wt, nw * 4), *dbd = dput_(b, oc * 4);
    float *dyd = dput_(dy, ny * 4), *yd = dput_(NULL, ny * 4), *dxo = dput_(NULL, nx * 4);
    float *dwo = dput_(dw0, nw * 4), *dbo = dput_(db0, oc * 4);
    void *dws = dput_(NULL, ddp_cuda_conv_ws_bytes(&g));
    ddp_cuda_dnn_enable(dnn);
    ddp_cuda_cost_record(1);
    CU(ddp_cuda_conv_fwd(&g, dxd, dwd, dbd, yd, dws));
    CU(ddp_cuda_conv_bwd(&g, dxd, dwd, dyd, dxo, dwo, dbo, beta, dws));
    CU(ddp_cuda_sync());
    ddp_cuda_cost_record(0);
    ddp_cuda_dnn_enable(1);
    const int passes = (logged_("cudnnConvolutionForward") > 0) +
                       (logged_("cudnnConvolutionBackwardData") > 0) +
                       (logged_("cudnnConvolutionBackwardFilter") > 0);
    if (!dnn || n == 0) {
        ck_assert_int_eq(passes, 0);
    } else if (EMU) {
        ck_assert_msg(passes == 3, "conv n=%d k=%d s=%d: %d of its 3 passes through cuDNN", n, k,
                      stride, passes);
#if EMU
        /* what the backend asked for: implicit GEMM, the deterministic ALGO_1s */
        ck_assert_int_le(ddp_emu_cudnn_last_algo(0), 2);
        ck_assert_int_eq(ddp_emu_cudnn_last_algo(1), 1);
        ck_assert_int_eq(ddp_emu_cudnn_last_algo(2), 1);
#endif
    }
    float *gy = hnew_(ny * 4), *gdx = hnew_(nx * 4), *gdw = hnew_(nw * 4), *gdb = hnew_(oc * 4);
    dget_(gy, yd, ny * 4);
    dget_(gdx, dxo, nx * 4);
    dget_(gdw, dwo, nw * 4);
    dget_(gdb, dbo, oc * 4);
    char what[128];
    const size_t ohw = (size_t)d.oh * d.ow;
    snprintf(what, sizeof what, "conv%s n=%d c=%d %dx%d oc=%d k=%d s=%d p=%d beta=%g",
             dnn ? " (cuDNN)" : "", n, c, h, w, oc, k, stride, pad, beta);
    char part[160];
    snprintf(part, sizeof part, "%s y", what);
    gemm_close_(part, gy, y, ay, ny, (size_t)c * k * k);
    snprintf(part, sizeof part, "%s dw", what);
    gemm_close_(part, gdw, dw, adw, nw, (size_t)n * ohw);
    snprintf(part, sizeof part, "%s db", what);
    gemm_close_(part, gdb, db, adb, oc, (size_t)n * ohw);
    snprintf(part, sizeof part, "%s dx", what);
    gemm_close_(part, gdx, dx, adx, nx, (size_t)oc * k * k);
    dfree_(dxd), dfree_(dwd), dfree_(dbd), dfree_(dyd), dfree_(yd), dfree_(dxo), dfree_(dwo),
        dfree_(dbo), dfree_(dws);
    float *all[] = {x,  wt, b,   dy, dw0, db0, y,   dx, dw,  db,  ax,
                    aw, ab, ady, ay, adx, adw, adb, gy, gdx, gdw, gdb};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    free(ws);
}

START_TEST(conv_matches)
{
    test_seed(130);
    for (int dnn = 0; dnn < 2; dnn++) {
        conv_case_(dnn, 0, 3, 8, 8, 4, 3, 1, 1, 0.0f);
        conv_case_(dnn, 0, 3, 8, 8, 4, 3, 1, 1, 1.0f);
        conv_case_(dnn, 2, 3, 9, 7, 5, 3, 1, 1, 0.0f);
        conv_case_(dnn, 3, 4, 11, 13, 6, 3, 2, 0, 1.0f);
        conv_case_(dnn, 2, 5, 6, 6, 3, 1, 1, 0,
                   1.0f); /* 1x1, a group of 36-pixel samples: one GEMM */
        conv_case_(dnn, 2, 5, 8, 8, 3, 1, 1, 0, 1.0f);   /* 1x1, 64 pixels: a strided batch */
        conv_case_(dnn, 4, 16, 8, 8, 16, 3, 1, 1, 0.0f); /* the CPU's Winograd path */
        conv_case_(dnn, 2, 2, 10, 10, 3, 5, 2, 2, 1.0f);
        conv_case_(dnn, 3, 3, 15, 15, 8, 7, 2, 3, 0.0f); /* a ResNet stem */
        conv_case_(dnn, 2, 6, 9, 9, 4, 1, 2, 0, 1.0f);   /* a projection: 1x1, stride 2 */
    }
    /* more samples than one group of im2col's (1024 of 64 pixels) and of
     * cuDNN's (4096): each path over several groups (conv_groups_accumulate
     * holds their weight gradient to a tighter bound) */
    conv_case_(1, 4200, 2, 8, 8, 3, 3, 1, 1, 0.0f);
    conv_case_(0, 1100, 2, 8, 8, 3, 3, 1, 1, 1.0f);
}
END_TEST

/* The weight gradient summed over several groups of samples (cuDNN's of
 * 4096 samples of 64 pixels, im2col's of 1024), with beta 0: each group's
 * added to the ones before it, none overwriting them.  Inputs and output
 * gradient nonnegative, so that the sum has no cancellation and fp32's
 * rounding over its 268,800 terms stays under 1e-3 of it (a random-sign
 * sum's ulp bound, conv_case_'s, is too loose here to see a lost group). */
START_TEST(conv_groups_accumulate)
{
    test_seed(138);
    conv_dims_t d = {4200, 2, 8, 8, 3, 3, 1, 1, 8, 8};
    ddp_cuda_conv_t g = {d.n, d.c, d.h, d.w, d.oc, d.k, d.stride, d.pad, d.oh, d.ow};
    const size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.oc * d.c * d.k * d.k;
    const size_t ny = (size_t)d.n * d.oc * d.oh * d.ow;
    float *rx = test_fvec(nx, 1.0f), *hw = test_fvec(nw, 0.5f), *rdy = test_fvec(ny, 1.0f);
    float *hx = fabs_(rx, nx), *hdy = fabs_(rdy, ny), *ref = hnew_(nw * 4), *db = hnew_(12);
    float *hdx = hnew_(nx * 4), *got = hnew_(nw * 4);
    void *cws = hnew_(C->conv_ws_bytes(&d));
    C->conv_bwd(&d, hx, hw, hdy, hdx, ref, db, 0.0f, cws);
    float *x = dput_(hx, nx * 4), *w = dput_(hw, nw * 4), *dy = dput_(hdy, ny * 4);
    float *dx = dput_(NULL, nx * 4), *dw = dput_(NULL, nw * 4);
    void *ws = dput_(NULL, ddp_cuda_conv_ws_bytes(&g));
    for (int dnn = 0; dnn < 2; dnn++) {
        ddp_cuda_dnn_enable(dnn);
        CU(ddp_cuda_conv_bwd(&g, x, w, dy, dx, dw, NULL, 0.0f, ws));
        ddp_cuda_dnn_enable(1);
        dget_(got, dw, nw * 4);
        for (size_t i = 0; i < nw; i++)
            ck_assert_msg(fabsf(got[i] - ref[i]) <= 1e-3f * ref[i],
                          "conv dw over groups%s [%zu]: %.9g, CPU %.9g", dnn ? " (cuDNN)" : "", i,
                          got[i], ref[i]);
    }
    dfree_(x), dfree_(w), dfree_(dy), dfree_(dx), dfree_(dw), dfree_(ws);
    float *all[] = {rx, hw, rdy, hx, hdy, ref, db, hdx, got};
    for (size_t k = 0; k < sizeof all / sizeof *all; k++) free(all[k]);
    free(cws);
}
END_TEST

/* Under --precision bf16 a convolution through cuDNN multiplies the bf16
 * roundings of its input, weight and output gradient, as the im2col path's
 * GEMMs do, and writes its output, input gradient and each group's weight
 * gradient in bf16 (as torch.autocast's convolutions): it agrees with the
 * im2col path within that rounding, 2^-8 of the sum of the products'
 * magnitudes (the bias gradient, from the same fp32 dy, bit for bit).
 * Where cuDNN's forward heuristic finds nothing (on the emulation,
 * DDP_EMU_FAIL), the forward runs as im2col + GEMM (its bits) and the
 * backward still through cuDNN, with the input the forward rounded into
 * the memo (bf16.h) rounded no more; a failed cuDNN call is the backend's
 * failure, named. */
START_TEST(conv_cudnn_bf16)
{
    test_seed(137);
    static const int shapes[][8] = {/* n c h w oc k stride pad */
                                    {3, 4, 9, 9, 6, 3, 1, 1},
                                    {2, 5, 8, 8, 4, 1, 2, 0},
                                    {2, 3, 12, 12, 5, 7, 2, 3}};
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        const int *q = shapes[t];
        conv_dims_t d = {q[0],
                         q[1],
                         q[2],
                         q[3],
                         q[4],
                         q[5],
                         q[6],
                         q[7],
                         (q[2] + 2 * q[7] - q[5]) / q[6] + 1,
                         (q[3] + 2 * q[7] - q[5]) / q[6] + 1};
        ddp_cuda_conv_t g = {d.n, d.c, d.h, d.w, d.oc, d.k, d.stride, d.pad, d.oh, d.ow};
        const size_t nx = (size_t)d.n * d.c * d.h * d.w, nw = (size_t)d.oc * d.c * d.k * d.k;
        const size_t ny = (size_t)d.n * d.oc * d.oh * d.ow, nb = (size_t)d.oc;
        float *hx = test_fvec(nx, 1.0f), *hw = test_fvec(nw, 0.5f), *hb = test_fvec(nb, 1.0f);
        float *hdy = test_fvec(ny, 1.0f), *hdw0 = test_fvec(nw, 1.0f);
        /* the magnitudes: the CPU's passes on |x|, |w|, |b|, |dy| */
        float *ax = fabs_(hx, nx), *aw = fabs_(hw, nw), *ab = fabs_(hb, nb), *ady = fabs_(hdy, ny);
        float *ay = hnew_(ny * 4), *adx = hnew_(nx * 4), *adw = fabs_(hdw0, nw),
              *adb = hnew_(nb * 4);
        void *cws = hnew_(C->conv_ws_bytes(&d));
        C->conv_fwd(&d, ax, aw, ab, ay, cws);
        C->conv_bwd(&d, ax, aw, ady, adx, adw, adb, 1.0f, cws);
        float *x = dput_(hx, nx * 4), *w = dput_(hw, nw * 4), *b = dput_(hb, nb * 4);
        float *dy = dput_(hdy, ny * 4), *y = dput_(NULL, ny * 4), *dx = dput_(NULL, nx * 4);
        float *dw = dput_(NULL, nw * 4), *db = dput_(NULL, nb * 4);
        void *ws = dput_(NULL, ddp_cuda_conv_ws_bytes(&g));
        float *r[3][4]; /* [im2col, cuDNN, cuDNN without a forward algorithm][y, dx, dw, db] */
        const size_t cnt[4] = {ny, nx, nw, nb};
        CU(ddp_cuda_set_bf16_gemm(1));
        for (int m = 0; m < 3; m++) {
            ddp_cuda_dnn_enable(m > 0);
            ddp_cuda_dnn_forget();
#if EMU
            if (m == 2) {
                setenv("DDP_EMU_FAIL", "cudnnGetConvolutionForwardAlgorithm_v7:1", 1);
                ddp_emu_reload_env();
            }
#endif
            CU(ddp_cuda_upload(dw, hdw0, nw * 4));
            CU(ddp_cuda_upload(db, adb, nb * 4)); /* any start: beta 1 adds to it */
            ddp_cuda_cost_record(1);
            CU(ddp_cuda_conv_fwd(&g, x, w, b, y, ws));
            CU(ddp_cuda_sync());
            const int fwd_calls = logged_("cudnnConvolutionForward");
            /* cuDNN: the backward without the forward's roundings of w and
             * x (the memo forgotten), which it rounds itself (and dy: 3
             * roundings); with them (m 2: the forward's heuristic failed,
             * its memo kept): dy's only */
            if (m == 1) CU(ddp_cuda_set_bf16_gemm(1));
            ddp_cuda_cost_record(1); /* from empty */
            CU(ddp_cuda_conv_bwd(&g, x, w, dy, dx, dw, db, 1.0f, ws));
            CU(ddp_cuda_sync());
            ddp_cuda_cost_record(0);
#if EMU
            unsetenv("DDP_EMU_FAIL");
            ddp_emu_reload_env();
            ck_assert_int_eq(fwd_calls, m == 1);
            ck_assert_int_eq(logged_("cudnnConvolutionBackwardData"), m > 0);
            ck_assert_int_eq(logged_("cudnnConvolutionBackwardFilter"), m > 0);
            if (m > 0)
                ck_assert_msg(logged_("to_bf16_kernel") == (m == 1 ? 3 : 1),
                              "bf16 conv k=%d, m %d: %d roundings in the backward", d.k, m,
                              logged_("to_bf16_kernel"));
#else
            (void)fwd_calls;
#endif
            float *out[4] = {y, dx, dw, db};
            for (int k = 0; k < 4; k++) {
                r[m][k] = hnew_(cnt[k] * 4);
                dget_(r[m][k], out[k], cnt[k] * 4);
            }
        }
        char what[96];
        snprintf(what, sizeof what, "bf16 conv k=%d s=%d: cuDNN's forward apart", d.k, d.stride);
        same_bits_by_(what, r[2][0], r[0][0], ny, 4, "im2col");
        same_bits_by_(what, r[2][3], r[0][3], nb, 4, "im2col");
        const float *mag[4] = {ay, adx, adw, adb};
        static const char *const names[4] = {"y", "dx", "dw", "db"};
        for (int k = 0; k < 4; k++)
            for (size_t i = 0; i < cnt[k]; i++)
                ck_assert_msg(fabsf(r[1][k][i] - r[0][k][i]) <= 0x1p-8f * mag[k][i] + 1e-6f,
                              "bf16 conv k=%d s=%d %s[%zu]: cuDNN %.9g, im2col %.9g (magnitude %g)",
                              d.k, d.stride, names[k], i, r[1][k][i], r[0][k][i], mag[k][i]);
        same_bits_by_("bf16 conv db", r[1][3], r[0][3], nb, 4, "im2col");
#if EMU
        /* a call cuDNN refuses as cuDNN 9 says it (3002 NOT_SUPPORTED_SHAPE,
         * 2003 BAD_PARAM_MISALIGNED_POINTER): that pass runs as im2col +
         * GEMM, with im2col's bits */
        static const char *const refusals[] = {"3002", "2003"};
        float *got = hnew_(nx * 4);
        for (int e = 0; e < 2; e++) {
            ddp_cuda_dnn_forget();
            setenv("DDP_EMU_CUDNN_STATUS", refusals[e], 1);
            setenv("DDP_EMU_FAIL", "cudnnConvolutionBackwardData:1", 1);
            ddp_emu_reload_env();
            CU(ddp_cuda_conv_bwd(&g, x, w, dy, dx, dw, db, 0.0f, ws));
            dget_(got, dx, nx * 4);
            snprintf(what, sizeof what, "bf16 conv k=%d, cuDNN's dx refused (%s)", d.k,
                     refusals[e]);
            same_bits_by_(what, got, r[0][1], nx, 4, "im2col");
        }
        free(got);
        /* a failed call (EXECUTION_FAILED, or another BAD_PARAM such as a
         * NULL pointer): the backend's failure, naming it */
        static const char *const failures[] = {"", "2002"};
        for (int e = 0; e < 2; e++) {
            ddp_cuda_dnn_forget();
            setenv("DDP_EMU_CUDNN_STATUS", failures[e], 1);
            setenv("DDP_EMU_FAIL", "cudnnConvolutionBackwardData:1", 1);
            ddp_emu_reload_env();
            ck_assert_int_ne(ddp_cuda_conv_bwd(&g, x, w, dy, dx, dw, db, 0.0f, ws), 0);
            ck_assert_msg(strstr(ddp_cuda_last_error(), "cudnnConvolutionBackwardData"), "%s",
                          ddp_cuda_last_error());
            ddp_cuda_sync();
            ddp_cuda_clear_error();
        }
        unsetenv("DDP_EMU_CUDNN_STATUS");
        unsetenv("DDP_EMU_FAIL");
        ddp_emu_reload_env();
#endif
        CU(ddp_cuda_set_bf16_gemm(0));
        float *dev[] = {x, w, b, dy, y, dx, dw, db};
        for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) dfree_(dev[i]);
        dfree_(ws);
        float *all[] = {hx, hw, hb, hdy, hdw0, ax, aw, ab, ady, ay, adx, adw, adb};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
        for (int m = 0; m < 3; m++)
            for (int k = 0; k < 4; k++) free(r[m][k]);
        free(cws);
    }
}
END_TEST

enum { POOL_RANDOM, POOL_TIES, POOL_NEGATIVE };

/* values: POOL_TIES coarse values, ties in most windows; POOL_NEGATIVE
 * every value below zero (a padded 0 would win).  Average pooling only
 * without padding. */
static void pool_case_(int n, int c, int h, int w, int k, int stride, int pad, int values)
{
    pool_dims_t d = {
        n, c, h, w, k, stride, pad, (h + 2 * pad - k) / stride + 1, (w + 2 * pad - k) / stride + 1};
    ddp_cuda_pool_t g = {d.n, d.c, d.h, d.w, d.k, d.stride, d.pad, d.oh, d.ow};
    const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * d.oh * d.ow;
    float *x = test_fvec(nx, 2.0f), *dy = test_fvec(ny, 1.0f);
    for (size_t i = 0; i < nx && values == POOL_TIES; i++) x[i] = (float)(int)(x[i] * 1.5f);
    for (size_t i = 0; i < nx && values == POOL_NEGATIVE; i++) x[i] = -0.25f - fabsf(x[i]);
    float *y = hnew_(ny * 4), *dx = hnew_(nx * 4), *gy = hnew_(ny * 4), *gdx = hnew_(nx * 4);
    int32_t *am = hnew_(ny * 4), *gam = hnew_(ny * 4);
    float *dxd = dput_(x, nx * 4), *dyd = dput_(dy, ny * 4), *yd = dput_(NULL, ny * 4);
    float *dxo = dput_(NULL, nx * 4);
    int32_t *amd = dput_(NULL, ny * 4);
    char what[96];
    /* max: a compare per element, dx the CPU's additions in its order */
    C->maxpool_fwd(&d, x, y, am);
    C->maxpool_bwd(&d, dy, am, dx);
    CU(ddp_cuda_maxpool_fwd(&g, dxd, yd, amd));
    CU(ddp_cuda_maxpool_bwd(&g, dyd, amd, dxo));
    dget_(gy, yd, ny * 4);
    dget_(gam, amd, ny * 4);
    dget_(gdx, dxo, nx * 4);
    snprintf(what, sizeof what, "maxpool n=%d c=%d %dx%d k=%d s=%d p=%d values %d", n, c, h, w, k,
             stride, pad, values);
    same_bits_(what, gy, y, ny, 4);
    same_bits_(what, gam, am, ny, 4);
    same_bits_(what, gdx, dx, nx, 4);
    /* average: the same float additions (pool.cu's file comment) */
    if (pad == 0) {
        C->avgpool_fwd(&d, x, y);
        C->avgpool_bwd(&d, dy, dx);
        CU(ddp_cuda_avgpool_fwd(&g, dxd, yd));
        CU(ddp_cuda_avgpool_bwd(&g, dyd, dxo));
        dget_(gy, yd, ny * 4);
        dget_(gdx, dxo, nx * 4);
        snprintf(what, sizeof what, "avgpool n=%d c=%d %dx%d k=%d s=%d y", n, c, h, w, k, stride);
        close_(what, gy, y, ny, 4 * k * k, 1e-6, 1);
        snprintf(what, sizeof what, "avgpool n=%d c=%d %dx%d k=%d s=%d dx", n, c, h, w, k, stride);
        close_(what, gdx, dx, nx, 4 * k * k, 1e-6, 1);
    }
    /* global average over h*w */
    const int hw = h * w;
    float *gy2 = hnew_((size_t)n * c * 4), *y2 = hnew_((size_t)n * c * 4);
    float *dy2 = test_fvec((size_t)n * c, 1.0f);
    float *dy2d = dput_(dy2, (size_t)n * c * 4), *y2d = dput_(NULL, (size_t)n * c * 4);
    C->gap_fwd(n, c, hw, x, y2);
    C->gap_bwd(n, c, hw, dy2, dx);
    CU(ddp_cuda_gap_fwd(n, c, hw, dxd, y2d));
    CU(ddp_cuda_gap_bwd(n, c, hw, dy2d, dxo));
    dget_(gy2, y2d, (size_t)n * c * 4);
    dget_(gdx, dxo, nx * 4);
    float *ax = fabs_(x, nx), *ay2 = hnew_((size_t)n * c * 4);
    C->gap_fwd(n, c, hw, ax, ay2);
    snprintf(what, sizeof what, "gap n=%d c=%d hw=%d y", n, c, hw);
    for (size_t i = 0; i < (size_t)n * c; i++) /* a mean in double of hw floats */
        ck_assert_msg(fabs((double)gy2[i] - y2[i]) <= 2 * ulp_(y2[i]) + 1e-15 * hw * ay2[i],
                      "%s: element %zu: %.9g, the CPU backend %.9g", what, i, gy2[i], y2[i]);
    snprintf(what, sizeof what, "gap n=%d c=%d hw=%d dx", n, c, hw);
    close_(what, gdx, dx, nx, 2, 0, 1);
    dfree_(dxd), dfree_(dyd), dfree_(yd), dfree_(dxo), dfree_(amd), dfree_(dy2d), dfree_(y2d);
    free(x), free(dy), free(y), free(dx), free(gy), free(gdx), free(am), free(gam);
    free(gy2), free(y2), free(dy2), free(ax), free(ay2);
}

START_TEST(pool_matches)
{
    test_seed(140);
    pool_case_(0, 3, 4, 4, 2, 2, 0, POOL_RANDOM);
    pool_case_(2, 3, 8, 8, 2, 2, 0, POOL_RANDOM);
    pool_case_(2, 3, 9, 7, 2, 2, 0, POOL_TIES);   /* odd sizes: the last row/column dropped */
    pool_case_(3, 2, 10, 11, 3, 2, 0, POOL_TIES); /* overlapping windows */
    pool_case_(1, 1, 5, 5, 3, 1, 0, POOL_RANDOM);
    pool_case_(2, 4, 28, 28, 2, 2, 0, POOL_TIES);
    /* -inf padding: ResNet's stem (3x3 stride 2 pad 1) on odd and even
     * sizes, 2x2 stride 1 pad 1, 2x2 stride 2 pad 1; on negative planes */
    pool_case_(0, 3, 4, 4, 3, 2, 1, POOL_RANDOM);
    pool_case_(2, 3, 9, 9, 3, 2, 1, POOL_RANDOM);
    pool_case_(2, 3, 8, 10, 3, 2, 1, POOL_TIES);
    pool_case_(2, 3, 9, 8, 3, 2, 1, POOL_NEGATIVE);
    pool_case_(2, 2, 16, 16, 3, 2, 1, POOL_NEGATIVE);
    pool_case_(1, 2, 7, 8, 2, 1, 1, POOL_TIES);
    pool_case_(1, 2, 7, 8, 2, 1, 1, POOL_NEGATIVE);
    pool_case_(1, 2, 6, 9, 2, 2, 1, POOL_NEGATIVE);
}
END_TEST

/* relu: with a ReLU fused into the BatchNorm (both sides) */
static void bn_case_(int n, int c, int hw, float beta, int relu)
{
    const size_t nx = (size_t)n * c * hw;
    const double count = (double)n * hw;
    float *x = test_fvec(nx, 2.0f), *dy = test_fvec(nx, 1.0f);
    for (size_t i = 0; i < nx; i++) x[i] += 3.0f; /* a mean away from 0 */
    float *gamma = test_fvec((size_t)c, 1.0f), *beta_ = test_fvec((size_t)c, 1.0f);
    float *rm = test_fvec((size_t)c, 1.0f), *rv = test_fvec((size_t)c, 1.0f);
    for (int i = 0; i < c; i++) rv[i] = 1.0f + fabsf(rv[i]);
    float *dg0 = grad_old_((size_t)c, beta), *dbt0 = grad_old_((size_t)c, beta);
    /* CPU */
    double *st = hnew_(2 * (size_t)c * 8), *gst = hnew_(2 * (size_t)c * 8);
    float *mean = hnew_(c * 4), *inv = hnew_(c * 4), *rm1 = fdup_(rm, c), *rv1 = fdup_(rv, c);
    float *emean = hnew_(c * 4), *einv = hnew_(c * 4), *y = hnew_(nx * 4), *dx = hnew_(nx * 4);
    float *dg = fdup_(dg0, c), *dbt = fdup_(dbt0, c);
    C->bn_stats(n, c, hw, x, st);
    C->bn_finalize(c, st, count, 1e-5f, 0.1f, 1, mean, inv, rm1, rv1);
    C->bn_eval_params(c, rm, rv, 1e-5f, emean, einv);
    const float *rg = relu ? gamma : NULL, *rb = relu ? beta_ : NULL;
    C->bn_fwd(n, c, hw, x, mean, inv, gamma, beta_, y, relu, NULL);
    C->bn_bwd_stats(n, c, hw, x, dy, mean, inv, gst, dg, dbt, beta, rg, rb);
    C->bn_bwd_data(n, c, hw, x, dy, mean, inv, gamma, gst, count, dx, rb);
    /* device: stats, then finalize from the CPU's stats (one op at a time) */
    float *xd = dput_(x, nx * 4), *dyd = dput_(dy, nx * 4), *gd = dput_(gamma, c * 4);
    float *bd = dput_(beta_, c * 4), *rmd = dput_(rm, c * 4), *rvd = dput_(rv, c * 4);
    float *meand = dput_(NULL, c * 4), *invd = dput_(NULL, c * 4), *yd = dput_(NULL, nx * 4);
    float *dxd = dput_(NULL, nx * 4), *dgd = dput_(dg0, c * 4), *dbtd = dput_(dbt0, c * 4);
    float *emd = dput_(NULL, c * 4), *eid = dput_(NULL, c * 4);
    double *std_ = dput_(NULL, 2 * (size_t)c * 8), *gstd = dput_(NULL, 2 * (size_t)c * 8);
    double *gst_got = hnew_(2 * (size_t)c * 8), *st_got = hnew_(2 * (size_t)c * 8);
    CU(ddp_cuda_bn_stats(n, c, hw, xd, std_));
    dget_(st_got, std_, 2 * (size_t)c * 8);
    char what[96];
    /* double sums of exact terms in another order: within 2 N 2^-53 of the
     * sums of |terms|, which are the sums themselves (x > 0) */
    const double ud = 1.0 / 9007199254740992.0;
    for (int ch = 0; ch < 2 * c; ch++) {
        snprintf(what, sizeof what, "bn_stats n=%d c=%d hw=%d [%d]", n, c, hw, ch);
        rel_close_(what, st_got[ch], st[ch], 2 * count * ud, 0);
    }
    CU(ddp_cuda_upload(std_, st, 2 * (size_t)c * 8));
    CU(ddp_cuda_bn_finalize(c, std_, count, 1e-5f, 0.1f, 1, meand, invd, rmd, rvd));
    float *erm = dput_(rm, c * 4), *erv = dput_(rv, c * 4);
    CU(ddp_cuda_bn_eval_params(c, erm, erv, 1e-5f, emd, eid));
    float *got = hnew_((nx > (size_t)c ? nx : (size_t)c) * 4);
#define BN_GET(dev, ref, len, nulp, abs_, label, exact)                                            \
    do {                                                                                           \
        dget_(got, dev, (size_t)(len)*4);                                                          \
        snprintf(what, sizeof what, "bn n=%d c=%d hw=%d beta=%g relu=%d %s", n, c, hw, beta, relu, \
                 label);                                                                           \
        close_(what, got, ref, (size_t)(len), nulp, abs_, exact);                                  \
    } while (0)
    /* finalize and eval params: double arithmetic rounded once to float */
    BN_GET(meand, mean, c, 1, 0, "mean", 1);
    BN_GET(invd, inv, c, 1, 0, "invstd", 1);
    BN_GET(rmd, rm1, c, 1, 0, "running_mean", 1);
    BN_GET(rvd, rv1, c, 1, 0, "running_var", 1);
    BN_GET(emd, emean, c, 0, 0, "eval mean", 1);
    BN_GET(eid, einv, c, 1, 0, "eval invstd", 1);
    /* the rest from the CPU's mean and invstd */
    CU(ddp_cuda_upload(meand, mean, c * 4));
    CU(ddp_cuda_upload(invd, inv, c * 4));
    CU(ddp_cuda_bn_fwd(n, c, hw, xd, meand, invd, gd, bd, yd, relu, NULL));
    BN_GET(yd, y, nx, 4, 1e-6, "y", 1); /* a*x + b per element: FMA on a GPU */
    /* applied by a block's add (res): that plus the other input, where a sum
     * near 0 keeps the absolute error of a*x + b */
    float *res = test_fvec(nx, 1.0f), *yr = hnew_(nx * 4), *resd = dput_(res, nx * 4);
    C->bn_fwd(n, c, hw, x, mean, inv, gamma, beta_, yr, relu, res);
    CU(ddp_cuda_bn_fwd(n, c, hw, xd, meand, invd, gd, bd, yd, relu, resd));
    BN_GET(yd, yr, nx, 4, 1e-5, "y + res", 1);
    dfree_(resd), free(res), free(yr);
    CU(ddp_cuda_bn_bwd_stats(n, c, hw, xd, dyd, meand, invd, gstd, dgd, dbtd, beta,
                             relu ? gd : NULL, relu ? bd : NULL));
    dget_(gst_got, gstd, 2 * (size_t)c * 8);
    /* the same float terms, |dy| < 1 and |dy (x - mean)| < 4, summed in
     * another order in double */
    double max_inv = 0;
    for (int ch = 0; ch < c; ch++) max_inv = fmax(max_inv, inv[ch]);
    const double gbound = 2 * count * ud * count * 4 * max_inv;
    for (int ch = 0; ch < 2 * c; ch++) {
        snprintf(what, sizeof what, "bn_bwd_stats n=%d c=%d hw=%d [%d]", n, c, hw, ch);
        rel_close_(what, gst_got[ch], gst[ch], 0, gbound);
    }
    BN_GET(dgd, dg, c, 2, gbound, "dgamma", 0);
    BN_GET(dbtd, dbt, c, 2, gbound, "dbeta", 0);
    CU(ddp_cuda_upload(gstd, gst, 2 * (size_t)c * 8));
    CU(ddp_cuda_bn_bwd_data(n, c, hw, xd, dyd, meand, invd, gd, gstd, count, dxd,
                            relu ? bd : NULL));
    BN_GET(dxd, dx, nx, 8, 1e-5, "dx", 1);
#undef BN_GET
    void *devs[] = {xd,  dyd, gd,   bd,  rmd, rvd,  meand, invd, yd,
                    dxd, dgd, dbtd, emd, eid, std_, gstd,  erm,  erv};
    for (size_t i = 0; i < sizeof devs / sizeof *devs; i++) dfree_(devs[i]);
    void *hosts[] = {x,   dy,  gamma, beta_, rm, rv, dg0, dbt0, st,      gst,    mean, inv,
                     rm1, rv1, emean, einv,  y,  dx, dg,  dbt,  gst_got, st_got, got};
    for (size_t i = 0; i < sizeof hosts / sizeof *hosts; i++) free(hosts[i]);
}

/* ddp_cuda_bn_stats_finalize: the bits of ddp_cuda_bn_stats then
 * ddp_cuda_bn_finalize on the device (the statistics, mean, invstd and the
 * running statistics moved) */
static void bn_stats_finalize_case_(int n, int c, int hw)
{
    const size_t nx = (size_t)n * c * hw;
    const double count = (double)n * hw;
    float *x = test_fvec(nx, 2.0f), *rm = test_fvec((size_t)c, 1.0f);
    float *rv = test_fvec((size_t)c, 1.0f);
    for (int i = 0; i < c; i++) rv[i] = 1.0f + fabsf(rv[i]);
    float *xd = dput_(x, nx * 4), *r[2][4];
    double *st[2];
    for (int a = 0; a < 2; a++) {
        float *md = dput_(NULL, c * 4), *id = dput_(NULL, c * 4), *rmd = dput_(rm, c * 4),
              *rvd = dput_(rv, c * 4);
        double *sd = dput_(NULL, 16 * (size_t)c);
        if (a) {
            CU(ddp_cuda_bn_stats_finalize(n, c, hw, xd, sd, count, 1e-5f, 0.1f, 1, md, id, rmd,
                                          rvd));
        } else {
            CU(ddp_cuda_bn_stats(n, c, hw, xd, sd));
            CU(ddp_cuda_bn_finalize(c, sd, count, 1e-5f, 0.1f, 1, md, id, rmd, rvd));
        }
        float *dev[4] = {md, id, rmd, rvd};
        for (int k = 0; k < 4; k++) {
            r[a][k] = hnew_(c * 4);
            dget_(r[a][k], dev[k], c * 4);
            dfree_(dev[k]);
        }
        st[a] = hnew_(16 * (size_t)c);
        dget_(st[a], sd, 16 * (size_t)c);
        dfree_(sd);
    }
    static const char *const names[4] = {"mean", "invstd", "running_mean", "running_var"};
    char what[96];
    for (int k = 0; k < 4; k++) {
        snprintf(what, sizeof what, "bn_stats_finalize n=%d c=%d hw=%d %s", n, c, hw, names[k]);
        same_bits_by_(what, r[1][k], r[0][k], c, 4, "bn_stats then bn_finalize");
    }
    snprintf(what, sizeof what, "bn_stats_finalize n=%d c=%d hw=%d stats", n, c, hw);
    same_bits_by_(what, st[1], st[0], 2 * (size_t)c, 8, "bn_stats");
    for (int a = 0; a < 2; a++) {
        for (int k = 0; k < 4; k++) free(r[a][k]);
        free(st[a]);
    }
    dfree_(xd), free(x), free(rm), free(rv);
}

START_TEST(bn_matches)
{
    test_seed(150);
    bn_case_(0, 3, 4, 1.0f, 0);
    bn_case_(1, 5, 1, 0.0f, 0);
    bn_case_(64, 300, 1, 0.0f, 0); /* BatchNorm1d */
    bn_case_(64, 300, 1, 1.0f, 0);
    bn_case_(8, 6, 49, 0.0f, 0);  /* BatchNorm2d */
    bn_case_(64, 12, 9, 1.0f, 0); /* 44 chunks of samples, uneven */
    bn_case_(3, 4, 1031, 1.0f, 0);
    /* a fused ReLU: about half of the outputs masked */
    bn_case_(0, 3, 4, 1.0f, 1);
    bn_case_(64, 300, 1, 0.0f, 1);
    bn_case_(8, 6, 49, 0.0f, 1);
    bn_case_(64, 12, 9, 1.0f, 1);
    bn_stats_finalize_case_(8, 6, 49);
    bn_stats_finalize_case_(64, 12, 9);
    bn_stats_finalize_case_(3, 4, 1031);
    bn_stats_finalize_case_(64, 300, 1); /* BatchNorm1d: its own kernel, then finalize */
    bn_stats_finalize_case_(0, 3, 4);    /* no samples: zero sums */
}
END_TEST

/* A BatchNorm (and its fused ReLU) whose only reader is a max pooling, in
 * one pass each way (ddp_cuda_bn_maxpool_*): on the same inputs, the bits
 * of the layers alone on the device (bn_fwd, maxpool_fwd; maxpool_bwd,
 * bn_bwd_stats, bn_bwd_data) -- the pooled output and argmax, the
 * gradient sums, dgamma and dbeta (beta 1: added to the old ones) and dx.
 * Windows: 2x2 (the CNN's), 3x3 stride 2 pad 1 (ResNet's stem: a cell
 * under up to four windows), 2x2 stride 1 pad 1, odd sizes (cells under no
 * window: dx of dy 0); values with ties (coarse x: equal outputs in a
 * window; with a ReLU, mostly negative outputs: windows of zeros), a NaN
 * (NaN where the layers alone give NaN, of either sign: same_values_by_),
 * and sizes past one grid-stride pass.  bf16: x, the pooled output, its
 * gradient and dx kept in bf16 (act16.h) give the fp32 run's bits on the
 * same values (the outputs rounded).  Without the argmax (NULL: the
 * backward finds each window's maximum again; the model's choice where
 * windows do not overlap, correct for any), fused on fp32 and on bf16
 * buffers: the bits of the fused run with it. */
typedef struct bnp_case {
    int n, c, h, w, k, stride, pad, relu;
    float shift; /* added to x (negative: most BatchNorm outputs below 0) */
    int ties, nan, bf16;
} bnp_case_t;

enum { BNP_Y, BNP_DG, BNP_DB, BNP_DX, BNP_N };

static void bn_maxpool_case_(const bnp_case_t *q)
{
    ddp_cuda_pool_t g = {q->n, q->c, q->h, q->w, q->k, q->stride, q->pad,
                         (q->h + 2 * q->pad - q->k) / q->stride + 1,
                         (q->w + 2 * q->pad - q->k) / q->stride + 1};
    const int c = q->c, hw = q->h * q->w;
    const size_t nx = (size_t)q->n * c * hw, ny = (size_t)q->n * c * g.oh * g.ow;
    const double count = (double)q->n * hw;
    float *hx = test_fvec(nx, 2.0f), *hdy = test_fvec(ny, 1.0f), *hxw, *hdyw;
    for (size_t i = 0; i < nx; i++)
        hx[i] = (q->ties ? (float)(int)(hx[i] * 1.5f) : hx[i]) + q->shift;
    if (q->nan) hx[nx / 3] = NAN;
    uint16_t *hx16 = bf16_of_(hx, nx, &hxw), *hdy16 = bf16_of_(hdy, ny, &hdyw);
    float *hg = test_fvec((size_t)c, 1.0f), *hb = test_fvec((size_t)c, 1.0f);
    float *hdg0 = grad_old_((size_t)c, 1.0f), *hdb0 = grad_old_((size_t)c, 1.0f);
    float *gam = dput_(hg, c * 4), *bet = dput_(hb, c * 4), *mean = dput_(NULL, c * 4);
    float *inv = dput_(NULL, c * 4), *rm = dput_(NULL, c * 4), *rv = dput_(NULL, c * 4);
    float *full = dput_(NULL, nx * 4), *dfull = dput_(NULL, nx * 4);
    double *st = dput_(NULL, 16 * (size_t)c), *gst = dput_(NULL, 16 * (size_t)c);
    /* [layers alone, fused, fused on bf16 buffers, alone on them, fused
     * without argmax, on bf16 buffers][y, dgamma, dbeta, dx] */
    float *r[6][BNP_N] = {{NULL}};
    int32_t *am[6] = {NULL};
    double *gs[6] = {NULL};
    for (int a = 0; a < 6; a++) {
        const int b16 = a == 2 || a == 3 || a == 5, eb = b16 ? 2 : 4; /* bytes of x, y, dy, dx */
        if (b16 && !q->bf16) continue;
        float *x = dput_(b16 ? (const void *)hx16 : hxw, nx * eb);
        float *dy = dput_(b16 ? (const void *)hdy16 : hdyw, ny * eb);
        float *y = dput_(NULL, ny * eb), *dx = dput_(NULL, nx * eb);
        float *dg = dput_(hdg0, c * 4), *db = dput_(hdb0, c * 4);
        int32_t *amd = dput_(NULL, ny * 4);
        if (b16) {
            CU(ddp_cuda_set_bf16_gemm(1));
            CU(ddp_cuda_act_bf16(x, nx)), CU(ddp_cuda_act_bf16(y, ny));
            CU(ddp_cuda_grad_bf16(dy, ny)), CU(ddp_cuda_grad_bf16(dx, nx));
        }
        CU(ddp_cuda_bn_stats(q->n, c, hw, x, st));
        CU(ddp_cuda_bn_finalize(c, st, count, 1e-5f, 0.1f, 1, mean, inv, rm, rv));
        const float *rg = q->relu ? gam : NULL, *rb = q->relu ? bet : NULL;
        if (a == 0 || a == 3) {
            CU(ddp_cuda_bn_fwd(q->n, c, hw, x, mean, inv, gam, bet, full, q->relu, NULL));
            CU(ddp_cuda_maxpool_fwd(&g, full, y, amd));
            CU(ddp_cuda_maxpool_bwd(&g, dy, amd, dfull));
            CU(ddp_cuda_bn_bwd_stats(q->n, c, hw, x, dfull, mean, inv, gst, dg, db, 1.0f, rg, rb));
            CU(ddp_cuda_bn_bwd_data(q->n, c, hw, x, dfull, mean, inv, gam, gst, count, dx, rb));
        } else {
            int32_t *ka = a >= 4 ? NULL : amd; /* the argmax kept, or none */
            CU(ddp_cuda_bn_maxpool_fwd(&g, x, mean, inv, gam, bet, q->relu, y, ka));
            CU(ddp_cuda_bn_maxpool_bwd_stats(&g, ka, x, dy, mean, inv, gam, bet, q->relu, gst, dg,
                                             db, 1.0f));
            CU(ddp_cuda_bn_maxpool_bwd_data(&g, ka, x, dy, mean, inv, gam, bet, q->relu, gst,
                                            count, dx));
        }
        r[a][BNP_Y] = hnew_(ny * 4), r[a][BNP_DX] = hnew_(nx * 4);
        r[a][BNP_DG] = hnew_(c * 4), r[a][BNP_DB] = hnew_(c * 4);
        am[a] = hnew_(ny * 4), gs[a] = hnew_(16 * (size_t)c);
        dget_(r[a][BNP_Y], y, ny * eb), dget_(r[a][BNP_DX], dx, nx * eb);
        dget_(r[a][BNP_DG], dg, c * 4), dget_(r[a][BNP_DB], db, c * 4);
        dget_(am[a], amd, ny * 4), dget_(gs[a], gst, 16 * (size_t)c);
        if (b16) CU(ddp_cuda_grad_bf16(dy, 0)), CU(ddp_cuda_grad_bf16(dx, 0));
        dfree_(x), dfree_(dy), dfree_(y), dfree_(dx), dfree_(dg), dfree_(db), dfree_(amd);
        if (b16) CU(ddp_cuda_set_bf16_gemm(0));
    }
    char what[160];
    static const char *const names[BNP_N] = {"y", "dgamma", "dbeta", "dx"};
    const size_t cnt[BNP_N] = {ny, (size_t)c, (size_t)c, nx};
    uint16_t *want = hnew_(nx * 2);
    for (int a = 1; a < 6; a++) {
        if (!r[a][0]) continue; /* a bf16 run the case has not */
        const int ref = a >= 4 ? a - 3 : a - 1; /* without the argmax: the fused run with it */
        const char *by = a == 1   ? "the layers alone"
                         : a == 2 ? "the fp32 buffers'"
                         : a == 3 ? "fused"
                                  : "fused with the argmax kept";
        const int b16a = a == 2 || a == 3 || a == 5;
#define BNP_WHAT(label)                                                                            \
    snprintf(what, sizeof what, "BN%s + maxpool n=%d c=%d %dx%d k=%d s=%d p=%d%s%s%s%s: %s",       \
             q->relu ? " + ReLU" : "", q->n, c, q->h, q->w, q->k, q->stride, q->pad,               \
             q->ties ? " ties" : "", q->nan ? " NaN" : "", b16a ? " bf16" : "",                    \
             a == 3 ? " alone" : a >= 4 ? " argmax found again" : "", label)
        for (int k = 0; k < BNP_N; k++) {
            BNP_WHAT(names[k]);
            if (a == 2 && (k == BNP_Y || k == BNP_DX)) {
                for (size_t i = 0; i < cnt[k]; i++) want[i] = ddp_f32_to_bf16(r[1][k][i]);
                same_bits_by_(what, r[2][k], want, cnt[k], 2, "the fp32 output rounded");
            } else {
                same_values_by_(what, r[a][k], r[ref][k], cnt[k], 4, by);
            }
        }
        if (a < 4) {
            BNP_WHAT("argmax");
            same_bits_by_(what, am[a], am[ref], ny, 4, by);
        }
        BNP_WHAT("gradient sums");
        same_values_by_(what, gs[a], gs[ref], 2 * (size_t)c, 8, by);
#undef BNP_WHAT
    }
    for (int a = 0; a < 6; a++) {
        for (int k = 0; k < BNP_N; k++) free(r[a][k]);
        free(am[a]), free(gs[a]);
    }
    void *dev[] = {gam, bet, mean, inv, rm, rv, full, dfull, st, gst};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) dfree_(dev[i]);
    free(want), free(hx), free(hdy), free(hxw), free(hdyw), free(hx16), free(hdy16);
    free(hg), free(hb), free(hdg0), free(hdb0);
}

START_TEST(bn_maxpool_bits)
{
    test_seed(151);
    static const bnp_case_t cases[] = {
        /* n  c  h   w   k s p relu shift ties nan bf16 */
        {4, 3, 8, 8, 2, 2, 0, 1, 0.0f, 0, 0, 1},
        {4, 3, 8, 8, 2, 2, 0, 0, 0.0f, 1, 0, 1},
        {3, 5, 9, 7, 2, 2, 0, 1, -1.0f, 1, 0, 1}, /* odd: the last row, column in no window */
        {2, 4, 9, 9, 3, 2, 1, 1, 0.0f, 0, 0, 1},  /* ResNet's stem */
        {2, 4, 8, 10, 3, 2, 1, 1, -2.5f, 1, 0, 0},
        {2, 3, 7, 8, 2, 1, 1, 0, 0.0f, 1, 0, 0},
        {2, 3, 6, 6, 2, 2, 0, 1, 0.0f, 0, 1, 0},  /* a NaN wins its window */
        {64, 8, 46, 46, 2, 2, 0, 1, 0.0f, 0, 0, 1}, /* past one grid-stride pass */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) bn_maxpool_case_(&cases[i]);
}
END_TEST

/* ---- the suite -------------------------------------------------------- */

/* ---- bf16: the forward's copies kept for the backward (cuda/bf16.h) ---- */

/* A layer on device buffers: its input and weight, and copies of them at
 * other addresses (xc, wc: never seen by a forward, so a backward with them
 * rounds its operands itself). */
typedef struct memo_layer {
    int conv;
    ddp_cuda_conv_t g;
    int n, in, out;         /* linear */
    size_t nx, nw, ny;      /* elements of x, w, y */
    float *x, *xc, *x2, *w, *wc, *b, *dy, *y, *dx, *dw, *db, *ws; /* device */
} memo_layer_t;

static void memo_layer_init_(memo_layer_t *L, int conv)
{
    memset(L, 0, sizeof *L);
    L->conv = conv;
    if (conv) {
        /* 5 samples of 3x9x9, 3x3 stride 2 pad 1: groups of samples */
        L->g = (ddp_cuda_conv_t){5, 3, 9, 9, 6, 3, 2, 1, 5, 5};
        L->nx = (size_t)5 * 3 * 9 * 9, L->nw = (size_t)6 * 3 * 3 * 3, L->ny = (size_t)5 * 6 * 5 * 5;
    } else {
        L->n = 37, L->in = 29, L->out = 11;
        L->nx = (size_t)37 * 29, L->nw = (size_t)11 * 29, L->ny = (size_t)37 * 11;
    }
    float *h[] = {test_fvec(L->nx, 1.0f), test_fvec(L->nx, 1.0f), test_fvec(L->nw, 0.5f),
                  test_fvec(L->ny, 1.0f)};
    L->x = dput_(h[0], L->nx * 4), L->xc = dput_(h[0], L->nx * 4), L->x2 = dput_(h[1], L->nx * 4);
    L->w = dput_(h[2], L->nw * 4), L->wc = dput_(h[2], L->nw * 4), L->dy = dput_(h[3], L->ny * 4);
    L->b = dput_(NULL, 64 * 4), L->y = dput_(NULL, L->ny * 4), L->dx = dput_(NULL, L->nx * 4);
    L->dw = dput_(NULL, L->nw * 4), L->db = dput_(NULL, 64 * 4);
    L->ws = dput_(NULL, conv ? ddp_cuda_conv_ws_bytes(&L->g) : 16);
    for (size_t i = 0; i < 4; i++) free(h[i]);
}

static void memo_layer_free_(memo_layer_t *L)
{
    float *all[] = {L->x, L->xc, L->x2, L->w, L->wc, L->b, L->dy, L->y, L->dx, L->dw, L->db, L->ws};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) dfree_(all[i]);
}

static void memo_fwd_(memo_layer_t *L, const float *x)
{
    if (L->conv)
        CU(ddp_cuda_conv_fwd(&L->g, x, L->w, L->b, L->y, L->ws));
    else
        CU(ddp_cuda_linear_fwd(L->n, L->in, L->out, x, L->w, L->b, L->y, 0));
}

/* The backward with input x and weight w: dx and dw into hdx, hdw. */
static void memo_bwd_(memo_layer_t *L, const float *x, const float *w, float *hdx, float *hdw)
{
    if (L->conv)
        CU(ddp_cuda_conv_bwd(&L->g, x, w, L->dy, L->dx, L->dw, L->db, 0.0f, L->ws));
    else
        CU(ddp_cuda_linear_bwd(L->n, L->in, L->out, x, w, L->dy, L->dx, L->dw, L->db, 0.0f, NULL, NULL));
    dget_(hdx, L->dx, L->nx * 4);
    dget_(hdw, L->dw, L->nw * 4);
}

/* The backward after the forward of input x, with the forward's copies,
 * against the backward of the same values at the copies' addresses (xcopy
 * and wc, rounded again): the same bits. */
static void memo_same_(memo_layer_t *L, const float *x, const float *xcopy, const char *what,
                       float *hdx, float *hdw)
{
    float *rdx = hnew_(L->nx * 4), *rdw = hnew_(L->nw * 4);
    memo_fwd_(L, L->x);
    memo_bwd_(L, x, L->w, hdx, hdw);
    memo_bwd_(L, xcopy, L->wc, rdx, rdw);
    char part[160];
    snprintf(part, sizeof part, "%s %s dx", L->conv ? "conv" : "linear", what);
    same_bits_by_(part, hdx, rdx, L->nx, 4, "rounded again");
    snprintf(part, sizeof part, "%s %s dw", L->conv ? "conv" : "linear", what);
    same_bits_by_(part, hdw, rdw, L->nw, 4, "rounded again");
    free(rdx), free(rdw);
}

static int differs_(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof *a) != 0;
}

/* Under --precision bf16 a layer's backward multiplies by the copies of its
 * weight and input its forward rounded: the same bits as rounding them
 * again; a forward after the weight changed (the optimizer's step) rounds
 * the new weight, and a backward with another input than the forward's
 * rounds that input (dw from it, not from the forward's). */
START_TEST(bf16_memo)
{
    test_seed(131);
    for (int conv = 0; conv < 2; conv++) {
        memo_layer_t L;
        memo_layer_init_(&L, conv);
        float *dx1 = hnew_(L.nx * 4), *dw1 = hnew_(L.nw * 4), *dx2 = hnew_(L.nx * 4),
              *dw2 = hnew_(L.nw * 4), *dx3 = hnew_(L.nx * 4), *dw3 = hnew_(L.nw * 4);
        CU(ddp_cuda_set_bf16_gemm(1));
        memo_same_(&L, L.x, L.xc, "after its forward", dx1, dw1);
        /* the optimizer's step: a new weight, then the next forward */
        float *w2 = test_fvec(L.nw, 0.5f);
        CU(ddp_cuda_upload(L.w, w2, L.nw * 4));
        CU(ddp_cuda_upload(L.wc, w2, L.nw * 4));
        memo_same_(&L, L.x, L.xc, "after the forward of a new weight", dx2, dw2);
        ck_assert_msg(differs_(dx1, dx2, L.nx), "dx of the new weight is that of the old");
        if (!conv) {
            /* a backward with another input than the forward's: dw from it */
            memo_same_(&L, L.x2, L.x2, "with another input than its forward's", dx3, dw3);
            ck_assert_msg(differs_(dw2, dw3, L.nw), "dw of the other input is the forward's");
        }
        CU(ddp_cuda_set_bf16_gemm(0));
        memo_layer_free_(&L);
        float *all[] = {dx1, dw1, dx2, dw2, dx3, dw3, w2};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    }
}
END_TEST

/* Under --precision bf16 a ReLU fused into the dense layer before it (its
 * backward's one pass masks the gradient, sums the bias gradient and rounds
 * it for both GEMMs) gives the bits of the two layers run alone. */
START_TEST(bf16_linear_relu_fused)
{
    test_seed(133);
    const int n = 37, in = 29, out = 45;
    const size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
    float *hx = test_fvec(nx, 1.0f), *hw = test_fvec(nw, 0.5f), *hb = test_fvec(out, 1.0f);
    float *hdz = test_fvec(ny, 1.0f);
    float *x = dput_(hx, nx * 4), *w = dput_(hw, nw * 4), *b = dput_(hb, out * 4);
    float *dz = dput_(hdz, ny * 4), *y = dput_(NULL, ny * 4), *z = dput_(NULL, ny * 4);
    float *dy = dput_(NULL, ny * 4), *ws = dput_(NULL, ny * 4);
    float *dx[2], *dw[2], *db[2], *h[2][4];
    for (int f = 0; f < 2; f++) {
        dx[f] = dput_(NULL, nx * 4), dw[f] = dput_(NULL, nw * 4), db[f] = dput_(NULL, out * 4);
        h[f][0] = hnew_(ny * 4), h[f][1] = hnew_(nx * 4), h[f][2] = hnew_(nw * 4);
        h[f][3] = hnew_(out * 4);
    }
    CU(ddp_cuda_set_bf16_gemm(1));
    /* alone: the layer, then the ReLU */
    CU(ddp_cuda_linear_fwd(n, in, out, x, w, b, y, 0));
    CU(ddp_cuda_relu_fwd(ny, y, z));
    CU(ddp_cuda_relu_bwd(ny, y, dz, dy, NULL));
    CU(ddp_cuda_linear_bwd(n, in, out, x, w, dy, dx[0], dw[0], db[0], 0.0f, NULL, NULL));
    dget_(h[0][0], z, ny * 4);
    /* fused */
    CU(ddp_cuda_linear_fwd(n, in, out, x, w, b, z, 1));
    CU(ddp_cuda_linear_bwd(n, in, out, x, w, dz, dx[1], dw[1], db[1], 0.0f, z, ws));
    dget_(h[1][0], z, ny * 4);
    CU(ddp_cuda_set_bf16_gemm(0));
    for (int f = 0; f < 2; f++) {
        dget_(h[f][1], dx[f], nx * 4);
        dget_(h[f][2], dw[f], nw * 4);
        dget_(h[f][3], db[f], out * 4);
    }
    same_bits_by_("bf16 linear+relu fused y", h[1][0], h[0][0], ny, 4, "the layers alone");
    same_bits_by_("bf16 linear+relu fused dx", h[1][1], h[0][1], nx, 4, "the layers alone");
    same_bits_by_("bf16 linear+relu fused dw", h[1][2], h[0][2], nw, 4, "the layers alone");
    same_bits_by_("bf16 linear+relu fused db", h[1][3], h[0][3], out, 4, "the layers alone");
    float *dev[] = {x, w, b, dz, y, z, dy, ws, dx[0], dx[1], dw[0], dw[1], db[0], db[1]};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) dfree_(dev[i]);
    float *all[] = {hx, hw, hb, hdz};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 4; k++) free(h[f][k]);
}
END_TEST

/* The launches of one dense layer's forward named `name`. */
static int fwd_calls_(const char *name, int n, int in, int out, const float *x, const float *w,
                      const float *b, float *y, int relu)
{
    ddp_cuda_cost_record(1);
    CU(ddp_cuda_linear_fwd(n, in, out, x, w, b, y, relu));
    CU(ddp_cuda_sync());
    ddp_cuda_cost_record(0);
    const ddp_cuda_cost_t *e;
    size_t count = ddp_cuda_cost_log(&e);
    int r = 0;
    for (size_t i = 0; i < count; i++) r += strcmp(e[i].name, name) == 0;
    return r;
}

/* A dense layer's forward is one cuBLASLt matmul with the bias and the
 * ReLU in its epilogue (fp32 and bf16 GEMMs, with and without either), and
 * gives the bits of the GEMM followed by the pass that adds them, which
 * runs when cuBLASLt has no algorithm for it (on the emulation its
 * heuristic made to fail: DDP_EMU_FAIL); a bias not 16-byte aligned runs
 * apart.  On a GPU the two paths may pick GEMM kernels that sum in other
 * orders: there they agree within 1e-5 of the largest output. */
START_TEST(linear_lt_epilogue)
{
    test_seed(134);
    const int n = 37, in = 29, out = 24;
    const size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
    float *hx = test_fvec(nx, 1.0f), *hw = test_fvec(nw, 0.5f), *hb = test_fvec(out + 1, 1.0f);
    float *x = dput_(hx, nx * 4), *w = dput_(hw, nw * 4), *b = dput_(hb, (out + 1) * 4);
    float *y = dput_(NULL, ny * 4), *h[2] = {hnew_(ny * 4), hnew_(ny * 4)};
    for (int bf16 = 0; bf16 < 2; bf16++)
        for (int with_b = 0; with_b < 2; with_b++)
            for (int relu = 0; relu < 2; relu++) {
                char what[96];
                snprintf(what, sizeof what, "linear %s bias %d relu %d", bf16 ? "bf16" : "fp32",
                         with_b, relu);
                CU(ddp_cuda_set_bf16_gemm(bf16));
                ddp_cuda_lt_forget();
                const float *bb = with_b ? b : NULL;
                int lt = fwd_calls_("cublasLtMatmul", n, in, out, x, w, bb, y, relu);
                dget_(h[0], y, ny * 4);
                if (EMU) ck_assert_msg(lt == 1, "%s: %d cuBLASLt matmuls, expected 1", what, lt);
                if (!lt) fprintf(stderr, "check_cuda_ops: %s: no cuBLASLt matmul\n", what);
#if EMU
                setenv("DDP_EMU_FAIL", "cublasLtMatmulAlgoGetHeuristic:1", 1);
                ddp_emu_reload_env();
#endif
                ddp_cuda_lt_forget();
                int apart = fwd_calls_("cublasLtMatmul", n, in, out, x, w, bb, y, relu);
#if EMU
                unsetenv("DDP_EMU_FAIL");
                ddp_emu_reload_env();
                ck_assert_msg(apart == 0, "%s: a cuBLASLt matmul after its heuristic failed", what);
                ck_assert_int_eq(fwd_calls_("bias_act_kernel<uint32_t>", n, in, out, x, w, bb, y,
                                            relu),
                                 with_b || relu);
#endif
                (void)apart;
                dget_(h[1], y, ny * 4);
                if (EMU) {
                    same_bits_by_(what, h[0], h[1], ny, 4, "the GEMM and the pass");
                } else {
                    float most = 0.0f;
                    for (size_t i = 0; i < ny; i++) most = fmaxf(most, fabsf(h[1][i]));
                    for (size_t i = 0; i < ny; i++)
                        ck_assert_msg(fabsf(h[0][i] - h[1][i]) <= 1e-5f * most,
                                      "%s: element %zu: %.9g, apart %.9g", what, i, h[0][i],
                                      h[1][i]);
                }
            }
    /* a bias off 16-byte alignment: the GEMM and the pass */
    ddp_cuda_lt_forget();
    ck_assert_int_eq(fwd_calls_("cublasLtMatmul", n, in, out, x, w, b + 1, y, 1), 0);
    CU(ddp_cuda_set_bf16_gemm(0));
    dfree_(x), dfree_(w), dfree_(b), dfree_(y);
    free(hx), free(hw), free(hb), free(h[0]), free(h[1]);
}
END_TEST

/* Under bf16 GEMMs a dense layer's output that only the next dense layer
 * reads is kept in bf16 (ddp_cuda_act_bf16): two layers, the first with a
 * fused ReLU, give the bits of the same layers on an fp32 output (the
 * output is the rounding of the fp32 one; the second layer's output, the
 * gradients of both and the ReLU's mask are the same), through cuBLASLt's
 * epilogue and through the pass that runs where it has no algorithm. */
START_TEST(bf16_act_outputs)
{
    test_seed(135);
    const int n = 33, in = 24, hid = 40, out = 16;
    const size_t nx = (size_t)n * in, nh = (size_t)n * hid, ny = (size_t)n * out;
    const size_t nw1 = (size_t)hid * in, nw2 = (size_t)out * hid;
    float *hx = test_fvec(nx, 1.0f), *hw1 = test_fvec(nw1, 0.5f), *hb1 = test_fvec(hid, 0.5f);
    float *hw2 = test_fvec(nw2, 0.5f), *hb2 = test_fvec(out, 0.5f), *hdy = test_fvec(ny, 1.0f);
    float *x = dput_(hx, nx * 4), *w1 = dput_(hw1, nw1 * 4), *b1 = dput_(hb1, hid * 4);
    float *w2 = dput_(hw2, nw2 * 4), *b2 = dput_(hb2, out * 4), *dy = dput_(hdy, ny * 4);
    float *z = dput_(NULL, ny * 4), *dh = dput_(NULL, nh * 4), *dx = dput_(NULL, nx * 4);
    float *g[4] = {dput_(NULL, nw1 * 4), dput_(NULL, hid * 4), dput_(NULL, nw2 * 4),
                   dput_(NULL, out * 4)};
    const size_t gn[4] = {nw1, (size_t)hid, nw2, (size_t)out};
    /* [case][z, dx, dw1, db1, dw2, db2, h] on the host */
    float *r[3][7];
    CU(ddp_cuda_set_bf16_gemm(1));
    for (int c = 0; c < 3; c++) { /* fp32 output; bf16 output; bf16 with no cuBLASLt */
        float *h = dput_(NULL, nh * 4);
        if (c > 0) CU(ddp_cuda_act_bf16(h, nh));
#if EMU
        if (c == 2) {
            setenv("DDP_EMU_FAIL",
                   "cublasLtMatmulAlgoGetHeuristic:1,cublasLtMatmulAlgoGetHeuristic:2", 1);
            ddp_emu_reload_env();
        }
#endif
        ddp_cuda_lt_forget();
        CU(ddp_cuda_linear_fwd(n, in, hid, x, w1, b1, h, 1));
        CU(ddp_cuda_linear_fwd(n, hid, out, h, w2, b2, z, 0));
        CU(ddp_cuda_linear_bwd(n, hid, out, h, w2, dy, dh, g[2], g[3], 0.0f, NULL, NULL));
        CU(ddp_cuda_linear_bwd(n, in, hid, x, w1, dh, dx, g[0], g[1], 0.0f, h, NULL));
#if EMU
        unsetenv("DDP_EMU_FAIL");
        ddp_emu_reload_env();
#endif
        r[c][0] = hnew_(ny * 4), r[c][1] = hnew_(nx * 4), r[c][6] = hnew_(nh * 4);
        dget_(r[c][0], z, ny * 4);
        dget_(r[c][1], dx, nx * 4);
        for (int k = 0; k < 4; k++) {
            r[c][2 + k] = hnew_(gn[k] * 4);
            dget_(r[c][2 + k], g[k], gn[k] * 4);
        }
        dget_(r[c][6], h, c > 0 ? nh * 2 : nh * 4);
        dfree_(h);
    }
    CU(ddp_cuda_set_bf16_gemm(0));
    /* the kept output: the rounding of the fp32 one */
    uint16_t *want = hnew_(nh * 2);
    for (size_t i = 0; i < nh; i++) want[i] = ddp_f32_to_bf16(r[0][6][i]);
    const char *names[6] = {"z", "dx", "dw1", "db1", "dw2", "db2"};
    const size_t counts[6] = {ny, nx, nw1, (size_t)hid, nw2, (size_t)out};
    for (int c = 1; c < 3; c++) {
        char what[64];
        snprintf(what, sizeof what, "bf16 output%s h", c == 2 ? " (no cuBLASLt)" : "");
        if (EMU) {
            same_bits_by_(what, r[c][6], want, nh, 2, "the fp32 output rounded");
        } else { /* a GPU's two GEMM kernels may sum in other orders: one bf16 step apart */
            const uint16_t *got = (const uint16_t *)r[c][6];
            for (size_t i = 0; i < nh; i++)
                ck_assert_msg(abs((int)got[i] - (int)want[i]) <= 1 ||
                                  ((got[i] | want[i]) & 0x7fff) == 0,
                              "%s: element %zu: 0x%04x, the fp32 output rounded 0x%04x", what, i,
                              got[i], want[i]);
        }
        for (int k = 0; k < 6; k++) {
            snprintf(what, sizeof what, "bf16 output%s %s", c == 2 ? " (no cuBLASLt)" : "",
                     names[k]);
            if (EMU || c == 2) same_bits_by_(what, r[c][k], r[c == 2 ? 1 : 0][k], counts[k], 4,
                                            "the fp32 output's");
        }
    }
    free(want);
    for (int c = 0; c < 3; c++)
        for (int k = 0; k < 7; k++) free(r[c][k]);
    float *dev[] = {x, w1, b1, w2, b2, dy, z, dh, dx, g[0], g[1], g[2], g[3]};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) dfree_(dev[i]);
    free(hx), free(hw1), free(hb1), free(hw2), free(hb2), free(hdy);
}
END_TEST

/* The ReLU after a block's add reads the gradients convolutions computed
 * for its output in bf16 (ddp_cuda_grad_bf16: dy, dy2 or both, the model's
 * grad16_): dx is the bits relu_bwd gives on their values widened to fp32,
 * for a mask with zeros, negatives and a NaN, over more than one
 * grid-stride pass; and with one gradient only. */
START_TEST(relu_bwd_bf16_grads)
{
    test_seed(157);
    const size_t n = (size_t)3 * 1024 * 1024 + 17;
    float *hx = test_fvec(n, 1.0f), *hdy = test_fvec(n, 4.0f), *hdy2 = test_fvec(n, 4.0f);
    for (size_t i = 0; i < n; i += 7) hx[i] = 0.0f;
    hx[n / 2] = NAN;
    float *wdy, *wdy2;
    uint16_t *h16 = bf16_of_(hdy, n, &wdy), *h16b = bf16_of_(hdy2, n, &wdy2);
    float *x = dput_(hx, n * 4), *dx = dput_(NULL, n * 4);
    float *fdy = dput_(wdy, n * 4), *fdy2 = dput_(wdy2, n * 4);
    float *want = hnew_(n * 4), *got = hnew_(n * 4);
    CU(ddp_cuda_set_bf16_gemm(1));
    for (int two = 0; two < 2; two++)
        for (int kept = 1; kept < (two ? 4 : 2); kept++) { /* bit 0: dy in bf16, bit 1: dy2 */
            float *gdy = dput_(kept & 1 ? (const void *)h16 : wdy, n * (kept & 1 ? 2 : 4));
            float *gdy2 = two ? dput_(kept & 2 ? (const void *)h16b : wdy2, n * (kept & 2 ? 2 : 4))
                              : NULL;
            if (kept & 1) CU(ddp_cuda_grad_bf16(gdy, n));
            if (kept & 2) CU(ddp_cuda_grad_bf16(gdy2, n));
            CU(ddp_cuda_relu_bwd(n, x, fdy, dx, two ? fdy2 : NULL));
            dget_(want, dx, n * 4);
            CU(ddp_cuda_relu_bwd(n, x, gdy, dx, gdy2));
            dget_(got, dx, n * 4);
            char what[80];
            snprintf(what, sizeof what, "relu_bwd, %s in bf16%s", kept == 3 ? "dy and dy2"
                     : kept == 2 ? "dy2" : "dy", two ? "" : " (no dy2)");
            same_bits_by_(what, got, want, n, 4, "their fp32 values'");
            if (kept & 1) CU(ddp_cuda_grad_bf16(gdy, 0));
            if (kept & 2) CU(ddp_cuda_grad_bf16(gdy2, 0));
            dfree_(gdy);
            if (gdy2) dfree_(gdy2);
        }
    CU(ddp_cuda_set_bf16_gemm(0));
    dfree_(x), dfree_(dx), dfree_(fdy), dfree_(fdy2);
    free(hx), free(hdy), free(hdy2), free(wdy), free(wdy2), free(h16), free(h16b);
    free(want), free(got);
}
END_TEST

/* An fp32 output with a bf16 copy beside it (ddp_cuda_act_copy16): each
 * writer -- add (with its ReLU), bn_fwd with a block's residual and ReLU,
 * maxpool_fwd, bn_maxpool_fwd -- writes y's bits as without the copy, and
 * a convolution through cuDNN reading y takes the copy (on the emulation
 * checked against y's rounding when the stream reaches it: a wrong one
 * aborts) instead of rounding y: one rounding fewer in its forward (its
 * weight's only), and the same output, input gradient and weight
 * gradient, bit for bit, as without one. */
START_TEST(act_copy16_writers)
{
    test_seed(163);
    const int n = 3, c = 4, h = 10, w = 10, oc = 5;
    const size_t nx = (size_t)n * c * h * w;
    ddp_cuda_pool_t pd = {n, c, h, w, 2, 2, 0, 5, 5};
    const size_t np = (size_t)n * c * 5 * 5, nw = (size_t)oc * c * 9;
    float *ha = test_fvec(nx, 2.0f), *hb = test_fvec(nx, 2.0f), *hg = test_fvec(c, 1.0f);
    float *hbt = test_fvec(c, 1.0f), *hm = test_fvec(c, 0.5f), *hi = test_fvec(c, 1.0f);
    float *hw = test_fvec(nw, 0.5f), *hdy = test_fvec((size_t)n * oc * h * w, 1.0f);
    for (int i = 0; i < c; i++) hi[i] = 0.5f + fabsf(hi[i]);
    float *a = dput_(ha, nx * 4), *b = dput_(hb, nx * 4), *gam = dput_(hg, c * 4);
    float *bet = dput_(hbt, c * 4), *mean = dput_(hm, c * 4), *inv = dput_(hi, c * 4);
    float *wt = dput_(hw, nw * 4), *dyc = dput_(hdy, (size_t)n * oc * h * w * 4);
    int32_t *am = dput_(NULL, np * 4);
    CU(ddp_cuda_set_bf16_gemm(1));
    ddp_cuda_dnn_enable(1);
    for (int op = 0; op < 4; op++) {
        const int sh = op >= 2 ? 5 : h; /* the output's height and width */
        const size_t ny = (size_t)n * c * sh * sh, nz = (size_t)n * oc * sh * sh;
        ddp_cuda_conv_t g = {n, c, sh, sh, oc, 3, 1, 1, sh, sh};
        void *ws = dput_(NULL, ddp_cuda_conv_ws_bytes(&g));
        float *r[2][4]; /* [without, with the copy][y, the conv's z, dx, dw] */
        const size_t cnt[4] = {ny, nz, ny, nw};
        int rounds[2];
        for (int with = 0; with < 2; with++) {
            float *y = dput_(NULL, ny * 4), *z = dput_(NULL, nz * 4), *dx = dput_(NULL, ny * 4);
            float *dw = dput_(NULL, nw * 4);
            if (with) CU(ddp_cuda_act_copy16(y, ny));
            switch (op) {
            case 0: CU(ddp_cuda_add(nx, a, b, y, 1)); break;
            case 1: CU(ddp_cuda_bn_fwd(n, c, h * w, a, mean, inv, gam, bet, y, 1, b)); break;
            case 2: CU(ddp_cuda_maxpool_fwd(&pd, a, y, am)); break;
            default: CU(ddp_cuda_bn_maxpool_fwd(&pd, a, mean, inv, gam, bet, 1, y, am)); break;
            }
            ddp_cuda_dnn_forget();
            ddp_cuda_cost_record(1);
            CU(ddp_cuda_conv_fwd(&g, y, wt, NULL, z, ws));
            CU(ddp_cuda_sync());
            rounds[with] = logged_("to_bf16_kernel");
            ddp_cuda_cost_record(0);
            CU(ddp_cuda_conv_bwd(&g, y, wt, dyc, dx, dw, NULL, 0.0f, ws));
            float *out[4] = {y, z, dx, dw};
            for (int k = 0; k < 4; k++) {
                r[with][k] = hnew_(cnt[k] * 4);
                dget_(r[with][k], out[k], cnt[k] * 4);
            }
            dfree_(y), dfree_(z), dfree_(dx), dfree_(dw); /* y's copy with it */
        }
        static const char *const ops[] = {"add + ReLU", "bn_fwd + residual + ReLU",
                                          "maxpool_fwd", "bn_maxpool_fwd"};
        static const char *const names[] = {"y", "the convolution's output", "its dx", "its dw"};
        char what[112];
        for (int k = 0; k < 4; k++) {
            snprintf(what, sizeof what, "%s with a bf16 copy of y: %s", ops[op], names[k]);
            same_bits_by_(what, r[1][k], r[0][k], cnt[k], 4, "without one");
            free(r[0][k]), free(r[1][k]);
        }
#if EMU
        ck_assert_msg(rounds[0] == 2 && rounds[1] == 1,
                      "%s: the convolution's forward rounded %d values without y's copy, %d with "
                      "it; expected 2 (weight, y) and 1 (weight)",
                      ops[op], rounds[0], rounds[1]);
#else
        (void)rounds;
#endif
        dfree_(ws);
    }
    CU(ddp_cuda_set_bf16_gemm(0));
    void *dev[] = {a, b, gam, bet, mean, inv, am, wt, dyc};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) dfree_(dev[i]);
    free(ha), free(hb), free(hg), free(hbt), free(hm), free(hi), free(hw), free(hdy);
}
END_TEST

/* Under bf16 GEMMs through cuDNN, a convolution's output that only a
 * BatchNorm reads and the BatchNorm's (fused ReLU) output that only a
 * convolution reads are kept in bf16 (ddp_cuda_act_bf16, act16.h), and so
 * their gradients (ddp_cuda_grad_bf16): conv -> BN + ReLU -> conv, forward
 * and backward, gives the bits of the same layers on fp32 outputs and
 * gradients (the kept ones the rounding of the fp32 ones; the last output,
 * the weight gradients, the input's gradient and the BatchNorm's
 * statistics the same), with one rounding and one widening pass fewer in
 * the forward and in the backward.  A 1x1 output runs the BatchNorm's
 * hw = 1 kernels.  With a bias on the first convolution, its output is
 * kept in bf16 without it (ddp_cuda_act_bias), the BatchNorm adding it as
 * it reads: the bf16 values widened plus the bias are the fp32 output's,
 * and everything after the same bits; its gradient kept in bf16 too, the
 * BatchNorm's backward summing it for the bias gradient: the same bits as
 * the convolution's own sums of the fp32 gradient. */
START_TEST(bf16_act_conv_bn)
{
    test_seed(139);
    static const int shapes[][9] = {/* n c h w oc1 k pad oc2(k2) bias1 */
                                    {4, 3, 6, 6, 8, 3, 1, 5, 0},
                                    {6, 3, 3, 3, 8, 3, 0, 4, 0},
                                    {4, 3, 6, 6, 8, 3, 1, 5, 1},
                                    {6, 3, 3, 3, 8, 3, 0, 4, 1}};
    for (size_t t = 0; t < sizeof shapes / sizeof *shapes; t++) {
        const int *q = shapes[t];
        const int n = q[0], oh = q[2] + 2 * q[6] - q[5] + 1, ow = q[3] + 2 * q[6] - q[5] + 1;
        const int bias = q[8]; /* conv1's, carried by its output kept in bf16 */
        const int k2 = oh > 1 ? 3 : 1, p2 = oh > 1 ? 1 : 0, hw = oh * ow;
        ddp_cuda_conv_t c1 = {n, q[1], q[2], q[3], q[4], q[5], 1, q[6], oh, ow};
        ddp_cuda_conv_t c2 = {n, q[4], oh, ow, q[7], k2, 1, p2, oh, ow};
        const size_t nx = (size_t)n * q[1] * q[2] * q[3], nh = (size_t)n * q[4] * hw;
        const size_t nz = (size_t)n * q[7] * hw, nc = (size_t)q[4];
        const size_t nw1 = (size_t)q[4] * q[1] * q[5] * q[5], nw2 = (size_t)q[7] * q[4] * k2 * k2;
        float *hx = test_fvec(nx, 1.0f), *hw1 = test_fvec(nw1, 0.5f), *hw2 = test_fvec(nw2, 0.5f);
        float *hg = test_fvec(nc, 1.0f), *hb = test_fvec(nc, 0.5f), *hdz = test_fvec(nz, 1.0f);
        float *x = dput_(hx, nx * 4), *w1 = dput_(hw1, nw1 * 4), *w2 = dput_(hw2, nw2 * 4);
        float *gam = dput_(hg, nc * 4), *bet = dput_(hb, nc * 4), *dz = dput_(hdz, nz * 4);
        float *hb1 = test_fvec(nc, 1.0f), *b1 = bias ? dput_(hb1, nc * 4) : NULL;
        float *db1 = bias ? dput_(NULL, nc * 4) : NULL;
        float *z = dput_(NULL, nz * 4), *dh2 = dput_(NULL, nh * 4), *dh1 = dput_(NULL, nh * 4);
        float *dx = dput_(NULL, nx * 4), *dw1 = dput_(NULL, nw1 * 4), *dw2 = dput_(NULL, nw2 * 4);
        float *dg = dput_(NULL, nc * 4), *db = dput_(NULL, nc * 4), *mean = dput_(NULL, nc * 4);
        float *inv = dput_(NULL, nc * 4), *rm = dput_(NULL, nc * 4), *rv = dput_(NULL, nc * 4);
        double *st = dput_(NULL, 16 * nc), *gst = dput_(NULL, 16 * nc);
        const size_t wsb = ddp_cuda_conv_ws_bytes(&c1) > ddp_cuda_conv_ws_bytes(&c2)
                               ? ddp_cuda_conv_ws_bytes(&c1)
                               : ddp_cuda_conv_ws_bytes(&c2);
        void *ws = dput_(NULL, wsb);
        /* [fp32 outputs, bf16][z, dx, dw1, dw2, dgamma, dbeta, db1, h1, h2, dh1, dh2];
         * with bias, conv1's bias gradient from the BatchNorm's sums of dh1
         * (ddp_cuda_act_bias) against its own over fp32 dh1 */
        float *r[2][11];
        float *outs[7] = {z, dx, dw1, dw2, dg, db, db1};
        const size_t cnt[7] = {nz, nx, nw1, nw2, nc, nc, bias ? nc : 0};
        int rounds[2][2], widens[2][2]; /* [case][forward, backward] */
        CU(ddp_cuda_set_bf16_gemm(1));
        ddp_cuda_dnn_enable(1);
        for (int a = 0; a < 2; a++) {
            float *h1 = dput_(NULL, nh * (a ? 2 : 4)), *h2 = dput_(NULL, nh * (a ? 2 : 4));
            if (a) CU(ddp_cuda_act_bf16(h1, nh)), CU(ddp_cuda_act_bf16(h2, nh));
            if (a && bias) CU(ddp_cuda_act_bias(h1, b1));
            ddp_cuda_dnn_forget();
            ddp_cuda_cost_record(1);
            CU(ddp_cuda_conv_fwd(&c1, x, w1, b1, h1, ws));
            CU(ddp_cuda_bn_stats(n, q[4], hw, h1, st));
            CU(ddp_cuda_bn_finalize(q[4], st, (double)n * hw, 1e-5f, 0.1f, 1, mean, inv, rm, rv));
            CU(ddp_cuda_bn_fwd(n, q[4], hw, h1, mean, inv, gam, bet, h2, 1, NULL));
            CU(ddp_cuda_conv_fwd(&c2, h2, w2, NULL, z, ws));
            CU(ddp_cuda_sync());
            rounds[a][0] = logged_("to_bf16_kernel");
            widens[a][0] = logged_by_("widen_kernel", 1);
            ddp_cuda_cost_record(1);
            if (a) CU(ddp_cuda_grad_bf16(dh2, nh)), CU(ddp_cuda_grad_bf16(dh1, nh));
            CU(ddp_cuda_conv_bwd(&c2, h2, w2, dz, dh2, dw2, NULL, 0.0f, ws));
            CU(ddp_cuda_bn_bwd_stats(n, q[4], hw, h1, dh2, mean, inv, gst, dg, db, 0.0f, gam, bet));
            CU(ddp_cuda_bn_bwd_data(n, q[4], hw, h1, dh2, mean, inv, gam, gst, (double)n * hw, dh1,
                                    bet));
            CU(ddp_cuda_conv_bwd(&c1, x, w1, dh1, dx, dw1, db1, 0.0f, ws));
            CU(ddp_cuda_sync());
            rounds[a][1] = logged_("to_bf16_kernel");
            widens[a][1] = logged_by_("widen_kernel", 1);
            ddp_cuda_cost_record(0);
            r[a][9] = hnew_(nh * 4), r[a][10] = hnew_(nh * 4);
            dget_(r[a][9], dh1, nh * (a ? 2 : 4));
            dget_(r[a][10], dh2, nh * (a ? 2 : 4));
            if (a) CU(ddp_cuda_grad_bf16(dh2, 0)), CU(ddp_cuda_grad_bf16(dh1, 0));
            for (int k = 0; k < 7; k++) {
                r[a][k] = hnew_(cnt[k] * 4 + 4);
                if (cnt[k]) dget_(r[a][k], outs[k], cnt[k] * 4);
            }
            r[a][7] = hnew_(nh * 4), r[a][8] = hnew_(nh * 4);
            dget_(r[a][7], h1, nh * (a ? 2 : 4));
            dget_(r[a][8], h2, nh * (a ? 2 : 4));
            dfree_(h1), dfree_(h2);
        }
        CU(ddp_cuda_set_bf16_gemm(0));
        char what[96];
        static const char *const names[11] = {"z",     "dx", "dw1", "dw2", "dgamma", "dbeta",
                                              "dbias1", "h1", "h2",  "dh1", "dh2"};
        for (int k = 0; k < 7; k++) {
            snprintf(what, sizeof what, "conv-BN-conv (%d) outputs in bf16: %s", (int)t, names[k]);
            same_bits_by_(what, r[1][k], r[0][k], cnt[k], 4, "with fp32 outputs");
        }
        uint16_t *want = hnew_(nh * 2);
        for (int k = 7; k < 11; k++) {
            snprintf(what, sizeof what, "conv-BN-conv (%d) outputs in bf16: %s", (int)t, names[k]);
            if (bias && k == 7) { /* without its bias: widened, plus the bias, fp32's */
                float *back = hnew_(nh * 4);
                const uint16_t *h16 = (const uint16_t *)r[1][k];
                for (size_t i = 0; i < nh; i++)
                    back[i] = ddp_bf16_to_f32(h16[i]) + hb1[(i / (size_t)hw) % nc];
                same_bits_by_(what, back, r[0][k], nh, 4, "fp32's (bias added)");
                free(back);
            } else {
                for (size_t i = 0; i < nh; i++) want[i] = ddp_f32_to_bf16(r[0][k][i]);
                same_bits_by_(what, r[1][k], want, nh, 2, "the fp32 output rounded");
            }
        }
        for (int p = 0; p < 2; p++)
            ck_assert_msg(rounds[1][p] == rounds[0][p] - 1 && widens[1][p] == widens[0][p] - 1,
                          "conv-BN-conv (%d) %s: %d roundings and %d widenings with bf16 "
                          "outputs, %d and %d without",
                          (int)t, p ? "backward" : "forward", rounds[1][p], widens[1][p],
                          rounds[0][p], widens[0][p]);
        free(want);
        for (int a = 0; a < 2; a++)
            for (int k = 0; k < 11; k++) free(r[a][k]);
        if (bias) dfree_(b1), dfree_(db1);
        free(hb1);
        void *dev[] = {x,  w1,   w2,  gam, bet, dz, z,  dh2, dh1, dx,
                       dw1, dw2, dg,  db,  mean, inv, rm, rv,  st,  gst, ws};
        for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) dfree_(dev[i]);
        free(hx), free(hw1), free(hw2), free(hg), free(hb), free(hdz);
    }
}
END_TEST

/* The same where cuDNN runs no pass (disabled): a convolution's input and
 * output kept in bf16, and their gradients, take the im2col path through
 * fp32 scratch (the input and output gradient widened, the output and
 * input gradient rounded into place), one group of cuDNN's at a time: the
 * output and input gradient the rounding of the fp32 path's on the same
 * input values, the weight gradient its bits.  The second shape spans
 * three groups (2^18 output pixels each, two samples). */
static void bf16_act_im2col_case_(int n, int c, int h, int w, int oc)
{
    ddp_cuda_conv_t d = {n, c, h, w, oc, 3, 1, 1, h, w};
    const size_t nx = (size_t)n * c * h * w, ny = (size_t)n * oc * h * w, nw = (size_t)oc * c * 9;
    float *hx = test_fvec(nx, 1.0f), *hwt = test_fvec(nw, 0.5f), *hdy = test_fvec(ny, 1.0f), *hxw;
    float *hdyw;
    uint16_t *hx16 = bf16_of_(hx, nx, &hxw), *hdy16 = bf16_of_(hdy, ny, &hdyw);
    float *wt = dput_(hwt, nw * 4), *dx = dput_(NULL, nx * 4);
    float *dw = dput_(NULL, nw * 4), *ws = dput_(NULL, ddp_cuda_conv_ws_bytes(&d));
    float *r[2][3];
    CU(ddp_cuda_set_bf16_gemm(1));
    ddp_cuda_dnn_enable(0);
    for (int a = 0; a < 2; a++) {
        float *x = dput_(a ? (const void *)hx16 : hxw, nx * (a ? 2 : 4));
        float *y = dput_(NULL, ny * (a ? 2 : 4));
        float *dy = dput_(a ? (const void *)hdy16 : hdyw, ny * (a ? 2 : 4));
        if (a) CU(ddp_cuda_act_bf16(x, nx)), CU(ddp_cuda_act_bf16(y, ny));
        if (a) CU(ddp_cuda_grad_bf16(dy, ny)), CU(ddp_cuda_grad_bf16(dx, nx));
        CU(ddp_cuda_conv_fwd(&d, x, wt, NULL, y, ws));
        CU(ddp_cuda_conv_bwd(&d, x, wt, dy, dx, dw, NULL, 0.0f, ws));
        r[a][0] = hnew_(ny * 4), r[a][1] = hnew_(nx * 4), r[a][2] = hnew_(nw * 4);
        dget_(r[a][0], y, ny * (a ? 2 : 4));
        dget_(r[a][1], dx, nx * (a ? 2 : 4));
        dget_(r[a][2], dw, nw * 4);
        if (a) CU(ddp_cuda_grad_bf16(dx, 0));
        dfree_(x), dfree_(y), dfree_(dy);
    }
    ddp_cuda_dnn_enable(1);
    CU(ddp_cuda_set_bf16_gemm(0));
    uint16_t *want = hnew_((ny > nx ? ny : nx) * 2);
    for (size_t i = 0; i < ny; i++) want[i] = ddp_f32_to_bf16(r[0][0][i]);
    char what[96];
    snprintf(what, sizeof what, "im2col conv %dx%d, bf16 input and output: y", h, w);
    same_bits_by_(what, r[1][0], want, ny, 2, "the fp32 output rounded");
    for (size_t i = 0; i < nx; i++) want[i] = ddp_f32_to_bf16(r[0][1][i]);
    snprintf(what, sizeof what, "im2col conv %dx%d, bf16 input and output: dx", h, w);
    same_bits_by_(what, r[1][1], want, nx, 2, "the fp32 gradient rounded");
    snprintf(what, sizeof what, "im2col conv %dx%d, bf16 input and output: dw", h, w);
    same_bits_by_(what, r[1][2], r[0][2], nw, 4, "fp32's");
    free(want);
    for (int a = 0; a < 2; a++)
        for (int k = 0; k < 3; k++) free(r[a][k]);
    dfree_(wt), dfree_(dx), dfree_(dw), dfree_(ws);
    free(hx), free(hwt), free(hdy), free(hx16), free(hxw), free(hdy16), free(hdyw);
}

START_TEST(bf16_act_conv_im2col)
{
    test_seed(140);
    bf16_act_im2col_case_(5, 3, 7, 7, 6);
    bf16_act_im2col_case_(5, 1, 300, 300, 2);
}
END_TEST

/* Under bf16 GEMMs the loss's gradient for a dense last layer is kept in
 * bf16 with its column sums (ddp_cuda_xent_dense) for the layer's next
 * backward instead of written to dlogits: the loss sums those of
 * ddp_cuda_xent (hits exact, losses to the order of the blocks' sums), the
 * layer's weight and input gradients its bits (the same rounded gradient),
 * the bias gradient within the sum's rounding (other order), with beta 0
 * and 1; dlogits is not written.  A shape it does not cover runs xent. */
static void xent_dense_case_(int n, int classes, float beta)
{
    const int in = 24;
    const size_t count = (size_t)n * classes, nx = (size_t)n * in, nw = (size_t)classes * in;
    float *hz = test_fvec(count, 5.0f), *hx = test_fvec(nx, 1.0f), *hw = test_fvec(nw, 0.5f);
    float *hdb = test_fvec(classes, 1.0f);
    int32_t *hy = hnew_((size_t)n * sizeof *hy);
    for (int i = 0; i < n; i++) hy[i] = i % 11 == 3 ? -1 : (int32_t)(test_bits() % (uint64_t)classes);
    float *z = dput_(hz, count * 4), *x = dput_(hx, nx * 4), *w = dput_(hw, nw * 4);
    int32_t *y = dput_(hy, (size_t)n * sizeof *hy);
    float *pattern = hnew_(count * 4);
    for (size_t i = 0; i < count; i++) pattern[i] = -7.0f;
    float *out[2][4]; /* [plain, dense][dl, dx, dw, db] on the host */
    double acc[2][2];
    CU(ddp_cuda_set_bf16_gemm(1));
    for (int f = 0; f < 2; f++) {
        float *dl = dput_(pattern, count * 4), *dx = dput_(NULL, nx * 4), *dw = dput_(NULL, nw * 4);
        float *db = dput_(hdb, (size_t)classes * 4);
        double *dacc = dput_((double[2]){0.5, 1.0}, sizeof acc[0]);
        int (*loss)(int, int, const float *, const int32_t *, float, float, float *, double *) =
            f ? ddp_cuda_xent_dense : ddp_cuda_xent;
        CU(loss(n, classes, z, y, 0.1f, 1.0f / n, dl, dacc));
        CU(ddp_cuda_linear_bwd(n, in, classes, x, w, dl, dx, dw, db, beta, NULL, NULL));
        const size_t sizes[4] = {count, nx, nw, (size_t)classes};
        const float *dev[4] = {dl, dx, dw, db};
        for (int k = 0; k < 4; k++) {
            out[f][k] = hnew_(sizes[k] * 4);
            dget_(out[f][k], dev[k], sizes[k] * 4);
        }
        dget_(acc[f], dacc, sizeof acc[f]);
        dfree_(dl), dfree_(dx), dfree_(dw), dfree_(db), dfree_(dacc);
    }
    CU(ddp_cuda_set_bf16_gemm(0));
    char what[80];
    snprintf(what, sizeof what, "xent_dense n=%d classes=%d beta=%g", n, classes, beta);
    const int covered = classes > 1024 && classes % 4 == 0 && classes <= 8192;
    if (covered) {
        same_bits_by_(what, out[1][0], pattern, count, 4, "dlogits as it was"); /* not written */
    } else {
        same_bits_by_(what, out[1][0], out[0][0], count, 4, "xent's dlogits");
    }
    rel_close_(what, acc[1][0], acc[0][0], 1e-12, 0);
    ck_assert_msg(acc[1][1] == acc[0][1], "%s: hits %g, xent %g", what, acc[1][1], acc[0][1]);
    same_bits_by_(what, out[1][1], out[0][1], nx, 4, "dx through xent");
    same_bits_by_(what, out[1][2], out[0][2], nw, 4, "dw through xent");
    for (int j = 0; j < classes; j++) { /* the bias gradient: the column's sum, another order */
        double mag = beta * fabs(hdb[j]);
        for (int i = 0; i < n; i++) mag += fabs(out[0][0][(size_t)i * classes + j]);
        ck_assert_msg(fabs(out[1][3][j] - out[0][3][j]) <= 2.0 * (n + 1) * mag / 16777216.0,
                      "%s: db[%d] %.9g, through xent %.9g", what, j, out[1][3][j], out[0][3][j]);
    }
    for (int f = 0; f < 2; f++)
        for (int k = 0; k < 4; k++) free(out[f][k]);
    dfree_(z), dfree_(x), dfree_(w), dfree_(y);
    free(hz), free(hx), free(hw), free(hdb), free(hy), free(pattern);
}

START_TEST(xent_dense_bf16)
{
    test_seed(136);
    xent_dense_case_(37, 1032, 0.0f);
    xent_dense_case_(300, 2048, 1.0f); /* more rows than blocks: each takes every 128th */
    xent_dense_case_(5, 8192, 0.0f);
    xent_dense_case_(9, 10, 0.0f);   /* a warp per row: xent */
    xent_dense_case_(9, 1030, 1.0f); /* not a multiple of 4: xent */
}
END_TEST

/* The to_bf16 launches of one dense layer's forward (its roundings). */
static int fwd_roundings_(int n, int in, int out, const float *x, const float *w, const float *b,
                          float *y)
{
    ddp_cuda_cost_record(1);
    CU(ddp_cuda_linear_fwd(n, in, out, x, w, b, y, 0));
    CU(ddp_cuda_sync());
    ddp_cuda_cost_record(0);
    const ddp_cuda_cost_t *e;
    size_t count = ddp_cuda_cost_log(&e);
    int r = 0;
    for (size_t i = 0; i < count; i++) r += strcmp(e[i].name, "to_bf16_kernel") == 0;
    return r;
}

/* --precision bf16 with the parameters' mirror (cuda/bf16.h): a dense
 * layer's weight and bias in one flat buffer, the parameters.  A forward
 * after an optimizer step reads the weight's copy the optimizer wrote (one
 * rounding, the input's, instead of two) and gives the bits of the same
 * forward on a weight outside the mirror (a copy of it); after a write into
 * the buffer by the backend (upload, copy, a fill of the bias alone) or one
 * reported by the trainer (a collective's, here a scaling), the
 * next forward rounds what was written again (on the emulation a stale copy
 * aborts at the GEMM); a weight whose copy would not be 16-byte aligned is
 * rounded by every forward. */
START_TEST(bf16_params_mirror)
{
    test_seed(134);
    const int n = 17, in = 29, out = 45;
    const size_t nx = (size_t)n * in, nw = (size_t)out * in, ny = (size_t)n * out;
    static const char *what[] = {"the first forward",   "after an SGD step",
                                 "after an upload",     "after AdamW, the bias zeroed",
                                 "after a reported write", "after a copy"};
    static const int want[] = {2, 1, 2, 1, 2, 2};
    /* the weight at offset 0 of the parameters, then at offset 3: a copy
     * there would not be 16-byte aligned, and the forward rounds it always */
    for (size_t w0 = 0; w0 <= 3; w0 += 3) {
        const size_t np = w0 + nw + out;
        float *hp = test_fvec(np, 0.5f), *hx = test_fvec(nx, 1.0f), *hg = test_fvec(np, 1.0f);
        float *hp2 = test_fvec(np, 0.5f);
        float *P = dput_(hp, np * 4), *x = dput_(hx, nx * 4), *g = dput_(hg, np * 4);
        float *P2 = dput_(NULL, np * 4), *src = dput_(hp2, np * 4), *mom = dput_(NULL, np * 4);
        float *v = dput_(NULL, np * 4), *y = dput_(NULL, ny * 4), *y2 = dput_(NULL, ny * 4);
        float *got = hnew_(ny * 4), *ref = hnew_(ny * 4);
        float *w = P + w0, *b = P + w0 + nw;
        CU(ddp_cuda_set_bf16_gemm(1));
        CU(ddp_cuda_bf16_params(P, np));
        for (int r = 0; r < 6; r++) {
            if (r == 1) CU(ddp_cuda_sgd_step(np, P, g, mom, 0.1f, 0.9f, 0, 1e-4f, 1));
            if (r == 2) CU(ddp_cuda_upload(w, hp2, nw * 4));
            if (r == 3) {
                CU(ddp_cuda_adamw_step(np, P, g, mom, v, 1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, 1));
                CU(ddp_cuda_zero(b, out * 4));
            }
            if (r == 4) { /* a write the mirror does not follow, reported */
                CU(ddp_cuda_scale(nw, w, 0.5f));
                CU(ddp_cuda_params_written(w, nw));
            }
            if (r == 5) CU(ddp_cuda_copy(P, src, np * 4));
            int k = fwd_roundings_(n, in, out, x, w, b, y), e = w0 ? 2 : want[r];
            ck_assert_msg(k == e, "%s (weight at %zu): %d roundings in the forward, expected %d",
                          what[r], w0, k, e);
            CU(ddp_cuda_copy(P2, P, np * 4));
            CU(ddp_cuda_linear_fwd(n, in, out, x, P2 + w0, P2 + w0 + nw, y2, 0));
            dget_(got, y, ny * 4);
            dget_(ref, y2, ny * 4);
            same_bits_by_(what[r], got, ref, ny, 4, "the weight outside the mirror");
        }
        CU(ddp_cuda_bf16_params(NULL, 0));
        CU(ddp_cuda_set_bf16_gemm(0));
        float *dev[] = {P, x, g, P2, src, mom, v, y, y2};
        for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) dfree_(dev[i]);
        float *all[] = {hp, hx, hg, hp2, got, ref};
        for (size_t i = 0; i < sizeof all / sizeof *all; i++) free(all[i]);
    }
}
END_TEST

#if EMU
/* A weight changed between a layer's forward and its backward (no forward
 * of the new weight): the emulation's check aborts (in a child). */
static void memo_stale_(void *unused)
{
    (void)unused;
    memo_layer_t L;
    memo_layer_init_(&L, 0);
    float *w2 = test_fvec(L.nw, 0.5f), *hdx = hnew_(L.nx * 4), *hdw = hnew_(L.nw * 4);
    CU(ddp_cuda_set_bf16_gemm(1));
    memo_fwd_(&L, L.x);
    CU(ddp_cuda_upload(L.w, w2, L.nw * 4));
    memo_bwd_(&L, L.x, L.w, hdx, hdw);
}

/* On the emulation a trainer that broke the order (a weight changed between
 * a layer's forward and its backward) is stopped, the copy named. */
START_TEST(bf16_memo_stale_aborts)
{
    test_seed(132);
    char msg[2048];
    test_child_aborts(memo_stale_, NULL, msg, sizeof msg);
    ck_assert_msg(strstr(msg, "the bf16 copy of a layer's weight kept from its forward") &&
                      strstr(msg, "changed between the two"),
                  "not the memo's message: %s", msg);
}
END_TEST
#endif

START_TEST(no_error_left)
{
    ck_assert_str_eq(ddp_cuda_last_error(), "");
}
END_TEST

Suite *test_suite(void)
{
    if (ddp_cuda_device_count() == 0) {
        fprintf(stderr, "check_cuda_ops: no GPU visible: skipped\n");
        exit(77);
    }
    if (ddp_cuda_init(0) != 0) {
        fprintf(stderr, "check_cuda_ops: ddp_cuda_init(0) failed: %s\n", ddp_cuda_last_error());
        exit(99);
    }
    Suite *s = suite_create("cuda_ops");
    TCase *t = tcase_create("elementwise");
    tcase_add_test(t, add_bits);
    tcase_add_test(t, relu_bits);
    tcase_add_test(t, gelu_matches);
    tcase_add_test(t, dropout_bits);
    tcase_add_test(t, scale_bits);
    tcase_add_test(t, half_casts_bits);
    suite_add_tcase(s, t);
    t = tcase_create("reductions");
    tcase_add_test(t, sumsq_deterministic);
    tcase_add_test(t, sumsq_many_bits);
    tcase_add_test(t, all_finite_matches);
    suite_add_tcase(s, t);
    t = tcase_create("losses");
    tcase_add_test(t, xent_matches);
    tcase_add_test(t, mse_matches);
    suite_add_tcase(s, t);
    t = tcase_create("optimizers");
    tcase_add_test(t, sgd_steps);
    tcase_add_test(t, adamw_steps);
    suite_add_tcase(s, t);
    t = tcase_create("layers");
    tcase_add_test(t, linear_matches);
    tcase_add_test(t, conv_matches);
    tcase_add_test(t, conv_groups_accumulate);
    tcase_add_test(t, conv_cudnn_bf16);
    tcase_add_test(t, pool_matches);
    tcase_add_test(t, bn_matches);
    tcase_add_test(t, bn_maxpool_bits);
    tcase_add_test(t, linear_lt_epilogue);
    suite_add_tcase(s, t);
    t = tcase_create("bf16");
    tcase_add_test(t, bf16_memo);
    tcase_add_test(t, bf16_linear_relu_fused);
    tcase_add_test(t, bf16_params_mirror);
    tcase_add_test(t, bf16_act_outputs);
    tcase_add_test(t, bf16_act_conv_bn);
    tcase_add_test(t, relu_bwd_bf16_grads);
    tcase_add_test(t, act_copy16_writers);
    tcase_add_test(t, bf16_act_conv_im2col);
    tcase_add_test(t, xent_dense_bf16);
#if EMU
    tcase_add_test(t, bf16_memo_stale_aborts);
#endif
    tcase_add_test(t, no_error_left);
    suite_add_tcase(s, t);
    return s;
}
