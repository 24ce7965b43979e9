/* data.c - the IDX reader (plain or gzip, told apart by magic bytes),
 * fed_data_open's resolution of --data, batch gathering and dataset freeing.
 * Owns each fed_dataset it returns. Must never trust a size in a header
 * before checking it against the limits and the bytes actually present, and
 * never inflates more than the header-implied size plus one byte. */
#include "model/data.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/colstats.h"
#include "model/data_impl.h"

/* Writes an IDX file atomically (a temporary name, then rename): u8 data
 * of ndim dims. Best effort: 0 on any failure, nothing left behind. */
static int data_write_idx(const char *path, int ndim, const uint32_t *dims, const uint8_t *data,
                          size_t bytes);

/* deflate never expands more than 1032:1; a gzip input shorter than this
 * bound cannot hold what its header claims, so we refuse before allocating. */
#define GZ_MAX_RATIO 1040u
#define GZ_SLACK 4096u
#define log_fail fedi_data_log_fail

static fed_err vfail(char *why, size_t cap, fed_err e, const char *name, const char *fmt,
                     va_list ap) __attribute__((format(printf, 5, 0)));

static fed_err vfail(char *why, size_t cap, fed_err e, const char *name, const char *fmt,
                     va_list ap)
{
    char cause[512];

    if (why && cap) {
        vsnprintf(why, cap, fmt, ap);
        return e;
    }
    vsnprintf(cause, sizeof cause, fmt, ap);
    fed_log(FED_LOG_ERROR, "%s: %s (%s)", name, cause, fed_errname(e));
    return e;
}

fed_err fedi_data_log_fail(fed_err e, const char *name, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfail(NULL, 0, e, name, fmt, ap);
    va_end(ap);
    return e;
}

fed_err fedi_data_fail(char *why, size_t cap, fed_err e, const char *name, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vfail(why, cap, e, name, fmt, ap);
    va_end(ap);
    return e;
}

/* ---- whole-file reads ---- */

/* path opened read-only when it is a regular file of at most max bytes
 * (each failure logged naming path, or said into why as fedi_data_fail
 * does); *fd closed by the caller. */
static fed_err open_regular(const char *path, uint64_t max, int *fd, uint64_t *size, char *why,
                            size_t cap)
{
    struct stat st;
    char eb[128];
    int e;

    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0) {
        e = errno;
        return fedi_data_fail(why, cap,
                              e == ENOENT ? FED_ERR_NOTFOUND : e == EACCES ? FED_ERR_PERM
                                                                           : FED_ERR_IO,
                              path, "cannot open: %s", strerror_r(e, eb, sizeof eb));
    }
    if (fstat(*fd, &st) != 0)
        return fedi_data_fail(why, cap, FED_ERR_IO, path, "cannot stat: %s",
                              strerror_r(errno, eb, sizeof eb));
    if (!S_ISREG(st.st_mode))
        return fedi_data_fail(why, cap, FED_ERR_IO, path, "not a regular file");
    if ((uint64_t)st.st_size > max || (uint64_t)st.st_size > SIZE_MAX - 1)
        return fedi_data_fail(why, cap, FED_ERR_TOO_LARGE, path,
                              "file of %lld bytes is over the limit of %llu",
                              (long long)st.st_size, (unsigned long long)max);
    *size = (uint64_t)st.st_size;
    return FED_OK;
}

fed_err fed_data_read_file(const char *path, uint64_t max, uint8_t **buf, size_t *len)
{
    return fedi_data_read_file(path, max, buf, len, NULL, 0);
}

fed_err fedi_data_read_file(const char *path, uint64_t max, uint8_t **buf, size_t *len, char *why,
                            size_t cap)
{
    uint8_t *b = NULL;
    uint64_t size = 0;
    size_t got = 0;
    char eb[128];
    fed_err err;
    int fd = -1;

    *buf = NULL;
    *len = 0;
    if ((err = open_regular(path, max, &fd, &size, why, cap)) != FED_OK)
        goto out;
    b = fed_malloc((size_t)size + 1);
    if (!b) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    while (got < (size_t)size) {
        ssize_t r = read(fd, b + got, (size_t)size - got);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            err = fedi_data_fail(why, cap, FED_ERR_IO, path, "read failed: %s",
                                 strerror_r(errno, eb, sizeof eb));
            goto out;
        }
        if (r == 0)
            break; /* shrank while reading: parse what is there */
        got += (size_t)r;
    }
    b[got] = 0; /* a NUL after the data, for text parsers */
    *buf = b;
    *len = got;
    b = NULL;
out:
    fed_free(b);
    if (fd >= 0)
        close(fd);
    return err;
}

/* ---- a byte source: plain, or one or more gzip members ---- */

/* A file is read through a window of this many bytes, never whole: a
 * client's peak memory is then the dataset alone, not the dataset plus the
 * compressed file (26 MB for Fashion-MNIST's training images). */
#define IDX_WINDOW ((size_t)256 << 10)

typedef struct idx_src {
    const char *name;
    const uint8_t *buf;
    size_t len;
    size_t pos; /* plain: next byte; gzip: next byte not yet handed to zlib */
    int gz;
    int zinit;
    int ended; /* gzip: last member finished and no input left */
    z_stream zs;
    /* a file read through the window buf = win (fd >= 0), else a buffer */
    int fd;
    uint8_t *win;      /* (IDX_WINDOW) */
    uint64_t file_left; /* bytes of the file not read yet */
} idx_src;

