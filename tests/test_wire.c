/* test_wire.c - gossip/wire: headers and typed blocks, sealed frames of every
 * type, and the receiver's checks: each bad frame is refused with its own
 * fed_err and bumps exactly its own counter. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "core/bytes.h"
#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "core/rng.h"
#include "model/model.h"
#include "crypto/arena_impl.h"
#include "gossip/wire.h"
#include "gossip/wire_hooks.h"
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
    case FED_WIRE_SLICE: b->step = 11; break;
    case FED_WIRE_PEERS: b->count = 2; break;
    case FED_WIRE_LEAVE: b->reason = 3; break;
    case FED_WIRE_CHUNK:
        b->stream_id = 0xfeedfacecafebeefULL;
        b->chunk_index = 9;
        break;
    case FED_WIRE_AR_ABORT:
        b->attempt = 2;
        b->count = 3;
        break;
    case FED_WIRE_AR_VERIFY:
        b->attempt = 1;
        b->in_row = 5;
        memset(b->result_hash, 0x5c, sizeof b->result_hash);
        break;
    case FED_WIRE_SA_KEYS:
    case FED_WIRE_SA_SHARES:
    case FED_WIRE_SA_MASKED:
    case FED_WIRE_SA_CONSIST:
    case FED_WIRE_SA_UNMASK:
        b->sa_try = type;
        b->sa_count = 1000u + type;
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

/* The last log line, captured while a test needs it. */
static struct {
    char last[512];
    char all[2048]; /* every line, each ending in a newline */
    int lines;
    fed_log_level level; /* the last line's */
} logged;

static void capture(void *ctx, fed_log_level level, const char *line)
{
    (void)ctx;
    size_t at = strlen(logged.all);

    logged.level = level;
    snprintf(logged.last, sizeof logged.last, "%s", line);
    snprintf(logged.all + at, sizeof logged.all - at, "%s\n", line);
    logged.lines++;
}

static void log_start(void)
{
    memset(&logged, 0, sizeof logged);
    fed_log_set_sink(capture, NULL);
    fed_log_set_level(FED_LOG_DEBUG);
}

static void log_stop(void)
{
    fed_log_set_sink(NULL, NULL);
    fed_log_set_level(FED_LOG_ERROR + 1);
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
    assert_memory_equal(buf, "FEDN\x04\x04\x01\x00", 8);
    assert_int_equal(buf[72], 0x08); /* little-endian */
    assert_int_equal(buf[128], 0xef);
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_OK);
    assert_memory_equal(&g, &h, sizeof h);
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf - 1, &g), FED_ERR_FRAME_TRUNCATED);
    buf[5] = 0;
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_ERR_FRAME_TYPE);
    buf[5] = FED_WIRE_TYPE_MAX + 1;
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_ERR_FRAME_TYPE);
    buf[5] = FED_WIRE_ACK; /* ACK takes no flags */
    assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g), FED_ERR_FRAME_TYPE);
    /* of secure aggregation's types only the masked input streams */
    for (uint8_t t = FED_WIRE_SA_KEYS; t <= FED_WIRE_SA_UNMASK; t++) {
        buf[5] = t;
        assert_int_equal(fed_wire_hdr_decode(buf, sizeof buf, &g),
                         t == FED_WIRE_SA_MASKED ? FED_OK : FED_ERR_FRAME_TYPE);
    }
    buf[5] = FED_WIRE_SA_MASKED;
    buf[6] = FED_WIRE_FLAG_PULL;
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

        if (!FED_WIRE_TYPE_KNOWN(t))
            continue;
        sample_block(t, &b);
        assert_int_equal(fed_wire_block_encode(t, &b, buf, sizeof buf, &len), FED_OK);
        assert_int_equal(len, fed_wire_block_size(t));
        assert_true(len <= FED_WIRE_BLOCK_MAX);
        assert_int_equal(fed_wire_block_decode(t, buf, len + 8, &g, &used), FED_OK);
        assert_int_equal(used, len);
        assert_memory_equal(&g, &b, sizeof b);
        /* cut by a byte: inside its last field, or inside S when it wrote none */
        assert_int_equal(fed_wire_block_decode(t, buf, len - 1, &g, &used),
                         len > (size_t)fed_wire_type_row(t)->fixed + FED_WIRE_FIELDS_LEN_BYTES
                             ? FED_ERR_FIELD_TRUNCATED
                             : FED_ERR_PAYLOAD);
        assert_int_equal(fed_wire_block_encode(t, &b, buf, len - 1, &len), FED_ERR_TOO_LARGE);
    }
}

/* The all-reduce pair, 17 and 18: known types, their blocks round-trip;
 * 16 and 19 are not known. */
static void test_ar_types(void **state)
{
    static const uint8_t types[] = {FED_WIRE_AR_ABORT, FED_WIRE_AR_VERIFY};

    (void)state;
    for (size_t i = 0; i < 2; i++) {
        uint8_t t = types[i], buf[64];
        fed_wire_block b, g;
        size_t len = 0, used = 0;

        sample_block(t, &b);
        assert_true(FED_WIRE_TYPE_KNOWN(t));
        assert_int_equal(fed_wire_block_encode(t, &b, buf, sizeof buf, &len), FED_OK);
        assert_int_equal(len, t == FED_WIRE_AR_ABORT ? 16 + 4 : 48 + 4); /* S = 0 */
        assert_int_equal(fed_wire_block_decode(t, buf, len, &g, &used), FED_OK);
        assert_memory_equal(&g, &b, sizeof b);
        assert_int_equal(fed_wire_block_decode(t, buf, len - 1, &g, &used), FED_ERR_PAYLOAD);
        if (t == FED_WIRE_AR_ABORT) {
            buf[12] = 1; /* reserved */
            assert_int_equal(fed_wire_block_decode(t, buf, len, &g, &used), FED_ERR_PAYLOAD);
        } else {
            memset(buf + 8, 0, 8); /* a row of no members */
            assert_int_equal(fed_wire_block_decode(t, buf, len, &g, &used), FED_ERR_PAYLOAD);
        }
    }
    assert_false(FED_WIRE_TYPE_KNOWN(16));
    assert_false(FED_WIRE_TYPE_KNOWN(19));
    assert_string_equal(fed_wire_type_name(16), "?");
    assert_string_equal(fed_wire_type_name(FED_WIRE_SA_UNMASK), "SA_UNMASK");
    assert_string_equal(fed_wire_type_name(FED_WIRE_AR_VERIFY), "AR_VERIFY");
}

static void expect_block_bad_as(uint8_t type, void (*spoil)(uint8_t *buf), fed_err want)
{
    fed_wire_block b, g;
    uint8_t buf[FED_WIRE_BLOCK_MAX];
    size_t len = 0, used = 0;

    sample_block(type, &b);
    assert_int_equal(fed_wire_block_encode(type, &b, buf, sizeof buf, &len), FED_OK);
    spoil(buf);
    assert_int_equal(fed_wire_block_decode(type, buf, len, &g, &used), want);
}

static void expect_block_bad(uint8_t type, void (*spoil)(uint8_t *buf))
{
    expect_block_bad_as(type, spoil, FED_ERR_PAYLOAD);
}

static void spoil_sa_reserved(uint8_t *b) { b[12] = 1; }

/* Secure aggregation's blocks: reserved bytes refused; MODEL field 12
 * back as it went when on, marked required, and all zero when off. */
