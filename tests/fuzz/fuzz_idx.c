/* fuzz_idx.c - libFuzzer target for the IDX reader (plain and gzip).
 * Input: 2 bytes (little-endian) choose where the images part ends, the
 * rest is images ‖ labels. A dataset that parses is checked for its
 * invariants and partitioned once. Never writes files. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(void *ctx, fed_log_level level, const char *line)
{
    (void)ctx;
    (void)level;
    (void)line;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const schemes[] = { "iid", "dirichlet:0.3", "shards:1" };
    fed_dataset *d = NULL;
    size_t split;

    fed_log_set_sink(quiet, NULL);
    if (size < 2)
        return 0;
    split = ((size_t)data[0] | (size_t)data[1] << 8) % (size - 2 + 1);
    data += 2;
    size -= 2;
    if (fed_data_parse_idx(data, split, data + split, size - split, &d) != FED_OK) {
        if (d)
            abort(); /* a failed parse must not hand out a dataset */
        return 0;
    }
    if (d->n == 0 || d->features != (size_t)d->shape.h * (size_t)d->shape.w || !d->x_u8)
        abort();
    for (size_t i = 0; i < d->n; i++)
        if (d->y[i] < 0 || d->y[i] >= d->shape.classes)
            abort();
    {
        uint32_t *idx = NULL;
        size_t n = 0, total = 0;
        int k = 1 + (int)(d->n % 3);

        for (int s = 0; s < k; s++) {
            if (fed_data_partition(d, schemes[d->n % 3], s, k, d->n, &idx, &n) == FED_OK) {
                total += n;
                for (size_t i = 0; i < n; i++)
                    if (idx[i] >= d->n)
                        abort();
                fed_free(idx);
            }
        }
        if (total != 0 && total != d->n)
            abort();
    }
    fed_data_free(d);
    return 0;
}
