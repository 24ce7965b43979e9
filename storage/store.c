/* store.c - the node's SQLite database: open with pragmas and forward
 * migrations, the epoch rule, transactions, and the round log, contributions,
 * peers and counters tables. Owns the connection and its prepared statements
 * (checkpoints live in checkpoint.c over the same struct). Never prints, never
 * loses a committed row: every write goes through a transaction. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "storage/store_impl.h"
#include "storage/test_hooks.h"

/* Runs SQL without results. */
static FED_WUR fed_err store_exec(fed_store *st, const char *sql);

/* ------------------------------------------------------------ schema -- */

/* Each entry takes the schema from version i to i + 1. Never edit a
 * published step: add one. */
static const char *const migrations[FED_STORE_SCHEMA_VERSION] = {
    /* -> v1 */
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
    "CREATE TABLE counters(name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);",
    /* -> v2: which epoch wrote a checkpoint; a peer's last known epoch
       (parenthesized: one element, two statements) */
    ("ALTER TABLE checkpoints ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;"
     "ALTER TABLE peers ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;"),
    /* -> v3: the learning rate a round trained at (NULL: none recorded) */
    "ALTER TABLE rounds ADD COLUMN lr REAL;",
    /* -> v4: DP-SGD's privacy spent at this site (its accountant), and the
       epsilon after each round */
    ("CREATE TABLE dp_charges(id INTEGER PRIMARY KEY, round INTEGER NOT NULL,"
     " at_ms INTEGER NOT NULL, q REAL NOT NULL, sigma REAL NOT NULL, steps INTEGER NOT NULL,"
     " delta REAL NOT NULL, epsilon REAL);"
     "ALTER TABLE rounds ADD COLUMN epsilon REAL;"),
    /* -> v5: secure aggregation's tries, one row each (the clients' fates
       and their signed masked inputs are contributions rows) */
    "CREATE TABLE secagg_tries(id INTEGER PRIMARY KEY, round INTEGER NOT NULL,"
    " try INTEGER NOT NULL, at_ms INTEGER NOT NULL, sampled INTEGER NOT NULL,"
    " keyed INTEGER NOT NULL, k INTEGER NOT NULL, t INTEGER NOT NULL,"
    " shared INTEGER NOT NULL, masked INTEGER NOT NULL, signed INTEGER NOT NULL,"
    " unmasked INTEGER NOT NULL, outcome TEXT NOT NULL);",
    /* -> v6: the privacy budget a client reported with a contribution
       (NULL: none) */
    ("ALTER TABLE contributions ADD COLUMN dp_epsilon REAL;"
     "ALTER TABLE contributions ADD COLUMN dp_budget REAL;"),
    /* -> v7: the figures of an evaluated round by name (NULL: not defined) */
    ("CREATE TABLE round_metrics(id INTEGER PRIMARY KEY, round INTEGER NOT NULL,"
     " name TEXT NOT NULL, value REAL, UNIQUE(round, name));"
     "CREATE INDEX round_metrics_by_name ON round_metrics(name, value);"),
};

#define ROUND_COLS_V2                                                          \
    "round, start_ms, end_ms, loss, accuracy, samples, bytes_in, bytes_out, peers, " \
    "strategy, model_hash"
#define ROUND_COLS ROUND_COLS_V2 ", lr, epsilon"
/* a v2 or v3 file opened read-only: the rounds as they are, without a rate
   (v2) or an epsilon */
#define ROUND_COLS_READ_V2 ROUND_COLS_V2 ", NULL, NULL"
#define ROUND_COLS_READ_V3 ROUND_COLS_V2 ", lr, NULL"
#define DP_COLS "round, at_ms, q, sigma, steps, delta, epsilon"
#define SA_COLS                                                                \
    "round, try, at_ms, sampled, keyed, k, t, shared, masked, signed, unmasked, outcome"
#define CONTRIB_COLS_V5 "round, peer_key, digest, signature, header, accepted, reason"
#define CKPT_COLS "id, round, created_s, size, chunks, hash, prev_hash, pruned, epoch"

static const char *const stmt_sql[SQ_COUNT_] = {
    [SQ_META_GET] = "SELECT value FROM meta WHERE key = ?1",
    [SQ_META_PUT] = "INSERT INTO meta(key, value) VALUES(?1, ?2)"
                    " ON CONFLICT(key) DO UPDATE SET value = excluded.value",
    [SQ_ROUND_PUT] = "INSERT OR REPLACE INTO rounds(" ROUND_COLS ")"
                     " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    [SQ_ROUND_GET] = "SELECT " ROUND_COLS " FROM rounds WHERE round = ?1",
    [SQ_ROUND_LAST] = "SELECT " ROUND_COLS " FROM rounds ORDER BY round DESC LIMIT ?1",
    [SQ_ROUND_GET_V2] = "SELECT " ROUND_COLS_READ_V2 " FROM rounds WHERE round = ?1",
    [SQ_ROUND_LAST_V2] = "SELECT " ROUND_COLS_READ_V2 " FROM rounds ORDER BY round DESC LIMIT ?1",
    [SQ_ROUND_GET_V3] = "SELECT " ROUND_COLS_READ_V3 " FROM rounds WHERE round = ?1",
    [SQ_ROUND_LAST_V3] = "SELECT " ROUND_COLS_READ_V3 " FROM rounds ORDER BY round DESC LIMIT ?1",
    [SQ_DP_PUT] = "INSERT INTO dp_charges(" DP_COLS ") VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [SQ_DP_EACH] = "SELECT " DP_COLS " FROM dp_charges ORDER BY id",
    [SQ_SA_PUT] = "INSERT INTO secagg_tries(" SA_COLS ")"
                  " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
    [SQ_SA_EACH] = "SELECT " SA_COLS " FROM secagg_tries WHERE round >= ?1 ORDER BY id",
    [SQ_METRIC_PUT] = "INSERT OR REPLACE INTO round_metrics(round, name, value) VALUES(?1, ?2, ?3)",
    [SQ_METRIC_EACH] = "SELECT round, name, value FROM round_metrics WHERE round ="
                       " (SELECT max(round) FROM round_metrics WHERE round <= ?1) ORDER BY id",
    [SQ_METRIC_LAST] = "SELECT max(round) FROM round_metrics WHERE name = ?1",
    [SQ_METRIC_BEST] = "SELECT round, value FROM round_metrics WHERE name = ?1 AND value IS NOT NULL"
                       " ORDER BY CASE WHEN ?2 THEN -value ELSE value END, round LIMIT 1",
    [SQ_CONTRIB_PUT] = "INSERT INTO contributions(" CONTRIB_COLS_V5 ", dp_epsilon, dp_budget)"
                       " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
    [SQ_CONTRIB_EACH] = "SELECT " CONTRIB_COLS_V5 ", dp_epsilon, dp_budget"
                        " FROM contributions WHERE round >= ?1 ORDER BY round, id",
    [SQ_CONTRIB_EACH_V5] = "SELECT " CONTRIB_COLS_V5 ", NULL, NULL"
                           " FROM contributions WHERE round >= ?1 ORDER BY round, id",
    [SQ_PEER_PUT] = "INSERT INTO peers(key, addr, first_seen_ms, last_seen_ms, last_round, epoch)"
                    " VALUES(?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(key) DO UPDATE SET"
                    " addr = excluded.addr, last_seen_ms = excluded.last_seen_ms,"
                    " last_round = excluded.last_round, epoch = excluded.epoch",
    [SQ_PEER_LIST] = "SELECT key, addr, first_seen_ms, last_seen_ms, last_round, epoch"
                     " FROM peers ORDER BY last_seen_ms DESC, key LIMIT ?1",
    [SQ_COUNTER_PUT] = "INSERT INTO counters(name, value) VALUES(?1, ?2)"
                       " ON CONFLICT(name) DO UPDATE SET value = excluded.value",
    [SQ_COUNTER_LIST] = "SELECT name, value FROM counters ORDER BY name LIMIT ?1",
    [SQ_COUNTER_GET] = "SELECT value FROM counters WHERE name = ?1",
    [SQ_CKPT_LAST] = "SELECT id, hash FROM checkpoints ORDER BY id DESC LIMIT 1",
    [SQ_CKPT_INSERT] = "INSERT INTO checkpoints(" CKPT_COLS ")"
                       " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, 0, ?8)",
    [SQ_CHUNK_INSERT] = "INSERT INTO checkpoint_chunks(ckpt, idx, data) VALUES(?1, ?2, ?3)",
    [SQ_PRUNE_CHUNKS] = "DELETE FROM checkpoint_chunks WHERE ckpt IN (SELECT id FROM checkpoints"
                        " WHERE pruned = 0 AND id <= ?1 AND (?2 = 0 OR id % ?2 <> 0)"
                        " AND round <> ?3 AND round < ?4)",
    [SQ_PRUNE_ROWS] = "UPDATE checkpoints SET pruned = 1"
                      " WHERE pruned = 0 AND id <= ?1 AND (?2 = 0 OR id % ?2 <> 0)"
                      " AND round <> ?3 AND round < ?4",
    [SQ_CKPT_CANDIDATES] = "SELECT " CKPT_COLS " FROM checkpoints WHERE pruned = 0"
                           " AND id < ?1 ORDER BY id DESC LIMIT 1",
    [SQ_CKPT_ROUND_CANDIDATES] = "SELECT " CKPT_COLS " FROM checkpoints WHERE pruned = 0"
                                 " AND round = ?2 AND id < ?1 ORDER BY id DESC LIMIT 1",
    [SQ_CKPT_BY_ID] = "SELECT " CKPT_COLS " FROM checkpoints WHERE id = ?1",
    [SQ_CKPT_LIST] = "SELECT " CKPT_COLS " FROM checkpoints ORDER BY id DESC LIMIT ?1",
    [SQ_CKPT_ALL] = "SELECT " CKPT_COLS " FROM checkpoints WHERE id > ?1 ORDER BY id LIMIT 1",
    [SQ_CHUNK_LIST] = "SELECT rowid, idx, length(data) FROM checkpoint_chunks WHERE ckpt = ?1"
                      " ORDER BY idx",
};

