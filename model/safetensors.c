/* safetensors.c - the .safetensors writer and its strict reader: a small
 * hand-written JSON parser over a fixed grammar (header object > tensor
 * object > integer array), bounded in depth, lengths and counts.
 * Owns the parsed tensor list and, when read from a path, the file bytes.
 * Never trusts an offset or a size it has not checked against the data. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "model/safetensors.h"

#define JSON_INT_MAX ((1ull << 53) - 1) /* integers JSON readers keep exact */

/* ------------------------------------------------------------ floats -- */

/* Decodes n floats; returns 0 if any is NaN or infinite. */
static int le_to_f32(float *dst, const uint8_t *src, size_t n)
{
    int finite = 1;

    fed_get_f32le_n(dst, src, n);
    for (size_t i = 0; i < n; i++)
        if ((fed_f32_bits(dst[i]) & 0x7f800000u) == 0x7f800000u)
            finite = 0;
    return finite;
}

/* A count the model keeps as a float (FED_TENSOR_INT64) is an I64 in the
 * file: 8 bytes an element, else an F32's 4. */
static unsigned elem_bytes(unsigned flags)
{
    return flags & FED_TENSOR_INT64 ? 8 : 4;
}

/* n elements of a tensor of flags from src into p, little-endian. */
static void put_elems(uint8_t *p, const float *src, size_t n, unsigned flags)
{
    if (!(flags & FED_TENSOR_INT64)) {
        fed_put_f32le_n(p, src, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        fed_put_u64le(p + 8 * i, (uint64_t)(int64_t)llroundf(src[i]));
}

/* ------------------------------------------------------------ writing -- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        char *p;

        while (cap < b->n + n + 1)
            cap *= 2;
        p = fed_realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_u64(sbuf *b, uint64_t v)
{
    char t[24];

    snprintf(t, sizeof t, "%llu", (unsigned long long)v);
    sb_str(b, t);
}

/* A JSON string: quotes, backslash and control characters escaped. */
static void sb_json(sbuf *b, const char *s)
{
    sb_put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};

            sb_put(b, e, 2);
        } else if (c < 0x20) {
            char e[8];

            snprintf(e, sizeof e, "\\u%04x", c);
            sb_str(b, e);
        } else {
            sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

static fed_err check_model(const fed_store_st_model *m)
{
    if (!m || m->nt < 0 || m->nt > FED_ST_MAX_TENSORS || (m->nt && (!m->t || !m->params)))
        return FED_ERR_INVAL;
    if (m->spec && strlen(m->spec) >= FED_MODEL_SPEC_MAX)
        return FED_ERR_INVAL;
    for (int i = 0; i < m->nt; i++) {
        const fed_tensor_info *t = &m->t[i];
        uint64_t numel = 1;

        if (t->ndim < 0 || t->ndim > 4 || !t->name[0] || !memchr(t->name, 0, sizeof t->name))
            return FED_ERR_INVAL;
        for (int k = 0; k < t->ndim; k++) {
            if (t->shape[k] < 0)
                return FED_ERR_SHAPE;
            numel *= (uint64_t)t->shape[k];
        }
        if (numel != t->numel)
            return FED_ERR_SHAPE;
    }
    return FED_OK;
}

/* v (n of them) as "v1,v2,..." (%.17g each) to put under key. */
static fed_err put_list(fed_store_st_meta_fn put, void *ctx, const char *key, const double *v,
                        size_t n)
{
    sbuf b = {0};
    char t[32];

    sb_str(&b, "");
    for (size_t i = 0; i < n; i++) {
        snprintf(t, sizeof t, "%s%.17g", i ? "," : "", v[i]);
        sb_str(&b, t);
    }
    if (!b.oom)
        put(ctx, key, b.p);
    fed_free(b.p);
    return b.oom ? FED_ERR_NOMEM : FED_OK;
}

fed_err fed_store_safetensors_metadata(const fed_store_st_model *m, fed_store_st_meta_fn put,
                                       void *ctx)
{
    int kind = m->input_kind;
    char t[96];
    fed_err e = FED_OK;

    if (m->spec)
        put(ctx, "fednode.spec", m->spec);
    if (m->input.classes <= 0)
        return FED_OK;
    snprintf(t, sizeof t, "%d,%d,%d", m->input.c, m->input.h, m->input.w);
    put(ctx, "fednode.input", t);
    snprintf(t, sizeof t, "%d", m->input.classes);
    put(ctx, "fednode.classes", t);
    if (kind == FED_ST_INPUT_PIXELS) {
        float mul, add;

        fed_model_input_map(m->input.scale, &mul, &add);
        put(ctx, "fednode.input_dtype", "uint8");
        snprintf(t, sizeof t, "%.17g", (double)mul);
        put(ctx, "fednode.input_scale", t);
        snprintf(t, sizeof t, "%.17g", (double)add);
        put(ctx, "fednode.input_shift", t);
        if (m->stats_mean) { /* per channel, of the bytes */
            if ((e = put_list(put, ctx, "fednode.input_mean", m->stats_mean, m->stats_cols)) ||
                (e = put_list(put, ctx, "fednode.input_std", m->stats_std, m->stats_cols)))
                return e;
            put(ctx, "fednode.input_stats", "channel");
            put(ctx, "fednode.input_transform",
                "each channel c standardized, x = (byte - mean[c]) / std[c], with the "
                "federation's shared statistics of the pixel bytes 0..255 (pooled over every "
                "site): mean = fednode.input_mean, std = fednode.input_std, one a channel "
                "(fednode.input_stats = channel; fednode.input_scale and input_shift do not "
                "apply); torchvision: ToTensor() then Normalize(mean / 255, std / 255); logreg "
                "and mlp take x flattened, x.flatten(1)");
            return FED_OK;
        }
        put(ctx, "fednode.input_transform",
            m->input.scale == FED_MODEL_INPUT_UNIT
                ? "x = byte * fednode.input_scale + fednode.input_shift = byte / 255, "
                  "in [0, 1] (torchvision: ToTensor()); logreg and mlp take x "
                  "flattened, x.flatten(1)"
                : "x = byte * fednode.input_scale + fednode.input_shift = byte / 127.5 - 1, "
                  "in [-1, 1] (torchvision: ToTensor() then Normalize((0.5,), (0.5,))); "
                  "logreg and mlp take x flattened, x.flatten(1)");
    } else if (kind == FED_ST_INPUT_STANDARDIZED && m->stats_mean) {
        if ((e = put_list(put, ctx, "fednode.input_mean", m->stats_mean, m->stats_cols)) ||
            (e = put_list(put, ctx, "fednode.input_std", m->stats_std, m->stats_cols)) ||
            (m->stats_missing && (e = put_list(put, ctx, "fednode.input_missing_rate",
                                               m->stats_missing, m->stats_cols))))
            return e;
        put(ctx, "fednode.input_transform",
            "each CSV feature j standardized, (x - mean[j]) / std[j], with the "
            "federation's shared statistics (pooled over every site): mean = "
            "fednode.input_mean, std = fednode.input_std (population std; 0 and 1 for a "
            "column suppressed or constant); a missing cell is mean[j]");
    } else if (kind == FED_ST_INPUT_STANDARDIZED) {
        put(ctx, "fednode.input_transform",
            "each CSV feature standardized, (x - mean) / std, with the training file's "
            "own mean and population std (std 1 for a constant column)");
    }
    return FED_OK;
}

/* One metadata entry into the JSON header, after those before it. */
typedef struct json_meta {
    sbuf *b;
    int n;
} json_meta;

static void put_json(void *ctx, const char *key, const char *value)
{
    json_meta *j = ctx;

    sb_str(j->b, j->n++ ? "," : "");
    sb_json(j->b, key);
    sb_str(j->b, ":");
    sb_json(j->b, value);
}

/* The JSON header, padded with spaces to a multiple of 8. *data_len gets
 * the bytes after it. */
static fed_err build_header(const fed_store_st_model *m, sbuf *b, uint64_t *data_len)
{
    uint64_t pos = 0;
    int first = 1;

    memset(b, 0, sizeof *b);
    sb_str(b, "{");
    if (m->spec || m->input.classes > 0) {
        json_meta j = {b, 0};

        sb_str(b, "\"__metadata__\":{");
        if (fed_store_safetensors_metadata(m, put_json, &j) != FED_OK)
            b->oom = 1;
        sb_str(b, "}");
        first = 0;
    }
    for (int i = 0; i < m->nt; i++) {
        const fed_tensor_info *t = &m->t[i];
        uint64_t bytes = (uint64_t)t->numel * elem_bytes(t->flags);

        sb_str(b, first ? "" : ",");
        first = 0;
        sb_json(b, t->name);
        sb_str(b, t->flags & FED_TENSOR_INT64 ? ":{\"dtype\":\"I64\",\"shape\":["
                                              : ":{\"dtype\":\"F32\",\"shape\":[");
        for (int k = 0; k < t->ndim; k++) {
            sb_str(b, k ? "," : "");
            sb_u64(b, (uint64_t)t->shape[k]);
        }
        sb_str(b, "],\"data_offsets\":[");
        sb_u64(b, pos);
        sb_str(b, ",");
        sb_u64(b, pos + bytes);
        sb_str(b, "]}");
        pos += bytes;
    }
    sb_str(b, "}");
    while (!b->oom && b->n % 8)
        sb_str(b, " ");
    if (b->oom) {
        fed_free(b->p);
        memset(b, 0, sizeof *b);
        return FED_ERR_NOMEM;
    }
    *data_len = pos;
    return FED_OK;
}

fed_err fed_store_safetensors_size(const fed_store_st_model *m, size_t *len)
{
    uint64_t data = 0;
    sbuf b;
    fed_err e = check_model(m);

    if (e != FED_OK || (e = build_header(m, &b, &data)) != FED_OK)
        return e;
    *len = 8 + b.n + (size_t)data;
    fed_free(b.p);
    return FED_OK;
}

fed_err fed_store_safetensors_encode(const fed_store_st_model *m, uint8_t **out, size_t *len)
{
    uint64_t data = 0;
    uint8_t *buf, *p;
    sbuf b;
    fed_err e = check_model(m);

    *out = NULL;
    if (e != FED_OK || (e = build_header(m, &b, &data)) != FED_OK)
        return e;
    buf = fed_malloc(8 + b.n + (size_t)data);
    if (!buf) {
        fed_free(b.p);
        return FED_ERR_NOMEM;
    }
    fed_put_u64le(buf, b.n);
    memcpy(buf + 8, b.p, b.n);
    p = buf + 8 + b.n;
    for (int i = 0; i < m->nt; i++) {
        put_elems(p, m->params + m->t[i].offset, m->t[i].numel, m->t[i].flags);
        p += m->t[i].numel * elem_bytes(m->t[i].flags);
    }
    *len = 8 + b.n + (size_t)data;
    *out = buf;
    fed_free(b.p);
    return FED_OK;
}

static fed_err errno_err(int err)
{
    switch (err) {
    case ENOSPC:
    case EDQUOT:
        return FED_ERR_FULL;
    case EROFS:
        return FED_ERR_READONLY;
    case EACCES:
    case EPERM:
        return FED_ERR_PERM;
    case ENOENT:
        return FED_ERR_NOTFOUND;
    default:
        return FED_ERR_IO;
    }
}

static fed_err write_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;

    while (n) {
        ssize_t w = write(fd, b, n > (1u << 30) ? (1u << 30) : n);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return errno_err(w < 0 ? errno : ENOSPC);
        b += w;
        n -= (size_t)w;
    }
    return FED_OK;
}

/* Writes tensor t's elements little-endian, through a bounded buffer
 * (tmp_bytes). */
static fed_err write_tensor(int fd, const float *src, const fed_tensor_info *t, uint8_t *tmp,
                            size_t tmp_bytes)
{
    size_t per = tmp_bytes / elem_bytes(t->flags), n = t->numel;

    for (size_t i = 0; i < n; i += per) {
        size_t k = n - i < per ? n - i : per;
        fed_err e;

        put_elems(tmp, src + i, k, t->flags);
        if ((e = write_all(fd, tmp, k * elem_bytes(t->flags))) != FED_OK)
            return e;
    }
    return FED_OK;
}

fed_err fed_store_safetensors_save(const char *path, const fed_store_st_model *m)
{
    enum { TMP_FLOATS = 1 << 18 };
    char tmp[4096];
    uint8_t len8[8];
    uint8_t *conv = NULL;
    uint64_t data = 0;
    int fd = -1;
    sbuf b;
    fed_err e = check_model(m);

    memset(&b, 0, sizeof b);
    if (e != FED_OK)
        return e;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp)
        return FED_ERR_INVAL;
    if ((e = build_header(m, &b, &data)) != FED_OK)
        return e;
    if (!(conv = fed_malloc(TMP_FLOATS * 4))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        e = errno_err(errno);
        fed_log(FED_LOG_ERROR, "safetensors: cannot create %s: %s", tmp, strerror(errno));
        goto out;
    }
    fed_put_u64le(len8, b.n);
    if ((e = write_all(fd, len8, 8)) != FED_OK || (e = write_all(fd, b.p, b.n)) != FED_OK)
        goto out;
    for (int i = 0; i < m->nt && e == FED_OK; i++)
        e = write_tensor(fd, m->params + m->t[i].offset, &m->t[i], conv, TMP_FLOATS * 4);
    if (e == FED_OK && fsync(fd) != 0)
        e = errno_err(errno);
    if (close(fd) != 0 && e == FED_OK)
        e = errno_err(errno);
    fd = -1;
    if (e == FED_OK && rename(tmp, path) != 0)
        e = errno_err(errno);
out:
    if (fd >= 0)
        close(fd);
    if (e != FED_OK) {
        unlink(tmp);
        fed_log(FED_LOG_ERROR, "safetensors: writing %s failed: %s", path, fed_strerror(e));
    }
    fed_free(conv);
    fed_free(b.p);
    return e;
}

