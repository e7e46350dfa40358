/* optagree.h -- the start-up agreement on the options: right after the
 * command line, the --config file and the input's /config are parsed, and
 * before anything whose collectives depend on an option (--debug-collectives,
 * the watchdog's --timeout, --inject), every rank compares what it parsed
 * with rank 0: the action (--help and --version given on some ranks only),
 * every option's value and the input file list, with one all-gather of one
 * fingerprint per item.  A difference is DDP_ERR_MISMATCH (exit 6) on every
 * rank, naming the option, rank 0's value, the first rank with another and
 * where each came from (default, input /config, config file, command line):
 * a stale node-local copy of a deck whose /config differs shows up here. */
#ifndef DDP_OPTAGREE_H
#define DDP_OPTAGREE_H

#include "config.h"
#include "control.h"
#include "status.h"

/* Collective on the control plane; the same status on every rank.  With
 * action other than CONFIG_RUN on every rank only the action is compared
 * (the rest of the options was not parsed). */
ddp_status_t optagree_check(control_t *ctl, const ddp_config_t *cfg, config_action_t action);

#endif
