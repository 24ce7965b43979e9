/* test_data_img.c - image folders: the fitting (bilinear cover, center
 * crop, planar channels) to exact values, PNG and JPEG decoding told by
 * magic bytes, every bad image (truncated, not an image, a 20000x20000
 * header, an empty class folder) refused with its code and path or skipped
 * and counted, the memory bound, the cache, Fashion-MNIST's test images
 * written as PNG files reading back to the IDX pixels, and an RGB folder
 * standardized per channel with shared statistics. */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <png.h>
#include <jpeglib.h>
#include <zlib.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/pool.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/train.h"
#include "tests/support/support.h"

#define assert_err(got, want) assert_string_equal(fed_errname(got), fed_errname(want))

/* ------------------------------------------------------------ helpers -- */

typedef struct blob {
    uint8_t *p;
    size_t n;
} blob;

/* A PNG of w x h pixels of c channels (1 gray, 3 RGB), interleaved. */
static blob png_of(const uint8_t *px, int w, int h, int c)
{
    png_image im;
    png_alloc_size_t n = 0;
    blob b;

    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = c == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
    assert_true(png_image_write_to_memory(&im, NULL, &n, 0, px, 0, NULL));
    b.p = malloc(n);
    assert_non_null(b.p);
    assert_true(png_image_write_to_memory(&im, b.p, &n, 0, px, 0, NULL));
    b.n = n;
    return b;
}

/* A gray JPEG of w x h pixels, all v. */
static blob jpeg_of(int w, int h, uint8_t v)
{
    struct jpeg_compress_struct ci;
    struct jpeg_error_mgr em;
    unsigned char *out = NULL;
    unsigned long n = 0;
    uint8_t *row = malloc((size_t)w);
    blob b;

    assert_non_null(row);
    memset(row, v, (size_t)w);
    ci.err = jpeg_std_error(&em);
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, &out, &n);
    ci.image_width = (JDIMENSION)w;
    ci.image_height = (JDIMENSION)h;
    ci.input_components = 1;
    ci.in_color_space = JCS_GRAYSCALE;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 95, TRUE);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < ci.image_height) {
        JSAMPROW r = row;

        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(row);
    b.p = malloc(n);
    assert_non_null(b.p);
    memcpy(b.p, out, n);
    b.n = n;
    free(out);
    return b;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* A chunk at p: length, type, data, CRC; returns the bytes written. */
static size_t png_chunk(uint8_t *p, const char *type, const uint8_t *data, uint32_t len)
{
    put_be32(p, len);
    memcpy(p + 4, type, 4);
    if (len)
        memcpy(p + 8, data, len);
    put_be32(p + 8 + len, (uint32_t)crc32(0, p + 4, 4 + len));
    return 12 + len;
}

/* A PNG whose header says w x h (gray, 8 bits), with a few bytes of
 * image data: what a hostile file claims, not what it holds. */
static blob png_header_only(uint32_t w, uint32_t h)
{
    static const uint8_t sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n' };
    uint8_t ihdr[13] = { 0 }, idat[8] = { 0x78, 0x9c, 0x63, 0, 0, 0, 1, 0 };
    blob b = { malloc(128), 0 };

    assert_non_null(b.p);
    memcpy(b.p, sig, 8);
    put_be32(ihdr, w);
    put_be32(ihdr + 4, h);
    ihdr[8] = 8;
    b.n = 8;
    b.n += png_chunk(b.p + b.n, "IHDR", ihdr, 13);
    b.n += png_chunk(b.p + b.n, "IDAT", idat, 8);
    b.n += png_chunk(b.p + b.n, "IEND", NULL, 0);
    return b;
}

static void write_blob(const char *path, blob b)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(b.p, 1, b.n, f), b.n);
    assert_int_equal(fclose(f), 0);
}

/* tmp/rel made (one level at a time, each may exist). */
static void mkdirs(char *out, size_t cap, const char *rel)
{
    char part[512];
    const char *p = rel;

    while ((p = strchr(p, '/')) != NULL) {
        snprintf(part, sizeof part, "%.*s", (int)(p - rel), rel);
        fed_test_path(out, cap, part);
        (void)mkdir(out, 0700);
        p++;
    }
    fed_test_path(out, cap, rel);
    (void)mkdir(out, 0700);
}

/* tmp/rel written with b. */
static void put(const char *rel, blob b)
{
    char p[1024];

    fed_test_path(p, sizeof p, rel);
    write_blob(p, b);
}

static uint8_t gray8[64];
static blob good_png(void)
{
    for (int i = 0; i < 64; i++)
        gray8[i] = (uint8_t)(i * 4);
    return png_of(gray8, 8, 8, 1);
}

