/* test_core.c - core/: error names and messages, the log sink and level
 * filter, the allocation hook, the RNG (a fixed sequence checked against an
 * independent reference, and the distributions' moments), the thread pool
 * (coverage, nesting, tasks) and the options table (flags, INI, errors that
 * name the option, file and line), and bytes.h's little-endian codec (fixed
 * byte images, float bits, arrays in place) and its 32-byte key search. */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/bytes.h"
#include "core/err.h"
#include "core/log.h"
#include "core/opt.h"
#include "core/pool.h"
#include "core/rng.h"
#include "tests/support/support.h"

#define assert_err(got, want) assert_string_equal(fed_errname(got), fed_errname(want))

static void assert_has(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) {
        print_error("'%s' lacks '%s'\n", hay, needle);
        fail();
    }
}

/* -------------------------------------------------------------- errors -- */

static void test_err_names(void **state)
{
    (void)state;
    assert_string_equal(fed_errname(FED_OK), "FED_OK");
    assert_string_equal(fed_strerror(FED_OK), "ok");
    assert_string_equal(fed_errname(FED_ERR_REPLAY), "FED_ERR_REPLAY");
    assert_string_equal(fed_strerror(FED_ERR_NOMEM), "out of memory");
    for (int e = 0; e < FED_ERR_COUNT_; e++) {
        const char *name = fed_errname(e), *msg = fed_strerror(e);

        assert_non_null(name);
        assert_non_null(msg);
        assert_true(strlen(msg) > 1);
        assert_true(strncmp(name, e ? "FED_ERR_" : "FED_OK", e ? 8 : 6) == 0);
        assert_string_not_equal(msg, "unknown error");
        /* names and messages are unique */
        for (int f = 0; f < e; f++) {
            assert_string_not_equal(name, fed_errname(f));
            assert_string_not_equal(msg, fed_strerror(f));
        }
    }
    assert_string_equal(fed_strerror(-1), "unknown error");
    assert_string_equal(fed_strerror(FED_ERR_COUNT_), "unknown error");
    assert_string_equal(fed_strerror(1 << 30), "unknown error");
    assert_string_equal(fed_errname(-5), "FED_ERR_UNKNOWN");
    assert_string_equal(fed_errname(FED_ERR_COUNT_), "FED_ERR_UNKNOWN");
}

/* ----------------------------------------------------------------- log -- */

typedef struct log_rec {
    int calls;
    fed_log_level last_level;
    char last[2048];
    void *ctx_seen;
} log_rec;

static void rec_sink(void *ctx, fed_log_level level, const char *line)
{
    log_rec *r = ctx;

    r->calls++;
    r->last_level = level;
    r->ctx_seen = ctx;
    snprintf(r->last, sizeof r->last, "%s", line);
}

static void test_log(void **state)
{
    log_rec r;
    char big[3000];
    fed_log_level saved = fed_log_get_level();

    (void)state;
    memset(&r, 0, sizeof r);
    fed_log_set_sink(rec_sink, &r);
    fed_log_set_level(FED_LOG_DEBUG);
    fed_log(FED_LOG_DEBUG, "hello %d %s", 42, "world");
    assert_int_equal(r.calls, 1);
    assert_ptr_equal(r.ctx_seen, &r);
    assert_int_equal(r.last_level, FED_LOG_DEBUG);
    assert_string_equal(r.last, "hello 42 world");
    /* filtering: below the level is dropped */
    fed_log_set_level(FED_LOG_WARN);
    assert_int_equal(fed_log_get_level(), FED_LOG_WARN);
    fed_log(FED_LOG_DEBUG, "dropped");
    fed_log(FED_LOG_INFO, "dropped");
    assert_int_equal(r.calls, 1);
    fed_log(FED_LOG_WARN, "kept");
    fed_log(FED_LOG_ERROR, "kept too");
    assert_int_equal(r.calls, 3);
    assert_int_equal(r.last_level, FED_LOG_ERROR);
    assert_string_equal(r.last, "kept too");
    /* long lines are cut, never overrun */
    memset(big, 'x', sizeof big - 1);
    big[sizeof big - 1] = 0;
    fed_log(FED_LOG_ERROR, "%s", big);
    assert_int_equal(r.calls, 4);
    assert_int_equal(strlen(r.last), 1023);
    assert_string_equal(fed_log_level_name(FED_LOG_DEBUG), "debug");
    assert_string_equal(fed_log_level_name(FED_LOG_INFO), "info");
    assert_string_equal(fed_log_level_name(FED_LOG_WARN), "warn");
    assert_string_equal(fed_log_level_name(FED_LOG_ERROR), "error");
    assert_string_equal(fed_log_level_name((fed_log_level)9), "?");
    /* removing the sink: nothing more reaches it */
    fed_log_set_sink(NULL, NULL);
    fed_log_set_level(FED_LOG_DEBUG);
    fed_log(FED_LOG_DEBUG, "to nowhere"); /* the default sink shows WARN+ only */
    assert_int_equal(r.calls, 4);
    fed_log_set_level(saved);
}

/* --------------------------------------------------------------- alloc -- */

static int fail_big(void *ctx, size_t size)
{
    (*(int *)ctx)++;
    return size > 1000;
}

static void test_alloc(void **state)
{
    void *a, *b, *c;
    int ok = 1, hook_calls = 0;
    char *s;

    (void)state;
    /* fail the 2nd allocation only */
    fed_alloc_fail_nth(2, 0);
    a = fed_malloc(10);
    b = fed_malloc(10);
    c = fed_malloc(10);
    assert_non_null(a);
    assert_null(b);
    assert_non_null(c);
    assert_int_equal(fed_alloc_count(), 3);
    fed_free(a);
    fed_free(c);
    /* sticky: the 2nd and every one after */
    fed_alloc_fail_nth(2, 1);
    a = fed_malloc(1);
    assert_non_null(a);
    assert_null(fed_calloc(1, 1));
    assert_null(fed_alloc_aligned(64));
    assert_null(fed_strdup("x"));
    assert_null(fed_realloc(a, 100)); /* a stays valid */
    fed_alloc_fail_nth(0, 0);
    fed_free(a);
    /* n == 0 disables; count restarts */
    assert_int_equal(fed_alloc_count(), 0);
    a = fed_malloc(0);
    assert_non_null(a);
    fed_free(a);
    fed_free(NULL);
    /* a caller's hook */
    fed_alloc_set_hook(fail_big, &hook_calls);
    a = fed_malloc(1000);
    assert_non_null(a);
    assert_null(fed_malloc(1001));
    assert_null(fed_calloc(2, 501));
    assert_int_equal(hook_calls, 3);
    fed_alloc_set_hook(NULL, NULL);
    fed_free(a);
    /* overflow */
    assert_int_equal(fed_mul_size(3, 5, &ok), 15);
    assert_true(ok);
    assert_int_equal(fed_mul_size(SIZE_MAX / 2 + 1, 2, &ok), 0);
    assert_false(ok);
    assert_null(fed_calloc(SIZE_MAX / 8 + 1, 8));
    assert_null(fed_alloc_aligned(SIZE_MAX - 10));
    /* aligned and zeroed; strdup; realloc keeps bytes */
    a = fed_alloc_aligned(100);
    assert_non_null(a);
    assert_int_equal((uintptr_t)a % 64, 0);
    for (int i = 0; i < 100; i++)
        assert_int_equal(((unsigned char *)a)[i], 0);
    fed_free(a);
    s = fed_strdup("federated");
    assert_string_equal(s, "federated");
    s = fed_realloc(s, 1000);
    assert_non_null(s);
    assert_string_equal(s, "federated");
    fed_free(s);
}

