/* Sparse-attention presets, their overrides and the step schedule (see
 * sparse.h). The presets are the H3 configurations shared/spec/sparse.md
 * §2.4 and §3.2 found in the integrations' code; docs/SPARSE.md says where
 * each comes from and what is known of its quality. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/sparse/sparse.h"

#define AUDIO_ROWS (MM_SPARSE_ROWS_AUDIO | MM_SPARSE_ROWS_REF_AUDIO)
#define COND_ROWS (MM_SPARSE_ROWS_COND_VIDEO | MM_SPARSE_ROWS_REF_AUDIO)

typedef struct preset {
    const char *name, *what;
    mm_sparse_config c;
} preset;

#define SOL(t0, t1, steps, layers, sinks, dq) \
    {.policy = MM_SPARSE_SOL, .tau_start = t0, .tau_end = t1, .thresh = MM_SPARSE_THRESH_DIAG, .keep = 1, \
     .band = 1, .dense_steps = steps, .dense_layers = layers, .sink_rows = sinks, .dense_q_rows = dq}

static const preset presets[] = {
    {"sol", "Sol-Attn as Sana's H3 full-opt recipe: tau 1.0, first 20% of the forwards and blocks 0-1 dense, prefix "
            "sink, prefix queries dense (50-step schedules)",
     SOL(1.0f, 1.0f, 0.2, 2, MM_SPARSE_ROWS_PREFIX, MM_SPARSE_ROWS_PREFIX)},
    {"sol-4step", "Sol-H3's 4-step t2v recipe: first forward and blocks 0-1 dense, tau 1.0 -> 1.5 over the sparse "
                  "forwards, prefix sink",
     SOL(1.0f, 1.5f, 1, 2, MM_SPARSE_ROWS_PREFIX, MM_SPARSE_ROWS_PREFIX)},
    {"sol-8step", "HyperFlow's 8-step recipe: tau 1.0, first 2 forwards and blocks 0-1 dense, no sinks",
     SOL(1.0f, 1.0f, 2, 2, 0, 0)},
    {"sol-turbo", "LightX2V's Sol config: tau 1.5, first forward and block 0 dense, no sinks",
     SOL(1.5f, 1.5f, 1, 1, 0, 0)},
    {"sol-ref", "Sol-H3's ref2va recipe: tau 1.0, nothing dense, text and audio rows as sinks",
     SOL(1.0f, 1.0f, 0, 0, MM_SPARSE_ROWS_TEXT | AUDIO_ROWS, MM_SPARSE_ROWS_TEXT | AUDIO_ROWS)},
    {"subblock", "SGLang's SubBlock top-k: 25% of the key blocks per query block, first 20% of the forwards dense, "
                 "non-video query blocks dense, sequences under 4096 rows dense",
     {.policy = MM_SPARSE_TOPK, .tau_start = 1, .tau_end = 1, .keep = 0.25f, .band = -1, .dense_steps = 0.2,
      .dense_q_rows = MM_SPARSE_ROWS_PREFIX, .min_rows = 4096}},
    {"full", "every block exact (tau -1000, nothing kept dense): the sparse kernels at density 1, for validation",
     SOL(-1000.0f, -1000.0f, 0, 0, 0, 0)},
    {"forced", "a pseudo-random mask of density 0.25 (+ the diagonal band) in every block and forward: benchmarks",
     {.policy = MM_SPARSE_FORCED, .tau_start = 1, .tau_end = 1, .keep = 0.25f, .band = 1, .seed = 1}},
};
#define N_PRESETS (sizeof presets / sizeof presets[0])

static const struct {
    const char *name;
    unsigned rows;
} row_sets[] = {
    {"none", 0},
    {"text", MM_SPARSE_ROWS_TEXT},
    {"audio", AUDIO_ROWS},
    {"cond", COND_ROWS},
    {"text_audio", MM_SPARSE_ROWS_TEXT | AUDIO_ROWS},
    {"prefix", MM_SPARSE_ROWS_PREFIX},
};

const char *mm_sparse_presets_help(void)
{
    static char text[2048];
    if (text[0])
        return text;
    size_t w = 0;
    for (size_t i = 0; i < N_PRESETS && w < sizeof text; i++)
        w += (size_t)snprintf(text + w, sizeof text - w, "        %-10s %s\n", presets[i].name, presets[i].what);
    if (w < sizeof text)
        snprintf(text + w, sizeof text - w,
                 "        overrides after a colon, comma-separated: tau=X, tau=START..END (linear) or tau=X/Y/Z\n"
                 "        (per sparse forward), thresh=diag|exact, band=N, density=X (forced), sparsity=X\n"
                 "        (subblock), dense_steps=N (a count) or X < 1 (a share), dense_layers=N, sinks=ROWS,\n"
                 "        dense_queries=ROWS (ROWS: none, text, audio, cond, text_audio, prefix, or a+b),\n"
                 "        min_rows=N, seed=N; e.g. sol:tau=1.25,dense_steps=0\n");
    return text;
}

static int parse_double(const char *key, const char *v, double lo, double hi, double *out, mm_error *err)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi)
        return mm_fail(err, "sparse attention: %s=%s: a number from %g to %g expected", key, v, lo, hi);
    *out = x;
    return 0;
}

static int parse_rows(const char *key, const char *v, unsigned *out, mm_error *err)
{
    unsigned rows = 0;
    const char *p = v;
    while (*p) {
        size_t n = strcspn(p, "+");
        bool found = false;
        for (size_t i = 0; i < sizeof row_sets / sizeof row_sets[0]; i++)
            if (strlen(row_sets[i].name) == n && strncmp(p, row_sets[i].name, n) == 0) {
                rows |= row_sets[i].rows;
                found = true;
            }
        if (!found || n == 0)
            return mm_fail(err, "sparse attention: %s=%s: rows are none, text, audio, cond, text_audio or prefix "
                           "(combined with +)", key, v);
        p += n + (p[n] == '+');
    }
    *out = rows;
    return 0;
}

static int apply(mm_sparse_config *c, const char *key, const char *v, mm_error *err)
{
    double x;
    if (strcmp(key, "tau") == 0 && strchr(v, '/')) { /* τ per sparse forward */
        char item[64];
        c->n_tau_steps = 0;
        for (const char *p = v; *p;) {
            const size_t n = strcspn(p, "/");
            if (c->n_tau_steps == 16)
                return mm_fail(err, "sparse attention: tau=%s: at most 16 values", v);
            snprintf(item, sizeof item, "%.*s", (int)(n < 63 ? n : 63), p);
            if (parse_double(key, item, -1e4, 1e4, &x, err))
                return -1;
            c->tau_steps[c->n_tau_steps++] = (float)x;
            p += n + (p[n] == '/');
        }
        c->tau_start = c->tau_steps[0];
        c->tau_end = c->tau_steps[c->n_tau_steps - 1];
        return 0;
    }
    if (strcmp(key, "tau") == 0) {
        c->n_tau_steps = 0;
        const char *dots = strstr(v, "..");
        char a[64];
        if (!dots)
            return parse_double(key, v, -1e4, 1e4, &x, err) ? -1 : (c->tau_start = c->tau_end = (float)x, 0);
        snprintf(a, sizeof a, "%.*s", (int)(dots - v) < 63 ? (int)(dots - v) : 63, v);
        if (parse_double(key, a, -1e4, 1e4, &x, err))
            return -1;
        c->tau_start = (float)x;
        if (parse_double(key, dots + 2, -1e4, 1e4, &x, err))
            return -1;
        c->tau_end = (float)x;
        return 0;
    }
    if (strcmp(key, "thresh") == 0) {
        if (strcmp(v, "diag") && strcmp(v, "exact"))
            return mm_fail(err, "sparse attention: thresh=%s: diag or exact expected", v);
        c->thresh = strcmp(v, "exact") == 0 ? MM_SPARSE_THRESH_EXACT : MM_SPARSE_THRESH_DIAG;
        return 0;
    }
    if (strcmp(key, "density") == 0 || strcmp(key, "keep") == 0) {
        if (parse_double(key, v, 0, 1, &x, err))
            return -1;
        c->keep = (float)x;
        return 0;
    }
    if (strcmp(key, "sparsity") == 0) {
        if (parse_double(key, v, 0, 1, &x, err))
            return -1;
        c->keep = (float)(1.0 - x);
        return 0;
    }
    if (strcmp(key, "dense_steps") == 0) {
        if (parse_double(key, v, 0, 100000, &x, err))
            return -1;
        if (x >= 1 && x != floor(x))
            return mm_fail(err, "sparse attention: dense_steps=%s: a whole count, or a share below 1", v);
        c->dense_steps = x;
        return 0;
    }
    if (strcmp(key, "dense_layers") == 0 || strcmp(key, "band") == 0 || strcmp(key, "min_rows") == 0 ||
        strcmp(key, "seed") == 0) {
        const bool band = strcmp(key, "band") == 0;
        if (parse_double(key, v, band ? -1 : 0, strcmp(key, "seed") == 0 ? 4294967295.0 : 1e9, &x, err))
            return -1;
        if (x != floor(x))
            return mm_fail(err, "sparse attention: %s=%s: a whole number expected", key, v);
        if (band)
            c->band = (int)x;
        else if (key[0] == 'd')
            c->dense_layers = (int)x;
        else if (key[0] == 'm')
            c->min_rows = (int64_t)x;
        else
            c->seed = (uint64_t)x;
        return 0;
    }
    if (strcmp(key, "sinks") == 0)
        return parse_rows(key, v, &c->sink_rows, err);
    if (strcmp(key, "dense_queries") == 0)
        return parse_rows(key, v, &c->dense_q_rows, err);
    return mm_fail(err, "sparse attention: unknown key '%s'; accepted: tau, thresh, band, density, sparsity, "
                   "dense_steps, dense_layers, sinks, dense_queries, min_rows, seed", key);
}

