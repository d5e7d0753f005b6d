/* POST /api/ai/queue, first phase: the request body checked field by field
 * against the request rules (src/engine/request_rules.h), with no database.
 * The second phase (api_queue.c) checks the referenced uploads, picks the
 * partition and the canvas, and draws the seed. Pure and bounded, so it can
 * be unit-tested and fuzzed on its own.
 */
#ifndef MMH3_FCGI_ENQUEUE_H
#define MMH3_FCGI_ENQUEUE_H

#include <stdbool.h>

#include <jansson.h>

#include "engine/engine.h"
#include "engine/request_rules.h"

typedef struct mm_field_error {
    char field[64];
    char message[768];
    const char *accepted; /* static text, or NULL */
} mm_field_error;

typedef struct mm_enqueue {
    const char *prompt; /* borrowed from the JSON body */
    int n_refs;
    char ref_ids[MM_MAX_REFERENCES][37];
    bool has_last_image;
    char last_image_id[37];
    int frames;         /* 0 = default */
    mm_canvas_spec canvas;
    int steps;
    bool has_seed;
    long long seed;
    char partition[8];  /* "" = choose from the references */
    bool no_audio, fast;
    int crf;
    char preset[16];
    int count;              /* num_generations: rows to insert, 1..4 */
    int aspect_w, aspect_h; /* aspect_ratio, 0 = not given; the canvas follows it like a reference's */
    mm_rule_notes notes;
} mm_enqueue;

/* Oxen.ai / OpenAI-style clients' fields, accepted beside ours: model,
 * duration (= seconds), aspect_ratio, num_generations, generate_audio. */
#define MM_NUM_GENERATIONS_MAX 4
#define MM_ACCEPT_MODEL "\"minimax-h3\" (or \"minimax-h3-fl2va\" / \"minimax-h3-ref2va\", which pick the partition)"
#define MM_ACCEPT_NUM_GENERATIONS "integer 1..4 (one generation each; a given seed counts up per generation)"

#define MM_ENQUEUE_FIELDS \
    "prompt, image_ids, last_image_id, frames, seconds, width, height, size, steps, seed, partition, no_audio, " \
    "fast, crf, preset, and from Oxen clients model, duration, aspect_ratio, num_generations, generate_audio"

/* 0, or -1 with *fe saying which field is wrong and what is accepted. */
int mm_enqueue_parse(json_t *body, mm_enqueue *q, mm_field_error *fe);

#endif
