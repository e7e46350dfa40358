/* compute.c -- the registry of compute backends built into this binary. */
#include "compute.h"

#include <string.h>

#include "ddp_build.h"

/* One line per backend, under the configure condition that builds it. */
static const compute_ops_t *const backends_[] = {
    &compute_cpu_ops,
};

int compute_backend_count(void)
{
    return (int)(sizeof backends_ / sizeof backends_[0]);
}

const compute_ops_t *compute_backend(int i)
{
    return i >= 0 && i < compute_backend_count() ? backends_[i] : NULL;
}

const compute_ops_t *compute_find(const char *name)
{
    for (int i = 0; i < compute_backend_count(); i++)
        if (strcmp(backends_[i]->name, name) == 0) return backends_[i];
    return NULL;
}
