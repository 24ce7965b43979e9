/* stream.h - payloads larger than one frame, as CHUNK streams.
 * A stream is one crypto_secretstream_xchacha20poly1305 (ordered, with a
 * final tag, so truncation and reordering are detected). Its key, a header
 * MAC key and its 24-byte header come from the caller's RNG: the push state
 * is built with init_pull on that header, which in libsodium 1.0.18 builds
 * exactly the state init_push builds after drawing the header itself (a test
 * keeps proving it), so the simulator stays deterministic.
 *
 * First frame: a sealed MODEL, DELTA, SHARE, SLICE or SA_MASKED with FED_WIRE_FLAG_STREAM whose
 * payload is its typed block followed by this descriptor (little-endian):
 *   off  size  field
 *     0     8  stream id (drawn by the sender; names the stream in CHUNK frames)
 *     8     8  total bytes of the vector
 *    16     4  chunk bytes (every chunk but the last)
 *    20     4  chunk count (ceil(total / chunk bytes))
 *    24    32  secretstream key
 *    56    32  header MAC key
 *    88    24  secretstream header
 *   112
 * and, after its AEAD tag, message 0: chunk 0 (TAG_MESSAGE).
 * CHUNK data frame i (1 <= i < count): header (type CHUNK, flag DATA, the
 * nonce field holding stream id and i) || message i || MAC, where MAC is
 * BLAKE2b-128 keyed with the MAC key over the 136 header bytes.
 * The frame holding the last chunk also carries a TAG_FINAL message whose
 * plaintext is the stream's one signature: Ed25519 over BLAKE2b(canonical
 * first header || typed block || vector), the canonical header being the
 * first frame's with its sequence number and nonce zeroed (so the first
 * frame can be resent with fresh ones). Each message's associated data is
 * the header of the frame carrying it with the sequence number zeroed (and
 * in the first frame the nonce too), so a resend needs only a new sequence
 * number and, for CHUNK frames, a new MAC.
 *
 * Pull protocol (gossip/wire.h's "Transport"): a MODEL reply is the first
 * frame; the client asks for chunk i with a sealed CHUNK PULL request; a large
 * DELTA or SHARE goes out as its first frame and then CHUNK data requests,
 * one at a time, each answered by ACK. A chunk already received is refused
 * as FED_ERR_REPLAY (answer ACK: it is a resend), one ahead of the next
 * expected as FED_ERR_STREAM.
 * Memory: the receiver writes each chunk straight from the frame into the
 * destination buffer (fed_wire_set_stream_dst), so a reassembly holds the
 * model plus the one frame in hand. At most cfg.max_rx_streams reassemblies
 * run at once (FED_ERR_STREAM_LIMIT). */
#ifndef FED_GOSSIP_STREAM_H
#define FED_GOSSIP_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"
#include "gossip/wire.h"

#define FED_WIRE_STREAM_DESC_BYTES 112
#define FED_WIRE_STREAM_ABYTES 17 /* crypto_secretstream_xchacha20poly1305_ABYTES */
#define FED_WIRE_STREAM_FINAL_BYTES (FED_CRYPTO_SIG_BYTES + FED_WIRE_STREAM_ABYTES)
/* Bytes of a CHUNK data frame around its chunk (final message included). */
#define FED_WIRE_CHUNK_OVERHEAD                                                                    \
    (FED_WIRE_HEADER_BYTES + FED_WIRE_STREAM_ABYTES + FED_WIRE_STREAM_FINAL_BYTES +                \
     FED_WIRE_MAC_BYTES)

typedef struct fed_wire_stream_tx fed_wire_stream_tx;

/* The largest chunk with which every frame of a type's stream fits max_frame. */
size_t fed_wire_stream_chunk_max(const fed_wire *w, uint8_t type);
/* The same beside b's block as this node encodes it (a MODEL's graph field
 * takes room in the first frame). */
size_t fed_wire_stream_chunk_max_for(const fed_wire *w, uint8_t type, const fed_wire_block *b);

/* ---- sender (loop thread: it pins sessions and counts) ---- */

/* A stream of data (total >= 1 bytes, borrowed until the last frame is made)
 * to h->recipient. h gives type (MODEL, DELTA, SHARE, SLICE or SA_MASKED), recipient, epochs,
 * round and codec; b is the typed block. chunk_len 0 picks the largest that
 * fits. Takes an arena slot: FED_ERR_STREAM_LIMIT when none is free. */
