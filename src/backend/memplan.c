#include "backend/memplan.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

static uint64_t max2(uint64_t a, uint64_t b) { return a > b ? a : b; }
static uint64_t max3(uint64_t a, uint64_t b, uint64_t c) { return max2(max2(a, b), c); }

const char *mm_memplan_mode_name(mm_memplan_mode m)
{
    switch (m) {
    case MM_PLAN_RESIDENT: return "resident";
    case MM_PLAN_PER_USE: return "per-use";
    case MM_PLAN_STREAMED: return "streamed";
    case MM_PLAN_STREAMED_DIT_FREED: return "DiT freed after denoising";
    }
    return "?";
}

int mm_memplan_parse_budget(const char *s, uint64_t *bytes, mm_error *err)
{
    char *end = NULL;
    errno = 0;
    double g = s ? strtod(s, &end) : NAN;
    if (!s || !*s || end == s || *end || errno || !(g > 0) || g >= 16384)
        return mm_fail(err, "--vram-budget '%s': accepted: GiB of device memory per GPU, a number above 0 "
                       "(e.g. 22 or 30.5)", s ? s : "");
    *bytes = (uint64_t)(g * GIB);
    return 0;
}

/* Marks n streamed blocks spread evenly over blocks 1..blocks-1. */
static void choose_streamed(int blocks, int n, bool *stream)
{
    memset(stream, 0, sizeof(bool) * MM_MEMPLAN_MAX_BLOCKS);
    const int m = blocks - 1;
    for (int j = 0; j < n; j++)
        stream[1 + (int)(((int64_t)2 * j + 1) * m / (2 * (int64_t)n))] = true;
}

/* The DiT's device bytes with n blocks streamed: its resident part plus the
 * two slots; fills the plan's streaming fields. */
static uint64_t dit_resident(const mm_memplan_sizes *s, int n, mm_memplan *p)
{
    choose_streamed(s->dit_blocks, n, p->stream);
    uint64_t resident = s->dit_fixed, slot = 0, moved = 0;
    for (int b = 0; b < s->dit_blocks; b++) {
        if (!p->stream[b]) {
            resident += s->dit_block[b];
            continue;
        }
        slot = max2(slot, s->dit_block[b]);
        moved += s->dit_block[b];
    }
    if (n)
        slot += MM_MEMPLAN_SLOT_ROUNDING;
    p->streamed = n;
    p->slot_bytes = slot;
    p->stream_bytes = moved;
    return resident + 2 * slot;
}

/* Counts of streamed blocks a plan may use, in order: 0, then 3..blocks-1. */
static int next_count(int n, int blocks)
{
    int next = n == 0 ? 3 : n + 1;
    return next <= blocks - 1 ? next : -1;
}

/* The fewest streamed blocks for which the DiT's part plus `extra` (the
 * largest other need beside it on its GPU) fits `budget`; -1 if none. */
static int fit_dit(const mm_memplan_sizes *s, uint64_t extra, uint64_t budget, mm_memplan *p)
{
    for (int n = 0; n >= 0; n = next_count(n, s->dit_blocks))
        if (dit_resident(s, n, p) + extra <= budget)
            return n;
    return -1;
}

/* The smallest DiT footprint any plan reaches (every block but block 0 streamed). */
static uint64_t dit_smallest(const mm_memplan_sizes *s)
{
    mm_memplan scratch;
    uint64_t best = dit_resident(s, 0, &scratch);
    for (int n = 3; n <= s->dit_blocks - 1; n++) {
        uint64_t v = dit_resident(s, n, &scratch);
        if (v < best)
            best = v;
    }
    return best;
}

static void set_peaks_one(const mm_memplan_sizes *s, uint64_t dit, mm_memplan *p)
{
    uint64_t beside = (p->te_per_use ? 0 : s->te_bytes) + (p->vae_per_use ? 0 : s->vae_bytes);
    uint64_t dit_in_others = p->dit_freed ? 0 : dit;
    p->peak_denoise = dit + beside + s->dit_work;
    p->peak_condition = dit_in_others + beside + (p->te_per_use ? s->te_bytes : 0) + s->te_work;
    p->peak_vae = dit_in_others + beside + (p->vae_per_use ? s->vae_bytes : 0) + s->vae_work;
    p->peak[0] = max3(p->peak_denoise, p->peak_condition, p->peak_vae);
}

