/* layout.h - which path each of a model's tensors takes through a round
 * (issue 33's "tensors that are not trained", issue 38's --local-layers
 * and --local-bn): trained and shared tensors are the delta's segment 0
 * and go through the merge strategy; shared statistics (not trained:
 * batch norm's running mean and variance) are segment 1, averaged by
 * sample weight outside the strategy; local tensors (--local-layers
 * globs, every norm tensor under --local-bn, counters, statistics under
 * DP) never leave the site. A sent delta is segment 0's floats, then
 * segment 1's, each in the flat buffer's order. Not a public header: the
 * client, the aggregator and the tests include it. */
#ifndef FED_NODE_LAYOUT_H
#define FED_NODE_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "gossip/wire.h"
#include "model/model.h"
#include "node/agg_input_impl.h"

typedef enum layout_path {
    LAYOUT_TRAINED = 0, /* segment 0: through the strategy */
    LAYOUT_STATS = 1,   /* segment 1: sample-weighted mean, outside it */
    LAYOUT_LOCAL = 2,   /* never sent: each site keeps its own */
    LAYOUT_PATHS = 3
} layout_path;

/* A run of adjacent floats of the flat buffer on one path. */
typedef struct layout_run {
    size_t off, len;
    layout_path path;
} layout_run;

/* What decides the paths: the aggregator's settings (MODEL field 16). */
typedef struct layout_rules {
    const char *local_layers; /* comma-separated globs over tensor names ("" or NULL: none) */
    int local_bn;             /* every FED_TENSOR_NORM tensor local (FedBN) */
    int stats_local;          /* statistics never leave the site (DP) */
    int fednova;              /* a "steps" segment: the client's a_i (FedNova) */
    int scaffold;             /* a "control" segment: the change of c_i over the
                                 trained floats (SCAFFOLD) */
} layout_rules;

/* FedNova's steps segment under secure aggregation: a_i quantized in
 * [-range, range] (a client with more momentum-weighted steps declines the
 * round, FED_ERR_STEPS). */
#define FED_NODE_STEPS_RANGE 65536.0

typedef struct fed_node_layout {
    size_t nparams;
    size_t len[LAYOUT_PATHS]; /* floats on each path */
    layout_run *runs;         /* (nruns) in buffer order */
    size_t nruns;
    /* A segment after the tensors' (FedNova's steps, SCAFFOLD's control
     * variate change): extra floats, sent after segment 1, by extra_rule;
     * a full buffer carries them after its nparams floats. */
    size_t extra;
    agg_weight extra_rule;
    const char *extra_name;
    double extra_range;       /* its secure range; 0: the delta's */
} fed_node_layout;

/* The layout of a model's tensors (t, nt, nparams floats) under r, into
 * out (fed_node_layout_fini frees it). */
FED_WUR fed_err fed_node_layout_of(const fed_tensor_info *t, int nt, size_t nparams,
                                   const layout_rules *r, fed_node_layout *out);
void fed_node_layout_fini(fed_node_layout *l);
/* The path tensor t takes under r. */
layout_path fed_node_layout_path(const fed_tensor_info *t, const layout_rules *r);
/* Every float trained and sent: the sent delta is the flat buffer itself. */
int fed_node_layout_trivial(const fed_node_layout *l);
/* Floats a sent delta holds (segments 0 and 1, and the extra one). */
size_t fed_node_layout_sent(const fed_node_layout *l);
/* The sent delta's segments into segs (at most 3): segment 0 the trained
 * floats (rule SAMPLES, range), segment 1 the statistics (SAMPLES,
 * stats_range) when there are any, then the extra segment when there is
 * one (FedNova's steps at FED_NODE_STEPS_RANGE, SCAFFOLD's control at
 * range); returns how many. */
size_t fed_node_layout_segments(const fed_node_layout *l, double range, double stats_range,
                                agg_segment *segs);
/* full (nparams) into a sent delta (fed_node_layout_sent floats). */
void fed_node_layout_pack(const fed_node_layout *l, const float *full, float *sent);
/* fed_node_layout_pack within full itself (its first sent floats become
 * the sent delta), the statistics passing through stats (len[STATS]
 * floats; NULL when there are none): no second buffer of nparams. The
 * extra floats (full's nparams..nparams + extra) follow them. */
void fed_node_layout_pack_inplace(const fed_node_layout *l, float *full, float *stats);
/* A sent delta back into full (nparams): its floats where they belong,
 * zero on local floats; the extra ones are at fed_node_layout_extra. */
void fed_node_layout_unpack(const fed_node_layout *l, const float *sent, float *full);
/* The extra segment's floats within a sent delta. */
const float *fed_node_layout_extra(const fed_node_layout *l, const float *sent);
/* The floats of path p of full, in order, into or out of packed
 * (l->len[p] floats). */
void fed_node_layout_gather(const fed_node_layout *l, layout_path p, const float *full,
                            float *packed);
void fed_node_layout_scatter(const fed_node_layout *l, layout_path p, const float *packed,
                             float *full);
/* Path p's floats of full set to value. */
void fed_node_layout_fill(const fed_node_layout *l, layout_path p, float *full, float value);
/* The segments field of a block (gossip/wire.h: a DELTA's, or with weight
 * an SA_MASKED's, whose vector ends in its weight word) for l: none when
 * every float is trained and sent, else the sent segments' lengths and
 * rules (and the weight's). _matches: whether b's field says that. */
void fed_node_layout_put(const fed_node_layout *l, int weight, fed_wire_block *b);
int fed_node_layout_matches(const fed_node_layout *l, int weight, const fed_wire_block *b);
/* Whether s is a usable --local-layers value: comma-separated globs of
 * printable ASCII without spaces, at most 255 bytes, no empty glob. */
int fed_node_layout_patterns_ok(const char *s);

#endif
