/* The API's JSON body -> mm_request_input (request.h): the field names and
 * JSON types of POST /api/ai/queue (docs/API.md); the values are checked by
 * mm_request_settle(). Pure and bounded, so it can be fuzzed on its own. */
#include "request/request.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/uuid.h"

#define ACCEPT_IDS \
    "an array of upload ids from POST /api/images: at most 9 images, 3 videos and 3 audio clips, no duplicates"
#define ACCEPT_LAST_ID "the upload id of a still image, with partition fl2va"

static bool known_field(const char *key)
{
    static const char *const fields[] = {"prompt",    "image_ids", "last_image_id", "frames",  "seconds",
                                         "width",     "height",    "size",          "steps",   "seed",
                                         "partition", "no_audio",  "fast",          "crf",     "preset",
                                         "loras",     "sampler",   "sparse",        "cache",   "short_edge",
                                         /* Oxen.ai's QueueCreateRequest */
                                         "model",     "duration",  "aspect_ratio",  "num_generations",
                                         "generate_audio"};
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        if (strcmp(key, fields[i]) == 0)
            return true;
    return false;
}

/* JSON integers only (124, not 124.0 or "124"). */
static int get_int(json_t *body, const char *field, const char *accepted, bool *has, long long *out,
                   mm_request_error *e)
{
    json_t *v = json_object_get(body, field);
    if (!v)
        return 0;
    if (!json_is_integer(v))
        return mm_request_fail(e, field, accepted, "must be an integer");
    *has = true;
    *out = json_integer_value(v);
    return 0;
}

/* Like get_int, with null meaning "not given". */
static int get_int_or_null(json_t *body, const char *field, const char *accepted, bool *has, long long *out,
                           mm_request_error *e)
{
    json_t *v = json_object_get(body, field);
    return v && json_is_null(v) ? 0 : get_int(body, field, accepted, has, out, e);
}

static int get_number(json_t *body, const char *field, const char *accepted, const char *problem, bool *has,
                      double *out, mm_request_error *e)
{
    json_t *v = json_object_get(body, field);
    if (!v)
        return 0;
    if (!json_is_number(v))
        return mm_request_fail(e, field, accepted, "%s", problem);
    *has = true;
    *out = json_number_value(v);
    return 0;
}

static int get_bool(json_t *body, const char *field, bool null_ok, bool *has, bool *out, mm_request_error *e)
{
    json_t *v = json_object_get(body, field);
    if (!v || (null_ok && json_is_null(v)))
        return 0;
    if (!json_is_boolean(v))
        return mm_request_fail(e, field, "true or false", "must be a boolean");
    if (has)
        *has = true;
    *out = json_is_true(v);
    return 0;
}

/* A string field; null counts as absent when null_ok. */
static int get_string(json_t *body, const char *field, bool null_ok, const char *accepted, const char *problem,
                      const char **out, mm_request_error *e)
{
    json_t *v = json_object_get(body, field);
    if (!v || (null_ok && json_is_null(v)))
        return 0;
    if (!json_is_string(v))
        return mm_request_fail(e, field, accepted, "%s", problem);
    *out = json_string_value(v);
    return 0;
}

static int get_prompt(json_t *body, mm_request_input *in, mm_request_error *e)
{
    json_t *prompt = json_object_get(body, "prompt");
    if (!prompt)
        return 0; /* settle says it is required */
    if (!json_is_string(prompt))
        return mm_request_fail(e, "prompt", MM_ACCEPT_PROMPT, "must be a string");
    in->prompt = json_string_value(prompt);
    in->prompt_len = json_string_length(prompt);
    return 0;
}

static int get_references(json_t *body, mm_request_input *in, mm_request_error *e)
{
    json_t *ids = json_object_get(body, "image_ids");
    if (ids && !json_is_null(ids)) {
        if (!json_is_array(ids))
            return mm_request_fail(e, "image_ids", ACCEPT_IDS, "must be an array");
        in->n_refs = (int)json_array_size(ids);
        if (in->n_refs > MM_MAX_REFERENCES)
            return 0; /* settle refuses the count */
        for (int i = 0; i < in->n_refs; i++) {
            const char *id = json_string_value(json_array_get(ids, (size_t)i));
            char field[32];
            snprintf(field, sizeof field, "image_ids[%d]", i);
            if (!mm_is_uuid(id))
                return mm_request_fail(e, field, ACCEPT_IDS, "is not an upload id");
            for (int k = 0; k < i; k++)
                if (strcasecmp(in->refs[k], id) == 0)
                    return mm_request_fail(e, field, ACCEPT_IDS, "repeats image_ids[%d]", k);
            in->refs[i] = id;
        }
    }
    json_t *last = json_object_get(body, "last_image_id");
    if (last && !json_is_null(last)) {
        if (!mm_is_uuid(json_string_value(last)))
            return mm_request_fail(e, "last_image_id", ACCEPT_LAST_ID, "is not an upload id");
        in->last_image = json_string_value(last);
    }
    return 0;
}

