/* data_img.c - image folders (DIR/CLASS/FILE, PNG or JPEG told by magic
 * bytes) decoded with libpng and libjpeg-turbo, fitted to the model's input
 * shape and kept in the decoded cache like gzip IDX files. Every size in a
 * header is bounded before anything is allocated for it, and one image is
 * held at a time besides the dataset. */
#include "model/data.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jpeglib.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/data_impl.h"

#define log_fail fedi_data_log_fail
/* A decoding failure about name: said into why (cap bytes) when set, else
 * logged (the calling function's name, why and cap). */
#define img_fail(e, ...) fedi_data_fail(why, cap, (e), name, __VA_ARGS__)

static const uint8_t png_magic[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };

/* ---- decoding ---- */

static fed_err check_size(const char *name, unsigned long w, unsigned long h, char *why,
                          size_t cap)
{
    if (w == 0 || h == 0)
        return img_fail(FED_ERR_FORMAT, "image of %lux%lu pixels is empty", w, h);
    if ((unsigned long long)w * h > FED_DATA_IMG_MAX_PIXELS)
        return img_fail(FED_ERR_TOO_LARGE, "image of %lux%lu pixels is over the limit of %u", w,
                        h, FED_DATA_IMG_MAX_PIXELS);
    return FED_OK;
}

static fed_err decode_png(const uint8_t *buf, size_t len, const char *name, int c,
                          uint8_t **pixels, int *w, int *h, char *why, size_t cap)
{
    png_image im;
    uint8_t *px = NULL;
    fed_err err;

    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    if (!png_image_begin_read_from_memory(&im, buf, len))
        return img_fail(FED_ERR_FORMAT, "bad PNG: %s", im.message);
    if ((err = check_size(name, im.width, im.height, why, cap)) != FED_OK)
        goto out;
    /* Alpha is composed onto black; 16-bit samples are reduced to 8. */
    im.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    if (!(px = fed_malloc((size_t)PNG_IMAGE_SIZE(im)))) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    if (!png_image_finish_read(&im, NULL, px, 0, NULL)) {
        err = img_fail(FED_ERR_FORMAT, "bad PNG data: %s", im.message);
        goto out;
    }
    *pixels = px;
    *w = (int)im.width;
    *h = (int)im.height;
    px = NULL;
out:
    png_image_free(&im);
    fed_free(px);
    return err;
}

/* libjpeg reports errors through error_exit (which must not return: we
 * jump back) and warnings through emit_message(-1); it never prints. */
typedef struct jpeg_err {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    int warnings;
    char first[JMSG_LENGTH_MAX];
} jpeg_err;

static void jpeg_on_error(j_common_ptr ci)
{
    jpeg_err *e = (jpeg_err *)ci->err;

    if (!e->first[0])
        e->pub.format_message(ci, e->first);
    longjmp(e->jump, 1);
}

static void jpeg_on_message(j_common_ptr ci, int level)
{
    jpeg_err *e = (jpeg_err *)ci->err;

    if (level < 0) {
        if (!e->warnings && !e->first[0])
            e->pub.format_message(ci, e->first);
        e->warnings++;
    }
}

static void jpeg_quiet(j_common_ptr ci)
{
    (void)ci;
}

/* A progressive JPEG may hold thousands of tiny scans, each a pass over
 * the coefficients: a small file that costs minutes. Past JPEG_MAX_SCANS
 * the decode stops as an error; libjpeg's own memory is capped too. */
#define JPEG_MAX_SCANS 1000
#define JPEG_MAX_MEMORY (512L << 20)

static void jpeg_progress(j_common_ptr ci)
{
    jpeg_err *e = (jpeg_err *)ci->err;

    if (ci->is_decompressor && ((j_decompress_ptr)ci)->input_scan_number > JPEG_MAX_SCANS) {
        snprintf(e->first, sizeof e->first, "more than %d scans", JPEG_MAX_SCANS);
        longjmp(e->jump, 1);
    }
}

/* State a longjmp must find intact: on the heap, reached through one
 * pointer that does not change after setjmp. */
typedef struct jpeg_job {
    struct jpeg_decompress_struct ci;
    struct jpeg_progress_mgr progress;
    jpeg_err err;
    uint8_t *px;
    int created;
} jpeg_job;

