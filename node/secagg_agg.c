/* secagg_agg.c - the aggregator's side of secure aggregation inside one
 * synchronous round: it holds each stage's requests until the stage's
 * inputs are in or its deadline passes, answers them (the key list, each
 * client's sealed shares, the survivors, their signatures), sums the masked
 * inputs, rebuilds from t shares each survivor's self seed and each dropped
 * client's mask key, removes the masks and checks the sum's range. It never
 * holds a client's unmasked vector; a secret with fewer than t live holders
 * fails the round closed (no partial sum), and the round runs again with
 * a fresh try. */
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "model/colstats.h"
#include "model/merge.h"
#include "node/aggregator_impl.h"
#include "node/secagg_impl.h"
#include "node/secagg_msg_impl.h"
#include "node/site_eval.h"
#include "node/test_hooks.h"
#include "secagg/graph.h"
#include "secagg/quant.h"

enum { SA_NONE = 0, SA_KEYS, SA_SHARES, SA_MASKED, SA_CONSIST, SA_UNMASK, SA_DONE };

static const char *const stage_name[] = {"", "keys", "shares", "masked input", "consistency",
                                         "unmasking", "done"};

typedef struct sa_member {
    int stage_in;           /* the last stage whose input it gave (0: none) */
    int idx;                /* its index in the key list; -1: not in it */
    sa_key_entry ke;
    uint8_t *shares;        /* its SHARES request's vector (count entries) */
    uint32_t nshares;
    uint32_t *masked;       /* (words) its masked input */
    uint8_t surv_sig[64];
    sa_unmask_entry *unmask; /* guarded memory (the revealed shares) */
    uint32_t nunmask;
    fed_req *held;          /* its request of the running stage, held */
    fed_wire_hdr held_hdr;
} sa_member;

struct node_sa_agg {
    int stage;
    uint64_t round;         /* the round of try_no */
    uint32_t try_no;
    fed_secagg_ctx ctx;
    fed_secagg_quant q;
    sa_member *m;           /* (nm) by part index */
    size_t nm;
    uint32_t n1;            /* clients in the key list */
    uint32_t *part_of;      /* (n1) list index -> part index */
    uint8_t *list;          /* the KEYS answer (n1 entries) */
    uint8_t seed[32];       /* graph seed */
    fed_secagg_graph *g;
    uint32_t k, t;
    uint8_t *u2, *u3, *u4;  /* (n1) flags */
    int void_sum;           /* the try failed once masked inputs were out: the
                               round closes with no update, no other try */
    char outcome[160];      /* why, for the try's row (written with the round) */
    size_t np;              /* the try's delta length as sent: the layout's
                               (node/layout.h), or 0 in the statistics pass
                               (node/agg_stats.c) */
    uint32_t nints;         /* the try's integers: cfg.secagg.ints, or the pass's */
    size_t words;           /* the masked input's: fedi_agg_seg_words of sa_segs */
    uint32_t *sum;          /* (words; room for the larger kind of try) */
    float *mean;            /* (nparams) the unmasked mean: the trained floats
                               (node/layout.h), zero elsewhere */
    float *stats;           /* (the layout's statistics) their unmasked mean, or NULL */
    double weight;
    uint64_t *isum;         /* (nints) the integers' exact sums */
    uint32_t m3;            /* clients in the sum */
};

/* ---- configuration ---- */

/* A secure contribution's segments under c (agg_input_impl.h): the delta (np),
 * its weight, and nints integers. */
static size_t sa_segs(const fed_node_config *c, const fed_node_layout *l, size_t np,
                      uint32_t nints, agg_segment *segs, size_t *nd_out)
{
    agg_segment d[AGG_SEGMENTS_MAX]; /* the delta's: the layout's, or one of np */
    size_t nd = 0;

    if (np && l)
        nd = fed_node_layout_segments(l, c->secagg.range, c->secagg.stats_range, d);
    else if (np)
        d[nd++] = (agg_segment){.name = "delta", .len = np, .rule = AGG_WEIGHT_SAMPLES,
                                .range = c->secagg.range};
    if (nd_out)
        *nd_out = nd;
    return fedi_agg_seg_secure(d, nd, c->secagg.range, nints, segs);
}

/* The masked input's u32 words under c (l: the round's tensor layout; NULL
 * before one exists: the delta as one segment of np). */
static uint64_t sa_words(const fed_node_config *c, const fed_node_layout *l, size_t np,
                         uint32_t nints)
{
    agg_segment segs[AGG_SEGMENTS_MAX];
    size_t nseg = sa_segs(c, l, np, nints, segs, NULL);

    if (c->secagg.bits < 1 || c->secagg.bits > 32) /* misfit refuses it by name */
        return (uint64_t)np + 1;
    return fedi_agg_seg_words(segs, nseg, c->secagg.bits);
}

/* The larger masked input of a training round and a statistics pass. */
static uint64_t sa_words_most(const fed_node_config *c, const fed_node_layout *l,
                              size_t nparams)
{
    uint64_t train = sa_words(c, l, l ? fed_node_layout_sent(l) : nparams,
                              c->secagg.ints + fed_node_site_eval_cfg_ints(c));
    uint64_t pass = c->data.stats_cols
                        ? sa_words(c, NULL, 0, c->data.stats_cols * FED_COLSTATS_INTS)
                        : 0;

    return train > pass ? train : pass;
}

