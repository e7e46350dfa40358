/* ckpt_identity.c -- a checkpoint's run id and the fingerprint of the data
 * it was trained on (see ckpt_identity.h). */
#include "ckpt_identity.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "hash.h"
#include "log.h"

#define INPUTS_TEXT_MAX 4096 /* data_inputs: the paths, cut to this many bytes */

void ckpt_identity_new(ckpt_identity_t *id)
{
    uint64_t v = 0;
    if (getrandom(&v, sizeof v, GRND_NONBLOCK) != (ssize_t)sizeof v) {
        int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
        if (fd < 0 || read(fd, &v, sizeof v) != (ssize_t)sizeof v) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            uint64_t seed[3] = {(uint64_t)ts.tv_sec, (uint64_t)ts.tv_nsec, (uint64_t)getpid()};
            v = hash_bytes(HASH_SEED, seed, sizeof seed);
        }
        if (fd >= 0) close(fd);
    }
    snprintf(id->run_id, sizeof id->run_id, "%016llx", (unsigned long long)v);
    id->resumed = 0;
}

/* The content parts of every shard, in order (the file size is left out: a
 * changed /config group changes it, not the data). */
static uint64_t hash_deck_(uint64_t h, const deck_fp_t *fp, int n)
{
    h = hash_bytes(h, &n, sizeof n);
    for (int i = 0; i < n; i++)
        for (int p = 0; p < DECK_FP_PARTS; p++)
            if (p != DECK_FP_SIZE) h = hash_bytes(h, &fp[i].part[p], sizeof fp[i].part[p]);
    return h;
}

ddp_status_t ckpt_identity_data(ckpt_identity_t *id, const trainer_t *t)
{
    int n = t->train.nshards > t->val.nshards ? t->train.nshards : t->val.nshards;
    deck_fp_t *fp = ddp_calloc((size_t)n, sizeof *fp, "the data fingerprint");
    if (!fp) return DDP_ERR_NOMEM;
    uint64_t h = HASH_SEED;
    ddp_status_t s = deck_fingerprint(&t->train, fp);
    if (s == DDP_OK) h = hash_deck_(h, fp, t->train.nshards);
    if (s == DDP_OK && t->have_val) {
        s = deck_fingerprint(&t->val, fp);
        if (s == DDP_OK) h = hash_deck_(h, fp, t->val.nshards);
    }
    free(fp);
    if (s == DDP_OK) snprintf(id->data_fp, sizeof id->data_fp, "%016llx", (unsigned long long)h);
    return s;
}

static void inputs_text_(const ddp_config_t *cfg, char *buf, size_t n)
{
    size_t u = 0;
    buf[0] = '\0';
    for (int k = 0; k < cfg->ninputs && u < n; k++)
        u += (size_t)snprintf(buf + u, n - u, "%s%s", k ? " " : "", cfg->inputs[k]);
}

ddp_status_t ckpt_identity_write(const ckpt_identity_t *id, const trainer_t *t, hid_t f)
{
    char inputs[INPUTS_TEXT_MAX];
    inputs_text_(t->cfg, inputs, sizeof inputs);
    DDP_TRY(h5_attr_write_str(f, "run_id", id->run_id));
    DDP_TRY(h5_attr_write_str(f, "data_fingerprint", id->data_fp));
    return h5_attr_write_str(f, "data_inputs", inputs);
}

ddp_status_t ckpt_identity_check(ckpt_identity_t *id, const trainer_t *t, hid_t f, const char *path)
{
    id->ckpt_run_id[0] = '\0';
    char run[64] = "";
    if (h5_attr_exists(f, "run_id") && h5_attr_read_str(f, "run_id", run, sizeof run) == DDP_OK &&
        strlen(run) == CKPT_RUN_ID_LEN)
        snprintf(id->ckpt_run_id, sizeof id->ckpt_run_id, "%s", run);
    ddp_clear_error();
    char fp[64] = "", was[INPUTS_TEXT_MAX] = "", now[INPUTS_TEXT_MAX];
    inputs_text_(t->cfg, now, sizeof now);
    if (!h5_attr_exists(f, "data_fingerprint") ||
        h5_attr_read_str(f, "data_fingerprint", fp, sizeof fp) != DDP_OK) {
        ddp_clear_error();
        log_warn("--resume %s: the checkpoint does not record which data it was trained on "
                 "(written before ddptrain stored it); resuming on %s unchecked",
                 path, now);
        return DDP_OK;
    }
    if (strcmp(fp, id->data_fp) == 0) return DDP_OK;
    if (h5_attr_read_str(f, "data_inputs", was, sizeof was) != DDP_OK) {
        ddp_clear_error();
        snprintf(was, sizeof was, "(paths not recorded)");
    }
    if (t->cfg->resume_other_data) {
        log_warn("--resume %s: the checkpoint was trained on other data (%s, fingerprint %s) than "
                 "this run's (%s, fingerprint %s); going on with this run's (--resume-other-data)",
                 path, was, fp, now, id->data_fp);
        return DDP_OK;
    }
    return ddp_fail(DDP_ERR_INPUT,
                    "--resume %s: the checkpoint was trained on other data: %s (fingerprint %s), "
                    "this run reads %s (fingerprint %s); resume on the data it was trained on, "
                    "give this run another --ckpt-dir, or pass --resume-other-data to go on "
                    "with this data",
                    path, was, fp, now, id->data_fp);
}

void ckpt_identity_adopt(ckpt_identity_t *id)
{
    if (!id->ckpt_run_id[0]) return;
    snprintf(id->run_id, sizeof id->run_id, "%s", id->ckpt_run_id);
    id->resumed = 1;
}

int ckpt_identity_is_run(const char *path, const char *run_id)
{
    hid_t f;
    if (h5_open_read(path, &f) != DDP_OK) {
        ddp_clear_error();
        return 0;
    }
    char run[64] = "";
    int yes = h5_attr_exists(f, "run_id") &&
              h5_attr_read_str(f, "run_id", run, sizeof run) == DDP_OK && strcmp(run, run_id) == 0;
    ddp_clear_error();
    h5_lock();
    H5Fclose(f);
    h5_unlock();
    return yes;
}
