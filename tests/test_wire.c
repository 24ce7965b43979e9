/* test_wire.c - gossip/wire: headers and typed blocks, sealed frames of every
 * type, and the receiver's checks: each bad frame is refused with its own
 * fed_err and bumps exactly its own counter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/rng.h"
#include "crypto/arena_impl.h"
#include "gossip/wire.h"
#include "model/codec.h"

#define EPOCH_A 1000
#define EPOCH_B 2000
#define CAP 65536

typedef struct node {
    fed_crypto_arena *arena;
    fed_wire *w;
} node;

typedef struct world {
    node a, b, c; /* a and b are members, c is not */
    fed_crypto_allow *allow;
    fed_rng rng;
    uint8_t *frame;
} world;

static void node_open(world *W, node *n, uint64_t seed, uint64_t epoch, const fed_wire_cfg *cfg)
{
    fed_rng rng;

    fed_rng_seed(&rng, seed);
    assert_int_equal(fed_crypto_arena_new(NULL, &n->arena), FED_OK);
    assert_int_equal(fed_crypto_arena_generate(n->arena, fed_rng_random, &rng), FED_OK);
    assert_int_equal(fed_wire_new(cfg, n->arena, W->allow, &n->w), FED_OK);
    fed_wire_set_epoch(n->w, epoch);
}

static int setup(void **state)
{
    world *W = calloc(1, sizeof *W);

    assert_int_equal(fed_crypto_allow_new(&W->allow), FED_OK);
    node_open(W, &W->a, 1, EPOCH_A, NULL);
    node_open(W, &W->b, 2, EPOCH_B, NULL);
    node_open(W, &W->c, 3, 3000, NULL);
    assert_int_equal(fed_crypto_allow_add(W->allow, "a", fed_crypto_arena_pubkey(W->a.arena)),
                     FED_OK);
    assert_int_equal(fed_crypto_allow_add(W->allow, "b", fed_crypto_arena_pubkey(W->b.arena)),
                     FED_OK);
    fed_rng_seed(&W->rng, 42);
    W->frame = malloc(CAP);
    *state = W;
    return 0;
}

static void node_close(node *n)
{
    fed_wire_free(n->w);
    fed_crypto_arena_free(n->arena);
}

static int teardown(void **state)
{
    world *W = *state;

    node_close(&W->a);
    node_close(&W->b);
    node_close(&W->c);
    fed_crypto_allow_free(W->allow);
    free(W->frame);
    free(W);
    return 0;
}

static fed_wire_hdr hdr_to(const node *from, const node *to, uint8_t type, uint64_t seq)
{
    fed_wire_hdr h;

    memset(&h, 0, sizeof h);
    h.type = type;
    memcpy(h.recipient, fed_crypto_arena_pubkey(to->arena), 32);
    h.sender_epoch = fed_wire_epoch(from->w);
    h.recipient_epoch = fed_wire_epoch(to->w);
    h.seq = seq;
    h.round = 5;
    return h;
}

static void sample_block(uint8_t type, fed_wire_block *b)
{
    memset(b, 0, sizeof *b);
    switch (type) {
    case FED_WIRE_HELLO:
        b->role = FED_WIRE_ROLE_CLIENT;
        b->caps = 0x1234;
        break;
    case FED_WIRE_NEXT: b->round_ref = 4; break;
    case FED_WIRE_MODEL:
        b->samples = 60000;
        strcpy(b->settings.spec, "mlp:128,64");
        b->settings.local_epochs = 2;
        b->settings.batch = 32;
        b->settings.optimizer = 1;
        b->settings.codec = FED_CODEC_TOPK;
        b->settings.fraction = 0.01f;
        b->settings.lr = 0.05f;
        b->settings.mu = 0.01f;
        b->settings.momentum = 0.5f;
        b->settings.deadline_ms = 30000;
        break;
    case FED_WIRE_DELTA:
        b->samples = 600;
        b->round_ref = 4;
        break;
    case FED_WIRE_ACK:
        b->status = FED_ERR_REPLAY;
        b->ack_flags = FED_WIRE_ACK_DUPLICATE;
        break;
    case FED_WIRE_SHARE:
        b->samples = 77;
        b->weight = 0.375;
        break;
    case FED_WIRE_PEERS: b->count = 2; break;
    case FED_WIRE_LEAVE: b->reason = 3; break;
    case FED_WIRE_CHUNK:
        b->stream_id = 0xfeedfacecafebeefULL;
        b->chunk_index = 9;
        break;
    }
}

