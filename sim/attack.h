/* attack.h - fedsim's Byzantine clients (--byzantine FRACTION:ATTACK): the
 * attack spec and its arithmetic on a client's delta, installed as that
 * client's tamper_delta hook (node/test_hooks.h). The node knows no attack: a
 * daemon runs without hooks and sends what it trained. */
#ifndef FED_SIM_ATTACK_H
#define FED_SIM_ATTACK_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "node/node.h"
#include "node/test_hooks.h"

typedef enum fed_sim_attack_kind {
    FED_SIM_ATTACK_NONE = 0, /* "": honest, the delta untouched */
    FED_SIM_ATTACK_SIGNFLIP, /* "signflip:S": the delta becomes -S x itself */
    FED_SIM_ATTACK_NOISE,    /* "noise:SIGMA": N(0, SIGMA^2) in its place */
    FED_SIM_ATTACK_ZERO,     /* "zero": zeros */
} fed_sim_attack_kind;

/* One Byzantine client's attack, and the hooks its node points to. */
typedef struct fed_sim_attack {
    fed_sim_attack_kind kind;
    float param;   /* S or SIGMA */
    uint64_t seed; /* noise: its streams (one a round) */
    fed_node_test_hooks hooks; /* set by fed_sim_attack_install */
} fed_sim_attack;

/* "", "signflip:S", "noise:SIGMA" or "zero" (S, SIGMA finite, in (0, 1e6])
 * into *a (seed 0); FED_ERR_SPEC otherwise, *a then honest. */
FED_WUR fed_err fed_sim_attack_parse(const char *spec, fed_sim_attack *a);

/* The noise seed of a client of cfg_seed and public key: the seed its node
 * shuffles with (node/client.c), so each client draws its own noise. */
uint64_t fed_sim_attack_seed(uint64_t cfg_seed, const uint8_t key[32]);

/* The tamper_delta hook: ctx is a fed_sim_attack, read only (it runs in the
 * client's training job, off the loop). */
void fed_sim_attack_tamper(void *ctx, uint64_t round, float *delta, size_t n);

/* Makes cfg (the client of public key key; its seed set) send a's attack
 * (cfg->hooks = &a->hooks), a->seed from fed_sim_attack_seed: a must outlive
 * the node. An honest a leaves cfg without hooks. */
void fed_sim_attack_install(fed_sim_attack *a, fed_node_config *cfg, const uint8_t key[32]);

#endif
