/* optim.c -- SGD/AdamW steps, gradient clipping and the lr schedules. */
#include "optim.h"

#include <math.h>
#include <string.h>

optim_opts_t optim_opts_from_config(const ddp_config_t *cfg, int64_t total_steps)
{
    return (optim_opts_t){
        .kind = (optimizer_kind_t)cfg->optimizer,
        .schedule = (schedule_kind_t)cfg->lr_schedule,
        .lr = cfg->lr,
        .momentum = cfg->momentum,
        .weight_decay = cfg->weight_decay,
        .beta1 = cfg->beta1,
        .beta2 = cfg->beta2,
        .eps = cfg->eps,
        .nesterov = cfg->nesterov,
        .clip_grad_norm = cfg->clip_grad_norm,
        .lr_gamma = cfg->lr_gamma,
        .warmup_steps = cfg->warmup_steps,
        .lr_step_size = cfg->lr_step_size,
        .total_steps = total_steps,
        .whole_step = cfg->on_nonfinite == NONFINITE_SKIP,
    };
}

ddp_status_t optim_init(optim_t *o, const optim_opts_t *opts, const model_t *m,
                        const model_mem_t *mem, const zero_plan_t *zero)
{
    memset(o, 0, sizeof *o);
    o->compute = m->compute;
    o->kind = opts->kind;
    o->schedule = opts->schedule;
    o->lr = opts->lr;
    o->momentum = opts->momentum;
    o->nesterov = opts->nesterov;
    o->weight_decay = opts->weight_decay;
    o->beta1 = opts->beta1;
    o->beta2 = opts->beta2;
    o->eps = opts->eps;
    o->clip = opts->clip_grad_norm;
    o->lr_gamma = opts->lr_gamma;
    o->warmup = opts->warmup_steps;
    o->step_size = opts->lr_step_size;
    o->total_steps = opts->total_steps;
    o->whole_step = opts->whole_step;
    o->count = m->ntrainable;
    o->zero = zero && zero_sharded(zero) ? zero : NULL;
    o->state_count = o->zero ? o->zero->shard_count : o->count;
    const char *names[2];
    int nstate = optim_state_names(o->kind, o->momentum, names);
    if (mem && mem->alloc) o->mem = *mem;
    for (int i = 0; i < nstate; i++) {
        size_t bytes = o->state_count * sizeof(float) + sizeof(float);
        if (o->mem.alloc && !o->zero) {
            void *p = NULL;
            ddp_status_t s = o->mem.alloc(o->mem.arg, bytes, &p);
            o->state[i] = p;
            if (s != DDP_OK) {
                optim_free(o);
                return s;
            }
        } else {
            o->state[i] = o->compute->alloc(bytes);
        }
        if (!o->state[i]) {
            optim_free(o);
            return ddp_fail(DDP_ERR_NOMEM, "out of memory for the optimizer state (%zu bytes)",
                            o->state_count * sizeof(float));
        }
    }
    return DDP_OK;
}

void optim_free(optim_t *o)
{
    for (int i = 0; i < 2; i++) {
        if (!o->state[i]) continue;
        if (o->mem.alloc && !o->zero)
            o->mem.free(o->mem.arg, o->state[i]);
        else
            o->compute->free(o->state[i]);
    }
    o->state[0] = o->state[1] = NULL;
}

int optim_state_names(optimizer_kind_t kind, double momentum, const char **names)
{
    if (kind == OPTIM_ADAMW) {
        names[0] = "exp_avg";
        names[1] = "exp_avg_sq";
        return 2;
    }
    if (momentum > 0) {
        names[0] = "momentum_buffer";
        return 1;
    }
    return 0;
}

size_t optim_state_bytes(const optim_t *o)
{
    return (size_t)((o->state[0] != NULL) + (o->state[1] != NULL)) * o->state_count *
           sizeof(float);
}

double optim_lr(const optim_t *o, int64_t step)
{
    if (o->warmup > 0 && step < o->warmup) return o->lr * (double)(step + 1) / (double)o->warmup;
    switch (o->schedule) {
    case SCHED_COSINE: {
        int64_t span = o->total_steps - o->warmup;
        if (span <= 0) return o->lr;
        double progress = (double)(step - o->warmup) / (double)span;
        if (progress > 1) progress = 1;
        return o->lr * 0.5 * (1.0 + cos(M_PI * progress));
    }
    case SCHED_STEP: return o->lr * pow(o->lr_gamma, (double)(step / o->step_size));
    default: return o->lr;
    }
}

ddp_status_t optim_step(optim_t *o, model_t *m, double norm)
{
    if (o->clip > 0) {
        if (!isfinite(norm))
            return ddp_fail(DDP_ERR_NUMERIC,
                            "the gradient norm is %g at step %lld: " DDP_DIVERGED_ADVICE, norm,
                            (long long)o->step_count);
        /* torch.nn.utils.clip_grad_norm_: coef = max_norm / (norm + 1e-6), if < 1 */
        double coef = o->clip / (norm + 1e-6);
        if (coef < 1) {
            zero_plan_t whole = {.stage = 0};
            zero_grad_scale(o->zero ? o->zero : &whole, m, (float)coef);
        }
    }
    optim_begin(o);
    if (!o->zero) {
        optim_apply(o, m, 0, o->count);
    } else {
        for (int b = 0; b < m->nbuckets; b++)
            if (o->zero->n[b]) optim_apply(o, m, m->buckets[b].offset + o->zero->first[b], o->zero->n[b]);
    }
    return o->error;
}

int optim_can_apply_per_bucket(const optim_t *o)
{
    return !(o->clip > 0) && !o->whole_step;
}

int optim_outputs(const optim_t *o, const model_t *m, float **out)
{
    int n = 0;
    out[n++] = m->params;
    for (int i = 0; i < 2; i++)
        if (o->state[i]) out[n++] = o->state[i];
    return n;
}

void optim_begin(optim_t *o)
{
    o->cur_lr = (float)optim_lr(o, o->step_count);
    o->step_count++;
}

void optim_apply(optim_t *o, model_t *m, size_t offset, size_t count)
{
    const compute_ops_t *compute = o->compute;
    float *p = m->params + offset;
    const float *g = m->grads + offset;
    size_t at = offset; /* of the state */
    if (o->zero) {
        ddp_status_t s = zero_shard_offset(o->zero, m, offset, count, &at);
        if (s != DDP_OK) {
            if (o->error == DDP_OK) o->error = s;
            return;
        }
        /* --zero 2: the reduced gradients of the shard, in the shard's order */
        if (o->zero->slots) g = o->zero->shard_grads + at;
    }
    float *s0 = o->state[0] ? o->state[0] + at : NULL;
    if (o->kind == OPTIM_ADAMW)
        compute->adamw_step(count, p, g, s0, o->state[1] + at, o->cur_lr, (float)o->beta1,
                            (float)o->beta2, (float)o->eps, (float)o->weight_decay, o->step_count);
    else
        compute->sgd_step(count, p, g, s0, o->cur_lr, (float)o->momentum, o->nesterov,
                          (float)o->weight_decay, o->step_count == 1);
}