/* A sealed frame from -> to; returns its length. */
static size_t build(world *W, node *from, node *to, uint8_t type, uint64_t seq, const uint8_t *vec,
                    size_t vlen, uint16_t codec)
{
    fed_wire_hdr h = hdr_to(from, to, type, seq);
    fed_wire_block b;
    size_t len = 0;

    sample_block(type, &b);
    h.codec = codec;
    if (type == FED_WIRE_CHUNK)
        h.flags = FED_WIRE_FLAG_PULL;
    assert_int_equal(
        fed_wire_build(from->w, &h, &b, vec, vlen, W->frame, CAP, fed_rng_random, &W->rng, &len),
        FED_OK);
    assert_int_equal(len, fed_wire_frame_bytes(fed_wire_block_size(type) + vlen));
    return len;
}

/* Opens frame at b and checks the verdict and that exactly the named counter moved. */
static void expect_open(world *W, uint8_t *frame, size_t len, fed_err want, const char *counter)
{
    fed_wire_counters before = *fed_wire_get_counters(W->b.w), after;
    fed_wire_msg m;

    assert_int_equal(fed_wire_open(W->b.w, frame, len, &m), want);
    after = *fed_wire_get_counters(W->b.w);
    for (size_t i = 0; i < fed_wire_counter_count(); i++) {
        const char *name = fed_wire_counter_name(i);
        uint64_t d = fed_wire_counter_value(&after, i) - fed_wire_counter_value(&before, i);

        if (strncmp(name, "rej_", 4) != 0)
            continue;
        if (counter && strcmp(name, counter) == 0)
            assert_int_equal(d, 1);
        else if (d != 0)
            fail_msg("counter %s moved by %llu", name, (unsigned long long)d);
    }
    if (want == FED_OK)
        assert_int_equal(after.opened, before.opened + 1);
    else
        assert_int_equal(after.opened, before.opened);
}

/* ---- header and blocks ---- */

static void test_header_roundtrip(void **state)
{
    fed_wire_hdr h, g;
    uint8_t buf[FED_WIRE_HEADER_BYTES];

    (void)state;
    memset(&h, 0, sizeof h);
    h.type = FED_WIRE_DELTA;
    h.flags = FED_WIRE_FLAG_STREAM;
    for (int i = 0; i < 32; i++) {
        h.sender[i] = (uint8_t)i;
        h.recipient[i] = (uint8_t)(200 - i);
    }
    h.sender_epoch = 0x0102030405060708ULL;
    h.recipient_epoch = 7;
    h.seq = 9;
    h.round = 11;
    memset(h.nonce, 0xaa, 24);
    h.payload_len = 0xdeadbeef;
    h.codec = 4;
    fed_wire_hdr_encode(&h, buf);
    assert_memory_equal(buf, "FEDN\x02\x04\x01\x00", 8);
    assert_int_equal(buf[72], 0x08); /* little-endian */
    assert_int_equal(buf[128], 0xef);
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_OK);
    assert_memory_equal(&g, &h, sizeof h);
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf - 1, &g), FED_ERR_FRAME_TRUNCATED);
    buf[5] = 0;
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_ERR_FRAME_TYPE);
    buf[5] = 10;
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_ERR_FRAME_TYPE);
    buf[5] = FED_WIRE_ACK; /* ACK takes no flags */
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_ERR_FRAME_TYPE);
    buf[5] = FED_WIRE_CHUNK;
    buf[6] = FED_WIRE_FLAG_PULL | FED_WIRE_FLAG_DATA;
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_ERR_FRAME_TYPE);
    buf[6] = FED_WIRE_FLAG_DATA; /* data frames keep the nonce tail zero */
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_ERR_FRAME_TYPE);
    memset(buf + 116, 0, 12);
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_OK);
    buf[135] = 1;
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_ERR_FRAME_TYPE);
}

static void test_blocks_roundtrip(void **state)
{
    (void)state;
    for (uint8_t t = 1; t <= FED_WIRE_TYPE_MAX; t++) {
        fed_wire_block b, g;
        uint8_t buf[FED_WIRE_BLOCK_MAX + 8];
        size_t len = 0, used = 0;

        sample_block(t, &b);
        assert_int_equal(fed_wire_block_encode(t, &b, buf, sizeof buf, &len), FED_OK);
        assert_int_equal(len, fed_wire_block_size(t));
        assert_true(len <= FED_WIRE_BLOCK_MAX);
        assert_int_equal(fed_wire_block_decode(t, buf, len + 8, &g, &used), FED_OK);
        assert_int_equal(used, len);
        assert_memory_equal(&g, &b, sizeof b);
        assert_int_equal(fed_wire_block_decode(t, buf, len - 1, &g, &used), FED_ERR_PAYLOAD);
        assert_int_equal(fed_wire_block_encode(t, &b, buf, len - 1, &len), FED_ERR_TOO_LARGE);
    }
}