static fed_err decode_jpeg(const uint8_t *buf, size_t len, const char *name, int c,
                           uint8_t **pixels, int *w, int *h, char *why, size_t cap)
{
    jpeg_job *j = fed_calloc(1, sizeof *j);
    fed_err err = FED_OK;

    if (!j)
        return FED_ERR_NOMEM;
    j->ci.err = jpeg_std_error(&j->err.pub);
    j->err.pub.error_exit = jpeg_on_error;
    j->err.pub.emit_message = jpeg_on_message;
    j->err.pub.output_message = jpeg_quiet;
    if (setjmp(j->err.jump)) {
        err = img_fail(FED_ERR_FORMAT, "bad JPEG: %s", j->err.first);
        goto out;
    }
    jpeg_create_decompress(&j->ci);
    j->created = 1;
    j->ci.mem->max_memory_to_use = JPEG_MAX_MEMORY;
    j->progress.progress_monitor = jpeg_progress;
    j->ci.progress = &j->progress;
    jpeg_mem_src(&j->ci, buf, (unsigned long)len);
    if (jpeg_read_header(&j->ci, TRUE) != JPEG_HEADER_OK) {
        err = img_fail(FED_ERR_FORMAT, "bad JPEG: no image");
        goto out;
    }
    if ((err = check_size(name, j->ci.image_width, j->ci.image_height, why, cap)) != FED_OK)
        goto out;
    j->ci.out_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_start_decompress(&j->ci);
    if (j->ci.output_components != c) {
        err = img_fail(FED_ERR_FORMAT, "JPEG decodes to %d channels, want %d",
                       j->ci.output_components, c);
        goto out;
    }
    if (!(j->px = fed_malloc((size_t)j->ci.output_width * j->ci.output_height * (size_t)c))) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    while (j->ci.output_scanline < j->ci.output_height) {
        JSAMPROW row = j->px + (size_t)j->ci.output_scanline * j->ci.output_width * (size_t)c;

        jpeg_read_scanlines(&j->ci, &row, 1);
    }
    jpeg_finish_decompress(&j->ci);
    /* libjpeg pads a cut-short file with gray and only warns: refuse it. */
    if (j->err.warnings) {
        err = img_fail(FED_ERR_FORMAT, "corrupt or truncated JPEG: %s", j->err.first);
        goto out;
    }
    *pixels = j->px;
    *w = (int)j->ci.output_width;
    *h = (int)j->ci.output_height;
    j->px = NULL;
out:
    if (j->created)
        jpeg_destroy_decompress(&j->ci);
    fed_free(j->px);
    fed_free(j);
    return err;
}

/* fed_data_decode_image, its failure said into why when set (else logged). */
static fed_err decode_image(const uint8_t *buf, size_t len, const char *name, int c,
                            uint8_t **pixels, int *w, int *h, char *why, size_t cap)
{
    *pixels = NULL;
    *w = *h = 0;
    assert(c == 1 || c == 3);
    if (len >= sizeof png_magic && memcmp(buf, png_magic, sizeof png_magic) == 0)
        return decode_png(buf, len, name, c, pixels, w, h, why, cap);
    if (len >= 3 && buf[0] == 0xff && buf[1] == 0xd8 && buf[2] == 0xff)
        return decode_jpeg(buf, len, name, c, pixels, w, h, why, cap);
    return img_fail(FED_ERR_MAGIC, "neither a PNG nor a JPEG (by its first bytes)");
}

fed_err fed_data_decode_image(const uint8_t *buf, size_t len, const char *name, int c,
                              uint8_t **pixels, int *w, int *h)
{
    return decode_image(buf, len, name, c, pixels, w, h, NULL, 0);
}

/* ---- fitting to the input shape ---- */

static int clampi(int v, int n) { return v < 0 ? 0 : v >= n ? n - 1 : v; }

