/* fuzz_frame.c - libFuzzer target for everything a hostile peer can send:
 * frame headers, sealed frames, CHUNK streams, typed blocks and codec
 * encodings. First input byte picks the mode:
 *   0: the rest is one frame, opened by a fresh receiver
 *   1: the rest is a list of frames (u16 little-endian length, bytes), opened
 *      in order by one receiver (so streams can progress)
 *   2: the rest is a typed block (first byte: type) / a codec encoding
 *   3: type, flags, payload length (u16) and payload, then trailing bytes:
 *      sealed validly by a member (as one gone bad could) and opened, so
 *      what lies behind the AEAD (blocks, stream descriptors, first chunks)
 *      is fuzzed too
 * Identities and RNG seeds are fixed, so the seed corpus (valid sealed frames
 * and streams, written by building this file with -DFUZZ_FRAME_GEN) opens.
 * The generator walks the frame-type table (gossip/wire.h), so a new type
 * gets its seed. Seeds named v4-* are wire version 4; v3-* and the unnamed
 * ones are versions 3 and 2 and must be refused cleanly (rej_version).
 * `make fuzz-seeds` regenerates them (after a wire change: name the new
 * version's seeds v<N>-* here, and keep the older ones as refusals). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/rng.h"
#include "crypto/allow.h"
#include "crypto/arena.h"
#include "crypto/envelope.h"
#include "gossip/stream.h"
#include "gossip/wire.h"
#include "model/codec.h"

#define EPOCH_A 1000
#define EPOCH_B 2000
#define MAX_FRAME 4096
#define DST_BYTES (1u << 20)
#define VEC_MAX (1u << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct fixture {
    fed_crypto_arena *a, *b, *d;
    fed_crypto_allow *allow;
    uint8_t *dst;
    float *vec;
} fixture;

static fixture fx;

static fed_crypto_arena *make_node(uint64_t seed)
{
    fed_crypto_arena *n = NULL;
    fed_rng rng;

    fed_rng_seed(&rng, seed);
    if (fed_crypto_arena_new(NULL, &n) != FED_OK ||
        fed_crypto_arena_generate(n, fed_rng_random, &rng) != FED_OK)
        abort();
    return n;
}

static void fixture_init(void)
{
    if (fx.a)
        return;
    fed_log_set_level(FED_LOG_ERROR + 1);
    fx.a = make_node(1);
    fx.b = make_node(2);
    fx.d = make_node(3);
    if (fed_crypto_allow_new(&fx.allow) != FED_OK ||
        fed_crypto_allow_add(fx.allow, "a", fed_crypto_arena_pubkey(fx.a)) != FED_OK ||
        fed_crypto_allow_add(fx.allow, "b", fed_crypto_arena_pubkey(fx.b)) != FED_OK ||
        fed_crypto_allow_add(fx.allow, "d", fed_crypto_arena_pubkey(fx.d)) != FED_OK)
        abort();
    fx.dst = malloc(DST_BYTES);
    fx.vec = malloc(VEC_MAX * sizeof *fx.vec);
    if (!fx.dst || !fx.vec)
        abort();
}

static fed_err give_dst(void *ctx, const fed_wire_msg *first, uint64_t total, uint8_t **dst)
{
    (void)ctx;
    (void)first;
    if (total > DST_BYTES)
        return FED_ERR_TOO_LARGE;
    *dst = fx.dst;
    return FED_OK;
}

static fed_wire *receiver(void)
{
    fed_wire_cfg cfg;
    fed_wire *w = NULL;

    fed_wire_cfg_default(&cfg);
    cfg.max_frame = MAX_FRAME;
    cfg.max_rx_streams = 2;
    if (fed_wire_new(&cfg, fx.b, fx.allow, &w) != FED_OK)
        abort();
    fed_wire_set_epoch(w, EPOCH_B);
    fed_wire_set_stream_dst(w, give_dst, NULL);
    return w;
}

/* What a node does next with an opened vector: decode it. */
static void decode_vector(const uint8_t *v, size_t len)
{
    fed_codec_id id;
    uint64_t n;

    if (fed_codec_peek(v, len, &id, &n) != FED_OK || n > VEC_MAX)
        return;
    if (id == FED_CODEC_F64) {
        static double d[VEC_MAX / 2];

        if (n <= VEC_MAX / 2 && fed_codec_decode_f64(v, len, d, (size_t)n) == FED_OK)
            return;
    }
    if (fed_codec_decode(v, len, FED_CODEC_NONE, fx.vec, (size_t)n) != FED_OK)
        return;
}

