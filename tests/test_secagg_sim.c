/* test_secagg_sim.c - secure aggregation through whole rounds in the
 * simulated world: an aggregator and 20 clients on real Fashion-MNIST
 * shards. A client that dies before each stage's message (one test per
 * stage) leaves a round that still commits the right sum, and the right
 * exact sum of 64-bit integers carried beside the delta; too many deaths
 * fail the try closed (no update) and the next round commits; a client the aggregator
 * names dropped refuses to reveal anything; a cheating aggregator (the
 * sa_tamper test hook: survivor lists that differ between
 * neighbours, a key replayed from an earlier round, another key list and
 * so another graph for half the clients) never obtains both
 * kinds of share of one client; a try that fails once the clients revealed
 * their shares (a bad input, an aggregator restarted before its commit)
 * closes the round with no update and never asks them again, and a failed
 * commit keeps the unmasked sum; with 16 KiB frames the masked inputs
 * stream (CHUNK frames) and the model is bit for bit the one in whole
 * frames, also over links losing 10% of frames, and a stream announcing
 * the wrong size is refused at its first frame; FedAvg with secure aggregation ends 5
 * rounds within 0.3 point of the plain run; a client's masked words are
 * uniform (chi-square) and uncorrelated with its true delta; a model's
 * non-trained statistics are a segment of their own at their own range
 * (--secagg-stats-range), not clamped by the delta's (batch norm's running
 * variance of 30 too, its counter never sent); a tensor kept at the
 * sites (--local-layers) is in no masked input. Skips without the data. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/err.h"
#include "core/pool.h"
#include "gossip/wire_hooks.h"
#include "model/backend.h"
#include "model/colstats.h"
#include "model/data.h"
#include "node/dp_account.h"
#include "node/node.h"
#include "node/node_impl.h" /* NODE_TIMER_ROUND, the aggregator's retry */
#include "node/layout.h"
#include "node/secagg_impl.h" /* fedi_node_sa_agg_misfit */
#include "node/secagg_msg_impl.h"
#include "node/test_hooks.h"
#include "privacy/rdp.h"
#include "sim/host.h"
#include "sim/world.h"
#include "storage/store.h"
#include "storage/test_hooks.h"
#include "tests/support/support.h"

#define NCL 20
#define MAXR 6
#define DPS_CLIENTS 10 /* DP-SGD with secure aggregation */
#define DPS_ROUNDS 3
#define DPS_N 1200

typedef struct fixture {
    fed_dataset *train, *test;
    fed_backend *be;
    fed_pool *pool;
} fixture;

typedef struct scen scen;
struct scen {
    const fixture *fx;
    fed_sim_world *w;
    fed_crypto_allow *allow;
    fed_sim_host *agg, *cl[NCL];
    uint32_t *idx[NCL];
    size_t nidx[NCL];
    int ncl;
    size_t nparams;
    /* set before build: DP-SGD at every client (dp_noise its z, clip 1), and
       DP-FedAvg on the aggregator (dp_client_clip its C, dp_client_noise z) */
    int dp_sgd;
    float dp_noise;
    double dp_client_clip, dp_client_noise, fraction; /* fraction 0: the default */
    int nclients;            /* 0: NCL */
    int commits[MAXR + 1];
    fed_node_round_info info[MAXR + 1];
    /* deaths: the first drop_count clients die before sending drop_type in
       round drop_round */
    uint8_t drop_type;
    uint64_t drop_round;
    int drop_count;
    int dropped[NCL];
    /* what the aggregator took: UNMASK kinds per (round, try, owner key) */
    int both_kinds;          /* a client whose two kinds of share both came */
    uint8_t kind_seen[MAXR + 1][4][NCL]; /* by owner's client index: bit kind */
    int unmask_from[NCL];    /* UNMASK requests taken, by sender */
    int shares_from[NCL];    /* SHARES requests taken, by sender */
    int narrow0;             /* client 0's allow-list lacks client 5 */
    int bad_input;           /* client 3's first masked input pushed out of range */
    int drop_late;           /* the deaths only once some shares were revealed */
    int any_unmask;
    int unmask_in[MAXR + 1][NCL]; /* UNMASK requests taken, by round and sender */
    /* the aggregator's model: before round 1 (params0) and once round 1
       committed (params1), when keep_params is set */
    int keep_params;
    float *params0, *params1;
    float *ctl1;             /* SCAFFOLD: the aggregator's c after round 1 */
    const char *strategy;    /* the aggregator's (NULL: fedavg) */
    uint32_t max_steps0;     /* client 0's --max-steps (0: none) */
    /* the aggregator's store: writes fail (a full disk) from the moment its
       try's first UNMASK is in (without secure aggregation: from the first
       DELTA a client sends) until the round timer retries (disk_full 1
       armed, 2 full, 3 cleared) */
    int disk_full;
    int crash_agg;           /* 1: the aggregator dies at round 1's first revealed
                                share and restarts 2 s later (2: done) */
    fed_crypto_allow *allow0;
    int consist_from[NCL];
    /* cheating */
    int cheat;               /* 1: a victim named dropped to itself; 2: to half its
                                neighbours; 3: a round-1 key replayed in round 2;
                                5: client 0 shown a key list of 2 (itself and one);
                                6: a survivor list of 2 (itself and one) */
    int victim;
    sa_key_entry old_key;    /* the victim's round-1 keys */
    int have_old;
    int replayed;            /* KEYS answers sent with the replayed key */
    int graphs_shown;        /* KEYS answers with another list (cheat 4) */
    uint64_t round_now;
    /* masked words and true delta of client 0, round 1 */
    uint32_t *masked0;
    float *delta0;
    size_t words0;
    /* streamed masked inputs: every node's max frame (0: the default), and
       what the clients sent (CHUNK data frames; SA_MASKED stream firsts) */
    size_t max_frame;
    uint32_t rx_streams; /* the aggregator's reassemblies at once (0: 4) */
    int chunks_out, masked_streams, reasks;
    int masked_whole;        /* SA_MASKED frames carrying a whole masked input */
    /* a client whose first CHUNK data frame of round 1 is lost (index + 1;
       0: none), and the stream first frames it sent after that loss */
    int lose_chunk, chunk_lost, restreams;
    /* a client that announces a masked input of the wrong size in round 1
       (liar + 1; 0: none): its own stream is held back (lie 1) until the
       test sends the bad one in its place (lie 2); its first frame goes out
       (lie_out), nothing of round 1's masked stage after it */
    int liar, lie, lie_out;
    /* clients 0 .. client_secagg - 1 run with --secagg (a requirement on a
       client); the DELTA and LEAVE frames each client sent */
    int client_secagg;
    int five0;               /* client 0's data has 12 classes (the model 10) */
    fed_dataset five;
    /* crash_agg 3: the aggregator dies at round 1's first SHARES request
       and restarts 2 s later (at restart_ms; 4: done); when the restarted
       process first started a round (ms; 0: not yet) */
    uint64_t restart_ms, model_after_ms;
    int delta_from[NCL], leave_from[NCL];
    uint64_t lie_epoch;
    uint8_t *lie_vec;
    fed_node_test_hooks agg_hooks; /* sa_hook, ctx this scen */
    fed_node_test_hooks cl0_hooks; /* record_delta0, ctx this scen */
    /* integers summed exactly beside the delta (cfg.secagg.ints): SIM_INTS
       of them when ints is set, client c's from client_ints; what the
       aggregator unmasked, by round, and over how many clients */
    int ints;
    struct int_src {
        struct scen *s;
        int c;
    } isrc[NCL];
    uint64_t isum[MAXR + 1][8];
    uint32_t im[MAXR + 1];
    int int_sums[MAXR + 1];
    /* the shared-statistics pass (stats set): client c's STATS_COLS columns
       of STATS_ROWS(c) values, its contribution, and the pooled mean and
       std each node was told to standardize with (index NCL: the
       aggregator), how often */
    int stats;
    uint64_t stats_min;      /* the aggregator's minimum count */
    uint32_t eval_every;     /* the aggregator's --eval-every (0: none) */
    double *sx[NCL];
    int64_t *sl[NCL];
    struct int_src ssrc[NCL + 1];
    double got_mean[NCL + 1][8], got_std[NCL + 1][8];
    int restd[NCL + 1];
    /* tensors every node marks as non-trained statistics (NULL: none), the
       aggregator's --secagg-range and --secagg-max-weight (0: defaults) */
    const char *stats_tensors;
    const char *local_layers; /* the aggregator's --local-layers (NULL: none) */
    double range, max_weight;
    const char *spec;        /* the model (NULL: logreg) */
    const float *init;       /* the aggregator's first parameters (NULL: its seed's) */
    fed_node_test_hooks mark_hooks; /* mark_stats, ctx this scen (clients > 0) */
};
#define SIM_INTS 5
#define STATS_COLS 5
#define STATS_ROWS(c) (40 + 7 * (size_t)(c))

static int setup(void **state)
{
    fixture *fx = calloc(1, sizeof *fx);

    if (!fx)
        return -1;
    *state = fx;
    if (fed_backend_cpu_new(1, &fx->be) != FED_OK || fed_pool_new(2, &fx->pool) != FED_OK)
        return -1;
    fed_test_fashion_open(&fx->train, &fx->test);
    return 0;
}

static int teardown(void **state)
{
    fixture *fx = *state;

    fed_data_free(fx->train);
    fed_data_free(fx->test);
    fed_pool_free(fx->pool);
    fed_backend_free(fx->be);
    free(fx);
    return 0;
}

static int client_of(const scen *s, const uint8_t key[32])
{
    for (int i = 0; i < s->ncl; i++)
        if (!memcmp(fed_sim_host_id(s->cl[i])->key, key, 32))
            return i;
    return -1;
}

static int client_at(const scen *s, uint32_t node)
{
    for (int i = 0; i < s->ncl; i++)
        if (fed_sim_host_index(s->cl[i]) == node)
            return i;
    return -1;
}

static void on_round(void *ctx, const fed_node *n, const fed_node_round_info *r)
{
    scen *s = ctx;

    if (fed_node_get_role(n) != FED_NODE_AGGREGATOR || r->round > MAXR)
        return;
    s->info[r->round] = *r;
    s->commits[r->round]++;
    if (s->keep_params && r->round == 1 && !s->params1) {
        s->params1 = malloc(fed_node_nparams(n) * sizeof(float));
        assert_int_equal(fed_node_get_params(n, s->params1), FED_OK);
        if (fedi_node_agg_scaffold_control(n)) {
            s->ctl1 = malloc(fed_node_nparams(n) * sizeof(float));
            memcpy(s->ctl1, fedi_node_agg_scaffold_control(n),
                   fed_node_nparams(n) * sizeof(float));
        }
    }
}

/* The deaths: a planned client's request of drop_type never leaves, and
 * it crashes at once (it does not come back). */
