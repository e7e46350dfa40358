/* table.c -- the start-up table (see table.h). */
#include "table.h"

#include <stdio.h>
#include <string.h>

#include "log.h"
#include "memplan.h"
#include "memlimit.h"
#include "version.h"

static double mib_(size_t bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

/* A model with residual blocks or a named architecture, item by item: its
 * name, layers, output shape and parameters; a run of identical items
 * (layer3.1 ... layer3.5) on one line. */
static void model_items_(const model_t *m)
{
    char name[LAYER_NAME_MAX], text[400], pname[LAYER_NAME_MAX] = "", ptext[400] = "", shape[48];
    char pshape[48] = "";
    size_t params = 0, pparams = 0;
    int run = 0;
    for (int i = 0; i <= m->nlayers;) {
        int next = i;
        if (i < m->nlayers) {
            next = model_item_text(m, i, name, sizeof name, text, sizeof text, &params);
            act_shape_t o = m->layers[next - 1].out;
            if (o.image)
                snprintf(shape, sizeof shape, "[%d, %d, %d]", o.c, o.h, o.w);
            else
                snprintf(shape, sizeof shape, "[%d]", o.c);
            if (run && strcmp(text, ptext) == 0 && strcmp(shape, pshape) == 0) {
                run++;
                i = next;
                continue;
            }
        }
        if (run == 1)
            log_info("               %-12s %-60s %-14s %zu", pname, ptext, pshape, pparams);
        else if (run > 1)
            log_info("               %-12s %-60s %-14s %zu each, %d in a row", pname, ptext, pshape,
                     pparams, run);
        if (i == m->nlayers) break;
        snprintf(pname, sizeof pname, "%s", name);
        snprintf(ptext, sizeof ptext, "%s", text);
        snprintf(pshape, sizeof pshape, "%s", shape);
        pparams = params;
        run = 1;
        i = next;
    }
}

/* --zero: the plan, and what it leaves out. */
static void zero_line_(const trainer_t *t)
{
    const zero_plan_t *z = &t->zero;
    const model_t *m = &t->model;
    if (!zero_sharded(z)) {
        log_info("  zero         stage %d with one rank: nothing to shard", z->stage);
        return;
    }
    char grads[160];
    if (z->stage < 2)
        snprintf(grads, sizeof grads, "gradients whole");
    else if (z->slots)
        snprintf(grads, sizeof grads, "reduced gradients of the shard, %d gradient slots of %.2f MiB",
                 z->slots, mib_(model_max_bucket(m) * sizeof(float)));
    else
        snprintf(grads, sizeof grads,
                 "gradients whole: --accum %lld accumulates every gradient before the one "
                 "reduction (stage 2 saves gradient memory at --accum 1)",
                 (long long)t->cfg->accum);
    log_info("  zero         stage %d: optimizer state of %zu of %zu trainable elements on this "
             "rank (%d ranks, at most %zu each, one block of each of the %d buckets), %s; "
             "--check-replicas compares the parameters, not the sharded state",
             z->stage, z->shard_count, m->ntrainable_values, z->size, z->max_shard, m->nbuckets,
             grads);
}

void table_print(const run_t *run)
{
    const trainer_t *t = &run->t;
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    const deck_t *d = &t->train;
    if (t->ctl->rank != 0) return;
    reducer_stats_t rs;
    reducer_get_stats(t->reducer, &rs);
    size_t pbytes = m->nparams * sizeof(float) + m->nbufs * sizeof(float);
    size_t gbytes = memplan_grad_bytes(t);
    size_t obytes = optim_state_bytes(&t->opt) + rs.scratch_bytes;
    log_info("ddptrain %s: %d rank%s on %d node%s (%d per node), device %s, comm %s%s",
             ddp_version(), t->comm.size, t->comm.size > 1 ? "s" : "", t->comm.nnodes,
             t->comm.nnodes > 1 ? "s" : "", t->comm.local_size, t->device, t->comm.ops->name,
             t->comm_memory ? " (node-shared memory)" : "");
    if (t->rank_devices) { /* device memory: every rank's GPU */
        int shown = t->comm.size <= 16 ? t->comm.size : 15;
        for (int r = 0; r < shown; r++)
            log_info("  %-12s rank %d on %s: %s", r ? "" : "gpus", r, control_host(t->ctl, r),
                     t->rank_devices[r]);
        if (shown < t->comm.size)
            log_info("               ... %d more ranks (rank %d: %s on %s)", t->comm.size - shown,
                     t->comm.size - 1, t->rank_devices[t->comm.size - 1],
                     control_host(t->ctl, t->comm.size - 1));
        if (cfg->precision == PRECISION_BF16)
            log_info("  precision    bf16 GEMM and convolution inputs, fp32 accumulation and "
                     "master weights");
        if (cfg->precision == PRECISION_TF32)
            log_info("  precision    tf32 GEMM and convolution inputs (tensor cores), fp32 "
                     "accumulation, outputs and weights");
    }
    char desc[256];
    deck_describe(d, desc, sizeof desc);
    log_info("  input        %s%s: %s; %lld val samples", cfg->inputs[0],
             cfg->ninputs > 1 ? " (+ more shards)" : "", desc,
             (long long)(t->have_val ? t->val.n : 0));
    log_info("  model        %s", cfg->model);
    if (model_has_layer(m, LAYER_ADD) || strcmp(m->expanded, cfg->model) != 0) model_items_(m);
    log_info("               %d layers, %zu parameters (%zu trainable), loss %s", m->nlayers,
             m->nvalues, m->ntrainable_values,
             t->loss.kind == LOSS_XENT ? "cross-entropy" : "mse");
    char buckets[512];
    size_t u = 0;
    for (int b = 0; b < m->nbuckets && u < sizeof buckets - 32; b++) {
        if (b == 8 && m->nbuckets > 9) {
            u += (size_t)snprintf(buckets + u, sizeof buckets - u, ", ... (%d more)",
                                  m->nbuckets - 8);
            break;
        }
        u += (size_t)snprintf(buckets + u, sizeof buckets - u, "%s%.2f", b ? ", " : "",
                              mib_(m->buckets[b].count * sizeof(float)));
    }
    char how[128] = "";
    if (cfg->bucket_cap_mb == 0 && t->link_gbps > 0)
        snprintf(how, sizeof how, ": auto, for the link between the nodes, %.3g GB/s each way",
                 t->link_gbps);
    else if (cfg->bucket_cap_mb == 0)
        snprintf(how, sizeof how, ": auto, %s", t->comm.nnodes > 1 ? "link not measured" : "one node");
    log_info("  buckets      %d: %s MiB (cap %.3g MiB%s, first %g MiB)%s%s%s%s", m->nbuckets,
             m->nbuckets ? buckets : "-", t->bucket_cap_mb, how,
             cfg->first_bucket_mb < t->bucket_cap_mb ? cfg->first_bucket_mb : t->bucket_cap_mb,
             cfg->grad_compress
                 ? (cfg->grad_compress == COMPRESS_BF16 ? ", bf16 all-reduce" : ", fp16 all-reduce")
                 : "",
             cfg->allreduce ? ", --allreduce " : "",
             cfg->allreduce ? config_choice_name("allreduce", cfg->allreduce) : "",
             cfg->update == UPDATE_BUCKET ? ", update per bucket"
             : cfg->update == UPDATE_STEP ? ", update after the step"
                                          : "");
    if (t->comm.size > 1 && t->comm.ops->set_progress_thread)
        log_info("  comm thread  %s (--comm-thread %s)",
                 t->comm_thread                 ? "on: all-reduce messages advance during backward"
                 : t->comm_thread_why[0]        ? "off: MPI lacks MPI_THREAD_MULTIPLE"
                 : t->comm.nnodes > 1 && !t->comm_thread_spare
                     ? "off: no core to spare for it (bound to one CPU, or as many ranks as "
                       "CPUs); all-reduces advance between layers"
                 : t->comm.nnodes > 1           ? "off: all-reduces advance between layers"
                                                : "off: one node, shared memory",
                 config_choice_name("comm-thread", cfg->comm_thread));
    log_info("  batch        %lld per rank x accum %lld x %d ranks = global batch %lld",
             (long long)cfg->batch, (long long)cfg->accum, t->comm.size,
             (long long)(cfg->batch * cfg->accum * t->comm.size));
    log_info("  steps        %lld per epoch, %lld total (%lld epoch%s)%s",
             (long long)t->steps_per_epoch, (long long)t->total_steps, (long long)t->end_epoch,
             t->end_epoch > 1 ? "s" : "", cfg->drop_last ? "" : ", last batch uneven");
    const ckpt_resume_t *res = &run->ckpt.resume;
    if (res->active)
        log_info(
            "  resume       %s: step %lld, epoch %lld, sample %lld of the epoch (saved by %lld "
            "rank%s)%s",
            res->path, (long long)res->pos.step, (long long)res->pos.epoch + 1,
            (long long)res->pos.sample_in_epoch, (long long)res->world_size,
            res->world_size > 1 ? "s" : "",
            t->first_step >= t->total_steps ? "; nothing left to train" : "");
    if (run->ckpt.note[0]) log_info("  resume       %s", run->ckpt.note);
    if (cfg->ckpt_dir[0]) {
        char every[96] = "", keep[32] = "all";
        if (cfg->ckpt_every > 0)
            snprintf(every, sizeof every, "every %lld steps, ", (long long)cfg->ckpt_every);
        if (cfg->ckpt_every_epochs > 0)
            snprintf(every + strlen(every), sizeof every - strlen(every), "every %lld epochs, ",
                     (long long)cfg->ckpt_every_epochs);
        if (cfg->keep > 0) snprintf(keep, sizeof keep, "the newest %lld", (long long)cfg->keep);
        log_info("  checkpoints  %s: %sat the end and on SIGUSR1/SIGTERM; keep %s", cfg->ckpt_dir,
                 every, keep);
    }
    if (cfg->ckpt_dir[0] || res->active)
        log_info("  run          %s (%s), data fingerprint %s", run->ckpt.ident.run_id,
                 run->ckpt.ident.resumed ? "the checkpoint's" : "new", run->ckpt.ident.data_fp);
    log_info("  optimizer    %s, lr %g, schedule %s, warm-up %lld%s",
             config_choice_name("optimizer", cfg->optimizer), cfg->lr,
             config_choice_name("lr-schedule", cfg->lr_schedule), (long long)cfg->warmup_steps,
             cfg->clip_grad_norm > 0 ? ", gradient clipping" : "");
    log_info("  batchnorm    %s", !model_has_layer(m, LAYER_BN) ? "none in the model"
                                  : t->sync_bn ? "SyncBatchNorm (statistics over all ranks)"
                                               : "local statistics per rank");
    if (cfg->zero > 0) zero_line_(t);
    log_info("  memory/rank  params %.1f MiB, grads %.1f MiB, optimizer %.1f MiB, activations "
             "%.1f MiB, data %.1f MiB = %.1f MiB",
             mib_(pbytes), mib_(gbytes), mib_(obytes), mib_(m->act_bytes), mib_(t->data_bytes),
             mib_(pbytes + gbytes + obytes + m->act_bytes + t->data_bytes));
    if (t->device_total) { /* device memory: rank 0's plan, checked before it was allocated */
        memplan_device_t dp;
        memplan_device(t, &dp);
        char parts[320];
        memplan_device_parts(&dp, parts, sizeof parts);
        log_info("  device/rank  plan %.1f MiB (%s) of %.1f MiB free at start-up (%.1f MiB in all "
                 "on rank 0's device)",
                 mib_(memplan_device_total(&dp)), parts, mib_(t->device_free),
                 mib_(t->device_total));
    }
    if (t->mem_limit_address != MEMLIMIT_NONE)
        log_info("  address      about %.0f MiB per rank (with BLAS buffers and threads) of the "
                 "%.0f MiB limit (ulimit -v)",
                 mib_(t->mem_need_address), mib_(t->mem_limit_address));
    /* options that are not at their defaults, with where they came from */
    static const char *src_name[] = {"default", "input", "config file", "command line"};
    char line[1024];
    size_t lu = 0;
    for (int i = 0; i < ddp_noptions; i++) {
        if (cfg->source[i] == SRC_DEFAULT || strcmp(ddp_options[i].name, "model") == 0) continue;
        char v[CONFIG_STR_MAX];
        config_format(cfg, &ddp_options[i], v, sizeof v);
        int w = snprintf(line + lu, sizeof line - lu, "%s%s=%s (%s)", lu ? ", " : "",
                         ddp_options[i].name, v, src_name[cfg->source[i]]);
        if (w < 0 || (size_t)w >= sizeof line - lu) break;
        lu += (size_t)w;
    }
    if (lu) log_info("  options      %s", line);
    if (!cfg->sync && t->comm.size > 1)
        log_warn("--no-sync: gradients are not all-reduced, so the replicas diverge (a "
                 "benchmark mode, not training)");
}
