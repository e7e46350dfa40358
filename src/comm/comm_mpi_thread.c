/* comm_mpi_thread.c -- the MPI comm backend's progress thread and lock
 * (comm_mpi_thread.h): between nodes a bucket's ring advances while the
 * main thread computes the earlier layers, instead of only at the comm
 * calls between layers.  bench/findings.md has the measurements behind the
 * polling interval. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm_mpi_thread.h"

struct mpi_thread {
    pthread_t th;
    pthread_mutex_t lock; /* the in-flight list and every algorithm's state */
    pthread_cond_t work;  /* a collective with messages was linked, or stop */
    int sleep_us;
    int stop;             /* under lock: end the thread */
    atomic_int aborted;   /* mpi_thread_abort: make no more MPI calls */
    ddp_status_t err;     /* the thread's first failure */
    int err_reported;
    char msg[1024];
    atomic_uint_least64_t passes;
    atomic_uint_least64_t sleeps; /* times it went to wait for work */
    comm_t *c;
};

static _Thread_local int on_thread_;

int mpi_thread_self(void)
{
    return on_thread_;
}

static mpi_thread_t *thread_of_(const comm_t *c)
{
    const mpi_impl_t *m = c->impl;
    return m ? m->thread : NULL;
}

/* A collective the thread drives: one with messages (every algorithm but
 * shared memory, whose work is the ranks' own copies and sums), not done,
 * not failed. */
static int has_messages_(const mpi_impl_t *m)
{
    for (const comm_req_t *q = m->head; q; q = q->next)
        if (q->algo != &mpi_algo_shm && !q->done && !q->err) return 1;
    return 0;
}

static void *thread_main_(void *arg)
{
    mpi_thread_t *t = arg;
    comm_t *c = t->c;
    mpi_impl_t *m = c->impl;
    on_thread_ = 1;
    pthread_mutex_lock(&t->lock);
    while (!t->stop) {
        if (atomic_load(&t->aborted) || t->err || !has_messages_(m)) {
            atomic_fetch_add(&t->sleeps, 1);
            pthread_cond_wait(&t->work, &t->lock);
            continue;
        }
        for (comm_req_t *q = m->head; q && !t->err; q = q->next) {
            if (q->algo == &mpi_algo_shm || q->done || q->err) continue;
            ddp_status_t s = q->algo->progress(c, q);
            if (s != DDP_OK) {
                q->err = t->err = s;
                snprintf(t->msg, sizeof t->msg, "%s", ddp_error_message());
            }
        }
        atomic_fetch_add(&t->passes, 1);
        pthread_mutex_unlock(&t->lock);
        if (t->sleep_us > 0) {
            struct timespec ts = {t->sleep_us / 1000000, (long)(t->sleep_us % 1000000) * 1000L};
            nanosleep(&ts, NULL);
        } else {
            sched_yield();
        }
        pthread_mutex_lock(&t->lock);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

ddp_status_t mpi_thread_start(comm_t *c, int sleep_us)
{
    mpi_impl_t *m = c->impl;
    if (m->thread) return DDP_OK;
    mpi_thread_t *t = calloc(1, sizeof *t);
    if (!t) return ddp_fail(DDP_ERR_NOMEM, "out of memory starting the comm progress thread");
    t->c = c;
    t->sleep_us = sleep_us;
    pthread_mutex_init(&t->lock, NULL);
    pthread_cond_init(&t->work, NULL);
    int rc = pthread_create(&t->th, NULL, thread_main_, t);
    if (rc != 0) {
        pthread_cond_destroy(&t->work);
        pthread_mutex_destroy(&t->lock);
        free(t);
        return ddp_fail(DDP_ERR_INTERNAL,
                        "cannot start the comm progress thread: %s; run with --comm-thread off",
                        strerror(rc));
    }
    pthread_setname_np(t->th, "ddp-comm");
    m->thread = t;
    return DDP_OK;
}

void mpi_thread_stop(comm_t *c)
{
    mpi_impl_t *m = c->impl;
    mpi_thread_t *t = m ? m->thread : NULL;
    if (!t) return;
    pthread_mutex_lock(&t->lock);
    t->stop = 1;
    pthread_cond_broadcast(&t->work);
    pthread_mutex_unlock(&t->lock);
    pthread_join(t->th, NULL);
    pthread_cond_destroy(&t->work);
    pthread_mutex_destroy(&t->lock);
    m->thread = NULL;
    free(t);
}

void mpi_thread_abort(comm_t *c)
{
    mpi_thread_t *t = thread_of_(c);
    if (!t) return;
    /* the main thread may hold the lock (or be stuck holding it): no lock
     * here; the thread sees the flag before its next pass */
    atomic_store(&t->aborted, 1);
    pthread_cond_broadcast(&t->work);
}

int mpi_thread_running(const comm_t *c)
{
    return thread_of_(c) != NULL;
}

void mpi_lock(comm_t *c)
{
    mpi_thread_t *t = thread_of_(c);
    if (t) pthread_mutex_lock(&t->lock);
}

void mpi_unlock(comm_t *c)
{
    mpi_thread_t *t = thread_of_(c);
    if (t) pthread_mutex_unlock(&t->lock);
}

void mpi_thread_wake(comm_t *c)
{
    mpi_thread_t *t = thread_of_(c);
    if (t && has_messages_(c->impl)) pthread_cond_signal(&t->work);
}

ddp_status_t mpi_thread_error(comm_t *c)
{
    mpi_thread_t *t = thread_of_(c);
    if (!t || !t->err || t->err_reported) return DDP_OK;
    t->err_reported = 1;
    return ddp_fail(t->err, "%s (in the comm progress thread)", t->msg);
}

void mpi_thread_usage(const comm_t *c, double *cpu_s, uint64_t *passes)
{
    mpi_thread_t *t = thread_of_(c);
    *cpu_s = 0;
    *passes = 0;
    if (!t) return;
    clockid_t id;
    struct timespec ts;
    if (pthread_getcpuclockid(t->th, &id) == 0 && clock_gettime(id, &ts) == 0)
        *cpu_s = (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
    *passes = atomic_load(&t->passes);
}

uint64_t mpi_thread_sleeps(const comm_t *c)
{
    mpi_thread_t *t = thread_of_(c);
    return t ? atomic_load(&t->sleeps) : 0;
}
