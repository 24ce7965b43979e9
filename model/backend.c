/* backend.c - choosing a backend: "auto", "cpu", "cuda" or "cuda:N".
 * Finds the CUDA plugin libfedcuda.so with dlopen (next to the executable,
 * then in $FEDNODE_PLUGIN_DIR, then in ../lib/fednode from the executable's
 * folder, then in PREFIX/lib/fednode, PREFIX the one `make install` was
 * given: the Makefile defines FED_PREFIX) and falls back to
 * the CPU under "auto". The plugin stays loaded for the process's life (a
 * backend may still point into it); this file never computes anything. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/log.h"
#include "model/backend.h"

#ifndef FED_PREFIX
#define FED_PREFIX "/usr/local"
#endif
#define PLUGIN_NAME "libfedcuda.so"

int fed_backend_device_auto(const char *device)
{
    return !device || !*device || !strcmp(device, "auto");
}

/* Parse the device text: *cuda 0 for cpu, 1 for cuda, -1 for auto. */
static fed_err parse_device(const char *device, int *cuda, int *index)
{
    char *end = NULL;
    long v;

    *index = 0;
    if (fed_backend_device_auto(device)) {
        *cuda = -1;
        return FED_OK;
    }
    if (!strcmp(device, "cpu")) {
        *cuda = 0;
        return FED_OK;
    }
    if (!strcmp(device, "cuda")) {
        *cuda = 1;
        return FED_OK;
    }
    if (strncmp(device, "cuda:", 5) != 0 || !device[5])
        return FED_ERR_INVAL;
    v = strtol(device + 5, &end, 10);
    if (*end || v < 0 || v > 1024)
        return FED_ERR_INVAL;
    *cuda = 1;
    *index = (int)v;
    return FED_OK;
}

static void *try_dlopen(const char *dir, char *tried, size_t tried_len)
{
    char path[PATH_MAX];
    void *h;
    size_t used = strlen(tried);

    if (snprintf(path, sizeof path, "%s/%s", dir, PLUGIN_NAME) >= (int)sizeof path)
        return NULL;
    h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h) {
        fed_log(FED_LOG_DEBUG, "backend: loaded %s", path);
        return h;
    }
    fed_log(FED_LOG_DEBUG, "backend: %s: %s", path, dlerror());
    if (used + 1 < tried_len &&
        snprintf(tried + used, tried_len - used, "%s%s", used ? ", " : "", path) < 0)
        tried[used] = '\0';
    return NULL;
}

/* The plugin from the first of: the executable's folder (and its build/
 * folder, for a source tree), $FEDNODE_PLUGIN_DIR, ../lib/fednode from the
 * executable's folder (an installed tree, wherever it was moved or staged),
 * PREFIX/lib/fednode. */
static void *find_plugin(char *tried, size_t tried_len)
{
    char exe[PATH_MAX], dir[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    const char *env = getenv("FEDNODE_PLUGIN_DIR");
    int have_exe = 0;
    void *h = NULL;

    tried[0] = '\0';
    if (len > 0) {
        char *slash;

        exe[len] = '\0';
        slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            have_exe = 1;
            h = try_dlopen(exe, tried, tried_len);
            if (!h && snprintf(dir, sizeof dir, "%s/build", exe) < (int)sizeof dir)
                h = try_dlopen(dir, tried, tried_len);
        }
    }
    if (!h && env && *env)
        h = try_dlopen(env, tried, tried_len);
    if (!h && have_exe && snprintf(dir, sizeof dir, "%s/../lib/fednode", exe) < (int)sizeof dir)
        h = try_dlopen(dir, tried, tried_len);
    if (!h)
        h = try_dlopen(FED_PREFIX "/lib/fednode", tried, tried_len);
    return h;
}

static fed_err open_cuda(int index, fed_backend **out)
{
    char tried[1024];
    void *h = find_plugin(tried, sizeof tried);
    fed_cuda_backend_new_fn entry;
    fed_err err;

    if (!h) {
        fed_log(FED_LOG_INFO, "backend: no CUDA plugin (tried %s)", tried);
        return FED_ERR_NODEVICE;
    }
    *(void **)&entry = dlsym(h, FED_CUDA_ENTRY);
    if (!entry) {
        fed_log(FED_LOG_WARN, "backend: %s lacks %s", PLUGIN_NAME, FED_CUDA_ENTRY);
        return FED_ERR_NODEVICE;
    }
    err = entry(index, out);
    if (err != FED_OK) {
        fed_log(FED_LOG_INFO, "backend: CUDA device %d unavailable: %s", index,
                fed_strerror(err));
        return err;
    }
    if ((*out)->abi != FED_BACKEND_ABI) {
        fed_log(FED_LOG_WARN, "backend: plugin ABI %d, expected %d", (*out)->abi,
                FED_BACKEND_ABI);
        fed_backend_free(*out);
        *out = NULL;
        return FED_ERR_VERSION;
    }
    return FED_OK;
}

fed_err fed_backend_open(const char *device, fed_backend **out)
{
    int cuda, index;
    fed_err err;

    *out = NULL;
    err = parse_device(device, &cuda, &index);
    if (err != FED_OK) {
        fed_log(FED_LOG_ERROR, "backend: unknown device '%s' (auto, cpu, cuda, cuda:N)",
                device);
        return err;
    }
    if (cuda != 0) {
        err = open_cuda(index, out);
        if (err == FED_OK) {
            fed_log(FED_LOG_INFO, "backend: cuda:%d (%s)", index, (*out)->device);
            return FED_OK;
        }
        if (cuda == 1)
            return err;
    }
    err = fed_backend_cpu_new(1, out);
    if (err == FED_OK)
        fed_log(FED_LOG_INFO, "backend: %s", (*out)->device);
    return err;
}

void fed_backend_free(fed_backend *be)
{
    if (be && be->destroy)
        be->destroy(be);
}
