#include "sampler/schedule.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request/sampler_presets.h"

/* ------------------------------------------------------------ presets
 * The table is request/sampler_presets.c's (the API checks names with it). */

const char *mm_schedule_preset_at(size_t i, const char **about)
{
    const mm_sampler_preset *p = mm_sampler_preset_at(i);
    if (p && about)
        *about = p->about;
    return p ? p->name : NULL;
}

const char *mm_schedule_preset_names(void)
{
    static char names[512];
    if (!names[0])
        mm_sampler_preset_names(names, sizeof names);
    return names;
}

double mm_shift_sigma(double b, double shift) { return shift * b / (1.0 + (shift - 1.0) * b); }

/* σ_v → base grid → σ_a (dit.md §6.1), in double. */
static double remap_sigma(double sigma_v, double video_shift, double audio_shift)
{
    double b = sigma_v / (video_shift + sigma_v * (1.0 - video_shift));
    return mm_shift_sigma(b, audio_shift);
}

/* ------------------------------------------------------------ building */

void mm_schedule_free(mm_schedule *s)
{
    if (!s)
        return;
    mm_sigma_schedule_free(&s->video);
    mm_sigma_schedule_free(&s->audio);
    for (int m = 0; m < 2; m++) {
        free(s->bank_weights[m]);
        free(s->endpoint[m]);
    }
    memset(s, 0, sizeof *s);
}

/* One stream from n points in double: f32 sigmas, t = 1 − σ in f32. */
static int fill_stream(mm_sigma_schedule *g, const double *sig, int n, mm_error *err)
{
    g->sigmas = malloc(sizeof(float) * (size_t)n);
    g->timesteps = malloc(sizeof(float) * (size_t)(n > 1 ? n - 1 : 1));
    if (!g->sigmas || !g->timesteps)
        return mm_fail(err, "schedule: out of memory");
    g->points = n;
    for (int i = 0; i < n; i++)
        g->sigmas[i] = (float)sig[i];
    for (int i = 0; i + 1 < n; i++)
        g->timesteps[i] = 1.0f - g->sigmas[i];
    return 0;
}

/* The rule every list obeys (after f32 rounding, which is what runs). */
static int check_stream(const mm_sigma_schedule *g, const char *what, mm_error *err)
{
    if (g->points < 2)
        return mm_fail(err, "%s: %d point%s; at least 2 are needed (the start and the terminal 0)", what, g->points,
                       g->points == 1 ? "" : "s");
    if (g->points > MM_SCHEDULE_MAX_POINTS)
        return mm_fail(err, "%s: %d points; at most %d (200 forwards)", what, g->points, MM_SCHEDULE_MAX_POINTS);
    for (int i = 0; i < g->points; i++) {
        float s = g->sigmas[i];
        if (!(s >= 0.0f && s <= 1.0f))
            return mm_fail(err, "%s: point %d is %g; every σ is in [0, 1]", what, i + 1, (double)s);
        if (i > 0 && !(s < g->sigmas[i - 1]))
            return mm_fail(err, "%s: point %d (%g) is not below point %d (%g); the list must strictly decrease", what,
                           i + 1, (double)s, i, (double)g->sigmas[i - 1]);
    }
    if (g->sigmas[g->points - 1] != 0.0f)
        return mm_fail(err, "%s: the last point is %g; the list ends at 0", what,
                       (double)g->sigmas[g->points - 1]);
    return 0;
}

static int finish(mm_schedule *s, const double *v, const double *a, int n, mm_error *err)
{
    if (fill_stream(&s->video, v, n, err) != 0 || fill_stream(&s->audio, a, n, err) != 0 ||
        check_stream(&s->video, "video σ", err) != 0 || check_stream(&s->audio, "audio σ", err) != 0) {
        mm_schedule_free(s);
        return -1;
    }
    return 0;
}