static int setup(void **state)
{
    char cache[1024];
    int rc = fed_test_tmpdir_setup(state);

    fed_test_log_capture(FED_LOG_DEBUG);
    fed_log_set_level(FED_LOG_DEBUG);
    fed_test_path(cache, sizeof cache, "cache");
    setenv("FEDNODE_CACHE", cache, 1);
    return rc;
}

static int teardown(void **state)
{
    (void)state;
    fed_alloc_fail_nth(0, 0);
    fed_test_log_default();
    unsetenv("FEDNODE_CACHE");
    return fed_test_tmpdir_teardown(state);
}

/* -------------------------------------------------------------- tests -- */

static void test_fit_image(void **state)
{
    const uint8_t wide[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }; /* 4 x 2 */
    const uint8_t two[2] = { 0, 100 };                    /* 2 x 1 */
    const uint8_t rgb[6] = { 1, 2, 3, 4, 5, 6 };          /* 2 x 1 RGB */
    uint8_t out[16];

    (void)state;
    /* same size: a copy */
    fed_data_fit_image(wide, 4, 2, 1, out, 4, 2);
    assert_memory_equal(out, wide, 8);
    /* 4x2 into 2x2: scale 1 covers, the middle two columns kept */
    fed_data_fit_image(wide, 4, 2, 1, out, 2, 2);
    assert_int_equal(out[0], 2);
    assert_int_equal(out[1], 3);
    assert_int_equal(out[2], 6);
    assert_int_equal(out[3], 7);
    /* 2x1 into 4x2: scale 2, bilinear between pixel centers */
    fed_data_fit_image(two, 2, 1, 1, out, 4, 2);
    assert_int_equal(out[0], 0);
    assert_int_equal(out[1], 25);
    assert_int_equal(out[2], 75);
    assert_int_equal(out[3], 100);
    assert_memory_equal(out + 4, out, 4);
    /* interleaved RGB in, planar out */
    fed_data_fit_image(rgb, 2, 1, 3, out, 2, 1);
    assert_int_equal(out[0], 1);
    assert_int_equal(out[1], 4);
    assert_int_equal(out[2], 2);
    assert_int_equal(out[3], 5);
    assert_int_equal(out[4], 3);
    assert_int_equal(out[5], 6);
}

static void test_decode(void **state)
{
    const uint8_t px[6] = { 0, 50, 100, 150, 200, 250 };
    const uint8_t col[6] = { 255, 0, 0, 0, 0, 255 };
    blob p = png_of(px, 3, 2, 1), rgb = png_of(col, 2, 1, 3), j = jpeg_of(16, 8, 128);
    blob huge = png_header_only(20000, 20000);
    uint8_t *out = NULL;
    int w = 0, h = 0;

    (void)state;
    assert_err(fed_data_decode_image(p.p, p.n, "p", 1, &out, &w, &h), FED_OK);
    assert_int_equal(w, 3);
    assert_int_equal(h, 2);
    assert_memory_equal(out, px, 6);
    fed_free(out);
    /* gray read as RGB: three equal channels */
    assert_err(fed_data_decode_image(p.p, p.n, "p", 3, &out, &w, &h), FED_OK);
    for (int i = 0; i < 6; i++)
        for (int k = 0; k < 3; k++)
            assert_int_equal(out[i * 3 + k], px[i]);
    fed_free(out);
    assert_err(fed_data_decode_image(rgb.p, rgb.n, "rgb", 3, &out, &w, &h), FED_OK);
    assert_memory_equal(out, col, 6);
    fed_free(out);
    assert_err(fed_data_decode_image(j.p, j.n, "j", 1, &out, &w, &h), FED_OK);
    assert_int_equal(w, 16);
    assert_int_equal(h, 8);
    for (int i = 0; i < 128; i++)
        assert_true(out[i] >= 127 && out[i] <= 129);
    fed_free(out);

    fed_test_log_reset();
    assert_err(fed_data_decode_image(p.p, p.n - 20, "cut.png", 1, &out, &w, &h),
               FED_ERR_FORMAT);
    assert_null(out);
    fed_test_log_has("cut.png: bad PNG");
    fed_test_log_reset();
    assert_err(fed_data_decode_image(j.p, j.n / 2, "cut.jpg", 1, &out, &w, &h),
               FED_ERR_FORMAT);
    assert_null(out);
    fed_test_log_has("cut.jpg: bad JPEG");
    fed_test_log_reset();
    assert_err(fed_data_decode_image(huge.p, huge.n, "huge.png", 1, &out, &w, &h),
               FED_ERR_TOO_LARGE);
    assert_null(out);
    fed_test_log_has("huge.png: image of 20000x20000 pixels is over the limit");
    fed_test_log_reset();
    assert_err(fed_data_decode_image((const uint8_t *)"GIF89a", 6, "x.gif", 1, &out, &w, &h),
               FED_ERR_MAGIC);
    fed_test_log_has("x.gif: neither a PNG nor a JPEG");
    assert_err(fed_data_decode_image(j.p, 2, "two", 1, &out, &w, &h), FED_ERR_MAGIC);
    free(p.p);
    free(rgb.p);
    free(j.p);
    free(huge.p);
}