static void expect_block_bad(uint8_t type, void (*spoil)(uint8_t *buf))
{
    fed_wire_block b, g;
    uint8_t buf[FED_WIRE_BLOCK_MAX];
    size_t len = 0, used = 0;

    sample_block(type, &b);
    assert_int_equal(fed_wire_block_encode(type, &b, buf, sizeof buf, &len), FED_OK);
    spoil(buf);
    assert_int_equal(fed_wire_block_decode(type, buf, len, &g, &used), FED_ERR_PAYLOAD);
}

static void spoil_hello_role(uint8_t *b) { b[0] = 9; }
static void spoil_hello_reserved(uint8_t *b) { b[3] = 1; }
static void spoil_model_spec(uint8_t *b) { memset(b + 8, 'a', 128); }
static void spoil_model_spec_char(uint8_t *b) { b[9] = '\n'; }
static void spoil_model_lr(uint8_t *b) { memset(b + 8 + 144, 0, 4); }
static void spoil_model_mu(uint8_t *b) { memset(b + 8 + 148, 0xff, 4); } /* NaN */
static void spoil_model_momentum(uint8_t *b) /* 1.0: momentum must stay below 1 */
{
    b[8 + 160] = 0x00, b[8 + 161] = 0x00, b[8 + 162] = 0x80, b[8 + 163] = 0x3f;
}
static void spoil_model_reserved(uint8_t *b) { b[8 + 165] = 1; }
static void spoil_ack_status(uint8_t *b) { b[0] = 200; }
static void spoil_ack_flags(uint8_t *b) { b[4] = 0x80; }
static void spoil_share_weight(uint8_t *b)
{
    b[15] = 0xff;
    b[14] = 0xf8;
} /* NaN */
static void spoil_chunk_reserved(uint8_t *b) { b[13] = 1; }

static void test_blocks_rejected(void **state)
{
    fed_wire_block b;
    uint8_t buf[FED_WIRE_BLOCK_MAX];
    size_t len;

    (void)state;
    expect_block_bad(FED_WIRE_HELLO, spoil_hello_role);
    expect_block_bad(FED_WIRE_HELLO, spoil_hello_reserved);
    expect_block_bad(FED_WIRE_MODEL, spoil_model_spec);
    expect_block_bad(FED_WIRE_MODEL, spoil_model_spec_char);
    expect_block_bad(FED_WIRE_MODEL, spoil_model_lr);
    expect_block_bad(FED_WIRE_MODEL, spoil_model_mu);
    expect_block_bad(FED_WIRE_MODEL, spoil_model_momentum);
    expect_block_bad(FED_WIRE_MODEL, spoil_model_reserved);
    expect_block_bad(FED_WIRE_ACK, spoil_ack_status);
    expect_block_bad(FED_WIRE_ACK, spoil_ack_flags);
    expect_block_bad(FED_WIRE_SHARE, spoil_share_weight);
    expect_block_bad(FED_WIRE_CHUNK, spoil_chunk_reserved);
    sample_block(FED_WIRE_MODEL, &b);
    b.settings.lr = -1;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    assert_int_equal(fed_wire_block_encode(0, &b, buf, sizeof buf, &len), FED_ERR_INVAL);
}

/* ---- sealed frames ---- */

