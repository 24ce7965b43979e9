/* cli_run.c - `fednode run` (a daemon in the role --role names) and
 * `fednode aggregate` (run --role aggregator): options from flags or an INI
 * file (--config, same names), the node's identity, allow-list, database,
 * data and pool, handed to node/daemon.c. Under mpirun (a site of several
 * ranks, node/site.h) rank 0 runs the node and the other ranks train with
 * it. Owns these commands' option table and their error messages; computes
 * nothing itself. */
#include <assert.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/log.h"
#include "core/opt.h"
#include "core/pool.h"
#include "crypto/identity.h"
#include "model/backend.h"
#include "model/codec.h"
#include "model/colstats.h"
#include "model/data.h"
#include "model/input.h"
#include "model/merge.h"
#include "model/optim.h"
#include "app/cli.h"
#include "app/http.h"
#include "gossip/peers.h"
#include "model/pipeline.h"
#include "mpi/coll.h"
#include "node/daemon.h"
#include "node/layout.h"
#include "node/settings.h"
#include "node/site.h"
#include "storage/store.h"
#include "onnx/onnx.h"

#define PATH_MAX_RUN 512

typedef struct run_cfg {
    fed_node_settings s; /* what fedsim takes too (node/settings.h) */
    char role[16];
    char keys[PATH_MAX_RUN];
    char passphrase_file[PATH_MAX_RUN];
    char allow[PATH_MAX_RUN];
    char db[PATH_MAX_RUN];
    char db_sync[16];
    char listen[256];
    char port_file[PATH_MAX_RUN];
    char aggregator[256];
    char aggregator_key[128];
    char shard[32];
    uint64_t partition_seed;
    int eval;
    int personal_eval;
    int finetune_epochs;
    char peers[PATH_MAX_RUN];
    char neighbours[PATH_MAX_RUN];
    char advertise[256];
    int vouch;
    char publish[PATH_MAX_RUN];
    int poll_ms;
    int linger_ms;
    int retry_ms;
    double max_model_params, max_model_flops;
    int max_clients;
    int max_connections;
    int conn_stall_ms;
    uint64_t max_frame;
    int threads;
    int rank_batch;
    int mpi_timeout_ms;
    int pipeline_stages;
    int micro_batches;
    fed_cli_log_opts log;
    char http[256];
    int keep_checkpoints;
    char best_metric[FED_METRICS_NAME_MAX];
    char early_stop[64];
    int eval_every;
    double val_fraction;
    char val_data[4096];
    int site_metrics;
    int standardize;
    int stats_min_count;
    int stats_only;
    char feature_bounds[8192];
    double stats_noise;
    char input_shape[32];
    int features;
    int classes;
    const unsigned char *given; /* (NRUN_OPTS) what the file or a flag set; not an option */
    char *graph; /* --model FILE of a graph longer than its id: the whole (not an option) */
    fed_onnx *onnx; /* --model FILE.onnx: its weights, the model's first (not an option) */
    fed_model_shape file_in; /* what --model FILE declares (not an option) */
    fed_model_decl decl;    /* the declared input, from it and the options (not an option) */
} run_cfg;

#define R(field, name, type, def, min, max, help)                              \
    FED_OPT_DEF(run_cfg, field, name, type, def, min, max, help)
static const fed_opt run_opts[] = {
    R(role, "role", FED_OPT_STR, "client", 0, 0, "aggregator, client or peer"),
    R(keys, "keys", FED_OPT_STR, "", 0, 0, "directory with node.key (fednode keygen)"),
    R(passphrase_file, "passphrase-file", FED_OPT_STR, "", 0, 0,
      "file whose first line unseals node.key (else $FEDNODE_PASSPHRASE)"),
    R(allow, "allow", FED_OPT_STR, "", 0, 0,
      "allow-list file: NAME BASE64KEY per member (reloaded on SIGHUP)"),
    R(db, "db", FED_OPT_STR, "", 0, 0, "the node's database (rounds, checkpoints)"),
    R(db_sync, "db-sync", FED_OPT_STR, "auto", 0, 0,
      "full (fsync at every commit: survives a power cut), normal (survives kill -9; a power "
      "cut may undo the last commits) or auto: normal for a client, whose rounds the "
      "aggregator can ask again, full for an aggregator or peer"),
    R(listen, "listen", FED_OPT_STR, "tcp://0.0.0.0:7400", 0, 0,
      "aggregator, peer: address to listen on (port 0: any free port, see --port-file)"),
    R(port_file, "port-file", FED_OPT_STR, "", 0, 0, "aggregator, peer: write the bound port here"),
    R(aggregator, "aggregator", FED_OPT_STR, "", 0, 0,
      "client: the aggregator's address, e.g. tcp://10.0.0.1:7400"),
    R(aggregator_key, "aggregator-key", FED_OPT_STR, "aggregator", 0, 0,
      "client: the aggregator's name in the allow-list, or its base64 key"),
    R(shard, "shard", FED_OPT_STR, "0/1", 0, 0, "client, peer: train on part I (0-based) of K"),
    R(partition_seed, "partition-seed", FED_OPT_U64, "1", 0, 0,
      "seed of the partition (the same on every client)"),
    R(eval, "eval", FED_OPT_BOOL, "true", 0, 0,
      "aggregator, peer: evaluate each round on the test split of --data"),
    R(personal_eval, "personal-eval", FED_OPT_BOOL, "false", 0, 0,
      "client: each round, before training, score this site's own model (the global with its "
      "--local-layers/--local-bn tensors, or its --ditto-lambda personal model) on its local "
      "test split (the test split of --data cut as --partition and --shard cut the training "
      "split): logged, and the round's accuracy in its database"),
    R(finetune_epochs, "finetune-epochs", FED_OPT_INT, "0", 0, 1000,
      "client, with --personal-eval: first fine-tune its model this many epochs on its shard "
      "(FedAvg + fine-tuning, the personalization baseline; the round still trains from the "
      "global)"),
    R(peers, "peers", FED_OPT_STR, "", 0, 0,
      "peer: file of NAME URL lines, where the other members listen"),
    R(neighbours, "neighbours", FED_OPT_STR, "", 0, 0,
      "peer, --topology static: file of every member's out-neighbours (NAME: NAME NAME ...), "
      "the same on every member"),
    R(advertise, "advertise", FED_OPT_STR, "", 0, 0,
      "peer: the address the others reach this peer at, spread in signed PEERS entries "
      "(default: --listen, unless it says 0.0.0.0 or port 0)"),
    R(vouch, "vouch", FED_OPT_BOOL, "false", 0, 0,
      "peer: keys that members vouch for (fednode vouch) count as members"),
    R(publish, "publish", FED_OPT_STR, "", 0, 0,
      "peer: an entry file to spread (fednode vouch --out): a member's vouch for this peer, "
      "or one this member signed"),
    R(poll_ms, "poll-ms", FED_OPT_INT, "5000", 1, 600000,
      "longest hold of a client's request before 'no round yet'"),
    R(linger_ms, "linger-ms", FED_OPT_INT, "2000", 0, 600000,
      "aggregator, peer: keep answering this long after the last round (a client with "
      "--http: stay up this long at the end, to be scraped)"),
    R(retry_ms, "retry-ms", FED_OPT_INT, "2000", 1, 600000,
      "client: wait for an answer this much beyond --poll-ms before retrying"),
    R(max_model_params, "max-model-params", FED_OPT_DOUBLE, "1e8", 1, 1e12,
      "client: the most parameters of a model it builds from a MODEL frame (the graph "
      "comes from the network); a larger one is declined (LEAVE FED_ERR_MODEL_MISMATCH)"),
    R(max_model_flops, "max-model-flops", FED_OPT_DOUBLE, "1e11", 1, 1e18,
      "client: the most forward + backward FLOPs per sample of a model it builds from a "
      "MODEL frame; a costlier one is declined"),
    R(max_clients, "max-clients", FED_OPT_INT, "64", 1, 4096,
      "aggregator: requests held at once (at least the number of clients)"),
    R(max_connections, "max-connections", FED_OPT_INT, "0", 0, 65536,
      "aggregator, peer: connections at once, past which one is closed (0: max-clients + 64)"),
    R(conn_stall_ms, "conn-stall-ms", FED_OPT_INT, "30000", 100, 3600000,
      "aggregator, peer: close a connection silent this long that is owed no answer"),
    R(max_frame, "max-frame", FED_OPT_U64, "16777216", 1024, 1073741824,
      "largest frame in bytes, the same on every node; larger models go in chunks"),
    R(threads, "threads", FED_OPT_INT, "0", 0, FED_CLI_MAX_THREADS,
      "threads for training and opening frames; 0 = every online core"),
    R(rank_batch, "rank-batch", FED_OPT_INT, "0", 0, 4096,
      "client, peer: the batch each of this site's processes trains on (0: the round's "
      "--batch); under mpirun -np R each step takes R times it"),
    R(mpi_timeout_ms, "mpi-timeout-ms", FED_OPT_INT, "60000", 100, 3600000,
      "client, peer under mpirun: the deadline of each step's exchange between the site's "
      "processes; past it the job ends with an error (a process died or stalls)"),
    R(pipeline_stages, "pipeline-stages", FED_OPT_INT, "1", 1, FED_PIPE_MAX_STAGES,
      "client under mpirun -np S x D: the model's layers in S pipeline stages, one a "
      "process, D replicas; rank 0 is the node and the stages send it their slices at the "
      "round's end (fednode model FILE --plan --pipeline-stages S shows the split)"),
    R(micro_batches, "micro-batches", FED_OPT_INT, "1", 1, 4096,
      "client: each step's batch as M micro-batches in GPipe's order (all forwards, then "
      "all backwards from the last; --accumulate's sum in that order)"),
    R(keep_checkpoints, "keep-checkpoints", FED_OPT_INT, "3", 0, 1000000,
      "keep the models of the newest N checkpoints (0: all); an aggregator keeps its best "
      "round's too (--best-metric)"),
    R(best_metric, "best-metric", FED_OPT_STR, "", 0, 0,
      "aggregator: the test figure that makes a round the best, whose checkpoint is kept and "
      "which export --best writes: accuracy (default), loss, auc, ap, f1, sensitivity, "
      "specificity, macro_f1, ... (--early-stop's metric when that is given; with "
      "--eval-every the sites' pooled val.METRIC, not the aggregator's own)"),
    R(early_stop, "early-stop", FED_OPT_STR, "", 0, 0,
      "aggregator: METRIC:PATIENCE, end the run when PATIENCE rounds after the best by METRIC "
      "have not improved on it (each round evaluated before the next starts), e.g. auc:5"),
    R(eval_every, "eval-every", FED_OPT_INT, "0", 0, 1000000,
      "aggregator: every N rounds each client evaluates the model it receives on its "
      "validation split (--val-fraction, --val-data) and sends statistics that add up "
      "(through secure aggregation with --secagg); the pooled metrics are recorded as val.* "
      "and judge --best-metric and --early-stop (0: off)"),
    R(val_fraction, "val-fraction", FED_OPT_DOUBLE, "0", 0, 0.9,
      "client: hold out this fraction of its shard, stratified by label and seeded by "
      "--partition-seed, as the validation split the aggregator's --eval-every evaluates "
      "on (never trained on; 0: none)"),
    R(val_data, "val-data", FED_OPT_STR, "", 0, 0,
      "client: a file (or folder) of its own as the validation split, instead of "
      "--val-fraction"),
    R(site_metrics, "site-metrics", FED_OPT_BOOL, "true", 0, 0,
      "client: without --secagg the aggregator may record this site's own evaluation "
      "figures beside the pooled ones; --no-site-metrics: pooled only"),
    R(standardize, "standardize", FED_OPT_BOOL, "true", 0, 0,
      "CSV data: standardize every numeric column with the federation's shared statistics "
      "(pooled mean and std, gathered in a pass that is round 1, through secure aggregation "
      "with --secagg), the same at every site and in the exported model; --no-standardize: "
      "each site with its own file's. Images (IDX or folders): off unless the aggregator "
      "gives --standardize, then each channel's pixels (x - mean) / std with the pooled "
      "per-channel statistics of the bytes; a client follows its aggregator unless "
      "--no-standardize"),
    R(stats_min_count, "stats-min-count", FED_OPT_INT, "10", 0, 1000000000,
      "aggregator: in the statistics pass a column with fewer values than this is suppressed "
      "(mean 0, std 1): without --secagg at each site, whose sums the aggregator would see, "
      "and in the totals"),
    R(feature_bounds, "feature-bounds", FED_OPT_STR, "", 0, 0,
      "aggregator: DP statistics: the bounds each site clips its numeric values into before "
      "its noised sums leave (LO:HI for every column, or per column N=LO:HI by 1-based number "
      "or header name, a bare LO:HI the rest's; |LO|, |HI| < 2^30); needed for --standardize "
      "of CSV under a DP requirement, each release charged to the site's budget (images: "
      "each channel's bytes 0:255 unless given)"),
    R(stats_noise, "stats-noise", FED_OPT_DOUBLE, "4", 0.1, 1000,
      "aggregator, with --feature-bounds (or images' statistics under a DP requirement): the "
      "noise multiplier of each site's statistics "
      "(the Gaussian mechanism over the bounds, one release: epsilon 1.01 at delta 1e-5, 0.86 at "
      "1e-4, for 4)"),
    R(stats_only, "stats-only", FED_OPT_BOOL, "false", 0, 0,
      "aggregator: run the statistics pass alone (round 1), print the pooled table (a column "
      "or, for images, a channel a line) and end"),
    R(input_shape, "input-shape", FED_OPT_STR, "", 0, 0,
      "the model's input C,H,W (images), declared: an aggregator builds the model from it "
      "with no data; a client's or peer's data must have it"),
    R(features, "features", FED_OPT_INT, "0", 0, FED_DATA_MAX_FEATURES,
      "the model's input as N features (a CSV's columns besides the label), declared as "
      "--input-shape 1,1,N is (0: not declared)"),
    R(classes, "classes", FED_OPT_INT, "0", 0, 65536,
      "the number of classes K, declared: an aggregator's model has K outputs; a client's or "
      "peer's labels must lie in 0..K-1, and it trains the K-class model even when its own "
      "data holds fewer (0: a model file's, else the data's largest label + 1)"),
    FED_OPT_DEF_IMPLICIT(run_cfg, http, "http", "", FED_HTTP_DEFAULT_ADDR,
                         "serve a status page, /metrics (Prometheus), /status.json and /healthz "
                         "at http://HOST:PORT, read-only (none unless given)"),
    FED_NODE_SETTINGS_OPTS(run_cfg, s),
    FED_CLI_LOG_OPTS(run_cfg, log),
};
#undef R
#define NRUN_OPTS (sizeof run_opts / sizeof run_opts[0])

