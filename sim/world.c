/* world.c - the virtual-time world behind sim/world.h: a binary heap of
 * events ordered by (time, class, key), nodes with their fed_env, timers,
 * pending requests, jobs on the pool completed in a fixed order, the network
 * model and crash/restart. It owns queued frames, requests and job wrappers,
 * never the nodes' ctx or jobs; it must never let wall-clock order leak in. */
#include "sim/world.h"

#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/comm.h"
#include "core/log.h"
#include "core/rng.h"

enum { EV_START = 1, EV_FRAME, EV_TIMER, EV_JOB, EV_CRASH, EV_RESTART };
enum { CLS_JOB = 0, CLS_OTHER = 1 }; /* at equal time, job completions first */

#define NO_SLOT UINT32_MAX

/* Who queued an event, as its tie-break key: a node (its index), or the
 * world's schedule for a node (ORIGIN_SCHED + the node's index). */
#define ORIGIN_SCHED (1ull << 32)

typedef struct sim_event {
    uint64_t t_us;
    uint64_t k1, k2; /* jobs: (node, submit seq); others: (origin, origin's seq) */
    uint8_t cls, type;
    uint32_t node, node_inc; /* target and its incarnation when queued */
    uint32_t timer_id;
    uint64_t timer_gen;
    void *ptr; /* EV_FRAME: sim_frame (owned); EV_JOB: sim_jobw (node's list) */
} sim_event;

typedef struct sim_frame {
    int is_reply;
    uint32_t src, src_inc; /* sender and its incarnation when sent */
    size_t len;
    uint8_t data[];
} sim_frame;

struct fed_req {
    uint32_t src, src_inc, dst;
    fed_req *prev, *next; /* in dst's pending list */
};

typedef struct sim_jobw {
    fed_pool_task task; /* first: the pool hands it back */
    fed_sim_world *w;
    fed_job *job;
    int done; /* under w->mu */
    uint64_t seq;
    struct sim_jobw *prev, *next; /* in the node's list */
} sim_jobw;

typedef struct sim_timer {
    uint32_t id;
    uint64_t gen;
} sim_timer;

typedef struct sim_node {
    fed_sim_world *w;
    uint32_t index;
    fed_peer_id id;
    fed_sim_node_ops ops;
    void *ctx;
    fed_env env;
    fed_rng rng;
    fed_rng net; /* its frames' loss and jitter draws */
    uint64_t ev_seq;    /* events it queued (frames, timers): their tie-break */
    uint64_t sched_seq; /* events the world scheduled for it */
    int local;          /* run by this rank; else a shadow: id, up, incarnation */
    int up;
    uint32_t inc;
    uint64_t busy_us;
    double slowdown;
    uint64_t job_seq;
    sim_timer *timers;
    size_t ntimers, cap_timers;
    fed_req *reqs;
    sim_jobw *jobs;
} sim_node;

typedef struct sim_partition {
    uint32_t *group_of;
    size_t n;
    uint64_t start_us, end_us;
} sim_partition;

typedef struct sim_loss_window {
    double loss;
    uint64_t start_us, end_us;
} sim_loss_window;

typedef struct sim_link_override {
    uint32_t from, to;
    fed_sim_link link;
} sim_link_override;

typedef struct sim_bytes_mark {
    uint64_t t_us, bytes; /* bytes sent at times <= t_us */
} sim_bytes_mark;

struct fed_sim_world {
    fed_sim_config cfg;
    uint64_t now_us;
    uint64_t timer_gen;
    sim_event *heap;
    size_t nheap, cap_heap;
    sim_node **nodes;
    size_t nnodes, cap_nodes;
    uint32_t *slots; /* peer id hash -> node index, open addressing */
    size_t nslots;
    sim_partition *parts;
    size_t nparts;
    sim_loss_window *lossw;
    size_t nlossw;
    sim_link_override *links;
    size_t nlinks;
    fed_sim_counters c;
    sim_bytes_mark *marks; /* bytes sent by time, since the last forget */
    size_t nmarks, cap_marks;
    uint64_t bytes_base;   /* bytes sent before marks[0] */
    uint64_t hash;
    fed_sim_trace_fn trace;
    void *trace_ctx;
    int rank, nranks;
    uint8_t **out;         /* (nranks) frames for each rank's nodes, this window */
    size_t *out_len, *out_cap;
    uint64_t out_min;      /* the earliest arrival in out */
    fed_sim_send_filter send_filter;
    void *send_filter_ctx;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

/* ------------------------------------------------------------- helpers -- */

static fed_err grow(void **p, size_t *cap, size_t need, size_t elem)
{
    size_t ncap = *cap ? *cap : 16;
    int ok = 1;
    void *np;

    if (need <= *cap)
        return FED_OK;
    while (ncap < need)
        ncap *= 2;
    size_t bytes = fed_mul_size(ncap, elem, &ok);
    if (!ok)
        return FED_ERR_NOMEM;
    np = fed_realloc(*p, bytes);
    if (!np)
        return FED_ERR_NOMEM;
    *p = np;
    *cap = ncap;
    return FED_OK;
}

static uint64_t fnv_bytes(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;

    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
    uint8_t b[8];

    fed_put_u64le(b, v);
    return fnv_bytes(h, b, 8);
}

static void record(fed_sim_world *w, fed_sim_event_kind kind, uint32_t node, uint64_t a,
                   uint64_t b, const uint8_t *bytes, size_t len)
{
    uint64_t h = w->hash;

    h = fnv_u64(h, w->now_us);
    h = fnv_u64(h, (uint64_t)kind);
    h = fnv_u64(h, node);
    h = fnv_u64(h, a);
    h = fnv_u64(h, b);
    w->hash = fnv_bytes(h, bytes, len);
    w->c.events++;
    if (w->trace)
        w->trace(w->trace_ctx, w->now_us, kind, node, a, b);
}

static uint64_t ms_to_us(uint64_t ms)
{
    return ms > UINT64_MAX / 1000 ? UINT64_MAX : ms * 1000;
}

/* ---------------------------------------------------------------- heap -- */

static int ev_less(const sim_event *a, const sim_event *b)
{
    if (a->t_us != b->t_us)
        return a->t_us < b->t_us;
    if (a->cls != b->cls)
        return a->cls < b->cls;
    if (a->k1 != b->k1)
        return a->k1 < b->k1;
    return a->k2 < b->k2;
}

static fed_err heap_push(fed_sim_world *w, sim_event *ev)
{
    fed_err e = grow((void **)&w->heap, &w->cap_heap, w->nheap + 1, sizeof(*w->heap));
    size_t i;

    if (e)
        return e;
    i = w->nheap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;

        if (!ev_less(ev, &w->heap[parent]))
            break;
        w->heap[i] = w->heap[parent];
        i = parent;
    }
    w->heap[i] = *ev;
    return FED_OK;
}

