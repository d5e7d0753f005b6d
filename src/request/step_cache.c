/* The step cache's configuration (step_cache.h): the published presets,
 * the one parser of a setting's text (`mmh3 generate --cache` and the API's
 * cache field alike), the checks, names and descriptions. */
#include "request/step_cache.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The published settings (fewstep.md §11), reproduced as their sources run
 * them: SGLang's MINIMAX_H3_QUALITY_PROFILES (vLLM-Omni's quality=high is
 * "high"), the diffusers FirstBlockCache threshold of Sana's GB200/H100
 * full-opt runs (no warm-up, no limit), vLLM-Omni's FL2VA TeaCache
 * calibration (first forward computed) and NVlabs' RTX4090 TeaCache
 * (identity coefficients, first 5 and last 1 forwards computed). */
typedef struct preset {
    mm_step_cache_kind kind;
    const char *name;
    double threshold;
    int warmup, final, max_cached;
    int n_coeffs;
    double coeffs[MM_STEP_CACHE_MAX_COEFFS];
} preset;

static const preset presets[] = {
    {MM_STEP_CACHE_FBC, "high", 0.04, 4, 0, 1, 0, {0}},
    {MM_STEP_CACHE_FBC, "medium", 0.12, 4, 0, 3, 0, {0}},
    {MM_STEP_CACHE_FBC, "low", 0.24, 4, 0, 3, 0, {0}},
    {MM_STEP_CACHE_FBC, "sana", 0.08, 0, 0, 0, 0, {0}},
    {MM_STEP_CACHE_TEACACHE,
     "vllm",
     0.17,
     1,
     0,
     0,
     5,
     {2283.704065852778, -777.5977277886368, 94.08414741359490, -4.232669906169421, 0.2173782527946167}},
    {MM_STEP_CACHE_TEACACHE, "rtx4090", 0.10, 5, 1, 0, 2, {1.0, 0.0}},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])
/* What a bare "fbc" / "teacache" means: the most conservative published setting. */
enum { PRESET_FBC_HIGH = 0, PRESET_TEACACHE_VLLM = 4 };

/* A threshold without a preset keeps the guards of SGLang's medium/low
 * profiles (warm-up 4, at most 3 in a row; TeaCache: vLLM-Omni's, with its
 * FL2VA coefficients) and adds the last forward: it steps to sigma 0, so
 * what it predicts is the output itself. */
static const preset numeric_fbc = {MM_STEP_CACHE_FBC, "", 0, 4, 1, 3, 0, {0}};

static const char *kind_name(mm_step_cache_kind k)
{
    return k == MM_STEP_CACHE_FBC ? "fbc" : k == MM_STEP_CACHE_TEACACHE ? "teacache" : "off";
}

static void apply_preset(mm_step_cache_config *c, const preset *p)
{
    memset(c, 0, sizeof *c);
    c->kind = p->kind;
    snprintf(c->preset, sizeof c->preset, "%s", p->name);
    c->threshold = p->threshold;
    c->warmup = p->warmup;
    c->final = p->final;
    c->max_cached = p->max_cached;
    c->n_coeffs = p->n_coeffs;
    memcpy(c->coeffs, p->coeffs, sizeof c->coeffs);
}

static void apply_threshold(mm_step_cache_config *c, mm_step_cache_kind kind, double threshold)
{
    if (kind == MM_STEP_CACHE_FBC) {
        apply_preset(c, &numeric_fbc);
    } else {
        apply_preset(c, &presets[PRESET_TEACACHE_VLLM]);
        c->final = 1;
    }
    c->preset[0] = '\0';
    c->threshold = threshold;
}

