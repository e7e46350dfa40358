/* config.c -- the option table and everything driven by it. */
#define _GNU_SOURCE
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "atomicfile.h"
#include "inject.h"
#include "pathclash.h"

#define OFF(f) offsetof(ddp_config_t, f)
#define BIG    1e18

/* clang-format off */
const ddp_option_t ddp_options[] = {
    {"model", OPT_STRING, OFF(model), "linear:256,bn,relu,linear:256,bn,relu,linear:auto", NULL, "SPEC", 0, 0,
     "layers, comma-separated: linear:OUT conv:OUT:K[:STRIDE[:PAD]] maxpool:K[:STRIDE] "
     "avgpool:K[:STRIDE] gap bn relu gelu dropout:P flatten (OUT may be 'auto': classes or targets of the data)", "Model", 0},
    {"loss", OPT_CHOICE, OFF(loss), "auto", "auto|xent|mse", NULL, 0, 0,
     "loss: softmax cross-entropy for integer labels, mean squared error for float targets (auto: from the data)", NULL, 0},
    {"label-smoothing", OPT_FLOAT, OFF(label_smoothing), "0", NULL, "X", 0, 1,
     "label smoothing of the cross-entropy loss", NULL, 0},
    {"init", OPT_STRING, OFF(init), "", NULL, "FILE.h5", 0, 0,
     "load parameters and BatchNorm buffers from a weights file (/model/<name>, PyTorch state_dict names)", NULL, 1},

    {"batch", OPT_INT, OFF(batch), "64", NULL, "B", 1, 1 << 24,
     "samples per rank per micro-batch (global batch = B x accum x ranks)", "Data", 1},
    {"epochs", OPT_INT, OFF(epochs), "1", NULL, "N", 1, BIG, "passes over the training data", NULL, 1},
    {"steps", OPT_INT, OFF(steps), "0", NULL, "N", 0, BIG,
     "stop after N optimizer steps (0: run --epochs)", NULL, 1},
    {"shuffle", OPT_BOOL, OFF(shuffle), "true", NULL, NULL, 0, 0,
     "reshuffle the training data every epoch (--no-shuffle: file order)", NULL, 0},
    {"drop-last", OPT_BOOL, OFF(drop_last), "true", NULL, NULL, 0, 0,
     "drop the last incomplete global batch of each epoch (--no-drop-last: uneven last batch)", NULL, 0},
    {"prefetch", OPT_INT, OFF(prefetch), "4", NULL, "N", 1, 1024,
     "batches the loader thread reads ahead", NULL, 1},
    {"augment", OPT_STRING, OFF(augment), "", NULL, "LIST", 0, 0,
     "image augmentation: hflip (random horizontal flip), crop:P (random crop after P pixels of zero padding)", NULL, 0},
    {"eval-every", OPT_INT, OFF(eval_every), "1", NULL, "E", 0, BIG,
     "evaluate on /val every E epochs and at the end (0: only at the end)", NULL, 1},
    {"check-data", OPT_BOOL, OFF(check_data), "false", NULL, NULL, 0, 0,
     "scan all input features for NaN/Inf before training", NULL, 1},

    {"optimizer", OPT_CHOICE, OFF(optimizer), "sgd", "sgd|adamw", NULL, 0, 0,
     "optimizer (PyTorch semantics)", "Optimizer", 0},
    {"lr", OPT_FLOAT, OFF(lr), "0.05", NULL, "X", 0, BIG, "peak learning rate", NULL, 0},
    {"momentum", OPT_FLOAT, OFF(momentum), "0.9", NULL, "X", 0, 1, "SGD momentum (0: none)", NULL, 0},
    {"nesterov", OPT_BOOL, OFF(nesterov), "false", NULL, NULL, 0, 0, "SGD Nesterov momentum", NULL, 0},
    {"weight-decay", OPT_FLOAT, OFF(weight_decay), "0", NULL, "X", 0, BIG,
     "weight decay (L2 for SGD, decoupled for AdamW)", NULL, 0},
    {"beta1", OPT_FLOAT, OFF(beta1), "0.9", NULL, "X", 0, 0.999999, "AdamW beta1", NULL, 0},
    {"beta2", OPT_FLOAT, OFF(beta2), "0.999", NULL, "X", 0, 0.999999999, "AdamW beta2", NULL, 0},
    {"eps", OPT_FLOAT, OFF(eps), "1e-8", NULL, "X", 0, 1, "AdamW epsilon", NULL, 0},
    {"lr-schedule", OPT_CHOICE, OFF(lr_schedule), "constant", "constant|cosine|step", NULL, 0, 0,
     "learning-rate schedule after warm-up (cosine decays to 0 at the last step)", NULL, 0},
    {"warmup-steps", OPT_INT, OFF(warmup_steps), "0", NULL, "N", 0, BIG,
     "linear warm-up from lr/N to lr over the first N steps", NULL, 0},
    {"lr-step-size", OPT_INT, OFF(lr_step_size), "1000", NULL, "N", 1, BIG,
     "step schedule: multiply lr by --lr-gamma every N steps", NULL, 0},
    {"lr-gamma", OPT_FLOAT, OFF(lr_gamma), "0.1", NULL, "X", 0, 1, "step schedule decay factor", NULL, 0},
    {"clip-grad-norm", OPT_FLOAT, OFF(clip_grad_norm), "0", NULL, "X", 0, BIG,
     "clip gradients to this global L2 norm (0: off)", NULL, 0},
    {"accum", OPT_INT, OFF(accum), "1", NULL, "K", 1, 1 << 20,
     "gradient accumulation: K micro-batches per optimizer step, one all-reduce", NULL, 1},
    {"seed", OPT_INT, OFF(seed), "42", NULL, "N", 0, BIG,
     "seed of initialisation, shuffling, dropout and augmentation", NULL, 0},

    {"device", OPT_CHOICE, OFF(device), "auto", "cpu|cuda|auto", NULL, 0, 0,
     "where each rank computes: cpu, cuda (one GPU per rank; the binary must be built with the "
     "cuda backend), auto (cuda when built in and a GPU is visible, else cpu); docs/gpus.md", "Device", OPT_RESUMABLE},
    {"precision", OPT_CHOICE, OFF(precision), "fp32", "fp32|bf16|tf32", NULL, 0, 0,
     "GEMM and convolution inputs: fp32, bf16 (fp32 accumulation and master weights), or tf32 "
     "(fp32 GEMMs on the tensor cores, inputs rounded to 10 mantissa bits) (bf16 and tf32: "
     "--device cuda only)", NULL, OPT_RESUMABLE},
    {"comm", OPT_CHOICE, OFF(comm), "auto", "auto|mpi|nccl", NULL, 0, 0,
     "the gradient plane's comm backend: mpi (host memory: MPI messages, and node-shared memory "
     "on one node), nccl (GPU memory); auto: the one for the memory --device computes in",
     NULL, OPT_RESUMABLE},

    {"bucket-cap-mb", OPT_FLOAT, OFF(bucket_cap_mb), "auto", NULL, "MB", 0.001, 4096,
     "gradient bucket size cap (MiB); auto: 25 on one node, across nodes from the link between "
     "them, measured at start-up (docs/parallelism.md#buckets)", "Distributed", 1},
    {"first-bucket-mb", OPT_FLOAT, OFF(first_bucket_mb), "1", NULL, "MB", 0.001, 4096,
     "cap of the first bucket reduced (the last layers), so communication starts early", NULL, 1},
    {"grad-compress", OPT_CHOICE, OFF(grad_compress), "none", "none|bf16|fp16", NULL, 0, 0,
     "all-reduce gradients in 16 bits (summed in fp32)", NULL, 0},
    {"allreduce", OPT_CHOICE, OFF(allreduce), "auto", "auto|hier|ring|mpi", NULL, 0, 0,
     "the mpi comm backend's all-reduce: auto (node-shared memory on one node, hier across "
     "nodes), hier (summed in each node's shared memory, each local rank's slice all-reduced "
     "between the nodes, shared in the node), ring (pipelined ring of point-to-point messages "
     "between all ranks), mpi (the MPI library's MPI_Iallreduce, in chunks); --comm nccl: "
     "auto only (NCCL chooses)", NULL, OPT_RESUMABLE},
    {"comm-thread", OPT_CHOICE, OFF(comm_thread), "auto", "auto|on|off", NULL, 0, 0,
     "a progress thread per rank that advances the mpi backend's all-reduce messages while "
     "backward computes (needs MPI_THREAD_MULTIPLE; costs CPU time on a core of its own): "
     "auto (on when the ranks span several nodes, off on one node, where shared memory sends "
     "no messages), on, off (all-reduces advance only between layers); --comm nccl: no effect",
     NULL, OPT_RESUMABLE},
    {"update", OPT_CHOICE, OFF(update), "fused", "fused|bucket|step", NULL, 0, 0,
     "where the optimizer update runs: fused (inside each bucket's all-reduce, each rank "
     "updating the part it reduced, where the comm backend can; else bucket), bucket (on each "
     "bucket as its all-reduce completes), step (after every bucket's, as DDP then "
     "optimizer.step()); the same weights bit for bit; --clip-grad-norm and --on-nonfinite skip "
     "always update after the step", NULL, OPT_RESUMABLE},
    {"zero", OPT_INT, OFF(zero), "0", NULL, "STAGE", 0, 2,
     "ZeRO data parallelism: 0 (every rank holds everything), 1 (each rank keeps the optimizer "
     "state of its shard of the parameters and updates only that shard; the parameters are "
     "all-gathered after), 2 (also the reduced gradients: a few bucket-sized gradient slots "
     "instead of the whole gradient buffer); the same weights bit for bit; docs/zero.md",
     NULL, OPT_RESUMABLE},
    {"freeze", OPT_STRING, OFF(freeze), "", NULL, "NAMES", 0, 0,
     "parameters not to train, comma-separated (layers.0.weight, or layers.0 for all of a layer)", NULL, 0},
    {"find-unused", OPT_BOOL, OFF(find_unused), "false", NULL, NULL, 0, 0,
     "treat a parameter that received no gradient as unused (zero gradient) instead of failing", NULL, 1},
    {"sync-bn", OPT_BOOL, OFF(sync_bn), "auto", NULL, NULL, 0, 0,
     "SyncBatchNorm: batch statistics over all ranks (auto: on with more than one rank)", NULL, 0},
    {"sync", OPT_BOOL, OFF(sync), "true", NULL, NULL, 0, 0,
     "all-reduce gradients (--no-sync: benchmark mode, replicas diverge)", NULL, 0},
    {"check-replicas", OPT_INT, OFF(check_replicas), "0", NULL, "N", 0, BIG,
     "every N steps compare a hash of the parameters across ranks and stop on a difference (0: off)", NULL, 1},

    {"save", OPT_STRING, OFF(save), "", NULL, "FILE.h5", 0, 0,
     "write the final weights here (HDF5, /model/<name> as PyTorch state_dict)", "Output", 1},
    {"metrics", OPT_STRING, OFF(metrics), "", NULL, "FILE", 0, 0,
     "append JSON lines to FILE (rank 0): the run's configuration, a record per progress line "
     "and per evaluation, the summary; docs/outputs.md, \"Metrics file\"", NULL, 1},
    {"config", OPT_STRING, OFF(config), "", NULL, "FILE", 0, 0,
     "read options from FILE (key = value lines; keys are the long option names)", NULL, 1},
    {"log-every", OPT_INT, OFF(log_every), "50", NULL, "N", 0, BIG,
     "print a progress line every N steps (0: never)", NULL, 1},
    {"quiet", OPT_BOOL, OFF(quiet), "false", NULL, NULL, 0, 0,
     "print errors and evaluation lines only", NULL, 1},

    {"ckpt-dir", OPT_STRING, OFF(ckpt_dir), "", NULL, "DIR", 0, 0,
     "write checkpoints here (DIR/ckpt_<step>.h5, from rank 0) every --ckpt-every steps, every "
     "--ckpt-every-epochs epochs, on SIGUSR1 or SIGTERM, and at the end", "Checkpoints", 1},
    {"ckpt-every", OPT_INT, OFF(ckpt_every), "0", NULL, "N", 0, BIG,
     "checkpoint every N optimizer steps (0: off)", NULL, 1},
    {"ckpt-every-epochs", OPT_INT, OFF(ckpt_every_epochs), "0", NULL, "E", 0, BIG,
     "checkpoint every E epochs (0: off)", NULL, 1},
    {"keep", OPT_INT, OFF(keep), "3", NULL, "K", 0, BIG,
     "checkpoints kept in --ckpt-dir; older ones are removed once a new one is complete (0: all)", NULL, 1},
    {"resume", OPT_STRING, OFF(resume), "", NULL, "auto|FILE.h5", 0, 0,
     "resume from a checkpoint: auto takes the newest complete one in --ckpt-dir and starts at "
     "step 0 when there is none; a path must be a valid checkpoint", NULL, 1},
    {"resume-override", OPT_BOOL, OFF(resume_override), "false", NULL, NULL, 0, 0,
     "resume even when options that shape training (model, optimizer, seed, data) differ from the "
     "checkpoint's", NULL, 1},
    {"resume-other-data", OPT_BOOL, OFF(resume_other_data), "false", NULL, NULL, 0, 0,
     "resume even from a checkpoint trained on other data (its data_fingerprint differs from this "
     "run's input files); a warning names both", NULL, 1},

    {"timeout", OPT_FLOAT, OFF(timeout), "600", NULL, "SECONDS", 0, 1e9,
     "watchdog: when a collective (or, on a GPU, a wait for the device) has not completed in "
     "SECONDS, end the job (exit 10) with one report naming the collective, its step, and what "
     "the ranks that did not arrive were doing (0: off; otherwise at least 1)",
     "Diagnostics", 1},
    {"debug-collectives", OPT_BOOL, OFF(debug_collectives), "false", NULL, NULL, 0, 0,
     "before every collective, check that all ranks are in the same one (name both sides of a "
     "mismatch, exit 6); costs one small all-reduce per collective", NULL, 1},
    {"straggler-factor", OPT_FLOAT, OFF(straggler_factor), "1.3", NULL, "X", 1, 1e6,
     "name a rank whose busy time per step (compute + data wait) exceeds X times the median over "
     "the ranks (checked with the progress lines, at most every 10 steps)",
     NULL, 1},
    {"on-nonfinite", OPT_CHOICE, OFF(on_nonfinite), "abort", "abort|skip", NULL, 0, 0,
     "a NaN/Inf loss or gradient: abort naming the step and samples, or skip the step on every "
     "rank (optimizer, weights and BN statistics untouched)", NULL, 1},
    {"max-skips", OPT_INT, OFF(max_skips), "10", NULL, "N", 1, BIG,
     "--on-nonfinite skip: abort after N skipped steps in a row", NULL, 1},
    {"inject", OPT_STRING, OFF(inject), "", NULL, "KIND:RANK:STEP[:ARG]", 0, 0,
     "fault injection for testing the diagnostics (repeatable): hang, exit, kill, slow, bitflip, "
     "nan, skipgrad, desync; docs/diagnostics.md", NULL, OPT_RESUMABLE | OPT_REPEATABLE},
    {"diagnose", OPT_BOOL, OFF(diagnose), "false", NULL, NULL, 0, 0,
     "instead of training, measure a few steps in four modes (normal, no communication, input "
     "from memory, communication alone) and print a per-rank table and a verdict: input-bound, "
     "straggler, communication-bound or compute-bound; writes no checkpoint or --save; "
     "docs/diagnostics.md, \"Diagnose mode\"", NULL, 1},
    {"diagnose-steps", OPT_INT, OFF(diagnose_steps), "30", NULL, "N", 1, 100000,
     "--diagnose: measured steps per mode (in 3 rounds, each after 3 warm-up steps)", NULL, 1},
};
/* clang-format on */
const int ddp_noptions = (int)(sizeof ddp_options / sizeof ddp_options[0]);