/* ----------------------------------------------------------------- rng -- */

/* An independent reference: splitmix64 seeding and xoshiro256** as
 * published by Blackman and Vigna, written out here a second time. */
static uint64_t ref_splitmix(uint64_t *x)
{
    uint64_t z;

    *x += 0x9e3779b97f4a7c15ULL;
    z = *x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static uint64_t ref_rotl(uint64_t v, int k) { return (v << k) | (v >> (64 - k)); }

static uint64_t ref_next(uint64_t s[4])
{
    uint64_t r = ref_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;

    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = ref_rotl(s[3], 45);
    return r;
}

static void test_rng_known_sequence(void **state)
{
    /* seed 0 and 42, computed once (and by a Python transcription of the
     * published algorithm); splitmix64 from 0 starts e220a8397b1dcdaf. */
    static const uint64_t seed0[4] = { 0x99ec5f36cb75f2b4ULL, 0xbf6e1f784956452aULL,
                                       0x1a5f849d4933e6e0ULL, 0x6aa594f1262d2d2cULL };
    static const uint64_t seed42[4] = { 0x15780b2e0c2ec716ULL, 0x6104d9866d113a7eULL,
                                        0xae17533239e499a1ULL, 0xecb8ad4703b360a1ULL };
    fed_rng r;
    uint64_t ref[4], x = 12345;

    (void)state;
    fed_rng_seed(&r, 0);
    assert_true(r.s[0] == 0xe220a8397b1dcdafULL);
    for (int i = 0; i < 4; i++)
        assert_true(fed_rng_u64(&r) == seed0[i]);
    fed_rng_seed(&r, 42);
    for (int i = 0; i < 4; i++)
        assert_true(fed_rng_u64(&r) == seed42[i]);
    /* a long stretch against the reference */
    fed_rng_seed(&r, x);
    for (int i = 0; i < 4; i++)
        ref[i] = ref_splitmix(&x);
    for (int i = 0; i < 100000; i++)
        assert_true(fed_rng_u64(&r) == ref_next(ref));
    /* derived draws follow from u64 */
    fed_rng_seed(&r, 42);
    assert_int_equal(fed_rng_u32(&r), (uint32_t)(seed42[0] >> 32));
    assert_true(fed_rng_uniform(&r) == (double)(seed42[1] >> 11) * 0x1.0p-53);
    fed_rng_seed(&r, 42);
    assert_int_equal(fed_rng_below(&r, 1000), 742);
    assert_int_equal(fed_rng_below(&r, 1000), 102);
    assert_int_equal(fed_rng_below(&r, 1000), 9);
}

static void test_rng_below_uniform(void **state)
{
    fed_rng r;
    long hist[10] = { 0 };
    const int draws = 200000;
    double chi2 = 0;

    (void)state;
    fed_rng_seed(&r, 7);
    for (int i = 0; i < draws; i++) {
        uint64_t v = fed_rng_below(&r, 10);

        assert_true(v < 10);
        hist[v]++;
    }
    for (int c = 0; c < 10; c++) {
        double e = draws / 10.0;

        chi2 += (hist[c] - e) * (hist[c] - e) / e;
    }
    /* 9 degrees of freedom: P(chi2 > 33.7) < 1e-4 */
    assert_true(chi2 < 33.7);
    for (int i = 0; i < 1000; i++) {
        assert_int_equal(fed_rng_below(&r, 1), 0);
        assert_true(fed_rng_below(&r, 3) < 3);
        assert_true(fed_rng_below(&r, UINT64_MAX) < UINT64_MAX);
        assert_true(fed_rng_below(&r, (1ULL << 63) + 1) <= (1ULL << 63));
        {
            double u = fed_rng_uniform(&r);
            float f = fed_rng_uniform_f(&r);

            assert_true(u >= 0.0 && u < 1.0);
            assert_true(f >= 0.0f && f < 1.0f);
        }
    }
}

static void test_rng_distributions(void **state)
{
    const double shapes[] = { 0.05, 0.3, 1.0, 2.5, 10.0 };
    const int n = 200000;
    fed_rng r;
    double sum = 0, sq = 0, us = 0;

    (void)state;
    fed_rng_seed(&r, 99);
    for (int i = 0; i < n; i++) {
        double z = fed_rng_normal(&r);

        sum += z;
        sq += z * z;
        us += fed_rng_uniform(&r);
    }
    /* mean within 5 sigma (sigma = 1/sqrt(n) = 0.0022), variance likewise */
    assert_true(fabs(sum / n) < 0.012);
    assert_true(fabs(sq / n - (sum / n) * (sum / n) - 1.0) < 0.016);
    assert_true(fabs(us / n - 0.5) < 0.0033);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        double k = shapes[s], m = 0, v = 0;

        for (int i = 0; i < n; i++) {
            double g = fed_rng_gamma(&r, k);

            assert_true(g >= 0.0 && isfinite(g));
            m += g;
            v += g * g;
        }
        m /= n;
        v = v / n - m * m;
        /* Gamma(k, 1): mean k, variance k; sigma of the mean sqrt(k / n) */
        assert_true(fabs(m - k) < 5 * sqrt(k / n));
        assert_true(fabs(v - k) < 0.05 * k + 0.002);
    }
}

static void test_rng_streams_fill_shuffle(void **state)
{
    fed_rng a, b, c;
    double sxy = 0, sx = 0, sy = 0, sxx = 0, syy = 0, corr;
    const int n = 100000;
    uint8_t f1[37], f2[37];
    uint32_t perm[1000];
    unsigned char seen[1000] = { 0 };
    int moved = 0;

    (void)state;
    /* same (seed, stream): same sequence; neighbours: unrelated */
    fed_rng_seed_stream(&a, 42, 7);
    fed_rng_seed_stream(&b, 42, 7);
    for (int i = 0; i < 100; i++)
        assert_true(fed_rng_u64(&a) == fed_rng_u64(&b));
    fed_rng_seed_stream(&a, 42, 7);
    assert_true(fed_rng_u64(&a) == 0x24bfb39aeb008c15ULL);
    fed_rng_seed_stream(&a, 42, 0);
    fed_rng_seed_stream(&b, 42, 1);
    fed_rng_seed(&c, 42);
    for (int i = 0; i < n; i++) {
        double x = fed_rng_uniform(&a), y = fed_rng_uniform(&b);

        assert_true(x != y);
        sx += x;
        sy += y;
        sxy += x * y;
        sxx += x * x;
        syy += y * y;
    }
    corr = (sxy / n - sx / n * sy / n) /
           sqrt((sxx / n - sx / n * sx / n) * (syy / n - sy / n * sy / n));
    assert_true(fabs(corr) < 0.02);
    /* a stream differs from the plain seed and from other seeds' streams */
    fed_rng_seed_stream(&a, 42, 0);
    fed_rng_seed_stream(&b, 43, 0);
    assert_true(fed_rng_u64(&a) != fed_rng_u64(&c));
    assert_true(fed_rng_u64(&a) != fed_rng_u64(&b));
    /* fill: deterministic, the tail included, and the adapter agrees */
    fed_rng_seed(&a, 5);
    fed_rng_seed(&b, 5);
    fed_rng_fill(&a, f1, sizeof f1);
    fed_rng_random(&b, f2, sizeof f2);
    assert_memory_equal(f1, f2, sizeof f1);
    fed_rng_seed(&a, 5);
    {
        uint64_t w = fed_rng_u64(&a);

        assert_memory_equal(f1, &w, 8);
    }
    /* shuffle: a permutation that moves things, the same for the same seed */
    for (uint32_t i = 0; i < 1000; i++)
        perm[i] = i;
    fed_rng_seed(&a, 11);
    fed_rng_shuffle_u32(&a, perm, 1000);
    for (int i = 0; i < 1000; i++) {
        assert_true(perm[i] < 1000);
        assert_int_equal(seen[perm[i]], 0);
        seen[perm[i]] = 1;
        moved += perm[i] != (uint32_t)i;
    }
    assert_true(moved > 900);
    fed_rng_shuffle_u32(&a, perm, 0);
    fed_rng_shuffle_u32(&a, perm, 1);
}

