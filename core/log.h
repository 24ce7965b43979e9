/* log.h - the process-wide log sink.
 * Library code never prints: it calls fed_log(), which hands the formatted line
 * to the sink main() (or a test) installed once. Without a sink, lines at WARN
 * and above go to stderr. */
#ifndef FED_CORE_LOG_H
#define FED_CORE_LOG_H

#include <stdarg.h>

typedef enum fed_log_level {
    FED_LOG_DEBUG = 0,
    FED_LOG_INFO = 1,
    FED_LOG_WARN = 2,
    FED_LOG_ERROR = 3,
} fed_log_level;

/* A sink receives one line without trailing newline. */
typedef void (*fed_log_sink)(void *ctx, fed_log_level level, const char *line);

/* Set once by main() or a test; NULL restores the default (stderr, WARN+). */
void fed_log_set_sink(fed_log_sink sink, void *ctx);
/* Lines below level are dropped before formatting. */
void fed_log_set_level(fed_log_level level);
fed_log_level fed_log_get_level(void);
const char *fed_log_level_name(fed_log_level level);

void fed_log(fed_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void fed_logv(fed_log_level level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

#endif
