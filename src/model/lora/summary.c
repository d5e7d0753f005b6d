/* What a loaded adapter is, in the words of fewstep.md §1: the family
 * guess (file name, metadata, targets), the spelling, ranks and alphas, the
 * targets, and warnings a user should see before rendering with it. Only
 * descriptions: nothing here changes how the adapter is applied. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/lora/lora_internal.h"

void lora_warn(mm_lora *l, const char *fmt, ...)
{
    mm_lora_summary *s = &l->summary;
    if (s->n_warnings >= MM_LORA_MAX_WARNINGS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->warnings[s->n_warnings++], sizeof s->warnings[0], fmt, ap);
    va_end(ap);
}

static bool name_has(const mm_lora *l, const char *needle)
{
    char low[256];
    size_t i = 0;
    for (; l->name[i] && i + 1 < sizeof low; i++)
        low[i] = (char)(l->name[i] >= 'A' && l->name[i] <= 'Z' ? l->name[i] + 32 : l->name[i]);
    low[i] = 0;
    return strstr(low, needle) != NULL;
}

typedef struct census {
    int linear_rank_min, linear_rank_max, adaln_rank;
    int adaln, time, endpoint;
    int blocks_seen, refiner_seen; /* distinct block indices with linear pairs */
    bool which_block[5], which_refiner[4], condition, final_adaln;
    bool qkv_slices;
    int qkv_fused_rank3; /* whole-qkv pairs whose rank is 3x the out_proj rank of their block */
    int alpha_from[4];
} census;

static void take_census(const mm_lora *l, census *c)
{
    memset(c, 0, sizeof *c);
    int last_block = -1, last_refiner = -1;
    for (int i = 0; i < l->n_pairs; i++) {
        const mm_lora_pair *p = &l->pairs[i];
        c->alpha_from[p->alpha_from]++;
        mm_lora_part part = mm_lora_which_part(p->which);
        if (part == MM_LORA_PART_ADALN) {
            c->adaln++;
            c->adaln_rank = p->rank > c->adaln_rank ? p->rank : c->adaln_rank;
            if (p->scope == MM_LORA_FINAL)
                c->final_adaln = true;
            continue;
        }
        if (part == MM_LORA_PART_TIME) {
            c->time += p->scope == MM_LORA_TIME_EMBEDDER;
            c->endpoint += p->scope == MM_LORA_ENDPOINT_EMBEDDER;
            continue;
        }
        if (!c->linear_rank_min || p->rank < c->linear_rank_min)
            c->linear_rank_min = p->rank;
        c->linear_rank_max = p->rank > c->linear_rank_max ? p->rank : c->linear_rank_max;
        if (p->row_kind == MM_LORA_ROWS_QKV_SLICE)
            c->qkv_slices = true;
        if (p->scope == MM_LORA_BLOCK) {
            c->which_block[p->which] = true;
            if (p->index != last_block)
                c->blocks_seen++, last_block = p->index;
        } else if (p->scope == MM_LORA_REFINER) {
            c->which_refiner[p->which] = true;
            if (p->index != last_refiner)
                c->refiner_seen++, last_refiner = p->index;
        } else if (p->scope == MM_LORA_CONDITION) {
            c->condition = true;
        }
        if (p->which == MM_LORA_QKV && p->row0 == 0 && p->row_kind != MM_LORA_ROWS_QKV_SLICE &&
            p->row_kind != MM_LORA_ROWS_FUSED_SPLIT && i + 1 < l->n_pairs) {
            const mm_lora_pair *q = &l->pairs[i + 1]; /* canonical order: out_proj follows qkv */
            if (q->scope == p->scope && q->index == p->index && q->which == MM_LORA_OUT && p->rank == 3 * q->rank)
                c->qkv_fused_rank3++;
        }
    }
}

