/* store.h - a node's SQLite database (WAL): its epoch, the round log, the
 * contributions it merged or refused (with their signatures, for audit),
 * peers, rejection counters, and hash-chained checkpoints stored in chunks.
 * After any crash the node restarts from here: a round is either committed
 * whole (its row, contributions, counters, checkpoint: one transaction) or
 * not at all, and nothing reported committed is ever lost to a kill -9.
 *
 * One fed_store belongs to one thread at a time (the node's loop). Errors:
 * a database that cannot be written gives FED_ERR_READONLY, a full disk or
 * the max_bytes cap FED_ERR_FULL, a lock held too long FED_ERR_BUSY, a file
 * that is not ours FED_ERR_MAGIC, a schema newer than this build knows
 * FED_ERR_SCHEMA, a file SQLite finds damaged (SQLITE_CORRUPT)
 * FED_ERR_DB_DAMAGED; other SQLite failures FED_ERR_DB (logged with SQLite's
 * message). A failed call inside a transaction leaves the transaction open
 * (roll it back) unless SQLite itself rolled it back (FULL, NOMEM, IO).
 *
 * Schema (PRAGMA application_id 0x4645444E "FEDN", PRAGMA user_version =
 * schema version, also meta.schema_version):
 *   v1  meta(key, value)            schema_version, epoch, node_key
 *       rounds(round PK, start_ms, end_ms, loss, accuracy, samples,
 *              bytes_in, bytes_out, peers, strategy, model_hash)
 *       contributions(id PK, round, peer_key, digest, signature, header,
 *              accepted, reason)
 *       checkpoints(id PK = position in the chain from 1, round, created_s,
 *              size, chunks, hash, prev_hash, pruned)   -- kept forever
 *       checkpoint_chunks(ckpt, idx, data)               -- pruned by retention
 *       peers(key PK, addr, first_seen_ms, last_seen_ms, last_round)
 *       counters(name PK, value)
 *   v2  checkpoints.epoch (the node epoch that wrote it), peers.epoch (the
 *       peer's last known epoch).
 *   v3  rounds.lr (the learning rate the round trained at; NULL: none).
 *   v4  dp_charges(id PK, round, at_ms, q, sigma, steps, delta, epsilon):
 *       DP-SGD's releases at this site, one row each (a round trained
 *       again is charged again), the accountant's whole state;
 *       rounds.epsilon (NULL: no DP).
 *   v5  secagg_tries(id PK, round, try, at_ms, sampled, keyed, k, t, shared,
 *       masked, signed, unmasked, outcome): secure aggregation's tries at an
 *       aggregator, one row each, with how many clients were at each stage
 *       and the outcome ("" committed, else why it failed closed). Each
 *       client's fate and its signed masked input are its contributions
 *       row (reason "" in the sum, "secagg: ..." where it dropped).
 *   v6  contributions.dp_epsilon, contributions.dp_budget: the privacy
 *       budget the client reported with it (wire v4's DP report: epsilon
 *       spent, budget; NULL: none reported).
 *   v7  round_metrics(round, name, value): the figures of an evaluated
 *       round by name (the aggregator's evaluation: loss, accuracy, auc,
 *       sensitivity, ..., recall.C, confusion.T.P; model/metrics.h), one row
 *       each, unique per (round, name); NULL: not defined (NaN).
 * Older files are migrated forward at a read-write open. A read-only open
 * takes files from FED_STORE_SCHEMA_READ_MIN on as they are (a v2 file's
 * rounds read with lr 0, a v3 file's with epsilon 0 and no charges, a v5
 * file's contributions with no DP report), so `fednode status` reads an old node's database
 * without changing it.
 *
 * Page size: a new file gets FED_STORE_PAGE_SIZE (64 KiB). Checkpoints are
 * written as large blobs, stored as overflow-page chains: 16 times fewer
 * pages (page headers, chain pointers, WAL frame headers, cache lookups) per
 * byte at 64 KiB. bench/bench_store.c measures 1 MiB blob inserts, one commit
 * each, WAL + FULL: 64 KiB pages did 1.3x to 2.3x the inserts per second of
 * 4 KiB pages here over several (noisy) runs, e.g. 311 vs 138 /s. Small rows
 * (rounds, peers) do not care. An existing file keeps its page size.
 */
