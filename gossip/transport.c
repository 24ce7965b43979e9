/* transport.c - the NNG req0/rep0 transport behind gossip/transport.h.
 * Owns the listener socket and its receive contexts (slots), the table of
 * its connections (for the connection cap and the stall deadline), one req0
 * socket per peer, one context per outgoing request (calls), and the event
 * queue that NNG's callbacks fill and the loop thread drains. Callbacks only
 * queue, count and re-arm; they never call back into the node, and never
 * block. */
#include "gossip/transport.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>

#include "core/alloc.h"
#include "core/log.h"
#include "gossip/wire.h"

#define FED_GOSSIP_TX_CLOSE_GRACE_MS 20

/* An entry of the event queue; first member of a slot or a call. */
typedef struct qlink {
    struct qlink *qnext;
    int tag; /* Q_SLOT, Q_CALL */
} qlink;
enum { Q_SLOT = 1, Q_CALL = 2 };

enum slot_state {
    SLOT_IDLE = 0, /* not started (open failed part way) */
    SLOT_RECV,     /* waiting for a request */
    SLOT_QUEUED,   /* request received, its event queued */
    SLOT_HELD,     /* handed to the loop as a REQUEST handle */
    SLOT_SEND,     /* the reply is being sent */
    SLOT_DEAD,     /* its context could not be reopened; next() retries */
};

/* A receive context of the listener = an incoming request handle. */
struct fed_gossip_tx_req {
    qlink q; /* first */
    fed_gossip_tx *tx;
    nng_ctx ctx;
    nng_aio *aio;
    nng_msg *msg;  /* received, until next() hands it to an event */
    nng_pipe pipe; /* the connection the request came on (under tx->mu) */
    int state;     /* slot_state; written under tx->mu */
};

/* A connection to the listener. */
typedef struct conn {
    nng_pipe pipe;
    uint64_t last_ms; /* when it connected, or delivered its last request */
    uint32_t owed;    /* its requests received and not yet answered */
} conn;

enum call_state { CALL_SEND = 1, CALL_RECV, CALL_DONE };

/* One outgoing request on its own context of the peer's socket. */
typedef struct call {
    qlink q; /* first */
    fed_gossip_tx *tx;
    struct call *lprev, *lnext; /* tx->calls: every call not yet popped */
    nng_ctx ctx;
    nng_aio *aio;
    nng_msg *msg; /* the reply, once received */
    uint8_t key[32];
    uint64_t token;
    int state;     /* call_state; written under tx->mu */
    int cancelled; /* its peer was removed (under tx->mu) */
    fed_err err;   /* CALL_DONE without msg: why */
} call;

typedef struct peer {
    uint8_t key[32];
    char *url;
    nng_socket sock;
} peer;

struct fed_gossip_tx {
    fed_gossip_tx_cfg cfg; /* defaults applied; listen_url not kept */
    int efd;               /* eventfd: nonzero while the queue is not empty */

    int rep_open;
    nng_socket rep;
    nng_listener listener;
    fed_gossip_tx_req *slots; /* (recv_contexts) */
    uint32_t nslots;
    conn *conns;              /* (max_conns), the first nconns in use; under mu */
    uint32_t nconns;
    nng_aio *sweep;           /* wakes every sweep period: stalls, NNG's drops */

    peer **peers; /* loop thread */
    size_t npeers, cap_peers;

    call *calls;       /* loop thread: calls not yet popped */
    uint32_t inflight; /* loop thread */

    pthread_mutex_t mu; /* guards what follows and slot/call states */
    pthread_cond_t armed; /* signalled when arming drops to 0 */
    int mu_ok, cv_ok;
    int closing;
    int arming; /* callbacks between deciding to re-arm and having done so */
    uint32_t dead_slots; /* slots in SLOT_DEAD */
    qlink *qhead, *qtail;
    fed_gossip_tx_counters ctr;
};

/* ---- helpers ---- */

static fed_err err_from_nng(int rv)
{
    switch (rv) {
    case 0:
        return FED_OK;
    case NNG_ENOMEM:
        return FED_ERR_NOMEM;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
    case NNG_EBADTYPE:
        return FED_ERR_INVAL;
    case NNG_ENOTSUP:
    case NNG_EPROTO:
        return FED_ERR_UNSUPPORTED;
    case NNG_ETIMEDOUT:
        return FED_ERR_TIMEOUT;
    case NNG_ECLOSED:
    case NNG_ECANCELED:
        return FED_ERR_CLOSED;
    case NNG_EMSGSIZE:
        return FED_ERR_FRAME_TOO_LARGE;
    case NNG_EPERM:
        return FED_ERR_PERM;
    default:
        return FED_ERR_IO;
    }
}

static uint64_t mono_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void wake_set(fed_gossip_tx *tx)
{
    uint64_t one = 1;

    if (write(tx->efd, &one, sizeof one) < 0 && errno != EAGAIN)
        fed_log(FED_LOG_ERROR, "transport: eventfd write: %s", strerror(errno));
}