static voidpf zalloc_hook(voidpf opaque, uInt items, uInt size)
{
    (void)opaque;
    return fed_calloc(items, size);
}

static void zfree_hook(voidpf opaque, voidpf p)
{
    (void)opaque;
    fed_free(p);
}

/* Plain or gzip, by the first two bytes of buf (a buffer, or the first
 * window of a file). */
static fed_err src_detect(idx_src *s)
{
    if (s->len >= 2 && s->buf[0] == 0x1f && s->buf[1] == 0x8b) {
        s->gz = 1;
        s->zs.zalloc = zalloc_hook;
        s->zs.zfree = zfree_hook;
        s->zs.opaque = Z_NULL;
        switch (inflateInit2(&s->zs, 15 + 16)) {
        case Z_OK: break;
        case Z_MEM_ERROR: return FED_ERR_NOMEM;
        default: return log_fail(FED_ERR_INTERNAL, s->name, "zlib inflateInit2 failed");
        }
        s->zinit = 1;
    }
    return FED_OK;
}

static fed_err src_init(idx_src *s, const char *name, const uint8_t *buf, size_t len)
{
    memset(s, 0, sizeof *s);
    s->name = name;
    s->buf = buf;
    s->len = len;
    s->fd = -1;
    return src_detect(s);
}

/* Up to cap bytes of the file into dst; *got < cap only at its end (a file
 * that shrank while being read ends there). */
static fed_err file_read(idx_src *s, uint8_t *dst, size_t cap, size_t *got)
{
    char eb[128];

    *got = 0;
    while (*got < cap && s->file_left > 0) {
        size_t want = cap - *got < s->file_left ? cap - *got : (size_t)s->file_left;
        ssize_t r = read(s->fd, dst + *got, want);

        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return log_fail(FED_ERR_IO, s->name, "read failed: %s",
                            strerror_r(errno, eb, sizeof eb));
        if (r == 0) {
            s->file_left = 0;
            break;
        }
        *got += (size_t)r;
        s->file_left -= (uint64_t)r;
    }
    return FED_OK;
}

/* Keep the keep bytes at the window's end (not yet used), move them to its
 * front and fill the rest from the file; buf/len/pos describe the window. */
static fed_err win_refill(idx_src *s, size_t keep)
{
    size_t got = 0;
    fed_err err;

    if (keep)
        memmove(s->win, s->win + s->len - keep, keep);
    err = file_read(s, s->win + keep, IDX_WINDOW - keep, &got);
    s->buf = s->win;
    s->len = keep + got;
    s->pos = 0;
    return err;
}

/* The file at path (a regular file of at most max bytes), read through a
 * window. */
static fed_err src_open(idx_src *s, const char *path, uint64_t max)
{
    fed_err err;

    memset(s, 0, sizeof *s);
    s->name = path;
    if ((err = open_regular(path, max, &s->fd, &s->file_left, NULL, 0)) != FED_OK)
        return err;
    if (!(s->win = fed_malloc(IDX_WINDOW)))
        return FED_ERR_NOMEM;
    if ((err = win_refill(s, 0)) != FED_OK)
        return err;
    return src_detect(s);
}

static void src_fini(idx_src *s)
{
    if (s->zinit)
        inflateEnd(&s->zs);
    s->zinit = 0;
    if (s->win)
        fed_free(s->win);
    s->win = NULL;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
}

/* Compressed bytes zlib has not consumed yet. */
static uint64_t gz_pending(const idx_src *s)
{
    return (s->len - s->pos) + s->zs.avail_in + s->file_left;
}

/* Hand zlib the window's unread bytes, refilling it from the file first
 * when zlib holds fewer than need bytes (it keeps those it holds). */
static fed_err gz_feed(idx_src *s, size_t need)
{
    fed_err err;

    if (s->zs.avail_in >= need)
        return FED_OK;
    if (s->fd >= 0 && s->pos == s->len && s->file_left > 0) {
        size_t keep = s->zs.avail_in; /* at the window's end */

        if ((err = win_refill(s, keep)) != FED_OK)
            return err;
        s->zs.next_in = (Bytef *)(uintptr_t)s->buf;
        s->zs.avail_in = (uInt)s->len;
        s->pos = s->len;
        return FED_OK;
    }
    if (s->zs.avail_in == 0 && s->pos < s->len) {
        size_t chunk = s->len - s->pos;

        if (chunk > (1u << 30))
            chunk = 1u << 30;
        s->zs.next_in = (Bytef *)(uintptr_t)(s->buf + s->pos);
        s->zs.avail_in = (uInt)chunk;
        s->pos += chunk;
    }
    return FED_OK;
}

