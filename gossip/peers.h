/* peers.h - the peer table: where each member can be reached. Seeded from a
 * text file, one peer a line:
 *     NAME URL        # an optional trailing comment
 * NAME is a member's name in the allow-list (or its base64 key), URL an NNG
 * address ("tcp://10.0.0.7:7400", "ipc:///run/fednode.sock"). Blank lines and
 * lines starting with '#' are skipped; lines are at most 1023 characters; a
 * member appears once. A peer not in the allow-list is refused (the table
 * says where members are, never who is one). */
#ifndef FED_GOSSIP_PEERS_H
#define FED_GOSSIP_PEERS_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "crypto/allow.h"

#define FED_GOSSIP_URL_MAX 255

typedef struct fed_gossip_peers fed_gossip_peers;

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

size_t fed_gossip_peers_count(const fed_gossip_peers *p);
/* The i-th entry (i < count), in file order. */
void fed_gossip_peers_get(const fed_gossip_peers *p, size_t i, const uint8_t **key,
                          const char **url);

#endif