/* The configuration the head of a spec names ("fbc", "fbc:low", "teacache:0.2"). */
static int parse_head(const char *head, size_t len, mm_step_cache_config *c, mm_error *err)
{
    if ((len == 3 && strncmp(head, "off", 3) == 0) || (len == 4 && strncmp(head, "none", 4) == 0)) {
        memset(c, 0, sizeof *c);
        return 0;
    }
    const char *colon = memchr(head, ':', len);
    const size_t kind_len = colon ? (size_t)(colon - head) : len;
    mm_step_cache_kind kind;
    if (kind_len == 3 && strncmp(head, "fbc", 3) == 0)
        kind = MM_STEP_CACHE_FBC;
    else if (kind_len == 8 && strncmp(head, "teacache", 8) == 0)
        kind = MM_STEP_CACHE_TEACACHE;
    else
        return mm_fail(err, "unknown cache method '%.*s'", (int)kind_len, head);
    const char *arg = colon ? colon + 1 : NULL;
    const size_t arg_len = colon ? len - kind_len - 1 : 0;
    if (!arg || arg_len == 0) { /* the conservative default of each method */
        apply_preset(c, &presets[kind == MM_STEP_CACHE_FBC ? PRESET_FBC_HIGH : PRESET_TEACACHE_VLLM]);
        return arg ? mm_fail(err, "nothing after '%s:'", kind_name(kind)) : 0;
    }
    for (size_t i = 0; i < N_PRESETS; i++)
        if (presets[i].kind == kind && strlen(presets[i].name) == arg_len &&
            strncmp(presets[i].name, arg, arg_len) == 0) {
            apply_preset(c, &presets[i]);
            return 0;
        }
    char num[64], names[64] = "";
    for (size_t i = 0, k = 0; i < N_PRESETS && k < sizeof names; i++)
        if (presets[i].kind == kind)
            k += (size_t)snprintf(names + k, sizeof names - k, "%s%s", k ? ", " : "", presets[i].name);
    char *end = NULL;
    double v = 0;
    if (arg_len < sizeof num) {
        memcpy(num, arg, arg_len);
        num[arg_len] = '\0';
        errno = 0;
        v = strtod(num, &end);
    }
    if (!end || end == num || *end || errno)
        return mm_fail(err, "'%.*s' is neither a number nor one of %s's presets (%s)", (int)arg_len, arg,
                       kind_name(kind), names);
    if (!isfinite(v) || v < 0)
        return mm_fail(err, "threshold %s is out of range", num);
    apply_threshold(c, kind, v);
    return 0;
}

/* ",warmup=N" and friends. */
static int parse_setting(const char *s, size_t len, mm_step_cache_config *c, unsigned *seen, mm_error *err)
{
    static const char *const keys[3] = {"warmup", "final", "max-cached"};
    int *fields[3] = {&c->warmup, &c->final, &c->max_cached};
    const char *eq = memchr(s, '=', len);
    const size_t key_len = eq ? (size_t)(eq - s) : len;
    for (int k = 0; k < 3; k++) {
        if (strlen(keys[k]) != key_len || strncmp(keys[k], s, key_len) != 0)
            continue;
        if (*seen & (1u << k))
            return mm_fail(err, "%s given twice", keys[k]);
        *seen |= 1u << k;
        char num[32];
        const size_t vlen = eq ? len - key_len - 1 : 0;
        if (!eq || vlen == 0 || vlen >= sizeof num)
            return mm_fail(err, "%s needs a value (%s=N)", keys[k], keys[k]);
        memcpy(num, eq + 1, vlen);
        num[vlen] = '\0';
        char *end;
        errno = 0;
        const long v = strtol(num, &end, 10);
        if (end == num || *end || errno || v < 0 || v > MM_STEP_CACHE_MAX_FORWARDS)
            return mm_fail(err, "%s=%s is not an integer 0..%d", keys[k], num, MM_STEP_CACHE_MAX_FORWARDS);
        *fields[k] = (int)v;
        return 0;
    }
    return mm_fail(err, "unknown setting '%.*s'", (int)len, s);
}

int mm_step_cache_parse(const char *spec, mm_step_cache_config *out, mm_error *err)
{
    mm_step_cache_config c;
    memset(&c, 0, sizeof c);
    if (!spec || !*spec)
        return mm_fail(err, "empty");
    const char *comma = strchr(spec, ',');
    const size_t head_len = comma ? (size_t)(comma - spec) : strlen(spec);
    if (parse_head(spec, head_len, &c, err) != 0)
        return -1;
    unsigned seen = 0;
    for (const char *s = comma; s; s = comma) {
        s++;
        comma = strchr(s, ',');
        const size_t len = comma ? (size_t)(comma - s) : strlen(s);
        if (c.kind == MM_STEP_CACHE_OFF)
            return mm_fail(err, "'off' takes no settings");
        if (len == 0)
            return mm_fail(err, "an empty setting");
        if (parse_setting(s, len, &c, &seen, err) != 0)
            return -1;
    }
    if (mm_step_cache_check(&c, false, err) != 0)
        return -1;
    *out = c;
    return 0;
}

