/* Still images in and out with the FFmpeg libraries.
 *
 * Reading: any accepted image format (PNG, JPEG, WebP, BMP, GIF = first
 * frame, TIFF) to packed RGB24 at its own size, EXIF orientation applied (as
 * PIL's exif_transpose does), alpha dropped (as PIL's convert("RGB")).
 * The same fences as mm_media_probe() apply: local file only, allowlisted
 * formats, size limits, a time budget.
 *
 * Writing: PNG, JPEG or WebP chosen by the file name's extension, written to
 * "<path>.part" and renamed into place.
 */
#ifndef MMH3_MEDIA_IMAGE_H
#define MMH3_MEDIA_IMAGE_H

#include <stdint.h>

#include "core/error.h"
#include "media/probe.h"

/* Packed RGB24, `stride` = 3 * width bytes per row; owns `rgb`. */
typedef struct mm_image {
    int width, height, stride;
    uint8_t *rgb;
} mm_image;

/* lim NULL = mm_media_limits_defaults(). */
int mm_image_read(const char *path, const mm_media_limits *lim, mm_image *out, mm_error *err);
void mm_image_free(mm_image *img);

/* Encodes rgb (stride bytes per row) to path: ".png", ".jpg"/".jpeg" or
 * ".webp" (case-insensitive). quality 1..100 for JPEG and WebP (0 = 90);
 * PNG is lossless. */
int mm_image_write(const char *path, const uint8_t *rgb, int width, int height, int stride, int quality,
                   mm_error *err);

/* The same encode into memory: type "png", "jpg"/"jpeg" or "webp"; *data
 * is malloc'ed and owned by the caller. */
int mm_image_encode(const char *type, const uint8_t *rgb, int width, int height, int stride, int quality,
                    uint8_t **data, size_t *size, mm_error *err);

/* A JPEG strip: n frames of packed RGB24 width x height, each scaled
 * (bilinear) to frame_width x frame_height (even), side by side left to
 * right. The live previews' picture: scaling and colour conversion run in
 * one swscale pass per frame. *data is malloc'ed, owned by the caller. */
int mm_image_encode_strip(const uint8_t *const *frames, int n, int width, int height, int frame_width,
                          int frame_height, int quality, uint8_t **data, size_t *size, mm_error *err);

/* Writes n bytes to "<path>.part", fsyncs and renames it onto path, so a
 * reader sees the old file or the new one, never a part. */
int mm_file_write_atomic(const char *path, const uint8_t *data, size_t n, mm_error *err);

/* The PNG frame dump (--frames-dir): writes <dir>/frame_<index, 5 digits>.png. */
int mm_frames_dir_write(const char *dir, int index, const uint8_t *rgb, int width, int height, int stride,
                        mm_error *err);

/* Scales rgb to fit inside max_edge x max_edge (keeping its aspect ratio;
 * never enlarges) into a new image. Area averaging: for thumbnails and
 * posters, not for model preprocessing (that needs the reference's resampler). */
int mm_image_fit(const uint8_t *rgb, int width, int height, int stride, int max_edge, mm_image *out, mm_error *err);

#endif
