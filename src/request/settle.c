/* mm_request_settle(): an input as given -> a request as rendered (see
 * request.h). The checks run in the API's field order, the references last
 * (their lookup is the only step that may touch a database or a file), so
 * the first bad field is the one reported. */
#include "request/request.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include "request/sampler_presets.h"

#define ACCEPT_LAST_IMAGE "a still image, with {partition} fl2va"

void mm_request_input_init(mm_request_input *in)
{
    memset(in, 0, sizeof *in);
}

int mm_request_fail(mm_request_error *e, const char *field, const char *accepted, const char *fmt, ...)
{
    snprintf(e->field, sizeof e->field, "%s", field ? field : "");
    snprintf(e->accepted, sizeof e->accepted, "%s", accepted ? accepted : "");
    e->internal = false;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

static int rule_fail(mm_request_error *e, const char *field, const char *accepted, const mm_error *err)
{
    return mm_request_fail(e, field, accepted, "%s", err->msg);
}

/* ---------------------------------------------------------------- rendering */

/* The fields messages may name as "{name}". */
static bool is_field_name(const char *s, size_t n)
{
    static const char *const names[] = {"prompt",  "image_ids", "last_image_id", "frames",   "seconds",
                                        "duration", "width",    "height",        "size",     "aspect_ratio",
                                        "steps",   "seed",      "partition",     "model",    "num_generations",
                                        "no_audio", "generate_audio", "fast",    "crf",      "preset",
                                        "loras",   "sampler",   "sparse",        "cache",    "short_edge"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == n && strncmp(s, names[i], n) == 0)
            return true;
    return false;
}

void mm_request_render(const char *text, mm_request_namer namer, void *user, char *out, size_t n)
{
    if (n == 0)
        return;
    size_t w = 0;
    for (const char *p = text; *p && w + 1 < n;) {
        const char *close = *p == '{' ? strchr(p, '}') : NULL;
        if (close && is_field_name(p + 1, (size_t)(close - p - 1))) {
            char name[32];
            snprintf(name, sizeof name, "%.*s", (int)(close - p - 1), p + 1);
            const char *spelled = namer ? namer(user, name) : NULL;
            size_t k = strlen(spelled ? spelled : name);
            if (k > n - 1 - w)
                k = n - 1 - w;
            memcpy(out + w, spelled ? spelled : name, k);
            w += k;
            p = close + 1;
            continue;
        }
        out[w++] = *p++;
    }
    out[w] = '\0';
}

/* ---------------------------------------------------------------- the fields */

static int settle_prompt(const mm_request_input *in, mm_request *out, mm_request_error *e)
{
    mm_error err = {{0}};
    if (!in->prompt)
        return mm_request_fail(e, "prompt", MM_ACCEPT_PROMPT, "is required");
    if (mm_rule_prompt(in->prompt, in->prompt_len, &err) < 0)
        return rule_fail(e, "prompt", MM_ACCEPT_PROMPT, &err);
    out->prompt = in->prompt;
    if (in->n_refs > MM_MAX_REFERENCES)
        return mm_request_fail(e, "image_ids", MM_ACCEPT_REFERENCES, "has %d entries, more than %d", in->n_refs,
                               MM_MAX_REFERENCES);
    return 0;
}

/* frames, seconds or duration (Oxen's name for seconds): at most one. */
static int settle_length(const mm_request_input *in, mm_request *out, mm_request_error *e)
{
    mm_error err = {{0}};
    out->frames = MM_FRAMES_DEFAULT;
    if (in->has_frames && in->has_seconds)
        return mm_request_fail(e, "seconds", "either {frames} or {seconds}", "cannot be given together with {frames}");
    if (in->has_duration && (in->has_frames || in->has_seconds))
        return mm_request_fail(e, "duration", "one of {frames}, {seconds} or {duration} (Oxen's name for {seconds})",
                               "cannot be given together with {%s}", in->has_frames ? "frames" : "seconds");
    if (in->has_duration && mm_rule_seconds(in->duration, &out->frames, &out->notes, &err) < 0)
        return rule_fail(e, "duration", MM_ACCEPT_SECONDS, &err);
    if (in->has_frames && mm_rule_frames(in->frames, &out->frames, &out->notes, &err) < 0)
        return rule_fail(e, "frames", MM_ACCEPT_FRAMES, &err);
    if (in->has_seconds && mm_rule_seconds(in->seconds, &out->frames, &out->notes, &err) < 0)
        return rule_fail(e, "seconds", MM_ACCEPT_SECONDS, &err);
    return 0;
}

/* width, height, size and aspect_ratio; the references add their aspect later. */
static int settle_canvas_fields(const mm_request_input *in, mm_canvas_spec *spec, int aspect[2], mm_request *out,
                                mm_request_error *e)
{
    mm_error err = {{0}};
    if (in->size && (in->has_width || in->has_height))
        return mm_request_fail(e, "size", "either {size} or {width}/{height}", "cannot be given together with {%s}",
                               in->has_width ? "width" : "height");
    if (in->has_width && mm_rule_dim("width", in->width, &spec->width, &out->notes, &err) < 0)
        return rule_fail(e, "width", MM_ACCEPT_DIM, &err);
    if (in->has_height && mm_rule_dim("height", in->height, &spec->height, &out->notes, &err) < 0)
        return rule_fail(e, "height", MM_ACCEPT_DIM, &err);
    if (in->has_short_edge && (in->size || in->has_width || in->has_height))
        return mm_request_fail(e, "short_edge", "{short_edge} alone, or {size}, or {width}/{height}",
                               "cannot be given together with {%s}",
                               in->size ? "size" : in->has_width ? "width" : "height");
    if (in->has_short_edge && mm_rule_dim("short_edge", in->short_edge, &spec->short_edge, &out->notes, &err) < 0)
        return rule_fail(e, "short_edge", MM_ACCEPT_SHORT_EDGE, &err);
    if (in->size && mm_rule_size(in->size, spec, &out->notes, &err) < 0)
        return rule_fail(e, "size", MM_ACCEPT_SIZE, &err);
    /* "size N" is a square, as the original --size; an aspect ratio makes it
     * the short edge at that aspect (Oxen's size + aspect_ratio). */
    if (in->size && spec->short_edge && !in->aspect_ratio) {
        spec->width = spec->height = spec->short_edge;
        spec->short_edge = 0;
    }
    if (in->aspect_ratio) {
        if (mm_rule_aspect_ratio(in->aspect_ratio, &aspect[0], &aspect[1], &err) < 0)
            return rule_fail(e, "aspect_ratio", MM_ACCEPT_ASPECT, &err);
        if (spec->width && spec->height)
            return mm_request_fail(e, "aspect_ratio", "{aspect_ratio} with at most one of {width}/{height}, or {size} \"N\"",
                                   "cannot be given together with a full width and height");
    }
    return 0;
}

static int settle_sampling(const mm_request_input *in, mm_request *out, mm_request_error *e)
{
    mm_error err = {{0}};
    out->steps = MM_STEPS_DEFAULT;
    if (in->has_steps && mm_rule_steps(in->steps, &out->steps, &err) < 0)
        return rule_fail(e, "steps", MM_ACCEPT_STEPS, &err);
    if (in->has_seed && (in->seed < 0 || in->seed > MM_SEED_MAX))
        return mm_request_fail(e, "seed", MM_ACCEPT_SEED, "%lld is out of range", in->seed);
    return 0;
}

/* partition, and the model names that imply one; num_generations. */
static int settle_partition(const mm_request_input *in, mm_request *out, mm_request_error *e)
{
    const char *p = in->partition;
    if (p && strcmp(p, "fl2va") != 0 && strcmp(p, "ref2va") != 0)
        return mm_request_fail(e, "partition", MM_ACCEPT_PARTITION, "is not a partition");
    snprintf(out->partition, sizeof out->partition, "%s", p ? p : "");
    if (in->model) {
        const char *m = in->model, *implied = NULL;
        if (strcasecmp(m, "minimax-h3") == 0 || strcasecmp(m, "MiniMaxAI/MiniMax-H3") == 0)
            implied = "";
        else if (strcasecmp(m, "minimax-h3-fl2va") == 0)
            implied = "fl2va";
        else if (strcasecmp(m, "minimax-h3-ref2va") == 0)
            implied = "ref2va";
        if (!implied)
            return mm_request_fail(e, "model", MM_ACCEPT_MODEL, "'%.100s' is not served here", m);
        if (*implied && out->partition[0] && strcmp(implied, out->partition) != 0)
            return mm_request_fail(e, "model", MM_ACCEPT_MODEL, "'%s' contradicts {partition} %s", m,
                                   out->partition);
        if (*implied)
            snprintf(out->partition, sizeof out->partition, "%s", implied);
    }
    out->count = 1;
    if (in->has_count) {
        if (in->count < 1 || in->count > MM_NUM_GENERATIONS_MAX)
            return mm_request_fail(e, "num_generations", MM_ACCEPT_NUM_GENERATIONS, "%lld is out of range",
                                   in->count);
        out->count = (int)in->count;
    }
    if (in->last_image && strcmp(out->partition, "ref2va") == 0)
        return mm_request_fail(e, "last_image_id", ACCEPT_LAST_IMAGE,
                               "is only used by fl2va, and {partition} is ref2va");
    return 0;
}

/* Audio on or off, fast mode, the encoder's settings. */
static int settle_output(const mm_request_input *in, mm_request *out, mm_request_error *e)
{
    mm_error err = {{0}};
    out->no_audio = in->has_no_audio && in->no_audio;
    if (in->has_generate_audio) {
        if (in->has_no_audio && in->no_audio == in->generate_audio)
            return mm_request_fail(e, "generate_audio", "{generate_audio} or {no_audio}, not contradicting each other",
                                   "contradicts {no_audio}");
        out->no_audio = !in->generate_audio;
    }
    out->fast = in->fast;
    out->crf = MM_CRF_DEFAULT;
    if (in->has_crf && mm_rule_crf(in->crf, &out->crf, &err) < 0)
        return rule_fail(e, "crf", MM_ACCEPT_CRF, &err);
    if (in->preset && !mm_rule_preset_valid(in->preset))
        return mm_request_fail(e, "preset", MM_ACCEPT_PRESET, "is not an x264 preset");
    snprintf(out->preset, sizeof out->preset, "%s", in->preset ? in->preset : MM_PRESET_DEFAULT);
    return 0;
}

/* A name of the catalogue as the engine resolves it (model/lora/lora.h:
 * mm_lora_resolve): the file itself, or, for a name without an extension,
 * the name with ".safetensors" added. */
static bool lora_known(const mm_request_input *in, const char *name)
{
    size_t n = strlen(name);
    const char *slash = strrchr(name, '/'), *dot = strrchr(name, '.');
    bool has_extension = dot && (!slash || dot > slash);
    for (int i = 0; i < in->n_known_loras; i++) {
        const char *k = in->known_loras[i];
        if (strcmp(k, name) == 0 ||
            (!has_extension && strncmp(k, name, n) == 0 && strcmp(k + n, ".safetensors") == 0))
            return true;
    }
    return false;
}

/* "one of a, b, c" (as many as fit), or what to do when there are none. */
static void known_loras_text(const mm_request_input *in, char *buf, size_t size)
{
    if (in->n_known_loras == 0) {
        snprintf(buf, size, "none: the adapter folder ($MODELS_PATH/loras on the worker's host) is empty");
        return;
    }
    size_t n = (size_t)snprintf(buf, size, "one of ");
    for (int i = 0; i < in->n_known_loras && n < size; i++) {
        const char *sep = i ? ", " : "";
        if (n + strlen(sep) + strlen(in->known_loras[i]) + 8 >= size) {
            snprintf(buf + n, size - n, "%s...", sep);
            return;
        }
        n += (size_t)snprintf(buf + n, size - n, "%s%s", sep, in->known_loras[i]);
    }
}

static int settle_loras(const mm_request_input *in, mm_request *out, mm_request_error *e)
{
    mm_error err = {{0}};
    if (in->n_loras > MM_LORAS_MAX)
        return mm_request_fail(e, "loras", MM_ACCEPT_LORAS, "has %d adapters, more than %d", in->n_loras,
                               MM_LORAS_MAX);
    out->n_loras = 0;
    for (int i = 0; i < in->n_loras; i++) {
        const mm_request_lora_input *l = &in->loras[i];
        char field[32];
        snprintf(field, sizeof field, "loras[%d].name", i);
        if (!l->name)
            return mm_request_fail(e, field, MM_ACCEPT_LORA_NAME, "is required");
        if (mm_rule_lora_name(l->name, &err) < 0)
            return rule_fail(e, field, MM_ACCEPT_LORA_NAME, &err);
        for (int k = 0; k < i; k++)
            if (strcmp(in->loras[k].name, l->name) == 0)
                return mm_request_fail(e, field, MM_ACCEPT_LORAS, "repeats loras[%d]", k);
        if (in->loras_known && !lora_known(in, l->name)) {
            char known[sizeof e->accepted];
            known_loras_text(in, known, sizeof known);
            return mm_request_fail(e, field, known, "'%s' is not an adapter of $MODELS_PATH/loras", l->name);
        }
        double strength = l->has_strength ? l->strength : 1.0;
        snprintf(field, sizeof field, "loras[%d].strength", i);
        if (mm_rule_lora_strength(strength, &err) < 0)
            return rule_fail(e, field, MM_ACCEPT_LORA_STRENGTH, &err);
        mm_request_lora *o = &out->loras[out->n_loras++];
        snprintf(o->name, sizeof o->name, "%s", l->name);
        o->strength = strength;
    }
    return 0;
}

/* "default, turbo4, ... (docs/PIPELINE.md), or ..." for the sampler's refusals. */
static void sampler_accepted(char *buf, size_t n)
{
    char names[512];
    mm_sampler_preset_names(names, sizeof names);
    snprintf(buf, n, "a preset: default, %s; or 2..201 strictly decreasing sigmas in 0..1 ending at 0", names);
}

/* The sampler by the presets' own table (the CLI's --sampler reads the same):
 * a preset or a sigma list fixes the forwards, so it sets steps and excludes
 * a given one; steps given beside adapters keep the release grid, as
 * `mmh3 generate --steps` does, rather than an adapter's own sampler. */
static int settle_sampler(const mm_request_input *in, mm_request *out, mm_request_error *e)
{
    mm_error err = {{0}};
    char accepted[768];
    memset(&out->sampler, 0, sizeof out->sampler);
    out->sampler.kind = in->sampler_kind;
    bool schedule = in->sampler_kind == MM_SAMPLER_SIGMAS ||
                    (in->sampler_kind == MM_SAMPLER_PRESET && strcmp(in->sampler_preset, "default") != 0);
    if (schedule && in->has_steps)
        return mm_request_fail(e, "steps", "steps or a sampler, not both",
                               "is given with {sampler}, which fixes the forwards; give one");
    if (in->sampler_kind == MM_SAMPLER_PRESET) {
        const mm_sampler_preset *p = NULL;
        sampler_accepted(accepted, sizeof accepted);
        if (mm_rule_preset_name(in->sampler_preset, &err) < 0)
            return rule_fail(e, "sampler", accepted, &err);
        if (strcmp(in->sampler_preset, "default") != 0 && mm_sampler_preset_find(in->sampler_preset, &p, &err) < 0)
            return rule_fail(e, "sampler", accepted, &err);
        snprintf(out->sampler.preset, sizeof out->sampler.preset, "%s", in->sampler_preset);
        if (p)
            out->steps = mm_sampler_preset_forwards(p) + 1;
    } else if (in->sampler_kind == MM_SAMPLER_SIGMAS) {
        sampler_accepted(accepted, sizeof accepted);
        if (in->n_sigmas > MM_SIGMAS_MAX)
            return mm_request_fail(e, "sampler", accepted, "has %d sigmas, not %d..%d", in->n_sigmas, MM_SIGMAS_MIN,
                                   MM_SIGMAS_MAX);
        if (mm_rule_sigmas(in->sigmas, in->n_sigmas, &err) < 0)
            return rule_fail(e, "sampler", accepted, &err);
        out->sampler.n_sigmas = in->n_sigmas;
        memcpy(out->sampler.sigmas, in->sigmas, (size_t)in->n_sigmas * sizeof in->sigmas[0]);
        out->steps = in->n_sigmas;
    } else if (in->has_steps && in->n_loras > 0) {
        out->sampler.kind = MM_SAMPLER_PRESET;
        snprintf(out->sampler.preset, sizeof out->sampler.preset, "default");
    }
    return 0;
}

int mm_request_settle_extras(const mm_request_input *in, mm_request *out, mm_request_error *e)
{
    mm_error err = {{0}};
    if (settle_loras(in, out, e) < 0 || settle_sampler(in, out, e) < 0)
        return -1;
    snprintf(out->sparse, sizeof out->sparse, "off");
    if (in->sparse && strcmp(in->sparse, "off") != 0) {
        if (mm_rule_preset_name(in->sparse, &err) < 0)
            return rule_fail(e, "sparse", MM_ACCEPT_SPARSE, &err);
        snprintf(out->sparse, sizeof out->sparse, "%s", in->sparse);
    }
    memset(&out->cache, 0, sizeof out->cache);
    if (in->cache && mm_step_cache_parse(in->cache, &out->cache, &err) < 0)
        return rule_fail(e, "cache", MM_ACCEPT_CACHE, &err);
    return 0;
}

/* ---------------------------------------------------------------- references */

static const char *kind_phrase(mm_reference_kind k)
{
    return k == MM_REF_IMAGE ? "a still image" : k == MM_REF_VIDEO ? "a video" : "audio";
}

/* Looks the references up, checks their kinds against the limits and the
 * partition, and picks the partition when none was asked for. */
static int settle_references(const mm_request_input *in, mm_request_resolve_fn resolve, void *user, mm_request *out,
                             mm_request_error *e)
{
    if (in->n_refs == 0 && !in->last_image)
        return 0;
    mm_request_refs refs;
    memset(&refs, 0, sizeof refs);
    refs.n_refs = in->n_refs;
    refs.has_last = in->last_image != NULL;
    for (int i = 0; i < in->n_refs; i++)
        refs.refs[i].source = in->refs[i];
    if (refs.has_last)
        refs.refs[in->n_refs].source = in->last_image;
    if (!resolve)
        return mm_request_fail(e, in->n_refs ? "image_ids" : "last_image_id", "a request without references",
                               "references are not taken here");
    if (resolve(user, &refs, e) < 0)
        return -1;
    int counts[3] = {0};
    for (int i = 0; i < in->n_refs; i++) {
        char field[32];
        snprintf(field, sizeof field, "image_ids[%d]", i);
        if (!refs.found[i])
            return mm_request_fail(e, field, MM_ACCEPT_REFERENCES, "no upload has the id %s", in->refs[i]);
        counts[refs.refs[i].kind]++;
        out->refs[out->n_refs++] = refs.refs[i];
    }
    if (counts[MM_REF_IMAGE] > MM_MAX_REF_IMAGES || counts[MM_REF_VIDEO] > MM_MAX_REF_VIDEOS ||
        counts[MM_REF_AUDIO] > MM_MAX_REF_AUDIO)
        return mm_request_fail(e, "image_ids", MM_ACCEPT_REFERENCES, "has %d images, %d videos and %d audio clips",
                               counts[MM_REF_IMAGE], counts[MM_REF_VIDEO], counts[MM_REF_AUDIO]);
    if (!out->partition[0])
        snprintf(out->partition, sizeof out->partition, "%s", counts[MM_REF_AUDIO] ? "ref2va" : "fl2va");
    if (counts[MM_REF_AUDIO] && strcmp(out->partition, "fl2va") == 0)
        return mm_request_fail(e, "image_ids", "audio references with {partition} ref2va",
                               "has %d audio clip(s), which only ref2va uses, and {partition} is fl2va",
                               counts[MM_REF_AUDIO]);
    if (refs.has_last) {
        const mm_request_ref *l = &refs.refs[in->n_refs];
        if (!refs.found[in->n_refs])
            return mm_request_fail(e, "last_image_id", ACCEPT_LAST_IMAGE, "no upload has the id %s", in->last_image);
        if (l->kind != MM_REF_IMAGE)
            return mm_request_fail(e, "last_image_id", ACCEPT_LAST_IMAGE, "is %s, not a still image",
                                   kind_phrase(l->kind));
        if (strcmp(out->partition, "fl2va") != 0)
            return mm_request_fail(e, "last_image_id", ACCEPT_LAST_IMAGE, "is only used by fl2va, and {partition} is %s",
                                   out->partition);
        out->has_last_image = true;
        out->last_image = *l;
    }
    return 0;
}

/* The first picture or video sets the canvas's aspect (else the last image);
 * an explicit aspect_ratio wins over both. */
static void settle_canvas(const mm_request_input *in, mm_canvas_spec spec, const int aspect[2], mm_request *out)
{
    for (int i = 0; i < out->n_refs && !spec.ref_width; i++)
        if (out->refs[i].kind != MM_REF_AUDIO && out->refs[i].width > 0 && out->refs[i].height > 0) {
            spec.ref_width = out->refs[i].width;
            spec.ref_height = out->refs[i].height;
        }
    if (!spec.ref_width && out->has_last_image && out->last_image.width > 0 && out->last_image.height > 0) {
        spec.ref_width = out->last_image.width;
        spec.ref_height = out->last_image.height;
    }
    if (in->aspect_ratio) {
        spec.ref_width = aspect[0];
        spec.ref_height = aspect[1];
    }
    mm_canvas_resolve(&spec, &out->width, &out->height);
}

/* A given seed counts up per generation (wrapping at the maximum); otherwise
 * each generation draws its own. */
static void settle_seeds(const mm_request_input *in, mm_request *out)
{
    out->seed_drawn = !in->has_seed;
    for (int k = 0; k < out->count; k++) {
        if (in->has_seed) {
            long long s = in->seed + k;
            out->seeds[k] = (uint64_t)(s > MM_SEED_MAX ? s - MM_SEED_MAX - 1 : s);
            continue;
        }
        uint32_t s = 0;
        if (getrandom(&s, sizeof s, 0) != sizeof s)
            s = (uint32_t)rand();
        out->seeds[k] = s;
    }
}

int mm_request_settle(const mm_request_input *in, mm_request_resolve_fn resolve, void *user, mm_request *out,
                      mm_request_error *e)
{
    memset(out, 0, sizeof *out);
    memset(e, 0, sizeof *e);
    mm_canvas_spec spec = {0};
    int aspect[2] = {0, 0};
    if (settle_prompt(in, out, e) < 0 || settle_length(in, out, e) < 0 ||
        settle_canvas_fields(in, &spec, aspect, out, e) < 0 || settle_sampling(in, out, e) < 0 ||
        settle_partition(in, out, e) < 0 || settle_output(in, out, e) < 0 ||
        mm_request_settle_extras(in, out, e) < 0 || settle_references(in, resolve, user, out, e) < 0)
        return -1;
    if (!out->partition[0])
        snprintf(out->partition, sizeof out->partition, "fl2va");
    mm_error err = {{0}};
    if (mm_step_cache_check(&out->cache, strcmp(out->partition, "ref2va") == 0, &err) < 0)
        return rule_fail(e, "cache", MM_ACCEPT_CACHE, &err);
    settle_canvas(in, spec, aspect, out);
    settle_seeds(in, out);
    return 0;
}

/* ---------------------------------------------------------------- verify */

static int verify_references(const mm_request *r, mm_error *err)
{
    if (r->n_refs < 0 || r->n_refs > MM_MAX_REFERENCES)
        return mm_fail(err, "%d references: accepted: at most %d", r->n_refs, MM_MAX_REFERENCES);
    int counts[3] = {0};
    for (int i = 0; i < r->n_refs; i++) {
        if ((unsigned)r->refs[i].kind > MM_REF_AUDIO)
            return mm_fail(err, "reference %d: no file", i + 1);
        counts[r->refs[i].kind]++;
    }
    if (counts[MM_REF_IMAGE] > MM_MAX_REF_IMAGES || counts[MM_REF_VIDEO] > MM_MAX_REF_VIDEOS ||
        counts[MM_REF_AUDIO] > MM_MAX_REF_AUDIO)
        return mm_fail(err, "%d images, %d videos and %d audio clips: accepted: " MM_ACCEPT_REFERENCES, counts[0],
                       counts[1], counts[2]);
    if (strcmp(r->partition, "fl2va") == 0 && counts[MM_REF_AUDIO])
        return mm_fail(err, "audio references need partition ref2va (fl2va takes pictures and videos only)");
    if (strcmp(r->partition, "ref2va") == 0 && r->has_last_image)
        return mm_fail(err, "a last image is fl2va only; ref2va takes references in request order");
    return 0;
}

int mm_request_verify(const mm_request *r, mm_error *err)
{
    if (!r->prompt)
        return mm_fail(err, "prompt: missing");
    if (mm_rule_prompt(r->prompt, strlen(r->prompt), err) != 0)
        return mm_error_prefix(err, "prompt");
    if (strcmp(r->partition, "fl2va") != 0 && strcmp(r->partition, "ref2va") != 0)
        return mm_fail(err, "partition '%s': accepted: %s", r->partition, MM_ACCEPT_PARTITION);
    if (r->width < MM_DIM_MIN || r->width > MM_DIM_MAX || r->width % MM_DIM_GRID || r->height < MM_DIM_MIN ||
        r->height > MM_DIM_MAX || r->height % MM_DIM_GRID)
        return mm_fail(err, "canvas %dx%d: accepted: %s", r->width, r->height, MM_ACCEPT_DIM);
    if (r->frames < MM_FRAMES_MIN || r->frames > MM_FRAMES_MAX || mm_frames_snap_down(r->frames) != r->frames)
        return mm_fail(err, "frames %d: accepted: %s", r->frames, MM_ACCEPT_FRAMES);
    if (r->steps < MM_STEPS_MIN || r->steps > MM_STEPS_MAX)
        return mm_fail(err, "steps %d: accepted: %s", r->steps, MM_ACCEPT_STEPS);
    if (r->crf < 0 || r->crf > 51)
        return mm_fail(err, "crf %d: accepted: %s", r->crf, MM_ACCEPT_CRF);
    if (!mm_rule_preset_valid(r->preset))
        return mm_fail(err, "preset '%s': accepted: %s", r->preset, MM_ACCEPT_PRESET);
    return verify_references(r, err);
}