static int drop_filter(void *ctx, uint32_t node, const uint8_t *frame, size_t len)
{
    scen *s = ctx;
    int c;

    if (len >= FED_WIRE_HEADER_BYTES && (c = client_at(s, node)) >= 0) {
        uint8_t type = frame[FED_WIRE_OFF_TYPE];
        uint16_t flags = fed_get_u16le(frame + FED_WIRE_OFF_FLAGS);

        s->delta_from[c] += type == FED_WIRE_DELTA;
        s->leave_from[c] += type == FED_WIRE_LEAVE;
        s->chunks_out += type == FED_WIRE_CHUNK && flags == FED_WIRE_FLAG_DATA;
        if (s->disk_full == 1 && type == FED_WIRE_DELTA) { /* the round's commit will fail */
            fedi_store_set_disk_full(fed_sim_host_store(s->agg), 1);
            s->disk_full = 2;
        }
        s->masked_streams += type == FED_WIRE_SA_MASKED && (flags & FED_WIRE_FLAG_STREAM);
        /* a masked stage's request asked again once its stream was out: an
           empty SA_MASKED (a whole masked input is over 30 KB) */
        s->reasks += type == FED_WIRE_SA_MASKED && !flags && len < 1024;
        s->masked_whole += type == FED_WIRE_SA_MASKED && !flags && len >= 1024;
        if (s->lose_chunk && c == s->lose_chunk - 1 &&
            fed_get_u64le(frame + FED_WIRE_OFF_ROUND) == 1) {
            s->restreams += s->chunk_lost && type == FED_WIRE_SA_MASKED &&
                            (flags & FED_WIRE_FLAG_STREAM);
            if (!s->chunk_lost && type == FED_WIRE_CHUNK && flags == FED_WIRE_FLAG_DATA) {
                s->chunk_lost = 1; /* its last chunk: lost on the way */
                return 1;
            }
        }
        if (s->liar && c == s->liar - 1 && fed_get_u64le(frame + FED_WIRE_OFF_ROUND) == 1 &&
            (type == FED_WIRE_SA_MASKED ||
             (type == FED_WIRE_CHUNK && flags == FED_WIRE_FLAG_DATA))) {
            if (s->lie == 2 && !s->lie_out) { /* the bad stream's first frame */
                s->lie_out = 1;
                return 0;
            }
            if (s->lie == 0) { /* its own masked input never leaves */
                assert_true(type == FED_WIRE_SA_MASKED && (flags & FED_WIRE_FLAG_STREAM));
                s->lie = 1;
                s->lie_epoch = fed_get_u64le(frame + FED_WIRE_OFF_RECIPIENT_EPOCH);
            }
            return 1; /* nor anything after the lie */
        }
    }
    if (len < FED_WIRE_HEADER_BYTES || !s->drop_count || frame[FED_WIRE_OFF_TYPE] != s->drop_type ||
        fed_get_u64le(frame + FED_WIRE_OFF_ROUND) != s->drop_round ||
        (s->drop_late && !s->any_unmask))
        return 0;
    c = client_at(s, node);
    if (c < 0 || c >= s->drop_count || s->dropped[c])
        return 0;
    s->dropped[c] = 1;
    assert_int_equal(fed_sim_world_crash_at(s->w, node, fed_sim_world_now_us(s->w) / 1000),
                     FED_OK);
    return 1;
}

/* Neighbour order is the list's: the owner's list index -> client index,
 * through the key list the aggregator sent (kept from its KEYS answer). */
typedef struct list_keep {
    uint8_t ids[NCL][32];
    uint32_t n;
} list_keep;
static list_keep g_list; /* the running try's key list (one scenario at a time) */

static void sa_hook(void *ctx, int inbound, uint8_t type, const uint8_t key[32], uint8_t *vec,
                    size_t *lenp, uint32_t *count)
{
    scen *s = ctx;
    int from = client_of(s, key);
    size_t len = *lenp;

    if (!inbound && type == FED_WIRE_SA_KEYS && s->cheat == 4 && s->round_now == 1 &&
        from % 2 == 0 && len >= 3 * SA_KEY_ENTRY_BYTES && s->graphs_shown < NCL / 2) {
        /* another graph for half the clients: the list without its last
           entry (or the one before, when the last is the recipient) */
        size_t last = len / SA_KEY_ENTRY_BYTES - 1;

        if (client_of(s, vec + last * SA_KEY_ENTRY_BYTES) == from) {
            memmove(vec + (last - 1) * SA_KEY_ENTRY_BYTES, vec + last * SA_KEY_ENTRY_BYTES,
                    SA_KEY_ENTRY_BYTES);
        }
        *lenp = len - SA_KEY_ENTRY_BYTES;
        *count = *count - 1;
        s->graphs_shown++;
        return;
    }

    if (!inbound && type == FED_WIRE_SA_KEYS && s->cheat == 5 && from == 0 &&
        len >= 2 * SA_KEY_ENTRY_BYTES) {
        /* a list of two, both signatures good: client 0's own entry and the
           first other (entries keep their order) */
        size_t own = 0, other = 0, n = len / SA_KEY_ENTRY_BYTES;
        uint8_t keep[2 * SA_KEY_ENTRY_BYTES];

        while (own < n && client_of(s, vec + own * SA_KEY_ENTRY_BYTES) != 0)
            own++;
        other = own == 0 ? 1 : 0;
        assert_true(own < n);
        memcpy(keep, vec + (own < other ? own : other) * SA_KEY_ENTRY_BYTES, SA_KEY_ENTRY_BYTES);
        memcpy(keep + SA_KEY_ENTRY_BYTES, vec + (own < other ? other : own) * SA_KEY_ENTRY_BYTES,
               SA_KEY_ENTRY_BYTES);
        memcpy(vec, keep, sizeof keep);
        *lenp = sizeof keep;
        *count = 2;
        return;
    }
    if (!inbound && type == FED_WIRE_SA_KEYS) {
        g_list.n = (uint32_t)(len / SA_KEY_ENTRY_BYTES);
        for (uint32_t i = 0; i < g_list.n && i < NCL; i++)
            memcpy(g_list.ids[i], vec + (size_t)i * SA_KEY_ENTRY_BYTES, 32);
        if (s->cheat == 3) {
            for (uint32_t i = 0; i < g_list.n; i++) {
                uint8_t *p = vec + (size_t)i * SA_KEY_ENTRY_BYTES;

                if (client_of(s, p) != s->victim)
                    continue;
                if (s->round_now == 1 && !s->have_old) { /* kept for later */
                    memcpy(s->old_key.mask_pk, p + 32, 32);
                    memcpy(s->old_key.enc_pk, p + 64, 32);
                    memcpy(s->old_key.sig, p + 96, 64);
                    s->have_old = 1;
                } else if (s->round_now == 2 && s->have_old && s->replayed < NCL) {
                    /* replayed in round 2's first try (every recipient) */
                    s->replayed++;
                    memcpy(p + 32, s->old_key.mask_pk, 32);
                    memcpy(p + 64, s->old_key.enc_pk, 32);
                    memcpy(p + 96, s->old_key.sig, 64);
                }
            }
        }
        return;
    }
    if (!inbound && type == FED_WIRE_SA_MASKED && s->cheat == 6 && from == 0 &&
        s->round_now == 1) {
        /* client 0 and the first other survivor only */
        int kept = 0;

        for (uint32_t i = 0; i < g_list.n && i < len; i++) {
            if (client_of(s, g_list.ids[i]) == 0)
                continue;
            if (vec[i] && !kept)
                kept = 1;
            else
                vec[i] = 0;
        }
        return;
    }
    if (!inbound && type == FED_WIRE_SA_MASKED && (s->cheat == 1 || s->cheat == 2)) {
        /* the survivor list each client sees: the victim named dropped to
           itself (1), or to every other recipient (2) */
        for (uint32_t i = 0; i < g_list.n && i < len; i++) {
            if (client_of(s, g_list.ids[i]) != s->victim)
                continue;
            if ((s->cheat == 1 && from == s->victim) || (s->cheat == 2 && from % 2 == 0))
                vec[i] = 0;
        }
        return;
    }
    if (!inbound)
        return;
    if (type == FED_WIRE_SA_MASKED && from == 0 && s->round_now == 1 && !s->masked0) {
        s->words0 = len / 4;
        s->masked0 = malloc(len);
        for (size_t w = 0; w < s->words0; w++)
            s->masked0[w] = fed_get_u32le(vec + 4 * w);
    }
    if (type == FED_WIRE_SA_MASKED && from == 3 && s->bad_input == 1 && len >= 4) {
        fed_put_u32le(vec, fed_get_u32le(vec) + 0x80000000u); /* the sum out of range */
        s->bad_input = 2;
    }
    if (type == FED_WIRE_SA_CONSIST && from >= 0)
        s->consist_from[from]++;
    if (type == FED_WIRE_SA_SHARES && from >= 0)
        s->shares_from[from]++;
    if (type == FED_WIRE_SA_SHARES && s->crash_agg == 3 && s->round_now == 1) {
        uint64_t now = fed_sim_world_now_us(s->w) / 1000;

        assert_int_equal(fed_sim_world_crash_at(s->w, 0, now), FED_OK);
        assert_int_equal(fed_sim_world_restart_at(s->w, 0, now + 2000), FED_OK);
        s->restart_ms = now + 2000;
        s->crash_agg = 4;
    }
    if (type == FED_WIRE_SA_UNMASK && from >= 0) {
        s->unmask_from[from]++;
        if (s->round_now <= MAXR)
            s->unmask_in[s->round_now][from]++;
        if (s->crash_agg == 1 && s->round_now == 1) {
            uint64_t now = fed_sim_world_now_us(s->w) / 1000;

            assert_int_equal(fed_sim_world_crash_at(s->w, 0, now), FED_OK);
            assert_int_equal(fed_sim_world_restart_at(s->w, 0, now + 2000), FED_OK);
            s->crash_agg = 2;
        }
        if (s->disk_full == 1) { /* the sum's commit will fail */
            fedi_store_set_disk_full(fed_sim_host_store(s->agg), 1);
            s->disk_full = 2;
        }
        s->any_unmask = 1;
        if (getenv("SA_DEBUG"))
            fprintf(stderr, "unmask from %d round %llu (%zu bytes)\n", from,
                    (unsigned long long)s->round_now, len);
        for (size_t at = 0; at + SA_UNMASK_ENTRY_BYTES <= len; at += SA_UNMASK_ENTRY_BYTES) {
            uint32_t owner = fed_get_u32le(vec + at);
            uint8_t kind = vec[at + 4];
            int oc = owner < g_list.n ? client_of(s, g_list.ids[owner]) : -1;
            uint64_t r = s->round_now;

            if (oc < 0 || r > MAXR)
                continue;
            s->kind_seen[r][0][oc] |= (uint8_t)(1u << kind);
            if ((s->kind_seen[r][0][oc] & 6) == 6)
                s->both_kinds++;
        }
    }
}

/* s->stats_tensors' tensors marked as a norm layer's running statistics. */
static void mark_stats(void *ctx, fed_model *m)
{
    const scen *s = ctx;

    if (s->stats_tensors)
        assert_true(fed_model_tensor_flags(m, s->stats_tensors, FED_TENSOR_NORM,
                                           FED_TENSOR_TRAINED) > 0);
}

static void record_delta0(void *ctx, uint64_t round, float *delta, size_t n)
{
    scen *s = ctx;

    if (round == 1 && !s->delta0) {
        s->delta0 = malloc(n * sizeof(float));
        memcpy(s->delta0, delta, n * sizeof(float));
    }
}

static void trace(void *ctx, uint64_t t_us, fed_sim_event_kind kind, uint32_t node, uint64_t a,
                  uint64_t b)
{
    scen *s = ctx;
    fed_node *ag = fed_sim_host_node(s->agg);

    (void)t_us, (void)kind, (void)node, (void)a, (void)b;
    if (ag) /* the round the aggregator runs, for the hook's records */
        s->round_now = fed_node_round(ag) + 1;
    if (ag && s->restart_ms && !s->model_after_ms && t_us / 1000 >= s->restart_ms) {
        fed_node_progress p;

        fed_node_get_progress(ag, &p);
        if (p.round_open) /* the restarted process started a round */
            s->model_after_ms = t_us / 1000;
    }
    if (ag && s->keep_params && !s->params0 && fed_node_round(ag) == 0) {
        s->params0 = malloc(fed_node_nparams(ag) * sizeof(float));
        assert_int_equal(fed_node_get_params(ag, s->params0), FED_OK);
    }
    if (ag && s->disk_full == 2 && kind == FED_SIM_EV_TIMER && node == 0 &&
        a == NODE_TIMER_ROUND) {
        fedi_store_set_disk_full(fed_sim_host_store(s->agg), 0); /* freed before the retry */
        s->disk_full = 3;
    }
}

/* Client c's integers of a round: values near both ends of int64 (their
 * sum wraps modulo 2^64), -1 - c (every high bit set), a count-like value
 * and one that moves with the round. */
static void client_ints(int c, uint64_t round, int64_t *out)
{
    out[0] = INT64_MAX - c;
    out[1] = INT64_MIN + 7 * c;
    out[2] = -1 - c;
    out[3] = 1000003 * (int64_t)c + 11;
    out[4] = (int64_t)(round << 40) - 5 * c;
}

static fed_err ints_of(void *ctx, uint64_t round, int64_t *out, size_t n)
{
    const struct int_src *src = ctx;

    assert_int_equal(n, SIM_INTS);
    client_ints(src->c, round, out);
    return FED_OK;
}

