/* render.c -- the data files and the gnuplot script of a plot, gnuplot run
 * on them, and the PNG renamed into place only when it is complete.  The
 * data files are plain columns ("?" for a value that was null, which gnuplot
 * skips: `set datafile missing`); with --keep-data they stay for a look. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "atomicfile.h"
#include "plot.h"

#define RENDER_PATH_MAX_ 4096

extern char **environ;

/* Where the files go: --keep-data's directory or a private temporary one. */
typedef struct render_dir {
    char path[RENDER_PATH_MAX_];
    int keep; /* --keep-data; else a private directory, removed with all in it */
} render_dir_t;

static const char *const phase_titles_[PLOT_NPHASES + 1] = {"data wait",    "forward",   "backward",
                                                            "exposed comm", "optimizer", "other"};

int plot_find_gnuplot(char *buf, size_t n)
{
    const char *path = getenv("PATH");
    if (!path || !*path) return -1;
    const char *p = path;
    for (;;) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        int k = len ? snprintf(buf, n, "%.*s/gnuplot", (int)len, p) : snprintf(buf, n, "./gnuplot");
        struct stat st;
        if (k > 0 && (size_t)k < n && stat(buf, &st) == 0 && S_ISREG(st.st_mode) &&
            access(buf, X_OK) == 0)
            return 0;
        if (!colon) return -1;
        p = colon + 1;
    }
}

/* ---- the working directory ---- */

static ddp_status_t dir_open_(render_dir_t *d, const char *keep)
{
    memset(d, 0, sizeof *d);
    if (keep) {
        d->keep = 1;
        if (snprintf(d->path, sizeof d->path, "%s", keep) >= (int)sizeof d->path)
            return ddp_fail(DDP_ERR_USAGE, "--keep-data %s: path too long", keep);
        if (mkdir(keep, 0755) != 0 && errno != EEXIST)
            return ddp_fail(DDP_ERR_IO, "--keep-data %s: cannot create the directory: %s", keep,
                            strerror(errno));
        struct stat st;
        if (stat(keep, &st) != 0 || !S_ISDIR(st.st_mode))
            return ddp_fail(DDP_ERR_IO, "--keep-data %s: not a directory", keep);
        return DDP_OK;
    }
    const char *tmp = getenv("TMPDIR");
    if (!tmp || !*tmp) tmp = "/tmp";
    if (snprintf(d->path, sizeof d->path, "%s/ddptrain-plot.XXXXXX", tmp) >= (int)sizeof d->path)
        return ddp_fail(DDP_ERR_IO, "TMPDIR %s: path too long", tmp);
    if (!mkdtemp(d->path))
        return ddp_fail(DDP_ERR_IO,
                        "cannot make a temporary directory in %s: %s (set TMPDIR "
                        "to a writable directory)",
                        tmp, strerror(errno));
    return DDP_OK;
}

static void dir_close_(render_dir_t *d)
{
    if (d->keep || !d->path[0]) return;
    DIR *dir = opendir(d->path);
    if (dir) {
        struct dirent *e;
        char f[RENDER_PATH_MAX_ + 300];
        while ((e = readdir(dir)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(f, sizeof f, "%s/%s", d->path, e->d_name);
            unlink(f);
        }
        closedir(dir);
    }
    if (rmdir(d->path) != 0)
        plot_warn("cannot remove the temporary directory %s: %s", d->path, strerror(errno));
}

/* Open NAME in the directory for writing; its full path into full. */
static FILE *dir_file_(render_dir_t *d, const char *name, char *full, size_t n)
{
    snprintf(full, n, "%s/%s", d->path, name);
    FILE *f = fopen(full, "w");
    if (!f)
        ddp_fail(DDP_ERR_IO, "cannot write %s: %s%s", full, strerror(errno),
                 d->keep ? " (--keep-data)" : " (set TMPDIR to a writable directory)");
    return f;
}

static ddp_status_t file_close_(FILE *f, const char *full)
{
    int bad = ferror(f);
    int e = errno;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad) return ddp_fail(DDP_ERR_IO, "writing %s failed: %s", full, strerror(e));
    return DDP_OK;
}

