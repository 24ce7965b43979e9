/* store_impl.h - internals shared by storage/store.c and storage/checkpoint.c:
 * the fed_store struct, the cached prepared statements, SQLite result codes
 * mapped to fed_err, and the "own transaction or savepoint" helpers.
 * Not a public header: nothing outside storage/ includes it. */
#ifndef FED_STORAGE_STORE_IMPL_H
#define FED_STORAGE_STORE_IMPL_H

#include <sqlite3.h>

#include "storage/store.h"

/* Every statement the store runs more than once, prepared on first use and
 * kept (SQLITE_PREPARE_PERSISTENT) until close. */
typedef enum store_stmt_id {
    SQ_META_GET,
    SQ_META_PUT,
    SQ_ROUND_PUT,
    SQ_ROUND_GET,
    SQ_ROUND_LAST,
    SQ_ROUND_GET_V2,  /* a v2 file opened read-only: no lr column */
    SQ_ROUND_LAST_V2,
    SQ_ROUND_GET_V3,  /* a v3 file opened read-only: no epsilon column */
    SQ_ROUND_LAST_V3,
    SQ_DP_PUT,
    SQ_DP_EACH,
    SQ_SA_PUT,
    SQ_SA_EACH,
    SQ_METRIC_PUT,
    SQ_METRIC_EACH,
    SQ_METRIC_BEST,
    SQ_METRIC_LAST,
    SQ_CONTRIB_PUT,
    SQ_CONTRIB_EACH,
    SQ_CONTRIB_EACH_V5, /* a v5 file opened read-only: no DP report columns */
    SQ_PEER_PUT,
    SQ_PEER_LIST,
    SQ_COUNTER_PUT,
    SQ_COUNTER_LIST,
    SQ_COUNTER_GET,
    SQ_CKPT_LAST,
    SQ_CKPT_INSERT,
    SQ_CHUNK_INSERT,
    SQ_PRUNE_CHUNKS,
    SQ_PRUNE_ROWS,
    SQ_CKPT_CANDIDATES,
    SQ_CKPT_ROUND_CANDIDATES,
    SQ_CKPT_BY_ID,
    SQ_CKPT_LIST,
    SQ_CKPT_ALL,
    SQ_CHUNK_LIST,
    SQ_COUNT_
} store_stmt_id;

struct fed_store {
    sqlite3 *db;
    sqlite3_stmt *stmt[SQ_COUNT_];
    fed_store_opts opts;
    uint64_t epoch;
    int schema;
    int page_size;
    int in_tx;        /* inside fed_store_begin .. commit */
    uint64_t sp_seq;  /* savepoint names */
    int disk_full;    /* fedi_store_set_disk_full: the commit hook refuses */
    int durable;      /* fed_store_begin_durable raised synchronous to FULL */
    fed_store_stats stats; /* fed_store_get_stats */
    uint64_t hold_best, hold_from; /* fed_store_hold_checkpoints; 0: none */
    int lock_fd;      /* the writer's lock on PATH.lock, held until close; -1: none */
};

/* SQLite result code -> fed_err, logging what (and SQLite's message) when not OK. */
fed_err fedi_store_err(fed_store *st, int rc, const char *what);
/* The cached statement id, reset and unbound; NULL on failure (*err set). */
sqlite3_stmt *fedi_store_stmt(fed_store *st, store_stmt_id id, fed_err *err);

/* A write of several statements: inside fed_store_begin it is a savepoint
 * (undone alone on failure), else a transaction of its own. */
typedef struct store_tx {
    int own;       /* began a transaction */
    int savepoint; /* opened a savepoint */
    char name[32];
} store_tx;
FED_WUR fed_err fedi_store_tx_enter(fed_store *st, store_tx *tx);
/* Commits / releases when err is FED_OK, else rolls back; returns the first error. */
FED_WUR fed_err fedi_store_tx_leave(fed_store *st, store_tx *tx, fed_err err);

uint64_t fedi_store_wall_s(const fed_store *st);
/* CLOCK_MONOTONIC in seconds: what fed_store_stats times (never a result). */
double fedi_store_mono_s(void);

#endif
