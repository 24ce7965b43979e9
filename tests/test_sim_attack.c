/* test_sim_attack.c - sim/attack: fedsim's Byzantine clients. Each attack's
 * arithmetic on a small delta (signflip scales by -S, noise draws
 * SIGMA x N(0, 1) from the client's stream of the round, zero), every
 * malformed spec refused, the noise seed being the client's shuffle seed,
 * and install putting the hook on a config only for a real attack. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/err.h"
#include "core/rng.h"
#include "node/node.h"
#include "sim/attack.h"

#define assert_err(got, want) assert_string_equal(fed_errname(got), fed_errname(want))

static const float base[5] = {1.0f, -2.0f, 0.5f, 0.0f, 3.25f};

static void test_parse(void **state)
{
    static const char *bad[] = {"signflip",  "signflip:", "signflip:0", "signflip:-1",
                                "signflip:x", "signflip:1e7", "signflip:inf", "signflip:nan",
                                "signflip:2 ", "noise:", "noise:0", "noise:1x",
                                "zero:1",    "Zero",      "flip",       " zero"};
    fed_sim_attack a;

    (void)state;
    assert_err(fed_sim_attack_parse("", &a), FED_OK);
    assert_int_equal(a.kind, FED_SIM_ATTACK_NONE);
    assert_err(fed_sim_attack_parse(NULL, &a), FED_OK);
    assert_int_equal(a.kind, FED_SIM_ATTACK_NONE);
    assert_err(fed_sim_attack_parse("zero", &a), FED_OK);
    assert_int_equal(a.kind, FED_SIM_ATTACK_ZERO);
    assert_err(fed_sim_attack_parse("signflip:10", &a), FED_OK);
    assert_int_equal(a.kind, FED_SIM_ATTACK_SIGNFLIP);
    assert_true(a.param == 10.0f);
    assert_err(fed_sim_attack_parse("noise:0.25", &a), FED_OK);
    assert_int_equal(a.kind, FED_SIM_ATTACK_NOISE);
    assert_true(a.param == 0.25f);
    assert_err(fed_sim_attack_parse("signflip:1e6", &a), FED_OK);
    assert_true(a.param == 1e6f);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        assert_err(fed_sim_attack_parse(bad[i], &a), FED_ERR_SPEC);
        assert_int_equal(a.kind, FED_SIM_ATTACK_NONE); /* honest after a refusal */
    }
}

static void test_signflip_zero_none(void **state)
{
    fed_sim_attack a;
    float d[5];

    (void)state;
    assert_err(fed_sim_attack_parse("signflip:2", &a), FED_OK);
    memcpy(d, base, sizeof d);
    fed_sim_attack_tamper(&a, 1, d, 5);
    for (int i = 0; i < 5; i++)
        assert_true(d[i] == -2.0f * base[i]);
    assert_err(fed_sim_attack_parse("zero", &a), FED_OK);
    memcpy(d, base, sizeof d);
    fed_sim_attack_tamper(&a, 1, d, 5);
    for (int i = 0; i < 5; i++)
        assert_true(d[i] == 0.0f && !signbit(d[i]));
    assert_err(fed_sim_attack_parse("", &a), FED_OK);
    memcpy(d, base, sizeof d);
    fed_sim_attack_tamper(&a, 1, d, 5);
    assert_memory_equal(d, base, sizeof d);
    fed_sim_attack_tamper(&a, 1, NULL, 0); /* nothing to touch */
}

static void test_noise(void **state)
{
    fed_sim_attack a;
    float d[5], d2[5], other[5];
    fed_rng r;

    (void)state;
    assert_err(fed_sim_attack_parse("noise:0.5", &a), FED_OK);
    a.seed = 1234;
    memcpy(d, base, sizeof d);
    fed_sim_attack_tamper(&a, 7, d, 5);
    fed_rng_seed_stream(&r, 1234 ^ 0xbad, 7); /* the stream of the client and round */
    for (int i = 0; i < 5; i++)
        assert_true(d[i] == 0.5f * (float)fed_rng_normal(&r));
    memcpy(d2, base, sizeof d2); /* the same again: the honest values play no part */
    d2[0] = 99;
    fed_sim_attack_tamper(&a, 7, d2, 5);
    assert_memory_equal(d, d2, sizeof d);
    memcpy(other, base, sizeof other); /* another round, another draw */
    fed_sim_attack_tamper(&a, 8, other, 5);
    assert_memory_not_equal(d, other, sizeof d);
    a.seed = 1235; /* another client */
    memcpy(other, base, sizeof other);
    fed_sim_attack_tamper(&a, 7, other, 5);
    assert_memory_not_equal(d, other, sizeof d);
}

static void test_seed_install(void **state)
{
    uint8_t key[32];
    fed_node_config c;
    fed_sim_attack a;

    (void)state;
    for (int i = 0; i < 32; i++)
        key[i] = (uint8_t)(0x11 * (i + 1));
    /* the client's shuffle seed: cfg.seed ^ the key's first 6 bytes, little-endian */
    assert_true(fed_sim_attack_seed(0, key) == 0x665544332211ull);
    assert_true(fed_sim_attack_seed(0xff00000000000001ull, key) == 0xff00665544332210ull);
    fed_node_config_default(&c);
    c.seed = 42;
    assert_err(fed_sim_attack_parse("noise:1", &a), FED_OK);
    fed_sim_attack_install(&a, &c, key);
    assert_ptr_equal(c.hooks, &a.hooks);
    assert_true(c.hooks->tamper_delta == fed_sim_attack_tamper);
    assert_ptr_equal(c.hooks->ctx, &a);
    assert_null(c.hooks->sa_tamper);
    assert_null(c.hooks->ar_tamper);
    assert_true(a.seed == fed_sim_attack_seed(42, key));
    assert_err(fed_sim_attack_parse("", &a), FED_OK);
    fed_sim_attack_install(&a, &c, key); /* honest: no hook */
    assert_null(c.hooks);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_signflip_zero_none),
        cmocka_unit_test(test_noise),
        cmocka_unit_test(test_seed_install),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
