/* wire.h - frames: the bytes every node sends, and the receiver's checks.
 *
 * Frame header (136 bytes, little-endian, plain, bound as associated data):
 *   off  size  field
 *     0     4  magic "FEDN"
 *     4     1  version = 4 (3 had fields in MODEL's block only, every other
 *              block fixed; 2 had a fixed 176-byte MODEL block; 1 signed
 *              BLAKE2b-512(header || payload), see crypto/envelope.h). A frame
 *              of another version is refused (rej_version) and logged at
 *              warning level with both versions and the sender
 *     5     1  type (fed_wire_type)
 *     6     2  flags (FED_WIRE_FLAG_*; others zero)
 *     8    32  sender key (Ed25519 public)
 *    40    32  recipient key
 *    72     8  sender epoch
 *    80     8  recipient epoch, as the sender last learned it (0 in a HELLO,
 *              in the CHUNK data frames of a stream whose first frame said 0,
 *              and in a SHARE, SLICE, AR_ABORT, AR_VERIFY or PEERS: push-sum
 *              totals only grow, peer entries are signed and expire, and a
 *              restarted member holds no all-reduce a replayed frame could
 *              enter, so one
 *              replayed after the recipient restarted adds nothing it lacks)
 *    88     8  sequence number (per sender, recipient and sender epoch)
 *    96     8  round
 *   104    24  nonce (XChaCha20-Poly1305); in a CHUNK data frame instead:
 *              stream id (8), chunk index (4), zero (12)
 *   128     4  payload length (bytes of plaintext payload)
 *   132     2  codec of the vector (fed_codec_id of model/codec.h; 0 = none)
 *   134     2  reserved, zero
 *   136        (end)
 *
 * Three kinds of frame:
 *   sealed         header || AEAD(payload || signature) || tag
 *                  (136 + len + 80 bytes; crypto/envelope.h)
 *   stream first   a sealed MODEL, DELTA, SHARE, SLICE or SA_MASKED (a client's
 *                  masked input; no other SA_* type) with FED_WIRE_FLAG_STREAM
 *                  whose payload is typed block || stream descriptor, then
 *                  the stream's first message(s) (gossip/stream.h)
 *   CHUNK data     header (flag DATA) || stream message(s) || MAC (16)
 * Payload of a sealed frame: a typed block (below), then the vector (codec
 * encoded; for PEERS, count signed peer entries, gossip/peers.h). Nothing private (sample counts,
 * sizes of local data) is in the header.
 *
 * Every frame type has one row in a table (fed_wire_type_info, below; the
 * rows live in wire.c): its name (in logs), the header flags it may
 * carry, whether it may address recipient epoch 0, its block's fixed part,
 * its known fields and what follows the block (its payload codec). The
 * header checks, the block codec, the vector's size check and the fuzz
 * targets read that table.
 *
 * Typed blocks (little-endian; reserved bytes zero). Every block is its
 * type's fixed part F, then its fields, so any message can grow:
 *     0 F  fixed part (per type, below)
 *     F 4  S, bytes of fields that follow (at most FED_WIRE_FIELDS_MAX)
 *   F+4 S  fields, in strictly increasing tag order (so no tag twice), each:
 *            0 2 tag (per type; 0 is never a tag)
 *            2 2 flags: FED_WIRE_FIELD_REQUIRED, others zero
 *            4 4 length L of the value
 *            8 L value
 *          A field whose tag this node does not know is skipped, unless it
 *          is marked required: then the frame is refused
 *          (FED_ERR_FIELD_REQUIRED, its tag logged). A field running past S
 *          or S past the block: FED_ERR_FIELD_TRUNCATED; a tag repeated or
 *          out of order: FED_ERR_FIELD_ORDER; a known field's length outside
 *          its bounds, or S over FED_WIRE_FIELDS_MAX: FED_ERR_FIELD_LENGTH;
 *          a field the type must have, absent: FED_ERR_FIELD_MISSING. All
 *          are counted as rej_payload. This node writes every field its type
 *          knows, in tag order, each at its most length, so the block it
 *          writes is fed_wire_block_size(type) bytes; a newer node's may be
 *          longer. A type with no fields yet is written with S = 0.
 *
 *   type     F   fixed part                                       fields
 *   HELLO   16   0 1 role (FED_WIRE_ROLE_*)  1 7 reserved  8 8 caps    -
 *   NEXT     8   0 8 last round the client finished (0: none)          -
 *   MODEL    8   0 8 samples behind the model                  settings
 *   DELTA   16   0 8 samples   8 8 base round (the model it started from)
 *                                                               DP report
 *   ACK      8   0 4 status (a fed_err; 0: accepted)  4 4 flags (FED_WIRE_ACK_*)
 *   SHARE   16   0 8 samples   8 8 push-sum weight (f64, finite, >= 0)  -
 *   PEERS    8   0 4 count of peer entries that follow (each at least
 *                FED_WIRE_PEER_ENTRY_MIN bytes; gossip/peers.h)  4 4 reserved
 *   LEAVE    8   0 4 reason (a fed_err)   4 4 reserved         DP report
 *                A client declines the round (FED_ERR_DP_BUDGET,
 *                FED_ERR_DP_REQUIRED) instead of sending a delta; the
 *                aggregator records it and ACKs
 *   CHUNK   16   (PULL request) 0 8 stream id  8 4 chunk index wanted
 *                12 4 reserved                                          -
 *   SA_*    16   0 4 try   4 4 count of entries in the vector   8 8 reserved
 *                (node/secagg_msg_impl.h draws each stage's vector, request and
 *                answer; the answer has the request's type)     SA_MASKED:
 *                                                                segments
 *   SLICE   16   0 8 all-reduce step (gossip/allreduce.h)  8 8 reserved; the
 *                vector (f64) is the range that step sends, the weight inside
 *                it as the last element of the whole (never in the block).
 *                The step's high 32 bits are the round's attempt (a redo
 *                over fewer members is attempt 1, 2, ...)              -
 *   AR_ABORT 16  0 8 attempt given up  8 4 count of member keys that follow
 *                (32 bytes each: the members to leave out)  12 4 reserved;
 *                codec 0                                                -
 *   AR_VERIFY 48 0 8 attempt  8 8 members in a row, ending with the
 *                sender, whose results match (1..n)  16 32 the result's hash
 *                (BLAKE2b-256 of the members' keys and the sums); codec 0 -
 *
 * MODEL's fields (settings), every one required but 11 and 12:
 *     tag  L      value
 *       1  1..128 model spec (model/model.h), printable ASCII,
 *                 NUL-terminated, zeros after the NUL (this node pads it
 *                 to 128)
 *       2  4    local epochs (u32)
 *       3  4    batch size (u32)
 *       4  1    optimizer (fed_optim_kind)
 *       5  2    codec for the DELTA (fed_codec_id)
 *       6  4    topk fraction (f32, in [0, 1])
 *       7  4    learning rate (f32 > 0): this round's, on the sender's
 *               schedule
 *       8  4    proximal mu (f32 >= 0)
 *       9  8    deadline in ms (u64; 0: none)
 *      10  4    SGD momentum (f32 in [0, 1); 0: plain SGD)
 *      11  12   DP-SGD: flags u32 (FED_WIRE_DP_REQUIRED, others zero), clip
 *               f32 > 0 and noise multiplier f32 >= 0 when required, else
 *               both 0. Absent (a node before it): nothing required
 *      12  28   secure aggregation: on u32 (1), try u32, bits u32 (1..32),
 *               range f32 > 0, L2 clip f32 >= 0, max weight f32 > 0,
 *               dropout f32 in [0, 1). Absent or all zero: off; marked
 *               required when on
 *      13  3..16383 the model's graph, the whole "g:..." spec (model/model.h)
 *               whose id (fed_model_spec_id: "g#" and its hash) field 1
 *               holds; printable ASCII, no NUL. Present only with such an
 *               id, and then required: a graph longer than a spec travels
 *               whole, never capped at 127 bytes. Parsed as untrusted input
 *               (its id checked here; its size and cost by the client)
 *      14  16..24592 shared statistics (federated analytics, model/colstats.h):
 *               mode u32 (1: this round is the statistics pass: the client
 *               trains nothing and contributes its columns' statistics; 2:
 *               standardize with the statistics that follow), columns u32
 *               (1..1024), the minimum count u64 (mode 1: a column with
 *               fewer present values releases nothing), then with mode 2
 *               per column mean f64 (finite), std f64 (finite, > 0) and
 *               missing rate f64 (in [0, 1]: the share of its cells empty).
 *               Mode 1 may go on with DP statistics (--feature-bounds):
 *               the noise multiplier f64 (finite, > 0), then per column
 *               the bounds LO f64 and HI f64 (LO < HI, |LO|, |HI| < 2^30):
 *               the client clips into them and noises its integers
 *               (model/colstats.h's fed_colstats_dp).
 *               Present only with a mode, and then required: a client that
 *               does not know it would train on its own file's scaling
 *      15  16   the model's input, declared: C, H, W and classes (u32
 *               each, 1..FED_WIRE_INPUT_MAX), what the model is built
 *               over; a client whose data has this sample shape and labels
 *               below these classes builds the same model, one with a
 *               label beyond declines. Optional (absent: the client builds
 *               over its own data's shape and largest label)
 *      16  8..263 the tensors' paths (node/layout.h): flags u32
 *               (FED_WIRE_PATHS_LOCAL_BN, FED_WIRE_PATHS_STATS_LOCAL,
 *               FED_WIRE_PATHS_FEDNOVA, FED_WIRE_PATHS_SCAFFOLD: the
 *               strategy's extra segment, node/layout.h), the
 *               statistics segment's secure range f32 (> 0 with field 12
 *               on, else 0), then --local-layers' globs (0..255 bytes,
 *               printable ASCII, no NUL). Present only when some tensor
 *               does not take the trained path, and then required: a node
 *               that ignored it would send what must stay at its site
 *      17  8    site evaluation: every N rounds u32 (>= 1), the classes
 *               the statistics cover u32 (1..FED_WIRE_INPUT_MAX; 1: a
 *               regression's moments): in a
 *               round r with r % N == 0 (but the statistics pass) the
 *               client evaluates the model it received on its validation
 *               split and adds the statistics to its contribution
 *               (node/site_eval.h). Present only with --eval-every, and
 *               then required: a client that does not know it would send
 *               a contribution of the wrong length
 *      18  8    SCAFFOLD: u64, bit k set when round (this one - 1 - k)
 *               closed with no update (a void secure round), so a client
 *               knows whether the delta (and control change) it sent then
 *               was merged. Present with FED_WIRE_PATHS_SCAFFOLD only, and
 *               then required
 *      19  8..128 knobs, an extensible list of the model's and the
 *               optimizer's settings: entries of 8 bytes, id u16
 *               (strictly increasing), flags u16 (FED_WIRE_KNOB_REQUIRED: a
 *               receiver that does not know the id refuses the round), a
 *               value of 4 bytes; a knob at its default is left out.
 *               Known: 1 weight decay (f32 > 0, finite; SGD's L2 term,
 *               Adam's decoupled decay), 2 input scale (u32: 1 unit, pixels
 *               b / 255 in [0, 1]; absent: centred, b / 127.5 - 1), 3 Ditto's
 *               lambda (f32 > 0: each client also trains its personal
 *               model, pulled toward the global one). Present
 *               only with a knob, and then required. A new knob is a new id
 *               here
 *   This node marks 1-10 required, 11 when it requires DP-SGD, 12 when on,
 *   13, 14, 16, 17, 18 and 19 when present, 15 when its input is declared
 *   (optional): its MODEL block is FED_WIRE_MODEL_BLOCK_BYTES (311), 8 + the
 *   graph's length more with 13, 8 + 16 (+ 24 a column with mode 2) more
 *   with 14, 24 more with 15, 16 + the globs' with 16, 16 more with 17 and
 *   with 18, 8 + 8 a knob with 19. MODEL's fields may take
 *   FED_WIRE_SETTINGS_MAX bytes.
 * DELTA's and LEAVE's fields:
 *     tag  L    value
 *       1  16   DP report (optional): the client's epsilon spent so far
 *               (f64 >= 0) and its budget (f64 >= 0; 0: none), both 0 from
 *               a client that keeps no account. DELTA 44 bytes, LEAVE 36.
 *       2  12..68 DELTA, and SA_MASKED's only field: the vector's segments
 *               (node/agg_input_impl.h): count u32 (1..8), then per segment its
 *               floats u32 and its weight rule u32 (0 samples, 1 mean, 2
 *               sum); the vector holds them back to back (a masked input's
 *               last, its weight word). Present only when the vector is not
 *               the whole flat buffer (field 16), and then required.
 * The receiver checks, in this order, before any expensive work: size limits
 * (FED_ERR_FRAME_TOO_LARGE, FED_ERR_FRAME_TRUNCATED); magic and version
 * (FED_ERR_FRAME_MAGIC, FED_ERR_FRAME_VERSION); type and flags
 * (FED_ERR_FRAME_TYPE); declared length against the bytes
 * (TRUNCATED / TOO_LARGE); recipient is itself (FED_ERR_WRONG_RECIPIENT) and
 * its current epoch (FED_ERR_OLD_EPOCH; a HELLO, SHARE or PEERS may say 0); sender is a member
 * (FED_ERR_UNKNOWN_SENDER); the replay window (FED_ERR_SENDER_EPOCH,
 * FED_ERR_REPLAY; the sequence is reserved here); the stream it belongs to or
 * starts (FED_ERR_STREAM, FED_ERR_STREAM_LIMIT). Then it opens the AEAD
 * (FED_ERR_AEAD), verifies the signature (FED_ERR_SIGNATURE), parses the typed
 * block (FED_ERR_PAYLOAD, FED_ERR_FIELD_*), checks what follows it against
 * its type's row (FED_ERR_PAYLOAD), and commits the sequence - or releases it
 * on any failure. Each rejection bumps its counter and logs one line.
 *
 * Threading: a fed_wire belongs to its node's loop thread, except
 * fed_wire_open_ticket and fed_wire_seal_ticket, which touch only their
 * ticket, frame and what the ticket pinned, and may run on any thread (a job). */