/* ------------------------------------------------------------ errors -- */

static fed_err map_rc(int rc)
{
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE:
        return FED_OK;
    case SQLITE_NOMEM:
        return FED_ERR_NOMEM;
    case SQLITE_READONLY:
        return FED_ERR_READONLY;
    case SQLITE_FULL:
        return FED_ERR_FULL;
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
        return FED_ERR_BUSY;
    case SQLITE_PERM:
    case SQLITE_AUTH:
        return FED_ERR_PERM;
    case SQLITE_CORRUPT: /* the file, not our hashes: not FED_ERR_CORRUPT */
        return FED_ERR_DB_DAMAGED;
    case SQLITE_NOTADB:
        return FED_ERR_MAGIC;
    case SQLITE_IOERR:
    case SQLITE_CANTOPEN:
        return FED_ERR_IO;
    case SQLITE_TOOBIG:
        return FED_ERR_TOO_LARGE;
    default:
        return FED_ERR_DB;
    }
}

fed_err fedi_store_err(fed_store *st, int rc, const char *what)
{
    fed_err e = map_rc(rc);

    if (st && st->disk_full && rc == SQLITE_CONSTRAINT_COMMITHOOK) {
        e = FED_ERR_FULL; /* fedi_store_set_disk_full's refusal */
        fed_log(FED_LOG_WARN, "store: %s: %s (%s)", what, sqlite3_errstr(SQLITE_FULL),
                fed_errname(e));
    } else if (e != FED_OK) {
        fed_log(FED_LOG_WARN, "store: %s: %s (%s)", what,
                st && st->db ? sqlite3_errmsg(st->db) : sqlite3_errstr(rc), fed_errname(e));
    }
    /* SQLite may roll back by itself after FULL, IOERR, NOMEM, BUSY. */
    if (st && st->db && st->in_tx && sqlite3_get_autocommit(st->db))
        st->in_tx = 0;
    return e;
}

sqlite3_stmt *fedi_store_stmt(fed_store *st, store_stmt_id id, fed_err *err)
{
    sqlite3_stmt *s = st->stmt[id];
    int rc;

    if (s) {
        sqlite3_reset(s);
        sqlite3_clear_bindings(s);
        return s;
    }
    rc = sqlite3_prepare_v3(st->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT, &s, NULL);
    if (rc != SQLITE_OK) {
        *err = fedi_store_err(st, rc, "prepare");
        return NULL;
    }
    st->stmt[id] = s;
    return s;
}

static fed_err store_exec(fed_store *st, const char *sql)
{
    int rc = sqlite3_exec(st->db, sql, NULL, NULL, NULL);

    return rc == SQLITE_OK ? FED_OK : fedi_store_err(st, rc, sql);
}

/* Steps s to completion (a write): FED_OK on SQLITE_DONE. */
static fed_err step_done(fed_store *st, sqlite3_stmt *s, const char *what)
{
    int rc = sqlite3_step(s);
    fed_err e = rc == SQLITE_DONE ? FED_OK : fedi_store_err(st, rc, what);

    sqlite3_reset(s);
    return e;
}

uint64_t fedi_store_wall_s(const fed_store *st)
{
    if (st->opts.wall_s)
        return st->opts.wall_s(st->opts.clock_ctx);
    return (uint64_t)time(NULL);
}

/* ------------------------------------------------------- transactions -- */

/* After a durable transaction: the open's own synchronous setting again. */
static void restore_sync(fed_store *st);

fed_err fed_store_begin(fed_store *st)
{
    fed_err e;

    if (st->in_tx)
        return FED_ERR_INVAL;
    if (sqlite3_db_readonly(st->db, "main") == 1)
        return FED_ERR_READONLY;
    e = store_exec(st, "BEGIN IMMEDIATE");
    if (e == FED_OK)
        st->in_tx = 1;
    return e;
}

double fedi_store_mono_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void fed_store_get_stats(const fed_store *st, fed_store_stats *out) { *out = st->stats; }

static const char *const sync_sql[] = {
    "PRAGMA synchronous = FULL",
    "PRAGMA synchronous = NORMAL",
    "PRAGMA synchronous = OFF",
};

fed_err fed_store_begin_durable(fed_store *st)
{
    fed_err e;

    if (st->in_tx)
        return FED_ERR_INVAL;
    /* the setting holds for the connection: back to the open's at commit */
    if (st->opts.sync != FED_STORE_SYNC_FULL &&
        (e = store_exec(st, sync_sql[FED_STORE_SYNC_FULL])) != FED_OK)
        return e;
    st->durable = st->opts.sync != FED_STORE_SYNC_FULL;
    if ((e = fed_store_begin(st)) != FED_OK)
        restore_sync(st);
    return e;
}

