/* fuzz_checkpoint.c - libFuzzer target for the checkpoint byte format
 * (storage/store.h): the input is a checkpoint's bytes as they would come
 * back from the chunk rows. Whatever parses must have its sections inside
 * the buffer, in table order, unique names, and a total equal to the input. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "storage/store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(void *ctx, fed_log_level level, const char *line)
{
    (void)ctx;
    (void)level;
    (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fed_store_ckpt c;
    uint8_t *buf;
    const uint8_t *prev_end;

    fed_log_set_sink(quiet, NULL);
    buf = fed_alloc_aligned(size ? size : 1); /* as loaded: 64-byte aligned */
    if (!buf)
        return 0;
    if (size)
        memcpy(buf, data, size);
    if (fed_store_ckpt_parse(buf, size, &c) != FED_OK)
        goto out;
    if (c.nsections < 1 || c.nsections > FED_CKPT_MAX_SECTIONS || c.len != size || c.buf)
        abort();
    prev_end = buf;
    for (size_t i = 0; i < c.nsections; i++) {
        const uint8_t *d = c.sections[i].data;

        if (d < prev_end || d + c.sections[i].len > buf + size || (uintptr_t)d % 64)
            abort();
        prev_end = d + c.sections[i].len;
        if (fed_store_ckpt_find(&c, c.sections[i].name) != &c.sections[i])
            abort();
    }
    if (prev_end != buf + size)
        abort();
out:
    fed_free(buf);
    return 0;
}
