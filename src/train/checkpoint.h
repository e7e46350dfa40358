/* checkpoint.h -- what the trainer writes to disk and resumes from.
 *
 * --save writes the final weights.  --ckpt-dir DIR gets checkpoints:
 * DIR/ckpt_<step>.h5 (the step zero-padded to 8 digits, so names sort).
 * Rank 0 builds the file as one HDF5 image in memory while every rank waits
 * (the state of one step boundary), then a thread of rank 0 writes it
 * through atomicfile_write (temporary name, fsync, rename, fsync of the
 * directory) while training goes on.  One write is in flight at most; its
 * result is agreed by every rank at a later step boundary
 * (checkpoint_poll, checkpoint_settle), before the next checkpoint and
 * before the job ends, so a failed write stops every rank the same way.
 * --keep K removes older ones of this run (run_id) only after the new one
 * is complete; other runs' checkpoints are never removed.
 *
 * A checkpoint is a weights file (/model/<name>, so --init and PyTorch read
 * it) plus /optimizer/<name>/<state> (momentum_buffer; exp_avg, exp_avg_sq)
 * with the optimizer's type and step count as attributes of /optimizer,
 * per-rank BatchNorm statistics under /local_bn when they differ between
 * ranks (--no-sync-bn), and root attributes: format, format_version, step,
 * epoch, sample_in_epoch (the global sample cursor), seed, world_size,
 * batch, accum, global_batch, the data's shape, the effective configuration,
 * program_version, time, and which run and data it is of (run_id,
 * data_fingerprint, data_inputs: ckpt_identity.h).  Every dataset carries a
 * checksum attribute.  Rank 0 holds DIR/ddptrain.lock while the job runs
 * (ckpt_lock.h): one job at a time in a checkpoint directory.
 *
 * --resume auto|PATH restores all of it, so a run interrupted at step k and
 * resumed at the same world size ends with bitwise the weights of the run
 * that was not interrupted. */
#ifndef DDP_CHECKPOINT_H
#define DDP_CHECKPOINT_H

#include <stdint.h>

#include "ckpt_identity.h"
#include "ckpt_lock.h"
#include "h5util.h"
#include "status.h"
#include "step.h"
#include "train_result.h"
#include "weights.h"

#define CKPT_FORMAT         "ddptrain-checkpoint"
#define CKPT_FORMAT_VERSION 1

struct ckpt_writer;

/* Where training stands: optimizer steps taken, the epoch in progress, and
 * the global sample cursor in it (positions of the epoch's permutation that
 * were trained on, over all ranks). */
typedef struct ckpt_position {
    int64_t step, epoch, sample_in_epoch;
} ckpt_position_t;

/* What --resume found; the same on every rank once checkpoint_resume_open
 * returns. */
typedef struct ckpt_resume {
    int active;
    char path[4096];
    ckpt_position_t pos;
    int64_t optim_steps;
    int64_t world_size, batch, accum; /* at save */
    int64_t local_bn_ranks;           /* ranks of /local_bn (0: none) */
} ckpt_resume_t;

typedef struct checkpoint {
    ckpt_resume_t resume;
    /* rank 0 while resuming: the checkpoint's contents */
    weights_host_t host;
    float *optim_state[2]; /* [ntrainable] each */
    float *local_bn;       /* [local_bn_ranks x nbufs] */
    char note[4400];       /* rank 0: what resuming did, for the start-up table */
    int64_t last_step;     /* step of the newest checkpoint begun or resumed (-1: none) */
    char last_path[4200];  /* rank 0: the newest complete checkpoint ("" none) */
    /* rank 0: buffers kept from one checkpoint to the next (their pages stay
     * mapped, so building the next image is a few memory copies) */
    weights_host_t host_copy; /* other ranks: only .bufs */
    float *state_copy;
    h5_mem_image_t image;
    struct ckpt_writer *writer; /* rank 0: the background write */
    ddp_status_t failed;        /* rank 0: a background write failed (message recorded) */
    ckpt_identity_t ident;      /* rank 0: this run's id and data fingerprint */
    ckpt_lock_t lock;           /* rank 0: DIR/ddptrain.lock */
} checkpoint_t;

/* Start-up, before any data is read (local; agree on the result): the
 * --save probe, and on rank 0 a fresh run id and --ckpt-dir: created if its
 * parent exists, locked (refused when another job holds it), probed for
 * writing, cleared of temporary files an interrupted write of ours left
 * behind. */
ddp_status_t checkpoint_startup(checkpoint_t *c, trainer_t *t);
/* Collective, once the model's layout is known: the data's fingerprint
 * (with --ckpt-dir or --resume), then find (--resume auto) and read the
 * checkpoint on rank 0, validate it against the options, the data and the
 * model, and tell every rank where training resumes.  Agreed. */
ddp_status_t checkpoint_resume_open(checkpoint_t *c, trainer_t *t);
/* Rank 0: the checkpoint's model into the model (before the start-up
 * broadcast of rank 0's model). */
void checkpoint_resume_model(checkpoint_t *c, trainer_t *t);
/* Collective, once the optimizer exists: its state and step count, and
 * per-rank BatchNorm statistics, to every rank.  Frees the host copies. */
ddp_status_t checkpoint_resume_state(checkpoint_t *c, trainer_t *t);
void checkpoint_free(checkpoint_t *c);

/* Collective: the state at position pos becomes DIR/ckpt_<step>.h5.  Waits
 * for the write in flight first; returns once the new file is built in
 * memory (agreed), its write goes on in the background. */
ddp_status_t checkpoint_write(checkpoint_t *c, trainer_t *t, const ckpt_position_t *pos);
/* Local, every step boundary: rank 0 returns 1 when the background write
 * finished and failed (then every rank must call checkpoint_settle);
 * reports a finished write's line.  0 on the other ranks. */
int checkpoint_poll(checkpoint_t *c, trainer_t *t);
/* Collective: wait for the write in flight; its agreed status. */
ddp_status_t checkpoint_settle(checkpoint_t *c, trainer_t *t);

/* --save after training: every rank averages local BN statistics if any,
 * rank 0 writes; the result is agreed. */
ddp_status_t checkpoint_save_final(checkpoint_t *c, trainer_t *t, const train_result_t *res);

#endif