/* ---- text for gnuplot ---- */

/* s as a gnuplot single-quoted string (a quote doubled, control
 * characters as '?'). */
static void gp_str_(FILE *f, const char *s)
{
    fputc('\'', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '\'')
            fputs("''", f);
        else
            fputc(c < 0x20 || c == 0x7f ? '?' : c, f);
    }
    fputc('\'', f);
}

/* The data file name of the directory, quoted for the script. */
static void gp_path_(FILE *f, const render_dir_t *d, const char *name)
{
    char full[RENDER_PATH_MAX_ + 100];
    snprintf(full, sizeof full, "%s/%s", d->path, name);
    gp_str_(f, full);
}

/* A value of a data column: "?" for a missing one. */
static void gp_num_(FILE *f, double v)
{
    if (isfinite(v))
        fprintf(f, " %.17g", v);
    else
        fputs(" ?", f);
}

static void gp_terminal_(FILE *f, const plot_opts_t *o, const char *tmp_png)
{
    fprintf(f,
            "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {\n"
            "  set terminal pngcairo size %d,%d noenhanced font ',10'\n"
            "} else {\n"
            "  set terminal png size %d,%d noenhanced\n"
            "}\n",
            o->width, o->height, o->width, o->height);
    fputs("set output ", f);
    gp_str_(f, tmp_png);
    fputs("\n", f);
}

/* The common start of a panel. */
static void gp_panel_(FILE *f, const char *title, const char *xlabel, const char *ylabel)
{
    fputs("reset\nset datafile missing '?'\nset grid\nset key top right\n", f);
    fputs("set title ", f);
    gp_str_(f, title);
    fputs("\nset xlabel ", f);
    gp_str_(f, xlabel);
    fputs("\nset ylabel ", f);
    gp_str_(f, ylabel);
    fputs("\n", f);
}

/* An empty panel saying why. */
static void gp_empty_(FILE *f, const char *why)
{
    fputs("set xrange [0:1]\nset yrange [0:1]\nunset xtics\nunset ytics\nunset key\n"
          "set label 1 ",
          f);
    gp_str_(f, why);
    fputs(" at graph 0.5, 0.5 center\nplot 2 notitle\n", f);
}

/* ---- running gnuplot ---- */

/* The first line of the log that says "error" (gnuplot's messages), else
 * its last non-empty line. */
static void log_line_(const char *log, char *out, size_t n)
{
    snprintf(out, n, "no message");
    FILE *f = fopen(log, "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        char *p = line;
        while (*p == ' ' || *p == '\t' || *p == '^') p++;
        if (!*p) continue;
        snprintf(out, n, "%.300s", p);
        if (strstr(p, "error") || strstr(p, "rror:")) break;
    }
    fclose(f);
}

