/* bench_loader.c -- loader throughput from HDF5 against a raw pread of the
 * same bytes, measured in the same run, and the loader's peak RSS.
 *
 *   bench_loader gen FILE N C H W      write a uint8 deck [N, C, H, W]
 *                                      (chunks as ddptrain-prep makes them)
 *   bench_loader run FILE B ORDER [R]  ORDER seq|random: one epoch per mode,
 *                                      best of R (default 5) repetitions
 *   bench_loader rss FILE B STEPS      run the loader (random order) for STEPS
 *                                      batches, print the peak RSS
 *
 * Modes of `run` (all produce the same bytes of the same batches):
 *   raw-pread     sorted, run-merged pread() of each batch's samples and
 *                 labels (chunk addresses from H5Dget_chunk_info, looked up
 *                 once before timing): the reference
 *   raw+convert   the same, plus uint8 -> normalised float in batch order
 *                 (vectorised): the least work that yields the batch
 *   deck_read     deck_read() in the calling thread (DECK_IO_AUTO: direct
 *                 reads at the rows' file addresses)
 *   loader        the loader thread with prefetch 4; the consumer only takes
 *                 and releases batches
 *   per-sample    deck_read() one sample at a time (no coalescing)
 *   h5-runs       deck_read() with DECK_IO_RUNS: one H5Dread per run
 *   h5-union      deck_read() with DECK_IO_UNION: one H5Dread per batch over
 *                 the union of hyperslabs (HDF5 1.10 maps it per element)
 * The file should be in the page cache (the script cats it first); each
 * mode's best time is reported, with samples/s, MB/s of sample bytes and the
 * ratio to raw-pread.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "bench_common.h"
#include "deck.h"
#include "h5util.h"
#include "loader.h"
#include "sampler.h"

static void die_(const char *what)
{
    fprintf(stderr, "bench_loader: %s: %s\n", what, ddp_error_message());
    exit(1);
}

/* ---- gen ---- */

static int gen_(const char *path, long long n, int c, int h, int w)
{
    size_t row = (size_t)c * h * w;
    hsize_t dims[4] = {(hsize_t)n, (hsize_t)c, (hsize_t)h, (hsize_t)w}, chunk[4];
    memcpy(chunk, dims, sizeof chunk);
    /* ddptrain-prep's policy: ~128 KiB, at most 4096 chunks */
    chunk[0] = (hsize_t)((128u << 10) / row);
    if (chunk[0] < 1) chunk[0] = 1;
    if (chunk[0] < ((hsize_t)n + 4095) / 4096) chunk[0] = ((hsize_t)n + 4095) / 4096;
    if (chunk[0] > (hsize_t)n) chunk[0] = (hsize_t)n;
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return 1;
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 4, chunk);
    hid_t sp = H5Screate_simple(4, dims, NULL);
    hid_t x = H5Dcreate2(f, "/train/x", H5T_STD_U8LE, sp, lcpl, dcpl, H5P_DEFAULT);
    hsize_t yd = (hsize_t)n;
    hid_t ysp = H5Screate_simple(1, &yd, NULL);
    hsize_t ych = yd < 32768 ? yd : 32768;
    hid_t ydcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(ydcpl, 1, &ych);
    hid_t y = H5Dcreate2(f, "/train/y", H5T_STD_I32LE, ysp, lcpl, ydcpl, H5P_DEFAULT);
    hsize_t block = (16u << 20) / row;
    unsigned char *buf = malloc(block * row);
    int32_t *lab = malloc(block * sizeof *lab);
    for (hsize_t off = 0; off < (hsize_t)n; off += block) {
        hsize_t cnt = (hsize_t)n - off < block ? (hsize_t)n - off : block;
        for (hsize_t i = 0; i < cnt; i++) {
            uint64_t g = off + i;
            for (size_t e = 0; e < row; e++)
                buf[i * row + e] = (unsigned char)((g * 131 + e * 7) >> 2);
            lab[i] = (int32_t)(g % 10);
        }
        hsize_t start[4] = {off, 0, 0, 0}, count[4];
        memcpy(count, dims, sizeof count);
        count[0] = cnt;
        hid_t fs = H5Dget_space(x);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        hid_t ms = H5Screate_simple(4, count, NULL);
        H5Dwrite(x, H5T_NATIVE_UINT8, ms, fs, H5P_DEFAULT, buf);
        H5Sclose(ms);
        H5Sclose(fs);
        fs = H5Dget_space(y);
        H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL);
        ms = H5Screate_simple(1, count, NULL);
        H5Dwrite(y, H5T_NATIVE_INT32, ms, fs, H5P_DEFAULT, lab);
        H5Sclose(ms);
        H5Sclose(fs);
    }
    float mean = 0.5f, sd = 0.25f;
    h5_attr_write_f32v(x, "mean", &mean, 1);
    h5_attr_write_f32v(x, "std", &sd, 1);
    free(buf);
    free(lab);
    H5Dclose(x);
    H5Dclose(y);
    H5Sclose(sp);
    H5Sclose(ysp);
    H5Pclose(dcpl);
    H5Pclose(ydcpl);
    H5Pclose(lcpl);
    return H5Fclose(f) < 0;
}

