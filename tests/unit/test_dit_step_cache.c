/* Step caching (model/dit/step_cache.h). The policy: presets read as their
 * sources publish them, specs parse back from their names, bad specs are
 * refused in plain words, and the decision rule's guards (warm-up, final
 * forwards, skips in a row, references refreshed on computed forwards only
 * for FBC and on every forward for TeaCache) on sums chosen by hand. Then
 * the real DiT (the kit's tiny checkpoint) through a real sampling loop:
 * threshold 0 gives the uncached bits; a huge threshold skips exactly what
 * the guards leave; the skip lists equal a double-precision replay of the
 * rule on the recorded block-0 residuals (FBC) and probes (TeaCache,
 * recomputed from block 0's input, its AdaLN rows and norm1); and a skipped
 * forward's block-stack output is h1 + D (or h_in + D) computed here from
 * the recorded tensors. Random weights say nothing of quality: nothing here
 * measures it. */
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/device.h"
#include "backend/ops.h"
#include "core/dtype.h"
#include "model/dit/dit.h"
#include "model/dit/step_cache.h"
#include "test.h"
#include "test_step_cache_run.h"

static json_t *manifest;
static mm_safetensors *cases, *weights;
static mm_ctx *ctx;
static mm_dit *dit;
static kit_forward_case kf;
static const char *CASE = "fl2va_first_step2";
/* the CPU's; the GPU test sets its own (f32 row sums on the device) */
static double rel_tolerance = 1e-5, margin_needed = 1e-4;
#define STEPS 10 /* grid points: 9 forwards */
#define FORWARDS (STEPS - 1)

static mm_step_cache_config parse(const char *spec)
{
    mm_step_cache_config c;
    mm_error err = {{0}};
    memset(&c, 0, sizeof c);
    if (mm_step_cache_parse(spec, &c, &err) != 0)
        printf("     parse %s: %s\n", spec, err.msg);
    return c;
}

/* ------------------------------------------------------------------ policy */