static int set_endpoint(mm_schedule *s, mm_error *err)
{
    const int f = mm_schedule_forwards(s);
    for (int m = 0; m < 2; m++) {
        const mm_sigma_schedule *g = m == MM_SCHED_VIDEO ? &s->video : &s->audio;
        if (!(s->endpoint[m] = malloc(sizeof(float) * (size_t)f)))
            return mm_fail(err, "schedule: out of memory");
        for (int i = 0; i < f; i++)
            s->endpoint[m][i] = 1.0f - g->sigmas[i + 1];
    }
    s->has_endpoint = true;
    return 0;
}

/* Base grid b[0..n) through both shifts. */
static int from_base(mm_schedule *s, const double *b, int n, double vs, double as, mm_error *err)
{
    double v[MM_SCHEDULE_MAX_POINTS], a[MM_SCHEDULE_MAX_POINTS];
    if (n > MM_SCHEDULE_MAX_POINTS)
        return mm_fail(err, "schedule: %d points; at most %d", n, MM_SCHEDULE_MAX_POINTS);
    for (int i = 0; i < n; i++) {
        v[i] = mm_shift_sigma(b[i], vs);
        a[i] = mm_shift_sigma(b[i], as);
    }
    return finish(s, v, a, n, err);
}

static int build_preset(const mm_sampler_preset *p, mm_schedule *s, mm_error *err)
{
    double b[MM_SCHEDULE_MAX_POINTS];
    int n = 0;
    switch (p->kind) {
    case MM_GRID_LINSPACE:
        for (int i = 0; i <= p->forwards; i++)
            b[n++] = (double)(p->forwards - i) / p->forwards;
        break;
    case MM_GRID_BASE:
        for (int i = 0; i < p->n_values; i++)
            b[n++] = p->values[i];
        break;
    case MM_GRID_TLIST:
        for (int i = 0; i < p->n_values; i++)
            b[n++] = p->values[i] / 1000.0;
        b[n++] = 0.0;
        break;
    }
    if (from_base(s, b, n, p->video_shift, p->audio_shift, err) != 0)
        return -1;
    snprintf(s->name, sizeof s->name, "%s", p->name);
    if (p->pdd_fine > 0 && mm_schedule_set_pdd_bank(s, p->pdd_fine, p->video_shift, p->audio_shift, err) != 0)
        return -1;
    if (p->endpoint && set_endpoint(s, err) != 0) {
        mm_schedule_free(s);
        return -1;
    }
    return 0;
}

int mm_schedule_preset(const char *name, mm_schedule *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    const mm_sampler_preset *p;
    if (mm_sampler_preset_find(name, &p, err) != 0)
        return -1;
    if (build_preset(p, out, err) != 0)
        return mm_error_prefix(err, "sampler %s", name);
    snprintf(out->origin, sizeof out->origin, "sampler %s", name);
    return 0;
}

int mm_schedule_default(int steps, float video_shift, float audio_shift, mm_schedule *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    if (mm_sigma_schedule_build(steps, video_shift, &out->video, err) != 0 ||
        mm_sigma_schedule_build(steps, audio_shift, &out->audio, err) != 0) {
        mm_schedule_free(out);
        return -1;
    }
    if (out->video.points != out->audio.points) {
        int v = out->video.points, a = out->audio.points;
        mm_schedule_free(out);
        return mm_fail(err, "%d steps: the video grid has %d points and the audio grid %d (duplicates collapsed "
                       "differently); choose another step count", steps, v, a);
    }
    snprintf(out->name, sizeof out->name, "default");
    snprintf(out->origin, sizeof out->origin, "%d steps on the release grid", steps);
    return 0;
}

/* ------------------------------------------------------------ custom lists */

