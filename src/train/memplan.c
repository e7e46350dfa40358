/* memplan.c -- the memory of a run (see memplan.h): the estimate, its
 * check against the limits, and where the gradient plane's buffers come
 * from. */
#include "memplan.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "memlimit.h"
#include "weights.h"

static double mib_(size_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

/* ---- gradient-plane memory ------------------------------------------------ */

static ddp_status_t plane_alloc_(void *arg, size_t bytes, void **p)
{
    trainer_t *t = arg;
    if (t->comm_memory) return comm_mem_alloc(&t->comm, bytes, p);
    *p = t->compute->alloc(bytes);
    if (!*p)
        return trainer_compute_failure(
            t, ddp_fail(DDP_ERR_NOMEM,
                        "out of memory allocating %zu bytes for parameters, gradients or optimizer "
                        "state; reduce the model size or run fewer ranks per node",
                        bytes));
    ddp_status_t s = comm_register(&t->comm, *p, bytes, t->compute->mem_kind);
    if (s != DDP_OK) {
        t->compute->free(*p);
        *p = NULL;
    }
    return s;
}

static void plane_free_(void *arg, void *p)
{
    trainer_t *t = arg;
    if (t->comm_memory) {
        comm_mem_free(&t->comm, p);
        return;
    }
    comm_deregister(&t->comm, p);
    t->compute->free(p);
}

ddp_status_t memplan_register_model(trainer_t *t)
{
    model_t *m = &t->model;
    ddp_mem_kind_t kind = t->compute->mem_kind;
    if (m->nbufs) DDP_TRY(comm_register(&t->comm, m->bufs, m->nbufs * sizeof(float), kind));
    for (int i = 0; i < m->nlayers; i++) {
        const layer_t *L = &m->layers[i];
        if (L->kind == LAYER_BN)
            DDP_TRY(comm_register(&t->comm, L->stats, (size_t)2 * L->in.c * sizeof(double), kind));
    }
    return DDP_OK;
}

void memplan_deregister_model(trainer_t *t)
{
    model_t *m = &t->model;
    if (m->nbufs) comm_deregister(&t->comm, m->bufs);
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].kind == LAYER_BN) comm_deregister(&t->comm, m->layers[i].stats);
}

/* One batch buffer of `batch` samples (inputs, labels, targets, indices). */
static size_t batch_bytes_at_(const trainer_t *t, int batch)
{
    size_t numel = t->train.sample_numel, B = (size_t)batch;
    size_t k = t->train.targets > 0 ? (size_t)t->train.targets : 1;
    return B * (numel * sizeof(float) + sizeof(int32_t) + k * sizeof(float) + sizeof(int64_t));
}

/* ... of --batch samples */
static size_t batch_bytes_(const trainer_t *t)
{
    return batch_bytes_at_(t, (int)t->cfg->batch);
}

/* The batch buffers in host memory: the loader's queue (prefetch + 1) and
 * evaluation's host batch. */
static size_t host_data_bytes_(const trainer_t *t)
{
    return batch_bytes_(t) * (size_t)(t->cfg->prefetch + 2);
}

/* The gradients with `slots` gradient slots (0: the whole buffer) and a
 * shard of `shard` elements (its reduced gradients when there are slots). */
static size_t grad_bytes_(const model_t *m, int slots, size_t shard)
{
    if (!slots) return m->nparams * sizeof(float) + sizeof(float);
    return ((size_t)slots * model_max_bucket(m) + (m->nparams - m->ntrainable) + shard + 2) *
           sizeof(float);
}

size_t memplan_grad_bytes(const trainer_t *t)
{
    return grad_bytes_(&t->model, t->zero.slots, t->zero.shard_count);
}

/* All batch buffers: those and the device batches (TRAINER_DEVICE_BATCHES,
 * step.h). */
size_t memplan_data_bytes(const trainer_t *t)
{
    return host_data_bytes_(t) + batch_bytes_(t) * TRAINER_DEVICE_BATCHES;
}

/* ---- memory: the estimate against the limits ------------------------------ */

