/* merge.h - merge strategies: how N client deltas become one update of the
 * global model. Every strategy is a pure function of (the global vector, the
 * N deltas, their weights, the strategy's own state) behind one interface the
 * node calls; nothing here knows about rounds, peers or networks.
 *
 * Spec grammar (no spaces; numbers as strtod/strtol read them, finite):
 *   spec     := [ "clip:" NORM "+" ] strategy
 *   strategy := "fedavg"
 *             | "fedavgm" [ ":" BETA [ "," ETA ] ]      momentum 0.9, server lr 1
 *             | "fedprox:" MU                           server side = fedavg
 *             | ( "fedadam" | "fedyogi" | "fedadagrad" )
 *                   [ ":" ETA [ "," B1 [ "," B2 [ "," TAU ] ] ] ]
 *                                                       1e-2, 0.9, 0.99, 1e-3
 *             | "median" | "trimmed:" BETA
 *             | "krum:" F | "multikrum:" F "," M | "bulyan:" F
 *             | "fednova"                               (Wang et al. 2020)
 *             | "scaffold" [ ":" ETA ]                  (Karimireddy et al. 2020),
 *                                                       global step 1
 *   e.g. "fedavg", "fedadam:0.03", "clip:10+median", "clip:2.5+multikrum:2,5".
 * Ranges: NORM > 0; momentum BETA, B1, B2 in [0, 1); ETA, TAU > 0; MU in [0, 1000];
 * trimmed BETA in [0, 0.5); F >= 0; M >= 1. Anything else is FED_ERR_BAD_VALUE
 * with one fed_log line that quotes the spec and says what is wrong.
 *
 * What apply does, in order:
 *  1. Order: inputs are sorted by client key (memcmp of the 32 bytes) and
 *     everything below runs in that order, so the result does not depend on
 *     the order deltas arrived in. Two inputs with one key: FED_ERR_INVAL.
 *  2. Reject: a weight that is not finite and > 0 (FED_ERR_BAD_VALUE), a
 *     delta with a NaN or Inf (FED_ERR_NAN). A rejected client is skipped,
 *     never merged, and its verdict says why; apply itself goes on with the
 *     rest. (Sample-weighted strategies find NaN by checking the merged delta
 *     and only then scan each client, so the honest path reads each delta once.)
 *  3. Clip (with "clip:NORM"): a delta d with ||d||_2 > NORM counts as
 *     s*d, s = (float)(NORM / ||d||_2); the caller's buffer is never written
 *     (s is folded into the weight, or applied as values are gathered).
 *  4. Merge into the merged delta D (nparams); n counts valid inputs:
 *     fedavg/fedavgm/fedprox/fedadam/fedyogi/fedadagrad:
 *        D = sum_i p_i d_i, p_i = w_i / sum w, then capped: no client's share
 *        exceeds cfg.weight_cap (the excess goes to the others in proportion
 *        to their weights, water-filling; when cap * n <= 1 every share is 1/n).
 *        Computed by the backend's weighted_sum (double accumulation, fixed
 *        order). D is finite-checked before the global or state is written.
 *     median:    per coordinate, the median (mean of the two middle values
 *                when n is even).
 *     trimmed:B: per coordinate, drop k = floor(B*n) smallest and k largest,
 *                mean of the rest (n - 2k >= 1 or FED_ERR_TOO_FEW).
 *     krum:F     (Blanchard et al. 2017) score_i = sum of squared distances to
 *                its n-F-2 nearest others; D = the delta with the lowest score,
 *                exactly (ties: lowest key). Needs n >= 2F+3.
 *     multikrum:F,M  the min(M, n-F) lowest scores, averaged uniformly.
 *     bulyan:F   (El Mhamdi et al. 2018) theta = n-2F deltas chosen by Krum
 *                repeatedly on the remaining set (a score sums the
 *                max(1, remaining-F-2) nearest), then per coordinate the mean
 *                of the beta = theta-2F values closest to their median (ties:
 *                the lower). Needs n >= 4F+3, else FED_ERR_TOO_FEW.
 *     Robust strategies ignore the weights (beyond rejecting bad ones).
 *  5. Server step (the global vector x, nparams):
 *     fedavg, fedprox, robust:  x += D
 *     fednova:   x += S D, S the caller's fed_merge_set_step_scale for this
 *                apply (tau_eff = sum p_i a_i; the clients sent d_i / a_i), 1
 *                when not set; the node reduces the a_i (node/agg_input.c)
 *     scaffold:  x += ETA D (the paper's eta_g); the control variates are the
 *                node's (node/agg_input.c, node/train_job.c)
 *     fedavgm:   v = BETA v + D;  x += ETA v                  (Hsu et al. 2019)
 *     fedadam:   m = B1 m + (1-B1) D;  v = B2 v + (1-B2) D^2
 *     fedyogi:   m likewise;  v = v - (1-B2) D^2 sign(v - D^2)
 *     fedadagrad: m likewise; v = v + D^2
 *                then x += ETA m / (sqrt(v) + TAU)  (Reddi et al. 2021, Alg. 2,
 *                no bias correction; m starts at 0 and v at TAU^2 as there).
 *     Too few valid inputs (none, or fewer than the strategy needs):
 *     FED_ERR_TOO_FEW. On any error x and the state are left as they were.
 *
 * Where it computes: every whole-vector operation goes through the backend
 * table (weighted_sum, sumsq, axpy, scale, copy, gemm), so a GPU backend does
 * the sample-weighted strategies and FedAvgM on the device. Three parts run
 * on the host CPU (on a backend other than "cpu", through downloads and
 * uploads, block by block):
 *  - the coordinate-wise rules (median, trimmed, Bulyan's second stage):
 *    gathered block by block into a 256 KiB buffer; up to 128 clients each
 *    block is sorted per coordinate by Batcher's odd-even merge network,
 *    whose comparators are vector min/max over rows of coordinates and whose
 *    cost does not depend on the values attackers choose; beyond 128 clients
 *    the block is transposed and each coordinate selected by introselect
 *    (heapsort fallback);
 *  - the Krum scores: the N x N Gram matrix comes from the backend's gemm over
 *    blocks of coordinates copied into a contiguous staging buffer, summed in
 *    double on the host; distances are ||a||^2 + ||b||^2 - 2 a.b, O(N^2 d)
 *    multiply-adds plus O(N d) copies (norms from the backend's sumsq);
 *  - the adaptive optimizers' element-wise step (the table has no kernel
 *    for it): in place on "cpu", else through a download and an upload.
 * All memory, device scratch included, is allocated in fed_merge_new, sized by
 * nparams and cfg.max_clients; apply never allocates. One fed_merge serves
 * one thread at a time (its scratch is shared between calls); distinct ones
 * are independent.
 *
 * Precision: D is rounded to float once (weighted_sum sums in double);
 * coordinate-wise means sum in double; Krum's cross terms are float GEMMs
 * over blocks of 4096 coordinates summed in double (distances between nearly
 * equal deltas carry relative error about 1e-7 * ||a||^2: enough to rank).
 *
 * Strategy state (for checkpoints) as flat host floats, in this order:
 *   fedavgm:                  v (nparams)
 *   fedadam/fedyogi/fedadagrad: m (nparams) then v (nparams)
 *   everything else:          nothing (0 floats). */
