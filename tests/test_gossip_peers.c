/* test_gossip_peers.c - the peer table: its seed file (members only, bad
 * lines named), signed entries (the bytes round-trip; expired, unsigned by
 * a member, tampered or malformed entries refused with their own codes),
 * what learning an entry changes, and who counts as vouched for. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "core/log.h"
#include "core/rng.h"
#include "crypto/allow.h"
#include "crypto/arena.h"
#include "gossip/peers.h"

#define NOW 1700000000u

typedef struct world {
    fed_crypto_arena *a, *b, *x; /* members a and b; x outside the list */
    fed_crypto_allow *allow;
    fed_rng rng;
} world;

static fed_crypto_arena *identity(fed_rng *r)
{
    fed_crypto_arena_cfg c;
    fed_crypto_arena *a;

    fed_crypto_arena_cfg_default(&c);
    assert_int_equal(fed_crypto_arena_new(&c, &a), FED_OK);
    assert_int_equal(fed_crypto_arena_generate(a, fed_rng_random, r), FED_OK);
    return a;
}

static int setup(void **state)
{
    world *w = test_calloc(1, sizeof *w);

    fed_log_set_level(FED_LOG_ERROR + 1);
    fed_rng_seed(&w->rng, 42);
    w->a = identity(&w->rng);
    w->b = identity(&w->rng);
    w->x = identity(&w->rng);
    assert_int_equal(fed_crypto_allow_new(&w->allow), FED_OK);
    assert_int_equal(fed_crypto_allow_add(w->allow, "a", fed_crypto_arena_pubkey(w->a)), FED_OK);
    assert_int_equal(fed_crypto_allow_add(w->allow, "b", fed_crypto_arena_pubkey(w->b)), FED_OK);
    *state = w;
    return 0;
}

static int teardown(void **state)
{
    world *w = *state;

    fed_crypto_arena_free(w->a);
    fed_crypto_arena_free(w->b);
    fed_crypto_arena_free(w->x);
    fed_crypto_allow_free(w->allow);
    test_free(w);
    return 0;
}

static void test_seed_file(void **state)
{
    world *w = *state;
    fed_gossip_peers *p;
    const uint8_t *key;
    const char *url;
    char text[512];
    int line = 0;

    assert_int_equal(fed_gossip_peers_new(&p), FED_OK);
    snprintf(text, sizeof text, "# sites\na tcp://10.0.0.1:7400  # the first\n\nb ipc:///run/b\n");
    assert_int_equal(fed_gossip_peers_parse(p, w->allow, text, strlen(text), &line), FED_OK);
    assert_int_equal(fed_gossip_peers_count(p), 2);
    fed_gossip_peers_get(p, 1, &key, &url);
    assert_memory_equal(key, fed_crypto_arena_pubkey(w->b), 32);
    assert_string_equal(url, "ipc:///run/b");
    assert_null(fed_gossip_peers_valid(p, 0, w->allow, NOW));
    {
        const char *bad[] = {"c tcp://h:1\n",           /* not a member */
                             "a tcp://h:1\na tcp://h:2\n", /* twice */
                             "a http://h:1\n",          /* not tcp/ipc */
                             "a\n",                     /* no URL */
                             "a tcp://h:1 extra\n"};
        const fed_err want[] = {FED_ERR_UNKNOWN_SENDER, FED_ERR_EXISTS, FED_ERR_FORMAT,
                                FED_ERR_FORMAT, FED_ERR_FORMAT};
        const int at[] = {1, 2, 1, 1, 1};

        for (int i = 0; i < 5; i++) {
            assert_int_equal(fed_gossip_peers_parse(p, w->allow, bad[i], strlen(bad[i]), &line),
                             want[i]);
            assert_int_equal(line, at[i]);
            assert_int_equal(fed_gossip_peers_count(p), 2); /* the old table stays */
        }
    }
    assert_int_equal(fed_gossip_peers_load(p, w->allow, "/nonexistent/peers.txt", &line),
                     FED_ERR_NOTFOUND);
    fed_gossip_peers_free(p);
}