static void wake_clear(fed_gossip_tx *tx)
{
    uint64_t v;

    if (read(tx->efd, &v, sizeof v) < 0 && errno != EAGAIN)
        fed_log(FED_LOG_ERROR, "transport: eventfd read: %s", strerror(errno));
}

/* Caller holds tx->mu. The fd is readable exactly while the queue is not
 * empty: set on the first push, cleared when the last entry is popped. */
static void queue_push_locked(fed_gossip_tx *tx, qlink *q)
{
    q->qnext = NULL;
    if (tx->qtail != NULL) {
        tx->qtail->qnext = q;
    } else {
        tx->qhead = q;
        wake_set(tx);
    }
    tx->qtail = q;
}

static qlink *queue_pop_locked(fed_gossip_tx *tx)
{
    qlink *q = tx->qhead;

    if (q == NULL)
        return NULL;
    tx->qhead = q->qnext;
    if (tx->qhead == NULL) {
        tx->qtail = NULL;
        wake_clear(tx);
    }
    q->qnext = NULL;
    return q;
}

/* A callback that re-arms its aio announces it under tx->mu (arming_begin,
 * having checked that nothing is shutting down) and calls NNG after
 * unlocking; arming_end says it is done. Before closing a socket, the loop
 * waits for arming to drop to 0 and then stops the aios (NNG 1.5.2 crashes or
 * hangs when an operation starts on a context while its socket closes). */
static void arming_end(fed_gossip_tx *tx)
{
    pthread_mutex_lock(&tx->mu);
    if (--tx->arming == 0)
        pthread_cond_broadcast(&tx->armed);
    pthread_mutex_unlock(&tx->mu);
}

/* Caller holds tx->mu. */
static void wait_armed_locked(fed_gossip_tx *tx)
{
    while (tx->arming > 0)
        pthread_cond_wait(&tx->armed, &tx->mu);
}

static void take_aio_msg_and_free(nng_aio *aio)
{
    nng_msg *m = nng_aio_get_msg(aio);

    nng_aio_set_msg(aio, NULL);
    if (m != NULL)
        nng_msg_free(m);
}

/* ---- the listener's connections ---- */

static conn *conn_find_locked(fed_gossip_tx *tx, nng_pipe p)
{
    for (uint32_t i = 0; i < tx->nconns; i++)
        if (nng_pipe_id(tx->conns[i].pipe) == nng_pipe_id(p))
            return &tx->conns[i];
    return NULL;
}

/* A whole request came on p: it is not stalled, and is owed a reply. */
static void conn_delivered_locked(fed_gossip_tx *tx, nng_pipe p)
{
    conn *c = conn_find_locked(tx, p);

    if (c != NULL) {
        c->owed++;
        c->last_ms = mono_ms();
    }
}

/* A request from p was answered or refused. */
static void conn_answered_locked(fed_gossip_tx *tx, nng_pipe p)
{
    conn *c = conn_find_locked(tx, p);

    if (c != NULL && c->owed > 0) {
        c->owed--;
        c->last_ms = mono_ms(); /* its stall clock starts after the answer */
    }
}

/* NNG's pipe events on the listener: a connection over max_conns is closed
 * before it is added (NNG lets ADD_PRE reject a pipe so); a removed one
 * leaves the table. */
static void pipe_cb(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    fed_gossip_tx *tx = arg;
    int surplus = 0;

    pthread_mutex_lock(&tx->mu);
    if (ev == NNG_PIPE_EV_ADD_PRE) {
        if (tx->nconns >= tx->cfg.max_conns) {
            surplus = 1;
            tx->ctr.conn_refused++;
        } else {
            tx->conns[tx->nconns++] = (conn){.pipe = p, .last_ms = mono_ms(), .owed = 0};
        }
    } else if (ev == NNG_PIPE_EV_REM_POST) {
        conn *c = conn_find_locked(tx, p);

        if (c != NULL)
            *c = tx->conns[--tx->nconns];
    }
    pthread_mutex_unlock(&tx->mu);
    if (surplus) {
        fed_log(FED_LOG_DEBUG, "transport: connection over the cap (%u) closed",
                tx->cfg.max_conns);
        nng_pipe_close(p);
    }
}

/* NNG's own drops on the listener (bad handshakes; messages over the limit
 * and its other connection errors), from its statistics. */
static void read_listener_stats(fed_gossip_tx *tx)
{
    nng_stat *all, *l, *st;
    uint64_t proto = 0, other = 0;

    if (nng_stats_get(&all) != 0)
        return;
    if ((l = nng_stat_find_listener(all, tx->listener)) != NULL) {
        if ((st = nng_stat_find(l, "proto")) != NULL)
            proto = nng_stat_value(st);
        if ((st = nng_stat_find(l, "other")) != NULL)
            other = nng_stat_value(st);
    }
    nng_stats_free(all);
    pthread_mutex_lock(&tx->mu);
    tx->ctr.conn_handshake = proto;
    tx->ctr.conn_dropped = other;
    pthread_mutex_unlock(&tx->mu);
}

