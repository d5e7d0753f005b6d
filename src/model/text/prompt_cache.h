/* The prompt-conditioning cache: (prompt, references, checkpoint) → the
 * conditioner's output rows and their modality tags, so a rerun or a
 * repeated prompt skips the text encoder (and the vision tower) entirely.
 *
 * Two levels: an in-memory LRU bounded in bytes, and an optional directory
 * of files (one per key, "<sha256 hex>.mmpc", written to a temporary name
 * and renamed, checked by a trailing digest when read: a damaged or foreign
 * file is a miss and is removed), bounded in bytes by removing the least
 * recently used files. A disk hit is promoted to memory.
 *
 * Keys are SHA-256 digests over length-prefixed fields, built with the
 * mm_prompt_key_* calls: the checkpoint identity, the encoder settings that
 * change the output (tap layer, output dtype), the prompt bytes, and per
 * reference its kind, flags and exact pixel content. Equal inputs give equal
 * keys; any change of a byte gives another key.
 *
 * Thread-safe: one mutex around the tables (lookups copy out).
 */
#ifndef MMH3_MODEL_TEXT_PROMPT_CACHE_H
#define MMH3_MODEL_TEXT_PROMPT_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"
#include "core/sha256.h"
#include "core/tensor.h"

typedef struct mm_prompt_key {
    uint8_t digest[32];
} mm_prompt_key;

typedef struct mm_prompt_key_builder {
    mm_sha256_ctx sha;
} mm_prompt_key_builder;

/* Field tags keep different fields with equal bytes apart. */
typedef enum mm_prompt_field {
    MM_PK_CHECKPOINT = 1, /* checkpoint identity (e.g. the file's header digest and size) */
    MM_PK_SETTINGS,       /* encoder settings that change the output */
    MM_PK_PROMPT,
    MM_PK_PICTURE,        /* RGB bytes; prefix with MM_PK_SHAPE */
    MM_PK_VIDEO,          /* frames + times; prefix with MM_PK_SHAPE */
    MM_PK_AUDIO,          /* an audio reference's label slot (its content never enters the encoder) */
    MM_PK_SHAPE,
} mm_prompt_field;

void mm_prompt_key_begin(mm_prompt_key_builder *b);
/* Appends (field, length, bytes). */
void mm_prompt_key_add(mm_prompt_key_builder *b, mm_prompt_field field, const void *data, size_t n);
void mm_prompt_key_add_i64(mm_prompt_key_builder *b, mm_prompt_field field, const int64_t *v, size_t count);
void mm_prompt_key_end(mm_prompt_key_builder *b, mm_prompt_key *out);
void mm_prompt_key_hex(const mm_prompt_key *k, char hex[65]);

typedef struct mm_prompt_cache mm_prompt_cache;

typedef struct mm_prompt_cache_stats {
    uint64_t memory_hits, disk_hits, misses, puts, evictions;
    size_t memory_bytes, memory_entries;
} mm_prompt_cache_stats;

/* dir NULL: memory only (the directory is created if missing). A budget of 0
 * disables that level. */
int mm_prompt_cache_create(mm_prompt_cache **out, const char *dir, size_t memory_budget, size_t disk_budget,
                           mm_error *err);
void mm_prompt_cache_destroy(mm_prompt_cache *c);

/* 1 on a hit (embeds: a new contiguous CPU tensor the caller frees; *tags:
 * malloc'ed, embeds->shape[0] bytes), 0 on a miss, -1 on an error (out of
 * memory). */
int mm_prompt_cache_get(mm_prompt_cache *c, const mm_prompt_key *key, mm_tensor *embeds, uint8_t **tags,
                        mm_error *err);
/* Stores a copy of embeds (2-D [rows, width], contiguous, CPU) and tags. A
 * disk write failure is reported (-1) but leaves the memory level updated. */
int mm_prompt_cache_put(mm_prompt_cache *c, const mm_prompt_key *key, const mm_tensor *embeds, const uint8_t *tags,
                        mm_error *err);
void mm_prompt_cache_stats_get(mm_prompt_cache *c, mm_prompt_cache_stats *out);

#endif