void fed_data_fit_image(const uint8_t *src, int sw, int sh, int c, uint8_t *dst, int dw, int dh)
{
    /* The scale that makes the image cover dw x dh; the excess is cropped
     * evenly. Output pixel centers map back to source coordinates. */
    double s = fmax((double)dw / sw, (double)dh / sh);
    double ox = (sw * s - dw) / 2, oy = (sh * s - dh) / 2;

    for (int y = 0; y < dh; y++) {
        double fy = (y + 0.5 + oy) / s - 0.5;
        int y0 = (int)floor(fy), y1 = clampi(y0 + 1, sh);
        double ty = fy - y0;

        y0 = clampi(y0, sh);
        for (int x = 0; x < dw; x++) {
            double fx = (x + 0.5 + ox) / s - 0.5;
            int x0 = (int)floor(fx), x1 = clampi(x0 + 1, sw);
            double tx = fx - x0;

            x0 = clampi(x0, sw);
            for (int k = 0; k < c; k++) {
                double a = src[((size_t)y0 * sw + x0) * c + k];
                double b = src[((size_t)y0 * sw + x1) * c + k];
                double p = src[((size_t)y1 * sw + x0) * c + k];
                double q = src[((size_t)y1 * sw + x1) * c + k];
                double v = (a * (1 - tx) + b * tx) * (1 - ty) + (p * (1 - tx) + q * tx) * ty;

                dst[((size_t)k * dh + y) * dw + x] = (uint8_t)lrint(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
}

/* ---- the folder ---- */

typedef struct name_list {
    char **v;
    size_t n, cap;
} name_list;

static void names_free(name_list *l)
{
    for (size_t i = 0; i < l->n; i++)
        fed_free(l->v[i]);
    fed_free(l->v);
    memset(l, 0, sizeof *l);
}

static fed_err names_add(name_list *l, const char *s)
{
    size_t len = strlen(s);

    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 64;
        char **v = fed_realloc(l->v, cap * sizeof *v);

        if (!v)
            return FED_ERR_NOMEM;
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n] = fed_malloc(len + 1)))
        return FED_ERR_NOMEM;
    memcpy(l->v[l->n++], s, len + 1);
    return FED_OK;
}

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The entries of dir that are folders (dirs = 1) or regular files (0),
 * without dot names, sorted bytewise. */
static fed_err list_dir(const char *dir, int dirs, name_list *out)
{
    char eb[128], path[4200];
    struct dirent *e;
    fed_err err = FED_OK;
    DIR *d = opendir(dir);

    memset(out, 0, sizeof *out);
    if (!d) {
        int en = errno;

        return log_fail(en == ENOENT ? FED_ERR_NOTFOUND : en == EACCES ? FED_ERR_PERM : FED_ERR_IO,
                        dir, "cannot open folder: %s", strerror_r(en, eb, sizeof eb));
    }
    while ((e = readdir(d)) != NULL) {
        struct stat st;
        int n;

        if (e->d_name[0] == '.')
            continue;
        n = snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (n < 0 || (size_t)n >= sizeof path) {
            err = log_fail(FED_ERR_INVAL, dir, "path too long under it");
            break;
        }
        if (stat(path, &st) != 0 || (dirs ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode)))
            continue;
        if (out->n >= FED_DATA_MAX_SAMPLES) {
            err = log_fail(FED_ERR_TOO_LARGE, dir, "more than %u entries", FED_DATA_MAX_SAMPLES);
            break;
        }
        if ((err = names_add(out, e->d_name)) != FED_OK)
            break;
    }
    closedir(d);
    if (err)
        names_free(out);
    else if (out->n > 1)
        qsort(out->v, out->n, sizeof *out->v, name_cmp);
    return err;
}

int fedi_data_has_subdirs(const char *dir)
{
    name_list l;
    int any;

    if (list_dir(dir, 1, &l) != FED_OK)
        return 0;
    any = l.n > 0;
    names_free(&l);
    return any;
}

typedef struct img_shape {
    int c, h, w, skip;
    uint64_t max_bytes;
    int test;  /* the test split: a class without images is no error */
} img_shape;

static void shape_of(const fed_data_opts *o, img_shape *s)
{
    s->c = o && o->c ? o->c : 1;
    s->h = o && o->h ? o->h : 28;
    s->w = o && o->w ? o->w : 28;
    s->skip = o && o->skip_bad_images;
    s->max_bytes = o && o->max_bytes ? o->max_bytes : FED_DATA_IMG_MAX_BYTES;
}

