/* check_reducer.c -- the reducer on W ranks (built as check_reducer_np2 and
 * _np3): several buckets of a small MLP, layers becoming ready in a
 * different order on every rank, every wire type (float32; bf16 and fp16 on
 * values they hold exactly), with and without the per-bucket update hook
 * (fused into the all-reduce on shared memory), accumulation micro-batches
 * that communicate nothing, --find-unused, and the statistics.  The
 * reference is the sum computed here from every rank's known gradients.
 * ZeRO (--zero 1|2, zero.h): the shard plan for 1 to 5 ranks; each rank's
 * block of every bucket updated once from the sums and the parameters
 * all-gathered, with the update fused and after the reduce-scatter, on
 * shared memory and on the ring, with --zero 2's gradient slots and
 * shard, bf16, accumulation, and without the update hook (the whole-step
 * path: clipping norm, scale, finite check, reducer_gather_params); the
 * clipping norm's bits at every stage; the finite check agreed over the
 * ranks; the optimizer state gathered and scattered for checkpoints; and
 * AdamW under --zero 1 and 2 giving --zero 0's bits. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_mpi.h"
#include "control.h"
#include "model.h"
#include "optim.h"
#include "reducer.h"
#include "tests.h"
#include "zero.h"

static comm_t c;

static void setup_(void)
{
    ck_assert_int_eq(comm_init_mpi(&c, MPI_COMM_WORLD), DDP_OK);
}
static void teardown_(void)
{
    comm_free(&c);
}

static ddp_status_t mem_alloc_(void *comm, size_t bytes, void **p)
{
    return comm_mem_alloc(comm, bytes, p);
}
static void mem_free_(void *comm, void *p)
{
    comm_mem_free(comm, p);
}

/* 6 -> 7 -> 5 -> `outputs` with buckets of at most 16 floats, the first
 * of at most `first` floats: a bucket boundary falls inside layers and
 * between a weight and its bias.  Laid out only: model_alloc follows
 * (alloc_), after --zero 2's grad_slots are set. */
static void layout_(model_t *m, int outputs, size_t first)
{
    model_opts_t o = {.spec = "linear:7,relu,linear:5,relu,linear:auto",
                      .input = {6, 1, 1, 0},
                      .outputs = outputs,
                      .batch = 2,
                      .bucket_cap_bytes = 16 * sizeof(float),
                      .first_bucket_bytes = first * sizeof(float),
                      .freeze = ""};
    ck_assert_int_eq(model_layout(m, &o, &compute_cpu_ops), DDP_OK);
}

/* Parameters and gradients in the comm backend's memory (node-shared on
 * one node), as the trainer allocates them. */
static void alloc_(model_t *m)
{
    model_mem_t mem = {mem_alloc_, mem_free_, &c};
    ck_assert_int_eq(model_alloc(m, &mem), DDP_OK);
}

static void build_(model_t *m)
{
    layout_(m, 3, 16);
    alloc_(m);
    ck_assert_int_ge(m->nbuckets, 4);
}

/* Element i of [0, ntrainable) is in no bucket: the alignment gap before a
 * bucket (model.h), zero and never reduced nor updated. */
static int gap_(const model_t *m, size_t i)
{
    for (int b = 0; b < m->nbuckets; b++)
        if (i >= m->buckets[b].offset && i < m->buckets[b].offset + m->buckets[b].count) return 0;
    return 1;
}

/* Rank r's gradient element i: small integers, so every partial sum is
 * exact in float32, bf16 and fp16. */
static float grad_(size_t i, int r)
{
    return (float)((int)((i * 5 + (size_t)r * 11) % 17) - 8);
}

static void fill_grads_(model_t *m, int rank, float add)
{
    for (size_t i = 0; i < m->ntrainable; i++)
        m->grads[i] = gap_(m, i) ? 0.0f : add * m->grads[i] + grad_(i, rank);
}

/* Layers in an order of this rank's own (a shuffle keyed by rank and round). */
static void ready_in_some_order_(reducer_t *r, const model_t *m, int round, int skip_layer)
{
    int order[16], n = m->nlayers;
    for (int i = 0; i < n; i++) order[i] = n - 1 - i;
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(c.rank * 31 + round + 1);
    for (int i = n - 1; i > 0; i--) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int j = (int)(s % (uint64_t)(i + 1));
        int tmp = order[i];
        order[i] = order[j], order[j] = tmp;
    }
    for (int i = 0; i < n; i++)
        if (order[i] != skip_layer) ck_assert_int_eq(reducer_layer_ready(r, order[i]), DDP_OK);
}

/* The update hook: params = reduced gradient, and count how often each
 * element was updated on this rank. */
typedef struct hook {
    model_t *m;
    int *updates;
} hook_t;

static void apply_(void *arg, size_t offset, size_t count)
{
    hook_t *h = arg;
    for (size_t i = offset; i < offset + count; i++) {
        h->m->params[i] = h->m->grads[i];
        h->updates[i]++;
    }
}

/* A model, a reducer over it and the update hook's bookkeeping. */
typedef struct rig {
    model_t m;
    int *updates;
    hook_t hook;
    reducer_apply_t apply;
    reducer_t *r;
} rig_t;

static void rig_init_(rig_t *g, comm_dtype_t wire, int with_hook, int find_unused)
{
    build_(&g->m);
    g->updates = calloc(g->m.ntrainable, sizeof *g->updates);
    g->hook = (hook_t){&g->m, g->updates};
    g->apply = (reducer_apply_t){.fn = apply_, .arg = &g->hook, .nout = 1, .out = {g->m.params}};
    reducer_opts_t o = {
        .wire = wire, .find_unused = find_unused, .apply = with_hook ? &g->apply : NULL,
        .fuse = with_hook};
    ck_assert_int_eq(reducer_init(&g->r, &g->m, &c, &o), DDP_OK);
}

static void rig_free_(rig_t *g)
{
    reducer_free(g->r);
    free(g->updates);
    model_free(&g->m);
}

static uint64_t calls_(const rig_t *g)
{
    reducer_stats_t st;
    reducer_get_stats(g->r, &st);
    return st.calls;
}