/* Everything run builds, freed in one place. */
typedef struct run_state {
    fed_crypto_arena *arena;
    fed_crypto_allow *allow;
    fed_gossip_peers *peers;
    fed_gossip_entry publish; /* --publish's entry */
    char *neighbours;         /* --neighbours' text, NUL-ended */
    fed_store *store;
    fed_backend *be;
    fed_pool *pool;
    fed_dataset *train, *test;
    uint32_t *idx;
    size_t nidx;
    fed_dataset *val;   /* --val-data */
    uint32_t *vidx;     /* --val-fraction: the held-out samples of train */
    size_t nvidx;
    double noise_std; /* its part's feature noise (--partition noise:SIGMA) */
    fed_dataset *local_test; /* client, --personal-eval: its part of the test split */
    float *init_params; /* --model FILE.onnx's weights as the model's flat buffer */
    /* --standardize on CSV data: its columns, a client's contribution to the
       statistics pass (over its shard's rows, idx0 in the file), and the
       data standardized with the shared statistics (what the node then
       borrows; the earlier one stays alive until the end) */
    const run_cfg *c;
    fed_data_opts dopts;
    uint32_t stats_cols;
    uint32_t *idx0;
    size_t nidx0;       /* idx0's count: the whole shard, validation split too */
    int64_t *stats_local;
    double *stats_lo, *stats_hi; /* aggregator: --feature-bounds per column */
    fed_dataset *shared[2];
    int stats_images;   /* the statistics are per channel of images */
    uint32_t stats_per_record; /* images: H x W, the values an image gives a
                                  channel */
    uint64_t *stats_hist; /* client, images: its shard's byte histogram a
                             channel (fed_data_channel_hist) */
} run_state;

static void run_state_free(run_state *s)
{
    fed_free(s->init_params);
    fed_free(s->idx);
    fed_free(s->vidx);
    fed_data_free(s->val);
    fed_free(s->idx0);
    fed_free(s->stats_local);
    fed_free(s->stats_lo);
    fed_free(s->stats_hi);
    fed_free(s->stats_hist);
    fed_data_free(s->shared[0]);
    fed_data_free(s->shared[1]);
    fed_data_free(s->train);
    fed_data_free(s->test);
    fed_data_free(s->local_test);
    fed_pool_free(s->pool);
    fed_backend_free(s->be);
    fed_store_close(s->store);
    fed_gossip_peers_free(s->peers);
    fed_free(s->neighbours);
    fed_crypto_allow_free(s->allow);
    fed_crypto_arena_free(s->arena);
}

/* The node's name in JSON log lines: its own in the allow-list (once that
 * is loaded), else the first bytes of its key. */
static void log_node_name(const run_state *s)
{
    const uint8_t *own = fed_crypto_arena_pubkey(s->arena);
    char hex[17];

    for (size_t i = 0; s->allow && i < fed_crypto_allow_count(s->allow); i++) {
        const char *name;
        const uint8_t *pk;

        fed_crypto_allow_get(s->allow, i, &name, &pk);
        if (!memcmp(pk, own, 32)) {
            fed_log_stream_set_node(name);
            return;
        }
    }
    for (int i = 0; i < 8; i++)
        snprintf(hex + 2 * i, 3, "%02x", own[i]);
    fed_log_stream_set_node(hex);
}

static int load_identity(const run_cfg *c, run_state *s)
{
    fed_crypto_arena_cfg ac;
    char *pass = NULL;
    size_t plen = 0;
    int rc;
    fed_err e;

    if (!c->keys[0]) {
        fed_cli_error("run: --keys DIR is required (make one with fednode keygen)");
        return 2;
    }
    if ((rc = fed_cli_passphrase("run", c->passphrase_file, &pass, &plen)) >= 0)
        return rc;
    fed_crypto_arena_cfg_default(&ac);
    /* a secret slot per chunk stream: the aggregator sends and takes one per
       client at once */
    if ((uint32_t)(2 * c->max_clients + 8) > ac.slots)
        ac.slots = (uint32_t)(2 * c->max_clients + 8);
    /* secure aggregation: a client keeps a slot per neighbour's shares (the
       aggregator decides k: room for rounds of up to 128 clients) */
    if (ac.slots < 16 + FED_NODE_SECAGG_SLOTS(128))
        ac.slots = 16 + FED_NODE_SECAGG_SLOTS(128);
    e = fed_crypto_arena_new(&ac, &s->arena);
    if (e == FED_OK)
        e = fed_crypto_identity_load(s->arena, c->keys, pass, plen);
    if (pass)
        sodium_free(pass);
    if (e != FED_OK) { /* no passphrase given is not a wrong one */
        fed_cli_error("run: %s/%s: %s", c->keys, FED_CRYPTO_KEYFILE,
                      e == FED_ERR_PASSPHRASE && !plen
                          ? "sealed, and no passphrase was given (--passphrase-file FILE or "
                            "$FEDNODE_PASSPHRASE)"
                          : fed_strerror(e));
        return 1;
    }
    log_node_name(s);
    return -1;
}

static int load_allow(const run_cfg *c, run_state *s)
{
    int line = 0;
    fed_err e;

    if (!c->allow[0]) {
        fed_cli_error("run: --allow FILE is required (who may take part)");
        return 2;
    }
    if ((e = fed_crypto_allow_new(&s->allow)) == FED_OK)
        e = fed_crypto_allow_load(s->allow, c->allow, &line);
    if (e != FED_OK) {
        if (line)
            fed_cli_error("run: %s:%d: %s", c->allow, line, fed_strerror(e));
        else
            fed_cli_error("run: %s: %s", c->allow, fed_strerror(e));
        return 1;
    }
    log_node_name(s);
    return -1;
}

/* The aggregator's key: a member's name, or a base64 key; not this
 * client's own (its frames to itself would be refused as it built them). */