_Static_assert(sizeof ddp_options / sizeof ddp_options[0] <=
                   sizeof((ddp_config_t *)0)->source / sizeof(opt_source_t),
               "ddp_config_t.source is too small for the option table");

const ddp_option_t *config_find(const char *name)
{
    for (int i = 0; i < ddp_noptions; i++)
        if (strcmp(ddp_options[i].name, name) == 0) return &ddp_options[i];
    return NULL;
}

/* The option whose name is closest to `name` (for "did you mean"). */
static const char *suggest_(const char *name)
{
    const char *best = NULL;
    size_t best_d = (size_t)-1;
    for (int i = 0; i < ddp_noptions; i++) {
        const char *o = ddp_options[i].name;
        size_t la = strlen(name), lb = strlen(o);
        if (la > 40 || lb > 40) continue;
        size_t d[41][41];
        for (size_t a = 0; a <= la; a++) d[a][0] = a;
        for (size_t b = 0; b <= lb; b++) d[0][b] = b;
        for (size_t a = 1; a <= la; a++)
            for (size_t b = 1; b <= lb; b++) {
                size_t sub = d[a - 1][b - 1] + (name[a - 1] != o[b - 1]);
                size_t del = d[a - 1][b] + 1, ins = d[a][b - 1] + 1;
                d[a][b] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
            }
        if (d[la][lb] < best_d) {
            best_d = d[la][lb];
            best = o;
        }
    }
    return best_d <= 3 ? best : NULL;
}

