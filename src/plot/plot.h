/* plot.h -- ddptrain-plot: the pieces of the plotting tool.  A metrics file
 * (ddptrain --metrics) is read into one run (runs.c) through a reader of one
 * JSON object per line (json.c); a benchmark results.csv into weak-scaling
 * lines (scaling.c); render.c writes the data files and the gnuplot script,
 * runs gnuplot and renames the finished PNG into place.  Functions return a
 * status with one message recorded (status.h); warnings go to stderr with
 * plot_warn. */
#ifndef DDP_PLOT_H
#define DDP_PLOT_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Exit code when gnuplot is not installed (sysexits' EX_UNAVAILABLE); a
 * gnuplot that fails exits with DDP_ERR_INTERNAL's 70. */
#define PLOT_EXIT_NO_GNUPLOT 69

void plot_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- one JSON object per line (json.c) ---- */

typedef enum plot_json_kind {
    PLOT_JSON_NULL,
    PLOT_JSON_NUM,
    PLOT_JSON_STR,
    PLOT_JSON_BOOL,
    PLOT_JSON_OBJECT,
    PLOT_JSON_ARRAY
} plot_json_kind_t;

#define PLOT_JSON_MAX_FIELDS 96
#define PLOT_JSON_KEY_MAX    64
#define PLOT_JSON_STR_MAX    64

/* A top-level member: numbers as doubles, strings cut to PLOT_JSON_STR_MAX-1
 * bytes; nested objects and arrays are checked, not kept. */
typedef struct plot_json_field {
    char key[PLOT_JSON_KEY_MAX];
    plot_json_kind_t kind;
    double num;
    char str[PLOT_JSON_STR_MAX];
} plot_json_field_t;

typedef struct plot_json_obj {
    plot_json_field_t field[PLOT_JSON_MAX_FIELDS];
    int n; /* members kept (the first PLOT_JSON_MAX_FIELDS) */
} plot_json_obj_t;

/* Parse text[0..len) as exactly one JSON object (RFC 8259; surrounding
 * blanks allowed).  0 on success; -1 with what is wrong and where (a
 * 1-based column) in err. */
int plot_json_parse(const char *text, size_t len, plot_json_obj_t *obj, char *err, size_t errn);
/* The member named key (the last one when repeated), or NULL. */
const plot_json_field_t *plot_json_get(const plot_json_obj_t *obj, const char *key);
const char *plot_json_kind_name(plot_json_kind_t k);

/* ---- a metrics file as one run (runs.c) ---- */

/* The phases of a step record's step time, in the bar's order; "other" is
 * step_ms minus their sum. */
#define PLOT_NPHASES 5
extern const char *const plot_phase_keys[PLOT_NPHASES];

/* One "step" record; NAN where the record has null or lacks the key. */
typedef struct plot_step {
    int64_t step;
    double loss, samples_per_s, step_ms;
    double phase[PLOT_NPHASES];
    double steps; /* steps in the record's window (its weight in the means) */
} plot_step_t;

typedef struct plot_eval {
    int64_t step;
    double val_acc, val_loss;
} plot_eval_t;

typedef struct plot_run {
    const char *path; /* as given */
    char name[256];   /* its legend: the file's basename */
    plot_step_t *steps;
    size_t nsteps, cap_steps;
    plot_eval_t *evals;
    size_t nevals, cap_evals;
    int configs, resumes;
    size_t superseded; /* records after a resume point, replaced by the resumed run's */
} plot_run_t;

/* Read every record of the metrics file at path as one training history:
 * step records in file order, except that a "resume" record at step S drops
 * the earlier records with a step above S (the resumed run does those steps
 * again).  DDP_ERR_IO when the file cannot be read; DDP_ERR_INPUT, naming
 * FILE:LINE, for a line that is not a JSON object with a "type" string, a
 * step or eval record without an integer "step", a value of the wrong kind,
 * or a file without step records. */
