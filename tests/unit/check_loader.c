/* check_loader.c -- the loader thread: batches in sampler order with the
 * data deck_read gives, the prefetch bound, errors from a corrupt chunk
 * handed to the consumer, stopping at any time, batch buffers in staging
 * memory (and malloc when it runs out); augmentation keyed by
 * (seed, epoch, global sample index) and independent of rank. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "augment.h"
#include "loader.h"
#include "test_decks.h"
#include "tests.h"

static char *deck_path_;

static void open_deck_(deck_t *d, const tdeck_t *t, const char *name)
{
    free(deck_path_);
    deck_path_ = strdup(tdeck_path(name));
    ck_assert_int_eq(tdeck_write(deck_path_, t), 0);
    char *p[1] = {deck_path_};
    ck_assert_msg(deck_open(d, p, 1, "train") == DDP_OK, "%s", ddp_error_message());
}

static const tdeck_t img_ = {.n = 100,
                             .xrank = 4,
                             .c = 2,
                             .h = 6,
                             .w = 5,
                             .u8 = 1,
                             .classes = 10,
                             .nstat = 2,
                             .chunk_rows = 9};

START_TEST(batches_in_order)
{
    deck_t d;
    open_deck_(&d, &img_, "order.h5");
    sampler_t s;
    sampler_init(&s, d.n, 2, 1, 8, 17, 1, 0);
    loader_opts_t o = {
        .prefetch = 2, .augment = "", .first_epoch = 1, .first_step = 5, .epochs = 3};
    loader_t *l;
    ck_assert_int_eq(loader_start(&l, &d, &s, &o), DDP_OK);
    /* a second deck handle to compute the expected batches */
    deck_t d2;
    char *p[1] = {deck_path_};
    ck_assert_int_eq(deck_open(&d2, p, 1, "train"), DDP_OK);
    size_t numel = d.sample_numel;
    int64_t idx[8];
    float *x = malloc(8 * numel * sizeof *x);
    int32_t lab[8];
    int batches = 0;
    for (int64_t e = 1; e < 4; e++) {
        sampler_set_epoch(&s, e);
        for (int64_t t = e == 1 ? 5 : 0; t < s.steps; t++) {
            loader_batch_t *b;
            ck_assert_msg(loader_next(l, &b) == DDP_OK, "%s", ddp_error_message());
            int n = sampler_batch(&s, t, idx);
            ck_assert_int_eq(b->epoch, e);
            ck_assert_int_eq(b->step, t);
            ck_assert_int_eq(b->n, n);
            ck_assert_int_eq(b->global_n, sampler_global_count(&s, t));
            ck_assert_ptr_null(b->targets);
            ck_assert_int_eq(deck_read(&d2, idx, n, x, lab, NULL), DDP_OK);
            for (int i = 0; i < n; i++) {
                ck_assert_int_eq(b->idx[i], idx[i]);
                ck_assert_int_eq(b->labels[i], lab[i]);
            }
            ck_assert(memcmp(b->x, x, (size_t)n * numel * sizeof *x) == 0);
            loader_release(l, b);
            batches++;
        }
    }
    ck_assert_int_eq(batches, 2 + 7 + 7); /* steps = ceil(100/16) = 7 */
    loader_batch_t *b;
    ck_assert_int_eq(loader_next(l, &b), DDP_ERR_INTERNAL);
    ddp_clear_error();
    ck_assert_double_ge(loader_wait_seconds(l), 0.0);
    ck_assert_int_le(loader_ready_peak(l), 2);
    loader_stop(l);
    free(x);
    deck_close(&d2);
    deck_close(&d);
}
END_TEST

START_TEST(prefetch_bound)
{
    deck_t d;
    open_deck_(&d, &img_, "bound.h5");
    for (int pf = 1; pf <= 3; pf++) {
        sampler_t s;
        sampler_init(&s, d.n, 1, 0, 4, 3, 1, 1);
        loader_opts_t o = {.prefetch = pf, .augment = "", .epochs = 2};
        loader_t *l;
        ck_assert_int_eq(loader_start(&l, &d, &s, &o), DDP_OK);
        for (int i = 0; i < 2 * 25; i++) {
            loader_batch_t *b;
            ck_assert_int_eq(loader_next(l, &b), DDP_OK);
            usleep(i < 5 ? 20000 : 200); /* slow consumer: the queue fills */
            loader_release(l, b);
        }
        ck_assert_int_eq(loader_ready_peak(l), pf);
        loader_stop(l);
    }
    deck_close(&d);
}
END_TEST

