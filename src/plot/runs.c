/* runs.c -- a metrics file (ddptrain --metrics) as one run: its step and
 * eval records in order, the records a resumed run did again replaced by
 * the new ones (see plot.h). */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plot.h"

const char *const plot_phase_keys[PLOT_NPHASES] = {"data_wait_ms", "forward_ms", "backward_ms",
                                                   "comm_exposed_ms", "optimizer_ms"};

/* A number member: its value, NAN for null or absent (*present 0 when
 * absent); -1 for any other kind (message recorded). */
static int number_(const plot_json_obj_t *o, const char *key, double *v, const char *path,
                   size_t line)
{
    const plot_json_field_t *f = plot_json_get(o, key);
    *v = NAN;
    if (!f || f->kind == PLOT_JSON_NULL) return 0;
    if (f->kind != PLOT_JSON_NUM) {
        ddp_fail(DDP_ERR_INPUT, "%s:%zu: \"%s\" is %s, expected a number or null", path, line, key,
                 plot_json_kind_name(f->kind));
        return -1;
    }
    *v = f->num;
    return 0;
}

/* The record's "step": an integer >= 0, required. */
static int step_of_(const plot_json_obj_t *o, const char *type, int64_t *step, const char *path,
                    size_t line)
{
    const plot_json_field_t *f = plot_json_get(o, "step");
    if (!f || f->kind != PLOT_JSON_NUM || f->num < 0 || f->num > 9e15 || f->num != floor(f->num)) {
        if (!f)
            ddp_fail(DDP_ERR_INPUT, "%s:%zu: a \"%s\" record without \"step\" (an integer)", path,
                     line, type);
        else if (f->kind != PLOT_JSON_NUM)
            ddp_fail(DDP_ERR_INPUT, "%s:%zu: a \"%s\" record whose \"step\" is %s, not an integer",
                     path, line, type, plot_json_kind_name(f->kind));
        else
            ddp_fail(DDP_ERR_INPUT,
                     "%s:%zu: a \"%s\" record whose \"step\" is %g, not an integer >= 0", path,
                     line, type, f->num);
        return -1;
    }
    *step = (int64_t)f->num;
    return 0;
}

static int grow_(void **p, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap) return 0;
    size_t n = *cap ? *cap * 2 : 64;
    while (n < need) n *= 2;
    void *q = realloc(*p, n * size);
    if (!q) {
        ddp_fail(DDP_ERR_NOMEM, "out of memory reading a metrics file (%zu records)", need);
        return -1;
    }
    *p = q;
    *cap = n;
    return 0;
}

static int add_step_(plot_run_t *run, const plot_json_obj_t *o, const char *path, size_t line)
{
    plot_step_t st;
    if (step_of_(o, "step", &st.step, path, line) != 0) return -1;
    if (number_(o, "loss", &st.loss, path, line) != 0 ||
        number_(o, "samples_per_s", &st.samples_per_s, path, line) != 0 ||
        number_(o, "step_ms", &st.step_ms, path, line) != 0 ||
        number_(o, "steps", &st.steps, path, line) != 0)
        return -1;
    for (int k = 0; k < PLOT_NPHASES; k++)
        if (number_(o, plot_phase_keys[k], &st.phase[k], path, line) != 0) return -1;
    if (run->nsteps > 0 && st.step <= run->steps[run->nsteps - 1].step)
        plot_warn("%s:%zu: step %lld comes after step %lld without a \"resume\" record "
                  "(records of another training appended?); plotted in file order",
                  path, line, (long long)st.step, (long long)run->steps[run->nsteps - 1].step);
    if (grow_((void **)&run->steps, &run->cap_steps, run->nsteps + 1, sizeof st) != 0) return -1;
    run->steps[run->nsteps++] = st;
    return 0;
}

static int add_eval_(plot_run_t *run, const plot_json_obj_t *o, const char *path, size_t line)
{
    plot_eval_t ev;
    if (step_of_(o, "eval", &ev.step, path, line) != 0) return -1;
    if (number_(o, "val_acc", &ev.val_acc, path, line) != 0 ||
        number_(o, "val_loss", &ev.val_loss, path, line) != 0)
        return -1;
    if (grow_((void **)&run->evals, &run->cap_evals, run->nevals + 1, sizeof ev) != 0) return -1;
    run->evals[run->nevals++] = ev;
    return 0;
}

/* A resume at step S: the earlier records past S are done again after it. */
static int resume_(plot_run_t *run, const plot_json_obj_t *o, const char *path, size_t line)
{
    int64_t at;
    if (step_of_(o, "resume", &at, path, line) != 0) return -1;
    while (run->nsteps > 0 && run->steps[run->nsteps - 1].step > at) {
        run->nsteps--;
        run->superseded++;
    }
    while (run->nevals > 0 && run->evals[run->nevals - 1].step > at) {
        run->nevals--;
        run->superseded++;
    }
    run->resumes++;
    return 0;
}

