/* test_stream.c - gossip/stream: CHUNK streams reassembled bit for bit,
 * the RNG-drawn secretstream header (deterministic, and opened by libsodium's
 * own pull side), and truncated, reordered, resent, tampered or forged chunks
 * refused with their exact errors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/rng.h"
#include "crypto/arena_impl.h"
#include "gossip/stream.h"
#include "gossip/wire.h"

#define MAX_FRAME 4096
#define MAX_FRAMES 64

typedef struct node {
    fed_crypto_arena *arena;
    fed_wire *w;
} node;

typedef struct world {
    node a, b, d, e; /* a, b, d members; e is not */
    fed_crypto_allow *allow;
    fed_rng rng;
    uint8_t *data, *dst;
    uint64_t total;
    uint8_t *f[MAX_FRAMES];
    size_t flen[MAX_FRAMES];
    int nframes;
    uint64_t seq;
    fed_err dst_err;
    int dst_calls;
} world;

static fed_err give_dst(void *ctx, const fed_wire_msg *first, uint64_t total, uint8_t **dst)
{
    world *W = ctx;

    W->dst_calls++;
    if (W->dst_err != FED_OK)
        return W->dst_err;
    assert_int_equal(first->hdr.type, FED_WIRE_DELTA);
    assert_int_equal(first->block.samples, 600);
    if (total > W->total)
        return FED_ERR_TOO_LARGE;
    memset(W->dst, 0, W->total);
    *dst = W->dst;
    return FED_OK;
}

static void node_open(world *W, node *n, uint64_t seed, uint64_t epoch, uint32_t max_rx)
{
    fed_wire_cfg cfg;
    fed_rng rng;

    fed_wire_cfg_default(&cfg);
    cfg.max_frame = MAX_FRAME;
    cfg.max_rx_streams = max_rx;
    fed_rng_seed(&rng, seed);
    assert_int_equal(fed_crypto_arena_new(NULL, &n->arena), FED_OK);
    assert_int_equal(fed_crypto_arena_generate(n->arena, fed_rng_random, &rng), FED_OK);
    assert_int_equal(fed_wire_new(&cfg, n->arena, W->allow, &n->w), FED_OK);
    fed_wire_set_epoch(n->w, epoch);
    fed_wire_set_stream_dst(n->w, give_dst, W);
}

static uint32_t get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void node_close(node *n)
{
    fed_wire_free(n->w);
    fed_crypto_arena_free(n->arena);
}

static void drop_frames(world *W)
{
    for (int i = 0; i < W->nframes; i++)
        free(W->f[i]);
    W->nframes = 0;
}

static int setup(void **state)
{
    world *W = calloc(1, sizeof *W);

    assert_int_equal(fed_crypto_allow_new(&W->allow), FED_OK);
    node_open(W, &W->a, 1, 1000, 2);
    node_open(W, &W->b, 2, 2000, 2);
    node_open(W, &W->d, 3, 3000, 2);
    node_open(W, &W->e, 4, 4000, 2);
    assert_int_equal(fed_crypto_allow_add(W->allow, "a", fed_crypto_arena_pubkey(W->a.arena)),
                     FED_OK);
    assert_int_equal(fed_crypto_allow_add(W->allow, "b", fed_crypto_arena_pubkey(W->b.arena)),
                     FED_OK);
    assert_int_equal(fed_crypto_allow_add(W->allow, "d", fed_crypto_arena_pubkey(W->d.arena)),
                     FED_OK);
    W->total = 100000;
    W->data = malloc(W->total);
    W->dst = malloc(W->total);
    fed_rng_seed(&W->rng, 5);
    fed_rng_fill(&W->rng, W->data, W->total);
    W->seq = 1;
    *state = W;
    return 0;
}

static int teardown(void **state)
{
    world *W = *state;

    drop_frames(W);
    node_close(&W->a);
    node_close(&W->b);
    node_close(&W->d);
    node_close(&W->e);
    fed_crypto_allow_free(W->allow);
    free(W->data);
    free(W->dst);
    free(W);
    return 0;
}

static fed_wire_hdr delta_hdr(const node *from, const node *to)
{
    fed_wire_hdr h;

    memset(&h, 0, sizeof h);
    h.type = FED_WIRE_DELTA;
    memcpy(h.recipient, fed_crypto_arena_pubkey(to->arena), 32);
    h.sender_epoch = fed_wire_epoch(from->w);
    h.recipient_epoch = fed_wire_epoch(to->w);
    h.round = 3;
    h.codec = 1;
    return h;
}

static void delta_block(fed_wire_block *b)
{
    memset(b, 0, sizeof *b);
    b->samples = 600;
    b->round_ref = 2;
}

