/* secagg_client.c - a client's side of secure aggregation inside one round
 * (its MODEL says so, field 12): fresh round keys signed with its identity
 * and bound to the aggregator, epoch, round and try; the signed key list
 * checked and the round's graph drawn from it; its self seed and mask key
 * Shamir-split among its neighbours and sealed for each; the neighbours'
 * shares opened and kept in the arena; its trained delta clipped, weighted,
 * quantized and masked (sent as a CHUNK stream when over a frame); the
 * survivor list checked (named dropped, or a split graph: it refuses) and
 * signed, t neighbours' signatures on the same list required; then for
 * each neighbour one share, never both kinds. Its secrets live in arena
 * slots and are wiped when the round ends or fails; nothing of them is
 * written to disk or logged. */
#include <math.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "crypto/keystream.h"
#include "model/colstats.h"
#include "node/agg_input_impl.h"
#include "node/secagg_impl.h"
#include "node/secagg_msg_impl.h"
#include "secagg/graph.h"
#include "secagg/quant.h"

/* The request out (or what the client waits for). */
enum { SC_NONE = 0, SC_KEYS, SC_SHARES, SC_TRAINING, SC_MASKED, SC_CONSIST, SC_UNMASK };

/* Resends of one stage's request before the client gives the round up,
 * beyond those the round's deadline accounts for (a held request is asked
 * again every retry_ms while the others train). */
#define SC_MAX_RESENDS 64
/* Resends of one frame of a streamed masked input, with no ACK, before the
 * stream starts afresh (the aggregator dropped an idle reassembly). */
#define SC_STREAM_RESENDS 3

struct node_sa_client {
    int stage;
    int trained;            /* the training job came back (masked is built) */
    int inbox;              /* the shares for it are in */
    uint64_t round;
    uint32_t try_no;
    fed_secagg_ctx ctx;
    fed_secagg_quant q;
    double max_weight, dropout;
    uint32_t pass_ints;     /* the statistics pass: its integers, no delta (0: a
                               training round) */
    double stats_range;     /* the statistics segment's range (MODEL field 16) */
    fed_wire_block segs;    /* the masked input's segments field (node/layout.h) */
    fed_secagg_keys *keys;  /* arena slot */
    uint32_t n1, me, k, t;
    sa_key_entry *list;     /* (n1) */
    uint8_t seed[32];
    fed_secagg_graph *g;
    uint8_t *u2, *u3;       /* (n1) */
    fed_crypto_slot **rx;   /* (k) by neighbour position: self share, key share */
    uint8_t (*sealk)[32];   /* (k) guarded: each neighbour's sealing key, both ways,
                               from sealing (stage 2) to opening (stage 3) */
    uint8_t *req;           /* the request's vector, resent as it is */
    size_t req_len, req_cap;
    uint8_t *reveal;        /* (k entries) the UNMASK request: guarded memory */
    const uint8_t *out;     /* what send_req sends: req, or reveal */
    uint32_t req_count;
    uint8_t req_type;
    uint32_t resends, max_resends;
    int streamed;           /* the masked input went as a CHUNK stream (transfer.c) */
    int masked_out;         /* the masked input went out whole once: a retry re-asks
                               with an empty SA_MASKED rather than resending it */
    uint32_t stuck;         /* resends of the stream's frame since its last ACK */
    uint32_t *masked;       /* (words) */
    size_t words;
    /* the last round whose masked input went out (0: none): the client
       declines a later try of that round (the same delta masked afresh; two
       sums over different sets would expose the clients in one and not the
       other), so it reveals at most once a round */
    uint64_t masked_round;
    /* the stochastic rounding's draws: keyed once, when the node is made,
       so they do not depend on how many frames (nonces) went before (a
       masked input in whole frames or in a stream rounds alike) */
    fed_crypto_keystream ks;
};

fed_err fedi_node_sa_client_new(fed_node *n, node_sa_client **out)
{
    *out = fed_calloc(1, sizeof **out);
    if (!*out)
        return FED_ERR_NOMEM;
    fed_crypto_keystream_init(&(*out)->ks, n->env.random, n->env.self);
    return FED_OK;
}

/* Drops the masked input's stream (it borrows s->req). */
static void stream_end(fed_node *n, node_sa_client *s)
{
    if (s->streamed)
        fedi_node_tx_drop(n, n->cfg.client.aggregator.key);
    s->streamed = 0;
    s->stuck = 0;
    s->masked_out = 0;
}

