/* jsonl.c -- JSON Lines records (see jsonl.h). */
#include "jsonl.h"

#include "atomicfile.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_(jsonl_rec_t *r, const char *s, size_t n)
{
    if (r->oom) return;
    if (r->len + n + 1 > r->cap) {
        size_t cap = r->cap ? r->cap : 512;
        while (r->len + n + 1 > cap) cap *= 2;
        char *p = realloc(r->buf, cap);
        if (!p) {
            r->oom = 1;
            return;
        }
        r->buf = p;
        r->cap = cap;
    }
    memcpy(r->buf + r->len, s, n);
    r->len += n;
    r->buf[r->len] = '\0';
}

static void puts_(jsonl_rec_t *r, const char *s)
{
    put_(r, s, strlen(s));
}

static void string_(jsonl_rec_t *r, const char *s)
{
    put_(r, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        char esc[8];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            put_(r, esc, 2);
        } else if (*p == '\n') {
            puts_(r, "\\n");
        } else if (*p == '\t') {
            puts_(r, "\\t");
        } else if (*p == '\r') {
            puts_(r, "\\r");
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", *p);
            puts_(r, esc);
        } else {
            put_(r, (const char *)p, 1);
        }
    }
    put_(r, "\"", 1);
}

/* the separator and "key": (no key inside an array) */
static void key_(jsonl_rec_t *r, const char *key)
{
    if (!r->first) put_(r, ",", 1);
    r->first = 0;
    if (key) {
        string_(r, key);
        put_(r, ":", 1);
    }
}

void jsonl_begin(jsonl_rec_t *r, const char *type)
{
    memset(r, 0, sizeof *r);
    put_(r, "{", 1);
    r->first = 1;
    r->depth = 1;
    jsonl_str(r, "type", type);
}

void jsonl_num(jsonl_rec_t *r, const char *key, double v)
{
    key_(r, key);
    if (!isfinite(v)) {
        puts_(r, "null");
        return;
    }
    char b[40];
    /* 15 digits: 0.05 stays 0.05; integers up to 2^53 exactly */
    snprintf(b, sizeof b, "%.15g", v);
    puts_(r, b);
}

void jsonl_int(jsonl_rec_t *r, const char *key, int64_t v)
{
    key_(r, key);
    char b[32];
    snprintf(b, sizeof b, "%" PRId64, v);
    puts_(r, b);
}

void jsonl_str(jsonl_rec_t *r, const char *key, const char *s)
{
    key_(r, key);
    string_(r, s);
}

void jsonl_bool(jsonl_rec_t *r, const char *key, int v)
{
    key_(r, key);
    puts_(r, v ? "true" : "false");
}

void jsonl_null(jsonl_rec_t *r, const char *key)
{
    key_(r, key);
    puts_(r, "null");
}

void jsonl_object(jsonl_rec_t *r, const char *key)
{
    key_(r, key);
    put_(r, "{", 1);
    r->first = 1;
    r->depth++;
}

void jsonl_array(jsonl_rec_t *r, const char *key)
{
    key_(r, key);
    put_(r, "[", 1);
    r->first = 1;
    r->depth++;
}

void jsonl_close(jsonl_rec_t *r, char bracket)
{
    put_(r, &bracket, 1);
    r->first = 0;
    r->depth--;
}

const char *jsonl_finish(jsonl_rec_t *r)
{
    while (r->depth > 1) jsonl_close(r, '}');
    if (r->depth == 1) {
        puts_(r, "}\n");
        r->depth = 0;
    }
    return r->oom ? NULL : r->buf;
}

void jsonl_free(jsonl_rec_t *r)
{
    free(r->buf);
    memset(r, 0, sizeof *r);
}

int jsonl_write(jsonl_rec_t *r, FILE *f)
{
    const char *line = jsonl_finish(r);
    int rc = 0, fd = fileno(f);
    struct stat st;
    if (!line) {
        errno = ENOMEM;
        rc = -1;
    } else if (fflush(f) != 0 || fstat(fd, &st) != 0) {
        rc = -1;
    } else if (atomicfile_write_all(fd, line, r->len, NULL) != 0) {
        /* whole records only: cut the torn one back to where it began */
        int e = errno;
        int cut = ftruncate(fd, st.st_size); /* failed: the next open cuts it */
        (void)cut;
        errno = e;
        rc = -1;
    }
    jsonl_free(r);
    return rc;
}

int jsonl_cut_torn(FILE *f, long long *removed)
{
    *removed = 0;
    int fd = fileno(f);
    struct stat st;
    if (fflush(f) != 0 || fstat(fd, &st) != 0) return -1;
    if (!S_ISREG(st.st_mode) || st.st_size == 0) return 0;
    char buf[4096];
    off_t end = st.st_size, keep = 0;
    int last = 1;
    /* backwards, a block at a time, to the last '\n' */
    while (end > 0) {
        size_t n = end >= (off_t)sizeof buf ? sizeof buf : (size_t)end;
        ssize_t k = pread(fd, buf, n, end - (off_t)n);
        if (k != (ssize_t)n) {
            if (k >= 0) errno = EIO;
            return -1;
        }
        if (last && buf[n - 1] == '\n') return 0; /* whole */
        last = 0;
        size_t i = n;
        while (i > 0 && buf[i - 1] != '\n') i--;
        if (i > 0) {
            keep = end - (off_t)n + (off_t)i;
            break;
        }
        end -= (off_t)n;
    }
    if (ftruncate(fd, keep) != 0) return -1;
    *removed = (long long)(st.st_size - keep);
    return 0;
}