/* Makes every frame of a stream of total bytes from -> to into W->f. */
static void make_stream(world *W, node *from, node *to, uint64_t total, size_t chunk,
                        fed_wire_stream_tx **keep)
{
    fed_wire_hdr h = delta_hdr(from, to);
    fed_wire_block b;
    fed_wire_stream_tx *tx = NULL;
    size_t cap;
    fed_err err;

    drop_frames(W);
    delta_block(&b);
    assert_int_equal(fed_wire_stream_tx_new(from->w, &h, &b, W->data, total, chunk, fed_rng_random,
                                            &W->rng, &tx),
                     FED_OK);
    cap = fed_wire_stream_tx_frame_cap(tx);
    assert_true(cap <= MAX_FRAME);
    while (!fed_wire_stream_tx_done(tx)) {
        assert_true(W->nframes < MAX_FRAMES);
        W->f[W->nframes] = malloc(cap);
        err = fed_wire_stream_tx_next(from->w, tx, W->seq++, fed_rng_random, &W->rng,
                                      W->f[W->nframes], cap, &W->flen[W->nframes]);
        assert_int_equal(err, FED_OK);
        assert_true(W->flen[W->nframes] <= MAX_FRAME);
        W->nframes++;
    }
    assert_int_equal(W->nframes, fed_wire_stream_tx_chunks(tx));
    if (keep)
        *keep = tx;
    else
        fed_wire_stream_tx_free(from->w, tx);
}

/* Opens frame i at b (on a copy, so W->f[i] can be delivered again). */
static fed_err deliver(world *W, int i, fed_wire_msg *m)
{
    uint8_t *copy = malloc(W->flen[i]);
    fed_wire_msg tmp;
    fed_err err;

    memcpy(copy, W->f[i], W->flen[i]);
    err = fed_wire_open(W->b.w, copy, W->flen[i], m ? m : &tmp);
    free(copy);
    return err;
}

static void expect_counter(const fed_wire_counters *before, const fed_wire_counters *after,
                           const char *name)
{
    for (size_t i = 0; i < fed_wire_counter_count(); i++) {
        const char *n = fed_wire_counter_name(i);
        uint64_t d = fed_wire_counter_value(after, i) - fed_wire_counter_value(before, i);

        if (strncmp(n, "rej_", 4) != 0)
            continue;
        if (strcmp(n, name) == 0)
            assert_int_equal(d, 1);
        else if (d)
            fail_msg("counter %s moved", n);
    }
}

static void expect_deliver(world *W, int i, fed_err want, const char *counter)
{
    fed_wire_counters before = *fed_wire_get_counters(W->b.w);

    assert_int_equal(deliver(W, i, NULL), want);
    if (counter)
        expect_counter(&before, fed_wire_get_counters(W->b.w), counter);
}

/* ---- libsodium's contract the design relies on ---- */

static void test_init_pull_equals_init_push(void **state)
{
    crypto_secretstream_xchacha20poly1305_state s1, s2;
    uint8_t key[32], header[24], c1[100 + 17], c2[100 + 17], msg[100];

    (void)state;
    for (int trial = 0; trial < 100; trial++) {
        crypto_secretstream_xchacha20poly1305_keygen(key);
        randombytes_buf(msg, sizeof msg);
        crypto_secretstream_xchacha20poly1305_init_push(&s1, header, key); /* draws header */
        crypto_secretstream_xchacha20poly1305_init_pull(&s2, header, key);
        assert_memory_equal(&s1, &s2, sizeof s1);
        for (int k = 0; k < 3; k++) {
            crypto_secretstream_xchacha20poly1305_push(
                &s1, c1, NULL, msg, sizeof msg, NULL, 0,
                crypto_secretstream_xchacha20poly1305_TAG_MESSAGE);
            crypto_secretstream_xchacha20poly1305_push(
                &s2, c2, NULL, msg, sizeof msg, NULL, 0,
                crypto_secretstream_xchacha20poly1305_TAG_MESSAGE);
            assert_memory_equal(c1, c2, sizeof c1);
        }
    }
}

/* ---- round trips ---- */