static fed_err gz_read(idx_src *s, uint8_t *dst, size_t want, size_t *got)
{
    *got = 0;
    while (*got < want && !s->ended) {
        size_t room = want - *got;
        size_t before;
        fed_err err;
        int rc;

        if ((err = gz_feed(s, 1)) != FED_OK)
            return err;
        if (room > (1u << 30))
            room = 1u << 30;
        s->zs.next_out = dst + *got;
        s->zs.avail_out = (uInt)room;
        before = room;
        rc = inflate(&s->zs, Z_NO_FLUSH);
        *got += before - s->zs.avail_out;
        if (rc == Z_STREAM_END) {
            uint64_t left = gz_pending(s);

            if (left == 0) {
                s->ended = 1;
                break;
            }
            /* Another gzip member may follow (as `cat a.gz b.gz`); anything
             * else after the compressed data is garbage. */
            if ((err = gz_feed(s, 2)) != FED_OK)
                return err;
            if (s->zs.avail_in < 2 || s->zs.next_in[0] != 0x1f || s->zs.next_in[1] != 0x8b)
                return log_fail(FED_ERR_FORMAT, s->name,
                                "%llu bytes of trailing garbage after the gzip data",
                                (unsigned long long)left);
            if (inflateReset(&s->zs) != Z_OK)
                return log_fail(FED_ERR_INTERNAL, s->name, "zlib inflateReset failed");
            continue;
        }
        if (rc == Z_OK)
            continue;
        if (rc == Z_BUF_ERROR) {
            if (gz_pending(s) == 0)
                return log_fail(FED_ERR_TRUNCATED, s->name, "gzip stream ends early");
            if (s->zs.avail_in == 0)
                continue; /* refill from the next chunk */
            return log_fail(FED_ERR_INTERNAL, s->name, "zlib made no progress");
        }
        if (rc == Z_MEM_ERROR)
            return FED_ERR_NOMEM;
        return log_fail(FED_ERR_FORMAT, s->name, "corrupt gzip data: %s",
                        s->zs.msg ? s->zs.msg : "inflate error");
    }
    return FED_OK;
}

/* Up to want bytes; *got < want only at the end of the data. A plain
 * file's bytes past the window are read straight into dst. */
static fed_err src_read(idx_src *s, uint8_t *dst, size_t want, size_t *got)
{
    size_t n, more = 0;
    fed_err err = FED_OK;

    if (s->gz)
        return gz_read(s, dst, want, got);
    n = s->len - s->pos < want ? s->len - s->pos : want;
    if (n)
        memcpy(dst, s->buf + s->pos, n);
    s->pos += n;
    if (n < want && s->fd >= 0)
        err = file_read(s, dst + n, want - n, &more);
    *got = n + more;
    return err;
}

/* ---- IDX ---- */

/* IDX header: 0x00 0x00 dtype ndim, then ndim big-endian uint32 sizes.
 *   images: dtype 0x08 (uint8), ndim 3: count, rows, cols
 *   labels: dtype 0x08 (uint8), ndim 1: count */
