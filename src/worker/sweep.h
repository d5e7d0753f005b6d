/* The start-up sweeps of files a killed worker left (attempt files, live
 * previews): one directory walk, the caller's rule for which names to drop. */
#ifndef MMH3_WORKER_SWEEP_H
#define MMH3_WORKER_SWEEP_H

#include <stdbool.h>

/* true: `name` (an entry of the directory) is a leftover to remove. */
typedef bool (*mm_sweep_stale)(void *user, const char *name);

/* Removes every entry of dir the rule calls stale; the number removed (0 when
 * dir cannot be read). */
int mm_worker_sweep_dir(const char *dir, mm_sweep_stale stale, void *user);

#endif