/* What the rest of the start-up will allocate, per rank. */
typedef struct mem_plan {
    size_t comm;     /* parameters, gradients, optimizer state, 16-bit scratch */
    int ncomm;       /* ... in this many allocations (plane_alloc_) */
    size_t resident; /* all buffers, comm included */
    size_t address;  /* address space beyond the buffers */
} mem_plan_t;

/* The in-memory HDF5 image of a file of `bytes` of data: the hint its
 * writer gives (data + slack), allocated whole, at least 1 MiB (h5_mem_create). */
static size_t image_bytes_(size_t bytes, size_t slack)
{
    size_t n = bytes + slack;
    return n < ((size_t)1 << 20) ? ((size_t)1 << 20) : n;
}

/* Rank 0's buffers for the files it writes, beyond the snapshot counted
 * with the start-up copy: a checkpoint's image (build_image_ in
 * checkpoint.c: the model, the optimizer state, every rank's BatchNorm
 * statistics) kept from one checkpoint to the next, and --save's host copy
 * and image (weights_save), made while the checkpoint's are still held. */
static size_t files_bytes_(const trainer_t *t, size_t state_bytes)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    if (t->ctl->rank != 0) return 0;
    size_t model = weights_model_bytes(m), n = 0;
    if (cfg->ckpt_dir[0]) {
        size_t local = t->ctl->size > 1 ? (size_t)t->ctl->size * m->nbufs * sizeof(float) : 0;
        n += image_bytes_(model + state_bytes + local, (size_t)256 << 10);
    }
    if (cfg->save[0]) n += model + image_bytes_(model, (size_t)64 << 10);
    return n;
}

static mem_plan_t mem_plan_(const trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    const char *names[2];
    size_t nstate = (size_t)optim_state_names(cfg->optimizer, cfg->momentum, names);
    size_t params = m->nparams * sizeof(float) + sizeof(float);
    size_t full_state = m->ntrainable * sizeof(float) + sizeof(float);
    /* --zero 1|2: the state of this rank's shard, in the compute backend's
     * memory (not the plane's: no collective copies it) */
    int sharded = zero_sharded(&t->zero);
    size_t state = sharded ? t->zero.shard_count * sizeof(float) + sizeof(float) : full_state;
    /* the plane's gradient buffer (--zero 2: its slots); the shard's reduced
     * gradients are the compute backend's */
    size_t shard_grads = t->zero.slots ? (t->zero.shard_count + 1) * sizeof(float) : 0;
    size_t grads = memplan_grad_bytes(t) - shard_grads;
    mem_plan_t p = {.comm = params + grads + (sharded ? 0 : nstate * state),
                    .ncomm = 2 + (sharded ? 0 : (int)nstate)};
    if (cfg->grad_compress) {
        size_t count = t->zero.slots ? (size_t)t->zero.slots * model_max_bucket(m) : m->ntrainable;
        p.comm += count * sizeof(uint16_t) + 2;
        p.ncomm++;
    }
    /* rank 0's start-up broadcast copy; checkpoints keep a snapshot (under
     * --zero: of one bucket at a time); rank 0's images of the files it
     * writes (the whole state, gathered) */
    size_t copy = params + m->nbufs * sizeof(float) +
                  nstate * (sharded ? 2 * model_max_bucket(m) * sizeof(float) : state);
    copy += files_bytes_(t, nstate * full_state);
    p.resident = p.comm + (sharded ? nstate * state : 0) + shard_grads + m->nbufs * sizeof(float) +
                 model_act_bytes(m) + memplan_data_bytes(t) + copy;
    /* device memory: the host holds the batches and the start-up copy only */
    if (t->compute->mem_kind == DDP_MEM_DEVICE) p.resident = host_data_bytes_(t) + copy;
    /* the first BLAS call maps its work buffer; the loader thread and the
     * checkpoint writer each add a stack and a malloc arena; slack */
    p.address = MEMLIMIT_BLAS_BUFFER + (cfg->ckpt_dir[0] ? 2 : 1) * MEMLIMIT_THREAD +
                ((size_t)16 << 20);
    return p;
}

/* ---- device memory: the plan against the device's free memory ------------ */