#ifndef FED_GOSSIP_WIRE_H
#define FED_GOSSIP_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"
#include "crypto/allow.h"
#include "crypto/arena.h"
#include "crypto/envelope.h"

#define FED_WIRE_MAGIC "FEDN"
#define FED_WIRE_VERSION 4
#define FED_WIRE_HEADER_BYTES 136
#define FED_WIRE_SEAL_OVERHEAD (FED_WIRE_HEADER_BYTES + FED_CRYPTO_SEAL_OVERHEAD) /* 216 */
#define FED_WIRE_MAC_BYTES 16
#define FED_WIRE_SPEC_BYTES 128
/* Typed blocks' fields (the table above). */
#define FED_WIRE_FIELDS_MAX 1024 /* bytes of fields any block may carry, but MODEL */
#define FED_WIRE_GRAPH_MAX 16383 /* MODEL's graph field (13): FED_MODEL_GRAPH_MAX - 1 */
#define FED_WIRE_STATS_COLS_MAX 1024 /* MODEL's statistics field (14): columns */
#define FED_WIRE_STATS_COL_BYTES 24 /* mean, std, missing rate: f64 each */
#define FED_WIRE_STATS_BOUND_BYTES 16 /* the pass's DP bounds: lo, hi f64 each */
#define FED_WIRE_STATS_MAX (16 + FED_WIRE_STATS_COL_BYTES * FED_WIRE_STATS_COLS_MAX)
/* MODEL's fields: the same bound, and room for its graph and statistics */
#define FED_WIRE_SETTINGS_MAX (FED_WIRE_FIELDS_MAX + 8 + FED_WIRE_GRAPH_MAX + 8 + FED_WIRE_STATS_MAX)
#define FED_WIRE_FIELDS_LEN_BYTES 4 /* S, after the fixed part */
#define FED_WIRE_FIELD_HEAD_BYTES 8
#define FED_WIRE_FIELD_REQUIRED 0x0001u /* a receiver that does not know the tag refuses */
#define FED_WIRE_FIXED_MAX 48           /* the largest fixed part (AR_VERIFY) */
#define FED_WIRE_MODEL_BLOCK_BYTES 311  /* the MODEL block this node writes */
/* The largest typed block a receiver takes (fields up to their bound). */
#define FED_WIRE_BLOCK_MAX (FED_WIRE_FIXED_MAX + FED_WIRE_FIELDS_LEN_BYTES + FED_WIRE_SETTINGS_MAX)
#define FED_WIRE_MAX_FRAME_DEFAULT ((size_t)16 << 20)
#define FED_WIRE_MAX_FRAME_LIMIT ((size_t)1 << 30)
#define FED_WIRE_MIN_FRAME 1024

