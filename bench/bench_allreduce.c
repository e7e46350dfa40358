/* bench_allreduce.c -- all-reduce bus bandwidth, nccl-tests style: the comm
 * backend's all-reduce against plain MPI_Allreduce in the same run, for
 * message sizes from --min to --max bytes (doubling).
 *
 * --algo takes one algorithm or a comma-separated list (auto,ring): one
 * column group per algorithm, all on the same communicator and buffer, then
 * MPI_Allreduce.  An entry NAME:PIECE[:DEPTH] (auto:256K:4) gives that
 * column its own ring piece and depth (the ring, and the hierarchical
 * all-reduce's ring between nodes), so one run compares ring settings.
 * Which of Open MPI's collective components answers MPI_Allreduce (coll
 * tuned by default, coll han with OMPI_MCA_coll_han_priority=100) is fixed
 * at MPI_Init: the header names the coll MCA parameters of the environment,
 * and bench_nodes_allreduce.sh runs one process per component.
 *
 * Per size: one checked all-reduce of known integer values per path (the
 * #wrong columns count elements that are not the exact sum; the backend's
 * result must also be bit-identical on every rank), then --reps rounds that
 * alternate the paths, each round --warmup untimed and N timed in-place
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
 * shared-memory path when all ranks are on one node.  --mpi-in-place no:
 * MPI_Allreduce reads a separate send buffer (coll han of Open MPI 4.1.4
 * crashes on MPI_IN_PLACE with several ranks per node; fixed upstream by
 * open-mpi/ompi#11488).
 *
 *   mpirun -np 2 ./bench_allreduce [--min 4K] [--max 64M] [--iters 50]
 *       [--warmup 5] [--reps 11] [--algo auto|hier|ring|mpi[:PIECE[:DEPTH]][,...]]
 *       [--piece BYTES] [--depth D] [--dtype float|bf16|fp16]
 *       [--mem shared|private] [--mpi-in-place yes|no]
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
    comm_t *c;        /* NULL: plain MPI_Allreduce */
    const char *algo; /* the backend's algorithm (comm_mpi_set_algorithm) */
    size_t piece;     /* its ring piece and depth (comm_mpi_set_ring) */
    int depth;
    comm_dtype_t t;
    MPI_Datatype dt;
    MPI_Op op;
    const void *send; /* MPI_Allreduce's send buffer; NULL: in place */
} path_t;

