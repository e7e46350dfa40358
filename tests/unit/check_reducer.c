/* check_reducer.c -- the reducer on W ranks (built as check_reducer_np2 and
 * _np3): several buckets of a small MLP, layers becoming ready in a
 * different order on every rank, every wire type (float32; bf16 and fp16 on
 * values they hold exactly), with and without the per-bucket update hook
 * (fused into the all-reduce on shared memory), accumulation micro-batches
 * that communicate nothing, --find-unused, and the statistics.  The
 * reference is the sum computed here from every rank's known gradients. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm_mpi.h"
#include "model.h"
#include "reducer.h"
#include "tests.h"

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

/* 6 -> 7 -> 5 -> 3 with buckets of at most 16 floats: a bucket boundary
 * falls inside layers and between a weight and its bias. */
static void build_(model_t *m)
{
    model_opts_t o = {.spec = "linear:7,relu,linear:5,relu,linear:auto",
                      .input = {6, 1, 1, 0},
                      .outputs = 3,
                      .batch = 2,
                      .bucket_cap_bytes = 16 * sizeof(float),
                      .first_bucket_bytes = 16 * sizeof(float),
                      .freeze = ""};
    ck_assert_int_eq(model_layout(m, &o, &compute_cpu_ops), DDP_OK);
    model_mem_t mem = {mem_alloc_, mem_free_, &c};
    ck_assert_int_eq(model_alloc(m, &mem), DDP_OK);
    ck_assert_int_ge(m->nbuckets, 4);
}

/* Rank r's gradient element i: small integers, so every partial sum is
 * exact in float32, bf16 and fp16. */
static float grad_(size_t i, int r)
{
    return (float)((int)((i * 5 + (size_t)r * 11) % 17) - 8);
}

static void fill_grads_(model_t *m, int rank, float add)
{
    for (size_t i = 0; i < m->ntrainable; i++) m->grads[i] = add * m->grads[i] + grad_(i, rank);
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
        if (skip && skip[i]) want = 0;
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
        for (size_t i = 0; i < m->ntrainable; i++) ck_assert_int_ge(any[i], 1);
        free(any);
    }
    reducer_stats_t st;
    reducer_get_stats(g.r, &st);
    ck_assert_uint_eq(st.calls, 3u * (unsigned)m->nbuckets);
    ck_assert_uint_eq(st.bytes_sent, 3u * m->ntrainable * comm_dtype_size(wire));
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
        ck_assert_int_eq(g.updates[i], 1);
        ck_assert_float_eq(g.m.params[i], grad_(i, c.rank));
    }
    rig_free_(&g);
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
    return s;
}
