/* check_comm.c -- the MPI comm backend on W ranks (built as check_comm_np1,
 * _np2, _np3 and _np4): all-reduce of every dtype and of many sizes (0, 1, W-1,
 * primes, several slices and pieces, unaligned slices) with every algorithm
 * (auto = shared memory for comm-allocated buffers, ring, mpi), several in
 * flight with blocking small all-reduces in between (the SyncBatchNorm
 * pattern), more in flight than the shared-memory slots, the all-reduce
 * followed by an update (iallreduce_apply), bit-identical results on every
 * rank, the all-reduce adding in the reduce-scatter's order (ZeRO's round
 * trip), 16-bit accuracy bounds, mismatched slices, gradient-buffer memory,
 * broadcast, allgather, topology, counters and errors. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm_cases.h"
#include "comm_mpi.h"
#include "ddp_build.h"
#include "half.h"
#include "tests.h"

static comm_t c;
static const char *algos[] = {"auto", "hier", "ring", "mpi"};
enum { NALGO = sizeof algos / sizeof *algos };

static void setup_(void)
{
    ck_assert_int_eq(comm_init_mpi(&c, MPI_COMM_WORLD), DDP_OK);
}
static void teardown_(void)
{
    comm_free(&c);
}

/* ---- tests ----------------------------------------------------------------- */

/* Gradient-buffer memory: shared on one node (auto all-reduces of its
 * slices take the shared-memory path), a buffer of its own otherwise. */
static void *gbuf_(size_t bytes)
{
    void *p = NULL;
    ck_assert_int_eq(comm_mem_alloc(&c, bytes, &p), DDP_OK);
    ck_assert_ptr_nonnull(p);
    return p;
}

START_TEST(topology)
{
    int W;
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    ck_assert_int_eq(c.size, W);
    ck_assert_int_ge(c.nnodes, 1);
    ck_assert_int_ge(c.local_size, 1);
    ck_assert_int_lt(c.local_rank, c.local_size);
    ck_assert_ptr_nonnull(c.ops);
    ck_assert_ptr_nonnull(c.ops->progress);
    ck_assert_str_eq(c.ops->name, "mpi");
}
END_TEST

/* Every dtype, many sizes, both algorithms; exact integer sums.  Small
 * pieces make small buffers span many slices with empty blocks. */
START_TEST(allreduce_sizes_dtypes)
{
    const int W = c.size;
    const size_t sizes[] = {0,  1,  (size_t)W - 1, (size_t)W, (size_t)W + 1, 2,    3,    7,
                            13, 31, 101,           257,       1021,          4099, 65537};
    const size_t pieces[] = {64, 1000, 0}; /* ring bytes per message; 0 = the default */
    size_t nmax = 65537 + 3;
    char *mem = gbuf_(nmax * 8);
    for (size_t a = 0; a < NALGO; a++)
        for (size_t p = 0; p < sizeof pieces / sizeof *pieces; p++) {
            ck_assert_int_eq(comm_mpi_set_algorithm(&c, algos[a]), DDP_OK);
            ck_assert_int_eq(
                comm_mpi_set_ring(&c, pieces[p] ? pieces[p] : (size_t)4 << 20, p == 0 ? 3 : 2),
                DDP_OK);
            for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
                for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
                    size_t n = sizes[k];
                    comm_dtype_t t = dtypes[d];
                    /* at the start and 3 elements in (unaligned) */
                    void *buf = mem + (k % 2 ? 3 * comm_dtype_size(t) : 0);
                    fill_int_(buf, t, n, c.rank);
                    comm_desc_t desc = {"test-sizes", (int)k, -1};
                    ck_assert_int_eq(comm_allreduce(&c, buf, n, t, &desc), DDP_OK);
                    size_t bad = check_int_(buf, t, n, W);
                    ck_assert_msg(bad == n, "%s %s piece %zu: count %zu: element %zu = %g",
                                  algos[a], dtype_names[d], pieces[p], n, bad,
                                  bad < n ? get_(buf, t, bad) : 0.0);
                }
        }
    comm_mem_free(&c, mem);
}
END_TEST

/* More than one 8 MB chunk and many 1 MB pieces; every element checked;
 * counters. */
START_TEST(allreduce_float_large)
{
    size_t n = ((size_t)9 << 20) + 3; /* 36 MB + 12 bytes */
    float *x = gbuf_(n * sizeof *x);
    for (size_t a = 0; a < NALGO; a++) {
        ck_assert_int_eq(comm_mpi_set_algorithm(&c, algos[a]), DDP_OK);
        fill_int_(x, COMM_FLOAT, n, c.rank);
        comm_desc_t d = {"test", 0, -1};
        uint64_t before = c.allreduce_bytes, calls = c.allreduce_calls, seq = c.seq;
        ck_assert_int_eq(comm_allreduce(&c, x, n, COMM_FLOAT, &d), DDP_OK);
        size_t bad = check_int_(x, COMM_FLOAT, n, c.size);
        ck_assert_msg(bad == n, "%s: element %zu = %g", algos[a], bad, bad < n ? x[bad] : 0.0f);
        ck_assert_uint_eq(c.allreduce_bytes - before, n * sizeof(float));
        ck_assert_uint_eq(c.allreduce_calls, calls + 1);
        ck_assert_uint_eq(c.seq, seq + 1);
        ck_assert_str_eq(c.last.what, "test");
    }
    comm_mem_free(&c, x);
}
END_TEST

/* Buckets in flight while blocking small all-reduces run in between (the
 * SyncBatchNorm pattern), polled with progress and test, waited out of
 * order. */
START_TEST(allreduce_in_flight_with_blocking)
{
    const size_t na = 600001, nb = 250007, ns = 2 * 1024 + 1;
    /* buckets A (float) and B (bf16) are slices of one gradient buffer */
    char *grad = gbuf_(na * sizeof(float) + nb * sizeof(uint16_t) + 64);
    for (size_t a = 0; a < NALGO; a++) {
        ck_assert_int_eq(comm_mpi_set_algorithm(&c, algos[a]), DDP_OK);
        ck_assert_int_eq(comm_mpi_set_ring(&c, 64 << 10, 2), DDP_OK);
        float *A = (float *)grad;
        uint16_t *B = (uint16_t *)(grad + na * sizeof(float) + 64);
        double *S = malloc(ns * sizeof *S);
        int64_t E[1] = {0};
        fill_int_(A, COMM_FLOAT, na, c.rank);
        fill_int_(B, COMM_BF16, nb, c.rank);
        comm_req_t *ra, *rb, *re;
        comm_desc_t da = {"bucket", 0, 7}, db = {"bucket", 1, 7}, ds = {"syncbn-bwd", 3, 7};
        ck_assert_int_eq(c.ops->iallreduce(&c, A, na, COMM_FLOAT, &da, &ra), DDP_OK);
        for (int round = 0; round < 3; round++) {
            fill_int_(S, COMM_DOUBLE, ns, c.rank + round);
            ck_assert_int_eq(comm_allreduce(&c, S, ns, COMM_DOUBLE, &ds), DDP_OK);
            for (size_t i = 0; i < ns; i++) {
                double want = 0;
                for (int r = 0; r < c.size; r++) want += ival_(i, r + round);
                if (S[i] != want)
                    ck_abort_msg("%s: small all-reduce %d element %zu", algos[a], round, i);
            }
            if (round == 0)
                ck_assert_int_eq(c.ops->iallreduce(&c, B, nb, COMM_BF16, &db, &rb), DDP_OK);
            ck_assert_int_eq(c.ops->progress(&c), DDP_OK);
        }
        ck_assert_int_eq(c.ops->iallreduce(&c, E, 0, COMM_INT64, &ds, &re), DDP_OK);
        int done = 0;
        for (long i = 0; i < 100000000 && !done; i++)
            ck_assert_int_eq(c.ops->test(&c, rb, &done), DDP_OK);
        ck_assert(done);
        ck_assert_int_eq(c.ops->wait(&c, re), DDP_OK);
        ck_assert_int_eq(c.ops->wait(&c, rb), DDP_OK);
        ck_assert_int_eq(c.ops->wait(&c, ra), DDP_OK);
        ck_assert_uint_eq(check_int_(A, COMM_FLOAT, na, c.size), na);
        ck_assert_uint_eq(check_int_(B, COMM_BF16, nb, c.size), nb);
        ck_assert_int_eq(c.ops->progress(&c), DDP_OK); /* nothing in flight */
        free(S);
    }
    comm_mem_free(&c, grad);
}
END_TEST