static int get_lora(json_t *entry, int i, mm_request_lora_input *l, mm_request_error *e)
{
    char field[48];
    snprintf(field, sizeof field, "loras[%d]", i);
    if (!json_is_object(entry))
        return mm_request_fail(e, field, MM_ACCEPT_LORAS, "must be an object {\"name\", \"strength\"}");
    const char *key;
    json_t *v;
    json_object_foreach(entry, key, v)
    {
        if (strcmp(key, "name") != 0 && strcmp(key, "strength") != 0) {
            snprintf(field, sizeof field, "loras[%d].%.30s", i, key);
            return mm_request_fail(e, field, "name and strength", "is not a field of an adapter");
        }
    }
    json_t *name = json_object_get(entry, "name"), *strength = json_object_get(entry, "strength");
    snprintf(field, sizeof field, "loras[%d].name", i);
    if (name && !json_is_string(name))
        return mm_request_fail(e, field, MM_ACCEPT_LORA_NAME, "must be a string");
    l->name = json_string_value(name);
    snprintf(field, sizeof field, "loras[%d].strength", i);
    if (strength && !json_is_null(strength)) {
        if (!json_is_number(strength))
            return mm_request_fail(e, field, MM_ACCEPT_LORA_STRENGTH, "must be a number");
        l->has_strength = true;
        l->strength = json_number_value(strength);
    }
    return 0;
}

static int get_sampler(json_t *v, mm_request_input *in, mm_request_error *e)
{
    if (json_is_string(v)) {
        in->sampler_kind = MM_SAMPLER_PRESET;
        in->sampler_preset = json_string_value(v);
        return 0;
    }
    if (!json_is_array(v))
        return mm_request_fail(e, "sampler", MM_ACCEPT_SAMPLER, "must be a preset name or an array of sigmas");
    in->sampler_kind = MM_SAMPLER_SIGMAS;
    in->n_sigmas = (int)json_array_size(v);
    for (int i = 0; i < in->n_sigmas && i < MM_SIGMAS_MAX; i++) {
        json_t *s = json_array_get(v, (size_t)i);
        char field[32];
        snprintf(field, sizeof field, "sampler[%d]", i);
        if (!json_is_number(s))
            return mm_request_fail(e, field, MM_ACCEPT_SAMPLER, "must be a number");
        in->sigmas[i] = json_number_value(s);
    }
    return 0;
}

int mm_request_input_extras_from_json(json_t *body, mm_request_input *in, mm_request_error *e)
{
    json_t *loras = json_object_get(body, "loras");
    if (loras && !json_is_null(loras)) {
        if (!json_is_array(loras))
            return mm_request_fail(e, "loras", MM_ACCEPT_LORAS, "must be an array");
        in->n_loras = (int)json_array_size(loras);
        for (int i = 0; i < in->n_loras && i < MM_LORAS_MAX; i++)
            if (get_lora(json_array_get(loras, (size_t)i), i, &in->loras[i], e) < 0)
                return -1;
    }
    json_t *sampler = json_object_get(body, "sampler");
    if (sampler && !json_is_null(sampler) && get_sampler(sampler, in, e) < 0)
        return -1;
    if (get_string(body, "sparse", true, MM_ACCEPT_SPARSE, "must be a string", &in->sparse, e) < 0 ||
        get_string(body, "cache", true, MM_ACCEPT_CACHE, "must be a string", &in->cache, e) < 0)
        return -1;
    return 0;
}