/* Header field offsets (for tests and tools that poke at frames). */
#define FED_WIRE_OFF_TYPE 5
#define FED_WIRE_OFF_FLAGS 6
#define FED_WIRE_OFF_SENDER 8
#define FED_WIRE_OFF_RECIPIENT 40
#define FED_WIRE_OFF_SENDER_EPOCH 72
#define FED_WIRE_OFF_RECIPIENT_EPOCH 80
#define FED_WIRE_OFF_SEQ 88
#define FED_WIRE_OFF_ROUND 96
#define FED_WIRE_OFF_NONCE 104
#define FED_WIRE_OFF_LEN 128
#define FED_WIRE_OFF_CODEC 132

typedef enum fed_wire_setting_tag {
    FED_WIRE_SET_SPEC = 1,
    FED_WIRE_SET_LOCAL_EPOCHS = 2,
    FED_WIRE_SET_BATCH = 3,
    FED_WIRE_SET_OPTIMIZER = 4,
    FED_WIRE_SET_CODEC = 5,
    FED_WIRE_SET_FRACTION = 6,
    FED_WIRE_SET_LR = 7,
    FED_WIRE_SET_MU = 8,
    FED_WIRE_SET_DEADLINE = 9,
    FED_WIRE_SET_MOMENTUM = 10,
    FED_WIRE_SET_DP_SGD = 11,
    FED_WIRE_SET_SECAGG = 12,
    FED_WIRE_SET_GRAPH = 13,
    FED_WIRE_SET_STATS = 14,
    FED_WIRE_SET_INPUT = 15,
    FED_WIRE_SET_PATHS = 16,
    FED_WIRE_SET_SITE_EVAL = 17,
    FED_WIRE_SET_SCAFFOLD = 18,
    FED_WIRE_SET_KNOBS = 19,
} fed_wire_setting_tag;
#define FED_WIRE_SET_TAG_MAX 19
/* The shared statistics field (14): what a round does with them. */
#define FED_WIRE_STATS_PASS 1u  /* the statistics pass: contribute, do not train */
#define FED_WIRE_STATS_APPLY 2u /* standardize each numeric column with these */
#define FED_WIRE_INPUT_MAX (1u << 24) /* MODEL's input field: each count at most */
/* Field 16's flags: which tensors stay at the sites (node/layout.h). */
#define FED_WIRE_PATHS_LOCAL_BN 0x1u    /* every norm tensor (FedBN) */
#define FED_WIRE_PATHS_STATS_LOCAL 0x2u /* every non-trained statistic (DP) */
#define FED_WIRE_PATHS_FEDNOVA 0x4u     /* a DELTA ends in the steps segment (FedNova) */
#define FED_WIRE_PATHS_SCAFFOLD 0x8u    /* a DELTA ends in the control segment (SCAFFOLD) */
#define FED_WIRE_LOCAL_LAYERS_MAX 255   /* bytes of field 16's globs */
/* Field 19's knobs: ids, the entry's flag, how many a field holds. */
#define FED_WIRE_KNOB_WEIGHT_DECAY 1u /* f32 > 0 */
#define FED_WIRE_KNOB_INPUT_SCALE 2u  /* u32, fed_model_input_scale: 1 unit */
#define FED_WIRE_KNOB_DITTO 3u        /* f32 > 0: Ditto's lambda */
#define FED_WIRE_KNOB_REQUIRED 0x0001u
#define FED_WIRE_KNOB_BYTES 8
#define FED_WIRE_KNOBS_MAX 16
#define FED_WIRE_DP_REQUIRED 0x1u /* DP-SGD field: the round must be trained with it */
/* DELTA's and LEAVE's fields. */
#define FED_WIRE_FIELD_DP_REPORT 1 /* epsilon spent, budget (f64 each) */
#define FED_WIRE_FIELD_SEGMENTS 2  /* DELTA, SA_MASKED: its vector's segments
                                      (count, then length and rule each) */