static int aggregator_key(const run_cfg *c, const run_state *s, fed_peer_id *out)
{
    const char *kname = c->aggregator_key;
    size_t i, n = fed_crypto_allow_count(s->allow);

    for (i = 0; i < n; i++) {
        const char *name;
        const uint8_t *pk;

        fed_crypto_allow_get(s->allow, i, &name, &pk);
        if (!strcmp(name, kname)) {
            memcpy(out->key, pk, 32);
            break;
        }
    }
    if (i == n && fed_crypto_pk_from_base64(kname, strlen(kname), out->key) != FED_OK) {
        fed_cli_error("run: --aggregator-key '%s' is neither a name in %s nor a base64 key",
                      kname, c->allow);
        return 2;
    }
    if (sodium_memcmp(out->key, fed_crypto_arena_pubkey(s->arena), 32) == 0) {
        fed_cli_error("run: --keys %s holds the aggregator's key (--aggregator-key %s): a client "
                      "cannot be its own aggregator's peer; give it a key of its own (fednode "
                      "keygen) and add it to %s", c->keys, kname, c->allow);
        return 2;
    }
    return -1;
}

/* A client or peer keeps only its shard: a copy of its samples, in shard
 * order, replaces the whole training split (Fashion-MNIST: 4.7 of 47 MB at
 * 10 shards), and the shard becomes 0..n-1. Training draws the same samples
 * in the same order (it shuffles positions in the index list). */
static fed_err keep_shard_only(run_state *s)
{
    fed_dataset *sub = NULL;
    fed_err e = fed_data_subset(s->train, s->idx, s->nidx, &sub);

    if (e != FED_OK)
        return e;
    fed_data_free(s->train);
    s->train = sub;
    for (size_t i = 0; i < s->nidx; i++)
        s->idx[i] = (uint32_t)i;
    return FED_OK;
}

static int load_peers(const run_cfg *c, run_state *s)
{
    int line = 0;
    fed_err e;

    if (!c->peers[0]) {
        fed_cli_error("run: a peer needs --peers FILE (NAME URL per line)");
        return 2;
    }
    if ((e = fed_gossip_peers_new(&s->peers)) == FED_OK)
        e = fed_gossip_peers_load(s->peers, s->allow, c->peers, &line);
    if (e != FED_OK) {
        if (line)
            fed_cli_error("run: %s:%d: %s", c->peers, line, fed_strerror(e));
        else
            fed_cli_error("run: %s: %s", c->peers, fed_strerror(e));
        return 1;
    }
    return -1;
}

/* Images standardized per channel (restandardize's): a view of the
 * shard or the test split carrying the channels' map, nothing copied; a
 * client's validation file and its local test split mapped in place. */
static fed_err restandardize_images(run_state *s, const double *mean, const double *std,
                                    size_t cols, int test, const fed_dataset **out)
{
    fed_dataset *v = NULL;
    fed_err e = fed_data_view(test ? s->test : s->train, &v);

    if (e == FED_OK)
        e = fed_data_set_channel_stats(v, mean, std, cols);
    if (e == FED_OK && !test && s->val)
        e = fed_data_set_channel_stats(s->val, mean, std, cols);
    if (e == FED_OK && !test && s->local_test)
        e = fed_data_set_channel_stats(s->local_test, mean, std, cols);
    if (e != FED_OK) {
        fed_data_free(v);
        return e;
    }
    fed_data_free(s->shared[test]); /* a node asks once a run; never borrowed by then */
    s->shared[test] = v;
    *out = v;
    return FED_OK;
}

/* The node's data standardized with the shared statistics (node.h's
 * fed_node_stats_fn): a client's shard of the training file, an
 * aggregator's test split, read again from the file; images as
 * restandardize_images. */
static fed_err restandardize(void *ctx, const double *mean, const double *std, size_t cols,
                             const fed_dataset **out)
{
    run_state *s = ctx;
    fed_data_opts o = s->dopts;
    fed_dataset *d = NULL, *sub = NULL;
    int test = s->c->role[0] == 'a'; /* the aggregator: its test split */
    fed_err e;

    if (s->stats_images)
        return restandardize_images(s, mean, std, cols, test, out);
    o.csv.stats_mean = mean;
    o.csv.stats_std = std;
    o.csv.stats_features = cols;
    if ((e = fed_data_open_opts(s->c->s.data, !test, &o, &d)) != FED_OK)
        return e;
    if (!test) { /* its shard, as at start */
        e = fed_data_subset(d, s->idx0, s->nidx0, &sub);
        fed_data_free(d);
        if (e != FED_OK)
            return e;
        d = sub;
    }
    if (!test && s->val) { /* --val-data: scaled alike, in place (the node borrows it) */
        fed_dataset *v = NULL, t;

        if ((e = fed_data_open_opts(s->c->val_data, 1, &o, &v)) != FED_OK) {
            fed_data_free(d);
            return e;
        }
        t = *s->val;
        *s->val = *v;
        *v = t;
        fed_data_free(v);
    }
    fed_data_free(s->shared[test]); /* a node asks once a run; never borrowed by then */
    s->shared[test] = d;
    *out = d;
    return FED_OK;
}

/* A client's contribution to a DP statistics pass (node.h's
 * fed_node_stats_dp_fn): its shard's raw rows read again, each value
 * clipped into the aggregator's bounds. */
static fed_err stats_local_dp(void *ctx, const double *lo, const double *hi, size_t cols,
                              int64_t *out)
{
    run_state *s = ctx;
    fed_data_opts o = s->dopts;
    fed_colstats_dp dp = {lo, hi, 1.0, 0}; /* the node adds the noise */
    int64_t *ints = NULL;
    size_t feats = 0, sup = 0;
    fed_err e;

    if (s->stats_images) /* its shard's histograms: the bytes clipped and centred */
        return fed_colstats_local_bytes(s->stats_hist, cols, 0, &dp, out, NULL);
    o.csv.colstats_dp = &dp;
    e = fed_data_csv_colstats(s->c->s.data, &o.csv, s->idx0, s->nidx, 0, &ints, &feats, &sup);
    if (e == FED_OK && feats != cols)
        e = FED_ERR_SHAPE;
    if (e == FED_OK)
        memcpy(out, ints, cols * FED_COLSTATS_INTS * sizeof *out);
    fed_free(ints);
    return e;
}

/* The data file's feature names (its header's, the label left out) as
 * views into line (cap bytes): how many, at most max; 0 when the file has
 * no readable header. */
static size_t feature_names(const run_cfg *c, const run_state *s, char *line, size_t cap,
                            const char **names, size_t max)
{
    const char *label = s->dopts.csv.label_column ? s->dopts.csv.label_column : "label";
    FILE *f = c->s.data[0] ? fopen(c->s.data, "r") : NULL;
    char *save = NULL, *name;
    size_t k = 0;

    if (!f || !fgets(line, (int)cap, f))
        line[0] = '\0';
    if (f)
        fclose(f);
    line[strcspn(line, "\r\n")] = '\0';
    for (name = strtok_r(line, ",", &save); name && k < max; name = strtok_r(NULL, ",", &save)) {
        while (*name == ' ')
            name++;
        if (strcmp(name, label) != 0)
            names[k++] = name;
    }
    return k;
}

/* "LO:HI" into *lo, *hi; 0 when it is not two numbers. */
static int parse_bound(const char *t, double *lo, double *hi)
{
    char *end;

    *lo = strtod(t, &end);
    if (end == t || *end != ':')
        return 0;
    t = end + 1;
    *hi = strtod(t, &end);
    return end != t && *end == '\0';
}

/* --feature-bounds for cols columns into s->stats_lo/hi: LO:HI for all, or
 * items N=LO:HI (N: a 1-based column or a header name) and a bare LO:HI
 * for the rest. -1 when parsed, else the exit code (the error said). */
static int parse_feature_bounds(const run_cfg *c, run_state *s, uint32_t cols)
{
    char *text = fed_malloc(sizeof c->feature_bounds), *line = fed_malloc(65536), *save = NULL, *it;
    const char **names = fed_calloc(cols, sizeof *names);
    fed_colstats_dp dp;
    double dlo = 0, dhi = 0;
    int have_default = 0, rc = -1;
    size_t nnames = 0;
    char why[160];

    s->stats_lo = fed_calloc(cols, sizeof *s->stats_lo);
    s->stats_hi = fed_calloc(cols, sizeof *s->stats_hi);
    if (!text || !line || !names || !s->stats_lo || !s->stats_hi) {
        fed_cli_error("run: %s", fed_strerror(FED_ERR_NOMEM));
        rc = 1;
        goto out;
    }
    for (uint32_t j = 0; j < cols; j++)
        s->stats_lo[j] = s->stats_hi[j] = NAN;
    nnames = feature_names(c, s, line, 65536, names, cols);
    memcpy(text, c->feature_bounds, sizeof c->feature_bounds);
    for (it = strtok_r(text, ",", &save); it && rc < 0; it = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(it, '=');
        double lo, hi;
        long col = -1;

        while (*it == ' ')
            it++;
        if (eq) {
            char *end;

            *eq = '\0';
            col = strtol(it, &end, 10) - 1;
            if (end == it || *end != '\0') {
                col = -1;
                for (size_t k = 0; k < nnames && col < 0; k++)
                    if (!strcmp(names[k], it))
                        col = (long)k;
            }
            if (col < 0 || col >= (long)cols) {
                fed_cli_error("run: --feature-bounds: '%s' is not a column (1..%u%s)", it, cols,
                              nnames ? " or a name in the data's header" : "");
                rc = 2;
                break;
            }
        }
        if (!parse_bound(eq ? eq + 1 : it, &lo, &hi)) {
            fed_cli_error("run: --feature-bounds: '%s' is not LO:HI", eq ? eq + 1 : it);
            rc = 2;
        } else if (col < 0) {
            dlo = lo, dhi = hi, have_default = 1;
        } else {
            s->stats_lo[col] = lo, s->stats_hi[col] = hi;
        }
    }
    for (uint32_t j = 0; rc < 0 && j < cols; j++) {
        if (isnan(s->stats_lo[j]) && !have_default) {
            fed_cli_error("run: --feature-bounds: column %u%s%s has no bounds (give N=LO:HI or a "
                          "bare LO:HI for the rest)", j + 1, j < nnames ? " " : "",
                          j < nnames ? names[j] : "");
            rc = 2;
        } else if (isnan(s->stats_lo[j])) {
            s->stats_lo[j] = dlo, s->stats_hi[j] = dhi;
        }
    }
    dp = (fed_colstats_dp){s->stats_lo, s->stats_hi, c->stats_noise, s->stats_per_record};
    if (rc < 0 && fed_colstats_dp_check(&dp, cols, why, sizeof why) != FED_OK) {
        fed_cli_error("run: --feature-bounds: %s", why);
        rc = 2;
    }
out:
    fed_free(text);
    fed_free(line);
    fed_free(names);
    return rc;
}

