/* test_crypto.c - crypto/: the arena and its session cache, the sealed
 * envelope, replay windows, key files and passphrases, allow-lists.
 * Each bad input is checked for its exact fed_err. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/rng.h"
#include "crypto/allow.h"
#include "crypto/arena.h"
#include "crypto/arena_impl.h"
#include "crypto/identity.h"
#include "crypto/replay.h"
#include "crypto/keystream.h"
#include "crypto/envelope.h"
#include "app/cli.h"
#include "tests/support/support.h"

/* ---- helpers ---- */

static fed_crypto_arena *node_new(uint64_t seed)
{
    fed_crypto_arena *a = NULL;
    fed_rng rng;

    fed_rng_seed(&rng, seed);
    assert_int_equal(fed_crypto_arena_new(NULL, &a), FED_OK);
    assert_int_equal(fed_crypto_arena_generate(a, fed_rng_random, &rng), FED_OK);
    return a;
}

static const fed_crypto_pwcost fast_cost = {1, 8192}; /* crypto_pwhash's minimum */


/* ---- arena and sessions ---- */

static void test_arena_identity_deterministic(void **state)
{
    fed_crypto_arena *a = node_new(7), *b = node_new(7), *c = node_new(8);
    uint8_t sig1[64], sig2[64];

    (void)state;
    assert_true(fed_crypto_arena_has_identity(a));
    assert_memory_equal(fed_crypto_arena_pubkey(a), fed_crypto_arena_pubkey(b), 32);
    assert_memory_not_equal(fed_crypto_arena_pubkey(a), fed_crypto_arena_pubkey(c), 32);
    assert_int_equal(fed_crypto_arena_sign(a, (const uint8_t *)"m", 1, sig1), FED_OK);
    assert_int_equal(fed_crypto_arena_sign(b, (const uint8_t *)"m", 1, sig2), FED_OK);
    assert_memory_equal(sig1, sig2, 64); /* Ed25519 is deterministic */
    assert_int_equal(
        crypto_sign_verify_detached(sig1, (const uint8_t *)"m", 1, fed_crypto_arena_pubkey(a)), 0);
    /* One region per node, a few pages: what thousands of nodes can afford. */
    assert_true(fed_crypto_arena_bytes(a) <= 16384);
    fed_crypto_arena_free(a);
    fed_crypto_arena_free(b);
    fed_crypto_arena_free(c);
}

static void test_arena_no_identity(void **state)
{
    fed_crypto_arena *a = NULL;
    fed_crypto_session *s = NULL;
    uint8_t sig[64], peer[32] = {1};

    (void)state;
    assert_int_equal(fed_crypto_arena_new(NULL, &a), FED_OK);
    assert_false(fed_crypto_arena_has_identity(a));
    assert_int_equal(fed_crypto_arena_sign(a, peer, 1, sig), FED_ERR_KEY);
    assert_int_equal(fed_crypto_session_get(a, peer, &s), FED_ERR_KEY);
    assert_null(s);
    fed_crypto_arena_free(a);
    fed_crypto_arena_free(NULL);
}

static void test_session_keys_agree(void **state)
{
    fed_crypto_arena *a = node_new(1), *b = node_new(2);
    fed_crypto_session *sa = NULL, *sb = NULL;

    (void)state;
    assert_int_equal(fed_crypto_session_get(a, fed_crypto_arena_pubkey(b), &sa), FED_OK);
    assert_int_equal(fed_crypto_session_get(b, fed_crypto_arena_pubkey(a), &sb), FED_OK);
    /* Each direction has its own key, and both sides agree on it. */
    assert_memory_equal(fedi_crypto_session_tx(sa), fedi_crypto_session_rx(sb), 32);
    assert_memory_equal(fedi_crypto_session_rx(sa), fedi_crypto_session_tx(sb), 32);
    assert_memory_not_equal(fedi_crypto_session_tx(sa), fedi_crypto_session_rx(sa), 32);
    assert_memory_equal(fed_crypto_session_peer(sa), fed_crypto_arena_pubkey(b), 32);
    fed_crypto_session_put(a, sa);
    fed_crypto_session_put(b, sb);
    fed_crypto_arena_free(a);
    fed_crypto_arena_free(b);
}

static void test_session_bad_peers(void **state)
{
    fed_crypto_arena *a = node_new(1);
    fed_crypto_session *s = NULL;
    uint8_t not_a_point[32];

    (void)state;
    assert_int_equal(fed_crypto_session_get(a, fed_crypto_arena_pubkey(a), &s), FED_ERR_KEY);
    memset(not_a_point, 0xff, sizeof not_a_point); /* y >= p: no Ed25519 point */
    not_a_point[31] = 0x7f;
    assert_int_equal(fed_crypto_session_get(a, not_a_point, &s), FED_ERR_KEY);
    assert_null(s);
    fed_crypto_arena_free(a);
}

static void test_session_cache_lru_and_pins(void **state)
{
    fed_crypto_arena_cfg cfg = {2, 1};
    fed_crypto_arena *a = NULL, *p[3];
    fed_crypto_session *s0 = NULL, *s1 = NULL, *s2 = NULL, *tmp = NULL;
    fed_rng rng;

    (void)state;
    fed_rng_seed(&rng, 99);
    assert_int_equal(fed_crypto_arena_new(&cfg, &a), FED_OK);
    assert_int_equal(fed_crypto_arena_generate(a, fed_rng_random, &rng), FED_OK);
    for (int i = 0; i < 3; i++)
        p[i] = node_new(100 + (uint64_t)i);
    assert_int_equal(fed_crypto_session_get(a, fed_crypto_arena_pubkey(p[0]), &s0), FED_OK);
    assert_int_equal(fed_crypto_session_get(a, fed_crypto_arena_pubkey(p[1]), &s1), FED_OK);
    assert_int_equal(fed_crypto_arena_derivations(a), 2);
    /* Both entries pinned: a third peer must wait. */
    assert_int_equal(fed_crypto_session_get(a, fed_crypto_arena_pubkey(p[2]), &s2), FED_ERR_BUSY);
    fed_crypto_session_put(a, s0);
    fed_crypto_session_put(a, s1);
    /* A hit derives nothing and refreshes p[0]; p[2] then evicts p[1]. */
    assert_int_equal(fed_crypto_session_get(a, fed_crypto_arena_pubkey(p[0]), &tmp), FED_OK);
    fed_crypto_session_put(a, tmp);
    assert_int_equal(fed_crypto_arena_derivations(a), 2);
    assert_int_equal(fed_crypto_session_get(a, fed_crypto_arena_pubkey(p[2]), &s2), FED_OK);
    fed_crypto_session_put(a, s2);
    assert_int_equal(fed_crypto_arena_derivations(a), 3);
    assert_int_equal(fed_crypto_session_get(a, fed_crypto_arena_pubkey(p[0]), &tmp), FED_OK);
    fed_crypto_session_put(a, tmp);
    assert_int_equal(fed_crypto_arena_derivations(a), 3);
    assert_int_equal(fed_crypto_session_get(a, fed_crypto_arena_pubkey(p[1]), &tmp), FED_OK);
    fed_crypto_session_put(a, tmp);
    assert_int_equal(fed_crypto_arena_derivations(a), 4);
    for (int i = 0; i < 3; i++)
        fed_crypto_arena_free(p[i]);
    fed_crypto_arena_free(a);
}