#define FED_WIRE_SEGMENTS_MAX 8    /* segments a DELTA's field may list */

typedef enum fed_wire_type {
    FED_WIRE_HELLO = 1,
    FED_WIRE_NEXT = 2,
    FED_WIRE_MODEL = 3,
    FED_WIRE_DELTA = 4,
    FED_WIRE_ACK = 5,
    FED_WIRE_SHARE = 6,
    FED_WIRE_PEERS = 7,
    FED_WIRE_LEAVE = 8,
    FED_WIRE_CHUNK = 9,
    FED_WIRE_SLICE = 10,
    /* secure aggregation's stages (node/secagg_agg.c, secagg_client.c): each a
       client's request the aggregator holds, and its answer, of one type */
    FED_WIRE_SA_KEYS = 11,
    FED_WIRE_SA_SHARES = 12,
    FED_WIRE_SA_MASKED = 13,
    FED_WIRE_SA_CONSIST = 14,
    FED_WIRE_SA_UNMASK = 15,
    FED_WIRE_AR_ABORT = 17,  /* all-reduce: an attempt given up (node/peer_allreduce.c) */
    FED_WIRE_AR_VERIFY = 18, /* all-reduce: a result's hash, passed round the ring */
} fed_wire_type;
#define FED_WIRE_TYPE_MAX 18
/* Known types: those with a row (1..15 and the all-reduce pair 17, 18). */
#define FED_WIRE_TYPE_KNOWN(t) fed_wire_type_known(t)
#define FED_WIRE_IS_SA(t) ((t) >= FED_WIRE_SA_KEYS && (t) <= FED_WIRE_SA_UNMASK)

