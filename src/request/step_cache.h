/* A step cache's configuration (docs/CACHING.md; fewstep.md §11): the
 * method, its threshold and guards, the published presets, and the one
 * parser of its text, which `mmh3 generate --cache`, the API's cache field
 * (mm_request_settle) and a stored job read back all go through. The
 * decision rule that applies it is model/dit/step_cache.h's. Plain data, no
 * allocation. */
#ifndef MMH3_REQUEST_STEP_CACHE_H
#define MMH3_REQUEST_STEP_CACHE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

typedef enum mm_step_cache_kind {
    MM_STEP_CACHE_OFF = 0, /* a zeroed configuration is "off" */
    MM_STEP_CACHE_FBC,
    MM_STEP_CACHE_TEACACHE,
} mm_step_cache_kind;

#define MM_STEP_CACHE_MAX_COEFFS 5
/* Forwards one request may run and have recorded (the request rules allow 199). */
#define MM_STEP_CACHE_MAX_FORWARDS 256

typedef struct mm_step_cache_config {
    mm_step_cache_kind kind;
    char preset[16];  /* "high", "medium", "low", "sana", "vllm", "rtx4090"; "" when a threshold was given */
    double threshold; /* FBC: on rel; TeaCache: on the accumulator. >= 0, 0 never skips */
    int warmup;       /* the first `warmup` forwards always compute */
    int final;        /* so do the last `final` */
    int max_cached;   /* at most this many skipped forwards in a row; 0 = no limit */
    int n_coeffs;     /* TeaCache: the rescaling polynomial, highest degree first */
    double coeffs[MM_STEP_CACHE_MAX_COEFFS];
} mm_step_cache_config;

#define MM_ACCEPT_CACHE                                                                                             \
    "off, fbc[:high|medium|low|sana|THRESHOLD] or teacache[:vllm|rtx4090|THRESHOLD] (THRESHOLD a number >= 0; 0 " \
    "never skips), optionally followed by ,warmup=N ,final=N ,max-cached=N (N >= 0; max-cached=0 means no limit)"

/* "fbc:medium,warmup=6" → a checked configuration. err has the problem
 * only; callers add MM_ACCEPT_CACHE. */
int mm_step_cache_parse(const char *spec, mm_step_cache_config *out, mm_error *err);
/* A configuration filled in by code rather than parsed: the same checks,
 * plus the partition's (TeaCache's only calibration is the FL2VA model's). */
int mm_step_cache_check(const mm_step_cache_config *c, bool ref2va, mm_error *err);
/* "fbc high (threshold 0.04, warm-up 4, final 0, at most 1 skipped in a row)" or "off". */
void mm_step_cache_describe(const mm_step_cache_config *c, char *buf, size_t n);
/* Short form for tables and logs: "fbc:high", "teacache:0.2", "off". */
void mm_step_cache_name(const mm_step_cache_config *c, char *buf, size_t n);

#endif
