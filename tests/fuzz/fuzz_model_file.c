/* fuzz_model_file.c - libFuzzer target for the model file (model/io.h).
 * An input whose first byte is odd has its checksum recomputed first, so
 * the fuzzer reaches the checks behind the CRC; the rest is parsed as is.
 * Whatever parses must have a valid spec, its exact parameter count, and
 * only finite parameters. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/io.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(void *ctx, fed_log_level level, const char *line)
{
    (void)ctx;
    (void)level;
    (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fed_model_file f;
    uint8_t *buf;
    size_t len, n = 0;

    fed_log_set_sink(quiet, NULL);
    if (size < 1)
        return 0;
    len = size - 1;
    buf = malloc(len ? len : 1);
    if (!buf)
        return 0;
    memcpy(buf, data + 1, len);
    if ((data[0] & 1) && len >= 4) {
        uint32_t crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), buf, (uInt)(len - 4));

        for (int i = 0; i < 4; i++)
            buf[len - 4 + (size_t)i] = (uint8_t)(crc >> (8 * i));
    }
    if (fed_model_file_parse(buf, len, &f) == FED_OK) {
        if (fed_model_spec_nparams(f.whole, f.shape, &n) != FED_OK || n != f.nparams ||
            !f.params)
            abort();
        for (size_t i = 0; i < f.nparams; i++)
            if (!isfinite(f.params[i]))
                abort();
        fed_model_file_fini(&f);
    } else if (f.params || f.whole) {
        abort(); /* a failed parse owns nothing */
    }
    free(buf);
    return 0;
}
