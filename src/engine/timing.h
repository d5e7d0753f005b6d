/* Where the time of one generation went: named rows in four rollups that add
 * up to the wall clock, plus the figures derived from them (per-step time,
 * frames/s, realtime factor, megapixel-frames/s) and the peak memory of
 * every device used. The pipeline fills it, `mmh3 generate` prints it, the
 * worker stores the per-stage part.
 *
 *   loading    checkpoint resolution and weights to their devices
 *   inference  the models: prompt encode, reference encodes, denoising, decodes
 *   encode     H.264/AAC muxing and the optional PNG dump
 *   overhead   the rest of the wall clock (reading inputs, setup, transfers)
 *
 * Plain data (fixed arrays, no allocation), so it travels inside
 * mm_gen_result by value.
 */
#ifndef MMH3_ENGINE_TIMING_H
#define MMH3_ENGINE_TIMING_H

#include <stddef.h>

#include "model/dit/step_cache.h"

typedef enum mm_timing_group {
    MM_TG_LOADING = 0,
    MM_TG_INFERENCE,
    MM_TG_ENCODE,
    MM_TG_OVERHEAD,
    MM_TG_COUNT
} mm_timing_group;

#define MM_TIMING_ROWS 24
#define MM_TIMING_DEVICES 8
#define MM_TIMING_STEPS 256 /* forwards whose attention density is kept */

typedef struct mm_timing_row {
    char name[40];
    mm_timing_group group;
    double seconds;
} mm_timing_row;

typedef struct mm_timing_memory {
    char device[16]; /* "cuda:0", "cpu" */
    size_t peak;     /* bytes: the allocator's high-water mark (GPU), peak RSS (CPU) */
} mm_timing_memory;

typedef struct mm_timing {
    mm_timing_row rows[MM_TIMING_ROWS];
    int n_rows;
    double wall;      /* the whole run, start to finish (set by the caller that owns the clock) */
    int forwards;     /* DiT forwards run */
    mm_step_cache_summary step_cache; /* which of them skipped their blocks (policy "" = no step cache) */
    int frames, width, height;
    mm_timing_memory memory[MM_TIMING_DEVICES];
    int n_memory;
    /* Sparse attention: the share of block pairs each forward computed
     * exactly (1 for a dense forward); n_density 0 without sparse attention. */
    float density[MM_TIMING_STEPS];
    int n_density;
} mm_timing;

/* Monotonic seconds (core/clock.h's mm_clock_now, under the name the engine's
 * timing code reads). */
double mm_timing_now(void);
/* Adds seconds to the row `name` (created in first-use order). */
void mm_timing_add(mm_timing *t, mm_timing_group g, const char *name, double seconds);
/* Records the attention density of forward `step` (0-based). */
void mm_timing_density(mm_timing *t, int step, double density);
/* Records a device's peak (the larger of the old and new value is kept). */
void mm_timing_memory_peak(mm_timing *t, const char *device, size_t peak);
double mm_timing_group_total(const mm_timing *t, mm_timing_group g);
/* Seconds of wall clock no row accounts for (never negative). */
double mm_timing_unaccounted(const mm_timing *t);
/* Seconds in rows whose name starts with prefix (e.g. "denoise"). */
double mm_timing_sum(const mm_timing *t, const char *prefix);
/* A duration as the table prints it: "12.34s" under a minute, "Xm YY.Ys"
 * (the original project's form, "2m 05.3s") from a minute on. */
void mm_timing_duration(double seconds, char *buf, size_t n);
/* The table: rows under their rollup, each with its share of the wall clock,
 * the unaccounted rest as overhead, then the derived figures (the forwards
 * a step cache skipped among them) and memory. */
int mm_timing_format(const mm_timing *t, char *buf, size_t n);

#endif
