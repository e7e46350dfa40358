/* check_gpu_model.c -- the H200 step model of src/compute/gpu_model.h on entries
 * made by hand, against the formula worked out here: a streaming kernel at
 * the HBM bandwidth, a GEMM at the tensor-core peak, a small grid's share
 * of the SMs, the floor of a launch, the sums and the table's order. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "gpu_model.h"
#include "tests.h"

static ddp_cuda_cost_t entry_(const char *name, int kind, int math, double blocks, double bytes,
                              double flops)
{
    ddp_cuda_cost_t e;
    memset(&e, 0, sizeof e);
    e.name = name;
    e.kind = (ddp_cuda_cost_kind_t)kind;
    e.math = (ddp_cuda_math_t)math;
    e.declared = 1;
    e.blocks = (unsigned long long)blocks;
    e.threads = 256;
    e.read = bytes / 2, e.written = bytes / 2;
    e.flops = flops;
    return e;
}

#define NEAR(a, b) ck_assert_msg(fabs((a) - (b)) <= 1e-9 * fabs(b) + 1e-9, "%.9g != %.9g", a, b)

START_TEST(entries_follow_the_formula)
{
    const gpu_spec_t *s = &gpu_spec_h200;
    double grid;
    /* 1 GB through a full grid: at 90% of 4.8 TB/s */
    ddp_cuda_cost_t k = entry_("k", DDP_COST_KERNEL, DDP_MATH_FP32, 4096, 1e9, 1e6);
    NEAR(gpu_model_entry_us(&k, s, &grid), 1e9 / (4800e9 * 0.9) * 1e6);
    NEAR(grid, 0.0);
    /* the same on 33 blocks: a quarter of the 132 SMs, four times as long */
    k.blocks = 33;
    NEAR(gpu_model_entry_us(&k, s, &grid), 4 * 1e9 / (4800e9 * 0.9) * 1e6);
    NEAR(grid, 3 * 1e9 / (4800e9 * 0.9) * 1e6);
    /* a tiny launch: the floor */
    ddp_cuda_cost_t t = entry_("t", DDP_COST_KERNEL, DDP_MATH_FP32, 1, 4096, 10);
    NEAR(gpu_model_entry_us(&t, s, NULL), 2.0);
    /* a kernel's FLOPs on the fp32 CUDA cores, at full efficiency */
    ddp_cuda_cost_t f = entry_("f", DDP_COST_KERNEL, DDP_MATH_FP32, 4096, 1e6, 67e9);
    NEAR(gpu_model_entry_us(&f, s, NULL), 1000.0);
    /* GEMMs at 70% of their units' peak: bf16, TF32, fp32 */
    ddp_cuda_cost_t g = entry_("g", DDP_COST_GEMM, DDP_MATH_BF16, 4096, 1e8, 1e12);
    NEAR(gpu_model_entry_us(&g, s, NULL), 1e12 / (989e12 * 0.7) * 1e6);
    g.math = DDP_MATH_TF32;
    NEAR(gpu_model_entry_us(&g, s, NULL), 1e12 / (494e12 * 0.7) * 1e6);
    g.math = DDP_MATH_FP32;
    NEAR(gpu_model_entry_us(&g, s, NULL), 1e12 / (67e12 * 0.7) * 1e6);
    /* a GEMM of few tiles shares the SMs like a kernel's grid */
    g.math = DDP_MATH_BF16, g.blocks = 66;
    NEAR(gpu_model_entry_us(&g, s, NULL), 2 * 1e12 / (989e12 * 0.7) * 1e6);
    /* a copy uses the whole machine whatever its (absent) grid */
    ddp_cuda_cost_t c = entry_("c", DDP_COST_COPY, DDP_MATH_FP32, 0, 1e9, 0);
    NEAR(gpu_model_entry_us(&c, s, NULL), 1e9 / (4800e9 * 0.9) * 1e6);
}
END_TEST

START_TEST(the_step_sums_its_launches)
{
    ddp_cuda_cost_t e[5] = {
        entry_("relu", DDP_COST_KERNEL, DDP_MATH_FP32, 4096, 1e9, 0),
        entry_("gemm", DDP_COST_GEMM, DDP_MATH_BF16, 4096, 1e8, 2e12),
        entry_("relu", DDP_COST_KERNEL, DDP_MATH_FP32, 4096, 1e9, 0),
        entry_("tiny", DDP_COST_KERNEL, DDP_MATH_FP32, 1, 64, 1),
        entry_("gemm", DDP_COST_GEMM, DDP_MATH_BF16, 4096, 1e8, 1e12),
    };
    e[3].declared = 0;
    gpu_model_t m;
    gpu_model_build(e, 5, &gpu_spec_h200, &m);
    double relu = 1e9 / (4800e9 * 0.9) * 1e6, gemm = 3e12 / (989e12 * 0.7) * 1e6;
    NEAR(m.step_us, 2 * relu + gemm + 2.0);
    NEAR(m.gemm_us, gemm);
    NEAR(m.gemm_flops, 3e12);
    ck_assert_int_eq(m.launches, 5);
    ck_assert_int_eq(m.undeclared, 1);
    ck_assert_int_eq(m.nrows, 3);
    ck_assert_str_eq(m.rows[0].name, "gemm"); /* largest first */
    ck_assert_int_eq(m.rows[0].calls, 2);
    ck_assert_str_eq(m.rows[1].name, "relu");
    NEAR(m.rows[1].us, 2 * relu);
    ck_assert_str_eq(m.rows[2].name, "tiny");
    /* the printed lines a script reads */
    char buf[8192];
    FILE *f = fmemopen(buf, sizeof buf, "w");
    ck_assert_ptr_nonnull(f);
    gpu_model_print(f, &m, &gpu_spec_h200, "a step", 989);
    fclose(f);
    char want[160];
    snprintf(want, sizeof want, "# modeled step: %.3f ms, 5 launches", m.step_us / 1e3);
    ck_assert_msg(strstr(buf, want), "no '%s' in:\n%s", want, buf);
    snprintf(want, sizeof want, "step / GEMMs = %.3f", m.step_us / m.gemm_us);
    ck_assert_msg(strstr(buf, want), "no '%s' in:\n%s", want, buf);
    ck_assert_msg(strstr(buf, "WARNING: 1 launches declared no cost"), "%s", buf);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("gpu_model");
    TCase *t = tcase_create("model");
    tcase_add_test(t, entries_follow_the_formula);
    tcase_add_test(t, the_step_sums_its_launches);
    suite_add_tcase(s, t);
    return s;
}
