/* wire.c - frame headers, typed blocks, sealing and the receiver's checks
 * (formats and check order in wire.h). Owns a node's replay windows, its
 * wire counters and its table of reassemblies (with stream.c). Must never
 * do expensive work before the cheap checks pass, read outside the frame,
 * or accept a frame whose sequence it did not reserve and commit. */
#include "gossip/wire.h"

#include <assert.h>
#include <math.h>
#include <string.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "gossip/wire_hooks.h"
#include "gossip/wire_impl.h"
#include "model/model.h"

/* Counts and logs one rejection (h may be NULL before the header decoded). */
static void wire_count_reject(fed_wire *w, const fed_wire_hdr *h, fed_err err);

_Static_assert(FED_WIRE_GRAPH_MAX == FED_MODEL_GRAPH_MAX - 1, "a graph field holds a graph");

static int all_zero(const uint8_t *p, size_t n)
{
    uint8_t acc = 0;

    for (size_t i = 0; i < n; i++)
        acc |= p[i];
    return acc == 0;
}

/* ---- header ---- */

void fed_wire_hdr_encode(const fed_wire_hdr *h, uint8_t out[FED_WIRE_HEADER_BYTES])
{
    memcpy(out, FED_WIRE_MAGIC, 4);
    out[4] = FED_WIRE_VERSION;
    out[FED_WIRE_OFF_TYPE] = h->type;
    fed_put_u16le(out + FED_WIRE_OFF_FLAGS, h->flags);
    memcpy(out + FED_WIRE_OFF_SENDER, h->sender, 32);
    memcpy(out + FED_WIRE_OFF_RECIPIENT, h->recipient, 32);
    fed_put_u64le(out + FED_WIRE_OFF_SENDER_EPOCH, h->sender_epoch);
    fed_put_u64le(out + FED_WIRE_OFF_RECIPIENT_EPOCH, h->recipient_epoch);
    fed_put_u64le(out + FED_WIRE_OFF_SEQ, h->seq);
    fed_put_u64le(out + FED_WIRE_OFF_ROUND, h->round);
    memcpy(out + FED_WIRE_OFF_NONCE, h->nonce, 24);
    fed_put_u32le(out + FED_WIRE_OFF_LEN, h->payload_len);
    fed_put_u16le(out + FED_WIRE_OFF_CODEC, h->codec);
    fed_put_u16le(out + 134, 0);
}

/* ---- the frame types (wire.h: fed_wire_type_info) ---- */

/* Known fields of each type's block (wire.h draws them). A field this node
 * always writes is written at its most length; MODEL's spec may come shorter. */
static const fed_wire_field model_fields[] = {
    {FED_WIRE_SET_SPEC, 1, FED_WIRE_SPEC_BYTES, 1, 0},
    {FED_WIRE_SET_LOCAL_EPOCHS, 4, 4, 1, 0},
    {FED_WIRE_SET_BATCH, 4, 4, 1, 0},
    {FED_WIRE_SET_OPTIMIZER, 1, 1, 1, 0},
    {FED_WIRE_SET_CODEC, 2, 2, 1, 0},
    {FED_WIRE_SET_FRACTION, 4, 4, 1, 0},
    {FED_WIRE_SET_LR, 4, 4, 1, 0},
    {FED_WIRE_SET_MU, 4, 4, 1, 0},
    {FED_WIRE_SET_DEADLINE, 8, 8, 1, 0},
    {FED_WIRE_SET_MOMENTUM, 4, 4, 1, 0},
    {FED_WIRE_SET_DP_SGD, 12, 12, 0, 0}, /* absent: nothing required */
    {FED_WIRE_SET_SECAGG, 28, 28, 0, 0}, /* absent: off */
    {FED_WIRE_SET_GRAPH, 3, FED_WIRE_GRAPH_MAX, 0, 1}, /* with a "g#" spec only */
    {FED_WIRE_SET_STATS, 16, FED_WIRE_STATS_MAX, 0, 1}, /* with a mode only */
    {FED_WIRE_SET_INPUT, 16, 16, 0, 1},                /* when declared */
    {FED_WIRE_SET_PATHS, 8, 8 + FED_WIRE_LOCAL_LAYERS_MAX, 0, 1}, /* when a tensor stays */
    {FED_WIRE_SET_SITE_EVAL, 8, 8, 0, 1},              /* with --eval-every */
    {FED_WIRE_SET_SCAFFOLD, 8, 8, 0, 1},                          /* with SCAFFOLD */
    {FED_WIRE_SET_KNOBS, FED_WIRE_KNOB_BYTES, FED_WIRE_KNOB_BYTES * FED_WIRE_KNOBS_MAX, 0,
     1}, /* when a knob is set */
};
static const fed_wire_field report_fields[] = {
    {FED_WIRE_FIELD_DP_REPORT, 16, 16, 0, 0},
};
static const fed_wire_field masked_fields[] = {
    {FED_WIRE_FIELD_SEGMENTS, 12, 4 + 8 * FED_WIRE_SEGMENTS_MAX, 0, 1}, /* with its segments */
};
static const fed_wire_field delta_fields[] = {
    {FED_WIRE_FIELD_DP_REPORT, 16, 16, 0, 0},
    {FED_WIRE_FIELD_SEGMENTS, 12, 4 + 8 * FED_WIRE_SEGMENTS_MAX, 0, 1}, /* a partial vector */
};

#define FIELDS(list) (uint16_t)(sizeof list / sizeof list[0]), list
#define NO_FIELDS 0, NULL
#define STREAMS FED_WIRE_FLAG_STREAM

/* One row per frame type: the header checks, the block codec, the vector's
 * size check, the names in logs and the fuzz seeds all read it. */
static const fed_wire_type_info types[] = {
    /* type, name, flags, one_flag, epoch0, fixed, vector, vec_entry, fields */
    {FED_WIRE_HELLO, "HELLO", 0, 0, 1, 16, FED_WIRE_VEC_NONE, 0, NO_FIELDS},
    {FED_WIRE_NEXT, "NEXT", 0, 0, 0, 8, FED_WIRE_VEC_NONE, 0, NO_FIELDS},
    {FED_WIRE_MODEL, "MODEL", STREAMS, 0, 0, 8, FED_WIRE_VEC_CODEC, 0, FIELDS(model_fields)},
    {FED_WIRE_DELTA, "DELTA", STREAMS, 0, 0, 16, FED_WIRE_VEC_CODEC, 0, FIELDS(delta_fields)},
    {FED_WIRE_ACK, "ACK", 0, 0, 0, 8, FED_WIRE_VEC_NONE, 0, NO_FIELDS},
    {FED_WIRE_SHARE, "SHARE", STREAMS, 0, 1, 16, FED_WIRE_VEC_CODEC, 0, NO_FIELDS},
    {FED_WIRE_PEERS, "PEERS", 0, 0, 1, 8, FED_WIRE_VEC_PEERS, FED_WIRE_PEER_ENTRY_MIN,
     NO_FIELDS},
    {FED_WIRE_LEAVE, "LEAVE", 0, 0, 0, 8, FED_WIRE_VEC_NONE, 0, FIELDS(report_fields)},
    {FED_WIRE_CHUNK, "CHUNK", FED_WIRE_FLAG_PULL | FED_WIRE_FLAG_DATA, 1, 0, 16,
     FED_WIRE_VEC_NONE, 0, NO_FIELDS},
    {FED_WIRE_SLICE, "SLICE", STREAMS, 0, 1, 16, FED_WIRE_VEC_CODEC, 0, NO_FIELDS},
    {FED_WIRE_SA_KEYS, "SA_KEYS", 0, 0, 0, 16, FED_WIRE_VEC_SA, 0, NO_FIELDS},
    {FED_WIRE_SA_SHARES, "SA_SHARES", 0, 0, 0, 16, FED_WIRE_VEC_SA, 0, NO_FIELDS},
    {FED_WIRE_SA_MASKED, "SA_MASKED", STREAMS, 0, 0, 16, FED_WIRE_VEC_SA, 0,
     FIELDS(masked_fields)},
    {FED_WIRE_SA_CONSIST, "SA_CONSIST", 0, 0, 0, 16, FED_WIRE_VEC_SA, 0, NO_FIELDS},
    {FED_WIRE_SA_UNMASK, "SA_UNMASK", 0, 0, 0, 16, FED_WIRE_VEC_SA, 0, NO_FIELDS},
    {FED_WIRE_AR_ABORT, "AR_ABORT", 0, 0, 1, 16, FED_WIRE_VEC_KEYS, 32, NO_FIELDS},
    {FED_WIRE_AR_VERIFY, "AR_VERIFY", 0, 0, 1, 48, FED_WIRE_VEC_NONE, 0, NO_FIELDS},
};
#define NTYPES (sizeof types / sizeof types[0])

const fed_wire_type_info *fed_wire_type_at(size_t i) { return i < NTYPES ? &types[i] : NULL; }

const fed_wire_type_info *fed_wire_type_row(uint8_t type)
{
    for (size_t i = 0; i < NTYPES; i++)
        if (types[i].type == type)
            return &types[i];
    return NULL;
}

int fed_wire_type_known(uint8_t type) { return fed_wire_type_row(type) != NULL; }

