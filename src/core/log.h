/* One-line log messages on stderr, "2026-11-29 13:58:01 worker: text", for
 * the serving processes (systemd's journal and `mmh3 serve` collect them). */
#ifndef MMH3_CORE_LOG_H
#define MMH3_CORE_LOG_H

#include "core/error.h"

void mm_log_init(const char *who); /* the process's name in every line */
void mm_log(const char *fmt, ...) MM_PRINTF(1, 2);

/* The engine's event sink (options' log + log_user): formats one line and
 * hands it over; nothing when sink is NULL. */
typedef void (*mm_log_sink)(void *user, const char *line);
void mm_log_to(mm_log_sink sink, void *user, const char *fmt, ...) MM_PRINTF(3, 4);

#endif
