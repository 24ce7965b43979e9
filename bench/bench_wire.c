/* bench_wire.c - the sealed envelope against its parts, on the same buffer
 * in the same run: seal and open of 1 MiB and 16 MiB payloads next to
 * XChaCha20-Poly1305 alone, BLAKE2b alone and Ed25519 alone (on the 64-byte
 * digest, which is what the envelope signs; Ed25519 over the whole buffer
 * is printed too, for scale). The envelope should cost no more than 1.1x
 * the sum of its parts. Each figure is the fastest of several runs (the
 * machine is shared); nothing here asserts a time. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>

#include "core/alloc.h"
#include "core/log.h"
#include "core/rng.h"
#include "crypto/allow.h"
#include "crypto/arena.h"
#include "crypto/arena_impl.h"
#include "crypto/envelope.h"
#include "gossip/wire.h"

typedef struct bench {
    fed_crypto_arena *a, *b;
    fed_crypto_allow *allow;
    fed_wire *wa, *wb;
    fed_rng rng;
    uint64_t seq;
} bench;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static fed_crypto_arena *identity(uint64_t seed)
{
    fed_crypto_arena *a = NULL;
    fed_rng rng;

    fed_rng_seed(&rng, seed);
    if (fed_crypto_arena_new(NULL, &a) != FED_OK ||
        fed_crypto_arena_generate(a, fed_rng_random, &rng) != FED_OK)
        exit(1);
    return a;
}

static void bench_open(bench *B)
{
    fed_wire_cfg cfg;

    B->a = identity(1);
    B->b = identity(2);
    if (fed_crypto_allow_new(&B->allow) != FED_OK ||
        fed_crypto_allow_add(B->allow, "a", fed_crypto_arena_pubkey(B->a)) != FED_OK ||
        fed_crypto_allow_add(B->allow, "b", fed_crypto_arena_pubkey(B->b)) != FED_OK)
        exit(1);
    fed_wire_cfg_default(&cfg);
    cfg.max_frame = (size_t)32 << 20;
    if (fed_wire_new(&cfg, B->a, B->allow, &B->wa) != FED_OK ||
        fed_wire_new(&cfg, B->b, B->allow, &B->wb) != FED_OK)
        exit(1);
    fed_wire_set_epoch(B->wa, 100);
    fed_wire_set_epoch(B->wb, 200);
    fed_rng_seed(&B->rng, 3);
    B->seq = 1;
}

static void bench_close(bench *B)
{
    fed_wire_free(B->wa);
    fed_wire_free(B->wb);
    fed_crypto_allow_free(B->allow);
    fed_crypto_arena_free(B->a);
    fed_crypto_arena_free(B->b);
}

/* Seals frame (payload already in place) as a DELTA from a to b. */
static double seal(bench *B, uint8_t *frame, size_t cap, size_t plen)
{
    fed_wire_hdr h;
    size_t len = 0;
    double t;

    memset(&h, 0, sizeof h);
    h.type = FED_WIRE_DELTA;
    memcpy(h.recipient, fed_crypto_arena_pubkey(B->b), 32);
    h.sender_epoch = 100;
    h.recipient_epoch = 200;
    h.seq = B->seq++;
    h.codec = 1;
    t = now_s();
    if (fed_wire_seal(B->wa, &h, frame, cap, plen, fed_rng_random, &B->rng, &len) != FED_OK)
        exit(1);
    return now_s() - t;
}

static double open_frame(bench *B, uint8_t *frame, size_t len)
{
    fed_wire_msg m;
    double t = now_s();

    if (fed_wire_open(B->wb, frame, len, &m) != FED_OK)
        exit(1);
    return now_s() - t;
}

static double min_of(double a, double b) { return a < b ? a : b; }