static void test_every_type_roundtrip(void **state)
{
    world *W = *state;
    float x[64];
    uint8_t vec[512];
    fed_codec c32 = {FED_CODEC_F32, 0};
    uint64_t seq = 1;

    for (int i = 0; i < 64; i++)
        x[i] = (float)i * 0.25f - 3;
    for (uint8_t t = 1; t <= FED_WIRE_TYPE_MAX; t++) {
        size_t vlen = 0, len;
        uint16_t codec = 0;
        fed_wire_block b;
        fed_wire_msg m;
        float y[64];

        if (t == FED_WIRE_MODEL || t == FED_WIRE_DELTA || t == FED_WIRE_SHARE) {
            assert_int_equal(fed_codec_encode(&c32, x, 64, NULL, vec, sizeof vec, &vlen), FED_OK);
            codec = FED_CODEC_F32;
        } else if (t == FED_WIRE_PEERS) { /* two entries' worth (the wire counts bytes) */
            memset(vec, 0, 2 * FED_WIRE_PEER_ENTRY_MIN);
            memcpy(vec, fed_crypto_arena_pubkey(W->a.arena), 32);
            vlen = 2 * FED_WIRE_PEER_ENTRY_MIN;
        }
        len = build(W, &W->a, &W->b, t, seq++, vec, vlen, codec);
        expect_open(W, W->frame, len, FED_OK, NULL);
        /* open again to inspect (a fresh sequence number) */
        len = build(W, &W->a, &W->b, t, seq++, vec, vlen, codec);
        assert_int_equal(fed_wire_open(W->b.w, W->frame, len, &m), FED_OK);
        sample_block(t, &b);
        assert_int_equal(m.hdr.type, t);
        assert_memory_equal(&m.block, &b, sizeof b);
        assert_int_equal(m.vector_len, vlen);
        assert_memory_equal(m.vector, vec, vlen);
        assert_memory_equal(m.hdr.sender, fed_crypto_arena_pubkey(W->a.arena), 32);
        if (codec) {
            assert_int_equal(fed_codec_decode(m.vector, m.vector_len, FED_CODEC_F32, y, 64),
                             FED_OK);
            assert_memory_equal(x, y, sizeof x);
        }
        /* What contributions keep lets an auditor check the sender later. */
        assert_int_equal(fed_crypto_verify(m.hdr.sender, m.header, FED_WIRE_HEADER_BYTES, m.payload,
                                           m.payload_len, m.sig),
                         FED_OK);
    }
}

static void test_frames_are_deterministic_per_seed(void **state)
{
    world *W = *state;
    uint8_t first[512];
    size_t len;

    fed_rng_seed(&W->rng, 1234);
    len = build(W, &W->a, &W->b, FED_WIRE_ACK, 77, NULL, 0, 0);
    memcpy(first, W->frame, len);
    fed_rng_seed(&W->rng, 1234);
    assert_int_equal(build(W, &W->a, &W->b, FED_WIRE_ACK, 77, NULL, 0, 0), len);
    assert_memory_equal(first, W->frame, len);
    fed_rng_seed(&W->rng, 1235);
    build(W, &W->a, &W->b, FED_WIRE_ACK, 77, NULL, 0, 0);
    assert_memory_not_equal(first, W->frame, len); /* the nonce came from the RNG */
}

/* ---- rejections, in check order ---- */

static void test_reject_sizes(void **state)
{
    world *W = *state;
    size_t len = build(W, &W->a, &W->b, FED_WIRE_ACK, 100, NULL, 0, 0);
    uint8_t *big = calloc(1, FED_WIRE_MAX_FRAME_DEFAULT + 1);

    expect_open(W, W->frame, len - 1, FED_ERR_FRAME_TRUNCATED, "rej_truncated");
    expect_open(W, W->frame, 100, FED_ERR_FRAME_TRUNCATED, "rej_truncated");
    expect_open(W, W->frame, 0, FED_ERR_FRAME_TRUNCATED, "rej_truncated");
    /* longer than its header says */
    expect_open(W, W->frame, len + 1, FED_ERR_FRAME_TOO_LARGE, "rej_too_large");
    /* over the protocol's frame limit, whatever the bytes */
    memcpy(big, W->frame, len);
    expect_open(W, big, FED_WIRE_MAX_FRAME_DEFAULT + 1, FED_ERR_FRAME_TOO_LARGE, "rej_too_large");
    /* a header claiming a payload over the limit */
    W->frame[FED_WIRE_OFF_LEN + 3] = 0x7f;
    expect_open(W, W->frame, len, FED_ERR_FRAME_TOO_LARGE, "rej_too_large");
    free(big);
}

static void test_reject_magic_version_type(void **state)
{
    world *W = *state;
    size_t len = build(W, &W->a, &W->b, FED_WIRE_ACK, 101, NULL, 0, 0);

    W->frame[0] = 'X';
    expect_open(W, W->frame, len, FED_ERR_FRAME_MAGIC, "rej_magic");
    W->frame[0] = 'F';
    W->frame[4] = 1; /* an older node's: it signed another digest */
    expect_open(W, W->frame, len, FED_ERR_FRAME_VERSION, "rej_version");
    W->frame[4] = 3;
    expect_open(W, W->frame, len, FED_ERR_FRAME_VERSION, "rej_version");
    W->frame[4] = FED_WIRE_VERSION;
    W->frame[FED_WIRE_OFF_TYPE] = 0x42;
    expect_open(W, W->frame, len, FED_ERR_FRAME_TYPE, "rej_type");
    W->frame[FED_WIRE_OFF_TYPE] = FED_WIRE_ACK;
    W->frame[FED_WIRE_OFF_FLAGS] = 0x80;
    expect_open(W, W->frame, len, FED_ERR_FRAME_TYPE, "rej_type");
    W->frame[FED_WIRE_OFF_FLAGS] = 0;
    expect_open(W, W->frame, len, FED_OK, NULL); /* nothing was reserved on the way */
}

