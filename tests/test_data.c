/* test_data.c - the data module: real Fashion-MNIST through fed_data_open,
 * the IDX reader (plain and gzip, every rejection with its exact fed_err and
 * a log line naming the input), the CSV reader (standardization checked to
 * the bit, statistics files, every rejection), the partitioners (each sample
 * used exactly once, seeding, Dirichlet skew against alpha), batch gathering,
 * and allocation-failure sweeps. Leaks are caught by `make asan`. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <dirent.h>
#include <unistd.h>
#include <zlib.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/data.h"
#include "tests/support/support.h"

/* ------------------------------------------------------------ helpers -- */

#define assert_err(got, want) assert_string_equal(fed_errname(got), fed_errname(want))

typedef struct buf {
    uint8_t *p;
    size_t n;
} buf;

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* idx3 header for (n, rows, cols) followed by data_bytes pattern bytes. */
static buf idx_images_raw(uint32_t n, uint32_t rows, uint32_t cols, size_t data_bytes)
{
    buf b;

    b.n = 16 + data_bytes;
    b.p = malloc(b.n);
    assert_non_null(b.p);
    b.p[0] = 0;
    b.p[1] = 0;
    b.p[2] = 0x08;
    b.p[3] = 3;
    put_be32(b.p + 4, n);
    put_be32(b.p + 8, rows);
    put_be32(b.p + 12, cols);
    for (size_t i = 0; i < data_bytes; i++)
        b.p[16 + i] = (uint8_t)(i * 7 + i / 13);
    return b;
}

static buf idx_images(uint32_t n, uint32_t rows, uint32_t cols)
{
    return idx_images_raw(n, rows, cols, (size_t)n * rows * cols);
}

static buf idx_labels_raw(uint32_t n, size_t data_bytes)
{
    buf b;

    b.n = 8 + data_bytes;
    b.p = malloc(b.n);
    assert_non_null(b.p);
    b.p[0] = 0;
    b.p[1] = 0;
    b.p[2] = 0x08;
    b.p[3] = 1;
    put_be32(b.p + 4, n);
    for (size_t i = 0; i < data_bytes; i++)
        b.p[8 + i] = (uint8_t)((i * 3) % 10);
    return b;
}

static buf idx_labels(uint32_t n) { return idx_labels_raw(n, n); }

static buf gz(const uint8_t *p, size_t n)
{
    z_stream zs;
    buf b;

    memset(&zs, 0, sizeof zs);
    assert_int_equal(deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 9, Z_DEFAULT_STRATEGY), Z_OK);
    b.p = malloc(deflateBound(&zs, n) + 64);
    assert_non_null(b.p);
    zs.next_in = (Bytef *)(uintptr_t)p;
    zs.avail_in = (uInt)n;
    zs.next_out = b.p;
    zs.avail_out = (uInt)(deflateBound(&zs, n) + 64);
    assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
    b.n = zs.total_out;
    deflateEnd(&zs);
    return b;
}

static buf cat(buf a, buf c)
{
    buf b;

    b.n = a.n + c.n;
    b.p = malloc(b.n);
    assert_non_null(b.p);
    memcpy(b.p, a.p, a.n);
    memcpy(b.p + a.n, c.p, c.n);
    return b;
}

