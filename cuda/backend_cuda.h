/* backend_cuda.h - the CUDA plugin's one exported symbol (FED_CUDA_ENTRY in
 * model/backend.h), declared here so the plugin's definition is checked
 * against the loader's function type. Programs never include this: they
 * find the symbol with dlsym (model/backend.c, tests/test_cuda.c). */
#ifndef FED_CUDA_BACKEND_CUDA_H
#define FED_CUDA_BACKEND_CUDA_H

#include "model/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A backend on CUDA device `device` (0-based). FED_ERR_NODEVICE when the
 * runtime finds no device (or not that one), FED_ERR_DEVICE when the device
 * cannot run this build's kernels, FED_ERR_NOMEM when its scratch does not
 * fit. *out is freed with fed_backend_free. */
FED_WUR fed_err fed_cuda_backend_new(int device, fed_backend **out);

#ifdef __cplusplus
}
#endif

#endif