static void open_one(fed_wire *w, const uint8_t *data, size_t size)
{
    uint8_t *frame = malloc(size ? size : 1);
    fed_wire_msg m;

    if (!frame)
        abort();
    memcpy(frame, data, size);
    if (fed_wire_open(w, frame, size, &m) == FED_OK) {
        if (m.vector && m.hdr.codec)
            decode_vector(m.vector, m.vector_len);
        if (m.stream && m.stream_done)
            fed_wire_stream_close(w, m.stream);
    }
    free(frame);
}

static void fuzz_blocks(const uint8_t *data, size_t size)
{
    fed_wire_block b;
    fed_wire_hdr h;
    size_t used;

    if (size < 1)
        return;
    if (fed_wire_block_decode(data[0], data + 1, size - 1, &b, &used) == FED_OK && used > size - 1)
        abort();
    if (fed_wire_hdr_decode(data + 1, size - 1, &h) == FED_OK && size - 1 < FED_WIRE_HEADER_BYTES)
        abort();
    decode_vector(data + 1, size - 1);
}

static void fuzz_sealed_by_member(const uint8_t *data, size_t size)
{
    fed_crypto_session *s = NULL;
    fed_wire_hdr h;
    uint8_t *frame;
    size_t plen, tail, len;
    fed_wire *w;

    if (size < 4)
        return;
    plen = data[2] | (size_t)data[3] << 8;
    if (plen > size - 4)
        plen = size - 4;
    tail = size - 4 - plen;
    memset(&h, 0, sizeof h);
    h.type = data[0];
    h.flags = data[1];
    memcpy(h.sender, fed_crypto_arena_pubkey(fx.a), 32);
    memcpy(h.recipient, fed_crypto_arena_pubkey(fx.b), 32);
    h.sender_epoch = EPOCH_A;
    h.recipient_epoch = EPOCH_B;
    h.seq = 1;
    h.payload_len = (uint32_t)plen;
    h.codec = data[0] & 7;
    len = FED_WIRE_HEADER_BYTES + plen + FED_CRYPTO_SEAL_OVERHEAD + tail;
    frame = malloc(len);
    if (!frame)
        abort();
    fed_wire_hdr_encode(&h, frame);
    memcpy(frame + FED_WIRE_HEADER_BYTES, data + 4, plen);
    memcpy(frame + len - tail, data + 4 + plen, tail);
    if (fed_crypto_session_get(fx.a, h.recipient, &s) != FED_OK ||
        fed_crypto_seal(fx.a, s, frame, FED_WIRE_HEADER_BYTES, h.nonce,
                        frame + FED_WIRE_HEADER_BYTES, plen, NULL, NULL) != FED_OK)
        abort();
    fed_crypto_session_put(fx.a, s);
    w = receiver();
    open_one(w, frame, len);
    fed_wire_free(w);
    free(frame);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fed_wire *w;

    fixture_init();
    if (size < 1)
        return 0;
    switch (data[0] % 4) {
    case 0:
        w = receiver();
        open_one(w, data + 1, size - 1);
        fed_wire_free(w);
        break;
    case 1:
        w = receiver();
        for (size_t at = 1; at + 2 <= size;) {
            size_t len = data[at] | (size_t)data[at + 1] << 8;

            at += 2;
            if (len > size - at)
                len = size - at;
            open_one(w, data + at, len);
            at += len;
        }
        fed_wire_free(w);
        break;
    case 2: fuzz_blocks(data + 1, size - 1); break;
    default: fuzz_sealed_by_member(data + 1, size - 1); break;
    }
    return 0;
}

#ifdef FUZZ_FRAME_GEN
/* Writes the seed corpus into the directory argv[1]. */

static void save(const char *dir, const char *name, uint8_t mode, const uint8_t *body, size_t len)
{
    char path[512];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (!f || fputc(mode, f) == EOF || fwrite(body, 1, len, f) != len || fclose(f) != 0)
        abort();
}

static fed_wire *sender(fed_crypto_arena *from, uint64_t epoch)
{
    fed_wire_cfg cfg;
    fed_wire *w = NULL;

    fed_wire_cfg_default(&cfg);
    cfg.max_frame = MAX_FRAME;
    if (fed_wire_new(&cfg, from, fx.allow, &w) != FED_OK)
        abort();
    fed_wire_set_epoch(w, epoch);
    return w;
}

static void hdr_for(fed_wire_hdr *h, uint8_t type, uint64_t seq)
{
    memset(h, 0, sizeof *h);
    h->type = type;
    memcpy(h->recipient, fed_crypto_arena_pubkey(fx.b), 32);
    h->sender_epoch = EPOCH_A;
    h->recipient_epoch = EPOCH_B;
    h->seq = seq;
    h->round = 7;
}