static void allreduce_(const path_t *p, void *buf, size_t n)
{
    if (p->c) {
        comm_desc_t d = {"bench", 0, -1};
        die_(comm_mpi_set_algorithm(p->c, p->algo), "--algo");
        die_(comm_mpi_set_ring(p->c, p->piece, p->depth), "--piece/--depth");
        die_(comm_allreduce(p->c, buf, n, p->t, &d), "all-reduce");
    } else {
        MPI_Allreduce(p->send ? p->send : MPI_IN_PLACE, buf, (int)n, p->dt, p->op, MPI_COMM_WORLD);
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

/* The Open MPI coll parameters of the environment (OMPI_MCA_coll*), as
 * "name=value ...", or "" when there are none (the defaults). */
static void coll_params_(char *buf, size_t len)
{
    extern char **environ;
    size_t at = 0;
    buf[0] = 0;
    for (char **e = environ; *e && at < len; e++) {
        if (strncmp(*e, "OMPI_MCA_coll", 13)) continue;
        int k = snprintf(buf + at, len - at, "%s%s", at ? " " : "", *e + 9);
        if (k < 0) break;
        at += (size_t)k;
    }
}

#define MAX_ALGOS 4

int main(int argc, char **argv)
{
    int provided;
    MPI_Init_thread(&argc, &argv, COMM_MPI_THREAD_LEVEL, &provided);
    size_t minb = 4096, maxb = (size_t)64 << 20, piece = 0;
    int iters = 50, warmup = 5, reps = 11, depth = 0;
    const char *algo = "auto", *dtype = "float", *mem = "shared", *mpi_in_place = "yes";
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
        else if (!strcmp(a, "--mpi-in-place"))
            mpi_in_place = v;
        else if (!strcmp(a, "--mem"))
            mem = v;
        else
            goto usage;
        i++;
    }
    if (minb < 4 || maxb < minb || iters < 1 || reps < 1 || warmup < 0 ||
        (strcmp(dtype, "float") && strcmp(dtype, "bf16") && strcmp(dtype, "fp16")) ||
        (strcmp(mem, "shared") && strcmp(mem, "private")) ||
        (strcmp(mpi_in_place, "yes") && strcmp(mpi_in_place, "no")))
        goto usage;

    comm_t c;
    die_(comm_init_mpi(&c, MPI_COMM_WORLD), "comm_init_mpi");
    /* --algo: one algorithm, or a comma-separated list of NAME[:PIECE[:DEPTH]] */
    die_(comm_mpi_set_ring(&c, piece, depth), "--piece/--depth");
    size_t ring_piece;
    int ring_depth;
    comm_mpi_get_ring(&c, &ring_piece, &ring_depth);
    char algo_list[128], label_list[128], *names[MAX_ALGOS], *labels[MAX_ALGOS];
    size_t pieces[MAX_ALGOS];
    int depths[MAX_ALGOS], nalgo = 0;
    if (strlen(algo) >= sizeof algo_list) goto usage;
    strcpy(algo_list, algo);
    strcpy(label_list, algo);
    char *save = NULL, *save2 = NULL, *a = strtok_r(algo_list, ",", &save),
         *l = strtok_r(label_list, ",", &save2);
    for (; a; a = strtok_r(NULL, ",", &save), l = strtok_r(NULL, ",", &save2)) {
        if (nalgo == MAX_ALGOS) goto usage;
        char *colon = strchr(a, ':');
        pieces[nalgo] = ring_piece;
        depths[nalgo] = ring_depth;
        if (colon) {
            *colon = 0;
            pieces[nalgo] = parse_size_(colon + 1);
            char *d = strchr(colon + 1, ':');
            if (d) depths[nalgo] = atoi(d + 1);
            if (!pieces[nalgo] || (d && !depths[nalgo])) goto usage;
            die_(comm_mpi_set_ring(&c, pieces[nalgo], depths[nalgo]), "--algo NAME:PIECE:DEPTH");
        }
        die_(comm_mpi_set_algorithm(&c, a), "--algo");
        labels[nalgo] = l;
        names[nalgo++] = a;
    }
    if (!nalgo) goto usage;
    comm_dtype_t t = !strcmp(dtype, "bf16")   ? COMM_BF16
                     : !strcmp(dtype, "fp16") ? COMM_FP16
                                              : COMM_FLOAT;
    size_t esz = comm_dtype_size(t);
    MPI_Datatype half_dt;
    MPI_Op half_op;
    MPI_Type_contiguous(2, MPI_BYTE, &half_dt);
    MPI_Type_commit(&half_dt);
    MPI_Op_create(t == COMM_FP16 ? fp16_sum_ : bf16_sum_, 1, &half_op);
    /* paths 0 .. nalgo-1: the backend's algorithms; path nalgo: MPI_Allreduce */
    const int npath = nalgo + 1;
    path_t paths[MAX_ALGOS + 1];
    for (int p = 0; p < nalgo; p++)
        paths[p] = (path_t){&c, names[p], pieces[p], depths[p], t, MPI_FLOAT, MPI_SUM, NULL};
    paths[nalgo] = (path_t){.t = t,
                            .dt = t == COMM_FLOAT ? MPI_FLOAT : half_dt,
                            .op = t == COMM_FLOAT ? MPI_SUM : half_op};
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
    /* --mpi-in-place no: MPI_Allreduce from a separate send buffer (Open MPI
     * 4.1.4's coll han crashes on MPI_IN_PLACE with several ranks a node) */
    char *send = NULL;
    if (!strcmp(mpi_in_place, "no")) {
        send = calloc(1, maxb);
        if (!send) die_(DDP_ERR_NOMEM, "send buffer");
        paths[nalgo].send = send;
    }
    char *src = malloc(maxb), *dst = malloc(maxb);
    if (!src || !dst) die_(DDP_ERR_NOMEM, "memcpy buffers");
    memset(src, 1, maxb);
    memset(dst, 0, maxb);
    double *rt[MAX_ALGOS + 2]; /* per path, then the memcpy */
    for (int p = 0; p <= npath; p++) rt[p] = malloc((size_t)reps * sizeof(double));

    if (c.rank == 0) {
        const char *cma = getenv("OMPI_MCA_btl_vader_single_copy_mechanism");
        char coll[512];
        coll_params_(coll, sizeof coll);
        printf("# bench_allreduce: %d ranks on %d node(s), dtype %s, sum, in place%s\n", W,
               c.nnodes, dtype, send ? " (MPI_Allreduce: from a separate send buffer)" : "");
        printf("# backend: comm \"%s\" algorithm %s%s on %s memory; reference: MPI_Allreduce "
               "(Open MPI %s%s) on the same buffer; vader single copy: %s\n",
               c.ops->name, algo, piece || depth ? " (tuned ring)" : "",
               strcmp(mem, "shared") ? "private (malloc)" : "gradient-buffer (comm_mem_alloc)",
               coll[0] ? "coll parameters: " : "defaults", coll, cma ? cma : "default");
        if (npath == 2)
            printf("# time: slowest rank's average over the timed iterations, median of %d rounds "
                   "alternating the two paths\n",
                   reps);
        else
            printf("# time: slowest rank's average over the timed iterations, median of %d rounds "
                   "alternating the %d paths\n",
                   reps, npath);
        for (int row = 0; row < 2; row++) {
            printf("#%11s %10s %5s", row ? "(B)" : "size", row ? "(elems)" : "count",
                   row ? "" : "iters");
            for (int p = 0; p < npath; p++) {
                printf(" | %10s %8s %8s %6s", row ? "(us)" : "time", row ? "(GB/s)" : "algbw",
                       row ? "(GB/s)" : "busbw", row ? "" : "#wrong");
                if (p < nalgo) printf(" %5s", row ? "" : "ident");
            }
            printf(" | %7s\n", row ? "(GB/s)" : "memcpy");
        }
        printf("#%11s %10s %5s", "", "", "");
        for (int p = 0; p < nalgo; p++) {
            char label[64];
            snprintf(label, sizeof label, "  comm backend%s%s", nalgo > 1 ? " " : "",
                     nalgo > 1 ? labels[p] : "");
            printf(" | %-41s", label);
        }
        printf(" | %-35s |\n", "  MPI_Allreduce");
    }
    long total_wrong = 0;
    for (size_t bytes = minb; bytes <= maxb; bytes *= 2) {
        size_t n = bytes / esz;
        int it = iters;
        while (it > 3 && (double)it * (double)bytes > 512.0 * 1024 * 1024) it /= 2;
        long wrong[MAX_ALGOS + 1];
        int ident[MAX_ALGOS + 1];
        for (int p = 0; p < npath; p++) {
            fill_(paths[p].send ? send : buf, t, n, c.rank);
            allreduce_(&paths[p], buf, n);
            long w = count_wrong_(buf, t, n, W);
            MPI_Allreduce(&w, &wrong[p], 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
            ident[p] = 1;
            if (p < nalgo) {
                uint64_t h = fnv1a_(buf, n * esz), h0 = h;
                MPI_Bcast(&h0, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
                int same = h == h0;
                MPI_Allreduce(&same, &ident[p], 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
            }
            total_wrong += wrong[p] + !ident[p];
        }
        memset(buf, 0, bytes);
        if (send) memset(send, 0, bytes);
        /* --reps rounds, each: per path --warmup untimed and `it` timed
         * all-reduces of zeros, then `it` memcpys after one untimed; a
         * barrier before each clock; the slowest rank's averages */
        run_t runs[MAX_ALGOS + 2];
        bench_case_t cases[MAX_ALGOS + 2];
        for (int p = 0; p <= npath; p++) {
            runs[p] = p < npath ? (run_t){.p = &paths[p], .buf = buf, .n = n}
                                : (run_t){.dst = dst, .src = src, .bytes = n * esz};
            cases[p] = (bench_case_t){.run = run_case_,
                                      .arg = &runs[p],
                                      .warmup = p < npath ? warmup : 1,
                                      .iters = it,
                                      .t = rt[p]};
        }
        bench_loop_t loop = {.samples = reps,
                             .warm_every = 1,
                             .before = bench_mpi_barrier,
                             .combine = bench_mpi_slowest};
        bench_loop_run(&loop, cases, npath + 1);
        if (c.rank == 0) {
            double f = 2.0 * (W - 1) / W;
            printf(" %11zu %10zu %5d", n * esz, n, it);
            for (int p = 0; p < npath; p++) {
                double tm = bench_median(rt[p], reps);
                printf(" | %10.1f %8.2f %8.2f %6ld", tm * 1e6, n * esz / tm / 1e9,
                       n * esz / tm / 1e9 * f, wrong[p]);
                if (p < nalgo) printf(" %5s", ident[p] ? "yes" : "NO");
            }
            printf(" | %7.2f\n", n * esz / bench_median(rt[npath], reps) / 1e9);
            fflush(stdout);
        }
    }
    if (nalgo > 1 || c.nnodes > 1) {
        /* what "auto" chose: the algorithms that ran, with their counts */
        char ran[256];
        comm_algorithms(&c, ran, sizeof ran);
        if (c.rank == 0) printf("# comm algorithms that ran: %s\n", ran);
    }
    if (c.rank == 0)
        printf("# %s\n",
               total_wrong ? "WRONG RESULTS (see #wrong / ident)" : "all results correct");
    if (!strcmp(mem, "shared"))
        comm_mem_free(&c, buf);
    else
        free(buf);
    for (int p = 0; p <= npath; p++) free(rt[p]);
    free(send);
    free(src);
    free(dst);
    MPI_Op_free(&half_op);
    MPI_Type_free(&half_dt);
    comm_free(&c);
    MPI_Finalize();
    return total_wrong ? 1 : 0;

usage:
    fprintf(
        stderr,
        "usage: bench_allreduce [--min 4K] [--max 64M] [--iters N] [--warmup N] "
        "[--reps N] [--algo auto|hier|ring|mpi[:PIECE[:DEPTH]][,...]] [--piece BYTES] [--depth D] "
        "[--dtype float|bf16|fp16] [--mem shared|private] [--mpi-in-place yes|no]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
    return 2;
}
