/* test_store.c - the storage module: schema creation and migration, the
 * epoch rule under an injected clock, round/contribution/peer/counter rows,
 * transactions, checkpoints (chunking, hash chain, corruption skipped and
 * reported, retention), read-only and full databases, allocation failures,
 * and safetensors export/import (bit-exact round trip, strict importer).
 * Every file lives in a fresh temp dir removed at the end. */
#include <errno.h>
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
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>
#include <sqlite3.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/io.h"
#include "model/model.h"
#include "app/cli.h"
#include "model/safetensors.h"
#include "storage/store.h"
#include "storage/test_hooks.h"
#include "tests/support/support.h"

/* ------------------------------------------------------------ helpers -- */


static void remove_db(const char *path)
{
    char p[600];

    remove(path);
    snprintf(p, sizeof p, "%s-wal", path);
    remove(p);
    snprintf(p, sizeof p, "%s-shm", path);
    remove(p);
}

/* A fresh database path for one test (removes leftovers). */
static void fresh_db(char *out, size_t cap, const char *name)
{
    fed_test_path(out, cap, name);
    remove_db(out);
}

typedef struct test_clock {
    uint64_t now;
} test_clock;

static uint64_t clock_fn(void *ctx) { return ((test_clock *)ctx)->now; }

static fed_store_opts opts_with_clock(test_clock *c)
{
    fed_store_opts o;

    fed_store_opts_default(&o);
    o.sync = FED_STORE_SYNC_NORMAL; /* tests: no fsync per commit */
    o.wall_s = clock_fn;
    o.clock_ctx = c;
    return o;
}

static sqlite3 *raw_open(const char *path)
{
    sqlite3 *db = NULL;

    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    sqlite3_busy_timeout(db, 2000);
    return db;
}

static void raw_exec(sqlite3 *db, const char *sql)
{
    char *err = NULL;
    int rc = sqlite3_exec(db, sql, NULL, NULL, &err);

    if (rc != SQLITE_OK)
        fail_msg("sql '%s': %s", sql, err ? err : "?");
}

static int64_t raw_int(sqlite3 *db, const char *sql)
{
    sqlite3_stmt *s = NULL;
    int64_t v;

    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &s, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(s), SQLITE_ROW);
    v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

static void fill_round(fed_store_round *r, uint64_t round)
{
    memset(r, 0, sizeof *r);
    r->round = round;
    r->start_ms = 1000 * round;
    r->end_ms = 1000 * round + 750;
    r->loss = 1.0 / (double)(round + 1);
    r->accuracy = 0.5 + 0.01 * (double)round;
    r->samples = 600 * round;
    r->bytes_in = 11 * round;
    r->bytes_out = 13 * round;
    r->peers = (uint32_t)(round % 7);
    snprintf(r->strategy, sizeof r->strategy, "fedavg");
    memset(r->model_hash, (int)(round & 0xff), 32);
    r->lr = 0.03125 * (double)round; /* exact in binary: JSON prints it as is */
}

/* Sections with content derived from (seed): sizes chosen so chunks of 4096
 * bytes straddle section boundaries and padding. */
typedef struct sections {
    uint8_t *a, *b, *c;
    size_t na, nb, nc;
    fed_store_section s[3];
} sections;

static void make_sections(sections *x, uint64_t seed, size_t scale)
{
    fed_rng r;

    fed_rng_seed(&r, seed);
    x->na = 10000 * scale + 3;
    x->nb = 17 * scale;
    x->nc = 4096 * scale + 1;
    x->a = malloc(x->na);
    x->b = malloc(x->nb ? x->nb : 1);
    x->c = malloc(x->nc);
    assert_non_null(x->a);
    assert_non_null(x->c);
    fed_rng_fill(&r, x->a, x->na);
    fed_rng_fill(&r, x->b, x->nb);
    fed_rng_fill(&r, x->c, x->nc);
    x->s[0] = (fed_store_section){FED_CKPT_SEC_PARAMS, x->a, x->na};
    x->s[1] = (fed_store_section){FED_CKPT_SEC_OPTIM, x->b, x->nb};
    x->s[2] = (fed_store_section){FED_CKPT_SEC_RESIDUAL, x->c, x->nc};
}

static void free_sections(sections *x)
{
    free(x->a);
    free(x->b);
    free(x->c);
}

static void assert_ckpt_matches(const fed_store_ckpt *c, const sections *x)
{
    const fed_store_section *p = fed_store_ckpt_find(c, FED_CKPT_SEC_PARAMS);
    const fed_store_section *o = fed_store_ckpt_find(c, FED_CKPT_SEC_OPTIM);
    const fed_store_section *r = fed_store_ckpt_find(c, FED_CKPT_SEC_RESIDUAL);

    assert_int_equal(c->nsections, 3);
    assert_non_null(p);
    assert_non_null(o);
    assert_non_null(r);
    assert_int_equal(p->len, x->na);
    assert_int_equal(o->len, x->nb);
    assert_int_equal(r->len, x->nc);
    assert_memory_equal(p->data, x->a, x->na);
    if (x->nb)
        assert_memory_equal(o->data, x->b, x->nb);
    assert_memory_equal(r->data, x->c, x->nc);
    assert_int_equal((uintptr_t)p->data % 64, 0);
    assert_int_equal((uintptr_t)r->data % 64, 0);
    assert_null(fed_store_ckpt_find(c, "nope"));
}

/* Writes n checkpoints of rounds 1..n (sections seeded by round). */
static void write_ckpts(fed_store *st, uint64_t from, uint64_t n, size_t scale)
{
    for (uint64_t r = from; r < from + n; r++) {
        sections x;

        make_sections(&x, r, scale);
        assert_int_equal(fed_store_checkpoint_write(st, r, x.s, 3, NULL), FED_OK);
        free_sections(&x);
    }
}

/* ------------------------------------------------------ schema, epoch -- */

static void test_open_empty_file(void **state)
{
    char path[512];
    test_clock clk = {1700000000};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    sqlite3 *db;
    FILE *f;
    fed_log_level level = fed_log_get_level();

    (void)state;
    fresh_db(path, sizeof path, "empty.db");
    f = fopen(path, "wb");
    assert_non_null(f);
    fclose(f); /* a zero-byte file, as `touch` leaves it */
    fed_log_set_level(FED_LOG_INFO);
    fed_test_log_capture(FED_LOG_INFO);
    /* read-only (status, verify, export): not a fednode database, and
       nothing it could migrate; the file stays as it was */
    o.flags = FED_STORE_READONLY;
    assert_int_equal(fed_store_open(path, &o, &st), FED_ERR_MAGIC);
    assert_null(st);
    fed_test_log_has("empty.db is not a fednode database (an empty file)");
    assert_int_equal(fed_test_log_count("migrate", ""), 0);
    fed_test_log_reset();
    o.flags = 0;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    /* one line says it is new (it said "schema migrated" once per version) */
    assert_int_equal(fed_test_log_count("schema", ""), 1);
    fed_test_log_has("store: new database, schema version");
    fed_test_log_default();
    fed_log_set_level(level);
    assert_int_equal(fed_store_schema(st), FED_STORE_SCHEMA_VERSION);
    assert_int_equal(fed_store_page_size(st), FED_STORE_PAGE_SIZE);
    assert_int_equal(fed_store_epoch(st), 1700000000);
    fed_store_close(st);

    db = raw_open(path);
    assert_int_equal(raw_int(db, "PRAGMA user_version"), FED_STORE_SCHEMA_VERSION);
    assert_int_equal((uint32_t)raw_int(db, "PRAGMA application_id"), FED_STORE_APP_ID);
    assert_int_equal(raw_int(db, "PRAGMA page_size"), FED_STORE_PAGE_SIZE);
    assert_int_equal(raw_int(db, "SELECT value FROM meta WHERE key = 'schema_version'"),
                     FED_STORE_SCHEMA_VERSION);
    assert_int_equal(raw_int(db, "SELECT count(*) FROM dp_charges"), 0); /* v4 */
    assert_int_equal(raw_int(db, "SELECT value FROM meta WHERE key = 'epoch'"), 1700000000);
    assert_int_equal(raw_int(db, "SELECT count(*) FROM pragma_journal_mode WHERE"
                                 " journal_mode = 'wal'"), 1);
    sqlite3_close(db);
}

/* The v1 schema exactly as shipped (frozen here: a migration must keep
 * taking files made by it). */
static const char *const v1_schema =
    "CREATE TABLE meta(key TEXT PRIMARY KEY NOT NULL, value);"
    "CREATE TABLE rounds(round INTEGER PRIMARY KEY, start_ms INTEGER NOT NULL,"
    " end_ms INTEGER NOT NULL, loss REAL, accuracy REAL, samples INTEGER NOT NULL,"
    " bytes_in INTEGER NOT NULL, bytes_out INTEGER NOT NULL, peers INTEGER NOT NULL,"
    " strategy TEXT NOT NULL, model_hash BLOB NOT NULL);"
    "CREATE TABLE contributions(id INTEGER PRIMARY KEY, round INTEGER NOT NULL,"
    " peer_key BLOB NOT NULL, digest BLOB NOT NULL, signature BLOB NOT NULL,"
    " header BLOB NOT NULL, accepted INTEGER NOT NULL, reason TEXT NOT NULL);"
    "CREATE INDEX contributions_by_round ON contributions(round, id);"
    "CREATE TABLE checkpoints(id INTEGER PRIMARY KEY, round INTEGER NOT NULL,"
    " created_s INTEGER NOT NULL, size INTEGER NOT NULL, chunks INTEGER NOT NULL,"
    " hash BLOB NOT NULL, prev_hash BLOB NOT NULL, pruned INTEGER NOT NULL DEFAULT 0);"
    "CREATE INDEX checkpoints_by_round ON checkpoints(round, id);"
    "CREATE TABLE checkpoint_chunks(ckpt INTEGER NOT NULL, idx INTEGER NOT NULL,"
    " data BLOB NOT NULL, UNIQUE(ckpt, idx));"
    "CREATE TABLE peers(key BLOB PRIMARY KEY NOT NULL, addr TEXT NOT NULL,"
    " first_seen_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL,"
    " last_round INTEGER NOT NULL);"
    "CREATE TABLE counters(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);"
    "PRAGMA application_id = 1178944590; PRAGMA user_version = 1;"
    "INSERT INTO meta VALUES('schema_version', 1), ('epoch', 5000);"
    "INSERT INTO rounds VALUES(7, 1, 2, 0.25, 0.75, 100, 10, 20, 3, 'median', zeroblob(32));"
    "INSERT INTO peers VALUES(zeroblob(32), 'tcp://10.0.0.1:7000', 11, 22, 7);";

static void test_migrate_from_v1(void **state)
{
    char path[512];
    test_clock clk = {100}; /* wall clock far behind the stored epoch */
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_round r;
    fed_store_peer p[4];
    size_t n = 0;
    sqlite3 *db;

    (void)state;
    fresh_db(path, sizeof path, "v1.db");
    db = raw_open(path);
    raw_exec(db, v1_schema);
    sqlite3_close(db);

    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_schema(st), FED_STORE_SCHEMA_VERSION);
    assert_int_equal(fed_store_epoch(st), 5001);
    assert_int_equal(fed_store_get_round(st, 7, &r), FED_OK);
    assert_string_equal(r.strategy, "median");
    assert_int_equal(r.samples, 100);
    assert_true(r.loss == 0.25);
    assert_int_equal(fed_store_list_peers(st, p, 4, &n), FED_OK);
    assert_int_equal(n, 1);
    assert_string_equal(p[0].addr, "tcp://10.0.0.1:7000");
    assert_int_equal(p[0].epoch, 0); /* the v2 column, defaulted */
    write_ckpts(st, 8, 1, 1);        /* uses the v2 epoch column */
    fed_store_close(st);

    db = raw_open(path);
    assert_int_equal(raw_int(db, "PRAGMA user_version"), FED_STORE_SCHEMA_VERSION);
    assert_int_equal(raw_int(db, "SELECT value FROM meta WHERE key = 'schema_version'"),
                     FED_STORE_SCHEMA_VERSION);
    assert_int_equal(raw_int(db, "SELECT epoch FROM checkpoints WHERE id = 1"), 5001);
    /* a v1 file keeps the page size it was made with */
    assert_int_equal(raw_int(db, "PRAGMA page_size"), 4096);
    sqlite3_close(db);
}

/* A v2 file (v1 and the v2 step, as shipped): its rounds have no lr. */
static const char *const v2_step =
    "ALTER TABLE checkpoints ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE peers ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;"
    "PRAGMA user_version = 2; UPDATE meta SET value = 2 WHERE key = 'schema_version';";

static void make_v2(char *path, size_t cap, const char *name)
{
    sqlite3 *db;

    fresh_db(path, cap, name);
    db = raw_open(path);
    raw_exec(db, v1_schema);
    raw_exec(db, v2_step);
    sqlite3_close(db);
}

/* v3 adds rounds.lr. A v2 database opened read-only (fednode status of an
 * older node) is read as it is: not changed, its rounds with lr 0 (none
 * recorded); opened read-write it is migrated, its rows kept with lr NULL,
 * and a round written then keeps its rate (0: NULL). */