static int plan_one_gpu(const mm_memplan_sizes *s, uint64_t B, mm_memplan *p)
{
    const uint64_t T = s->te_bytes + s->te_work, V = s->vae_bytes + s->vae_work;
    const uint64_t all = s->te_bytes + s->vae_bytes + max3(s->dit_work, s->te_work, s->vae_work);
    int n = fit_dit(s, all, B, p);
    if (n == 0) {
        p->mode = MM_PLAN_RESIDENT;
    } else {
        p->te_per_use = p->vae_per_use = true;
        n = fit_dit(s, max3(s->dit_work, T, V), B, p);
        if (n >= 0) {
            p->mode = n ? MM_PLAN_STREAMED : MM_PLAN_PER_USE;
        } else if (T <= B && V <= B && (n = fit_dit(s, s->dit_work, B, p)) >= 0) {
            p->mode = MM_PLAN_STREAMED_DIT_FREED;
            p->dit_freed = true;
        } else {
            return -1;
        }
    }
    set_peaks_one(s, dit_resident(s, n, p), p);
    return 0;
}

static int plan_two_gpus(const mm_memplan_sizes *s, const uint64_t B[2], mm_memplan *p)
{
    const uint64_t T = s->te_bytes + s->te_work, V = s->vae_bytes + s->vae_work;
    int n = fit_dit(s, s->dit_work, B[0], p);
    if (n < 0)
        return -1;
    const uint64_t together = s->te_bytes + s->vae_bytes + max2(s->te_work, s->vae_work);
    if (together > B[1]) {
        if (T > B[1] || V > B[1])
            return -1;
        p->te_per_use = p->vae_per_use = true;
    }
    p->mode = n ? MM_PLAN_STREAMED : p->te_per_use ? MM_PLAN_PER_USE : MM_PLAN_RESIDENT;
    p->peak_denoise = dit_resident(s, n, p) + s->dit_work;
    uint64_t beside = p->te_per_use ? 0 : s->te_bytes + s->vae_bytes;
    p->peak_condition = beside + (p->te_per_use ? s->te_bytes : 0) + s->te_work;
    p->peak_vae = beside + (p->vae_per_use ? s->vae_bytes : 0) + s->vae_work;
    p->peak[0] = p->peak_denoise;
    p->peak[1] = max2(p->peak_condition, p->peak_vae);
    return 0;
}

/* Why no plan fits, and the smallest per-GPU budget that would. */
static int refuse(const mm_memplan_in *in, const uint64_t B[2], uint64_t *min_budget, mm_error *err)
{
    const mm_memplan_sizes *s = &in->s;
    const uint64_t T = s->te_bytes + s->te_work, V = s->vae_bytes + s->vae_work;
    const uint64_t dit = dit_smallest(s) + s->dit_work;
    uint64_t need = max3(dit, T, V);
    const char *what = need == dit ? "the DiT's denoising (its resident part, two streaming slots and the "
                                     "activations)"
                       : need == T ? "the text encoder (its weights and working memory)"
                                   : "the VAEs (their weights and the decode's working memory)";
    /* Rounded up to what is printed (a tenth of a GiB, a hundredth below 1 GiB), so that it is enough. */
    uint64_t step = (uint64_t)(need >= (uint64_t)GIB ? GIB / 10 : GIB / 100);
    uint64_t shown = (need + step - 1) / step * step;
    if (min_budget)
        *min_budget = shown;
    const int digits = need >= (uint64_t)GIB ? 1 : 2;
    return mm_fail(err, "a device-memory budget of %.*f GiB%s cannot work: %s needs %.*f GiB at the least; the "
                   "smallest budget that works is %.*f GiB (--vram-budget %.*f)", digits,
                   (in->n_gpus >= 2 ? (B[0] < B[1] ? B[0] : B[1]) : B[0]) / GIB, in->n_gpus >= 2 ? " per GPU" : "",
                   what, digits, need / GIB, digits, shown / GIB, digits, shown / GIB);
}