fed_err fed_store_commit(fed_store *st)
{
    double t0 = fedi_store_mono_s();
    fed_err e;

    if (!st->in_tx)
        return FED_ERR_INVAL;
    e = store_exec(st, "COMMIT");
    st->stats.commits++;
    st->stats.commit_s += fedi_store_mono_s() - t0;
    if (e != FED_OK && !sqlite3_get_autocommit(st->db))
        (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    st->in_tx = 0;
    restore_sync(st);
    return e;
}

void fed_store_rollback(fed_store *st)
{
    if (!st)
        return;
    if (!sqlite3_get_autocommit(st->db))
        (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    st->in_tx = 0;
    restore_sync(st);
}

static void restore_sync(fed_store *st)
{
    if (!st->durable)
        return;
    st->durable = 0;
    if (sqlite3_exec(st->db, sync_sql[st->opts.sync], NULL, NULL, NULL) != SQLITE_OK)
        fed_log(FED_LOG_WARN, "store: restoring the synchronous setting failed: %s",
                sqlite3_errmsg(st->db));
}

int fed_store_in_tx(const fed_store *st) { return st->in_tx; }

fed_err fedi_store_tx_enter(fed_store *st, store_tx *tx)
{
    char sql[64];
    fed_err e;

    memset(tx, 0, sizeof *tx);
    if (sqlite3_db_readonly(st->db, "main") == 1)
        return FED_ERR_READONLY;
    if (!st->in_tx) {
        e = store_exec(st, "BEGIN IMMEDIATE");
        tx->own = e == FED_OK;
        return e;
    }
    snprintf(tx->name, sizeof tx->name, "fed_sp%" PRIu64, ++st->sp_seq);
    snprintf(sql, sizeof sql, "SAVEPOINT %s", tx->name);
    e = store_exec(st, sql);
    tx->savepoint = e == FED_OK;
    return e;
}

fed_err fedi_store_tx_leave(fed_store *st, store_tx *tx, fed_err err)
{
    char sql[96];
    fed_err e = FED_OK;

    if (tx->own) {
        if (err == FED_OK) {
            e = store_exec(st, "COMMIT");
            if (e != FED_OK && !sqlite3_get_autocommit(st->db))
                (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        } else if (!sqlite3_get_autocommit(st->db)) {
            (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
        }
    } else if (tx->savepoint && !sqlite3_get_autocommit(st->db)) {
        if (err == FED_OK) {
            snprintf(sql, sizeof sql, "RELEASE %s", tx->name);
        } else {
            snprintf(sql, sizeof sql, "ROLLBACK TO %s; RELEASE %s", tx->name, tx->name);
        }
        e = store_exec(st, sql);
    }
    if (st->in_tx && sqlite3_get_autocommit(st->db))
        st->in_tx = 0; /* SQLite rolled the round back itself */
    memset(tx, 0, sizeof *tx);
    return err != FED_OK ? err : e;
}

/* --------------------------------------------------------------- meta -- */

static fed_err meta_get_int(fed_store *st, const char *key, int64_t *v, int *found)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, SQ_META_GET, &e);
    int rc;

    *found = 0;
    if (!s)
        return e;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *found = sqlite3_column_type(s, 0) == SQLITE_INTEGER;
        *v = sqlite3_column_int64(s, 0);
    } else if (rc != SQLITE_DONE) {
        e = fedi_store_err(st, rc, "read meta");
    }
    sqlite3_reset(s);
    return e;
}

static fed_err meta_put_int(fed_store *st, const char *key, int64_t v)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, SQ_META_PUT, &e);

    if (!s)
        return e;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_STATIC);
    sqlite3_bind_int64(s, 2, v);
    return step_done(st, s, "write meta");
}

fed_err fed_store_put_meta_text(fed_store *st, const char *key, const char *value)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, SQ_META_PUT, &e);

    if (!s)
        return e;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s, 2, value, -1, SQLITE_TRANSIENT);
    return step_done(st, s, "write meta");
}

fed_err fed_store_meta_text(fed_store *st, const char *key, char *out, size_t cap)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, SQ_META_GET, &e);
    int rc;

    if (!s)
        return e;
    sqlite3_bind_text(s, 1, key, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && sqlite3_column_type(s, 0) == SQLITE_TEXT)
        snprintf(out, cap, "%s", (const char *)sqlite3_column_text(s, 0));
    else if (rc == SQLITE_ROW || rc == SQLITE_DONE)
        e = FED_ERR_NOTFOUND;
    else
        e = fedi_store_err(st, rc, "read meta");
    sqlite3_reset(s);
    return e;
}

fed_err fed_store_node_key(fed_store *st, uint8_t key[32])
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, SQ_META_GET, &e);
    int rc;

    if (!s)
        return e;
    sqlite3_bind_text(s, 1, "node_key", -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && sqlite3_column_bytes(s, 0) == 32 &&
        sqlite3_column_type(s, 0) == SQLITE_BLOB)
        memcpy(key, sqlite3_column_blob(s, 0), 32);
    else if (rc == SQLITE_ROW)
        e = FED_ERR_CORRUPT;
    else if (rc == SQLITE_DONE)
        e = FED_ERR_NOTFOUND;
    else
        e = fedi_store_err(st, rc, "read node key");
    sqlite3_reset(s);
    return e;
}

fed_err fed_store_set_node_key(fed_store *st, const uint8_t key[32])
{
    uint8_t have[32];
    store_tx tx;
    sqlite3_stmt *s;
    fed_err e = fedi_store_tx_enter(st, &tx);

    if (e != FED_OK)
        return e;
    e = fed_store_node_key(st, have);
    if (e == FED_OK) {
        if (memcmp(have, key, 32) != 0) {
            fed_log(FED_LOG_ERROR, "store: database belongs to another node key");
            e = FED_ERR_KEY;
        }
        goto out;
    }
    if (e != FED_ERR_NOTFOUND)
        goto out;
    e = FED_OK;
    s = fedi_store_stmt(st, SQ_META_PUT, &e);
    if (!s)
        goto out;
    sqlite3_bind_text(s, 1, "node_key", -1, SQLITE_STATIC);
    sqlite3_bind_blob(s, 2, key, 32, SQLITE_STATIC);
    e = step_done(st, s, "write node key");
out:
    return fedi_store_tx_leave(st, &tx, e);
}

/* --------------------------------------------------------------- open -- */

void fed_store_opts_default(fed_store_opts *o)
{
    memset(o, 0, sizeof *o);
    o->busy_timeout_ms = 5000;
    o->page_size = FED_STORE_PAGE_SIZE;
    o->sync = FED_STORE_SYNC_FULL;
    o->chunk_bytes = FED_STORE_CHUNK_BYTES;
    o->keep_last = 3;
}

static fed_err pragma_int(fed_store *st, const char *sql, int64_t *v)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, sql, -1, &s, NULL);
    fed_err e = FED_OK;

    if (rc != SQLITE_OK)
        return fedi_store_err(st, rc, sql);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *v = sqlite3_column_int64(s, 0);
    else
        e = rc == SQLITE_DONE ? FED_ERR_DB : fedi_store_err(st, rc, sql);
    sqlite3_finalize(s);
    return e;
}

static fed_err set_journal_wal(fed_store *st)
{
    sqlite3_stmt *s = NULL;
    int rc = sqlite3_prepare_v2(st->db, "PRAGMA journal_mode = WAL", -1, &s, NULL);
    fed_err e = FED_OK;
    const char *mode;

    if (rc != SQLITE_OK)
        return fedi_store_err(st, rc, "journal_mode");
    rc = sqlite3_step(s);
    if (rc != SQLITE_ROW) {
        e = fedi_store_err(st, rc, "journal_mode");
        goto out;
    }
    mode = (const char *)sqlite3_column_text(s, 0);
    /* an in-memory database stays "memory" */
    if (!mode || (strcmp(mode, "wal") != 0 && strcmp(mode, "memory") != 0)) {
        fed_log(FED_LOG_ERROR, "store: journal mode is %s, not wal", mode ? mode : "?");
        e = FED_ERR_DB;
    }
out:
    sqlite3_finalize(s);
    return e;
}

