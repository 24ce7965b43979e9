/* cli_common.c - what every fednode subcommand shares: error printing and
 * the stderr log sink. The CLI is the one layer that may print. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/opt.h"
#include "node/cli.h"

void fed_cli_error(const char *fmt, ...)
{
    va_list ap;

    fputs("fednode: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static void stderr_sink(void *ctx, fed_log_level level, const char *line)
{
    (void)ctx;
    fprintf(stderr, "fednode: %s: %s\n", fed_log_level_name(level), line);
}

void fed_cli_log_init(void)
{
    const char *lvl = getenv("FEDNODE_LOG");

    fed_log_set_sink(stderr_sink, NULL);
    if (!lvl)
        return;
    if (!strcmp(lvl, "debug"))
        fed_log_set_level(FED_LOG_DEBUG);
    else if (!strcmp(lvl, "warn"))
        fed_log_set_level(FED_LOG_WARN);
    else if (!strcmp(lvl, "error"))
        fed_log_set_level(FED_LOG_ERROR);
}

int fed_cli_load_options(const char *cmd, const char *synopsis, const fed_opt *t, size_t n,
                         void *cfg, int argc, char **argv)
{
    fed_opt_error e = {{0}};
    char **pos;
    int npos = 0, rc = -1;
    fed_err err;

    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: fednode %s %s\n\noptions (also as KEY = VALUE in --config FILE):\n",
                   cmd, synopsis);
            fed_opt_print_help(t, n, stdout);
            return 0;
        }
    pos = fed_calloc((size_t)argc + 1, sizeof *pos);
    if (!pos) {
        fed_cli_error("%s: out of memory", cmd);
        return 1;
    }
    err = fed_opt_load(t, n, cfg, argc, argv, pos, &npos, &e);
    if (err != FED_OK) {
        fed_cli_error("%s: %s", cmd, e.msg[0] ? e.msg : fed_strerror(err));
        rc = 2;
    } else if (npos > 0) {
        fed_cli_error("%s: unexpected argument '%s' (see fednode %s --help)", cmd, pos[0], cmd);
        rc = 2;
    }
    fed_free(pos);
    return rc;
}