static void test_migrate_from_v2(void **state)
{
    char path[512];
    test_clock clk = {100};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_round r, last[4];
    size_t n = 0;
    sqlite3 *db;
    fed_log_level level = fed_log_get_level();

    (void)state;
    make_v2(path, sizeof path, "v2.db");
    o.flags = FED_STORE_READONLY;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_schema(st), 2);
    assert_int_equal(fed_store_get_round(st, 7, &r), FED_OK);
    assert_string_equal(r.strategy, "median");
    assert_true(r.accuracy == 0.75);
    assert_true(r.lr == 0);
    assert_int_equal(fed_store_last_rounds(st, last, 4, &n), FED_OK);
    assert_int_equal(n, 1);
    assert_int_equal(last[0].round, 7);
    assert_true(last[0].lr == 0);
    fed_store_close(st);
    db = raw_open(path);
    assert_int_equal(raw_int(db, "PRAGMA user_version"), 2); /* left as it was */
    sqlite3_close(db);

    o.flags = 0;
    fed_log_set_level(FED_LOG_INFO);
    fed_test_log_capture(FED_LOG_INFO);
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_test_log_count("schema", ""), 1);
    {
        char line[96];

        snprintf(line, sizeof line, "store: schema migrated from version 2 to %d",
                 FED_STORE_SCHEMA_VERSION);
        fed_test_log_has(line);
    }
    fed_test_log_default();
    fed_log_set_level(level);
    assert_int_equal(fed_store_schema(st), FED_STORE_SCHEMA_VERSION);
    assert_int_equal(fed_store_get_round(st, 7, &r), FED_OK);
    assert_int_equal(r.samples, 100);
    assert_true(r.lr == 0);
    r.round = 8;
    r.lr = 0.0375;
    assert_int_equal(fed_store_put_round(st, &r), FED_OK);
    r.round = 9;
    r.lr = 0; /* a round that trained nothing (a peer's mixing round) */
    assert_int_equal(fed_store_put_round(st, &r), FED_OK);
    assert_int_equal(fed_store_get_round(st, 8, &r), FED_OK);
    assert_true(r.lr == 0.0375);
    assert_int_equal(fed_store_last_rounds(st, last, 4, &n), FED_OK);
    assert_int_equal(n, 3);
    assert_true(last[0].lr == 0 && last[1].lr == 0.0375 && last[2].lr == 0);
    fed_store_close(st);
    db = raw_open(path);
    assert_int_equal(raw_int(db, "PRAGMA user_version"), FED_STORE_SCHEMA_VERSION);
    assert_int_equal(raw_int(db, "SELECT count(*) FROM rounds WHERE lr IS NULL"), 2);
    assert_int_equal(raw_int(db, "SELECT count(*) FROM rounds WHERE lr = 0.0375"), 1);
    sqlite3_close(db);

    /* a v1 file is still refused read-only: open it read-write once */
    fed_test_log_quiet();
    fresh_db(path, sizeof path, "v1ro.db");
    db = raw_open(path);
    raw_exec(db, v1_schema);
    sqlite3_close(db);
    o.flags = FED_STORE_READONLY;
    assert_int_equal(fed_store_open(path, &o, &st), FED_ERR_SCHEMA);
    fed_log_set_sink(NULL, NULL);
}

typedef struct dp_seen {
    fed_store_dp_charge c[4];
    size_t n;
} dp_seen;

static int keep_dp(void *ctx, const fed_store_dp_charge *c)
{
    dp_seen *d = ctx;

    if (d->n < 4)
        d->c[d->n++] = *c;
    return 0;
}

/* DP charges: rows back in the order made, out-of-range values refused, a
 * durable transaction's rows kept across a reopen and a rolled-back one's
 * gone, and the store usable as before after either. */
static void test_dp_charges(void **state)
{
    char path[512];
    test_clock clk = {100};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_dp_charge c = {3, 1234, 0.25, 1.5, 60, 1e-5, 2.5}, bad;
    dp_seen d = {0};

    (void)state;
    fresh_db(path, sizeof path, "dp.db");
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_begin_durable(st), FED_OK);
    assert_int_equal(fed_store_begin_durable(st), FED_ERR_INVAL); /* one at a time */
    assert_int_equal(fed_store_put_dp_charge(st, &c), FED_OK);
    assert_int_equal(fed_store_commit(st), FED_OK);
    c.round = 4;
    c.epsilon = NAN;
    assert_int_equal(fed_store_begin_durable(st), FED_OK);
    assert_int_equal(fed_store_put_dp_charge(st, &c), FED_OK);
    fed_store_rollback(st); /* not made */
    c.steps = 7;
    assert_int_equal(fed_store_put_dp_charge(st, &c), FED_OK); /* a transaction of its own */
    c.round = 5; /* a release without noise: unbounded, never "no DP" */
    c.epsilon = INFINITY;
    assert_int_equal(fed_store_put_dp_charge(st, &c), FED_OK);
    {
        fed_store_round r = {.round = 5, .loss = NAN, .accuracy = NAN, .epsilon = INFINITY}, got;

        assert_int_equal(fed_store_put_round(st, &r), FED_OK);
        assert_int_equal(fed_store_get_round(st, 5, &got), FED_OK);
        assert_true(isinf(got.epsilon) && got.epsilon > 0);
    }
    c.round = 4;
    bad = c;
    bad.q = 1.5;
    assert_int_equal(fed_store_put_dp_charge(st, &bad), FED_ERR_INVAL);
    bad = c;
    bad.sigma = INFINITY;
    assert_int_equal(fed_store_put_dp_charge(st, &bad), FED_ERR_INVAL);
    bad = c;
    bad.delta = 1;
    assert_int_equal(fed_store_put_dp_charge(st, &bad), FED_ERR_INVAL);
    fed_store_close(st);

    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_each_dp_charge(st, keep_dp, &d), FED_OK);
    assert_int_equal(d.n, 3);
    assert_true(isinf(d.c[2].epsilon));
    assert_int_equal(d.c[0].round, 3);
    assert_int_equal(d.c[0].at_ms, 1234);
    assert_true(d.c[0].q == 0.25 && d.c[0].sigma == 1.5 && d.c[0].delta == 1e-5);
    assert_int_equal(d.c[0].steps, 60);
    assert_true(d.c[0].epsilon == 2.5);
    assert_int_equal(d.c[1].round, 4);
    assert_int_equal(d.c[1].steps, 7);
    assert_true(isnan(d.c[1].epsilon));
    fed_store_close(st);

    /* a v3 file (rounds.lr, no DP) opened read-only: rounds without an
       epsilon, no charges, the file left as it was */
    {
        fed_store_round r;
        sqlite3 *db;

        make_v2(path, sizeof path, "v3.db");
        db = raw_open(path);
        raw_exec(db, "ALTER TABLE rounds ADD COLUMN lr REAL; UPDATE rounds SET lr = 0.5;"
                     "PRAGMA user_version = 3; UPDATE meta SET value = 3"
                     " WHERE key = 'schema_version';");
        sqlite3_close(db);
        o.flags = FED_STORE_READONLY;
        assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
        assert_int_equal(fed_store_schema(st), 3);
        assert_int_equal(fed_store_get_round(st, 7, &r), FED_OK);
        assert_true(r.lr == 0.5 && r.epsilon == 0);
        d.n = 0;
        assert_int_equal(fed_store_each_dp_charge(st, keep_dp, &d), FED_OK);
        assert_int_equal(d.n, 0);
        fed_store_close(st);
        db = raw_open(path);
        assert_int_equal(raw_int(db, "PRAGMA user_version"), 3);
        sqlite3_close(db);
    }
}

static void test_not_ours(void **state)
{
    char path[512];
    fed_store *st = NULL;
    sqlite3 *db;
    FILE *f;

    (void)state;
    fed_test_log_quiet();
    fresh_db(path, sizeof path, "other.db");
    db = raw_open(path);
    raw_exec(db, "CREATE TABLE notes(x)");
    sqlite3_close(db);
    assert_int_equal(fed_store_open(path, NULL, &st), FED_ERR_MAGIC);
    assert_null(st);

    fresh_db(path, sizeof path, "text.db");
    f = fopen(path, "wb");
    assert_non_null(f);
    for (int i = 0; i < 200; i++)
        fputs("this is not a database file at all. ", f);
    fclose(f);
    assert_int_equal(fed_store_open(path, NULL, &st), FED_ERR_MAGIC);

    fresh_db(path, sizeof path, "future.db");
    db = raw_open(path);
    raw_exec(db, "CREATE TABLE meta(key TEXT PRIMARY KEY, value);"
                 "PRAGMA application_id = 1178944590; PRAGMA user_version = 99;");
    sqlite3_close(db);
    assert_int_equal(fed_store_open(path, NULL, &st), FED_ERR_SCHEMA);

    fed_test_path(path, sizeof path, "no/such/dir/x.db");
    assert_int_equal(fed_store_open(path, NULL, &st), FED_ERR_IO);
    fed_log_set_sink(NULL, NULL);
}

static void test_epoch_rule(void **state)
{
    char path[512];
    test_clock clk = {1000};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;

    (void)state;
    fresh_db(path, sizeof path, "epoch.db");
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_epoch(st), 1000);
    fed_store_close(st);

    clk.now = 500; /* the clock went backwards: stored + 1 wins */
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_epoch(st), 1001);
    fed_store_close(st);
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_epoch(st), 1002);
    fed_store_close(st);

    clk.now = 1002; /* same second as the stored epoch: still larger */
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_epoch(st), 1003);
    fed_store_close(st);

    clk.now = 9000; /* the clock jumped ahead: it wins */
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_epoch(st), 9000);
    fed_store_close(st);

    /* tools read the epoch without moving it */
    o.flags = FED_STORE_NO_EPOCH;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_epoch(st), 9000);
    fed_store_close(st);
    o.flags = FED_STORE_READONLY;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_epoch(st), 9000);
    fed_store_close(st);

    /* a wiped database starts from the wall clock again, which has moved on */
    fresh_db(path, sizeof path, "epoch.db");
    o.flags = 0;
    clk.now = 9001;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_epoch(st), 9001);
    fed_store_close(st);
}

static void test_node_key(void **state)
{
    uint8_t k1[32], k2[32], got[32];
    fed_store *st = NULL;

    (void)state;
    memset(k1, 1, 32);
    memset(k2, 2, 32);
    fed_test_log_quiet();
    assert_int_equal(fed_store_open(":memory:", NULL, &st), FED_OK);
    assert_int_equal(fed_store_node_key(st, got), FED_ERR_NOTFOUND);
    assert_int_equal(fed_store_set_node_key(st, k1), FED_OK);
    assert_int_equal(fed_store_set_node_key(st, k1), FED_OK);
    assert_int_equal(fed_store_set_node_key(st, k2), FED_ERR_KEY);
    assert_int_equal(fed_store_node_key(st, got), FED_OK);
    assert_memory_equal(got, k1, 32);
    fed_store_close(st);
    fed_log_set_sink(NULL, NULL);
}

/* -------------------------------------------------------------- rows -- */

static void test_rows_round_trip(void **state)
{
    char path[512];
    test_clock clk = {50};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_round r, got[8];
    fed_store_peer p, peers[4];
    fed_store_counter c[3] = {{"rej.replay", 4}, {"rej.aead", 0}, {"rej.member", 9}}, cl[8];
    fed_store_contrib k;
    uint8_t hdr[100];
    uint64_t v = 0;
    size_t n = 0;

    (void)state;
    fresh_db(path, sizeof path, "rows.db");
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    for (uint64_t i = 1; i <= 5; i++) {
        fill_round(&r, i);
        if (i == 3)
            r.loss = r.accuracy = NAN;
        assert_int_equal(fed_store_put_round(st, &r), FED_OK);
    }
    fill_round(&r, 2);
    r.samples = 42; /* a round redone after a crash replaces the row */
    assert_int_equal(fed_store_put_round(st, &r), FED_OK);

    memset(&k, 0, sizeof k);
    for (size_t i = 0; i < sizeof hdr; i++)
        hdr[i] = (uint8_t)i;
    k.round = 4;
    memset(k.peer_key, 0xaa, 32);
    memset(k.digest, 0xbb, 32);
    memset(k.signature, 0xcc, 64);
    k.header = hdr;
    k.header_len = sizeof hdr;
    k.accepted = 0;
    snprintf(k.reason, sizeof k.reason, "norm clipped");
    assert_int_equal(fed_store_put_contribution(st, &k), FED_OK);
    k.header_len = FED_STORE_HEADER_MAX + 1;
    assert_int_equal(fed_store_put_contribution(st, &k), FED_ERR_INVAL);
    k.header_len = sizeof hdr;
    k.round = (uint64_t)INT64_MAX + 1; /* would be stored negative */
    assert_int_equal(fed_store_put_contribution(st, &k), FED_ERR_INVAL);

    memset(&p, 0, sizeof p);
    memset(p.key, 7, 32);
    snprintf(p.addr, sizeof p.addr, "tcp://a:1");
    p.first_seen_ms = 10;
    p.last_seen_ms = 20;
    p.last_round = 3;
    p.epoch = 77;
    assert_int_equal(fed_store_put_peer(st, &p), FED_OK);
    p.first_seen_ms = 999; /* ignored on update */
    p.last_seen_ms = 30;
    p.last_round = 4;
    assert_int_equal(fed_store_put_peer(st, &p), FED_OK);
    assert_int_equal(fed_store_put_counters(st, c, 3), FED_OK);
    c[0].value = 5;
    assert_int_equal(fed_store_put_counters(st, c, 1), FED_OK);
    fed_store_close(st);

    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_last_rounds(st, got, 3, &n), FED_OK);
    assert_int_equal(n, 3);
    assert_int_equal(got[0].round, 5);
    assert_int_equal(got[1].round, 4);
    assert_int_equal(got[2].round, 3);
    assert_true(isnan(got[2].loss) && isnan(got[2].accuracy));
    fill_round(&r, 5);
    assert_memory_equal(&got[0], &r, sizeof r);
    assert_int_equal(fed_store_get_round(st, 2, &r), FED_OK);
    assert_int_equal(r.samples, 42);
    assert_int_equal(fed_store_get_round(st, 99, &r), FED_ERR_NOTFOUND);

    assert_int_equal(fed_store_list_peers(st, peers, 4, &n), FED_OK);
    assert_int_equal(n, 1);
    assert_int_equal(peers[0].first_seen_ms, 10);
    assert_int_equal(peers[0].last_seen_ms, 30);
    assert_int_equal(peers[0].last_round, 4);
    assert_int_equal(peers[0].epoch, 77);

    assert_int_equal(fed_store_list_counters(st, cl, 8, &n), FED_OK);
    assert_int_equal(n, 3);
    assert_string_equal(cl[0].name, "rej.aead");
    assert_int_equal(fed_store_get_counter(st, "rej.replay", &v), FED_OK);
    assert_int_equal(v, 5);
    assert_int_equal(fed_store_get_counter(st, "rej.none", &v), FED_ERR_NOTFOUND);
    fed_store_close(st);
}

static int count_contrib(void *ctx, const fed_store_contrib *c)
{
    int *n = ctx;

    assert_int_equal(c->header_len, 100);
    assert_int_equal(c->header[99], 99);
    assert_string_equal(c->reason, "norm clipped");
    assert_int_equal(c->accepted, 0);
    (*n)++;
    return 0;
}

static int count_rows(void *ctx, const fed_store_contrib *c)
{
    (void)c;
    (*(int *)ctx)++;
    return 0;
}

/* A node's memory does not grow with its database: the page cache stays
 * within FED_STORE_CACHE_KIB however many rows a long run adds (a soak found
 * it growing ~0.5 MiB a minute, to ~31 MiB), for a new file and a reopened
 * one (both take the file's page size after SQLite sized the cache). */