const char *fed_wire_type_name(uint8_t type)
{
    const fed_wire_type_info *ti = fed_wire_type_row(type);

    return ti ? ti->name : "?";
}

int fed_wire_flags_ok(uint8_t type, uint16_t flags)
{
    const fed_wire_type_info *ti = fed_wire_type_row(type);

    if (!ti || (flags & ~ti->flags))
        return 0;
    return !ti->one_flag || (flags != 0 && (flags & (flags - 1)) == 0);
}

static const fed_wire_field *field_of(const fed_wire_type_info *ti, uint16_t tag)
{
    for (uint16_t i = 0; i < ti->nfields; i++)
        if (ti->fields[i].tag == tag)
            return &ti->fields[i];
    return NULL;
}

fed_err fed_wire_hdr_decode(const uint8_t *buf, size_t len, fed_wire_hdr *h)
{
    if (len < FED_WIRE_HEADER_BYTES)
        return FED_ERR_FRAME_TRUNCATED;
    if (memcmp(buf, FED_WIRE_MAGIC, 4) != 0)
        return FED_ERR_FRAME_MAGIC;
    if (buf[4] != FED_WIRE_VERSION)
        return FED_ERR_FRAME_VERSION;
    memset(h, 0, sizeof *h);
    h->type = buf[FED_WIRE_OFF_TYPE];
    h->flags = fed_get_u16le(buf + FED_WIRE_OFF_FLAGS);
    if (!fed_wire_flags_ok(h->type, h->flags) || fed_get_u16le(buf + 134) != 0)
        return FED_ERR_FRAME_TYPE;
    if (h->flags == FED_WIRE_FLAG_DATA && h->type == FED_WIRE_CHUNK &&
        !all_zero(buf + FED_WIRE_OFF_NONCE + 12, 12))
        return FED_ERR_FRAME_TYPE;
    memcpy(h->sender, buf + FED_WIRE_OFF_SENDER, 32);
    memcpy(h->recipient, buf + FED_WIRE_OFF_RECIPIENT, 32);
    h->sender_epoch = fed_get_u64le(buf + FED_WIRE_OFF_SENDER_EPOCH);
    h->recipient_epoch = fed_get_u64le(buf + FED_WIRE_OFF_RECIPIENT_EPOCH);
    h->seq = fed_get_u64le(buf + FED_WIRE_OFF_SEQ);
    h->round = fed_get_u64le(buf + FED_WIRE_OFF_ROUND);
    memcpy(h->nonce, buf + FED_WIRE_OFF_NONCE, 24);
    h->payload_len = fed_get_u32le(buf + FED_WIRE_OFF_LEN);
    h->codec = fed_get_u16le(buf + FED_WIRE_OFF_CODEC);
    return FED_OK;
}

/* ---- typed blocks ---- */

size_t fed_wire_block_size(uint8_t type)
{
    const fed_wire_type_info *ti = fed_wire_type_row(type);
    size_t n;

    if (!ti)
        return 0;
    n = (size_t)ti->fixed + FED_WIRE_FIELDS_LEN_BYTES;
    for (uint16_t i = 0; i < ti->nfields; i++)
        if (!ti->fields[i].sized)
            n += FED_WIRE_FIELD_HEAD_BYTES + ti->fields[i].max;
    return n;
}

/* The statistics field's length (mode set). */
static uint32_t stats_len(const fed_wire_settings *s)
{
    if (s->stats_mode == FED_WIRE_STATS_PASS && s->stats_noise > 0)
        return 24 + FED_WIRE_STATS_BOUND_BYTES * s->stats_cols;
    return 16 + (s->stats_mode == FED_WIRE_STATS_APPLY ? FED_WIRE_STATS_COL_BYTES * s->stats_cols
                                                       : 0);
}

/* Field 19's entries this node writes: each knob away from its default. */
static uint32_t knobs_count(const fed_wire_settings *s)
{
    return (s->weight_decay != 0) + (s->input_scale != 0) + (s->ditto_lambda != 0);
}

size_t fed_wire_block_bytes(uint8_t type, const fed_wire_block *b)
{
    size_t n = fed_wire_block_size(type);

    if (n && type == FED_WIRE_MODEL && b->settings.graph)
        n += FED_WIRE_FIELD_HEAD_BYTES + b->settings.graph_len;
    if (n && type == FED_WIRE_MODEL && b->settings.stats_mode)
        n += FED_WIRE_FIELD_HEAD_BYTES + stats_len(&b->settings);
    if (n && type == FED_WIRE_MODEL && b->settings.input[3])
        n += FED_WIRE_FIELD_HEAD_BYTES + 16;
    if (n && type == FED_WIRE_MODEL && b->settings.paths_on)
        n += FED_WIRE_FIELD_HEAD_BYTES + 8 + strnlen(b->settings.local_layers,
                                                     FED_WIRE_LOCAL_LAYERS_MAX);
    if (n && type == FED_WIRE_MODEL && knobs_count(&b->settings))
        n += FED_WIRE_FIELD_HEAD_BYTES + FED_WIRE_KNOB_BYTES * knobs_count(&b->settings);
    if (n && type == FED_WIRE_MODEL && b->settings.scaffold_on)
        n += FED_WIRE_FIELD_HEAD_BYTES + 8;
    if (n && (type == FED_WIRE_DELTA || type == FED_WIRE_SA_MASKED) && b->seg_count)
        n += FED_WIRE_FIELD_HEAD_BYTES + 4 + 8 * (size_t)b->seg_count;
    if (n && type == FED_WIRE_MODEL && b->settings.eval_every)
        n += FED_WIRE_FIELD_HEAD_BYTES + 8;
    return n;
}

static int spec_ok(const char *spec)
{
    size_t n = strnlen(spec, FED_WIRE_SPEC_BYTES);

    if (n == FED_WIRE_SPEC_BYTES)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (spec[i] < 0x20 || spec[i] > 0x7e)
            return 0;
    return 1;
}

static int dp_ok(const fed_wire_settings *s)
{
    if (s->dp_flags & ~FED_WIRE_DP_REQUIRED)
        return 0;
    if (!(s->dp_flags & FED_WIRE_DP_REQUIRED))
        return s->dp_clip == 0 && s->dp_noise == 0;
    return isfinite(s->dp_clip) && s->dp_clip > 0 && isfinite(s->dp_noise) && s->dp_noise >= 0;
}

static int secagg_ok(const fed_wire_settings *s)
{
    if (!s->sa_on)
        return s->sa_try == 0 && s->sa_bits == 0 && s->sa_range == 0 && s->sa_clip == 0 &&
               s->sa_max_weight == 0 && s->sa_dropout == 0;
    return s->sa_on == 1 && s->sa_bits >= 1 && s->sa_bits <= 32 && isfinite(s->sa_range) &&
           s->sa_range > 0 && isfinite(s->sa_clip) && s->sa_clip >= 0 &&
           isfinite(s->sa_max_weight) && s->sa_max_weight > 0 && isfinite(s->sa_dropout) &&
           s->sa_dropout >= 0 && s->sa_dropout < 1;
}

/* The graph field: printable ASCII, a "g:" spec, whose id the spec field
 * holds (and a "g#" spec has its graph). */
static int graph_ok(const fed_wire_settings *s)
{
    char id[FED_MODEL_SPEC_MAX];
    char *copy;

    if (!s->graph)
        return strncmp(s->spec, "g#", 2) != 0;
    if (s->graph_len < 3 || s->graph_len > FED_WIRE_GRAPH_MAX || memcmp(s->graph, "g:", 2) != 0)
        return 0;
    for (uint32_t i = 0; i < s->graph_len; i++)
        if (s->graph[i] < 0x20 || s->graph[i] > 0x7e)
            return 0;
    if (!(copy = fed_malloc(s->graph_len + 1)))
        return 0;
    memcpy(copy, s->graph, s->graph_len);
    copy[s->graph_len] = '\0';
    fed_model_spec_id(copy, id);
    fed_free(copy);
    return strcmp(id, s->spec) == 0 && strncmp(id, "g#", 2) == 0;
}

/* The statistics field: a known mode, 1..1024 columns, its length that of
 * its mode; with APPLY, every mean finite, every std finite and > 0, every
 * missing rate in [0, 1]. */
static int stats_ok(const fed_wire_settings *s)
{
    if (!s->stats_mode)
        return s->stats_cols == 0 && s->stats_min_count == 0 && !s->stats &&
               s->stats_noise == 0 && !s->stats_bounds;
    if (s->stats_mode != FED_WIRE_STATS_PASS && (s->stats_noise != 0 || s->stats_bounds))
        return 0;
    if (s->stats_mode != FED_WIRE_STATS_PASS && s->stats_mode != FED_WIRE_STATS_APPLY)
        return 0;
    if (s->stats_cols < 1 || s->stats_cols > FED_WIRE_STATS_COLS_MAX)
        return 0;
    if (s->stats_mode == FED_WIRE_STATS_PASS && s->stats_noise == 0)
        return !s->stats_bounds;
    if (s->stats_mode == FED_WIRE_STATS_PASS) {
        if (!isfinite(s->stats_noise) || !(s->stats_noise > 0) || !s->stats_bounds)
            return 0;
        for (uint32_t j = 0; j < s->stats_cols; j++) {
            const uint8_t *c = s->stats_bounds + (size_t)FED_WIRE_STATS_BOUND_BYTES * j;
            double lo = fed_get_f64le(c), hi = fed_get_f64le(c + 8);

            if (!(lo < hi) || !(fabs(lo) < 1073741824.0) || !(fabs(hi) < 1073741824.0))
                return 0;
        }
        return 1;
    }
    if (!s->stats)
        return 0;
    for (uint32_t j = 0; j < s->stats_cols; j++) {
        const uint8_t *c = s->stats + (size_t)FED_WIRE_STATS_COL_BYTES * j;
        double m = fed_get_f64le(c), sd = fed_get_f64le(c + 8), miss = fed_get_f64le(c + 16);

        if (!isfinite(m) || !isfinite(sd) || !(sd > 0) || !(miss >= 0 && miss <= 1))
            return 0;
    }
    return 1;
}

