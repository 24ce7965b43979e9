/* bench_codec.c - encode and decode rates of every codec on a 4M-entry
 * (16 MiB of f32) vector of normal values; MiB/s counts the f32 input (or
 * output) bytes. topk keeps a residual (error feedback). Best of several
 * runs on a shared machine; nothing asserts a time. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/alloc.h"
#include "core/rng.h"
#include "model/codec.h"

#define N ((size_t)4 << 20)
#define REPS 5

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(void)
{
    const char *names[] = {"f32", "f64", "f16", "q8", "topk:0.01", "topk:0.1"};
    float *x = fed_alloc_aligned(N * sizeof *x), *y = fed_alloc_aligned(N * sizeof *y);
    float *r = fed_alloc_aligned(N * sizeof *r);
    uint8_t *buf = fed_alloc_aligned(16 + N * 8);
    double mib = N * 4 / 1048576.0;
    fed_rng rng;

    if (!x || !y || !r || !buf)
        return 1;
    fed_rng_seed(&rng, 1);
    for (size_t i = 0; i < N; i++)
        x[i] = (float)(fed_rng_normal(&rng) * 0.01);
    printf("bench_codec: %zu entries (%.0f MiB of f32), best of %d (shared machine: noisy)\n", N,
           mib, REPS);
    for (size_t c = 0; c < sizeof names / sizeof names[0]; c++) {
        fed_codec codec;
        double te = 1e9, td = 1e9, t;
        size_t len = 0;

        if (fed_codec_parse(names[c], &codec) != FED_OK)
            return 1;
        for (int k = 0; k < REPS; k++) {
            for (size_t i = 0; i < N; i++)
                r[i] = 0;
            t = now_s();
            if (fed_codec_encode(&codec, x, N, codec.id == FED_CODEC_TOPK ? r : NULL, buf,
                                 16 + N * 8, &len) != FED_OK)
                return 1;
            t = now_s() - t;
            te = t < te ? t : te;
            t = now_s();
            if (fed_codec_decode(buf, len, codec.id, y, N) != FED_OK)
                return 1;
            t = now_s() - t;
            td = t < td ? t : td;
        }
        printf("  %-10s encode %8.1f MiB/s  decode %8.1f MiB/s  size %6.2f%% of f32\n", names[c],
               mib / te, mib / td, 100.0 * len / (N * 4.0));
    }
    fed_free(x);
    fed_free(y);
    fed_free(r);
    fed_free(buf);
    return 0;
}
