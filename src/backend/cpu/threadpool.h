/* A fixed pool of worker threads for the CPU backend's parallel loops.
 *
 * One job at a time per pool (callers from several host threads queue on a
 * mutex); the calling thread works too. Work is handed out in chunks from an
 * atomic counter, so uneven chunks balance themselves. A parallel loop started
 * from inside a worker runs inline on that worker (no nested parallelism). */
#ifndef MMH3_BACKEND_CPU_THREADPOOL_H
#define MMH3_BACKEND_CPU_THREADPOOL_H

#include <stdint.h>

#include "core/error.h"

typedef struct mm_threadpool mm_threadpool;

/* n_threads counts the caller: n_threads - 1 workers are started. */
int mm_threadpool_create(mm_threadpool **out, int n_threads, mm_error *err);
void mm_threadpool_destroy(mm_threadpool *p);
int mm_threadpool_size(const mm_threadpool *p);
void mm_threadpool_run(mm_threadpool *p, int64_t n, int64_t grain, void (*fn)(void *user, int64_t begin, int64_t end),
                       void *user);
/* Index of the calling thread within its pool (0 = the caller, 1.. workers),
 * for per-thread scratch. */
int mm_threadpool_thread_index(void);

#endif
