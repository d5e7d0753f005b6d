#include "stage_timer.h"

#include <ctype.h>
#include <stdio.h>

void bench_stage_record(bench_stage_timer *t, const char *stage)
{
    if (t->n >= BENCH_MAX_STAGES)
        return;
    if (!t->ev[t->n])
        t->ev[t->n] = mm_cuda_event_create(t->dev, NULL);
    if (t->ev[t->n])
        mm_cuda_event_record(t->ev[t->n], NULL);
    t->name[t->n++] = stage ? stage : "(end)";
}

double bench_stage_times(const bench_stage_timer *t, double ms[BENCH_MAX_STAGES])
{
    double total = 0;
    for (int i = 0; i < BENCH_MAX_STAGES; i++)
        ms[i] = 0;
    for (int i = 0; i + 1 < t->n; i++) {
        float m = 0;
        if (t->ev[i] && t->ev[i + 1] && mm_cuda_event_elapsed_ms(t->ev[i], t->ev[i + 1], &m, NULL) == 0)
            ms[i] = m;
        total += ms[i];
    }
    return total;
}

void bench_stage_print_line(const bench_stage_timer *t, const double *ms, double total, const char *label)
{
    printf("BREAKDOWN %s total_ms=%.3f", label, total);
    for (int i = 0; i + 1 < t->n; i++) {
        char key[64];
        int k = 0;
        for (const char *c = t->name[i]; *c && k < 63; c++)
            key[k++] = isalnum((unsigned char)*c) ? *c : '_';
        key[k] = 0;
        printf(" %s=%.3f", key, ms[i]);
    }
    printf("\n");
}

void bench_stage_timer_free(bench_stage_timer *t)
{
    for (int i = 0; i < BENCH_MAX_STAGES; i++)
        mm_cuda_event_destroy(t->ev[i]);
}