/* Classes are the folders' names sorted bytewise; a JPEG named .png is a
 * JPEG; hidden names are ignored. */
static void test_folder_order_and_magic(void **state)
{
    blob g = good_png(), j = jpeg_of(28, 28, 200);
    fed_data_opts o = { .c = 1, .h = 8, .w = 8 };
    fed_dataset *d = NULL;
    char p[1024];

    (void)state;
    mkdirs(p, sizeof p, "f/b");
    mkdirs(p, sizeof p, "f/a");
    mkdirs(p, sizeof p, "f/10");
    mkdirs(p, sizeof p, "f/9");
    mkdirs(p, sizeof p, "f/.hidden");
    put("f/b/x.png", g);
    put("f/a/photo.png", j); /* a JPEG under a .png name */
    put("f/10/y.png", g);
    put("f/9/z.png", g);
    put("f/9/.DS_Store", (blob){ (uint8_t *)"junk", 4 });
    put("f/.hidden/w.png", g);
    fed_test_path(p, sizeof p, "f");
    assert_err(fed_data_load_images(p, &o, &d), FED_OK);
    assert_int_equal(d->n, 4);
    assert_int_equal(d->shape.classes, 4);
    assert_int_equal(d->shape.c, 1);
    assert_int_equal(d->shape.h, 8);
    assert_int_equal(d->features, 64);
    assert_non_null(d->x_u8);
    /* "10" < "9" < "a" < "b" */
    assert_int_equal(d->y[0], 0);
    assert_int_equal(d->y[1], 1);
    assert_int_equal(d->y[2], 2);
    assert_int_equal(d->y[3], 3);
    assert_memory_equal(d->x_u8, gray8, 64);
    for (int i = 0; i < 64; i++) /* the JPEG, 28x28 down to 8x8 */
        assert_true(d->x_u8[128 + i] >= 199 && d->x_u8[128 + i] <= 201);
    fed_test_log_has("4 images of 1x8x8, 4 classes (folders in sorted order)");
    fed_data_free(d);
    free(g.p);
    free(j.p);
}

/* Each bad case refused with its code, naming the path; then all of them
 * together skipped and counted. */