/* "a, b, c" or "[a, b, c]" → values; *n set. */
static int parse_numbers(const char *text, const char *what, double *out, int max, int *n, mm_error *err)
{
    const char *p = text;
    *n = 0;
    while (isspace((unsigned char)*p))
        p++;
    bool bracket = *p == '[';
    if (bracket)
        p++;
    for (;;) {
        while (isspace((unsigned char)*p))
            p++;
        if (bracket && *p == ']' && *n > 0)
            break;
        if (!*p)
            break;
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno || !isfinite(v))
            return mm_fail(err, "%s: '%.24s' is not a number", what, p);
        if (*n == max)
            return mm_fail(err, "%s: more than %d values", what, max);
        out[(*n)++] = v;
        p = end;
        while (isspace((unsigned char)*p))
            p++;
        if (*p == ',') {
            p++;
            continue;
        }
        if (bracket && *p == ']')
            break;
        if (*p)
            return mm_fail(err, "%s: unexpected '%c' after value %d; values are separated by commas", what, *p, *n);
    }
    if (bracket) {
        if (*p != ']')
            return mm_fail(err, "%s: the '[' is not closed", what);
        p++;
        while (isspace((unsigned char)*p))
            p++;
        if (*p)
            return mm_fail(err, "%s: unexpected text after ']'", what);
    }
    if (*n == 0)
        return mm_fail(err, "%s: no values", what);
    return 0;
}

int mm_schedule_parse(const char *text, float video_shift, float audio_shift, mm_schedule *out, mm_error *err)
{
    memset(out, 0, sizeof *out);
    const char *semi = strchr(text, ';');
    char vtext[4096];
    size_t vlen = semi ? (size_t)(semi - text) : strlen(text);
    if (vlen >= sizeof vtext)
        return mm_fail(err, "σ list: longer than %zu characters", sizeof vtext - 1);
    memcpy(vtext, text, vlen);
    vtext[vlen] = '\0';
    double v[MM_SCHEDULE_MAX_POINTS], a[MM_SCHEDULE_MAX_POINTS];
    int nv = 0, na = 0;
    if (parse_numbers(vtext, "video σ list", v, MM_SCHEDULE_MAX_POINTS, &nv, err) != 0)
        return -1;
    if (semi) {
        if (strchr(semi + 1, ';'))
            return mm_fail(err, "σ lists: more than one ';' (video list ; audio list)");
        if (parse_numbers(semi + 1, "audio σ list", a, MM_SCHEDULE_MAX_POINTS, &na, err) != 0)
            return -1;
        if (na != nv)
            return mm_fail(err, "σ lists: %d video points and %d audio points; both lists have one point per step "
                           "plus the terminal 0", nv, na);
    } else {
        for (int i = 0; i < nv; i++)
            a[i] = remap_sigma(v[i], video_shift, audio_shift);
        na = nv;
    }
    if (finish(out, v, a, nv, err) != 0)
        return -1;
    snprintf(out->name, sizeof out->name, "custom");
    snprintf(out->origin, sizeof out->origin, "custom σ list%s", semi ? "" : ", audio remapped from the video list");
    return 0;
}

/* ------------------------------------------------------------ PDD bank */

int mm_schedule_set_pdd_bank(mm_schedule *s, int fine_steps, double video_shift, double audio_shift, mm_error *err)
{
    if (fine_steps < 1 || fine_steps > MM_SCHEDULE_MAX_BANK)
        return mm_fail(err, "PDD bank: %d fine steps; accepted 1..%d", fine_steps, MM_SCHEDULE_MAX_BANK);
    const int f = mm_schedule_forwards(s);
    float *w[2] = {calloc((size_t)f * fine_steps, sizeof(float)), calloc((size_t)f * fine_steps, sizeof(float))};
    double fine[MM_SCHEDULE_MAX_BANK + 1];
    if (!w[0] || !w[1]) {
        free(w[0]);
        free(w[1]);
        return mm_fail(err, "schedule: out of memory");
    }
    for (int m = 0; m < 2; m++) {
        const mm_sigma_schedule *g = m == MM_SCHED_VIDEO ? &s->video : &s->audio;
        const double shift = m == MM_SCHED_VIDEO ? video_shift : audio_shift;
        for (int n = 0; n <= fine_steps; n++)
            fine[n] = mm_shift_sigma(1.0 - (double)n / fine_steps, shift);
        for (int j = 0; j < f; j++) {
            /* Step boundaries that are fine-grid points up to f32 rounding are
             * taken as those points, so a coarse step made of whole fine
             * intervals weights exactly those. */
            double hi = g->sigmas[j], lo = g->sigmas[j + 1];
            for (int n = 0; n <= fine_steps; n++) {
                if (fabs(hi - fine[n]) < 1e-6)
                    hi = fine[n];
                if (fabs(lo - fine[n]) < 1e-6)
                    lo = fine[n];
            }
            const double span = hi - lo;
            for (int l = 0; l < fine_steps; l++) {
                double top = fine[l] < hi ? fine[l] : hi, bottom = fine[l + 1] > lo ? fine[l + 1] : lo;
                if (top > bottom)
                    w[m][(size_t)j * fine_steps + l] = (float)((top - bottom) / span);
            }
        }
    }
    for (int m = 0; m < 2; m++) {
        free(s->bank_weights[m]);
        s->bank_weights[m] = w[m];
    }
    s->bank_heads = fine_steps;
    return 0;
}

