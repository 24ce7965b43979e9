/* identity.h - a node's identity on disk and public keys in text.
 * `DIR/node.key` holds the Ed25519 seed (mode 0600, refused when looser or
 * not owned by the user), optionally sealed under a passphrase; `DIR/node.pub`
 * holds the public key as one base64 line (libsodium's original variant, with
 * padding: 44 characters) - the same text an allow-list line carries.
 *
 * node.key, little-endian:
 *   off  size  field
 *     0     4  magic "FEDK"
 *     4     1  version = 1
 *     5     1  protection: 0 = none, 1 = passphrase
 *     6     2  reserved, zero
 *     8    32  Ed25519 public key (lets `fednode pubkey` work without the passphrase)
 *   protection 0 (72 bytes in all):
 *    40    32  Ed25519 seed
 *   protection 1 (144 bytes in all):
 *    40    16  salt for crypto_pwhash (Argon2id v1.3)
 *    56     8  opslimit
 *    64     8  memlimit (bytes)
 *    72    24  nonce
 *    96    48  XChaCha20-Poly1305-IETF(pwhash key, nonce, ad = bytes 0..95, seed):
 *              the sealed seed (32) and its tag (16)
 * A key file whose public key does not match its seed is refused. */
#ifndef FED_CRYPTO_IDENTITY_H
#define FED_CRYPTO_IDENTITY_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/rng.h"
#include "crypto/arena.h"

#define FED_CRYPTO_KEYFILE "node.key"
#define FED_CRYPTO_PUBFILE "node.pub"
#define FED_CRYPTO_PK_B64_LEN 44 /* base64 text of a public key, without NUL */
#define FED_CRYPTO_PASSPHRASE_MAX 1024

/* Text form of a public key; out gets FED_CRYPTO_PK_B64_LEN chars and a NUL. */
void fed_crypto_pk_to_base64(const uint8_t pk[FED_CRYPTO_PK_BYTES],
                             char out[FED_CRYPTO_PK_B64_LEN + 1]);
/* Parses exactly len characters. FED_ERR_FORMAT: not base64 of 32 bytes;
 * FED_ERR_KEY: 32 bytes that are not a usable Ed25519 public key. */
FED_WUR fed_err fed_crypto_pk_from_base64(const char *text, size_t len,
                                          uint8_t pk[FED_CRYPTO_PK_BYTES]);

/* Argon2id cost of a passphrase-sealed key file. */
typedef struct fed_crypto_pwcost {
    uint64_t opslimit;
    size_t memlimit;
} fed_crypto_pwcost;
/* crypto_pwhash's "interactive" limits: what `fednode keygen` uses. */
fed_crypto_pwcost fed_crypto_pwcost_default(void);

/* Writes DIR/node.key (0600) and DIR/node.pub for a's identity, creating DIR
 * and missing parents (0700). pass (pass_len bytes; NULL or 0: none) seals
 * the seed under cost (NULL: the default); rnd draws the salt and nonce.
 * FED_ERR_EXISTS: DIR/node.key exists (it is never overwritten);
 * FED_ERR_KEY: a has no identity; FED_ERR_IO. */
FED_WUR fed_err fed_crypto_identity_save(fed_crypto_arena *a, const char *dir, const char *pass,
                                         size_t pass_len, const fed_crypto_pwcost *cost,
                                         fed_random_fn rnd, void *rnd_ctx);
/* Loads DIR/node.key into a (replacing its identity). FED_ERR_NOTFOUND;
 * FED_ERR_PERM: group/other may access it, or another user owns it (but
 * in $CREDENTIALS_DIRECTORY, systemd's copy of a LoadCredential= file, root
 * may own it and the group may read it: the ACL mask systemd's read grant
 * to the service's user shows as);
 * FED_ERR_PASSPHRASE: sealed and pass is missing (pass_len 0) or wrong;
 * FED_ERR_TRUNCATED: the file ends before its kind's length (logged with
 * both); FED_ERR_KEY: malformed file; FED_ERR_IO. */
FED_WUR fed_err fed_crypto_identity_load(fed_crypto_arena *a, const char *dir, const char *pass,
                                         size_t pass_len);
/* The public key from DIR/node.pub, or from node.key's header when there is
 * no node.pub (then node.key's permissions are checked as above). */
FED_WUR fed_err fed_crypto_pubkey_load(const char *dir, uint8_t pk[FED_CRYPTO_PK_BYTES]);

/* The first line of path (without its line end) into buf (cap bytes,
 * NUL-terminated); *len its length. FED_ERR_TOO_LARGE: the line does not
 * fit; FED_ERR_FORMAT: empty; FED_ERR_NOTFOUND, FED_ERR_IO. buf should be
 * guarded memory; what was read beyond the line is wiped. */
FED_WUR fed_err fed_crypto_passphrase_read(const char *path, char *buf, size_t cap, size_t *len);

#endif