/* Is the file ours, fresh, or something else? Sets *version (0 fresh). */
static fed_err check_identity(fed_store *st, int64_t *version)
{
    int64_t app = 0, objects = 0;
    fed_err e;

    if ((e = pragma_int(st, "PRAGMA application_id", &app)) != FED_OK ||
        (e = pragma_int(st, "PRAGMA user_version", version)) != FED_OK ||
        (e = pragma_int(st, "SELECT count(*) FROM sqlite_schema", &objects)) != FED_OK)
        return e;
    if ((uint32_t)app == FED_STORE_APP_ID) {
        if (*version > FED_STORE_SCHEMA_VERSION) {
            fed_log(FED_LOG_ERROR, "store: schema version %" PRId64 " is newer than %d",
                    *version, FED_STORE_SCHEMA_VERSION);
            return FED_ERR_SCHEMA;
        }
        if (*version < 1) {
            fed_log(FED_LOG_ERROR, "store: fednode database without a schema version");
            return FED_ERR_SCHEMA;
        }
        return FED_OK;
    }
    if (app == 0 && objects == 0 && *version == 0)
        return FED_OK; /* empty: ours to create */
    fed_log(FED_LOG_ERROR, "store: not a fednode database (application_id 0x%08x)",
            (unsigned)app);
    return FED_ERR_MAGIC;
}