static fed_err idx_header(idx_src *s, int ndim, uint32_t dims[3])
{
    uint8_t h[16];
    size_t got;
    fed_err err;

    err = src_read(s, h, 4, &got);
    if (err)
        return err;
    if (got < 4)
        return log_fail(FED_ERR_TRUNCATED, s->name, "IDX header cut at byte %zu of 4", got);
    if (h[0] != 0 || h[1] != 0)
        return log_fail(FED_ERR_MAGIC, s->name,
                        "bad IDX magic %02x %02x (want 00 00, or a gzip file)", h[0], h[1]);
    if (h[2] != 0x08)
        return log_fail(FED_ERR_FORMAT, s->name, "IDX data type 0x%02x, want 0x08 (uint8)", h[2]);
    if (h[3] != ndim)
        return log_fail(FED_ERR_FORMAT, s->name, "IDX has %u dimensions, want %d (%s)", h[3],
                        ndim, ndim == 3 ? "images" : "labels");
    err = src_read(s, h + 4, 4u * (size_t)ndim, &got);
    if (err)
        return err;
    if (got < 4u * (size_t)ndim)
        return log_fail(FED_ERR_TRUNCATED, s->name, "IDX header cut at byte %zu of %d", 4 + got,
                        4 + 4 * ndim);
    for (int i = 0; i < ndim; i++) {
        const uint8_t *p = h + 4 + 4 * i;

        dims[i] = (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
    }
    if (dims[0] == 0)
        return log_fail(FED_ERR_FORMAT, s->name, "IDX holds no samples");
    if (dims[0] > FED_DATA_MAX_SAMPLES)
        return log_fail(FED_ERR_TOO_LARGE, s->name, "%u samples, over the limit of %u", dims[0],
                        FED_DATA_MAX_SAMPLES);
    if (ndim == 3) {
        uint64_t f = (uint64_t)dims[1] * dims[2];

        if (dims[1] == 0 || dims[2] == 0)
            return log_fail(FED_ERR_FORMAT, s->name, "image size %ux%u is empty", dims[1],
                            dims[2]);
        if (f > FED_DATA_MAX_FEATURES)
            return log_fail(FED_ERR_TOO_LARGE, s->name,
                            "image size %ux%u is over the limit of %u values", dims[1], dims[2],
                            FED_DATA_MAX_FEATURES);
        if (f * dims[0] > FED_DATA_MAX_BYTES)
            return log_fail(FED_ERR_TOO_LARGE, s->name, "%u images of %ux%u are over %llu bytes",
                            dims[0], dims[1], dims[2], (unsigned long long)FED_DATA_MAX_BYTES);
    }
    return FED_OK;
}

/* Before allocating `bytes`: are there enough input bytes to hold them? */
static fed_err idx_check_room(const idx_src *s, uint64_t bytes)
{
    if (!s->gz) {
        uint64_t left = s->len - s->pos + s->file_left;

        if (left < bytes)
            return log_fail(FED_ERR_TRUNCATED, s->name, "IDX data has %llu of %llu bytes",
                            (unsigned long long)left, (unsigned long long)bytes);
        if (left > bytes)
            return log_fail(FED_ERR_FORMAT, s->name, "%llu bytes of trailing garbage",
                            (unsigned long long)(left - bytes));
        return FED_OK;
    }
    if (bytes > gz_pending(s) * GZ_MAX_RATIO + GZ_SLACK)
        return log_fail(FED_ERR_TRUNCATED, s->name,
                        "%llu gzip bytes cannot hold the %llu bytes the header claims",
                        (unsigned long long)gz_pending(s), (unsigned long long)bytes);
    return FED_OK;
}

/* Exactly `bytes` into dst, then make sure nothing follows (for gzip this
 * also drives zlib through the trailer, checking CRC and length). */
static fed_err idx_payload(idx_src *s, uint8_t *dst, size_t bytes)
{
    uint8_t extra;
    size_t got;
    fed_err err;

    err = src_read(s, dst, bytes, &got);
    if (err)
        return err;
    if (got < bytes)
        return log_fail(FED_ERR_TRUNCATED, s->name, "IDX data has %zu of %zu bytes", got, bytes);
    err = src_read(s, &extra, 1, &got);
    if (err)
        return err;
    if (got)
        return log_fail(FED_ERR_FORMAT, s->name, "trailing garbage after %zu data bytes", bytes);
    return FED_OK;
}

/* Images and labels from two sources (buffers or files), which the caller
 * finishes. borrow: si is a plain buffer that outlives the dataset, whose
 * images then point into it, uncopied (the caller hands the dataset the
 * buffer's ownership when this succeeds). */
static fed_err parse_idx_src(idx_src *si, idx_src *sl, int borrow, fed_dataset **out)
{
    const char *iname = si->name, *lname = sl->name;
    uint32_t idims[3] = { 0 }, ldims[3] = { 0 };
    uint8_t *lab = NULL;
    fed_dataset *d = NULL;
    size_t features, bytes;
    fed_err err;

    err = idx_header(si, 3, idims);
    if (err)
        goto out;
    err = idx_header(sl, 1, ldims);
    if (err)
        goto out;
    if (idims[0] != ldims[0]) {
        err = log_fail(FED_ERR_SHAPE, lname, "%u labels for %u images in %s", ldims[0], idims[0],
                       iname);
        goto out;
    }
    features = (size_t)idims[1] * idims[2];
    bytes = features * idims[0];
    err = idx_check_room(si, bytes);
    if (!err)
        err = idx_check_room(sl, ldims[0]);
    if (err)
        goto out;
    d = fed_calloc(1, sizeof *d);
    if (!d) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    d->n = idims[0];
    d->features = features;
    d->shape.c = 1;
    d->shape.h = (int)idims[1];
    d->shape.w = (int)idims[2];
    d->shape.classes = FED_DATA_IDX_CLASSES;
    d->x_u8 = borrow ? NULL : fed_malloc(bytes);
    d->y = fed_malloc(d->n * sizeof *d->y);
    lab = fed_malloc(d->n);
    if ((!borrow && !d->x_u8) || !d->y || !lab) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    if (borrow) { /* idx_check_room found exactly these bytes left */
        assert(!si->gz && si->fd < 0 && si->len - si->pos == bytes);
        d->x_u8 = (uint8_t *)(uintptr_t)(si->buf + si->pos);
    } else {
        err = idx_payload(si, d->x_u8, bytes);
    }
    if (!err)
        err = idx_payload(sl, lab, d->n);
    if (err)
        goto out;
    for (size_t i = 0; i < d->n; i++) {
        if (lab[i] >= FED_DATA_IDX_CLASSES) {
            err = log_fail(FED_ERR_RANGE, lname, "label %u of sample %zu is not below %d", lab[i],
                           i, FED_DATA_IDX_CLASSES);
            goto out;
        }
        d->y[i] = lab[i];
    }
    *out = d;
    d = NULL;
out:
    fed_free(lab);
    if (d && borrow)
        d->x_u8 = NULL; /* the caller's still */
    fed_data_free(d);
    return err;
}

fed_err fed_data_parse_idx(const uint8_t *images, size_t images_len, const uint8_t *labels,
                           size_t labels_len, fed_dataset **out)
{
    idx_src si, sl;
    fed_err err;

    *out = NULL;
    memset(&sl, 0, sizeof sl);
    sl.fd = -1;
    err = src_init(&si, "<images buffer>", images, images_len);
    if (!err)
        err = src_init(&sl, "<labels buffer>", labels, labels_len);
    if (!err)
        err = parse_idx_src(&si, &sl, 0, out);
    src_fini(&sl);
    src_fini(&si);
    return err;
}

/* Both files are read through a window each, never whole. */
fed_err fed_data_load_idx(const char *images_path, const char *labels_path, fed_dataset **out)
{
    idx_src si, sl;
    fed_err err;

    *out = NULL;
    memset(&sl, 0, sizeof sl);
    sl.fd = -1;
    err = src_open(&si, images_path, FED_DATA_MAX_BYTES + 16);
    if (!err)
        err = src_open(&sl, labels_path, FED_DATA_MAX_SAMPLES + 8);
    if (!err)
        err = parse_idx_src(&si, &sl, 0, out);
    src_fini(&sl);
    src_fini(&si);
    return err;
}

/* A plain images file mapped, not read: its pages come from the page cache
 * as the node's shard touches them, uncopied, one copy in memory for every
 * process on the machine that maps it. For the cache's inflated files,
 * which are only ever replaced by a rename (a mapped one stays whole). */
static fed_err map_idx(const char *images_path, const char *labels_path, fed_dataset **out)
{
    idx_src si, sl;
    uint64_t size = 0;
    void *map = MAP_FAILED;
    char eb[128];
    fed_err err;
    int fd = -1;

    *out = NULL;
    memset(&si, 0, sizeof si);
    memset(&sl, 0, sizeof sl);
    si.fd = sl.fd = -1;
    if ((err = open_regular(images_path, FED_DATA_MAX_BYTES + 16, &fd, &size, NULL, 0)) != FED_OK)
        goto out;
    if (size == 0) {
        err = log_fail(FED_ERR_TRUNCATED, images_path, "empty file");
        goto out;
    }
    map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        err = log_fail(FED_ERR_IO, images_path, "cannot map: %s", strerror_r(errno, eb, sizeof eb));
        goto out;
    }
    if ((err = src_init(&si, images_path, map, (size_t)size)) == FED_OK && si.gz)
        err = log_fail(FED_ERR_FORMAT, images_path, "gzip where an inflated file was expected");
    if (!err)
        err = src_open(&sl, labels_path, FED_DATA_MAX_SAMPLES + 8);
    if (!err)
        err = parse_idx_src(&si, &sl, 1, out);
    if (!err) {
        (*out)->map = map;
        (*out)->map_len = (size_t)size;
        map = MAP_FAILED;
    }
out:
    src_fini(&sl);
    src_fini(&si);
    if (map != MAP_FAILED)
        munmap(map, (size_t)size);
    if (fd >= 0)
        close(fd);
    return err;
}

