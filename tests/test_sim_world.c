/* test_sim_world.c - sim/world: virtual-time order with stable ties, latency,
 * jitter, bandwidth and loss, partitions that heal, timers and cancel,
 * a latency floor, bytes by send time,
 * request/reply between toy nodes, jobs completed in a fixed order whatever
 * the pool does, crash and restart, same seed => same trace, 1,000 gossiping
 * nodes, a world split over ranks (threads) showing each node what one
 * world shows it, and allocation failures. */
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/comm.h"
#include "core/err.h"
#include "core/pool.h"
#include "node/env.h"
#include "sim/world.h"

#define assert_err(got, want) assert_string_equal(fed_errname(got), fed_errname(want))

/* ------------------------------------------------------------ toy node -- */

#define MAXLOG 20000

typedef struct toy_shared {
    fed_peer_id *ids;
    uint32_t n;
} toy_shared;

typedef struct toy {
    fed_sim_world *w;
    const fed_env *env;
    uint32_t index;
    toy_shared *sh;
    int mode;
    /* what it saw */
    int starts, crashes, restarts, requests, replies, timers, jobs;
    uint8_t got[MAXLOG];
    uint64_t got_ms[MAXLOG];
    uint32_t timer_ids[64];
    uint64_t timer_ms[64];
    fed_req *held[64];
    int nheld;
    /* start-time script */
    int start_sends;        /* frames to send at start to `target` */
    uint32_t target;
    size_t frame_len;
    int gossip_rounds;
    int pings_left;
} toy;

enum { MODE_ECHO = 0, MODE_HOLD = 1, MODE_GOSSIP = 2, MODE_PING = 3, MODE_SINK = 4 };

static void make_id(fed_peer_id *id, uint32_t i)
{
    memset(id, 0, sizeof(*id));
    memcpy(id->key, &i, sizeof(i));
    id->key[31] = 0xab;
}

static int toy_send_byte(toy *t, uint32_t to, uint8_t b, size_t len)
{
    uint8_t buf[1024];

    assert_true(len >= 1 && len <= sizeof(buf));
    memset(buf, b, len);
    return t->env->send(t->env->self, &t->sh->ids[to], buf, len);
}

static int toy_start(void *ctx)
{
    toy *t = ctx;

    t->starts++;
    for (int i = 0; i < t->start_sends; i++)
        assert_err(toy_send_byte(t, t->target, (uint8_t)i, t->frame_len ? t->frame_len : 1),
                   FED_OK);
    if (t->mode == MODE_GOSSIP) {
        uint32_t r;

        t->env->random(t->env->self, &r, sizeof(r));
        assert_err(t->env->set_timer(t->env->self, t->env->now_ms(t->env->self) + r % 100, 1),
                   FED_OK);
    }
    if (t->mode == MODE_PING && t->pings_left > 0) {
        t->pings_left--;
        assert_err(toy_send_byte(t, t->target, 0, 1), FED_OK);
    }
    return 0;
}

static int toy_frame(void *ctx, fed_req *req, const uint8_t *frame, size_t len)
{
    toy *t = ctx;
    uint64_t now = t->env->now_ms(t->env->self);

    assert_true(len >= 1);
    if (req) {
        if (t->requests < MAXLOG) {
            t->got[t->requests] = frame[0];
            t->got_ms[t->requests] = now;
        }
        t->requests++;
        if (t->mode == MODE_SINK)
            return 0; /* never answered: the world frees it */
        if (t->mode == MODE_HOLD) {
            assert_true(t->nheld < 64);
            t->held[t->nheld++] = req;
            return t->env->set_timer(t->env->self, now + 5, 100 + (uint32_t)t->nheld - 1);
        }
        uint8_t b = (uint8_t)(frame[0] + 1);
        return t->env->reply(t->env->self, req, &b, 1);
    }
    t->replies++;
    if (t->mode == MODE_PING && t->pings_left > 0) {
        t->pings_left--;
        return toy_send_byte(t, t->target, frame[0], 1);
    }
    return 0;
}

static int toy_timer(void *ctx, uint32_t id)
{
    toy *t = ctx;
    const fed_env *e = t->env;

    if (t->timers < 64) {
        t->timer_ids[t->timers] = id;
        t->timer_ms[t->timers] = e->now_ms(e->self);
    }
    t->timers++;
    if (id >= 100 && id < 164) { /* MODE_HOLD: answer a held request */
        fed_req *r = t->held[id - 100];
        uint8_t b = 42;

        t->held[id - 100] = NULL;
        return e->reply(e->self, r, &b, 1);
    }
    if (t->mode == MODE_GOSSIP && t->gossip_rounds > 0) {
        uint32_t r, to;

        t->gossip_rounds--;
        e->random(e->self, &r, sizeof(r));
        to = r % (t->sh->n - 1);
        if (to >= t->index)
            to++;
        int rc = toy_send_byte(t, to, (uint8_t)t->gossip_rounds, 16);
        if (rc)
            return rc;
        return e->set_timer(e->self, e->now_ms(e->self) + 100, 1);
    }
    return 0;
}

static void toy_crash(void *ctx)
{
    toy *t = ctx;

    t->crashes++;
    t->nheld = 0; /* the world freed them */
}

static int toy_restart(void *ctx)
{
    toy *t = ctx;

    t->restarts++;
    return 0;
}

static const fed_sim_node_ops toy_ops = {
    .on_start = toy_start,
    .on_frame = toy_frame,
    .on_timer = toy_timer,
    .on_crash = toy_crash,
    .on_restart = toy_restart,
};

/* A world of n toys, ids 0..n-1; toys are zeroed and wired. */
typedef struct scene {
    fed_sim_world *w;
    toy *toys;
    toy_shared sh;
} scene;

