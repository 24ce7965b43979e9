/* json_check.h - a strict JSON (RFC 8259) checker for the tests that read
 * what fednode writes as JSON (log lines, status): the whole text one value,
 * strings valid UTF-8 with no raw control bytes, numbers in JSON's grammar,
 * nesting at most 64 deep. Every name starts with fed_test_json_. */
#ifndef FED_TEST_JSON_CHECK_H
#define FED_TEST_JSON_CHECK_H

#include <stddef.h>

/* 1 when s[0..n) is exactly one JSON value (blanks around it allowed). */
int fed_test_json_valid(const char *s, size_t n);
/* The top-level object's member key, a string, decoded (escapes, \u
 * surrogate pairs) into out as UTF-8: 1, else 0 (absent, not a string, not
 * an object, too long for cap). */
int fed_test_json_get_string(const char *s, size_t n, const char *key, char *out, size_t cap);
/* The member's raw text (a number, true, ...), as it stands: 1, else 0. */
int fed_test_json_get_raw(const char *s, size_t n, const char *key, char *out, size_t cap);

#endif
