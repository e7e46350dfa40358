/* step.h -- one optimizer step of data-parallel training, and the state
 * of the run it belongs to (trainer_t): the step's rooms below it (data,
 * model, compute, comm, the reducer and the optimizer) and what the rooms
 * above it read (evaluation, metrics, checkpoints, the guards, start-up,
 * the loop: run.h lists them).
 *
 * A step: K micro-batches from the loader, each uploaded to the compute
 * backend's memory, forward, the loss, backward; the last micro-batch's
 * backward overlaps the bucketed all-reduce of the gradients (reducer.h),
 * and the optimizer runs bucket by bucket as each bucket becomes final
 * (trainer_apply_range, the hook the reducer is given) or, with clipping,
 * --on-nonfinite skip or --update step, after the last one.  Whatever watches a step from
 * above (the non-finite guard) is handed to it as a step_watch_t.
 *
 * Planes: `ctl` (control.h) carries agreement, the start-up checks and
 * broadcast, metrics, evaluation sums, replica hashes and checkpoint
 * agreement, on host memory; `comm` (comm.h) carries only what lives in
 * compute memory and must be summed: gradient buckets, SyncBatchNorm
 * statistics and the --no-sync-bn average of the running statistics, on
 * the selected backend.  A collective's descriptor names its plane
 * (activity_plane_of); --debug-collectives stops a job whose collective
 * runs on the other plane.
 *
 * Memory: everything a step computes on lives in the compute backend's
 * memory, allocated by it; the comm backend is told of (comm_register) the
 * buffers it moves.  The one exception is comm_memory below.  The host
 * touches compute memory only through upload/download, ordered by events
 * (compute.h, "Ordering").
 */
#ifndef DDP_STEP_H
#define DDP_STEP_H

#include <stddef.h>
#include <stdint.h>

#include "comm.h"
#include "compute.h"
#include "config.h"
#include "control.h"
#include "deck.h"
#include "loader.h"
#include "loss.h"
#include "model.h"
#include "optim.h"
#include "reducer.h"
#include "sampler.h"
#include "zero.h"

/* One batch in the compute backend's memory, sized for --batch samples.
 * The trainer has TRAINER_DEVICE_BATCHES of them and uploads each
 * micro-batch (training and evaluation) into the next in turn, so that on a
 * GPU its copy overlaps the compute still queued on the one before (compute.h,
 * "Ordering": upload_async's reuse event). */
#define TRAINER_DEVICE_BATCHES 2
typedef struct device_batch {
    float *x;            /* [batch, sample numel] */
    int32_t *labels;     /* [batch] (classification) */
    float *targets;      /* [batch, targets] (regression) */
    int64_t *sample_idx; /* [batch] global sample indices (dropout keys) */
} device_batch_t;

/* The same on the host, for evaluation reads. */
typedef struct host_batch {
    float *x;
    int32_t *labels;
    float *targets;
} host_batch_t;

typedef struct trainer {
    const ddp_config_t *cfg;
    control_t *ctl; /* control plane */
    comm_t comm;    /* gradient plane */
    int have_comm;
    int comm_thread;            /* the comm backend's progress thread runs (--comm-thread) */
    char comm_thread_why[256];  /* why not, where it was asked for and cannot run */
    int comm_thread_spare;      /* a core to spare for it (--comm-thread auto) */
    const compute_ops_t *compute;
    char device[128]; /* the backend's description, for the start-up table */
    /* device memory: every rank's host and description (the start-up table) */
    char (*rank_devices)[256];
    /* parameters, gradients and optimizer state are the comm backend's
     * node-shared memory (host compute memory and COMM_CAP_NODE_SHARED_MEMORY:
     * the fused all-reduce + optimizer), not the compute backend's */
    int comm_memory;
    int registered_model;         /* BN buffers registered with the comm backend */
    compute_event_t *upload_done; /* recorded after trainer_upload's copies */
    deck_t train, val;
    int have_train, have_val;
    loss_t loss;
    int sync_bn; /* SyncBatchNorm in use */
    model_t model;
    int have_model;
    optim_t opt;
    zero_plan_t zero; /* --zero: this rank's shard (zero.h); its plan describes the blocks at stage 0 too */
    reducer_t *reducer;
    int sync; /* steps all-reduce their gradients: --sync (--diagnose turns it off for a mode) */
    sampler_t sampler;
    loader_t *loader;
    int64_t micro_per_epoch, steps_per_epoch, total_steps;
    /* where the loop starts (step 0, or where --resume left off) and ends */
    int64_t first_step, first_epoch, first_step_in_epoch, end_epoch;
    device_batch_t batches[TRAINER_DEVICE_BATCHES];
    /* batch_free[k]: recorded after the last op that used batches[k] (when
     * the trainer turns to the next one): the reuse event of its uploads */
    compute_event_t *batch_free[TRAINER_DEVICE_BATCHES];
    uint64_t batch_uploads[TRAINER_DEVICE_BATCHES]; /* uploads into each so far */
    int cur;               /* the batch the ops compute on */
    device_batch_t *batch; /* &batches[cur] */
    /* the next step's first micro-batch (trainer_prefetch): read, its upload
     * into the batch after cur started; NULL when none */
    loader_batch_t *prefetched;
    double *loss_sums;     /* device [2]: the loss sum and argmax hits since last read */
    host_batch_t eval_host;
    size_t data_bytes; /* input memory per rank (for the start-up table) */
    /* the start-up memory check: address space a rank will take, its limit
     * (MEMLIMIT_NONE: unlimited) */
    uint64_t mem_need_address, mem_limit_address;
    /* the bucket cap in use (--bucket-cap-mb, or auto's choice) and the
     * link between the nodes it was chosen from (GB/s each way, measured at
     * start-up; 0: one node or not measured) */
    double bucket_cap_mb, link_gbps;
    /* device compute memory: its free and total bytes at the check (0: host) */
    size_t device_free, device_total;
} trainer_t;