/* What follows a type's block in a sealed frame (its payload codec). */
typedef enum fed_wire_vec {
    FED_WIRE_VEC_NONE = 0, /* nothing: a longer payload is refused */
    FED_WIRE_VEC_CODEC,    /* a vector in the header's codec (model/codec.h) */
    FED_WIRE_VEC_PEERS,    /* count signed peer entries, each >= vec_entry bytes */
    FED_WIRE_VEC_KEYS,     /* count member keys of vec_entry bytes, exactly */
    FED_WIRE_VEC_SA,       /* a secure-aggregation stage vector (node/secagg_msg_impl.h) */
} fed_wire_vec;

/* A field a type's block knows. */
typedef struct fed_wire_field {
    uint16_t tag;
    uint16_t min, max; /* bounds of its value's length; this node writes max */
    uint8_t must;      /* a block without it is refused (FED_ERR_FIELD_MISSING) */
    uint8_t sized;     /* written only when set, at its value's length (not max) */
} fed_wire_field;

/* One frame type's row. */
typedef struct fed_wire_type_info {
    uint8_t type;         /* fed_wire_type */
    const char *name;     /* "HELLO", ...: in logs */
    uint16_t flags;       /* header flags it may carry (others: FED_ERR_FRAME_TYPE) */
    uint8_t one_flag;     /* exactly one of flags must be set (CHUNK) */
    uint8_t epoch0;       /* may address recipient epoch 0 (the sender need not know it) */
    uint8_t fixed;        /* bytes of its block's fixed part */
    uint8_t vector;       /* fed_wire_vec */
    uint16_t vec_entry;   /* VEC_PEERS, VEC_KEYS: bytes an entry */
    uint16_t nfields;     /* known fields, by tag (at most 64) */
    const fed_wire_field *fields;
} fed_wire_type_info;

/* The row of type; NULL for an unknown type. */
const fed_wire_type_info *fed_wire_type_row(uint8_t type);
/* The i-th row, in type order; NULL past the last (to walk the table). */
const fed_wire_type_info *fed_wire_type_at(size_t i);
int fed_wire_type_known(uint8_t type);
/* Whether a header of type may carry flags. */
int fed_wire_flags_ok(uint8_t type, uint16_t flags);

#define FED_WIRE_PEER_ENTRY_MIN 138 /* a signed peer entry with a 1-byte URL */
#define FED_WIRE_FLAG_STREAM 0x0001u /* MODEL, DELTA, SHARE, SLICE, SA_MASKED: a stream's first */
#define FED_WIRE_FLAG_PULL 0x0002u   /* CHUNK: a request for a stream's next chunk */
#define FED_WIRE_FLAG_DATA 0x0004u   /* CHUNK: a chunk of a stream */

#define FED_WIRE_ROLE_PEER 1
#define FED_WIRE_ROLE_CLIENT 2
#define FED_WIRE_ROLE_AGGREGATOR 3

#define FED_WIRE_ACK_NO_ROUND 0x1u  /* aggregator: no round yet, ask again */
#define FED_WIRE_ACK_DUPLICATE 0x2u /* already had it; dropped */
#define FED_WIRE_ACK_FINISHED 0x4u  /* aggregator: training is over, stop asking */
/* An ACK of a SLICE carries the slice's all-reduce step + 1 in its high 16
 * bits (0: not said), so a late ACK of a resent copy of an earlier step is
 * told from the ACK of the slice in flight to the same member. In a redo
 * (attempt > 0), and for AR_ABORT and AR_VERIFY, the value is a 16-bit fold
 * of step and attempt (of attempt, of attempt and row): node/peer_allreduce.c's
 * ack_tag. */
#define FED_WIRE_ACK_STEP_MASK 0xffff0000u
#define FED_WIRE_ACK_STEP(step) ((uint32_t)((((uint64_t)(step) + 1) & 0xffffu) << 16))
#define FED_WIRE_ACK_FLAGS                                                                  \
    (FED_WIRE_ACK_NO_ROUND | FED_WIRE_ACK_DUPLICATE | FED_WIRE_ACK_FINISHED |               \
     FED_WIRE_ACK_STEP_MASK)

typedef struct fed_wire_hdr {
    uint8_t type; /* fed_wire_type */
    uint16_t flags;
    uint8_t sender[32];
    uint8_t recipient[32];
    uint64_t sender_epoch;
    uint64_t recipient_epoch;
    uint64_t seq;
    uint64_t round;
    uint8_t nonce[24];
    uint32_t payload_len;
    uint16_t codec;
} fed_wire_hdr;