static void test_reject_recipient_and_epochs(void **state)
{
    world *W = *state;
    size_t len;

    /* addressed to c, delivered to b */
    {
        fed_wire_hdr h = hdr_to(&W->a, &W->c, FED_WIRE_ACK, 1);
        fed_wire_block b;

        sample_block(FED_WIRE_ACK, &b);
        assert_int_equal(
            fed_wire_build(W->a.w, &h, &b, NULL, 0, W->frame, CAP, fed_rng_random, &W->rng, &len),
            FED_OK);
        expect_open(W, W->frame, len, FED_ERR_WRONG_RECIPIENT, "rej_wrong_recipient");
    }
    /* b restarts with a newer epoch: frames sent to the old one are refused */
    len = build(W, &W->a, &W->b, FED_WIRE_ACK, 200, NULL, 0, 0);
    fed_wire_set_epoch(W->b.w, EPOCH_B + 1);
    expect_open(W, W->frame, len, FED_ERR_OLD_EPOCH, "rej_old_epoch");
    /* an epoch b never had */
    len = build(W, &W->a, &W->b, FED_WIRE_ACK, 201, NULL, 0, 0);
    fed_wire_set_epoch(W->b.w, EPOCH_B);
    expect_open(W, W->frame, len, FED_ERR_WRONG_RECIPIENT, "rej_wrong_recipient");
    /* a HELLO may say 0: the sender cannot know our epoch yet */
    {
        fed_wire_hdr h = hdr_to(&W->a, &W->b, FED_WIRE_HELLO, 202);
        fed_wire_block b;

        h.recipient_epoch = 0;
        sample_block(FED_WIRE_HELLO, &b);
        assert_int_equal(
            fed_wire_build(W->a.w, &h, &b, NULL, 0, W->frame, CAP, fed_rng_random, &W->rng, &len),
            FED_OK);
        expect_open(W, W->frame, len, FED_OK, NULL);
        /* but no other type */
        h = hdr_to(&W->a, &W->b, FED_WIRE_NEXT, 203);
        h.recipient_epoch = 0;
        sample_block(FED_WIRE_NEXT, &b);
        assert_int_equal(
            fed_wire_build(W->a.w, &h, &b, NULL, 0, W->frame, CAP, fed_rng_random, &W->rng, &len),
            FED_OK);
        expect_open(W, W->frame, len, FED_ERR_OLD_EPOCH, "rej_old_epoch");
    }
}

static void test_reject_unknown_sender(void **state)
{
    world *W = *state;
    size_t len = build(W, &W->c, &W->b, FED_WIRE_HELLO, 1, NULL, 0, 0);

    expect_open(W, W->frame, len, FED_ERR_UNKNOWN_SENDER, "rej_unknown_sender");
    /* our own key reflected back at us is no member either */
    len = build(W, &W->a, &W->b, FED_WIRE_ACK, 300, NULL, 0, 0);
    memcpy(W->frame + FED_WIRE_OFF_SENDER, fed_crypto_arena_pubkey(W->b.arena), 32);
    expect_open(W, W->frame, len, FED_ERR_UNKNOWN_SENDER, "rej_unknown_sender");
}

