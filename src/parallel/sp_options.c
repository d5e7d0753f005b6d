#include "parallel/sp_options.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/comm.h"

void mm_sp_options_defaults(mm_sp_options *o)
{
    memset(o, 0, sizeof *o);
    o->ranks = 1;
    o->world = -1;
}

static const char *env_value(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

int mm_sp_options_from_env(mm_sp_options *o, mm_error *err)
{
    const char *v;
    if ((v = env_value("MMH3_SP_WORLD"))) {
        if (strcmp(v, "host") == 0)
            o->world = MM_WORLD_HOST;
        else if (strcmp(v, "nccl") == 0)
            o->world = MM_WORLD_NCCL;
        else
            return mm_fail(err, "MMH3_SP_WORLD=%s (environment): accepted: host, nccl, or unset", v);
    }
    if ((v = env_value("MMH3_SP_ABORT_SECONDS"))) {
        char *end;
        double s = strtod(v, &end);
        if (*end || !isfinite(s) || s <= 0)
            return mm_fail(err, "MMH3_SP_ABORT_SECONDS=%s (environment): accepted: a number of seconds > 0, or unset",
                           v);
        o->abort_seconds = s;
    }
    if ((v = env_value("MMH3_SP_EXCHANGE_SELF"))) {
        if (strcmp(v, "1") != 0 && strcmp(v, "0") != 0)
            return mm_fail(err, "MMH3_SP_EXCHANGE_SELF=%s (environment): accepted: 1, 0, or unset", v);
        o->exchange_self = strcmp(v, "1") == 0;
    }
    return 0;
}
