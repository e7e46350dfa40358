/* optagree.c -- the start-up agreement on the options (see optagree.h). */
#include "optagree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hash.h"

/* Items: the action, every option in table order, the input file list. */
#define ITEM_ACTION 0
#define ITEM_OPTION0 1
#define ITEM_INPUTS (ITEM_OPTION0 + ddp_noptions)
#define NITEMS (ITEM_INPUTS + 1)

static const char *action_name_(config_action_t a)
{
    return a == CONFIG_HELP ? "--help" : a == CONFIG_VERSION ? "--version" : "run";
}

static const char *source_name_(opt_source_t s)
{
    switch (s) {
    case SRC_INPUT: return "from the input file's /config";
    case SRC_FILE: return "from --config";
    case SRC_CMDLINE: return "from the command line";
    default: return "default";
    }
}

/* Item i's name for the message ("--timeout", "input files"). */
static void item_name_(int i, char *buf, size_t n)
{
    if (i == ITEM_ACTION)
        snprintf(buf, n, "--help or --version");
    else if (i == ITEM_INPUTS)
        snprintf(buf, n, "input files");
    else
        snprintf(buf, n, "--%s", ddp_options[i - ITEM_OPTION0].name);
}

/* Item i's value on this rank as text, and where an option's came from. */
typedef struct item_value {
    char text[CONFIG_STR_MAX];
    int source; /* opt_source_t; -1 when not an option */
} item_value_t;

static void item_value_(const ddp_config_t *cfg, config_action_t action, int i, item_value_t *v)
{
    v->text[0] = '\0';
    v->source = -1;
    if (i == ITEM_ACTION) {
        snprintf(v->text, sizeof v->text, "%s", action_name_(action));
    } else if (i == ITEM_INPUTS) {
        size_t u = 0, n = sizeof v->text;
        for (int k = 0; k < cfg->ninputs && u < n; k++)
            u += (size_t)snprintf(v->text + u, n - u, "%s%s", k ? " " : "", cfg->inputs[k]);
    } else {
        config_format(cfg, &ddp_options[i - ITEM_OPTION0], v->text, sizeof v->text);
        v->source = (int)cfg->source[i - ITEM_OPTION0];
    }
}

static uint64_t item_hash_(const ddp_config_t *cfg, config_action_t action, int i)
{
    if (i == ITEM_ACTION) return hash_bytes(HASH_SEED, &action, sizeof action);
    /* --help and --version skip the rest of the parse: nothing to compare */
    if (action != CONFIG_RUN) return 0;
    if (i == ITEM_INPUTS) {
        uint64_t h = HASH_SEED;
        for (int k = 0; k < cfg->ninputs; k++)
            h = hash_bytes(h, cfg->inputs[k], strlen(cfg->inputs[k]) + 1);
        return h;
    }
    const ddp_option_t *o = &ddp_options[i - ITEM_OPTION0];
    if (strcmp(o->name, "config") == 0) return 0; /* a path: the values it sets count */
    char val[CONFIG_STR_MAX];
    config_format(cfg, o, val, sizeof val);
    return hash_bytes(HASH_SEED, val, strlen(val));
}

ddp_status_t optagree_check(control_t *ctl, const ddp_config_t *cfg, config_action_t action)
{
    int W = ctl->size;
    if (W == 1) return DDP_OK;
    uint64_t *mine = malloc(NITEMS * sizeof *mine);
    uint64_t *all = malloc((size_t)W * NITEMS * sizeof *all);
    ddp_status_t s = control_agree(
        ctl, mine && all ? DDP_OK
                         : ddp_fail(DDP_ERR_NOMEM, "out of memory in the start-up agreement"));
    if (s != DDP_OK) {
        free(mine);
        free(all);
        return s;
    }
    for (int i = 0; i < NITEMS; i++) mine[i] = item_hash_(cfg, action, i);
    comm_desc_t d = {"startup-options", -1, -1};
    s = control_allgather(ctl, mine, all, NITEMS * sizeof *mine, &d);
    if (s != DDP_OK) control_abort(ctl, s);
    /* the first differing (item, rank) against rank 0, the same on every rank */
    int bad_item = -1, bad_rank = -1, nbad = 0;
    for (int i = 0; i < NITEMS; i++)
        for (int r = 1; r < W; r++)
            if (all[(size_t)r * NITEMS + i] != all[i]) {
                if (bad_item < 0) bad_item = i, bad_rank = r;
                if (i == bad_item) nbad++;
            }
    free(mine);
    free(all);
    if (bad_item < 0) return DDP_OK;
    /* the two values for the message: rank 0's and the first other rank's */
    item_value_t zero, other;
    item_value_(cfg, action, bad_item, &zero);
    other = zero;
    if (control_bcast(ctl, &other, sizeof other, bad_rank, &d) != DDP_OK ||
        control_bcast(ctl, &zero, sizeof zero, 0, &d) != DDP_OK)
        control_abort(ctl, ddp_fail(DDP_ERR_COMM, "%s", ddp_error_message()));
    char name[80], src0[64] = "", src1[64] = "";
    item_name_(bad_item, name, sizeof name);
    /* where the values came from, when that differs (a deck's /config on one node) */
    if (zero.source != other.source) {
        snprintf(src0, sizeof src0, " (%s)", source_name_((opt_source_t)zero.source));
        snprintf(src1, sizeof src1, " (%s)", source_name_((opt_source_t)other.source));
    }
    return ddp_fail(DDP_ERR_MISMATCH,
                    "ranks disagree on %s: rank 0 has '%s'%s, rank %d has '%s'%s%s; every rank "
                    "must run with the same options and input files (a stale node-local copy "
                    "of the input or config file?)",
                    name, zero.text, src0, bad_rank, other.text, src1,
                    nbad > 1 ? " (other ranks differ too)" : "");
}
