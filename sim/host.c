/* host.c - a simulated machine: keeps a node's identity and database across
 * crashes and plugs fed_node into the world's callbacks. Owns the arena,
 * the store and the node; never touches another host. */
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "sim/host.h"

struct fed_sim_host {
    fed_peer_id id;
    fed_crypto_arena *arena;
    fed_store *store;
    fed_node *node;
    fed_node_config cfg;
    fed_sim_world *w;
    const fed_env *env;
    uint32_t index;
    uint32_t start_failures;
};

fed_err fed_sim_host_new(fed_rng *rng, fed_sim_host **out)
{
    return fed_sim_host_new_slots(rng, 0, out);
}

fed_err fed_sim_host_new_slots(fed_rng *rng, uint32_t slots, fed_sim_host **out)
{
    fed_sim_host *h = fed_calloc(1, sizeof *h);
    fed_crypto_arena_cfg ac;
    fed_err e;

    *out = NULL;
    if (!h)
        return FED_ERR_NOMEM;
    fed_crypto_arena_cfg_default(&ac);
    if (slots > ac.slots)
        ac.slots = slots;
    if ((e = fed_crypto_arena_new(&ac, &h->arena)) != FED_OK ||
        (e = fed_crypto_arena_generate(h->arena, fed_rng_random, rng)) != FED_OK) {
        fed_sim_host_free(h);
        return e;
    }
    memcpy(h->id.key, fed_crypto_arena_pubkey(h->arena), 32);
    *out = h;
    return FED_OK;
}

void fed_sim_host_free(fed_sim_host *h)
{
    if (!h)
        return;
    fed_node_free(h->node);
    fed_store_close(h->store);
    fed_crypto_arena_free(h->arena);
    fed_free(h);
}

const fed_peer_id *fed_sim_host_id(const fed_sim_host *h) { return &h->id; }
uint32_t fed_sim_host_index(const fed_sim_host *h) { return h->index; }
fed_node *fed_sim_host_node(const fed_sim_host *h) { return h->node; }
fed_store *fed_sim_host_store(const fed_sim_host *h) { return h->store; }
fed_crypto_arena *fed_sim_host_arena(const fed_sim_host *h) { return h->arena; }
uint32_t fed_sim_host_start_failures(const fed_sim_host *h) { return h->start_failures; }

static uint64_t host_wall_s(void *ctx)
{
    const fed_env *env = ctx;

    return env->wall_s(env->self);
}

static int boot(fed_sim_host *h)
{
    fed_err e = fed_node_new(&h->cfg, h->env, &h->node);

    if (e == FED_OK && (e = fed_node_start(h->node)) != FED_OK) {
        fed_node_free(h->node);
        h->node = NULL;
    }
    if (e != FED_OK) {
        h->start_failures++;
        fed_log(FED_LOG_ERROR, "sim: node %u failed to start: %s", h->index, fed_strerror(e));
    }
    return e;
}

static int on_start(void *ctx) { return boot(ctx); }

static int on_frame(void *ctx, fed_req *req, const uint8_t *frame, size_t len)
{
    fed_sim_host *h = ctx;

    if (!h->node) {
        if (req)
            (void)h->env->reply(h->env->self, req, NULL, 0);
        return FED_ERR_CLOSED;
    }
    return fed_node_on_frame(h->node, req, frame, len);
}

static int on_timer(void *ctx, uint32_t id)
{
    fed_sim_host *h = ctx;

    return h->node ? fed_node_on_timer(h->node, id) : FED_ERR_CLOSED;
}

static int on_job_done(void *ctx, fed_job *job)
{
    fed_sim_host *h = ctx;

    return h->node ? fed_node_on_job_done(h->node, job) : FED_ERR_CLOSED;
}

/* What kill -9 leaves: no process, the database as last committed. */
static void on_crash(void *ctx)
{
    fed_sim_host *h = ctx;

    fed_node_free(h->node);
    h->node = NULL;
    fed_store_rollback(h->store);
}

static int on_restart(void *ctx)
{
    fed_sim_host *h = ctx;
    fed_err e = fed_store_restart(h->store);

    if (e != FED_OK) {
        h->start_failures++;
        fed_log(FED_LOG_ERROR, "sim: node %u: its database would not reopen: %s", h->index,
                fed_strerror(e));
        return e;
    }
    return boot(h);
}

static const fed_sim_node_ops host_ops = {
    .on_start = on_start,
    .on_frame = on_frame,
    .on_timer = on_timer,
    .on_job_done = on_job_done,
    .on_crash = on_crash,
    .on_restart = on_restart,
};

fed_err fed_sim_host_attach(fed_sim_host *h, fed_sim_world *w, const fed_node_config *cfg,
                            const char *db_path)
{
    fed_store_opts so;
    fed_err e;

    if (h->w)
        return FED_ERR_EXISTS;
    h->cfg = *cfg;
    h->cfg.arena = h->arena;
    if ((e = fed_sim_world_add_node(w, &h->id, &host_ops, h, &h->index)) != FED_OK)
        return e;
    h->w = w;
    h->env = fed_sim_world_env(w, h->index);
    fed_store_opts_default(&so);
    so.sync = FED_STORE_SYNC_OFF;
    if (!db_path) { /* thousands of in-memory databases: 4 KiB pages, not 64 KiB, */
        so.page_size = 4096;
        so.flags |= FED_STORE_GIVE_BACK;
        so.keep_last = 1; /* and one checkpoint's blob: a restart reads the newest (a
                             blob is a copy of the node's state: a peer's push-sum
                             totals; each one kept costs its pages for good) */
    }
    so.wall_s = host_wall_s;
    so.clock_ctx = (void *)h->env;
    e = fed_store_open(db_path ? db_path : ":memory:", &so, &h->store);
    h->cfg.store = h->store;
    return e;
}
