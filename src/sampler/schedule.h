/* Denoising schedules as data (fewstep.md §1 conclusion 2): a schedule is the
 * list of (σ_video, σ_audio) points, the terminal 0 included, plus per-step
 * extras; the deterministic Euler loop (flow_sampler.h) runs any of them.
 *
 * Where a schedule comes from, first match wins:
 *   1. a custom list: "v0,v1,...,0" or "v0,...,0;a0,...,0" (mm_schedule_parse):
 *      strictly decreasing, in [0, 1], ending at 0; without the audio list the
 *      audio points are the video ones remapped from the video shift to the
 *      audio shift (dit.md §6.1: b = σ/(s_v + σ(1 − s_v)), σ_a = s_a·b/(1 + (s_a − 1)·b));
 *   2. a preset by name (mm_schedule_preset, table in schedule.c and
 *      docs/PIPELINE.md): turbo4, turbo4-768p, turbo8, turbo8-768p, larry4,
 *      larry6, larry8, pdd8, pdd4, hyperflow8, fasth3-4, fasth3-8, flashgen4;
 *   3. what an adapter file says (mm_schedule_from_adapter): the LightX2V
 *      file-name contract, PDD's pdd_num_steps / pdd_block_size, HyperFlow's
 *      hyperflow_sigmas, FlashGen's base_schedule;
 *   4. the release's grid for `steps` points (mm_schedule_default): exactly
 *      mm_sigma_schedule_build, the path the conformance kit pins.
 *
 * Preset σ are computed in double from the family's base grid (or t-list)
 * and shift, then stored as f32; model times are t = 1 − σ in f32, as on the
 * default path. Per-step extras: PDD's output-head bank weights (per coarse
 * step and modality, the interval-weighted mean of fewstep.md §5.2,
 * generalised to any σ list by overlap) and HyperFlow's endpoint time
 * r = 1 − σ_{i+1} (§7.2).
 */
#ifndef MMH3_SAMPLER_SCHEDULE_H
#define MMH3_SAMPLER_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "sampler/sigmas.h"

#define MM_SCHEDULE_MAX_POINTS 201 /* 200 forwards: the step rule's ceiling + the terminal 0 */
#define MM_SCHEDULE_MAX_BANK 256   /* PDD fine steps (the published files have 32) */

enum { MM_SCHED_VIDEO = 0, MM_SCHED_AUDIO = 1 };

typedef struct mm_schedule {
    char name[32];         /* preset name, "custom" or "default" */
    char origin[192];      /* what chose it, for logs: "--sampler turbo8", "adapter x.safetensors: pdd_num_steps" */
    mm_sigma_schedule video, audio; /* same number of points; sigmas end at 0 */
    /* PDD (bank_heads > 0): bank_weights[m][step * bank_heads + l] = weight
     * of bank head l at forward `step` for modality m; each step's weights
     * sum to 1. */
    int bank_heads;
    float *bank_weights[2];
    /* HyperFlow (has_endpoint): endpoint[m][step] = 1 − σ_m[step + 1]. */
    bool has_endpoint;
    float *endpoint[2];
} mm_schedule;

static inline int mm_schedule_forwards(const mm_schedule *s) { return s->video.points - 1; }

/* The release grid: `steps` points, consecutive duplicates collapsed in each
 * stream (the video and audio grids must keep the same count). */
int mm_schedule_default(int steps, float video_shift, float audio_shift, mm_schedule *out, mm_error *err);
/* A preset by name (case-sensitive); an unknown name lists the known ones. */
int mm_schedule_preset(const char *name, mm_schedule *out, mm_error *err);
/* A custom list (syntax above); the shifts are the model's (12 / 3) for the remap. */
int mm_schedule_parse(const char *text, float video_shift, float audio_shift, mm_schedule *out, mm_error *err);

/* Adapter metadata, looked up by key (NULL when absent). */
typedef const char *(*mm_schedule_meta_fn)(void *user, const char *key);
/* What an adapter says about its sampler: *found = false (and 0) when it says
 * nothing; -1 when it says something malformed (err names the key and value).
 * file_name: the adapter's base name (the LightX2V files carry the contract there). */
int mm_schedule_from_adapter(const char *file_name, mm_schedule_meta_fn meta, void *user, mm_schedule *out,
                             bool *found, mm_error *err);

/* PDD bank weights for s's σ lists against a fine grid of fine_steps
 * intervals (σ_n = shift(1 − n/fine_steps) per modality): the weight of fine
 * interval l at coarse step j is its overlap with [σ_{j+1}, σ_j] over the
 * step's length. Replaces any weights s had. */
int mm_schedule_set_pdd_bank(mm_schedule *s, int fine_steps, double video_shift, double audio_shift, mm_error *err);

/* What a request asks for, in the order above: a custom list (sigmas, or
 * NULL), else a preset (sampler, or NULL; "default" names the release grid),
 * else the release grid for `steps` points. Adapters are consulted by the
 * caller between the preset and the default (mm_schedule_from_adapter). */
int mm_schedule_resolve(const char *sigmas, const char *sampler, int steps, float video_shift, float audio_shift,
                        mm_schedule *out, mm_error *err);

void mm_schedule_free(mm_schedule *s);

/* Preset i (0-based) for listings: its name and one line about it; NULL past the end. */
const char *mm_schedule_preset_at(size_t i, const char **about);
/* "turbo4, turbo4-768p, ..." for messages. */
const char *mm_schedule_preset_names(void);

/* One place for the shift formula σ = s·b / (1 + (s − 1)·b), in double. */
double mm_shift_sigma(double b, double shift);

#endif