static void name_(plot_run_t *run, const char *path)
{
    const char *end = path + strlen(path);
    while (end > path && end[-1] == '/') end--; /* "dir/m.jsonl/" is m.jsonl */
    const char *base = end;
    while (base > path && base[-1] != '/') base--;
    size_t n = (size_t)(end - base);
    if (n == 0) { /* "/" */
        base = path;
        n = strlen(path);
    }
    if (n >= sizeof run->name) n = sizeof run->name - 1;
    memcpy(run->name, base, n);
    run->name[n] = '\0';
}

ddp_status_t plot_run_read(const char *path, plot_run_t *run)
{
    memset(run, 0, sizeof *run);
    run->path = path;
    name_(run, path);
    FILE *f = fopen(path, "r");
    if (!f) return ddp_fail(DDP_ERR_IO, "%s: cannot open it: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        fclose(f);
        return ddp_fail(DDP_ERR_IO, "%s: is a directory, not a metrics file", path);
    }
    plot_json_obj_t *obj = malloc(sizeof *obj);
    if (!obj) {
        fclose(f);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory");
    }
    char *buf = NULL;
    size_t cap = 0, line = 0;
    ssize_t len;
    ddp_status_t s = DDP_OK;
    errno = 0;
    while ((len = getline(&buf, &cap, f)) >= 0) {
        line++;
        int cut = len == 0 || buf[len - 1] != '\n';
        char err[256];
        if (plot_json_parse(buf, (size_t)len, obj, err, sizeof err) != 0) {
            s = ddp_fail(DDP_ERR_INPUT, "%s:%zu: not a JSON object: %s%s", path, line, err,
                         cut ? " (the last line, cut short: no newline)" : "");
            break;
        }
        const plot_json_field_t *type = plot_json_get(obj, "type");
        if (!type || type->kind != PLOT_JSON_STR) {
            s = ddp_fail(DDP_ERR_INPUT,
                         "%s:%zu: a JSON object without a \"type\" string: not a ddptrain "
                         "--metrics record",
                         path, line);
            break;
        }
        int rc = 0;
        if (!strcmp(type->str, "step"))
            rc = add_step_(run, obj, path, line);
        else if (!strcmp(type->str, "eval"))
            rc = add_eval_(run, obj, path, line);
        else if (!strcmp(type->str, "resume"))
            rc = resume_(run, obj, path, line);
        else if (!strcmp(type->str, "config"))
            run->configs++;
        /* "summary" and types of later versions: nothing to plot */
        if (rc != 0) {
            s = DDP_ERR_INPUT;
            break;
        }
        errno = 0;
    }
    if (s == DDP_OK && ferror(f))
        s = ddp_fail(DDP_ERR_IO, "%s: reading it failed after line %zu: %s", path, line,
                     strerror(errno ? errno : EIO));
    free(buf);
    free(obj);
    fclose(f);
    if (s == DDP_OK && line == 0)
        s = ddp_fail(DDP_ERR_INPUT, "%s: empty: no records (a metrics file of ddptrain --metrics)",
                     path);
    else if (s == DDP_OK && run->nsteps == 0)
        s = ddp_fail(DDP_ERR_INPUT,
                     "%s: no \"step\" records in %zu line%s: nothing to plot (ddptrain writes one "
                     "per progress line: --log-every N, N > 0)",
                     path, line, line == 1 ? "" : "s");
    if (s != DDP_OK) plot_run_free(run);
    return s;
}

void plot_run_free(plot_run_t *run)
{
    free(run->steps);
    free(run->evals);
    run->steps = NULL;
    run->evals = NULL;
    run->nsteps = run->nevals = run->cap_steps = run->cap_evals = 0;
}

size_t plot_run_phase_means(const plot_run_t *run, double means[PLOT_NPHASES + 1])
{
    double sum[PLOT_NPHASES + 1] = {0}, weight = 0;
    size_t used = 0;
    for (size_t i = 0; i < run->nsteps; i++) {
        const plot_step_t *st = &run->steps[i];
        int ok = isfinite(st->step_ms);
        double parts = 0;
        for (int k = 0; k < PLOT_NPHASES; k++) {
            ok = ok && isfinite(st->phase[k]);
            parts += st->phase[k];
        }
        if (!ok) continue;
        double w = isfinite(st->steps) && st->steps > 0 ? st->steps : 1;
        for (int k = 0; k < PLOT_NPHASES; k++) sum[k] += w * st->phase[k];
        double other = st->step_ms - parts;
        sum[PLOT_NPHASES] += w * (other > 0 ? other : 0);
        weight += w;
        used++;
    }
    for (int k = 0; k <= PLOT_NPHASES; k++) means[k] = used ? sum[k] / weight : NAN;
    return used;
}