/* ------------------------------------------------------------ parsing -- */

typedef struct jp {
    const uint8_t *p, *end;
} jp;

static void ws(jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int peek(jp *j)
{
    ws(j);
    return j->p < j->end ? *j->p : -1;
}

static fed_err expect(jp *j, char c)
{
    if (peek(j) != (unsigned char)c)
        return FED_ERR_FORMAT;
    j->p++;
    return FED_OK;
}

/* Length of a well-formed UTF-8 sequence at p (non-ASCII lead), or 0. */
static size_t utf8_seq(const uint8_t *p, const uint8_t *end)
{
    uint32_t cp;
    size_t n;

    if (p[0] >= 0xc2 && p[0] <= 0xdf)
        n = 2, cp = p[0] & 0x1f;
    else if (p[0] >= 0xe0 && p[0] <= 0xef)
        n = 3, cp = p[0] & 0x0f;
    else if (p[0] >= 0xf0 && p[0] <= 0xf4)
        n = 4, cp = p[0] & 0x07;
    else
        return 0;
    if ((size_t)(end - p) < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3f);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (n == 4 && (cp < 0x10000 || cp > 0x10ffff)))
        return 0;
    return n;
}

static int hex4(const uint8_t *p, uint32_t *v)
{
    *v = 0;
    for (int i = 0; i < 4; i++) {
        int c = p[i], d;

        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return 0;
        *v = *v << 4 | (uint32_t)d;
    }
    return 1;
}

