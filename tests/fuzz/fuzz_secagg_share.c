/* fuzz_secagg_share.c - libFuzzer target for secure aggregation's share
 * codec (secagg/shamir.h), the bytes a client will receive for each of its
 * neighbours. The first byte picks a threshold; the rest is read as a run
 * of 44-byte shares. A share that decodes must re-encode to the same bytes
 * and hold a nonzero x and values below p; a bad one is wiped. The shares
 * that decoded are then combined: any outcome but a crash is fine, a seed
 * comes back only when the shares agree (combining again gives the same),
 * and nothing may read past the input. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "secagg/field.h"
#include "secagg/shamir.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fed_secagg_share *sh;
    uint8_t seed[FED_SECAGG_SEED_BYTES], again[FED_SECAGG_SEED_BYTES];
    uint8_t back[FED_SECAGG_SHARE_BYTES];
    size_t m = 0, at = 1;
    uint32_t t;
    fed_err err;

    if (size < 1)
        return 0;
    sh = calloc(size / FED_SECAGG_SHARE_BYTES + 1, sizeof *sh);
    if (!sh)
        abort();
    while (at < size) {
        fed_secagg_share s;

        err = fed_secagg_share_decode(data + at, size - at, &s);
        if (err == FED_ERR_TRUNCATED) {
            if (size - at >= FED_SECAGG_SHARE_BYTES)
                abort();
            break;
        }
        if (err == FED_OK) {
            fed_secagg_share_encode(&s, back);
            if (memcmp(back, data + at, sizeof back) != 0 || s.x == 0)
                abort();
            for (int l = 0; l < FED_SECAGG_LIMBS; l++)
                if (s.y[l] >= FED_SECAGG_P)
                    abort();
            sh[m++] = s;
        } else {
            static const fed_secagg_share zero;

            if (err != FED_ERR_FORMAT || memcmp(&s, &zero, sizeof s) != 0)
                abort();
        }
        at += FED_SECAGG_SHARE_BYTES;
    }
    t = (uint32_t)(data[0] % 8) + 1;
    err = fed_secagg_shamir_combine(sh, m, t, seed);
    if (err == FED_OK) {
        if (m < t || fed_secagg_shamir_combine(sh, m, t, again) != FED_OK ||
            memcmp(seed, again, sizeof seed) != 0)
            abort();
    } else if (err != FED_ERR_TOO_FEW && err != FED_ERR_INVAL && err != FED_ERR_CORRUPT &&
               err != FED_ERR_NOMEM) {
        abort();
    }
    free(sh);
    return 0;
}
