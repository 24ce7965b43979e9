/* allow.h - the allow-list: which public keys are members, by name.
 * Text format, one member per line:
 *     NAME BASE64KEY        # an optional trailing comment
 * NAME is 1-63 characters of [A-Za-z0-9._-]; BASE64KEY is a public key as
 * node.pub writes it (crypto/identity.h). Blank lines and lines whose first
 * non-blank character is '#' are skipped. Names and keys are unique. Lines
 * are at most 1023 characters. A reload parses into a new list and swaps it in
 * only when the whole file is good, so a bad edit never empties membership. */
#ifndef FED_CRYPTO_ALLOW_H
#define FED_CRYPTO_ALLOW_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "crypto/arena.h"

#define FED_CRYPTO_NAME_MAX 63

typedef struct fed_crypto_allow fed_crypto_allow;

/* An empty list. */
FED_WUR fed_err fed_crypto_allow_new(fed_crypto_allow **out);
void fed_crypto_allow_free(fed_crypto_allow *al);

/* Replaces the contents with text's (len bytes). On error nothing changes
 * and *err_line (may be NULL) gets the 1-based line at fault (0 when it is
 * not a line's fault): FED_ERR_FORMAT (syntax, bad name, not base64, line
 * too long), FED_ERR_KEY (not a usable public key), FED_ERR_EXISTS
 * (duplicate name or key), FED_ERR_NOMEM. Each error is logged with its
 * line. */
FED_WUR fed_err fed_crypto_allow_parse(fed_crypto_allow *al, const char *text, size_t len,
                                       int *err_line);
/* The same from a file (SIGHUP reloads call it again). FED_ERR_NOTFOUND,
 * FED_ERR_IO, FED_ERR_TOO_LARGE (over 16 MiB) besides the above. */
FED_WUR fed_err fed_crypto_allow_load(fed_crypto_allow *al, const char *path, int *err_line);
/* Adds one member. FED_ERR_FORMAT (bad name), FED_ERR_EXISTS, FED_ERR_NOMEM. */
FED_WUR fed_err fed_crypto_allow_add(fed_crypto_allow *al, const char *name,
                                     const uint8_t pk[FED_CRYPTO_PK_BYTES]);

/* The member's name, or NULL when pk is not a member. */
const char *fed_crypto_allow_find(const fed_crypto_allow *al,
                                  const uint8_t pk[FED_CRYPTO_PK_BYTES]);
size_t fed_crypto_allow_count(const fed_crypto_allow *al);
/* The i-th member in key order (i < count): the order every member sees. */
void fed_crypto_allow_get(const fed_crypto_allow *al, size_t i, const char **name,
                          const uint8_t **pk);
/* Bumped on each successful parse, load or add. */
uint64_t fed_crypto_allow_generation(const fed_crypto_allow *al);

#endif
