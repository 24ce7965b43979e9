/* dpfedavg.c - DP-FedAvg's pure arithmetic (dpfedavg.h): clip factor,
 * adaptive clipping's geometric step, the noise split of Andrew et al.
 * (2021). Pure functions of their arguments. */
#include "privacy/dpfedavg.h"

#include <math.h>

double fed_dp_fedavg_scale(double norm, double clip)
{
    return norm > clip ? clip / norm : 1.0;
}

double fed_dp_fedavg_clip_next(double clip, double eta, double bbar, double gamma)
{
    return clip * exp(-eta * (bbar - gamma));
}

fed_err fed_dp_fedavg_split(double z, double sigma_b, double *z_delta)
{
    double r;

    if (!(z >= 0) || !isfinite(z) || !(sigma_b >= 0) || !isfinite(sigma_b))
        return FED_ERR_RANGE;
    if (sigma_b == 0 || z == 0) {
        *z_delta = z;
        return FED_OK;
    }
    if (!(2 * sigma_b > z))
        return FED_ERR_RANGE;
    r = 1.0 / (z * z) - 1.0 / (4 * sigma_b * sigma_b);
    *z_delta = 1.0 / sqrt(r);
    return FED_OK;
}