static void scene_new(scene *s, const fed_sim_config *cfg, uint32_t n, const fed_sim_node_ops *ops)
{
    memset(s, 0, sizeof(*s));
    assert_err(fed_sim_world_new(cfg, &s->w), FED_OK);
    s->toys = calloc(n, sizeof(*s->toys));
    s->sh.ids = calloc(n, sizeof(*s->sh.ids));
    assert_non_null(s->toys);
    assert_non_null(s->sh.ids);
    s->sh.n = n;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t idx;

        make_id(&s->sh.ids[i], i);
        assert_err(fed_sim_world_add_node(s->w, &s->sh.ids[i], ops ? ops : &toy_ops, &s->toys[i],
                                          &idx),
                   FED_OK);
        assert_int_equal(idx, i);
        s->toys[i].w = s->w;
        s->toys[i].env = fed_sim_world_env(s->w, i);
        s->toys[i].index = i;
        s->toys[i].sh = &s->sh;
    }
}

static void scene_free(scene *s)
{
    fed_sim_world_free(s->w);
    free(s->toys);
    free(s->sh.ids);
}

static void assert_balanced(fed_sim_world *w)
{
    fed_sim_counters c;

    fed_sim_world_counters(w, &c);
    assert_int_equal(c.frames_sent, c.frames_delivered + c.frames_dropped);
    assert_int_equal(c.frames_dropped, c.dropped_loss + c.dropped_partition + c.dropped_down);
}

/* Trace recorder through the world's trace hook. */
typedef struct trace_ev {
    uint64_t t_us;
    int kind;
    uint32_t node;
    uint64_t a, b;
} trace_ev;

typedef struct trace_log {
    trace_ev ev[256];
    size_t n;
} trace_log;

static void trace_rec(void *ctx, uint64_t t_us, fed_sim_event_kind kind, uint32_t node,
                      uint64_t a, uint64_t b)
{
    trace_log *l = ctx;

    if (l->n < 256)
        l->ev[l->n++] = (trace_ev){t_us, (int)kind, node, a, b};
}

/* --------------------------------------------------------------- order -- */

static void test_order_and_ties(void **state)
{
    fed_sim_config cfg = {.seed = 1, .link = {.latency_ms = 10}};
    fed_sim_link slow = {.latency_ms = 50};
    scene s;

    (void)state;
    scene_new(&s, &cfg, 3, NULL);
    assert_err(fed_sim_world_set_link(s.w, 0, 2, &slow), FED_OK);
    assert_err(fed_sim_world_set_link(s.w, 0, 9, &slow), FED_ERR_INVAL);
    /* node 0 sends to the slow node 2 first, then five frames to node 1 */
    s.toys[0].start_sends = 1;
    s.toys[0].target = 2;
    s.toys[1].start_sends = 0;
    assert_err(fed_sim_world_run_until(s.w, 0), FED_OK);
    for (int i = 0; i < 5; i++)
        assert_err(toy_send_byte(&s.toys[0], 1, (uint8_t)(10 + i), 1), FED_OK);
    assert_int_equal(s.toys[1].requests, 0);
    assert_err(fed_sim_world_run_until(s.w, 9), FED_OK);
    assert_int_equal(s.toys[1].requests, 0);
    assert_err(fed_sim_world_run_until(s.w, 10), FED_OK);
    assert_int_equal(s.toys[1].requests, 5);
    assert_int_equal(s.toys[2].requests, 0);
    for (int i = 0; i < 5; i++) { /* equal times: in the order sent */
        assert_int_equal(s.toys[1].got[i], 10 + i);
        assert_int_equal(s.toys[1].got_ms[i], 10);
    }
    assert_err(fed_sim_world_run_idle(s.w), FED_OK);
    assert_int_equal(s.toys[2].requests, 1);
    assert_int_equal(s.toys[2].got_ms[0], 50);
    /* echoes came back: 5 replies to node 0 from node 1 at 20 ms, 1 from 2 */
    assert_int_equal(s.toys[0].replies, 6);
    assert_int_equal(fed_sim_world_now_us(s.w), 60000); /* 2's echo: 50 + 10 */
    assert_int_equal(s.toys[0].env->wall_s(s.toys[0].env->self), 0);
    assert_balanced(s.w);
    scene_free(&s);
}

static void test_latency_bandwidth_jitter(void **state)
{
    fed_sim_config cfg = {.seed = 5, .link = {.latency_ms = 7, .bytes_per_ms = 100},
                          .epoch_base_s = 1000};
    scene s;

    (void)state;
    scene_new(&s, &cfg, 2, NULL);
    s.toys[0].start_sends = 1;
    s.toys[0].target = 1;
    s.toys[0].frame_len = 500;
    assert_err(fed_sim_world_run_idle(s.w), FED_OK);
    assert_int_equal(s.toys[1].got_ms[0], 12); /* 7 + 500 / 100 */
    assert_int_equal(s.toys[0].env->wall_s(s.toys[0].env->self), 1000);
    scene_free(&s);

    /* jitter: N(20, 5) ms arrivals; mean and spread near the truth */
    cfg = (fed_sim_config){.seed = 5, .link = {.latency_ms = 20, .jitter_ms = 5}};
    scene_new(&s, &cfg, 2, NULL);
    s.toys[0].start_sends = 4000;
    s.toys[0].target = 1;
    s.toys[1].mode = MODE_SINK; /* no echo traffic */
    assert_err(fed_sim_world_run_until(s.w, 1000), FED_OK);
    assert_int_equal(s.toys[1].requests, 4000);
    double sum = 0, sq = 0;
    for (int i = 0; i < 4000; i++) {
        double v = (double)s.toys[1].got_ms[i];
        sum += v;
        sq += v * v;
    }
    double mean = sum / 4000, sd = sqrt(sq / 4000 - mean * mean);
    /* got_ms is floored to whole ms: mean sits near 19.5 */
    assert_true(mean > 19.0 && mean < 20.1);
    assert_true(sd > 4.5 && sd < 5.5);
    scene_free(&s);
}

