/* The rules a render request obeys: the limits, the accepted-value texts and
 * one check per value. mm_request_settle() (request/request.h) applies them for
 * every front end (`mmh3 generate`, the HTTP API, /v1/videos, hub jobs), so all
 * accept and snap exactly the same values.
 *
 * Length: H3 renders 17n+5 frames at 24 fps. A frame count is snapped down to
 * that grid, a duration in seconds is converted at 24 fps and snapped up.
 * Canvas: width and height are multiples of 32, 32..2048 (a given off-grid
 * value is snapped to the nearest multiple, with a warning: 700 -> 704; a
 * value halfway between two goes down, 720 -> 704). 32 is
 * the model's real minimum: one DiT patch of 2x2 latents at the VAE's /16.
 * One given axis: the other follows the aspect of the first reference
 * image/video, else 16:9. "Size N" is a square N x N, as in the original
 * project's --size; with an aspect_ratio (Oxen's clients) N is the short edge,
 * and "short edge N" (OpenAI-style clients' target.short_edge) is the short
 * edge at the references' aspect. Nothing given: 1280x704 without references;
 * with one, short edge 768 at its aspect, area capped at 1344x768.
 *
 * Each check fills err with the problem only ("3 is below the minimum 5");
 * the caller names the field and adds the matching MM_ACCEPT_* text.
 */
#ifndef MMH3_REQUEST_RULES_H
#define MMH3_REQUEST_RULES_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"

#define MM_FPS 24
#define MM_FRAMES_MIN 5
#define MM_FRAMES_MAX 362 /* 15 s, the top of H3's training range */
#define MM_FRAMES_DEFAULT 124
#define MM_DIM_GRID 32
#define MM_DIM_MIN 32
#define MM_DIM_MAX 2048
#define MM_DEFAULT_WIDTH 1280
#define MM_DEFAULT_HEIGHT 704
#define MM_REF_SHORT_EDGE 768
#define MM_REF_MAX_AREA (1344 * 768)
#define MM_STEPS_MIN 2
#define MM_STEPS_MAX 200
#define MM_STEPS_DEFAULT 28
#define MM_PROMPT_MAX_CHARS 8000
#define MM_MAX_REF_IMAGES 9
#define MM_MAX_REF_VIDEOS 3
#define MM_MAX_REF_AUDIO 3
#define MM_CRF_DEFAULT 18
#define MM_PRESET_DEFAULT "medium"
#define MM_SEED_MAX 9007199254740991LL /* 2^53-1: exact in JSON and JavaScript */
#define MM_MAX_REFERENCES 15 /* 9 images + 3 videos + 3 audio clips */
#define MM_NUM_GENERATIONS_MAX 4
/* Few-step adapters, samplers, sparse attention and step caching. */
#define MM_LORAS_MAX 8
#define MM_LORA_NAME_MAX 128
#define MM_LORA_STRENGTH_MAX 100.0 /* ComfyUI's range */
#define MM_PRESET_NAME_MAX 64 /* sampler and sparse-attention preset names */
#define MM_SIGMAS_MIN 2
#define MM_SIGMAS_MAX 201

typedef enum mm_reference_kind { MM_REF_IMAGE, MM_REF_VIDEO, MM_REF_AUDIO } mm_reference_kind;

#define MM_ACCEPT_FRAMES "integer 5..362, snapped down to the 17n+5 grid (5, 22, 39, ..., 124, ..., 362)"
#define MM_ACCEPT_SECONDS "number > 0 and <= 15.08, converted at 24 fps and snapped up to the 17n+5 grid"
#define MM_ACCEPT_DIM "integer 32..2048, a multiple of 32 (off-grid values are snapped to the nearest, 700 -> 704)"
#define MM_ACCEPT_SIZE \
    "\"WxH\" (e.g. \"1344x768\") or \"N\" (a square NxN; with aspect_ratio the short edge), each 32..2048"
#define MM_ACCEPT_SHORT_EDGE "integer 32..2048: the short edge, the long one from the reference's aspect or 16:9"
#define MM_ACCEPT_STEPS "integer 2..200 (default 28)"
#define MM_ACCEPT_CRF "integer 0..51 (default 18)"
#define MM_ACCEPT_PRESET "one of ultrafast, superfast, veryfast, faster, fast, medium, slow, slower, veryslow"
#define MM_ACCEPT_PROMPT "string of 1..8000 characters, not only whitespace"
#define MM_ACCEPT_SEED_NUMBER "integer 0..9007199254740991"
#define MM_ACCEPT_SEED MM_ACCEPT_SEED_NUMBER ", or null for a drawn seed" /* JSON */
#define MM_ACCEPT_PARTITION "\"fl2va\" or \"ref2va\""
#define MM_ACCEPT_LORA                                                                                       \
    "an adapter in $MODELS_PATH/loras (name, \".safetensors\" optional) with an optional :STRENGTH, a number "  \
    "-100..100 (default 1); up to 8"
