/* Qwen3-VL configuration: the text decoder, the vision tower and the
 * processor, read from the release's JSON files (`text_encoder/config.json`,
 * `processor/preprocessor_config.json`, `video_preprocessor_config.json`) or
 * from the same objects embedded in a conformance manifest.
 *
 * Nothing here has a built-in default for a model dimension: a missing key is
 * an error naming the key, so a kit of another size or a future release is
 * read as it is, never silently as the 32B model.
 */
#ifndef MMH3_MODEL_TEXT_QWEN3VL_CONFIG_H
#define MMH3_MODEL_TEXT_QWEN3VL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/error.h"

#define MM_QWEN3VL_MAX_DEEPSTACK 8

typedef struct mm_qwen3vl_text_config {
    int hidden;            /* hidden_size */
    int n_heads;           /* num_attention_heads */
    int n_kv_heads;        /* num_key_value_heads */
    int head_dim;          /* head_dim (q width = n_heads * head_dim, not hidden) */
    int intermediate;      /* SwiGLU width */
    int n_layers;          /* num_hidden_layers of the full model (64 for the release) */
    int vocab;             /* embedding rows */
    double rope_theta;
    float rms_eps;
    int mrope_section[3];  /* T, H, W frequency counts; sum = head_dim / 2 */
    bool mrope_interleaved;
    int64_t max_positions;
} mm_qwen3vl_text_config;

typedef struct mm_qwen3vl_vision_config {
    int depth;
    int hidden;
    int n_heads;
    int intermediate;
    int patch;           /* spatial patch side */
    int temporal_patch;  /* frames per temporal patch */
    int merge;           /* spatial_merge_size */
    int in_channels;
    int out_hidden;      /* merged token width = text hidden */
    int num_pos_embed;   /* learned table rows (a square side²) */
    int deepstack[MM_QWEN3VL_MAX_DEEPSTACK]; /* block indices whose outputs feed deepstack mergers */
    int n_deepstack;
    bool gelu_tanh;      /* hidden_act gelu_pytorch_tanh (else exact erf) */
} mm_qwen3vl_vision_config;

typedef struct mm_qwen3vl_config {
    mm_qwen3vl_text_config text;
    mm_qwen3vl_vision_config vision;
    int32_t image_token_id;
    int32_t video_token_id;
    int32_t vision_start_token_id;
    int32_t vision_end_token_id;
} mm_qwen3vl_config;

/* One processor (image or video). */
typedef struct mm_qwen3vl_processor_config {
    int64_t min_pixels;  /* size.shortest_edge (a pixel count, not an edge) */
    int64_t max_pixels;  /* size.longest_edge (for videos: all frames together) */
    int patch;
    int temporal_patch;
    int merge;
    float mean[3];
    float std[3];
} mm_qwen3vl_processor_config;

/* `json` is a jansson json_t* (void* keeps jansson out of this header). */
int mm_qwen3vl_config_from_json(mm_qwen3vl_config *cfg, const void *json, mm_error *err);
int mm_qwen3vl_config_load(mm_qwen3vl_config *cfg, const char *path, mm_error *err);
int mm_qwen3vl_processor_config_from_json(mm_qwen3vl_processor_config *pc, const void *json, mm_error *err);
int mm_qwen3vl_processor_config_load(mm_qwen3vl_processor_config *pc, const char *path, mm_error *err);

/* Checks the internal consistency a forward relies on (head counts divide,
 * mrope sections sum to head_dim/2, square pos-embed table, deepstack indices
 * inside the depth, ...). Called by the loaders. */
int mm_qwen3vl_config_validate(const mm_qwen3vl_config *cfg, mm_error *err);

/* Side of the learned position-embedding grid (sqrt(num_pos_embed)). */
int mm_qwen3vl_pos_side(const mm_qwen3vl_vision_config *v);

#endif
