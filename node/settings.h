/* settings.h - the settings `fednode run` and `fedsim` share: one name
 * (flag --NAME and INI key NAME), one meaning, one default and one help
 * line each, declared once in FED_NODE_SETTINGS_OPTS. Each program embeds a
 * fed_node_settings in its own config struct and puts the entries into its
 * option table beside its own options (core/opt.h), so neither can drift.
 * fed_node_settings_apply turns them into a fed_node_config's fields. */
#ifndef FED_NODE_SETTINGS_H
#define FED_NODE_SETTINGS_H

#include <stdint.h>

#include "core/opt.h"
#include "model/data.h"
#include "model/merge.h"
#include "model/model.h"
#include "model/optim.h"
#include "node/node.h"

typedef struct fed_node_settings {
    char data[256];
    fed_data_flags dflags;  /* how data is read (image folders, CSV) */
    char augment[64];       /* client, peer: training batches' augmentation */
    char partition[64];
    char model[FED_MODEL_SPEC_MAX];
    char input_scale[16];   /* centred | unit (model.h: fed_model_input_scale) */
    int rounds;
    int local_epochs;
    int max_steps;
    int batch;
    int accumulate;         /* client, peer: micro-batches per step */
    int recompute;          /* client, peer: keep every K-th layer's output */
    char precision[8];      /* client, peer: fp32 or bf16 */
    double lr;
    char lr_schedule[32];
    int lr_warmup;
    char optimizer[16];
    double momentum;
    double weight_decay;
    double ditto_lambda;
    char codec[32];
    char strategy[FED_MERGE_SPEC_MAX];
    double weight_cap;
    char mode[16];          /* sync | async */
    int buffer;
    int max_staleness;
    double fraction;
    int min_clients;
    int wait_clients;       /* 0: every client */
    int deadline_ms;
    int gather_ms;
    char topology[32];
    char sync[16];
    char mixing[16];
    int final_mix;
    uint64_t seed;
    int dp_sgd;
    double dp_sgd_clip;
    double dp_sgd_noise;
    double dp_delta;
    double dp_budget;
    int require_dp_sgd;
    int group_size;         /* peer, allreduce: groups of at most this (0: none) */
    double dp_client_clip;
    double dp_client_noise;
    double dp_target_epsilon;
    double dp_client_quantile;
    double dp_client_clip_lr;
    int secagg;
    double secagg_dropout;
    double secagg_max_weight;
    int secagg_bits;
    double secagg_range;
    double secagg_stats_range;
    char local_layers[256];
    int local_bn;
    int secagg_stage_ms;
    int secagg_min_clients;
} fed_node_settings;

/* The entries for a config struct T holding a fed_node_settings as member m:
 * static const fed_opt t[] = { FED_NODE_SETTINGS_OPTS(T, m), own options... }. */
