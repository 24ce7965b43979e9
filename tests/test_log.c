/* test_log.c - core/log.c's stream sink: every JSON line it writes is one
 * valid JSON object (checked by a strict parser, tests/support/json_check.h)
 * whatever the message holds (quotes, backslashes, every control byte, bytes
 * that are not UTF-8, random bytes, a line at the 1 KiB cut), the message
 * comes back whole (valid UTF-8 as it was, the rest as U+FFFD), the fields
 * read from it (component, round) are right, a small buffer cuts the
 * message and never the object; text lines keep their old form, with the
 * syslog level prefix on the journal's stream; levels and formats parse. */
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

#include "core/log.h"
#include "core/rng.h"
#include "tests/support/json_check.h"
#include "tests/support/support.h"

#define BUF 8192

static void assert_valid(const char *s, size_t n)
{
    if (!fed_test_json_valid(s, n)) {
        print_error("not valid JSON (%zu bytes): %.*s\n", n, (int)n, s);
        fail();
    }
}

/* The message field of a line formatted from msg. */
static void message_of(const char *msg, const char *node, char *out, size_t cap)
{
    char line[BUF];
    size_t n = fed_log_format_json(line, sizeof line, 1764000000123ull, FED_LOG_WARN, node, msg);

    assert_int_equal(n, strlen(line));
    assert_valid(line, n);
    assert_true(fed_test_json_get_string(line, n, "message", out, cap));
}

static void test_json_fields(void **state)
{
    char line[BUF], v[256];
    size_t n;

    (void)state;
    n = fed_log_format_json(line, sizeof line, 1764000000123ull, FED_LOG_INFO, "agg",
                            "aggregator: round 3 merged 10 of 10 (0 missing)");
    assert_valid(line, n);
    assert_string_equal(line, "{\"time\":\"2025-11-24T16:00:00.123Z\",\"level\":\"info\","
                              "\"node\":\"agg\",\"component\":\"aggregator\",\"round\":3,"
                              "\"message\":\"aggregator: round 3 merged 10 of 10 (0 missing)\"}");
    /* no node, no component, no round */
    n = fed_log_format_json(line, sizeof line, 0, FED_LOG_ERROR, NULL, "Plain words: around 7");
    assert_valid(line, n);
    assert_string_equal(line, "{\"time\":\"1970-01-01T00:00:00.000Z\",\"level\":\"error\","
                              "\"message\":\"Plain words: around 7\"}");
    /* round's number: the first "round N" at a word's start; "round 0x" has 0 */
    n = fed_log_format_json(line, sizeof line, 0, FED_LOG_DEBUG, "",
                            "client: round 12's delta; round 13 next");
    assert_valid(line, n);
    assert_true(fed_test_json_get_raw(line, n, "round", v, sizeof v));
    assert_string_equal(v, "12");
    assert_true(fed_test_json_get_string(line, n, "component", v, sizeof v));
    assert_string_equal(v, "client");
    n = fed_log_format_json(line, sizeof line, 0, FED_LOG_DEBUG, "", "daemon: round 007");
    assert_false(fed_test_json_get_raw(line, n, "round", v, sizeof v)); /* not a JSON number */
    n = fed_log_format_json(line, sizeof line, 0, FED_LOG_DEBUG, "",
                            "x: round 123456789012345678901"); /* past u64: left out */
    assert_valid(line, n);
    assert_false(fed_test_json_get_raw(line, n, "round", v, sizeof v));
    /* a component must be a lowercase word before ": " */
    n = fed_log_format_json(line, sizeof line, 0, FED_LOG_DEBUG, "", "Daemon: x");
    assert_false(fed_test_json_get_string(line, n, "component", v, sizeof v));
    n = fed_log_format_json(line, sizeof line, 0, FED_LOG_DEBUG, "", "a\"b: x");
    assert_valid(line, n);
    assert_false(fed_test_json_get_string(line, n, "component", v, sizeof v));
}