static void write_file(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(p, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void write_text(const char *path, const char *s) { write_file(path, s, strlen(s)); }

static int setup(void **state)
{
    (void)state;
    fed_test_log_capture(FED_LOG_DEBUG);
    fed_log_set_level(FED_LOG_DEBUG);
    return fed_test_tmpdir_setup(state);
}

static int teardown(void **state)
{
    (void)state;
    fed_alloc_fail_nth(0, 0);
    fed_alloc_set_hook(NULL, NULL);
    fed_test_log_default();
    return fed_test_tmpdir_teardown(state);
}

/* ------------------------------------------------------ Fashion-MNIST -- */

static void test_fashion_mnist(void **state)
{
    fed_dataset *d = NULL;
    long hist[10] = { 0 };

    (void)state;
    fed_test_need_fashion(fed_test_fashion_present());
    assert_err(fed_data_open("fashion-mnist", 1, &d), FED_OK);
    assert_int_equal(d->n, 60000);
    assert_int_equal(d->shape.c, 1);
    assert_int_equal(d->shape.h, 28);
    assert_int_equal(d->shape.w, 28);
    assert_int_equal(d->shape.classes, 10);
    assert_int_equal(d->features, 784);
    assert_non_null(d->x_u8);
    assert_null(d->x_f32);
    assert_int_equal(d->y[0], 9); /* ankle boot */
    for (size_t i = 0; i < d->n; i++)
        hist[d->y[i]]++;
    for (int c = 0; c < 10; c++)
        assert_int_equal(hist[c], 6000);
    fed_data_free(d);

    memset(hist, 0, sizeof hist);
    assert_err(fed_data_open("fashion-mnist", 0, &d), FED_OK);
    assert_int_equal(d->n, 10000);
    assert_int_equal(d->shape.h, 28);
    assert_int_equal(d->shape.w, 28);
    assert_int_equal(d->shape.classes, 10);
    assert_int_equal(d->y[0], 9);
    for (size_t i = 0; i < d->n; i++)
        hist[d->y[i]]++;
    for (int c = 0; c < 10; c++)
        assert_int_equal(hist[c], 1000);
    fed_data_free(d);
}

/* Decompress a real .gz file with zlib's own gzread into a plain file. */
static void gunzip_to(const char *src, const char *dst)
{
    gzFile g = gzopen(src, "rb");
    FILE *f = fopen(dst, "wb");
    uint8_t chunk[65536];
    int r;

    assert_non_null(g);
    assert_non_null(f);
    while ((r = gzread(g, chunk, sizeof chunk)) > 0)
        assert_int_equal(fwrite(chunk, 1, (size_t)r, f), (size_t)r);
    assert_int_equal(r, 0);
    gzclose(g);
    assert_int_equal(fclose(f), 0);
}

/* The t10k split, once as the .gz files and once decompressed into a
 * directory: the same bytes and labels. */
static void test_gzip_equals_plain_real(void **state)
{
    char src[1024], dst[1024];
    const char *names[] = { "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte" };
    fed_dataset *a = NULL, *b = NULL;

    (void)state;
    snprintf(src, sizeof src, "%s/t10k-images-idx3-ubyte.gz", fed_test_data_dir());
    if (access(src, R_OK) != 0) {
        print_message("skipped: %s not found\n", src);
        skip();
    }
    for (int i = 0; i < 2; i++) {
        snprintf(src, sizeof src, "%s/%s.gz", fed_test_data_dir(), names[i]);
        fed_test_path(dst, sizeof dst, names[i]);
        gunzip_to(src, dst);
    }
    assert_err(fed_data_open(fed_test_data_dir(), 0, &a), FED_OK);
    assert_err(fed_data_open(fed_test_tmpdir(), 0, &b), FED_OK);
    assert_int_equal(a->n, b->n);
    assert_int_equal(a->features, b->features);
    assert_memory_equal(a->x_u8, b->x_u8, a->n * a->features);
    assert_memory_equal(a->y, b->y, a->n * sizeof *a->y);
    fed_data_free(a);
    fed_data_free(b);
}

/* A gzip pair is inflated once into $FEDNODE_CACHE and mapped from there
 * next time (the same bytes, not copied); a damaged copy is noticed by the strict reader,
 * ignored and written anew; FEDNODE_CACHE=off keeps nothing. */
static void test_inflated_cache(void **state)
{
    char dir[512], cmd[1200], path[1100];
    fed_dataset *a = NULL, *b = NULL, *c = NULL;
    char *saved = getenv("FEDNODE_CACHE") ? strdup(getenv("FEDNODE_CACHE")) : NULL;
    FILE *f;
    DIR *dh;
    struct dirent *de;
    int files = 0;

    (void)state;
    fed_test_need_fashion(fed_test_fashion_present());
    fed_test_path(dir, sizeof dir, "cache");
    setenv("FEDNODE_CACHE", dir, 1);
    assert_err(fed_data_open("fashion-mnist", 0, &a), FED_OK);
    assert_non_null(dh = opendir(dir));
    while ((de = readdir(dh))) {
        if (!strncmp(de->d_name, "t10k-images-idx3-ubyte-", 23))
            snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        files += de->d_name[0] != '.';
    }
    closedir(dh);
    assert_int_equal(files, 2);
    assert_err(fed_data_open("fashion-mnist", 0, &b), FED_OK);
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->x_u8, b->x_u8, a->n * a->features);
    assert_memory_equal(a->y, b->y, a->n * sizeof *a->y);
    /* inflated from the gzip: its own bytes; from the copy: mapped, the
       images read in place past the 16-byte header */
    assert_null(a->map);
    assert_non_null(b->map);
    assert_int_equal(b->map_len, 16 + b->n * b->features);
    assert_ptr_equal(b->x_u8, (uint8_t *)b->map + 16);
    fed_data_free(b); /* before the copy is cut: a mapping must not outlive its bytes */
    b = NULL;
    assert_non_null(f = fopen(path, "r+b")); /* cut the copy short */
    assert_int_equal(ftruncate(fileno(f), 1000), 0);
    fclose(f);
    assert_err(fed_data_open("fashion-mnist", 0, &c), FED_OK);
    assert_memory_equal(a->x_u8, c->x_u8, a->n * a->features);
    fed_data_free(c);
    assert_err(fed_data_open("fashion-mnist", 0, &c), FED_OK); /* from the new copy */
    assert_memory_equal(a->x_u8, c->x_u8, a->n * a->features);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    setenv("FEDNODE_CACHE", "off", 1);
    fed_data_free(c);
    assert_err(fed_data_open("fashion-mnist", 0, &c), FED_OK);
    assert_int_equal(access(dir, F_OK), -1);
    if (saved)
        setenv("FEDNODE_CACHE", saved, 1);
    else
        unsetenv("FEDNODE_CACHE");
    free(saved);
    fed_data_free(a);
    fed_data_free(b);
    fed_data_free(c);
}

/* $FEDNODE_DATA redirects "fashion-mnist"; train and t10k files are picked
 * by prefix, plain or .gz. */
static void test_open_env_and_dir(void **state)
{
    char p[1024], *saved = NULL;
    const char *old = getenv("FEDNODE_DATA");
    buf ti = idx_images(5, 2, 3), tl = idx_labels(5), vi = idx_images(3, 2, 3), vl = idx_labels(3);
    buf vig = gz(vi.p, vi.n);
    fed_dataset *d = NULL;

    (void)state;
    if (old)
        saved = strdup(old);
    fed_test_path(p, sizeof p, "train-images-idx3-ubyte");
    write_file(p, ti.p, ti.n);
    fed_test_path(p, sizeof p, "train-labels-idx1-ubyte");
    write_file(p, tl.p, tl.n);
    fed_test_path(p, sizeof p, "t10k-images-idx3-ubyte.gz");
    write_file(p, vig.p, vig.n);
    fed_test_path(p, sizeof p, "t10k-labels-idx1-ubyte");
    write_file(p, vl.p, vl.n);
    assert_int_equal(setenv("FEDNODE_DATA", fed_test_tmpdir(), 1), 0);
    assert_err(fed_data_open("fashion-mnist", 1, &d), FED_OK);
    assert_int_equal(d->n, 5);
    assert_int_equal(d->shape.h, 2);
    assert_int_equal(d->shape.w, 3);
    assert_memory_equal(d->x_u8, ti.p + 16, 30);
    fed_data_free(d);
    assert_err(fed_data_open("fashion-mnist", 0, &d), FED_OK);
    assert_int_equal(d->n, 3);
    assert_memory_equal(d->x_u8, vi.p + 16, 18);
    for (int i = 0; i < 3; i++)
        assert_int_equal(d->y[i], vl.p[8 + i]);
    fed_data_free(d);
    if (saved) {
        assert_int_equal(setenv("FEDNODE_DATA", saved, 1), 0);
        free(saved);
    } else {
        assert_int_equal(unsetenv("FEDNODE_DATA"), 0);
    }

    /* A directory without the files, and a path that is nothing. */
    fed_test_path(p, sizeof p, "empty");
    assert_int_equal(mkdir(p, 0700), 0);
    fed_test_log_reset();
    d = (fed_dataset *)1;
    assert_err(fed_data_open(p, 1, &d), FED_ERR_NOTFOUND);
    assert_null(d);
    fed_test_log_has("train-images-idx3-ubyte");
    fed_test_log_reset();
    fed_test_path(p, sizeof p, "nothing-here");
    assert_err(fed_data_open(p, 1, &d), FED_ERR_NOTFOUND);
    fed_test_log_has("nothing-here");
    free(ti.p);
    free(tl.p);
    free(vi.p);
    free(vl.p);
    free(vig.p);
}

/* ---------------------------------------------------------------- IDX -- */

static void expect_idx(buf im, buf lb, fed_err want, const char *log_needle)
{
    fed_dataset *d = (fed_dataset *)1;

    fed_test_log_reset();
    assert_err(fed_data_parse_idx(im.p, im.n, lb.p, lb.n, &d), want);
    assert_null(d);
    if (log_needle)
        fed_test_log_has(log_needle);
}

static void test_idx_parse_ok(void **state)
{
    buf im = idx_images(7, 3, 4), lb = idx_labels(7);
    fed_dataset *d = NULL;

    (void)state;
    assert_err(fed_data_parse_idx(im.p, im.n, lb.p, lb.n, &d), FED_OK);
    assert_int_equal(d->n, 7);
    assert_int_equal(d->features, 12);
    assert_int_equal(d->shape.c, 1);
    assert_int_equal(d->shape.h, 3);
    assert_int_equal(d->shape.w, 4);
    assert_int_equal(d->shape.classes, 10);
    assert_memory_equal(d->x_u8, im.p + 16, 84);
    for (int i = 0; i < 7; i++)
        assert_int_equal(d->y[i], lb.p[8 + i]);
    fed_data_free(d);
    fed_data_free(NULL);
    free(im.p);
    free(lb.p);
}

static void test_idx_rejects_plain(void **state)
{
    buf im = idx_images(4, 2, 2), lb = idx_labels(4), bad;

    (void)state;
    /* Wrong magic, in either file. */
    im.p[0] = 1;
    expect_idx(im, lb, FED_ERR_MAGIC, "<images buffer>: bad IDX magic");
    im.p[0] = 0;
    lb.p[1] = 0x08;
    expect_idx(im, lb, FED_ERR_MAGIC, "<labels buffer>: bad IDX magic");
    lb.p[1] = 0;
    /* Wrong data type and number of dimensions; files swapped. */
    im.p[2] = 0x0d; /* float */
    expect_idx(im, lb, FED_ERR_FORMAT, "data type 0x0d");
    im.p[2] = 0x08;
    im.p[3] = 2;
    expect_idx(im, lb, FED_ERR_FORMAT, "2 dimensions, want 3");
    im.p[3] = 3;
    expect_idx(lb, im, FED_ERR_FORMAT, "1 dimensions, want 3");
    /* Truncated: in the header, and in the data. */
    expect_idx((buf){ im.p, 0 }, lb, FED_ERR_TRUNCATED, "header cut");
    expect_idx((buf){ im.p, 3 }, lb, FED_ERR_TRUNCATED, "header cut");
    expect_idx((buf){ im.p, 11 }, lb, FED_ERR_TRUNCATED, "header cut at byte 11 of 16");
    expect_idx(im, (buf){ lb.p, 7 }, FED_ERR_TRUNCATED, "<labels buffer>: IDX header cut");
    expect_idx((buf){ im.p, im.n - 1 }, lb, FED_ERR_TRUNCATED, "15 of 16 bytes");
    expect_idx(im, (buf){ lb.p, lb.n - 1 }, FED_ERR_TRUNCATED, "3 of 4 bytes");
    /* Trailing garbage. */
    bad = idx_images_raw(4, 2, 2, 17);
    expect_idx(bad, lb, FED_ERR_FORMAT, "1 bytes of trailing garbage");
    free(bad.p);
    bad = idx_labels_raw(4, 5);
    expect_idx(im, bad, FED_ERR_FORMAT, "<labels buffer>: 1 bytes of trailing garbage");
    free(bad.p);
    /* Counts that disagree; no samples; an empty image. */
    bad = idx_labels(5);
    expect_idx(im, bad, FED_ERR_SHAPE, "5 labels for 4 images");
    free(bad.p);
    bad = idx_images_raw(0, 2, 2, 0);
    expect_idx(bad, lb, FED_ERR_FORMAT, "no samples");
    free(bad.p);
    bad = idx_images_raw(4, 0, 2, 0);
    expect_idx(bad, lb, FED_ERR_FORMAT, "empty");
    free(bad.p);
    /* A label outside [0, 10). */
    lb.p[8 + 2] = 10;
    expect_idx(im, lb, FED_ERR_RANGE, "label 10 of sample 2");
    lb.p[8 + 2] = 255;
    expect_idx(im, lb, FED_ERR_RANGE, "label 255 of sample 2");
    free(im.p);
    free(lb.p);
}

/* Largest allocation seen, through the allocation hook. */
static size_t g_max_alloc;

static int track_max(void *ctx, size_t size)
{
    (void)ctx;
    if (size > g_max_alloc)
        g_max_alloc = size;
    return 0;
}

static void test_idx_rejects_oversized(void **state)
{
    buf lb = idx_labels(4), bad;

    (void)state;
    fed_alloc_set_hook(track_max, NULL);
    g_max_alloc = 0;
    /* Header sizes over the limits, refused before any allocation. */
    bad = idx_images_raw(FED_DATA_MAX_SAMPLES + 1, 1, 1, 0);
    expect_idx(bad, lb, FED_ERR_TOO_LARGE, "over the limit");
    free(bad.p);
    bad = idx_images_raw(4, 1025, 1024, 0);
    expect_idx(bad, lb, FED_ERR_TOO_LARGE, "1025x1024 is over the limit");
    free(bad.p);
    bad = idx_images_raw(FED_DATA_MAX_SAMPLES, 1024, 1024, 0);
    expect_idx(bad, lb, FED_ERR_TOO_LARGE, "bytes");
    free(bad.p);
    bad = idx_labels_raw(0xffffffffu, 4);
    {
        buf im = idx_images(4, 2, 2);

        expect_idx(im, bad, FED_ERR_TOO_LARGE, "<labels buffer>: 4294967295 samples");
        free(im.p);
    }
    free(bad.p);
    /* A plausible header with far too little data behind it: truncated,
     * and nothing of the claimed size is allocated. */
    bad = idx_images_raw(60000, 28, 28, 100);
    put_be32(lb.p + 4, 60000);
    expect_idx(bad, lb, FED_ERR_TRUNCATED, "of 47040000 bytes");
    {
        buf g = gz(bad.p, bad.n);

        expect_idx(g, lb, FED_ERR_TRUNCATED, "cannot hold");
        free(g.p);
    }
    assert_true(g_max_alloc < 1000000);
    fed_alloc_set_hook(NULL, NULL);
    free(bad.p);
    free(lb.p);
}

static void test_idx_gzip(void **state)
{
    buf im = idx_images(50, 8, 9), lb = idx_labels(50);
    buf gi = gz(im.p, im.n), gl = gz(lb.p, lb.n), bad, tail;
    fed_dataset *a = NULL, *b = NULL;

    (void)state;
    /* gzip and plain give the same bytes, in any combination. */
    assert_err(fed_data_parse_idx(im.p, im.n, lb.p, lb.n, &a), FED_OK);
    assert_err(fed_data_parse_idx(gi.p, gi.n, gl.p, gl.n, &b), FED_OK);
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->x_u8, b->x_u8, 50 * 72);
    assert_memory_equal(a->y, b->y, 50 * sizeof(int32_t));
    fed_data_free(b);
    assert_err(fed_data_parse_idx(gi.p, gi.n, lb.p, lb.n, &b), FED_OK);
    assert_memory_equal(a->x_u8, b->x_u8, 50 * 72);
    fed_data_free(b);
    /* Two gzip members (`cat a.gz b.gz`) read as one stream. */
    {
        buf h1 = gz(im.p, 1000), h2 = gz(im.p + 1000, im.n - 1000), two = cat(h1, h2);

        assert_err(fed_data_parse_idx(two.p, two.n, gl.p, gl.n, &b), FED_OK);
        assert_memory_equal(a->x_u8, b->x_u8, 50 * 72);
        fed_data_free(b);
        free(h1.p);
        free(h2.p);
        free(two.p);
    }
    fed_data_free(a);

    /* Truncated gzip: cut in the deflate data, cut in the trailer. */
    expect_idx((buf){ gi.p, gi.n / 2 }, gl, FED_ERR_TRUNCATED, "<images buffer>: gzip stream ends");
    expect_idx((buf){ gi.p, gi.n - 4 }, gl, FED_ERR_TRUNCATED, "gzip stream ends early");
    expect_idx((buf){ gi.p, 12 }, gl, FED_ERR_TRUNCATED, "<images buffer>");
    /* Corrupt CRC in the trailer. */
    bad.n = gi.n;
    bad.p = malloc(bad.n);
    memcpy(bad.p, gi.p, gi.n);
    bad.p[gi.n - 8] ^= 0x55;
    expect_idx(bad, gl, FED_ERR_FORMAT, "corrupt gzip data");
    free(bad.p);
    /* Garbage after the gzip stream. */
    tail = (buf){ (uint8_t *)"xyz", 3 };
    bad = cat(gi, tail);
    expect_idx(bad, gl, FED_ERR_FORMAT, "3 bytes of trailing garbage after the gzip data");
    free(bad.p);
    /* Well-formed gzip around a payload one byte too long or short. */
    {
        buf longer = idx_images_raw(50, 8, 9, 50 * 72 + 1), g = gz(longer.p, longer.n);

        expect_idx(g, gl, FED_ERR_FORMAT, "trailing garbage after 3600 data bytes");
        free(longer.p);
        free(g.p);
        longer = idx_images_raw(50, 8, 9, 50 * 72 - 1);
        g = gz(longer.p, longer.n);
        expect_idx(g, gl, FED_ERR_TRUNCATED, "3599 of 3600 bytes");
        free(longer.p);
        free(g.p);
    }
    /* A gzip bomb behind a one-sample header: refused after one extra byte. */
    {
        buf big = idx_images_raw(1, 1, 1, 20u << 20), g, one = idx_labels(1);

        memset(big.p + 16, 0, 20u << 20);
        g = gz(big.p, big.n);
        assert_true(g.n < 100000);
        expect_idx(g, one, FED_ERR_FORMAT, "trailing garbage after 1 data bytes");
        free(one.p);
        free(big.p);
        free(g.p);
    }
    /* Wrong magic inside the gzip. */
    im.p[1] = 9;
    bad = gz(im.p, im.n);
    expect_idx(bad, gl, FED_ERR_MAGIC, "bad IDX magic 00 09");
    free(bad.p);
    free(im.p);
    free(lb.p);
    free(gi.p);
    free(gl.p);
}

