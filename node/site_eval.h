/* site_eval.h - evaluation at the sites (--eval-every N): in each round r
 * with r % N == 0 every client evaluates the model it received on its
 * validation split and adds sufficient statistics that add up to its
 * contribution; the aggregator reads the pooled figures back (and, in the
 * clear, each consenting site's) and records them by name.
 *
 * The statistics are one vector of 64-bit integers (a site's "evaluation
 * vector"), summed exactly: element by element in the clear, through the
 * integer secure sum (node/agg_input_impl.h, AGG_ENC_INT64) under secure
 * aggregation. For k classes:
 *     0            samples
 *     1            1: the site lets the aggregator record its own figures
 *                  (plain rounds; under secure aggregation the sum is
 *                  only a count of such sites)
 *     2            the summed loss in fixed point, 2^-24 a unit
 *     3            the confusion matrix, k * k, truth-major
 *     3 + k * k    with k == 2: the score histogram (model/metrics.h),
 *                  2 * FED_METRICS_BINS counts, class-major
 * For regression (k == 1, a model whose loss is mse) after the first three:
 * the sums of y, y^2, the squared and the absolute errors, each in fixed
 * point 2^-32 as a 128-bit two's complement in 4 limbs of 32 bits (low
 * first), so that limb sums over fewer than 2^31 sites cannot wrap and
 * join again exactly; |each sum| < 2^95.
 * These are a release of the site's data: the histograms show how the
 * model scores its patients; a DP requirement refuses site evaluation. */
#ifndef FED_NODE_SITE_EVAL_H
#define FED_NODE_SITE_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "model/metrics.h"
#include "model/train.h"
#include "node/node.h"

enum {
    FED_SITE_EVAL_SAMPLES = 0,
    FED_SITE_EVAL_CONSENT = 1,
    FED_SITE_EVAL_LOSS = 2,
    FED_SITE_EVAL_CONFUSION = 3
};
/* The loss's fixed-point scale: a unit is 2^-FED_SITE_EVAL_LOSS_BITS. */
#define FED_SITE_EVAL_LOSS_BITS 24
/* Classes a site evaluation covers: 2..this (the confusion matrix grows
 * with the square), or 1: regression. */
#define FED_SITE_EVAL_CLASSES_MAX 256

/* Integers of the evaluation vector for k classes (1: regression,
 * 2..CLASSES_MAX); 0 for any other k. */
size_t fed_site_eval_ints(int classes);

/* A site's evaluation (r, of r->classes classes, or a regression's; h:
 * with two classes its score histogram, else unused) into out
 * (fed_site_eval_ints). consent: the site lets the aggregator record its
 * own figures. FED_ERR_INVAL: classes outside 1..CLASSES_MAX (1 only for a
 * regression), two classes without h; FED_ERR_RANGE: a sum the fixed point
 * cannot hold. */
FED_WUR fed_err fed_site_eval_pack(const fed_eval_report *r, const fed_metrics_hist *h,
                                   int consent, int64_t *out);

/* Summed evaluation vectors (v, fed_site_eval_ints(r->classes) values) into
 * r's figures, as fed_train_evaluate_report would give them over the union
 * of the sites' splits but that the AUC and AP come from the pooled
 * histogram (r->bin.auc_bound its bound), h the histogram's scratch.
 * FED_ERR_INVAL: no sample; FED_ERR_BAD_VALUE: the parts disagree (the
 * confusion matrix or the histogram does not count the samples). */
FED_WUR fed_err fed_site_eval_unpack(const uint64_t *v, fed_eval_report *r, fed_metrics_hist *h);

/* ---- the node's side ---- */

/* The client: the model m (the round's global parameters set) evaluated
 * on val into out (fed_site_eval_ints of m's classes); no val, or an empty
 * one: all zero (the site contributes nothing). */
FED_WUR fed_err fed_node_site_eval_run(fed_model *m, const fed_dataset *val, int consent,
                                       int64_t *out);
/* In the clear the vector travels after the delta as 16-bit limbs, one
 * float each (exact in f32): words for nints integers, and ix into them. */
size_t fed_node_site_eval_plain_words(uint32_t nints);
FED_WUR fed_err fed_node_site_eval_plain_put(const int64_t *ix, uint32_t nints, float *out);

/* The aggregator: the integers a round's evaluation adds to each
 * contribution (0: the round evaluates nothing), from the config (the
 * most any round adds) and for the round being filled. */
uint32_t fed_node_site_eval_cfg_ints(const fed_node_config *c);
/* The most words nints integers take in a contribution (plain limbs, or
 * the secure round's), for the receive limit. */
size_t fed_node_ints_words(const fed_node_config *c, uint64_t nints);
/* The most words a contribution grows by with them. */
size_t fed_node_site_eval_words(const fed_node_config *c);
uint32_t fed_node_agg_site_eval_ints(const fed_node *n);
/* --eval-every refused, logged with why: under a DP requirement (the
 * statistics are a release), for a model neither a regression nor a
 * classifier of 2..CLASSES_MAX classes, async rounds, or in the clear with
 * a codec other than f32. */
FED_WUR fed_err fed_node_agg_site_eval_check(const fed_node *n);
/* MODEL field 17 into set, with --eval-every. */
void fed_node_agg_site_eval_settings(const fed_node *n, fed_wire_settings *set);
/* The round's evaluation sums (its input closed) read back and recorded
 * under the model the sites evaluated (round n->round): "val.NAME" pooled,
 * "site.MEMBER.NAME" for each site in the clear that consents; then the
 * best round and the early stop judged. A failed write is logged, not
 * returned. */
FED_WUR fed_err fed_node_agg_site_eval_close(fed_node *n);

#endif