static uint32_t sweep_period_ms(const fed_gossip_tx *tx)
{
    uint32_t p = tx->cfg.stall_ms / 4;

    return p < 10 ? 10 : p > 1000 ? 1000 : p;
}

/* Every sweep period: close connections silent past stall_ms that are owed
 * nothing, and read NNG's drop counts. At most 64 closed a sweep. */
static void sweep_cb(void *arg)
{
    fed_gossip_tx *tx = arg;
    nng_pipe idle[64];
    size_t n = 0;
    uint64_t now = mono_ms();
    int rearm;

    pthread_mutex_lock(&tx->mu);
    for (uint32_t i = 0; i < tx->nconns && n < sizeof idle / sizeof idle[0]; i++) {
        conn *c = &tx->conns[i];

        if (c->owed == 0 && now - c->last_ms >= tx->cfg.stall_ms) {
            idle[n++] = c->pipe;
            c->last_ms = now; /* counted once, whenever NNG removes it */
            tx->ctr.conn_stalled++;
        }
    }
    rearm = !tx->closing && nng_aio_result(tx->sweep) == 0;
    if (rearm)
        tx->arming++;
    pthread_mutex_unlock(&tx->mu);
    for (size_t i = 0; i < n; i++)
        nng_pipe_close(idle[i]);
    if (n > 0)
        fed_log(FED_LOG_DEBUG, "transport: closed %zu connection(s) silent for %u ms", n,
                tx->cfg.stall_ms);
    if (rearm) {
        read_listener_stats(tx);
        nng_sleep_aio((nng_duration)sweep_period_ms(tx), tx->sweep);
        arming_end(tx);
    }
}

/* ---- incoming requests (rep0 slots) ---- */

static void slot_cb(void *arg)
{
    fed_gossip_tx_req *s = arg;
    fed_gossip_tx *tx = s->tx;
    int rv = nng_aio_result(s->aio);
    int rearm = 0;

    pthread_mutex_lock(&tx->mu);
    if (s->state == SLOT_SEND) {
        if (rv != 0) { /* the message is still ours */
            take_aio_msg_and_free(s->aio);
            tx->ctr.reply_failed++;
        }
        conn_answered_locked(tx, s->pipe);
        s->state = SLOT_RECV;
        rearm = !tx->closing;
    } else if (s->state == SLOT_RECV) {
        if (rv == 0) {
            nng_msg *m = nng_aio_get_msg(s->aio);

            nng_aio_set_msg(s->aio, NULL);
            if (tx->closing) {
                nng_msg_free(m);
            } else {
                s->msg = m;
                s->pipe = nng_msg_get_pipe(m);
                conn_delivered_locked(tx, s->pipe);
                s->state = SLOT_QUEUED;
                queue_push_locked(tx, &s->q);
            }
        } else if (!tx->closing) {
            /* Only close() closes the socket; anything else is transient. */
            rearm = rv != NNG_ECLOSED && rv != NNG_ECANCELED;
            if (!rearm) {
                s->state = SLOT_DEAD; /* next() reopens it */
                tx->dead_slots++;
            }
        }
    }
    if (rearm)
        tx->arming++;
    pthread_mutex_unlock(&tx->mu);
    if (rearm) {
        nng_ctx_recv(s->ctx, s->aio);
        arming_end(tx);
    }
}

static void slot_set_state(fed_gossip_tx *tx, fed_gossip_tx_req *s, int state)
{
    pthread_mutex_lock(&tx->mu);
    if (s->state == SLOT_DEAD)
        tx->dead_slots--;
    if (state == SLOT_DEAD)
        tx->dead_slots++;
    s->state = state;
    pthread_mutex_unlock(&tx->mu);
}

/* A fresh context for the slot, receiving. On failure the slot is dead and
 * next() tries again. */
static void slot_restart(fed_gossip_tx *tx, fed_gossip_tx_req *s)
{
    int rv = nng_ctx_open(&s->ctx, tx->rep);

    if (rv != 0) {
        slot_set_state(tx, s, SLOT_DEAD);
        fed_log(FED_LOG_WARN, "transport: cannot reopen a receive context: %s",
                nng_strerror(rv));
        return;
    }
    slot_set_state(tx, s, SLOT_RECV);
    nng_ctx_recv(s->ctx, s->aio);
}

static void revive_slots(fed_gossip_tx *tx)
{
    for (uint32_t i = 0; i < tx->nslots; i++) {
        fed_gossip_tx_req *s = &tx->slots[i];
        int dead;

        pthread_mutex_lock(&tx->mu);
        dead = s->state == SLOT_DEAD;
        pthread_mutex_unlock(&tx->mu);
        if (dead) {
            nng_ctx_close(s->ctx); /* already closed, or never opened: harmless */
            slot_restart(tx, s);
        }
    }
}

