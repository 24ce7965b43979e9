/* data_csv.c - the strict CSV reader: a header row, a label column found by
 * name, every other column numeric, standardized with the file's own
 * per-feature statistics or with a statistics file; also reads and writes
 * those statistics files. Owns the datasets it returns. Must never accept a
 * field that does not parse whole, a quote, a ragged row, NaN or infinity. */
#include "model/data.h"
#include "model/colstats.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/alloc.h"
#include "core/log.h"

#define CSV_FIELD_MAX 256 /* longest numeric field we accept */
#define CSV_MAX_LABEL 255

typedef struct csv_raw {
    size_t n, features;
    double *x;  /* (n, features) values as written; NAN: missing (until filled) */
    int32_t *y; /* (n) labels */
    float *t;   /* (n) regression targets, or NULL */
    int classes;
    uint8_t *cat;     /* (features) categorical columns, or NULL */
    int buckets;      /* of the categorical columns */
    size_t missing;   /* cells empty or NA */
    size_t skipped;   /* bad rows skipped */
} csv_raw;

/* How a file is read: the label's column, the categorical columns (by
 * column, label included, NULL: none), whether bad rows are skipped. */
typedef struct csv_mode {
    size_t label_at;
    uint8_t *cat_col; /* (ncols) */
    int buckets;
    int skip;
    int regression; /* the label a number (fed_csv_opts.regression) */
    fed_log_level detect; /* --categorical auto's lines */
} csv_mode;

/* A read besides its options: a test file's training file (its name, its
 * categorical columns by feature or NULL, its features and classes; name
 * NULL: the file is no test file), and whether --categorical auto's lines
 * are kept to debug level (a file read again, once its training split
 * said them: the test split's, its statistics'). */
typedef struct csv_ctx {
    const char *train_name;
    const uint8_t *train_cat;
    size_t train_features;
    int train_classes;
    int quiet;
} csv_ctx;

typedef struct csv_line {
    const char *p;
    size_t len;    /* without '\n' and a trailing '\r' */
    size_t lineno; /* 1-based */
} csv_line;

typedef struct csv_cursor {
    const char *buf;
    size_t len, pos, lineno;
} csv_cursor;

/* A cursor at buf's first line, past a UTF-8 byte-order mark (as
 * spreadsheets write). */
static csv_cursor csv_start(const char *buf, size_t len)
{
    csv_cursor c = { buf, len, 0, 0 };

    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
        c.pos = 3;
    return c;
}

/* The next line; 0 at the end. A final '\n' does not start an empty line. */
static int next_line(csv_cursor *c, csv_line *l)
{
    const char *nl;
    size_t left;

    if (c->pos >= c->len)
        return 0;
    left = c->len - c->pos;
    l->p = c->buf + c->pos;
    nl = memchr(l->p, '\n', left);
    l->len = nl ? (size_t)(nl - l->p) : left;
    c->pos += l->len + (nl ? 1 : 0);
    if (l->len && l->p[l->len - 1] == '\r')
        l->len--;
    l->lineno = ++c->lineno;
    return 1;
}

static int is_blank(char ch) { return ch == ' ' || ch == '\t'; }

/* Field [*p, end) up to the next ',' with spaces and tabs trimmed; advances
 * *p past the comma. Returns 1 when a comma followed. */
static int next_field(const char **p, const char *end, const char **f, size_t *flen)
{
    const char *s = *p, *e;
    const char *comma = memchr(s, ',', (size_t)(end - s));
    int more = comma != NULL;

    e = comma ? comma : end;
    *p = comma ? comma + 1 : end;
    while (s < e && is_blank(*s))
        s++;
    while (e > s && is_blank(e[-1]))
        e--;
    *f = s;
    *flen = (size_t)(e - s);
    return more;
}

static fed_err csv_say(fed_log_level lvl, fed_err e, const char *name, size_t line, size_t col,
                       const char *fmt, va_list ap) __attribute__((format(printf, 6, 0)));

static fed_err csv_say(fed_log_level lvl, fed_err e, const char *name, size_t line, size_t col,
                       const char *fmt, va_list ap)
{
    char cause[512];

    vsnprintf(cause, sizeof cause, fmt, ap);
    if (col)
        fed_log(lvl, "%s:%zu: column %zu: %s (%s)", name, line, col, cause, fed_errname(e));
    else if (line)
        fed_log(lvl, "%s:%zu: %s (%s)", name, line, cause, fed_errname(e));
    else
        fed_log(lvl, "%s: %s (%s)", name, cause, fed_errname(e));
    return e;
}

