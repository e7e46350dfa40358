/* scaling.c -- weak-scaling efficiency from a benchmark results.csv (long
 * format, PLOT_SCALING_HEADER): per (case, implementation) the median
 * samples/s at N ranks over N times the median at 1 rank. */
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

static ddp_status_t read_rows_(const char *path, FILE *f, scaling_row_t **rows, size_t *nrows)
{
    char *buf = NULL;
    size_t cap = 0, line = 0, cap_rows = 0;
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
        if (strcmp(field[3], "samples_per_s") != 0) continue; /* another metric */
        if (*nrows == cap_rows) {
            size_t nc = cap_rows ? 2 * cap_rows : 32;
            scaling_row_t *q = realloc(*rows, nc * sizeof *q);
            if (!q) {
                s = ddp_fail(DDP_ERR_NOMEM, "out of memory reading %s", path);
                break;
            }
            *rows = q;
            cap_rows = nc;
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
    if (sc->n == 0)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: no usable rows: the efficiency needs samples_per_s rows with a "
                        "1-rank row for each case and implementation (%zu samples_per_s rows)",
                        path, nrows);
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
    size_t nrows = 0;
    ddp_status_t s = read_rows_(path, f, &rows, &nrows);
    fclose(f);
    if (s == DDP_OK) {
        qsort(rows, nrows, sizeof *rows, cmp_rows_);
        s = make_lines_(path, rows, nrows, sc);
    }
    free(rows);
    if (s != DDP_OK) plot_scaling_free(sc);
    return s;
}

void plot_scaling_free(plot_scaling_t *sc)
{
    for (size_t i = 0; i < sc->n; i++) free(sc->lines[i].pts);
    free(sc->lines);
    sc->lines = NULL;
    sc->n = 0;
}
