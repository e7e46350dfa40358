/* version.h -- the program's version, as checkpoints, weights files,
 * metrics records and the start-up table stamp it. */
#ifndef DDP_VERSION_H
#define DDP_VERSION_H

const char *ddp_version(void);

#endif