static void run_size(bench *B, size_t plen, int reps)
{
    size_t cap = fed_wire_frame_bytes(plen), len = cap;
    uint8_t *frame = fed_alloc_aligned(cap), *p = frame + FED_WIRE_HEADER_BYTES;
    uint8_t digest[64], sig[64], key[32], nonce[24] = {0};
    double t_seal = 1e9, t_open = 1e9, t_enc = 1e9, t_dec = 1e9, t_hash = 1e9, t_sign = 1e9,
           t_verify = 1e9, t_sign_all = 1e9, t, mib = plen / 1048576.0;
    fed_crypto_session *s = NULL;

    if (!frame)
        exit(1);
    fed_rng_fill(&B->rng, p, plen);
    if (fed_crypto_session_get(B->a, fed_crypto_arena_pubkey(B->b), &s) != FED_OK)
        exit(1);
    memcpy(key, fedi_crypto_session_tx(s), sizeof key);
    fed_crypto_session_put(B->a, s);
    for (int r = 0; r < reps; r++) {
        /* the envelope: seal, then open (in place, as a node does) */
        t_seal = min_of(t_seal, seal(B, frame, cap, plen));
        t_open = min_of(t_open, open_frame(B, frame, len));
        /* its parts alone, on the same buffer */
        t = now_s();
        crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
            p, p + plen + 64, NULL, p, plen + 64, frame, FED_WIRE_HEADER_BYTES, NULL, nonce, key);
        t_enc = min_of(t_enc, now_s() - t);
        t = now_s();
        if (crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
                p, NULL, p, plen + 64, p + plen + 64, frame, FED_WIRE_HEADER_BYTES, nonce, key) !=
            0)
            exit(1);
        t_dec = min_of(t_dec, now_s() - t);
        t = now_s();
        fed_crypto_payload_hash(p, plen, digest);
        fed_crypto_frame_digest(frame, FED_WIRE_HEADER_BYTES, digest, digest);
        t_hash = min_of(t_hash, now_s() - t);
        t = now_s();
        if (fed_crypto_arena_sign(B->a, digest, sizeof digest, sig) != FED_OK)
            exit(1);
        t_sign = min_of(t_sign, now_s() - t);
        t = now_s();
        if (fed_crypto_verify_digest(fed_crypto_arena_pubkey(B->a), digest, sig) != FED_OK)
            exit(1);
        t_verify = min_of(t_verify, now_s() - t);
        if (r < 2) {
            t = now_s();
            if (fed_crypto_arena_sign(B->a, p, plen, sig) != FED_OK)
                exit(1);
            t_sign_all = min_of(t_sign_all, now_s() - t);
        }
    }
    printf("payload %5.0f MiB  (best of %d)\n", mib, reps);
    printf(
        "  seal      %8.1f MiB/s  %8.3f ms | parts: AEAD %7.3f + BLAKE2b %7.3f + Ed25519(digest) "
        "%6.3f = %7.3f ms | envelope/parts %.3f\n",
        mib / t_seal, t_seal * 1e3, t_enc * 1e3, t_hash * 1e3, t_sign * 1e3,
        (t_enc + t_hash + t_sign) * 1e3, t_seal / (t_enc + t_hash + t_sign));
    printf(
        "  open      %8.1f MiB/s  %8.3f ms | parts: AEAD %7.3f + BLAKE2b %7.3f + Ed25519(verify) "
        "%6.3f = %7.3f ms | envelope/parts %.3f\n",
        mib / t_open, t_open * 1e3, t_dec * 1e3, t_hash * 1e3, t_verify * 1e3,
        (t_dec + t_hash + t_verify) * 1e3, t_open / (t_dec + t_hash + t_verify));
    printf("  alone     AEAD enc %8.1f MiB/s, AEAD dec %8.1f MiB/s, BLAKE2b %8.1f MiB/s, "
           "Ed25519 over the whole buffer %8.1f MiB/s (why the digest is signed)\n",
           mib / t_enc, mib / t_dec, mib / t_hash, mib / t_sign_all);
    fed_free(frame);
}

int main(void)
{
    bench B;

    fed_log_set_level(FED_LOG_WARN);
    bench_open(&B);
    printf("bench_wire: sealed envelope vs its parts (libsodium %s; shared machine: noisy)\n",
           sodium_version_string());
    run_size(&B, (size_t)1 << 20, 40);
    run_size(&B, (size_t)16 << 20, 8);
    bench_close(&B);
    return 0;
}