static void test_reject_replay_and_sender_epoch(void **state)
{
    world *W = *state;
    uint8_t copy[512];
    size_t len = build(W, &W->a, &W->b, FED_WIRE_ACK, 400, NULL, 0, 0);

    memcpy(copy, W->frame, len);
    expect_open(W, W->frame, len, FED_OK, NULL);
    memcpy(W->frame, copy, len);
    expect_open(W, W->frame, len, FED_ERR_REPLAY, "rej_replay");
    assert_int_equal(fed_wire_peer_epoch(W->b.w, fed_crypto_arena_pubkey(W->a.arena)), EPOCH_A);
    /* a frame from an older epoch of a */
    fed_wire_set_epoch(W->a.w, EPOCH_A - 1);
    len = build(W, &W->a, &W->b, FED_WIRE_ACK, 401, NULL, 0, 0);
    expect_open(W, W->frame, len, FED_ERR_SENDER_EPOCH, "rej_sender_epoch");
    /* a restarts: its newer epoch replaces the window, sequences start over */
    fed_wire_set_epoch(W->a.w, EPOCH_A + 5);
    len = build(W, &W->a, &W->b, FED_WIRE_ACK, 1, NULL, 0, 0);
    expect_open(W, W->frame, len, FED_OK, NULL);
    assert_int_equal(fed_wire_peer_epoch(W->b.w, fed_crypto_arena_pubkey(W->a.arena)), EPOCH_A + 5);
    fed_wire_set_epoch(W->a.w, EPOCH_A);
    len = build(W, &W->a, &W->b, FED_WIRE_ACK, 402, NULL, 0, 0);
    expect_open(W, W->frame, len, FED_ERR_SENDER_EPOCH, "rej_sender_epoch");
    fed_wire_set_epoch(W->a.w, EPOCH_A + 5);
}

static void test_reject_tampering(void **state)
{
    world *W = *state;
    uint8_t copy[512];
    size_t len = build(W, &W->a, &W->b, FED_WIRE_DELTA, 500, NULL, 0, 0);

    memcpy(copy, W->frame, len);
    W->frame[FED_WIRE_OFF_ROUND] ^= 1; /* header is associated data */
    expect_open(W, W->frame, len, FED_ERR_AEAD, "rej_aead");
    memcpy(W->frame, copy, len);
    W->frame[FED_WIRE_OFF_NONCE + 3] ^= 1;
    expect_open(W, W->frame, len, FED_ERR_AEAD, "rej_aead");
    memcpy(W->frame, copy, len);
    W->frame[FED_WIRE_HEADER_BYTES + 5] ^= 0x10; /* ciphertext */
    expect_open(W, W->frame, len, FED_ERR_AEAD, "rej_aead");
    memcpy(W->frame, copy, len);
    W->frame[len - 1] ^= 1; /* tag */
    expect_open(W, W->frame, len, FED_ERR_AEAD, "rej_aead");
    /* each failure released the sequence: the genuine frame still opens */
    memcpy(W->frame, copy, len);
    expect_open(W, W->frame, len, FED_OK, NULL);
}

/* Seals payload as a with a signature made by signer, under a's real session
 * key with b: what an attacker holding the session key could produce. */
static size_t forge(world *W, fed_crypto_arena *signer, uint8_t type, uint64_t seq,
                    const uint8_t *payload, size_t plen)
{
    fed_wire_hdr h = hdr_to(&W->a, &W->b, type, seq);
    fed_crypto_session *s = NULL;
    uint8_t digest[64];
    uint8_t *p = W->frame + FED_WIRE_HEADER_BYTES;

    memcpy(h.sender, fed_crypto_arena_pubkey(W->a.arena), 32);
    h.payload_len = (uint32_t)plen;
    fed_rng_fill(&W->rng, h.nonce, 24);
    fed_wire_hdr_encode(&h, W->frame);
    memcpy(p, payload, plen);
    fed_crypto_payload_hash(p, plen, digest);
    fed_crypto_frame_digest(W->frame, FED_WIRE_HEADER_BYTES, digest, digest);
    assert_int_equal(fed_crypto_arena_sign(signer, digest, 64, p + plen), FED_OK);
    assert_int_equal(fed_crypto_session_get(W->a.arena, fed_crypto_arena_pubkey(W->b.arena), &s),
                     FED_OK);
    assert_int_equal(crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
                         p, p + plen + 64, NULL, p, plen + 64, W->frame, FED_WIRE_HEADER_BYTES,
                         NULL, h.nonce, fed_crypto_session_tx(s)),
                     0);
    fed_crypto_session_put(W->a.arena, s);
    return FED_WIRE_HEADER_BYTES + plen + FED_CRYPTO_SEAL_OVERHEAD;
}

static void test_reject_bad_signature(void **state)
{
    world *W = *state;
    uint8_t payload[16] = {0};
    size_t len;

    payload[0] = 1; /* a valid DELTA block: samples 1 */
    len = forge(W, W->c.arena, FED_WIRE_DELTA, 600, payload, sizeof payload);
    expect_open(W, W->frame, len, FED_ERR_SIGNATURE, "rej_signature");
    /* the same bytes signed by a itself pass: the forgery helper is honest */
    len = forge(W, W->a.arena, FED_WIRE_DELTA, 600, payload, sizeof payload);
    expect_open(W, W->frame, len, FED_OK, NULL);
}

