/* Training-free step caching for the DiT (fewstep.md §11; docs/CACHING.md):
 * on some forwards the main blocks do not run and a residual cached at the
 * last computed forward stands in for them.
 *
 *   FirstBlockCache ("fbc", F1B0): block 0 always runs. Its residual
 *     R = h1 − h_in is compared with R of the last computed forward,
 *     rel = Σ|R − R_ref| / Σ|R_ref| over every row of the packed sequence
 *     (text, audio and video alike). rel < threshold skips blocks 1..L−1:
 *     h_out = h1 + D, with D = h_out − h1 of the last computed forward. R_ref
 *     and D change on computed forwards only (diffusers' FirstBlockCache,
 *     Cache-DiT's DBCache).
 *   TeaCache ("teacache"): the probe is block 0's modulated input
 *     P = RMSNorm1(h_in)·(1 + scale_msa) + shift_msa. Every forward adds
 *     |poly(rel)| (rel of P against the previous forward's P, polynomial
 *     coefficients highest degree first) to an accumulator; while it stays
 *     below the threshold no block runs: h_out = h_in + D, with D = h_out − h_in
 *     of the last computed forward; a computed forward resets it to 0.
 *
 * Both always compute the first `warmup` and the last `final` forwards of a
 * request, and skip at most `max_cached` forwards in a row (0: no limit). A
 * threshold of 0 never skips. Under sequence parallelism the sums are
 * all-reduced before the decision (src/parallel/sp_dit.c), so every rank
 * takes the same one: ranks that disagreed would leave the others waiting
 * in the attention exchange.
 *
 * This header is the policy: the decision rule on the global sums and the
 * per-request record of what was skipped; the configuration, its presets
 * and its parser are request/step_cache.h's (a request's field like any
 * other, settled where the API, which links nothing of the engine, can). The tensors live in the DiT request (dit.h,
 * mm_dit_request_set_step_cache). Plain data throughout, no allocation.
 */
#ifndef MMH3_MODEL_DIT_STEP_CACHE_H
#define MMH3_MODEL_DIT_STEP_CACHE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "request/step_cache.h" /* the configuration, its presets and parser */

/* Row segments the sums are kept for: the modality tags (0 video, 1 text, 2 audio). */
#define MM_STEP_CACHE_SEGMENTS 3

/* One forward's sums, per segment, over every row of the sequence (all
 * ranks): diff = Σ|cur − ref| (meaningless without a reference), norm = Σ|cur|. */
typedef struct mm_step_cache_sums {
    double diff[MM_STEP_CACHE_SEGMENTS];
    double norm[MM_STEP_CACHE_SEGMENTS];
} mm_step_cache_sums;

/* The decision state of one request. */
typedef struct mm_step_cache_state {
    mm_step_cache_config cfg;
    int forwards;     /* the request's forward count (for `final`); 0 = unknown */
    bool have_ref;    /* a reference to compare with (FBC: a computed forward's R; TeaCache: the last P) */
    bool have_cached; /* a residual D to stand in */
    double ref_norm[MM_STEP_CACHE_SEGMENTS];
    double acc;
    int in_a_row; /* skipped forwards since the last computed one */
} mm_step_cache_state;

typedef struct mm_step_decision {
    bool skip;
    bool keep_as_ref;   /* the forward's tensor becomes the reference (cur ↔ ref) */
    bool forced;        /* computed by a guard (warm-up, final, no reference yet) */
    double rel;         /* Σdiff / Σref_norm over all rows; NAN without a reference */
    double rel_audio;   /* the same over the audio rows; NAN without audio rows */
    double acc;         /* TeaCache: the accumulator the threshold saw (0 on forced forwards) */
} mm_step_decision;

void mm_step_cache_state_init(mm_step_cache_state *s, const mm_step_cache_config *c, int forwards);
/* The decision for forward `step` (0-based) from its global sums, and the
 * state update that goes with it: the caller skips or computes as told,
 * caches D when it computes and swaps in the new reference when told. */
mm_step_decision mm_step_cache_decide(mm_step_cache_state *s, int step, const mm_step_cache_sums *sums);

/* What one request skipped (forwards numbered from 0). */
typedef struct mm_step_cache_report {
    int decided; /* forwards that went through the cache */
    int skipped;
    unsigned char skipped_bits[MM_STEP_CACHE_MAX_FORWARDS / 8];
    float rel[MM_STEP_CACHE_MAX_FORWARDS];       /* NAN where nothing was compared */
    float rel_audio[MM_STEP_CACHE_MAX_FORWARDS]; /* NAN where nothing was compared */
} mm_step_cache_report;

void mm_step_cache_report_init(mm_step_cache_report *r);
void mm_step_cache_report_add(mm_step_cache_report *r, int step, const mm_step_decision *d);
/* Adds what src recorded (forwards run on another request of the same job). */
void mm_step_cache_report_merge(mm_step_cache_report *dst, const mm_step_cache_report *src);
bool mm_step_cache_skipped(const unsigned char *bits, int step);

/* What a job's result carries (the timing table, the worker's store). */
typedef struct mm_step_cache_summary {
    char policy[40]; /* mm_step_cache_name; "" = no step cache */
    int forwards;    /* decided */
    int skipped;
    unsigned char skipped_bits[MM_STEP_CACHE_MAX_FORWARDS / 8]; /* bit i: forward i (0-based) skipped */
} mm_step_cache_summary;

void mm_step_cache_summarize(const mm_step_cache_config *c, const mm_step_cache_report *r,
                             mm_step_cache_summary *out);
/* The skipped forwards as 1-based ranges, "5-7, 9, 11-13" ("none" when none). */
void mm_step_cache_format_skipped(const unsigned char *bits, int forwards, char *buf, size_t n);

#endif