#ifndef FED_STORAGE_STORE_H
#define FED_STORAGE_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define FED_STORE_APP_ID 0x4645444Eu /* "FEDN" */
#define FED_STORE_SCHEMA_VERSION 7
#define FED_STORE_SCHEMA_READ_MIN 2 /* the oldest a read-only open takes */
#define FED_STORE_PAGE_SIZE 65536
#define FED_STORE_CHUNK_BYTES (16u << 20) /* checkpoint bytes per chunk row */
#define FED_STORE_CHUNK_MIN 4096u
#define FED_STORE_CACHE_KIB 2048 /* SQLite's page cache per open, at most */

typedef struct fed_store fed_store;

/* Open flags. */
#define FED_STORE_READONLY 1u /* SQLITE_OPEN_READONLY: no migration, no epoch */
#define FED_STORE_NO_EPOCH 2u /* a tool (import, verify): leave the epoch alone */
/* a new database gives its free pages back at each commit (auto_vacuum FULL):
 * for one in memory, whose freed pages (a pruned checkpoint's) it would
 * otherwise hold for good */
#define FED_STORE_GIVE_BACK 4u

typedef enum fed_store_sync {
    FED_STORE_SYNC_FULL = 0,   /* fsync at every commit: survives power loss */
    FED_STORE_SYNC_NORMAL = 1, /* WAL NORMAL: survives kill -9, not power loss */
    FED_STORE_SYNC_OFF = 2,    /* simulator: survives kill -9, not power loss */
} fed_store_sync;

/* Start from fed_store_opts_default(): a zeroed struct means no busy wait
 * and no retention (page and chunk sizes of 0 do take the defaults). */
typedef struct fed_store_opts {
    unsigned flags;           /* FED_STORE_READONLY | FED_STORE_NO_EPOCH */
    int busy_timeout_ms;      /* default 5000 */
    int page_size;            /* for a new file; default FED_STORE_PAGE_SIZE */
    fed_store_sync sync;      /* default FULL */
    uint64_t max_bytes;       /* cap on the file (PRAGMA max_page_count); 0 none */
    size_t chunk_bytes;       /* checkpoint chunk; default FED_STORE_CHUNK_BYTES */
    uint32_t keep_last;       /* retention: keep the blobs of the K newest */
    uint32_t keep_every;      /* ... and of every M-th checkpoint (id % M == 0); 0 none */
    /* Wall clock in seconds since the Unix epoch (the epoch rule, checkpoint
     * times); NULL uses time(). fed_env's wall_s fits as is. */
    uint64_t (*wall_s)(void *ctx);
    void *clock_ctx;
} fed_store_opts;

/* Defaults: busy 5000 ms, 64 KiB pages, FULL, 16 MiB chunks, keep_last 3,
 * keep_every 0 (keep_last 0 keeps every blob). */
void fed_store_opts_default(fed_store_opts *o);

/* Open (or create, unless READONLY) the database at path (":memory:" works,
 * without WAL). A read-write open applies pending migrations and, unless
 * NO_EPOCH, sets the node's epoch to max(stored epoch + 1, wall-clock
 * seconds) and commits it before returning. A file that SQLite can only open
 * read-only gives FED_ERR_READONLY here, not at the first write. One
 * read-write open a file at a time: it holds an exclusive lock on
 * path + ".lock" until fed_store_close, and a second (this process or
 * another) gives FED_ERR_IN_USE, logging the holder's pid, before reading or
 * writing anything; READONLY opens take no lock and read beside a writer.
 * o may be NULL for defaults. *out is closed with fed_store_close. */
FED_WUR fed_err fed_store_open(const char *path, const fed_store_opts *o, fed_store **out);
void fed_store_close(fed_store *st); /* NULL fine; rolls back an open transaction */

/* This open's epoch (the stored one for READONLY / NO_EPOCH opens). */
uint64_t fed_store_epoch(const fed_store *st);
int fed_store_schema(const fed_store *st);
/* What a process restart does to an open database, without closing it (the
 * simulator keeps a crashed node's in-memory database): roll back the open
 * transaction, as a killed process leaves it, then apply the epoch rule again
 * as fed_store_open does. */