#ifndef FED_MODEL_MERGE_H
#define FED_MODEL_MERGE_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"
#include "core/pool.h"
#include "model/backend.h"

#define FED_MERGE_KEY_BYTES 32
#define FED_MERGE_SPEC_MAX 128
/* FedProx's largest mu (a float on the wire; a larger one holds any step at
 * the global model). */
#define FED_MERGE_PROX_MU_MAX 1000.0
#define FED_MERGE_DEFAULT_MAX_CLIENTS 128

typedef struct fed_merge fed_merge;

typedef struct fed_merge_config {
    int max_clients;   /* most inputs one apply takes (scratch is sized by it), >= 1 */
    double weight_cap; /* largest share of the total weight one client may get,
                          in (0, 1); 0 (the default) or >= 1: no cap */
    fed_pool *pool;    /* the weighted sum split over it (slices of whole cache
                          lines, the same bits as one piece); NULL: one thread.
                          Host backends only */
} fed_merge_config;

/* One client's delta. */
typedef struct fed_merge_input {
    const float *delta;                 /* (nparams) device pointer from the backend */
    double weight;                      /* the sample count it claims */
    uint8_t key[FED_MERGE_KEY_BYTES];   /* its identity: the summation order */
} fed_merge_input;

typedef enum fed_merge_verdict {
    FED_MERGE_USED = 0,        /* merged with weight share `share` */
    FED_MERGE_USED_COORDS,     /* coordinate-wise rule: its value was kept in a
                                  fraction `share` of the coordinates */
    FED_MERGE_NOT_SELECTED,    /* Krum / Multi-Krum / Bulyan left it out */
    FED_MERGE_REJECTED_NAN,    /* NaN or Inf in its delta (err FED_ERR_NAN) */
    FED_MERGE_REJECTED_WEIGHT, /* weight not finite or <= 0 (err FED_ERR_BAD_VALUE) */
    FED_MERGE_SKIPPED,         /* apply failed (too few inputs...): nothing merged */
} fed_merge_verdict;