/* *did: 1 when this step ran here (not in another process first). */
static fed_err migrate_step(fed_store *st, int to, int *did)
{
    char sql[96];
    int64_t now = 0;
    fed_err e = store_exec(st, "BEGIN IMMEDIATE");

    if (e != FED_OK)
        return e;
    /* another process may have migrated while we waited for the lock */
    if ((e = pragma_int(st, "PRAGMA user_version", &now)) != FED_OK)
        goto out;
    if (now >= to)
        goto out;
    if (now != to - 1) {
        e = FED_ERR_SCHEMA;
        goto out;
    }
    if ((e = store_exec(st, migrations[to - 1])) != FED_OK)
        goto out;
    snprintf(sql, sizeof sql, "PRAGMA application_id = %u; PRAGMA user_version = %d",
             FED_STORE_APP_ID, to);
    if ((e = store_exec(st, sql)) != FED_OK)
        goto out;
    e = meta_put_int(st, "schema_version", to);
out:
    if (e == FED_OK) {
        e = store_exec(st, "COMMIT");
        *did = e == FED_OK && now < to;
    }
    if (e != FED_OK && !sqlite3_get_autocommit(st->db))
        (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    return e;
}

/* One line for the whole climb (a new database took every step, and said
 * "schema migrated" once per step). */
static fed_err migrate(fed_store *st, int64_t from)
{
    int first = 0; /* the first step this process ran */

    for (int v = (int)from + 1; v <= FED_STORE_SCHEMA_VERSION; v++) {
        int did = 0;
        fed_err e = migrate_step(st, v, &did);

        if (e != FED_OK)
            return e;
        if (did && !first)
            first = v;
    }
    if (first == 1)
        fed_log(FED_LOG_INFO, "store: new database, schema version %d",
                FED_STORE_SCHEMA_VERSION);
    else if (first)
        fed_log(FED_LOG_INFO, "store: schema migrated from version %d to %d", first - 1,
                FED_STORE_SCHEMA_VERSION);
    st->schema = FED_STORE_SCHEMA_VERSION;
    return FED_OK;
}

/* The epoch rule: max(stored + 1, wall clock seconds), committed now. */
static fed_err bump_epoch(fed_store *st)
{
    int64_t stored = 0;
    int found = 0;
    uint64_t wall = fedi_store_wall_s(st), next;
    fed_err e = store_exec(st, "BEGIN IMMEDIATE");

    if (e != FED_OK)
        return e;
    if ((e = meta_get_int(st, "epoch", &stored, &found)) != FED_OK)
        goto out;
    next = found ? (uint64_t)stored + 1 : 1;
    if (wall > next)
        next = wall;
    if (next > INT64_MAX) {
        e = FED_ERR_RANGE;
        goto out;
    }
    if ((e = meta_put_int(st, "epoch", (int64_t)next)) != FED_OK)
        goto out;
    e = store_exec(st, "COMMIT");
    if (e == FED_OK)
        st->epoch = next;
out:
    if (e != FED_OK && !sqlite3_get_autocommit(st->db))
        (void)sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
    return e;
}

static fed_err read_epoch(fed_store *st)
{
    int64_t v = 0;
    int found = 0;
    fed_err e = meta_get_int(st, "epoch", &v, &found);

    st->epoch = found ? (uint64_t)v : 0;
    return e;
}

static fed_err apply_pragmas(fed_store *st, int fresh, int readonly)
{
    char sql[96];
    int64_t ps = 0;
    fed_err e;

    sqlite3_busy_timeout(st->db, st->opts.busy_timeout_ms);
    if (fresh && !readonly) {
        /* before the first table: a page size is fixed once WAL is on */
        snprintf(sql, sizeof sql, "PRAGMA page_size = %d", st->opts.page_size);
        if ((e = store_exec(st, sql)) != FED_OK)
            return e;
        if ((st->opts.flags & FED_STORE_GIVE_BACK) &&
            (e = store_exec(st, "PRAGMA auto_vacuum = FULL")) != FED_OK)
            return e;
    }
    if (!readonly && (e = set_journal_wal(st)) != FED_OK)
        return e;
    if ((e = store_exec(st, sync_sql[st->opts.sync])) != FED_OK)
        return e;
    /* the WAL file is cut back to this after a checkpoint (big blobs grow it) */
    if ((e = store_exec(st, "PRAGMA journal_size_limit = 67108864")) != FED_OK)
        return e;
    if ((e = pragma_int(st, "PRAGMA page_size", &ps)) != FED_OK)
        return e;
    st->page_size = (int)ps;
    /* SQLite turns a cache size in KiB into pages with the page size it had
     * before the file's own was read (4 KiB): SQLite's default 2000 KiB
     * became 488 of our 64 KiB pages, 31 MiB, and a long-running node's
     * memory grew with its database up to that. Said again now, it holds. */
    snprintf(sql, sizeof sql, "PRAGMA cache_size = -%d", FED_STORE_CACHE_KIB);
    if ((e = store_exec(st, sql)) != FED_OK)
        return e;
    return st->opts.max_bytes ? fed_store_set_max_bytes(st, st->opts.max_bytes) : FED_OK;
}

fed_err fed_store_set_max_bytes(fed_store *st, uint64_t bytes)
{
    /* SQLite's largest page count: 0 lifts the cap */
    uint64_t pages = bytes ? bytes / (uint64_t)st->page_size : UINT64_C(4294967294);
    char sql[64];

    snprintf(sql, sizeof sql, "PRAGMA max_page_count = %" PRIu64, pages ? pages : 1);
    st->opts.max_bytes = bytes;
    return store_exec(st, sql);
}

/* The commit hook: nonzero turns the commit into a rollback. */
static int refuse_commit(void *ctx)
{
    return ((const fed_store *)ctx)->disk_full;
}

void fedi_store_set_disk_full(fed_store *st, int full)
{
    st->disk_full = full != 0;
    sqlite3_commit_hook(st->db, full ? refuse_commit : NULL, full ? st : NULL);
}

static int valid_page_size(int ps)
{
    return ps >= 512 && ps <= 65536 && (ps & (ps - 1)) == 0;
}

static fed_err check_opts(fed_store_opts *o)
{
    if (!o->page_size)
        o->page_size = FED_STORE_PAGE_SIZE;
    if (!o->chunk_bytes)
        o->chunk_bytes = FED_STORE_CHUNK_BYTES;
    if (!valid_page_size(o->page_size) || o->busy_timeout_ms < 0 ||
        (unsigned)o->sync > FED_STORE_SYNC_OFF || o->chunk_bytes < FED_STORE_CHUNK_MIN ||
        o->chunk_bytes > (512u << 20))
        return FED_ERR_INVAL;
    return FED_OK;
}

/* One writer a file: an exclusive flock(2) on FILE.lock beside the
 * database, held until fed_store_close, so a second read-write open (another
 * daemon given the same --db, fedsim, train, import) is refused before it
 * reads or writes anything. flock, not fcntl: it belongs to the open file,
 * so two opens in one process conflict too, and no other descriptor's close
 * drops it. A file of its own, not the database: SQLite's fcntl locks there
 * stay its own, and read-only opens (status, verify, export, the HTTP
 * thread) never take it. The file holds the holder's pid, which a refused
 * opener names, and stays on close: unlinking it would let a third opener
 * lock a new file while a second still holds the old one. An in-memory
 * database (no file name) takes none. */
static fed_err take_writer_lock(fed_store *st, const char *path)
{
    const char *file = sqlite3_db_filename(st->db, "main");
    char *lpath = NULL, buf[32];
    size_t n;
    ssize_t got;
    long pid;
    fed_err e = FED_OK;

    if (!file || !file[0])
        return FED_OK;
    n = strlen(file) + sizeof ".lock";
    if (!(lpath = fed_malloc(n)))
        return FED_ERR_NOMEM;
    snprintf(lpath, n, "%s.lock", file);
    st->lock_fd = open(lpath, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (st->lock_fd < 0) {
        fed_log(FED_LOG_ERROR, "store: %s: cannot open its writer's lock %s: %s", path, lpath,
                strerror(errno));
        e = errno == EACCES || errno == EPERM ? FED_ERR_PERM
          : errno == EROFS                    ? FED_ERR_READONLY
                                              : FED_ERR_IO;
        goto out;
    }
    if (flock(st->lock_fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno != EWOULDBLOCK) {
            fed_log(FED_LOG_ERROR, "store: %s: cannot lock %s: %s", path, lpath,
                    strerror(errno));
            e = FED_ERR_IO;
            goto out;
        }
        got = pread(st->lock_fd, buf, sizeof buf - 1, 0);
        buf[got > 0 ? got : 0] = '\0';
        pid = strtol(buf, NULL, 10);
        if (pid == (long)getpid())
            fed_log(FED_LOG_ERROR, "store: %s is in use by another open in this process"
                    " (one writer a database)", path);
        else if (pid > 0)
            fed_log(FED_LOG_ERROR, "store: %s is in use by another fednode process (pid %ld);"
                    " one writer a database (read-only commands such as status still work)",
                    path, pid);
        else
            fed_log(FED_LOG_ERROR, "store: %s is in use by another fednode process (%s is"
                    " locked); one writer a database", path, lpath);
        e = FED_ERR_IN_USE;
        goto out;
    }
    /* the pid only names the holder to a refused opener: a failed write
       (a full disk) leaves the lock as good */
    n = (size_t)snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(st->lock_fd, 0) == 0 && pwrite(st->lock_fd, buf, n, 0) != (ssize_t)n)
        fed_log(FED_LOG_WARN, "store: could not write the pid into %s", lpath);
out:
    if (e != FED_OK && st->lock_fd >= 0) {
        close(st->lock_fd);
        st->lock_fd = -1;
    }
    fed_free(lpath);
    return e;
}

fed_err fed_store_open(const char *path, const fed_store_opts *o, fed_store **out)
{
    fed_store *st = NULL;
    int readonly, flags, rc;
    int64_t version = 0;
    fed_err e;

    *out = NULL;
    if (!path)
        return FED_ERR_INVAL;
    st = fed_calloc(1, sizeof *st);
    if (!st)
        return FED_ERR_NOMEM;
    st->lock_fd = -1;
    if (o)
        st->opts = *o;
    else
        fed_store_opts_default(&st->opts);
    if ((e = check_opts(&st->opts)) != FED_OK)
        goto out;
    readonly = (st->opts.flags & FED_STORE_READONLY) != 0;
    if (readonly && strncmp(path, "file:", 5) != 0 && strcmp(path, ":memory:") != 0 &&
        access(path, F_OK) != 0) {
        fed_log(FED_LOG_ERROR, "store: %s does not exist", path);
        e = FED_ERR_NOTFOUND;
        goto out;
    }
    flags = (readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
            SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE;
    rc = sqlite3_open_v2(path, &st->db, flags, NULL);
    if (rc != SQLITE_OK) {
        e = fedi_store_err(st, rc, path);
        goto out;
    }
    sqlite3_extended_result_codes(st->db, 1);
    /* before the first read: a reader (fednode status) opening while the
       node writes waits out a lock instead of failing at once */
    sqlite3_busy_timeout(st->db, st->opts.busy_timeout_ms);
    if (!readonly && sqlite3_db_readonly(st->db, "main") == 1) {
        fed_log(FED_LOG_ERROR, "store: %s can only be opened read-only", path);
        e = FED_ERR_READONLY;
        goto out;
    }
    if (!readonly && (e = take_writer_lock(st, path)) != FED_OK)
        goto out;
    if ((e = check_identity(st, &version)) != FED_OK)
        goto out;
    if (readonly && version == 0) { /* nothing a reader could read, nor migrate */
        fed_log(FED_LOG_ERROR, "store: %s is not a fednode database (an empty file)", path);
        e = FED_ERR_MAGIC;
        goto out;
    }
    if (readonly && version < FED_STORE_SCHEMA_READ_MIN) {
        fed_log(FED_LOG_ERROR, "store: %s has schema %" PRId64 " (this build: %d); open it"
                " read-write once to migrate", path, version, FED_STORE_SCHEMA_VERSION);
        e = FED_ERR_SCHEMA;
        goto out;
    }
    if ((e = apply_pragmas(st, version == 0, readonly)) != FED_OK)
        goto out;
    st->schema = (int)version;
    if (!readonly && (e = migrate(st, version)) != FED_OK)
        goto out;
    if (readonly || (st->opts.flags & FED_STORE_NO_EPOCH))
        e = read_epoch(st);
    else
        e = bump_epoch(st);
out:
    if (e != FED_OK) {
        fed_store_close(st);
        return e;
    }
    *out = st;
    return FED_OK;
}

void fed_store_close(fed_store *st)
{
    if (!st)
        return;
    if (st->db) {
        fed_store_rollback(st);
        for (int i = 0; i < SQ_COUNT_; i++)
            sqlite3_finalize(st->stmt[i]);
        sqlite3_close(st->db);
    }
    if (st->lock_fd >= 0) /* after the connection: the last commit is in */
        close(st->lock_fd);
    fed_free(st);
}

uint64_t fed_store_epoch(const fed_store *st) { return st->epoch; }

fed_err fed_store_restart(fed_store *st)
{
    fed_store_rollback(st);
    if (st->opts.flags & (FED_STORE_READONLY | FED_STORE_NO_EPOCH))
        return read_epoch(st);
    return bump_epoch(st);
}
int fed_store_schema(const fed_store *st) { return st->schema; }
int fed_store_page_size(const fed_store *st) { return st->page_size; }

size_t fed_store_cache_bytes(fed_store *st)
{
    int cur = 0, high = 0;

    if (sqlite3_db_status(st->db, SQLITE_DBSTATUS_CACHE_USED, &cur, &high, 0) != SQLITE_OK)
        return 0;
    return cur > 0 ? (size_t)cur : 0;
}

/* ------------------------------------------------------------- rounds -- */

static void bind_real_or_null(sqlite3_stmt *s, int i, double v)
{
    if (isfinite(v))
        sqlite3_bind_double(s, i, v);
    else
        sqlite3_bind_null(s, i);
}

/* An epsilon: +inf (a release without noise) is stored as it is, never as
 * NULL, which reads back as "no DP": only NaN and 0 mean none. */
static void bind_epsilon(sqlite3_stmt *s, int i, double eps)
{
    if (eps > 0)
        sqlite3_bind_double(s, i, eps);
    else
        sqlite3_bind_null(s, i);
}

static double column_real_or_nan(sqlite3_stmt *s, int i)
{
    return sqlite3_column_type(s, i) == SQLITE_NULL ? NAN : sqlite3_column_double(s, i);
}

static void copy_text(char *dst, size_t cap, const unsigned char *src)
{
    snprintf(dst, cap, "%s", src ? (const char *)src : "");
}

static void copy_blob(uint8_t *dst, size_t len, sqlite3_stmt *s, int i)
{
    const void *b = sqlite3_column_blob(s, i);
    size_t n = (size_t)sqlite3_column_bytes(s, i);

    memset(dst, 0, len);
    if (b)
        memcpy(dst, b, n < len ? n : len);
}

fed_err fed_store_put_round(fed_store *st, const fed_store_round *r)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, SQ_ROUND_PUT, &e);

    if (!s)
        return e;
    sqlite3_bind_int64(s, 1, (int64_t)r->round);
    sqlite3_bind_int64(s, 2, (int64_t)r->start_ms);
    sqlite3_bind_int64(s, 3, (int64_t)r->end_ms);
    bind_real_or_null(s, 4, r->loss);
    bind_real_or_null(s, 5, r->accuracy);
    sqlite3_bind_int64(s, 6, (int64_t)r->samples);
    sqlite3_bind_int64(s, 7, (int64_t)r->bytes_in);
    sqlite3_bind_int64(s, 8, (int64_t)r->bytes_out);
    sqlite3_bind_int64(s, 9, r->peers);
    sqlite3_bind_text(s, 10, r->strategy, (int)strnlen(r->strategy, sizeof r->strategy),
                      SQLITE_STATIC);
    sqlite3_bind_blob(s, 11, r->model_hash, 32, SQLITE_STATIC);
    if (r->lr > 0 && isfinite(r->lr))
        sqlite3_bind_double(s, 12, r->lr);
    else
        sqlite3_bind_null(s, 12);
    bind_epsilon(s, 13, r->epsilon);
    return step_done(st, s, "write round");
}

