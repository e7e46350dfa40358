/* check_rng.c -- Philox against the Random123 known-answer vectors; the
 * uniform draws are uniform; half-precision conversions round to nearest even. */
#include <stdint.h>
#include <stdlib.h>

#include "half.h"
#include "rng.h"
#include "tests.h"

START_TEST(philox_known_answers)
{
    /* Random123 kat_vectors: philox4x32 10 rounds */
    ddp_u32x4_t r = ddp_philox(0, 0, 0, 0, 0, 0);
    ck_assert_uint_eq(r.v[0], 0x6627e8d5u);
    ck_assert_uint_eq(r.v[1], 0xe169c58du);
    ck_assert_uint_eq(r.v[2], 0xbc57ac4cu);
    ck_assert_uint_eq(r.v[3], 0x9b00dbd8u);
    r = ddp_philox(0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu);
    ck_assert_uint_eq(r.v[0], 0x408f276du);
    ck_assert_uint_eq(r.v[1], 0x41c83b0eu);
    ck_assert_uint_eq(r.v[2], 0xa20bc7c6u);
    ck_assert_uint_eq(r.v[3], 0x6d5451fdu);
    r = ddp_philox(0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u, 0xa4093822u, 0x299f31d0u);
    ck_assert_uint_eq(r.v[0], 0xd16cfe09u);
    ck_assert_uint_eq(r.v[1], 0x94fdccebu);
    ck_assert_uint_eq(r.v[2], 0x5001e420u);
    ck_assert_uint_eq(r.v[3], 0x24126ea1u);
}
END_TEST

START_TEST(uniform_moments)
{
    /* mean 1/2 and variance 1/12 within 5 sigma for 1e6 draws */
    const int n = 1000000;
    double s = 0, s2 = 0;
    uint64_t key = ddp_key(7, DDP_STREAM_INIT, 3);
    for (int i = 0; i < n / 4; i++) {
        ddp_u32x4_t r = ddp_rand4(key, (uint64_t)i, 0);
        for (int j = 0; j < 4; j++) {
            double u = ddp_u01(r.v[j]);
            ck_assert(u >= 0 && u < 1);
            s += u;
            s2 += u * u;
        }
    }
    double mean = s / n, var = s2 / n - mean * mean;
    ck_assert_double_le(fabs(mean - 0.5), 5 * sqrt(1.0 / 12 / n));
    ck_assert_double_le(fabs(var - 1.0 / 12), 5 * sqrt(1.0 / 180 / n));
}
END_TEST

START_TEST(dropout_keep_rate_and_keys)
{
    int kept = 0, n = 200000, differ = 0;
    for (int i = 0; i < n; i++) {
        kept += ddp_dropout_keep(1, 5, 2, 1234, (uint64_t)i, 0.3f);
        differ += ddp_dropout_keep(1, 5, 2, 1234, (uint64_t)i, 0.3f) !=
                  ddp_dropout_keep(1, 5, 2, 1235, (uint64_t)i, 0.3f);
    }
    ck_assert_double_le(fabs(kept / (double)n - 0.7), 0.005);
    /* another sample gets an independent mask: disagree on 2*0.3*0.7 = 42% */
    ck_assert_double_le(fabs(differ / (double)n - 0.42), 0.01);
}
END_TEST

START_TEST(half_round_trip)
{
    /* exactly representable values survive; rounding is to nearest even */
    const float exact[] = {0.f, -0.f, 1.f, -2.f, 0.5f, 65504.f, 6.103515625e-05f, 5.9604645e-08f};
    for (size_t i = 0; i < sizeof exact / sizeof exact[0]; i++)
        ck_assert_float_eq(ddp_f16_to_f32(ddp_f32_to_f16(exact[i])), exact[i]);
    ck_assert_float_eq(ddp_f16_to_f32(ddp_f32_to_f16(1.0f + 1.0f / 2048)), 1.0f); /* tie -> even */
    ck_assert_float_eq(ddp_f16_to_f32(ddp_f32_to_f16(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);
    ck_assert(isinf(ddp_f16_to_f32(ddp_f32_to_f16(70000.f))));
    ck_assert(isnan(ddp_f16_to_f32(ddp_f32_to_f16(NAN))));
    ck_assert_float_eq(ddp_bf16_to_f32(ddp_f32_to_bf16(1.0f + 1.0f / 256)), 1.0f); /* tie */
    ck_assert_float_eq(ddp_bf16_to_f32(ddp_f32_to_bf16(3.0f)), 3.0f);
    ck_assert(isnan(ddp_bf16_to_f32(ddp_f32_to_bf16(NAN))));
    /* relative error bounds over a sweep */
    srand(1);
    for (int i = 0; i < 100000; i++) {
        float x = ((float)rand() / RAND_MAX - 0.5f) * 200.f;
        float b = ddp_bf16_to_f32(ddp_f32_to_bf16(x)), h = ddp_f16_to_f32(ddp_f32_to_f16(x));
        ck_assert_float_le(fabsf(b - x), fabsf(x) * (1.0f / 256) + 1e-30f);
        ck_assert_float_le(fabsf(h - x), fabsf(x) * (1.0f / 2048) + 6e-8f);
    }
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("rng");
    TCase *t = tcase_create("rng");
    tcase_add_test(t, philox_known_answers);
    tcase_add_test(t, uniform_moments);
    tcase_add_test(t, dropout_keep_rate_and_keys);
    tcase_add_test(t, half_round_trip);
    suite_add_tcase(s, t);
    return s;
}