static void test_secagg_blocks(void **state)
{
    fed_wire_block b, g;
    uint8_t buf[FED_WIRE_BLOCK_MAX + 64];
    size_t len = 0, used = 0, at;

    (void)state;
    for (uint8_t t = FED_WIRE_SA_KEYS; t <= FED_WIRE_SA_UNMASK; t++)
        expect_block_bad(t, spoil_sa_reserved);
    sample_block(FED_WIRE_MODEL, &b);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    at = len - 36; /* field 12's head */
    assert_memory_equal(buf + at, "\x0c\x00\x00\x00\x1c\x00\x00\x00\x00\x00\x00\x00", 12);
    b.settings.sa_on = 1;
    b.settings.sa_try = 2;
    b.settings.sa_bits = 20;
    b.settings.sa_range = 4;
    b.settings.sa_clip = 1.5f;
    b.settings.sa_max_weight = 1000;
    b.settings.sa_dropout = 0.1f;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES);
    assert_memory_equal(buf + at, "\x0c\x00\x01\x00\x1c\x00\x00\x00\x01\x00\x00\x00", 12);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_memory_equal(&g, &b, sizeof b);
    /* out of range: refused */
    b.settings.sa_bits = 33;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    b.settings.sa_bits = 20;
    b.settings.sa_dropout = 1;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    /* values without "on": refused */
    b.settings.sa_dropout = 0.1f;
    b.settings.sa_on = 0;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
}

static void spoil_hello_role(uint8_t *b) { b[0] = 9; }
static void spoil_hello_reserved(uint8_t *b) { b[3] = 1; }
/* MODEL block offsets as this node writes it (wire.h): samples, S, then
 * each field's head (8) and value in tag order. */
#define M_SPEC 20      /* spec value (128) */
#define M_EPOCHS 148   /* epochs field head */
#define M_LR 211       /* lr value */
#define M_MU 223       /* mu value */
#define M_MOM_HEAD 243 /* momentum field head */
#define M_MOM 251      /* momentum value */
static void spoil_model_spec(uint8_t *b) { memset(b + M_SPEC, 'a', 128); } /* no NUL */
static void spoil_model_spec_char(uint8_t *b) { b[M_SPEC + 1] = '\n'; }
static void spoil_model_spec_tail(uint8_t *b) { b[M_SPEC + 127] = 'x'; } /* after the NUL */
static void spoil_model_lr(uint8_t *b) { memset(b + M_LR, 0, 4); }
static void spoil_model_mu(uint8_t *b) { memset(b + M_MU, 0xff, 4); } /* NaN */
static void spoil_model_momentum(uint8_t *b) /* 1.0: momentum must stay below 1 */
{
    b[M_MOM] = 0x00, b[M_MOM + 1] = 0x00, b[M_MOM + 2] = 0x80, b[M_MOM + 3] = 0x3f;
}
static void spoil_model_flags(uint8_t *b) { b[M_EPOCHS + 2] = 0x02; } /* an unknown flag */
static void spoil_model_tag_zero(uint8_t *b) { b[M_EPOCHS] = 0; }
static void spoil_model_order(uint8_t *b) { b[M_EPOCHS] = 1; } /* the spec's tag again */
static void spoil_model_known_len(uint8_t *b) { b[M_EPOCHS + 4] = 3; } /* epochs in 3 bytes */
static void spoil_model_overlong(uint8_t *b) { b[M_MOM_HEAD + 4] = 5; } /* over its 4 */
static void spoil_model_settings_len(uint8_t *b) { b[8] = 0xff; } /* S past the block */
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
    expect_block_bad(FED_WIRE_MODEL, spoil_model_spec_tail);
    expect_block_bad(FED_WIRE_MODEL, spoil_model_flags);
    expect_block_bad_as(FED_WIRE_MODEL, spoil_model_tag_zero, FED_ERR_FIELD_ORDER);
    expect_block_bad_as(FED_WIRE_MODEL, spoil_model_order, FED_ERR_FIELD_ORDER);
    expect_block_bad_as(FED_WIRE_MODEL, spoil_model_known_len, FED_ERR_FIELD_LENGTH);
    expect_block_bad_as(FED_WIRE_MODEL, spoil_model_overlong, FED_ERR_FIELD_LENGTH);
    expect_block_bad_as(FED_WIRE_MODEL, spoil_model_settings_len, FED_ERR_FIELD_TRUNCATED);
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

/* ---- MODEL settings fields ---- */

/* The sample MODEL block as this node writes it; returns its length. */
static size_t model_bytes(uint8_t *buf, size_t cap)
{
    fed_wire_block b;
    size_t len = 0;

    sample_block(FED_WIRE_MODEL, &b);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, cap, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES);
    return len;
}

/* Inserts n bytes at offset at of a block of len bytes whose fields' length
 * S is at offset f (its fixed part's size), counting them in S; returns the
 * new length. */
static size_t splice_in(uint8_t *buf, size_t f, size_t len, size_t at, const uint8_t *ins,
                        size_t n)
{
    uint32_t S = (uint32_t)buf[f] | (uint32_t)buf[f + 1] << 8 | (uint32_t)buf[f + 2] << 16 |
                 (uint32_t)buf[f + 3] << 24;

    memmove(buf + at + n, buf + at, len - at);
    memcpy(buf + at, ins, n);
    S += (uint32_t)n;
    buf[f] = (uint8_t)S, buf[f + 1] = (uint8_t)(S >> 8), buf[f + 2] = (uint8_t)(S >> 16);
    buf[f + 3] = (uint8_t)(S >> 24);
    return len + n;
}

/* The same in a MODEL block (S at 8, after the samples). */
static size_t splice(uint8_t *buf, size_t len, size_t at, const uint8_t *ins, size_t n)
{
    return splice_in(buf, 8, len, at, ins, n);
}

/* A field's bytes: tag, flags, length, value (n <= 8). */
static size_t field(uint8_t *out, uint16_t tag, uint16_t flags, const char *val, uint32_t n)
{
    out[0] = (uint8_t)tag, out[1] = (uint8_t)(tag >> 8);
    out[2] = (uint8_t)flags, out[3] = (uint8_t)(flags >> 8);
    out[4] = (uint8_t)n, out[5] = (uint8_t)(n >> 8), out[6] = (uint8_t)(n >> 16);
    out[7] = (uint8_t)(n >> 24);
    memcpy(out + 8, val, n);
    return 8 + n;
}