/* The latency floor: a jitter that would bring frames in at once brings
 * none in before the floor; the lookahead is the least floor over the
 * links (or a jitter-free link's latency); bytes_at counts by send time. */
static void test_floor_lookahead_bytes(void **state)
{
    fed_sim_config cfg = {.seed = 9, .link = {.latency_ms = 1, .jitter_ms = 10, .floor_ms = 3}};
    fed_sim_link fixed = {.latency_ms = 2.5};
    scene s;
    int below = 0, at_floor = 0;

    (void)state;
    scene_new(&s, &cfg, 3, NULL);
    s.toys[0].start_sends = 2000;
    s.toys[0].target = 1;
    s.toys[0].frame_len = 10;
    s.toys[1].mode = MODE_SINK;
    assert_int_equal(fed_sim_world_lookahead_us(s.w), 3000);
    assert_err(fed_sim_world_set_link(s.w, 2, 1, &fixed), FED_OK);
    assert_int_equal(fed_sim_world_lookahead_us(s.w), 2500);
    assert_err(fed_sim_world_run_until(s.w, 1000), FED_OK);
    assert_int_equal(s.toys[1].requests, 2000);
    for (int i = 0; i < 2000; i++) {
        below += s.toys[1].got_ms[i] < 3;
        at_floor += s.toys[1].got_ms[i] == 3;
    }
    assert_int_equal(below, 0);
    assert_true(at_floor > 600); /* N(1, 10) <= 3 ms: 58% of the draws */
    assert_int_equal(fed_sim_world_bytes_at(s.w, 0), 20000);
    assert_err(toy_send_byte(&s.toys[2], 1, 7, 100), FED_OK); /* at 1000 ms */
    assert_int_equal(fed_sim_world_bytes_at(s.w, 999999), 20000);
    assert_int_equal(fed_sim_world_bytes_at(s.w, 1000000), 20100);
    fed_sim_world_bytes_forget(s.w, 1000000);
    assert_int_equal(fed_sim_world_bytes_at(s.w, 5), 20000);
    assert_int_equal(fed_sim_world_bytes_at(s.w, 2000000), 20100);
    scene_free(&s);
}

static void run_loss(double loss, uint64_t seed, fed_sim_counters *c, int *received)
{
    fed_sim_config cfg = {.seed = seed, .link = {.latency_ms = 1, .loss = loss}};
    fed_sim_node_ops ops = toy_ops;
    scene s;

    ops.on_frame = NULL; /* requests unanswered: only one-way traffic counted */
    scene_new(&s, &cfg, 2, &ops);
    s.toys[0].start_sends = 10000;
    s.toys[0].target = 1;
    assert_err(fed_sim_world_run_idle(s.w), FED_OK);
    fed_sim_world_counters(s.w, c);
    *received = (int)c->frames_delivered;
    assert_balanced(s.w);
    scene_free(&s);
}

static void test_loss(void **state)
{
    fed_sim_counters c;
    int received;

    (void)state;
    run_loss(0.2, 11, &c, &received);
    assert_int_equal(c.frames_sent, 10000);
    /* binomial(10000, 0.2): sd 40; 5 sd either side */
    assert_in_range(c.dropped_loss, 1800, 2200);
    assert_int_equal(c.frames_dropped, c.dropped_loss);
    assert_int_equal(received + (int)c.dropped_loss, 10000);
    run_loss(0.0, 11, &c, &received);
    assert_int_equal(c.frames_dropped, 0);
    assert_int_equal(received, 10000);
    assert_int_equal(c.bytes_delivered, 10000);
}

/* ----------------------------------------------------------- partition -- */

static void test_partition_heals(void **state)
{
    fed_sim_config cfg = {.seed = 1, .link = {.latency_ms = 1}};
    const uint32_t groups[3] = {0, 0, 1};
    fed_sim_counters c;
    scene s;

    (void)state;
    scene_new(&s, &cfg, 3, NULL);
    for (int i = 0; i < 3; i++)
        s.toys[i].mode = MODE_HOLD;
    assert_err(fed_sim_world_add_partition(s.w, groups, 3, 100, 200), FED_OK);
    assert_err(fed_sim_world_add_partition(s.w, groups, 3, 200, 100), FED_ERR_INVAL);
    assert_err(fed_sim_world_run_until(s.w, 50), FED_OK);
    assert_err(toy_send_byte(&s.toys[0], 2, 1, 1), FED_OK); /* before: crosses */
    assert_err(fed_sim_world_run_until(s.w, 99), FED_OK);
    assert_err(toy_send_byte(&s.toys[0], 2, 2, 1), FED_OK); /* 99 ms: still open */
    assert_err(fed_sim_world_run_until(s.w, 100), FED_OK);
    assert_err(toy_send_byte(&s.toys[0], 2, 3, 1), FED_OK); /* 100 ms: cut */
    assert_err(fed_sim_world_run_until(s.w, 150), FED_OK);
    assert_err(toy_send_byte(&s.toys[2], 0, 4, 1), FED_OK); /* cut, other way */
    assert_err(toy_send_byte(&s.toys[0], 1, 5, 1), FED_OK); /* same group: fine */
    assert_err(fed_sim_world_run_until(s.w, 199), FED_OK);
    assert_err(toy_send_byte(&s.toys[0], 2, 6, 1), FED_OK); /* 199 ms: cut */
    assert_err(fed_sim_world_run_until(s.w, 200), FED_OK);
    assert_err(toy_send_byte(&s.toys[0], 2, 7, 1), FED_OK); /* healed */
    assert_err(fed_sim_world_run_until(s.w, 300), FED_OK);
    fed_sim_world_counters(s.w, &c);
    /* frames 3, 4, 6, and the reply to 2 (held from 100 to 105 ms) */
    assert_int_equal(c.dropped_partition, 4);
    assert_int_equal(s.toys[2].requests, 3);
    assert_int_equal(s.toys[2].got[0], 1);
    assert_int_equal(s.toys[2].got[1], 2);
    assert_int_equal(s.toys[2].got[2], 7);
    assert_int_equal(s.toys[1].requests, 1);
    assert_int_equal(s.toys[0].requests, 0);
    /* replies to held requests (at +5 ms): to 1, 5 and 7 */
    assert_int_equal(s.toys[0].replies, 3);
    assert_balanced(s.w);
    scene_free(&s);
}

