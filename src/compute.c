/* compute.c -- the registry of compute backends built into this binary. */
#include "compute.h"

#include <string.h>

#include "ddp_build.h"

const compute_ops_t *compute_find(const char *name)
{
    static const compute_ops_t *const all[] = {
        &compute_cpu_ops,
    };
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        if (strcmp(all[i]->name, name) == 0) return all[i];
    return NULL;
}