FED_WUR fed_err fed_wire_stream_tx_new(fed_wire *w, const fed_wire_hdr *h, const fed_wire_block *b,
                                       const uint8_t *data, uint64_t total, size_t chunk_len,
                                       fed_random_fn rnd, void *rnd_ctx, fed_wire_stream_tx **out);
void fed_wire_stream_tx_free(fed_wire *w, fed_wire_stream_tx *tx);
/* Writes the next frame (the first, then CHUNK data frames) with sequence
 * number seq into out (cap >= fed_wire_stream_tx_frame_cap). FED_ERR_CLOSED:
 * every frame was made. */
FED_WUR fed_err fed_wire_stream_tx_next(fed_wire *w, fed_wire_stream_tx *tx, uint64_t seq,
                                        fed_random_fn rnd, void *rnd_ctx, uint8_t *out, size_t cap,
                                        size_t *len);
/* Gives a frame this stream made a new sequence number (and the first frame
 * a new nonce: it is sealed again), for a resend. A receiver that already
 * holds the stream refuses a second first frame as FED_ERR_REPLAY. */
FED_WUR fed_err fed_wire_stream_tx_restamp(fed_wire *w, fed_wire_stream_tx *tx, uint8_t *frame,
                                           size_t len, uint64_t seq, fed_random_fn rnd,
                                           void *rnd_ctx);
size_t fed_wire_stream_tx_frame_cap(const fed_wire_stream_tx *tx);
uint64_t fed_wire_stream_tx_id(const fed_wire_stream_tx *tx);
uint32_t fed_wire_stream_tx_chunks(const fed_wire_stream_tx *tx);
/* The index the next fed_wire_stream_tx_next makes (0 = the first frame). */
uint32_t fed_wire_stream_tx_next_index(const fed_wire_stream_tx *tx);
int fed_wire_stream_tx_done(const fed_wire_stream_tx *tx);

/* ---- receiver ---- */

fed_wire_stream_rx *fed_wire_stream_find(const fed_wire *w, const uint8_t sender[32], uint64_t id);
size_t fed_wire_stream_count(const fed_wire *w);
/* Ends a reassembly (done or not: an unfinished one counts as failed) and
 * frees its slot; the destination buffer is the caller's. A stream whose
 * chunk is being opened right now is closed when that ends. */
void fed_wire_stream_close(fed_wire *w, fed_wire_stream_rx *rx);
const uint8_t *fed_wire_stream_rx_sender(const fed_wire_stream_rx *rx);
uint64_t fed_wire_stream_rx_id(const fed_wire_stream_rx *rx);
uint64_t fed_wire_stream_rx_total(const fed_wire_stream_rx *rx);
uint64_t fed_wire_stream_rx_received(const fed_wire_stream_rx *rx);
uint32_t fed_wire_stream_rx_chunks(const fed_wire_stream_rx *rx);
/* The next chunk index expected (what a PULL request asks for). */
uint32_t fed_wire_stream_rx_next(const fed_wire_stream_rx *rx);
int fed_wire_stream_rx_done(const fed_wire_stream_rx *rx);
/* FED_OK when complete and verified; FED_ERR_STREAM when it ended early
 * (truncated) or broke. */
FED_WUR fed_err fed_wire_stream_rx_status(const fed_wire_stream_rx *rx);
const fed_wire_hdr *fed_wire_stream_rx_hdr(const fed_wire_stream_rx *rx);
/* The first frame's header as received (136 bytes), its typed block (raw
 * and decoded), and - once done - the digest and signature for the record. */
const uint8_t *fed_wire_stream_rx_header(const fed_wire_stream_rx *rx);
const uint8_t *fed_wire_stream_rx_block_bytes(const fed_wire_stream_rx *rx, size_t *len);
const fed_wire_block *fed_wire_stream_rx_block(const fed_wire_stream_rx *rx);
const uint8_t *fed_wire_stream_rx_digest(const fed_wire_stream_rx *rx);
const uint8_t *fed_wire_stream_rx_sig(const fed_wire_stream_rx *rx);
uint8_t *fed_wire_stream_rx_dst(const fed_wire_stream_rx *rx);

/* An auditor's check of a stream's signature: header0 is the first frame's
 * header (as received; sequence and nonce are zeroed here). */
FED_WUR fed_err fed_wire_stream_verify(const uint8_t pk[32],
                                       const uint8_t header0[FED_WIRE_HEADER_BYTES],
                                       const uint8_t *block, size_t block_len, const uint8_t *data,
                                       uint64_t total, const uint8_t sig[FED_CRYPTO_SIG_BYTES]);

#endif
