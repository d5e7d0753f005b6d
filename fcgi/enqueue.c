#include "fcgi/enqueue.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "fcgi/uuid.h"

static int field_fail(mm_field_error *fe, const char *field, const char *accepted, const char *fmt, ...)
    MM_PRINTF(4, 5);

static int field_fail(mm_field_error *fe, const char *field, const char *accepted, const char *fmt, ...)
{
    snprintf(fe->field, sizeof fe->field, "%s", field ? field : "");
    fe->accepted = accepted;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fe->message, sizeof fe->message, fmt, ap);
    va_end(ap);
    return -1;
}

static int rule_fail(mm_field_error *fe, const char *field, const char *accepted, const mm_error *err)
{
    return field_fail(fe, field, accepted, "%s", err->msg);
}

/* JSON integers only (124, not 124.0 or "124"). */
static int get_int(json_t *v, const char *field, const char *accepted, long long *out, mm_field_error *fe)
{
    if (!json_is_integer(v))
        return field_fail(fe, field, accepted, "must be an integer");
    *out = json_integer_value(v);
    return 0;
}

static int get_bool(json_t *v, const char *field, bool *out, mm_field_error *fe)
{
    if (!json_is_boolean(v))
        return field_fail(fe, field, "true or false", "must be a boolean");
    *out = json_is_true(v);
    return 0;
}

static bool known_field(const char *key)
{
    static const char *const fields[] = {"prompt",    "image_ids", "last_image_id", "frames",       "seconds",
                                         "width",     "height",    "size",          "steps",        "seed",
                                         "partition", "no_audio",  "fast",          "crf",          "preset",
                                         /* Oxen.ai's QueueCreateRequest */
                                         "model",     "duration",  "aspect_ratio",  "num_generations",
                                         "generate_audio"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strcmp(key, fields[i]) == 0)
            return true;
    return false;
}

