/* test_train_record.c - `fednode train --db`: every epoch leaves a round row
 * and a checkpoint; resume restores model, optimizer and shuffle state so
 * that 2 epochs + resume for 2 more equals 4 epochs bit for bit; a model
 * that does not match is refused with its own code; a corrupt newest
 * checkpoint makes resume fall back to the previous one. Uses a 1/50 shard
 * of Fashion-MNIST ($FEDNODE_DATA or the Debian dataset); skipped without it. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <sodium.h>
#include <sqlite3.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "model/backend.h"
#include "model/data.h"
#include "model/model.h"
#include "model/optim.h"
#include "model/train.h"
#include "app/train_record.h"
#include "storage/store.h"
#include "tests/support/support.h"

#define SEED 7u
#define BATCH 32
#define TOTAL_EPOCHS 4

typedef struct world {
    fed_backend *be;
    fed_dataset *train, *test;
    uint32_t *idx;
    size_t nidx;
    int ndb;
} world;

/* One training run: model, optimizer (Adam, cosine over TOTAL_EPOCHS, so a
 * resumed step count matters), trainer, shuffle rng. */
typedef struct run {
    fed_model *m;
    fed_optim *o;
    fed_trainer *t;
    fed_rng shuffle;
} run;

static int setup(void **state)
{
    world *w = calloc(1, sizeof *w);
    fed_dataset *full = NULL;
    uint32_t *tidx = NULL;
    size_t tn = 0;

    if (!w)
        return -1;
    *state = w;
    if (fed_test_tmpdir_setup(NULL) != 0 || fed_backend_cpu_new(1, &w->be) != FED_OK)
        return -1;
    if (!fed_test_fashion_open(&w->train, &full))
        return 0; /* the tests skip */
    if (fed_data_partition(w->train, "iid", 0, 50, 1, &w->idx, &w->nidx) != FED_OK ||
        fed_data_partition(full, "iid", 0, 20, 1, &tidx, &tn) != FED_OK ||
        fed_data_subset(full, tidx, tn, &w->test) != FED_OK)
        return -1;
    fed_free(tidx);
    fed_data_free(full);
    return 0;
}

static int teardown(void **state)
{
    world *w = *state;

    fed_free(w->idx);
    fed_data_free(w->test);
    fed_data_free(w->train);
    fed_backend_free(w->be);
    if (fed_test_tmpdir_teardown(NULL) != 0)
        fprintf(stderr, "could not remove %s\n", fed_test_tmpdir());
    free(w);
    return 0;
}

static void db_path(world *w, char *out, size_t cap)
{
    char name[32];

    snprintf(name, sizeof name, "n%d.db", w->ndb++);
    fed_test_path(out, cap, name);
}

static void run_new(world *w, run *r, const char *spec, fed_optim_kind kind)
{
    fed_optim_cfg oc;
    fed_rng init;

    memset(r, 0, sizeof *r);
    assert_int_equal(fed_model_new(spec, w->train->shape, w->be, NULL, 1, BATCH, &r->m), FED_OK);
    fed_rng_seed_stream(&init, SEED, 0);
    fed_rng_seed_stream(&r->shuffle, SEED, 1);
    assert_int_equal(fed_model_init(r->m, &init), FED_OK);
    fed_optim_cfg_default(&oc, kind);
    oc.sched = FED_SCHED_COSINE;
    oc.total_steps = TOTAL_EPOCHS * fed_train_batches(w->nidx, BATCH);
    assert_int_equal(fed_optim_new(&oc, r->m, &r->o), FED_OK);
    assert_int_equal(fed_trainer_new(r->m, r->o, w->train, BATCH, &r->t), FED_OK);
}

static void run_free(run *r)
{
    fed_trainer_free(r->t);
    fed_optim_free(r->o);
    fed_model_free(r->m);
}

/* Epochs first..last, each recorded in st when st is not NULL. */
static void train_epochs(world *w, run *r, fed_store *st, uint64_t first, uint64_t last)
{
    for (uint64_t e = first; e <= last; e++) {
        fed_step_stats tr = {0}, te = {0};
        fed_node_record_round rec = {0};

        assert_int_equal(fed_trainer_epoch(r->t, w->idx, w->nidx, &r->shuffle, &tr), FED_OK);
        assert_int_equal(fed_train_evaluate_all(r->m, w->test, &te), FED_OK);
        if (!st)
            continue;
        rec.epoch = e;
        rec.start_ms = 1000 * e;
        rec.end_ms = 1000 * e + 500;
        rec.loss = tr.loss_sum / (double)tr.samples;
        rec.accuracy = (double)te.correct / (double)te.samples;
        rec.samples = (uint64_t)tr.samples;
        assert_int_equal(fed_node_record_epoch(st, r->m, r->o, &r->shuffle, w->nidx, &rec),
                         FED_OK);
    }
}

static float *params_of(const fed_model *m)
{
    float *p = malloc(fed_model_nparams(m) * sizeof *p);

    assert_non_null(p);
    assert_int_equal(fed_model_get_params(m, p), FED_OK);
    return p;
}

