/* config.h -- run options: one table drives the command line, --config
 * files, the /config attributes of the input deck, validation, --help, the
 * start-up table and the configuration stored in every saved weights file.
 *
 * Precedence: defaults < input file /config < --config FILE < command line.
 */
#ifndef DDP_CONFIG_H
#define DDP_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "status.h"

typedef enum opt_type { OPT_BOOL, OPT_INT, OPT_FLOAT, OPT_STRING, OPT_CHOICE } opt_type_t;
typedef enum opt_source { SRC_DEFAULT, SRC_INPUT, SRC_FILE, SRC_CMDLINE } opt_source_t;

typedef enum optimizer_kind { OPTIM_SGD, OPTIM_ADAMW } optimizer_kind_t;
typedef enum schedule_kind { SCHED_CONSTANT, SCHED_COSINE, SCHED_STEP } schedule_kind_t;
typedef enum loss_kind { LOSS_AUTO, LOSS_XENT, LOSS_MSE } loss_kind_t;
typedef enum compress_kind { COMPRESS_NONE, COMPRESS_BF16, COMPRESS_FP16 } compress_kind_t;
typedef enum device_kind { DEVICE_CPU, DEVICE_CUDA, DEVICE_AUTO } device_kind_t;
typedef enum precision_kind { PRECISION_FP32, PRECISION_BF16, PRECISION_TF32 } precision_kind_t;
typedef enum comm_kind { COMM_KIND_AUTO, COMM_KIND_MPI, COMM_KIND_NCCL } comm_kind_t;
typedef enum nonfinite_kind { NONFINITE_ABORT, NONFINITE_SKIP } nonfinite_kind_t;
typedef enum allreduce_kind {
    ALLREDUCE_AUTO,
    ALLREDUCE_HIER,
    ALLREDUCE_RING,
    ALLREDUCE_MPI
} allreduce_kind_t;
typedef enum update_kind { UPDATE_FUSED, UPDATE_BUCKET, UPDATE_STEP } update_kind_t;
typedef enum comm_thread_kind { COMM_THREAD_AUTO, COMM_THREAD_ON, COMM_THREAD_OFF } comm_thread_kind_t;

#define CONFIG_STR_MAX 512

typedef struct ddp_config {
    /* model and loss */
    char model[CONFIG_STR_MAX];
    int loss; /* loss_kind_t */
    double label_smoothing;
    /* data */
    int64_t batch;
    int64_t epochs;
    int64_t steps; /* 0: use epochs */
    int shuffle;
    int drop_last;
    int64_t prefetch;
    char augment[CONFIG_STR_MAX];
    int64_t eval_every;
    int check_data;
    /* optimisation */
    int optimizer; /* optimizer_kind_t */
    double lr;
    double momentum;
    int nesterov;
    double weight_decay;
    double beta1, beta2, eps;
    int lr_schedule; /* schedule_kind_t */
    int64_t warmup_steps;
    int64_t lr_step_size;
    double lr_gamma;
    double clip_grad_norm;
    int64_t accum;
    int64_t seed;
    /* device */
    int device;    /* device_kind_t */
    int precision; /* precision_kind_t */
    int comm;      /* comm_kind_t */
    /* distributed */
    double bucket_cap_mb; /* 0: auto (the trainer's bucket_cap_mb) */
    double first_bucket_mb;
    int grad_compress; /* compress_kind_t */
    int allreduce;     /* allreduce_kind_t: the MPI backend's algorithm */
    int comm_thread;   /* comm_thread_kind_t: progress all-reduces on a thread */
    int update;        /* update_kind_t: where the optimizer update runs */
    int64_t zero;      /* --zero: 0, 1 (shard the optimizer state), 2 (and the gradients) */
    char freeze[CONFIG_STR_MAX];
    int find_unused;
    int sync_bn; /* -1 auto: on when world > 1 and the model has bn */
    int sync;    /* all-reduce gradients (--no-sync: benchmark mode) */
    int64_t check_replicas;
    /* files and output */
    char init[CONFIG_STR_MAX];
    char save[CONFIG_STR_MAX];
    char metrics[CONFIG_STR_MAX]; /* JSON lines appended here (rank 0) */
    /* checkpoints */
    char ckpt_dir[CONFIG_STR_MAX];
    int64_t ckpt_every;          /* steps (0: off) */
    int64_t ckpt_every_epochs;   /* epochs (0: off) */
    int64_t keep;                /* checkpoints kept (0: all) */
    char resume[CONFIG_STR_MAX]; /* "", "auto" or a path */
    int resume_override;
    int resume_other_data;       /* --resume from a checkpoint of other data */
    /* diagnostics */
    double timeout;              /* seconds a collective may take (0: no watchdog) */
    int debug_collectives;       /* compare every collective's descriptor across ranks */
    double straggler_factor;     /* name a rank this much slower than the median */
    int on_nonfinite;            /* nonfinite_kind_t */
    int64_t max_skips;           /* --on-nonfinite skip: abort after this many in a row */
    char inject[CONFIG_STR_MAX]; /* fault injection (inject.h), comma-separated */
    int diagnose;                /* --diagnose: measure and judge instead of training */
    int64_t diagnose_steps;      /* measured steps per mode */
    char config[CONFIG_STR_MAX];
    int64_t log_every;
    int quiet;

    /* not options: where each value came from, and the inputs */
    opt_source_t source[64];
    int ninputs;
    char **inputs; /* positional arguments (point into argv) */
} ddp_config_t;

