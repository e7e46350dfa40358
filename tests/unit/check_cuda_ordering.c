/* check_cuda_ordering.c -- the "cuda" compute backend keeps compute.h's
 * ordering contract ("Ordering") on the CPU emulation's queued streams
 * (tests/emu/include/cuda_runtime.h, DDP_EMU_STREAMS), through the ops table
 * as the trainer uses it:
 *   - an upload into a buffer that earlier ops still read waits for the
 *     last record of its `reuse` event (write after read);
 *   - event_wait on `done`, or on an event recorded after the upload,
 *     returns only once the copy has landed and read the host buffer, so
 *     ops may read dst and the host may refill its buffer (the loader's);
 *   - copy, zero and the launchers are queued in order, and download waits
 *     for all of them;
 *   - download_async reads its source after the ops called before it and
 *     before those called after it, and the bytes are in the host buffer
 *     once `done` has been waited for.
 * Two programs from this file, as the streams' mode is fixed when the
 * backend creates them: check_cuda_ordering (lazy: every stream runs only
 * when waited for, so a missing wait leaves a reader before its writer) and
 * check_cuda_ordering_first (-DORDER_LAZY_FIRST: the copy stream runs as
 * soon as it may, so a missing wait lets it overwrite what the compute
 * stream has still to read). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compute_cuda.h"
#include "ddp_cuda.h"
#include "tests.h"

void ddp_emu_reload_env(void); /* the emulation: re-read its environment */

#ifdef ORDER_LAZY_FIRST
#define STREAMS "lazy-first"
#else
#define STREAMS "lazy"
#endif

enum { N = 1000 };

static const compute_ops_t *C = &compute_cuda_ops;

static void setup(void)
{
    static int ready;
    if (ready) return;
    setenv("DDP_EMU_STREAMS", STREAMS, 1);
    ddp_emu_reload_env();
    char describe[256];
    ck_assert_int_eq(C->init(0, 1, describe, sizeof describe), DDP_OK);
    ready = 1;
}

static void *dev_(void)
{
    void *p = C->alloc(N * sizeof(float));
    ck_assert_msg(p != NULL, "alloc: %s", ddp_error_message());
    return p;
}

static float *pinned_(void)
{
    float *h = C->host_alloc(N * sizeof(float));
    ck_assert_msg(h != NULL, "host_alloc failed");
    return h;
}

static void fill_(float *h, float base)
{
    for (int i = 0; i < N; i++) h[i] = base + (float)i;
}

/* the device buffer d holds base + i */
static void expect_(const void *d, float base, const char *what)
{
    float out[N];
    C->download(out, d, sizeof out);
    ck_assert_int_eq(C->check(), DDP_OK);
    for (int i = 0; i < N; i++)
        ck_assert_msg(out[i] == base + (float)i, "%s: [%d] = %g, expected %g (streams %s)", what,
                      i, (double)out[i], (double)(base + (float)i), STREAMS);
}

/* Micro-batch j computes on d (here: copies it into e) while micro-batch
 * j+1's upload into d waits for the record of `reuse` after that compute. */
START_TEST(upload_waits_for_reuse)
{
    setup();
    void *d = dev_(), *e = dev_(), *f = dev_();
    float *h1 = pinned_(), *h2 = pinned_();
    compute_event_t *reuse = C->event_create(), *done = C->event_create();
    ck_assert_ptr_nonnull(reuse);
    ck_assert_ptr_nonnull(done);
    fill_(h1, 1.0f);
    fill_(h2, -5000.0f);
    C->upload_async(d, h1, N * sizeof(float), reuse, done);
    C->event_wait(done);
    C->copy(e, d, N * sizeof(float)); /* reads d */
    C->event_record(reuse);
    C->upload_async(d, h2, N * sizeof(float), reuse, done);
    C->event_wait(done);
    C->copy(f, d, N * sizeof(float));
    expect_(e, 1.0f, "the compute before the upload");
    expect_(f, -5000.0f, "the compute after it");
    C->event_destroy(reuse), C->event_destroy(done);
    C->host_free(h1), C->host_free(h2);
    C->free(d), C->free(e), C->free(f);
}
END_TEST

/* After event_wait(done) the host may refill its buffer: the copy has read
 * it.  And an upload with reuse == NULL waits for all work before it. */