/* Wipes and drops everything of the round. */
static void round_clear(fed_node *n, node_sa_client *s)
{
    fed_crypto_arena *a = n->cfg.arena;

    stream_end(n, s);
    fed_secagg_keys_free(a, s->keys);
    s->keys = NULL;
    for (uint32_t i = 0; s->rx && i < s->k; i++)
        fed_crypto_slot_release(a, s->rx[i]);
    fed_free(s->rx);
    s->rx = NULL;
    fed_free(s->list);
    s->list = NULL;
    fed_secagg_graph_free(s->g);
    s->g = NULL;
    fed_free(s->u2);
    fed_free(s->u3);
    s->u2 = s->u3 = NULL;
    if (s->masked) /* still its quantized input, unmasked */
        sodium_memzero(s->masked, s->words * sizeof *s->masked);
    fed_free(s->masked);
    s->masked = NULL;
    fed_crypto_guarded_free(s->reveal); /* the shares revealed: wiped */
    s->reveal = NULL;
    fed_crypto_guarded_free(s->sealk);
    s->sealk = NULL;
    s->out = s->req;
    s->stage = SC_NONE;
    s->trained = s->inbox = 0;
    s->n1 = s->k = s->t = 0;
    if (s->req)
        sodium_memzero(s->req, s->req_cap); /* an UNMASK request holds shares */
    s->req_len = 0;
}

void fedi_node_sa_client_free(fed_node *n, node_sa_client *s)
{
    if (!s)
        return;
    round_clear(n, s);
    fed_free(s->req);
    fed_crypto_keystream_wipe(&s->ks);
    fed_free(s);
}

int fedi_node_sa_client_active(const node_sa_client *s) { return s && s->stage != SC_NONE; }


void fedi_node_sa_client_abort(fed_node *n)
{
    round_clear(n, n->client_sa);
}

/* ---- requests ---- */

static fed_err req_room(node_sa_client *s, size_t len)
{
    if (len > s->req_cap) { /* no realloc: the old buffer is wiped, not left behind */
        uint8_t *p = fed_malloc(len);

        if (!p)
            return FED_ERR_NOMEM;
        if (s->req) {
            memcpy(p, s->req, s->req_len);
            sodium_memzero(s->req, s->req_cap);
            fed_free(s->req);
        }
        s->req = p;
        s->req_cap = len;
    }
    s->req_len = len;
    s->out = s->req;
    return FED_OK;
}

/* The header and typed block of a stage's request (type, count entries);
 * the retry timer armed for it. */
static fed_err stage_header(fed_node *n, uint8_t type, uint32_t count, fed_wire_hdr *h,
                            fed_wire_block *b)
{
    node_sa_client *s = n->client_sa;
    fed_err e = fedi_node_header(n, type, n->cfg.client.aggregator.key, s->round, s->ctx.epoch,
                                 FED_CODEC_NONE, h);

    if (e != FED_OK)
        return e;
    memset(b, 0, sizeof *b);
    b->sa_try = s->try_no;
    b->sa_count = count;
    fedi_node_arm_in(n, n->cfg.transfer.retry_ms, NODE_TIMER_RETRY); /* a failure stops the node */
    return FED_OK;
}

static fed_err send_req(fed_node *n)
{
    node_sa_client *s = n->client_sa;
    fed_wire_hdr h;
    fed_wire_block b;
    fed_err e = stage_header(n, s->req_type, s->req_count, &h, &b);

    if (e != FED_OK)
        return e;
    if (s->req_type != FED_WIRE_SA_MASKED)
        return fedi_node_emit(n, NULL, &h, &b, s->out, s->req_len);
    /* the masked input: a CHUNK stream when over a frame, as a DELTA; its
       answer comes as the reply to its last frame */
    b.seg_count = s->segs.seg_count;
    memcpy(b.seg_len, s->segs.seg_len, sizeof b.seg_len);
    memcpy(b.seg_rule, s->segs.seg_rule, sizeof b.seg_rule);
    stream_end(n, s);
    e = fedi_node_emit_vec(n, NULL, &h, &b, s->out, s->req_len);
    s->streamed = fedi_node_tx_active(n, n->cfg.client.aggregator.key);
    s->masked_out = e == FED_OK && !s->streamed;
    return e;
}

/* Asks again for the masked stage's answer once the whole input went out
 * (one frame, or every frame of its stream): an SA_MASKED with no entries,
 * which the aggregator holds as the request of (client, round, try, stage)
 * when it has the input, or answers FED_ERR_STREAM when it has not (the
 * client sends it again). The others may train for a while: a retry every
 * retry_ms costs a header, not the whole vector. */
static fed_err reask_masked(fed_node *n)
{
    fed_wire_hdr h;
    fed_wire_block b;
    fed_err e = stage_header(n, FED_WIRE_SA_MASKED, 0, &h, &b);

    return e != FED_OK ? e : fedi_node_emit(n, NULL, &h, &b, NULL, 0);
}

