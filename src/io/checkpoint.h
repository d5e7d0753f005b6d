/* Finding the model files: the five weight files of the Comfy-Org repack and
 * the small config/tokenizer files of the MiniMaxAI release.
 *
 * Search order for a weight file (the first hit wins):
 *   1. the explicit path (--dit-path, --text-encoder-path, --video-vae-path,
 *      --audio-vae-path): must exist;
 *   2. $MODELS_PATH/<comfy-relative path>, e.g.
 *      diffusion_models/minimax_h3_fl2va_pruned_int8_convrot.safetensors
 *      ($MODELS_PATH defaults to /data/shared/models);
 *   3. $MODELS_PATH/<bare file name>;
 *   4. the Hugging Face cache: $HF_HUB_CACHE, else $HF_HOME/hub, else
 *      ~/.cache/huggingface/hub — models--Comfy-Org--MiniMax-H3/snapshots/
 *      <the revision refs/main names, else any>/<comfy-relative path>;
 *   5. only when downloads are allowed: the hub ($HF_ENDPOINT, default
 *      https://huggingface.co), downloaded to $MODELS_PATH/<comfy-relative
 *      path> (resumable, size and sha256 checked; see io/download.h).
 * When nothing is found, the error lists every place looked at and names
 * the other variants of the file found there (the _bf16 or fp8 exports, the
 * non-pruned DiT, ...), which mmh3 cannot use.
 *
 * The config files (tokenizer/, processor/, text_encoder/config.json of the
 * FL2VA folder of MiniMaxAI/MiniMax-H3) are found the same way as a folder:
 * --config-path (the FL2VA folder, or a checkout holding FL2VA/),
 * $MODELS_PATH/MiniMax-H3/FL2VA, $MODELS_PATH/FL2VA, the HF cache of
 * MiniMaxAI/MiniMax-H3, then (with downloads allowed) the hub. */
#ifndef MMH3_IO_CHECKPOINT_H
#define MMH3_IO_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>

#include "core/error.h"
#include "io/download.h"

typedef enum mm_component {
    MM_COMP_DIT_FL2VA = 0,
    MM_COMP_DIT_REF2VA,
    MM_COMP_TEXT_ENCODER,
    MM_COMP_VIDEO_VAE,
    MM_COMP_AUDIO_VAE,
    MM_COMP_CONFIG, /* the FL2VA config/tokenizer folder */
    MM_COMP_COUNT
} mm_component;

typedef struct mm_component_info {
    const char *key;      /* "dit_fl2va" */
    const char *title;    /* "DiT (fl2va)" */
    const char *flag;     /* the CLI override, "--dit-path" */
    const char *repo;     /* "Comfy-Org/MiniMax-H3" */
    const char *rel_path; /* "diffusion_models/minimax_h3_fl2va_pruned_int8_convrot.safetensors" */
    const char *family;   /* file-name prefix shared by every variant: "minimax_h3_fl2va" */
} mm_component_info;

const mm_component_info *mm_component_get(mm_component c);

/* Files the config folder must hold (relative to it); NULL-terminated.
 * The tokenizer may be tokenizer/tokenizer.json instead of vocab + merges. */
extern const char *const mm_config_files[];

typedef enum mm_found_where {
    MM_FOUND_OVERRIDE = 0,
    MM_FOUND_MODELS_REL,
    MM_FOUND_MODELS_BARE,
    MM_FOUND_HF_CACHE,
    MM_FOUND_DOWNLOADED,
} mm_found_where;

const char *mm_found_where_name(mm_found_where w); /* "explicit path", "$MODELS_PATH", ... */

typedef struct mm_checkpoint_opts {
    const char *override[MM_COMP_COUNT]; /* explicit paths, or NULL */
    const char *models_path;             /* NULL: $MODELS_PATH, else /data/shared/models */
    const char *hf_cache;                /* NULL: $HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub */
    const char *endpoint;                /* NULL: $HF_ENDPOINT, else https://huggingface.co */
    bool allow_download;
    void (*progress)(void *user, const char *what, uint64_t have, uint64_t total);
    void *user;
} mm_checkpoint_opts;

typedef struct mm_resolved {
    char path[4096];
    mm_found_where where;
} mm_resolved;

int mm_checkpoint_resolve(mm_component c, const mm_checkpoint_opts *o, mm_resolved *out, mm_error *err);

/* The directories the options resolve to (for messages and `mmh3 check`). */
void mm_checkpoint_models_path(const mm_checkpoint_opts *o, char *buf, size_t n);
void mm_checkpoint_hf_cache(const mm_checkpoint_opts *o, char *buf, size_t n);

/* What a file name says about its variant, when it belongs to c's family but
 * is not the expected file: "the bf16 export", "the non-pruned DiT", ... or
 * NULL when the name is the expected one or unrelated. */
const char *mm_checkpoint_variant(mm_component c, const char *file_name);

#endif