/* The folder's files, class by class, and a key over everything that makes
 * its decoded form: the shape, the flag, and each file's name, size and
 * modification time. */
typedef struct img_index {
    name_list classes;
    name_list *files; /* (classes.n) */
    size_t total;
    uint64_t key[2];
} img_index;

static void index_free(img_index *x)
{
    for (size_t i = 0; x->files && i < x->classes.n; i++)
        names_free(&x->files[i]);
    fed_free(x->files);
    names_free(&x->classes);
}

static void key_add(uint64_t key[2], const void *p, size_t len)
{
    static const uint8_t k0[16] = "fednode/img-key0", k1[16] = "fednode/img-key1";
    const uint8_t *q = p;
    uint8_t buf[16 + 256];

    /* Chain: key = H(key || piece), in pieces of up to 256 bytes. */
    do {
        size_t part = len > 256 ? 256 : len;

        memcpy(buf, key, 16);
        memcpy(buf + 16, q, part);
        key[0] = fed_data_siphash(k0, buf, 16 + part);
        key[1] = fed_data_siphash(k1, buf, 16 + part);
        q += part;
        len -= part;
    } while (len > 0);
}

/* The classes are dir's folders, or (the test split) those of classes_dir:
 * then a folder of dir that is not one of them is FED_ERR_SHAPE, and one it
 * lacks is a class without images. */
static fed_err classes_of(const char *dir, const char *classes_dir, img_index *x)
{
    name_list own;
    fed_err err;

    if ((err = list_dir(classes_dir ? classes_dir : dir, 1, &x->classes)) != FED_OK)
        return err;
    if (x->classes.n == 0)
        return log_fail(FED_ERR_NOTFOUND, classes_dir ? classes_dir : dir,
                        "no class folders (DIR/CLASS/image files)");
    if (!classes_dir)
        return FED_OK;
    if ((err = list_dir(dir, 1, &own)) != FED_OK)
        return err;
    for (size_t i = 0; i < own.n && !err; i++)
        if (!bsearch(&own.v[i], x->classes.v, x->classes.n, sizeof *x->classes.v, name_cmp))
            err = log_fail(FED_ERR_SHAPE, dir, "folder '%s' is not a class of %s", own.v[i],
                           classes_dir);
    names_free(&own);
    return err;
}

static fed_err index_dir(const char *dir, const char *classes_dir, const img_shape *s,
                         img_index *x)
{
    char path[4200];
    fed_err err;
    int32_t head[4] = { s->c, s->h, s->w, s->skip };

    memset(x, 0, sizeof *x);
    if ((err = classes_of(dir, classes_dir, x)) != FED_OK)
        goto out;
    if (x->classes.n > FED_DATA_IMG_MAX_CLASSES) {
        err = log_fail(FED_ERR_TOO_LARGE, dir, "%zu class folders, over the limit of %d",
                       x->classes.n, FED_DATA_IMG_MAX_CLASSES);
        goto out;
    }
    if (!(x->files = fed_calloc(x->classes.n, sizeof *x->files))) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    key_add(x->key, head, sizeof head);
    for (size_t i = 0; i < x->classes.n; i++) {
        struct stat cs;

        snprintf(path, sizeof path, "%s/%s", dir, x->classes.v[i]);
        if (classes_dir && stat(path, &cs) != 0)
            memset(&x->files[i], 0, sizeof x->files[i]); /* the test split lacks it */
        else if ((err = list_dir(path, 0, &x->files[i])) != FED_OK)
            goto out;
        key_add(x->key, x->classes.v[i], strlen(x->classes.v[i]) + 1);
        for (size_t j = 0; j < x->files[i].n; j++) {
            struct stat st;
            uint64_t meta[2] = { 0, 0 };

            snprintf(path, sizeof path, "%s/%s/%s", dir, x->classes.v[i], x->files[i].v[j]);
            if (stat(path, &st) == 0) {
                meta[0] = (uint64_t)st.st_size;
                meta[1] = (uint64_t)st.st_mtim.tv_sec * 1000000000ull +
                          (uint64_t)st.st_mtim.tv_nsec;
            }
            key_add(x->key, x->files[i].v[j], strlen(x->files[i].v[j]) + 1);
            key_add(x->key, meta, sizeof meta);
        }
        x->total += x->files[i].n;
        if (x->total > FED_DATA_MAX_SAMPLES) {
            err = log_fail(FED_ERR_TOO_LARGE, dir, "more than %u images", FED_DATA_MAX_SAMPLES);
            goto out;
        }
    }
    return FED_OK;
out:
    index_free(x);
    return err;
}