/* Length, canvas and sampling: numbers of the right JSON type. */
static int get_numbers(json_t *body, mm_request_input *in, mm_request_error *e)
{
    if (get_int(body, "frames", MM_ACCEPT_FRAMES, &in->has_frames, &in->frames, e) < 0 ||
        get_number(body, "seconds", MM_ACCEPT_SECONDS, "must be a number", &in->has_seconds, &in->seconds, e) < 0 ||
        get_number(body, "duration", MM_ACCEPT_SECONDS, "must be a number of seconds", &in->has_duration,
                   &in->duration, e) < 0 ||
        get_int(body, "width", MM_ACCEPT_DIM, &in->has_width, &in->width, e) < 0 ||
        get_int(body, "height", MM_ACCEPT_DIM, &in->has_height, &in->height, e) < 0 ||
        get_string(body, "size", false, MM_ACCEPT_SIZE, "must be a string", &in->size, e) < 0 ||
        get_int(body, "short_edge", MM_ACCEPT_SHORT_EDGE, &in->has_short_edge, &in->short_edge, e) < 0 ||
        get_string(body, "aspect_ratio", true, MM_ACCEPT_ASPECT, "must be a string", &in->aspect_ratio, e) < 0 ||
        get_int(body, "steps", MM_ACCEPT_STEPS, &in->has_steps, &in->steps, e) < 0 ||
        get_int_or_null(body, "seed", MM_ACCEPT_SEED, &in->has_seed, &in->seed, e) < 0 ||
        get_int_or_null(body, "num_generations", MM_ACCEPT_NUM_GENERATIONS, &in->has_count, &in->count, e) < 0 ||
        get_int(body, "crf", MM_ACCEPT_CRF, &in->has_crf, &in->crf, e) < 0)
        return -1;
    return 0;
}

int mm_request_input_from_json(json_t *body, mm_request_input *in, mm_request_error *e)
{
    mm_request_input_init(in);
    memset(e, 0, sizeof *e);
    if (!json_is_object(body))
        return mm_request_fail(e, NULL, "a JSON object with at least \"prompt\"", "the body must be a JSON object");
    const char *key;
    json_t *val;
    json_object_foreach(body, key, val)
    {
        if (!known_field(key)) {
            char field[64];
            snprintf(field, sizeof field, "%.60s", key);
            return mm_request_fail(e, field, "the fields " MM_REQUEST_FIELDS, "is not a field of this request");
        }
    }
    if (get_prompt(body, in, e) < 0 || get_references(body, in, e) < 0 || get_numbers(body, in, e) < 0 ||
        get_string(body, "partition", true, MM_ACCEPT_PARTITION, "is not a partition", &in->partition, e) < 0 ||
        get_string(body, "model", true, MM_ACCEPT_MODEL, "must be a string", &in->model, e) < 0 ||
        get_bool(body, "no_audio", false, &in->has_no_audio, &in->no_audio, e) < 0 ||
        get_bool(body, "fast", false, NULL, &in->fast, e) < 0 ||
        get_bool(body, "generate_audio", true, &in->has_generate_audio, &in->generate_audio, e) < 0 ||
        get_string(body, "preset", false, MM_ACCEPT_PRESET, "is not an x264 preset", &in->preset, e) < 0)
        return -1;
    return mm_request_input_extras_from_json(body, in, e);
}

/* ---------------------------------------------------------------- stored form */

/* Written by hand for the shortest numbers (jansson prints 0.08 as
 * 0.080000000000000002); names are [a-z0-9._-] and need no escapes. */
static char *append(char *text, size_t *len, size_t *cap, const char *piece)
{
    size_t k = strlen(piece);
    if (!text)
        return NULL;
    if (*len + k + 1 > *cap) {
        while (*len + k + 1 > *cap)
            *cap *= 2;
        char *grown = realloc(text, *cap);
        if (!grown) {
            free(text);
            return NULL;
        }
        text = grown;
    }
    memcpy(text + *len, piece, k + 1);
    *len += k;
    return text;
}

char *mm_request_loras_json(const mm_request *r)
{
    size_t len = 0, cap = 256;
    char *text = malloc(cap);
    text = append(text, &len, &cap, "[");
    for (int i = 0; i < r->n_loras; i++) {
        char piece[MM_LORA_NAME_MAX + 64], num[32];
        mm_number_shortest(r->loras[i].strength, num, sizeof num);
        snprintf(piece, sizeof piece, "%s{\"name\":\"%s\",\"strength\":%s}", i ? "," : "", r->loras[i].name, num);
        text = append(text, &len, &cap, piece);
    }
    return append(text, &len, &cap, "]");
}

char *mm_request_sampler_json(const mm_request *r)
{
    char piece[MM_PRESET_NAME_MAX + 8];
    if (r->sampler.kind == MM_SAMPLER_PRESET) {
        snprintf(piece, sizeof piece, "\"%s\"", r->sampler.preset);
        return strdup(piece);
    }
    if (r->sampler.kind != MM_SAMPLER_SIGMAS)
        return NULL;
    size_t len = 0, cap = 256;
    char *text = malloc(cap);
    text = append(text, &len, &cap, "[");
    for (int i = 0; i < r->sampler.n_sigmas; i++) {
        char num[32];
        mm_number_shortest(r->sampler.sigmas[i], num, sizeof num);
        snprintf(piece, sizeof piece, "%s%s", i ? "," : "", num);
        text = append(text, &len, &cap, piece);
    }
    return append(text, &len, &cap, "]");
}