int mm_sparse_config_parse(const char *spec, mm_sparse_config *out, mm_error *err)
{
    char buf[256];
    if (!spec || !*spec)
        spec = "sol";
    if (strlen(spec) >= sizeof buf)
        return mm_fail(err, "sparse attention: the spec is longer than %zu characters", sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", spec);
    char *colon = strchr(buf, ':');
    if (colon)
        *colon = '\0';
    const preset *p = NULL;
    for (size_t i = 0; i < N_PRESETS; i++)
        if (strcmp(buf, presets[i].name) == 0)
            p = &presets[i];
    if (!p) {
        char names[256];
        size_t w = 0;
        for (size_t i = 0; i < N_PRESETS; i++)
            w += (size_t)snprintf(names + w, sizeof names - w, "%s%s", i ? ", " : "", presets[i].name);
        return mm_fail(err, "sparse attention: unknown preset '%s'; presets: %s", buf, names);
    }
    mm_sparse_config c = p->c;
    snprintf(c.name, sizeof c.name, "%s", p->name);
    for (char *item = colon ? colon + 1 : NULL; item && *item;) {
        char *next = strchr(item, ',');
        if (next)
            *next++ = '\0';
        char *eq = strchr(item, '=');
        if (!eq || eq == item || !eq[1])
            return mm_fail(err, "sparse attention: '%s' is not key=value (in '%s')", item, spec);
        *eq = '\0';
        if (apply(&c, item, eq + 1, err) != 0)
            return -1;
        item = next;
    }
    *out = c;
    return 0;
}

static void rows_name(unsigned rows, char *out, size_t n)
{
    for (size_t i = sizeof row_sets / sizeof row_sets[0]; i-- > 0;)
        if (row_sets[i].rows == rows) {
            snprintf(out, n, "%s", row_sets[i].name);
            return;
        }
    snprintf(out, n, "rows 0x%x", rows);
}

void mm_sparse_config_describe(const mm_sparse_config *c, char *out, size_t n)
{
    char steps[48], sinks[24], dq[24], how[160];
    if (c->dense_steps >= 1)
        snprintf(steps, sizeof steps, "%d forwards", (int)c->dense_steps);
    else
        snprintf(steps, sizeof steps, "%.0f%% of the forwards", 100.0 * c->dense_steps);
    rows_name(c->sink_rows, sinks, sizeof sinks);
    rows_name(c->dense_q_rows, dq, sizeof dq);
    if (c->policy == MM_SPARSE_SOL && c->n_tau_steps > 0) {
        int w = snprintf(how, sizeof how, "tau");
        for (int i = 0; i < c->n_tau_steps && w > 0 && (size_t)w < sizeof how; i++)
            w += snprintf(how + w, sizeof how - (size_t)w, "%s%.2f", i ? "/" : " ", c->tau_steps[i]);
        if (w > 0 && (size_t)w < sizeof how)
            snprintf(how + w, sizeof how - (size_t)w, " per sparse forward, %s",
                     c->thresh == MM_SPARSE_THRESH_EXACT ? "exact" : "diag");
    } else if (c->policy == MM_SPARSE_SOL && c->tau_start != c->tau_end)
        snprintf(how, sizeof how, "tau %.2f..%.2f, %s", c->tau_start, c->tau_end,
                 c->thresh == MM_SPARSE_THRESH_EXACT ? "exact" : "diag");
    else if (c->policy == MM_SPARSE_SOL)
        snprintf(how, sizeof how, "tau %.2f, %s", c->tau_start, c->thresh == MM_SPARSE_THRESH_EXACT ? "exact" : "diag");
    else
        snprintf(how, sizeof how, "%s %.0f%% of the blocks", c->policy == MM_SPARSE_TOPK ? "top-k" : "forced",
                 100.0 * c->keep);
    snprintf(out, n, "%s (%s, band %d, dense: %s and %d blocks, sinks %s, dense queries %s)", c->name, how, c->band,
             steps, c->dense_layers, sinks, dq);
}

int mm_sparse_dense_forwards(const mm_sparse_config *c, int total)
{
    if (c->dense_steps >= 1)
        return (int)c->dense_steps;
    return (int)ceil(c->dense_steps * total - 1e-9);
}

bool mm_sparse_step_sparse(const mm_sparse_config *c, int step, int total)
{
    return step >= mm_sparse_dense_forwards(c, total);
}

float mm_sparse_step_tau(const mm_sparse_config *c, int step, int total)
{
    const int first = mm_sparse_dense_forwards(c, total), last = total - 1;
    if (c->n_tau_steps > 0) {
        const int k = step - first < 0 ? 0 : step - first;
        return c->tau_steps[k < c->n_tau_steps ? k : c->n_tau_steps - 1];
    }
    if (last <= first || step <= first)
        return c->tau_start;
    if (step >= last)
        return c->tau_end;
    const double w = (double)(step - first) / (double)(last - first);
    return (float)(c->tau_start + (c->tau_end - c->tau_start) * w);
}

mm_sparse_route_params mm_sparse_route_params_for(const mm_sparse_config *c, int step, int total,
                                                   const mm_row_range *sink, int n_sink, const mm_row_range *dense_q,
                                                   int n_dense_q)
{
    mm_sparse_route_params p = {
        .policy = c->policy,
        .tau = mm_sparse_step_tau(c, step, total),
        .thresh = c->thresh,
        .keep = c->keep,
        .band = c->band,
        .seed = c->seed,
        .sink_kv = sink,
        .n_sink_kv = n_sink,
        .dense_q = dense_q,
        .n_dense_q = n_dense_q,
    };
    return p;
}

int mm_sparse_role_ranges(const uint8_t *roles, int64_t n, unsigned rows, mm_row_range *out, int max, mm_error *err)
{
    int count = 0;
    for (int64_t r = 0; r < n;) {
        if (roles[r] >= 32 || !((rows >> roles[r]) & 1u)) {
            r++;
            continue;
        }
        int64_t e = r;
        while (e < n && roles[e] < 32 && ((rows >> roles[e]) & 1u))
            e++;
        if (count == max)
            return mm_fail(err, "sparse attention: the layout has more than %d runs of sink rows", max);
        out[count++] = (mm_row_range){r, e};
        r = e;
    }
    return count;
}
