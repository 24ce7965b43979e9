/* support.c - what the test binaries share; see support.h. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "core/alloc.h"
#include "core/pool.h"
#include "model/backend.h"
#include "sim/host.h"
#include "sim/world.h"
#include "tests/support/support.h"

/* ------------------------------------------------- temporary directory -- */

static char g_tmpdir[256];

int fed_test_tmpdir_setup(void **state)
{
    (void)state;
    snprintf(g_tmpdir, sizeof g_tmpdir, "/tmp/fed_test_%s_XXXXXX", program_invocation_short_name);
    return mkdtemp(g_tmpdir) ? 0 : -1;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)ftw;
    if (flag == FTW_DNR && chmod(path, 0700) == 0) /* made unreadable by a test */
        return nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    return remove(path);
}

int fed_test_tmpdir_teardown(void **state)
{
    (void)state;
    if (!g_tmpdir[0])
        return 0;
    chmod(g_tmpdir, 0700);
    return nftw(g_tmpdir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fed_test_tmpdir(void) { return g_tmpdir; }

void fed_test_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/%s", g_tmpdir, name);
}

/* ------------------------------------------------------------------ log -- */

static pthread_mutex_t g_log_mu = PTHREAD_MUTEX_INITIALIZER;
static char *g_log;            /* the kept lines (plain malloc: not the swept allocator) */
static size_t g_log_len, g_log_cap;
static char g_log_last[1024];
static int g_log_lines;

static void quiet_sink(void *ctx, fed_log_level level, const char *line)
{
    (void)ctx;
    (void)level;
    (void)line;
}

static void capture_sink(void *ctx, fed_log_level level, const char *line)
{
    size_t n = strlen(line);

    if (level < *(const fed_log_level *)ctx)
        return;
    pthread_mutex_lock(&g_log_mu);
    if (g_log_len + n + 2 > g_log_cap) {
        size_t cap = (g_log_len + n + 2) * 2;
        char *p = realloc(g_log, cap);

        if (!p) {
            pthread_mutex_unlock(&g_log_mu);
            return;
        }
        g_log = p;
        g_log_cap = cap;
    }
    memcpy(g_log + g_log_len, line, n);
    g_log_len += n;
    g_log[g_log_len++] = '\n';
    g_log[g_log_len] = 0;
    snprintf(g_log_last, sizeof g_log_last, "%s", line);
    g_log_lines++;
    pthread_mutex_unlock(&g_log_mu);
}

void fed_test_log_quiet(void) { fed_log_set_sink(quiet_sink, NULL); }

void fed_test_log_capture(fed_log_level min)
{
    static fed_log_level g_min;

    fed_test_log_reset();
    g_min = min;
    fed_log_set_sink(capture_sink, &g_min);
}

void fed_test_log_default(void)
{
    fed_log_set_sink(NULL, NULL);
    pthread_mutex_lock(&g_log_mu);
    free(g_log);
    g_log = NULL;
    g_log_len = g_log_cap = 0;
    g_log_last[0] = 0;
    g_log_lines = 0;
    pthread_mutex_unlock(&g_log_mu);
}

void fed_test_log_reset(void)
{
    pthread_mutex_lock(&g_log_mu);
    g_log_len = 0;
    if (g_log)
        g_log[0] = 0;
    g_log_last[0] = 0;
    g_log_lines = 0;
    pthread_mutex_unlock(&g_log_mu);
}

const char *fed_test_log_text(void) { return g_log ? g_log : ""; }

const char *fed_test_log_last(void) { return g_log_last; }

int fed_test_log_lines(void) { return g_log_lines; }

int fed_test_log_count(const char *a, const char *b)
{
    const char *p;
    int k = 0;

    pthread_mutex_lock(&g_log_mu);
    p = fed_test_log_text();
    while (*p) {
        const char *end = strchr(p, '\n');
        char line[2048];

        snprintf(line, sizeof line, "%.*s", (int)(end - p), p);
        k += strstr(line, a) && strstr(line, b);
        p = end + 1;
    }
    pthread_mutex_unlock(&g_log_mu);
    return k;
}

void fed_test_log_has(const char *needle)
{
    if (!strstr(fed_test_log_text(), needle)) {
        print_error("log lacks '%s'; log was:\n%s", needle, fed_test_log_text());
        fail();
    }
}

/* -------------------------------------------------------- Fashion-MNIST -- */

const char *fed_test_data_dir(void)
{
    const char *d = getenv("FEDNODE_DATA");

    return d && *d ? d : FED_DATA_DEFAULT_DIR;
}

int fed_test_fashion_present(void)
{
    char p[1024];

    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte.gz", fed_test_data_dir());
    if (access(p, R_OK) == 0)
        return 1;
    snprintf(p, sizeof p, "%s/train-labels-idx1-ubyte", fed_test_data_dir());
    return access(p, R_OK) == 0;
}

int fed_test_fashion_open(fed_dataset **train, fed_dataset **test)
{
    *train = NULL;
    if (test)
        *test = NULL;
    if (fed_data_open("fashion-mnist", 1, train) == FED_OK &&
        (!test || fed_data_open("fashion-mnist", 0, test) == FED_OK))
        return 1;
    fed_data_free(*train);
    *train = NULL;
    return 0;
}

void fed_test_need_fashion(int have)
{
    if (have)
        return;
    print_message("skipped: no Fashion-MNIST in %s ($FEDNODE_DATA, else %s)\n",
                  fed_test_data_dir(), FED_DATA_DEFAULT_DIR);
    skip();
}

/* ---------------------------------------------------- allocation sweep -- */

unsigned long fed_test_alloc_sweep(fed_test_alloc_try attempt, void *ctx, int sticky,
                                   unsigned long limit)
{
    for (unsigned long n = 1; n < limit; n++) {
        fed_err e;

        fed_alloc_fail_nth(n, sticky);
        e = attempt(ctx);
        fed_alloc_fail_nth(0, 0);
        if (e == FED_OK)
            return n;
        assert_string_equal(fed_errname(e), fed_errname(FED_ERR_NOMEM));
    }
    fail_msg("no attempt with allocation 1 to %lu failing succeeded", limit - 1);
    return 0;
}

/* ---- a subcommand in this process ---- */

int fed_test_run_cli(int (*fn)(int, char **), char *out, size_t cap, int argc, ...)
{
    char *argv[32], path[512];
    va_list ap;
    int saved, saved_err, fd, rc;
    ssize_t n;

    assert_true(argc >= 0 && argc < 32 && cap > 0);
    va_start(ap, argc);
    for (int i = 0; i < argc; i++)
        argv[i] = va_arg(ap, char *);
    va_end(ap);
    argv[argc] = NULL;
    fed_test_path(path, sizeof path, "cli.out");
    fflush(stdout);
    fflush(stderr);
    saved = dup(1);
    saved_err = dup(2);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    assert_true(saved >= 0 && saved_err >= 0 && fd >= 0);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    rc = fn(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved, 1);
    dup2(saved_err, 2);
    close(saved);
    close(saved_err);
    fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    n = read(fd, out, cap - 1);
    if (n >= 0 && (size_t)n == cap - 1 && read(fd, path, 1) == 1)
        fail_msg("the command's output is over the %zu bytes the test gave it", cap - 1);
    close(fd);
    out[n > 0 ? n : 0] = '\0';
    return rc;
}

/* ---- a simulated federation ---- */

void fed_test_sim_run(fed_sim_world *w, fed_sim_host *agg, uint64_t limit_ms, uint64_t tail_ms)
{
    uint64_t t = 0;

    while (t < limit_ms) {
        fed_node *a;

        t += 1000;
        assert_int_equal(fed_sim_world_run_until(w, t), FED_OK);
        a = fed_sim_host_node(agg);
        if (a && fed_node_finished(a))
            break;
    }
    assert_int_equal(fed_sim_world_run_until(w, t + tail_ms), FED_OK);
}

int fed_test_world_new(void **state, int threads)
{
    fed_test_world *w = calloc(1, sizeof *w);

    assert_non_null(w);
    assert_int_equal(fed_backend_cpu_new(1, &w->be), FED_OK);
    assert_int_equal(fed_pool_new(threads, &w->pool), FED_OK);
    *state = w;
    return 0;
}

int fed_test_world_free(void **state)
{
    fed_test_world *w = *state;

    fed_pool_free(w->pool);
    fed_backend_free(w->be);
    free(w);
    return 0;
}