/* Values whose sums depend on the order of addition: every rank must hold
 * the same bits, and a second run must reproduce them. */
START_TEST(allreduce_bit_identical)
{
    const size_t sizes[] = {1, 5, 1000, 123457, ((size_t)1 << 20) + 11};
    size_t nmax = (((size_t)1 << 20) + 11) * 8;
    char *shared = gbuf_(nmax), *priv = malloc(nmax), *again = malloc(nmax);
    ck_assert_int_eq(comm_mpi_set_ring(&c, 256 << 10, 2), DDP_OK);
    for (int path = 0; path < 2; path++) {
        /* path 0: auto on the gradient buffer (shared memory on one node);
         * path 1: the ring on a buffer of each rank's own */
        char *buf = path == 0 ? shared : priv;
        ck_assert_int_eq(comm_mpi_set_algorithm(&c, path == 0 ? "auto" : "ring"), DDP_OK);
        for (size_t d = 0; d < sizeof dtypes / sizeof *dtypes; d++)
            for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
                comm_dtype_t t = dtypes[d];
                size_t n = sizes[k], bytes = n * comm_dtype_size(t);
                comm_desc_t desc = {"test-bits", (int)k, -1};
                fill_rand_(buf, t, n, c.rank, 1.0 + c.rank);
                ck_assert_int_eq(comm_allreduce(&c, buf, n, t, &desc), DDP_OK);
                ck_assert_msg(same_on_all_ranks_(buf, bytes), "%s %s count %zu: ranks differ",
                              path ? "ring" : "auto", dtype_names[d], n);
                memcpy(again, buf, bytes);
                fill_rand_(buf, t, n, c.rank, 1.0 + c.rank);
                ck_assert_int_eq(comm_allreduce(&c, buf, n, t, &desc), DDP_OK);
                ck_assert_msg(!memcmp(buf, again, bytes), "%s %s count %zu: not reproducible",
                              path ? "ring" : "auto", dtype_names[d], n);
            }
    }
    comm_mem_free(&c, shared);
    free(priv);
    free(again);
}
END_TEST

/* 16-bit sums are done in float32 and rounded after every addition (ring,
 * mpi) or once (shared memory): the error is at most (W-1) unit roundoffs
 * of the sum of magnitudes (plus the smallest subnormal for fp16). */
START_TEST(allreduce_half_accuracy)
{
    const size_t n = 20011;
    const int W = c.size;
    uint16_t *h = gbuf_(n * sizeof *h);
    struct {
        comm_dtype_t t;
        double u, tiny;
    } kinds[] = {{COMM_BF16, 1.0 / 256, 0}, {COMM_FP16, 1.0 / 2048, 1.0 / 16777216}};
    for (size_t a = 0; a < NALGO; a++)
        for (size_t k = 0; k < 2; k++) {
            ck_assert_int_eq(comm_mpi_set_algorithm(&c, algos[a]), DDP_OK);
            comm_dtype_t t = kinds[k].t;
            fill_rand_(h, t, n, c.rank, 3.0);
            comm_desc_t desc = {"test-half", (int)k, -1};
            ck_assert_int_eq(comm_allreduce(&c, h, n, t, &desc), DDP_OK);
            double worst = 0;
            for (size_t i = 0; i < n; i++) {
                double exact = 0, mag = 0; /* of the 16-bit inputs */
                for (int r = 0; r < W; r++) {
                    float v = (float)(rval_(i, r) * 3.0);
                    double x = t == COMM_BF16 ? ddp_bf16_to_f32(ddp_f32_to_bf16(v))
                                              : ddp_f16_to_f32(ddp_f32_to_f16(v));
                    exact += x;
                    mag += fabs(x);
                }
                double err = fabs(get_(h, t, i) - exact);
                double bound = (W - 1) * kinds[k].u * mag * 1.0001 + (W - 1) * kinds[k].tiny;
                ck_assert_msg(err <= bound, "%s %s element %zu: %g vs exact %g (bound %g)",
                              algos[a], dtype_names[t == COMM_BF16 ? 2 : 3], i, get_(h, t, i),
                              exact, bound);
                if (err / (mag + 1e-30) > worst) worst = err / (mag + 1e-30);
            }
            ck_assert_double_le(worst, (W - 1) * kinds[k].u * 1.0001);
        }
    comm_mem_free(&c, h);
}
END_TEST

/* The hierarchical algorithm's sum of element i of n of 16-bit values
 * (allreduce_half_special's): the slice of i (comm_block of n over the
 * most ranks on a node), each node's sum of its ranks in local rank order,
 * added in float32 and rounded once; then the ring between the nodes over
 * the slice's N blocks: the block b of i is added up starting at node b+1,
 * rounding after each addition, and finished by node b. */
static float hier_half_sum_(comm_dtype_t t, size_t i, size_t n, int k)
{
    int me[3] = {c.node, c.local_rank, c.local_size}, *all = malloc((size_t)c.size * sizeof me);
    MPI_Allgather(me, 3, MPI_INT, all, 3, MPI_INT, MPI_COMM_WORLD);
    int S = 0, N = c.nnodes, j = 0;
    for (int r = 0; r < c.size; r++) S = all[3 * r + 2] > S ? all[3 * r + 2] : S;
    size_t off = 0, len = 0;
    for (j = 0; j < S; j++) {
        comm_block(n, S, j, &off, &len);
        if (i >= off && i < off + len) break;
    }
    int b = 0;
    for (b = 0; b < N; b++) {
        size_t bo, bl;
        comm_block(len, N, b, &bo, &bl);
        if (i - off >= bo && i - off < bo + bl) break;
    }
    float part[64] = {0};
    ck_assert_int_le(N, 64);
    for (int node = 0; node < N; node++) {
        float acc = 0;
        int first = 1;
        for (int lr = 0; lr < c.size; lr++) /* local rank lr of node */
            for (int r = 0; r < c.size; r++) {
                if (all[3 * r] != node || all[3 * r + 1] != lr) continue;
                uint16_t x = (uint16_t)(rval_(i, r + 7 * k) * 32768.0 + 32768.0);
                float v = t == COMM_BF16 ? ddp_bf16_to_f32(x) : ddp_f16_to_f32(x);
                acc = first ? v : acc + v;
                first = 0;
            }
        uint16_t h = t == COMM_BF16 ? ddp_f32_to_bf16(acc) : ddp_f32_to_f16(acc);
        part[node] = t == COMM_BF16 ? ddp_bf16_to_f32(h) : ddp_f16_to_f32(h);
    }
    free(all);
    float acc = part[(b + 1) % N];
    for (int s = 2; s <= N; s++) {
        acc = acc + part[(b + s) % N];
        uint16_t h = t == COMM_BF16 ? ddp_f32_to_bf16(acc) : ddp_f32_to_f16(acc);
        acc = t == COMM_BF16 ? ddp_bf16_to_f32(h) : ddp_f16_to_f32(h);
    }
    return acc;
}

