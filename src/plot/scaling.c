/* scaling.c -- weak-scaling efficiency from a benchmark results.csv (long
 * format, PLOT_SCALING_HEADER): per (case, implementation) the median
 * samples/s at N ranks over N times the median at 1 rank; and per (model
 * and layout, implementation) of bench_cluster.sh the efficiency it
 * measured at each link rate. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plot.h"

#define SCALING_FIELDS_ 8

typedef struct scaling_row {
    char key[256]; /* "case implementation" */
    int64_t ranks;
    double median;
    size_t line;
} scaling_row_t;

/* A cluster row: "cluster-MODEL-LAYOUT,NAME@RATE,...,weak_scaling_efficiency". */
typedef struct link_row {
    char key[256]; /* "MODEL-LAYOUT NAME" */
    double rate_bits;
    double efficiency;
    size_t line;
} link_row_t;

#define CLUSTER_PREFIX_ "cluster-"

double plot_link_rate_bits(const char *text)
{
    static const struct {
        const char *unit;
        double bits;
    } units[] = {{"bit", 1}, {"kbit", 1e3}, {"mbit", 1e6}, {"gbit", 1e9}, {"tbit", 1e12},
                 {"bps", 8}, {"kbps", 8e3}, {"mbps", 8e6}, {"gbps", 8e9}, {"tbps", 8e12}};
    if (!strcmp(text, "unlimited")) return INFINITY;
    if (*text < '0' || *text > '9') return -1;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || !isfinite(v) || !(v > 0)) return -1;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(end, units[i].unit)) return v * units[i].bits;
    return -1;
}

static int cmp_links_(const void *a, const void *b)
{
    const link_row_t *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c) return c;
    return (x->rate_bits > y->rate_bits) - (x->rate_bits < y->rate_bits);
}

/* A cluster row's fields into row: FILE:LINE errors for a missing @RATE, a
 * rate that is none, an efficiency that is no number > 0. */
static ddp_status_t parse_link_row_(const char *path, size_t line, char *field[], link_row_t *row)
{
    char *at = strrchr(field[1], '@');
    if (!at)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s:%zu: cluster row implementation '%.100s' has no @RATE "
                        "(bench_cluster.sh writes NAME@RATE, e.g. ddptrain-auto@10gbit)",
                        path, line, field[1]);
    *at = '\0';
    double bits = plot_link_rate_bits(at + 1);
    if (bits < 0)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s:%zu: link rate '%.60s' is neither a rate like 10gbit nor unlimited",
                        path, line, at + 1);
    char *end;
    errno = 0;
    double e = strtod(field[5], &end);
    if (errno || end == field[5] || *end != '\0' || !isfinite(e) || !(e > 0))
        return ddp_fail(DDP_ERR_INPUT, "%s:%zu: efficiency '%s' is not a number > 0", path, line,
                        field[5]);
    if (snprintf(row->key, sizeof row->key, "%s %s", field[0] + strlen(CLUSTER_PREFIX_),
                 field[1]) >= (int)sizeof row->key)
        return ddp_fail(DDP_ERR_INPUT, "%s:%zu: case and implementation names too long", path,
                        line);
    row->rate_bits = bits;
    row->efficiency = e;
    row->line = line;
    return DDP_OK;
}

/* Split line (modified) at commas into exactly SCALING_FIELDS_ fields;
 * the number of fields found. */
static int split_(char *line, char *field[SCALING_FIELDS_])
{
    int n = 0;
    char *p = line;
    for (;;) {
        char *comma = strchr(p, ',');
        if (n < SCALING_FIELDS_) field[n] = p;
        n++;
        if (!comma) break;
        *comma = '\0';
        p = comma + 1;
    }
    return n;
}

static int cmp_rows_(const void *a, const void *b)
{
    const scaling_row_t *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c) return c;
    return (x->ranks > y->ranks) - (x->ranks < y->ranks);
}

static ddp_status_t parse_row_(const char *path, size_t line, char *field[], scaling_row_t *row)
{
    char *end;
    errno = 0;
    long long r = strtoll(field[2], &end, 10);
    if (errno || end == field[2] || *end != '\0' || r < 1)
        return ddp_fail(DDP_ERR_INPUT, "%s:%zu: ranks '%s' is not an integer >= 1", path, line,
                        field[2]);
    errno = 0;
    double m = strtod(field[5], &end);
    if (errno || end == field[5] || *end != '\0' || !isfinite(m) || m < 0)
        return ddp_fail(DDP_ERR_INPUT, "%s:%zu: median '%s' is not a number >= 0", path, line,
                        field[5]);
    if (snprintf(row->key, sizeof row->key, "%s %s", field[0], field[1]) >= (int)sizeof row->key)
        return ddp_fail(DDP_ERR_INPUT, "%s:%zu: case and implementation names too long", path,
                        line);
    row->ranks = r;
    row->median = m;
    row->line = line;
    return DDP_OK;
}

