/* err.c - messages and names for fed_err, generated from FED_ERR_LIST, and
 * fed_err_why for refusals that explain themselves. Owns nothing. */
#include "core/err.h"

#include <stdarg.h>
#include <stdio.h>

static const char *const fed_err_msgs[] = {
#define FED_ERR_MSG_(name, msg) msg,
    FED_ERR_LIST(FED_ERR_MSG_)
#undef FED_ERR_MSG_
};

static const char *const fed_err_names[] = {
#define FED_ERR_NAME_(name, msg) #name,
    FED_ERR_LIST(FED_ERR_NAME_)
#undef FED_ERR_NAME_
};

const char *fed_strerror(int e)
{
    if (e < 0 || e >= FED_ERR_COUNT_)
        return "unknown error";
    return fed_err_msgs[e];
}

const char *fed_errname(int e)
{
    if (e < 0 || e >= FED_ERR_COUNT_)
        return "FED_ERR_UNKNOWN";
    return fed_err_names[e];
}

fed_err fed_err_why(char *why, size_t cap, fed_err err, const char *fmt, ...)
{
    va_list ap;

    if (why && cap) {
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return err;
}