static void check_sum_(const model_t *m, const float *got, int accum, const int *skip)
{
    for (size_t i = 0; i < m->ntrainable; i++) {
        double want = 0;
        for (int r = 0; r < c.size; r++) want += accum * (double)grad_(i, r);
        if ((skip && skip[i]) || gap_(m, i)) want = 0;
        ck_assert_msg(got[i] == (float)want, "element %zu: %g, expected %g", i, (double)got[i],
                      want);
    }
}

static void run_(comm_dtype_t wire, int with_hook)
{
    rig_t g;
    rig_init_(&g, wire, with_hook, 0);
    model_t *m = &g.m;
    for (int round = 0; round < 3; round++) {
        memset(g.updates, 0, m->ntrainable * sizeof *g.updates);
        fill_grads_(m, c.rank, 0);
        reducer_begin(g.r, 1, 1, round, 0.0f);
        ready_in_some_order_(g.r, m, round, -1);
        ck_assert_int_eq(reducer_finish(g.r), DDP_OK);
        if (!with_hook) {
            check_sum_(m, m->grads, 1, NULL);
            continue;
        }
        check_sum_(m, m->params, 1, NULL);
        /* each element updated at most once here, and once somewhere */
        int *any = calloc(m->ntrainable, sizeof *any);
        for (size_t i = 0; i < m->ntrainable; i++) ck_assert_int_le(g.updates[i], 1);
        MPI_Allreduce(g.updates, any, (int)m->ntrainable, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        for (size_t i = 0; i < m->ntrainable; i++) ck_assert_int_ge(any[i], !gap_(m, i));
        free(any);
    }
    reducer_stats_t st;
    reducer_get_stats(g.r, &st);
    ck_assert_uint_eq(st.calls, 3u * (unsigned)m->nbuckets);
    ck_assert_uint_eq(st.bytes_sent, 3u * m->ntrainable_values * comm_dtype_size(wire));
    rig_free_(&g);
}

START_TEST(float_no_hook)
{
    run_(COMM_FLOAT, 0);
}
END_TEST
START_TEST(float_with_hook)
{
    run_(COMM_FLOAT, 1);
}
END_TEST
START_TEST(bf16_with_hook)
{
    run_(COMM_BF16, 1);
}
END_TEST
START_TEST(fp16_no_hook)
{
    run_(COMM_FP16, 0);
}
END_TEST

/* --accum 3: the first two micro-batches add up locally, send nothing and
 * run no update; the third reduces the sum of all three. */
START_TEST(accumulation)
{
    rig_t g;
    rig_init_(&g, COMM_FLOAT, 1, 0);
    for (int j = 0; j < 3; j++) {
        fill_grads_(&g.m, c.rank, j == 0 ? 0.0f : 1.0f);
        reducer_begin(g.r, j == 2, 1, 0, j == 0 ? 0.0f : 1.0f);
        ready_in_some_order_(g.r, &g.m, j, -1);
        ck_assert_int_eq(reducer_finish(g.r), DDP_OK);
        ck_assert_uint_eq(calls_(&g), j == 2 ? (unsigned)g.m.nbuckets : 0u);
        for (size_t i = 0; i < g.m.ntrainable && j < 2; i++) ck_assert_int_eq(g.updates[i], 0);
    }
    check_sum_(&g.m, g.m.params, 3, NULL);
    rig_free_(&g);
}
END_TEST

/* A layer whose gradients never come (--find-unused): its parameters get a
 * zero gradient and every bucket still completes. */
START_TEST(find_unused)
{
    rig_t g;
    rig_init_(&g, COMM_FLOAT, 0, 1);
    model_t *m = &g.m;
    fill_grads_(m, c.rank, 0);
    int skip_layer = 2; /* linear:5 */
    int *skip = calloc(m->ntrainable, sizeof *skip);
    const layer_t *L = &m->layers[skip_layer];
    int ids[2] = {L->weight, L->bias};
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < m->tensors[ids[k]].numel; i++)
            skip[m->tensors[ids[k]].offset + i] = 1;
    reducer_begin(g.r, 1, 1, 0, 0.0f);
    ready_in_some_order_(g.r, m, 0, skip_layer);
    ck_assert_int_eq(reducer_finish(g.r), DDP_OK);
    check_sum_(m, m->grads, 1, skip);
    free(skip);
    rig_free_(&g);
}
END_TEST

/* sync = 0 (--no-sync): no bytes move, the hook still runs on local
 * gradients, exactly once per element. */
START_TEST(no_sync)
{
    rig_t g;
    rig_init_(&g, COMM_FLOAT, 1, 0);
    fill_grads_(&g.m, c.rank, 0);
    reducer_begin(g.r, 1, 0, 0, 0.0f);
    ready_in_some_order_(g.r, &g.m, 0, -1);
    ck_assert_int_eq(reducer_finish(g.r), DDP_OK);
    ck_assert_uint_eq(calls_(&g), 0);
    for (size_t i = 0; i < g.m.ntrainable; i++) {
        if (gap_(&g.m, i)) continue;
        ck_assert_int_eq(g.updates[i], 1);
        ck_assert_float_eq(g.m.params[i], grad_(i, c.rank));
    }
    rig_free_(&g);
}
END_TEST

/* ---- ZeRO: --zero 1|2 (zero.h) ---------------------------------------------- */

static control_t ctl;

static void zsetup_(void)
{
    setup_();
    ck_assert_int_eq(control_init(&ctl, MPI_COMM_WORLD), DDP_OK);
}
static void zteardown_(void)
{
    control_free(&ctl);
    teardown_();
}

/* The ZeRO tests' model: outputs 2 and a first bucket of 2 floats give the
 * buckets 2, 15, 35, 7 and 42 floats, so on 3 ranks one rank owns nothing
 * of bucket 0 and the blocks of the others differ in length; layer 4's
 * weight and bias, and layer 2's, are in different buckets (with --zero 2's
 * two slots, layer 2's gradients need bucket 0's slot, layer 0's those of
 * buckets 1 and 2). */
static void zlayout_(model_t *m)
{
    layout_(m, 2, 2);
    ck_assert_int_eq(m->nbuckets, 5);
    ck_assert_uint_eq(m->buckets[0].count, 2);
}

/* The reference of zero_plan_init, from comm_block alone: rank's block of
 * bucket b ([*first, *first + *n) of the bucket); returns where the block
 * starts in that rank's shard (the blocks of the buckets before it). */