static void run_roundtrip(world *W, uint64_t total, size_t chunk, int expect_frames)
{
    fed_wire_counters before = *fed_wire_get_counters(W->b.w);
    fed_wire_stream_rx *rx = NULL;
    const uint8_t *block;
    size_t block_len;
    fed_wire_msg m;

    make_stream(W, &W->a, &W->b, total, chunk, NULL);
    assert_int_equal(W->nframes, expect_frames);
    for (int i = 0; i < W->nframes; i++) {
        assert_int_equal(deliver(W, i, &m), FED_OK);
        rx = m.stream;
        assert_non_null(rx);
        assert_int_equal(m.stream_done, i == W->nframes - 1);
        assert_int_equal(fed_wire_stream_rx_next(rx), (uint32_t)i + 1);
    }
    assert_int_equal(fed_wire_stream_rx_status(rx), FED_OK);
    assert_int_equal(fed_wire_stream_rx_received(rx), total);
    assert_memory_equal(W->dst, W->data, total);
    assert_int_equal(fed_wire_stream_rx_block(rx)->samples, 600);
    block = fed_wire_stream_rx_block_bytes(rx, &block_len);
    /* What contributions keep is enough to check the sender again later. */
    assert_int_equal(fed_wire_stream_verify(fed_crypto_arena_pubkey(W->a.arena),
                                            fed_wire_stream_rx_header(rx), block, block_len,
                                            W->data, total, fed_wire_stream_rx_sig(rx)),
                     FED_OK);
    W->dst[total / 2] ^= 1;
    assert_int_equal(fed_wire_stream_verify(fed_crypto_arena_pubkey(W->a.arena),
                                            fed_wire_stream_rx_header(rx), block, block_len, W->dst,
                                            total, fed_wire_stream_rx_sig(rx)),
                     FED_ERR_SIGNATURE);
    fed_wire_stream_close(W->b.w, rx);
    assert_int_equal(fed_wire_get_counters(W->b.w)->streams_begun, before.streams_begun + 1);
    assert_int_equal(fed_wire_get_counters(W->b.w)->streams_done, before.streams_done + 1);
    assert_int_equal(fed_wire_get_counters(W->b.w)->streams_failed, before.streams_failed);
    assert_int_equal(fed_wire_stream_count(W->b.w), 0);
    assert_int_equal(fed_crypto_slots_free(W->b.arena), 16);
    assert_int_equal(fed_crypto_slots_free(W->a.arena), 16);
}

static void test_roundtrip(void **state)
{
    world *W = *state;

    run_roundtrip(W, 10000, 1000, 10);
    run_roundtrip(W, 10500, 1000, 11); /* a short last chunk */
    run_roundtrip(W, 999, 1000, 1);    /* one chunk: done with the first frame */
    run_roundtrip(W, 1, 0, 1);
    run_roundtrip(W, W->total, 0, 28); /* the largest chunks that fit 4 KiB frames */
}

static void test_deterministic_and_libsodium_pull(void **state)
{
    world *W = *state;
    uint8_t *first[MAX_FRAMES], desc[FED_WIRE_STREAM_DESC_BYTES], ad[FED_WIRE_HEADER_BYTES];
    size_t first_len[MAX_FRAMES], plen0;
    int n;
    crypto_secretstream_xchacha20poly1305_state st;
    fed_crypto_session *s = NULL;
    uint8_t *copy, *out, tag;
    unsigned long long got;
    uint64_t at = 0;

    fed_rng_seed(&W->rng, 77);
    W->seq = 500;
    make_stream(W, &W->a, &W->b, 5000, 1000, NULL);
    n = W->nframes;
    for (int i = 0; i < n; i++) {
        first[i] = W->f[i];
        first_len[i] = W->flen[i];
    }
    W->nframes = 0;
    fed_rng_seed(&W->rng, 77);
    W->seq = 500;
    make_stream(W, &W->a, &W->b, 5000, 1000, NULL);
    assert_int_equal(W->nframes, n);
    for (int i = 0; i < n; i++) {
        assert_int_equal(W->flen[i], first_len[i]);
        assert_memory_equal(W->f[i], first[i], first_len[i]);
        free(first[i]);
    }
    /* Open with libsodium alone: the AEAD part with b's session key, then
     * every message with crypto_secretstream's own pull. */
    assert_int_equal(fed_crypto_session_get(W->b.arena, fed_crypto_arena_pubkey(W->a.arena), &s),
                     FED_OK);
    plen0 = get32(W->f[0] + FED_WIRE_OFF_LEN);
    copy = malloc(W->flen[0]);
    memcpy(copy, W->f[0], W->flen[0]);
    assert_int_equal(crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
                         copy + FED_WIRE_HEADER_BYTES, NULL, copy + FED_WIRE_HEADER_BYTES,
                         plen0 + 64, copy + FED_WIRE_HEADER_BYTES + plen0 + 64, copy,
                         FED_WIRE_HEADER_BYTES, copy + FED_WIRE_OFF_NONCE,
                         fedi_crypto_session_rx(s)),
                     0);
    fed_crypto_session_put(W->b.arena, s);
    memcpy(desc, copy + FED_WIRE_HEADER_BYTES + fed_wire_block_size(FED_WIRE_DELTA),
           sizeof desc); /* after DELTA's block */
    assert_int_equal(crypto_secretstream_xchacha20poly1305_init_pull(&st, desc + 88, desc + 24), 0);
    out = malloc(2000);
    for (int i = 0; i < n; i++) {
        const uint8_t *msg;
        size_t mlen = 1000 + 17;

        memcpy(ad, W->f[i], FED_WIRE_HEADER_BYTES);
        memset(ad + FED_WIRE_OFF_SEQ, 0, 8);
        if (i == 0) {
            memset(ad + FED_WIRE_OFF_NONCE, 0, 24);
            msg = W->f[0] + FED_WIRE_HEADER_BYTES + plen0 + 80;
        } else {
            msg = W->f[i] + FED_WIRE_HEADER_BYTES;
        }
        assert_int_equal(crypto_secretstream_xchacha20poly1305_pull(&st, out, &got, &tag, msg, mlen,
                                                                    ad, sizeof ad),
                         0);
        assert_int_equal(got, 1000);
        assert_int_equal(tag, crypto_secretstream_xchacha20poly1305_TAG_MESSAGE);
        assert_memory_equal(out, W->data + at, 1000);
        at += 1000;
        if (i == n - 1) {
            assert_int_equal(crypto_secretstream_xchacha20poly1305_pull(
                                 &st, out, &got, &tag, msg + mlen, 64 + 17, ad, sizeof ad),
                             0);
            assert_int_equal(tag, crypto_secretstream_xchacha20poly1305_TAG_FINAL);
            assert_int_equal(got, 64);
        }
    }
    free(out);
    free(copy);
}

