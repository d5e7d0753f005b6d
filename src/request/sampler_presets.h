/* The few-step sampler presets (fewstep.md; docs/PIPELINE.md) as data:
 * each family's base grid (or t-list), shifts and per-step extras. The one
 * table behind `mmh3 generate --sampler`, the API's sampler field
 * (mm_request_settle: a name is checked and the forwards known where the
 * engine is not linked) and the schedules the sampler builds from it
 * (sampler/schedule.h: mm_schedule_preset). */
#ifndef MMH3_REQUEST_SAMPLER_PRESETS_H
#define MMH3_REQUEST_SAMPLER_PRESETS_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

typedef enum mm_sampler_grid {
    MM_GRID_LINSPACE, /* b = linspace(1, 0, forwards + 1) */
    MM_GRID_BASE,     /* b = the listed base grid (0 included) */
    MM_GRID_TLIST,    /* b = t / 1000 for the listed noise timesteps, then the terminal 0 */
} mm_sampler_grid;

typedef struct mm_sampler_preset {
    const char *name, *about;
    mm_sampler_grid kind;
    int forwards;          /* MM_GRID_LINSPACE */
    const double *values;  /* MM_GRID_BASE / MM_GRID_TLIST */
    int n_values;
    double video_shift, audio_shift;
    int pdd_fine;          /* > 0: PDD bank over this many fine steps */
    bool endpoint;         /* HyperFlow's endpoint time */
} mm_sampler_preset;

/* Preset i (0-based) for listings; NULL past the end. */
const mm_sampler_preset *mm_sampler_preset_at(size_t i);
/* "turbo4, turbo4-768p, ..." into buf. */
void mm_sampler_preset_names(char *buf, size_t n);
/* A preset by name (case-sensitive); an unknown name: -1, the message lists the known ones. */
int mm_sampler_preset_find(const char *name, const mm_sampler_preset **out, mm_error *err);
/* The DiT forwards the preset runs (its points less the terminal 0). */
int mm_sampler_preset_forwards(const mm_sampler_preset *p);

#endif