static void test_page_cache_bounded(void **state)
{
    char path[512];
    fed_store_opts o;
    fed_store *st = NULL;
    uint8_t hdr[200] = {0};
    const size_t cap = (size_t)FED_STORE_CACHE_KIB * 1024 + 2 * (FED_STORE_PAGE_SIZE + 1024);

    (void)state;
    fed_store_opts_default(&o);
    o.sync = FED_STORE_SYNC_OFF;
    fed_test_path(path, sizeof path, "cache.db");
    for (int pass = 0; pass < 2; pass++) {
        assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
        assert_int_equal(fed_store_page_size(st), FED_STORE_PAGE_SIZE);
        for (uint64_t r = 1; r <= 1500; r++) {
            assert_int_equal(fed_store_begin(st), FED_OK);
            for (int k = 0; k < 8; k++) {
                fed_store_contrib c = {.round = r + 1500 * (uint64_t)pass, .header = hdr,
                                       .header_len = sizeof hdr, .accepted = 1};

                c.peer_key[0] = (uint8_t)k;
                assert_int_equal(fed_store_put_contribution(st, &c), FED_OK);
            }
            assert_int_equal(fed_store_commit(st), FED_OK);
        }
        /* read every row back: the whole table passes through the cache */
        {
            int n = 0;

            assert_int_equal(fed_store_each_contribution(st, 0, count_rows, &n), FED_OK);
            assert_int_equal(n, 12000 * (pass + 1));
        }
        if (fed_store_cache_bytes(st) > cap)
            fail_msg("pass %d: page cache %zu bytes, over %zu", pass, fed_store_cache_bytes(st),
                     cap);
        assert_true(fed_store_cache_bytes(st) > 0);
        fed_store_close(st);
    }
}

static void test_contributions_read(void **state)
{
    char path[512];
    test_clock clk = {60};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    int n = 0;

    (void)state;
    fed_test_path(path, sizeof path, "rows.db"); /* written by the test before */
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_each_contribution(st, 0, count_contrib, &n), FED_OK);
    assert_int_equal(n, 1);
    n = 0; /* it is of round 4 */
    assert_int_equal(fed_store_each_contribution(st, 4, count_contrib, &n), FED_OK);
    assert_int_equal(n, 1);
    n = 0;
    assert_int_equal(fed_store_each_contribution(st, 5, count_contrib, &n), FED_OK);
    assert_int_equal(n, 0);
    n = 0;
    assert_int_equal(fed_store_each_contribution(st, UINT64_MAX, count_contrib, &n), FED_OK);
    assert_int_equal(n, 0);
    fed_store_close(st);
    /* a round edited to a negative one: every row (0) still reaches verify */
    {
        sqlite3 *db = raw_open(path);

        raw_exec(db, "UPDATE contributions SET round = -1");
        sqlite3_close(db);
    }
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    n = 0;
    assert_int_equal(fed_store_each_contribution(st, 0, count_contrib, &n), FED_OK);
    assert_int_equal(n, 1);
    n = 0;
    assert_int_equal(fed_store_each_contribution(st, 1, count_contrib, &n), FED_OK);
    assert_int_equal(n, 0);
    fed_store_close(st);
}

/* v6: a contribution keeps the privacy budget its client reported with it
 * (none: NULL, read back 0); a v5 file opened read-only reads without it,
 * and a read-write open migrates it. */
typedef struct dp_rows {
    double eps[4], budget[4];
    int n;
} dp_rows;

static int keep_dp_report(void *ctx, const fed_store_contrib *c)
{
    dp_rows *d = ctx;

    if (d->n < 4) {
        d->eps[d->n] = c->dp_epsilon;
        d->budget[d->n] = c->dp_budget;
    }
    d->n++;
    return 0;
}

static void test_contribution_dp_report(void **state)
{
    char path[512];
    test_clock clk = {70};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_contrib k;
    dp_rows d;
    sqlite3 *db;

    (void)state;
    fresh_db(path, sizeof path, "dp_report.db");
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    memset(&k, 0, sizeof k);
    k.round = 3;
    memset(k.peer_key, 0x11, 32);
    k.accepted = 1;
    k.dp_epsilon = 1.8597;
    k.dp_budget = 1.9;
    assert_int_equal(fed_store_put_contribution(st, &k), FED_OK);
    k.dp_epsilon = k.dp_budget = 0; /* no report */
    assert_int_equal(fed_store_put_contribution(st, &k), FED_OK);
    k.dp_budget = -1;
    assert_int_equal(fed_store_put_contribution(st, &k), FED_ERR_INVAL);
    k.dp_budget = 0;
    k.dp_epsilon = NAN;
    assert_int_equal(fed_store_put_contribution(st, &k), FED_ERR_INVAL);
    memset(&d, 0, sizeof d);
    assert_int_equal(fed_store_each_contribution(st, 0, keep_dp_report, &d), FED_OK);
    assert_int_equal(d.n, 2);
    assert_true(d.eps[0] == 1.8597 && d.budget[0] == 1.9 && d.eps[1] == 0 && d.budget[1] == 0);
    fed_store_close(st);
    db = raw_open(path);
    assert_int_equal(raw_int(db, "SELECT count(*) FROM contributions WHERE dp_epsilon IS NULL"),
                     1);
    /* back to a v5 file: read-only, its rows without a report */
    raw_exec(db, "ALTER TABLE contributions DROP COLUMN dp_epsilon;"
                 "ALTER TABLE contributions DROP COLUMN dp_budget; DROP TABLE round_metrics;"
                 "PRAGMA user_version = 5; UPDATE meta SET value = 5 WHERE key = 'schema_version';");
    sqlite3_close(db);
    o.flags = FED_STORE_READONLY;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_schema(st), 5);
    memset(&d, 0, sizeof d);
    assert_int_equal(fed_store_each_contribution(st, 0, keep_dp_report, &d), FED_OK);
    assert_int_equal(d.n, 2);
    assert_true(d.eps[0] == 0 && d.budget[0] == 0);
    fed_store_close(st);
    o.flags = 0; /* read-write: migrated to v6 (and on), the columns back (NULL) */
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_schema(st), FED_STORE_SCHEMA_VERSION);
    k.dp_epsilon = 0.5;
    k.dp_budget = 2;
    assert_int_equal(fed_store_put_contribution(st, &k), FED_OK);
    memset(&d, 0, sizeof d);
    assert_int_equal(fed_store_each_contribution(st, 0, keep_dp_report, &d), FED_OK);
    assert_int_equal(d.n, 3);
    assert_true(d.eps[0] == 0 && d.eps[2] == 0.5 && d.budget[2] == 2);
    fed_store_close(st);
}

typedef struct metrics_seen {
    size_t n;
    uint64_t round[8];
    char name[8][24];
    double value[8];
} metrics_seen;

static int keep_metric(void *ctx, uint64_t round, const char *name, double value)
{
    metrics_seen *m = ctx;

    if (m->n == 8)
        return 1;
    m->round[m->n] = round;
    snprintf(m->name[m->n], sizeof m->name[m->n], "%s", name);
    m->value[m->n++] = value;
    return 0;
}

/* v7: a round's figures by name, the newest evaluated round's, the best
 * round by a figure (higher or lower better, the earliest of equals), NaN
 * as NULL; a v6 file read-only has none, and migrates. */
static void test_round_metrics(void **state)
{
    char path[512];
    test_clock clk = {70};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    metrics_seen m = {0};
    uint64_t round;
    double v;
    sqlite3 *db;

    (void)state;
    fresh_db(path, sizeof path, "metrics.db");
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_best_metric(st, "auc", 1, &round, &v), FED_ERR_NOTFOUND);
    assert_int_equal(fed_store_each_metric(st, UINT64_MAX, keep_metric, &m), FED_OK);
    assert_int_equal(m.n, 0);
    assert_int_equal(fed_store_put_metric(st, 1, "auc", 0.7), FED_OK);
    assert_int_equal(fed_store_put_metric(st, 1, "loss", 0.9), FED_OK);
    assert_int_equal(fed_store_put_metric(st, 2, "auc", 0.8), FED_OK);
    assert_int_equal(fed_store_put_metric(st, 2, "loss", 0.5), FED_OK);
    assert_int_equal(fed_store_put_metric(st, 2, "recall.1", NAN), FED_OK);
    assert_int_equal(fed_store_put_metric(st, 4, "auc", 0.8), FED_OK);
    assert_int_equal(fed_store_put_metric(st, 4, "loss", 0.6), FED_OK);
    assert_int_equal(fed_store_each_metric(st, 3, keep_metric, &m), FED_OK);
    assert_int_equal(m.n, 3); /* round 2's, in the order written */
    assert_true(m.round[0] == 2 && !strcmp(m.name[0], "auc") && m.value[0] == 0.8);
    assert_true(!strcmp(m.name[2], "recall.1") && isnan(m.value[2]));
    memset(&m, 0, sizeof m);
    assert_int_equal(fed_store_each_metric(st, UINT64_MAX, keep_metric, &m), FED_OK);
    assert_true(m.n == 2 && m.round[0] == 4);
    assert_int_equal(fed_store_best_metric(st, "auc", 1, &round, &v), FED_OK);
    assert_true(round == 2 && v == 0.8); /* 2 and 4 equal: the earlier */
    assert_int_equal(fed_store_best_metric(st, "loss", 0, &round, &v), FED_OK);
    assert_true(round == 2 && v == 0.5);
    assert_int_equal(fed_store_best_metric(st, "recall.1", 1, &round, &v), FED_ERR_NOTFOUND);
    assert_int_equal(fed_store_put_metric(st, 4, "auc", 0.9), FED_OK); /* replaced */
    assert_int_equal(fed_store_best_metric(st, "auc", 1, &round, &v), FED_OK);
    assert_true(round == 4 && v == 0.9);
    fed_store_close(st);
    db = raw_open(path);
    raw_exec(db, "DROP TABLE round_metrics; PRAGMA user_version = 6;"
                 " UPDATE meta SET value = 6 WHERE key = 'schema_version';");
    sqlite3_close(db);
    o.flags = FED_STORE_READONLY;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    memset(&m, 0, sizeof m);
    assert_int_equal(fed_store_each_metric(st, UINT64_MAX, keep_metric, &m), FED_OK);
    assert_int_equal(m.n, 0);
    assert_int_equal(fed_store_best_metric(st, "auc", 1, &round, &v), FED_ERR_NOTFOUND);
    fed_store_close(st);
    o.flags = 0;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_schema(st), 7);
    assert_int_equal(fed_store_put_metric(st, 5, "auc", 0.5), FED_OK);
    fed_store_close(st);
}

/* Retention holds the caller's best round and the rounds from from_round
 * on, beside keep_last; a hold moved lets the old one go at the next
 * write. Text in meta, and its absence. */
static void test_retention_holds(void **state)
{
    char path[512], text[16];
    test_clock clk = {100};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_ckpt_row rows[16];
    size_t n = 0;

    (void)state;
    fresh_db(path, sizeof path, "holds.db");
    o.keep_last = 1;
    o.chunk_bytes = 8192;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    fed_store_hold_checkpoints(st, 2, 6); /* best 2; 6 on not judged */
    write_ckpts(st, 1, 8, 1);
    assert_int_equal(fed_store_list_checkpoints(st, rows, 16, &n), FED_OK);
    assert_int_equal(n, 8);
    for (size_t i = 0; i < n; i++) /* newest first: round 8 - i */
        assert_int_equal(rows[i].pruned, !(rows[i].round == 2 || rows[i].round >= 6));
    fed_store_hold_checkpoints(st, 7, 9); /* a new best: 2 goes, 7 stays */
    write_ckpts(st, 9, 1, 1);
    assert_int_equal(fed_store_list_checkpoints(st, rows, 16, &n), FED_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(rows[i].pruned, !(rows[i].round == 7 || rows[i].round == 9));
    fed_store_hold_checkpoints(st, 0, 0); /* none: keep_last alone */
    write_ckpts(st, 10, 1, 1);
    assert_int_equal(fed_store_list_checkpoints(st, rows, 16, &n), FED_OK);
    for (size_t i = 0; i < n; i++)
        assert_int_equal(rows[i].pruned, rows[i].round != 10);
    assert_int_equal(fed_store_meta_text(st, "best_metric", text, sizeof text), FED_ERR_NOTFOUND);
    assert_int_equal(fed_store_put_meta_text(st, "best_metric", "auc"), FED_OK);
    assert_int_equal(fed_store_put_meta_text(st, "best_metric", "youden_sensitivity"), FED_OK);
    assert_int_equal(fed_store_meta_text(st, "best_metric", text, sizeof text), FED_OK);
    assert_string_equal(text, "youden_sensitiv"); /* cut to the room given */
    assert_int_equal(fed_store_meta_text(st, "epoch", text, sizeof text), FED_ERR_NOTFOUND);
    fed_store_close(st);
}

static void test_transactions(void **state)
{
    char path[512];
    test_clock clk = {70};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_round r;
    fed_store_ckpt c;
    sections x;

    (void)state;
    fresh_db(path, sizeof path, "tx.db");
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_commit(st), FED_ERR_INVAL);
    assert_int_equal(fed_store_begin(st), FED_OK);
    assert_int_equal(fed_store_begin(st), FED_ERR_INVAL);
    fill_round(&r, 1);
    assert_int_equal(fed_store_put_round(st, &r), FED_OK);
    make_sections(&x, 1, 1);
    assert_int_equal(fed_store_checkpoint_write(st, 1, x.s, 3, NULL), FED_OK);
    fed_store_rollback(st);
    assert_false(fed_store_in_tx(st));
    assert_int_equal(fed_store_get_round(st, 1, &r), FED_ERR_NOTFOUND);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_ERR_NOTFOUND);

    assert_int_equal(fed_store_begin(st), FED_OK);
    assert_int_equal(fed_store_put_round(st, &r), FED_OK);
    assert_int_equal(fed_store_checkpoint_write(st, 1, x.s, 3, NULL), FED_OK);
    /* a failed checkpoint inside the round is undone alone */
    x.s[1].name = "bad name!";
    assert_int_equal(fed_store_checkpoint_write(st, 1, x.s, 3, NULL), FED_ERR_INVAL);
    assert_int_equal(fed_store_commit(st), FED_OK);
    fed_store_close(st);
    free_sections(&x);

    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_get_round(st, 1, &r), FED_OK);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_OK);
    assert_int_equal(c.id, 1);
    fed_store_ckpt_fini(&c);
    fed_store_close(st);
}

/* -------------------------------------------------------- checkpoints -- */

