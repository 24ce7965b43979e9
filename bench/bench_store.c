/* bench_store.c - storage figures, each next to its baseline in the same run:
 * 1 MiB blob inserts per second at 4 KiB and 64 KiB pages (why the store
 * picks 64 KiB), and checkpoint write / verified load MB/s for 1M and 100M
 * float parameters beside a bare SQLite blob insert of the same bytes (same
 * pragmas, same chunking, same file system). Files live in a temp dir
 * (FEDNODE_BENCH_DIR, else /tmp) removed at the end. Timings are wall clock. */
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>
#include <sqlite3.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "storage/store.h"

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "bench_store: %s: %s\n", what, detail ? detail : "");
    exit(1);
}

static void remove_db(const char *path)
{
    char p[700];

    remove(path);
    snprintf(p, sizeof p, "%s-wal", path);
    remove(p);
    snprintf(p, sizeof p, "%s-shm", path);
    remove(p);
}

/* A bare connection with the store's pragmas (page size, WAL, FULL). */
static sqlite3 *bare_open(const char *path, int page_size)
{
    char sql[256];
    sqlite3 *db = NULL;

    remove_db(path);
    if (sqlite3_open(path, &db) != SQLITE_OK)
        die("open", sqlite3_errmsg(db));
    snprintf(sql, sizeof sql,
             "PRAGMA page_size = %d; PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;"
             " PRAGMA journal_size_limit = 67108864;"
             " CREATE TABLE blobs(id INTEGER PRIMARY KEY, k INTEGER NOT NULL, data BLOB NOT NULL);",
             page_size);
    if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
        die("pragmas", sqlite3_errmsg(db));
    return db;
}

/* One transaction inserting len bytes as rows of at most chunk bytes; with
 * prune, rows of older keys are deleted in it too (as keep_last = 1 does). */
static void bare_insert(sqlite3 *db, sqlite3_stmt *ins, const uint8_t *p, size_t len,
                        size_t chunk, int key, int prune)
{
    if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK)
        die("begin", sqlite3_errmsg(db));
    for (size_t off = 0; off < len; off += chunk) {
        size_t n = len - off < chunk ? len - off : chunk;

        sqlite3_bind_int(ins, 1, key);
        sqlite3_bind_blob64(ins, 2, p + off, n, SQLITE_STATIC);
        if (sqlite3_step(ins) != SQLITE_DONE)
            die("insert", sqlite3_errmsg(db));
        sqlite3_reset(ins);
    }
    if (prune) {
        char sql[64];

        snprintf(sql, sizeof sql, "DELETE FROM blobs WHERE k < %d", key);
        if (sqlite3_exec(db, sql, NULL, NULL, NULL) != SQLITE_OK)
            die("delete", sqlite3_errmsg(db));
    }
    if (sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK)
        die("commit", sqlite3_errmsg(db));
}

/* ---------------------------------------------------------- page size -- */

static double blob_inserts_per_s(const char *path, int page_size, const uint8_t *blob, int n)
{
    sqlite3 *db = bare_open(path, page_size);
    sqlite3_stmt *ins = NULL;
    double t0, t;

    if (sqlite3_prepare_v2(db, "INSERT INTO blobs(k, data) VALUES(?1, ?2)", -1, &ins, NULL) !=
        SQLITE_OK)
        die("prepare", sqlite3_errmsg(db));
    t0 = now_s();
    for (int i = 0; i < n; i++)
        bare_insert(db, ins, blob, 1 << 20, 1 << 20, i, 0); /* one commit per blob */
    t = now_s() - t0;
    sqlite3_finalize(ins);
    sqlite3_close(db);
    remove_db(path);
    return n / t;
}

static void bench_page_size(const char *dir, const uint8_t *blob)
{
    char path[600];
    const int n = 96, reps = 3;
    double best4 = 0, best64 = 0;

    snprintf(path, sizeof path, "%s/pages.db", dir);
    /* alternate, best of reps: the machine is shared */
    for (int r = 0; r < reps; r++) {
        double a = blob_inserts_per_s(path, 4096, blob, n);
        double b = blob_inserts_per_s(path, 65536, blob, n);

        best4 = a > best4 ? a : best4;
        best64 = b > best64 ? b : best64;
    }
    printf("1 MiB blob inserts, one commit each (WAL, synchronous=FULL), best of %d x %d:\n",
           reps, n);
    printf("  page  4 KiB  %8.1f /s  %7.1f MB/s\n", best4, best4 * 1.048576);
    printf("  page 64 KiB  %8.1f /s  %7.1f MB/s   (x%.2f)\n", best64, best64 * 1.048576,
           best64 / best4);
}

/* -------------------------------------------------------- checkpoints -- */