/* Appends bytes to dst (cap includes the NUL); dst NULL discards. */
static fed_err str_add(char *dst, size_t cap, size_t *n, const void *s, size_t k)
{
    if (dst) {
        if (*n + k + 1 > cap)
            return FED_ERR_TOO_LARGE;
        memcpy(dst + *n, s, k);
        dst[*n + k] = '\0';
    }
    *n += k;
    return FED_OK;
}

/* A \uXXXX escape (j->p after the 'u'), surrogate pairs joined, as UTF-8. */
static fed_err parse_u_escape(jp *j, char *dst, size_t cap, size_t *n)
{
    uint8_t out[4];
    uint32_t cp, lo;
    size_t k;

    if (j->end - j->p < 4 || !hex4(j->p, &cp))
        return FED_ERR_FORMAT;
    j->p += 4;
    if (cp >= 0xdc00 && cp <= 0xdfff)
        return FED_ERR_FORMAT;
    if (cp >= 0xd800 && cp <= 0xdbff) {
        if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || !hex4(j->p + 2, &lo) ||
            lo < 0xdc00 || lo > 0xdfff)
            return FED_ERR_FORMAT;
        j->p += 6;
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    if (cp == 0)
        return FED_ERR_FORMAT; /* no NUL inside a C string */
    if (cp < 0x80) {
        out[0] = (uint8_t)cp, k = 1;
    } else if (cp < 0x800) {
        out[0] = (uint8_t)(0xc0 | cp >> 6), out[1] = (uint8_t)(0x80 | (cp & 0x3f)), k = 2;
    } else if (cp < 0x10000) {
        out[0] = (uint8_t)(0xe0 | cp >> 12), out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (uint8_t)(0x80 | (cp & 0x3f)), k = 3;
    } else {
        out[0] = (uint8_t)(0xf0 | cp >> 18), out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3f));
        out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3f)), out[3] = (uint8_t)(0x80 | (cp & 0x3f));
        k = 4;
    }
    return str_add(dst, cap, n, out, k);
}