static void test_presets_read_as_published(void)
{
    struct {
        const char *spec;
        mm_step_cache_kind kind;
        double threshold;
        int warmup, final, max_cached;
    } want[] = {
        {"fbc", MM_STEP_CACHE_FBC, 0.04, 4, 0, 1},       {"fbc:high", MM_STEP_CACHE_FBC, 0.04, 4, 0, 1},
        {"fbc:medium", MM_STEP_CACHE_FBC, 0.12, 4, 0, 3}, {"fbc:low", MM_STEP_CACHE_FBC, 0.24, 4, 0, 3},
        {"fbc:sana", MM_STEP_CACHE_FBC, 0.08, 0, 0, 0},   {"fbc:0.1", MM_STEP_CACHE_FBC, 0.1, 4, 1, 3},
        {"teacache", MM_STEP_CACHE_TEACACHE, 0.17, 1, 0, 0},
        {"teacache:rtx4090", MM_STEP_CACHE_TEACACHE, 0.10, 5, 1, 0},
        {"teacache:0.3", MM_STEP_CACHE_TEACACHE, 0.3, 1, 1, 0},
        {"fbc:low,warmup=6,final=2,max-cached=0", MM_STEP_CACHE_FBC, 0.24, 6, 2, 0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        mm_step_cache_config c = parse(want[i].spec);
        MM_EXPECT(c.kind == want[i].kind && c.threshold == want[i].threshold && c.warmup == want[i].warmup &&
                      c.final == want[i].final && c.max_cached == want[i].max_cached,
                  "%s: kind %d threshold %g warm-up %d final %d max-cached %d", want[i].spec, (int)c.kind, c.threshold,
                  c.warmup, c.final, c.max_cached);
    }
    const double fl2va[5] = {2283.704065852778, -777.5977277886368, 94.08414741359490, -4.232669906169421,
                             0.2173782527946167};
    mm_step_cache_config t = parse("teacache:vllm");
    MM_EXPECT(t.n_coeffs == 5 && memcmp(t.coeffs, fl2va, sizeof fl2va) == 0, "vLLM-Omni's FL2VA coefficients");
    t = parse("teacache:rtx4090");
    MM_EXPECT(t.n_coeffs == 2 && t.coeffs[0] == 1.0 && t.coeffs[1] == 0.0, "identity coefficients");
    MM_EXPECT(parse("off").kind == MM_STEP_CACHE_OFF && parse("none").kind == MM_STEP_CACHE_OFF, "off");
    mm_step_cache_config zero;
    memset(&zero, 0, sizeof zero);
    char d[300];
    mm_step_cache_describe(&zero, d, sizeof d);
    MM_EXPECT(strcmp(d, "off") == 0, "a zeroed configuration is off: %s", d);
}

static void test_names_parse_back(void)
{
    const char *specs[] = {"fbc", "fbc:medium,warmup=2", "fbc:0.1", "fbc:0.123456789", "teacache:0.3,max-cached=4",
                           "teacache:rtx4090,final=0", "fbc:sana,final=1", "fbc:1e+30,warmup=2,final=1,max-cached=2"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        mm_step_cache_config a = parse(specs[i]), b;
        char name[64];
        mm_step_cache_name(&a, name, sizeof name);
        b = parse(name);
        MM_EXPECT(memcmp(&a, &b, sizeof a) == 0, "%s → %s parses back to something else", specs[i], name);
    }
    char name[64];
    mm_step_cache_config c = parse("fbc:medium,warmup=4");
    mm_step_cache_name(&c, name, sizeof name);
    MM_EXPECT(strcmp(name, "fbc:medium") == 0, "a setting equal to the preset's is not repeated: %s", name);
}

static void test_bad_specs_are_refused_in_plain_words(void)
{
    struct {
        const char *spec, *says;
    } bad[] = {
        {"", "empty"},
        {"fbc:", "nothing after 'fbc:'"},
        {"fbc:fast", "'fast' is neither a number nor one of fbc's presets (high, medium, low, sana)"},
        {"teacache:high", "one of teacache's presets (vllm, rtx4090)"},
        {"magcache", "unknown cache method 'magcache'"},
        {"fbc:-0.5", "threshold -0.5 is out of range"},
        {"fbc:inf", "out of range"},
        {"fbc:nan", "out of range"},
        {"fbc,warmup", "warmup needs a value"},
        {"fbc,warmup=-1", "warmup=-1 is not an integer 0..256"},
        {"fbc,final=3.5", "final=3.5 is not an integer"},
        {"fbc,max-cached=999", "max-cached=999 is not an integer 0..256"},
        {"fbc,warmup=1,warmup=2", "warmup given twice"},
        {"fbc,speed=2", "unknown setting 'speed=2'"},
        {"fbc,", "an empty setting"},
        {"off,final=1", "'off' takes no settings"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mm_step_cache_config c;
        mm_error err = {{0}};
        const int rc = mm_step_cache_parse(bad[i].spec, &c, &err);
        MM_EXPECT(rc != 0 && strstr(err.msg, bad[i].says), "'%s': rc %d, message: %s", bad[i].spec, rc, err.msg);
    }
    /* filled in by code: the same checks, and the partition's */
    mm_step_cache_config c = parse("teacache");
    mm_error err = {{0}};
    MM_EXPECT(mm_step_cache_check(&c, true, &err) != 0 && strstr(err.msg, "fl2va model only") &&
                  strstr(err.msg, "use fbc"),
              "TeaCache on ref2va: %s", err.msg);
    c = parse("fbc");
    MM_EXPECT(mm_step_cache_check(&c, true, &err) == 0, "FBC runs on ref2va");
    c.threshold = -1;
    MM_EXPECT(mm_step_cache_check(&c, false, &err) != 0 && strstr(err.msg, "out of range"), "%s", err.msg);
    c = parse("teacache");
    c.n_coeffs = 0;
    MM_EXPECT(mm_step_cache_check(&c, false, &err) != 0 && strstr(err.msg, "coefficients"), "%s", err.msg);
}

/* Decisions on sums chosen by hand: every segment's norm 1, diff `diff`. */
static void decide_all(mm_step_cache_state *s, int n, double diff, char *pattern)
{
    for (int i = 0; i < n; i++) {
        mm_step_cache_sums sums = {{diff, diff, diff}, {1, 1, 1}};
        pattern[i] = mm_step_cache_decide(s, i, &sums).skip ? '1' : '0';
    }
    pattern[n] = '\0';
}

static void test_rule_guards_on_hand_made_sums(void)
{
    mm_step_cache_state s;
    char p[64];
    mm_step_cache_config c = parse("fbc:1e30,warmup=3,final=2,max-cached=2");
    mm_step_cache_state_init(&s, &c, 14);
    decide_all(&s, 14, 0.5, p);
    MM_EXPECT(strcmp(p, "00011011011000") == 0, "warm-up 3, two skipped in a row, last 2 computed: %s", p);
    c = parse("fbc:1e30,warmup=1,final=0,max-cached=0");
    mm_step_cache_state_init(&s, &c, 8);
    decide_all(&s, 8, 0.5, p);
    MM_EXPECT(strcmp(p, "01111111") == 0, "no limit: %s", p);
    c = parse("fbc:0,warmup=0,final=0,max-cached=0");
    mm_step_cache_state_init(&s, &c, 8);
    decide_all(&s, 8, 0.0, p);
    MM_EXPECT(strcmp(p, "00000000") == 0, "threshold 0 never skips, even with nothing changed: %s", p);
    c = parse("fbc:1e30,warmup=0,final=0,max-cached=0");
    mm_step_cache_state_init(&s, &c, 6);
    decide_all(&s, 6, NAN, p);
    MM_EXPECT(strcmp(p, "000000") == 0, "sums gone bad compute: %s", p);
    mm_step_cache_state_init(&s, &c, 0); /* forward count unknown: no final guard */
    decide_all(&s, 4, 0.5, p);
    MM_EXPECT(strcmp(p, "0111") == 0, "unknown count: %s", p);

    /* FBC compares with the last computed forward; TeaCache with the last forward */
    for (int tea = 0; tea < 2; tea++) {
        c = parse(tea ? "teacache:rtx4090" : "fbc:0.5,warmup=1,final=0,max-cached=0");
        c.warmup = 1;
        c.final = 0;
        c.threshold = 0.5;
        mm_step_cache_state_init(&s, &c, 0);
        const double norms[3] = {10, 20, 40}, diffs[3] = {0, 1, 2};
        mm_step_decision d[3];
        for (int i = 0; i < 3; i++) {
            mm_step_cache_sums sums = {{diffs[i], 0, 0}, {norms[i], 0, 0}};
            d[i] = mm_step_cache_decide(&s, i, &sums);
        }
        MM_EXPECT(!d[0].skip && d[0].forced && isnan(d[0].rel), "%d: forward 0 computes", tea);
        MM_EXPECT(d[1].skip && fabs(d[1].rel - 0.1) < 1e-15, "%d: forward 1 skips at rel %g", tea, d[1].rel);
        const double want = tea ? 2.0 / 20 : 2.0 / 10;
        MM_EXPECT(fabs(d[2].rel - want) < 1e-15, "%s: rel %g, want %g", tea ? "TeaCache" : "FBC", d[2].rel, want);
        MM_EXPECT(tea ? fabs(d[2].acc - 0.2) < 1e-15 && d[2].skip : d[2].skip, "%d: forward 2 (acc %g)", tea,
                  d[2].acc);
    }

    /* TeaCache accumulates |poly(rel)| and resets when it computes */
    c = parse("teacache:rtx4090");
    c.warmup = 1;
    c.final = 0;
    c.threshold = 0.1;
    mm_step_cache_state_init(&s, &c, 0);
    decide_all(&s, 10, 0.04, p);
    MM_EXPECT(strcmp(p, "0110110110") == 0, "0.04 a forward against 0.1: %s", p);
    /* the FL2VA polynomial, evaluated independently */
    c = parse("teacache:vllm");
    c.warmup = 1;
    c.threshold = 1e30;
    mm_step_cache_state_init(&s, &c, 0);
    double expect = 0;
    for (int i = 0; i < 3; i++) {
        mm_step_cache_sums sums = {{0.05, 0, 0}, {1, 0, 0}};
        mm_step_decision d = mm_step_cache_decide(&s, i, &sums);
        if (i == 0)
            continue;
        double v = 0;
        for (int k = 0; k < 5; k++)
            v += c.coeffs[k] * pow(0.05, 4 - k);
        expect += fabs(v);
        MM_EXPECT(fabs(d.acc - expect) < 1e-12, "forward %d: acc %.15g, want %.15g", i, d.acc, expect);
    }
    /* the record */
    mm_step_cache_report rep;
    mm_step_cache_report_init(&rep);
    mm_step_decision sk = {.skip = true, .rel = 0.01}, co = {.rel = 0.5};
    for (int i = 0; i < 9; i++)
        mm_step_cache_report_add(&rep, i, (i >= 2 && i <= 4) || i == 6 ? &sk : &co);
    char list[64];
    mm_step_cache_format_skipped(rep.skipped_bits, 9, list, sizeof list);
    MM_EXPECT(rep.decided == 9 && rep.skipped == 4 && strcmp(list, "3-5, 7") == 0, "%d of %d: %s", rep.skipped,
              rep.decided, list);
    mm_step_cache_report_init(&rep);
    mm_step_cache_format_skipped(rep.skipped_bits, 9, list, sizeof list);
    MM_EXPECT(strcmp(list, "none") == 0, "%s", list);
}

/* --------------------------------------------------------- the real DiT */

/* One sampling run of the kit case, cached as c says (NULL: off). */
static int run(const mm_step_cache_config *c, bool record, sc_run *r, mm_step_cache_report *rep, mm_error *err)
{
    memset(r, 0, sizeof *r);
    r->f = &kf;
    r->cfg = mm_dit_get_config(dit);
    r->record = record;
    r->gpu = mm_ctx_device(ctx).kind == MM_DEVICE_CUDA ? ctx : NULL;
    mm_dit_debug dbg = {sc_capture, r};
    if (mm_dit_request_begin(dit, ctx, &kf.l, &kf.text, record ? &dbg : NULL, &r->dreq, err) != 0)
        return -1;
    int rc = mm_dit_request_set_step_cache(r->dreq, c, FORWARDS, err);
    if (rc == 0)
        rc = sc_sample(r, STEPS, err);
    if (rep) {
        const mm_step_cache_report *got = mm_dit_request_step_cache_report(r->dreq);
        if (got)
            *rep = *got;
        else
            mm_step_cache_report_init(rep);
    }
    mm_dit_request_end(r->dreq);
    r->dreq = NULL;
    return rc;
}

static bool same_rows(const sc_run *a, const sc_run *b)
{
    const mm_dit_config *c = mm_dit_get_config(dit);
    return memcmp(a->video, b->video, sizeof(float) * (size_t)(kf.l.video_rows * c->video_row_width)) == 0 &&
           memcmp(a->audio, b->audio, sizeof(float) * (size_t)(kf.l.audio_rows * c->audio_row_width)) == 0;
}

/* Threshold 0 never skips, so every forward is compared with the one
 * before: these are the rel values of the uncached trajectory (FBC's, then
 * TeaCache's), kept for the replay tests to pick their thresholds from. */
static const char *const zero_specs[2] = {"fbc:0,warmup=0,final=0,max-cached=0", "teacache:0,warmup=0,final=0"};
static mm_step_cache_report zero_reports[2];
static bool have_zero_report[2];

static void test_threshold_zero_is_bit_identical_to_no_cache(void)
{
    sc_run plain, cached;
    mm_error err = {{0}};
    MM_REQUIRE(run(NULL, false, &plain, NULL, &err) == 0, "%s", err.msg);
    for (int i = 0; i < 2; i++) {
        const char *const *specs = zero_specs;
        mm_step_cache_config c = parse(specs[i]);
        mm_step_cache_report rep;
        MM_EXPECT(run(&c, false, &cached, &rep, &err) == 0, "%s: %s", specs[i], err.msg);
        zero_reports[i] = rep;
        have_zero_report[i] = rep.decided == FORWARDS;
        MM_EXPECT(rep.decided == FORWARDS && rep.skipped == 0, "%s: %d of %d skipped", specs[i], rep.skipped,
                  rep.decided);
        MM_EXPECT(cached.video && same_rows(&plain, &cached), "%s: the final rows differ from the uncached run's",
                  specs[i]);
        sc_run_free(&cached);
    }
    sc_run_free(&plain);
}

static void test_huge_threshold_skips_all_the_guards_leave(void)
{
    const struct {
        const char *spec, *pattern;
    } want[] = {
        {"fbc:1e30,warmup=2,final=1,max-cached=2", "001101100"},
        {"fbc:1e30,warmup=3,final=2,max-cached=0", "000111100"},
        {"teacache:1e30,warmup=1,final=2,max-cached=3", "011101100"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        mm_step_cache_config c = parse(want[i].spec);
        sc_run r;
        mm_step_cache_report rep;
        mm_error err = {{0}};
        MM_EXPECT(run(&c, false, &r, &rep, &err) == 0, "%s: %s", want[i].spec, err.msg);
        char got[SC_MAX_FORWARDS + 1];
        sc_pattern(&rep, FORWARDS, got);
        MM_EXPECT(strcmp(got, want[i].pattern) == 0, "%s: skipped %s, want %s", want[i].spec, got, want[i].pattern);
        sc_run_free(&r);
    }
}

/* Σ over the rows of segment g (tags) of f(row); the kit layout's tags. */
typedef struct ref_state {
    bool have_ref;
    double *ref; /* [S·H] */
    double ref_norm;
    double acc;
    int in_a_row;
} ref_state;

/* rel of cur against the reference in double (all rows), or NAN without one. */
static double rel_double(const ref_state *s, const double *cur, int64_t n)
{
    if (!s->have_ref)
        return NAN;
    double diff = 0;
    for (int64_t i = 0; i < n; i++)
        diff += fabs(cur[i] - s->ref[i]);
    return diff / (s->ref_norm > 1e-8 ? s->ref_norm : 1e-8);
}

static double abs_sum(const double *v, int64_t n)
{
    double s = 0;
    for (int64_t i = 0; i < n; i++)
        s += fabs(v[i]);
    return s;
}

/* R = block0_out − block0_in of a recorded forward, in double. */
static void fbc_residual(const sc_record *rec, int64_t n, double *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = (double)rec->block0_out[i] - (double)rec->block0_in[i];
}

/* TeaCache's probe recomputed from block 0's recorded input and AdaLN rows
 * and the checkpoint's norm1, in double, rounded to bf16 as block 0 sees it. */
static void teacache_probe(const sc_record *rec, double *out)
{
    const mm_dit_config *c = mm_dit_get_config(dit);
    const int64_t S = kf.l.rows, H = c->hidden;
    const uint16_t *wb = mm_st_find(weights, "blocks.0.norm1.weight")->data; /* bf16, found at setup */
    float uniq[MM_DIT_MAX_TIMESTEPS];
    int32_t *ti = malloc(sizeof(int32_t) * (size_t)S);
    mm_dit_unique_timesteps(rec->row_t, S, uniq, MM_DIT_MAX_TIMESTEPS, ti);
    for (int64_t r = 0; r < S; r++) {
        const float *x = rec->block0_in + r * H;
        double ms = 0;
        for (int64_t j = 0; j < H; j++)
            ms += (double)x[j] * x[j];
        const double inv = 1.0 / sqrt(ms / (double)H + c->norm_eps);
        const int64_t row = (int64_t)ti[r] * c->modalities + kf.l.tags[r];
        const float *mod = rec->adaln + row * 6 * H; /* (shift, scale, ...) of that row */
        for (int64_t j = 0; j < H; j++) {
            const double shift = mm_round_bf16(mod[j]), scale = mm_round_bf16(mod[H + j]);
            const double v = (double)x[j] * inv * mm_bf16_to_f32(wb[j]) * (1.0 + scale) + shift;
            out[r * H + j] = mm_round_bf16((float)v);
        }
    }
    free(ti);
}

/* The rule, written again in double on the recorded tensors: the skip list
 * of a recorded run (as '0'/'1'), its rel values, and the smallest distance
 * of a deciding value to the threshold (relative). */
typedef struct replay_out {
    char pattern[SC_MAX_FORWARDS + 1];
    double rel[SC_MAX_FORWARDS];
    double margin;             /* smallest relative distance of a deciding value to the threshold */
    int skips, threshold_computes; /* forwards the threshold decided, each way */
} replay_out;

static void replay(const sc_run *r, const mm_step_cache_config *c, replay_out *o)
{
    const mm_dit_config *cfg = mm_dit_get_config(dit);
    const int64_t n = kf.l.rows * cfg->hidden;
    const bool fbc = c->kind == MM_STEP_CACHE_FBC;
    ref_state s = {.ref = malloc(sizeof(double) * (size_t)n)};
    double *cur = malloc(sizeof(double) * (size_t)n);
    memset(o, 0, sizeof *o);
    o->margin = INFINITY;
    for (int f = 0; f < r->forwards; f++) {
        if (fbc)
            fbc_residual(&r->rec[f], n, cur);
        else
            teacache_probe(&r->rec[f], cur);
        const double rel = rel_double(&s, cur, n);
        o->rel[f] = rel;
        const bool forced = !s.have_ref || f < c->warmup || f >= r->forwards - c->final;
        const bool room = c->max_cached == 0 || s.in_a_row < c->max_cached;
        bool skip;
        if (fbc) {
            skip = !forced && rel < c->threshold && room;
            if (!forced && room)
                o->margin = fmin(o->margin, fabs(rel - c->threshold) / c->threshold);
        } else {
            s.acc = forced ? 0 : s.acc + fabs(rel); /* identity coefficients */
            skip = !forced && s.acc < c->threshold && room;
            if (!forced && room)
                o->margin = fmin(o->margin, fabs(s.acc - c->threshold) / c->threshold);
            if (!skip)
                s.acc = 0;
        }
        if (!forced && room)
            ++*(skip ? &o->skips : &o->threshold_computes);
        o->pattern[f] = skip ? '1' : '0';
        s.in_a_row = skip ? s.in_a_row + 1 : 0;
        if (!fbc || !skip) {
            memcpy(s.ref, cur, sizeof(double) * (size_t)n);
            s.ref_norm = abs_sum(cur, n);
            s.have_ref = true;
        }
    }
    o->pattern[r->forwards] = '\0';
    free(cur);
    free(s.ref);
}

/* Skipped forwards: blocks_out == bf16(base + D) with D = blocks_out − base
 * of the last computed forward (base: block 0's output for FBC, its input
 * for TeaCache), both formed here in f32 from the recorded bf16 values. */
static int64_t skipped_mismatches(const sc_run *r, const char *pattern, bool fbc, int *checked)
{
    const int64_t n = kf.l.rows * mm_dit_get_config(dit)->hidden;
    int64_t bad = 0;
    int last = -1;
    *checked = 0;
    for (int f = 0; f < r->forwards; f++) {
        if (pattern[f] == '0') {
            last = f;
            continue;
        }
        if (last < 0)
            return -1;
        const sc_record *p = &r->rec[last], *s = &r->rec[f];
        const float *pbase = fbc ? p->block0_out : p->block0_in, *sbase = fbc ? s->block0_out : s->block0_in;
        for (int64_t i = 0; i < n; i++) {
            const float d = p->blocks_out[i] - pbase[i];
            if (mm_round_bf16(sbase[i] + d) != s->blocks_out[i])
                bad++;
        }
        ++*checked;
    }
    return bad;
}

/* A threshold in the middle of a plain run's rel values (so the cached run
 * both skips and computes), its skip list against the double replay. */
static void check_against_replay(const char *base_spec, bool fbc)
{
    mm_error err = {{0}};
    sc_run r;
    mm_step_cache_report rep;
    mm_step_cache_config c = parse(base_spec);
    const int k = fbc ? 0 : 1;
    if (!have_zero_report[k]) {
        mm_step_cache_config zero = parse(zero_specs[k]);
        MM_REQUIRE(run(&zero, false, &r, &zero_reports[k], &err) == 0, "%s", err.msg);
        sc_run_free(&r);
        have_zero_report[k] = true;
    }
    double rels[SC_MAX_FORWARDS];
    for (int f = 0; f < FORWARDS; f++)
        rels[f] = zero_reports[k].rel[f];
    const double mid = sc_between_middle(rels, FORWARDS);
    MM_REQUIRE(isfinite(mid) && mid > 0, "rel values of the plain run: median %g", mid);
    c.threshold = fbc ? mid : 1.5 * mid;
    MM_REQUIRE(run(&c, true, &r, &rep, &err) == 0, "%s", err.msg);

    char got[SC_MAX_FORWARDS + 1];
    replay_out want;
    replay(&r, &c, &want);
    sc_pattern(&rep, FORWARDS, got);
    printf("     %s threshold %.4g: engine %s, double replay %s (closest deciding value %.2g%% from the threshold)\n",
           fbc ? "FBC" : "TeaCache", c.threshold, got, want.pattern, 100 * want.margin);
    MM_EXPECT(want.margin > margin_needed, "a deciding value within %.0e of the threshold: the comparison cannot tell",
              margin_needed);
    MM_EXPECT(strcmp(got, want.pattern) == 0, "skip lists differ: engine %s, double replay %s", got, want.pattern);
    MM_EXPECT(want.skips > 0 && want.threshold_computes > 0,
              "the threshold must decide both ways: %d skips, %d computes", want.skips, want.threshold_computes);
    double worst = 0;
    for (int f = 0; f < FORWARDS; f++)
        if (isfinite(want.rel[f]))
            worst = fmax(worst, fabs(rep.rel[f] - want.rel[f]) / want.rel[f]);
    MM_EXPECT(worst < rel_tolerance, "rel values differ from the double replay by up to %.3g (relative)", worst);
    int checked = 0;
    const int64_t bad = skipped_mismatches(&r, got, fbc, &checked);
    MM_EXPECT(bad == 0 && checked > 0, "skipped forwards: %lld values of %d forwards differ from base + D",
              (long long)bad, checked);
    sc_run_free(&r);
}

static void test_fbc_skips_as_a_double_replay_of_the_rule(void)
{
    check_against_replay("fbc:0,warmup=2,final=1,max-cached=2", true);
}

static void test_teacache_skips_as_a_double_replay_of_the_rule(void)
{
    /* identity coefficients: the replay adds rel itself */
    check_against_replay("teacache:rtx4090,warmup=1,final=1", false);
}

/* On the GPU host: the same checks on the CUDA forward (the fused block
 * path, the device's f32 row sums). Silent without a GPU unless
 * MMH3_REQUIRE_GPU=1. */
static void test_the_same_on_the_gpu(void)
{
    if (mm_cuda_device_count() == 0) {
        const char *req = getenv("MMH3_REQUIRE_GPU");
        MM_EXPECT(!(req && strcmp(req, "1") == 0), "MMH3_REQUIRE_GPU=1 but no GPU is usable");
        return;
    }
    char ckpt[1024];
    snprintf(ckpt, sizeof ckpt, "%s/dit/dit.safetensors", mm_test_data_dir());
    mm_ctx *cpu_ctx = ctx, *g = NULL;
    mm_dit *cpu_dit = dit, *gdit = NULL;
    mm_error err = {{0}};
    MM_REQUIRE(mm_ctx_create(&g, mm_cuda(0), 0, &err) == 0 && mm_dit_load(&gdit, ckpt, g, NULL, &err) == 0, "%s",
               err.msg);
    ctx = g;
    dit = gdit;
    memset(have_zero_report, 0, sizeof have_zero_report);
    rel_tolerance = 1e-4;
    margin_needed = 1e-3;
    test_threshold_zero_is_bit_identical_to_no_cache();
    test_huge_threshold_skips_all_the_guards_leave();
    test_fbc_skips_as_a_double_replay_of_the_rule();
    test_teacache_skips_as_a_double_replay_of_the_rule();
    ctx = cpu_ctx;
    dit = cpu_dit;
    mm_dit_free(gdit);
    mm_ctx_destroy(g);
}

int main(void)
{
    char path[1024], ckpt[1024];
    snprintf(path, sizeof path, "%s/dit/manifest.json", mm_test_data_dir());
    snprintf(ckpt, sizeof ckpt, "%s/dit/dit.safetensors", mm_test_data_dir());
    json_error_t jerr;
    manifest = json_load_file(path, 0, &jerr);
    cases = kit_open("cases.safetensors");
    mm_error err = {{0}};
    if (!manifest || !cases || mm_ctx_create(&ctx, mm_cpu(), 2, &err) != 0 ||
        mm_dit_load(&dit, ckpt, ctx, NULL, &err) != 0 || mm_st_open(&weights, ckpt, &err) != 0 ||
        kit_forward_case_load(&kf, manifest, cases, CASE) != 0) {
        printf("FAIL setup: %s\n", manifest ? err.msg : jerr.text);
        return 1;
    }
    const mm_st_entry *norm1 = mm_st_find(weights, "blocks.0.norm1.weight");
    if (!norm1 || norm1->dtype != MM_BF16 || norm1->shape[0] != mm_dit_get_config(dit)->hidden) {
        printf("FAIL setup: the kit checkpoint has no bf16 blocks.0.norm1.weight [hidden]\n");
        return 1;
    }
    MM_RUN(test_presets_read_as_published);
    MM_RUN(test_names_parse_back);
    MM_RUN(test_bad_specs_are_refused_in_plain_words);
    MM_RUN(test_rule_guards_on_hand_made_sums);
    MM_RUN(test_threshold_zero_is_bit_identical_to_no_cache);
    MM_RUN(test_huge_threshold_skips_all_the_guards_leave);
    MM_RUN(test_fbc_skips_as_a_double_replay_of_the_rule);
    MM_RUN(test_teacache_skips_as_a_double_replay_of_the_rule);
    MM_RUN(test_the_same_on_the_gpu);
    kit_forward_case_free(&kf);
    mm_dit_free(dit);
    mm_st_close(weights);
    mm_ctx_destroy(ctx);
    mm_st_close(cases);
    json_decref(manifest);
    return mm_test_exit();
}