/* Every kind of 16-bit value (random bit patterns: normal, subnormal, zero,
 * infinite, NaN) and both vector and scalar tails of the sums: the shared-
 * memory path must give exactly the float32 sum in rank order rounded once
 * (across nodes, the hierarchical algorithm's order: hier_half_sum_), the
 * ring on 2 ranks exactly the rounded float32 sum of the two. */
START_TEST(allreduce_half_special)
{
    const size_t n = 4099;
    const int W = c.size;
    uint16_t *shared = gbuf_(n * sizeof(uint16_t)), *priv = malloc(n * sizeof(uint16_t));
    for (int k = 0; k < 2; k++) {
        comm_dtype_t t = k ? COMM_FP16 : COMM_BF16;
        for (int path = 0; path < 2; path++) {
            if (path == 1 && W != 2) continue; /* the ring's order depends on the block */
            uint16_t *h = path ? priv : shared;
            ck_assert_int_eq(comm_mpi_set_algorithm(&c, path ? "ring" : "auto"), DDP_OK);
            for (size_t i = 0; i < n; i++)
                h[i] = (uint16_t)(rval_(i, c.rank + 7 * k) * 32768.0 + 32768.0);
            comm_desc_t desc = {"test-half-special", k, -1};
            ck_assert_int_eq(comm_allreduce(&c, h, n, t, &desc), DDP_OK);
            for (size_t i = 0; i < n; i++) {
                float acc = 0;
                uint16_t want;
                if (path == 0 && c.nnodes > 1) {
                    acc = hier_half_sum_(t, i, n, k);
                    want = t == COMM_BF16 ? ddp_f32_to_bf16(acc) : ddp_f32_to_f16(acc);
                } else {
                    for (int r = 0; r < W; r++) {
                        uint16_t x = (uint16_t)(rval_(i, r + 7 * k) * 32768.0 + 32768.0);
                        float v = t == COMM_BF16 ? ddp_bf16_to_f32(x) : ddp_f16_to_f32(x);
                        acc = r ? acc + v : v;
                    }
                    want = t == COMM_BF16 ? ddp_f32_to_bf16(acc) : ddp_f32_to_f16(acc);
                }
                double got = get_(h, t, i);
                if (isnan(acc)) {
                    ck_assert_msg(isnan(got), "%s %s element %zu: %g, expected NaN",
                                  path ? "ring" : "auto", k ? "fp16" : "bf16", i, got);
                } else {
                    ck_assert_msg(h[i] == want, "%s %s element %zu: 0x%04x, expected 0x%04x",
                                  path ? "ring" : "auto", k ? "fp16" : "bf16", i, h[i], want);
                }
            }
            if (path == 0) ck_assert(same_on_all_ranks_(h, n * sizeof *h));
        }
    }
    comm_mem_free(&c, shared);
    free(priv);
}
END_TEST

/* Many all-reduces in flight at once, waited in reverse order: slices of
 * the gradient buffer (more than the shared-memory slots) and private
 * buffers (ring), interleaved. */
START_TEST(allreduce_many_in_flight)
{
    enum { K = 110 }; /* 73 of them shared-memory: more than SHM_SLOTS */
    comm_req_t *rq[K];
    float *x[K];
    size_t n[K], total = 0;
    for (int k = 0; k < K; k++) total += n[k] = (size_t)((k % 13) * (k % 13) * 997 + k);
    float *grad = gbuf_(total * sizeof(float));
    ck_assert_int_eq(comm_mpi_set_ring(&c, 4096, 3), DDP_OK);
    for (int a = 0; a < 2; a++) {
        ck_assert_int_eq(comm_mpi_set_algorithm(&c, algos[a]), DDP_OK);
        size_t off = 0;
        for (int k = 0; k < K; k++) {
            x[k] = k % 3 == 2 ? malloc((n[k] ? n[k] : 1) * sizeof(float)) : grad + off;
            off += n[k];
            fill_int_(x[k], COMM_FLOAT, n[k], c.rank + k);
            comm_desc_t d = {"bucket", k, 1};
            ck_assert_int_eq(c.ops->iallreduce(&c, x[k], n[k], COMM_FLOAT, &d, &rq[k]), DDP_OK);
            if (k % 7 == 0) ck_assert_int_eq(c.ops->progress(&c), DDP_OK);
        }
        for (int k = K - 1; k >= 0; k--) {
            ck_assert_int_eq(c.ops->wait(&c, rq[k]), DDP_OK);
            for (size_t i = 0; i < n[k]; i++) {
                double want = 0;
                for (int r = 0; r < c.size; r++) want += ival_(i, r + k);
                if (x[k][i] != want) ck_abort_msg("%s: all-reduce %d element %zu", algos[a], k, i);
            }
            if (k % 3 == 2) free(x[k]);
        }
    }
    comm_mem_free(&c, grad);
}
END_TEST

/* Ranks passing different slices of the gradient buffer to the same
 * shared-memory all-reduce: every rank reports the mismatch. */
START_TEST(allreduce_slice_mismatch)
{
    if (c.nnodes != 1 || c.size < 2) return; /* shared memory: one node, 2+ ranks */
    float *grad = gbuf_(4096 * sizeof(float));
    comm_desc_t d = {"bucket", 5, 42};
    ddp_clear_error();
    ddp_status_t s = comm_allreduce(&c, grad + (c.rank == 1 ? 8 : 0), 1000, COMM_FLOAT, &d);
    ck_assert_int_eq(s, DDP_ERR_MISMATCH);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "bucket 5"));
    ddp_clear_error();
    /* a collective that synchronises all ranks: nobody still reads the buffer */
    MPI_Barrier(MPI_COMM_WORLD);
    comm_mem_free(&c, grad);
}
END_TEST

/* iallreduce_apply: an SGD-with-momentum-like update of two extra buffers
 * from the sums.  The update reads the sums and writes p and m; afterwards
 * every rank holds the same p and m (bit for bit) equal to the update of the
 * exact sums, on every algorithm, for shared (comm-allocated: the fused
 * path, owners update their block) and private buffers (the update runs on
 * every rank), several in flight with a blocking all-reduce between, with
 * sizes that do not divide by W. */