static void test_settings_fields_roundtrip(void **state)
{
    fed_wire_block b, g;
    uint8_t buf[FED_WIRE_BLOCK_MAX + 64];
    size_t len = 0, used = 0;

    (void)state;
    /* every field, each value distinct, back as it went */
    memset(&b, 0, sizeof b);
    b.samples = 0x0102030405060708ULL;
    memset(b.settings.spec, 'x', FED_WIRE_SPEC_BYTES - 1); /* the longest spec */
    b.settings.local_epochs = 0x11223344;
    b.settings.batch = 0x55667788;
    b.settings.optimizer = 0x9a;
    b.settings.codec = 0xbcde;
    b.settings.fraction = 0.125f;
    b.settings.lr = 3.5f;
    b.settings.mu = 0.25f;
    b.settings.deadline_ms = 0xf0e0d0c0b0a09080ULL;
    b.settings.momentum = 0.75f;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(used, len);
    assert_memory_equal(&g, &b, sizeof b);
    /* the layout of wire.h: S, then the spec field first, required */
    assert_int_equal(buf[8] | buf[9] << 8, FED_WIRE_MODEL_BLOCK_BYTES - 12);
    assert_memory_equal(buf + 12, "\x01\x00\x01\x00\x80\x00\x00\x00", 8);
    assert_memory_equal(buf + M_EPOCHS, "\x02\x00\x01\x00\x04\x00\x00\x00\x44\x33\x22\x11", 12);
    assert_memory_equal(buf + M_MOM_HEAD, "\x0a\x00\x01\x00\x04\x00\x00\x00", 8);
    /* a spec sent in its own length (no padding) reads the same */
    {
        uint8_t s2[FED_WIRE_BLOCK_MAX];
        size_t l2 = model_bytes(s2, sizeof s2);
        fed_wire_block e;

        sample_block(FED_WIRE_MODEL, &e);
        /* "mlp:128,64" + NUL = 11 bytes: drop 117 bytes of padding */
        memmove(s2 + M_SPEC + 11, s2 + M_SPEC + 128, l2 - M_SPEC - 128);
        l2 -= 117;
        s2[16] = 11;
        s2[8] = (uint8_t)(FED_WIRE_MODEL_BLOCK_BYTES - 12 - 117);
        s2[9] = (uint8_t)((FED_WIRE_MODEL_BLOCK_BYTES - 12 - 117) >> 8);
        assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, s2, l2 + 5, &g, &used), FED_OK);
        assert_int_equal(used, l2);
        assert_memory_equal(&g, &e, sizeof e);
        s2[M_SPEC + 10] = 'x'; /* no NUL left in its 11 bytes */
        assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, s2, l2, &g, &used),
                         FED_ERR_PAYLOAD);
    }
}

/* The tensors' paths (MODEL field 14) and a DELTA's or masked input's
 * segments (field 2):
 * written only when set, at their value's length, marked required; back
 * as they went; bad values refused on encoding and on decoding. */
static void test_paths_and_segments_fields(void **state)
{
    fed_wire_block b, g;
    uint8_t buf[FED_WIRE_BLOCK_MAX + 64];
    size_t len = 0, used = 0, at;
    const char *globs = "fc3.*,conv1.bias";

    (void)state;
    sample_block(FED_WIRE_MODEL, &b);
    b.settings.paths_on = 1;
    b.settings.paths_flags = FED_WIRE_PATHS_LOCAL_BN;
    strcpy(b.settings.local_layers, globs);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES + 8 + 8 + strlen(globs));
    at = FED_WIRE_MODEL_BLOCK_BYTES; /* after every fixed-length field */
    assert_int_equal(fed_get_u16le(buf + at), FED_WIRE_SET_PATHS);
    assert_int_equal(fed_get_u16le(buf + at + 2), FED_WIRE_FIELD_REQUIRED);
    assert_int_equal(fed_get_u32le(buf + at + 4), 8 + strlen(globs));
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(used, len);
    assert_memory_equal(&g, &b, sizeof b);
    /* secure: the statistics' range rides along, and must be > 0 then */
    b.settings.sa_on = 1;
    b.settings.sa_bits = 20;
    b.settings.sa_range = 4;
    b.settings.sa_max_weight = 1000;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    b.settings.sa_stats_range = 64;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_true(g.settings.sa_stats_range == 64);
    /* a space in the globs, an unknown flag, a range without secagg */
    strcpy(b.settings.local_layers, "fc3 .*");
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    strcpy(b.settings.local_layers, globs);
    b.settings.paths_flags = 0x10;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    /* a strategy's extra segment: FedNova's or SCAFFOLD's, never both */
    b.settings.paths_flags = FED_WIRE_PATHS_FEDNOVA | FED_WIRE_PATHS_SCAFFOLD;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    /* SCAFFOLD's flag and its field 17 (which rounds were void) go together */
    b.settings.paths_flags = FED_WIRE_PATHS_SCAFFOLD;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    b.settings.scaffold_on = 1;
    b.settings.scaffold_void = 0x8000000000000005ull;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(g.settings.paths_flags, FED_WIRE_PATHS_SCAFFOLD);
    assert_true(g.settings.scaffold_on && g.settings.scaffold_void == 0x8000000000000005ull);
    b.settings.paths_flags = 0;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    b.settings.scaffold_on = 0;
    b.settings.scaffold_void = 0;
    b.settings.sa_on = 0;
    b.settings.sa_bits = 0;
    b.settings.sa_range = b.settings.sa_max_weight = 0;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    b.settings.sa_stats_range = 0;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    buf[len - 1] = ' '; /* as received: a space in its globs */
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used),
                     FED_ERR_PAYLOAD);

    /* DELTA: two segments, required, back as they went */
    sample_block(FED_WIRE_DELTA, &b);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_DELTA, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, fed_wire_block_size(FED_WIRE_DELTA)); /* none: as before */
    b.seg_count = 2;
    b.seg_len[0] = 12544;
    b.seg_len[1] = 16;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_DELTA, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, fed_wire_block_size(FED_WIRE_DELTA) + 8 + 4 + 16);
    at = fed_wire_block_size(FED_WIRE_DELTA);
    assert_int_equal(fed_get_u16le(buf + at), FED_WIRE_FIELD_SEGMENTS);
    assert_int_equal(fed_get_u16le(buf + at + 2), FED_WIRE_FIELD_REQUIRED);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len, &g, &used), FED_OK);
    assert_memory_equal(&g, &b, sizeof b);
    /* a count that is not the field's length, or none */
    fed_put_u32le(buf + at + 8, 3);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len, &g, &used),
                     FED_ERR_PAYLOAD);
    fed_put_u32le(buf + at + 8, 2);
    fed_put_u32le(buf + at + 16, 7); /* segment 0's rule: no such rule */
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len, &g, &used),
                     FED_ERR_PAYLOAD);
    b.seg_rule[1] = 3;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_DELTA, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    b.seg_rule[1] = 0;
    b.seg_count = FED_WIRE_SEGMENTS_MAX + 1;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_DELTA, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);

    /* SA_MASKED: the same field, its weight word a SUM segment last; no
       other stage message takes it */
    sample_block(FED_WIRE_SA_MASKED, &b);
    b.seg_count = 3;
    b.seg_len[0] = 12544;
    b.seg_len[1] = 16;
    b.seg_len[2] = 1;
    b.seg_rule[2] = 2;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_SA_MASKED, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, fed_wire_block_size(FED_WIRE_SA_MASKED) + 8 + 4 + 24);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_SA_MASKED, buf, len, &g, &used), FED_OK);
    assert_memory_equal(&g, &b, sizeof b);
    sample_block(FED_WIRE_SA_KEYS, &g);
    g.seg_count = 1;
    g.seg_len[0] = 5;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_SA_KEYS, &g, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
}

/* The DP-SGD field (tag 11): marked required only when it requires DP-SGD,
 * its values back as they went, its absence (an older sender) no
 * requirement, and bad values refused. */
