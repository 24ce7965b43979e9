/* snapshot.c - the board a running node's loop publishes its snapshots on
 * (snapshot.h): reference counts under one mutex, the loop's running totals
 * of the rounds it reported, and the member block shared between snapshots
 * until the allow-list or the peer table changes. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "core/alloc.h"
#include "node/snapshot.h"

const double fed_node_snap_bucket_s[FED_NODE_SNAP_BUCKETS] = {
    0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 900};

typedef struct snap_members {
    int refs; /* under the board's mu */
    size_t n;
    fed_node_snap_member m[];
} snap_members;

typedef struct snap_box {
    int refs; /* under the board's mu */
    snap_members *mb;
    fed_node_snap s;
} snap_box;

struct fed_node_snap_board {
    pthread_mutex_t mu;
    snap_box *cur;          /* written under mu by the loop only */
    _Atomic uint64_t beat;
    /* the loop's own, never read elsewhere */
    uint64_t seq;
    uint64_t rounds_run;
    uint64_t dur_bucket[FED_NODE_SNAP_BUCKETS + 1];
    double dur_sum_s;
    int have_last;
    fed_node_round_info last;
    uint64_t metrics_round;  /* the newest round with metrics, and them */
    fed_metrics_head metrics;
    fed_node_site_figures site; /* the newest site evaluation */
    uint64_t deltas_merged, deltas_missing, deltas_refused;
    snap_members *mb;       /* the members in use (the loop holds a reference) */
    const fed_crypto_allow *mb_allow;
    uint64_t mb_gen, mb_hash;
};

uint64_t fed_node_snap_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

fed_err fed_node_snap_board_new(fed_node_snap_board **out)
{
    fed_node_snap_board *b = fed_calloc(1, sizeof *b);

    *out = NULL;
    if (!b)
        return FED_ERR_NOMEM;
    if (pthread_mutex_init(&b->mu, NULL) != 0) {
        fed_free(b);
        return FED_ERR_NOMEM;
    }
    atomic_init(&b->beat, 0);
    *out = b;
    return FED_OK;
}

/* Under mu. */
static void members_unref(snap_members *mb)
{
    if (mb && --mb->refs == 0)
        fed_free(mb);
}

/* Under mu. */
static void box_unref(snap_box *x)
{
    if (x && --x->refs == 0) {
        members_unref(x->mb);
        fed_free(x);
    }
}

void fed_node_snap_board_free(fed_node_snap_board *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    box_unref(b->cur);
    members_unref(b->mb);
    pthread_mutex_unlock(&b->mu);
    pthread_mutex_destroy(&b->mu);
    fed_free(b);
}

const fed_node_snap *fed_node_snap_acquire(fed_node_snap_board *b)
{
    const fed_node_snap *s = NULL;

    pthread_mutex_lock(&b->mu);
    if (b->cur) {
        b->cur->refs++;
        s = &b->cur->s;
    }
    pthread_mutex_unlock(&b->mu);
    return s;
}

static snap_box *box_of(const fed_node_snap *s)
{
    return (snap_box *)(void *)((char *)(uintptr_t)s - offsetof(snap_box, s));
}

void fed_node_snap_release(fed_node_snap_board *b, const fed_node_snap *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&b->mu);
    box_unref(box_of(s));
    pthread_mutex_unlock(&b->mu);
}

uint64_t fed_node_snap_heartbeat_ms(fed_node_snap_board *b)
{
    return atomic_load_explicit(&b->beat, memory_order_relaxed);
}

void fed_node_snap_beat(fed_node_snap_board *b)
{
    atomic_store_explicit(&b->beat, fed_node_snap_now_ms(), memory_order_relaxed);
}