static void read_round(sqlite3_stmt *s, fed_store_round *r)
{
    memset(r, 0, sizeof *r);
    r->round = (uint64_t)sqlite3_column_int64(s, 0);
    r->start_ms = (uint64_t)sqlite3_column_int64(s, 1);
    r->end_ms = (uint64_t)sqlite3_column_int64(s, 2);
    r->loss = column_real_or_nan(s, 3);
    r->accuracy = column_real_or_nan(s, 4);
    r->samples = (uint64_t)sqlite3_column_int64(s, 5);
    r->bytes_in = (uint64_t)sqlite3_column_int64(s, 6);
    r->bytes_out = (uint64_t)sqlite3_column_int64(s, 7);
    r->peers = (uint32_t)sqlite3_column_int64(s, 8);
    copy_text(r->strategy, sizeof r->strategy, sqlite3_column_text(s, 9));
    copy_blob(r->model_hash, 32, s, 10);
    r->lr = sqlite3_column_type(s, 11) == SQLITE_NULL ? 0 : sqlite3_column_double(s, 11);
    r->epsilon = sqlite3_column_type(s, 12) == SQLITE_NULL ? 0 : sqlite3_column_double(s, 12);
}

/* ---------------------------------------------------------- dp charges -- */

fed_err fed_store_put_dp_charge(fed_store *st, const fed_store_dp_charge *c)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s;

    if (!(c->q >= 0 && c->q <= 1) || !(c->sigma >= 0) || !isfinite(c->sigma) ||
        !(c->delta > 0 && c->delta < 1) || c->steps > INT64_MAX)
        return FED_ERR_INVAL;
    if (!(s = fedi_store_stmt(st, SQ_DP_PUT, &e)))
        return e;
    sqlite3_bind_int64(s, 1, (int64_t)c->round);
    sqlite3_bind_int64(s, 2, (int64_t)c->at_ms);
    sqlite3_bind_double(s, 3, c->q);
    sqlite3_bind_double(s, 4, c->sigma);
    sqlite3_bind_int64(s, 5, (int64_t)c->steps);
    sqlite3_bind_double(s, 6, c->delta);
    bind_epsilon(s, 7, c->epsilon);
    return step_done(st, s, "write dp charge");
}

fed_err fed_store_each_dp_charge(fed_store *st, fed_store_dp_fn fn, void *ctx)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s;
    fed_store_dp_charge c;
    int rc;

    if (st->schema < 4) /* an older file opened read-only: no charges */
        return FED_OK;
    if (!(s = fedi_store_stmt(st, SQ_DP_EACH, &e)))
        return e;
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        memset(&c, 0, sizeof c);
        c.round = (uint64_t)sqlite3_column_int64(s, 0);
        c.at_ms = (uint64_t)sqlite3_column_int64(s, 1);
        c.q = sqlite3_column_double(s, 2);
        c.sigma = sqlite3_column_double(s, 3);
        c.steps = (uint64_t)sqlite3_column_int64(s, 4);
        c.delta = sqlite3_column_double(s, 5);
        c.epsilon = column_real_or_nan(s, 6);
        if (fn(ctx, &c))
            break;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = fedi_store_err(st, rc, "read dp charges");
    sqlite3_reset(s);
    return e;
}

/* ------------------------------------------------------ secagg tries -- */

fed_err fed_store_put_secagg_try(fed_store *st, const fed_store_secagg_try *t)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s;
    const uint32_t *v = &t->sampled;

    if (!(s = fedi_store_stmt(st, SQ_SA_PUT, &e)))
        return e;
    sqlite3_bind_int64(s, 1, (int64_t)t->round);
    sqlite3_bind_int64(s, 2, t->try_no);
    sqlite3_bind_int64(s, 3, (int64_t)t->at_ms);
    for (int i = 0; i < 8; i++)
        sqlite3_bind_int64(s, 4 + i, v[i]);
    sqlite3_bind_text(s, 12, t->outcome, -1, SQLITE_TRANSIENT);
    return step_done(st, s, "write secagg try");
}

fed_err fed_store_each_secagg_try(fed_store *st, uint64_t from_round, fed_store_secagg_fn fn,
                                  void *ctx)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s;
    fed_store_secagg_try t;
    int rc;

    if (st->schema < 5) /* an older file opened read-only: none */
        return FED_OK;
    if (!(s = fedi_store_stmt(st, SQ_SA_EACH, &e)))
        return e;
    sqlite3_bind_int64(s, 1, (int64_t)from_round);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        uint32_t *v = &t.sampled;
        const unsigned char *txt;

        memset(&t, 0, sizeof t);
        t.round = (uint64_t)sqlite3_column_int64(s, 0);
        t.try_no = (uint32_t)sqlite3_column_int64(s, 1);
        t.at_ms = (uint64_t)sqlite3_column_int64(s, 2);
        for (int i = 0; i < 8; i++)
            v[i] = (uint32_t)sqlite3_column_int64(s, 3 + i);
        txt = sqlite3_column_text(s, 11);
        snprintf(t.outcome, sizeof t.outcome, "%s", txt ? (const char *)txt : "");
        if (fn(ctx, &t))
            break;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = fedi_store_err(st, rc, "read secagg tries");
    sqlite3_reset(s);
    return e;
}