typedef struct upd {
    float *g, *p, *m; /* the bucket's slices */
    int calls;
    size_t elems; /* elements updated on this rank */
} upd_t;

static void upd_fn_(void *arg, size_t first, size_t count)
{
    upd_t *u = arg;
    for (size_t e = first; e < first + count; e++) {
        u->m[e] = 0.5f * u->m[e] + u->g[e];
        u->p[e] -= 0.25f * u->m[e];
    }
    u->calls++;
    u->elems += count;
}

START_TEST(allreduce_apply)
{
    static const size_t sizes[] = {0, 1, 7, 1000, 4099, 300001};
    enum { NS = sizeof sizes / sizeof *sizes };
    size_t total = 0;
    for (int k = 0; k < NS; k++) total += sizes[k];
    for (int shared = 0; shared < 2; shared++) {
        for (int a = 0; a < NALGO; a++) {
            ck_assert_int_eq(comm_mpi_set_algorithm(&c, algos[a]), DDP_OK);
            float *g = shared ? gbuf_(total * 4) : malloc(total * 4 + 4);
            float *p = shared ? gbuf_(total * 4) : malloc(total * 4 + 4);
            float *m = shared ? gbuf_(total * 4) : malloc(total * 4 + 4);
            upd_t u[NS];
            comm_req_t *rq[NS];
            size_t off = 0;
            for (int k = 0; k < NS; k++) {
                fill_int_(g + off, COMM_FLOAT, sizes[k], c.rank);
                for (size_t e = 0; e < sizes[k]; e++) {
                    p[off + e] = (float)(e % 5);
                    m[off + e] = (float)(e % 3);
                }
                u[k] = (upd_t){g + off, p + off, m + off, 0, 0};
                comm_apply_t ap = {.fn = upd_fn_, .arg = &u[k], .nextra = 2};
                ap.extra[0] = p + off;
                ap.extra[1] = m + off;
                comm_desc_t d = {"bucket", k, 3};
                ck_assert_int_eq(c.ops->iallreduce_apply(&c, g + off, sizes[k], &ap, &d, &rq[k]),
                                 DDP_OK);
                if (k == 2) { /* the SyncBN pattern in between */
                    double bn[4] = {1, 2, 3, (double)c.rank};
                    comm_desc_t db = {"syncbn", 1, 3};
                    ck_assert_int_eq(comm_allreduce(&c, bn, 4, COMM_DOUBLE, &db), DDP_OK);
                    ck_assert_double_eq(bn[0], c.size);
                }
                off += sizes[k];
            }
            for (int k = NS - 1; k >= 0; k--) ck_assert_int_eq(c.ops->wait(&c, rq[k]), DDP_OK);
            off = 0;
            size_t updated = 0;
            for (int k = 0; k < NS; k++) {
                for (size_t e = 0; e < sizes[k]; e++) {
                    double sum = 0;
                    for (int r = 0; r < c.size; r++) sum += ival_(e, r);
                    float mm = 0.5f * (float)(e % 3) + (float)sum;
                    float pp = (float)(e % 5) - 0.25f * mm;
                    if (p[off + e] != pp || m[off + e] != mm)
                        ck_abort_msg("%s %s size %zu element %zu: p %g m %g, want %g %g",
                                     shared ? "shared" : "private", algos[a], sizes[k], e,
                                     p[off + e], m[off + e], pp, mm);
                }
                updated += u[k].elems;
                off += sizes[k];
            }
            ck_assert(same_on_all_ranks_(p, total * 4));
            ck_assert(same_on_all_ranks_(m, total * 4));
            /* the fused path updates each element once over all ranks */
            unsigned long long all = 0, mine = updated;
            MPI_Allreduce(&mine, &all, 1, MPI_UNSIGNED_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
            /* shared memory and the hierarchical algorithm update each
             * element once per node */
            if (shared && a <= 1)
                ck_assert_uint_eq(all, (unsigned long long)total * c.nnodes);
            else
                ck_assert_uint_eq(all, (unsigned long long)total * c.size);
            if (shared) {
                comm_mem_free(&c, m);
                comm_mem_free(&c, p);
                comm_mem_free(&c, g);
            } else {
                free(m), free(p), free(g);
            }
        }
    }
    ck_assert_int_eq(comm_mpi_set_algorithm(&c, "auto"), DDP_OK);
}
END_TEST

/* ---- reduce-scatter and all-gather (ZeRO's exchange) ------------------------- */

/* Every algorithm (shared memory on the gradient buffer, the ring on a
 * private buffer, forced ring, "mpi"), every dtype, many sizes: the owner's
 * block holds the exact sums; all-gather hands every rank every owner's
 * block, the same bytes everywhere. */
START_TEST(reduce_scatter_allgather_sizes)
{
    const int W = c.size;
    const size_t sizes[] = {0, 1, (size_t)W - 1, (size_t)W, (size_t)W + 1, 7, 101, 4099, 65537};
    size_t nmax = 65537 + 3;
    char *shared = gbuf_(nmax * 8), *priv = malloc(nmax * 8);
    ck_assert_int_eq(comm_mpi_set_ring(&c, 1000, 3), DDP_OK); /* many slices */
    for (int path = 0; path < 4; path++) {
        /* auto on shared memory, auto on a private buffer (the ring),
         * forced ring on shared memory, "mpi" */
        static const char *names[] = {"auto-shared", "auto-private", "ring", "mpi"};
        char *mem = path == 1 ? priv : shared;
        ck_assert_int_eq(comm_mpi_set_algorithm(&c, path == 2 ? "ring" : path == 3 ? "mpi" : "auto"),
                         DDP_OK);
        for (size_t d = 0; d < NDTYPE; d++)
            for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
                size_t n = sizes[k];
                comm_dtype_t t = dtypes[d];
                void *buf = mem + (k % 2 ? 3 * comm_dtype_size(t) : 0);
                comm_desc_t desc = {"test-blocks", (int)k, -1};
                fill_int_(buf, t, n, c.rank);
                uint64_t seq = c.seq;
                ck_assert_int_eq(comm_reduce_scatter(&c, buf, n, t, NULL, &desc), DDP_OK);
                size_t bad = check_block_int_(buf, t, n, W, c.rank);
                ck_assert_msg(bad == n, "%s reduce-scatter %s count %zu: element %zu = %g",
                              names[path], dtype_names[d], n, bad,
                              bad < n ? get_(buf, t, bad) : 0.0);
                fill_int_(buf, t, n, c.rank);
                ck_assert_int_eq(comm_allgather_blocks(&c, buf, n, t, &desc), DDP_OK);
                bad = check_gathered_(buf, t, n, W);
                ck_assert_msg(bad == n, "%s all-gather %s count %zu: element %zu = %g",
                              names[path], dtype_names[d], n, bad,
                              bad < n ? get_(buf, t, bad) : 0.0);
                ck_assert(same_on_all_ranks_(buf, n * comm_dtype_size(t)));
                ck_assert_uint_eq(c.seq, seq + 2);
            }
    }
    ck_assert_int_eq(comm_mpi_set_algorithm(&c, "auto"), DDP_OK);
    comm_mem_free(&c, shared);
    free(priv);
}
END_TEST

/* The owner's update runs once, on its block only, after the sums: the
 * shard ZeRO's optimizer updates.  In flight with an all-reduce and an
 * all-gather, waited out of order. */