static void describe(const mm_memplan_in *in, mm_memplan *p)
{
    const mm_memplan_sizes *s = &in->s;
    char *o = p->summary;
    size_t n = sizeof p->summary, u = 0;
    u += (size_t)snprintf(o + u, n - u, "%s: budget %.1f GiB", mm_memplan_mode_name(p->mode), p->budget[0] / GIB);
    if (p->sp_ranks) {
        char others[32] = "GPU 1";
        if (p->sp_ranks > 2)
            snprintf(others, sizeof others, "GPUs 1-%d", p->sp_ranks - 1);
        u += (size_t)snprintf(o + u, n - u, " per GPU; sequence parallel over %d GPUs, each with the DiT and "
                              "1/%d of the rows (%.1f GiB of activations); %s peak at %.1f GiB",
                              p->sp_ranks, p->sp_ranks, s->dit_work / GIB, others, p->peak_rank / GIB);
    }
    if (p->n_gpus == 2)
        u += (size_t)snprintf(o + u, n - u, " + %.1f GiB", p->budget[1] / GIB);
    if (u < n && p->streamed)
        u += (size_t)snprintf(o + u, n - u, "; DiT %d of %d blocks resident, %d streamed from pinned host memory "
                              "(2 slots of %.2f GiB, %.1f GiB per forward)",
                              s->dit_blocks - p->streamed, s->dit_blocks, p->streamed, p->slot_bytes / GIB,
                              p->stream_bytes / GIB);
    else if (u < n)
        u += (size_t)snprintf(o + u, n - u, "; DiT resident");
    if (u < n)
        u += (size_t)snprintf(o + u, n - u, "%s; text encoder and VAEs %s", p->dit_freed ? " (freed after denoising)"
                              : "", p->te_per_use ? "loaded per use" : "resident");
    if (u < n)
        snprintf(o + u, n - u, "\npeaks%s: denoise %.1f GiB, text encoder %.1f GiB, VAEs %.1f GiB",
                 p->sp_ranks ? " on GPU 0" : "", p->peak_denoise / GIB, p->peak_condition / GIB, p->peak_vae / GIB);
}

int mm_memplan_choose(const mm_memplan_in *in, mm_memplan *out, uint64_t *min_budget, mm_error *err)
{
    memset(out, 0, sizeof *out);
    if (min_budget)
        *min_budget = 0;
    const mm_memplan_sizes *s = &in->s;
    if (in->n_gpus < 1 || s->dit_blocks < 1 || s->dit_blocks > MM_MEMPLAN_MAX_BLOCKS)
        return mm_fail(err, "memory plan: %d GPUs and %d DiT blocks (accepted: at least one GPU, 1..%d blocks)",
                       in->n_gpus, s->dit_blocks, MM_MEMPLAN_MAX_BLOCKS);
    const int sp = in->sp_ranks >= 2 ? in->sp_ranks : 0;
    if (sp && (sp > in->n_gpus || sp > MM_MEMPLAN_MAX_GPUS))
        return mm_fail(err, "memory plan: sequence parallel over %d GPUs, but %d GPUs are given", sp, in->n_gpus);
    out->n_gpus = sp ? 1 : in->n_gpus >= 2 ? 2 : 1;
    out->sp_ranks = sp;
    uint64_t B[MM_MEMPLAN_MAX_GPUS];
    const int budgets = sp ? sp : out->n_gpus;
    for (int g = 0; g < budgets; g++) {
        uint64_t have = in->gpu_free[g] ? in->gpu_free[g] : in->gpu_total[g];
        if (!in->budget) {
            if (!have)
                return mm_fail(err, "memory plan: GPU %d's memory is unknown; give --vram-budget", g);
            B[g] = have > MM_MEMPLAN_MARGIN ? have - MM_MEMPLAN_MARGIN : 0;
        } else if (have && in->budget > have) {
            return mm_fail(err, "--vram-budget %.1f GiB is more than GPU %d has free (%.1f GiB)", in->budget / GIB, g,
                           have / GIB);
        } else {
            B[g] = in->budget;
        }
        if (g < 2)
            out->budget[g] = B[g];
        if (sp && B[g] < B[0])
            B[0] = out->budget[0] = B[g];
    }
    int rc = out->n_gpus == 2 ? plan_two_gpus(s, B, out) : plan_one_gpu(s, B[0], out);
    if (rc == 0 && sp)
        out->peak_rank = dit_resident(s, out->streamed, out) + s->dit_work;
    if (rc != 0) {
        memset(out, 0, sizeof *out);
        return refuse(in, B, min_budget, err);
    }
    describe(in, out);
    return 0;
}
