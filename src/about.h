/* about.h -- `ddptrain --version` (and the tools' --version): the version,
 * the backends the registries hold and the libraries of the build. */
#ifndef DDP_ABOUT_H
#define DDP_ABOUT_H

#include <stdio.h>

void ddp_print_version(FILE *f, const char *prog);

#endif