static size_t ref_block_(const model_t *m, int b, int rank, int size, size_t *first, size_t *n)
{
    size_t off = 0, f;
    for (int k = 0; k < b; k++) {
        size_t len;
        comm_block(m->buckets[k].count, size, rank, &f, &len);
        off += len;
    }
    comm_block(m->buckets[b].count, size, rank, first, n);
    return off;
}

/* 1 when the `bytes` bytes at p are the same on every rank. */
static int same_everywhere_(const void *p, size_t bytes)
{
    unsigned char *all = malloc(bytes * (size_t)c.size + 1);
    MPI_Allgather(p, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD);
    int same = 1;
    for (int r = 0; r < c.size; r++) same &= memcmp(all + (size_t)r * bytes, p, bytes) == 0;
    free(all);
    return same;
}

/* A check of values that may be wrong on some ranks only: each rank notes
 * its first failure (ZNOTE) and the ranks agree (zagree_) before any of
 * them fails, so they leave the test together and none is left waiting in
 * one of its collectives. */
typedef struct zverdict {
    int bad;
    char first[320];
} zverdict_t;

#define ZNOTE(v, cond, ...)                                                                        \
    do {                                                                                           \
        if (!(cond) && !(v)->bad++) snprintf((v)->first, sizeof(v)->first, __VA_ARGS__);           \
    } while (0)

static void zagree_(const zverdict_t *v)
{
    int any = 0;
    MPI_Allreduce(&v->bad, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    ck_assert_msg(any == 0, "rank %d: %s", c.rank, v->bad ? v->first : "another rank failed");
}

/* Rank r's gradient of element i in round k: small integers (grad_), whose
 * sums are exact in any order and in bf16. */
static float zval_(size_t i, int r, int k)
{
    return grad_(i + 3 * (size_t)k, r);
}
static float zsum_(size_t i, int k)
{
    double s = 0;
    for (int r = 0; r < c.size; r++) s += zval_(i, r, k);
    return (float)s;
}

/* A value in [-1, 1) from a hash of (i, r, k). */
static double hval_(size_t i, int r, int k)
{
    uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)r + 1) * 0xC2B2AE3D27D4EB4Full ^
                 ((uint64_t)k + 7) * 0x165667B19E3779F9ull;
    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    return (double)(x >> 11) / (double)(1ull << 52) - 1.0;
}

/* Rank r's gradient of element i in round k, of mixed magnitudes (1e-3 to
 * 1e3): their float sums depend on the order of addition. */
static float oval_(size_t i, int r, int k)
{
    static const double mag[] = {1e-3, 1e-2, 1e-1, 1, 1e1, 1e2, 1e3};
    return (float)(hval_(i, r, k) * mag[(i * 5 + (size_t)r * 3 + (size_t)k) % 7]);
}

/* A model under --zero, its plan, a reducer over it, and an update hook
 * that notes what it did. */
typedef struct zrig {
    model_t m;
    zero_plan_t z;
    reducer_t *r;
    reducer_apply_t apply;
    int *updates;    /* per trainable element: updates by this rank's hook */
    float *seen;     /* per shard element (shard order): the gradient its update read */
    int *seen_count; /* ... and how often */
    int outside;     /* hook calls for ranges outside this rank's shard */
} zrig_t;

/* The update hook, finding the gradient and the state of a range as
 * optim_apply does: params = the reduced gradient, which is also noted at
 * the range's place in the shard (where the optimizer state lives). */
static void zapply_(void *arg, size_t offset, size_t count)
{
    zrig_t *g = arg;
    size_t at;
    if (zero_shard_offset(&g->z, &g->m, offset, count, &at) != DDP_OK ||
        at + count > g->z.shard_count) {
        g->outside++;
        ddp_clear_error();
        return;
    }
    const float *grad = g->z.slots ? g->z.shard_grads + at : g->m.grads + offset;
    for (size_t k = 0; k < count; k++) {
        g->m.params[offset + k] = grad[k];
        g->updates[offset + k]++;
        g->seen[at + k] = grad[k];
        g->seen_count[at + k]++;
    }
}

/* As the trainer sets up --zero `stage`: the plan, then --zero 2's slots
 * in the gradient buffer and the shard's gradients, then the reducer. */
static void zrig_init_(zrig_t *g, int stage, int64_t accum, comm_dtype_t wire, int hook, int fuse)
{
    memset(g, 0, sizeof *g);
    zlayout_(&g->m);
    ck_assert_int_eq(zero_plan_init(&g->z, &g->m, stage, c.rank, c.size, accum), DDP_OK);
    g->m.grad_slots = g->z.slots;
    alloc_(&g->m);
    if (g->z.slots) g->z.shard_grads = calloc(g->z.shard_count + 1, sizeof(float));
    g->updates = calloc(g->m.ntrainable, sizeof *g->updates);
    g->seen = calloc(g->z.shard_count + 1, sizeof *g->seen);
    g->seen_count = calloc(g->z.shard_count + 1, sizeof *g->seen_count);
    g->apply = (reducer_apply_t){.fn = zapply_, .arg = g, .nout = 1, .out = {g->m.params}};
    reducer_opts_t o = {.wire = wire,
                        .apply = hook ? &g->apply : NULL,
                        .fuse = fuse,
                        .zero = &g->z,
                        .params = g->m.params};
    ck_assert_int_eq(reducer_init(&g->r, &g->m, &c, &o), DDP_OK);
}

static void zrig_free_(zrig_t *g)
{
    reducer_free(g->r);
    free(g->z.shard_grads);
    zero_plan_free(&g->z);
    free(g->updates);
    free(g->seen);
    free(g->seen_count);
    model_free(&g->m);
}

/* Backward as model_backward runs it: layers in reverse, each layer's
 * reducer_layer_begin before its gradients are written (into their
 * bucket's slot with --zero 2), reducer_layer_ready after.  beta 1 adds to
 * the gradients there (accumulation). */