static void test_entry_roundtrip_and_verify(void **state)
{
    world *w = *state;
    fed_gossip_entry e, d;
    uint8_t buf[FED_GOSSIP_ENTRY_MAX];
    size_t len, used = 0;

    assert_int_equal(fed_gossip_entry_sign(w->a, fed_crypto_arena_pubkey(w->x), "tcp://x:7400",
                                           NOW + 60, &e),
                     FED_OK);
    len = fed_gossip_entry_encode(&e, buf);
    assert_int_equal(len, 73 + 12 + 64);
    assert_int_equal(fed_gossip_entry_decode(buf, len, &d, &used), FED_OK);
    assert_int_equal(used, len);
    assert_memory_equal(&d, &e, sizeof e);
    assert_int_equal(fed_gossip_entry_verify(&d, w->allow, NOW), FED_OK);
    assert_int_equal(fed_gossip_entry_verify(&d, w->allow, NOW + 60), FED_ERR_EXPIRED);
    /* signed by a key outside the list */
    assert_int_equal(fed_gossip_entry_sign(w->x, fed_crypto_arena_pubkey(w->x), "tcp://x:1",
                                           NOW + 60, &d),
                     FED_OK);
    assert_int_equal(fed_gossip_entry_verify(&d, w->allow, NOW), FED_ERR_UNKNOWN_SENDER);
    /* any byte changed: the signature no longer holds (or the bytes do not parse) */
    for (size_t i = 0; i < len; i++) {
        buf[i] ^= 0x20;
        if (fed_gossip_entry_decode(buf, len, &d, &used) == FED_OK && used == len)
            assert_int_not_equal(fed_gossip_entry_verify(&d, w->allow, NOW), FED_OK);
        buf[i] ^= 0x20;
    }
    assert_int_equal(fed_gossip_entry_decode(buf, len - 1, &d, &used), FED_ERR_PAYLOAD);
    buf[72] = 0; /* an empty URL */
    assert_int_equal(fed_gossip_entry_decode(buf, len, &d, &used), FED_ERR_PAYLOAD);
    assert_int_equal(fed_gossip_entry_sign(w->a, fed_crypto_arena_pubkey(w->x), "udp://x:1",
                                           NOW + 60, &d),
                     FED_ERR_FORMAT);
}

/* The URL the table holds for key ("" if none). */
static const char *url_of(const fed_gossip_peers *p, const uint8_t key[32])
{
    for (size_t i = 0; i < fed_gossip_peers_count(p); i++) {
        const uint8_t *k;
        const char *url;

        fed_gossip_peers_get(p, i, &k, &url);
        if (!memcmp(k, key, 32))
            return url;
    }
    return "";
}

/* signer's entry for key at url until expiry into p: what learn did */
static int learn_url(fed_gossip_peers *p, const fed_crypto_arena *signer, const uint8_t *key,
                     const char *url, uint64_t expiry)
{
    fed_gossip_entry e;
    int what = -1;

    assert_int_equal(fed_gossip_entry_sign(signer, key, url, expiry, &e), FED_OK);
    assert_int_equal(fed_gossip_peers_learn(p, &e, &what), FED_OK);
    return what;
}

static void test_learn_and_vouched(void **state)
{
    world *w = *state;
    const uint8_t *x = fed_crypto_arena_pubkey(w->x), *b = fed_crypto_arena_pubkey(w->b);
    fed_gossip_peers *p;
    fed_gossip_entry e;
    fed_crypto_allow *only_b;
    int changed = -1;

    assert_int_equal(fed_gossip_peers_new(&p), FED_OK);
    assert_false(fed_gossip_peers_vouched(p, x, w->allow, NOW));
    assert_int_equal(fed_gossip_entry_sign(w->a, x, "tcp://x:1", NOW + 100, &e), FED_OK);
    assert_int_equal(fed_gossip_peers_learn(p, &e, &changed), FED_OK);
    assert_int_equal(changed, FED_GOSSIP_MOVED); /* a new key: a new URL */
    assert_true(fed_gossip_peers_vouched(p, x, w->allow, NOW));
    assert_false(fed_gossip_peers_vouched(p, x, w->allow, NOW + 100)); /* expired */
    /* the same again, or an older one with another address (replayed, or
       still going round after x moved): nothing changes */
    assert_int_equal(fed_gossip_peers_learn(p, &e, &changed), FED_OK);
    assert_int_equal(changed, FED_GOSSIP_KEPT);
    assert_int_equal(learn_url(p, w->a, x, "tcp://x:0", NOW + 50), FED_GOSSIP_KEPT);
    assert_string_equal(url_of(p, x), "tcp://x:1");
    /* a later one at the same address is taken (its expiry), not a move */
    assert_int_equal(learn_url(p, w->a, x, "tcp://x:1", NOW + 150), FED_GOSSIP_TAKEN);
    /* a later one moves it */
    assert_int_equal(learn_url(p, w->a, x, "tcp://x:2", NOW + 200), FED_GOSSIP_MOVED);
    assert_string_equal(url_of(p, x), "tcp://x:2");
    /* two at the same expiry: the greater URL, whichever came first */
    assert_int_equal(learn_url(p, w->a, x, "tcp://x:1", NOW + 200), FED_GOSSIP_KEPT);
    assert_string_equal(url_of(p, x), "tcp://x:2");
    assert_int_equal(learn_url(p, w->a, x, "tcp://x:3", NOW + 200), FED_GOSSIP_MOVED);
    assert_string_equal(url_of(p, x), "tcp://x:3");
    assert_int_equal(fed_gossip_peers_count(p), 1);
    /* its voucher leaves the allow-list: no longer vouched for */
    assert_int_equal(fed_crypto_allow_new(&only_b), FED_OK);
    assert_int_equal(fed_crypto_allow_add(only_b, "b", b), FED_OK);
    assert_false(fed_gossip_peers_vouched(p, x, only_b, NOW));
    /* a member is never "vouched", nor a key vouching for itself */
    assert_int_equal(fed_gossip_entry_sign(w->b, b, "tcp://b:1", NOW + 100, &e), FED_OK);
    assert_int_equal(fed_gossip_peers_learn(p, &e, NULL), FED_OK);
    assert_false(fed_gossip_peers_vouched(p, b, w->allow, NOW));
    assert_int_equal(fed_gossip_entry_sign(w->x, x, "tcp://x:3", NOW + 500, &e), FED_OK);
    assert_int_equal(fed_gossip_peers_learn(p, &e, NULL), FED_OK);
    assert_false(fed_gossip_peers_vouched(p, x, w->allow, NOW));
    /* learned unchecked (as --publish's own file is) with a forged
       signature: taken as an address, never as a vouch */
    assert_int_equal(fed_gossip_entry_sign(w->a, x, "tcp://x:4", NOW + 900, &e), FED_OK);
    e.sig[0] ^= 1;
    assert_int_equal(fed_gossip_peers_learn(p, &e, &changed), FED_OK);
    assert_int_equal(changed, FED_GOSSIP_MOVED);
    assert_false(fed_gossip_peers_vouched(p, x, w->allow, NOW));
    /* the genuine one, later: vouched again */
    assert_int_equal(fed_gossip_entry_sign(w->a, x, "tcp://x:4", NOW + 901, &e), FED_OK);
    assert_int_equal(fed_gossip_peers_learn(p, &e, &changed), FED_OK);
    assert_true(fed_gossip_peers_vouched(p, x, w->allow, NOW));
    fed_crypto_allow_free(only_b);
    fed_gossip_peers_free(p);
}