const char *fedi_node_sa_agg_misfit(const fed_node_config *c, size_t nparams, size_t max_clients)
{
    fed_secagg_quant q = {.clip_norm = 0, .range = c->secagg.range, .bits = c->secagg.bits};
    size_t max_frame = c->transfer.wire.max_frame ? c->transfer.wire.max_frame : FED_WIRE_MAX_FRAME_DEFAULT;
    fed_merge_traits mt;
    fed_wire_cfg wc;

    fed_wire_cfg_default(&wc);
    if (c->transfer.wire.max_stream_bytes)
        wc.max_stream_bytes = c->transfer.wire.max_stream_bytes;

    if (c->agg.async_k)
        return "--secagg needs synchronous rounds: async (FedBuff) merges deltas one by one, "
               "which masking hides; use --mode sync";
    if (fed_merge_spec_traits(c->agg.strategy, &mt) != FED_OK || !mt.weighted)
        return "--secagg hides individual updates, which median, trimmed mean, Krum, "
               "Multi-Krum and Bulyan need; use fedavg, fedavgm, fedadam, fedyogi or "
               "fedadagrad (with clip:NORM+ if you want a bound)";
    if (strcmp(c->transfer.codec, "f32") != 0)
        return "--secagg quantizes deltas itself (--secagg-bits); the f16, q8 and top-k codecs "
               "do not apply: use --codec f32";
    if (fed_secagg_quant_check(&q, (uint32_t)(max_clients < 65535 ? max_clients : 65535), NULL,
                               0) != FED_OK)
        return "--secagg: clients x (2^secagg-bits - 1) must stay below 2^32: lower "
               "--secagg-bits or the number of clients a round takes";
    /* a masked vector larger than a frame streams (node/transfer.c), as a
       DELTA does: the bound is the largest stream a node takes */
    if (sa_words_most(c, NULL, nparams) > wc.max_stream_bytes / 4)
        return "--secagg: the masked vector (4 bytes a parameter) is over the largest stream "
               "a node takes (wire.max_stream_bytes, 64 GiB by default): raise it or use a "
               "smaller model";
    if (fed_wire_cfg_unsealed(&c->transfer.wire) && fed_wire_frame_bytes(16 + sa_words_most(c, NULL, nparams) * 4) > max_frame)
        return "--secagg with --no-crypto: the masked vector is over one frame and would "
               "stream, and streams are always sealed: drop --no-crypto or use a smaller model";
    if (max_clients > SA_MAX_CLIENTS)
        return "--secagg: at most 4096 clients a round";
    return NULL;
}

fed_err fedi_node_sa_agg_new(fed_node *n, node_sa_agg **out)
{
    node_sa_agg *s = fed_calloc(1, sizeof *s);
    size_t mc = (size_t)n->agg->max_clients;

    *out = NULL;
    if (!s)
        return FED_ERR_NOMEM;
    uint32_t train_ints = n->cfg.secagg.ints + fed_node_site_eval_cfg_ints(&n->cfg);
    uint32_t most_ints = train_ints > n->cfg.data.stats_cols * FED_COLSTATS_INTS
                             ? train_ints
                             : n->cfg.data.stats_cols * FED_COLSTATS_INTS;

    size_t ns = n->agg->layout.len[LAYOUT_STATS];

    s->np = fed_node_layout_sent(&n->agg->layout); /* what leaves the sites */
    s->nints = n->cfg.secagg.ints;
    s->words = (size_t)sa_words(&n->cfg, &n->agg->layout, s->np, s->nints);
    s->m = fed_calloc(mc, sizeof *s->m);
    s->mean = fed_malloc((n->agg->nparams + n->agg->layout.extra) * sizeof(float) + 1);
    s->stats = ns ? fed_malloc(ns * sizeof(float)) : NULL;
    s->sum = fed_malloc((size_t)sa_words_most(&n->cfg, &n->agg->layout, n->agg->nparams) *
                        sizeof(uint32_t));
    s->isum = fed_calloc((size_t)most_ints + 1, sizeof *s->isum);
    if (!s->m || !s->mean || !s->sum || !s->isum || (ns && !s->stats)) {
        fed_free(s->m);
        fed_free(s->mean);
        fed_free(s->stats);
        fed_free(s->sum);
        fed_free(s->isum);
        fed_free(s);
        return FED_ERR_NOMEM;
    }
    s->q.range = n->cfg.secagg.range;
    s->q.bits = n->cfg.secagg.bits;
    *out = s;
    return FED_OK;
}

static void member_clear(sa_member *m)
{
    fed_free(m->shares);
    fed_free(m->masked);
    fed_crypto_guarded_free(m->unmask); /* wiped */
    memset(m, 0, sizeof *m);
    m->idx = -1;
}

/* Everything of the try, held requests forgotten (the caller answered
 * them, or they belong to a transport that is gone). */
static void try_clear(node_sa_agg *s)
{
    for (size_t i = 0; i < s->nm; i++)
        member_clear(&s->m[i]);
    s->nm = 0;
    fed_free(s->part_of);
    fed_free(s->list);
    fed_free(s->u2);
    fed_free(s->u3);
    fed_free(s->u4);
    s->part_of = NULL;
    s->list = NULL;
    s->u2 = s->u3 = s->u4 = NULL;
    fed_secagg_graph_free(s->g);
    s->g = NULL;
    s->n1 = s->k = s->t = 0;
    s->stage = SA_NONE;
    s->void_sum = 0;
    s->outcome[0] = '\0';
}

void fedi_node_sa_agg_free(fed_node *n, node_sa_agg *s)
{
    (void)n;
    if (!s)
        return;
    try_clear(s);
    fed_free(s->m);
    fed_free(s->mean);
    fed_free(s->stats);
    fed_free(s->sum);
    fed_free(s->isum);
    fed_free(s);
}

void fedi_node_sa_agg_end(fed_node *n)
{
    node_sa_agg *s = n->agg->sa;

    if (!s)
        return;
    for (size_t i = 0; i < s->nm; i++)
        fedi_node_refuse(n, s->m[i].held);
    try_clear(s);
    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_STAGE);
}

/* A client's weight cap: with DP-FedAvg 1 (equal weights), else
 * --secagg-max-weight samples. */
static double weight_cap(const fed_node *n)
{
    return n->agg->dp ? 1 : n->cfg.secagg.max_weight;
}

void fedi_node_sa_agg_settings(const fed_node *n, uint64_t round, fed_wire_settings *st)
{
    const node_sa_agg *s = n->agg->sa;

    st->sa_on = 1;
    st->sa_try = s && s->round == round ? s->try_no : 0;
    st->sa_bits = n->cfg.secagg.bits;
    st->sa_range = (float)n->cfg.secagg.range;
    /* a strategy's clip:NORM+ (model/merge.h): under secure aggregation each
       client applies it to its own delta, where the aggregator could only
       clip the mean */
    st->sa_clip = (float)fed_merge_traits_of(n->agg->merge).clip;
    if (n->agg->dp) { /* DP-FedAvg: each client clips its own delta (rounded down) */
        double c = fedi_node_agg_dp_secagg_clip(n->agg);
        float f = (float)c;

        if ((double)f > c)
            f = nextafterf(f, 0);
        if (!(st->sa_clip > 0) || f < st->sa_clip)
            st->sa_clip = f;
    }
    st->sa_max_weight = (float)weight_cap(n);
    st->sa_dropout = (float)n->cfg.secagg.dropout;
}

