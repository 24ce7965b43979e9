/* fuzz_safetensors.c - libFuzzer target for the strict .safetensors reader:
 * the input is a whole file. Whatever parses must describe tensors that tile
 * its data exactly; when they fit a model table (names < 32 bytes, at most
 * 4 dims), reading them out and writing them back must give the same
 * tensors, byte for byte, and the written file must parse again. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/alloc.h"
#include "core/log.h"
#include "model/safetensors.h"

#define FUZZ_MAX_TENSORS 32 /* tables this target builds on the stack */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void quiet(void *ctx, fed_log_level level, const char *line)
{
    (void)ctx;
    (void)level;
    (void)line;
}

/* f's tensors as a model table over a flat buffer, in file order; 0 if they
 * do not fit one. */
static int as_table(const fed_store_st_file *f, fed_tensor_info *t, size_t *nparams)
{
    size_t off = 0;

    if (f->ntensors > FUZZ_MAX_TENSORS)
        return 0;
    for (size_t i = 0; i < f->ntensors; i++) {
        const fed_store_st_tensor *s = &f->tensors[i];

        if (strlen(s->name) >= sizeof t[i].name || s->ndim > 4)
            return 0;
        memset(&t[i], 0, sizeof t[i]);
        strcpy(t[i].name, s->name);
        t[i].offset = off;
        t[i].numel = (size_t)((s->end - s->begin) / (s->i64 ? 8 : 4));
        t[i].flags = s->i64 ? FED_TENSOR_INT64 : 0;
        t[i].ndim = s->ndim;
        for (int k = 0; k < s->ndim; k++) {
            if (s->shape[k] > (1u << 30))
                return 0;
            t[i].shape[k] = (int)s->shape[k];
        }
        off += t[i].numel;
    }
    *nparams = off;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fed_store_st_file f, g;
    fed_tensor_info t[FUZZ_MAX_TENSORS];
    size_t np = 0, len = 0, end = 0;
    float *p = NULL;
    uint8_t *out = NULL;
    fed_err e;

    fed_log_set_sink(quiet, NULL);
    if (fed_store_safetensors_parse(data, size, &f) != FED_OK) {
        if (f.tensors || f.ntensors)
            abort();
        return 0;
    }
    for (size_t i = 0; i < f.ntensors; i++) {
        if (f.tensors[i].end > f.data_len || f.tensors[i].begin > f.tensors[i].end)
            abort();
        end += (size_t)(f.tensors[i].end - f.tensors[i].begin);
    }
    if (end != f.data_len)
        abort(); /* the tensors tile the data */
    if (!as_table(&f, t, &np))
        goto out;
    p = fed_malloc(np ? np * sizeof *p : 1);
    if (!p)
        goto out;
    e = fed_store_safetensors_to_params(&f, t, (int)f.ntensors, NULL, p);
    if (e == FED_ERR_NAN)
        goto out;
    if (e != FED_OK)
        abort();
    {
        fed_store_st_model m = {f.spec[0] ? f.spec : NULL, f.input, t, (int)f.ntensors, p,
                                FED_ST_INPUT_UNSAID, NULL, NULL, 0, NULL};

        if (fed_store_safetensors_encode(&m, &out, &len) != FED_OK)
            goto out;
    }
    if (fed_store_safetensors_parse(out, len, &g) != FED_OK || g.ntensors != f.ntensors)
        abort();
    for (size_t i = 0; i < f.ntensors; i++) /* (an I64 count passes through a float) */
        if (!f.tensors[i].i64 &&
            memcmp(g.data + g.tensors[i].begin, f.data + f.tensors[i].begin,
                   (size_t)(f.tensors[i].end - f.tensors[i].begin)) != 0)
            abort();
    if (strcmp(g.spec, f.spec) != 0)
        abort();
    fed_store_safetensors_fini(&g);
out:
    fed_free(out);
    fed_free(p);
    fed_store_safetensors_fini(&f);
    return 0;
}