/* A retry of a streamed masked input: the frame in flight again (a few
 * times, then the stream afresh), or, once every frame is out, a re-ask. */
static fed_err retry_stream(fed_node *n)
{
    node_sa_client *s = n->client_sa;
    const uint8_t *agg = n->cfg.client.aggregator.key;

    fed_err e;

    if (fedi_node_tx_active(n, agg) && fedi_node_tx_sent_all(n, agg))
        return reask_masked(n);
    if (fedi_node_retry_take(n, NULL, &s->stuck, SC_STREAM_RESENDS) &&
        fedi_node_retry_frame(n, agg, n->cfg.transfer.retry_ms, &e))
        return e;
    return send_req(n);
}

/* An ACK while the masked input streams: the next frame once the last one
 * was taken; the stream again when the aggregator lacks it. *used: the ACK
 * was the stream's. */
static fed_err stream_ack(fed_node *n, const fed_wire_msg *m, int *used)
{
    node_sa_client *s = n->client_sa;
    int done = 1;
    fed_err e;

    *used = 0;
    if (s->stage != SC_MASKED || (!s->streamed && !s->masked_out))
        return FED_OK;
    if (m->block.status == FED_ERR_STREAM && !(m->block.ack_flags & FED_WIRE_ACK_NO_ROUND)) {
        /* its re-ask's answer: the input is not in */
        *used = 1;
        return send_req(n);
    }
    if (m->block.status != FED_OK || !s->streamed)
        return FED_OK;
    *used = 1;
    if ((e = fedi_node_tx_push(n, n->cfg.client.aggregator.key, &done)) != FED_OK)
        return e; /* the retry timer resends */
    if (!done) {
        s->stuck = 0;
        fedi_node_arm_in(n, n->cfg.transfer.retry_ms, NODE_TIMER_RETRY); /* a failure stops the node */
    }
    return FED_OK;
}

static fed_err start_stage(fed_node *n, int stage, uint8_t type, uint32_t count)
{
    node_sa_client *s = n->client_sa;

    s->stage = stage;
    s->req_type = type;
    s->req_count = count;
    s->resends = 0;
    return send_req(n);
}

fed_err fedi_node_sa_client_retry(fed_node *n, int *gave_up)
{
    node_sa_client *s = n->client_sa;

    *gave_up = 0;
    if (s->stage == SC_TRAINING) /* nothing out: the training job will go on */
        return FED_OK;
    if (!fedi_node_retry_take(n, NULL, &s->resends, s->max_resends)) {
        fed_log(FED_LOG_WARN, "client: secagg round %llu: no answer from the aggregator; the "
                "round is dropped", (unsigned long long)s->round);
        round_clear(n, s);
        *gave_up = 1;
        return FED_ERR_TIMEOUT;
    }
    if (s->stage == SC_MASKED && s->streamed)
        return retry_stream(n);
    if (s->stage == SC_MASKED && s->masked_out)
        return reask_masked(n);
    return send_req(n);
}

/* ---- stages ---- */

fed_err fedi_node_sa_client_begin(fed_node *n, const fed_wire_msg *model)
{
    node_sa_client *s = n->client_sa;
    const fed_wire_settings *st = &model->block.settings;
    fed_err e;

    round_clear(n, s);
    s->round = model->hdr.round;
    s->try_no = st->sa_try;
    memcpy(s->ctx.agg_pk, n->cfg.client.aggregator.key, 32);
    s->ctx.epoch = model->hdr.sender_epoch;
    s->ctx.round = s->round;
    s->ctx.try_no = s->try_no;
    s->q.clip_norm = st->sa_clip;
    s->q.range = st->sa_range;
    s->q.bits = st->sa_bits;
    s->stats_range = st->paths_on ? st->sa_stats_range : st->sa_range;
    s->max_weight = st->sa_max_weight;
    s->dropout = st->sa_dropout;
    s->pass_ints = st->stats_mode == FED_WIRE_STATS_PASS ? st->stats_cols * FED_COLSTATS_INTS : 0;
    s->max_resends = SC_MAX_RESENDS;
    if (n->cfg.transfer.retry_ms && st->deadline_ms / n->cfg.transfer.retry_ms < UINT32_MAX - SC_MAX_RESENDS)
        s->max_resends += (uint32_t)(st->deadline_ms / n->cfg.transfer.retry_ms);
    if ((e = fed_secagg_keys_new(n->cfg.arena, n->env.random, n->env.self, &s->keys)) != FED_OK ||
        (e = req_room(s, SA_KEYS_REQ_BYTES)) != FED_OK)
        goto fail;
    memcpy(s->req, fed_secagg_keys_mask_pk(s->keys), 32);
    memcpy(s->req + 32, fed_secagg_keys_enc_pk(s->keys), 32);
    if ((e = fedi_sa_keys_sign(n->cfg.arena, &s->ctx, s->req, s->req + 32, s->req + 64)) != FED_OK)
        goto fail;
    return start_stage(n, SC_KEYS, FED_WIRE_SA_KEYS, 1);
fail:
    fed_log(FED_LOG_ERROR, "client: secagg round %llu: no round keys: %s",
            (unsigned long long)s->round, fed_strerror(e));
    round_clear(n, s);
    return e;
}