/* ---------------------------------------------------- round metrics -- */

fed_err fed_store_put_metric(fed_store *st, uint64_t round, const char *name, double value)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s;

    if (!(s = fedi_store_stmt(st, SQ_METRIC_PUT, &e)))
        return e;
    sqlite3_bind_int64(s, 1, (int64_t)round);
    sqlite3_bind_text(s, 2, name, -1, SQLITE_TRANSIENT);
    if (isnan(value))
        sqlite3_bind_null(s, 3);
    else
        sqlite3_bind_double(s, 3, value);
    return step_done(st, s, "write round metric");
}

fed_err fed_store_each_metric(fed_store *st, uint64_t round, fed_store_metric_fn fn, void *ctx)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s;
    int rc;

    if (st->schema < 7) /* an older file opened read-only: none */
        return FED_OK;
    if (!(s = fedi_store_stmt(st, SQ_METRIC_EACH, &e)))
        return e;
    sqlite3_bind_int64(s, 1, round > INT64_MAX ? INT64_MAX : (int64_t)round);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const unsigned char *name = sqlite3_column_text(s, 1);
        double v = sqlite3_column_type(s, 2) == SQLITE_NULL ? NAN : sqlite3_column_double(s, 2);

        if (fn(ctx, (uint64_t)sqlite3_column_int64(s, 0), name ? (const char *)name : "", v))
            break;
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = fedi_store_err(st, rc, "read round metrics");
    sqlite3_reset(s);
    return e;
}

fed_err fed_store_best_metric(fed_store *st, const char *name, int higher, uint64_t *round,
                              double *value)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s;
    int rc;

    if (st->schema < 7)
        return FED_ERR_NOTFOUND;
    if (!(s = fedi_store_stmt(st, SQ_METRIC_BEST, &e)))
        return e;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(s, 2, higher != 0);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW) {
        *round = (uint64_t)sqlite3_column_int64(s, 0);
        *value = sqlite3_column_double(s, 1);
    } else {
        e = rc == SQLITE_DONE ? FED_ERR_NOTFOUND : fedi_store_err(st, rc, "read the best round");
    }
    sqlite3_reset(s);
    return e;
}

fed_err fed_store_metric_last(fed_store *st, const char *name, uint64_t *round)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s;
    int rc;

    if (st->schema < 7)
        return FED_ERR_NOTFOUND;
    if (!(s = fedi_store_stmt(st, SQ_METRIC_LAST, &e)))
        return e;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_TRANSIENT);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW && sqlite3_column_type(s, 0) != SQLITE_NULL)
        *round = (uint64_t)sqlite3_column_int64(s, 0);
    else
        e = rc == SQLITE_ROW ? FED_ERR_NOTFOUND : fedi_store_err(st, rc, "read the newest round");
    sqlite3_reset(s);
    return e;
}

/* A read of rounds: a v2 or v3 file (read-only, not migrated) lacks lr and
 * epsilon, or epsilon. */
static store_stmt_id round_read(const fed_store *st, store_stmt_id id)
{
    if (st->schema >= 4)
        return id;
    if (st->schema == 3)
        return id == SQ_ROUND_GET ? SQ_ROUND_GET_V3 : SQ_ROUND_LAST_V3;
    return id == SQ_ROUND_GET ? SQ_ROUND_GET_V2 : SQ_ROUND_LAST_V2;
}

fed_err fed_store_get_round(fed_store *st, uint64_t round, fed_store_round *out)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, round_read(st, SQ_ROUND_GET), &e);
    int rc;

    if (!s)
        return e;
    sqlite3_bind_int64(s, 1, (int64_t)round);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        read_round(s, out);
    else
        e = rc == SQLITE_DONE ? FED_ERR_NOTFOUND : fedi_store_err(st, rc, "read round");
    sqlite3_reset(s);
    return e;
}

fed_err fed_store_last_rounds(fed_store *st, fed_store_round *out, size_t cap, size_t *n)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, round_read(st, SQ_ROUND_LAST), &e);
    int rc;

    *n = 0;
    if (!s)
        return e;
    sqlite3_bind_int64(s, 1, (int64_t)cap);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && *n < cap)
        read_round(s, &out[(*n)++]);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = fedi_store_err(st, rc, "read rounds");
    sqlite3_reset(s);
    return e;
}

/* ------------------------------------------------------ contributions -- */

fed_err fed_store_put_contribution(fed_store *st, const fed_store_contrib *c)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s;

    if (c->round > INT64_MAX || c->header_len > FED_STORE_HEADER_MAX ||
        (c->header_len && !c->header) || !(c->dp_epsilon >= 0 && c->dp_epsilon < INFINITY) ||
        !(c->dp_budget >= 0 && c->dp_budget < INFINITY))
        return FED_ERR_INVAL;
    s = fedi_store_stmt(st, SQ_CONTRIB_PUT, &e);
    if (!s)
        return e;
    sqlite3_bind_int64(s, 1, (int64_t)c->round);
    sqlite3_bind_blob(s, 2, c->peer_key, 32, SQLITE_STATIC);
    sqlite3_bind_blob(s, 3, c->digest, (int)sizeof c->digest, SQLITE_STATIC);
    sqlite3_bind_blob(s, 4, c->signature, 64, SQLITE_STATIC);
    sqlite3_bind_blob(s, 5, c->header_len ? (const void *)c->header : "", (int)c->header_len,
                      SQLITE_STATIC);
    sqlite3_bind_int(s, 6, c->accepted ? 1 : 0);
    sqlite3_bind_text(s, 7, c->reason, (int)strnlen(c->reason, sizeof c->reason),
                      SQLITE_STATIC);
    if (c->dp_epsilon == 0 && c->dp_budget == 0) { /* no report */
        sqlite3_bind_null(s, 8);
        sqlite3_bind_null(s, 9);
    } else {
        sqlite3_bind_double(s, 8, c->dp_epsilon);
        sqlite3_bind_double(s, 9, c->dp_budget);
    }
    return step_done(st, s, "write contribution");
}

fed_err fed_store_each_contribution(fed_store *st, uint64_t from_round, fed_store_contrib_fn fn,
                                    void *ctx)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, st->schema >= 6 ? SQ_CONTRIB_EACH : SQ_CONTRIB_EACH_V5, &e);
    fed_store_contrib c;
    int64_t from = INT64_MAX; /* past any round put_contribution takes */
    int rc;

    if (!s)
        return e;
    /* 0 means every row: a round stored negative (only an edited database
       has one) is still read, and verify still judges it */
    if (from_round == 0)
        from = INT64_MIN;
    else if (from_round <= INT64_MAX)
        from = (int64_t)from_round;
    sqlite3_bind_int64(s, 1, from);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        memset(&c, 0, sizeof c);
        c.round = (uint64_t)sqlite3_column_int64(s, 0);
        if (sqlite3_column_bytes(s, 1) != 32 || sqlite3_column_bytes(s, 2) != 64 ||
            sqlite3_column_bytes(s, 3) != 64) {
            fed_log(FED_LOG_WARN, "store: contribution of round %" PRIu64 " has bad field sizes",
                    c.round);
            e = FED_ERR_CORRUPT;
            break;
        }
        copy_blob(c.peer_key, 32, s, 1);
        copy_blob(c.digest, sizeof c.digest, s, 2);
        copy_blob(c.signature, 64, s, 3);
        c.header = sqlite3_column_blob(s, 4);
        c.header_len = (size_t)sqlite3_column_bytes(s, 4);
        c.accepted = sqlite3_column_int(s, 5);
        copy_text(c.reason, sizeof c.reason, sqlite3_column_text(s, 6));
        c.dp_epsilon = sqlite3_column_double(s, 7); /* NULL: 0 */
        c.dp_budget = sqlite3_column_double(s, 8);
        if (fn(ctx, &c))
            break;
    }
    if (e == FED_OK && rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = fedi_store_err(st, rc, "read contributions");
    sqlite3_reset(s);
    return e;
}

