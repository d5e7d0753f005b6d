/* The adapters a worker can apply, as the API lists them (GET /api/loras,
 * sql/007_loras.sql): every *.safetensors of $MODELS_PATH/loras (ComfyUI's
 * layout, sub-folders included) with what its header says, the sampler it
 * was distilled for (sampler/schedule.h: mm_schedule_from_adapter), or why it
 * cannot be used. Headers only; the support files beside the adapters (the
 * SiLU(temb) grid, docs/LORA.md) are not adapters and are left out. */
#ifndef MMH3_ENGINE_LORA_CATALOG_H
#define MMH3_ENGINE_LORA_CATALOG_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "core/error.h"

/* A fingerprint of the folder (names, sizes, modification times): a change
 * of any adapter file changes it. models_path NULL: $MODELS_PATH, else the
 * default (model/lora/lora.h, mm_lora_dir). */
int mm_lora_catalog_fingerprint(const char *models_path, uint64_t *out, mm_error *err);

/* The catalogue: a JSON array of {name, family, rank, alpha, targets, bytes,
 * preset, forwards, warnings, error} sorted by name (caller decrefs).
 * Messages name files relative to the folder, never where it is. */
int mm_lora_catalog_scan(const char *models_path, json_t **out, mm_error *err);

/* The adapter folder itself (model/lora/lora.h: mm_lora_dir), for callers
 * that keep it out of what users see. */
const char *mm_lora_catalog_dir(const char *models_path, char *buf, size_t n);

#endif
