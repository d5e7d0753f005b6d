#include "backend/cpu/threadpool.h"

#include "backend/cpu/cpu_util.h"
#include "core/dtype.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

struct mm_threadpool {
    int n_threads;
    pthread_t *workers;
    pthread_mutex_t job_lock; /* one job at a time */
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    uint64_t generation; /* bumped per job */
    bool quit;
    /* the current job */
    void (*fn)(void *, int64_t, int64_t);
    void *user;
    int64_t n, chunk;
    _Atomic int64_t next;
    int active; /* workers still inside the job */
};

static _Thread_local int tl_index;
static _Thread_local bool tl_in_job;

int mm_threadpool_thread_index(void) { return tl_index; }

/* The CPU backend's conversion tables live here because every CPU context
 * starts a pool first: mm_threadpool_create() builds them once. */
float mm_cpu_f16_table[65536];
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;
static void tables_build(void)
{
    for (uint32_t i = 0; i < 65536; i++)
        mm_cpu_f16_table[i] = mm_f16_to_f32((uint16_t)i);
}
void mm_cpu_tables_init(void) { pthread_once(&tables_once, tables_build); }

static void work(mm_threadpool *p)
{
    for (;;) {
        int64_t b = atomic_fetch_add(&p->next, p->chunk);
        if (b >= p->n)
            break;
        int64_t e = b + p->chunk < p->n ? b + p->chunk : p->n;
        p->fn(p->user, b, e);
    }
}

struct worker_arg {
    mm_threadpool *p;
    int index;
};

static void *worker_main(void *arg)
{
    struct worker_arg a = *(struct worker_arg *)arg;
    free(arg);
    mm_threadpool *p = a.p;
    tl_index = a.index;
    tl_in_job = true; /* loops started from a worker run inline */
    uint64_t seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (!p->quit && p->generation == seen)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->quit)
            break;
        seen = p->generation;
        pthread_mutex_unlock(&p->lock);
        work(p);
        pthread_mutex_lock(&p->lock);
        if (--p->active == 0)
            pthread_cond_signal(&p->done);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

int mm_threadpool_create(mm_threadpool **out, int n_threads, mm_error *err)
{
    *out = NULL;
    mm_cpu_tables_init();
    if (n_threads < 1)
        n_threads = 1;
    mm_threadpool *p = calloc(1, sizeof *p);
    if (!p)
        return mm_fail(err, "out of memory");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->job_lock, NULL);
    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->done, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        free(p);
        return mm_fail(err, "out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *a = malloc(sizeof *a);
        if (a) {
            a->p = p;
            a->index = i;
        }
        if (!a || pthread_create(&p->workers[i], NULL, worker_main, a) != 0) {
            free(a);
            p->n_threads = i;
            mm_threadpool_destroy(p);
            return mm_fail(err, "cannot start CPU worker thread %d of %d", i, n_threads);
        }
    }
    *out = p;
    return 0;
}

void mm_threadpool_destroy(mm_threadpool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->lock);
    p->quit = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 1; i < p->n_threads; i++)
        pthread_join(p->workers[i], NULL);
    free(p->workers);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->done);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->job_lock);
    free(p);
}

int mm_threadpool_size(const mm_threadpool *p) { return p ? p->n_threads : 1; }

void mm_threadpool_run(mm_threadpool *p, int64_t n, int64_t grain, void (*fn)(void *user, int64_t begin, int64_t end),
                       void *user)
{
    if (n <= 0)
        return;
    if (grain < 1)
        grain = 1;
    if (!p || p->n_threads == 1 || tl_in_job || n <= grain) {
        fn(user, 0, n);
        return;
    }
    /* About 4 chunks per thread, never below the grain. */
    int64_t chunk = n / ((int64_t)p->n_threads * 4);
    if (chunk < grain)
        chunk = grain;
    pthread_mutex_lock(&p->job_lock);
    pthread_mutex_lock(&p->lock);
    p->fn = fn;
    p->user = user;
    p->n = n;
    p->chunk = chunk;
    atomic_store(&p->next, 0);
    p->active = p->n_threads - 1;
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);

    tl_in_job = true;
    work(p);
    tl_in_job = false;

    pthread_mutex_lock(&p->lock);
    while (p->active > 0)
        pthread_cond_wait(&p->done, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->job_lock);
}
