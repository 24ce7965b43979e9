/* stream.c - CHUNK streams: one crypto_secretstream per large payload,
 * pushed one frame at a time and pulled straight into the receiver's
 * destination buffer (formats in stream.h). Owns the stream objects; their
 * keys and states live in arena slots. Must never write outside the
 * destination, accept a chunk out of order, or report a stream complete
 * before its final tag and signature verified. */
#include "gossip/stream.h"

#include <assert.h>
#include <string.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "gossip/wire_impl.h"

typedef crypto_secretstream_xchacha20poly1305_state ss_state;

#define SS_ABYTES crypto_secretstream_xchacha20poly1305_ABYTES
#define TAG_MESSAGE crypto_secretstream_xchacha20poly1305_TAG_MESSAGE
#define TAG_FINAL crypto_secretstream_xchacha20poly1305_TAG_FINAL

/* Slot layouts. tx: push state | stream key | MAC key.
 * rx: pull state | backup of the pull state | MAC key. */
#define SLOT_STATE 0
#define SLOT_TX_KEY 64
#define SLOT_TX_MAC 96
#define SLOT_RX_BACKUP 64
#define SLOT_RX_MAC 128

/* Descriptor offsets. */
#define D_ID 0
#define D_TOTAL 8
#define D_CHUNK 16
#define D_COUNT 20
#define D_KEY 24
#define D_MAC 56
#define D_HEADER 88

_Static_assert(sizeof(ss_state) <= 64, "secretstream state fits its slot part");
_Static_assert(SS_ABYTES == FED_WIRE_STREAM_ABYTES, "ABYTES");
_Static_assert(crypto_secretstream_xchacha20poly1305_HEADERBYTES == 24, "header bytes");
_Static_assert(FED_CRYPTO_SLOT_BYTES >= SLOT_RX_MAC + 32, "slot size");

struct fed_wire_stream_tx {
    fed_wire_hdr h0; /* template: type, recipient, epochs, round, codec */
    uint8_t block[FED_WIRE_BLOCK_MAX];
    size_t block_len;
    const uint8_t *data; /* (total) borrowed */
    uint64_t total, id;
    uint32_t chunk_len, chunks, next;
    uint8_t ss_header[24];
    fed_crypto_slot *slot;
    crypto_generichash_blake2b_state hash;
    size_t frame_cap;
};

struct fed_wire_stream_rx {
    fed_wire_hdr hdr0;
    uint8_t header0[FED_WIRE_HEADER_BYTES]; /* as received */
    uint8_t block[FED_WIRE_BLOCK_MAX];
    size_t block_len;
    fed_wire_block blk;
    uint64_t id, total, received;
    uint32_t chunk_len, chunks, next;
    uint8_t *dst; /* (total) the caller's */
    crypto_generichash_blake2b_state hash;
    fed_crypto_slot *slot;
    int registered, busy, closing, done, broken;
    uint8_t digest[FED_CRYPTO_DIGEST_BYTES];
    uint8_t sig[FED_CRYPTO_SIG_BYTES];
    /* Pending only: ids of the streams its sender had registered at precheck,
     * so a resent first frame is refused before the destination is asked. */
    uint32_t nheld;
    uint64_t held[]; /* (nheld) */
};

/* ---- shared ---- */

