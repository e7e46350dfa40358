/* checkpoint.c -- --save, checkpoints and resume (see checkpoint.h). */
#define _GNU_SOURCE
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "atomicfile.h"
#include "ckpt_verify.h"
#include "clock.h"
#include "h5util.h"
#include "log.h"
#include "pathclash.h"
#include "activity.h"
#include "version.h"

#define CKPT_PREFIX     PATHCLASH_CKPT_PREFIX
#define CKPT_SUFFIX     PATHCLASH_CKPT_SUFFIX
#define CONFIG_TEXT_MAX (64 * 1024) /* the stored configuration's text */
#define CKPT_SKIPS_NAMED 3          /* damaged checkpoints named one by one */

/* ---- names in --ckpt-dir ------------------------------------------------- */

static void ckpt_path_(const char *dir, int64_t step, char *buf, size_t n)
{
    snprintf(buf, n, "%s/" CKPT_PREFIX "%08lld" CKPT_SUFFIX, dir, (long long)step);
}

/* The step in a checkpoint's file name (ckpt_<digits>.h5), or -1; the
 * pattern lives in pathclash.c, which keeps other outputs off these names. */
static int64_t ckpt_step_of_(const char *name)
{
    return pathclash_ckpt_step(name);
}

/* A temporary file of one of our checkpoint writes, ckpt_<digits>.h5.tmp.<host>.<pid>:
 * what kind (atomicfile.h), or ATOMICFILE_NOT_TMP. */
static atomicfile_tmp_kind_t our_tmp_(const char *name)
{
    size_t tl = 0;
    atomicfile_tmp_kind_t k = atomicfile_tmp_classify(name, NULL, &tl);
    char head[256];
    if (k == ATOMICFILE_NOT_TMP || tl >= sizeof head) return ATOMICFILE_NOT_TMP;
    memcpy(head, name, tl);
    head[tl] = '\0';
    return ckpt_step_of_(head) < 0 ? ATOMICFILE_NOT_TMP : k;
}

static int cmp_desc_(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x < y) - (x > y);
}

/* The steps of the checkpoints in dir, newest first (*steps: malloc'd).
 * A name of the pattern that is not the one ckpt_path_ makes (ckpt_30.h5
 * for ckpt_00000030.h5) is no checkpoint of ours: counted in *odd (may be
 * NULL), the first in odd_name. */
static ddp_status_t list_(const char *dir, int64_t **steps, int *n, int *odd, char *odd_name,
                          size_t odd_cap)
{
    *steps = NULL;
    *n = 0;
    if (odd) *odd = 0;
    DIR *d = opendir(dir);
    if (!d) return ddp_fail(DDP_ERR_IO, "cannot read --ckpt-dir %s: %s", dir, strerror(errno));
    int cap = 0;
    struct dirent *e;
    ddp_status_t s = DDP_OK;
    while ((e = readdir(d)) != NULL) {
        int64_t step = ckpt_step_of_(e->d_name);
        if (step < 0) continue;
        char canon[64];
        ckpt_path_(".", step, canon, sizeof canon);
        if (strcmp(canon + 2, e->d_name) != 0) {
            if (odd && !(*odd)++) snprintf(odd_name, odd_cap, "%s", e->d_name);
            continue;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *p = realloc(*steps, (size_t)cap * sizeof *p);
            if (!p) {
                s = ddp_fail(DDP_ERR_NOMEM, "out of memory listing --ckpt-dir %s", dir);
                break;
            }
            *steps = p;
        }
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    if (s == DDP_OK && *n > 1) qsort(*steps, (size_t)*n, sizeof **steps, cmp_desc_);
    return s;
}

/* ---- start-up ------------------------------------------------------------ */

/* --save: a regular file (or a new one) in a writable directory; stale
 * temporary files of earlier saves removed.  (That it is none of the
 * inputs config_validate checked: pathclash.h.) */
static ddp_status_t probe_save_(const trainer_t *t)
{
    const char *path = t->cfg->save;
    if (!path[0]) return DDP_OK;
    int removed = 0, kept = 0;
    DDP_TRY(atomicfile_probe("--save", path, &removed, &kept));
    if (removed)
        log_info("--save %s: removed %d stale temporary file%s an interrupted save left", path,
                 removed, removed > 1 ? "s" : "");
    if (kept)
        log_warn("--save %s: %d temporary file%s of another run (on another host, or still "
                 "running) left in place; two runs saving to one file replace each other's",
                 path, kept, kept > 1 ? "s" : "");
    return DDP_OK;
}

/* --ckpt-dir: there (created when only its last component is missing),
 * writable, and without temporary files of ours from an interrupted write. */
static ddp_status_t prepare_dir_(const char *dir, ckpt_lock_t *lock)
{
    struct stat st;
    if (stat(dir, &st) != 0) {
        int e = errno;
        if (e == ENOENT) e = mkdir(dir, 0777) == 0 ? 0 : errno;
        if (e == ENOENT)
            return ddp_fail(DDP_ERR_IO,
                            "cannot create --ckpt-dir %s: %s; its parent directory must exist "
                            "(mkdir -p %s)",
                            dir, strerror(e), dir);
        /* the real cause: a link loop, a read-only file system, permissions */
        if (e != 0)
            return ddp_fail(DDP_ERR_IO, "cannot %s --ckpt-dir %s: %s%s",
                            e == ELOOP ? "follow" : "create", dir, strerror(e),
                            atomicfile_advice(e));
        log_info("created --ckpt-dir %s", dir);
    } else if (!S_ISDIR(st.st_mode)) {
        return ddp_fail(DDP_ERR_USAGE, "--ckpt-dir %s is not a directory", dir);
    }
    /* a directory on a read-only file system: said so before the lock */
    if (access(dir, W_OK) != 0 && (errno == EROFS || errno == EACCES)) {
        int e = errno;
        return ddp_fail(DDP_ERR_IO, "cannot write in --ckpt-dir %s: %s%s", dir, strerror(e),
                        atomicfile_advice(e));
    }
    /* before anything here is touched: is another job using it? */
    DDP_TRY(ckpt_lock_take(lock, dir));
    DIR *d = opendir(dir);
    if (!d) return ddp_fail(DDP_ERR_IO, "cannot read --ckpt-dir %s: %s", dir, strerror(errno));
    int removed = 0, kept = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        atomicfile_tmp_kind_t k = our_tmp_(e->d_name);
        if (k == ATOMICFILE_NOT_TMP) continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        /* only a dead process's of this host: a live writer's file stays */
        if (k == ATOMICFILE_TMP_STALE && unlink(p) == 0)
            removed++;
        else
            kept++;
    }
    closedir(d);
    if (removed)
        log_info("--ckpt-dir %s: removed %d temporary file%s an interrupted checkpoint write left",
                 dir, removed, removed > 1 ? "s" : "");
    if (kept)
        log_warn("--ckpt-dir %s: %d temporary file%s of another run (on another host, or still "
                 "running) left in place; do two jobs write checkpoints here?",
                 dir, kept, kept > 1 ? "s" : "");
    char path[4200];
    ckpt_path_(dir, 0, path, sizeof path);
    if (atomicfile_probe("", path, NULL, NULL) != DDP_OK)
        return ddp_fail_override(DDP_ERR_IO, "cannot write in --ckpt-dir %s: %s", dir,
                                 ddp_error_message());
    return DDP_OK;
}

