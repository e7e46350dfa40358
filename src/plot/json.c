/* json.c -- a strict reader of one JSON object (a line of a metrics file):
 * the whole text is checked against RFC 8259, and the top-level members
 * with scalar values are kept for the caller (see plot.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plot.h"

#define JSON_MAX_DEPTH_ 64

typedef struct json_cursor {
    const char *s, *end, *start;
    char *err;
    size_t errn;
} json_cursor_t;

static int fail_(json_cursor_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail_(json_cursor_t *c, const char *fmt, ...)
{
    char what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errn, "%s at column %zu", what, (size_t)(c->s - c->start) + 1);
    return -1;
}

static void blanks_(json_cursor_t *c)
{
    while (c->s < c->end && (*c->s == ' ' || *c->s == '\t' || *c->s == '\n' || *c->s == '\r'))
        c->s++;
}

static const char *char_name_(json_cursor_t *c, char *buf, size_t n)
{
    if (c->s >= c->end) return "the end of the line";
    unsigned char ch = (unsigned char)*c->s;
    if (ch >= 0x20 && ch < 0x7f)
        snprintf(buf, n, "'%c'", ch);
    else
        snprintf(buf, n, "byte 0x%02x", ch);
    return buf;
}

static int hex4_(const char *p, unsigned *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char h = p[i];
        unsigned d = h >= '0' && h <= '9'   ? (unsigned)(h - '0')
                     : h >= 'a' && h <= 'f' ? (unsigned)(h - 'a' + 10)
                     : h >= 'A' && h <= 'F' ? (unsigned)(h - 'A' + 10)
                                            : 16u;
        if (d == 16) return -1;
        *v = *v * 16 + d;
    }
    return 0;
}

/* A string at c->s (the opening quote); its text (UTF-8, cut to n-1 bytes)
 * into out when out is not NULL. */
static int string_(json_cursor_t *c, char *out, size_t n)
{
    size_t o = 0;
    c->s++; /* the quote */
    for (;;) {
        if (c->s >= c->end) return fail_(c, "a string is not closed");
        unsigned char ch = (unsigned char)*c->s;
        if (ch == '"') {
            c->s++;
            break;
        }
        if (ch < 0x20) return fail_(c, "a control character (0x%02x) inside a string", ch);
        unsigned cp = ch;
        int escaped = 0;
        if (ch == '\\') {
            if (c->end - c->s < 2) return fail_(c, "a string is not closed");
            char e = c->s[1];
            escaped = 1;
            switch (e) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (c->end - c->s < 6 || hex4_(c->s + 2, &cp) != 0)
                    return fail_(c, "a \\u escape without 4 hex digits");
                escaped = 6;
                break;
            default: return fail_(c, "an unknown escape '\\%c' in a string", e);
            }
            c->s += escaped == 6 ? 6 : 2;
        } else {
            c->s++;
        }
        if (!out) continue;
        /* kept text: escapes decoded (a \u escape as UTF-8, surrogates as '?'),
         * other bytes as they are */
        char enc[4];
        size_t k = 0;
        if (!escaped || cp < 0x80) {
            enc[k++] = (char)cp;
        } else if (cp < 0x800) {
            enc[k++] = (char)(0xc0 | (cp >> 6));
            enc[k++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp >= 0xd800 && cp <= 0xdfff) {
            enc[k++] = '?';
        } else {
            enc[k++] = (char)(0xe0 | (cp >> 12));
            enc[k++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            enc[k++] = (char)(0x80 | (cp & 0x3f));
        }
        if (o + k < n) {
            memcpy(out + o, enc, k);
            o += k;
        }
    }
    if (out && n) out[o] = '\0';
    return 0;
}

static int number_(json_cursor_t *c, double *v)
{
    const char *p = c->s;
    if (p < c->end && *p == '-') p++;
    if (p >= c->end || *p < '0' || *p > '9') return fail_(c, "a malformed number");
    if (*p == '0')
        p++;
    else
        while (p < c->end && *p >= '0' && *p <= '9') p++;
    if (p < c->end && *p == '.') {
        p++;
        if (p >= c->end || *p < '0' || *p > '9') return fail_(c, "a malformed number");
        while (p < c->end && *p >= '0' && *p <= '9') p++;
    }
    if (p < c->end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < c->end && (*p == '+' || *p == '-')) p++;
        if (p >= c->end || *p < '0' || *p > '9') return fail_(c, "a malformed number");
        while (p < c->end && *p >= '0' && *p <= '9') p++;
    }
    char buf[64];
    size_t len = (size_t)(p - c->s);
    if (len >= sizeof buf) return fail_(c, "a number of more than %zu characters", sizeof buf - 1);
    memcpy(buf, c->s, len);
    buf[len] = '\0';
    errno = 0;
    *v = strtod(buf, NULL); /* the grammar is checked above; overflow gives +-HUGE_VAL */
    if (errno == ERANGE && (*v > 1.0 || *v < -1.0)) return fail_(c, "a number out of range");
    c->s = p;
    return 0;
}

