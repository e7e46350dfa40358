/* jobreport.h -- the text of a report that ends the job (the watchdog's,
 * --debug-collectives'): a buffer of fixed size, so that a report can be
 * written when memory is short or from a thread that must not allocate,
 * filled by printf-style appends and lists of ranks.  The report's first
 * line is its error line; the others start with "ddptrain:   ".  Text that
 * does not fit is cut. */
#ifndef DDP_JOBREPORT_H
#define DDP_JOBREPORT_H

#include <stddef.h>

typedef struct jobreport {
    char buf[16384];
    size_t len;
} jobreport_t;

/* Append printf-style (silently cut at the end of the buffer). */
void jobreport_add(jobreport_t *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Append the ranks r < n with in[r] set, as "0-3,5,9". */
void jobreport_add_ranks(jobreport_t *t, const unsigned char *in, int n);

#endif