static void heap_pop(fed_sim_world *w, sim_event *out)
{
    sim_event last;
    size_t i = 0;

    *out = w->heap[0];
    last = w->heap[--w->nheap];
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const sim_event *best = &last;

        if (l < w->nheap && ev_less(&w->heap[l], best)) {
            m = l;
            best = &w->heap[l];
        }
        if (r < w->nheap && ev_less(&w->heap[r], best))
            m = r;
        if (m == i)
            break;
        w->heap[i] = w->heap[m];
        i = m;
    }
    if (w->nheap > 0)
        w->heap[i] = last;
}

/* ------------------------------------------------------ peer id lookup -- */

static size_t id_hash(const fed_peer_id *id)
{
    return (size_t)fnv_bytes(14695981039346656037ull, id->key, sizeof(id->key));
}

static uint32_t lookup(const fed_sim_world *w, const fed_peer_id *id)
{
    if (!w->nslots)
        return NO_SLOT;
    for (size_t i = id_hash(id) & (w->nslots - 1);; i = (i + 1) & (w->nslots - 1)) {
        uint32_t s = w->slots[i];

        if (s == NO_SLOT)
            return NO_SLOT;
        if (!memcmp(w->nodes[s]->id.key, id->key, sizeof(id->key)))
            return s;
    }
}

static void slot_insert(uint32_t *slots, size_t nslots, const fed_peer_id *id, uint32_t index)
{
    size_t i = id_hash(id) & (nslots - 1);

    while (slots[i] != NO_SLOT)
        i = (i + 1) & (nslots - 1);
    slots[i] = index;
}

/* Keeps the table at most half full; rebuilds it when it doubles. */
static fed_err slots_reserve(fed_sim_world *w, size_t count)
{
    size_t n = w->nslots ? w->nslots : 64;
    uint32_t *s;

    while (n < 2 * count)
        n *= 2;
    if (n == w->nslots)
        return FED_OK;
    s = fed_malloc(n * sizeof(*s));
    if (!s)
        return FED_ERR_NOMEM;
    for (size_t i = 0; i < n; i++)
        s[i] = NO_SLOT;
    for (size_t i = 0; i < w->nnodes; i++)
        slot_insert(s, n, &w->nodes[i]->id, (uint32_t)i);
    fed_free(w->slots);
    w->slots = s;
    w->nslots = n;
    return FED_OK;
}

/* ------------------------------------------------------------- network -- */

static const fed_sim_link *link_for(const fed_sim_world *w, uint32_t from, uint32_t to)
{
    for (size_t i = 0; i < w->nlinks; i++)
        if (w->links[i].from == from && w->links[i].to == to)
            return &w->links[i].link;
    return &w->cfg.link;
}

static int partitioned(const fed_sim_world *w, uint32_t a, uint32_t b)
{
    for (size_t i = 0; i < w->nparts; i++) {
        const sim_partition *p = &w->parts[i];

        if (w->now_us < p->start_us || w->now_us >= p->end_us)
            continue;
        if (a < p->n && b < p->n && p->group_of[a] != p->group_of[b])
            return 1;
    }
    return 0;
}

/* The loss now: the link's, or a window's when it is higher. */
static double window_loss(const fed_sim_world *w, double link_loss)
{
    double p = link_loss;

    for (size_t i = 0; i < w->nlossw; i++)
        if (w->now_us >= w->lossw[i].start_us && w->now_us < w->lossw[i].end_us &&
            w->lossw[i].loss > p)
            p = w->lossw[i].loss;
    return p;
}

/* Counts a frame's bytes as sent now, and marks them by time. */
static void count_sent(fed_sim_world *w, size_t len)
{
    w->c.frames_sent++;
    w->c.bytes_sent += len;
    if (w->nmarks && w->marks[w->nmarks - 1].t_us == w->now_us) {
        w->marks[w->nmarks - 1].bytes = w->c.bytes_sent;
        return;
    }
    if (grow((void **)&w->marks, &w->cap_marks, w->nmarks + 1, sizeof(*w->marks)) != FED_OK) {
        /* no memory for the mark: the bytes count at the next one */
        return;
    }
    w->marks[w->nmarks++] = (sim_bytes_mark){w->now_us, w->c.bytes_sent};
}