FED_WUR fed_err fed_store_restart(fed_store *st);
int fed_store_page_size(const fed_store *st);
/* Heap bytes SQLite's page cache holds for this open now: at most about
 * FED_STORE_CACHE_KIB KiB once a transaction ends (a big one spills past). */
size_t fed_store_cache_bytes(fed_store *st);
/* Time this open spent writing checkpoints (fed_store_checkpoint_write) and
 * committing transactions (fed_store_commit, the fsync included), measured
 * on CLOCK_MONOTONIC: what the status page and /metrics show. Nothing the
 * store decides depends on them. */
typedef struct fed_store_stats {
    uint64_t ckpt_writes;
    double ckpt_write_s;
    uint64_t commits;
    double commit_s;
} fed_store_stats;
void fed_store_get_stats(const fed_store *st, fed_store_stats *out);
/* The cap on the file, as fed_store_opts.max_bytes, now (0: none); never
 * below what the file holds already, so 1 stops it growing. */
FED_WUR fed_err fed_store_set_max_bytes(fed_store *st, uint64_t bytes);

/* The node key the database belongs to: set once; a different key later is
 * FED_ERR_KEY (one database, one node). get gives FED_ERR_NOTFOUND if unset. */
FED_WUR fed_err fed_store_set_node_key(fed_store *st, const uint8_t key[32]);
FED_WUR fed_err fed_store_node_key(fed_store *st, uint8_t key[32]);

/* One transaction per round: begin (BEGIN IMMEDIATE, waits busy_timeout for
 * the write lock), the round's puts and its checkpoint, commit. Calls made
 * outside begin/commit run in a transaction of their own. A commit that
 * fails (FED_ERR_FULL, FED_ERR_IO) leaves the round rolled back, never half
 * written. rollback is fine without a transaction. in_tx: between begin and
 * commit/rollback (SQLite rolling back by itself after FULL ends it too). */
FED_WUR fed_err fed_store_begin(fed_store *st);
/* begin, with this transaction's commit made durable whatever the open's
 * sync mode (PRAGMA synchronous = FULL for it: the WAL is fsynced before
 * commit returns; the open's own mode is back after commit or rollback).
 * For what must survive a power cut before the node acts on it: a privacy
 * charge before its delta leaves. */
FED_WUR fed_err fed_store_begin_durable(fed_store *st);
FED_WUR fed_err fed_store_commit(fed_store *st);
void fed_store_rollback(fed_store *st);
int fed_store_in_tx(const fed_store *st);

/* ---- rounds ---- */
typedef struct fed_store_round {
    uint64_t round;
    uint64_t start_ms, end_ms;      /* wall clock, ms since the Unix epoch */
    double loss, accuracy;          /* NaN: not measured (stored as NULL) */
    uint64_t samples;
    uint64_t bytes_in, bytes_out;
    uint32_t peers;                 /* deltas merged (aggregator) or neighbours (peer) */
    char strategy[32];              /* "fedavg", "median", ... */
    uint8_t model_hash[32];         /* BLAKE2b-256 of the round's parameters
                                       (fed_crypto_model_hash) */
    double lr;                      /* the learning rate the round trained at
                                       (aggregator: the one its MODEL asked
                                       for); 0: none (stored as NULL) */
    double epsilon;                 /* DP-SGD: the site's epsilon spent after this
                                       round; 0 (or NaN): none, stored NULL, read 0 */
} fed_store_round;

/* Insert or replace round r->round (a round redone after a crash replaces). */
FED_WUR fed_err fed_store_put_round(fed_store *st, const fed_store_round *r);
FED_WUR fed_err fed_store_get_round(fed_store *st, uint64_t round, fed_store_round *out);
/* The cap newest rounds, newest first; *n set to how many. */
FED_WUR fed_err fed_store_last_rounds(fed_store *st, fed_store_round *out, size_t cap, size_t *n);

/* ---- DP-SGD's privacy charges (the site's accountant) ----
 * One row per release: its subsampled Gaussian (rate q, noise multiplier
 * sigma) run steps times, and, for the record, the delta the node accounts at
 * and the epsilon spent in all after it (NaN: not given). The total is
 * recomputed from every row (privacy/rdp.h composes them). */
typedef struct fed_store_dp_charge {
    uint64_t round;
    uint64_t at_ms;   /* wall clock */
    double q, sigma;
    uint64_t steps;
    double delta;
    double epsilon;
} fed_store_dp_charge;