/* Files: errors name the path. */
static void test_idx_files(void **state)
{
    char ip[1024], lp[1024], gp[1024];
    buf im = idx_images(6, 4, 4), lb = idx_labels(6), g;
    fed_dataset *a = NULL, *b = NULL;

    (void)state;
    fed_test_path(ip, sizeof ip, "imgs");
    fed_test_path(lp, sizeof lp, "labs");
    fed_test_path(gp, sizeof gp, "imgs.gz");
    write_file(ip, im.p, im.n);
    write_file(lp, lb.p, lb.n);
    g = gz(im.p, im.n);
    write_file(gp, g.p, g.n);
    assert_err(fed_data_load_idx(ip, lp, &a), FED_OK);
    assert_err(fed_data_load_idx(gp, lp, &b), FED_OK);
    assert_memory_equal(a->x_u8, b->x_u8, 6 * 16);
    fed_data_free(a);
    fed_data_free(b);
    write_file(ip, im.p, im.n - 3);
    fed_test_log_reset();
    a = (fed_dataset *)1;
    assert_err(fed_data_load_idx(ip, lp, &a), FED_ERR_TRUNCATED);
    assert_null(a);
    fed_test_log_has(ip);
    fed_test_log_has("93 of 96 bytes");
    fed_test_log_reset();
    assert_err(fed_data_load_idx(ip, "/nonexistent/labels", &a), FED_ERR_NOTFOUND);
    fed_test_log_has("/nonexistent/labels: cannot open");
    fed_test_log_reset();
    assert_err(fed_data_load_idx(fed_test_tmpdir(), lp, &a), FED_ERR_IO);
    fed_test_log_has("not a regular file");
    /* the whole-file reader's size limit, checked before reading */
    {
        uint8_t *fb = (uint8_t *)1;
        size_t fl = 5;

        fed_test_log_reset();
        assert_err(fed_data_read_file(lp, 13, &fb, &fl), FED_ERR_TOO_LARGE);
        assert_null(fb);
        assert_int_equal(fl, 0);
        fed_test_log_has("file of 14 bytes is over the limit of 13");
        assert_err(fed_data_read_file(lp, 14, &fb, &fl), FED_OK);
        assert_int_equal(fl, 14);
        assert_int_equal(fb[14], 0);
        assert_memory_equal(fb, lb.p, 14);
        fed_free(fb);
    }
    free(im.p);
    free(lb.p);
    free(g.p);
}

/* Files larger than the reader's window (data.c reads 256 KiB at a time):
 * plain, and gzip as two members whose boundary falls one byte before and
 * exactly at the window's end, give what the same bytes give from memory;
 * a cut gzip file is TRUNCATED and bytes after it are FORMAT. */
#define DATA_WINDOW (256u << 10)

static void test_idx_files_windowed(void **state)
{
    const uint32_t n = 600, side = 28; /* 470,400 image bytes: about two windows */
    buf im = idx_images(n, side, side), lb = idx_labels(n);
    char ip[1024], lp[1024];
    fed_dataset *ref = NULL, *d = NULL;
    uint64_t x = 88172645463325252ull;

    (void)state;
    for (size_t i = 16; i < im.n; i++) { /* incompressible: the gzip is as long */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        im.p[i] = (uint8_t)x;
    }
    fed_test_path(ip, sizeof ip, "big");
    fed_test_path(lp, sizeof lp, "big-labels");
    write_file(lp, lb.p, lb.n);
    assert_err(fed_data_parse_idx(im.p, im.n, lb.p, lb.n, &ref), FED_OK);
    write_file(ip, im.p, im.n);
    assert_err(fed_data_load_idx(ip, lp, &d), FED_OK);
    assert_memory_equal(d->x_u8, ref->x_u8, (size_t)n * side * side);
    fed_data_free(d);
    for (uint32_t end = DATA_WINDOW - 1; end <= DATA_WINDOW; end++) {
        /* the first member's length k such that its gzip ends at `end` */
        size_t k = end;
        buf a, c, two;

        for (;;) {
            a = gz(im.p, k);
            if (a.n <= end)
                break;
            k -= a.n - end;
            free(a.p);
        }
        while (a.n < end) { /* stored blocks: one more input byte, one more output byte */
            free(a.p);
            a = gz(im.p, ++k);
        }
        assert_int_equal(a.n, end);
        c = gz(im.p + k, im.n - k);
        two = cat(a, c);
        write_file(ip, two.p, two.n);
        d = NULL;
        assert_err(fed_data_load_idx(ip, lp, &d), FED_OK);
        assert_memory_equal(d->x_u8, ref->x_u8, (size_t)n * side * side);
        fed_data_free(d);
        if (end == DATA_WINDOW) {
            fed_test_log_reset();
            write_file(ip, two.p, two.n - 100);
            assert_err(fed_data_load_idx(ip, lp, &d), FED_ERR_TRUNCATED);
            assert_null(d);
            fed_test_log_has(ip);
            {
                uint8_t xy[2] = {'x', 'y'};
                buf g = cat(two, (buf){xy, sizeof xy});

                write_file(ip, g.p, g.n);
                fed_test_log_reset();
                assert_err(fed_data_load_idx(ip, lp, &d), FED_ERR_FORMAT);
                assert_null(d);
                fed_test_log_has("2 bytes of trailing garbage");
                free(g.p);
            }
        }
        free(a.p);
        free(c.p);
        free(two.p);
    }
    fed_data_free(ref);
    free(im.p);
    free(lb.p);
}

/* The sweeps' attempts (fed_test_alloc_sweep): a dataset made is freed, a
 * failure must leave none. */
typedef struct sweep {
    buf gi, gl;
    const char *ip, *lp, *text;
    const fed_csv_opts *o;
    const fed_dataset *d;
    const char *scheme;
} sweep;

static fed_err made(fed_err e, fed_dataset *d)
{
    if (e == FED_OK)
        fed_data_free(d);
    else
        assert_null(d);
    return e;
}

static fed_err try_parse_idx(void *ctx)
{
    const sweep *s = ctx;
    fed_dataset *d = (fed_dataset *)1;
    fed_err e = fed_data_parse_idx(s->gi.p, s->gi.n, s->gl.p, s->gl.n, &d);

    return made(e, d);
}

static fed_err try_load_idx(void *ctx)
{
    const sweep *s = ctx;
    fed_dataset *d = (fed_dataset *)1;
    fed_err e = fed_data_load_idx(s->ip, s->lp, &d);

    return made(e, d);
}

static fed_err try_parse_csv(void *ctx)
{
    const sweep *s = ctx;
    fed_dataset *d = (fed_dataset *)1;
    fed_err e = fed_data_parse_csv(s->text, strlen(s->text), s->o, &d);

    return made(e, d);
}

static fed_err try_partition(void *ctx)
{
    const sweep *s = ctx;
    uint32_t *idx = (uint32_t *)1;
    size_t cnt = 9;
    fed_err e = fed_data_partition(s->d, s->scheme, 1, 4, 3, &idx, &cnt);

    if (e == FED_OK) {
        fed_free(idx);
    } else {
        assert_null(idx);
        assert_int_equal(cnt, 0);
    }
    return e;
}

/* Every allocation of the parser (zlib's included) failed in turn: each
 * gives FED_ERR_NOMEM and no dataset; ASan proves nothing leaks. */
static void test_idx_alloc_sweep(void **state)
{
    buf im = idx_images(20, 5, 5), lb = idx_labels(20);
    char ip[1024], lp[1024];
    sweep s = {.gi = gz(im.p, im.n), .gl = gz(lb.p, lb.n), .ip = ip, .lp = lp};

    (void)state;
    fed_test_path(ip, sizeof ip, "i.gz");
    fed_test_path(lp, sizeof lp, "l");
    write_file(ip, s.gi.p, s.gi.n);
    write_file(lp, lb.p, lb.n);
    for (int sticky = 0; sticky < 2; sticky++) {
        /* datasets, zlib state and window failed */
        assert_true(fed_test_alloc_sweep(try_parse_idx, &s, sticky, 200) > 4);
        assert_true(fed_test_alloc_sweep(try_load_idx, &s, sticky, 200) > 4);
    }
    free(im.p);
    free(lb.p);
    free(s.gi.p);
    free(s.gl.p);
}

/* ---------------------------------------------------------------- CSV -- */

static fed_dataset *csv_ok(const char *text, const fed_csv_opts *opts)
{
    fed_dataset *d = NULL;

    fed_test_log_reset();
    assert_err(fed_data_parse_csv(text, strlen(text), opts, &d), FED_OK);
    assert_non_null(d);
    return d;
}

static void expect_csv(const char *text, fed_err want, const char *log_needle)
{
    fed_dataset *d = (fed_dataset *)1;

    fed_test_log_reset();
    assert_err(fed_data_parse_csv(text, strlen(text), NULL, &d), want);
    assert_null(d);
    if (log_needle)
        fed_test_log_has(log_needle);
}

static float stdz(double x, double mean, double sd) { return (float)((x - mean) / sd); }

static void test_csv_standardization(void **state)
{
    /* a: 1 2 3 6 (mean 3, var (4+1+0+9)/4 = 3.5); b constant (std 0 -> 1);
     * c: -0.5 0.25 1e3 7 */
    const char *text = "a,label,b,c\n"
                       "1,0,5,-0.5\n"
                       "2,1,5,0.25\n"
                       "3,2,5,1e3\n"
                       "6,1,5,7\n";
    double cm = (-0.5 + 0.25 + 1e3 + 7) / 4, cv = 0, cs;
    const double cx[4] = { -0.5, 0.25, 1e3, 7 };
    fed_dataset *d = csv_ok(text, NULL);

    (void)state;
    for (int i = 0; i < 4; i++)
        cv += (cx[i] - cm) * (cx[i] - cm);
    cs = sqrt(cv / 4);
    assert_int_equal(d->n, 4);
    assert_int_equal(d->features, 3);
    assert_int_equal(d->shape.c, 1);
    assert_int_equal(d->shape.h, 1);
    assert_int_equal(d->shape.w, 3);
    assert_int_equal(d->shape.classes, 3);
    assert_null(d->x_u8);
    assert_non_null(d->x_f32);
    assert_int_equal(d->y[0], 0);
    assert_int_equal(d->y[1], 1);
    assert_int_equal(d->y[2], 2);
    assert_int_equal(d->y[3], 1);
    assert_true(d->x_f32[0 * 3 + 0] == stdz(1, 3, sqrt(3.5)));
    assert_true(d->x_f32[3 * 3 + 0] == stdz(6, 3, sqrt(3.5)));
    for (int i = 0; i < 4; i++) {
        assert_true(d->x_f32[i * 3 + 1] == 0.0f);
        assert_true(d->x_f32[i * 3 + 2] == stdz(cx[i], cm, cs));
    }
    /* exact figures: (1 - 3) / sqrt(3.5) */
    assert_true(fabs(d->x_f32[0] - -1.0690449676496976) < 1e-7);
    fed_data_free(d);

    /* A constant column with an inexact mean standardizes to ~0, not to
     * rounding noise blown up to +-1. */
    d = csv_ok("a,label\n0.1,0\n0.1,0\n0.1,0\n", NULL);
    for (int i = 0; i < 3; i++)
        assert_true(fabsf(d->x_f32[i]) < 1e-6f);
    fed_data_free(d);

    /* CRLF, no final newline, blanks around fields, another label name. */
    {
        fed_csv_opts o = { .label_column = "y" };

        d = csv_ok(" x , y \r\n 1.5 , 3 \r\n2.5,0", &o);
        assert_int_equal(d->n, 2);
        assert_int_equal(d->features, 1);
        assert_int_equal(d->shape.classes, 4);
        assert_int_equal(d->y[0], 3);
        assert_true(d->x_f32[0] == -1.0f && d->x_f32[1] == 1.0f);
        fed_data_free(d);
    }
}

