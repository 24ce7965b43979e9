/* io.c - the model file of io.h: encode, strict parse, atomic save, load.
 * Owns the file's byte layout and nothing else; endianness is explicit, so
 * the file reads the same on every host. Never trusts a length from the
 * file before the file's own size has proven it. */
#include "model/io.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"

/* zlib's crc32 takes a uInt length: feed it in pieces. */
static uint32_t crc_of(const uint8_t *buf, size_t len)
{
    uLong crc = crc32(0L, Z_NULL, 0);

    while (len) {
        uInt piece = len > (1u << 30) ? (1u << 30) : (uInt)len;

        crc = crc32(crc, buf, piece);
        buf += piece;
        len -= piece;
    }
    return (uint32_t)crc;
}

/* A model's header: version 1's, or version 2's with the input scale
 * when that is not the default (io.h). */
static size_t header_of(fed_model_shape in)
{
    return in.scale == FED_MODEL_INPUT_CENTRED ? FED_MODEL_FILE_HEADER : FED_MODEL_FILE_HEADER_V2;
}

size_t fed_model_file_size(const fed_model *m)
{
    return header_of(fed_model_input(m)) + strlen(fed_model_graph(m)) +
           4 * fed_model_nparams(m) + 4;
}

fed_err fed_model_file_encode(const fed_model *m, uint8_t *buf, size_t cap, size_t *len)
{
    const char *spec = fed_model_graph(m); /* whole: a long graph too */
    size_t L = strlen(spec), n = fed_model_nparams(m), size = fed_model_file_size(m);
    fed_model_shape in = fed_model_input(m);
    size_t head = header_of(in);
    uint8_t *p;
    fed_err err;

    if (cap < size)
        return FED_ERR_RANGE;
    memcpy(buf, FED_MODEL_FILE_MAGIC, 8);
    fed_put_u32le(buf + 8, head == FED_MODEL_FILE_HEADER ? 1u : FED_MODEL_FILE_VERSION);
    fed_put_u32le(buf + 12, (uint32_t)L);
    fed_put_u32le(buf + 16, (uint32_t)in.c);
    fed_put_u32le(buf + 20, (uint32_t)in.h);
    fed_put_u32le(buf + 24, (uint32_t)in.w);
    fed_put_u32le(buf + 28, (uint32_t)in.classes);
    fed_put_u64le(buf + 32, n);
    if (head > FED_MODEL_FILE_HEADER)
        fed_put_u32le(buf + FED_MODEL_FILE_HEADER, (uint32_t)in.scale);
    memcpy(buf + head, spec, L);
    p = buf + head + L;
    /* Download straight into the file image, then fix the byte order. */
    err = fed_model_get_params(m, (float *)(void *)p);
    if (err != FED_OK)
        return err;
    fed_put_f32le_n(p, (const float *)(const void *)p, n);
    fed_put_u32le(p + 4 * n, crc_of(buf, size - 4));
    *len = size;
    return FED_OK;
}

fed_err fed_model_file_parse(const uint8_t *buf, size_t len, fed_model_file *out)
{
    uint32_t version, L;
    uint64_t n;
    size_t need, head;
    fed_model_shape shape;
    fed_err err;

    memset(out, 0, sizeof *out);
    memset(&shape, 0, sizeof shape); /* the file says no scale: centred */
    if (len < 8)
        return FED_ERR_TRUNCATED;
    if (memcmp(buf, FED_MODEL_FILE_MAGIC, 8) != 0)
        return FED_ERR_MAGIC;
    if (len < FED_MODEL_FILE_HEADER)
        return FED_ERR_TRUNCATED;
    version = fed_get_u32le(buf + 8);
    if (version != 1 && version != FED_MODEL_FILE_VERSION)
        return FED_ERR_VERSION;
    head = version == 1 ? FED_MODEL_FILE_HEADER : FED_MODEL_FILE_HEADER_V2;
    if (len < head)
        return FED_ERR_TRUNCATED;
    if (head > FED_MODEL_FILE_HEADER) { /* the input scale: a name of its own */
        uint32_t scale = fed_get_u32le(buf + FED_MODEL_FILE_HEADER);

        if (scale != FED_MODEL_INPUT_CENTRED && scale != FED_MODEL_INPUT_UNIT)
            return FED_ERR_FORMAT;
        shape.scale = (int)scale;
    }
    L = fed_get_u32le(buf + 12);
    if (L < 1 || L >= FED_MODEL_GRAPH_MAX)
        return FED_ERR_TOO_LARGE;
    n = fed_get_u64le(buf + 32);
    /* the file's own length bounds N before anything is allocated */
    if (n > (len - head) / 4)
        return FED_ERR_TRUNCATED;
    need = head + L + 4 * (size_t)n + 4;
    if (len < need)
        return FED_ERR_TRUNCATED;
    if (len > need)
        return FED_ERR_FORMAT;
    if (fed_get_u32le(buf + need - 4) != crc_of(buf, need - 4))
        return FED_ERR_CORRUPT;
    if (!(out->whole = fed_malloc((size_t)L + 1)))
        return FED_ERR_NOMEM;
    memcpy(out->whole, buf + head, L);
    out->whole[L] = '\0';
    if (strlen(out->whole) != L || (L >= FED_MODEL_SPEC_MAX && memcmp(out->whole, "g:", 2) != 0)) {
        fed_model_file_fini(out);
        return FED_ERR_SPEC; /* a NUL inside, or a long one that is no graph */
    }
    fed_model_spec_id(out->whole, out->spec);
    shape.c = (int)(fed_get_u32le(buf + 16) & 0x7fffffff);
    shape.h = (int)(fed_get_u32le(buf + 20) & 0x7fffffff);
    shape.w = (int)(fed_get_u32le(buf + 24) & 0x7fffffff);
    shape.classes = (int)(fed_get_u32le(buf + 28) & 0x7fffffff);
    if (fed_get_u32le(buf + 16) > 0x7fffffff || fed_get_u32le(buf + 20) > 0x7fffffff ||
        fed_get_u32le(buf + 24) > 0x7fffffff || fed_get_u32le(buf + 28) > 0x7fffffff) {
        fed_model_file_fini(out);
        return FED_ERR_SHAPE;
    }
    out->shape = shape;
    err = fed_model_spec_check(out->whole, shape);
    if (err == FED_OK)
        err = fed_model_spec_nparams(out->whole, shape, &need);
    if (err == FED_OK && need != n)
        err = FED_ERR_SHAPE;
    if (err == FED_OK && !(out->params = fed_malloc(n ? 4 * (size_t)n : 1)))
        err = FED_ERR_NOMEM;
    if (err != FED_OK) {
        fed_model_file_fini(out);
        return err;
    }
    out->nparams = (size_t)n;
    for (size_t i = 0; i < n; i++) {
        float v = fed_get_f32le(buf + head + L + 4 * i);

        if (!isfinite(v)) {
            fed_model_file_fini(out);
            return FED_ERR_NAN;
        }
        out->params[i] = v;
    }
    return FED_OK;
}