static void test_settings_dp_field(void **state)
{
    fed_wire_block b, g;
    uint8_t buf[FED_WIRE_BLOCK_MAX + 64];
    size_t len = 0, used = 0, at;

    (void)state;
    sample_block(FED_WIRE_MODEL, &b);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    at = len - 20 - 36; /* its head (secure aggregation's field follows) */
    assert_memory_equal(buf + at, "\x0b\x00\x00\x00\x0c\x00\x00\x00", 8);
    b.settings.dp_flags = FED_WIRE_DP_REQUIRED;
    b.settings.dp_clip = 1.5f;
    b.settings.dp_noise = 0.75f;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES);
    assert_memory_equal(buf + at, "\x0b\x00\x01\x00\x0c\x00\x00\x00\x01\x00\x00\x00", 12);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_memory_equal(&g, &b, sizeof b);
    /* a block without it nor field 12 (S 56 shorter): decodes, nothing required */
    buf[8] = (uint8_t)(len - 12 - 56);
    buf[9] = (uint8_t)((len - 12 - 56) >> 8);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(used, len - 56);
    assert_int_equal(g.settings.dp_flags, 0);
    /* required with a clip of 0, or values without the flag: refused */
    b.settings.dp_clip = 0;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    b.settings.dp_flags = 0;
    b.settings.dp_clip = 1;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
}

/* Field 14, shared statistics: absent by default; the pass (16 bytes) and
 * the statistics to apply (16 + 24 a column) round-trip, required, and so
 * does the DP pass (16 + 8 + 16 a column: noise, bounds); a std
 * of 0, a missing rate over 1, a NaN mean, a length unlike its mode, or no
 * columns: refused. */
static void test_settings_stats_field(void **state)
{
    fed_wire_block b, g;
    uint8_t buf[FED_WIRE_BLOCK_MAX + 64], st[48];
    size_t len = 0, used = 0;

    (void)state;
    sample_block(FED_WIRE_MODEL, &b);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES);
    b.settings.stats_mode = FED_WIRE_STATS_PASS;
    b.settings.stats_cols = 30;
    b.settings.stats_min_count = 5;
    assert_int_equal(fed_wire_block_bytes(FED_WIRE_MODEL, &b), FED_WIRE_MODEL_BLOCK_BYTES + 24);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES + 24);
    assert_memory_equal(buf + FED_WIRE_MODEL_BLOCK_BYTES, "\x0e\x00\x01\x00\x10\x00\x00\x00", 8);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(g.settings.stats_mode, FED_WIRE_STATS_PASS);
    assert_int_equal(g.settings.stats_cols, 30);
    assert_int_equal(g.settings.stats_min_count, 5);
    assert_null(g.settings.stats);
    /* two columns to apply */
    fed_put_f64le(st, 1e6);
    fed_put_f64le(st + 8, 0.5);
    fed_put_f64le(st + 16, 0.0);
    fed_put_f64le(st + 24, -3.25);
    fed_put_f64le(st + 32, 1e-3);
    fed_put_f64le(st + 40, 0.125);
    b.settings.stats_mode = FED_WIRE_STATS_APPLY;
    b.settings.stats_cols = 2;
    b.settings.stats_min_count = 0;
    b.settings.stats = st;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES + 24 + 48);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(g.settings.stats_mode, FED_WIRE_STATS_APPLY);
    assert_non_null(g.settings.stats);
    assert_memory_equal(g.settings.stats, st, sizeof st);
    /* a std of 0, a missing rate over 1 (or a NaN mean): refused on both sides */
    fed_put_f64le(st + 32, 0.0);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    fed_put_f64le(st + 32, 1e-3);
    fed_put_f64le(st + 40, 1.5);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    fed_put_f64le(st + 40, 0.125);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    fed_put_f64le(buf + len - 48, NAN);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_ERR_PAYLOAD);
    /* the columns say 3, the field holds 2 */
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    fed_put_u32le(buf + len - 48 - 12, 3);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_ERR_PAYLOAD);
    /* no columns */
    b.settings.stats_mode = FED_WIRE_STATS_PASS;
    b.settings.stats_cols = 0;
    b.settings.stats = NULL;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    /* the DP pass: noise and two columns' bounds (16 + 8 + 32 bytes) */
    fed_put_f64le(st, -10);
    fed_put_f64le(st + 8, 10);
    fed_put_f64le(st + 16, 143.5);
    fed_put_f64le(st + 24, 2501);
    b.settings.stats_cols = 2;
    b.settings.stats_noise = 4;
    b.settings.stats_bounds = st;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES + 8 + 56);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(g.settings.stats_mode, FED_WIRE_STATS_PASS);
    assert_true(g.settings.stats_noise == 4);
    assert_null(g.settings.stats);
    assert_non_null(g.settings.stats_bounds);
    assert_memory_equal(g.settings.stats_bounds, st, 32);
    /* LO not under HI, a bound past 2^30, no noise with bounds: refused */
    fed_put_f64le(buf + len - 16, 2501);
    fed_put_f64le(buf + len - 8, 143.5);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_ERR_PAYLOAD);
    fed_put_f64le(st + 24, 2e9);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    fed_put_f64le(st + 24, 2501);
    b.settings.stats_noise = 0;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
}

/* Field 15, the model's declared input: written only when declared (24
 * bytes, optional), back as it went; a count of 0 among others, or past
 * FED_WIRE_INPUT_MAX, refused; a block without it decodes with none. */
static void test_settings_input(void **state)
{
    fed_wire_block b, g;
    uint8_t buf[FED_WIRE_BLOCK_MAX + 64];
    size_t len = 0, used = 0;
    const uint32_t in[4] = {3, 32, 32, 2};

    (void)state;
    sample_block(FED_WIRE_MODEL, &b);
    memcpy(b.settings.input, in, sizeof in);
    assert_int_equal(fed_wire_block_bytes(FED_WIRE_MODEL, &b), FED_WIRE_MODEL_BLOCK_BYTES + 24);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES + 24);
    /* tag 15, optional, 16 bytes: C, H, W, classes */
    assert_memory_equal(buf + len - 24, "\x0f\x00\x00\x00\x10\x00\x00\x00\x03\x00\x00\x00"
                                        "\x20\x00\x00\x00\x20\x00\x00\x00\x02\x00\x00\x00", 24);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(used, len);
    assert_memory_equal(g.settings.input, in, sizeof in);
    /* a height of 0 beside the others: refused */
    buf[len - 12] = 0;
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_ERR_PAYLOAD);
    /* classes past the bound: refused */
    buf[len - 12] = 32;
    buf[len - 1] = 2; /* 2^25 + 2 */
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_ERR_PAYLOAD);
    /* none declared: not written, none read */
    memset(b.settings.input, 0, sizeof b.settings.input);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(g.settings.input[3], 0);
}

/* Field 17, site evaluation: written only with --eval-every (16 bytes,
 * required), after field 15, back as it went; every 0 rounds, or no
 * class, refused; a block without it decodes with none. */
static void test_settings_site_eval(void **state)
{
    fed_wire_block b, g;
    uint8_t buf[FED_WIRE_BLOCK_MAX + 64];
    size_t len = 0, used = 0;
    const uint32_t in[4] = {1, 1, 4, 2};

    (void)state;
    sample_block(FED_WIRE_MODEL, &b);
    memcpy(b.settings.input, in, sizeof in);
    b.settings.eval_every = 3;
    b.settings.eval_classes = 2;
    assert_int_equal(fed_wire_block_bytes(FED_WIRE_MODEL, &b), FED_WIRE_MODEL_BLOCK_BYTES + 24 + 16);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES + 24 + 16);
    assert_memory_equal(buf + len - 16, "\x11\x00\x01\x00\x08\x00\x00\x00\x03\x00\x00\x00"
                                        "\x02\x00\x00\x00", 16);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(used, len);
    assert_int_equal(g.settings.eval_every, 3);
    assert_int_equal(g.settings.eval_classes, 2);
    buf[len - 8] = 0; /* every 0 rounds */
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_ERR_PAYLOAD);
    buf[len - 8] = 3;
    buf[len - 4] = 0; /* no class */
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_ERR_PAYLOAD);
    b.settings.eval_every = 0;
    b.settings.eval_classes = 0;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES + 24);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(g.settings.eval_every, 0);
}