/* The round's settings a MODEL carries. */
typedef struct fed_wire_settings {
    char spec[FED_WIRE_SPEC_BYTES]; /* NUL-terminated */
    uint32_t local_epochs;
    uint32_t batch;
    uint8_t optimizer; /* fed_optim_kind */
    uint16_t codec;    /* fed_codec_id the client answers with */
    float fraction;    /* topk fraction */
    float lr;
    float mu; /* FedProx's proximal term, 0: off */
    float momentum; /* SGD momentum in [0, 1); 0: plain SGD; ignored by Adam */
    uint64_t deadline_ms;
    uint32_t dp_flags; /* FED_WIRE_DP_REQUIRED: train with DP-SGD at ... */
    float dp_clip;     /* ... this clip C and */
    float dp_noise;    /* ... at least this noise multiplier */
    /* secure aggregation (field 12; absent: off) */
    uint32_t sa_on;         /* 1: the round runs secure aggregation */
    uint32_t sa_try;        /* the round's try (a failed one runs again) */
    uint32_t sa_bits;       /* quantized words in [0, 2^bits - 1] */
    float sa_range;         /* each coordinate clipped into [-range, range] */
    float sa_clip;          /* L2 clip before the range (0: none) */
    float sa_max_weight;    /* a client's weight cap, in samples */
    float sa_dropout;       /* the dropout rate the graph's degree survives */
    /* the model's graph (field 13), when spec is its id "g#..." (model.h):
       graph_len bytes, no NUL; decoded, a view into the block received */
    const char *graph;
    uint32_t graph_len;
    /* shared statistics (field 14; absent: mode 0): FED_WIRE_STATS_PASS or
       _APPLY, the columns, the pass's minimum count; with APPLY, stats:
       cols x (mean, std, missing rate) f64 LE, a view into the block
       received (or the sender's buffer) */
    uint32_t stats_mode;
    uint32_t stats_cols;
    uint64_t stats_min_count;
    const uint8_t *stats;
    /* with PASS, DP statistics: the noise multiplier (0: exact totals) and
       stats_bounds: cols x (lo, hi) f64 LE, a view as stats is */
    double stats_noise;
    const uint8_t *stats_bounds;
    /* the model's declared input (field 15): C, H, W and the classes; all
       zero: absent (a sender before it) */
    uint32_t input[4];
    /* the tensors' paths (field 16; absent: every tensor trained and sent) */
    uint32_t paths_on;       /* 1: field 16 present */
    uint32_t paths_flags;    /* FED_WIRE_PATHS_* */
    float sa_stats_range;    /* secure: the statistics segment's range (> 0), else 0 */
    char local_layers[FED_WIRE_LOCAL_LAYERS_MAX + 1]; /* --local-layers, NUL-terminated */
    /* site evaluation (field 17; absent: 0): in each round r with
       r % eval_every == 0 (but the statistics pass) a client evaluates the
       model it received on its validation split and sends its sufficient
       statistics for eval_classes classes (node/site_eval.h) */
    uint32_t eval_every;
    uint32_t eval_classes;
    /* SCAFFOLD (field 18, with FED_WIRE_PATHS_SCAFFOLD only): bit k set:
       round (this round - 1 - k) closed with no update */
    uint32_t scaffold_on;
    uint64_t scaffold_void;
    /* knobs (field 19; each absent: its default) */
    float weight_decay;      /* >= 0; 0: none */
    uint32_t input_scale;    /* fed_model_input_scale; 0: centred */
    float ditto_lambda;      /* > 0: Ditto's personal models; 0: none */
    uint32_t refused_knob;   /* decoded: an unknown required knob's id */
} fed_wire_settings;

/* A decoded typed block; which fields mean something depends on the type. */
typedef struct fed_wire_block {
    uint64_t samples;           /* MODEL, DELTA, SHARE */
    uint64_t step;              /* SLICE */
    uint64_t round_ref;         /* NEXT: last round finished; DELTA: base round */
    double weight;              /* SHARE */
    uint32_t status;            /* ACK */
    uint32_t ack_flags;         /* ACK */
    uint32_t count;             /* PEERS */
    uint32_t reason;            /* LEAVE */
    uint32_t sa_try;            /* SA_*: the round's try */
    uint32_t sa_count;          /* SA_*: entries in the vector */
    uint8_t role;               /* HELLO */
    uint64_t caps;              /* HELLO */
    uint64_t stream_id;         /* CHUNK pull */
    uint32_t chunk_index;       /* CHUNK pull */
    fed_wire_settings settings; /* MODEL */
    uint64_t attempt;           /* AR_ABORT, AR_VERIFY */
    uint64_t in_row;            /* AR_VERIFY */
    uint8_t result_hash[32];    /* AR_VERIFY */
    double dp_epsilon;          /* DELTA, LEAVE: epsilon the client has spent */
    double dp_budget;           /* DELTA, LEAVE: its budget (0: none) */
    uint32_t seg_count;         /* DELTA: segments its field lists (0: absent,
                                   the vector is the whole flat buffer) */
    uint32_t seg_len[FED_WIRE_SEGMENTS_MAX];  /* DELTA: each segment's floats */
    uint32_t seg_rule[FED_WIRE_SEGMENTS_MAX]; /* DELTA: each one's weight rule
                                   (node/agg_input_impl.h agg_weight) */
    uint16_t refused_tag;       /* refused with FED_ERR_FIELD_REQUIRED: the
                                   required field's tag this node does not know */
} fed_wire_block;

/* clang-format off */
typedef struct fed_wire_counters {
#define FED_WIRE_COUNTER_LIST(X)                                                               \
    X(sealed) X(opened) X(bytes_out) X(bytes_in) X(streams_begun) X(streams_done)                \
    X(streams_failed) X(rej_truncated) X(rej_magic) X(rej_version) X(rej_too_large) X(rej_type) \
    X(rej_wrong_recipient) X(rej_old_epoch) X(rej_unknown_sender) X(rej_sender_epoch)          \
    X(rej_replay) X(rej_busy) X(rej_aead) X(rej_signature) X(rej_payload) X(rej_stream)        \
    X(rej_stream_limit) X(rej_codec) X(rej_nan) X(rej_other) X(conn_refused) X(conn_stalled)   \
    X(conn_handshake) X(conn_dropped) X(rej_sa_keys) X(rej_sa_shares) X(rej_sa_masked)         \
    X(rej_sa_consist) X(rej_sa_unmask) X(leave_no_secagg) X(leave_bad_model)
#define FED_WIRE_COUNTER_FIELD_(name) uint64_t name;
    FED_WIRE_COUNTER_LIST(FED_WIRE_COUNTER_FIELD_)
#undef FED_WIRE_COUNTER_FIELD_
} fed_wire_counters;
/* clang-format on */

typedef struct fed_wire fed_wire;
typedef struct fed_wire_stream_rx fed_wire_stream_rx;
/* The simulator's seam (gossip/wire_hooks.h). */
typedef struct fed_wire_hooks fed_wire_hooks;