static void test_checkpoint_round_trip(void **state)
{
    char path[512];
    test_clock clk = {80};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_ckpt c;
    fed_store_ckpt_row rows[8];
    uint8_t h[3][32];
    size_t n = 0;
    sections x;
    sqlite3 *db;

    (void)state;
    fresh_db(path, sizeof path, "ckpt.db");
    o.chunk_bytes = 4096;
    o.keep_last = 0;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    for (uint64_t r = 1; r <= 3; r++) {
        make_sections(&x, r, r);
        assert_int_equal(fed_store_checkpoint_write(st, r * 10, x.s, 3, h[r - 1]), FED_OK);
        free_sections(&x);
    }
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_OK);
    make_sections(&x, 3, 3);
    assert_int_equal(c.id, 3);
    assert_int_equal(c.round, 30);
    assert_int_equal(c.epoch, 80);
    assert_memory_equal(c.hash, h[2], 32);
    assert_memory_equal(c.prev_hash, h[1], 32);
    assert_ckpt_matches(&c, &x);
    /* the stored bytes hash (BLAKE2b-256, unkeyed) to the row's hash */
    {
        uint8_t again[32];
        fed_store_ckpt p;

        assert_int_equal(c.buf[8], FED_CKPT_VERSION);
        assert_int_equal(crypto_generichash(again, 32, c.buf, c.len, NULL, 0), 0);
        assert_memory_equal(again, h[2], 32);
        assert_int_equal(fed_store_ckpt_parse(c.buf, c.len, &p), FED_OK);
        assert_int_equal(p.round, 30);
    }
    free_sections(&x);
    fed_store_ckpt_fini(&c);
    fed_store_ckpt_fini(&c); /* twice is fine */

    assert_int_equal(fed_store_checkpoint_of_round(st, 20, &c, NULL), FED_OK);
    make_sections(&x, 2, 2);
    assert_ckpt_matches(&c, &x);
    assert_memory_equal(c.prev_hash, h[0], 32);
    free_sections(&x);
    fed_store_ckpt_fini(&c);
    assert_int_equal(fed_store_checkpoint_of_round(st, 25, &c, NULL), FED_ERR_NOTFOUND);

    assert_int_equal(fed_store_list_checkpoints(st, rows, 8, &n), FED_OK);
    assert_int_equal(n, 3);
    assert_int_equal(rows[0].id, 3);
    assert_memory_equal(rows[0].prev_hash, rows[1].hash, 32);
    assert_memory_equal(rows[1].prev_hash, rows[2].hash, 32);
    assert_int_equal(fed_store_verify_checkpoints(st, NULL, &n), FED_OK);
    assert_int_equal(n, 3);
    fed_store_close(st);

    db = raw_open(path);
    /* 3 rounds of sections: (10003+17+4097) + ... in 4096-byte chunks */
    assert_true(raw_int(db, "SELECT count(*) FROM checkpoint_chunks WHERE ckpt = 3") > 10);
    assert_int_equal(raw_int(db, "SELECT max(length(data)) FROM checkpoint_chunks"), 4096);
    sqlite3_close(db);
}

/* Flip one byte (offset 100) of chunk idx of checkpoint id, as bit rot would. */
static void flip_chunk_byte(const char *path, int id, int idx)
{
    char sql[160];
    sqlite3 *db = raw_open(path);
    sqlite3_blob *b = NULL;
    uint8_t byte;

    snprintf(sql, sizeof sql, "SELECT rowid FROM checkpoint_chunks WHERE ckpt = %d AND idx = %d",
             id, idx);
    assert_int_equal(sqlite3_blob_open(db, "main", "checkpoint_chunks", "data",
                                       raw_int(db, sql), 1, &b), SQLITE_OK);
    assert_int_equal(sqlite3_blob_read(b, &byte, 1, 100), SQLITE_OK);
    byte ^= 0x5a;
    assert_int_equal(sqlite3_blob_write(b, &byte, 1, 100), SQLITE_OK);
    sqlite3_blob_close(b);
    sqlite3_close(db);
}

/* Byte off of checkpoint id's first chunk set to v (its version is at 8). */
static void poke_first_chunk(const char *path, int id, int off, uint8_t v)
{
    char sql[160];
    sqlite3 *db = raw_open(path);
    sqlite3_blob *b = NULL;

    snprintf(sql, sizeof sql, "SELECT rowid FROM checkpoint_chunks WHERE ckpt = %d AND idx = 0",
             id);
    assert_int_equal(sqlite3_blob_open(db, "main", "checkpoint_chunks", "data",
                                       raw_int(db, sql), 1, &b), SQLITE_OK);
    assert_int_equal(sqlite3_blob_write(b, &v, 1, off), SQLITE_OK);
    sqlite3_blob_close(b);
    sqlite3_close(db);
}

/* Rewrite checkpoint id (one chunk of its blob's first 4096 bytes at least)
 * as version 1 wrote it: version field 1, row hash its SHA-256. */
static void make_version1(const char *path, int id, uint8_t sha[32])
{
    char sql[160];
    sqlite3 *db;
    sqlite3_stmt *q = NULL;
    crypto_hash_sha256_state hs;

    poke_first_chunk(path, id, 8, 1); /* the version's low byte; the others are 0 */
    db = raw_open(path);
    crypto_hash_sha256_init(&hs);
    snprintf(sql, sizeof sql, "SELECT data FROM checkpoint_chunks WHERE ckpt = %d ORDER BY idx",
             id);
    assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &q, NULL), SQLITE_OK);
    while (sqlite3_step(q) == SQLITE_ROW)
        crypto_hash_sha256_update(&hs, sqlite3_column_blob(q, 0),
                                  (unsigned long long)sqlite3_column_bytes(q, 0));
    sqlite3_finalize(q);
    crypto_hash_sha256_final(&hs, sha);
    assert_int_equal(sqlite3_prepare_v2(db, "UPDATE checkpoints SET hash = ? WHERE id = ?", -1,
                                        &q, NULL), SQLITE_OK);
    sqlite3_bind_blob(q, 1, sha, 32, SQLITE_STATIC);
    sqlite3_bind_int(q, 2, id);
    assert_int_equal(sqlite3_step(q), SQLITE_DONE);
    sqlite3_finalize(q);
    sqlite3_close(db);
}

/* A database written before BLAKE2b: its version-1 checkpoint (SHA-256)
 * still verifies and loads, a new one chains onto it, and a version no
 * build wrote is a fault that names it. */
static void test_checkpoint_version1_still_read(void **state)
{
    char path[512];
    test_clock clk = {85};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_ckpt c;
    fed_store_faults f;
    uint8_t v1[32];
    sections x;
    size_t n = 0;

    (void)state;
    fed_test_log_quiet();
    fresh_db(path, sizeof path, "v1.db");
    o.chunk_bytes = 4096;
    o.keep_last = 0;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    write_ckpts(st, 1, 1, 2);
    fed_store_close(st);
    make_version1(path, 1, v1);

    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_OK);
    assert_int_equal(c.id, 1);
    assert_int_equal(c.buf[8], 1);
    assert_memory_equal(c.hash, v1, 32);
    make_sections(&x, 1, 2);
    assert_ckpt_matches(&c, &x);
    free_sections(&x);
    fed_store_ckpt_fini(&c);
    write_ckpts(st, 2, 1, 2); /* version 2, linked to the SHA-256 of version 1 */
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_OK);
    assert_int_equal(c.id, 2);
    assert_int_equal(c.buf[8], FED_CKPT_VERSION);
    assert_memory_equal(c.prev_hash, v1, 32);
    fed_store_ckpt_fini(&c);
    assert_int_equal(fed_store_verify_checkpoints(st, NULL, &n), FED_OK);
    assert_int_equal(n, 2);
    fed_store_close(st);

    /* checkpoint 2 relabelled version 1, its row keeping the BLAKE2b hash:
       hashed as version 1 says, it does not match */
    poke_first_chunk(path, 2, 8, 1);
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, &f), FED_OK);
    assert_int_equal(c.id, 1);
    fed_store_ckpt_fini(&c);
    assert_int_equal(f.n, 1);
    assert_int_equal(f.v[0].id, 2);
    assert_int_equal(f.v[0].err, FED_ERR_CORRUPT);
    assert_non_null(strstr(f.v[0].what, "hash does not match"));
    fed_store_close(st);
    poke_first_chunk(path, 2, 8, FED_CKPT_VERSION); /* as written */

    /* version 3 in checkpoint 1: no hash to check it with, so a fault */
    poke_first_chunk(path, 1, 8, 3);
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_verify_checkpoints(st, &f, &n), FED_ERR_CORRUPT);
    assert_int_equal(f.n, 1);
    assert_int_equal(f.v[0].id, 1);
    assert_int_equal(f.v[0].err, FED_ERR_VERSION);
    assert_non_null(strstr(f.v[0].what, "header"));
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_checkpoint_of_round(st, 1, &c, &f), FED_ERR_NOTFOUND);
    assert_int_equal(f.n, 1);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_OK);
    assert_int_equal(c.id, 2);
    fed_store_ckpt_fini(&c);
    fed_store_close(st);
    fed_log_set_sink(NULL, NULL);
}

static void test_corrupt_chunk_skipped(void **state)
{
    char path[512];
    test_clock clk = {90};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_ckpt c;
    fed_store_faults f;
    sections x;
    size_t n;

    (void)state;
    fed_test_log_quiet();
    fresh_db(path, sizeof path, "corrupt.db");
    o.chunk_bytes = 4096;
    o.keep_last = 0;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    write_ckpts(st, 1, 3, 2);
    fed_store_close(st);
    flip_chunk_byte(path, 3, 2);

    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, &f), FED_OK);
    assert_int_equal(c.id, 2);
    assert_int_equal(c.round, 2);
    make_sections(&x, 2, 2);
    assert_ckpt_matches(&c, &x);
    free_sections(&x);
    fed_store_ckpt_fini(&c);
    assert_int_equal(f.n, 1);
    assert_int_equal(f.total, 1);
    assert_int_equal(f.v[0].id, 3);
    assert_int_equal(f.v[0].err, FED_ERR_CORRUPT);
    assert_non_null(strstr(f.v[0].what, "hash does not match"));

    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_verify_checkpoints(st, &f, &n), FED_ERR_CORRUPT);
    assert_int_equal(n, 3);
    assert_int_equal(f.n, 1);
    assert_int_equal(f.v[0].id, 3);
    /* a new checkpoint still chains onto the (corrupt) newest row */
    write_ckpts(st, 4, 1, 1);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_OK);
    assert_int_equal(c.id, 4);
    fed_store_ckpt_fini(&c);
    fed_store_close(st);

    /* a row whose size was zeroed (and its chunks gone): skipped, not allocated */
    {
        sqlite3 *db = raw_open(path);

        raw_exec(db, "UPDATE checkpoints SET size = 0, chunks = 0 WHERE id = 4;"
                     "DELETE FROM checkpoint_chunks WHERE ckpt = 4");
        sqlite3_close(db);
    }
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, &f), FED_OK);
    assert_int_equal(c.id, 2);
    fed_store_ckpt_fini(&c);
    assert_int_equal(f.total, 2);
    assert_int_equal(f.v[0].id, 4);
    assert_int_equal(f.v[1].id, 3);
    fed_store_close(st);
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    write_ckpts(st, 5, 1, 1); /* checkpoint 5, round 5 */
    fed_store_close(st);
    flip_chunk_byte(path, 5, 0);

    /* every blob corrupt: nothing is loaded */
    flip_chunk_byte(path, 1, 0);
    flip_chunk_byte(path, 2, 1);
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, &f), FED_ERR_NOTFOUND);
    assert_null(c.buf);
    assert_int_equal(f.total, 5);
    fed_store_close(st);
    fed_log_set_sink(NULL, NULL);
}

/* Damage at the SQLite level (a b-tree page overwritten) is told apart from
 * a hash or chain mismatch: FED_ERR_DB_DAMAGED, integrity_check's problems
 * counted and quoted, and checkpoints faulted as unreadable, not as lying. */
static void test_damaged_file(void **state)
{
    char path[512], msg[1024];
    test_clock clk = {90};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_faults f;
    sqlite3 *db;
    sqlite3_stmt *q;
    int64_t page = 0, root = 0;
    size_t n = 99;
    FILE *fp;
    uint8_t junk[16];

    (void)state;
    fed_test_log_quiet();
    fresh_db(path, sizeof path, "damaged.db");
    o.chunk_bytes = 4096;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    write_ckpts(st, 1, 2, 2);
    fed_store_close(st);
    /* overwrite the header of checkpoint_chunks' root page */
    db = raw_open(path);
    assert_int_equal(sqlite3_prepare_v2(db, "SELECT (SELECT page_size FROM pragma_page_size), "
                                            "rootpage FROM sqlite_schema WHERE name = "
                                            "'checkpoint_chunks'", -1, &q, NULL), SQLITE_OK);
    assert_int_equal(sqlite3_step(q), SQLITE_ROW);
    page = sqlite3_column_int64(q, 0);
    root = sqlite3_column_int64(q, 1);
    sqlite3_finalize(q);
    sqlite3_close(db);
    assert_true(page > 0 && root > 1);
    memset(junk, 0xff, sizeof junk);
    fp = fopen(path, "r+b");
    assert_non_null(fp);
    assert_int_equal(fseek(fp, (long)((root - 1) * page), SEEK_SET), 0);
    assert_int_equal(fwrite(junk, 1, sizeof junk, fp), sizeof junk);
    assert_int_equal(fclose(fp), 0);

    o.flags = FED_STORE_READONLY;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_integrity_check(st, msg, sizeof msg), FED_ERR_DB_DAMAGED);
    if (!strstr(msg, "database file damaged") || !strstr(msg, " problem") ||
        !strstr(msg, "btreeInitPage"))
        fail_msg("integrity_check said \"%s\"", msg);
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_verify_checkpoints(st, &f, &n), FED_ERR_DB_DAMAGED);
    assert_int_equal(n, 0); /* nothing could be read, so nothing was hashed */
    assert_int_equal(f.total, 2);
    assert_int_equal(f.v[0].err, FED_ERR_DB_DAMAGED);
    assert_string_equal(f.v[0].what, "chunk rows unreadable: database file damaged");
    assert_null(strstr(fed_strerror(FED_ERR_DB_DAMAGED), "hash"));
    fed_store_close(st);
    fed_log_set_sink(NULL, NULL);
}