/* How the state and gradients are laid out: sharded or whole, gradient
 * slots (zero.h), the shard's elements; and the batch. */
typedef struct dev_shape {
    int sharded, slots;
    size_t shard;
    int batch;
} dev_shape_t;

/* The cuda backend's scratch of two-pass sums (ddp_cuda_partials_, one
 * buffer grown to the largest use): a convolution's bias gradient takes a
 * double per sample and output channel, a BatchNorm2d's statistics two per
 * channel and chunk of samples (cuda/bn.cu's bn_chunks: at most c + 528
 * chunks' worth). */
static size_t partials_bytes_(const model_t *m, int batch)
{
    size_t most = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const layer_t *L = &m->layers[i];
        size_t b = 0;
        if (L->kind == LAYER_CONV && L->bias >= 0)
            b = (size_t)batch * L->out.c * sizeof(double);
        else if (L->kind == LAYER_BN && L->in.h * L->in.w > 1)
            b = ((size_t)L->in.c + 528) * 2 * sizeof(double);
        if (b > most) most = b;
    }
    return most;
}

static void device_plan_at_(const trainer_t *t, const dev_shape_t *sh, memplan_device_t *p)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    const char *names[2];
    size_t nstate = (size_t)optim_state_names(cfg->optimizer, cfg->momentum, names);
    p->params = m->nparams * sizeof(float) + sizeof(float);
    p->grads = grad_bytes_(m, sh->slots, sh->shard);
    p->state = nstate * ((sh->sharded ? sh->shard : m->ntrainable) + 1) * sizeof(float);
    /* running statistics (and the guard's copy of them under --on-nonfinite
     * skip); per BN layer its mean, invstd and batch statistics */
    p->bn = m->nbufs * sizeof(float);
    if (cfg->on_nonfinite == NONFINITE_SKIP) p->bn += m->nbufs * sizeof(float) + sizeof(float);
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].kind == LAYER_BN)
            p->bn += (size_t)m->layers[i].in.c * (2 * sizeof(float) + 2 * sizeof(double));
    p->ws = model_ws_bytes(m, sh->batch);
    p->act = model_act_bytes_at(m, sh->batch) - p->ws;
    p->batches = batch_bytes_at_(t, sh->batch) * TRAINER_DEVICE_BATCHES;
    p->half = 0; /* --grad-compress: a 16-bit copy of the gradients the plane reduces */
    if (cfg->grad_compress) {
        size_t count = sh->slots ? (size_t)sh->slots * model_max_bucket(m) : m->ntrainable;
        p->half = count * sizeof(uint16_t) + 2;
    }
    if (cfg->precision == PRECISION_BF16) {
        /* the cuda backend's bf16 copies (cuda/bf16.h), each scratch with a
         * quarter more room: a GEMM's two inputs where no copy exists yet
         * (each a weight, an activation or its gradient, or a piece of the
         * convolution workspace; the first aligned to 256 bytes), a
         * layer's output gradient, the mirror of all parameters (the
         * weights' copies, which the optimizer writes; memplan_bf16_mirror)
         * and the memo of every dense layer's input (and convolution's,
         * where the backend keeps it, or once, beside it, for an fp32
         * output convolutions read: model_out_copy16) as its forward
         * rounded it for its backward, or without the mirror the memo of every
         * dense layer's weight and input and every convolution's weight;
         * with outputs kept in bf16, the fp32 scratch of the largest dense
         * one and of a convolution's group (below), and
         * the column sums of the loss's gradient */
        size_t big = (size_t)sh->batch * model_max_act(m);
        size_t dy = big * sizeof(uint16_t);
        for (int i = 0; i < m->ntensors; i++)
            if (m->tensors[i].kind == TENSOR_PARAM && m->tensors[i].numel > big)
                big = m->tensors[i].numel;
        if (p->ws / sizeof(float) > big) big = p->ws / sizeof(float);
        int mirror = memplan_bf16_mirror(m);
        size_t pair = 2 * big * sizeof(uint16_t) + 256 + 2;
        size_t memo = mirror ? m->nparams * sizeof(uint16_t) : 0;
        const int conv_x = m->compute->conv_input_bf16 && m->compute->conv_input_bf16();
        for (int i = 0; i < m->nlayers; i++) {
            const layer_t *L = &m->layers[i];
            if ((L->kind != LAYER_LINEAR && L->kind != LAYER_CONV) || L->weight < 0) continue;
            /* without the mirror a weight's copy is the memo's (256-byte
             * aligned, the input after it) */
            size_t w = mirror ? 0 : (m->tensors[L->weight].numel + 127) / 128 * 128;
            /* an input kept in bf16 is its own copy (model_out_bf16); a
             * convolution's where the backend keeps it (conv_input_bf16) */
            size_t x = L->kind == LAYER_LINEAR && !model_out_bf16(m, L->src)
                           ? (size_t)sh->batch * L->in.c
                           : 0;
            if (L->kind == LAYER_CONV && conv_x && !model_out_bf16(m, L->src) &&
                !model_out_copy16(m, L->src))
                x = ((size_t)sh->batch * L->in.c * L->in.h * L->in.w + 127) / 128 * 128;
            memo += (w + x) * sizeof(uint16_t);
        }
        /* an fp32 output's bf16 copy beside it, which the convolutions that
         * read it take instead of a copy in the memo each */
        for (int i = 0; i < m->nlayers; i++)
            if (model_out_copy16(m, i))
                memo += (size_t)sh->batch * act_numel(m->layers[i].out) * sizeof(uint16_t);
        size_t epi = 0, cx = 0, sums = 0;
        for (int i = 0; i < m->nlayers; i++) {
            const layer_t *L = &m->layers[i];
            const layer_t *C = L->kind == LAYER_RELU && L->fused_relu && L->src >= 0
                                   ? &m->layers[L->src]
                                   : L;
            size_t outn = act_numel(L->out), B = (size_t)sh->batch;
            /* a dense layer's fp32 product before it is written to an
             * output kept in bf16, where cuBLASLt cannot write it
             * (cuda/linear.cu) */
            if (C->kind == LAYER_LINEAR && model_out_bf16(m, i) && B * outn * 4 > epi)
                epi = B * outn * 4;
            if (L->kind != LAYER_CONV) continue;
            /* for a group cuDNN does not run (cuda/conv.cu), of the
             * backend's group of samples: a convolution's input kept in
             * bf16 widened and, in the backward, its input gradient in
             * fp32 (two scratches of that size), its output, and its output
             * gradient, in fp32 where kept in bf16 (the dense layers'
             * scratch) */
            conv_dims_t d = {sh->batch, L->in.c,   L->in.h, L->in.w,  L->out.c,
                             L->k,      L->stride, L->pad,  L->out.h, L->out.w};
            size_t G = m->compute->conv_group_samples ? (size_t)m->compute->conv_group_samples(&d)
                                                      : B;
            if (G > B) G = B;
            if (model_out_bf16(m, L->src) && G * act_numel(L->in) * 4 > cx)
                cx = G * act_numel(L->in) * 4;
            if (model_out_bf16(m, i) && G * outn * 4 > epi) epi = G * outn * 4;
            /* the plane sums of its output gradient for its bias gradient,
             * where the output carries the bias (cuda/bn.cu) */
            if (model_out_bf16(m, i) && L->bias >= 0 && B * L->out.c * 8 > sums)
                sums = B * L->out.c * 8;
        }
        epi += 2 * cx + sums;
        /* the column sums of the loss's gradient for a dense last layer
         * (cuda/loss.cu: at most 128 rows' groups) */
        size_t cols = model_dout_dense(m) ? (size_t)128 * m->outputs * sizeof(float) : 0;
        p->bf16 = pair + pair / 4 + dy + dy / 4 + memo + epi + epi / 4 + cols + cols / 4;
    }
    p->ws += partials_bytes_(m, sh->batch);
    p->reserve = MEMPLAN_DEVICE_RESERVE;
}

