/* check_cuda_blas.c -- cuBLAS as the cuda backend loads it (cuda/blas.cu):
 * in a CUDA build, dlopen of the build's libcublas.so.<major> and every
 * entry point the backend calls found in it, on any machine with the
 * toolkit's libraries, GPU or not (so a wrong name fails here, not on the
 * first GPU run); twice is fine.  On the CPU emulation the table is the
 * emulated cuBLAS and loading is a no-op that succeeds. */
#include <check.h>
#include <string.h>

#include "ddp_cuda.h"
#include "tests.h"

START_TEST(cublas_loads)
{
    char why[640] = "";
    ck_assert_msg(ddp_cuda_load_blas(why, sizeof why) == 0, "cuBLAS: %s", why);
    ck_assert_msg(ddp_cuda_load_blas(why, sizeof why) == 0, "cuBLAS, again: %s", why);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("cuda_blas");
    TCase *t = tcase_create("load");
    tcase_add_test(t, cublas_loads);
    suite_add_tcase(s, t);
    return s;
}
