/* transport.h - the NNG transport: requests and replies between nodes.
 *
 * One fed_gossip_tx per daemon. It may listen with one rep0 socket (incoming
 * requests, one NNG context per request held at once: recv_contexts of them)
 * and dials one req0 socket per peer it talks to (non-blocking dial, reconnect
 * every reconnect_ms up to 1 s, so a peer that starts later is found at once;
 * req0's own resend is off: NNG_OPT_REQ_RESENDTIME is infinite, set before any
 * context opens). Each request sent gets a fresh context of its peer's socket;
 * its reply, or its failure, comes back later as an event with the caller's
 * token. The transport moves bytes: it never looks inside a frame.
 *
 * Events. NNG completes operations on its own threads; their callbacks only
 * queue events (under a mutex) and make fed_gossip_tx_wake_fd() readable. The
 * loop poll()s that fd beside its other fds and then drains the queue:
 *
 *     while (fed_gossip_tx_next(tx, &ev) == FED_OK) {
 *         ... REQUEST: answer ev.req now or later, exactly once ...
 *         fed_gossip_tx_event_done(tx, &ev);
 *     }
 *
 * fed_gossip_tx_next returns FED_GOSSIP_TX_EMPTY (FED_ERR_BUSY, "try again")
 * when nothing is pending; the fd stays readable exactly while events are
 * queued, so a level-triggered poll() never spins and never misses one.
 *
 * Threading: every function here is for the loop thread only (one thread at a
 * time; none may be called from NNG callbacks or pool jobs). The transport's
 * own callbacks run on NNG's threads and touch only the event queue, the
 * counters and the object that completed.
 *
 * Ownership:
 * - send and reply copy the frame into an NNG message; the caller keeps its
 *   buffer.
 * - An event's frame bytes (REQUEST, REPLY) are the received NNG message
 *   itself, not a copy; they stay valid until fed_gossip_tx_event_done(tx, ev),
 *   which must be called once for every event next() returned, before close.
 * - A REQUEST's handle (ev.req) is independent of its event: it stays valid
 *   after event_done and is consumed by exactly one fed_gossip_tx_reply or
 *   fed_gossip_tx_refuse, whatever they return. Handles not answered at close
 *   are freed by close (nothing goes back to their requesters).
 *
 * Limits:
 * - max_frame is the protocol-wide largest frame (gossip/wire.h's max_frame).
 *   send and reply refuse larger frames with FED_ERR_FRAME_TOO_LARGE.
 * - Every socket's NNG_OPT_RECVMAXSZ is max_frame + FED_GOSSIP_TX_RECV_MARGIN:
 *   NNG counts the SP header (req0's 4-byte request id, plus a backtrace of
 *   up to 8 hops through devices) against that limit. NNG drops a larger
 *   message by closing the connection, before any callback sees it; a message
 *   longer than max_frame that still fits the margin is dropped here (a
 *   REQUEST is refused, a REPLY becomes SEND_FAILED FED_ERR_FRAME_TOO_LARGE)
 *   and counted in rx_oversize.
 * - What a stranger can make the listener hold (it cannot be authenticated
 *   before a whole frame is in: NNG allocates a message's declared length as
 *   soon as its 8-byte length arrives) is bounded three ways:
 *   recv_max, the largest request the listener takes (the node sizes it to
 *   its own traffic: a model's largest vector, not the protocol's limit);
 *   max_conns, connections at once (a surplus one is closed as it arrives,
 *   counted in conn_refused); stall_ms, after which a connection that
 *   delivered no whole request and is owed no reply is closed (counted in
 *   conn_stalled). NNG 1.5.2 does not say whether a connection is part way
 *   through a message, so an idle one is closed too: a client's dialer
 *   reconnects at once, and a request it sends meanwhile waits for that.
 *   Worst case held: max_conns * (recv_max + margin), for at most stall_ms.
 *   Drops NNG makes itself are read from its listener statistics:
 *   conn_handshake (bad handshakes: protocol errors) and conn_dropped
 *   (a message over the limit; NNG 1.5.2 counts it with its other
 *   connection errors, a far end that hung up among them).
 * - recv_contexts bounds the incoming requests held at once (delivered and not
 *   yet answered, plus being answered). Further requests wait inside NNG and
 *   TCP. An aggregator that holds its clients' NEXT until a round starts needs
 *   at least one per client.
 * - max_inflight bounds requests sent and not yet completed (send says
 *   FED_ERR_FULL beyond it); expire_ms is a backstop, not a protocol timer: a
 *   request still unanswered after it (a refused request never is) completes
 *   as SEND_FAILED FED_ERR_TIMEOUT, so contexts the node gave up on do not
 *   pile up. The node times out on its own, shorter, timers.
 */