static void zbackward_(reducer_t *r, model_t *m, float (*val)(size_t, int, int), int k, float beta)
{
    for (int l = m->nlayers - 1; l >= 0; l--) {
        const layer_t *L = &m->layers[l];
        if (L->weight >= 0 || L->bias >= 0) {
            ck_assert_int_eq(reducer_layer_begin(r, l), DDP_OK);
            int ids[2] = {L->weight, L->bias};
            for (int t = 0; t < 2; t++) {
                if (ids[t] < 0) continue;
                const tensor_t *T = &m->tensors[ids[t]];
                float *gr = model_tensor_grad(m, ids[t]);
                for (size_t e = 0; e < T->numel; e++)
                    gr[e] = beta * gr[e] + val(T->offset + e, c.rank, k);
            }
        }
        ck_assert_int_eq(reducer_layer_ready(r, l), DDP_OK);
    }
}

/* Forget what the hook noted; parameters that differ per rank (stale). */
static void zreset_(zrig_t *g)
{
    memset(g->updates, 0, g->m.ntrainable * sizeof *g->updates);
    memset(g->seen_count, 0, g->z.shard_count * sizeof *g->seen_count);
    for (size_t j = 0; j < g->z.shard_count; j++) g->seen[j] = NAN;
    for (size_t i = 0; i < g->m.ntrainable; i++) g->m.params[i] = -100.0f - (float)c.rank;
    g->outside = 0;
}

/* One step of round k's gradients. */
static void zstep_(zrig_t *g, int k)
{
    zreset_(g);
    reducer_begin(g->r, 1, 1, k, 0.0f);
    zbackward_(g->r, &g->m, zval_, k, 0.0f);
    ck_assert_int_eq(reducer_finish(g->r), DDP_OK);
}

/* This rank's reduced gradients (zero_block_grads; with slots the shard's
 * gradients themselves too): coef times the sums of its block of every
 * bucket. */
static void zcheck_blocks_(const zrig_t *g, int k, float coef)
{
    const model_t *m = &g->m;
    zverdict_t v = {0};
    for (int b = 0; b < m->nbuckets; b++) {
        size_t first, n, off = ref_block_(m, b, c.rank, c.size, &first, &n);
        const float *blk = zero_block_grads(&g->z, m, b);
        for (size_t j = 0; j < n; j++) {
            size_t i = m->buckets[b].offset + first + j;
            float want = coef * zsum_(i, k);
            ZNOTE(&v, blk[j] == want, "bucket %d element %zu: block holds %g, sum %g", b, i,
                  (double)blk[j], (double)want);
            if (g->z.slots)
                ZNOTE(&v, g->z.shard_grads[off + j] == want,
                      "bucket %d element %zu: shard gradient %g, sum %g", b, i,
                      (double)g->z.shard_grads[off + j], (double)want);
        }
    }
    zagree_(&v);
}

/* After a step with the update hook: each element of this rank's blocks
 * was updated exactly once, from coef times its reduced sum, and that sum
 * was noted at the element's place in the shard; no other element was
 * updated here; and every rank holds every parameter (the all-gather of
 * the owners' blocks). */
static void zcheck_updated_(const zrig_t *g, int k, float coef)
{
    const model_t *m = &g->m;
    zverdict_t v = {0};
    ZNOTE(&v, g->outside == 0, "%d updates of ranges outside the shard", g->outside);
    for (int b = 0; b < m->nbuckets; b++) {
        const bucket_t *B = &m->buckets[b];
        size_t first, n, off = ref_block_(m, b, c.rank, c.size, &first, &n);
        for (size_t e = 0; e < B->count; e++)
            ZNOTE(&v, g->updates[B->offset + e] == (e >= first && e < first + n),
                  "bucket %d element %zu updated %d times here", b, B->offset + e,
                  g->updates[B->offset + e]);
        for (size_t j = 0; j < n; j++) {
            float want = coef * zsum_(B->offset + first + j, k);
            ZNOTE(&v, g->seen_count[off + j] == 1, "shard element %zu updated %d times", off + j,
                  g->seen_count[off + j]);
            ZNOTE(&v, g->seen[off + j] == want, "shard element %zu: %g, expected %g", off + j,
                  (double)g->seen[off + j], (double)want);
        }
    }
    for (size_t i = 0; i < m->ntrainable; i++) {
        if (gap_(m, i)) continue;
        float want = coef * zsum_(i, k);
        ZNOTE(&v, m->params[i] == want, "parameter %zu: %g, expected %g", i, (double)m->params[i],
              (double)want);
    }
    zagree_(&v);
}

/* zero_plan_init for every rank of 1 to 5 (no collective: each rank's plan
 * is computed here): the blocks of a bucket cover it exactly once, a
 * rank's shard is its blocks back to back (shard_off the prefix sums),
 * shards differ by at most one element per bucket, slots only at stage 2
 * with several ranks and one micro-batch; zero_shard_offset places a range
 * of a block and refuses one that leaves it. */