/* ---- refusals ---- */

static void test_reordered_and_resent(void **state)
{
    world *W = *state;
    fed_wire_stream_tx *tx = NULL;
    fed_wire_stream_rx *rx;
    fed_wire_msg m;

    make_stream(W, &W->a, &W->b, 5000, 1000, &tx);
    assert_int_equal(deliver(W, 0, &m), FED_OK);
    rx = m.stream;
    expect_deliver(W, 2, FED_ERR_STREAM, "rej_stream"); /* chunk 2 before chunk 1 */
    expect_deliver(W, 1, FED_OK, NULL);
    expect_deliver(W, 1, FED_ERR_REPLAY, "rej_replay"); /* same bytes: the window */
    /* a resend with a new sequence number: the stream knows it has chunk 1 */
    assert_int_equal(fed_wire_stream_tx_restamp(W->a.w, tx, W->f[1], W->flen[1], W->seq++,
                                                fed_rng_random, &W->rng),
                     FED_OK);
    expect_deliver(W, 1, FED_ERR_REPLAY, "rej_replay");
    /* a resent first frame of a stream b holds */
    assert_int_equal(fed_wire_stream_tx_restamp(W->a.w, tx, W->f[0], W->flen[0], W->seq++,
                                                fed_rng_random, &W->rng),
                     FED_OK);
    expect_deliver(W, 0, FED_ERR_REPLAY, "rej_replay");
    for (int i = 2; i < 5; i++)
        expect_deliver(W, i, FED_OK, NULL);
    assert_int_equal(fed_wire_stream_rx_status(rx), FED_OK);
    assert_memory_equal(W->dst, W->data, 5000);
    expect_deliver(W, 4, FED_ERR_REPLAY, "rej_replay");
    fed_wire_stream_close(W->b.w, rx);
    /* after close the stream is gone: a late chunk names nothing */
    assert_int_equal(fed_wire_stream_tx_restamp(W->a.w, tx, W->f[3], W->flen[3], W->seq++,
                                                fed_rng_random, &W->rng),
                     FED_OK);
    expect_deliver(W, 3, FED_ERR_STREAM, "rej_stream");
    /* a restamped first frame opens afresh once the old stream is closed */
    assert_int_equal(fed_wire_stream_tx_restamp(W->a.w, tx, W->f[0], W->flen[0], W->seq++,
                                                fed_rng_random, &W->rng),
                     FED_OK);
    assert_int_equal(deliver(W, 0, &m), FED_OK);
    fed_wire_stream_close(W->b.w, m.stream);
    assert_int_equal(fed_wire_stream_tx_next(W->a.w, tx, 1, fed_rng_random, &W->rng, W->f[0],
                                             W->flen[0], &W->flen[0]),
                     FED_ERR_CLOSED);
    fed_wire_stream_tx_free(W->a.w, tx);
}