typedef struct shard_upd {
    const float *g;
    float *p;
    size_t first, n;
    int calls;
} shard_upd_t;

static void shard_fn_(void *arg, size_t first, size_t n)
{
    shard_upd_t *u = arg;
    for (size_t e = first; e < first + n; e++) u->p[e] -= 0.5f * u->g[e];
    u->first = first;
    u->n = n;
    u->calls++;
}

START_TEST(reduce_scatter_apply)
{
    const size_t n = 100003, nb = 4099;
    for (int path = 0; path < 3; path++) {
        ck_assert_int_eq(comm_mpi_set_algorithm(&c, path == 2 ? "mpi" : path ? "ring" : "auto"),
                         DDP_OK);
        float *g = gbuf_(n * 4), *p = malloc(n * 4);
        double *small = gbuf_(nb * 8);
        for (size_t e = 0; e < n; e++) p[e] = (float)(e % 7);
        fill_int_(g, COMM_FLOAT, n, c.rank);
        fill_int_(small, COMM_DOUBLE, nb, c.rank);
        shard_upd_t u = {g, p, 0, 0, 0};
        comm_apply_t ap = {.fn = shard_fn_, .arg = &u};
        comm_desc_t d = {"shard", 0, 5};
        comm_req_t *rs, *ag;
        ck_assert_int_eq(c.ops->ireduce_scatter(&c, g, n, COMM_FLOAT, &ap, &d, &rs), DDP_OK);
        comm_desc_t d2 = {"syncbn", 1, 5};
        double bn[3] = {1, 2, (double)c.rank};
        ck_assert_int_eq(comm_allreduce(&c, bn, 3, COMM_DOUBLE, &d2), DDP_OK);
        ck_assert_double_eq(bn[0], c.size);
        ck_assert_int_eq(c.ops->iallgather(&c, small, nb, COMM_DOUBLE, &d, &ag), DDP_OK);
        ck_assert_int_eq(c.ops->wait(&c, ag), DDP_OK);
        ck_assert_int_eq(c.ops->wait(&c, rs), DDP_OK);
        ck_assert_uint_eq(check_gathered_(small, COMM_DOUBLE, nb, c.size), nb);
        size_t first, len;
        comm_block(n, c.size, c.rank, &first, &len);
        ck_assert_int_eq(u.calls, 1);
        ck_assert_uint_eq(u.first, first);
        ck_assert_uint_eq(u.n, len);
        for (size_t e = 0; e < n; e++) {
            double sum = 0;
            for (int r = 0; r < c.size; r++) sum += ival_(e, r);
            float want = e >= first && e < first + len ? (float)(e % 7) - 0.5f * (float)sum
                                                       : (float)(e % 7);
            if (p[e] != want) ck_abort_msg("path %d element %zu: %g, want %g", path, e, p[e], want);
        }
        comm_mem_free(&c, small);
        comm_mem_free(&c, g);
        free(p);
    }
    ck_assert_int_eq(comm_mpi_set_algorithm(&c, "auto"), DDP_OK);
}
END_TEST

/* ZeRO's round trip -- reduce-scatter, each owner updates its shard, the
 * parameters all-gathered -- gives bit for bit the all-reduce followed by
 * the update: on shared memory both sum each block on its owner in rank
 * order, on the ring the all-reduce adds each element in the order its
 * reduce-scatter does. */
START_TEST(zero_round_trip_matches_allreduce)
{
    const size_t n = 300007;
    for (int path = 0; path < 2; path++) {
        ck_assert_int_eq(comm_mpi_set_algorithm(&c, path ? "ring" : "auto"), DDP_OK);
        float *g = gbuf_(n * 4), *pa = gbuf_(n * 4), *pb = gbuf_(n * 4);
        for (size_t e = 0; e < n; e++) pa[e] = pb[e] = (float)rval_(e, 99);
        /* A: all-reduce with the update applied (fused on shared memory) */
        fill_rand_(g, COMM_FLOAT, n, c.rank, 1.0 + c.rank);
        shard_upd_t ua = {g, pa, 0, 0, 0};
        comm_apply_t apa = {.fn = shard_fn_, .arg = &ua, .nextra = 1};
        apa.extra[0] = pa;
        comm_desc_t d = {"bucket", 0, 1};
        comm_req_t *q;
        ck_assert_int_eq(c.ops->iallreduce_apply(&c, g, n, &apa, &d, &q), DDP_OK);
        ck_assert_int_eq(c.ops->wait(&c, q), DDP_OK);
        /* B: reduce-scatter + the owner's update, then all-gather */
        fill_rand_(g, COMM_FLOAT, n, c.rank, 1.0 + c.rank);
        shard_upd_t ub = {g, pb, 0, 0, 0};
        comm_apply_t apb = {.fn = shard_fn_, .arg = &ub};
        ck_assert_int_eq(comm_reduce_scatter(&c, g, n, COMM_FLOAT, &apb, &d), DDP_OK);
        ck_assert_int_eq(comm_allgather_blocks(&c, pb, n, COMM_FLOAT, &d), DDP_OK);
        ck_assert(same_on_all_ranks_(pb, n * 4));
        for (size_t e = 0; e < n; e++)
            if (memcmp(&pa[e], &pb[e], sizeof *pa))
                ck_abort_msg("%s element %zu: all-reduce %.9g, round trip %.9g",
                             path ? "ring" : "shared", e, pa[e], pb[e]);
        comm_mem_free(&c, pb);
        comm_mem_free(&c, pa);
        comm_mem_free(&c, g);
    }
    ck_assert_int_eq(comm_mpi_set_algorithm(&c, "auto"), DDP_OK);
}
END_TEST

/* Rank r's element i of mixed magnitudes (1e-4 to 1e4): a float sum of
 * three or more of them depends on the order of addition. */
static float mixed_(size_t i, int r)
{
    static const double mag[] = {1e-4, 1e-3, 1e-2, 1e-1, 1, 1e1, 1e2, 1e3, 1e4};
    return (float)(rval_(i, r) * mag[(i * 7 + (size_t)r * 5) % 9]);
}

/* --zero gives --zero 0's weights bit for bit because the all-reduce adds
 * every element in the order of the reduce-scatter: the all-reduce's sums
 * equal those of the reduce-scatter followed by the all-gather, bit for
 * bit, on the ring (a buffer of each rank's own, and forced on the
 * gradient buffer) and on shared memory, for sizes that give empty,
 * uneven and many-slice blocks, on floats whose sums depend on the order
 * (checked: on 3 or more ranks the data tells two orders apart). */