static void on_ints(void *ctx, const fed_node *n, uint64_t round, const uint64_t *sum, size_t len,
                    uint32_t m)
{
    scen *s = ctx;

    (void)n;
    assert_int_equal(len, SIM_INTS);
    if (round > MAXR)
        return;
    memcpy(s->isum[round], sum, len * sizeof *sum);
    s->im[round] = m;
    s->int_sums[round]++;
}

/* The aggregator's integer sums of round equal the true sums of every
 * client but those in out[] (modulo 2^64), over the count it reports. */
static void check_ints(const scen *s, uint64_t round, const int *out)
{
    uint64_t want[SIM_INTS] = {0};
    uint32_t m = 0;

    for (int c = 0; c < s->ncl; c++) {
        int64_t v[SIM_INTS];

        if (out[c])
            continue;
        client_ints(c, round, v);
        for (int j = 0; j < SIM_INTS; j++)
            want[j] += (uint64_t)v[j];
        m++;
    }
    assert_int_equal(s->int_sums[round], 1);
    assert_int_equal(s->im[round], m);
    assert_memory_equal(s->isum[round], want, sizeof want);
}

/* Client c's columns for the statistics: very different scales (a mean
 * of 1e6 with std 1, a std of 1e-3, values near +-2^31, negative ones,
 * integers), one missing cell in every 9th row of column 3. */
static void stats_rows(int c, double *x)
{
    fed_rng r;

    fed_rng_seed_stream(&r, 35, (uint64_t)c);
    for (size_t i = 0; i < STATS_ROWS(c); i++) {
        double g = fed_rng_normal(&r);

        x[i * STATS_COLS + 0] = 1e6 + g + c;
        x[i * STATS_COLS + 1] = 1e-3 * g;
        x[i * STATS_COLS + 2] = (fed_rng_uniform(&r) * 2 - 1) * 2.1e9;
        x[i * STATS_COLS + 3] = i % 9 == 4 ? NAN : -50 + 10 * g;
        x[i * STATS_COLS + 4] = floor(g * 3);
    }
}

static fed_err restandardize(void *ctx, const double *mean, const double *std, size_t cols,
                             const fed_dataset **out)
{
    const struct int_src *src = ctx;
    scen *s = src->s;

    assert_int_equal(cols, STATS_COLS);
    memcpy(s->got_mean[src->c], mean, cols * sizeof *mean);
    memcpy(s->got_std[src->c], std, cols * sizeof *std);
    s->restd[src->c]++;
    *out = src->c == NCL ? s->fx->test : s->fx->train; /* the pass is what is tested */
    return FED_OK;
}

static void build(scen *s, const fixture *fx, int secagg, uint32_t rounds, uint32_t min_clients,
                  size_t per_client, int evaluate)
{
    fed_sim_config wc;
    fed_node_config ac, cc;
    fed_rng idrng;
    char name[32];

    s->fx = fx;
    s->ncl = s->nclients ? s->nclients : NCL;
    memset(&wc, 0, sizeof wc);
    wc.seed = 11;
    wc.link.latency_ms = 5;
    wc.link.jitter_ms = 1;
    wc.link.bytes_per_ms = 100000;
    wc.flops_per_ms = 5e6;
    wc.epoch_base_s = 1700000000;
    wc.pool = fx->pool;
    assert_int_equal(fed_sim_world_new(&wc, &s->w), FED_OK);
    fed_sim_world_set_send_filter(s->w, drop_filter, s);
    fed_sim_world_set_trace(s->w, trace, s);
    assert_int_equal(fed_crypto_allow_new(&s->allow), FED_OK);
    fed_rng_seed_stream(&idrng, 11, 77);
    assert_int_equal(fed_sim_host_new_slots(&idrng, 16 + FED_NODE_SECAGG_SLOTS(NCL), &s->agg), FED_OK);
    assert_int_equal(fed_crypto_allow_add(s->allow, "agg", fed_sim_host_id(s->agg)->key), FED_OK);
    for (int i = 0; i < s->ncl; i++) {
        assert_int_equal(fed_sim_host_new_slots(&idrng, 16 + FED_NODE_SECAGG_SLOTS(NCL), &s->cl[i]), FED_OK);
        snprintf(name, sizeof name, "c%d", i);
        assert_int_equal(fed_crypto_allow_add(s->allow, name, fed_sim_host_id(s->cl[i])->key),
                         FED_OK);
    }
    if (s->narrow0) { /* everyone but client 5 */
        assert_int_equal(fed_crypto_allow_new(&s->allow0), FED_OK);
        assert_int_equal(fed_crypto_allow_add(s->allow0, "agg", fed_sim_host_id(s->agg)->key),
                         FED_OK);
        for (int i = 0; i < s->ncl; i++) {
            snprintf(name, sizeof name, "c%d", i);
            if (i != 5)
                assert_int_equal(fed_crypto_allow_add(s->allow0, name,
                                                      fed_sim_host_id(s->cl[i])->key),
                                 FED_OK);
        }
    }
    assert_int_equal(fed_model_spec_nparams(s->spec ? s->spec : "logreg", fx->train->shape,
                                            &s->nparams),
                     FED_OK);
    fed_node_config_default(&ac);
    ac.role = FED_NODE_AGGREGATOR;
    ac.seed = 3;
    ac.be = fx->be;
    snprintf(ac.spec, sizeof ac.spec, "%s", s->spec ? s->spec : "logreg");
    ac.init_params = s->init;
    ac.shape = fx->train->shape;
    ac.rounds = rounds;
    ac.agg.min_clients = min_clients;
    ac.agg.wait_clients = (uint32_t)s->ncl;
    ac.dp.client_clip = s->dp_client_clip;
    if (s->dp_client_clip > 0)
        ac.dp.client_noise = s->dp_client_noise;
    if (s->fraction > 0)
        ac.agg.sample_fraction = s->fraction;
    ac.deadline_ms = 30000;
    ac.data.test = evaluate ? fx->test : NULL;
    ac.allow = s->allow;
    ac.on_round = on_round;
    ac.observer = s;
    ac.secagg.on = secagg;
    ac.secagg.stage_ms = 3000;
    if (s->local_layers)
        snprintf(ac.local_layers, sizeof ac.local_layers, "%s", s->local_layers);
    if (s->strategy)
        snprintf(ac.agg.strategy, sizeof ac.agg.strategy, "%s", s->strategy);
    if (s->range > 0)
        ac.secagg.range = s->range;
    if (s->max_weight > 0)
        ac.secagg.max_weight = s->max_weight;
    s->agg_hooks = (fed_node_test_hooks){.ctx = s, .sa_tamper = sa_hook, .mark_model = mark_stats};
    s->mark_hooks = (fed_node_test_hooks){.ctx = s, .mark_model = mark_stats};
    ac.hooks = &s->agg_hooks;
    ac.transfer.wire.max_frame = s->max_frame;
    ac.transfer.wire.max_rx_streams = s->rx_streams;
    if (s->stats) {
        s->ssrc[NCL] = (struct int_src){.s = s, .c = NCL};
        ac.data.stats_cols = STATS_COLS;
        ac.data.stats_min_count = s->stats_min;
        ac.data.restandardize = restandardize;
        ac.data.stats_ctx = &s->ssrc[NCL];
    }
    ac.agg.eval_every = s->eval_every;
    if (s->ints) {
        ac.secagg.ints = SIM_INTS;
        ac.secagg.on_int_sum = on_ints;
        ac.secagg.ints_ctx = s;
    }
    assert_int_equal(fed_sim_host_attach(s->agg, s->w, &ac, NULL), FED_OK);
    for (int i = 0; i < s->ncl; i++) {
        s->idx[i] = fed_malloc(per_client * sizeof(uint32_t));
        for (size_t k = 0; k < per_client; k++)
            s->idx[i][k] = (uint32_t)(((size_t)i * per_client + k) % fx->train->n);
        s->nidx[i] = per_client;
        fed_node_config_default(&cc);
        cc.role = FED_NODE_CLIENT;
        cc.seed = 3;
        cc.be = fx->be;
        cc.client.aggregator = *fed_sim_host_id(s->agg);
        cc.data.train = fx->train;
        if (i == 0 && s->five0) { /* the same samples, another class count */
            s->five = *fx->train;
            s->five.shape.classes = 12;
            cc.data.train = &s->five;
        }
        cc.data.shard = s->idx[i];
        cc.data.shard_n = s->nidx[i];
        cc.allow = i == 0 && s->allow0 ? s->allow0 : s->allow;
        cc.transfer.wire.max_frame = s->max_frame;
        cc.dp.sgd = s->dp_sgd;
        cc.secagg.on = i < s->client_secagg;
        if (i == 0)
            cc.client.max_steps = s->max_steps0;
        if (s->dp_sgd)
            cc.dp.sgd_noise = s->dp_noise;
        if (i == 0) { /* its true delta, untouched, for the leak test */
            s->cl0_hooks = (fed_node_test_hooks){.ctx = s, .tamper_delta = record_delta0,
                                                 .mark_model = mark_stats};
            cc.hooks = &s->cl0_hooks;
        } else if (s->stats_tensors) {
            cc.hooks = &s->mark_hooks;
        }
        if (s->stats) {
            size_t sup = 0;

            s->sx[i] = malloc(STATS_ROWS(i) * STATS_COLS * sizeof(double));
            s->sl[i] = malloc(STATS_COLS * FED_COLSTATS_INTS * sizeof(int64_t));
            stats_rows(i, s->sx[i]);
            assert_int_equal(fed_colstats_local(s->sx[i], STATS_ROWS(i), STATS_COLS, NULL, 0,
                                                s->sl[i], &sup, NULL, 0),
                             FED_OK);
            s->ssrc[i] = (struct int_src){.s = s, .c = i};
            cc.data.stats_cols = STATS_COLS;
            cc.data.stats_local = s->sl[i];
            cc.data.restandardize = restandardize;
            cc.data.stats_ctx = &s->ssrc[i];
        }
        if (s->ints) {
            s->isrc[i] = (struct int_src){.s = s, .c = i};
            cc.secagg.ints = SIM_INTS;
            cc.secagg.ints_fn = ints_of;
            cc.secagg.ints_ctx = &s->isrc[i];
        }
        assert_int_equal(fed_sim_host_attach(s->cl[i], s->w, &cc, NULL), FED_OK);
    }
}

static void run(scen *s, uint64_t limit_ms) { fed_test_sim_run(s->w, s->agg, limit_ms, 5000); }

/* Client c's present values in column j. */
static size_t stats_count(const scen *s, int c, int j)
{
    size_t n = 0;

    for (size_t i = 0; i < STATS_ROWS(c); i++)
        n += !isnan(s->sx[c][i * STATS_COLS + j]);
    return n;
}

/* What node `who` was told equals the pooled statistics of every client
 * but those in out[] (and, in each column, those with fewer than min
 * values there), within model/colstats.h's stated precision. */
static void check_stats(const scen *s, int who, const int *out, size_t min)
{
    for (int j = 0; j < STATS_COLS; j++) {
        long double sum = 0, var = 0;
        size_t cnt = 0;
        double mean, sd, tm, ts;

        for (int pass = 0; pass < 2; pass++)
            for (int c = 0; c < s->ncl; c++)
                for (size_t i = 0; !out[c] && stats_count(s, c, j) >= min && i < STATS_ROWS(c);
                     i++) {
                    double v = s->sx[c][i * STATS_COLS + j];

                    if (isnan(v))
                        continue;
                    if (pass == 0) {
                        sum += v;
                        cnt++;
                    } else {
                        var += (v - sum / cnt) * (v - sum / cnt);
                    }
                }
        mean = (double)(sum / cnt);
        sd = (double)sqrtl(var / cnt);
        tm = ldexp(1, -33) + 4e-16 * fabs(mean);
        ts = ldexp(1, -33) + 4e-16 * sd;
        if (fabs(s->got_mean[who][j] - mean) > tm || fabs(s->got_std[who][j] - sd) > ts)
            fail_msg("node %d column %d: mean %.17g (pooled %.17g), std %.17g (pooled %.17g)",
                     who, j, s->got_mean[who][j], mean, s->got_std[who][j], sd);
    }
}

