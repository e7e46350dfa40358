/* loader.c -- the streaming loader thread and its bounded batch queue
 * (see loader.h).
 *
 * prefetch + 1 batch slots are allocated once: up to `prefetch` read-ahead
 * batches wait in the queue while the consumer holds one.  The thread takes
 * a free slot, fills it (sampler -> deck_read -> augmentation), and queues
 * it; it sleeps while `prefetch` batches are queued or no slot is free.  An
 * error ends the thread; its message (thread-local in status.c) is copied
 * into the loader and re-raised by loader_next once the batches read before
 * it have been consumed.
 *
 * A consumer that finds the queue empty spins for up to SPIN_S on `posted`
 * (bumped whenever a batch, an error or the end is queued) before it sleeps on
 * the condition variable: waking a sleeping thread costs tens of
 * microseconds (an inter-processor interrupt, more under a hypervisor), which
 * with small batches is as long as reading the batch.  The consumer has
 * nothing else to do while it waits; the producer never spins, since in
 * training it waits while the consumer computes.
 */
#include "loader.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "augment.h"
#include "clock.h"
#include "log.h"

struct loader {
    deck_t *d;
    sampler_t s; /* the thread's own copy */
    loader_opts_t o;
    augment_t aug;
    float *aug_tmp; /* [sample_numel] */

    int nslots;
    loader_batch_t *slots;
    loader_batch_t *kept; /* opts.replay batches read once (input from memory) */
    int nkept;
    int *free_list, nfree;
    loader_batch_t **ready; /* ring of nslots, in order */
    int rhead, rcount;
    int ready_peak;

    pthread_mutex_t mu;
    pthread_cond_t cv_ready, cv_free;
    atomic_uint posted; /* bumped under mu whenever cv_ready is signalled */
    pthread_t thread;
    int started;
    int stop, done;
    ddp_status_t err;
    char errmsg[1024];
    double wait_s;
};

#define SPIN_S 100e-6