static void count_drop(fed_sim_world *w, size_t len, uint64_t *why)
{
    count_sent(w, len);
    w->c.frames_dropped++;
    (*why)++;
}

static uint64_t link_delay_us(fed_rng *net, const fed_sim_link *l, size_t len)
{
    double ms = l->latency_ms;

    if (l->jitter_ms > 0)
        ms += l->jitter_ms * fed_rng_normal(net);
    if (ms < l->floor_ms)
        ms = l->floor_ms;
    if (ms < 0)
        ms = 0;
    if (l->bytes_per_ms > 0)
        ms += (double)len / l->bytes_per_ms;
    return (uint64_t)llround(ms * 1000.0);
}

/* The least delay a frame on this link can have, in whole microseconds. */
static uint64_t link_floor_us(const fed_sim_link *l)
{
    double ms = l->jitter_ms > 0 ? l->floor_ms
                                 : (l->latency_ms > l->floor_ms ? l->latency_ms : l->floor_ms);

    return ms > 0 ? (uint64_t)llround(ms * 1000.0) : 0;
}

/* A frame for a node another rank runs, as it crosses at the window's end:
 *   0 t_us u64 | 8 origin u64 | 16 origin seq u64 | 24 dst u32 | 28 dst_inc u32
 *   32 src u32 | 36 src_inc u32 | 40 is_reply u8 | 41 len u64 | 49 the frame */
#define XFRAME_HEAD 49

static fed_err outbox_put(fed_sim_world *w, sim_node *src, uint32_t dst, uint32_t dst_inc,
                          int is_reply, const uint8_t *frame, size_t len, uint64_t t_us)
{
    int k = (int)(dst % (uint32_t)w->nranks);
    size_t need = w->out_len[k] + XFRAME_HEAD + len;
    uint8_t *p;
    fed_err e;

    if (need < len)
        return FED_ERR_TOO_LARGE;
    if ((e = grow((void **)&w->out[k], &w->out_cap[k], need, 1)) != FED_OK)
        return e;
    p = w->out[k] + w->out_len[k];
    fed_put_u64le(p, t_us);
    fed_put_u64le(p + 8, src->index);
    fed_put_u64le(p + 16, src->ev_seq++);
    fed_put_u32le(p + 24, dst);
    fed_put_u32le(p + 28, dst_inc);
    fed_put_u32le(p + 32, src->index);
    fed_put_u32le(p + 36, src->inc);
    p[40] = (uint8_t)is_reply;
    fed_put_u64le(p + 41, (uint64_t)len);
    if (len)
        memcpy(p + XFRAME_HEAD, frame, len);
    w->out_len[k] = need;
    if (t_us < w->out_min)
        w->out_min = t_us;
    count_sent(w, len);
    return FED_OK;
}

/* What the other ranks sent this one's nodes, into the heap: the keys came
 * with them, so the order is the one a single process would keep. */
static fed_err inbox_take(fed_sim_world *w, const uint8_t *buf, size_t len)
{
    size_t off = 0;

    while (off < len) {
        const uint8_t *p = buf + off;
        sim_event ev = {0};
        sim_frame *f;
        uint64_t flen;
        fed_err e;

        if (len - off < XFRAME_HEAD)
            return FED_ERR_FRAME_TRUNCATED;
        flen = fed_get_u64le(p + 41);
        if (flen > len - off - XFRAME_HEAD)
            return FED_ERR_FRAME_TRUNCATED;
        ev.t_us = fed_get_u64le(p);
        ev.cls = CLS_OTHER;
        ev.k1 = fed_get_u64le(p + 8);
        ev.k2 = fed_get_u64le(p + 16);
        ev.type = EV_FRAME;
        ev.node = fed_get_u32le(p + 24);
        ev.node_inc = fed_get_u32le(p + 28);
        if (ev.node >= w->nnodes || !w->nodes[ev.node]->local ||
            fed_get_u32le(p + 32) >= w->nnodes || ev.t_us < w->now_us)
            return FED_ERR_FORMAT;
        if (!(f = fed_malloc(sizeof(*f) + flen)))
            return FED_ERR_NOMEM;
        f->is_reply = p[40] != 0;
        f->src = fed_get_u32le(p + 32);
        f->src_inc = fed_get_u32le(p + 36);
        f->len = (size_t)flen;
        if (flen)
            memcpy(f->data, p + XFRAME_HEAD, flen);
        ev.ptr = f;
        if ((e = heap_push(w, &ev)) != FED_OK) {
            fed_free(f);
            return e;
        }
        off += XFRAME_HEAD + (size_t)flen;
    }
    return FED_OK;
}

