/* The timing table of one generation (see timing.h). */
#include "engine/timing.h"

#include "core/clock.h"
#include "core/error.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const group_names[MM_TG_COUNT] = {"loading", "inference", "encode", "overhead"};

double mm_timing_now(void) { return mm_clock_now(); }

void mm_timing_add(mm_timing *t, mm_timing_group g, const char *name, double seconds)
{
    if (!t || seconds < 0)
        return;
    for (int i = 0; i < t->n_rows; i++)
        if (t->rows[i].group == g && strcmp(t->rows[i].name, name) == 0) {
            t->rows[i].seconds += seconds;
            return;
        }
    if (t->n_rows == MM_TIMING_ROWS)
        return; /* full: the time shows up as overhead */
    mm_timing_row *r = &t->rows[t->n_rows++];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->group = g;
    r->seconds = seconds;
}

void mm_timing_density(mm_timing *t, int step, double density)
{
    if (!t || step < 0 || step >= MM_TIMING_STEPS)
        return;
    for (int i = t->n_density; i < step; i++)
        t->density[i] = 1.0f; /* forwards not reported ran dense */
    t->density[step] = (float)density;
    if (step >= t->n_density)
        t->n_density = step + 1;
}

void mm_timing_memory_peak(mm_timing *t, const char *device, size_t peak)
{
    if (!t)
        return;
    for (int i = 0; i < t->n_memory; i++)
        if (strcmp(t->memory[i].device, device) == 0) {
            if (peak > t->memory[i].peak)
                t->memory[i].peak = peak;
            return;
        }
    if (t->n_memory == MM_TIMING_DEVICES)
        return;
    mm_timing_memory *m = &t->memory[t->n_memory++];
    snprintf(m->device, sizeof m->device, "%s", device);
    m->peak = peak;
}

double mm_timing_group_total(const mm_timing *t, mm_timing_group g)
{
    double s = 0;
    for (int i = 0; i < t->n_rows; i++)
        if (t->rows[i].group == g)
            s += t->rows[i].seconds;
    return s;
}

double mm_timing_unaccounted(const mm_timing *t)
{
    double s = t->wall;
    for (int i = 0; i < t->n_rows; i++)
        s -= t->rows[i].seconds;
    return s > 0 ? s : 0;
}

double mm_timing_sum(const mm_timing *t, const char *prefix)
{
    double s = 0;
    size_t n = strlen(prefix);
    for (int i = 0; i < t->n_rows; i++)
        if (strncmp(t->rows[i].name, prefix, n) == 0)
            s += t->rows[i].seconds;
    return s;
}

typedef struct out {
    char *buf;
    size_t n, len;
} out;

static void put(out *o, const char *fmt, ...) MM_PRINTF(2, 3);
static void put(out *o, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->buf + o->len, o->len < o->n ? o->n - o->len : 0, fmt, ap);
    va_end(ap);
    if (k > 0)
        o->len += (size_t)k;
    if (o->len >= o->n && o->n)
        o->len = o->n - 1;
}

static double share(const mm_timing *t, double s)
{
    return t->wall > 0 ? 100.0 * s / t->wall : 0;
}

void mm_timing_duration(double seconds, char *buf, size_t n)
{
    /* Rounded to tenths first, so 119.96 s reads "2m 00.0s", not "1m 60.0s". */
    double tenths = round(seconds * 10);
    if (tenths < 600) {
        snprintf(buf, n, "%.2fs", seconds);
        return;
    }
    long long minutes = (long long)(tenths / 600);
    snprintf(buf, n, "%lldm %04.1fs", minutes, (tenths - (double)minutes * 600) / 10);
}

/* One row: the name, the duration right-aligned, the share of the wall clock. */
static void put_row(out *o, int indent, const char *name, double seconds, double share_pct)
{
    char d[32];
    mm_timing_duration(seconds, d, sizeof d);
    put(o, "%*s%-*s %10s %6.1f%%\n", indent, "", 36 - indent, name, d, share_pct);
}

int mm_timing_format(const mm_timing *t, char *buf, size_t n)
{
    out o = {buf, n, 0};
    if (n)
        buf[0] = '\0';
    put(&o, "%-36s %10s %7s\n", "stage", "time", "share");
    double unaccounted = mm_timing_unaccounted(t);
    for (int g = 0; g < MM_TG_COUNT; g++) {
        double total = mm_timing_group_total(t, (mm_timing_group)g);
        if (g == MM_TG_OVERHEAD)
            total += unaccounted;
        for (int i = 0; i < t->n_rows; i++)
            if (t->rows[i].group == (mm_timing_group)g)
                put_row(&o, 2, t->rows[i].name, t->rows[i].seconds, share(t, t->rows[i].seconds));
        if (g == MM_TG_OVERHEAD && unaccounted > 0)
            put_row(&o, 2, "other (I/O, setup, transfers)", unaccounted, share(t, unaccounted));
        put_row(&o, 0, group_names[g], total, share(t, total));
    }
    put_row(&o, 0, "total (wall clock)", t->wall, t->wall > 0 ? 100.0 : 0);

    double denoise = mm_timing_sum(t, "denoise");
    if (t->forwards > 0)
        put(&o, "per step: %.3f s (%d forwards, %.2f steps/min)\n", denoise / t->forwards, t->forwards,
            denoise > 0 ? 60.0 * t->forwards / denoise : 0);
    const mm_step_cache_summary *sc = &t->step_cache;
    if (sc->policy[0]) {
        char list[1200];
        mm_step_cache_format_skipped(sc->skipped_bits, sc->forwards, list, sizeof list);
        put(&o, "step cache %s: %d of %d forwards skipped their blocks%s%s%s\n", sc->policy, sc->skipped, sc->forwards,
            sc->skipped ? " (forwards " : "", sc->skipped ? list : "", sc->skipped ? ")" : "");
    }
    if (t->frames > 0 && t->wall > 0) {
        double clip = t->frames / 24.0;
        double mpf = (double)t->width * t->height * t->frames / 1e6;
        put(&o, "frames/s: %.3f (%d frames of %dx%d in %.2f s)\n", t->frames / t->wall, t->frames, t->width,
            t->height, t->wall);
        put(&o, "realtime factor: %.2fx (%.2f s of wall clock per second of video)\n", t->wall / clip,
            t->wall / clip);
        put(&o, "megapixel-frames/s: %.3f (%.1f MP-frames)\n", mpf / t->wall, mpf);
    }
    if (t->n_density > 0) {
        double sum = 0;
        put(&o, "attention density per step:");
        for (int i = 0; i < t->n_density; i++) {
            put(&o, "%s%.2f", i && i % 25 == 0 ? "\n  " : " ", t->density[i]);
            sum += t->density[i];
        }
        put(&o, " (mean %.2f)\n", sum / t->n_density);
    }
    for (int i = 0; i < t->n_memory; i++)
        put(&o, "peak memory %s: %.2f GiB\n", t->memory[i].device, t->memory[i].peak / 1073741824.0);
    return 0;
}
