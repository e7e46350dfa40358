/* opstable.h -- the check the registries make of an ops table (compute.c,
 * comm.c): which function pointer a table lacks, from a list of the fields
 * every backend must fill. */
#ifndef DDP_OPSTABLE_H
#define DDP_OPSTABLE_H

#include <stddef.h>
#include <string.h>

typedef struct ops_field {
    size_t off;       /* offsetof the function pointer in the table */
    const char *name; /* its name, for the message */
} ops_field_t;

#define OPS_FIELD(type, f) {offsetof(type, f), #f}

/* The name of the first of fields[0..n) that is NULL in `table`; NULL when
 * every one is set. */
static inline const char *ops_missing(const void *table, const ops_field_t *fields, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        void (*fn)(void);
        memcpy(&fn, (const char *)table + fields[i].off, sizeof fn);
        if (!fn) return fields[i].name;
    }
    return NULL;
}

#endif
