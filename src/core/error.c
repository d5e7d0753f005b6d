#include "core/error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int mm_fail(mm_error *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    return -1;
}

int mm_error_prefix(mm_error *err, const char *fmt, ...)
{
    if (!err)
        return -1;
    char prefix[MM_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    /* Shift the old message right to make room; the tail is cut when full. */
    size_t plen = strlen(prefix), mlen = strlen(err->msg);
    if (plen + 2 >= MM_ERROR_MAX)
        plen = MM_ERROR_MAX - 3;
    if (plen + 2 + mlen >= MM_ERROR_MAX)
        mlen = MM_ERROR_MAX - 1 - plen - 2;
    memmove(err->msg + plen + 2, err->msg, mlen);
    memcpy(err->msg, prefix, plen);
    memcpy(err->msg + plen, ": ", 2);
    err->msg[plen + 2 + mlen] = '\0';
    return -1;
}

int mm_vfail_cause(mm_error *err, const char *cause, const char *fmt, va_list ap)
{
    if (!err)
        return -1;
    char what[MM_ERROR_MAX / 2];
    vsnprintf(what, sizeof what, fmt, ap);
    snprintf(err->msg, sizeof err->msg, "%s: %s", what, cause);
    return -1;
}

int mm_fail_errno(mm_error *err, const char *fmt, ...)
{
    const char *cause = strerror(errno);
    va_list ap;
    va_start(ap, fmt);
    mm_vfail_cause(err, cause, fmt, ap);
    va_end(ap);
    return -1;
}

void mm_error_clear(mm_error *err)
{
    if (err)
        err->msg[0] = '\0';
}