static int parse_bool_(const char *v, int *out)
{
    static const char *yes[] = {"true", "yes", "on", "1"}, *no[] = {"false", "no", "off", "0"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) return *out = 1, 1;
        if (strcasecmp(v, no[i]) == 0) return *out = 0, 1;
    }
    return 0;
}

static int choice_index_(const char *choices, const char *v)
{
    int idx = 0;
    size_t lv = strlen(v);
    for (const char *p = choices; *p; idx++) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == lv && strncmp(p, v, len) == 0) return idx;
        if (!bar) break;
        p = bar + 1;
    }
    return -1;
}

const char *config_choice_name(const char *option, int value)
{
    /* a few rotating buffers: several names may appear in one printf */
    static _Thread_local char bufs[4][64];
    static _Thread_local int next;
    char *buf = bufs[next++ & 3];
    const ddp_option_t *o = config_find(option);
    if (!o || !o->choices) return "?";
    const char *p = o->choices;
    for (int i = 0; i < value && p; i++) {
        p = strchr(p, '|');
        if (p) p++;
    }
    if (!p) return "?";
    size_t len = strcspn(p, "|");
    if (len >= sizeof bufs[0]) len = sizeof bufs[0] - 1;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return buf;
}

ddp_status_t config_set(ddp_config_t *c, const char *key, const char *value, opt_source_t src,
                        const char *where)
{
    const ddp_option_t *o = config_find(key);
    if (!o) {
        const char *s = suggest_(key);
        return ddp_fail(DDP_ERR_USAGE, "%s: unknown option '%s'%s%s%s; see ddptrain --help", where,
                        key, s ? " (did you mean '" : "", s ? s : "", s ? "'?)" : "");
    }
    char *field = (char *)c + o->offset;
    char *end;
    switch (o->type) {
    case OPT_BOOL: {
        int b;
        if (strcmp(o->def, "auto") == 0 && strcmp(value, "auto") == 0)
            b = -1;
        else if (!parse_bool_(value, &b))
            return ddp_fail(DDP_ERR_USAGE, "%s: option '%s' takes true or false, not '%s'", where,
                            key, value);
        *(int *)field = b;
        break;
    }
    case OPT_INT: {
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end)
            return ddp_fail(DDP_ERR_USAGE, "%s: option '%s' takes an integer, not '%s'", where, key,
                            value);
        if ((double)v < o->min || (double)v > o->max)
            return ddp_fail(DDP_ERR_USAGE, "%s: option '%s' = %lld is out of range [%.15g, %.15g]",
                            where, key, v, o->min, o->max);
        *(int64_t *)field = v;
        break;
    }
    case OPT_FLOAT: {
        if (strcmp(o->def, "auto") == 0 && strcmp(value, "auto") == 0) { /* 0: auto */
            *(double *)field = 0;
            break;
        }
        errno = 0;
        double v = strtod(value, &end);
        if (errno || end == value || *end || !isfinite(v))
            return ddp_fail(DDP_ERR_USAGE, "%s: option '%s' takes a number%s, not '%s'", where,
                            key, strcmp(o->def, "auto") == 0 ? " or auto" : "", value);
        if (v < o->min || v > o->max)
            return ddp_fail(DDP_ERR_USAGE, "%s: option '%s' = %g is out of range [%g, %g]", where,
                            key, v, o->min, o->max);
        *(double *)field = v;
        break;
    }
    case OPT_STRING: {
        /* a repeatable option given again on the same source adds to it */
        int append = (o->flags & OPT_REPEATABLE) && field[0] && c->source[o - ddp_options] == src;
        size_t have = append ? strlen(field) + 1 : 0;
        if (have + strlen(value) >= CONFIG_STR_MAX)
            return ddp_fail(DDP_ERR_USAGE, "%s: value of option '%s' is longer than %d characters",
                            where, key, CONFIG_STR_MAX - 1);
        if (append)
            strcat(strcat(field, ","), value);
        else
            strcpy(field, value);
        break;
    }
    case OPT_CHOICE: {
        int idx = choice_index_(o->choices, value);
        if (idx < 0)
            return ddp_fail(DDP_ERR_USAGE, "%s: option '%s' must be one of %s, not '%s'", where,
                            key, o->choices, value);
        *(int *)field = idx;
        break;
    }
    }
    c->source[o - ddp_options] = src;
    return DDP_OK;
}