static ddp_status_t run_gnuplot_(const char *gnuplot, const char *script, const char *log,
                                 const render_dir_t *d)
{
    posix_spawn_file_actions_t fa;
    if (posix_spawn_file_actions_init(&fa) != 0)
        return ddp_fail(DDP_ERR_NOMEM, "cannot start gnuplot: out of memory");
    int rc = posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    if (!rc) rc = posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (!rc) rc = posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char *argv[] = {(char *)"gnuplot", (char *)script, NULL};
    pid_t pid = 0;
    if (!rc) rc = posix_spawn(&pid, gnuplot, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc) return ddp_fail(DDP_ERR_INTERNAL, "cannot start %s: %s", gnuplot, strerror(rc));
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return ddp_fail(DDP_ERR_INTERNAL, "waiting for gnuplot failed: %s", strerror(errno));
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return DDP_OK;
    char msg[400];
    log_line_(log, msg, sizeof msg);
    char how[64];
    if (WIFEXITED(status))
        snprintf(how, sizeof how, "exit %d", WEXITSTATUS(status));
    else
        snprintf(how, sizeof how, "signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
    return ddp_fail(DDP_ERR_INTERNAL, "gnuplot (%s) failed (%s): %s; %s", gnuplot, how, msg,
                    d->keep ? "its script and data are in the --keep-data directory"
                            : "run again with --keep-data DIR to see its script and data");
}

/* The temporary PNG beside the output: created now, so a missing or
 * read-only directory is found before gnuplot runs. */
static ddp_status_t out_begin_(const char *out, char *target, size_t tn, char *tmp, size_t n)
{
    struct stat st;
    if (stat(out, &st) == 0 && S_ISDIR(st.st_mode))
        return ddp_fail(DDP_ERR_USAGE, "-o %s is a directory; name a file, e.g. %s/plot.png", out,
                        out);
    DDP_TRY(atomicfile_target("-o", out, target, tn));
    atomicfile_remove_stale(target, NULL); /* of an earlier plot that was killed */
    atomicfile_tmp_name(target, tmp, n);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        char dir[RENDER_PATH_MAX_];
        snprintf(dir, sizeof dir, "%s", target);
        char *slash = strrchr(dir, '/');
        if (slash == dir)
            dir[1] = '\0';
        else if (slash)
            *slash = '\0';
        else
            snprintf(dir, sizeof dir, ".");
        return ddp_fail(DDP_ERR_IO,
                        "-o %s: cannot create a file in %s: %s; the directory must exist and be "
                        "writable",
                        out, dir, strerror(e));
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return ddp_fail(DDP_ERR_IO, "-o %s: %s: %s", out, tmp, strerror(e));
    }
    return DDP_OK;
}

/* gnuplot succeeded: the temporary file must be a PNG; then rename it. */
static ddp_status_t out_finish_(const char *out, const char *target, const char *tmp)
{
    static const unsigned char magic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    unsigned char head[8] = {0};
    FILE *f = fopen(tmp, "rb");
    size_t got = f ? fread(head, 1, sizeof head, f) : 0;
    if (f) fclose(f);
    if (got != sizeof head || memcmp(head, magic, sizeof magic) != 0) {
        unlink(tmp);
        return ddp_fail(DDP_ERR_INTERNAL,
                        "-o %s: gnuplot ended without error but wrote no PNG; %s left unchanged",
                        out, out);
    }
    return atomicfile_finish(tmp, target);
}

typedef ddp_status_t (*render_write_fn_)(render_dir_t *d, FILE *gp, const void *arg);

/* The frame of both plots: directory, temporary PNG, script (its body from
 * body()), gnuplot, rename; everything temporary removed on every path. */
static ddp_status_t render_(const plot_opts_t *o, const char *gnuplot, render_write_fn_ body,
                            const void *arg)
{
    char target[RENDER_PATH_MAX_], tmp[RENDER_PATH_MAX_ + 300];
    DDP_TRY(out_begin_(o->out, target, sizeof target, tmp, sizeof tmp));
    render_dir_t *d = malloc(sizeof *d);
    if (!d) {
        unlink(tmp);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory");
    }
    char script[RENDER_PATH_MAX_ + 100], log[RENDER_PATH_MAX_ + 100];
    ddp_status_t s = dir_open_(d, o->keep_dir);
    FILE *gp = NULL;
    if (s == DDP_OK) {
        gp = dir_file_(d, "plot.gp", script, sizeof script);
        if (!gp) s = DDP_ERR_IO;
    }
    if (s == DDP_OK) {
        fputs("# ddptrain-plot: the script gnuplot ran (data files beside it)\n", gp);
        gp_terminal_(gp, o, tmp);
        s = body(d, gp, arg);
        if (s == DDP_OK) fputs("unset multiplot\nset output\n", gp);
        ddp_status_t c = file_close_(gp, script);
        if (s == DDP_OK) s = c;
    }
    if (s == DDP_OK) {
        snprintf(log, sizeof log, "%s/gnuplot.log", d->path);
        s = run_gnuplot_(gnuplot, script, log, d);
    }
    if (s == DDP_OK)
        s = out_finish_(o->out, target, tmp);
    else
        unlink(tmp);
    dir_close_(d);
    free(d);
    return s;
}