static void test_slots(void **state)
{
    fed_crypto_arena_cfg cfg = {1, 2};
    fed_crypto_arena *a = NULL;
    fed_crypto_slot *s1 = NULL, *s2 = NULL, *s3 = NULL;

    (void)state;
    assert_int_equal(fed_crypto_arena_new(&cfg, &a), FED_OK);
    assert_int_equal(fed_crypto_slot_take(a, &s1), FED_OK);
    assert_int_equal(fed_crypto_slot_take(a, &s2), FED_OK);
    assert_int_equal(fed_crypto_slot_take(a, &s3), FED_ERR_FULL);
    assert_null(s3);
    assert_int_equal(fed_crypto_slots_free(a), 0);
    memset(fed_crypto_slot_mem(s1), 0xab, FED_CRYPTO_SLOT_BYTES);
    fed_crypto_slot_release(a, s1);
    assert_int_equal(fed_crypto_slot_take(a, &s3), FED_OK);
    assert_ptr_equal(s3, s1);
    for (int i = 0; i < FED_CRYPTO_SLOT_BYTES; i++) /* handed out wiped */
        assert_int_equal(fed_crypto_slot_mem(s3)[i], 0);
    fed_crypto_slot_release(a, s2);
    fed_crypto_slot_release(a, s3);
    fed_crypto_slot_release(a, NULL);
    assert_int_equal(fed_crypto_slots_free(a), 2);
    fed_crypto_arena_free(a);
}

/* Guarded memory beside the arena: zeroed, usable to its end, none for
 * zero bytes or a product that overflows. */
static void test_guarded(void **state)
{
    uint8_t *p;

    (void)state;
    assert_int_equal(sodium_init() < 0, 0);
    p = fed_crypto_guarded_alloc(3, 100);
    assert_non_null(p);
    for (int i = 0; i < 300; i++)
        assert_int_equal(p[i], 0);
    memset(p, 0xab, 300);
    fed_crypto_guarded_free(p);
    fed_crypto_guarded_free(NULL);
    assert_null(fed_crypto_guarded_alloc(0, 8));
    assert_null(fed_crypto_guarded_alloc(8, 0));
    assert_null(fed_crypto_guarded_alloc(SIZE_MAX / 2, 4));
}

static fed_err try_arena_new(void *ctx)
{
    fed_crypto_arena *a = NULL;
    fed_err err = fed_crypto_arena_new(NULL, &a);

    (void)ctx;
    if (err == FED_OK)
        fed_crypto_arena_free(a);
    else
        assert_null(a);
    return err;
}

static void test_arena_alloc_failures(void **state)
{
    (void)state;
    assert_true(fed_test_alloc_sweep(try_arena_new, NULL, 1, 100) > 1);
}

/* ---- the envelope ---- */

typedef struct pair {
    fed_crypto_arena *a, *b;
    fed_crypto_session *ab, *ba; /* a's session with b, b's with a */
} pair;

static void pair_open(pair *p)
{
    p->a = node_new(11);
    p->b = node_new(12);
    assert_int_equal(fed_crypto_session_get(p->a, fed_crypto_arena_pubkey(p->b), &p->ab), FED_OK);
    assert_int_equal(fed_crypto_session_get(p->b, fed_crypto_arena_pubkey(p->a), &p->ba), FED_OK);
}

static void pair_close(pair *p)
{
    fed_crypto_session_put(p->a, p->ab);
    fed_crypto_session_put(p->b, p->ba);
    fed_crypto_arena_free(p->a);
    fed_crypto_arena_free(p->b);
}

#define PLEN 1000

static void seal_sample(pair *p, uint8_t *ad, uint8_t *nonce, uint8_t *buf, uint8_t *digest)
{
    for (int i = 0; i < 40; i++)
        ad[i] = (uint8_t)i;
    memset(nonce, 5, 24);
    for (int i = 0; i < PLEN; i++)
        buf[i] = (uint8_t)(i * 7);
    assert_int_equal(fed_crypto_seal(p->a, p->ab, ad, 40, nonce, buf, PLEN, NULL, digest), FED_OK);
}

static void test_seal_open_roundtrip(void **state)
{
    pair p;
    uint8_t ad[40], nonce[24], buf[PLEN + FED_CRYPTO_SEAL_OVERHEAD], out[PLEN + 64];
    uint8_t digest[64], digest2[64], sig[64], expect[PLEN];

    (void)state;
    pair_open(&p);
    seal_sample(&p, ad, nonce, buf, digest);
    for (int i = 0; i < PLEN; i++)
        expect[i] = (uint8_t)(i * 7);
    assert_memory_not_equal(buf, expect, 64); /* it is encrypted */
    assert_int_equal(fed_crypto_open(p.ba, ad, 40, nonce, buf, out, PLEN, digest2, sig), FED_OK);
    assert_memory_equal(out, expect, PLEN);
    assert_memory_equal(digest, digest2, 64);
    /* The signature is Ed25519 over BLAKE2b-512(ad || BLAKE2b-512(payload)):
       an auditor can redo it with any BLAKE2b. */
    {
        uint8_t inner[64];
        crypto_generichash_blake2b_state st;

        crypto_generichash_blake2b(inner, 64, expect, PLEN, NULL, 0);
        crypto_generichash_blake2b_init(&st, NULL, 0, 64);
        crypto_generichash_blake2b_update(&st, ad, 40);
        crypto_generichash_blake2b_update(&st, inner, 64);
        crypto_generichash_blake2b_final(&st, digest2, 64);
        assert_memory_equal(digest, digest2, 64);
        assert_int_equal(
            crypto_sign_verify_detached(sig, digest2, 64, fed_crypto_arena_pubkey(p.a)), 0);
    }
    assert_int_equal(fed_crypto_verify(fed_crypto_arena_pubkey(p.a), ad, 40, expect, PLEN, sig),
                     FED_OK);
    expect[3] ^= 1;
    assert_int_equal(fed_crypto_verify(fed_crypto_arena_pubkey(p.a), ad, 40, expect, PLEN, sig),
                     FED_ERR_SIGNATURE);
    /* In place works too. */
    assert_int_equal(fed_crypto_open(p.ba, ad, 40, nonce, buf, buf, PLEN, NULL, NULL), FED_OK);
    assert_memory_equal(buf, out, PLEN);
    pair_close(&p);
}

/* One payload sealed for many: its hash, computed once and handed in, gives
 * the very bytes sealing computes itself; a wrong one gives a frame the
 * recipient rejects. */