static void test_truncated(void **state)
{
    world *W = *state;
    fed_wire_counters before = *fed_wire_get_counters(W->b.w);
    fed_wire_stream_rx *rx;
    fed_wire_msg m;

    make_stream(W, &W->a, &W->b, 5000, 1000, NULL);
    assert_int_equal(deliver(W, 0, &m), FED_OK);
    rx = m.stream;
    for (int i = 1; i < 4; i++)
        expect_deliver(W, i, FED_OK, NULL);
    /* a cut frame is caught by the cheap checks */
    W->flen[4] -= 40;
    expect_deliver(W, 4, FED_ERR_FRAME_TRUNCATED, "rej_truncated");
    W->flen[4] += 40;
    /* the stream never saw its final tag: it is not complete */
    assert_false(fed_wire_stream_rx_done(rx));
    assert_int_equal(fed_wire_stream_rx_status(rx), FED_ERR_STREAM);
    assert_int_equal(fed_wire_stream_rx_received(rx), 4000);
    fed_wire_stream_close(W->b.w, rx);
    assert_int_equal(fed_wire_get_counters(W->b.w)->streams_failed, before.streams_failed + 1);
    /* a first frame whose first chunk was cut off */
    make_stream(W, &W->a, &W->b, 5000, 1000, NULL);
    W->flen[0] -= 1;
    expect_deliver(W, 0, FED_ERR_STREAM, "rej_stream");
    W->flen[0] += 1;
    assert_int_equal(fed_wire_stream_count(W->b.w), 0);
    assert_int_equal(fed_crypto_slots_free(W->b.arena), 16);
}

static void test_tampered_chunks(void **state)
{
    world *W = *state;
    fed_wire_stream_rx *rx;
    fed_wire_msg m;
    int last;

    make_stream(W, &W->a, &W->b, 5000, 1000, NULL);
    last = W->nframes - 1;
    assert_int_equal(deliver(W, 0, &m), FED_OK);
    rx = m.stream;
    W->f[1][FED_WIRE_HEADER_BYTES + 20] ^= 1; /* chunk body */
    expect_deliver(W, 1, FED_ERR_STREAM, "rej_stream");
    W->f[1][FED_WIRE_HEADER_BYTES + 20] ^= 1;
    W->f[1][FED_WIRE_OFF_ROUND] ^= 1; /* chunk header: the MAC fails */
    expect_deliver(W, 1, FED_ERR_AEAD, "rej_aead");
    W->f[1][FED_WIRE_OFF_ROUND] ^= 1;
    W->f[1][FED_WIRE_OFF_SEQ] ^= 0x40; /* even the sequence number is covered */
    expect_deliver(W, 1, FED_ERR_AEAD, "rej_aead");
    W->f[1][FED_WIRE_OFF_SEQ] ^= 0x40;
    for (int i = 1; i < last; i++) /* the genuine frames still pass */
        expect_deliver(W, i, FED_OK, NULL);
    /* the final message (the signature) tampered: the data message before it
     * opened, so the state must roll back for the genuine frame to pass */
    W->f[last][W->flen[last] - FED_WIRE_MAC_BYTES - 3] ^= 1;
    expect_deliver(W, last, FED_ERR_STREAM, "rej_stream");
    W->f[last][W->flen[last] - FED_WIRE_MAC_BYTES - 3] ^= 1;
    expect_deliver(W, last, FED_OK, NULL);
    assert_int_equal(fed_wire_stream_rx_status(rx), FED_OK);
    assert_memory_equal(W->dst, W->data, 5000);
    fed_wire_stream_close(W->b.w, rx);
}

/* The stream's keys as b sees them, from the first frame. */
static void stream_keys(world *W, uint8_t desc[FED_WIRE_STREAM_DESC_BYTES], size_t *plen0)
{
    fed_crypto_session *s = NULL;
    uint8_t *copy = malloc(W->flen[0]);

    *plen0 = get32(W->f[0] + FED_WIRE_OFF_LEN);
    memcpy(copy, W->f[0], W->flen[0]);
    assert_int_equal(fed_crypto_session_get(W->b.arena, fed_crypto_arena_pubkey(W->a.arena), &s),
                     FED_OK);
    assert_int_equal(fed_crypto_open(s, copy, FED_WIRE_HEADER_BYTES, copy + FED_WIRE_OFF_NONCE,
                                     copy + FED_WIRE_HEADER_BYTES, copy + FED_WIRE_HEADER_BYTES,
                                     *plen0, NULL, NULL),
                     FED_OK);
    fed_crypto_session_put(W->b.arena, s);
    memcpy(desc, copy + FED_WIRE_HEADER_BYTES + fed_wire_block_size(FED_WIRE_DELTA),
           FED_WIRE_STREAM_DESC_BYTES);
    free(copy);
}

/* Chunk index of a stream, made by someone holding the stream's keys (a
 * member gone bad): data with tag data_tag and, when sig is given, a final
 * message carrying it. Returns the frame length. */