/* ---- the runs: four panels ---- */

typedef struct runs_arg {
    const plot_opts_t *opts;
    const plot_run_t *runs;
    size_t nruns;
} runs_arg_t;

/* run<i>.dat: one line per step record; run<i>.eval.dat: per eval record. */
static ddp_status_t write_run_data_(render_dir_t *d, const plot_run_t *r, size_t i)
{
    char name[64], full[RENDER_PATH_MAX_ + 100];
    snprintf(name, sizeof name, "run%zu.dat", i + 1);
    FILE *f = dir_file_(d, name, full, sizeof full);
    if (!f) return DDP_ERR_IO;
    fprintf(f, "# run %zu: %s: %zu step records (%d config, %d resume", i + 1, r->path, r->nsteps,
            r->configs, r->resumes);
    if (r->superseded) fprintf(f, "; %zu records past a resume point replaced", r->superseded);
    fprintf(f, ")\n# step loss samples_per_s step_ms");
    for (int k = 0; k < PLOT_NPHASES; k++) fprintf(f, " %s", plot_phase_keys[k]);
    fprintf(f, " steps\n");
    for (size_t j = 0; j < r->nsteps; j++) {
        const plot_step_t *s = &r->steps[j];
        fprintf(f, "%lld", (long long)s->step);
        gp_num_(f, s->loss);
        gp_num_(f, s->samples_per_s);
        gp_num_(f, s->step_ms);
        for (int k = 0; k < PLOT_NPHASES; k++) gp_num_(f, s->phase[k]);
        gp_num_(f, s->steps);
        fputc('\n', f);
    }
    DDP_TRY(file_close_(f, full));
    snprintf(name, sizeof name, "run%zu.eval.dat", i + 1);
    f = dir_file_(d, name, full, sizeof full);
    if (!f) return DDP_ERR_IO;
    fprintf(f, "# run %zu: %s: %zu eval records\n# step val_acc val_loss\n", i + 1, r->path,
            r->nevals);
    for (size_t j = 0; j < r->nevals; j++) {
        fprintf(f, "%lld", (long long)r->evals[j].step);
        gp_num_(f, r->evals[j].val_acc);
        gp_num_(f, r->evals[j].val_loss);
        fputc('\n', f);
    }
    return file_close_(f, full);
}

/* Does the run have at least one value in this step column (0: loss,
 * 1: samples/s) or in val_acc (2)? gnuplot stops on a plot with no point. */
static int has_values_(const plot_run_t *r, int which)
{
    if (which == 2) {
        for (size_t j = 0; j < r->nevals; j++)
            if (isfinite(r->evals[j].val_acc)) return 1;
        return 0;
    }
    for (size_t j = 0; j < r->nsteps; j++)
        if (isfinite(which == 0 ? r->steps[j].loss : r->steps[j].samples_per_s)) return 1;
    return 0;
}

/* plot the column col of run<i>[suffix].dat for every run with values. */
static void gp_lines_(FILE *gp, const render_dir_t *d, const runs_arg_t *a, int which,
                      const char *suffix, int col, const char *why_none)
{
    int n = 0;
    for (size_t i = 0; i < a->nruns; i++) {
        if (!has_values_(&a->runs[i], which)) continue;
        fputs(n++ ? ", \\\n     " : "plot ", gp);
        char name[64];
        snprintf(name, sizeof name, "run%zu%s.dat", i + 1, suffix);
        gp_path_(gp, d, name);
        fprintf(gp, " using 1:%d with linespoints pt 7 ps 0.5 lc %zu title ", col, i + 1);
        gp_str_(gp, a->runs[i].name);
    }
    if (n)
        fputs("\n", gp);
    else
        gp_empty_(gp, why_none);
}

