/* archs.h -- the named architectures of --model (resnet18 ...): a value of
 * --model expanded to the spec it stands for (archs.c). */
#ifndef DDP_ARCHS_H
#define DDP_ARCHS_H

#include "status.h"

/* The spec a --model value stands for: a named architecture (resnet20,
 * resnet18:width=32 ...; model_arch_help lists them) expanded to layers
 * with torchvision's names (the input's channels and the class count come
 * from the data: the stem's conv and linear:auto); any other value copied.
 * *out: a malloc'd string (the caller frees it). */
ddp_status_t model_expand(const char *spec, char **out);
extern const char *const model_arch_help;

#endif