typedef struct fed_wire_cfg {
    size_t max_frame;          /* whole frames, protocol-wide (default 16 MiB) */
    uint32_t max_rx_streams;   /* reassemblies at once (default 4) */
    uint64_t max_stream_bytes; /* largest streamed vector (default 64 GiB) */
    const fed_wire_hooks *hooks; /* NULL: none (every daemon). The simulator's
                                    seam, gossip/wire_hooks.h: fedsim
                                    --no-crypto's unsealed frames */
} fed_wire_cfg;

/* An opened frame. Pointers point into the frame (opened in place). */
typedef struct fed_wire_msg {
    fed_wire_hdr hdr;
    const uint8_t *header; /* its FED_WIRE_HEADER_BYTES */
    uint8_t *payload;      /* plaintext payload (sealed frames) */
    size_t payload_len;
    fed_wire_block block;
    uint8_t *vector; /* what follows the typed block (sealed, non-stream frames) */
    size_t vector_len;
    uint8_t digest[FED_CRYPTO_DIGEST_BYTES]; /* what the sender signed (sealed frames) */
    uint8_t sig[FED_CRYPTO_SIG_BYTES];
    fed_wire_stream_rx *stream; /* stream first frame or CHUNK data: its stream */
    int stream_done;            /* ... which is now complete and verified */
} fed_wire_msg;

/* Work in flight for one frame between precheck, open and finish. */
typedef struct fed_wire_ticket {
    fed_wire_hdr hdr;
    int kind; /* internal */
    int reserved;
    size_t frame_len;
    fed_crypto_session *session;
    fed_wire_stream_rx *stream;
} fed_wire_ticket;

/* Where a stream's bytes go: called once its first frame has opened (on the
 * thread running fed_wire_open_ticket). Return FED_OK with *dst pointing at
 * total writable bytes that stay valid until the stream is closed, or an
 * error that rejects the stream (and its frame). The frame can still be
 * refused after the call (its first chunk fails, or the same stream was
 * registered by another copy opened at the same moment): then nothing more
 * is written there, so lend a buffer the node owns anyway (its model, a
 * per-peer delta buffer). */
typedef fed_err (*fed_wire_dst_fn)(void *ctx, const fed_wire_msg *first, uint64_t total,
                                   uint8_t **dst);
/* Membership beyond the allow-list (vouched keys): nonzero for members. */
typedef int (*fed_wire_member_fn)(void *ctx, const uint8_t pk[32]);

void fed_wire_cfg_default(fed_wire_cfg *cfg);
/* Whether a wire of cfg sends and takes frames unsealed (its hooks say so:
 * the simulator's --no-crypto only). */
int fed_wire_cfg_unsealed(const fed_wire_cfg *cfg);

/* arena (the node's identity and sessions) and allow (members) are
 * borrowed and must outlive the fed_wire. The arena needs a slot per stream
 * (max_rx_streams plus the streams it sends at once). */
FED_WUR fed_err fed_wire_new(const fed_wire_cfg *cfg, fed_crypto_arena *arena,
                             const fed_crypto_allow *allow, fed_wire **out);
/* Closes every stream; NULL is fine. */
void fed_wire_free(fed_wire *w);
/* This node's current epoch (max(stored + 1, wall seconds): storage's). */
void fed_wire_set_epoch(fed_wire *w, uint64_t epoch);
uint64_t fed_wire_epoch(const fed_wire *w);
void fed_wire_set_stream_dst(fed_wire *w, fed_wire_dst_fn fn, void *ctx);
/* Replaces the allow-list lookup (fn may consult the allow-list itself). */
void fed_wire_set_member_fn(fed_wire *w, fed_wire_member_fn fn, void *ctx);
const fed_wire_cfg *fed_wire_config(const fed_wire *w);
fed_crypto_arena *fed_wire_arena(const fed_wire *w);
const uint8_t *fed_wire_self(const fed_wire *w);
/* Nonzero when pk may send to this node (the allow-list, or the member
 * function): precheck's sender check, for a node deciding whether to say
 * anything to a frame that failed an earlier check. */
int fed_wire_is_member(const fed_wire *w, const uint8_t pk[32]);
/* The last committed epoch of a peer (0: none yet). */
uint64_t fed_wire_peer_epoch(const fed_wire *w, const uint8_t pk[32]);

const fed_wire_counters *fed_wire_get_counters(const fed_wire *w);
size_t fed_wire_counter_count(void);
const char *fed_wire_counter_name(size_t i);
/* "HELLO", "MODEL", ...; "?" for an unknown type. */
const char *fed_wire_type_name(uint8_t type);
uint64_t fed_wire_counter_value(const fed_wire_counters *c, size_t i);
/* The fed_err a rejection counter (rej_*) counts, the first where several
 * share one (rej_payload: FED_ERR_PAYLOAD); FED_OK for a counter that is no
 * rejection and for rej_other (whatever has no counter of its own). */
fed_err fed_wire_counter_reason(size_t i);
/* The transport's connection drops (gossip/transport.h: connections over
 * the cap, stalled, with a bad handshake, dropped by NNG on an error), this
 * run's totals: kept with the frame rejections so they are stored and shown
 * alike. */
void fed_wire_set_conn_counters(fed_wire *w, uint64_t refused, uint64_t stalled,
                                uint64_t handshake, uint64_t dropped);
/* Counts and logs a rejection decided above the wire (a codec error found
 * while decoding the vector, say). */
void fed_wire_note_reject(fed_wire *w, const fed_wire_hdr *h, fed_err err);
/* Counts a LEAVE taken (a client declined a round) whose reason has a
 * counter (leave_*: FED_ERR_SA_REQUIRED, FED_ERR_MODEL_MISMATCH); others
 * are not counted here (the round's contributions record every one). */