int fedi_node_sa_agg_keys_closed(const node_sa_agg *s) { return s->stage > SA_KEYS; }

int fedi_node_sa_agg_unmasked(const node_sa_agg *s) { return s->stage == SA_DONE; }

int fedi_node_sa_agg_void(const node_sa_agg *s) { return s->void_sum; }

const char *fedi_node_sa_agg_outcome(const node_sa_agg *s)
{
    return s->void_sum ? s->outcome : "";
}

size_t fedi_node_sa_agg_words(const node_sa_agg *s) { return s->words; }

const uint64_t *fedi_node_sa_agg_ints(const node_sa_agg *s, size_t *len, uint32_t *m)
{
    *len = s->nints;
    *m = s->m3;
    return s->isum;
}

const float *fedi_node_sa_agg_mean(const node_sa_agg *s, double *weight)
{
    *weight = s->weight;
    return s->mean;
}

const float *fedi_node_sa_agg_stats(const node_sa_agg *s) { return s->stats; }

const char *fedi_node_sa_agg_fate(const node_sa_agg *s, size_t i)
{
    static const char *const fate[] = {
        "secagg: no keys", "secagg: dropped before sharing", "secagg: dropped after sharing",
        "secagg: dropped after its masked input", "secagg: dropped before unmasking", ""};
    int st;

    if (!s || i >= s->nm)
        return "missing";
    st = s->m[i].stage_in;
    if (s->stage != SA_DONE && s->stage != SA_NONE && st >= s->stage)
        return "secagg: try failed closed";
    return fate[st < 0 ? 0 : st > 5 ? 5 : st];
}

static fed_err arm_stage(fed_node *n, uint64_t ms)
{
    return fedi_node_arm_in(n, ms, NODE_TIMER_STAGE);
}

fed_err fedi_node_sa_agg_begin(fed_node *n)
{
    node_agg *a = n->agg;
    node_sa_agg *s = a->sa;

    fedi_node_sa_agg_end(n);
    if (s->round != n->round + 1) {
        s->round = n->round + 1;
        s->try_no = 0;
    } else {
        s->try_no++;
    }
    memcpy(s->ctx.agg_pk, n->key, 32);
    s->ctx.epoch = fed_wire_epoch(n->wire);
    s->ctx.round = s->round;
    s->ctx.try_no = s->try_no;
    s->nm = a->nparts;
    for (size_t i = 0; i < s->nm; i++)
        s->m[i].idx = -1;
    /* the statistics pass sums its integers alone (node/agg_stats.c) */
    s->np = fedi_node_agg_stats_pass(n) ? 0 : fed_node_layout_sent(&a->layout);
    s->nints = fedi_node_agg_stats_pass(n)
                   ? fedi_node_agg_stats_ints(n)
                   : n->cfg.secagg.ints + fed_node_agg_site_eval_ints(n); /* node/site_eval.h */
    s->words = (size_t)sa_words(&n->cfg, &a->layout, s->np, s->nints);
    s->stage = SA_KEYS;
    fed_log(FED_LOG_INFO, "secagg: round %llu try %u: %zu clients, stage keys",
            (unsigned long long)s->round, s->try_no, s->nm);
    return arm_stage(n, n->cfg.secagg.stage_ms);
}

/* ---- answers ---- */

static fed_err answer(fed_node *n, sa_member *m, uint8_t type, uint32_t count, const uint8_t *vec,
                      size_t len)
{
    node_sa_agg *s = n->agg->sa;
    fed_req *req = m->held;
    fed_wire_hdr h;
    fed_wire_block b;
    fed_err e;

    m->held = NULL;
    if (!req)
        return FED_OK;
    e = fedi_node_header(n, type, m->held_hdr.sender, s->round, m->held_hdr.sender_epoch,
                         FED_CODEC_NONE, &h);
    if (e != FED_OK) {
        fedi_node_refuse(n, req);
        return e;
    }
    memset(&b, 0, sizeof b);
    b.sa_try = s->try_no;
    b.sa_count = count;
    if (n->cfg.hooks && n->cfg.hooks->sa_tamper) { /* a test's cheating aggregator: a copy */
        uint8_t *cp = fed_malloc(len + 1);

        if (!cp) {
            fedi_node_refuse(n, req);
            return FED_ERR_NOMEM;
        }
        size_t clen = len;

        memcpy(cp, vec, len);
        n->cfg.hooks->sa_tamper(n->cfg.hooks->ctx, 0, type, h.recipient, cp, &clen, &b.sa_count);
        e = fedi_node_emit(n, req, &h, &b, cp, clen <= len ? clen : len);
        fed_free(cp);
        return e;
    }
    return fedi_node_emit(n, req, &h, &b, vec, len);
}

/* The SHARES answer of list index j: the U2 flags, then what U2 sealed
 * for j, in sender order. */
static fed_err answer_inbox(fed_node *n, sa_member *m)
{
    node_sa_agg *s = n->agg->sa;
    size_t cap = 4 + s->n1 + (size_t)s->k * SA_SEALED_ENTRY_BYTES, at;
    uint8_t *v = fed_malloc(cap);
    uint32_t count = 0;
    fed_err e;

    if (!v)
        return FED_ERR_NOMEM;
    fed_put_u32le(v, s->n1);
    memcpy(v + 4, s->u2, s->n1);
    at = 4 + s->n1;
    for (uint32_t i = 0; i < s->n1; i++) {
        const sa_member *o = &s->m[s->part_of[i]];

        if (!s->u2[i])
            continue;
        for (uint32_t j = 0; j < o->nshares; j++) {
            const uint8_t *p = o->shares + (size_t)j * SA_SEALED_ENTRY_BYTES;

            if (fed_get_u32le(p) != (uint32_t)m->idx || at + SA_SEALED_ENTRY_BYTES > cap)
                continue;
            fed_put_u32le(v + at, i);
            memcpy(v + at + 4, p + 4, FED_SECAGG_BOX_BYTES);
            at += SA_SEALED_ENTRY_BYTES;
            count++;
        }
    }
    e = answer(n, m, FED_WIRE_SA_SHARES, count, v, at);
    fed_free(v);
    return e;
}