typedef struct ddp_option {
    const char *name; /* long option and config key */
    opt_type_t type;
    size_t offset;       /* into ddp_config_t */
    const char *def;     /* default, as text */
    const char *choices; /* OPT_CHOICE: "sgd|adamw" */
    const char *meta;    /* value placeholder in --help */
    double min, max;     /* numeric range (inclusive) */
    const char *help;
    const char *section; /* starts a --help section when non-NULL */
    int flags;           /* OPT_RESUMABLE | OPT_REPEATABLE */
} ddp_option_t;

/* ddp_option_t.flags */
#define OPT_RESUMABLE  1 /* may differ from the checkpoint's on --resume */
#define OPT_REPEATABLE 2 /* OPT_STRING: given again on one source, appends ",value" */

extern const ddp_option_t ddp_options[];
extern const int ddp_noptions;

typedef enum config_action { CONFIG_RUN, CONFIG_HELP, CONFIG_VERSION } config_action_t;

/* Reads the /config attributes of the first input file (deck_load_config). */
typedef ddp_status_t (*config_input_hook_t)(const char *path, ddp_config_t *c);

void config_defaults(ddp_config_t *c);
/* Release what config_parse_args allocated (the input list). */
void config_free(ddp_config_t *c);
/* Set one option from text; `where` names the source for error messages
 * ("command line", "config file run.cfg line 3", "input.h5 /config"). */
ddp_status_t config_set(ddp_config_t *c, const char *key, const char *value, opt_source_t src,
                        const char *where);
/* The whole precedence chain: defaults, then the first input's /config
 * (through `hook`, may be NULL), then --config FILE, then the command line;
 * then config_validate.  Collects the input files (positional arguments).
 * --help and --version set *action and skip the rest. */
ddp_status_t config_parse_args(ddp_config_t *c, int argc, char **argv, config_input_hook_t hook,
                               config_action_t *action);
/* Read key = value lines (# comments) into c.  The file must be a regular
 * file (not a directory, FIFO or device such as /dev/zero) of at most
 * CONFIG_FILE_MAX bytes, with lines of fewer than 2 * CONFIG_STR_MAX
 * characters; otherwise DDP_ERR_USAGE, naming the file and the limit. */
#define CONFIG_FILE_MAX (1024 * 1024)
ddp_status_t config_load_file(ddp_config_t *c, const char *path);
/* The shortest --timeout other than 0 (off), in seconds. */
#define CONFIG_TIMEOUT_MIN 1.0
/* Cross-option checks (that do not need the data or the world size),
 * among them every file option against the decks and each other
 * (pathclash.h): no output over an input or another output, none named
 * like a checkpoint in --ckpt-dir, no FIFO, device or directory. */
ddp_status_t config_validate(const ddp_config_t *c);

const ddp_option_t *config_find(const char *name);
/* Render an option's value as text. */
void config_format(const ddp_config_t *c, const ddp_option_t *o, char *buf, size_t n);
/* "key = value\n" for every option, in table order: the canonical form
 * stored in every saved weights file. */
size_t config_dump(const ddp_config_t *c, char *buf, size_t n);
void config_print_help(FILE *f, const char *prog);

const char *config_choice_name(const char *option, int value);

#endif