static void test_settings_unknown_fields(void **state)
{
    fed_wire_block b, g;
    uint8_t buf[FED_WIRE_BLOCK_MAX + 64], f[32];
    size_t len, n, used = 0;

    (void)state;
    sample_block(FED_WIRE_MODEL, &b);
    /* unknown, not required, between known ones and at the end: skipped */
    len = model_bytes(buf, sizeof buf);
    n = field(f, 31, 0, "abc", 3);
    len = splice(buf, len, len, f, n);
    n = field(f, 0x7fff, 0, "", 0);
    len = splice(buf, len, len, f, n);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len + 16, &g, &used), FED_OK);
    assert_int_equal(used, len); /* what follows starts after the unknown fields */
    assert_memory_equal(&g, &b, sizeof b);
    /* the same field marked required: refused, and its tag said */
    len = model_bytes(buf, sizeof buf);
    n = field(f, 31, FED_WIRE_FIELD_REQUIRED, "abc", 3);
    len = splice(buf, len, len, f, n);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used),
                     FED_ERR_FIELD_REQUIRED);
    assert_int_equal(g.refused_tag, 31);
    assert_int_equal(used, 0);
}

/* Field 19, the knobs: written only when one is set, required, each knob
 * an 8-byte entry marked required; back as they went; an unknown optional
 * knob skipped, an unknown required one refused with the field's tag, a
 * bad value or a repeated id refused. */
static void test_settings_knobs_field(void **state)
{
    fed_wire_block b, g;
    uint8_t buf[FED_WIRE_BLOCK_MAX + 64], f[48];
    size_t len = 0, used = 0, at = FED_WIRE_MODEL_BLOCK_BYTES, n;

    (void)state;
    sample_block(FED_WIRE_MODEL, &b);
    b.settings.weight_decay = 1e-5f;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES + 8 + 8);
    assert_int_equal(fed_get_u16le(buf + at), FED_WIRE_SET_KNOBS);
    assert_int_equal(fed_get_u16le(buf + at + 2), FED_WIRE_FIELD_REQUIRED);
    assert_int_equal(fed_get_u32le(buf + at + 4), 8);
    assert_int_equal(fed_get_u16le(buf + at + 8), FED_WIRE_KNOB_WEIGHT_DECAY);
    assert_int_equal(fed_get_u16le(buf + at + 10), FED_WIRE_KNOB_REQUIRED);
    assert_true(fed_get_f32le(buf + at + 12) == 1e-5f);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(used, len);
    assert_memory_equal(&g, &b, sizeof b);
    b.settings.input_scale = 1;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES + 8 + 16);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_memory_equal(&g, &b, sizeof b);
    b.settings.ditto_lambda = 0.1f; /* Ditto's lambda, knob 3 */
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES + 8 + 24);
    assert_int_equal(fed_get_u16le(buf + at + 24), FED_WIRE_KNOB_DITTO);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_memory_equal(&g, &b, sizeof b);
    b.settings.ditto_lambda = 0;
    /* bad values refused on encoding */
    b.settings.input_scale = 2;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    b.settings.input_scale = 0;
    b.settings.weight_decay = -1e-3f;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    b.settings.weight_decay = 1e-5f;
    /* knobs a later node knows: one optional, skipped; one required, refused */
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    memcpy(f, "\x09\x00\x00\x00\x01\x02\x03\x04", 8);
    len = splice(buf, len, len, f, 8);
    fed_put_u32le(buf + at + 4, 16);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_memory_equal(&g, &b, sizeof b);
    buf[len - 6] = (uint8_t)FED_WIRE_KNOB_REQUIRED;
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used),
                     FED_ERR_FIELD_REQUIRED);
    assert_int_equal(g.refused_tag, FED_WIRE_SET_KNOBS);
    /* an id again, a decay of 0 sent, a length not of whole entries */
    memcpy(f, "\x01\x00\x01\x00\x00\x00\x00\x00\x01\x00\x01\x00\x00\x00\x80\x3f", 16);
    n = field(f + 16, FED_WIRE_SET_KNOBS, FED_WIRE_FIELD_REQUIRED, (const char *)f + 8, 8);
    for (int k = 0; k < 3; k++) {
        sample_block(FED_WIRE_MODEL, &b);
        assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                         FED_OK);
        len = splice(buf, len, len, f + 16, n); /* weight decay 1.0: ok */
        if (k == 0) {
            assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
            assert_true(g.settings.weight_decay == 1.0f);
            len = splice(buf, len, at + 8, f, 8); /* id 1 twice */
            fed_put_u32le(buf + at + 4, 16);
        } else if (k == 1) {
            memset(buf + at + 12, 0, 4); /* 0 is left out, never sent */
        } else {
            len = splice(buf, len, len, f, 4);
            fed_put_u32le(buf + at + 4, 12);
        }
        assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used),
                         FED_ERR_PAYLOAD);
    }
}

static void test_settings_malformed(void **state)
{
    fed_wire_block g;
    uint8_t buf[FED_WIRE_BLOCK_MAX + 64], f[32];
    size_t len, n, used = 0;

    (void)state;
    /* truncated: the block shorter than 12 (fixed part and S), or than
       12 + S: cut inside a field */
    len = model_bytes(buf, sizeof buf);
    for (size_t cut = 0; cut < len; cut += 7)
        assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, cut, &g, &used),
                         cut < 12 ? FED_ERR_PAYLOAD : FED_ERR_FIELD_TRUNCATED);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len - 1, &g, &used),
                     FED_ERR_FIELD_TRUNCATED);
    /* a truncated field head at the end of S */
    n = field(f, 31, 0, "", 0);
    len = splice(buf, len, len, f, 4);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used),
                     FED_ERR_FIELD_TRUNCATED);
    /* an unknown field's length past S (overlong) */
    len = model_bytes(buf, sizeof buf);
    n = field(f, 31, 0, "abcd", 4);
    f[4] = 5;
    len = splice(buf, len, len, f, n);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len + 8, &g, &used),
                     FED_ERR_FIELD_TRUNCATED);
    /* a known field twice (epochs again right after itself) */
    len = model_bytes(buf, sizeof buf);
    memcpy(f, buf + M_EPOCHS, 12);
    len = splice(buf, len, M_EPOCHS + 12, f, 12);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used),
                     FED_ERR_FIELD_ORDER);
    /* an unknown field twice */
    len = model_bytes(buf, sizeof buf);
    n = field(f, 31, 0, "ab", 2);
    len = splice(buf, len, len, f, n);
    len = splice(buf, len, len, f, n);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used),
                     FED_ERR_FIELD_ORDER);
    /* out of tag order */
    len = model_bytes(buf, sizeof buf);
    n = field(f, 31, 0, "ab", 2);
    len = splice(buf, len, M_EPOCHS, f, n);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used),
                     FED_ERR_FIELD_ORDER);
    /* a known field of another length (the optimizer in 2 bytes) */
    len = model_bytes(buf, sizeof buf);
    len = splice(buf, len, 181, (const uint8_t *)"", 1);
    buf[172 + 4] = 2;
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used),
                     FED_ERR_FIELD_LENGTH);
    /* a field the type must have, missing (momentum, cut out whole) */
    len = model_bytes(buf, sizeof buf);
    memmove(buf + M_MOM_HEAD, buf + M_MOM_HEAD + 12, len - M_MOM_HEAD - 12);
    buf[8] = (uint8_t)(buf[8] - 12);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len - 12, &g, &used),
                     FED_ERR_FIELD_MISSING);
    /* S over FED_WIRE_SETTINGS_MAX, even with the bytes there */
    {
        static uint8_t big[12 + FED_WIRE_SETTINGS_MAX + 16];
        uint32_t S = FED_WIRE_SETTINGS_MAX + 4;

        len = model_bytes(big, sizeof big);
        big[len] = 31; /* an unknown, optional field filling the rest */
        big[len + 4] = (uint8_t)(S - (len - 12) - 8);
        big[len + 5] = (uint8_t)((S - (len - 12) - 8) >> 8);
        big[8] = (uint8_t)S, big[9] = (uint8_t)(S >> 8);
        assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, big, 12 + S, &g, &used),
                         FED_ERR_FIELD_LENGTH);
        S -= 4; /* at the limit: taken */
        big[len + 4] = (uint8_t)(S - (len - 12) - 8);
        big[len + 5] = (uint8_t)((S - (len - 12) - 8) >> 8);
        big[8] = (uint8_t)S, big[9] = (uint8_t)(S >> 8);
        assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, big, 12 + S, &g, &used), FED_OK);
        assert_int_equal(used, 12 + FED_WIRE_SETTINGS_MAX);
    }
}

