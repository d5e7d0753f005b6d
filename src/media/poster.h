/* Poster frames and thumbnails: a still picture for a video or an image. */
#ifndef MMH3_MEDIA_POSTER_H
#define MMH3_MEDIA_POSTER_H

#include "core/error.h"

/* Writes a still of `in` to `out` (.jpg/.jpeg, .webp or .png by extension;
 * .part + rename): the first frame of a video, or the image itself, turned
 * upright (display matrix / EXIF orientation) and scaled down to fit inside
 * max_edge x max_edge (0 = full size). Opens `in` with the same fences and
 * default limits as mm_media_probe(); an audio file has no picture and
 * fails. */
int mm_media_poster(const char *in, const char *out, int max_edge, mm_error *err);

#endif