START_TEST(error_from_corrupt_chunk)
{
    tdeck_t t = img_;
    t.deflate = 1;
    t.chunk_rows = 7;
    deck_t d;
    open_deck_(&d, &t, "corrupt.h5");
    /* garbage over the chunk of samples [21, 28) */
    hid_t ds = d.shards[0].x;
    hsize_t coord[4] = {21, 0, 0, 0}, size;
    haddr_t addr;
    unsigned mask;
    ck_assert_int_ge(H5Dget_chunk_info_by_coord(ds, coord, &mask, &addr, &size), 0);
    deck_close(&d);
    FILE *fp = fopen(deck_path_, "r+b");
    fseek(fp, (long)addr, SEEK_SET);
    for (hsize_t i = 0; i < size; i++) fputc((int)(i * 77 + 1) & 0xff, fp);
    fclose(fp);
    char *p[1] = {deck_path_};
    ck_assert_int_eq(deck_open(&d, p, 1, "train"), DDP_OK);

    sampler_t s;
    sampler_init(&s, d.n, 1, 0, 10, 3, 0, 0); /* no shuffle: batch 2 holds 20..29 */
    loader_opts_t o = {.prefetch = 4, .augment = "", .epochs = 1};
    loader_t *l;
    ck_assert_int_eq(loader_start(&l, &d, &s, &o), DDP_OK);
    loader_batch_t *b;
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(loader_next(l, &b), DDP_OK);
        loader_release(l, b);
    }
    for (int k = 0; k < 2; k++) {
        ck_assert_int_eq(loader_next(l, &b), DDP_ERR_INPUT);
        ck_assert_ptr_null(b);
        const char *m = ddp_error_message();
        ck_assert_msg(strstr(m, deck_path_) && strstr(m, "/train/x samples [20, 30)"), "%s", m);
        ddp_clear_error();
    }
    loader_stop(l);
    deck_close(&d);
}
END_TEST

START_TEST(stop_at_any_time)
{
    deck_t d;
    open_deck_(&d, &img_, "stop.h5");
    sampler_t s;
    sampler_init(&s, d.n, 1, 0, 5, 3, 1, 0);
    loader_opts_t o = {.prefetch = 2, .augment = "", .epochs = 1000};
    loader_t *l;
    /* right after start */
    for (int i = 0; i < 5; i++) {
        ck_assert_int_eq(loader_start(&l, &d, &s, &o), DDP_OK);
        loader_stop(l);
    }
    /* with the thread blocked on a full queue */
    ck_assert_int_eq(loader_start(&l, &d, &s, &o), DDP_OK);
    for (int i = 0; i < 1000 && loader_ready_peak(l) < 2; i++) usleep(1000);
    ck_assert_int_eq(loader_ready_peak(l), 2);
    usleep(2000);
    loader_stop(l);
    /* while the consumer holds batches */
    ck_assert_int_eq(loader_start(&l, &d, &s, &o), DDP_OK);
    loader_batch_t *b1, *b2;
    ck_assert_int_eq(loader_next(l, &b1), DDP_OK);
    ck_assert_int_eq(loader_next(l, &b2), DDP_OK);
    loader_stop(l);
    /* after the end */
    o.epochs = 1;
    ck_assert_int_eq(loader_start(&l, &d, &s, &o), DDP_OK);
    for (int i = 0; i < 20; i++) {
        ck_assert_int_eq(loader_next(l, &b1), DDP_OK);
        loader_release(l, b1);
    }
    ck_assert_int_eq(loader_next(l, &b1), DDP_ERR_INTERNAL);
    ddp_clear_error();
    loader_stop(l);
    loader_stop(NULL);
    /* bad options */
    o.prefetch = 0;
    ck_assert_int_eq(loader_start(&l, &d, &s, &o), DDP_ERR_USAGE);
    ddp_clear_error();
    deck_close(&d);
}
END_TEST

/* ---- augmentation ---- */

START_TEST(augment_parse_errors)
{
    act_shape_t img = {3, 8, 8, 1}, feat = {10, 1, 1, 0};
    augment_t a;
    ck_assert_int_eq(augment_parse("", feat, &a), DDP_OK);
    ck_assert_int_eq(augment_parse("none", img, &a), DDP_OK);
    ck_assert(!augment_active(&a));
    ck_assert_int_eq(augment_parse("hflip,crop:4", img, &a), DDP_OK);
    ck_assert_int_eq(a.hflip, 1);
    ck_assert_int_eq(a.crop, 4);
    ck_assert_int_eq(augment_check("hflip", feat), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "--augment"));
    ddp_clear_error();
    ck_assert_int_eq(augment_check("crop:0", img), DDP_ERR_USAGE);
    ddp_clear_error();
    ck_assert_int_eq(augment_check("crop:8", img), DDP_ERR_USAGE);
    ddp_clear_error();
    ck_assert_int_eq(augment_check("rot90", img), DDP_ERR_USAGE);
    ck_assert_ptr_nonnull(strstr(ddp_error_message(), "rot90"));
    ddp_clear_error();
}
END_TEST