static size_t forge_chunk(world *W, const uint8_t *desc, size_t plen0, uint32_t index,
                          uint8_t data_tag, const uint8_t *sig, uint8_t *out)
{
    crypto_secretstream_xchacha20poly1305_state st;
    uint8_t ad[FED_WIRE_HEADER_BYTES], tmp[1000], tag;
    size_t body;
    uint64_t seq = W->seq++;

    /* reach the state after message index - 1 by pulling the genuine ones */
    assert_int_equal(crypto_secretstream_xchacha20poly1305_init_pull(&st, desc + 88, desc + 24), 0);
    for (uint32_t i = 0; i < index; i++) {
        const uint8_t *msg =
            i == 0 ? W->f[0] + FED_WIRE_HEADER_BYTES + plen0 + 80 : W->f[i] + FED_WIRE_HEADER_BYTES;

        memcpy(ad, W->f[i], FED_WIRE_HEADER_BYTES);
        memset(ad + FED_WIRE_OFF_SEQ, 0, 8);
        if (i == 0)
            memset(ad + FED_WIRE_OFF_NONCE, 0, 24);
        assert_int_equal(crypto_secretstream_xchacha20poly1305_pull(&st, tmp, NULL, &tag, msg,
                                                                    1000 + 17, ad, sizeof ad),
                         0);
    }
    body = 1000 + 17 + (sig ? 64 + 17 : 0);
    memcpy(out, W->f[index], FED_WIRE_HEADER_BYTES);
    for (int i = 0; i < 8; i++)
        out[FED_WIRE_OFF_SEQ + i] = (uint8_t)(seq >> (8 * i));
    for (int i = 0; i < 4; i++)
        out[FED_WIRE_OFF_LEN + i] = (uint8_t)(body >> (8 * i));
    memcpy(ad, out, sizeof ad);
    memset(ad + FED_WIRE_OFF_SEQ, 0, 8);
    crypto_secretstream_xchacha20poly1305_push(&st, out + FED_WIRE_HEADER_BYTES, NULL,
                                               W->data + 1000 * index, 1000, ad, sizeof ad,
                                               data_tag);
    if (sig)
        crypto_secretstream_xchacha20poly1305_push(&st, out + FED_WIRE_HEADER_BYTES + 1000 + 17,
                                                   NULL, sig, 64, ad, sizeof ad,
                                                   crypto_secretstream_xchacha20poly1305_TAG_FINAL);
    crypto_generichash_blake2b(out + FED_WIRE_HEADER_BYTES + body, 16, out, FED_WIRE_HEADER_BYTES,
                               desc + 56, 32);
    return FED_WIRE_HEADER_BYTES + body + 16;
}

static fed_err open_bytes(world *W, uint8_t *frame, size_t len, const char *counter)
{
    fed_wire_counters before = *fed_wire_get_counters(W->b.w);
    fed_wire_msg m;
    fed_err err = fed_wire_open(W->b.w, frame, len, &m);

    if (counter)
        expect_counter(&before, fed_wire_get_counters(W->b.w), counter);
    return err;
}

static void test_forged_early_final(void **state)
{
    world *W = *state;
    uint8_t desc[FED_WIRE_STREAM_DESC_BYTES], forged[2000];
    size_t plen0, len;
    fed_wire_msg m;

    make_stream(W, &W->a, &W->b, 4000, 1000, NULL);
    stream_keys(W, desc, &plen0);
    assert_int_equal(deliver(W, 0, &m), FED_OK);
    /* chunk 1 of 4 claiming to end the stream: truncation by a key holder */
    len = forge_chunk(W, desc, plen0, 1, crypto_secretstream_xchacha20poly1305_TAG_FINAL, NULL,
                      forged);
    assert_int_equal(open_bytes(W, forged, len, "rej_stream"), FED_ERR_STREAM);
    /* the forgery helper is faithful: with the right tag it passes */
    len = forge_chunk(W, desc, plen0, 1, crypto_secretstream_xchacha20poly1305_TAG_MESSAGE, NULL,
                      forged);
    assert_int_equal(open_bytes(W, forged, len, NULL), FED_OK);
    for (int i = 2; i < 4; i++)
        expect_deliver(W, i, FED_OK, NULL);
    assert_int_equal(fed_wire_stream_rx_status(m.stream), FED_OK);
    fed_wire_stream_close(W->b.w, m.stream);
}

