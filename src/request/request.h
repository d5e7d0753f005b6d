/* A generation request, from what a user typed to what is rendered.
 *
 * Every front end — `mmh3 generate`'s flags, the body of POST /api/ai/queue,
 * a /v1/videos request (translated into that body), a job claimed from the
 * Oxen hub — fills an mm_request_input with the values as given (typed, not
 * yet checked), and mm_request_settle() turns it into an mm_request: every
 * value checked and snapped by the rules of request/rules.h, the partition
 * chosen, the canvas resolved against the references, the seeds drawn. One
 * function, so a request means the same wherever it comes from, and a bad one
 * gets the same message: the field (in the API's spelling), what was wrong,
 * and what is accepted.
 *
 * Front ends parse their own syntax into the input: request/json.c reads an
 * API body, mm_request_input_set_text() a flag's text. Messages name other
 * fields as "{name}"; mm_request_render() spells them for the front end
 * ("frames" for the API, "--frames" for the CLI).
 *
 * A new request field is added here: a member of the input (as given), a
 * member of mm_request (as settled), its rule in request/rules.c, its check in
 * settle.c, its JSON field in json.c, and its column in the store.
 */
#ifndef MMH3_REQUEST_REQUEST_H
#define MMH3_REQUEST_REQUEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/error.h"
#include "request/rules.h"
#include "request/step_cache.h"

/* ---------------------------------------------------------------- as given */

typedef struct mm_request_lora_input {
    const char *name; /* NULL: not given */
    bool has_strength;
    double strength;
} mm_request_lora_input;

typedef enum mm_sampler_kind { MM_SAMPLER_DEFAULT, MM_SAMPLER_PRESET, MM_SAMPLER_SIGMAS } mm_sampler_kind;

/* Strings are borrowed: the input (and the request settled from it) point
 * into the caller's memory (the JSON body, argv). Counts are what was given;
 * entries past a list's capacity are not kept (settle refuses the count). */
typedef struct mm_request_input {
    const char *prompt; /* NULL: not given */
    size_t prompt_len;
    int n_refs;
    const char *refs[MM_MAX_REFERENCES]; /* upload ids (API) or file paths (CLI), in request order */
    const char *last_image;              /* NULL: none */
    bool has_frames, has_seconds, has_duration;
    long long frames;
    double seconds, duration;
    bool has_width, has_height;
    long long width, height;
    const char *size;         /* "WxH" or "N"; NULL: not given */
    bool has_short_edge;
    long long short_edge;
    const char *aspect_ratio; /* "W:H"; NULL: not given */
    bool has_steps;
    long long steps;
    bool has_seed;
    long long seed;
    const char *partition; /* NULL: chosen from the references */
    const char *model;     /* NULL: not given */
    bool has_count;
    long long count; /* num_generations */
    bool has_no_audio, no_audio;
    bool has_generate_audio, generate_audio;
    bool fast;
    bool has_crf;
    long long crf;
    const char *preset; /* x264 preset; NULL: the default */
    int n_loras;
    mm_request_lora_input loras[MM_LORAS_MAX];
    mm_sampler_kind sampler_kind;
    const char *sampler_preset;
    int n_sigmas;
    double sigmas[MM_SIGMAS_MAX];
    const char *sparse; /* NULL: off */
    const char *cache;  /* NULL: off */
    /* The adapters the front end knows (the catalogue a worker published,
     * names as listed: "style.safetensors"); loras_known false when it
     * cannot know them, and any well-formed name is taken. */
    bool loras_known;
    const char *const *known_loras;
    int n_known_loras;
} mm_request_input;

void mm_request_input_init(mm_request_input *in);

/* ---------------------------------------------------------------- errors */

typedef struct mm_request_error {
    char field[64];     /* "frames", "image_ids[2]", "loras[0].name"; "" = the request as a whole */
    char message[768];  /* what was wrong */
    char accepted[512]; /* what is accepted; "" when nothing more can be said */
    bool internal;      /* not the request's fault (e.g. the database failed) */
} mm_request_error;

/* Fills e and returns -1. */
int mm_request_fail(mm_request_error *e, const char *field, const char *accepted, const char *fmt, ...)
    MM_PRINTF(4, 5);

/* How a front end spells a field: "frames" -> "--frames"; NULL keeps the API's name. */
typedef const char *(*mm_request_namer)(void *user, const char *field);
/* Copies text with every "{name}" replaced by namer(name) (or name). */
void mm_request_render(const char *text, mm_request_namer namer, void *user, char *out, size_t n);

/* ---------------------------------------------------------------- references */