static void test_chain_corruption(void **state)
{
    char path[512];
    test_clock clk = {95};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_ckpt c;
    fed_store_faults f;
    sqlite3 *db;

    (void)state;
    fed_test_log_quiet();
    fresh_db(path, sizeof path, "chain.db");
    o.keep_last = 0;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    write_ckpts(st, 1, 4, 1);
    fed_store_close(st);

    /* Someone rewrites checkpoint 3's blob and fixes up its own hash:
     * the blob verifies alone, but checkpoint 4's link no longer holds. */
    db = raw_open(path);
    raw_exec(db, "UPDATE checkpoints SET hash = randomblob(32) WHERE id = 3");
    sqlite3_close(db);

    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, &f), FED_OK);
    /* 4: link broken; 3: hash mismatch (its stored hash was replaced) */
    assert_int_equal(c.id, 2);
    fed_store_ckpt_fini(&c);
    assert_int_equal(f.n, 2);
    assert_int_equal(f.v[0].id, 4);
    assert_non_null(strstr(f.v[0].what, "chain"));
    assert_int_equal(f.v[1].id, 3);
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_verify_checkpoints(st, &f, NULL), FED_ERR_CORRUPT);
    assert_int_equal(f.total, 2);
    fed_store_close(st);

    /* a row's prev_hash edited: its link breaks */
    db = raw_open(path);
    raw_exec(db, "UPDATE checkpoints SET prev_hash = zeroblob(32) WHERE id = 2");
    sqlite3_close(db);
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, &f), FED_OK);
    assert_int_equal(c.id, 1);
    fed_store_ckpt_fini(&c);
    assert_int_equal(f.total, 3);
    fed_store_close(st);

    /* a deleted row leaves a gap the chain check names */
    db = raw_open(path);
    raw_exec(db, "DELETE FROM checkpoints WHERE id = 1");
    sqlite3_close(db);
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_verify_checkpoints(st, &f, NULL), FED_ERR_CORRUPT);
    assert_non_null(strstr(f.v[0].what, "chain"));
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_ERR_NOTFOUND);
    fed_store_close(st);
    fed_log_set_sink(NULL, NULL);
}

static void test_retention(void **state)
{
    char path[512];
    test_clock clk = {100};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_ckpt_row rows[16];
    fed_store_ckpt c;
    size_t n = 0;
    sqlite3 *db;

    (void)state;
    fresh_db(path, sizeof path, "keep.db");
    o.keep_last = 2;
    o.keep_every = 3;
    o.chunk_bytes = 8192;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    write_ckpts(st, 1, 10, 1);
    assert_int_equal(fed_store_list_checkpoints(st, rows, 16, &n), FED_OK);
    assert_int_equal(n, 10); /* every row stays */
    for (size_t i = 0; i < n; i++) {
        uint64_t id = rows[i].id;
        int kept = id >= 9 || id % 3 == 0;

        assert_int_equal(rows[i].pruned, !kept);
    }
    assert_int_equal(fed_store_verify_checkpoints(st, NULL, &n), FED_OK);
    assert_int_equal(n, 4); /* blobs of 3, 6, 9 (every 3rd) and 9, 10 (last 2) */
    assert_int_equal(fed_store_checkpoint_of_round(st, 4, &c, NULL), FED_ERR_NOTFOUND);
    assert_int_equal(fed_store_checkpoint_of_round(st, 6, &c, NULL), FED_OK);
    assert_int_equal(c.id, 6);
    fed_store_ckpt_fini(&c);
    fed_store_close(st);

    db = raw_open(path);
    assert_int_equal(raw_int(db, "SELECT count(DISTINCT ckpt) FROM checkpoint_chunks"), 4);
    assert_int_equal(raw_int(db, "SELECT count(*) FROM checkpoint_chunks WHERE ckpt"
                                 " NOT IN (3, 6, 9, 10)"), 0);
    assert_int_equal(raw_int(db, "SELECT count(*) FROM checkpoints"), 10);
    sqlite3_close(db);
}

/* ------------------------------------------------- read-only and full -- */

static void test_readonly(void **state)
{
    char path[512];
    test_clock clk = {200};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_round r;
    fed_store_ckpt c;
    sections x;

    (void)state;
    fed_test_log_quiet();
    fresh_db(path, sizeof path, "ro.db");
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    fill_round(&r, 1);
    assert_int_equal(fed_store_put_round(st, &r), FED_OK);
    write_ckpts(st, 1, 1, 1);
    fed_store_close(st);

    o.flags = FED_STORE_READONLY;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    fill_round(&r, 2);
    assert_int_equal(fed_store_put_round(st, &r), FED_ERR_READONLY);
    make_sections(&x, 2, 1);
    assert_int_equal(fed_store_checkpoint_write(st, 2, x.s, 3, NULL), FED_ERR_READONLY);
    assert_int_equal(fed_store_begin(st), FED_ERR_READONLY);
    free_sections(&x);
    assert_int_equal(fed_store_get_round(st, 1, &r), FED_OK);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_OK);
    assert_int_equal(c.round, 1);
    fed_store_ckpt_fini(&c);
    fed_store_close(st);

    /* a file the process may not write: refused at open, not at the first
     * round (root ignores file modes, so only checked as another user) */
    if (geteuid() != 0) {
        o.flags = 0;
        assert_int_equal(chmod(path, 0444), 0);
        assert_int_equal(fed_store_open(path, &o, &st), FED_ERR_READONLY);
        assert_null(st);
        assert_int_equal(chmod(path, 0644), 0);
    }

    /* a read-only open of a missing file does not create it */
    fed_test_path(path, sizeof path, "ro-missing.db");
    o.flags = FED_STORE_READONLY;
    assert_int_equal(fed_store_open(path, &o, &st), FED_ERR_NOTFOUND);
    assert_int_equal(access(path, F_OK), -1);

    /* nothing committed was lost */
    fed_test_path(path, sizeof path, "ro.db");
    o.flags = 0;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_get_round(st, 1, &r), FED_OK);
    assert_int_equal(fed_store_get_round(st, 2, &r), FED_ERR_NOTFOUND);
    fill_round(&r, 2);
    assert_int_equal(fed_store_put_round(st, &r), FED_OK);
    fed_store_close(st);
    fed_log_set_sink(NULL, NULL);
}

/* One writer a database: a second read-write open of the same file (a
 * second daemon given the same --db, fedsim or train, import's tool open)
 * is refused with FED_ERR_IN_USE before it changes anything, naming the
 * holder, in this process or another; the first open writes on unharmed, a
 * reader still reads beside it, and the close frees the file. */
static void test_one_writer(void **state)
{
    char path[512], lpath[600], buf[32];
    test_clock clk = {300};
    fed_store_opts o = opts_with_clock(&clk), ro = opts_with_clock(&clk);
    fed_store *st = NULL, *st2 = NULL, *rd = NULL;
    fed_store_round r;
    FILE *f;
    pid_t child;
    int status = -1;

    (void)state;
    fresh_db(path, sizeof path, "one-writer.db");
    snprintf(lpath, sizeof lpath, "%s.lock", path);
    remove(lpath);
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    fill_round(&r, 1);
    assert_int_equal(fed_store_put_round(st, &r), FED_OK);

    /* the lock file names the holder */
    f = fopen(lpath, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_int_equal(strtol(buf, NULL, 10), (long)getpid());

    fed_test_log_capture(FED_LOG_ERROR);
    clk.now = 400; /* a refused open must not move the epoch */
    assert_int_equal(fed_store_open(path, &o, &st2), FED_ERR_IN_USE);
    assert_null(st2);
    fed_test_log_has("one-writer.db is in use by another open in this process");
    o.flags = FED_STORE_NO_EPOCH; /* import's open writes too */
    assert_int_equal(fed_store_open(path, &o, &st2), FED_ERR_IN_USE);
    assert_null(st2);
    o.flags = 0;
    fed_test_log_default();

    /* another process is refused alike, and told this one's pid */
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        fed_store *c = NULL;
        fed_err e;

        fed_test_log_capture(FED_LOG_ERROR);
        e = fed_store_open(path, &o, &c);
        snprintf(buf, sizeof buf, "(pid %ld)", (long)getppid());
        _exit(e == FED_ERR_IN_USE && !c && strstr(fed_test_log_text(), buf) &&
                      strstr(fed_test_log_text(), "in use by another fednode process")
                  ? 0
                  : 1);
    }
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);

    /* the writer is unharmed: same epoch, writes on */
    assert_int_equal(fed_store_epoch(st), 300);
    fill_round(&r, 2);
    assert_int_equal(fed_store_put_round(st, &r), FED_OK);

    /* a reader (status, verify, export, the HTTP thread) reads beside it */
    ro.flags = FED_STORE_READONLY;
    assert_int_equal(fed_store_open(path, &ro, &rd), FED_OK);
    assert_int_equal(fed_store_get_round(rd, 2, &r), FED_OK);
    assert_int_equal(fed_store_epoch(rd), 300);
    fed_store_close(rd);

    /* the close frees the file for the next writer */
    fed_store_close(st);
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_epoch(st), 400);
    assert_int_equal(fed_store_get_round(st, 2, &r), FED_OK);
    fed_store_close(st);

    /* an in-memory database has no file to lock: two of them are two */
    assert_int_equal(fed_store_open(":memory:", NULL, &st), FED_OK);
    assert_int_equal(fed_store_open(":memory:", NULL, &st2), FED_OK);
    fed_store_close(st2);
    fed_store_close(st);
}

static void test_full_disk(void **state)
{
    char path[512];
    test_clock clk = {300};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_round r;
    fed_store_ckpt c;
    uint64_t committed = 0, round;
    fed_err e = FED_OK;
    char msg[64];

    (void)state;
    fed_test_log_quiet();
    fresh_db(path, sizeof path, "full.db");
    o.max_bytes = 48u * 65536; /* 3 MiB */
    o.keep_last = 0;
    o.chunk_bytes = 64 * 1024;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    for (round = 1; round < 100; round++) {
        sections x;

        make_sections(&x, round, 20); /* about 280 KB per checkpoint */
        fill_round(&r, round);
        e = fed_store_begin(st);
        if (e == FED_OK)
            e = fed_store_put_round(st, &r);
        if (e == FED_OK)
            e = fed_store_checkpoint_write(st, round, x.s, 3, NULL);
        if (e == FED_OK)
            e = fed_store_commit(st);
        else
            fed_store_rollback(st);
        free_sections(&x);
        if (e != FED_OK)
            break;
        committed = round;
    }
    assert_int_equal(e, FED_ERR_FULL);
    assert_true(committed >= 3);
    assert_false(fed_store_in_tx(st));
    /* the store stays usable: reads work, small writes may */
    assert_int_equal(fed_store_get_round(st, committed, &r), FED_OK);
    assert_int_equal(fed_store_get_round(st, committed + 1, &r), FED_ERR_NOTFOUND);
    fed_store_close(st);

    o.max_bytes = 0;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_store_integrity_check(st, msg, sizeof msg), FED_OK);
    assert_string_equal(msg, "ok");
    for (uint64_t i = 1; i <= committed; i++) {
        fed_store_round want;

        fill_round(&want, i);
        assert_int_equal(fed_store_get_round(st, i, &r), FED_OK);
        assert_memory_equal(&r, &want, sizeof r);
    }
    assert_int_equal(fed_store_get_round(st, committed + 1, &r), FED_ERR_NOTFOUND);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_OK);
    assert_int_equal(c.round, committed);
    {
        sections x;

        make_sections(&x, committed, 20);
        assert_ckpt_matches(&c, &x);
        free_sections(&x);
    }
    fed_store_ckpt_fini(&c);
    assert_int_equal(fed_store_verify_checkpoints(st, NULL, NULL), FED_OK);
    fed_store_close(st);
    fed_log_set_sink(NULL, NULL);
}

/* fedi_store_set_disk_full: while set, every write fails FED_ERR_FULL and
 * leaves nothing, in or out of a transaction, a row replaced in place too
 * (which a max_bytes cap lets through); reads work; cleared, writes work. */
static void test_disk_full_switch(void **state)
{
    char path[512];
    test_clock clk = {400};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_round r, want, got;
    sections x;

    (void)state;
    fed_test_log_quiet();
    fresh_db(path, sizeof path, "diskfull.db");
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    fill_round(&want, 1);
    assert_int_equal(fed_store_put_round(st, &want), FED_OK);

    fedi_store_set_disk_full(st, 1);
    r = want;
    r.accuracy = 0.875;
    assert_int_equal(fed_store_put_round(st, &r), FED_ERR_FULL);
    assert_int_equal(fed_store_begin(st), FED_OK);
    fill_round(&r, 2);
    assert_int_equal(fed_store_put_round(st, &r), FED_OK);
    assert_int_equal(fed_store_commit(st), FED_ERR_FULL);
    assert_false(fed_store_in_tx(st));
    make_sections(&x, 2, 1);
    assert_int_equal(fed_store_checkpoint_write(st, 2, x.s, 3, NULL), FED_ERR_FULL);
    free_sections(&x);
    assert_int_equal(fed_store_get_round(st, 1, &got), FED_OK);
    assert_memory_equal(&got, &want, sizeof got);
    assert_int_equal(fed_store_get_round(st, 2, &got), FED_ERR_NOTFOUND);
    {
        fed_store_ckpt_row rows[2];
        size_t n = 1;

        assert_int_equal(fed_store_list_checkpoints(st, rows, 2, &n), FED_OK);
        assert_int_equal(n, 0);
    }

    fedi_store_set_disk_full(st, 0);
    r = want;
    r.accuracy = 0.875;
    assert_int_equal(fed_store_put_round(st, &r), FED_OK);
    assert_int_equal(fed_store_get_round(st, 1, &got), FED_OK);
    assert_true(got.accuracy == 0.875);
    fed_store_close(st);
    fed_log_set_sink(NULL, NULL);
}

/* -------------------------------------------------- allocation faults -- */

static void test_alloc_failures(void **state)
{
    char path[512];
    test_clock clk = {400};
    fed_store_opts o = opts_with_clock(&clk);
    fed_store *st = NULL;
    fed_store_ckpt c;
    sections x;
    unsigned long n;
    fed_err e;

    (void)state;
    fed_test_log_quiet();
    fresh_db(path, sizeof path, "alloc.db");
    o.chunk_bytes = 4096;
    o.keep_last = 0;
    /* open */
    for (n = 1;; n++) {
        fed_alloc_fail_nth(n, 0);
        e = fed_store_open(path, &o, &st);
        fed_alloc_fail_nth(0, 0);
        if (e == FED_OK)
            break;
        assert_int_equal(e, FED_ERR_NOMEM);
        assert_null(st);
    }
    assert_true(n > 1);
    /* write: chunks straddling sections need the staging buffer */
    make_sections(&x, 1, 1);
    for (n = 1;; n++) {
        fed_alloc_fail_nth(n, 0);
        e = fed_store_checkpoint_write(st, 1, x.s, 3, NULL);
        fed_alloc_fail_nth(0, 0);
        if (e == FED_OK)
            break;
        assert_int_equal(e, FED_ERR_NOMEM);
        assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_ERR_NOTFOUND);
    }
    assert_true(n > 1);
    /* load and verify */
    for (n = 1;; n++) {
        fed_alloc_fail_nth(n, 0);
        e = fed_store_latest_valid_checkpoint(st, &c, NULL);
        fed_alloc_fail_nth(0, 0);
        if (e == FED_OK)
            break;
        assert_int_equal(e, FED_ERR_NOMEM);
        assert_null(c.buf);
    }
    assert_true(n > 1);
    assert_ckpt_matches(&c, &x);
    fed_store_ckpt_fini(&c);
    for (n = 1;; n++) {
        fed_alloc_fail_nth(n, 0);
        e = fed_store_verify_checkpoints(st, NULL, NULL);
        fed_alloc_fail_nth(0, 0);
        if (e == FED_OK)
            break;
        assert_int_equal(e, FED_ERR_NOMEM);
    }
    free_sections(&x);
    fed_store_close(st);
    fed_log_set_sink(NULL, NULL);
}

