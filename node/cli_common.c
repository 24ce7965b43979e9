/* cli_common.c - what every fednode subcommand shares: error printing and
 * the stderr log sink. The CLI is the one layer that may print. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
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
