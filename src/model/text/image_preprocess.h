/* Qwen3-VL image and video preprocessing, as the transformers processors do
 * it: smart_resize to a multiple of patch·merge inside the pixel bounds,
 * antialiased bicubic resize on uint8, (x/255 − mean)/std, temporal padding
 * to the temporal patch, and patches enumerated merge-window-major with each
 * patch vector laid out [c][t][y][x]. Plus the 2 fps frame sampling of
 * reference videos.
 *
 * All pixel buffers are interleaved RGB uint8, row-major (H, W, 3); videos
 * are (T, H, W, 3).
 */
#ifndef MMH3_MODEL_TEXT_IMAGE_PREPROCESS_H
#define MMH3_MODEL_TEXT_IMAGE_PREPROCESS_H

#include <stdint.h>

#include "core/error.h"
#include "model/text/qwen3vl_config.h"

/* One processor output: what the vision tower consumes. */
typedef struct mm_vision_pixels {
    float *data;       /* n_patches × patch_dim, fp32, malloc'ed */
    int64_t n_patches;
    int64_t patch_dim; /* channels · temporal_patch · patch² */
    int64_t grid[3];   /* (t, h, w) in patches */
} mm_vision_pixels;

void mm_vision_pixels_free(mm_vision_pixels *p);

/* transformers' smart_resize for images (rounding half to even, then the
 * floor/ceil branches when outside [min_pixels, max_pixels]). */
int mm_qwen3vl_smart_resize(int64_t h, int64_t w, int factor, int64_t min_pixels, int64_t max_pixels, int64_t *out_h,
                            int64_t *out_w, mm_error *err);
/* The video variant: the budget covers all n_frames frames together. */
int mm_qwen3vl_smart_resize_video(int64_t n_frames, int64_t h, int64_t w, int temporal_factor, int factor,
                                  int64_t min_pixels, int64_t max_pixels, int64_t *out_h, int64_t *out_w,
                                  mm_error *err);

/* Antialiased bicubic resize (a = −0.5, the support widened by the
 * downscale factor), separable, horizontal pass first, uint8 intermediate,
 * int16 fixed-point weights: torchvision's uint8 antialias path, which the
 * reference processor runs (bit-exact on the kit). A pass whose size is
 * unchanged is skipped. */
int mm_resize_bicubic_u8(const uint8_t *src, int64_t h, int64_t w, int channels, uint8_t *dst, int64_t out_h,
                         int64_t out_w, mm_error *err);

/* The image processor: one RGB image → patches (the frame repeated over the
 * temporal patch). */
int mm_qwen3vl_preprocess_image(const mm_qwen3vl_processor_config *pc, const uint8_t *rgb, int64_t h, int64_t w,
                                mm_vision_pixels *out, mm_error *err);
/* The video processor (do_sample_frames off): n_frames sampled frames →
 * patches, odd counts padded by repeating the last frame; one resize for all
 * frames (the budget is shared). */
int mm_qwen3vl_preprocess_video(const mm_qwen3vl_processor_config *pc, const uint8_t *frames, int64_t n_frames,
                                int64_t h, int64_t w, mm_vision_pixels *out, mm_error *err);

/* Patchify already-sized frames (h, w multiples of patch·merge); no resize.
 * n_frames is padded up to the temporal patch by repeating the last frame. */
int mm_qwen3vl_patchify(const mm_qwen3vl_processor_config *pc, const uint8_t *frames, int64_t n_frames, int64_t h,
                        int64_t w, mm_vision_pixels *out, mm_error *err);

/* 2 fps sampling of a reference video with n_frames frames at fps: frame
 * index round(k·fps/2) (half to even) while < n_frames, duplicates dropped;
 * times[k] = index/fps seconds. indices/times need room for
 * mm_qwen3vl_sample_count(n_frames, fps) entries. Fails below 2 samples
 * (the video processor needs at least one full temporal patch). */
int64_t mm_qwen3vl_sample_count(int64_t n_frames, double fps);
int mm_qwen3vl_sample_2fps(int64_t n_frames, double fps, int64_t *indices, double *times, int64_t *n_out,
                           mm_error *err);

#endif