/* room for one more element of *arr (n used of *cap, each size bytes) */
static int grow_(void **arr, size_t n, size_t *cap, size_t size)
{
    if (n < *cap) return 1;
    size_t nc = *cap ? 2 * *cap : 32;
    void *q = realloc(*arr, nc * size);
    if (!q) return 0;
    *arr = q;
    *cap = nc;
    return 1;
}

static ddp_status_t read_rows_(const char *path, FILE *f, scaling_row_t **rows, size_t *nrows,
                               link_row_t **links, size_t *nlinks)
{
    char *buf = NULL;
    size_t cap = 0, line = 0, cap_rows = 0, cap_links = 0;
    ssize_t len;
    ddp_status_t s = DDP_OK;
    errno = 0;
    while ((len = getline(&buf, &cap, f)) >= 0) {
        line++;
        while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) buf[--len] = '\0';
        if (strlen(buf) != (size_t)len) {
            s = ddp_fail(DDP_ERR_INPUT, "%s:%zu: a NUL byte: not a CSV text file", path, line);
            break;
        }
        if (line == 1) {
            if (strcmp(buf, PLOT_SCALING_HEADER) != 0) {
                s = ddp_fail(DDP_ERR_INPUT, "%s:1: the header is '%.120s', expected '%s'", path,
                             buf, PLOT_SCALING_HEADER);
                break;
            }
            continue;
        }
        if (len == 0) continue; /* a blank line */
        char *field[SCALING_FIELDS_];
        int n = split_(buf, field);
        if (n != SCALING_FIELDS_) {
            s = ddp_fail(DDP_ERR_INPUT, "%s:%zu: %d fields, expected %d (%s)", path, line, n,
                         SCALING_FIELDS_, PLOT_SCALING_HEADER);
            break;
        }
        if (!strncmp(field[0], CLUSTER_PREFIX_, strlen(CLUSTER_PREFIX_)) &&
            !strcmp(field[3], "weak_scaling_efficiency")) {
            if (!grow_((void **)links, *nlinks, &cap_links, sizeof **links)) {
                s = ddp_fail(DDP_ERR_NOMEM, "out of memory reading %s", path);
                break;
            }
            s = parse_link_row_(path, line, field, &(*links)[*nlinks]);
            if (s != DDP_OK) break;
            (*nlinks)++;
            errno = 0;
            continue;
        }
        if (strcmp(field[3], "samples_per_s") != 0) continue; /* another metric */
        if (!grow_((void **)rows, *nrows, &cap_rows, sizeof **rows)) {
            s = ddp_fail(DDP_ERR_NOMEM, "out of memory reading %s", path);
            break;
        }
        s = parse_row_(path, line, field, &(*rows)[*nrows]);
        if (s != DDP_OK) break;
        (*nrows)++;
        errno = 0;
    }
    if (s == DDP_OK && ferror(f))
        s = ddp_fail(DDP_ERR_IO, "%s: reading it failed after line %zu: %s", path, line,
                     strerror(errno ? errno : EIO));
    if (s == DDP_OK && line == 0)
        s = ddp_fail(DDP_ERR_INPUT, "%s: empty, expected the header '%s'", path,
                     PLOT_SCALING_HEADER);
    free(buf);
    return s;
}