static void scen_free(scen *s)
{
    fed_sim_world_free(s->w);
    fed_sim_host_free(s->agg);
    for (int i = 0; i < NCL; i++) {
        fed_sim_host_free(s->cl[i]);
        fed_free(s->idx[i]);
    }
    fed_crypto_allow_free(s->allow);
    fed_crypto_allow_free(s->allow0);
    free(s->masked0);
    free(s->delta0);
    free(s->params0);
    free(s->params1);
    free(s->ctl1);
    free(s->lie_vec);
    for (int i = 0; i < NCL; i++) {
        free(s->sx[i]);
        free(s->sl[i]);
    }
}

typedef struct contrib_q {
    uint64_t round;
    uint8_t key[32];
    int accepted;
    char reason[64];
    int rows;
    int signed_rows; /* rows carrying a header and signature */
} contrib_q;

static int find_contrib(void *ctx, const fed_store_contrib *c)
{
    contrib_q *q = ctx;

    if (c->round == q->round && !memcmp(c->peer_key, q->key, 32)) {
        q->accepted = c->accepted;
        snprintf(q->reason, sizeof q->reason, "%s", c->reason);
        q->rows++;
        q->signed_rows += c->header_len > 0;
    }
    return 0;
}

typedef struct tries_q {
    fed_store_secagg_try t[8];
    int n;
} tries_q;

static int keep_try(void *ctx, const fed_store_secagg_try *t)
{
    tries_q *q = ctx;

    if (q->n < 8)
        q->t[q->n++] = *t;
    return 0;
}

static contrib_q contribution(scen *s, uint64_t round, int c)
{
    contrib_q q;

    memset(&q, 0, sizeof q);
    q.round = round;
    q.accepted = -1;
    memcpy(q.key, fed_sim_host_id(s->cl[c])->key, 32);
    assert_int_equal(fed_store_each_contribution(fed_sim_host_store(s->agg), round, find_contrib,
                                                 &q), FED_OK);
    return q;
}

/* One client dies before sending stage `type` of round 1; the round
 * commits with `merged` clients in the sum, the dead one's row says
 * `fate`, and round 2 runs with the rest. Every round also carries 5
 * integers per client (INT64 limbs beside the delta), whose sums the
 * aggregator unmasks exact modulo 2^64 over the same clients. */
static void drop_one(const fixture *fx, uint8_t type, uint32_t merged, const char *fate)
{
    scen s;
    contrib_q q;
    int none[NCL] = {0}, first[NCL] = {1};

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.ints = 1; /* every round also sums SIM_INTS integers exactly */
    build(&s, fx, 1, 2, 10, 100, 1);
    s.drop_type = type;
    s.drop_round = 1;
    s.drop_count = 1;
    run(&s, 400000);
    assert_true(s.dropped[0]);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, merged);
    print_message("round 1 accuracy %.4f\n", s.info[1].accuracy);
    assert_true(s.info[1].accuracy > 0.35); /* the right sum (a wrong one fails the range check) */
    q = contribution(&s, 1, 0);
    assert_int_equal(q.accepted, merged == NCL ? 1 : 0);
    assert_string_equal(q.reason, fate);
    q = contribution(&s, 1, 1);
    assert_int_equal(q.accepted, 1);
    assert_int_equal(q.signed_rows, 1); /* its signed masked input is kept */
    assert_int_equal(s.commits[2], 1);
    assert_int_equal(s.info[2].merged, NCL - 1);
    assert_int_equal(s.both_kinds, 0);
    /* the integers: exact over whoever is in each round's sum (client 0
       too when it died after its masked input went out) */
    check_ints(&s, 1, merged == NCL ? none : first);
    check_ints(&s, 2, first);
    scen_free(&s);
}

static void test_drop_before_keys(void **state)
{
    drop_one(*state, FED_WIRE_SA_KEYS, NCL - 1, "secagg: no keys");
}

static void test_drop_before_shares(void **state)
{
    drop_one(*state, FED_WIRE_SA_SHARES, NCL - 1, "secagg: dropped before sharing");
}

static void test_drop_before_masked(void **state)
{
    drop_one(*state, FED_WIRE_SA_MASKED, NCL - 1, "secagg: dropped after sharing");
}

static void test_drop_before_consist(void **state)
{
    drop_one(*state, FED_WIRE_SA_CONSIST, NCL, "");
}

static void test_drop_before_unmask(void **state)
{
    drop_one(*state, FED_WIRE_SA_UNMASK, NCL, "");
}

/* Clients 0..4 run with --secagg, which on a client is a requirement, and
 * the aggregator runs no secure aggregation: each of the five declines
 * every round with a LEAVE FED_ERR_SA_REQUIRED and never sends a DELTA; the
 * aggregator records and counts the refusals and merges the other 15. */
static void test_client_requires_secagg(void **state)
{
    const fixture *fx = *state;
    scen s;
    const fed_wire_counters *wc;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.client_secagg = 5;
    build(&s, fx, 0, 2, 10, 100, 0);
    run(&s, 400000);
    for (int i = 0; i < NCL; i++) {
        assert_int_equal(s.delta_from[i], i < 5 ? 0 : 2);
        assert_true(i < 5 ? s.leave_from[i] >= 2 : s.leave_from[i] == 0);
    }
    for (uint64_t r = 1; r <= 2; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.info[r].merged, NCL - 5);
        assert_int_equal(contribution(&s, r, 0).accepted, 0);
        assert_string_equal(contribution(&s, r, 0).reason, "declined FED_ERR_SA_REQUIRED");
        assert_int_equal(contribution(&s, r, 5).accepted, 1);
    }
    wc = fed_node_wire_counters(fed_sim_host_node(s.agg));
    assert_non_null(wc);
    print_message("LEAVEs counted: no secagg %llu\n", (unsigned long long)wc->leave_no_secagg);
    assert_int_equal(wc->leave_no_secagg, 10);
    assert_int_equal(wc->leave_bad_model, 0);
    scen_free(&s);
}

/* Client 0's data has 12 classes, so the secure rounds' 10-class model does
 * not fit it: it declines round 1 at once (LEAVE FED_ERR_MODEL_MISMATCH),
 * the keys stage does not wait for it (its deadline is 3 s; each round
 * takes less), it is sampled no more, and both rounds commit with the
 * other 19. */
static void test_model_mismatch_secure(void **state)
{
    const fixture *fx = *state;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.five0 = 1;
    build(&s, fx, 1, 2, 10, 100, 0);
    run(&s, 400000);
    assert_int_equal(s.shares_from[0], 0);
    for (uint64_t r = 1; r <= 2; r++) {
        print_message("round %llu: %llu ms\n", (unsigned long long)r,
                      (unsigned long long)(s.info[r].end_ms - s.info[r].start_ms));
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(s.info[r].merged, NCL - 1);
        assert_true(s.info[r].end_ms - s.info[r].start_ms < 3000);
        if (r == 1)
            assert_string_equal(contribution(&s, r, 0).reason,
                                "declined FED_ERR_MODEL_MISMATCH");
    }
    assert_int_equal(fed_node_wire_counters(fed_sim_host_node(s.agg))->leave_bad_model, 1);
    scen_free(&s);
}

/* Twelve of 20 die before their masked input: the survivors' secrets have
 * fewer than t = 10 live holders, so the try fails closed (nothing
 * merged). The 8 left sent their masked inputs, so round 1 never runs a
 * second try over those deltas: it closes with no update, and round 2,
 * trained afresh with fresh keys, commits with the 8. */
static void test_too_many_fail_closed(void **state)
{
    const fixture *fx = *state;
    scen s;
    tries_q q = {.n = 0};

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.keep_params = 1;
    build(&s, fx, 1, 2, 8, 100, 0);
    s.drop_type = FED_WIRE_SA_MASKED;
    s.drop_round = 1;
    s.drop_count = 12;
    run(&s, 400000);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, 0);
    assert_memory_equal(s.params0, s.params1, s.nparams * sizeof(float)); /* no update */
    assert_int_equal(s.commits[2], 1);
    assert_int_equal(s.info[2].merged, 8);
    assert_int_equal(s.info[2].sampled, 8);
    /* the failed try left its record: a survivor's row says so, and the
       tries' table holds both rounds', the first failed at the masked input */
    assert_int_equal(contribution(&s, 1, 15).rows, 1);
    assert_int_equal(contribution(&s, 1, 15).accepted, 0);
    assert_int_equal(fed_store_each_secagg_try(fed_sim_host_store(s.agg), 1, keep_try, &q),
                     FED_OK);
    assert_int_equal(q.n, 2);
    assert_int_equal(q.t[0].round, 1);
    assert_int_equal(q.t[0].try_no, 0);
    assert_int_equal(q.t[0].keyed, NCL);
    assert_int_equal(q.t[0].shared, NCL);
    assert_int_equal(q.t[0].masked, 8);
    print_message("round 1's try: %s\n", q.t[0].outcome);
    assert_true(!strncmp(q.t[0].outcome, "failed at masked input", 22));
    assert_int_equal(q.t[1].round, 2);
    assert_int_equal(q.t[1].masked, 8);
    assert_int_equal(q.t[1].unmasked, 8);
    assert_string_equal(q.t[1].outcome, "");
    assert_int_equal(s.both_kinds, 0);
    scen_free(&s);
}

/* Client 0 refuses round 1's key list (narrow0: its allow-list lacks a
 * client the list names; cheat 5: the list it is shown has two entries)
 * before it shares anything, and the round commits with the others. */
static void client0_refuses_key_list(const fixture *fx, int narrow0, int cheat)
{
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.narrow0 = narrow0;
    s.cheat = cheat;
    build(&s, fx, 1, 1, 10, 100, 0);
    run(&s, 400000);
    assert_int_equal(s.shares_from[0], 0);
    assert_true(s.shares_from[1] >= 1);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, NCL - 1);
    assert_int_equal(s.both_kinds, 0);
    scen_free(&s);
}

/* A key list naming a client outside client 0's allow-list (as an
 * aggregator inventing neighbours would). */
static void test_key_list_non_member(void **state) { client0_refuses_key_list(*state, 1, 0); }

/* A key list of two (client 0's own entry and one other, both signed for
 * the round): with two in a sum each could subtract its own delta from it
 * (FED_ERR_SA_TOO_FEW). */
static void test_key_list_below_floor(void **state) { client0_refuses_key_list(*state, 0, 5); }

/* The aggregator shows client 0 a survivor list of two (itself and one
 * other): client 0 refuses to sign it or reveal anything (FED_ERR_SA_TOO_FEW),
 * and the round commits. */
static void test_survivors_below_floor(void **state)
{
    const fixture *fx = *state;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.cheat = 6;
    build(&s, fx, 1, 1, 10, 100, 0);
    fed_test_log_capture(FED_LOG_WARN);
    run(&s, 400000);
    fed_test_log_has("2 survivors, fewer than this client's floor of 3");
    fed_test_log_default();
    assert_int_equal(s.consist_from[0], 0);
    assert_int_equal(s.unmask_from[0], 0);
    /* its masked input is in the sum all the same: the others saw it
       survive and revealed its self seed's shares */
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, NCL);
    assert_int_equal(s.both_kinds, 0);
    scen_free(&s);
}

/* A secure round never runs below its floor of 3 clients (with 2, each
 * could subtract its own delta from the sum): with two clients (and
 * --min-clients 1) the aggregator starts none; with three, one of which
 * dies before its keys, the try fails at the key list and nobody shares
 * anything (and no new try starts with the two left). */
static void test_secure_round_floor(void **state)
{
    const fixture *fx = *state;
    scen s;
    tries_q q = {.n = 0};

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.nclients = 2;
    build(&s, fx, 1, 1, 1, 100, 0);
    run(&s, 30000);
    assert_int_equal(s.commits[1], 0);
    assert_int_equal(s.shares_from[0] + s.shares_from[1], 0);
    assert_int_equal(fed_store_each_secagg_try(fed_sim_host_store(s.agg), 1, keep_try, &q),
                     FED_OK);
    assert_int_equal(q.n, 0);
    scen_free(&s);

    memset(&s, 0, sizeof s);
    memset(&q, 0, sizeof q);
    s.nclients = 3;
    s.drop_type = FED_WIRE_SA_KEYS;
    s.drop_round = 1;
    s.drop_count = 1;
    build(&s, fx, 1, 1, 1, 100, 0);
    run(&s, 30000);
    assert_true(s.dropped[0]);
    assert_int_equal(s.commits[1], 0);
    assert_int_equal(s.shares_from[1] + s.shares_from[2], 0);
    assert_int_equal(fed_store_each_secagg_try(fed_sim_host_store(s.agg), 1, keep_try, &q),
                     FED_OK);
    assert_int_equal(q.n, 1);
    print_message("round 1's try: %s\n", q.t[0].outcome);
    assert_non_null(strstr(q.t[0].outcome, "too few clients sent keys"));
    scen_free(&s);
}