/* A fresh start (no --resume) in a directory holding checkpoints: they are
 * an earlier run's, and this run would write its own over those of the
 * same steps and then mix with them under --resume auto. */
static ddp_status_t refuse_earlier_run_(const char *dir)
{
    int64_t *steps;
    int all, n = 0;
    DDP_TRY(list_(dir, &steps, &all, NULL, NULL, 0));
    char newest[4200] = "", p[4200];
    /* files: a FIFO or a directory under such a name is refused where the
     * checkpoint of its step is written */
    for (int i = 0; i < all; i++) {
        struct stat st;
        ckpt_path_(dir, steps[i], p, sizeof p);
        if (stat(p, &st) != 0 || !S_ISREG(st.st_mode)) continue;
        if (!n++) snprintf(newest, sizeof newest, "%s", p);
    }
    free(steps);
    if (n == 0) return DDP_OK;
    return ddp_fail(DDP_ERR_USAGE,
                    "--ckpt-dir %s already holds %d checkpoint%s of an earlier run (the newest: "
                    "%s), which this run would write over: go on with that run with --resume "
                    "auto, or give this run another --ckpt-dir (or move them away)",
                    dir, n, n > 1 ? "s" : "", newest);
}

ddp_status_t checkpoint_startup(checkpoint_t *c, trainer_t *t)
{
    c->last_step = -1;
    if (t->ctl->rank != 0) return DDP_OK;
    ckpt_identity_new(&c->ident);
    DDP_TRY(probe_save_(t));
    if (t->cfg->ckpt_dir[0]) DDP_TRY(prepare_dir_(t->cfg->ckpt_dir, &c->lock));
    if (t->cfg->ckpt_dir[0] && !t->cfg->resume[0]) DDP_TRY(refuse_earlier_run_(t->cfg->ckpt_dir));
    return DDP_OK;
}

/* ---- reading a checkpoint (rank 0) --------------------------------------- */

/* Options that shape training must match the checkpoint's (ddp_option_t
 * OPT_RESUMABLE marks those that may change); with --resume-override a change
 * is reported and allowed. */
static ddp_status_t compare_options_(const trainer_t *t, const char *text, const char *path)
{
    ddp_config_t *old = malloc(sizeof *old);
    if (!old) return ddp_fail(DDP_ERR_NOMEM, "out of memory reading %s", path);
    config_defaults(old);
    /* the stored text: "key = value" lines; keys this version does not know are skipped */
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char line[2 * CONFIG_STR_MAX];
        if (len < sizeof line) {
            memcpy(line, p, len);
            line[len] = '\0';
            char *eq = strstr(line, " = ");
            if (eq) {
                *eq = '\0';
                if (config_set(old, line, eq + 3, SRC_FILE, path) != DDP_OK) ddp_clear_error();
            }
        }
        p += len + (nl != NULL);
    }
    static const char *src_name[] = {"default", "input /config", "config file", "command line"};
    ddp_status_t s = DDP_OK;
    for (int i = 0; i < ddp_noptions && s == DDP_OK; i++) {
        const ddp_option_t *o = &ddp_options[i];
        if (o->flags & OPT_RESUMABLE) continue;
        char was[CONFIG_STR_MAX], now[CONFIG_STR_MAX];
        config_format(old, o, was, sizeof was);
        config_format(t->cfg, o, now, sizeof now);
        if (strcmp(was, now) == 0) continue;
        if (t->cfg->resume_override) {
            log_warn("--%s changed from '%s' (checkpoint) to '%s' (%s): --resume-override", o->name,
                     was, now, src_name[t->cfg->source[i]]);
            continue;
        }
        s = ddp_fail(DDP_ERR_INPUT,
                     "--resume %s: --%s differs: the checkpoint has '%s', this run '%s' (%s); "
                     "resume with the checkpoint's options, or pass --resume-override to change "
                     "them",
                     path, o->name, was, now, src_name[t->cfg->source[i]]);
    }
    free(old);
    return s;
}

static ddp_status_t read_attr_(hid_t f, const char *name, int64_t *v, const char *path)
{
    if (h5_attr_read_i64(f, name, v) == DDP_OK) return DDP_OK;
    return ddp_fail_override(DDP_ERR_INPUT, "%s: attribute %s is missing (damaged checkpoint)",
                             path, name);
}