/* -------------------------------------------------------------- peers -- */

fed_err fed_store_put_peer(fed_store *st, const fed_store_peer *p)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, SQ_PEER_PUT, &e);

    if (!s)
        return e;
    sqlite3_bind_blob(s, 1, p->key, 32, SQLITE_STATIC);
    sqlite3_bind_text(s, 2, p->addr, (int)strnlen(p->addr, sizeof p->addr), SQLITE_STATIC);
    sqlite3_bind_int64(s, 3, (int64_t)p->first_seen_ms);
    sqlite3_bind_int64(s, 4, (int64_t)p->last_seen_ms);
    sqlite3_bind_int64(s, 5, (int64_t)p->last_round);
    sqlite3_bind_int64(s, 6, (int64_t)p->epoch);
    return step_done(st, s, "write peer");
}

fed_err fed_store_list_peers(fed_store *st, fed_store_peer *out, size_t cap, size_t *n)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, SQ_PEER_LIST, &e);
    int rc;

    *n = 0;
    if (!s)
        return e;
    sqlite3_bind_int64(s, 1, (int64_t)cap);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && *n < cap) {
        fed_store_peer *p = &out[(*n)++];

        memset(p, 0, sizeof *p);
        copy_blob(p->key, 32, s, 0);
        copy_text(p->addr, sizeof p->addr, sqlite3_column_text(s, 1));
        p->first_seen_ms = (uint64_t)sqlite3_column_int64(s, 2);
        p->last_seen_ms = (uint64_t)sqlite3_column_int64(s, 3);
        p->last_round = (uint64_t)sqlite3_column_int64(s, 4);
        p->epoch = (uint64_t)sqlite3_column_int64(s, 5);
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = fedi_store_err(st, rc, "read peers");
    sqlite3_reset(s);
    return e;
}

/* ----------------------------------------------------------- counters -- */

fed_err fed_store_put_counters(fed_store *st, const fed_store_counter *c, size_t n)
{
    store_tx tx;
    fed_err e;

    for (size_t i = 0; i < n; i++)
        if (!c[i].name[0] || c[i].value > INT64_MAX)
            return FED_ERR_INVAL;
    if ((e = fedi_store_tx_enter(st, &tx)) != FED_OK)
        return e;
    for (size_t i = 0; i < n && e == FED_OK; i++) {
        sqlite3_stmt *s = fedi_store_stmt(st, SQ_COUNTER_PUT, &e);

        if (!s)
            break;
        sqlite3_bind_text(s, 1, c[i].name, (int)strnlen(c[i].name, sizeof c[i].name),
                          SQLITE_STATIC);
        sqlite3_bind_int64(s, 2, (int64_t)c[i].value);
        e = step_done(st, s, "write counter");
    }
    return fedi_store_tx_leave(st, &tx, e);
}

fed_err fed_store_list_counters(fed_store *st, fed_store_counter *out, size_t cap, size_t *n)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, SQ_COUNTER_LIST, &e);
    int rc;

    *n = 0;
    if (!s)
        return e;
    sqlite3_bind_int64(s, 1, (int64_t)cap);
    while ((rc = sqlite3_step(s)) == SQLITE_ROW && *n < cap) {
        fed_store_counter *c = &out[(*n)++];

        copy_text(c->name, sizeof c->name, sqlite3_column_text(s, 0));
        c->value = (uint64_t)sqlite3_column_int64(s, 1);
    }
    if (rc != SQLITE_ROW && rc != SQLITE_DONE)
        e = fedi_store_err(st, rc, "read counters");
    sqlite3_reset(s);
    return e;
}

fed_err fed_store_get_counter(fed_store *st, const char *name, uint64_t *value)
{
    fed_err e = FED_OK;
    sqlite3_stmt *s = fedi_store_stmt(st, SQ_COUNTER_GET, &e);
    int rc;

    if (!s)
        return e;
    sqlite3_bind_text(s, 1, name, -1, SQLITE_STATIC);
    rc = sqlite3_step(s);
    if (rc == SQLITE_ROW)
        *value = (uint64_t)sqlite3_column_int64(s, 0);
    else
        e = rc == SQLITE_DONE ? FED_ERR_NOTFOUND : fedi_store_err(st, rc, "read counter");
    sqlite3_reset(s);
    return e;
}

/* ---------------------------------------------------------- integrity -- */

#define INTEGRITY_SHOWN 3 /* problems quoted in msg; the rest counted */

/* Adds each line of t (a row of integrity_check: one problem, or several
 * joined by newlines, after a "*** in database main ***" heading) to msg. */
static void integrity_lines(const char *t, char *msg, size_t cap, size_t *n)
{
    while (*t) {
        size_t len = strcspn(t, "\n");

        if (len && strncmp(t, "*** ", 4) != 0) {
            if (*n < INTEGRITY_SHOWN && msg && cap) {
                size_t used = strlen(msg);

                snprintf(msg + used, cap - used, "\n  %.*s", (int)len, t);
            }
            (*n)++;
        }
        t += len + (t[len] == '\n');
    }
}

fed_err fed_store_integrity_check(fed_store *st, char *msg, size_t cap)
{
    sqlite3_stmt *s = NULL;
    char lines[1024] = "";
    size_t n = 0;
    int rc = sqlite3_prepare_v2(st->db, "PRAGMA integrity_check", -1, &s, NULL);
    fed_err e = FED_OK;

    if (msg && cap)
        msg[0] = '\0';
    if (rc != SQLITE_OK)
        return fedi_store_err(st, rc, "integrity_check");
    while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
        const char *t = (const char *)sqlite3_column_text(s, 0);

        if (!t || strcmp(t, "ok") != 0)
            integrity_lines(t ? t : "?", lines, sizeof lines, &n);
    }
    if (rc != SQLITE_DONE) /* it may stop on the damage after reporting some */
        e = fedi_store_err(st, rc, "integrity_check");
    if (n) {
        e = FED_ERR_DB_DAMAGED;
        if (msg && cap)
            snprintf(msg, cap, "%s: %zu problem%s%s%s%s", fed_strerror(e), n,
                     n == 1 ? "" : "s", rc != SQLITE_DONE ? " before the check stopped" : "",
                     lines, n > INTEGRITY_SHOWN ? "\n  ..." : "");
        fed_log(FED_LOG_ERROR, "store: integrity_check: %zu problem%s, first:%s", n,
                n == 1 ? "" : "s", lines);
    } else if (e != FED_OK && msg && cap) {
        snprintf(msg, cap, "%s: the check stopped: %s", fed_strerror(e),
                 sqlite3_errmsg(st->db));
    } else if (msg && cap) {
        snprintf(msg, cap, "ok");
    }
    sqlite3_finalize(s);
    return e;
}