int mm_enqueue_parse(json_t *body, mm_enqueue *q, mm_field_error *fe)
{
    memset(q, 0, sizeof *q);
    memset(fe, 0, sizeof *fe);
    q->count = 1;
    q->steps = MM_STEPS_DEFAULT;
    q->crf = MM_CRF_DEFAULT;
    snprintf(q->preset, sizeof q->preset, "%s", MM_PRESET_DEFAULT);
    mm_error err = {{0}};
    long long v = 0;

    if (!json_is_object(body))
        return field_fail(fe, NULL, "a JSON object with at least \"prompt\"", "the body must be a JSON object");
    const char *key;
    json_t *val;
    json_object_foreach(body, key, val)
    {
        if (!known_field(key)) {
            char f[64];
            snprintf(f, sizeof f, "%.60s", key);
            return field_fail(fe, f, "the fields " MM_ENQUEUE_FIELDS, "is not a field of this request");
        }
    }

    json_t *prompt = json_object_get(body, "prompt");
    if (!prompt)
        return field_fail(fe, "prompt", MM_ACCEPT_PROMPT, "is required");
    if (!json_is_string(prompt))
        return field_fail(fe, "prompt", MM_ACCEPT_PROMPT, "must be a string");
    if (mm_rule_prompt(json_string_value(prompt), json_string_length(prompt), &err) < 0)
        return rule_fail(fe, "prompt", MM_ACCEPT_PROMPT, &err);
    q->prompt = json_string_value(prompt);

    static const char accept_ids[] = "an array of upload ids from POST /api/images: at most 9 images, 3 videos and "
                                     "3 audio clips, no duplicates";
    json_t *ids = json_object_get(body, "image_ids");
    if (ids && !json_is_null(ids)) {
        if (!json_is_array(ids))
            return field_fail(fe, "image_ids", accept_ids, "must be an array");
        if (json_array_size(ids) > MM_MAX_REFERENCES)
            return field_fail(fe, "image_ids", accept_ids, "has %zu entries, more than %d", json_array_size(ids),
                              MM_MAX_REFERENCES);
        size_t i;
        json_t *id;
        json_array_foreach(ids, i, id)
        {
            char f[32];
            snprintf(f, sizeof f, "image_ids[%zu]", i);
            if (!json_is_string(id) || !mm_is_uuid(json_string_value(id)))
                return field_fail(fe, f, accept_ids, "is not an upload id");
            for (int k = 0; k < q->n_refs; k++)
                if (strcasecmp(q->ref_ids[k], json_string_value(id)) == 0)
                    return field_fail(fe, f, accept_ids, "repeats image_ids[%d]", k);
            snprintf(q->ref_ids[q->n_refs++], 37, "%s", json_string_value(id));
        }
    }

    static const char accept_last[] = "the upload id of a still image, with partition fl2va";
    json_t *last = json_object_get(body, "last_image_id");
    if (last && !json_is_null(last)) {
        if (!json_is_string(last) || !mm_is_uuid(json_string_value(last)))
            return field_fail(fe, "last_image_id", accept_last, "is not an upload id");
        q->has_last_image = true;
        snprintf(q->last_image_id, sizeof q->last_image_id, "%s", json_string_value(last));
    }

    json_t *frames = json_object_get(body, "frames"), *seconds = json_object_get(body, "seconds");
    json_t *duration = json_object_get(body, "duration");
    if (frames && seconds)
        return field_fail(fe, "seconds", "either frames or seconds", "cannot be given together with frames");
    if (duration && (frames || seconds))
        return field_fail(fe, "duration", "one of frames, seconds or duration (Oxen's name for seconds)",
                          "cannot be given together with %s", frames ? "frames" : "seconds");
    if (duration) {
        if (!json_is_number(duration))
            return field_fail(fe, "duration", MM_ACCEPT_SECONDS, "must be a number of seconds");
        if (mm_rule_seconds(json_number_value(duration), &q->frames, &q->notes, &err) < 0)
            return rule_fail(fe, "duration", MM_ACCEPT_SECONDS, &err);
    }
    if (frames) {
        if (get_int(frames, "frames", MM_ACCEPT_FRAMES, &v, fe) < 0)
            return -1;
        if (mm_rule_frames(v, &q->frames, &q->notes, &err) < 0)
            return rule_fail(fe, "frames", MM_ACCEPT_FRAMES, &err);
    }
    if (seconds) {
        if (!json_is_number(seconds))
            return field_fail(fe, "seconds", MM_ACCEPT_SECONDS, "must be a number");
        if (mm_rule_seconds(json_number_value(seconds), &q->frames, &q->notes, &err) < 0)
            return rule_fail(fe, "seconds", MM_ACCEPT_SECONDS, &err);
    }

    json_t *w = json_object_get(body, "width"), *h = json_object_get(body, "height"),
           *size = json_object_get(body, "size");
    if (size && (w || h))
        return field_fail(fe, "size", "either size or width/height", "cannot be given together with %s",
                          w ? "width" : "height");
    if (w) {
        if (get_int(w, "width", MM_ACCEPT_DIM, &v, fe) < 0)
            return -1;
        if (mm_rule_dim("width", v, &q->canvas.width, &q->notes, &err) < 0)
            return rule_fail(fe, "width", MM_ACCEPT_DIM, &err);
    }
    if (h) {
        if (get_int(h, "height", MM_ACCEPT_DIM, &v, fe) < 0)
            return -1;
        if (mm_rule_dim("height", v, &q->canvas.height, &q->notes, &err) < 0)
            return rule_fail(fe, "height", MM_ACCEPT_DIM, &err);
    }
    if (size) {
        if (!json_is_string(size))
            return field_fail(fe, "size", MM_ACCEPT_SIZE, "must be a string");
        if (mm_rule_size(json_string_value(size), &q->canvas, &q->notes, &err) < 0)
            return rule_fail(fe, "size", MM_ACCEPT_SIZE, &err);
    }

    json_t *aspect = json_object_get(body, "aspect_ratio");
    if (aspect && !json_is_null(aspect)) {
        if (!json_is_string(aspect))
            return field_fail(fe, "aspect_ratio", MM_ACCEPT_ASPECT, "must be a string");
        if (mm_rule_aspect_ratio(json_string_value(aspect), &q->aspect_w, &q->aspect_h, &err) < 0)
            return rule_fail(fe, "aspect_ratio", MM_ACCEPT_ASPECT, &err);
        if (q->canvas.width && q->canvas.height)
            return field_fail(fe, "aspect_ratio", "aspect_ratio with at most one of width/height, or size \"N\"",
                              "cannot be given together with a full width and height");
    }

    json_t *steps = json_object_get(body, "steps");
    if (steps) {
        if (get_int(steps, "steps", MM_ACCEPT_STEPS, &v, fe) < 0)
            return -1;
        if (mm_rule_steps(v, &q->steps, &err) < 0)
            return rule_fail(fe, "steps", MM_ACCEPT_STEPS, &err);
    }

    json_t *seed = json_object_get(body, "seed");
    if (seed && !json_is_null(seed)) {
        if (get_int(seed, "seed", MM_ACCEPT_SEED, &v, fe) < 0)
            return -1;
        if (v < 0 || v > MM_SEED_MAX)
            return field_fail(fe, "seed", MM_ACCEPT_SEED, "%lld is out of range", v);
        q->has_seed = true;
        q->seed = v;
    }

    json_t *part = json_object_get(body, "partition");
    if (part && !json_is_null(part)) {
        const char *s = json_string_value(part);
        if (!s || (strcmp(s, "fl2va") != 0 && strcmp(s, "ref2va") != 0))
            return field_fail(fe, "partition", MM_ACCEPT_PARTITION, "is not a partition");
        snprintf(q->partition, sizeof q->partition, "%s", s);
    }
    json_t *model = json_object_get(body, "model");
    if (model && !json_is_null(model)) {
        const char *m = json_string_value(model);
        const char *implied = NULL;
        if (m && (strcasecmp(m, "minimax-h3") == 0 || strcasecmp(m, "MiniMaxAI/MiniMax-H3") == 0))
            implied = "";
        else if (m && strcasecmp(m, "minimax-h3-fl2va") == 0)
            implied = "fl2va";
        else if (m && strcasecmp(m, "minimax-h3-ref2va") == 0)
            implied = "ref2va";
        if (!m)
            return field_fail(fe, "model", MM_ACCEPT_MODEL, "must be a string");
        if (!implied)
            return field_fail(fe, "model", MM_ACCEPT_MODEL, "'%.100s' is not served here", m);
        if (*implied && q->partition[0] && strcmp(implied, q->partition) != 0)
            return field_fail(fe, "model", MM_ACCEPT_MODEL, "'%s' contradicts partition %s", m, q->partition);
        if (*implied)
            snprintf(q->partition, sizeof q->partition, "%s", implied);
    }

    json_t *n = json_object_get(body, "num_generations");
    if (n && !json_is_null(n)) {
        if (get_int(n, "num_generations", MM_ACCEPT_NUM_GENERATIONS, &v, fe) < 0)
            return -1;
        if (v < 1 || v > MM_NUM_GENERATIONS_MAX)
            return field_fail(fe, "num_generations", MM_ACCEPT_NUM_GENERATIONS, "%lld is out of range", v);
        q->count = (int)v;
    }
    if (q->has_last_image && strcmp(q->partition, "ref2va") == 0)
        return field_fail(fe, "last_image_id", accept_last, "is only used by fl2va, and partition is ref2va");

    json_t *b;
    if ((b = json_object_get(body, "no_audio")) && get_bool(b, "no_audio", &q->no_audio, fe) < 0)
        return -1;
    if ((b = json_object_get(body, "fast")) && get_bool(b, "fast", &q->fast, fe) < 0)
        return -1;
    if ((b = json_object_get(body, "generate_audio")) && !json_is_null(b)) {
        bool audio = true;
        if (get_bool(b, "generate_audio", &audio, fe) < 0)
            return -1;
        if (json_object_get(body, "no_audio") && q->no_audio == audio)
            return field_fail(fe, "generate_audio", "generate_audio or no_audio, not contradicting each other",
                              "contradicts no_audio");
        q->no_audio = !audio;
    }

    json_t *crf = json_object_get(body, "crf");
    if (crf) {
        if (get_int(crf, "crf", MM_ACCEPT_CRF, &v, fe) < 0)
            return -1;
        if (mm_rule_crf(v, &q->crf, &err) < 0)
            return rule_fail(fe, "crf", MM_ACCEPT_CRF, &err);
    }
    json_t *preset = json_object_get(body, "preset");
    if (preset) {
        if (!json_is_string(preset) || !mm_rule_preset_valid(json_string_value(preset)))
            return field_fail(fe, "preset", MM_ACCEPT_PRESET, "is not an x264 preset");
        snprintf(q->preset, sizeof q->preset, "%s", json_string_value(preset));
    }
    return 0;
}
