/* wire_impl.h - what gossip/wire.c and gossip/stream.c share and nobody
 * else may touch: the fed_wire struct and the stream hooks of the receive
 * path. */
#ifndef FED_GOSSIP_WIRE_IMPL_H
#define FED_GOSSIP_WIRE_IMPL_H

#include "crypto/replay.h"
#include "gossip/stream.h"
#include "gossip/wire.h"

enum { FED_WIRE_KIND_SEALED = 1, FED_WIRE_KIND_FIRST = 2, FED_WIRE_KIND_DATA = 3 };

struct fed_wire {
    fed_wire_cfg cfg;
    int unsealed;                  /* fed_wire_cfg_unsealed(&cfg): frames in the clear */
    fed_crypto_arena *arena;       /* borrowed */
    const fed_crypto_allow *allow; /* borrowed */
    uint64_t epoch;
    fed_wire_member_fn member_fn;
    void *member_ctx;
    fed_wire_dst_fn dst_fn;
    void *dst_ctx;
    fed_crypto_replay *replay;
    fed_wire_counters counters;
    fed_wire_stream_rx **rx; /* (cfg.max_rx_streams) registered streams, NULL = free */
    uint32_t rx_live;        /* registered + pending (held by a ticket) */
};

/* ---- stream hooks (stream.c) ---- */

/* precheck, first frame: a pending stream holding a slot.
 * FED_ERR_STREAM_LIMIT, FED_ERR_NOMEM. */
FED_WUR fed_err fedi_wire_rx_pending(fed_wire *w, const fed_wire_hdr *h, fed_wire_stream_rx **out);
/* precheck, CHUNK data: the registered stream the header names, marked busy.
 * FED_ERR_STREAM: none; FED_ERR_BUSY: a chunk of it is being opened. */
FED_WUR fed_err fedi_wire_rx_claim(fed_wire *w, const fed_wire_hdr *h, fed_wire_stream_rx **out);
/* open_ticket, first frame: after the AEAD part opened and the block parsed
 * into m; rest is the payload after the typed block, trailer the bytes after
 * the AEAD part. */
FED_WUR fed_err fedi_wire_rx_first(const fed_wire *w, fed_wire_stream_rx *rx, fed_wire_msg *m,
                                   uint8_t *rest, size_t rest_len, uint8_t *trailer,
                                   size_t trailer_len);
/* open_ticket, CHUNK data frame. */
FED_WUR fed_err fedi_wire_rx_data(const fed_wire *w, fed_wire_stream_rx *rx, const uint8_t *frame,
                                  size_t len, fed_wire_msg *m);
/* finish, first frame: registers a pending stream (result FED_OK), else
 * frees it. Returns the final verdict. */
FED_WUR fed_err fedi_wire_rx_settle_first(fed_wire *w, fed_wire_stream_rx *rx, fed_err result);
/* finish, CHUNK data: unbusies; closes it if it was closed meanwhile or if
 * result proves the sender broke the stream. */
void fedi_wire_rx_settle_data(fed_wire *w, fed_wire_stream_rx *rx, fed_err result);

#endif
