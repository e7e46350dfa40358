/* memplan.c -- the memory of a run (see memplan.h): the estimate, its
 * check against the limits, and where the gradient plane's buffers come
 * from. */
#include "memplan.h"

#include <stdio.h>

#include "log.h"
#include "memlimit.h"
#include "weights.h"

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

/* One batch buffer of --batch samples (inputs, labels, targets, indices). */
static size_t batch_bytes_(const trainer_t *t)
{
    size_t numel = t->train.sample_numel, B = (size_t)t->cfg->batch;
    size_t k = t->train.targets > 0 ? (size_t)t->train.targets : 1;
    return B * (numel * sizeof(float) + sizeof(int32_t) + k * sizeof(float) + sizeof(int64_t));
}

/* The batch buffers in host memory: the loader's queue (prefetch + 1) and
 * evaluation's host batch. */
static size_t host_data_bytes_(const trainer_t *t)
{
    return batch_bytes_(t) * (size_t)(t->cfg->prefetch + 2);
}

size_t memplan_grad_bytes(const trainer_t *t)
{
    const model_t *m = &t->model;
    if (!t->zero.slots) return m->nparams * sizeof(float) + sizeof(float);
    return ((size_t)t->zero.slots * model_max_bucket(m) + (m->nparams - m->ntrainable) +
            t->zero.shard_count + 2) *
           sizeof(float);
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
    size_t grads = memplan_grad_bytes(t);
    mem_plan_t p = {.comm = params + grads + (sharded ? 0 : nstate * state),
                    .ncomm = 2 + (sharded ? 0 : (int)nstate)};
    if (cfg->grad_compress) {
        p.comm += m->ntrainable * sizeof(uint16_t) + 2;
        p.ncomm++;
    }
    /* rank 0's start-up broadcast copy; checkpoints keep a snapshot (under
     * --zero: of one bucket at a time); rank 0's images of the files it
     * writes (the whole state, gathered) */
    size_t copy = params + m->nbufs * sizeof(float) +
                  nstate * (sharded ? 2 * model_max_bucket(m) * sizeof(float) : state);
    copy += files_bytes_(t, nstate * full_state);
    p.resident = p.comm + (sharded ? nstate * state : 0) + m->nbufs * sizeof(float) +
                 model_act_bytes(m) + memplan_data_bytes(t) + copy;
    /* device memory: the host holds the batches and the start-up copy only */
    if (t->compute->mem_kind == DDP_MEM_DEVICE) p.resident = host_data_bytes_(t) + copy;
    /* the first BLAS call maps its work buffer; the loader thread and the
     * checkpoint writer each add a stack and a malloc arena; slack */
    p.address = MEMLIMIT_BLAS_BUFFER + (cfg->ckpt_dir[0] ? 2 : 1) * MEMLIMIT_THREAD +
                ((size_t)16 << 20);
    return p;
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
