/* Qwen3-VL 3-axis rotary positions (MRoPE): the (T, H, W) position ids of
 * every row of a presentation, and the interleaved cos/sin tables the
 * decoder's attention applies.
 *
 * Positions (transformers' get_rope_index): text rows advance one position
 * on all three axes; a vision run of merged grid (t, H, W) starting at cursor
 * c puts row (i, r, q) at (c+i, c+r, c+q) and moves the cursor to
 * c + max(t, H, W). Image runs take the image grids in order, video runs
 * the video blocks in order (a video of grid (T, h, w) is T runs of (1, h, w)).
 */
#ifndef MMH3_MODEL_TEXT_MROPE_H
#define MMH3_MODEL_TEXT_MROPE_H

#include <stdint.h>

#include "core/error.h"
#include "model/text/qwen3vl_config.h"

/* Row modality as transformers' mm_token_type_ids. */
enum { MM_ROW_TEXT = 0, MM_ROW_IMAGE = 1, MM_ROW_VIDEO = 2 };

/* pos: 3 × L (axis-major: pos[a*L + i]). grids are (t, h, w) in patches
 * before merging; merge is the spatial merge size. Fails when the runs and
 * the grids do not agree (count or length). */
int mm_mrope_positions(const uint8_t *row_type, int64_t L, const int64_t (*image_grids)[3], int n_images,
                       const int64_t (*video_grids)[3], int n_videos, int merge, int64_t *pos, mm_error *err);

/* cos/sin: L × head_dim fp32 each, the interleaved layout of
 * apply_interleaved_mrope (T base, H on j ≡ 1 mod 3, W on j ≡ 2 mod 3 for the
 * first 3·section frequencies), duplicated over both rotary halves. Angles are
 * formed in fp32 as the reference does. */
int mm_mrope_tables(const mm_qwen3vl_text_config *t, const int64_t *pos, int64_t L, float *cos_out, float *sin_out,
                    mm_error *err);

#endif