/* ------------------------------------------------ checkpoint format -- */

static void test_ckpt_parse_rejects(void **state)
{
    fed_store *st = NULL;
    fed_store_ckpt c, p;
    uint8_t *b;
    size_t len;
    sections x;

    (void)state;
    assert_int_equal(fed_store_open(":memory:", NULL, &st), FED_OK);
    make_sections(&x, 5, 1);
    assert_int_equal(fed_store_checkpoint_write(st, 5, x.s, 3, NULL), FED_OK);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, NULL), FED_OK);
    len = c.len;
    b = fed_alloc_aligned(len);
    assert_non_null(b);
#define MUTATE(stmt, code)                                                     \
    do {                                                                       \
        memcpy(b, c.buf, len);                                                 \
        stmt;                                                                  \
        assert_int_equal(fed_store_ckpt_parse(b, len, &p), code);              \
    } while (0)
    MUTATE((void)0, FED_OK);
    MUTATE(b[0] = 'X', FED_ERR_MAGIC);
    MUTATE(b[8] = 0, FED_ERR_VERSION);
    MUTATE(b[8] = 1, FED_OK); /* version 1: the same bytes, hashed with SHA-256 */
    MUTATE(b[8] = 3, FED_ERR_VERSION);
    MUTATE(b[12] = 0, FED_ERR_FORMAT);              /* no sections */
    MUTATE(b[12] = 65, FED_ERR_FORMAT);             /* too many */
    MUTATE(b[12] = 4, FED_ERR_FORMAT);              /* table and total disagree */
    MUTATE(b[56] ^= 1, FED_ERR_FORMAT);             /* total length */
    MUTATE(b[64] = ' ', FED_ERR_FORMAT);            /* bad name character */
    MUTATE(b[64 + 31] = 'x', FED_ERR_FORMAT);       /* name not terminated */
    MUTATE(b[64 + 20] = 'x', FED_ERR_FORMAT);       /* junk after the NUL */
    MUTATE(memcpy(b + 104, b + 64, 32), FED_ERR_FORMAT); /* duplicate name */
    MUTATE(b[64 + 32] ^= 1, FED_ERR_FORMAT);        /* a section length */
    MUTATE(b[64 + 32 + 7] = 0x80, FED_ERR_FORMAT);  /* a huge length */
    MUTATE(b[64 + 3 * 40] = 1, FED_ERR_FORMAT);     /* padding not zero */
    assert_int_equal(fed_store_ckpt_parse(b, 63, &p), FED_ERR_TRUNCATED);
    assert_int_equal(fed_store_ckpt_parse(b, len - 1, &p), FED_ERR_FORMAT);
#undef MUTATE
    fed_free(b);
    fed_store_ckpt_fini(&c);
    /* bad arguments */
    x.s[1].name = x.s[0].name;
    assert_int_equal(fed_store_checkpoint_write(st, 6, x.s, 3, NULL), FED_ERR_INVAL);
    x.s[1].name = "";
    assert_int_equal(fed_store_checkpoint_write(st, 6, x.s, 3, NULL), FED_ERR_INVAL);
    x.s[1].name = "0123456789012345678901234567890123";
    assert_int_equal(fed_store_checkpoint_write(st, 6, x.s, 3, NULL), FED_ERR_INVAL);
    assert_int_equal(fed_store_checkpoint_write(st, 6, x.s, 0, NULL), FED_ERR_INVAL);
    free_sections(&x);
    fed_store_close(st);
}

/* -------------------------------------------------------- safetensors -- */

/* A hand-made table: a conv weight, a bias, a linear weight (non-contiguous
 * order in the flat buffer is allowed: offsets come from the table). */
static const fed_tensor_info st_table[] = {
#define ST_FLAGS (FED_TENSOR_TRAINED | FED_TENSOR_SHARED)
    {"0.weight", 0, 2 * 1 * 3 * 3, 4, {2, 1, 3, 3}, ST_FLAGS},
    {"0.bias", 18, 2, 1, {2}, ST_FLAGS},
    {"3.weight", 20, 5 * 8, 2, {5, 8}, ST_FLAGS},
    {"3.bias", 60, 5, 1, {5}, ST_FLAGS},
};
#define ST_NT 4
#define ST_NPARAMS 65

static void st_fill(float *p, uint64_t seed)
{
    fed_rng r;

    fed_rng_seed(&r, seed);
    for (int i = 0; i < ST_NPARAMS; i++)
        p[i] = (float)fed_rng_normal(&r);
    p[0] = -0.0f;          /* sign of zero kept */
    p[1] = 1.0e-41f;       /* a subnormal kept */
    p[2] = 3.4028235e38f;  /* FLT_MAX */
}

static fed_store_st_model st_model(const float *p)
{
    fed_store_st_model m = {"mlp:8", {1, 3, 3, 5, 0}, st_table, ST_NT, p, FED_ST_INPUT_UNSAID,
                            NULL, NULL, 0, NULL};

    return m;
}

static void test_safetensors_round_trip(void **state)
{
    float p[ST_NPARAMS], q[ST_NPARAMS];
    fed_store_st_model m;
    fed_store_st_file f;
    uint8_t *buf = NULL;
    size_t len = 0, size = 0;
    char path[512];
    const char *want =
        "{\"__metadata__\":{\"fednode.spec\":\"mlp:8\",\"fednode.input\":\"1,3,3\","
        "\"fednode.classes\":\"5\"},"
        "\"0.weight\":{\"dtype\":\"F32\",\"shape\":[2,1,3,3],\"data_offsets\":[0,72]},"
        "\"0.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[72,80]},"
        "\"3.weight\":{\"dtype\":\"F32\",\"shape\":[5,8],\"data_offsets\":[80,240]},"
        "\"3.bias\":{\"dtype\":\"F32\",\"shape\":[5],\"data_offsets\":[240,260]}}";
    uint64_t hlen = 0;

    (void)state;
    st_fill(p, 1);
    m = st_model(p);
    assert_int_equal(fed_store_safetensors_size(&m, &size), FED_OK);
    assert_int_equal(fed_store_safetensors_encode(&m, &buf, &len), FED_OK);
    assert_int_equal(len, size);
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | buf[i];
    assert_int_equal(hlen % 8, 0);
    assert_int_equal(len, 8 + hlen + 4 * ST_NPARAMS);
    assert_memory_equal(buf + 8, want, strlen(want));
    for (size_t i = 8 + strlen(want); i < 8 + hlen; i++)
        assert_int_equal(buf[i], ' ');
    /* data: little-endian float32, tensor by tensor */
    assert_memory_equal(buf + 8 + hlen, p, sizeof p);

    assert_int_equal(fed_store_safetensors_parse(buf, len, &f), FED_OK);
    assert_string_equal(f.spec, "mlp:8");
    assert_int_equal(f.input.c, 1);
    assert_int_equal(f.input.h, 3);
    assert_int_equal(f.input.w, 3);
    assert_int_equal(f.input.classes, 5);
    assert_int_equal(f.ntensors, ST_NT);
    assert_int_equal(f.tensors[0].ndim, 4);
    assert_int_equal(f.tensors[0].shape[3], 3);
    memset(q, 0xff, sizeof q);
    assert_int_equal(fed_store_safetensors_to_params(&f, st_table, ST_NT, "mlp:8", q), FED_OK);
    assert_memory_equal(p, q, sizeof p); /* bit-exact, -0.0 and subnormals too */
    fed_test_log_quiet();
    assert_int_equal(fed_store_safetensors_to_params(&f, st_table, ST_NT, "cnn", q),
                     FED_ERR_SPEC);
    assert_int_equal(fed_store_safetensors_to_params(&f, st_table, ST_NT - 1, NULL, q),
                     FED_ERR_SHAPE);
    {
        fed_tensor_info t2[ST_NT];

        memcpy(t2, st_table, sizeof t2);
        t2[2].shape[0] = 8, t2[2].shape[1] = 5; /* transposed: same size, other shape */
        assert_int_equal(fed_store_safetensors_to_params(&f, t2, ST_NT, NULL, q), FED_ERR_SHAPE);
        snprintf(t2[2].name, sizeof t2[2].name, "2.weight");
        assert_int_equal(fed_store_safetensors_to_params(&f, t2, ST_NT, NULL, q), FED_ERR_SHAPE);
    }
    fed_log_set_sink(NULL, NULL);
    fed_store_safetensors_fini(&f);
    fed_store_safetensors_fini(&f);

    /* a NaN is refused on import */
    memcpy(buf + 8 + hlen + 4 * 7, &(float){NAN}, 4);
    assert_int_equal(fed_store_safetensors_parse(buf, len, &f), FED_OK);
    assert_int_equal(fed_store_safetensors_to_params(&f, st_table, ST_NT, NULL, q), FED_ERR_NAN);
    fed_store_safetensors_fini(&f);
    fed_free(buf);

    /* through a file */
    fed_test_path(path, sizeof path, "m.safetensors");
    assert_int_equal(fed_store_safetensors_save(path, &m), FED_OK);
    assert_int_equal(fed_store_safetensors_read(path, &f), FED_OK);
    memset(q, 0, sizeof q);
    assert_int_equal(fed_store_safetensors_to_params(&f, st_table, ST_NT, NULL, q), FED_OK);
    assert_memory_equal(p, q, sizeof p);
    fed_store_safetensors_fini(&f);
    fed_test_path(path, sizeof path, "missing/m.safetensors");
    fed_test_log_quiet();
    assert_int_equal(fed_store_safetensors_read(path, &f), FED_ERR_NOTFOUND);
    assert_int_equal(fed_store_safetensors_save(path, &m), FED_ERR_NOTFOUND);
    fed_log_set_sink(NULL, NULL);
}

/* The input scaling in the metadata: pixels say dtype, scale, shift and the
 * transform (centred, or unit with --input-scale unit); a CSV model the
 * standardization; the importer reads the scale back, and past the rest. */
static void test_safetensors_input_kind(void **state)
{
    float p[ST_NPARAMS], q[ST_NPARAMS];
    fed_store_st_model m;
    fed_store_st_file f;
    uint8_t *buf = NULL;
    size_t len = 0, size = 0;
    const char *pixels =
        "\"fednode.classes\":\"5\",\"fednode.input_dtype\":\"uint8\","
        "\"fednode.input_scale\":\"0.0078431377187371254\",\"fednode.input_shift\":\"-1\","
        "\"fednode.input_transform\":\"x = byte * fednode.input_scale + fednode.input_shift = "
        "byte / 127.5 - 1, in [-1, 1] (torchvision: ToTensor() then Normalize((0.5,), (0.5,))); "
        "logreg and mlp take x flattened, x.flatten(1)\"},";
    const char *csv = "\"fednode.input_transform\":\"each CSV feature standardized";
    const char *unit =
        "\"fednode.input_scale\":\"0.0039215688593685627\",\"fednode.input_shift\":\"0\","
        "\"fednode.input_transform\":\"x = byte * fednode.input_scale + fednode.input_shift = "
        "byte / 255, in [0, 1] (torchvision: ToTensor()); logreg and mlp take x flattened, "
        "x.flatten(1)\"},";

    (void)state;
    st_fill(p, 2);
    for (int kind = FED_ST_INPUT_PIXELS; kind <= FED_ST_INPUT_STANDARDIZED; kind++) {
        m = st_model(p);
        m.input_kind = kind;
        assert_int_equal(fed_store_safetensors_size(&m, &size), FED_OK);
        assert_int_equal(fed_store_safetensors_encode(&m, &buf, &len), FED_OK);
        assert_int_equal(len, size);
        if (kind == FED_ST_INPUT_PIXELS)
            assert_non_null(memmem(buf, len, pixels, strlen(pixels)));
        else
            assert_non_null(memmem(buf, len, csv, strlen(csv)));
        assert_null(memmem(buf, len, kind == FED_ST_INPUT_PIXELS ? "CSV" : "input_scale",
                           kind == FED_ST_INPUT_PIXELS ? 3 : 11));
        assert_int_equal(fed_store_safetensors_parse(buf, len, &f), FED_OK);
        assert_string_equal(f.spec, "mlp:8");
        assert_int_equal(f.input.classes, 5);
        assert_int_equal(f.input.scale, FED_MODEL_INPUT_CENTRED);
        assert_int_equal(fed_store_safetensors_to_params(&f, st_table, ST_NT, "mlp:8", q), FED_OK);
        assert_memory_equal(p, q, sizeof p);
        fed_store_safetensors_fini(&f);
        fed_free(buf);
        buf = NULL;
    }
    /* a model of --input-scale unit says byte / 255, and reads back unit */
    m = st_model(p);
    m.input_kind = FED_ST_INPUT_PIXELS;
    m.input.scale = FED_MODEL_INPUT_UNIT;
    assert_int_equal(fed_store_safetensors_encode(&m, &buf, &len), FED_OK);
    assert_non_null(memmem(buf, len, unit, strlen(unit)));
    assert_int_equal(fed_store_safetensors_parse(buf, len, &f), FED_OK);
    assert_int_equal(f.input.scale, FED_MODEL_INPUT_UNIT);
    fed_store_safetensors_fini(&f);
    fed_free(buf);
}

