/* ckpt_identity.h -- which run a checkpoint belongs to and which data it
 * was trained on.
 *
 * A run has an id, 16 hex digits made by rank 0 at a fresh start and
 * inherited from the checkpoint on --resume (a requeued or resubmitted
 * continuation is the same run).  Every checkpoint carries it as the root
 * attribute run_id, with data_fingerprint (16 hex digits over the content
 * fingerprint of every input file's /train and /val: deck_fingerprint's
 * layout, attributes and sampled bytes, not the file size or path) and
 * data_inputs (the input paths, for messages).
 *
 * --resume refuses a checkpoint whose data_fingerprint is not this run's
 * unless --resume-other-data; a checkpoint without one (written before
 * ddptrain stored it) is resumed with a warning.  --keep removes only
 * checkpoints whose run_id is this run's (ckpt_identity_is_run).
 *
 * Everything here runs on rank 0. */
#ifndef DDP_CKPT_IDENTITY_H
#define DDP_CKPT_IDENTITY_H

#include "h5util.h"
#include "status.h"
#include "step.h"

#define CKPT_RUN_ID_LEN 16

typedef struct ckpt_identity {
    char run_id[CKPT_RUN_ID_LEN + 1];  /* this run's */
    int resumed;                       /* run_id came from the checkpoint */
    char data_fp[CKPT_RUN_ID_LEN + 1]; /* this run's data ("" not yet computed) */
    /* the checkpoint read last by --resume: its run id ("" none recorded) */
    char ckpt_run_id[CKPT_RUN_ID_LEN + 1];
} ckpt_identity_t;

/* A fresh run id (getrandom, else /dev/urandom, else time and pid). */
void ckpt_identity_new(ckpt_identity_t *id);
/* The fingerprint of this run's data (t->train, t->val open).  Errors of
 * deck_fingerprint (a sampled chunk unreadable, out of memory). */
ddp_status_t ckpt_identity_data(ckpt_identity_t *id, const trainer_t *t);
/* The attributes run_id, data_fingerprint, data_inputs on f's root. */
ddp_status_t ckpt_identity_write(const ckpt_identity_t *id, const trainer_t *t, hid_t f);
/* --resume: is checkpoint f (at path) of this run's data?  Refused
 * (DDP_ERR_INPUT) when not, unless --resume-other-data (a warning); notes
 * the checkpoint's run id for ckpt_identity_adopt. */
ddp_status_t ckpt_identity_check(ckpt_identity_t *id, const trainer_t *t, hid_t f,
                                 const char *path);
/* The checkpoint resumed from is this run's past: its run id becomes this
 * run's (none recorded: the fresh one stays). */
void ckpt_identity_adopt(ckpt_identity_t *id);
/* 1 when the checkpoint at path records run_id as its run; 0 when it
 * records another, none, or cannot be read.  Safe in any thread. */
int ckpt_identity_is_run(const char *path, const char *run_id);

#endif
