/* test_crash.c - storage survives kill -9: a child process writes rounds and
 * checkpoints in a loop (one transaction per round) and reports each round
 * through a pipe only after its commit returned; the parent kills it with
 * SIGKILL at random instants (seeded fed_rng; every other kill after the
 * child's first commit of that run), 50 times. After each kill the
 * database must open, pass integrity_check and verify, and hold a valid
 * checkpoint at or after the last round the child reported, byte for byte. */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/log.h"
#include "core/rng.h"
#include "storage/store.h"
#include "tests/support/support.h"

#define KILLS 50
#define SEED 0x6b696c6c39ull /* "kill9" */


/* The sections of round r: sizes and bytes derived from r alone, so the
 * parent can check any checkpoint the child left. */
typedef struct round_data {
    uint8_t *params, *optim;
    size_t np, no;
    fed_store_section s[2];
} round_data;

static int round_data_make(round_data *d, uint64_t r)
{
    fed_rng g;

    fed_rng_seed_stream(&g, SEED, r);
    d->np = 40000 + (size_t)fed_rng_below(&g, 400000);
    d->no = 1 + (size_t)fed_rng_below(&g, 100000);
    d->params = malloc(d->np);
    d->optim = malloc(d->no);
    if (!d->params || !d->optim)
        return -1;
    fed_rng_fill(&g, d->params, d->np);
    fed_rng_fill(&g, d->optim, d->no);
    d->s[0] = (fed_store_section){FED_CKPT_SEC_PARAMS, d->params, d->np};
    d->s[1] = (fed_store_section){FED_CKPT_SEC_OPTIM, d->optim, d->no};
    return 0;
}

static void round_data_free(round_data *d)
{
    free(d->params);
    free(d->optim);
}

static void store_opts(fed_store_opts *o)
{
    fed_store_opts_default(o);
    o->chunk_bytes = 64 * 1024; /* several chunks per checkpoint */
    o->keep_last = 3;           /* retention runs inside the round too */
    o->keep_every = 10;
}

/* ---------------------------------------------------------- the child -- */

static int child_round(fed_store *st, uint64_t r)
{
    fed_store_round rec;
    fed_store_counter c = {"rej.replay", r * 3};
    round_data d;
    fed_err e;

    if (round_data_make(&d, r) != 0)
        return -1;
    memset(&rec, 0, sizeof rec);
    rec.round = r;
    rec.start_ms = r * 1000;
    rec.end_ms = r * 1000 + 500;
    rec.loss = 1.0 / (double)r;
    rec.accuracy = 0.5;
    rec.samples = r;
    snprintf(rec.strategy, sizeof rec.strategy, "fedavg");
    e = fed_store_begin(st);
    if (e == FED_OK)
        e = fed_store_put_round(st, &rec);
    if (e == FED_OK)
        e = fed_store_put_counters(st, &c, 1);
    if (e == FED_OK)
        e = fed_store_checkpoint_write(st, r, d.s, 2, NULL);
    if (e == FED_OK)
        e = fed_store_commit(st);
    else
        fed_store_rollback(st);
    round_data_free(&d);
    return e == FED_OK ? 0 : -1;
}

/* Resumes after the latest valid checkpoint and writes rounds until killed.
 * No cmocka here: a failure exits with a status the parent reports. */
static void child_main(const char *path, int fd)
{
    fed_store_opts o;
    fed_store *st = NULL;
    fed_store_ckpt c;
    uint64_t r = 1;
    fed_err e;

    store_opts(&o);
    if (fed_store_open(path, &o, &st) != FED_OK)
        _exit(3);
    e = fed_store_latest_valid_checkpoint(st, &c, NULL);
    if (e == FED_OK)
        r = c.round + 1;
    else if (e != FED_ERR_NOTFOUND)
        _exit(4);
    fed_store_ckpt_fini(&c);
    for (;; r++) {
        if (child_round(st, r) != 0)
            _exit(5);
        /* the report, strictly after the commit returned */
        if (write(fd, &r, sizeof r) != (ssize_t)sizeof r)
            _exit(6);
    }
}

/* --------------------------------------------------------- the parent -- */