static void test_csv_rejects(void **state)
{
    char *wide;
    size_t cols = (size_t)FED_DATA_MAX_FEATURES + 2;

    (void)state;
    expect_csv("a,label\n1,0\n2,x\n", FED_ERR_NOT_NUMERIC, "<csv buffer>:3: column 2");
    expect_csv("a,label\n1,0\nabc,1\n", FED_ERR_NOT_NUMERIC, ":3: column 1: not a number: 'abc'");
    expect_csv("a,label\n1x,0\n", FED_ERR_NOT_NUMERIC, ":2: column 1: not a number: '1x'");
    expect_csv("a,label\n1 2,0\n", FED_ERR_NOT_NUMERIC, ":2: column 1");
    expect_csv("a,label\nnan,0\n", FED_ERR_NAN, ":2: column 1: NaN or infinity");
    expect_csv("a,label\n-inf,0\n", FED_ERR_NAN, ":2: column 1");
    expect_csv("a,label\n1e999,0\n", FED_ERR_RANGE, "overflows");
    expect_csv("a,label\n1e308,0\n-1e308,1\n", FED_ERR_RANGE,
               "<csv buffer>:2: feature 1: 1e+308 does not standardize to a finite float");
    expect_csv("a,label\n\"1\",0\n", FED_ERR_FORMAT, "quoted");
    expect_csv("\"a\",label\n1,0\n", FED_ERR_FORMAT, "<csv buffer>:1: column 1: quoted");
    expect_csv("a,b,label\n1,2,0\n1,2\n", FED_ERR_FORMAT, ":3: 2 fields, the header has 3");
    expect_csv("a,b,label\n1,2,0\n1,2,0,4\n", FED_ERR_FORMAT, ":3: column 4: more fields");
    expect_csv("a,b,label\n1,2,0\n1,2,", FED_ERR_NOT_NUMERIC, ":3: column 3: empty label");
    expect_csv("a,b,label\n1,2,0\n1,2,NA", FED_ERR_NOT_NUMERIC, ":3: column 3: label is not");
    /* Without --categorical a word is refused as before. */
    expect_csv("a,b,label\n1,Paris,0\n", FED_ERR_NOT_NUMERIC, ":2: column 2: not a number");
    expect_csv("a,label\n1,0\n\n2,1\n", FED_ERR_FORMAT, ":3: empty line");
    expect_csv("a,label\n1,-1\n", FED_ERR_RANGE, "negative label");
    expect_csv("a,label\n1,256\n", FED_ERR_RANGE, "label over 255");
    expect_csv("a,label\n1,99999999999999999999\n", FED_ERR_RANGE, "label over 255");
    expect_csv("a,label\n1,1.5\n", FED_ERR_NOT_NUMERIC, "not a non-negative integer");
    expect_csv("a,label\n1,+1\n", FED_ERR_NOT_NUMERIC, ":2: column 2");
    expect_csv("a,b\n1,0\n", FED_ERR_NOTFOUND, "no column named 'label'");
    expect_csv("label,a,label\n1,0,1\n", FED_ERR_FORMAT, "appears twice");
    /* A feature's name twice would make --categorical NAME ambiguous: the
     * first name met again is refused with both its columns. */
    expect_csv("a,a,label\n1,2,0\n", FED_ERR_FORMAT,
               "<csv buffer>:1: column 2: column name 'a' appears twice: columns 1 and 2");
    expect_csv("a,b,c,b,a,label\n1,2,3,4,5,0\n", FED_ERR_FORMAT,
               ":1: column 4: column name 'b' appears twice: columns 2 and 4");
    expect_csv(" x ,y,x\t,label\n1,2,3,0\n", FED_ERR_FORMAT, /* blanks trimmed, as read */
               ":1: column 3: column name 'x' appears twice: columns 1 and 3");
    {
        fed_csv_opts o = { .categorical = "a" };
        fed_dataset *d = (fed_dataset *)1;
        const char *t = "a,a,label\nx,1,0\n";

        fed_test_log_reset();
        assert_err(fed_data_parse_csv(t, strlen(t), &o, &d), FED_ERR_FORMAT);
        assert_null(d);
        fed_test_log_has("column name 'a' appears twice: columns 1 and 2");
    }
    /* names that share a prefix are distinct */
    fed_data_free(csv_ok("a,ab,b,label\n1,2,3,0\n4,5,6,1\n", NULL));
    expect_csv("a,,label\n1,2,0\n", FED_ERR_FORMAT, ":1: column 2: empty column name");
    expect_csv("label\n1\n", FED_ERR_FORMAT, "no feature columns");
    expect_csv("a,label\n", FED_ERR_TRUNCATED, "no data rows");
    expect_csv("", FED_ERR_TRUNCATED, "empty file");
    expect_csv("\n1,0\n", FED_ERR_FORMAT, "empty header");
    /* The buffer is read only up to len. */
    {
        fed_dataset *d = (fed_dataset *)1;
        const char t[] = "a,label\n1,0\n2,1\n7";

        assert_err(fed_data_parse_csv(t, sizeof t - 2, NULL, &d), FED_OK);
        assert_int_equal(d->n, 2);
        fed_data_free(d);
        fed_test_log_reset();
        assert_err(fed_data_parse_csv(t, sizeof t - 1, NULL, &d), FED_ERR_FORMAT);
        fed_test_log_has(":4: 1 fields, the header has 2");
        assert_null(d);
    }
    /* Too many columns: refused while reading the header. */
    wide = malloc(cols * 2 + 16);
    assert_non_null(wide);
    for (size_t i = 0; i < cols; i++)
        memcpy(wide + 2 * i, "a,", 2);
    strcpy(wide + 2 * cols, "label\n");
    expect_csv(wide, FED_ERR_TOO_LARGE, "more than 1048576 feature columns");
    free(wide);
}

/* --augment: the spec's forms; each sample shifted by (dx, dy) in [-P, P]
 * with zeros shifted in and mirrored half the time, from the rng alone. */
static void test_augment(void **state)
{
    fed_data_aug a;
    fed_model_shape s = { 2, 3, 4, 10 , 0};
    uint8_t x[8 * 24], orig[8 * 24], scratch[24];
    fed_rng r, q;
    int seen[3][3] = { { 0 } }, flips = 0;

    (void)state;
    assert_err(fed_data_parse_augment("none", &a), FED_OK);
    assert_int_equal(a.crop + a.flip, 0);
    assert_err(fed_data_parse_augment("", &a), FED_OK);
    assert_err(fed_data_parse_augment("crop:4,flip", &a), FED_OK);
    assert_int_equal(a.crop, 4);
    assert_int_equal(a.flip, 1);
    assert_err(fed_data_parse_augment("flip", &a), FED_OK);
    assert_int_equal(a.crop, 0);
    assert_int_equal(a.flip, 1);
    fed_test_log_reset();
    assert_err(fed_data_parse_augment("crop:0", &a), FED_ERR_BAD_VALUE);
    fed_test_log_has("--augment: 'crop:0': crop:P wants P from 1 to 64");
    assert_err(fed_data_parse_augment("crop:65", &a), FED_ERR_BAD_VALUE);
    assert_err(fed_data_parse_augment("crop:4x", &a), FED_ERR_BAD_VALUE);
    assert_err(fed_data_parse_augment("flip,flip", &a), FED_ERR_BAD_VALUE);
    assert_err(fed_data_parse_augment("flip,", &a), FED_ERR_BAD_VALUE);
    assert_err(fed_data_parse_augment("rotate", &a), FED_ERR_BAD_VALUE);
    fed_test_log_has("'rotate': want none, crop:P, flip or crop:P,flip");

    /* crop:1,flip on 2x3x4 samples, checked pixel by pixel against the
     * draws replayed from a copy of the rng */
    a.crop = 1;
    a.flip = 1;
    for (size_t i = 0; i < sizeof x; i++)
        orig[i] = (uint8_t)(1 + i % 24 + 30 * (i / 24));
    for (int round = 0; round < 40; round++) {
        memcpy(x, orig, sizeof x);
        fed_rng_seed_stream(&r, 7, (uint64_t)round);
        q = r;
        fed_data_augment(&a, &r, &s, x, 8, scratch);
        for (int i = 0; i < 8; i++) {
            int dx = (int)fed_rng_below(&q, 3) - 1, dy = (int)fed_rng_below(&q, 3) - 1;
            int flip = (int)(fed_rng_u32(&q) & 1);

            seen[dy + 1][dx + 1]++;
            flips += flip;
            for (int c = 0; c < 2; c++)
                for (int y = 0; y < 3; y++)
                    for (int xx = 0; xx < 4; xx++) {
                        int sy = y + dy, sx = (flip ? 3 - xx : xx) + dx;
                        uint8_t want = sy < 0 || sy > 2 || sx < 0 || sx > 3
                                           ? 0
                                           : orig[i * 24 + c * 12 + sy * 4 + sx];

                        assert_int_equal(x[i * 24 + c * 12 + y * 4 + xx], want);
                    }
        }
        assert_memory_equal(&r, &q, sizeof r); /* the same draws, no more */
    }
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            assert_true(seen[i][j] > 10); /* every shift happens (320 draws) */
    assert_true(flips > 100 && flips < 220);
    /* none: untouched */
    a.crop = a.flip = 0;
    memcpy(x, orig, sizeof x);
    fed_data_augment(&a, &r, &s, x, 8, scratch);
    assert_memory_equal(x, orig, sizeof x);
}

/* -------------------------------------- CSV: words, gaps and bad rows -- */

static fed_dataset *csv_with(const char *text, const fed_csv_opts *o, fed_err want)
{
    fed_dataset *d = (fed_dataset *)1;

    fed_test_log_reset();
    assert_err(fed_data_parse_csv(text, strlen(text), o, &d), want);
    if (want != FED_OK)
        assert_null(d);
    return d;
}

/* SipHash-2-4 against the paper's vectors (key 00..0f, messages 00..). */
static void test_siphash_vectors(void **state)
{
    uint8_t key[16], msg[64];

    (void)state;
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++)
        msg[i] = (uint8_t)i;
    assert_true(fed_data_siphash(key, msg, 0) == 0x726fdb47dd0e0e31ull);
    assert_true(fed_data_siphash(key, msg, 15) == 0xa129ca6149be45e5ull);
    assert_true(fed_data_siphash(key, msg, 8) == 0x93f5f5799a932462ull);
}

/* Empty and NA cells are missing: a numeric one is filled with the mean of
 * its column's present values, and counted. */