static fed_err listen_open(fed_gossip_tx *tx, const char *url)
{
    int rv;
    fed_err e;

    if ((rv = nng_rep0_open(&tx->rep)) != 0)
        goto nng_fail;
    tx->rep_open = 1;
    if ((rv = nng_socket_set_size(tx->rep, NNG_OPT_RECVMAXSZ,
                                  tx->cfg.recv_max + FED_GOSSIP_TX_RECV_MARGIN)) != 0)
        goto nng_fail;
    tx->conns = fed_calloc(tx->cfg.max_conns, sizeof *tx->conns);
    if (tx->conns == NULL)
        return FED_ERR_NOMEM;
    if ((rv = nng_pipe_notify(tx->rep, NNG_PIPE_EV_ADD_PRE, pipe_cb, tx)) != 0 ||
        (rv = nng_pipe_notify(tx->rep, NNG_PIPE_EV_REM_POST, pipe_cb, tx)) != 0 ||
        (rv = nng_aio_alloc(&tx->sweep, sweep_cb, tx)) != 0)
        goto nng_fail;
    if ((rv = nng_listener_create(&tx->listener, tx->rep, url)) != 0) {
        rv = rv == NNG_ENOMEM ? rv : NNG_EADDRINVAL; /* unknown scheme, bad address */
        goto nng_fail;
    }
    if ((rv = nng_listener_start(tx->listener, 0)) != 0)
        goto nng_fail;

    tx->slots = fed_calloc(tx->cfg.recv_contexts, sizeof *tx->slots);
    if (tx->slots == NULL)
        return FED_ERR_NOMEM;
    for (uint32_t i = 0; i < tx->cfg.recv_contexts; i++) {
        fed_gossip_tx_req *s = &tx->slots[i];

        s->q.tag = Q_SLOT;
        s->tx = tx;
        tx->nslots = i + 1; /* close() frees what is set up */
        if ((rv = nng_aio_alloc(&s->aio, slot_cb, s)) != 0)
            goto nng_fail;
        if ((rv = nng_ctx_open(&s->ctx, tx->rep)) != 0)
            goto nng_fail;
    }
    for (uint32_t i = 0; i < tx->nslots; i++) {
        slot_set_state(tx, &tx->slots[i], SLOT_RECV);
        nng_ctx_recv(tx->slots[i].ctx, tx->slots[i].aio);
    }
    nng_sleep_aio((nng_duration)sweep_period_ms(tx), tx->sweep);
    return FED_OK;

nng_fail:
    e = err_from_nng(rv);
    if (rv == NNG_EADDRINUSE)
        e = FED_ERR_IO;
    fed_log(FED_LOG_ERROR, "transport: cannot listen on %s: %s", url, nng_strerror(rv));
    return e;
}

/* ---- peers ---- */

static peer *peer_find(const fed_gossip_tx *tx, const uint8_t key[32], size_t *idx)
{
    for (size_t i = 0; i < tx->npeers; i++) {
        if (memcmp(tx->peers[i]->key, key, 32) == 0) {
            if (idx != NULL)
                *idx = i;
            return tx->peers[i];
        }
    }
    return NULL;
}

/* Frees a peer whose socket is closed (or never opened, or not yet used). */
static void peer_free(peer *p)
{
    if (p == NULL)
        return;
    if (nng_socket_id(p->sock) > 0)
        nng_close(p->sock);
    fed_free(p->url);
    fed_free(p);
}

/* Ends every call to p (each comes back as SEND_FAILED FED_ERR_CLOSED: NNG
 * itself would report the connection's end), then closes p's socket. */
static void peer_retire(fed_gossip_tx *tx, peer *p)
{
    pthread_mutex_lock(&tx->mu);
    for (call *c = tx->calls; c != NULL; c = c->lnext)
        if (memcmp(c->key, p->key, 32) == 0)
            c->cancelled = 1;
    wait_armed_locked(tx);
    pthread_mutex_unlock(&tx->mu);
    for (call *c = tx->calls; c != NULL; c = c->lnext)
        if (memcmp(c->key, p->key, 32) == 0)
            nng_aio_stop(c->aio);
    nng_close(p->sock);
    p->sock = (nng_socket)NNG_SOCKET_INITIALIZER;
}