/* A real model's table (the names PyTorch's nn.Sequential gives). */
static void test_safetensors_model(void **state)
{
    static const char *const specs[] = {"logreg", "mlp:16,8", "cnn"};
    fed_backend *be = NULL;

    (void)state;
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    for (size_t k = 0; k < sizeof specs / sizeof specs[0]; k++) {
        fed_model_shape in = {1, 28, 28, 10, 0};
        fed_model *mod = NULL;
        fed_rng r;
        const fed_tensor_info *t;
        int nt;
        size_t np;
        float *p, *q;
        uint8_t *buf = NULL;
        size_t len;
        fed_store_st_file f;
        fed_store_st_model m;

        assert_int_equal(fed_model_new(specs[k], in, be, NULL, 1, 1, &mod), FED_OK);
        fed_rng_seed(&r, 7 + k);
        assert_int_equal(fed_model_init(mod, &r), FED_OK);
        np = fed_model_nparams(mod);
        t = fed_model_tensors(mod, &nt);
        p = malloc(np * sizeof *p);
        q = calloc(np, sizeof *q);
        assert_non_null(p);
        assert_non_null(q);
        assert_int_equal(fed_model_get_params(mod, p), FED_OK);
        m = (fed_store_st_model){fed_model_spec(mod), in, t, nt, p, FED_ST_INPUT_UNSAID,
                                 NULL, NULL, 0, NULL};
        assert_int_equal(fed_store_safetensors_encode(&m, &buf, &len), FED_OK);
        assert_int_equal(fed_store_safetensors_parse(buf, len, &f), FED_OK);
        assert_string_equal(f.tensors[0].name, "0.weight");
        assert_int_equal(fed_store_safetensors_to_params(&f, t, nt, specs[k], q), FED_OK);
        assert_memory_equal(p, q, np * sizeof *p);
        fed_store_safetensors_fini(&f);
        fed_free(buf);
        free(p);
        free(q);
        fed_model_free(mod);
    }
    fed_backend_free(be);
}

/* Batch norm's num_batches_tracked (a count kept as a float) is written as
 * PyTorch keeps it, a 0-dimensional I64, and read back; a file giving it
 * as F32 (or a weight as I64) is refused. */
static void test_safetensors_count(void **state)
{
    fed_backend *be = NULL;
    fed_model *mod = NULL;
    fed_model_shape in = {1, 4, 4, 3, 0};
    const fed_tensor_info *t;
    int nt;
    float p[16 * 16 + 16 + 4 * 16 + 1 + 3 * 16 + 3], q[sizeof p / sizeof p[0]];
    uint8_t *buf = NULL;
    size_t len;
    fed_store_st_file f;
    fed_store_st_model m;
    const char *hdr;

    (void)state;
    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    assert_int_equal(fed_model_new("g:L16,N,R,L", in, be, NULL, 1, 1, &mod), FED_OK);
    assert_int_equal(fed_model_nparams(mod), sizeof p / sizeof p[0]);
    t = fed_model_tensors(mod, &nt);
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        p[i] = 0.25f * (float)i;
    assert_string_equal(t[6].name, "1.num_batches_tracked");
    p[t[6].offset] = 12345.0f;
    m = (fed_store_st_model){.spec = fed_model_spec(mod), .input = in, .t = t, .nt = nt,
                             .params = p, .input_kind = FED_ST_INPUT_UNSAID};
    assert_int_equal(fed_store_safetensors_encode(&m, &buf, &len), FED_OK);
    hdr = (const char *)buf + 8;
    assert_non_null(strstr(hdr, "\"1.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],"));
    assert_non_null(strstr(hdr, "\"1.running_var\":{\"dtype\":\"F32\",\"shape\":[16],"));
    assert_int_equal(fed_store_safetensors_parse(buf, len, &f), FED_OK);
    assert_int_equal(f.tensors[6].i64, 1);
    assert_int_equal(f.tensors[6].end - f.tensors[6].begin, 8);
    assert_int_equal(fed_store_safetensors_to_params(&f, t, nt, NULL, q), FED_OK);
    assert_memory_equal(p, q, sizeof p);
    fed_store_safetensors_fini(&f);
    fed_free(buf);
    {
        fed_tensor_info wrong[32];

        memcpy(wrong, t, (size_t)nt * sizeof *t);
        wrong[6].flags &= ~FED_TENSOR_INT64; /* the count as F32 */
        m.t = wrong;
        assert_int_equal(fed_store_safetensors_encode(&m, &buf, &len), FED_OK);
        assert_int_equal(fed_store_safetensors_parse(buf, len, &f), FED_OK);
        fed_test_log_capture(FED_LOG_DEBUG);
        assert_int_equal(fed_store_safetensors_to_params(&f, t, nt, NULL, q), FED_ERR_SHAPE);
        assert_string_equal(fed_test_log_last(),
                            "safetensors: tensor 1.num_batches_tracked is F32, the model's is I64");
        fed_test_log_default();
        fed_store_safetensors_fini(&f);
        fed_free(buf);
    }
    fed_model_free(mod);
    fed_backend_free(be);
}

/* A file from a header text and data_len bytes of data. */
static uint8_t *st_file(const char *json, size_t data_len, size_t *len)
{
    size_t n = strlen(json);
    uint8_t *b = calloc(1, 8 + n + data_len + 1);

    assert_non_null(b);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(b + 8, json, n);
    *len = 8 + n + data_len;
    return b;
}

static void test_safetensors_rejects(void **state)
{
    static const struct {
        const char *json;
        size_t data;
        fed_err want;
    } cases[] = {
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, FED_OK},
        {"{\"a\":{\"data_offsets\":[0,8],\"shape\":[2],\"dtype\":\"F32\"}}  \n ", 8, FED_OK},
        {"{}", 0, FED_OK},
        {"{\"__metadata__\":{}}", 0, FED_OK},
        {"{\"\\u00e9t\\u00E9\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[0,4]}}", 4,
         FED_OK},
        {"{\"s\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[0,0]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 4, FED_OK},
        {"{\"__metadata__\":{\"format\":\"pt\",\"fednode.spec\":\"logreg\"}}", 0, FED_OK},
        /* layout */
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 4, FED_ERR_TRUNCATED},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8,9]}}", 8, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
         "\"data_offsets\":[0,8]}}", 8, FED_ERR_FORMAT},
        {"{}", 4, FED_ERR_FORMAT},
        /* keys and values */
        {"{\"a\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}", 4,
         FED_ERR_UNSUPPORTED},
        {"{\"a\":{\"dtype\":\"I64\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"f32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, FED_ERR_FORMAT},
        {"{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
         FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
         FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2e0],\"data_offsets\":[0,8]}}", 8, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],\"data_offsets\":[0,8]}}", 8,
         FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,2],\"data_offsets\":[0,8]}}", 8,
         FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2,],\"data_offsets\":[0,8]}}", 8, FED_ERR_FORMAT},
        {"{\"a\":[1,2]}", 0, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[[2]],\"data_offsets\":[0,8]}}", 8, FED_ERR_FORMAT},
        {"{\"\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8, FED_ERR_FORMAT},
        /* JSON syntax */
        {" {}", 0, FED_ERR_FORMAT},
        {"{}x", 0, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8, FED_ERR_FORMAT},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8, FED_ERR_FORMAT},
        {"{\"a\" {}}", 0, FED_ERR_FORMAT},
        {"{\"a", 0, FED_ERR_FORMAT},
        {"{\"a\tb\":{}}", 0, FED_ERR_FORMAT},
        {"{\"a\\qb\":{}}", 0, FED_ERR_FORMAT},
        {"{\"a\\u00\":{}}", 0, FED_ERR_FORMAT},
        {"{\"a\\u0000\":{}}", 0, FED_ERR_FORMAT},
        {"{\"a\\ud800\":{}}", 0, FED_ERR_FORMAT},
        {"{\"a\\udc00\":{}}", 0, FED_ERR_FORMAT},
        {"{\"a\xff\":{}}", 0, FED_ERR_FORMAT},
        {"{\"a\xc0\xaf\":{}}", 0, FED_ERR_FORMAT},
        {"{\"a\xed\xa0\x80\":{}}", 0, FED_ERR_FORMAT},
        /* metadata */
        {"{\"__metadata__\":{},\"__metadata__\":{}}", 0, FED_ERR_FORMAT},
        {"{\"__metadata__\":{\"k\":1}}", 0, FED_ERR_FORMAT},
        {"{\"__metadata__\":{\"k\":{}}}", 0, FED_ERR_FORMAT},
        {"{\"__metadata__\":{\"fednode.spec\":\"\"}}", 0, FED_ERR_SPEC},
        {"{\"__metadata__\":{\"fednode.spec\":\"a\",\"fednode.spec\":\"b\"}}", 0, FED_ERR_FORMAT},
        {"{\"__metadata__\":{\"fednode.input\":\"1,28\",\"fednode.classes\":\"10\"}}", 0,
         FED_ERR_FORMAT},
        {"{\"__metadata__\":{\"fednode.input\":\"1,28,28\"}}", 0, FED_ERR_FORMAT},
        {"{\"__metadata__\":{\"fednode.input\":\"1,28,28\",\"fednode.classes\":\"0\"}}", 0,
         FED_ERR_FORMAT},
    };
    char longname[400];
    fed_store_st_file f;
    uint8_t *b;
    size_t len;

    (void)state;
    fed_test_log_quiet(); /* the messages: test_safetensors_layout_messages */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fed_err e;

        b = st_file(cases[i].json, cases[i].data, &len);
        e = fed_store_safetensors_parse(b, len, &f);
        if (e != cases[i].want)
            fail_msg("case %zu (%s): got %s, want %s", i, cases[i].json, fed_errname(e),
                     fed_errname(cases[i].want));
        if (e != FED_OK) {
            assert_null(f.tensors);
            assert_int_equal(f.ntensors, 0);
        }
        fed_store_safetensors_fini(&f);
        free(b);
    }
    /* a long tensor name: over the limit; a long foreign metadata key: fine */
    memset(longname, 'n', sizeof longname);
    longname[sizeof longname - 1] = '\0';
    {
        char json[1024];

        snprintf(json, sizeof json, "{\"%s\":{\"dtype\":\"F32\",\"shape\":[],"
                 "\"data_offsets\":[0,4]}}", longname);
        b = st_file(json, 4, &len);
        assert_int_equal(fed_store_safetensors_parse(b, len, &f), FED_ERR_TOO_LARGE);
        free(b);
        snprintf(json, sizeof json, "{\"__metadata__\":{\"%s\":\"%s\"}}", longname, longname);
        b = st_file(json, 0, &len);
        assert_int_equal(fed_store_safetensors_parse(b, len, &f), FED_OK);
        fed_store_safetensors_fini(&f);
        free(b);
    }
    /* the length field */
    b = st_file("{}", 0, &len);
    assert_int_equal(fed_store_safetensors_parse(b, 7, &f), FED_ERR_TRUNCATED);
    assert_int_equal(fed_store_safetensors_parse(b, len - 1, &f), FED_ERR_TRUNCATED);
    b[0] = 1;
    assert_int_equal(fed_store_safetensors_parse(b, len, &f), FED_ERR_FORMAT);
    b[0] = 0, b[3] = 0x10; /* 256 MiB */
    assert_int_equal(fed_store_safetensors_parse(b, len, &f), FED_ERR_TOO_LARGE);
    b[3] = 0, b[7] = 0x80;
    assert_int_equal(fed_store_safetensors_parse(b, len, &f), FED_ERR_TOO_LARGE);
    free(b);
    fed_log_set_sink(NULL, NULL);
}

/* A header that lies about its offsets is refused with the tensor's name,
 * its offsets and what they contradict; a file read from a path is named. */
static void test_safetensors_layout_messages(void **state)
{
    static const struct {
        const char *json;
        size_t data;
        fed_err want;
        const char *msg;
    } cases[] = {
        {"{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
         FED_ERR_FORMAT, "safetensors: tensor 'fc1.weight': data_offsets [8, 0] end before "
                         "they begin"},
        {"{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,999999]}}", 16,
         FED_ERR_FORMAT, "safetensors: tensor 'fc1.weight': data_offsets [0, 999999] hold "
                         "999999 bytes, F32 shape [4] needs 16"},
        {"{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,8]}}", 8,
         FED_ERR_FORMAT, "safetensors: tensor 'fc1.weight': data_offsets [0, 8] hold 8 bytes, "
                         "F32 shape [2, 3] needs 24"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[4294967296,4294967296],"
         "\"data_offsets\":[0,8]}}", 8,
         FED_ERR_FORMAT, "safetensors: tensor 'a': shape [4294967296, 4294967296] has over "
                         "2^53 elements"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12,
         FED_ERR_FORMAT, "safetensors: tensor 'b': data_offsets [4, 12] overlap tensor 'a' "
                         "[0, 8]"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}", 20,
         FED_ERR_FORMAT, "safetensors: tensor 'b': data_offsets [12, 20] leave bytes [8, 12) "
                         "to no tensor"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16,
         FED_ERR_FORMAT, "safetensors: tensor 'a': data_offsets [8, 16] leave bytes [0, 8) to "
                         "no tensor"},
        {"{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", 4,
         FED_ERR_TRUNCATED, "safetensors: tensor 'fc1.weight': data_offsets [0, 16] past the "
                            "data section (4 bytes)"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 12,
         FED_ERR_FORMAT, "safetensors: data section of 12 bytes, the tensors end at 8 (last "
                         "'a')"},
        {"{}", 4, FED_ERR_FORMAT, "safetensors: no tensors, yet a data section of 4 bytes"},
        {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}", 16,
         FED_ERR_FORMAT, "safetensors: tensor 'a' given twice"},
    };
    char path[512], want[600];
    fed_store_st_file f;
    uint8_t *b;
    size_t len;
    FILE *fp;

    (void)state;
    fed_test_log_capture(FED_LOG_ERROR);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fed_err e;

        fed_test_log_reset();
        b = st_file(cases[i].json, cases[i].data, &len);
        e = fed_store_safetensors_parse(b, len, &f);
        free(b);
        if (e != cases[i].want || strcmp(fed_test_log_last(), cases[i].msg) != 0)
            fail_msg("case %zu: got %s \"%s\", want %s \"%s\"", i, fed_errname(e),
                     fed_test_log_last(), fed_errname(cases[i].want), cases[i].msg);
    }
    /* read from a file: the path leads the message */
    fed_test_path(path, sizeof path, "st.safetensors");
    b = st_file(cases[7].json, cases[7].data, &len);
    fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b, 1, len, fp), len);
    assert_int_equal(fclose(fp), 0);
    free(b);
    fed_test_log_reset();
    assert_int_equal(fed_store_safetensors_read(path, &f), FED_ERR_TRUNCATED);
    unlink(path);
    snprintf(want, sizeof want, "%s: tensor 'fc1.weight': data_offsets [0, 16] past the data "
             "section (4 bytes)", path);
    assert_string_equal(fed_test_log_last(), want);
    fed_test_log_default();
}

