/* How the sequence-parallel DiT (parallel/sp_dit.h) spreads over devices:
 * the ranks and their devices, the exchange world, and two knobs for tests
 * and debugging. A plain struct the engine's options carry, so the commands
 * fill it once at start-up and nothing below reads the environment. */
#ifndef MMH3_PARALLEL_SP_OPTIONS_H
#define MMH3_PARALLEL_SP_OPTIONS_H

#include <stdbool.h>

#include "backend/device.h"
#include "core/error.h"

typedef struct mm_sp_options {
    int ranks;                /* N >= 1 */
    const mm_device *devices; /* [N], or NULL: rank r on cuda:(d0 + r) for ctx0 on cuda:d0; CPU ctx0: all CPU */
    int world;                /* -1 = auto (NCCL for distinct GPUs when it loads, else the host world), or an
                                 mm_world_kind, which must then work */
    int cpu_threads;          /* CPU ranks: workers each (0 = $MMH3_THREADS or cores / N, at least 1) */
    double abort_seconds;     /* after a rank fails, its peers still waiting in an exchange are aborted this
                                 long after (0 = 60) */
    bool exchange_self;       /* N = 1 still packs, exchanges with itself and unpacks (parallel/ulysses.h),
                                 so one GPU checks that path */
} mm_sp_options;

void mm_sp_options_defaults(mm_sp_options *o);

/* The documented debugging variables, for a command's start-up:
 * MMH3_SP_WORLD=host|nccl (forces o->world), MMH3_SP_ABORT_SECONDS (> 0),
 * MMH3_SP_EXCHANGE_SELF=1. Unset or empty leaves a field as it is; any
 * other value fails with what is accepted. */
int mm_sp_options_from_env(mm_sp_options *o, mm_error *err);

#endif