static fed_err answer_sigs(fed_node *n, sa_member *m)
{
    node_sa_agg *s = n->agg->sa;
    uint8_t *v = fed_malloc((size_t)s->n1 * SA_SIG_ENTRY_BYTES + 1);
    uint32_t count = 0;
    fed_err e;

    if (!v)
        return FED_ERR_NOMEM;
    for (uint32_t i = 0; i < s->n1; i++) {
        if (!s->u4[i])
            continue;
        fed_put_u32le(v + (size_t)count * SA_SIG_ENTRY_BYTES, i);
        memcpy(v + (size_t)count * SA_SIG_ENTRY_BYTES + 4, s->m[s->part_of[i]].surv_sig, 64);
        count++;
    }
    e = answer(n, m, FED_WIRE_SA_CONSIST, count, v, (size_t)count * SA_SIG_ENTRY_BYTES);
    fed_free(v);
    return e;
}

/* The answer of stage st to member m (held), which is past it. */
static fed_err answer_stage(fed_node *n, sa_member *m, int st)
{
    node_sa_agg *s = n->agg->sa;

    switch (st) {
    case SA_KEYS:
        return answer(n, m, FED_WIRE_SA_KEYS, s->n1, s->list, (size_t)s->n1 * SA_KEY_ENTRY_BYTES);
    case SA_SHARES: return answer_inbox(n, m);
    case SA_MASKED: return answer(n, m, FED_WIRE_SA_MASKED, s->n1, s->u3, s->n1);
    case SA_CONSIST: return answer_sigs(n, m);
    default: return FED_OK;
    }
}

/* ---- the record ---- */

static uint32_t count_flags(const uint8_t *f, uint32_t n);

void fedi_node_sa_agg_row(const fed_node *n, fed_store_secagg_try *t, const char *outcome)
{
    const node_sa_agg *s = n->agg->sa;

    memset(t, 0, sizeof *t);
    t->round = s->round;
    t->try_no = s->try_no;
    t->at_ms = fedi_node_wall_ms(n);
    t->sampled = (uint32_t)s->nm;
    t->keyed = s->n1;
    t->k = s->k;
    t->t = s->t;
    if (s->u2) {
        t->shared = count_flags(s->u2, s->n1);
        t->masked = count_flags(s->u3, s->n1);
        t->signed_ = count_flags(s->u4, s->n1);
    }
    for (size_t i = 0; i < s->nm; i++)
        t->unmasked += s->m[i].stage_in >= SA_UNMASK;
    snprintf(t->outcome, sizeof t->outcome, "%s", outcome);
}

/* ---- failing closed ---- */

/* The try fails: every held request is told, nothing of it is kept. Before
 * any masked input went out (keys, shares) the round starts again (fresh
 * keys: try + 1) with whoever asks. From the masked-input stage on it never
 * does: a second try would mask the same deltas again, and two sums over
 * different sets (the first unmasked by neighbours' shares even without
 * some clients' own reveals) would give deltas away; each such client
 * declines a later try, and the round closes with no update (void) and
 * the next round trains afresh. With DP-FedAvg the draw stands in either
 * case (a new one would void the accounting): the round closes with its
 * noise alone. revealed: the clients sent their inputs of this round to an
 * earlier aggregator process (one of them says so). */
static fed_err fail_try(fed_node *n, const char *why, int revealed)
{
    node_agg *a = n->agg;
    node_sa_agg *s = a->sa;

    fed_store_secagg_try row;
    char outcome[160];
    fed_err e;

    revealed = revealed || s->stage >= SA_MASKED;
    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_STAGE);
    fed_log(FED_LOG_WARN, "secagg: round %llu try %u failed closed at stage %s: %s; no sum "
            "released, %s", (unsigned long long)s->round, s->try_no, stage_name[s->stage], why,
            a->dp      ? "the draw stands (DP-FedAvg): the round releases its noise alone"
            : revealed ? "masked inputs were out: the round closes with no update (no second "
                         "sum over the same deltas)"
                       : "the round runs again with fresh keys");
    snprintf(outcome, sizeof outcome, "failed at %s: %s", stage_name[s->stage], why);
    if (revealed) { /* its row goes with the round's commit */
        snprintf(s->outcome, sizeof s->outcome, "%s", outcome);
    } else {
        fedi_node_sa_agg_row(n, &row, outcome);
        if ((e = fed_store_put_secagg_try(n->cfg.store, &row)) != FED_OK)
            fed_log(FED_LOG_WARN, "secagg: recording the failed try: %s", fed_strerror(e));
    }
    for (size_t i = 0; i < s->nm; i++) {
        sa_member *m = &s->m[i];

        if (m->held) {
            (void)fedi_node_ack(n, m->held, &m->held_hdr, FED_ERR_SA_FAILED, 0);
            m->held = NULL;
        }
    }
    s->void_sum = revealed;
    if (a->dp || revealed)
        return fedi_node_agg_close_round(n);
    fedi_node_agg_abandon_round(n);
    return FED_ERR_SA_FAILED;
}

static fed_err fail(fed_node *n, const char *why) { return fail_try(n, why, 0); }

fed_err fedi_node_sa_agg_revealed_before(fed_node *n)
{
    node_sa_agg *s = n->agg->sa;

    if (!s || s->stage == SA_NONE || s->stage == SA_DONE || s->void_sum ||
        n->agg->state != AGG_RUNNING)
        return FED_OK;
    return fail_try(n, "a client revealed its shares of this round to an earlier aggregator "
                    "process", 1);
}

/* ---- stage ends ---- */

static uint32_t count_flags(const uint8_t *f, uint32_t n)
{
    uint32_t c = 0;

    for (uint32_t i = 0; i < n; i++)
        c += f[i];
    return c;
}

