/* deck_check.c -- scans and checks of an open deck (see deck.h): the label
 * scan at open (ranges, the number of classes, the classes warning), the
 * finite check of --check-data, progress lines for long scans, and the
 * start-up checks of labels, targets and size against the model and the
 * job. */
#include "deck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "deck_internal.h"
#include "h5util.h"
#include "log.h"

/* The label scan counts distinct labels below this bound exactly (a bitmap
 * of DECK_DISTINCT_MAX / 8 bytes); larger labels each count as distinct. */
#define DECK_DISTINCT_MAX ((int64_t)1 << 24)
/* A class count inferred from the labels (no attribute `classes`) is
 * suspect when it exceeds this many times the distinct labels, plus slack
 * for splits that miss a few classes. */
#define DECK_CLASSES_SUSPECT_RATIO 4
#define DECK_CLASSES_SUSPECT_SLACK 64
/* A scan over every sample (labels at open, deck_check_finite) that runs
 * longer than deck_progress_after_ seconds prints progress on rank 0, then
 * every DECK_PROGRESS_EVERY seconds. */
#define DECK_PROGRESS_EVERY 10.0
static double deck_progress_after_ = 3.0;
/* Labels are scanned at open in pieces of this many values. */
#define DECK_SCAN_PIECE ((hsize_t)1 << 16)
/* deck_check_finite reads about this many bytes at a time. */
#define DECK_CHECK_BYTES ((size_t)4 << 20)

/* ---- progress of long scans ---------------------------------------------- */

typedef struct scan_progress {
    const char *what; /* "the labels of /train/y" */
    int64_t total;    /* samples to scan */
    double start, next;
} scan_progress_t;

void deck_set_progress_after(double seconds)
{
    deck_progress_after_ = seconds;
}

static void progress_begin_(scan_progress_t *p, const char *what, int64_t total)
{
    p->what = what;
    p->total = total;
    p->start = clock_seconds();
    p->next = p->start + deck_progress_after_;
}

static void progress_at_(scan_progress_t *p, int64_t done)
{
    double now = clock_seconds();
    if (now < p->next) return;
    p->next = now + DECK_PROGRESS_EVERY;
    log_info("  scanning %s: %lld of %lld samples (%.0f%%), %.0f s so far", p->what,
             (long long)done, (long long)p->total,
             p->total > 0 ? 100.0 * (double)done / (double)p->total : 100.0, now - p->start);
}

/* ---- the label scan ------------------------------------------------------ */

/* Scan the labels of every shard (bounded memory): range checks and the
 * number of classes (deck_internal.h). */
