#include "core/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static char log_who[32] = "mmh3";

void mm_log_init(const char *who)
{
    snprintf(log_who, sizeof log_who, "%s", who);
}

void mm_log(const char *fmt, ...)
{
    /* One fprintf per line so lines from threads do not interleave. */
    char msg[2048], stamp[32];
    time_t t = time(NULL);
    struct tm tm;
    localtime_r(&t, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s %s: %s\n", stamp, log_who, msg);
}

void mm_log_to(mm_log_sink sink, void *user, const char *fmt, ...)
{
    if (!sink)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    sink(user, line);
}