void fed_data_free(fed_dataset *d)
{
    if (!d)
        return;
    fed_free(d->chan_map);
    if (d->view) { /* the samples are another dataset's */
        fed_free(d);
        return;
    }
    if (d->map)
        munmap(d->map, d->map_len); /* x_u8 points into it */
    else
        fed_free(d->x_u8);
    fed_free(d->x_f32);
    fed_free(d->y);
    fed_free(d->y_f32);
    fed_free(d->categorical);
    fed_free(d);
}

/* ---- --data resolution ---- */

static int is_file(const char *path)
{
    struct stat st;

    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir/PREFIX-KIND-ubyte, plain first, then .gz. */
static fed_err find_idx(const char *dir, const char *prefix, const char *kind, char *path,
                        size_t size)
{
    int n = snprintf(path, size, "%s/%s-%s-ubyte", dir, prefix, kind);

    if (n < 0 || (size_t)n + 4 > size)
        return log_fail(FED_ERR_INVAL, dir, "path too long");
    if (is_file(path))
        return FED_OK;
    strcat(path, ".gz");
    if (is_file(path))
        return FED_OK;
    path[n] = 0;
    return log_fail(FED_ERR_NOTFOUND, dir, "neither %s nor %s.gz found", path, path);
}

/* ---- the inflated copies of gzip IDX files (see data.h) ---- */

static int ends_with_gz(const char *path)
{
    size_t n = strlen(path);

    return n > 3 && strcmp(path + n - 3, ".gz") == 0;
}

/* The cache directory, made when missing; 0 when caching is off or fails. */
int fedi_data_cache_dir(char *dir, size_t size)
{
    const char *c = getenv("FEDNODE_CACHE"), *x = getenv("XDG_CACHE_HOME"), *h = getenv("HOME");
    int n;

    if (c && !strcmp(c, "off"))
        return 0;
    if (c && *c)
        n = snprintf(dir, size, "%s", c);
    else if (x && *x)
        n = snprintf(dir, size, "%s/fednode", x);
    else if (h && *h)
        n = snprintf(dir, size, "%s/.cache/fednode", h);
    else
        return 0;
    if (n < 0 || (size_t)n >= size)
        return 0;
    if (mkdir(dir, 0700) != 0 && errno != EEXIST) {
        /* $XDG_CACHE_HOME or ~/.cache itself may be missing */
        char parent[4096];
        char *slash;

        snprintf(parent, sizeof parent, "%s", dir);
        if ((slash = strrchr(parent, '/')) && slash != parent) {
            *slash = 0;
            (void)mkdir(parent, 0700);
        }
        if (mkdir(dir, 0700) != 0 && errno != EEXIST)
            return 0;
    }
    return 1;
}

/* DIR/NAME-SIZE-MTIME for gzip source src (NAME its basename less .gz). */
static int cache_name(const char *dir, const char *src, char *out, size_t size)
{
    const char *base = strrchr(src, '/');
    struct stat st;
    int n;

    base = base ? base + 1 : src;
    if (stat(src, &st) != 0)
        return 0;
    n = snprintf(out, size, "%s/%.*s-%llx-%llx", dir, (int)(strlen(base) - 3), base,
                 (unsigned long long)st.st_size,
                 (unsigned long long)st.st_mtim.tv_sec * 1000000000ull +
                     (unsigned long long)st.st_mtim.tv_nsec);
    return n > 0 && (size_t)n < size;
}

static int write_all(int fd, const void *buf, size_t len)
{
    const uint8_t *p = buf;

    while (len > 0) {
        ssize_t w = write(fd, p, len);

        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return 0;
        p += w;
        len -= (size_t)w;
    }
    return 1;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24), p[1] = (uint8_t)(v >> 16), p[2] = (uint8_t)(v >> 8),
    p[3] = (uint8_t)v;
}