/* The input field: absent (all zero), or four counts 1..FED_WIRE_INPUT_MAX. */
static int input_ok(const fed_wire_settings *s)
{
    int zero = 0;

    for (int i = 0; i < 4; i++)
        if (!s->input[i])
            zero++;
        else if (s->input[i] > FED_WIRE_INPUT_MAX)
            return 0;
    return zero == 0 || zero == 4;
}

/* Field 16: known flags, a range with secure aggregation only, globs of
 * printable ASCII without spaces. */
static int paths_ok(const fed_wire_settings *s)
{
    size_t n = strnlen(s->local_layers, sizeof s->local_layers);

    if (!s->paths_on)
        return s->paths_flags == 0 && s->sa_stats_range == 0 && n == 0 && !s->scaffold_on;
    if ((s->scaffold_on != 0) != ((s->paths_flags & FED_WIRE_PATHS_SCAFFOLD) != 0))
        return 0; /* field 17 comes with SCAFFOLD's control segment, and only then */
    if (s->paths_on != 1 || n > FED_WIRE_LOCAL_LAYERS_MAX ||
        (s->paths_flags & ~(FED_WIRE_PATHS_LOCAL_BN | FED_WIRE_PATHS_STATS_LOCAL |
                            FED_WIRE_PATHS_FEDNOVA | FED_WIRE_PATHS_SCAFFOLD)) ||
        (s->paths_flags & FED_WIRE_PATHS_FEDNOVA && s->paths_flags & FED_WIRE_PATHS_SCAFFOLD))
        return 0;
    for (size_t i = 0; i < n; i++)
        if (s->local_layers[i] <= 0x20 || s->local_layers[i] > 0x7e)
            return 0;
    if (!s->sa_on)
        return s->sa_stats_range == 0;
    return isfinite(s->sa_stats_range) && s->sa_stats_range > 0;
}

/* Field 19's knobs: a finite weight decay >= 0, a known input scale. */
static int knobs_ok(const fed_wire_settings *s)
{
    return isfinite(s->weight_decay) && s->weight_decay >= 0 && s->input_scale <= 1 &&
           isfinite(s->ditto_lambda) && s->ditto_lambda >= 0 && s->refused_knob == 0;
}

static int settings_ok(const fed_wire_settings *s)
{
    return spec_ok(s->spec) && graph_ok(s) && stats_ok(s) && input_ok(s) && paths_ok(s) &&
           knobs_ok(s) &&
           isfinite(s->lr) && s->lr > 0 && isfinite(s->mu) && s->mu >= 0 &&
           isfinite(s->momentum) && s->momentum >= 0 && s->momentum < 1 &&
           isfinite(s->fraction) && s->fraction >= 0 && s->fraction <= 1 && dp_ok(s) &&
           secagg_ok(s);
}

/* A DP report (DELTA, LEAVE): epsilon spent and budget, finite, >= 0. */
static int report_ok(const fed_wire_block *b)
{
    return isfinite(b->dp_epsilon) && b->dp_epsilon >= 0 && isfinite(b->dp_budget) &&
           b->dp_budget >= 0;
}

/* A DELTA's segments: 1..8 of them (0: none listed), known rules. */
static int segments_ok(const fed_wire_block *b)
{
    if (b->seg_count > FED_WIRE_SEGMENTS_MAX)
        return 0;
    for (uint32_t i = 0; i < b->seg_count; i++)
        if (b->seg_rule[i] > 2)
            return 0;
    return 1;
}

_Static_assert(FED_WIRE_MODEL_BLOCK_BYTES == 8 + FED_WIRE_FIELDS_LEN_BYTES +
                                                 FED_WIRE_SET_SECAGG * FED_WIRE_FIELD_HEAD_BYTES +
                                                 FED_WIRE_SPEC_BYTES + 4 + 4 + 1 + 2 + 4 + 4 + 4 +
                                                 8 + 4 + 12 + 28,
               "FED_WIRE_MODEL_BLOCK_BYTES is its fixed part, S and every known field");
_Static_assert(FED_WIRE_MODEL_BLOCK_BYTES <= FED_WIRE_BLOCK_MAX, "a MODEL block fits");

/* A known field's head at p (its length: the field's most), with flags;
 * returns where its value goes. */
static uint8_t *put_field(uint8_t *p, uint8_t type, uint16_t tag, uint16_t flags)
{
    const fed_wire_field *f = field_of(fed_wire_type_row(type), tag);

    fed_put_u16le(p, tag);
    fed_put_u16le(p + 2, flags);
    fed_put_u32le(p + 4, f->max);
    return p + FED_WIRE_FIELD_HEAD_BYTES;
}

/* A MODEL field marked required; returns where its value goes. */
static uint8_t *field_head(uint8_t *p, uint16_t tag)
{
    return put_field(p, FED_WIRE_MODEL, tag, FED_WIRE_FIELD_REQUIRED);
}

static void encode_secagg(const fed_wire_settings *s, uint8_t *out);

/* One knob's entry at p; returns the next. */
static uint8_t *put_knob(uint8_t *p, uint16_t id, uint16_t flags, uint32_t bits)
{
    fed_put_u16le(p, id);
    fed_put_u16le(p + 2, flags);
    fed_put_u32le(p + 4, bits);
    return p + FED_WIRE_KNOB_BYTES;
}

/* Field 19, when a knob is set: required, and so is each knob (a node
 * that ignored one would train another model). */
static uint8_t *encode_knobs(const fed_wire_settings *s, uint8_t *p)
{
    uint32_t n = knobs_count(s);
    uint32_t bits;

    if (!n)
        return p;
    fed_put_u16le(p, FED_WIRE_SET_KNOBS);
    fed_put_u16le(p + 2, FED_WIRE_FIELD_REQUIRED);
    fed_put_u32le(p + 4, FED_WIRE_KNOB_BYTES * n);
    p += FED_WIRE_FIELD_HEAD_BYTES;
    if (s->weight_decay != 0) {
        memcpy(&bits, &s->weight_decay, 4);
        p = put_knob(p, FED_WIRE_KNOB_WEIGHT_DECAY, FED_WIRE_KNOB_REQUIRED, bits);
    }
    if (s->input_scale != 0)
        p = put_knob(p, FED_WIRE_KNOB_INPUT_SCALE, FED_WIRE_KNOB_REQUIRED, s->input_scale);
    if (s->ditto_lambda != 0) { /* required: the sites' personal models are the point */
        memcpy(&bits, &s->ditto_lambda, 4);
        p = put_knob(p, FED_WIRE_KNOB_DITTO, FED_WIRE_KNOB_REQUIRED, bits);
    }
    return p;
}

/* Field 19's entries into s: whole entries, ids increasing, known flags; an
 * unknown knob skipped unless required (its id in s->refused_knob). */
static int take_knobs(const uint8_t *v, uint32_t len, fed_wire_settings *s)
{
    uint32_t prev = 0;

    if (len % FED_WIRE_KNOB_BYTES)
        return 0;
    for (uint32_t at = 0; at < len; at += FED_WIRE_KNOB_BYTES) {
        uint16_t id = fed_get_u16le(v + at), flags = fed_get_u16le(v + at + 2);

        if (id <= prev || (flags & ~FED_WIRE_KNOB_REQUIRED))
            return 0;
        prev = id;
        if (id == FED_WIRE_KNOB_WEIGHT_DECAY) {
            s->weight_decay = fed_get_f32le(v + at + 4);
            if (!(isfinite(s->weight_decay) && s->weight_decay > 0))
                return 0;
        } else if (id == FED_WIRE_KNOB_INPUT_SCALE) {
            s->input_scale = fed_get_u32le(v + at + 4);
            if (s->input_scale != 1)
                return 0;
        } else if (id == FED_WIRE_KNOB_DITTO) {
            s->ditto_lambda = fed_get_f32le(v + at + 4);
            if (!(isfinite(s->ditto_lambda) && s->ditto_lambda > 0))
                return 0;
        } else if (flags & FED_WIRE_KNOB_REQUIRED) {
            s->refused_knob = id;
            return 0;
        }
    }
    return 1;
}