static fed_err peer_dial(fed_gossip_tx *tx, peer *p)
{
    nng_dialer d;
    int rv;

    if ((rv = nng_req0_open(&p->sock)) != 0)
        goto out;
    /* before any context opens: contexts copy the socket's options */
    if ((rv = nng_socket_set_ms(p->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE)) != 0)
        goto out;
    if ((rv = nng_socket_set_size(p->sock, NNG_OPT_RECVMAXSZ,
                                  tx->cfg.max_frame + FED_GOSSIP_TX_RECV_MARGIN)) != 0)
        goto out;
    if ((rv = nng_dialer_create(&d, p->sock, p->url)) != 0) {
        rv = rv == NNG_ENOMEM ? rv : NNG_EADDRINVAL; /* unknown scheme, bad address */
        goto out;
    }
    if ((rv = nng_dialer_set_ms(d, NNG_OPT_RECONNMINT, (nng_duration)tx->cfg.reconnect_ms)) != 0)
        goto out;
    if ((rv = nng_dialer_set_ms(d, NNG_OPT_RECONNMAXT, FED_GOSSIP_TX_RECONNECT_MAX_MS)) != 0)
        goto out;
    rv = nng_dialer_start(d, NNG_FLAG_NONBLOCK);
out:
    if (rv != 0)
        fed_log(FED_LOG_ERROR, "transport: cannot dial %s: %s", p->url, nng_strerror(rv));
    return err_from_nng(rv);
}

fed_err fed_gossip_tx_add_peer(fed_gossip_tx *tx, const uint8_t key[32], const char *url)
{
    size_t idx = 0;
    peer *old = peer_find(tx, key, &idx), *p = NULL;
    fed_err e = FED_OK;

    assert(url != NULL);
    if (old != NULL && strcmp(old->url, url) == 0)
        return FED_OK;
    if (old == NULL && tx->npeers == tx->cap_peers) {
        size_t cap = tx->cap_peers ? 2 * tx->cap_peers : 8;
        peer **np = fed_realloc(tx->peers, cap * sizeof *np);

        if (np == NULL)
            return FED_ERR_NOMEM;
        tx->peers = np;
        tx->cap_peers = cap;
    }
    p = fed_calloc(1, sizeof *p);
    if (p == NULL)
        return FED_ERR_NOMEM;
    memcpy(p->key, key, 32);
    p->url = fed_strdup(url);
    if (p->url == NULL) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    if ((e = peer_dial(tx, p)) != FED_OK)
        goto out;
    if (old != NULL) {
        tx->peers[idx] = p;
        peer_retire(tx, old);
        peer_free(old);
    } else {
        tx->peers[tx->npeers++] = p;
    }
    return FED_OK;
out:
    peer_free(p);
    return e;
}

fed_err fed_gossip_tx_remove_peer(fed_gossip_tx *tx, const uint8_t key[32])
{
    size_t idx;
    peer *p = peer_find(tx, key, &idx);

    if (p == NULL)
        return FED_ERR_NOTFOUND;
    tx->peers[idx] = tx->peers[--tx->npeers];
    peer_retire(tx, p);
    peer_free(p);
    return FED_OK;
}

/* ---- outgoing requests (calls) ---- */

static void call_cb(void *arg)
{
    call *c = arg;
    fed_gossip_tx *tx = c->tx;
    int rv = nng_aio_result(c->aio);
    int recv = 0;

    pthread_mutex_lock(&tx->mu);
    if (c->state == CALL_SEND) {
        if (rv == 0 && !tx->closing && !c->cancelled) {
            c->state = CALL_RECV;
            recv = 1;
            tx->arming++;
        } else {
            if (rv != 0) /* not sent: the message is still ours */
                take_aio_msg_and_free(c->aio);
            c->err = rv != 0 && !c->cancelled ? err_from_nng(rv) : FED_ERR_CLOSED;
            c->state = CALL_DONE;
            if (!tx->closing)
                queue_push_locked(tx, &c->q);
        }
    } else if (c->state == CALL_RECV) {
        if (rv == 0) {
            c->msg = nng_aio_get_msg(c->aio);
            nng_aio_set_msg(c->aio, NULL);
        } else {
            /* req0 without resend fails a request whose connection drops
             * with ECONNRESET; one we closed ourselves says so */
            c->err = c->cancelled ? FED_ERR_CLOSED : err_from_nng(rv);
        }
        c->state = CALL_DONE;
        if (!tx->closing)
            queue_push_locked(tx, &c->q);
    }
    pthread_mutex_unlock(&tx->mu);
    if (recv) {
        nng_ctx_recv(c->ctx, c->aio);
        arming_end(tx);
    }
}

/* Frees a call whose callbacks are over or never started. */
static void call_free(call *c)
{
    if (c == NULL)
        return;
    if (c->aio != NULL)
        nng_aio_free(c->aio); /* waits for a running callback */
    if (nng_ctx_id(c->ctx) > 0)
        nng_ctx_close(c->ctx);
    if (c->msg != NULL)
        nng_msg_free(c->msg);
    fed_free(c);
}

static void call_link(fed_gossip_tx *tx, call *c)
{
    c->lprev = NULL;
    c->lnext = tx->calls;
    if (tx->calls != NULL)
        tx->calls->lprev = c;
    tx->calls = c;
}

static void call_unlink(fed_gossip_tx *tx, call *c)
{
    if (c->lprev != NULL)
        c->lprev->lnext = c->lnext;
    else
        tx->calls = c->lnext;
    if (c->lnext != NULL)
        c->lnext->lprev = c->lprev;
    c->lprev = c->lnext = NULL;
}