static void test_csv_missing(void **state)
{
    const char *t = "a,b,label\n1,,0\n3,2,1\n5,6,0\n7,NA,1\n";
    fed_dataset *d;
    double sb = sqrt(2.0), sa = sqrt(5.0);

    (void)state;
    d = csv_with(t, NULL, FED_OK);
    assert_int_equal(d->n, 4);
    assert_int_equal(d->missing, 2);
    assert_int_equal(d->skipped, 0);
    assert_null(d->categorical);
    /* b = 4 (filled), 2, 6, 4: mean 4, std sqrt(2) */
    assert_true(d->x_f32[1] == 0.0f);
    assert_true(d->x_f32[3] == stdz(2, 4, sb));
    assert_true(d->x_f32[5] == stdz(6, 4, sb));
    assert_true(d->x_f32[7] == 0.0f);
    assert_true(d->x_f32[0] == stdz(1, 4, sa));
    fed_test_log_has("2 empty or NA cells filled");
    fed_data_free(d);
    /* The hook for shared statistics: fill values given. */
    {
        double fill[2] = { 0, 10 };
        fed_csv_opts o = { .fill = fill };

        d = csv_with(t, &o, FED_OK);
        /* b = 10, 2, 6, 10: mean 7, std sqrt(11) */
        assert_true(d->x_f32[1] == stdz(10, 7, sqrt(11.0)));
        assert_true(d->x_f32[3] == stdz(2, 7, sqrt(11.0)));
        fed_data_free(d);
    }
}

static double bucket(const char *s, int n)
{
    return (double)(1 + fed_data_siphash((const uint8_t *)FED_CSV_HASH_KEY, s, strlen(s)) %
                            (uint64_t)(n - 1));
}

static void test_csv_categorical(void **state)
{
    const char *t = "city,age,label\nParis,30,0\nLyon,40,1\n,50,0\nParis,NA,1\n";
    fed_csv_opts o = { .categorical = "city", .hash_buckets = 16 };
    fed_dataset *d;
    double sd = sqrt(50.0);

    (void)state;
    d = csv_with(t, &o, FED_OK);
    assert_int_equal(d->n, 4);
    assert_int_equal(d->features, 2);
    assert_non_null(d->categorical);
    assert_int_equal(d->categorical[0], 1);
    assert_int_equal(d->categorical[1], 0);
    assert_int_equal(d->hash_buckets, 16);
    assert_int_equal(d->missing, 2);
    /* ids, not standardized; the missing city is bucket 0 */
    assert_true(d->x_f32[0] == (float)bucket("Paris", 16));
    assert_true(d->x_f32[2] == (float)bucket("Lyon", 16));
    assert_true(d->x_f32[4] == 0.0f);
    assert_true(d->x_f32[6] == d->x_f32[0]);
    assert_true(d->x_f32[0] >= 1 && d->x_f32[0] < 16);
    /* age: 30, 40, 50, 40 (filled) */
    assert_true(d->x_f32[1] == stdz(30, 40, sd));
    assert_true(d->x_f32[7] == 0.0f);
    fed_data_free(d);

    /* auto: the column is found and reported; the same ids */
    o.categorical = "auto";
    d = csv_with(t, &o, FED_OK);
    fed_test_log_has("<csv buffer>:2: column 1 is categorical ('Paris' is not a number)");
    assert_int_equal(fed_test_log_count("is categorical", ""), 1);
    assert_int_equal(d->categorical[0], 1);
    assert_int_equal(d->categorical[1], 0);
    assert_true(d->x_f32[0] == (float)bucket("Paris", 16));
    fed_data_free(d);
    /* auto with nothing to find: no categorical column */
    d = csv_with("a,label\n1,0\n2,1\n", &o, FED_OK);
    assert_null(d->categorical);
    fed_data_free(d);

    o.categorical = "town";
    csv_with(t, &o, FED_ERR_NOTFOUND);
    fed_test_log_has("no column named 'town' (--categorical)");
    o.categorical = "label";
    csv_with(t, &o, FED_ERR_BAD_VALUE);
    fed_test_log_has("the label column cannot be categorical");
    o.categorical = "city";
    o.hash_buckets = 1;
    csv_with(t, &o, FED_ERR_BAD_VALUE);
    fed_test_log_has("--hash-buckets 1: want 2..");
    /* a word in a column not named stays an error */
    o.hash_buckets = 16;
    csv_with("city,age,label\nParis,old,0\n", &o, FED_ERR_NOT_NUMERIC);
    fed_test_log_has(":2: column 2: not a number: 'old'");
}

/* --task regression: the label column's numbers as float targets (not
 * standardized), classes 1, labels 0; a subset and a gathered batch carry
 * them; a label that is not a number refused by line and column. */
static void test_csv_regression(void **state)
{
    const char *t = "x,label\n1,2.5\n2,-0.125\n3,1e3\n";
    fed_csv_opts o = { .regression = 1 };
    fed_dataset *d, *s = NULL;
    uint32_t idx[2] = {2, 0};
    float xs[2];
    int32_t ys[2];
    fed_batch b;

    (void)state;
    d = csv_with(t, &o, FED_OK);
    assert_non_null(d->y_f32);
    assert_int_equal(d->shape.classes, 1);
    assert_true(d->y_f32[0] == 2.5f && d->y_f32[1] == -0.125f && d->y_f32[2] == 1000.0f);
    assert_int_equal(d->y[2], 0);
    assert_err(fed_data_subset(d, idx, 2, &s), FED_OK);
    assert_true(s->y_f32[0] == 1000.0f && s->y_f32[1] == 2.5f);
    fed_data_gather(d, idx, 2, xs, ys, &b);
    assert_null(b.y);
    assert_non_null(b.y_f32);
    assert_true(b.y_f32[0] == 1000.0f && b.y_f32[1] == 2.5f);
    fed_data_free(s);
    fed_data_free(d);
    csv_with("x,label\n1,2.5\n2,high\n", &o, FED_ERR_NOT_NUMERIC);
    fed_test_log_has(":3: column 2: not a number: 'high'");
    csv_with("x,label\n1,1e39\n", &o, FED_ERR_RANGE);
    fed_test_log_has(":2: column 2: target overflows a float: '1e39'");
    /* without it a number is no class */
    o.regression = 0;
    csv_with("x,label\n1,2.5\n", &o, FED_ERR_NOT_NUMERIC);
}

/* tr = DIR/NAME.csv holding train, te = DIR/NAME.test.csv holding test
 * (each of cap bytes; test NULL: not written). */
static void write_csv_pair(char *tr, char *te, size_t cap, const char *name, const char *train,
                           const char *test)
{
    char base[256];

    snprintf(base, sizeof base, "%s.csv", name);
    fed_test_path(tr, cap, base);
    snprintf(base, sizeof base, "%s.test.csv", name);
    fed_test_path(te, cap, base);
    write_text(tr, train);
    if (test)
        write_text(te, test);
}

/* The test file takes the training file's categorical columns. */
static void test_csv_categorical_split(void **state)
{
    char tr[1024], te[1024];
    fed_csv_opts o = { .categorical = "auto", .hash_buckets = 8 };
    fed_dataset *d = NULL;

    (void)state;
    write_csv_pair(tr, te, sizeof tr, "c", "k,v,label\nx,1,0\ny,2,1\n",
                   "k,v,label\n7,1,0\n,3,1\n");
    assert_err(fed_data_open_csv(te, 1, &o, &d), FED_OK); /* alone: nothing categorical */
    assert_null(d->categorical);
    fed_data_free(d);
    assert_err(fed_data_open_csv(tr, 0, &o, &d), FED_OK);
    assert_non_null(d->categorical);
    assert_int_equal(d->categorical[0], 1);
    assert_true(d->x_f32[0] == (float)bucket("7", 8));
    assert_true(d->x_f32[2] == 0.0f);
    assert_int_equal(d->missing, 1);
    fed_data_free(d);
    /* a test file wider than the training file: refused by its header before
       the training file's categorical mask (one entry a training feature) is
       read past its end */
    write_text(te, "k,v,w,x,y,z,label\n7,1,2,3,4,5,0\n8,3,2,1,0,9,1\n");
    d = NULL;
    assert_err(fed_data_open_csv(tr, 0, &o, &d), FED_ERR_SHAPE);
    assert_null(d);
    assert_non_null(strstr(fed_test_log_last(), ".test.csv:1: column 3: 'w' where the training "
                                                "file"));
    /* auto's lines are said once, by the training split: opening the test
       split (which reads the training file again for its columns and
       statistics) keeps them to debug level */
    write_text(te, "k,v,label\n7,1,0\n,3,1\n");
    fed_test_log_capture(FED_LOG_INFO);
    assert_err(fed_data_open_csv(tr, 1, &o, &d), FED_OK);
    fed_data_free(d);
    assert_err(fed_data_open_csv(tr, 0, &o, &d), FED_OK);
    fed_data_free(d);
    unlink(te); /* no test file: the training file tested, read again */
    assert_err(fed_data_open_csv(tr, 0, &o, &d), FED_OK);
    fed_data_free(d);
    assert_int_equal(fed_test_log_count("c.csv:2: column 1 is categorical ('x' is not a number)",
                                        ""),
                     1);
    assert_int_equal(fed_test_log_count("is categorical", ""), 1);
    fed_test_log_capture(FED_LOG_DEBUG);
}

/* A test file has its training file's header, column for column: a header
 * reordered, renamed, narrower or wider is refused naming both files and
 * the first column that differs (columns are never matched by name). */
static void test_csv_test_header(void **state)
{
    char tr[1024], te[1024], want[1200];
    fed_dataset *d = NULL;
    static const struct {
        const char *head, *here, *there; /* the differing column, here and in h.csv */
    } bad[] = {
        { "b,a,label", "column 1: 'b'", "'a'" },
        { "x,y,label", "column 1: 'x'", "'a'" },
        { "a,B,label", "column 2: 'B'", "'b'" },
        { "a,label,b", "column 2: 'label'", "'b'" },
        { "a,b", "column 3: no column", "'label'" },
        { "a,b,label,c", "column 4: 'c'", "no column" },
    };

    (void)state;
    write_csv_pair(tr, te, sizeof tr, "h", "a,b,label\n1,10,0\n3,30,1\n", NULL);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[128];

        snprintf(text, sizeof text, "%s\n1,2,0\n", bad[i].head);
        write_text(te, text);
        fed_test_log_reset();
        d = (fed_dataset *)1;
        assert_err(fed_data_open_csv(tr, 0, NULL, &d), FED_ERR_SHAPE);
        assert_null(d);
        fed_test_log_has("h.test.csv:1: ");
        snprintf(want, sizeof want, "%s where the training file %s has %s", bad[i].here, tr,
                 bad[i].there);
        fed_test_log_has(want);
        fed_test_log_has("(a test file has its training file's header) (FED_ERR_SHAPE)");
    }
    /* the same header, with a byte-order mark, blanks and CRLF: taken, and
       standardized with the training file's statistics */
    write_text(te, "\xef\xbb\xbf a ,b\t, label\r\n5,10,1\r\n");
    assert_err(fed_data_open_csv(tr, 0, NULL, &d), FED_OK);
    assert_int_equal(d->n, 1);
    assert_true(d->x_f32[0] == 3.0f && d->x_f32[1] == -1.0f); /* (5-2)/1, (10-20)/10 */
    fed_data_free(d);
}

/* A test file may not add classes: a row whose label the training file
 * lacks refuses the test file at load, naming the file, the line and the
 * label (not, after training, a bare shape mismatch); with
 * --skip-bad-rows it is a bad row, skipped and counted. */