static void describe_targets(mm_lora *l, const census *c)
{
    static const char *const which_name[] = {"qkv", "out", "fc1", "fc2"};
    char *t = l->summary.targets;
    size_t n = sizeof l->summary.targets, u = 0;
#define ADD(...) (u += (size_t)snprintf(t + u, u < n ? n - u : 0, __VA_ARGS__), u = u < n ? u : n)
    if (c->blocks_seen) {
        ADD("%d block%s (", c->blocks_seen, c->blocks_seen == 1 ? "" : "s");
        bool first = true;
        for (int w = 0; w < 4; w++)
            if (c->which_block[w]) {
                ADD("%s%s%s", first ? "" : ", ", which_name[w], w == 0 && c->qkv_slices ? " as q/k/v" : "");
                first = false;
            }
        ADD(")");
    }
    if (c->refiner_seen) {
        ADD("%srefiner %d block%s (", u ? "; " : "", c->refiner_seen, c->refiner_seen == 1 ? "" : "s");
        bool first = true;
        for (int w = 0; w < 4; w++)
            if (c->which_refiner[w]) {
                ADD("%s%s", first ? "" : ", ", which_name[w]);
                first = false;
            }
        ADD(")");
    }
    if (c->condition)
        ADD("%scondition_proj", u ? "; " : "");
    if (c->adaln)
        ADD("%sAdaLN %d%s", u ? "; " : "", c->adaln, c->final_adaln ? " (incl. final layer)" : "");
    if (c->time)
        ADD("%stime embedder %d", u ? "; " : "", c->time);
    if (c->endpoint)
        ADD("%sendpoint time embedder %d", u ? "; " : "", c->endpoint);
    for (int i = 0; i < l->n_banks; i++)
        ADD("%s%s head bank x%lld", u ? "; " : "", l->banks[i].audio ? "audio" : "video",
            (long long)l->banks[i].weight.shape[0]);
    if (l->n_dense)
        ADD("%s%d full-rank parts", u ? "; " : "", l->n_dense);
#undef ADD
}

static void describe_spelling(mm_lora *l, const lora_file_traits *tr)
{
    char *s = l->summary.spelling;
    size_t n = sizeof l->summary.spelling, u = 0;
#define ADD(...) (u += (size_t)snprintf(s + u, u < n ? n - u : 0, __VA_ARGS__), u = u < n ? u : n)
    if (tr->kohya)
        ADD("kohya lora_down/lora_up");
    if (tr->diffsynth)
        ADD("%sDiffSynth (native, .default, qkv rows interleaved)", u ? " + " : "");
    else if (tr->native && !tr->kohya)
        ADD("%snative names%s", u ? " + " : "", tr->peft_default ? ", .default" : "");
    if (tr->diffusers)
        ADD("%sdiffusers names%s", u ? " + " : "", tr->peft_default ? ", .default" : "");
    if (tr->fused_qkv_split)
        ADD(", rank-3r fused qkv");
    if (tr->prefixes[0])
        ADD(", prefix %s", tr->prefixes);
    if (!u)
        ADD("head bank / full-rank parts only");
#undef ADD
}

static const char *guess_family(const mm_lora *l, const census *c)
{
    const char *fmt = mm_lora_metadata(l, "format");
    if (l->n_banks || mm_lora_metadata(l, "pdd_num_steps"))
        return "PDD Acc";
    if (c->endpoint || mm_lora_metadata(l, "hyperflow_sigmas") || mm_lora_metadata(l, "hyperflow_gate") ||
        name_has(l, "hyperflow"))
        return "HyperFlow";
    if (l->n_dense || (fmt && strstr(fmt, "fastvideo")) || name_has(l, "fasth3"))
        return "FastH3";
    if (name_has(l, "flashgen") || mm_lora_metadata(l, "base_schedule"))
        return "FlashGen";
    if (name_has(l, "vdn"))
        return "VDN-H3";
    if (name_has(l, "lightx2v") || name_has(l, "fl2v_turbo") || name_has(l, "ref2v_turbo"))
        return "LightX2V Turbo";
    if (name_has(l, "minimax_h3_turbo") || name_has(l, "larry") ||
        (c->adaln && c->linear_rank_max == 64 && c->adaln_rank == 16))
        return "Larry's Turbo";
    return "generic";
}

static void sampler_hint(mm_lora *l, const char *family)
{
    char *h = l->summary.hint;
    size_t n = sizeof l->summary.hint, u = 0;
#define ADD(...) (u += (size_t)snprintf(h + u, u < n ? n - u : 0, __VA_ARGS__), u = u < n ? u : n)
    static const int steps[] = {4, 6, 8};
    for (int i = 0; i < 3; i++) {
        char pat[16];
        snprintf(pat, sizeof pat, "%dstep", steps[i]);
        if (name_has(l, pat)) {
            ADD("%d forwards", steps[i]);
            break;
        }
    }
    if (strcmp(family, "LightX2V Turbo") == 0)
        ADD("%svideo shift %s / audio 3", u ? ", " : "", name_has(l, "768p") ? "6" : "12");
    static const char *const keys[] = {"pdd_num_steps", "pdd_block_size", "hyperflow_sigmas", "base_schedule",
                                       "turbo_num_steps", "video_shift", "audio_shift"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const char *v = mm_lora_metadata(l, keys[i]);
        if (v)
            ADD("%s%s=%.48s", u ? ", " : "", keys[i], v);
    }
#undef ADD
}