static fed_err csv_fail(fed_err e, const char *name, size_t line, size_t col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static fed_err csv_fail(fed_err e, const char *name, size_t line, size_t col, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    csv_say(FED_LOG_ERROR, e, name, line, col, fmt, ap);
    va_end(ap);
    return e;
}

/* A row's fault: an error, or with skip a warning (the row is skipped). */
static fed_err row_fail(int skip, fed_err e, const char *name, size_t line, size_t col,
                        const char *fmt, ...) __attribute__((format(printf, 6, 7)));

static fed_err row_fail(int skip, fed_err e, const char *name, size_t line, size_t col,
                        const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    csv_say(skip ? FED_LOG_WARN : FED_LOG_ERROR, e, name, line, col, fmt, ap);
    va_end(ap);
    return e;
}

/* ---- SipHash-2-4 (Aumasson and Bernstein), written from the paper ---- */

static uint64_t rotl64(uint64_t x, int b) { return x << b | x >> (64 - b); }

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

#define SIPROUND                                                                           \
    do {                                                                                   \
        v0 += v1, v1 = rotl64(v1, 13), v1 ^= v0, v0 = rotl64(v0, 32);                      \
        v2 += v3, v3 = rotl64(v3, 16), v3 ^= v2;                                           \
        v0 += v3, v3 = rotl64(v3, 21), v3 ^= v0;                                           \
        v2 += v1, v1 = rotl64(v1, 17), v1 ^= v2, v2 = rotl64(v2, 32);                      \
    } while (0)

uint64_t fed_data_siphash(const uint8_t key[16], const void *msg, size_t len)
{
    const uint8_t *m = msg;
    uint64_t k0 = le64(key), k1 = le64(key + 8), b = (uint64_t)len << 56, w;
    uint64_t v0 = k0 ^ 0x736f6d6570736575ull, v1 = k1 ^ 0x646f72616e646f6dull;
    uint64_t v2 = k0 ^ 0x6c7967656e657261ull, v3 = k1 ^ 0x7465646279746573ull;
    size_t i;

    for (i = 0; i + 8 <= len; i += 8) {
        w = le64(m + i);
        v3 ^= w;
        SIPROUND;
        SIPROUND;
        v0 ^= w;
    }
    for (size_t k = 0; i + k < len; k++)
        b |= (uint64_t)m[i + k] << (8 * k);
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

static int is_missing(const char *f, size_t flen)
{
    return flen == 0 || (flen == 2 && f[0] == 'N' && f[1] == 'A');
}

/* A categorical cell's bucket: 0 missing, else 1 + hash % (buckets - 1). */
static double bucket_of(const char *f, size_t flen, int buckets)
{
    if (is_missing(f, flen))
        return 0;
    return (double)(1 + fed_data_siphash((const uint8_t *)FED_CSV_HASH_KEY, f, flen) %
                            (uint64_t)(buckets - 1));
}

/* A whole field as a finite double. */
static fed_err parse_number(const char *f, size_t flen, double *v, const char **why)
{
    char tmp[CSV_FIELD_MAX + 1];
    char *end;

    if (flen == 0) {
        *why = "empty field";
        return FED_ERR_NOT_NUMERIC;
    }
    if (memchr(f, '"', flen)) {
        *why = "quoted fields are not supported";
        return FED_ERR_FORMAT;
    }
    if (flen > CSV_FIELD_MAX) {
        *why = "field too long for a number";
        return FED_ERR_NOT_NUMERIC;
    }
    memcpy(tmp, f, flen);
    tmp[flen] = 0;
    errno = 0;
    *v = strtod(tmp, &end);
    if (end != tmp + flen || isspace((unsigned char)tmp[0])) {
        *why = "not a number";
        return FED_ERR_NOT_NUMERIC;
    }
    if (isnan(*v) || (isinf(*v) && errno != ERANGE)) {
        *why = "NaN or infinity";
        return FED_ERR_NAN;
    }
    if (isinf(*v)) {
        *why = "number overflows a double";
        return FED_ERR_RANGE;
    }
    return FED_OK;
}

/* A whole field as a label in [0, 255]: decimal digits only. */
static fed_err parse_label(const char *f, size_t flen, int32_t *y, const char **why)
{
    long v = 0;
    size_t i = 0;

    if (flen == 0) {
        *why = "empty label";
        return FED_ERR_NOT_NUMERIC;
    }
    if (memchr(f, '"', flen)) {
        *why = "quoted fields are not supported";
        return FED_ERR_FORMAT;
    }
    if (f[0] == '-' && flen > 1 && f[1] >= '0' && f[1] <= '9') {
        *why = "negative label";
        return FED_ERR_RANGE;
    }
    for (i = 0; i < flen; i++) {
        if (f[i] < '0' || f[i] > '9') {
            *why = "label is not a non-negative integer";
            return FED_ERR_NOT_NUMERIC;
        }
        if (v <= CSV_MAX_LABEL)
            v = v * 10 + (f[i] - '0');
    }
    if (v > CSV_MAX_LABEL) {
        *why = "label over 255";
        return FED_ERR_RANGE;
    }
    *y = (int32_t)v;
    return FED_OK;
}

typedef struct csv_name {
    const char *p;
    size_t len, col; /* col 1-based */
} csv_name;

/* By name, then by column. */
static int colname_cmp(const void *a, const void *b)
{
    const csv_name *x = a, *y = b;
    int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);

    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->col < y->col ? -1 : x->col > y->col;
}

/* The header's ncols names are distinct: else the first name met again
 * (reading left to right) is refused with both its columns. */
static fed_err unique_names(const csv_line *l, const char *name, size_t ncols)
{
    const char *p = l->p, *end = l->p + l->len;
    csv_name *v = fed_malloc(ncols * sizeof *v);
    size_t again = 0;
    fed_err err = FED_OK;

    if (!v)
        return FED_ERR_NOMEM;
    for (size_t col = 0; col < ncols; col++) {
        next_field(&p, end, &v[col].p, &v[col].len);
        v[col].col = col + 1;
    }
    qsort(v, ncols, sizeof *v, colname_cmp);
    for (size_t i = 1; i < ncols; i++)
        if (v[i].len == v[i - 1].len && memcmp(v[i].p, v[i - 1].p, v[i].len) == 0 &&
            (!again || v[i].col < v[again].col))
            again = i;
    if (again)
        err = csv_fail(FED_ERR_FORMAT, name, l->lineno, v[again].col,
                       "column name '%.*s' appears twice: columns %zu and %zu",
                       (int)(v[again].len > 40 ? 40 : v[again].len), v[again].p,
                       v[again - 1].col, v[again].col);
    fed_free(v);
    return err;
}

/* Header: find the label column (0-based) and count the columns. */
static fed_err parse_header(const csv_line *l, const char *name, const char *label_col,
                            size_t *ncols, size_t *label_at)
{
    const char *p = l->p, *end = l->p + l->len, *f;
    size_t flen, col = 0, found = 0;
    int more = 1;

    if (l->len == 0)
        return csv_fail(FED_ERR_FORMAT, name, l->lineno, 0, "empty header line");
    while (more) {
        more = next_field(&p, end, &f, &flen);
        col++;
        if (col > (size_t)FED_DATA_MAX_FEATURES + 1)
            return csv_fail(FED_ERR_TOO_LARGE, name, l->lineno, 0,
                            "more than %u feature columns", FED_DATA_MAX_FEATURES);
        if (memchr(f, '"', flen))
            return csv_fail(FED_ERR_FORMAT, name, l->lineno, col,
                            "quoted fields are not supported");
        if (flen == 0)
            return csv_fail(FED_ERR_FORMAT, name, l->lineno, col, "empty column name");
        if (flen == strlen(label_col) && memcmp(f, label_col, flen) == 0) {
            if (found)
                return csv_fail(FED_ERR_FORMAT, name, l->lineno, col,
                                "label column '%s' appears twice", label_col);
            found = col;
        }
    }
    if (!found)
        return csv_fail(FED_ERR_NOTFOUND, name, l->lineno, 0, "no column named '%s'",
                        label_col);
    if (col < 2)
        return csv_fail(FED_ERR_FORMAT, name, l->lineno, 0, "no feature columns");
    *ncols = col;
    *label_at = found - 1;
    return unique_names(l, name, col);
}

/* One data row into x (features) and y; *missing counts its empty or NA
 * cells (NAN in x for numeric ones). */
static fed_err parse_row(const csv_line *l, const char *name, size_t ncols, const csv_mode *m,
                         double *x, int32_t *y, float *t, size_t *missing)
{
    double v;

    const char *p = l->p, *end = l->p + l->len, *f, *why = "";
    size_t flen, col = 0;
    int more = 1;
    fed_err err;

    *missing = 0;
    if (l->len == 0)
        return row_fail(m->skip, FED_ERR_FORMAT, name, l->lineno, 0, "empty line");
    while (more) {
        if (col == ncols)
            return row_fail(m->skip, FED_ERR_FORMAT, name, l->lineno, col + 1,
                            "more fields than the %zu of the header", ncols);
        more = next_field(&p, end, &f, &flen);
        err = FED_OK;
        if (col == m->label_at && m->regression) {
            *y = 0;
            err = parse_number(f, flen, &v, &why);
            if (err == FED_OK && !isfinite((float)v)) {
                err = FED_ERR_RANGE;
                why = "target overflows a float";
            }
            *t = (float)v;
        } else if (col == m->label_at) {
            err = parse_label(f, flen, y, &why);
        } else if (memchr(f, '"', flen)) {
            err = FED_ERR_FORMAT;
            why = "quoted fields are not supported";
        } else if (m->cat_col && m->cat_col[col]) {
            *missing += is_missing(f, flen);
            *x++ = bucket_of(f, flen, m->buckets);
        } else if (is_missing(f, flen)) {
            (*missing)++;
            *x++ = NAN;
        } else {
            err = parse_number(f, flen, x++, &why);
        }
        if (err)
            return row_fail(m->skip, err, name, l->lineno, col + 1, "%s: '%.*s'", why,
                            (int)(flen > 40 ? 40 : flen), f);
        col++;
    }
    if (col != ncols)
        return row_fail(m->skip, FED_ERR_FORMAT, name, l->lineno, 0,
                        "%zu fields, the header has %zu", col, ncols);
    return FED_OK;
}

static const char *label_of(const fed_csv_opts *opts)
{
    return opts && opts->label_column && *opts->label_column ? opts->label_column : "label";
}

static void raw_free(csv_raw *r)
{
    fed_free(r->x);
    fed_free(r->y);
    fed_free(r->t);
    fed_free(r->cat);
    memset(r, 0, sizeof *r);
}

static int buckets_of(const fed_csv_opts *o)
{
    return o && o->hash_buckets ? o->hash_buckets : FED_CSV_DEFAULT_BUCKETS;
}

/* --categorical's list: each name must be a header column, not the label. */
static fed_err cats_by_name(const csv_line *head, const char *name, const char *list,
                            const csv_mode *m, uint8_t *cat_col)
{
    const char *lp = list, *lend = list + strlen(list), *want;
    size_t wlen;
    int lmore = 1;

    while (lmore) {
        const char *p = head->p, *end = head->p + head->len, *f;
        size_t flen, col = 0;
        int more = 1, found = 0;

        lmore = next_field(&lp, lend, &want, &wlen);
        if (wlen == 0)
            return csv_fail(FED_ERR_BAD_VALUE, name, 0, 0, "--categorical '%s' has an empty name",
                            list);
        while (more && !found) {
            more = next_field(&p, end, &f, &flen);
            if (flen == wlen && memcmp(f, want, wlen) == 0)
                found = 1;
            else
                col++;
        }
        if (!found)
            return csv_fail(FED_ERR_NOTFOUND, name, head->lineno, 0,
                            "no column named '%.*s' (--categorical)", (int)wlen, want);
        if (col == m->label_at)
            return csv_fail(FED_ERR_BAD_VALUE, name, head->lineno, col + 1,
                            "the label column cannot be categorical");
        cat_col[col] = 1;
    }
    return FED_OK;
}

/* --categorical auto: every column with a present cell that is not a
 * number, each reported with the first such cell. Rows of the wrong length
 * are left to the parse proper. */
static void cats_detect(csv_cursor c, const char *name, size_t ncols, const csv_mode *m,
                        uint8_t *cat_col)
{
    csv_line l;

    while (next_line(&c, &l)) {
        const char *p = l.p, *end = l.p + l.len, *f, *why;
        size_t flen, col = 0;
        int more = l.len > 0;
        double v;

        while (more && col < ncols) {
            more = next_field(&p, end, &f, &flen);
            if (col != m->label_at && !cat_col[col] && !is_missing(f, flen) &&
                !memchr(f, '"', flen) && parse_number(f, flen, &v, &why) == FED_ERR_NOT_NUMERIC) {
                cat_col[col] = 1;
                fed_log(m->detect, "%s:%zu: column %zu is categorical ('%.*s' is not a number)",
                        name, l.lineno, col + 1, (int)(flen > 40 ? 40 : flen), f);
            }
            col++;
        }
    }
}

/* The categorical columns of opts (or, for a test file, the training
 * file's, by feature: never detected anew) as a mask by column; NULL when
 * none. */
static fed_err cats_resolve(const csv_line *head, csv_cursor rows, const char *name,
                            const fed_csv_opts *opts, const csv_ctx *ctx, size_t ncols,
                            csv_mode *m)
{
    const char *list = opts ? opts->categorical : NULL;
    const uint8_t *force = ctx && ctx->train_name ? ctx->train_cat : NULL;
    size_t any = 0;
    fed_err err = FED_OK;

    m->cat_col = NULL;
    m->buckets = buckets_of(opts);
    if (ctx && ctx->train_name && !force)
        return FED_OK;
    if (!force && (!list || !*list))
        return FED_OK;
    if (force && ncols - 1 != ctx->train_features) /* the mask is by the training file's features */
        return csv_fail(FED_ERR_SHAPE, name, head->lineno, 0,
                        "%zu features, the training file has %zu", ncols - 1,
                        ctx->train_features);
    if (m->buckets < 2 || m->buckets > FED_CSV_MAX_BUCKETS)
        return csv_fail(FED_ERR_BAD_VALUE, name, 0, 0, "--hash-buckets %d: want 2..%d",
                        m->buckets, FED_CSV_MAX_BUCKETS);
    if (!(m->cat_col = fed_calloc(ncols, 1)))
        return FED_ERR_NOMEM;
    if (force) {
        for (size_t col = 0, j = 0; col < ncols; col++)
            if (col != m->label_at)
                m->cat_col[col] = force[j++];
    } else if (!strcmp(list, "auto")) {
        cats_detect(rows, name, ncols, m, m->cat_col);
    } else {
        err = cats_by_name(head, name, list, m, m->cat_col);
    }
    for (size_t col = 0; col < ncols; col++)
        any += m->cat_col[col];
    if (err || !any) {
        fed_free(m->cat_col);
        m->cat_col = NULL;
    }
    return err;
}

static fed_err parse_raw(const char *buf, size_t len, const char *name, const fed_csv_opts *opts,
                         const csv_ctx *ctx, csv_raw *r)
{
    csv_cursor c = csv_start(buf, len);
    csv_line l, head;
    csv_mode m = { 0, NULL, 0, opts && opts->skip_bad_rows, opts && opts->regression,
                   ctx && ctx->quiet ? FED_LOG_DEBUG : FED_LOG_INFO };
    size_t ncols = 0, rows = 0, i = 0;
    int ok = 1;
    fed_err err;

    memset(r, 0, sizeof *r);
    if (!next_line(&c, &head))
        return csv_fail(FED_ERR_TRUNCATED, name, 0, 0, "empty file, no header");
    err = parse_header(&head, name, label_of(opts), &ncols, &m.label_at);
    if (err)
        return err;
    /* Count rows first so the arrays are allocated once. */
    {
        csv_cursor cc = c;
        csv_line ll;

        while (next_line(&cc, &ll))
            rows++;
    }
    if (rows == 0)
        return csv_fail(FED_ERR_TRUNCATED, name, 0, 0, "no data rows after the header");
    if (rows > FED_DATA_MAX_SAMPLES)
        return csv_fail(FED_ERR_TOO_LARGE, name, 0, 0, "%zu rows, over the limit of %u", rows,
                        FED_DATA_MAX_SAMPLES);
    if ((err = cats_resolve(&head, c, name, opts, ctx, ncols, &m)) != FED_OK)
        return err;
    r->features = ncols - 1;
    r->buckets = m.buckets;
    r->x = fed_malloc(fed_mul_size(rows, r->features * sizeof(double), &ok));
    r->y = fed_malloc(rows * sizeof *r->y);
    if (m.regression && !(r->t = fed_malloc(rows * sizeof *r->t)))
        ok = 0;
    if (m.cat_col && (r->cat = fed_malloc(r->features)))
        for (size_t col = 0, j = 0; col < ncols; col++)
            if (col != m.label_at)
                r->cat[j++] = m.cat_col[col];
    if (!ok || !r->x || !r->y || (m.cat_col && !r->cat)) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    while (next_line(&c, &l)) {
        size_t miss = 0;

        err = parse_row(&l, name, ncols, &m, r->x + i * r->features, r->y + i,
                        r->t ? r->t + i : NULL, &miss);
        if (!err && ctx && ctx->train_name && !m.regression && r->y[i] >= ctx->train_classes)
            err = row_fail(m.skip, FED_ERR_RANGE, name, l.lineno, m.label_at + 1,
                           "label %d is not a class of the training file %s (its labels are "
                           "0 to %d)",
                           r->y[i], ctx->train_name, ctx->train_classes - 1);
        if (err && m.skip) {
            r->skipped++;
            err = FED_OK;
            continue;
        }
        if (err)
            goto out;
        r->missing += miss;
        if (r->y[i] + 1 > r->classes)
            r->classes = r->y[i] + 1;
        i++;
    }
    r->n = i;
    if (i == 0)
        err = csv_fail(FED_ERR_TRUNCATED, name, 0, 0, "all %zu data rows are bad (skipped)", rows);
    else if (r->skipped || r->missing)
        fed_log(FED_LOG_WARN, "%s: %zu bad rows skipped, %zu empty or NA cells filled", name,
                r->skipped, r->missing);
out:
    fed_free(m.cat_col);
    if (err)
        raw_free(r);
    return err;
}

/* Each missing (NAN) numeric cell gets fill[j], or the mean of its column's
 * present values when fill is NULL (0 for a column with none, warned). */
static fed_err fill_missing(csv_raw *r, const char *name, const double *fill)
{
    size_t f = r->features;
    double *own = NULL;

    if (!r->missing)
        return FED_OK;
    if (!fill) {
        size_t *cnt = fed_calloc(f, sizeof *cnt);

        own = fed_calloc(f, sizeof *own);
        if (!own || !cnt) {
            fed_free(own);
            fed_free(cnt);
            return FED_ERR_NOMEM;
        }
        for (size_t i = 0; i < r->n; i++)
            for (size_t j = 0; j < f; j++)
                if (!isnan(r->x[i * f + j]))
                    own[j] += r->x[i * f + j], cnt[j]++;
        for (size_t j = 0; j < f; j++) {
            if (!cnt[j])
                fed_log(FED_LOG_WARN, "%s: feature %zu has no values: filled with 0", name,
                        j + 1);
            own[j] = cnt[j] ? own[j] / (double)cnt[j] : 0.0;
        }
        fed_free(cnt);
        fill = own;
    }
    for (size_t i = 0; i < r->n; i++)
        for (size_t j = 0; j < f; j++)
            if (isnan(r->x[i * f + j]))
                r->x[i * f + j] = fill[j];
    fed_free(own);
    return FED_OK;
}

static fed_err own_stats(const csv_raw *r, double **mean_out, double **std_out)
{
    size_t f = r->features;
    double *mean = fed_calloc(f, sizeof *mean);
    double *var = fed_calloc(f, sizeof *var);

    if (!mean || !var) {
        fed_free(mean);
        fed_free(var);
        return FED_ERR_NOMEM;
    }
    for (size_t i = 0; i < r->n; i++)
        for (size_t j = 0; j < f; j++)
            mean[j] += r->x[i * f + j];
    for (size_t j = 0; j < f; j++)
        mean[j] /= (double)r->n;
    for (size_t i = 0; i < r->n; i++)
        for (size_t j = 0; j < f; j++) {
            double dlt = r->x[i * f + j] - mean[j];

            var[j] += dlt * dlt;
        }
    for (size_t j = 0; j < f; j++) {
        double s = sqrt(var[j] / (double)r->n);

        /* A constant column (up to rounding of its mean) gets std 1, so it
         * standardizes to ~0 rather than to rounding noise scaled to +-1. */
        var[j] = s > 1e-12 * fabs(mean[j]) && isfinite(s) ? s : 1.0; /* now the std */
        if (r->cat && r->cat[j]) /* bucket ids: not standardized */
            mean[j] = 0.0, var[j] = 1.0;
    }
    *mean_out = mean;
    *std_out = var;
    return FED_OK;
}

/* Statistics file: optional "mean,std" header, then one "MEAN,STD" line per
 * feature; STD finite and > 0. */
static fed_err load_stats(const char *path, size_t features, double **mean_out, double **std_out)
{
    uint8_t *buf = NULL;
    size_t len = 0, j = 0;
    double *mean = NULL, *sd = NULL;
    csv_cursor c;
    csv_line l;
    fed_err err;

    err = fed_data_read_file(path, FED_DATA_MAX_BYTES, &buf, &len);
    if (err)
        return err;
    mean = fed_calloc(features, sizeof *mean);
    sd = fed_calloc(features, sizeof *sd);
    if (!mean || !sd) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    c = (csv_cursor){ (const char *)buf, len, 0, 0 };
    while (next_line(&c, &l)) {
        const char *p = l.p, *end = l.p + l.len, *f, *why = "";
        size_t flen;
        double v[2];

        if (l.lineno == 1 && l.len >= 8 && memcmp(l.p, "mean,std", 8) == 0 &&
            (l.len == 8 || is_blank(l.p[8])))
            continue;
        if (j == features) {
            err = csv_fail(FED_ERR_SHAPE, path, l.lineno, 0, "more than %zu features", features);
            goto out;
        }
        for (int k = 0; k < 2; k++) {
            int more = next_field(&p, end, &f, &flen);

            err = parse_number(f, flen, &v[k], &why);
            if (!err && more != (k == 0)) {
                err = FED_ERR_FORMAT;
                why = "want two fields, MEAN,STD";
            }
            if (!err && k == 1 && !(v[1] > 0.0)) {
                err = FED_ERR_RANGE;
                why = "std must be > 0";
            }
            if (err) {
                err = csv_fail(err, path, l.lineno, (size_t)k + 1, "%s", why);
                goto out;
            }
        }
        mean[j] = v[0];
        sd[j] = v[1];
        j++;
    }
    if (j != features) {
        err = csv_fail(FED_ERR_SHAPE, path, 0, 0, "%zu features, the data has %zu", j, features);
        goto out;
    }
    *mean_out = mean;
    *std_out = sd;
    mean = sd = NULL;
out:
    fed_free(mean);
    fed_free(sd);
    fed_free(buf);
    return err;
}

/* Standardize r into a new dataset; r keeps ownership of its arrays.
 * Values whose standardized form is not a finite float are refused. */
static fed_err build(const csv_raw *r, const char *name, const double *mean, const double *sd,
                     int classes, fed_dataset **out)
{
    fed_dataset *d = fed_calloc(1, sizeof *d);
    size_t f = r->features;

    if (!d)
        return FED_ERR_NOMEM;
    d->n = r->n;
    d->features = f;
    d->shape.c = 1;
    d->shape.h = 1;
    d->shape.w = (int)f;
    d->shape.classes = classes;
    d->skipped = r->skipped;
    d->missing = r->missing;
    d->x_f32 = fed_malloc(r->n * f * sizeof *d->x_f32);
    d->y = fed_malloc(r->n * sizeof *d->y);
    if (r->t && (d->y_f32 = fed_malloc(r->n * sizeof *d->y_f32)))
        memcpy(d->y_f32, r->t, r->n * sizeof *d->y_f32);
    if (r->cat) {
        d->hash_buckets = r->buckets;
        if ((d->categorical = fed_malloc(f)))
            memcpy(d->categorical, r->cat, f);
    }
    if (!d->x_f32 || !d->y || (r->cat && !d->categorical) || (r->t && !d->y_f32)) {
        fed_data_free(d);
        return FED_ERR_NOMEM;
    }
    for (size_t i = 0; i < r->n; i++)
        for (size_t j = 0; j < f; j++) {
            float z = r->cat && r->cat[j] ? (float)r->x[i * f + j]
                                          : (float)((r->x[i * f + j] - mean[j]) / sd[j]);

            if (!isfinite(z) || !isfinite(mean[j])) {
                fed_data_free(d);
                return csv_fail(FED_ERR_RANGE, name, i + 2, 0,
                                "feature %zu: %g does not standardize to a finite float "
                                "(mean %g, std %g)",
                                j + 1, r->x[i * f + j], mean[j], sd[j]);
            }
            d->x_f32[i * f + j] = z;
        }
    memcpy(d->y, r->y, r->n * sizeof *d->y);
    *out = d;
    return FED_OK;
}

/* Parse buf (a test file: ctx's training file's categorical columns and
 * classes), fill its missing cells, then standardize with (mean, sd) if
 * given, else with the stats file of opts, else with its own statistics. */
static fed_err csv_dataset(const char *buf, size_t len, const char *name,
                           const fed_csv_opts *opts, const double *mean, const double *sd,
                           const csv_ctx *ctx, fed_dataset **out)
{
    int test = ctx && ctx->train_name;
    size_t want_features = test ? ctx->train_features : 0;
    int min_classes = test ? ctx->train_classes : 0;
    csv_raw r;
    double *m = NULL, *s = NULL;
    fed_err err;

    *out = NULL;
    err = parse_raw(buf, len, name, opts, ctx, &r);
    if (err)
        return err;
    if (test && r.features != want_features) {
        err = csv_fail(FED_ERR_SHAPE, name, 0, 0, "%zu features, the training file has %zu",
                       r.features, want_features);
        goto out;
    }
    if (!mean && opts && opts->stats_mean) { /* shared statistics */
        if (opts->stats_features != r.features) {
            err = csv_fail(FED_ERR_SHAPE, name, 0, 0, "%zu features, the shared statistics "
                           "have %zu", r.features, opts->stats_features);
            goto out;
        }
        mean = opts->stats_mean;
        sd = opts->stats_std;
    }
    if (!mean && opts && opts->stats_path)
        err = load_stats(opts->stats_path, r.features, &m, &s);
    if (!err)
        err = fill_missing(&r, name, opts && opts->fill ? opts->fill : mean ? mean : m);
    if (!err && !mean && !m)
        err = own_stats(&r, &m, &s);
    if (err)
        goto out;
    err = build(&r, name, mean ? mean : m, mean ? sd : s,
                r.classes > min_classes ? r.classes : min_classes, out);
out:
    fed_free(m);
    fed_free(s);
    raw_free(&r);
    return err;
}

fed_err fed_data_parse_csv(const char *buf, size_t len, const fed_csv_opts *opts,
                           fed_dataset **out)
{
    return csv_dataset(buf, len, "<csv buffer>", opts, NULL, NULL, NULL, out);
}

static fed_err csv_load(const char *path, const fed_csv_opts *opts, const csv_ctx *ctx,
                        fed_dataset **out)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    fed_err err;

    *out = NULL;
    err = fed_data_read_file(path, FED_DATA_MAX_BYTES, &buf, &len);
    if (!err)
        err = csv_dataset((const char *)buf, len, path, opts, NULL, NULL, ctx, out);
    fed_free(buf);
    return err;
}