START_TEST(zero_plan)
{
    model_t m;
    zlayout_(&m);
    for (int size = 1; size <= 5; size++)
        for (int stage = 0; stage <= 2; stage++)
            for (int64_t accum = 1; accum <= 2; accum++) {
                zero_plan_t *z = calloc((size_t)size, sizeof *z);
                size_t lo = (size_t)-1, hi = 0;
                for (int r = 0; r < size; r++) {
                    ck_assert_int_eq(zero_plan_init(&z[r], &m, stage, r, size, accum), DDP_OK);
                    ck_assert_int_eq(z[r].nbuckets, m.nbuckets);
                    ck_assert_int_eq(zero_sharded(&z[r]), stage > 0 && size > 1);
                    ck_assert_int_eq(z[r].slots,
                                     stage == 2 && size > 1 && accum == 1 ? ZERO_GRAD_SLOTS : 0);
                    size_t sum = 0;
                    for (int b = 0; b < m.nbuckets; b++) {
                        ck_assert_uint_eq(z[r].shard_off[b], sum);
                        sum += z[r].n[b];
                    }
                    ck_assert_uint_eq(z[r].shard_count, sum);
                    if (sum < lo) lo = sum;
                    if (sum > hi) hi = sum;
                }
                ck_assert_uint_le(hi - lo, (size_t)m.nbuckets);
                for (int r = 0; r < size; r++) ck_assert_uint_eq(z[r].max_shard, hi);
                size_t total = 0;
                for (int b = 0; b < m.nbuckets; b++) {
                    const bucket_t *B = &m.buckets[b];
                    int *owner = calloc(B->count, sizeof *owner);
                    size_t nmin = (size_t)-1, nmax = 0;
                    for (int r = 0; r < size; r++) {
                        ck_assert_uint_le(z[r].first[b] + z[r].n[b], B->count);
                        for (size_t e = z[r].first[b]; e < z[r].first[b] + z[r].n[b]; e++)
                            owner[e]++;
                        if (z[r].n[b] < nmin) nmin = z[r].n[b];
                        if (z[r].n[b] > nmax) nmax = z[r].n[b];
                        total += z[r].n[b];
                    }
                    for (size_t e = 0; e < B->count; e++)
                        ck_assert_msg(owner[e] == 1,
                                      "%d ranks: bucket %d element %zu owned %d times", size, b, e,
                                      owner[e]);
                    ck_assert_uint_le(nmax - nmin, 1);
                    free(owner);
                }
                ck_assert_uint_eq(total, m.ntrainable_values);
                for (int r = 0; r < size; r++) {
                    for (int b = 0; b < m.nbuckets; b++) {
                        size_t lo_e = m.buckets[b].offset + z[r].first[b], n = z[r].n[b], at;
                        for (size_t j = 0; j < n; j++) {
                            ck_assert_int_eq(zero_shard_offset(&z[r], &m, lo_e + j, 1, &at),
                                             DDP_OK);
                            ck_assert_uint_eq(at, z[r].shard_off[b] + j);
                        }
                        if (!n) continue;
                        /* the whole block; one element more either side is refused */
                        ck_assert_int_eq(zero_shard_offset(&z[r], &m, lo_e, n, &at), DDP_OK);
                        ck_assert_uint_eq(at, z[r].shard_off[b]);
                        ddp_clear_error();
                        ck_assert_int_eq(zero_shard_offset(&z[r], &m, lo_e, n + 1, &at),
                                         DDP_ERR_INTERNAL);
                        ddp_clear_error();
                        if (lo_e > 0)
                            ck_assert_int_eq(zero_shard_offset(&z[r], &m, lo_e - 1, 2, &at),
                                             DDP_ERR_INTERNAL);
                        ddp_clear_error();
                    }
                    /* an element of another rank's block */
                    for (int q = 0; q < size; q++) {
                        if (q == r) continue;
                        for (int b = 0; b < m.nbuckets; b++) {
                            if (!z[q].n[b]) continue;
                            size_t at;
                            ck_assert_int_eq(zero_shard_offset(&z[r], &m,
                                                               m.buckets[b].offset + z[q].first[b],
                                                               1, &at),
                                             DDP_ERR_INTERNAL);
                            ddp_clear_error();
                        }
                    }
                }
                for (int r = 0; r < size; r++) zero_plan_free(&z[r]);
                free(z);
            }
    model_free(&m);
}
END_TEST

/* --zero 1 with the update per bucket, fused into the reduce-scatter and
 * after it, on shared memory (auto) and on the ring: each rank updates its
 * blocks once from the sums, and reducer_finish leaves every parameter on
 * every rank. */
/* Three steps at `stage` (fused or not) on shared memory and on the ring. */
static void zero_steps_(int stage, int fuse)
{
    static const char *algos[] = {"auto", "ring"};
    for (int a = 0; a < 2; a++) {
        ck_assert_int_eq(comm_mpi_set_algorithm(&c, algos[a]), DDP_OK);
        ck_assert_int_eq(comm_mpi_set_ring(&c, 3 * sizeof(float), 2), DDP_OK); /* many slices */
        zrig_t g;
        zrig_init_(&g, stage, 1, COMM_FLOAT, 1, fuse);
        if (stage == 2) {
            ck_assert_int_eq(g.z.slots, ZERO_GRAD_SLOTS);
            ck_assert_uint_lt((size_t)g.m.grad_slots * g.m.slot_count, g.m.ntrainable);
        } else {
            ck_assert_int_eq(g.z.slots, 0);
        }
        for (int k = 0; k < 3; k++) {
            zstep_(&g, k);
            zcheck_updated_(&g, k, 1.0f);
            zcheck_blocks_(&g, k, 1.0f);
        }
        zrig_free_(&g);
    }
    ck_assert_int_eq(comm_mpi_set_algorithm(&c, "auto"), DDP_OK);
}

START_TEST(zero1_update_per_bucket)
{
    for (int fuse = 0; fuse <= 1; fuse++) zero_steps_(1, fuse);
}
END_TEST

/* --zero 2, one micro-batch: two gradient slots that backward cycles
 * through (a layer's reducer_layer_begin finishes the bucket whose slot it
 * needs); each rank's reduced block moves to the shard's gradients, from
 * which the update reads. */
START_TEST(zero2_slots)
{
    zero_steps_(2, 1);
}
END_TEST

/* --grad-compress bf16 under --zero 1 and 2: the block decompressed into
 * place (into the shard with slots) before the update. */
START_TEST(zero_compressed)
{
    for (int stage = 1; stage <= 2; stage++) {
        zrig_t g;
        zrig_init_(&g, stage, 1, COMM_BF16, 1, 1);
        for (int k = 0; k < 2; k++) {
            zstep_(&g, k);
            zcheck_updated_(&g, k, 1.0f);
            zcheck_blocks_(&g, k, 1.0f);
        }
        zrig_free_(&g);
    }
}
END_TEST

/* --zero 2 with --accum 3: no slots (every micro-batch adds into the whole
 * gradient buffer); the third reduces the sum of all three. */
START_TEST(zero2_accumulation)
{
    zrig_t g;
    zrig_init_(&g, 2, 3, COMM_FLOAT, 1, 1);
    ck_assert_int_eq(g.z.slots, 0);
    zreset_(&g);
    for (int j = 0; j < 3; j++) {
        reducer_begin(g.r, j == 2, 1, 0, j == 0 ? 0.0f : 1.0f);
        zbackward_(g.r, &g.m, zval_, 0, j == 0 ? 0.0f : 1.0f);
        ck_assert_int_eq(reducer_finish(g.r), DDP_OK);
        zverdict_t v = {0};
        for (size_t i = 0; i < g.m.ntrainable && j < 2; i++)
            ZNOTE(&v, g.updates[i] == 0, "micro-batch %d updated element %zu", j, i);
        zagree_(&v);
    }
    zcheck_updated_(&g, 0, 3.0f);
    zcheck_blocks_(&g, 0, 3.0f);
    zrig_free_(&g);
}
END_TEST

