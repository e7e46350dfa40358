/* compute.c -- the registry of compute backends (see compute.h), and the
 * choice of one from --device. */
#include "compute.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ddp_build.h"
#include "opstable.h"

/* The builtins, one line per backend under the configure condition that
 * builds it ("cpu" first: the default). */
static const compute_ops_t *const builtin_[] = {
    &compute_cpu_ops,
#ifdef HAVE_CUDA
    &compute_cuda_ops,
#endif
};

#define REGISTRY_MAX 8

typedef struct entry {
    const char *name;
    const compute_ops_t *ops;
} entry_t;

static entry_t registry_[REGISTRY_MAX];
static int nregistry_ = -1;                /* -1: the builtins not registered yet */
static ddp_status_t builtin_failed_ = DDP_OK; /* a builtin refused at registration */

/* The ops every backend must have (compute.h lists the optional ones). */
#define REQUIRED(f) OPS_FIELD(compute_ops_t, f)
static const ops_field_t required_[] = {
    REQUIRED(init),          REQUIRED(alloc),         REQUIRED(free),
    REQUIRED(upload),        REQUIRED(download),      REQUIRED(copy),
    REQUIRED(zero),          REQUIRED(sync),          REQUIRED(upload_async),
    REQUIRED(download_async),
    REQUIRED(event_create),  REQUIRED(event_destroy), REQUIRED(event_record),
    REQUIRED(event_wait),    REQUIRED(linear_fwd),    REQUIRED(linear_bwd),
    REQUIRED(linear_ws_bytes),
    REQUIRED(conv_ws_bytes), REQUIRED(conv_fwd),      REQUIRED(conv_bwd),
    REQUIRED(maxpool_fwd),   REQUIRED(maxpool_bwd),   REQUIRED(avgpool_fwd),
    REQUIRED(avgpool_bwd),   REQUIRED(gap_fwd),       REQUIRED(gap_bwd),
    REQUIRED(bn_stats),      REQUIRED(bn_finalize),   REQUIRED(bn_eval_params),
    REQUIRED(bn_fwd),        REQUIRED(bn_bwd_stats),  REQUIRED(bn_bwd_data),
    REQUIRED(add),           REQUIRED(relu_fwd),      REQUIRED(relu_bwd),
    REQUIRED(gelu_fwd),      REQUIRED(gelu_bwd),      REQUIRED(dropout_fwd),
    REQUIRED(dropout_bwd),   REQUIRED(xent),          REQUIRED(mse),
    REQUIRED(sgd_step),      REQUIRED(adamw_step),    REQUIRED(scale),
    REQUIRED(sumsq),         REQUIRED(all_finite),    REQUIRED(to_half),
    REQUIRED(from_half),
};

static void builtins_(void);

ddp_status_t compute_register(const char *name, const compute_ops_t *ops)
{
    builtins_();
    if (!name || !name[0] || !ops || !ops->name)
        return ddp_fail(DDP_ERR_INTERNAL, "compute backend registered without a name or table");
    const char *missing = ops_missing(ops, required_, sizeof required_ / sizeof required_[0]);
    if (missing)
        return ddp_fail(DDP_ERR_INTERNAL,
                        "compute backend '%s' (registered as '%s') has no %s op: every op but "
                        "the optional ones of compute.h is required",
                        ops->name, name, missing);
    int at = 0;
    while (at < nregistry_ && strcmp(registry_[at].name, name) != 0) at++;
    if (at == REGISTRY_MAX)
        return ddp_fail(DDP_ERR_INTERNAL, "more than %d compute backends registered",
                        REGISTRY_MAX);
    registry_[at] = (entry_t){name, ops};
    if (at == nregistry_) nregistry_++;
    return DDP_OK;
}

static void builtins_(void)
{
    if (nregistry_ >= 0) return;
    nregistry_ = 0;
    for (size_t i = 0; i < sizeof builtin_ / sizeof builtin_[0]; i++) {
        ddp_status_t s = compute_register(builtin_[i]->name, builtin_[i]);
        if (s != DDP_OK && builtin_failed_ == DDP_OK) builtin_failed_ = s;
    }
}

int compute_backend_count(void)
{
    builtins_();
    return nregistry_;
}

const char *compute_backend_name(int i)
{
    return i >= 0 && i < compute_backend_count() ? registry_[i].name : NULL;
}

const compute_ops_t *compute_backend(int i)
{
    return i >= 0 && i < compute_backend_count() ? registry_[i].ops : NULL;
}

const compute_ops_t *compute_find(const char *name)
{
    for (int i = 0; i < compute_backend_count(); i++)
        if (strcmp(registry_[i].name, name) == 0) return registry_[i].ops;
    return NULL;
}

/* A backend that can run here: a host backend always, a device backend
 * when it sees a device. */
static int usable_(const compute_ops_t *ops)
{
    return !ops->device_count || ops->device_count() > 0;
}

ddp_status_t compute_pick(const char *device, const compute_ops_t **out)
{
    *out = NULL;
    builtins_();
    if (builtin_failed_ != DDP_OK) return builtin_failed_;
    if (strcmp(device, "auto") == 0) {
        for (int i = 0; i < nregistry_ && !*out; i++)
            if (registry_[i].ops->mem_kind == DDP_MEM_DEVICE && usable_(registry_[i].ops))
                *out = registry_[i].ops;
        if (!*out) *out = compute_find("cpu");
        return *out ? DDP_OK : ddp_fail(DDP_ERR_INTERNAL, "no cpu compute backend registered");
    }
    const compute_ops_t *ops = compute_find(device);
    if (!ops)
        return ddp_fail(DDP_ERR_USAGE,
                        "--device %s: this ddptrain was built without the %s backend "
                        "(ddptrain --version lists the backends); rebuild with ./configure "
                        "--with-cuda --with-nccl, or use --device cpu",
                        device, device);
    if (!usable_(ops)) {
        const char *visible = getenv("CUDA_VISIBLE_DEVICES");
        return ddp_fail(DDP_ERR_DEVICE,
                        "--device %s: no GPU is visible to this rank (CUDA_VISIBLE_DEVICES=%s); "
                        "run on a GPU node and ask the launcher for GPUs (Slurm: "
                        "--gpus-per-task=1), or use --device cpu",
                        device, visible ? visible : "unset");
    }
    *out = ops;
    return DDP_OK;
}