static void test_seal_payload_hash(void **state)
{
    pair p;
    uint8_t ad[40], nonce[24], plain[PLEN], ph[64];
    uint8_t a[PLEN + FED_CRYPTO_SEAL_OVERHEAD], b[PLEN + FED_CRYPTO_SEAL_OVERHEAD];
    uint8_t out[PLEN + 64], da[64], db[64];

    (void)state;
    pair_open(&p);
    seal_sample(&p, ad, nonce, a, da);
    for (int i = 0; i < PLEN; i++)
        plain[i] = (uint8_t)(i * 7);
    fed_crypto_payload_hash(plain, PLEN, ph);
    memcpy(b, plain, PLEN);
    assert_int_equal(fed_crypto_seal(p.a, p.ab, ad, 40, nonce, b, PLEN, ph, db), FED_OK);
    assert_memory_equal(da, db, 64);
    assert_memory_equal(a, b, sizeof a);
    assert_int_equal(fed_crypto_open(p.ba, ad, 40, nonce, b, out, PLEN, NULL, NULL), FED_OK);
    assert_memory_equal(out, plain, PLEN);
    ph[0] ^= 1;
    memcpy(b, plain, PLEN);
    assert_int_equal(fed_crypto_seal(p.a, p.ab, ad, 40, nonce, b, PLEN, ph, NULL), FED_OK);
    assert_int_equal(fed_crypto_open(p.ba, ad, 40, nonce, b, out, PLEN, NULL, NULL),
                     FED_ERR_SIGNATURE);
    pair_close(&p);
}

static void test_seal_tampering(void **state)
{
    pair p;
    uint8_t ad[40], nonce[24], buf[PLEN + FED_CRYPTO_SEAL_OVERHEAD], copy[sizeof buf];
    uint8_t out[PLEN + 64], digest[64];
    fed_crypto_arena *eve = node_new(13);
    fed_crypto_session *es = NULL;

    (void)state;
    pair_open(&p);
    seal_sample(&p, ad, nonce, buf, digest);
    memcpy(copy, buf, sizeof buf);
    ad[3] ^= 1; /* tampered header */
    assert_int_equal(fed_crypto_open(p.ba, ad, 40, nonce, buf, out, PLEN, NULL, NULL),
                     FED_ERR_AEAD);
    ad[3] ^= 1;
    nonce[0] ^= 1;
    assert_int_equal(fed_crypto_open(p.ba, ad, 40, nonce, buf, out, PLEN, NULL, NULL),
                     FED_ERR_AEAD);
    nonce[0] ^= 1;
    buf[17] ^= 0x40; /* tampered ciphertext */
    assert_int_equal(fed_crypto_open(p.ba, ad, 40, nonce, buf, out, PLEN, NULL, NULL),
                     FED_ERR_AEAD);
    memcpy(buf, copy, sizeof buf);
    buf[PLEN + 70] ^= 1; /* tampered tag */
    assert_int_equal(fed_crypto_open(p.ba, ad, 40, nonce, buf, out, PLEN, NULL, NULL),
                     FED_ERR_AEAD);
    memcpy(buf, copy, sizeof buf);
    /* Someone else's session key does not open it. */
    assert_int_equal(fed_crypto_session_get(eve, fed_crypto_arena_pubkey(p.a), &es), FED_OK);
    assert_int_equal(fed_crypto_open(es, ad, 40, nonce, buf, out, PLEN, NULL, NULL), FED_ERR_AEAD);
    fed_crypto_session_put(eve, es);
    /* Sealing in one direction cannot be opened as the other. */
    assert_int_equal(fed_crypto_open(p.ab, ad, 40, nonce, buf, out, PLEN, NULL, NULL),
                     FED_ERR_AEAD);
    assert_int_equal(fed_crypto_open(p.ba, ad, 40, nonce, buf, out, PLEN, NULL, NULL), FED_OK);
    fed_crypto_arena_free(eve);
    pair_close(&p);
}

static void test_seal_bad_signature_under_valid_aead(void **state)
{
    /* An attacker who knows the session key (not a's signing key) re-seals a
     * payload with a signature of its own: the AEAD holds, the signature not. */
    pair p;
    fed_crypto_arena *eve = node_new(14);
    uint8_t ad[40] = {0}, nonce[24] = {9}, buf[PLEN + FED_CRYPTO_SEAL_OVERHEAD];
    uint8_t out[PLEN + 64], digest[64];

    (void)state;
    pair_open(&p);
    memset(buf, 3, PLEN);
    fed_crypto_payload_hash(buf, PLEN, digest);
    fed_crypto_frame_digest(ad, 40, digest, digest);
    assert_int_equal(fed_crypto_arena_sign(eve, digest, 64, buf + PLEN), FED_OK);
    assert_int_equal(crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
                         buf, buf + PLEN + 64, NULL, buf, PLEN + 64, ad, 40, NULL, nonce,
                         fedi_crypto_session_tx(p.ab)),
                     0);
    assert_int_equal(fed_crypto_open(p.ba, ad, 40, nonce, buf, out, PLEN, NULL, NULL),
                     FED_ERR_SIGNATURE);
    for (int i = 0; i < PLEN; i++) /* nothing unverified is left behind */
        assert_int_equal(out[i], 0);
    fed_crypto_arena_free(eve);
    pair_close(&p);
}

/* ---- replay windows ---- */

static const uint8_t PA[32] = {1}, PB[32] = {2};

static void test_replay_basic(void **state)
{
    fed_crypto_replay *r = NULL;

    (void)state;
    assert_int_equal(fed_crypto_replay_new(&r), FED_OK);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 100, 1), FED_OK);
    /* Reserved and in flight: a copy is a replay. */
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 100, 1), FED_ERR_REPLAY);
    assert_int_equal(fed_crypto_replay_commit(r, PA, 100, 1), FED_OK);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 100, 1), FED_ERR_REPLAY);
    assert_int_equal(fed_crypto_replay_epoch(r, PA), 100);
    /* Released reservations free the sequence again. */
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 100, 2), FED_OK);
    fed_crypto_replay_release(r, PA, 100, 2);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 100, 2), FED_OK);
    assert_int_equal(fed_crypto_replay_commit(r, PA, 100, 2), FED_OK);
    /* Other peers have their own windows. */
    assert_int_equal(fed_crypto_replay_reserve(r, PB, 100, 1), FED_OK);
    assert_int_equal(fed_crypto_replay_commit(r, PB, 100, 1), FED_OK);
    assert_int_equal(fed_crypto_replay_peers(r), 2);
    fed_crypto_replay_forget(r, PB);
    assert_int_equal(fed_crypto_replay_peers(r), 1);
    assert_int_equal(fed_crypto_replay_epoch(r, PB), 0);
    fed_crypto_replay_free(r);
}