/* A database holding `epochs` recorded epochs of spec. */
static void make_db(world *w, const char *path, const char *spec, uint64_t epochs)
{
    fed_store *st = NULL;
    run r;

    run_new(w, &r, spec, FED_OPTIM_ADAM);
    assert_int_equal(fed_node_record_open(path, &st), FED_OK);
    train_epochs(w, &r, st, 1, epochs);
    fed_store_close(st);
    run_free(&r);
}

static void records_rounds_and_checkpoints(void **state)
{
    world *w = *state;
    fed_store *st = NULL;
    fed_store_round rows[8];
    fed_store_ckpt_row ck[8];
    uint8_t want[32];
    char path[128];
    size_t n = 0;
    uint64_t last = 99;
    float *p;
    run r;

    fed_test_need_fashion(w->train != NULL);
    db_path(w, path, sizeof path);
    assert_int_equal(fed_node_record_open(path, &st), FED_OK);
    assert_int_equal(fed_node_record_last_round(st, &last), FED_OK);
    assert_int_equal(last, 0);
    run_new(w, &r, "mlp:16", FED_OPTIM_ADAM);
    train_epochs(w, &r, st, 1, 3);
    fed_store_close(st);

    /* read back the way `fednode status` does: a read-only open */
    fed_store_opts o;
    fed_store_opts_default(&o);
    o.flags = FED_STORE_READONLY;
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_int_equal(fed_node_record_last_round(st, &last), FED_OK);
    assert_int_equal(last, 3);
    assert_int_equal(fed_store_last_rounds(st, rows, 8, &n), FED_OK);
    assert_int_equal(n, 3);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(rows[i].round, 3 - i);
        assert_string_equal(rows[i].strategy, "local");
        assert_int_equal(rows[i].samples, w->nidx);
        assert_int_equal(rows[i].start_ms, 1000 * rows[i].round);
        assert_true(rows[i].accuracy > 0.3 && rows[i].accuracy <= 1.0);
        assert_true(isfinite(rows[i].loss) && rows[i].loss > 0);
        assert_int_equal(rows[i].peers, 0);
        assert_int_equal(rows[i].bytes_in + rows[i].bytes_out, 0);
    }
    /* round 3's hash is BLAKE2b-256 of the final parameters (f32 LE) */
    p = params_of(r.m);
    crypto_generichash(want, 32, (const uint8_t *)p, fed_model_nparams(r.m) * sizeof *p, NULL, 0);
    assert_memory_equal(rows[0].model_hash, want, 32);
    assert_memory_not_equal(rows[1].model_hash, want, 32);
    assert_int_equal(fed_store_list_checkpoints(st, ck, 8, &n), FED_OK);
    assert_int_equal(n, 3);
    assert_int_equal(ck[0].round, 3);
    assert_int_equal(ck[2].round, 1);
    assert_int_equal(fed_store_verify_checkpoints(st, NULL, NULL), FED_OK);
    fed_store_close(st);
    free(p);
    run_free(&r);
}

static void resume_is_bit_exact(void **state)
{
    world *w = *state;
    fed_store *st = NULL;
    fed_node_record_found f;
    fed_store_round ra, rb;
    char pa[128], pb[128];
    float *a, *b;
    run r;

    fed_test_need_fashion(w->train != NULL);
    /* uninterrupted: 4 epochs */
    db_path(w, pa, sizeof pa);
    make_db(w, pa, "mlp:16", TOTAL_EPOCHS);
    /* interrupted: 2 epochs, then a new process state resumes for 2 more */
    db_path(w, pb, sizeof pb);
    make_db(w, pb, "mlp:16", 2);
    run_new(w, &r, "mlp:16", FED_OPTIM_ADAM);
    assert_int_equal(fed_node_record_open(pb, &st), FED_OK);
    assert_int_equal(fed_node_record_resume(st, r.m, r.o, &r.shuffle, &f), FED_OK);
    assert_int_equal(f.epochs_done, 2);
    assert_int_equal(f.samples, w->nidx);
    assert_int_equal(f.faults.total, 0);
    assert_string_equal(f.spec, "mlp:16");
    assert_int_equal(fed_optim_steps(r.o), 2 * fed_train_batches(w->nidx, BATCH));
    train_epochs(w, &r, st, f.epochs_done + 1, TOTAL_EPOCHS);
    b = params_of(r.m);
    assert_int_equal(fed_store_get_round(st, TOTAL_EPOCHS, &rb), FED_OK);
    fed_store_close(st);
    run_free(&r);

    /* the uninterrupted run's final parameters, from its last checkpoint */
    run_new(w, &r, "mlp:16", FED_OPTIM_ADAM);
    assert_int_equal(fed_node_record_open(pa, &st), FED_OK);
    assert_int_equal(fed_node_record_resume(st, r.m, r.o, &r.shuffle, &f), FED_OK);
    assert_int_equal(f.epochs_done, TOTAL_EPOCHS);
    a = params_of(r.m);
    assert_int_equal(fed_store_get_round(st, TOTAL_EPOCHS, &ra), FED_OK);
    fed_store_close(st);
    assert_memory_equal(a, b, fed_model_nparams(r.m) * sizeof *a);
    assert_memory_equal(ra.model_hash, rb.model_hash, 32);
    assert_true(ra.loss == rb.loss && ra.accuracy == rb.accuracy);
    run_free(&r);
    free(a);
    free(b);
}