void fed_wire_note_leave(fed_wire *w, fed_err reason);

/* ---- header and typed blocks ---- */

void fed_wire_hdr_encode(const fed_wire_hdr *h, uint8_t out[FED_WIRE_HEADER_BYTES]);
/* FED_ERR_FRAME_TRUNCATED, _MAGIC, _VERSION, _TYPE (unknown type, flags not
 * allowed for the type, reserved bytes set). */
FED_WUR fed_err fed_wire_hdr_decode(const uint8_t *buf, size_t len, fed_wire_hdr *h);

/* The size of the typed block this node encodes for type (0 for an unknown
 * type): its fixed part, S and every known field. A block received may be
 * longer (fields this node does not know): fed_wire_block_decode's *used
 * says. */
size_t fed_wire_block_size(uint8_t type);
/* The size of the block this node encodes for b: fed_wire_block_size and
 * the fields written at their value's length (MODEL's graph). */
size_t fed_wire_block_bytes(uint8_t type, const fed_wire_block *b);
/* FED_ERR_TOO_LARGE: cap too small; FED_ERR_INVAL: unknown type or a field
 * that would not decode. */
FED_WUR fed_err fed_wire_block_encode(uint8_t type, const fed_wire_block *b, uint8_t *out,
                                      size_t cap, size_t *len);
/* FED_ERR_PAYLOAD: shorter than its fixed part and S, reserved bytes set,
 * a field's flags unknown, or a value out of range; FED_ERR_FIELD_TRUNCATED,
 * _ORDER, _LENGTH, _MISSING (the table above); FED_ERR_FIELD_REQUIRED: a
 * field this node does not know, marked required (its tag in
 * b->refused_tag). */
FED_WUR fed_err fed_wire_block_decode(uint8_t type, const uint8_t *in, size_t len,
                                      fed_wire_block *b, size_t *used);

/* ---- sending ---- */

/* Bytes of a sealed frame with len bytes of payload. */
size_t fed_wire_frame_bytes(size_t payload_len);
/* Where the payload goes in a frame buffer. */
static inline uint8_t *fed_wire_payload(uint8_t *frame) { return frame + FED_WIRE_HEADER_BYTES; }

/* Seals in place: the caller wrote payload_len bytes at fed_wire_payload(frame)
 * (typed block, then vector) and frame has cap >= fed_wire_frame_bytes(len).
 * h gives type, flags (not STREAM or DATA), recipient, epochs, seq, round and
 * codec; the sender, nonce (drawn from rnd) and payload length are filled
 * in. FED_ERR_FRAME_TOO_LARGE: over max_frame; FED_ERR_KEY; FED_ERR_BUSY. */
FED_WUR fed_err fed_wire_seal(fed_wire *w, fed_wire_hdr *h, uint8_t *frame, size_t cap,
                              size_t payload_len, fed_random_fn rnd, void *rnd_ctx,
                              size_t *frame_len);
/* The same in three steps, for sealing in a job: prepare (loop: checks,
 * pins the session, fills h), seal (any thread), done (loop: unpins, counts).
 * payload_hash (may be NULL: computed) is the payload's
 * fed_crypto_payload_hash, from a caller sealing one payload for many. */
FED_WUR fed_err fed_wire_seal_prepare(fed_wire *w, fed_wire_hdr *h, size_t cap, size_t payload_len,
                                      fed_wire_ticket *t);
FED_WUR fed_err fed_wire_seal_ticket(const fed_wire *w, fed_wire_ticket *t, uint8_t *frame,
                                     const uint8_t *payload_hash, fed_random_fn rnd,
                                     void *rnd_ctx, size_t *frame_len);
void fed_wire_seal_done(fed_wire *w, fed_wire_ticket *t, fed_err result);
/* A sealed ticket's session unpinned before its fed_wire_seal_done, for a
 * frame kept a while before it is sent: an evicted session is derived
 * again with the same keys, and a held pin would keep another peer's
 * session out (FED_ERR_BUSY). */
void fed_wire_seal_unpin(fed_wire *w, fed_wire_ticket *t);
/* Typed block + a copy of vector, sealed: for small frames. */
FED_WUR fed_err fed_wire_build(fed_wire *w, fed_wire_hdr *h, const fed_wire_block *b,
                               const uint8_t *vector, size_t vector_len, uint8_t *frame, size_t cap,
                               fed_random_fn rnd, void *rnd_ctx, size_t *frame_len);

/* ---- receiving ---- */

/* Everything below in one call (loop thread). On FED_OK m describes the
 * frame; on error the frame was counted, logged and dropped. */
FED_WUR fed_err fed_wire_open(fed_wire *w, uint8_t *frame, size_t len, fed_wire_msg *m);
/* The cheap checks and reservations (loop thread). On error nothing is held
 * (and the rejection was counted and logged); on FED_OK the caller must run
 * fed_wire_open_ticket and then fed_wire_finish. */
FED_WUR fed_err fed_wire_precheck(fed_wire *w, const uint8_t *frame, size_t len,
                                  fed_wire_ticket *t);
/* The expensive part (any thread): opens frame in place into m. */
FED_WUR fed_err fed_wire_open_ticket(const fed_wire *w, fed_wire_ticket *t, uint8_t *frame,
                                     size_t len, fed_wire_msg *m);
/* Commits or releases what precheck reserved (loop thread); returns the
 * frame's final verdict (a commit can still refuse it), counted and logged. */
FED_WUR fed_err fed_wire_finish(fed_wire *w, fed_wire_ticket *t, fed_err result, fed_wire_msg *m);

#endif