int memplan_bf16_mirror(const model_t *m)
{
    return model_weights_aligned(m, MEMPLAN_BF16_ALIGN);
}

/* This rank's shape: its plan and --batch. */
static dev_shape_t shape_(const trainer_t *t)
{
    return (dev_shape_t){zero_sharded(&t->zero), t->zero.slots, t->zero.shard_count,
                         (int)t->cfg->batch};
}

/* The shape of --zero `stage` at --batch `batch`, with the largest shard of
 * any rank, so that what fits here fits on every rank of a like GPU. */
static dev_shape_t stage_shape_(const trainer_t *t, int stage, int batch)
{
    const zero_plan_t *z = &t->zero;
    int sharded = stage > 0 && z->size > 1;
    int slots = zero_slots(stage, z->size, t->cfg->accum);
    return (dev_shape_t){sharded, slots, sharded ? z->max_shard : z->shard_count, batch};
}

static size_t need_at_(const trainer_t *t, const dev_shape_t *sh)
{
    memplan_device_t p = {0};
    device_plan_at_(t, sh, &p);
    return memplan_device_total(&p);
}

size_t memplan_device_total(const memplan_device_t *p)
{
    return p->params + p->grads + p->state + p->bn + p->act + p->ws + p->batches + p->half +
           p->bf16 + p->reserve;
}