/* ---------------------------------------------------------------- pool -- */

typedef struct cover_ctx {
    atomic_int *hits;
    fed_pool *pool;
    size_t inner;
} cover_ctx;

static void count_hit(void *ctx, size_t i)
{
    cover_ctx *c = ctx;

    atomic_fetch_add(&c->hits[i], 1);
}

static void nested_body(void *ctx, size_t i)
{
    cover_ctx *c = ctx;
    cover_ctx inner = { c->hits + i * c->inner, c->pool, 0 };

    fed_pool_parallel_for(c->pool, c->inner, count_hit, &inner);
}

typedef struct count_task {
    fed_pool_task task;
    atomic_int *counter;
    fed_pool *pool;
    atomic_int *hits; /* optional: run a parallel_for inside the task */
} count_task;

static void count_task_fn(fed_pool_task *t)
{
    count_task *ct = (count_task *)t;

    if (ct->hits) {
        cover_ctx c = { ct->hits, ct->pool, 0 };

        fed_pool_parallel_for(ct->pool, 50, count_hit, &c);
    }
    atomic_fetch_add(ct->counter, 1);
}

static void test_pool_parallel_for(void **state)
{
    const int workers[] = { 0, 1, 2, 4 };
    const size_t sizes[] = { 0, 1, 2, 7, 1000 };
    static atomic_int hits[1000];

    (void)state;
    alarm(120); /* a deadlock fails the test instead of hanging it */
    for (size_t w = 0; w < 4; w++) {
        fed_pool *p = NULL;

        assert_err(fed_pool_new(workers[w], &p), FED_OK);
        assert_int_equal(fed_pool_workers(p), workers[w]);
        for (size_t s = 0; s < 5; s++) {
            cover_ctx c = { hits, p, 0 };

            for (size_t i = 0; i < 1000; i++)
                atomic_store(&hits[i], 0);
            fed_pool_parallel_for(p, sizes[s], count_hit, &c);
            for (size_t i = 0; i < sizes[s]; i++)
                assert_int_equal(atomic_load(&hits[i]), 1);
            for (size_t i = sizes[s]; i < 1000; i++)
                assert_int_equal(atomic_load(&hits[i]), 0);
        }
        /* nested: every outer piece runs its own parallel_for */
        for (int rep = 0; rep < 20; rep++) {
            cover_ctx c = { hits, p, 100 };

            for (size_t i = 0; i < 800; i++)
                atomic_store(&hits[i], 0);
            fed_pool_parallel_for(p, 8, nested_body, &c);
            for (size_t i = 0; i < 800; i++)
                assert_int_equal(atomic_load(&hits[i]), 1);
        }
        fed_pool_free(p);
    }
    /* NULL pool runs inline */
    {
        cover_ctx c = { hits, NULL, 0 };

        for (size_t i = 0; i < 10; i++)
            atomic_store(&hits[i], 0);
        fed_pool_parallel_for(NULL, 10, count_hit, &c);
        for (size_t i = 0; i < 10; i++)
            assert_int_equal(atomic_load(&hits[i]), 1);
    }
    alarm(0);
}

static void test_pool_submit(void **state)
{
    const int workers[] = { 0, 1, 2, 4 };
    static count_task tasks[64];
    static atomic_int hits[64 * 50];

    (void)state;
    alarm(120);
    for (size_t w = 0; w < 4; w++) {
        fed_pool *p = NULL;
        atomic_int counter = 0;

        assert_err(fed_pool_new(workers[w], &p), FED_OK);
        for (size_t i = 0; i < 64 * 50; i++)
            atomic_store(&hits[i], 0);
        for (int i = 0; i < 64; i++) {
            tasks[i].task.fn = count_task_fn;
            tasks[i].counter = &counter;
            tasks[i].pool = p;
            /* half of them split their own work over the same pool */
            tasks[i].hits = i % 2 ? hits + (size_t)i * 50 : NULL;
            fed_pool_submit(p, &tasks[i].task);
        }
        fed_pool_free(p); /* waits for the queued tasks */
        assert_int_equal(atomic_load(&counter), 64);
        for (size_t i = 0; i < 64 * 50; i++)
            assert_int_equal(atomic_load(&hits[i]), (i / 50) % 2 ? 1 : 0);
    }
    fed_pool_free(NULL);
    assert_int_equal(fed_pool_workers(NULL), 0);
    alarm(0);
}

/* Idle-lane tasks run one at a time, in order, on a thread whose policy is
 * SCHED_IDLE (or whose nice is 19 where that is refused), never on the
 * caller's; fed_pool_free waits for them; no workers: inline. */
typedef struct idle_task {
    fed_pool_task task;
    int index;
    int *order;
    atomic_int *next;
    pthread_t caller;
    atomic_int *lowered, *elsewhere;
} idle_task;

static void idle_task_fn(fed_pool_task *t)
{
    idle_task *it = (idle_task *)t;
    struct sched_param sp;
    int policy = -1;

    it->order[atomic_fetch_add(it->next, 1)] = it->index;
    if (pthread_getschedparam(pthread_self(), &policy, &sp) == 0 &&
        (policy == SCHED_IDLE || getpriority(PRIO_PROCESS, (id_t)gettid()) == 19))
        atomic_fetch_add(it->lowered, 1);
    if (!pthread_equal(pthread_self(), it->caller))
        atomic_fetch_add(it->elsewhere, 1);
}

static void test_pool_idle_lane(void **state)
{
    const int workers[] = { 0, 2 };
    idle_task tasks[16];
    int order[16];

    (void)state;
    alarm(120);
    for (size_t w = 0; w < 2; w++) {
        fed_pool *p = NULL;
        atomic_int next = 0, lowered = 0, elsewhere = 0;

        assert_err(fed_pool_new(workers[w], &p), FED_OK);
        for (int i = 0; i < 16; i++) {
            tasks[i] = (idle_task){ .task.fn = idle_task_fn, .index = i, .order = order,
                                    .next = &next, .caller = pthread_self(),
                                    .lowered = &lowered, .elsewhere = &elsewhere };
            fed_pool_submit_idle(p, &tasks[i].task);
        }
        fed_pool_free(p); /* waits for the idle lane too */
        assert_int_equal(atomic_load(&next), 16);
        for (int i = 0; i < 16; i++)
            assert_int_equal(order[i], i);
        assert_int_equal(atomic_load(&lowered), workers[w] ? 16 : 0);
        assert_int_equal(atomic_load(&elsewhere), workers[w] ? 16 : 0);
    }
    alarm(0);
}

static fed_err try_pool_new(void *ctx)
{
    fed_pool *p = (fed_pool *)1;
    fed_err e = fed_pool_new(3, &p);

    (void)ctx;
    if (e == FED_OK)
        fed_pool_free(p);
    else
        assert_null(p);
    return e;
}