/* A graph longer than a spec travels whole in field 13, its id in field 1:
 * the block's size, a round trip (the graph a view into the block), and
 * every refusal of a graph as untrusted input. */
static void test_settings_graph(void **state)
{
    static char graph[FED_WIRE_GRAPH_MAX + 2];
    static uint8_t buf[FED_WIRE_BLOCK_MAX + 64];
    fed_wire_block b, g;
    size_t len = 0, used = 0, glen;

    (void)state;
    strcpy(graph, "g:");
    for (int i = 0; i < 60; i++)
        strcat(graph, i % 2 ? "R," : "L7,");
    strcat(graph, "L");
    glen = strlen(graph);
    assert_true(glen >= FED_MODEL_SPEC_MAX);
    sample_block(FED_WIRE_MODEL, &b);
    fed_model_spec_id(graph, b.settings.spec);
    b.settings.graph = graph;
    b.settings.graph_len = (uint32_t)glen;
    assert_int_equal(fed_wire_block_bytes(FED_WIRE_MODEL, &b),
                     FED_WIRE_MODEL_BLOCK_BYTES + 8 + glen);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, FED_WIRE_MODEL_BLOCK_BYTES + 8 + glen);
    /* field 13 last, required */
    assert_int_equal(buf[FED_WIRE_MODEL_BLOCK_BYTES], 13);
    assert_int_equal(buf[FED_WIRE_MODEL_BLOCK_BYTES + 2], FED_WIRE_FIELD_REQUIRED);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    assert_int_equal(used, len);
    assert_string_equal(g.settings.spec, b.settings.spec);
    assert_int_equal(g.settings.graph_len, glen);
    assert_ptr_equal(g.settings.graph, (const char *)buf + FED_WIRE_MODEL_BLOCK_BYTES + 8);
    assert_memory_equal(g.settings.graph, graph, glen);
    /* a graph that is not the id's: refused */
    buf[len - 1] = '5';
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used),
                     FED_ERR_PAYLOAD);
    buf[len - 1] = 'L';
    /* a byte outside printable ASCII */
    buf[len - 3] = '\n';
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used),
                     FED_ERR_PAYLOAD);
    /* an id without its graph, a graph beside a spec that is not its id, a
       graph that is no "g:" spec: none encodes */
    sample_block(FED_WIRE_MODEL, &b);
    fed_model_spec_id(graph, b.settings.spec);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    sample_block(FED_WIRE_MODEL, &b);
    b.settings.graph = graph;
    b.settings.graph_len = (uint32_t)glen;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    b.settings.graph = "g:L7,R,L";
    b.settings.graph_len = 8;
    strcpy(b.settings.spec, "g:L7,R,L");
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL); /* short: its own spec, no graph field */
    /* the longest graph fits; one more byte is past the field's bound */
    memset(graph, 'R', sizeof graph);
    memcpy(graph, "g:", 2);
    graph[FED_WIRE_GRAPH_MAX] = '\0';
    sample_block(FED_WIRE_MODEL, &b);
    fed_model_spec_id(graph, b.settings.spec);
    b.settings.graph = graph;
    b.settings.graph_len = FED_WIRE_GRAPH_MAX;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_MODEL, buf, len, &g, &used), FED_OK);
    b.settings.graph_len = FED_WIRE_GRAPH_MAX + 1;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_MODEL, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
}

/* ---- every type's fields (version 4): a DELTA's, as any type's ---- */

/* The sample DELTA block with a DP report, as this node writes it. */
static size_t delta_bytes(uint8_t *buf, size_t cap, fed_wire_block *b)
{
    size_t len = 0;

    sample_block(FED_WIRE_DELTA, b);
    b->dp_epsilon = 1.25;
    b->dp_budget = 8;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_DELTA, b, buf, cap, &len), FED_OK);
    assert_int_equal(len, 44);
    return len;
}

#define D_S 16      /* DELTA: S, after samples and base round */
#define D_REPORT 20 /* its DP report's head */