static void test_replay_window_slides(void **state)
{
    fed_crypto_replay *r = NULL;

    (void)state;
    assert_int_equal(fed_crypto_replay_new(&r), FED_OK);
    for (uint64_t s = 10; s < 20; s += 2) {
        assert_int_equal(fed_crypto_replay_reserve(r, PA, 5, s), FED_OK);
        assert_int_equal(fed_crypto_replay_commit(r, PA, 5, s), FED_OK);
    }
    /* Out of order inside the window is fine, once. */
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 5, 11), FED_OK);
    assert_int_equal(fed_crypto_replay_commit(r, PA, 5, 11), FED_OK);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 5, 11), FED_ERR_REPLAY);
    /* Jump 1023 ahead: 11 falls out of the window, 18 stays (top - 1023 = 18). */
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 5, 18 + 1023), FED_OK);
    assert_int_equal(fed_crypto_replay_commit(r, PA, 5, 18 + 1023), FED_OK);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 5, 17), FED_ERR_REPLAY); /* too old */
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 5, 18), FED_ERR_REPLAY); /* seen */
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 5, 19), FED_OK); /* never seen, in window */
    assert_int_equal(fed_crypto_replay_commit(r, PA, 5, 19), FED_OK);
    /* A slot reused after the slide holds no stale bit: 11 + 1024 is new. */
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 5, 11 + 1024), FED_OK);
    assert_int_equal(fed_crypto_replay_commit(r, PA, 5, 11 + 1024), FED_OK);
    fed_crypto_replay_free(r);
}

static void test_replay_epochs(void **state)
{
    fed_crypto_replay *r = NULL;

    (void)state;
    assert_int_equal(fed_crypto_replay_new(&r), FED_OK);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 50, 7), FED_OK);
    assert_int_equal(fed_crypto_replay_commit(r, PA, 50, 7), FED_OK);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 49, 100), FED_ERR_SENDER_EPOCH);
    /* A newer epoch reserved but never committed (a forged header) moves nothing. */
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 51, 1), FED_OK);
    fed_crypto_replay_release(r, PA, 51, 1);
    assert_int_equal(fed_crypto_replay_epoch(r, PA), 50);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 50, 7), FED_ERR_REPLAY);
    /* Committed, it replaces the window: sequence numbers start over. */
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 51, 1), FED_OK);
    assert_int_equal(fed_crypto_replay_commit(r, PA, 51, 1), FED_OK);
    assert_int_equal(fed_crypto_replay_epoch(r, PA), 51);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 50, 8), FED_ERR_SENDER_EPOCH);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 51, 1), FED_ERR_REPLAY);
    /* Superseded while opening: an old-epoch frame reserved before the newer commit. */
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 51, 2), FED_OK);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 52, 1), FED_OK);
    assert_int_equal(fed_crypto_replay_commit(r, PA, 52, 1), FED_OK);
    assert_int_equal(fed_crypto_replay_commit(r, PA, 51, 2), FED_ERR_SENDER_EPOCH);
    fed_crypto_replay_free(r);
}

static void test_replay_busy_and_alloc(void **state)
{
    fed_crypto_replay *r = NULL;

    (void)state;
    assert_int_equal(fed_crypto_replay_new(&r), FED_OK);
    for (uint64_t s = 0; s < FED_CRYPTO_REPLAY_PENDING; s++)
        assert_int_equal(fed_crypto_replay_reserve(r, PA, 1, s), FED_OK);
    assert_int_equal(fed_crypto_replay_reserve(r, PA, 1, 999), FED_ERR_BUSY);
    for (uint64_t s = 0; s < FED_CRYPTO_REPLAY_PENDING; s++)
        fed_crypto_replay_release(r, PA, 1, s);
    /* Allocation failures while adding peers leave the table usable. */
    for (unsigned long n = 1; n < 4; n++) {
        uint8_t peer[32] = {0x80, (uint8_t)n};

        fed_alloc_fail_nth(1, 1);
        assert_int_equal(fed_crypto_replay_reserve(r, peer, 1, 1), FED_ERR_NOMEM);
        fed_alloc_fail_nth(0, 0);
        assert_int_equal(fed_crypto_replay_reserve(r, peer, 1, 1), FED_OK);
        assert_int_equal(fed_crypto_replay_commit(r, peer, 1, 1), FED_OK);
    }
    fed_crypto_replay_free(r);
    fed_alloc_fail_nth(1, 1);
    assert_int_equal(fed_crypto_replay_new(&r), FED_ERR_NOMEM);
    fed_alloc_fail_nth(0, 0);
    assert_null(r);
    fed_crypto_replay_free(NULL);
    assert_int_equal(fed_crypto_replay_new(&r), FED_OK);
    fed_crypto_replay_free(r);
}

/* ---- identity and key files ---- */

static void test_base64(void **state)
{
    fed_crypto_arena *a = node_new(3);
    char text[FED_CRYPTO_PK_B64_LEN + 1];
    uint8_t pk[32];

    (void)state;
    fed_crypto_pk_to_base64(fed_crypto_arena_pubkey(a), text);
    assert_int_equal(strlen(text), FED_CRYPTO_PK_B64_LEN);
    assert_int_equal(fed_crypto_pk_from_base64(text, strlen(text), pk), FED_OK);
    assert_memory_equal(pk, fed_crypto_arena_pubkey(a), 32);
    assert_int_equal(fed_crypto_pk_from_base64(text, 43, pk), FED_ERR_FORMAT);
    text[5] = '*';
    assert_int_equal(fed_crypto_pk_from_base64(text, strlen(text), pk), FED_ERR_FORMAT);
    /* base64 of 32 bytes that are no Ed25519 point */
    assert_int_equal(
        fed_crypto_pk_from_base64("//////////////////////////////////////////8=", 44, pk),
        FED_ERR_KEY);
    fed_crypto_arena_free(a);
}

static void test_keyfile_plain_roundtrip(void **state)
{
    fed_crypto_arena *a = node_new(21), *b = NULL;
    char dir[300], path[400];
    uint8_t pk[32];
    struct stat st;
    fed_rng rng;

    (void)state;
    fed_rng_seed(&rng, 1);
    fed_test_path(dir, sizeof dir, "plain");
    assert_int_equal(fed_crypto_identity_save(a, dir, NULL, 0, NULL, fed_rng_random, &rng), FED_OK);
    snprintf(path, sizeof path, "%s/node.key", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_size, 72);
    assert_int_equal(fed_crypto_arena_new(NULL, &b), FED_OK);
    assert_int_equal(fed_crypto_identity_load(b, dir, NULL, 0), FED_OK);
    assert_memory_equal(fed_crypto_arena_pubkey(a), fed_crypto_arena_pubkey(b), 32);
    assert_memory_equal(fedi_crypto_arena_sk(a), fedi_crypto_arena_sk(b), 64);
    assert_int_equal(fed_crypto_pubkey_load(dir, pk), FED_OK);
    assert_memory_equal(pk, fed_crypto_arena_pubkey(a), 32);
    /* A key file is never overwritten. */
    assert_int_equal(fed_crypto_identity_save(a, dir, NULL, 0, NULL, fed_rng_random, &rng),
                     FED_ERR_EXISTS);
    fed_crypto_arena_free(a);
    fed_crypto_arena_free(b);
}

