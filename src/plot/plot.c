/* plot.c -- ddptrain-plot: PNG plots of ddptrain metrics files (loss,
 * validation accuracy, throughput, step-time split; several files overlaid
 * as runs) and of a benchmark results.csv (weak-scaling efficiency against
 * ranks and against the link rate of simulated nodes).
 * main(), the options and the one place errors are reported. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pathclash.h"
#include "plot.h"
#include "version.h"

static const char usage_[] =
    "Usage: ddptrain-plot METRICS.jsonl [MORE.jsonl ...] -o OUT.png [options]\n"
    "       ddptrain-plot --scaling results.csv -o OUT.png [options]\n"
    "\n"
    "Draws one PNG with gnuplot.  From metrics files (ddptrain --metrics FILE), four\n"
    "panels: training loss against step, validation accuracy (eval records) against\n"
    "step, samples/s against step, and a stacked bar per run of the mean time per step\n"
    "by phase (data wait, forward, backward, exposed communication, optimizer, other =\n"
    "step_ms minus those).  Every file is one run, named by its basename: all of its\n"
    "records are one training history, also when it holds several runs appended (a\n"
    "resumed run starts with another \"config\" record; a \"resume\" record at step S\n"
    "replaces the earlier records past S).  Null values are left out, not drawn as 0.\n"
    "\n"
    "With --scaling, the weak-scaling efficiency of a benchmark results.csv (header\n"
    "" PLOT_SCALING_HEADER "): median samples_per_s at N ranks / (N x the\n"
    "median at 1 rank), one line per case and implementation against ranks; rows of\n"
    "other metrics are ignored, a case without a 1-rank row is skipped with a warning.\n"
    "The weak_scaling_efficiency rows of bench_cluster.sh (case cluster-MODEL-LAYOUT,\n"
    "implementation NAME@RATE) are drawn against the link rate, one line per model,\n"
    "layout and NAME; a file with both kinds gets both panels, side by side.\n"
    "\n"
    "Options:\n"
    "  -o, --output FILE   the PNG to write (required); written to a temporary file\n"
    "                      beside it and renamed when complete\n"
    "  --title TEXT        the plot's title (default: the files' names)\n"
    "  --size WxH          the image size in pixels (default 1200x900)\n"
    "  --keep-data DIR     leave the data files and the gnuplot script in DIR (made\n"
    "                      if missing): run<i>.dat, run<i>.eval.dat, phases.dat or\n"
    "                      scaling<i>.dat, links<i>.dat, plot.gp, gnuplot.log\n"
    "  -h, --help          this text\n"
    "  -V, --version       the version\n"
    "\n"
    "Exit status: 0 written; 2 a usage error (also -o or --keep-data's files naming\n"
    "an input, or an output that is no regular file); 3 a malformed file (the message\n"
    "names FILE:LINE), one without step records, or an input that is no regular file\n"
    "(a FIFO, a device: refused unopened); 4 a file that cannot be read, or an\n"
    "output directory that is missing or not writable; 69 gnuplot is not installed;\n"
    "70 gnuplot failed.  On any error the output file is left as it was.\n";

void plot_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("ddptrain-plot: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* "--name value" or "--name=value" at argv[*i] (see prep_opt). */
static const char *opt_(int argc, char **argv, int *i, const char *name, ddp_status_t *s)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0) return NULL;
    if (a[n] == '=') return a + n + 1;
    if (a[n] != '\0') return NULL;
    if (*i + 1 >= argc) {
        *s = ddp_fail(DDP_ERR_USAGE, "option %s needs a value", name);
        return NULL;
    }
    *i += 1;
    return argv[*i];
}

static ddp_status_t size_(const char *v, plot_opts_t *o)
{
    char *end;
    long w = strtol(v, &end, 10), h = 0;
    if (end != v && (*end == 'x' || *end == 'X')) {
        const char *hs = end + 1;
        h = strtol(hs, &end, 10);
        if (end == hs) h = 0;
    }
    if (*end != '\0' || w < 100 || w > 10000 || h < 100 || h > 10000)
        return ddp_fail(DDP_ERR_USAGE,
                        "--size '%s': expected WIDTHxHEIGHT in pixels, each 100 to 10000 "
                        "(e.g. 1200x900)",
                        v);
    o->width = (int)w;
    o->height = (int)h;
    return DDP_OK;
}

typedef struct plot_args {
    plot_opts_t opts;
    const char *scaling;
    const char **files;
    int nfiles;
} plot_args_t;

static ddp_status_t check_paths_(const plot_args_t *a);

static ddp_status_t parse_(int argc, char **argv, plot_args_t *a)
{
    ddp_status_t s = DDP_OK;
    a->opts.width = 1200;
    a->opts.height = 900;
    for (int i = 1; i < argc; i++) {
        const char *v;
        if (!strcmp(argv[i], "--")) {
            for (i++; i < argc; i++) a->files[a->nfiles++] = argv[i];
            break;
        }
        if ((v = opt_(argc, argv, &i, "-o", &s)) || (v = opt_(argc, argv, &i, "--output", &s)))
            a->opts.out = v;
        else if ((v = opt_(argc, argv, &i, "--title", &s)))
            a->opts.title = v;
        else if ((v = opt_(argc, argv, &i, "--size", &s)))
            DDP_TRY(size_(v, &a->opts));
        else if ((v = opt_(argc, argv, &i, "--keep-data", &s)))
            a->opts.keep_dir = v;
        else if ((v = opt_(argc, argv, &i, "--scaling", &s)))
            a->scaling = v;
        else if (s != DDP_OK)
            return s;
        else if (argv[i][0] == '-' && argv[i][1] != '\0')
            return ddp_fail(DDP_ERR_USAGE, "unknown option '%s'; see ddptrain-plot --help",
                            argv[i]);
        else
            a->files[a->nfiles++] = argv[i];
        if (s != DDP_OK) return s;
    }
    if (!a->opts.out) return ddp_fail(DDP_ERR_USAGE, "no output: -o OUT.png is required");
    if (a->scaling && a->nfiles)
        return ddp_fail(DDP_ERR_USAGE,
                        "--scaling takes one results.csv, not metrics files too "
                        "('%s'): make two plots",
                        a->files[0]);
    if (!a->scaling && !a->nfiles)
        return ddp_fail(DDP_ERR_USAGE,
                        "no input: give metrics files (ddptrain --metrics) or --scaling FILE");
    return check_paths_(a);
}