/* ---- the raw reference ---- */

/* Where the rows of one dataset are: chunk addresses from HDF5. */
typedef struct raw_ds {
    size_t row; /* bytes per row */
    hsize_t chunk_rows;
    haddr_t *chunk_addr; /* [nchunks] */
} raw_ds_t;

typedef struct raw {
    int fd;
    raw_ds_t x, y;
} raw_t;

static void raw_ds_open_(raw_ds_t *r, hid_t ds)
{
    hid_t dcpl = H5Dget_create_plist(ds), t = H5Dget_type(ds), fs = H5Dget_space(ds);
    hsize_t cd[4], dims[4];
    int rank = H5Sget_simple_extent_dims(fs, dims, NULL);
    H5Pget_chunk(dcpl, 4, cd);
    r->row = H5Tget_size(t);
    for (int i = 1; i < rank; i++) r->row *= dims[i];
    r->chunk_rows = cd[0];
    hsize_t nchunks;
    H5Dget_num_chunks(ds, fs, &nchunks);
    r->chunk_addr = malloc(nchunks * sizeof *r->chunk_addr);
    for (hsize_t i = 0; i < nchunks; i++) {
        hsize_t off[4], size;
        unsigned mask;
        haddr_t addr;
        H5Dget_chunk_info(ds, fs, i, off, &mask, &addr, &size);
        r->chunk_addr[off[0] / r->chunk_rows] = addr;
    }
    H5Sclose(fs);
    H5Tclose(t);
    H5Pclose(dcpl);
}

static void raw_open_(raw_t *r, const char *path, const deck_t *d)
{
    r->fd = open(path, O_RDONLY);
    raw_ds_open_(&r->x, d->shards[0].x);
    raw_ds_open_(&r->y, d->shards[0].y);
}