void config_defaults(ddp_config_t *c)
{
    memset(c, 0, sizeof *c);
    for (int i = 0; i < ddp_noptions; i++) {
        ddp_status_t s =
            config_set(c, ddp_options[i].name, ddp_options[i].def, SRC_DEFAULT, "default");
        (void)s; /* the defaults are valid by construction (tested) */
    }
}

static char *trim_(char *s)
{
    while (isspace((unsigned char)*s)) s++;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    return s;
}

ddp_status_t config_load_file(ddp_config_t *c, const char *path)
{
    /* not blocking on a FIFO: what it is decides first */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return ddp_fail(DDP_ERR_USAGE, "cannot open config file %s: %s; check --config", path,
                        strerror(errno));
    /* a directory, FIFO or device (/dev/zero) would read nothing or never end */
    struct stat st = {0};
    FILE *f = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? fdopen(fd, "r") : NULL;
    if (!f) {
        int e = errno;
        close(fd);
        if (S_ISREG(st.st_mode))
            return ddp_fail(DDP_ERR_USAGE, "cannot read config file %s: %s; check --config", path,
                            strerror(e));
        return ddp_fail(DDP_ERR_USAGE,
                        "--config %s is %s, not a regular file; name a text file of 'key = "
                        "value' lines",
                        path, atomicfile_kind(st.st_mode));
    }
    if (st.st_size > CONFIG_FILE_MAX) {
        fclose(f);
        return ddp_fail(DDP_ERR_USAGE,
                        "--config %s has %lld bytes, more than a config file may (%d); name a "
                        "text file of 'key = value' lines",
                        path, (long long)st.st_size, CONFIG_FILE_MAX);
    }
    char line[2 * CONFIG_STR_MAX], where[CONFIG_STR_MAX + 64];
    int lineno = 0;
    long at = 0; /* bytes read so far: a file that grows is bounded too */
    ddp_status_t s = DDP_OK;
    while (s == DDP_OK && fgets(line, sizeof line, f)) {
        lineno++;
        long now = ftell(f);
        size_t len = strlen(line), got = now > at ? (size_t)(now - at) : len;
        at = now;
        snprintf(where, sizeof where, "config file %s line %d", path, lineno);
        if (at > CONFIG_FILE_MAX) {
            s = ddp_fail(DDP_ERR_USAGE,
                         "--config %s is longer than %d bytes, more than a config file may; "
                         "name a text file of 'key = value' lines",
                         path, CONFIG_FILE_MAX);
            break;
        }
        if (got != len) {
            s = ddp_fail(DDP_ERR_USAGE,
                         "%s: a NUL byte (a binary file, not a config file?); a config file holds "
                         "'key = value' lines",
                         where);
            break;
        }
        if (len == sizeof line - 1 && line[len - 1] != '\n' && !feof(f)) {
            s = ddp_fail(DDP_ERR_USAGE,
                         "%s: line longer than %zu characters (not a config file?); a config "
                         "file holds 'key = value' lines",
                         where, sizeof line - 2);
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *l = trim_(line);
        if (!*l) continue;
        char *eq = strchr(l, '=');
        if (!eq) {
            s = ddp_fail(DDP_ERR_USAGE, "%s: expected 'key = value', got '%s'", where, l);
            break;
        }
        *eq = '\0';
        char *key = trim_(l), *val = trim_(eq + 1);
        if (strcmp(key, "config") == 0) {
            s = ddp_fail(DDP_ERR_USAGE, "%s: a config file cannot include another (key 'config')",
                         where);
            break;
        }
        s = config_set(c, key, val, SRC_FILE, where);
    }
    if (s == DDP_OK && ferror(f))
        s = ddp_fail(DDP_ERR_USAGE, "cannot read config file %s: %s; check --config", path,
                     strerror(errno));
    fclose(f);
    return s;
}

/* One pass over argv.  apply = 0: syntax, action, inputs and --config only;
 * apply = 1: set every option. */
static ddp_status_t scan_args_(ddp_config_t *c, int argc, char **argv, int apply,
                               config_action_t *action)
{
    int only_inputs = 0;
    if (!apply) c->ninputs = 0;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i];
        if (only_inputs || a[0] != '-' || a[1] == '\0') {
            if (!apply) c->inputs[c->ninputs++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_inputs = 1;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            *action = CONFIG_HELP;
            return DDP_OK;
        }
        if (strcmp(a, "-V") == 0 || strcmp(a, "--version") == 0) {
            *action = CONFIG_VERSION;
            return DDP_OK;
        }
        if (a[1] != '-')
            return ddp_fail(DDP_ERR_USAGE,
                            "command line: unknown option '%s'; options are long "
                            "(--batch 64); see ddptrain --help",
                            a);
        char name[128];
        const char *val = NULL;
        const char *eq = strchr(a + 2, '=');
        size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
        if (len >= sizeof name) len = sizeof name - 1;
        memcpy(name, a + 2, len);
        name[len] = '\0';
        if (eq) val = eq + 1;
        const ddp_option_t *o = config_find(name);
        if (!o && strncmp(name, "no-", 3) == 0 && !eq) {
            const ddp_option_t *neg = config_find(name + 3);
            if (neg && neg->type == OPT_BOOL) {
                o = neg;
                val = "false";
            }
        }
        if (!o) return config_set(c, name, "", SRC_CMDLINE, "command line"); /* reports it */
        if (!val) {
            if (o->type == OPT_BOOL)
                val = "true";
            else if (i + 1 < argc)
                val = argv[++i];
            else
                return ddp_fail(DDP_ERR_USAGE, "command line: option --%s needs a value (%s)",
                                o->name, o->meta ? o->meta : "see --help");
        }
        if (strcmp(o->name, "config") == 0 || apply) {
            DDP_TRY(config_set(c, o->name, val, SRC_CMDLINE, "command line"));
        }
    }
    return DDP_OK;
}