/* Entries from the network: refused with the reason when expired, vouched
 * by a non-member or forged (the table unchanged), taken when they verify;
 * one the table holds as new or newer changes nothing, forged or not. */
static void test_offer(void **state)
{
    world *w = *state;
    const uint8_t *x = fed_crypto_arena_pubkey(w->x);
    fed_gossip_peers *p;
    fed_gossip_entry e;
    int what = -1;

    assert_int_equal(fed_gossip_peers_new(&p), FED_OK);
    assert_int_equal(fed_gossip_entry_sign(w->a, x, "tcp://x:1", NOW + 100, &e), FED_OK);
    assert_int_equal(fed_gossip_peers_offer(p, &e, w->allow, NOW + 100, &what),
                     FED_ERR_EXPIRED);
    assert_int_equal(what, FED_GOSSIP_KEPT);
    e.sig[5] ^= 1;
    assert_int_equal(fed_gossip_peers_offer(p, &e, w->allow, NOW, &what), FED_ERR_SIGNATURE);
    assert_int_equal(fed_gossip_peers_count(p), 0);
    e.sig[5] ^= 1;
    assert_int_equal(fed_gossip_peers_offer(p, &e, w->allow, NOW, &what), FED_OK);
    assert_int_equal(what, FED_GOSSIP_MOVED);
    assert_non_null(fed_gossip_peers_valid(p, 0, w->allow, NOW));
    assert_true(fed_gossip_peers_vouched(p, x, w->allow, NOW));
    e.sig[5] ^= 1; /* the same entry forged: not newer, nothing changes */
    assert_int_equal(fed_gossip_peers_offer(p, &e, w->allow, NOW, &what), FED_OK);
    assert_int_equal(what, FED_GOSSIP_KEPT);
    assert_true(fed_gossip_peers_vouched(p, x, w->allow, NOW));
    /* a newer one, forged: refused, the table keeps the genuine entry */
    assert_int_equal(fed_gossip_entry_sign(w->a, x, "tcp://x:2", NOW + 200, &e), FED_OK);
    e.sig[5] ^= 1;
    assert_int_equal(fed_gossip_peers_offer(p, &e, w->allow, NOW, &what), FED_ERR_SIGNATURE);
    assert_string_equal(url_of(p, x), "tcp://x:1");
    /* vouched by x, not a member */
    assert_int_equal(fed_gossip_entry_sign(w->x, x, "tcp://x:3", NOW + 300, &e), FED_OK);
    assert_int_equal(fed_gossip_peers_offer(p, &e, w->allow, NOW, &what),
                     FED_ERR_UNKNOWN_SENDER);
    assert_string_equal(url_of(p, x), "tcp://x:1");
    /* the valid entry stops counting when it expires */
    assert_null(fed_gossip_peers_valid(p, 0, w->allow, NOW + 100));
    fed_gossip_peers_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_seed_file),
        cmocka_unit_test(test_entry_roundtrip_and_verify),
        cmocka_unit_test(test_learn_and_vouched),
        cmocka_unit_test(test_offer),
    };

    return cmocka_run_group_tests(tests, setup, teardown);
}
