/* The sampler presets (sampler_presets.h): the table and its lookups. */
#include "request/sampler_presets.h"

#include <stdio.h>
#include <string.h>

/* fewstep.md §7.3 (HYF schedule.py), §8.1, §8.2, §9. */
static const double hyperflow_base[] = {1.0, 0.931506, 0.839236, 0.703462, 0.5, 0.296538, 0.160764, 0.068494, 0.0};
static const double fasth3_4_t[] = {999, 749, 500, 250};
static const double fasth3_8_t[] = {999, 874, 749, 624, 500, 375, 250, 125};
static const double flashgen_base[] = {1.0, 0.7, 0.4, 0.15, 0.0};

#define LIST(a) a, (int)(sizeof a / sizeof a[0])

static const mm_sampler_preset presets[] = {
    {"turbo4", "LightX2V Turbo 4-step (v0.1 fl2v, ref2v v0.1): 4 forwards, shift 12/3", MM_GRID_LINSPACE, 4, NULL, 0,
     12, 3, 0, false},
    {"turbo4-768p", "LightX2V Turbo 4-step 768p (v1.0, v1.1, v1.2): 4 forwards, shift 6/3", MM_GRID_LINSPACE, 4, NULL,
     0, 6, 3, 0, false},
    {"turbo8", "LightX2V Turbo 8-step (v1.0, 544p): 8 forwards, shift 12/3", MM_GRID_LINSPACE, 8, NULL, 0, 12, 3, 0,
     false},
    {"turbo8-768p", "LightX2V Turbo 8-step 768p (fl2v v1.0 768p, ref2v 8-step): 8 forwards, shift 6/3",
     MM_GRID_LINSPACE, 8, NULL, 0, 6, 3, 0, false},
    {"larry4", "Larry's Turbo at 4 forwards (audio weak at 4): shift 12/3", MM_GRID_LINSPACE, 4, NULL, 0, 12, 3, 0,
     false},
    {"larry6", "Larry's Turbo at 6 forwards: shift 12/3", MM_GRID_LINSPACE, 6, NULL, 0, 12, 3, 0, false},
    {"larry8", "Larry's Turbo at 8 forwards (recommended): shift 12/3", MM_GRID_LINSPACE, 8, NULL, 0, 12, 3, 0, false},
    {"pdd8", "PDD Acc8: 8 forwards, shift 12/3, output head blended from the 32-head bank per step", MM_GRID_LINSPACE,
     8, NULL, 0, 12, 3, 32, false},
    {"pdd4", "PDD Acc at 4 forwards (reported poor): shift 12/3, 8 bank heads per step", MM_GRID_LINSPACE, 4, NULL, 0,
     12, 3, 32, false},
    {"hyperflow8", "HyperFlow: 8 forwards on its own base grid, shift 12/3, endpoint time per step", MM_GRID_BASE, 0,
     LIST(hyperflow_base), 12, 3, 0, true},
    {"fasth3-4", "FastH3 4-step: t-list 999,749,500,250, shift 12/3", MM_GRID_TLIST, 0, LIST(fasth3_4_t), 12, 3, 0,
     false},
    {"fasth3-8", "FastH3 8-step V2: t-list 999,874,...,125, video shift 10, audio 3", MM_GRID_TLIST, 0,
     LIST(fasth3_8_t), 10, 3, 0, false},
    {"flashgen4", "FlashGen 4-step: base grid 1,0.7,0.4,0.15,0, shift 12/3", MM_GRID_BASE, 0, LIST(flashgen_base), 12,
     3, 0, false},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

const mm_sampler_preset *mm_sampler_preset_at(size_t i) { return i < N_PRESETS ? &presets[i] : NULL; }

void mm_sampler_preset_names(char *buf, size_t n)
{
    size_t k = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_PRESETS && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%s", i ? ", " : "", presets[i].name);
}

int mm_sampler_preset_find(const char *name, const mm_sampler_preset **out, mm_error *err)
{
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(presets[i].name, name) == 0) {
            *out = &presets[i];
            return 0;
        }
    char names[512];
    mm_sampler_preset_names(names, sizeof names);
    *out = NULL;
    return mm_fail(err, "unknown sampler '%.64s'; accepted: default, %s", name, names);
}

int mm_sampler_preset_forwards(const mm_sampler_preset *p)
{
    switch (p->kind) {
    case MM_GRID_LINSPACE:
        return p->forwards;
    case MM_GRID_BASE:
        return p->n_values - 1;
    case MM_GRID_TLIST:
        return p->n_values;
    }
    return 0;
}