void config_free(ddp_config_t *c)
{
    free(c->inputs);
    c->inputs = NULL;
    c->ninputs = 0;
}

ddp_status_t config_parse_args(ddp_config_t *c, int argc, char **argv, config_input_hook_t hook,
                               config_action_t *action)
{
    config_defaults(c);
    *action = CONFIG_RUN;
    c->inputs = calloc((size_t)argc + 1, sizeof(char *));
    if (!c->inputs) return ddp_fail(DDP_ERR_NOMEM, "out of memory parsing the command line");
    char cfgfile[CONFIG_STR_MAX];
    DDP_TRY(scan_args_(c, argc, argv, 0, action));
    if (*action != CONFIG_RUN) return DDP_OK;
    strcpy(cfgfile, c->config);
    /* precedence: input /config < config file < command line */
    if (hook && c->ninputs > 0) DDP_TRY(hook(c->inputs[0], c));
    if (cfgfile[0]) DDP_TRY(config_load_file(c, cfgfile));
    DDP_TRY(scan_args_(c, argc, argv, 1, action));
    return config_validate(c);
}

/* Every file option of the table against the others and the decks: no
 * output over an input or another output, no --save or --metrics under a
 * checkpoint's name in --ckpt-dir, no FIFO or device (pathclash.h).  Before
 * any output is opened; stat() only. */
