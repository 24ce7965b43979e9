/* cli_train.c - `fednode train` and `fednode eval`: local training and
 * evaluation of a model on a dataset. Owns these commands' option tables,
 * their printing (one line per epoch on stdout, a progress bar on stderr
 * when it is a terminal) and their timing; the work itself is model/train.c.
 * Never computes anything beyond formatting figures. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/opt.h"
#include "core/pool.h"
#include "core/rng.h"
#include "crypto/keystream.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/io.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/safetensors.h"
#include "model/train.h"
#include "model/pipeline.h"
#include "mpi/coll.h"
#include "onnx/onnx.h"
#include "privacy/rdp.h"
#include "app/cli.h"
#include "app/train_record.h"

#define MAX_THREADS FED_CLI_MAX_THREADS

/* ------------------------------------------------------------ options -- */

typedef struct train_cfg {
    char data[512];
    char model[FED_MODEL_SPEC_MAX];
    char input_scale[16];
    char *graph; /* --model FILE of a graph longer than its id: the whole (not an option) */
    fed_onnx *onnx; /* --model FILE.onnx: its weights, the initial ones (not an option) */
    fed_model_shape decl; /* --model FILE: the input and classes it declares (not an option) */
    char model_given[FED_MODEL_SPEC_MAX]; /* --model as given (a file's path: errors name it;
                                             model becomes its graph's id) */
    int epochs;
    int batch;
    int accumulate;
    int recompute;
    char precision[8];
    int pipeline_stages;
    int micro_batches;
    int mpi_timeout_ms;
    double lr;
    char optimizer[16];
    double momentum;
    double weight_decay;
    int nesterov;
    char schedule[64];
    int lr_warmup;
    int threads;
    uint64_t seed;
    char partition[64];
    char shard[32];
    uint64_t partition_seed;
    char out[512];
    char device[32];
    char db[512];
    int resume;
    int eval;
    double start_at;
    int warm_up;
    int dp_sgd;
    double dp_sgd_clip;
    double dp_sgd_noise;
    double dp_delta;
    fed_data_flags dflags;
    char augment[64];
} train_cfg;

#define T(field, name, type, def, min, max, help)                              \
    FED_OPT_DEF(train_cfg, field, name, type, def, min, max, help)
static const fed_opt train_opts[] = {
    T(data, "data", FED_OPT_STR, "fashion-mnist", 0, 0,
      "fashion-mnist, a directory of IDX files (train-/t10k-), a folder of images (one "
      "subfolder per class, PNG or JPEG), or a CSV file"),
    T(model, "model", FED_OPT_STR, "mlp:256,128", 0, 0,
      "logreg, mlp:W1,W2,..., cnn, or a layer file (docs/model-formats.md)"),
    T(input_scale, "input-scale", FED_OPT_STR, "centred", 0, 0,
      "how the model maps image bytes: centred (b / 127.5 - 1) or unit (b / 255, "
      "torchvision's ToTensor); kept with --db, said by the export"),
    T(epochs, "epochs", FED_OPT_INT, "10", 1, 100000, "passes over the (shard of the) data"),
    T(batch, "batch", FED_OPT_INT, "64", 1, 65536, "samples per step"),
    T(accumulate, "accumulate", FED_OPT_INT, "1", 1, 65536,
      "run each step's --batch as N micro-batches of ceil(batch / N) samples, their "
      "gradients summed before the step (activation memory of a micro-batch; not with "
      "--dp-sgd)"),
    T(recompute, "recompute", FED_OPT_INT, "1", 1, 4096,
      "keep the output of every N-th layer and compute the others again in the backward "
      "(gradients bit for bit, less activation memory, about a forward more; 1: keep all; "
      "not with --dp-sgd)"),
    T(pipeline_stages, "pipeline-stages", FED_OPT_INT, "1", 1, FED_PIPE_MAX_STAGES,
      "under mpirun -np S x D: the model's layers in S pipeline stages, one a rank (balanced "
      "by FLOPs, cut between blocks: fednode model FILE --plan --pipeline-stages S), D "
      "data-parallel replicas of the pipeline; GPipe's schedule over --micro-batches; 1 "
      "alone: the one-process reference of the same arithmetic"),
    T(micro_batches, "micro-batches", FED_OPT_INT, "1", 1, 65536,
      "with --pipeline-stages: each step's --batch as M micro-batches, all forwards then all "
      "backwards from the last, gradients summed in that order (--accumulate's, in GPipe's "
      "order)"),
    T(mpi_timeout_ms, "mpi-timeout-ms", FED_OPT_INT, "60000", 100, 3600000,
      "under mpirun: the deadline of each exchange between ranks (a stage's activations, "
      "a sum); past it the job ends"),
    T(precision, "precision", FED_OPT_STR, "fp32", 0, 0,
      "fp32, or bf16: every linear and conv GEMM on bfloat16 operands summed in fp32 (AMX or "
      "AVX512-BF16 CPUs); weights, gradients, optimizer and the saved model stay fp32; not "
      "with --dp-sgd"),
    T(lr, "lr", FED_OPT_DOUBLE, "0", 0, 100,
      "learning rate (" FED_OPTIM_LR_HELP ")"),
    T(optimizer, "optimizer", FED_OPT_STR, "adam", 0, 0, "adam or sgd"),
    T(momentum, "momentum", FED_OPT_DOUBLE, "0.9", 0, 0.999, "SGD momentum"),
    T(weight_decay, "weight-decay", FED_OPT_DOUBLE, "0", 0, 1,
      "L2 weight decay (SGD) or decoupled decay (Adam: AdamW)"),
    T(nesterov, "nesterov", FED_OPT_BOOL, "false", 0, 0, "Nesterov momentum (SGD)"),
    T(schedule, "schedule", FED_OPT_STR, "cosine", 0, 0,
      "learning-rate schedule: const, step:EPOCHS,GAMMA (times GAMMA every EPOCHS "
      "epochs) or cosine (down to 0 over the run)"),
    T(lr_warmup, "lr-warmup", FED_OPT_INT, "0", 0, 100000,
      "epochs of linear warm-up (up to --lr) before --schedule begins"),
    T(threads, "threads", FED_OPT_INT, "0", 0, MAX_THREADS,
      "threads splitting each batch (CPU); 0 = every online core"),
    T(seed, "seed", FED_OPT_U64, "1", 0, 0, "seed of initialization and shuffling"),
    T(partition, "partition", FED_OPT_STR, "iid", 0, 0,
      "how the data is split among --shard's K nodes: iid, dirichlet:ALPHA, shards:N, "
      "niid-dirichlet:BETA, labels:K, quantity:BETA, noise:SIGMA (iid; part I's inputs get "
      "Gaussian noise of std SIGMA * I / (K - 1))"),
    T(shard, "shard", FED_OPT_STR, "0/1", 0, 0, "I/K: train on part I (0-based) of K"),
    T(partition_seed, "partition-seed", FED_OPT_U64, "1", 0, 0,
      "seed of the partition (the same on every node)"),
    T(out, "out", FED_OPT_STR, "", 0, 0, "write the trained model to this file"),
    T(device, "device", FED_OPT_STR, "auto", 0, 0,
      "auto, cpu, cuda or cuda:N; auto takes the GPU when it runs every layer, else the CPU, "
      "warning which layer it lacks"),
    T(db, "db", FED_OPT_STR, "", 0, 0,
      "node database: each epoch recorded as a round and a checkpoint"),
    T(resume, "resume", FED_OPT_BOOL, "false", 0, 0,
      "go on from --db's newest valid checkpoint (--epochs is the total)"),
    T(eval, "eval", FED_OPT_BOOL, "true", 0, 0,
      "evaluate on the test split after each epoch (--no-eval: neither load nor evaluate it)"),
    T(start_at, "start-at", FED_OPT_DOUBLE, "0", 0, 1e11,
      "Unix time (seconds) to begin the first epoch at, once loaded, so that runs started "
      "apart train from one instant; the epoch's line then says how late it began "
      "(0: at once)"),
    T(warm_up, "warm-up", FED_OPT_BOOL, "false", 0, 0,
      "a timing aid: one untimed epoch on the shard before the first (and before "
      "--start-at's wait), so that the epochs timed run warm, as a daemon's later rounds do; "
      "it moves the model, so not with --db, --out or --dp-sgd"),
    T(dp_sgd, "dp-sgd", FED_OPT_BOOL, "false", 0, 0,
      "DP-SGD: Poisson-sampled batches (rate batch / samples), each sample's gradient "
      "clipped, Gaussian noise from the CSPRNG; epsilon printed after each epoch (CPU only)"),
    T(dp_sgd_clip, "dp-sgd-clip", FED_OPT_DOUBLE, "1", 1e-6, 1e6,
      "DP-SGD: the L2 bound C of each sample's gradient"),
    T(dp_sgd_noise, "dp-sgd-noise", FED_OPT_DOUBLE, "1", 0, 1e6,
      "DP-SGD: the noise multiplier z (noise standard deviation z C on the summed gradient)"),
    T(dp_delta, "dp-delta", FED_OPT_DOUBLE, "1e-5", 0, 0,
      "DP-SGD: the delta of the (epsilon, delta) printed, in (0, 1)"),
    FED_DATA_FLAG_OPTS(train_cfg, dflags),
    T(augment, "augment", FED_OPT_STR, "none", 0, 0,
      "image training batches: none, crop:P (shifted up to P pixels, zero-padded), flip "
      "(left-right, half the time) or crop:P,flip; seeded by --seed"),
};
#undef T
#define NTRAIN_OPTS (sizeof train_opts / sizeof train_opts[0])