void fed_model_file_fini(fed_model_file *f)
{
    if (!f)
        return;
    fed_free(f->params);
    fed_free(f->whole);
    f->params = NULL;
    f->whole = NULL;
    f->nparams = 0;
}

static fed_err write_all(FILE *f, const void *buf, size_t len)
{
    if (fwrite(buf, 1, len, f) != len)
        return errno == ENOSPC ? FED_ERR_FULL : FED_ERR_IO;
    return FED_OK;
}

fed_err fed_model_write_file(const char *path, const void *buf, size_t len)
{
    size_t plen = strlen(path);
    char *tmp = fed_malloc(plen + 8);
    FILE *f = NULL;
    fed_err err;

    if (!tmp)
        return FED_ERR_NOMEM;
    snprintf(tmp, plen + 8, "%s.tmp", path);
    f = fopen(tmp, "wb");
    if (!f) {
        fed_log(FED_LOG_ERROR, "model: cannot create %s: %s", tmp, strerror(errno));
        err = errno == EACCES ? FED_ERR_PERM : FED_ERR_IO;
        goto out;
    }
    err = write_all(f, buf, len);
    if (err == FED_OK && (fflush(f) != 0 || fsync(fileno(f)) != 0))
        err = FED_ERR_IO;
    if (fclose(f) != 0 && err == FED_OK)
        err = FED_ERR_IO;
    if (err == FED_OK && rename(tmp, path) != 0)
        err = FED_ERR_IO;
    if (err != FED_OK) {
        fed_log(FED_LOG_ERROR, "model: writing %s failed: %s", path, fed_strerror(err));
        unlink(tmp);
    }
out:
    fed_free(tmp);
    return err;
}

fed_err fed_model_save(const fed_model *m, const char *path)
{
    size_t size = fed_model_file_size(m), len = 0;
    uint8_t *buf = fed_malloc(size);
    fed_err err = FED_ERR_NOMEM;

    if (buf && (err = fed_model_file_encode(m, buf, size, &len)) == FED_OK)
        err = fed_model_write_file(path, buf, len);
    fed_free(buf);
    return err;
}

fed_err fed_model_file_read(const char *path, fed_model_file *out)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    uint8_t *buf = NULL;
    fed_err err;

    memset(out, 0, sizeof *out);
    if (!f) {
        fed_log(FED_LOG_ERROR, "model: cannot open %s: %s", path, strerror(errno));
        return errno == ENOENT ? FED_ERR_NOTFOUND : FED_ERR_IO;
    }
    err = FED_ERR_IO;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        goto out;
    err = FED_ERR_TOO_LARGE;
    if ((uint64_t)st.st_size > ((uint64_t)1 << 40))
        goto out;
    err = FED_ERR_NOMEM;
    buf = fed_malloc((size_t)st.st_size ? (size_t)st.st_size : 1);
    if (!buf)
        goto out;
    err = FED_ERR_IO;
    if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
        goto out;
    err = fed_model_file_parse(buf, (size_t)st.st_size, out);
out:
    if (err != FED_OK)
        fed_log(FED_LOG_ERROR, "model: %s: %s", path, fed_strerror(err));
    fed_free(buf);
    fclose(f);
    return err;
}

fed_err fed_model_load(const char *path, fed_backend *be, fed_pool *pool, int shards,
                       int max_batch, fed_model **out)
{
    fed_model_file file;
    fed_model *m = NULL;
    fed_err err;

    *out = NULL;
    err = fed_model_file_read(path, &file);
    if (err != FED_OK)
        return err;
    err = fed_model_new(file.whole, file.shape, be, pool, shards, max_batch, &m);
    if (err == FED_OK)
        err = fed_model_set_params(m, file.params);
    if (err == FED_OK) {
        *out = m;
        m = NULL;
    }
    fed_model_free(m);
    fed_model_file_fini(&file);
    return err;
}