int mm_step_cache_check(const mm_step_cache_config *c, bool ref2va, mm_error *err)
{
    if (c->kind == MM_STEP_CACHE_OFF)
        return 0;
    if (c->kind != MM_STEP_CACHE_FBC && c->kind != MM_STEP_CACHE_TEACACHE)
        return mm_fail(err, "step cache method %d is not fbc or teacache", (int)c->kind);
    if (!isfinite(c->threshold) || c->threshold < 0)
        return mm_fail(err, "step cache threshold %g is out of range (a number >= 0)", c->threshold);
    const int ints[3] = {c->warmup, c->final, c->max_cached};
    for (int i = 0; i < 3; i++)
        if (ints[i] < 0 || ints[i] > MM_STEP_CACHE_MAX_FORWARDS)
            return mm_fail(err, "step cache %s %d is not an integer 0..%d",
                           i == 0 ? "warm-up" : i == 1 ? "final" : "max-cached", ints[i], MM_STEP_CACHE_MAX_FORWARDS);
    if (c->kind == MM_STEP_CACHE_TEACACHE) {
        if (c->n_coeffs < 1 || c->n_coeffs > MM_STEP_CACHE_MAX_COEFFS)
            return mm_fail(err, "TeaCache needs 1..%d polynomial coefficients, not %d", MM_STEP_CACHE_MAX_COEFFS,
                           c->n_coeffs);
        for (int i = 0; i < c->n_coeffs; i++)
            if (!isfinite(c->coeffs[i]))
                return mm_fail(err, "TeaCache coefficient %d is not a finite number", i);
        if (ref2va)
            return mm_fail(err, "teacache is calibrated for the fl2va model only (vLLM-Omni runs ref2va uncached); "
                                "use fbc with ref2va");
    }
    return 0;
}

void mm_step_cache_name(const mm_step_cache_config *c, char *buf, size_t n)
{
    if (c->kind == MM_STEP_CACHE_OFF) {
        snprintf(buf, n, "off");
        return;
    }
    /* The settings that differ from what the head alone gives, so the name parses back to c. */
    mm_step_cache_config base = {0};
    char head[48];
    if (c->preset[0]) {
        snprintf(head, sizeof head, "%s:%s", kind_name(c->kind), c->preset);
    } else {
        /* the shortest form that reads back as the same number */
        snprintf(head, sizeof head, "%s:%.6g", kind_name(c->kind), c->threshold);
        if (strtod(strchr(head, ':') + 1, NULL) != c->threshold)
            snprintf(head, sizeof head, "%s:%.17g", kind_name(c->kind), c->threshold);
    }
    if (parse_head(head, strlen(head), &base, NULL) != 0)
        memset(&base, 0, sizeof base);
    int k = snprintf(buf, n, "%s", head);
    const int mine[3] = {c->warmup, c->final, c->max_cached}, theirs[3] = {base.warmup, base.final, base.max_cached};
    static const char *const keys[3] = {"warmup", "final", "max-cached"};
    for (int i = 0; i < 3; i++)
        if (mine[i] != theirs[i] && k >= 0 && (size_t)k < n)
            k += snprintf(buf + k, n - (size_t)k, ",%s=%d", keys[i], mine[i]);
}

void mm_step_cache_describe(const mm_step_cache_config *c, char *buf, size_t n)
{
    if (c->kind == MM_STEP_CACHE_OFF) {
        snprintf(buf, n, "off");
        return;
    }
    char name[48], limit[48];
    mm_step_cache_name(c, name, sizeof name);
    if (c->max_cached)
        snprintf(limit, sizeof limit, "at most %d skipped in a row", c->max_cached);
    else
        snprintf(limit, sizeof limit, "no limit in a row");
    if (c->kind == MM_STEP_CACHE_FBC) {
        snprintf(buf, n, "%s: FirstBlockCache, skip while the first block's residual changes by less than %g; "
                 "first %d and last %d forwards computed, %s", name, c->threshold, c->warmup, c->final, limit);
        return;
    }
    const preset *fl2va = &presets[PRESET_TEACACHE_VLLM];
    const char *coeffs = c->n_coeffs == 2 && c->coeffs[0] == 1.0 && c->coeffs[1] == 0.0 ? "identity"
                         : c->n_coeffs == fl2va->n_coeffs &&
                                 memcmp(c->coeffs, fl2va->coeffs, sizeof(double) * (size_t)c->n_coeffs) == 0
                             ? "vLLM-Omni FL2VA"
                             : "custom";
    snprintf(buf, n, "%s: TeaCache, skip while the accumulated rescaled change of block 0's modulated input stays "
             "below %g (%s coefficients); first %d and last %d forwards computed, %s", name, c->threshold, coeffs,
             c->warmup, c->final, limit);
}