/* The data must be the same (its path may change, e.g. to a node-local copy). */
static ddp_status_t compare_data_(const trainer_t *t, hid_t f, const char *path)
{
    const deck_t *d = &t->train;
    int64_t now[3] = {d->n, (int64_t)d->sample_numel, d->regression ? d->targets : d->classes};
    static const char *what[3] = {"training samples", "values per sample", "classes or targets"};
    static const char *attr[3] = {"data_samples", "data_sample_numel", "data_outputs"};
    for (int i = 0; i < 3; i++) {
        int64_t was;
        DDP_TRY(read_attr_(f, attr[i], &was, path));
        if (was == now[i]) continue;
        if (t->cfg->resume_override) {
            log_warn("the data changed: %lld %s in the checkpoint, %lld now (--resume-override)",
                     (long long)was, what[i], (long long)now[i]);
            continue;
        }
        return ddp_fail(DDP_ERR_INPUT,
                        "--resume %s: the checkpoint was trained on data with %lld %s, %s has "
                        "%lld; resume on the same data, or pass --resume-override",
                        path, (long long)was, what[i], t->cfg->inputs[0], (long long)now[i]);
    }
    return DDP_OK;
}

/* The optimizer state of every trainable tensor: /optimizer/<name>/<state>. */
static ddp_status_t read_optimizer_(checkpoint_t *c, trainer_t *t, hid_t f, const char *path, int *damaged)
{
    const model_t *m = &t->model;
    const ddp_config_t *cfg = t->cfg;
    const char *names[2];
    int nstate = optim_state_names((optimizer_kind_t)cfg->optimizer, cfg->momentum, names);
    char type[32] = "";
    h5_lock();
    hid_t g = h5_exists(f, "/optimizer") ? H5Gopen2(f, "/optimizer", H5P_DEFAULT) : -1;
    h5_unlock();
    if (g < 0) return ddp_fail(DDP_ERR_INPUT, "%s: no /optimizer group (damaged checkpoint)", path);
    ddp_status_t s = h5_attr_read_str(g, "type", type, sizeof type);
    if (s == DDP_OK) s = h5_attr_read_i64(g, "step", &c->resume.optim_steps);
    if (s != DDP_OK) {
        *damaged = 1;
        s = ddp_fail_override(DDP_ERR_INPUT,
                              "%s: /optimizer has no type or step attribute "
                              "(damaged checkpoint)",
                              path);
    }
    if (s == DDP_OK) {
        /* a fresh state (an optimizer changed with --resume-override) counts from 0 */
        s = ckpt_verify_range(path, "step of /optimizer", c->resume.optim_steps, 0,
                              c->resume.pos.step, "at most the checkpoint's step");
        if (s != DDP_OK) *damaged = 1;
    }
    const char *want = config_choice_name("optimizer", cfg->optimizer);
    if (s == DDP_OK && strcmp(type, want) != 0) {
        /* only with --resume-override (the options were compared first) */
        log_warn("--optimizer %s resumes with a fresh state: the checkpoint's optimizer is %s",
                 want, type);
        nstate = 0;
    }
    for (int k = 0; k < nstate && s == DDP_OK; k++) {
        c->optim_state[k] = calloc(m->ntrainable + 1, sizeof(float));
        if (!c->optim_state[k]) s = ddp_fail(DDP_ERR_NOMEM, "out of memory reading %s", path);
        for (int i = 0; i < m->ntensors && s == DDP_OK; i++) {
            const tensor_t *T = &m->tensors[i];
            if (T->kind != TENSOR_PARAM || T->frozen) continue;
            char name[TENSOR_NAME_MAX + 32];
            snprintf(name, sizeof name, "%s/%s", T->name, names[k]);
            int nd;
            hsize_t dims[H5S_MAX_RANK];
            weights_read_t r = weights_read_dataset(g, name, H5T_NATIVE_FLOAT, T->ndim, T->shape,
                                                    c->optim_state[k] + T->offset,
                                                    T->numel * sizeof(float), &nd, dims);
            if (r == WEIGHTS_READ_DAMAGED) *damaged = 1;
            if (r == WEIGHTS_READ_OK) {
                char full[TENSOR_NAME_MAX + 48];
                snprintf(full, sizeof full, "/optimizer/%s", name);
                s = ckpt_verify_finite(c->optim_state[k] + T->offset, T->numel,
                                       strcmp(names[k], "exp_avg_sq") == 0, full, path);
                continue;
            }
            if (r == WEIGHTS_READ_MISSING && cfg->resume_override) {
                log_warn("optimizer state %s is not in %s: it starts at zero "
                         "(--resume-override)",
                         name, path);
            } else if (r != WEIGHTS_READ_OK) {
                s = ddp_fail(DDP_ERR_INPUT, "--resume %s: optimizer state /optimizer/%s %s", path,
                             name,
                             r == WEIGHTS_READ_MISSING ? "is missing (a checkpoint of another "
                                                         "optimizer or momentum setting?)"
                             : r == WEIGHTS_READ_SHAPE ? "has another shape than the model's tensor"
                                                       : "cannot be read or fails its checksum "
                                                         "(damaged checkpoint)");
            }
        }
    }
    h5_lock();
    H5Gclose(g);
    h5_unlock();
    return s;
}

/* Every rank's BatchNorm statistics when they differ between ranks: used
 * when resuming at the same world size, else their average in /model. */
