/* bench_daemon.c - one aggregator-mode round's work outside training, for 10
 * clients x 1,000,000 parameters, each part timed as the daemon does it with
 * the library's own calls (codec, wire seal/open, NNG transport on 127.0.0.1,
 * fedavg, the round's store transaction), next to the memory-bandwidth bound
 * of reading its bytes once at a read rate measured in this run; then the 10
 * deltas opened on one thread vs two of the pool. Prints; asserts nothing. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "core/pool.h"
#include "core/rng.h"
#include "crypto/allow.h"
#include "crypto/arena.h"
#include "crypto/envelope.h"
#include "gossip/transport.h"
#include "gossip/wire.h"
#include "model/backend.h"
#include "model/codec.h"
#include "model/merge.h"
#include "node/ckpt_model.h"
#include "node/node_impl.h"
#include "storage/store.h"

#define NCLI 10
#define NPARAMS ((size_t)1000000)
#define VEC_BYTES (NPARAMS * sizeof(float))
#define ROUNDS 7      /* timed rounds (after one warm-up round) */
#define OPEN_REPS 7   /* repetitions of the 1- vs 2-thread open */
#define READ_BYTES ((size_t)256 << 20) /* far over the L3 */
#define WAIT_MS 10000 /* bound on waiting for frames on loopback */
#define SPEC "bench:1000000" /* the MODEL's spec field (printable; not parsed here) */

/* The parts of a round, in the order a round runs them. */
enum {
    P_ENC_G, P_SEAL_M, P_NET_M, P_COPY_M, P_OPEN_M, P_DEC_M,
    P_ENC_D, P_SEAL_D, P_NET_D, P_COPY_D, P_OPEN_D, P_DEC_D, P_MERGE, P_STORE, NPARTS
};

typedef struct part_info {
    const char *name;
    const char *where;
    int count;       /* vectors it handles per round */
    double read_mb;  /* MB it must read at least once (vectors x 4 MB) */
} part_info;

static const part_info parts[NPARTS] = {
    [P_ENC_G] = {"MODEL encode f32", "aggregator", 1, 4.0},
    [P_SEAL_M] = {"MODEL seal (build)", "aggregator", NCLI, 40.0},
    [P_NET_M] = {"MODEL send+recv NNG", "loopback", NCLI, 40.0},
    [P_COPY_M] = {"MODEL copy frame", "clients", NCLI, 40.0},
    [P_OPEN_M] = {"MODEL open+verify", "clients", NCLI, 40.0},
    [P_DEC_M] = {"MODEL decode f32", "clients", NCLI, 40.0},
    [P_ENC_D] = {"DELTA encode f32", "clients", NCLI, 40.0},
    [P_SEAL_D] = {"DELTA seal (build)", "clients", NCLI, 40.0},
    [P_NET_D] = {"DELTA send+recv NNG", "loopback", NCLI, 40.0},
    [P_COPY_D] = {"DELTA copy frame", "aggregator", NCLI, 40.0},
    [P_OPEN_D] = {"DELTA open+verify", "aggregator", NCLI, 40.0},
    [P_DEC_D] = {"DELTA decode f32", "aggregator", NCLI, 40.0},
    [P_MERGE] = {"merge fedavg x10", "aggregator", NCLI, 40.0},
    [P_STORE] = {"store round+ckpt", "aggregator", 1, 4.0},
};

typedef struct party {
    fed_crypto_arena *arena;
    fed_wire *wire;
    uint64_t seq; /* next sequence number to the other side */
} party;

/* A received frame on its way through the node's open path. */
typedef struct rx_frame {
    fed_gossip_tx_event ev; /* the NNG message, until copied */
    uint8_t *frame;         /* the node's copy (fed_node_on_frame), opened in place */
    size_t len;
    fed_wire_ticket tk;
    fed_wire_msg msg;
    float *vec;             /* (NPARAMS) decoded, as open_job allocates it */
    fed_err result;
} rx_frame;