static void test_folder_bad(void **state)
{
    blob g = good_png(), cut = good_png(), huge = png_header_only(20000, 20000);
    fed_data_opts o = { .c = 1, .h = 8, .w = 8 };
    fed_dataset *d = (fed_dataset *)1;
    char p[1024];
    static const struct {
        const char *dir, *file, *needle;
        fed_err want;
    } cases[] = {
        { "cut", "cut/a/t.png", "cut/a/t.png: bad PNG", FED_ERR_FORMAT },
        { "huge", "huge/a/h.png", "huge/a/h.png: image of 20000x20000 pixels", FED_ERR_TOO_LARGE },
        { "text", "text/a/notes.png", "text/a/notes.png: neither a PNG nor a JPEG",
          FED_ERR_MAGIC },
        { "empty", NULL, "empty/b: class folder holds no images", FED_ERR_NOTFOUND },
    };

    (void)state;
    cut.n -= 30;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char rel[128];

        snprintf(rel, sizeof rel, "%s/a", cases[i].dir);
        mkdirs(p, sizeof p, rel);
        snprintf(rel, sizeof rel, "%s/a/ok.png", cases[i].dir);
        put(rel, g);
        if (!strcmp(cases[i].dir, "empty")) {
            mkdirs(p, sizeof p, "empty/b");
        } else {
            blob b = !strcmp(cases[i].dir, "cut")    ? cut
                     : !strcmp(cases[i].dir, "huge") ? huge
                                                    : (blob){ (uint8_t *)"just text\n", 10 };

            put(cases[i].file, b);
        }
        fed_test_path(p, sizeof p, cases[i].dir);
        fed_test_log_reset();
        d = (fed_dataset *)1;
        assert_err(fed_data_load_images(p, &o, &d), cases[i].want);
        assert_null(d);
        fed_test_log_has(cases[i].needle);
    }
    /* All together, with --skip-bad-images. */
    mkdirs(p, sizeof p, "all/a");
    mkdirs(p, sizeof p, "all/b");
    mkdirs(p, sizeof p, "all/c");
    mkdirs(p, sizeof p, "all/d");
    put("all/a/1.png", g);
    put("all/a/2.png", cut);
    put("all/c/3.png", huge);
    put("all/c/4.png", (blob){ (uint8_t *)"just text\n", 10 });
    put("all/d/5.png", g);
    put("all/d/6.png", g);
    o.skip_bad_images = 1;
    fed_test_path(p, sizeof p, "all");
    fed_test_log_reset();
    assert_err(fed_data_load_images(p, &o, &d), FED_OK);
    assert_int_equal(d->n, 3);
    assert_int_equal(d->skipped, 3);
    assert_int_equal(d->empty_classes, 2); /* b (none) and c (none good) */
    assert_int_equal(d->shape.classes, 4); /* empty classes keep their numbers */
    assert_int_equal(d->y[0], 0);
    assert_int_equal(d->y[1], 3);
    assert_int_equal(d->y[2], 3);
    /* each skipped image is one warning line with its cause (not an error
       line and then a warning) */
    {
        static const char *const said[][2] = {
            { "all/a/2.png", "all/a/2.png: bad PNG" },
            { "all/c/3.png", "all/c/3.png: image of 20000x20000 pixels" },
            { "all/c/4.png", "all/c/4.png: neither a PNG nor a JPEG" },
        };

        for (size_t i = 0; i < sizeof said / sizeof said[0]; i++) {
            assert_int_equal(fed_test_log_count(said[i][0], ""), 1);
            assert_int_equal(fed_test_log_count(said[i][1], "; skipped (--skip-bad-images)"), 1);
        }
    }
    fed_test_log_has("all/c: class 2 has no images");
    fed_test_log_has("3 skipped, 2 empty classes");
    fed_data_free(d);
    /* nothing good at all */
    mkdirs(p, sizeof p, "none/a");
    put("none/a/x.png", cut);
    fed_test_path(p, sizeof p, "none");
    d = (fed_dataset *)1;
    assert_err(fed_data_load_images(p, &o, &d), FED_ERR_NOTFOUND);
    assert_null(d);
    fed_test_log_has("no image could be read");
    /* a folder without class folders */
    mkdirs(p, sizeof p, "flat");
    put("flat/x.png", g);
    fed_test_path(p, sizeof p, "flat");
    assert_err(fed_data_load_images(p, &o, &d), FED_ERR_NOTFOUND);
    fed_test_log_has("no class folders");
    free(g.p);
    free(cut.p);
    free(huge.p);
}

/* The dataset's size is checked before any image is decoded; the shape
 * asked for is checked. */
static void test_folder_bounds(void **state)
{
    blob g = good_png();
    fed_data_opts o = { .c = 3, .h = 28, .w = 28, .max_bytes = 3 * 28 * 28 * 2 - 1 };
    fed_dataset *d = (fed_dataset *)1;
    char p[1024];

    (void)state;
    mkdirs(p, sizeof p, "b/a");
    put("b/a/1.png", g);
    put("b/a/2.png", (blob){ (uint8_t *)"not an image", 12 }); /* never reached */
    fed_test_path(p, sizeof p, "b");
    fed_test_log_reset();
    assert_err(fed_data_load_images(p, &o, &d), FED_ERR_TOO_LARGE);
    assert_null(d);
    fed_test_log_has("2 images of 3x28x28 need 4704 bytes, over the bound of 4703");
    assert_int_equal(fed_test_log_count("not a PNG", ""), 0);
    o.max_bytes = 0;
    o.c = 2;
    assert_err(fed_data_load_images(p, &o, &d), FED_ERR_RANGE);
    o.c = 1;
    o.h = FED_DATA_IMG_MAX_SIDE + 1;
    assert_err(fed_data_load_images(p, &o, &d), FED_ERR_RANGE);
    free(g.p);
}