fed_err fed_data_load_csv(const char *path, const fed_csv_opts *opts, fed_dataset **out)
{
    return csv_load(path, opts, NULL, out);
}

/* A file read again (its training split said what auto found). */
static const csv_ctx csv_again = { .quiet = 1 };

/* A CSV file's raw values (missing cells NaN, not filled). */
static fed_err read_raw(const char *path, const fed_csv_opts *opts, csv_raw *r)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    fed_err err = fed_data_read_file(path, FED_DATA_MAX_BYTES, &buf, &len);

    if (err)
        return err;
    err = parse_raw((const char *)buf, len, path, opts, &csv_again, r);
    fed_free(buf);
    return err;
}

/* The statistics a file standardizes with when it brings its own: its
 * missing cells filled (with opts' fill, else its means), then its
 * features' means and stds. */
static fed_err raw_stats(csv_raw *r, const char *name, const fed_csv_opts *opts, double **mean,
                         double **std)
{
    fed_err err = fill_missing(r, name, opts ? opts->fill : NULL);

    return err ? err : own_stats(r, mean, std);
}

fed_err fed_data_csv_stats(const char *path, const fed_csv_opts *opts, double **mean,
                           double **std, size_t *features)
{
    csv_raw r;
    fed_err err;

    *mean = *std = NULL;
    *features = 0;
    if ((err = read_raw(path, opts, &r)) != FED_OK)
        return err;
    err = raw_stats(&r, path, opts, mean, std);
    if (!err)
        *features = r.features;
    raw_free(&r);
    return err;
}

