/* daemon.h - the node as a process: fed_env filled from the NNG transport
 * (gossip/transport.h), the monotonic and real-time clocks, libsodium's
 * randombytes_buf and the core/ pool, and one loop that poll()s the
 * transport's wake fd, the finished-jobs fd, the signal self-pipe and the
 * earliest timer. Signals: SIGTERM and SIGINT end the loop between events
 * (a database write in flight always completes: writes run on the loop),
 * jobs still running are waited for, and run returns FED_OK; SIGHUP reloads
 * the allow-list from its file (a bad file keeps the old list). */
#ifndef FED_NODE_DAEMON_H
#define FED_NODE_DAEMON_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/pool.h"
#include "crypto/allow.h"
#include "gossip/peers.h"
#include "node/node.h"
#include "node/snapshot.h"

typedef struct fed_node_daemon_cfg {
    const char *listen_url;  /* aggregator: "tcp://0.0.0.0:7400"; NULL: dial only */
    const char *peer_url;    /* client: the aggregator's address */
    const fed_gossip_peers *peers; /* peer: where the other members are */
    uint32_t recv_contexts;  /* requests held at once (aggregator: >= clients) */
    const char *allow_path;  /* reloaded on SIGHUP into cfg->allow; NULL: never */
    fed_crypto_allow *allow; /* the node's (nc->allow), reloaded in place */
    const char *port_file;   /* where to write the bound TCP port; NULL: nowhere */
    uint64_t linger_ms;      /* aggregator, peer: keep answering this long after
                                the last round, so the others hear it is over;
                                a client with a board: stay up this long after
                                it is told training is over, so its last state
                                is seen (scraped) */
    uint32_t max_conns;      /* listener: connections at once (0: transport's default) */
    uint32_t conn_stall_ms;  /* listener: close a silent connection owed nothing
                                after this (0: transport's default) */
    fed_node_snap_board *board; /* where the loop publishes the node's snapshot
                                   after each turn that changed it (--http's
                                   pages read it); NULL: nowhere */
} fed_node_daemon_cfg;

/* The process's malloc bounds run sets (glibc): blocks up to *mmap_at bytes
 * (the node's largest frame and 64 KiB) come from the heap, and up to
 * *trim_at bytes may stay free there for the next round (what a round of
 * nc's role holds, at most 32 MiB, at least two blocks). */
void fed_node_daemon_heap_bounds(const fed_node_config *nc, size_t *mmap_at, size_t *trim_at);

/* Installs the signal handlers (SIGTERM, SIGINT, SIGHUP; SIGPIPE ignored)
 * and their self-pipe: once per process, before run. */
FED_WUR fed_err fed_node_daemon_signals(void);

/* Runs a node of nc until it has finished (aggregator: its last round, then
 * linger_ms; client: told training is over) or a signal ends it. nc's env
 * parts come from here; its store, arena, allow, data and pool are the
 * caller's (nc->pool runs the jobs too). */
FED_WUR fed_err fed_node_daemon_run(const fed_node_daemon_cfg *dc, const fed_node_config *nc);

#endif