ddp_status_t deck_scan_labels(deck_t *d)
{
    char yname[32];
    snprintf(yname, sizeof yname, "/%s/y", d->split);
    d->label_min = INT64_MAX;
    d->label_max = -1;
    int64_t attr_classes = 0;
    int attr_shard = -1;
    hsize_t piece = DECK_SCAN_PIECE;
    int64_t *buf = ddp_malloc((size_t)piece * sizeof *buf, "the label scan");
    /* distinct labels below DECK_DISTINCT_MAX, one bit each (pages that
     * stay zero are never touched); labels above it count as distinct */
    unsigned char *seen = calloc(DECK_DISTINCT_MAX / 8, 1);
    int64_t distinct = 0, above = 0;
    if (!buf || !seen) {
        free(buf);
        free(seen);
        return ddp_fail(DDP_ERR_NOMEM, "out of memory for the label scan");
    }
    ddp_status_t s = DDP_OK;
    char what[64];
    snprintf(what, sizeof what, "the labels of %s", yname);
    scan_progress_t prog;
    progress_begin_(&prog, what, d->n);
    for (int k = 0; k < d->nshards && s == DDP_OK; k++) {
        deck_shard_t *sh = &d->shards[k];
        if (h5_attr_exists(sh->y, "classes")) {
            int64_t c;
            double f = NAN;
            s = h5_attr_read_i64(sh->y, "classes", &c);
            if (s != DDP_OK) h5_attr_read_f64(sh->y, "classes", &f); /* for the message */
            if (s != DDP_OK || c < 1 || c > INT32_MAX) {
                char val[48] = "";
                if (s == DDP_OK)
                    snprintf(val, sizeof val, " is %lld;", (long long)c);
                else if (!isnan(f))
                    snprintf(val, sizeof val, " is %.17g;", f);
                s = ddp_fail_override(DDP_ERR_INPUT,
                                      "%s: attribute classes of %s%s it must be a "
                                      "positive integer (the number of classes, at most %d)",
                                      sh->path, yname, val, INT32_MAX);
                break;
            }
            if (c > attr_classes) {
                attr_classes = c;
                attr_shard = k;
            }
        }
        for (hsize_t off = 0; off < (hsize_t)sh->n && s == DDP_OK; off += piece) {
            hsize_t cnt = (hsize_t)sh->n - off < piece ? (hsize_t)sh->n - off : piece;
            progress_at_(&prog, sh->first + (int64_t)off);
            h5_lock();
            herr_t rc = deck_h5_read_rows(sh->y, H5T_NATIVE_INT64, off, cnt, buf);
            h5_unlock();
            if (rc < 0) {
                s = ddp_fail(DDP_ERR_INPUT,
                             "%s: cannot read %s samples [%llu, %llu) (truncated "
                             "or corrupt file?); re-create it with ddptrain-prep",
                             sh->path, yname, (unsigned long long)off,
                             (unsigned long long)(off + cnt));
                break;
            }
            for (hsize_t i = 0; i < cnt; i++) {
                int64_t v = buf[i];
                if (v < 0) {
                    s = ddp_fail(DDP_ERR_INPUT,
                                 "%s: %s sample %llu has label %lld; class labels "
                                 "must be 0, 1, ..., classes-1",
                                 sh->path, yname, (unsigned long long)(off + i), (long long)v);
                    break;
                }
                if (v > d->label_max) {
                    d->label_max = v;
                    d->label_max_shard = k;
                    d->label_max_row = (int64_t)(off + i);
                }
                if (v < d->label_min) d->label_min = v;
                if (v >= DECK_DISTINCT_MAX) {
                    above++;
                } else if (!(seen[v >> 3] & (1u << (v & 7)))) {
                    seen[v >> 3] |= (unsigned char)(1u << (v & 7));
                    distinct++;
                }
            }
        }
    }
    free(buf);
    free(seen);
    d->label_distinct = distinct + above;
    d->classes_inferred = attr_classes == 0;
    if (s != DDP_OK) return s;
    if (d->label_max >= INT32_MAX)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: %s holds label %lld; class labels must be "
                        "0..classes-1",
                        d->shards[d->label_max_shard].path, yname, (long long)d->label_max);
    if (attr_classes > 0 && d->label_max >= attr_classes)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: %s holds label %lld but its attribute classes "
                        "says %lld (from %s); labels must be 0..classes-1",
                        d->shards[d->label_max_shard].path, yname, (long long)d->label_max,
                        (long long)attr_classes, d->shards[attr_shard].path);
    d->classes = (int)(attr_classes > 0 ? attr_classes : d->label_max + 1);
    return DDP_OK;
}

/* ---- checks of data, labels and size ------------------------------------ */

/* Scan one float dataset of a shard for NaN/Inf in pieces. */
static ddp_status_t check_finite_ds_(const deck_t *d, const deck_shard_t *sh, hid_t ds,
                                     const char *what, size_t per_row, float *buf, size_t cap,
                                     scan_progress_t *prog)
{
    char name[32];
    snprintf(name, sizeof name, "/%s/%s", d->split, what);
    size_t rows = cap / per_row;
    if (rows == 0) rows = 1;
    for (int64_t off = 0; off < sh->n; off += (int64_t)rows) {
        int64_t cnt = sh->n - off < (int64_t)rows ? sh->n - off : (int64_t)rows;
        progress_at_(prog, sh->first + off);
        h5_lock();
        herr_t rc = deck_h5_read_rows(ds, H5T_NATIVE_FLOAT, (hsize_t)off, (hsize_t)cnt, buf);
        h5_unlock();
        if (rc < 0)
            return ddp_fail(DDP_ERR_INPUT,
                            "%s: reading %s samples [%lld, %lld) failed "
                            "(truncated or corrupt file?); re-create it",
                            sh->path, name, (long long)off, (long long)(off + cnt));
        size_t total = (size_t)cnt * per_row;
        for (size_t i = 0; i < total; i++)
            if (!isfinite(buf[i]))
                return ddp_fail(DDP_ERR_INPUT,
                                "%s: %s sample %lld, element %zu is %s; the "
                                "data must be finite (fix or drop that sample)",
                                sh->path, name, (long long)(off + (int64_t)(i / per_row)),
                                i % per_row, isnan(buf[i]) ? "NaN" : "infinite");
    }
    return DDP_OK;
}