static void test_pool_errors(void **state)
{
    fed_pool *p = (fed_pool *)1;
    unsigned long n;

    (void)state;
    assert_err(fed_pool_new(-1, &p), FED_ERR_INVAL);
    assert_null(p);
    assert_err(fed_pool_new(100000, &p), FED_ERR_INVAL);
    n = fed_test_alloc_sweep(try_pool_new, NULL, 0, 10);
    assert_int_equal(n, 3); /* the pool, then its thread array */
}

/* ------------------------------------------------------------- options -- */

typedef struct test_cfg {
    int verbose;
    int epochs;
    uint64_t seed;
    double lr;
    char name[16];
    char data[64];
} test_cfg;

static const fed_opt table[] = {
    FED_OPT_DEF(test_cfg, verbose, "verbose", FED_OPT_BOOL, "1", 0, 0, "talk more"),
    FED_OPT_DEF(test_cfg, epochs, "epochs", FED_OPT_INT, "10", 1, 1000, "local epochs"),
    FED_OPT_DEF(test_cfg, seed, "seed", FED_OPT_U64, "42", 0, 0, "random seed"),
    FED_OPT_DEF(test_cfg, lr, "lr", FED_OPT_DOUBLE, "0.05", 0, 10, "learning rate"),
    FED_OPT_DEF(test_cfg, name, "name", FED_OPT_STR, "node", 0, 0, "node name"),
    FED_OPT_DEF(test_cfg, data, "data", FED_OPT_STR, NULL, 0, 0, "data set"),
};
#define NT (sizeof table / sizeof *table)

static void defaults(test_cfg *c)
{
    fed_opt_error e;

    memset(c, 0x5a, sizeof *c);
    assert_err(fed_opt_defaults(table, NT, c, &e), FED_OK);
}

static void test_opt_defaults_and_types(void **state)
{
    test_cfg c;
    fed_opt_error e;

    (void)state;
    defaults(&c);
    assert_int_equal(c.verbose, 1);
    assert_int_equal(c.epochs, 10);
    assert_true(c.seed == 42);
    assert_true(c.lr == 0.05);
    assert_string_equal(c.name, "node");
    assert_string_equal(c.data, "");
    assert_ptr_equal(fed_opt_find(table, NT, "lr"), &table[3]);
    assert_null(fed_opt_find(table, NT, "l"));
    /* every type from text */
    assert_err(fed_opt_set(table, NT, &c, "verbose", "no", "t", &e), FED_OK);
    assert_int_equal(c.verbose, 0);
    assert_err(fed_opt_set(table, NT, &c, "verbose", "TRUE", "t", &e), FED_OK);
    assert_int_equal(c.verbose, 1);
    assert_err(fed_opt_set(table, NT, &c, "verbose", "off", "t", &e), FED_OK);
    assert_int_equal(c.verbose, 0);
    assert_err(fed_opt_set(table, NT, &c, "epochs", "1000", "t", &e), FED_OK);
    assert_int_equal(c.epochs, 1000);
    assert_err(fed_opt_set(table, NT, &c, "seed", "18446744073709551615", "t", &e), FED_OK);
    assert_true(c.seed == UINT64_MAX);
    assert_err(fed_opt_set(table, NT, &c, "lr", "1e-3", "t", &e), FED_OK);
    assert_true(c.lr == 1e-3);
    assert_err(fed_opt_set(table, NT, &c, "name", "fifteen-chars-x", "t", &e), FED_OK);
    assert_string_equal(c.name, "fifteen-chars-x");
    /* bad values name the option and where */
    assert_err(fed_opt_set(table, NT, &c, "verbose", "maybe", "--verbose", &e), FED_ERR_BAD_VALUE);
    assert_has(e.msg, "--verbose");
    assert_has(e.msg, "'maybe'");
    assert_err(fed_opt_set(table, NT, &c, "epochs", "12x", "w", &e), FED_ERR_BAD_VALUE);
    assert_has(e.msg, "'epochs'");
    assert_err(fed_opt_set(table, NT, &c, "epochs", "", "w", &e), FED_ERR_BAD_VALUE);
    assert_err(fed_opt_set(table, NT, &c, "epochs", "99999999999", "w", &e), FED_ERR_BAD_VALUE);
    assert_err(fed_opt_set(table, NT, &c, "seed", "-1", "w", &e), FED_ERR_BAD_VALUE);
    assert_has(e.msg, "'seed'");
    assert_err(fed_opt_set(table, NT, &c, "seed", " -1", "w", &e), FED_ERR_BAD_VALUE);
    assert_err(fed_opt_set(table, NT, &c, "seed", "18446744073709551616", "w", &e),
               FED_ERR_BAD_VALUE);
    assert_err(fed_opt_set(table, NT, &c, "lr", "fast", "w", &e), FED_ERR_BAD_VALUE);
    assert_err(fed_opt_set(table, NT, &c, "lr", "nan", "w", &e), FED_ERR_BAD_VALUE);
    assert_err(fed_opt_set(table, NT, &c, "lr", "inf", "w", &e), FED_ERR_BAD_VALUE);
    /* out of range */
    assert_err(fed_opt_set(table, NT, &c, "epochs", "0", "w", &e), FED_ERR_RANGE);
    assert_has(e.msg, "w: option 'epochs': 0 is outside [1, 1000]");
    assert_err(fed_opt_set(table, NT, &c, "epochs", "1001", "w", &e), FED_ERR_RANGE);
    assert_err(fed_opt_set(table, NT, &c, "lr", "10.5", "w", &e), FED_ERR_RANGE);
    assert_err(fed_opt_set(table, NT, &c, "lr", "-0.1", "w", &e), FED_ERR_RANGE);
    assert_has(e.msg, "'lr'");
    /* overlong string: refused, the field unchanged */
    assert_err(fed_opt_set(table, NT, &c, "name", "sixteen-chars-xx", "w", &e),
               FED_ERR_TOO_LARGE);
    assert_has(e.msg, "'name'");
    assert_string_equal(c.name, "fifteen-chars-x");
    assert_err(fed_opt_set(table, NT, &c, "nmae", "x", "w", &e), FED_ERR_UNKNOWN_OPTION);
    assert_has(e.msg, "'nmae'");
    assert_int_equal(c.epochs, 1000); /* failed sets changed nothing */
}

/* A range refusal prints an integer option's bounds as integers (never
 * 1.04858e+06), a decimal option's as %g. */
static void test_opt_range_integers(void **state)
{
    static const fed_opt wide[] = {
        FED_OPT_DEF(test_cfg, epochs, "hash-buckets", FED_OPT_INT, "1024", 2, 1048576, "ids"),
        FED_OPT_DEF(test_cfg, seed, "start", FED_OPT_U64, "0", 0, 100000000000.0, "seconds"),
        FED_OPT_DEF(test_cfg, lr, "clip", FED_OPT_DOUBLE, "1", 1e-6, 1e6, "bound"),
    };
    test_cfg c;
    fed_opt_error e;

    (void)state;
    assert_err(fed_opt_set(wide, 3, &c, "hash-buckets", "1", "--hash-buckets", &e),
               FED_ERR_RANGE);
    assert_string_equal(e.msg, "--hash-buckets: option 'hash-buckets': 1 is outside [2, 1048576]");
    assert_err(fed_opt_set(wide, 3, &c, "start", "100000000001", "w", &e), FED_ERR_RANGE);
    assert_string_equal(e.msg, "w: option 'start': 100000000001 is outside [0, 100000000000]");
    assert_err(fed_opt_set(wide, 3, &c, "clip", "0", "w", &e), FED_ERR_RANGE);
    assert_string_equal(e.msg, "w: option 'clip': 0 is outside [1e-06, 1e+06]");
}

