/* What `mmh3 generate` shows while it works: a bar per stage on a terminal
 * (the denoise bar counts forwards and shows s/step, the ETA, memory and,
 * where NVML is available, GPU temperature and utilisation), plain
 * timestamped lines otherwise (logs, CI), nothing with --quiet. */
#ifndef MMH3_CLI_GENERATE_PROGRESS_H
#define MMH3_CLI_GENERATE_PROGRESS_H

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>

#include "core/tensor.h"
#include "engine/engine.h"

/* GPU figures through NVML (libnvidia-ml.so.1 opened at run time; absent →
 * -1 and nothing shown). */
typedef struct mm_gpu_stats {
    unsigned temperature_c;
    unsigned utilization_pct;
    unsigned long long memory_used, memory_total;
} mm_gpu_stats;

int mm_gpu_stats_get(int index, mm_gpu_stats *out);

typedef enum mm_progress_mode { MM_PROGRESS_QUIET, MM_PROGRESS_PLAIN, MM_PROGRESS_BARS } mm_progress_mode;

typedef struct mm_progress_view {
    mm_progress_mode mode;
    FILE *out;
    mm_device gpu;       /* the DiT's device, for the memory / NVML figures */
    double t0;           /* command start (mm_timing_now) */
    mm_stage stage;
    double stage_t0, last_draw, last_step_t;
    int step, total;
    int sub_done, sub_total;
    bool line_open;      /* a bar is drawn and not yet ended with a newline */
    /* bars: a ticker redraws the current bar every 250 ms, so a long stage
     * without steps (loading, a VAE decode) still shows its time running */
    pthread_mutex_t lock;
    pthread_t ticker;
    bool ticking, stop;
} mm_progress_view;

void mm_progress_view_init(mm_progress_view *v, mm_progress_mode mode, FILE *out, mm_device gpu, double t0);
/* The engine's callbacks (user = the view). */
void mm_progress_view_update(void *user, const mm_progress *p);
void mm_progress_view_stage(void *user, mm_stage stage, int done, int total);
/* Ends the current bar and the ticker; then a line of text may follow. */
void mm_progress_view_finish(mm_progress_view *v);
/* A message line (engine log, warnings) that does not tear a bar. */
void mm_progress_view_line(mm_progress_view *v, const char *line);

#endif