START_TEST(allreduce_matches_reduce_scatter)
{
    const int W = c.size;
    const size_t sizes[] = {1, (size_t)W + 1, 7, 1001, 65537, 300007};
    const size_t nmax = 300007;
    float *shared = gbuf_(2 * nmax * sizeof(float)), *priv = malloc(2 * nmax * sizeof(float));
    ck_assert_int_eq(comm_mpi_set_ring(&c, 4096, 3), DDP_OK); /* many slices */
    static const char *names[] = {"ring-private", "ring-shared", "auto-shared"};
    for (int path = 0; path < 3; path++) {
        ck_assert_int_eq(comm_mpi_set_algorithm(&c, path == 2 ? "auto" : "ring"), DDP_OK);
        float *mem = path == 0 ? priv : shared;
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            size_t n = sizes[k];
            float *a = mem, *b = mem + n;
            for (size_t i = 0; i < n; i++) a[i] = b[i] = mixed_(i, c.rank);
            comm_desc_t d = {"test-order", (int)k, -1};
            ck_assert_int_eq(comm_allreduce(&c, a, n, COMM_FLOAT, &d), DDP_OK);
            ck_assert_int_eq(comm_reduce_scatter(&c, b, n, COMM_FLOAT, NULL, &d), DDP_OK);
            ck_assert_int_eq(comm_allgather_blocks(&c, b, n, COMM_FLOAT, &d), DDP_OK);
            for (size_t i = 0; i < n; i++)
                if (memcmp(&a[i], &b[i], sizeof *a))
                    ck_abort_msg("%s count %zu element %zu: all-reduce %.9g, reduce-scatter + "
                                 "all-gather %.9g",
                                 names[path], n, i, (double)a[i], (double)b[i]);
            ck_assert(same_on_all_ranks_(a, n * sizeof *a));
        }
    }
    if (W >= 3) { /* rank order and its rotation by one differ somewhere */
        size_t differ = 0;
        for (size_t i = 0; i < nmax; i++) {
            float x = 0, y = 0;
            for (int r = 0; r < W; r++) x += mixed_(i, r), y += mixed_(i, (r + 1) % W);
            differ += memcmp(&x, &y, sizeof x) != 0;
        }
        ck_assert_uint_gt(differ, nmax / 100);
    }
    ck_assert_int_eq(comm_mpi_set_algorithm(&c, "auto"), DDP_OK);
    comm_mem_free(&c, shared);
    free(priv);
}
END_TEST

/* The node and cross-node communicators of comm_attach. */
START_TEST(node_and_cross_communicators)
{
    int n, r;
    MPI_Comm_size(c.node_comm, &n);
    MPI_Comm_rank(c.node_comm, &r);
    ck_assert_int_eq(n, c.local_size);
    ck_assert_int_eq(r, c.local_rank);
    ck_assert_int_ge(c.node, 0);
    ck_assert_int_lt(c.node, c.nnodes);
    /* the cross communicator: this local rank on every node that has one,
     * by node; on one node, this rank alone */
    MPI_Comm_size(c.cross_comm, &n);
    MPI_Comm_rank(c.cross_comm, &r);
    ck_assert_int_ge(n, 1);
    ck_assert_int_le(n, c.nnodes);
    int node0 = -1;
    MPI_Allreduce(&c.node, &node0, 1, MPI_INT, MPI_MIN, c.cross_comm);
    if (c.nnodes == 1) ck_assert_int_eq(n, 1);
    if (c.local_rank == 0) ck_assert_int_eq(n, c.nnodes);
    ck_assert_int_le(node0, c.node);
}
END_TEST

/* Gradient-buffer memory: zero-filled, aligned, usable; several buffers. */
START_TEST(mem_alloc)
{
    size_t sizes[] = {0, 1, 100, (size_t)3 << 20};
    void *p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = gbuf_(sizes[i]);
        ck_assert_uint_eq((uintptr_t)p[i] % 64, 0);
        for (size_t b = 0; b < sizes[i]; b++)
            if (((unsigned char *)p[i])[b]) ck_abort_msg("buffer %d byte %zu not zero", i, b);
    }
    /* an all-reduce over the largest one, then free in another order */
    float *x = p[3];
    size_t n = sizes[3] / sizeof(float);
    fill_int_(x, COMM_FLOAT, n, c.rank);
    comm_desc_t d = {"bucket", 0, -1};
    ck_assert_int_eq(comm_allreduce(&c, x, n, COMM_FLOAT, &d), DDP_OK);
    ck_assert_uint_eq(check_int_(x, COMM_FLOAT, n, c.size), n);
    comm_mem_free(&c, p[1]);
    comm_mem_free(&c, p[3]);
    comm_mem_free(&c, p[0]);
    comm_mem_free(&c, p[2]);
}
END_TEST

START_TEST(bcast_and_allgather)
{
    char buf[64];
    snprintf(buf, sizeof buf, "from rank %d", c.rank);
    comm_desc_t d = {"test", 3, -1};
    ck_assert_int_eq(c.ops->bcast(&c, buf, sizeof buf, 0, &d), DDP_OK);
    ck_assert_str_eq(buf, "from rank 0");
    int mine = 100 + c.rank, *all = calloc((size_t)c.size, sizeof(int));
    ck_assert_int_eq(c.ops->allgather(&c, &mine, all, sizeof mine, &d), DDP_OK);
    for (int r = 0; r < c.size; r++) ck_assert_int_eq(all[r], 100 + r);
    free(all);
    ck_assert_int_eq(c.ops->barrier(&c), DDP_OK);
}
END_TEST

/* The registry holds what configure built (DDP_COMM_BACKENDS), the default
 * first; the capability of node-shared memory is there exactly when the
 * ranks share one node (and /dev/shm has room: the test machines do); host
 * memory is taken, device memory refused with a message. */
/* Which algorithm ran (comm_algorithms): auto takes shared memory on one
 * node and the hierarchical algorithm across nodes for node-shared
 * buffers, the ring for private ones; forced hier on one node is shared
 * memory. */
START_TEST(algorithm_choice)
{
    const size_t n = 1000;
    float *g = gbuf_(n * 4), *priv = calloc(n, 4);
    char got[128];
    comm_desc_t d = {"test-choice", 0, -1};
    for (int a = 0; a < 2; a++) {
        ck_assert_int_eq(comm_mpi_set_algorithm(&c, a ? "hier" : "auto"), DDP_OK);
        ck_assert_int_eq(comm_allreduce(&c, g, n, COMM_FLOAT, &d), DDP_OK);
    }
    ck_assert_int_eq(comm_mpi_set_algorithm(&c, "auto"), DDP_OK);
    comm_algorithms(&c, got, sizeof got);
    if (c.size == 1)
        ck_assert_msg(strstr(got, "ring 2") != NULL, "np=1: %s", got);
    else if (c.nnodes > 1)
        ck_assert_msg(strstr(got, "hier 2") != NULL && !strstr(got, "shm"), "%d nodes: %s",
                      c.nnodes, got);
    else
        ck_assert_msg(strstr(got, "shm 2") != NULL && !strstr(got, "hier"), "one node: %s", got);
    ck_assert_int_eq(comm_allreduce(&c, priv, n, COMM_FLOAT, &d), DDP_OK);
    comm_algorithms(&c, got, sizeof got);
    ck_assert_msg(strstr(got, c.size == 1 ? "ring 3" : "ring 1") != NULL, "private: %s", got);
    comm_mem_free(&c, g);
    free(priv);
}
END_TEST