#ifndef FED_GOSSIP_TRANSPORT_H
#define FED_GOSSIP_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define FED_GOSSIP_TX_RECV_MARGIN 64 /* bytes over max_frame NNG lets in */
#define FED_GOSSIP_TX_RECV_CONTEXTS_DEFAULT 16
#define FED_GOSSIP_TX_RECONNECT_MS_DEFAULT 20
#define FED_GOSSIP_TX_RECONNECT_MAX_MS 1000
#define FED_GOSSIP_TX_MAX_INFLIGHT_DEFAULT 4096
#define FED_GOSSIP_TX_EXPIRE_MS_DEFAULT 60000
#define FED_GOSSIP_TX_MAX_CONNS_DEFAULT 128
#define FED_GOSSIP_TX_STALL_MS_DEFAULT 30000
#define FED_GOSSIP_TX_EMPTY FED_ERR_BUSY /* fed_gossip_tx_next: no event now */

typedef struct fed_gossip_tx fed_gossip_tx;
/* An incoming request waiting for its one answer (see Ownership above). */
typedef struct fed_gossip_tx_req fed_gossip_tx_req;

typedef struct fed_gossip_tx_cfg {
    const char *listen_url; /* "tcp://0.0.0.0:7400", "ipc:///path"; NULL: dial only */
    size_t max_frame;       /* largest frame (0: FED_WIRE_MAX_FRAME_DEFAULT) */
    uint32_t recv_contexts; /* incoming requests held at once (0: 16) */
    uint32_t reconnect_ms;  /* first redial interval (0: 20 ms; doubles up to 1 s) */
    uint32_t max_inflight;  /* outgoing requests not yet completed (0: 4096) */
    uint32_t expire_ms;     /* outgoing request backstop (0: 60 s) */
    size_t recv_max;        /* largest request the listener takes (0: max_frame) */
    uint32_t max_conns;     /* listener connections at once (0: 128) */
    uint32_t stall_ms;      /* close a silent connection owed nothing after (0: 30 s) */
} fed_gossip_tx_cfg;

typedef enum fed_gossip_tx_kind {
    FED_GOSSIP_TX_REQUEST = 1,     /* req, frame, len */
    FED_GOSSIP_TX_REPLY = 2,       /* peer, token, frame, len */
    FED_GOSSIP_TX_SEND_FAILED = 3, /* peer, token, reason */
} fed_gossip_tx_kind;

typedef struct fed_gossip_tx_event {
    fed_gossip_tx_kind kind;
    fed_gossip_tx_req *req; /* REQUEST: the handle to answer; else NULL */
    uint8_t peer[32];       /* REPLY, SEND_FAILED: the key the request went to */
    uint64_t token;         /* REPLY, SEND_FAILED: the caller's token from send */
    const uint8_t *frame;   /* REQUEST, REPLY: the bytes received */
    size_t len;
    fed_err reason;         /* SEND_FAILED: FED_ERR_IO (the connection dropped with the
                               request on it; req0 does not resend), FED_ERR_TIMEOUT
                               (expire_ms), FED_ERR_CLOSED (peer removed or replaced),
                               FED_ERR_FRAME_TOO_LARGE (reply over max_frame),
                               FED_ERR_NOMEM */
    void *priv_;            /* the transport's; event_done frees through it */
} fed_gossip_tx_event;