static void test_opt_argv(void **state)
{
    test_cfg c;
    fed_opt_error e;
    char *pos[16];
    int npos = -1;

    (void)state;
    defaults(&c);
    {
        char *argv[] = { "train", "--no-verbose", "--epochs=3", "--lr", "0.25", "x.csv",
                         "--name=a=b", "--seed", "7", "--", "--epochs", "-q" };

        assert_err(fed_opt_parse_argv(table, NT, &c, 12, argv, pos, &npos, &e), FED_OK);
        assert_int_equal(c.verbose, 0);
        assert_int_equal(c.epochs, 3);
        assert_true(c.lr == 0.25);
        assert_string_equal(c.name, "a=b");
        assert_true(c.seed == 7);
        assert_int_equal(npos, 4);
        assert_string_equal(pos[0], "train");
        assert_string_equal(pos[1], "x.csv");
        assert_string_equal(pos[2], "--epochs");
        assert_string_equal(pos[3], "-q");
    }
    {
        char *argv[] = { "--verbose", "--verbose=false" };

        assert_err(fed_opt_parse_argv(table, NT, &c, 1, argv, pos, &npos, &e), FED_OK);
        assert_int_equal(c.verbose, 1);
        assert_err(fed_opt_parse_argv(table, NT, &c, 1, argv + 1, pos, &npos, &e), FED_OK);
        assert_int_equal(c.verbose, 0);
        assert_int_equal(npos, 0);
    }
    {
        /* a flag given twice: an error naming both, whatever the spelling
           (it was the last one winning: --epochs 1 --epochs 2 trained 2) */
        char *twice[] = { "--epochs", "1", "--lr=0.5", "--epochs", "2" };
        char *eq[] = { "--epochs=1", "--epochs", "2" };
        char *no[] = { "--verbose", "--no-verbose" };

        defaults(&c);
        assert_err(fed_opt_parse_argv(table, NT, &c, 5, twice, pos, &npos, &e), FED_ERR_EXISTS);
        assert_string_equal(e.msg, "option '--epochs' given twice ('--epochs 1' and "
                                   "'--epochs 2'): give it once");
        assert_err(fed_opt_parse_argv(table, NT, &c, 3, eq, pos, &npos, &e), FED_ERR_EXISTS);
        assert_has(e.msg, "('--epochs=1' and '--epochs 2')");
        assert_err(fed_opt_parse_argv(table, NT, &c, 2, no, pos, &npos, &e), FED_ERR_EXISTS);
        assert_has(e.msg, "('--verbose' and '--no-verbose')");
    }
    {
        /* floats in decimal only: strtod took 0x10 as 16 and 0x1p-2 as 0.25 */
        const char *bad[] = { "0x10", "0x1p-2", "-0X1", "inf", "-infinity", "nan", " 1",
                              "1e", ".", "1e+", "e5", "1.5x", "" };
        const char *good[] = { "1", "0.25", ".5", "1e-3", "2.5E+0", "+0.125", "3." };

        for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
            assert_err(fed_opt_set(table, NT, &c, "lr", bad[i], "--lr", &e), FED_ERR_BAD_VALUE);
            assert_has(e.msg, "is not a decimal number");
        }
        for (size_t i = 0; i < sizeof good / sizeof *good; i++)
            assert_err(fed_opt_set(table, NT, &c, "lr", good[i], "--lr", &e), FED_OK);
        assert_err(fed_opt_set(table, NT, &c, "lr", "0x10", "--lr", &e), FED_ERR_BAD_VALUE);
        assert_string_equal(e.msg, "--lr: option 'lr': '0x10' is not a decimal number");
    }
    {
        /* names and values from outside are escaped in messages */
        char *argv[] = { "--ep\033[2Jochs", "1" };
        char *val[] = { "--lr", "\033]0;x\007\\" };

        assert_err(fed_opt_parse_argv(table, NT, &c, 2, argv, pos, &npos, &e),
                   FED_ERR_UNKNOWN_OPTION);
        assert_string_equal(e.msg, "unknown option '--ep\\x1b[2Jochs'");
        assert_err(fed_opt_parse_argv(table, NT, &c, 2, val, pos, &npos, &e), FED_ERR_BAD_VALUE);
        assert_string_equal(e.msg, "--lr: option 'lr': '\\x1b]0;x\\x07\\\\' is not a decimal "
                                   "number");
    }
    {
        char *argv[] = { "--epochz", "3" };

        assert_err(fed_opt_parse_argv(table, NT, &c, 2, argv, pos, &npos, &e),
                   FED_ERR_UNKNOWN_OPTION);
        assert_has(e.msg, "--epochz");
    }
    {
        char *argv[] = { "--no-lr" }; /* --no- only for booleans */

        assert_err(fed_opt_parse_argv(table, NT, &c, 1, argv, pos, &npos, &e),
                   FED_ERR_UNKNOWN_OPTION);
        assert_has(e.msg, "--no-lr");
    }
    {
        char *argv[] = { "--lr", "abc" };

        assert_err(fed_opt_parse_argv(table, NT, &c, 2, argv, pos, &npos, &e), FED_ERR_BAD_VALUE);
        assert_has(e.msg, "--lr");
        assert_has(e.msg, "'abc'");
    }
    {
        char *argv[] = { "--epochs=5000" };

        assert_err(fed_opt_parse_argv(table, NT, &c, 1, argv, pos, &npos, &e), FED_ERR_RANGE);
        assert_has(e.msg, "--epochs");
    }
    {
        char *argv[] = { "--epochs" };

        assert_err(fed_opt_parse_argv(table, NT, &c, 1, argv, pos, &npos, &e), FED_ERR_BAD_VALUE);
        assert_has(e.msg, "'--epochs' needs a value");
    }
    {
        char *argv[] = { "--name", "this-is-far-too-long" };

        assert_err(fed_opt_parse_argv(table, NT, &c, 2, argv, pos, &npos, &e), FED_ERR_TOO_LARGE);
        assert_has(e.msg, "--name");
    }
}