START_TEST(augment_semantics)
{
    act_shape_t sh = {1, 4, 5, 1};
    float x[20], tmp[20], orig[20];
    for (int i = 0; i < 20; i++) orig[i] = (float)(i + 1);
    augment_t a = {.hflip = 1, .crop = 0};
    int flips = 0;
    for (int64_t g = 0; g < 400; g++) {
        memcpy(x, orig, sizeof x);
        augment_sample(&a, sh, 5, 0, g, x, tmp);
        int flipped = x[0] == 5.0f;
        flips += flipped;
        for (int r = 0; r < 4; r++)
            for (int c = 0; c < 5; c++)
                ck_assert_float_eq(x[r * 5 + c], orig[r * 5 + (flipped ? 4 - c : c)]);
    }
    ck_assert(flips > 150 && flips < 250);
    /* crop:2: a shifted window with raw-0 padding; every offset in [-2, 2] occurs */
    a = (augment_t){.hflip = 0, .crop = 2};
    int seen[5][5] = {{0}};
    for (int64_t g = 0; g < 500; g++) {
        memcpy(x, orig, sizeof x);
        augment_sample(&a, sh, 5, 1, g, x, tmp);
        /* find the offset from a surviving pixel, then check the whole image */
        int dy = 9, dx = 9;
        for (int ty = -2; ty <= 2 && dy == 9; ty++)
            for (int tx = -2; tx <= 2; tx++) {
                int ok = 1;
                for (int r = 0; r < 4 && ok; r++)
                    for (int c = 0; c < 5 && ok; c++) {
                        int sr = r + ty, sc = c + tx;
                        float want = sr >= 0 && sr < 4 && sc >= 0 && sc < 5 ? orig[sr * 5 + sc] : 0;
                        ok = x[r * 5 + c] == want;
                    }
                if (ok) {
                    dy = ty;
                    dx = tx;
                    break;
                }
            }
        ck_assert_msg(dy != 9, "sample %lld is no padded crop", (long long)g);
        seen[dy + 2][dx + 2]++;
    }
    for (int i = 0; i < 5; i++)
        for (int j = 0; j < 5; j++) ck_assert_int_gt(seen[i][j], 0);
}
END_TEST

/* Every sample's augmented, normalised values depend on (seed, epoch, global
 * index) only: W=1 with batch 12 and W=3 with batch 4 give identical bits. */
START_TEST(augment_independent_of_rank)
{
    tdeck_t t = img_;
    t.n = 60;
    t.h = t.w = 7;
    deck_t d;
    open_deck_(&d, &t, "aug.h5");
    size_t numel = d.sample_numel;
    float *ref = calloc((size_t)d.n * 2 * numel, sizeof *ref);
    float *ref_plain = calloc((size_t)d.n * numel, sizeof *ref_plain);
    int changed = 0, by_epoch = 0;
    for (int pass = 0; pass < 3; pass++) {
        int world = pass == 0 ? 1 : 3;
        for (int r = 0; r < world; r++) {
            sampler_t s;
            sampler_init(&s, d.n, world, r, 12 / world, 21, 1, 0);
            loader_opts_t o = {
                .prefetch = 3, .augment = pass < 2 ? "hflip,crop:3" : "", .epochs = 2};
            loader_t *l;
            ck_assert_int_eq(loader_start(&l, &d, &s, &o), DDP_OK);
            for (int64_t k = 0; k < 2 * s.steps; k++) {
                loader_batch_t *b;
                ck_assert_int_eq(loader_next(l, &b), DDP_OK);
                for (int i = 0; i < b->n; i++) {
                    const float *v = b->x + (size_t)i * numel;
                    float *slot = ref + ((size_t)b->idx[i] * 2 + (size_t)b->epoch) * numel;
                    if (pass == 0)
                        memcpy(slot, v, numel * sizeof *v);
                    else if (pass == 1)
                        ck_assert(memcmp(slot, v, numel * sizeof *v) == 0);
                    else if (b->epoch == 0)
                        memcpy(ref_plain + (size_t)b->idx[i] * numel, v, numel * sizeof *v);
                }
                loader_release(l, b);
            }
            loader_stop(l);
        }
    }
    for (int64_t g = 0; g < d.n; g++) {
        const float *e0 = ref + (size_t)g * 2 * numel, *e1 = e0 + numel;
        changed += memcmp(e0, ref_plain + (size_t)g * numel, numel * sizeof *e0) != 0;
        by_epoch += memcmp(e0, e1, numel * sizeof *e0) != 0;
    }
    ck_assert_int_gt(changed, d.n / 2);  /* most samples were augmented */
    ck_assert_int_gt(by_epoch, d.n / 2); /* and differently in each epoch */
    /* the loader's pipeline: raw read, augment (padding raw 0), normalise;
     * so a padded pixel of channel c is -mean[c]/std[c] */
    augment_t a;
    ck_assert_int_eq(augment_parse("hflip,crop:3", d.shape, &a), DDP_OK);
    float *v = malloc(numel * sizeof *v), *tmp = malloc(numel * sizeof *tmp);
    int padded = 0;
    for (int64_t g = 0; g < d.n; g++) {
        ck_assert_int_eq(deck_read_raw(&d, &g, 1, v, NULL, NULL), DDP_OK);
        augment_sample(&a, d.shape, 21, 1, g, v, tmp);
        deck_normalize(&d, v, 1);
        ck_assert(memcmp(v, ref + ((size_t)g * 2 + 1) * numel, numel * sizeof *v) == 0);
        for (size_t e = 0; e < numel; e++) {
            int c = (int)(e / (size_t)(d.shape.h * d.shape.w));
            padded += v[e] == -tdeck_mean(c) / tdeck_std(c);
        }
    }
    ck_assert_int_gt(padded, 0);
    free(v);
    free(tmp);
    free(ref);
    free(ref_plain);
    deck_close(&d);
}
END_TEST