#define MM_ACCEPT_ASPECT "\"W:H\" with integers 1..64 and a ratio between 1:4 and 4:1 (e.g. \"16:9\", \"9:16\", \"1:1\")"
#define MM_ACCEPT_REFERENCES "at most 9 images, 3 videos and 3 audio clips"
#define MM_ACCEPT_MODEL "\"minimax-h3\" (or \"minimax-h3-fl2va\" / \"minimax-h3-ref2va\", which pick the partition)"
#define MM_ACCEPT_NUM_GENERATIONS "integer 1..4 (one generation each; a given seed counts up per generation)"
#define MM_ACCEPT_LORAS "at most 8 adapters [{\"name\": NAME, \"strength\": S}], each name once"
#define MM_ACCEPT_LORA_NAME \
    "1..128 characters from A-Z a-z 0-9 . _ - /, a file of the adapter folder (sub-folders with '/'; no part " \
    "starting with '.')"
#define MM_ACCEPT_LORA_STRENGTH "a number -100..100 (default 1)"
#define MM_ACCEPT_SAMPLER \
    "a preset name (1..64 characters from a-z 0-9 -) or 2..201 strictly decreasing sigmas in 0..1 ending at 0"
#define MM_ACCEPT_SPARSE "\"off\" or a preset name (1..64 characters from a-z 0-9 -)"

/* Adjustments made to a request, reported back as warnings. */
#define MM_NOTES_MAX 8
typedef struct mm_rule_notes {
    int n;
    char msg[MM_NOTES_MAX][192];
} mm_rule_notes;

void mm_notes_add(mm_rule_notes *notes, const char *fmt, ...) MM_PRINTF(2, 3);

/* The largest grid value <= frames (0 when frames < 5), the smallest >= frames. */
int mm_frames_snap_down(int frames);
int mm_frames_snap_up(int frames);

/* frames as requested -> frames on the grid (noted when snapped). */
int mm_rule_frames(long long frames, int *out, mm_rule_notes *notes, mm_error *err);
/* seconds -> frames: x24, snapped up. */
int mm_rule_seconds(double seconds, int *out, mm_rule_notes *notes, mm_error *err);
/* One axis as requested -> the nearest value on the 32-px grid; `what` names
 * it in the note. */
int mm_rule_dim(const char *what, long long v, int *out, mm_rule_notes *notes, mm_error *err);
int mm_rule_steps(long long steps, int *out, mm_error *err);
int mm_rule_crf(long long crf, int *out, mm_error *err);
bool mm_rule_preset_valid(const char *preset);
/* Counts Unicode code points; rejects invalid UTF-8, NUL, empty/whitespace-only, > 8000. */
int mm_rule_prompt(const char *prompt, size_t len, mm_error *err);

typedef struct mm_canvas_spec {
    int width, height;         /* on the grid (mm_rule_dim), 0 = not given */
    int short_edge;            /* on the grid, 0 = not given */
    int ref_width, ref_height; /* first reference image/video, 0 = none */
} mm_canvas_spec;

/* "W:H" (Oxen's and OpenAI-style clients' aspect_ratio) -> the aspect. Put it
 * in spec.ref_width/ref_height: the canvas then follows the reference rule
 * (short edge 768 at that aspect, area capped at 1344x768; "size N" or one
 * given axis at that aspect), e.g. 16:9 -> 1344x768, 9:16 -> 768x1344. */
int mm_rule_aspect_ratio(const char *ratio, int *aspect_w, int *aspect_h, mm_error *err);

/* "WxH" -> spec width and height, "N" -> spec short_edge (the caller makes
 * it a square unless an aspect ratio is given); each validated and snapped
 * like width/height. */
int mm_rule_size(const char *size, mm_canvas_spec *spec, mm_rule_notes *notes, mm_error *err);
/* The final canvas. Never fails for grid values in range. */
void mm_canvas_resolve(const mm_canvas_spec *spec, int *width, int *height);

/* A few-step adapter's name and strength (settled, not yet applied by the engine). */
int mm_rule_lora_name(const char *name, mm_error *err);
int mm_rule_lora_strength(double strength, mm_error *err);
/* A sampler or sparse-attention preset name: [a-z0-9-], 1..64 characters. */
int mm_rule_preset_name(const char *name, mm_error *err);
/* A custom sigma list: 2..201 values in [0, 1], strictly decreasing, the last 0. */
int mm_rule_sigmas(const double *sigmas, int n, mm_error *err);

/* The shortest "%g" text that reads back as exactly v (0.08 -> "0.08"). */
void mm_number_shortest(double v, char *buf, size_t n);

#endif
