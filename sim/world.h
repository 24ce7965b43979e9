/* world.h - the simulated world: many nodes in one process, in virtual time.
 * Each node gets a fed_env (node/env.h) whose clock, network, timers, random
 * stream and jobs are the world's. One priority queue of events ordered by
 * virtual time with a stable tie-break, a network model (latency, jitter,
 * bandwidth, loss, partitions), crash and restart. Same seed => same run. */
#ifndef FED_SIM_WORLD_H
#define FED_SIM_WORLD_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/pool.h"
#include "node/env.h"

typedef struct fed_sim_world fed_sim_world;

/* Equal times are broken by who queued the event and how many it queued
 * before (job completions first, by node and submit order), never by the
 * order the world happened to queue them in. */

/* How the world drives a node: the future fed_node plugs in here unchanged.
 * ctx is the node's; callbacks run on the loop thread in event order. Any of
 * them may be NULL (the event is then consumed silently). A nonzero return of
 * an int callback is counted in node_errors; the run goes on. */
typedef struct fed_sim_node_ops {
    int (*on_start)(void *ctx);               /* once, at the time the node was added */
    /* req != NULL: a request to answer once with env->reply;
       req == NULL: the reply to one of this node's requests */
    int (*on_frame)(void *ctx, fed_req *req, const uint8_t *frame, size_t len);
    int (*on_timer)(void *ctx, uint32_t timer_id);
    int (*on_job_done)(void *ctx, fed_job *job);
    /* after the world dropped the node's timers, events, in-flight frames and
       pending requests, and waited for its submitted jobs (the node owns them
       again: none will come back through on_job_done) */
    void (*on_crash)(void *ctx);
    int (*on_restart)(void *ctx);             /* the node is reachable again */
} fed_sim_node_ops;

/* One direction of a link. A frame of B bytes sent at t arrives at
 * t + max(floor_ms, 0, latency_ms + jitter_ms * N(0,1)) + B / bytes_per_ms,
 * or is lost with probability loss. The draws come from the sender's own
 * network stream (seed, FED_SIM_NET_STREAM + its index), so they do not
 * depend on what other nodes did meanwhile. */
typedef struct fed_sim_link {
    double latency_ms;
    double jitter_ms;     /* standard deviation; 0: fixed latency */
    double floor_ms;      /* no frame arrives sooner (the lookahead across ranks) */
    double loss;          /* in [0, 1] */
    double bytes_per_ms;  /* 0: unlimited bandwidth */
} fed_sim_link;

#define FED_SIM_NET_STREAM (1ull << 40)

typedef struct fed_sim_config {
    uint64_t seed;        /* one stream per node, and one per node for its frames */
    fed_sim_link link;    /* every link, unless fed_sim_world_set_link overrides */
    double flops_per_ms;  /* node speed for charge(); <= 0 means 1e6 (1 GFLOP/s) */
    uint64_t epoch_base_s;/* wall_s() = epoch_base_s + now_ms / 1000 */
    fed_pool *pool;       /* runs job->fn; NULL runs it inline at submit. Not owned */
    /* the ranks this world is split across (core/comm.h; borrowed); NULL:
       one process. Node i belongs to rank i % size; every rank adds every
       node, in the same order, its own with add_node and the others' with
       add_remote, and schedules every crash and restart (another rank's
       node only changes state, so frames can be checked against it) */
    const struct fed_comm *comm;
} fed_sim_config;

#define FED_SIM_PERSONAL_MAX 256 /* clients --personal-eval scores */
typedef struct fed_sim_counters {
    uint64_t frames_sent;       /* send and reply calls accepted */
    uint64_t frames_delivered;  /* handed to on_frame */
    uint64_t frames_dropped;    /* loss + partition + down */
    uint64_t dropped_loss;
    uint64_t dropped_partition;
    uint64_t dropped_down;      /* receiver or sender crashed, or requester gone */
    uint64_t bytes_sent;
    uint64_t bytes_delivered;
    uint64_t requests_refused;  /* reply(req, NULL, 0): closed without an answer */
    uint64_t timers_fired;
    uint64_t jobs_done;
    uint64_t events;            /* events dispatched to nodes */
    uint64_t node_errors;       /* nonzero returns of node callbacks */
    uint64_t crashes, restarts; /* of nodes that were up, down */
    /* fed_sim_run's, peers (the world leaves them 0): each live peer's most
       bytes noted (fed_node_peer_mem's total), and its model state then,
       summed over the peers */
    uint64_t peer_bytes, peer_state_bytes;
    uint64_t peers_counted;     /* the peers in those sums */
    /* fed_sim_run's, --personal-eval: each client's own model (the final
       global with its local tensors, fine-tuned --finetune-epochs on its
       shard) on its local test split (the test set partitioned as the
       training set), in millionths; personal_n clients scored */
    uint64_t personal_n;
    uint64_t personal_ppm[FED_SIM_PERSONAL_MAX];
} fed_sim_counters;

/* What the trace hook sees for each dispatched event. */
typedef enum fed_sim_event_kind {
    FED_SIM_EV_START = 1,
    FED_SIM_EV_REQUEST = 2,  /* a = sender node, b = frame length */
    FED_SIM_EV_REPLY = 3,    /* a = replier node, b = frame length */
    FED_SIM_EV_TIMER = 4,    /* a = timer id */
    FED_SIM_EV_JOB = 5,      /* a = per-node submit sequence */
    FED_SIM_EV_CRASH = 6,
    FED_SIM_EV_RESTART = 7,
} fed_sim_event_kind;

typedef void (*fed_sim_trace_fn)(void *ctx, uint64_t t_us, fed_sim_event_kind kind,
                                 uint32_t node, uint64_t a, uint64_t b);