/* A try fails after its sum was unmasked (client 3's input pushed out of
 * range): the clients revealed their shares, so round 1 never runs a second
 * try over the same deltas (two sums over different survivors would give
 * one away): it closes with no update, the model as it was, and its try's
 * record says why. Client 0 dies before round 2's keys; round 2 trains
 * afresh and commits with the other 19. */
static void test_bad_input_closes_round(void **state)
{
    const fixture *fx = *state;
    scen s;
    tries_q q = {.n = 0};

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.bad_input = 1;
    s.keep_params = 1;
    s.drop_type = FED_WIRE_SA_KEYS;
    s.drop_round = 2;
    s.drop_count = 1;
    s.drop_late = 1;
    build(&s, fx, 1, 2, 10, 100, 1);
    run(&s, 400000);
    assert_int_equal(s.bad_input, 2);
    assert_true(s.dropped[0]);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, 0);
    assert_int_equal(s.info[1].sampled, NCL);
    assert_non_null(s.params0);
    assert_non_null(s.params1);
    assert_memory_equal(s.params0, s.params1, s.nparams * sizeof(float)); /* no update */
    for (int i = 0; i < NCL; i++)
        assert_int_equal(s.unmask_in[1][i], 1); /* one try in round 1, one reveal each */
    assert_int_equal(fed_store_each_secagg_try(fed_sim_host_store(s.agg), 1, keep_try, &q),
                     FED_OK);
    assert_int_equal(q.n, 2); /* rounds 1 and 2: one try each */
    assert_int_equal(q.t[0].round, 1);
    assert_int_equal(q.t[1].round, 2);
    assert_string_equal(q.t[1].outcome, "");
    print_message("round 1's try: %s\n", q.t[0].outcome);
    assert_true(!strncmp(q.t[0].outcome, "failed at unmasking: the sum's coordinate", 41));
    assert_int_equal(contribution(&s, 1, 5).accepted, 0);
    assert_int_equal(s.commits[2], 1);
    assert_int_equal(s.info[2].merged, NCL - 1);
    print_message("accuracy: round 1 %.4f (the model as it was), round 2 %.4f\n",
                  s.info[1].accuracy, s.info[2].accuracy);
    assert_true(s.info[2].accuracy > 0.35);
    assert_int_equal(s.both_kinds, 0);
    scen_free(&s);
}

/* A void round (client 3's bad input) whose commit fails (the disk full
 * from the first revealed share until the retry): the retried commit keeps
 * the model as it was before round 1, not some other copy, and round 2
 * commits with everyone. */
static void test_void_round_commit_failure(void **state)
{
    const fixture *fx = *state;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.bad_input = 1;
    s.disk_full = 1;
    s.keep_params = 1;
    build(&s, fx, 1, 2, 10, 100, 0);
    run(&s, 400000);
    assert_int_equal(s.bad_input, 2);
    assert_int_equal(s.disk_full, 3);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, 0);
    assert_non_null(s.params1);
    assert_memory_equal(s.params0, s.params1, s.nparams * sizeof(float));
    assert_int_equal(s.commits[2], 1);
    assert_int_equal(s.info[2].merged, NCL);
    {
        tries_q q = {.n = 0}; /* the void try's row went in with the round */

        assert_int_equal(fed_store_each_secagg_try(fed_sim_host_store(s.agg), 1, keep_try, &q),
                         FED_OK);
        assert_true(q.n >= 1);
        assert_int_equal(q.t[0].round, 1);
        assert_true(!strncmp(q.t[0].outcome, "failed at unmasking", 19));
    }
    scen_free(&s);
}

/* Client 7 trains 15,000 times slower than the others, who wait for it in
 * the masked stage: each re-asks for the stage's answer every retry with an
 * empty request, and sends its whole masked input once. */
static void test_masked_input_sent_once(void **state)
{
    const fixture *fx = *state;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    build(&s, fx, 1, 1, 10, 100, 0);
    assert_int_equal(fed_sim_world_set_slowdown(s.w, 1 + 7, 15000.0), FED_OK);
    run(&s, 400000);
    print_message("whole masked inputs sent %d, re-asks %d\n", s.masked_whole, s.reasks);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, NCL);
    assert_true(s.reasks >= NCL - 1); /* the others asked again while 7 trained */
    assert_int_equal(s.masked_whole, NCL);
    scen_free(&s);
}

/* The aggregator dies as round 1's first revealed share comes in and
 * restarts: it runs round 1 afresh, and each client that revealed its
 * shares of round 1 declines the new try (its delta is in a sum already),
 * so round 1 closes with no update, and round 2 commits with everyone. */
static void test_aggregator_restart_after_unmask(void **state)
{
    const fixture *fx = *state;
    scen s;
    contrib_q c;
    tries_q q = {.n = 0};

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.crash_agg = 1;
    s.keep_params = 1;
    build(&s, fx, 1, 2, 10, 100, 0);
    run(&s, 400000);
    assert_int_equal(s.crash_agg, 2);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, 0);
    assert_true(s.info[1].refused >= 1);
    assert_non_null(s.params1);
    assert_memory_equal(s.params0, s.params1, s.nparams * sizeof(float));
    for (int i = 0; i < NCL; i++)
        assert_true(s.unmask_in[1][i] <= 1); /* never a second reveal in round 1 */
    c = contribution(&s, 1, 0);
    print_message("round 1: %u declined; client 0's row: %s\n", s.info[1].refused, c.reason);
    assert_int_equal(fed_store_each_secagg_try(fed_sim_host_store(s.agg), 1, keep_try, &q),
                     FED_OK);
    assert_true(q.n >= 2);
    assert_true(strstr(q.t[0].outcome, "earlier aggregator process") != NULL);
    assert_int_equal(s.commits[2], 1);
    assert_int_equal(s.info[2].merged, NCL);
    assert_int_equal(s.both_kinds, 0);
    scen_free(&s);
}

/* The aggregator dies as round 1's first SHARES request comes in and
 * restarts 2 s later, in a new epoch. Its clients, each in the middle of
 * round 1's stages, are told so by the first request they send the new
 * epoch (an ACK FED_ERR_OLD_EPOCH) and say HELLO at once: the next round
 * starts within 10 virtual seconds of the restart (it took about 160 s of
 * stage retries before), and rounds 1 and 2 commit with everyone. */
static void test_aggregator_restart_mid_round(void **state)
{
    const fixture *fx = *state;
    scen s;
    const fed_wire_counters *wc;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.crash_agg = 3;
    build(&s, fx, 1, 2, 10, 100, 0);
    run(&s, 400000);
    assert_int_equal(s.crash_agg, 4);
    assert_true(s.model_after_ms > s.restart_ms);
    print_message("restart at %llu ms; its first round %llu ms later\n",
                  (unsigned long long)s.restart_ms,
                  (unsigned long long)(s.model_after_ms - s.restart_ms));
    assert_true(s.model_after_ms - s.restart_ms <= 10000);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, NCL);
    assert_int_equal(s.commits[2], 1);
    assert_int_equal(s.info[2].merged, NCL);
    wc = fed_node_wire_counters(fed_sim_host_node(s.agg));
    print_message("frames to the dead epoch: %llu\n", (unsigned long long)wc->rej_old_epoch);
    assert_true(wc->rej_old_epoch <= 2 * NCL);
    assert_int_equal(s.both_kinds, 0);
    scen_free(&s);
}

/* The aggregator's disk is full from round 1's first revealed share until
 * its retry: the commit of the unmasked sum fails, the sum is kept and
 * committed on the retry, with no second try and no second reveal. */
static void test_commit_failure_keeps_sum(void **state)
{
    const fixture *fx = *state;
    scen s, plain;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.disk_full = 1;
    s.keep_params = 1;
    build(&s, fx, 1, 1, 10, 100, 0);
    run(&s, 400000);
    assert_int_equal(s.disk_full, 3);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, NCL);
    for (int i = 0; i < NCL; i++)
        assert_int_equal(s.unmask_in[1][i], 1);
    /* the same sum as a run whose disk never filled */
    memset(&plain, 0, sizeof plain);
    plain.keep_params = 1;
    build(&plain, fx, 1, 1, 10, 100, 0);
    run(&plain, 400000);
    assert_int_equal(plain.commits[1], 1);
    assert_non_null(s.params1);
    assert_non_null(plain.params1);
    assert_memory_equal(s.params1, plain.params1, s.nparams * sizeof(float));
    assert_int_equal(s.both_kinds, 0);
    scen_free(&s);
    scen_free(&plain);
}

/* Runs s and returns the aggregator's model once it finished (caller frees). */
static float *run_for_model(scen *s)
{
    float *p = malloc(s->nparams * sizeof(float));

    run(s, 400000);
    assert_non_null(p);
    assert_int_equal(fed_node_get_params(fed_sim_host_node(s->agg), p), FED_OK);
    return p;
}

/* With 16 KiB frames on every node, logreg's masked input (7,851 words, 31
 * KB) goes as a CHUNK stream, each chunk pushed once the last was ACKed and
 * the stage's answer the reply to the last; one client dies after its
 * masked input in round 1, and client 4's last chunk of round 1 is lost:
 * its re-ask is answered FED_ERR_STREAM (the input is not in) and it
 * streams the input again. Both rounds commit, and the model is bit for
 * bit the one of the same run in whole frames (the masks cancel exactly,
 * and the rounding's draws do not depend on the frames sent). */
static void test_streamed_masked_input(void **state)
{
    const fixture *fx = *state;
    scen s, whole;
    float *ps, *pw;
    const fed_wire_counters *wa;
    contrib_q q;

    fed_test_need_fashion(fx->train != NULL);
    for (int k = 0; k < 2; k++) {
        scen *x = k ? &s : &whole;

        memset(x, 0, sizeof *x);
        x->max_frame = k ? 16384 : 0;
        x->lose_chunk = k ? 5 : 0;
        build(x, fx, 1, 2, 10, 100, 1);
        x->drop_type = FED_WIRE_SA_CONSIST;
        x->drop_round = 1;
        x->drop_count = 1;
    }
    ps = run_for_model(&s);
    pw = run_for_model(&whole);
    wa = fed_node_wire_counters(fed_sim_host_node(s.agg));
    print_message("16 KiB frames: %d masked streams, %d CHUNK data frames, %d re-asks from "
                  "clients; the aggregator took %llu streams (%llu failed); accuracy %.4f, whole "
                  "frames %.4f; client 4 streamed again %d times after its lost chunk\n",
                  s.masked_streams, s.chunks_out, s.reasks,
                  (unsigned long long)wa->streams_done, (unsigned long long)wa->streams_failed,
                  s.info[2].accuracy, whole.info[2].accuracy, s.restreams);
    for (int r = 1; r <= 2; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_int_equal(whole.commits[r], 1);
        assert_int_equal(s.info[r].merged, r == 1 ? NCL : NCL - 1);
        assert_int_equal(whole.info[r].merged, s.info[r].merged);
    }
    assert_true(s.dropped[0]);
    assert_memory_equal(ps, pw, s.nparams * sizeof(float));
    /* every masked input streamed: 2 chunks or more each (first + CHUNKs) */
    assert_true(s.masked_streams >= 2 * NCL - 1);
    assert_true(s.chunks_out >= 2 * NCL - 1);
    assert_true(s.reasks >= 1); /* held answers asked again while others streamed */
    assert_int_equal(s.chunk_lost, 1);
    assert_true(s.restreams >= 1); /* client 4 streamed its input again */
    assert_int_equal(whole.masked_streams, 0);
    assert_int_equal(whole.chunks_out, 0);
    assert_true(wa->streams_done >= 2 * NCL - 1);
    assert_int_equal(wa->rej_sa_masked, 0);
    /* the aggregator's hook saw client 0's whole assembled vector */
    assert_non_null(s.masked0);
    assert_int_equal(s.words0, s.nparams + 1);
    /* the signed masked input kept, as for a whole frame */
    q = contribution(&s, 1, 1);
    assert_int_equal(q.accepted, 1);
    assert_int_equal(q.signed_rows, 1);
    assert_int_equal(s.both_kinds, 0);
    free(ps);
    free(pw);
    scen_free(&s);
    scen_free(&whole);
}