static void bench_checkpoint(const char *dir, size_t nparams, int reps)
{
    char path[600], bpath[600];
    size_t bytes = nparams * sizeof(float);
    float *params = fed_alloc_aligned(bytes);
    fed_store_opts o;
    fed_store *st = NULL;
    sqlite3 *db;
    sqlite3_stmt *ins = NULL;
    double best_ck = 1e30, best_bare = 1e30, best_load = 1e30, best_hash = 1e30;
    fed_rng r;
    fed_err e;

    if (!params)
        die("alloc", "parameters");
    fed_rng_seed(&r, 1);
    for (size_t i = 0; i < nparams; i++)
        params[i] = (float)fed_rng_uniform(&r);
    snprintf(path, sizeof path, "%s/ckpt.db", dir);
    snprintf(bpath, sizeof bpath, "%s/bare.db", dir);
    remove_db(path);
    fed_store_opts_default(&o);
    o.keep_last = 1; /* bounded disk use across repetitions */
    if ((e = fed_store_open(path, &o, &st)) != FED_OK)
        die("fed_store_open", fed_strerror(e));
    db = bare_open(bpath, fed_store_page_size(st));
    if (sqlite3_prepare_v2(db, "INSERT INTO blobs(k, data) VALUES(?1, ?2)", -1, &ins, NULL) !=
        SQLITE_OK)
        die("prepare", sqlite3_errmsg(db));

    for (int k = 0; k < reps; k++) {
        fed_store_section s[1] = {{FED_CKPT_SEC_PARAMS, params, bytes}};
        fed_store_ckpt c;
        uint8_t h[32];
        double t0, t;

        /* the store: chunks + BLAKE2b + chain row + retention, one transaction */
        t0 = now_s();
        if ((e = fed_store_checkpoint_write(st, (uint64_t)k + 1, s, 1, NULL)) != FED_OK)
            die("checkpoint_write", fed_strerror(e));
        t = now_s() - t0;
        best_ck = t < best_ck ? t : best_ck;

        /* bare: the same bytes, the same chunk size, one transaction, the
         * previous copy deleted in it as the store's retention does */
        t0 = now_s();
        bare_insert(db, ins, (const uint8_t *)params, bytes, FED_STORE_CHUNK_BYTES, k, 1);
        t = now_s() - t0;
        best_bare = t < best_bare ? t : best_bare;

        t0 = now_s();
        if ((e = fed_store_latest_valid_checkpoint(st, &c, NULL)) != FED_OK)
            die("latest_valid_checkpoint", fed_strerror(e));
        t = now_s() - t0;
        best_load = t < best_load ? t : best_load;
        if (memcmp(fed_store_ckpt_find(&c, FED_CKPT_SEC_PARAMS)->data, params, bytes) != 0)
            die("load", "parameters differ");
        fed_store_ckpt_fini(&c);

        t0 = now_s();
        crypto_generichash(h, 32, (const uint8_t *)params, bytes, NULL, 0);
        t = now_s() - t0;
        best_hash = t < best_hash ? t : best_hash;
    }
    {
        double mb = (double)bytes / 1e6;

        printf("checkpoint of %zuM float params (%.0f MB), best of %d:\n",
               nparams / 1000000, mb, reps);
        printf("  store write   %8.1f MB/s  (%.3f s)\n", mb / best_ck, best_ck);
        printf("  bare insert   %8.1f MB/s  (%.3f s)   store/bare x%.2f\n", mb / best_bare,
               best_bare, best_bare / best_ck);
        printf("  verified load %8.1f MB/s  (%.3f s)\n", mb / best_load, best_load);
        printf("  BLAKE2b alone %8.1f MB/s  (the checkpoint's hash, version 2)\n", mb / best_hash);
    }
    sqlite3_finalize(ins);
    sqlite3_close(db);
    fed_store_close(st);
    remove_db(path);
    remove_db(bpath);
    fed_free(params);
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(int argc, char **argv)
{
    const char *base = getenv("FEDNODE_BENCH_DIR");
    char dir[512];
    uint8_t *blob;
    size_t big = 100000000;
    fed_rng r;

    if (argc > 1)
        big = (size_t)strtoull(argv[1], NULL, 10); /* bench_store NPARAMS for a smaller run */
    if (sodium_init() < 0)
        die("sodium_init", "failed");
    snprintf(dir, sizeof dir, "%s/fed_bench_store_XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(dir))
        die("mkdtemp", strerror(errno));
    printf("bench_store: files in %s (SQLite %s); the machine may be shared: noisy\n", dir,
           sqlite3_libversion());
    blob = malloc(1 << 20);
    if (!blob)
        die("alloc", "blob");
    fed_rng_seed(&r, 2);
    fed_rng_fill(&r, blob, 1 << 20);
    bench_page_size(dir, blob);
    free(blob);
    bench_checkpoint(dir, 1000000, 10);
    bench_checkpoint(dir, big, 2);
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return 0;
}