typedef struct bench {
    fed_rng rng;
    fed_crypto_allow *allow;
    party agg, cli[NCLI];
    fed_backend *be;
    fed_pool *pool; /* one worker: with the calling thread, two threads */
    fed_gossip_tx *srv, *dial;
    fed_gossip_tx_req *held[NCLI];
    fed_merge *merge;
    fed_merge_input in[NCLI];
    fed_merge_result res[NCLI];
    fed_store *store;
    char dir[512], db[600];
    uint64_t round;
    float *global;        /* (NPARAMS) the aggregator's model */
    float *delta[NCLI];   /* (NPARAMS) each client's trained - global */
    uint8_t *enc_g;       /* the encoded global */
    size_t enc_g_cap, enc_g_len;
    uint8_t *enc[NCLI];   /* each client's encoded delta */
    size_t enc_cap[NCLI], enc_len[NCLI];
    uint8_t *tx[NCLI];    /* sealed frames, one per client */
    size_t tx_cap, tx_len[NCLI];
    rx_frame rx[NCLI];
    uint8_t *warm[NCLI];  /* buffers already touched, for the copy without page faults */
    double t[NPARTS][ROUNDS];
    double t_warm[ROUNDS]; /* the DELTA frames copied into warm[] */
} bench;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* Median of n (sorts t); the smallest into *best. */
static double median_of(double *t, int n, double *best)
{
    qsort(t, (size_t)n, sizeof t[0], cmp_double);
    *best = t[0];
    return n & 1 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Bytes/s of reading a buffer far larger than the caches once, one thread,
 * through a 16 KiB piece that stays in L1 (as bench_merge does); best of 5. */
static double read_rate(unsigned char *buf, unsigned char *piece, size_t piece_len)
{
    double best = 1e30;

    for (size_t i = 0; i < READ_BYTES; i += 4096)
        buf[i] = (unsigned char)i;
    for (int r = 0; r < 5; r++) {
        double t0 = now_s(), t;

        for (size_t i = 0; i < READ_BYTES; i += piece_len)
            memcpy(piece, buf + i, piece_len);
        t = now_s() - t0;
        best = t < best ? t : best;
        buf[r] ^= piece[r]; /* keep the copies live */
    }
    return (double)READ_BYTES / best;
}

/* STREAM triad a = b + s c over the same buffer cut in three (float), best
 * of 5, bytes counted as STREAM does (3 arrays, no write-allocate). */
static double triad_rate(unsigned char *buf)
{
    size_t n = READ_BYTES / 3 / sizeof(float);
    float *a = (float *)buf, *b = a + n, *c = b + n;
    double best = 1e30;

    for (size_t i = 0; i < n; i++) {
        b[i] = (float)(i & 1023);
        c[i] = 1.0f;
    }
    for (int r = 0; r < 5; r++) {
        double t0 = now_s(), t;

        for (size_t i = 0; i < n; i++)
            a[i] = b[i] + 3.0f * c[i];
        t = now_s() - t0;
        best = t < best ? t : best;
        b[r] = a[r + 1];
    }
    return 3.0 * (double)n * sizeof(float) / best;
}

/* ---- setup ---- */

static fed_err party_open(bench *B, party *p, const char *name, uint64_t epoch)
{
    fed_wire_cfg wc;
    fed_err e;

    if ((e = fed_crypto_arena_new(NULL, &p->arena)) != FED_OK ||
        (e = fed_crypto_arena_generate(p->arena, fed_rng_random, &B->rng)) != FED_OK ||
        (e = fed_crypto_allow_add(B->allow, name, fed_crypto_arena_pubkey(p->arena))) != FED_OK)
        return e;
    fed_wire_cfg_default(&wc); /* 16 MiB frames, as the daemon's */
    if ((e = fed_wire_new(&wc, p->arena, B->allow, &p->wire)) != FED_OK)
        return e;
    fed_wire_set_epoch(p->wire, epoch);
    p->seq = 1;
    return FED_OK;
}

static void party_close(party *p)
{
    fed_wire_free(p->wire);
    fed_crypto_arena_free(p->arena);
}

static fed_err open_transports(bench *B)
{
    fed_gossip_tx_cfg c;
    uint16_t port = 0;
    char url[64];
    fed_err e;

    fed_gossip_tx_cfg_default(&c);
    c.listen_url = "tcp://127.0.0.1:0";
    c.recv_contexts = 2 * NCLI;
    if ((e = fed_gossip_tx_open(&c, &B->srv)) != FED_OK ||
        (e = fed_gossip_tx_bound_port(B->srv, &port)) != FED_OK)
        return e;
    snprintf(url, sizeof url, "tcp://127.0.0.1:%u", (unsigned)port);
    fed_gossip_tx_cfg_default(&c);
    if ((e = fed_gossip_tx_open(&c, &B->dial)) != FED_OK)
        return e;
    return fed_gossip_tx_add_peer(B->dial, fed_crypto_arena_pubkey(B->agg.arena), url);
}

static fed_err setup(bench *B)
{
    const char *base = getenv("FEDNODE_BENCH_DIR");
    fed_merge_config mc = fed_merge_config_default();
    fed_err e;

    fed_rng_seed(&B->rng, 7);
    if ((e = fed_crypto_allow_new(&B->allow)) != FED_OK ||
        (e = party_open(B, &B->agg, "aggregator", 1000)) != FED_OK)
        return e;
    for (int i = 0; i < NCLI; i++) {
        char name[16];

        snprintf(name, sizeof name, "client%d", i);
        if ((e = party_open(B, &B->cli[i], name, 2000 + (uint64_t)i)) != FED_OK)
            return e;
    }
    if ((e = fed_backend_cpu_new(1, &B->be)) != FED_OK || (e = fed_pool_new(1, &B->pool)) != FED_OK ||
        (e = open_transports(B)) != FED_OK)
        return e;
    if ((e = fed_merge_new("fedavg", NPARAMS, &mc, B->be, &B->merge)) != FED_OK)
        return e;
    snprintf(B->dir, sizeof B->dir, "%s/fed_bench_daemon_XXXXXX", base ? base : "/tmp");
    if (!mkdtemp(B->dir))
        return FED_ERR_IO;
    snprintf(B->db, sizeof B->db, "%s/agg.db", B->dir);
    if ((e = fed_store_open(B->db, NULL, &B->store)) != FED_OK) /* the daemon's options */
        return e;
    B->tx_cap = fed_wire_frame_bytes(FED_WIRE_BLOCK_MAX + FED_CODEC_HEADER_BYTES + VEC_BYTES);
    if (!(B->global = fed_alloc_aligned(VEC_BYTES)))
        return FED_ERR_NOMEM;
    for (size_t j = 0; j < NPARAMS; j++)
        B->global[j] = 0.05f * (2.0f * fed_rng_uniform_f(&B->rng) - 1.0f);
    for (int i = 0; i < NCLI; i++) {
        if (!(B->delta[i] = fed_alloc_aligned(VEC_BYTES)) || !(B->tx[i] = fed_malloc(B->tx_cap)) ||
            !(B->warm[i] = fed_malloc(B->tx_cap)))
            return FED_ERR_NOMEM;
        memset(B->warm[i], 0, B->tx_cap);
        for (size_t j = 0; j < NPARAMS; j++)
            B->delta[i][j] = 0.001f * (2.0f * fed_rng_uniform_f(&B->rng) - 1.0f);
        memset(B->tx[i], 0, B->tx_cap);
    }
    return FED_OK;
}

static void rx_clear(rx_frame *r)
{
    fed_free(r->frame);
    fed_free(r->vec);
    r->frame = NULL;
    r->vec = NULL;
}

static void teardown(bench *B)
{
    for (int i = 0; i < NCLI; i++) {
        rx_clear(&B->rx[i]);
        fed_free(B->delta[i]);
        fed_free(B->enc[i]);
        fed_free(B->tx[i]);
        fed_free(B->warm[i]);
        party_close(&B->cli[i]);
    }
    fed_free(B->enc_g);
    fed_free(B->global);
    fed_gossip_tx_close(B->dial);
    fed_gossip_tx_close(B->srv);
    fed_merge_free(B->merge);
    fed_store_close(B->store);
    if (B->db[0]) {
        char p[640];

        remove(B->db);
        snprintf(p, sizeof p, "%s-wal", B->db);
        remove(p);
        snprintf(p, sizeof p, "%s-shm", B->db);
        remove(p);
        rmdir(B->dir);
    }
    fed_pool_free(B->pool);
    fed_backend_free(B->be);
    party_close(&B->agg);
    fed_crypto_allow_free(B->allow);
}

/* ---- the transport ---- */

/* The next event of tx, waiting at most WAIT_MS (FED_ERR_TIMEOUT). */
static fed_err next_event(fed_gossip_tx *tx, fed_gossip_tx_event *ev)
{
    double end = now_s() + WAIT_MS / 1000.0;

    for (;;) {
        struct pollfd pf = {.fd = fed_gossip_tx_wake_fd(tx), .events = POLLIN};
        fed_err e = fed_gossip_tx_next(tx, ev);
        double left;

        if (e != FED_GOSSIP_TX_EMPTY)
            return e;
        if ((left = end - now_s()) <= 0)
            return FED_ERR_TIMEOUT;
        if (poll(&pf, 1, (int)(left * 1000) + 1) < 0 && errno != EINTR)
            return FED_ERR_IO;
    }
}

/* n events of kind into rx[0..n) (frames kept until copied). */
static fed_err collect(fed_gossip_tx *tx, fed_gossip_tx_kind kind, rx_frame *rx, int n)
{
    for (int i = 0; i < n; i++) {
        fed_err e = next_event(tx, &rx[i].ev);

        if (e != FED_OK)
            return e;
        if (rx[i].ev.kind != kind) {
            fed_gossip_tx_event_done(tx, &rx[i].ev);
            return FED_ERR_IO;
        }
    }
    return FED_OK;
}

/* ---- the parts ---- */

static void header(fed_wire_hdr *h, uint8_t type, party *from, party *to, uint64_t round)
{
    memset(h, 0, sizeof *h);
    h->type = type;
    memcpy(h->recipient, fed_crypto_arena_pubkey(to->arena), 32);
    h->sender_epoch = fed_wire_epoch(from->wire);
    h->recipient_epoch = fed_wire_epoch(to->wire);
    h->seq = from->seq++;
    h->round = round;
    h->codec = FED_CODEC_F32;
}

/* As aggregator.c's settings_of_round. */
static void model_block(fed_wire_block *b)
{
    memset(b, 0, sizeof *b);
    snprintf(b->settings.spec, sizeof b->settings.spec, "%s", SPEC);
    b->settings.local_epochs = 1;
    b->settings.batch = 64;
    b->settings.codec = FED_CODEC_F32;
    b->settings.lr = 0.05f;
    b->settings.deadline_ms = 60000;
}

/* fed_node_on_frame's copy of a received frame (it outlives the event)
 * into a fresh fed_malloc, timed into *secs; with warm, first the same
 * copies into buffers already touched, timed into *warm. */
static fed_err copy_frames(bench *B, fed_gossip_tx *tx, double *secs, double *warm)
{
    fed_err e = FED_OK;
    double t0;

    if (warm) {
        t0 = now_s();
        for (int i = 0; i < NCLI; i++)
            memcpy(B->warm[i], B->rx[i].ev.frame, B->rx[i].ev.len);
        *warm = now_s() - t0;
    }
    t0 = now_s();
    for (int i = 0; i < NCLI && e == FED_OK; i++) {
        rx_frame *r = &B->rx[i];

        if (!(r->frame = fed_malloc(r->ev.len))) {
            e = FED_ERR_NOMEM;
            break;
        }
        memcpy(r->frame, r->ev.frame, r->ev.len);
        r->len = r->ev.len;
    }
    *secs = now_s() - t0;
    for (int i = 0; i < NCLI; i++)
        fed_gossip_tx_event_done(tx, &B->rx[i].ev);
    return e;
}

/* The expensive part of an open (node.c's open_job): AEAD, signature,
 * typed block; decode_one then decodes the vector into a fresh buffer. */
static void open_one(rx_frame *r, const party *to)
{
    r->result = fed_wire_open_ticket(to->wire, &r->tk, r->frame, r->len, &r->msg);
}

static void decode_one(rx_frame *r)
{
    if (r->result != FED_OK)
        return;
    if (!(r->vec = fed_malloc(VEC_BYTES))) {
        r->result = FED_ERR_NOMEM;
        return;
    }
    r->result = fed_codec_decode(r->msg.vector, r->msg.vector_len, FED_CODEC_F32, r->vec, NPARAMS);
}

/* precheck + open + finish of the frames in rx, each by its recipient. */
static fed_err open_frames(bench *B, int to_agg)
{
    for (int i = 0; i < NCLI; i++) {
        rx_frame *r = &B->rx[i];
        party *to = to_agg ? &B->agg : &B->cli[i];
        fed_err e = fed_wire_precheck(to->wire, r->frame, r->len, &r->tk);

        if (e != FED_OK)
            return e;
        open_one(r, to);
        if ((e = fed_wire_finish(to->wire, &r->tk, r->result, &r->msg)) != FED_OK)
            return e;
    }
    return FED_OK;
}

static fed_err decode_frames(bench *B)
{
    for (int i = 0; i < NCLI; i++) {
        decode_one(&B->rx[i]);
        if (B->rx[i].result != FED_OK)
            return B->rx[i].result;
    }
    return FED_OK;
}

/* aggregator.c's commit_round: contributions, counters, the checkpoint
 * (parameters to LE, their model hash, the sections), the round row, commit. */
static fed_err store_round(bench *B)
{
    const fed_wire_counters *wc = fed_wire_get_counters(B->agg.wire);
    size_t nc = fed_wire_counter_count();
    fed_store_counter c[64];
    uint8_t st[FED_NODE_STATE_BYTES];
    fed_model_shape shape = {.c = 1, .h = 28, .w = 28, .classes = 10};
    fed_node_model_sec ms;
    uint8_t *params = fed_malloc(VEC_BYTES);
    fed_store_round row;
    uint8_t hash[32];
    fed_err e;

    if (!params)
        return FED_ERR_NOMEM;
    if ((e = fed_store_begin(B->store)) != FED_OK)
        goto out;
    for (int i = 0; i < NCLI; i++) {
        fed_store_contrib ct;

        memset(&ct, 0, sizeof ct);
        ct.round = B->round;
        memcpy(ct.peer_key, B->rx[i].msg.hdr.sender, 32);
        memcpy(ct.digest, B->rx[i].msg.digest, sizeof ct.digest);
        memcpy(ct.signature, B->rx[i].msg.sig, sizeof ct.signature);
        ct.header = B->rx[i].frame; /* the frame's header bytes */
        ct.header_len = FED_WIRE_HEADER_BYTES;
        ct.accepted = 1;
        if ((e = fed_store_put_contribution(B->store, &ct)) != FED_OK)
            goto out;
    }
    nc = nc > 64 ? 64 : nc;
    for (size_t i = 0; i < nc; i++) {
        snprintf(c[i].name, sizeof c[i].name, "wire.%s", fed_wire_counter_name(i));
        c[i].value = fed_wire_counter_value(wc, i);
    }
    if ((e = fed_store_put_counters(B->store, c, nc)) != FED_OK)
        goto out;
    fed_put_f32le_n(params, B->global, NPARAMS);
    fedi_node_state_encode(st, FED_NODE_AGGREGATOR, B->round);
    fed_crypto_model_hash(params, VEC_BYTES, hash);
    fed_node_model_sec_encode(&ms, SPEC, shape, params, NPARAMS);
    {
        fed_store_section sec[4] = {
            ms.s[0], ms.s[1], ms.s[2],
            {FED_NODE_SEC_STATE, st, sizeof st},
        };
        if ((e = fed_store_checkpoint_write(B->store, B->round, sec, 4, NULL)) != FED_OK)
            goto out;
    }
    memset(&row, 0, sizeof row);
    row.round = B->round;
    row.loss = row.accuracy = 0.5;
    row.samples = 60000;
    row.peers = NCLI;
    snprintf(row.strategy, sizeof row.strategy, "fedavg");
    memcpy(row.model_hash, hash, 32);
    if ((e = fed_store_put_round(B->store, &row)) != FED_OK)
        goto out;
    e = fed_store_commit(B->store);
out:
    if (e != FED_OK)
        fed_store_rollback(B->store);
    fed_free(params);
    return e;
}

/* One round; its part times into B->t[.][slot] (slot < 0: a warm-up). */
static fed_err one_round(bench *B, int slot)
{
    fed_codec f32 = {.id = FED_CODEC_F32};
    double tm[NPARTS], t0, t_warm = 0;
    uint8_t small[FED_WIRE_SEAL_OVERHEAD + 16];
    fed_wire_block b;
    fed_err e;

    B->round++;
    memset(small, 0, sizeof small);
    /* clients ask (NEXT): the aggregator holds the requests (untimed); each
     * carries its client's index (requests may arrive in any order) */
    for (int i = 0; i < NCLI; i++) {
        small[0] = (uint8_t)i;
        if ((e = fed_gossip_tx_send(B->dial, fed_crypto_arena_pubkey(B->agg.arena), small,
                                    sizeof small, (uint64_t)i)) != FED_OK)
            return e;
    }
    if ((e = collect(B->srv, FED_GOSSIP_TX_REQUEST, B->rx, NCLI)) != FED_OK)
        return e;
    memset(B->held, 0, sizeof B->held);
    for (int i = 0; i < NCLI; i++) {
        uint8_t who = B->rx[i].ev.len ? B->rx[i].ev.frame[0] : NCLI;

        if (who < NCLI && !B->held[who])
            B->held[who] = B->rx[i].ev.req;
        else
            e = FED_ERR_INTERNAL;
        fed_gossip_tx_event_done(B->srv, &B->rx[i].ev);
    }
    if (e != FED_OK)
        return e;

    /* ---- MODEL: the aggregator to its 10 clients ---- */
    t0 = now_s();
    if ((e = fedi_node_encode_vec(&f32, B->global, NPARAMS, NULL, &B->enc_g, &B->enc_g_cap,
                                  &B->enc_g_len)) != FED_OK)
        return e;
    tm[P_ENC_G] = now_s() - t0;
    model_block(&b);
    t0 = now_s();
    for (int i = 0; i < NCLI; i++) {
        fed_wire_hdr h;

        header(&h, FED_WIRE_MODEL, &B->agg, &B->cli[i], B->round);
        if ((e = fed_wire_build(B->agg.wire, &h, &b, B->enc_g, B->enc_g_len, B->tx[i], B->tx_cap,
                                fed_rng_random, &B->rng, &B->tx_len[i])) != FED_OK)
            return e;
    }
    tm[P_SEAL_M] = now_s() - t0;
    t0 = now_s();
    for (int i = 0; i < NCLI; i++)
        if ((e = fed_gossip_tx_reply(B->srv, B->held[i], B->tx[i], B->tx_len[i])) != FED_OK)
            return e;
    if ((e = collect(B->dial, FED_GOSSIP_TX_REPLY, B->rx, NCLI)) != FED_OK)
        return e;
    tm[P_NET_M] = now_s() - t0;
    /* replies come back in any order: each to the client it was sealed for */
    for (int i = 0; i < NCLI; i++)
        for (int j = i + 1; j < NCLI; j++)
            if (B->rx[j].ev.token == (uint64_t)i) {
                fed_gossip_tx_event t = B->rx[i].ev;

                B->rx[i].ev = B->rx[j].ev;
                B->rx[j].ev = t;
            }
    if ((e = copy_frames(B, B->dial, &tm[P_COPY_M], NULL)) != FED_OK)
        return e;
    t0 = now_s();
    if ((e = open_frames(B, 0)) != FED_OK)
        return e;
    tm[P_OPEN_M] = now_s() - t0;
    t0 = now_s();
    if ((e = decode_frames(B)) != FED_OK)
        return e;
    tm[P_DEC_M] = now_s() - t0;
    for (int i = 0; i < NCLI; i++)
        rx_clear(&B->rx[i]);

    /* ---- DELTA: each client to the aggregator ---- */
    t0 = now_s();
    for (int i = 0; i < NCLI; i++)
        if ((e = fedi_node_encode_vec(&f32, B->delta[i], NPARAMS, NULL, &B->enc[i], &B->enc_cap[i],
                                      &B->enc_len[i])) != FED_OK)
            return e;
    tm[P_ENC_D] = now_s() - t0;
    t0 = now_s();
    for (int i = 0; i < NCLI; i++) {
        fed_wire_hdr h;

        memset(&b, 0, sizeof b);
        b.samples = 6000;
        b.round_ref = B->round;
        header(&h, FED_WIRE_DELTA, &B->cli[i], &B->agg, B->round);
        if ((e = fed_wire_build(B->cli[i].wire, &h, &b, B->enc[i], B->enc_len[i], B->tx[i],
                                B->tx_cap, fed_rng_random, &B->rng, &B->tx_len[i])) != FED_OK)
            return e;
    }
    tm[P_SEAL_D] = now_s() - t0;
    t0 = now_s();
    for (int i = 0; i < NCLI; i++)
        if ((e = fed_gossip_tx_send(B->dial, fed_crypto_arena_pubkey(B->agg.arena), B->tx[i],
                                    B->tx_len[i], (uint64_t)i)) != FED_OK)
            return e;
    if ((e = collect(B->srv, FED_GOSSIP_TX_REQUEST, B->rx, NCLI)) != FED_OK)
        return e;
    tm[P_NET_D] = now_s() - t0;
    for (int i = 0; i < NCLI; i++)
        B->held[i] = B->rx[i].ev.req;
    if ((e = copy_frames(B, B->srv, &tm[P_COPY_D], &t_warm)) != FED_OK)
        return e;
    t0 = now_s();
    if ((e = open_frames(B, 1)) != FED_OK)
        return e;
    tm[P_OPEN_D] = now_s() - t0;
    t0 = now_s();
    if ((e = decode_frames(B)) != FED_OK)
        return e;
    tm[P_DEC_D] = now_s() - t0;
    /* the ACKs (small; untimed) */
    for (int i = 0; i < NCLI; i++)
        if ((e = fed_gossip_tx_reply(B->srv, B->held[i], small, sizeof small)) != FED_OK)
            return e;
    {
        rx_frame acks[NCLI];

        if ((e = collect(B->dial, FED_GOSSIP_TX_REPLY, acks, NCLI)) != FED_OK)
            return e;
        for (int i = 0; i < NCLI; i++)
            fed_gossip_tx_event_done(B->dial, &acks[i].ev);
    }
    for (int i = 0; i < NCLI; i++) {
        B->in[i].delta = B->rx[i].vec;
        B->in[i].weight = (double)B->rx[i].msg.block.samples;
        memcpy(B->in[i].key, B->rx[i].msg.hdr.sender, 32);
    }
    t0 = now_s();
    if ((e = fed_merge_apply(B->merge, B->global, B->in, NCLI, B->res)) != FED_OK)
        return e;
    tm[P_MERGE] = now_s() - t0;
    t0 = now_s();
    if ((e = store_round(B)) != FED_OK)
        return e;
    tm[P_STORE] = now_s() - t0;
    for (int i = 0; i < NCLI; i++)
        rx_clear(&B->rx[i]);
    if (slot >= 0) {
        for (int p = 0; p < NPARTS; p++)
            B->t[p][slot] = tm[p];
        B->t_warm[slot] = t_warm;
    }
    return FED_OK;
}

/* ---- the 10 deltas opened on one thread, or two ---- */

typedef struct par_open {
    bench *B;
} par_open;

static void open_piece(void *ctx, size_t i)
{
    bench *B = ((par_open *)ctx)->B;

    open_one(&B->rx[i], &B->agg);
    decode_one(&B->rx[i]);
}

/* Seal the 10 deltas again and copy them as received (untimed), then time
 * precheck (loop), open + decode (pool: NULL = inline), finish (loop). */
static fed_err time_open(bench *B, fed_pool *pool, double *secs)
{
    par_open ctx = {B};
    double t0;
    fed_err e;

    B->round++;
    for (int i = 0; i < NCLI; i++) {
        fed_wire_block b;
        fed_wire_hdr h;
        rx_frame *r = &B->rx[i];

        memset(&b, 0, sizeof b);
        b.samples = 6000;
        b.round_ref = B->round;
        header(&h, FED_WIRE_DELTA, &B->cli[i], &B->agg, B->round);
        if ((e = fed_wire_build(B->cli[i].wire, &h, &b, B->enc[i], B->enc_len[i], B->tx[i],
                                B->tx_cap, fed_rng_random, &B->rng, &B->tx_len[i])) != FED_OK)
            return e;
        if (!(r->frame = fed_malloc(B->tx_len[i])))
            return FED_ERR_NOMEM;
        memcpy(r->frame, B->tx[i], B->tx_len[i]);
        r->len = B->tx_len[i];
    }
    t0 = now_s();
    for (int i = 0; i < NCLI; i++)
        if ((e = fed_wire_precheck(B->agg.wire, B->rx[i].frame, B->rx[i].len, &B->rx[i].tk)) !=
            FED_OK)
            return e;
    fed_pool_parallel_for(pool, NCLI, open_piece, &ctx);
    for (int i = 0; i < NCLI; i++)
        if ((e = fed_wire_finish(B->agg.wire, &B->rx[i].tk, B->rx[i].result, &B->rx[i].msg)) !=
            FED_OK)
            return e;
    *secs = now_s() - t0;
    for (int i = 0; i < NCLI; i++)
        rx_clear(&B->rx[i]);
    return FED_OK;
}

/* ---- report ---- */

static void report(bench *B, double rd, double triad, const double open_t[2][OPEN_REPS])
{
    double med[NPARTS], best[NPARTS], tot = 0, tot_best = 0, tot_mb = 0, agg = 0, cli = 0;
    double o1[OPEN_REPS], o2[OPEN_REPS], m1, m2, b1, b2;
    char bs[32];

    printf("memory: %.2f GB/s reading %zu MiB once (one thread, cold); STREAM triad %.2f GB/s\n",
           rd / 1e9, READ_BYTES >> 20, triad / 1e9);
    printf("bound = the part's vectors read once at the read rate; median of %d rounds, best "
           "in brackets\n\n", ROUNDS);
    printf("%-22s %-11s %3s %9s %10s %8s %9s %10s\n", "part", "where", "n", "ms/round", "(best)",
           "MB read", "bound ms", "time/bound");
    for (int p = 0; p < NPARTS; p++) {
        double bound = parts[p].read_mb * 1e6 / rd;

        med[p] = median_of(B->t[p], ROUNDS, &best[p]);
        tot += med[p];
        tot_best += best[p];
        tot_mb += parts[p].read_mb;
        if (!strcmp(parts[p].where, "aggregator"))
            agg += med[p];
        else if (!strcmp(parts[p].where, "clients"))
            cli += med[p];
        snprintf(bs, sizeof bs, "(%.3f)", 1e3 * best[p]);
        printf("%-22s %-11s %3d %9.3f %10s %8.1f %9.3f %9.1fx\n", parts[p].name,
               parts[p].where, parts[p].count, 1e3 * med[p], bs, parts[p].read_mb, 1e3 * bound,
               med[p] / bound);
    }
    snprintf(bs, sizeof bs, "(%.3f)", 1e3 * tot_best);
    printf("%-22s %-11s %3s %9.3f %10s %8.1f %9.3f %9.1fx\n", "total", "", "", 1e3 * tot, bs,
           tot_mb, 1e3 * tot_mb * 1e6 / rd, tot / (tot_mb * 1e6 / rd));
    printf("  of which the aggregator's own loop %.1f ms, the clients' %.1f ms (spread over 10 "
           "processes), NNG loopback %.1f ms\n",
           1e3 * agg, 1e3 * cli, 1e3 * (med[P_NET_M] + med[P_NET_D]));
    m1 = median_of(B->t_warm, ROUNDS, &b1);
    printf("  the 10 DELTA frames copied into buffers already touched: %.3f ms (%.3f), %.1fx "
           "faster than into fresh fed_mallocs (first-touch page faults)\n",
           1e3 * m1, 1e3 * b1, med[P_COPY_D] / m1);
    printf("  opening one 4 MB delta: %.3f ms = %.1fx its share of the fedavg (%.3f ms / %d)\n",
           1e3 * (med[P_OPEN_D] + med[P_DEC_D]) / NCLI,
           (med[P_OPEN_D] + med[P_DEC_D]) / med[P_MERGE], 1e3 * med[P_MERGE], NCLI);
    for (int r = 0; r < OPEN_REPS; r++) {
        o1[r] = open_t[0][r];
        o2[r] = open_t[1][r];
    }
    m1 = median_of(o1, OPEN_REPS, &b1);
    m2 = median_of(o2, OPEN_REPS, &b2);
    printf("\nopen + verify + decode of the 10 deltas (precheck and finish on the loop), "
           "median of %d (best):\n", OPEN_REPS);
    printf("  1 thread              %8.3f ms (%.3f)\n", 1e3 * m1, 1e3 * b1);
    printf("  2 threads of the pool %8.3f ms (%.3f)   speed-up %.2fx (%.2fx best)\n", 1e3 * m2,
           1e3 * b2, m1 / m2, b1 / b2);
}

int main(void)
{
    bench *B = calloc(1, sizeof *B);
    unsigned char *buf = NULL, piece[16384];
    double rd = 0, triad = 0, open_t[2][OPEN_REPS];
    fed_err e = FED_ERR_NOMEM;

    fed_log_set_level(FED_LOG_WARN);
    if (!B || sodium_init() < 0)
        goto out;
    if (!(buf = malloc(READ_BYTES)))
        goto out;
    rd = read_rate(buf, piece, sizeof piece);
    triad = triad_rate(buf);
    free(buf);
    buf = NULL;
    printf("bench_daemon: one round outside training, %d clients x %zu parameters (%.1f MB f32 "
           "per vector), frames over NNG on 127.0.0.1\n", NCLI, NPARAMS, VEC_BYTES / 1e6);
    if ((e = setup(B)) != FED_OK)
        goto out;
    if ((e = one_round(B, -1)) != FED_OK) /* warm-up: sessions, sockets, buffers */
        goto out;
    for (int r = 0; r < ROUNDS; r++)
        if ((e = one_round(B, r)) != FED_OK)
            goto out;
    for (int r = 0; r < OPEN_REPS; r++)
        if ((e = time_open(B, NULL, &open_t[0][r])) != FED_OK ||
            (e = time_open(B, B->pool, &open_t[1][r])) != FED_OK)
            goto out;
    report(B, rd, triad, (const double(*)[OPEN_REPS])open_t);
out:
    if (e != FED_OK)
        fprintf(stderr, "bench_daemon: %s\n", fed_strerror(e));
    free(buf);
    if (B)
        teardown(B);
    free(B);
    return e == FED_OK ? 0 : 1;
}
