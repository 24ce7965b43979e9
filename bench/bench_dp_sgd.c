/* bench_dp_sgd.c - a DP-SGD step against a plain step, mlp:256,128 and cnn
 * at batch 64 on one core (pinned, one pool thread, OpenBLAS on one
 * thread), in the same run: the plain step is the trainer's
 * (fed_optim_train_step, SGD); the DP step is fed_model_dp_grads (per-sample
 * norms, clipping, the clipped sum), fed_dp_add_noise on every parameter
 * from the keystream (crypto/keystream.h: AES-256-CTR on AES-NI, else
 * ChaCha20) keyed by libsodium, and
 * the same optimizer's step. Its parts are timed alone too. Data: random
 * bytes of Fashion-MNIST's shape. The target for the MLP is at most 2x.
 * Best of several runs; nothing asserts a time. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "core/pool.h"
#include "core/rng.h"
#include "crypto/keystream.h"
#include "model/backend.h"
#include "model/dp.h"
#include "model/model.h"
#include "model/optim.h"

#define BATCH 64
#define REPS 11

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void sysrandom(void *ctx, void *buf, size_t len)
{
    (void)ctx;
    randombytes_buf(buf, len);
}

static fed_crypto_keystream csprng; /* AES-256-CTR (or ChaCha20) keyed from randombytes_buf */

/* Seconds per step of one run of steps steps of what (0 plain, 1 DP, 2 the
 * DP gradient alone, 3 the noise alone). */
static double time_steps(fed_model *m, fed_optim *o, const fed_batch *b, int what, int steps)
{
    double best = 1e9;

    for (int r = 0; r < 1; r++) {
        double t = now_s();

        for (int s = 0; s < steps; s++) {
            fed_err err = FED_OK;

            if (what == 0)
                err = fed_optim_train_step(o, m, b, NULL);
            if (what == 1 || what == 2)
                err = fed_model_dp_grads(m, b, 1.0f, 1.0f / BATCH, 0, NULL, NULL);
            if (err == FED_OK && (what == 1 || what == 3))
                err = fed_dp_add_noise(fed_crypto_keystream_random, &csprng,
                                       fed_model_grads_dev(m), fed_model_nparams(m),
                                       1.1 / BATCH);
            if (err == FED_OK && what == 1)
                err = fed_optim_step(o, m);
            if (err != FED_OK) {
                fprintf(stderr, "bench_dp_sgd: %s\n", fed_strerror(err));
                exit(1);
            }
        }
        t = (now_s() - t) / steps;
        best = t < best ? t : best;
    }
    return best;
}

static int bench(fed_backend *be, fed_pool *pool, const char *spec, int steps)
{
    fed_model_shape in = {1, 28, 28, 10, 0};
    uint8_t *x = malloc((size_t)BATCH * 784);
    int32_t y[BATCH];
    fed_model *m = NULL;
    fed_optim *o = NULL;
    fed_optim_cfg oc;
    fed_rng rng;
    fed_batch b = {.n = BATCH, .x_u8 = x, .y = y};
    double plain, dp, grads, noise;

    if (!x || fed_model_new(spec, in, be, pool, 1, BATCH, &m) != FED_OK)
        return 1;
    fed_rng_seed(&rng, 1);
    fed_rng_fill(&rng, x, (size_t)BATCH * 784);
    for (int i = 0; i < BATCH; i++)
        y[i] = (int32_t)fed_rng_below(&rng, 10);
    fed_optim_cfg_default(&oc, FED_OPTIM_SGD);
    oc.lr = 0.01f; /* small: the weights stay where they start, for both */
    if (fed_model_init(m, &rng) != FED_OK || fed_optim_new(&oc, m, &o) != FED_OK)
        return 1;
    /* the four interleaved, best of REPS each: a shared machine's load
       then bends them alike */
    plain = dp = grads = noise = 1e9;
    for (int r = 0; r < REPS; r++) {
        double t;

        if ((t = time_steps(m, o, &b, 0, steps)) < plain)
            plain = t;
        if ((t = time_steps(m, o, &b, 1, steps)) < dp)
            dp = t;
        if ((t = time_steps(m, o, &b, 2, steps)) < grads)
            grads = t;
        if ((t = time_steps(m, o, &b, 3, steps)) < noise)
            noise = t;
    }
    printf("  %-12s %8zu params  plain %7.2f ms  DP-SGD %7.2f ms  (%.2fx)   parts: clipped "
           "gradient %.2f ms, noise %.2f ms\n",
           spec, fed_model_nparams(m), plain * 1e3, dp * 1e3, dp / plain, grads * 1e3,
           noise * 1e3);
    fed_optim_free(o);
    fed_model_free(m);
    free(x);
    return 0;
}

int main(void)
{
    fed_backend *be = NULL;
    fed_pool *pool = NULL;
    cpu_set_t set;
    int cpu = -1;

    if (sodium_init() < 0)
        return 1;
    fed_crypto_keystream_init(&csprng, sysrandom, NULL);
    /* one core: the first this process may use */
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE && cpu < 0; c++)
            if (CPU_ISSET(c, &set))
                cpu = c;
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0)
            cpu = -1;
    }
    if (fed_backend_cpu_new(1, &be) != FED_OK || fed_pool_new(0, &pool) != FED_OK)
        return 1;
    printf("bench_dp_sgd: batch %d, one core (cpu %d), step time best of %d (interleaved); DP-SGD "
           "= clipped per-sample gradients + CSPRNG noise (%s) + SGD\n",
           BATCH, cpu, REPS, csprng.aes ? "AES-256-CTR" : "ChaCha20");
    if (bench(be, pool, "mlp:256,128", 100) || bench(be, pool, "cnn", 5))
        return 1;
    fed_pool_free(pool);
    fed_backend_free(be);
    return 0;
}