/* A JSON string into dst (cap bytes with the NUL; NULL: checked, dropped).
 * A string longer than cap is read to its end, then FED_ERR_TOO_LARGE. */
static fed_err parse_string(jp *j, char *dst, size_t cap)
{
    size_t n = 0;
    int over = 0;
    fed_err e;

    if ((e = expect(j, '"')) != FED_OK)
        return e;
    if (dst)
        dst[0] = '\0';
    for (;;) {
        uint8_t c;

        if (j->p >= j->end)
            return FED_ERR_FORMAT;
        c = *j->p++;
        if (c == '"')
            return over ? FED_ERR_TOO_LARGE : FED_OK;
        if (c < 0x20)
            return FED_ERR_FORMAT;
        if (c == '\\') {
            static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
            const char *k;

            if (j->p >= j->end)
                return FED_ERR_FORMAT;
            c = *j->p++;
            if (c == 'u') {
                e = parse_u_escape(j, dst, cap, &n);
            } else if (c && (k = strchr(from, c)) != NULL) {
                e = str_add(dst, cap, &n, &to[k - from], 1);
            } else {
                return FED_ERR_FORMAT;
            }
        } else if (c < 0x80) {
            e = str_add(dst, cap, &n, &c, 1);
        } else {
            size_t k = utf8_seq(j->p - 1, j->end);

            if (!k)
                return FED_ERR_FORMAT;
            e = str_add(dst, cap, &n, j->p - 1, k);
            j->p += k - 1;
        }
        if (e == FED_ERR_TOO_LARGE) { /* keep checking, stop storing */
            over = 1;
            dst[0] = '\0';
            dst = NULL;
            e = FED_OK;
        }
        if (e != FED_OK)
            return e;
    }
}

/* A non-negative integer, JSON syntax (no leading zeros), <= 2^53 - 1. */
static fed_err parse_uint(jp *j, uint64_t *v)
{
    const uint8_t *s;

    ws(j);
    s = j->p;
    *v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        *v = *v * 10 + (uint64_t)(*j->p - '0');
        if (*v > JSON_INT_MAX)
            return FED_ERR_FORMAT;
        j->p++;
    }
    if (j->p == s || (*s == '0' && j->p - s > 1))
        return FED_ERR_FORMAT;
    /* fractions and exponents are not integers */
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E'))
        return FED_ERR_FORMAT;
    return FED_OK;
}

