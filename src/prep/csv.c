/* csv.c -- `ddptrain-prep csv`: a CSV file with a header line -> float32
 * features [N, F] and integer labels [N] (or float targets [N, k]).
 *
 * Fields are separated by commas; a field may be double-quoted ("" is a
 * quote inside it).  The label column holds integers, or class names that
 * are numbered in sorted order (stored, comma-separated, in the attribute
 * class_names of y).  With --regression the label column is one float
 * target; --target-columns A,B,... names several.  Every other column is a
 * feature and must be a finite number.  --val-fraction F moves a random
 * fraction of the rows (keyed by --seed and the row number) to /val.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prep.h"
#include "rng.h"

typedef struct csv_row {
    char **f;
    int n;
} csv_row_t;

/* Split one line (modified in place) into fields; returns the count or -1. */
static int split_line_(char *line, char ***fields, int *cap)
{
    int n = 0;
    char *p = line;
    for (;;) {
        if (n == *cap) {
            *cap = *cap ? 2 * *cap : 16;
            char **nf = realloc(*fields, (size_t)*cap * sizeof *nf);
            if (!nf) return -1;
            *fields = nf;
        }
        while (*p == ' ' || *p == '\t') p++;
        char *start = p, *w = p;
        if (*p == '"') {
            p++;
            for (;;) {
                if (*p == '\0') return -2; /* unterminated quote */
                if (*p == '"' && p[1] == '"') {
                    *w++ = '"';
                    p += 2;
                } else if (*p == '"') {
                    p++;
                    break;
                } else {
                    *w++ = *p++;
                }
            }
            while (*p == ' ' || *p == '\t') p++;
            if (*p != ',' && *p != '\0') return -2;
        } else {
            while (*p != ',' && *p != '\0') *w++ = *p++;
            while (w > start && (w[-1] == ' ' || w[-1] == '\t')) w--;
        }
        char sep = *p;
        *w = '\0';
        (*fields)[n++] = start;
        if (sep == '\0') break;
        p++;
    }
    return n;
}

static int parse_float_(const char *s, float *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    float f = (float)v;
    if (end == s || *end != '\0' || !isfinite(f)) return -1; /* also beyond float range */
    *out = f;
    return 0;
}