/* -------------------------------------------------------------- timers -- */

static void test_timers(void **state)
{
    fed_sim_config cfg = {.seed = 1};
    fed_sim_node_ops ops = toy_ops;
    scene s;

    (void)state;
    ops.on_start = NULL;
    scene_new(&s, &cfg, 1, &ops);
    const fed_env *e = s.toys[0].env;
    assert_err(e->set_timer(e->self, 100, 1), FED_OK);
    assert_err(e->set_timer(e->self, 50, 2), FED_OK);
    assert_err(e->set_timer(e->self, 70, 3), FED_OK);
    assert_err(e->set_timer(e->self, 100, 4), FED_OK); /* ties with 1: set later */
    assert_err(e->cancel_timer(e->self, 3), FED_OK);
    assert_err(e->cancel_timer(e->self, 3), FED_ERR_NOTFOUND);
    assert_err(e->cancel_timer(e->self, 99), FED_ERR_NOTFOUND);
    assert_err(fed_sim_world_run_until(s.w, 60), FED_OK);
    assert_int_equal(s.toys[0].timers, 1);
    assert_int_equal(s.toys[0].timer_ids[0], 2);
    assert_int_equal(s.toys[0].timer_ms[0], 50);
    assert_err(e->set_timer(e->self, 120, 1), FED_OK); /* re-arm: 100 no more */
    assert_err(e->set_timer(e->self, 10, 5), FED_OK);  /* past: fires now */
    assert_err(fed_sim_world_run_idle(s.w), FED_OK);
    assert_int_equal(s.toys[0].timers, 4);
    assert_int_equal(s.toys[0].timer_ids[1], 5);
    assert_int_equal(s.toys[0].timer_ms[1], 60);
    assert_int_equal(s.toys[0].timer_ids[2], 4);
    assert_int_equal(s.toys[0].timer_ms[2], 100);
    assert_int_equal(s.toys[0].timer_ids[3], 1);
    assert_int_equal(s.toys[0].timer_ms[3], 120);
    assert_err(e->cancel_timer(e->self, 1), FED_ERR_NOTFOUND); /* fired */
    scene_free(&s);
}

/* ---------------------------------------------------------- ping-pong -- */

static void test_ping_pong(void **state)
{
    fed_sim_config cfg = {.seed = 3, .link = {.latency_ms = 4}};
    fed_sim_counters c;
    scene s;

    (void)state;
    scene_new(&s, &cfg, 2, NULL);
    s.toys[0].mode = MODE_PING;
    s.toys[0].target = 1;
    s.toys[0].pings_left = 50;
    s.toys[1].mode = MODE_ECHO;
    assert_err(fed_sim_world_run_idle(s.w), FED_OK);
    assert_int_equal(s.toys[1].requests, 50);
    assert_int_equal(s.toys[0].replies, 50);
    assert_int_equal(s.toys[0].requests, 0);
    assert_int_equal(s.toys[1].replies, 0);
    for (int i = 0; i < 50; i++) { /* the counter goes up by one per hop */
        assert_int_equal(s.toys[1].got[i], i);
        assert_int_equal(s.toys[1].got_ms[i], 4 + 8 * i);
    }
    fed_sim_world_counters(s.w, &c);
    assert_int_equal(c.frames_sent, 100);
    assert_int_equal(c.frames_delivered, 100);
    assert_int_equal(fed_sim_world_now_us(s.w), 400000);
    scene_free(&s);

    /* held requests answered later from a timer: still one reply each */
    scene_new(&s, &cfg, 2, NULL);
    s.toys[0].start_sends = 3;
    s.toys[0].target = 1;
    s.toys[1].mode = MODE_HOLD;
    assert_err(fed_sim_world_run_idle(s.w), FED_OK);
    assert_int_equal(s.toys[1].requests, 3);
    assert_int_equal(s.toys[0].replies, 3);
    assert_balanced(s.w);
    scene_free(&s);
}

/* ---------------------------------------------------------------- jobs -- */

#define JOB_NODES 4
#define JOB_PER 3

/* Each job's user points at its jtoy slot; fn writes the result. */
typedef struct jslot {
    fed_job job;
    int g;
    volatile int result;
} jslot;

static void slot_fn(fed_job *job)
{
    jslot *s = (jslot *)job;
    struct timespec ts = {0, (long)(JOB_NODES * JOB_PER - s->g) * 400000L};

    nanosleep(&ts, NULL);
    s->result = s->g * s->g + 1;
}

typedef struct jnode {
    const fed_env *env;
    uint32_t index;
    jslot slots[JOB_PER];
    int done;
} jnode;

static int jnode_start(void *ctx)
{
    jnode *n = ctx;
    const fed_env *e = n->env;

    for (int k = 0; k < JOB_PER; k++) {
        n->slots[k].job.fn = slot_fn;
        n->slots[k].job.user = n;
        n->slots[k].g = (int)n->index * JOB_PER + k;
    }
    assert_err(e->submit(e->self, &n->slots[0].job), FED_OK); /* no charge: t = 0 */
    e->charge(e->self, 2e6);                                   /* 2 ms at 1e6 flops/ms */
    assert_err(e->submit(e->self, &n->slots[1].job), FED_OK);
    assert_err(e->submit(e->self, &n->slots[2].job), FED_OK); /* same busy clock */
    return 0;
}

static int jnode_done(void *ctx, fed_job *job)
{
    jnode *n = ctx;
    jslot *s = (jslot *)job;

    assert_ptr_equal(job->user, n);
    assert_int_equal(s->result, s->g * s->g + 1); /* fn has finished */
    n->done++;
    return 0;
}