fed_err fed_data_csv_colstats(const char *path, const fed_csv_opts *opts, const uint32_t *rows,
                              size_t nrows, uint64_t min_count, int64_t **out, size_t *features,
                              size_t *suppressed)
{
    int64_t *ints = NULL;
    double *sel = NULL;
    char why[160] = "";
    csv_raw r;
    fed_err err;

    *out = NULL;
    *features = 0;
    *suppressed = 0;
    if ((err = read_raw(path, opts, &r)) != FED_OK)
        return err;
    if (!(ints = fed_calloc(r.features * FED_COLSTATS_INTS, sizeof *ints)) ||
        (rows && !(sel = fed_malloc((nrows ? nrows : 1) * r.features * sizeof *sel)))) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; rows && i < nrows; i++) { /* its shard's rows */
        if (rows[i] >= r.n) {
            err = csv_fail(FED_ERR_RANGE, path, 0, 0, "row %u of a shard, the file has %zu",
                           rows[i], r.n);
            goto out;
        }
        memcpy(sel + i * r.features, r.x + (size_t)rows[i] * r.features,
               r.features * sizeof *sel);
    }
    if (opts && opts->colstats_dp)
        err = fed_colstats_local_dp(rows ? sel : r.x, rows ? nrows : r.n, r.features, r.cat,
                                    opts->colstats_dp, ints, NULL);
    else
        err = fed_colstats_local(rows ? sel : r.x, rows ? nrows : r.n, r.features, r.cat,
                                 min_count, ints, suppressed, why, sizeof why);
    if (err) {
        fed_log(FED_LOG_ERROR, "%s: shared statistics: %s", path, why);
        goto out;
    }
    *out = ints;
    *features = r.features;
    ints = NULL;