void fed_node_snap_note_round(fed_node_snap_board *b, const fed_node_round_info *r)
{
    double s = r->end_ms >= r->start_ms ? (double)(r->end_ms - r->start_ms) / 1000.0 : 0;
    size_t k = 0;

    while (k < FED_NODE_SNAP_BUCKETS && s > fed_node_snap_bucket_s[k])
        k++;
    b->dur_bucket[k]++;
    b->dur_sum_s += s;
    b->rounds_run++;
    b->last = *r;
    b->have_last = 1;
    if (r->metrics.kind != FED_METRICS_NONE) {
        b->metrics_round = r->round;
        b->metrics = r->metrics;
    }
    if (r->site.head.kind != FED_METRICS_NONE)
        b->site = r->site;
    b->deltas_merged += r->merged;
    b->deltas_missing += r->missing;
    if (r->sampled > r->merged + r->missing)
        b->deltas_refused += r->sampled - r->merged - r->missing;
}

/* Publishes box (one reference, the board's): it replaces the current one. */
static void put_box(fed_node_snap_board *b, snap_box *x)
{
    snap_box *old;

    x->refs = 1;
    x->s.seq = ++b->seq;
    x->s.built_mono_ms = fed_node_snap_now_ms();
    pthread_mutex_lock(&b->mu);
    old = b->cur;
    b->cur = x;
    if (x->mb)
        x->mb->refs++;
    box_unref(old);
    pthread_mutex_unlock(&b->mu);
}

static snap_members *members_new(size_t n)
{
    snap_members *mb = fed_calloc(1, sizeof *mb + (n ? n : 1) * sizeof mb->m[0]);

    if (mb)
        mb->n = n;
    return mb;
}

/* The loop's member block becomes mb (its reference passes to the board). */
static void set_members(fed_node_snap_board *b, snap_members *mb)
{
    pthread_mutex_lock(&b->mu);
    members_unref(b->mb);
    mb->refs = 1;
    b->mb = mb;
    pthread_mutex_unlock(&b->mu);
}

fed_err fed_node_snap_publish(fed_node_snap_board *b, const fed_node_snap *s,
                              const fed_node_snap_member *m, size_t n)
{
    snap_box *x = fed_calloc(1, sizeof *x);
    snap_members *mb = members_new(n);

    if (!x || !mb) {
        fed_free(x);
        fed_free(mb);
        return FED_ERR_NOMEM;
    }
    if (n)
        memcpy(mb->m, m, n * sizeof *m);
    set_members(b, mb);
    b->mb_allow = NULL; /* the next update rebuilds its own */
    x->s = *s;
    x->mb = mb;
    x->s.member = mb->m;
    x->s.nmembers = mb->n;
    put_box(b, x);
    fed_node_snap_beat(b);
    return FED_OK;
}

/* FNV-1a over what the member block is made of besides the allow-list. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n)
{
    const unsigned char *c = p;

    for (size_t i = 0; i < n; i++)
        h = (h ^ c[i]) * 1099511628211ull;
    return h;
}

static uint64_t members_hash(const fed_node_snap_src *src)
{
    const fed_gossip_peers *pt =
        fed_node_get_role(src->node) == FED_NODE_PEER ? src->cfg->peer.peers : NULL;
    uint64_t h = 1469598103934665603ull;

    uint64_t dpv = fed_node_members_dp_version(src->node);

    h = hash_bytes(h, &dpv, sizeof dpv); /* the members' reported budgets */
    if (src->aggregator_url)
        h = hash_bytes(h, src->aggregator_url, strlen(src->aggregator_url) + 1);
    for (size_t i = 0; pt && i < fed_gossip_peers_count(pt); i++) {
        const uint8_t *key;
        const char *url;

        fed_gossip_peers_get(pt, i, &key, &url);
        h = hash_bytes(hash_bytes(h, key, 32), url, strlen(url) + 1);
    }
    return h;
}