static void test_json_hostile(void **state)
{
    static const struct {
        const char *in, *out; /* the message, and as it comes back */
    } cases[] = {
        {"say \"hi\" \\ bye", "say \"hi\" \\ bye"},
        {"tab\there\nnew\rret\bbs\ffeed\x01\x1f\x7f", "tab\there\nnew\rret\bbs\ffeed\x01\x1f\x7f"},
        {"utf8 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 ok", "utf8 \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 ok"},
        {"lone \x80 cont", "lone \xef\xbf\xbd cont"},
        {"overlong \xc0\xaf slash", "overlong \xef\xbf\xbd\xef\xbf\xbd slash"},
        {"overlong3 \xe0\x80\xaf", "overlong3 \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"surrogate \xed\xa0\x80", "surrogate \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"too big \xf4\x90\x80\x80", "too big \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"ff \xff\xfe", "ff \xef\xbf\xbd\xef\xbf\xbd"},
        {"cut at the end \xe2\x82", "cut at the end \xef\xbf\xbd\xef\xbf\xbd"},
        {"cut 4 \xf0\x9f\x98", "cut 4 \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"},
        {"</script>\"},{\"level\":\"error\"", "</script>\"},{\"level\":\"error\""},
    };
    char got[BUF], line[BUF], node[64];
    size_t n;

    (void)state;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        message_of(cases[i].in, cases[i].in, got, sizeof got);
        if (strcmp(got, cases[i].out) != 0) {
            print_error("case %zu: got '%s'\n", i, got);
            fail();
        }
    }
    /* every control byte, alone */
    for (int c = 1; c < 0x20; c++) {
        char msg[8];

        snprintf(msg, sizeof msg, "a%cb", c);
        message_of(msg, NULL, got, sizeof got);
        assert_memory_equal(got, msg, 4);
    }
    /* the node's name is escaped the same way */
    n = fed_log_format_json(line, sizeof line, 0, FED_LOG_INFO, "n\"o\\d\x01\xff", "m");
    assert_valid(line, n);
    assert_true(fed_test_json_get_string(line, n, "node", node, sizeof node));
    assert_string_equal(node, "n\"o\\d\x01\xef\xbf\xbd");
}

static void test_json_random(void **state)
{
    fed_rng rng;
    char msg[1024], line[BUF];

    (void)state;
    fed_rng_seed(&rng, 25);
    for (int k = 0; k < 20000; k++) {
        size_t len = 1 + (size_t)(fed_rng_u64(&rng) % (sizeof msg - 1)), n;

        for (size_t i = 0; i < len; i++) {
            msg[i] = (char)(fed_rng_u64(&rng) & 0xff);
            if (!msg[i])
                msg[i] = (k & 1) ? '"' : '\\';
        }
        msg[len] = '\0';
        n = fed_log_format_json(line, sizeof line, fed_rng_u64(&rng) >> 24,
                                (fed_log_level)(k & 3), k % 3 ? msg : NULL, msg);
        assert_int_equal(n, strlen(line));
        assert_valid(line, n);
    }
}

static void test_json_cut(void **state)
{
    char msg[1024], line[BUF], got[BUF];
    size_t n;

    (void)state;
    /* the worst line the sink gets (1023 bytes, each escaped to six) fits whole */
    memset(msg, 0x01, sizeof msg - 1);
    msg[sizeof msg - 1] = 0;
    n = fed_log_format_json(line, sizeof line, 0, FED_LOG_INFO, "node", msg);
    assert_valid(line, n);
    assert_true(fed_test_json_get_string(line, n, "message", got, sizeof got));
    assert_string_equal(got, msg);
    /* a small buffer: the message is cut at a character, the object whole */
    for (size_t cap = 2; cap < 400; cap++) {
        char small[400];

        memset(msg, 0, sizeof msg);
        snprintf(msg, sizeof msg, "daemon: round 4 \xe2\x82\xac\x01\"\\ %s", "xxxxxxxxxxxxxxxxxxxxxxx"
                 "\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80\xf0\x9f\x98\x80"
                 "yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy");
        n = fed_log_format_json(small, cap, 1, FED_LOG_INFO, "agg", msg);
        assert_true(n < cap);
        assert_int_equal(n, strlen(small));
        if (cap >= 3)
            assert_valid(small, n);
        if (fed_test_json_get_string(small, n, "message", got, sizeof got))
            assert_memory_equal(got, msg, strlen(got)); /* a prefix of it */
    }
    /* fed_log_json_string: all or nothing */
    assert_int_equal(fed_log_json_string(line, 8, "a\"b"), 6);
    assert_string_equal(line, "\"a\\\"b\"");
    assert_int_equal(fed_log_json_string(line, 6, "a\"b"), 0);
    assert_string_equal(line, "");
}