/* The clipping norm the way zero.h states it: the sum of squares of each
 * (bucket, rank) block, in double, added in bucket then rank order, of the
 * reduced gradients `sums` (the whole trainable range). */
static double ref_norm_(const model_t *m, const float *sums, int rank_major)
{
    double total = 0;
    int W = c.size;
    for (int x = 0; x < (rank_major ? W : m->nbuckets); x++)
        for (int y = 0; y < (rank_major ? m->nbuckets : W); y++) {
            int b = rank_major ? y : x, r = rank_major ? x : y;
            size_t first, n;
            comm_block(m->buckets[b].count, W, r, &first, &n);
            total += n ? compute_cpu_ops.sumsq(n, sums + m->buckets[b].offset + first) : 0;
        }
    return sqrt(total);
}

/* Without the update hook (--clip-grad-norm, --update step): after
 * reducer_finish each rank's blocks hold the sums; the norm, the finite
 * check and the clipping scale act on them; the trainer updates its blocks
 * and reducer_gather_params shares the parameters. */
START_TEST(zero_whole_step)
{
    for (int stage = 1; stage <= 2; stage++) {
        zrig_t g;
        model_t *m = &g.m;
        zrig_init_(&g, stage, 1, COMM_FLOAT, 0, 0);
        zstep_(&g, 1);
        zcheck_blocks_(&g, 1, 1.0f);
        zverdict_t v = {0};
        for (size_t i = 0; i < m->ntrainable; i++) /* no update yet */
            ZNOTE(&v, m->params[i] == -100.0f - (float)c.rank, "parameter %zu updated", i);
        zagree_(&v);
        float *sums = malloc(m->ntrainable * sizeof *sums);
        for (size_t i = 0; i < m->ntrainable; i++) sums[i] = zsum_(i, 1);
        double norm = -1, want = ref_norm_(m, sums, 0);
        ck_assert_int_eq(zero_grad_norm(&g.z, m, &ctl, &norm), DDP_OK);
        ck_assert_msg(memcmp(&norm, &want, sizeof norm) == 0,
                      "stage %d: norm %.17g, expected %.17g", stage, norm, want);
        int ok = -1;
        ck_assert_int_eq(zero_grads_finite(&g.z, m, &ctl, &ok), DDP_OK);
        ck_assert_int_eq(ok, 1);
        zero_grad_scale(&g.z, m, 0.5f);
        zcheck_blocks_(&g, 1, 0.5f);
        /* the trainer's update of its blocks, then the gather */
        for (int b = 0; b < m->nbuckets; b++) {
            const float *blk = zero_block_grads(&g.z, m, b);
            for (size_t j = 0; j < g.z.n[b]; j++)
                m->params[m->buckets[b].offset + g.z.first[b] + j] = blk[j];
        }
        ck_assert_int_eq(reducer_gather_params(g.r), DDP_OK);
        for (size_t i = 0; i < m->ntrainable; i++)
            ZNOTE(&v, gap_(m, i) || m->params[i] == 0.5f * sums[i],
                  "stage %d parameter %zu: %g, want %g", stage,
                  i, (double)m->params[i], 0.5 * sums[i]);
        zagree_(&v);
        free(sums);
        zrig_free_(&g);
    }
}
END_TEST

/* zero_grad_norm gives the same bits at stage 0 (every rank squares every
 * block), 1 and 2 (each rank its own, the pieces gathered), on every rank,
 * and they are those of the documented order, on gradients for which
 * another order gives other bits: 20 layers of 2 units, one bucket per
 * tensor (40 buckets), every block's square sum about 7.9 but rank 0's of
 * bucket 15, about 1e17, where a double's spacing is 16: a piece added
 * before that one counts, one added after it is lost (every order that
 * moves a few pieces across it gives another norm). */
START_TEST(zero_norm_stages)
{
    model_t m;
    char spec[256] = "";
    for (int l = 0; l < 19; l++) strcat(spec, "linear:2,");
    strcat(spec, "linear:auto");
    model_opts_t mo = {.spec = spec,
                       .input = {6, 1, 1, 0},
                       .outputs = 2,
                       .batch = 2,
                       .bucket_cap_bytes = sizeof(float),
                       .first_bucket_bytes = sizeof(float),
                       .freeze = ""};
    ck_assert_int_eq(model_layout(&m, &mo, &compute_cpu_ops), DDP_OK);
    ck_assert_int_eq(m.nbuckets, 40);
    alloc_(&m);
    int W = c.size, big = 15;
    for (int b = 0; b < m.nbuckets; b++)
        for (int r = 0; r < W; r++) {
            size_t first, n;
            comm_block(m.buckets[b].count, W, r, &first, &n);
            if (b == big && r == 0) ck_assert_uint_gt(n, 0);
            double piece = b == big && r == 0 ? 1e17 : 7.9;
            for (size_t j = 0; j < n; j++) {
                size_t i = m.buckets[b].offset + first + j;
                m.grads[i] = (float)(sqrt(piece / (double)n) * (1.0 + 1e-3 * hval_(i, r, 9)));
            }
        }
    double want = ref_norm_(&m, m.grads, 0);
    if (c.size > 1) /* the data can tell the orders apart */
        ck_assert_msg(ref_norm_(&m, m.grads, 1) != want, "the test data sums alike in any order");
    for (int stage = 0; stage <= 2; stage++) {
        zero_plan_t z;
        ck_assert_int_eq(zero_plan_init(&z, &m, stage, c.rank, c.size, 1), DDP_OK);
        if (z.slots) { /* --zero 2: the shard's gradients, from the blocks */
            z.shard_grads = calloc(z.shard_count + 1, sizeof(float));
            for (int b = 0; b < m.nbuckets; b++)
                memcpy(z.shard_grads + z.shard_off[b], m.grads + m.buckets[b].offset + z.first[b],
                       z.n[b] * sizeof(float));
        }
        double norm = -1;
        ck_assert_int_eq(zero_grad_norm(&z, &m, &ctl, &norm), DDP_OK);
        ck_assert_msg(memcmp(&norm, &want, sizeof norm) == 0,
                      "stage %d: norm %.17g, expected %.17g", stage, norm, want);
        ck_assert(same_everywhere_(&norm, sizeof norm));
        free(z.shard_grads);
        zero_plan_free(&z);
    }
    model_free(&m);
}
END_TEST