/* One file: read (bounded), decode, fit into dst; a failure's cause said
 * into why (cap bytes), unlogged. */
static fed_err load_one(const char *path, const img_shape *s, uint8_t *dst, char *why,
                        size_t cap)
{
    uint8_t *buf = NULL, *px = NULL;
    size_t len = 0;
    int w = 0, h = 0;
    fed_err err;

    err = fedi_data_read_file(path, FED_DATA_IMG_MAX_FILE, &buf, &len, why, cap);
    if (!err)
        err = decode_image(buf, len, path, s->c, &px, &w, &h, why, cap);
    if (!err)
        fed_data_fit_image(px, w, h, s->c, dst, s->w, s->h);
    fed_free(px);
    fed_free(buf);
    return err;
}

static fed_err decode_all(const char *dir, const img_shape *s, const img_index *x,
                          fed_dataset **out)
{
    size_t f = (size_t)s->c * s->h * s->w, k = 0;
    fed_dataset *d = NULL;
    char path[4200];
    fed_err err = FED_OK;

    if ((uint64_t)x->total * f > s->max_bytes)
        return log_fail(FED_ERR_TOO_LARGE, dir,
                        "%zu images of %dx%dx%d need %llu bytes, over the bound of %llu",
                        x->total, s->c, s->h, s->w, (unsigned long long)((uint64_t)x->total * f),
                        (unsigned long long)s->max_bytes);
    if (!(d = fed_calloc(1, sizeof *d)))
        return FED_ERR_NOMEM;
    d->features = f;
    d->shape = (fed_model_shape){ s->c, s->h, s->w, (int)x->classes.n, 0 };
    d->x_u8 = fed_malloc(x->total ? x->total * f : 1);
    d->y = fed_malloc(x->total ? x->total * sizeof *d->y : 1);
    if (!d->x_u8 || !d->y) {
        err = FED_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < x->classes.n; i++) {
        size_t had = k;

        for (size_t j = 0; j < x->files[i].n; j++) {
            char why[512] = "";

            snprintf(path, sizeof path, "%s/%s/%s", dir, x->classes.v[i], x->files[i].v[j]);
            err = load_one(path, s, d->x_u8 + k * f, why, sizeof why);
            if (err == FED_ERR_NOMEM)
                goto out;
            if (err && !s->skip) {
                log_fail(err, path, "%s", why);
                goto out;
            }
            if (err) { /* one line: the cause, as a warning */
                fed_log(FED_LOG_WARN, "%s: %s (%s); skipped (--skip-bad-images)", path, why,
                        fed_errname(err));
                d->skipped++;
                err = FED_OK;
                continue;
            }
            d->y[k++] = (int32_t)i;
        }
        if (k == had) {
            snprintf(path, sizeof path, "%s/%s", dir, x->classes.v[i]);
            if (!s->skip && !s->test) {
                err = log_fail(FED_ERR_NOTFOUND, path, "class folder holds no %simages",
                               x->files[i].n ? "good " : "");
                goto out;
            }
            fed_log(FED_LOG_WARN, "data: %s: class %zu has no images%s", path, i,
                    s->test ? "" : " (--skip-bad-images)");
            d->empty_classes++;
        }
    }
    if (k == 0) {
        err = log_fail(FED_ERR_NOTFOUND, dir, "no image could be read");
        goto out;
    }
    d->n = k;
    *out = d;
    d = NULL;
out:
    fed_data_free(d);
    return err;
}