static int cmp_str_(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

typedef struct csv_data {
    int nrows, ncols;
    char **cells; /* [nrows * ncols], pointing into the file text */
    char **header;
} csv_data_t;

static ddp_status_t read_csv_(const char *path, char **text, csv_data_t *c)
{
    memset(c, 0, sizeof *c);
    FILE *fp = fopen(path, "rb");
    if (!fp) return ddp_fail(DDP_ERR_INPUT, "%s: cannot open: %s", path, strerror(errno));
    fseek(fp, 0, SEEK_END);
    long len = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    *text = ddp_malloc((size_t)len + 1, "the CSV file");
    if (!*text) {
        fclose(fp);
        return DDP_ERR_NOMEM;
    }
    size_t got = fread(*text, 1, (size_t)len, fp);
    fclose(fp);
    (*text)[got] = '\0';

    char **fields = NULL;
    int cap = 0, rows_cap = 0, lineno = 0;
    ddp_status_t s = DDP_OK;
    char *save = NULL;
    for (char *line = strtok_r(*text, "\n", &save); line && s == DDP_OK;
         line = strtok_r(NULL, "\n", &save)) {
        lineno++;
        size_t L = strlen(line);
        if (L && line[L - 1] == '\r') line[--L] = '\0';
        if (L == 0) continue;
        int n = split_line_(line, &fields, &cap);
        if (n < 0) {
            s = n == -1 ? DDP_ERR_NOMEM
                        : ddp_fail(DDP_ERR_INPUT, "%s line %d: bad quoting", path, lineno);
            break;
        }
        if (!c->header) {
            c->ncols = n;
            c->header = ddp_malloc((size_t)n * sizeof *c->header, "the CSV header");
            if (!c->header) {
                s = DDP_ERR_NOMEM;
                break;
            }
            memcpy(c->header, fields, (size_t)n * sizeof *fields);
            continue;
        }
        if (n != c->ncols) {
            s = ddp_fail(DDP_ERR_INPUT, "%s line %d: %d fields, but the header has %d", path,
                         lineno, n, c->ncols);
            break;
        }
        if (c->nrows == rows_cap) {
            rows_cap = rows_cap ? 2 * rows_cap : 1024;
            char **nc = realloc(c->cells, (size_t)rows_cap * (size_t)c->ncols * sizeof *nc);
            if (!nc) {
                s = ddp_fail(DDP_ERR_NOMEM, "out of memory reading %s", path);
                break;
            }
            c->cells = nc;
        }
        memcpy(c->cells + (size_t)c->nrows * (size_t)c->ncols, fields, (size_t)n * sizeof *fields);
        c->nrows++;
    }
    free(fields);
    if (s == DDP_OK && !c->header) s = ddp_fail(DDP_ERR_INPUT, "%s: empty file", path);
    if (s == DDP_OK && c->nrows == 0)
        s = ddp_fail(DDP_ERR_INPUT, "%s: a header line but no data rows", path);
    return s;
}

static int find_col_(const csv_data_t *c, const char *name)
{
    for (int j = 0; j < c->ncols; j++)
        if (!strcmp(c->header[j], name)) return j;
    return -1;
}

ddp_status_t prep_csv(int argc, char **argv)
{
    const char *in = NULL, *out = NULL, *label = NULL, *tcols = NULL, *v;
    int regression = 0;
    double val_fraction = 0;
    int64_t seed = 1;
    ddp_status_t s = DDP_OK;
    for (int i = 1; i < argc && s == DDP_OK; i++) {
        if ((v = prep_opt(argc, argv, &i, "-o", &s)) ||
            (s == DDP_OK && (v = prep_opt(argc, argv, &i, "--output", &s))))
            out = v;
        else if (s == DDP_OK && (v = prep_opt(argc, argv, &i, "--label-column", &s)))
            label = v;
        else if (s == DDP_OK && (v = prep_opt(argc, argv, &i, "--target-columns", &s)))
            tcols = v;
        else if (s == DDP_OK && (v = prep_opt(argc, argv, &i, "--seed", &s)))
            s = prep_int("--seed", v, 0, INT64_MAX, &seed);
        else if (s == DDP_OK && (v = prep_opt(argc, argv, &i, "--val-fraction", &s))) {
            char *end;
            val_fraction = strtod(v, &end);
            if (end == v || *end || !(val_fraction >= 0 && val_fraction < 1))
                s = ddp_fail(DDP_ERR_USAGE, "csv: --val-fraction '%s' must be in [0, 1)", v);
        } else if (s == DDP_OK && !strcmp(argv[i], "--regression"))
            regression = 1;
        else if (s == DDP_OK && argv[i][0] == '-' && argv[i][1])
            s = ddp_fail(DDP_ERR_USAGE, "csv: unknown option '%s'; see ddptrain-prep --help",
                         argv[i]);
        else if (s == DDP_OK && in)
            s = ddp_fail(DDP_ERR_USAGE, "csv: unexpected argument '%s' (one CSV file)", argv[i]);
        else if (s == DDP_OK)
            in = argv[i];
    }
    if (s != DDP_OK) return s;
    if (!in) return ddp_fail(DDP_ERR_USAGE, "csv: give FILE --label-column NAME -o OUT.h5");
    if (!out) return ddp_fail(DDP_ERR_USAGE, "csv: no output file (-o OUT.h5)");
    if (!label && !tcols)
        return ddp_fail(DDP_ERR_USAGE, "csv: name the label column (--label-column NAME) or "
                                       "the target columns (--target-columns A,B)");
    if (tcols) regression = 1;
    const pathclash_file_t files[] = {{"the CSV file", in, PATHCLASH_IN, NULL, 0},
                                      {"-o", out, PATHCLASH_OUT, NULL, 0}};
    DDP_TRY(pathclash_check(files, 2));

    char *text = NULL;
    csv_data_t c;
    s = read_csv_(in, &text, &c);
    int ncols = c.ncols, nrows = c.nrows;
    int *role = NULL; /* 0 feature, 1 label/target */
    int *tidx = NULL, k = 0, lab = -1;
    float *x = NULL, *tg = NULL;
    int32_t *y = NULL;
    char **names = NULL, *joined = NULL;
    int nnames = 0;
    if (s != DDP_OK) goto out;
    role = ddp_calloc((size_t)ncols, sizeof *role, "CSV columns");
    tidx = ddp_calloc((size_t)ncols, sizeof *tidx, "CSV columns");
    if (!role || !tidx) {
        s = DDP_ERR_NOMEM;
        goto out;
    }
    if (tcols) {
        char buf[4096];
        snprintf(buf, sizeof buf, "%s", tcols);
        char *sv = NULL;
        for (char *t = strtok_r(buf, ",", &sv); t; t = strtok_r(NULL, ",", &sv)) {
            int j = find_col_(&c, t);
            if (j < 0) {
                s = ddp_fail(DDP_ERR_USAGE, "csv: %s has no column '%s' (--target-columns)", in, t);
                goto out;
            }
            if (!role[j]) tidx[k++] = j;
            role[j] = 1;
        }
    }
    if (label) {
        lab = find_col_(&c, label);
        if (lab < 0) {
            s = ddp_fail(DDP_ERR_USAGE,
                         "csv: %s has no column '%s' (--label-column); its "
                         "columns: %s%s",
                         in, label, c.header[0], ncols > 1 ? ", ..." : "");
            goto out;
        }
        if (regression && !role[lab]) tidx[k++] = lab;
        role[lab] = 1;
    }
    int nf = 0;
    for (int j = 0; j < ncols; j++) nf += !role[j];
    if (nf == 0) {
        s = ddp_fail(DDP_ERR_INPUT, "%s: no feature columns left besides the labels", in);
        goto out;
    }
    x = ddp_malloc((size_t)nrows * (size_t)nf * sizeof *x, "CSV features");
    if (regression)
        tg = ddp_malloc((size_t)nrows * (size_t)k * sizeof *tg, "CSV targets");
    else
        y = ddp_malloc((size_t)nrows * sizeof *y, "CSV labels");
    if (!x || (!tg && !y)) {
        s = DDP_ERR_NOMEM;
        goto out;
    }
    for (int r = 0; r < nrows && s == DDP_OK; r++) {
        char **row = c.cells + (size_t)r * (size_t)ncols;
        int f = 0;
        for (int j = 0; j < ncols; j++) {
            if (role[j]) continue;
            if (parse_float_(row[j], &x[(size_t)r * nf + f++]) != 0) {
                s = ddp_fail(DDP_ERR_INPUT,
                             "%s data row %d, column '%s': '%s' is not a finite "
                             "number",
                             in, r + 1, c.header[j], row[j]);
                break;
            }
        }
        for (int t = 0; s == DDP_OK && regression && t < k; t++)
            if (parse_float_(row[tidx[t]], &tg[(size_t)r * k + t]) != 0)
                s = ddp_fail(DDP_ERR_INPUT,
                             "%s data row %d, target column '%s': '%s' is not "
                             "a finite number",
                             in, r + 1, c.header[tidx[t]], row[tidx[t]]);
    }
    if (s != DDP_OK) goto out;

    /* integer labels, or class names numbered in sorted order */
    if (!regression) {
        int integers = 1;
        for (int r = 0; r < nrows && integers; r++) {
            const char *f = c.cells[(size_t)r * ncols + lab];
            char *end;
            errno = 0;
            long long vv = strtoll(f, &end, 10);
            if (end == f || *end || errno || vv > INT32_MAX || vv < INT32_MIN)
                integers = 0;
            else
                y[r] = (int32_t)vv;
        }
        if (integers) {
            for (int r = 0; r < nrows; r++)
                if (y[r] < 0) {
                    s = ddp_fail(DDP_ERR_INPUT,
                                 "%s data row %d, label column '%s': label %d is "
                                 "negative; labels must be 0..classes-1",
                                 in, r + 1, label, y[r]);
                    goto out;
                }
        } else {
            names = ddp_malloc((size_t)nrows * sizeof *names, "class names");
            if (!names) {
                s = DDP_ERR_NOMEM;
                goto out;
            }
            for (int r = 0; r < nrows; r++) names[r] = c.cells[(size_t)r * ncols + lab];
            qsort(names, (size_t)nrows, sizeof *names, cmp_str_);
            for (int r = 0; r < nrows; r++)
                if (nnames == 0 || strcmp(names[nnames - 1], names[r]) != 0)
                    names[nnames++] = names[r];
            size_t jl = 1;
            for (int i = 0; i < nnames; i++) jl += strlen(names[i]) + 1;
            joined = ddp_malloc(jl, "class names");
            if (!joined) {
                s = DDP_ERR_NOMEM;
                goto out;
            }
            joined[0] = '\0';
            for (int i = 0; i < nnames; i++) {
                if (i) strcat(joined, ",");
                strcat(joined, names[i]);
            }
            for (int r = 0; r < nrows; r++) {
                const char *key = c.cells[(size_t)r * ncols + lab];
                char **hit = bsearch(&key, names, (size_t)nnames, sizeof *names, cmp_str_);
                y[r] = (int32_t)(hit - names);
            }
        }
    }

    /* rows to /val by a keyed coin per row */
    unsigned char *is_val = ddp_calloc((size_t)nrows, 1, "the val split");
    if (!is_val) {
        s = DDP_ERR_NOMEM;
        goto out;
    }
    int nval = 0;
    uint64_t key = ddp_key((uint64_t)seed, DDP_STREAM_DATA, 77);
    for (int r = 0; r < nrows && val_fraction > 0; r++) {
        is_val[r] = ddp_u01(ddp_rand4(key, (uint64_t)r, 0).v[0]) < val_fraction;
        nval += is_val[r];
    }
    if (nval == nrows) {
        free(is_val);
        s = ddp_fail(DDP_ERR_USAGE, "csv: --val-fraction %g leaves no training rows", val_fraction);
        goto out;
    }
    int32_t maxl = -1;
    for (int r = 0; y && r < nrows; r++)
        if (y[r] > maxl) maxl = y[r];

    h5_atomic_t a;
    s = h5_atomic_create(&a, out);
    if (s != DDP_OK) {
        free(is_val);
        goto out;
    }
    prep_stats_t st;
    s = prep_stats_init(&st, nf, 1);
    size_t yw = regression ? (size_t)k * sizeof(float) : sizeof(int32_t);
    float *xs = ddp_malloc((size_t)nrows * (size_t)nf * sizeof *xs, "CSV features");
    unsigned char *ys = ddp_malloc((size_t)nrows * yw, "CSV labels");
    if (!xs || !ys) s = DDP_ERR_NOMEM;
    for (int sp = 0; sp < 2 && s == DDP_OK; sp++) {
        /* gather this split's rows, then write them at once */
        int64_t n = 0;
        for (int r = 0; r < nrows; r++) {
            if (is_val[r] != sp) continue;
            memcpy(xs + (size_t)n * nf, x + (size_t)r * nf, (size_t)nf * sizeof *xs);
            memcpy(ys + (size_t)n * yw,
                   regression ? (const void *)(tg + (size_t)r * k) : (const void *)(y + r), yw);
            n++;
        }
        if (n == 0) continue;
        if (!sp) prep_stats_add_f32(&st, xs, (size_t)n);
        char xn[16], yn[16];
        snprintf(xn, sizeof xn, "/%s/x", sp ? "val" : "train");
        snprintf(yn, sizeof yn, "/%s/y", sp ? "val" : "train");
        hsize_t xd[2] = {(hsize_t)n, (hsize_t)nf}, yd[2] = {(hsize_t)n, (hsize_t)k};
        prep_ds_t wx, wy;
        s = prep_ds_create(&wx, a.file, xn, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, xd);
        if (s != DDP_OK) break;
        s = regression ? prep_ds_create(&wy, a.file, yn, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 2, yd)
                       : prep_ds_create(&wy, a.file, yn, H5T_STD_I32LE, H5T_NATIVE_INT32, 1, yd);
        if (s != DDP_OK) {
            prep_ds_close(&wx);
            break;
        }
        s = prep_ds_append(&wx, xs, (hsize_t)n);
        if (s == DDP_OK) s = prep_ds_append(&wy, ys, (hsize_t)n);
        /* statistics: val is normalised with the training statistics */
        if (s == DDP_OK) s = prep_stats_write(&st, wx.ds, 0, 1.0);
        if (s == DDP_OK && !regression) s = h5_attr_write_i64(wy.ds, "classes", maxl + 1);
        if (s == DDP_OK && joined) s = h5_attr_write_str(wy.ds, "class_names", joined);
        prep_ds_close(&wx);
        prep_ds_close(&wy);
    }
    free(xs);
    free(ys);
    prep_stats_free(&st);
    free(is_val);
    if (s == DDP_OK)
        s = prep_finish(&a);
    else
        h5_atomic_abandon(&a);
out:
    free(role);
    free(tidx);
    free(x);
    free(tg);
    free(y);
    free(names);
    free(joined);
    free(c.cells);
    free(c.header);
    free(text);
    return s;
}