/* Every known MODEL field, in tag order, into out; returns the end. */
static uint8_t *encode_settings(const fed_wire_settings *s, uint8_t *out)
{
    uint8_t *p = field_head(out, FED_WIRE_SET_SPEC);

    memset(p, 0, FED_WIRE_SPEC_BYTES);
    memcpy(p, s->spec, strnlen(s->spec, FED_WIRE_SPEC_BYTES - 1));
    p = field_head(p + FED_WIRE_SPEC_BYTES, FED_WIRE_SET_LOCAL_EPOCHS);
    fed_put_u32le(p, s->local_epochs);
    p = field_head(p + 4, FED_WIRE_SET_BATCH);
    fed_put_u32le(p, s->batch);
    p = field_head(p + 4, FED_WIRE_SET_OPTIMIZER);
    p[0] = s->optimizer;
    p = field_head(p + 1, FED_WIRE_SET_CODEC);
    fed_put_u16le(p, s->codec);
    p = field_head(p + 2, FED_WIRE_SET_FRACTION);
    fed_put_f32le(p, s->fraction);
    p = field_head(p + 4, FED_WIRE_SET_LR);
    fed_put_f32le(p, s->lr);
    p = field_head(p + 4, FED_WIRE_SET_MU);
    fed_put_f32le(p, s->mu);
    p = field_head(p + 4, FED_WIRE_SET_DEADLINE);
    fed_put_u64le(p, s->deadline_ms);
    p = field_head(p + 8, FED_WIRE_SET_MOMENTUM);
    fed_put_f32le(p, s->momentum);
    /* required only when it requires DP-SGD: a node that does not know the
       field may then not train the round without it */
    p = put_field(p + 4, FED_WIRE_MODEL, FED_WIRE_SET_DP_SGD,
                  (s->dp_flags & FED_WIRE_DP_REQUIRED) ? FED_WIRE_FIELD_REQUIRED : 0);
    fed_put_u32le(p, s->dp_flags);
    fed_put_f32le(p + 4, s->dp_clip);
    fed_put_f32le(p + 8, s->dp_noise);
    encode_secagg(s, p + 12);
    p += 12 + FED_WIRE_FIELD_HEAD_BYTES + 28;
    if (s->graph) { /* required: the spec alone names no graph */
        fed_put_u16le(p, FED_WIRE_SET_GRAPH);
        fed_put_u16le(p + 2, FED_WIRE_FIELD_REQUIRED);
        fed_put_u32le(p + 4, s->graph_len);
        memcpy(p + FED_WIRE_FIELD_HEAD_BYTES, s->graph, s->graph_len);
        p += FED_WIRE_FIELD_HEAD_BYTES + s->graph_len;
    }
    if (s->stats_mode) { /* required: a client must not train on its own scaling */
        uint32_t len = stats_len(s);

        fed_put_u16le(p, FED_WIRE_SET_STATS);
        fed_put_u16le(p + 2, FED_WIRE_FIELD_REQUIRED);
        fed_put_u32le(p + 4, len);
        p += FED_WIRE_FIELD_HEAD_BYTES;
        fed_put_u32le(p, s->stats_mode);
        fed_put_u32le(p + 4, s->stats_cols);
        fed_put_u64le(p + 8, s->stats_min_count);
        if (s->stats_mode == FED_WIRE_STATS_PASS && len > 16) {
            fed_put_f64le(p + 16, s->stats_noise);
            memcpy(p + 24, s->stats_bounds, len - 24);
        } else if (len > 16) {
            memcpy(p + 16, s->stats, len - 16);
        }
        p += len;
    }
    if (s->input[3]) { /* optional: an older client builds over its own data */
        p = put_field(p, FED_WIRE_MODEL, FED_WIRE_SET_INPUT, 0);
        for (int i = 0; i < 4; i++)
            fed_put_u32le(p + 4 * i, s->input[i]);
        p += 16;
    }
    if (s->paths_on) { /* required: a node that ignored it would send local tensors */
        uint32_t n = (uint32_t)strnlen(s->local_layers, FED_WIRE_LOCAL_LAYERS_MAX);

        fed_put_u16le(p, FED_WIRE_SET_PATHS);
        fed_put_u16le(p + 2, FED_WIRE_FIELD_REQUIRED);
        fed_put_u32le(p + 4, 8 + n);
        fed_put_u32le(p + 8, s->paths_flags);
        fed_put_f32le(p + 12, s->sa_stats_range);
        memcpy(p + 16, s->local_layers, n);
        p += FED_WIRE_FIELD_HEAD_BYTES + 8 + n;
    }
    if (s->eval_every) { /* required: the contribution grows by the statistics */
        p = field_head(p, FED_WIRE_SET_SITE_EVAL);
        fed_put_u32le(p, s->eval_every);
        fed_put_u32le(p + 4, s->eval_classes);
        p += 8;
    }
    if (s->scaffold_on) { /* required: which of its sent control changes were merged */
        p = field_head(p, FED_WIRE_SET_SCAFFOLD);
        fed_put_u64le(p, s->scaffold_void);
        p += 8;
    }
    return encode_knobs(s, p);
}

/* DELTA's segments, when listed: required (an aggregator that ignored it
 * would take a partial vector for the whole model). */
static uint8_t *encode_segments(const fed_wire_block *b, uint8_t *p)
{
    if (!b->seg_count)
        return p;
    fed_put_u16le(p, FED_WIRE_FIELD_SEGMENTS);
    fed_put_u16le(p + 2, FED_WIRE_FIELD_REQUIRED);
    fed_put_u32le(p + 4, 4 + 8 * b->seg_count);
    fed_put_u32le(p + 8, b->seg_count);
    for (uint32_t i = 0; i < b->seg_count; i++) {
        fed_put_u32le(p + 12 + 8 * i, b->seg_len[i]);
        fed_put_u32le(p + 16 + 8 * i, b->seg_rule[i]);
    }
    return p + FED_WIRE_FIELD_HEAD_BYTES + 4 + 8 * b->seg_count;
}

/* Field 12, after the others: required when the round runs secure
 * aggregation (a node that does not know it may not take part), all zero
 * and optional when it does not. */
static void encode_secagg(const fed_wire_settings *s, uint8_t *out)
{
    uint8_t *p = put_field(out, FED_WIRE_MODEL, FED_WIRE_SET_SECAGG,
                           s->sa_on ? FED_WIRE_FIELD_REQUIRED : 0);

    fed_put_u32le(p, s->sa_on);
    fed_put_u32le(p + 4, s->sa_try);
    fed_put_u32le(p + 8, s->sa_bits);
    fed_put_f32le(p + 12, s->sa_range);
    fed_put_f32le(p + 16, s->sa_clip);
    fed_put_f32le(p + 20, s->sa_max_weight);
    fed_put_f32le(p + 24, s->sa_dropout);
}

/* The DP report field (DELTA, LEAVE), optional: an older node skips it. */
static uint8_t *encode_report(uint8_t type, const fed_wire_block *b, uint8_t *out)
{
    uint8_t *p = put_field(out, type, FED_WIRE_FIELD_DP_REPORT, 0);

    fed_put_f64le(p, b->dp_epsilon);
    fed_put_f64le(p + 8, b->dp_budget);
    return p + 16;
}

/* The spec's value: NUL-terminated, zeros after the NUL (spec_ok checks the
 * characters; the table its length). */
static int take_spec(const uint8_t *v, uint32_t len, fed_wire_settings *s)
{
    size_t n = strnlen((const char *)v, len);

    if (n == len || !all_zero(v + n, len - n))
        return 0;
    memset(s->spec, 0, sizeof s->spec);
    memcpy(s->spec, v, n);
    return 1;
}

