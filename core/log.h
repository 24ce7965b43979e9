/* log.h - the process-wide log sink.
 * Library code never prints: it calls fed_log(), which hands the formatted line
 * to the sink main() (or a test) installed once. Without a sink, lines at WARN
 * and above go to stderr.
 *
 * The one sink the programs install is the stream sink below: each line is
 * one write(2) to a descriptor, as text ("fednode: info: MESSAGE", with a
 * "<6>" syslog-level prefix when that descriptor is the systemd journal's
 * stream) or as one JSON object per line:
 *
 *   {"time":"2026-11-24T10:00:00.123Z","level":"info","node":"agg",
 *    "component":"aggregator","round":3,
 *    "message":"aggregator: round 3 merged 10 of 10 (0 missing)"}
 *
 * time (UTC, milliseconds), level and message are always there; node when
 * the program named one (fednode run: its name in the allow-list); the
 * fields the message carries are read from its text: component (the word
 * before the first ": ", as in "daemon: ...") and round (the number after
 * the first "round "). Every string is JSON-escaped whatever bytes it holds:
 * quotes, backslashes and control bytes escaped, bytes that are not UTF-8
 * (a truncated sequence, an overlong form, a surrogate) as U+FFFD. */
#ifndef FED_CORE_LOG_H
#define FED_CORE_LOG_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

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
/* "debug", "info", "warn" (or "warning"), "error": 0, else -1. */
int fed_log_level_parse(const char *s, fed_log_level *out);

void fed_log(fed_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void fed_logv(fed_log_level level, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));

/* ---- the stream sink ---- */

typedef enum fed_log_format {
    FED_LOG_TEXT = 0,
    FED_LOG_JSON = 1,
} fed_log_format;

/* "text" or "json": 0, else -1. */
int fed_log_format_parse(const char *s, fed_log_format *out);

/* Installs the stream sink: lines to fd in format; program prefixes text
 * lines (at most 31 bytes kept). Text lines get a syslog-level prefix
 * ("<3>" error, "<4>" warn, "<6>" info, "<7>" debug) when fd is the stream
 * $JOURNAL_STREAM names (systemd's journal reads the level from it). */
void fed_log_use_stream(int fd, fed_log_format format, const char *program);
/* The node's name in JSON lines (at most 95 bytes kept; NULL or "": none).
 * Set before other threads log. */
void fed_log_stream_set_node(const char *node);

/* One JSON object (no newline) into out (cap bytes, cap >= 2); returns its
 * length. A line that would not fit has its message cut (at a character,
 * the object still whole). node may be NULL. wall_ms: Unix milliseconds. */
size_t fed_log_format_json(char *out, size_t cap, uint64_t wall_ms, fed_log_level level,
                           const char *node, const char *msg);
/* s as a JSON string, quotes included, into out (cap bytes); NUL-ended.
 * Returns the length, or 0 when it does not fit (out then holds ""). */
size_t fed_log_json_string(char *out, size_t cap, const char *s);

#endif