/* A frame from src to dst (incarnation dst_inc): lost, cut off, or queued. */
static fed_err net_send(fed_sim_world *w, sim_node *src, uint32_t dst, uint32_t dst_inc,
                        int is_reply, const uint8_t *frame, size_t len)
{
    const fed_sim_link *l = link_for(w, src->index, dst);
    sim_event ev = {0};
    sim_frame *f;
    double loss;
    fed_err e;

    if (partitioned(w, src->index, dst)) {
        count_drop(w, len, &w->c.dropped_partition);
        return FED_OK;
    }
    loss = window_loss(w, l->loss);
    if (loss > 0 && fed_rng_uniform(&src->net) < loss) {
        count_drop(w, len, &w->c.dropped_loss);
        return FED_OK;
    }
    if (!w->nodes[dst]->local)
        return outbox_put(w, src, dst, dst_inc, is_reply, frame, len,
                          w->now_us + link_delay_us(&src->net, l, len));
    f = fed_malloc(sizeof(*f) + len);
    if (!f)
        return FED_ERR_NOMEM;
    f->is_reply = is_reply;
    f->src = src->index;
    f->src_inc = src->inc;
    f->len = len;
    if (len)
        memcpy(f->data, frame, len);
    ev.t_us = w->now_us + link_delay_us(&src->net, l, len);
    ev.cls = CLS_OTHER;
    ev.k1 = src->index;
    ev.k2 = src->ev_seq++;
    ev.type = EV_FRAME;
    ev.node = dst;
    ev.node_inc = dst_inc;
    ev.ptr = f;
    e = heap_push(w, &ev);
    if (e) {
        fed_free(f);
        return e;
    }
    count_sent(w, len);
    return FED_OK;
}

/* ----------------------------------------------------------------- env -- */

static uint64_t env_now_ms(void *self)
{
    sim_node *n = self;

    return n->w->now_us / 1000;
}

static uint64_t env_wall_s(void *self)
{
    sim_node *n = self;

    return n->w->cfg.epoch_base_s + n->w->now_us / 1000000;
}

static uint64_t env_wall_ms(void *self)
{
    sim_node *n = self;

    return n->w->cfg.epoch_base_s * 1000u + n->w->now_us / 1000;
}

static int env_send(void *self, const fed_peer_id *to, const uint8_t *frame, size_t len)
{
    sim_node *n = self;
    fed_sim_world *w = n->w;
    uint32_t dst;

    if (!n->up)
        return FED_ERR_CLOSED;
    if (!to || (!frame && len))
        return FED_ERR_INVAL;
    dst = lookup(w, to);
    if (dst == NO_SLOT)
        return FED_ERR_NOTFOUND;
    if (w->send_filter && w->send_filter(w->send_filter_ctx, n->index, frame, len)) {
        count_drop(w, len, &w->c.dropped_down);
        return FED_OK;
    }
    if (!w->nodes[dst]->up) {
        count_drop(w, len, &w->c.dropped_down);
        return FED_OK;
    }
    return net_send(w, n, dst, w->nodes[dst]->inc, 0, frame, len);
}

static void req_unlink(sim_node *n, fed_req *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        n->reqs = r->next;
    if (r->next)
        r->next->prev = r->prev;
}

static int env_reply(void *self, fed_req *req, const uint8_t *frame, size_t len)
{
    sim_node *n = self;
    fed_sim_world *w = n->w;
    uint32_t src, src_inc;

    if (!req || (!frame && len))
        return FED_ERR_INVAL;
    assert(req->dst == n->index && "reply on another node's request");
    src = req->src;
    src_inc = req->src_inc;
    req_unlink(n, req);
    fed_free(req);
    if (!n->up)
        return FED_ERR_CLOSED;
    if (len == 0) { /* refused: no answer, the requester times out */
        w->c.requests_refused++;
        return FED_OK;
    }
    if (!w->nodes[src]->up || w->nodes[src]->inc != src_inc) {
        count_drop(w, len, &w->c.dropped_down);
        return FED_OK;
    }
    return net_send(w, n, src, src_inc, 1, frame, len);
}

static sim_timer *timer_find(sim_node *n, uint32_t id)
{
    for (size_t i = 0; i < n->ntimers; i++)
        if (n->timers[i].id == id)
            return &n->timers[i];
    return NULL;
}

static void timer_remove(sim_node *n, sim_timer *t)
{
    *t = n->timers[--n->ntimers];
}

static int env_set_timer(void *self, uint64_t at_ms, uint32_t timer_id)
{
    sim_node *n = self;
    fed_sim_world *w = n->w;
    sim_timer *t = timer_find(n, timer_id);
    uint64_t at = ms_to_us(at_ms);
    sim_event ev = {0};
    fed_err e;

    if (!n->up)
        return FED_ERR_CLOSED;
    if (!t) {
        e = grow((void **)&n->timers, &n->cap_timers, n->ntimers + 1, sizeof(*n->timers));
        if (e)
            return e;
    }
    ev.t_us = at < w->now_us ? w->now_us : at;
    ev.cls = CLS_OTHER;
    ev.k1 = n->index;
    ev.k2 = n->ev_seq++;
    ev.type = EV_TIMER;
    ev.node = n->index;
    ev.node_inc = n->inc;
    ev.timer_id = timer_id;
    ev.timer_gen = ++w->timer_gen;
    e = heap_push(w, &ev);
    if (e)
        return e;
    if (!t) {
        t = &n->timers[n->ntimers++];
        t->id = timer_id;
    }
    t->gen = ev.timer_gen;
    return FED_OK;
}

static int env_cancel_timer(void *self, uint32_t timer_id)
{
    sim_node *n = self;
    sim_timer *t = timer_find(n, timer_id);

    if (!t)
        return FED_ERR_NOTFOUND;
    timer_remove(n, t);
    return FED_OK;
}

static void env_random(void *self, void *buf, size_t len)
{
    sim_node *n = self;

    fed_rng_fill(&n->rng, buf, len);
}

