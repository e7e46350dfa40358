/* jsonl.h -- one JSON object per line (JSON Lines), built in memory and
 * written with one fwrite and an fflush, so a reader never sees half a
 * record.  Keys are written in the order given; strings are escaped; a
 * number that is not finite is written as null, so every line is valid
 * JSON.  No allocation failure is reported until jsonl_write. */
#ifndef DDP_JSONL_H
#define DDP_JSONL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct jsonl_rec {
    char *buf;
    size_t len, cap;
    int oom;   /* an allocation failed: jsonl_write writes nothing */
    int first; /* no key yet in the innermost object */
    int depth; /* open objects and arrays */
} jsonl_rec_t;

/* Start a record: {"type":"<type>" */
void jsonl_begin(jsonl_rec_t *r, const char *type);
void jsonl_num(jsonl_rec_t *r, const char *key, double v); /* non-finite: null */
void jsonl_int(jsonl_rec_t *r, const char *key, int64_t v);
void jsonl_str(jsonl_rec_t *r, const char *key, const char *s);
void jsonl_bool(jsonl_rec_t *r, const char *key, int v);
void jsonl_null(jsonl_rec_t *r, const char *key);
/* A nested object or array under key; closed by jsonl_close.  Inside an
 * array, pass key NULL to the calls above to append an element. */
void jsonl_object(jsonl_rec_t *r, const char *key);
void jsonl_array(jsonl_rec_t *r, const char *key);
void jsonl_close(jsonl_rec_t *r, char bracket); /* '}' or ']' */
/* The finished line ("}\n" appended) to f, written past stdio's buffer
 * with write(2); 0, or -1 when an allocation or the write failed (errno
 * set).  A write that fails part-way (a full disk) is cut back
 * (ftruncate) to where the line began, so the file holds whole records
 * only.  Frees the buffer. */
int jsonl_write(jsonl_rec_t *r, FILE *f);
/* A file opened to append and read ("a+") whose last record is torn (it does not end in
 * '\n': a crash or a full disk mid-write) is cut back to after its last
 * '\n' (or to empty).  The bytes removed in *removed (0 when the file was
 * whole); 0, or -1 with errno when it cannot be read or cut. */
int jsonl_cut_torn(FILE *f, long long *removed);
/* The finished line in r->buf (NUL-terminated) without writing; for tests.
 * Call jsonl_free afterwards. */
const char *jsonl_finish(jsonl_rec_t *r);
void jsonl_free(jsonl_rec_t *r);

#endif
