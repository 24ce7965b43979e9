/* err.h - the one error enum of fednode and its messages.
 * Every function that can fail returns fed_err; FED_OK is 0. Each rejection a
 * hostile peer can provoke has its own code, so tests and counters can name it.
 * The list is an X-macro: the enum and fed_strerror come from the same table. */
#ifndef FED_CORE_ERR_H
#define FED_CORE_ERR_H

#include <stddef.h>

#define FED_WUR __attribute__((warn_unused_result))

#define FED_ERR_LIST(X)                                                        \
    X(FED_OK, "ok")                                                            \
    /* general */                                                              \
    X(FED_ERR_NOMEM, "out of memory")                                          \
    X(FED_ERR_INVAL, "invalid argument")                                       \
    X(FED_ERR_RANGE, "value out of range")                                     \
    X(FED_ERR_IO, "input/output error")                                        \
    X(FED_ERR_NOTFOUND, "not found")                                           \
    X(FED_ERR_EXISTS, "already exists")                                        \
    X(FED_ERR_PERM, "permission denied or unsafe permissions")                 \
    X(FED_ERR_FULL, "no space left (disk or table full)")                      \
    X(FED_ERR_READONLY, "read-only")                                           \
    X(FED_ERR_BUSY, "busy, try again")                                         \
    X(FED_ERR_TIMEOUT, "timed out")                                            \
    X(FED_ERR_CLOSED, "closed")                                                \
    X(FED_ERR_UNSUPPORTED, "not supported")                                    \
    X(FED_ERR_INTERNAL, "internal error")                                      \
    /* parsing outside bytes and text */                                       \
    X(FED_ERR_FORMAT, "malformed input")                                       \
    X(FED_ERR_TRUNCATED, "input truncated")                                    \
    X(FED_ERR_MAGIC, "bad magic number")                                       \
    X(FED_ERR_VERSION, "unsupported version")                                  \
    X(FED_ERR_TOO_LARGE, "size over the limit")                                \
    X(FED_ERR_NOT_NUMERIC, "non-numeric value")                                \
    X(FED_ERR_NAN, "NaN or infinity in data")                                  \
    X(FED_ERR_UNKNOWN_OPTION, "unknown option")                                \
    X(FED_ERR_BAD_VALUE, "bad option value")                                   \
    X(FED_ERR_SPEC, "bad model specification")                                 \
    X(FED_ERR_SHAPE, "shape mismatch")                                         \
    /* frames and envelopes, in the receiver's check order */                  \
    X(FED_ERR_FRAME_TRUNCATED, "frame truncated")                              \
    X(FED_ERR_FRAME_MAGIC, "frame has bad magic")                              \
    X(FED_ERR_FRAME_VERSION, "frame has unknown version")                      \
    X(FED_ERR_FRAME_TOO_LARGE, "frame over the size limit")                    \
    X(FED_ERR_FRAME_TYPE, "frame has unknown type or flags")                   \
    X(FED_ERR_WRONG_RECIPIENT, "frame addressed to another node")              \
    X(FED_ERR_OLD_EPOCH, "frame addressed to an older epoch of this node")     \
    X(FED_ERR_UNKNOWN_SENDER, "frame from a non-member")                       \
    X(FED_ERR_SENDER_EPOCH, "frame from an older epoch of its sender")         \
    X(FED_ERR_REPLAY, "replayed frame (epoch, sequence)")                      \
    X(FED_ERR_AEAD, "frame failed authenticated decryption")                   \
    X(FED_ERR_SIGNATURE, "frame signature invalid")                            \
    X(FED_ERR_PAYLOAD, "frame payload malformed")                              \
    X(FED_ERR_STREAM, "chunk stream truncated, reordered or corrupt")          \
    X(FED_ERR_STREAM_LIMIT, "too many chunk streams at once")                  \
    X(FED_ERR_CODEC, "codec data malformed")                                   \
    /* keys and storage */                                                     \
    X(FED_ERR_KEY, "bad key or key file")                                      \
    X(FED_ERR_PASSPHRASE, "wrong passphrase")                                  \
    X(FED_ERR_DB, "database error")                                            \
    X(FED_ERR_CORRUPT, "corrupt data (hash or chain mismatch)")                \
    X(FED_ERR_SCHEMA, "database schema too new or unknown")                    \
    /* devices */                                                              \
    X(FED_ERR_NODEVICE, "no such device")                                      \
    X(FED_ERR_DEVICE, "device error")                                          \
    /* strategies */                                                           \
    X(FED_ERR_TOO_FEW, "too few inputs for this strategy")                     \
    /* rounds */                                                               \
    X(FED_ERR_LATE, "delta for a round that is closed")                        \
    X(FED_ERR_ROLE, "message not expected by this role or state")              \
    X(FED_ERR_EXPIRED, "entry past its expiry")                                \
    /* storage, appended so the codes above keep their values */              \
    X(FED_ERR_DB_DAMAGED, "database file damaged (SQLite found corruption)")  \
    /* frames, appended likewise */                                            \
    X(FED_ERR_FIELD_REQUIRED, "frame has a required field this node does not know") \
    /* differential privacy, appended likewise */                              \
    X(FED_ERR_DP_BUDGET, "the round would exceed this site's privacy budget")    \
    X(FED_ERR_DP_REQUIRED, "the aggregator requires DP-SGD, which this site does not run") \
    /* secure aggregation (node/secagg_*.c): each message's own rejection */   \
    X(FED_ERR_SA_KEYS, "secure aggregation: bad or unexpected KEYS message")   \
    X(FED_ERR_SA_SHARES, "secure aggregation: bad or unexpected SHARES message") \
    X(FED_ERR_SA_MASKED, "secure aggregation: bad or unexpected MASKED message") \
    X(FED_ERR_SA_CONSIST, "secure aggregation: bad or unexpected CONSIST message") \
    X(FED_ERR_SA_UNMASK, "secure aggregation: bad or unexpected UNMASK message") \
    X(FED_ERR_SA_FAILED, "secure aggregation: round failed closed (a secret has fewer than t live holders)") \
    X(FED_ERR_SA_DROPPED, "secure aggregation: this client was named dropped, or the survivors' graph is split") \
    X(FED_ERR_SA_REVEALED, "secure aggregation: this round's delta was in a sum already revealed; masking it again could expose a client") \
    /* a typed block's fields (gossip/wire.h), appended likewise */           \
    X(FED_ERR_FIELD_TRUNCATED, "frame's typed block has a field that runs past its end") \
    X(FED_ERR_FIELD_ORDER, "frame's typed block has a field repeated or out of tag order") \
    X(FED_ERR_FIELD_LENGTH, "frame's typed block has a field over its length bound") \
    X(FED_ERR_FIELD_MISSING, "frame's typed block lacks a field its type requires") \
    /* the aggregator's run, appended likewise */                              \
    X(FED_ERR_TOO_FEW_CLIENTS, "fewer clients than --min-clients can still take part") \
    /* a client's reasons to decline a round (a LEAVE), appended likewise */   \
    X(FED_ERR_SA_REQUIRED, "secure aggregation required: this client (--secagg) sends no delta in a round that does not run it") \
    X(FED_ERR_MODEL_MISMATCH, "the aggregator's model does not fit this client (another input shape or class count, another graph than its own --model declares, or past its --max-model-params or --max-model-flops)") \
    X(FED_ERR_SA_TOO_FEW, "secure aggregation: fewer clients than the floor (3, or more as configured); a client could subtract its own delta from the sum") \
    X(FED_ERR_STATS, "shared statistics: this site cannot take part (standardization off, no CSV data, or another column count than the federation's)") \
    /* tensors on their own paths (node/layout.h), appended likewise */        \
    X(FED_ERR_SEGMENTS, "a delta's segments do not match the round's tensor layout (the model, --local-layers, --local-bn)") \
    X(FED_ERR_LOCAL_MISMATCH, "the aggregator's --local-layers or --local-bn differ from this client's own") \
    X(FED_ERR_DP_STATS, "the model's non-trained statistics would leave the site without noise under DP-SGD; the aggregator must keep them local (--local-bn or --require-dp-sgd)") \
    /* a strategy's own segment (node/layout.h), appended likewise */            \
    X(FED_ERR_STEPS, "FedNova under secure aggregation: this client's momentum-weighted local steps exceed the steps segment's range (65536); lower --local-epochs or set --max-steps") \
    /* storage, appended likewise */                                           \
    X(FED_ERR_IN_USE, "the database is in use by another fednode process (one writer a database)")

typedef enum fed_err {
#define FED_ERR_ENUM_(name, msg) name,
    FED_ERR_LIST(FED_ERR_ENUM_)
#undef FED_ERR_ENUM_
    FED_ERR_COUNT_
} fed_err;

/* A static English message for e; never NULL, also for values out of range. */
const char *fed_strerror(int e);
/* The enum's identifier, e.g. "FED_ERR_REPLAY" (for logs and counters). */
const char *fed_errname(int e);
/* err, with why (cap bytes; may be NULL or 0) set to the printf-formatted
 * words saying what was wrong: for checks that explain a refusal to a
 * caller who says it where it fits. */
fed_err fed_err_why(char *why, size_t cap, fed_err err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