START_TEST(done_means_host_buffer_read)
{
    setup();
    void *d = dev_(), *e = dev_();
    float *h = pinned_();
    compute_event_t *done = C->event_create();
    ck_assert_ptr_nonnull(done);
    fill_(h, 7.0f);
    C->zero(d, N * sizeof(float));
    C->upload_async(d, h, N * sizeof(float), NULL, done);
    C->event_wait(done);
    fill_(h, 9000.0f); /* the loader refills its batch */
    C->copy(e, d, N * sizeof(float));
    expect_(e, 7.0f, "the upload before the refill");
    C->event_destroy(done);
    C->host_free(h);
    C->free(d), C->free(e);
}
END_TEST

/* An event recorded (on the compute stream) after an upload covers it, too:
 * once waited for, the copy has landed and read the host buffer. */
START_TEST(later_event_covers_upload)
{
    setup();
    void *d = dev_(), *e = dev_();
    float *h = pinned_();
    compute_event_t *after = C->event_create();
    ck_assert_ptr_nonnull(after);
    fill_(h, 11.0f);
    C->zero(d, N * sizeof(float));
    C->upload_async(d, h, N * sizeof(float), NULL, NULL);
    C->event_record(after);
    C->event_wait(after);
    fill_(h, -7000.0f);
    C->copy(e, d, N * sizeof(float));
    expect_(e, 11.0f, "the upload before the event");
    C->event_destroy(after);
    C->host_free(h);
    C->free(d), C->free(e);
}
END_TEST

/* Queued device-to-device ops and a launcher, in call order; download waits
 * for them all. */
START_TEST(ops_in_call_order)
{
    setup();
    void *d = dev_(), *e = dev_();
    float h[N];
    fill_(h, 3.0f);
    C->upload(d, h, sizeof h);
    C->copy(e, d, sizeof h);
    C->zero(d, sizeof h);
    C->scale(N, e, 2.0f); /* e = 2 (3 + i) */
    C->copy(d, e, sizeof h);
    float out[N];
    C->download(out, d, sizeof out);
    ck_assert_int_eq(C->check(), DDP_OK);
    for (int i = 0; i < N; i++) ck_assert_float_eq(out[i], 2.0f * (3.0f + (float)i));
    C->free(d), C->free(e);
}
END_TEST

/* The non-finite guard's read of a step's losses: queued behind the step,
 * waited for one step later, while the next step's ops rewrite the source. */
START_TEST(download_async_in_call_order)
{
    setup();
    void *d = dev_();
    float *h = pinned_(), *h2 = pinned_();
    compute_event_t *done = C->event_create(), *done2 = C->event_create();
    ck_assert_ptr_nonnull(done);
    ck_assert_ptr_nonnull(done2);
    fill_(h, -1.0f), fill_(h2, -1.0f);
    float src[N];
    fill_(src, 3.0f);
    C->upload(d, src, sizeof src);
    C->scale(N, d, 2.0f); /* before: in the copy */
    C->download_async(h, d, N * sizeof(float), done);
    C->zero(d, N * sizeof(float)); /* after: not in it */
    C->download_async(h2, d, N * sizeof(float), done2);
    C->scale(N, d, 5.0f);
    C->event_wait(done);
    C->event_wait(done2);
    ck_assert_int_eq(C->check(), DDP_OK);
    for (int i = 0; i < N; i++) {
        ck_assert_msg(h[i] == 2.0f * (3.0f + (float)i), "[%d] = %g, expected %g (streams %s)", i,
                      (double)h[i], 2.0 * (3.0 + i), STREAMS);
        ck_assert_msg(h2[i] == 0.0f, "second copy [%d] = %g, expected 0 (streams %s)", i,
                      (double)h2[i], STREAMS);
    }
    C->event_destroy(done), C->event_destroy(done2);
    C->host_free(h), C->host_free(h2);
    C->free(d);
}
END_TEST

Suite *test_suite(void)
{
    Suite *s = suite_create("cuda_ordering");
    TCase *t = tcase_create(STREAMS);
    tcase_add_test(t, upload_waits_for_reuse);
    tcase_add_test(t, done_means_host_buffer_read);
    tcase_add_test(t, later_event_covers_upload);
    tcase_add_test(t, ops_in_call_order);
    tcase_add_test(t, download_async_in_call_order);
    suite_add_tcase(s, t);
    return s;
}