/* ------------------------------------------------------------ adapters */

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

static int meta_int(const char *key, const char *value, long *out, mm_error *err)
{
    char *end;
    errno = 0;
    long v = strtol(value, &end, 10);
    while (isspace((unsigned char)*end))
        end++;
    if (end == value || *end || errno)
        return mm_fail(err, "metadata %s = '%s' is not an integer", key, value);
    *out = v;
    return 0;
}

/* Shifts an adapter may state ("video_shift" / "audio_shift"), else the family's. */
static int meta_shifts(mm_schedule_meta_fn meta, void *user, double *vs, double *as, mm_error *err)
{
    const char *keys[2] = {"video_shift", "audio_shift"};
    double *dst[2] = {vs, as};
    for (int i = 0; i < 2; i++) {
        const char *v = meta(user, keys[i]);
        if (!v)
            continue;
        char *end;
        double d = strtod(v, &end);
        if (end == v || !isfinite(d) || d <= 0)
            return mm_fail(err, "metadata %s = '%s' is not a positive number", keys[i], v);
        *dst[i] = d;
    }
    return 0;
}

static int adapter_pdd(const char *steps_v, const char *block_v, mm_schedule *s, mm_error *err)
{
    long fine, block;
    if (meta_int("pdd_num_steps", steps_v, &fine, err) != 0 || meta_int("pdd_block_size", block_v, &block, err) != 0)
        return -1;
    if (fine < 1 || fine > MM_SCHEDULE_MAX_BANK || block < 1 || fine % block)
        return mm_fail(err, "metadata pdd_num_steps = %ld, pdd_block_size = %ld: the fine steps (1..%d) must split "
                       "into whole blocks", fine, block, MM_SCHEDULE_MAX_BANK);
    const int forwards = (int)(fine / block);
    double b[MM_SCHEDULE_MAX_BANK + 1];
    for (int i = 0; i <= forwards; i++)
        b[i] = (double)(forwards - i) / forwards;
    if (from_base(s, b, forwards + 1, 12.0, 3.0, err) != 0 || mm_schedule_set_pdd_bank(s, (int)fine, 12, 3, err) != 0)
        return -1;
    snprintf(s->name, sizeof s->name, "pdd%d", forwards);
    return 0;
}

/* A base grid from metadata: the list must start at 1 and decrease; a missing terminal 0 is added. */
static int adapter_base(const char *key, const char *value, double vs, double as, bool endpoint, mm_schedule *s,
                        mm_error *err)
{
    double b[MM_SCHEDULE_MAX_POINTS];
    int n;
    char what[64];
    snprintf(what, sizeof what, "metadata %s", key);
    if (parse_numbers(value, what, b, MM_SCHEDULE_MAX_POINTS - 1, &n, err) != 0)
        return -1;
    if (b[n - 1] != 0.0)
        b[n++] = 0.0;
    for (int i = 0; i < n; i++)
        if (!(b[i] >= 0.0 && b[i] <= 1.0) || (i > 0 && !(b[i] < b[i - 1])))
            return mm_fail(err, "%s: value %d (%g) breaks the rule: a base grid decreases strictly within [0, 1]",
                           what, i + 1, b[i]);
    if (from_base(s, b, n, vs, as, err) != 0 || (endpoint && set_endpoint(s, err) != 0))
        return -1;
    return 0;
}