static void run_jobs(fed_pool *pool, trace_log *log, uint64_t *hash)
{
    fed_sim_config cfg = {.seed = 9, .pool = pool};
    fed_sim_node_ops ops = {.on_start = jnode_start, .on_job_done = jnode_done};
    jnode nodes[JOB_NODES];
    fed_sim_world *w;

    memset(nodes, 0, sizeof(nodes));
    memset(log, 0, sizeof(*log));
    assert_err(fed_sim_world_new(&cfg, &w), FED_OK);
    fed_sim_world_set_trace(w, trace_rec, log);
    for (uint32_t i = 0; i < JOB_NODES; i++) {
        fed_peer_id id;

        make_id(&id, i);
        assert_err(fed_sim_world_add_node(w, &id, &ops, &nodes[i], NULL), FED_OK);
        nodes[i].env = fed_sim_world_env(w, i);
        nodes[i].index = i;
    }
    assert_err(fed_sim_world_set_slowdown(w, 3, 2.0), FED_OK);
    assert_err(fed_sim_world_set_slowdown(w, 3, 0.0), FED_ERR_INVAL);
    assert_err(fed_sim_world_run_idle(w), FED_OK);
    for (int i = 0; i < JOB_NODES; i++)
        assert_int_equal(nodes[i].done, JOB_PER);
    *hash = fed_sim_world_trace_hash(w);
    fed_sim_world_free(w);
}

static void test_jobs_fixed_order(void **state)
{
    trace_log a, b;
    uint64_t ha, hb;
    fed_pool *pool;
    size_t j = 0;

    (void)state;
    assert_err(fed_pool_new(2, &pool), FED_OK);
    run_jobs(pool, &a, &ha);
    fed_pool_free(pool);
    run_jobs(NULL, &b, &hb);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.ev, b.ev, a.n * sizeof(a.ev[0]));
    assert_int_equal(ha, hb);
    /* expected: at t = 0 each start is followed by its own zero-cost job
     * (job completions sort before other events at equal time), then the
     * charged jobs by (time, node, seq) */
    for (uint32_t i = 0; i < JOB_NODES; i++) {
        assert_int_equal(a.ev[j].kind, FED_SIM_EV_START);
        assert_int_equal(a.ev[j++].node, i);
        assert_int_equal(a.ev[j].kind, FED_SIM_EV_JOB);
        assert_int_equal(a.ev[j].t_us, 0);
        assert_int_equal(a.ev[j].node, i);
        assert_int_equal(a.ev[j++].a, 0);
    }
    for (uint32_t i = 0; i < JOB_NODES - 1; i++) {
        for (uint64_t k = 1; k < JOB_PER; k++, j++) {
            assert_int_equal(a.ev[j].kind, FED_SIM_EV_JOB);
            assert_int_equal(a.ev[j].t_us, 2000);
            assert_int_equal(a.ev[j].node, i);
            assert_int_equal(a.ev[j].a, k);
        }
    }
    for (uint64_t k = 1; k < JOB_PER; k++, j++) { /* the straggler, twice slower */
        assert_int_equal(a.ev[j].t_us, 4000);
        assert_int_equal(a.ev[j].node, JOB_NODES - 1);
        assert_int_equal(a.ev[j].a, k);
    }
    assert_int_equal(j, a.n);
}

/* --------------------------------------------------------------- crash -- */

static void test_crash_restart(void **state)
{
    fed_sim_config cfg = {.seed = 1, .link = {.latency_ms = 10}};
    fed_sim_counters c;
    scene s;

    (void)state;
    scene_new(&s, &cfg, 2, NULL);
    toy *a = &s.toys[0], *b = &s.toys[1];
    b->mode = MODE_HOLD; /* replies 5 ms after each request */
    a->mode = MODE_HOLD;
    assert_err(fed_sim_world_run_until(s.w, 0), FED_OK);
    assert_err(toy_send_byte(a, 1, 1, 1), FED_OK); /* arrives at 10, held to 15 */
    assert_err(b->env->set_timer(b->env->self, 100, 7), FED_OK);
    assert_err(fed_sim_world_run_until(s.w, 12), FED_OK);
    assert_int_equal(b->requests, 1);
    assert_err(toy_send_byte(a, 1, 2, 1), FED_OK); /* in flight at the crash */
    fed_sim_world_crash(s.w, 1);
    assert_int_equal(b->crashes, 1);
    assert_false(fed_sim_world_node_up(s.w, 1));
    fed_sim_world_crash(s.w, 1); /* twice: nothing */
    assert_int_equal(b->crashes, 1);
    assert_err(b->env->send(b->env->self, &s.sh.ids[0], (const uint8_t *)"x", 1),
               FED_ERR_CLOSED);
    assert_err(toy_send_byte(a, 1, 3, 1), FED_OK); /* to a down node: dropped */
    assert_err(fed_sim_world_restart_at(s.w, 1, 50), FED_OK);
    assert_err(fed_sim_world_run_until(s.w, 200), FED_OK);
    assert_int_equal(b->restarts, 1);
    assert_int_equal(b->requests, 1); /* frames 2 and 3 never arrived */
    assert_int_equal(b->timers, 0);   /* held reply and timer 7 both gone */
    assert_err(b->env->cancel_timer(b->env->self, 7), FED_ERR_NOTFOUND);
    assert_int_equal(a->replies, 0);
    fed_sim_world_counters(s.w, &c);
    assert_int_equal(c.dropped_down, 2);

    /* after the restart it answers again */
    assert_err(toy_send_byte(a, 1, 4, 1), FED_OK);
    assert_err(fed_sim_world_run_until(s.w, 300), FED_OK);
    assert_int_equal(b->requests, 2);
    assert_int_equal(a->replies, 1);

    /* a reply to a requester that crashed meanwhile is dropped */
    assert_err(toy_send_byte(a, 1, 5, 1), FED_OK); /* held at b from 310 to 315 */
    assert_err(fed_sim_world_crash_at(s.w, 0, 312), FED_OK);
    assert_err(fed_sim_world_restart_at(s.w, 0, 313), FED_OK);
    assert_err(fed_sim_world_run_idle(s.w), FED_OK);
    assert_int_equal(a->crashes, 1);
    assert_int_equal(a->restarts, 1);
    assert_int_equal(b->timers, 2); /* b did reply */
    assert_int_equal(a->replies, 1);
    fed_sim_world_counters(s.w, &c);
    assert_int_equal(c.dropped_down, 3);

    /* in flight to a node that crashes and restarts before arrival: dropped */
    assert_err(toy_send_byte(a, 1, 6, 1), FED_OK); /* would arrive at +10 */
    assert_err(fed_sim_world_crash_at(s.w, 1, fed_sim_world_now_us(s.w) / 1000 + 2), FED_OK);
    assert_err(fed_sim_world_restart_at(s.w, 1, fed_sim_world_now_us(s.w) / 1000 + 3), FED_OK);
    assert_err(fed_sim_world_run_idle(s.w), FED_OK);
    assert_int_equal(b->requests, 3);
    fed_sim_world_counters(s.w, &c);
    assert_int_equal(c.dropped_down, 4);
    /* in flight from a node that crashes before arrival: dropped too */
    assert_err(toy_send_byte(a, 1, 7, 1), FED_OK);
    assert_err(fed_sim_world_crash_at(s.w, 0, fed_sim_world_now_us(s.w) / 1000 + 4), FED_OK);
    assert_err(fed_sim_world_run_idle(s.w), FED_OK);
    assert_int_equal(b->crashes, 2);
    assert_int_equal(b->restarts, 2);
    assert_int_equal(b->requests, 3);
    assert_false(fed_sim_world_node_up(s.w, 0));
    fed_sim_world_counters(s.w, &c);
    assert_int_equal(c.dropped_down, 5);
    assert_balanced(s.w);
    scene_free(&s);
}