/* The key list: every signature, its own entry, then the graph, its
 * shares split, sealed and sent. */
static fed_err on_key_list(fed_node *n, const fed_wire_msg *m)
{
    node_sa_client *s = n->client_sa;
    fed_crypto_arena *a = n->cfg.arena;
    fed_secagg_share *sh = NULL, *self_sh, *key_sh; /* (2k) guarded */
    uint32_t *xs = NULL;
    const uint32_t *nb;
    uint32_t count = m->block.sa_count, found = UINT32_MAX;
    double pf = 0;
    fed_err e;

    if (count > SA_MAX_CLIENTS)
        return FED_ERR_SA_KEYS;
    if (count < fed_node_sa_floor(&n->cfg)) {
        /* it does not trust the aggregator: with 2 in the sum, each could
           subtract its own delta from it */
        fed_log(FED_LOG_WARN, "client: secagg round %llu: the key list names %u clients, fewer "
                "than this client's floor of %u; refusing the round (it shares nothing)",
                (unsigned long long)s->round, count, fed_node_sa_floor(&n->cfg));
        return FED_ERR_SA_TOO_FEW;
    }
    if (!(s->list = fed_malloc((size_t)count * sizeof *s->list)))
        return FED_ERR_NOMEM;
    if ((e = fedi_sa_parse_key_list(m->vector, m->vector_len, count, s->list)) != FED_OK)
        return e;
    for (uint32_t i = 0; i < count; i++) {
        if (!fedi_sa_keys_verify(s->list[i].id, &s->ctx, s->list[i].mask_pk, s->list[i].enc_pk,
                                 s->list[i].sig))
            return FED_ERR_SA_KEYS; /* a key not signed for this round, try and aggregator */
        /* every identity a member this client knows: else the aggregator
           could invent neighbours and hold both kinds of a client's shares */
        if (n->cfg.allow && !fed_crypto_allow_find(n->cfg.allow, s->list[i].id) &&
            memcmp(s->list[i].id, n->key, 32) != 0) {
            fed_log(FED_LOG_WARN, "client: secagg round %llu: the key list names a client "
                    "outside this node's allow-list; refusing the round",
                    (unsigned long long)s->round);
            return FED_ERR_SA_KEYS;
        }
        if (!memcmp(s->list[i].id, n->key, 32))
            found = i;
    }
    if (found == UINT32_MAX ||
        sodium_memcmp(s->list[found].mask_pk, fed_secagg_keys_mask_pk(s->keys), 32) != 0 ||
        sodium_memcmp(s->list[found].enc_pk, fed_secagg_keys_enc_pk(s->keys), 32) != 0)
        return FED_ERR_SA_KEYS; /* its own keys are not what it sent */
    s->n1 = count;
    s->me = found;
    if ((e = fed_secagg_degree(count, s->dropout, &s->k, &s->t, &pf)) != FED_OK)
        return e;
    fed_secagg_graph_seed(m->vector, m->vector_len, s->seed);
    if ((e = fed_secagg_graph_new(s->seed, count, s->k, &s->g)) != FED_OK)
        return e;
    if (fed_crypto_slots_free(a) < FED_NODE_SECAGG_SLOTS(s->k) - 1) { /* its keys: taken */
        fed_log(FED_LOG_ERROR, "client: secagg round %llu needs %u arena slots for its "
                "neighbours' shares; %u free", (unsigned long long)s->round,
                FED_NODE_SECAGG_SLOTS(s->k) - 1, fed_crypto_slots_free(a));
        return FED_ERR_FULL;
    }
    nb = fed_secagg_graph_neighbours(s->g, s->me);
    if (!(s->rx = fed_calloc(s->k, sizeof *s->rx)) || !(xs = fed_malloc(s->k * sizeof *xs)) ||
        !(sh = fed_crypto_guarded_alloc(2 * (size_t)s->k, sizeof *sh)) ||
        !(s->sealk = fed_crypto_guarded_alloc(s->k, sizeof *s->sealk)) ||
        (e = req_room(s, (size_t)s->k * SA_SEALED_ENTRY_BYTES)) != FED_OK) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    self_sh = sh;
    key_sh = sh + s->k;
    for (uint32_t j = 0; j < s->k; j++)
        xs[j] = nb[j] + 1; /* the holder's index + 1 */
    if ((e = fed_secagg_shamir_split(fed_secagg_keys_self_seed(s->keys), s->t, s->k, xs,
                                     n->env.random, n->env.self, self_sh)) != FED_OK ||
        (e = fed_secagg_shamir_split(fed_secagg_keys_mask_sk(s->keys), s->t, s->k, xs,
                                     n->env.random, n->env.self, key_sh)) != FED_OK)
        goto out;
    for (uint32_t j = 0; j < s->k && e == FED_OK; j++) {
        fed_secagg_route r = {.sender = s->me, .recipient = nb[j], .x = xs[j]};
        uint8_t *p = s->req + (size_t)j * SA_SEALED_ENTRY_BYTES;

        fed_put_u32le(p, nb[j]);
        /* one X25519 a neighbour: the key opens its shares for this client too */
        if ((e = fed_secagg_box_key(s->keys, s->list[nb[j]].enc_pk, &s->ctx, s->sealk[j])) ==
            FED_OK)
            e = fed_secagg_box_seal_with(s->sealk[j], &s->ctx, &r, &self_sh[j], &key_sh[j],
                                         n->env.random, n->env.self, p + 4);
    }
    if (e != FED_OK)
        goto out;
    e = start_stage(n, SC_SHARES, FED_WIRE_SA_SHARES, s->k);
    fed_log(FED_LOG_INFO, "client: secagg round %llu: shares out to %u neighbours (k %u, t %u)",
            (unsigned long long)s->round, s->k, s->k, s->t);
out:
    fed_crypto_guarded_free(sh); /* wiped on every path */
    fed_free(xs);
    return e;
}