static ddp_status_t read_local_bn_(checkpoint_t *c, trainer_t *t, hid_t f, const char *path, int *damaged)
{
    const model_t *m = &t->model;
    if (c->resume.local_bn_ranks == 0) return DDP_OK;
    if (c->resume.local_bn_ranks != t->ctl->size || t->sync_bn || m->nbufs == 0) {
        snprintf(c->note, sizeof c->note,
                 "local BatchNorm statistics start from their average (the checkpoint has %lld "
                 "ranks' own)",
                 (long long)c->resume.local_bn_ranks);
        c->resume.local_bn_ranks = 0;
        return DDP_OK;
    }
    size_t n = (size_t)c->resume.local_bn_ranks * m->nbufs;
    c->local_bn = malloc(n * sizeof(float));
    if (!c->local_bn) return ddp_fail(DDP_ERR_NOMEM, "out of memory reading %s", path);
    int shape[2] = {(int)c->resume.local_bn_ranks, (int)m->nbufs}, nd;
    hsize_t dims[H5S_MAX_RANK];
    weights_read_t r = weights_read_dataset(f, "/local_bn", H5T_NATIVE_FLOAT, 2, shape, c->local_bn,
                                            n * sizeof(float), &nd, dims);
    if (r == WEIGHTS_READ_OK) return ckpt_verify_finite(c->local_bn, n, 0, "/local_bn", path);
    *damaged = r == WEIGHTS_READ_DAMAGED;
    return ddp_fail(DDP_ERR_INPUT, "%s: /local_bn is missing, mis-shaped or damaged", path);
}

/* Read and check one checkpoint; *damaged tells a damaged file (which
 * --resume auto skips) from one that does not fit this run (refused). */
static ddp_status_t read_open_(checkpoint_t *c, trainer_t *t, hid_t f, const char *path, int *damaged)
{
    ckpt_resume_t *r = &c->resume;
    const model_t *m = &t->model;
    *damaged = 1;
    char format[64] = "";
    if (h5_attr_read_str(f, "format", format, sizeof format) != DDP_OK ||
        strcmp(format, CKPT_FORMAT) != 0)
        return ddp_fail_override(
            DDP_ERR_INPUT,
            "%s is not a ddptrain checkpoint (format '%s'); weights from --save start a run with "
            "--init, they cannot resume one",
            path, format);
    int64_t version;
    DDP_TRY(read_attr_(f, "format_version", &version, path));
    if (version != CKPT_FORMAT_VERSION)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s has checkpoint format version %lld; ddptrain %s reads version %d", path,
                        (long long)version, ddp_version(), CKPT_FORMAT_VERSION);
    DDP_TRY(ckpt_verify_meta(f, path));
    DDP_TRY(read_attr_(f, "step", &r->pos.step, path));
    DDP_TRY(read_attr_(f, "epoch", &r->pos.epoch, path));
    DDP_TRY(read_attr_(f, "sample_in_epoch", &r->pos.sample_in_epoch, path));
    DDP_TRY(read_attr_(f, "world_size", &r->world_size, path));
    DDP_TRY(read_attr_(f, "batch", &r->batch, path));
    DDP_TRY(read_attr_(f, "accum", &r->accum, path));
    DDP_TRY(read_attr_(f, "local_bn_ranks", &r->local_bn_ranks, path));
    ckpt_numbers_t nums = {.step = r->pos.step,
                           .epoch = r->pos.epoch,
                           .sample_in_epoch = r->pos.sample_in_epoch,
                           .world_size = r->world_size,
                           .batch = r->batch,
                           .accum = r->accum,
                           .local_bn_ranks = r->local_bn_ranks};
    DDP_TRY(read_attr_(f, "data_samples", &nums.data_samples, path));
    DDP_TRY(ckpt_verify_numbers(&nums, path));
    char *text = malloc(CONFIG_TEXT_MAX);
    if (!text) return ddp_fail(DDP_ERR_NOMEM, "out of memory reading %s", path);
    ddp_status_t s = h5_attr_read_str(f, "config", text, CONFIG_TEXT_MAX);
    if (s != DDP_OK)
        s = ddp_fail_override(DDP_ERR_INPUT,
                              "%s: attribute config is missing (damaged "
                              "checkpoint)",
                              path);
    /* from here a problem means the checkpoint is not this run's */
    if (s == DDP_OK) *damaged = 0;
    if (s == DDP_OK) s = compare_options_(t, text, path);
    free(text);
    DDP_TRY(s);
    DDP_TRY(compare_data_(t, f, path));
    DDP_TRY(ckpt_identity_check(&c->ident, t, f, path));
    DDP_TRY(weights_host_alloc(&c->host, m));
    memset(c->host.params, 0, m->nparams * sizeof(float));
    memset(c->host.bufs, 0, m->nbufs * sizeof(float));
    DDP_TRY(weights_read_group(f, "/model", m, &c->host, "--resume", path, damaged));
    DDP_TRY(read_optimizer_(c, t, f, path, damaged));
    return read_local_bn_(c, t, f, path, damaged);
}

static void drop_contents_(checkpoint_t *c)
{
    weights_host_free(&c->host);
    for (int k = 0; k < 2; k++) {
        free(c->optim_state[k]);
        c->optim_state[k] = NULL;
    }
    free(c->local_bn);
    c->local_bn = NULL;
}

static ddp_status_t read_(checkpoint_t *c, trainer_t *t, const char *path, int *damaged)
{
    hid_t f;
    *damaged = 1;
    if (h5_open_read(path, &f) != DDP_OK)
        return ddp_fail_override(DDP_ERR_INPUT, "--resume %s: %s", path, ddp_error_message());
    ddp_status_t s = read_open_(c, t, f, path, damaged);
    h5_lock();
    H5Fclose(f);
    h5_unlock();
    if (s != DDP_OK) drop_contents_(c);
    return s;
}