START_TEST(registry_caps_register)
{
    char names[256] = "";
    size_t u = 0;
    for (int i = 0; i < comm_backend_count(); i++) {
        const comm_backend_t *b = comm_backend(i);
        ck_assert_ptr_eq(comm_find(b->name), b);
        u += (size_t)snprintf(names + u, sizeof names - u, "%s%s", i ? " " : "", b->name);
    }
    ck_assert_str_eq(names, DDP_COMM_BACKENDS);
    ck_assert_ptr_null(comm_find("no-such-backend"));
    ck_assert_str_eq(comm_backend(0)->name, c.ops->name);
    unsigned shared = comm_caps(&c) & COMM_CAP_NODE_SHARED_MEMORY;
    ck_assert_uint_eq(shared != 0, c.size > 1);
    float host[4];
    ck_assert_int_eq(comm_register(&c, host, sizeof host, DDP_MEM_HOST), DDP_OK);
    comm_deregister(&c, host);
    ddp_clear_error();
    ck_assert_int_eq(comm_register(&c, host, sizeof host, DDP_MEM_DEVICE), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "device memory"));
    ddp_clear_error();
    /* --comm: auto takes the backend for the memory; a backend that cannot
     * move it, or none of that name, is a usage error saying what to do */
    const comm_backend_t *b = NULL;
    ck_assert_int_eq(comm_pick("auto", DDP_MEM_HOST, "cpu", &b), DDP_OK);
    ck_assert_ptr_eq(b, &comm_mpi_backend);
    ck_assert_int_eq(comm_pick("mpi", DDP_MEM_DEVICE, "cuda", &b), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "--comm mpi cannot move device memory"));
    ddp_clear_error();
    ck_assert_int_eq(comm_pick("carrier-pigeon", DDP_MEM_HOST, "cpu", &b), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "--comm carrier-pigeon"));
    ddp_clear_error();
    /* a backend whose table lacks a required op is refused, naming it */
    static comm_ops_t partial;
    partial = comm_mpi_ops;
    partial.iallgather = NULL;
    static const comm_backend_t broken = {"broken", COMM_MOVES(DDP_MEM_HOST), &partial,
                                          comm_init_mpi};
    ck_assert_int_eq(comm_register_backend(&broken), DDP_ERR_INTERNAL);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "iallgather"));
    ck_assert_ptr_null(comm_find("broken"));
    ddp_clear_error();
}
END_TEST

START_TEST(bad_options)
{
    ddp_clear_error();
    ck_assert_int_eq(comm_mpi_set_algorithm(&c, "tree"), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "auto"));
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "tree"));
    ddp_clear_error();
    ck_assert_int_eq(comm_mpi_set_ring(&c, 4096, 17), DDP_ERR_USAGE);
    ddp_clear_error();
}
END_TEST

/* comm_abort_all (the watchdog's thread) and comm_free (the main thread) on
 * one communicator take turns: a free waits for an abort in progress, and
 * no abort reaches a communicator once its free began.  A backend whose
 * abort takes a while (ncclCommAbort) records what its free saw. */
static atomic_int slow_entered_, slow_done_, slow_aborts_, free_overlapped_, free_calls_;
static void slow_abort_(comm_t *cc)
{
    (void)cc;
    atomic_fetch_add(&slow_aborts_, 1);
    atomic_store(&slow_entered_, 1);
    usleep(300000);
    atomic_store(&slow_done_, 1);
}
static void watch_free_(comm_t *cc)
{
    (void)cc;
    atomic_fetch_add(&free_calls_, 1);
    if (atomic_load(&slow_entered_) && !atomic_load(&slow_done_)) atomic_store(&free_overlapped_, 1);
}
static void *abort_thread_(void *arg)
{
    (void)arg;
    comm_abort_all();
    return NULL;
}

START_TEST(abort_and_free_take_turns)
{
    static const comm_ops_t slow = {.name = "slow", .free = watch_free_, .abort = slow_abort_};
    comm_t fc;
    memset(&fc, 0, sizeof fc);
    fc.ops = &slow;
    comm_track(&fc);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, abort_thread_, NULL), 0);
    while (!atomic_load(&slow_entered_)) usleep(1000);
    comm_free(&fc); /* while the abort sleeps */
    pthread_join(th, NULL);
    ck_assert_int_eq(atomic_load(&free_calls_), 1);
    ck_assert_int_eq(atomic_load(&free_overlapped_), 0);
    /* freed: a later abort does not reach it */
    fc.ops = &slow;
    comm_abort_all();
    ck_assert_int_eq(atomic_load(&slow_aborts_), 1);
}
END_TEST

/* The progress thread (comm_mpi_set_thread) advances a ring all-reduce
 * while the caller makes no comm call: rank 1 starts its part and then
 * sleeps; with the thread, the other ranks' waits end while rank 1 still
 * sleeps; without it, they cannot end before rank 1 comes back.  Neither
 * is judged by a clock (a loaded machine stretches any time): the other
 * ranks leave a file in the run's temporary directory when their wait
 * ends, and rank 1, making no MPI call, looks for it.  The update of
 * iallreduce_apply still runs on the calling thread, and the sums are the
 * same bits either way. */
static void mark_done_(const char *what)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.%d", test_tmpdir(), what, c.rank);
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot create %s", path);
    fclose(f);
}
static int others_done_(const char *what)
{
    for (int r = 0; r < c.size; r++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/%s.%d", test_tmpdir(), what, r);
        if (r != c.rank && access(path, F_OK) != 0) return 0;
    }
    return 1;
}
/* rank 1 makes no comm call until every other rank's wait ended (with the
 * thread: 1), or for ms milliseconds (without: 0, what it then sees) */
static int sleep_until_others_done_(const char *what, int ms)
{
    for (int waited = 0; waited < ms; waited += 2) {
        if (others_done_(what)) return 1;
        usleep(2000);
    }
    return others_done_(what);
}

static pthread_t apply_caller_;
static atomic_int apply_elsewhere_;
static void record_caller_(void *arg, size_t first, size_t count)
{
    float *out = arg;
    if (!pthread_equal(pthread_self(), apply_caller_)) atomic_store(&apply_elsewhere_, 1);
    for (size_t e = first; e < first + count; e++) out[e] = 2.0f * out[e];
}

