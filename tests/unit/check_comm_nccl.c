/* check_comm_nccl.c -- the NCCL comm backend (src/comm/comm_nccl.c) through its
 * ops table, with the cases of check_comm.c that apply to a device-memory,
 * stream-ordered backend (comm_cases.h): all-reduce of every dtype
 * with exact sums and the same bits on every rank, several in flight
 * completed out of order, test / wait / progress, reduce-scatter (with the
 * owner's update) and all-gather of blocks, broadcast, all-gather,
 * barrier, the refusal of host memory, descriptors, seq and byte counting,
 * errors (an asynchronous NCCL error, a failed collective) and the abort
 * path.  Data moves through the cuda backend's launchers (ddp_cuda.h).
 *
 * Built two ways (tests/Makefile.am): on the CPU emulation of CUDA and NCCL
 * (check_comm_nccl_np2, _np3; each rank binds an emulated GPU of its own, the
 * error cases inject faults through the emulation's environment), and in
 * CUDA builds on the real backend (check_comm_nccl_np1: one GPU; exit 77,
 * skipped, when none is visible). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm_cases.h"
#include "comm.h"
#include "comm_nccl.h"
#include "ddp_cuda.h"
#include "tests.h"

#ifdef DDP_CUDA_EMU
#include <cuda_runtime.h> /* the emulation's: ddp_emu_reload_env */
#endif

static comm_t c;
static int device_; /* this rank's GPU (its rank on the node) */

static void setup_(void)
{
    ck_assert_int_eq(comm_init_nccl(&c, MPI_COMM_WORLD), DDP_OK);
}
static void teardown_(void)
{
    if (c.ops) comm_free(&c);
    ck_assert_str_eq(ddp_cuda_last_error(), "");
}

/* ---- helpers --------------------------------------------------------------- */

static void *dev_(size_t bytes)
{
    void *p = NULL;
    ck_assert_msg(ddp_cuda_malloc(&p, bytes ? bytes : 1) == 0, "ddp_cuda_malloc: %s",
                  ddp_cuda_last_error());
    return p;
}
static void up_(void *d, const void *h, size_t bytes)
{
    ck_assert_msg(ddp_cuda_upload(d, h, bytes) == 0, "upload: %s", ddp_cuda_last_error());
}
static void down_(void *h, const void *d, size_t bytes)
{
    ck_assert_msg(ddp_cuda_download(h, d, bytes) == 0, "download: %s", ddp_cuda_last_error());
}

#ifdef DDP_CUDA_EMU
/* The emulation's fault injection: NAME (NULL: unset) = VALUE, re-read; the
 * rank's GPU bound again (the re-read resets the current device). */
static void emu_env_(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    ddp_emu_reload_env();
    ck_assert_int_eq(cudaSetDevice(device_), cudaSuccess);
}
#endif

/* ---- tests ----------------------------------------------------------------- */

START_TEST(topology_caps)
{
    int W;
    MPI_Comm_size(MPI_COMM_WORLD, &W);
    ck_assert_int_eq(c.size, W);
    ck_assert_int_lt(c.local_rank, c.local_size);
    ck_assert_int_ge(c.nnodes, 1);
    ck_assert_str_eq(c.ops->name, "nccl");
    ck_assert_uint_eq(comm_caps(&c), COMM_CAP_STREAM_ORDERED);
    ck_assert_uint_eq(c.seq, 0);
}
END_TEST

/* Every dtype and many sizes: exact sums, the same bytes on every rank,
 * counters and descriptors. */