static void test_csv_test_classes(void **state)
{
    char tr[1024], te[1024], want[1200];
    fed_csv_opts o = { .skip_bad_rows = 1 };
    fed_dataset *d = NULL;

    (void)state;
    write_csv_pair(tr, te, sizeof tr, "k", "a,b,label\n1,2,0\n3,4,1\n5,6,0\n7,8,1\n",
                   "a,b,label\n1,2,0\n3,4,1\n1,2,5\n");
    fed_test_log_reset();
    d = (fed_dataset *)1;
    assert_err(fed_data_open_csv(tr, 0, NULL, &d), FED_ERR_RANGE);
    assert_null(d);
    snprintf(want, sizeof want,
             "k.test.csv:4: column 3: label 5 is not a class of the training file %s (its "
             "labels are 0 to 1)",
             tr);
    fed_test_log_has(want);
    assert_int_equal(fed_test_log_count("shape mismatch", ""), 0);
    /* skipped with --skip-bad-rows: the classes stay the training file's */
    fed_test_log_reset();
    assert_err(fed_data_open_csv(tr, 0, &o, &d), FED_OK);
    assert_int_equal(d->n, 2);
    assert_int_equal(d->skipped, 1);
    assert_int_equal(d->shape.classes, 2);
    fed_test_log_has("k.test.csv: 1 bad rows skipped");
    fed_data_free(d);
    /* fewer classes than the training file is fine: they keep its count */
    write_text(te, "a,b,label\n1,2,0\n");
    assert_err(fed_data_open_csv(tr, 0, NULL, &d), FED_OK);
    assert_int_equal(d->shape.classes, 2);
    fed_data_free(d);
    /* a regression's targets are no classes */
    o = (fed_csv_opts){ .regression = 1 };
    write_text(tr, "a,label\n1,0.5\n2,1.5\n");
    write_text(te, "a,label\n1,7.25\n");
    assert_err(fed_data_open_csv(tr, 0, &o, &d), FED_OK);
    assert_true(d->y_f32[0] == 7.25f);
    fed_data_free(d);
}

/* Bad rows: refused by PATH:LINE, or skipped and counted. */
static void test_csv_bad_rows(void **state)
{
    const char *t = "a,label\n1,0\n2,x\n3\n\n4,1\n\"5\",0\n";
    fed_csv_opts o = { .skip_bad_rows = 1 };
    fed_dataset *d;

    (void)state;
    csv_with(t, NULL, FED_ERR_NOT_NUMERIC);
    fed_test_log_has("<csv buffer>:3: column 2");
    d = csv_with(t, &o, FED_OK);
    assert_int_equal(d->n, 2);
    assert_int_equal(d->skipped, 4);
    assert_int_equal(d->y[0], 0);
    assert_int_equal(d->y[1], 1);
    assert_int_equal(d->shape.classes, 2);
    fed_test_log_has("<csv buffer>:3: column 2: label is not");
    fed_test_log_has("<csv buffer>:4: 1 fields, the header has 2");
    fed_test_log_has("<csv buffer>:5: empty line");
    fed_test_log_has("<csv buffer>:7: column 1: quoted");
    fed_test_log_has("4 bad rows skipped");
    fed_data_free(d);
    csv_with("a,label\n1,x\n", &o, FED_ERR_TRUNCATED);
    fed_test_log_has("all 1 data rows are bad");
}

static void test_csv_stats_file(void **state)
{
    char csv[1024], stats[1024], out[1024];
    fed_csv_opts o = { .label_column = NULL };
    fed_dataset *d = NULL, *own = NULL, *via = NULL;
    double *mean = NULL, *sd = NULL;
    size_t features = 0;

    (void)state;
    fed_test_path(csv, sizeof csv, "t.csv");
    fed_test_path(stats, sizeof stats, "stats.csv");
    fed_test_path(out, sizeof out, "written.csv");
    write_text(csv, "f1,f2,label\n1,10,0\n3,30,1\n");
    /* Given statistics win over the file's own. */
    write_text(stats, "mean,std\n0,2\n10,4\n");
    o.stats_path = stats;
    assert_err(fed_data_load_csv(csv, &o, &d), FED_OK);
    assert_true(d->x_f32[0] == 0.5f && d->x_f32[1] == 0.0f);
    assert_true(d->x_f32[2] == 1.5f && d->x_f32[3] == 5.0f);
    fed_data_free(d);
    /* Statistics written by fed_data_write_stats reproduce the file's own
     * standardization bit for bit. */
    assert_err(fed_data_csv_stats(csv, NULL, &mean, &sd, &features), FED_OK);
    assert_int_equal(features, 2);
    assert_true(mean[0] == 2.0 && sd[0] == 1.0 && mean[1] == 20.0 && sd[1] == 10.0);
    assert_err(fed_data_write_stats(out, mean, sd, features), FED_OK);
    o.stats_path = out;
    assert_err(fed_data_load_csv(csv, NULL, &own), FED_OK);
    assert_err(fed_data_load_csv(csv, &o, &via), FED_OK);
    assert_memory_equal(own->x_f32, via->x_f32, 4 * sizeof(float));
    fed_data_free(own);
    fed_data_free(via);
    fed_free(mean);
    fed_free(sd);
    /* Bad statistics files. */
    o.stats_path = stats;
    write_text(stats, "0,1\n");
    fed_test_log_reset();
    d = (fed_dataset *)1;
    assert_err(fed_data_load_csv(csv, &o, &d), FED_ERR_SHAPE);
    assert_null(d);
    fed_test_log_has("1 features, the data has 2");
    write_text(stats, "0,1\n0,1\n0,1\n");
    assert_err(fed_data_load_csv(csv, &o, &d), FED_ERR_SHAPE);
    write_text(stats, "0,1\n0,0\n");
    fed_test_log_reset();
    assert_err(fed_data_load_csv(csv, &o, &d), FED_ERR_RANGE);
    fed_test_log_has("stats.csv:2: column 2: std must be > 0");
    write_text(stats, "0,1\n0,1e-300\n");
    fed_test_log_reset();
    assert_err(fed_data_load_csv(csv, &o, &d), FED_ERR_RANGE);
    fed_test_log_has("t.csv:2: feature 2: 10 does not standardize");
    write_text(stats, "0,1\nx,1\n");
    assert_err(fed_data_load_csv(csv, &o, &d), FED_ERR_NOT_NUMERIC);
    write_text(stats, "0,1\n0,1,2\n");
    assert_err(fed_data_load_csv(csv, &o, &d), FED_ERR_FORMAT);
    write_text(stats, "0,1\n0\n");
    assert_err(fed_data_load_csv(csv, &o, &d), FED_ERR_FORMAT);
    o.stats_path = "/nonexistent/stats";
    assert_err(fed_data_load_csv(csv, &o, &d), FED_ERR_NOTFOUND);
    assert_null(d);
    fed_test_log_reset();
    assert_err(fed_data_load_csv("/nonexistent/x.csv", NULL, &d), FED_ERR_NOTFOUND);
    fed_test_log_has("/nonexistent/x.csv");
}

/* fed_data_open on a CSV: train is the file; test is X.test.csv when it
 * exists (standardized with the training statistics), else the file. */
static void test_csv_open(void **state)
{
    char csv[1024], tst[1024];
    fed_dataset *tr = NULL, *te = NULL;

    (void)state;
    fed_test_path(csv, sizeof csv, "d.csv");
    fed_test_path(tst, sizeof tst, "d.test.csv");
    write_text(csv, "f,label\n1,0\n3,1\n");
    assert_err(fed_data_open(csv, 1, &tr), FED_OK);
    fed_test_log_reset();
    assert_err(fed_data_open(csv, 0, &te), FED_OK);
    fed_test_log_has("no separate test file");
    assert_int_equal(te->n, 2);
    assert_memory_equal(tr->x_f32, te->x_f32, 2 * sizeof(float));
    fed_data_free(te);
    write_text(tst, "f,label\n5,0\n2,0\n");
    assert_err(fed_data_open(csv, 0, &te), FED_OK);
    assert_int_equal(te->n, 2);
    assert_int_equal(te->shape.classes, 2); /* the training file's */
    assert_true(te->x_f32[0] == 3.0f);      /* (5 - 2) / 1 */
    assert_true(te->x_f32[1] == 0.0f);
    fed_data_free(te);
    write_text(tst, "f,g,label\n5,1,0\n");
    te = (fed_dataset *)1;
    fed_test_log_reset();
    assert_err(fed_data_open(csv, 0, &te), FED_ERR_SHAPE);
    assert_null(te);
    fed_test_log_has("d.test.csv:1: column 2: 'g' where the training file");
    fed_data_free(tr);
}

static void test_csv_alloc_sweep(void **state)
{
    fed_csv_opts o = { .label_column = NULL };
    sweep s = {.text = "a,label,b\n1,0,2\n3,1,4\n5,2,7\n", .o = &o};
    char stats[1024];

    (void)state;
    fed_test_path(stats, sizeof stats, "s");
    write_text(stats, "0,1\n0,2\n");
    for (int with_stats = 0; with_stats < 2; with_stats++) {
        o.stats_path = with_stats ? stats : NULL;
        assert_true(fed_test_alloc_sweep(try_parse_csv, &s, 0, 100) > 3);
    }
}

/* --------------------------------------------------------- partitions -- */

/* n labels over `classes`, unbalanced on purpose (class c has weight c+1). */
static fed_dataset *label_set(size_t n, int classes)
{
    fed_dataset *d = calloc(1, sizeof *d);
    size_t i = 0;
    int total = classes * (classes + 1) / 2;

    assert_non_null(d);
    d->n = n;
    d->features = 1;
    d->shape = (fed_model_shape){ 1, 1, 1, classes , 0};
    d->y = calloc(n, sizeof *d->y);
    d->x_f32 = calloc(n, sizeof *d->x_f32);
    assert_non_null(d->y);
    for (int c = 0; c < classes; c++) {
        size_t m = n * (size_t)(c + 1) / (size_t)total;

        for (size_t j = 0; j < m && i < n; j++, i++)
            d->y[i] = c;
    }
    while (i < n)
        d->y[i++] = classes - 1;
    /* interleave so that index order says nothing about labels */
    for (i = 0; i < n; i++) {
        size_t j = (i * 7919) % n;
        int32_t t = d->y[i];

        d->y[i] = d->y[j];
        d->y[j] = t;
    }
    for (i = 0; i < n; i++)
        d->x_f32[i] = (float)i;
    return d;
}

static void label_set_free(fed_dataset *d)
{
    free(d->y);
    free(d->x_f32);
    free(d);
}

/* Every index in exactly one of the k parts; returns the largest part. */
static size_t check_cover(const fed_dataset *d, const char *scheme, int k, uint64_t seed)
{
    unsigned char *seen = calloc(d->n, 1);
    size_t total = 0, largest = 0;

    assert_non_null(seen);
    for (int s = 0; s < k; s++) {
        uint32_t *idx = NULL;
        size_t n = 0;

        assert_err(fed_data_partition(d, scheme, s, k, seed, &idx, &n), FED_OK);
        assert_non_null(idx);
        for (size_t i = 0; i < n; i++) {
            assert_true(idx[i] < d->n);
            assert_int_equal(seen[idx[i]], 0);
            seen[idx[i]] = 1;
        }
        total += n;
        if (n > largest)
            largest = n;
        fed_free(idx);
    }
    assert_int_equal(total, d->n);
    free(seen);
    return largest;
}

