/* layout.c - the path each tensor of a model takes through a round
 * (layout.h): runs of the flat buffer on the trained, statistics and
 * local paths, and the packing of a sent delta (segment 0, then segment
 * 1) out of and back into the flat buffer. */
#include "node/layout.h"

#include <string.h>

#include "core/alloc.h"

layout_path fed_node_layout_path(const fed_tensor_info *t, const layout_rules *r)
{
    if (!(t->flags & FED_TENSOR_SHARED) || (t->flags & FED_TENSOR_INT64))
        return LAYOUT_LOCAL;
    if (r->local_layers && r->local_layers[0] && fed_model_tensor_match(r->local_layers, t->name))
        return LAYOUT_LOCAL;
    if (r->local_bn && (t->flags & FED_TENSOR_NORM))
        return LAYOUT_LOCAL;
    if (!(t->flags & FED_TENSOR_TRAINED))
        return r->stats_local ? LAYOUT_LOCAL : LAYOUT_STATS;
    return LAYOUT_TRAINED;
}

fed_err fed_node_layout_of(const fed_tensor_info *t, int nt, size_t nparams,
                           const layout_rules *r, fed_node_layout *out)
{
    size_t at = 0;

    memset(out, 0, sizeof *out);
    out->nparams = nparams;
    if (!(out->runs = fed_calloc((size_t)nt + 1, sizeof *out->runs)))
        return FED_ERR_NOMEM;
    for (int i = 0; i < nt; i++) {
        layout_path p = fed_node_layout_path(&t[i], r);
        layout_run *last = out->nruns ? &out->runs[out->nruns - 1] : NULL;

        if (t[i].offset != at || t[i].offset + t[i].numel > nparams) {
            fed_node_layout_fini(out);
            return FED_ERR_SHAPE; /* tensors lie back to back (model.h) */
        }
        if (last && last->path == p)
            last->len += t[i].numel;
        else
            out->runs[out->nruns++] = (layout_run){.off = at, .len = t[i].numel, .path = p};
        out->len[p] += t[i].numel;
        at += t[i].numel;
    }
    if (at != nparams) {
        fed_node_layout_fini(out);
        return FED_ERR_SHAPE;
    }
    if (r->fednova) {
        out->extra = 1;
        out->extra_rule = AGG_WEIGHT_SAMPLES; /* sum p_i a_i: tau_eff */
        out->extra_name = "steps";
        out->extra_range = FED_NODE_STEPS_RANGE;
    } else if (r->scaffold) {
        out->extra = out->len[LAYOUT_TRAINED];
        out->extra_rule = AGG_WEIGHT_MEAN; /* the paper's mean over the sampled */
        out->extra_name = "control";
    }
    return FED_OK;
}

void fed_node_layout_fini(fed_node_layout *l)
{
    fed_free(l->runs);
    memset(l, 0, sizeof *l);
}

int fed_node_layout_trivial(const fed_node_layout *l)
{
    return l->len[LAYOUT_TRAINED] == l->nparams && !l->extra;
}

size_t fed_node_layout_sent(const fed_node_layout *l)
{
    return l->len[LAYOUT_TRAINED] + l->len[LAYOUT_STATS] + l->extra;
}

const float *fed_node_layout_extra(const fed_node_layout *l, const float *sent)
{
    return sent + l->len[LAYOUT_TRAINED] + l->len[LAYOUT_STATS];
}

size_t fed_node_layout_segments(const fed_node_layout *l, double range, double stats_range,
                                agg_segment *segs)
{
    size_t n = 0;

    segs[n++] = (agg_segment){.name = "delta", .len = l->len[LAYOUT_TRAINED],
                              .rule = AGG_WEIGHT_SAMPLES, .range = range};
    if (l->len[LAYOUT_STATS])
        segs[n++] = (agg_segment){.name = "statistics", .len = l->len[LAYOUT_STATS],
                                  .rule = AGG_WEIGHT_SAMPLES, .range = stats_range};
    if (l->extra)
        segs[n++] = (agg_segment){.name = l->extra_name, .len = l->extra, .rule = l->extra_rule,
                                  .range = l->extra_range > 0 ? l->extra_range : range};
    return n;
}