START_TEST(allreduce_sizes_dtypes)
{
    const int W = c.size;
    const size_t sizes[] = {0, 1, (size_t)W - 1, (size_t)W, (size_t)W + 1, 7, 1021, 65537};
    const size_t nmax = 65537;
    char *h = malloc(nmax * 8), *d = dev_(nmax * 8);
    for (size_t t = 0; t < NDTYPE; t++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            size_t n = sizes[k], bytes = n * comm_dtype_size(dtypes[t]);
            fill_int_(h, dtypes[t], n, c.rank);
            up_(d, h, bytes);
            uint64_t seq = c.seq, ab = c.allreduce_bytes, calls = c.allreduce_calls;
            comm_desc_t desc = {"test-sizes", (int)k, 11};
            ck_assert_int_eq(comm_allreduce(&c, d, n, dtypes[t], &desc), DDP_OK);
            memset(h, 0x5a, bytes);
            down_(h, d, bytes);
            size_t bad = check_int_(h, dtypes[t], n, W);
            ck_assert_msg(bad == n, "%s count %zu: element %zu = %g", dtype_names[t], n, bad,
                          bad < n ? get_(h, dtypes[t], bad) : 0.0);
            ck_assert(same_on_all_ranks_(h, bytes));
            ck_assert_uint_eq(c.seq, seq + 1);
            ck_assert_uint_eq(c.allreduce_bytes - ab, bytes);
            ck_assert_uint_eq(c.allreduce_calls - calls, n ? 1 : 0);
            ck_assert_str_eq(c.last.what, "test-sizes");
            ck_assert_int_eq(c.last.index, (int)k);
            ck_assert_int_eq(c.last.step, 11);
        }
    ddp_cuda_free(d);
    free(h);
}
END_TEST

/* Values whose sums depend on the order of addition: the same bits on every
 * rank, and again on a second run. */
START_TEST(allreduce_bit_identical)
{
    const size_t n = 100003;
    char *h = malloc(n * 8), *again = malloc(n * 8), *d = dev_(n * 8);
    for (size_t t = 0; t < NDTYPE; t++) {
        size_t bytes = n * comm_dtype_size(dtypes[t]);
        comm_desc_t desc = {"test-bits", (int)t, -1};
        for (int run = 0; run < 2; run++) {
            fill_rand_(h, dtypes[t], n, c.rank, 1.0 + c.rank);
            up_(d, h, bytes);
            ck_assert_int_eq(comm_allreduce(&c, d, n, dtypes[t], &desc), DDP_OK);
            down_(run ? h : again, d, bytes);
        }
        ck_assert_msg(same_on_all_ranks_(h, bytes), "%s: ranks differ", dtype_names[t]);
        ck_assert_msg(!memcmp(h, again, bytes), "%s: not reproducible", dtype_names[t]);
    }
    ddp_cuda_free(d);
    free(again);
    free(h);
}
END_TEST

/* Several all-reduces of every dtype in flight, progressed, one polled with
 * test until done, a blocking one in between, waited in reverse order. */
START_TEST(allreduce_in_flight)
{
    enum { K = 10 };
    comm_req_t *rq[K];
    void *d[K];
    size_t n[K];
    char *h = malloc(70000 * 8);
    for (int k = 0; k < K; k++) {
        comm_dtype_t t = dtypes[k % NDTYPE];
        n[k] = (size_t)(k * 6997 + 3);
        d[k] = dev_(n[k] * 8);
        fill_int_(h, t, n[k], c.rank + k);
        up_(d[k], h, n[k] * comm_dtype_size(t));
        comm_desc_t desc = {"bucket", k, 4};
        ck_assert_int_eq(c.ops->iallreduce(&c, d[k], n[k], t, &desc, &rq[k]), DDP_OK);
        ck_assert_ptr_nonnull(rq[k]);
        ck_assert_int_eq(c.ops->progress(&c), DDP_OK);
        if (k == 4) { /* the SyncBatchNorm pattern */
            double bn[3] = {1, 2, (double)c.rank};
            void *db = dev_(sizeof bn);
            up_(db, bn, sizeof bn);
            comm_desc_t ds = {"syncbn-fwd", 2, 4};
            ck_assert_int_eq(comm_allreduce(&c, db, 3, COMM_DOUBLE, &ds), DDP_OK);
            down_(bn, db, sizeof bn);
            ck_assert_double_eq(bn[1], 2.0 * c.size);
            ck_assert_double_eq(bn[2], c.size * (c.size - 1) / 2.0);
            ddp_cuda_free(db);
        }
    }
    int done = 0;
    for (long i = 0; i < 100000000 && !done; i++)
        ck_assert_int_eq(c.ops->test(&c, rq[3], &done), DDP_OK);
    ck_assert(done);
    for (int k = K - 1; k >= 0; k--) {
        comm_dtype_t t = dtypes[k % NDTYPE];
        ck_assert_int_eq(c.ops->wait(&c, rq[k]), DDP_OK);
        /* the compute stream is ordered after the wait: download reads the sums */
        size_t bytes = n[k] * comm_dtype_size(t);
        memset(h, 0x5a, bytes);
        down_(h, d[k], bytes);
        size_t bad = 0, W = (size_t)c.size;
        for (size_t i = 0; i < n[k] && bad == 0; i++) {
            double want = 0;
            for (size_t r = 0; r < W; r++) want += ival_(i, (int)r + k);
            if (get_(h, t, i) != want) bad = i + 1;
        }
        ck_assert_msg(bad == 0, "all-reduce %d (%s): element %zu wrong", k, dtype_names[k % NDTYPE],
                      bad - 1);
        ck_assert(same_on_all_ranks_(h, bytes));
        ddp_cuda_free(d[k]);
    }
    ck_assert_int_eq(c.ops->wait(&c, NULL), DDP_OK);
    ck_assert_int_eq(c.ops->progress(&c), DDP_OK); /* nothing in flight */
    ck_assert_uint_eq(c.seq, K + 1);
    free(h);
}
END_TEST

