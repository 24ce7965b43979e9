/* replay.h - replay windows: one per peer, for that peer's current epoch.
 * A window remembers the highest committed sequence number and which of the
 * 1024 below it were seen. A frame's (epoch, sequence) is reserved when it
 * passes the cheap checks, committed once it has opened, and released if it
 * fails; a reserved pair cannot be reserved again, so two copies of a frame
 * opened at once cannot both be accepted. Only a commit moves a window to a
 * newer epoch of its peer (a forged header cannot reset it). Not secret:
 * ordinary heap, loop thread only. */
#ifndef FED_CRYPTO_REPLAY_H
#define FED_CRYPTO_REPLAY_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

#define FED_CRYPTO_REPLAY_WINDOW 1024
#define FED_CRYPTO_REPLAY_PENDING 16 /* reservations in flight per peer */

typedef struct fed_crypto_replay fed_crypto_replay;

FED_WUR fed_err fed_crypto_replay_new(fed_crypto_replay **out);
void fed_crypto_replay_free(fed_crypto_replay *r);

/* FED_ERR_SENDER_EPOCH: epoch is older than the peer's last committed one;
 * FED_ERR_REPLAY: (epoch, seq) was committed, is reserved now, or lies below
 * the window; FED_ERR_BUSY: FED_CRYPTO_REPLAY_PENDING reservations are in
 * flight for this peer; FED_ERR_NOMEM. */
FED_WUR fed_err fed_crypto_replay_reserve(fed_crypto_replay *r, const uint8_t peer[32],
                                          uint64_t epoch, uint64_t seq);
/* Marks a reserved pair seen. A newer epoch replaces the window. FED_ERR_SENDER_EPOCH:
 * a newer epoch of the peer was committed while this frame was opening (the
 * frame must be dropped); a sequence that fell below the window meanwhile is
 * accepted (its reservation kept any copy out). Committing a pair that was
 * not reserved is a bug (assert; FED_ERR_INVAL). */
FED_WUR fed_err fed_crypto_replay_commit(fed_crypto_replay *r, const uint8_t peer[32],
                                         uint64_t epoch, uint64_t seq);
/* Drops a reservation (the frame failed); unknown pairs are ignored. */
void fed_crypto_replay_release(fed_crypto_replay *r, const uint8_t peer[32], uint64_t epoch,
                               uint64_t seq);
/* The peer's last committed epoch; 0 when none. */
uint64_t fed_crypto_replay_epoch(const fed_crypto_replay *r, const uint8_t peer[32]);
/* Forgets a peer (it left); its reservations must be released first. */
void fed_crypto_replay_forget(fed_crypto_replay *r, const uint8_t peer[32]);
size_t fed_crypto_replay_peers(const fed_crypto_replay *r);

#endif