static void test_safetensors_alloc_failures(void **state)
{
    float p[ST_NPARAMS], q[ST_NPARAMS];
    fed_store_st_model m;
    fed_store_st_file f;
    uint8_t *buf = NULL;
    size_t len = 0;
    unsigned long n;
    fed_err e;

    (void)state;
    st_fill(p, 3);
    m = st_model(p);
    for (n = 1;; n++) {
        fed_alloc_fail_nth(n, 0);
        e = fed_store_safetensors_encode(&m, &buf, &len);
        fed_alloc_fail_nth(0, 0);
        if (e == FED_OK)
            break;
        assert_int_equal(e, FED_ERR_NOMEM);
        assert_null(buf);
    }
    assert_true(n > 1);
    for (n = 1;; n++) {
        fed_alloc_fail_nth(n, 0);
        e = fed_store_safetensors_parse(buf, len, &f);
        fed_alloc_fail_nth(0, 0);
        if (e == FED_OK)
            break;
        assert_int_equal(e, FED_ERR_NOMEM);
        assert_null(f.tensors);
    }
    assert_true(n > 1);
    assert_int_equal(fed_store_safetensors_to_params(&f, st_table, ST_NT, NULL, q), FED_OK);
    assert_memory_equal(p, q, sizeof p);
    fed_store_safetensors_fini(&f);
    fed_free(buf);
}

/* ---------------------------------------------------------------- CLI -- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* A node's database as a node would leave it: rounds, peers, counters,
 * signed contributions, a checkpoint of a real model. */
static void make_node_db(const char *path, const char *spec, fed_model_shape in, float **params,
                         size_t *np)
{
    fed_backend *be = NULL;
    fed_model *m = NULL;
    fed_store *st = NULL;
    fed_rng r;
    uint8_t pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES], inb[16];
    fed_store_counter cnt[2] = {{"rej.replay", 3}, {"rej.aead", 1}};
    fed_store_opts o;
    test_clock clk = {1700000000};

    assert_int_equal(fed_backend_cpu_new(1, &be), FED_OK);
    assert_int_equal(fed_model_new(spec, in, be, NULL, 1, 1, &m), FED_OK);
    fed_rng_seed(&r, 11);
    assert_int_equal(fed_model_init(m, &r), FED_OK);
    *np = fed_model_nparams(m);
    *params = malloc(*np * sizeof **params);
    assert_non_null(*params);
    assert_int_equal(fed_model_get_params(m, *params), FED_OK);
    fed_model_free(m);
    fed_backend_free(be);

    remove_db(path);
    o = opts_with_clock(&clk);
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    crypto_sign_seed_keypair(pk, sk, (const uint8_t *)"0123456789abcdef0123456789abcdef");
    put_u32(inb, (uint32_t)in.c);
    put_u32(inb + 4, (uint32_t)in.h);
    put_u32(inb + 8, (uint32_t)in.w);
    put_u32(inb + 12, (uint32_t)in.classes);
    for (uint64_t k = 1; k <= 3; k++) {
        fed_store_round rec;
        fed_store_peer peer;
        fed_store_contrib c;
        uint8_t hdr[40];
        fed_store_section s[3] = {{FED_CKPT_SEC_SPEC, spec, strlen(spec)},
                                  {FED_CKPT_SEC_INPUT, inb, 16},
                                  {FED_CKPT_SEC_PARAMS, *params, *np * sizeof(float)}};

        fill_round(&rec, k);
        rec.start_ms += 1700000000000ull;
        rec.end_ms += 1700000000000ull;
        memset(&peer, 0, sizeof peer);
        memcpy(peer.key, pk, 32);
        snprintf(peer.addr, sizeof peer.addr, "tcp://127.0.0.1:700%d", (int)k);
        peer.last_seen_ms = rec.end_ms;
        peer.last_round = k;
        memset(&c, 0, sizeof c);
        memset(hdr, (int)k, sizeof hdr);
        c.round = k;
        memcpy(c.peer_key, pk, 32);
        crypto_generichash(c.digest, sizeof c.digest, hdr, sizeof hdr, NULL, 0);
        crypto_sign_detached(c.signature, NULL, c.digest, sizeof c.digest, sk);
        c.header = hdr;
        c.header_len = sizeof hdr;
        c.accepted = 1;
        assert_int_equal(fed_store_begin(st), FED_OK);
        assert_int_equal(fed_store_put_round(st, &rec), FED_OK);
        assert_int_equal(fed_store_put_peer(st, &peer), FED_OK);
        assert_int_equal(fed_store_put_contribution(st, &c), FED_OK);
        assert_int_equal(fed_store_put_counters(st, cnt, 2), FED_OK);
        assert_int_equal(fed_store_checkpoint_write(st, k, s, 3, NULL), FED_OK);
        assert_int_equal(fed_store_commit(st), FED_OK);
    }
    fed_store_close(st);
}

static void test_cli(void **state)
{
    static char out[1 << 16];
    char db[512], db2[512], st1[512], st2[512], bin[512];
    fed_model_shape in = {1, 28, 28, 10, 0};
    float *params = NULL, *q;
    size_t np = 0;
    fed_store_st_file f;
    fed_model_file mf;
    sqlite3 *raw;

    (void)state;
    fed_test_log_quiet();
    assert_int_equal(sodium_init() < 0, 0);
    fed_test_path(db, sizeof db, "node.db");
    fed_test_path(db2, sizeof db2, "import.db");
    fed_test_path(st1, sizeof st1, "a.safetensors");
    fed_test_path(st2, sizeof st2, "b.safetensors");
    fed_test_path(bin, sizeof bin, "m.bin");
    make_node_db(db, "mlp:32,16", in, &params, &np);

    assert_int_equal(fed_test_run_cli(fed_cli_status, out, sizeof out, 2, "--db", db), 0);
    assert_non_null(strstr(out, "fedavg"));
    assert_non_null(strstr(out, "rej.replay"));
    assert_non_null(strstr(out, "tcp://127.0.0.1:7003"));
    assert_non_null(strstr(out, "2023-11-14 22:13:23")); /* round 3 ended */
    assert_int_equal(fed_test_run_cli(fed_cli_status, out, sizeof out, 3, "--db", db, "--json"), 0);
    assert_non_null(strstr(out, "\"round\":3,"));
    assert_non_null(strstr(out, "\"counters\":{\"rej.aead\":1,\"rej.replay\":3}"));
    assert_non_null(strstr(out, "\"pruned\":false"));
    assert_non_null(strstr(out, "\"hash\":\""));
    assert_non_null(strstr(out, "\"prev_hash\":\""));
    assert_non_null(strstr(out, "\"strategy\":\"fedavg\",\"lr\":0.09375,")); /* round 3 */
    assert_int_equal(fed_test_run_cli(fed_cli_status, out, sizeof out, 2, "--db", db), 0);
    assert_non_null(strstr(out, "  0.09375  fedavg      -\n")); /* no epsilon: no DP */
    /* a v2 database (an older node's): read as it is, its rounds without a rate */
    make_v2(db2, sizeof db2, "old.db");
    assert_int_equal(fed_test_run_cli(fed_cli_status, out, sizeof out, 2, "--db", db2), 0);
    assert_non_null(strstr(out, "schema 2"));
    assert_non_null(strstr(out, "        -  median      -\n"));
    assert_int_equal(fed_test_run_cli(fed_cli_status, out, sizeof out, 3, "--db", db2, "--json"), 0);
    assert_non_null(strstr(out, "\"strategy\":\"median\",\"lr\":null,"));
    fed_test_path(db2, sizeof db2, "import.db");
    assert_int_equal(fed_test_run_cli(fed_cli_status, out, sizeof out, 0), 2);
    assert_int_equal(fed_test_run_cli(fed_cli_status, out, sizeof out, 2, "--db", bin), 1); /* missing */
    assert_non_null(strstr(out, "not found"));

    /* export -> import (model file) -> bit-exact */
    assert_int_equal(fed_test_run_cli(fed_cli_export, out, sizeof out, 4, "--db", db, "--out", st1), 0);
    assert_non_null(strstr(out, "round 3"));
    assert_int_equal(fed_store_safetensors_read(st1, &f), FED_OK);
    assert_string_equal(f.spec, "mlp:32,16");
    assert_string_equal(f.tensors[4].name, "4.weight");
    assert_int_equal(f.tensors[4].shape[0], 10);
    assert_int_equal(f.tensors[4].shape[1], 16);
    fed_store_safetensors_fini(&f);
    assert_int_equal(fed_test_run_cli(fed_cli_import, out, sizeof out, 4, "--in", st1, "--out", bin), 0);
    assert_int_equal(fed_model_file_read(bin, &mf), FED_OK);
    assert_int_equal(mf.nparams, np);
    assert_memory_equal(mf.params, params, np * sizeof *params);
    fed_model_file_fini(&mf);

    /* import into a database, export again: the same file, byte for byte */
    assert_int_equal(fed_test_run_cli(fed_cli_import, out, sizeof out, 4, "--in", st1, "--db", db2), 0);
    assert_non_null(strstr(out, "checkpoint 1 of round 0"));
    assert_int_equal(fed_test_run_cli(fed_cli_export, out, sizeof out, 6, "--db", db2, "--round", "0",
                             "--out", st2), 0);
    {
        FILE *a = fopen(st1, "rb"), *b = fopen(st2, "rb");
        int ca, cb;

        assert_non_null(a);
        assert_non_null(b);
        do {
            ca = fgetc(a);
            cb = fgetc(b);
            assert_int_equal(ca, cb);
        } while (ca != EOF);
        fclose(a);
        fclose(b);
    }
    assert_int_equal(fed_test_run_cli(fed_cli_export, out, sizeof out, 6, "--db", db, "--round", "9",
                             "--out", st2), 1);
    assert_int_equal(fed_test_run_cli(fed_cli_export, out, sizeof out, 2, "--db", db), 2);
    assert_non_null(strstr(out, "export: --out FILE is required (the .safetensors or .onnx file "
                                "to write)"));
    /* each bad --round, --best or --metric named alone; --round bounded */
    assert_int_equal(fed_test_run_cli(fed_cli_export, out, sizeof out, 6, "--db", db, "--round", "-1",
                                      "--out", st2), 2);
    assert_non_null(strstr(out, "export: --round '-1' is not a round number (0 to 2147483647)"));
    assert_null(strstr(out, "--best"));
    assert_int_equal(fed_test_run_cli(fed_cli_export, out, sizeof out, 7, "--db", db, "--round", "1",
                                      "--best", "--out", st2), 2);
    assert_non_null(strstr(out, "export: --best and --round both choose the round: give one"));
    assert_int_equal(fed_test_run_cli(fed_cli_export, out, sizeof out, 6, "--db", db, "--metric",
                                      "auc", "--out", st2), 2);
    assert_non_null(strstr(out, "export: --metric ranks the rounds for --best"));
    assert_int_equal(fed_test_run_cli(fed_cli_import, out, sizeof out, 6, "--in", st1, "--db", db2,
                                      "--round", "-3"), 2);
    assert_non_null(strstr(out, "import: --round '-3' is not a round number (0 to 2147483647)"));
    assert_int_equal(fed_test_run_cli(fed_cli_import, out, sizeof out, 6, "--in", st1, "--db", db2,
                                      "--round", "99999999999"), 2);
    assert_non_null(strstr(out, "import: --round '99999999999' is not a round number"));
    assert_int_equal(fed_test_run_cli(fed_cli_import, out, sizeof out, 6, "--in", st1, "--out", bin,
                             "--model", "logreg"), 2);
    assert_int_equal(fed_test_run_cli(fed_cli_import, out, sizeof out, 2, "--in", st1), 2);

    /* verify: all good, then a forged signature, then a corrupt chunk */
    assert_int_equal(fed_test_run_cli(fed_cli_verify, out, sizeof out, 2, "--db", db), 0);
    assert_non_null(strstr(out, "3 signatures ok, 0 bad"));
    assert_non_null(strstr(out, "all checks passed"));
    raw = raw_open(db);
    raw_exec(raw, "UPDATE contributions SET digest = zeroblob(64) WHERE round = 2");
    sqlite3_close(raw);
    assert_int_equal(fed_test_run_cli(fed_cli_verify, out, sizeof out, 2, "--db", db), 1);
    assert_non_null(strstr(out, "2 signatures ok, 1 bad"));
    assert_non_null(strstr(out, "bad signature: round 2"));
    make_node_db(db, "mlp:32,16", in, &q, &np);
    free(q);
    flip_chunk_byte(db, 2, 0);
    assert_int_equal(fed_test_run_cli(fed_cli_verify, out, sizeof out, 2, "--db", db), 1);
    assert_non_null(strstr(out, "checkpoint 2 (round 2): hash does not match"));
    /* export of the newest still works; of the corrupt one, it refuses and says why */
    assert_int_equal(fed_test_run_cli(fed_cli_export, out, sizeof out, 4, "--db", db, "--out", st2), 0);
    assert_int_equal(fed_test_run_cli(fed_cli_export, out, sizeof out, 6, "--db", db, "--round", "2",
                             "--out", st2), 1);
    assert_non_null(strstr(out, "checkpoint 2 (round 2) skipped: hash does not match"));
    free(params);
    fed_log_set_sink(NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_empty_file),
        cmocka_unit_test(test_migrate_from_v1),
        cmocka_unit_test(test_dp_charges),
        cmocka_unit_test(test_migrate_from_v2),
        cmocka_unit_test(test_not_ours),
        cmocka_unit_test(test_epoch_rule),
        cmocka_unit_test(test_node_key),
        cmocka_unit_test(test_rows_round_trip),
        cmocka_unit_test(test_contributions_read),
        cmocka_unit_test(test_contribution_dp_report),
        cmocka_unit_test(test_page_cache_bounded),
        cmocka_unit_test(test_round_metrics), cmocka_unit_test(test_retention_holds),
        cmocka_unit_test(test_transactions),
        cmocka_unit_test(test_checkpoint_round_trip),
        cmocka_unit_test(test_checkpoint_version1_still_read),
        cmocka_unit_test(test_corrupt_chunk_skipped),
        cmocka_unit_test(test_damaged_file),
        cmocka_unit_test(test_chain_corruption),
        cmocka_unit_test(test_retention),
        cmocka_unit_test(test_readonly),
        cmocka_unit_test(test_one_writer),
        cmocka_unit_test(test_full_disk),
        cmocka_unit_test(test_disk_full_switch),
        cmocka_unit_test(test_alloc_failures),
        cmocka_unit_test(test_ckpt_parse_rejects),
        cmocka_unit_test(test_safetensors_input_kind),
        cmocka_unit_test(test_safetensors_round_trip),
        cmocka_unit_test(test_safetensors_model),
        cmocka_unit_test(test_safetensors_count),
        cmocka_unit_test(test_safetensors_rejects),
        cmocka_unit_test(test_safetensors_layout_messages),
        cmocka_unit_test(test_safetensors_alloc_failures),
        cmocka_unit_test(test_cli),
    };

    return cmocka_run_group_tests(tests, fed_test_tmpdir_setup, fed_test_tmpdir_teardown);
}
