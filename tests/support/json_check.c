/* json_check.c - the strict JSON checker json_check.h describes: a
 * recursive-descent parser over a byte range, decoding strings when asked. */
#include "tests/support/json_check.h"

#include <string.h>

typedef struct jc {
    const unsigned char *p, *end;
    int depth;
} jc;

static void blanks(jc *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static int hexval(unsigned char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int hex4(jc *j, unsigned *v)
{
    *v = 0;
    if (j->end - j->p < 4)
        return 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval(*j->p++);

        if (h < 0)
            return 0;
        *v = *v << 4 | (unsigned)h;
    }
    return 1;
}

/* Appends code point cp as UTF-8 to out (when out), counting in *n. */
static int put_cp(unsigned long cp, char *out, size_t cap, size_t *n)
{
    unsigned char b[4];
    size_t len;

    if (cp < 0x80)
        b[0] = (unsigned char)cp, len = 1;
    else if (cp < 0x800)
        b[0] = (unsigned char)(0xC0 | cp >> 6), b[1] = (unsigned char)(0x80 | (cp & 0x3F)), len = 2;
    else if (cp < 0x10000)
        b[0] = (unsigned char)(0xE0 | cp >> 12), b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)),
        b[2] = (unsigned char)(0x80 | (cp & 0x3F)), len = 3;
    else
        b[0] = (unsigned char)(0xF0 | cp >> 18), b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F)),
        b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)), b[3] = (unsigned char)(0x80 | (cp & 0x3F)),
        len = 4;
    if (out) {
        if (*n + len + 1 > cap)
            return 0;
        memcpy(out + *n, b, len);
    }
    *n += len;
    return 1;
}

/* The length of the UTF-8 character at p (RFC 3629), 0 when it is none. */
static size_t utf8(const unsigned char *p, const unsigned char *end)
{
    unsigned char c = p[0], lo = 0x80, hi = 0xBF;
    size_t n;

    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if ((size_t)(end - p) < n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < n; i++)
        if (p[i] < 0x80 || p[i] > 0xBF)
            return 0;
    return n;
}

/* A string at j->p (the opening quote); decoded into out when out. */
static int string(jc *j, char *out, size_t cap)
{
    size_t n = 0;

    if (j->p >= j->end || *j->p != '"')
        return 0;
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        unsigned char c = *j->p;

        if (c < 0x20)
            return 0;
        if (c == '\\') {
            unsigned long cp;
            unsigned u, lo;

            if (++j->p >= j->end)
                return 0;
            c = *j->p++;
            switch (c) {
            case '"': cp = '"'; break;
            case '\\': cp = '\\'; break;
            case '/': cp = '/'; break;
            case 'b': cp = '\b'; break;
            case 'f': cp = '\f'; break;
            case 'n': cp = '\n'; break;
            case 'r': cp = '\r'; break;
            case 't': cp = '\t'; break;
            case 'u':
                if (!hex4(j, &u))
                    return 0;
                cp = u;
                if (u >= 0xD800 && u <= 0xDBFF) { /* a high surrogate: its low one */
                    if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u')
                        return 0;
                    j->p += 2;
                    if (!hex4(j, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                        return 0;
                    cp = 0x10000 + ((unsigned long)(u - 0xD800) << 10) + (lo - 0xDC00);
                } else if (u >= 0xDC00 && u <= 0xDFFF) {
                    return 0;
                }
                break;
            default:
                return 0;
            }
            if (!put_cp(cp, out, cap, &n))
                return 0;
        } else {
            size_t l = utf8(j->p, j->end);

            if (!l)
                return 0;
            if (out) {
                if (n + l + 1 > cap)
                    return 0;
                memcpy(out + n, j->p, l);
            }
            n += l;
            j->p += l;
        }
    }
    if (j->p >= j->end)
        return 0;
    j->p++;
    if (out)
        out[n] = '\0';
    return 1;
}

static int digits(jc *j)
{
    const unsigned char *s = j->p;

    while (j->p < j->end && *j->p >= '0' && *j->p <= '9')
        j->p++;
    return j->p > s;
}

static int number(jc *j)
{
    if (j->p < j->end && *j->p == '-')
        j->p++;
    if (j->p < j->end && *j->p == '0')
        j->p++;
    else if (!digits(j))
        return 0;
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!digits(j))
            return 0;
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-'))
            j->p++;
        if (!digits(j))
            return 0;
    }
    return 1;
}

static int word(jc *j, const char *w)
{
    size_t n = strlen(w);

    if ((size_t)(j->end - j->p) < n || memcmp(j->p, w, n) != 0)
        return 0;
    j->p += n;
    return 1;
}

static int value(jc *j);

static int members(jc *j, char close)
{
    blanks(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return 1;
    }
    for (;;) {
        blanks(j);
        if (close == '}') {
            if (!string(j, NULL, 0))
                return 0;
            blanks(j);
            if (j->p >= j->end || *j->p++ != ':')
                return 0;
        }
        if (!value(j))
            return 0;
        blanks(j);
        if (j->p >= j->end)
            return 0;
        if (*j->p == ',') {
            j->p++;
            continue;
        }
        if (*j->p++ != close)
            return 0;
        return 1;
    }
}

static int value(jc *j)
{
    int ok;

    blanks(j);
    if (j->p >= j->end)
        return 0;
    switch (*j->p) {
    case '{':
    case '[':
        if (++j->depth > 64)
            return 0;
        ok = members(j, *j->p++ == '{' ? '}' : ']');
        j->depth--;
        return ok;
    case '"': return string(j, NULL, 0);
    case 't': return word(j, "true");
    case 'f': return word(j, "false");
    case 'n': return word(j, "null");
    default: return number(j);
    }
}

int fed_test_json_valid(const char *s, size_t n)
{
    jc j = {(const unsigned char *)s, (const unsigned char *)s + n, 0};

    if (!value(&j))
        return 0;
    blanks(&j);
    return j.p == j.end;
}

/* Finds the top-level member key and leaves j at its value. */
static int find(jc *j, const char *key)
{
    char name[256];

    if (!fed_test_json_valid((const char *)j->p, (size_t)(j->end - j->p)))
        return 0;
    blanks(j);
    if (*j->p++ != '{')
        return 0;
    for (;;) {
        blanks(j);
        if (*j->p == '}' || !string(j, name, sizeof name))
            return 0;
        blanks(j);
        j->p++; /* ':' */
        blanks(j);
        if (!strcmp(name, key))
            return 1;
        if (!value(j))
            return 0;
        blanks(j);
        if (*j->p++ != ',')
            return 0;
    }
}

int fed_test_json_get_string(const char *s, size_t n, const char *key, char *out, size_t cap)
{
    jc j = {(const unsigned char *)s, (const unsigned char *)s + n, 0};

    return find(&j, key) && string(&j, out, cap);
}

int fed_test_json_get_raw(const char *s, size_t n, const char *key, char *out, size_t cap)
{
    jc j = {(const unsigned char *)s, (const unsigned char *)s + n, 0};
    const unsigned char *at;

    if (!find(&j, key))
        return 0;
    at = j.p;
    if (!value(&j) || (size_t)(j.p - at) + 1 > cap)
        return 0;
    memcpy(out, at, (size_t)(j.p - at));
    out[j.p - at] = '\0';
    return 1;
}