/* The LightX2V contract (fewstep.md §3.1): minimax_h3_{fl2v,ref2v}_turbo_{4,8}step_v*[_768p]*. */
static const char *lightx2v_preset(const char *name)
{
    if (strncmp(name, "minimax_h3_", 11) != 0 || (!strstr(name, "_fl2v_turbo_") && !strstr(name, "_ref2v_turbo_")))
        return NULL;
    bool p768 = strstr(name, "_768p") != NULL;
    if (strstr(name, "_turbo_4step"))
        return p768 ? "turbo4-768p" : "turbo4";
    if (strstr(name, "_turbo_8step"))
        return p768 ? "turbo8-768p" : "turbo8";
    return NULL;
}

int mm_schedule_from_adapter(const char *file_name, mm_schedule_meta_fn meta, void *user, mm_schedule *out,
                             bool *found, mm_error *err)
{
    memset(out, 0, sizeof *out);
    *found = false;
    const char *name = base_name(file_name ? file_name : "");
    const char *pdd_steps = meta ? meta(user, "pdd_num_steps") : NULL;
    const char *pdd_block = meta ? meta(user, "pdd_block_size") : NULL;
    const char *hyf = meta ? meta(user, "hyperflow_sigmas") : NULL;
    const char *fgen = meta ? meta(user, "base_schedule") : NULL;
    const char *why;
    int rc;
    if (pdd_steps || pdd_block) {
        if (!pdd_steps || !pdd_block)
            return mm_fail(err, "%s: metadata has %s without %s; a PDD bank needs both", name,
                           pdd_steps ? "pdd_num_steps" : "pdd_block_size",
                           pdd_steps ? "pdd_block_size" : "pdd_num_steps");
        rc = adapter_pdd(pdd_steps, pdd_block, out, err);
        why = "metadata pdd_num_steps / pdd_block_size";
    } else if (hyf || fgen) {
        double vs = 12, as = 3;
        rc = meta_shifts(meta, user, &vs, &as, err);
        if (rc == 0)
            rc = adapter_base(hyf ? "hyperflow_sigmas" : "base_schedule", hyf ? hyf : fgen, vs, as, hyf != NULL, out,
                              err);
        if (rc == 0)
            snprintf(out->name, sizeof out->name, "%s%d", hyf ? "hyperflow" : "flashgen", mm_schedule_forwards(out));
        why = hyf ? "metadata hyperflow_sigmas" : "metadata base_schedule";
    } else {
        const char *p = lightx2v_preset(name);
        if (!p)
            return 0;
        rc = mm_schedule_preset(p, out, err);
        why = "the LightX2V file-name contract";
    }
    if (rc != 0) {
        mm_schedule_free(out);
        return mm_error_prefix(err, "adapter %s", name);
    }
    *found = true;
    snprintf(out->origin, sizeof out->origin, "adapter %s: %s", name, why);
    return 0;
}

int mm_schedule_resolve(const char *sigmas, const char *sampler, int steps, float video_shift, float audio_shift,
                        mm_schedule *out, mm_error *err)
{
    if (sigmas && sampler && strcmp(sampler, "default") != 0)
        return mm_fail(err, "a σ list and sampler '%s' exclude each other; give one", sampler);
    if (sigmas) {
        if (mm_schedule_parse(sigmas, video_shift, audio_shift, out, err) != 0)
            return mm_error_prefix(err, "sigmas");
        return 0;
    }
    if (sampler && strcmp(sampler, "default") != 0)
        return mm_schedule_preset(sampler, out, err);
    return mm_schedule_default(steps, video_shift, audio_shift, out, err);
}