/* The configuration check: a masked vector over a frame is no longer
 * refused (it streams); one over the largest stream is, and so is one over
 * a frame with --no-crypto (streams are always sealed). */
static void test_streamed_misfit(void **state)
{
    fed_node_config c;
    const char *why;

    (void)state;
    fed_node_config_default(&c);
    c.role = FED_NODE_AGGREGATOR;
    c.secagg.on = 1;
    c.transfer.wire.max_frame = 16384;
    assert_null(fedi_node_sa_agg_misfit(&c, 7850, NCL));
    c.transfer.wire.max_stream_bytes = 4 * 7850; /* one word short */
    why = fedi_node_sa_agg_misfit(&c, 7850, NCL);
    assert_non_null(why);
    assert_non_null(strstr(why, "max_stream_bytes"));
    c.transfer.wire.max_stream_bytes = 4 * 7851;
    assert_null(fedi_node_sa_agg_misfit(&c, 7850, NCL));
    c.transfer.wire.hooks = &fedi_wire_hooks_unsealed; /* fedsim --no-crypto */
    why = fedi_node_sa_agg_misfit(&c, 7850, NCL);
    assert_non_null(why);
    assert_non_null(strstr(why, "--no-crypto"));
    c.transfer.wire.max_frame = 0; /* 16 MiB: whole */
    assert_null(fedi_node_sa_agg_misfit(&c, 7850, NCL));
    /* the strategy as model/merge.h classes it, Multi-Krum included */
    snprintf(c.agg.strategy, sizeof c.agg.strategy, "clip:2+multikrum:1,3");
    why = fedi_node_sa_agg_misfit(&c, 7850, NCL);
    assert_non_null(why);
    assert_non_null(strstr(why, "Multi-Krum"));
    snprintf(c.agg.strategy, sizeof c.agg.strategy, "clip:2+fedadagrad");
    assert_null(fedi_node_sa_agg_misfit(&c, 7850, NCL));
}

/* The same streams over links that lose 10% of frames once training is
 * under way (from 3 s on), the aggregator taking a stream from every client
 * at once (as fednode's --max-clients): chunks, their ACKs and the re-asks
 * are lost and resent, and both rounds commit with nearly everyone. (With
 * the default 4 reassemblies at once, streams left unfinished by a lost
 * frame hold their room until they idle out, and fewer clients make the
 * deadline, as plain streamed deltas do.) */
static void test_streamed_lossy(void **state)
{
    const fixture *fx = *state;
    const fed_wire_counters *wa;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.max_frame = 16384;
    s.rx_streams = NCL;
    build(&s, fx, 1, 2, 10, 100, 0);
    assert_int_equal(fed_sim_world_add_loss(s.w, 0.1, 3000, 3600000), FED_OK);
    run(&s, 1200000);
    wa = fed_node_wire_counters(fed_sim_host_node(s.agg));
    print_message("lossy: round 1 merged %u, round 2 %u; %d masked streams, %d CHUNK data "
                  "frames, %d re-asks; the aggregator took %llu streams, dropped %llu\n",
                  s.info[1].merged, s.info[2].merged, s.masked_streams, s.chunks_out,
                  s.reasks, (unsigned long long)wa->streams_done,
                  (unsigned long long)wa->streams_failed);
    for (int r = 1; r <= 2; r++) {
        assert_int_equal(s.commits[r], 1);
        assert_true(s.info[r].merged >= NCL - 2);
    }
    assert_true(s.chunks_out >= 2 * NCL);
    assert_int_equal(s.both_kinds, 0);
    scen_free(&s);
}

/* Client 2 announces a masked input of one word more than nparams + 1 (a
 * stream whose total says so, in place of its own, and nothing after it):
 * the aggregator refuses it at its first frame, before sizing anything
 * (rej_sa_masked), and round 1 commits without it. */
static void test_streamed_wrong_size(void **state)
{
    const fixture *fx = *state;
    fed_node *liar;
    fed_wire_hdr h;
    fed_wire_block b;
    const fed_wire_counters *wa;
    size_t words;
    contrib_q q;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.max_frame = 16384;
    s.rx_streams = NCL; /* as fednode's (--max-clients): none refused for want of room */
    s.liar = 3;
    build(&s, fx, 1, 1, 10, 100, 0);
    while (s.lie != 1) { /* up to the moment its own stream would leave */
        int did = 0;

        assert_int_equal(fed_sim_world_step(s.w, &did), FED_OK);
        assert_true(did);
    }
    words = s.nparams + 1;
    assert_non_null(s.lie_vec = calloc(words + 1, 4));
    liar = fed_sim_host_node(s.cl[s.liar - 1]);
    assert_int_equal(fedi_node_header(liar, FED_WIRE_SA_MASKED, fed_sim_host_id(s.agg)->key,
                                      1, s.lie_epoch, FED_CODEC_NONE, &h),
                     FED_OK);
    memset(&b, 0, sizeof b);
    b.sa_count = (uint32_t)words; /* the count right, the bytes one word over */
    s.lie = 2;
    assert_int_equal(fedi_node_emit_vec(liar, NULL, &h, &b, s.lie_vec, (words + 1) * 4), FED_OK);
    run(&s, 400000);
    wa = fed_node_wire_counters(fed_sim_host_node(s.agg));
    print_message("wrong size: rej_sa_masked %llu, streams begun %llu\n",
                  (unsigned long long)wa->rej_sa_masked, (unsigned long long)wa->streams_begun);
    assert_int_equal(s.lie_out, 1);
    assert_int_equal(wa->rej_sa_masked, 1);
    assert_int_equal(wa->streams_begun, NCL - 1); /* the others' masked inputs */
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, NCL - 1);
    q = contribution(&s, 1, s.liar - 1);
    assert_int_equal(q.accepted, 0);
    assert_string_equal(q.reason, "secagg: dropped after sharing");
    assert_int_equal(s.both_kinds, 0);
    scen_free(&s);
}

/* The aggregator names a live client dropped to that client: it refuses
 * to go on (no signature, no share), and the round still commits. */
static void test_named_dropped_refuses(void **state)
{
    const fixture *fx = *state;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    build(&s, fx, 1, 1, 10, 100, 0);
    s.cheat = 1;
    s.victim = 5;
    run(&s, 400000);
    assert_int_equal(s.consist_from[5], 0);
    assert_int_equal(s.unmask_from[5], 0);
    assert_int_equal(s.consist_from[6], 1);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.both_kinds, 0);
    scen_free(&s);
}

/* Half the clients are told a live client dropped, the others that it is
 * alive: whatever each side does, the aggregator never holds both kinds
 * of share of any client. */
static void test_split_survivor_lists(void **state)
{
    const fixture *fx = *state;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    build(&s, fx, 1, 1, 4, 100, 0);
    s.cheat = 2;
    s.victim = 3;
    run(&s, 400000);
    assert_int_equal(s.both_kinds, 0);
    /* those told the victim dropped signed a list the aggregator could not
       show t of their neighbours signing too: no mask-key share of the
       live victim ever came; the try failed closed and the round went on */
    assert_int_equal(s.kind_seen[1][0][3] & (1u << SA_KIND_KEY), 0);
    assert_int_equal(s.commits[1], 1);
    scen_free(&s);
}

/* Round 2's key list carries the victim's round-1 keys: every client
 * refuses the list (the signature binds round and try), the try fails
 * closed, and round 2 runs again with fresh keys. */
static void test_replayed_key(void **state)
{
    const fixture *fx = *state;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    build(&s, fx, 1, 2, 10, 100, 0);
    s.cheat = 3;
    s.victim = 7;
    run(&s, 400000);
    assert_true(s.have_old);
    assert_int_equal(s.commits[2], 1);
    assert_int_equal(s.both_kinds, 0);
    scen_free(&s);
}

/* Half the clients are shown a key list one entry short (another graph):
 * their shares go to neighbours of a graph the others do not have, which
 * the aggregator cannot route, and their survivor signatures bind another
 * graph seed; the aggregator never holds both kinds of share of a client,
 * and the round still commits. */
static void test_different_graphs(void **state)
{
    const fixture *fx = *state;
    scen s;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    build(&s, fx, 1, 1, 4, 100, 0);
    s.cheat = 4;
    run(&s, 400000);
    assert_true(s.graphs_shown > 0);
    assert_int_equal(s.both_kinds, 0);
    assert_int_equal(s.commits[1], 1);
    scen_free(&s);
}

/* FedAvg with secure aggregation within 0.3 point of the plain run after
 * 5 rounds; and client 0's masked words: uniform, uncorrelated with its
 * delta. */
static void test_accuracy_and_leak(void **state)
{
    const fixture *fx = *state;
    scen plain, sec;
    double chi2 = 0, sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0, r;
    uint32_t bins[256] = {0};
    size_t n;

    fed_test_need_fashion(fx->train != NULL);
    memset(&plain, 0, sizeof plain);
    build(&plain, fx, 0, 5, 10, 300, 1);
    run(&plain, 600000);
    memset(&sec, 0, sizeof sec);
    build(&sec, fx, 1, 5, 10, 300, 1);
    run(&sec, 600000);
    assert_int_equal(plain.commits[5], 1);
    assert_int_equal(sec.commits[5], 1);
    print_message("accuracy after 5 rounds: plain %.4f, secagg %.4f\n", plain.info[5].accuracy,
                  sec.info[5].accuracy);
    assert_true(fabs(plain.info[5].accuracy - sec.info[5].accuracy) <= 0.003);

    assert_non_null(sec.masked0);
    assert_non_null(sec.delta0);
    n = sec.words0 - 1; /* the parameters (the weight is the last word) */
    assert_int_equal(n, sec.nparams);
    for (size_t i = 0; i < n; i++) {
        double x = sec.masked0[i], y = sec.delta0[i];

        bins[sec.masked0[i] >> 24]++;
        sx += x, sy += y, sxx += x * x, syy += y * y, sxy += x * y;
    }
    for (int b = 0; b < 256; b++) {
        double e = (double)n / 256, d = bins[b] - e;

        chi2 += d * d / e;
    }
    /* 255 degrees of freedom: the 99.99th percentile is about 350 */
    print_message("masked words: chi-square %.1f (255 df)\n", chi2);
    assert_true(chi2 < 350);
    r = (n * sxy - sx * sy) / sqrt((n * sxx - sx * sx) * (n * syy - sy * sy));
    print_message("correlation with the true delta: %.4f (n %zu)\n", r, n);
    assert_true(fabs(r) < 4 / sqrt((double)n)); /* 4 standard errors of 0 */
    scen_free(&plain);
    scen_free(&sec);
}

/* Round 1 as tmpl sets it up, plain (plain) and secure (sec), 20 clients
 * of 100 samples; both start from the same model. */
static void plain_and_secure(const fixture *fx, const scen *tmpl, scen *plain, scen *sec)
{
    for (int k = 0; k < 2; k++) {
        scen *x = k ? sec : plain;

        *x = *tmpl;
        x->keep_params = 1;
        build(x, fx, k, 1, NCL, 100, 0);
        run(x, 600000);
        assert_int_equal(x->commits[1], 1);
        assert_int_equal(x->info[1].merged, NCL);
        assert_non_null(x->params0);
        assert_non_null(x->params1);
    }
    assert_memory_equal(plain->params0, sec->params0, plain->nparams * sizeof(float));
}

/* logreg's 0.bias marked a running statistic, the delta's range 0.0005:
 * under secure aggregation the statistics are their own segment at
 * --secagg-stats-range (64), so round 1's statistics are the plain run's
 * within the quantization bound (20 clients, weight 1 each: 20 steps of
 * 128 / (2^20 - 1), over a weight of 20), though the plain ones move by
 * far more than 0.0005, which the delta's range would clamp them to. */