/* DIR/train and DIR/test are the splits; the decoded folder is cached. */
static void test_folder_split_and_cache(void **state)
{
    blob g = good_png();
    uint8_t other[64];
    blob o2;
    fed_data_opts o = { .c = 1, .h = 8, .w = 8 };
    fed_dataset *d = NULL, *e = NULL;
    char p[1024];

    (void)state;
    memset(other, 7, sizeof other);
    o2 = png_of(other, 8, 8, 1);
    mkdirs(p, sizeof p, "s/train/a");
    mkdirs(p, sizeof p, "s/test/a");
    put("s/train/a/1.png", g);
    put("s/test/a/1.png", o2);
    fed_test_path(p, sizeof p, "s");
    assert_err(fed_data_open_opts(p, 1, &o, &d), FED_OK);
    assert_memory_equal(d->x_u8, gray8, 64);
    fed_data_free(d);
    assert_err(fed_data_open_opts(p, 0, &o, &d), FED_OK);
    assert_memory_equal(d->x_u8, other, 64);
    fed_data_free(d);
    /* again: from the cache, the same bytes */
    fed_test_log_reset();
    assert_err(fed_data_open_opts(p, 0, &o, &e), FED_OK);
    fed_test_log_has("1 images of 1x8x8, 1 classes, from the cache");
    assert_memory_equal(e->x_u8, other, 64);
    assert_int_equal(e->shape.h, 8);
    assert_int_equal(e->shape.classes, 1);
    fed_data_free(e);
    /* a changed file is decoded anew */
    put("s/test/a/1.png", g);
    {
        struct timespec ts[2] = { { 0, UTIME_NOW }, { 12345, 0 } };

        fed_test_path(p, sizeof p, "s/test/a/1.png");
        assert_int_equal(utimensat(AT_FDCWD, p, ts, 0), 0);
    }
    fed_test_path(p, sizeof p, "s");
    fed_test_log_reset();
    assert_err(fed_data_open_opts(p, 0, &o, &e), FED_OK);
    assert_int_equal(fed_test_log_count("from the cache", ""), 0);
    assert_memory_equal(e->x_u8, gray8, 64);
    fed_data_free(e);
    /* the test split's classes are the training split's, by name: a class
     * it lacks keeps its number, one the training split lacks is refused */
    mkdirs(p, sizeof p, "s/train/b");
    mkdirs(p, sizeof p, "s/train/c");
    put("s/train/b/1.png", g);
    put("s/train/c/1.png", g);
    mkdirs(p, sizeof p, "s/test/c");
    put("s/test/c/1.png", g);
    fed_test_path(p, sizeof p, "s");
    fed_test_log_reset();
    assert_err(fed_data_open_opts(p, 0, &o, &d), FED_OK);
    assert_int_equal(d->n, 2);
    assert_int_equal(d->shape.classes, 3);
    assert_int_equal(d->y[0], 0);
    assert_int_equal(d->y[1], 2); /* c is class 2 in train/ */
    assert_int_equal(d->empty_classes, 1);
    assert_int_equal(fed_test_log_count("(FED_ERR", ""), 0);
    fed_data_free(d);
    mkdirs(p, sizeof p, "s/test/zebra");
    put("s/test/zebra/1.png", g);
    fed_test_path(p, sizeof p, "s");
    d = (fed_dataset *)1;
    assert_err(fed_data_open_opts(p, 0, &o, &d), FED_ERR_SHAPE);
    assert_null(d);
    fed_test_log_has("folder 'zebra' is not a class of");
    free(g.p);
    free(o2.p);
}

/* Fashion-MNIST's 10000 test images written as PNG files, one folder per
 * label: the folder reads back to exactly the IDX pixels and labels (in
 * class order), so every model scores the same accuracy on both. */
static void test_fashion_as_png(void **state)
{
    fed_dataset *idx = NULL, *img = NULL;
    fed_data_opts o = { .c = 1, .h = 28, .w = 28 };
    size_t k = 0;
    char p[1024], rel[128];

    (void)state;
    fed_test_need_fashion(fed_test_fashion_present());
    assert_err(fed_data_open("fashion-mnist", 0, &idx), FED_OK);
    for (int c = 0; c < 10; c++) {
        snprintf(rel, sizeof rel, "fm/%d", c);
        mkdirs(p, sizeof p, rel);
    }
    for (size_t i = 0; i < idx->n; i++) {
        blob b = png_of(idx->x_u8 + i * 784, 28, 28, 1);

        snprintf(rel, sizeof rel, "fm/%d/%05zu.png", idx->y[i], i);
        put(rel, b);
        free(b.p);
    }
    fed_test_path(p, sizeof p, "fm");
    assert_err(fed_data_open_opts(p, 0, &o, &img), FED_OK);
    assert_int_equal(img->n, idx->n);
    assert_int_equal(img->shape.classes, 10);
    assert_int_equal(img->features, 784);
    for (int c = 0; c < 10; c++)
        for (size_t i = 0; i < idx->n; i++) {
            if (idx->y[i] != c)
                continue;
            assert_int_equal(img->y[k], c);
            assert_memory_equal(img->x_u8 + k * 784, idx->x_u8 + i * 784, 784);
            k++;
        }
    assert_int_equal(k, idx->n);
    fed_data_free(img);
    fed_data_free(idx);
}

/* One epoch of logreg on 32 8x8 images with --augment as given, inputs
 * of the given scale (model.h) with Gaussian noise of std noise; the
 * parameters after it into p. */