static ddp_status_t runs_body_(render_dir_t *d, FILE *gp, const void *arg)
{
    const runs_arg_t *a = arg;
    for (size_t i = 0; i < a->nruns; i++) DDP_TRY(write_run_data_(d, &a->runs[i], i));

    /* the mean step-time split, one bar per run with a split */
    char full[RENDER_PATH_MAX_ + 100];
    FILE *f = dir_file_(d, "phases.dat", full, sizeof full);
    if (!f) return DDP_ERR_IO;
    fprintf(f, "# mean ms per step over the step records with every phase, weighted by steps\n"
               "# run records");
    for (int k = 0; k < PLOT_NPHASES; k++) fprintf(f, " %s", plot_phase_keys[k]);
    fprintf(f, " other\n");
    int bars = 0;
    for (size_t i = 0; i < a->nruns; i++) {
        double means[PLOT_NPHASES + 1];
        size_t used = plot_run_phase_means(&a->runs[i], means);
        if (!used) continue;
        fputc('"', f);
        for (const char *p = a->runs[i].name; *p; p++)
            fputc(*p == '"' || (unsigned char)*p < 0x20 ? '?' : *p, f);
        fprintf(f, "\" %zu", used);
        for (int k = 0; k <= PLOT_NPHASES; k++) gp_num_(f, means[k]);
        fputc('\n', f);
        bars++;
    }
    DDP_TRY(file_close_(f, full));

    /* the title over the four panels */
    fputs("set multiplot layout 2,2 title ", gp);
    if (a->opts->title) {
        gp_str_(gp, a->opts->title);
    } else {
        char t[1024];
        size_t o = (size_t)snprintf(t, sizeof t, "ddptrain:");
        for (size_t i = 0; i < a->nruns && o < sizeof t; i++)
            o += (size_t)snprintf(t + o, sizeof t - o, "%s %s", i ? "," : "", a->runs[i].name);
        gp_str_(gp, t);
    }
    fputs("\n", gp);

    /* one step axis for the three step panels */
    int64_t last = 1;
    for (size_t i = 0; i < a->nruns; i++) {
        const plot_run_t *r = &a->runs[i];
        for (size_t j = 0; j < r->nsteps; j++)
            last = r->steps[j].step > last ? r->steps[j].step : last;
        for (size_t j = 0; j < r->nevals; j++)
            last = r->evals[j].step > last ? r->evals[j].step : last;
    }
    char xrange[64];
    snprintf(xrange, sizeof xrange, "set xrange [0:%lld]\n", (long long)last);

    gp_panel_(gp, "training loss", "step", "loss");
    fputs(xrange, gp);
    gp_lines_(gp, d, a, 0, "", 2, "no training loss (every loss is null)");

    int any_eval = 0;
    for (size_t i = 0; i < a->nruns; i++) any_eval |= a->runs[i].nevals > 0;
    gp_panel_(gp, "validation accuracy", "step", "val_acc");
    fputs(xrange, gp);
    gp_lines_(gp, d, a, 2, ".eval", 2,
              any_eval ? "no val_acc (null: a regression task)" : "no evaluation records");

    gp_panel_(gp, "throughput", "step", "samples/s (all ranks)");
    fputs(xrange, gp);
    fputs("set yrange [0:*]\n", gp);
    gp_lines_(gp, d, a, 1, "", 3, "no samples/s (every value is null)");

    gp_panel_(gp, "mean step time by phase", "", "ms per step");
    if (bars) {
        fputs("set style data histograms\nset style histogram rowstacked\n"
              "set style fill solid 0.8 border -1\nset boxwidth 0.6\nset key outside right\n"
              "set yrange [0:*]\nset xtics noenhanced\n",
              gp);
        for (int k = 0; k <= PLOT_NPHASES; k++) {
            if (k) {
                fputs(", \\\n     '' ", gp);
            } else {
                fputs("plot ", gp);
                gp_path_(gp, d, "phases.dat");
            }
            fprintf(gp, " using %d%s title ", k + 3, k ? "" : ":xtic(1)");
            gp_str_(gp, phase_titles_[k]);
        }
        fputs("\n", gp);
    } else {
        gp_empty_(gp, "no step-time split (null phase times)");
    }
    return DDP_OK;
}