static ddp_status_t check_paths_(const ddp_config_t *c)
{
    enum { FIXED = 6 };
    pathclash_file_t *f = calloc((size_t)c->ninputs + FIXED, sizeof *f);
    char(*roles)[32] = calloc((size_t)c->ninputs + 1, sizeof *roles);
    if (!f || !roles) {
        free(f);
        free(roles);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory checking the file options");
    }
    int n = 0;
    /* what the run writes */
    f[n++] = (pathclash_file_t){"--save", c->save, PATHCLASH_OUT, NULL, 0};
    f[n++] = (pathclash_file_t){"--metrics", c->metrics, PATHCLASH_OUT, NULL, 0};
    f[n++] = (pathclash_file_t){"--ckpt-dir", c->ckpt_dir, PATHCLASH_DIR, pathclash_is_ckpt_name, 0};
    /* what it reads; a checkpoint of --ckpt-dir may be read once at start-up */
    f[n++] = (pathclash_file_t){"--init", c->init, PATHCLASH_IN, NULL, 1};
    f[n++] = (pathclash_file_t){"--resume", strcmp(c->resume, "auto") ? c->resume : "",
                                PATHCLASH_IN, NULL, 1};
    f[n++] = (pathclash_file_t){"--config", c->config, PATHCLASH_IN, NULL, 1};
    for (int i = 0; i < c->ninputs; i++) {
        if (c->ninputs == 1)
            snprintf(roles[i], sizeof roles[i], "the input deck");
        else
            snprintf(roles[i], sizeof roles[i], "input file %d", i + 1);
        f[n++] = (pathclash_file_t){roles[i], c->inputs[i], PATHCLASH_IN, NULL, 0};
    }
    ddp_status_t s = pathclash_check(f, n);
    free(f);
    free(roles);
    return s;
}