/* A crash waits for the node's running jobs; none comes back. */
static int jcrash_start(void *ctx)
{
    jnode *n = ctx;

    n->slots[0].job.fn = slot_fn;
    n->slots[0].job.user = n;
    n->slots[0].g = 0;
    n->env->charge(n->env->self, 5e6);
    return n->env->submit(n->env->self, &n->slots[0].job);
}

static void test_crash_waits_for_jobs(void **state)
{
    fed_sim_config cfg = {.seed = 1};
    fed_sim_node_ops ops = {.on_start = jcrash_start, .on_job_done = jnode_done};
    fed_sim_world *w;
    fed_pool *pool;
    jnode n = {0};
    fed_peer_id id;
    fed_job bad = {0};

    (void)state;
    assert_err(fed_pool_new(2, &pool), FED_OK);
    cfg.pool = pool;
    assert_err(fed_sim_world_new(&cfg, &w), FED_OK);
    make_id(&id, 0);
    assert_err(fed_sim_world_add_node(w, &id, &ops, &n, NULL), FED_OK);
    assert_err(fed_sim_world_add_node(w, &id, &ops, &n, NULL), FED_ERR_EXISTS);
    n.env = fed_sim_world_env(w, 0);
    assert_err(n.env->submit(n.env->self, &bad), FED_ERR_INVAL);
    assert_err(fed_sim_world_run_until(w, 1), FED_OK);
    fed_sim_world_crash(w, 0);
    assert_int_equal(n.slots[0].result, 1); /* fn finished before on_crash */
    assert_err(n.env->submit(n.env->self, &n.slots[0].job), FED_ERR_CLOSED);
    assert_err(fed_sim_world_run_idle(w), FED_OK);
    assert_int_equal(n.done, 0);
    fed_sim_world_free(w);
    fed_pool_free(pool);
}

/* --------------------------------------------------------- determinism -- */

static uint64_t gossip_run(uint64_t seed, uint32_t nodes, int rounds, double loss,
                           double jitter, fed_sim_counters *c, int *replies, int *requests)
{
    fed_sim_config cfg = {.seed = seed,
                          .link = {.latency_ms = 30, .jitter_ms = jitter, .loss = loss}};
    scene s;
    uint64_t h;

    scene_new(&s, &cfg, nodes, NULL);
    for (uint32_t i = 0; i < nodes; i++) {
        s.toys[i].mode = MODE_GOSSIP;
        s.toys[i].gossip_rounds = rounds;
    }
    assert_err(fed_sim_world_run_idle(s.w), FED_OK);
    h = fed_sim_world_trace_hash(s.w);
    fed_sim_world_counters(s.w, c);
    *replies = *requests = 0;
    for (uint32_t i = 0; i < nodes; i++) {
        *replies += s.toys[i].replies;
        *requests += s.toys[i].requests;
        assert_int_equal(s.toys[i].gossip_rounds, 0);
    }
    assert_balanced(s.w);
    assert_int_equal(c->node_errors, 0);
    scene_free(&s);
    return h;
}

static void test_same_seed_same_trace(void **state)
{
    fed_sim_counters c1, c2, c3;
    int rp, rq;

    (void)state;
    uint64_t h1 = gossip_run(7, 50, 10, 0.1, 8, &c1, &rp, &rq);
    uint64_t h2 = gossip_run(7, 50, 10, 0.1, 8, &c2, &rp, &rq);
    uint64_t h3 = gossip_run(8, 50, 10, 0.1, 8, &c3, &rp, &rq);
    assert_int_equal(h1, h2);
    assert_memory_equal(&c1, &c2, sizeof(c1));
    assert_int_not_equal(h1, h3);
}