int main(int argc, char **argv)
{
    static uint8_t frame[MAX_FRAME], list[16 * MAX_FRAME], data[6000];
    fed_codec codecs[] = {{FED_CODEC_F32, 0},
                          {FED_CODEC_F16, 0},
                          {FED_CODEC_Q8, 0},
                          {FED_CODEC_TOPK, 0.1f},
                          {FED_CODEC_F64, 0}};
    fed_wire *wa;
    fed_rng rng;
    float x[300];
    char name[64];

    if (argc != 2)
        return 2;
    fixture_init();
    wa = sender(fx.a, EPOCH_A);
    fed_rng_seed(&rng, 99);
    for (int i = 0; i < 300; i++)
        x[i] = (float)fed_rng_normal(&rng);
    for (size_t i = 0; fed_wire_type_at(i); i++) {
        const fed_wire_type_info *ti = fed_wire_type_at(i);
        uint8_t t = ti->type;
        fed_wire_hdr h;
        fed_wire_block b;
        uint8_t vec[16 + 300 * 8];
        size_t vlen = 0, len = 0;

        memset(&b, 0, sizeof b);
        hdr_for(&h, t, t);
        if (t == FED_WIRE_HELLO)
            b.role = FED_WIRE_ROLE_PEER;
        if (t == FED_WIRE_CHUNK)
            h.flags = FED_WIRE_FLAG_PULL;
        if (t == FED_WIRE_MODEL) {
            strcpy(b.settings.spec, "mlp:16");
            b.settings.lr = 0.1f;
            b.settings.paths_on = 1; /* field 14: tensors that stay at the sites */
            b.settings.paths_flags = FED_WIRE_PATHS_LOCAL_BN | FED_WIRE_PATHS_SCAFFOLD;
            strcpy(b.settings.local_layers, "2.*");
            b.settings.scaffold_on = 1; /* field 17: SCAFFOLD's void rounds */
            b.settings.scaffold_void = 0x5;
        }
        if (t == FED_WIRE_AR_VERIFY)
            b.in_row = 1;
        if (t == FED_WIRE_DELTA || t == FED_WIRE_LEAVE) { /* a DP report */
            b.dp_epsilon = 0.5;
            b.dp_budget = 4;
        }
        if (t == FED_WIRE_DELTA) { /* field 2: the vector's two segments */
            b.seg_count = 2;
            b.seg_len[0] = 200;
            b.seg_len[1] = 100;
        }
        if (ti->vector == FED_WIRE_VEC_CODEC) {
            fed_codec *c = &codecs[t % 5];

            if (fed_codec_encode(c, x, 300, NULL, vec, sizeof vec, &vlen) != FED_OK)
                abort();
            h.codec = (uint16_t)c->id;
        }
        if (fed_wire_build(wa, &h, &b, vec, vlen, frame, sizeof frame, fed_rng_random, &rng,
                           &len) != FED_OK)
            abort();
        snprintf(name, sizeof name, "v4-sealed-%s", ti->name);
        save(argv[1], name, 0, frame, len);
        { /* a seed that does not open would fuzz only the first checks */
            fed_wire *wb = receiver();
            fed_wire_msg m;

            fed_err e = fed_wire_open(wb, frame, len, &m);

            if (e != FED_OK) {
                fprintf(stderr, "%s does not open: %s\n", name, fed_strerror(e));
                abort();
            }
            fed_wire_free(wb);
        }
    }
    /* streams: a first frame and its chunks, as a list */
    for (int s = 0; s < 2; s++) {
        fed_wire_stream_tx *tx = NULL;
        fed_wire_hdr h;
        fed_wire_block b;
        size_t at = 0, len = 0;
        uint64_t total = s ? 5000 : 300;

        fed_rng_fill(&rng, data, sizeof data);
        memset(&b, 0, sizeof b);
        b.samples = 10;
        hdr_for(&h, FED_WIRE_DELTA, 100 + 10 * (uint64_t)s);
        if (fed_wire_stream_tx_new(wa, &h, &b, data, total, 1200, fed_rng_random, &rng, &tx) !=
            FED_OK)
            abort();
        for (uint64_t seq = h.seq; !fed_wire_stream_tx_done(tx); seq++) {
            if (fed_wire_stream_tx_next(wa, tx, seq, fed_rng_random, &rng, frame, sizeof frame,
                                        &len) != FED_OK)
                abort();
            list[at] = (uint8_t)len;
            list[at + 1] = (uint8_t)(len >> 8);
            memcpy(list + at + 2, frame, len);
            at += 2 + len;
        }
        fed_wire_stream_tx_free(wa, tx);
        snprintf(name, sizeof name, "v4-stream-%d", s);
        save(argv[1], name, 1, list, at);
    }
    /* codec encodings and a typed block */
    for (size_t i = 0; i < sizeof codecs / sizeof codecs[0]; i++) {
        uint8_t enc[1 + 16 + 300 * 8];
        size_t len = 0;

        enc[0] = FED_WIRE_ACK;
        if (fed_codec_encode(&codecs[i], x, 300, NULL, enc + 1, sizeof enc - 1, &len) != FED_OK)
            abort();
        snprintf(name, sizeof name, "codec-%s", fed_codec_name(codecs[i].id));
        save(argv[1], name, 2, enc, len + 1);
    }
    /* mode 3: payloads a member seals itself: a DELTA with a vector, and a
     * stream's first frame (block, descriptor, first chunk) */
    {
        uint8_t buf[4 + FED_WIRE_BLOCK_MAX + 16 + 300 * 4];
        fed_wire_block b;
        size_t len = 0, blen = 0;

        memset(buf, 0, sizeof buf);
        memset(&b, 0, sizeof b);
        b.samples = 10;
        b.dp_epsilon = 0.5;
        b.dp_budget = 4;
        buf[0] = FED_WIRE_DELTA;
        buf[1] = 0;
        if (fed_wire_block_encode(FED_WIRE_DELTA, &b, buf + 4, FED_WIRE_BLOCK_MAX, &blen) !=
                FED_OK ||
            fed_codec_encode(&codecs[0], x, 300, NULL, buf + 4 + blen, sizeof buf - 4 - blen,
                             &len) != FED_OK)
            abort();
        buf[2] = (uint8_t)(blen + len);
        buf[3] = (uint8_t)((blen + len) >> 8);
        save(argv[1], "v4-member-delta", 3, buf, 4 + blen + len);
    }
    {
        /* reuse stream-0's descriptor: open its first frame with b's session */
        fed_wire_stream_tx *tx = NULL;
        fed_crypto_session *s = NULL;
        fed_wire_hdr h;
        fed_wire_block b;
        uint8_t out[4 + MAX_FRAME];
        size_t len = 0, plen;

        memset(&b, 0, sizeof b);
        hdr_for(&h, FED_WIRE_DELTA, 1);
        h.round = 0; /* the header mode 3 rebuilds */
        h.codec = FED_WIRE_DELTA & 7;
        if (fed_wire_stream_tx_new(wa, &h, &b, data, 2000, 1200, fed_rng_random, &rng, &tx) !=
                FED_OK ||
            fed_wire_stream_tx_next(wa, tx, 1, fed_rng_random, &rng, frame, sizeof frame, &len) !=
                FED_OK)
            abort();
        plen = frame[FED_WIRE_OFF_LEN] | (size_t)frame[FED_WIRE_OFF_LEN + 1] << 8;
        if (fed_crypto_session_get(fx.b, fed_crypto_arena_pubkey(fx.a), &s) != FED_OK ||
            fed_crypto_open(s, frame, FED_WIRE_HEADER_BYTES, frame + FED_WIRE_OFF_NONCE,
                            frame + FED_WIRE_HEADER_BYTES, frame + FED_WIRE_HEADER_BYTES, plen,
                            NULL, NULL) != FED_OK)
            abort();
        fed_crypto_session_put(fx.b, s);
        out[0] = FED_WIRE_DELTA;
        out[1] = FED_WIRE_FLAG_STREAM;
        out[2] = (uint8_t)plen;
        out[3] = (uint8_t)(plen >> 8);
        memcpy(out + 4, frame + FED_WIRE_HEADER_BYTES, plen);
        /* the first chunk's message is bound to the canonical header, which
         * the harness rebuilds identically (seq and nonce are zeroed in it) */
        memcpy(out + 4 + plen, frame + FED_WIRE_HEADER_BYTES + plen + FED_CRYPTO_SEAL_OVERHEAD,
               len - FED_WIRE_HEADER_BYTES - plen - FED_CRYPTO_SEAL_OVERHEAD);
        save(argv[1], "v4-member-stream-first", 3, out,
             4 + len - FED_WIRE_HEADER_BYTES - FED_CRYPTO_SEAL_OVERHEAD);
        fed_wire_stream_tx_free(wa, tx);
    }
    fed_wire_free(wa);
    return 0;
}
#endif