void memplan_device(const trainer_t *t, memplan_device_t *p)
{
    dev_shape_t sh = shape_(t);
    memset(p, 0, sizeof *p);
    device_plan_at_(t, &sh, p);
}

void memplan_device_parts(const memplan_device_t *p, char *buf, size_t n)
{
    /* the parts every run has, then those only some have */
    int u =
        snprintf(buf, n,
                 "parameters %.1f, gradients %.1f, optimizer state %.1f, activations %.1f, "
                 "batches %.1f",
                 mib_(p->params), mib_(p->grads), mib_(p->state), mib_(p->act), mib_(p->batches));
    const struct {
        const char *name;
        size_t bytes;
    } more[] = {{"BatchNorm", p->bn},
                {"workspace", p->ws},
                {"16-bit gradients", p->half},
                {"bf16 GEMM inputs", p->bf16}};
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        if (more[i].bytes && u >= 0 && (size_t)u < n)
            u += snprintf(buf + u, n - (size_t)u, ", %s %.1f", more[i].name, mib_(more[i].bytes));
    if (u >= 0 && (size_t)u < n)
        snprintf(buf + u, n - (size_t)u, ", runtime reserve %.1f MiB", mib_(p->reserve));
}

/* What to change when the plan does not fit in `free_b`: with more than
 * one rank, what each higher --zero stage needs and the lowest that fits;
 * else the largest --batch that fits with the stage that needs least;
 * else a smaller model. */
static void advice_(const trainer_t *t, size_t free_b, char *buf, size_t n)
{
    const zero_plan_t *z = &t->zero;
    int B = (int)t->cfg->batch;
    size_t need[3] = {0, 0, 0};
    int best = z->stage, fits = 0;
    dev_shape_t cur = shape_(t);
    need[best] = need_at_(t, &cur);
    char stages[160] = "";
    size_t u = 0;
    for (int stage = z->stage + 1; stage <= 2 && z->size > 1; stage++) {
        dev_shape_t sh = stage_shape_(t, stage, B);
        need[stage] = need_at_(t, &sh);
        if (need[stage] < need[best]) best = stage;
        if (!fits && need[stage] <= free_b) fits = stage;
        if (u < sizeof stages)
            u += (size_t)snprintf(stages + u, sizeof stages - u, "%s--zero %d%s %.1f MiB",
                                  u ? ", " : "", stage, u ? "" : " would need", mib_(need[stage]));
    }
    if (fits) {
        snprintf(buf, n, "%s: run with --zero %d", stages, fits);
        return;
    }
    if (u < sizeof stages) snprintf(stages + u, sizeof stages - u, "%s", u ? "; " : "");
    /* activations and batches grow with the batch: the largest that fits */
    dev_shape_t sh = best == z->stage ? cur : stage_shape_(t, best, B);
    int lo = 0, hi = B - 1; /* the largest fitting batch in [1, B-1], 0: none */
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        sh.batch = mid;
        if (need_at_(t, &sh) <= free_b)
            lo = mid;
        else
            hi = mid - 1;
    }
    char zero[32] = "";
    if (best != z->stage) snprintf(zero, sizeof zero, "--zero %d and ", best);
    if (lo > 0) {
        sh.batch = lo;
        snprintf(buf, n, "%swith %s--batch %d it needs %.1f MiB: run with %s--batch %d", stages,
                 zero, lo, mib_(need_at_(t, &sh)), zero, lo);
        return;
    }
    sh.batch = 1;
    snprintf(buf, n,
             "%seven %s--batch 1 needs %.1f MiB: use a smaller model or a GPU with more free "
             "memory%s",
             stages, zero, mib_(need_at_(t, &sh)),
             z->size > 1 ? ""
                         : ", or more ranks with --zero 2 (it shards the optimizer state and "
                           "the gradients over them)");
}

