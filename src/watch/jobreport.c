/* jobreport.c -- the text of a report that ends the job (see jobreport.h). */
#include "jobreport.h"

#include <stdarg.h>
#include <stdio.h>

void jobreport_add(jobreport_t *t, const char *fmt, ...)
{
    if (t->len >= sizeof t->buf - 1) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->buf + t->len, sizeof t->buf - t->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->len += (size_t)n < sizeof t->buf - t->len ? (size_t)n : sizeof t->buf - t->len - 1;
}

void jobreport_add_ranks(jobreport_t *t, const unsigned char *in, int n)
{
    int first = 1;
    for (int r = 0; r < n; r++) {
        if (!in[r]) continue;
        int e = r;
        while (e + 1 < n && in[e + 1]) e++;
        if (e == r)
            jobreport_add(t, "%s%d", first ? "" : ",", r);
        else
            jobreport_add(t, "%s%d-%d", first ? "" : ",", r, e);
        first = 0;
        r = e;
    }
}