#define FED_NODE_SETTINGS_OPTS(T, m)                                                             \
    FED_OPT_DEF(T, m.data, "data", FED_OPT_STR, "fashion-mnist", 0, 0,                           \
                "fashion-mnist, a directory of IDX files, a folder of images (one subfolder "    \
                "per class, PNG or JPEG), or a CSV file (fednode's aggregator: only when "       \
                "given, for its evaluation)"),                                                   \
    FED_DATA_FLAG_OPTS(T, m.dflags),                                                             \
    FED_OPT_DEF(T, m.augment, "augment", FED_OPT_STR, "none", 0, 0,                              \
                "client, peer: image training batches: none, crop:P (shifted up to P pixels, "   \
                "zero-padded), flip (left-right, half the time) or crop:P,flip"),                \
    FED_OPT_DEF(T, m.partition, "partition", FED_OPT_STR, "iid", 0, 0,                           \
                "client, peer: how the training split is cut into parts (fednode: --shard's K; " \
                "fedsim: one per node): iid, dirichlet:ALPHA, shards:N, niid-dirichlet:BETA, "   \
                "labels:K, quantity:BETA, noise:SIGMA (iid; part i's inputs get Gaussian noise " \
                "of std SIGMA * i / (K - 1))"),                                                  \
    FED_OPT_DEF(T, m.model, "model", FED_OPT_STR, "mlp:256,128", 0, 0,                           \
                "aggregator, peer: logreg, mlp:W1,W2,..., cnn, or a layer file"),                 \
    FED_OPT_DEF(T, m.input_scale, "input-scale", FED_OPT_STR, "centred", 0, 0,                   \
                "aggregator, peer: how the model maps image bytes: centred (b / 127.5 - 1, in "  \
                "[-1, 1]) or unit (b / 255, in [0, 1], torchvision's ToTensor); sent to every "  \
                "client, kept in checkpoints and said by the export"),                           \
    FED_OPT_DEF(T, m.rounds, "rounds", FED_OPT_INT, "10", 0, 1000000,                            \
                "aggregator, peer: rounds to run (0: forever; fedsim needs an end)"),            \
    FED_OPT_DEF(T, m.local_epochs, "local-epochs", FED_OPT_INT, "1", 1, 1000,                    \
                "aggregator, peer: epochs each client (peer) trains per round"),                 \
    FED_OPT_DEF(T, m.max_steps, "max-steps", FED_OPT_INT, "0", 0, 100000000,                     \
                "client: at most this many local steps a round, whatever the aggregator's "      \
                "--local-epochs (0: no cap; FedNova normalizes by each client's steps)"),         \
    FED_OPT_DEF(T, m.batch, "batch", FED_OPT_INT, "64", 1, 4096,                                 \
                "aggregator, peer: the training batch size"),                                    \
    FED_OPT_DEF(T, m.accumulate, "accumulate", FED_OPT_INT, "1", 1, 4096,                        \
                "client, peer: run each step's batch as N micro-batches, their gradients "       \
                "summed before the step (the memory of ceil(batch / N) samples; at most the "    \
                "batch's samples; not with --dp-sgd)"),                                          \
    FED_OPT_DEF(T, m.recompute, "recompute", FED_OPT_INT, "1", 1, 4096,                          \
                "client, peer: keep the output of every N-th layer and compute the others "      \
                "again in the backward (gradients bit for bit; 1: keep all; not with "           \
                "--dp-sgd)"),                                                                    \
    FED_OPT_DEF(T, m.precision, "precision", FED_OPT_STR, "fp32", 0, 0,                          \
                "client, peer: fp32, or bf16: GEMMs on bfloat16 operands summed in fp32 (AMX or "   \
                "AVX512-BF16 CPUs), the weights, optimizer and delta fp32; not with --dp-sgd"),  \
    FED_OPT_DEF(T, m.lr, "lr", FED_OPT_DOUBLE, "0", 0, 100,                                      \
                "aggregator, peer: the training learning rate (" FED_OPTIM_LR_HELP ")"),        \
    FED_OPT_DEF(T, m.lr_schedule, "lr-schedule", FED_OPT_STR, "const", 0, 0,                 \
                "aggregator, peer: the rate across rounds: const, step:ROUNDS,GAMMA (times "     \
                "GAMMA every ROUNDS rounds) or cosine (down to 0 over --rounds); sent in each "  \
                "round's settings"),                                                             \
    FED_OPT_DEF(T, m.lr_warmup, "lr-warmup", FED_OPT_INT, "0", 0, 1000000,                       \
                "aggregator, peer: rounds of linear warm-up (up to --lr) before --lr-schedule"), \
    FED_OPT_DEF(T, m.optimizer, "optimizer", FED_OPT_STR, "sgd", 0, 0,                           \
                "aggregator, peer: the training optimizer, sgd or adam"),                        \
    FED_OPT_DEF(T, m.momentum, "momentum", FED_OPT_DOUBLE, "0.9", 0, 0.999,                      \
                "aggregator, peer: the training SGD momentum (0: plain SGD)"),                   \
    FED_OPT_DEF(T, m.weight_decay, "weight-decay", FED_OPT_DOUBLE, "0", 0, 0.999,                \
                "aggregator, peer: the training weight decay, as train's: SGD's L2 term, "       \
                "Adam's decoupled decay (AdamW); sent in each round's settings"),                \
    FED_OPT_DEF(T, m.ditto_lambda, "ditto-lambda", FED_OPT_DOUBLE, "0", 0, 1000,                 \
                "aggregator: Ditto (Li et al., ICML 2021): each client also trains a personal "  \
                "model, pulled toward the global one with this weight (0: none); kept in its "   \
                "checkpoint"),                                                                   \
    FED_OPT_DEF(T, m.codec, "codec", FED_OPT_STR, "f32", 0, 0,                                   \
                "aggregator: the clients' delta codec: f32, f16, q8, topk:F"),                   \
    FED_OPT_DEF(T, m.strategy, "strategy", FED_OPT_STR, "fedavg", 0, 0,                          \
                "aggregator: merge strategy (fedavg, fedprox:MU, fedadam, median, trimmed:B, "   \
                "krum:F, fednova, scaffold[:ETA], clip:N+..., see model/merge.h)"),              \
    FED_OPT_DEF(T, m.weight_cap, "weight-cap", FED_OPT_DOUBLE, "0", 0, 1,                        \
                "aggregator: largest share of the merge weight one client may get (0: none)"),   \
    FED_OPT_DEF(T, m.mode, "mode", FED_OPT_STR, "sync", 0, 0,                                    \
                "aggregator: sync (rounds with a deadline) or async (FedBuff: merge every "      \
                "--buffer deltas)"),                                                             \
    FED_OPT_DEF(T, m.buffer, "buffer", FED_OPT_INT, "0", 0, FED_MERGE_DEFAULT_MAX_CLIENTS,       \
                "aggregator, async: deltas buffered per merge (0: --min-clients)"),              \
    FED_OPT_DEF(T, m.max_staleness, "max-staleness", FED_OPT_INT, "10", 0, 1000000,              \
                "aggregator, async: rounds a delta may lag behind and still be merged"),         \
    FED_OPT_DEF(T, m.fraction, "fraction", FED_OPT_DOUBLE, "1", 1e-6, 1,                         \
                "aggregator: share of the waiting clients sampled each round"),                  \
    FED_OPT_DEF(T, m.min_clients, "min-clients", FED_OPT_INT, "1", 1, 100000,                    \
                "aggregator: deltas needed to merge a round"),                                   \
    FED_OPT_DEF(T, m.wait_clients, "wait-clients", FED_OPT_INT, "0", 0, 100000,                  \
                "aggregator: clients waiting that start a round at once (0: every client: "      \
                "fednode: each member of --allow but itself; fedsim: --nodes)"),                 \
    FED_OPT_DEF(T, m.deadline_ms, "deadline-ms", FED_OPT_INT, "60000", 1, 86400000,              \
                "aggregator, peer: a round closes this long after it started"),                  \
    FED_OPT_DEF(T, m.gather_ms, "gather-ms", FED_OPT_INT, "1000", 0, 600000,                     \
                "aggregator: start a round with --min-clients once this passed since the last "  \
                "round (round 1: since the first client came)"),                                 \
    FED_OPT_DEF(T, m.topology, "topology", FED_OPT_STR, "ring", 0, 0,                            \
                "peer: full, ring, random:K, tree, smallworld:K,P or static (fednode only: "     \
                "see --neighbours); with --mixing allreduce: ring, tree, tree:K or butterfly"),                                                            \
    FED_OPT_DEF(T, m.sync, "sync", FED_OPT_STR, "bsp", 0, 0,                                     \
                "peer: bsp (wait for the round's shares or --deadline-ms), ssp:S, asp:T or bap"), \
    FED_OPT_DEF(T, m.mixing, "mixing", FED_OPT_STR, "pushsum", 0, 0,                             \
                "peer: pushsum (running sums), plain, metropolis, pairwise, or allreduce (the "  \
                "exact weighted mean every round; --sync bsp only)"),                  \
    FED_OPT_DEF(T, m.final_mix, "final-mix", FED_OPT_INT, "3", 0, 1000,                          \
                "peer: rounds that only mix after the last training round, so the members "     \
                "end close to one model"),                                                       \
    FED_OPT_DEF(T, m.seed, "seed", FED_OPT_U64, "1", 0, 0,                                       \
                "seed of initialization and shuffling (fedsim: of every random choice)"),        \
    FED_OPT_DEF(T, m.dp_sgd, "dp-sgd", FED_OPT_BOOL, "false", 0, 0,                              \
                "client: train every round with DP-SGD (Poisson-sampled batches, each sample's " \
                "gradient clipped, Gaussian noise); the epsilon spent is charged to the "        \
                "database, durably, before the delta leaves (CPU backend only)"),                \
    FED_OPT_DEF(T, m.dp_sgd_clip, "dp-sgd-clip", FED_OPT_DOUBLE, "1", 1e-6, 1e6,                  \
                "client: DP-SGD's L2 bound C of each sample's gradient; aggregator with "        \
                "--require-dp-sgd: the C every client must train with"),                         \
    FED_OPT_DEF(T, m.dp_sgd_noise, "dp-sgd-noise", FED_OPT_DOUBLE, "1", 0, 1e6,                  \
                "client: DP-SGD's noise multiplier z (noise z C on the summed gradient); "       \
                "aggregator with --require-dp-sgd: the least z a client may train with"),        \
    FED_OPT_DEF(T, m.dp_delta, "dp-delta", FED_OPT_DOUBLE, "1e-5", 1e-300, 0.999999,             \
                "client: the delta of the (epsilon, delta) the site accounts; aggregator: DP-FedAvg's"),                  \
    FED_OPT_DEF(T, m.dp_budget, "dp-budget-epsilon", FED_OPT_DOUBLE, "0", 0, 1e6,                \
                "client, with --dp-sgd: the epsilon the site may spend in all; a round that "    \
                "would exceed it is refused, and the aggregator records why (0: no budget)"),   \
    FED_OPT_DEF(T, m.require_dp_sgd, "require-dp-sgd", FED_OPT_BOOL, "false", 0, 0,              \
                "aggregator: every round requires DP-SGD at --dp-sgd-clip and at least "         \
                "--dp-sgd-noise; a client that cannot comply refuses the round (recorded)"),     \
    FED_OPT_DEF(T, m.group_size, "group-size", FED_OPT_INT, "0", 0, 65536,                       \
                "peer, --mixing allreduce: each round the members split into groups of at "     \
                "most this many by a grid all compute from --seed, each group all-reduces "     \
                "alone; ceil(log_G n) rounds without training give the exact mean (0: one "     \
                "group of all)"),                                                                \
    FED_OPT_DEF(T, m.dp_client_clip, "dp-client-clip", FED_OPT_DOUBLE, "0", 0, 1e6,               \
                "aggregator: DP-FedAvg (client-level DP; the aggregator adds the noise and is "  \
                "trusted): clients Poisson-sampled at --fraction, each delta clipped to this "  \
                "L2 norm, equal weights over the expected cohort, Gaussian noise; 0: off"),      \
    FED_OPT_DEF(T, m.dp_client_noise, "dp-client-noise", FED_OPT_DOUBLE, "1", 0, 1e6,            \
                "aggregator, DP-FedAvg: the noise multiplier z (noise z C on the summed "        \
                "clipped deltas)"),                                                              \
    FED_OPT_DEF(T, m.dp_target_epsilon, "dp-target-epsilon", FED_OPT_DOUBLE, "0", 0, 1e6,        \
                "aggregator, DP-FedAvg: calibrate z so that --rounds rounds spend this epsilon " \
                "at --dp-delta (0: --dp-client-noise)"),                                         \
    FED_OPT_DEF(T, m.dp_client_quantile, "dp-client-quantile", FED_OPT_DOUBLE, "0", 0, 0.999999, \
                "aggregator, DP-FedAvg: adaptive clipping towards this quantile of the update "  \
                "norms, --dp-client-clip its start (0: a fixed clip)"),                          \
    FED_OPT_DEF(T, m.dp_client_clip_lr, "dp-client-clip-lr", FED_OPT_DOUBLE, "0.2", 0, 100,      \
                "aggregator, DP-FedAvg with --dp-client-quantile: the clip's geometric step "    \
                "eta (C <- C exp(-eta (unclipped share - quantile)))"),                          \
    FED_OPT_DEF(T, m.secagg, "secagg", FED_OPT_BOOL, "false", 0, 0,                              \
                "aggregator: secure aggregation (SecAgg+): it learns only the sum of each "      \
                "round's quantized, weighted deltas; sync rounds, FedAvg family, f32 codec. "    \
                "client: a requirement: it never sends a plain delta and declines every round "  \
                "that is not secure"),                                                           \
    FED_OPT_DEF(T, m.secagg_dropout, "secagg-dropout", FED_OPT_DOUBLE, "0.1", 0, 0.99,           \
                "aggregator, --secagg: the dropout rate a round must survive (sets the "         \
                "neighbour graph's degree k so a round fails with probability <= 1e-6, where "  \
                "the consortium is large enough; the log gives the bound reached)"),             \
    FED_OPT_DEF(T, m.secagg_max_weight, "secagg-max-weight", FED_OPT_DOUBLE, "1000", 1, 1e9,     \
                "aggregator, --secagg: a client's weight cap in samples (each client caps its "  \
                "own; --weight-cap needs the total, which nobody sees)"),                        \
    FED_OPT_DEF(T, m.secagg_bits, "secagg-bits", FED_OPT_INT, "20", 1, 31,                       \
                "aggregator, --secagg: bits of each quantized coordinate (clients x "            \
                "(2^bits - 1) must stay below 2^32)"),                                           \
    FED_OPT_DEF(T, m.secagg_range, "secagg-range", FED_OPT_DOUBLE, "4", 1e-9, 1e9,               \
                "aggregator, --secagg: each delta coordinate is clipped into [-range, range] "   \
                "before quantization"),                                                          \
    FED_OPT_DEF(T, m.secagg_stats_range, "secagg-stats-range", FED_OPT_DOUBLE, "64", 1e-9, 1e9, \
                "aggregator, --secagg: the clip of the segment of non-trained statistics "       \
                "(batch norm's running means and variances, as deltas): their own range, as "   \
                "--secagg-range would clamp a running variance"),                                \
    FED_OPT_DEF(T, m.local_layers, "local-layers", FED_OPT_STR, "", 0, 0,                        \
                "aggregator: tensors that stay at each site (FedPer/FedRep): comma-separated "   \
                "globs over tensor names (e.g. 'fc3.*'); never sent, each client keeps its own "  \
                "across rounds and restarts; sent in each round's settings. client: when set, "  \
                "must equal the aggregator's or the round is declined"),                         \
    FED_OPT_DEF(T, m.local_bn, "local-bn", FED_OPT_BOOL, "false", 0, 0,                          \
                "aggregator: every batch-norm tensor stays at each site (FedBN); the "           \
                "aggregator's own evaluation is then not meaningful (said in its log). Implied " \
                "under DP-FedAvg and --require-dp-sgd: statistics carry no noise"),                         \
    FED_OPT_DEF(T, m.secagg_stage_ms, "secagg-stage-ms", FED_OPT_INT, "10000", 1, 86400000,      \
                "aggregator, --secagg: each stage's deadline (the masked input's: "              \
                "--deadline-ms)"),                                                               \
    FED_OPT_DEF(T, m.secagg_min_clients, "secagg-min-clients", FED_OPT_INT, "3", 3, 4096,        \
                "--secagg: the fewest clients a secure round runs with (the key list and "       \
                "the survivors); with 2 each could subtract its own delta from the sum, "        \
                "so never below 3. A client enforces its own floor too"),                        \
    FED_OPT_ALIAS("sample", "fraction")