static void test_thousand_nodes(void **state)
{
    fed_sim_counters c;
    int replies, requests;

    (void)state;
    gossip_run(42, 1000, 10, 0.05, 10, &c, &replies, &requests);
    assert_int_equal(c.frames_sent, c.frames_delivered + c.frames_dropped);
    assert_int_equal(c.frames_delivered, (uint64_t)(replies + requests));
    /* every node sent 10 requests; each delivered request got one reply sent */
    assert_int_equal(c.frames_sent, 10000 + (uint64_t)requests);
    assert_int_equal(c.timers_fired, 11000);
    assert_true(c.dropped_loss > 0);
}

/* -------------------------------------------------------------- ranks -- */

/* core/comm.h between threads of this process: each call posts its part,
 * waits for every rank, reads the others', and waits again before the
 * parts may go. */
#define NRANKS_MAX 4

typedef struct fake_net {
    int size;
    pthread_barrier_t bar;
    uint8_t *const *send[NRANKS_MAX];
    const size_t *send_len[NRANKS_MAX];
    uint64_t min[NRANKS_MAX];
    const uint8_t *buf[NRANKS_MAX];
    size_t len[NRANKS_MAX];
    uint64_t *v[NRANKS_MAX];
} fake_net;

typedef struct fake_rank {
    fed_comm c;
    fake_net *net;
} fake_rank;

static fed_err fake_exchange(void *ctx, uint8_t *const *send, const size_t *send_len,
                             uint64_t *min, uint8_t **recv, size_t *recv_len)
{
    fake_rank *r = ctx;
    fake_net *n = r->net;
    int me = r->c.rank;
    size_t total = 0;

    n->send[me] = send;
    n->send_len[me] = send_len;
    n->min[me] = *min;
    pthread_barrier_wait(&n->bar);
    for (int k = 0; k < n->size; k++) {
        total += n->send_len[k][me];
        if (n->min[k] < *min)
            *min = n->min[k];
    }
    *recv = total ? fed_malloc(total) : NULL;
    *recv_len = 0;
    for (int k = 0; k < n->size && (*recv || !total); k++) {
        if (n->send_len[k][me])
            memcpy(*recv + *recv_len, n->send[k][me], n->send_len[k][me]);
        *recv_len += n->send_len[k][me];
    }
    pthread_barrier_wait(&n->bar);
    return total && !*recv ? FED_ERR_NOMEM : FED_OK;
}

static fed_err fake_allgather(void *ctx, const uint8_t *buf, size_t len, uint8_t **all,
                              size_t *all_len)
{
    fake_rank *r = ctx;
    fake_net *n = r->net;
    size_t total = 0;

    n->buf[r->c.rank] = buf;
    n->len[r->c.rank] = len;
    pthread_barrier_wait(&n->bar);
    for (int k = 0; k < n->size; k++)
        total += n->len[k];
    *all = total ? fed_malloc(total) : NULL;
    *all_len = 0;
    for (int k = 0; k < n->size && *all; k++) {
        if (n->len[k])
            memcpy(*all + *all_len, n->buf[k], n->len[k]);
        *all_len += n->len[k];
    }
    pthread_barrier_wait(&n->bar);
    return total && !*all ? FED_ERR_NOMEM : FED_OK;
}

static fed_err fake_allreduce(void *ctx, uint64_t *v, size_t count, fed_comm_op op)
{
    fake_rank *r = ctx;
    fake_net *n = r->net;
    uint64_t *mine = malloc(count * sizeof(*mine));

    if (!mine)
        return FED_ERR_NOMEM;
    memcpy(mine, v, count * sizeof(*mine));
    n->v[r->c.rank] = mine;
    pthread_barrier_wait(&n->bar);
    for (size_t i = 0; i < count; i++)
        for (int k = 0; k < n->size; k++) {
            uint64_t x = n->v[k][i];

            if (k == 0)
                v[i] = x;
            else if (op == FED_COMM_SUM)
                v[i] += x;
            else if (op == FED_COMM_MIN ? x < v[i] : x > v[i])
                v[i] = x;
        }
    pthread_barrier_wait(&n->bar);
    free(mine);
    return FED_OK;
}

/* One rank of a gossip scene: every node added (its own as toys, the
 * others as shadows), node 3 crashed at 150 ms and back at 700, then
 * 1.2 virtual seconds in steps of 100 ms. */
typedef struct rank_run {
    fake_rank fr;
    const fed_comm *comm; /* NULL: one process */
    uint32_t n;
    toy *toys;
    toy_shared sh;
    fed_sim_counters c;
    fed_err e;
} rank_run;

static void *rank_main(void *arg)
{
    rank_run *rr = arg;
    fed_sim_config cfg = {.seed = 11, .link = {.latency_ms = 2, .jitter_ms = 3, .floor_ms = 1,
                                               .loss = 0.05, .bytes_per_ms = 1000},
                          .comm = rr->comm};
    fed_sim_world *w = NULL;
    fed_err e;

    if ((e = fed_sim_world_new(&cfg, &w)) != FED_OK)
        goto out;
    for (uint32_t i = 0; i < rr->n && !e; i++) {
        toy *t = &rr->toys[i];

        if (!fed_sim_world_owns(w, i)) {
            e = fed_sim_world_add_remote(w, &rr->sh.ids[i], NULL);
            continue;
        }
        t->w = w;
        t->index = i;
        t->sh = &rr->sh;
        t->mode = MODE_GOSSIP;
        t->gossip_rounds = 8;
        if ((e = fed_sim_world_add_node(w, &rr->sh.ids[i], &toy_ops, t, NULL)) == FED_OK)
            t->env = fed_sim_world_env(w, i);
    }
    if (!e && (e = fed_sim_world_crash_at(w, 3, 150)) == FED_OK)
        e = fed_sim_world_restart_at(w, 3, 700);
    for (uint64_t t = 100; !e && t <= 1200; t += 100)
        e = fed_sim_world_run_until(w, t);
    if (!e)
        fed_sim_world_counters(w, &rr->c);
out:
    fed_sim_world_free(w);
    rr->e = e;
    return NULL;
}

