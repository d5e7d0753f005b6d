/* Pillow's LANCZOS resize on 8-bit pixels, bit for bit.
 *
 * The reference pipelines put every picture onto its size with PIL:
 * fl2va keyframes onto the canvas (Image.resize(size, LANCZOS)), the
 * follower keyframe cover-cropped, image references to a 2048 short edge,
 * reference videos onto their canvas — and the VAE/vision encoders see those
 * exact pixels. So this reproduces Pillow's resampler (Resample.c) rather
 * than swscale's Lanczos: separable, horizontal pass first over only the
 * rows the vertical pass reads, weights from a 3-lobe windowed sinc widened
 * by the downscale factor, normalized, converted to 22-bit fixed point,
 * uint8 intermediate; a pass whose size is unchanged is skipped.
 */
#ifndef MMH3_MEDIA_RESIZE_H
#define MMH3_MEDIA_RESIZE_H

#include <stdint.h>

#include "core/error.h"

/* src: h x w pixels of `channels` bytes, packed rows; dst: out_h x out_w.
 * As PIL's img.resize((out_w, out_h), Image.LANCZOS). */
int mm_resize_lanczos_u8(const uint8_t *src, int h, int w, int channels, uint8_t *dst, int out_h, int out_w,
                         mm_error *err);

/* The fl2va follower keyframe (diffusers MiniMaxH3ResizeStep): scaled by
 * max(out_w/w, out_h/h) to (max(out_w, round(w*s)), max(out_h, round(h*s)))
 * with Python's round, LANCZOS, then the centre out_w x out_h cut at
 * ((rw - out_w) // 2, (rh - out_h) // 2). */
int mm_resize_cover_lanczos_u8(const uint8_t *src, int h, int w, int channels, uint8_t *dst, int out_h, int out_w,
                               mm_error *err);

#endif
