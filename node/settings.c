/* settings.c - the shared settings (settings.h) into a node's config: the
 * one place both programs check and copy them. */
#include "node/settings.h"

#include <stdio.h>
#include <string.h>

#include "model/codec.h"
#include "node/layout.h"

fed_err fed_node_settings_apply(const fed_node_settings *s, uint32_t nclients,
                                fed_node_config *c, const char **bad)
{
    fed_optim_kind kind;
    fed_optim_cfg sched;
    fed_codec codec;
    const char *dummy;
    int scale;

    if (!bad)
        bad = &dummy;
    *bad = NULL;
    if (fed_optim_kind_parse(s->optimizer, &kind) != FED_OK)
        *bad = "optimizer";
    else if (fed_optim_sched_of_run(s->lr_schedule, s->rounds, 0, 1, &sched) != FED_OK)
        *bad = "lr-schedule"; /* cosine also needs --rounds */
    else if (fed_optim_sched_of_run(s->lr_schedule, s->rounds, s->lr_warmup, 1, &sched) != FED_OK)
        *bad = "lr-warmup"; /* no round of a cosine left after it */
    else if (fed_codec_parse(s->codec, &codec) != FED_OK || codec.id == FED_CODEC_F64)
        *bad = "codec";
    else if (fed_merge_spec_check(s->strategy) != FED_OK)
        *bad = "strategy";
    else if (strcmp(s->mode, "sync") != 0 && strcmp(s->mode, "async") != 0)
        *bad = "mode";
    else if (fed_model_precision_parse(s->precision, &c->precision) != FED_OK)
        *bad = "precision";
    else if (fed_data_parse_augment(s->augment, &c->data.augment) != FED_OK)
        *bad = "augment";
    else if (!fed_node_layout_patterns_ok(s->local_layers))
        *bad = "local-layers";
    else if (fed_model_input_scale_parse(s->input_scale, &scale) != FED_OK)
        *bad = "input-scale";
    if (*bad)
        return FED_ERR_SPEC;
    snprintf(c->spec, sizeof c->spec, "%s", s->model);
    c->local_epochs = (uint32_t)s->local_epochs;
    c->client.max_steps = (uint32_t)s->max_steps;
    c->batch = (uint32_t)s->batch;
    c->accumulate = (uint32_t)s->accumulate;
    c->recompute = (uint32_t)s->recompute;
    c->optimizer = (uint8_t)kind;
    c->lr = (float)s->lr; /* 0: the node takes the optimizer's own */
    c->momentum = (float)s->momentum;
    c->weight_decay = (float)s->weight_decay;
    c->ditto_lambda = (float)s->ditto_lambda;
    snprintf(c->lr_schedule, sizeof c->lr_schedule, "%s", s->lr_schedule);
    c->lr_warmup = (uint32_t)s->lr_warmup;
    c->rounds = (uint32_t)s->rounds;
    c->deadline_ms = (uint64_t)s->deadline_ms;
    c->seed = s->seed;
    snprintf(c->transfer.codec, sizeof c->transfer.codec, "%s", s->codec);
    snprintf(c->agg.strategy, sizeof c->agg.strategy, "%s", s->strategy);
    c->agg.weight_cap = s->weight_cap;
    c->agg.sample_fraction = s->fraction;
    c->agg.min_clients = (uint32_t)s->min_clients;
    c->agg.wait_clients = s->wait_clients ? (uint32_t)s->wait_clients : nclients;
    c->agg.gather_ms = (uint64_t)s->gather_ms;
    c->agg.async_k = 0;
    if (!strcmp(s->mode, "async"))
        c->agg.async_k = (uint32_t)(s->buffer ? s->buffer : s->min_clients);
    c->agg.max_staleness = (uint32_t)s->max_staleness;
    snprintf(c->peer.topology, sizeof c->peer.topology, "%s", s->topology);
    snprintf(c->peer.sync, sizeof c->peer.sync, "%s", s->sync);
    snprintf(c->peer.mixing, sizeof c->peer.mixing, "%s", s->mixing);
    c->peer.final_mix = (uint32_t)s->final_mix;
    c->peer.group_size = (uint32_t)s->group_size;
    snprintf(c->local_layers, sizeof c->local_layers, "%s", s->local_layers);
    c->local_bn = s->local_bn;
    fed_node_settings_apply_dp(s, c);
    return FED_OK;
}

int fed_node_settings_input_scale(const fed_node_settings *s)
{
    int scale = FED_MODEL_INPUT_CENTRED;

    return fed_model_input_scale_parse(s->input_scale, &scale) == FED_OK
               ? scale
               : FED_MODEL_INPUT_CENTRED;
}

void fed_node_settings_apply_dp(const fed_node_settings *s, fed_node_config *c)
{
    c->dp.sgd = s->dp_sgd;
    c->dp.sgd_clip = (float)s->dp_sgd_clip;
    c->dp.sgd_noise = (float)s->dp_sgd_noise;
    c->dp.delta = s->dp_delta;
    c->dp.budget = s->dp_budget;
    c->dp.require_sgd = s->require_dp_sgd;
    c->dp.client_clip = s->dp_client_clip;
    c->dp.client_noise = s->dp_client_noise;
    c->dp.target_eps = s->dp_target_epsilon;
    c->dp.client_quantile = s->dp_client_quantile;
    c->dp.client_clip_lr = s->dp_client_clip_lr;
    c->secagg.on = s->secagg;
    c->secagg.dropout = s->secagg_dropout;
    c->secagg.max_weight = s->secagg_max_weight;
    c->secagg.bits = (uint32_t)s->secagg_bits;
    c->secagg.range = s->secagg_range;
    c->secagg.stats_range = s->secagg_stats_range;
    c->secagg.stage_ms = (uint64_t)s->secagg_stage_ms;
    c->secagg.min_clients = (uint32_t)s->secagg_min_clients;
}

