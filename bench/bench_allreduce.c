/* bench_allreduce.c -- all-reduce bus bandwidth, nccl-tests style: the comm
 * backend's all-reduce against plain MPI_Allreduce in the same run, for
 * message sizes from --min to --max bytes (doubling).
 *
 * Per size: one checked all-reduce of known integer values per path (the
 * #wrong columns count elements that are not the exact sum; the backend's
 * result must also be bit-identical on every rank), then --reps rounds that
 * alternate the two paths, each round --warmup untimed and N timed in-place
 * all-reduces of zeros (N = --iters, fewer for large sizes).  time = the
 * slowest rank's average (MPI_Reduce MAX), median over the rounds;
 * algbw = bytes / time, busbw = algbw * 2 (W-1) / W (nccl-tests
 * doc/PERFORMANCE.md).  Exit status 1 if any result is wrong.  For scale, the
 * last column is the speed of a plain memcpy of the same size, every rank
 * at once (the slowest rank), in the same rounds: it shows where the data
 * falls out of the caches.
 *
 * The buffer comes from comm_mem_alloc, as the trainer's gradient buffer
 * does (--mem private: malloc), so the default algorithm "auto" takes the
 * shared-memory path when all ranks are on one node.
 *
 *   mpirun -np 2 ./bench_allreduce [--min 4K] [--max 64M] [--iters 50]
 *       [--warmup 5] [--reps 11] [--algo auto|ring|mpi] [--piece BYTES]
 *       [--depth D] [--dtype float|bf16|fp16] [--mem shared|private]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_common.h"
#include "comm_mpi.h"
#include "half.h"

static size_t parse_size_(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'k':
    case 'K': v *= 1024; break;
    case 'm':
    case 'M': v *= 1024 * 1024; break;
    case 'g':
    case 'G': v *= 1024.0 * 1024 * 1024; break;
    default: break;
    }
    return (size_t)v;
}

static void die_(ddp_status_t s, const char *what)
{
    if (s == DDP_OK) return;
    fprintf(stderr, "bench_allreduce: %s: %s\n", what, ddp_error_message());
    MPI_Abort(MPI_COMM_WORLD, 1);
}

/* small integers: every partial sum is exact in float, bf16 and fp16 */
static int ival_(size_t i, int r)
{
    return (int)((i * 7 + (size_t)r * 5) % 17) - 8;
}

static void fill_(void *buf, comm_dtype_t t, size_t n, int r)
{
    for (size_t i = 0; i < n; i++) {
        float v = (float)ival_(i, r);
        if (t == COMM_FLOAT)
            ((float *)buf)[i] = v;
        else if (t == COMM_BF16)
            ((uint16_t *)buf)[i] = ddp_f32_to_bf16(v);
        else
            ((uint16_t *)buf)[i] = ddp_f32_to_f16(v);
    }
}

static long count_wrong_(const void *buf, comm_dtype_t t, size_t n, int W)
{
    long wrong = 0;
    for (size_t i = 0; i < n; i++) {
        int want = 0;
        for (int r = 0; r < W; r++) want += ival_(i, r);
        const uint16_t h = t == COMM_FLOAT ? 0 : ((const uint16_t *)buf)[i];
        float got = t == COMM_FLOAT  ? ((const float *)buf)[i]
                    : t == COMM_BF16 ? ddp_bf16_to_f32(h)
                                     : ddp_f16_to_f32(h);
        wrong += got != (float)want;
    }
    return wrong;
}

static uint64_t fnv1a_(const void *p, size_t bytes)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

typedef struct path {
    comm_t *c; /* NULL: plain MPI_Allreduce */
    comm_dtype_t t;
    MPI_Datatype dt;
    MPI_Op op;
} path_t;

static void allreduce_(const path_t *p, void *buf, size_t n)
{
    if (p->c) {
        comm_desc_t d = {"bench", 0, -1};
        die_(comm_allreduce(p->c, buf, n, p->t, &d), "all-reduce");
    } else {
        MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, p->dt, p->op, MPI_COMM_WORLD);
    }
}

/* The timed cases (bench_common.h): an in-place all-reduce of n elements
 * of buf on a path, and a memcpy of as many bytes (every rank at once). */
typedef struct run {
    const path_t *p; /* NULL: the memcpy */
    void *buf;
    size_t n;
    char *dst;
    const char *src;
    size_t bytes;
} run_t;