/* Reduce-scatter and all-gather of comm_block's blocks, every dtype, counts
 * that are multiples of the ranks (one ncclReduceScatter / ncclAllGather in
 * place) and counts that are not (one ncclReduce / ncclBroadcast per
 * block): the owner's exact sums, every owner's block everywhere; the
 * owner's update runs once, on its block, when the reduce-scatter is
 * waited for. */
typedef struct shard_seen {
    size_t first, n;
    int calls;
} shard_seen_t;

static void shard_fn_(void *arg, size_t first, size_t n)
{
    shard_seen_t *u = arg;
    u->first = first;
    u->n = n;
    u->calls++;
}

START_TEST(reduce_scatter_allgather)
{
    const int W = c.size;
    const size_t sizes[] = {0, 1, (size_t)W - 1, (size_t)W, (size_t)W + 1, (size_t)W * 5, 1021,
                            (size_t)W * 4099};
    const size_t nmax = (size_t)W * 4099 + 1021;
    char *h = malloc(nmax * 8), *d = dev_(nmax * 8);
    for (size_t t = 0; t < NDTYPE; t++)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
            size_t n = sizes[k], bytes = n * comm_dtype_size(dtypes[t]);
            comm_desc_t desc = {"test-blocks", (int)k, 2};
            fill_int_(h, dtypes[t], n, c.rank);
            up_(d, h, bytes);
            shard_seen_t u = {0, 0, 0};
            comm_apply_t ap = {.fn = shard_fn_, .arg = &u};
            uint64_t seq = c.seq;
            ck_assert_int_eq(comm_reduce_scatter(&c, d, n, dtypes[t], &ap, &desc), DDP_OK);
            down_(h, d, bytes);
            size_t bad = check_block_int_(h, dtypes[t], n, W, c.rank);
            ck_assert_msg(bad == n, "reduce-scatter %s count %zu: element %zu = %g",
                          dtype_names[t], n, bad, bad < n ? get_(h, dtypes[t], bad) : 0.0);
            size_t first, len;
            comm_block(n, W, c.rank, &first, &len);
            ck_assert_int_eq(u.calls, len ? 1 : 0);
            if (len) ck_assert_uint_eq(u.first, first);
            if (len) ck_assert_uint_eq(u.n, len);
            fill_int_(h, dtypes[t], n, c.rank);
            up_(d, h, bytes);
            ck_assert_int_eq(comm_allgather_blocks(&c, d, n, dtypes[t], &desc), DDP_OK);
            memset(h, 0x5a, bytes);
            down_(h, d, bytes);
            bad = check_gathered_(h, dtypes[t], n, W);
            ck_assert_msg(bad == n, "all-gather %s count %zu: element %zu = %g", dtype_names[t], n,
                          bad, bad < n ? get_(h, dtypes[t], bad) : 0.0);
            ck_assert(same_on_all_ranks_(h, bytes));
            ck_assert_uint_eq(c.seq, seq + 2);
            ck_assert_str_eq(c.last.what, "test-blocks");
        }
    ddp_cuda_free(d);
    free(h);
}
END_TEST

/* Broadcast from the last rank, all-gather, barrier: results and counting
 * (none of them is an all-reduce's payload). */