fed_err fed_gossip_tx_send(fed_gossip_tx *tx, const uint8_t key[32], const uint8_t *frame,
                           size_t len, uint64_t token)
{
    peer *p;
    call *c = NULL;
    nng_msg *m = NULL;
    fed_err e = FED_OK;
    int rv;

    assert(frame != NULL || len == 0);
    if (len > tx->cfg.max_frame)
        return FED_ERR_FRAME_TOO_LARGE;
    if ((p = peer_find(tx, key, NULL)) == NULL)
        return FED_ERR_NOTFOUND;
    if (tx->inflight >= tx->cfg.max_inflight)
        return FED_ERR_FULL;
    c = fed_calloc(1, sizeof *c);
    if (c == NULL)
        return FED_ERR_NOMEM;
    c->q.tag = Q_CALL;
    c->tx = tx;
    memcpy(c->key, key, 32);
    c->token = token;
    if ((rv = nng_aio_alloc(&c->aio, call_cb, c)) != 0 ||
        (rv = nng_ctx_open(&c->ctx, p->sock)) != 0 || (rv = nng_msg_alloc(&m, len)) != 0) {
        e = err_from_nng(rv);
        goto out;
    }
    if (len > 0)
        memcpy(nng_msg_body(m), frame, len);
    nng_aio_set_timeout(c->aio, (nng_duration)tx->cfg.expire_ms);
    call_link(tx, c);
    tx->inflight++;
    pthread_mutex_lock(&tx->mu);
    c->state = CALL_SEND;
    tx->ctr.requests_out++;
    tx->ctr.bytes_out += len;
    pthread_mutex_unlock(&tx->mu);
    nng_aio_set_msg(c->aio, m);
    nng_ctx_send(c->ctx, c->aio);
    return FED_OK;
out:
    call_free(c);
    return e;
}

/* ---- answering requests ---- */

void fed_gossip_tx_refuse(fed_gossip_tx *tx, fed_gossip_tx_req *req)
{
    assert(req != NULL && req->tx == tx && req->state == SLOT_HELD);
    pthread_mutex_lock(&tx->mu);
    tx->ctr.refused++;
    conn_answered_locked(tx, req->pipe);
    pthread_mutex_unlock(&tx->mu);
    /* Closing the context forgets the request; the requester hears nothing. */
    nng_ctx_close(req->ctx);
    slot_restart(tx, req);
}

fed_err fed_gossip_tx_reply(fed_gossip_tx *tx, fed_gossip_tx_req *req, const uint8_t *frame,
                            size_t len)
{
    nng_msg *m = NULL;
    fed_err e;
    int rv;

    assert(req != NULL && req->tx == tx && req->state == SLOT_HELD);
    assert(frame != NULL || len == 0);
    if (len > tx->cfg.max_frame) {
        e = FED_ERR_FRAME_TOO_LARGE;
        goto out;
    }
    if ((rv = nng_msg_alloc(&m, len)) != 0) {
        e = err_from_nng(rv);
        goto out;
    }
    if (len > 0)
        memcpy(nng_msg_body(m), frame, len);
    pthread_mutex_lock(&tx->mu);
    req->state = SLOT_SEND;
    tx->ctr.replies_out++;
    tx->ctr.bytes_out += len;
    pthread_mutex_unlock(&tx->mu);
    nng_aio_set_msg(req->aio, m);
    nng_ctx_send(req->ctx, req->aio);
    return FED_OK;
out:
    fed_gossip_tx_refuse(tx, req);
    return e;
}

/* ---- events ---- */

/* REQUEST from a popped slot; 0 when the message was oversized and the
 * request refused instead. */
static int event_from_slot(fed_gossip_tx *tx, fed_gossip_tx_req *s, fed_gossip_tx_event *ev)
{
    nng_msg *m;
    size_t len;

    pthread_mutex_lock(&tx->mu);
    m = s->msg;
    s->msg = NULL;
    s->state = SLOT_HELD;
    len = nng_msg_len(m);
    if (len > tx->cfg.recv_max)
        tx->ctr.rx_oversize++;
    else {
        tx->ctr.requests_in++;
        tx->ctr.bytes_in += len;
    }
    pthread_mutex_unlock(&tx->mu);
    if (len > tx->cfg.recv_max) {
        nng_msg_free(m);
        fed_log(FED_LOG_WARN, "transport: dropped a %zu-byte request (limit %zu)", len,
                tx->cfg.recv_max);
        fed_gossip_tx_refuse(tx, s);
        return 0;
    }
    ev->kind = FED_GOSSIP_TX_REQUEST;
    ev->req = s;
    ev->frame = nng_msg_body(m);
    ev->len = len;
    ev->priv_ = m;
    return 1;
}