static void test_forged_signature(void **state)
{
    world *W = *state;
    uint8_t desc[FED_WIRE_STREAM_DESC_BYTES], forged[2000], sig[64];
    size_t plen0, len;
    fed_wire_msg m;

    make_stream(W, &W->a, &W->b, 2000, 1000, NULL);
    stream_keys(W, desc, &plen0);
    assert_int_equal(deliver(W, 0, &m), FED_OK);
    /* the right data, a signature by someone else (e holds no a's key) */
    assert_int_equal(fed_crypto_arena_sign(W->e.arena, (const uint8_t *)"x", 1, sig), FED_OK);
    len = forge_chunk(W, desc, plen0, 1, crypto_secretstream_xchacha20poly1305_TAG_MESSAGE, sig,
                      forged);
    assert_int_equal(open_bytes(W, forged, len, "rej_signature"), FED_ERR_SIGNATURE);
    assert_int_equal(fed_wire_stream_rx_status(m.stream), FED_ERR_STREAM);
    /* a stream its own sender broke stays broken */
    expect_deliver(W, 1, FED_ERR_STREAM, "rej_stream");
    fed_wire_stream_close(W->b.w, m.stream);
}

static void test_bad_descriptor(void **state)
{
    world *W = *state;
    fed_crypto_session *s = NULL;
    uint8_t *p;
    size_t plen0;

    make_stream(W, &W->a, &W->b, 4000, 1000, NULL);
    plen0 = get32(W->f[0] + FED_WIRE_OFF_LEN);
    p = W->f[0] + FED_WIRE_HEADER_BYTES;
    assert_int_equal(fed_crypto_session_get(W->b.arena, fed_crypto_arena_pubkey(W->a.arena), &s),
                     FED_OK);
    assert_int_equal(fed_crypto_open(s, W->f[0], FED_WIRE_HEADER_BYTES,
                                     W->f[0] + FED_WIRE_OFF_NONCE, p, p, plen0, NULL, NULL),
                     FED_OK);
    fed_crypto_session_put(W->b.arena, s);
    p[fed_wire_block_size(FED_WIRE_DELTA) + 20] = 5; /* 5 chunks of 1000 cannot hold 4000 bytes */
    assert_int_equal(fed_crypto_session_get(W->a.arena, fed_crypto_arena_pubkey(W->b.arena), &s),
                     FED_OK);
    assert_int_equal(fed_crypto_seal(W->a.arena, s, W->f[0], FED_WIRE_HEADER_BYTES,
                                     W->f[0] + FED_WIRE_OFF_NONCE, p, plen0, NULL, NULL),
                     FED_OK);
    fed_crypto_session_put(W->a.arena, s);
    expect_deliver(W, 0, FED_ERR_PAYLOAD, "rej_payload");
    assert_int_equal(fed_wire_stream_count(W->b.w), 0);
}

static void test_stream_limit(void **state)
{
    world *W = *state;
    fed_wire_msg m1, m2, m3;
    uint8_t *keep;
    size_t keep_len;

    make_stream(W, &W->a, &W->b, 3000, 1000, NULL);
    assert_int_equal(deliver(W, 0, &m1), FED_OK);
    make_stream(W, &W->d, &W->b, 3000, 1000, NULL);
    assert_int_equal(deliver(W, 0, &m2), FED_OK);
    assert_int_equal(fed_wire_stream_count(W->b.w), 2);
    make_stream(W, &W->a, &W->b, 3000, 1000, NULL); /* a third, from a again */
    keep_len = W->flen[0];
    keep = malloc(keep_len);
    memcpy(keep, W->f[0], keep_len);
    expect_deliver(W, 0, FED_ERR_STREAM_LIMIT, "rej_stream_limit");
    fed_wire_stream_close(W->b.w, m2.stream);
    assert_int_equal(fed_wire_open(W->b.w, keep, keep_len, &m3), FED_OK);
    fed_wire_stream_close(W->b.w, m1.stream);
    fed_wire_stream_close(W->b.w, m3.stream);
    free(keep);
    assert_int_equal(fed_crypto_slots_free(W->b.arena), 16);
}

static void test_destination_refused(void **state)
{
    world *W = *state;

    make_stream(W, &W->a, &W->b, 3000, 1000, NULL);
    W->dst_err = FED_ERR_NOMEM;
    expect_deliver(W, 0, FED_ERR_NOMEM, "rej_other");
    W->dst_err = FED_OK;
    fed_wire_set_stream_dst(W->b.w, NULL, NULL);
    expect_deliver(W, 0, FED_ERR_UNSUPPORTED, "rej_other");
    fed_wire_set_stream_dst(W->b.w, give_dst, W);
    assert_int_equal(fed_wire_stream_count(W->b.w), 0);
    assert_int_equal(fed_crypto_slots_free(W->b.arena), 16);
}