/* Images' --standardize: the pass's columns are the channels; under a DP
 * requirement each channel's bounds are the byte's, 0:255, unless
 * --feature-bounds says others; a client's contribution is its shard's
 * histogram of bytes a channel (kept for a DP pass's clipped one). */
static int stats_prepare_images(const run_cfg *c, run_state *s, fed_node_role role,
                                const fed_dataset *d, int dp)
{
    s->stats_images = 1;
    s->stats_cols = d ? (uint32_t)d->shape.c : (uint32_t)c->decl.in.c;
    s->stats_per_record = d ? (uint32_t)(d->shape.h * d->shape.w)
                            : (uint32_t)(c->decl.in.h * c->decl.in.w);
    if (role == FED_NODE_AGGREGATOR && c->feature_bounds[0])
        return parse_feature_bounds(c, s, s->stats_cols);
    if (role == FED_NODE_AGGREGATOR && dp) {
        s->stats_lo = fed_calloc(s->stats_cols, sizeof *s->stats_lo);
        s->stats_hi = fed_calloc(s->stats_cols, sizeof *s->stats_hi);
        if (!s->stats_lo || !s->stats_hi) {
            fed_cli_error("run: %s", fed_strerror(FED_ERR_NOMEM));
            return 1;
        }
        for (uint32_t k = 0; k < s->stats_cols; k++)
            s->stats_hi[k] = 255;
        return -1;
    }
    if (role != FED_NODE_CLIENT)
        return -1;
    s->stats_hist = fed_malloc((size_t)s->stats_cols * FED_COLSTATS_BYTE_VALUES *
                               sizeof *s->stats_hist);
    if (!dp && s->stats_hist)
        s->stats_local = fed_malloc((size_t)s->stats_cols * FED_COLSTATS_INTS *
                                    sizeof *s->stats_local);
    if (!s->stats_hist || (!dp && !s->stats_local)) {
        fed_cli_error("run: %s", fed_strerror(FED_ERR_NOMEM));
        return 1;
    }
    fed_data_channel_hist(d, s->idx, s->nidx, s->stats_hist);
    if (!dp && fed_colstats_local_bytes(s->stats_hist, s->stats_cols, 0, NULL, s->stats_local,
                                        NULL) != FED_OK) {
        fed_cli_error("run: data %s: its shared statistics: %zu samples of %zu pixels are more "
                      "values than the statistics take (2^40)", c->s.data, s->nidx,
                      d->features / (size_t)d->shape.c);
        return 1;
    }
    return -1;
}

/* Whether the file or a flag set option name. */
static int opt_given(const run_cfg *c, const char *name)
{
    const fed_opt *o = fed_opt_find(run_opts, NRUN_OPTS, name);

    assert(o);
    return c->given && c->given[o - run_opts];
}

/* --standardize on CSV data (d; NULL: an aggregator with none, whose
 * declared --features say the rows): its column count, and a client's contribution
 * to the statistics pass from its shard's raw rows (before keep_shard_only
 * numbers them anew). Refused under a DP requirement without
 * --feature-bounds: the pass's totals are not noised. Images as
 * stats_prepare_images, and only when the aggregator gives --standardize. */
static int stats_prepare(const run_cfg *c, run_state *s, fed_node_role role,
                         const fed_dataset *d)
{
    size_t feats = 0, sup = 0;
    /* CSV rows: the data's, or (an aggregator with no data) --features' */
    int rows = d ? d->x_f32 != NULL
                 : c->decl.in.c == 1 && c->decl.in.h == 1 && c->decl.in.w > 0;
    int images = d ? d->x_u8 != NULL : !rows && c->decl.in.c > 0;
    int dp = c->s.require_dp_sgd || c->s.dp_client_clip > 0 || c->s.dp_sgd;
    fed_err e;

    if (!c->standardize || role == FED_NODE_PEER || (!rows && !images))
        return -1;
    if (c->feature_bounds[0] && role != FED_NODE_AGGREGATOR) {
        fed_cli_error("run: --feature-bounds is the aggregator's: a client takes the bounds "
                      "from its MODEL");
        return 2;
    }
    if (images)
        return role == FED_NODE_CLIENT || opt_given(c, "standardize")
                   ? stats_prepare_images(c, s, role, d, dp)
                   : -1;
    if (dp && role == FED_NODE_AGGREGATOR && !c->feature_bounds[0]) {
        fed_cli_error("run: --standardize gathers the columns' pooled mean and std, which no DP "
                      "guarantee (%s) covers without noise: declare --feature-bounds (each "
                      "site clips into them and noises its sums, charged to its budget), or "
                      "run with --no-standardize (each site scales with its own file's "
                      "statistics)",
                      c->s.require_dp_sgd ? "--require-dp-sgd"
                      : c->s.dp_client_clip > 0 ? "--dp-client-clip" : "--dp-sgd");
        return 2;
    }
    s->stats_cols = d ? (uint32_t)d->features : (uint32_t)c->decl.in.w;
    if (role == FED_NODE_AGGREGATOR && c->feature_bounds[0])
        return parse_feature_bounds(c, s, s->stats_cols);
    if (role != FED_NODE_CLIENT)
        return -1;
    if (!(s->idx0 = fed_malloc((s->nidx ? s->nidx : 1) * sizeof *s->idx0))) {
        fed_cli_error("run: %s", fed_strerror(FED_ERR_NOMEM));
        return 1;
    }
    memcpy(s->idx0, s->idx, s->nidx * sizeof *s->idx0);
    s->nidx0 = s->nidx;
    if (dp) /* under DP it releases no exact sums: only a DP pass's */
        return -1;
    e = fed_data_csv_colstats(c->s.data, &s->dopts.csv, s->idx0, s->nidx, 0, &s->stats_local,
                              &feats, &sup);
    if (e == FED_OK && feats != s->stats_cols)
        e = FED_ERR_SHAPE;
    if (e != FED_OK) {
        fed_cli_error("run: data %s: its shared statistics: %s", c->s.data, fed_strerror(e));
        return 1;
    }
    return -1;
}
/* An aggregator reads data only for its own evaluation, and for the input's
 * shape or classes when nothing declares them; without --data (the
 * default's Fashion-MNIST is a client's), none: then the declared input
 * must be whole. 1: load the test split; 0: none; else the exit status. */
static int agg_wants_data(const run_cfg *c)
{
    const fed_model_decl *d = &c->decl;

    if (opt_given(c, "data"))
        return c->eval || !fed_model_input_complete(d);
    if (fed_model_input_complete(d))
        return 0;
    fed_cli_error("run: an aggregator builds its model from the declared input, with no data, "
                  "and %s: give %s%s%s; or --data for its own evaluation, whose input it then "
                  "takes",
                  !d->in.c && !d->in.classes ? "none is declared"
                  : !d->in.c                 ? "the input's shape is not declared"
                                             : "the number of classes is not declared",
                  !d->in.c ? "--features N (a CSV's columns besides the label), --input-shape "
                             "C,H,W or a model file with [input]"
                           : "",
                  !d->in.c && !d->in.classes ? ", and " : "",
                  !d->in.classes ? "--classes K (or classes = K in the model file's [output])"
                                 : "");
    return 2;
}

/* A split loaded, checked against the declared input (its classes then
 * the declared ones). */
static int fit_declared(const run_cfg *c, fed_dataset *d, const char *split)
{
    char what[320], why[640];
    int own = d->shape.classes;

    snprintf(what, sizeof what, "--data %s (%s)", c->s.data, split);
    if (fed_model_input_fit(d, &c->decl, what, why, sizeof why) == FED_OK) {
        if (own != d->shape.classes)
            fed_log(FED_LOG_INFO, "run: %s: %d classes, declared by %s (its own labels "
                    "reach %d)", what, d->shape.classes, c->decl.classes_by, own - 1);
        return -1;
    }
    fed_cli_error("run: %s", why);
    return 2;
}

/* A client's validation split (--val-fraction, --val-data), once its
 * shard is its own: held out of the shard, or a file of its own. */
static int load_val(const run_cfg *c, run_state *s, int shard)
{
    fed_err e;

    if (c->val_fraction > 0) {
        e = fed_data_split_val(s->train, s->idx, &s->nidx, c->val_fraction,
                               c->partition_seed ^ ((uint64_t)shard << 32), &s->vidx, &s->nvidx);
        if (e != FED_OK) {
            fed_cli_error("run: --val-fraction %g of a shard of %zu samples: %s", c->val_fraction,
                          s->nidx, e == FED_ERR_RANGE ? "the split or the rest would be empty"
                                                      : fed_strerror(e));
            return 1;
        }
        fed_log(FED_LOG_INFO, "client: %zu samples held out for validation, %zu to train on",
                s->nvidx, s->nidx);
    } else if (c->val_data[0]) {
        /* scaled like the shard: by its own statistics until the shared ones
           come (restandardize), which come before any round evaluates */
        if ((e = fed_data_open_opts(c->val_data, 1, &s->dopts, &s->val)) != FED_OK) {
            fed_cli_error("run: --val-data %s: %s", c->val_data, fed_strerror(e));
            return 1;
        }
        if (s->val->shape.classes != s->train->shape.classes ||
            s->val->features != s->train->features) {
            fed_cli_error("run: --val-data %s: %zu features and %d classes, the training data "
                          "%zu and %d", c->val_data, s->val->features, s->val->shape.classes,
                          s->train->features, s->train->shape.classes);
            return 1;
        }
    }
    return -1;
}

/* --personal-eval: the client's part of the test split, cut as its
 * training part is (the same scheme, seed, shard and K). */
static int load_local_test(const run_cfg *c, run_state *s, const fed_data_opts *dopts, int shard,
                           int k)
{
    fed_dataset *all = NULL;
    uint32_t *idx = NULL;
    size_t n = 0;
    int rc;
    fed_err e;

    if ((e = fed_data_open_opts(c->s.data, 0, dopts, &all)) != FED_OK) {
        fed_cli_error("run: --personal-eval: the test split of %s: %s", c->s.data,
                      fed_strerror(e));
        return 1;
    }
    if ((rc = fit_declared(c, all, "test split")) < 0) {
        e = fed_data_partition(all, c->s.partition, shard, k, c->partition_seed, &idx, &n);
        if (e == FED_OK && n == 0)
            e = FED_ERR_RANGE; /* its labels have no test sample */
        if (e == FED_OK)
            e = fed_data_subset(all, idx, n, &s->local_test);
        if (e != FED_OK) {
            fed_cli_error("run: --personal-eval: part %d/%d of the test split of %s: %s", shard,
                          k, c->s.data, fed_strerror(e));
            rc = 1;
        }
    }
    fed_free(idx);
    fed_data_free(all);
    return rc;
}