/* A known MODEL field's value (length already checked) into s. */
static int take_setting(uint16_t tag, const uint8_t *v, uint32_t len, fed_wire_settings *s)
{
    switch (tag) {
    case FED_WIRE_SET_SPEC: return take_spec(v, len, s);
    case FED_WIRE_SET_LOCAL_EPOCHS: s->local_epochs = fed_get_u32le(v); break;
    case FED_WIRE_SET_BATCH: s->batch = fed_get_u32le(v); break;
    case FED_WIRE_SET_OPTIMIZER: s->optimizer = v[0]; break;
    case FED_WIRE_SET_CODEC: s->codec = fed_get_u16le(v); break;
    case FED_WIRE_SET_FRACTION: s->fraction = fed_get_f32le(v); break;
    case FED_WIRE_SET_LR: s->lr = fed_get_f32le(v); break;
    case FED_WIRE_SET_MU: s->mu = fed_get_f32le(v); break;
    case FED_WIRE_SET_DEADLINE: s->deadline_ms = fed_get_u64le(v); break;
    case FED_WIRE_SET_MOMENTUM: s->momentum = fed_get_f32le(v); break;
    case FED_WIRE_SET_DP_SGD:
        s->dp_flags = fed_get_u32le(v);
        s->dp_clip = fed_get_f32le(v + 4);
        s->dp_noise = fed_get_f32le(v + 8);
        break;
    case FED_WIRE_SET_SECAGG:
        s->sa_on = fed_get_u32le(v);
        s->sa_try = fed_get_u32le(v + 4);
        s->sa_bits = fed_get_u32le(v + 8);
        s->sa_range = fed_get_f32le(v + 12);
        s->sa_clip = fed_get_f32le(v + 16);
        s->sa_max_weight = fed_get_f32le(v + 20);
        s->sa_dropout = fed_get_f32le(v + 24);
        return s->sa_on <= 1;
    case FED_WIRE_SET_GRAPH: /* a view; settings_ok checks it whole */
        s->graph = (const char *)v;
        s->graph_len = len;
        break;
    case FED_WIRE_SET_STATS: /* a view; settings_ok checks the values */
        s->stats_mode = fed_get_u32le(v);
        s->stats_cols = fed_get_u32le(v + 4);
        s->stats_min_count = fed_get_u64le(v + 8);
        s->stats = NULL;
        if (s->stats_mode == FED_WIRE_STATS_PASS && len > 16) {
            s->stats_noise = len >= 24 ? fed_get_f64le(v + 16) : 0;
            s->stats_bounds = v + 24;
            return s->stats_cols <= FED_WIRE_STATS_COLS_MAX &&
                   len == 24 + FED_WIRE_STATS_BOUND_BYTES * s->stats_cols;
        }
        s->stats = len > 16 ? v + 16 : NULL;
        return (s->stats_mode == FED_WIRE_STATS_PASS && len == 16) ||
               (s->stats_mode == FED_WIRE_STATS_APPLY && s->stats_cols <= FED_WIRE_STATS_COLS_MAX &&
                len == 16 + FED_WIRE_STATS_COL_BYTES * s->stats_cols);
    case FED_WIRE_SET_INPUT: /* settings_ok checks the counts */
        for (int i = 0; i < 4; i++)
            s->input[i] = fed_get_u32le(v + 4 * i);
        break;
    case FED_WIRE_SET_PATHS: /* settings_ok checks the globs */
        s->paths_on = 1;
        s->paths_flags = fed_get_u32le(v);
        s->sa_stats_range = fed_get_f32le(v + 4);
        memset(s->local_layers, 0, sizeof s->local_layers);
        memcpy(s->local_layers, v + 8, len - 8);
        return memchr(v + 8, 0, len - 8) == NULL;
    case FED_WIRE_SET_SITE_EVAL:
        s->eval_every = fed_get_u32le(v);
        s->eval_classes = fed_get_u32le(v + 4);
        return s->eval_every >= 1 && s->eval_classes >= 1 &&
               s->eval_classes <= FED_WIRE_INPUT_MAX;
    case FED_WIRE_SET_SCAFFOLD:
        s->scaffold_on = 1;
        s->scaffold_void = fed_get_u64le(v);
        break;
    case FED_WIRE_SET_KNOBS: return take_knobs(v, len, s);
    default: return 0;
    }
    return 1;
}

/* A known field of type's block into b. */
static int take_field(uint8_t type, uint16_t tag, const uint8_t *v, uint32_t len,
                      fed_wire_block *b)
{
    if (type == FED_WIRE_MODEL)
        return take_setting(tag, v, len, &b->settings);
    if (tag == FED_WIRE_FIELD_DP_REPORT) { /* DELTA, LEAVE */
        b->dp_epsilon = fed_get_f64le(v);
        b->dp_budget = fed_get_f64le(v + 8);
        return report_ok(b);
    }
    if (tag == FED_WIRE_FIELD_SEGMENTS) { /* DELTA */
        uint32_t count = fed_get_u32le(v);

        if (count < 1 || count > FED_WIRE_SEGMENTS_MAX || len != 4 + 8 * count)
            return 0;
        b->seg_count = count;
        for (uint32_t i = 0; i < count; i++) {
            b->seg_len[i] = fed_get_u32le(v + 4 + 8 * i);
            b->seg_rule[i] = fed_get_u32le(v + 8 + 8 * i);
        }
        return segments_ok(b);
    }
    return 0;
}

/* The fields after a block's fixed part: in (len bytes) starts at the
 * fields' length S; *end the bytes S and the fields took. Unknown fields
 * are skipped unless required (their tag in b->refused_tag). */
static fed_err decode_fields(const fed_wire_type_info *ti, const uint8_t *in, size_t len,
                             fed_wire_block *b, size_t *end)
{
    uint64_t seen = 0;
    uint32_t prev = 0;
    size_t total, at = FED_WIRE_FIELDS_LEN_BYTES;

    if (len < FED_WIRE_FIELDS_LEN_BYTES)
        return FED_ERR_PAYLOAD;
    total = fed_get_u32le(in);
    if (total > (ti->type == FED_WIRE_MODEL ? FED_WIRE_SETTINGS_MAX : FED_WIRE_FIELDS_MAX))
        return FED_ERR_FIELD_LENGTH;
    if (total > len - FED_WIRE_FIELDS_LEN_BYTES)
        return FED_ERR_FIELD_TRUNCATED;
    total += FED_WIRE_FIELDS_LEN_BYTES;
    while (at < total) {
        const fed_wire_field *f;
        uint16_t tag, flags;
        uint32_t flen;

        if (total - at < FED_WIRE_FIELD_HEAD_BYTES)
            return FED_ERR_FIELD_TRUNCATED; /* a field's head cut */
        tag = fed_get_u16le(in + at);
        flags = fed_get_u16le(in + at + 2);
        flen = fed_get_u32le(in + at + 4);
        at += FED_WIRE_FIELD_HEAD_BYTES;
        if (tag == 0 || tag <= prev)
            return FED_ERR_FIELD_ORDER; /* repeated or out of order */
        if (flags & ~FED_WIRE_FIELD_REQUIRED)
            return FED_ERR_PAYLOAD;
        if (flen > total - at)
            return FED_ERR_FIELD_TRUNCATED; /* its value runs past the fields */
        prev = tag;
        f = field_of(ti, tag);
        if (!f) {
            if (flags & FED_WIRE_FIELD_REQUIRED) {
                b->refused_tag = tag;
                return FED_ERR_FIELD_REQUIRED;
            }
        } else if (flen < f->min || flen > f->max) {
            return FED_ERR_FIELD_LENGTH;
        } else if (!take_field(ti->type, tag, in + at, flen, b)) {
            if (ti->type == FED_WIRE_MODEL && b->settings.refused_knob) {
                b->refused_tag = tag; /* a knob it must not ignore */
                return FED_ERR_FIELD_REQUIRED;
            }
            return FED_ERR_PAYLOAD;
        } else {
            seen |= (uint64_t)1 << (f - ti->fields);
        }
        at += flen;
    }
    for (uint16_t i = 0; i < ti->nfields; i++)
        if (ti->fields[i].must && !(seen >> i & 1))
            return FED_ERR_FIELD_MISSING;
    *end = total;
    return FED_OK;
}

fed_err fed_wire_block_encode(uint8_t type, const fed_wire_block *b, uint8_t *out, size_t cap,
                              size_t *len)
{
    const fed_wire_type_info *ti = fed_wire_type_row(type);
    size_t n = ti ? fed_wire_block_bytes(type, b) : 0;
    uint8_t *fields;

    *len = 0;
    if (n == 0)
        return FED_ERR_INVAL;
    if (cap < n)
        return FED_ERR_TOO_LARGE;
    memset(out, 0, n);
    fields = out + ti->fixed + FED_WIRE_FIELDS_LEN_BYTES;
    fed_put_u32le(out + ti->fixed, (uint32_t)(n - ti->fixed - FED_WIRE_FIELDS_LEN_BYTES));
    switch (type) {
    case FED_WIRE_HELLO:
        out[0] = b->role;
        fed_put_u64le(out + 8, b->caps);
        break;
    case FED_WIRE_NEXT: fed_put_u64le(out, b->round_ref); break;
    case FED_WIRE_MODEL:
        if (!settings_ok(&b->settings))
            return FED_ERR_INVAL;
        fed_put_u64le(out, b->samples);
        fields = encode_settings(&b->settings, fields);
        break;
    case FED_WIRE_DELTA:
        if (!report_ok(b) || !segments_ok(b))
            return FED_ERR_INVAL;
        fed_put_u64le(out, b->samples);
        fed_put_u64le(out + 8, b->round_ref);
        fields = encode_segments(b, encode_report(type, b, fields));
        break;
    case FED_WIRE_ACK:
        fed_put_u32le(out, b->status);
        fed_put_u32le(out + 4, b->ack_flags);
        break;
    case FED_WIRE_SHARE:
        if (!isfinite(b->weight) || b->weight < 0)
            return FED_ERR_INVAL;
        fed_put_u64le(out, b->samples);
        fed_put_f64le(out + 8, b->weight);
        break;
    case FED_WIRE_SLICE:
        fed_put_u64le(out, b->step);
        fed_put_u64le(out + 8, 0);
        break;
    case FED_WIRE_PEERS: fed_put_u32le(out, b->count); break;
    case FED_WIRE_LEAVE:
        if (!report_ok(b))
            return FED_ERR_INVAL;
        fed_put_u32le(out, b->reason);
        fields = encode_report(type, b, fields);
        break;
    case FED_WIRE_CHUNK:
        fed_put_u64le(out, b->stream_id);
        fed_put_u32le(out + 8, b->chunk_index);
        break;
    case FED_WIRE_AR_ABORT:
        fed_put_u64le(out, b->attempt);
        fed_put_u32le(out + 8, b->count);
        break;
    case FED_WIRE_AR_VERIFY:
        fed_put_u64le(out, b->attempt);
        fed_put_u64le(out + 8, b->in_row);
        memcpy(out + 16, b->result_hash, 32);
        break;
    default: /* FED_WIRE_SA_* */
        if (b->seg_count && (type != FED_WIRE_SA_MASKED || !segments_ok(b)))
            return FED_ERR_INVAL;
        fed_put_u32le(out, b->sa_try);
        fed_put_u32le(out + 4, b->sa_count);
        fields = encode_segments(b, fields);
        break;
    }
    assert(fields == out + n); /* the table's fields, each written */
    *len = n;
    return FED_OK;
}

