/* support.h - what the test binaries share (the sources in tests/support/ are linked
 * into every one): a temporary directory, the log sinks (quiet, captured),
 * the Fashion-MNIST fixture and its skip, and the allocation-failure sweep.
 * Every name starts with fed_test_. Include after <cmocka.h>. */
#ifndef FED_TEST_SUPPORT_H
#define FED_TEST_SUPPORT_H

#include <stddef.h>

#include "core/err.h"
#include "core/log.h"
#include "model/data.h"

/* ---- a temporary directory: /tmp/fed_test_PROGRAM_XXXXXX ---- */

/* Makes it (a new one each call); cmocka setup shape, so it serves as a
 * group's or a test's setup. 0, or -1 when mkdtemp failed. */
int fed_test_tmpdir_setup(void **state);
/* Removes it and all below it, even a subdirectory made read-only; cmocka
 * teardown shape (it runs after a failed test too). */
int fed_test_tmpdir_teardown(void **state);
const char *fed_test_tmpdir(void);
/* out = the temporary directory / name */
void fed_test_path(char *out, size_t cap, const char *name);

/* ---- the log ---- */

/* Every line dropped (tests whose faults are expected and would be noise). */
void fed_test_log_quiet(void);
/* Every line at min or above kept (thread-safe: the pool's threads log
 * too) until fed_test_log_default; the kept lines start empty. Sets no
 * level: fed_log_set_level still filters first. */
void fed_test_log_capture(fed_log_level min);
/* Back to fed_log's own sink; forgets what was kept. */
void fed_test_log_default(void);
/* Forgets what was kept. */
void fed_test_log_reset(void);
/* The lines kept, each ending in '\n' ("" when none). */
const char *fed_test_log_text(void);
/* The last line kept, without its '\n' ("" when none). */
const char *fed_test_log_last(void);
/* How many lines were kept. */
int fed_test_log_lines(void);
/* How many kept lines hold both a and b ("" matches any line). */
int fed_test_log_count(const char *a, const char *b);
/* Fails the test, printing what was kept, unless a kept line holds needle. */
void fed_test_log_has(const char *needle);

/* ---- Fashion-MNIST, from $FEDNODE_DATA or FED_DATA_DEFAULT_DIR ---- */

const char *fed_test_data_dir(void);
/* Its training files are there (not yet read). */
int fed_test_fashion_present(void);
/* Opens the training set and, when test is not NULL, the test set: 1, or 0
 * with both NULL when either could not be opened. */
int fed_test_fashion_open(fed_dataset **train, fed_dataset **test);
/* Unless have, prints why and skips the running test (cmocka's skip(),
 * counted as skipped); call it before the test makes anything. */
void fed_test_need_fashion(int have);

/* ---- allocation failures ---- */

/* One attempt of a sweep: FED_OK (having freed what it made) or what the
 * failed allocation gave, having checked that nothing was left behind. */
typedef fed_err (*fed_test_alloc_try)(void *ctx);
/* Runs attempt(ctx) with allocation n failing (and every one after it when
 * sticky), n = 1, 2, ... until it gives FED_OK; each attempt before must
 * give FED_ERR_NOMEM. Fails the test when none below limit succeeds.
 * Returns the n that succeeded (1 + the allocations that were failed). */
unsigned long fed_test_alloc_sweep(fed_test_alloc_try attempt, void *ctx, int sticky,
                                   unsigned long limit);

/* ---- a subcommand in this process ---- */

/* Runs fn (a subcommand's main: fed_cli_status, fed_cli_privacy...) on the
 * argc (< 32) strings that follow, its stdout and stderr into out (cap
 * bytes, NUL-terminated, cut to fit); returns its exit status. */
int fed_test_run_cli(int (*fn)(int, char **), char *out, size_t cap, int argc, ...);

/* ---- a simulated federation ---- */

struct fed_sim_world;
struct fed_sim_host;
/* Runs w a second of virtual time at a time until agg's node finished (or
 * limit_ms passed), then tail_ms longer so the clients hear so. */
void fed_test_sim_run(struct fed_sim_world *w, struct fed_sim_host *agg, uint64_t limit_ms,
                      uint64_t tail_ms);

/* A CPU backend (one thread) and a pool of threads, the group fixture of the
 * model tests: *state points at it from fed_test_world_new until
 * fed_test_world_free. */
struct fed_backend;
struct fed_pool;
typedef struct fed_test_world {
    struct fed_backend *be;
    struct fed_pool *pool;
} fed_test_world;
int fed_test_world_new(void **state, int threads);
int fed_test_world_free(void **state);

#endif