static void test_opt_ini(void **state)
{
    test_cfg c;
    fed_opt_error e;
    const char *good = "; comment\n"
                       "[train]\n"
                       "epochs = 4\n"
                       "lr=0.5\r\n"
                       "\n"
                       "[node]\n"
                       "name = edge-7\n"
                       "verbose = no\n";

    (void)state;
    defaults(&c);
    assert_err(fed_opt_parse_ini_buf(table, NT, &c, good, strlen(good), "run.ini", &e), FED_OK);
    assert_int_equal(c.epochs, 4);
    assert_true(c.lr == 0.5);
    assert_string_equal(c.name, "edge-7");
    assert_int_equal(c.verbose, 0);
    {
        const char *t = "epochs = 4\n\nlrr = 0.1\n";

        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "run.ini", &e),
                   FED_ERR_UNKNOWN_OPTION);
        assert_has(e.msg, "run.ini:3");
        assert_has(e.msg, "'lrr'");
    }
    {
        /* an unknown key's bytes reached the terminal raw: escaped now */
        const char *t = "\033]2;owned\007\xc3\xa9 = 1\n";

        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "run.ini", &e),
                   FED_ERR_UNKNOWN_OPTION);
        assert_string_equal(e.msg, "run.ini:1: unknown option '\\x1b]2;owned\\x07\\xc3\\xa9'");
    }
    {
        const char *t = "[a]\nepochs = 4\nlr = quick\n";

        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "cfg.ini", &e),
                   FED_ERR_BAD_VALUE);
        assert_has(e.msg, "cfg.ini:3");
        assert_has(e.msg, "'lr'");
        assert_has(e.msg, "'quick'");
    }
    {
        const char *t = "epochs = 0\n";

        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "cfg.ini", &e),
                   FED_ERR_RANGE);
        assert_has(e.msg, "cfg.ini:1");
        assert_has(e.msg, "'epochs'");
    }
    {
        const char *t = "name = 0123456789abcdefXYZ\n";

        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "cfg.ini", &e),
                   FED_ERR_TOO_LARGE);
        assert_has(e.msg, "cfg.ini:1");
        assert_has(e.msg, "'name'");
    }
    {
        const char *t = "epochs = 3\njust words\n";

        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "cfg.ini", &e),
                   FED_ERR_FORMAT);
        assert_has(e.msg, "cfg.ini:2");
    }
    {
        const char t[] = "epochs = 3\nlr = 0.1\0\n";

        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, sizeof t - 1, "nul.ini", &e),
                   FED_ERR_FORMAT);
        assert_has(e.msg, "nul.ini:2");
    }
    {
        char t[600];

        memset(t, 'x', sizeof t);
        memcpy(t, "name = ", 7);
        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, sizeof t, "long.ini", &e),
                   FED_ERR_TOO_LARGE);
        assert_has(e.msg, "long.ini:1");
    }
    {
        /* a key given twice: refused with both lines, in one section or two
           (sections do not change names) */
        const char *t = "epochs = 4\n; note\nlr = 0.5\nepochs = 5\n";

        defaults(&c);
        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "config.ini", &e),
                   FED_ERR_EXISTS);
        assert_string_equal(e.msg, "config.ini:4: option 'epochs' given twice (first at line 1)");
        t = "[train]\nlr = 0.5\n[node]\nname = a\nlr = 0.25\n";
        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "run.ini", &e),
                   FED_ERR_EXISTS);
        assert_string_equal(e.msg, "run.ini:5: option 'lr' given twice (first at line 2)");
        /* an indented line is libinih's continuation of the key before it */
        t = "name = a\n  epochs = 3\n";
        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "run.ini", &e),
                   FED_ERR_FORMAT);
        assert_has(e.msg, "run.ini:2: indented line continues option 'name' from line 1");
        /* each parse starts afresh: the same key in two files is fine */
        t = "epochs = 6\n";
        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "a.ini", &e), FED_OK);
        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "b.ini", &e), FED_OK);
        assert_int_equal(c.epochs, 6);
    }
    {
        /* comments (docs/settings.md): a whole line starting with '#' or ';',
           or a ';' after a space ending a value; a '#' is never one inside
           a value, which may be a path holding it */
        const char *t = "# whole line\n; whole line\nepochs = 3 ; three\n"
                        "data = runs/#2/d.csv\nname = a;b\n";

        defaults(&c);
        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "c.ini", &e), FED_OK);
        assert_int_equal(c.epochs, 3);
        assert_string_equal(c.data, "runs/#2/d.csv");
        assert_string_equal(c.name, "a;b");
        t = "data = runs/d.csv # the data\n";
        assert_err(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "c.ini", &e), FED_OK);
        assert_string_equal(c.data, "runs/d.csv # the data");
        t = "epochs = 3 # three\n";
        assert_true(fed_opt_parse_ini_buf(table, NT, &c, t, strlen(t), "c.ini", &e) != FED_OK);
        assert_has(e.msg, "c.ini:1");
        assert_has(e.msg, "'3 # three' is not an integer");
    }
    /* an empty buffer sets nothing */
    defaults(&c);
    assert_err(fed_opt_parse_ini_buf(table, NT, &c, "", 0, "empty.ini", &e), FED_OK);
    assert_int_equal(c.epochs, 10);
}

/* A deprecated spelling (FED_OPT_ALIAS) sets its canonical option, as a flag
 * (--old, --old=V, --no-old for a boolean), an INI key and through
 * fed_opt_set; each parse warns once naming the new spelling; an alias and
 * its option in one file is a key given twice; --help lists only the new. */
static const fed_opt alias_table[] = {
    FED_OPT_DEF(test_cfg, verbose, "verbose", FED_OPT_BOOL, "1", 0, 0, "talk more"),
    FED_OPT_DEF(test_cfg, lr, "lr", FED_OPT_DOUBLE, "0.05", 0, 10, "learning rate"),
    FED_OPT_ALIAS("rate", "lr"),
    FED_OPT_ALIAS("chatty", "verbose"),
};
#define NA (sizeof alias_table / sizeof *alias_table)

/* --help-man's roff: flags and hyphens as \-, backslashes as \e, a line
 * that would start with '.' or '\'' guarded, text lines under 80 bytes, a
 * new sentence on a new line, aliases not listed. */
static void test_opt_man(void **state)
{
    typedef struct {
        int n;
        char s[32];
    } man_cfg;
    static const fed_opt t[] = {
        FED_OPT_DEF(man_cfg, n, "max-n", FED_OPT_INT, "4", 0, 9,
                    "how many. .dots and 'quotes start lines here; a \\ backslash, e.g. this "
                    "and a long tail of words to wrap past eighty columns of roff text at last"),
        FED_OPT_DEF(man_cfg, s, "name", FED_OPT_STR, "", 0, 0, ""),
        FED_OPT_ALIAS("old-n", "max-n"),
    };
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    char *line, *save = NULL;
    int lines = 0;

    (void)state;
    assert_non_null(f);
    fed_opt_print_man(t, 3, f);
    fclose(f);
    assert_has(buf, ".TP\n\\fB\\-\\-max\\-n\\fR \\fIN\\fR\nhow many.\n\\&.dots and 'quotes");
    assert_has(buf, "a \\e backslash, e.g. this");
    assert_has(buf, "(default 4)\n.TP\n\\fB\\-\\-name\\fR \\fIS\\fR\n");
    assert_null(strstr(buf, "old"));
    for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save), lines++) {
        assert_true(strlen(line) < 80);
        assert_true(line[0] != '\'' && (line[0] != '.' || !strcmp(line, ".TP")));
    }
    assert_true(lines >= 6);
    free(buf);
}

/* A string option that may be given bare (FED_OPT_DEF_IMPLICIT): alone, or
 * followed by another option, it takes its implicit value; a value given
 * wins; --help says what bare means. */
typedef struct implicit_cfg {
    char http[64];
    int verbose;
} implicit_cfg;

static const fed_opt implicit_table[] = {
    FED_OPT_DEF_IMPLICIT(implicit_cfg, http, "http", "", "http://127.0.0.1:9464", "serve"),
    FED_OPT_DEF(implicit_cfg, verbose, "verbose", FED_OPT_BOOL, "0", 0, 0, "talk"),
};

static void test_opt_implicit(void **state)
{
    implicit_cfg c;
    fed_opt_error e;
    char *pos[8];
    int npos;
    char *bare_end[] = {"--http"};
    char *bare_mid[] = {"--http", "--verbose"};
    char *given[] = {"--http", "9000", "--verbose"};
    char *eq[] = {"--http=0.0.0.0:1"};
    char *buf = NULL;
    size_t len = 0;
    FILE *f;

    (void)state;
    assert_err(fed_opt_defaults(implicit_table, 2, &c, &e), FED_OK);
    assert_string_equal(c.http, "");
    assert_err(fed_opt_parse_argv(implicit_table, 2, &c, 1, bare_end, pos, &npos, &e), FED_OK);
    assert_string_equal(c.http, "http://127.0.0.1:9464");
    assert_err(fed_opt_defaults(implicit_table, 2, &c, &e), FED_OK);
    assert_err(fed_opt_parse_argv(implicit_table, 2, &c, 2, bare_mid, pos, &npos, &e), FED_OK);
    assert_string_equal(c.http, "http://127.0.0.1:9464");
    assert_int_equal(c.verbose, 1);
    assert_err(fed_opt_parse_argv(implicit_table, 2, &c, 3, given, pos, &npos, &e), FED_OK);
    assert_string_equal(c.http, "9000");
    assert_int_equal(npos, 0);
    assert_err(fed_opt_parse_argv(implicit_table, 2, &c, 1, eq, pos, &npos, &e), FED_OK);
    assert_string_equal(c.http, "0.0.0.0:1");
    f = open_memstream(&buf, &len);
    assert_non_null(f);
    fed_opt_print_help(implicit_table, 2, f);
    fclose(f);
    assert_has(buf, "(given bare: http://127.0.0.1:9464)");
    free(buf);
}

