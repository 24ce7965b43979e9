/* agg_input_impl.h - the seam of a round's aggregation, "the round's aggregate
 * input": what the aggregator's round path asks of however the round's
 * contributions are combined (node/agg_input.c: plain, secure, DP-FedAvg
 * around either), and the segmented vector a contribution is. Not a public
 * header: the aggregator role's files and the tests include it.
 *
 * A contribution is a vector of segments, each a run of floats with its
 * own weight rule and, under secure aggregation, its own quantization
 * range. The model delta is segment 0 (rule SAMPLES, through the merge
 * strategy), a model's non-trained statistics segment 1 (SAMPLES, outside
 * it: node/layout.h); secure aggregation carries its summed weight after
 * them (rule SUM), and may carry integers summed exactly (encoding INT64,
 * below: federated statistics, a site evaluation's counts). A
 * control-variate delta (SCAFFOLD) or step counts come as more segments;
 * hierarchical aggregation as another agg_input_ops.
 *
 * The round path (fedi_node_agg_close_round) has one course over the table:
 * begin when the parts are drawn, take each contribution, close (merged by
 * the strategy, or a void outcome: no update), record with the commit,
 * drop when the round is over. Whether rounds are synchronous or FedBuff's
 * is the other table, agg_mode_ops (aggregator_impl.h). */
#ifndef FED_NODE_AGG_INPUT_IMPL_H
#define FED_NODE_AGG_INPUT_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"
#include "model/merge.h"

/* How a segment's contributions combine. */
typedef enum agg_weight {
    AGG_WEIGHT_SAMPLES = 0, /* the mean weighted by each contribution's samples */
    AGG_WEIGHT_MEAN = 1,    /* the unweighted mean */
    AGG_WEIGHT_SUM = 2      /* the sum */
} agg_weight;

/* What a segment's values are, and how secure aggregation words them.
 * QUANT: floats, clamped into [-range, range] and stochastically rounded
 * into one bits-bit word each (secagg/quant.h): the sum within a bound.
 * INT64: 64-bit integers summed exactly modulo 2^64 (a negative value as
 * its two's complement, so a sum that fits int64 comes back as itself):
 * each value cut into fedi_agg_int_limbs(bits) limbs of bits bits, low limb
 * first, one u32 word each. The round's check m (2^bits - 1) < 2^32
 * (fed_secagg_quant_check) keeps each limb's sum from wrapping, so the
 * limb sums carry into each other only when the aggregator recombines
 * them (sum_j S_j 2^(j bits) mod 2^64): exact, with no mask change (the
 * masks still cancel mod 2^32 word by word). Rule SUM only; range unused. */
typedef enum agg_encoding {
    AGG_ENC_QUANT = 0,
    AGG_ENC_INT64 = 1
} agg_encoding;

typedef struct agg_segment {
    const char *name; /* for messages: "delta", "weight", ... */
    size_t len;       /* values: floats (QUANT) or integers (INT64) */
    agg_weight rule;
    double range;     /* secure QUANT: each value clamped into [-range, range]
                         and quantized on its own scale (> 0); else unused */
    agg_encoding enc; /* 0: QUANT */
} agg_segment;

/* At most this many segments in a contribution. */
#define AGG_SEGMENTS_MAX 8

/* The floats of segs[0..nseg) together (QUANT segments). */
size_t fedi_agg_seg_len(const agg_segment *segs, size_t nseg);
/* The integers of segs[0..nseg) together (INT64 segments). */
size_t fedi_agg_seg_ints(const agg_segment *segs, size_t nseg);
/* Words of one INT64 value at bits (1..32): ceil(64 / bits). */
uint32_t fedi_agg_int_limbs(uint32_t bits);
/* The u32 words of segs[0..nseg) quantized at bits: a word a float, limbs
 * an integer. */
size_t fedi_agg_seg_words(const agg_segment *segs, size_t nseg, uint32_t bits);

/* Plain: m contributions x[i] (each fedi_agg_seg_len floats, weight w[i] >
 * 0 for the SAMPLES rule) into out, segment by segment as its rule says,
 * summed in double in contribution order. FED_ERR_INVAL for no
 * contribution or a SAMPLES segment whose weights sum to 0. */
FED_WUR fed_err fedi_agg_seg_reduce(const agg_segment *segs, size_t nseg, const float *const *x,
                                    const double *w, size_t m, float *out);

/* The integers of m contributions ix[i] (each fedi_agg_seg_ints values)
 * summed modulo 2^64 into out, in contribution order (plain). FED_ERR_INVAL
 * for no contribution or an INT64 segment whose rule is not SUM. */
FED_WUR fed_err fedi_agg_seg_reduce_ints(const agg_segment *segs, size_t nseg,
                                         const int64_t *const *ix, size_t m, uint64_t *out);

/* Secure: one contribution (its floats x, already weighted as their rule
 * needs, see below; its integers ix, NULL when it has none) into
 * fedi_agg_seg_words words, segment by segment: a QUANT segment's floats at
 * its own range, the stochastic rounding drawn from rng in coordinate
 * order (so one segment is fed_secagg_quantize's words exactly); an INT64
 * segment's integers as limbs (exact, no draw). FED_ERR_NAN for a float
 * that is not finite (out untouched), FED_ERR_INVAL for a bad range or
 * bits, or an INT64 segment whose rule is not SUM. */
FED_WUR fed_err fedi_agg_seg_quantize(const agg_segment *segs, size_t nseg, uint32_t bits,
                                      const float *x, const int64_t *ix, fed_rng *rng,
                                      uint32_t *out);
