/* consistency.c -- the start-up consistency check (see consistency.h). */
#include "consistency.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

#define CHECK_ITEMS_MAX 96

/* What every rank must agree on, one fingerprint per item. */
typedef struct check_items {
    int n;
    char name[CHECK_ITEMS_MAX][64];
    uint64_t hash[CHECK_ITEMS_MAX];
} check_items_t;

static void item_(check_items_t *c, const char *name, const void *data, size_t n)
{
    if (c->n >= CHECK_ITEMS_MAX) return;
    snprintf(c->name[c->n], sizeof c->name[0], "%s", name);
    c->hash[c->n++] = hash_bytes(HASH_SEED, data, n);
}

/* The text of item i on this rank (for the mismatch message). */
static void item_text_(const trainer_t *t, const check_items_t *c, int i, char *buf, size_t n)
{
    if (strcmp(c->name[i], "training data") == 0) {
        snprintf(buf, n, "%lld samples of %zu values", (long long)t->train.n,
                 t->train.sample_numel);
    } else if (strcmp(c->name[i], "validation data") == 0) {
        if (t->have_val)
            snprintf(buf, n, "/val with %lld samples of %zu values", (long long)t->val.n,
                     t->val.sample_numel);
        else
            snprintf(buf, n, "no /val");
    } else {
        snprintf(buf, n, "a different %s", c->name[i]);
    }
}

/* ---- content of the input files ----------------------------------------- */

/* Per input file, the fingerprint parts of its /train, then of its /val
 * (zeros where the file has no /val). */
#define FP_PER_FILE (2 * DECK_FP_PARTS)

static void fp_place_(const trainer_t *t, const deck_t *d, const deck_fp_t *fp, int split,
                      uint64_t *out)
{
    int k = 0;
    for (int i = 0; i < d->nshards; i++) {
        /* the shards are the input files in order, less those without the split */
        while (k < t->cfg->ninputs && strcmp(t->cfg->inputs[k], d->shards[i].path) != 0) k++;
        if (k == t->cfg->ninputs) return;
        memcpy(out + (size_t)k * FP_PER_FILE + (size_t)split * DECK_FP_PARTS, fp[i].part,
               sizeof fp[i].part);
        k++;
    }
}

/* Fingerprint every input file (deck_fingerprint) into out [ninputs *
 * FP_PER_FILE]; on one rank there is nobody to disagree with (zeros). */
static ddp_status_t fingerprint_inputs_(const trainer_t *t, uint64_t *out)
{
    if (t->ctl->size == 1) return DDP_OK;
    int n = t->train.nshards > t->val.nshards ? t->train.nshards : t->val.nshards;
    deck_fp_t *fp = ddp_calloc((size_t)n, sizeof *fp, "the input fingerprints");
    if (!fp) return DDP_ERR_NOMEM;
    ddp_status_t s = deck_fingerprint(&t->train, fp);
    if (s == DDP_OK) fp_place_(t, &t->train, fp, 0, out);
    if (s == DDP_OK && t->have_val) {
        s = deck_fingerprint(&t->val, fp);
        if (s == DDP_OK) fp_place_(t, &t->val, fp, 1, out);
    }
    free(fp);
    return s;
}

/* The content item differs: name the first input file, split and part
 * where rank bad_rank's fingerprint differs from rank 0's (collective). */
static ddp_status_t content_mismatch_(const trainer_t *t, const uint64_t *fp, int bad_rank,
                                      int nbad)
{
    size_t n = (size_t)t->cfg->ninputs * FP_PER_FILE;
    comm_desc_t d = {"startup-check", -1, -1};
    uint64_t *r0 = malloc(n * sizeof *r0), *rb = malloc(n * sizeof *rb);
    ddp_status_t s = control_agree(
        t->ctl, r0 && rb ? DDP_OK : ddp_fail(DDP_ERR_NOMEM, "out of memory in the start-up check"));
    if (s != DDP_OK) {
        free(r0);
        free(rb);
        return s;
    }
    memcpy(r0, fp, n * sizeof *r0);
    memcpy(rb, fp, n * sizeof *rb);
    if (control_bcast(t->ctl, r0, n * sizeof *r0, 0, &d) != DDP_OK ||
        control_bcast(t->ctl, rb, n * sizeof *rb, bad_rank, &d) != DDP_OK)
        control_abort(t->ctl, ddp_fail(DDP_ERR_COMM, "%s", ddp_error_message()));
    size_t at = 0;
    while (at < n && r0[at] == rb[at]) at++;
    free(r0);
    free(rb);
    if (at == n) at = 0; /* not reached: the combined hashes differ */
    int file = (int)(at / FP_PER_FILE), split = (int)(at % FP_PER_FILE) / DECK_FP_PARTS;
    int part = (int)(at % DECK_FP_PARTS);
    const char *sp = split ? "val" : "train";
    char what[160];
    if (part == DECK_FP_SIZE)
        snprintf(what, sizeof what, "the file sizes");
    else
        snprintf(what, sizeof what, "the %s of /%s/x or /%s/y", deck_fp_part_name(part), sp, sp);
    return ddp_fail(DDP_ERR_MISMATCH,
                    "ranks disagree on the content of input file %s: rank 0 and rank %d read "
                    "different data under the same path (%s differ%s; a stale node-local "
                    "copy?); give every rank the same file",
                    t->cfg->inputs[file], bad_rank, what,
                    nbad > 1 ? "; other ranks differ too" : "");
}