/* A staging allocator (loader_opts_t.host_alloc) that counts what it holds
 * and gives out at most `staging_room_` buffers. */
static int staging_live_, staging_given_, staging_room_;
static void *staging_ptrs_[64];

static void *staging_alloc_(size_t bytes)
{
    if (staging_given_ >= staging_room_ || staging_given_ == 64) return NULL;
    void *p = malloc(bytes ? bytes : 1);
    staging_ptrs_[staging_given_++] = p;
    staging_live_++;
    return p;
}

static void staging_free_(void *p)
{
    if (!p) return;
    int known = 0;
    for (int i = 0; i < staging_given_; i++)
        if (staging_ptrs_[i] == p) {
            staging_ptrs_[i] = NULL; /* malloc may hand the address out again */
            known = 1;
        }
    ck_assert_msg(known, "host_free got a pointer host_alloc did not give");
    staging_live_--;
    free(p);
}

static int staged_(const void *p)
{
    for (int i = 0; i < staging_given_; i++)
        if (staging_ptrs_[i] == p) return 1;
    return 0;
}

/* The batches come from host_alloc, are freed with host_free, and a batch
 * it cannot give comes from malloc (freed with free); the data are the same. */
START_TEST(staging_memory)
{
    deck_t d;
    open_deck_(&d, &img_, "staging.h5");
    sampler_t s;
    sampler_init(&s, d.n, 1, 0, 8, 5, 1, 0);
    for (int room = 64; room >= 5; room -= 59) {
        staging_live_ = staging_given_ = 0;
        staging_room_ = room; /* 5: one batch of three (3 buffers each) fits, and part of one */
        loader_opts_t o = {.prefetch = 2,
                           .augment = "",
                           .first_epoch = 0,
                           .first_step = 0,
                           .epochs = 1,
                           .host_alloc = staging_alloc_,
                           .host_free = staging_free_};
        loader_t *l;
        ck_assert_int_eq(loader_start(&l, &d, &s, &o), DDP_OK);
        ck_assert_int_eq(staging_live_, room == 64 ? 9 : 3); /* 3 slots x (idx, x, labels) */
        int staged = 0, plain = 0;
        for (int64_t t = 0; t < 6; t++) {
            loader_batch_t *b;
            ck_assert_msg(loader_next(l, &b) == DDP_OK, "%s", ddp_error_message());
            int in = staged_(b->x);
            ck_assert_int_eq(staged_(b->idx), in);
            ck_assert_int_eq(staged_(b->labels), in);
            staged += in;
            plain += !in;
            loader_release(l, b);
        }
        /* with room for all, every batch is staged; else some are not (the
         * loader's slots are reused last-in first-out: which ones is its) */
        if (room >= 9) ck_assert_int_eq(plain, 0);
        if (room < 9) ck_assert_int_gt(plain, 0);
        ck_assert_int_eq(staged + plain, 6);
        loader_stop(l);
        ck_assert_int_eq(staging_live_, 0);
    }
    deck_close(&d);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("loader");
    TCase *t = tcase_create("loader");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, batches_in_order);
    tcase_add_test(t, prefetch_bound);
    tcase_add_test(t, error_from_corrupt_chunk);
    tcase_add_test(t, stop_at_any_time);
    tcase_add_test(t, staging_memory);
    suite_add_tcase(s, t);
    TCase *a = tcase_create("augment");
    tcase_add_test(a, augment_parse_errors);
    tcase_add_test(a, augment_semantics);
    tcase_add_test(a, augment_independent_of_rank);
    suite_add_tcase(s, a);
    return s;
}
