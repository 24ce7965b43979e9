/* peers.h - the peer table: where each peer can be reached, and the peers
 * that members vouch for.
 *
 * Seeded from a text file, one peer a line:
 *     NAME URL        # an optional trailing comment
 * NAME is a member's name in the allow-list (or its base64 key), URL an NNG
 * address ("tcp://10.0.0.7:7400", "ipc:///run/fednode.sock"). Blank lines and
 * lines starting with '#' are skipped; lines are at most 1023 characters; a
 * member appears once. A seed line for a key not in the allow-list is
 * refused: the operator's file says where members are, never who is one.
 *
 * Grown by PEERS frames carrying signed entries (little-endian):
 *   off   size  field
 *     0     32  key: the peer's Ed25519 public key
 *    32      8  expiry: Unix seconds after which the entry is void
 *    40     32  voucher: the member whose signature follows
 *    72      1  L: URL length, 1..255
 *    73      L  URL (tcp:// or ipc://, printable ASCII)
 *  73+L     64  Ed25519 signature by the voucher over
 *               BLAKE2b-512("fednode peer entry v1" || bytes [0, 73+L))
 * An entry counts while it has not expired and its voucher is in the
 * allow-list (asked again each time, so a voucher removed by a SIGHUP
 * reload takes its entries with it). A member vouching for itself
 * publishes its address; a member vouching for another key makes that key
 * a member too (fed_gossip_peers_vouched), where the node allows it. */
#ifndef FED_GOSSIP_PEERS_H
#define FED_GOSSIP_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "crypto/allow.h"
#include "crypto/arena.h"

#define FED_GOSSIP_URL_MAX 255
#define FED_GOSSIP_ENTRY_MAX (73 + FED_GOSSIP_URL_MAX + 64)

typedef struct fed_gossip_peers fed_gossip_peers;

/* One signed entry, decoded. */
typedef struct fed_gossip_entry {
    uint8_t key[32];
    uint64_t expiry;
    uint8_t voucher[32];
    char url[FED_GOSSIP_URL_MAX + 1];
    uint8_t sig[64];
} fed_gossip_entry;

/* An entry for key at url until expiry, signed by the arena's identity (the
 * voucher). FED_ERR_FORMAT for a bad URL, FED_ERR_KEY without an identity. */
FED_WUR fed_err fed_gossip_entry_sign(const fed_crypto_arena *voucher, const uint8_t key[32],
                                      const char *url, uint64_t expiry, fed_gossip_entry *out);
/* Its bytes (at most FED_GOSSIP_ENTRY_MAX) into out; returns how many. */
size_t fed_gossip_entry_encode(const fed_gossip_entry *e, uint8_t *out);
/* One entry from the front of in: FED_ERR_PAYLOAD when short or malformed;
 * *used gets its length. Checks no signature. */
FED_WUR fed_err fed_gossip_entry_decode(const uint8_t *in, size_t len, fed_gossip_entry *e,
                                        size_t *used);
/* FED_OK when e counts at now_s: FED_ERR_EXPIRED, FED_ERR_UNKNOWN_SENDER
 * (the voucher is not a member), FED_ERR_SIGNATURE. */
FED_WUR fed_err fed_gossip_entry_verify(const fed_gossip_entry *e, const fed_crypto_allow *allow,
                                        uint64_t now_s);

FED_WUR fed_err fed_gossip_peers_new(fed_gossip_peers **out);
void fed_gossip_peers_free(fed_gossip_peers *p);

/* Replaces the table with text's (len bytes); on error nothing changes and
 * *err_line (may be NULL) gets the line at fault: FED_ERR_FORMAT (syntax, a
 * URL that is not tcp:// or ipc://, too long), FED_ERR_UNKNOWN_SENDER (not
 * a member), FED_ERR_EXISTS (a member twice), FED_ERR_NOMEM. */
FED_WUR fed_err fed_gossip_peers_parse(fed_gossip_peers *p, const fed_crypto_allow *allow,
                                       const char *text, size_t len, int *err_line);
/* The same from a file: FED_ERR_NOTFOUND, FED_ERR_IO, FED_ERR_TOO_LARGE
 * (over 1 MiB) besides the above. */
FED_WUR fed_err fed_gossip_peers_load(fed_gossip_peers *p, const fed_crypto_allow *allow,
                                      const char *path, int *err_line);

/* What fed_gossip_peers_learn did with an entry. */
enum {
    FED_GOSSIP_KEPT = 0,  /* nothing: the table's entry is as new or newer */
    FED_GOSSIP_TAKEN = 1, /* stored, at the URL the table had */
    FED_GOSSIP_MOVED = 2, /* stored, with a URL new for its key */
};
/* A signed entry into the table, taken as it is (a node's own --publish
 * file). It replaces what the table held for its key when that was a seed
 * line, or a signed entry with an earlier expiry (at equal expiry: a
 * smaller URL), so an older entry replayed or still in circulation never
 * moves a peer back. An entry taken has its signature verified once, here,
 * and the verdict kept: only one that held counts (fed_gossip_peers_valid,
 * _vouched). *what (may be NULL) gets a FED_GOSSIP_* above. FED_ERR_NOMEM,
 * FED_ERR_FULL (4096 entries). */
FED_WUR fed_err fed_gossip_peers_learn(fed_gossip_peers *p, const fed_gossip_entry *e,
                                       int *what);
/* learn for an entry from the network: refused unless unexpired at now_s
 * and vouched by a member of allow (FED_ERR_EXPIRED, _UNKNOWN_SENDER), and,
 * when it would change the table, unless its signature verifies
 * (FED_ERR_SIGNATURE; the table unchanged). An entry the table holds as new
 * or newer costs no verification: peers re-advertise theirs every round. */
FED_WUR fed_err fed_gossip_peers_offer(fed_gossip_peers *p, const fed_gossip_entry *e,
                                       const fed_crypto_allow *allow, uint64_t now_s,
                                       int *what);
/* Whether key is vouched for at now_s: not in the allow-list, with an entry
 * by another key whose signature held when it was learned, not expired, and
 * whose voucher is in allow now. No signature is verified here. */
int fed_gossip_peers_vouched(const fed_gossip_peers *p, const uint8_t key[32],
                             const fed_crypto_allow *allow, uint64_t now_s);

size_t fed_gossip_peers_count(const fed_gossip_peers *p);
/* The i-th entry (i < count): seed lines first, in file order, then the
 * learned ones. */
void fed_gossip_peers_get(const fed_gossip_peers *p, size_t i, const uint8_t **key,
                          const char **url);
/* The i-th entry's signed form while it counts at now_s (its signature held
 * when learned, not expired, its voucher in allow); NULL otherwise, and for
 * a seed line. */
const fed_gossip_entry *fed_gossip_peers_valid(const fed_gossip_peers *p, size_t i,
                                               const fed_crypto_allow *allow, uint64_t now_s);

#endif
