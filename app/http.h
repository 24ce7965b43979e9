/* http.h - `fednode run --http ADDR`: a read-only HTTP server beside the
 * node, on libmicrohttpd, on a thread of its own.
 *
 *   GET /             one self-contained HTML page (no script, refreshes
 *                     itself): role, key, members and their last
 *                     contribution, the rounds, the accuracy chart (SVG)
 *   GET /metrics      Prometheus text exposition format 0.0.4
 *   GET /status.json  what `fednode status --json` prints, live
 *   GET /healthz      200 while the node's loop turns and its round is not
 *                     overdue, else 503 (the body says why)
 *
 * The handlers never touch the node: they read the snapshot the node's loop
 * publishes (node/snapshot.h) and the node's database through a read-only
 * connection of their own (the rounds, the contributions, status.json).
 *
 * Limits, so that no HTTP client can stall the node or grow it without
 * bound: at most max_conns connections; past them, a new connection closes
 * the one that has waited longest for a request (one sending nothing, a
 * trickle, a keep-alive between requests; never one whose answer goes out),
 * so that a flood of idle connections does not keep a scrape or /healthz
 * out, and is itself closed when every one is answering;
 * conn_memory bytes of buffers each (a request whose headers do not fit is
 * answered 431 and closed); a connection silent for idle_s is closed
 * (libmicrohttpd's timeout), and so is one that has not delivered a whole
 * request's headers request_ms after it connected or got its last answer,
 * or has not taken its answer within request_ms (slow senders and readers
 * alike: a byte a second does not keep it). Every answer is made whole
 * before it is sent, at most FED_HTTP_ANSWER_MAX bytes. Memory held for
 * HTTP clients is at most max_conns * (conn_memory + the largest answer),
 * and max_conns * conn_memory more for connections closed and not yet
 * freed (libmicrohttpd frees them on its next turn).
 *
 * A request that could be read two ways is answered 400 and its connection
 * closed: a NUL in its request line (raw, or %00 anywhere in the URI), two
 * different Content-Lengths, a Content-Length beside a Transfer-Encoding.
 * /status.json names the database's path to a client on loopback only
 * ("db": null to any other). */
#ifndef FED_APP_HTTP_H
#define FED_APP_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#include "app/chart.h"
#include "core/err.h"
#include "node/snapshot.h"
#include "storage/store.h"

#define FED_HTTP_DEFAULT_ADDR "http://127.0.0.1:9464"
#define FED_HTTP_MAX_CONNS 64
#define FED_HTTP_BACKLOG 256
#define FED_HTTP_CONN_MEMORY (32u << 10)
#define FED_HTTP_IDLE_S 10
#define FED_HTTP_REQUEST_MS 10000
#define FED_HTTP_ANSWER_MAX ((size_t)4 << 20)
/* /healthz: the loop must have turned within this, and an open round be
 * closed within this past its deadline. */
#define FED_HTTP_STALE_MS 15000
#define FED_HTTP_OVERDUE_MS 15000
/* The page's rounds table and chart, and the contributions scanned for
 * each member's last one. */
#define FED_HTTP_TABLE_ROUNDS 20
#define FED_HTTP_CHART_ROUNDS 5000
#define FED_HTTP_CONTRIB_WINDOW 256

typedef struct fed_http_cfg {
    const char *addr;            /* FED_HTTP_DEFAULT_ADDR's forms; see fed_http_parse_addr */
    fed_node_snap_board *board;  /* what the node's loop publishes */
    const char *db_path;         /* the node's database, read-only here; NULL: none */
    uint32_t max_conns;          /* 0: FED_HTTP_MAX_CONNS */
    uint32_t conn_memory;        /* 0: FED_HTTP_CONN_MEMORY */
    uint32_t idle_s;             /* 0: FED_HTTP_IDLE_S */
    uint32_t request_ms;         /* 0: FED_HTTP_REQUEST_MS */
    uint32_t refresh_s;          /* the page reloads itself; 0: 5 */
} fed_http_cfg;