typedef struct eval_cfg {
    char model[512];
    char data[512];
    char split[16];
    int batch;
    int threads;
    char device[32];
    fed_data_flags dflags;
} eval_cfg;

#define E(field, name, type, def, min, max, help)                              \
    FED_OPT_DEF(eval_cfg, field, name, type, def, min, max, help)
static const fed_opt eval_opts[] = {
    E(model, "model", FED_OPT_STR, "", 0, 0,
      "model file written by fednode train --out, or an export (FILE.safetensors, fednode "
      "export), whose shared statistics then standardize a CSV as in training; images are "
      "mapped by the model's own --input-scale"),
    E(data, "data", FED_OPT_STR, "fashion-mnist", 0, 0,
      "fashion-mnist, a directory of IDX files, a folder of images, or a CSV file"),
    E(split, "split", FED_OPT_STR, "test", 0, 0, "test or train"),
    E(batch, "batch", FED_OPT_INT, "256", 1, 65536, "samples per forward pass"),
    E(threads, "threads", FED_OPT_INT, "0", 0, MAX_THREADS, "threads; 0 = every online core"),
    E(device, "device", FED_OPT_STR, "auto", 0, 0, "auto, cpu, cuda or cuda:N"),
    FED_DATA_FLAG_OPTS(eval_cfg, dflags),
};
#undef E
#define NEVAL_OPTS (sizeof eval_opts / sizeof eval_opts[0])