/* --resume auto: the newest checkpoint in --ckpt-dir that is not damaged. */
static ddp_status_t find_and_read_(checkpoint_t *c, trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    ckpt_resume_t *r = &c->resume;
    if (strcmp(cfg->resume, "auto") != 0) {
        int damaged;
        snprintf(r->path, sizeof r->path, "%s", cfg->resume);
        DDP_TRY(read_(c, t, cfg->resume, &damaged));
        r->active = 1;
        return DDP_OK;
    }
    int64_t *steps;
    int n, odd;
    char odd_name[256] = "";
    DDP_TRY(list_(cfg->ckpt_dir, &steps, &n, &odd, odd_name, sizeof odd_name));
    if (odd)
        log_warn("--resume auto: %d file%s in %s named like a checkpoint but not as ddptrain "
                 "names them (%s%s) ignored",
                 odd, odd > 1 ? "s" : "", cfg->ckpt_dir, odd_name, odd > 1 ? ", ..." : "");
    ddp_status_t s = DDP_OK;
    int skipped = 0;
    char first_reason[1024] = "";
    for (int i = 0; i < n && !r->active; i++) {
        ckpt_path_(cfg->ckpt_dir, steps[i], r->path, sizeof r->path);
        int damaged;
        ddp_clear_error();
        s = read_(c, t, r->path, &damaged);
        if (s == DDP_OK) {
            r->active = 1;
        } else if (damaged) {
            /* a few named, the rest counted (thousands of junk files: one line) */
            if (skipped < CKPT_SKIPS_NAMED)
                log_warn("--resume auto: skipping %s: %s", r->path, ddp_error_message());
            if (!skipped++) snprintf(first_reason, sizeof first_reason, "%s", ddp_error_message());
            ddp_clear_error();
            s = DDP_OK;
        } else {
            break; /* a checkpoint of another run: refused */
        }
    }
    free(steps);
    if (skipped > CKPT_SKIPS_NAMED)
        log_warn("--resume auto: %d more unreadable or damaged checkpoint%s in %s skipped (not "
                 "listed)",
                 skipped - CKPT_SKIPS_NAMED, skipped - CKPT_SKIPS_NAMED > 1 ? "s" : "",
                 cfg->ckpt_dir);
    DDP_TRY(s);
    if (!r->active && skipped)
        return ddp_fail(DDP_ERR_INPUT,
                        "--resume auto: none of the %d checkpoints in %s can be read (newest: %s); "
                        "move them away to start at step 0, or name one with --resume FILE",
                        skipped, cfg->ckpt_dir, first_reason);
    if (!r->active) {
        r->path[0] = '\0';
        snprintf(c->note, sizeof c->note, "no checkpoint in %s: starting at step 0",
                 cfg->ckpt_dir);
    }
    return DDP_OK;
}

ddp_status_t checkpoint_resume_open(checkpoint_t *c, trainer_t *t)
{
    const ddp_config_t *cfg = t->cfg;
    if (!cfg->resume[0] && !cfg->ckpt_dir[0]) return DDP_OK;
    /* the data's fingerprint: checked on resume, stored in every checkpoint */
    ddp_status_t s = t->ctl->rank == 0 ? ckpt_identity_data(&c->ident, t) : DDP_OK;
    if (s == DDP_OK && cfg->resume[0] && t->ctl->rank == 0) s = find_and_read_(c, t);
    DDP_TRY(control_agree(t->ctl, s));
    if (!cfg->resume[0]) return DDP_OK;
    comm_desc_t d = {"resume", -1, -1};
    s = control_bcast(t->ctl, &c->resume, sizeof c->resume, 0, &d);
    if (s != DDP_OK) control_abort(t->ctl, s);
    if (!c->resume.active) return DDP_OK;
    c->last_step = c->resume.pos.step;
    snprintf(c->last_path, sizeof c->last_path, "%s", c->resume.path);
    if (t->ctl->rank == 0) ckpt_identity_adopt(&c->ident);
    if (cfg->init[0] && t->ctl->rank == 0)
        snprintf(c->note, sizeof c->note, "--init %s is not used: the checkpoint has the weights",
                 cfg->init);
    return DDP_OK;
}

void checkpoint_resume_model(checkpoint_t *c, trainer_t *t)
{
    if (c->resume.active && t->ctl->rank == 0) weights_host_upload(&c->host, &t->model);
}

ddp_status_t checkpoint_resume_state(checkpoint_t *c, trainer_t *t)
{
    const model_t *m = &t->model;
    if (!c->resume.active) return DDP_OK;
    comm_desc_t d = {"resume-optimizer", -1, -1};
    /* whether rank 0 has the state (not after an optimizer change under --resume-override) */
    int64_t have[2] = {c->optim_state[0] != NULL, c->optim_state[1] != NULL};
    ddp_status_t s = control_bcast(t->ctl, have, sizeof have, 0, &d);
    float *host = NULL;
    if (s == DDP_OK && t->ctl->rank != 0 && !zero_sharded(&t->zero)) {
        host = malloc((m->ntrainable + 1) * sizeof(float));
        s = host ? DDP_OK : ddp_fail(DDP_ERR_NOMEM, "out of memory for the optimizer state");
    }
    s = control_agree(t->ctl, s);
    for (int k = 0; k < 2 && s == DDP_OK; k++) {
        if (!have[k] || !t->opt.state[k]) continue;
        if (zero_sharded(&t->zero)) { /* each rank its shard, bucket by bucket */
            s = zero_scatter_state(&t->zero, m, t->ctl, t->ctl->rank == 0 ? c->optim_state[k] : NULL,
                                   t->opt.state[k]);
            continue;
        }
        float *buf = t->ctl->rank == 0 ? c->optim_state[k] : host;
        s = control_bcast(t->ctl, buf, m->ntrainable * sizeof(float), 0, &d);
        if (s == DDP_OK) t->compute->upload(t->opt.state[k], buf, m->ntrainable * sizeof(float));
    }
    if (s == DDP_OK) t->opt.step_count = c->resume.optim_steps;
    if (s == DDP_OK && c->resume.local_bn_ranks > 0) {
        /* rank 0 has every rank's statistics; each rank takes its own */
        size_t n = (size_t)c->resume.local_bn_ranks * m->nbufs;
        float *all = t->ctl->rank == 0 ? c->local_bn : malloc(n * sizeof(float));
        s = control_agree(t->ctl, all ? DDP_OK : ddp_fail(DDP_ERR_NOMEM, "out of memory"));
        if (s == DDP_OK) s = control_bcast(t->ctl, all, n * sizeof(float), 0, &d);
        if (s == DDP_OK)
            t->compute->upload(m->bufs, all + (size_t)t->ctl->rank * m->nbufs,
                               m->nbufs * sizeof(float));
        if (t->ctl->rank != 0) free(all);
    }
    free(host);
    drop_contents_(c);
    return s;
}