static void test_stats_secure_range(void **state)
{
    const fixture *fx = *state;
    static scen tmpl; /* (zero but for what is set here) */
    scen plain, sec;
    size_t moved = 0;
    double bound = 20 * 128.0 / (double)((1u << 20) - 1) / 20;

    fed_test_need_fashion(fx->train != NULL);
    tmpl.stats_tensors = "0.bias";
    tmpl.range = 0.0005;
    tmpl.max_weight = 100;
    plain_and_secure(fx, &tmpl, &plain, &sec);
    for (size_t j = plain.nparams - 10; j < plain.nparams; j++) { /* 0.bias */
        double p = (double)plain.params1[j] - plain.params0[j];
        double q = (double)sec.params1[j] - sec.params0[j];

        moved += fabs(p) > 0.002; /* four times the delta's range */
        assert_true(fabs(p - q) <= bound + 1e-6);
    }
    assert_true(moved >= 3);
    scen_free(&plain);
    scen_free(&sec);
}

/* Batch norm on the input (g:bn=N,F,fc=L) from a running variance of 30,
 * as a resumed or imported model may hold: each client's two steps (100
 * samples, batch 64) move it by about -5.6, past the delta's range (4,
 * the default), which would clamp it to 26. Under secure aggregation
 * batch norm's statistics are their own segment at --secagg-stats-range
 * (64): round 1's running mean and variance are the plain run's within
 * the quantization bound (as test_stats_secure_range's), the variance far
 * below 26; the counter is in no masked input (the aggregator's stays 0). */
static void test_bn_variance_secure(void **state)
{
    const fixture *fx = *state;
    static scen tmpl; /* (zero but for what is set here) */
    scen plain, sec;
    fed_model *m = NULL;
    fed_rng rng;
    float *init;
    double bound = 20 * 128.0 / (double)((1u << 20) - 1) / 20;

    fed_test_need_fashion(fx->train != NULL);
    assert_int_equal(fed_model_new("g:bn=N,F,fc=L", fx->train->shape, fx->be, NULL, 1, 1, &m),
                     FED_OK);
    fed_rng_seed(&rng, 3);
    assert_int_equal(fed_model_init(m, &rng), FED_OK);
    assert_non_null(init = malloc(fed_model_nparams(m) * sizeof *init));
    assert_int_equal(fed_model_get_params(m, init), FED_OK);
    fed_model_free(m);
    init[3] = 30.0f; /* bn.running_var (after weight, bias and running_mean) */
    tmpl.spec = "g:bn=N,F,fc=L";
    tmpl.init = init;
    tmpl.max_weight = 100;
    plain_and_secure(fx, &tmpl, &plain, &sec);
    assert_true(plain.params0[3] == 30.0f);
    assert_true(plain.params1[3] < 25.0f && plain.params1[3] > 20.0f);
    for (int j = 2; j <= 3; j++) /* running_mean, running_var */
        assert_true(fabs(((double)plain.params1[j] - plain.params0[j]) -
                         ((double)sec.params1[j] - sec.params0[j])) <= bound + 1e-6);
    assert_true(sec.params1[4] == 0.0f && plain.params1[4] == 0.0f); /* num_batches_tracked */
    assert_int_equal(sec.words0, sec.nparams - 1 + 1); /* all but the counter, and the weight */
    scen_free(&plain);
    scen_free(&sec);
    free(init);
}

/* --local-layers 0.bias under secure aggregation: each masked input holds
 * logreg's 7,840 weights and the weight word, not the bias; the
 * aggregator's bias stays its own, its weights move. */
static void test_local_layers_secure(void **state)
{
    const fixture *fx = *state;
    scen sec;
    size_t moved = 0;

    fed_test_need_fashion(fx->train != NULL);
    memset(&sec, 0, sizeof sec);
    sec.local_layers = "0.bias";
    sec.keep_params = 1;
    build(&sec, fx, 1, 1, NCL, 100, 0);
    run(&sec, 600000);
    assert_int_equal(sec.commits[1], 1);
    assert_non_null(sec.masked0);
    assert_int_equal(sec.words0, sec.nparams - 10 + 1);
    assert_non_null(sec.params1);
    for (size_t j = 0; j < sec.nparams; j++)
        if (j >= sec.nparams - 10)
            assert_true(sec.params1[j] == sec.params0[j]);
        else
            moved += sec.params1[j] != sec.params0[j];
    assert_true(moved > 1000);
    scen_free(&sec);
}

/* FedNova under secure aggregation: its normalized deltas and step counts
 * summed masked (rule SAMPLES), 19 clients of 2 steps and client 0 of one
 * (--max-steps 1). tau_eff = (19 a(2) + a(1)) / 20, a(2) = 1 + 1.9 (SGD
 * momentum 0.9); the secure model is the plain one within the bound: tau
 * q_d + |D| q_s per coordinate (q = 2 range / (2^20 - 1) each: the delta's
 * range 4, the steps' FED_NODE_STEPS_RANGE; each mean's error below one
 * q), doubled for the weight word's own rounding. */
static void test_fednova_secure(void **state)
{
    const fixture *fx = *state;
    static scen tmpl; /* (zero but for what is set here) */
    scen plain, sec;
    double qd = 2 * 4.0 / ((1 << 20) - 1), qs = 2 * FED_NODE_STEPS_RANGE / ((1 << 20) - 1);
    double tau = (19 * fedi_node_fednova_steps(2, 0.9) + fedi_node_fednova_steps(1, 0.9)) / 20;
    size_t moved = 0;

    fed_test_need_fashion(fx->train != NULL);
    tmpl.strategy = "fednova";
    tmpl.max_steps0 = 1;
    tmpl.max_weight = 100; /* each weight word 1 */
    plain_and_secure(fx, &tmpl, &plain, &sec);
    for (size_t j = 0; j < plain.nparams; j++) {
        double p = (double)plain.params1[j] - plain.params0[j];
        double q = (double)sec.params1[j] - sec.params0[j];
        double tol = 2 * (tau * qd + fabs(p / tau) * qs) + 1e-6;

        moved += fabs(p) > 1e-3;
        if (fabs(p - q) > tol)
            fail_msg("coordinate %zu: plain %.9g, secure %.9g (bound %.3g)", j, p, q, tol);
    }
    assert_true(moved > 100);
    scen_free(&plain);
    scen_free(&sec);
}

/* SCAFFOLD under secure aggregation, weight cap 1000 (each client's
 * weight f = 0.1): the model delta (SAMPLES: sent times f, so its mean's
 * error is below m q / sum f = 10 q) and the control change (MEAN, at the
 * delta's range, sent as it is: below q) summed masked; the model and c
 * after round 1 are the plain run's within twice those (q = 2 range /
 * (2^20 - 1)). */
static void test_scaffold_secure(void **state)
{
    const fixture *fx = *state;
    static scen tmpl; /* (zero but for what is set here) */
    scen plain, sec;
    double q = 2 * 4.0 / ((1 << 20) - 1);
    size_t moved = 0;

    fed_test_need_fashion(fx->train != NULL);
    tmpl.strategy = "scaffold";
    tmpl.max_weight = 1000;
    plain_and_secure(fx, &tmpl, &plain, &sec);
    assert_non_null(plain.ctl1);
    assert_non_null(sec.ctl1);
    for (size_t j = 0; j < plain.nparams; j++) {
        double p = (double)plain.params1[j] - plain.params0[j];
        double d = (double)sec.params1[j] - sec.params0[j];

        moved += plain.ctl1[j] != 0;
        if (fabs(p - d) > 20 * q + 1e-6)
            fail_msg("coordinate %zu: plain %.9g, secure %.9g", j, p, d);
        if (fabs((double)plain.ctl1[j] - sec.ctl1[j]) > 2 * q + 1e-6)
            fail_msg("coordinate %zu: c plain %.9g, secure %.9g", j, plain.ctl1[j], sec.ctl1[j]);
    }
    assert_true(moved > 100);
    scen_free(&plain);
    scen_free(&sec);
}

/* SCAFFOLD over a void round: twelve of 20 die before their masked input
 * (as test_too_many_fail_closed), so round 1 closes with no update although
 * 8 masked inputs went out; those 8 drop the c_i round 1 made (the MODEL of
 * round 2 says round 1 was void) and train round 2 from c_i = 0, which
 * merges. c = (1/N) sum_i c_i after it (N = 20; the last round's c_i as
 * each client made it: merged, though no MODEL said so yet); had they kept
 * round 1's, the sum would hold its changes too. */
static void test_scaffold_void_round(void **state)
{
    const fixture *fx = *state;
    scen s;
    double q = 2 * 4.0 / ((1 << 20) - 1), *sum;

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.keep_params = 1;
    s.strategy = "scaffold";
    s.max_weight = 100;
    build(&s, fx, 1, 2, 8, 100, 0);
    s.drop_type = FED_WIRE_SA_MASKED;
    s.drop_round = 1;
    s.drop_count = 12;
    run(&s, 400000);
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, 0);
    assert_int_equal(s.commits[2], 1);
    assert_int_equal(s.info[2].merged, 8);
    for (size_t j = 0; j < s.nparams; j++) /* round 1 left c at 0 */
        assert_true(s.ctl1[j] == 0.0f);
    sum = calloc(s.nparams, sizeof *sum);
    for (int i = 0; i < NCL; i++) {
        const fed_node *cn = fed_sim_host_node(s.cl[i]);
        uint64_t round = 0;
        const float *next = NULL, *ci;

        if (!cn || s.dropped[i])
            continue;
        ci = fedi_node_client_control(cn, &round, &next);
        assert_null(ci); /* round 1's was dropped, round 2's not yet told merged */
        assert_int_equal(round, 2);
        for (size_t j = 0; j < s.nparams; j++)
            sum[j] += next[j];
    }
    {
        const float *c = fedi_node_agg_scaffold_control(fed_sim_host_node(s.agg));

        for (size_t j = 0; j < s.nparams; j++)
            if (fabs(sum[j] / NCL - c[j]) > 2 * q + 1e-6)
                fail_msg("coordinate %zu: c %.9g, mean c_i %.9g", j, c[j], sum[j] / NCL);
    }
    free(sum);
    scen_free(&s);
}

/* The epsilon client i's database holds (its accountant over its charges). */
static double site_epsilon(const scen *s, int i)
{
    fed_dp_account *a = NULL;
    double eps;

    assert_int_equal(fed_dp_account_new(1e-5, &a), FED_OK);
    assert_int_equal(fed_dp_account_load(a, fed_sim_host_store(s->cl[i])), FED_OK);
    assert_int_equal(fed_dp_account_charges(a), DPS_ROUNDS);
    eps = fed_dp_account_epsilon(a);
    fed_dp_account_free(a);
    return eps;
}

/* DP-SGD at every site together with secure aggregation: 10 clients of
 * 600 samples, z 1, clip 1, 3 rounds. Each site ends with the epsilon
 * DP-SGD alone gives it (the run without secure aggregation, and the
 * accountant's for q = 64 / 600 over 3 rounds of 10 steps), and the model
 * within 0.5 point of DP-SGD without secure aggregation. */
static void test_dp_sgd_with_secagg(void **state)
{
    const fixture *fx = *state;
    scen plain, sec;
    double want;

    fed_test_need_fashion(fx->train != NULL);
    assert_int_equal(fed_rdp_sgm_epsilon(fed_dp_account_rate(DPS_N, 64), 1.0,
                                         DPS_ROUNDS * fed_dp_account_round_steps(DPS_N, 64, 1),
                                         1e-5, NULL, 0, &want, NULL), FED_OK);
    memset(&plain, 0, sizeof plain);
    memset(&sec, 0, sizeof sec);
    plain.nclients = sec.nclients = DPS_CLIENTS;
    plain.dp_sgd = sec.dp_sgd = 1;
    plain.dp_noise = sec.dp_noise = 1;
    build(&plain, fx, 0, DPS_ROUNDS, DPS_CLIENTS, DPS_N, 1);
    run(&plain, 600000);
    build(&sec, fx, 1, DPS_ROUNDS, DPS_CLIENTS, DPS_N, 1);
    run(&sec, 600000);
    assert_int_equal(plain.commits[DPS_ROUNDS], 1);
    assert_int_equal(sec.commits[DPS_ROUNDS], 1);
    assert_int_equal(sec.info[DPS_ROUNDS].merged, DPS_CLIENTS);
    for (int i = 0; i < DPS_CLIENTS; i++) {
        double ep = site_epsilon(&plain, i), es = site_epsilon(&sec, i);

        if (i == 0)
            print_message("site 0's epsilon: DP-SGD %.6f, with secagg %.6f, accountant %.6f\n",
                          ep, es, want);
        assert_true(fabs(es - want) <= 1e-9 * want);
        assert_true(fabs(ep - want) <= 1e-9 * want);
    }
    print_message("accuracy after %d rounds: DP-SGD %.4f, DP-SGD with secagg %.4f\n",
                  DPS_ROUNDS, plain.info[DPS_ROUNDS].accuracy, sec.info[DPS_ROUNDS].accuracy);
    assert_true(fabs(plain.info[DPS_ROUNDS].accuracy - sec.info[DPS_ROUNDS].accuracy) <= 0.005);
    scen_free(&plain);
    scen_free(&sec);
}