static void test_keyfile_loose_permissions(void **state)
{
    fed_crypto_arena *a = node_new(22);
    char dir[300], path[400];
    uint8_t pk[32];
    fed_rng rng;

    (void)state;
    fed_rng_seed(&rng, 2);
    fed_test_path(dir, sizeof dir, "loose");
    assert_int_equal(fed_crypto_identity_save(a, dir, NULL, 0, NULL, fed_rng_random, &rng), FED_OK);
    snprintf(path, sizeof path, "%s/node.key", dir);
    assert_int_equal(chmod(path, 0640), 0);
    assert_int_equal(fed_crypto_identity_load(a, dir, NULL, 0), FED_ERR_PERM);
    assert_false(fed_crypto_arena_has_identity(a)); /* a refused load leaves nothing */
    assert_int_equal(chmod(path, 0604), 0);
    assert_int_equal(fed_crypto_identity_load(a, dir, NULL, 0), FED_ERR_PERM);
    snprintf(path, sizeof path, "%s/node.pub", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(fed_crypto_pubkey_load(dir, pk), FED_ERR_PERM); /* falls back to node.key */
    snprintf(path, sizeof path, "%s/node.key", dir);
    assert_int_equal(chmod(path, 0400), 0); /* stricter is fine */
    assert_int_equal(fed_crypto_identity_load(a, dir, NULL, 0), FED_OK);
    assert_int_equal(fed_crypto_pubkey_load(dir, pk), FED_OK);
    assert_memory_equal(pk, fed_crypto_arena_pubkey(a), 32);
    fed_test_path(dir, sizeof dir, "absent");
    assert_int_equal(fed_crypto_identity_load(a, dir, NULL, 0), FED_ERR_NOTFOUND);
    /* systemd's credential: 0400 with a read ACL shows as 0440; only in
       $CREDENTIALS_DIRECTORY, and never readable or writable by others */
    fed_test_path(dir, sizeof dir, "loose");
    assert_int_equal(chmod(path, 0440), 0);
    unsetenv("CREDENTIALS_DIRECTORY");
    assert_int_equal(fed_crypto_identity_load(a, dir, NULL, 0), FED_ERR_PERM);
    setenv("CREDENTIALS_DIRECTORY", fed_test_tmpdir(), 1); /* another folder */
    assert_int_equal(fed_crypto_identity_load(a, dir, NULL, 0), FED_ERR_PERM);
    setenv("CREDENTIALS_DIRECTORY", dir, 1);
    assert_int_equal(chmod(dir, 0770), 0); /* a folder others may add files to: refused */
    assert_int_equal(fed_crypto_identity_load(a, dir, NULL, 0), FED_ERR_PERM);
    assert_int_equal(chmod(dir, 0700), 0);
    assert_int_equal(fed_crypto_identity_load(a, dir, NULL, 0), FED_OK);
    assert_memory_equal(pk, fed_crypto_arena_pubkey(a), 32);
    assert_int_equal(chmod(path, 0460), 0); /* the group may write: refused */
    assert_int_equal(fed_crypto_identity_load(a, dir, NULL, 0), FED_ERR_PERM);
    assert_int_equal(chmod(path, 0444), 0); /* anyone may read: refused */
    assert_int_equal(fed_crypto_identity_load(a, dir, NULL, 0), FED_ERR_PERM);
    unsetenv("CREDENTIALS_DIRECTORY");
    fed_crypto_arena_free(a);
}

/* The errors a load logs, kept to be read (main() drops every line). */
static void errors_kept(void)
{
    fed_log_set_level(FED_LOG_ERROR);
    fed_test_log_capture(FED_LOG_ERROR);
}

static void errors_dropped(void)
{
    fed_test_log_default();
    fed_log_set_level(FED_LOG_ERROR + 1);
}

static void test_keyfile_passphrase(void **state)
{
    fed_crypto_arena *a = node_new(23), *b = NULL;
    const char *pass = "correct horse battery staple";
    char dir[300], path[400];
    uint8_t pk[32], file[144];
    struct stat st;
    FILE *f;
    fed_rng rng;

    (void)state;
    fed_rng_seed(&rng, 3);
    fed_test_path(dir, sizeof dir, "sealed");
    assert_int_equal(
        fed_crypto_identity_save(a, dir, pass, strlen(pass), &fast_cost, fed_rng_random, &rng),
        FED_OK);
    snprintf(path, sizeof path, "%s/node.key", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(st.st_size, 144);
    assert_int_equal(fed_crypto_arena_new(NULL, &b), FED_OK);
    assert_int_equal(fed_crypto_identity_load(b, dir, "wrong", 5), FED_ERR_PASSPHRASE);
    assert_false(fed_crypto_arena_has_identity(b));
    assert_int_equal(fed_crypto_identity_load(b, dir, NULL, 0), FED_ERR_PASSPHRASE);
    assert_int_equal(fed_crypto_identity_load(b, dir, pass, strlen(pass)), FED_OK);
    assert_memory_equal(fedi_crypto_arena_sk(a), fedi_crypto_arena_sk(b), 64);
    /* The public key is readable without the passphrase. */
    snprintf(path, sizeof path, "%s/node.pub", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(fed_crypto_pubkey_load(dir, pk), FED_OK);
    assert_memory_equal(pk, fed_crypto_arena_pubkey(a), 32);
    /* The seed is not in the file in the clear. */
    snprintf(path, sizeof path, "%s/node.key", dir);
    f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(file, 1, sizeof file, f), sizeof file);
    fclose(f);
    assert_null(memmem(file, sizeof file, fedi_crypto_arena_seed_mem(a), 32));
    /* A changed public key (the AEAD's associated data) is refused. */
    file[8] ^= 1;
    f = fopen(path, "r+b");
    assert_non_null(f);
    assert_int_equal(fwrite(file, 1, sizeof file, f), sizeof file);
    fclose(f);
    assert_int_equal(fed_crypto_identity_load(b, dir, pass, strlen(pass)), FED_ERR_PASSPHRASE);
    /* A sealed file cut short says the sealed kind's length. */
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(file, 1, 100, f), 100);
    fclose(f);
    errors_kept();
    assert_int_equal(fed_crypto_identity_load(b, dir, pass, strlen(pass)), FED_ERR_TRUNCATED);
    fed_test_log_has("node.key: truncated key file: 100 bytes where 144 are needed");
    errors_dropped();
    fed_crypto_arena_free(a);
    fed_crypto_arena_free(b);
}

static void write_file(const char *path, const void *data, size_t len, mode_t mode)
{
    FILE *f = fopen(path, "wb");

    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, len, f), len);
    fclose(f);
    assert_int_equal(chmod(path, mode), 0);
}