static inline void cpu_relax_(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Wake the consumer: called with mu held. */
static void post_(loader_t *l)
{
    atomic_fetch_add_explicit(&l->posted, 1, memory_order_release);
    pthread_cond_signal(&l->cv_ready);
}

/* Input from memory: batch b's values from a kept batch (loader.h,
 * loader_opts_t.replay); the count and indices are the sampler's already. */
static void replay_(loader_t *l, loader_batch_t *b, int64_t step)
{
    const loader_batch_t *k = &l->kept[step % l->nkept];
    const deck_t *d = l->d;
    size_t numel = d->sample_numel;
    for (int i = 0; i < b->n && k->n > 0; i++) {
        int from = i % k->n;
        memcpy(b->x + (size_t)i * numel, k->x + (size_t)from * numel, numel * sizeof *b->x);
        if (b->labels) b->labels[i] = k->labels[from];
        if (b->targets)
            memcpy(b->targets + (size_t)i * (size_t)d->targets,
                   k->targets + (size_t)from * (size_t)d->targets,
                   (size_t)d->targets * sizeof *b->targets);
    }
}

/* Keep a copy of batch b for replay_. */
static void keep_(loader_t *l, const loader_batch_t *b)
{
    loader_batch_t *k = &l->kept[l->nkept++];
    const deck_t *d = l->d;
    k->n = b->n;
    memcpy(k->x, b->x, (size_t)b->n * d->sample_numel * sizeof *k->x);
    if (b->labels) memcpy(k->labels, b->labels, (size_t)b->n * sizeof *k->labels);
    if (b->targets)
        memcpy(k->targets, b->targets, (size_t)b->n * (size_t)d->targets * sizeof *k->targets);
}

/* Fill one batch; HDF5 is called (under the lock) by deck_read. */
static ddp_status_t fill_(loader_t *l, loader_batch_t *b, int64_t epoch, int64_t step)
{
    deck_t *d = l->d;
    b->epoch = epoch;
    b->step = step;
    b->n = sampler_batch(&l->s, step, b->idx);
    b->global_n = sampler_global_count(&l->s, step);
    if (l->o.replay > 0 && l->nkept == l->o.replay) {
        replay_(l, b, step);
        return DDP_OK;
    }
    int aug = augment_active(&l->aug);
    DDP_TRY(aug ? deck_read_raw(d, b->idx, b->n, b->x, b->labels, b->targets)
                : deck_read(d, b->idx, b->n, b->x, b->labels, b->targets));
    if (aug) {
        for (int i = 0; i < b->n; i++)
            augment_sample(&l->aug, d->shape, l->s.seed, epoch, b->idx[i],
                           b->x + (size_t)i * d->sample_numel, l->aug_tmp);
        deck_normalize(d, b->x, b->n);
    }
    if (l->o.replay > 0) keep_(l, b);
    return DDP_OK;
}

static void *thread_main_(void *arg)
{
    loader_t *l = arg;
    ddp_status_t s = DDP_OK;
    int64_t last = l->o.first_epoch + l->o.epochs;
    for (int64_t e = l->o.first_epoch; e < last && s == DDP_OK; e++) {
        sampler_set_epoch(&l->s, e);
        for (int64_t t = e == l->o.first_epoch ? l->o.first_step : 0; t < l->s.steps; t++) {
            pthread_mutex_lock(&l->mu);
            while (!l->stop && (l->nfree == 0 || l->rcount >= l->o.prefetch))
                pthread_cond_wait(&l->cv_free, &l->mu);
            if (l->stop) {
                pthread_mutex_unlock(&l->mu);
                return NULL;
            }
            loader_batch_t *b = &l->slots[l->free_list[--l->nfree]];
            pthread_mutex_unlock(&l->mu);

            s = fill_(l, b, e, t);

            pthread_mutex_lock(&l->mu);
            if (s != DDP_OK) {
                l->free_list[l->nfree++] = (int)(b - l->slots);
                l->err = s;
                snprintf(l->errmsg, sizeof l->errmsg, "%s", ddp_error_message());
                ddp_clear_error();
            } else {
                l->ready[(l->rhead + l->rcount) % l->nslots] = b;
                l->rcount++;
                if (l->rcount > l->ready_peak) l->ready_peak = l->rcount;
            }
            post_(l);
            pthread_mutex_unlock(&l->mu);
            if (s != DDP_OK) break;
        }
    }
    pthread_mutex_lock(&l->mu);
    l->done = 1;
    post_(l);
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void free_batch_(const loader_opts_t *o, loader_batch_t *b)
{
    void (*release)(void *) = b->staged ? o->host_free : free;
    release(b->idx);
    release(b->x);
    release(b->labels);
    release(b->targets);
}

static void free_batches_(const loader_opts_t *o, loader_batch_t *b, int n)
{
    if (b)
        for (int i = 0; i < n; i++) free_batch_(o, &b[i]);
    free(b);
}

/* The buffers of one batch of B samples, all from one allocator; 0 when
 * out of memory. */
static int alloc_batch_(const deck_t *d, loader_batch_t *b, int B, void *(*get)(size_t))
{
    b->idx = get((size_t)B * sizeof *b->idx);
    b->x = get((size_t)B * d->sample_numel * sizeof *b->x);
    if (d->regression)
        b->targets = get((size_t)B * (size_t)d->targets * sizeof *b->targets);
    else
        b->labels = get((size_t)B * sizeof *b->labels);
    return b->idx && b->x && (b->targets || b->labels);
}

static void *malloc_(size_t bytes)
{
    return malloc(bytes ? bytes : 1);
}

/* n batch buffers of B samples in staging memory (o->host_alloc), a batch
 * that does not fit there in malloc'd memory (one warning); NULL when out
 * of memory. */
static loader_batch_t *alloc_batches_(const loader_opts_t *o, const deck_t *d, int n, int B)
{
    loader_batch_t *bs = ddp_calloc((size_t)n, sizeof *bs, "the batch queue");
    int ok = bs != NULL, pageable = 0;
    for (int i = 0; ok && i < n; i++) {
        loader_batch_t *b = &bs[i];
        if (o->host_alloc && o->host_free) {
            b->staged = 1;
            if (alloc_batch_(d, b, B, o->host_alloc)) continue;
            free_batch_(o, b);
            memset(b, 0, sizeof *b);
            pageable++;
        }
        ok = alloc_batch_(d, b, B, malloc_);
    }
    if (ok && pageable)
        log_warn("loader: %d of %d batch buffers are in pageable memory (no pinned host memory "
                 "left): their uploads to the device are slower; a lower --prefetch or --batch "
                 "needs less",
                 pageable, n);
    if (ok) return bs;
    if (bs) ddp_fail(DDP_ERR_NOMEM, "out of memory for a batch of the loader (%d samples)", B);
    free_batches_(o, bs, n);
    return NULL;
}

static void free_(loader_t *l)
{
    free_batches_(&l->o, l->slots, l->nslots);
    free_batches_(&l->o, l->kept, l->o.replay);
    free(l->free_list);
    free(l->ready);
    free(l->aug_tmp);
    free(l);
}

ddp_status_t loader_start(loader_t **out, deck_t *d, const sampler_t *s, const loader_opts_t *o)
{
    *out = NULL;
    if (o->prefetch < 1)
        return ddp_fail(DDP_ERR_USAGE, "--prefetch %d: read at least 1 batch ahead", o->prefetch);
    if (s->n != d->n)
        return ddp_fail(DDP_ERR_INTERNAL,
                        "loader: the sampler covers %lld samples, the deck "
                        "holds %lld",
                        (long long)s->n, (long long)d->n);
    loader_t *l = ddp_calloc(1, sizeof *l, "the loader");
    if (!l) return DDP_ERR_NOMEM;
    l->d = d;
    l->s = *s;
    l->o = *o;
    l->o.augment = NULL; /* parsed below; the caller's string need not outlive us */
    ddp_status_t st = augment_parse(o->augment, d->shape, &l->aug);
    if (st != DDP_OK) {
        free_(l);
        return st;
    }
    int B = s->batch;
    size_t numel = d->sample_numel;
    l->nslots = o->prefetch + 1;
    l->slots = alloc_batches_(&l->o, d, l->nslots, B);
    /* the kept batches are copied from, never uploaded: plain memory */
    loader_opts_t plain = l->o;
    plain.host_alloc = NULL;
    plain.host_free = NULL;
    if (o->replay > 0) l->kept = alloc_batches_(&plain, d, o->replay, B);
    l->free_list = ddp_calloc((size_t)l->nslots, sizeof *l->free_list, "the batch queue");
    l->ready = ddp_calloc((size_t)l->nslots, sizeof *l->ready, "the batch queue");
    l->aug_tmp = ddp_malloc(numel * sizeof *l->aug_tmp, "augmentation");
    int ok = l->slots && (o->replay <= 0 || l->kept) && l->free_list && l->ready && l->aug_tmp;
    for (int i = 0; ok && i < l->nslots; i++) l->free_list[l->nfree++] = i;
    if (!ok) {
        free_(l);
        return DDP_ERR_NOMEM;
    }
    atomic_init(&l->posted, 0);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_ready, NULL);
    pthread_cond_init(&l->cv_free, NULL);
    if (pthread_create(&l->thread, NULL, thread_main_, l) != 0) {
        pthread_mutex_destroy(&l->mu);
        pthread_cond_destroy(&l->cv_ready);
        pthread_cond_destroy(&l->cv_free);
        free_(l);
        return ddp_fail(DDP_ERR_NOMEM, "cannot start the loader thread (too many threads?)");
    }
    l->started = 1;
    *out = l;
    return DDP_OK;
}

ddp_status_t loader_next(loader_t *l, loader_batch_t **b)
{
    *b = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->rcount == 0 && !l->done && !l->err) {
        double t0 = clock_seconds();
        unsigned seen = atomic_load_explicit(&l->posted, memory_order_relaxed);
        pthread_mutex_unlock(&l->mu);
        for (int i = 1; atomic_load_explicit(&l->posted, memory_order_acquire) == seen; i++) {
            cpu_relax_();
            if (i % 64 == 0 && clock_seconds() - t0 > SPIN_S) break;
        }
        pthread_mutex_lock(&l->mu);
        while (l->rcount == 0 && !l->done && !l->err) pthread_cond_wait(&l->cv_ready, &l->mu);
        l->wait_s += clock_seconds() - t0;
    }
    ddp_status_t s = DDP_OK;
    if (l->rcount > 0) {
        *b = l->ready[l->rhead];
        l->rhead = (l->rhead + 1) % l->nslots;
        l->rcount--;
        pthread_cond_signal(&l->cv_free);
    } else if (l->err) {
        s = ddp_fail(l->err, "%s", l->errmsg);
    } else {
        s = ddp_fail(DDP_ERR_INTERNAL, "loader_next: no batch left (past the last epoch)");
    }
    pthread_mutex_unlock(&l->mu);
    return s;
}

void loader_release(loader_t *l, loader_batch_t *b)
{
    if (!b) return;
    pthread_mutex_lock(&l->mu);
    l->free_list[l->nfree++] = (int)(b - l->slots);
    pthread_cond_signal(&l->cv_free);
    pthread_mutex_unlock(&l->mu);
}

double loader_wait_seconds(const loader_t *l)
{
    loader_t *m = (loader_t *)l;
    pthread_mutex_lock(&m->mu);
    double w = m->wait_s;
    pthread_mutex_unlock(&m->mu);
    return w;
}

int loader_ready_peak(const loader_t *l)
{
    loader_t *m = (loader_t *)l;
    pthread_mutex_lock(&m->mu);
    int p = m->ready_peak;
    pthread_mutex_unlock(&m->mu);
    return p;
}

void loader_stop(loader_t *l)
{
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv_free);
    pthread_cond_broadcast(&l->cv_ready);
    pthread_mutex_unlock(&l->mu);
    if (l->started) pthread_join(l->thread, NULL);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv_ready);
    pthread_cond_destroy(&l->cv_free);
    free_(l);
}