/* This rank's part of a step, for the loop and its reports. */
typedef struct step_result {
    int64_t samples; /* this rank's samples in the step */
    int skipped;     /* --on-nonfinite skip dropped its update (nonfinite.h) */
    double grad_norm; /* global gradient L2 norm (computed with clipping only; NaN otherwise) */
} step_result_t;

/* What watches a step from above, called at fixed points of trainer_step
 * (the non-finite guard, nonfinite.h; step: 1-based, as logged).  NULL
 * members: nothing to call. */
typedef struct step_watch {
    void *arg;
    /* before the first micro-batch */
    void (*begin)(void *arg, trainer_t *t);
    /* micro-batch j (n samples, global indices idx) is in t->batch */
    void (*batch)(void *arg, trainer_t *t, int64_t step, int j, int n, const int64_t *idx);
    /* micro-batch j's loss was added to t->loss_sums */
    void (*loss)(void *arg, trainer_t *t, int j);
    /* the reduced gradients are final: 0 drops the update (weights and
     * optimizer state untouched), 1 applies it.  Set, the optimizer waits
     * for every bucket instead of running bucket by bucket (the fused
     * per-bucket update would have changed the weights before the last
     * gradient was known): optim_can_apply_per_bucket says no then. */
    int (*update_ok)(void *arg, trainer_t *t);
} step_watch_t;

/* One optimizer step (0-based global_step; step_in_epoch of epoch): K
 * micro-batches from the loader, the last one all-reduced when t->sync.
 * The training loop and --diagnose (diagnose.c) run their steps with it.
 * watch: NULL for none. */
ddp_status_t trainer_step(trainer_t *t, const step_watch_t *watch, int64_t epoch,
                          int64_t step_in_epoch, int64_t global_step, step_result_t *res);
/* The optimizer runs bucket by bucket (the reducer gets trainer_apply_range),
 * not after the step: not with clipping, --on-nonfinite skip or --update
 * step. */
int trainer_update_per_bucket(const trainer_t *t);
/* The optimizer over [offset, offset + count) of the trainable range: the
 * update hook the reducer runs per bucket (reducer_apply_t.fn; arg: the
 * trainer_t). */
void trainer_apply_range(void *arg, size_t offset, size_t count);
/* A failed compute op or allocation: the backend's own message (naming the
 * call, compute->check) when it has one, else `fallback`. */
ddp_status_t trainer_compute_failure(const trainer_t *t, ddp_status_t fallback);
/* compute->check (when the backend has one): a device failure since the
 * last check ends the job with the backend's line (it names the call).
 * After every step and before results are reported. */
void trainer_check_device(trainer_t *t);
/* This epoch's micro-batches left after the last whole step (an incomplete
 * accumulation) are read and dropped, so the loader stays in step. */
void trainer_drop_rest_of_epoch(trainer_t *t, int64_t used_micro);
/* n samples of a host batch to the next device batch in turn
 * (t->batch after it), asynchronously: the copy waits only for the ops that
 * used that device batch before (its batch_free event, recorded here for the
 * batch left), not for those on the other; the host batch must stay as it
 * is, and nothing may compute on t->batch, until trainer_upload_wait, which
 * waits for the copies only (compute.h, "Ordering").  After the call no op
 * may use the device batch left until it comes round again. */
void trainer_upload(trainer_t *t, int n, const float *x, const int32_t *labels,
                    const float *targets, const int64_t *sample_idx);
void trainer_upload_wait(trainer_t *t);
/* Micro-batch `micro` of `epoch` (the first of the next step, in this epoch)
 * from the loader, uploaded into the device batch after t->batch now; the
 * next trainer_step computes on it instead of reading the loader (and turns
 * to it, waits for its upload and hands it back then).  The loop calls it
 * after a step's work is queued and before it waits for the step, so on a
 * GPU the copy overlaps that step's compute. */
ddp_status_t trainer_prefetch(trainer_t *t, int64_t epoch, int64_t micro);
/* With local BatchNorm statistics (--no-sync-bn) the running statistics
 * differ between ranks: average them, so every rank evaluates and saves the
 * same model.  Nothing to do otherwise. */
ddp_status_t trainer_average_bn_buffers(trainer_t *t);

#endif
