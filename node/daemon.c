/* daemon.c - the daemon loop: fills fed_env from the NNG transport, the
 * clocks, randombytes_buf and the pool, and dispatches frames, timers and
 * finished jobs to the node one at a time on this thread. Owns the
 * transport, the timers and the job wrappers; the only process-wide state
 * is the signal self-pipe (DESIGN.md allows it), beside glibc's malloc
 * thresholds, set once (keep_round_buffers). Never blocks on a job. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/log.h"
#include "gossip/transport.h"
#include "node/daemon.h"
#include "node/sdnotify.h"

/* One slot per timer id the node has: set_timer never finds it full (the
 * node stops with an error if it ever did, rather than lose a timer). */
#define DAEMON_MAX_TIMERS FED_NODE_MAX_TIMERS
#define DAEMON_MAX_WAIT_MS 1000

/* The signal self-pipe: written by the handler, read by the loop. */
static int sig_pipe[2] = {-1, -1};

typedef struct daemon_timer {
    uint32_t id;
    uint64_t at_ms;
} daemon_timer;

typedef struct fed_node_daemon fed_node_daemon;

/* A job on the pool; finished ones queue for the loop. */
typedef struct daemon_job {
    fed_pool_task task;
    fed_job *job;
    fed_node_daemon *d;
    struct daemon_job *next;
} daemon_job;

struct fed_node_daemon {
    const fed_node_daemon_cfg *dc;
    fed_node *node;
    fed_gossip_tx *tx;
    fed_pool *pool;
    daemon_timer timers[DAEMON_MAX_TIMERS];
    int ntimers;
    uint64_t token;
    int job_fd[2];           /* written by a finished job, read by the loop */
    pthread_mutex_t mu;      /* guards done */
    daemon_job *done;        /* finished, in completion order (reversed) */
    int running;             /* jobs submitted and not yet handed back */
    fed_sd_notify sd;        /* systemd's $NOTIFY_SOCKET (node/sdnotify.h) */
    /* dc->board's: the config the snapshots read, the observers wrapped */
    const fed_node_config *nc;
    uint64_t started_wall_ms;
    fed_node_round_fn user_on_round;
    fed_node_delta_fn user_on_delta;
    void *user_observer;
};

static void on_signal(int sig)
{
    int saved = errno;
    unsigned char c = (unsigned char)sig;

    if (write(sig_pipe[1], &c, 1) < 0) {
        /* the pipe is full: a signal is pending already */
    }
    errno = saved;
}

static fed_err set_nonblock_cloexec(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
        return FED_ERR_IO;
    return FED_OK;
}

fed_err fed_node_daemon_signals(void)
{
    struct sigaction sa;

    if (sig_pipe[0] >= 0)
        return FED_OK;
    if (pipe(sig_pipe) < 0 || set_nonblock_cloexec(sig_pipe[0]) != FED_OK ||
        set_nonblock_cloexec(sig_pipe[1]) != FED_OK)
        return FED_ERR_IO;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0 ||
        sigaction(SIGHUP, &sa, NULL) < 0)
        return FED_ERR_IO;
    signal(SIGPIPE, SIG_IGN);
    return FED_OK;
}

/* ---- fed_env ---- */