static void train_once(const fed_dataset *d, const char *aug, double noise, int scale, float *p,
                       size_t np)
{
    fed_model_shape in = d->shape;

    fed_backend *be = NULL;
    fed_pool *pool = NULL;
    fed_model *m = NULL;
    fed_optim *o = NULL;
    fed_trainer *t = NULL;
    fed_optim_cfg oc;
    fed_data_aug a;
    fed_rng init, shuffle;
    uint32_t idx[32];

    for (uint32_t i = 0; i < 32; i++)
        idx[i] = i;
    assert_err(fed_backend_cpu_new(1, &be), FED_OK);
    assert_err(fed_pool_new(0, &pool), FED_OK);
    in.scale = scale;
    assert_err(fed_model_new("logreg", in, be, pool, 1, 8, &m), FED_OK);
    assert_int_equal(fed_model_nparams(m), np);
    fed_rng_seed(&init, 1);
    fed_rng_seed(&shuffle, 2);
    assert_err(fed_model_init(m, &init), FED_OK);
    fed_optim_cfg_default(&oc, FED_OPTIM_SGD);
    oc.lr = 0.1f;
    oc.sched = FED_SCHED_CONST;
    assert_err(fed_optim_new(&oc, m, &o), FED_OK);
    assert_err(fed_trainer_new(m, o, d, 8, &t), FED_OK);
    assert_err(fed_data_parse_augment(aug, &a), FED_OK);
    assert_err(fed_trainer_set_augment(t, &a, 5), FED_OK);
    assert_err(fed_trainer_set_noise(t, noise, 6), FED_OK);
    assert_err(fed_trainer_epoch(t, idx, 32, &shuffle, NULL), FED_OK);
    assert_err(fed_model_get_params(m, p), FED_OK);
    fed_trainer_free(t);
    fed_optim_free(o);
    fed_model_free(m);
    fed_pool_free(pool);
    fed_backend_free(be);
}

/* 32 planar 8x8 grey images of 10 classes, as an IDX pair. */
static fed_dataset *small_images(void)
{
    uint8_t im[16 + 32 * 64], lb[8 + 32];
    fed_dataset *d = NULL;

    memcpy(im, "\0\0\x08\x03\0\0\0\x20\0\0\0\x08\0\0\0\x08", 16);
    memcpy(lb, "\0\0\x08\x01\0\0\0\x20", 8);
    for (int i = 0; i < 32 * 64; i++)
        im[16 + i] = (uint8_t)(i * 37 + i / 64);
    for (int i = 0; i < 32; i++)
        lb[8 + i] = (uint8_t)(i % 10);
    assert_err(fed_data_parse_idx(im, sizeof im, lb, sizeof lb, &d), FED_OK);
    return d;
}

/* The trainer's augmentation: repeatable for a seed, a change to the
 * training (not a no-op), refused on float features. */
static void test_trainer_augment(void **state)
{
    fed_dataset *d = NULL;
    size_t np = 64 * 10 + 10;
    float *a = malloc(np * sizeof *a), *b = malloc(np * sizeof *b), *c = malloc(np * sizeof *c);
    fed_data_aug aug = { 2, 1 };

    (void)state;
    d = small_images();
    train_once(d, "crop:2,flip", 0, 0, a, np);
    train_once(d, "crop:2,flip", 0, 0, b, np);
    train_once(d, "none", 0, 0, c, np);
    assert_memory_equal(a, b, np * sizeof *a);
    assert_memory_not_equal(a, c, np * sizeof *a);
    fed_data_free(d);
    /* float features (CSV): refused */
    {
        const char *t = "a,b,label\n1,2,0\n3,4,1\n";
        fed_backend *be = NULL;
        fed_pool *pool = NULL;
        fed_model *m = NULL;
        fed_trainer *tr = NULL;

        assert_err(fed_data_parse_csv(t, strlen(t), NULL, &d), FED_OK);
        assert_err(fed_backend_cpu_new(1, &be), FED_OK);
        assert_err(fed_pool_new(0, &pool), FED_OK);
        assert_err(fed_model_new("logreg", d->shape, be, pool, 1, 2, &m), FED_OK);
        assert_err(fed_trainer_new(m, NULL, d, 2, &tr), FED_OK);
        assert_err(fed_trainer_set_augment(tr, &aug, 1), FED_ERR_UNSUPPORTED);
        fed_trainer_free(tr);
        fed_model_free(m);
        fed_pool_free(pool);
        fed_backend_free(be);
        fed_data_free(d);
    }
    free(a);
    free(b);
    free(c);
}

static fed_err dummy_reduce(void *ctx, float *buf, size_t n)
{
    (void)ctx, (void)buf, (void)n;
    return FED_OK;
}