/* ---- writing ------------------------------------------------------------- */

/* BatchNorm statistics for /model: avg holds this rank's own (a host copy);
 * when they differ between ranks (--no-sync-bn) it becomes their average,
 * without touching the running model, and every rank's own go to *local
 * (rank 0, [size x nbufs]) for an exact resume.  Collective. */
static ddp_status_t bn_for_file_(trainer_t *t, float *avg, float **local)
{
    const model_t *m = &t->model;
    *local = NULL;
    if (t->sync_bn || t->ctl->size == 1 || m->nbufs == 0) return DDP_OK;
    size_t n = m->nbufs, W = (size_t)t->ctl->size;
    float *all = malloc(W * n * sizeof(float));
    ddp_status_t agreed =
        control_agree(t->ctl, all ? DDP_OK : ddp_fail(DDP_ERR_NOMEM, "out of memory"));
    if (agreed != DDP_OK) {
        free(all);
        return agreed;
    }
    comm_desc_t d = {"checkpoint-bn", -1, -1};
    ddp_status_t s = control_allgather(t->ctl, avg, all, n * sizeof(float), &d);
    if (s != DDP_OK) control_abort(t->ctl, s);
    /* the same order of additions as an all-reduce would not promise: rank order */
    for (size_t i = 0; i < n; i++) {
        double sum = 0;
        for (size_t r = 0; r < W; r++) sum += all[r * n + i];
        avg[i] = (float)(sum / (double)W);
    }
    if (t->ctl->rank == 0)
        *local = all;
    else
        free(all);
    return DDP_OK;
}