/* Position of list index j among its neighbours (k if none). */
static uint32_t nb_pos(const node_sa_client *s, uint32_t j)
{
    const uint32_t *nb = fed_secagg_graph_neighbours(s->g, s->me);

    for (uint32_t p = 0; p < s->k; p++)
        if (nb[p] == j)
            return p;
    return s->k;
}

static fed_err send_masked(fed_node *n);

/* Its inbox: U2, and from each neighbour in U2 its two shares. */
static fed_err on_inbox(fed_node *n, const fed_wire_msg *m)
{
    node_sa_client *s = n->client_sa;
    fed_crypto_arena *a = n->cfg.arena;
    sa_sealed_entry *en;
    const uint8_t *flags = NULL;
    uint32_t count = m->block.sa_count, got = 0, want = 0;
    fed_err e;

    if (count > s->k)
        return FED_ERR_SA_SHARES;
    if (!(en = fed_malloc(((size_t)count + 1) * sizeof *en)))
        return FED_ERR_NOMEM;
    if ((e = fedi_sa_parse_inbox(m->vector, m->vector_len, count, s->n1, &flags, en)) != FED_OK)
        goto out;
    if (!(s->u2 = fed_malloc(s->n1))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    memcpy(s->u2, flags, s->n1);
    if (!s->u2[s->me]) {
        e = FED_ERR_SA_DROPPED;
        goto out;
    }
    for (uint32_t i = 0; i < count && e == FED_OK; i++) {
        uint32_t p = nb_pos(s, en[i].index);
        fed_secagg_route r = {.sender = en[i].index, .recipient = s->me, .x = s->me + 1};
        fed_secagg_share *sh;

        if (p == s->k || !s->u2[en[i].index] || s->rx[p]) {
            e = FED_ERR_SA_SHARES; /* not a neighbour, not in U2, twice */
            break;
        }
        if ((e = fed_crypto_slot_take(a, &s->rx[p])) != FED_OK)
            break;
        sh = (fed_secagg_share *)(void *)fed_crypto_slot_mem(s->rx[p]);
        e = fed_secagg_box_open_with(s->sealk[p], &s->ctx, &r, en[i].sealed, FED_SECAGG_BOX_BYTES,
                                     &sh[0], &sh[1]);
        if (e != FED_OK)
            e = FED_ERR_SA_SHARES;
        got++;
    }
    for (uint32_t p = 0; p < s->k; p++)
        want += s->u2[fed_secagg_graph_neighbours(s->g, s->me)[p]];
    if (e == FED_OK && got != want)
        e = FED_ERR_SA_SHARES; /* a neighbour in U2 whose shares were kept from it */
    if (e != FED_OK)
        goto out;
    /* the sealing keys are done with: their mapping goes now, not at the
       round's end (a simulator runs thousands of clients in one process) */
    fed_crypto_guarded_free(s->sealk);
    s->sealk = NULL;
    s->inbox = 1;
    if (s->trained)
        e = send_masked(n);
    else
        s->stage = SC_TRAINING;
out:
    fed_free(en);
    return e;
}

/* The masked input out (the inbox and the training are both in). */
static fed_err send_masked(fed_node *n)
{
    node_sa_client *s = n->client_sa;
    uint8_t (*pk)[FED_SECAGG_KEY_BYTES] = NULL;
    const uint32_t *nb = fed_secagg_graph_neighbours(s->g, s->me);
    size_t kk = 0;
    fed_err e;

    if (!(pk = fed_malloc(((size_t)s->k + 1) * sizeof *pk)))
        return FED_ERR_NOMEM;
    for (uint32_t p = 0; p < s->k; p++)
        if (s->u2[nb[p]])
            memcpy(pk[kk++], s->list[nb[p]].mask_pk, 32);
    e = fed_secagg_mask_input(n->cfg.arena, s->keys, &s->ctx, (const uint8_t(*)[32])pk, kk,
                              s->masked, s->words);
    fed_free(pk);
    s->masked_round = s->round; /* from here on it takes no later try of the round */
    if (e != FED_OK || (e = req_room(s, s->words * 4)) != FED_OK)
        return e;
    for (size_t w = 0; w < s->words; w++)
        fed_put_u32le(s->req + 4 * w, s->masked[w]);
    fed_free(s->masked);
    s->masked = NULL;
    return start_stage(n, SC_MASKED, FED_WIRE_SA_MASKED, (uint32_t)s->words);
}

fed_err fedi_node_sa_client_trained(fed_node *n, const float *delta, const fed_node_layout *l,
                                    uint64_t samples, const int64_t *extra, uint32_t nextra)
{
    node_sa_client *s = n->client_sa;
    double w = (double)samples < s->max_weight ? (double)samples : s->max_weight;
    double f = w / s->max_weight, r = s->q.range;
    size_t nints = s->pass_ints ? s->pass_ints : (size_t)n->cfg.secagg.ints + nextra;
    agg_segment dsegs[AGG_SEGMENTS_MAX]; /* the delta's: trained, statistics (a pass: none) */
    size_t nd = s->pass_ints ? 0 : fed_node_layout_segments(l, r, s->stats_range, dsegs);
    size_t nparams = fedi_agg_seg_len(dsegs, nd), off = 0;
    agg_segment segs[AGG_SEGMENTS_MAX];
    size_t nseg = fedi_agg_seg_secure(dsegs, nd, r, nints, segs);
    float *x = NULL;
    int64_t *ix = NULL;
    fed_rng rng;
    uint64_t seed;
    fed_err e;

    if (s->stage == SC_NONE)
        return FED_ERR_SA_FAILED; /* the round was dropped meanwhile */
    if (s->pass_ints && (!fedi_node_client_stats(n) ||
                         (size_t)n->cfg.data.stats_cols * FED_COLSTATS_INTS != s->pass_ints))
        return FED_ERR_STATS; /* the client declines such a pass before it trains */
    if ((n->cfg.secagg.ints && !s->pass_ints && !n->cfg.secagg.ints_fn) || (nextra && !extra))
        return FED_ERR_INVAL;
    s->words = fedi_agg_seg_words(segs, nseg, s->q.bits);
    if (s->pass_ints)
        s->segs.seg_count = 0;
    else
        fed_node_layout_put(l, 1, &s->segs);
    if (!(x = fed_malloc((nparams + 1) * sizeof *x)) ||
        (nints && !(ix = fed_calloc(nints, sizeof *ix))) ||
        !(s->masked = fed_malloc(s->words * sizeof *s->masked))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    if (s->pass_ints) /* the statistics pass: its columns' integers */
        memcpy(ix, fedi_node_client_stats(n), nints * sizeof *ix);
    else if (n->cfg.secagg.ints &&
             (e = n->cfg.secagg.ints_fn(n->cfg.secagg.ints_ctx, s->round, ix,
                                        n->cfg.secagg.ints)) != FED_OK)
        goto out;
    if (!s->pass_ints && nextra) /* a site evaluation's statistics after them */
        memcpy(ix + n->cfg.secagg.ints, extra, nextra * sizeof *ix);
    /* the L2 clip the aggregator's strategy names (clip:NORM+), over the
       trained floats only, then each value into its segment's range, then
       weighted: each value in [-range, range]; the weight, 2 r w / W - r,
       one more coordinate */
    double l2 = fed_secagg_clip_scale(&s->q, delta, nd ? dsegs[0].len : 0);

    for (size_t g = 0; g < nd; g++) {
        double rg = dsegs[g].range, scale = g == 0 ? l2 : 1.0;

        for (size_t i = off; i < off + dsegs[g].len; i++) {
            double v = scale * delta[i];

            v = v > rg ? rg : v < -rg ? -rg : v;
            /* a SAMPLES segment is weighted, a MEAN one counts once */
            x[i] = (float)(dsegs[g].rule == AGG_WEIGHT_SAMPLES ? v * f : v);
        }
        off += dsegs[g].len;
    }
    x[nparams] = (float)(2 * r * f - r);
    fed_crypto_keystream_random(&s->ks, &seed, sizeof seed);
    fed_rng_seed(&rng, seed);
    /* clipped above (the weight word is no delta): each segment at its
       range, the integers as limbs */
    e = fedi_agg_seg_quantize(segs, nseg, s->q.bits, x, ix, &rng, s->masked);
    sodium_memzero(&seed, sizeof seed); /* the rounding's draws */
    sodium_memzero(&rng, sizeof rng);
out:
    if (x)
        sodium_memzero(x, (nparams + 1) * sizeof *x);
    if (ix)
        sodium_memzero(ix, nints * sizeof *ix);
    fed_free(x);
    fed_free(ix);
    if (e != FED_OK) {
        if (s->masked)
            sodium_memzero(s->masked, s->words * sizeof *s->masked);
        fed_free(s->masked);
        s->masked = NULL;
        return e;
    }
    s->trained = 1;
    return s->inbox ? send_masked(n) : FED_OK;
}

/* The survivors: refuse when named dropped or the graph is split; else
 * sign them. */
static fed_err on_survivors(fed_node *n, const fed_wire_msg *m)
{
    node_sa_client *s = n->client_sa;
    int connected = 0;
    uint8_t sig[64];
    fed_err e;

    if (m->block.sa_count != s->n1 ||
        fedi_sa_parse_flags(m->vector, m->vector_len, s->n1, FED_ERR_SA_MASKED) != FED_OK)
        return FED_ERR_SA_MASKED;
    if (!(s->u3 = fed_malloc(s->n1)))
        return FED_ERR_NOMEM;
    memcpy(s->u3, m->vector, s->n1);
    for (uint32_t i = 0; i < s->n1; i++)
        if (s->u3[i] && !s->u2[i])
            return FED_ERR_SA_MASKED; /* a survivor that never shared */
    if (!s->u3[s->me]) {
        fed_log(FED_LOG_WARN, "client: secagg round %llu: the aggregator names this client "
                "dropped; refusing to reveal anything", (unsigned long long)s->round);
        return FED_ERR_SA_DROPPED;
    }
    {
        uint32_t n3 = 0;

        for (uint32_t i = 0; i < s->n1; i++)
            n3 += s->u3[i] != 0;
        if (n3 < fed_node_sa_floor(&n->cfg)) {
            fed_log(FED_LOG_WARN, "client: secagg round %llu: %u survivors, fewer than this "
                    "client's floor of %u; refusing to reveal anything",
                    (unsigned long long)s->round, n3, fed_node_sa_floor(&n->cfg));
            return FED_ERR_SA_TOO_FEW;
        }
    }
    if ((e = fed_secagg_graph_survivors_connected(s->g, s->u3, &connected)) != FED_OK)
        return e;
    if (!connected) {
        fed_log(FED_LOG_WARN, "client: secagg round %llu: the survivors' graph is split; "
                "refusing to reveal anything", (unsigned long long)s->round);
        return FED_ERR_SA_DROPPED;
    }
    if ((e = fedi_sa_survivors_sign(n->cfg.arena, &s->ctx, s->seed, s->u3, s->n1, sig)) != FED_OK ||
        (e = req_room(s, 64)) != FED_OK)
        return e;
    memcpy(s->req, sig, 64);
    return start_stage(n, SC_CONSIST, FED_WIRE_SA_CONSIST, 1);
}

int fedi_node_sa_client_took_part(const node_sa_client *s, uint64_t round)
{
    return s && round && s->masked_round == round;
}

/* The consistency check: at least t neighbours signed the same survivor
 * list; then one share per neighbour in U2, of the kind its fate says. */
static fed_err on_signatures(fed_node *n, const fed_wire_msg *m)
{
    node_sa_client *s = n->client_sa;
    uint32_t count = m->block.sa_count, good = 0, out = 0;
    uint32_t *idx = NULL;
    const uint8_t **sig = NULL;
    const uint32_t *nb;
    fed_err e;

    if (count > s->n1) /* checked before the count sizes anything */
        return FED_ERR_SA_CONSIST;
    idx = fed_malloc(((size_t)count + 1) * sizeof *idx);
    sig = fed_malloc(((size_t)count + 1) * sizeof *sig);
    if (!idx || !sig) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    if ((e = fedi_sa_parse_sigs(m->vector, m->vector_len, count, s->n1, idx, sig)) != FED_OK)
        goto out;
    for (uint32_t i = 0; i < count; i++)
        if (nb_pos(s, idx[i]) < s->k && s->u3[idx[i]] &&
            fedi_sa_survivors_verify(s->list[idx[i]].id, &s->ctx, s->seed, s->u3, s->n1, sig[i]))
            good++;
    if (good < s->t) {
        fed_log(FED_LOG_WARN, "client: secagg round %llu: %u of its neighbours signed the "
                "survivor list it saw, fewer than t = %u; refusing to reveal anything",
                (unsigned long long)s->round, good, s->t);
        e = FED_ERR_SA_CONSIST;
        goto out;
    }
    fed_crypto_guarded_free(s->reveal);
    if (!(s->reveal = fed_crypto_guarded_alloc((size_t)s->k, SA_UNMASK_ENTRY_BYTES))) {
        e = FED_ERR_NOMEM;
        goto out;
    }
    nb = fed_secagg_graph_neighbours(s->g, s->me);
    for (uint32_t p = 0; p < s->k; p++) {
        const fed_secagg_share *sh;
        sa_unmask_entry en;

        if (!s->u2[nb[p]] || !s->rx[p])
            continue;
        sh = (const fed_secagg_share *)(const void *)fed_crypto_slot_mem(s->rx[p]);
        en.owner = nb[p];
        en.kind = s->u3[nb[p]] ? SA_KIND_SELF : SA_KIND_KEY; /* never both */
        en.share = sh[s->u3[nb[p]] ? 0 : 1];
        fedi_sa_put_unmask_entry(s->reveal + (size_t)out * SA_UNMASK_ENTRY_BYTES, &en);
        fed_secagg_share_wipe(&en.share, 1);
        out++;
    }
    s->out = s->reveal;
    s->req_len = (size_t)out * SA_UNMASK_ENTRY_BYTES;
    e = start_stage(n, SC_UNMASK, FED_WIRE_SA_UNMASK, out);
out:
    fed_free(idx);
    fed_free(sig);
    return e;
}

fed_err fedi_node_sa_client_on_reply(fed_node *n, node_open *op, int *done)
{
    node_sa_client *s = n->client_sa;
    const fed_wire_msg *m = &op->msg;
    fed_err e;

    *done = 0;
    if (m->hdr.round != s->round || s->stage == SC_NONE || s->stage == SC_TRAINING)
        return FED_OK; /* an answer to a request given up on */
    if (m->hdr.type == FED_WIRE_ACK) {
        int used = 0;

        if ((e = stream_ack(n, m, &used)) != FED_OK || used)
            return e;
        if (m->block.status != FED_OK) {
            fed_log(FED_LOG_WARN, "client: secagg round %llu try %u ended by the aggregator: %s",
                    (unsigned long long)s->round, s->try_no, fed_strerror((int)m->block.status));
            round_clear(n, s);
            *done = 1;
            return FED_OK;
        }
        if (s->stage != SC_UNMASK)
            return FED_OK;
        fed_log(FED_LOG_INFO, "client: secagg round %llu: shares revealed",
                (unsigned long long)s->round);
        round_clear(n, s);
        *done = 1;
        return FED_OK;
    }
    if (m->hdr.type != s->req_type || m->block.sa_try != s->try_no)
        return FED_OK; /* an answer to an earlier stage or try, resent */
    switch (s->stage) {
    case SC_KEYS: e = on_key_list(n, m); break;
    case SC_SHARES: e = on_inbox(n, m); break;
    case SC_MASKED:
        stream_end(n, s); /* its answer came: every frame was taken */
        e = on_survivors(n, m);
        break;
    case SC_CONSIST: e = on_signatures(n, m); break;
    default: return FED_OK;
    }
    if (e != FED_OK) {
        if (e != FED_ERR_SA_DROPPED && e != FED_ERR_SA_TOO_FEW && e != FED_ERR_NOMEM)
            fed_wire_note_reject(n->wire, &m->hdr, e);
        fed_log(FED_LOG_WARN, "client: secagg round %llu: %s answer refused: %s; the round is "
                "dropped", (unsigned long long)s->round, fed_wire_type_name(m->hdr.type),
                fed_strerror(e));
        round_clear(n, s);
        *done = 1;
    }
    return e;
}
