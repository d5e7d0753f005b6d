/* Stage timing of one DiT block for the benchmarks (mm_dit_profile marks →
 * device events): shared by mmh3-bench-dit and mmh3-bench-sp. */
#ifndef MMH3_BENCH_STAGE_TIMER_H
#define MMH3_BENCH_STAGE_TIMER_H

#include "backend/cuda/cuda_backend.h"

#define BENCH_MAX_STAGES 48

typedef struct bench_stage_timer {
    int dev, n;
    const char *name[BENCH_MAX_STAGES];
    mm_cuda_event *ev[BENCH_MAX_STAGES];
} bench_stage_timer;

/* Records an event named `stage` (NULL: the end of the block). */
void bench_stage_record(bench_stage_timer *t, const char *stage);
/* ms[i] = time from mark i to mark i + 1 (0 where unknown); returns their sum. */
double bench_stage_times(const bench_stage_timer *t, double ms[BENCH_MAX_STAGES]);
/* "BREAKDOWN <label> total_ms=… <stage>=<ms> …" on one line, stage names
 * with every character other than a letter or digit made '_'. */
void bench_stage_print_line(const bench_stage_timer *t, const double *ms, double total, const char *label);
void bench_stage_timer_free(bench_stage_timer *t);

#endif