static int data_write_idx(const char *path, int ndim, const uint32_t *dims, const uint8_t *data,
                            size_t bytes)
{
    char tmp[4200];
    uint8_t head[16];
    int fd, ok;

    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    if ((fd = mkstemp(tmp)) < 0)
        return 0;
    put_be32(head, 0x0800u | (uint32_t)ndim);
    for (int i = 0; i < ndim; i++)
        put_be32(head + 4 + 4 * i, dims[i]);
    ok = write_all(fd, head, 4 + 4 * (size_t)ndim) && write_all(fd, data, bytes);
    ok = close(fd) == 0 && ok;
    if (ok && rename(tmp, path) == 0)
        return 1;
    unlink(tmp);
    return 0;
}

void fedi_data_cache_keep(const char *icache, const char *lcache, const fed_dataset *d)
{
    uint32_t idims[3] = {(uint32_t)d->n, (uint32_t)(d->shape.c * d->shape.h),
                         (uint32_t)d->shape.w};
    uint32_t ldims[1] = {(uint32_t)d->n};
    uint8_t *lab = fed_malloc(d->n ? d->n : 1);

    if (!lab || !d->x_u8 || d->shape.classes > 256)
        goto out;
    for (size_t i = 0; i < d->n; i++)
        lab[i] = (uint8_t)d->y[i];
    if (data_write_idx(icache, 3, idims, d->x_u8, d->n * d->features) &&
        data_write_idx(lcache, 1, ldims, lab, d->n))
        fed_log(FED_LOG_INFO, "data: kept the decoded data as %s (and its labels)", icache);
out:
    fed_free(lab);
}

/* The pair from the cache when it holds it; else from the sources, then
 * kept there when they were gzip. */
static fed_err load_idx_cached(const char *ipath, const char *lpath, fed_dataset **out)
{
    char dir[4096], icache[4200], lcache[4200];
    int cached = ends_with_gz(ipath) && ends_with_gz(lpath) && fedi_data_cache_dir(dir, sizeof dir) &&
                 cache_name(dir, ipath, icache, sizeof icache) &&
                 cache_name(dir, lpath, lcache, sizeof lcache);
    fed_err err;

    if (cached && is_file(icache) && is_file(lcache)) {
        if (map_idx(icache, lcache, out) == FED_OK)
            return FED_OK;
        fed_log(FED_LOG_WARN, "data: the cached %s did not read back; inflating the source",
                icache);
    }
    err = fed_data_load_idx(ipath, lpath, out);
    if (err == FED_OK && cached)
        fedi_data_cache_keep(icache, lcache, *out);
    return err;
}

static fed_err open_idx_dir(const char *dir, int train, fed_dataset **out)
{
    const char *prefix = train ? "train" : "t10k";
    char ipath[4096], lpath[4096];
    fed_err err;

    err = find_idx(dir, prefix, "images-idx3", ipath, sizeof ipath);
    if (!err)
        err = find_idx(dir, prefix, "labels-idx1", lpath, sizeof lpath);
    if (!err)
        err = load_idx_cached(ipath, lpath, out);
    if (!err)
        fed_log(FED_LOG_INFO, "data: %s: %zu samples of %dx%d, %d classes", ipath, (*out)->n,
                (*out)->shape.h, (*out)->shape.w, (*out)->shape.classes);
    return err;
}

/* A directory of IDX files when it holds any train-/t10k- image file. */
static int has_idx(const char *dir)
{
    static const char *const names[] = { "train-images-idx3-ubyte", "train-images-idx3-ubyte.gz",
                                         "t10k-images-idx3-ubyte", "t10k-images-idx3-ubyte.gz" };
    char path[4200];

    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int n = snprintf(path, sizeof path, "%s/%s", dir, names[i]);

        if (n > 0 && (size_t)n < sizeof path && is_file(path))
            return 1;
    }
    return 0;
}

fed_err fed_data_flags_opts(const fed_data_flags *f, fed_data_opts *out, char *why, size_t cap)
{
    char tail;

    memset(out, 0, sizeof *out);
    if (sscanf(f->image_shape, "%dx%dx%d%c", &out->c, &out->h, &out->w, &tail) != 3 ||
        !(out->c == 1 || out->c == 3) || out->h < 1 || out->w < 1 ||
        out->h > FED_DATA_IMG_MAX_SIDE || out->w > FED_DATA_IMG_MAX_SIDE) {
        snprintf(why, cap, "--image-shape '%s': want CxHxW, C 1 or 3, H and W 1..%d",
                 f->image_shape, FED_DATA_IMG_MAX_SIDE);
        return FED_ERR_BAD_VALUE;
    }
    out->skip_bad_images = f->skip_bad_images;
    out->csv.categorical = f->categorical;
    out->csv.hash_buckets = f->hash_buckets;
    out->csv.skip_bad_rows = f->skip_bad_rows;
    if (strcmp(f->task, "classification") != 0 && strcmp(f->task, "regression") != 0) {
        snprintf(why, cap, "--task '%s': want classification or regression", f->task);
        return FED_ERR_BAD_VALUE;
    }
    out->csv.regression = !strcmp(f->task, "regression");
    return FED_OK;
}

fed_err fed_data_open(const char *what, int train, fed_dataset **out)
{
    return fed_data_open_opts(what, train, NULL, out);
}