START_TEST(bcast_allgather_barrier)
{
    const int W = c.size;
    char buf[64], *d = dev_(sizeof buf);
    memset(buf, 0, sizeof buf);
    snprintf(buf, sizeof buf, "from rank %d", c.rank);
    up_(d, buf, sizeof buf);
    comm_desc_t desc = {"test-bcast", 3, -1};
    ck_assert_int_eq(c.ops->bcast(&c, d, sizeof buf, W - 1, &desc), DDP_OK);
    down_(buf, d, sizeof buf);
    char want[64];
    snprintf(want, sizeof want, "from rank %d", W - 1);
    ck_assert_str_eq(buf, want);
    ck_assert_uint_eq(c.seq, 1);
    ck_assert_str_eq(c.last.what, "test-bcast");

    int64_t mine[3] = {100 + c.rank, -c.rank, 7}, *all = calloc((size_t)W * 3, sizeof *all);
    void *ds = dev_(sizeof mine), *dr = dev_((size_t)W * sizeof mine);
    up_(ds, mine, sizeof mine);
    comm_desc_t dg = {"test-gather", 4, 9};
    ck_assert_int_eq(c.ops->allgather(&c, ds, dr, sizeof mine, &dg), DDP_OK);
    down_(all, dr, (size_t)W * sizeof mine);
    for (int r = 0; r < W; r++) {
        ck_assert_int_eq(all[3 * r], 100 + r);
        ck_assert_int_eq(all[3 * r + 1], -r);
        ck_assert_int_eq(all[3 * r + 2], 7);
    }
    ck_assert_uint_eq(c.seq, 2);
    ck_assert_int_eq(c.last.index, 4);
    ck_assert_int_eq(c.ops->barrier(&c), DDP_OK);
    ck_assert_uint_eq(c.seq, 3);
    ck_assert_str_eq(c.last.what, "barrier");
    ck_assert_uint_eq(c.allreduce_bytes, 0);
    ck_assert_uint_eq(c.allreduce_calls, 0);
    ddp_cuda_free(dr);
    ddp_cuda_free(ds);
    ddp_cuda_free(d);
    free(all);
}
END_TEST

/* Device memory is taken; host memory refused, with a message. */
START_TEST(register_kinds)
{
    void *d = dev_(256);
    ck_assert_int_eq(comm_register(&c, d, 256, DDP_MEM_DEVICE), DDP_OK);
    comm_deregister(&c, d);
    float host[4];
    ddp_clear_error();
    ck_assert_int_eq(comm_register(&c, host, sizeof host, DDP_MEM_HOST), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "device memory only"));
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "16-byte buffer of host memory"));
    ddp_clear_error();
    ddp_cuda_free(d);
}
END_TEST

/* The job ends on a fatal error with a collective in flight: the tracked
 * communicator is aborted (ncclCommAbort), twice is harmless, and freeing
 * it afterwards neither waits nor destroys. */
START_TEST(abort_in_flight)
{
    void *d = dev_(1000 * sizeof(float));
    comm_req_t *q;
    comm_desc_t desc = {"bucket", 0, 1};
    ck_assert_int_eq(c.ops->iallreduce(&c, d, 1000, COMM_FLOAT, &desc, &q), DDP_OK);
    comm_track(&c);
    comm_abort_all();
    c.ops->abort(&c);
    comm_free(&c);
    ck_assert_ptr_null(c.ops);
    ddp_cuda_free(d);
    /* the ranks agree before the next communicator */
    MPI_Barrier(MPI_COMM_WORLD);
}
END_TEST

#ifdef DDP_CUDA_EMU
/* NCCL reports an error in the background (a peer failed) at the third
 * collective: the next test / wait says so, naming the collective. */
START_TEST(async_error)
{
    comm_free(&c);
    setenv("DDP_EMU_NCCL_ASYNC_ERROR", "3", 1); /* read by ncclCommInitRank */
    ck_assert_int_eq(comm_init_nccl(&c, MPI_COMM_WORLD), DDP_OK);
    unsetenv("DDP_EMU_NCCL_ASYNC_ERROR");
    void *d = dev_(64 * sizeof(float));
    comm_req_t *q[3];
    for (int k = 0; k < 3; k++) {
        comm_desc_t desc = {"bucket", k, 5};
        ck_assert_int_eq(c.ops->iallreduce(&c, d, 64, COMM_FLOAT, &desc, &q[k]), DDP_OK);
    }
    ck_assert_int_eq(c.ops->wait(&c, q[0]), DDP_ERR_COMM);
    const char *msg = ddp_error_message();
    ck_assert_msg(strstr(msg, "asynchronous error during bucket 2 (step 5)") != NULL, "%s", msg);
    ck_assert_msg(strstr(msg, "DDP_EMU_NCCL_ASYNC_ERROR") != NULL, "%s", msg); /* NCCL's own */
    ddp_clear_error();
    int done = 1;
    ck_assert_int_eq(c.ops->test(&c, q[1], &done), DDP_ERR_COMM);
    ck_assert_int_eq(done, 0);
    ck_assert_int_eq(c.ops->progress(&c), DDP_ERR_COMM);
    ddp_clear_error();
    comm_free(&c); /* aborts: a failed communicator is not destroyed */
    ddp_clear_error();
    ddp_cuda_free(d);
    MPI_Barrier(MPI_COMM_WORLD);
}
END_TEST