static void test_fields_of_any_type(void **state)
{
    uint8_t buf[FED_WIRE_BLOCK_MAX + 64], f[32];
    fed_wire_block b, g;
    size_t len, n, used = 0;

    (void)state;
    /* the layout of wire.h: fixed 16, S 24, the report (tag 1, optional, 16) */
    len = delta_bytes(buf, sizeof buf, &b);
    assert_memory_equal(buf + D_S, "\x18\x00\x00\x00\x01\x00\x00\x00\x10\x00\x00\x00", 12);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len + 9, &g, &used), FED_OK);
    assert_int_equal(used, len);
    assert_memory_equal(&g, &b, sizeof b);
    assert_true(g.dp_epsilon == 1.25 && g.dp_budget == 8);
    /* without the report (an older sender's S = 0): 0 and 0 */
    buf[D_S] = 0;
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, D_REPORT, &g, &used), FED_OK);
    assert_int_equal(used, D_REPORT);
    assert_true(g.samples == b.samples && g.dp_epsilon == 0 && g.dp_budget == 0);
    /* an unknown optional field, after the report: skipped */
    len = delta_bytes(buf, sizeof buf, &b);
    n = field(f, 9, 0, "later", 5);
    len = splice_in(buf, D_S, len, len, f, n);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len + 3, &g, &used), FED_OK);
    assert_int_equal(used, len);
    assert_memory_equal(&g, &b, sizeof b);
    /* the same field marked required: FED_ERR_FIELD_REQUIRED, its tag said */
    len = delta_bytes(buf, sizeof buf, &b);
    n = field(f, 9, FED_WIRE_FIELD_REQUIRED, "later", 5);
    len = splice_in(buf, D_S, len, len, f, n);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len, &g, &used),
                     FED_ERR_FIELD_REQUIRED);
    assert_int_equal(g.refused_tag, 9);
    assert_int_equal(used, 0);
    /* truncated: S past the bytes there, a value cut, a head cut */
    len = delta_bytes(buf, sizeof buf, &b);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len - 1, &g, &used),
                     FED_ERR_FIELD_TRUNCATED);
    buf[D_REPORT + 4] = 17; /* the report's length past S */
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len + 8, &g, &used),
                     FED_ERR_FIELD_TRUNCATED);
    len = delta_bytes(buf, sizeof buf, &b);
    len = splice_in(buf, D_S, len, len, f, 5); /* 5 bytes of a head */
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len, &g, &used),
                     FED_ERR_FIELD_TRUNCATED);
    /* the report twice */
    len = delta_bytes(buf, sizeof buf, &b);
    memcpy(f, buf + D_REPORT, 24);
    len = splice_in(buf, D_S, len, len, f, 24);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len, &g, &used),
                     FED_ERR_FIELD_ORDER);
    /* the report too long (17 bytes, inside S) */
    len = delta_bytes(buf, sizeof buf, &b);
    len = splice_in(buf, D_S, len, len, (const uint8_t *)"", 1);
    buf[D_REPORT + 4] = 17;
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len, &g, &used),
                     FED_ERR_FIELD_LENGTH);
    /* S over FED_WIRE_FIELDS_MAX */
    len = delta_bytes(buf, sizeof buf, &b);
    buf[D_S] = 0x01, buf[D_S + 1] = 0x04; /* 1025 */
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, sizeof buf, &g, &used),
                     FED_ERR_FIELD_LENGTH);
    /* a report out of range: refused, and never written */
    len = delta_bytes(buf, sizeof buf, &b);
    memset(buf + D_REPORT + 8, 0xff, 8); /* epsilon NaN */
    assert_int_equal(fed_wire_block_decode(FED_WIRE_DELTA, buf, len, &g, &used),
                     FED_ERR_PAYLOAD);
    b.dp_budget = -1;
    assert_int_equal(fed_wire_block_encode(FED_WIRE_DELTA, &b, buf, sizeof buf, &len),
                     FED_ERR_INVAL);
    /* a type with no fields yet (HELLO) takes a newer node's optional one */
    sample_block(FED_WIRE_HELLO, &b);
    assert_int_equal(fed_wire_block_encode(FED_WIRE_HELLO, &b, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, 20);
    n = field(f, 1, 0, "x", 1);
    len = splice_in(buf, 16, len, len, f, n);
    assert_int_equal(fed_wire_block_decode(FED_WIRE_HELLO, buf, len, &g, &used), FED_OK);
    assert_int_equal(used, 29);
    assert_memory_equal(&g, &b, sizeof b);
}

/* The table: every known type has a row, names and block sizes from it. */
static void test_type_table(void **state)
{
    size_t rows = 0;

    (void)state;
    for (const fed_wire_type_info *ti; (ti = fed_wire_type_at(rows)) != NULL; rows++) {
        size_t n = ti->fixed + 4;

        assert_ptr_equal(fed_wire_type_row(ti->type), ti);
        assert_string_equal(fed_wire_type_name(ti->type), ti->name);
        assert_true(ti->fixed <= FED_WIRE_FIXED_MAX && ti->nfields <= 64);
        for (uint16_t i = 0; i < ti->nfields; i++) {
            assert_true(ti->fields[i].tag > (i ? ti->fields[i - 1].tag : 0));
            if (!ti->fields[i].sized) /* written at its value's length */
                n += 8 + ti->fields[i].max;
        }
        assert_int_equal(fed_wire_block_size(ti->type), n);
    }
    assert_int_equal(rows, 17);
    for (unsigned t = 0; t < 256; t++)
        assert_int_equal(FED_WIRE_TYPE_KNOWN(t), fed_wire_type_row((uint8_t)t) != NULL);
    assert_int_equal(fed_wire_block_size(FED_WIRE_LEAVE), 36);
    assert_true(fed_wire_flags_ok(FED_WIRE_CHUNK, FED_WIRE_FLAG_PULL));
    assert_false(fed_wire_flags_ok(FED_WIRE_CHUNK, 0));
    assert_false(fed_wire_flags_ok(FED_WIRE_CHUNK, FED_WIRE_FLAG_PULL | FED_WIRE_FLAG_DATA));
    assert_true(fed_wire_flags_ok(FED_WIRE_SA_MASKED, FED_WIRE_FLAG_STREAM));
    assert_false(fed_wire_flags_ok(FED_WIRE_SA_KEYS, FED_WIRE_FLAG_STREAM));
}

/* ---- the simulator's seam ---- */

/* Unsealed frames (fedsim --no-crypto) only through gossip/wire_hooks.h:
 * the default configuration seals; an unsealed wire's frame carries its
 * payload in the clear and opens at another unsealed wire, and a sealing
 * receiver refuses it. */
static void test_unsealed_hooks(void **state)
{
    world *W = *state;
    fed_wire_cfg cfg;
    node ua, ub;
    fed_wire_msg m;
    fed_wire_hdr h;
    fed_wire_block b;
    size_t len = 0;

    fed_wire_cfg_default(&cfg);
    assert_null(cfg.hooks);
    assert_false(fed_wire_cfg_unsealed(&cfg));
    cfg.hooks = &fedi_wire_hooks_unsealed;
    assert_true(fed_wire_cfg_unsealed(&cfg));
    node_open(W, &ua, 1, EPOCH_A, &cfg); /* a's and b's identities */
    node_open(W, &ub, 2, EPOCH_B, &cfg);
    h = hdr_to(&ua, &ub, FED_WIRE_DELTA, 900);
    sample_block(FED_WIRE_DELTA, &b);
    assert_int_equal(fed_wire_build(ua.w, &h, &b, (const uint8_t *)"PLAINVEC", 8, W->frame, CAP,
                                    fed_rng_random, &W->rng, &len),
                     FED_OK);
    assert_memory_equal(W->frame + FED_WIRE_HEADER_BYTES + fed_wire_block_size(FED_WIRE_DELTA),
                        "PLAINVEC", 8);
    assert_int_equal(fed_wire_open(ub.w, W->frame, len, &m), FED_OK);
    assert_int_equal(m.vector_len, 8);
    assert_int_equal(m.block.samples, b.samples);
    h = hdr_to(&ua, &W->b, FED_WIRE_DELTA, 901);
    assert_int_equal(fed_wire_build(ua.w, &h, &b, (const uint8_t *)"PLAINVEC", 8, W->frame, CAP,
                                    fed_rng_random, &W->rng, &len),
                     FED_OK);
    expect_open(W, W->frame, len, FED_ERR_AEAD, "rej_aead");
    node_close(&ua);
    node_close(&ub);
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

        if (!FED_WIRE_TYPE_KNOWN(t))
            continue;
        if (t == FED_WIRE_MODEL || t == FED_WIRE_DELTA || t == FED_WIRE_SHARE ||
            t == FED_WIRE_SLICE) {
            assert_int_equal(fed_codec_encode(&c32, x, 64, NULL, vec, sizeof vec, &vlen), FED_OK);
            codec = FED_CODEC_F32;
        } else if (t == FED_WIRE_AR_ABORT) { /* its count of member keys, exactly */
            memset(vec, 0x11, 3 * 32);
            vlen = 3 * 32;
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
    /* a version-3 node (fields in MODEL only) and a version-2 one (a fixed
       MODEL block): refused at warning level, both versions and the sender
       logged, and which node to upgrade */
    log_start();
    W->frame[4] = 3;
    expect_open(W, W->frame, len, FED_ERR_FRAME_VERSION, "rej_version");
    assert_string_equal(logged.last, "wire: dropped a frame of wire version 3 from 2e3a13d4 "
                                     "(unauthenticated): "
                                     "this node speaks version 4; upgrade the sender");
    assert_int_equal(logged.level, FED_LOG_WARN);
    W->frame[4] = 2;
    expect_open(W, W->frame, len, FED_ERR_FRAME_VERSION, "rej_version");
    assert_string_equal(logged.last, "wire: dropped a frame of wire version 2 from 2e3a13d4 "
                                     "(unauthenticated): "
                                     "this node speaks version 4; upgrade the sender");
    W->frame[4] = 5;
    expect_open(W, W->frame, len, FED_ERR_FRAME_VERSION, "rej_version");
    assert_string_equal(logged.last, "wire: dropped a frame of wire version 5 from 2e3a13d4 "
                                     "(unauthenticated): "
                                     "this node speaks version 4; upgrade the receiver");
    log_stop();
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
                         NULL, h.nonce, fedi_crypto_session_tx(s)),
                     0);
    fed_crypto_session_put(W->a.arena, s);
    return FED_WIRE_HEADER_BYTES + plen + FED_CRYPTO_SEAL_OVERHEAD;
}