static fed_err end_keys(fed_node *n)
{
    node_sa_agg *s = n->agg->sa;
    uint32_t n1 = 0, floor = fed_node_sa_floor(&n->cfg);
    double pf = 0;
    char why[128];
    fed_err e;

    for (size_t i = 0; i < s->nm; i++)
        n1 += s->m[i].stage_in >= SA_KEYS;
    if (n1 < floor || n1 < n->cfg.agg.min_clients) {
        snprintf(why, sizeof why, "too few clients sent keys (%u; a secure round needs %u, "
                 "the larger of its floor and --min-clients)", n1,
                 floor > n->cfg.agg.min_clients ? floor : n->cfg.agg.min_clients);
        return fail(n, why);
    }
    if (!(s->part_of = fed_malloc(n1 * sizeof *s->part_of)) ||
        !(s->list = fed_malloc((size_t)n1 * SA_KEY_ENTRY_BYTES)) || !(s->u2 = fed_calloc(n1, 1)) ||
        !(s->u3 = fed_calloc(n1, 1)) || !(s->u4 = fed_calloc(n1, 1)))
        return FED_ERR_NOMEM;
    s->n1 = 0;
    for (size_t i = 0; i < s->nm; i++) { /* parts are in key order: so is the list */
        if (s->m[i].stage_in < SA_KEYS)
            continue;
        s->m[i].idx = (int)s->n1;
        s->part_of[s->n1] = (uint32_t)i;
        fedi_sa_put_key_entry(s->list + (size_t)s->n1 * SA_KEY_ENTRY_BYTES, &s->m[i].ke);
        s->n1++;
    }
    if ((e = fed_secagg_degree(n1, n->cfg.secagg.dropout, &s->k, &s->t, &pf)) != FED_OK)
        return fail(n, "no degree for this many clients");
    fed_secagg_graph_seed(s->list, (size_t)n1 * SA_KEY_ENTRY_BYTES, s->seed);
    if ((e = fed_secagg_graph_new(s->seed, n1, s->k, &s->g)) != FED_OK)
        return fail(n, fed_strerror(e));
    fed_log(FED_LOG_INFO, "secagg: round %llu: %u clients in the key list, k %u, t %u "
            "(fails for lack of shares with probability <= %.2g at dropout %.2f)",
            (unsigned long long)s->round, n1, s->k, s->t, pf, n->cfg.secagg.dropout);
    s->stage = SA_SHARES;
    for (size_t i = 0; i < s->nm; i++)
        if (s->m[i].held)
            (void)answer_stage(n, &s->m[i], SA_KEYS);
    return arm_stage(n, n->cfg.secagg.stage_ms);
}

static fed_err end_shares(fed_node *n)
{
    node_sa_agg *s = n->agg->sa;
    uint32_t n2;

    for (uint32_t i = 0; i < s->n1; i++)
        s->u2[i] = s->m[s->part_of[i]].stage_in >= SA_SHARES;
    n2 = count_flags(s->u2, s->n1);
    if (n2 < fed_node_sa_floor(&n->cfg) || n2 < n->cfg.agg.min_clients)
        return fail(n, "too few clients shared");
    s->stage = SA_MASKED;
    for (size_t i = 0; i < s->nm; i++)
        if (s->m[i].held)
            (void)answer_stage(n, &s->m[i], SA_SHARES);
    /* the masked input comes after training: the round's deadline */
    return arm_stage(n, n->cfg.deadline_ms);
}

/* Every secret the unmasking needs has at least t holders in alive. */
static int enough_holders(const node_sa_agg *s, const uint8_t *alive, uint32_t *short_of)
{
    for (uint32_t i = 0; i < s->n1; i++) {
        if (!s->u2[i])
            continue;
        /* its holders: its neighbours in U2 (they hold its shares) and alive */
        uint32_t c = 0;
        const uint32_t *nb = fed_secagg_graph_neighbours(s->g, i);

        for (uint32_t j = 0; j < s->k; j++)
            c += s->u2[nb[j]] && alive[nb[j]];
        if (c < s->t) {
            *short_of = i;
            return 0;
        }
    }
    return 1;
}

static fed_err end_masked(fed_node *n)
{
    node_sa_agg *s = n->agg->sa;
    uint32_t n3, who = 0;
    char why[96];

    for (uint32_t i = 0; i < s->n1; i++)
        s->u3[i] = s->u2[i] && s->m[s->part_of[i]].stage_in >= SA_MASKED;
    n3 = count_flags(s->u3, s->n1);
    if (n3 < fed_node_sa_floor(&n->cfg) || n3 < n->cfg.agg.min_clients)
        return fail(n, "too few masked inputs");
    if (!enough_holders(s, s->u3, &who)) {
        snprintf(why, sizeof why, "client %u's secret has fewer than t = %u live holders", who,
                 s->t);
        return fail(n, why);
    }
    s->stage = SA_CONSIST;
    for (size_t i = 0; i < s->nm; i++)
        if (s->m[i].held)
            (void)answer_stage(n, &s->m[i], SA_MASKED);
    return arm_stage(n, n->cfg.secagg.stage_ms);
}

static fed_err end_consist(fed_node *n)
{
    node_sa_agg *s = n->agg->sa;
    uint32_t who = 0;
    char why[96];

    for (uint32_t i = 0; i < s->n1; i++)
        s->u4[i] = s->u3[i] && s->m[s->part_of[i]].stage_in >= SA_CONSIST;
    if (!enough_holders(s, s->u4, &who)) {
        snprintf(why, sizeof why, "client %u's secret has fewer than t = %u signed holders", who,
                 s->t);
        return fail(n, why);
    }
    s->stage = SA_UNMASK;
    for (size_t i = 0; i < s->nm; i++)
        if (s->m[i].held)
            (void)answer_stage(n, &s->m[i], SA_CONSIST);
    return arm_stage(n, n->cfg.secagg.stage_ms);
}

/* The secret of list index owner of kind from the revealed shares, into
 * out (an arena slot's memory). FED_ERR_TOO_FEW: fewer than t. */