static void sleep_us(uint64_t us)
{
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* Waits (up to 60 s) for the child's first report. */
static uint64_t first_report(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    uint64_t r = 0;

    if (poll(&p, 1, 60000) != 1 || read(fd, &r, sizeof r) != (ssize_t)sizeof r)
        fail_msg("the child reported no commit within 60 s");
    return r;
}

/* Reads every report until EOF; returns the last round reported (0: none). */
static uint64_t drain_reports(int fd, int *count)
{
    uint64_t last = 0, r;
    ssize_t n;

    *count = 0;
    while ((n = read(fd, &r, sizeof r)) == (ssize_t)sizeof r) {
        last = r;
        (*count)++;
    }
    /* a report is written whole (8 bytes < PIPE_BUF) or not at all */
    assert_int_equal(n, 0);
    return last;
}

/* known: the newest round known committed (the child's last report, or
 * the checkpoint seen after the previous kill); updated to the one seen now. */
static void check_after_kill(const char *path, uint64_t *known, uint64_t *epoch)
{
    fed_store_opts o;
    fed_store *st = NULL;
    fed_store_ckpt c;
    fed_store_round rec;
    fed_store_faults f;
    round_data d;
    char msg[128];

    store_opts(&o);
    o.flags = 0; /* a restart of the node: the epoch moves on */
    assert_int_equal(fed_store_open(path, &o, &st), FED_OK);
    assert_true(fed_store_epoch(st) > *epoch);
    *epoch = fed_store_epoch(st);
    assert_int_equal(fed_store_integrity_check(st, msg, sizeof msg), FED_OK);
    assert_string_equal(msg, "ok");
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_verify_checkpoints(st, &f, NULL), FED_OK);
    assert_int_equal(f.total, 0);
    if (*known == 0) {
        fed_store_close(st);
        return;
    }
    memset(&f, 0, sizeof f);
    assert_int_equal(fed_store_latest_valid_checkpoint(st, &c, &f), FED_OK);
    assert_int_equal(f.total, 0);
    assert_true(c.round >= *known);
    /* at most the round in flight beyond what was known */
    assert_true(c.round <= *known + 1);
    assert_int_equal(round_data_make(&d, c.round), 0);
    assert_int_equal(c.nsections, 2);
    assert_int_equal(c.sections[0].len, d.np);
    assert_int_equal(c.sections[1].len, d.no);
    assert_memory_equal(c.sections[0].data, d.params, d.np);
    assert_memory_equal(c.sections[1].data, d.optim, d.no);
    round_data_free(&d);
    /* the round rows committed with it are there */
    assert_int_equal(fed_store_get_round(st, *known, &rec), FED_OK);
    assert_int_equal(rec.samples, *known);
    assert_int_equal(fed_store_get_round(st, c.round, &rec), FED_OK);
    *known = c.round;
    fed_store_ckpt_fini(&c);
    fed_store_close(st);
}

static void test_kill9(void **state)
{
    char path[512];
    fed_rng rng;
    uint64_t known = 0, epoch = 0, total_reports = 0;
    int kills_mid_run = 0;

    (void)state;
    fed_test_path(path, sizeof path, "node.db");
    fed_rng_seed(&rng, SEED);
    for (int k = 0; k < KILLS; k++) {
        int fds[2], status = 0, count = 0;
        uint64_t last, first;
        pid_t pid;

        assert_int_equal(pipe(fds), 0);
        fflush(NULL);
        pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            close(fds[0]);
            child_main(path, fds[1]);
            _exit(7);
        }
        close(fds[1]);
        /* A random instant: during open, resume, chunk writes, commit,
         * pruning. Every other kill first waits for one commit, so half the
         * kills land in a running loop however slow the machine is. */
        first = k % 2 ? 0 : first_report(fds[0]);
        sleep_us(1000 + fed_rng_below(&rng, k % 2 ? 150000 : 60000));
        assert_int_equal(kill(pid, SIGKILL), 0);
        assert_int_equal(waitpid(pid, &status, 0), pid);
        if (!WIFSIGNALED(status))
            fail_msg("child exited with %d before the kill", WEXITSTATUS(status));
        assert_int_equal(WTERMSIG(status), SIGKILL);
        last = drain_reports(fds[0], &count);
        if (first) {
            count++;
            last = last ? last : first;
        }
        close(fds[0]);
        if (last > known)
            known = last;
        total_reports += (uint64_t)count;
        kills_mid_run += count > 0;
        check_after_kill(path, &known, &epoch);
    }
    printf("crash: %d kills, %llu rounds reported committed, last checkpoint round %llu;"
           " %d kills after at least one commit\n",
           KILLS, (unsigned long long)total_reports, (unsigned long long)known, kills_mid_run);
    /* the test means something only if the child got work done between kills */
    assert_true(kills_mid_run >= KILLS / 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill9),
    };

    fed_test_log_quiet();
    return cmocka_run_group_tests(tests, fed_test_tmpdir_setup, fed_test_tmpdir_teardown);
}
