/* activity.h -- what this rank is doing right now, for the watchdog.
 *
 * One record per process, written by the main thread at every phase change
 * and at the start of, and the wait for, every collective of either plane;
 * read by the watchdog thread (watchdog.h) without the main thread's help,
 * so a rank stuck in a collective, or in a file system, can still be named
 * with what it was last doing.  Writes are a few stores (a sequence lock):
 * nothing measurable per step.
 *
 * Collectives of both planes get one job-wide number (1, 2, ...): every rank
 * starts the same collectives in the same program order, so the same number
 * means the same collective on every rank -- unless the ranks desynchronised,
 * which the watchdog and --debug-collectives detect from the descriptors.
 */
#ifndef DDP_ACTIVITY_H
#define DDP_ACTIVITY_H

#include <stddef.h>
#include <stdint.h>

#include "collective.h"

typedef enum activity_phase {
    PHASE_STARTUP,    /* reading the data, building the model, start-up checks */
    PHASE_DATA_WAIT,  /* waiting for the loader's next batch */
    PHASE_FORWARD,    /* forward pass and loss */
    PHASE_BACKWARD,   /* backward pass (bucket all-reduces overlap it) */
    PHASE_OPTIMIZER,  /* the last buckets and the optimizer step */
    PHASE_STEP_END,   /* logging, replica check, stop agreement */
    PHASE_EVALUATION, /* evaluation on /val */
    PHASE_CHECKPOINT, /* writing or agreeing on a checkpoint */
    PHASE_SAVE,       /* the final --save */
    PHASE_FINISHING,  /* summary and teardown */
    PHASE_ABORTING,   /* the job is being ended (control_abort): nothing more to watch */
    PHASE_COUNT
} activity_phase_t;

typedef enum activity_plane { PLANE_CONTROL, PLANE_GRADIENT } activity_plane_t;

/* The plane a collective belongs to, by the name in its descriptor
 * (comm_desc_t.what): the gradient plane (comm.h) moves what lives in
 * compute memory and is summed -- gradient buckets, SyncBatchNorm
 * statistics, the --no-sync-bn average, the MPI backend's own start-up
 * check; the control plane (control.h) everything else.  -1 for a name not
 * in the table (activity.c): --debug-collectives refuses both a collective
 * on the wrong plane and a name it does not know. */
int activity_plane_of(const char *what);
const char *activity_plane_name(int plane);

/* A collective as the watchdog reports it (fixed size: it travels between
 * ranks as is). */
typedef struct activity_coll {
    uint64_t number; /* job-wide collective number; 0: none */
    uint64_t bytes;  /* payload bytes of this rank */
    int64_t step;    /* training step (-1 outside the loop) */
    int32_t index;   /* bucket or layer (-1: none) */
    int32_t plane;   /* activity_plane_t */
    char what[32];   /* comm_desc_t.what */
    char op[16];     /* "all-reduce", "broadcast", "all-gather", "barrier" */
} activity_coll_t;

typedef struct activity_record {
    int32_t phase;     /* activity_phase_t */
    int32_t on_device; /* the wait for `blocked` is a wait for the device */
    int64_t step;            /* the step being trained (1-based, as logged); 0 before the first */
    activity_coll_t last;    /* the collective started most recently */
    activity_coll_t blocked; /* the collective being waited for (number 0: none) */
    double phase_since;      /* clock_seconds() of the phase change */
    double blocked_since;    /* clock_seconds() when the wait began */
    double device_since;     /* clock_seconds() when a wait for the device with no collective
                              * pending began (0: none) */
} activity_record_t;

/* The process starts (phase start-up from now). */
void activity_begin(void);
void activity_phase(activity_phase_t p);
void activity_step(int64_t step);
/* A collective starts: its job-wide number.  Runs the start hook first (see
 * below).  op: "all-reduce", ...; bytes: this rank's payload. */
uint64_t activity_collective_start(const comm_desc_t *d, activity_plane_t plane, const char *op,
                                   uint64_t bytes);
/* The main thread waits for collective `number` (described as c, or as the
 * last one started when c is NULL) / is done waiting. */
void activity_block(uint64_t number, const activity_coll_t *c);
void activity_unblock(void);
/* The main thread waits for the device (a GPU backend's host waits: a
 * download, a synchronisation, an event).  A collective queued on a device
 * stream (NCCL) returns at once and is waited for only here, so while a
 * gradient-plane collective started since the last device wait is not
 * known complete, the record shows the rank waiting in it: the watchdog
 * then names a collective that hangs on the GPU.  Otherwise the record
 * shows the wait itself (device_since): the watchdog names a rank whose GPU
 * does not finish its work (a kernel that never ends, a device fault) with
 * no collective involved.  These waits are not collective waits for
 * activity_wait_seconds (they include compute). */
void activity_device_wait_begin(void);
void activity_device_wait_end(void);
/* Seconds the main thread has spent waiting in collectives of either plane
 * (gradient buckets, SyncBatchNorm, control), the waits above summed: what
 * a step lost to other ranks (metrics.h: compute = step - waits). */
double activity_wait_seconds(void);
/* Seconds the main thread has spent in each phase since the process
 * started, the current phase up to now included (metrics.h splits the step
 * time with differences of these).  Main thread only. */
void activity_phase_seconds(double out[PHASE_COUNT]);
/* The collective started most recently (to block on it). */
activity_coll_t activity_last(void);

/* A consistent copy of the record (any thread). */
void activity_snapshot(activity_record_t *out);

/* Called before every collective starts, in the main thread (the
 * --debug-collectives check).  NULL: none. */
typedef void (*activity_hook_t)(void *arg, const activity_coll_t *c);
void activity_set_start_hook(activity_hook_t fn, void *arg);

/* Profiler ranges for the phases (a compute backend's range_start and
 * range_end, compute.h; NULL, NULL: none): from now on the current phase is
 * an open range named "ddptrain PHASE" ("ddptrain forward"), ended when the
 * phase changes; the call opens the current phase's range, and the one
 * with NULL ends the open range.  Main thread only. */
void activity_trace(uint64_t (*start)(const char *name), void (*end)(uint64_t id));

const char *activity_phase_name(int phase);
/* "gradient-bucket 2 all-reduce (1.1 MB) at step 12" */
void activity_coll_format(const activity_coll_t *c, char *buf, size_t n);

#endif
