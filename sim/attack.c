/* attack.c - fedsim's Byzantine clients: the attack spec and what each
 * attack does to a client's delta (see attack.h). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "core/opt.h"
#include "sim/attack.h"

fed_err fed_sim_attack_parse(const char *spec, fed_sim_attack *a)
{
    char *end;
    double v;

    memset(a, 0, sizeof *a);
    if (!spec || !spec[0])
        return FED_OK;
    if (!strcmp(spec, "zero")) {
        a->kind = FED_SIM_ATTACK_ZERO;
        return FED_OK;
    }
    if (!strncmp(spec, "signflip:", 9) || !strncmp(spec, "noise:", 6)) {
        const char *num = spec[0] == 's' ? spec + 9 : spec + 6;

        v = fed_strtod_decimal(num, &end);
        if (end == num || *end || !isfinite(v) || !(v > 0) || v > 1e6)
            return FED_ERR_SPEC;
        a->kind = spec[0] == 's' ? FED_SIM_ATTACK_SIGNFLIP : FED_SIM_ATTACK_NOISE;
        a->param = (float)v;
        return FED_OK;
    }
    return FED_ERR_SPEC;
}

uint64_t fed_sim_attack_seed(uint64_t cfg_seed, const uint8_t key[32])
{
    return cfg_seed ^ ((uint64_t)key[0] | (uint64_t)key[1] << 8 | (uint64_t)key[2] << 16 |
                       (uint64_t)key[3] << 24 | (uint64_t)key[4] << 32 | (uint64_t)key[5] << 40);
}

void fed_sim_attack_tamper(void *ctx, uint64_t round, float *d, size_t n)
{
    const fed_sim_attack *a = ctx;
    fed_rng r;

    switch (a->kind) {
    case FED_SIM_ATTACK_SIGNFLIP:
        for (size_t i = 0; i < n; i++)
            d[i] *= -a->param;
        break;
    case FED_SIM_ATTACK_NOISE:
        fed_rng_seed_stream(&r, a->seed ^ 0xbad, round);
        for (size_t i = 0; i < n; i++)
            d[i] = a->param * (float)fed_rng_normal(&r);
        break;
    case FED_SIM_ATTACK_ZERO:
        memset(d, 0, n * sizeof *d);
        break;
    default:
        break;
    }
}

void fed_sim_attack_install(fed_sim_attack *a, fed_node_config *cfg, const uint8_t key[32])
{
    a->seed = fed_sim_attack_seed(cfg->seed, key);
    memset(&a->hooks, 0, sizeof a->hooks);
    a->hooks.ctx = a;
    a->hooks.tamper_delta = fed_sim_attack_tamper;
    cfg->hooks = a->kind != FED_SIM_ATTACK_NONE ? &a->hooks : NULL;
}
