/* snapshot.h - what a running node shows to the outside (the status page,
 * /metrics, /healthz of `--http`): an immutable copy of its state that the
 * daemon's loop publishes after each turn that changed it, and that other
 * threads read without ever touching the node.
 *
 * The board holds the newest snapshot behind a mutex; a reader takes a
 * reference (acquire), reads at leisure, and gives it back (release); the
 * loop publishes a new one beside it and the old one is freed by whoever
 * holds its last reference. A snapshot never changes once published. The
 * member list (allow-list names, keys and addresses) sits in a block of its
 * own, shared by the snapshots that follow until the allow-list or the peer
 * table changes, so a turn of the loop copies only a few hundred bytes.
 *
 * Threads: fed_node_snap_update, fed_node_snap_note_round and
 * fed_node_snap_publish run on one thread (the loop's); acquire, release
 * and heartbeat on any. */
#ifndef FED_NODE_SNAPSHOT_H
#define FED_NODE_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "crypto/allow.h"
#include "gossip/peers.h"
#include "gossip/wire.h"
#include "node/node.h"
#include "storage/store.h"

/* Upper bounds (seconds) of the round-duration histogram's buckets; one
 * more bucket, +Inf, follows. */
#define FED_NODE_SNAP_BUCKETS 12
extern const double fed_node_snap_bucket_s[FED_NODE_SNAP_BUCKETS];

typedef struct fed_node_snap_member {
    char name[FED_CRYPTO_NAME_MAX + 1]; /* its name in the allow-list */
    uint8_t key[32];
    char addr[FED_GOSSIP_URL_MAX + 1];  /* peer: where it listens (the peer table,
                                           maybe learned from a PEERS frame);
                                           client: the aggregator's address;
                                           "": not known */
    /* aggregator: the privacy budget the client reported in its last DELTA
       or LEAVE (fed_node_member_dp) */
    int dp_reported;                    /* it reported one (else both 0) */
    int dp_parked;                      /* it declined for its budget: left out */
    double dp_epsilon;                  /* epsilon it has spent */
    double dp_budget;                   /* its budget (0: none) */
} fed_node_snap_member;

typedef struct fed_node_snap {
    uint64_t seq;                /* 1 for the first published, then +1 */
    fed_node_role role;
    uint8_t key[32];             /* the node's public key */
    char name[FED_CRYPTO_NAME_MAX + 1]; /* its own name in the allow-list; "" none */
    uint64_t started_wall_ms;    /* when the daemon started (wall clock) */
    uint64_t built_mono_ms;      /* CLOCK_MONOTONIC ms when built */
    uint64_t deadline_ms;        /* the rounds' deadline (cfg.deadline_ms) */
    fed_node_progress progress;  /* round_due_ms on the daemon's clock
                                    (CLOCK_MONOTONIC ms) */
    /* rounds reported this run (the node's on_round) */
    uint64_t rounds_run;
    uint64_t dur_bucket[FED_NODE_SNAP_BUCKETS + 1]; /* rounds per bucket (not cumulative) */
    double dur_sum_s;
    int have_last;
    fed_node_round_info last;    /* the newest round reported */
    uint64_t metrics_round;      /* the newest round evaluated with metrics */
    fed_metrics_head metrics;    /* its figures (kind NONE: none yet) */
    fed_node_site_figures site;  /* the newest site evaluation (head.kind NONE:
                                    none yet) */
    uint64_t deltas_merged, deltas_missing, deltas_refused; /* aggregator, this run */
    fed_wire_counters wire;      /* this run's */
    fed_store_stats store;
    int secagg_on;               /* the rounds run secure aggregation (cfg.secagg.on) */
    int dp_on;                   /* differential privacy: this client's DP-SGD, or an
                                    aggregator requiring it or running DP-FedAvg */
    /* the members but this node (allow-list order), shared between snapshots */
    size_t nmembers;
    const fed_node_snap_member *member;
} fed_node_snap;

typedef struct fed_node_snap_board fed_node_snap_board;

FED_WUR fed_err fed_node_snap_board_new(fed_node_snap_board **out);
/* Frees the board and its snapshot; every reference must be back. NULL fine. */
void fed_node_snap_board_free(fed_node_snap_board *b);

/* ---- readers, any thread ---- */
/* The newest snapshot, referenced (give it back with release); NULL when
 * none was published yet. */
const fed_node_snap *fed_node_snap_acquire(fed_node_snap_board *b);
void fed_node_snap_release(fed_node_snap_board *b, const fed_node_snap *s);
/* CLOCK_MONOTONIC ms of the loop's last turn (fed_node_snap_update or
 * _beat); 0: none yet. A loop that stopped turning stops moving it. */
uint64_t fed_node_snap_heartbeat_ms(fed_node_snap_board *b);
/* CLOCK_MONOTONIC in ms, the clock of every _ms field above. */
uint64_t fed_node_snap_now_ms(void);

/* ---- the loop ---- */
/* What one update copies from; borrowed for the call. */
typedef struct fed_node_snap_src {
    const fed_node *node;
    const fed_node_config *cfg;    /* deadline_ms, store, allow, peers (peer role) */
    const char *aggregator_url;    /* client: the address it dials; NULL */
    uint64_t started_wall_ms;
} fed_node_snap_src;

/* A round the node reported (its on_round): the histogram and the totals. */
void fed_node_snap_note_round(fed_node_snap_board *b, const fed_node_round_info *r);
/* Moves the heartbeat; then builds the snapshot of src and publishes it
 * when it differs from the last one published (FED_ERR_NOMEM: the last one
 * stays). */
FED_WUR fed_err fed_node_snap_update(fed_node_snap_board *b, const fed_node_snap_src *src);
/* Publishes a copy of s (seq assigned here) with the n members m (copied):
 * tests, and whoever builds snapshots of their own. */
FED_WUR fed_err fed_node_snap_publish(fed_node_snap_board *b, const fed_node_snap *s,
                                      const fed_node_snap_member *m, size_t n);
/* Moves the heartbeat only. */
void fed_node_snap_beat(fed_node_snap_board *b);

#endif