typedef struct mm_request_ref {
    const char *source; /* the upload id or file path as given */
    mm_reference_kind kind;
    int width, height; /* pictures and videos; 0 = unknown */
} mm_request_ref;

/* The references to look up: refs[0..n_refs-1] in request order, then the
 * last image at refs[n_refs] when has_last. */
typedef struct mm_request_refs {
    mm_request_ref refs[MM_MAX_REFERENCES + 1];
    bool found[MM_MAX_REFERENCES + 1];
    int n_refs;
    bool has_last;
} mm_request_refs;

/* The front end's lookup: sets kind, width, height and found of each entry
 * (found false: no such upload). -1 with *err for a reference that cannot be
 * used at all (a file that is not media) or a failed lookup (err->internal). */
typedef int (*mm_request_resolve_fn)(void *user, mm_request_refs *refs, mm_request_error *err);

/* ---------------------------------------------------------------- as settled */

typedef struct mm_request_lora {
    char name[MM_LORA_NAME_MAX + 1];
    double strength;
} mm_request_lora;

typedef struct mm_request_sampler {
    mm_sampler_kind kind;
    char preset[MM_PRESET_NAME_MAX + 1];
    int n_sigmas;
    double sigmas[MM_SIGMAS_MAX];
} mm_request_sampler;

typedef struct mm_request {
    const char *prompt; /* borrowed from the input */
    char partition[8];  /* "fl2va" or "ref2va" */
    int n_refs;
    mm_request_ref refs[MM_MAX_REFERENCES];
    bool has_last_image;
    mm_request_ref last_image;
    int frames, width, height, steps;
    int count;                              /* generations to queue (1 for the CLI) */
    uint64_t seeds[MM_NUM_GENERATIONS_MAX]; /* one per generation */
    bool seed_drawn;
    bool no_audio, fast;
    int crf;
    char preset[16];
    /* The few-step fields: adapters by name (resolved by the worker's
     * engine), the sampler (a preset sets steps), sparse attention and the
     * step cache. */
    int n_loras;
    mm_request_lora loras[MM_LORAS_MAX];
    mm_request_sampler sampler;
    char sparse[MM_PRESET_NAME_MAX + 1]; /* "off" or a preset name */
    mm_step_cache_config cache; /* off when zeroed */
    mm_rule_notes notes; /* adjustments made (snapped values), reported as warnings */
} mm_request;

/* The input as a request, or -1 with *err naming the first bad field.
 * resolve may be NULL when the front end takes no references. */
int mm_request_settle(const mm_request_input *in, mm_request_resolve_fn resolve, void *user, mm_request *out,
                      mm_request_error *err);

/* Only the few-step fields (loras, sampler, sparse, cache) of in into out,
 * the rest of out unchanged: for a stored job read back. */
int mm_request_settle_extras(const mm_request_input *in, mm_request *out, mm_request_error *err);

/* The invariants of a settled request, for a consumer that may be handed one
 * from elsewhere (the engine): canvas and frames on their grids, values in
 * range, references within the limits and the partition's kinds. */
int mm_request_verify(const mm_request *r, mm_error *err);

/* ---------------------------------------------------------------- front ends */

/* The fields of POST /api/ai/queue (docs/API.md) into *in: refuses unknown
 * fields and values of the wrong JSON type; strings are borrowed from body. */
int mm_request_input_from_json(json_t *body, mm_request_input *in, mm_request_error *err);
/* Only the few-step fields of a JSON object (a stored job's columns). */
int mm_request_input_extras_from_json(json_t *object, mm_request_input *in, mm_request_error *err);

/* One field given as text (a command-line flag's value), named as in the API
 * ("frames", "seconds", "width", "height", "size", "steps", "seed", "crf",
 * "preset", "partition", "sparse", "cache"): -1 when the text is not of the
 * field's type. The text is borrowed. */
int mm_request_input_set_text(mm_request_input *in, const char *field, const char *text, mm_request_error *err);

/* The few-step fields as stored: JSON texts the caller frees (sampler: NULL
 * for the default); the cache setting is stored as mm_step_cache_name's text,
 * which parses back to the same configuration. */
char *mm_request_loras_json(const mm_request *r);
char *mm_request_sampler_json(const mm_request *r);

/* The field list the API accepts, for "is not a field of this request". */
#define MM_REQUEST_FIELDS                                                                                       \
    "prompt, image_ids, last_image_id, frames, seconds, width, height, size, short_edge, steps, seed, partition, "   \
    "no_audio, " \
    "fast, crf, preset, loras, sampler, sparse, cache, and from Oxen clients model, duration, aspect_ratio, "    \
    "num_generations, generate_audio"

#endif