/* Lines from the rows sorted by (key, ranks). */
static ddp_status_t make_lines_(const char *path, scaling_row_t *rows, size_t nrows,
                                plot_scaling_t *sc)
{
    sc->lines = calloc(nrows ? nrows : 1, sizeof *sc->lines);
    if (!sc->lines) return ddp_fail(DDP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nrows;) {
        size_t j = i;
        while (j < nrows && !strcmp(rows[j].key, rows[i].key)) j++;
        for (size_t k = i + 1; k < j; k++)
            if (rows[k].ranks == rows[k - 1].ranks)
                return ddp_fail(DDP_ERR_INPUT,
                                "%s:%zu: a second samples_per_s row for %s at %lld ranks "
                                "(the first is line %zu)",
                                path,
                                rows[k].line > rows[k - 1].line ? rows[k].line : rows[k - 1].line,
                                rows[i].key, (long long)rows[k].ranks,
                                rows[k].line > rows[k - 1].line ? rows[k - 1].line : rows[k].line);
        if (rows[i].ranks != 1) {
            plot_warn("%s: %s has no 1-rank samples_per_s row: no efficiency without it; skipped",
                      path, rows[i].key);
        } else if (!(rows[i].median > 0)) {
            plot_warn("%s:%zu: %s has a 1-rank median of 0 samples/s: skipped", path, rows[i].line,
                      rows[i].key);
        } else {
            plot_scaling_line_t *l = &sc->lines[sc->n];
            l->pts = calloc(j - i, sizeof *l->pts);
            if (!l->pts) return ddp_fail(DDP_ERR_NOMEM, "out of memory");
            snprintf(l->label, sizeof l->label, "%s", rows[i].key);
            for (size_t k = i; k < j; k++) {
                plot_scaling_point_t *p = &l->pts[l->n++];
                p->ranks = rows[k].ranks;
                p->median = rows[k].median;
                p->efficiency = rows[k].median / ((double)rows[k].ranks * rows[i].median);
            }
            sc->n++;
        }
        i = j;
    }
    return DDP_OK;
}

/* Link lines from the cluster rows sorted by (key, rate). */
static ddp_status_t make_links_(const char *path, const link_row_t *rows, size_t nrows,
                                plot_scaling_t *sc)
{
    sc->links = calloc(nrows ? nrows : 1, sizeof *sc->links);
    if (!sc->links) return ddp_fail(DDP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < nrows;) {
        size_t j = i;
        while (j < nrows && !strcmp(rows[j].key, rows[i].key)) j++;
        for (size_t k = i + 1; k < j; k++)
            if (rows[k].rate_bits == rows[k - 1].rate_bits) {
                size_t a = rows[k].line, b = rows[k - 1].line;
                return ddp_fail(DDP_ERR_INPUT,
                                "%s:%zu: a second weak_scaling_efficiency row for %s at the same "
                                "link rate (the first is line %zu)",
                                path, a > b ? a : b, rows[i].key, a > b ? b : a);
            }
        plot_link_line_t *l = &sc->links[sc->nlinks++];
        l->pts = calloc(j - i, sizeof *l->pts);
        if (!l->pts) return ddp_fail(DDP_ERR_NOMEM, "out of memory");
        snprintf(l->label, sizeof l->label, "%s", rows[i].key);
        for (size_t k = i; k < j; k++)
            l->pts[l->n++] = (plot_link_point_t){rows[k].rate_bits, rows[k].efficiency};
        i = j;
    }
    return DDP_OK;
}

ddp_status_t plot_scaling_read(const char *path, plot_scaling_t *sc)
{
    memset(sc, 0, sizeof *sc);
    FILE *f = fopen(path, "r");
    if (!f) return ddp_fail(DDP_ERR_IO, "%s: cannot open it: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || S_ISDIR(st.st_mode)) {
        fclose(f);
        return ddp_fail(DDP_ERR_IO, "%s: is a directory, not a results.csv", path);
    }
    scaling_row_t *rows = NULL;
    link_row_t *links = NULL;
    size_t nrows = 0, nlinks = 0;
    ddp_status_t s = read_rows_(path, f, &rows, &nrows, &links, &nlinks);
    fclose(f);
    if (s == DDP_OK) {
        qsort(rows, nrows, sizeof *rows, cmp_rows_);
        s = make_lines_(path, rows, nrows, sc);
    }
    if (s == DDP_OK) {
        qsort(links, nlinks, sizeof *links, cmp_links_);
        s = make_links_(path, links, nlinks, sc);
    }
    if (s == DDP_OK && sc->n == 0 && sc->nlinks == 0)
        s = ddp_fail(DDP_ERR_INPUT,
                     "%s: no usable rows: the efficiency needs samples_per_s rows with a 1-rank "
                     "row for each case and implementation (%zu samples_per_s rows), or "
                     "bench_cluster.sh's cluster-* weak_scaling_efficiency rows (none)",
                     path, nrows);
    free(rows);
    free(links);
    if (s != DDP_OK) plot_scaling_free(sc);
    return s;
}

void plot_scaling_free(plot_scaling_t *sc)
{
    for (size_t i = 0; i < sc->n; i++) free(sc->lines[i].pts);
    free(sc->lines);
    sc->lines = NULL;
    sc->n = 0;
    for (size_t i = 0; i < sc->nlinks; i++) free(sc->links[i].pts);
    free(sc->links);
    sc->links = NULL;
    sc->nlinks = 0;
}