static void test_reject_bad_signature(void **state)
{
    world *W = *state;
    uint8_t payload[20] = {0};
    size_t len;

    payload[0] = 1; /* a valid DELTA block: samples 1, no fields */
    len = forge(W, W->c.arena, FED_WIRE_DELTA, 600, payload, sizeof payload);
    expect_open(W, W->frame, len, FED_ERR_SIGNATURE, "rej_signature");
    /* the same bytes signed by a itself pass: the forgery helper is honest */
    len = forge(W, W->a.arena, FED_WIRE_DELTA, 600, payload, sizeof payload);
    expect_open(W, W->frame, len, FED_OK, NULL);
}

static void test_reject_payload(void **state)
{
    world *W = *state;
    uint8_t payload[96] = {0};
    size_t len;

    payload[4] = 1; /* PEERS: a reserved byte set */
    len = forge(W, W->a.arena, FED_WIRE_PEERS, 700, payload, 12);
    expect_open(W, W->frame, len, FED_ERR_PAYLOAD, "rej_payload");
    payload[4] = 0;
    payload[0] = 3; /* PEERS says 3 entries, carries none */
    len = forge(W, W->a.arena, FED_WIRE_PEERS, 701, payload, 12);
    expect_open(W, W->frame, len, FED_ERR_PAYLOAD, "rej_payload");
    len = forge(W, W->a.arena, FED_WIRE_MODEL, 702, payload, 10); /* shorter than F + S */
    expect_open(W, W->frame, len, FED_ERR_PAYLOAD, "rej_payload");
    len = forge(W, W->a.arena, FED_WIRE_MODEL, 703, payload, 12); /* S = 0: no settings */
    expect_open(W, W->frame, len, FED_ERR_FIELD_MISSING, "rej_payload");
    payload[0] = 0; /* an ACK (no vector in its row) with a byte after its block */
    len = forge(W, W->a.arena, FED_WIRE_ACK, 704, payload, 13);
    expect_open(W, W->frame, len, FED_ERR_PAYLOAD, "rej_payload");
    len = forge(W, W->a.arena, FED_WIRE_ACK, 705, payload, 12);
    expect_open(W, W->frame, len, FED_OK, NULL);
    payload[8] = 2; /* AR_ABORT: 2 keys said, one carried */
    len = forge(W, W->a.arena, FED_WIRE_AR_ABORT, 706, payload, 20 + 32);
    expect_open(W, W->frame, len, FED_ERR_PAYLOAD, "rej_payload");
    len = forge(W, W->a.arena, FED_WIRE_AR_ABORT, 707, payload, 20 + 64);
    expect_open(W, W->frame, len, FED_OK, NULL);
}

/* A sealed MODEL whose settings carry fields this node does not know. */
static void test_model_unknown_fields_in_frame(void **state)
{
    world *W = *state;
    uint8_t payload[FED_WIRE_BLOCK_MAX + 64], f[32];
    fed_wire_block want;
    fed_wire_msg m;
    size_t blen, n, len;

    sample_block(FED_WIRE_MODEL, &want);
    /* optional: skipped, the rest decoded, the vector found after it */
    blen = model_bytes(payload, sizeof payload);
    n = field(f, 40, 0, "future", 6);
    blen = splice(payload, blen, blen, f, n);
    memcpy(payload + blen, "VECTOR", 6);
    len = forge(W, W->a.arena, FED_WIRE_MODEL, 710, payload, blen + 6);
    assert_int_equal(fed_wire_open(W->b.w, W->frame, len, &m), FED_OK);
    assert_memory_equal(&m.block, &want, sizeof want);
    assert_int_equal(m.vector_len, 6);
    assert_memory_equal(m.vector, "VECTOR", 6);
    /* required: refused as a payload error, its tag logged */
    blen = model_bytes(payload, sizeof payload);
    n = field(f, 0x0123, FED_WIRE_FIELD_REQUIRED, "future", 6);
    blen = splice(payload, blen, blen, f, n);
    len = forge(W, W->a.arena, FED_WIRE_MODEL, 711, payload, blen);
    log_start();
    expect_open(W, W->frame, len, FED_ERR_FIELD_REQUIRED, "rej_payload");
    assert_non_null(strstr(logged.all, "wire: MODEL field tag 291 is marked required; "
                                       "wire version 4 does not know it\n"));
    assert_non_null(strstr(logged.last, "(FED_ERR_FIELD_REQUIRED)"));
    log_stop();
    /* open_ticket alone (it may run in a job) logs nothing, but says the tag */
    len = forge(W, W->a.arena, FED_WIRE_MODEL, 712, payload, blen);
    log_start();
    {
        fed_wire_ticket t;
        fed_err e;

        assert_int_equal(fed_wire_precheck(W->b.w, W->frame, len, &t), FED_OK);
        e = fed_wire_open_ticket(W->b.w, &t, W->frame, len, &m);
        assert_int_equal(e, FED_ERR_FIELD_REQUIRED);
        assert_int_equal(m.block.refused_tag, 0x0123);
        assert_int_equal(logged.lines, 0);
        assert_int_equal(fed_wire_finish(W->b.w, &t, e, &m), FED_ERR_FIELD_REQUIRED);
        assert_int_equal(logged.lines, 2);
    }
    log_stop();
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
        cmocka_unit_test(test_ar_types),
        cmocka_unit_test(test_blocks_rejected),
        cmocka_unit_test(test_settings_fields_roundtrip),
        cmocka_unit_test(test_settings_unknown_fields),
        cmocka_unit_test(test_settings_knobs_field),
        cmocka_unit_test(test_settings_input),
        cmocka_unit_test(test_settings_site_eval),
        cmocka_unit_test(test_settings_dp_field),
        cmocka_unit_test(test_settings_stats_field),
        cmocka_unit_test(test_paths_and_segments_fields),
        cmocka_unit_test(test_secagg_blocks),
        cmocka_unit_test(test_settings_malformed),
        cmocka_unit_test(test_settings_graph),
        cmocka_unit_test(test_fields_of_any_type),
        cmocka_unit_test(test_type_table),
        cmocka_unit_test(test_unsealed_hooks),
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
        cmocka_unit_test(test_model_unknown_fields_in_frame),
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