static uint64_t div_up(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

static size_t chunk_bytes(uint64_t total, uint32_t chunk_len, uint32_t chunks, uint32_t i)
{
    return i + 1 < chunks ? chunk_len : (size_t)(total - (uint64_t)chunk_len * (chunks - 1));
}

/* Message bytes a frame carrying chunk i holds. */
static size_t messages_bytes(uint64_t total, uint32_t chunk_len, uint32_t chunks, uint32_t i)
{
    return chunk_bytes(total, chunk_len, chunks, i) + SS_ABYTES +
           (i + 1 == chunks ? FED_WIRE_STREAM_FINAL_BYTES : 0);
}

/* The header with its sequence number (and for a first frame the nonce) zeroed. */
static void canonical(const uint8_t *hdr, int first, uint8_t out[FED_WIRE_HEADER_BYTES])
{
    memcpy(out, hdr, FED_WIRE_HEADER_BYTES);
    memset(out + FED_WIRE_OFF_SEQ, 0, 8);
    if (first)
        memset(out + FED_WIRE_OFF_NONCE, 0, 24);
}

static void header_mac(const uint8_t *hdr, const uint8_t *key, uint8_t mac[FED_WIRE_MAC_BYTES])
{
    crypto_generichash_blake2b(mac, FED_WIRE_MAC_BYTES, hdr, FED_WIRE_HEADER_BYTES, key, 32);
}

static ss_state *slot_state(fed_crypto_slot *s, size_t off)
{
    return (ss_state *)(void *)(fed_crypto_slot_mem(s) + off);
}

/* The largest chunk beside a typed block of block bytes in a first frame. */
static size_t chunk_max_of(const fed_wire *w, size_t block)
{
    size_t first = FED_WIRE_HEADER_BYTES + block + FED_WIRE_STREAM_DESC_BYTES +
                   FED_CRYPTO_SEAL_OVERHEAD + SS_ABYTES + FED_WIRE_STREAM_FINAL_BYTES;
    size_t over = first > FED_WIRE_CHUNK_OVERHEAD ? first : FED_WIRE_CHUNK_OVERHEAD;
    size_t max = w->cfg.max_frame > over ? w->cfg.max_frame - over : 0;

    if (max > UINT32_MAX)
        max = UINT32_MAX;
    return max >= 64 ? max & ~(size_t)63 : max;
}

size_t fed_wire_stream_chunk_max(const fed_wire *w, uint8_t type)
{
    return chunk_max_of(w, fed_wire_block_size(type));
}

size_t fed_wire_stream_chunk_max_for(const fed_wire *w, uint8_t type, const fed_wire_block *b)
{
    return chunk_max_of(w, fed_wire_block_bytes(type, b));
}

fed_err fed_wire_stream_verify(const uint8_t pk[32], const uint8_t header0[FED_WIRE_HEADER_BYTES],
                               const uint8_t *block, size_t block_len, const uint8_t *data,
                               uint64_t total, const uint8_t sig[FED_CRYPTO_SIG_BYTES])
{
    crypto_generichash_blake2b_state st;
    uint8_t canon[FED_WIRE_HEADER_BYTES], digest[FED_CRYPTO_DIGEST_BYTES];

    canonical(header0, 1, canon);
    crypto_generichash_blake2b_init(&st, NULL, 0, sizeof digest);
    crypto_generichash_blake2b_update(&st, canon, sizeof canon);
    crypto_generichash_blake2b_update(&st, block, block_len);
    crypto_generichash_blake2b_update(&st, data, total);
    crypto_generichash_blake2b_final(&st, digest, sizeof digest);
    return fed_crypto_verify_digest(pk, digest, sig);
}

/* ---- sender ---- */

fed_err fed_wire_stream_tx_new(fed_wire *w, const fed_wire_hdr *h, const fed_wire_block *b,
                               const uint8_t *data, uint64_t total, size_t chunk_len,
                               fed_random_fn rnd, void *rnd_ctx, fed_wire_stream_tx **out)
{
    size_t max = fed_wire_stream_chunk_max_for(w, h->type, b), first, chunk_frame;
    fed_wire_stream_tx *tx;
    uint8_t *mem;
    fed_err err;

    *out = NULL;
    if (!fed_wire_flags_ok(h->type, FED_WIRE_FLAG_STREAM)) /* its row says it may stream */
        return FED_ERR_INVAL;
    if (w->unsealed)
        return FED_ERR_UNSUPPORTED; /* streams are sealed end to end, always */
    if (!fed_crypto_arena_has_identity(w->arena))
        return FED_ERR_KEY;
    if (chunk_len == 0)
        chunk_len = max;
    if (total == 0 || chunk_len == 0 || chunk_len > max)
        return FED_ERR_INVAL;
    if (div_up(total, chunk_len) > UINT32_MAX)
        return FED_ERR_RANGE;
    tx = fed_alloc_aligned(sizeof *tx); /* the hash state wants 64-byte alignment */
    if (!tx)
        return FED_ERR_NOMEM;
    err = fed_wire_block_encode(h->type, b, tx->block, sizeof tx->block, &tx->block_len);
    if (err != FED_OK)
        goto out;
    err = fed_crypto_slot_take(w->arena, &tx->slot);
    if (err != FED_OK) {
        err = FED_ERR_STREAM_LIMIT;
        goto out;
    }
    tx->h0 = *h;
    tx->data = data;
    tx->total = total;
    tx->chunk_len = (uint32_t)chunk_len;
    tx->chunks = (uint32_t)div_up(total, chunk_len);
    mem = fed_crypto_slot_mem(tx->slot);
    rnd(rnd_ctx, &tx->id, sizeof tx->id);
    rnd(rnd_ctx, mem + SLOT_TX_KEY, 32);
    rnd(rnd_ctx, mem + SLOT_TX_MAC, 32);
    rnd(rnd_ctx, tx->ss_header, sizeof tx->ss_header);
    /* init_pull on our own header builds the state init_push would have. */
    crypto_secretstream_xchacha20poly1305_init_pull(slot_state(tx->slot, SLOT_STATE), tx->ss_header,
                                                    mem + SLOT_TX_KEY);
    first = FED_WIRE_HEADER_BYTES + tx->block_len + FED_WIRE_STREAM_DESC_BYTES +
            FED_CRYPTO_SEAL_OVERHEAD + messages_bytes(total, tx->chunk_len, tx->chunks, 0);
    chunk_frame = tx->chunks > 1 ? FED_WIRE_HEADER_BYTES + FED_WIRE_MAC_BYTES +
                                       messages_bytes(total, tx->chunk_len, tx->chunks, 1)
                                 : 0;
    tx->frame_cap = first > chunk_frame ? first : chunk_frame;
    if (tx->chunks > 2) {
        size_t last = FED_WIRE_HEADER_BYTES + FED_WIRE_MAC_BYTES +
                      messages_bytes(total, tx->chunk_len, tx->chunks, tx->chunks - 1);

        tx->frame_cap = tx->frame_cap > last ? tx->frame_cap : last;
    }
    *out = tx;
    tx = NULL;
out:
    fed_wire_stream_tx_free(w, tx);
    return err;
}

void fed_wire_stream_tx_free(fed_wire *w, fed_wire_stream_tx *tx)
{
    if (!tx)
        return;
    fed_crypto_slot_release(w->arena, tx->slot);
    sodium_memzero(&tx->hash, sizeof tx->hash);
    fed_free(tx);
}

size_t fed_wire_stream_tx_frame_cap(const fed_wire_stream_tx *tx) { return tx->frame_cap; }
uint64_t fed_wire_stream_tx_id(const fed_wire_stream_tx *tx) { return tx->id; }
uint32_t fed_wire_stream_tx_chunks(const fed_wire_stream_tx *tx) { return tx->chunks; }
uint32_t fed_wire_stream_tx_next_index(const fed_wire_stream_tx *tx) { return tx->next; }
int fed_wire_stream_tx_done(const fed_wire_stream_tx *tx) { return tx->next == tx->chunks; }

/* Writes payload0 (typed block || descriptor) at p. */
static void write_first_payload(fed_wire_stream_tx *tx, uint8_t *p)
{
    uint8_t *d = p + tx->block_len, *mem = fed_crypto_slot_mem(tx->slot);

    memcpy(p, tx->block, tx->block_len);
    fed_put_u64le(d + D_ID, tx->id);
    fed_put_u64le(d + D_TOTAL, tx->total);
    fed_put_u32le(d + D_CHUNK, tx->chunk_len);
    fed_put_u32le(d + D_COUNT, tx->chunks);
    memcpy(d + D_KEY, mem + SLOT_TX_KEY, 32);
    memcpy(d + D_MAC, mem + SLOT_TX_MAC, 32);
    memcpy(d + D_HEADER, tx->ss_header, 24);
}

/* Pushes chunk i (and after the last the signature) to out with ad. */
static fed_err push_chunk(fed_wire *w, fed_wire_stream_tx *tx, uint32_t i, const uint8_t *ad,
                          uint8_t *out)
{
    size_t c = chunk_bytes(tx->total, tx->chunk_len, tx->chunks, i);
    const uint8_t *src = tx->data + (uint64_t)i * tx->chunk_len;
    ss_state *st = slot_state(tx->slot, SLOT_STATE);
    uint8_t digest[FED_CRYPTO_DIGEST_BYTES], sig[FED_CRYPTO_SIG_BYTES];
    fed_err err;

    crypto_generichash_blake2b_update(&tx->hash, src, c);
    crypto_secretstream_xchacha20poly1305_push(st, out, NULL, src, c, ad, FED_WIRE_HEADER_BYTES,
                                               TAG_MESSAGE);
    if (i + 1 < tx->chunks)
        return FED_OK;
    crypto_generichash_blake2b_final(&tx->hash, digest, sizeof digest);
    err = fed_crypto_arena_sign(w->arena, digest, sizeof digest, sig);
    if (err != FED_OK)
        return err;
    crypto_secretstream_xchacha20poly1305_push(st, out + c + SS_ABYTES, NULL, sig, sizeof sig, ad,
                                               FED_WIRE_HEADER_BYTES, TAG_FINAL);
    return FED_OK;
}

/* Seals the first frame's AEAD part (payload already in place). */
static fed_err seal_first(fed_wire *w, fed_wire_stream_tx *tx, fed_wire_hdr *h, uint8_t *out,
                          fed_random_fn rnd, void *rnd_ctx)
{
    fed_crypto_session *s = NULL;
    fed_err err;

    rnd(rnd_ctx, h->nonce, sizeof h->nonce);
    fed_wire_hdr_encode(h, out);
    err = fed_crypto_session_get(w->arena, tx->h0.recipient, &s);
    if (err == FED_OK)
        err = fed_crypto_seal(w->arena, s, out, FED_WIRE_HEADER_BYTES, h->nonce,
                              out + FED_WIRE_HEADER_BYTES, h->payload_len, NULL, NULL);
    fed_crypto_session_put(w->arena, s);
    return err;
}

static void first_header(fed_wire *w, const fed_wire_stream_tx *tx, uint64_t seq, fed_wire_hdr *h)
{
    *h = tx->h0;
    h->flags = FED_WIRE_FLAG_STREAM;
    h->seq = seq;
    memcpy(h->sender, fed_wire_self(w), 32);
    memset(h->nonce, 0, sizeof h->nonce);
    h->payload_len = (uint32_t)(tx->block_len + FED_WIRE_STREAM_DESC_BYTES);
}

static fed_err make_first(fed_wire *w, fed_wire_stream_tx *tx, uint64_t seq, fed_random_fn rnd,
                          void *rnd_ctx, uint8_t *out, size_t *len)
{
    uint8_t canon[FED_WIRE_HEADER_BYTES];
    size_t sealed;
    fed_wire_hdr h;
    fed_err err;

    first_header(w, tx, seq, &h);
    sealed = FED_WIRE_HEADER_BYTES + h.payload_len + FED_CRYPTO_SEAL_OVERHEAD;
    fed_wire_hdr_encode(&h, out);
    canonical(out, 1, canon);
    crypto_generichash_blake2b_init(&tx->hash, NULL, 0, FED_CRYPTO_DIGEST_BYTES);
    crypto_generichash_blake2b_update(&tx->hash, canon, sizeof canon);
    crypto_generichash_blake2b_update(&tx->hash, tx->block, tx->block_len);
    err = push_chunk(w, tx, 0, canon, out + sealed);
    if (err != FED_OK)
        return err;
    write_first_payload(tx, out + FED_WIRE_HEADER_BYTES);
    err = seal_first(w, tx, &h, out, rnd, rnd_ctx);
    *len = sealed + messages_bytes(tx->total, tx->chunk_len, tx->chunks, 0);
    return err;
}

static void chunk_header(fed_wire *w, const fed_wire_stream_tx *tx, uint32_t i, uint64_t seq,
                         fed_wire_hdr *h)
{
    *h = tx->h0;
    h->type = FED_WIRE_CHUNK;
    h->flags = FED_WIRE_FLAG_DATA;
    h->seq = seq;
    memcpy(h->sender, fed_wire_self(w), 32);
    memset(h->nonce, 0, sizeof h->nonce);
    fed_put_u64le(h->nonce, tx->id);
    fed_put_u32le(h->nonce + 8, i);
    h->payload_len = (uint32_t)messages_bytes(tx->total, tx->chunk_len, tx->chunks, i);
}

static fed_err make_chunk(fed_wire *w, fed_wire_stream_tx *tx, uint32_t i, uint64_t seq,
                          uint8_t *out, size_t *len)
{
    uint8_t ad[FED_WIRE_HEADER_BYTES];
    fed_wire_hdr h;
    fed_err err;

    chunk_header(w, tx, i, seq, &h);
    fed_wire_hdr_encode(&h, out);
    canonical(out, 0, ad);
    err = push_chunk(w, tx, i, ad, out + FED_WIRE_HEADER_BYTES);
    if (err != FED_OK)
        return err;
    header_mac(out, fed_crypto_slot_mem(tx->slot) + SLOT_TX_MAC,
               out + FED_WIRE_HEADER_BYTES + h.payload_len);
    *len = FED_WIRE_HEADER_BYTES + h.payload_len + FED_WIRE_MAC_BYTES;
    return FED_OK;
}

fed_err fed_wire_stream_tx_next(fed_wire *w, fed_wire_stream_tx *tx, uint64_t seq,
                                fed_random_fn rnd, void *rnd_ctx, uint8_t *out, size_t cap,
                                size_t *len)
{
    fed_err err;

    *len = 0;
    if (tx->next == tx->chunks)
        return FED_ERR_CLOSED;
    if (cap < tx->frame_cap)
        return FED_ERR_TOO_LARGE;
    if (tx->next == 0)
        err = make_first(w, tx, seq, rnd, rnd_ctx, out, len);
    else
        err = make_chunk(w, tx, tx->next, seq, out, len);
    if (err != FED_OK)
        return err;
    tx->next++;
    w->counters.sealed++;
    w->counters.bytes_out += *len;
    return FED_OK;
}

fed_err fed_wire_stream_tx_restamp(fed_wire *w, fed_wire_stream_tx *tx, uint8_t *frame, size_t len,
                                   uint64_t seq, fed_random_fn rnd, void *rnd_ctx)
{
    fed_wire_hdr h;

    if (fed_wire_hdr_decode(frame, len, &h) != FED_OK || len < FED_WIRE_HEADER_BYTES)
        return FED_ERR_INVAL;
    if (h.type == FED_WIRE_CHUNK && h.flags == FED_WIRE_FLAG_DATA) {
        uint32_t i = fed_get_u32le(h.nonce + 8);

        if (fed_get_u64le(h.nonce) != tx->id || i == 0 || i >= tx->next ||
            len != FED_WIRE_HEADER_BYTES + (size_t)h.payload_len + FED_WIRE_MAC_BYTES)
            return FED_ERR_INVAL;
        fed_put_u64le(frame + FED_WIRE_OFF_SEQ, seq);
        header_mac(frame, fed_crypto_slot_mem(tx->slot) + SLOT_TX_MAC,
                   frame + FED_WIRE_HEADER_BYTES + h.payload_len);
        return FED_OK;
    }
    if (h.type != tx->h0.type || h.flags != FED_WIRE_FLAG_STREAM || tx->next == 0 ||
        h.payload_len != tx->block_len + FED_WIRE_STREAM_DESC_BYTES)
        return FED_ERR_INVAL;
    first_header(w, tx, seq, &h);
    write_first_payload(tx, frame + FED_WIRE_HEADER_BYTES);
    return seal_first(w, tx, &h, frame, rnd, rnd_ctx);
}

/* ---- receiver ---- */

static void rx_free(fed_wire *w, fed_wire_stream_rx *rx)
{
    fed_crypto_slot_release(w->arena, rx->slot);
    sodium_memzero(&rx->hash, sizeof rx->hash);
    w->rx_live--;
    fed_free(rx);
}

fed_err fedi_wire_rx_pending(fed_wire *w, const fed_wire_hdr *h, fed_wire_stream_rx **out)
{
    fed_wire_stream_rx *rx;

    *out = NULL;
    if (w->unsealed)
        return FED_ERR_STREAM;
    if (w->rx_live >= w->cfg.max_rx_streams)
        return FED_ERR_STREAM_LIMIT;
    rx = fed_alloc_aligned(sizeof *rx + (size_t)w->cfg.max_rx_streams * sizeof rx->held[0]);
    if (!rx)
        return FED_ERR_NOMEM;
    for (uint32_t i = 0; i < w->cfg.max_rx_streams; i++)
        if (w->rx[i] && memcmp(w->rx[i]->hdr0.sender, h->sender, 32) == 0)
            rx->held[rx->nheld++] = w->rx[i]->id;
    if (fed_crypto_slot_take(w->arena, &rx->slot) != FED_OK) {
        fed_free(rx);
        return FED_ERR_STREAM_LIMIT;
    }
    rx->hdr0 = *h;
    w->rx_live++;
    *out = rx;
    return FED_OK;
}

fed_wire_stream_rx *fed_wire_stream_find(const fed_wire *w, const uint8_t sender[32], uint64_t id)
{
    for (uint32_t i = 0; i < w->cfg.max_rx_streams; i++) {
        fed_wire_stream_rx *rx = w->rx[i];

        if (rx && rx->id == id && memcmp(rx->hdr0.sender, sender, 32) == 0)
            return rx;
    }
    return NULL;
}

size_t fed_wire_stream_count(const fed_wire *w)
{
    size_t n = 0;

    for (uint32_t i = 0; i < w->cfg.max_rx_streams; i++)
        n += w->rx[i] != NULL;
    return n;
}

fed_err fedi_wire_rx_claim(fed_wire *w, const fed_wire_hdr *h, fed_wire_stream_rx **out)
{
    fed_wire_stream_rx *rx = fed_wire_stream_find(w, h->sender, fed_get_u64le(h->nonce));

    *out = NULL;
    if (!rx || rx->broken || rx->closing)
        return FED_ERR_STREAM;
    if (rx->busy)
        return FED_ERR_BUSY;
    rx->busy = 1;
    *out = rx;
    return FED_OK;
}

/* Parses and checks the descriptor; keys go into the slot and are wiped
 * from the frame. */
static fed_err take_descriptor(const fed_wire *w, fed_wire_stream_rx *rx, uint8_t *d, size_t d_len)
{
    uint8_t *mem = fed_crypto_slot_mem(rx->slot);
    fed_err err = FED_OK;

    if (d_len != FED_WIRE_STREAM_DESC_BYTES) {
        if (d_len)
            sodium_memzero(d, d_len);
        return FED_ERR_PAYLOAD;
    }
    rx->id = fed_get_u64le(d + D_ID);
    rx->total = fed_get_u64le(d + D_TOTAL);
    rx->chunk_len = fed_get_u32le(d + D_CHUNK);
    rx->chunks = fed_get_u32le(d + D_COUNT);
    if (rx->total == 0 || rx->total > w->cfg.max_stream_bytes || rx->chunk_len == 0 ||
        rx->chunk_len > chunk_max_of(w, rx->block_len) ||
        div_up(rx->total, rx->chunk_len) != rx->chunks)
        err = FED_ERR_PAYLOAD;
    if (err == FED_OK) {
        memcpy(mem + SLOT_RX_MAC, d + D_MAC, 32);
        crypto_secretstream_xchacha20poly1305_init_pull(slot_state(rx->slot, SLOT_STATE),
                                                        d + D_HEADER, d + D_KEY);
    }
    sodium_memzero(d + D_KEY, D_HEADER - D_KEY);
    return err;
}

/* Pulls one message of exactly want bytes into dst with tag expect. On any
 * failure the state is as before. */
static fed_err pull_one(fed_crypto_slot *slot, uint8_t *dst, size_t want, const uint8_t *msg,
                        const uint8_t *ad, uint8_t expect)
{
    ss_state *st = slot_state(slot, SLOT_STATE), *backup = slot_state(slot, SLOT_RX_BACKUP);
    unsigned long long got = 0;
    unsigned char tag = 0xff;

    memcpy(backup, st, sizeof *st);
    if (crypto_secretstream_xchacha20poly1305_pull(st, dst, &got, &tag, msg, want + SS_ABYTES, ad,
                                                   FED_WIRE_HEADER_BYTES) != 0 ||
        got != want || tag != expect) {
        memcpy(st, backup, sizeof *st);
        return FED_ERR_STREAM;
    }
    return FED_OK;
}

/* Pulls chunk i (and after the last the signature) from msgs, hashing it. */
static fed_err pull_chunk(fed_wire_stream_rx *rx, uint32_t i, const uint8_t *msgs,
                          const uint8_t *ad)
{
    size_t c = chunk_bytes(rx->total, rx->chunk_len, rx->chunks, i);
    uint8_t *dst = rx->dst + (uint64_t)i * rx->chunk_len;
    uint8_t *mem = fed_crypto_slot_mem(rx->slot);
    uint8_t saved[sizeof(ss_state)];
    crypto_generichash_blake2b_state hash;
    uint8_t digest[FED_CRYPTO_DIGEST_BYTES];
    fed_err err;

    err = pull_one(rx->slot, dst, c, msgs, ad, TAG_MESSAGE);
    if (err != FED_OK)
        return err;
    if (i + 1 < rx->chunks) {
        crypto_generichash_blake2b_update(&rx->hash, dst, c);
        return FED_OK;
    }
    /* The last: keep the state before the data message for a rollback. */
    memcpy(saved, mem + SLOT_RX_BACKUP, sizeof saved);
    err = pull_one(rx->slot, rx->sig, FED_CRYPTO_SIG_BYTES, msgs + c + SS_ABYTES, ad, TAG_FINAL);
    if (err != FED_OK) {
        memcpy(mem + SLOT_STATE, saved, sizeof saved);
        sodium_memzero(saved, sizeof saved);
        return err;
    }
    sodium_memzero(saved, sizeof saved);
    hash = rx->hash;
    crypto_generichash_blake2b_update(&hash, dst, c);
    crypto_generichash_blake2b_final(&hash, digest, sizeof digest);
    if (fed_crypto_verify_digest(rx->hdr0.sender, digest, rx->sig) != FED_OK) {
        rx->broken = 1; /* an authentic stream with a bad signature: its sender broke it */
        return FED_ERR_SIGNATURE;
    }
    memcpy(rx->digest, digest, sizeof digest);
    rx->done = 1;
    return FED_OK;
}

fed_err fedi_wire_rx_first(const fed_wire *w, fed_wire_stream_rx *rx, fed_wire_msg *m, uint8_t *rest,
                           size_t rest_len, uint8_t *trailer, size_t trailer_len)
{
    uint8_t canon[FED_WIRE_HEADER_BYTES];
    size_t block_len = (size_t)(rest - m->payload);
    fed_err err;

    rx->block_len = block_len; /* the chunk's bound counts it */
    err = take_descriptor(w, rx, rest, rest_len);

    if (err != FED_OK)
        return err;
    if (trailer_len != messages_bytes(rx->total, rx->chunk_len, rx->chunks, 0))
        return FED_ERR_STREAM;
    for (uint32_t i = 0; i < rx->nheld; i++)
        if (rx->held[i] == rx->id)
            return FED_ERR_REPLAY; /* a resent first frame of a stream we hold */
    memcpy(rx->header0, m->header, FED_WIRE_HEADER_BYTES);
    memcpy(rx->block, m->payload, block_len);
    rx->block_len = block_len;
    rx->blk = m->block;
    if (rx->blk.settings.graph) /* a view: into the block held here now */
        rx->blk.settings.graph =
            (const char *)rx->block + ((const uint8_t *)rx->blk.settings.graph - m->payload);
    if (!w->dst_fn)
        return FED_ERR_UNSUPPORTED;
    err = w->dst_fn(w->dst_ctx, m, rx->total, &rx->dst);
    if (err != FED_OK)
        return err;
    if (!rx->dst)
        return FED_ERR_INVAL;
    canonical(m->header, 1, canon);
    crypto_generichash_blake2b_init(&rx->hash, NULL, 0, FED_CRYPTO_DIGEST_BYTES);
    crypto_generichash_blake2b_update(&rx->hash, canon, sizeof canon);
    crypto_generichash_blake2b_update(&rx->hash, rx->block, rx->block_len);
    err = pull_chunk(rx, 0, trailer, canon);
    if (err != FED_OK)
        return err;
    rx->received = chunk_bytes(rx->total, rx->chunk_len, rx->chunks, 0);
    rx->next = 1;
    m->stream_done = rx->done;
    return FED_OK;
}

fed_err fedi_wire_rx_data(const fed_wire *w, fed_wire_stream_rx *rx, const uint8_t *frame,
                          size_t len, fed_wire_msg *m)
{
    const fed_wire_hdr *h = &m->hdr;
    uint8_t mac[FED_WIRE_MAC_BYTES], ad[FED_WIRE_HEADER_BYTES];
    uint32_t i = fed_get_u32le(h->nonce + 8);
    fed_err err;

    (void)w;
    (void)len; /* the cheap checks fixed len = header + payload + MAC */
    header_mac(frame, fed_crypto_slot_mem(rx->slot) + SLOT_RX_MAC, mac);
    if (sodium_memcmp(mac, frame + FED_WIRE_HEADER_BYTES + h->payload_len, sizeof mac) != 0)
        return FED_ERR_AEAD;
    if (h->sender_epoch != rx->hdr0.sender_epoch || h->round != rx->hdr0.round ||
        h->codec != rx->hdr0.codec)
        return FED_ERR_STREAM;
    if (rx->done || i < rx->next)
        return FED_ERR_REPLAY; /* a resend of a chunk we have */
    if (i > rx->next)
        return FED_ERR_STREAM; /* reordered */
    if (h->payload_len != messages_bytes(rx->total, rx->chunk_len, rx->chunks, i))
        return FED_ERR_STREAM;
    canonical(frame, 0, ad);
    err = pull_chunk(rx, i, frame + FED_WIRE_HEADER_BYTES, ad);
    if (err != FED_OK)
        return err;
    rx->received += chunk_bytes(rx->total, rx->chunk_len, rx->chunks, i);
    rx->next = i + 1;
    m->stream_done = rx->done;
    return FED_OK;
}

static int free_entry(const fed_wire *w)
{
    for (uint32_t i = 0; i < w->cfg.max_rx_streams; i++)
        if (!w->rx[i])
            return (int)i;
    return -1;
}

fed_err fedi_wire_rx_settle_first(fed_wire *w, fed_wire_stream_rx *rx, fed_err result)
{
    int at;

    if (result == FED_OK && fed_wire_stream_find(w, rx->hdr0.sender, rx->id))
        result = FED_ERR_REPLAY; /* registered while this one was opening */
    if (result != FED_OK) {
        rx_free(w, rx);
        return result;
    }
    at = free_entry(w);
    assert(at >= 0); /* rx_live counted this one */
    w->rx[at] = rx;
    rx->registered = 1;
    w->counters.streams_begun++;
    if (rx->done)
        w->counters.streams_done++;
    return FED_OK;
}

void fedi_wire_rx_settle_data(fed_wire *w, fed_wire_stream_rx *rx, fed_err result)
{
    rx->busy = 0;
    if (result == FED_OK && rx->done)
        w->counters.streams_done++;
    if (rx->closing)
        fed_wire_stream_close(w, rx);
}

void fed_wire_stream_close(fed_wire *w, fed_wire_stream_rx *rx)
{
    if (!rx)
        return;
    if (rx->busy) {
        rx->closing = 1;
        return;
    }
    if (rx->registered) {
        for (uint32_t i = 0; i < w->cfg.max_rx_streams; i++)
            if (w->rx[i] == rx)
                w->rx[i] = NULL;
        if (!rx->done) {
            w->counters.streams_failed++;
            fed_log(FED_LOG_INFO, "wire: stream %016llx closed after %llu of %llu bytes",
                    (unsigned long long)rx->id, (unsigned long long)rx->received,
                    (unsigned long long)rx->total);
        }
    }
    rx_free(w, rx);
}

const uint8_t *fed_wire_stream_rx_sender(const fed_wire_stream_rx *rx) { return rx->hdr0.sender; }
uint64_t fed_wire_stream_rx_id(const fed_wire_stream_rx *rx) { return rx->id; }
uint64_t fed_wire_stream_rx_total(const fed_wire_stream_rx *rx) { return rx->total; }
uint64_t fed_wire_stream_rx_received(const fed_wire_stream_rx *rx) { return rx->received; }
uint32_t fed_wire_stream_rx_chunks(const fed_wire_stream_rx *rx) { return rx->chunks; }
uint32_t fed_wire_stream_rx_next(const fed_wire_stream_rx *rx) { return rx->next; }
int fed_wire_stream_rx_done(const fed_wire_stream_rx *rx) { return rx->done; }

fed_err fed_wire_stream_rx_status(const fed_wire_stream_rx *rx)
{
    return rx->done && !rx->broken ? FED_OK : FED_ERR_STREAM;
}

const fed_wire_hdr *fed_wire_stream_rx_hdr(const fed_wire_stream_rx *rx) { return &rx->hdr0; }
const uint8_t *fed_wire_stream_rx_header(const fed_wire_stream_rx *rx) { return rx->header0; }

const uint8_t *fed_wire_stream_rx_block_bytes(const fed_wire_stream_rx *rx, size_t *len)
{
    *len = rx->block_len;
    return rx->block;
}

const fed_wire_block *fed_wire_stream_rx_block(const fed_wire_stream_rx *rx) { return &rx->blk; }
const uint8_t *fed_wire_stream_rx_digest(const fed_wire_stream_rx *rx) { return rx->digest; }
const uint8_t *fed_wire_stream_rx_sig(const fed_wire_stream_rx *rx) { return rx->sig; }
uint8_t *fed_wire_stream_rx_dst(const fed_wire_stream_rx *rx) { return rx->dst; }