START_TEST(progress_thread_advances)
{
    if (c.size < 2) return;
    enum { N = 1 << 20, SLEEP_MS = 400, PATIENCE_MS = 30000 };
    ck_assert_int_eq(comm_mpi_set_algorithm(&c, "ring"), DDP_OK);
    ck_assert_int_eq(comm_mpi_set_ring(&c, 256 << 10, 2), DDP_OK); /* several steps */
    float *buf = malloc(N * sizeof *buf), *extra = malloc(N * sizeof *extra);
    ck_assert_ptr_nonnull(buf);
    ck_assert_ptr_nonnull(extra);
    float *first_bits = malloc(N * sizeof *first_bits);
    ck_assert_ptr_nonnull(first_bits);
    apply_caller_ = pthread_self();
    for (int thread = 0; thread < 2; thread++) {
        char why[256] = "", what[64];
        snprintf(what, sizeof what, "ring-thread%d-done", thread);
        ck_assert_int_eq(comm_mpi_set_thread(&c, thread, -1, why, sizeof why), DDP_OK);
        ck_assert_msg(why[0] == 0, "no thread: %s", why);
        for (size_t i = 0; i < N; i++) buf[i] = 0.001f * (float)((i * 7 + (size_t)c.rank) % 1013);
        memcpy(extra, buf, N * sizeof *extra);
        comm_apply_t a = {.fn = record_caller_, .arg = extra, .nextra = 1, .extra = {extra}};
        comm_desc_t d = {"gradient-bucket", 0, thread};
        /* the thread waits for work: only the start's signal can wake it */
        while (thread && comm_mpi_thread_sleeps(&c) == 0) usleep(1000);
        ck_assert_int_eq(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
        comm_req_t *q = NULL;
        ck_assert_int_eq(c.ops->iallreduce_apply(&c, buf, N, &a, &d, &q), DDP_OK);
        int done = 0; /* rank 1: no comm call meanwhile */
        if (c.rank == 1) done = sleep_until_others_done_(what, thread ? PATIENCE_MS : SLEEP_MS);
        ck_assert_int_eq(c.ops->wait(&c, q), DDP_OK); /* first, so no rank is left waiting */
        if (c.rank != 1) mark_done_(what);
        if (c.rank == 1 && thread)
            ck_assert_msg(done, "rank 1 slept %d s making no comm call and the other ranks' "
                          "waits did not end: the progress thread does not advance the ring",
                          PATIENCE_MS / 1000);
        if (c.rank == 1 && !thread)
            ck_assert_msg(!done, "the other ranks' waits ended without rank 1's comm calls "
                          "and without a progress thread: the test cannot see the thread");
        ck_assert_int_eq(atomic_load(&apply_elsewhere_), 0);
        if (!thread)
            memcpy(first_bits, extra, N * sizeof *extra);
        else
            ck_assert_int_eq(memcmp(first_bits, extra, N * sizeof *extra), 0);
        double cpu;
        uint64_t passes;
        comm_mpi_thread_usage(&c, &cpu, &passes);
        if (thread && c.rank == 1) ck_assert_uint_gt(passes, 0); /* it did the work */
    }
    ck_assert_int_eq(comm_mpi_set_thread(&c, 0, 0, NULL, 0), DDP_OK);
    free(buf), free(extra), free(first_bits);
}
END_TEST

/* The hierarchical all-reduce across (simulated) nodes with the progress
 * thread: with rank 1 asleep, making no comm call, the thread finishes an
 * all-reduce for everyone; the fused update of iallreduce_apply still runs
 * on the calling thread (the thread leaves it to the next comm call), with
 * the bits of a run without the thread. */
START_TEST(progress_thread_hier)
{
    if (c.nnodes < 2) return;
    enum { N = 1 << 20, PATIENCE_MS = 30000 };
    float *buf = gbuf_(N * sizeof(float)), *extra = gbuf_(N * sizeof(float));
    float *first_bits = malloc(N * sizeof *first_bits);
    ck_assert_ptr_nonnull(first_bits);
    apply_caller_ = pthread_self();
    atomic_store(&apply_elsewhere_, 0);
    char why[256] = "", got[128];
    ck_assert_int_eq(comm_mpi_set_thread(&c, 1, -1, why, sizeof why), DDP_OK);
    ck_assert_msg(why[0] == 0, "no thread: %s", why);
    for (size_t i = 0; i < N; i++) buf[i] = (float)((i + (size_t)c.rank) % 7);
    comm_desc_t d = {"gradient-bucket", 0, 0};
    while (comm_mpi_thread_sleeps(&c) == 0) usleep(1000); /* only the start's signal wakes it */
    ck_assert_int_eq(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
    comm_req_t *q = NULL;
    ck_assert_int_eq(c.ops->iallreduce(&c, buf, N, COMM_FLOAT, &d, &q), DDP_OK);
    int done = 0; /* rank 1: no comm call meanwhile */
    if (c.rank == 1) done = sleep_until_others_done_("hier-done", PATIENCE_MS);
    ck_assert_int_eq(c.ops->wait(&c, q), DDP_OK); /* first, so no rank is left waiting */
    if (c.rank != 1) mark_done_("hier-done");
    if (c.rank == 1)
        ck_assert_msg(done, "rank 1 slept %d s making no comm call and the other ranks' waits "
                      "did not end: the progress thread does not advance hier", PATIENCE_MS / 1000);
    for (size_t i = 0; i < N; i++) {
        double want = 0;
        for (int r = 0; r < c.size; r++) want += (double)((i + (size_t)r) % 7);
        if (buf[i] != (float)want) ck_abort_msg("element %zu: %g, want %g", i, buf[i], want);
    }
    for (int thread = 1; thread >= 0; thread--) {
        ck_assert_int_eq(comm_mpi_set_thread(&c, thread, -1, why, sizeof why), DDP_OK);
        for (size_t i = 0; i < N; i++) buf[i] = extra[i] = 0.001f * (float)((i * 7 + (size_t)c.rank) % 1013);
        comm_apply_t a = {.fn = record_caller_, .arg = extra, .nextra = 1, .extra = {extra}};
        ck_assert_int_eq(MPI_Barrier(MPI_COMM_WORLD), MPI_SUCCESS);
        ck_assert_int_eq(c.ops->iallreduce_apply(&c, buf, N, &a, &d, &q), DDP_OK);
        if (c.rank == 1) usleep(50 * 1000);
        ck_assert_int_eq(c.ops->wait(&c, q), DDP_OK);
        ck_assert_int_eq(atomic_load(&apply_elsewhere_), 0);
        if (thread)
            memcpy(first_bits, extra, N * sizeof *extra);
        else
            ck_assert_int_eq(memcmp(first_bits, extra, N * sizeof *extra), 0);
    }
    comm_algorithms(&c, got, sizeof got);
    ck_assert_msg(strstr(got, "hier 3") != NULL, "%s", got);
    comm_mem_free(&c, extra);
    comm_mem_free(&c, buf);
    free(first_bits);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("comm");
    TCase *t = tcase_create("mpi");
    tcase_add_checked_fixture(t, setup_, teardown_);
    tcase_set_timeout(t, 300);
    tcase_add_test(t, topology);
    tcase_add_test(t, allreduce_sizes_dtypes);
    tcase_add_test(t, allreduce_float_large);
    tcase_add_test(t, allreduce_in_flight_with_blocking);
    tcase_add_test(t, allreduce_bit_identical);
    tcase_add_test(t, allreduce_half_accuracy);
    tcase_add_test(t, allreduce_half_special);
    tcase_add_test(t, allreduce_many_in_flight);
    tcase_add_test(t, allreduce_slice_mismatch);
    tcase_add_test(t, mem_alloc);
    tcase_add_test(t, allreduce_apply);
    tcase_add_test(t, reduce_scatter_allgather_sizes);
    tcase_add_test(t, reduce_scatter_apply);
    tcase_add_test(t, zero_round_trip_matches_allreduce);
    tcase_add_test(t, allreduce_matches_reduce_scatter);
    tcase_add_test(t, node_and_cross_communicators);
    tcase_add_test(t, bcast_and_allgather);
    tcase_add_test(t, registry_caps_register);
    tcase_add_test(t, algorithm_choice);
    tcase_add_test(t, bad_options);
    tcase_add_test(t, progress_thread_advances);
    tcase_add_test(t, progress_thread_hier);
    suite_add_tcase(s, t);
    t = tcase_create("abort");
    tcase_add_test(t, abort_and_free_take_turns);
    suite_add_tcase(s, t);
    return s;
}