fed_err fed_data_open_opts(const char *what, int train, const fed_data_opts *opts,
                           fed_dataset **out)
{
    struct stat st;
    char eb[128];

    *out = NULL;
    if (!what || !*what)
        return log_fail(FED_ERR_INVAL, "data", "no --data given");
    if (strcmp(what, "fashion-mnist") == 0) {
        const char *dir = getenv("FEDNODE_DATA");

        return open_idx_dir(dir && *dir ? dir : FED_DATA_DEFAULT_DIR, train, out);
    }
    if (stat(what, &st) != 0) {
        int e = errno;

        return log_fail(e == ENOENT ? FED_ERR_NOTFOUND : FED_ERR_IO, what,
                        "not 'fashion-mnist', a directory of IDX files or a CSV file: %s",
                        strerror_r(e, eb, sizeof eb));
    }
    if (S_ISDIR(st.st_mode))
        return has_idx(what) || !fedi_data_has_subdirs(what)
                   ? open_idx_dir(what, train, out)
                   : fedi_data_open_images(what, train, opts, out);
    return fed_data_open_csv(what, train, opts ? &opts->csv : NULL, out);
}

fed_err fed_data_subset(const fed_dataset *d, const uint32_t *idx, size_t n, fed_dataset **out)
{
    fed_dataset *s;
    size_t f = d->features;

    *out = NULL;
    if (n == 0 || n > d->n)
        return log_fail(FED_ERR_RANGE, "data", "subset of %zu samples out of %zu", n, d->n);
    for (size_t i = 0; i < n; i++)
        if (idx[i] >= d->n)
            return log_fail(FED_ERR_RANGE, "data", "subset index %u out of %zu samples", idx[i],
                            d->n);
    s = fed_calloc(1, sizeof *s);
    if (!s)
        return FED_ERR_NOMEM;
    s->n = n;
    s->shape = d->shape;
    s->features = f;
    s->hash_buckets = d->hash_buckets;
    s->y = fed_malloc(n * sizeof *s->y);
    if (d->categorical && (s->categorical = fed_malloc(f)))
        memcpy(s->categorical, d->categorical, f);
    if (d->y_f32)
        s->y_f32 = fed_malloc(n * sizeof *s->y_f32);
    if (d->x_u8)
        s->x_u8 = fed_malloc(n * f);
    else
        s->x_f32 = fed_malloc(n * f * sizeof *s->x_f32);
    if (d->chan_map && (s->chan_map = fed_malloc(2 * (size_t)d->shape.c * sizeof(float))))
        memcpy(s->chan_map, d->chan_map, 2 * (size_t)d->shape.c * sizeof(float));
    if (!s->y || (!s->x_u8 && !s->x_f32) || (d->categorical && !s->categorical) ||
        (d->y_f32 && !s->y_f32) || (d->chan_map && !s->chan_map)) {
        fed_data_free(s);
        return FED_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        if (d->x_u8)
            memcpy(s->x_u8 + i * f, d->x_u8 + (size_t)idx[i] * f, f);
        else
            memcpy(s->x_f32 + i * f, d->x_f32 + (size_t)idx[i] * f, f * sizeof *s->x_f32);
        s->y[i] = d->y[idx[i]];
        if (d->y_f32)
            s->y_f32[i] = d->y_f32[idx[i]];
    }
    *out = s;
    return FED_OK;
}

fed_err fed_data_view(const fed_dataset *d, fed_dataset **out)
{
    fed_dataset *v = fed_malloc(sizeof *v);

    *out = NULL;
    if (!v)
        return FED_ERR_NOMEM;
    *v = *d;
    v->view = 1;
    v->map = NULL;
    v->chan_map = NULL;
    if (d->chan_map && !(v->chan_map = fed_malloc(2 * (size_t)d->shape.c * sizeof(float)))) {
        fed_free(v);
        return FED_ERR_NOMEM;
    }
    if (d->chan_map)
        memcpy(v->chan_map, d->chan_map, 2 * (size_t)d->shape.c * sizeof(float));
    *out = v;
    return FED_OK;
}

fed_err fed_data_set_channel_stats(fed_dataset *d, const double *mean, const double *std,
                                   size_t c)
{
    float *map;

    if (!d->x_u8 || c != (size_t)d->shape.c)
        return log_fail(FED_ERR_SHAPE, "data", "per-channel statistics of %zu channels for %s", c,
                        d->x_u8 ? "images of another channel count" : "data that is not images");
    for (size_t k = 0; k < c; k++)
        if (!isfinite(mean[k]) || !isfinite(std[k]) || !(std[k] > 0))
            return log_fail(FED_ERR_RANGE, "data", "channel %zu: mean %g, std %g: not a mean and "
                            "a std over 0", k + 1, mean[k], std[k]);
    if (!d->chan_map && !(d->chan_map = fed_malloc(2 * c * sizeof *map)))
        return FED_ERR_NOMEM;
    map = d->chan_map;
    for (size_t k = 0; k < c; k++) {
        map[2 * k] = (float)(1.0 / std[k]);
        map[2 * k + 1] = (float)(-mean[k] / std[k]);
    }
    return FED_OK;
}

/* Histograms a channel are counted in this many interleaved copies, summed
 * at the end: images repeat a byte (a black background) often, and one
 * copy's increments of the same bin wait on each other. */
#define HIST_LANES 4