/* The fixed part of type's block (ti->fixed bytes at in) into b. */
static int decode_fixed(uint8_t type, const uint8_t *in, fed_wire_block *b)
{
    switch (type) {
    case FED_WIRE_HELLO:
        b->role = in[0];
        b->caps = fed_get_u64le(in + 8);
        return all_zero(in + 1, 7) && b->role >= FED_WIRE_ROLE_PEER &&
               b->role <= FED_WIRE_ROLE_AGGREGATOR;
    case FED_WIRE_NEXT: b->round_ref = fed_get_u64le(in); return 1;
    case FED_WIRE_MODEL: b->samples = fed_get_u64le(in); return 1;
    case FED_WIRE_DELTA:
        b->samples = fed_get_u64le(in);
        b->round_ref = fed_get_u64le(in + 8);
        return 1;
    case FED_WIRE_ACK:
        b->status = fed_get_u32le(in);
        b->ack_flags = fed_get_u32le(in + 4);
        return b->status < FED_ERR_COUNT_ && (b->ack_flags & ~FED_WIRE_ACK_FLAGS) == 0;
    case FED_WIRE_SHARE:
        b->samples = fed_get_u64le(in);
        b->weight = fed_get_f64le(in + 8);
        return isfinite(b->weight) && b->weight >= 0;
    case FED_WIRE_SLICE: b->step = fed_get_u64le(in); return all_zero(in + 8, 8);
    case FED_WIRE_PEERS: b->count = fed_get_u32le(in); return all_zero(in + 4, 4);
    case FED_WIRE_LEAVE: b->reason = fed_get_u32le(in); return all_zero(in + 4, 4);
    case FED_WIRE_CHUNK:
        b->stream_id = fed_get_u64le(in);
        b->chunk_index = fed_get_u32le(in + 8);
        return all_zero(in + 12, 4);
    case FED_WIRE_AR_ABORT:
        b->attempt = fed_get_u64le(in);
        b->count = fed_get_u32le(in + 8);
        return all_zero(in + 12, 4);
    case FED_WIRE_AR_VERIFY:
        b->attempt = fed_get_u64le(in);
        b->in_row = fed_get_u64le(in + 8);
        memcpy(b->result_hash, in + 16, 32);
        return b->in_row >= 1;
    default: /* FED_WIRE_SA_* */
        b->sa_try = fed_get_u32le(in);
        b->sa_count = fed_get_u32le(in + 4);
        return all_zero(in + 8, 8);
    }
}

fed_err fed_wire_block_decode(uint8_t type, const uint8_t *in, size_t len, fed_wire_block *b,
                              size_t *used)
{
    const fed_wire_type_info *ti = fed_wire_type_row(type);
    size_t end = 0;
    fed_err err;

    memset(b, 0, sizeof *b);
    *used = 0;
    if (!ti || len < ti->fixed || !decode_fixed(type, in, b))
        return FED_ERR_PAYLOAD;
    err = decode_fields(ti, in + ti->fixed, len - ti->fixed, b, &end);
    if (err != FED_OK)
        return err;
    if (type == FED_WIRE_MODEL && !settings_ok(&b->settings))
        return FED_ERR_PAYLOAD;
    *used = ti->fixed + end;
    return FED_OK;
}

/* ---- the node's wire ---- */

void fed_wire_cfg_default(fed_wire_cfg *cfg)
{
    cfg->max_frame = FED_WIRE_MAX_FRAME_DEFAULT;
    cfg->max_rx_streams = 4;
    cfg->max_stream_bytes = (uint64_t)64 << 30;
    cfg->hooks = NULL;
}

const fed_wire_hooks fedi_wire_hooks_unsealed = {.unsealed = 1};

int fed_wire_cfg_unsealed(const fed_wire_cfg *cfg) { return cfg->hooks && cfg->hooks->unsealed; }

fed_err fed_wire_new(const fed_wire_cfg *cfg, fed_crypto_arena *arena,
                     const fed_crypto_allow *allow, fed_wire **out)
{
    fed_wire_cfg def;
    fed_wire *w;
    fed_err err;

    *out = NULL;
    if (!cfg) {
        fed_wire_cfg_default(&def);
        cfg = &def;
    }
    if (cfg->max_frame < FED_WIRE_MIN_FRAME || cfg->max_frame > FED_WIRE_MAX_FRAME_LIMIT ||
        cfg->max_rx_streams > 4096 || !arena || !allow)
        return FED_ERR_INVAL;
    w = fed_calloc(1, sizeof *w);
    if (!w)
        return FED_ERR_NOMEM;
    w->cfg = *cfg;
    w->unsealed = fed_wire_cfg_unsealed(cfg);
    w->arena = arena;
    w->allow = allow;
    w->rx = fed_calloc(cfg->max_rx_streams ? cfg->max_rx_streams : 1, sizeof *w->rx);
    err = w->rx ? fed_crypto_replay_new(&w->replay) : FED_ERR_NOMEM;
    if (err != FED_OK) {
        fed_wire_free(w);
        return err;
    }
    *out = w;
    return FED_OK;
}

void fed_wire_free(fed_wire *w)
{
    if (!w)
        return;
    for (uint32_t i = 0; w->rx && i < w->cfg.max_rx_streams; i++)
        if (w->rx[i])
            fed_wire_stream_close(w, w->rx[i]);
    fed_free(w->rx);
    fed_crypto_replay_free(w->replay);
    fed_free(w);
}

void fed_wire_set_epoch(fed_wire *w, uint64_t epoch) { w->epoch = epoch; }

uint64_t fed_wire_epoch(const fed_wire *w) { return w->epoch; }

void fed_wire_set_stream_dst(fed_wire *w, fed_wire_dst_fn fn, void *ctx)
{
    w->dst_fn = fn;
    w->dst_ctx = ctx;
}

void fed_wire_set_member_fn(fed_wire *w, fed_wire_member_fn fn, void *ctx)
{
    w->member_fn = fn;
    w->member_ctx = ctx;
}

const fed_wire_cfg *fed_wire_config(const fed_wire *w) { return &w->cfg; }

fed_crypto_arena *fed_wire_arena(const fed_wire *w) { return w->arena; }

const uint8_t *fed_wire_self(const fed_wire *w) { return fed_crypto_arena_pubkey(w->arena); }

uint64_t fed_wire_peer_epoch(const fed_wire *w, const uint8_t pk[32])
{
    return fed_crypto_replay_epoch(w->replay, pk);
}

/* ---- counters ---- */

static const char *const counter_names[] = {
#define FED_WIRE_COUNTER_NAME_(name) #name,
    FED_WIRE_COUNTER_LIST(FED_WIRE_COUNTER_NAME_)
#undef FED_WIRE_COUNTER_NAME_
};

const fed_wire_counters *fed_wire_get_counters(const fed_wire *w) { return &w->counters; }

size_t fed_wire_counter_count(void) { return sizeof counter_names / sizeof counter_names[0]; }

const char *fed_wire_counter_name(size_t i)
{
    return i < fed_wire_counter_count() ? counter_names[i] : NULL;
}

void fed_wire_set_conn_counters(fed_wire *w, uint64_t refused, uint64_t stalled,
                                uint64_t handshake, uint64_t dropped)
{
    w->counters.conn_refused = refused;
    w->counters.conn_stalled = stalled;
    w->counters.conn_handshake = handshake;
    w->counters.conn_dropped = dropped;
}

uint64_t fed_wire_counter_value(const fed_wire_counters *c, size_t i)
{
    const uint64_t *v = (const uint64_t *)(const void *)c;

    return i < fed_wire_counter_count() ? v[i] : 0;
}