static void test_partition_cover(void **state)
{
    const char *schemes[] = { "iid", "dirichlet:100", "dirichlet:1", "dirichlet:0.1",
                              "dirichlet:0.001", "shards:1", "shards:2", "shards:7" };
    const int ks[] = { 1, 2, 3, 10, 37 };
    fed_dataset *d = label_set(10007, 10);

    (void)state;
    for (size_t s = 0; s < sizeof schemes / sizeof *schemes; s++)
        for (size_t j = 0; j < sizeof ks / sizeof *ks; j++) {
            size_t largest = check_cover(d, schemes[s], ks[j], 42 + j);

            if (s == 0) /* iid: balanced to one sample */
                assert_true(largest == (d->n + (size_t)ks[j] - 1) / (size_t)ks[j]);
        }
    label_set_free(d);
}

static void get_part(const fed_dataset *d, const char *scheme, int shard, int k, uint64_t seed,
                     uint32_t **idx, size_t *n)
{
    assert_err(fed_data_partition(d, scheme, shard, k, seed, idx, n), FED_OK);
}

static void test_partition_seeded(void **state)
{
    const char *schemes[] = { "iid", "dirichlet:0.5", "shards:2" };
    fed_dataset *d = label_set(5000, 10);

    (void)state;
    for (size_t s = 0; s < 3; s++) {
        uint32_t *a, *b, *c;
        size_t na, nb, nc;
        int sorted = 1;

        get_part(d, schemes[s], 3, 8, 7, &a, &na);
        get_part(d, schemes[s], 3, 8, 7, &b, &nb);
        get_part(d, schemes[s], 3, 8, 8, &c, &nc);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
        assert_true(na != nc || memcmp(a, c, na * sizeof *a) != 0);
        /* the node's own order is shuffled, not index order */
        for (size_t i = 1; i < na; i++)
            if (a[i] < a[i - 1])
                sorted = 0;
        assert_false(sorted);
        fed_free(a);
        fed_free(b);
        fed_free(c);
    }
    label_set_free(d);
}

/* Mean over non-empty nodes of the total-variation distance between the
 * node's label distribution and the global one. */
static double label_skew(const fed_dataset *d, const char *scheme, int k, uint64_t seed)
{
    double global[16] = { 0 }, sum = 0;
    int used = 0, classes = d->shape.classes;

    for (size_t i = 0; i < d->n; i++)
        global[d->y[i]] += 1.0 / (double)d->n;
    for (int s = 0; s < k; s++) {
        double local[16] = { 0 }, tv = 0;
        uint32_t *idx;
        size_t n;

        get_part(d, scheme, s, k, seed, &idx, &n);
        for (size_t i = 0; i < n; i++)
            local[d->y[idx[i]]] += 1.0 / (double)n;
        for (int c = 0; c < classes; c++)
            tv += fabs(local[c] - global[c]) / 2;
        if (n) {
            sum += tv;
            used++;
        }
        fed_free(idx);
    }
    return sum / used;
}

/* NIID-Bench's partitions, against their rules: niid-dirichlet and
 * quantity cover every sample with every party holding at least 10;
 * labels:K gives party j label j mod 10 and K distinct labels, each label
 * split equally (within one sample) among its holders; quantity's parts
 * hold each label in about the global proportion. */
static void test_niid_bench_partitions(void **state)
{
    fed_dataset *d = label_set(6000, 10);
    const char *covering[] = { "niid-dirichlet:0.5", "niid-dirichlet:0.1", "quantity:0.5",
                               "labels:1", "labels:2", "labels:3", "labels:10" };

    (void)state;
    for (size_t s = 0; s < sizeof covering / sizeof *covering; s++)
        for (int k = 2; k <= 10; k += 8)
            if (k == 10 || strncmp(covering[s], "labels:", 7)) /* 2 parties hold < 10 labels */
                check_cover(d, covering[s], k, 11);
    for (int K = 1; K <= 3; K++) {
        char scheme[16];
        size_t holders[10] = { 0 }, got[10][10] = { { 0 } }, per_class[10] = { 0 };

        snprintf(scheme, sizeof scheme, "labels:%d", K);
        for (int j = 0; j < 10; j++) {
            uint32_t *idx;
            size_t n;
            int distinct = 0;

            get_part(d, scheme, j, 10, 3, &idx, &n);
            for (size_t i = 0; i < n; i++)
                got[j][d->y[idx[i]]]++;
            for (int c = 0; c < 10; c++) {
                distinct += got[j][c] > 0;
                holders[c] += got[j][c] > 0;
            }
            assert_int_equal(distinct, K);
            assert_true(got[j][j % 10] > 0);
            fed_free(idx);
        }
        for (size_t i = 0; i < d->n; i++)
            per_class[d->y[i]]++;
        for (int c = 0; c < 10; c++)
            for (int j = 0; j < 10; j++)
                if (got[j][c])
                    assert_true(got[j][c] == per_class[c] / holders[c] ||
                                got[j][c] == per_class[c] / holders[c] + 1);
    }
    for (const char **s = (const char *[]){ "niid-dirichlet:0.05", "quantity:0.3", NULL }; *s;
         s++)
        for (int j = 0; j < 10; j++) {
            uint32_t *idx;
            size_t n;

            get_part(d, *s, j, 10, 5, &idx, &n);
            assert_true(n >= 10);
            fed_free(idx);
        }
    /* more parties than 10 samples each allow: refused, not looped on */
    {
        fed_dataset *small = label_set(50, 10);
        uint32_t *idx = NULL;
        size_t n = 0;

        assert_err(fed_data_partition(small, "niid-dirichlet:0.5", 0, 10, 1, &idx, &n),
                   FED_ERR_RANGE);
        assert_err(fed_data_partition(small, "quantity:0.5", 0, 10, 1, &idx, &n), FED_ERR_RANGE);
        assert_err(fed_data_partition(small, "labels:11", 0, 10, 1, &idx, &n), FED_ERR_RANGE);
        label_set_free(small);
    }
    assert_true(label_skew(d, "quantity:0.5", 10, 2) < 0.1);
    assert_true(label_skew(d, "niid-dirichlet:0.1", 10, 2) > 0.4);
    label_set_free(d);
}

static void test_dirichlet_skew(void **state)
{
    fed_dataset *d = label_set(20000, 10);
    double skew[4] = { 0 };
    const char *schemes[] = { "iid", "dirichlet:100", "dirichlet:1", "dirichlet:0.1" };

    (void)state;
    for (int s = 0; s < 4; s++) {
        for (uint64_t seed = 1; seed <= 3; seed++)
            skew[s] += label_skew(d, schemes[s], 10, seed) / 3;
        print_message("%-14s mean TV from the global label distribution %.4f\n", schemes[s],
                      skew[s]);
    }
    assert_true(skew[0] < 0.05);
    assert_true(skew[1] < skew[2]);
    assert_true(skew[2] < skew[3]);
    assert_true(skew[3] > 0.5);
    /* shards:2 on label-sorted chunks of 1000 of a balanced set (2000 per
     * class): each chunk lies within one class, so a node sees <= 2. */
    for (size_t i = 0; i < d->n; i++)
        d->y[i] = (int32_t)((i * 7) % 10);
    for (int s = 0; s < 10; s++) {
        uint32_t *idx;
        size_t n;
        int has[10] = { 0 }, distinct = 0;

        get_part(d, "shards:2", s, 10, 5, &idx, &n);
        assert_int_equal(n, 2000);
        for (size_t i = 0; i < n; i++)
            has[d->y[idx[i]]] = 1;
        for (int c = 0; c < 10; c++)
            distinct += has[c];
        assert_true(distinct >= 1 && distinct <= 2);
        fed_free(idx);
    }
    label_set_free(d);
}

static void test_partition_errors(void **state)
{
    const char *bad[] = { "",          "IID",         "iid ",         "random",
                          "dirichlet", "dirichlet:",  "dirichlet:0",  "dirichlet:-1",
                          "dirichlet:abc", "dirichlet:nan", "dirichlet:inf", "dirichlet:1x",
                          "dirichlet: 1", "shards:",  "shards:0",     "shards:-2",
                          "shards:1.5", "shards:2x",  "shards:99999999999", "dirichlet:0x1p-1",
                          "dirichlet:0x10", "niid-dirichlet:", "niid-dirichlet:0",
                          "quantity:-1", "quantity:x", "labels:0", "labels:1.5", "labels:",
                          "noise:", "noise:-0.1", "noise:x", "noise:nan", "noise:1e9" };
    fed_dataset *d = label_set(100, 10);
    fed_data_scheme sc;
    uint32_t *idx = (uint32_t *)1;
    size_t n = 7;

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char quoted[64];

        fed_test_log_reset();
        assert_err(fed_data_partition(d, bad[i], 0, 2, 1, &idx, &n), FED_ERR_BAD_VALUE);
        assert_null(idx);
        assert_int_equal(n, 0);
        snprintf(quoted, sizeof quoted, "'%s'", bad[i]);
        fed_test_log_has(quoted);
        assert_err(fed_data_parse_scheme(bad[i], &sc), FED_ERR_BAD_VALUE);
    }
    assert_err(fed_data_partition(d, NULL, 0, 2, 1, &idx, &n), FED_ERR_BAD_VALUE);
    assert_err(fed_data_parse_scheme("dirichlet:0.25", &sc), FED_OK);
    assert_int_equal(sc.kind, FED_DATA_DIRICHLET);
    assert_true(sc.alpha == 0.25);
    assert_err(fed_data_parse_scheme("shards:3", &sc), FED_OK);
    assert_int_equal(sc.kind, FED_DATA_SHARDS);
    assert_int_equal(sc.shards, 3);
    /* noise:SIGMA: iid's split; party i's std SIGMA * i / (k - 1) */
    {
        uint32_t *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        double sd = -1;

        assert_err(fed_data_parse_scheme("noise:0.5", &sc), FED_OK);
        assert_int_equal(sc.kind, FED_DATA_NOISE);
        assert_true(sc.sigma == 0.5);
        assert_err(fed_data_partition(d, "noise:0.5", 3, 5, 9, &a, &na), FED_OK);
        assert_err(fed_data_partition(d, "iid", 3, 5, 9, &b, &nb), FED_OK);
        assert_int_equal(na, nb);
        assert_memory_equal(a, b, na * sizeof *a);
        fed_free(a);
        fed_free(b);
        for (int i = 0; i < 5; i++) {
            assert_err(fed_data_partition_noise("noise:0.5", i, 5, &sd), FED_OK);
            assert_true(sd == 0.5 * i / 4);
        }
        assert_err(fed_data_partition_noise("noise:0.5", 0, 1, &sd), FED_OK);
        assert_true(sd == 0);
        assert_err(fed_data_partition_noise("labels:2", 3, 5, &sd), FED_OK);
        assert_true(sd == 0);
        assert_err(fed_data_partition_noise("noise:0.5", 5, 5, &sd), FED_ERR_RANGE);
        assert_err(fed_data_partition_noise("noise:-1", 0, 5, &sd), FED_ERR_BAD_VALUE);
    }
    fed_test_log_reset();
    assert_err(fed_data_partition(d, "iid", 2, 2, 1, &idx, &n), FED_ERR_RANGE);
    fed_test_log_has("shard 2/2");
    assert_err(fed_data_partition(d, "iid", -1, 2, 1, &idx, &n), FED_ERR_RANGE);
    assert_err(fed_data_partition(d, "iid", 0, 0, 1, &idx, &n), FED_ERR_RANGE);
    fed_test_log_reset();
    assert_err(fed_data_partition(d, "shards:6", 0, 17, 1, &idx, &n), FED_ERR_RANGE);
    fed_test_log_has("only 100 samples");
    label_set_free(d);
}