/* The trainer's feature noise (noise:SIGMA): repeatable for a seed, a
 * change to the training; bytes become floats exactly as the model maps
 * them, in either input scale (noise of std 1e-30 vanishes in the sums: the
 * same parameters as the uint8 path); refused over ranks, std < 0 invalid. */
static void test_trainer_noise(void **state)
{
    fed_dataset *d = NULL;
    size_t np = 64 * 10 + 10;
    float *a = malloc(np * sizeof *a), *b = malloc(np * sizeof *b), *c = malloc(np * sizeof *c);

    (void)state;
    d = small_images();
    for (int scale = FED_MODEL_INPUT_CENTRED; scale <= FED_MODEL_INPUT_UNIT; scale++) {
        train_once(d, "none", 0.3, scale, a, np);
        train_once(d, "none", 0.3, scale, b, np);
        train_once(d, "none", 0, scale, c, np);
        assert_memory_equal(a, b, np * sizeof *a);
        assert_memory_not_equal(a, c, np * sizeof *a);
        train_once(d, "none", 1e-30, scale, b, np);
        assert_memory_equal(b, c, np * sizeof *b);
    }
    {
        fed_backend *be = NULL;
        fed_model *m = NULL;
        fed_trainer *tr = NULL;

        assert_err(fed_backend_cpu_new(1, &be), FED_OK);
        assert_err(fed_model_new("logreg", d->shape, be, NULL, 1, 8, &m), FED_OK);
        assert_err(fed_trainer_new(m, NULL, d, 8, &tr), FED_OK);
        assert_err(fed_trainer_set_noise(tr, -0.1, 1), FED_ERR_INVAL);
        assert_err(fed_trainer_set_noise(tr, 0.1, 1), FED_OK);
        assert_err(fed_trainer_set_ranks(tr, 0, 2, dummy_reduce, NULL), FED_ERR_UNSUPPORTED);
        fed_trainer_free(tr);
        fed_model_free(m);
        fed_backend_free(be);
    }
    fed_data_free(d);
    free(a);
    free(b);
    free(c);
}

/* Shared statistics of an RGB image folder: three sites' shards (the
 * channels far apart: red near 225, green near 30, blue over the whole
 * range) give each channel's pooled mean and std of the bytes; with them
 * every channel of the mapped pooled batch has mean 0 and std 1; the
 * model maps a batch's bytes so (its logits those of the floats mapped
 * here), the trainer's noise path too, the cached bytes untouched. */