ddp_status_t plot_run_read(const char *path, plot_run_t *run);
void plot_run_free(plot_run_t *run);

/* Mean per-step time of each phase and of "other" over the step records
 * that have step_ms and all phases, weighted by their window's steps; the
 * number of such records (0: no split to show). */
size_t plot_run_phase_means(const plot_run_t *run, double means[PLOT_NPHASES + 1]);

/* ---- weak scaling from bench/results.csv (scaling.c) ---- */

#define PLOT_SCALING_HEADER "case,implementation,ranks,metric,min,median,max,unit"

typedef struct plot_scaling_point {
    int64_t ranks;
    double median;     /* samples/s, all ranks */
    double efficiency; /* median / (ranks * median at 1 rank) */
} plot_scaling_point_t;

typedef struct plot_scaling_line {
    char label[256];           /* "CASE IMPLEMENTATION" */
    plot_scaling_point_t *pts; /* by ranks, increasing */
    size_t n;
} plot_scaling_line_t;

/* A point of bench_cluster.sh's rows: the efficiency at one link rate. */
typedef struct plot_link_point {
    double rate_bits; /* bit/s; INFINITY for "unlimited" */
    double efficiency;
} plot_link_point_t;

typedef struct plot_link_line {
    char label[256];        /* "MODEL-LAYOUT IMPLEMENTATION", e.g. "mlp-2x2 ddptrain-auto" */
    plot_link_point_t *pts; /* by rate, increasing, unlimited last */
    size_t n;
} plot_link_line_t;

typedef struct plot_scaling {
    plot_scaling_line_t *lines; /* against ranks */
    size_t n;
    plot_link_line_t *links; /* against the link rate */
    size_t nlinks;
} plot_scaling_t;

/* Read a results.csv (header PLOT_SCALING_HEADER, 8 fields a row, other
 * metrics ignored): its samples_per_s rows into one line per (case,
 * implementation) against ranks, one without a 1-rank row skipped with a
 * warning; and bench_cluster.sh's weak_scaling_efficiency rows (case
 * "cluster-MODEL-LAYOUT", implementation "NAME@RATE", RATE a tc rate such
 * as 10gbit or "unlimited") into one line per (MODEL-LAYOUT, NAME) against
 * the link rate (plot_link_rate_bits).  DDP_ERR_IO when unreadable,
 * DDP_ERR_INPUT for a bad header or row (FILE:LINE) or when no line of
 * either kind is left. */
ddp_status_t plot_scaling_read(const char *path, plot_scaling_t *sc);
void plot_scaling_free(plot_scaling_t *sc);

/* A tc rate ("100mbit", "10gbit", "1.5gbit", "125mbps") in bit/s, INFINITY
 * for "unlimited"; -1 when text is none of these. */
double plot_link_rate_bits(const char *text);

/* ---- rendering (render.c) ---- */

typedef struct plot_opts {
    const char *out;      /* -o: the PNG */
    const char *title;    /* --title, or NULL for the default */
    int width, height;    /* --size */
    const char *keep_dir; /* --keep-data: leave data and script here, or NULL */
} plot_opts_t;

/* The gnuplot on PATH into buf (0), or -1 when there is none. */
int plot_find_gnuplot(char *buf, size_t n);

/* Draw the runs (loss, val_acc, samples/s, step-time split) or the scaling
 * lines into opts->out: rendered to a temporary file beside it and renamed
 * over it only when gnuplot succeeded and wrote a PNG.  DDP_ERR_IO when the
 * output's directory (or --keep-data) cannot be written, DDP_ERR_INTERNAL
 * when gnuplot fails (its first error line in the message). */
ddp_status_t plot_render_runs(const plot_opts_t *opts, const char *gnuplot, const plot_run_t *runs,
                              size_t nruns);
ddp_status_t plot_render_scaling(const plot_opts_t *opts, const char *gnuplot,
                                 const plot_scaling_t *sc);

#endif
