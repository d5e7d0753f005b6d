/* The MiniMax-H3 prompt presentation: the token rows the conditioner reads.
 *
 * No chat template, no system prompt, no special tokens added. In request
 * order, every reference contributes a label and (for pictures and videos) a
 * vision block; the prompt follows verbatim:
 *
 *   picture i   "<Picture i>: "  <|vision_start|> <|image_pad|>×n <|vision_end|>
 *   video k     ["<Audio j>: " if it has a soundtrack] "<Video k>: " then per
 *               2-frame block "<T.T seconds>" <|vision_start|> <|video_pad|>×n <|vision_end|>
 *   audio j     "<Audio j>: "   (audio never enters the conditioner)
 *   prompt      as given
 *
 * Ordinals count per modality from 1. Every label, timestamp and the prompt
 * are tokenized separately (never the joined string, which BPE could merge
 * across boundaries). Tags: text 1, vision rows (markers included) 0. An
 * empty presentation falls back to one pad (<|endoftext|>) row, tagged text.
 * fl2va is the picture-only case: the first keyframe is <Picture 1>, the
 * last image (--last-image) the final picture.
 */
#ifndef MMH3_MODEL_TEXT_PRESENTATION_H
#define MMH3_MODEL_TEXT_PRESENTATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "core/error.h"

/* The tokenizer, as the presentation needs it: encode one UTF-8 string with
 * added tokens recognised and no special tokens added. *ids is malloc'ed and
 * owned by the caller. */
typedef struct mm_text_tokenizer {
    int (*encode)(void *user, const char *text, size_t len, int32_t **ids, size_t *n_ids, mm_error *err);
    void *user;
} mm_text_tokenizer;

typedef enum mm_pres_kind { MM_PRES_PICTURE, MM_PRES_VIDEO, MM_PRES_AUDIO } mm_pres_kind;

typedef struct mm_pres_item {
    mm_pres_kind kind;
    /* picture and video: (t, h, w) in patches as the processor returned it
     * (a video's t is its number of 2-frame blocks) */
    int64_t grid[3];
    /* video: the sampled frames' times in seconds (before odd-count padding) */
    const double *frame_times;
    int n_frame_times;
    bool has_audio; /* video with a soundtrack: "<Audio j>: " precedes its label */
} mm_pres_item;

/* The special tokens, resolved through the tokenizer by name. */
typedef struct mm_pres_tokens {
    int32_t vision_start, vision_end, image_pad, video_pad, pad;
} mm_pres_tokens;

/* Looks up <|vision_start|>, <|vision_end|>, <|image_pad|>, <|video_pad|> and
 * <|endoftext|> (each must encode to exactly one id). */
int mm_pres_tokens_resolve(const mm_text_tokenizer *tok, mm_pres_tokens *out, mm_error *err);

typedef struct mm_presentation {
    int64_t len;
    int32_t *ids;
    uint8_t *tags;     /* 1 text, 0 vision */
    uint8_t *row_type; /* 0 text, 1 image pad, 2 video pad (mm_token_type_ids) */
    /* grids in presentation order per modality, for the vision calls and MRoPE */
    int n_images;
    int64_t (*image_grids)[3];
    int n_videos;
    int64_t (*video_grids)[3];
} mm_presentation;

/* merge: the processor's spatial merge size (tokens per block = t·h·w/merge²). */
int mm_presentation_build(const mm_text_tokenizer *tok, const mm_pres_tokens *special, const mm_pres_item *items,
                          int n_items, const char *prompt, size_t prompt_len, int merge, mm_presentation *out,
                          mm_error *err);
void mm_presentation_free(mm_presentation *p);

/* The block labels of a video: times padded to an even count by repeating
 * the last one, block b labelled with the mean of its pair, "%.1f" rounding
 * half to even on the binary value ("<0.2 seconds>" for 0.25). buf gets the
 * label of block b. Returns the label length, or -1 if b is out of range. */
int mm_pres_video_block_label(const double *frame_times, int n_frame_times, int block, char *buf, size_t n);

#endif