/* Secure: the sum of m quantized contributions back, each segment on its
 * scale. Floats into out: the sum of the clamped values, within
 * fed_secagg_quant_bound (m 2 range / (2^bits - 1)) per coordinate. A
 * SAMPLES or MEAN segment is divided afterwards (by the summed weight, or
 * m); a client sends a SAMPLES segment times f = w / W (W the weight cap),
 * and f in a SUM segment, so the sum's weight comes out of the sum.
 * Integers into iout (NULL when there are none): the exact sum modulo 2^64
 * (read it as int64_t for signed values). */
FED_WUR fed_err fedi_agg_seg_dequantize(const agg_segment *segs, size_t nseg, uint32_t bits,
                                        const uint32_t *sum, uint32_t m, float *out,
                                        uint64_t *iout);

/* A dequantized sum deq (m contributions, weight their summed weight) into
 * each segment's value by its rule: SAMPLES divided by weight, MEAN by m,
 * SUM as it is (QUANT segments only: integers need no finishing). */
void fedi_agg_seg_finish(const agg_segment *segs, size_t nseg, const float *deq, uint32_t m,
                         double weight, float *out);

/* The segments of a secure contribution, into segs (returned: how many):
 * the sent delta's nd segments (delta, each at its own range: the trained
 * floats, then the statistics, node/layout.h) and its weight (one SUM
 * value, 2 range f - range) at range; then, when nints > 0, nints integers
 * (INT64, SUM: fed_node_config.secagg.ints). */
size_t fedi_agg_seg_secure(const agg_segment *delta, size_t nd, double range, size_t nints,
                           agg_segment *segs);

/* The shared statistics' contribution (model/colstats.h): cols x
 * FED_COLSTATS_INTS integers as one INT64 segment into seg (returned: 1). */
size_t fedi_agg_seg_stats(uint32_t cols, agg_segment *seg);
/* In the clear (the statistics pass's DELTA) each integer goes as limbs of
 * this many bits, one float each (exact in f32), summed as words by the
 * aggregator: fewer than 65537 clients a round. */
#define FED_AGG_PLAIN_INT_BITS 16

/* ---- the round's aggregate input, for the aggregator's round path ---- */
typedef struct fed_node fed_node;
typedef struct node_open node_open;
typedef struct agg_part agg_part;
typedef struct fed_node_round_info fed_node_round_info;

/* What close hands the strategy. */
typedef struct agg_close {
    int update;                 /* 0: void, no update (the model stays as committed) */
    int count;                  /* merge inputs in n->agg->inputs */
    fed_merge_result *results;  /* where fed_merge_apply writes (per input) */
    fed_merge_result one;       /* a result nobody reads (one noised input) */
    uint32_t unclipped;         /* DP-FedAvg: parts within the clip */
    double dp_clip;             /* DP-FedAvg: the clip the round used (0: none) */
} agg_close;

typedef struct agg_input_ops {
    const char *name;
    const char *strategy_prefix; /* before the strategy in the round's row: "dp+" */
    int durable;                 /* the commit is fsynced whatever --db-sync says */
    /* The round's parts are drawn (n->agg->parts): a round begins. */
    fed_err (*begin)(fed_node *n);
    /* A checked DELTA of part p: kept and ACKed. NULL: this input takes no
     * DELTA (secure: masked stage messages only, through on_stage). */
    fed_err (*take)(fed_node *n, node_open *op, agg_part *p);
    /* A stage message (FED_WIRE_SA_*); NULL: none is expected. */
    fed_err (*on_stage)(fed_node *n, node_open *op);
    /* The round's contributions into the merge inputs and merged by the
     * strategy into the global model (its host copy too), n->agg->results
     * per part; or a void outcome (out->update 0: nothing merged, the
     * model and strategy as committed). */
    fed_err (*close)(fed_node *n, agg_close *out);
    /* Inside the round's commit transaction, before its contributions:
     * what the input records with it (a DP-FedAvg charge, *eps the epsilon
     * after it; a secure try's row). */
    fed_err (*record)(fed_node *n, const fed_node_round_info *info, double *eps);
    /* The transaction committed (ok) or rolled back. */
    void (*recorded)(fed_node *n, int ok, double eps);
    /* The round is committed (info complete but for what this adds: a
     * DP-FedAvg round's epsilon): its line in the log. */
    void (*committed)(fed_node *n, fed_node_round_info *info, const agg_close *out);
    /* 1 when the round's input, once closed, cannot be gathered again (a
     * secure sum unmasked or void: the clients revealed their shares), so
     * a failed commit keeps it and commits again. */
    int (*spent)(const fed_node *n);
    /* What the contributions table says of part i without a delta or a
     * refusal. */
    const char *(*fate)(const fed_node *n, size_t i);
    /* The round is over (committed or dropped): what it held wiped. */
    void (*drop)(fed_node *n);
} agg_input_ops;

/* The aggregate input cfg asks for: plain or secure, DP-FedAvg around
 * either; *inner the one a wrapper wraps (itself when none). Set after
 * n->agg->sa and n->agg->dp. */
const agg_input_ops *fedi_node_agg_input_of(const fed_node *n, const agg_input_ops **inner);

/* A host vector as merge input k's delta: itself on the CPU backend, else
 * uploaded to the input's device buffer. */
FED_WUR fed_err fedi_node_agg_input_vec(fed_node *n, int k, const float *host, const float **delta);

#endif