static void iso_time_(char *buf, size_t n)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, n, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Rank 0: the checkpoint's HDF5 image in memory (c->image). */
static ddp_status_t build_image_(checkpoint_t *c, trainer_t *t, const ckpt_position_t *pos, const weights_host_t *h,
                                 const float *local_bn)
{
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    const optim_t *o = &t->opt;
    size_t state_bytes = optim_state_bytes(o);
    size_t local_bytes = local_bn ? (size_t)t->ctl->size * m->nbufs * sizeof(float) : 0;
    hid_t f;
    ddp_status_t made = h5_mem_create(&f, &c->image,
                                      weights_model_bytes(m) + state_bytes + local_bytes + (256 << 10));
    /* --zero: the other ranks wait to lend their state (lend_state_) */
    if (made != DDP_OK) return zero_sharded(&t->zero) ? control_agree(t->ctl, made) : made;
    weights_meta_t meta = {
        .step = pos->step, .epoch = pos->epoch, .world_size = t->ctl->size, .cfg = cfg};
    ddp_status_t s = weights_write_model(f, m, h);
    if (s == DDP_OK) s = weights_write_attrs(f, CKPT_FORMAT, CKPT_FORMAT_VERSION, &meta);
    const deck_t *d = &t->train;
    struct {
        const char *name;
        int64_t v;
    } attrs[] = {
        {"sample_in_epoch", pos->sample_in_epoch},
        {"batch", cfg->batch},
        {"accum", cfg->accum},
        {"global_batch", cfg->batch * cfg->accum * t->ctl->size},
        {"local_bn_ranks", local_bn ? t->ctl->size : 0},
        {"data_samples", d->n},
        {"data_sample_numel", (int64_t)d->sample_numel},
        {"data_outputs", d->regression ? d->targets : d->classes},
        {"time", (int64_t)time(NULL)},
    };
    for (size_t i = 0; i < sizeof attrs / sizeof attrs[0] && s == DDP_OK; i++)
        s = h5_attr_write_i64(f, attrs[i].name, attrs[i].v);
    char when[32];
    iso_time_(when, sizeof when);
    if (s == DDP_OK) s = h5_attr_write_str(f, "time_text", when);
    if (s == DDP_OK) s = ckpt_identity_write(&c->ident, t, f);
    /* the optimizer: /optimizer/<tensor>/<state>, PyTorch's state names */
    const char *names[2];
    int nstate = optim_state_names((optimizer_kind_t)o->kind, o->momentum, names);
    /* --zero: the state bucket by bucket from its owners, so rank 0 never
     * holds more of it than one bucket beside the image */
    int sharded = zero_sharded(&t->zero);
    size_t copy = sharded ? 2 * model_max_bucket(m) : m->ntrainable;
    if (nstate && !c->state_copy && !(c->state_copy = malloc((copy + 1) * sizeof(float))))
        s = ddp_fail(DDP_ERR_NOMEM, "out of memory writing a checkpoint");
    if (sharded) s = control_agree(t->ctl, s); /* the others wait in the gathers */
    int gathering = sharded && s == DDP_OK;  /* then every gather runs, whatever fails */
    float *state = c->state_copy;
    for (int k = 0; k < nstate && (s == DDP_OK || gathering); k++) {
        if (!sharded && s == DDP_OK)
            t->compute->download(state, o->state[k], m->ntrainable * sizeof(float));
        for (int b = 0; b < m->nbuckets; b++) {
            const bucket_t *B = &m->buckets[b];
            const float *at = state - B->offset; /* element e of bucket b at at[e + B->offset] */
            if (sharded) {
                ddp_status_t g = zero_gather_bucket(&t->zero, m, t->ctl, o->state[k], b, state,
                                                    state + model_max_bucket(m));
                if (g != DDP_OK) control_abort(t->ctl, g);
            } else {
                at = state;
            }
            for (int i = 0; i < B->ntensors && s == DDP_OK; i++) {
                const tensor_t *T = &m->tensors[B->tensors[i]];
                char name[TENSOR_NAME_MAX + 48];
                snprintf(name, sizeof name, "/optimizer/%s/%s", T->name, names[k]);
                hsize_t dims[4];
                for (int j = 0; j < T->ndim; j++) dims[j] = (hsize_t)T->shape[j];
                s = weights_write_dataset(f, name, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, T->ndim, dims,
                                          at + T->offset, T->numel * sizeof(float));
            }
        }
    }
    if (s == DDP_OK) {
        /* the group exists even without state (plain SGD) */
        h5_lock();
        hid_t g = h5_exists(f, "/optimizer")
                      ? H5Gopen2(f, "/optimizer", H5P_DEFAULT)
                      : H5Gcreate2(f, "/optimizer", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        h5_unlock();
        s = g < 0 ? ddp_fail(DDP_ERR_NOMEM, "cannot create /optimizer in memory") : DDP_OK;
        if (s == DDP_OK) s = h5_attr_write_str(g, "type", config_choice_name("optimizer", o->kind));
        if (s == DDP_OK) s = h5_attr_write_i64(g, "step", o->step_count);
        if (g >= 0) {
            h5_lock();
            H5Gclose(g);
            h5_unlock();
        }
    }
    if (s == DDP_OK && local_bn) {
        hsize_t dims[2] = {(hsize_t)t->ctl->size, (hsize_t)m->nbufs};
        s = weights_write_dataset(f, "/local_bn", H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, 2, dims,
                                  local_bn, local_bytes);
    }
    /* last: it covers every attribute and dataset written above */
    if (s == DDP_OK) s = ckpt_verify_sign(f);
    if (s != DDP_OK) {
        h5_mem_abandon(f);
        return s;
    }
    return h5_mem_finish(f, &c->image);
}

/* Rank 0 (the writer thread): remove all but the newest `keep`
 * checkpoints of this run (run_id) older than step, once the checkpoint of
 * step is complete.  Other runs' checkpoints are neither counted nor
 * removed. */
static void apply_keep_(const char *dir, int64_t keep, int64_t step, const char *run_id)
{
    if (keep <= 0) return;
    int64_t *steps;
    int n;
    if (list_(dir, &steps, &n, NULL, NULL, 0) != DDP_OK) {
        log_warn("--keep: %s", ddp_error_message());
        ddp_clear_error();
        return;
    }
    int64_t kept = 1; /* the new one */
    for (int i = 0; i < n; i++) {
        if (steps[i] >= step) continue; /* the new one, and any a longer run left */
        char path[4200];
        ckpt_path_(dir, steps[i], path, sizeof path);
        if (!ckpt_identity_is_run(path, run_id)) continue; /* another run's: not ours to remove */
        if (kept < keep) {
            kept++;
            continue;
        }
        if (unlink(path) != 0 && errno != ENOENT)
            log_warn("--keep %lld: cannot remove %s: %s", (long long)keep, path, strerror(errno));
    }
    free(steps);
}

/* ---- the background writer (rank 0) --------------------------------------- */

/* One write at a time: the image built on the training thread (rank 0's
 * c->image, reused by the next checkpoint once this write is settled),
 * written by this thread while training goes on. */
struct ckpt_writer {
    pthread_t thread;
    int running;     /* started and not yet joined */
    atomic_int done; /* the thread has finished */
    /* the job */
    char path[4200], dir[CONFIG_STR_MAX];
    char run_id[CKPT_RUN_ID_LEN + 1];
    const void *image;
    size_t len;
    int64_t step, keep;
    double build_s;
    /* the result */
    ddp_status_t status;
    char message[1024];
    double write_s;
};

static void *writer_main_(void *arg)
{
    struct ckpt_writer *w = arg;
    double t0 = clock_seconds();
    w->status = atomicfile_write(w->path, w->image, w->len);
    w->write_s = clock_seconds() - t0;
    if (w->status != DDP_OK) snprintf(w->message, sizeof w->message, "%s", ddp_error_message());
    if (w->status == DDP_OK) apply_keep_(w->dir, w->keep, w->step, w->run_id);
    atomic_store(&w->done, 1);
    return NULL;
}

/* Rank 0: the finished write's line, or its failure (recorded). */
static ddp_status_t writer_report_(checkpoint_t *c)
{
    struct ckpt_writer *w = c->writer;
    if (w->status != DDP_OK)
        return ddp_fail(w->status, "checkpoint at step %lld: %s; %s%s", (long long)w->step,
                        w->message,
                        c->last_path[0] ? "the newest complete checkpoint is "
                                        : "no checkpoint of this run was completed before",
                        c->last_path);
    double total = w->build_s + w->write_s;
    log_result("checkpoint step=%lld file=%s bytes=%zu build_s=%.4f write_s=%.4f MiB/s=%.0f",
               (long long)w->step, w->path, w->len, w->build_s, w->write_s,
               (double)w->len / (1024.0 * 1024.0) / (total > 0 ? total : 1e-9));
    snprintf(c->last_path, sizeof c->last_path, "%s", w->path);
    return DDP_OK;
}

/* Rank 0: wait for the write in flight and report it. */
static ddp_status_t writer_join_(checkpoint_t *c)
{
    struct ckpt_writer *w = c->writer;
    if (!w || !w->running) return DDP_OK;
    pthread_join(w->thread, NULL);
    w->running = 0;
    return writer_report_(c);
}

int checkpoint_poll(checkpoint_t *c, trainer_t *t)
{
    struct ckpt_writer *w = c->writer;
    if (t->ctl->rank != 0 || !w || !w->running || !atomic_load(&w->done)) return 0;
    c->failed = writer_join_(c);
    return c->failed != DDP_OK;
}

ddp_status_t checkpoint_settle(checkpoint_t *c, trainer_t *t)
{
    ddp_status_t s = DDP_OK;
    if (t->ctl->rank == 0) {
        s = c->failed != DDP_OK ? c->failed : writer_join_(c);
        c->failed = DDP_OK;
    }
    return control_agree(t->ctl, s);
}

/* Rank 0: hand the image to the writer thread (or write it here if no
 * thread can be started). */
static ddp_status_t writer_start_(checkpoint_t *c, trainer_t *t, const char *path, int64_t step, double build_s)
{
    if (!c->writer && !(c->writer = calloc(1, sizeof *c->writer)))
        return ddp_fail(DDP_ERR_NOMEM, "out of memory writing a checkpoint");
    struct ckpt_writer *w = c->writer;
    snprintf(w->path, sizeof w->path, "%s", path);
    snprintf(w->dir, sizeof w->dir, "%s", t->cfg->ckpt_dir);
    snprintf(w->run_id, sizeof w->run_id, "%s", c->ident.run_id);
    w->image = c->image.data;
    w->len = c->image.len;
    w->step = step;
    w->keep = t->cfg->keep;
    w->build_s = build_s;
    w->message[0] = '\0';
    atomic_store(&w->done, 0);
    w->running = 1;
    if (pthread_create(&w->thread, NULL, writer_main_, w) != 0) {
        w->running = 0; /* no thread: write now */
        writer_main_(w);
        return writer_report_(c);
    }
    return DDP_OK;
}

/* --zero, the ranks other than 0: their shards of the optimizer state to
 * rank 0, in build_image_'s order (state, then bucket). */
static ddp_status_t lend_state_(checkpoint_t *c, trainer_t *t)
{
    const model_t *m = &t->model;
    const optim_t *o = &t->opt;
    const char *names[2];
    int nstate = optim_state_names((optimizer_kind_t)o->kind, o->momentum, names);
    if (nstate && !c->state_copy)
        c->state_copy = malloc((model_max_bucket(m) + 1) * sizeof(float));
    DDP_TRY(control_agree(t->ctl, !nstate || c->state_copy
                                      ? DDP_OK
                                      : ddp_fail(DDP_ERR_NOMEM, "out of memory writing a checkpoint")));
    for (int k = 0; k < nstate; k++)
        for (int b = 0; b < m->nbuckets; b++) {
            ddp_status_t g =
                zero_gather_bucket(&t->zero, m, t->ctl, o->state[k], b, NULL, c->state_copy);
            if (g != DDP_OK) control_abort(t->ctl, g);
        }
    return DDP_OK;
}

ddp_status_t checkpoint_write(checkpoint_t *c, trainer_t *t, const ckpt_position_t *pos)
{
    const model_t *m = &t->model;
    activity_phase(PHASE_CHECKPOINT);
    /* one write in flight at most: the previous one first */
    DDP_TRY(checkpoint_settle(c, t));
    double t0 = clock_seconds();
    /* rank 0 keeps its host copies for the next checkpoint (warm pages);
     * the other ranks only lend their BN statistics */
    weights_host_t *h = &c->host_copy;
    ddp_status_t s = DDP_OK;
    if (t->ctl->rank == 0 && !h->params) s = weights_host_alloc(h, m);
    if (t->ctl->rank != 0 && !h->bufs && !(h->bufs = malloc((m->nbufs + 1) * sizeof(float))))
        s = ddp_fail(DDP_ERR_NOMEM, "out of memory for the BatchNorm statistics");
    float *local = NULL;
    s = control_agree(t->ctl, s);
    if (s == DDP_OK) {
        if (t->ctl->rank == 0)
            weights_host_download(h, m);
        else
            t->compute->download(h->bufs, m->bufs, m->nbufs * sizeof(float));
        s = bn_for_file_(t, h->bufs, &local);
    }
    if (s == DDP_OK && t->ctl->rank != 0 && zero_sharded(&t->zero)) s = lend_state_(c, t);
    if (s == DDP_OK && t->ctl->rank == 0) {
        char path[4200];
        ckpt_path_(t->cfg->ckpt_dir, pos->step, path, sizeof path);
        s = build_image_(c, t, pos, h, local);
        if (s == DDP_OK) s = writer_start_(c, t, path, pos->step, clock_seconds() - t0);
        if (s != DDP_OK)
            s = ddp_fail_override(s, "checkpoint at step %lld: %s", (long long)pos->step,
                                  ddp_error_message());
    }
    free(local);
    s = control_agree(t->ctl, s);
    if (s == DDP_OK) c->last_step = pos->step;
    return s;
}

ddp_status_t checkpoint_save_final(checkpoint_t *c, trainer_t *t, const train_result_t *res)
{
    const ddp_config_t *cfg = t->cfg;
    if (!cfg->save[0]) return DDP_OK;
    activity_phase(PHASE_SAVE);
    DDP_TRY(trainer_average_bn_buffers(t));
    ddp_status_t s = DDP_OK;
    if (t->ctl->rank == 0) {
        weights_meta_t meta = {.step = res->steps,
                               .epoch = (res->steps + t->steps_per_epoch - 1) / t->steps_per_epoch,
                               .world_size = t->ctl->size,
                               .cfg = cfg};
        s = weights_save(cfg->save, &t->model, &meta);
        if (s == DDP_OK) log_info("saved weights to %s", cfg->save);
    }
    return control_agree(t->ctl, s);
}

void checkpoint_free(checkpoint_t *c)
{
    drop_contents_(c);
    weights_host_free(&c->host_copy);
    free(c->state_copy);
    c->state_copy = NULL;
    if (c->writer) {
        /* a write still in flight after a failure elsewhere: let it finish */
        if (c->writer->running) pthread_join(c->writer->thread, NULL);
        free(c->writer);
        c->writer = NULL;
    }
    h5_mem_image_free(&c->image);
    ckpt_lock_release(&c->lock); /* after the last write */
}