void fed_data_channel_hist(const fed_dataset *d, const uint32_t *idx, size_t n, uint64_t *hist)
{
    size_t c = (size_t)d->shape.c, plane = (size_t)d->shape.h * (size_t)d->shape.w;
    uint64_t lanes[HIST_LANES][FED_COLSTATS_BYTE_VALUES];

    assert(d->x_u8 && c * plane == d->features);
    for (size_t k = 0; k < c; k++) {
        uint64_t *h = hist + k * FED_COLSTATS_BYTE_VALUES;

        memset(lanes, 0, sizeof lanes);
        for (size_t i = 0; i < n; i++) {
            const uint8_t *x = d->x_u8 + (size_t)(idx ? idx[i] : i) * d->features + k * plane;
            size_t p = 0;

            for (; p + HIST_LANES <= plane; p += HIST_LANES)
                for (size_t l = 0; l < HIST_LANES; l++)
                    lanes[l][x[p + l]]++;
            for (; p < plane; p++)
                lanes[0][x[p]]++;
        }
        for (size_t v = 0; v < FED_COLSTATS_BYTE_VALUES; v++) {
            h[v] = 0;
            for (size_t l = 0; l < HIST_LANES; l++)
                h[v] += lanes[l][v];
        }
    }
}

/* ---- augmentation ---- */

fed_err fed_data_parse_augment(const char *spec, fed_data_aug *out)
{
    const char *p = spec;

    memset(out, 0, sizeof *out);
    if (!spec || !*spec || !strcmp(spec, "none"))
        return FED_OK;
    while (*p) {
        size_t len = strcspn(p, ",");

        if (len == 4 && !strncmp(p, "flip", 4) && !out->flip) {
            out->flip = 1;
        } else if (len > 5 && !strncmp(p, "crop:", 5) && !out->crop) {
            int v = 0;
            size_t i;

            for (i = 5; i < len && p[i] >= '0' && p[i] <= '9' && v <= 64; i++)
                v = v * 10 + (p[i] - '0');
            if (i != len || v < 1 || v > 64)
                return log_fail(FED_ERR_BAD_VALUE, "--augment",
                                "'%s': crop:P wants P from 1 to 64", spec);
            out->crop = v;
        } else {
            return log_fail(FED_ERR_BAD_VALUE, "--augment",
                            "'%s': want none, crop:P, flip or crop:P,flip", spec);
        }
        p += len;
        if (*p == ',' && *++p == 0)
            return log_fail(FED_ERR_BAD_VALUE, "--augment", "'%s': ends in a comma", spec);
    }
    return FED_OK;
}

fed_err fed_data_augment_check(const char *spec, const fed_dataset *d)
{
    fed_data_aug a;
    fed_err err = fed_data_parse_augment(spec, &a);

    if (!err && (a.crop || a.flip) && !d->x_u8)
        err = log_fail(FED_ERR_UNSUPPORTED, "--augment",
                       "'%s' is for images (IDX or an image folder), not CSV features", spec);
    return err;
}

void fed_data_augment(const fed_data_aug *a, fed_rng *rng, const fed_model_shape *s, uint8_t *x,
                      int n, uint8_t *scratch)
{
    size_t plane = (size_t)s->h * (size_t)s->w, f = plane * (size_t)s->c;

    if (!a->crop && !a->flip)
        return;
    for (int i = 0; i < n; i++) {
        uint8_t *smp = x + (size_t)i * f;
        int dx = a->crop ? (int)fed_rng_below(rng, 2 * (uint64_t)a->crop + 1) - a->crop : 0;
        int dy = a->crop ? (int)fed_rng_below(rng, 2 * (uint64_t)a->crop + 1) - a->crop : 0;
        int flip = a->flip ? (int)(fed_rng_u32(rng) & 1) : 0;

        memcpy(scratch, smp, f);
        for (int c = 0; c < s->c; c++)
            for (int y = 0; y < s->h; y++)
                for (int xx = 0; xx < s->w; xx++) {
                    int sy = y + dy, sx = (flip ? s->w - 1 - xx : xx) + dx;

                    smp[(size_t)c * plane + (size_t)y * s->w + xx] =
                        sy < 0 || sy >= s->h || sx < 0 || sx >= s->w
                            ? 0
                            : scratch[(size_t)c * plane + (size_t)sy * s->w + sx];
                }
    }
}

/* ---- batches ---- */

void fed_data_gather(const fed_dataset *d, const uint32_t *idx, int n, void *x_stage,
                     int32_t *y_stage, fed_batch *b)
{
    size_t f = d->features;

    if (d->x_u8) {
        uint8_t *x = x_stage;

        for (int i = 0; i < n; i++)
            memcpy(x + (size_t)i * f, d->x_u8 + (size_t)idx[i] * f, f);
        b->x_u8 = x;
        b->x_f32 = NULL;
        b->x_map = d->chan_map;
    } else {
        float *x = x_stage;

        for (int i = 0; i < n; i++)
            memcpy(x + (size_t)i * f, d->x_f32 + (size_t)idx[i] * f, f * sizeof *x);
        b->x_u8 = NULL;
        b->x_f32 = x;
        b->x_map = NULL;
    }
    for (int i = 0; i < n; i++)
        y_stage[i] = d->y[idx[i]];
    b->n = n;
    b->y = y_stage;
    b->y_f32 = NULL;
    if (d->y_f32) { /* targets: floats in the labels' bytes */
        float *t = (float *)(void *)y_stage;

        for (int i = 0; i < n; i++)
            t[i] = d->y_f32[idx[i]];
        b->y = NULL;
        b->y_f32 = t;
    }
}