static void collect_items_(const trainer_t *t, const uint64_t *fp, check_items_t *c)
{
    /* the options and input file names were agreed at start-up (optagree.h) */
    const ddp_config_t *cfg = t->cfg;
    const model_t *m = &t->model;
    uint64_t h;
    int64_t data[4] = {t->train.n, (int64_t)t->train.sample_numel, t->train.dtype,
                       t->train.regression ? t->train.targets : t->train.classes};
    item_(c, "training data", data, sizeof data);
    /* a rank without /val would skip the evaluation the others run */
    int64_t vdata[4] = {t->have_val, t->have_val ? t->val.n : 0,
                        t->have_val ? (int64_t)t->val.sample_numel : 0,
                        t->have_val ? t->val.dtype : 0};
    item_(c, "validation data", vdata, sizeof vdata);
    /* same paths and shapes, yet other bytes: a stale copy on some node */
    item_(c, "input content", fp, (size_t)cfg->ninputs * FP_PER_FILE * sizeof *fp);
    h = HASH_SEED;
    for (int k = 0; k < m->ntensors; k++) {
        const tensor_t *T = &m->tensors[k];
        h = hash_bytes(h, T->name, strlen(T->name));
        h = hash_bytes(h, T->shape, sizeof T->shape);
        h = hash_bytes(h, &T->offset, sizeof T->offset);
        h = hash_bytes(h, &T->frozen, sizeof T->frozen);
    }
    item_(c, "model layout", &h, sizeof h);
    h = HASH_SEED;
    for (int b = 0; b < m->nbuckets; b++) {
        h = hash_bytes(h, &m->buckets[b].offset, sizeof(size_t));
        h = hash_bytes(h, &m->buckets[b].count, sizeof(size_t));
    }
    item_(c, "bucket layout", &h, sizeof h);
}

ddp_status_t consistency_check(trainer_t *t)
{
    int W = t->ctl->size;
    check_items_t *c = calloc(1, sizeof *c);
    uint64_t *all = malloc((size_t)W * CHECK_ITEMS_MAX * sizeof *all);
    uint64_t *fp = calloc((size_t)t->cfg->ninputs * FP_PER_FILE, sizeof *fp);
    ddp_status_t s = control_agree(
        t->ctl, c && all && fp ? fingerprint_inputs_(t, fp)
                               : ddp_fail(DDP_ERR_NOMEM, "out of memory in the start-up check"));
    if (s != DDP_OK) {
        free(c);
        free(all);
        free(fp);
        return s;
    }
    collect_items_(t, fp, c);
    comm_desc_t d = {"startup-check", -1, -1};
    s = control_allgather(t->ctl, c->hash, all, CHECK_ITEMS_MAX * sizeof *all, &d);
    if (s != DDP_OK) control_abort(t->ctl, s);
    /* first differing (item, rank) against rank 0, the same on every rank */
    int bad_item = -1, bad_rank = -1, nbad = 0;
    for (int i = 0; i < c->n; i++)
        for (int r = 1; r < W; r++)
            if (all[(size_t)r * CHECK_ITEMS_MAX + i] != all[i]) {
                if (bad_item < 0) bad_item = i, bad_rank = r;
                if (i == bad_item) nbad++;
            }
    if (bad_item >= 0 && strcmp(c->name[bad_item], "input content") == 0) {
        s = content_mismatch_(t, fp, bad_rank, nbad);
    } else if (bad_item >= 0) {
        /* fetch the two values for the message */
        char mine[CONFIG_STR_MAX] = "", theirs[CONFIG_STR_MAX] = "";
        item_text_(t, c, bad_item, mine, sizeof mine);
        snprintf(theirs, sizeof theirs, "%s", mine);
        if (control_bcast(t->ctl, theirs, sizeof theirs, bad_rank, &d) != DDP_OK ||
            control_bcast(t->ctl, mine, sizeof mine, 0, &d) != DDP_OK)
            control_abort(t->ctl, ddp_fail(DDP_ERR_COMM, "%s", ddp_error_message()));
        s = ddp_fail(DDP_ERR_MISMATCH,
                     "ranks disagree on %s: rank 0 has '%s', rank %d has '%s'%s; "
                     "every rank must run with the same options and input files",
                     c->name[bad_item], mine, bad_rank, theirs,
                     nbad > 1 ? " (other ranks differ too)" : "");
    }
    free(all);
    free(c);
    free(fp);
    return s;
}