static void test_reject_payload(void **state)
{
    world *W = *state;
    uint8_t payload[16] = {0};
    size_t len;

    payload[4] = 1; /* PEERS: a reserved byte set */
    len = forge(W, W->a.arena, FED_WIRE_PEERS, 700, payload, 8);
    expect_open(W, W->frame, len, FED_ERR_PAYLOAD, "rej_payload");
    payload[4] = 0;
    payload[0] = 3; /* PEERS says 3 entries, carries none */
    len = forge(W, W->a.arena, FED_WIRE_PEERS, 701, payload, 8);
    expect_open(W, W->frame, len, FED_ERR_PAYLOAD, "rej_payload");
    len = forge(W, W->a.arena, FED_WIRE_MODEL, 702, payload, 16); /* shorter than its block */
    expect_open(W, W->frame, len, FED_ERR_PAYLOAD, "rej_payload");
}

static void test_reject_nan_and_codec(void **state)
{
    /* The wire opens the frame; the vector's decoder refuses it and the
     * node reports that through the same counters. */
    world *W = *state;
    fed_codec c = {FED_CODEC_F32, 0};
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
    uint8_t vec[16 + 32];
    size_t vlen = 0, len;
    fed_wire_counters before;
    fed_wire_msg m;
    float nan = NAN;

    assert_int_equal(fed_codec_encode(&c, x, 8, NULL, vec, sizeof vec, &vlen), FED_OK);
    memcpy(vec + 16 + 4 * 3, &nan, 4);
    len = build(W, &W->a, &W->b, FED_WIRE_DELTA, 800, vec, vlen, FED_CODEC_F32);
    assert_int_equal(fed_wire_open(W->b.w, W->frame, len, &m), FED_OK);
    before = *fed_wire_get_counters(W->b.w);
    assert_int_equal(fed_codec_decode(m.vector, m.vector_len, m.hdr.codec, y, 8), FED_ERR_NAN);
    fed_wire_note_reject(W->b.w, &m.hdr, FED_ERR_NAN);
    assert_int_equal(fed_wire_get_counters(W->b.w)->rej_nan, before.rej_nan + 1);
    len = build(W, &W->a, &W->b, FED_WIRE_DELTA, 801, vec, vlen - 4, FED_CODEC_F32);
    assert_int_equal(fed_wire_open(W->b.w, W->frame, len, &m), FED_OK);
    assert_int_equal(fed_codec_decode(m.vector, m.vector_len, m.hdr.codec, y, 8), FED_ERR_CODEC);
    fed_wire_note_reject(W->b.w, &m.hdr, FED_ERR_CODEC);
    assert_int_equal(fed_wire_get_counters(W->b.w)->rej_codec, before.rej_codec + 1);
}

static void test_ticket_split(void **state)
{
    world *W = *state;
    fed_wire_ticket t1, t2;
    fed_wire_msg m;
    uint8_t copy[512];
    size_t len = build(W, &W->a, &W->b, FED_WIRE_NEXT, 900, NULL, 0, 0);

    memcpy(copy, W->frame, len);
    assert_int_equal(fed_wire_precheck(W->b.w, W->frame, len, &t1), FED_OK);
    /* while the first copy is opening, a second one is a replay */
    assert_int_equal(fed_wire_precheck(W->b.w, copy, len, &t2), FED_ERR_REPLAY);
    assert_int_equal(fed_wire_open_ticket(W->b.w, &t1, W->frame, len, &m), FED_OK);
    assert_int_equal(fed_wire_finish(W->b.w, &t1, FED_OK, &m), FED_OK);
    assert_int_equal(m.block.round_ref, 4);
    /* a failure reported by the caller releases the reservation */
    len = build(W, &W->a, &W->b, FED_WIRE_NEXT, 901, NULL, 0, 0);
    memcpy(copy, W->frame, len);
    assert_int_equal(fed_wire_precheck(W->b.w, W->frame, len, &t1), FED_OK);
    assert_int_equal(fed_wire_finish(W->b.w, &t1, FED_ERR_TIMEOUT, NULL), FED_ERR_TIMEOUT);
    expect_open(W, copy, len, FED_OK, NULL);
}