/* zero_grads_finite: sharded, a NaN in one rank's block is every rank's
 * answer (--on-nonfinite skip must skip on every rank or on none); what is
 * not this rank's block (reduce-scatter scratch) is not looked at.  At
 * stage 0 the whole range, no collective. */
START_TEST(zero_nonfinite_agreed)
{
    model_t m;
    zlayout_(&m);
    alloc_(&m);
    int last = m.nbuckets - 1, W = c.size;
    for (int stage = 0; stage <= 2; stage++) {
        zero_plan_t z;
        ck_assert_int_eq(zero_plan_init(&z, &m, stage, c.rank, W, 1), DDP_OK);
        if (z.slots) z.shard_grads = calloc(z.shard_count + 1, sizeof(float));
        for (size_t i = 0; i < m.ntrainable; i++) m.grads[i] = grad_(i, 0);
        int ok = -1;
        ck_assert_int_eq(zero_grads_finite(&z, &m, &ctl, &ok), DDP_OK);
        ck_assert_int_eq(ok, 1);
        if (!zero_sharded(&z)) {
            m.grads[m.ntrainable / 2] = NAN; /* the sums are alike on every rank */
            ck_assert_int_eq(zero_grads_finite(&z, &m, &ctl, &ok), DDP_OK);
            ck_assert_int_eq(ok, 0);
            zero_plan_free(&z);
            continue;
        }
        /* the last rank's block of the last bucket */
        ck_assert_uint_gt(z.n[last], 0);
        if (c.rank == W - 1) zero_block_grads(&z, &m, last)[z.n[last] - 1] = NAN;
        ck_assert_int_eq(zero_grads_finite(&z, &m, &ctl, &ok), DDP_OK);
        zverdict_t v = {0};
        ZNOTE(&v, ok == 0, "stage %d: a NaN in rank %d's block is not seen here", stage, W - 1);
        zagree_(&v);
        if (c.rank == W - 1) zero_block_grads(&z, &m, last)[z.n[last] - 1] = 1.0f;
        /* an infinity in rank 0's buffer, in the last rank's block: scratch */
        size_t f, n;
        comm_block(m.buckets[last].count, W, W - 1, &f, &n);
        if (c.rank == 0) model_bucket_grads(&m, last)[f] = INFINITY;
        ck_assert_int_eq(zero_grads_finite(&z, &m, &ctl, &ok), DDP_OK);
        ck_assert_int_eq(ok, 1);
        free(z.shard_grads);
        zero_plan_free(&z);
    }
    model_free(&m);
}
END_TEST

/* A checkpoint's optimizer state: rank 0 gathers every bucket from the
 * shards (zero_gather_bucket); at resume it hands each rank its shard back
 * (zero_scatter_state). */
static float sval_(size_t i, int k)
{
    return (float)(i * 3 + 1) + 0.25f * (float)k;
}

START_TEST(zero_state_gather_scatter)
{
    model_t m;
    zlayout_(&m);
    alloc_(&m);
    zero_plan_t z;
    ck_assert_int_eq(zero_plan_init(&z, &m, 1, c.rank, c.size, 1), DDP_OK);
    size_t most = model_max_bucket(&m);
    float *state = calloc(z.shard_count + 1, sizeof *state);
    float *scratch = calloc(most + 1, sizeof *scratch);
    float *bucket = c.rank == 0 ? calloc(most + 1, sizeof *bucket) : NULL;
    for (int b = 0; b < m.nbuckets; b++)
        for (size_t j = 0; j < z.n[b]; j++)
            state[z.shard_off[b] + j] = sval_(m.buckets[b].offset + z.first[b] + j, 0);
    zverdict_t v = {0};
    for (int b = 0; b < m.nbuckets; b++) {
        if (bucket)
            for (size_t e = 0; e < most; e++) bucket[e] = NAN;
        ck_assert_int_eq(zero_gather_bucket(&z, &m, &ctl, state, b, bucket, scratch), DDP_OK);
        for (size_t e = 0; bucket && e < m.buckets[b].count; e++)
            ZNOTE(&v, bucket[e] == sval_(m.buckets[b].offset + e, 0),
                  "gathered bucket %d element %zu: %g, expected %g", b, e, (double)bucket[e],
                  (double)sval_(m.buckets[b].offset + e, 0));
    }
    zagree_(&v);
    float *full = NULL;
    if (c.rank == 0) {
        full = malloc(m.ntrainable * sizeof *full);
        for (size_t i = 0; i < m.ntrainable; i++) full[i] = sval_(i, 1);
    }
    for (size_t j = 0; j < z.shard_count; j++) state[j] = NAN;
    ck_assert_int_eq(zero_scatter_state(&z, &m, &ctl, full, state), DDP_OK);
    for (int b = 0; b < m.nbuckets; b++)
        for (size_t j = 0; j < z.n[b]; j++) {
            size_t i = m.buckets[b].offset + z.first[b] + j;
            ZNOTE(&v, state[z.shard_off[b] + j] == sval_(i, 1),
                  "scattered state of element %zu: %g, expected %g", i,
                  (double)state[z.shard_off[b] + j], (double)sval_(i, 1));
        }
    zagree_(&v);
    free(full);
    free(bucket);
    free(scratch);
    free(state);
    zero_plan_free(&z);
    model_free(&m);
}
END_TEST

/* --zero 1 and 2 train the parameters and optimizer state of --zero 0 bit
 * for bit: 3 steps of AdamW on gradients whose sums depend on the order of
 * addition, on shared memory and on the ring (whose all-reduce adds every
 * element in the reduce-scatter's order), with the optimizer as the
 * reducer's update hook (optim_apply, fused where it can be) and, as the
 * trainer runs --clip-grad-norm, after the step (zero_grad_norm,
 * optim_step, reducer_gather_params). */
typedef struct optrig {
    optim_t o;
    model_t *m;
} optrig_t;

static void optim_hook_(void *arg, size_t offset, size_t count)
{
    optrig_t *h = arg;
    optim_apply(&h->o, h->m, offset, count);
}

