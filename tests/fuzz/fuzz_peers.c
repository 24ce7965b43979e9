/* fuzz_peers.c - libFuzzer target for the peer table's two readers of
 * outside bytes: the first byte picks the seed-file parser (against a fixed
 * two-member allow-list) or a run of signed PEERS entries, as a frame's
 * vector would carry them. Entries that decode must re-encode to the same
 * bytes; nothing may read past the input. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "crypto/allow.h"
#include "gossip/peers.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char ALLOW[] = "a 7m74LiEOQEaAlN/dKHzHvKjKsZBvWn8JpgY20rqGnIE=\n"
                            "b dsTAzewvfytWBtVAm0ORK7PEAdDCjFiTMXAUFjdiYhY=\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fed_crypto_allow *allow = NULL;
    fed_gossip_peers *p = NULL;

    fed_log_set_level(FED_LOG_ERROR + 1);
    if (size < 1)
        return 0;
    if (fed_crypto_allow_new(&allow) != FED_OK || fed_gossip_peers_new(&p) != FED_OK)
        abort();
    if (fed_crypto_allow_parse(allow, ALLOW, sizeof ALLOW - 1, NULL) != FED_OK)
        abort();
    if (data[0] & 1) {
        int line = 0;

        if (fed_gossip_peers_parse(p, allow, (const char *)data + 1, size - 1, &line) != FED_OK &&
            line < 0)
            abort();
    } else {
        size_t at = 1;

        while (at < size) {
            fed_gossip_entry e;
            uint8_t back[FED_GOSSIP_ENTRY_MAX];
            size_t used = 0;

            if (fed_gossip_entry_decode(data + at, size - at, &e, &used) != FED_OK)
                break;
            if (used > size - at || fed_gossip_entry_encode(&e, back) != used ||
                memcmp(back, data + at, used) != 0)
                abort();
            if (fed_gossip_entry_verify(&e, allow, 1700000000) == FED_OK) /* needs a signature */
                abort();
            if (fed_gossip_peers_learn(p, &e, NULL) != FED_OK && fed_gossip_peers_count(p) == 0)
                abort();
            at += used;
        }
    }
    fed_gossip_peers_free(p);
    fed_crypto_allow_free(allow);
    return 0;
}