static void event_from_call(fed_gossip_tx *tx, call *c, fed_gossip_tx_event *ev)
{
    call_unlink(tx, c);
    tx->inflight--;
    pthread_mutex_lock(&tx->mu);
    if (c->msg != NULL && nng_msg_len(c->msg) > tx->cfg.max_frame) {
        nng_msg_free(c->msg);
        c->msg = NULL;
        c->err = FED_ERR_FRAME_TOO_LARGE;
        tx->ctr.rx_oversize++;
    }
    if (c->msg != NULL) {
        tx->ctr.replies_in++;
        tx->ctr.bytes_in += nng_msg_len(c->msg);
    } else {
        tx->ctr.send_failed++;
    }
    pthread_mutex_unlock(&tx->mu);
    memcpy(ev->peer, c->key, 32);
    ev->token = c->token;
    ev->priv_ = c;
    if (c->msg != NULL) {
        ev->kind = FED_GOSSIP_TX_REPLY;
        ev->frame = nng_msg_body(c->msg);
        ev->len = nng_msg_len(c->msg);
    } else {
        ev->kind = FED_GOSSIP_TX_SEND_FAILED;
        ev->reason = c->err;
    }
}

fed_err fed_gossip_tx_next(fed_gossip_tx *tx, fed_gossip_tx_event *ev)
{
    uint32_t dead;

    memset(ev, 0, sizeof *ev);
    pthread_mutex_lock(&tx->mu);
    dead = tx->dead_slots;
    pthread_mutex_unlock(&tx->mu);
    if (dead > 0)
        revive_slots(tx);
    for (;;) {
        qlink *q;

        pthread_mutex_lock(&tx->mu);
        q = queue_pop_locked(tx);
        pthread_mutex_unlock(&tx->mu);
        if (q == NULL)
            return FED_GOSSIP_TX_EMPTY;
        if (q->tag == Q_CALL) {
            event_from_call(tx, (call *)q, ev);
            return FED_OK;
        }
        if (event_from_slot(tx, (fed_gossip_tx_req *)q, ev))
            return FED_OK;
    }
}

void fed_gossip_tx_event_done(fed_gossip_tx *tx, fed_gossip_tx_event *ev)
{
    (void)tx;
    if (ev->priv_ != NULL) {
        if (ev->kind == FED_GOSSIP_TX_REQUEST)
            nng_msg_free(ev->priv_);
        else
            call_free(ev->priv_);
    }
    memset(ev, 0, sizeof *ev);
}

/* ---- open, close, queries ---- */

void fed_gossip_tx_cfg_default(fed_gossip_tx_cfg *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->max_frame = FED_WIRE_MAX_FRAME_DEFAULT;
    cfg->recv_contexts = FED_GOSSIP_TX_RECV_CONTEXTS_DEFAULT;
    cfg->reconnect_ms = FED_GOSSIP_TX_RECONNECT_MS_DEFAULT;
    cfg->max_inflight = FED_GOSSIP_TX_MAX_INFLIGHT_DEFAULT;
    cfg->expire_ms = FED_GOSSIP_TX_EXPIRE_MS_DEFAULT;
    cfg->max_conns = FED_GOSSIP_TX_MAX_CONNS_DEFAULT;
    cfg->stall_ms = FED_GOSSIP_TX_STALL_MS_DEFAULT;
}

static fed_err cfg_fill(const fed_gossip_tx_cfg *in, fed_gossip_tx_cfg *out)
{
    fed_gossip_tx_cfg d;

    fed_gossip_tx_cfg_default(&d);
    *out = *in;
    if (out->max_frame == 0)
        out->max_frame = d.max_frame;
    if (out->recv_contexts == 0)
        out->recv_contexts = d.recv_contexts;
    if (out->reconnect_ms == 0)
        out->reconnect_ms = d.reconnect_ms;
    if (out->max_inflight == 0)
        out->max_inflight = d.max_inflight;
    if (out->expire_ms == 0)
        out->expire_ms = d.expire_ms;
    if (out->recv_max == 0)
        out->recv_max = out->max_frame;
    if (out->max_conns == 0)
        out->max_conns = d.max_conns;
    if (out->stall_ms == 0)
        out->stall_ms = d.stall_ms;
    out->listen_url = NULL;
    if (out->recv_max > out->max_frame || out->max_conns > 65536 || out->stall_ms > INT32_MAX)
        return FED_ERR_RANGE;
    if (out->max_frame > FED_WIRE_MAX_FRAME_LIMIT || out->recv_contexts > 65536 ||
        out->reconnect_ms > FED_GOSSIP_TX_RECONNECT_MAX_MS || out->expire_ms > INT32_MAX)
        return FED_ERR_RANGE;
    return FED_OK;
}