static void test_seal_limits(void **state)
{
    world *W = *state;
    fed_wire_hdr h = hdr_to(&W->a, &W->b, FED_WIRE_DELTA, 1);
    size_t len = 0;

    assert_int_equal(fed_wire_seal(W->a.w, &h, W->frame, CAP, FED_WIRE_MAX_FRAME_DEFAULT,
                                   fed_rng_random, &W->rng, &len),
                     FED_ERR_FRAME_TOO_LARGE);
    assert_int_equal(fed_wire_seal(W->a.w, &h, W->frame, 100, 16, fed_rng_random, &W->rng, &len),
                     FED_ERR_TOO_LARGE);
    h.flags = FED_WIRE_FLAG_STREAM; /* streams go through gossip/stream.h */
    assert_int_equal(fed_wire_seal(W->a.w, &h, W->frame, CAP, 16, fed_rng_random, &W->rng, &len),
                     FED_ERR_INVAL);
    h = hdr_to(&W->a, &W->a, FED_WIRE_DELTA, 1); /* to itself */
    assert_int_equal(fed_wire_seal(W->a.w, &h, W->frame, CAP, 16, fed_rng_random, &W->rng, &len),
                     FED_ERR_KEY);
}

static int vouched(void *ctx, const uint8_t pk[32]) { return memcmp(pk, ctx, 32) == 0; }

static void test_member_fn(void **state)
{
    world *W = *state;
    size_t len = build(W, &W->c, &W->b, FED_WIRE_HELLO, 2, NULL, 0, 0);

    fed_wire_set_member_fn(W->b.w, vouched, (void *)fed_crypto_arena_pubkey(W->c.arena));
    expect_open(W, W->frame, len, FED_OK, NULL);
    fed_wire_set_member_fn(W->b.w, NULL, NULL);
}

static void test_counter_names(void **state)
{
    (void)state;
    assert_int_equal(fed_wire_counter_count() * sizeof(uint64_t), sizeof(fed_wire_counters));
    assert_string_equal(fed_wire_counter_name(0), "sealed");
    assert_null(fed_wire_counter_name(fed_wire_counter_count()));
}

static void test_alloc_failures(void **state)
{
    world *W = *state;
    fed_crypto_arena *arena = NULL;
    fed_wire *w = NULL;
    fed_rng rng;

    fed_rng_seed(&rng, 9);
    assert_int_equal(fed_crypto_arena_new(NULL, &arena), FED_OK);
    assert_int_equal(fed_crypto_arena_generate(arena, fed_rng_random, &rng), FED_OK);
    for (unsigned long n = 1;; n++) {
        fed_err err;

        fed_alloc_fail_nth(n, 1);
        err = fed_wire_new(NULL, arena, W->allow, &w);
        fed_alloc_fail_nth(0, 0);
        if (err == FED_OK)
            break;
        assert_int_equal(err, FED_ERR_NOMEM);
        assert_null(w);
    }
    fed_wire_free(w);
    fed_crypto_arena_free(arena);
    /* The first frame from a peer grows b's replay table: fail it, then retry. */
    {
        node d;
        size_t len;
        uint8_t copy[512];

        node_open(W, &d, 4, 4000, NULL);
        assert_int_equal(fed_crypto_allow_add(W->allow, "d", fed_crypto_arena_pubkey(d.arena)),
                         FED_OK);
        len = build(W, &d, &W->b, FED_WIRE_HELLO, 1, NULL, 0, 0);
        memcpy(copy, W->frame, len);
        fed_alloc_fail_nth(1, 1);
        expect_open(W, W->frame, len, FED_ERR_NOMEM, "rej_other");
        fed_alloc_fail_nth(0, 0);
        expect_open(W, copy, len, FED_OK, NULL);
        node_close(&d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_header_roundtrip),
        cmocka_unit_test(test_blocks_roundtrip),
        cmocka_unit_test(test_blocks_rejected),
        cmocka_unit_test(test_every_type_roundtrip),
        cmocka_unit_test(test_frames_are_deterministic_per_seed),
        cmocka_unit_test(test_reject_sizes),
        cmocka_unit_test(test_reject_magic_version_type),
        cmocka_unit_test(test_reject_recipient_and_epochs),
        cmocka_unit_test(test_reject_unknown_sender),
        cmocka_unit_test(test_reject_replay_and_sender_epoch),
        cmocka_unit_test(test_reject_tampering),
        cmocka_unit_test(test_reject_bad_signature),
        cmocka_unit_test(test_reject_payload),
        cmocka_unit_test(test_reject_nan_and_codec),
        cmocka_unit_test(test_ticket_split),
        cmocka_unit_test(test_seal_limits),
        cmocka_unit_test(test_member_fn),
        cmocka_unit_test(test_counter_names),
        cmocka_unit_test(test_alloc_failures),
    };

    fed_log_set_level(FED_LOG_ERROR + 1);
    return cmocka_run_group_tests(tests, setup, teardown);
}