static void mismatch_is_refused(void **state)
{
    world *w = *state;
    fed_store *st = NULL;
    fed_node_record_found f;
    fed_model_shape other;
    fed_model *m2 = NULL;
    fed_rng before;
    char path[128];
    float *p0, *p1;
    run r;

    fed_test_need_fashion(w->train != NULL);
    db_path(w, path, sizeof path);
    make_db(w, path, "mlp:16", 1);
    assert_int_equal(fed_node_record_open(path, &st), FED_OK);

    /* another spec: refused, nothing changed, the stored one reported */
    run_new(w, &r, "logreg", FED_OPTIM_ADAM);
    p0 = params_of(r.m);
    before = r.shuffle;
    assert_int_equal(fed_node_record_resume(st, r.m, r.o, &r.shuffle, &f), FED_ERR_SPEC);
    assert_string_equal(f.spec, "mlp:16");
    assert_int_equal(f.epochs_done, 1);
    p1 = params_of(r.m);
    assert_memory_equal(p0, p1, fed_model_nparams(r.m) * sizeof *p0);
    assert_memory_equal(&before, &r.shuffle, sizeof before);
    free(p0);
    free(p1);
    run_free(&r);

    /* same spec, another input shape */
    other = w->train->shape;
    other.classes = 5;
    assert_int_equal(fed_model_new("mlp:16", other, w->be, NULL, 1, BATCH, &m2), FED_OK);
    assert_int_equal(fed_node_record_resume(st, m2, NULL, &before, &f), FED_ERR_SHAPE);
    assert_int_equal(f.shape.classes, 10);
    fed_model_free(m2);

    /* same model, another optimizer (SGD's state is not Adam's) */
    run_new(w, &r, "mlp:16", FED_OPTIM_SGD);
    assert_int_equal(fed_node_record_resume(st, r.m, r.o, &r.shuffle, NULL), FED_ERR_SHAPE);
    run_free(&r);
    fed_store_close(st);

    /* a database without checkpoints */
    db_path(w, path, sizeof path);
    assert_int_equal(fed_node_record_open(path, &st), FED_OK);
    run_new(w, &r, "mlp:16", FED_OPTIM_ADAM);
    assert_int_equal(fed_node_record_resume(st, r.m, r.o, &r.shuffle, NULL), FED_ERR_NOTFOUND);
    run_free(&r);
    fed_store_close(st);
}

static void corrupt_latest_falls_back(void **state)
{
    world *w = *state;
    fed_store *st = NULL;
    fed_node_record_found f;
    sqlite3 *db = NULL;
    char path[128];
    uint64_t last = 0;
    run r;

    fed_test_need_fashion(w->train != NULL);
    db_path(w, path, sizeof path);
    make_db(w, path, "mlp:16", 3);
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    assert_int_equal(sqlite3_exec(db,
                                  "UPDATE checkpoint_chunks SET data = zeroblob(length(data)) "
                                  "WHERE ckpt = (SELECT MAX(ckpt) FROM checkpoint_chunks)",
                                  NULL, NULL, NULL),
                     SQLITE_OK);
    assert_int_equal(sqlite3_changes(db) > 0, 1);
    sqlite3_close(db);

    assert_int_equal(fed_node_record_open(path, &st), FED_OK);
    run_new(w, &r, "mlp:16", FED_OPTIM_ADAM);
    assert_int_equal(fed_node_record_resume(st, r.m, r.o, &r.shuffle, &f), FED_OK);
    assert_int_equal(f.epochs_done, 2);
    assert_int_equal(f.faults.total, 1);
    assert_int_equal(f.faults.v[0].round, 3);
    assert_int_equal(f.faults.v[0].err, FED_ERR_CORRUPT);
    /* the run goes on: round 3 is redone and replaces its row */
    train_epochs(w, &r, st, 3, 3);
    assert_int_equal(fed_node_record_last_round(st, &last), FED_OK);
    assert_int_equal(last, 3);
    assert_int_equal(fed_node_record_resume(st, r.m, r.o, &r.shuffle, &f), FED_OK);
    assert_int_equal(f.epochs_done, 3);
    run_free(&r);
    fed_store_close(st);
}

static void bad_arguments(void **state)
{
    fed_node_record_round rec = {0};
    fed_rng rng = {{0}};

    (void)state;
    assert_int_equal(fed_node_record_epoch(NULL, NULL, NULL, &rng, 0, &rec), FED_ERR_INVAL);
    assert_int_equal(fed_node_record_resume(NULL, NULL, NULL, &rng, NULL), FED_ERR_INVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(bad_arguments),
        cmocka_unit_test(records_rounds_and_checkpoints),
        cmocka_unit_test(resume_is_bit_exact),
        cmocka_unit_test(mismatch_is_refused),
        cmocka_unit_test(corrupt_latest_falls_back),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