/* client: its shard; aggregator: the test split (evaluation, and the input
 * when nothing declares it), or nothing; peer: both. */
static int load_data(const run_cfg *c, run_state *s, fed_node_role role)
{
    int shard = 0, k = 1, rc, test = role != FED_NODE_CLIENT;
    fed_data_opts dopts;
    fed_err e = FED_OK;

    if (role == FED_NODE_AGGREGATOR && (test = agg_wants_data(c)) > 1)
        return test;
    if ((rc = fed_cli_data_opts("run", &c->s.dflags, &dopts)) >= 0)
        return rc;
    s->c = c;
    s->dopts = dopts;
    if (!opt_given(c, "image-shape") && (c->decl.in.c == 1 || c->decl.in.c == 3) &&
        c->decl.in.h > 1 && c->decl.in.h <= FED_DATA_IMG_MAX_SIDE &&
        c->decl.in.w <= FED_DATA_IMG_MAX_SIDE) {
        /* image folders are fitted to the declared input */
        dopts.c = c->decl.in.c;
        dopts.h = c->decl.in.h;
        dopts.w = c->decl.in.w;
    }
    if (role != FED_NODE_AGGREGATOR) {
        if (!fed_cli_parse_shard(c->shard, &shard, &k)) {
            fed_cli_error("run: --shard '%s': expected I/K with 0 <= I < K", c->shard);
            return 2;
        }
        if ((e = fed_data_open_opts(c->s.data, 1, &dopts, &s->train)) != FED_OK) {
            fed_cli_error("run: data %s: %s", c->s.data, fed_strerror(e));
            return 1;
        }
        /* the whole file, before the shard: a site refuses what it holds */
        if ((rc = fit_declared(c, s->train, "training split")) >= 0)
            return rc;
        if ((e = fed_data_augment_check(c->s.augment, s->train)) == FED_OK)
            e = fed_data_partition(s->train, c->s.partition, shard, k, c->partition_seed, &s->idx,
                                   &s->nidx);
        if (e == FED_OK)
            e = fed_data_partition_noise(c->s.partition, shard, k, &s->noise_std);
        if (e == FED_OK && s->nidx == 0)
            e = FED_ERR_RANGE;
        if (e == FED_OK && (rc = stats_prepare(c, s, role, s->train)) >= 0)
            return rc;
        if (e == FED_OK)
            e = keep_shard_only(s);
        if (e == FED_OK && (rc = load_val(c, s, shard)) >= 0)
            return rc;
    }
    if (e == FED_OK && test)
        e = fed_data_open_opts(c->s.data, 0, &dopts, &s->test);
    if (e == FED_OK && role == FED_NODE_AGGREGATOR && (rc = stats_prepare(c, s, role, s->test)) >= 0)
        return rc;
    if (e != FED_OK) {
        fed_cli_error("run: data %s: %s", c->s.data, fed_strerror(e));
        return 1;
    }
    if (s->test && (rc = fit_declared(c, s->test, "test split")) >= 0)
        return rc;
    if (role == FED_NODE_CLIENT && c->personal_eval)
        return load_local_test(c, s, &dopts, shard, k);
    return -1;
}

/* The statistics pass's part of the node's config (--standardize). */
static void stats_config(const run_cfg *c, run_state *s, fed_node_config *nc)
{
    if (!s->stats_cols)
        return;
    nc->data.stats_cols = s->stats_cols;
    nc->data.stats_min_count = (uint64_t)c->stats_min_count;
    nc->data.stats_local = s->stats_local;
    nc->data.restandardize = restandardize;
    nc->data.stats_ctx = s;
    nc->data.stats_local_dp = stats_local_dp;
    nc->data.stats_lo = s->stats_lo;
    nc->data.stats_hi = s->stats_hi;
    nc->data.stats_noise = s->stats_lo ? c->stats_noise : 0;
    nc->data.stats_only = c->stats_only;
    nc->data.stats_per_record = s->stats_per_record;
}

/* --stats-only's table: the pooled statistics the checkpoint holds, a
 * column a line, named by the data file's header (its label left out); for
 * images a channel a line (gray, or red, green, blue), in bytes 0..255. */
static int print_stats_table(const run_cfg *c, run_state *s)
{
    fed_store_ckpt ck;
    fed_store_faults faults;
    const fed_store_section *sec;
    char line[65536];
    const char **names = fed_calloc(s->stats_cols ? s->stats_cols : 1, sizeof *names);
    size_t nnames;

    memset(&ck, 0, sizeof ck);
    memset(&faults, 0, sizeof faults);
    if (!names) {
        fed_cli_error("run: %s", fed_strerror(FED_ERR_NOMEM));
        return 1;
    }
    if (s->stats_images) {
        static const char *const rgb[3] = {"red", "green", "blue"};

        for (nnames = 0; nnames < s->stats_cols; nnames++)
            names[nnames] = s->stats_cols == 1 ? "gray" : s->stats_cols == 3 ? rgb[nnames] : "";
    } else {
        nnames = feature_names(c, s, line, sizeof line, names, s->stats_cols);
    }
    if (fed_store_latest_valid_checkpoint(s->store, &ck, &faults) != FED_OK ||
        !(sec = fed_store_ckpt_find(&ck, FED_CKPT_SEC_STATS))) {
        fed_cli_error("run: --stats-only: the pass found no statistics (see the log)");
        fed_store_ckpt_fini(&ck);
        fed_free(names);
        return 1;
    }
    printf("shared statistics of %zu %s (%sround %llu)\n", sec->len / 32,
           s->stats_images ? "channels" : "columns", s->stats_images ? "pixel bytes 0..255, " : "",
           (unsigned long long)ck.round);
    printf("%-7s %-24s %12s %9s %24s %24s\n", s->stats_images ? "channel" : "column", "name",
           "count", "missing", "mean", "std");
    for (size_t j = 0; j < sec->len / 32; j++) {
        const uint8_t *p = (const uint8_t *)sec->data + 32 * j;

        printf("%-7zu %-24.24s %12llu %9.4f %24.17g %24.17g\n", j + 1, j < nnames ? names[j] : "",
               (unsigned long long)fed_get_u64le(p + 24), fed_get_f64le(p + 16),
               fed_get_f64le(p), fed_get_f64le(p + 8));
    }
    fed_store_ckpt_fini(&ck);
    fed_free(names);
    return 0;
}

/* The shared settings (node/settings.h) into nc; wait-clients 0: every
 * member of the allow-list but this node. */
static int check_round_options(const run_cfg *c, const run_state *s, fed_node_config *nc)
{
    size_t members = fed_crypto_allow_count(s->allow);
    const char *bad = NULL;

    if (fed_node_settings_apply(&c->s, members > 1 ? (uint32_t)(members - 1) : 0, nc, &bad) ==
        FED_OK)
        return -1;
    if (!strcmp(bad, "optimizer"))
        fed_cli_error("run: --optimizer '%s': sgd or adam", c->s.optimizer);
    else if (!strcmp(bad, "codec"))
        fed_cli_error("run: --codec '%s': f32, f16, q8 or topk:FRACTION", c->s.codec);
    else if (!strcmp(bad, "strategy"))
        fed_cli_error("run: --strategy '%s' is not a strategy (see docs/consortium.md)", c->s.strategy);
    else if (!strcmp(bad, "lr-schedule"))
        fed_cli_error("run: --lr-schedule '%s': const, step:ROUNDS,GAMMA or cosine (cosine needs"
                      " --rounds)", c->s.lr_schedule);
    else if (!strcmp(bad, "lr-warmup"))
        fed_cli_error("run: --lr-warmup %d leaves no round of --lr-schedule %s in %d rounds",
                      c->s.lr_warmup, c->s.lr_schedule, c->s.rounds);
    else if (!strcmp(bad, "local-layers"))
        fed_cli_error("run: --local-layers '%s': comma-separated globs over tensor names "
                      "(e.g. fc3.*,conv1.bias), no spaces, at most 255 bytes", c->s.local_layers);
    else
        fed_cli_error("run: --mode '%s': sync or async", c->s.mode);
    return 2;
}

static fed_node_role role_of(const run_cfg *c)
{
    return !strcmp(c->role, "client")   ? FED_NODE_CLIENT
           : !strcmp(c->role, "peer")   ? FED_NODE_PEER
                                        : FED_NODE_AGGREGATOR;
}

/* The model and how it trains: the aggregator's clients', a peer's own. */
static int fill_training(const run_cfg *c, run_state *s, fed_node_config *nc)
{
    char why[256];
    int rc;

    if ((rc = check_round_options(c, s, nc)) >= 0)
        return rc;
    /* the data's, fitted to what is declared; else the declared input */
    nc->shape = s->test ? s->test->shape : c->decl.in;
    nc->shape.scale = fed_node_settings_input_scale(&c->s);
    nc->graph = c->graph; /* the whole graph beside its id, when longer */
    if (fed_model_spec_explain(c->graph ? c->graph : c->s.model, nc->shape, why, sizeof why) !=
        FED_OK) {
        fed_cli_error("run: --model: %s", why);
        return 2;
    }
    nc->data.test = c->eval ? s->test : NULL;
    if (!s->test)
        fed_log(FED_LOG_INFO, "run: no --data: the model is built from the declared input "
                "(%dx%dx%d by %s, %d classes by %s), no evaluation here",
                nc->shape.c, nc->shape.h, nc->shape.w, c->decl.shape_by, nc->shape.classes,
                c->decl.classes_by);
    return -1;
}

/* The site-evaluation options: each role's own, and what they cannot go
 * with. */
/* --port-file's place, before anything is created (the database, keys'
 * state): the daemon writes FILE.tmp beside it and renames it over FILE once
 * it listens, so FILE must not be a directory and its folder must exist and
 * take new files. Said with the path and the system's reason, not as the
 * write's I/O error after the database was made. */
static int check_port_file(const run_cfg *c)
{
    const char *f = c->port_file, *slash;
    char dir[PATH_MAX_RUN];
    struct stat sb;
    int err = 0;

    if (!f[0])
        return -1;
    slash = strrchr(f, '/');
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if (slash == f)
        snprintf(dir, sizeof dir, "/");
    else
        snprintf(dir, sizeof dir, "%.*s", (int)(slash - f), f);
    if (slash && !slash[1])
        err = EISDIR; /* "dir/": a folder's name */
    else if (stat(f, &sb) == 0 && S_ISDIR(sb.st_mode))
        err = EISDIR;
    else if (stat(dir, &sb) != 0)
        err = errno;
    else if (!S_ISDIR(sb.st_mode))
        err = ENOTDIR;
    else if (access(dir, W_OK | X_OK) != 0)
        err = errno;
    if (!err)
        return -1;
    fed_cli_error("run: --port-file %s: %s", f, strerror(err));
    return 2;
}

