/* augment.c -- random flip and padded random crop of raw images (augment.h). */
#include "augment.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"

ddp_status_t augment_parse(const char *spec, act_shape_t shape, augment_t *a)
{
    memset(a, 0, sizeof *a);
    if (!spec || !*spec || !strcmp(spec, "none")) return DDP_OK;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        while (*tok == ' ') tok++;
        if (!strcmp(tok, "hflip")) {
            a->hflip = 1;
        } else if (!strncmp(tok, "crop:", 5)) {
            char *end;
            long p = strtol(tok + 5, &end, 10);
            if (end == tok + 5 || *end || p < 1 || p > 1024)
                return ddp_fail(DDP_ERR_USAGE,
                                "--augment: '%s': the crop padding must be a "
                                "positive integer (crop:4)",
                                tok);
            a->crop = (int)p;
        } else {
            return ddp_fail(DDP_ERR_USAGE,
                            "--augment: unknown augmentation '%s'; use hflip "
                            "and/or crop:P, e.g. --augment hflip,crop:4",
                            tok);
        }
    }
    if (!shape.image)
        return ddp_fail(DDP_ERR_USAGE,
                        "--augment %s needs images ([N,H,W] or [N,C,H,W] "
                        "data) but the input holds feature vectors (%d features)",
                        spec, shape.c);
    if (a->crop && (a->crop >= shape.h || a->crop >= shape.w))
        return ddp_fail(DDP_ERR_USAGE,
                        "--augment: crop padding %d is not smaller than the "
                        "%dx%d images",
                        a->crop, shape.h, shape.w);
    return DDP_OK;
}

ddp_status_t augment_check(const char *spec, act_shape_t shape)
{
    augment_t a;
    return augment_parse(spec, shape, &a);
}

void augment_sample(const augment_t *a, act_shape_t shape, uint64_t seed, int64_t epoch,
                    int64_t sample, float *x, float *tmp)
{
    if (!augment_active(a)) return;
    uint64_t key = ddp_key(seed, DDP_STREAM_AUGMENT, (uint64_t)epoch);
    ddp_u32x4_t r = ddp_rand4(key, (uint64_t)sample, 0);
    int h = shape.h, w = shape.w, p = a->crop;
    int flip = a->hflip && (r.v[0] >> 31);
    /* offsets into the padded image, uniform in [0, 2P] */
    int dy = p ? (int)(((uint64_t)r.v[1] * (uint64_t)(2 * p + 1)) >> 32) - p : 0;
    int dx = p ? (int)(((uint64_t)r.v[2] * (uint64_t)(2 * p + 1)) >> 32) - p : 0;
    if (!flip && dx == 0 && dy == 0) return;
    size_t hw = (size_t)h * (size_t)w;
    for (int c = 0; c < shape.c; c++) {
        const float *src = x + (size_t)c * hw;
        float *dst = tmp + (size_t)c * hw;
        for (int i = 0; i < h; i++) {
            int si = i + dy;
            for (int j = 0; j < w; j++) {
                int jj = flip ? w - 1 - j : j;
                int sj = jj + dx;
                dst[(size_t)i * w + j] =
                    (si >= 0 && si < h && sj >= 0 && sj < w) ? src[(size_t)si * w + sj] : 0.0f;
            }
        }
    }
    memcpy(x, tmp, (size_t)shape.c * hw * sizeof *x);
}
