/* loader.h -- the streaming loader: a thread that reads batches ahead.
 *
 * The loader thread walks the sampler (epochs x steps from a start cursor),
 * reads each batch with deck_read (coalesced HDF5 reads), applies
 * augmentation, and queues it; at most `prefetch` batches are held, so
 * memory is bounded by prefetch x batch, never by N.  The loader calls HDF5
 * from this thread only, under h5util's lock (evaluation and saving weights
 * take the same lock).  A read failure is handed to the consumer with the
 * batch.
 *
 * Exactly: prefetch + 1 batch buffers are allocated at start (the consumer
 * holds one while up to `prefetch` wait in the queue) and none after.  A
 * rank that runs short in the last step of an epoch (no drop_last) gets a
 * batch with n < batch, possibly 0, so it still takes part in the step.
 * The augmentation seed is the sampler's seed.  Batches come in order
 * (epoch, step); an error is returned by loader_next after the batches read
 * before it, and again by every later call.  loader_stop may be called at
 * any time (batches still held by the consumer become invalid).
 */
#ifndef DDP_LOADER_H
#define DDP_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "deck.h"
#include "sampler.h"
#include "status.h"

typedef struct loader_batch {
    int n;               /* local samples (0..batch) */
    int64_t epoch, step; /* step within the epoch */
    int64_t global_n;    /* samples in this step over all ranks */
    int64_t *idx;        /* [batch] global sample indices */
    float *x;            /* [batch, sample_numel] normalised, augmented */
    int32_t *labels;     /* [batch] (classification) or NULL */
    float *targets;      /* [batch, k] (regression) or NULL */
    int staged;          /* the loader's: the buffers are host_alloc's (loader_opts_t) */
} loader_batch_t;

typedef struct loader_opts {
    int prefetch;                    /* batches read ahead (>= 1) */
    const char *augment;             /* "hflip,crop:4" or "" */
    int64_t first_epoch, first_step; /* start cursor */
    int64_t epochs;                  /* run through epoch first_epoch + epochs - 1 */
    /* > 0: input from memory (--diagnose): the first `replay` batches are
     * read from the deck once and kept (replay more batch buffers); every
     * later batch takes its samples' count and indices from the sampler as
     * usual and its values from the kept batches in turn (row i of kept
     * batch step % replay, cycling its rows when it is shorter), so no
     * more I/O is done */
    int replay;
    /* Where the batch buffers (x, labels, targets, idx) live: staging
     * memory the device copies from fast (compute.h, host_alloc: pinned on
     * CUDA) when host_alloc is set, freed with host_free.  A batch buffer it
     * cannot give (NULL) is taken from malloc instead, with one warning;
     * NULL: malloc for all (the CPU backend). */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
} loader_opts_t;

typedef struct loader loader_t;

/* Validate options (augment spec against the data shape) and start the thread. */
ddp_status_t loader_start(loader_t **l, deck_t *d, const sampler_t *s, const loader_opts_t *o);
/* The next batch in order (blocks until it is read).  Returns the loader
 * thread's error if reading it failed, or DDP_ERR_INTERNAL past the end. */
ddp_status_t loader_next(loader_t *l, loader_batch_t **b);
/* Hand a batch's memory back to the loader. */
void loader_release(loader_t *l, loader_batch_t *b);
/* Seconds the consumer spent waiting in loader_next so far (the data
 * stall: take differences per step or per logging interval). */
double loader_wait_seconds(const loader_t *l);
/* Most batches that were ever queued at once (<= prefetch; for tests). */
int loader_ready_peak(const loader_t *l);
void loader_stop(loader_t *l);

#endif