fed_err fed_gossip_tx_open(const fed_gossip_tx_cfg *cfg, fed_gossip_tx **out)
{
    fed_gossip_tx *tx;
    fed_err e;

    *out = NULL;
    tx = fed_calloc(1, sizeof *tx);
    if (tx == NULL)
        return FED_ERR_NOMEM;
    tx->efd = -1;
    if ((e = cfg_fill(cfg, &tx->cfg)) != FED_OK)
        goto out;
    if (pthread_mutex_init(&tx->mu, NULL) != 0) {
        e = FED_ERR_INTERNAL;
        goto out;
    }
    tx->mu_ok = 1;
    if (pthread_cond_init(&tx->armed, NULL) != 0) {
        e = FED_ERR_INTERNAL;
        goto out;
    }
    tx->cv_ok = 1;
    tx->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (tx->efd < 0) {
        fed_log(FED_LOG_ERROR, "transport: eventfd: %s", strerror(errno));
        e = FED_ERR_IO;
        goto out;
    }
    if (cfg->listen_url != NULL && (e = listen_open(tx, cfg->listen_url)) != FED_OK)
        goto out;
    *out = tx;
    return FED_OK;
out:
    fed_gossip_tx_close(tx);
    return e;
}

void fed_gossip_tx_close(fed_gossip_tx *tx)
{
    if (tx == NULL)
        return;
    /* 1. no callback re-arms from now on, and none is half-way through it;
     * 2. stop every aio (cancels its operation, waits for its callback);
     * 3. only then close the sockets (nothing of ours touches them now);
     * 4. free. */
    if (tx->cv_ok) {
        pthread_mutex_lock(&tx->mu);
        tx->closing = 1;
        wait_armed_locked(tx);
        pthread_mutex_unlock(&tx->mu);
    }
    for (uint32_t i = 0; i < tx->nslots; i++)
        if (tx->slots[i].aio != NULL)
            nng_aio_stop(tx->slots[i].aio);
    for (call *c = tx->calls; c != NULL; c = c->lnext)
        if (c->aio != NULL)
            nng_aio_stop(c->aio);
    if (tx->sweep != NULL)
        nng_aio_stop(tx->sweep);
    if (tx->rep_open || tx->npeers > 0) {
        /* NNG 1.5.2 can deadlock closing a socket while a pipe is still
         * finishing an operation it started for one of our contexts (its
         * reaper waits on a task that never runs): seen on the rep0 socket,
         * and once (2026-11-28, a loaded host) on a client's req0 socket at
         * SIGTERM. With our aios stopped nothing new starts; give the last
         * ones time to end before any socket closes. */
        struct timespec grace = {0, (long)FED_GOSSIP_TX_CLOSE_GRACE_MS * 1000000L};

        nanosleep(&grace, NULL);
    }
    if (tx->rep_open)
        nng_close(tx->rep);
    for (size_t i = 0; i < tx->npeers; i++)
        nng_close(tx->peers[i]->sock);
    for (uint32_t i = 0; i < tx->nslots; i++) {
        fed_gossip_tx_req *s = &tx->slots[i];

        if (s->aio != NULL)
            nng_aio_free(s->aio);
        if (s->msg != NULL)
            nng_msg_free(s->msg);
    }
    while (tx->calls != NULL) {
        call *c = tx->calls;

        call_unlink(tx, c);
        c->ctx = (nng_ctx)NNG_CTX_INITIALIZER; /* closed with its socket */
        call_free(c);
    }
    for (size_t i = 0; i < tx->npeers; i++) {
        tx->peers[i]->sock = (nng_socket)NNG_SOCKET_INITIALIZER; /* closed above */
        peer_free(tx->peers[i]);
    }
    fed_free(tx->peers);
    fed_free(tx->slots);
    if (tx->sweep != NULL)
        nng_aio_free(tx->sweep);
    fed_free(tx->conns);
    if (tx->efd >= 0)
        close(tx->efd);
    if (tx->cv_ok)
        pthread_cond_destroy(&tx->armed);
    if (tx->mu_ok)
        pthread_mutex_destroy(&tx->mu);
    fed_free(tx);
}

fed_err fed_gossip_tx_bound_port(const fed_gossip_tx *tx, uint16_t *port)
{
    int p = 0;
    int rv;

    *port = 0;
    if (!tx->rep_open)
        return FED_ERR_NOTFOUND;
    rv = nng_listener_get_int(tx->listener, NNG_OPT_TCP_BOUND_PORT, &p);
    if (rv != 0 || p <= 0 || p > 65535)
        return FED_ERR_UNSUPPORTED;
    *port = (uint16_t)p;
    return FED_OK;
}

int fed_gossip_tx_wake_fd(const fed_gossip_tx *tx)
{
    return tx->efd;
}

void fed_gossip_tx_get_counters(fed_gossip_tx *tx, fed_gossip_tx_counters *out)
{
    pthread_mutex_lock(&tx->mu);
    *out = tx->ctr;
    pthread_mutex_unlock(&tx->mu);
}

uint32_t fed_gossip_tx_inflight(const fed_gossip_tx *tx)
{
    return tx->inflight;
}
