/* data_csv.c - the strict CSV reader: a header row, a label column found by
 * name, every other column numeric, standardized with the file's own
 * per-feature statistics or with a statistics file; also reads and writes
 * those statistics files. Owns the datasets it returns. Must never accept a
 * field that does not parse whole, a quote, a ragged row, NaN or infinity. */
#include "model/data.h"

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
    double *x;  /* (n, features) values as written */
    int32_t *y; /* (n) labels */
    int classes;
} csv_raw;

typedef struct csv_line {
    const char *p;
    size_t len;    /* without '\n' and a trailing '\r' */
    size_t lineno; /* 1-based */
} csv_line;

typedef struct csv_cursor {
    const char *buf;
    size_t len, pos, lineno;
} csv_cursor;

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

static fed_err csv_fail(fed_err e, const char *name, size_t line, size_t col, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

static fed_err csv_fail(fed_err e, const char *name, size_t line, size_t col, const char *fmt, ...)
{
    char cause[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(cause, sizeof cause, fmt, ap);
    va_end(ap);
    if (col)
        fed_log(FED_LOG_ERROR, "%s:%zu: column %zu: %s (%s)", name, line, col, cause,
                fed_errname(e));
    else if (line)
        fed_log(FED_LOG_ERROR, "%s:%zu: %s (%s)", name, line, cause, fed_errname(e));
    else
        fed_log(FED_LOG_ERROR, "%s: %s (%s)", name, cause, fed_errname(e));
    return e;
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
    return FED_OK;
}

static fed_err parse_row(const csv_line *l, const char *name, size_t ncols, size_t label_at,
                         double *x, int32_t *y)
{
    const char *p = l->p, *end = l->p + l->len, *f, *why = "";
    size_t flen, col = 0;
    int more = 1;
    fed_err err;

    if (l->len == 0)
        return csv_fail(FED_ERR_FORMAT, name, l->lineno, 0, "empty line");
    while (more) {
        if (col == ncols)
            return csv_fail(FED_ERR_FORMAT, name, l->lineno, col + 1,
                            "more fields than the %zu of the header", ncols);
        more = next_field(&p, end, &f, &flen);
        if (col == label_at)
            err = parse_label(f, flen, y, &why);
        else
            err = parse_number(f, flen, x++, &why);
        if (err)
            return csv_fail(err, name, l->lineno, col + 1, "%s: '%.*s'", why,
                            (int)(flen > 40 ? 40 : flen), f);
        col++;
    }
    if (col != ncols)
        return csv_fail(FED_ERR_FORMAT, name, l->lineno, 0, "%zu fields, the header has %zu", col,
                        ncols);
    return FED_OK;
}

static void raw_free(csv_raw *r)
{
    fed_free(r->x);
    fed_free(r->y);
    memset(r, 0, sizeof *r);
}

static fed_err parse_raw(const char *buf, size_t len, const char *name, const char *label_col,
                         csv_raw *r)
{
    csv_cursor c = { buf, len, 0, 0 };
    csv_line l;
    size_t ncols = 0, label_at = 0, rows = 0, i = 0;
    int ok = 1;
    fed_err err;

    memset(r, 0, sizeof *r);
    if (len >= 3 && memcmp(buf, "\xef\xbb\xbf", 3) == 0)
        c.pos = 3; /* a UTF-8 byte-order mark, as spreadsheets write */
    if (!next_line(&c, &l))
        return csv_fail(FED_ERR_TRUNCATED, name, 0, 0, "empty file, no header");
    err = parse_header(&l, name, label_col, &ncols, &label_at);
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
    r->n = rows;
    r->features = ncols - 1;
    r->x = fed_malloc(fed_mul_size(rows, r->features * sizeof(double), &ok));
    r->y = fed_malloc(rows * sizeof *r->y);
    if (!ok || !r->x || !r->y) {
        raw_free(r);
        return FED_ERR_NOMEM;
    }
    while (next_line(&c, &l)) {
        err = parse_row(&l, name, ncols, label_at, r->x + i * r->features, r->y + i);
        if (err) {
            raw_free(r);
            return err;
        }
        if (r->y[i] + 1 > r->classes)
            r->classes = r->y[i] + 1;
        i++;
    }
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
    d->x_f32 = fed_malloc(r->n * f * sizeof *d->x_f32);
    d->y = fed_malloc(r->n * sizeof *d->y);
    if (!d->x_f32 || !d->y) {
        fed_data_free(d);
        return FED_ERR_NOMEM;
    }
    for (size_t i = 0; i < r->n; i++)
        for (size_t j = 0; j < f; j++) {
            float z = (float)((r->x[i * f + j] - mean[j]) / sd[j]);

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

static const char *label_of(const fed_csv_opts *opts)
{
    return opts && opts->label_column && *opts->label_column ? opts->label_column : "label";
}

/* Parse buf, then standardize with (mean, sd) if given, else with the stats
 * file of opts, else with its own statistics. */
static fed_err csv_dataset(const char *buf, size_t len, const char *name,
                           const fed_csv_opts *opts, const double *mean, const double *sd,
                           size_t want_features, int min_classes, fed_dataset **out)
{
    csv_raw r;
    double *m = NULL, *s = NULL;
    fed_err err;

    *out = NULL;
    err = parse_raw(buf, len, name, label_of(opts), &r);
    if (err)
        return err;
    if (mean && r.features != want_features) {
        err = csv_fail(FED_ERR_SHAPE, name, 0, 0, "%zu features, the training file has %zu",
                       r.features, want_features);
        goto out;
    }
    if (!mean && opts && opts->stats_path)
        err = load_stats(opts->stats_path, r.features, &m, &s);
    else if (!mean)
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
    return csv_dataset(buf, len, "<csv buffer>", opts, NULL, NULL, 0, 0, out);
}

fed_err fed_data_load_csv(const char *path, const fed_csv_opts *opts, fed_dataset **out)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    fed_err err;

    *out = NULL;
    err = fed_data_read_file(path, FED_DATA_MAX_BYTES, &buf, &len);
    if (!err)
        err = csv_dataset((const char *)buf, len, path, opts, NULL, NULL, 0, 0, out);
    fed_free(buf);
    return err;
}

fed_err fed_data_csv_stats(const char *path, const fed_csv_opts *opts, double **mean,
                           double **std, size_t *features)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    csv_raw r;
    fed_err err;

    *mean = *std = NULL;
    *features = 0;
    err = fed_data_read_file(path, FED_DATA_MAX_BYTES, &buf, &len);
    if (err)
        return err;
    err = parse_raw((const char *)buf, len, path, label_of(opts), &r);
    fed_free(buf);
    if (err)
        return err;
    err = own_stats(&r, mean, std);
    if (!err)
        *features = r.features;
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

fed_err fed_data_open_csv(const char *path, int train, const fed_csv_opts *opts,
                          fed_dataset **out)
{
    char sib[4096];
    struct stat st;
    uint8_t *buf = NULL;
    size_t len = 0, features = 0;
    double *mean = NULL, *sd = NULL;
    fed_dataset *tr = NULL;
    fed_err err;

    *out = NULL;
    if (train)
        return fed_data_load_csv(path, opts, out);
    if (!test_sibling(path, sib, sizeof sib) || stat(sib, &st) != 0 || !S_ISREG(st.st_mode)) {
        fed_log(FED_LOG_INFO, "%s: no separate test file (X.test.csv): testing on the training "
                              "data",
                path);
        return fed_data_load_csv(path, opts, out);
    }
    /* The test file is standardized like the training file and has at
     * least its classes. */
    err = fed_data_load_csv(path, opts, &tr);
    if (err)
        goto out;
    if (!(opts && opts->stats_path)) {
        err = fed_data_csv_stats(path, opts, &mean, &sd, &features);
        if (err)
            goto out;
    }
    err = fed_data_read_file(sib, FED_DATA_MAX_BYTES, &buf, &len);
    if (err)
        goto out;
    err = csv_dataset((const char *)buf, len, sib, opts, mean, sd, tr->features,
                      tr->shape.classes, out);
    if (!err && (*out)->shape.classes > tr->shape.classes)
        fed_log(FED_LOG_WARN, "%s: has labels up to %d, the training file only up to %d", sib,
                (*out)->shape.classes - 1, tr->shape.classes - 1);
out:
    fed_free(buf);
    fed_free(mean);
    fed_free(sd);
    fed_data_free(tr);
    return err;
}