/* The round settings into c (after fed_node_config_default): model, training,
 * merge, rounds, async and peer fields. wait_clients 0 becomes nclients (every
 * client; 0: unknown, then --min-clients). *bad names the setting that does
 * not parse (FED_ERR_SPEC). */
FED_WUR fed_err fed_node_settings_apply(const fed_node_settings *s, uint32_t nclients,
                                        fed_node_config *c, const char **bad);
/* --input-scale as fed_model_input_scale (centred when it does not parse:
 * fed_node_settings_apply refuses that first). The caller puts it into
 * the config's shape once the shape is known. */
int fed_node_settings_input_scale(const fed_node_settings *s);
/* The DP settings alone (a client of fednode run takes no others). */
void fed_node_settings_apply_dp(const fed_node_settings *s, fed_node_config *c);
/* Why the DP settings do not fit a node of role (NULL: they do); fedsim,
 * whose one settings block serves every node, asks for the client role
 * and the aggregator's --require-dp-sgd apart. */
const char *fed_node_settings_dp_misuse(const fed_node_settings *s, fed_node_role role);

/* Why --local-layers or --local-bn do not fit a node of role (NULL: they
 * do): a peer has no aggregator to declare them. */
const char *fed_node_settings_local_misuse(const fed_node_settings *s, fed_node_role role);

/* Whether a --secagg* option given (given: n bytes over the caller's table t,
 * from fed_opt_load_given) means nothing for role: 1 with why (size bytes)
 * naming the option and the role, else 0. An aggregator takes them all; a
 * client --secagg alone (a requirement); a peer none. */
int fed_node_settings_secagg_misuse(const fed_opt *t, size_t n, const unsigned char *given,
                                    fed_node_role role, char *why, size_t size);

/* Whether an option given (as above) means nothing without another setting
 * of s for role: 1 with why (size bytes) naming both, else 0. A client's
 * --dp-sgd-clip and --dp-sgd-noise need --dp-sgd; an aggregator's need
 * --require-dp-sgd; --dp-client-noise needs --dp-client-clip; --buffer and
 * --max-staleness need --mode async; an aggregator's --secagg-* need
 * --secagg. */
int fed_node_settings_given_misuse(const fed_opt *t, size_t n, const unsigned char *given,
                                   const fed_node_settings *s, fed_node_role role, char *why,
                                   size_t size);

#endif