static void describe_alpha(mm_lora *l, const census *c)
{
    mm_lora_summary *s = &l->summary;
    const char *from = c->alpha_from[MM_LORA_ALPHA_TENSOR]     ? "per-key .alpha"
                       : c->alpha_from[MM_LORA_ALPHA_METADATA] ? "__metadata__ alpha"
                       : c->alpha_from[MM_LORA_ALPHA_FILENAME] ? "none stored: 8 by the LightX2V v0.1 rule"
                       : c->alpha_from[MM_LORA_ALPHA_RANK]     ? "none stored: alpha = rank (scale 1)"
                                                               : "";
    int kinds = (c->alpha_from[0] > 0) + (c->alpha_from[1] > 0) + (c->alpha_from[2] > 0) + (c->alpha_from[3] > 0);
    snprintf(s->alpha_note, sizeof s->alpha_note, "%s%s", from, kinds > 1 ? " (mixed; some pairs alpha = rank)" : "");
}

static void warnings(mm_lora *l, const census *c, const char *family)
{
    const mm_lora_summary *s = &l->summary;
    if (strcmp(family, "LightX2V Turbo") == 0 && l->n_pairs) {
        const float a = s->alpha_max, scale = a / (float)s->rank_max;
        lora_warn(l,
                  "alpha 8 vs 128 (fewstep.md 2.4): applied with alpha %g at rank %d (scale %g); LightX2V's "
                  "reference script applies 8 to every file and its training used 128; if the result looks %s, "
                  "try strength %g",
                  a, s->rank_max, scale, a >= 100 ? "over-baked" : "blurry or undistilled", a >= 100 ? 0.0625 : 16.0);
    }
    if (c->qkv_fused_rank3 && (c->alpha_from[MM_LORA_ALPHA_METADATA] || c->alpha_from[MM_LORA_ALPHA_FILENAME]))
        lora_warn(l,
                  "%d qkv pair%s of rank 3r are not block-diagonal: with one global alpha they get a third of the "
                  "other modules' scale (fewstep.md 2.3a)",
                  c->qkv_fused_rank3, c->qkv_fused_rank3 == 1 ? "" : "s");
    if (c->adaln)
        lora_warn(l, "%d AdaLN pair%s: applied through the AdaLN path of few-step adapters (fewstep.md 2.5), not as a "
                     "linear branch",
                  c->adaln, c->adaln == 1 ? "" : "s");
    if (c->time || c->endpoint)
        lora_warn(l, "time-embedder pairs: the pruned int8 base has no time MLP (fewstep.md 2.5)");
    if (l->n_dense)
        lora_warn(l, "FastVideo v2 full-rank parts (.diff/.diff_b/.set_weight): fold them offline with `mmh3 "
                     "convert`; they are refused at run time");
}

void lora_summarize(mm_lora *l, const lora_file_traits *tr)
{
    mm_lora_summary *s = &l->summary;
    memset(s, 0, sizeof *s);
    census c;
    take_census(l, &c);
    for (int i = 0; i < l->n_pairs; i++) {
        const mm_lora_pair *p = &l->pairs[i];
        if (!s->rank_min || p->rank < s->rank_min)
            s->rank_min = p->rank;
        s->rank_max = p->rank > s->rank_max ? p->rank : s->rank_max;
        if (i == 0 || p->alpha < s->alpha_min)
            s->alpha_min = p->alpha;
        s->alpha_max = p->alpha > s->alpha_max ? p->alpha : s->alpha_max;
        if (i == 0 || strcmp(p->module, l->pairs[i - 1].module) != 0)
            s->modules++;
    }
    s->modules += l->n_banks;
    const char *family = guess_family(l, &c);
    snprintf(s->family, sizeof s->family, "%s", family);
    describe_spelling(l, tr);
    describe_targets(l, &c);
    describe_alpha(l, &c);
    sampler_hint(l, family);
    warnings(l, &c, family);
}
