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
    mm_rule_notes notes;
} mm_enqueue;

#define MM_ENQUEUE_FIELDS \
    "prompt, image_ids, last_image_id, frames, seconds, width, height, size, steps, seed, partition, no_audio, " \
    "fast, crf, preset"

/* 0, or -1 with *fe saying which field is wrong and what is accepted. */
int mm_enqueue_parse(json_t *body, mm_enqueue *q, mm_field_error *fe);

#endif
