/* bench_mpi_site.c - `make bench` (through bench/bench_mpi_site.sh, which
 * runs it under mpirun -np 1 and -np 2): a site's training step for
 * mlp:256,128 at a global batch of 128 split over the ranks, one thread a
 * rank, the real trainer and collective (model/train.h, mpi/coll.h): the
 * step's time, the gradients' sum's time and share of it, and the bytes a
 * rank sends per step. Rank 0 prints. Data: random bytes of Fashion-MNIST's
 * shape, the same on every rank. Run alone it says where it runs. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/pool.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/train.h"
#include "mpi/coll.h"

#define SPEC "mlp:256,128"
#define GLOBAL_BATCH 128
#define STEPS 200
#define REPEATS 3

typedef struct timed_sum {
    fed_coll *c;
    double secs;
    long calls;
} timed_sum;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static fed_err timed_reduce(void *ctx, float *buf, size_t n)
{
    timed_sum *s = ctx;
    double t0 = now_s();
    fed_err e = fed_coll_allreduce_sum(s->c, buf, n);

    s->secs += now_s() - t0;
    s->calls++;
    return e;
}

static int random_data(fed_dataset *d, uint32_t **idx, size_t n)
{
    fed_rng rng;

    memset(d, 0, sizeof *d);
    d->n = n;
    d->shape = (fed_model_shape){1, 28, 28, 10, 0};
    d->features = 784;
    d->x_u8 = malloc(n * 784);
    d->y = malloc(n * sizeof *d->y);
    *idx = malloc(n * sizeof **idx);
    if (!d->x_u8 || !d->y || !*idx)
        return -1;
    fed_rng_seed(&rng, 1);
    fed_rng_fill(&rng, d->x_u8, n * 784);
    for (size_t i = 0; i < n; i++) {
        d->y[i] = (int32_t)fed_rng_below(&rng, 10);
        (*idx)[i] = (uint32_t)i;
    }
    return 0;
}

int main(int argc, char **argv)
{
    fed_coll *c = NULL;
    fed_dataset d;
    uint32_t *idx = NULL;
    fed_backend *be = NULL;
    fed_model *m = NULL;
    fed_optim *o = NULL;
    fed_trainer *t = NULL;
    fed_optim_cfg oc;
    fed_rng rng;
    timed_sum ts = {0};
    double best = 1e30, best_sum = 0;
    int rank, size, batch, rc = 1;

    memset(&d, 0, sizeof d);
    if (!fed_coll_mpi_launched()) {
        printf("bench_mpi_site: runs under mpirun: bench/bench_mpi_site.sh\n");
        return 0;
    }
    if (fed_coll_mpi_open(&argc, &argv, &c) != FED_OK) {
        fprintf(stderr, "bench_mpi_site: MPI did not start\n");
        return 1;
    }
    rank = fed_coll_rank(c);
    size = fed_coll_size(c);
    batch = GLOBAL_BATCH / size;
    ts.c = c;
    fed_rng_seed(&rng, 2);
    fed_optim_cfg_default(&oc, FED_OPTIM_SGD);
    oc.momentum = 0.9f;
    if (random_data(&d, &idx, (size_t)STEPS * GLOBAL_BATCH) != 0 ||
        fed_backend_cpu_new(1, &be) != FED_OK ||
        fed_model_new(SPEC, d.shape, be, NULL, 1, batch, &m) != FED_OK ||
        fed_model_init(m, &rng) != FED_OK || fed_optim_new(&oc, m, &o) != FED_OK ||
        fed_trainer_new(m, o, &d, batch, &t) != FED_OK ||
        fed_trainer_set_ranks(t, rank, size, timed_reduce, &ts) != FED_OK)
        goto out;
    if (fed_trainer_steps(t, idx, d.n, STEPS / 4, &rng, NULL) != FED_OK) /* warm up */
        goto out;
    for (int r = 0; r < REPEATS; r++) {
        double t0, dt;

        ts.secs = 0;
        ts.calls = 0;
        t0 = now_s();
        if (fed_trainer_steps(t, idx, d.n, STEPS, &rng, NULL) != FED_OK)
            goto out;
        dt = (now_s() - t0) / STEPS;
        if (dt < best) {
            best = dt;
            best_sum = size > 1 ? ts.secs / (double)ts.calls : 0.0;
        }
    }
    /* the sum alone, the ranks in step: what moving the bytes costs without
       waiting for a slower rank's backward pass */
    ts.secs = 0;
    ts.calls = 0;
    for (int r = 0; r < STEPS / 4; r++)
        if (timed_reduce(&ts, fed_model_grads_dev(m), fed_model_nparams(m)) != FED_OK)
            goto out;
    if (rank == 0)
        printf("R=%d step_ms=%.3f sum_ms=%.3f share=%.1f%% sum_alone_ms=%.3f bytes=%llu  (%s, "
               "global batch %d = %d x %d, %zu parameters, best of %d x %d steps)\n",
               size, 1e3 * best, 1e3 * best_sum, 100.0 * best_sum / best,
               1e3 * ts.secs / (double)ts.calls,
               (unsigned long long)fed_coll_allreduce_bytes(fed_model_nparams(m), size), SPEC,
               GLOBAL_BATCH, size, batch, fed_model_nparams(m), REPEATS, STEPS);
    rc = 0;
out:
    if (rc)
        fprintf(stderr, "bench_mpi_site: rank %d failed\n", c ? fed_coll_rank(c) : -1);
    fed_trainer_free(t);
    fed_optim_free(o);
    fed_model_free(m);
    fed_backend_free(be);
    free(d.x_u8);
    free(d.y);
    free(idx);
    fed_coll_free(c);
    return rc;
}