ddp_status_t deck_check_finite(deck_t *d)
{
    if (d->dtype == DECK_U8 && !d->regression) return DDP_OK;
    size_t cap = DECK_CHECK_BYTES / sizeof(float);
    size_t need = d->sample_numel > (size_t)d->targets ? d->sample_numel : (size_t)d->targets;
    if (cap < need) cap = need;
    float *buf = ddp_malloc(cap * sizeof *buf, "the finite check");
    if (!buf) return DDP_ERR_NOMEM;
    ddp_status_t s = DDP_OK;
    char what[64];
    snprintf(what, sizeof what, "/%s for non-finite values (--check-data)", d->split);
    scan_progress_t prog;
    progress_begin_(&prog, what, d->n);
    for (int k = 0; k < d->nshards && s == DDP_OK; k++) {
        const deck_shard_t *sh = &d->shards[k];
        if (d->dtype == DECK_F32)
            s = check_finite_ds_(d, sh, sh->x, "x", d->sample_numel, buf, cap, &prog);
        if (s == DDP_OK && d->regression)
            s = check_finite_ds_(d, sh, sh->y, "y", (size_t)d->targets, buf, cap, &prog);
    }
    free(buf);
    return s;
}

ddp_status_t deck_require_labels(const deck_t *d)
{
    if (!d->regression) return DDP_OK;
    char dims[32];
    snprintf(dims, sizeof dims, "[N, %d]", d->targets);
    return ddp_fail(DDP_ERR_INPUT,
                    "%s: /%s/y holds float targets %s but the loss needs "
                    "integer class labels [N]; use --loss mse for regression, or store labels",
                    d->shards[0].path, d->split, d->yrank == 1 ? "[N]" : dims);
}

ddp_status_t deck_check_classes(const deck_t *d, int outputs)
{
    DDP_TRY(deck_require_labels(d));
    if (d->label_max < outputs) return DDP_OK;
    return ddp_fail(DDP_ERR_INPUT,
                    "%s: /%s/y holds label %lld but the model has %d outputs; "
                    "make the last layer linear:%d (the deck has %d classes)",
                    d->shards[d->label_max_shard].path, d->split, (long long)d->label_max, outputs,
                    d->classes, d->classes);
}

ddp_status_t deck_require_targets(const deck_t *d, int outputs)
{
    if (!d->regression)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: /%s/y holds integer class labels but the loss "
                        "needs float targets [N, %d]; use a classification loss, or store "
                        "float targets (ddptrain-prep csv --regression)",
                        d->shards[0].path, d->split, outputs);
    if (d->targets != outputs)
        return ddp_fail(DDP_ERR_INPUT,
                        "%s: /%s/y holds %d targets per sample but the model "
                        "has %d outputs; make the last layer linear:%d",
                        d->shards[0].path, d->split, d->targets, outputs, d->targets);
    return DDP_OK;
}

ddp_status_t deck_check_size(const deck_t *d, int world, int batch, int drop_last)
{
    int64_t need = (int64_t)world * batch;
    if (d->n >= need) return DDP_OK;
    return ddp_fail(DDP_ERR_INPUT,
                    "%s%s: /%s holds %lld samples, fewer than one global batch "
                    "(%d ranks x --batch %d = %lld)%s; use a smaller --batch or fewer ranks",
                    d->shards[0].path, d->nshards > 1 ? " (and the other shards)" : "", d->split,
                    (long long)d->n, world, batch, (long long)need,
                    drop_last ? " so --drop-last leaves no step" : "");
}

int deck_classes_warning(const deck_t *d, char *buf, size_t n)
{
    if (d->regression || !d->classes_inferred || d->classes <= 1) return 0;
    if ((int64_t)d->classes <=
        DECK_CLASSES_SUSPECT_RATIO * d->label_distinct + DECK_CLASSES_SUSPECT_SLACK)
        return 0;
    snprintf(buf, n,
             "%s: /%s/y has no attribute classes, so the model gets the largest label + 1 = "
             "%d classes (label %lld at sample %lld), but only %lld distinct labels occur; "
             "if that label is a mistake fix it, else set the number of classes with the "
             "attribute classes on /%s/y (h5py: f['%s/y'].attrs['classes'] = K)",
             d->shards[d->label_max_shard].path, d->split, d->classes, (long long)d->label_max,
             (long long)d->label_max_row, (long long)d->label_distinct, d->split, d->split);
    return 1;
}