static int literal_(json_cursor_t *c, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(c->end - c->s) < n || memcmp(c->s, word, n) != 0) {
        char b[16];
        return fail_(c, "unexpected %s", char_name_(c, b, sizeof b));
    }
    c->s += n;
    return 0;
}

static int value_(json_cursor_t *c, int depth, plot_json_field_t *keep);

/* An object or array at c->s; obj (top level only) gets the members. */
static int container_(json_cursor_t *c, int depth, plot_json_obj_t *obj)
{
    char close = *c->s == '{' ? '}' : ']';
    int is_obj = close == '}';
    if (depth >= JSON_MAX_DEPTH_) return fail_(c, "nested deeper than %d levels", JSON_MAX_DEPTH_);
    c->s++;
    blanks_(c);
    if (c->s < c->end && *c->s == close) {
        c->s++;
        return 0;
    }
    for (;;) {
        plot_json_field_t *keep = NULL;
        blanks_(c);
        if (is_obj) {
            char b[16];
            if (c->s >= c->end || *c->s != '"')
                return fail_(c, "expected a member name (a string), found %s",
                             char_name_(c, b, sizeof b));
            char key[PLOT_JSON_KEY_MAX];
            if (string_(c, key, sizeof key) != 0) return -1;
            if (obj && obj->n < PLOT_JSON_MAX_FIELDS) {
                keep = &obj->field[obj->n++];
                memset(keep, 0, sizeof *keep);
                memcpy(keep->key, key, sizeof key);
            }
            blanks_(c);
            if (c->s >= c->end || *c->s != ':')
                return fail_(c, "expected ':' after a member name, found %s",
                             char_name_(c, b, sizeof b));
            c->s++;
        }
        if (value_(c, depth + 1, keep) != 0) return -1;
        blanks_(c);
        char b[16];
        if (c->s < c->end && *c->s == ',') {
            c->s++;
            continue;
        }
        if (c->s < c->end && *c->s == close) {
            c->s++;
            return 0;
        }
        return fail_(c, "expected ',' or '%c', found %s", close, char_name_(c, b, sizeof b));
    }
}

static int value_(json_cursor_t *c, int depth, plot_json_field_t *keep)
{
    blanks_(c);
    char b[16];
    if (c->s >= c->end) return fail_(c, "a value is missing");
    plot_json_field_t dummy;
    if (!keep) keep = &dummy;
    switch (*c->s) {
    case '{': keep->kind = PLOT_JSON_OBJECT; return container_(c, depth, NULL);
    case '[': keep->kind = PLOT_JSON_ARRAY; return container_(c, depth, NULL);
    case '"': keep->kind = PLOT_JSON_STR; return string_(c, keep->str, sizeof keep->str);
    case 't':
        keep->kind = PLOT_JSON_BOOL;
        keep->num = 1;
        return literal_(c, "true");
    case 'f':
        keep->kind = PLOT_JSON_BOOL;
        keep->num = 0;
        return literal_(c, "false");
    case 'n': keep->kind = PLOT_JSON_NULL; return literal_(c, "null");
    default:
        if (*c->s == '-' || (*c->s >= '0' && *c->s <= '9')) {
            keep->kind = PLOT_JSON_NUM;
            return number_(c, &keep->num);
        }
        return fail_(c, "unexpected %s", char_name_(c, b, sizeof b));
    }
}

int plot_json_parse(const char *text, size_t len, plot_json_obj_t *obj, char *err, size_t errn)
{
    json_cursor_t c = {.s = text, .end = text + len, .start = text, .err = err, .errn = errn};
    obj->n = 0;
    blanks_(&c);
    char b[16];
    if (c.s >= c.end) return fail_(&c, "an empty line");
    if (*c.s != '{')
        return fail_(&c, "it does not start with '{' (found %s)", char_name_(&c, b, sizeof b));
    if (container_(&c, 0, obj) != 0) return -1;
    blanks_(&c);
    if (c.s < c.end)
        return fail_(&c, "text after the object's closing '}' (%s)", char_name_(&c, b, sizeof b));
    return 0;
}

const plot_json_field_t *plot_json_get(const plot_json_obj_t *obj, const char *key)
{
    for (int i = obj->n - 1; i >= 0; i--)
        if (strcmp(obj->field[i].key, key) == 0) return &obj->field[i];
    return NULL;
}

const char *plot_json_kind_name(plot_json_kind_t k)
{
    switch (k) {
    case PLOT_JSON_NULL: return "null";
    case PLOT_JSON_NUM: return "a number";
    case PLOT_JSON_STR: return "a string";
    case PLOT_JSON_BOOL: return "a boolean";
    case PLOT_JSON_OBJECT: return "an object";
    case PLOT_JSON_ARRAY: return "an array";
    }
    return "?";
}