static void test_keyfile_malformed(void **state)
{
    static const struct {
        size_t len;
        const char *said;
    } cuts[] = {
        {71, "node.key: truncated key file: 71 bytes where 72 are needed"},
        {20, "node.key: truncated key file: 20 bytes where 72 are needed"},
        {3, "node.key: truncated key file: 3 bytes where at least 72 are needed"},
        {0, "node.key: truncated key file: 0 bytes where at least 72 are needed"},
    };
    fed_crypto_arena *a = node_new(24), *b = NULL;
    char dir[300], path[400];
    uint8_t file[73];
    FILE *f;
    fed_rng rng;

    (void)state;
    fed_rng_seed(&rng, 4);
    fed_test_path(dir, sizeof dir, "bad");
    assert_int_equal(fed_crypto_identity_save(a, dir, NULL, 0, NULL, fed_rng_random, &rng), FED_OK);
    snprintf(path, sizeof path, "%s/node.key", dir);
    f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(file, 1, 72, f), 72);
    fclose(f);
    assert_int_equal(fed_crypto_arena_new(NULL, &b), FED_OK);
    /* truncated: said with the length it has and the length it needs, in
       the seed, in the header, with too little to tell its kind, empty */
    errors_kept();
    for (size_t i = 0; i < sizeof cuts / sizeof *cuts; i++) {
        write_file(path, file, cuts[i].len, 0600);
        assert_int_equal(fed_crypto_identity_load(b, dir, NULL, 0), FED_ERR_TRUNCATED);
        fed_test_log_has(cuts[i].said);
    }
    assert_int_equal(fed_test_log_count("not a fednode key file", ""), 0);
    file[72] = 0;
    write_file(path, file, 73, 0600); /* trailing byte */
    assert_int_equal(fed_crypto_identity_load(b, dir, NULL, 0), FED_ERR_KEY);
    fed_test_log_has("node.key: malformed key file: longer than the 72 bytes of its kind");
    /* a short file that is not a key file is said to be none */
    write_file(path, "hello", 5, 0600);
    assert_int_equal(fed_crypto_identity_load(b, dir, NULL, 0), FED_ERR_KEY);
    fed_test_log_has("node.key: not a fednode key file");
    errors_dropped();
    file[0] = 'X';
    write_file(path, file, 72, 0600); /* magic */
    assert_int_equal(fed_crypto_identity_load(b, dir, NULL, 0), FED_ERR_KEY);
    file[0] = 'F';
    file[4] = 2;
    write_file(path, file, 72, 0600); /* version */
    assert_int_equal(fed_crypto_identity_load(b, dir, NULL, 0), FED_ERR_KEY);
    file[4] = 1;
    file[40] ^= 1;
    write_file(path, file, 72, 0600); /* seed does not match the public key */
    assert_int_equal(fed_crypto_identity_load(b, dir, NULL, 0), FED_ERR_KEY);
    file[40] ^= 1;
    write_file(path, file, 72, 0600);
    assert_int_equal(fed_crypto_identity_load(b, dir, NULL, 0), FED_OK);
    /* A symlink is not followed. */
    snprintf(path, sizeof path, "%s/node.key", dir);
    {
        char moved[420];

        snprintf(moved, sizeof moved, "%s/real.key", dir);
        assert_int_equal(rename(path, moved), 0);
        assert_int_equal(symlink(moved, path), 0);
        assert_int_equal(fed_crypto_identity_load(b, dir, NULL, 0), FED_ERR_PERM);
    }
    fed_crypto_arena_free(a);
    fed_crypto_arena_free(b);
}

static void test_keyfile_default_cost(void **state)
{
    /* keygen's own cost (Argon2id "interactive"), once. */
    fed_crypto_arena *a = node_new(25), *b = NULL;
    char dir[300];
    fed_rng rng;

    (void)state;
    fed_rng_seed(&rng, 5);
    fed_test_path(dir, sizeof dir, "interactive");
    assert_int_equal(fed_crypto_identity_save(a, dir, "pw", 2, NULL, fed_rng_random, &rng), FED_OK);
    assert_int_equal(fed_crypto_arena_new(NULL, &b), FED_OK);
    assert_int_equal(fed_crypto_identity_load(b, dir, "pw", 2), FED_OK);
    assert_memory_equal(fed_crypto_arena_pubkey(a), fed_crypto_arena_pubkey(b), 32);
    fed_crypto_arena_free(a);
    fed_crypto_arena_free(b);
}

static void test_passphrase_read(void **state)
{
    char path[300], buf[32];
    size_t len = 0;

    (void)state;
    fed_test_path(path, sizeof path, "pass1");
    write_file(path, "secret\nignored\n", 15, 0600);
    assert_int_equal(fed_crypto_passphrase_read(path, buf, sizeof buf, &len), FED_OK);
    assert_int_equal(len, 6);
    assert_string_equal(buf, "secret");
    write_file(path, "crlf\r\n", 6, 0600);
    assert_int_equal(fed_crypto_passphrase_read(path, buf, sizeof buf, &len), FED_OK);
    assert_string_equal(buf, "crlf");
    write_file(path, "\n", 1, 0600);
    assert_int_equal(fed_crypto_passphrase_read(path, buf, sizeof buf, &len), FED_ERR_FORMAT);
    write_file(path, "0123456789012345678901234567890123456789", 40, 0600);
    assert_int_equal(fed_crypto_passphrase_read(path, buf, sizeof buf, &len), FED_ERR_TOO_LARGE);
    fed_test_path(path, sizeof path, "nope");
    assert_int_equal(fed_crypto_passphrase_read(path, buf, sizeof buf, &len), FED_ERR_NOTFOUND);
}

static void test_cli_keygen_and_pubkey(void **state)
{
    char dir[300], dir2[300], pw[300], path[400];
    char *argv1[] = {"--out", dir, "--passphrase-file", pw};
    char *argv2[] = {"--out", dir2};
    char *argv3[] = {dir};
    fed_crypto_arena *a = NULL;
    uint8_t pk[32];
    struct stat st;

    (void)state;
    fed_test_path(dir, sizeof dir, "cli/deeper/n1");
    fed_test_path(dir2, sizeof dir2, "cli/n2");
    fed_test_path(pw, sizeof pw, "cli-pass");
    write_file(pw, "hunter2\n", 8, 0600);
    assert_int_equal(fed_cli_keygen(4, argv1), 0);
    snprintf(path, sizeof path, "%s/node.key", dir);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0700);
    assert_int_equal(fed_crypto_arena_new(NULL, &a), FED_OK);
    assert_int_equal(fed_crypto_identity_load(a, dir, "hunter", 6), FED_ERR_PASSPHRASE);
    assert_int_equal(fed_crypto_identity_load(a, dir, "hunter2", 7), FED_OK);
    assert_int_equal(fed_crypto_pubkey_load(dir, pk), FED_OK);
    assert_memory_equal(pk, fed_crypto_arena_pubkey(a), 32);
    assert_int_equal(fed_cli_keygen(4, argv1), 1); /* never overwritten */
    assert_int_equal(fed_cli_pubkey(1, argv3), 0);
    assert_int_equal(fed_cli_keygen(0, argv1), 2); /* --out is required */
    /* the passphrase may come from the environment */
    assert_int_equal(setenv("FEDNODE_PASSPHRASE", "from env", 1), 0);
    assert_int_equal(fed_cli_keygen(2, argv2), 0);
    assert_int_equal(unsetenv("FEDNODE_PASSPHRASE"), 0);
    assert_int_equal(fed_crypto_identity_load(a, dir2, NULL, 0), FED_ERR_PASSPHRASE);
    assert_int_equal(fed_crypto_identity_load(a, dir2, "from env", 8), FED_OK);
    /* loose permissions are refused, also by pubkey when it must read node.key */
    assert_int_equal(chmod(path, 0644), 0);
    snprintf(path, sizeof path, "%s/node.pub", dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(fed_cli_pubkey(1, argv3), 1);
    assert_int_equal(fed_crypto_identity_load(a, dir, "hunter2", 7), FED_ERR_PERM);
    fed_crypto_arena_free(a);
}