/* [a, b, ...] of at most max integers. */
static fed_err parse_uint_array(jp *j, uint64_t *v, int max, int *n)
{
    fed_err e;

    *n = 0;
    if ((e = expect(j, '[')) != FED_OK)
        return e;
    if (peek(j) == ']') {
        j->p++;
        return FED_OK;
    }
    for (;;) {
        if (*n >= max)
            return FED_ERR_FORMAT;
        if ((e = parse_uint(j, &v[(*n)++])) != FED_OK)
            return e;
        if (peek(j) == ',') {
            j->p++;
            continue;
        }
        return expect(j, ']');
    }
}

static fed_err check_dtype(const char *d)
{
    size_t n = strlen(d);

    if (!strcmp(d, "F32") || !strcmp(d, "I64"))
        return FED_OK;
    if (n == 0 || n > 8 || strspn(d, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != n)
        return FED_ERR_FORMAT;
    return FED_ERR_UNSUPPORTED; /* F16, BF16, F64, I32, ... */
}

/* {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}, each key once. */
static fed_err parse_tensor(jp *j, fed_store_st_tensor *t)
{
    char key[16], dtype[16];
    int seen = 0, n;
    uint64_t off[2];
    fed_err e;

    if ((e = expect(j, '{')) != FED_OK)
        return e;
    for (;;) {
        if ((e = parse_string(j, key, sizeof key)) != FED_OK)
            return e == FED_ERR_TOO_LARGE ? FED_ERR_FORMAT : e;
        if ((e = expect(j, ':')) != FED_OK)
            return e;
        if (!strcmp(key, "dtype") && !(seen & 1)) {
            seen |= 1;
            if ((e = parse_string(j, dtype, sizeof dtype)) != FED_OK)
                return e == FED_ERR_TOO_LARGE ? FED_ERR_FORMAT : e;
        } else if (!strcmp(key, "shape") && !(seen & 2)) {
            seen |= 2;
            if ((e = parse_uint_array(j, t->shape, FED_ST_MAX_DIMS, &t->ndim)) != FED_OK)
                return e;
        } else if (!strcmp(key, "data_offsets") && !(seen & 4)) {
            seen |= 4;
            if ((e = parse_uint_array(j, off, 2, &n)) != FED_OK)
                return e;
            if (n != 2)
                return FED_ERR_FORMAT; /* end < begin: check_layout, which names it */
            t->begin = off[0];
            t->end = off[1];
        } else {
            return FED_ERR_FORMAT; /* unknown or repeated key */
        }
        if (peek(j) == ',') {
            j->p++;
            continue;
        }
        if ((e = expect(j, '}')) != FED_OK)
            return e;
        break;
    }
    if (seen != 7)
        return FED_ERR_FORMAT;
    t->i64 = !strcmp(dtype, "I64");
    return check_dtype(dtype);
}

/* "c,h,w" or "k": positive integers below 65536, exactly count of them. */
static fed_err parse_dims(const char *s, int *out, int count)
{
    for (int i = 0; i < count; i++) {
        long v = 0;
        int digits = 0;

        for (; *s >= '0' && *s <= '9' && digits < 6; s++, digits++)
            v = v * 10 + (*s - '0');
        if (!digits || v < 1 || v > 65535)
            return FED_ERR_FORMAT;
        out[i] = (int)v;
        if (i + 1 < count && *s++ != ',')
            return FED_ERR_FORMAT;
    }
    return *s ? FED_ERR_FORMAT : FED_OK;
}

#define ST_LIST_MAX 65536 /* a shared-statistics list's text */

/* "v1,v2,...": finite numbers (pos: each > 0) into *out (owned), *n. */
static fed_err parse_list(const char *s, int pos, double **out, size_t *n)
{
    size_t cap = 1;
    double *v;

    for (const char *p = s; *p; p++)
        cap += *p == ',';
    if (!(v = fed_malloc(cap * sizeof *v)))
        return FED_ERR_NOMEM;
    *n = 0;
    for (const char *p = s;;) {
        char *end;
        double x = strtod(p, &end);

        if (end == p || !isfinite(x) || (pos && !(x > 0)) || (*end != ',' && *end)) {
            fed_free(v);
            return FED_ERR_FORMAT;
        }
        v[(*n)++] = x;
        if (!*end)
            break;
        p = end + 1;
    }
    *out = v;
    return FED_OK;
}

/* "fednode.input_scale" as the export writes it (%.17g of the scale's
 * multiplier): unit's, else the default, centred (a foreign value too: the
 * importer leaves how the input is fed to its user). */
static int scale_of_text(const char *text)
{
    float mul, add;

    fed_model_input_map(FED_MODEL_INPUT_UNIT, &mul, &add);
    return (float)strtod(text, NULL) == mul ? FED_MODEL_INPUT_UNIT : FED_MODEL_INPUT_CENTRED;
}

/* {"key": "value", ...}: our keys read, others checked and dropped. */
static fed_err parse_metadata(jp *j, fed_store_st_file *f)
{
    char key[FED_ST_NAME_MAX], val[FED_MODEL_SPEC_MAX];
    int seen = 0, dims[3];
    fed_err e;

    if ((e = expect(j, '{')) != FED_OK)
        return e;
    if (peek(j) == '}') {
        j->p++;
        return FED_OK;
    }
    for (;;) {
        int which;

        e = parse_string(j, key, sizeof key);
        if (e == FED_ERR_TOO_LARGE) { /* a long foreign key: fine, not ours */
            key[0] = '\0';
            e = FED_OK;
        }
        if (e != FED_OK || (e = expect(j, ':')) != FED_OK)
            return e;
        which = !strcmp(key, "fednode.spec")         ? 1
                : !strcmp(key, "fednode.input")      ? 2
                : !strcmp(key, "fednode.classes")    ? 4
                : !strcmp(key, "fednode.input_mean") ? 8
                : !strcmp(key, "fednode.input_std")  ? 16
                : !strcmp(key, "fednode.input_scale") ? 32
                                                     : 0;
        if (which & seen)
            return FED_ERR_FORMAT;
        seen |= which;
        if (which & (8 | 16)) { /* the shared statistics: a long list */
            char *list = fed_malloc(ST_LIST_MAX);
            size_t n = 0;

            if (!list)
                return FED_ERR_NOMEM;
            e = parse_string(j, list, ST_LIST_MAX);
            if (e == FED_OK)
                e = parse_list(list, which == 16, which == 8 ? &f->stats_mean : &f->stats_std,
                               &n);
            fed_free(list);
            if (e != FED_OK)
                return e == FED_ERR_TOO_LARGE ? FED_ERR_FORMAT : e;
            if (f->stats_cols && n != f->stats_cols)
                return FED_ERR_FORMAT; /* a mean and a std a feature */
            f->stats_cols = n;
        } else if ((e = parse_string(j, which ? val : NULL, sizeof val)) != FED_OK)
            return e == FED_ERR_TOO_LARGE ? (which == 1 ? FED_ERR_SPEC : FED_ERR_FORMAT) : e;
        if (which == 1) {
            if (!val[0])
                return FED_ERR_SPEC;
            memcpy(f->spec, val, sizeof f->spec);
        } else if (which == 2) {
            if ((e = parse_dims(val, dims, 3)) != FED_OK)
                return e;
            f->input.c = dims[0];
            f->input.h = dims[1];
            f->input.w = dims[2];
        } else if (which == 4) {
            if ((e = parse_dims(val, &f->input.classes, 1)) != FED_OK)
                return e;
        } else if (which == 32) {
            f->input.scale = scale_of_text(val);
        }
        if (peek(j) == ',') {
            j->p++;
            continue;
        }
        if ((e = expect(j, '}')) != FED_OK)
            return e;
        break;
    }
    /* shape and classes go together; so do means and stds */
    if (((seen & 2) != 0) != ((seen & 4) != 0) || ((seen & 8) != 0) != ((seen & 16) != 0))
        return FED_ERR_FORMAT;
    return FED_OK;
}

static fed_err add_tensor(fed_store_st_file *f, size_t *cap, fed_store_st_tensor **t)
{
    if (f->ntensors == *cap) {
        size_t ncap = *cap ? *cap * 2 : 16;
        fed_store_st_tensor *p;

        if (f->ntensors >= FED_ST_MAX_TENSORS)
            return FED_ERR_TOO_LARGE;
        if (ncap > FED_ST_MAX_TENSORS)
            ncap = FED_ST_MAX_TENSORS;
        p = fed_realloc(f->tensors, ncap * sizeof *p);
        if (!p)
            return FED_ERR_NOMEM;
        f->tensors = p;
        *cap = ncap;
    }
    *t = &f->tensors[f->ntensors++];
    memset(*t, 0, sizeof **t);
    return FED_OK;
}

static fed_err parse_json(jp *j, fed_store_st_file *f)
{
    size_t cap = 0;
    int have_meta = 0;
    fed_err e;

    if ((e = expect(j, '{')) != FED_OK)
        return e;
    if (peek(j) == '}') {
        j->p++;
        goto tail;
    }
    for (;;) {
        char name[FED_ST_NAME_MAX];

        if ((e = parse_string(j, name, sizeof name)) != FED_OK ||
            (e = expect(j, ':')) != FED_OK)
            return e;
        if (!strcmp(name, "__metadata__")) {
            if (have_meta++)
                return FED_ERR_FORMAT;
            if ((e = parse_metadata(j, f)) != FED_OK)
                return e;
        } else {
            fed_store_st_tensor *t;

            if (!name[0])
                return FED_ERR_FORMAT;
            if ((e = add_tensor(f, &cap, &t)) != FED_OK)
                return e;
            memcpy(t->name, name, sizeof t->name);
            if ((e = parse_tensor(j, t)) != FED_OK)
                return e;
        }
        if (peek(j) == ',') {
            j->p++;
            continue;
        }
        if ((e = expect(j, '}')) != FED_OK)
            return e;
        break;
    }
tail:
    ws(j); /* the padding */
    return j->p == j->end ? FED_OK : FED_ERR_FORMAT;
}

/* ------------------------------------------------------------- layout -- */

typedef struct span {
    uint64_t begin, end;
    const fed_store_st_tensor *t;
} span;

static int cmp_span(const void *a, const void *b)
{
    const span *x = a, *y = b;

    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_name(const void *a, const void *b)
{
    const fed_store_st_tensor *const *x = a, *const *y = b;

    return strcmp((*x)->name, (*y)->name);
}

/* "[2, 3]" into out (cap bytes), cut short with "..." if need be. */
static void fmt_shape(char *out, size_t cap, const fed_store_st_tensor *t)
{
    size_t n = (size_t)snprintf(out, cap, "[");

    for (int k = 0; k < t->ndim && n < cap; k++)
        n += (size_t)snprintf(out + n, cap - n, "%s%llu", k ? ", " : "",
                              (unsigned long long)t->shape[k]);
    if (n < cap)
        snprintf(out + n, cap - n, "]");
}

static fed_err layout_fail(const char *label, fed_err e, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Logs "label: what" and returns e. */
static fed_err layout_fail(const char *label, fed_err e, const char *fmt, ...)
{
    char what[512];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    fed_log(FED_LOG_ERROR, "%s: %s", label, what);
    return e;
}

#define OFFS(t) (unsigned long long)(t)->begin, (unsigned long long)(t)->end

/* Sizes match shapes; names unique; the tensors tile [0, data_len). Each
 * refusal is logged with the tensor's name and offsets. */
static fed_err check_layout(const fed_store_st_file *f, const char *label)
{
    const fed_store_st_tensor **byname = NULL;
    span *s = NULL;
    uint64_t pos = 0;
    char shape[128];
    fed_err e = FED_OK;

    if (!f->ntensors)
        return f->data_len ? layout_fail(label, FED_ERR_FORMAT,
                                         "no tensors, yet a data section of %zu bytes",
                                         f->data_len)
                           : FED_OK;
    s = fed_malloc(f->ntensors * sizeof *s);
    byname = fed_malloc(f->ntensors * sizeof *byname);
    if (!s || !byname) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < f->ntensors; i++) {
        const fed_store_st_tensor *t = &f->tensors[i];
        uint64_t numel = 1;

        if (t->end < t->begin) {
            e = layout_fail(label, FED_ERR_FORMAT,
                            "tensor '%s': data_offsets [%llu, %llu] end before they begin",
                            t->name, OFFS(t));
            goto out;
        }
        fmt_shape(shape, sizeof shape, t);
        for (int k = 0; k < t->ndim; k++) {
            if (t->shape[k] && numel > JSON_INT_MAX / t->shape[k]) {
                e = layout_fail(label, FED_ERR_FORMAT,
                                "tensor '%s': shape %s has over 2^53 elements", t->name, shape);
                goto out;
            }
            numel *= t->shape[k];
        }
        if (numel > JSON_INT_MAX / 8 || t->end - t->begin != numel * (t->i64 ? 8 : 4)) {
            e = layout_fail(label, FED_ERR_FORMAT,
                            "tensor '%s': data_offsets [%llu, %llu] hold %llu bytes, %s shape "
                            "%s needs %llu",
                            t->name, OFFS(t), (unsigned long long)(t->end - t->begin),
                            t->i64 ? "I64" : "F32", shape,
                            (unsigned long long)numel * (t->i64 ? 8 : 4));
            goto out;
        }
        s[i] = (span){t->begin, t->end, t};
        byname[i] = t;
    }
    qsort(byname, f->ntensors, sizeof *byname, cmp_name);
    for (size_t i = 1; i < f->ntensors; i++)
        if (!strcmp(byname[i - 1]->name, byname[i]->name)) {
            e = layout_fail(label, FED_ERR_FORMAT, "tensor '%s' given twice", byname[i]->name);
            goto out;
        }
    qsort(s, f->ntensors, sizeof *s, cmp_span);
    for (size_t i = 0; i < f->ntensors; i++) {
        if (s[i].begin < pos) {
            e = layout_fail(label, FED_ERR_FORMAT,
                            "tensor '%s': data_offsets [%llu, %llu] overlap tensor '%s' "
                            "[%llu, %llu]",
                            s[i].t->name, OFFS(s[i].t), s[i - 1].t->name, OFFS(s[i - 1].t));
            goto out;
        }
        if (s[i].begin > pos) {
            e = layout_fail(label, FED_ERR_FORMAT,
                            "tensor '%s': data_offsets [%llu, %llu] leave bytes [%llu, %llu) "
                            "to no tensor",
                            s[i].t->name, OFFS(s[i].t), (unsigned long long)pos,
                            (unsigned long long)s[i].begin);
            goto out;
        }
        pos = s[i].end;
    }
    if (pos > f->data_len)
        e = layout_fail(label, FED_ERR_TRUNCATED,
                        "tensor '%s': data_offsets [%llu, %llu] past the data section "
                        "(%zu bytes)",
                        s[f->ntensors - 1].t->name, OFFS(s[f->ntensors - 1].t), f->data_len);
    else if (pos < f->data_len)
        e = layout_fail(label, FED_ERR_FORMAT,
                        "data section of %zu bytes, the tensors end at %llu (last '%s')",
                        f->data_len, (unsigned long long)pos, s[f->ntensors - 1].t->name);
out:
    fed_free(s);
    fed_free(byname);
    return e;
}

/* label names the bytes in the log ("x.safetensors"). */
static fed_err st_parse(const uint8_t *buf, size_t len, const char *label,
                        fed_store_st_file *out)
{
    uint64_t n = 0;
    jp j;
    fed_err e;

    memset(out, 0, sizeof *out);
    if (!buf && len)
        return FED_ERR_INVAL;
    if (len < 8)
        return FED_ERR_TRUNCATED;
    n = fed_get_u64le(buf);
    if (n > FED_ST_HEADER_MAX)
        return FED_ERR_TOO_LARGE;
    if (n > len - 8)
        return FED_ERR_TRUNCATED;
    if (n < 2)
        return FED_ERR_FORMAT;
    j.p = buf + 8;
    j.end = buf + 8 + n;
    if (*j.p != '{') /* the format's own rule: no leading space */
        return FED_ERR_FORMAT;
    out->data = buf + 8 + n;
    out->data_len = len - 8 - (size_t)n;
    e = parse_json(&j, out);
    if (e == FED_OK)
        e = check_layout(out, label);
    if (e != FED_OK)
        fed_store_safetensors_fini(out);
    return e;
}

fed_err fed_store_safetensors_parse(const uint8_t *buf, size_t len, fed_store_st_file *out)
{
    return st_parse(buf, len, "safetensors", out);
}

fed_err fed_store_safetensors_read(const char *path, fed_store_st_file *out)
{
    struct stat sb;
    uint8_t *buf = NULL;
    size_t got = 0;
    int fd;
    fed_err e = FED_OK;

    memset(out, 0, sizeof *out);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fed_log(FED_LOG_ERROR, "safetensors: cannot open %s: %s", path, strerror(errno));
        return errno_err(errno);
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        e = FED_ERR_IO;
        goto out;
    }
    if (!(buf = fed_malloc(sb.st_size ? (size_t)sb.st_size : 1))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    while (got < (size_t)sb.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)sb.st_size - got);

        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            e = r < 0 ? errno_err(errno) : FED_ERR_TRUNCATED;
            goto out;
        }
        got += (size_t)r;
    }
    if ((e = st_parse(buf, got, path, out)) == FED_OK) {
        out->owned = buf;
        buf = NULL;
    }