/* The second ncclAllReduce fails (on every rank): iallreduce says which
 * call failed and hands out no request; the barrier's all-reduce too. */
START_TEST(failed_collective)
{
    void *d = dev_(64 * sizeof(float));
    emu_env_("DDP_EMU_FAIL", "ncclAllReduce:2,ncclBroadcast:1");
    comm_req_t *q = NULL, *q2 = (comm_req_t *)&q;
    comm_desc_t desc = {"bucket", 0, 2};
    ck_assert_int_eq(c.ops->iallreduce(&c, d, 64, COMM_FLOAT, &desc, &q), DDP_OK);
    ck_assert_int_eq(c.ops->wait(&c, q), DDP_OK);
    ddp_clear_error();
    ck_assert_int_eq(c.ops->iallreduce(&c, d, 64, COMM_BF16, &desc, &q2), DDP_ERR_COMM);
    ck_assert_ptr_null(q2);
    const char *msg = ddp_error_message();
    ck_assert_msg(strstr(msg, "ncclAllReduce failed: unhandled cuda error") != NULL, "%s", msg);
    ck_assert_msg(strstr(msg, "comm_nccl.c:") != NULL, "%s", msg);
    ck_assert_msg(strstr(msg, "NCCL_DEBUG=WARN") != NULL, "%s", msg);
    ddp_clear_error();
    ck_assert_int_eq(c.ops->bcast(&c, d, 8, 0, &desc), DDP_ERR_COMM);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "ncclBroadcast failed"));
    ddp_clear_error();
    emu_env_("DDP_EMU_FAIL", NULL);
    comm_free(&c); /* aborts */
    ddp_clear_error();
    ddp_cuda_free(d);
    MPI_Barrier(MPI_COMM_WORLD);
}
END_TEST
#endif

Suite *test_suite(void)
{
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &device_);
    MPI_Comm_free(&node);
#ifdef DDP_CUDA_EMU
    /* a GPU of its own for every rank (NCCL refuses two ranks on one) */
    setenv("DDP_EMU_GPUS", "4", 1);
    unsetenv("CUDA_VISIBLE_DEVICES");
    unsetenv("DDP_EMU_FAIL");
    unsetenv("DDP_EMU_NCCL_ASYNC_ERROR");
#else
    if (ddp_cuda_device_count() <= device_) {
        fprintf(stderr, "check_comm_nccl: no GPU visible for local rank %d: skipped\n", device_);
        MPI_Finalize();
        exit(77);
    }
#endif
    if (ddp_cuda_init(device_) != 0) {
        fprintf(stderr, "check_comm_nccl: ddp_cuda_init(%d) failed: %s\n", device_,
                ddp_cuda_last_error());
        MPI_Abort(MPI_COMM_WORLD, 99);
    }
    Suite *s = suite_create("comm_nccl");
    TCase *t = tcase_create("nccl");
    tcase_add_checked_fixture(t, setup_, teardown_);
    tcase_set_timeout(t, 120);
    tcase_add_test(t, topology_caps);
    tcase_add_test(t, allreduce_sizes_dtypes);
    tcase_add_test(t, allreduce_bit_identical);
    tcase_add_test(t, allreduce_in_flight);
    tcase_add_test(t, reduce_scatter_allgather);
    tcase_add_test(t, bcast_allgather_barrier);
    tcase_add_test(t, register_kinds);
    tcase_add_test(t, abort_in_flight);
#ifdef DDP_CUDA_EMU
    tcase_add_test(t, async_error);
    tcase_add_test(t, failed_collective);
#endif
    suite_add_tcase(s, t);
    return s;
}
