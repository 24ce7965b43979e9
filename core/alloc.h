/* alloc.h - every heap allocation of fednode goes through here.
 * A test installs a hook to fail the N-th allocation and prove that each
 * failure path returns FED_ERR_NOMEM and leaks nothing. fed_alloc_aligned
 * gives 64-byte aligned memory for tensors (free it with fed_free too). */
#ifndef FED_CORE_ALLOC_H
#define FED_CORE_ALLOC_H

#include <stddef.h>

/* Called before each allocation; return nonzero to make it fail. */
typedef int (*fed_alloc_fail_fn)(void *ctx, size_t size);

/* Set once by a test (NULL removes it). Not for production code. */
void fed_alloc_set_hook(fed_alloc_fail_fn fn, void *ctx);
/* Convenience hook: fail the n-th allocation from now (1-based) and every
 * one after it when sticky; n == 0 disables. Returns allocations counted so far. */
void fed_alloc_fail_nth(unsigned long n, int sticky);
unsigned long fed_alloc_count(void);

void *fed_malloc(size_t size);
void *fed_calloc(size_t n, size_t size);
void *fed_realloc(void *p, size_t size);
void *fed_alloc_aligned(size_t size); /* 64-byte aligned, zeroed */
char *fed_strdup(const char *s);
void fed_free(void *p);

/* n * size, or 0 with *ok cleared when it overflows. */
size_t fed_mul_size(size_t n, size_t size, int *ok);

#endif
