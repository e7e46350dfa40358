/* archs.c -- the named architectures of --model, expanded to a spec with
 * torchvision's names (model_expand):
 *
 *   resnet20/32/44/56/110  the CIFAR ResNets (He et al. 2016, section 4.2):
 *                          a 3x3 stem of WIDTH (16) channels, three stages
 *                          of n = (depth - 2) / 6 basic blocks of WIDTH,
 *                          2 WIDTH and 4 WIDTH channels, global average pool
 *   resnet18/34            ImageNet ResNets of basic blocks: a 7x7 stride-2
 *                          stem of WIDTH (64) channels and a 3x3 stride-2
 *                          max-pool, four stages (WIDTH ... 8 WIDTH), global
 *                          average pool
 *   resnet50/101/152       the same with bottleneck blocks (torchvision's
 *                          v1.5: the stride on the 3x3 convolution), 4x
 *                          expansion
 *
 * The first block of every stage after the first has stride 2.  A block's
 * projection (1x1 convolution with the stride, and BatchNorm: torchvision's
 * downsample) is added by the model where the block changes the shape.
 * Convolutions have no bias (BatchNorm follows each); the stem takes the
 * data's channels and fc the data's classes (linear:auto).  Width:
 * resnet18:width=32. */
#include "archs.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const model_arch_help =
    "named architectures: resnet20, resnet32, resnet44, resnet56, resnet110 (CIFAR style), "
    "resnet18, resnet34, resnet50, resnet101, resnet152 (ImageNet style), each with an optional "
    ":width=N (channels of the first stage; default 16 and 64)";

typedef struct arch {
    const char *name;
    int cifar;      /* 3x3 stem, three stages */
    int bottleneck; /* 1x1-3x3-1x1 blocks, 4x expansion */
    int blocks[4];  /* per stage */
} arch_t;

static const arch_t archs_[] = {
    {"resnet20", 1, 0, {3, 3, 3, 0}},    {"resnet32", 1, 0, {5, 5, 5, 0}},
    {"resnet44", 1, 0, {7, 7, 7, 0}},    {"resnet56", 1, 0, {9, 9, 9, 0}},
    {"resnet110", 1, 0, {18, 18, 18, 0}}, {"resnet18", 0, 0, {2, 2, 2, 2}},
    {"resnet34", 0, 0, {3, 4, 6, 3}},    {"resnet50", 0, 1, {3, 4, 6, 3}},
    {"resnet101", 0, 1, {3, 4, 23, 3}},  {"resnet152", 0, 1, {3, 8, 36, 3}},
};

typedef struct text {
    char *s;
    size_t n, cap;
    int oom;
} text_t;

static void put_(text_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put_(text_t *t, const char *fmt, ...)
{
    if (t->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(t->s + t->n, t->cap - t->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < t->cap - t->n) {
            t->n += (size_t)k;
            return;
        }
        size_t cap = 2 * t->cap + (size_t)(k > 0 ? k : 0) + 256;
        char *p = realloc(t->s, cap);
        if (!p) {
            t->oom = 1;
            return;
        }
        t->s = p;
        t->cap = cap;
    }
}

/* One block of stage `stage` (1-based), number b: its planes, stride. */
static void block_(text_t *t, const arch_t *a, int stage, int b, int planes, int stride)
{
    if (a->bottleneck)
        put_(t,
             ",layer%d.%d=res(conv1=conv:%d:1:1:0:nobias,bn1=bn,relu,conv2=conv:%d:3:%d:1:nobias,"
             "bn2=bn,relu,conv3=conv:%d:1:1:0:nobias,bn3=bn),relu",
             stage, b, planes, planes, stride, 4 * planes);
    else
        put_(t,
             ",layer%d.%d=res(conv1=conv:%d:3:%d:1:nobias,bn1=bn,relu,conv2=conv:%d:3:1:1:nobias,"
             "bn2=bn),relu",
             stage, b, planes, stride, planes);
}

static ddp_status_t usage_(const char *spec, const char *what)
{
    return ddp_fail(DDP_ERR_USAGE, "--model %s: %s; %s", spec, what, model_arch_help);
}

ddp_status_t model_expand(const char *spec, char **out)
{
    *out = NULL;
    size_t len = strcspn(spec, ":");
    const arch_t *a = NULL;
    for (size_t i = 0; i < sizeof archs_ / sizeof archs_[0]; i++)
        if (strlen(archs_[i].name) == len && strncmp(spec, archs_[i].name, len) == 0) a = &archs_[i];
    if (!a && strncmp(spec, "resnet", 6) == 0 && strchr(spec, ',') == NULL)
        return usage_(spec, "no such architecture");
    if (!a) {
        *out = strdup(spec);
        return *out ? DDP_OK : ddp_fail(DDP_ERR_NOMEM, "out of memory expanding --model");
    }
    int width = a->cifar ? 16 : 64;
    const char *opt = spec + len;
    if (*opt == ':') {
        char *end;
        if (strncmp(opt + 1, "width=", 6) != 0) return usage_(spec, "the option is not width=N");
        long w = strtol(opt + 7, &end, 10);
        if (*end || end == opt + 7 || w < 1 || w > 4096)
            return usage_(spec, "width must be an integer from 1 to 4096");
        width = (int)w;
    }
    text_t t = {0};
    if (a->cifar)
        put_(&t, "conv1=conv:%d:3:1:1:nobias,bn1=bn,relu", width);
    else
        put_(&t, "conv1=conv:%d:7:2:3:nobias,bn1=bn,relu,maxpool:3:2:1", width);
    for (int stage = 0; stage < (a->cifar ? 3 : 4); stage++)
        for (int b = 0; b < a->blocks[stage]; b++)
            block_(&t, a, stage + 1, b, width << stage, stage > 0 && b == 0 ? 2 : 1);
    put_(&t, ",gap,fc=linear:auto");
    if (t.oom) {
        free(t.s);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory expanding --model %s", spec);
    }
    *out = t.s;
    return DDP_OK;
}
