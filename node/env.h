/* env.h - the world as the node sees it: one table of functions.
 * The node core touches no socket, clock or random source of its own; it acts
 * through fed_env and reacts to events (start, frame, timer, job done). The
 * daemon fills the table from NNG, the real clocks and the pool; the simulator
 * (sim/world.h) from a priority queue in virtual time. Same node code, both. */
#ifndef FED_NODE_ENV_H
#define FED_NODE_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

/* A node's identity on the network: its 32-byte Ed25519 public key. Plain
 * value type, copied freely; compare with memcmp (it is not a secret). */
typedef struct fed_peer_id {
    uint8_t key[32];
} fed_peer_id;

/* An incoming request the node must answer exactly once through env.reply.
 * Opaque; owned by the environment. It is handed to the node by
 * fed_node_on_frame (req != NULL) and stays valid until the node passes it to
 * reply (which consumes it, whatever it returns) or, in the simulator, until
 * the node crashes (the environment frees it; the node must forget it). */
typedef struct fed_req fed_req;

/* A unit of work run off the loop (training, opening a large frame).
 * Caller-owned storage: the node owns the job before submit and again after
 * fed_node_on_job_done hands it back; in between the environment owns it and
 * fn(job) runs once, on some pool thread (or inline), and must touch only the
 * job's own data (never the env, never the node's loop state). A node that
 * crashes in the simulator gets its submitted jobs back at on_crash (the world
 * has waited for fn to finish; no on_job_done follows). Embed it in a larger
 * struct and find that struct from `user` (or with offsetof). */
typedef struct fed_job fed_job;
struct fed_job {
    void (*fn)(fed_job *job);
    void *user;
    int idle; /* 1: may wait for CPU time nothing else wants (the daemon runs
                 it on the pool's idle lane); the simulator ignores it */
    int loop_ok; /* 1: a few ms of work the node waits on alone (a client's
                    MODEL): the daemon may run it on the loop thread when no
                    other job runs, its completion still coming back through
                    on_job_done; the simulator ignores it */
};

/* Every int below is a fed_err (FED_OK == 0); the node may ignore failures of
 * cancel_timer (FED_ERR_NOTFOUND: not armed or already fired). A failed
 * set_timer stops the node (fed_node_failed): an environment keeps room for
 * FED_NODE_MAX_TIMERS armed at once. */
typedef struct fed_env {
    uint64_t (*now_ms)(void *self);                 /* monotonic, for timers */
    uint64_t (*wall_s)(void *self);                 /* wall clock, for epochs */
    uint64_t (*wall_ms)(void *self);                /* the same in ms, for the rows' times */
    /* a request to a peer, on that peer's own link; its reply comes back
       through fed_node_on_frame with req == NULL, or a timeout through on_timer */
    int      (*send)(void *self, const fed_peer_id *to, const uint8_t *frame, size_t len);
    /* the one answer to a request received with a non-NULL req; an empty
       frame (NULL, 0) refuses it: nothing goes back (the daemon closes the
       context) and the requester times out, as if the request was lost */
    int      (*reply)(void *self, fed_req *req, const uint8_t *frame, size_t len);
    int      (*set_timer)(void *self, uint64_t at_ms, uint32_t timer_id);
    int      (*cancel_timer)(void *self, uint32_t timer_id);
    void     (*random)(void *self, void *buf, size_t len);
    /* run job->fn(job) off the loop; completion comes back as on_job_done.
       The node owns the job before submit and again after completion. */
    int      (*submit)(void *self, fed_job *job);
    void     (*charge)(void *self, double flops);   /* simulator: advance this node's clock */
    void     *self;
} fed_env;

/* Details of the contract both environments keep:
 * - All functions are called from the loop thread only (never from job->fn).
 * - send/reply copy the frame; the caller keeps its buffer. A frame handed to
 *   on_frame is valid only during that call.
 * - set_timer(at_ms, id) arms timer id to fire at now_ms() >= at_ms (a time in
 *   the past fires at once, as the next event); arming an armed id re-arms it.
 *   A cancelled timer never fires; a fired timer is disarmed.
 * - A lost request or reply is not reported: the node times out on its timer.
 * - charge(flops) is the cost of work the node is about to do; the simulator
 *   adds flops / speed to the node's busy clock, and a job submitted after it
 *   completes when that clock says (the daemon ignores charge). */

#endif