void fed_node_layout_gather(const fed_node_layout *l, layout_path p, const float *full,
                            float *packed)
{
    for (size_t i = 0; i < l->nruns; i++)
        if (l->runs[i].path == p) {
            memcpy(packed, full + l->runs[i].off, l->runs[i].len * sizeof *packed);
            packed += l->runs[i].len;
        }
}

void fed_node_layout_scatter(const fed_node_layout *l, layout_path p, const float *packed,
                             float *full)
{
    for (size_t i = 0; i < l->nruns; i++)
        if (l->runs[i].path == p) {
            memcpy(full + l->runs[i].off, packed, l->runs[i].len * sizeof *packed);
            packed += l->runs[i].len;
        }
}

void fed_node_layout_fill(const fed_node_layout *l, layout_path p, float *full, float value)
{
    for (size_t i = 0; i < l->nruns; i++)
        if (l->runs[i].path == p)
            for (size_t j = 0; j < l->runs[i].len; j++)
                full[l->runs[i].off + j] = value;
}

void fed_node_layout_pack(const fed_node_layout *l, const float *full, float *sent)
{
    fed_node_layout_gather(l, LAYOUT_TRAINED, full, sent);
    fed_node_layout_gather(l, LAYOUT_STATS, full, sent + l->len[LAYOUT_TRAINED]);
    memcpy(sent + l->len[LAYOUT_TRAINED] + l->len[LAYOUT_STATS], full + l->nparams,
           l->extra * sizeof *sent);
}

void fed_node_layout_pack_inplace(const fed_node_layout *l, float *full, float *stats)
{
    size_t at = 0;

    if (l->len[LAYOUT_STATS])
        fed_node_layout_gather(l, LAYOUT_STATS, full, stats);
    /* a trained float's place in the sent delta is never after its own */
    for (size_t i = 0; i < l->nruns; i++)
        if (l->runs[i].path == LAYOUT_TRAINED) {
            memmove(full + at, full + l->runs[i].off, l->runs[i].len * sizeof *full);
            at += l->runs[i].len;
        }
    if (l->len[LAYOUT_STATS])
        memcpy(full + at, stats, l->len[LAYOUT_STATS] * sizeof *full);
    at += l->len[LAYOUT_STATS];
    memmove(full + at, full + l->nparams, l->extra * sizeof *full);
}

void fed_node_layout_unpack(const fed_node_layout *l, const float *sent, float *full)
{
    fed_node_layout_scatter(l, LAYOUT_TRAINED, sent, full);
    fed_node_layout_scatter(l, LAYOUT_STATS, sent + l->len[LAYOUT_TRAINED], full);
    fed_node_layout_fill(l, LAYOUT_LOCAL, full, 0.0f);
}

void fed_node_layout_put(const fed_node_layout *l, int weight, fed_wire_block *b)
{
    agg_segment d[AGG_SEGMENTS_MAX], segs[AGG_SEGMENTS_MAX];
    size_t nd, n;

    b->seg_count = 0;
    if (fed_node_layout_trivial(l))
        return;
    nd = fed_node_layout_segments(l, 1, 1, d);
    n = weight ? fedi_agg_seg_secure(d, nd, 1, 0, segs) : nd;
    for (size_t i = 0; i < n; i++) {
        b->seg_len[i] = (uint32_t)(weight ? segs : d)[i].len;
        b->seg_rule[i] = (uint32_t)(weight ? segs : d)[i].rule;
    }
    b->seg_count = (uint32_t)n;
}

int fed_node_layout_matches(const fed_node_layout *l, int weight, const fed_wire_block *b)
{
    fed_wire_block want;

    fed_node_layout_put(l, weight, &want);
    if (b->seg_count != want.seg_count)
        return 0;
    for (uint32_t i = 0; i < want.seg_count; i++)
        if (b->seg_len[i] != want.seg_len[i] || b->seg_rule[i] != want.seg_rule[i])
            return 0;
    return 1;
}

int fed_node_layout_patterns_ok(const char *s)
{
    size_t n = strlen(s);
    char prev = ',';

    if (n > 255)
        return 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] <= 0x20 || s[i] > 0x7e)
            return 0;
        if (s[i] == ',' && prev == ',')
            return 0; /* an empty glob */
        prev = s[i];
    }
    return n == 0 || prev != ',';
}
