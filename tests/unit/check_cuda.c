/* check_cuda.c -- CUDA kernels against the CPU reference: on the GPU in
 * CUDA builds (skipped, exit 77, on machines without one, so CUDA builds
 * still pass `make check` on build hosts), on the CPU emulation of the CUDA
 * runtime otherwise -- where it runs first, before any GPU machine runs it
 * (tests/gpu/programs). */
#include <stdio.h>
#include <stdlib.h>

#include "ddp_cuda.h"
#include "tests.h"

START_TEST(relu_matches_cpu)
{
    size_t n = 1 << 20;
    float *x = malloc(n * 4), *dy = malloc(n * 4), *y = malloc(n * 4), *dx = malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)((int)(i % 2001) - 1000) / 7.f;
        dy[i] = (float)(i % 13) - 6.f;
    }
    void *dxd, *dyd, *dyy, *ddx;
    ck_assert_int_eq(ddp_cuda_malloc(&dxd, n * 4), 0);
    ck_assert_int_eq(ddp_cuda_malloc(&dyd, n * 4), 0);
    ck_assert_int_eq(ddp_cuda_malloc(&dyy, n * 4), 0);
    ck_assert_int_eq(ddp_cuda_malloc(&ddx, n * 4), 0);
    ck_assert_int_eq(ddp_cuda_upload(dxd, x, n * 4), 0);
    ck_assert_int_eq(ddp_cuda_upload(dyd, dy, n * 4), 0);
    ck_assert_int_eq(ddp_cuda_relu_fwd(n, dxd, dyy), 0);
    ck_assert_int_eq(ddp_cuda_relu_bwd(n, dxd, dyd, ddx, NULL), 0);
    ck_assert_int_eq(ddp_cuda_download(y, dyy, n * 4), 0);
    ck_assert_int_eq(ddp_cuda_download(dx, ddx, n * 4), 0);
    for (size_t i = 0; i < n; i++) {
        ck_assert_float_eq(y[i], x[i] > 0 ? x[i] : 0.f);
        ck_assert_float_eq(dx[i], x[i] > 0 ? dy[i] : 0.f);
    }
    ddp_cuda_free(dxd);
    ddp_cuda_free(dyd);
    ddp_cuda_free(dyy);
    ddp_cuda_free(ddx);
    free(x), free(dy), free(y), free(dx);
}
END_TEST

Suite *test_suite(void)
{
    if (ddp_cuda_device_count() == 0) {
        fprintf(stderr, "check_cuda: no GPU visible: skipped\n");
        exit(77);
    }
    /* the backend binds its device first: every allocation fails before */
    if (ddp_cuda_init(0) != 0) {
        fprintf(stderr, "check_cuda: ddp_cuda_init(0) failed: %s\n", ddp_cuda_last_error());
        exit(99);
    }
    Suite *s = suite_create("cuda");
    TCase *t = tcase_create("kernels");
    tcase_add_test(t, relu_matches_cpu);
    suite_add_tcase(s, t);
    return s;
}
