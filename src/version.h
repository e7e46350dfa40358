/* version.h -- `ddptrain --version`: version and build configuration. */
#ifndef DDP_VERSION_H
#define DDP_VERSION_H

#include <stdio.h>

void ddp_print_version(FILE *f, const char *prog);
const char *ddp_version(void);

#endif