/* ---- allow-lists ---- */

static void key_text(uint64_t seed, char out[FED_CRYPTO_PK_B64_LEN + 1], uint8_t pk[32])
{
    fed_crypto_arena *a = node_new(seed);

    fed_crypto_pk_to_base64(fed_crypto_arena_pubkey(a), out);
    if (pk)
        memcpy(pk, fed_crypto_arena_pubkey(a), 32);
    fed_crypto_arena_free(a);
}

static void test_allow_parse(void **state)
{
    char k1[45], k2[45], k3[45], text[1024];
    uint8_t p1[32], p2[32], p3[32];
    fed_crypto_allow *al = NULL;
    const char *name;
    const uint8_t *pk;
    int line = -1;

    (void)state;
    key_text(31, k1, p1);
    key_text(32, k2, p2);
    key_text(33, k3, p3);
    snprintf(text, sizeof text,
             "# consortium members\n\n  hospital-a %s\n\thospital_b\t%s   # trailing comment\r\n"
             "bank.c %s",
             k1, k2, k3);
    assert_int_equal(fed_crypto_allow_new(&al), FED_OK);
    assert_int_equal(fed_crypto_allow_parse(al, text, strlen(text), &line), FED_OK);
    assert_int_equal(line, 0);
    assert_int_equal(fed_crypto_allow_count(al), 3);
    assert_string_equal(fed_crypto_allow_find(al, p1), "hospital-a");
    assert_string_equal(fed_crypto_allow_find(al, p2), "hospital_b");
    assert_string_equal(fed_crypto_allow_find(al, p3), "bank.c");
    for (size_t i = 1; i < 3; i++) { /* key order: what every member sees */
        const uint8_t *prev;

        fed_crypto_allow_get(al, i - 1, &name, &prev);
        fed_crypto_allow_get(al, i, &name, &pk);
        assert_true(memcmp(prev, pk, 32) < 0);
    }
    assert_null(fed_crypto_allow_find(al, PA));
    fed_crypto_allow_free(al);
}

static void expect_allow_error(const char *text, fed_err err, int line_at)
{
    fed_crypto_allow *al = NULL;
    int line = -1;

    assert_int_equal(fed_crypto_allow_new(&al), FED_OK);
    assert_int_equal(fed_crypto_allow_parse(al, text, strlen(text), &line), err);
    assert_int_equal(line, line_at);
    assert_int_equal(fed_crypto_allow_count(al), 0);
    fed_crypto_allow_free(al);
}

static void test_allow_errors(void **state)
{
    char k1[45], k2[45], text[4096];

    (void)state;
    key_text(41, k1, NULL);
    key_text(42, k2, NULL);
    snprintf(text, sizeof text, "a %s\n# ok\nb@d %s\n", k1, k2);
    expect_allow_error(text, FED_ERR_FORMAT, 3); /* bad name */
    snprintf(text, sizeof text, "a %s\nb\n", k1);
    expect_allow_error(text, FED_ERR_FORMAT, 2); /* no key */
    snprintf(text, sizeof text, "a %s\nb %.43s\n", k1, k2);
    expect_allow_error(text, FED_ERR_FORMAT, 2); /* short base64 */
    snprintf(text, sizeof text, "a %s extra\n", k1);
    expect_allow_error(text, FED_ERR_FORMAT, 1); /* trailing text */
    snprintf(text, sizeof text, "\n\na %s\nb //////////////////////////////////////////8=\n", k1);
    expect_allow_error(text, FED_ERR_KEY, 4); /* not a point */
    snprintf(text, sizeof text, "a %s\nb %s\nc %s\n", k1, k2, k1);
    expect_allow_error(text, FED_ERR_EXISTS, 3); /* duplicate key */
    snprintf(text, sizeof text, "a %s\n\na %s\n", k1, k2);
    expect_allow_error(text, FED_ERR_EXISTS, 3); /* duplicate name */
    memset(text, 'x', 1100);
    snprintf(text + 1100, sizeof text - 1100, " %s\n", k1);
    expect_allow_error(text, FED_ERR_FORMAT, 1); /* line too long */
    snprintf(text, sizeof text, "%s %s\n",
             "a234567890123456789012345678901234567890123456789012345678901234", k1);
    expect_allow_error(text, FED_ERR_FORMAT, 1); /* 64-character name */
}

static void test_allow_reload_keeps_old_on_error(void **state)
{
    char k1[45], k2[45], text[512], path[300];
    uint8_t p1[32], p2[32];
    fed_crypto_allow *al = NULL;
    uint64_t gen;
    int line = 0;

    (void)state;
    key_text(51, k1, p1);
    key_text(52, k2, p2);
    fed_test_path(path, sizeof path, "allow.txt");
    snprintf(text, sizeof text, "one %s\n", k1);
    write_file(path, text, strlen(text), 0644);
    assert_int_equal(fed_crypto_allow_new(&al), FED_OK);
    assert_int_equal(fed_crypto_allow_load(al, path, &line), FED_OK);
    gen = fed_crypto_allow_generation(al);
    assert_non_null(fed_crypto_allow_find(al, p1));
    snprintf(text, sizeof text, "one %s\ntwo %s junk\n", k1, k2);
    write_file(path, text, strlen(text), 0644);
    assert_int_equal(fed_crypto_allow_load(al, path, &line), FED_ERR_FORMAT);
    assert_int_equal(line, 2);
    assert_int_equal(fed_crypto_allow_count(al), 1); /* the old list stays */
    assert_int_equal(fed_crypto_allow_generation(al), gen);
    snprintf(text, sizeof text, "two %s\n", k2);
    write_file(path, text, strlen(text), 0644);
    assert_int_equal(fed_crypto_allow_load(al, path, &line), FED_OK);
    assert_null(fed_crypto_allow_find(al, p1)); /* removed on reload */
    assert_non_null(fed_crypto_allow_find(al, p2));
    assert_true(fed_crypto_allow_generation(al) > gen);
    assert_int_equal(fed_crypto_allow_add(al, "one", p1), FED_OK);
    assert_int_equal(fed_crypto_allow_add(al, "one", p2), FED_ERR_EXISTS);
    assert_int_equal(fed_crypto_allow_add(al, "three", p1), FED_ERR_EXISTS);
    assert_int_equal(fed_crypto_allow_add(al, "bad name", PA), FED_ERR_FORMAT);
    assert_int_equal(fed_crypto_allow_count(al), 2);
    /* the file deleted under a running node: its SIGHUP keeps the list,
       and says the file is gone, not "not found" at a line 0 */
    assert_int_equal(unlink(path), 0);
    errors_kept();
    assert_int_equal(fed_crypto_allow_load(al, path, &line), FED_ERR_NOTFOUND);
    assert_int_equal(line, 0);
    fed_test_log_has("allow.txt is gone (deleted or moved); keeping the 2 members read before");
    errors_dropped();
    assert_int_equal(fed_crypto_allow_count(al), 2);
    assert_non_null(fed_crypto_allow_find(al, p2));
    fed_crypto_allow_free(al);
    /* a first load has nothing to keep */
    assert_int_equal(fed_crypto_allow_new(&al), FED_OK);
    fed_test_path(path, sizeof path, "missing.txt");
    errors_kept();
    assert_int_equal(fed_crypto_allow_load(al, path, &line), FED_ERR_NOTFOUND);
    fed_test_log_has("missing.txt: No such file or directory");
    assert_int_equal(fed_test_log_count("keeping", ""), 0);
    errors_dropped();
    fed_crypto_allow_free(al);
}