/* DP-FedAvg with secure aggregation: 20 clients drawn at q 0.5, clip 1,
 * z 1. Each client clips its own delta at weight 1; the aggregator noises
 * the unmasked sum. Three rounds spend what the run without secure
 * aggregation spends (the accountant's epsilon for q 0.5, z 1, r rounds),
 * the model within 0.5 point of it. Then clients 0..11 die before their
 * masked input in round 1: the try fails closed and, the draw standing,
 * round 1 releases its noise alone (nothing merged, its epsilon charged);
 * round 2 runs with the clients left. */
static void test_dp_fedavg_with_secagg(void **state)
{
    const fixture *fx = *state;
    scen plain, sec, drop;

    fed_test_need_fashion(fx->train != NULL);
    memset(&plain, 0, sizeof plain);
    memset(&sec, 0, sizeof sec);
    memset(&drop, 0, sizeof drop);
    plain.dp_client_clip = sec.dp_client_clip = drop.dp_client_clip = 1;
    plain.dp_client_noise = sec.dp_client_noise = drop.dp_client_noise = 1;
    /* q 0.7 of 20: a draw below a secure round's 3 clients has probability
       3.8e-8 (q 0.5: 2.0e-4, over delta / 10, refused below) */
    plain.fraction = sec.fraction = drop.fraction = 0.7;
    build(&plain, fx, 0, DPS_ROUNDS, 2, 300, 1);
    run(&plain, 600000);
    build(&sec, fx, 1, DPS_ROUNDS, 2, 300, 1);
    run(&sec, 600000);
    for (int r = 1; r <= DPS_ROUNDS; r++) {
        double want;

        assert_int_equal(fed_rdp_sgm_epsilon(0.7, 1.0, (uint64_t)r, 1e-5, NULL, 0, &want, NULL),
                         FED_OK);
        assert_int_equal(sec.commits[r], 1);
        assert_int_equal(plain.commits[r], 1);
        assert_int_equal(sec.info[r].merged, plain.info[r].merged);
        assert_true(sec.info[r].merged > 0);
        assert_true(fabs(sec.info[r].epsilon - want) <= 1e-9 * want);
        assert_true(fabs(plain.info[r].epsilon - want) <= 1e-9 * want);
    }
    print_message("DP-FedAvg after %d rounds: epsilon %.4f both; accuracy %.4f, with secagg "
                  "%.4f\n", DPS_ROUNDS, sec.info[DPS_ROUNDS].epsilon,
                  plain.info[DPS_ROUNDS].accuracy, sec.info[DPS_ROUNDS].accuracy);
    assert_true(fabs(plain.info[DPS_ROUNDS].accuracy - sec.info[DPS_ROUNDS].accuracy) <= 0.005);

    build(&drop, fx, 1, 2, 2, 100, 0);
    drop.drop_type = FED_WIRE_SA_MASKED;
    drop.drop_round = 1;
    drop.drop_count = 12;
    run(&drop, 600000);
    assert_int_equal(drop.commits[1], 1);
    assert_int_equal(drop.info[1].merged, 0);
    assert_true(drop.info[1].sampled > 0);
    assert_true(fabs(drop.info[1].epsilon - sec.info[1].epsilon) <= 1e-12);
    assert_int_equal(drop.commits[2], 1);
    assert_true(drop.info[2].merged > 0);
    assert_true(fabs(drop.info[2].epsilon - sec.info[2].epsilon) <= 1e-12);
    scen_free(&plain);
    scen_free(&sec);
    scen_free(&drop);

    /* q 0.5 of 20 with --secagg: P(Bin(20, 0.5) < 3) = 211 / 2^20 > delta / 10,
       so the aggregator refuses to start; without --secagg it runs */
    assert_true(fabs(fed_rdp_binom_below(20, 0.5, 3) - 211.0 / 1048576.0) <= 1e-15);
    memset(&drop, 0, sizeof drop);
    drop.dp_client_clip = 1;
    drop.dp_client_noise = 1;
    drop.fraction = 0.5;
    build(&drop, fx, 1, 1, 2, 100, 0);
    run(&drop, 2000);
    assert_null(fed_sim_host_node(drop.agg));
    assert_true(fed_sim_host_start_failures(drop.agg) >= 1);
    scen_free(&drop);
}

/* The shared-statistics pass as round 1 (no training, nothing merged),
 * then `rounds` training rounds whose MODELs carry the pooled statistics:
 * each client and the aggregator standardize with them once, and they
 * equal the pooled rows' mean and std within the stated precision, over
 * every client in the pass (with secure aggregation: whoever is in the
 * sum; a client dying before drop_type of round 1 is left out, or in when
 * its masked input went out). */
static void stats_pass_full(const fixture *fx, int secagg, uint8_t drop_type, int client0_in,
                            uint64_t min_count, int disk_full, const char *strategy)
{
    scen s;
    int out[NCL] = {0};

    fed_test_need_fashion(fx->train != NULL);
    memset(&s, 0, sizeof s);
    s.strategy = strategy;
    s.disk_full = disk_full;
    s.keep_params = 1;
    s.eval_every = disk_full ? 1 : 0; /* (round 2 evaluated: not the pass's retry) */
    s.stats = 1;
    s.stats_min = min_count;
    s.drop_type = drop_type;
    s.drop_round = 1;
    s.drop_count = drop_type ? 1 : 0;
    build(&s, fx, secagg, 2, 10, 100, 1);
    run(&s, 400000);
    if (disk_full)
        assert_int_equal(s.disk_full, 3); /* the pass's commit failed once */
    assert_int_equal(s.commits[1], 1);
    assert_int_equal(s.info[1].merged, client0_in ? NCL : NCL - 1);
    assert_non_null(s.params1); /* the pass trains nothing: the model as it started */
    assert_memory_equal(s.params0, s.params1, s.nparams * sizeof(float));
    assert_int_equal(s.commits[2], 1);
    assert_int_equal(s.commits[3], 1); /* two training rounds after the pass */
    assert_int_equal(s.commits[4], 0);
    assert_true(s.info[3].accuracy > 0.35); /* it trains on */
    out[0] = !client0_in;
    assert_int_equal(s.restd[NCL], 1);
    check_stats(&s, NCL, out, min_count);
    for (int c = 0; c < NCL; c++) { /* every client alive: a dead one hears nothing */
        assert_int_equal(s.restd[c], !s.dropped[c]);
        if (!s.dropped[c])
            check_stats(&s, c, out, min_count);
    }
    scen_free(&s);
}

static void stats_pass(const fixture *fx, int secagg, uint8_t drop_type, int client0_in,
                       uint64_t min_count)
{
    stats_pass_full(fx, secagg, drop_type, client0_in, min_count, 0, NULL);
}

static void test_stats_pass_plain(void **state) { stats_pass(*state, 0, 0, 1, 0); }

/* A layout with a strategy's segment (FedNova's steps): the pass's DELTA
 * is its limbs all the same, not a delta to unpack by the layout (which
 * read past the vector: an error under ASan only, since logreg's trained
 * floats come first and the limbs land where they were). */
static void test_stats_pass_fednova(void **state)
{
    stats_pass_full(*state, 0, 0, 1, 0, 0, "fednova");
}

static void test_stats_pass_secure(void **state) { stats_pass(*state, 1, 0, 1, 0); }

static void test_stats_pass_drop_before_masked(void **state)
{
    stats_pass(*state, 1, FED_WIRE_SA_MASKED, 0, 0);
}

static void test_stats_pass_drop_before_unmask(void **state)
{
    stats_pass(*state, 1, FED_WIRE_SA_UNMASK, 1, 0);
}

/* A secure pass whose commit fails (the disk full from its first revealed
 * share until the retry): the retry commits the pass with the totals its
 * close read, not a training round over a sum of no delta; the statistics
 * are known only once it committed, and two training rounds follow. */
static void test_stats_pass_commit_failure(void **state)
{
    stats_pass_full(*state, 1, 0, 1, 0, 1, NULL);
}

/* The same in the clear (the disk full from the first DELTA): the pass is
 * run again, not taken as known, and round 1 stays the pass. */
static void test_stats_pass_plain_commit_failure(void **state)
{
    stats_pass_full(*state, 0, 0, 1, 0, 1, NULL);
}

/* The minimum count without secure aggregation: a client's column with
 * fewer than 60 values (clients 0-2 everywhere, 3-5 in the column with
 * missing cells) releases nothing, and the pooled statistics are the other
 * clients'. */
static void test_stats_pass_min_count(void **state) { stats_pass(*state, 0, 0, 1, 60); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_requires_secagg),
        cmocka_unit_test(test_model_mismatch_secure),
        cmocka_unit_test(test_drop_before_keys),
        cmocka_unit_test(test_drop_before_shares),
        cmocka_unit_test(test_drop_before_masked),
        cmocka_unit_test(test_drop_before_consist),
        cmocka_unit_test(test_drop_before_unmask),
        cmocka_unit_test(test_stats_pass_plain),
        cmocka_unit_test(test_stats_pass_secure),
        cmocka_unit_test(test_stats_pass_drop_before_masked),
        cmocka_unit_test(test_stats_pass_drop_before_unmask),
        cmocka_unit_test(test_stats_pass_min_count),
        cmocka_unit_test(test_stats_pass_commit_failure),
        cmocka_unit_test(test_stats_pass_plain_commit_failure),
        cmocka_unit_test(test_too_many_fail_closed),
        cmocka_unit_test(test_named_dropped_refuses),
        cmocka_unit_test(test_key_list_non_member),
        cmocka_unit_test(test_key_list_below_floor),
        cmocka_unit_test(test_secure_round_floor),
        cmocka_unit_test(test_survivors_below_floor),
        cmocka_unit_test(test_bad_input_closes_round),
        cmocka_unit_test(test_commit_failure_keeps_sum),
        cmocka_unit_test(test_masked_input_sent_once),
        cmocka_unit_test(test_void_round_commit_failure),
        cmocka_unit_test(test_streamed_misfit),
        cmocka_unit_test(test_streamed_masked_input),
        cmocka_unit_test(test_streamed_wrong_size),
        cmocka_unit_test(test_streamed_lossy),
        cmocka_unit_test(test_aggregator_restart_after_unmask),
        cmocka_unit_test(test_aggregator_restart_mid_round),
        cmocka_unit_test(test_split_survivor_lists),
        cmocka_unit_test(test_replayed_key),
        cmocka_unit_test(test_different_graphs),
        cmocka_unit_test(test_accuracy_and_leak),
        cmocka_unit_test(test_dp_sgd_with_secagg),
        cmocka_unit_test(test_dp_fedavg_with_secagg),
        cmocka_unit_test(test_stats_secure_range),
        cmocka_unit_test(test_bn_variance_secure),
        cmocka_unit_test(test_local_layers_secure),
        cmocka_unit_test(test_fednova_secure),
        cmocka_unit_test(test_scaffold_secure),
        cmocka_unit_test(test_scaffold_void_round),
        cmocka_unit_test(test_stats_pass_fednova),
    };

    if (getenv("FED_TEST_FILTER")) /* one case of this long binary, by cmocka's pattern */
        cmocka_set_test_filter(getenv("FED_TEST_FILTER"));
    return cmocka_run_group_tests(tests, setup, teardown);
}
