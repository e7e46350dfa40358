/* stubs.c -- subcommands of ddptrain-prep that are not built yet. */
#include "prep.h"

ddp_status_t prep_idx(int argc, char **argv)
{
    return ddp_fail(DDP_ERR_USAGE, "idx: not available yet");
}
ddp_status_t prep_csv(int argc, char **argv)
{
    return ddp_fail(DDP_ERR_USAGE, "csv: not available yet");
}
ddp_status_t prep_split(int argc, char **argv)
{
    return ddp_fail(DDP_ERR_USAGE, "split: not available yet");
}
ddp_status_t prep_info(int argc, char **argv)
{
    return ddp_fail(DDP_ERR_USAGE, "info: not available yet");
}