ddp_status_t config_validate(const ddp_config_t *c)
{
    if (c->ninputs == 0)
        return ddp_fail(DDP_ERR_USAGE,
                        "no input file given; usage: ddptrain [options] INPUT.h5 "
                        "[MORE.h5 ...] (make one with ddptrain-prep; see ddptrain --help)");
    if (c->model[0] == '\0')
        return ddp_fail(DDP_ERR_USAGE, "option 'model' is empty; give a layer list such as "
                                       "--model linear:128,relu,linear:10");
    /* the heartbeat runs at most 20 times a second: below a second the
     * watchdog would call a healthy rank stopped */
    if (c->timeout > 0 && c->timeout < CONFIG_TIMEOUT_MIN)
        return ddp_fail(DDP_ERR_USAGE,
                        "--timeout %g is too short to tell a hang from a slow step; give 0 (the "
                        "watchdog off) or at least %g s",
                        c->timeout, CONFIG_TIMEOUT_MIN);
    if (c->optimizer != OPTIM_SGD && c->nesterov)
        return ddp_fail(DDP_ERR_USAGE, "--nesterov applies to --optimizer sgd only");
    if (c->nesterov && c->momentum <= 0)
        return ddp_fail(DDP_ERR_USAGE, "--nesterov needs --momentum > 0 (as in PyTorch)");
    if (strcmp(c->resume, "auto") == 0 && !c->ckpt_dir[0])
        return ddp_fail(DDP_ERR_USAGE, "--resume auto looks in --ckpt-dir: give --ckpt-dir DIR "
                                       "(or --resume FILE.h5 for one checkpoint)");
    if ((c->ckpt_every > 0 || c->ckpt_every_epochs > 0) && !c->ckpt_dir[0])
        return ddp_fail(DDP_ERR_USAGE, "--ckpt-every and --ckpt-every-epochs need --ckpt-dir DIR "
                                       "(where the checkpoints go)");
    if (c->freeze[0]) { /* "," or "a,,b": an empty name is a slip, not "freeze nothing" */
        size_t n = strlen(c->freeze);
        if (c->freeze[0] == ',' || c->freeze[n - 1] == ',' || strstr(c->freeze, ",,"))
            return ddp_fail(DDP_ERR_USAGE,
                            "--freeze '%s' has an empty name (a comma at the start, at the end "
                            "or twice); separate names by single commas, e.g. --freeze "
                            "layers.0,layers.2.bias",
                            c->freeze);
    }
    if (c->precision != PRECISION_FP32 && c->device == DEVICE_CPU)
        return ddp_fail(DDP_ERR_USAGE,
                        "--precision %s needs --device cuda (the cpu backend computes in fp32 "
                        "only); drop --precision or use a GPU",
                        config_choice_name("precision", c->precision));
    if (c->bucket_cap_mb > 0 && c->first_bucket_mb > c->bucket_cap_mb)
        return ddp_fail(DDP_ERR_USAGE, "--first-bucket-mb (%g) is larger than --bucket-cap-mb (%g)",
                        c->first_bucket_mb, c->bucket_cap_mb);
    DDP_TRY(check_paths_(c));
    return inject_parse(c->inject, NULL, NULL);
}