/* ---------------------------------------------------------- helpers -- */

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double wall_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sleeps until the Unix time at (seconds); at once if that has passed. */
static void sleep_until(double at)
{
    struct timespec ts;

    ts.tv_sec = (time_t)at;
    ts.tv_nsec = (long)((at - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_nsec = 999999999L;
    while (clock_nanosleep(CLOCK_REALTIME, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static uint64_t wall_ms(void) { return (uint64_t)(wall_s() * 1000.0); }

typedef struct progress {
    int epoch, epochs;
    int last_pct;
} progress;

static void progress_bar(void *ctx, long done, long total)
{
    progress *p = ctx;
    int pct = total > 0 ? (int)(100 * done / total) : 100, bars = pct / 4;
    char bar[26];

    if (pct == p->last_pct)
        return;
    p->last_pct = pct;
    memset(bar, '#', (size_t)bars);
    memset(bar + bars, '.', (size_t)(25 - bars));
    bar[25] = '\0';
    fprintf(stderr, "\r  epoch %d/%d [%s] %3d%%", p->epoch, p->epochs, bar, pct);
    fflush(stderr);
}

static void progress_clear(void)
{
    fputs("\r\033[K", stderr);
    fflush(stderr);
}

/* ------------------------------------------------------------- train -- */

typedef struct train_world {
    fed_backend *be;
    fed_pool *pool;
    fed_dataset *train, *test;
    uint32_t *idx;
    size_t nidx;
    fed_model *m;
    fed_optim *o;
    fed_trainer *t;
    fed_store *st;    /* --db, or NULL */
    int first_epoch;  /* 1, or the one after --resume's checkpoint */
    fed_crypto_keystream csprng; /* --dp-sgd's noise and sampling */
    fed_dp_account *acct; /* --dp-sgd with --db: the privacy spent, kept there */
    long dp_steps_done;   /* DP-SGD steps charged to acct so far in this run */
    /* --pipeline-stages S under mpirun -np S x D: this rank's stage of its
       replica (rank = replica * S + stage), the ranks, and the stage's
       replicas (D > 1) */
    fed_coll *coll, *stage_coll;
    int S, D, stage, replica;
    fed_pipe_stage split[FED_PIPE_MAX_STAGES];
    double pipe_wait_s;  /* in the pipe's sends and receives (waiting, moving) */
    uint64_t pipe_bytes; /* sent to the other stages */
} train_world;

static void train_world_fini(train_world *w)
{
    fed_coll_free(w->stage_coll); /* before the world's, which finalizes MPI */
    fed_coll_free(w->coll);
    fed_crypto_keystream_wipe(&w->csprng);
    fed_dp_account_free(w->acct);
    fed_store_close(w->st);
    fed_trainer_free(w->t);
    fed_optim_free(w->o);
    fed_model_free(w->m);
    fed_free(w->idx);
    fed_data_free(w->test);
    fed_data_free(w->train);
    fed_pool_free(w->pool);
    fed_backend_free(w->be);
}

static int fail(const char *what, fed_err err)
{
    fed_cli_error("train: %s: %s", what, fed_strerror(err));
    return 1;
}

static void sysrandom(void *ctx, void *buf, size_t len)
{
    (void)ctx;
    randombytes_buf(buf, len);
}

/* Checks what can be checked before loading anything. */
static int check_train_cfg(const train_cfg *c, fed_optim_cfg *oc, int *shard, int *k)
{
    fed_optim_kind kind;
    fed_data_scheme scheme;
    fed_optim_cfg probe;
    fed_data_aug aug;

    if (fed_data_parse_augment(c->augment, &aug) != FED_OK)
        return 2; /* the reader said what was wrong */
    if (fed_optim_kind_parse(c->optimizer, &kind) != FED_OK) {
        fed_cli_error("train: --optimizer: '%s' is not sgd or adam", c->optimizer);
        return 2;
    }
    fed_optim_cfg_default(oc, kind);
    oc->lr = fed_optim_resolve_lr(kind, c->lr);
    if (kind == FED_OPTIM_SGD)
        oc->momentum = (float)c->momentum;
    oc->weight_decay = (float)c->weight_decay;
    oc->nesterov = c->nesterov;
    if (c->nesterov && (kind != FED_OPTIM_SGD || c->momentum <= 0)) {
        fed_cli_error("train: --nesterov needs --optimizer sgd and --momentum > 0");
        return 2;
    }
    probe = *oc;
    if (fed_optim_sched_of_run(c->schedule, c->epochs, 0, 1, &probe) != FED_OK) {
        fed_cli_error("train: --schedule: '%s' is not const, step:EPOCHS,GAMMA or cosine",
                      c->schedule);
        return 2;
    }
    if (fed_optim_sched_of_run(c->schedule, c->epochs, c->lr_warmup, 1, &probe) != FED_OK) {
        fed_cli_error("train: --lr-warmup %d leaves no epoch of --schedule %s in %d epochs",
                      c->lr_warmup, c->schedule, c->epochs);
        return 2;
    }
    if (c->resume && !c->db[0]) {
        fed_cli_error("train: --resume needs --db FILE");
        return 2;
    }
    if (c->accumulate > c->batch || (c->accumulate > 1 && c->dp_sgd)) {
        fed_cli_error("train: --accumulate %d: %s", c->accumulate,
                      c->dp_sgd ? "DP-SGD sums its Poisson draw in pieces of its own: drop "
                                  "--accumulate" : "more micro-batches than --batch's samples");
        return 2;
    }
    if (c->recompute > 1 && c->dp_sgd) {
        fed_cli_error("train: --recompute %d: DP-SGD's per-sample norms read every layer's "
                      "output gradient: drop --recompute", c->recompute);
        return 2;
    }
    if (c->dp_sgd && fed_rdp_check_delta(c->dp_delta) != FED_OK) {
        fed_cli_error("train: --dp-delta %g: delta must lie strictly between 0 and 1",
                      c->dp_delta);
        return 2;
    }
    if (c->warm_up && (c->db[0] || c->out[0] || c->dp_sgd)) {
        fed_cli_error("train: --warm-up trains an extra epoch, for timing only: it cannot go "
                      "with %s", c->db[0] ? "--db" : c->out[0] ? "--out" : "--dp-sgd");
        return 2;
    }
    if (!fed_cli_parse_shard(c->shard, shard, k)) {
        fed_cli_error("train: --shard: '%s' is not I/K with 0 <= I < K", c->shard);
        return 2;
    }
    if (fed_data_parse_scheme(c->partition, &scheme) != FED_OK) {
        fed_cli_error("train: --partition: '%s' is not iid, dirichlet:ALPHA, shards:N, "
                      "niid-dirichlet:BETA, labels:K, quantity:BETA or noise:SIGMA", c->partition);
        return 2;
    }
    return 0;
}

static void print_header(const train_cfg *c, const train_world *w, const fed_optim_cfg *oc,
                         int threads)
{
    printf("# fednode train: %s on %s (%zu training samples", c->model, c->data, w->nidx);
    if (w->test)
        printf(", %zu test", w->test->n);
    printf("), %d epochs, batch %d, %s lr %g", c->epochs, c->batch, c->optimizer, oc->lr);
    if (c->accumulate > 1)
        printf(" (accumulated over %d micro-batches of up to %d)", c->accumulate,
               fed_trainer_micro_batch(c->batch, c->accumulate));
    if (c->micro_batches > 1 || w->S > 1)
        printf(" (GPipe: %d micro-batch%s of up to %d, %d stage%s x %d replica%s)",
               c->micro_batches, c->micro_batches == 1 ? "" : "es",
               fed_trainer_micro_batch(c->batch, c->micro_batches), w->S, w->S == 1 ? "" : "s",
               w->D, w->D == 1 ? "" : "s");
    if (c->recompute > 1)
        printf(" recompute %d", c->recompute);
    if (strcmp(c->precision, "fp32"))
        printf(" precision %s", c->precision);
    if (oc->kind == FED_OPTIM_SGD)
        printf(" momentum %g%s", oc->momentum, oc->nesterov ? " nesterov" : "");
    printf(" weight-decay %g, schedule %s", oc->weight_decay, c->schedule);
    if (c->lr_warmup)
        printf(" after %d warm-up epoch%s", c->lr_warmup, c->lr_warmup == 1 ? "" : "s");
    printf(", seed %llu\n", (unsigned long long)c->seed);
    printf("# device %s, %d thread%s\n", w->be->device, threads, threads == 1 ? "" : "s");
    if (c->dp_sgd)
        printf("# DP-SGD: clip %g, noise multiplier %g, Poisson sampling at q = %g, %ld steps "
               "per epoch, delta %g; noise and sampling from the CSPRNG (ChaCha20 keyed by "
               "libsodium)\n",
               c->dp_sgd_clip, c->dp_sgd_noise, fed_trainer_dp_rate(w->t, w->nidx),
               fed_train_batches(w->nidx, c->batch), c->dp_delta);
    fflush(stdout);
}

/* --dp-sgd: the epsilon spent so far (RDP accountant, default orders); with
 * --db, what the database holds with this epoch's steps charged. */
static void print_epsilon(const train_cfg *c, const train_world *w)
{
    double eps = INFINITY, order = NAN;

    if (!c->dp_sgd)
        return;
    if (w->acct)
        eps = fed_dp_account_preview(w->acct, fed_trainer_dp_rate(w->t, w->nidx),
                                     c->dp_sgd_noise,
                                     (uint64_t)(fed_trainer_dp_steps(w->t) - w->dp_steps_done));
    else if (fed_rdp_sgm_epsilon(fed_trainer_dp_rate(w->t, w->nidx), c->dp_sgd_noise,
                            (uint64_t)fed_trainer_dp_steps(w->t), c->dp_delta, NULL, 0, &eps,
                            &order) != FED_OK)
        eps = INFINITY;
    printf("  epsilon %.4g", eps);
}

/* --db: the epoch's round row and checkpoint, one transaction. */
static int record_epoch(const train_cfg *c, train_world *w, const fed_rng *shuffle, int e,
                        uint64_t start_ms, float lr, const fed_step_stats *tr,
                        const fed_step_stats *te)
{
    fed_node_record_round r = {(uint64_t)e, start_ms, wall_ms(),
                               tr->loss_sum / (double)tr->samples,
                               w->test ? (double)te->correct / (double)te->samples : NAN,
                               (uint64_t)tr->samples, lr, NULL, 0, 0, 0};
    fed_err err;

    if (!w->st)
        return 0;
    if (w->acct) {
        r.dp = w->acct;
        r.dp_q = fed_trainer_dp_rate(w->t, w->nidx);
        r.dp_sigma = c->dp_sgd_noise;
        r.dp_steps = (uint64_t)(fed_trainer_dp_steps(w->t) - w->dp_steps_done);
    }
    if ((err = fed_node_record_epoch(w->st, w->m, w->o, shuffle, w->nidx, &r)) != FED_OK)
        return fail(c->db, err); /* the run stops: the account is not used again */
    w->dp_steps_done = fed_trainer_dp_steps(w->t);
    return 0;
}

static int run_epochs(const train_cfg *c, train_world *w, fed_rng *shuffle)
{
    progress bar = {0, c->epochs, -1};
    fed_err err;

    if (c->warm_up) { /* every page and cache touched before the clock starts */
        fed_step_stats ws = {0};
        fed_rng wr = *shuffle; /* the timed epochs shuffle as they would without it */
        double t0 = now_s(), secs;

        if ((err = fed_trainer_epoch(w->t, w->idx, w->nidx, &wr, &ws)) != FED_OK)
            return fail("warm-up epoch", err);
        secs = now_s() - t0;
        printf("# warm-up epoch  samples/s %.0f", secs > 0 ? (double)ws.samples / secs : 0.0);
        if (c->start_at > 0)
            printf("  ready %+.4f", wall_s() - c->start_at);
        printf("\n");
        fflush(stdout);
    }
    if (isatty(2))
        fed_trainer_set_progress(w->t, progress_bar, &bar);
    for (int e = w->first_epoch; e <= c->epochs; e++) {
        fed_step_stats tr = {0}, te = {0};
        int first = e == w->first_epoch && c->start_at > 0;
        uint64_t start_ms;
        double t0, secs, late = 0;
        float lr = fed_optim_lr(w->o); /* the epoch's first step's */

        bar.epoch = e;
        bar.last_pct = -1;
        if (first) {
            sleep_until(c->start_at);
            late = wall_s() - c->start_at;
        }
        start_ms = wall_ms();
        t0 = now_s();
        err = fed_trainer_epoch(w->t, w->idx, w->nidx, shuffle, &tr);
        secs = now_s() - t0;
        if (isatty(2))
            progress_clear();
        if (err != FED_OK)
            return fail("training", err);
        if (w->test && (err = w->S > 1 ? fed_trainer_pipe_evaluate(w->t, w->test, &te)
                                       : fed_train_evaluate_all(w->m, w->test, &te)) != FED_OK)
            return fail("evaluating", err);
        if (w->coll && fed_coll_rank(w->coll) != 0)
            continue; /* rank 0 reports */
        printf("epoch %3d/%d  loss %.4f", e, c->epochs, tr.loss_sum / (double)tr.samples);
        if (!fed_model_regression(w->m)) /* mse has no accuracy: its loss is the MSE */
            printf("  train_acc %.4f", (double)tr.correct / (double)tr.samples);
        if (w->test)
            printf("  test_loss %.4f", te.loss_sum / (double)te.samples);
        if (w->test && !fed_model_regression(w->m))
            printf("  test_acc %.4f", (double)te.correct / (double)te.samples);
        print_epsilon(c, w);
        printf("  samples/s %.0f", secs > 0 ? (double)tr.samples / secs : 0.0);
        if (first)
            printf("  start %+.4f", late);
        printf("\n");
        fflush(stdout);
        if (record_epoch(c, w, shuffle, e, start_ms, lr, &tr, &te) != 0)
            return 1;
    }
    return 0;
}

/* --db: open it; one that already has rounds is only continued (--resume). */
static int open_db(const train_cfg *c, train_world *w)
{
    uint64_t last = 0;
    fed_err err;

    if (!c->db[0])
        return 0;
    if ((err = fed_node_record_open(c->db, &w->st)) != FED_OK ||
        (err = fed_node_record_last_round(w->st, &last)) != FED_OK)
        return fail(c->db, err);
    if (last > 0 && !c->resume) {
        fed_cli_error("train: %s already holds %llu rounds: add --resume to go on from them, "
                      "or give another --db", c->db, (unsigned long long)last);
        return 2;
    }
    if (!c->dp_sgd)
        return 0;
    if ((err = fed_dp_account_new(c->dp_delta, &w->acct)) != FED_OK ||
        (err = fed_dp_account_load(w->acct, w->st)) != FED_OK)
        return fail(c->db, err);
    if (fed_dp_account_charges(w->acct))
        printf("# %s: epsilon %.4g spent already (delta %g, %llu releases); this run adds to "
               "it\n", c->db, fed_dp_account_epsilon(w->acct), c->dp_delta,
               (unsigned long long)fed_dp_account_charges(w->acct));
    return 0;
}

/* --resume: model, optimizer and shuffle state from the newest valid
 * checkpoint; the run goes on from the epoch after it. */
static int resume(const train_cfg *c, train_world *w, fed_rng *shuffle)
{
    fed_node_record_found f;
    fed_model_shape in = fed_model_input(w->m);
    fed_err err;

    w->first_epoch = 1;
    if (!c->resume)
        return 0;
    err = fed_node_record_resume(w->st, w->m, w->o, shuffle, &f);
    if (err == FED_ERR_NOTFOUND && f.faults.total == 0) {
        printf("# %s holds no checkpoint: starting at epoch 1\n", c->db);
        return 0;
    }
    if (err == FED_ERR_SPEC || err == FED_ERR_SHAPE) {
        fed_cli_error("train: --resume: %s holds %s on %dx%dx%d/%d (checkpoint %llu), this run "
                      "asks for %s on %dx%dx%d/%d with --optimizer %s (%s)",
                      c->db, f.spec, f.shape.c, f.shape.h, f.shape.w, f.shape.classes,
                      (unsigned long long)f.ckpt_id, fed_model_spec(w->m), in.c, in.h, in.w,
                      in.classes, c->optimizer, fed_strerror(err));
        return 1;
    }
    if (err != FED_OK)
        return fail(c->db, err);
    if (f.samples != w->nidx)
        fed_log(FED_LOG_WARN, "%s trained on %llu samples per epoch, this run has %zu",
                c->db, (unsigned long long)f.samples, w->nidx);
    w->first_epoch = (int)f.epochs_done + 1;
    printf("# resumed from %s: checkpoint %llu, %llu epochs done", c->db,
           (unsigned long long)f.ckpt_id, (unsigned long long)f.epochs_done);
    if (f.faults.total)
        printf(" (%zu newer checkpoints faulty, skipped)", f.faults.total);
    printf("\n");
    if (f.epochs_done >= (uint64_t)c->epochs)
        printf("# --epochs %d already done: nothing to train\n", c->epochs);
    return 0;
}

/* ---- --pipeline-stages: a model in stages over MPI ranks ---- */

/* The pipe of fed_trainer_new_stage: stage peer of this rank's replica. */
enum { PIPE_TAG = 1, PIPE_TAG_PARAMS = 2 };

static fed_err pipe_send(void *ctx, int peer, const float *buf, size_t n)
{
    train_world *w = ctx;
    double t0 = now_s();
    fed_err e = fed_coll_send(w->coll, w->replica * w->S + peer, PIPE_TAG, buf, n);

    w->pipe_wait_s += now_s() - t0;
    w->pipe_bytes += n * sizeof *buf;
    return e;
}

static fed_err pipe_recv(void *ctx, int peer, float *buf, size_t n)
{
    train_world *w = ctx;
    double t0 = now_s();
    fed_err e = fed_coll_recv(w->coll, w->replica * w->S + peer, PIPE_TAG, buf, n);

    w->pipe_wait_s += now_s() - t0;
    return e;
}

/* A stage's gradient summed over its D replicas, in replica order. */
static fed_err pipe_reduce(void *ctx, float *buf, size_t n)
{
    return fed_coll_allreduce_sum(ctx, buf, n);
}

/* What a pipeline does not take, named; 0 when none. */
static int pipe_refusals(const train_cfg *c)
{
    const char *what = c->dp_sgd ? "--dp-sgd (per-sample norms need every layer at once)"
                     : c->recompute > 1 ? "--recompute (a stage recomputes its forward already)"
                     : strcmp(c->precision, "fp32") ? "--precision bf16 (not measured against "
                                                      "the fp32 reference yet)"
                     : c->accumulate > 1 ? "--accumulate (give --micro-batches)"
                     : c->db[0] ? "--db (a checkpoint of one stage is not the model)"
                     : c->onnx ? "an .onnx --model (its weights load into a whole model)"
                     : strcmp(c->augment, "none") && c->augment[0] ? "--augment"
                     : NULL;

    if (!what)
        return 0;
    fed_cli_error("train: --pipeline-stages %d%s does not go with %s", c->pipeline_stages,
                  fed_coll_mpi_launched() ? " under mpirun" : "", what);
    return 2;
}

/* Under mpirun: MPI opened, the ranks laid out as D replicas of S stages
 * (S = 1: D replicas of the whole model) and the split planned; nothing
 * for one process. */
static int pipe_open(const train_cfg *c, train_world *w, fed_model_shape in)
{
    const char *spec = c->graph ? c->graph : c->model;
    char why[320];
    int R;
    fed_err err;

    w->S = c->pipeline_stages;
    w->D = 1;
    if (w->S == 1 && !fed_coll_mpi_launched())
        return 0; /* one process */
    if (!fed_coll_mpi_launched() || !fed_coll_mpi_built()) {
        fed_cli_error("train: --pipeline-stages %d runs one stage a process: start it as "
                      "mpirun -np %d (or a multiple: replicas) fednode train ...%s", w->S, w->S,
                      fed_coll_mpi_built() ? "" : " with a fednode built with MPI (mpicc)");
        return 2;
    }
    if ((err = fed_coll_mpi_open(NULL, NULL, &w->coll)) != FED_OK)
        return fail("MPI", err);
    fed_coll_set_timeout(w->coll, (uint32_t)c->mpi_timeout_ms);
    R = fed_coll_size(w->coll);
    if (R % w->S != 0) {
        fed_cli_error("train: --pipeline-stages %d under mpirun -np %d: the ranks must be a "
                      "multiple of the stages (S x D, D replicas)", w->S, R);
        return 2;
    }
    w->D = R / w->S;
    w->stage = fed_coll_rank(w->coll) % w->S;
    w->replica = fed_coll_rank(w->coll) / w->S;
    if ((err = fed_pipe_plan(spec, in, w->S, w->split, why, sizeof why)) != FED_OK) {
        fed_cli_error("train: %s", why);
        return 2;
    }
    /* (S = 1: every rank a replica of the whole model, data parallel) */
    if (w->D > 1 && (err = fed_coll_split(w->coll, w->stage, w->replica, &w->stage_coll)) !=
                        FED_OK)
        return fail("MPI (the stage's replicas)", err);
    return 0;
}

/* Each rank's stage and the parameter bytes it holds, one line a rank. */
static void pipe_report(const train_world *w)
{
    const fed_pipe_stage *st = &w->split[w->stage];
    size_t np = fed_model_nparams(w->m), total = w->split[w->S - 1].p_hi;

    printf("# rank %d: stage %d of %d (replica %d of %d), layers %d-%d, %zu parameters, "
           "%zu parameter bytes (%.1f%% of the model's %zu)\n", fed_coll_rank(w->coll),
           w->stage, w->S, w->replica, w->D, st->lo, st->hi - 1, np, np * sizeof(float),
           100.0 * (double)np / (double)total, total * sizeof(float));
    fflush(stdout);
}

/* After training: how long this stage stood in the pipe (waiting for a
 * neighbour, or moving its bytes) of the time it trained, and the bytes it
 * sent a step: the measured bubble (bench/bench_pipeline.sh reads it). */
static void pipe_timing(const train_world *w, double train_s, long steps)
{
    if (w->S <= 1 || steps <= 0 || train_s <= 0)
        return;
    printf("# rank %d: stage %d: in the pipe %.3f s of %.3f s training (%.1f%%), %.0f bytes "
           "sent a step over %ld steps\n", fed_coll_rank(w->coll), w->stage, w->pipe_wait_s,
           train_s, 100.0 * w->pipe_wait_s / train_s, (double)w->pipe_bytes / (double)steps,
           steps);
    fflush(stdout);
}

/* --out under a pipeline: replica 0's stages send their parameters to rank
 * 0, which lays them end to end in a whole model and saves it. */
static int pipe_save(const train_cfg *c, train_world *w, fed_model_shape in)
{
    fed_model *whole = NULL;
    float *all = NULL;
    size_t total = w->split[w->S - 1].p_hi;
    fed_err err = FED_OK;
    int rc = 1;

    if (w->replica != 0)
        return 0;
    if (w->stage != 0) {
        float *mine = fed_malloc(fed_model_nparams(w->m) * sizeof *mine + 1);

        if (!mine)
            return fail("--out", FED_ERR_NOMEM);
        if ((err = fed_model_get_params(w->m, mine)) == FED_OK)
            err = fed_coll_send(w->coll, 0, PIPE_TAG_PARAMS, mine,
                                fed_model_nparams(w->m));
        fed_free(mine);
        return err == FED_OK ? 0 : fail("--out (to rank 0)", err);
    }
    if (!(all = fed_malloc(total * sizeof *all)) ||
        (err = fed_model_get_params(w->m, all)) != FED_OK) {
        rc = fail("--out", all ? err : FED_ERR_NOMEM);
        goto out;
    }
    for (int s = 1; s < w->S; s++)
        if ((err = fed_coll_recv(w->coll, s, PIPE_TAG_PARAMS, all + w->split[s].p_lo,
                                 w->split[s].p_hi - w->split[s].p_lo)) != FED_OK) {
            rc = fail("--out (from the stages)", err);
            goto out;
        }
    if ((err = fed_model_new(c->graph ? c->graph : c->model, in, w->be, NULL, 1, 1, &whole)) !=
            FED_OK ||
        (err = fed_model_set_params(whole, all)) != FED_OK ||
        (err = fed_model_save(whole, c->out)) != FED_OK) {
        rc = fail(c->out, err);
        goto out;
    }
    printf("# saved %s (%zu parameters, from %d stages)\n", c->out, total, w->S);
    rc = 0;
out:
    fed_model_free(whole);
    fed_free(all);
    return rc;
}

/* "5 features" for a row, "1x28x28" for an image */
static void shape_words(const fed_model_shape *s, char *buf, size_t cap)
{
    if (s->c == 1 && s->h == 1)
        snprintf(buf, cap, "%d features", s->w);
    else
        snprintf(buf, cap, "%dx%dx%d", s->c, s->h, s->w);
}

/* A model file's declared input or classes that the data replaces: train
 * builds the model over the data (fednode run refuses the mismatch), and
 * says so, since its export then fits the data, not the module the file
 * describes. */
static void say_declared(const train_cfg *c, fed_model_shape data)
{
    const fed_model_shape *d = &c->decl;
    int input = (d->c || d->h || d->w) && (d->c != data.c || d->h != data.h || d->w != data.w);
    int classes = d->classes && d->classes != data.classes;

    if (input) {
        char want[48], got[48];

        shape_words(d, want, sizeof want);
        shape_words(&data, got, sizeof got);
        fed_log(FED_LOG_WARN, "train: --model %s declares its input %s, --data %s gives %s: the "
                "model is built over the data's (its export fits the data, not the module the "
                "file describes)", c->model_given, want, c->data, got);
    }
    if (classes)
        fed_log(FED_LOG_WARN, "train: --model %s declares %d classes, --data %s has %d: the "
                "model is built with the data's", c->model_given, d->classes, c->data,
                data.classes);
}

static int train_main(const train_cfg *c)
{
    train_world w = {0};
    fed_data_opts dopts;
    fed_data_aug aug;
    fed_optim_cfg oc;
    fed_rng init, shuffle;
    fed_model_shape in;
    double noise = 0;
    int shard = 0, k = 1, threads = c->threads ? c->threads : fed_cli_online_cores(), rc;
    int acc = c->micro_batches > 1 ? c->micro_batches : c->accumulate;
    fed_train_pipe pipe = {0, 1, pipe_send, pipe_recv, &w};
    fed_err err;

    if ((rc = check_train_cfg(c, &oc, &shard, &k)) != 0)
        return rc;
    if ((c->pipeline_stages > 1 || fed_coll_mpi_launched()) && (rc = pipe_refusals(c)) != 0)
        return rc;
    if (c->micro_batches > c->batch || (c->micro_batches > 1 && c->accumulate > 1)) {
        fed_cli_error("train: --micro-batches %d: %s", c->micro_batches,
                      c->accumulate > 1 ? "--accumulate is the same, in the plain order: give "
                                          "one of them" : "more micro-batches than --batch's "
                                                          "samples");
        return 2;
    }
    if ((rc = open_db(c, &w)) != 0)
        goto out;
    if ((rc = fed_cli_data_opts("train", &c->dflags, &dopts)) >= 0)
        goto out;
    if ((err = fed_data_open_opts(c->data, 1, &dopts, &w.train)) != FED_OK ||
        (err = fed_data_augment_check(c->augment, w.train)) != FED_OK) {
        rc = fail(c->data, err);
        goto out;
    }
    if (c->eval && (err = fed_data_open_opts(c->data, 0, &dopts, &w.test)) != FED_OK) {
        rc = fail(c->data, err);
        goto out;
    }
    if ((err = fed_data_partition(w.train, c->partition, shard, k, c->partition_seed, &w.idx,
                                  &w.nidx)) != FED_OK) {
        rc = fail("partition", err);
        goto out;
    }
    if (w.nidx == 0) {
        fed_cli_error("train: shard %s of the data is empty", c->shard);
        rc = 1;
        goto out;
    }
    /* the device once the data is known good: opening a GPU takes seconds */
    if ((err = fed_backend_open(c->device, &w.be)) != FED_OK) {
        rc = fail("device", err);
        goto out;
    }
    /* a Poisson draw is batch on average: room for 6 standard deviations more
       (a larger one runs in pieces) */
    in = w.train->shape;
    say_declared(c, in);
    if (fed_model_input_scale_parse(c->input_scale, &in.scale) != FED_OK) {
        fed_cli_error("train: --input-scale '%s': centred or unit", c->input_scale);
        rc = 2;
        goto out;
    }
    /* the device settled by the model: auto takes the CPU for a layer the
       device lacks, then the threads and the pool follow the backend */
    if ((err = fed_model_backend_settle(c->device, c->graph ? c->graph : c->model, in,
                                        &w.be)) != FED_OK) {
        rc = fail(c->model_given, err);
        goto out;
    }
    if (!(w.be->caps & FED_BACKEND_CAP_SHARDS))
        threads = 1;
    if (c->dp_sgd && !(w.be->caps & FED_BACKEND_CAP_DP_SGD)) {
        fed_cli_error("train: --dp-sgd runs on the CPU backend only (the %s backend has no "
                      "DP-SGD parity test yet): add --device cpu", w.be->name);
        rc = 2;
        goto out;
    }
    if ((err = fed_pool_new(threads - 1, &w.pool)) != FED_OK) {
        rc = fail("thread pool", err);
        goto out;
    }
    if ((rc = pipe_open(c, &w, in)) != 0)
        goto out;
    if ((err = w.S > 1
                   ? fed_model_new_stage(c->graph ? c->graph : c->model, in, w.split[w.stage].lo,
                                         w.split[w.stage].hi, w.be, w.pool, threads,
                                         fed_trainer_micro_batch(c->batch, acc), &w.m)
                   : fed_model_new(c->graph ? c->graph : c->model, in, w.be, w.pool, threads,
                                   c->dp_sgd ? c->batch + (int)(6 * sqrt(c->batch)) + 8
                                             : fed_trainer_micro_batch(c->batch, acc),
                                   &w.m)) != FED_OK) {
        rc = fail(c->model_given, err);
        goto out;
    }
    if (c->recompute > 1 && (err = fed_model_set_recompute(w.m, c->recompute)) != FED_OK) {
        rc = fail("--recompute", err);
        goto out;
    }
    {
        fed_precision prec;
        char why[256];

        if (fed_model_precision_parse(c->precision, &prec) != FED_OK) {
            fed_cli_error("train: --precision: '%s' is not fp32 or bf16", c->precision);
            rc = 2;
            goto out;
        }
        if (prec == FED_PRECISION_BF16 && c->dp_sgd) {
            fed_cli_error("train: --precision bf16: DP-SGD's norms, clipping and noise stay "
                          "fp32: drop one of them");
            rc = 2;
            goto out;
        }
        if ((err = fed_model_set_precision(w.m, prec, why, sizeof why)) != FED_OK) {
            fed_cli_error("train: %s", why);
            rc = 1;
            goto out;
        }
    }
    fed_rng_seed_stream(&init, c->seed, 0);
    fed_rng_seed_stream(&shuffle, c->seed, 1);
    pipe.stage = w.stage;
    pipe.stages = w.S;
    if ((err = fed_optim_sched_of_run(c->schedule, c->epochs, c->lr_warmup,
                                      fed_train_batches(w.nidx, c->batch * w.D), &oc)) != FED_OK ||
        (err = fed_model_init(w.m, &init)) != FED_OK ||
        (err = fed_optim_new(&oc, w.m, &w.o)) != FED_OK ||
        (err = w.S > 1 ? fed_trainer_new_stage(w.m, w.o, w.train, c->batch, acc, &pipe, &w.t)
                       : fed_trainer_new_acc(w.m, w.o, w.train, c->batch, acc, &w.t)) != FED_OK ||
        (w.D > 1 && (err = fed_trainer_set_ranks(w.t, w.replica, w.D, pipe_reduce,
                                                 w.stage_coll)) != FED_OK)) {
        rc = fail("setting up", err);
        goto out;
    }
    if (c->onnx) { /* the file's weights, in place of --seed's */
        char why[512];

        if ((err = fed_onnx_apply_weights(c->onnx, w.m, why, sizeof why)) != FED_OK) {
            fed_cli_error("train: --model %s: %s", c->model_given, why);
            rc = 1;
            goto out;
        }
    }
    if (c->dp_sgd) {
        fed_trainer_dp dp = {(float)c->dp_sgd_clip, (float)c->dp_sgd_noise,
                             fed_crypto_keystream_random, &w.csprng};

        fed_crypto_keystream_init(&w.csprng, sysrandom, NULL);
        if ((err = fed_trainer_set_dp(w.t, &dp)) != FED_OK) {
            rc = fail("--dp-sgd", err);
            goto out;
        }
    }
    if (fed_data_parse_augment(c->augment, &aug) == FED_OK &&
        (err = fed_trainer_set_augment(w.t, &aug, c->seed)) != FED_OK) {
        rc = fail("--augment", err);
        goto out;
    }
    if ((err = fed_data_partition_noise(c->partition, shard, k, &noise)) != FED_OK ||
        (err = fed_trainer_set_noise(w.t, noise, c->seed)) != FED_OK) {
        rc = fail("--partition", err);
        goto out;
    }
    fed_trainer_set_gpipe_order(w.t, c->micro_batches > 1);
    if (!w.coll || fed_coll_rank(w.coll) == 0)
        print_header(c, &w, &oc, threads);
    if (w.coll)
        pipe_report(&w);
    if ((rc = resume(c, &w, &shuffle)) != 0)
        goto out;
    {
        double t0 = now_s();

        if ((rc = run_epochs(c, &w, &shuffle)) != 0)
            goto out;
        pipe_timing(&w, now_s() - t0, fed_optim_steps(w.o));
    }
    if (c->out[0] && w.S > 1) {
        if ((rc = pipe_save(c, &w, in)) != 0)
            goto out;
    } else if (c->out[0] && (!w.coll || fed_coll_rank(w.coll) == 0)) {
        if ((err = fed_model_save(w.m, c->out)) != FED_OK) {
            rc = fail(c->out, err);
            goto out;
        }
        printf("# saved %s (%zu parameters)\n", c->out, fed_model_nparams(w.m));
    }
    rc = 0;
out:
    if (rc != 0 && w.coll) { /* the other stages wait on this one: end the job */
        fflush(stdout);
        fed_coll_abort(w.coll, rc);
    }
    train_world_fini(&w);
    return rc;
}

int fed_cli_train(int argc, char **argv)
{
    train_cfg cfg;
    int rc = fed_cli_load_options("train", "[--data D] [--model SPEC] [--epochs N] [options]",
                          train_opts, NTRAIN_OPTS, &cfg, argc, argv);

    cfg.graph = NULL;
    cfg.onnx = NULL;
    memset(&cfg.decl, 0, sizeof cfg.decl);
    snprintf(cfg.model_given, sizeof cfg.model_given, "%s", rc < 0 ? cfg.model : "");
    if (rc < 0) { /* restarted first, so that what the model file logs is said once */
        fed_cli_maybe_reexec("train", argc, argv);
        rc = fed_cli_model_file("train", cfg.model, sizeof cfg.model, &cfg.graph, &cfg.onnx,
                                &cfg.decl);
    }
    if (rc < 0)
        rc = train_main(&cfg);
    fed_free(cfg.graph);
    fed_onnx_free(cfg.onnx);
    return rc;
}

/* -------------------------------------------------------------- eval -- */

static void print_point(const char *what, const fed_metrics_at *at)
{
    printf("  %-22s sensitivity %.4f  specificity %.4f  precision %.4f  F1 %.4f"
           "  (tp %llu fp %llu tn %llu fn %llu)\n",
           what, at->sensitivity, at->specificity, at->precision, at->f1,
           (unsigned long long)at->tp, (unsigned long long)at->fp, (unsigned long long)at->tn,
           (unsigned long long)at->fn);
}


/* The binary set with two classes, else the multi-class set. */
static void print_report(const fed_eval_report *r)
{
    int k = r->classes;

    if (r->regression) {
        printf("regression  MSE %.6g  MAE %.6g  R^2 %.6g\n", r->reg.mse, r->reg.mae, r->reg.r2);
        return;
    }
    if (r->has_binary) {
        const fed_metrics_binary *b = &r->bin;
        char at[48];

        printf("binary (class 1 positive: %llu, negative: %llu)  AUC %.4f  average precision "
               "%.4f\n",
               (unsigned long long)b->pos, (unsigned long long)b->neg, b->auc, b->ap);
        print_point("at 0.5", &b->half);
        snprintf(at, sizeof at, "at %.4g (Youden's J)", b->youden.threshold);
        print_point(at, &b->youden);
        return;
    }
    printf("macro-F1 %.4f\nrecall by class:", r->multi.macro_f1);
    for (int c = 0; c < k; c++)
        printf(" %d:%.4f", c, r->recall[c]);
    printf("\n");
    if (k > FED_EVAL_CONFUSION_MAX) {
        printf("confusion matrix: not printed (%d classes, more than %d)\n", k,
               FED_EVAL_CONFUSION_MAX);
        return;
    }
    printf("confusion matrix (row: true class, column: predicted)\n%6s", "");
    for (int c = 0; c < k; c++)
        printf(" %7d", c);
    printf("\n");
    for (int t = 0; t < k; t++) {
        printf("%6d", t);
        for (int c = 0; c < k; c++)
            printf(" %7llu", (unsigned long long)r->confusion[(size_t)t * k + c]);
        printf("\n");
    }
}

/* The data's --task: the one given, else the model's (mse: regression). */
static void eval_task(const fed_model *m, int given, fed_data_flags *f)
{
    if (given || !fed_model_regression(m) || !strcmp(f->task, "regression"))
        return;
    fed_log(FED_LOG_INFO, "eval: the model's loss is mse: the labels are read as numbers "
            "(--task regression)");
    snprintf(f->task, sizeof f->task, "regression");
}

static int eval_main(const eval_cfg *c, int task_given, int argc, char **argv)
{
    fed_data_flags dflags = c->dflags;
    char why[320];
    fed_backend *be = NULL;
    fed_pool *pool = NULL;
    fed_dataset *d = NULL;
    fed_data_opts dopts;
    fed_model *m = NULL;
    fed_step_stats st = {0};
    fed_eval_report *rep = NULL;
    fed_store_st_file exp;
    size_t ml = strlen(c->model);
    int threads = c->threads ? c->threads : fed_cli_online_cores(), rc = 1;
    int export = ml > 12 && !strcmp(c->model + ml - 12, ".safetensors");
    fed_err err;

    memset(&exp, 0, sizeof exp);
    if (!c->model[0]) {
        fed_cli_error("eval: --model FILE is required");
        return 2;
    }
    if (strcmp(c->split, "test") != 0 && strcmp(c->split, "train") != 0) {
        fed_cli_error("eval: --split: '%s' is not test or train", c->split);
        return 2;
    }
    if ((rc = fed_cli_refuse_onnx("eval", "--model", c->model, "a trained model: a model file "
                                  "(train --out, import --out) or an export (FILE.safetensors)")) >= 0)
        return rc;
    fed_cli_maybe_reexec("eval", argc, argv);
    if ((err = fed_backend_open(c->device, &be)) != FED_OK) {
        fed_cli_error("eval: device: %s", fed_strerror(err));
        goto out;
    }
    if (!(be->caps & FED_BACKEND_CAP_SHARDS))
        threads = 1;
    if ((err = fed_pool_new(threads - 1, &pool)) != FED_OK ||
        (err = export ? fed_cli_model_from_export(c->model, be, pool, threads, c->batch, &exp, &m)
                      : fed_model_load(c->model, be, pool, threads, c->batch, &m)) != FED_OK) {
        fed_cli_error("eval: %s: %s", c->model, fed_strerror(err));
        goto out;
    }
    eval_task(m, task_given, &dflags);
    if ((rc = fed_cli_data_opts("eval", &dflags, &dopts)) >= 0)
        goto out;
    rc = 1;
    if (exp.stats_mean) { /* the federation's shared statistics, as in training */
        dopts.csv.stats_mean = exp.stats_mean;
        dopts.csv.stats_std = exp.stats_std;
        dopts.csv.stats_features = exp.stats_cols;
    }
    if ((err = fed_data_open_opts(c->data, !strcmp(c->split, "train"), &dopts, &d)) != FED_OK) {
        fed_cli_error("eval: %s: %s", c->data, fed_strerror(err));
        goto out;
    }
    if (fed_train_task_check(m, d, why, sizeof why) != FED_OK) {
        fed_cli_error("eval: %s on %s: %s", c->model, c->data, why);
        goto out;
    }
    if (exp.stats_mean && d->x_u8 && /* images: the shared statistics a channel */
        (err = fed_data_set_channel_stats(d, exp.stats_mean, exp.stats_std, exp.stats_cols)) !=
            FED_OK) {
        fed_cli_error("eval: %s: its shared statistics (%zu channels) on %s (%d): %s", c->model,
                      exp.stats_cols, c->data, d->shape.c, fed_strerror(err));
        goto out;
    }
    if ((err = fed_eval_report_new(fed_model_input(m).classes, &rep)) != FED_OK ||
        (err = fed_train_evaluate_report(m, d, rep)) != FED_OK) {
        fed_cli_error("eval: %s on %s: %s", c->model, c->data, fed_strerror(err));
        goto out;
    }
    st = rep->st;
    printf("model %s  data %s (%s)  samples %ld  loss %.4f", fed_model_spec(m), c->data,
           c->split, st.samples, st.loss_sum / (double)st.samples);
    if (!rep->regression)
        printf("  accuracy %.4f", (double)st.correct / (double)st.samples);
    printf("\n");
    print_report(rep);
    rc = 0;
out:
    fed_eval_report_free(rep);
    fed_model_free(m);
    fed_store_safetensors_fini(&exp);
    fed_data_free(d);
    fed_pool_free(pool);
    fed_backend_free(be);
    return rc;
}

int fed_cli_eval(int argc, char **argv)
{
    eval_cfg cfg;
    unsigned char given[NEVAL_OPTS];
    int rc = fed_cli_load_options_given("eval", "--model FILE [--data D] [options]", eval_opts,
                                        NEVAL_OPTS, &cfg, argc, argv, given);

    if (rc >= 0)
        return rc;
    return eval_main(&cfg, given[fed_opt_find(eval_opts, NEVAL_OPTS, "task") - eval_opts], argc,
                     argv);
}