/* The same gossip, crash and loss in one world and split over 2 and 3
 * ranks (threads here; MPI in fedsim): every node sees the same frames at
 * the same virtual times, and the counters summed over ranks are the same. */
static void test_ranks_same_as_one(void **state)
{
    enum { N = 24 };
    fed_peer_id ids[N];
    rank_run one;
    toy *want;

    (void)state;
    for (uint32_t i = 0; i < N; i++)
        make_id(&ids[i], i);
    memset(&one, 0, sizeof(one));
    one.n = N;
    one.toys = want = calloc(N, sizeof(*want));
    assert_non_null(want);
    one.sh = (toy_shared){ids, N};
    rank_main(&one);
    assert_err(one.e, FED_OK);
    assert_true(one.c.dropped_loss > 0 && one.c.dropped_down > 0);
    for (int size = 2; size <= 3; size++) {
        fake_net net;
        rank_run rr[NRANKS_MAX];
        pthread_t th[NRANKS_MAX];
        fed_sim_counters sum;

        memset(&net, 0, sizeof(net));
        memset(rr, 0, sizeof(rr));
        memset(&sum, 0, sizeof(sum));
        net.size = size;
        assert_int_equal(pthread_barrier_init(&net.bar, NULL, (unsigned)size), 0);
        for (int k = 0; k < size; k++) {
            rr[k].fr.c = (fed_comm){.rank = k, .size = size, .ctx = &rr[k].fr,
                                        .exchange = fake_exchange,
                                        .allgather = fake_allgather,
                                        .allreduce = fake_allreduce};
            rr[k].fr.net = &net;
            rr[k].comm = &rr[k].fr.c;
            rr[k].n = N;
            rr[k].toys = calloc(N, sizeof(toy));
            assert_non_null(rr[k].toys);
            rr[k].sh = (toy_shared){ids, N};
            assert_int_equal(pthread_create(&th[k], NULL, rank_main, &rr[k]), 0);
        }
        for (int k = 0; k < size; k++)
            assert_int_equal(pthread_join(th[k], NULL), 0);
        pthread_barrier_destroy(&net.bar);
        for (int k = 0; k < size; k++) {
            const uint64_t *a = (const uint64_t *)&rr[k].c;
            uint64_t *b = (uint64_t *)&sum;

            assert_err(rr[k].e, FED_OK);
            for (size_t f = 0; f < sizeof(sum) / sizeof(uint64_t); f++)
                b[f] += a[f];
        }
        for (uint32_t i = 0; i < N; i++) {
            const toy *got = &rr[i % (uint32_t)size].toys[i];

            assert_int_equal(got->requests, want[i].requests);
            assert_int_equal(got->replies, want[i].replies);
            assert_int_equal(got->timers, want[i].timers);
            assert_int_equal(got->crashes, want[i].crashes);
            assert_memory_equal(got->got, want[i].got, (size_t)want[i].requests);
            assert_memory_equal(got->got_ms, want[i].got_ms,
                                (size_t)want[i].requests * sizeof(uint64_t));
        }
        assert_memory_equal(&sum, &one.c, sizeof(sum));
        printf("%d ranks: the %d nodes saw what one world showed them (%llu frames, %llu lost, "
               "%llu to a crashed node)\n", size, N, (unsigned long long)sum.frames_sent,
               (unsigned long long)sum.dropped_loss, (unsigned long long)sum.dropped_down);
        for (int k = 0; k < size; k++)
            free(rr[k].toys);
    }
    free(want);
}

/* ----------------------------------------------------- alloc failures -- */

static void test_alloc_failures(void **state)
{
    (void)state;
    for (unsigned long nth = 1; nth < 40; nth++) {
        fed_sim_config cfg = {.seed = 1, .link = {.latency_ms = 1}};
        const uint32_t groups[2] = {0, 1};
        fed_sim_world *w = NULL;
        toy toys[2];
        toy_shared sh;
        fed_peer_id ids[2];
        fed_err e;

        memset(toys, 0, sizeof(toys));
        sh.ids = ids;
        sh.n = 2;
        fed_alloc_fail_nth(nth, 1);
        e = fed_sim_world_new(&cfg, &w);
        if (e) {
            assert_err(e, FED_ERR_NOMEM);
            continue;
        }
        for (uint32_t i = 0; i < 2 && !e; i++) {
            make_id(&ids[i], i);
            toys[i].sh = &sh;
            toys[i].index = i;
            e = fed_sim_world_add_node(w, &ids[i], &toy_ops, &toys[i], NULL);
            if (!e)
                toys[i].env = fed_sim_world_env(w, i);
        }
        if (!e)
            e = fed_sim_world_add_partition(w, groups, 2, 5, 6);
        if (!e)
            e = toys[0].env->send(toys[0].env->self, &ids[1], (const uint8_t *)"ab", 2);
        if (!e)
            e = toys[0].env->set_timer(toys[0].env->self, 3, 1);
        fed_alloc_fail_nth(0, 0);
        if (e)
            assert_err(e, FED_ERR_NOMEM);
        fed_sim_world_free(w);
    }
    fed_alloc_fail_nth(0, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order_and_ties),
        cmocka_unit_test(test_floor_lookahead_bytes),
        cmocka_unit_test(test_latency_bandwidth_jitter),
        cmocka_unit_test(test_loss),
        cmocka_unit_test(test_partition_heals),
        cmocka_unit_test(test_timers),
        cmocka_unit_test(test_ping_pong),
        cmocka_unit_test(test_jobs_fixed_order),
        cmocka_unit_test(test_crash_restart),
        cmocka_unit_test(test_crash_waits_for_jobs),
        cmocka_unit_test(test_same_seed_same_trace),
        cmocka_unit_test(test_thousand_nodes),
        cmocka_unit_test(test_ranks_same_as_one),
        cmocka_unit_test(test_alloc_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