/* "<prefix><digits><suffix>" */
static int numbered_(const char *name, const char *prefix, const char *suffix)
{
    size_t lp = strlen(prefix), ls = strlen(suffix), n = strlen(name);
    if (n <= lp + ls || strncmp(name, prefix, lp) || strcmp(name + n - ls, suffix)) return 0;
    for (size_t i = lp; i < n - ls; i++)
        if (name[i] < '0' || name[i] > '9') return 0;
    return 1;
}

/* The names render.c writes in --keep-data DIR. */
static int keep_data_name_(const char *name)
{
    return !strcmp(name, "plot.gp") || !strcmp(name, "gnuplot.log") ||
           !strcmp(name, "phases.dat") || numbered_(name, "run", ".dat") ||
           numbered_(name, "run", ".eval.dat") || numbered_(name, "scaling", ".dat") ||
           numbered_(name, "links", ".dat");
}

/* Every input against -o and --keep-data's files, and none of them a FIFO
 * or device (pathclash.h): before gnuplot is looked for or anything opened. */
static ddp_status_t check_paths_(const plot_args_t *a)
{
    int n = 0;
    pathclash_file_t *f = calloc((size_t)a->nfiles + 3, sizeof *f);
    char(*roles)[32] = calloc((size_t)a->nfiles + 1, sizeof *roles);
    if (!f || !roles) {
        free(f);
        free(roles);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory");
    }
    f[n++] = (pathclash_file_t){"-o", a->opts.out, PATHCLASH_OUT, NULL, 0};
    f[n++] = (pathclash_file_t){"--keep-data", a->opts.keep_dir, PATHCLASH_DIR, keep_data_name_, 0};
    f[n++] = (pathclash_file_t){"--scaling", a->scaling, PATHCLASH_IN, NULL, 0};
    for (int i = 0; i < a->nfiles; i++) {
        snprintf(roles[i], sizeof roles[i], "input file %d", i + 1);
        f[n++] = (pathclash_file_t){roles[i], a->files[i], PATHCLASH_IN, NULL, 0};
    }
    ddp_status_t s = pathclash_check(f, n);
    free(f);
    free(roles);
    return s;
}

/* Two runs of one basename (a/m.jsonl, b/m.jsonl): name them by path. */
static void unique_names_(plot_run_t *runs, int n)
{
    for (int i = 0; i < n; i++) {
        int dup = 0;
        for (int j = 0; j < n; j++) dup |= j != i && !strcmp(runs[i].name, runs[j].name);
        if (dup) snprintf(runs[i].name, sizeof runs[i].name, "%s", runs[i].path);
    }
}

static ddp_status_t plot_main_(plot_args_t *a, const char *gnuplot)
{
    if (a->scaling) {
        plot_scaling_t sc;
        DDP_TRY(plot_scaling_read(a->scaling, &sc));
        ddp_status_t s = plot_render_scaling(&a->opts, gnuplot, &sc);
        plot_scaling_free(&sc);
        return s;
    }
    plot_run_t *runs = calloc((size_t)a->nfiles, sizeof *runs);
    if (!runs) return ddp_fail(DDP_ERR_NOMEM, "out of memory");
    ddp_status_t s = DDP_OK;
    int n = 0;
    for (; n < a->nfiles && s == DDP_OK; n++) s = plot_run_read(a->files[n], &runs[n]);
    if (s == DDP_OK) {
        unique_names_(runs, n);
        s = plot_render_runs(&a->opts, gnuplot, runs, (size_t)n);
    }
    for (int i = 0; i < n; i++) plot_run_free(&runs[i]);
    free(runs);
    return s;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            fputs(usage_, stdout);
            return 0;
        }
        if (!strcmp(argv[i], "-V") || !strcmp(argv[i], "--version")) {
            printf("ddptrain-plot %s\n", ddp_version());
            return 0;
        }
    }
    plot_args_t a = {0};
    a.files = calloc((size_t)argc, sizeof *a.files);
    if (!a.files) {
        fprintf(stderr, "ddptrain-plot: error: out of memory\n");
        return ddp_exit_code(DDP_ERR_NOMEM);
    }
    ddp_status_t s = parse_(argc, argv, &a);
    char gnuplot[4096];
    if (s == DDP_OK && plot_find_gnuplot(gnuplot, sizeof gnuplot) != 0) {
        fprintf(stderr,
                "ddptrain-plot: error: gnuplot is not installed (not found on PATH); install "
                "it (Debian/Ubuntu: apt-get install gnuplot-nox) or, on a cluster, module load "
                "gnuplot\n");
        free(a.files);
        return PLOT_EXIT_NO_GNUPLOT;
    }
    if (s == DDP_OK) s = plot_main_(&a, gnuplot);
    free(a.files);
    if (s != DDP_OK) {
        fprintf(stderr, "ddptrain-plot: error: %s\n", ddp_error_message());
        return ddp_exit_code(s);
    }
    return 0;
}