/* cfg is copied. */
FED_WUR fed_err fed_sim_world_new(const fed_sim_config *cfg, fed_sim_world **out);
/* Waits for jobs still on the pool, frees pending requests, frames, events.
 * Nodes' ctx are the caller's. NULL is fine. */
void fed_sim_world_free(fed_sim_world *w);

/* Adds a node with this identity; its on_start runs as an event at the
 * current virtual time. FED_ERR_EXISTS when id is taken. */
FED_WUR fed_err fed_sim_world_add_node(fed_sim_world *w, const fed_peer_id *id,
                                       const fed_sim_node_ops *ops, void *ctx,
                                       uint32_t *index_out);
/* A node another rank runs (see fed_sim_config.comm): only its identity,
 * and whether it is up, kept here. */
FED_WUR fed_err fed_sim_world_add_remote(fed_sim_world *w, const fed_peer_id *id,
                                         uint32_t *index_out);
/* 1 when node (an index, added or still to add) is this rank's. */
int fed_sim_world_owns(const fed_sim_world *w, uint32_t node);
size_t fed_sim_world_node_count(const fed_sim_world *w);
/* The node's env; valid as long as the world. */
const fed_env *fed_sim_world_env(const fed_sim_world *w, uint32_t node);
const fed_peer_id *fed_sim_world_node_id(const fed_sim_world *w, uint32_t node);
int fed_sim_world_node_up(const fed_sim_world *w, uint32_t node);

/* Overrides the from -> to direction of one link (a short list: meant for a
 * few special links, not for every pair). */
FED_WUR fed_err fed_sim_world_set_link(fed_sim_world *w, uint32_t from, uint32_t to,
                                       const fed_sim_link *link);
/* Straggler: charge() costs factor times more on this node (factor > 0). */
FED_WUR fed_err fed_sim_world_set_slowdown(fed_sim_world *w, uint32_t node, double factor);

/* While start_ms <= now < end_ms, frames sent between nodes of different
 * groups are dropped (checked when a frame is sent). group_of has n entries,
 * one label per node index; nodes past n belong to no group and are never
 * cut off. Copied. */
FED_WUR fed_err fed_sim_world_add_partition(fed_sim_world *w, const uint32_t *group_of,
                                            size_t n, uint64_t start_ms, uint64_t end_ms);

/* While start_ms <= now < end_ms every link loses this share of frames (or
 * its own, when higher). FED_ERR_INVAL for a loss outside [0, 1]. */
FED_WUR fed_err fed_sim_world_add_loss(fed_sim_world *w, double loss, uint64_t start_ms,
                                       uint64_t end_ms);

/* Crash now: the node's timers, queued events, in-flight frames (to and from
 * it) and unanswered requests are dropped, its running jobs waited for, then
 * on_crash is called. Crashing a down node does nothing. */
void fed_sim_world_crash(fed_sim_world *w, uint32_t node);
/* Restart a crashed node now: on_restart is called (restarting an up node
 * does nothing). */
void fed_sim_world_restart(fed_sim_world *w, uint32_t node);
/* The same, as events at virtual time t_ms. */
FED_WUR fed_err fed_sim_world_crash_at(fed_sim_world *w, uint32_t node, uint64_t t_ms);
FED_WUR fed_err fed_sim_world_restart_at(fed_sim_world *w, uint32_t node, uint64_t t_ms);

/* Process events with time <= t_ms in order, then set the clock to t_ms.
 * Across ranks (a collective call: every rank with the same t_ms) in
 * windows of the lookahead, exchanging the frames that cross ranks at each
 * window's end; FED_ERR_INVAL when the lookahead is 0. step and run_idle
 * are for one process only. */
FED_WUR fed_err fed_sim_world_run_until(fed_sim_world *w, uint64_t t_ms);
/* Process events until none is left (callers make sure it ends). */
FED_WUR fed_err fed_sim_world_run_idle(fed_sim_world *w);
/* Process one event; *did is 0 when the queue was empty. */
FED_WUR fed_err fed_sim_world_step(fed_sim_world *w, int *did);

uint64_t fed_sim_world_now_us(const fed_sim_world *w);
size_t fed_sim_world_pending(const fed_sim_world *w);
void fed_sim_world_counters(const fed_sim_world *w, fed_sim_counters *out);
/* FNV-1a over every dispatched event (time, kind, node, a, b, frame bytes):
 * two runs of the same scenario and seed give the same value. */
uint64_t fed_sim_world_trace_hash(const fed_sim_world *w);
void fed_sim_world_set_trace(fed_sim_world *w, fed_sim_trace_fn fn, void *ctx);
/* A test's look at each request a node sends (its plain header tells the
 * type and round): nonzero drops it, as if the sender had died before it
 * left (the filter may schedule that death with fed_sim_world_crash_at at
 * the current time). Called inside the sender's env.send. */
typedef int (*fed_sim_send_filter)(void *ctx, uint32_t node, const uint8_t *frame, size_t len);
void fed_sim_world_set_send_filter(fed_sim_world *w, fed_sim_send_filter fn, void *ctx);

/* Bytes sent (counters.bytes_sent) by the events at times <= t_us; exact
 * for t_us at or after the last forget, else the count at that forget. */
uint64_t fed_sim_world_bytes_at(const fed_sim_world *w, uint64_t t_us);
/* Drops the marks bytes_at needs only for times before t_us. */
void fed_sim_world_bytes_forget(fed_sim_world *w, uint64_t t_us);
/* The least delay any frame can take (every link's floor, or its latency
 * when it has no jitter), in microseconds: 0 when a frame can arrive at the
 * time it was sent. */
uint64_t fed_sim_world_lookahead_us(const fed_sim_world *w);

#endif