/* What became of one input, at the input's own index. */
typedef struct fed_merge_result {
    fed_merge_verdict verdict;
    fed_err err;       /* why it was rejected, else FED_OK */
    double share;      /* USED: its weight in D (shares sum to 1); USED_COORDS:
                          fraction of coordinates its value was kept in; else 0 */
    double norm;       /* ||delta||_2 before clipping when it was computed
                          (clip, robust strategies, NaN hunt), else -1 */
    float clip_scale;  /* its delta counted as clip_scale * delta; 1 unless clipped */
    double score;      /* Krum score (after clipping), else 0 */
} fed_merge_result;

/* A config with max_clients FED_MERGE_DEFAULT_MAX_CLIENTS and no weight cap. */
fed_merge_config fed_merge_config_default(void);

/* Check a spec without allocating (FED_ERR_BAD_VALUE, logged, when wrong). */
FED_WUR fed_err fed_merge_spec_check(const char *spec);

/* What a caller outside model/ may need to know of a strategy, so that no
 * one else keeps a list of names or parses the spec again. */
typedef struct fed_merge_traits {
    int weighted; /* 1: D is the sample-weighted sum (fedavg, fedavgm, fedprox,
                     fedadam, fedyogi, fedadagrad), so a sum of the inputs is
                     all it needs; 0: a robust rule (median, trimmed, krum,
                     multikrum, bulyan) that needs each delta */
    double clip;  /* "clip:NORM+": NORM (> 0); 0 without */
    int fednova;  /* 1: fednova: the clients send normalized deltas and their
                     momentum-weighted step counts (node/layout.h) */
    int scaffold; /* 1: scaffold: the clients correct their gradients by
                     control variates and send their change too */
} fed_merge_traits;

/* The traits of a spec (FED_ERR_BAD_VALUE, logged, when the spec is wrong;
 * *out is then zero), and of a merge built from one. */
FED_WUR fed_err fed_merge_spec_traits(const char *spec, fed_merge_traits *out);
fed_merge_traits fed_merge_traits_of(const fed_merge *m);

/* Parse spec and allocate every buffer the strategy needs for vectors of
 * nparams floats on backend be (not owned; it must outlive the merge).
 * cfg NULL means fed_merge_config_default(). */
FED_WUR fed_err fed_merge_new(const char *spec, size_t nparams, const fed_merge_config *cfg,
                              fed_backend *be, fed_merge **out);
void fed_merge_free(fed_merge *m);

/* Merge the n inputs and update global (nparams, device pointer) in place.
 * results (n, may be NULL) get each input's verdict at the input's index.
 * Errors: FED_ERR_TOO_FEW (too few valid inputs for the strategy: n < 1,
 * Krum n < 2F+3, Bulyan n < 4F+3, trimmed n - 2k < 1), FED_ERR_TOO_LARGE
 * (n > max_clients), FED_ERR_INVAL (two inputs with one key), FED_ERR_NAN
 * (D overflowed float although no input had NaN/Inf), backend transfer
 * errors. On error global and the state are unchanged. */
FED_WUR fed_err fed_merge_apply(fed_merge *m, float *global, const fed_merge_input *in, int n,
                                fed_merge_result *results);

/* The merged delta D of the last apply (nparams, device pointer, owned by
 * m): meaningful after a successful apply, zeros before the first. */
const float *fed_merge_delta(const fed_merge *m);

/* FedProx's proximal mu, carried to clients in the round's settings; 0 for
 * every other strategy. */
double fed_merge_prox_mu(const fed_merge *m);
/* FedNova: the next apply's server step is x += scale D (scale finite, > 0;
 * back to 1 after that apply, whatever its outcome). */
void fed_merge_set_step_scale(fed_merge *m, double scale);
/* The spec as given to fed_merge_new (for the rounds table). */
const char *fed_merge_spec(const fed_merge *m);
/* The most inputs apply accepts. */
int fed_merge_max_clients(const fed_merge *m);

/* Strategy state for checkpoints: its size in floats (layout above), a copy
 * out to host memory dst, and back in from host memory src (FED_ERR_NAN if
 * src holds NaN/Inf, FED_ERR_RANGE for a negative second moment; the state
 * is then unchanged). */
size_t fed_merge_state_floats(const fed_merge *m);
FED_WUR fed_err fed_merge_get_state(const fed_merge *m, float *dst);
FED_WUR fed_err fed_merge_set_state(fed_merge *m, const float *src);

/* "used", "used-coords", "not-selected", "rejected-nan", "rejected-weight",
 * "skipped" (for the contributions table). */
const char *fed_merge_verdict_name(fed_merge_verdict v);

#endif