static void job_task(fed_pool_task *task)
{
    sim_jobw *jw = (sim_jobw *)task;
    fed_sim_world *w = jw->w;

    jw->job->fn(jw->job);
    pthread_mutex_lock(&w->mu);
    jw->done = 1;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int env_submit(void *self, fed_job *job)
{
    sim_node *n = self;
    fed_sim_world *w = n->w;
    sim_event ev = {0};
    sim_jobw *jw;
    fed_err e;

    if (!job || !job->fn)
        return FED_ERR_INVAL;
    if (!n->up)
        return FED_ERR_CLOSED;
    jw = fed_calloc(1, sizeof(*jw));
    if (!jw)
        return FED_ERR_NOMEM;
    jw->task.fn = job_task;
    jw->w = w;
    jw->job = job;
    jw->seq = n->job_seq++;
    ev.t_us = n->busy_us > w->now_us ? n->busy_us : w->now_us;
    ev.cls = CLS_JOB;
    ev.k1 = n->index;
    ev.k2 = jw->seq;
    ev.type = EV_JOB;
    ev.node = n->index;
    ev.node_inc = n->inc;
    ev.ptr = jw;
    e = heap_push(w, &ev);
    if (e) {
        fed_free(jw);
        return e;
    }
    jw->next = n->jobs;
    if (n->jobs)
        n->jobs->prev = jw;
    n->jobs = jw;
    if (w->cfg.pool)
        fed_pool_submit(w->cfg.pool, &jw->task);
    else
        job_task(&jw->task);
    return FED_OK;
}

static void env_charge(void *self, double flops)
{
    sim_node *n = self;
    fed_sim_world *w = n->w;
    double ms;

    if (!(flops > 0))
        return;
    ms = flops / w->cfg.flops_per_ms * n->slowdown;
    if (n->busy_us < w->now_us)
        n->busy_us = w->now_us;
    n->busy_us += (uint64_t)llround(ms * 1000.0);
}

/* --------------------------------------------------------------- nodes -- */

static void job_wait_unlink(fed_sim_world *w, sim_node *n, sim_jobw *jw)
{
    pthread_mutex_lock(&w->mu);
    while (!jw->done)
        pthread_cond_wait(&w->cv, &w->mu);
    pthread_mutex_unlock(&w->mu);
    if (jw->prev)
        jw->prev->next = jw->next;
    else
        n->jobs = jw->next;
    if (jw->next)
        jw->next->prev = jw->prev;
}

/* Waits for every job the node submitted and frees their wrappers and its
 * pending requests (the jobs themselves are the node's). */
static void node_drop_state(fed_sim_world *w, sim_node *n)
{
    while (n->jobs) {
        sim_jobw *jw = n->jobs;

        job_wait_unlink(w, n, jw);
        fed_free(jw);
    }
    while (n->reqs) {
        fed_req *r = n->reqs;

        req_unlink(n, r);
        fed_free(r);
    }
    n->ntimers = 0;
}

static void node_free(fed_sim_world *w, sim_node *n)
{
    if (!n)
        return;
    node_drop_state(w, n);
    fed_free(n->timers);
    fed_free(n);
}

static sim_node *node_at(const fed_sim_world *w, uint32_t node)
{
    assert(node < w->nnodes && "no such node");
    return w->nodes[node];
}

static void count_error(fed_sim_world *w, int rc)
{
    if (rc != 0)
        w->c.node_errors++;
}

void fed_sim_world_crash(fed_sim_world *w, uint32_t node)
{
    sim_node *n = node_at(w, node);

    if (!n->up)
        return;
    n->up = 0;
    n->inc++;
    if (!n->local)
        return; /* another rank's: only its state, to check frames against */
    w->c.crashes++;
    n->busy_us = w->now_us;
    node_drop_state(w, n);
    record(w, FED_SIM_EV_CRASH, node, n->inc, 0, NULL, 0);
    if (n->ops.on_crash)
        n->ops.on_crash(n->ctx);
}

void fed_sim_world_restart(fed_sim_world *w, uint32_t node)
{
    sim_node *n = node_at(w, node);

    if (n->up)
        return;
    n->up = 1;
    if (!n->local)
        return;
    w->c.restarts++;
    record(w, FED_SIM_EV_RESTART, node, n->inc, 0, NULL, 0);
    if (n->ops.on_restart)
        count_error(w, n->ops.on_restart(n->ctx));
}

static fed_err queue_node_event(fed_sim_world *w, uint32_t node, int type, uint64_t t_us)
{
    sim_event ev = {0};

    assert(node < w->nnodes && "no such node");
    ev.t_us = t_us < w->now_us ? w->now_us : t_us;
    ev.cls = CLS_OTHER;
    ev.k1 = ORIGIN_SCHED + node;
    ev.k2 = w->nodes[node]->sched_seq++;
    ev.type = (uint8_t)type;
    ev.node = node;
    ev.node_inc = w->nodes[node]->inc;
    return heap_push(w, &ev);
}

fed_err fed_sim_world_crash_at(fed_sim_world *w, uint32_t node, uint64_t t_ms)
{
    return queue_node_event(w, node, EV_CRASH, ms_to_us(t_ms));
}

fed_err fed_sim_world_restart_at(fed_sim_world *w, uint32_t node, uint64_t t_ms)
{
    return queue_node_event(w, node, EV_RESTART, ms_to_us(t_ms));
}

int fed_sim_world_owns(const fed_sim_world *w, uint32_t node)
{
    return (int)(node % (uint32_t)w->nranks) == w->rank;
}

/* A node of this rank (ops set) or a shadow of another rank's (ops NULL). */
static fed_err add_node(fed_sim_world *w, const fed_peer_id *id, const fed_sim_node_ops *ops,
                        void *ctx, uint32_t *index_out)
{
    sim_node *n = NULL;
    fed_err e;

    if (!w || !id || (ops != NULL) != fed_sim_world_owns(w, (uint32_t)w->nnodes))
        return FED_ERR_INVAL;
    if (w->nnodes >= NO_SLOT - 1)
        return FED_ERR_FULL;
    if (lookup(w, id) != NO_SLOT)
        return FED_ERR_EXISTS;
    e = grow((void **)&w->nodes, &w->cap_nodes, w->nnodes + 1, sizeof(*w->nodes));
    if (e)
        goto out;
    e = slots_reserve(w, w->nnodes + 1);
    if (e)
        goto out;
    n = fed_calloc(1, sizeof(*n));
    if (!n) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    n->w = w;
    n->index = (uint32_t)w->nnodes;
    n->id = *id;
    if (ops)
        n->ops = *ops;
    n->ctx = ctx;
    n->local = ops != NULL;
    n->up = 1;
    n->slowdown = 1.0;
    n->busy_us = w->now_us;
    fed_rng_seed_stream(&n->rng, w->cfg.seed, (uint64_t)n->index + 1);
    fed_rng_seed_stream(&n->net, w->cfg.seed, FED_SIM_NET_STREAM + n->index);
    n->env = (fed_env){
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
        .self = n,
    };
    w->nodes[w->nnodes++] = n;
    if (n->local)
        e = queue_node_event(w, n->index, EV_START, w->now_us);
    else
        n->sched_seq++; /* the start's key, as on its own rank */
    if (e) {
        w->nnodes--;
        goto out;
    }
    slot_insert(w->slots, w->nslots, id, n->index);
    if (index_out)
        *index_out = n->index;
    n = NULL;
out:
    fed_free(n);
    return e;
}

fed_err fed_sim_world_add_node(fed_sim_world *w, const fed_peer_id *id,
                               const fed_sim_node_ops *ops, void *ctx, uint32_t *index_out)
{
    if (!ops)
        return FED_ERR_INVAL;
    return add_node(w, id, ops, ctx, index_out);
}

fed_err fed_sim_world_add_remote(fed_sim_world *w, const fed_peer_id *id, uint32_t *index_out)
{
    return add_node(w, id, NULL, NULL, index_out);
}

size_t fed_sim_world_node_count(const fed_sim_world *w)
{
    return w->nnodes;
}

const fed_env *fed_sim_world_env(const fed_sim_world *w, uint32_t node)
{
    return &node_at(w, node)->env;
}

const fed_peer_id *fed_sim_world_node_id(const fed_sim_world *w, uint32_t node)
{
    return &node_at(w, node)->id;
}

int fed_sim_world_node_up(const fed_sim_world *w, uint32_t node)
{
    return node_at(w, node)->up;
}

fed_err fed_sim_world_set_link(fed_sim_world *w, uint32_t from, uint32_t to,
                               const fed_sim_link *link)
{
    size_t cap = w->nlinks;
    fed_err e;

    if (!link || from >= w->nnodes || to >= w->nnodes || link->loss < 0 || link->loss > 1)
        return FED_ERR_INVAL;
    for (size_t i = 0; i < w->nlinks; i++) {
        if (w->links[i].from == from && w->links[i].to == to) {
            w->links[i].link = *link;
            return FED_OK;
        }
    }
    e = grow((void **)&w->links, &cap, w->nlinks + 1, sizeof(*w->links));
    if (e)
        return e;
    w->links[w->nlinks++] = (sim_link_override){from, to, *link};
    return FED_OK;
}

fed_err fed_sim_world_set_slowdown(fed_sim_world *w, uint32_t node, double factor)
{
    if (node >= w->nnodes || !(factor > 0) || isinf(factor))
        return FED_ERR_INVAL;
    w->nodes[node]->slowdown = factor;
    return FED_OK;
}

fed_err fed_sim_world_add_partition(fed_sim_world *w, const uint32_t *group_of, size_t n,
                                    uint64_t start_ms, uint64_t end_ms)
{
    size_t cap = w->nparts;
    uint32_t *copy;
    fed_err e;

    if (!group_of || !n || end_ms < start_ms)
        return FED_ERR_INVAL;
    copy = fed_malloc(n * sizeof(*copy));
    if (!copy)
        return FED_ERR_NOMEM;
    e = grow((void **)&w->parts, &cap, w->nparts + 1, sizeof(*w->parts));
    if (e) {
        fed_free(copy);
        return e;
    }
    memcpy(copy, group_of, n * sizeof(*copy));
    w->parts[w->nparts++] = (sim_partition){copy, n, ms_to_us(start_ms), ms_to_us(end_ms)};
    return FED_OK;
}

fed_err fed_sim_world_add_loss(fed_sim_world *w, double loss, uint64_t start_ms,
                               uint64_t end_ms)
{
    size_t cap = w->nlossw;
    fed_err e;

    if (!(loss >= 0 && loss <= 1) || end_ms < start_ms)
        return FED_ERR_INVAL;
    if ((e = grow((void **)&w->lossw, &cap, w->nlossw + 1, sizeof(*w->lossw))) != FED_OK)
        return e;
    w->lossw[w->nlossw++] = (sim_loss_window){loss, ms_to_us(start_ms), ms_to_us(end_ms)};
    return FED_OK;
}

/* ------------------------------------------------------------ dispatch -- */

static void deliver_frame(fed_sim_world *w, sim_node *dst, sim_frame *f)
{
    fed_req *r = NULL;

    if (!f->is_reply && dst->ops.on_frame) {
        r = fed_calloc(1, sizeof(*r));
        if (!r) {
            fed_log(FED_LOG_WARN, "sim: no memory for a request to node %u", dst->index);
            w->c.frames_dropped++;
            w->c.dropped_down++;
            return;
        }
        r->src = f->src;
        r->src_inc = f->src_inc;
        r->dst = dst->index;
        r->next = dst->reqs;
        if (dst->reqs)
            dst->reqs->prev = r;
        dst->reqs = r;
    }
    w->c.frames_delivered++;
    w->c.bytes_delivered += f->len;
    record(w, f->is_reply ? FED_SIM_EV_REPLY : FED_SIM_EV_REQUEST, dst->index, f->src, f->len,
           f->data, f->len);
    if (dst->ops.on_frame)
        count_error(w, dst->ops.on_frame(dst->ctx, r, f->data, f->len));
}

static void dispatch_frame(fed_sim_world *w, const sim_event *ev)
{
    sim_frame *f = ev->ptr;
    sim_node *dst = w->nodes[ev->node];
    const sim_node *src = w->nodes[f->src];

    if (!dst->up || dst->inc != ev->node_inc || !src->up || src->inc != f->src_inc) {
        w->c.frames_dropped++;
        w->c.dropped_down++;
    } else {
        deliver_frame(w, dst, f);
    }
    fed_free(f);
}

static void dispatch_timer(fed_sim_world *w, sim_node *n, const sim_event *ev)
{
    sim_timer *t = timer_find(n, ev->timer_id);

    if (!t || t->gen != ev->timer_gen)
        return; /* cancelled, re-armed or dropped by a crash */
    timer_remove(n, t);
    w->c.timers_fired++;
    record(w, FED_SIM_EV_TIMER, n->index, ev->timer_id, 0, NULL, 0);
    if (n->ops.on_timer)
        count_error(w, n->ops.on_timer(n->ctx, ev->timer_id));
}

static void dispatch_job(fed_sim_world *w, sim_node *n, const sim_event *ev)
{
    sim_jobw *jw = ev->ptr;
    fed_job *job = jw->job;

    job_wait_unlink(w, n, jw);
    fed_free(jw);
    w->c.jobs_done++;
    record(w, FED_SIM_EV_JOB, n->index, ev->k2, 0, NULL, 0);
    if (n->ops.on_job_done)
        count_error(w, n->ops.on_job_done(n->ctx, job));
}

static void dispatch(fed_sim_world *w, const sim_event *ev)
{
    sim_node *n = w->nodes[ev->node];

    switch (ev->type) {
    case EV_FRAME:
        dispatch_frame(w, ev);
        return;
    case EV_CRASH:
        fed_sim_world_crash(w, ev->node);
        return;
    case EV_RESTART:
        fed_sim_world_restart(w, ev->node);
        return;
    default:
        break;
    }
    if (!n->up || n->inc != ev->node_inc)
        return; /* queued before a crash: gone with it */
    if (ev->type == EV_TIMER) {
        dispatch_timer(w, n, ev);
    } else if (ev->type == EV_JOB) {
        dispatch_job(w, n, ev);
    } else if (ev->type == EV_START) {
        record(w, FED_SIM_EV_START, n->index, 0, 0, NULL, 0);
        if (n->ops.on_start)
            count_error(w, n->ops.on_start(n->ctx));
    }
}

fed_err fed_sim_world_step(fed_sim_world *w, int *did)
{
    sim_event ev;

    *did = 0;
    if (!w->nheap)
        return FED_OK;
    heap_pop(w, &ev);
    assert(ev.t_us >= w->now_us && "event in the past");
    w->now_us = ev.t_us;
    dispatch(w, &ev);
    *did = 1;
    return FED_OK;
}

/* A window's end: this rank's frames out, every rank's for its nodes in,
 * and *next from this rank's earliest event (or frame sent) to every
 * rank's. */
static fed_err exchange(fed_sim_world *w, uint64_t *next)
{
    const fed_comm *c = w->cfg.comm;
    uint8_t *in = NULL;
    size_t in_len = 0;
    fed_err e;

    *next = w->nheap ? w->heap[0].t_us : UINT64_MAX;
    if (w->out_min < *next)
        *next = w->out_min;
    e = c->exchange(c->ctx, w->out, w->out_len, next, &in, &in_len);
    for (int k = 0; k < w->nranks; k++)
        w->out_len[k] = 0;
    w->out_min = UINT64_MAX;
    if (e == FED_OK)
        e = inbox_take(w, in, in_len);
    fed_free(in);
    return e;
}

/* Conservative windows across ranks: from the earliest event any rank
 * holds, each rank runs its events up to a lookahead later (no frame sent
 * in the window can arrive inside it), then the frames that cross ranks are
 * exchanged, with the next earliest time; until every rank is past t. One
 * collective a window. */
static fed_err run_windows(fed_sim_world *w, uint64_t t)
{
    uint64_t look = fed_sim_world_lookahead_us(w), next;
    int did;
    fed_err e;

    if (!look)
        return FED_ERR_INVAL;
    if ((e = exchange(w, &next)) != FED_OK)
        return e;
    while (next <= t) {
        uint64_t end = next + look - 1 < t ? next + look - 1 : t;

        while (w->nheap && w->heap[0].t_us <= end)
            if ((e = fed_sim_world_step(w, &did)) != FED_OK)
                return e;
        if (w->now_us < end)
            w->now_us = end;
        if ((e = exchange(w, &next)) != FED_OK)
            return e;
    }
    if (w->now_us < t)
        w->now_us = t;
    return FED_OK;
}

fed_err fed_sim_world_run_until(fed_sim_world *w, uint64_t t_ms)
{
    uint64_t t = ms_to_us(t_ms);
    int did;
    fed_err e;

    if (w->nranks > 1)
        return run_windows(w, t);
    while (w->nheap && w->heap[0].t_us <= t) {
        e = fed_sim_world_step(w, &did);
        if (e)
            return e;
    }
    if (w->now_us < t)
        w->now_us = t;
    return FED_OK;
}

fed_err fed_sim_world_run_idle(fed_sim_world *w)
{
    int did = 1;
    fed_err e;

    while (did) {
        e = fed_sim_world_step(w, &did);
        if (e)
            return e;
    }
    return FED_OK;
}

/* ---------------------------------------------------------- world life -- */

fed_err fed_sim_world_new(const fed_sim_config *cfg, fed_sim_world **out)
{
    fed_sim_world *w;

    if (!cfg || !out || cfg->link.loss < 0 || cfg->link.loss > 1)
        return FED_ERR_INVAL;
    *out = NULL;
    w = fed_calloc(1, sizeof(*w));
    if (!w)
        return FED_ERR_NOMEM;
    w->cfg = *cfg;
    w->rank = fed_comm_rank(cfg->comm);
    w->nranks = fed_comm_size(cfg->comm);
    if (w->nranks < 1 || w->rank < 0 || w->rank >= w->nranks) {
        fed_free(w);
        return FED_ERR_INVAL;
    }
    w->out = fed_calloc((size_t)w->nranks, sizeof(*w->out));
    w->out_len = fed_calloc((size_t)w->nranks, sizeof(*w->out_len));
    w->out_cap = fed_calloc((size_t)w->nranks, sizeof(*w->out_cap));
    if (!w->out || !w->out_len || !w->out_cap) {
        fed_free(w->out);
        fed_free(w->out_len);
        fed_free(w->out_cap);
        fed_free(w);
        return FED_ERR_NOMEM;
    }
    w->out_min = UINT64_MAX;
    if (!(w->cfg.flops_per_ms > 0))
        w->cfg.flops_per_ms = 1e6;
    w->hash = 14695981039346656037ull;
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    *out = w;
    return FED_OK;
}

void fed_sim_world_free(fed_sim_world *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->nnodes; i++)
        node_free(w, w->nodes[i]);
    for (size_t i = 0; i < w->nheap; i++)
        if (w->heap[i].type == EV_FRAME)
            fed_free(w->heap[i].ptr);
    for (size_t i = 0; i < w->nparts; i++)
        fed_free(w->parts[i].group_of);
    fed_free(w->parts);
    fed_free(w->lossw);
    fed_free(w->links);
    fed_free(w->marks);
    for (int k = 0; k < w->nranks; k++)
        fed_free(w->out[k]);
    fed_free(w->out);
    fed_free(w->out_len);
    fed_free(w->out_cap);
    fed_free(w->heap);
    fed_free(w->nodes);
    fed_free(w->slots);
    pthread_cond_destroy(&w->cv);
    pthread_mutex_destroy(&w->mu);
    fed_free(w);
}