out:
    fed_free(ints);
    fed_free(sel);
    raw_free(&r);
    return err;
}

fed_err fed_data_write_stats(const char *path, const double *mean, const double *std,
                             size_t features)
{
    FILE *f = fopen(path, "w");
    int bad;

    if (!f) {
        fed_log(FED_LOG_ERROR, "%s: cannot create statistics file", path);
        return FED_ERR_IO;
    }
    bad = fprintf(f, "mean,std\n") < 0;
    for (size_t j = 0; j < features && !bad; j++)
        bad = fprintf(f, "%.17g,%.17g\n", mean[j], std[j]) < 0;
    bad |= fclose(f) != 0;
    if (bad) {
        fed_log(FED_LOG_ERROR, "%s: write failed", path);
        return FED_ERR_IO;
    }
    return FED_OK;
}

/* "X.csv" -> "X.test.csv"; 0 when path does not end in ".csv". */
static int test_sibling(const char *path, char *out, size_t size)
{
    size_t n = strlen(path);

    if (n < 4 || strcmp(path + n - 4, ".csv") != 0 || n + 6 > size)
        return 0;
    memcpy(out, path, n - 4);
    memcpy(out + n - 4, ".test.csv", 10);
    return 1;
}

/* A column's name in a message: quoted, or "no column". */
static const char *col_said(char *buf, size_t cap, const char *f, size_t flen)
{
    if (!f)
        return "no column";
    snprintf(buf, cap, "'%.*s'", (int)(flen > 40 ? 40 : flen), f);
    return buf;
}