out:
    close(fd);
    fed_free(buf);
    return e;
}

void fed_store_safetensors_fini(fed_store_st_file *f)
{
    if (!f)
        return;
    fed_free(f->tensors);
    fed_free(f->owned);
    fed_free(f->stats_mean);
    fed_free(f->stats_std);
    memset(f, 0, sizeof *f);
}

/* ----------------------------------------------------------- matching -- */

static const fed_store_st_tensor *find_tensor(const fed_store_st_file *f, const char *name)
{
    for (size_t i = 0; i < f->ntensors; i++)
        if (!strcmp(f->tensors[i].name, name))
            return &f->tensors[i];
    return NULL;
}

fed_err fed_store_safetensors_to_params(const fed_store_st_file *f, const fed_tensor_info *t,
                                        int nt, const char *spec, float *params)
{
    int finite = 1;

    if (nt < 0 || (nt && (!t || !params)))
        return FED_ERR_INVAL;
    if (spec && f->spec[0] && strcmp(spec, f->spec) != 0) {
        fed_log(FED_LOG_ERROR, "safetensors: file is for model '%s', not '%s'", f->spec, spec);
        return FED_ERR_SPEC;
    }
    if (f->ntensors != (size_t)nt) {
        fed_log(FED_LOG_ERROR, "safetensors: %zu tensors, the model has %d", f->ntensors, nt);
        return FED_ERR_SHAPE;
    }
    for (int i = 0; i < nt; i++) {
        const fed_store_st_tensor *s = find_tensor(f, t[i].name);

        int i64 = (t[i].flags & FED_TENSOR_INT64) != 0;

        if (s && s->i64 != i64) {
            fed_log(FED_LOG_ERROR, "safetensors: tensor %s is %s, the model's is %s", t[i].name,
                    s->i64 ? "I64" : "F32", i64 ? "I64" : "F32");
            return FED_ERR_SHAPE;
        }
        if (!s || s->ndim != t[i].ndim ||
            s->end - s->begin != (uint64_t)t[i].numel * elem_bytes(t[i].flags)) {
            fed_log(FED_LOG_ERROR, "safetensors: tensor %s missing or of another shape",
                    t[i].name);
            return FED_ERR_SHAPE;
        }
        for (int k = 0; k < s->ndim; k++)
            if (s->shape[k] != (uint64_t)t[i].shape[k])
                return FED_ERR_SHAPE;
        if (i64) /* a count: exact as a float up to 2^24 */
            for (size_t k = 0; k < t[i].numel; k++)
                params[t[i].offset + k] = (float)(int64_t)fed_get_u64le(f->data + s->begin + 8 * k);
        else
            finite &= le_to_f32(params + t[i].offset, f->data + s->begin, t[i].numel);
    }
    return finite ? FED_OK : FED_ERR_NAN;
}