/* Device compute memory: this rank's plan against its device's free
 * memory, before anything is allocated there. */
static ddp_status_t device_check_(trainer_t *t)
{
    t->device_free = t->device_total = 0;
    if (t->compute->mem_kind != DDP_MEM_DEVICE || !t->compute->mem_info) return DDP_OK;
    size_t free_b = 0, total_b = 0;
    DDP_TRY(t->compute->mem_info(&free_b, &total_b));
    t->device_free = free_b;
    t->device_total = total_b;
    memplan_device_t p;
    memplan_device(t, &p);
    size_t need = memplan_device_total(&p);
    if (need <= free_b) return DDP_OK;
    char parts[320], advice[320];
    memplan_device_parts(&p, parts, sizeof parts);
    advice_(t, free_b, advice, sizeof advice);
    return ddp_fail(DDP_ERR_NOMEM,
                    "%s device memory: this rank's plan needs %.1f MiB (%s), but %.1f of its "
                    "device's %.1f MiB are free; %s",
                    t->compute->name, mib_(need), parts, mib_(free_b), mib_(total_b), advice);
}

ddp_status_t memplan_check(trainer_t *t)
{
    mem_plan_t p = mem_plan_(t);
    memlimit_t l;
    memlimit_probe(&l, NULL, NULL);
    mem_need_t need = {p.resident, p.address};
    char warn[512];
    ddp_status_t s = memlimit_check(&l, &need, t->comm.local_size, warn, sizeof warn);
    if (s == DDP_OK && warn[0] && t->ctl->rank == 0) log_warn("%s", warn);
    if (s == DDP_OK) s = device_check_(t);
    const deck_t *d = &t->train;
    const model_t *m = &t->model;
    const layer_t *last = m->nlayers ? &m->layers[m->nlayers - 1] : NULL;
    if (s == DDP_ERR_NOMEM && last && last->kind == LAYER_LINEAR && !d->regression &&
        m->outputs == d->classes &&
        2 * (double)act_numel(last->in) * (double)m->outputs > (double)m->nparams) {
        /* most of it is the last layer, as wide as the classes: name their source */
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", ddp_error_message());
        s = ddp_fail_override(DDP_ERR_NOMEM,
                              "%s; most of it is the last layer's %d outputs, the deck's classes "
                              "(%s of /train/y in %s): check that number",
                              msg, d->classes,
                              d->classes_inferred ? "the largest label + 1" : "attribute classes",
                              d->shards[d->classes_inferred ? d->label_max_shard : 0].path);
    }
    t->mem_need_address = l.as_used + p.resident + p.address;
    t->mem_limit_address = l.as_limit;
    return s;
}

ddp_status_t memplan_choose(trainer_t *t)
{
    t->comm_memory = 0;
    if (t->compute->mem_kind != DDP_MEM_HOST ||
        !(comm_caps(&t->comm) & COMM_CAP_NODE_SHARED_MEMORY))
        return DDP_OK;
    mem_plan_t plan = mem_plan_(t);
    DDP_TRY(comm_mem_plan(&t->comm, plan.comm, plan.ncomm));
    t->comm_memory = (comm_caps(&t->comm) & COMM_CAP_NODE_SHARED_MEMORY) != 0;
    return DDP_OK;
}

model_mem_t memplan_plane_memory(trainer_t *t)
{
    return (model_mem_t){plane_alloc_, plane_free_, t};
}