ddp_status_t plot_render_runs(const plot_opts_t *opts, const char *gnuplot, const plot_run_t *runs,
                              size_t nruns)
{
    runs_arg_t a = {.opts = opts, .runs = runs, .nruns = nruns};
    return render_(opts, gnuplot, runs_body_, &a);
}

/* ---- weak scaling: one panel ---- */

typedef struct scaling_arg {
    const plot_opts_t *opts;
    const plot_scaling_t *sc;
} scaling_arg_t;

/* The panel of efficiency against ranks (samples_per_s rows). */
static ddp_status_t ranks_panel_(render_dir_t *d, FILE *gp, const scaling_arg_t *a,
                                 const char *title)
{
    int64_t max_ranks = 1;
    double max_eff = 1.0;
    for (size_t i = 0; i < a->sc->n; i++) {
        const plot_scaling_line_t *l = &a->sc->lines[i];
        char name[64], full[RENDER_PATH_MAX_ + 100];
        snprintf(name, sizeof name, "scaling%zu.dat", i + 1);
        FILE *f = dir_file_(d, name, full, sizeof full);
        if (!f) return DDP_ERR_IO;
        fprintf(f,
                "# %s: weak-scaling efficiency = median samples/s at N ranks / (N x median at "
                "1 rank)\n# ranks median_samples_per_s efficiency\n",
                l->label);
        for (size_t j = 0; j < l->n; j++) {
            fprintf(f, "%lld", (long long)l->pts[j].ranks);
            gp_num_(f, l->pts[j].median);
            gp_num_(f, l->pts[j].efficiency);
            fputc('\n', f);
            if (l->pts[j].ranks > max_ranks) max_ranks = l->pts[j].ranks;
            if (l->pts[j].efficiency > max_eff) max_eff = l->pts[j].efficiency;
        }
        DDP_TRY(file_close_(f, full));
    }
    gp_panel_(gp, title, "ranks", "efficiency (samples/s at N ranks / (N x at 1 rank))");
    /* the ideal (1.0) inside the frame, not on its border */
    fprintf(gp, "set logscale x 2\nset xrange [0.8:%g]\nset yrange [0:%g]\nset key bottom left\n",
            (double)max_ranks * 1.25, max_eff * 1.1);
    fputs("plot 1 with lines dt 2 lc 'gray' title 'ideal'", gp);
    for (size_t i = 0; i < a->sc->n; i++) {
        char name[64];
        snprintf(name, sizeof name, "scaling%zu.dat", i + 1);
        fputs(", \\\n     ", gp);
        gp_path_(gp, d, name);
        fprintf(gp, " using 1:3 with linespoints pt 7 lc %zu title ", i + 1);
        gp_str_(gp, a->sc->lines[i].label);
    }
    fputs("\n", gp);
    return DDP_OK;
}

/* A link rate for a tic: "100 Mbit/s", "10 Gbit/s", "unlimited". */
static void rate_label_(char *buf, size_t n, double bits)
{
    if (!isfinite(bits))
        snprintf(buf, n, "unlimited");
    else if (bits >= 1e9)
        snprintf(buf, n, "%g Gbit/s", bits / 1e9);
    else if (bits >= 1e6)
        snprintf(buf, n, "%g Mbit/s", bits / 1e6);
    else
        snprintf(buf, n, "%g kbit/s", bits / 1e3);
}