static int cmp_i64_(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* pread the sorted rows of one dataset into stage, runs merged per chunk. */
static void raw_rows_(int fd, const raw_ds_t *r, const int64_t *sorted, int n, unsigned char *stage)
{
    size_t o = 0;
    for (int a = 0; a < n;) {
        int64_t c = sorted[a] / (int64_t)r->chunk_rows;
        int b = a + 1;
        while (b < n && sorted[b] == sorted[b - 1] + 1 && sorted[b] / (int64_t)r->chunk_rows == c)
            b++;
        off_t at = (off_t)r->chunk_addr[c] +
                   (off_t)((sorted[a] - c * (int64_t)r->chunk_rows) * (int64_t)r->row);
        size_t len = (size_t)(b - a) * r->row;
        if (pread(fd, stage + o, len, at) != (ssize_t)len) {
            perror("pread");
            exit(1);
        }
        o += len;
        a = b;
    }
}

/* Read the batch's samples and labels (sorted) into xs and ys. */
static void raw_read_(const raw_t *r, const int64_t *idx, int n, int64_t *sorted, unsigned char *xs,
                      unsigned char *ys)
{
    memcpy(sorted, idx, (size_t)n * sizeof *sorted);
    qsort(sorted, (size_t)n, sizeof *sorted, cmp_i64_);
    raw_rows_(r->fd, &r->x, sorted, n, xs);
    raw_rows_(r->fd, &r->y, sorted, n, ys);
}

/* ---- modes ---- */

enum { M_RAW, M_RAWCONV, M_DECK, M_LOADER, M_PERSAMPLE, M_RUNS, M_UNION, M_COUNT };
static const char *mode_names[M_COUNT] = {"raw-pread",  "raw+convert", "deck_read", "loader",
                                          "per-sample", "h5-runs",     "h5-union"};

typedef struct pos_pair {
    int64_t idx, pos;
} pos_pair_t;

static int cmp_pair_(const void *a, const void *b)
{
    const pos_pair_t *x = a, *y = b;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

/* The reference conversion: raw * a + b with scalars, vectorisable. */
static void convert_(float *restrict dst, const unsigned char *restrict src, float a, float b,
                     size_t n)
{
    size_t e = 0;
    for (; e + 16 <= n; e += 16)
        for (int j = 0; j < 16; j++) dst[e + j] = (float)src[e + j] * a + b;
    for (; e < n; e++) dst[e] = (float)src[e] * a + b;
}

/* The buffers of a batch, shared by the modes. */
typedef struct bufs {
    int64_t *idx, *sorted;
    unsigned char *stage, *ystage;
    float *x;
    int32_t *lab;
    pos_pair_t *pairs;
} bufs_t;

/* One mode, a case of the timing loop (bench_common.h): a call reads one
 * epoch. */
typedef struct mode_run {
    int mode, batch;
    deck_t *d;
    raw_t *r;
    sampler_t *s;
    bufs_t *b;
} mode_run_t;

/* Before the clock: the mode's I/O path and the epoch's permutation. */
static void mode_prepare_(void *arg)
{
    mode_run_t *c = arg;
    int mode = c->mode;
    deck_set_io(c->d, mode == M_RUNS    ? DECK_IO_RUNS
                      : mode == M_UNION ? DECK_IO_UNION
                                        : DECK_IO_AUTO);
    sampler_set_epoch(c->s, 0);
}

static void mode_epoch_(void *arg, long it)
{
    mode_run_t *c = arg;
    int mode = c->mode;
    deck_t *d = c->d;
    raw_t *r = c->r;
    sampler_t *s = c->s;
    size_t numel = d->sample_numel;
    int64_t *idx = c->b->idx, *sorted = c->b->sorted;
    unsigned char *stage = c->b->stage, *ystage = c->b->ystage;
    float *x = c->b->x;
    int32_t *lab = c->b->lab;
    pos_pair_t *pairs = c->b->pairs;
    if (mode == M_LOADER) {
        loader_t *l;
        loader_opts_t o = {.prefetch = 4, .augment = "", .epochs = 1};
        if (loader_start(&l, d, s, &o) != DDP_OK) die_("loader_start");
        for (int64_t t = 0; t < s->steps; t++) {
            loader_batch_t *b;
            if (loader_next(l, &b) != DDP_OK) die_("loader_next");
            loader_release(l, b);
        }
        loader_stop(l);
    } else {
        for (int64_t t = 0; t < s->steps; t++) {
            int n = sampler_batch(s, t, idx);
            if (mode == M_RAW) {
                raw_read_(r, idx, n, sorted, stage, ystage);
            } else if (mode == M_RAWCONV) {
                /* sort keeping positions, read, convert into batch order */
                for (int i = 0; i < n; i++) pairs[i] = (pos_pair_t){idx[i], i};
                qsort(pairs, (size_t)n, sizeof *pairs, cmp_pair_);
                for (int i = 0; i < n; i++) sorted[i] = pairs[i].idx;
                raw_rows_(r->fd, &r->x, sorted, n, stage);
                raw_rows_(r->fd, &r->y, sorted, n, ystage);
                for (int i = 0; i < n; i++) {
                    convert_(x + (size_t)pairs[i].pos * numel, stage + (size_t)i * r->x.row,
                             d->norm_a[0], d->norm_b[0], numel);
                    lab[pairs[i].pos] = ((const int32_t *)ystage)[i];
                }
            } else if (mode == M_DECK || mode == M_RUNS || mode == M_UNION) {
                if (deck_read(d, idx, n, x, lab, NULL) != DDP_OK) die_("deck_read");
            } else {
                for (int i = 0; i < n; i++)
                    if (deck_read(d, idx + i, 1, x + (size_t)i * numel, lab + i, NULL) != DDP_OK)
                        die_("deck_read");
            }
        }
    }
}

static int run_(const char *path, int batch, const char *order, int reps)
{
    deck_t d;
    char *p[1] = {(char *)path};
    if (deck_open(&d, p, 1, "train") != DDP_OK) die_("deck_open");
    raw_t r;
    raw_open_(&r, path, &d);
    int shuffle = strcmp(order, "seq") != 0;
    sampler_t s;
    sampler_init(&s, d.n, 1, 0, batch, 1, shuffle, 1);
    size_t numel = d.sample_numel;
    bufs_t b = {.idx = malloc((size_t)batch * sizeof *b.idx),
                .sorted = malloc((size_t)batch * 8),
                .stage = malloc((size_t)batch * r.x.row),
                .ystage = malloc((size_t)batch * r.y.row),
                .x = malloc((size_t)batch * numel * sizeof *b.x),
                .lab = malloc((size_t)batch * sizeof *b.lab),
                .pairs = malloc((size_t)batch * sizeof *b.pairs)};
    /* R rounds of one epoch per mode, in turn; per-sample and h5-union are
     * slow: one epoch each, in the first round */
    mode_run_t runs[M_COUNT];
    bench_case_t cases[M_COUNT];
    double *times[M_COUNT], best[M_COUNT];
    for (int m = 0; m < M_COUNT; m++) {
        int slow = m == M_PERSAMPLE || m == M_UNION;
        runs[m] = (mode_run_t){m, batch, &d, &r, &s, &b};
        times[m] = malloc((size_t)(reps > 1 ? reps : 1) * sizeof *times[m]);
        cases[m] = (bench_case_t){.run = mode_epoch_,
                                  .arg = &runs[m],
                                  .samples = slow ? 1 : 0,
                                  .t = times[m],
                                  .prepare = mode_prepare_};
    }
    bench_loop_run(&(bench_loop_t){.samples = reps}, cases, M_COUNT);
    for (int m = 0; m < M_COUNT; m++) {
        int n = m == M_PERSAMPLE || m == M_UNION ? (reps < 1 ? reps : 1) : reps;
        best[m] = n > 0 ? bench_min(times[m], n) : 1e30;
        free(times[m]);
    }
    free(b.idx);
    free(b.sorted);
    free(b.stage);
    free(b.ystage);
    free(b.pairs);
    free(b.x);
    free(b.lab);
    double samples = (double)(s.steps * batch);
    char desc[256];
    deck_describe(&d, desc, sizeof desc);
    printf("# %s: %s\n", path, desc);
    printf("# batch %d, order %s, %lld samples per epoch, best of %d\n", batch, order,
           (long long)(s.steps * batch), reps);
    printf("# %-12s %11s %9s %10s %14s\n", "mode", "samples/s", "MB/s", "vs raw", "vs raw+conv");
    for (int m = 0; m < M_COUNT; m++)
        printf("  %-12s %11.0f %9.1f %9.0f%% %13.0f%%\n", mode_names[m], samples / best[m],
               samples * (double)r.x.row / best[m] / 1e6, 100.0 * best[M_RAW] / best[m],
               100.0 * best[M_RAWCONV] / best[m]);
    free(r.x.chunk_addr);
    free(r.y.chunk_addr);
    close(r.fd);
    deck_close(&d);
    return 0;
}

static int rss_(const char *path, int batch, long long steps)
{
    deck_t d;
    char *p[1] = {(char *)path};
    if (deck_open(&d, p, 1, "train") != DDP_OK) die_("deck_open");
    sampler_t s;
    sampler_init(&s, d.n, 1, 0, batch, 1, 1, 1);
    loader_t *l;
    loader_opts_t o = {.prefetch = 4, .augment = "", .epochs = 1000000};
    if (loader_start(&l, &d, &s, &o) != DDP_OK) die_("loader_start");
    for (long long t = 0; t < steps; t++) {
        loader_batch_t *b;
        if (loader_next(l, &b) != DDP_OK) die_("loader_next");
        loader_release(l, b);
    }
    loader_stop(l);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%lld samples, batch %d, %lld steps: peak RSS %ld KiB\n", (long long)d.n, batch, steps,
           ru.ru_maxrss);
    deck_close(&d);
    return 0;
}

int main(int argc, char **argv)
{
    h5_quiet();
    if (argc == 7 && !strcmp(argv[1], "gen"))
        return gen_(argv[2], atoll(argv[3]), atoi(argv[4]), atoi(argv[5]), atoi(argv[6]));
    if ((argc == 5 || argc == 6) && !strcmp(argv[1], "run"))
        return run_(argv[2], atoi(argv[3]), argv[4], argc == 6 ? atoi(argv[5]) : 5);
    if (argc == 5 && !strcmp(argv[1], "rss")) return rss_(argv[2], atoi(argv[3]), atoll(argv[4]));
    fprintf(stderr, "usage: bench_loader gen FILE N C H W | run FILE BATCH seq|random [REPS] | "
                    "rss FILE BATCH STEPS\n");
    return 2;
}
