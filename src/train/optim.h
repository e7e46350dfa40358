/* optim.h -- optimizers and learning-rate schedules over the flat buffers.
 *
 * The optimizer state (SGD momentum, AdamW moments) has the layout of the
 * parameter buffer, so one step is one loop over the trainable range
 * [0, ntrainable); it runs locally on every rank on identical inputs.
 * Under --zero 1|2 (zero.h) a rank keeps the state of its shard only, in
 * the shard's order, and updates only the blocks it owns. */
#ifndef DDP_OPTIM_H
#define DDP_OPTIM_H

#include <stdint.h>

#include "config.h"
#include "model.h"
#include "status.h"
#include "zero.h"

/* What an optimizer is (from the options; config.h names the kinds). */
typedef struct optim_opts {
    optimizer_kind_t kind;    /* --optimizer */
    schedule_kind_t schedule; /* --lr-schedule */
    double lr, momentum, weight_decay, beta1, beta2, eps;
    int nesterov;
    double clip_grad_norm; /* 0: no clipping */
    double lr_gamma;       /* step schedule: factor every lr_step_size steps */
    int64_t warmup_steps, lr_step_size;
    int64_t total_steps; /* of the run (cosine schedule) */
    /* --on-nonfinite skip: the step runs after every gradient is final and
     * checked, never bucket by bucket inside the all-reduce */
    int whole_step;
} optim_opts_t;

typedef struct optim {
    const compute_ops_t *compute;
    int kind;     /* optimizer_kind_t */
    int schedule; /* schedule_kind_t */
    double lr, momentum, weight_decay, beta1, beta2, eps, clip, lr_gamma;
    int nesterov;
    int whole_step; /* optim_opts_t.whole_step */
    int64_t warmup, step_size, total_steps;
    size_t count;       /* trainable floats */
    const zero_plan_t *zero; /* sharded (zero_sharded): the state holds this rank's shard */
    size_t state_count;      /* floats per state buffer: count, or the shard's */
    ddp_status_t error;      /* sticky: an optim_apply range outside the shard (a bug) */
    float *state[2];    /* SGD: momentum buffer; AdamW: m, v (device) */
    model_mem_t mem;    /* where the state came from (alloc == NULL: backend) */
    int64_t step_count; /* optimizer steps taken (begun) */
    float cur_lr;       /* learning rate of the step begun last */
} optim_t;

/* The options of a run, as the optimizer takes them. */
optim_opts_t optim_opts_from_config(const ddp_config_t *cfg, int64_t total_steps);

/* The state buffers come from `mem` when given (the comm backend's memory,
 * so an all-reduce can update them in place), else from the backend.
 * zero: the shard plan (kept, not copied; NULL or not sharded: the whole
 * trainable range on this rank). */
ddp_status_t optim_init(optim_t *o, const optim_opts_t *opts, const model_t *m,
                        const model_mem_t *mem, const zero_plan_t *zero);
void optim_free(optim_t *o);
/* The names of the state buffers an optimizer of this kind keeps, in the
 * order of optim_t.state (PyTorch's names: momentum_buffer; exp_avg,
 * exp_avg_sq): returns how many (0..2). */
int optim_state_names(optimizer_kind_t kind, double momentum, const char **names);
/* Bytes of optimizer state (for the start-up table). */
size_t optim_state_bytes(const optim_t *o);
/* Learning rate of step `step` (0-based), after warm-up and schedule. */
double optim_lr(const optim_t *o, int64_t step);
/* Clip (if configured) to the global gradient norm `norm` (zero_grad_norm;
 * read only with clipping), then update the parameters from the gradients:
 * every trainable element, or when sharded the blocks this rank owns. */
ddp_status_t optim_step(optim_t *o, model_t *m, double norm);

/* The same step in pieces, so each gradient bucket is applied as soon as it
 * is final (while its gradients are still in cache): optim_begin once per
 * step, then optim_apply over ranges that together cover [0, ntrainable)
 * exactly once.  Only without clipping and without --on-nonfinite skip
 * (both need every gradient first). */
int optim_can_apply_per_bucket(const optim_t *o);
void optim_begin(optim_t *o);
void optim_apply(optim_t *o, model_t *m, size_t offset, size_t count);
/* The buffers optim_apply writes (parameters, then the state), for a
 * collective that copies them: returns how many (<= 3). */
int optim_outputs(const optim_t *o, const model_t *m, float **out);

#endif
