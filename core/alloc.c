/* alloc.c - allocation wrappers with a failure-injection hook for tests.
 * The hook and the N-th-allocation counter are the one piece of global state
 * this module keeps (DESIGN.md allows it); they are set once, by a test. */
#include "core/alloc.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static fed_alloc_fail_fn hook_fn;
static void *hook_ctx;
static atomic_ulong alloc_count; /* every thread allocates: counted atomically */
static unsigned long fail_at;
static int fail_sticky;

void fed_alloc_set_hook(fed_alloc_fail_fn fn, void *ctx)
{
    hook_fn = fn;
    hook_ctx = ctx;
}

void fed_alloc_fail_nth(unsigned long n, int sticky)
{
    atomic_store_explicit(&alloc_count, 0, memory_order_relaxed);
    fail_at = n;
    fail_sticky = sticky;
}

unsigned long fed_alloc_count(void)
{
    return atomic_load_explicit(&alloc_count, memory_order_relaxed);
}

static int should_fail(size_t size)
{
    unsigned long nth = atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed) + 1;

    if (fail_at && (nth == fail_at || (fail_sticky && nth > fail_at)))
        return 1;
    return hook_fn ? hook_fn(hook_ctx, size) : 0;
}

size_t fed_mul_size(size_t n, size_t size, int *ok)
{
    if (size && n > SIZE_MAX / size) {
        *ok = 0;
        return 0;
    }
    return n * size;
}

void *fed_malloc(size_t size)
{
    if (should_fail(size))
        return NULL;
    return malloc(size ? size : 1);
}

void *fed_calloc(size_t n, size_t size)
{
    int ok = 1;
    size_t total = fed_mul_size(n, size, &ok);

    if (!ok || should_fail(total))
        return NULL;
    return calloc(total ? n : 1, total ? size : 1);
}

void *fed_realloc(void *p, size_t size)
{
    if (should_fail(size))
        return NULL;
    return realloc(p, size ? size : 1);
}

void *fed_alloc_aligned(size_t size)
{
    void *p = NULL;
    size_t rounded = (size + 63) & ~(size_t)63;

    if (rounded < size || should_fail(size))
        return NULL;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0)
        return NULL;
    memset(p, 0, rounded ? rounded : 64);
    return p;
}

char *fed_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = fed_malloc(n);

    if (d)
        memcpy(d, s, n);
    return d;
}

void fed_free(void *p) { free(p); }