static uint64_t *reject_counter(fed_wire_counters *c, fed_err err)
{
    switch (err) {
    case FED_ERR_FRAME_TRUNCATED: return &c->rej_truncated;
    case FED_ERR_FRAME_MAGIC: return &c->rej_magic;
    case FED_ERR_FRAME_VERSION: return &c->rej_version;
    case FED_ERR_FRAME_TOO_LARGE: return &c->rej_too_large;
    case FED_ERR_FRAME_TYPE: return &c->rej_type;
    case FED_ERR_WRONG_RECIPIENT: return &c->rej_wrong_recipient;
    case FED_ERR_OLD_EPOCH: return &c->rej_old_epoch;
    case FED_ERR_UNKNOWN_SENDER: return &c->rej_unknown_sender;
    case FED_ERR_SENDER_EPOCH: return &c->rej_sender_epoch;
    case FED_ERR_REPLAY: return &c->rej_replay;
    case FED_ERR_BUSY: return &c->rej_busy;
    case FED_ERR_AEAD: return &c->rej_aead;
    case FED_ERR_SIGNATURE: return &c->rej_signature;
    case FED_ERR_PAYLOAD:
    case FED_ERR_FIELD_REQUIRED:
    case FED_ERR_FIELD_TRUNCATED:
    case FED_ERR_FIELD_ORDER:
    case FED_ERR_FIELD_LENGTH:
    case FED_ERR_FIELD_MISSING: return &c->rej_payload;
    case FED_ERR_STREAM: return &c->rej_stream;
    case FED_ERR_STREAM_LIMIT: return &c->rej_stream_limit;
    case FED_ERR_CODEC: return &c->rej_codec;
    case FED_ERR_SA_KEYS: return &c->rej_sa_keys;
    case FED_ERR_SA_SHARES: return &c->rej_sa_shares;
    case FED_ERR_SA_MASKED: return &c->rej_sa_masked;
    case FED_ERR_SA_CONSIST: return &c->rej_sa_consist;
    case FED_ERR_SA_UNMASK: return &c->rej_sa_unmask;
    case FED_ERR_NAN: return &c->rej_nan;
    default: return &c->rej_other;
    }
}

fed_err fed_wire_counter_reason(size_t i)
{
    fed_wire_counters probe;
    const uint64_t *base = (const uint64_t *)(const void *)&probe;

    for (int e = 1; e < FED_ERR_COUNT_; e++) {
        const uint64_t *p = reject_counter(&probe, (fed_err)e);

        if (p != &probe.rej_other && (size_t)(p - base) == i)
            return (fed_err)e;
    }
    return FED_OK;
}

static void wire_count_reject(fed_wire *w, const fed_wire_hdr *h, fed_err err)
{
    (*reject_counter(&w->counters, err))++;
    if (h)
        fed_log(FED_LOG_INFO, "wire: dropped %s from %02x%02x%02x%02x epoch %llu seq %llu: %s (%s)",
                fed_wire_type_name(h->type), h->sender[0], h->sender[1], h->sender[2], h->sender[3],
                (unsigned long long)h->sender_epoch, (unsigned long long)h->seq, fed_strerror(err),
                fed_errname(err));
    else
        fed_log(FED_LOG_INFO, "wire: dropped a frame: %s (%s)", fed_strerror(err),
                fed_errname(err));
}

/* A frame of another wire version (its header is not decoded, but every
 * version since 1 puts the sender's key at the same place): counted, and
 * logged with both versions and the sender, the operator's clue to upgrade
 * whichever node is older. */
static void reject_version(fed_wire *w, const uint8_t *frame)
{
    const uint8_t *pk = frame + FED_WIRE_OFF_SENDER;

    w->counters.rej_version++;
    fed_log(FED_LOG_WARN, "wire: dropped a frame of wire version %u from %02x%02x%02x%02x "
            "(unauthenticated): this node speaks version %u; upgrade the %s", frame[4], pk[0],
            pk[1], pk[2], pk[3],
            FED_WIRE_VERSION, frame[4] < FED_WIRE_VERSION ? "sender" : "receiver");
}

void fed_wire_note_reject(fed_wire *w, const fed_wire_hdr *h, fed_err err)
{
    wire_count_reject(w, h, err);
}

void fed_wire_note_leave(fed_wire *w, fed_err reason)
{
    if (reason == FED_ERR_SA_REQUIRED)
        w->counters.leave_no_secagg++;
    else if (reason == FED_ERR_MODEL_MISMATCH)
        w->counters.leave_bad_model++;
}

/* ---- sending ---- */

size_t fed_wire_frame_bytes(size_t payload_len) { return payload_len + FED_WIRE_SEAL_OVERHEAD; }

fed_err fed_wire_seal_prepare(fed_wire *w, fed_wire_hdr *h, size_t cap, size_t payload_len,
                              fed_wire_ticket *t)
{
    fed_err err;

    memset(t, 0, sizeof *t);
    if (!fed_crypto_arena_has_identity(w->arena))
        return FED_ERR_KEY;
    if (!fed_wire_flags_ok(h->type, h->flags) ||
        (h->flags & (FED_WIRE_FLAG_STREAM | FED_WIRE_FLAG_DATA)))
        return FED_ERR_INVAL;
    if (payload_len > w->cfg.max_frame - FED_WIRE_SEAL_OVERHEAD)
        return FED_ERR_FRAME_TOO_LARGE;
    if (cap < fed_wire_frame_bytes(payload_len))
        return FED_ERR_TOO_LARGE;
    memcpy(h->sender, fed_wire_self(w), 32);
    h->payload_len = (uint32_t)payload_len;
    if (!w->unsealed && (err = fed_crypto_session_get(w->arena, h->recipient, &t->session)) !=
                                 FED_OK)
        return err;
    t->hdr = *h;
    t->kind = FED_WIRE_KIND_SEALED;
    return FED_OK;
}

fed_err fed_wire_seal_ticket(const fed_wire *w, fed_wire_ticket *t, uint8_t *frame,
                             const uint8_t *payload_hash, fed_random_fn rnd, void *rnd_ctx,
                             size_t *frame_len)
{
    fed_err err;

    rnd(rnd_ctx, t->hdr.nonce, sizeof t->hdr.nonce);
    fed_wire_hdr_encode(&t->hdr, frame);
    if (w->unsealed) { /* the seal's place, zeroed */
        memset(frame + FED_WIRE_HEADER_BYTES + t->hdr.payload_len, 0, FED_CRYPTO_SEAL_OVERHEAD);
        *frame_len = fed_wire_frame_bytes(t->hdr.payload_len);
        return FED_OK;
    }
    err = fed_crypto_seal(w->arena, t->session, frame, FED_WIRE_HEADER_BYTES, t->hdr.nonce,
                          frame + FED_WIRE_HEADER_BYTES, t->hdr.payload_len, payload_hash, NULL);
    *frame_len = err == FED_OK ? fed_wire_frame_bytes(t->hdr.payload_len) : 0;
    return err;
}

void fed_wire_seal_done(fed_wire *w, fed_wire_ticket *t, fed_err result)
{
    fed_crypto_session_put(w->arena, t->session);
    t->session = NULL;
    if (result == FED_OK) {
        w->counters.sealed++;
        w->counters.bytes_out += fed_wire_frame_bytes(t->hdr.payload_len);
    }
}

void fed_wire_seal_unpin(fed_wire *w, fed_wire_ticket *t)
{
    fed_crypto_session_put(w->arena, t->session);
    t->session = NULL;
}

fed_err fed_wire_seal(fed_wire *w, fed_wire_hdr *h, uint8_t *frame, size_t cap, size_t payload_len,
                      fed_random_fn rnd, void *rnd_ctx, size_t *frame_len)
{
    fed_wire_ticket t;
    fed_err err = fed_wire_seal_prepare(w, h, cap, payload_len, &t);

    *frame_len = 0;
    if (err != FED_OK)
        return err;
    err = fed_wire_seal_ticket(w, &t, frame, NULL, rnd, rnd_ctx, frame_len);
    fed_wire_seal_done(w, &t, err);
    if (err == FED_OK)
        memcpy(h->nonce, t.hdr.nonce, sizeof h->nonce);
    return err;
}

fed_err fed_wire_build(fed_wire *w, fed_wire_hdr *h, const fed_wire_block *b, const uint8_t *vector,
                       size_t vector_len, uint8_t *frame, size_t cap, fed_random_fn rnd,
                       void *rnd_ctx, size_t *frame_len)
{
    size_t blen = 0, room = cap > FED_WIRE_SEAL_OVERHEAD ? cap - FED_WIRE_SEAL_OVERHEAD : 0;
    fed_err err;

    *frame_len = 0;
    err = fed_wire_block_encode(h->type, b, fed_wire_payload(frame), room, &blen);
    if (err != FED_OK)
        return err;
    if (vector_len > room - blen)
        return FED_ERR_TOO_LARGE;
    if (vector_len)
        memcpy(fed_wire_payload(frame) + blen, vector, vector_len);
    return fed_wire_seal(w, h, frame, cap, blen + vector_len, rnd, rnd_ctx, frame_len);
}

/* ---- receiving: the cheap checks ---- */

static fed_err check_length(const fed_wire *w, const fed_wire_hdr *h, size_t len)
{
    uint64_t expect;

    if (h->payload_len > w->cfg.max_frame)
        return FED_ERR_FRAME_TOO_LARGE;
    if (h->type == FED_WIRE_CHUNK && h->flags == FED_WIRE_FLAG_DATA)
        expect = (uint64_t)FED_WIRE_HEADER_BYTES + h->payload_len + FED_WIRE_MAC_BYTES;
    else
        expect = (uint64_t)FED_WIRE_HEADER_BYTES + h->payload_len + FED_CRYPTO_SEAL_OVERHEAD;
    if (h->flags & FED_WIRE_FLAG_STREAM)
        expect += FED_WIRE_STREAM_ABYTES; /* at least message 0 follows */
    if (len < expect)
        return FED_ERR_FRAME_TRUNCATED;
    if (len > expect && !(h->flags & FED_WIRE_FLAG_STREAM))
        return FED_ERR_FRAME_TOO_LARGE;
    return FED_OK;
}

