/* dp_account.h - a site's privacy accountant over its database: the
 * DP-SGD releases it made (storage's dp_charges rows, each a subsampled
 * Gaussian run some steps) composed into one RDP vector over the default
 * orders (privacy/rdp.h), and epsilon at the site's delta. The client role
 * and `fednode train --db` load it at start, ask what the next release
 * would bring the total to (the budget check), and charge each release in
 * the transaction that records it, committed before anything leaves. The
 * database is the state: a restart loads the same total, and a round
 * trained again is charged again. Loop thread only. */
#ifndef FED_NODE_DP_ACCOUNT_H
#define FED_NODE_DP_ACCOUNT_H

#include <stdint.h>

#include "core/err.h"
#include "storage/store.h"

typedef struct fed_dp_account fed_dp_account;

/* delta in (0, 1), else FED_ERR_RANGE. Spent nothing until loaded. */
FED_WUR fed_err fed_dp_account_new(double delta, fed_dp_account **out);
void fed_dp_account_free(fed_dp_account *a);

/* The total of every charge in st (what was there before is dropped). */
FED_WUR fed_err fed_dp_account_load(fed_dp_account *a, fed_store *st);
/* Epsilon spent so far at the account's delta (0 with no charge). */
double fed_dp_account_epsilon(const fed_dp_account *a);
/* What the total would be after one more release of steps steps at rate q
 * and noise multiplier sigma; +infinity for sigma 0 (q > 0). */
double fed_dp_account_preview(const fed_dp_account *a, double q, double sigma, uint64_t steps);
/* Steps DP-SGD takes in a round of epochs passes over n samples at batch
 * (ceil(n / batch) each), and its sampling rate min(1, batch / n). */
uint64_t fed_dp_account_round_steps(uint64_t n, uint32_t batch, uint32_t epochs);
double fed_dp_account_rate(uint64_t n, uint32_t batch);
/* Writes the charge's row into st (inside the caller's transaction, which
 * must commit before the release leaves) and adds it to the total; *eps
 * (may be NULL) gets the new total. If the transaction then fails, load
 * again: the total must not run ahead of the database for long, and never
 * behind it. */
FED_WUR fed_err fed_dp_account_charge(fed_dp_account *a, fed_store *st, uint64_t round,
                                      uint64_t at_ms, double q, double sigma, uint64_t steps,
                                      double *eps);
/* The number of charges loaded and made. */
uint64_t fed_dp_account_charges(const fed_dp_account *a);

#endif