/* The cached decoded form: IDX images (n, c*h, w) and labels. */
static int cache_paths(const img_index *x, char *ip, char *lp, size_t size)
{
    char dir[4096];
    int a, b;

    if (!fedi_data_cache_dir(dir, sizeof dir))
        return 0;
    a = snprintf(ip, size, "%s/imgdir-%016llx%016llx-images", dir, (unsigned long long)x->key[0],
                 (unsigned long long)x->key[1]);
    b = snprintf(lp, size, "%s/imgdir-%016llx%016llx-labels", dir, (unsigned long long)x->key[0],
                 (unsigned long long)x->key[1]);
    return a > 0 && (size_t)a < size && b > 0 && (size_t)b < size;
}

static int cache_load(const char *ip, const char *lp, const img_shape *s, const img_index *x,
                      fed_dataset **out)
{
    struct stat st;
    fed_dataset *d = NULL;

    if (stat(ip, &st) != 0 || stat(lp, &st) != 0)
        return 0;
    if (fed_data_load_idx(ip, lp, &d) != FED_OK || d->shape.h != s->c * s->h ||
        d->shape.w != s->w) {
        fed_data_free(d);
        fed_log(FED_LOG_WARN, "data: the cached %s did not read back; decoding the folder", ip);
        return 0;
    }
    for (size_t i = 0; i < d->n; i++)
        if (d->y[i] >= (int32_t)x->classes.n) {
            fed_data_free(d);
            return 0;
        }
    d->shape = (fed_model_shape){ s->c, s->h, s->w, (int)x->classes.n, 0 };
    *out = d;
    return 1;
}

/* dir, its classes those of classes_dir when that is not NULL (the test
 * split). */
static fed_err load_images(const char *dir, const char *classes_dir, const fed_data_opts *opts,
                           fed_dataset **out)
{
    char ip[4200], lp[4200];
    img_shape s;
    img_index x;
    int cached;
    fed_err err;

    *out = NULL;
    shape_of(opts, &s);
    s.test = classes_dir != NULL;
    if (!(s.c == 1 || s.c == 3) || s.h < 1 || s.w < 1 || s.h > FED_DATA_IMG_MAX_SIDE ||
        s.w > FED_DATA_IMG_MAX_SIDE)
        return log_fail(FED_ERR_RANGE, dir, "image input %dx%dx%d: want 1 or 3 channels, sides "
                        "1..%d", s.c, s.h, s.w, FED_DATA_IMG_MAX_SIDE);
    if ((err = index_dir(dir, classes_dir, &s, &x)) != FED_OK)
        return err;
    cached = cache_paths(&x, ip, lp, sizeof ip);
    if (cached && cache_load(ip, lp, &s, &x, out)) {
        fed_log(FED_LOG_INFO,
                "data: %s: %zu images of %dx%dx%d, %d classes, from the cache (bad images "
                "were reported when it was made)",
                dir, (*out)->n, s.c, s.h, s.w, (*out)->shape.classes);
        goto out;
    }
    err = decode_all(dir, &s, &x, out);
    if (!err)
        fed_log(FED_LOG_INFO,
                "data: %s: %zu images of %dx%dx%d, %d classes (folders in sorted order), "
                "%zu skipped, %zu empty classes",
                dir, (*out)->n, s.c, s.h, s.w, (*out)->shape.classes, (*out)->skipped,
                (*out)->empty_classes);
    if (!err && cached)
        fedi_data_cache_keep(ip, lp, *out);
out:
    index_free(&x);
    return err;
}

fed_err fed_data_load_images(const char *dir, const fed_data_opts *opts, fed_dataset **out)
{
    return load_images(dir, NULL, opts, out);
}

fed_err fedi_data_open_images(const char *dir, int train, const fed_data_opts *opts,
                              fed_dataset **out)
{
    char split[4200];
    struct stat a, b;
    char tr[4200];

    snprintf(tr, sizeof tr, "%s/train", dir);
    snprintf(split, sizeof split, "%s/test", dir);
    /* The test split's classes are the training split's, by name. */
    if (stat(tr, &a) == 0 && S_ISDIR(a.st_mode) && stat(split, &b) == 0 && S_ISDIR(b.st_mode))
        return train ? load_images(tr, NULL, opts, out) : load_images(split, tr, opts, out);
    if (!train)
        fed_log(FED_LOG_INFO, "%s: no train/ and test/ folders: testing on the training images",
                dir);
    return fed_data_load_images(dir, opts, out);
}