static void test_partition_alloc_sweep(void **state)
{
    const char *schemes[] = { "iid", "dirichlet:0.5", "shards:2" };
    fed_dataset *d = label_set(500, 10);
    sweep s = {.d = d};

    (void)state;
    for (size_t k = 0; k < 3; k++) {
        s.scheme = schemes[k];
        assert_true(fed_test_alloc_sweep(try_partition, &s, 0, 50) > 1);
    }
    label_set_free(d);
}

/* ------------------------------------------------------------- gather -- */

static void test_gather(void **state)
{
    buf im = idx_images(5, 2, 2), lb = idx_labels(5);
    fed_dataset *d = NULL;
    uint32_t idx[3] = { 4, 0, 4 };
    uint8_t xs[12];
    int32_t ys[3];
    fed_batch b;

    (void)state;
    assert_err(fed_data_parse_idx(im.p, im.n, lb.p, lb.n, &d), FED_OK);
    memset(&b, 0xaa, sizeof b);
    fed_data_gather(d, idx, 3, xs, ys, &b);
    assert_int_equal(b.n, 3);
    assert_ptr_equal(b.x_u8, xs);
    assert_null(b.x_f32);
    assert_ptr_equal(b.y, ys);
    assert_memory_equal(xs, im.p + 16 + 16, 4);
    assert_memory_equal(xs + 4, im.p + 16, 4);
    assert_memory_equal(xs + 8, im.p + 16 + 16, 4);
    assert_int_equal(ys[0], lb.p[8 + 4]);
    assert_int_equal(ys[1], lb.p[8 + 0]);
    fed_data_free(d);

    d = csv_ok("a,b,label\n1,2,0\n3,4,1\n5,9,2\n", NULL);
    {
        float xf[4];
        uint32_t two[2] = { 2, 1 };

        fed_data_gather(d, two, 2, xf, ys, &b);
        assert_int_equal(b.n, 2);
        assert_null(b.x_u8);
        assert_ptr_equal(b.x_f32, xf);
        assert_memory_equal(xf, d->x_f32 + 4, 2 * sizeof(float));
        assert_memory_equal(xf + 2, d->x_f32 + 2, 2 * sizeof(float));
        assert_int_equal(ys[0], 2);
        assert_int_equal(ys[1], 1);
    }
    fed_data_free(d);
    free(im.p);
    free(lb.p);
}

static void test_subset(void **state)
{
    buf im = idx_images(6, 2, 2), lb = idx_labels(6);
    fed_dataset *d = NULL, *s = NULL, *c = NULL;
    uint32_t idx[2] = { 5, 1 }, bad[1] = { 6 };

    (void)state;
    assert_err(fed_data_parse_idx(im.p, im.n, lb.p, lb.n, &d), FED_OK);
    assert_err(fed_data_subset(d, idx, 2, &s), FED_OK);
    assert_int_equal(s->n, 2);
    assert_int_equal(s->shape.h, 2);
    assert_int_equal(s->shape.classes, 10);
    assert_memory_equal(s->x_u8, d->x_u8 + 20, 4);
    assert_memory_equal(s->x_u8 + 4, d->x_u8 + 4, 4);
    assert_int_equal(s->y[0], d->y[5]);
    assert_int_equal(s->y[1], d->y[1]);
    s->x_u8[0] ^= 1; /* a copy, not a view */
    assert_int_not_equal(s->x_u8[0], d->x_u8[20]);
    fed_data_free(s);
    s = (fed_dataset *)1;
    assert_err(fed_data_subset(d, bad, 1, &s), FED_ERR_RANGE);
    assert_null(s);
    assert_err(fed_data_subset(d, idx, 0, &s), FED_ERR_RANGE);
    for (unsigned long n = 1; n < 4; n++) {
        fed_alloc_fail_nth(n, 0);
        assert_err(fed_data_subset(d, idx, 2, &s), FED_ERR_NOMEM);
        fed_alloc_fail_nth(0, 0);
        assert_null(s);
    }
    c = csv_ok("\xef\xbb\xbflabel,a\n1,2\n0,4\n", NULL); /* with a BOM */
    assert_err(fed_data_subset(c, idx + 1, 1, &s), FED_OK);
    assert_null(s->x_u8);
    assert_true(s->x_f32[0] == c->x_f32[1]);
    assert_int_equal(s->y[0], 0);
    fed_data_free(s);
    fed_data_free(c);
    fed_data_free(d);
    free(im.p);
    free(lb.p);
}

/* fed_data_split_val: each class's share held out (rounded, at least one
 * of two or more), both sides in their old order, disjoint and whole, the
 * same seed the same split, another seed another; empty sides refused. */
/* A dataset of SHARD_N labels only, 60 of class 0, 30 of 1, 10 of 2, and
 * the whole of it twice as a shard in its own (reversed) order. */
enum { SHARD_N = 100 };
static void three_class_shard(fed_dataset *d, int32_t y[SHARD_N], uint32_t idx[SHARD_N],
                              uint32_t idx2[SHARD_N])
{
    memset(d, 0, sizeof *d);
    d->n = SHARD_N;
    d->y = y;
    d->shape.classes = 3;
    for (int i = 0; i < SHARD_N; i++) {
        y[i] = i < 60 ? 0 : i < 90 ? 1 : 2;
        idx[i] = idx2[i] = (uint32_t)(SHARD_N - 1 - i);
    }
}

static void test_split_val(void **state)
{
    enum { N = SHARD_N };
    int32_t y[N];
    fed_dataset d;
    uint32_t idx[N], idx2[N], *val = NULL, *val2 = NULL;
    size_t n = N, n2 = N, nv = 0, nv2 = 0, per[3] = {0};
    uint8_t seen[N] = {0};

    (void)state;
    three_class_shard(&d, y, idx, idx2);
    assert_int_equal(fed_data_split_val(&d, idx, &n, 0.25, 7, &val, &nv), FED_OK);
    assert_int_equal(nv, 15 + 8 + 3); /* 15, 7.5 -> 8, 2.5 -> 3 */
    assert_int_equal(n + nv, N);
    for (size_t i = 0; i < nv; i++) {
        per[y[val[i]]]++;
        seen[val[i]]++;
        assert_true(i == 0 || val[i] < val[i - 1]); /* the shard's order kept */
    }
    for (size_t i = 0; i < n; i++) {
        seen[idx[i]]++;
        assert_true(i == 0 || idx[i] < idx[i - 1]);
    }
    for (int i = 0; i < N; i++)
        assert_int_equal(seen[i], 1);
    assert_int_equal(per[0], 15);
    assert_int_equal(per[1], 8);
    assert_int_equal(per[2], 3);
    assert_int_equal(fed_data_split_val(&d, idx2, &n2, 0.25, 7, &val2, &nv2), FED_OK);
    assert_int_equal(nv2, nv);
    assert_memory_equal(val2, val, nv * sizeof *val);
    fed_free(val2);
    n2 = N;
    for (int i = 0; i < N; i++)
        idx2[i] = (uint32_t)(N - 1 - i);
    assert_int_equal(fed_data_split_val(&d, idx2, &n2, 0.25, 8, &val2, &nv2), FED_OK);
    assert_true(memcmp(val2, val, nv * sizeof *val) != 0);
    fed_free(val2);
    fed_free(val);
    /* one sample of each class: nothing to hold out */
    n = 3;
    idx[0] = 0;
    idx[1] = 60;
    idx[2] = 90;
    assert_int_equal(fed_data_split_val(&d, idx, &n, 0.5, 7, &val, &nv), FED_ERR_RANGE);
    assert_null(val);
    assert_int_equal(n, 3);
}

/* fed_data_keep (fedsim's --shard-samples): a shard of 60/30/10 cut to 20
 * keeps each label's share (12, 6, 2), in the shard's order, each sample
 * once; 0 or a keep at or over the shard's size leaves it whole; the same
 * seed draws the same samples. On Fashion-MNIST's labels:2 shards the two
 * labels keep 10 each. */
static void test_keep(void **state)
{
    enum { N = SHARD_N };
    int32_t y[N];
    fed_dataset d;
    uint32_t idx[N], idx2[N];
    size_t n = N, n2 = N, per[3] = {0};

    (void)state;
    three_class_shard(&d, y, idx, idx2);
    assert_int_equal(fed_data_keep(&d, idx, &n, 0, 7), FED_OK);
    assert_int_equal(n, N);
    assert_int_equal(fed_data_keep(&d, idx, &n, N, 7), FED_OK);
    assert_int_equal(n, N);
    assert_int_equal(fed_data_keep(&d, idx, &n, 20, 7), FED_OK);
    assert_int_equal(n, 20);
    for (size_t i = 0; i < n; i++) {
        per[y[idx[i]]]++;
        assert_true(i == 0 || idx[i] < idx[i - 1]);
    }
    assert_int_equal(per[0], 12);
    assert_int_equal(per[1], 6);
    assert_int_equal(per[2], 2);
    assert_int_equal(fed_data_keep(&d, idx2, &n2, 20, 7), FED_OK);
    assert_int_equal(n2, n);
    assert_memory_equal(idx2, idx, n * sizeof *idx);
    /* one sample of each label: none to spare, the shard stays whole */
    n = 3;
    idx[0] = 0;
    idx[1] = 60;
    idx[2] = 90;
    assert_int_equal(fed_data_keep(&d, idx, &n, 2, 7), FED_OK);
    assert_int_equal(n, 3);
}

static void test_keep_labels2(void **state)
{
    fed_dataset *d = label_set(6000, 10);
    uint32_t *idx = NULL;
    size_t n = 0, before[10] = {0}, per[10] = {0}, n0;
    int labels = 0;

    (void)state;
    assert_int_equal(fed_data_partition(d, "labels:2", 3, 10, 1, &idx, &n), FED_OK);
    n0 = n;
    for (size_t i = 0; i < n; i++)
        before[d->y[idx[i]]]++;
    assert_int_equal(fed_data_keep(d, idx, &n, 20, 9), FED_OK);
    assert_true(n >= 19 && n <= 21); /* each label's share rounded */
    for (size_t i = 0; i < n; i++)
        per[d->y[idx[i]]]++;
    for (int c = 0; c < 10; c++) {
        double share = 20.0 * (double)before[c] / (double)n0;

        assert_true(fabs((double)per[c] - share) <= 0.5 + 1e-9);
        labels += per[c] != 0;
    }
    assert_int_equal(labels, 2);
    fed_free(idx);
    label_set_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fashion_mnist, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gzip_equals_plain_real, setup, teardown),
        cmocka_unit_test_setup_teardown(test_open_env_and_dir, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inflated_cache, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_parse_ok, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_rejects_plain, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_rejects_oversized, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_gzip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_files, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_files_windowed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_idx_alloc_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_standardization, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_stats_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_siphash_vectors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_missing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_categorical, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_regression, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_categorical_split, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_bad_rows, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_open, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_test_header, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_test_classes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_csv_alloc_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partition_cover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partition_seeded, setup, teardown),
        cmocka_unit_test_setup_teardown(test_dirichlet_skew, setup, teardown),
        cmocka_unit_test_setup_teardown(test_niid_bench_partitions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partition_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_partition_alloc_sweep, setup, teardown),
        cmocka_unit_test_setup_teardown(test_gather, setup, teardown),
        cmocka_unit_test_setup_teardown(test_subset, setup, teardown),
        cmocka_unit_test(test_split_val),
        cmocka_unit_test(test_keep),
        cmocka_unit_test(test_keep_labels2),
        cmocka_unit_test_setup_teardown(test_augment, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