static void test_channel_stats(void **state)
{
    enum { N = 32, C = 3, S = 6, PLANE = S * S, F = C * PLANE, NI = C * FED_COLSTATS_INTS };
    fed_data_opts o = {.c = C, .h = S, .w = S};
    fed_dataset *d = NULL, *v = NULL;
    uint8_t px[PLANE * C], xs[N * F], before[N * F];
    uint64_t hist[C * FED_COLSTATS_BYTE_VALUES], tot[NI] = {0};
    int64_t ints[NI];
    int32_t ys[N];
    uint32_t idx[N];
    double mean[C], sd[C];
    fed_colstat st[C];
    float *mapped = malloc((size_t)N * F * sizeof *mapped), la[N * 2], lb[N * 2];
    size_t np = F * 2 + 2;
    float *pa = malloc(np * sizeof *pa), *pb = malloc(np * sizeof *pb), *pc = malloc(np * sizeof *pc);
    fed_batch b;
    fed_rng r;
    char dir[1024];

    (void)state;
    assert_non_null(mapped);
    fed_rng_seed(&r, 38);
    for (int i = 0; i < N; i++) {
        char rel[64];

        for (int p = 0; p < PLANE; p++) {
            px[p * C] = (uint8_t)(200 + fed_rng_below(&r, 50));
            px[p * C + 1] = (uint8_t)(20 + fed_rng_below(&r, 20));
            px[p * C + 2] = (uint8_t)fed_rng_below(&r, 256);
        }
        snprintf(rel, sizeof rel, "rgb/%s/%02d.png", i % 2 ? "cat" : "dog", i);
        mkdirs(dir, sizeof dir, i % 2 ? "rgb/cat" : "rgb/dog");
        blob png = png_of(px, S, S, C);

        put(rel, png);
        free(png.p);
    }
    fed_test_path(dir, sizeof dir, "rgb");
    assert_err(fed_data_load_images(dir, &o, &d), FED_OK);
    assert_int_equal(d->n, N);
    assert_null(d->chan_map);
    memcpy(before, d->x_u8, sizeof before);
    for (uint32_t i = 0; i < N; i++)
        idx[i] = i;
    for (int s = 0; s < 3; s++) { /* three sites' shards, 6, 10 and 16 images */
        size_t at = s == 0 ? 0 : s == 1 ? 6 : 16, n = s == 0 ? 6 : s == 1 ? 10 : 16;

        fed_data_channel_hist(d, idx + at, n, hist);
        assert_err(fed_colstats_local_bytes(hist, C, 0, NULL, ints, NULL), FED_OK);
        for (size_t k = 0; k < NI; k++)
            tot[k] += (uint64_t)ints[k];
    }
    assert_err(fed_colstats_decode(tot, C, 0, st), FED_OK);
    for (int k = 0; k < C; k++) {
        assert_int_equal(st[k].count, N * PLANE);
        mean[k] = st[k].mean;
        sd[k] = st[k].std;
    }
    assert_true(mean[0] > 200 && mean[1] < 40 && mean[2] > 60 && mean[2] < 200);
    /* refused: another channel count, a std not over 0 */
    assert_err(fed_data_view(d, &v), FED_OK);
    assert_err(fed_data_set_channel_stats(v, mean, sd, 1), FED_ERR_SHAPE);
    sd[1] = -sd[1];
    assert_err(fed_data_set_channel_stats(v, mean, sd, C), FED_ERR_RANGE);
    sd[1] = -sd[1];
    assert_err(fed_data_set_channel_stats(v, mean, sd, C), FED_OK);
    assert_null(d->chan_map); /* the view's own */
    fed_data_gather(v, idx, N, xs, ys, &b);
    assert_ptr_equal(b.x_map, v->chan_map);
    for (int k = 0; k < C; k++) {
        long double m = 0, q = 0;

        for (int i = 0; i < N; i++)
            for (int p = 0; p < PLANE; p++) {
                size_t at = (size_t)i * F + (size_t)k * PLANE + (size_t)p;
                float t = (float)xs[at] * b.x_map[2 * k];

                mapped[at] = t + b.x_map[2 * k + 1];
                m += mapped[at];
            }
        m /= N * PLANE;
        for (int i = 0; i < N; i++)
            for (int p = 0; p < PLANE; p++) {
                long double e = mapped[(size_t)i * F + (size_t)k * PLANE + (size_t)p] - m;

                q += e * e;
            }
        if (fabsl(m) > 1e-5 || fabsl(sqrtl(q / (N * PLANE)) - 1) > 1e-5)
            fail_msg("channel %d: mapped mean %Lg, std %Lg", k, m, sqrtl(q / (N * PLANE)));
    }
    assert_memory_equal(d->x_u8, before, sizeof before); /* the bytes as they were */
    {
        fed_backend *be = NULL;
        fed_model *m = NULL;
        fed_batch bf = {.n = N, .x_f32 = mapped, .y = ys}, raw = b;
        fed_rng init;

        assert_err(fed_backend_cpu_new(1, &be), FED_OK);
        assert_err(fed_model_new("logreg", d->shape, be, NULL, 1, N, &m), FED_OK);
        fed_rng_seed(&init, 3);
        assert_err(fed_model_init(m, &init), FED_OK);
        assert_err(fed_model_logits(m, &b, la), FED_OK);
        assert_err(fed_model_logits(m, &bf, lb), FED_OK);
        assert_memory_equal(la, lb, sizeof la);
        raw.x_map = NULL; /* the input scale's map: other logits */
        assert_err(fed_model_logits(m, &raw, lb), FED_OK);
        assert_memory_not_equal(la, lb, sizeof la);
        fed_model_free(m);
        fed_backend_free(be);
    }
    /* the trainer: its noise path maps as the model does (a vanishing noise
       trains the same), augmentation runs before the map, and the map
       changes the training */
    assert_int_equal(np, 218);
    train_once(v, "none", 0, 0, pa, np);
    train_once(v, "none", 1e-30, 0, pb, np);
    assert_memory_equal(pa, pb, np * sizeof *pa);
    train_once(d, "none", 0, 0, pc, np); /* (train_once: 32 samples) */
    assert_memory_not_equal(pa, pc, np * sizeof *pa);
    train_once(v, "crop:2,flip", 0, 0, pb, np);
    assert_memory_not_equal(pa, pb, np * sizeof *pa);
    fed_data_free(v);
    fed_data_free(d);
    free(mapped);
    free(pa);
    free(pb);
    free(pc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fit_image, setup, teardown),
        cmocka_unit_test_setup_teardown(test_decode, setup, teardown),
        cmocka_unit_test_setup_teardown(test_folder_order_and_magic, setup, teardown),
        cmocka_unit_test_setup_teardown(test_folder_bad, setup, teardown),
        cmocka_unit_test_setup_teardown(test_folder_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_folder_split_and_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fashion_as_png, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trainer_augment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trainer_noise, setup, teardown),
        cmocka_unit_test_setup_teardown(test_channel_stats, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