/* A test file's header (buf, name) is its training file's (tbuf, tname)
 * column for column: the first column that differs is refused, naming
 * both files (columns are matched by place, never reordered by name). An
 * empty test file is left to the parse proper. */
static fed_err same_header(const char *tbuf, size_t tlen, const char *tname, const char *buf,
                           size_t len, const char *name)
{
    csv_cursor tc = csv_start(tbuf, tlen), c = csv_start(buf, len);
    csv_line th, h;
    const char *tp, *tend, *p, *end;
    char said[2][48];
    size_t col = 0;
    int tmore = 1, more = 1;

    if (!next_line(&tc, &th) || !next_line(&c, &h) || h.len == 0)
        return FED_OK;
    tp = th.p, tend = th.p + th.len, p = h.p, end = h.p + h.len;
    while (tmore || more) {
        const char *tf = NULL, *f = NULL;
        size_t tflen = 0, flen = 0;

        col++;
        if (tmore)
            tmore = next_field(&tp, tend, &tf, &tflen);
        if (more)
            more = next_field(&p, end, &f, &flen);
        if (!tf || !f || tflen != flen || memcmp(tf, f, flen) != 0)
            return csv_fail(FED_ERR_SHAPE, name, h.lineno, col,
                            "%s where the training file %s has %s (a test file has its "
                            "training file's header)",
                            col_said(said[0], sizeof said[0], f, flen), tname,
                            col_said(said[1], sizeof said[1], tf, tflen));
    }
    return FED_OK;
}