static void test_opt_alias(void **state)
{
    test_cfg c;
    fed_opt_error e;
    log_rec r;
    fed_log_level saved = fed_log_get_level();
    char *argv[] = {"--rate", "0.5", "--no-chatty"};
    char *both_argv[] = {"--rate", "0.5", "--lr=0.25"};
    char *pos[4];
    int npos = 0;
    const char *ini = "rate = 0.125\n";
    const char *both = "lr = 1\nrate = 2\n";
    char buf[4096] = {0};
    FILE *f = fmemopen(buf, sizeof buf, "w");

    (void)state;
    memset(&r, 0, sizeof r);
    fed_log_set_sink(rec_sink, &r);
    fed_log_set_level(FED_LOG_INFO);
    memset(&e, 0, sizeof e);
    memset(&c, 0, sizeof c);
    assert_err(fed_opt_defaults(alias_table, NA, &c, &e), FED_OK);
    assert_true(c.lr == 0.05); /* the alias has no default of its own to apply */
    assert_ptr_equal(fed_opt_find(alias_table, NA, "rate"), &alias_table[1]);

    assert_err(fed_opt_parse_argv(alias_table, NA, &c, 3, argv, pos, &npos, &e), FED_OK);
    assert_true(c.lr == 0.5);
    assert_int_equal(c.verbose, 0);
    assert_int_equal(npos, 0);
    assert_int_equal(r.calls, 2); /* --rate, --chatty: one warning each */
    assert_int_equal(r.last_level, FED_LOG_WARN);
    assert_string_equal(r.last, "--chatty is deprecated: use --verbose");
    /* an alias and its option both given: one would be lost (fedsim's
       --sample 0.5 --fraction 0.3 took 0.3 without a word) */
    assert_err(fed_opt_parse_argv(alias_table, NA, &c, 3, both_argv, pos, &npos, &e),
               FED_ERR_EXISTS);
    assert_string_equal(e.msg, "'--rate 0.5' and '--lr=0.25' set the same option '--lr': "
                               "give it once");

    r.calls = 0;
    assert_err(fed_opt_parse_ini_buf(alias_table, NA, &c, ini, strlen(ini), "run.ini", &e),
               FED_OK);
    assert_true(c.lr == 0.125);
    assert_int_equal(r.calls, 1);
    assert_string_equal(r.last, "run.ini:1: key 'rate' is deprecated: use 'lr'");

    assert_err(fed_opt_parse_ini_buf(alias_table, NA, &c, both, strlen(both), "run.ini", &e),
               FED_ERR_EXISTS);
    assert_non_null(strstr(e.msg, "given twice"));

    r.calls = 0;
    assert_err(fed_opt_set(alias_table, NA, &c, "rate", "3", "--rate", &e), FED_OK);
    assert_true(c.lr == 3);
    assert_int_equal(r.calls, 1);
    assert_err(fed_opt_set(alias_table, NA, &c, "rate", "11", "--rate", &e), FED_ERR_RANGE);
    assert_non_null(strstr(e.msg, "'lr'")); /* errors name the option it sets */

    assert_non_null(f);
    fed_opt_print_help(alias_table, NA, f);
    fclose(f);
    assert_non_null(strstr(buf, "--lr"));
    assert_null(strstr(buf, "--rate"));
    assert_null(strstr(buf, "--chatty"));
    fed_log_set_sink(NULL, NULL);
    fed_log_set_level(saved);
}

static void test_opt_load_and_help(void **state)
{
    char path[] = "/tmp/test_core.XXXXXX";
    int fd = mkstemp(path);
    const char *ini = "epochs = 4\nlr = 0.5\nname = from-file\n";
    test_cfg c;
    fed_opt_error e;
    char *pos[16], cfgarg[64];
    int npos;
    FILE *f;
    char help[4096];
    size_t hl;

    (void)state;
    assert_true(fd >= 0);
    assert_int_equal(write(fd, ini, strlen(ini)), (ssize_t)strlen(ini));
    close(fd);
    {
        /* file over defaults, flags over the file, in any order */
        char *argv[] = { "--lr", "0.125", "--config", path, "run" };

        memset(&c, 0, sizeof c);
        assert_err(fed_opt_load(table, NT, &c, 5, argv, pos, &npos, &e), FED_OK);
        assert_int_equal(c.epochs, 4);        /* file */
        assert_true(c.lr == 0.125);           /* flag */
        assert_string_equal(c.name, "from-file");
        assert_true(c.seed == 42);            /* default */
        assert_int_equal(npos, 1);
        assert_string_equal(pos[0], "run");
    }
    {
        char *argv[] = { cfgarg, "--name=cli" };

        snprintf(cfgarg, sizeof cfgarg, "--config=%s", path);
        assert_err(fed_opt_load(table, NT, &c, 2, argv, pos, &npos, &e), FED_OK);
        assert_string_equal(c.name, "cli");
        assert_int_equal(c.epochs, 4);
        assert_int_equal(npos, 0);
    }
    {
        /* which options a source set (given), not just their values: the
           file's epochs, lr and name, the flag's seed given at its default */
        char *argv[] = { "--config", path, "--seed", "42" };
        unsigned char given[NT];

        memset(given, 7, sizeof given);
        assert_err(fed_opt_load_given(table, NT, &c, 4, argv, pos, &npos, given, &e), FED_OK);
        assert_true(c.seed == 42);
        assert_int_equal(given[0], 0); /* verbose */
        assert_int_equal(given[1], 1); /* epochs, from the file */
        assert_int_equal(given[2], 1); /* seed, by a flag at its default */
        assert_int_equal(given[3], 1);
        assert_int_equal(given[4], 1);
        assert_int_equal(given[5], 0); /* data */
    }
    {
        /* a second --config: refused naming both (b.ini was read, a.ini
           silently not) */
        char *argv[] = { "--config", path, "--epochs", "3", cfgarg };

        snprintf(cfgarg, sizeof cfgarg, "--config=/tmp/b.ini");
        assert_err(fed_opt_load(table, NT, &c, 5, argv, pos, &npos, &e), FED_ERR_EXISTS);
        assert_has(e.msg, "option '--config' given twice");
        assert_has(e.msg, path);
        assert_has(e.msg, "'/tmp/b.ini'");
    }
    {
        char *argv[] = { "--config", "/nonexistent/x.ini" };

        assert_err(fed_opt_load(table, NT, &c, 2, argv, pos, &npos, &e), FED_ERR_IO);
        assert_has(e.msg, "/nonexistent/x.ini");
    }
    {
        char *argv[] = { "--config" };

        assert_err(fed_opt_load(table, NT, &c, 1, argv, pos, &npos, &e), FED_ERR_BAD_VALUE);
        assert_has(e.msg, "'--config' needs a value");
    }
    f = fopen(path, "w");
    fputs("epochs = 4\nbogus = 1\n", f);
    fclose(f);
    {
        char *argv[] = { "--config", path };

        assert_err(fed_opt_load(table, NT, &c, 2, argv, pos, &npos, &e), FED_ERR_UNKNOWN_OPTION);
        assert_has(e.msg, path);
        assert_has(e.msg, ":2");
        assert_has(e.msg, "'bogus'");
    }
    unlink(path);
    f = tmpfile();
    assert_non_null(f);
    fed_opt_print_help(table, NT, f);
    rewind(f);
    hl = fread(help, 1, sizeof help - 1, f);
    help[hl] = 0;
    fclose(f);
    assert_has(help, "--lr X");
    assert_has(help, "learning rate (default 0.05)");
    assert_has(help, "--verbose ");
    assert_has(help, "--name S");
    assert_has(help, "--epochs N");
}