const char *fed_node_settings_dp_misuse(const fed_node_settings *s, fed_node_role role)
{
    if (s->dp_budget > 0 && !s->dp_sgd)
        return "--dp-budget-epsilon needs --dp-sgd (the budget is DP-SGD's epsilon)";
    if (s->dp_sgd && !strcmp(s->precision, "bf16"))
        return "--precision bf16 does not go with --dp-sgd (its norms, clipping and noise stay "
               "fp32)";
    if (s->dp_sgd && s->recompute > 1)
        return "--recompute does not go with --dp-sgd (its per-sample norms read every "
               "layer's output gradient)";
    if (s->dp_sgd && s->accumulate > 1)
        return "--accumulate does not go with --dp-sgd (DP-SGD sums its Poisson draw in pieces "
               "of its own)";
    if (s->dp_sgd && role == FED_NODE_PEER)
        return "--dp-sgd is not implemented for peers yet (clients only)";
    if (s->dp_sgd && role == FED_NODE_AGGREGATOR)
        return "--dp-sgd is a client's setting; an aggregator asks for it with --require-dp-sgd";
    if (s->require_dp_sgd && role != FED_NODE_AGGREGATOR)
        return "--require-dp-sgd is an aggregator's setting";
    if ((s->dp_client_clip > 0 || s->dp_target_epsilon > 0 || s->dp_client_quantile > 0) &&
        role != FED_NODE_AGGREGATOR)
        return "--dp-client-clip (DP-FedAvg) is an aggregator's setting";
    if ((s->dp_target_epsilon > 0 || s->dp_client_quantile > 0) && !(s->dp_client_clip > 0))
        return "--dp-target-epsilon and --dp-client-quantile need --dp-client-clip (DP-FedAvg)";
    return NULL;
}

const char *fed_node_settings_local_misuse(const fed_node_settings *s, fed_node_role role)
{
    if ((s->local_layers[0] || s->local_bn) && role == FED_NODE_PEER)
        return "--local-layers and --local-bn are an aggregator's settings (its clients may "
               "repeat them); peers do not keep tensors local yet";
    return NULL;
}

/* On a client --secagg is a requirement (it sends no plain delta); the
   --secagg-* values are the aggregator's, sent in each round's settings; a
   peer has no secure aggregation. */
int fed_node_settings_secagg_misuse(const fed_opt *t, size_t n, const unsigned char *given,
                                    fed_node_role role, char *why, size_t size)
{
    for (size_t i = 0; i < n; i++) {
        const char *name = t[i].name;

        if (!given[i] || t[i].alias_of || strncmp(name, "secagg", 6) != 0)
            continue;
        if (role == FED_NODE_PEER) {
            snprintf(why, size, "--%s means nothing for a peer (secure aggregation is an "
                     "aggregator's and its clients')", name);
            return 1;
        }
        if (role == FED_NODE_CLIENT && strcmp(name, "secagg") != 0 &&
            strcmp(name, "secagg-min-clients") != 0) {
            snprintf(why, size, "--%s means nothing for a client: it is the aggregator's "
                     "setting, sent in each round's settings (a client takes --secagg and "
                     "--secagg-min-clients alone)",
                     name);
            return 1;
        }
    }
    return 0;
}

/* Whether option name is among t's given ones. */
static int given_named(const fed_opt *t, size_t n, const unsigned char *given, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (given[i] && !t[i].alias_of && !strcmp(t[i].name, name))
            return 1;
    return 0;
}

int fed_node_settings_given_misuse(const fed_opt *t, size_t n, const unsigned char *given,
                                   const fed_node_settings *s, fed_node_role role, char *why,
                                   size_t size)
{
    /* an option that only the other's setting makes mean something, for
       a role: the option, the role, whether that setting is on, and why */
    const struct {
        const char *opt;
        fed_node_role role;
        int on;
        const char *needs;
    } deps[] = {
        {"dp-sgd-clip", FED_NODE_CLIENT, s->dp_sgd, "--dp-sgd (this client's DP-SGD)"},
        {"dp-sgd-noise", FED_NODE_CLIENT, s->dp_sgd, "--dp-sgd (this client's DP-SGD)"},
        {"dp-sgd-clip", FED_NODE_AGGREGATOR, s->require_dp_sgd,
         "--require-dp-sgd (the DP-SGD it asks of its clients)"},
        {"dp-sgd-noise", FED_NODE_AGGREGATOR, s->require_dp_sgd,
         "--require-dp-sgd (the DP-SGD it asks of its clients)"},
        {"dp-client-noise", FED_NODE_AGGREGATOR, s->dp_client_clip > 0,
         "--dp-client-clip (DP-FedAvg)"},
        {"buffer", FED_NODE_AGGREGATOR, !strcmp(s->mode, "async"), "--mode async (FedBuff)"},
        {"max-staleness", FED_NODE_AGGREGATOR, !strcmp(s->mode, "async"),
         "--mode async (FedBuff)"},
    };

    for (size_t i = 0; i < sizeof deps / sizeof deps[0]; i++)
        if (deps[i].role == role && !deps[i].on && given_named(t, n, given, deps[i].opt)) {
            snprintf(why, size, "--%s means nothing without %s", deps[i].opt, deps[i].needs);
            return 1;
        }
    if (role == FED_NODE_AGGREGATOR && !s->secagg)
        for (size_t i = 0; i < n; i++)
            if (given[i] && !t[i].alias_of && !strncmp(t[i].name, "secagg-", 7)) {
                snprintf(why, size, "--%s means nothing without --secagg", t[i].name);
                return 1;
            }
    return 0;
}