static fed_err check_recipient(const fed_wire *w, const fed_wire_hdr *h)
{
    if (memcmp(h->recipient, fed_wire_self(w), 32) != 0)
        return FED_ERR_WRONG_RECIPIENT;
    if ((fed_wire_type_row(h->type)->epoch0 ||
         (h->type == FED_WIRE_CHUNK && h->flags == FED_WIRE_FLAG_DATA)) &&
        h->recipient_epoch == 0)
        return FED_OK; /* the sender does not know our epoch (yet); a chunk of a
                          SHARE or SLICE stream says what its first frame said,
                          and only a stream this epoch took can take it */
    if (h->recipient_epoch < w->epoch)
        return FED_ERR_OLD_EPOCH;
    if (h->recipient_epoch > w->epoch)
        return FED_ERR_WRONG_RECIPIENT; /* an epoch this node never had */
    return FED_OK;
}

static fed_err check_sender(const fed_wire *w, const fed_wire_hdr *h)
{
    int member;

    if (memcmp(h->sender, fed_wire_self(w), 32) == 0)
        return FED_ERR_UNKNOWN_SENDER;
    member = w->member_fn ? w->member_fn(w->member_ctx, h->sender)
                          : fed_crypto_allow_find(w->allow, h->sender) != NULL;
    return member ? FED_OK : FED_ERR_UNKNOWN_SENDER;
}

int fed_wire_is_member(const fed_wire *w, const uint8_t pk[32])
{
    fed_wire_hdr h;

    memset(&h, 0, sizeof h);
    memcpy(h.sender, pk, 32);
    return check_sender(w, &h) == FED_OK;
}

static fed_err cheap_checks(fed_wire *w, const uint8_t *frame, size_t len, fed_wire_ticket *t,
                            int *have_hdr)
{
    fed_err err;

    *have_hdr = 0;
    if (len > w->cfg.max_frame)
        return FED_ERR_FRAME_TOO_LARGE;
    if ((err = fed_wire_hdr_decode(frame, len, &t->hdr)) != FED_OK)
        return err;
    *have_hdr = 1;
    if ((err = check_length(w, &t->hdr, len)) != FED_OK ||
        (err = check_recipient(w, &t->hdr)) != FED_OK || (err = check_sender(w, &t->hdr)) != FED_OK)
        return err;
    return FED_OK;
}

fed_err fed_wire_precheck(fed_wire *w, const uint8_t *frame, size_t len, fed_wire_ticket *t)
{
    int have_hdr = 0;
    fed_err err;

    memset(t, 0, sizeof *t);
    t->frame_len = len;
    err = cheap_checks(w, frame, len, t, &have_hdr);
    if (err == FED_OK)
        err = fed_crypto_replay_reserve(w->replay, t->hdr.sender, t->hdr.sender_epoch, t->hdr.seq);
    if (err == FED_OK) {
        t->reserved = 1;
        if (t->hdr.type == FED_WIRE_CHUNK && t->hdr.flags == FED_WIRE_FLAG_DATA) {
            t->kind = FED_WIRE_KIND_DATA;
            err = fedi_wire_rx_claim(w, &t->hdr, &t->stream);
        } else {
            t->kind =
                t->hdr.flags & FED_WIRE_FLAG_STREAM ? FED_WIRE_KIND_FIRST : FED_WIRE_KIND_SEALED;
            if (t->kind == FED_WIRE_KIND_FIRST)
                err = fedi_wire_rx_pending(w, &t->hdr, &t->stream);
            if (err == FED_OK && !w->unsealed)
                err = fed_crypto_session_get(w->arena, t->hdr.sender, &t->session);
        }
    }
    if (err != FED_OK) {
        if (t->kind == FED_WIRE_KIND_FIRST && t->stream &&
            fedi_wire_rx_settle_first(w, t->stream, err) != FED_OK) {
            /* freed: a failed result always frees the pending stream */
        } else if (t->kind == FED_WIRE_KIND_DATA && t->stream)
            fedi_wire_rx_settle_data(w, t->stream, err);
        if (t->reserved)
            fed_crypto_replay_release(w->replay, t->hdr.sender, t->hdr.sender_epoch, t->hdr.seq);
        if (err == FED_ERR_FRAME_VERSION)
            reject_version(w, frame);
        else
            wire_count_reject(w, have_hdr ? &t->hdr : NULL, err);
        memset(t, 0, sizeof *t);
    }
    return err;
}

/* ---- receiving: the expensive part ---- */

/* What follows a sealed frame's block, against its type's row: nothing, or
 * count entries of their size (the codec and secure aggregation's vectors
 * are their decoders' to check). */
static fed_err vector_ok(const fed_wire_type_info *ti, const fed_wire_block *b, size_t len)
{
    switch (ti->vector) {
    case FED_WIRE_VEC_NONE: return len == 0 ? FED_OK : FED_ERR_PAYLOAD;
    case FED_WIRE_VEC_PEERS: /* entries of at least vec_entry bytes */
        return len >= (size_t)b->count * ti->vec_entry ? FED_OK : FED_ERR_PAYLOAD;
    case FED_WIRE_VEC_KEYS: return len == (size_t)b->count * ti->vec_entry ? FED_OK : FED_ERR_PAYLOAD;
    default: return FED_OK;
    }
}

static fed_err open_sealed(const fed_wire *w, fed_wire_ticket *t, uint8_t *frame, size_t len,
                           fed_wire_msg *m)
{
    uint32_t plen = t->hdr.payload_len;
    uint8_t *payload = frame + FED_WIRE_HEADER_BYTES;
    size_t used = 0;
    fed_err err;

    if (w->unsealed) {
        memset(m->digest, 0, sizeof m->digest);
        memset(m->sig, 0, sizeof m->sig);
        err = FED_OK;
    } else {
        err = fed_crypto_open(t->session, frame, FED_WIRE_HEADER_BYTES, frame + FED_WIRE_OFF_NONCE,
                              payload, payload, plen, m->digest, m->sig);
    }
    if (err != FED_OK)
        return err;
    m->payload = payload;
    m->payload_len = plen;
    err = fed_wire_block_decode(t->hdr.type, payload, plen, &m->block, &used);
    if (err != FED_OK)
        return err;
    if (t->kind == FED_WIRE_KIND_FIRST) {
        size_t sealed = FED_WIRE_HEADER_BYTES + (size_t)plen + FED_CRYPTO_SEAL_OVERHEAD;

        m->stream = t->stream;
        return fedi_wire_rx_first(w, t->stream, m, payload + used, plen - used, frame + sealed,
                                  len - sealed);
    }
    m->vector = payload + used;
    m->vector_len = plen - used;
    return vector_ok(fed_wire_type_row(t->hdr.type), &m->block, m->vector_len);
}

fed_err fed_wire_open_ticket(const fed_wire *w, fed_wire_ticket *t, uint8_t *frame, size_t len,
                             fed_wire_msg *m)
{
    memset(m, 0, sizeof *m);
    m->hdr = t->hdr;
    m->header = frame;
    if (t->kind == FED_WIRE_KIND_DATA) {
        m->stream = t->stream;
        return fedi_wire_rx_data(w, t->stream, frame, len, m);
    }
    return open_sealed(w, t, frame, len, m);
}

fed_err fed_wire_finish(fed_wire *w, fed_wire_ticket *t, fed_err result, fed_wire_msg *m)
{
    const fed_wire_hdr *h = &t->hdr;

    fed_crypto_session_put(w->arena, t->session);
    t->session = NULL;
    if (t->kind == FED_WIRE_KIND_FIRST)
        result = fedi_wire_rx_settle_first(w, t->stream, result);
    if (result == FED_OK) {
        result = fed_crypto_replay_commit(w->replay, h->sender, h->sender_epoch, h->seq);
        t->reserved = 0;
        if (result != FED_OK && t->kind == FED_WIRE_KIND_FIRST)
            fed_wire_stream_close(w, t->stream);
    }
    if (t->kind == FED_WIRE_KIND_DATA)
        fedi_wire_rx_settle_data(w, t->stream, result);
    if (t->reserved)
        fed_crypto_replay_release(w->replay, h->sender, h->sender_epoch, h->seq);
    t->reserved = 0;
    if (result == FED_OK) {
        w->counters.opened++;
        w->counters.bytes_in += t->frame_len;
    } else {
        if (result == FED_ERR_FIELD_REQUIRED && m)
            fed_log(FED_LOG_INFO, "wire: %s field tag %u is marked required; wire "
                    "version %u does not know it", fed_wire_type_name(h->type),
                    (unsigned)m->block.refused_tag, FED_WIRE_VERSION);
        wire_count_reject(w, h, result);
        if (m) {
            m->stream = NULL;
            m->stream_done = 0;
        }
    }
    return result;
}

fed_err fed_wire_open(fed_wire *w, uint8_t *frame, size_t len, fed_wire_msg *m)
{
    fed_wire_ticket t;
    fed_err err;

    memset(m, 0, sizeof *m);
    err = fed_wire_precheck(w, frame, len, &t);
    if (err != FED_OK)
        return err;
    err = fed_wire_open_ticket(w, &t, frame, len, m);
    return fed_wire_finish(w, &t, err, m);
}
