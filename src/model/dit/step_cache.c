/* The step cache's decision rule and the record of what was skipped
 * (step_cache.h); its configuration is request/step_cache.c's. */
#include "model/dit/step_cache.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/dit/layout.h"

/* ------------------------------------------------------------- decisions */

void mm_step_cache_state_init(mm_step_cache_state *s, const mm_step_cache_config *c, int forwards)
{
    memset(s, 0, sizeof *s);
    s->cfg = *c;
    s->forwards = forwards;
}

static double poly(const mm_step_cache_config *c, double x)
{
    double p = c->coeffs[0];
    for (int i = 1; i < c->n_coeffs; i++)
        p = p * x + c->coeffs[i];
    return p;
}

static double ratio(double num, double den) { return num / (den > 1e-8 ? den : 1e-8); }

mm_step_decision mm_step_cache_decide(mm_step_cache_state *s, int step, const mm_step_cache_sums *sums)
{
    const mm_step_cache_config *c = &s->cfg;
    mm_step_decision d = {.rel = NAN, .rel_audio = NAN};
    double diff = 0, ref = 0;
    for (int g = 0; g < MM_STEP_CACHE_SEGMENTS; g++) {
        diff += sums->diff[g];
        ref += s->ref_norm[g];
    }
    if (s->have_ref) {
        d.rel = ratio(diff, ref);
        if (s->ref_norm[MM_DIT_TAG_AUDIO] > 0)
            d.rel_audio = ratio(sums->diff[MM_DIT_TAG_AUDIO], s->ref_norm[MM_DIT_TAG_AUDIO]);
    }
    d.forced = !s->have_ref || !s->have_cached || step < c->warmup ||
               (s->forwards > 0 && step >= s->forwards - c->final);
    const bool room = c->max_cached == 0 || s->in_a_row < c->max_cached;
    if (c->kind == MM_STEP_CACHE_FBC) {
        /* NAN compares false: numbers gone bad compute */
        d.skip = !d.forced && d.rel < c->threshold && room;
        d.keep_as_ref = !d.skip;
    } else {
        s->acc = d.forced ? 0 : s->acc + fabs(poly(c, d.rel));
        d.acc = s->acc;
        d.skip = !d.forced && s->acc < c->threshold && room;
        if (!d.skip)
            s->acc = 0;
        d.keep_as_ref = true;
    }
    if (d.skip) {
        s->in_a_row++;
    } else {
        s->in_a_row = 0;
        s->have_cached = true;
    }
    if (d.keep_as_ref) {
        s->have_ref = true;
        memcpy(s->ref_norm, sums->norm, sizeof s->ref_norm);
    }
    return d;
}

/* ---------------------------------------------------------------- reports */

void mm_step_cache_report_init(mm_step_cache_report *r)
{
    memset(r, 0, sizeof *r);
    for (int i = 0; i < MM_STEP_CACHE_MAX_FORWARDS; i++)
        r->rel[i] = r->rel_audio[i] = NAN;
}

void mm_step_cache_report_add(mm_step_cache_report *r, int step, const mm_step_decision *d)
{
    r->decided++;
    if (d->skip)
        r->skipped++;
    if (step < 0 || step >= MM_STEP_CACHE_MAX_FORWARDS)
        return;
    if (d->skip)
        r->skipped_bits[step / 8] |= (unsigned char)(1u << (step % 8));
    r->rel[step] = (float)d->rel;
    r->rel_audio[step] = (float)d->rel_audio;
}

void mm_step_cache_report_merge(mm_step_cache_report *dst, const mm_step_cache_report *src)
{
    dst->decided += src->decided;
    dst->skipped += src->skipped;
    for (int i = 0; i < MM_STEP_CACHE_MAX_FORWARDS; i++) {
        if (i % 8 == 0)
            dst->skipped_bits[i / 8] |= src->skipped_bits[i / 8];
        if (!isnan(src->rel[i]))
            dst->rel[i] = src->rel[i];
        if (!isnan(src->rel_audio[i]))
            dst->rel_audio[i] = src->rel_audio[i];
    }
}

bool mm_step_cache_skipped(const unsigned char *bits, int step)
{
    return step >= 0 && step < MM_STEP_CACHE_MAX_FORWARDS && (bits[step / 8] >> (step % 8)) & 1u;
}

void mm_step_cache_summarize(const mm_step_cache_config *c, const mm_step_cache_report *r,
                             mm_step_cache_summary *out)
{
    memset(out, 0, sizeof *out);
    if (c->kind == MM_STEP_CACHE_OFF)
        return;
    mm_step_cache_name(c, out->policy, sizeof out->policy);
    out->forwards = r->decided;
    out->skipped = r->skipped;
    memcpy(out->skipped_bits, r->skipped_bits, sizeof out->skipped_bits);
}

void mm_step_cache_format_skipped(const unsigned char *bits, int forwards, char *buf, size_t n)
{
    if (n == 0)
        return;
    buf[0] = '\0';
    size_t k = 0;
    const int last = forwards < MM_STEP_CACHE_MAX_FORWARDS ? forwards : MM_STEP_CACHE_MAX_FORWARDS;
    for (int i = 0; i < last && k < n; i++) {
        if (!mm_step_cache_skipped(bits, i))
            continue;
        int j = i;
        while (j + 1 < last && mm_step_cache_skipped(bits, j + 1))
            j++;
        int w = j > i ? snprintf(buf + k, n - k, "%s%d-%d", k ? ", " : "", i + 1, j + 1)
                      : snprintf(buf + k, n - k, "%s%d", k ? ", " : "", i + 1);
        k = w > 0 ? k + (size_t)w : k;
        i = j;
    }
    if (k == 0)
        snprintf(buf, n, "none");
    else if (k >= n)
        buf[n - 1] = '\0';
}