typedef struct fed_gossip_tx_counters {
    uint64_t requests_out; /* accepted by send */
    uint64_t replies_in;   /* REPLY events delivered */
    uint64_t send_failed;  /* SEND_FAILED events delivered */
    uint64_t requests_in;  /* REQUEST events delivered */
    uint64_t replies_out;  /* answers handed to NNG by reply */
    uint64_t reply_failed; /* answers NNG could not send (requester gone) */
    uint64_t refused;      /* refuse, or reply that failed before sending */
    uint64_t rx_oversize;  /* over max_frame, within the margin: dropped */
    uint64_t bytes_out;    /* frame bytes of requests and replies sent */
    uint64_t bytes_in;     /* frame bytes of requests and replies delivered */
    uint64_t conn_refused;   /* listener connections over max_conns, closed */
    uint64_t conn_stalled;   /* listener connections silent past stall_ms, closed */
    uint64_t conn_handshake; /* NNG: connections with a bad handshake */
    uint64_t conn_dropped;   /* NNG: connections closed on an error: a message
                                over the limit, or the far end gone */
} fed_gossip_tx_counters;

/* Fills the defaults above (listen_url NULL). */
void fed_gossip_tx_cfg_default(fed_gossip_tx_cfg *cfg);

/* Opens the transport and, with a listen_url, binds it at once (an address in
 * use is FED_ERR_IO, a malformed URL FED_ERR_INVAL). cfg is copied. */
FED_WUR fed_err fed_gossip_tx_open(const fed_gossip_tx_cfg *cfg, fed_gossip_tx **out);
/* Closes every socket, stops every callback, frees every request, context and
 * queued event. NULL is fine. */
void fed_gossip_tx_close(fed_gossip_tx *tx);

/* The TCP port the listener bound (the way to learn it after listening on
 * port 0). FED_ERR_NOTFOUND without a listener, FED_ERR_UNSUPPORTED when the
 * listener is not TCP. */
FED_WUR fed_err fed_gossip_tx_bound_port(const fed_gossip_tx *tx, uint16_t *port);
/* Readable while events are queued; owned by tx (do not close or read it). */
int fed_gossip_tx_wake_fd(const fed_gossip_tx *tx);

/* Dials url for the peer with this key (no wait: a peer not up yet is found
 * when it is). Adding the same key and url again changes nothing; another url
 * replaces the link (its requests in flight fail with FED_ERR_CLOSED). */
FED_WUR fed_err fed_gossip_tx_add_peer(fed_gossip_tx *tx, const uint8_t key[32],
                                       const char *url);
/* Closes the peer's link; its requests in flight come back as SEND_FAILED
 * FED_ERR_CLOSED. FED_ERR_NOTFOUND for an unknown key. */
FED_WUR fed_err fed_gossip_tx_remove_peer(fed_gossip_tx *tx, const uint8_t key[32]);

/* Sends frame as a request to the peer; its REPLY or SEND_FAILED event later
 * carries token. FED_ERR_FRAME_TOO_LARGE (len > max_frame), FED_ERR_NOTFOUND
 * (no such peer), FED_ERR_FULL (max_inflight reached), FED_ERR_NOMEM; on any
 * error no event follows. */
FED_WUR fed_err fed_gossip_tx_send(fed_gossip_tx *tx, const uint8_t key[32],
                                   const uint8_t *frame, size_t len, uint64_t token);

/* The one answer to req (consumed, whatever this returns). On an error
 * (FED_ERR_FRAME_TOO_LARGE, FED_ERR_NOMEM) the request is refused instead. */
FED_WUR fed_err fed_gossip_tx_reply(fed_gossip_tx *tx, fed_gossip_tx_req *req,
                                    const uint8_t *frame, size_t len);
/* No answer: closes req's context (consumed); the requester's request stays
 * pending until its own timer (or expire_ms) gives up on it. */
void fed_gossip_tx_refuse(fed_gossip_tx *tx, fed_gossip_tx_req *req);

/* The next event, without waiting: FED_OK, or FED_GOSSIP_TX_EMPTY. */
FED_WUR fed_err fed_gossip_tx_next(fed_gossip_tx *tx, fed_gossip_tx_event *ev);
/* Releases what ev holds (its frame bytes); the REQUEST handle stays valid. */
void fed_gossip_tx_event_done(fed_gossip_tx *tx, fed_gossip_tx_event *ev);

void fed_gossip_tx_get_counters(fed_gossip_tx *tx, fed_gossip_tx_counters *out);
/* Requests sent and not yet delivered back as an event. */
uint32_t fed_gossip_tx_inflight(const fed_gossip_tx *tx);

#endif
