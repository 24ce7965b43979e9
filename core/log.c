/* log.c - the log sink: one process-wide function pointer set by main().
 * Formats into a stack buffer (lines are cut at 1 KiB) and never allocates,
 * so logging works when memory has run out. */
#include "core/log.h"

#include <stdio.h>

static fed_log_sink log_sink;
static void *log_ctx;
static fed_log_level log_level = FED_LOG_INFO;

void fed_log_set_sink(fed_log_sink sink, void *ctx)
{
    log_sink = sink;
    log_ctx = ctx;
}

void fed_log_set_level(fed_log_level level) { log_level = level; }

fed_log_level fed_log_get_level(void) { return log_level; }

const char *fed_log_level_name(fed_log_level level)
{
    switch (level) {
    case FED_LOG_DEBUG: return "debug";
    case FED_LOG_INFO: return "info";
    case FED_LOG_WARN: return "warn";
    case FED_LOG_ERROR: return "error";
    }
    return "?";
}

void fed_logv(fed_log_level level, const char *fmt, va_list ap)
{
    char line[1024];

    if (level < log_level)
        return;
    vsnprintf(line, sizeof line, fmt, ap);
    if (log_sink) {
        log_sink(log_ctx, level, line);
    } else if (level >= FED_LOG_WARN) {
        fprintf(stderr, "fednode: %s: %s\n", fed_log_level_name(level), line);
    }
}

void fed_log(fed_log_level level, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fed_logv(level, fmt, ap);
    va_end(ap);
}
