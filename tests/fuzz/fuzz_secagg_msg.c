/* fuzz_secagg_msg.c - libFuzzer target for secure aggregation's stage
 * messages (node/secagg_msg_impl.h), the vectors an aggregator takes from its
 * clients and a client from its aggregator. The first byte picks the
 * parser, the next two bytes the count and n; the rest is the vector.
 * Every parser either refuses with its message's own error or takes
 * exactly what its count says; a key list that parses re-encodes to the
 * same bytes, unmask entries re-encode likewise, and nothing reads past
 * the input. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "node/secagg_msg_impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *v;
    size_t len;
    uint32_t count, n;
    fed_err e;

    if (size < 3)
        return 0;
    count = data[1];
    n = (uint32_t)data[2] + 1;
    v = data + 3;
    len = size - 3;
    switch (data[0] % 7) {
    case 0: {
        uint8_t a[32], b[32], s[64];

        e = fedi_sa_parse_keys_req(v, len, count, a, b, s);
        if (e != FED_OK && e != FED_ERR_SA_KEYS)
            abort();
        break;
    }
    case 1: {
        sa_key_entry *k = calloc(count + 1, sizeof *k);
        uint8_t out[SA_KEY_ENTRY_BYTES];

        if (!k)
            abort();
        e = fedi_sa_parse_key_list(v, len, count, k);
        if (e != FED_OK && e != FED_ERR_SA_KEYS)
            abort();
        for (uint32_t i = 0; e == FED_OK && i < count; i++) {
            fedi_sa_put_key_entry(out, &k[i]);
            if (memcmp(out, v + (size_t)i * SA_KEY_ENTRY_BYTES, sizeof out) != 0)
                abort();
        }
        free(k);
        break;
    }
    case 2:
    case 3: {
        sa_sealed_entry *en = calloc(count + 1, sizeof *en);
        const uint8_t *flags = NULL;

        if (!en)
            abort();
        e = data[0] % 7 == 2 ? fedi_sa_parse_sealed(v, len, count, n, en)
                             : fedi_sa_parse_inbox(v, len, count, n, &flags, en);
        if (e != FED_OK && e != FED_ERR_SA_SHARES)
            abort();
        for (uint32_t i = 0; e == FED_OK && i < count; i++)
            if (en[i].index >= n || en[i].sealed < v || en[i].sealed + FED_SECAGG_BOX_BYTES > v + len)
                abort();
        free(en);
        break;
    }
    case 4:
        e = fedi_sa_parse_flags(v, len, n, FED_ERR_SA_MASKED);
        if (e != FED_OK && e != FED_ERR_SA_MASKED)
            abort();
        break;
    case 5: {
        uint32_t *idx = calloc(count + 1, sizeof *idx);
        const uint8_t **sig = calloc(count + 1, sizeof *sig);

        if (!idx || !sig)
            abort();
        e = fedi_sa_parse_sigs(v, len, count, n, idx, sig);
        if (e != FED_OK && e != FED_ERR_SA_CONSIST)
            abort();
        free(idx);
        free(sig);
        break;
    }
    default: {
        sa_unmask_entry *en = calloc(count + 1, sizeof *en);
        uint8_t out[SA_UNMASK_ENTRY_BYTES];

        if (!en)
            abort();
        e = fedi_sa_parse_unmask(v, len, count, n, en);
        if (e != FED_OK && e != FED_ERR_SA_UNMASK)
            abort();
        for (uint32_t i = 0; e == FED_OK && i < count; i++) {
            fedi_sa_put_unmask_entry(out, &en[i]);
            if (memcmp(out, v + (size_t)i * SA_UNMASK_ENTRY_BYTES, sizeof out) != 0)
                abort();
        }
        free(en);
        break;
    }
    }
    return 0;
}