uint64_t fed_sim_world_now_us(const fed_sim_world *w)
{
    return w->now_us;
}

size_t fed_sim_world_pending(const fed_sim_world *w)
{
    return w->nheap;
}

void fed_sim_world_counters(const fed_sim_world *w, fed_sim_counters *out)
{
    *out = w->c;
}

uint64_t fed_sim_world_trace_hash(const fed_sim_world *w)
{
    return w->hash;
}

void fed_sim_world_set_send_filter(fed_sim_world *w, fed_sim_send_filter fn, void *ctx)
{
    w->send_filter = fn;
    w->send_filter_ctx = ctx;
}

void fed_sim_world_set_trace(fed_sim_world *w, fed_sim_trace_fn fn, void *ctx)
{
    w->trace = fn;
    w->trace_ctx = ctx;
}

uint64_t fed_sim_world_bytes_at(const fed_sim_world *w, uint64_t t_us)
{
    size_t lo = 0, hi = w->nmarks; /* the first mark after t_us */

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (w->marks[mid].t_us <= t_us)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo ? w->marks[lo - 1].bytes : w->bytes_base;
}

void fed_sim_world_bytes_forget(fed_sim_world *w, uint64_t t_us)
{
    size_t k = 0;

    while (k < w->nmarks && w->marks[k].t_us < t_us)
        k++;
    if (!k)
        return;
    w->bytes_base = w->marks[k - 1].bytes;
    memmove(w->marks, w->marks + k, (w->nmarks - k) * sizeof(*w->marks));
    w->nmarks -= k;
}

uint64_t fed_sim_world_lookahead_us(const fed_sim_world *w)
{
    uint64_t best = link_floor_us(&w->cfg.link);

    for (size_t i = 0; i < w->nlinks; i++) {
        uint64_t f = link_floor_us(&w->links[i].link);

        if (f < best)
            best = f;
    }
    return best;
}
