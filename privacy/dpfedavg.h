/* dpfedavg.h - DP-FedAvg's arithmetic on the aggregator (client-level DP,
 * McMahan et al. 2018, with Andrew et al. 2021's adaptive clipping), as pure
 * functions: the clip factor of one client's update, the geometric update of
 * the clipping norm towards a target quantile of the update norms, and the
 * split of one noise multiplier between the clipped-count query and the
 * update. The aggregator (node/agg_dp.c) applies them; the accountant
 * (privacy/rdp.h) charges the round at the total noise multiplier.
 *
 * Adaptive clipping (Andrew et al. 2021, Algorithm 1): each round every
 * sampled client's bit b_i = 1 when its update's norm is at most C (it was
 * NOT clipped); the aggregator releases bbar = (sum b_i + N(0, sigma_b^2)) / m
 * (m the expected cohort) and sets C <- C exp(-eta (bbar - gamma)), so C
 * grows while fewer than gamma of the updates fit under it and shrinks while
 * more do. The count query (centred, b_i - 1/2) has sensitivity 1/2, so the
 * two releases together are one Gaussian mechanism of noise multiplier z
 * when the update's is z_delta = (z^-2 - (2 sigma_b)^-2)^(-1/2) (their
 * Theorem 1); this needs 2 sigma_b > z. No allocation, no state, no logging. */
#ifndef FED_PRIVACY_DPFEDAVG_H
#define FED_PRIVACY_DPFEDAVG_H

#include "core/err.h"

/* min(1, clip / norm): the factor a client's update of L2 norm `norm` is
 * scaled by (1 for norm 0). */
double fed_dp_fedavg_scale(double norm, double clip);

/* C exp(-eta (bbar - gamma)): the next clipping norm. */
double fed_dp_fedavg_clip_next(double clip, double eta, double bbar, double gamma);

/* The update's noise multiplier *z_delta when the round's total is z and
 * the count's noise standard deviation is sigma_b (0: no count query, then
 * z_delta = z). FED_ERR_RANGE unless z >= 0, sigma_b >= 0 (finite) and,
 * with sigma_b > 0 and z > 0, 2 sigma_b > z. */
FED_WUR fed_err fed_dp_fedavg_split(double z, double sigma_b, double *z_delta);

#endif