/* The stream sink through a pipe: text as before, JSON one object a line. */
static void test_stream_sink(void **state)
{
    int fd[2];
    char buf[BUF * 2], v[256];
    ssize_t n;
    fed_log_level saved = fed_log_get_level();
    char *nl, *line;

    (void)state;
    assert_int_equal(pipe(fd), 0);
    unsetenv("JOURNAL_STREAM");
    fed_log_set_level(FED_LOG_DEBUG);
    fed_log_use_stream(fd[1], FED_LOG_TEXT, "fedtest");
    fed_log(FED_LOG_INFO, "daemon: %s", "hello");
    n = read(fd[0], buf, sizeof buf - 1);
    assert_true(n > 0);
    buf[n] = 0;
    assert_string_equal(buf, "fedtest: info: daemon: hello\n");
    { /* the journal's stream (as $JOURNAL_STREAM names it): each line says its level */
        struct stat st;
        char js[64];

        assert_int_equal(fstat(fd[1], &st), 0);
        snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
        setenv("JOURNAL_STREAM", js, 1);
        fed_log_use_stream(fd[1], FED_LOG_TEXT, "fedtest");
        fed_log(FED_LOG_WARN, "w");
        fed_log(FED_LOG_DEBUG, "d");
        n = read(fd[0], buf, sizeof buf - 1);
        assert_true(n > 0);
        buf[n] = 0;
        assert_string_equal(buf, "<4>fedtest: warn: w\n<7>fedtest: debug: d\n");
        unsetenv("JOURNAL_STREAM");
    }
    fed_log_use_stream(fd[1], FED_LOG_JSON, "fedtest");
    fed_log_stream_set_node("c\"1");
    fed_log(FED_LOG_WARN, "client: round %d: \"%s\"", 9, "\xff\x01");
    fed_log(FED_LOG_DEBUG, "second");
    n = read(fd[0], buf, sizeof buf - 1);
    assert_true(n > 0);
    buf[n] = 0;
    line = buf;
    nl = strchr(line, '\n');
    assert_non_null(nl);
    assert_valid(line, (size_t)(nl - line));
    assert_true(fed_test_json_get_string(line, (size_t)(nl - line), "node", v, sizeof v));
    assert_string_equal(v, "c\"1");
    assert_true(fed_test_json_get_string(line, (size_t)(nl - line), "level", v, sizeof v));
    assert_string_equal(v, "warn");
    assert_true(fed_test_json_get_raw(line, (size_t)(nl - line), "round", v, sizeof v));
    assert_string_equal(v, "9");
    line = nl + 1;
    nl = strchr(line, '\n');
    assert_non_null(nl);
    assert_valid(line, (size_t)(nl - line));
    assert_string_equal(nl + 1, "");
    fed_log_stream_set_node(NULL);
    fed_log_set_sink(NULL, NULL);
    fed_log_set_level(saved);
    close(fd[0]);
    close(fd[1]);
}

static void test_parse(void **state)
{
    fed_log_level l = FED_LOG_INFO;
    fed_log_format f = FED_LOG_TEXT;

    (void)state;
    assert_int_equal(fed_log_level_parse("debug", &l), 0);
    assert_int_equal(l, FED_LOG_DEBUG);
    assert_int_equal(fed_log_level_parse("warning", &l), 0);
    assert_int_equal(l, FED_LOG_WARN);
    assert_int_equal(fed_log_level_parse("error", &l), 0);
    assert_int_equal(l, FED_LOG_ERROR);
    assert_int_equal(fed_log_level_parse("INFO", &l), -1);
    assert_int_equal(fed_log_level_parse(NULL, &l), -1);
    assert_int_equal(fed_log_format_parse("json", &f), 0);
    assert_int_equal(f, FED_LOG_JSON);
    assert_int_equal(fed_log_format_parse("text", &f), 0);
    assert_int_equal(f, FED_LOG_TEXT);
    assert_int_equal(fed_log_format_parse("yaml", &f), -1);
}

/* The checker itself refuses what is not JSON. */
static void test_checker(void **state)
{
    static const char *bad[] = {"", "{", "{\"a\":}", "{\"a\":1,}", "[1,]", "\"\x01\"", "\"\\x\"",
                                "01", "1.", "-", "\"\xff\"", "\"\\ud800\"", "{} {}", "tru",
                                "{\"a\" 1}", "\"\xed\xa0\x80\""};
    static const char *good[] = {"{}", "[]", "0", "-0.5e+3", "\"\\ud83d\\ude00\"", "null",
                                 " {\"a\":[1,{\"b\":false}]} "};

    (void)state;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_false(fed_test_json_valid(bad[i], strlen(bad[i])));
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        assert_true(fed_test_json_valid(good[i], strlen(good[i])));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checker),
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_json_fields),
        cmocka_unit_test(test_json_hostile),
        cmocka_unit_test(test_json_random),
        cmocka_unit_test(test_json_cut),
        cmocka_unit_test(test_stream_sink),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