static void test_sender_misuse(void **state)
{
    world *W = *state;
    fed_wire_hdr h = delta_hdr(&W->a, &W->b);
    fed_wire_stream_tx *tx[17] = {0};
    fed_wire_block b;

    delta_block(&b);
    assert_int_equal(
        fed_wire_stream_tx_new(W->a.w, &h, &b, W->data, 0, 0, fed_rng_random, &W->rng, &tx[0]),
        FED_ERR_INVAL);
    assert_int_equal(fed_wire_stream_tx_new(W->a.w, &h, &b, W->data, 100, MAX_FRAME, fed_rng_random,
                                            &W->rng, &tx[0]),
                     FED_ERR_INVAL);
    h.type = FED_WIRE_ACK;
    assert_int_equal(
        fed_wire_stream_tx_new(W->a.w, &h, &b, W->data, 100, 0, fed_rng_random, &W->rng, &tx[0]),
        FED_ERR_INVAL);
    h.type = FED_WIRE_DELTA;
    for (int i = 0; i < 16; i++) /* one arena slot each */
        assert_int_equal(fed_wire_stream_tx_new(W->a.w, &h, &b, W->data, 100, 0, fed_rng_random,
                                                &W->rng, &tx[i]),
                         FED_OK);
    assert_int_equal(
        fed_wire_stream_tx_new(W->a.w, &h, &b, W->data, 100, 0, fed_rng_random, &W->rng, &tx[16]),
        FED_ERR_STREAM_LIMIT);
    for (int i = 0; i < 17; i++)
        fed_wire_stream_tx_free(W->a.w, tx[i]);
    assert_int_equal(fed_crypto_slots_free(W->a.arena), 16);
}

static void test_close_while_opening(void **state)
{
    world *W = *state;
    fed_wire_ticket t;
    fed_wire_msg m;

    make_stream(W, &W->a, &W->b, 3000, 1000, NULL);
    assert_int_equal(deliver(W, 0, &m), FED_OK);
    assert_int_equal(fed_wire_precheck(W->b.w, W->f[1], W->flen[1], &t), FED_OK);
    expect_deliver(W, 2, FED_ERR_BUSY, "rej_busy"); /* one chunk at a time */
    fed_wire_stream_close(W->b.w, m.stream);        /* deferred: it is busy */
    assert_int_equal(fed_wire_stream_count(W->b.w), 1);
    assert_int_equal(fed_wire_open_ticket(W->b.w, &t, W->f[1], W->flen[1], &m), FED_OK);
    assert_int_equal(fed_wire_finish(W->b.w, &t, FED_OK, &m), FED_OK);
    assert_int_equal(fed_wire_stream_count(W->b.w), 0);
    assert_int_equal(fed_crypto_slots_free(W->b.arena), 16);
}

static void test_alloc_failures(void **state)
{
    world *W = *state;
    fed_wire_hdr h = delta_hdr(&W->a, &W->b);
    fed_wire_stream_tx *tx = NULL;
    fed_wire_block b;
    fed_wire_msg m;
    fed_err err;

    delta_block(&b);
    for (unsigned long n = 1;; n++) {
        fed_alloc_fail_nth(n, 1);
        err = fed_wire_stream_tx_new(W->a.w, &h, &b, W->data, 3000, 1000, fed_rng_random, &W->rng,
                                     &tx);
        fed_alloc_fail_nth(0, 0);
        if (err == FED_OK)
            break;
        assert_int_equal(err, FED_ERR_NOMEM);
        assert_null(tx);
        assert_int_equal(fed_crypto_slots_free(W->a.arena), 16);
    }
    fed_wire_stream_tx_free(W->a.w, tx);
    make_stream(W, &W->a, &W->b, 3000, 1000, NULL);
    for (unsigned long n = 1;; n++) {
        fed_alloc_fail_nth(n, 1);
        err = deliver(W, 0, &m);
        fed_alloc_fail_nth(0, 0);
        if (err == FED_OK)
            break;
        assert_int_equal(err, FED_ERR_NOMEM);
        assert_int_equal(fed_crypto_slots_free(W->b.arena), 16);
    }
    expect_deliver(W, 1, FED_OK, NULL);
    expect_deliver(W, 2, FED_OK, NULL);
    assert_int_equal(fed_wire_stream_rx_status(m.stream), FED_OK);
    fed_wire_stream_close(W->b.w, m.stream);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_pull_equals_init_push),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_deterministic_and_libsodium_pull),
        cmocka_unit_test(test_reordered_and_resent),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_tampered_chunks),
        cmocka_unit_test(test_forged_early_final),
        cmocka_unit_test(test_forged_signature),
        cmocka_unit_test(test_bad_descriptor),
        cmocka_unit_test(test_stream_limit),
        cmocka_unit_test(test_destination_refused),
        cmocka_unit_test(test_sender_misuse),
        cmocka_unit_test(test_close_while_opening),
        cmocka_unit_test(test_alloc_failures),
    };

    fed_log_set_level(FED_LOG_ERROR + 1);
    return cmocka_run_group_tests(tests, setup, teardown);
}