/* ---- bytes.h ---- */

static void test_bytes_integers(void **state)
{
    static const uint8_t img[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
    uint8_t b[10];

    (void)state;
    memset(b, 0xee, sizeof b);
    fed_put_u16le(b + 1, 0x0708);
    assert_memory_equal(b + 1, img, 2);
    assert_int_equal(b[0], 0xee);
    assert_int_equal(b[3], 0xee);
    assert_int_equal(fed_get_u16le(img), 0x0708);
    fed_put_u32le(b + 1, 0x05060708u);
    assert_memory_equal(b + 1, img, 4);
    assert_int_equal(b[5], 0xee);
    assert_int_equal(fed_get_u32le(img), 0x05060708u);
    fed_put_u64le(b + 1, 0x0102030405060708ull);
    assert_memory_equal(b + 1, img, 8);
    assert_int_equal(b[9], 0xee);
    assert_true(fed_get_u64le(img) == 0x0102030405060708ull);
    /* the top bits survive (no sign extension, no truncation) */
    fed_put_u16le(b, 0xffff);
    assert_int_equal(fed_get_u16le(b), 0xffff);
    fed_put_u32le(b, 0xfffffffeu);
    assert_int_equal(fed_get_u32le(b), 0xfffffffeu);
    fed_put_u64le(b, UINT64_MAX - 1);
    assert_true(fed_get_u64le(b) == UINT64_MAX - 1);
}

static void test_bytes_floats(void **state)
{
    static const uint8_t one_f32[4] = {0x00, 0x00, 0x80, 0x3f};
    static const uint8_t neg2_f64[8] = {0, 0, 0, 0, 0, 0, 0x00, 0xc0};
    uint8_t b[8];
    float nan_f = fed_f32_from_bits(0x7fc00123u);

    (void)state;
    fed_put_f32le(b, 1.0f);
    assert_memory_equal(b, one_f32, 4);
    assert_true(fed_get_f32le(one_f32) == 1.0f);
    fed_put_f64le(b, -2.0);
    assert_memory_equal(b, neg2_f64, 8);
    assert_true(fed_get_f64le(neg2_f64) == -2.0);
    /* bits, not values: a NaN's payload and a negative zero pass unchanged */
    fed_put_f32le(b, nan_f);
    assert_int_equal(fed_get_u32le(b), 0x7fc00123u);
    assert_int_equal(fed_f32_bits(fed_get_f32le(b)), 0x7fc00123u);
    fed_put_f32le(b, -0.0f);
    assert_int_equal(fed_get_u32le(b), 0x80000000u);
    fed_put_f64le(b, fed_f64_from_bits(0x7ff8000000000abcull));
    assert_true(fed_f64_bits(fed_get_f64le(b)) == 0x7ff8000000000abcull);
}

static void test_bytes_float_arrays(void **state)
{
    float f[5] = {1.0f, -2.5f, 0.0f, 3e-39f /* subnormal */, 65504.0f}, g[5];
    double d[3] = {1.0, -1e300, 5e-324}, e[3];
    uint8_t b[40];
    union {
        float f[5];
        uint8_t b[20];
    } u;

    (void)state;
    fed_put_f32le_n(b, f, 5);
    for (int i = 0; i < 5; i++)
        assert_int_equal(fed_get_u32le(b + 4 * i), fed_f32_bits(f[i]));
    fed_get_f32le_n(g, b, 5);
    assert_memory_equal(g, f, sizeof f);
    fed_put_f64le_n(b, d, 3);
    for (int i = 0; i < 3; i++)
        assert_true(fed_get_u64le(b + 8 * i) == fed_f64_bits(d[i]));
    fed_get_f64le_n(e, b, 3);
    assert_memory_equal(e, d, sizeof d);
    /* in place, both ways, and n = 0 touches nothing */
    memcpy(u.f, f, sizeof f);
    fed_put_f32le_n(u.b, u.f, 5);
    fed_put_f32le_n(b, f, 5);
    assert_memory_equal(u.b, b, 20);
    fed_get_f32le_n(u.f, u.b, 5);
    assert_memory_equal(u.f, f, sizeof f);
    fed_put_f32le_n(NULL, NULL, 0);
    fed_get_f64le_n(NULL, NULL, 0);
}

typedef struct keyrec {
    uint8_t key[32];
    int v;
} keyrec;

static void test_bytes_key_search(void **state)
{
    keyrec r[4];
    uint8_t k[32];
    int found = -1;

    (void)state;
    memset(r, 0, sizeof r);
    for (int i = 0; i < 4; i++) {
        r[i].key[0] = (uint8_t)(10 * (i + 1)); /* 10, 20, 30, 40 */
        r[i].key[31] = 7;
        r[i].v = i;
    }
    memset(k, 0, sizeof k);
    assert_int_equal(fed_key_search(r, 0, sizeof *r, k, &found), 0);
    assert_int_equal(found, 0);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(fed_key_search(r, 4, sizeof *r, r[i].key, &found), (size_t)i);
        assert_int_equal(found, 1);
    }
    /* absent keys: where they would go, by all 32 bytes */
    k[0] = 5;
    assert_int_equal(fed_key_search(r, 4, sizeof *r, k, &found), 0);
    assert_int_equal(found, 0);
    k[0] = 20; /* below 20..7 in the last byte */
    assert_int_equal(fed_key_search(r, 4, sizeof *r, k, &found), 1);
    assert_int_equal(found, 0);
    k[31] = 8;
    assert_int_equal(fed_key_search(r, 4, sizeof *r, k, &found), 2);
    assert_int_equal(found, 0);
    k[0] = 41;
    assert_int_equal(fed_key_search(r, 4, sizeof *r, k, &found), 4);
    assert_int_equal(found, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_err_names),
        cmocka_unit_test(test_log),
        cmocka_unit_test(test_alloc),
        cmocka_unit_test(test_rng_known_sequence),
        cmocka_unit_test(test_rng_below_uniform),
        cmocka_unit_test(test_rng_distributions),
        cmocka_unit_test(test_rng_streams_fill_shuffle),
        cmocka_unit_test(test_pool_parallel_for),
        cmocka_unit_test(test_pool_submit),
        cmocka_unit_test(test_pool_idle_lane),
        cmocka_unit_test(test_pool_errors),
        cmocka_unit_test(test_opt_defaults_and_types),
        cmocka_unit_test(test_opt_range_integers),
        cmocka_unit_test(test_opt_argv),
        cmocka_unit_test(test_opt_ini),
        cmocka_unit_test(test_opt_load_and_help),
        cmocka_unit_test(test_opt_alias),
        cmocka_unit_test(test_opt_man),
        cmocka_unit_test(test_opt_implicit),
        cmocka_unit_test(test_bytes_integers),
        cmocka_unit_test(test_bytes_floats),
        cmocka_unit_test(test_bytes_float_arrays),
        cmocka_unit_test(test_bytes_key_search),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