static int cmp_double_(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The panel of efficiency against the link rate (bench_cluster.sh's rows):
 * the rates of all lines as evenly spaced categories, slowest first,
 * unlimited last. */
static ddp_status_t links_panel_(render_dir_t *d, FILE *gp, const scaling_arg_t *a,
                                 const char *title)
{
    size_t total = 0;
    for (size_t i = 0; i < a->sc->nlinks; i++) total += a->sc->links[i].n;
    double *rates = malloc((total ? total : 1) * sizeof *rates);
    if (!rates) return ddp_fail(DDP_ERR_NOMEM, "out of memory");
    size_t nr = 0;
    for (size_t i = 0; i < a->sc->nlinks; i++)
        for (size_t j = 0; j < a->sc->links[i].n; j++)
            rates[nr++] = a->sc->links[i].pts[j].rate_bits;
    qsort(rates, nr, sizeof *rates, cmp_double_);
    size_t u = 0;
    for (size_t k = 0; k < nr; k++)
        if (!u || rates[k] != rates[u - 1]) rates[u++] = rates[k];
    double max_eff = 1.0;
    ddp_status_t s = DDP_OK;
    for (size_t i = 0; i < a->sc->nlinks && s == DDP_OK; i++) {
        const plot_link_line_t *l = &a->sc->links[i];
        char name[64], full[RENDER_PATH_MAX_ + 100];
        snprintf(name, sizeof name, "links%zu.dat", i + 1);
        FILE *f = dir_file_(d, name, full, sizeof full);
        if (!f) {
            s = DDP_ERR_IO;
            break;
        }
        fprintf(f,
                "# %s: weak-scaling efficiency (1-rank step / step) against the link rate\n"
                "# category rate_bit_per_s efficiency\n",
                l->label);
        for (size_t j = 0; j < l->n; j++) {
            size_t x = 0;
            while (rates[x] != l->pts[j].rate_bits) x++;
            fprintf(f, "%zu", x);
            gp_num_(f, l->pts[j].rate_bits);
            gp_num_(f, l->pts[j].efficiency);
            fputc('\n', f);
            if (l->pts[j].efficiency > max_eff) max_eff = l->pts[j].efficiency;
        }
        s = file_close_(f, full);
    }
    if (s == DDP_OK) {
        gp_panel_(gp, title, "link rate of each node", "efficiency (1-rank step / step)");
        fprintf(gp, "set xrange [-0.5:%g]\nset yrange [0:%g]\nset key bottom right\nset xtics (",
                (double)u - 0.5, max_eff * 1.1);
        for (size_t k = 0; k < u; k++) {
            char lab[64];
            rate_label_(lab, sizeof lab, rates[k]);
            fprintf(gp, "%s\"%s\" %zu", k ? ", " : "", lab, k);
        }
        fputs(")\nplot 1 with lines dt 2 lc 'gray' title 'ideal'", gp);
        for (size_t i = 0; i < a->sc->nlinks; i++) {
            char name[64];
            snprintf(name, sizeof name, "links%zu.dat", i + 1);
            fputs(", \\\n     ", gp);
            gp_path_(gp, d, name);
            fprintf(gp, " using 1:3 with linespoints pt 7 lc %zu title ", i + 1);
            gp_str_(gp, a->sc->links[i].label);
        }
        fputs("\n", gp);
    }
    free(rates);
    return s;
}

static ddp_status_t scaling_body_(render_dir_t *d, FILE *gp, const void *arg)
{
    const scaling_arg_t *a = arg;
    const char *title = a->opts->title ? a->opts->title : "weak-scaling efficiency";
    if (a->sc->n && a->sc->nlinks) { /* both kinds: two panels side by side */
        fputs("set multiplot layout 1,2 title ", gp);
        gp_str_(gp, title);
        fputs("\n", gp);
        DDP_TRY(ranks_panel_(d, gp, a, "against ranks (samples/s)"));
        return links_panel_(d, gp, a, "against the link rate (simulated nodes)");
    }
    if (a->sc->n) return ranks_panel_(d, gp, a, title);
    return links_panel_(d, gp, a,
                        a->opts->title ? a->opts->title
                                       : "weak-scaling efficiency against the link rate");
}

ddp_status_t plot_render_scaling(const plot_opts_t *opts, const char *gnuplot,
                                 const plot_scaling_t *sc)
{
    scaling_arg_t a = {.opts = opts, .sc = sc};
    return render_(opts, gnuplot, scaling_body_, &a);
}
