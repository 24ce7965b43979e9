/* fuzz_image.c - libFuzzer target for the image decoders' wrapper (PNG by
 * libpng, JPEG by libjpeg-turbo, told apart by magic bytes) and the fitting
 * to an input shape. Input: 1 byte choosing gray or RGB and the output
 * size, then the file. A decoded image must have a size within the bound;
 * a failure must hand out nothing. Never writes files. */
#include <stdint.h>
#include <stdlib.h>

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
    uint8_t *px = NULL, out[3 * 16 * 16];
    int w = 0, h = 0, c, dw, dh;

    fed_log_set_sink(quiet, NULL);
    if (size < 1)
        return 0;
    c = data[0] & 1 ? 3 : 1;
    dw = 1 + (data[0] >> 1 & 15);
    dh = 1 + (data[0] >> 5);
    if (fed_data_decode_image(data + 1, size - 1, "<fuzz>", c, &px, &w, &h) != FED_OK) {
        if (px || w || h)
            abort();
        return 0;
    }
    if (!px || w < 1 || h < 1 || (uint64_t)w * (uint64_t)h > FED_DATA_IMG_MAX_PIXELS)
        abort();
    fed_data_fit_image(px, w, h, c, out, dw, dh);
    fed_free(px);
    return 0;
}