static uint64_t env_now_ms(void *self)
{
    struct timespec ts;

    (void)self;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static uint64_t env_wall_s(void *self)
{
    (void)self;
    return (uint64_t)time(NULL);
}

static uint64_t env_wall_ms(void *self)
{
    struct timespec ts;

    (void)self;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static int env_send(void *self, const fed_peer_id *to, const uint8_t *frame, size_t len)
{
    fed_node_daemon *d = self;

    return fed_gossip_tx_send(d->tx, to->key, frame, len, ++d->token);
}

static int env_reply(void *self, fed_req *req, const uint8_t *frame, size_t len)
{
    fed_node_daemon *d = self;
    fed_gossip_tx_req *r = (fed_gossip_tx_req *)req;

    if (len == 0) {
        fed_gossip_tx_refuse(d->tx, r);
        return FED_OK;
    }
    return fed_gossip_tx_reply(d->tx, r, frame, len);
}

static int env_set_timer(void *self, uint64_t at_ms, uint32_t id)
{
    fed_node_daemon *d = self;

    for (int i = 0; i < d->ntimers; i++)
        if (d->timers[i].id == id) {
            d->timers[i].at_ms = at_ms;
            return FED_OK;
        }
    if (d->ntimers == DAEMON_MAX_TIMERS)
        return FED_ERR_FULL;
    d->timers[d->ntimers].id = id;
    d->timers[d->ntimers].at_ms = at_ms;
    d->ntimers++;
    return FED_OK;
}

static int env_cancel_timer(void *self, uint32_t id)
{
    fed_node_daemon *d = self;

    for (int i = 0; i < d->ntimers; i++)
        if (d->timers[i].id == id) {
            d->timers[i] = d->timers[--d->ntimers];
            return FED_OK;
        }
    return FED_ERR_NOTFOUND;
}

static void env_random(void *self, void *buf, size_t len)
{
    (void)self;
    randombytes_buf(buf, len);
}

static void job_task(fed_pool_task *task)
{
    daemon_job *w = (daemon_job *)task;
    fed_node_daemon *d = w->d;
    unsigned char c = 1;

    w->job->fn(w->job);
    pthread_mutex_lock(&d->mu);
    w->next = d->done;
    d->done = w;
    pthread_mutex_unlock(&d->mu);
    if (write(d->job_fd[1], &c, 1) < 0) {
        /* full: the loop has a wake-up pending already */
    }
}

static int env_submit(void *self, fed_job *job)
{
    fed_node_daemon *d = self;
    daemon_job *w = fed_calloc(1, sizeof *w);

    if (!w)
        return FED_ERR_NOMEM;
    w->task.fn = job_task;
    w->job = job;
    w->d = d;
    d->running++;
    if (job->loop_ok && d->running == 1) {
        /* here: a pool thread woken for it, and the loop woken again for
           its end, cost more than the job on a loaded machine; its end
           comes back through the job pipe all the same */
        job_task(&w->task);
        return FED_OK;
    }
    if (job->idle)
        fed_pool_submit_idle(d->pool, &w->task);
    else
        fed_pool_submit(d->pool, &w->task);
    return FED_OK;
}

static void env_charge(void *self, double flops)
{
    (void)self;
    (void)flops;
}

/* ---- the loop ---- */

static void fire_timers(fed_node_daemon *d)
{
    uint64_t now = env_now_ms(d);

    for (int i = 0; i < d->ntimers;) {
        if (d->timers[i].at_ms <= now) {
            uint32_t id = d->timers[i].id;
            fed_err e;

            d->timers[i] = d->timers[--d->ntimers];
            if ((e = fed_node_on_timer(d->node, id)) != FED_OK)
                fed_log(FED_LOG_DEBUG, "daemon: timer %u: %s", id, fed_strerror(e));
            i = 0; /* the node may have armed or cancelled timers */
            now = env_now_ms(d);
        } else {
            i++;
        }
    }
}

static int next_wait_ms(const fed_node_daemon *d)
{
    uint64_t now = env_now_ms((void *)d), wait = DAEMON_MAX_WAIT_MS;

    for (int i = 0; i < d->ntimers; i++) {
        uint64_t w = d->timers[i].at_ms > now ? d->timers[i].at_ms - now : 0;

        if (w < wait)
            wait = w;
    }
    return (int)wait;
}

/* Finished jobs back to the node, in the order they finished. */
static void drain_jobs(fed_node_daemon *d)
{
    unsigned char buf[64];
    daemon_job *list, *rev = NULL;

    while (read(d->job_fd[0], buf, sizeof buf) > 0) {
    }
    pthread_mutex_lock(&d->mu);
    list = d->done;
    d->done = NULL;
    pthread_mutex_unlock(&d->mu);
    while (list) {
        daemon_job *next = list->next;

        list->next = rev;
        rev = list;
        list = next;
    }
    while (rev) {
        daemon_job *w = rev;
        fed_err e;

        rev = w->next;
        d->running--;
        if (d->node && (e = fed_node_on_job_done(d->node, w->job)) != FED_OK)
            fed_log(FED_LOG_DEBUG, "daemon: job: %s", fed_strerror(e));
        fed_free(w);
    }
}

/* A request that got no reply. The node needs no word of it (fed_env: a
 * lost request is not reported; its timer asks again), but whoever runs the
 * daemon does: a reply over the frame limit means two ends configured
 * differently, and is said louder than a dropped link or a timeout. */
static void log_send_failed(const fed_gossip_tx_event *ev)
{
    fed_log(ev->reason == FED_ERR_FRAME_TOO_LARGE || ev->reason == FED_ERR_NOMEM ? FED_LOG_WARN
                                                                                 : FED_LOG_DEBUG,
            "daemon: a request to %02x%02x%02x%02x got no reply: %s (%s)", ev->peer[0],
            ev->peer[1], ev->peer[2], ev->peer[3], fed_strerror(ev->reason),
            fed_errname(ev->reason));
}

static void drain_frames(fed_node_daemon *d)
{
    fed_gossip_tx_event ev;

    while (fed_gossip_tx_next(d->tx, &ev) == FED_OK) {
        fed_err e = FED_OK;

        if (ev.kind == FED_GOSSIP_TX_REQUEST)
            e = fed_node_on_frame(d->node, (fed_req *)ev.req, ev.frame, ev.len);
        else if (ev.kind == FED_GOSSIP_TX_REPLY)
            e = fed_node_on_frame(d->node, NULL, ev.frame, ev.len);
        else if (ev.kind == FED_GOSSIP_TX_SEND_FAILED)
            log_send_failed(&ev);
        if (e != FED_OK)
            fed_log(FED_LOG_DEBUG, "daemon: frame: %s", fed_strerror(e));
        fed_gossip_tx_event_done(d->tx, &ev);
    }
}

static void reload_allow(fed_node_daemon *d)
{
    int line = 0;
    fed_err e;

    if (!d->dc->allow_path || !d->dc->allow)
        return;
    e = fed_crypto_allow_load(d->dc->allow, d->dc->allow_path, &line);
    if (e == FED_OK)
        fed_log(FED_LOG_INFO, "daemon: reloaded %s: %zu members", d->dc->allow_path,
                fed_crypto_allow_count(d->dc->allow));
    else if (line > 0) /* a line of it is wrong */
        fed_log(FED_LOG_ERROR, "daemon: %s:%d: %s; keeping the old allow-list",
                d->dc->allow_path, line, fed_strerror(e));
    else if (e != FED_ERR_NOTFOUND) /* a file gone is said by the allow-list's loader */
        fed_log(FED_LOG_ERROR, "daemon: %s: %s; keeping the old allow-list", d->dc->allow_path,
                fed_strerror(e));
}

/* 1 when a signal asks the loop to end. */
static int drain_signals(fed_node_daemon *d)
{
    unsigned char c;
    int stop = 0;

    while (read(sig_pipe[0], &c, 1) > 0) {
        if (c == SIGHUP)
            reload_allow(d);
        else
            stop = 1;
    }
    return stop;
}

static fed_err write_port(const fed_node_daemon *d)
{
    uint16_t port = 0;
    char tmp[4096];
    FILE *f;
    fed_err e;

    if (!d->dc->port_file)
        return FED_OK;
    if ((e = fed_gossip_tx_bound_port(d->tx, &port)) != FED_OK)
        return e;
    snprintf(tmp, sizeof tmp, "%s.tmp", d->dc->port_file);
    if (!(f = fopen(tmp, "w")))
        return FED_ERR_IO;
    fprintf(f, "%u\n", port);
    if (fclose(f) != 0 || rename(tmp, d->dc->port_file) != 0)
        return FED_ERR_IO;
    return FED_OK;
}

/* The transport's connection drops, beside the node's frame rejections. */
static void note_conn_drops(fed_node_daemon *d)
{
    fed_gossip_tx_counters c;

    fed_gossip_tx_get_counters(d->tx, &c);
    fed_node_set_conn_counters(d->node, c.conn_refused, c.conn_stalled, c.conn_handshake,
                               c.conn_dropped);
}

/* The loop's wait, cut short to ping systemd's watchdog in time. */
static int sd_wait_ms(const fed_node_daemon *d, int wait)
{
    uint32_t due = fed_sd_notify_due_ms(&d->sd, env_now_ms((void *)d));

    return due < (uint32_t)wait ? (int)due : wait;
}

/* READY=1 once the transport listens or dials and the node has started. */
static void sd_ready(fed_node_daemon *d)
{
    char msg[512];

    snprintf(msg, sizeof msg, "READY=1\nSTATUS=%s %s", d->dc->listen_url ? "listening on"
             : "dialing", d->dc->listen_url ? d->dc->listen_url
             : d->dc->peer_url ? d->dc->peer_url : "its peers");
    if (fed_sd_notify_send(&d->sd, msg) != FED_OK)
        fed_log(FED_LOG_WARN, "daemon: could not tell $NOTIFY_SOCKET it is ready");
    d->sd.last_ping_ms = env_now_ms(d);
}

/* STOPPING=1 as the daemon ends (a signal, its last round, a failure: with
 * why), before it waits for its jobs. */
static void sd_stopping(fed_node_daemon *d, fed_err e)
{
    char msg[256];

    snprintf(msg, sizeof msg, "STOPPING=1\nSTATUS=%s%s", e == FED_OK ? "stopping" : "failed: ",
             e == FED_OK ? "" : fed_strerror(e));
    (void)fed_sd_notify_send(&d->sd, msg);
}

/* ---- the snapshot for --http (dc->board) ---- */

static void publish(fed_node_daemon *d)
{
    fed_node_snap_src src = {d->node, d->nc, d->dc->peer_url, d->started_wall_ms};

    if (d->dc->board && d->node && fed_node_snap_update(d->dc->board, &src) != FED_OK)
        fed_log(FED_LOG_DEBUG, "daemon: no memory for the status snapshot; the last one stays");
}

static void on_round_snap(void *ctx, const fed_node *n, const fed_node_round_info *r)
{
    fed_node_daemon *d = ctx;

    fed_node_snap_note_round(d->dc->board, r);
    if (d->user_on_round)
        d->user_on_round(d->user_observer, n, r);
}

static void on_delta_fwd(void *ctx, const fed_node *n, uint64_t round, uint64_t base_round,
                         const uint8_t key[32], const float *delta, size_t nparams,
                         uint64_t samples)
{
    fed_node_daemon *d = ctx;

    d->user_on_delta(d->user_observer, n, round, base_round, key, delta, nparams, samples);
}

/* The observers go through the daemon, which counts the rounds for the
 * snapshot, then calls the caller's. */
static void wrap_observers(fed_node_daemon *d, fed_node_config *nc)
{
    d->nc = nc;
    d->started_wall_ms = env_wall_ms(d);
    if (!d->dc->board)
        return;
    d->user_on_round = nc->on_round;
    d->user_on_delta = nc->on_delta;
    d->user_observer = nc->observer;
    nc->on_round = on_round_snap;
    nc->on_delta = nc->on_delta ? on_delta_fwd : NULL;
    nc->observer = d;
}

static fed_err loop(fed_node_daemon *d)
{
    uint64_t finished_at = 0;
    fed_err e;
    struct pollfd pf[3] = {
        {.fd = fed_gossip_tx_wake_fd(d->tx), .events = POLLIN},
        {.fd = d->job_fd[0], .events = POLLIN},
        {.fd = sig_pipe[0], .events = POLLIN},
    };

    for (;;) {
        int rc;

        if ((e = fed_node_failed(d->node)) != FED_OK) { /* before waiting on it */
            fed_log(FED_LOG_ERROR, "daemon: the node cannot go on (%s): stopping",
                    fed_strerror(e));
            return e;
        }
        rc = poll(pf, sig_pipe[0] >= 0 ? 3 : 2, sd_wait_ms(d, next_wait_ms(d)));
        if (rc < 0 && errno != EINTR)
            return FED_ERR_IO;
        if (sig_pipe[0] >= 0 && drain_signals(d)) {
            fed_log(FED_LOG_INFO, "daemon: stopping on a signal");
            return FED_OK;
        }
        (void)fed_sd_notify_watchdog(&d->sd, env_now_ms(d)); /* the loop is alive */
        drain_jobs(d);
        drain_frames(d);
        fire_timers(d);
        note_conn_drops(d);
        publish(d);
        if (fed_node_finished(d->node)) {
            /* a client lingers only to be seen finished (--http's board) */
            if (fed_node_get_role(d->node) == FED_NODE_CLIENT && !d->dc->board)
                return FED_OK;
            if (!finished_at)
                finished_at = env_now_ms(d);
            if (env_now_ms(d) >= finished_at + d->dc->linger_ms)
                return FED_OK;
        }
    }
}

/* Jobs still on the pool finish before the node that owns them goes. */
static void wait_jobs(fed_node_daemon *d)
{
    while (d->running > 0) {
        struct pollfd pf = {.fd = d->job_fd[0], .events = POLLIN};

        (void)poll(&pf, 1, 100);
        drain_jobs(d);
    }
}

static fed_err open_transport(fed_node_daemon *d, const fed_node_config *nc)
{
    const fed_node_daemon_cfg *dc = d->dc;
    fed_gossip_tx_cfg tc;
    fed_err e;

    fed_gossip_tx_cfg_default(&tc);
    tc.listen_url = dc->listen_url;
    tc.max_frame = nc->transfer.wire.max_frame ? nc->transfer.wire.max_frame : FED_WIRE_MAX_FRAME_DEFAULT;
    tc.recv_max = fed_node_recv_limit(nc);
    tc.max_conns = dc->max_conns;
    tc.stall_ms = dc->conn_stall_ms;
    if (dc->recv_contexts)
        tc.recv_contexts = dc->recv_contexts;
    if ((e = fed_gossip_tx_open(&tc, &d->tx)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "daemon: cannot listen on %s: %s",
                dc->listen_url ? dc->listen_url : "(none)", fed_strerror(e));
        return e;
    }
    if (dc->listen_url) {
        fed_log(FED_LOG_INFO,
                "daemon: listening: requests up to %zu bytes, %u connections at once, "
                "a silent one closed after %u ms: at most %.1f MiB held for strangers",
                tc.recv_max, dc->max_conns ? dc->max_conns : FED_GOSSIP_TX_MAX_CONNS_DEFAULT,
                dc->conn_stall_ms ? dc->conn_stall_ms : FED_GOSSIP_TX_STALL_MS_DEFAULT,
                (double)(dc->max_conns ? dc->max_conns : FED_GOSSIP_TX_MAX_CONNS_DEFAULT) *
                    (double)(tc.recv_max + FED_GOSSIP_TX_RECV_MARGIN) / 1048576.0);
        if ((e = write_port(d)) != FED_OK)
            return e;
    }
    if (dc->peer_url &&
        (e = fed_gossip_tx_add_peer(d->tx, nc->client.aggregator.key, dc->peer_url)) != FED_OK) {
        fed_log(FED_LOG_ERROR, "daemon: cannot dial %s: %s", dc->peer_url, fed_strerror(e));
        return e;
    }
    for (size_t i = 0; dc->peers && i < fed_gossip_peers_count(dc->peers); i++) {
        const uint8_t *key;
        const char *url;

        fed_gossip_peers_get(dc->peers, i, &key, &url);
        if (!memcmp(key, fed_crypto_arena_pubkey(nc->arena), 32))
            continue; /* ourselves */
        if ((e = fed_gossip_tx_add_peer(d->tx, key, url)) != FED_OK) {
            fed_log(FED_LOG_ERROR, "daemon: cannot dial %s: %s", url, fed_strerror(e));
            return e;
        }
    }
    return FED_OK;
}

/* A peer learned where key listens (a signed PEERS entry): dial it there. */
static void on_address(void *ctx, const uint8_t key[32], const char *url)
{
    fed_node_daemon *d = ctx;
    fed_err e = fed_gossip_tx_add_peer(d->tx, key, url);

    if (e != FED_OK)
        fed_log(FED_LOG_WARN, "daemon: cannot dial %s: %s", url, fed_strerror(e));
    else
        fed_log(FED_LOG_INFO, "daemon: dialing %s, learned from a peer", url);
}

/* Every round brings and drops buffers of a frame's size: frames received,
 * their copies and decoded vectors, the frames sealed for sending. glibc
 * serves blocks over its mmap threshold (128 KiB, raised to the largest
 * block freed) from fresh mappings and gives the kernel back whatever lies
 * free past its trim threshold, so each round paid again a page fault per
 * 4 KiB to have that memory back, zeroed: in the consortium bench, 28,000 in
 * the aggregator's ten rounds (2.3 us each, measured). So blocks up to the
 * node's own largest frame (fed_node_recv_limit: sized by its model, capped
 * at glibc's 32 MiB ceiling) come from the heap; what a stranger sends
 * beyond that is mapped and unmapped, never kept. What stays free for the
 * next round is what a round holds, not one frame: an aggregator's or a
 * peer's round holds a frame and its decoded vector from each member (its
 * pool's threads decode them, each in its own arena), a client's its MODEL,
 * the decoded global, its delta and the sealed frame; up to 32 MiB, the
 * retention before the frame bound (a trim threshold of two frames, 4 MB
 * for mlp:256,128, cost that aggregator 16,000 more page faults in ten
 * rounds and about 8% of its CPU). Set once the data is loaded: the large
 * blocks of loading still go back. Process-wide and kept to the exit: the
 * daemon is what the process runs from here on. */
void fed_node_daemon_heap_bounds(const fed_node_config *nc, size_t *mmap_at, size_t *trim_at)
{
    const size_t ceiling = (size_t)32 << 20, slack = (size_t)64 << 10;
    size_t frame = fed_node_recv_limit(nc);
    size_t at = frame < ceiling - slack ? frame + slack : ceiling; /* and bookkeeping */
    size_t held = nc->role == FED_NODE_CLIENT || !nc->allow
                      ? 4
                      : 2 * (fed_crypto_allow_count(nc->allow) + 1);
    size_t trim = at <= ceiling / held ? held * at : ceiling;

    *mmap_at = at;
    *trim_at = trim > 2 * at ? trim : 2 * at;
}

static void keep_round_buffers(const fed_node_config *nc)
{
#if defined(__GLIBC__)
    size_t at, trim;

    fed_node_daemon_heap_bounds(nc, &at, &trim);
    if (!mallopt(M_MMAP_THRESHOLD, (int)at) || !mallopt(M_TRIM_THRESHOLD, (int)trim))
        fed_log(FED_LOG_DEBUG, "daemon: malloc keeps its defaults");
#else
    (void)nc;
#endif
}

/* What the process used, for whoever runs it (benchmarks read this line
 * rather than polling /proc, which costs the job CPU). */
static void log_usage(void)
{
    struct rusage ru;

    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return;
    fed_log(FED_LOG_INFO,
            "daemon: done: peak RSS %.1f MiB, CPU %.3f s (user %.3f, system %.3f), "
            "page faults %ld, context switches %ld (involuntary %ld)",
            (double)ru.ru_maxrss / 1024.0,
            (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6,
            (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6,
            (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6,
            ru.ru_minflt + ru.ru_majflt, ru.ru_nvcsw + ru.ru_nivcsw, ru.ru_nivcsw);
}

fed_err fed_node_daemon_run(const fed_node_daemon_cfg *dc, const fed_node_config *nc_in)
{
    fed_node_config ncc = *nc_in, *nc = &ncc;
    fed_node_daemon d;
    fed_env env = {
        .now_ms = env_now_ms,
        .wall_s = env_wall_s,
        .wall_ms = env_wall_ms,
        .send = env_send,
        .reply = env_reply,
        .set_timer = env_set_timer,
        .cancel_timer = env_cancel_timer,
        .random = env_random,
        .submit = env_submit,
        .charge = env_charge,
    };
    fed_err e;

    if (nc->hooks || nc->transfer.wire.hooks) { /* the simulator's and the tests' seams, never a
                                          process's: misbehaviours, unsealed frames */
        fed_log(FED_LOG_ERROR, "daemon: a node config with test hooks (node/test_hooks.h or "
                               "gossip/wire_hooks.h) does not run as a daemon");
        return FED_ERR_INVAL;
    }
    memset(&d, 0, sizeof d);
    nc->peer.on_address = on_address;
    nc->peer.address_ctx = &d;
    d.dc = dc;
    d.pool = nc->pool;
    d.job_fd[0] = d.job_fd[1] = -1;
    env.self = &d;
    wrap_observers(&d, nc);
    if (!d.pool)
        return FED_ERR_INVAL;
    keep_round_buffers(nc);
    if (pthread_mutex_init(&d.mu, NULL) != 0)
        return FED_ERR_NOMEM;
    if ((e = fed_sd_notify_open(&d.sd)) != FED_OK) /* a bad one is said, not fatal */
        fed_log(FED_LOG_WARN, "daemon: $NOTIFY_SOCKET: %s; systemd is not told", fed_strerror(e));
    if (pipe(d.job_fd) < 0 || set_nonblock_cloexec(d.job_fd[0]) != FED_OK ||
        set_nonblock_cloexec(d.job_fd[1]) != FED_OK) {
        e = FED_ERR_IO;
        goto out;
    }
    if ((e = open_transport(&d, nc)) != FED_OK)
        goto out;
    if ((e = fed_node_new(nc, &env, &d.node)) != FED_OK ||
        (e = fed_node_start(d.node)) != FED_OK)
        goto out;
    sd_ready(&d);
    publish(&d);
    e = loop(&d);
out:
    sd_stopping(&d, e);
    wait_jobs(&d);
    if (d.node && e == FED_OK) {
        fed_err stop = fed_node_stop(d.node);

        (void)stop; /* logged */
    }
    fed_node_free(d.node);
    fed_gossip_tx_close(d.tx);
    if (d.job_fd[0] >= 0)
        close(d.job_fd[0]);
    if (d.job_fd[1] >= 0)
        close(d.job_fd[1]);
    pthread_mutex_destroy(&d.mu);
    fed_sd_notify_close(&d.sd);
    log_usage();
    return e;
}