static void run_case_(void *arg, long it)
{
    const run_t *r = arg;
    if (r->p)
        allreduce_(r->p, r->buf, r->n);
    else
        memcpy(r->dst, r->src, r->bytes);
}

/* the reference's 16-bit sums: scalar, one rounding per addition */
static void bf16_sum_(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    uint16_t *a = in, *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = ddp_f32_to_bf16(ddp_bf16_to_f32(a[i]) + ddp_bf16_to_f32(b[i]));
}

static void fp16_sum_(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    uint16_t *a = in, *b = inout;
    for (int i = 0; i < *len; i++)
        b[i] = ddp_f32_to_f16(ddp_f16_to_f32(a[i]) + ddp_f16_to_f32(b[i]));
}

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, COMM_MPI_THREAD_LEVEL, &provided);
    size_t minb = 4096, maxb = (size_t)64 << 20, piece = 0;
    int iters = 50, warmup = 5, reps = 11, depth = 0;
    const char *algo = "auto", *dtype = "float", *mem = "shared";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) goto usage;
        if (!strcmp(a, "--min"))
            minb = parse_size_(v);
        else if (!strcmp(a, "--max"))
            maxb = parse_size_(v);
        else if (!strcmp(a, "--iters"))
            iters = atoi(v);
        else if (!strcmp(a, "--warmup"))
            warmup = atoi(v);
        else if (!strcmp(a, "--reps"))
            reps = atoi(v);
        else if (!strcmp(a, "--algo"))
            algo = v;
        else if (!strcmp(a, "--piece"))
            piece = parse_size_(v);
        else if (!strcmp(a, "--depth"))
            depth = atoi(v);
        else if (!strcmp(a, "--dtype"))
            dtype = v;
        else if (!strcmp(a, "--mem"))
            mem = v;
        else
            goto usage;
        i++;
    }
    if (minb < 4 || maxb < minb || iters < 1 || reps < 1 || warmup < 0 ||
        (strcmp(dtype, "float") && strcmp(dtype, "bf16") && strcmp(dtype, "fp16")) ||
        (strcmp(mem, "shared") && strcmp(mem, "private")))
        goto usage;

    comm_t c;
    die_(comm_init_mpi(&c, MPI_COMM_WORLD), "comm_init_mpi");
    die_(comm_mpi_set_algorithm(&c, algo), "--algo");
    die_(comm_mpi_set_ring(&c, piece, depth), "--piece/--depth");
    comm_dtype_t t = !strcmp(dtype, "bf16")   ? COMM_BF16
                     : !strcmp(dtype, "fp16") ? COMM_FP16
                                              : COMM_FLOAT;
    size_t esz = comm_dtype_size(t);
    MPI_Datatype half_dt;
    MPI_Op half_op;
    MPI_Type_contiguous(2, MPI_BYTE, &half_dt);
    MPI_Type_commit(&half_dt);
    MPI_Op_create(t == COMM_FP16 ? fp16_sum_ : bf16_sum_, 1, &half_op);
    path_t paths[2] = {
        {&c, t, MPI_FLOAT, MPI_SUM},
        {NULL, t, t == COMM_FLOAT ? MPI_FLOAT : half_dt, t == COMM_FLOAT ? MPI_SUM : half_op}};
    const int W = c.size;
    char *buf = NULL;
    if (!strcmp(mem, "shared")) {
        void *p = NULL;
        die_(comm_mem_alloc(&c, maxb, &p), "buffer");
        buf = p;
    } else {
        buf = malloc(maxb);
        if (!buf) die_(DDP_ERR_NOMEM, "buffer");
    }
    char *src = malloc(maxb), *dst = malloc(maxb);
    if (!src || !dst) die_(DDP_ERR_NOMEM, "memcpy buffers");
    memset(src, 1, maxb);
    memset(dst, 0, maxb);
    double *rt[3];
    for (int p = 0; p < 3; p++) rt[p] = malloc((size_t)reps * sizeof(double));

    if (c.rank == 0) {
        const char *cma = getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
        printf("# bench_allreduce: %d ranks on %d node(s), dtype %s, sum, in place\n", W, c.nnodes,
               dtype);
        printf("# backend: comm \"%s\" algorithm %s%s on %s memory; reference: MPI_Allreduce "
               "(Open MPI defaults) on the same buffer; vader single copy: %s\n",
               c.ops->name, algo, piece || depth ? " (tuned ring)" : "",
               strcmp(mem, "shared") ? "private (malloc)" : "gradient-buffer (comm_mem_alloc)",
               cma ? cma : "default");
        printf("# time: slowest rank's average over the timed iterations, median of %d rounds "
               "alternating the two paths\n",
               reps);
        printf("#%11s %10s %5s | %10s %8s %8s %6s %5s | %10s %8s %8s %6s | %7s\n", "size", "count",
               "iters", "time", "algbw", "busbw", "#wrong", "ident", "time", "algbw", "busbw",
               "#wrong", "memcpy");
        printf("#%11s %10s %5s | %10s %8s %8s %6s %5s | %10s %8s %8s %6s | %7s\n", "(B)", "(elems)",
               "", "(us)", "(GB/s)", "(GB/s)", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(GB/s)");
        printf("#%11s %10s %5s | %-41s | %-35s |\n", "", "", "", "  comm backend",
               "  MPI_Allreduce");
    }
    long total_wrong = 0;
    for (size_t bytes = minb; bytes <= maxb; bytes *= 2) {
        size_t n = bytes / esz;
        int it = iters;
        while (it > 3 && (double)it * (double)bytes > 512.0 * 1024 * 1024) it /= 2;
        long wrong[2];
        int ident = 1;
        for (int p = 0; p < 2; p++) {
            fill_(buf, t, n, c.rank);
            allreduce_(&paths[p], buf, n);
            long w = count_wrong_(buf, t, n, W);
            MPI_Allreduce(&w, &wrong[p], 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            if (p == 0) {
                uint64_t h = fnv1a_(buf, n * esz), h0 = h;
                MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
                int same = h == h0;
                MPI_Allreduce(&same, &ident, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            }
        }
        total_wrong += wrong[0] + wrong[1] + !ident;
        memset(buf, 0, bytes);
        /* --reps rounds, each: per path --warmup untimed and `it` timed
         * all-reduces of zeros, then `it` memcpys after one untimed; a
         * barrier before each clock; the slowest rank's averages */
        run_t runs[3] = {{.p = &paths[0], .buf = buf, .n = n},
                         {.p = &paths[1], .buf = buf, .n = n},
                         {.dst = dst, .src = src, .bytes = n * esz}};
        bench_case_t cases[3];
        for (int p = 0; p < 3; p++)
            cases[p] = (bench_case_t){.run = run_case_,
                                      .arg = &runs[p],
                                      .warmup = p < 2 ? warmup : 1,
                                      .iters = it,
                                      .t = rt[p]};
        bench_loop_t loop = {.samples = reps,
                             .warm_every = 1,
                             .before = bench_mpi_barrier,
                             .combine = bench_mpi_slowest};
        bench_loop_run(&loop, cases, 3);
        if (c.rank == 0) {
            double tm[3];
            for (int p = 0; p < 3; p++) tm[p] = bench_median(rt[p], reps);
            double f = 2.0 * (W - 1) / W;
            printf(" %11zu %10zu %5d | %10.1f %8.2f %8.2f %6ld %5s | %10.1f %8.2f %8.2f %6ld | "
                   "%7.2f\n",
                   n * esz, n, it, tm[0] * 1e6, n * esz / tm[0] / 1e9, n * esz / tm[0] / 1e9 * f,
                   wrong[0], ident ? "yes" : "NO", tm[1] * 1e6, n * esz / tm[1] / 1e9,
                   n * esz / tm[1] / 1e9 * f, wrong[1], n * esz / tm[2] / 1e9);
            fflush(stdout);
        }
    }
    if (c.rank == 0)
        printf("# %s\n",
               total_wrong ? "WRONG RESULTS (see #wrong / ident)" : "all results correct");
    if (!strcmp(mem, "shared"))
        comm_mem_free(&c, buf);
    else
        free(buf);
    for (int p = 0; p < 3; p++) free(rt[p]);
    free(src);
    free(dst);
    MPI_Op_free(&half_op);
    MPI_Type_free(&half_dt);
    comm_free(&c);
    MPI_Finalize();
    return total_wrong ? 1 : 0;

usage:
    fprintf(stderr, "usage: bench_allreduce [--min 4K] [--max 64M] [--iters N] [--warmup N] "
                    "[--reps N] [--algo auto|ring|mpi] [--piece BYTES] [--depth D] "
                    "[--dtype float|bf16|fp16] [--mem shared|private]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
}