/* FED_ERR_INVAL: q outside [0, 1], sigma negative or not finite, delta
 * outside (0, 1). */
FED_WUR fed_err fed_store_put_dp_charge(fed_store *st, const fed_store_dp_charge *c);
/* fn for every charge in the order made; nonzero stops with FED_OK. */
typedef int (*fed_store_dp_fn)(void *ctx, const fed_store_dp_charge *c);
FED_WUR fed_err fed_store_each_dp_charge(fed_store *st, fed_store_dp_fn fn, void *ctx);

/* ---- secure aggregation's tries (aggregator) ---- */
typedef struct fed_store_secagg_try {
    uint64_t round;
    uint32_t try_no;
    uint64_t at_ms;   /* wall clock at its end */
    /* clients: sampled, in the key list, k and t, and at each later stage */
    uint32_t sampled, keyed, k, t, shared, masked, signed_, unmasked;
    char outcome[160]; /* "" committed; else why it failed closed */
} fed_store_secagg_try;

FED_WUR fed_err fed_store_put_secagg_try(fed_store *st, const fed_store_secagg_try *t);
typedef int (*fed_store_secagg_fn)(void *ctx, const fed_store_secagg_try *t);
/* fn for each try of rounds >= from_round, in the order written; nonzero
 * stops with FED_OK. None from a file before v5. */
FED_WUR fed_err fed_store_each_secagg_try(fed_store *st, uint64_t from_round,
                                          fed_store_secagg_fn fn, void *ctx);

/* A text value in meta under key (e.g. "best_metric"), and back:
 * FED_ERR_NOTFOUND when none (or not text); out truncated to cap. */
FED_WUR fed_err fed_store_put_meta_text(fed_store *st, const char *key, const char *value);
FED_WUR fed_err fed_store_meta_text(fed_store *st, const char *key, char *out, size_t cap);

/* ---- the figures of evaluated rounds (v7) ---- */
/* Records (round, name) = value (NaN stored NULL), replacing a value there. */
FED_WUR fed_err fed_store_put_metric(fed_store *st, uint64_t round, const char *name,
                                     double value);
typedef int (*fed_store_metric_fn)(void *ctx, uint64_t round, const char *name, double value);
/* fn for each figure of the newest round <= round that has any, in the
 * order written; nonzero stops with FED_OK. None from a file before v7. */
FED_WUR fed_err fed_store_each_metric(fed_store *st, uint64_t round, fed_store_metric_fn fn,
                                      void *ctx);
/* The newest round that has figure name; FED_ERR_NOTFOUND when none. */
FED_WUR fed_err fed_store_metric_last(fed_store *st, const char *name, uint64_t *round);
/* The round where figure name was best (highest when higher, else lowest;
 * the earliest of equals) and its value; FED_ERR_NOTFOUND when no round
 * has it. */
FED_WUR fed_err fed_store_best_metric(fed_store *st, const char *name, int higher,
                                      uint64_t *round, double *value);

/* ---- contributions ---- */
#define FED_STORE_HEADER_MAX 1024
typedef struct fed_store_contrib {
    uint64_t round;
    uint8_t peer_key[32];   /* sender's Ed25519 public key */
    uint8_t digest[64];     /* BLAKE2b-512 of header || payload, as signed */
    uint8_t signature[64];  /* Ed25519 over digest by peer_key */
    const uint8_t *header;  /* frame header bytes (header_len <= FED_STORE_HEADER_MAX) */
    size_t header_len;
    int accepted;           /* 1 merged, 0 refused */
    char reason[64];        /* why refused ("" when accepted) */
    double dp_epsilon;      /* v6: the epsilon the client reported it has spent, */
    double dp_budget;       /* and its budget (0: none); both 0: no report */
} fed_store_contrib;

FED_WUR fed_err fed_store_put_contribution(fed_store *st, const fed_store_contrib *c);
/* Calls fn for every contribution of rounds from_round on (0: every row), in
 * (round, id) order, read through the round index; c->header is valid
 * during the call only. fn returning nonzero stops with FED_OK. */
typedef int (*fed_store_contrib_fn)(void *ctx, const fed_store_contrib *c);
FED_WUR fed_err fed_store_each_contribution(fed_store *st, uint64_t from_round,
                                            fed_store_contrib_fn fn, void *ctx);