static int check_site_eval(const run_cfg *c)
{
    fed_node_role role = role_of(c);
    int dp = c->s.require_dp_sgd || c->s.dp_client_clip > 0 || c->s.dp_sgd;

    if (role != FED_NODE_AGGREGATOR && c->eval_every) {
        fed_cli_error("run: --eval-every is the aggregator's setting");
        return 2;
    }
    if (role != FED_NODE_CLIENT && (c->val_fraction > 0 || c->val_data[0] || !c->site_metrics)) {
        fed_cli_error("run: --val-fraction, --val-data and --no-site-metrics are a client's "
                      "settings");
        return 2;
    }
    if (role != FED_NODE_CLIENT && (c->personal_eval || c->finetune_epochs)) {
        fed_cli_error("run: --personal-eval and --finetune-epochs are a client's settings (each "
                      "site scores its own model on its own test split)");
        return 2;
    }
    if (c->finetune_epochs && !c->personal_eval) {
        fed_cli_error("run: --finetune-epochs %d fine-tunes the model --personal-eval scores: "
                      "give --personal-eval too", c->finetune_epochs);
        return 2;
    }
    if (role != FED_NODE_AGGREGATOR && opt_given(c, "strategy")) {
        fed_cli_error("run: --strategy is the aggregator's setting (%s)",
                      role == FED_NODE_PEER ? "peers merge by --mixing" :
                                              "its clients train what each round's MODEL says");
        return 2;
    }
    if (c->val_fraction > 0 && c->val_data[0]) {
        fed_cli_error("run: --val-fraction %g and --val-data %s both give a validation split; "
                      "give one", c->val_fraction, c->val_data);
        return 2;
    }
    if (dp && (c->eval_every || c->val_fraction > 0 || c->val_data[0])) {
        fed_cli_error("run: site evaluation (--eval-every, --val-fraction, --val-data) sends "
                      "confusion counts and score histograms, a release of the site's data "
                      "that no DP guarantee (--require-dp-sgd, --dp-sgd, DP-FedAvg) covers: "
                      "leave it off under DP");
        return 2;
    }
    return -1;
}

/* --best-metric and --early-stop METRIC:PATIENCE: the metric and the
 * patience (0: none); -1, or the exit status with what was wrong said. */
static int parse_best(const run_cfg *c, char metric[FED_METRICS_NAME_MAX], uint32_t *patience)
{
    const char *colon = strchr(c->early_stop, ':');
    char *end = NULL;
    unsigned long pat = 0;

    snprintf(metric, FED_METRICS_NAME_MAX, "accuracy");
    if (role_of(c) != FED_NODE_AGGREGATOR && (c->early_stop[0] || c->best_metric[0])) {
        fed_cli_error("run: --early-stop and --best-metric are an aggregator's settings");
        return 2;
    }
    if (c->early_stop[0]) {
        if (colon)
            pat = strtoul(colon + 1, &end, 10);
        if (!colon || colon == c->early_stop ||
            (size_t)(colon - c->early_stop) >= FED_METRICS_NAME_MAX || colon[1] < '0' ||
            colon[1] > '9' || *end || pat < 1 || pat > 1000000) {
            fed_cli_error("run: --early-stop '%s': want METRIC:PATIENCE, PATIENCE a whole number "
                          "of rounds from 1 to 1000000 (e.g. auc:5)", c->early_stop);
            return 2;
        }
        snprintf(metric, FED_METRICS_NAME_MAX, "%.*s", (int)(colon - c->early_stop),
                 c->early_stop);
        if (c->best_metric[0] && strcmp(c->best_metric, metric) != 0) {
            fed_cli_error("run: --best-metric %s and --early-stop %s name different metrics; "
                          "give one", c->best_metric, c->early_stop);
            return 2;
        }
    } else if (c->best_metric[0]) {
        snprintf(metric, FED_METRICS_NAME_MAX, "%s", c->best_metric);
    }
    if (fed_metrics_higher_better(metric) < 0) {
        fed_cli_error("run: '%s' is no metric a round records: accuracy, loss, auc, ap, "
                      "sensitivity, specificity, precision, f1, youden_sensitivity, "
                      "youden_specificity, youden_f1, macro_f1, recall.C", metric);
        return 2;
    }
    *patience = (uint32_t)pat;
    return -1;
}

/* The aggregator's best metric and early stop into nc (checked already). */
static int fill_best(const run_cfg *c, fed_node_config *nc)
{
    char metric[FED_METRICS_NAME_MAX];
    uint32_t pat = 0;
    int rc;

    if ((rc = parse_best(c, metric, &pat)) >= 0)
        return rc;
    if (c->eval_every && strncmp(metric, "val.", 4) != 0) {
        /* the pooled site evaluation judges, when there is one */
        char val[FED_METRICS_NAME_MAX];

        if (strlen(metric) + 4 >= sizeof val) {
            fed_cli_error("run: --best-metric %s: too long a name", metric);
            return 2;
        }
        snprintf(val, sizeof val, "val.%s", metric);
        memcpy(metric, val, sizeof val);
        if (pat || c->best_metric[0])
            fed_log(FED_LOG_INFO, "run: %s judges the sites' pooled evaluation (--eval-every), "
                    "not the aggregator's own", metric);
    }
    if ((pat || c->best_metric[0]) && !nc->data.test && !c->eval_every) {
        fed_cli_error("run: --%s needs the aggregator's evaluation (test data, no --no-eval)",
                      pat ? "early-stop" : "best-metric");
        return 2;
    }
    if (nc->data.test || c->eval_every)
        snprintf(nc->agg.best_metric, sizeof nc->agg.best_metric, "%s", metric);
    nc->agg.early_stop = pat;
    nc->agg.eval_every = (uint32_t)c->eval_every;
    return -1;
}

static int fill_aggregator(const run_cfg *c, fed_node_config *nc)
{
    int rc;

    if ((rc = fill_best(c, nc)) >= 0)
        return rc;
    if (nc->agg.async_k > FED_MERGE_DEFAULT_MAX_CLIENTS) {
        fed_cli_error("run: async merges at most %d deltas at once",
                      FED_MERGE_DEFAULT_MAX_CLIENTS);
        return 2;
    }
    return -1;
}

/* --publish FILE: one signed entry (fednode vouch). */
static int load_publish(const run_cfg *c, run_state *s)
{
    uint8_t *buf = NULL;
    size_t len = 0, used = 0;
    fed_err e = fed_data_read_file(c->publish, FED_GOSSIP_ENTRY_MAX, &buf, &len);

    if (e == FED_OK && (fed_gossip_entry_decode(buf, len, &s->publish, &used) != FED_OK ||
                        used != len))
        e = FED_ERR_FORMAT;
    fed_free(buf);
    if (e != FED_OK) {
        fed_cli_error("run: --publish %s: %s", c->publish, fed_strerror(e));
        return 1;
    }
    return -1;
}

/* --advertise, or --listen when others can dial it as it is. */
static void advertised_url(const run_cfg *c, char *out, size_t size)
{
    size_t n = strlen(c->listen);

    if (c->advertise[0])
        snprintf(out, size, "%s", c->advertise);
    else if (!strstr(c->listen, "0.0.0.0") && !(n > 2 && !strcmp(c->listen + n - 2, ":0")))
        snprintf(out, size, "%s", c->listen);
    else
        out[0] = 0;
}

static int fill_peer(const run_cfg *c, run_state *s, fed_node_config *nc)
{
    int rc;

    if (fed_node_peer_check(c->s.topology, c->s.sync, c->s.mixing) == FED_ERR_UNSUPPORTED) {
        fed_cli_error("run: --mixing allreduce is a barrier by nature: --sync '%s' cannot go "
                      "with it (use --sync bsp)", c->s.sync);
        return 2;
    }
    if (fed_node_peer_check(c->s.topology, c->s.sync, c->s.mixing) != FED_OK) {
        fed_cli_error("run: --topology '%s', --sync '%s' or --mixing '%s' is not valid "
                      "(see fednode run --help)", c->s.topology, c->s.sync, c->s.mixing);
        return 2;
    }
    advertised_url(c, nc->peer.advertise, sizeof nc->peer.advertise);
    nc->peer.vouch = c->vouch;
    nc->peer.peers = s->peers;
    if (c->publish[0]) {
        if ((rc = load_publish(c, s)) >= 0)
            return rc;
        nc->peer.publish = &s->publish;
    }
    if (!strcmp(c->s.topology, "static")) {
        uint8_t *buf = NULL;
        size_t len = 0;
        fed_err e = c->neighbours[0] ? fed_data_read_file(c->neighbours, 1 << 20, &buf, &len)
                                     : FED_ERR_NOTFOUND;

        if (e != FED_OK) {
            fed_cli_error("run: --topology static needs --neighbours FILE: %s",
                          c->neighbours[0] ? fed_strerror(e) : "none given");
            return 2;
        }
        s->neighbours = (char *)buf; /* fed_data_read_file ends it with a NUL */
        nc->peer.neighbours = s->neighbours;
    }
    nc->data.train = s->train;
    nc->data.shard = s->idx;
    nc->data.shard_n = s->nidx;
    nc->data.noise_std = s->noise_std;
    nc->transfer.retry_ms = (uint64_t)c->retry_ms;
    return -1;
}