typedef struct fed_http fed_http;

/* "http://HOST:PORT", "HOST:PORT" or "PORT" (on 127.0.0.1), a trailing "/"
 * allowed; HOST an IPv4 address, "localhost" or "[IPv6]". Port 0: any free
 * one. FED_ERR_INVAL for anything else. *loopback: the address is
 * 127.0.0.0/8 or ::1. */
FED_WUR fed_err fed_http_parse_addr(const char *addr, struct sockaddr_storage *sa,
                                    socklen_t *salen, int *loopback);

/* Binds and starts the server thread (logs where; warns when the address
 * reaches beyond loopback). FED_ERR_INVAL (bad address), FED_ERR_IO (cannot
 * bind), FED_ERR_NOMEM. */
FED_WUR fed_err fed_http_start(const fed_http_cfg *cfg, fed_http **out);
/* The bound port. */
uint16_t fed_http_port(const fed_http *h);
/* Stops the thread, closes every connection, logs what it served and the
 * thread's CPU time. NULL fine. */
void fed_http_stop(fed_http *h);

/* ---- the pages, as the handlers write them (unit-tested) ---- */

/* What the read-only database adds to a snapshot. */
typedef struct fed_http_member_db {
    uint64_t last_round;   /* the newest round it has a contribution in; 0: none seen */
    int accepted;          /* ... merged */
    char reason[64];       /* ... else why not ("missing", a merge verdict) */
    uint64_t last_merged;  /* the newest round its contribution was merged; 0: none */
} fed_http_member_db;

typedef struct fed_http_db {
    int ok;                        /* read; 0: no database (the rest is empty) */
    fed_store_round *rounds;       /* newest first, up to FED_HTTP_CHART_ROUNDS */
    size_t nrounds;
    fed_http_member_db *member;    /* (the snapshot's nmembers) */
    uint64_t window_from;          /* the first round the contributions were read from */
    uint64_t db_bytes;             /* the file and its WAL */
} fed_http_db;

/* What the process adds. */
typedef struct fed_http_proc {
    double cpu_s;          /* the process (getrusage) */
    uint64_t rss_bytes;    /* resident now */
    double http_cpu_s;     /* the HTTP thread */
    uint64_t requests;     /* answered so far */
    uint64_t cut;          /* connections closed for a deadline */
} fed_http_proc;

/* Reads what the pages need from st for s (members in s's order): the
 * newest `rounds` rounds (at most FED_HTTP_CHART_ROUNDS), each member's last
 * contribution within FED_HTTP_CONTRIB_WINDOW rounds, the file's size. */
FED_WUR fed_err fed_http_db_load(fed_store *st, const char *db_path, const fed_node_snap *s,
                                 size_t rounds, fed_http_db *out);
void fed_http_db_fini(fed_http_db *d);
void fed_http_proc_read(fed_http_proc *p);

/* /healthz: 1 healthy, 0 not, with why (a line for the body). now_ms and
 * heartbeat_ms on CLOCK_MONOTONIC (fed_node_snap_now_ms); s may be NULL. */
int fed_http_health(const fed_node_snap *s, uint64_t heartbeat_ms, uint64_t now_ms, char *why,
                    size_t cap);
/* GET /metrics (db may be NULL or not ok: its families are left out). */
void fed_http_metrics(FILE *f, const fed_node_snap *s, const fed_http_db *db,
                      const fed_http_proc *p);
/* GET / (refresh_s: the meta refresh; health: fed_http_health's). */
void fed_http_page(FILE *f, const fed_node_snap *s, const fed_http_db *db,
                   const fed_http_proc *p, int healthy, const char *health_why,
                   unsigned refresh_s);

/* Escapes: HTML text and attribute values (< > & " '); a Prometheus label
 * value (\ " and newline). */
void fed_http_html(FILE *f, const char *s);
void fed_http_label(FILE *f, const char *s);

#endif