/* ---- peers ---- */
typedef struct fed_store_peer {
    uint8_t key[32];
    char addr[128];
    uint64_t first_seen_ms, last_seen_ms; /* first_seen is kept on update */
    uint64_t last_round;
    uint64_t epoch;                        /* the peer's last known epoch */
} fed_store_peer;

FED_WUR fed_err fed_store_put_peer(fed_store *st, const fed_store_peer *p);
/* Up to cap peers, most recently seen first. */
FED_WUR fed_err fed_store_list_peers(fed_store *st, fed_store_peer *out, size_t cap, size_t *n);

/* ---- counters (rejections by reason; flushed each round, absolute values) ---- */
typedef struct fed_store_counter {
    char name[48];
    uint64_t value;
} fed_store_counter;

FED_WUR fed_err fed_store_put_counters(fed_store *st, const fed_store_counter *c, size_t n);
/* Up to cap counters by name; a name absent gives FED_ERR_NOTFOUND in get. */
FED_WUR fed_err fed_store_list_counters(fed_store *st, fed_store_counter *out, size_t cap,
                                        size_t *n);
FED_WUR fed_err fed_store_get_counter(fed_store *st, const char *name, uint64_t *value);

/* PRAGMA integrity_check: FED_OK when "ok", else FED_ERR_DB_DAMAGED (the
 * file is damaged at the SQLite level: not a hash or chain mismatch) with
 * msg (may be NULL) saying so, the number of problems and the first few, one
 * per line: "database file damaged (...): 3 problems\n  Page 9: ...". */
FED_WUR fed_err fed_store_integrity_check(fed_store *st, char *msg, size_t cap);

/* ---- checkpoints ----
 * A checkpoint is one byte string, stored as rows of at most chunk_bytes in
 * checkpoint_chunks; its hash (BLAKE2b-256, unkeyed, streamed over the
 * chunks; SHA-256 in version 1, still read) and the previous checkpoint's
 * hash sit in its checkpoints row. The header binds the round and the
 * previous hash, so the hash covers the link.
 *
 *   offset       size  field (integers little-endian)
 *   0            8     magic "FEDCKPT\0"
 *   8            4     version (u32) = 2 (1: the same bytes, hashed with SHA-256)
 *   12           4     section count S (u32), 1..FED_CKPT_MAX_SECTIONS
 *   16           8     round (u64)
 *   24           32    previous checkpoint's hash (zeros for the first)
 *   56           8     total length T (u64), this header included
 *   64           40*S  section table: name (32 bytes, NUL-padded, 1..31
 *                      chars of [A-Za-z0-9._-]) and length (u64)
 *   64+40S ...         section data in table order, each starting at the
 *                      next multiple of 64 (zero padding), T = end of last
 *
 * Sections a node writes (a missing one means "start that part fresh"): */
#define FED_CKPT_MAGIC "FEDCKPT"
#define FED_CKPT_VERSION 2u     /* written */
#define FED_CKPT_VERSION_MIN 1u /* still read */
#define FED_CKPT_MAX_SECTIONS 64
#define FED_CKPT_NAME_MAX 32
#define FED_CKPT_SEC_SPEC "model.spec"     /* model spec string, no NUL */
#define FED_CKPT_SEC_INPUT "model.input"   /* u32 LE x4: c, h, w, classes */
#define FED_CKPT_SEC_STATS "input.stats"   /* per column: mean f64, std f64,
                                              missing rate f64, count u64 (LE) */
#define FED_CKPT_SEC_PARAMS "params"       /* f32 LE (nparams), model.h layout */
#define FED_CKPT_SEC_OPTIM "optim"         /* i64 LE step, then f32 LE state */
#define FED_CKPT_SEC_RESIDUAL "codec.residual" /* f32 LE (nparams), topk residual */
#define FED_CKPT_SEC_MERGE "merge"         /* strategy state (server moments) */
#define FED_CKPT_SEC_PUSHSUM "pushsum"     /* push-sum running sums, f64 */
#define FED_CKPT_SEC_ASYNC "async"         /* buffered deltas (FedBuff) */
#define FED_CKPT_SEC_PERSONAL "personal.params" /* client, Ditto: u64 LE nparams, then
                                                   f32 LE its personal model */