static int fill_node_config(const run_cfg *c, run_state *s, fed_node_config *nc)
{
    fed_node_role role = role_of(c);
    int rc;

    fed_node_config_default(nc);
    nc->role = role;
    nc->seed = c->s.seed; /* a client's too: it takes no round settings */
    nc->be = s->be;
    nc->pool = s->pool;
    nc->shards = fed_pool_workers(s->pool) > 0 ? fed_pool_workers(s->pool) : 1;
    nc->store = s->store;
    nc->arena = s->arena;
    nc->allow = s->allow;
    nc->transfer.poll_ms = (uint64_t)c->poll_ms;
    nc->transfer.wire.max_frame = (size_t)c->max_frame;
    nc->transfer.wire.max_rx_streams = role == FED_NODE_CLIENT ? 2 : (uint32_t)c->max_clients;
    if (role == FED_NODE_CLIENT) {
        nc->data.train = s->train;
        nc->data.shard = s->idx;
        nc->data.shard_n = s->nidx;
        nc->data.val = s->val;
        nc->data.val_idx = s->vidx;
        nc->data.val_n = s->nvidx;
        nc->data.no_site_metrics = !c->site_metrics;
        nc->data.noise_std = s->noise_std;
        nc->data.local_test = s->local_test;
        nc->data.finetune_epochs = (uint32_t)c->finetune_epochs;
        nc->transfer.retry_ms = (uint64_t)c->retry_ms;
        nc->client.max_model_params = c->max_model_params;
        nc->client.max_model_flops = c->max_model_flops;
        if (opt_given(c, "model"))
            /* its own --model: a MODEL of another graph is declined at once */
            nc->client.own_model = c->graph ? c->graph : c->s.model;
        nc->client.classes = c->decl.in.classes; /* a MODEL of others is declined */
        fed_node_settings_apply_dp(&c->s, nc);
        stats_config(c, s, nc);
        /* its own --local-layers/--local-bn: a check of the aggregator's */
        if (!fed_node_layout_patterns_ok(c->s.local_layers)) {
            fed_cli_error("run: --local-layers '%s': comma-separated globs over tensor names "
                          "(e.g. fc3.*,conv1.bias), no spaces, at most 255 bytes",
                          c->s.local_layers);
            return 2;
        }
        snprintf(nc->local_layers, sizeof nc->local_layers, "%s", c->s.local_layers);
        nc->local_bn = c->s.local_bn;
        return aggregator_key(c, s, &nc->client.aggregator);
    }
    if (role == FED_NODE_AGGREGATOR)
        stats_config(c, s, nc);
    if ((rc = fill_training(c, s, nc)) >= 0)
        return rc;
    return role == FED_NODE_PEER ? fill_peer(c, s, nc) : fill_aggregator(c, nc);
}

/* --db-sync: a client's records are its own progress only (its delta went
 * out before it commits them, and the aggregator asks for a round again), so
 * it skips the fsync that on a shared disk held every round up by 2-5 ms;
 * an aggregator's or peer's checkpoint is the only copy of its model. */
static int store_sync(const run_cfg *c, fed_store_sync *out)
{
    if (!strcmp(c->db_sync, "full"))
        *out = FED_STORE_SYNC_FULL;
    else if (!strcmp(c->db_sync, "normal"))
        *out = FED_STORE_SYNC_NORMAL;
    else if (!strcmp(c->db_sync, "auto"))
        *out = role_of(c) == FED_NODE_CLIENT ? FED_STORE_SYNC_NORMAL : FED_STORE_SYNC_FULL;
    else {
        fed_cli_error("run: --db-sync '%s': full, normal or auto", c->db_sync);
        return 2;
    }
    return -1;
}

static int open_store(const run_cfg *c, run_state *s)
{
    fed_store_opts so;
    fed_err e;
    int rc;

    if (!c->db[0]) {
        fed_cli_error("run: --db FILE is required (the node's rounds and checkpoints)");
        return 2;
    }
    fed_store_opts_default(&so);
    so.keep_last = (uint32_t)c->keep_checkpoints;
    if ((rc = store_sync(c, &so.sync)) >= 0)
        return rc;
    if ((e = fed_store_open(c->db, &so, &s->store)) != FED_OK) {
        fed_cli_error("run: database %s: %s", c->db, fed_strerror(e));
        return 1;
    }
    return -1;
}

/* The daemon, with --http's server beside it while it runs. */
static fed_err run_daemon(const run_cfg *c, fed_node_daemon_cfg *dc, const fed_node_config *nc)
{
    fed_node_snap_board *board = NULL;
    fed_http *http = NULL;
    fed_http_cfg hc;
    fed_err e;

    if ((e = fed_node_daemon_signals()) != FED_OK)
        return e;
    if (c->http[0]) {
        memset(&hc, 0, sizeof hc);
        hc.addr = c->http;
        hc.db_path = c->db;
        if ((e = fed_node_snap_board_new(&board)) == FED_OK) {
            hc.board = board;
            e = fed_http_start(&hc, &http);
        }
        if (e != FED_OK) {
            fed_node_snap_board_free(board);
            return e;
        }
        dc->board = board;
    }
    e = fed_node_daemon_run(dc, nc);
    fed_http_stop(http);
    fed_node_snap_board_free(board);
    return e;
}

/* An aggregator's or peer's first model from --model FILE.onnx's weights:
 * the model built once here to lay them out as its flat buffer. */
static int onnx_init(const run_cfg *c, run_state *s, fed_node_config *nc)
{
    fed_model *m = NULL;
    fed_rng rng;
    char why[512] = "";
    fed_err e;

    fed_rng_seed(&rng, nc->seed);
    if ((e = fed_model_new(nc->graph ? nc->graph : nc->spec, nc->shape, s->be, NULL, 1, 1, &m)) ==
            FED_OK &&
        (e = fed_model_init(m, &rng)) == FED_OK &&
        (e = fed_onnx_apply_weights(c->onnx, m, why, sizeof why)) == FED_OK) {
        if (!(s->init_params = fed_malloc(fed_model_nparams(m) * sizeof(float))))
            e = FED_ERR_NOMEM;
        else if ((e = fed_model_get_params(m, s->init_params)) == FED_OK)
            nc->init_params = s->init_params;
    }
    fed_model_free(m);
    if (e != FED_OK) {
        fed_cli_error("run: --model %s: %s", c->s.model, why[0] ? why : fed_strerror(e));
        return 1;
    }
    fed_log(FED_LOG_INFO, "run: the model starts from the ONNX file's weights");
    return -1;
}

static int run_node(const run_cfg *c, fed_coll *coll, fed_coll *stage_coll)
{
    run_state s;
    fed_node_config nc;
    fed_node_daemon_cfg dc;
    fed_peer_id agg;
    fed_node_role role = role_of(c);
    int rc;
    int threads = c->threads ? c->threads : fed_cli_online_cores();
    fed_err e;

    memset(&s, 0, sizeof s);
    if (strcmp(c->role, "client") && strcmp(c->role, "aggregator") && strcmp(c->role, "peer")) {
        fed_cli_error("run: --role '%s': aggregator, client or peer", c->role);
        return 2;
    }
    if ((rc = check_site_eval(c)) >= 0)
        return rc;
    if (role == FED_NODE_CLIENT && !c->aggregator[0]) {
        fed_cli_error("run: a client needs --aggregator ADDRESS");
        return 2;
    }
    {
        const char *why = fed_node_settings_dp_misuse(&c->s, role);
        char msg[256];

        if (!why)
            why = fed_node_settings_local_misuse(&c->s, role);
        if (why) {
            fed_cli_error("run: %s", why);
            return 2;
        }
        if (c->given && (fed_node_settings_secagg_misuse(run_opts, NRUN_OPTS, c->given, role, msg,
                                                         sizeof msg) ||
                         fed_node_settings_given_misuse(run_opts, NRUN_OPTS, c->given, &c->s,
                                                        role, msg, sizeof msg))) {
            fed_cli_error("run: %s", msg);
            return 2;
        }
    }
    if (opt_given(c, "http") && !c->http[0]) {
        /* '' would read as "not given" and quietly serve nothing */
        fed_cli_error("run: --http '': expected http://HOST:PORT, HOST:PORT or PORT (--http "
                      "alone: %s); leave --http out for no HTTP", FED_HTTP_DEFAULT_ADDR);
        return 2;
    }
    if ((rc = check_port_file(c)) >= 0)
        return rc;
    if (c->http[0]) {
        struct sockaddr_storage sa;
        socklen_t salen;
        int loopback;

        if (fed_http_parse_addr(c->http, &sa, &salen, &loopback) != FED_OK) {
            fed_cli_error("run: --http '%s': expected http://HOST:PORT, HOST:PORT or PORT "
                          "(HOST an IPv4 address, localhost or [IPv6])", c->http);
            return 2;
        }
    }
    {
        fed_store_sync sync;

        char metric[FED_METRICS_NAME_MAX];
        uint32_t pat;

        if ((rc = store_sync(c, &sync)) >= 0 || /* before anything is loaded */
            (rc = parse_best(c, metric, &pat)) >= 0)
            return rc;
    }
    if ((rc = load_identity(c, &s)) >= 0 || (rc = load_allow(c, &s)) >= 0 ||
        /* a client's --aggregator-key, checked before the database is made */
        (role == FED_NODE_CLIENT && (rc = aggregator_key(c, &s, &agg)) >= 0) ||
        (role == FED_NODE_PEER && (rc = load_peers(c, &s)) >= 0) ||
        (rc = load_data(c, &s, role)) >= 0 || (rc = open_store(c, &s)) >= 0)
        goto out;
    if (fed_backend_cpu_new(1, &s.be) != FED_OK || fed_pool_new(threads, &s.pool) != FED_OK) {
        fed_cli_error("run: out of memory");
        rc = 1;
        goto out;
    }
    if ((rc = fill_node_config(c, &s, &nc)) >= 0 ||
        (c->onnx && role != FED_NODE_CLIENT && (rc = onnx_init(c, &s, &nc)) >= 0))
        goto out;
    if (c->stats_only && (role != FED_NODE_AGGREGATOR || !s.stats_cols)) {
        fed_cli_error("run: --stats-only is an aggregator's, with CSV --data, or images and "
                      "--standardize");
        rc = 2;
        goto out;
    }
    nc.coll = coll;
    nc.rank_batch = (uint32_t)c->rank_batch;
    nc.pipe_stages = (uint32_t)c->pipeline_stages;
    nc.stage_coll = stage_coll;
    if (c->micro_batches > 1) {
        nc.accumulate = (uint32_t)c->micro_batches;
        nc.gpipe = 1;
    }
    memset(&dc, 0, sizeof dc);
    dc.listen_url = role == FED_NODE_CLIENT ? NULL : c->listen;
    dc.peer_url = role == FED_NODE_CLIENT ? c->aggregator : NULL;
    dc.peers = s.peers;
    dc.recv_contexts = role == FED_NODE_CLIENT ? 1 : (uint32_t)c->max_clients;
    dc.allow_path = c->allow;
    dc.allow = s.allow;
    dc.port_file = c->port_file[0] ? c->port_file : NULL;
    dc.linger_ms = (uint64_t)c->linger_ms;
    dc.max_conns = c->max_connections ? (uint32_t)c->max_connections
                                      : (uint32_t)c->max_clients + 64;
    dc.conn_stall_ms = (uint32_t)c->conn_stall_ms;
    e = run_daemon(c, &dc, &nc);
    rc = e == FED_OK ? 0 : 1;
    if (e != FED_OK)
        fed_cli_error("run: %s", fed_strerror(e));
    else if (c->stats_only)
        rc = print_stats_table(c, &s);
out:
    run_state_free(&s);
    return rc;
}