/* The members but this node, with their addresses. */
static fed_err build_members(fed_node_snap_board *b, const fed_node_snap_src *src)
{
    const fed_crypto_allow *al = src->cfg->allow;
    const fed_gossip_peers *pt =
        fed_node_get_role(src->node) == FED_NODE_PEER ? src->cfg->peer.peers : NULL;
    const uint8_t *self = fed_node_key(src->node);
    size_t n = al ? fed_crypto_allow_count(al) : 0, k = 0;
    uint64_t gen = al ? fed_crypto_allow_generation(al) : 0, h = members_hash(src);
    snap_members *mb;

    if (b->mb && b->mb_allow == al && b->mb_gen == gen && b->mb_hash == h)
        return FED_OK;
    if (!(mb = members_new(n)))
        return FED_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        const char *name;
        const uint8_t *pk;
        fed_node_snap_member *m = &mb->m[k];

        fed_crypto_allow_get(al, i, &name, &pk);
        if (!memcmp(pk, self, 32))
            continue;
        snprintf(m->name, sizeof m->name, "%s", name);
        memcpy(m->key, pk, 32);
        m->dp_reported = fed_node_member_dp(src->node, pk, &m->dp_epsilon, &m->dp_budget,
                                            &m->dp_parked);
        if (src->aggregator_url && !memcmp(pk, src->cfg->client.aggregator.key, 32))
            snprintf(m->addr, sizeof m->addr, "%s", src->aggregator_url);
        for (size_t j = 0; pt && j < fed_gossip_peers_count(pt); j++) {
            const uint8_t *key;
            const char *url;

            fed_gossip_peers_get(pt, j, &key, &url);
            if (!memcmp(key, pk, 32))
                snprintf(m->addr, sizeof m->addr, "%s", url);
        }
        k++;
    }
    mb->n = k;
    set_members(b, mb);
    b->mb_allow = al;
    b->mb_gen = gen;
    b->mb_hash = h;
    return FED_OK;
}

/* Equal but for seq and built_mono_ms. */
static int same_snap(const fed_node_snap *a, const fed_node_snap *c)
{
    fed_node_snap x = *a, y = *c;

    x.seq = y.seq = 0;
    x.built_mono_ms = y.built_mono_ms = 0;
    return memcmp(&x, &y, sizeof x) == 0;
}

fed_err fed_node_snap_update(fed_node_snap_board *b, const fed_node_snap_src *src)
{
    snap_box *x;
    fed_node_snap *s;
    fed_err e;

    fed_node_snap_beat(b);
    if ((e = build_members(b, src)) != FED_OK)
        return e;
    if (!(x = fed_calloc(1, sizeof *x)))
        return FED_ERR_NOMEM;
    s = &x->s;
    s->role = fed_node_get_role(src->node);
    memcpy(s->key, fed_node_key(src->node), 32);
    if (src->cfg->allow) {
        const char *me = fed_crypto_allow_find(src->cfg->allow, s->key);

        snprintf(s->name, sizeof s->name, "%s", me ? me : "");
    }
    s->started_wall_ms = src->started_wall_ms;
    s->deadline_ms = src->cfg->deadline_ms;
    fed_node_get_progress(src->node, &s->progress);
    s->rounds_run = b->rounds_run;
    memcpy(s->dur_bucket, b->dur_bucket, sizeof s->dur_bucket);
    s->dur_sum_s = b->dur_sum_s;
    s->have_last = b->have_last;
    s->last = b->last;
    s->metrics_round = b->metrics_round;
    s->metrics = b->metrics;
    s->site = b->site;
    s->deltas_merged = b->deltas_merged;
    s->deltas_missing = b->deltas_missing;
    s->deltas_refused = b->deltas_refused;
    s->wire = *fed_node_wire_counters(src->node);
    s->secagg_on = src->cfg->secagg.on != 0;
    s->dp_on = src->cfg->dp.sgd || src->cfg->dp.require_sgd || src->cfg->dp.client_clip > 0;
    if (src->cfg->store)
        fed_store_get_stats(src->cfg->store, &s->store);
    x->mb = b->mb;
    s->member = b->mb->m;
    s->nmembers = b->mb->n;
    if (b->cur && same_snap(&b->cur->s, s)) {
        fed_free(x);
        return FED_OK;
    }
    put_box(b, x);
    return FED_OK;
}