#define FED_CKPT_SEC_LOCAL "local.params"  /* client: u64 LE nparams, then f32 LE its local
                                              tensors (node/layout.h: the LOCAL path) */

typedef struct fed_store_section {
    const char *name;
    const void *data; /* len bytes; 64-byte aligned in a loaded checkpoint */
    size_t len;
} fed_store_section;

/* A loaded checkpoint: sections point into buf, which it owns. */
typedef struct fed_store_ckpt {
    uint64_t id, round, created_s, epoch;
    uint8_t hash[32], prev_hash[32];
    size_t nsections;
    fed_store_section sections[FED_CKPT_MAX_SECTIONS];
    char names[FED_CKPT_MAX_SECTIONS][FED_CKPT_NAME_MAX];
    uint8_t *buf;
    size_t len;
} fed_store_ckpt;

void fed_store_ckpt_fini(fed_store_ckpt *c); /* fine on a zeroed or finished one */
const fed_store_section *fed_store_ckpt_find(const fed_store_ckpt *c, const char *name);

/* A checkpoints row as listed (status, verify). */
typedef struct fed_store_ckpt_row {
    uint64_t id, round, created_s, size, chunks, epoch;
    uint8_t hash[32], prev_hash[32];
    int pruned; /* blob removed by retention; the row stays in the chain */
} fed_store_ckpt_row;

/* A checkpoint found faulty: reported, never loaded. */
typedef struct fed_store_fault {
    uint64_t id, round;
    fed_err err;    /* FED_ERR_CORRUPT (hash, chain), FED_ERR_FORMAT, ... */
    char what[96];
} fed_store_fault;

typedef struct fed_store_faults {
    fed_store_fault v[16];
    size_t n;       /* stored in v */
    size_t total;   /* found, including those past v */
} fed_store_faults;

/* Retention beyond keep_last and keep_every: the checkpoints of round
 * best_round (the best by the caller's measure) and of every round >=
 * from_round (not yet judged) keep their blobs; 0 for either: none. Set
 * by the caller as its judgement changes; applied at the next write. */
void fed_store_hold_checkpoints(fed_store *st, uint64_t best_round, uint64_t from_round);

/* Write a checkpoint of round from n sections (names unique) and apply the
 * retention policy (prunes only chunk rows). hash (may be NULL) gets its
 * hash. Atomic: on failure nothing of it remains. */
FED_WUR fed_err fed_store_checkpoint_write(fed_store *st, uint64_t round,
                                           const fed_store_section *s, size_t n,
                                           uint8_t hash[32]);
/* The newest checkpoint whose hash verifies and whose chain link holds
 * (its prev_hash is the previous row's hash). Faulty ones met on the way
 * are logged and added to faults (may be NULL). FED_ERR_NOTFOUND if none. */
FED_WUR fed_err fed_store_latest_valid_checkpoint(fed_store *st, fed_store_ckpt *out,
                                                  fed_store_faults *faults);
/* The newest checkpoint of a given round, verified the same way. */
FED_WUR fed_err fed_store_checkpoint_of_round(fed_store *st, uint64_t round,
                                              fed_store_ckpt *out, fed_store_faults *faults);
/* Up to cap rows, newest first. */
FED_WUR fed_err fed_store_list_checkpoints(fed_store *st, fed_store_ckpt_row *out, size_t cap,
                                           size_t *n);
/* Check the whole chain (ids consecutive from 1, each prev_hash the previous
 * hash) and the hash of every blob still stored, one chunk at a time.
 * *checked (may be NULL) gets the number of blobs hashed. FED_ERR_CORRUPT
 * when any fault was found (listed in faults), FED_ERR_DB_DAMAGED when SQLite
 * could not read some of it (the file is damaged). */
FED_WUR fed_err fed_store_verify_checkpoints(fed_store *st, fed_store_faults *faults,
                                             size_t *checked);

/* Parse a checkpoint's bytes (as stored; buf 64-byte aligned for aligned
 * sections): checks magic, version, the section table and the total length.
 * Section views point into buf; out->buf is left NULL (not owned). */
FED_WUR fed_err fed_store_ckpt_parse(const uint8_t *buf, size_t len, fed_store_ckpt *out);

#endif