static fed_err rebuild(node_sa_agg *s, uint32_t owner, uint8_t kind, fed_secagg_share *buf,
                       uint8_t out[32])
{
    size_t m = 0;

    for (uint32_t i = 0; i < s->n1; i++) {
        const sa_member *h = &s->m[s->part_of[i]];

        if (h->stage_in < SA_UNMASK)
            continue;
        for (uint32_t j = 0; j < h->nunmask; j++)
            if (h->unmask[j].owner == owner && h->unmask[j].kind == kind)
                buf[m++] = h->unmask[j].share;
    }
    if (m < s->t) {
        fed_secagg_share_wipe(buf, m);
        return FED_ERR_TOO_FEW;
    }
    fed_err e = fed_secagg_shamir_combine(buf, m, s->t, out);

    fed_secagg_share_wipe(buf, m);
    return e;
}

/* Sum, unmask, check, dequantize: the round's mean and weight. */
static fed_err unmask(fed_node *n, char *why, size_t cap)
{
    node_agg *a = n->agg;
    node_sa_agg *s = a->sa;
    fed_crypto_arena *ar = n->cfg.arena;
    fed_crypto_slot *slot = NULL;
    fed_secagg_share *buf = fed_crypto_guarded_alloc((size_t)s->k + 1, sizeof *buf);
    fed_secagg_maskset *ms = NULL; /* every mask to remove: one blocked walk */
    float *deq = NULL;
    agg_segment segs[AGG_SEGMENTS_MAX]; /* the delta's segments (node/layout.h), its
                                           weight, the integers */
    size_t nd, nseg, np = s->np;
    uint32_t m3 = count_flags(s->u3, s->n1);
    uint64_t top = (uint64_t)m3 * ((s->q.bits >= 32 ? 0 : (UINT64_C(1) << s->q.bits)) - 1);
    fed_err e = FED_OK;

    if (!buf || !(deq = fed_malloc(s->words * sizeof *deq))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    if ((e = fed_crypto_slot_take(ar, &slot)) != FED_OK ||
        (e = fed_secagg_maskset_new(m3 + (size_t)(count_flags(s->u2, s->n1) - m3) * s->k,
                                    &ms)) != FED_OK)
        goto out;
    memset(s->sum, 0, s->words * sizeof *s->sum);
    for (uint32_t i = 0; i < s->n1; i++) {
        const uint32_t *v = s->m[s->part_of[i]].masked;

        if (!s->u3[i])
            continue;
        for (size_t w = 0; w < s->words; w++)
            s->sum[w] += v[w];
    }
    for (uint32_t i = 0; i < s->n1 && e == FED_OK; i++) {
        const sa_key_entry *ke = &s->m[s->part_of[i]].ke;
        uint8_t *sec = fed_crypto_slot_mem(slot);

        if (!s->u2[i])
            continue;
        if (s->u3[i]) { /* a survivor: its self mask goes */
            if ((e = rebuild(s, i, SA_KIND_SELF, buf, sec)) != FED_OK) {
                snprintf(why, cap, "client %u's self seed: %s", i, fed_strerror(e));
                break;
            }
            e = fed_secagg_maskset_add_self(ms, sec, ke->mask_pk, &s->ctx, -1);
        } else { /* dropped after sharing: its masks with the survivors go */
            const uint32_t *nb = fed_secagg_graph_neighbours(s->g, i);

            if ((e = rebuild(s, i, SA_KIND_KEY, buf, sec)) != FED_OK) {
                snprintf(why, cap, "client %u's mask key: %s", i, fed_strerror(e));
                break;
            }
            for (uint32_t j = 0; j < s->k && e == FED_OK; j++) {
                const sa_key_entry *o = &s->m[s->part_of[nb[j]]].ke;

                if (!s->u3[nb[j]])
                    continue;
                e = fed_secagg_maskset_add_pair(ms, sec, ke->mask_pk, o->mask_pk, &s->ctx,
                                                -fed_secagg_pair_sign(o->mask_pk, ke->mask_pk));
            }
        }
        sodium_memzero(sec, 32);
        if (e != FED_OK && !why[0])
            snprintf(why, cap, "unmasking client %u: %s", i, fed_strerror(e));
    }
    if (e != FED_OK || (e = fed_secagg_maskset_apply(ms, s->sum, s->words)) != FED_OK)
        goto out;
    for (size_t w = 0; w < s->words; w++)
        if (s->sum[w] > top) {
            snprintf(why, cap, "the sum's coordinate %zu (%u) is out of range (at most %llu): "
                     "a client sent a bad input", w, s->sum[w], (unsigned long long)top);
            e = FED_ERR_RANGE;
            goto out;
        }
    nseg = sa_segs(&n->cfg, &a->layout, np, s->nints, segs, &nd);
    if ((e = fedi_agg_seg_dequantize(segs, nseg, s->q.bits, s->sum, m3, deq, s->isum)) != FED_OK)
        goto out;
    /* the weight coordinate carries 2 r w / W - r per client */
    s->weight = ((double)deq[np] + (double)m3 * s->q.range) / (2 * s->q.range);
    if (!(s->weight > 0)) {
        snprintf(why, cap, "the summed weight is %g", s->weight);
        e = FED_ERR_RANGE;
        goto out;
    }
    /* each segment of the delta by its rule (the weight word stays), then
       the trained floats into the mean, the statistics apart (a statistics
       pass has no delta) */
    if (np) {
        fedi_agg_seg_finish(segs, nd, deq, m3, s->weight, deq);
        fed_node_layout_unpack(&a->layout, deq, s->mean);
        memcpy(s->mean + a->nparams, fed_node_layout_extra(&a->layout, deq),
               a->layout.extra * sizeof *s->mean); /* the strategy's own segment */
        if (s->stats) {
            memcpy(s->stats, deq + a->layout.len[LAYOUT_TRAINED],
                   a->layout.len[LAYOUT_STATS] * sizeof *s->stats);
            fed_node_layout_fill(&a->layout, LAYOUT_STATS, s->mean, 0.0f);
        }
    }
    s->weight *= weight_cap(n);
out:
    fed_crypto_slot_release(ar, slot);
    fed_secagg_maskset_free(ms); /* the seeds wiped */
    fed_crypto_guarded_free(buf);
    if (e != FED_OK) { /* a failed try keeps no sum, not even a partial one */
        sodium_memzero(s->sum, s->words * sizeof *s->sum);
        sodium_memzero(s->mean, (a->nparams + a->layout.extra) * sizeof *s->mean);
        sodium_memzero(s->isum, s->nints * sizeof *s->isum);
        if (s->stats)
            sodium_memzero(s->stats, a->layout.len[LAYOUT_STATS] * sizeof *s->stats);
    }
    fed_free(deq);
    return e;
}

static fed_err end_unmask(fed_node *n)
{
    node_agg *a = n->agg;
    node_sa_agg *s = a->sa;
    char why[160] = "";
    fed_err e;

    (void)n->env.cancel_timer(n->env.self, NODE_TIMER_STAGE);
    s->stage = SA_DONE;
    if ((e = unmask(n, why, sizeof why)) != FED_OK) {
        s->stage = SA_UNMASK;
        return fail(n, why[0] ? why : fed_strerror(e));
    }
    for (uint32_t i = 0; i < s->n1; i++)
        if (s->u3[i])
            a->parts[s->part_of[i]].got = 1;
    fed_log(FED_LOG_INFO, "secagg: round %llu try %u unmasked: %u in the sum, %u dropped after "
            "sharing", (unsigned long long)s->round, s->try_no, count_flags(s->u3, s->n1),
            count_flags(s->u2, s->n1) - count_flags(s->u3, s->n1));
    s->m3 = count_flags(s->u3, s->n1);
    if (!fedi_node_agg_stats_pass(n) && n->cfg.secagg.ints && n->cfg.secagg.on_int_sum)
        n->cfg.secagg.on_int_sum(n->cfg.secagg.ints_ctx, n, s->round, s->isum, n->cfg.secagg.ints,
                          count_flags(s->u3, s->n1));
    return fedi_node_agg_close_round(n);
}

/* Ends the running stage when every input it waits for is in. */
static fed_err maybe_end(fed_node *n, int timer)
{
    node_sa_agg *s = n->agg->sa;
    size_t want = 0, got = 0;

    for (size_t i = 0; i < s->nm; i++) {
        const sa_member *m = &s->m[i];
        /* a client that declined the round (a LEAVE) before its keys is out */
        int in_stage = s->stage == SA_KEYS ? !n->agg->parts[i].refused
                       : m->idx < 0        ? 0
                       : s->stage == SA_SHARES ? 1
                       : s->stage == SA_MASKED ? s->u2[m->idx]
                       : s->stage == SA_CONSIST ? s->u3[m->idx]
                                                : s->u4[m->idx];

        want += in_stage != 0;
        got += in_stage && m->stage_in >= s->stage;
    }
    if (!timer && got < want)
        return FED_OK;
    switch (s->stage) {
    case SA_KEYS: return end_keys(n);
    case SA_SHARES: return end_shares(n);
    case SA_MASKED: return end_masked(n);
    case SA_CONSIST: return end_consist(n);
    case SA_UNMASK: return end_unmask(n);
    default: return FED_OK;
    }
}

fed_err fedi_node_sa_agg_declined(fed_node *n)
{
    node_sa_agg *s = n->agg->sa;

    if (s->stage != SA_KEYS || s->void_sum || n->agg->state != AGG_RUNNING)
        return FED_OK; /* later on, it is a dropout */
    return maybe_end(n, 0);
}

fed_err fedi_node_sa_agg_on_timer(fed_node *n)
{
    node_sa_agg *s = n->agg->sa;

    if (!s || s->stage == SA_NONE || s->stage == SA_DONE || s->void_sum ||
        n->agg->state != AGG_RUNNING)
        return FED_OK;
    fed_log(FED_LOG_INFO, "secagg: round %llu stage %s deadline", (unsigned long long)s->round,
            stage_name[s->stage]);
    return maybe_end(n, 1);
}

/* ---- requests ---- */

static int stage_of(uint8_t type) { return type - FED_WIRE_SA_KEYS + SA_KEYS; }

static fed_err refuse(fed_node *n, node_open *op, fed_err why, fed_err status)
{
    fed_wire_note_reject(n->wire, &op->msg.hdr, why);
    (void)fedi_node_ack(n, op->req, &op->msg.hdr, status, 0);
    op->req = NULL;
    return why;
}

/* The stage's input from m: checked, kept. */
static fed_err take(fed_node *n, sa_member *m, size_t part, const fed_wire_msg *msg)
{
    node_sa_agg *s = n->agg->sa;
    const fed_wire_block *b = &msg->block;
    fed_err e;

    switch (msg->hdr.type) {
    case FED_WIRE_SA_KEYS:
        if ((e = fedi_sa_parse_keys_req(msg->vector, msg->vector_len, b->sa_count, m->ke.mask_pk,
                                        m->ke.enc_pk, m->ke.sig)) != FED_OK)
            return e;
        memcpy(m->ke.id, n->agg->parts[part].key, 32);
        if (!fedi_sa_keys_verify(m->ke.id, &s->ctx, m->ke.mask_pk, m->ke.enc_pk, m->ke.sig))
            return FED_ERR_SA_KEYS;
        return FED_OK;
    case FED_WIRE_SA_SHARES: {
        sa_sealed_entry *en;
        const uint32_t *nb;

        if (b->sa_count != s->k)
            return FED_ERR_SA_SHARES;
        if (!(en = fed_malloc((size_t)s->k * sizeof *en)))
            return FED_ERR_NOMEM;
        e = fedi_sa_parse_sealed(msg->vector, msg->vector_len, b->sa_count, s->n1, en);
        nb = fed_secagg_graph_neighbours(s->g, (uint32_t)m->idx);
        for (uint32_t j = 0; e == FED_OK && j < s->k; j++)
            if (en[j].index != nb[j]) /* one pair for each neighbour, no other */
                e = FED_ERR_SA_SHARES;
        fed_free(en);
        if (e != FED_OK)
            return e;
        if (!(m->shares = fed_malloc(msg->vector_len)))
            return FED_ERR_NOMEM;
        memcpy(m->shares, msg->vector, msg->vector_len);
        m->nshares = b->sa_count;
        return FED_OK;
    }
    case FED_WIRE_SA_MASKED: {
        agg_part *p = &n->agg->parts[part];

        if (b->sa_count != s->words || msg->vector_len != s->words * 4 ||
            !(s->np ? fed_node_layout_matches(&n->agg->layout, 1, b) /* its segments, said */
                    : b->seg_count == 0))                               /* a pass: none */
            return FED_ERR_SA_MASKED;
        if (!(m->masked = fed_malloc(s->words * sizeof *m->masked)))
            return FED_ERR_NOMEM;
        for (size_t w = 0; w < s->words; w++)
            m->masked[w] = fed_get_u32le(msg->vector + 4 * w);
        /* the signed masked input, for the record (contributions) */
        memcpy(p->header, msg->header, FED_WIRE_HEADER_BYTES);
        memcpy(p->digest, msg->digest, sizeof p->digest);
        memcpy(p->sig, msg->sig, sizeof p->sig);
        p->epoch = msg->hdr.sender_epoch;
        p->base = msg->hdr.round;
        return FED_OK;
    }
    case FED_WIRE_SA_CONSIST:
        if (b->sa_count != 1 || msg->vector_len != 64)
            return FED_ERR_SA_CONSIST;
        if (!fedi_sa_survivors_verify(m->ke.id, &s->ctx, s->seed, s->u3, s->n1, msg->vector))
            return FED_ERR_SA_CONSIST;
        memcpy(m->surv_sig, msg->vector, 64);
        return FED_OK;
    case FED_WIRE_SA_UNMASK: {
        sa_unmask_entry *en;

        if (b->sa_count > s->k)
            return FED_ERR_SA_UNMASK;
        if (!(en = fed_crypto_guarded_alloc((size_t)b->sa_count + 1, sizeof *en)))
            return FED_ERR_NOMEM;
        e = fedi_sa_parse_unmask(msg->vector, msg->vector_len, b->sa_count, s->n1, en);
        for (uint32_t j = 0; e == FED_OK && j < b->sa_count; j++) {
            uint32_t o = en[j].owner;

            /* only a neighbour's, only one that shared, only the kind its
               fate calls for, carrying the holder's own x */
            if (!fed_secagg_graph_has_edge(s->g, (uint32_t)m->idx, o) || !s->u2[o] ||
                en[j].kind != (s->u3[o] ? SA_KIND_SELF : SA_KIND_KEY) ||
                en[j].share.x != (uint32_t)m->idx + 1)
                e = FED_ERR_SA_UNMASK;
        }
        if (e != FED_OK) {
            fed_crypto_guarded_free(en); /* wiped */
            return e;
        }
        m->unmask = en;
        m->nunmask = b->sa_count;
        return FED_OK;
    }
    default: return FED_ERR_ROLE;
    }
}

fed_err fedi_node_sa_agg_on_msg(fed_node *n, node_open *op)
{
    node_agg *a = n->agg;
    node_sa_agg *s = a->sa;
    const fed_wire_msg *msg = &op->msg;
    int st = stage_of(msg->hdr.type);
    fed_err own = (fed_err)(FED_ERR_SA_KEYS + (st - SA_KEYS));
    agg_part *p;
    sa_member *m;
    size_t part;
    fed_err e;

    /* the cheap checks first: secure rounds, this round and try, a part */
    if (!s || a->state != AGG_RUNNING || msg->hdr.round != n->round + 1 ||
        msg->block.sa_try != s->try_no || s->stage == SA_NONE || s->void_sum)
        return refuse(n, op, own, FED_ERR_LATE);
    if (!(p = fedi_node_agg_part_find(a, msg->hdr.sender)))
        return refuse(n, op, own, FED_ERR_ROLE);
    part = (size_t)(p - a->parts);
    m = &s->m[part];
    if (st > s->stage || (st > SA_KEYS && m->idx < 0))
        return refuse(n, op, own, own); /* too early, or not in the list */
    if (st < s->stage || m->stage_in >= st) {
        /* a re-asked request: the same answer (or, once its stage is
           over, the stage's answer at once) */
        fedi_node_refuse(n, m->held);
        m->held = op->req;
        m->held_hdr = msg->hdr;
        op->req = NULL;
        if (st == SA_UNMASK) {
            fed_req *r = m->held;

            m->held = NULL;
            return fedi_node_ack(n, r, &msg->hdr, FED_OK, FED_WIRE_ACK_DUPLICATE);
        }
        if (st < s->stage)
            return answer_stage(n, m, st);
        return FED_OK;
    }
    /* st == stage, its first input from m; those who should give it only */
    if ((st == SA_MASKED && !s->u2[m->idx]) || (st == SA_CONSIST && !s->u3[m->idx]) ||
        (st == SA_UNMASK && !s->u4[m->idx]))
        return refuse(n, op, own, own);
    if (st == SA_MASKED && !msg->stream && msg->block.sa_count == 0 && msg->vector_len == 0) {
        /* a re-ask once its input was out (a frame or a stream), which is not in (lost,
           or its last frame still opening): it streams it again */
        fed_req *r = op->req;

        op->req = NULL;
        return fedi_node_ack(n, r, &msg->hdr, FED_ERR_STREAM, 0);
    }
    if (n->cfg.hooks && n->cfg.hooks->sa_tamper) { /* before take: a test's bad input */
        size_t len = msg->vector_len;
        uint32_t count = msg->block.sa_count;

        n->cfg.hooks->sa_tamper(n->cfg.hooks->ctx, 1, msg->hdr.type, msg->hdr.sender,
                                msg->vector, &len, &count);
    }
    if ((e = take(n, m, part, msg)) != FED_OK)
        return refuse(n, op, e == FED_ERR_NOMEM ? e : own, e);
    m->stage_in = st;
    fedi_node_refuse(n, m->held);
    m->held_hdr = msg->hdr;
    m->held = op->req;
    op->req = NULL;
    if (st == SA_UNMASK) { /* answered at once: nothing more comes to it */
        fed_req *r = m->held;

        m->held = NULL;
        if ((e = fedi_node_ack(n, r, &msg->hdr, FED_OK, 0)) != FED_OK)
            return e;
    }
    return maybe_end(n, 0);
}