/* A rank beyond 0 of a site under mpirun: the same data and shard as rank
 * 0 (no identity, no database, no network), training what rank 0 says. */
static int run_rank(const run_cfg *c, fed_coll *coll, fed_coll *stage_coll)
{
    run_state s;
    fed_node_site_rank_cfg rc;
    int threads = c->threads ? c->threads : fed_cli_online_cores(), r;
    char name[32];
    fed_err e;

    memset(&s, 0, sizeof s);
    /* a stop (mpirun forwards SIGTERM and SIGINT to every rank) is rank 0's
       to carry out: it finishes the round, commits, then tells this rank */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    snprintf(name, sizeof name, "rank%d", fed_coll_rank(coll));
    fed_log_stream_set_node(name);
    if ((r = load_data(c, &s, role_of(c))) >= 0)
        goto out;
    if (fed_backend_cpu_new(1, &s.be) != FED_OK || fed_pool_new(threads, &s.pool) != FED_OK) {
        fed_cli_error("run: out of memory");
        r = 1;
        goto out;
    }
    memset(&rc, 0, sizeof rc);
    rc.coll = coll;
    rc.timeout_ms = (uint32_t)c->mpi_timeout_ms;
    rc.be = s.be;
    rc.pool = s.pool;
    rc.shards = fed_pool_workers(s.pool) > 0 ? fed_pool_workers(s.pool) : 1;
    rc.accumulate = (uint32_t)(c->micro_batches > 1 ? c->micro_batches : c->s.accumulate);
    rc.gpipe = c->micro_batches > 1;
    rc.pipe_stages = (uint32_t)c->pipeline_stages;
    rc.stage_coll = stage_coll;
    rc.recompute = (uint32_t)c->s.recompute;
    if (fed_model_precision_parse(c->s.precision, &rc.precision) != FED_OK) {
        fed_cli_error("run: --precision: '%s' is not fp32 or bf16", c->s.precision);
        r = 2;
        goto out;
    }
    rc.train = s.train;
    rc.shard = s.idx;
    rc.shard_n = s.nidx;
    fed_log(FED_LOG_INFO, "site: rank %d of %d: %zu samples of shard %s, waiting for rank 0",
            fed_coll_rank(coll), fed_coll_size(coll), s.nidx, c->shard);
    e = fed_node_site_rank_run(&rc);
    r = e == FED_OK ? 0 : 1;
out:
    if (r > 0) /* rank 0 would wait for this rank forever: end the job */
        fed_coll_abort(coll, r);
    run_state_free(&s);
    return r;
}

/* --pipeline-stages and --micro-batches: what they do not go with, named
 * (>= 0: the exit status), or -1. */
static int pipe_misuse(const run_cfg *c)
{
    const char *what = NULL;

    if (c->micro_batches > 1 && c->s.accumulate > 1)
        what = "--accumulate (the same, in the plain order: give one of them)";
    else if (c->pipeline_stages <= 1)
        return -1;
    else if (role_of(c) != FED_NODE_CLIENT)
        what = "an aggregator or a peer (a client's site trains in stages)";
    else if (!fed_coll_mpi_launched())
        what = "one process: start the site as mpirun -np S (or S x D) fednode run";
    else if (c->s.dp_sgd)
        what = "--dp-sgd";
    else if (c->s.recompute > 1)
        what = "--recompute (a stage recomputes its forward already)";
    else if (strcmp(c->s.precision, "fp32"))
        what = "--precision bf16";
    else if (c->rank_batch)
        what = "--rank-batch";
    else
        return -1;
    fed_cli_error("run: --%s does not go with %s",
                  c->pipeline_stages > 1 ? "pipeline-stages" : "micro-batches", what);
    return 2;
}

/* A pipeline site's ranks as D replicas of S stages: the ranks a multiple
 * of S, and the collective of this rank's stage across the replicas. */
static int pipe_layout(const run_cfg *c, fed_coll *coll, fed_coll **stage_coll)
{
    int R = fed_coll_size(coll), S = c->pipeline_stages;
    fed_err e;

    if (R % S != 0) {
        fed_cli_error("run: --pipeline-stages %d under mpirun -np %d: the ranks must be a "
                      "multiple of the stages (S x D, D replicas)", S, R);
        return 2;
    }
    if (R / S > 1 &&
        (e = fed_coll_split(coll, fed_coll_rank(coll) % S, fed_coll_rank(coll) / S,
                            stage_coll)) != FED_OK) {
        fed_cli_error("run: MPI: the stage's replicas: %s", fed_strerror(e));
        return 1;
    }
    if (fed_coll_rank(coll) < S) /* replica 0's: what each holds */
        fed_log(FED_LOG_INFO, "site: rank %d of %d: stage %d of %d (%d replica%s), holding "
                "only its stage's parameters between rounds", fed_coll_rank(coll), R,
                fed_coll_rank(coll) % S, S, R / S, R / S == 1 ? "" : "s");
    return -1;
}

/* A node, or under mpirun a site of several processes: MPI started here
 * (after the re-exec, before any thread), rank 0 the node, the others
 * run_rank; rank 0 tells them to stop however the node ends. */
static int run_site(const run_cfg *c)
{
    fed_coll *coll = NULL, *stage_coll = NULL;
    int rc;
    fed_err e;

    if ((rc = pipe_misuse(c)) >= 0)
        return rc;
    if (!fed_coll_mpi_launched())
        return run_node(c, NULL, NULL);
    if (!fed_coll_mpi_built()) {
        fed_cli_error("run: started by mpirun, but this fednode was built without MPI (no "
                      "mpicc at build time: make deps, then make)");
        return 2;
    }
    if ((e = fed_coll_mpi_open(NULL, NULL, &coll)) != FED_OK) {
        fed_cli_error("run: MPI did not start: %s", fed_strerror(e));
        return 1;
    }
    fed_coll_set_timeout(coll, (uint32_t)c->mpi_timeout_ms);
    if (fed_coll_size(coll) > 1) {
        /* every rank has the same options: each refuses alike */
        if (role_of(c) == FED_NODE_AGGREGATOR) {
            fed_cli_error("run: an aggregator is one process: run it without mpirun -np");
            rc = 2;
            goto out;
        }
        if (c->s.dp_sgd) {
            fed_cli_error("run: --dp-sgd on a site of several processes is not supported yet");
            rc = 2;
            goto out;
        }
        if (c->pipeline_stages > 1 &&
            (rc = pipe_layout(c, coll, &stage_coll)) >= 0)
            goto out;
        if (fed_coll_rank(coll) != 0) {
            rc = run_rank(c, coll, stage_coll);
            goto out;
        }
        fed_log(FED_LOG_INFO, "site: rank 0 of %d: this process is the node; the other "
                "ranks train each round with it", fed_coll_size(coll));
    }
    rc = run_node(c, coll, stage_coll);
    if (fed_coll_size(coll) > 1 && fed_node_site_stop(coll) != FED_OK && rc == 0)
        rc = 1;
out:
    fed_coll_free(stage_coll);
    fed_coll_free(coll);
    return rc;
}

/* The declared input (model/input.h) from what --model FILE (at path)
 * declares and --input-shape, --features, --classes into c->decl. */
static int declare_input(const char *cmd, run_cfg *c, const char *path)
{
    fed_model_decl_src src;
    const char *base = strrchr(path, '/');
    char why[400];

    memset(&src, 0, sizeof src);
    if (c->file_in.c) {
        src.file = base ? base + 1 : path;
        src.file_in = c->file_in;
    }
    src.shape = c->input_shape;
    src.features = c->features;
    src.classes = c->classes;
    if (fed_model_input_declare(&src, &c->decl, why, sizeof why) == FED_OK)
        return -1;
    fed_cli_error("%s: %s", cmd, why);
    return 2;
}

/* role: the command's own (aggregate), which --role may only repeat: its
 * table says so in --help, and another --role is a contradiction. */
static int run_with_role(const char *cmd, const char *role, int argc, char **argv)
{
    run_cfg cfg;
    fed_opt opts[NRUN_OPTS];
    unsigned char given[NRUN_OPTS];
    char model_path[FED_MODEL_SPEC_MAX];
    int rc;

    fed_cli_maybe_reexec(cmd, argc, argv);
    memcpy(opts, run_opts, sizeof opts);
    if (role) {
        assert(!strcmp(opts[0].name, "role"));
        opts[0].def = role;
        opts[0].help = "this command's role (the default); another is an error";
    }
    rc = fed_cli_load_options_given(cmd, "[--config FILE] [--OPTION VALUE ...]", opts,
                                    NRUN_OPTS, &cfg, argc, argv, given);
    if (rc >= 0)
        return rc;
    if (role && strcmp(cfg.role, role) != 0) {
        fed_cli_error("%s: --role %s contradicts the command: fednode %s is fednode run --role "
                      "%s (for another role use fednode run)", cmd, cfg.role, cmd, role);
        return 2;
    }
    cfg.given = given;
    cfg.graph = NULL;
    cfg.onnx = NULL;
    snprintf(model_path, sizeof model_path, "%s", cfg.s.model); /* before it becomes a spec */
    if ((rc = fed_cli_log_apply(cmd, &cfg.log)) < 0 &&
        (rc = fed_cli_model_file(cmd, cfg.s.model, sizeof cfg.s.model, &cfg.graph, &cfg.onnx,
                                 &cfg.file_in)) < 0 &&
        (rc = declare_input(cmd, &cfg, model_path)) < 0)
        rc = run_site(&cfg);
    fed_free(cfg.graph);
    fed_onnx_free(cfg.onnx);
    return rc;
}

int fed_cli_run(int argc, char **argv) { return run_with_role("run", NULL, argc, argv); }

int fed_cli_run_settings(int argc, char **argv, fed_node_settings *out)
{
    run_cfg cfg;
    fed_opt_error e;
    char **pos = fed_calloc((size_t)argc + 1, sizeof *pos);
    int npos = 0;
    fed_err err;

    if (!pos)
        return FED_ERR_NOMEM;
    memset(&cfg, 0, sizeof cfg);
    err = fed_opt_load(run_opts, NRUN_OPTS, &cfg, argc, argv, pos, &npos, &e);
    fed_free(pos);
    if (err == FED_OK)
        *out = cfg.s;
    return err;
}

int fed_cli_aggregate(int argc, char **argv)
{
    return run_with_role("aggregate", "aggregator", argc, argv);
}