typedef struct allow_parse_try {
    char k1[45], k2[45], text[512];
    fed_crypto_allow *al;
} allow_parse_try;

/* A parse that failed added nobody. */
static fed_err try_allow_parse(void *ctx)
{
    allow_parse_try *t = ctx;
    fed_err err = fed_crypto_allow_parse(t->al, t->text, strlen(t->text), NULL);

    if (err != FED_OK)
        assert_int_equal(fed_crypto_allow_count(t->al), 0);
    return err;
}

static void test_allow_alloc_failures(void **state)
{
    allow_parse_try t;

    (void)state;
    key_text(61, t.k1, NULL);
    key_text(62, t.k2, NULL);
    snprintf(t.text, sizeof t.text, "a %s\nb %s\n", t.k1, t.k2);
    assert_int_equal(fed_crypto_allow_new(&t.al), FED_OK);
    fed_test_alloc_sweep(try_allow_parse, &t, 1, 100);
    assert_int_equal(fed_crypto_allow_count(t.al), 2);
    fed_crypto_allow_free(t.al);
}

/* A seed source of fixed bytes 7i + 1: the keystream's key is known. */
static void ks_seed(void *ctx, void *buf, size_t len)
{
    (void)ctx;
    for (size_t i = 0; i < len; i++)
        ((uint8_t *)buf)[i] = (uint8_t)(7 * i + 1);
}

/* The keystream: ChaCha20's request r is crypto_stream_chacha20 under the
 * nonce r (LE); AES-256-CTR's is libsodium's AES-256-GCM ciphertext of
 * zeros under the same key and the IV r (LE, then 4 zero bytes), for
 * lengths across the 8-block loop, the single blocks and a partial one;
 * the two ciphers differ; wipe clears the key. */
static void test_keystream(void **state)
{
    static const size_t lens[] = {100003, 5, 4096, 0, 127, 129};
    static uint8_t got[100003], want[100003 + 16], zeros[100003];
    uint8_t key[32], nonce[12];
    fed_crypto_keystream ks;
    unsigned long long clen;

    (void)state;
    ks_seed(NULL, key, sizeof key);
    fed_crypto_keystream_init_cipher(&ks, ks_seed, NULL, 0);
    assert_int_equal(ks.aes, 0);
    for (size_t r = 0; r < sizeof lens / sizeof lens[0]; r++) {
        memset(nonce, 0, sizeof nonce);
        nonce[0] = (uint8_t)r;
        fed_crypto_keystream_random(&ks, got, lens[r]);
        crypto_stream_chacha20(want, lens[r], nonce, key);
        if (lens[r])
            assert_memory_equal(got, want, lens[r]);
    }
    fed_crypto_keystream_wipe(&ks);
    if (!fed_crypto_keystream_has_aes() || !crypto_aead_aes256gcm_is_available()) {
        printf("# keystream: this CPU has no AES instructions: the AES path is not checked\n");
        return;
    }
    fed_crypto_keystream_init(&ks, ks_seed, NULL);
    assert_int_equal(ks.aes, 1);
    for (size_t r = 0; r < sizeof lens / sizeof lens[0]; r++) {
        memset(nonce, 0, sizeof nonce);
        nonce[0] = (uint8_t)r;
        fed_crypto_keystream_random(&ks, got, lens[r]);
        assert_int_equal(crypto_aead_aes256gcm_encrypt(want, &clen, zeros, lens[r], NULL, 0, NULL,
                                                       nonce, key), 0);
        if (lens[r])
            assert_memory_equal(got, want, lens[r]);
    }
    crypto_stream_chacha20(want, 64, (const uint8_t[12]){0}, key);
    fed_crypto_keystream_wipe(&ks);
    fed_crypto_keystream_init(&ks, ks_seed, NULL);
    fed_crypto_keystream_random(&ks, got, 64);
    assert_memory_not_equal(got, want, 64);
    fed_crypto_keystream_wipe(&ks);
    assert_true(sodium_is_zero(ks.key, sizeof ks.key) && sodium_is_zero(ks.rk, sizeof ks.rk));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_arena_identity_deterministic),
        cmocka_unit_test(test_arena_no_identity),
        cmocka_unit_test(test_session_keys_agree),
        cmocka_unit_test(test_session_bad_peers),
        cmocka_unit_test(test_session_cache_lru_and_pins),
        cmocka_unit_test(test_slots),
        cmocka_unit_test(test_guarded),
        cmocka_unit_test(test_arena_alloc_failures),
        cmocka_unit_test(test_seal_open_roundtrip),
        cmocka_unit_test(test_seal_payload_hash),
        cmocka_unit_test(test_seal_tampering),
        cmocka_unit_test(test_seal_bad_signature_under_valid_aead),
        cmocka_unit_test(test_replay_basic),
        cmocka_unit_test(test_replay_window_slides),
        cmocka_unit_test(test_replay_epochs),
        cmocka_unit_test(test_replay_busy_and_alloc),
        cmocka_unit_test(test_base64),
        cmocka_unit_test(test_keyfile_plain_roundtrip),
        cmocka_unit_test(test_keyfile_loose_permissions),
        cmocka_unit_test(test_keyfile_passphrase),
        cmocka_unit_test(test_keyfile_malformed),
        cmocka_unit_test(test_keyfile_default_cost),
        cmocka_unit_test(test_passphrase_read),
        cmocka_unit_test(test_cli_keygen_and_pubkey),
        cmocka_unit_test(test_allow_parse),
        cmocka_unit_test(test_allow_errors),
        cmocka_unit_test(test_allow_reload_keeps_old_on_error),
        cmocka_unit_test(test_allow_alloc_failures),
        cmocka_unit_test(test_keystream),
    };

    fed_log_set_level(FED_LOG_ERROR + 1);
    return cmocka_run_group_tests(tests, fed_test_tmpdir_setup, fed_test_tmpdir_teardown);
}