fed_err fed_data_open_csv(const char *path, int train, const fed_csv_opts *opts,
                          fed_dataset **out)
{
    char sib[4096];
    struct stat st;
    uint8_t *tbuf = NULL, *buf = NULL;
    size_t tlen = 0, len = 0;
    double *mean = NULL, *sd = NULL;
    csv_raw tr;
    csv_ctx ctx;
    fed_err err;

    *out = NULL;
    memset(&tr, 0, sizeof tr);
    if (train)
        return fed_data_load_csv(path, opts, out);
    if (!test_sibling(path, sib, sizeof sib) || stat(sib, &st) != 0 || !S_ISREG(st.st_mode)) {
        fed_log(FED_LOG_INFO, "%s: no separate test file (X.test.csv): testing on the training "
                              "data",
                path);
        return csv_load(path, opts, &csv_again, out);
    }
    /* The test file has the training file's header, categorical columns
     * (never detected anew) and classes, and is standardized like it. */
    err = fed_data_read_file(path, FED_DATA_MAX_BYTES, &tbuf, &tlen);
    if (!err)
        err = parse_raw((const char *)tbuf, tlen, path, opts, &csv_again, &tr);
    if (!err && !(opts && (opts->stats_path || opts->stats_mean)))
        err = raw_stats(&tr, path, opts, &mean, &sd);
    if (!err)
        err = fed_data_read_file(sib, FED_DATA_MAX_BYTES, &buf, &len);
    if (!err)
        err = same_header((const char *)tbuf, tlen, path, (const char *)buf, len, sib);
    if (err)
        goto out;
    ctx = (csv_ctx){ path, tr.cat, tr.features, tr.classes, 1 };
    err = csv_dataset((const char *)buf, len, sib, opts, mean, sd, &ctx, out);
out:
    fed_free(buf);
    fed_free(tbuf);
    fed_free(mean);
    fed_free(sd);
    raw_free(&tr);
    return err;
}