void config_format(const ddp_config_t *c, const ddp_option_t *o, char *buf, size_t n)
{
    const char *field = (const char *)c + o->offset;
    switch (o->type) {
    case OPT_BOOL: {
        int b = *(const int *)field;
        snprintf(buf, n, "%s", b < 0 ? "auto" : b ? "true" : "false");
        break;
    }
    case OPT_INT: snprintf(buf, n, "%lld", (long long)*(const int64_t *)field); break;
    case OPT_FLOAT:
        if (strcmp(o->def, "auto") == 0 && *(const double *)field == 0)
            snprintf(buf, n, "auto");
        else
            snprintf(buf, n, "%.9g", *(const double *)field);
        break;
    case OPT_STRING: snprintf(buf, n, "%s", field); break;
    case OPT_CHOICE:
        snprintf(buf, n, "%s", config_choice_name(o->name, *(const int *)field));
        break;
    }
}

size_t config_dump(const ddp_config_t *c, char *buf, size_t n)
{
    size_t used = 0;
    char val[CONFIG_STR_MAX];
    for (int i = 0; i < ddp_noptions; i++) {
        config_format(c, &ddp_options[i], val, sizeof val);
        int w = snprintf(buf + (used < n ? used : n), used < n ? n - used : 0, "%s = %s\n",
                         ddp_options[i].name, val);
        used += (size_t)w;
    }
    return used;
}

/* "  LEFT   text..." with the text wrapped at 100 columns under itself. */
static void print_wrapped_(FILE *f, const char *left, const char *text)
{
    enum { INDENT = 37, WIDTH = 100 };
    int col = fprintf(f, "  %-34s ", left);
    if (col > INDENT) {
        fprintf(f, "\n%*s", INDENT, "");
        col = INDENT;
    }
    const char *p = text;
    while (*p) {
        while (*p == ' ') p++;
        size_t w = strcspn(p, " ");
        if (w == 0) break;
        if (col > INDENT) {
            if (col + 1 + (int)w > WIDTH) {
                fprintf(f, "\n%*s", INDENT, "");
                col = INDENT;
            } else {
                col += fprintf(f, " ");
            }
        }
        for (size_t i = 0; i < w; i++) fputc(p[i] == '\001' ? ' ' : p[i], f);
        col += (int)w;
        p += w;
    }
    fputc('\n', f);
}

void config_print_help(FILE *f, const char *prog)
{
    fprintf(f,
            "Usage: %s [options] INPUT.h5 [MORE.h5 ...]\n"
            "       mpirun -np N %s [options] INPUT.h5\n"
            "Trains a neural network data-parallel over MPI ranks on an HDF5 input deck\n"
            "(/train/x, /train/y, optional /val).  Several input files are shards of one\n"
            "dataset.  Options may also come from --config FILE (key = value) and from the\n"
            "attributes of the input's /config group; the command line wins.\n",
            prog, prog);
    for (int i = 0; i < ddp_noptions; i++) {
        const ddp_option_t *o = &ddp_options[i];
        char left[96];
        if (o->section) fprintf(f, "\n%s:\n", o->section);
        if (o->type == OPT_BOOL)
            snprintf(left, sizeof left, "--%s, --no-%s", o->name, o->name);
        else if (o->type == OPT_CHOICE)
            snprintf(left, sizeof left, "--%s %s", o->name, o->choices);
        else
            snprintf(left, sizeof left, "--%s %s", o->name, o->meta);
        char text[1024];
        snprintf(text, sizeof text, "%s [default:\001%s]", o->help, /* \001: unbreakable */
                 o->type == OPT_STRING && !o->def[0] ? "none" : o->def);
        print_wrapped_(f, left, text);
    }
    fprintf(f, "\n  %-34s %s\n  %-34s %s\n", "-h, --help", "show this help and exit",
            "-V, --version", "show the version and build configuration and exit");
    fprintf(f,
            "\nExit codes: 0 ok, 2 usage, 3 bad input, 4 I/O, 5 out of memory, 6 ranks disagree,\n"
            "7 communication, 8 non-finite values, 9 device, 10 timeout (watchdog), 70 internal "
            "error,\n"
            "75 checkpointed on SIGUSR1/SIGTERM (resume with --resume auto), 130 interrupted.\n");
}