START_TEST(zero_optimizer_matches_stage0)
{
    static const char *algos[] = {"auto", "ring"}, *modes[] = {"per bucket", "clipped"};
    for (int run = 0; run < 4; run++) {
        int a = run / 2, whole = run % 2;
        ck_assert_int_eq(comm_mpi_set_algorithm(&c, algos[a]), DDP_OK);
        ck_assert_int_eq(comm_mpi_set_ring(&c, 5 * sizeof(float), 2), DDP_OK);
        float *want_p = NULL, *want_s[2] = {NULL, NULL};
        for (int stage = 0; stage <= 2; stage++) {
            model_t m;
            zero_plan_t z;
            zlayout_(&m);
            ck_assert_int_eq(zero_plan_init(&z, &m, stage, c.rank, c.size, 1), DDP_OK);
            m.grad_slots = z.slots;
            alloc_(&m);
            if (z.slots) z.shard_grads = calloc(z.shard_count + 1, sizeof(float));
            for (size_t i = 0; i < m.ntrainable; i++) /* the gaps zero, as the trainer's */
                m.params[i] = gap_(&m, i) ? 0.0f : (float)hval_(i, 0, 99);
            optrig_t h = {.m = &m};
            optim_opts_t oo = {.kind = OPTIM_ADAMW,
                               .schedule = SCHED_CONSTANT,
                               .lr = 1e-2,
                               .weight_decay = 1e-2,
                               .beta1 = 0.9,
                               .beta2 = 0.999,
                               .eps = 1e-8,
                               .clip_grad_norm = whole ? 0.05 : 0,
                               .total_steps = 3};
            model_mem_t mem = {mem_alloc_, mem_free_, &c};
            ck_assert_int_eq(optim_init(&h.o, &oo, &m, &mem, &z), DDP_OK);
            reducer_apply_t ap = {.fn = optim_hook_, .arg = &h};
            ap.nout = optim_outputs(&h.o, &m, ap.out);
            reducer_opts_t ro = {.wire = COMM_FLOAT,
                                 .apply = whole ? NULL : &ap,
                                 .fuse = 1,
                                 .zero = &z,
                                 .params = m.params};
            reducer_t *r;
            ck_assert_int_eq(reducer_init(&r, &m, &c, &ro), DDP_OK);
            for (int k = 0; k < 3; k++) {
                if (!whole) optim_begin(&h.o);
                reducer_begin(r, 1, 1, k, 0.0f);
                zbackward_(r, &m, oval_, k, 0.0f);
                ck_assert_int_eq(reducer_finish(r), DDP_OK);
                if (whole) {
                    double norm;
                    ck_assert_int_eq(zero_grad_norm(&z, &m, &ctl, &norm), DDP_OK);
                    ck_assert_double_gt(norm, oo.clip_grad_norm); /* the scale is used */
                    ddp_status_t st = optim_step(&h.o, &m, norm);
                    zverdict_t v = {0};
                    ZNOTE(&v, st == DDP_OK, "%s, --zero %d: optim_step failed: %s", algos[a],
                          stage, ddp_error_message());
                    zagree_(&v);
                    ck_assert_int_eq(reducer_gather_params(r), DDP_OK);
                }
                zverdict_t v = {0};
                ZNOTE(&v, h.o.error == DDP_OK, "%s, %s, --zero %d: optim_apply refused a range",
                      algos[a], modes[whole], stage);
                zagree_(&v);
            }
            ck_assert(same_everywhere_(m.params, m.ntrainable * sizeof(float)));
            if (stage == 0) {
                want_p = malloc(m.ntrainable * sizeof(float));
                memcpy(want_p, m.params, m.ntrainable * sizeof(float));
                for (int s = 0; s < 2; s++) {
                    want_s[s] = malloc(m.ntrainable * sizeof(float));
                    memcpy(want_s[s], h.o.state[s], m.ntrainable * sizeof(float));
                }
            } else {
                zverdict_t v = {0};
                for (size_t i = 0; i < m.ntrainable; i++)
                    ZNOTE(&v, !memcmp(&m.params[i], &want_p[i], sizeof(float)),
                          "%s, %s, --zero %d: parameter %zu is %.9g, --zero 0 %.9g", algos[a],
                          modes[whole], stage, i, (double)m.params[i], (double)want_p[i]);
                for (int s = 0; s < 2; s++)
                    for (int b = 0; b < m.nbuckets; b++)
                        for (size_t j = 0; j < z.n[b]; j++) {
                            size_t i = m.buckets[b].offset + z.first[b] + j;
                            const float *got = &h.o.state[s][z.shard_off[b] + j];
                            ZNOTE(&v, !memcmp(got, &want_s[s][i], sizeof(float)),
                                  "%s, %s, --zero %d: state %d of element %zu is %.9g, --zero 0 "
                                  "%.9g",
                                  algos[a], modes[whole], stage, s, i, (double)*got,
                                  (double)want_s[s][i]);
                        }
                zagree_(&v);
            }
            reducer_free(r);
            optim_free(&h.o);
            free(z.shard_grads);
            zero_plan_free(&z);
            model_free(&m);
        }
        free(want_p);
        free(want_s[0]);
        free(want_s[1]);
    }
    ck_assert_int_eq(comm_mpi_set_algorithm(&c, "auto"), DDP_OK);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("reducer");
    TCase *tc = tcase_create("reducer");
    tcase_add_checked_fixture(tc, setup_, teardown_);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, float_no_hook);
    tcase_add_test(tc, float_with_hook);
    tcase_add_test(tc, bf16_with_hook);
    tcase_add_test(tc, fp16_no_hook);
    tcase_add_test(tc, accumulation);
    tcase_add_test(tc, find_unused);
    tcase_add_test(tc, no_sync);
    suite_add_tcase(s, tc);
    TCase *tz = tcase_create("zero");
    tcase_add_checked_fixture(tz, zsetup_, zteardown_);
    tcase_set_timeout(tz, 120);
    tcase_add_test(tz, zero_plan);
    tcase_add_test(tz, zero1_update_per_bucket);
    tcase_add_test(tz, zero2_slots);
    tcase_add_test(tz, zero_compressed);
    tcase_add_test(tz, zero2_accumulation);
    tcase_add_test(tz, zero_whole_step);
    tcase_add_test(tz, zero_norm_stages);
    tcase_add_test(tz, zero_nonfinite_agreed);
    tcase_add_test(tz, zero_state_gather_scatter);
    tcase_add_test(tz, zero_optimizer_matches_stage0);
    suite_add_tcase(s, tz);
    return s;
}
